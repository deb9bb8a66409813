/*
 * itest_any_source: receives that are not bound to one connection
 * (spec 1.5 pscom_post_recv/pscom_recv, 5.3, 5.4), with 3 clients.
 *
 *  1. socket-any (connection NULL, socket set) from all clients, through
 *     requests (req->connection is set to the source) and pscom_recv_any;
 *     per-connection order is kept, content checked;
 *  2. global any (connection and socket NULL), requests and pscom_recv;
 *  3. post order between any-source and connection-specific receives:
 *     any-then-specific, specific-then-any, global-any-then-specific with
 *     socket NULL, and receives that do not match the sender;
 *  4. any-source receives posted after the messages arrived (unexpected),
 *     each completing synchronously inside pscom_post_recv.
 *
 * Clients obey commands {TAG_CMD, count, fence}: send `count` data
 * messages {TAG_DATA, rank, seq}, then a fence tag if asked; count 0 ends.
 */
#include "pscom_testutil.h"

#include <stdlib.h>
#include <string.h>

#define NCLIENTS  3
#define TAG_CMD   0x434d4421u
#define TAG_DATA  0x44415441u
#define TAG_FENCE 0x46454e43u
#define MAXLEN    64

typedef struct cmd {
    uint32_t tag;
    uint32_t count;
    uint32_t fence;
} cmd_t;

typedef struct dxh {
    uint32_t tag;
    uint32_t rank;
    uint32_t seq;
} dxh_t;

static size_t len_of(uint32_t rank, uint32_t seq)
{
    return (size_t)((seq * 7u + rank) % MAXLEN);
}

static uint32_t seed_of(uint32_t rank, uint32_t seq)
{
    return rank * 100000u + seq;
}

/* ---------------- client ---------------- */

static int client(tu_ctx_t *ctx)
{
    pscom_socket_t *sock    = tu_open_socket(ctx, 0, 0);
    pscom_connection_t *con = tu_client_connect(ctx, sock);
    uint32_t seq            = 0;
    unsigned char buf[MAXLEN];

    for (;;) {
        cmd_t cmd;
        TU_ASSERT_OK(pscom_recv_from(con, &cmd, sizeof(cmd), NULL, 0));
        TU_ASSERT_EQ(cmd.tag, TAG_CMD);
        if (cmd.count == 0) break;
        for (uint32_t i = 0; i < cmd.count; i++, seq++) {
            dxh_t xh   = {TAG_DATA, (uint32_t)ctx->rank, seq};
            size_t len = len_of(xh.rank, seq);
            tu_fill(buf, len, seed_of(xh.rank, seq));
            pscom_send(con, &xh, sizeof(xh), buf, len);
        }
        if (cmd.fence) tu_send_tag(con, TAG_FENCE);
    }
    return 0;
}

/* ---------------- server ---------------- */

static pscom_socket_t *sock;
static pscom_connection_t *cons[NCLIENTS + 1];
static uint32_t next_seq[NCLIENTS + 1];

static void command(int rank, uint32_t count, uint32_t fence)
{
    cmd_t cmd = {TAG_CMD, count, fence};
    pscom_send(cons[rank], &cmd, sizeof(cmd), NULL, 0);
}

typedef struct rx {
    pscom_request_t *req;
    unsigned char buf[MAXLEN];
} rx_t;

static void rx_post(rx_t *rx, pscom_connection_t *con, pscom_socket_t *s)
{
    if (!rx->req) {
        rx->req = pscom_request_create(sizeof(dxh_t), sizeof(uint32_t));
        TU_ASSERT_NOT_NULL(rx->req);
    }
    uint32_t tag = TAG_DATA;
    memcpy((void *)rx->req->user, &tag, sizeof(tag));
    rx->req->ops.recv_accept = tu_accept_tag; /* data messages only */
    rx->req->connection      = con;
    rx->req->socket          = s;
    rx->req->data            = rx->buf;
    rx->req->data_len        = MAXLEN;
    rx->req->xheader_len     = sizeof(dxh_t);
    pscom_post_recv(rx->req);
}

