/*
 * itest_rndv_death: a rendezvous (PSP_RENDEZVOUS=65536, 64 MiB messages)
 * interrupted by the peer's death (SIGKILL). The survivor's request must
 * end (no hang; each process has a watchdog) with ERROR, and con_error must
 * be called once. A request that had already completed successfully
 * before the kill (a transport that reads the sender's memory directly
 * finishes the receive when it is matched) must stay successful with the
 * right content.
 *
 *  1. sender dies after its announcement was matched by a posted receive
 *     (it never answers the receiver's CTS);
 *  2. sender dies after the announcement arrived unexpected; the receive
 *     is posted only after con_error reported the death: it must end with
 *     ERROR at once instead of waiting for data that cannot come;
 *  3. sender dies while pushing the data (part of it is in flight);
 *  4. receiver dies with the announcement unexpected: the send fails;
 *  5. receiver dies while the data is being pushed to it: the send fails
 *     (over tcp and shm; a transport with buffers of its own may report
 *     the send complete, since sends complete locally).
 */
#define _GNU_SOURCE
#include "pscom_testutil.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LEN  (64u << 20)
#define SEED 4711u

enum { SIG_GO = 1, SIG_SENT, SIG_MATCHED, SIG_PUSHING, SIG_SEEN };

static volatile int con_errors;
static pscom_op_t last_op;

static void on_con_error(pscom_connection_t *con, pscom_op_t op, pscom_err_t err)
{
    (void)con;
    (void)err;
    last_op = op;
    con_errors++;
}

static pscom_connection_t *server_setup(tu_ctx_t *ctx)
{
    pscom_socket_t *sock = tu_open_socket(ctx, 0, 0);
    sock->ops.con_error  = on_con_error;
    return tu_server_accept_one(ctx, sock);
}

static pscom_connection_t *client_setup(tu_ctx_t *ctx)
{
    pscom_socket_t *sock = tu_open_socket(ctx, 0, 0);
    return tu_client_connect(ctx, sock);
}

static pscom_request_t *post_send(pscom_connection_t *con, void *buf)
{
    uint64_t xh        = 0x5244565a4445adull;
    pscom_request_t *r = pscom_request_create(8, 0);
    TU_ASSERT_NOT_NULL(r);
    pscom_req_prepare(r, con, buf, LEN, &xh, sizeof(xh));
    pscom_post_send(r);
    return r;
}

/* the survivor's view after the kill */
static void expect_end(pscom_request_t *r, int done_before, const void *buf)
{
    pscom_wait(r);
    if (!done_before && pscom_req_successful(r) && (r->state & PSCOM_REQ_STATE_SEND_REQUEST) &&
        r->connection->type != PSCOM_CON_TYPE_TCP && r->connection->type != PSCOM_CON_TYPE_SHM) {
        /* A send completes locally: a transport with buffers of its own
         * may have taken all the data before the peer died. TCP (socket
         * buffers of a few MiB) and shm (a small ring, or a direct read
         * that completed the send before the kill) cannot. */
        tu_log("%s: send completed after the receiver died (transport buffered it)",
               pscom_con_type_str(r->connection->type));
        done_before = 1;
    }
    if (done_before) {
        TU_ASSERT_SUCCESSFUL(r);
        if (buf) TU_ASSERT_PATTERN(buf, LEN, SEED);
    } else {
        TU_ASSERT_STATE_HAS(r->state, PSCOM_REQ_STATE_DONE | PSCOM_REQ_STATE_ERROR);
    }
    tu_wait_flag(&con_errors);
    for (int i = 0; i < 20; i++) pscom_test_any();
    TU_ASSERT_EQ(con_errors, 1);
    pscom_request_free(r);
}

static void wait_started(pscom_request_t *r)
{
    while (!(r->state & (PSCOM_REQ_STATE_IO_STARTED | PSCOM_REQ_STATE_DONE))) pscom_wait_any();
}

/* a client that is killed while it waits */
static int killed(tu_ctx_t *ctx)
{
    tu_wait_signal(ctx, TU_SERVER);
    TU_FAIL("not killed");
}

static int peer_of(tu_ctx_t *ctx)
{
    return ctx->rank == TU_SERVER ? 1 : TU_SERVER;
}

/* receiver: post the receive, let the peer send, wait until it matched */
static pscom_request_t *recv_matched(tu_ctx_t *ctx, pscom_connection_t *con, void *buf)
{
    pscom_request_t *r = tu_post_recv(con, buf, LEN, 8);
    tu_signal(ctx, peer_of(ctx), SIG_GO);
    TU_ASSERT_EQ(tu_wait_signal(ctx, peer_of(ctx)), SIG_SENT);
    wait_started(r);
    return r;
}

/* sender: once the peer's receive is posted, send the pattern */
static pscom_request_t *send_when_posted(tu_ctx_t *ctx, pscom_connection_t *con, void *buf)
{
    tu_fill(buf, LEN, SEED);
    TU_ASSERT_EQ(tu_wait_signal(ctx, peer_of(ctx)), SIG_GO);
    pscom_request_t *s = post_send(con, buf);
    tu_signal(ctx, peer_of(ctx), SIG_SENT);
    return s;
}

/* the announcement of the peer's send arrived (unexpected): probe it */
static void probe_announcement(pscom_connection_t *con)
{
    pscom_request_t *p = pscom_request_create(8, 0);
    p->connection      = con;
    p->socket          = con->socket;
    p->xheader_len     = 8;
    pscom_probe(p);
    TU_ASSERT_EQ(p->header.data_len, LEN);
    pscom_request_free(p);
}

/* ---- 1: sender dies, receive matched -------------------------------------------------- */

