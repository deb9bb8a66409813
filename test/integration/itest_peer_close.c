/*
 * itest_peer_close: graceful close of a connection by one side (spec 1.4
 * pscom_close_connection, 5.7 local/remote close, 5.12 #11/#13/#18).
 *
 * Client 1 closes (server observes):
 *  - the client queues three messages (1000 B, 3 MiB, 10 B; pscom_send and
 *    pscom_post_send), calls pscom_close_connection at once, then
 *    pscom_close_socket: the queued sends are still delivered (drained
 *    before the EOF) and its post_send request ends successful; its
 *    con_error is never called (the user closed);
 *  - on the server a receive pending on that connection completes with
 *    ERROR, con_error(con, PSCOM_OP_READ, PSCOM_ERR_EOF) is called, the
 *    three messages received before the EOF are still matchable and
 *    intact, a receive posted afterwards fails (ERROR), pscom_recv_from
 *    returns IOERROR, and an any-source receive of the socket stays posted.
 * Server closes towards client 2 (client observes):
 *  - an unexpected message from client 2 is dropped by the server's
 *    pscom_close_connection (an any-source receive never sees it);
 *  - the server sends 3 MiB and closes at once; the client gets the
 *    message intact, its other pending receive completes with ERROR,
 *    con_error(OP_READ, ERR_EOF) is called; the server's con_error is not
 *    called for the connection it closed itself.
 * A stalled sender (peer_close_stalled, one client):
 *  - the server closes the connection while the payload of its posted
 *    receive (32 MiB) is arriving from a client that has stopped
 *    progressing (it waits on the control channel, no pscom call): the
 *    receive stays pending; when the client goes on, it gets the whole
 *    message, successful, and nothing is written into its buffer after it
 *    completed. Over ucp the payload comes in eager fragments
 *    (UCX_RNDV_THRESH=inf), which UCX writes straight into the buffer.
 * Leaving from a con_error (the server closes the connection):
 *  - peer_close_exit: the client's con_error calls exit(0): its clean-up
 *    must not wait for the connection whose callback is running (until
 *    2026-11-29 it did: the deadlock exit, status 112, or with threads a
 *    hang);
 *  - peer_close_close_socket: the client's con_error closes its socket;
 *    the close returns, the callback ends, nothing is used after its free
 *    (the sanitizer build).
 * Callbacks of closed connections (peer_close_callbacks, three clients):
 *  - the clients connect and are killed; the server, having waited for all
 *    three to be gone (so that their ends come in one pass, as far as the
 *    transport allows), makes progress: the first con_error closes the
 *    other connections, and no callback runs for a connection after its
 *    close (spec 5.1), although theirs may have been queued already.
 */
#include "pscom_testutil.h"

#include <signal.h>
#include <stdlib.h>
#include <string.h>

#define TAG_GO    0x474f2121u
#define TAG_NEVER 0x39393939u
#define TAG_FENCE 0x46454e43u
#define TAG_DROP  5u
#define BIGLEN    (3u << 20)

static size_t len_of(uint32_t tag)
{
    switch (tag) {
    case 1: return 1000;
    case 2: return BIGLEN;
    case 3: return 10;
    case 4: return BIGLEN;
    case TAG_DROP: return 100;
    default: return 0;
    }
}

/* receive request for message `tag` (or TAG_NEVER) */
static pscom_request_t *post_tagged(pscom_connection_t *con, pscom_socket_t *sock,
                                    uint32_t tag, void *buf, size_t len)
{
    pscom_request_t *req = pscom_request_create(4, sizeof(uint32_t));
    TU_ASSERT_NOT_NULL(req);
    memcpy((void *)req->user, &tag, sizeof(tag));
    req->connection      = con;
    req->socket          = con ? con->socket : sock;
    req->data            = buf;
    req->data_len        = len;
    req->xheader_len     = 4;
    req->ops.recv_accept = tu_accept_tag;
    pscom_post_recv(req);
    return req;
}

