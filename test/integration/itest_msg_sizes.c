/*
 * itest_msg_sizes: messages of 0 B .. 64 MiB (powers of two and odd
 * sizes) with xheaders of 0..100 bytes, content checked byte by byte, in
 * both directions, with receives posted before the message arrives and
 * after it arrived (unexpected path, spec 5.3 / 3.7 #3).
 *
 * Receive checks (spec 5.5, 5.12 #6): the request is successful; the
 * header carries the sender's lengths; data and the first xheader_len
 * bytes of the xheader are correct; nothing beyond data_len / the incoming
 * xheader length is written; req->data_len / req->xheader_len keep the
 * posted values; req->connection is the source connection.
 */
#include "pscom_testutil.h"

#include <stdlib.h>
#include <string.h>

#define TAG_GO    0x474f4f21u /* "!OOG" */
#define TAG_FENCE 0x46454e43u
#define MAX_XH    100
#define GUARD     16
#define BIG       (64u << 20)

static const size_t sizes[] = {
    0,     1,     2,     3,     4,     7,      8,      15,     16,     31,
    32,    33,    63,    64,    100,   127,    128,    255,    256,    257,
    511,   512,   1000,  1023,  1024,  2048,   4095,   4096,   4097,   8192,
    16384, 32768, 65535, 65536, 65537, 100003, 131072, 262144, 524288, 1000003,
    1048576};
#define NSIZES (sizeof(sizes) / sizeof(sizes[0]))
static const size_t xlens[] = {0, 1, 3, 4, 7, 8, 16, 31, 32, 33, 64, 99, 100};
#define NXLENS (sizeof(xlens) / sizeof(xlens[0]))

typedef struct msg {
    size_t len;
    size_t xlen;
    uint32_t seed;
} msg_t;

static msg_t msg_of(int phase, size_t i, int with_big)
{
    msg_t m;
    if (with_big && i == NSIZES) {
        m.len = BIG;
    } else {
        m.len = sizes[i];
    }
    m.xlen = xlens[(i + (size_t)phase) % NXLENS];
    /* make_xheader() asserts that the xheader never looks like a tag */
    m.seed = (uint32_t)(phase * 1000 + (int)i);
    return m;
}

static size_t nmsgs(int with_big)
{
    return NSIZES + (with_big ? 1 : 0);
}

/* ---------------- sending ---------------- */

static unsigned char *make_xheader(const msg_t *m, unsigned char *xh)
{
    tu_fill(xh, m->xlen, m->seed ^ 0x5a5a5a5au);
    if (m->xlen >= 4) {
        uint32_t t;
        memcpy(&t, xh, 4);
        TU_ASSERT_MSG(t != TAG_GO && t != TAG_FENCE && t != TU_TAG_HELLO,
                      "xheader pattern collides with a tag (seed %u)", m->seed);
    }
    return xh;
}

/* request based sends (pscom_post_send) */
static void send_all_post(pscom_connection_t *con, int phase, int with_big)
{
    size_t n               = nmsgs(with_big);
    pscom_request_t **reqs = (pscom_request_t **)tu_malloc(sizeof(*reqs) * (n + 1));
    void **bufs            = (void **)tu_malloc(sizeof(void *) * n);
    for (size_t i = 0; i < n; i++) {
        msg_t m = msg_of(phase, i, with_big);
        unsigned char xh[MAX_XH];
        bufs[i] = tu_malloc(m.len);
        tu_fill(bufs[i], m.len, m.seed);
        reqs[i] = pscom_request_create(MAX_XH, 0);
        TU_ASSERT_NOT_NULL(reqs[i]);
        pscom_req_prepare(reqs[i], con, bufs[i], m.len, make_xheader(&m, xh), m.xlen);
        pscom_post_send(reqs[i]);
    }
    reqs[n] = NULL;
    pscom_wait_all(reqs);
    for (size_t i = 0; i < n; i++) {
        TU_ASSERT_SUCCESSFUL(reqs[i]);
        TU_ASSERT_STATE_HAS(reqs[i]->state, PSCOM_REQ_STATE_SEND_REQUEST |
                                                 PSCOM_REQ_STATE_IO_DONE);
        pscom_request_free(reqs[i]);
        free(bufs[i]);
    }
    free(bufs);
    free(reqs);
}

