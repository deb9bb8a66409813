/*
 * itest_order: 10,000 messages on one connection arrive in send order
 * (spec 5.4), in both directions at the same time (full duplex; both
 * sides queue all sends before receiving). Sequence numbers travel in the
 * xheader; every payload (0..300 bytes) is checked. pscom_send and
 * pscom_send_inplace are interleaved: they share one FIFO send queue.
 * Receives are posted through a sliding window of 16 requests, so some
 * messages hit posted receives and others arrive unexpected.
 *
 * Second scenario (order_repost): 20,000 messages wait unexpected at the
 * server; then one receive whose io_done re-posts it takes them all, in
 * order, and the callbacks nest at most a few levels deep (each re-post
 * completed at once and ran the next io_done inside it: 200,000 such
 * messages overflowed the stack until 2026-11-29).
 */
#include "pscom_testutil.h"

#include <stdlib.h>
#include <string.h>

#define NMSG    10000
#define WINDOW  16
#define MAXLEN  301
#define TAG_SEQ 0x53455121u

typedef struct xh {
    uint32_t tag;
    uint32_t seq;
    uint32_t len;
} xh_t;

static size_t len_of(uint32_t seq)
{
    return (size_t)((seq * 37u) % MAXLEN);
}

static uint32_t seed_of(int dir, uint32_t seq)
{
    return (uint32_t)dir * 1000003u + seq;
}

static unsigned char *send_all(pscom_connection_t *con, int dir)
{
    /* all payloads in one region: pscom_send_inplace needs them until
     * completion */
    size_t total = 0;
    for (uint32_t s = 0; s < NMSG; s++) total += len_of(s);
    unsigned char *region = (unsigned char *)tu_malloc(total);
    size_t off            = 0;
    for (uint32_t s = 0; s < NMSG; s++) {
        size_t len = len_of(s);
        xh_t xh    = {TAG_SEQ, s, (uint32_t)len};
        tu_fill(region + off, len, seed_of(dir, s));
        if (s % 2) {
            pscom_send(con, &xh, sizeof(xh), region + off, len);
        } else {
            pscom_send_inplace(con, &xh, sizeof(xh), region + off, len, NULL, NULL);
        }
        off += len;
    }
    return region;
}

static void post(pscom_request_t *req, pscom_connection_t *con, unsigned char *buf)
{
    req->connection  = con;
    req->socket      = con->socket;
    req->data        = buf;
    req->data_len    = MAXLEN;
    req->xheader_len = sizeof(xh_t);
    pscom_post_recv(req);
}

static void recv_all(pscom_connection_t *con, int dir)
{
    pscom_request_t *reqs[WINDOW];
    unsigned char *bufs[WINDOW];
    for (int w = 0; w < WINDOW; w++) {
        reqs[w] = pscom_request_create(sizeof(xh_t), 0);
        TU_ASSERT_NOT_NULL(reqs[w]);
        bufs[w] = (unsigned char *)tu_malloc(MAXLEN);
        post(reqs[w], con, bufs[w]);
    }
    for (uint32_t expect = 0; expect < NMSG; expect++) {
        int w                = (int)(expect % WINDOW);
        pscom_request_t *req = reqs[w];
        pscom_wait(req);
        TU_ASSERT_SUCCESSFUL(req);
        xh_t xh;
        memcpy(&xh, (const void *)&req->xheader, sizeof(xh));
        TU_ASSERT_EQ(xh.tag, TAG_SEQ);
        TU_ASSERT_MSG(xh.seq == expect, "out of order: got seq %u, expected %u",
                      xh.seq, expect);
        TU_ASSERT_EQ(xh.len, len_of(expect));
        TU_ASSERT_EQ(req->header.data_len, len_of(expect));
        TU_ASSERT_EQ(req->header.xheader_len, sizeof(xh_t));
        TU_ASSERT_PATTERN(bufs[w], len_of(expect), seed_of(dir, expect));
        if (expect + WINDOW < NMSG) post(req, con, bufs[w]);
    }
    for (int w = 0; w < WINDOW; w++) {
        TU_ASSERT(pscom_req_is_done(reqs[w]));
        pscom_request_free(reqs[w]);
        free(bufs[w]);
    }
}

