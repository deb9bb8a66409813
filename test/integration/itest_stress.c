/*
 * itest_stress: both sides send NMSG messages at once (full duplex, every
 * send posted before the first receive) of sizes spread from 0 bytes to
 * 1 MiB (log-uniform), with xheaders of 12..64 bytes, and receive them
 * through a sliding window of posted receives: some are any-source, every
 * fifth is shorter than its message (truncated: the real length is
 * reported, the stream stays in sync), some longer. Messages beyond the
 * window arrive unexpected. Every length, xheader byte and payload byte is
 * checked, in order.
 *
 * The second run sets UCX_RNDV_THRESH=inf: over ucp, every message longer
 * than one UCX fragment is then a fragmented eager message. That run found
 * the plugin's hang on receives UCX completes inside the call that posts
 * them (lib/plugins/ucp/README.md, *Receiving*; itest_ucp's eager_burst
 * reproduces it alone).
 */
#include "pscom_testutil.h"

#include <stdlib.h>
#include <string.h>

#define NMSG    3000
#define WINDOW  8
#define TAG_MSG 0x53545253u
#define TAG_GOT 0x47414c4cu /* got all of the peer's messages */
#define NPAD    13

typedef struct xh {
    uint32_t tag, seq, len;
    uint32_t pad[NPAD]; /* sent up to xlen_of() */
} xh_t;

static uint32_t mix(uint32_t x)
{
    x ^= x >> 16;
    x *= 0x7feb352du;
    x ^= x >> 15;
    x *= 0x846ca68bu;
    x ^= x >> 16;
    return x;
}

/* message seq in direction dir (1: client to server, 2: back) */
static size_t len_of(int dir, uint32_t seq)
{
    uint32_t r    = mix(seq * 3 + (uint32_t)dir);
    unsigned bits = r % 21;
    return bits ? mix(r) & ((1u << bits) - 1) : 0;
}

static size_t xlen_of(int dir, uint32_t seq)
{
    return 12 + mix(seq * 7 + (uint32_t)dir) % (sizeof(xh_t) - 12 + 1);
}

/* the receiver's buffer */
static size_t cap_of(int dir, uint32_t seq)
{
    size_t len = len_of(dir, seq);
    switch (mix(seq * 11 + (uint32_t)dir) % 5) {
    case 0: return len / 2;
    case 1: return len + 100;
    default: return len;
    }
}

static int any_of(uint32_t seq)
{
    return mix(seq) % 3 == 0;
}

static uint32_t seed_of(int dir, uint32_t seq)
{
    return (uint32_t)dir * 1000003u + seq;
}

typedef struct sends {
    pscom_request_t *req[NMSG];
    unsigned char *buf[NMSG];
} sends_t;

static sends_t *send_all(pscom_connection_t *con, int dir)
{
    sends_t *s = tu_malloc(sizeof(*s));
    for (uint32_t i = 0; i < NMSG; i++) {
        size_t len = len_of(dir, i), xlen = xlen_of(dir, i);
        xh_t xh    = {TAG_MSG, i, (uint32_t)len, {0}};
        for (uint32_t k = 0; k < NPAD; k++) xh.pad[k] = i ^ k;
        s->buf[i] = tu_malloc(len + 1);
        tu_fill(s->buf[i], len, seed_of(dir, i));
        s->req[i] = pscom_request_create(sizeof(xh), 0);
        TU_ASSERT_NOT_NULL(s->req[i]);
        pscom_req_prepare(s->req[i], con, s->buf[i], len, &xh, xlen);
        pscom_post_send(s->req[i]);
        if (i % 64 == 63) pscom_test_any();
    }
    return s;
}

static void sends_done(sends_t *s)
{
    for (uint32_t i = 0; i < NMSG; i++) {
        pscom_wait(s->req[i]);
        TU_ASSERT_SUCCESSFUL(s->req[i]);
        pscom_request_free(s->req[i]);
        free(s->buf[i]);
    }
    free(s);
}

static void post(pscom_request_t *req, pscom_connection_t *con, unsigned char **buf, int dir,
                 uint32_t seq)
{
    *buf             = tu_malloc(cap_of(dir, seq) + 1);
    req->connection  = any_of(seq) ? NULL : con;
    req->socket      = con->socket;
    req->data        = *buf;
    req->data_len    = cap_of(dir, seq);
    req->xheader_len = sizeof(xh_t);
    pscom_post_recv(req);
}

static void check(pscom_request_t *req, const unsigned char *buf, int dir, uint32_t seq)
{
    size_t len = len_of(dir, seq), cap = cap_of(dir, seq), xlen = xlen_of(dir, seq);
    if (cap < len) {
        TU_ASSERT_MSG(req->state & PSCOM_REQ_STATE_TRUNCATED, "message %u: state 0x%x", seq,
                      (unsigned)req->state);
    } else {
        TU_ASSERT_SUCCESSFUL(req);
    }
    xh_t xh;
    memcpy(&xh, (const void *)&req->xheader, sizeof(xh));
    TU_ASSERT_EQ(xh.tag, TAG_MSG);
    TU_ASSERT_MSG(xh.seq == seq, "got message %u, expected %u", xh.seq, seq);
    TU_ASSERT_EQ(xh.len, len);
    for (uint32_t k = 0; 12 + 4 * (k + 1) <= xlen; k++) TU_ASSERT_EQ(xh.pad[k], seq ^ k);
    TU_ASSERT_EQ(req->header.data_len, len);
    TU_ASSERT_EQ(req->header.xheader_len, xlen);
    TU_ASSERT_PATTERN(buf, cap < len ? cap : len, seed_of(dir, seq));
}

static void recv_all(pscom_connection_t *con, int dir)
{
    pscom_request_t *req[WINDOW];
    unsigned char *buf[WINDOW];
    for (uint32_t i = 0; i < WINDOW; i++) {
        req[i] = pscom_request_create(sizeof(xh_t), 0);
        TU_ASSERT_NOT_NULL(req[i]);
        post(req[i], con, &buf[i], dir, i);
    }
    for (uint32_t i = 0; i < NMSG; i++) {
        uint32_t w = i % WINDOW;
        pscom_wait(req[w]);
        check(req[w], buf[w], dir, i);
        free(buf[w]);
        if (i + WINDOW < NMSG) {
            post(req[w], con, &buf[w], dir, i + WINDOW);
        } else {
            pscom_request_free(req[w]);
        }
    }
}

/* one side's whole run: it sends in direction dir, the peer in 3 - dir */
static int run(pscom_socket_t *sock, pscom_connection_t *con, int dir)
{
    sends_t *s = send_all(con, dir);
    recv_all(con, 3 - dir);
    sends_done(s);
    tu_send_tag(con, TAG_GOT);
    tu_wait_tag(con, NULL, TAG_GOT);
    pscom_close_socket(sock);
    return 0;
}

static int server(tu_ctx_t *ctx)
{
    pscom_socket_t *sock = tu_open_socket(ctx, 0, 0);
    return run(sock, tu_server_accept_one(ctx, sock), 2);
}

static int client(tu_ctx_t *ctx)
{
    pscom_socket_t *sock = tu_open_socket(ctx, 0, 0);
    return run(sock, tu_client_connect(ctx, sock), 1);
}

int main(void)
{
    if (tu_run("stress", 1, server, client, NULL)) return 1;
    /* over ucp: eager fragments at any size (the children inherit it) */
    setenv("UCX_RNDV_THRESH", "inf", 1);
    return tu_run("stress_eager", 1, server, client, NULL);
}
