/*
 * fuzz_openib.c - the receiving side of the openib transport against any
 * packets a peer sends: packet headers of any magic, flags (WHOLE, TOKENS,
 * none, unknown bits) and returned credits, any lengths (0 to a slot and a
 * bit more, shorter than the header too) and bytes, pscom messages whole
 * in one packet or as slices of the byte stream, between real messages of
 * the peer, receives posted, cancelled or missing.
 *
 * The peer is real: a client socket of this process connects to a server
 * socket over openib (the plugin is built into this program: the core's
 * table of built-in plugins below holds it; the pair, the set-up, the
 * common ops and the end of an input are fuzz_pair.c's), linked with the
 * software HCA of test/verbs_emul instead of libibverbs (each queue pair
 * a unix datagram socket; it works within one process). The harness
 * posts the input's packets (IBV_WR_SEND on the client's queue pair,
 * from the client's own registered send slots) with the plugin's own
 * openib_slot_post(), as the client's plugin would:
 *
 *   - it takes the client's next send slot (send_head), counts it busy
 *     (send_busy; the client's poller frees it at its completion) and
 *     takes one of the client's credits, the server's free receive slots
 *     as the client's plugin counts them from the credits the server
 *     returns. It posts only while the client has two credits or more
 *     (the last stays for the client's own TOKENS packets, as in the
 *     plugin) and a free send slot, and no real message of the client is
 *     queued (so that its packets do not go between the slices of a real
 *     message): else it progresses both sides until that holds; if that
 *     does not come within FUZZ_OIB_WAIT_US while both sides are up, the
 *     server kept its credits: abort(). So the server never gets more
 *     packets than it has receives posted (no RNR), no queue pair has
 *     more sends outstanding than its send queue, and no completion queue
 *     more entries than its size.
 *   - the credits a packet returns: what the client owes (as its plugin
 *     would), 0, one more, or any value. The client's owed count goes down
 *     by what the packet returns of it (at most what is owed), so that the
 *     client still returns the rest itself: a packet that returns too few
 *     leaves the two in step, one that returns too many gives the server
 *     credits the client does not have (its packets then wait in the
 *     client's socket, as RNR) or, beyond what it lent, a protocol error.
 *   - once either side failed or closed, no more packets are posted.
 *
 * One input is two bytes of set-up and the ops (fuzz_pair.h):
 *
 *   byte 0  bits 0-3 as fuzz_pair.h (bit 4: both sides progress after
 *                     every fourth op only)
 *           bit 5:    the server sends a message of FUZZ_OIB_BACK bytes to
 *                     the client first (the client then owes credits for
 *                     data packets)
 *           bit 6:    no progress between ops at all (but PROGRESS ops and
 *                     the harness's waits for credits)
 *   byte 1  receive buffers of 64 x byte bytes
 *   rest    ops; each is an op byte, then
 *             bits 0-2 (what) WHOLE, SLICE, TOKENS: a packet flagged WHOLE,
 *               no flag or TOKENS: the flags (2 bytes) if op bit 6 (any
 *               flags), the magic (2 bytes) if op bit 7 (any magic), the
 *               tokens (4 bytes) if op bits 4-5 are TOK_ANY (else what
 *               bits 4-5 say: fuzz_openib.h), the payload length (2 bytes
 *               LE, at most a slot's payload; TOKENS: only with op bit 3,
 *               else none), with op bit 3 (HDR) for WHOLE: the xheader
 *               length (1 byte), for SLICE: the xheader length (1 byte)
 *               and the data length (4 bytes) of a USER header the
 *               harness writes into the first 8 payload bytes (WHOLE: a
 *               consistent message filling the packet; SLICE: the start
 *               of a message that later SLICEs continue), then the payload
 *               bytes (beyond the input: zeros)
 *             RAW: a packet of any bytes: its length (2 bytes; at most
 *               FUZZ_OIB_RAW_MAX, beyond that a slot: 0 to 7 is shorter
 *               than the header, more than a slot does not fit the
 *               server's receive), then its bytes, header included; op bit
 *               3: the tokens field is what the client owes, op bit 4: the
 *               magic is right (where the packet holds them)
 *             SEND, PROGRESS (both sides progress), RECV, CANCEL:
 *               fuzz_pair.h
 *
 * What must hold (else abort(), which libFuzzer and the driver report):
 * what fuzz_pair.c checks (no memory error; once both sides closed, or
 * the client died, every request is done and neither socket holds a
 * connection); no hang: the server returns its credits while both sides
 * are up (above), and every wait is bounded. Neither the plugin's nor the harness's work
 * requests fail to post (a receive beyond the receive queue or a send
 * beyond the send queue: ENOMEM), and no completion queue overruns: the
 * harness puts checks in front of the software HCA's poll_cq, post_send
 * and post_recv (the context's ops, which the inline ibv_* calls take).
 *
 * PSP_OPENIB_RECVQ_SIZE, _SENDQ_SIZE and _PENDING_TOKENS may be set from
 * outside (fuzz_openib.tight: the least credits); the harness reads the
 * slots and credits from the connections.
 *
 * Built twice: with libFuzzer (PSCOM_FUZZ, clang) and with
 * fuzz_openib_gen.c, fuzz_pair_gen.c and fuzz_driver.c as the ctest test
 * fuzz_openib.
 */