static void expect_msg(pscom_request_t *req, uint32_t tag, const unsigned char *buf)
{
    pscom_wait(req);
    TU_ASSERT_SUCCESSFUL(req);
    TU_ASSERT_EQ(req->header.data_len, len_of(tag));
    TU_ASSERT_PATTERN(buf, len_of(tag), tag);
}

static void expect_error(pscom_request_t *req)
{
    pscom_wait(req);
    TU_ASSERT_STATE_HAS(req->state, PSCOM_REQ_STATE_ERROR | PSCOM_REQ_STATE_DONE);
    TU_ASSERT(!pscom_req_successful(req));
}

/* ---------------- client 1: closes ---------------- */

static int client_closer(tu_ctx_t *ctx, pscom_socket_t *sock, pscom_connection_t *con)
{
    (void)ctx;
    tu_wait_tag(con, NULL, TAG_GO);

    unsigned char *buf = (unsigned char *)tu_malloc(BIGLEN);
    uint32_t tag;
    tag = 1;
    tu_fill(buf, len_of(1), 1);
    pscom_send(con, &tag, 4, buf, len_of(1));
    tag = 2;
    tu_fill(buf, len_of(2), 2);
    pscom_send(con, &tag, 4, buf, len_of(2));
    unsigned char small[10];
    tu_fill(small, sizeof(small), 3);
    pscom_request_t *s3 = pscom_request_create(4, 0);
    tag                 = 3;
    pscom_req_prepare(s3, con, small, sizeof(small), &tag, 4);
    pscom_post_send(s3);

    pscom_close_connection(con); /* non-blocking; handle invalid now */
    pscom_close_socket(sock);    /* blocks until the close handshake ended */

    TU_ASSERT(pscom_req_is_done(s3));
    TU_ASSERT_MSG(pscom_req_successful(s3),
                  "send queued before pscom_close_connection was not drained: [%s]",
                  tu_state_str(s3->state));
    TU_ASSERT_MSG(tu_nerrs == 0, "con_error called %d times (op %d err %d) for a "
                                 "connection the user closed (spec 5.12 #13)",
                  tu_nerrs, (int)tu_errs[0].op, (int)tu_errs[0].err);
    pscom_request_free(s3);
    free(buf);
    return 0;
}

/* ---------------- client 2: the server closes ---------------- */

static int client_observer(tu_ctx_t *ctx, pscom_socket_t *sock, pscom_connection_t *con)
{
    (void)ctx;
    (void)sock;
    unsigned char *buf  = (unsigned char *)tu_malloc(BIGLEN);
    /* a message the server leaves unmatched when it closes */
    uint32_t tag = TAG_DROP;
    tu_fill(buf, len_of(TAG_DROP), TAG_DROP);
    pscom_send(con, &tag, 4, buf, len_of(TAG_DROP));
    tu_send_tag(con, TAG_FENCE);
    pscom_request_t *r1 = post_tagged(con, NULL, 4, buf, BIGLEN);
    pscom_request_t *r2 = post_tagged(con, NULL, TAG_NEVER, NULL, 0);
    expect_msg(r1, 4, buf);
    expect_error(r2);
    tu_wait_flag(&tu_nerrs);
    TU_ASSERT_EQ(tu_nerrs, 1);
    TU_ASSERT_PTR_EQ(tu_errs[0].con, con);
    TU_ASSERT_EQ(tu_errs[0].op, PSCOM_OP_READ);
    TU_ASSERT_ERR(tu_errs[0].err, PSCOM_ERR_EOF);

    /* the read side has ended: new receives fail */
    pscom_request_t *r3 = post_tagged(con, NULL, TAG_NEVER, NULL, 0);
    expect_error(r3);
    uint32_t x;
    TU_ASSERT_ERR(pscom_recv_from(con, &x, 4, NULL, 0), PSCOM_ERR_IOERROR);

    pscom_request_free(r1);
    pscom_request_free(r2);
    pscom_request_free(r3);
    pscom_close_connection(con);
    free(buf);
    return 0;
}