/* copying sends (pscom_send): the buffers are reused at once */
static void send_all_copy(pscom_connection_t *con, int phase, int with_big)
{
    size_t n        = nmsgs(with_big);
    unsigned char *buf = (unsigned char *)tu_malloc(with_big ? BIG : sizes[NSIZES - 1]);
    for (size_t i = 0; i < n; i++) {
        msg_t m = msg_of(phase, i, with_big);
        unsigned char xh[MAX_XH];
        tu_fill(buf, m.len, m.seed);
        pscom_send(con, make_xheader(&m, xh), m.xlen, buf, m.len);
        /* scribble: pscom_send copied the data */
        memset(buf, 0xee, m.len);
        memset(xh, 0xee, sizeof(xh));
    }
    free(buf);
}

static volatile int inplace_done;

static void inplace_io_done(pscom_req_state_t state, void *priv)
{
    TU_ASSERT_MSG(pscom_req_state_successful(state), "state 0x%x [%s]", state,
                  tu_state_str(state));
    free(priv);
    inplace_done++;
}

/* pscom_send_inplace: data buffer owned until io_done */
static void send_all_inplace(pscom_connection_t *con, int phase, int with_big)
{
    size_t n     = nmsgs(with_big);
    inplace_done = 0;
    for (size_t i = 0; i < n; i++) {
        msg_t m = msg_of(phase, i, with_big);
        unsigned char xh[MAX_XH];
        void *buf = tu_malloc(m.len);
        tu_fill(buf, m.len, m.seed);
        pscom_send_inplace(con, make_xheader(&m, xh), m.xlen, buf, m.len,
                           inplace_io_done, buf);
        memset(xh, 0xee, sizeof(xh)); /* the xheader is copied */
    }
    while (inplace_done < (int)n) pscom_wait_any();
    TU_ASSERT_EQ(inplace_done, n);
}

/* ---------------- receiving ---------------- */

typedef struct rx {
    pscom_request_t *req;
    unsigned char *buf;
    msg_t m;
} rx_t;

static void rx_post(rx_t *rx, pscom_connection_t *con, const msg_t *m)
{
    rx->m   = *m;
    rx->buf = (unsigned char *)tu_malloc(m->len + GUARD);
    memset(rx->buf, 0xa5, m->len + GUARD);
    rx->req = pscom_request_create(MAX_XH, 0);
    TU_ASSERT_NOT_NULL(rx->req);
    TU_ASSERT_GE(rx->req->max_xheader_len, MAX_XH);
    memset((void *)&rx->req->xheader, 0x5a, rx->req->max_xheader_len);
    rx->req->connection  = con;
    rx->req->socket      = con->socket;
    rx->req->data        = rx->buf;
    rx->req->data_len    = m->len;
    rx->req->xheader_len = MAX_XH;
    pscom_post_recv(rx->req);
}

static void rx_check(rx_t *rx, pscom_connection_t *con)
{
    pscom_request_t *req = rx->req;
    const msg_t *m       = &rx->m;
    TU_ASSERT_SUCCESSFUL(req);
    TU_ASSERT_STATE_HAS(req->state, PSCOM_REQ_STATE_RECV_REQUEST |
                                        PSCOM_REQ_STATE_IO_DONE |
                                        PSCOM_REQ_STATE_DONE);
    TU_ASSERT_STATE_LACKS(req->state, PSCOM_REQ_STATE_TRUNCATED |
                                          PSCOM_REQ_STATE_ERROR |
                                          PSCOM_REQ_STATE_CANCELED);
    TU_ASSERT_EQ(req->header.data_len, m->len);
    TU_ASSERT_EQ(req->header.xheader_len, m->xlen);
    TU_ASSERT_EQ(req->data_len, m->len);    /* posted value kept */
    TU_ASSERT_EQ(req->xheader_len, MAX_XH); /* posted value kept */
    TU_ASSERT_PTR_EQ(req->connection, con);
    TU_ASSERT_PTR_EQ(req->data, rx->buf);
    TU_ASSERT_PATTERN(rx->buf, m->len, m->seed);
    TU_ASSERT_BYTES(rx->buf + m->len, GUARD, 0xa5);
    const unsigned char *xh = (const unsigned char *)&req->xheader;
    TU_ASSERT_PATTERN(xh, m->xlen, m->seed ^ 0x5a5a5a5au);
    TU_ASSERT_BYTES(xh + m->xlen, MAX_XH - m->xlen, 0x5a);
    pscom_request_free(req);
    free(rx->buf);
    rx->req = NULL;
    rx->buf = NULL;
}