#define _GNU_SOURCE
#include "fuzz_openib.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_bytes.h"
#include "fuzz_driver.h" /* FUZZ_CHECK */
#include "fuzz_pair.h"
#include "fuzz_tcp.h"
#include "openib_priv.h"
#include "pscom.h"
#include "pscom_con.h"
#include "pscom_core.h"
#include "pscom_wire.h"
#include "pscom_plugin_reg.h"

_Static_assert(FUZZ_OIB_SLOT == OPENIB_SLOT_SIZE, "the slot size of fuzz_openib.h");

/* the built-in plugins of this program: openib alone (lib/plugins/openib,
 * compiled in over test/verbs_emul; the core's own table in pscom-static
 * is not linked) */
extern const pscom_plugin_desc_t pscom_plugin_desc_openib;
const pscom_plugin_desc_t *const pscom_builtin_plugins[] = {&pscom_plugin_desc_openib, NULL};
const pscom_module_info_t pscom_module_plugins[] = {{NULL, 0}}; /* and no modules */

#define FUZZ_OIB_BACK    20000   /* the server's message to the client (set-up bit 5) */
#define FUZZ_OIB_WAIT_US 5000000 /* the longest wait for the server's credits */

static char pkt[FUZZ_OIB_RAW_MAX]; /* the packet being built */
fuzz_openib_result_t fuzz_openib_last;

/* The software HCA's work-request and completion calls, checked: the
 * plugin's posts never fail (a receive beyond the receive queue, a send
 * beyond the send queue: ENOMEM), and no completion queue overruns (the
 * emulation then fails every poll). */
static int (*emul_poll_cq)(struct ibv_cq *, int, struct ibv_wc *);
static int (*emul_post_send)(struct ibv_qp *, struct ibv_send_wr *, struct ibv_send_wr **);
static int (*emul_post_recv)(struct ibv_qp *, struct ibv_recv_wr *, struct ibv_recv_wr **);

static int checked_poll_cq(struct ibv_cq *cq, int n, struct ibv_wc *wc)
{
    int got = emul_poll_cq(cq, n, wc);
    FUZZ_CHECK(got >= 0 && "no completion queue overruns");
    return got;
}

static int checked_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad)
{
    int err = emul_post_send(qp, wr, bad);
    if (err) fprintf(stderr, "fuzz_openib: ibv_post_send: %s\n", strerror(err));
    FUZZ_CHECK(!err && "a send is posted");
    return err;
}

static int checked_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad)
{
    int err = emul_post_recv(qp, wr, bad);
    if (err) fprintf(stderr, "fuzz_openib: ibv_post_recv: %s\n", strerror(err));
    FUZZ_CHECK(!err && "a receive is posted");
    return err;
}

static void verbs_checked(void)
{
    struct ibv_context *ctx = openib_dev.ctx;
    FUZZ_CHECK(ctx != NULL && "the software HCA is open (openib is enabled)");
    emul_poll_cq       = ctx->ops.poll_cq;
    emul_post_send     = ctx->ops.post_send;
    emul_post_recv     = ctx->ops.post_recv;
    ctx->ops.poll_cq   = checked_poll_cq;
    ctx->ops.post_send = checked_post_send;
    ctx->ops.post_recv = checked_post_recv;
}

static void oib_env(void)
{
    setenv("PSP_UCP", "0", 1);
    setenv("PSP_OPENIB", "1", 1);
    /* the software HCA as it comes: one device, port up, no faults */
    unsetenv("VERBS_EMUL_DEVICES");
    unsetenv("VERBS_EMUL_PORT_STATE");
    unsetenv("VERBS_EMUL_FAIL");
    unsetenv("VERBS_EMUL_CORRUPT");
}

static int oib_started(pscom_connection_t *c)
{
    return ((openib_con_t *)fuzz_pair_priv(c))->started;
}