static int server(tu_ctx_t *ctx)
{
    pscom_socket_t *sock = tu_open_socket(ctx, 0, 0);
    pscom_connection_t *con = tu_server_accept_one(ctx, sock);
    unsigned char *region = send_all(con, 2);
    recv_all(con, 1);
    tu_send_tag(con, 0x47414c4cu); /* got all of the client's messages */
    /* the client has received everything once it says so */
    tu_wait_tag(con, NULL, 0x444f4e45u);
    free(region);
    return 0;
}

static int client(tu_ctx_t *ctx)
{
    pscom_socket_t *sock    = tu_open_socket(ctx, 0, 0);
    pscom_connection_t *con = tu_client_connect(ctx, sock);
    unsigned char *region   = send_all(con, 1);
    recv_all(con, 2);
    tu_send_tag(con, 0x444f4e45u);
    /* the inplace buffers are free once the server has everything */
    tu_wait_tag(con, NULL, 0x47414c4cu);
    free(region);
    return 0;
}

/* ---- order_repost ------------------------------------------------------------ */

#define NBACKLOG       20000
#define REPOST_MAXDEPTH 64

static uint32_t repost_got, repost_bad, repost_depth, repost_maxdepth;

static void repost_done(pscom_request_t *req)
{
    if (++repost_depth > repost_maxdepth) repost_maxdepth = repost_depth;
    xh_t xh;
    memcpy(&xh, (const void *)&req->xheader, sizeof(xh));
    if (!pscom_req_successful(req) || xh.tag != TAG_SEQ || xh.seq != repost_got) repost_bad++;
    if (++repost_got < NBACKLOG) pscom_post_recv(req);
    repost_depth--;
}

static int repost_server(tu_ctx_t *ctx)
{
    pscom_socket_t *sock    = tu_open_socket(ctx, 0, 0);
    pscom_connection_t *con = tu_server_accept_one(ctx, sock);
    /* all sent: most of them are here, unexpected */
    TU_ASSERT_EQ(tu_wait_signal_progress(ctx, 1), 1);
    pscom_request_t *req = pscom_request_create(sizeof(xh_t), 0);
    TU_ASSERT_NOT_NULL(req);
    req->connection  = con;
    req->xheader_len = sizeof(xh_t);
    req->ops.io_done = repost_done;
    pscom_post_recv(req);
    while (repost_got < NBACKLOG) pscom_wait_any();
    TU_ASSERT_EQ(repost_bad, 0);
    TU_ASSERT_MSG(repost_maxdepth <= REPOST_MAXDEPTH,
                  "io_done callbacks nested %u levels deep (a level per message)",
                  repost_maxdepth);
    pscom_request_free(req);
    tu_signal(ctx, 1, 2);
    return 0;
}

static int repost_client(tu_ctx_t *ctx)
{
    pscom_socket_t *sock    = tu_open_socket(ctx, 0, 0);
    pscom_connection_t *con = tu_client_connect(ctx, sock);
    for (uint32_t s = 0; s < NBACKLOG; s++) {
        xh_t xh = {TAG_SEQ, s, 0};
        pscom_send(con, &xh, sizeof(xh), NULL, 0);
    }
    pscom_flush(con);
    tu_signal(ctx, TU_SERVER, 1);
    TU_ASSERT_EQ(tu_wait_signal_progress(ctx, TU_SERVER), 2);
    return 0;
}

int main(void)
{
    if (tu_run("order", 1, server, client, NULL)) return 1;
    return tu_run("order_repost", 1, repost_server, repost_client, NULL);
}
