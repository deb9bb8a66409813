/*
 * itest_ondemand_cross: pairs send their first messages to each other at
 * the same moment (spec 5.7: both ends end up with one connection whatever
 * the timing).
 *
 * 16 clients form 8 pairs; the server is only the coordinator (no pscom
 * traffic). Every round each client opens a fresh socket, learns its
 * partner's port through the server, creates an on-demand connection to
 * it, and waits for the server's "go", sent to everybody at once. Then
 * both partners post their first send at once - the lower name starts its
 * connect while the higher one asks it to connect back, and each side's
 * connect crosses the other's request - followed by a burst of messages
 * in both directions. Checked: content, length and order of every
 * message; afterwards each socket lists exactly one connection, of a real
 * transport, to the partner's name, and con_accept was never called.
 */
#include "pscom_testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NCLIENTS 16
#define ROUNDS   8
#define BURST    12

enum { SIG_READY = 1, SIG_GO, SIG_DONE };

static volatile int accepts;

static void on_accept(pscom_connection_t *con)
{
    (void)con;
    accepts++;
}

static void on_error(pscom_connection_t *con, pscom_op_t op, pscom_err_t err)
{
    if (err == PSCOM_ERR_EOF) return; /* the partner closing */
    TU_FAIL("con_error(%s, %s) on the connection to \"%.8s\"", pscom_op_str(op), tu_err_str(err),
            con->remote_con_info.name);
}

static int partner_of(int rank)
{
    return rank % 2 ? rank + 1 : rank - 1;
}

static void name_of(char *buf, size_t len, int round, int rank)
{
    snprintf(buf, len, "x%02d%05d", round, rank);
}

static int server(tu_ctx_t *ctx)
{
    uint32_t port[NCLIENTS + 1];
    for (int r = 0; r < ROUNDS; r++) {
        for (int c = 1; c <= NCLIENTS; c++) port[c] = tu_wait_signal(ctx, c);
        for (int c = 1; c <= NCLIENTS; c++) tu_signal(ctx, c, port[partner_of(c)]);
        for (int c = 1; c <= NCLIENTS; c++) TU_ASSERT_EQ(tu_wait_signal(ctx, c), SIG_READY);
        for (int c = 1; c <= NCLIENTS; c++) tu_signal(ctx, c, SIG_GO);
        for (int c = 1; c <= NCLIENTS; c++) TU_ASSERT_EQ(tu_wait_signal(ctx, c), SIG_DONE);
    }
    return 0;
}

static uint32_t seed_of(int round, int from, int k)
{
    return (uint32_t)(round * 1000003 + from * 1009 + k + 7);
}

static size_t len_of(int k)
{
    static const size_t l[] = {1, 0, 300, 5000, 70000, 8};
    return l[k % 6];
}

static pscom_request_t *post(pscom_connection_t *con, int send, int round, int from, int k)
{
    size_t len           = len_of(k);
    pscom_request_t *req = pscom_request_create(8, 0);
    TU_ASSERT_NOT_NULL(req);
    req->connection  = con;
    req->xheader_len = 8;
    req->data_len    = send ? len : len + 16;
    req->data        = tu_malloc(req->data_len);
    if (send) {
        uint32_t xh[2] = {(uint32_t)from, (uint32_t)k};
        memcpy((void *)&req->xheader, xh, sizeof(xh));
        tu_fill(req->data, len, seed_of(round, from, k));
        pscom_post_send(req);
    } else {
        pscom_post_recv(req);
    }
    return req;
}

static void finish(pscom_request_t *req, int check, int round, int from, int k)
{
    pscom_wait(req);
    TU_ASSERT_SUCCESSFUL(req);
    if (check) {
        uint32_t xh[2];
        memcpy(xh, (const void *)&req->xheader, sizeof(xh));
        TU_ASSERT_MSG(xh[0] == (uint32_t)from && xh[1] == (uint32_t)k,
                      "round %d: expected message %d of rank %d, got %u of %u", round, k, from,
                      xh[1], xh[0]);
        TU_ASSERT_EQ(req->header.data_len, len_of(k));
        TU_ASSERT_PATTERN(req->data, len_of(k), seed_of(round, from, k));
    }
    free(req->data);
    pscom_request_free(req);
}

static int client(tu_ctx_t *ctx)
{
    int me = ctx->rank, peer = partner_of(me);
    for (int r = 0; r < ROUNDS; r++) {
        char name[16], pname[16];
        name_of(name, sizeof(name), r, me);
        name_of(pname, sizeof(pname), r, peer);
        pscom_socket_t *sock = pscom_open_socket(0, 0, me, PSCOM_SOCK_FLAG_INTER_JOB);
        TU_ASSERT_NOT_NULL(sock);
        pscom_socket_set_name(sock, name);
        sock->ops.con_accept = on_accept;
        sock->ops.con_error  = on_error;
        TU_ASSERT_OK(pscom_listen(sock, PSCOM_ANYPORT));
        char *ep;
        TU_ASSERT_OK(pscom_socket_get_ep_str(sock, &ep));
        tu_signal(ctx, TU_SERVER, (uint32_t)sock->listen_portno);
        uint32_t pport = tu_wait_signal(ctx, TU_SERVER);

        /* partner's endpoint: our host, its port and name */
        char pep[128];
        *strchr(ep, ':') = 0;
        snprintf(pep, sizeof(pep), "%s:%u@%s", ep, pport, pname);
        pscom_socket_free_ep_str(ep);
        pscom_connection_t *con = pscom_open_connection(sock);
        TU_ASSERT_NOT_NULL(con);
        TU_ASSERT_OK(pscom_connect(con, pep, peer, PSCOM_CON_FLAG_ONDEMAND));

        tu_signal(ctx, TU_SERVER, SIG_READY);
        TU_ASSERT_EQ(tu_wait_signal(ctx, TU_SERVER), SIG_GO);

        /* the first message at once, then the rest of the burst */
        pscom_request_t *rr[BURST], *sr[BURST];
        sr[0] = post(con, 1, r, me, 0);
        for (int k = 0; k < BURST; k++) rr[k] = post(con, 0, r, peer, k);
        for (int k = 1; k < BURST; k++) sr[k] = post(con, 1, r, me, k);
        for (int k = 0; k < BURST; k++) finish(rr[k], 1, r, peer, k);
        for (int k = 0; k < BURST; k++) finish(sr[k], 0, r, me, k);

        TU_ASSERT_PTR_EQ(pscom_get_next_connection(sock, NULL), con);
        TU_ASSERT_NULL(pscom_get_next_connection(sock, con));
        TU_ASSERT_NE(con->type, PSCOM_CON_TYPE_ONDEMAND);
        TU_ASSERT_EQ(con->state, PSCOM_CON_STATE_RW);
        TU_ASSERT(!memcmp(con->remote_con_info.name, pname, 8));
        tu_check_con_type(con);
        TU_ASSERT_EQ(accepts, 0);

        /* close only after the partner checked too (its EOF would end ours) */
        tu_send_tag(con, 0xC105Eu);
        tu_wait_tag(con, NULL, 0xC105Eu);
        pscom_close_socket(sock);
        tu_signal(ctx, TU_SERVER, SIG_DONE);
    }
    return 0;
}

int main(void)
{
    /* connection set-up over the built-in transports; over ucp in the
     * test entries of its own that set PSP_UCP=1 (test/integration/CMakeLists.txt) */
    setenv("PSP_UCP", "0", 0);
    return tu_run("ondemand_cross", NCLIENTS, server, client, NULL);
}
