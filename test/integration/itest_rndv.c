/*
 * itest_rndv: the rendezvous protocol (PSP_RENDEZVOUS=65536, set by the
 * test itself before the processes call pscom_init).
 *
 *  - sizes: 65535 B (eager: no RENDEZVOUS_REQUEST bit on the send), 64 KiB
 *    (the threshold itself), 1 MiB, 1 MiB + 13, 4 MiB, 16 MiB, 64 MiB, each
 *    with the receive posted before the message and after it arrived; the
 *    send request carries RENDEZVOUS_REQUEST|SEND_REQUEST; content, the
 *    xheader, header.data_len and guard bytes are checked.
 *  - unexpected rendezvous messages are not buffered: pscom_probe sees the
 *    full length, the receiver's resident memory does not grow by the
 *    message size (16/64 MiB), and the send does not complete while no
 *    receive is posted (the protocol completes a send only after the
 *    receiver matched it: CTS or FIN).
 *  - truncation: 4 MiB into a (1 MiB + 5) buffer, posted before and
 *    unexpected, and 1 MiB into a zero-length receive: DONE|TRUNCATED,
 *    the stored part right, guard untouched, header.data_len = sent length;
 *    the following eager and rendezvous messages are intact (the stream
 *    stays in sync); the sends complete successfully.
 *  - 40 messages in flight in each direction at the same time, rendezvous
 *    mixed with eager ones just below the threshold and small ones; half
 *    of the receives posted before, half after the sends; receives match
 *    in send order (sequence numbers in the xheader) with correct content.
 *  - any-source receives (socket receives and global ones) of rendezvous
 *    and eager messages from three clients: every message exactly once,
 *    per-source order kept, content right.
 *  - the sizes again with only the transport's variable set
 *    (PSP_TCP_RENDEZVOUS or PSP_UCP_RENDEZVOUS, PSP_RENDEZVOUS unset).
 *  - a matched rendezvous receive cannot be cancelled (pscom_cancel_recv
 *    returns 0 once IO_STARTED is set) and completes normally; a
 *    rendezvous send either cancels cleanly or completes normally.
 */
#define _GNU_SOURCE
#include "pscom_testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define THRESHOLD 65536u
#define GUARD     64
#define TAG_MSG   0x4d534721u
#define TAG_DONE  0x444f4e45u
#define TAG_FENCE 0x46454e43u

/* data receives take only data messages (not fences or the final tag) */
static int accept_msg(pscom_request_t *req, pscom_connection_t *con, pscom_header_net_t *hn)
{
    (void)req;
    (void)con;
    return tu_header_tag(hn) == 0x4d534721u;
}

typedef struct xh {
    uint32_t tag;
    uint32_t src;
    uint32_t seq;
    uint32_t len;
} xh_t;

static uint32_t seed_of(uint32_t src, uint32_t seq)
{
    return src * 100003u + seq * 7u + 1;
}

static pscom_request_t *post_send(pscom_connection_t *con, void *data, size_t len,
                                  uint32_t src, uint32_t seq)
{
    pscom_request_t *r = pscom_request_create(sizeof(xh_t), 0);
    TU_ASSERT_NOT_NULL(r);
    xh_t xh = {TAG_MSG, src, seq, (uint32_t)len};
    pscom_req_prepare(r, con, data, len, &xh, sizeof(xh));
    pscom_post_send(r);
    return r;
}

static pscom_request_t *post_recv(pscom_connection_t *con, pscom_socket_t *sock, void *data,
                                  size_t len)
{
    pscom_request_t *r = pscom_request_create(sizeof(xh_t), 0);
    TU_ASSERT_NOT_NULL(r);
    r->connection  = con;
    r->socket      = sock;
    r->data        = data;
    r->data_len    = len;
    r->xheader_len = sizeof(xh_t);
    r->ops.recv_accept = accept_msg;
    pscom_post_recv(r);
    return r;
}

static xh_t xh_of(pscom_request_t *r)
{
    xh_t xh;
    memcpy(&xh, (void *)&r->xheader, sizeof(xh));
    TU_ASSERT_EQ(xh.tag, TAG_MSG);
    return xh;
}

static void check_send(pscom_request_t *s, size_t len)
{
    pscom_wait(s);
    TU_ASSERT_SUCCESSFUL(s);
    TU_ASSERT_STATE_HAS(s->state, PSCOM_REQ_STATE_SEND_REQUEST);
    if (len >= THRESHOLD) {
        TU_ASSERT_STATE_HAS(s->state, PSCOM_REQ_STATE_RENDEZVOUS_REQUEST);
    } else {
        TU_ASSERT_STATE_LACKS(s->state, PSCOM_REQ_STATE_RENDEZVOUS_REQUEST);
    }
    pscom_request_free(s);
}