/* check a received data message; returns the sender's rank */
static uint32_t check_data(const dxh_t *xh, const unsigned char *buf, size_t len)
{
    TU_ASSERT_EQ(xh->tag, TAG_DATA);
    TU_ASSERT_MSG(xh->rank >= 1 && xh->rank <= NCLIENTS, "rank %u", xh->rank);
    TU_ASSERT_MSG(xh->seq == next_seq[xh->rank],
                  "client %u: got seq %u, expected %u (per-connection order)",
                  xh->rank, xh->seq, next_seq[xh->rank]);
    TU_ASSERT_EQ(len, len_of(xh->rank, xh->seq));
    TU_ASSERT_PATTERN(buf, len, seed_of(xh->rank, xh->seq));
    next_seq[xh->rank]++;
    return xh->rank;
}

static uint32_t rx_check(rx_t *rx)
{
    pscom_request_t *req = rx->req;
    TU_ASSERT_SUCCESSFUL(req);
    dxh_t xh;
    memcpy(&xh, (const void *)&req->xheader, sizeof(xh));
    uint32_t rank = check_data(&xh, rx->buf, req->header.data_len);
    TU_ASSERT_MSG(req->connection == cons[rank],
                  "req->connection %p is not the connection %p of client %u",
                  (void *)req->connection, (void *)cons[rank], rank);
    return rank;
}

/* expect message (rank, seq) in rx */
static void rx_expect(rx_t *rx, uint32_t rank, uint32_t seq)
{
    pscom_wait(rx->req);
    dxh_t xh;
    memcpy(&xh, (const void *)&rx->req->xheader, sizeof(xh));
    TU_ASSERT_MSG(xh.rank == rank && xh.seq == seq,
                  "receive got (client %u, seq %u), spec 5.3 post order wants "
                  "(client %u, seq %u)",
                  xh.rank, xh.seq, rank, seq);
    rx_check(rx);
}

static void scenario_socket_any(void)
{
    const uint32_t K = 40;
    for (int r = 1; r <= NCLIENTS; r++) command(r, K, 0);
    rx_t rx;
    memset(&rx, 0, sizeof(rx));
    for (uint32_t i = 0; i < K * NCLIENTS; i++) {
        if (i % 2 == 0) {
            rx_post(&rx, NULL, sock);
            pscom_wait(rx.req);
            rx_check(&rx);
        } else {
            dxh_t xh;
            unsigned char buf[MAXLEN];
            TU_ASSERT_OK(pscom_recv_any(sock, &xh, sizeof(xh), buf, MAXLEN));
            /* pscom_recv does not tell the length: recompute it */
            check_data(&xh, buf, len_of(xh.rank, xh.seq));
        }
    }
    pscom_request_free(rx.req);
    for (int r = 1; r <= NCLIENTS; r++) TU_ASSERT_EQ(next_seq[r], K);
}

static void scenario_global_any(void)
{
    const uint32_t K = 30;
    uint32_t before[NCLIENTS + 1];
    memcpy(before, next_seq, sizeof(before));
    for (int r = 1; r <= NCLIENTS; r++) command(r, K, 0);
    rx_t rx;
    memset(&rx, 0, sizeof(rx));
    for (uint32_t i = 0; i < K * NCLIENTS; i++) {
        if (i % 3 != 2) {
            rx_post(&rx, NULL, NULL);
            pscom_wait(rx.req);
            rx_check(&rx);
        } else {
            dxh_t xh;
            unsigned char buf[MAXLEN];
            TU_ASSERT_OK(pscom_recv(NULL, NULL, &xh, sizeof(xh), buf, MAXLEN));
            check_data(&xh, buf, len_of(xh.rank, xh.seq));
        }
    }
    pscom_request_free(rx.req);
    for (int r = 1; r <= NCLIENTS; r++) TU_ASSERT_EQ(next_seq[r], before[r] + K);
}

