/*
 * itest_recv_accept: message selection by predicate and by default_recv
 * (spec 1.5, 3.7 #5/#6, 5.1, 5.3, 5.5, 5.12 #3/#4).
 *
 *  - recv_accept filters by xheader contents: receives posted odd-first
 *    get the messages their predicate accepts, whatever the order; the
 *    predicate sees the right connection and the sender's lengths;
 *  - on the unexpected path, recv_accept picks any queued message, the
 *    others stay in arrival order;
 *  - mprobe pattern: a recv_accept called from iprobe may write into
 *    header_net->xheader of an unexpected message; the write persists and
 *    later recv_accept calls see the same header_net pointer;
 *  - default_recv is consulted before posted receives, its request gets
 *    the message (state RECV_REQUEST without POSTED, then DONE, io_done
 *    runs), the posted receive gets the next message default_recv
 *    declines; it also takes messages that arrive with no matching
 *    receive; after resetting it to NULL normal matching resumes.
 */
#include "pscom_testutil.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#define TAG_CMD   0x434d4421u
#define TAG_FENCE 0x46454e43u
#define TAG_MSG   0x4d534721u
#define MAXSEQ    8
#define MAXLEN    128

typedef struct xh {
    uint32_t tag;
    uint32_t seq;
    uint32_t claim; /* written by the mprobe-style recv_accept */
    uint32_t pad;
} xh_t;

typedef struct cmd {
    uint32_t tag;
    uint32_t n; /* 0 = end */
    uint32_t fence;
    uint32_t seqs[MAXSEQ];
} cmd_t;

static size_t len_of(uint32_t seq)
{
    return (size_t)((seq * 13u) % MAXLEN);
}

static int client(tu_ctx_t *ctx)
{
    pscom_socket_t *sock    = tu_open_socket(ctx, 0, 0);
    pscom_connection_t *con = tu_client_connect(ctx, sock);
    unsigned char buf[MAXLEN];
    for (;;) {
        cmd_t cmd;
        TU_ASSERT_OK(pscom_recv_from(con, &cmd, sizeof(cmd), NULL, 0));
        TU_ASSERT_EQ(cmd.tag, TAG_CMD);
        if (cmd.n == 0) break;
        for (uint32_t i = 0; i < cmd.n; i++) {
            xh_t xh = {TAG_MSG, cmd.seqs[i], 0, 0x70707070u};
            tu_fill(buf, len_of(xh.seq), xh.seq);
            pscom_send(con, &xh, sizeof(xh), buf, len_of(xh.seq));
        }
        if (cmd.fence) tu_send_tag(con, TAG_FENCE);
    }
    return 0;
}

/* ---------------- server ---------------- */

static pscom_connection_t *con;
static pscom_socket_t *sock;

static void command(uint32_t fence, uint32_t n, ...)
{
    cmd_t cmd;
    va_list ap;
    memset(&cmd, 0, sizeof(cmd));
    cmd.tag   = TAG_CMD;
    cmd.n     = n;
    cmd.fence = fence;
    va_start(ap, n);
    for (uint32_t i = 0; i < n; i++) cmd.seqs[i] = va_arg(ap, uint32_t);
    va_end(ap);
    pscom_send(con, &cmd, sizeof(cmd), NULL, 0);
}

static xh_t xh_of(const pscom_header_net_t *h)
{
    xh_t xh;
    memset(&xh, 0, sizeof(xh));
    if (h->xheader_len >= sizeof(xh)) memcpy(&xh, (const void *)h->xheader, sizeof(xh));
    return xh;
}

/* request->user holds the predicate parameters */
typedef struct sel {
    int mode; /* 0 any TAG_MSG, 1 odd, 2 even, 3 seq == want */
    uint32_t want;
    int calls;
    int bad_calls; /* wrong connection / lengths seen */
} sel_t;

static int accept_sel(pscom_request_t *req, pscom_connection_t *c,
                      pscom_header_net_t *h)
{
    sel_t *sel = (sel_t *)(void *)req->user;
    xh_t xh    = xh_of(h);
    sel->calls++;
    if (xh.tag != TAG_MSG) return 0;
    if (c != con || h->xheader_len != sizeof(xh_t) || h->data_len != len_of(xh.seq)) {
        sel->bad_calls++;
    }
    switch (sel->mode) {
    case 1: return xh.seq % 2 == 1;
    case 2: return xh.seq % 2 == 0;
    case 3: return xh.seq == sel->want;
    default: return 1;
    }
}

typedef struct rx {
    pscom_request_t *req;
    unsigned char buf[MAXLEN];
} rx_t;

