/*
 * itest_probe: pscom_iprobe / pscom_probe (spec 1.5, 5.3, 5.12 #7).
 *
 *  - iprobe with nothing received returns 0 (specific, socket-any, global)
 *    and leaves the request DONE;
 *  - iprobe sees an unexpected message: returns 1, sets
 *    request->connection, copies header and up to xheader_len xheader
 *    bytes, state RECV_REQUEST|POSTED|DONE, TRUNCATED if the message is
 *    longer than data_len; the message stays queued (iprobe again finds it,
 *    a later receive gets it intact);
 *  - recv_accept filters what iprobe/probe see;
 *  - a message taken by a posted receive is invisible to iprobe;
 *  - pscom_probe blocks until a message arrives (it is only sent after the
 *    server has entered the probe path; synchronised over the control
 *    channel, never by sleeping).
 *
 * A never-matching any-source receive stays posted throughout so that the
 * connection is read even when only probes wait (spec 5.3 flow control;
 * psmpi does the same).
 */
#include "pscom_testutil.h"

#include <stdlib.h>
#include <string.h>

#define TAG_CMD   0x434d4421u
#define TAG_FENCE 0x46454e43u
#define XLEN      24
#define GUARD     16

/* message n: tag P0+n, xheader pattern, data pattern */
#define P0 0x50524f00u
static const size_t lens[] = {0, 100, 20, 30, 40, 50, 60};

static void make_xh(unsigned n, unsigned char *xh)
{
    uint32_t tag = P0 + n;
    tu_fill(xh, XLEN, 900u + n);
    memcpy(xh, &tag, sizeof(tag));
}

static void send_msg(pscom_connection_t *con, unsigned n)
{
    unsigned char xh[XLEN];
    unsigned char *data = (unsigned char *)tu_malloc(lens[n]);
    make_xh(n, xh);
    tu_fill(data, lens[n], 100u + n);
    pscom_send(con, xh, XLEN, data, lens[n]);
    free(data);
}

static int client(tu_ctx_t *ctx)
{
    pscom_socket_t *sock    = tu_open_socket(ctx, 0, 0);
    pscom_connection_t *con = tu_client_connect(ctx, sock);
    for (;;) {
        uint32_t cmd[2];
        TU_ASSERT_OK(pscom_recv_from(con, cmd, sizeof(cmd), NULL, 0));
        TU_ASSERT_EQ(cmd[0], TAG_CMD);
        switch (cmd[1]) {
        case 0: return 0;
        case 1:
            send_msg(con, 1);
            send_msg(con, 2);
            tu_send_tag(con, TAG_FENCE);
            break;
        case 2:
            send_msg(con, 3);
            tu_send_tag(con, TAG_FENCE);
            break;
        case 3:
            /* only after the server is about to probe */
            TU_ASSERT_EQ(tu_wait_signal(ctx, TU_SERVER), 3);
            send_msg(con, 4);
            break;
        case 4:
            send_msg(con, 5);
            send_msg(con, 6);
            break;
        default: TU_FAIL("bad command %u", cmd[1]);
        }
    }
}

/* ---------------- server ---------------- */

static pscom_connection_t *con;
static pscom_socket_t *sock;

static void command(uint32_t what)
{
    uint32_t cmd[2] = {TAG_CMD, what};
    pscom_send(con, cmd, sizeof(cmd), NULL, 0);
}

static int accept_tag_in_user(pscom_request_t *req, pscom_connection_t *c,
                              pscom_header_net_t *h)
{
    return tu_accept_tag(req, c, h);
}

static pscom_request_t *probe_req(void)
{
    pscom_request_t *req = pscom_request_create(XLEN, sizeof(uint32_t));
    TU_ASSERT_NOT_NULL(req);
    return req;
}

/* set up the probe request */
static void prep(pscom_request_t *req, pscom_connection_t *c, pscom_socket_t *s,
                 size_t data_len, size_t xlen, uint32_t accept_tag)
{
    TU_ASSERT_MSG(pscom_req_is_done(req), "probe request must be DONE: [%s]",
                  tu_state_str(req->state));
    memset((void *)&req->xheader, 0x5a, req->max_xheader_len);
    memcpy((void *)req->user, &accept_tag, sizeof(accept_tag));
    req->connection      = c;
    req->socket          = s;
    req->data            = NULL;
    req->data_len        = data_len;
    req->xheader_len     = xlen;
    req->ops.recv_accept = accept_tag ? accept_tag_in_user : NULL;
    req->ops.io_done     = NULL;
}

/* after a successful probe: the request describes message n */
static void check_probed(pscom_request_t *req, unsigned n, size_t data_len, size_t xlen)
{
    unsigned char xh[XLEN];
    make_xh(n, xh);
    TU_ASSERT_STATE_HAS(req->state, PSCOM_REQ_STATE_RECV_REQUEST |
                                        PSCOM_REQ_STATE_POSTED | PSCOM_REQ_STATE_DONE);
    TU_ASSERT_STATE_LACKS(req->state, PSCOM_REQ_STATE_ERROR | PSCOM_REQ_STATE_CANCELED);
    if (lens[n] > data_len) {
        TU_ASSERT_STATE_HAS(req->state, PSCOM_REQ_STATE_TRUNCATED);
    } else {
        TU_ASSERT_STATE_LACKS(req->state, PSCOM_REQ_STATE_TRUNCATED);
    }
    TU_ASSERT_PTR_EQ(req->connection, con);
    TU_ASSERT_EQ(req->header.data_len, lens[n]);
    TU_ASSERT_EQ(req->header.xheader_len, XLEN);
    TU_ASSERT_EQ(req->data_len, data_len);
    TU_ASSERT_MEM_EQ((const unsigned char *)&req->xheader, xh, xlen);
    TU_ASSERT_BYTES((const unsigned char *)&req->xheader + xlen,
                    req->max_xheader_len - xlen, 0x5a);
}