/* complete receive of message (src, seq) of len bytes into buf (cap + GUARD) */
static void check_recv(pscom_request_t *r, unsigned char *buf, size_t cap, uint32_t src,
                       uint32_t seq, size_t len)
{
    pscom_wait(r);
    xh_t xh = xh_of(r);
    TU_ASSERT_EQ(xh.src, src);
    TU_ASSERT_EQ(xh.seq, seq);
    TU_ASSERT_EQ(r->header.data_len, len);
    TU_ASSERT_EQ(r->data_len, cap);
    if (len > cap) {
        TU_ASSERT_STATE_HAS(r->state, PSCOM_REQ_STATE_DONE | PSCOM_REQ_STATE_TRUNCATED);
        TU_ASSERT_STATE_LACKS(r->state, PSCOM_REQ_STATE_ERROR | PSCOM_REQ_STATE_CANCELED);
    } else {
        TU_ASSERT_SUCCESSFUL(r);
    }
    size_t n = len < cap ? len : cap;
    TU_ASSERT_PATTERN(buf, n, seed_of(src, seq));
    TU_ASSERT_BYTES(buf + n, cap - n + GUARD, 0xee);
    pscom_request_free(r);
}

/* ---- sizes, posted before and after -------------------------------------------------- */

static const size_t sizes[] = {65535, 65536, 1u << 20, (1u << 20) + 13, 4u << 20, 16u << 20,
                               64u << 20};
#define NSIZES (sizeof(sizes) / sizeof(sizes[0]))

enum { SIG_GO = 1, SIG_SENT, SIG_PROBED, SIG_CHECKED };

static int sizes_server(tu_ctx_t *ctx)
{
    pscom_socket_t *sock = tu_open_socket(ctx, 0, 0);
    pscom_connection_t *con = tu_server_accept_one(ctx, sock);
    unsigned char *buf      = tu_malloc((64u << 20) + GUARD);

    uint32_t seq = 0;
    for (unsigned k = 0; k < NSIZES; k++) {
        size_t len = sizes[k];
        /* posted before */
        memset(buf, 0xee, len + GUARD);
        pscom_request_t *r = post_recv(con, NULL, buf, len);
        tu_signal(ctx, 1, SIG_GO);
        check_recv(r, buf, len, 1, seq++, len);

        /* posted after the message arrived */
        memset(buf, 0xee, len + GUARD);
        size_t rss0 = tu_rss_bytes();
        tu_signal(ctx, 1, SIG_GO);
        TU_ASSERT_EQ(tu_wait_signal(ctx, 1), SIG_SENT);
        pscom_request_t *p = tu_make_recv(con, NULL, len, sizeof(xh_t));
        pscom_probe(p);
        TU_ASSERT_EQ(p->header.data_len, len);
        TU_ASSERT_EQ(xh_of(p).seq, seq);
        pscom_request_free(p);
        size_t rss1 = tu_rss_bytes();
        if (len >= (16u << 20)) {
            TU_ASSERT_MSG(rss1 < rss0 + (8u << 20),
                          "unexpected rendezvous message of %zu bytes: resident memory grew "
                          "by %zu bytes (buffered?)",
                          len, rss1 - rss0);
        }
        tu_signal(ctx, 1, SIG_PROBED);
        TU_ASSERT_EQ(tu_wait_signal(ctx, 1), SIG_CHECKED);
        r = post_recv(con, NULL, buf, len);
        check_recv(r, buf, len, 1, seq++, len);
    }
    tu_wait_tag(con, NULL, TAG_DONE);
    free(buf);
    return 0;
}

