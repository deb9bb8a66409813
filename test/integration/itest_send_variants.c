/*
 * itest_send_variants: the send flavours and completion callbacks
 * (spec 1.5, 3.7 #2/#3, 5.1, 5.5).
 *
 *  - pscom_send copies xheader and data: the caller scribbles over both
 *    right after the call, the receiver still gets the original bytes;
 *  - pscom_send_inplace copies the xheader only; io_done(state, priv) runs
 *    once with a successful final state and the right priv; a NULL
 *    io_done is allowed;
 *  - pscom_flush returns only when every queued send has started
 *    (IO_STARTED or DONE on all 20 queued 100 KiB requests); flush(NULL)
 *    is a no-op;
 *  - ops.io_done = pscom_request_free on sends (self-freeing requests);
 *  - pscom_wait_all on a NULL-terminated array;
 *  - an io_done that re-posts its own request: over 20 unexpected
 *    messages the chain completes inside the first pscom_post_recv
 *    (synchronous merge, 3.7 #3), then over 20 messages that arrive later.
 */
#include "pscom_testutil.h"

#include <stdlib.h>
#include <string.h>

#define TAG_CMD   0x434d4421u
#define TAG_D     0x44444444u
#define TAG_GO    0x474f2121u
#define TAG_FENCE 0x46454e43u
#define MAXLEN    (100u << 10)

enum { CMD_END, CMD_COPY, CMD_INPLACE, CMD_FLUSH, CMD_AUTOFREE, CMD_BURST, CMD_BURST_FENCED };

typedef struct dxh {
    uint32_t tag;
    uint32_t seq;
    uint32_t len;
} dxh_t;

/* ---------------- client ---------------- */

static pscom_connection_t *con;
static uint32_t seq;

static int inplace_calls;
static pscom_req_state_t inplace_state[4];
static void *inplace_priv[4];

static void inplace_done(pscom_req_state_t state, void *priv)
{
    if (inplace_calls < 4) {
        inplace_state[inplace_calls] = state;
        inplace_priv[inplace_calls]  = priv;
    }
    inplace_calls++;
}

static void send_copy(size_t len)
{
    unsigned char *buf = (unsigned char *)tu_malloc(len);
    dxh_t xh           = {TAG_D, seq, (uint32_t)len};
    tu_fill(buf, len, seq);
    pscom_send(con, &xh, sizeof(xh), buf, len);
    memset(buf, 0xee, len);
    memset(&xh, 0xee, sizeof(xh));
    free(buf); /* even freeing is fine */
    seq++;
}

static void cmd_inplace(void)
{
    static unsigned char bufs[4][5000];
    inplace_calls = 0;
    for (int i = 0; i < 4; i++) {
        dxh_t xh = {TAG_D, seq, 5000};
        tu_fill(bufs[i], 5000, seq);
        pscom_send_inplace(con, &xh, sizeof(xh), bufs[i], 5000,
                           i < 3 ? inplace_done : NULL, i < 3 ? bufs[i] : NULL);
        memset(&xh, 0xee, sizeof(xh)); /* the xheader was copied */
        seq++;
    }
    while (inplace_calls < 3) pscom_wait_any();
    TU_ASSERT_EQ(inplace_calls, 3);
    for (int i = 0; i < 3; i++) {
        TU_ASSERT_MSG(pscom_req_state_successful(inplace_state[i]),
                      "inplace io_done %d: state 0x%x [%s]", i, inplace_state[i],
                      tu_state_str(inplace_state[i]));
        TU_ASSERT_PTR_EQ(inplace_priv[i], bufs[i]);
    }
    pscom_flush(con);
}

static void cmd_flush(void)
{
    enum { N = 20 };
    pscom_request_t *reqs[N + 1];
    unsigned char *bufs[N];
    tu_wait_tag(con, NULL, TAG_GO); /* the server has posted its receives */
    for (int i = 0; i < N; i++) {
        dxh_t xh = {TAG_D, seq, MAXLEN};
        bufs[i]  = (unsigned char *)tu_malloc(MAXLEN);
        tu_fill(bufs[i], MAXLEN, seq);
        reqs[i] = pscom_request_create(sizeof(xh), 0);
        pscom_req_prepare(reqs[i], con, bufs[i], MAXLEN, &xh, sizeof(xh));
        pscom_post_send(reqs[i]);
        seq++;
    }
    reqs[N] = NULL;
    pscom_flush(con);
    for (int i = 0; i < N; i++) {
        TU_ASSERT_MSG(reqs[i]->state & (PSCOM_REQ_STATE_IO_STARTED | PSCOM_REQ_STATE_DONE),
                      "after pscom_flush send %d has not started: [%s]", i,
                      tu_state_str(reqs[i]->state));
    }
    pscom_flush(NULL);
    pscom_wait_all(reqs);
    for (int i = 0; i < N; i++) {
        TU_ASSERT_SUCCESSFUL(reqs[i]);
        pscom_request_free(reqs[i]);
        free(bufs[i]);
    }
}

static void cmd_autofree(void)
{
    static unsigned char bufs[10][300];
    for (int i = 0; i < 10; i++) {
        dxh_t xh             = {TAG_D, seq, 300};
        pscom_request_t *req = pscom_request_create(sizeof(xh), 0);
        tu_fill(bufs[i], 300, seq);
        pscom_req_prepare(req, con, bufs[i], 300, &xh, sizeof(xh));
        req->ops.io_done = pscom_request_free;
        pscom_post_send(req); /* req may be gone now */
        seq++;
    }
    pscom_flush(con);
}