static int s1_server(tu_ctx_t *ctx)
{
    pscom_connection_t *con = server_setup(ctx);
    unsigned char *buf      = tu_malloc(LEN);
    pscom_request_t *r      = recv_matched(ctx, con, buf); /* the announcement matched */
    TU_ASSERT_STATE_HAS(r->state, PSCOM_REQ_STATE_IO_STARTED);
    int done_before = pscom_req_is_done(r);
    kill(ctx->client_pids[1], SIGKILL);
    expect_end(r, done_before, buf);
    free(buf);
    return 0;
}

static int s1_client(tu_ctx_t *ctx)
{
    pscom_connection_t *con = client_setup(ctx);
    unsigned char *buf      = tu_malloc(LEN);
    send_when_posted(ctx, con, buf);
    return killed(ctx);
}

/* ---- 2: sender dies, announcement unexpected, receive posted after the death -------- */

static int s2_server(tu_ctx_t *ctx)
{
    pscom_connection_t *con = server_setup(ctx);
    unsigned char *buf      = tu_malloc(LEN);
    tu_signal(ctx, 1, SIG_GO);
    TU_ASSERT_EQ(tu_wait_signal(ctx, 1), SIG_SENT);
    probe_announcement(con);
    kill(ctx->client_pids[1], SIGKILL);
    tu_wait_flag(&con_errors);
    pscom_request_t *r = tu_post_recv(con, buf, LEN, 8);
    expect_end(r, 0, NULL);
    free(buf);
    return 0;
}

/* ---- 3: sender dies while pushing ------------------------------------------------------ */

static int s3_server(tu_ctx_t *ctx)
{
    pscom_connection_t *con = server_setup(ctx);
    unsigned char *buf      = tu_malloc(LEN);
    pscom_request_t *r      = recv_matched(ctx, con, buf);
    tu_signal(ctx, 1, SIG_MATCHED);
    TU_ASSERT_EQ(tu_wait_signal(ctx, 1), SIG_PUSHING);
    for (int i = 0; i < 100; i++) pscom_test_any(); /* take part of the data */
    int done_before = pscom_req_is_done(r);
    kill(ctx->client_pids[1], SIGKILL);
    expect_end(r, done_before, buf);
    free(buf);
    return 0;
}

static int s3_client(tu_ctx_t *ctx)
{
    pscom_connection_t *con = client_setup(ctx);
    unsigned char *buf      = tu_malloc(LEN);
    pscom_request_t *s      = send_when_posted(ctx, con, buf);
    TU_ASSERT_EQ(tu_wait_signal(ctx, TU_SERVER), SIG_MATCHED);
    /* read the clear-to-send and push until the socket is full */
    for (int i = 0; i < 100; i++) pscom_test_any();
    (void)s;
    tu_signal(ctx, TU_SERVER, SIG_PUSHING);
    return killed(ctx);
}

/* ---- 4: receiver dies with the announcement unexpected ------------------------------- */

static int s4_server(tu_ctx_t *ctx)
{
    pscom_connection_t *con = server_setup(ctx);
    unsigned char *buf      = tu_malloc(LEN);
    tu_fill(buf, LEN, SEED);
    pscom_request_t *s = post_send(con, buf);
    tu_signal(ctx, 1, SIG_SENT);
    TU_ASSERT_EQ(tu_wait_signal(ctx, 1), SIG_SEEN);
    for (int i = 0; i < 20; i++) pscom_test_any();
    TU_ASSERT(!pscom_req_is_done(s)); /* nobody received it */
    kill(ctx->client_pids[1], SIGKILL);
    expect_end(s, 0, NULL);
    free(buf);
    return 0;
}

static int s4_client(tu_ctx_t *ctx)
{
    pscom_connection_t *con = client_setup(ctx);
    TU_ASSERT_EQ(tu_wait_signal(ctx, TU_SERVER), SIG_SENT);
    probe_announcement(con);
    tu_signal(ctx, TU_SERVER, SIG_SEEN);
    return killed(ctx);
}

/* ---- 5: receiver dies while the data is pushed to it -------------------------------- */

static int s5_server(tu_ctx_t *ctx)
{
    pscom_connection_t *con = server_setup(ctx);
    unsigned char *buf      = tu_malloc(LEN);
    pscom_request_t *s      = send_when_posted(ctx, con, buf);
    TU_ASSERT_EQ(tu_wait_signal(ctx, 1), SIG_MATCHED);
    for (int i = 0; i < 100; i++) pscom_test_any(); /* push until the socket is full */
    int done_before = pscom_req_is_done(s);
    kill(ctx->client_pids[1], SIGKILL);
    expect_end(s, done_before, NULL);
    free(buf);
    return 0;
}

static int s5_client(tu_ctx_t *ctx)
{
    pscom_connection_t *con = client_setup(ctx);
    unsigned char *buf      = tu_malloc(LEN);
    recv_matched(ctx, con, buf); /* the clear-to-send (or the direct read) is done */
    tu_signal(ctx, TU_SERVER, SIG_MATCHED);
    return killed(ctx);
}

int main(void)
{
    setenv("PSP_RENDEZVOUS", "65536", 1); /* the children call pscom_init after fork */
    tu_opts_t o = {.killed_must_mask = 1u << 1};
    if (tu_run("rndv_death_sender_matched", 1, s1_server, s1_client, &o)) return 1;
    if (tu_run("rndv_death_sender_unexpected", 1, s2_server, s1_client, &o)) return 1;
    if (tu_run("rndv_death_sender_pushing", 1, s3_server, s3_client, &o)) return 1;
    if (tu_run("rndv_death_receiver_unexpected", 1, s4_server, s4_client, &o)) return 1;
    if (tu_run("rndv_death_receiver_pushing", 1, s5_server, s5_client, &o)) return 1;
    return 0;
}
