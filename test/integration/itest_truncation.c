/*
 * itest_truncation: receive buffers shorter than the message (spec 5.5,
 * 5.12 #5/#6, 1.5 pscom_recv).
 *
 *  - data longer than the posted buffer: DONE|TRUNCATED, not successful,
 *    exactly data_len bytes stored (guard bytes untouched), header holds
 *    the sender's lengths, req->data_len/xheader_len keep the posted
 *    values, and the next message on the connection is intact (the rest
 *    was skipped) - posted before arrival and unexpected, small and 2 MiB;
 *  - a zero-length receive of a 1-byte message is TRUNCATED;
 *  - an xheader longer than posted is cut silently (no TRUNCATED), only
 *    the posted number of bytes is written;
 *  - pscom_recv returns PSCOM_ERR_IOERROR on truncation and SUCCESS for
 *    the next message.
 */
#include "pscom_testutil.h"

#include <stdlib.h>
#include <string.h>

#define TAG_CMD   0x434d4421u
#define TAG_FENCE 0x46454e43u
#define GUARD     32
#define MAX_XH    104

typedef struct m {
    size_t len;
    size_t xlen;
} m_t;

/* batches sent by the client on command */
static const m_t batches[][2] = {
    /* 0 */ {{100, 40}, {64, 8}},
    /* 1 */ {{1000, 40}, {10, 8}},
    /* 2 */ {{32, 100}, {5, 0}},
    /* 3 */ {{32, 100}, {5, 0}},
    /* 4 */ {{200, 12}, {20, 12}},
    /* 5 */ {{(2u << 20) + 3, 24}, {77, 24}},
    /* 6 */ {{1, 0}, {0, 0}},
    /* 7 */ {{300000, 24}, {33, 24}},
};
#define NBATCH (sizeof(batches) / sizeof(batches[0]))

static uint32_t seed_of(unsigned b, unsigned i)
{
    return 7000u + b * 10u + i;
}

static uint32_t xseed_of(unsigned b, unsigned i)
{
    return seed_of(b, i) ^ 0x33333333u;
}

typedef struct cmd {
    uint32_t tag;
    uint32_t batch;
    uint32_t fence;
} cmd_t;

static int client(tu_ctx_t *ctx)
{
    pscom_socket_t *sock    = tu_open_socket(ctx, 0, 0);
    pscom_connection_t *con = tu_client_connect(ctx, sock);
    for (;;) {
        cmd_t cmd;
        TU_ASSERT_OK(pscom_recv_from(con, &cmd, sizeof(cmd), NULL, 0));
        TU_ASSERT_EQ(cmd.tag, TAG_CMD);
        if (cmd.batch >= NBATCH) break;
        for (unsigned i = 0; i < 2; i++) {
            const m_t *m = &batches[cmd.batch][i];
            unsigned char xh[MAX_XH];
            unsigned char *data = (unsigned char *)tu_malloc(m->len);
            tu_fill(xh, m->xlen, xseed_of(cmd.batch, i));
            if (m->xlen >= 4) {
                uint32_t t;
                memcpy(&t, xh, 4);
                TU_ASSERT(t != TAG_FENCE && t != TAG_CMD);
            }
            tu_fill(data, m->len, seed_of(cmd.batch, i));
            pscom_send(con, xh, m->xlen, data, m->len);
            free(data);
        }
        if (cmd.fence) tu_send_tag(con, TAG_FENCE);
    }
    return 0;
}

/* ---------------- server ---------------- */

static pscom_connection_t *con;

static void command(unsigned batch, int fence)
{
    cmd_t cmd = {TAG_CMD, batch, (uint32_t)fence};
    pscom_send(con, &cmd, sizeof(cmd), NULL, 0);
}

typedef struct rx {
    pscom_request_t *req;
    unsigned char *buf;
    size_t posted_len;
    size_t posted_xlen;
} rx_t;

static void rx_post(rx_t *rx, size_t data_len, size_t xlen)
{
    rx->posted_len  = data_len;
    rx->posted_xlen = xlen;
    rx->buf         = (unsigned char *)tu_malloc(data_len + GUARD);
    memset(rx->buf, 0xa5, data_len + GUARD);
    rx->req = pscom_request_create(MAX_XH, 0);
    TU_ASSERT_NOT_NULL(rx->req);
    memset((void *)&rx->req->xheader, 0x5a, rx->req->max_xheader_len);
    rx->req->connection  = con;
    rx->req->socket      = con->socket;
    rx->req->data        = data_len ? rx->buf : NULL;
    rx->req->data_len    = data_len;
    rx->req->xheader_len = xlen;
    pscom_post_recv(rx->req);
}