static void rx_post(rx_t *rx, int mode, uint32_t want)
{
    rx->req = pscom_request_create(sizeof(xh_t), sizeof(sel_t));
    TU_ASSERT_NOT_NULL(rx->req);
    sel_t *sel = (sel_t *)(void *)rx->req->user;
    memset(sel, 0, sizeof(*sel));
    sel->mode                = mode;
    sel->want                = want;
    rx->req->connection      = con;
    rx->req->socket          = sock;
    rx->req->data            = rx->buf;
    rx->req->data_len        = MAXLEN;
    rx->req->xheader_len     = sizeof(xh_t);
    rx->req->ops.recv_accept = accept_sel;
    pscom_post_recv(rx->req);
}

static void rx_expect(rx_t *rx, uint32_t seq)
{
    pscom_wait(rx->req);
    TU_ASSERT_SUCCESSFUL(rx->req);
    xh_t xh;
    memcpy(&xh, (const void *)&rx->req->xheader, sizeof(xh));
    TU_ASSERT_EQ(xh.tag, TAG_MSG);
    TU_ASSERT_MSG(xh.seq == seq, "receive got seq %u, expected %u", xh.seq, seq);
    TU_ASSERT_EQ(rx->req->header.data_len, len_of(seq));
    TU_ASSERT_PATTERN(rx->buf, len_of(seq), seq);
    sel_t *sel = (sel_t *)(void *)rx->req->user;
    TU_ASSERT_GE(sel->calls, 1);
    TU_ASSERT_MSG(sel->bad_calls == 0,
                  "recv_accept saw a wrong connection or wrong lengths %d times",
                  sel->bad_calls);
    pscom_request_free(rx->req);
    rx->req = NULL;
}

static void scenario_filter_posted(void)
{
    rx_t odd, even;
    rx_post(&odd, 1, 0);
    rx_post(&even, 2, 0);
    command(0, 2, 2u, 1u);
    rx_expect(&even, 2);
    rx_expect(&odd, 1);
}

static void scenario_filter_unexpected(void)
{
    rx_t rx;
    command(1, 3, 10u, 11u, 12u);
    tu_wait_tag(con, NULL, TAG_FENCE);
    rx_post(&rx, 3, 12);
    TU_ASSERT(pscom_req_is_done(rx.req));
    rx_expect(&rx, 12);
    rx_post(&rx, 3, 11);
    TU_ASSERT(pscom_req_is_done(rx.req));
    rx_expect(&rx, 11);
    rx_post(&rx, 0, 0);
    TU_ASSERT(pscom_req_is_done(rx.req));
    rx_expect(&rx, 10);
}

/* ---- mprobe pattern ---- */
static pscom_header_net_t *claimed_header;
static int claim_calls;

static int accept_claim(pscom_request_t *req, pscom_connection_t *c,
                        pscom_header_net_t *h)
{
    (void)req;
    (void)c;
    xh_t xh = xh_of(h);
    if (xh.tag != TAG_MSG || xh.seq != 20 || xh.claim != 0) return 0;
    claim_calls++;
    claimed_header = h;
    xh.claim       = 0xc1a1u;
    memcpy((void *)h->xheader, &xh, sizeof(xh)); /* mark it */
    return 1;
}

static int accept_unclaimed_20(pscom_request_t *req, pscom_connection_t *c,
                               pscom_header_net_t *h)
{
    (void)req;
    (void)c;
    xh_t xh = xh_of(h);
    return xh.tag == TAG_MSG && xh.seq == 20 && xh.claim == 0;
}

static int accept_claimed(pscom_request_t *req, pscom_connection_t *c,
                          pscom_header_net_t *h)
{
    (void)req;
    (void)c;
    return h == claimed_header && xh_of(h).claim == 0xc1a1u;
}