static void scenario_post_order(void)
{
    rx_t a, b;
    memset(&a, 0, sizeof(a));
    memset(&b, 0, sizeof(b));
    uint32_t s;

    /* socket-any, then specific (with socket set): any gets the first */
    s = next_seq[1];
    rx_post(&a, NULL, sock);
    rx_post(&b, cons[1], sock);
    command(1, 2, 0);
    rx_expect(&a, 1, s);
    rx_expect(&b, 1, s + 1);

    /* specific, then socket-any: specific gets the first */
    s = next_seq[1];
    rx_post(&b, cons[1], sock);
    rx_post(&a, NULL, sock);
    command(1, 2, 0);
    rx_expect(&b, 1, s);
    rx_expect(&a, 1, s + 1);

    /* global any, then specific with socket NULL: the specific one is
     * parked behind the global one (spec 5.3) */
    s = next_seq[2];
    rx_post(&a, NULL, NULL);
    rx_post(&b, cons[2], NULL);
    command(2, 2, 0);
    rx_expect(&a, 2, s);
    rx_expect(&b, 2, s + 1);

    /* socket-any, then specific for client 2; client 1 sends: the any
     * receive takes it, the specific one stays pending until client 2 */
    rx_post(&a, NULL, sock);
    rx_post(&b, cons[2], sock);
    command(1, 1, 0);
    rx_expect(&a, 1, next_seq[1]);
    TU_ASSERT_MSG(!pscom_req_is_done(b.req),
                  "receive for client 2 completed without a message from it: [%s]",
                  tu_state_str(b.req->state));
    command(2, 1, 0);
    rx_expect(&b, 2, next_seq[2]);

    /* specific for client 3 first, then any; client 2 sends: the any
     * receive takes it */
    rx_post(&b, cons[3], sock);
    rx_post(&a, NULL, sock);
    command(2, 1, 0);
    rx_expect(&a, 2, next_seq[2]);
    TU_ASSERT(!pscom_req_is_done(b.req));
    command(3, 1, 0);
    rx_expect(&b, 3, next_seq[3]);

    pscom_request_free(a.req);
    pscom_request_free(b.req);
}

static void scenario_unexpected(void)
{
    const uint32_t K = 5;
    for (int r = 1; r <= NCLIENTS; r++) command(r, K, 1);
    for (int r = 1; r <= NCLIENTS; r++) tu_wait_tag(cons[r], NULL, TAG_FENCE);
    /* everything has arrived: every any-source receive completes inside
     * pscom_post_recv */
    rx_t rx;
    memset(&rx, 0, sizeof(rx));
    for (uint32_t i = 0; i < K * NCLIENTS; i++) {
        rx_post(&rx, NULL, (i % 2) ? sock : NULL);
        TU_ASSERT_MSG(pscom_req_is_done(rx.req),
                      "unexpected message %u not merged synchronously: [%s]", i,
                      tu_state_str(rx.req->state));
        rx_check(&rx);
    }
    /* nothing left: a new any-source receive stays pending */
    rx_post(&rx, NULL, sock);
    TU_ASSERT(!pscom_req_is_done(rx.req));
    TU_ASSERT_EQ(pscom_cancel_recv(rx.req), 1);
    TU_ASSERT_STATE_HAS(rx.req->state, PSCOM_REQ_STATE_CANCELED | PSCOM_REQ_STATE_DONE);
    pscom_request_free(rx.req);
}

static int server(tu_ctx_t *ctx)
{
    sock = tu_open_socket(ctx, 0, 0);
    tu_server_listen(ctx, sock);
    tu_server_accept_all(ctx, sock, cons);

    scenario_socket_any();
    scenario_global_any();
    scenario_post_order();
    scenario_unexpected();

    for (int r = 1; r <= NCLIENTS; r++) command(r, 0, 0);
    return 0;
}

int main(void)
{
    return tu_run("any_source", NCLIENTS, server, client, NULL);
}
