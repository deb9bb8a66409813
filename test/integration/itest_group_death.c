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
 *
 * Second scenario, "mid_message" (over tcp only: the message must arrive
 * in pieces): the client (root) broadcasts 64 MiB; the server has taken
 * part of it (kept for a later receive) when it stops the client
 * (SIGSTOP), then waits for the rest in pscom_bcast while a thread of its
 * own kills the client. The broadcast ends with the data incomplete
 * instead of using the kept message after the connection's failure freed
 * it (until 2026-11-29: a use after free, seen by ASan).
 */
#include "pscom_testutil.h"

#include <pthread.h>
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

/* The group of two with a member's socket, its connection to the other
 * member and to itself (server: member 0, client: member 1). */
typedef struct member {
    pscom_socket_t *sock;
    pscom_connection_t *cons[2];
    pscom_group_t *g;
} member_t;

static void member_open(tu_ctx_t *ctx, member_t *m)
{
    uint32_t me = ctx->rank == TU_SERVER ? 0 : 1;
    m->sock     = tu_open_socket(ctx, 0, 0);
    m->sock->ops.con_error = tu_on_con_error;
    m->cons[1 - me] = me ? tu_client_connect(ctx, m->sock) : tu_server_accept_one(ctx, m->sock);
    m->cons[me]     = self_con(m->sock);
    m->g            = pscom_group_open(m->sock, GID, me, 2, m->cons);
    TU_ASSERT_NOT_NULL(m->g);
}

static void member_close(member_t *m)
{
    pscom_group_close(m->g);
    pscom_close_connection(m->cons[0]);
    pscom_close_connection(m->cons[1]);
    pscom_close_socket(m->sock);
}

static int server(tu_ctx_t *ctx)
{
    member_t m;
    member_open(ctx, &m);
    pscom_group_t *g = m.g;
    TU_ASSERT_EQ(tu_wait_signal(ctx, 1), 1); /* the client's group is open */
    TU_ASSERT_EQ(kill(ctx->client_pids[1], SIGKILL), 0);
    while (!tu_error_of(m.cons[1])) pscom_wait_any();

    char data[64];
    memset(data, 0, sizeof(data));
    tu_step("pscom_post_bcast from the dead root");
    pscom_request_t *r = pscom_request_create(sizeof(pscom_xheader_bcast_t), 0);
    r->socket                       = m.sock;
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
    member_close(&m);
    return 0;
}

static int client(tu_ctx_t *ctx)
{
    member_t m;
    member_open(ctx, &m);
    tu_signal(ctx, TU_SERVER, 1);
    tu_wait_signal(ctx, TU_SERVER); /* killed while waiting */
    TU_FAIL("not killed");
}

/* ---- mid_message ---------------------------------------------------------------- */

#define BIG (64u << 20)

static pid_t victim;

static void *killer(void *arg)
{
    (void)arg;
    double t0 = tu_now_ms();
    while (tu_now_ms() - t0 < 100.0) { /* the server is waiting in pscom_bcast by then */
    }
    kill(victim, SIGKILL);
    return NULL;
}

static int mid_server(tu_ctx_t *ctx)
{
    member_t m;
    member_open(ctx, &m);
    TU_ASSERT_EQ(tu_wait_signal(ctx, 1), 1); /* the client broadcasts */
    for (int i = 0; i < 20; i++) pscom_test_any(); /* a part of it, kept */
    victim = ctx->client_pids[1];
    TU_ASSERT_EQ(kill(victim, SIGSTOP), 0);
    pthread_t th;
    TU_ASSERT_EQ(pthread_create(&th, NULL, killer, NULL), 0);
    unsigned char *data = tu_malloc(BIG);
    tu_step("pscom_bcast: the rest of a message whose sender dies");
    pscom_bcast(m.g, 1, NULL, 0, data, BIG);
    pthread_join(th, NULL);
    while (!tu_error_of(m.cons[1])) pscom_wait_any();
    free(data);
    member_close(&m);
    return 0;
}

static int mid_client(tu_ctx_t *ctx)
{
    member_t m;
    member_open(ctx, &m);
    unsigned char *data = tu_malloc(BIG);
    memset(data, 0x5a, BIG);
    tu_signal(ctx, TU_SERVER, 1);
    pscom_bcast(m.g, 1, NULL, 0, data, BIG); /* stopped, then killed, in here */
    TU_FAIL("not killed");
}

int main(void)
{
    tu_opts_t opts = {.killed_must_mask = 1u << 1};
    if (tu_run("group_death", 1, server, client, &opts)) return 1;
    const char *type = tu_contype();
    if (!type || strcmp(type, "tcp")) return 0;
    return tu_run("group_death_mid_message", 1, mid_server, mid_client, &opts);
}