/* ---- one input's state (besides the pair's) ---------------------------------------- */

typedef struct {
    openib_con_t *cli, *srv;
    pscom_request_t *back; /* the server's message to the client */
    unsigned injected, credit_waits, cut;
} oib_run_t;
static oib_run_t o;

static int oib_connected(fuzz_pair_t *p)
{
    o = (oib_run_t){.cli = fuzz_pair_priv(p->c), .srv = fuzz_pair_priv(p->s)};
    FUZZ_CHECK(o.cli->started && o.cli->qp && o.cli->ufd.fd >= 0);
    return o.cli->ufd.fd;
}

/* set-up bit 5: the server's message to the client */
static void oib_setup(fuzz_pair_t *p, unsigned flags)
{
    if (flags & 32) o.back = fuzz_pair_send_msg(p->s, FUZZ_OIB_BACK, 0);
}

/* Are both sides up (the harness may post to the server)? */
static int both_up(void)
{
    return !o.cli->closed && !o.cli->failed && !o.srv->closed && !o.srv->failed;
}

/* May the client's plugin post a packet of the harness now? */
static int client_ready(const fuzz_pair_t *p)
{
    return o.cli->credits >= 2 && o.cli->send_busy < o.cli->nsend &&
           !pscom_write_pending(pscom_con_from_pub(p->c));
}

/* Progress until the client may post (1), or a side failed or closed (0).
 * The server that keeps its credits while both are up hangs: abort. */
static int await_client_ready(const fuzz_pair_t *p)
{
    if (!both_up()) return 0;
    if (client_ready(p)) return 1;
    o.credit_waits++;
    uint64_t t0 = fuzz_pair_now_us();
    for (unsigned pass = 0;; pass++) {
        pscom_test_any();
        if (!both_up()) return 0;
        if (client_ready(p)) return 1;
        if (pass % 1024 == 1023) {
            if (fuzz_pair_now_us() - t0 > FUZZ_OIB_WAIT_US) {
                fprintf(stderr, "fuzz_openib: client credits %u, sends busy %u/%u, write %s; "
                        "server owes %u (%u of data), credits %u\n", o.cli->credits,
                        o.cli->send_busy, o.cli->nsend,
                        pscom_write_pending(pscom_con_from_pub(p->c)) ? "pending" : "none",
                        o.srv->owed, o.srv->owed_data, o.srv->credits);
                FUZZ_CHECK(!"the server returns its credits");
            }
        }
    }
}

/* Post pkt[0..len) as the client's next packet; it returns tokens of the
 * client's owed credits. */
static void inject(size_t len, uint32_t tokens)
{
    openib_con_t *c = o.cli;
    /* beyond a slot: only where the next send slot follows (the last send
     * slot ends the registered buffer) */
    if (len > OPENIB_SLOT_SIZE && c->send_head + 1 == c->nsend) {
        len = OPENIB_SLOT_SIZE;
        o.cut++;
    }
    memcpy(openib_send_slot(c, c->send_head), pkt, len);
    openib_slot_post(c, len); /* checked_post_send */
    c->owed -= tokens < c->owed ? tokens : c->owed;
    if (c->owed_data > c->owed) c->owed_data = c->owed;
    o.injected++;
}

/* the tokens field by op bits 4-5, but for TOK_ANY (read from the input) */
static uint32_t tokens_of(unsigned op)
{
    switch ((op >> 4) & 3) {
    case FUZZ_OIB_TOK_NONE: return 0;
    case FUZZ_OIB_TOK_MORE: return o.cli->owed + 1;
    default: return o.cli->owed;
    }
}

static const char *const what_name[] = {"WHOLE", "SLICE", "TOKENS", "RAW"};

/* A packet op (WHOLE, SLICE, TOKENS, RAW): read, then posted once the
 * client may (its owed credits are read then). */
