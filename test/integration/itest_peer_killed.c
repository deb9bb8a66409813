/*
 * itest_peer_killed: the peer process dies by SIGKILL (no protocol EOF)
 * while the other side waits (spec 5.7 write error / plain transport EOF,
 * 5.10). Three clients, each must end by SIGKILL:
 *
 *  1. the server has a receive posted on the connection and kills the
 *     client itself: the receive completes with ERROR, con_error is called
 *     with (PSCOM_OP_READ, PSCOM_ERR_IOERROR), nothing hangs;
 *  2. the server sits in a blocking pscom_recv_from when the client kills
 *     itself: pscom_recv_from returns PSCOM_ERR_IOERROR;
 *  3. the client dies in the middle of a 16 MiB message: the receive for
 *     it completes with ERROR (never successful with partial data; a
 *     transport that pulls the data itself may complete it, then the data
 *     must be complete and correct);
 *  4. the server's 16 MiB send to a client that never reads is in flight
 *     when the server kills it: the send completes with ERROR, never as
 *     sent (over ucp it did until 2026-11-29: UCX failed the rendezvous,
 *     the plugin retired the message anyway).
 * Afterwards, a send on a dead connection completes (no hang).
 */
#include "pscom_testutil.h"

#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define BIG (16u << 20)

static int client(tu_ctx_t *ctx)
{
    pscom_socket_t *sock    = tu_open_socket(ctx, 0, 0);
    pscom_connection_t *con = tu_client_connect(ctx, sock);
    pscom_flush(con); /* the hello is on its way */

    switch (ctx->rank) {
    case 1:
        /* wait to be killed; the server never signals */
        tu_wait_signal(ctx, TU_SERVER);
        TU_FAIL("client 1 should have been killed");
    case 2:
        tu_wait_signal(ctx, TU_SERVER);
        raise(SIGKILL);
        break;
    case 3: {
        tu_wait_signal(ctx, TU_SERVER);
        unsigned char *big = (unsigned char *)tu_malloc(BIG);
        uint32_t tag       = 3;
        tu_fill(big, BIG, 3);
        pscom_request_t *s = pscom_request_create(4, 0);
        pscom_req_prepare(s, con, big, BIG, &tag, sizeof(tag));
        pscom_post_send(s);
        TU_ASSERT_MSG(!pscom_req_is_done(s),
                      "16 MiB send to a non-reading peer completed at once");
        tu_signal(ctx, TU_SERVER, 1);
        raise(SIGKILL);
        break;
    }
    case 4:
        /* never reads: wait to be killed */
        tu_wait_signal(ctx, TU_SERVER);
        TU_FAIL("client 4 should have been killed");
    }
    TU_FAIL("survived SIGKILL");
}

static void expect_con_error(pscom_connection_t *con)
{
    const tu_err_rec_t *e;
    while (!(e = tu_error_of(con))) pscom_wait_any();
    TU_ASSERT_EQ(e->op, PSCOM_OP_READ);
    /* no protocol EOF before the transport EOF */
    TU_ASSERT_ERR(e->err, PSCOM_ERR_IOERROR);
}

static void expect_error(pscom_request_t *req, const char *what)
{
    pscom_wait(req);
    TU_ASSERT_MSG((req->state & PSCOM_REQ_STATE_ERROR) && !pscom_req_successful(req),
                  "%s: receive did not fail: state [%s], header.data_len %llu",
                  what, tu_state_str(req->state),
                  (unsigned long long)req->header.data_len);
}