static int client(tu_ctx_t *ctx)
{
    pscom_socket_t *sock = tu_open_socket(ctx, 0, 0);
    sock->ops.con_error  = tu_on_con_error;
    pscom_connection_t *con = tu_client_connect(ctx, sock);
    if (ctx->rank == 1) return client_closer(ctx, sock, con);
    return client_observer(ctx, sock, con);
}

/* ---------------- server ---------------- */

static int server(tu_ctx_t *ctx)
{
    pscom_connection_t *cons[3];
    pscom_socket_t *sock = tu_open_socket(ctx, 0, 0);
    sock->ops.con_error  = tu_on_con_error;
    tu_server_listen(ctx, sock);
    tu_server_accept_all(ctx, sock, cons);

    /* towards client 2: send 3 MiB and close at once; its unexpected
     * TAG_DROP message is dropped by the close (spec 1.4) */
    tu_wait_tag(cons[2], NULL, TAG_FENCE);
    {
        unsigned char *buf = (unsigned char *)tu_malloc(BIGLEN);
        uint32_t tag       = 4;
        tu_fill(buf, BIGLEN, 4);
        pscom_send(cons[2], &tag, 4, buf, BIGLEN);
        free(buf);
        pscom_close_connection(cons[2]);
        cons[2] = NULL;
    }

    /* client 1 closes */
    pscom_connection_t *c1   = cons[1];
    pscom_request_t *pending = post_tagged(c1, NULL, TAG_NEVER, NULL, 0);
    pscom_request_t *any     = post_tagged(NULL, sock, TAG_NEVER, NULL, 0);
    tu_send_tag(c1, TAG_GO);

    tu_wait_flag(&tu_nerrs);
    TU_ASSERT_EQ(tu_nerrs, 1);
    TU_ASSERT_PTR_EQ(tu_errs[0].con, c1);
    TU_ASSERT_EQ(tu_errs[0].op, PSCOM_OP_READ);
    TU_ASSERT_ERR(tu_errs[0].err, PSCOM_ERR_EOF);

    expect_error(pending);
    TU_ASSERT_MSG(!pscom_req_is_done(any),
                  "any-source receive completed on a peer's EOF (spec 5.7: it "
                  "stays posted): [%s]",
                  tu_state_str(any->state));

    /* messages that arrived before the EOF are still there */
    unsigned char *buf = (unsigned char *)tu_malloc(BIGLEN);
    for (uint32_t tag = 1; tag <= 3; tag++) {
        pscom_request_t *r = post_tagged(c1, NULL, tag, buf, BIGLEN);
        TU_ASSERT_MSG(pscom_req_is_done(r),
                      "message %u received before the EOF is not matchable "
                      "(spec 5.7): [%s]",
                      tag, tu_state_str(r->state));
        expect_msg(r, tag, buf);
        pscom_request_free(r);
    }
    free(buf);

    /* and nothing more can come */
    pscom_request_t *late = post_tagged(c1, NULL, TAG_NEVER, NULL, 0);
    expect_error(late);
    uint32_t x;
    TU_ASSERT_ERR(pscom_recv_from(c1, &x, 4, NULL, 0), PSCOM_ERR_IOERROR);

    TU_ASSERT_EQ(pscom_cancel_recv(any), 1);
    pscom_request_free(any);

    /* client 2's unexpected message went with its connection */
    pscom_request_t *dropped = post_tagged(NULL, sock, TAG_DROP, NULL, 0);
    TU_ASSERT_MSG(!pscom_req_is_done(dropped),
                  "an unexpected message of a connection closed with "
                  "pscom_close_connection was still matched (spec 1.4): [%s]",
                  tu_state_str(dropped->state));
    TU_ASSERT_EQ(pscom_cancel_recv(dropped), 1);
    pscom_request_free(dropped);
    pscom_request_free(pending);
    pscom_request_free(late);
    pscom_close_connection(c1);

    /* con_error only ever for client 1's connection: let client 2 finish
     * (its process exit ends every transport), then look again */
    tu_wait_peer_exit_progress(ctx, 2);
    for (int i = 0; i < 100; i++) pscom_test_any();
    TU_ASSERT_MSG(tu_nerrs == 1, "con_error called for a connection the user "
                                 "closed (spec 5.12 #13): op %d err %d",
                  (int)tu_errs[1].op, (int)tu_errs[1].err);
    return 0;
}