static int client(tu_ctx_t *ctx)
{
    pscom_socket_t *sock = tu_open_socket(ctx, 0, 0);
    con                  = tu_client_connect(ctx, sock);
    for (;;) {
        uint32_t cmd[3];
        TU_ASSERT_OK(pscom_recv_from(con, cmd, sizeof(cmd), NULL, 0));
        TU_ASSERT_EQ(cmd[0], TAG_CMD);
        switch (cmd[1]) {
        case CMD_END: return 0;
        case CMD_COPY:
            for (int i = 0; i < 50; i++) send_copy(64u << 10);
            break;
        case CMD_INPLACE: cmd_inplace(); break;
        case CMD_FLUSH: cmd_flush(); break;
        case CMD_AUTOFREE: cmd_autofree(); break;
        case CMD_BURST:
        case CMD_BURST_FENCED:
            for (uint32_t i = 0; i < cmd[2]; i++) send_copy(i * 3);
            if (cmd[1] == CMD_BURST_FENCED) tu_send_tag(con, TAG_FENCE);
            break;
        default: TU_FAIL("bad command %u", cmd[1]);
        }
    }
}

/* ---------------- server ---------------- */

static uint32_t expect_seq;
static unsigned char *rbuf;

static void command(uint32_t what, uint32_t arg)
{
    uint32_t cmd[3] = {TAG_CMD, what, arg};
    pscom_send(con, cmd, sizeof(cmd), NULL, 0);
}

static void check_msg(pscom_request_t *req, const unsigned char *buf)
{
    dxh_t xh;
    TU_ASSERT_SUCCESSFUL(req);
    memcpy(&xh, (const void *)&req->xheader, sizeof(xh));
    TU_ASSERT_EQ(xh.tag, TAG_D);
    TU_ASSERT_EQ(xh.seq, expect_seq);
    TU_ASSERT_EQ(req->header.data_len, xh.len);
    TU_ASSERT_PATTERN(buf, xh.len, xh.seq);
    expect_seq++;
}

static pscom_request_t *make_recv(unsigned char *buf)
{
    pscom_request_t *req = pscom_request_create(sizeof(dxh_t), sizeof(uint32_t));
    TU_ASSERT_NOT_NULL(req);
    uint32_t tag = TAG_D;
    memcpy((void *)req->user, &tag, sizeof(tag));
    req->ops.recv_accept = tu_accept_tag;
    req->connection      = con;
    req->socket          = con->socket;
    req->data            = buf;
    req->data_len        = MAXLEN;
    req->xheader_len     = sizeof(dxh_t);
    return req;
}

static void recv_n(int n)
{
    for (int i = 0; i < n; i++) {
        pscom_request_t *req = make_recv(rbuf);
        pscom_post_recv(req);
        pscom_wait(req);
        check_msg(req, rbuf);
        pscom_request_free(req);
    }
}

/* io_done re-posting chain */
static int chain_count, chain_target, chain_bad;
static unsigned char chain_buf[MAXLEN];

static void chain_io_done(pscom_request_t *req)
{
    check_msg(req, chain_buf);
    chain_count++;
    if (chain_count < chain_target) {
        pscom_post_recv(req);
        /* psmpi inspects the request right after re-posting (3.7 #3) */
        if (!(req->state & PSCOM_REQ_STATE_RECV_REQUEST)) chain_bad++;
        (void)pscom_req_is_done(req);
    }
}

static int server(tu_ctx_t *ctx)
{
    pscom_socket_t *sock = tu_open_socket(ctx, 0, 0);
    con  = tu_server_accept_one(ctx, sock);
    rbuf = (unsigned char *)tu_malloc(MAXLEN);

    command(CMD_COPY, 0);
    recv_n(50);
    command(CMD_INPLACE, 0);
    recv_n(4);

    /* flush: receives posted first, so the client's sends can drain */
    {
        enum { N = 20 };
        pscom_request_t *reqs[N + 1];
        unsigned char *bufs[N];
        for (int i = 0; i < N; i++) {
            bufs[i] = (unsigned char *)tu_malloc(MAXLEN);
            reqs[i] = make_recv(bufs[i]);
            pscom_post_recv(reqs[i]);
        }
        reqs[N] = NULL;
        command(CMD_FLUSH, 0);
        tu_send_tag(con, TAG_GO);
        pscom_wait_all(reqs);
        for (int i = 0; i < N; i++) {
            check_msg(reqs[i], bufs[i]);
            pscom_request_free(reqs[i]);
            free(bufs[i]);
        }
    }

    command(CMD_AUTOFREE, 0);
    recv_n(10);

    /* re-posting chain over unexpected messages */
    {
        const int K = 20;
        command(CMD_BURST_FENCED, (uint32_t)K);
        tu_wait_tag(con, NULL, TAG_FENCE);
        pscom_request_t *req = make_recv(chain_buf);
        req->ops.io_done     = chain_io_done;
        chain_count          = 0;
        chain_target         = K;
        pscom_post_recv(req);
        for (int i = 0; i < 10 && chain_count < K; i++) pscom_test_any();
        TU_ASSERT_MSG(chain_count == K,
                      "io_done re-post chain over %d already received messages "
                      "stopped at %d (synchronous merge, spec 3.7 #3)",
                      K, chain_count);
        TU_ASSERT(pscom_req_is_done(req));

        /* and over messages that arrive later */
        chain_target = 2 * K;
        pscom_post_recv(req);
        command(CMD_BURST, (uint32_t)K);
        while (chain_count < 2 * K) pscom_wait_any();
        TU_ASSERT_EQ(chain_count, 2 * K);
        TU_ASSERT_EQ(chain_bad, 0);
        TU_ASSERT(pscom_req_is_done(req));
        pscom_request_free(req);
    }

    command(CMD_END, 0);
    free(rbuf);
    return 0;
}

int main(void)
{
    return tu_run("send_variants", 1, server, client, NULL);
}