static int server(tu_ctx_t *ctx)
{
    pscom_connection_t *cons[5];
    pscom_socket_t *sock = tu_open_socket(ctx, 0, 0);
    sock->ops.con_error  = tu_on_con_error;
    tu_server_listen(ctx, sock);
    tu_server_accept_all(ctx, sock, cons);

    /* 1: pending receive, we kill the peer */
    tu_step("1: kill client 1, wait for the pending receive");
    pscom_request_t *r1 = tu_post_recv(cons[1], NULL, 0, 4);
    TU_ASSERT_EQ(kill(ctx->client_pids[1], SIGKILL), 0);
    expect_error(r1, "client 1 killed by the server");
    tu_step("1: wait for con_error of client 1");
    expect_con_error(cons[1]);

    /* 2: blocked in pscom_recv_from while the peer kills itself */
    tu_step("2: pscom_recv_from while client 2 kills itself");
    tu_signal(ctx, 2, 1);
    uint32_t x;
    TU_ASSERT_ERR(pscom_recv_from(cons[2], &x, sizeof(x), NULL, 0), PSCOM_ERR_IOERROR);
    tu_step("2: wait for con_error of client 2");
    expect_con_error(cons[2]);

    /* 3: peer dies in the middle of a message */
    tu_step("3: client 3 dies in the middle of a message");
    tu_signal(ctx, 3, 1);
    TU_ASSERT_EQ(tu_wait_signal(ctx, 3), 1);
    unsigned char *big  = (unsigned char *)tu_malloc(BIG);
    pscom_request_t *r3 = tu_post_recv(cons[3], big, BIG, 4);
    pscom_wait(r3);
    if (pscom_req_successful(r3)) {
        /* A transport that pulls the data from the sender (rendezvous
         * read) may have fetched it all before the sender died: then the
         * content must be complete and correct. Never partial data
         * reported as success. */
        TU_ASSERT_EQ(r3->header.data_len, BIG);
        TU_ASSERT_PATTERN(big, BIG, 3);
        tu_log("note: the receive from the dying sender completed (%s)",
               pscom_con_type_str(cons[3]->type));
    } else {
        expect_error(r3, "client 3 died in the middle of 16 MiB");
    }
    tu_step("3: wait for con_error of client 3");
    expect_con_error(cons[3]);
    free(big);

    /* 4: a send in flight when the receiver dies */
    tu_step("4: kill client 4 while a 16 MiB send to it is in flight");
    {
        unsigned char *data = (unsigned char *)tu_malloc(BIG);
        uint32_t tag        = 4;
        tu_fill(data, BIG, 4);
        pscom_request_t *s = pscom_request_create(4, 0);
        pscom_req_prepare(s, cons[4], data, BIG, &tag, sizeof(tag));
        pscom_post_send(s);
        for (int i = 0; i < 100; i++) pscom_test_any(); /* under way, as far as it goes */
        TU_ASSERT_MSG(!pscom_req_is_done(s), "16 MiB send to a non-reading peer completed");
        TU_ASSERT_EQ(kill(ctx->client_pids[4], SIGKILL), 0);
        pscom_wait(s);
        TU_ASSERT_MSG((s->state & PSCOM_REQ_STATE_ERROR) && !pscom_req_successful(s),
                      "send to a peer killed before it read anything did not fail: [%s]",
                      tu_state_str(s->state));
        pscom_request_free(s);
        free(data);
    }
    tu_step("4: wait for con_error of client 4");
    while (!tu_error_of(cons[4])) pscom_wait_any();

    /* sending to a dead peer must complete (with whatever result) */
    tu_step("send to a dead peer");
    {
        unsigned char data[64];
        uint32_t tag = 9;
        memset(data, 1, sizeof(data));
        pscom_request_t *s = pscom_request_create(4, 0);
        pscom_req_prepare(s, cons[1], data, sizeof(data), &tag, sizeof(tag));
        pscom_post_send(s);
        pscom_wait(s);
        if (pscom_req_successful(s)) {
            tu_log("note: send on a connection whose peer was killed reported "
                   "success: [%s]",
                   tu_state_str(s->state));
        }
        pscom_request_free(s);
    }

    pscom_request_free(r1);
    pscom_request_free(r3);
    for (int i = 1; i <= 4; i++) pscom_close_connection(cons[i]);
    tu_step("pscom_close_socket");
    pscom_close_socket(sock);
    return 0;
}

int main(void)
{
    tu_opts_t opts;
    memset(&opts, 0, sizeof(opts));
    opts.killed_must_mask = (1u << 1) | (1u << 2) | (1u << 3) | (1u << 4);
    return tu_run("peer_killed", 4, server, client, &opts);
}