/* ---- a stalled sender ---------------------------------------------------------- */

#define STALL_LEN (32u << 20) /* more than the kernel buffers a tcp connection */

static int stall_server(tu_ctx_t *ctx)
{
    pscom_socket_t *sock    = tu_open_socket(ctx, 0, 0);
    pscom_connection_t *con = tu_server_accept_one(ctx, sock);
    unsigned char *buf      = tu_malloc(STALL_LEN);
    memset(buf, 0xee, STALL_LEN);
    pscom_request_t *req = pscom_request_create(0, 0);
    pscom_req_prepare(req, con, buf, STALL_LEN, NULL, 0);
    pscom_post_recv(req);
    tu_signal(ctx, 1, 1);
    tu_wait_signal(ctx, 1); /* the send is posted; the client stops progressing */
    /* the message is matched: its payload is on its way (or waits for the
     * sender, as a rendezvous over shm does) */
    while (!(req->state & PSCOM_REQ_STATE_IO_STARTED)) pscom_test_any();
    pscom_close_connection(con);
    TU_ASSERT(!pscom_req_is_done(req)); /* the rest is still with the sender */
    tu_signal(ctx, 1, 2);               /* the client goes on */
    pscom_wait(req);
    TU_ASSERT_SUCCESSFUL(req);
    TU_ASSERT_EQ(req->header.data_len, STALL_LEN);
    TU_ASSERT_PATTERN(buf, STALL_LEN, 5);
    memset(buf, 0x55, STALL_LEN);
    tu_wait_signal_progress(ctx, 1); /* the client's send is done */
    TU_ASSERT_BYTES(buf, STALL_LEN, 0x55);
    pscom_request_free(req);
    free(buf);
    pscom_close_socket(sock);
    return 0;
}

static int stall_client(tu_ctx_t *ctx)
{
    pscom_socket_t *sock    = tu_open_socket(ctx, 0, 0);
    pscom_connection_t *con = tu_client_connect(ctx, sock);
    unsigned char *buf      = tu_malloc(STALL_LEN);
    tu_fill(buf, STALL_LEN, 5);
    tu_wait_signal(ctx, TU_SERVER); /* the receive is posted */
    pscom_request_t *s = pscom_request_create(0, 0);
    pscom_req_prepare(s, con, buf, STALL_LEN, NULL, 0);
    pscom_post_send(s); /* the transport takes what fits, the rest needs our progress */
    tu_signal(ctx, TU_SERVER, 1);
    tu_wait_signal(ctx, TU_SERVER); /* no progress meanwhile */
    pscom_wait(s);
    TU_ASSERT_SUCCESSFUL(s);
    tu_signal(ctx, TU_SERVER, 3);
    pscom_request_free(s);
    free(buf);
    pscom_close_socket(sock);
    return 0;
}

/* ---- leaving from a con_error ---- */

static int cerr_exit; /* exit(0) in the con_error, else pscom_close_socket */
static pscom_socket_t *cerr_sock;
static volatile int cerr_done;

static void cerr_on_error(pscom_connection_t *con, pscom_op_t op, pscom_err_t err)
{
    (void)con;
    (void)op;
    (void)err;
    if (cerr_exit) exit(0);
    pscom_close_socket(cerr_sock);
    cerr_done = 1;
}