/* receives posted before the sender starts (it waits for TAG_GO) */
static void recv_all_posted_before(pscom_connection_t *con, int phase, int with_big)
{
    size_t n = nmsgs(with_big);
    rx_t *rx = (rx_t *)tu_malloc(sizeof(rx_t) * n);
    for (size_t i = 0; i < n; i++) {
        msg_t m = msg_of(phase, i, with_big);
        rx_post(&rx[i], con, &m);
        TU_ASSERT_STATE_LACKS(rx[i].req->state, PSCOM_REQ_STATE_DONE);
        TU_ASSERT_STATE_HAS(rx[i].req->state,
                            PSCOM_REQ_STATE_RECV_REQUEST | PSCOM_REQ_STATE_POSTED);
    }
    tu_send_tag(con, TAG_GO);
    for (size_t i = 0; i < n; i++) {
        pscom_wait(rx[i].req);
        rx_check(&rx[i], con);
    }
    free(rx);
}

/* receives posted after everything arrived: the sender sends a fence
 * after the messages; once it is here, all earlier messages of the
 * connection are complete unexpected messages, and each post_recv must
 * merge synchronously (DONE before it returns, spec 5.2 / 3.7 #3) */
static void recv_all_unexpected(pscom_connection_t *con, int phase)
{
    size_t n = nmsgs(0);
    tu_wait_tag(con, NULL, TAG_FENCE);
    for (size_t i = 0; i < n; i++) {
        rx_t rx;
        msg_t m = msg_of(phase, i, 0);
        rx_post(&rx, con, &m);
        TU_ASSERT_MSG(pscom_req_is_done(rx.req),
                      "message %zu (len %zu) already arrived, but post_recv "
                      "did not complete it synchronously: state [%s]",
                      i, m.len, tu_state_str(rx.req->state));
        rx_check(&rx, con);
    }
}

/* ---------------- roles ---------------- */

static int server(tu_ctx_t *ctx)
{
    pscom_socket_t *sock = tu_open_socket(ctx, 0, 0);
    pscom_connection_t *con = tu_server_accept_one(ctx, sock);

    /* A: client -> server, posted before, incl. 64 MiB (post_send) */
    recv_all_posted_before(con, 1, 1);
    /* B: client -> server, unexpected (pscom_send) */
    recv_all_unexpected(con, 2);
    /* C: server -> client, posted before (pscom_send) */
    tu_wait_tag(con, NULL, TAG_GO);
    send_all_copy(con, 3, 0);
    /* D: server -> client, unexpected (pscom_send_inplace) */
    send_all_inplace(con, 4, 0);
    tu_send_tag(con, TAG_FENCE);
    /* E: server -> client, post_send, posted before */
    tu_wait_tag(con, NULL, TAG_GO);
    send_all_post(con, 5, 0);
    return 0;
}

static int client(tu_ctx_t *ctx)
{
    pscom_socket_t *sock    = tu_open_socket(ctx, 0, 0);
    pscom_connection_t *con = tu_client_connect(ctx, sock);

    /* A */
    tu_wait_tag(con, NULL, TAG_GO);
    send_all_post(con, 1, 1);
    /* B */
    send_all_copy(con, 2, 0);
    tu_send_tag(con, TAG_FENCE);
    /* C */
    recv_all_posted_before(con, 3, 0);
    /* D */
    recv_all_unexpected(con, 4);
    /* E */
    recv_all_posted_before(con, 5, 0);
    return 0;
}

int main(void)
{
    return tu_run("msg_sizes", 1, server, client, NULL);
}
