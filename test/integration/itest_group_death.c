/*
 * itest_group_death: a group member dies (SIGKILL) before a collective; the
 * survivor's collectives that need it end instead of waiting forever.
 *
 * Group of two: the server (member 0) and the client (member 1), each with
 * its connection to the other and a loopback connection to itself. The
 * server kills the client and waits for con_error. Then, with the dead
 * member as root, pscom_post_bcast completes with ERROR and pscom_bcast
 * returns; pscom_barrier returns too. (Until 2026-11-29 a collective
 * receive posted on a connection that had already failed waited forever:
 * only receives already waiting when it failed were failed.)
 */
#include "pscom_testutil.h"

#include <signal.h>
#include <stdlib.h>
#include <string.h>

#define GID 7

/* the member's connection to itself (loopback: a NULL endpoint string) */
static pscom_connection_t *self_con(pscom_socket_t *sock)
{
    pscom_connection_t *c = pscom_open_connection(sock);
    TU_ASSERT_NOT_NULL(c);
    TU_ASSERT_OK(pscom_connect(c, NULL, 0, PSCOM_CON_FLAG_DIRECT));
    return c;
}

static int server(tu_ctx_t *ctx)
{
    pscom_socket_t *sock = tu_open_socket(ctx, 0, 0);
    sock->ops.con_error  = tu_on_con_error;
    pscom_connection_t *cons[2];
    cons[1] = tu_server_accept_one(ctx, sock);
    cons[0] = self_con(sock);
    pscom_group_t *g = pscom_group_open(sock, GID, 0, 2, cons);
    TU_ASSERT_NOT_NULL(g);
    TU_ASSERT_EQ(tu_wait_signal(ctx, 1), 1); /* the client's group is open */
    TU_ASSERT_EQ(kill(ctx->client_pids[1], SIGKILL), 0);
    while (!tu_error_of(cons[1])) pscom_wait_any();

    char data[64];
    memset(data, 0, sizeof(data));
    tu_step("pscom_post_bcast from the dead root");
    pscom_request_t *r = pscom_request_create(sizeof(pscom_xheader_bcast_t), 0);
    r->socket                       = sock;
    r->xheader.bcast.group_id       = GID;
    r->xheader.bcast.bcast_root     = 1;
    r->xheader_len                  = sizeof(pscom_xheader_bcast_t);
    r->data                         = data;
    r->data_len                     = sizeof(data);
    pscom_post_bcast(r);
    pscom_wait(r);
    TU_ASSERT_STATE_HAS(r->state, PSCOM_REQ_STATE_ERROR);
    pscom_request_free(r);

    tu_step("pscom_bcast from the dead root");
    pscom_bcast(g, 1, NULL, 0, data, sizeof(data));
    tu_step("pscom_barrier");
    pscom_barrier(g);

    pscom_group_close(g);
    pscom_close_connection(cons[0]);
    pscom_close_connection(cons[1]);
    pscom_close_socket(sock);
    return 0;
}

static int client(tu_ctx_t *ctx)
{
    pscom_socket_t *sock = tu_open_socket(ctx, 0, 0);
    pscom_connection_t *cons[2];
    cons[0]          = tu_client_connect(ctx, sock);
    cons[1]          = self_con(sock);
    pscom_group_t *g = pscom_group_open(sock, GID, 1, 2, cons);
    TU_ASSERT_NOT_NULL(g);
    tu_signal(ctx, TU_SERVER, 1);
    tu_wait_signal(ctx, TU_SERVER); /* killed while waiting */
    TU_FAIL("not killed");
}

int main(void)
{
    tu_opts_t opts = {.killed_must_mask = 1u << 1};
    return tu_run("group_death", 1, server, client, &opts);
}