static void recv_msg(unsigned n)
{
    unsigned char xh[XLEN], got_xh[XLEN];
    unsigned char buf[128 + GUARD];
    memset(buf, 0xa5, sizeof(buf));
    make_xh(n, xh);
    TU_ASSERT_OK(pscom_recv_from(con, got_xh, XLEN, buf, 128));
    TU_ASSERT_MEM_EQ(got_xh, xh, XLEN);
    TU_ASSERT_PATTERN(buf, lens[n], 100u + n);
    TU_ASSERT_BYTES(buf + lens[n], 128 + GUARD - lens[n], 0xa5);
}

static int server(tu_ctx_t *ctx)
{
    sock = tu_open_socket(ctx, 0, 0);
    con  = tu_server_accept_one(ctx, sock);

    /* parked receive: keeps every connection of sock readable */
    pscom_request_t *parked = pscom_request_create(0, 0);
    TU_ASSERT_NOT_NULL(parked);
    parked->socket          = sock;
    parked->connection      = NULL;
    parked->ops.recv_accept = tu_accept_none;
    pscom_post_recv(parked);

    pscom_request_t *req = probe_req();

    /* nothing there yet */
    prep(req, con, sock, 100, XLEN, 0);
    TU_ASSERT_EQ(pscom_iprobe(req), 0);
    TU_ASSERT(pscom_req_is_done(req));
    prep(req, NULL, sock, 100, XLEN, 0);
    TU_ASSERT_EQ(pscom_iprobe(req), 0);
    prep(req, NULL, NULL, 100, XLEN, 0);
    TU_ASSERT_EQ(pscom_iprobe(req), 0);

    /* messages 1 (100 B) and 2 (20 B) arrive unexpected */
    command(1);
    tu_wait_tag(con, NULL, TAG_FENCE);

    prep(req, NULL, sock, 50, 16, 0);
    TU_ASSERT_EQ(pscom_iprobe(req), 1);
    check_probed(req, 1, 50, 16); /* truncated, xheader cut at 16 */
    prep(req, NULL, sock, 50, 16, 0);
    TU_ASSERT_EQ(pscom_iprobe(req), 1); /* still queued */
    check_probed(req, 1, 50, 16);
    prep(req, con, NULL, 100, XLEN, 0);
    TU_ASSERT_EQ(pscom_iprobe(req), 1);
    check_probed(req, 1, 100, XLEN);
    prep(req, NULL, sock, 100, XLEN, P0 + 2); /* recv_accept: only message 2 */
    TU_ASSERT_EQ(pscom_iprobe(req), 1);
    check_probed(req, 2, 100, XLEN);
    prep(req, NULL, NULL, 100, XLEN, 0); /* global */
    TU_ASSERT_EQ(pscom_iprobe(req), 1);
    check_probed(req, 1, 100, XLEN);
    prep(req, NULL, sock, 100, XLEN, P0 + 5); /* no such message */
    TU_ASSERT_EQ(pscom_iprobe(req), 0);

    recv_msg(1);
    recv_msg(2);
    prep(req, NULL, sock, 100, XLEN, 0);
    TU_ASSERT_EQ(pscom_iprobe(req), 0);

    /* a message matched by a posted receive is not visible to iprobe */
    {
        unsigned char buf[64];
        pscom_request_t *r = pscom_request_create(XLEN, sizeof(uint32_t));
        uint32_t tag       = P0 + 3;
        memcpy((void *)r->user, &tag, sizeof(tag));
        r->connection      = con;
        r->socket          = sock;
        r->data            = buf;
        r->data_len        = sizeof(buf);
        r->xheader_len     = XLEN;
        r->ops.recv_accept = tu_accept_tag;
        pscom_post_recv(r);
        command(2);
        tu_wait_tag(con, NULL, TAG_FENCE);
        TU_ASSERT(pscom_req_is_done(r));
        TU_ASSERT_SUCCESSFUL(r);
        TU_ASSERT_PATTERN(buf, lens[3], 103u);
        pscom_request_free(r);
        prep(req, NULL, NULL, 100, XLEN, 0);
        TU_ASSERT_EQ(pscom_iprobe(req), 0);
    }

    /* pscom_probe blocks until message 4 arrives; the client sends it
     * only after our signal */
    command(3);
    prep(req, con, sock, 100, XLEN, 0);
    TU_ASSERT_EQ(pscom_iprobe(req), 0);
    tu_signal(ctx, 1, 3);
    prep(req, con, sock, 100, XLEN, 0);
    pscom_probe(req);
    check_probed(req, 4, 100, XLEN);
    recv_msg(4);

    /* probe with a filter: message 6 is probed, 5 stays first in line */
    command(4);
    prep(req, NULL, sock, 10, 8, P0 + 6);
    pscom_probe(req);
    check_probed(req, 6, 10, 8);
    recv_msg(5);
    recv_msg(6);

    pscom_request_free(req);
    TU_ASSERT_EQ(pscom_cancel_recv(parked), 1);
    pscom_request_free(parked);
    command(0);
    return 0;
}

int main(void)
{
    return tu_run("probe", 1, server, client, NULL);
}