static int sizes_client(tu_ctx_t *ctx)
{
    pscom_socket_t *sock    = tu_open_socket(ctx, 0, 0);
    pscom_connection_t *con = tu_client_connect(ctx, sock);
    unsigned char *buf      = tu_malloc(64u << 20);
    uint32_t seq            = 0;
    for (unsigned k = 0; k < NSIZES; k++) {
        size_t len = sizes[k];
        TU_ASSERT_EQ(tu_wait_signal(ctx, TU_SERVER), SIG_GO);
        tu_fill(buf, len, seed_of(1, seq));
        check_send(post_send(con, buf, len, 1, seq), len);
        seq++;

        TU_ASSERT_EQ(tu_wait_signal(ctx, TU_SERVER), SIG_GO);
        tu_fill(buf, len, seed_of(1, seq));
        pscom_request_t *s = post_send(con, buf, len, 1, seq);
        tu_signal(ctx, TU_SERVER, SIG_SENT);
        TU_ASSERT_EQ(tu_wait_signal(ctx, TU_SERVER), SIG_PROBED);
        /* the announcement has arrived; nobody receives it yet */
        for (int i = 0; i < 200; i++) pscom_test_any();
        if (len >= THRESHOLD) {
            TU_ASSERT_MSG(!pscom_req_is_done(s),
                          "rendezvous send of %zu bytes completed before the receive was "
                          "posted (state %s)",
                          len, tu_state_str(s->state));
        }
        tu_signal(ctx, TU_SERVER, SIG_CHECKED);
        check_send(s, len);
        seq++;
    }
    tu_send_tag(con, TAG_DONE);
    pscom_flush(con);
    free(buf);
    return 0;
}

/* ---- truncation ------------------------------------------------------------------------- */

#define TR_BIG   (4u << 20)
#define TR_SMALL ((1u << 20) + 5)

static int trunc_server(tu_ctx_t *ctx)
{
    pscom_socket_t *sock = tu_open_socket(ctx, 0, 0);
    pscom_connection_t *con = tu_server_accept_one(ctx, sock);
    unsigned char *buf      = tu_malloc((2u << 20) + GUARD);
    uint32_t seq            = 0;

    for (int round = 0; round < 3; round++) {
        /* round 0: posted before; round 1: unexpected; round 2: 0-byte receive */
        size_t cap = round == 2 ? 0 : TR_SMALL;
        size_t len = round == 2 ? (1u << 20) : TR_BIG;
        memset(buf, 0xee, cap + GUARD);
        pscom_request_t *r = NULL;
        if (round != 1) r = post_recv(con, NULL, cap ? buf : NULL, cap);
        tu_signal(ctx, 1, SIG_GO);
        if (round == 1) {
            TU_ASSERT_EQ(tu_wait_signal(ctx, 1), SIG_SENT);
            pscom_request_t *p = tu_make_recv(con, NULL, cap, sizeof(xh_t));
            pscom_probe(p);
            TU_ASSERT_EQ(p->header.data_len, len);
            TU_ASSERT_STATE_HAS(p->state, PSCOM_REQ_STATE_TRUNCATED);
            pscom_request_free(p);
            r = post_recv(con, NULL, buf, cap);
        }
        if (cap) {
            check_recv(r, buf, cap, 1, seq, len);
        } else {
            pscom_wait(r);
            TU_ASSERT_STATE_HAS(r->state, PSCOM_REQ_STATE_DONE | PSCOM_REQ_STATE_TRUNCATED);
            TU_ASSERT_STATE_LACKS(r->state, PSCOM_REQ_STATE_ERROR);
            TU_ASSERT_EQ(r->header.data_len, len);
            TU_ASSERT_EQ(xh_of(r).seq, seq);
            pscom_request_free(r);
        }
        seq++;
        /* the stream is in sync: an eager and a rendezvous message follow */
        memset(buf, 0xee, 100 + GUARD);
        check_recv(post_recv(con, NULL, buf, 100), buf, 100, 1, seq, 100);
        seq++;
        memset(buf, 0xee, (2u << 20) + GUARD);
        check_recv(post_recv(con, NULL, buf, 2u << 20), buf, 2u << 20, 1, seq, 2u << 20);
        seq++;
    }
    tu_wait_tag(con, NULL, TAG_DONE);
    free(buf);
    return 0;
}

static int trunc_client(tu_ctx_t *ctx)
{
    pscom_socket_t *sock    = tu_open_socket(ctx, 0, 0);
    pscom_connection_t *con = tu_client_connect(ctx, sock);
    unsigned char *big      = tu_malloc(TR_BIG);
    unsigned char *small    = tu_malloc(100);
    unsigned char *mid      = tu_malloc(2u << 20);
    uint32_t seq            = 0;
    for (int round = 0; round < 3; round++) {
        size_t len = round == 2 ? (1u << 20) : TR_BIG;
        TU_ASSERT_EQ(tu_wait_signal(ctx, TU_SERVER), SIG_GO);
        tu_fill(big, len, seed_of(1, seq));
        pscom_request_t *s1 = post_send(con, big, len, 1, seq++);
        if (round == 1) tu_signal(ctx, TU_SERVER, SIG_SENT);
        tu_fill(small, 100, seed_of(1, seq));
        pscom_request_t *s2 = post_send(con, small, 100, 1, seq++);
        tu_fill(mid, 2u << 20, seed_of(1, seq));
        pscom_request_t *s3 = post_send(con, mid, 2u << 20, 1, seq++);
        check_send(s1, len);
        check_send(s2, 100);
        check_send(s3, 2u << 20);
    }
    tu_send_tag(con, TAG_DONE);
    pscom_flush(con);
    free(big);
    free(small);
    free(mid);
    return 0;
}