/* check rx against message i of batch b */
static void rx_check(rx_t *rx, unsigned b, unsigned i)
{
    pscom_request_t *req = rx->req;
    const m_t *m         = &batches[b][i];
    int truncated        = m->len > rx->posted_len;
    size_t stored        = truncated ? rx->posted_len : m->len;
    size_t xstored       = m->xlen < rx->posted_xlen ? m->xlen : rx->posted_xlen;

    pscom_wait(req);
    TU_ASSERT_STATE_HAS(req->state, PSCOM_REQ_STATE_RECV_REQUEST | PSCOM_REQ_STATE_DONE);
    TU_ASSERT_STATE_LACKS(req->state, PSCOM_REQ_STATE_ERROR | PSCOM_REQ_STATE_CANCELED);
    if (truncated) {
        TU_ASSERT_STATE_HAS(req->state, PSCOM_REQ_STATE_TRUNCATED);
        TU_ASSERT(!pscom_req_successful(req));
    } else {
        /* an over-long xheader alone must not set TRUNCATED */
        TU_ASSERT_STATE_LACKS(req->state, PSCOM_REQ_STATE_TRUNCATED);
        TU_ASSERT_SUCCESSFUL(req);
    }
    TU_ASSERT_EQ(req->header.data_len, m->len);
    TU_ASSERT_EQ(req->header.xheader_len, m->xlen);
    TU_ASSERT_EQ(req->data_len, rx->posted_len);
    TU_ASSERT_EQ(req->xheader_len, rx->posted_xlen);
    TU_ASSERT_PTR_EQ(req->connection, con);
    TU_ASSERT_PATTERN(rx->buf, stored, seed_of(b, i));
    TU_ASSERT_BYTES(rx->buf + stored, rx->posted_len + GUARD - stored, 0xa5);
    const unsigned char *xh = (const unsigned char *)&req->xheader;
    TU_ASSERT_PATTERN(xh, xstored, xseed_of(b, i));
    TU_ASSERT_BYTES(xh + xstored, req->max_xheader_len - xstored, 0x5a);
    pscom_request_free(req);
    free(rx->buf);
    memset(rx, 0, sizeof(*rx));
}

/* post r0/r1 before the batch is sent, check both */
static void posted_before(unsigned b, size_t len0, size_t xlen0, size_t len1,
                          size_t xlen1)
{
    rx_t r0, r1;
    rx_post(&r0, len0, xlen0);
    rx_post(&r1, len1, xlen1);
    TU_ASSERT(!pscom_req_is_done(r0.req));
    command(b, 0);
    rx_check(&r0, b, 0);
    rx_check(&r1, b, 1);
}

/* let the batch arrive first, then post: synchronous completion */
static void unexpected(unsigned b, size_t len0, size_t xlen0, size_t len1,
                       size_t xlen1)
{
    rx_t r0, r1;
    command(b, 1);
    tu_wait_tag(con, NULL, TAG_FENCE);
    rx_post(&r0, len0, xlen0);
    TU_ASSERT_MSG(pscom_req_is_done(r0.req), "state [%s]", tu_state_str(r0.req->state));
    rx_check(&r0, b, 0);
    rx_post(&r1, len1, xlen1);
    TU_ASSERT_MSG(pscom_req_is_done(r1.req), "state [%s]", tu_state_str(r1.req->state));
    rx_check(&r1, b, 1);
}

static int server(tu_ctx_t *ctx)
{
    pscom_socket_t *sock = tu_open_socket(ctx, 0, 0);
    con = tu_server_accept_one(ctx, sock);

    /* data 100 into 50, xheader 40 into 16; the next is intact */
    posted_before(0, 50, 16, 64, 8);
    /* unexpected: data 1000 into 10 */
    unexpected(1, 10, 16, 10, 8);
    /* xheader 100 into 4 (no TRUNCATED), then a 5-byte message */
    posted_before(2, 32, 4, 5, 0);
    unexpected(3, 32, 4, 64, 16);

    /* pscom_recv: IOERROR on truncation, then SUCCESS */
    {
        unsigned char buf[100 + GUARD];
        unsigned char xh[12];
        memset(buf, 0xa5, sizeof(buf));
        command(4, 0);
        TU_ASSERT_ERR(pscom_recv(con, con->socket, xh, sizeof(xh), buf, 100),
                      PSCOM_ERR_IOERROR);
        TU_ASSERT_PATTERN(buf, 100, seed_of(4, 0));
        TU_ASSERT_BYTES(buf + 100, GUARD, 0xa5);
        memset(buf, 0xa5, sizeof(buf));
        TU_ASSERT_OK(pscom_recv_from(con, xh, sizeof(xh), buf, 20));
        TU_ASSERT_PATTERN(buf, 20, seed_of(4, 1));
        TU_ASSERT_PATTERN(xh, sizeof(xh), xseed_of(4, 1));
        TU_ASSERT_BYTES(buf + 20, GUARD, 0xa5);
    }

    /* 2 MiB + 3 into 1000: the long rest is skipped, the stream stays in sync */
    posted_before(5, 1000, 24, 77, 24);
    /* zero-length receive of a 1-byte message; then a 0-byte message */
    posted_before(6, 0, 0, 0, 0);
    /* unexpected 300000 into 100 */
    unexpected(7, 100, 24, 33, 24);

    command(NBATCH, 0);
    return 0;
}

int main(void)
{
    return tu_run("truncation", 1, server, client, NULL);
}