static int cerr_server(tu_ctx_t *ctx)
{
    pscom_socket_t *sock    = tu_open_socket(ctx, 0, 0);
    pscom_connection_t *con = tu_server_accept_one(ctx, sock);
    pscom_close_connection(con);
    tu_wait_peer_exit_progress(ctx, 1);
    pscom_close_socket(sock);
    return 0;
}

static int cerr_client(tu_ctx_t *ctx)
{
    cerr_sock               = tu_open_socket(ctx, 0, 0);
    cerr_sock->ops.con_error = cerr_on_error;
    tu_client_connect(ctx, cerr_sock);
    while (!cerr_done) pscom_wait_any();
    return 0;
}

/* ---- peer_close_callbacks ---- */

#define CB_CLIENTS 3
static pscom_connection_t *cb_cons[CB_CLIENTS + 1];
static int cb_calls;

static void cb_close_others(pscom_connection_t *con, pscom_op_t op, pscom_err_t err)
{
    (void)op;
    (void)err;
    cb_calls++;
    int open = 0;
    for (int i = 1; i <= CB_CLIENTS; i++) {
        if (cb_cons[i] != con) continue;
        cb_cons[i] = NULL;
        open       = 1;
    }
    TU_ASSERT_MSG(open, "con_error of a connection closed in an earlier con_error (call %d)",
                  cb_calls);
    for (int i = 1; i <= CB_CLIENTS; i++) {
        if (!cb_cons[i]) continue;
        pscom_connection_t *other = cb_cons[i];
        cb_cons[i]                = NULL;
        pscom_close_connection(other);
    }
}

static int cb_server(tu_ctx_t *ctx)
{
    pscom_socket_t *sock = tu_open_socket(ctx, 0, 0);
    sock->ops.con_error  = cb_close_others;
    tu_server_listen(ctx, sock);
    tu_server_accept_all(ctx, sock, cb_cons);
    for (int i = 1; i <= CB_CLIENTS; i++) kill(ctx->client_pids[i], SIGKILL);
    for (int i = 1; i <= CB_CLIENTS; i++) tu_wait_peer_exit(ctx, i); /* no progress meanwhile */
    while (!cb_calls) pscom_wait_any();
    for (int i = 0; i < 100; i++) pscom_test_any(); /* whatever else might still come */
    /* (another's may run inside the first one's pscom_close_connection,
     * before its own connection is closed: then it closes what is left) */
    tu_log("%d con_error calls", cb_calls);
    for (int i = 1; i <= CB_CLIENTS; i++) TU_ASSERT_NULL(cb_cons[i]);
    pscom_close_socket(sock);
    return 0;
}

static int cb_client(tu_ctx_t *ctx)
{
    pscom_socket_t *sock = tu_open_socket(ctx, 0, 0);
    tu_client_connect(ctx, sock);
    tu_wait_signal(ctx, TU_SERVER); /* killed while waiting */
    TU_FAIL("not killed");
}

int main(void)
{
    cerr_exit = 1;
    if (tu_run("peer_close_exit", 1, cerr_server, cerr_client, NULL)) return 1;
    cerr_exit = 0;
    if (tu_run("peer_close_close_socket", 1, cerr_server, cerr_client, NULL)) return 1;
    const tu_opts_t killed = {.killed_must_mask = 0xe}; /* clients 1-3 */
    if (tu_run("peer_close_callbacks", CB_CLIENTS, cb_server, cb_client, &killed)) return 1;
    if (tu_run("peer_close", 2, server, client, NULL)) return 1;
    /* over ucp: eager fragments at any size; over openib: the data pushed
     * through the slots, not read by RDMA, which takes it all at the match
     * without the sender (the children inherit both) */
    setenv("UCX_RNDV_THRESH", "inf", 1);
    setenv("PSP_OPENIB_RDMA_READ", "inf", 1);
    return tu_run("peer_close_stalled", 1, stall_server, stall_client, NULL);
}