static void oib_put(fuzz_pair_t *p, fuzz_in_t *in, unsigned op)
{
    unsigned what = op & 7;
    size_t len;
    int owed_tokens = 0; /* the tokens field is the client's owed (at post time) */
    uint32_t tokens = 0;
    if (what == FUZZ_OIB_RAW) {
        len = in_u16(in);
        if (len > FUZZ_OIB_RAW_MAX) len = OPENIB_SLOT_SIZE;
        in_bytes(in, pkt, len);
        if (len >= sizeof(openib_pkt_hdr_t)) {
            openib_pkt_hdr_t h;
            memcpy(&h, pkt, sizeof(h));
            if (op & FUZZ_OIB_RAW_MAGIC) h.magic = OPENIB_PKT_MAGIC;
            owed_tokens = (op & FUZZ_OIB_RAW_OWED) != 0;
            tokens      = h.tokens;
            memcpy(pkt, &h, sizeof(h));
        }
    } else {
        openib_pkt_hdr_t h = {.magic = OPENIB_PKT_MAGIC};
        h.flags            = what == FUZZ_OIB_WHOLE    ? OPENIB_PKT_WHOLE
                             : what == FUZZ_OIB_TOKENS ? OPENIB_PKT_TOKENS
                                                       : 0;
        if (op & FUZZ_OIB_FLAGS) h.flags = (uint16_t)in_u16(in);
        if (op & FUZZ_OIB_MAGIC) h.magic = (uint16_t)in_u16(in);
        unsigned tmode = (op >> 4) & 3;
        if (tmode == FUZZ_OIB_TOK_ANY) h.tokens = tokens = in_u32(in);
        size_t plen = what != FUZZ_OIB_TOKENS || (op & FUZZ_OIB_HDR) ? in_u16(in) : 0;
        if (plen > OPENIB_PAYLOAD_MAX) plen = OPENIB_PAYLOAD_MAX;
        int hdr       = (op & FUZZ_OIB_HDR) && what != FUZZ_OIB_TOKENS &&
                  plen >= PSCOM_WIRE_HEADER_SIZE;
        size_t xlen   = 0;
        uint64_t dlen = 0;
        if (what == FUZZ_OIB_WHOLE && (op & FUZZ_OIB_HDR)) {
            xlen = in_byte(in);
            if (hdr && xlen > plen - PSCOM_WIRE_HEADER_SIZE) xlen = plen - PSCOM_WIRE_HEADER_SIZE;
            if (hdr) dlen = plen - PSCOM_WIRE_HEADER_SIZE - xlen;
        } else if (what == FUZZ_OIB_SLICE && (op & FUZZ_OIB_HDR)) {
            xlen = in_byte(in);
            dlen = in_u32(in);
        }
        char *payload = pkt + sizeof(h);
        in_bytes(in, payload, plen);
        if (hdr) pscom_wire_header_encode(payload, (uint16_t)xlen, PSCOM_MSGTYPE_USER, dlen);
        memcpy(pkt, &h, sizeof(h));
        len         = sizeof(h) + plen;
        owed_tokens = tmode != FUZZ_OIB_TOK_ANY;
    }
    int ready = await_client_ready(p);
    if (ready && owed_tokens) {
        tokens = what == FUZZ_OIB_RAW ? o.cli->owed : tokens_of(op);
        if (len >= sizeof(openib_pkt_hdr_t)) memcpy(pkt + 4, &tokens, sizeof(tokens));
    }
    if (fuzz_pair_trace)
        fprintf(stderr, "op %#x: %s packet of %zu bytes, tokens %u (owed %u, credits %u)%s\n", op,
                what_name[what], len, tokens, o.cli->owed, o.cli->credits,
                ready ? "" : ": not sent");
    if (ready) inject(len, len >= sizeof(openib_pkt_hdr_t) ? tokens : 0);
}

static int oib_snapshot(const fuzz_pair_t *p)
{
    fuzz_openib_last = (fuzz_openib_result_t){
        .injected     = o.injected,
        .credit_waits = o.credit_waits,
        .cut          = o.cut,
    };
    return o.srv->closed || o.srv->failed || !(p->s->state & PSCOM_CON_STATE_R);
}

static void oib_closed(const fuzz_pair_t *p)
{
    (void)p;
    if (fuzz_pair_trace)
        fprintf(stderr, "end: %u packets (%u waited), receives ok %u, failed %u; server %s, %s\n",
                o.injected, o.credit_waits, fuzz_pair_last.recvs_ok, fuzz_pair_last.recvs_error,
                fuzz_pair_last.server_stopped ? "stopped" : "up",
                fuzz_pair_last.peer_died ? "the client died" : "both closed");
}

static void oib_drain(fuzz_pair_t *p)
{
    (void)p;
    fuzz_tcp_await_done(o.back);
}

const fuzz_pair_target_t fuzz_pair_target = {
    .trace_env = "FUZZ_OIB_TRACE", /* =1: each op on stderr (replaying a failing input) */
    .con_type  = PSCOM_CON_TYPE_OPENIB,
    .quiet     = 64, /* set-up bit 6 */
    .env       = oib_env,
    .opened    = verbs_checked,
    .started   = oib_started,
    .connected = oib_connected,
    .setup     = oib_setup,
    .put       = oib_put,
    .snapshot  = oib_snapshot,
    .closed    = oib_closed,
    .drain     = oib_drain,
};