/* ---- many in flight, both directions ------------------------------------------------------ */

#define NFLOOD  40
#define FL_CAP  ((2u << 20) + 4096)

static size_t flood_len(uint32_t seq)
{
    switch (seq % 4) {
    case 0: return (seq * 37u) % 3000u;              /* small eager */
    case 1: return THRESHOLD + seq * 4099u;           /* rendezvous */
    case 2: return (1u << 20) + seq * 17u;            /* rendezvous */
    default: return THRESHOLD - 1 - seq;              /* eager, just below */
    }
}

static void flood(pscom_connection_t *con, uint32_t me, uint32_t peer)
{
    unsigned char *sbuf[NFLOOD], *rbuf[NFLOOD];
    pscom_request_t *sreq[NFLOOD], *rreq[NFLOOD];
    for (uint32_t i = 0; i < NFLOOD; i++) {
        sbuf[i] = tu_malloc(flood_len(i));
        tu_fill(sbuf[i], flood_len(i), seed_of(me, i));
        rbuf[i] = tu_malloc(FL_CAP + GUARD);
        memset(rbuf[i], 0xee, FL_CAP + GUARD);
    }
    for (uint32_t i = 0; i < NFLOOD / 2; i++) rreq[i] = post_recv(con, NULL, rbuf[i], FL_CAP);
    for (uint32_t i = 0; i < NFLOOD; i++) sreq[i] = post_send(con, sbuf[i], flood_len(i), me, i);
    for (uint32_t i = NFLOOD / 2; i < NFLOOD; i++)
        rreq[i] = post_recv(con, NULL, rbuf[i], FL_CAP);
    for (uint32_t i = 0; i < NFLOOD; i++) {
        check_recv(rreq[i], rbuf[i], FL_CAP, peer, i, flood_len(i));
    }
    for (uint32_t i = 0; i < NFLOOD; i++) {
        check_send(sreq[i], flood_len(i));
        free(sbuf[i]);
        free(rbuf[i]);
    }
}

static int flood_server(tu_ctx_t *ctx)
{
    pscom_socket_t *sock = tu_open_socket(ctx, 0, 0);
    pscom_connection_t *con = tu_server_accept_one(ctx, sock);
    flood(con, 0, 1);
    tu_wait_tag(con, NULL, TAG_DONE);
    return 0;
}

static int flood_client(tu_ctx_t *ctx)
{
    pscom_socket_t *sock    = tu_open_socket(ctx, 0, 0);
    pscom_connection_t *con = tu_client_connect(ctx, sock);
    flood(con, 1, 0);
    tu_send_tag(con, TAG_DONE);
    pscom_flush(con);
    return 0;
}

/* ---- any-source receives from three clients ------------------------------------------------- */

#define NANY_CLIENTS 3
#define NANY_MSGS    8
#define ANY_CAP      ((1u << 20) + 4096)

static size_t any_len(uint32_t seq)
{
    return seq % 2 ? (1u << 20) + seq : (seq % 4 ? 500 + seq : THRESHOLD + seq);
}