static void scenario_mprobe(void)
{
    command(1, 1, 20u);
    tu_wait_tag(con, NULL, TAG_FENCE);

    pscom_request_t *probe = pscom_request_create(sizeof(xh_t), 0);
    probe->connection      = con;
    probe->socket          = sock;
    probe->xheader_len     = sizeof(xh_t);
    probe->data_len        = MAXLEN;
    probe->ops.recv_accept = accept_claim;
    TU_ASSERT_EQ(pscom_iprobe(probe), 1);
    TU_ASSERT_EQ(claim_calls, 1);
    TU_ASSERT_NOT_NULL(claimed_header);
    pscom_request_free(probe);

    /* the mark persists: an "unclaimed only" receive does not match */
    pscom_request_t *other = pscom_request_create(sizeof(xh_t), 0);
    unsigned char buf[MAXLEN];
    other->connection      = con;
    other->socket          = sock;
    other->xheader_len     = sizeof(xh_t);
    other->data            = buf;
    other->data_len        = MAXLEN;
    other->ops.recv_accept = accept_unclaimed_20;
    pscom_post_recv(other);
    TU_ASSERT_MSG(!pscom_req_is_done(other),
                  "a write into header_net->xheader of an unexpected message "
                  "did not persist (spec 5.5, 3.7 #6)");

    /* the same header_net pointer is presented again */
    pscom_request_t *mine = pscom_request_create(sizeof(xh_t), 0);
    unsigned char buf2[MAXLEN];
    mine->connection      = con;
    mine->socket          = sock;
    mine->xheader_len     = sizeof(xh_t);
    mine->data            = buf2;
    mine->data_len        = MAXLEN;
    mine->ops.recv_accept = accept_claimed;
    pscom_post_recv(mine);
    TU_ASSERT_MSG(pscom_req_is_done(mine),
                  "header_net pointer of an unexpected message not stable "
                  "(spec 5.5, 3.7 #6): state [%s]",
                  tu_state_str(mine->state));
    TU_ASSERT_SUCCESSFUL(mine);
    TU_ASSERT_PATTERN(buf2, len_of(20), 20);
    TU_ASSERT_EQ(mine->header.data_len, len_of(20));
    pscom_request_free(mine);

    TU_ASSERT_EQ(pscom_cancel_recv(other), 1);
    pscom_request_free(other);
}

/* ---- default_recv ---- */
static int default_calls, default_done, default_wrong;

static void default_io_done(pscom_request_t *req)
{
    xh_t xh;
    memcpy(&xh, (const void *)&req->xheader, sizeof(xh));
    if (!(req->state & PSCOM_REQ_STATE_RECV_REQUEST) ||
        (req->state & PSCOM_REQ_STATE_POSTED) || !pscom_req_successful(req) ||
        req->connection != con || req->socket != sock || xh.tag != TAG_MSG ||
        req->header.data_len != len_of(xh.seq) ||
        tu_check(req->data, req->data_len, xh.seq) != (size_t)-1) {
        tu_log("default_recv request wrong: state [%s] con %p/%p socket %p/%p "
               "seq %u len %zu",
               tu_state_str(req->state), (void *)req->connection, (void *)con,
               (void *)req->socket, (void *)sock, xh.seq, (size_t)req->header.data_len);
        default_wrong++;
    }
    default_done++;
    free(req->data);
    pscom_request_free(req);
}

static pscom_request_t *my_default_recv(pscom_connection_t *c, pscom_header_net_t *h)
{
    xh_t xh = xh_of(h);
    if (xh.tag != TAG_MSG || xh.seq < 30 || xh.seq >= 40) return NULL;
    default_calls++;
    if (c != con || h->data_len != len_of(xh.seq)) default_wrong++;
    /* like psmpi: a fresh request, xheader_len = incoming, io_done */
    pscom_request_t *req = pscom_request_create(h->xheader_len, 0);
    req->xheader_len     = h->xheader_len;
    req->data_len        = h->data_len;
    req->data            = tu_malloc(h->data_len);
    req->ops.io_done     = default_io_done;
    return req;
}

static void scenario_default_recv(void)
{
    rx_t rx;
    sock->ops.default_recv = my_default_recv;

    /* posted receive accepts everything, yet default_recv wins */
    rx_post(&rx, 0, 0);
    command(0, 3, 30u, 31u, 40u);
    rx_expect(&rx, 40);
    TU_ASSERT_EQ(default_calls, 2);
    TU_ASSERT_EQ(default_done, 2);

    /* no posted receive for it: default_recv takes it anyway */
    command(1, 1, 32u);
    tu_wait_tag(con, NULL, TAG_FENCE);
    while (default_done < 3) pscom_test_any();
    TU_ASSERT_EQ(default_calls, 3);
    TU_ASSERT_EQ(default_wrong, 0);

    /* reset: normal matching */
    sock->ops.default_recv = NULL;
    rx_post(&rx, 0, 0);
    command(0, 1, 33u);
    rx_expect(&rx, 33);
    TU_ASSERT_EQ(default_calls, 3);
}

static int server(tu_ctx_t *ctx)
{
    sock = tu_open_socket(ctx, 0, 0);
    con  = tu_server_accept_one(ctx, sock);

    scenario_filter_posted();
    scenario_filter_unexpected();
    scenario_mprobe();
    scenario_default_recv();

    command(0, 0);
    return 0;
}

int main(void)
{
    return tu_run("recv_accept", 1, server, client, NULL);
}