static int any_server(tu_ctx_t *ctx)
{
    pscom_connection_t *cons[NANY_CLIENTS + 1];
    pscom_socket_t *sock = tu_open_socket(ctx, 0, 0);
    tu_server_listen(ctx, sock);
    tu_server_accept_all(ctx, sock, cons);
    const int total = NANY_CLIENTS * NANY_MSGS;
    pscom_request_t *r[NANY_CLIENTS * NANY_MSGS];
    unsigned char *b[NANY_CLIENTS * NANY_MSGS];
    for (int i = 0; i < total; i++) {
        b[i] = tu_malloc(ANY_CAP + GUARD);
        memset(b[i], 0xee, ANY_CAP + GUARD);
    }
    /* the first half on the socket before anything was sent */
    for (int i = 0; i < total / 2; i++) r[i] = post_recv(NULL, sock, b[i], ANY_CAP);
    for (int c = 1; c <= NANY_CLIENTS; c++) tu_signal(ctx, c, SIG_GO);
    /* wait until everything has arrived (the last message of each client:
     * messages of a connection are ordered), so that the second half is
     * unexpected, then receive it with global any-source receives */
    for (int c = 1; c <= NANY_CLIENTS; c++) {
        TU_ASSERT_EQ(tu_wait_signal(ctx, c), SIG_SENT);
        pscom_request_t *p = pscom_request_create(sizeof(uint32_t), sizeof(uint32_t));
        uint32_t fence     = TAG_FENCE;
        memcpy((void *)p->user, &fence, sizeof(fence));
        p->connection      = cons[c];
        p->socket          = sock;
        p->xheader_len     = sizeof(uint32_t);
        p->ops.recv_accept = tu_accept_tag;
        pscom_probe(p); /* the fence follows the client's last message */
        pscom_request_free(p);
    }
    for (int i = total / 2; i < total; i++) r[i] = post_recv(NULL, NULL, b[i], ANY_CAP);

    int next_seq[NANY_CLIENTS + 1] = {0};
    for (int i = 0; i < total; i++) {
        pscom_wait(r[i]);
        TU_ASSERT_SUCCESSFUL(r[i]);
        xh_t xh = xh_of(r[i]);
        TU_ASSERT_MSG(xh.src >= 1 && xh.src <= NANY_CLIENTS, "src %u", xh.src);
        TU_ASSERT_PTR_EQ(r[i]->connection, cons[xh.src]);
        /* per-source order: receives are matched in posting order */
        TU_ASSERT_EQ(xh.seq, next_seq[xh.src]);
        next_seq[xh.src]++;
        size_t len = any_len(xh.seq);
        TU_ASSERT_EQ(r[i]->header.data_len, len);
        TU_ASSERT_PATTERN(b[i], len, seed_of(xh.src, xh.seq));
        TU_ASSERT_BYTES(b[i] + len, ANY_CAP - len + GUARD, 0xee);
        pscom_request_free(r[i]);
        free(b[i]);
    }
    for (int c = 1; c <= NANY_CLIENTS; c++) TU_ASSERT_EQ(next_seq[c], NANY_MSGS);
    for (int c = 1; c <= NANY_CLIENTS; c++) tu_wait_tag(cons[c], NULL, TAG_FENCE);
    for (int c = 1; c <= NANY_CLIENTS; c++) tu_signal(ctx, c, SIG_CHECKED);
    return 0;
}

static int any_client(tu_ctx_t *ctx)
{
    pscom_socket_t *sock    = tu_open_socket(ctx, 0, 0);
    pscom_connection_t *con = tu_client_connect(ctx, sock);
    unsigned char *buf[NANY_MSGS];
    pscom_request_t *s[NANY_MSGS];
    TU_ASSERT_EQ(tu_wait_signal(ctx, TU_SERVER), SIG_GO);
    for (uint32_t i = 0; i < NANY_MSGS; i++) {
        buf[i] = tu_malloc(any_len(i));
        tu_fill(buf[i], any_len(i), seed_of((uint32_t)ctx->rank, i));
        s[i] = post_send(con, buf[i], any_len(i), (uint32_t)ctx->rank, i);
    }
    tu_send_tag(con, TAG_FENCE); /* eager, behind all announcements */
    tu_signal(ctx, TU_SERVER, SIG_SENT);
    for (uint32_t i = 0; i < NANY_MSGS; i++) {
        check_send(s[i], any_len(i));
        free(buf[i]);
    }
    TU_ASSERT_EQ(tu_wait_signal(ctx, TU_SERVER), SIG_CHECKED);
    return 0;
}

/* ---- cancel ------------------------------------------------------------------------------- */

#define CN_LEN (16u << 20)

static int cancel_server(tu_ctx_t *ctx)
{
    pscom_socket_t *sock = tu_open_socket(ctx, 0, 0);
    pscom_connection_t *con = tu_server_accept_one(ctx, sock);
    unsigned char *buf      = tu_malloc(CN_LEN + GUARD);
    memset(buf, 0xee, CN_LEN + GUARD);

    TU_ASSERT_EQ(tu_wait_signal(ctx, 1), SIG_SENT);
    pscom_request_t *p = pscom_request_create(sizeof(xh_t), 0);
    p->connection      = con;
    p->socket          = sock;
    p->xheader_len     = sizeof(xh_t);
    pscom_probe(p);
    pscom_request_free(p);
    pscom_request_t *r = post_recv(con, NULL, buf, CN_LEN); /* matches the announcement */
    TU_ASSERT_STATE_HAS(r->state, PSCOM_REQ_STATE_IO_STARTED);
    TU_ASSERT_EQ(pscom_cancel_recv(r), 0);
    TU_ASSERT_EQ(pscom_cancel(r), 0);
    TU_ASSERT_STATE_LACKS(r->state, PSCOM_REQ_STATE_CANCELED);
    tu_signal(ctx, 1, SIG_PROBED);
    check_recv(r, buf, CN_LEN, 1, 0, CN_LEN);

    /* a cancelled rendezvous send never arrives; a not cancelled one does */
    uint32_t cancelled = tu_wait_signal(ctx, 1);
    memset(buf, 0xee, CN_LEN + GUARD);
    if (!cancelled) check_recv(post_recv(con, NULL, buf, CN_LEN), buf, CN_LEN, 1, 1, CN_LEN);
    memset(buf, 0xee, 100 + GUARD);
    check_recv(post_recv(con, NULL, buf, 100), buf, 100, 1, 2, 100);
    tu_wait_tag(con, NULL, TAG_DONE);
    free(buf);
    return 0;
}

static int cancel_client(tu_ctx_t *ctx)
{
    pscom_socket_t *sock    = tu_open_socket(ctx, 0, 0);
    pscom_connection_t *con = tu_client_connect(ctx, sock);
    unsigned char *buf      = tu_malloc(CN_LEN);
    tu_fill(buf, CN_LEN, seed_of(1, 0));
    pscom_request_t *s = post_send(con, buf, CN_LEN, 1, 0);
    tu_signal(ctx, TU_SERVER, SIG_SENT);
    TU_ASSERT_EQ(tu_wait_signal(ctx, TU_SERVER), SIG_PROBED);
    check_send(s, CN_LEN);

    unsigned char *buf2 = tu_malloc(CN_LEN);
    tu_fill(buf2, CN_LEN, seed_of(1, 1));
    s           = post_send(con, buf2, CN_LEN, 1, 1);
    int cancelled = pscom_cancel_send(s);
    tu_signal(ctx, TU_SERVER, (uint32_t)cancelled);
    if (cancelled) {
        pscom_wait(s);
        TU_ASSERT_STATE_HAS(s->state, PSCOM_REQ_STATE_DONE | PSCOM_REQ_STATE_CANCELED);
        pscom_request_free(s);
    } else {
        check_send(s, CN_LEN);
    }
    unsigned char small[100];
    tu_fill(small, sizeof(small), seed_of(1, 2));
    check_send(post_send(con, small, sizeof(small), 1, 2), sizeof(small));
    tu_send_tag(con, TAG_DONE);
    pscom_flush(con);
    free(buf);
    free(buf2);
    return 0;
}

int main(void)
{
    char thr[32];
    snprintf(thr, sizeof(thr), "%u", THRESHOLD);
    setenv("PSP_RENDEZVOUS", thr, 1); /* the children call pscom_init after fork */

    if (tu_run("rndv_sizes", 1, sizes_server, sizes_client, NULL)) return 1;
    if (tu_run("rndv_truncation", 1, trunc_server, trunc_client, NULL)) return 1;
    if (tu_run("rndv_flood", 1, flood_server, flood_client, NULL)) return 1;
    if (tu_run("rndv_any_source", NANY_CLIENTS, any_server, any_client, NULL)) return 1;
    if (tu_run("rndv_cancel", 1, cancel_server, cancel_client, NULL)) return 1;

    /* the transport's own variable alone sets the threshold as well
     * (PSP_TCP_RENDEZVOUS, PSP_UCP_RENDEZVOUS; shm's PSP_SHM_RENDEZVOUS is
     * its single-copy threshold, see lib/plugins/shm) */
    const char *type = tu_contype();
    if (type && (!strcmp(type, "tcp") || !strcmp(type, "ucp"))) {
        char var[32];
        snprintf(var, sizeof(var), "PSP_%s_RENDEZVOUS", !strcmp(type, "tcp") ? "TCP" : "UCP");
        unsetenv("PSP_RENDEZVOUS");
        setenv(var, thr, 1);
        if (tu_run("rndv_sizes_transport_var", 1, sizes_server, sizes_client, NULL)) return 1;
    }
    return 0;
}
