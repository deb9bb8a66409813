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
 * table of built-in plugins below holds it), linked with the software HCA
 * of test/verbs_emul instead of libibverbs (each queue pair a unix
 * datagram socket; it works within one process). The harness posts the
 * input's packets with ibv_post_send() of IBV_WR_SEND on the client's
 * queue pair, from the client's own registered send slots, as the
 * client's plugin would:
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
 * One input is two bytes of set-up and the ops:
 *
 *   byte 0  bits 0-1: receives the server posts first (0-3)
 *           bit 2:    the client sends a real message first
 *           bit 3:    the first receive is an any-source one
 *           bit 4:    both sides progress after every fourth op only
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
 *             SEND: a real message of the client: data length (2 bytes),
 *               xheader length (1 byte, mod 33), both of a fixed pattern
 *             PROGRESS: both sides progress (1 byte: passes - 1)
 *             RECV: one more receive (1 byte: its buffer, 64 x byte)
 *             CANCEL: the server cancels its oldest pending receive
 *
 * What must hold (else abort(), which libFuzzer and the driver report): no
 * memory error (the receive buffers are freed after each input); no hang:
 * the server returns its credits while both sides are up (above), and
 * every wait is bounded; once both sides closed the connection (and,
 * where the packets left the two out of step so that the EOFs cannot
 * pass, the client died: its end of the handshake socket, the server's
 * death detector, shut down), every request is done and neither socket
 * holds a connection. Neither the plugin's nor the harness's work
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
 * fuzz_openib_gen.c and fuzz_driver.c as the ctest test fuzz_openib.
 */
#define _GNU_SOURCE
#include "fuzz_openib.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "fuzz_bytes.h"
#include "fuzz_driver.h" /* FUZZ_CHECK */
#include "fuzz_tcp.h"
#include "openib_priv.h"
#include "pscom.h"
#include "pscom_con.h"
#include "pscom_core.h"
#include "pscom_progress.h"
#include "pscom_wire.h"

_Static_assert(FUZZ_OIB_SLOT == OPENIB_SLOT_SIZE, "the slot size of fuzz_openib.h");

/* the built-in plugins of this program: openib alone (lib/plugins/openib,
 * compiled in over test/verbs_emul; the core's own table in pscom-static
 * is not linked) */
extern const pscom_plugin_desc_t pscom_plugin_desc_openib;
const pscom_plugin_desc_t *const pscom_builtin_plugins[] = {&pscom_plugin_desc_openib, NULL};

#define MAX_SENDS       16       /* real messages of the client per input */
#define XH_MAX          32
#define FUZZ_OIB_BACK   20000    /* the server's message to the client (set-up bit 5) */
#define FUZZ_OIB_WAIT_US 5000000 /* the longest wait for the server's credits */

static pscom_socket_t *server, *client;
static int server_port;
static pscom_connection_t *accepted;
static char pkt[FUZZ_OIB_RAW_MAX]; /* the packet being built */
static int trace; /* FUZZ_OIB_TRACE=1: each op on stderr (replaying a failing input) */
static char pattern[65536 + XH_MAX]; /* what real messages carry: (i * 7) */
fuzz_openib_result_t fuzz_openib_last;

static void on_accept(pscom_connection_t *con)
{
    accepted = con;
}

static pscom_socket_t *open_socket(const char *name)
{
    pscom_socket_t *s = pscom_open_socket(0, 0, 0, PSCOM_SOCK_FLAG_INTER_JOB);
    FUZZ_CHECK(s != NULL);
    pscom_socket_set_name(s, name);
    FUZZ_CHECK(pscom_listen(s, PSCOM_ANYPORT) == PSCOM_SUCCESS);
    return s;
}

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

static void sockets_open(void)
{
    trace = getenv("FUZZ_OIB_TRACE") != NULL;
    setenv("PSP_DEBUG", "0", 0); /* protocol errors by the thousand */
    setenv("PSP_TCP", "0", 1);
    setenv("PSP_SHM", "0", 1);
    setenv("PSP_UCP", "0", 1);
    setenv("PSP_OPENIB", "1", 1);
    /* the software HCA as it comes: one device, port up, no faults */
    unsetenv("VERBS_EMUL_DEVICES");
    unsetenv("VERBS_EMUL_PORT_STATE");
    unsetenv("VERBS_EMUL_FAIL");
    unsetenv("VERBS_EMUL_CORRUPT");
    FUZZ_CHECK(pscom_init(PSCOM_VERSION) == PSCOM_SUCCESS);
    server                 = open_socket("fuzzsrv");
    server->ops.con_accept = on_accept;
    server_port            = pscom_get_portno(server);
    client                 = open_socket("fuzzcli");
    verbs_checked();
    for (size_t i = 0; i < sizeof(pattern); i++) pattern[i] = (char)(i * 7);
}

static openib_con_t *oib_of(pscom_connection_t *c)
{
    return pscom_con_plugin_priv(pscom_con_from_pub(c));
}

static uint64_t now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000 + (uint64_t)ts.tv_nsec / 1000;
}

/* ---- one input's state ------------------------------------------------------------- */

typedef struct {
    pscom_connection_t *c, *s;
    openib_con_t *cli, *srv;
    pscom_request_t *recvs[FUZZ_OIB_MAX_RECV];
    char *bufs[FUZZ_OIB_MAX_RECV];
    size_t lens[FUZZ_OIB_MAX_RECV];
    unsigned nrecvs;
    pscom_request_t *sends[MAX_SENDS];
    unsigned nsends;
    pscom_request_t *back; /* the server's message to the client */
    unsigned injected, credit_waits, cut;
} run_t;

/* Are both sides up (the harness may post to the server)? */
static int both_up(const run_t *r)
{
    return !r->cli->closed && !r->cli->failed && !r->srv->closed && !r->srv->failed;
}

static void progress(unsigned passes)
{
    for (unsigned i = 0; i < passes; i++) pscom_test_any();
}

/* May the client's plugin post a packet of the harness now? */
static int client_ready(const run_t *r)
{
    const openib_con_t *o = r->cli;
    return o->credits >= 2 && o->send_busy < o->nsend &&
           !pscom_write_pending(pscom_con_from_pub(r->c));
}

/* Progress until the client may post (1), or a side failed or closed (0).
 * The server that keeps its credits while both are up hangs: abort. */
static int await_client_ready(run_t *r)
{
    if (!both_up(r)) return 0;
    if (client_ready(r)) return 1;
    r->credit_waits++;
    uint64_t t0 = now_us();
    for (unsigned pass = 0;; pass++) {
        pscom_test_any();
        if (!both_up(r)) return 0;
        if (client_ready(r)) return 1;
        if (pass % 1024 == 1023) {
            if (now_us() - t0 > FUZZ_OIB_WAIT_US) {
                fprintf(stderr, "fuzz_openib: client credits %u, sends busy %u/%u, write %s; "
                        "server owes %u (%u of data), credits %u\n", r->cli->credits,
                        r->cli->send_busy, r->cli->nsend,
                        pscom_write_pending(pscom_con_from_pub(r->c)) ? "pending" : "none",
                        r->srv->owed, r->srv->owed_data, r->srv->credits);
                FUZZ_CHECK(!"the server returns its credits");
            }
        }
    }
}

/* Post pkt[0..len) as the client's next packet; it returns tokens of the
 * client's owed credits. */
static void inject(run_t *r, size_t len, uint32_t tokens)
{
    openib_con_t *o = r->cli;
    unsigned slot   = o->send_head;
    /* beyond a slot: only where the next send slot follows (the last send
     * slot ends the registered buffer) */
    if (len > OPENIB_SLOT_SIZE && slot + 1 == o->nsend) {
        len = OPENIB_SLOT_SIZE;
        r->cut++;
    }
    char *dst = openib_send_slot(o, slot);
    memcpy(dst, pkt, len);
    struct ibv_sge sge = {
        .addr = (uint64_t)(uintptr_t)dst, .length = (uint32_t)len, .lkey = o->mr->lkey};
    struct ibv_send_wr wr = {
        .wr_id      = OPENIB_WR_SEND | slot,
        .sg_list    = &sge,
        .num_sge    = 1,
        .opcode     = IBV_WR_SEND,
        .send_flags = IBV_SEND_SIGNALED,
    }, *bad;
    ibv_post_send(o->qp, &wr, &bad); /* checked_post_send */
    o->send_head = slot + 1 == o->nsend ? 0 : slot + 1;
    o->send_busy++;
    o->credits--;
    o->owed -= tokens < o->owed ? tokens : o->owed;
    if (o->owed_data > o->owed) o->owed_data = o->owed;
    r->injected++;
}

static pscom_request_t *post_recv(run_t *r, size_t len, int any)
{
    if (r->nrecvs == FUZZ_OIB_MAX_RECV) return NULL;
    pscom_request_t *q = pscom_request_create(XH_MAX, 0);
    char *buf          = malloc(len ? len : 1);
    FUZZ_CHECK(q != NULL && buf != NULL);
    q->connection         = any ? NULL : r->s;
    q->socket             = server;
    q->xheader_len        = XH_MAX;
    q->data               = buf;
    q->data_len           = len;
    r->bufs[r->nrecvs]    = buf;
    r->lens[r->nrecvs]    = len;
    r->recvs[r->nrecvs++] = q;
    pscom_post_recv(q);
    return q;
}

static pscom_request_t *send_msg(pscom_connection_t *c, size_t len, size_t xlen)
{
    pscom_request_t *q = pscom_request_create(XH_MAX, 0);
    FUZZ_CHECK(q != NULL);
    memcpy(&q->xheader, pattern, xlen);
    q->xheader_len = xlen;
    q->connection  = c;
    q->data        = pattern + XH_MAX;
    q->data_len    = len;
    pscom_post_send(q);
    return q;
}

static void post_send(run_t *r, size_t len, size_t xlen)
{
    if (r->nsends == MAX_SENDS) return;
    r->sends[r->nsends++] = send_msg(r->c, len, xlen);
}

/* the tokens field by op bits 4-5, but for TOK_ANY (read from the input) */
static uint32_t tokens_of(const run_t *r, unsigned op)
{
    switch ((op >> 4) & 3) {
    case FUZZ_OIB_TOK_NONE: return 0;
    case FUZZ_OIB_TOK_MORE: return r->cli->owed + 1;
    default: return r->cli->owed;
    }
}

static const char *const what_name[] = {"WHOLE", "SLICE", "TOKENS", "RAW"};

/* A packet op (WHOLE, SLICE, TOKENS, RAW): read, then posted once the
 * client may (its owed credits are read then). */
static void put_packet(run_t *r, fuzz_in_t *in, unsigned op)
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
    int ready = await_client_ready(r);
    if (ready && owed_tokens) {
        tokens = what == FUZZ_OIB_RAW ? r->cli->owed : tokens_of(r, op);
        if (len >= sizeof(openib_pkt_hdr_t)) memcpy(pkt + 4, &tokens, sizeof(tokens));
    }
    if (trace)
        fprintf(stderr, "op %#x: %s packet of %zu bytes, tokens %u (owed %u, credits %u)%s\n", op,
                what_name[what], len, tokens, r->cli->owed, r->cli->credits,
                ready ? "" : ": not sent");
    if (ready) inject(r, len, len >= sizeof(openib_pkt_hdr_t) ? tokens : 0);
}

/* One op of the input. */
static void put_op(run_t *r, fuzz_in_t *in)
{
    uint8_t op    = in_byte(in);
    unsigned what = op & 7;
    switch (what) {
    case FUZZ_OIB_WHOLE:
    case FUZZ_OIB_SLICE:
    case FUZZ_OIB_TOKENS:
    case FUZZ_OIB_RAW: put_packet(r, in, op); return;
    case FUZZ_OIB_SEND: {
        size_t len  = in_u16(in);
        size_t xlen = in_byte(in) % (XH_MAX + 1);
        if (trace) fprintf(stderr, "op %#x: send %zu + %zu bytes\n", op, xlen, len);
        post_send(r, len, xlen);
        return;
    }
    case FUZZ_OIB_PROGRESS: progress(in_byte(in) + 1u); return;
    case FUZZ_OIB_RECV: post_recv(r, 64u * in_byte(in), 0); return;
    default: /* CANCEL */
        for (unsigned i = 0; i < r->nrecvs; i++) {
            if (pscom_req_is_done(r->recvs[i])) continue;
            pscom_cancel_recv(r->recvs[i]);
            return;
        }
        return;
    }
}

static void connect_pair(run_t *r)
{
    char ep[64];
    snprintf(ep, sizeof(ep), "127.0.0.1:%d", server_port);
    r->c = pscom_open_connection(client);
    FUZZ_CHECK(r->c != NULL);
    accepted = NULL;
    FUZZ_CHECK(pscom_connect(r->c, ep, PSCOM_RANK_UNDEFINED, PSCOM_CON_FLAG_DIRECT) ==
               PSCOM_SUCCESS);
    for (unsigned pass = 0; !accepted || !oib_of(accepted)->started; pass++) {
        FUZZ_CHECK(pass < FUZZ_TCP_PASSES);
        pscom_test_any();
    }
    r->s = accepted;
    FUZZ_CHECK(r->c->type == PSCOM_CON_TYPE_OPENIB && r->s->type == PSCOM_CON_TYPE_OPENIB);
    r->cli = oib_of(r->c);
    r->srv = oib_of(r->s);
    FUZZ_CHECK(r->cli->started && r->cli->qp && r->cli->ufd.fd >= 0);
}

static void snapshot(const run_t *r)
{
    fuzz_openib_last = (fuzz_openib_result_t){
        .server_stopped = r->srv->closed || r->srv->failed || !(r->s->state & PSCOM_CON_STATE_R),
        .injected       = r->injected,
        .credit_waits   = r->credit_waits,
        .cut            = r->cut,
    };
    for (unsigned i = 0; i < r->nrecvs; i++) {
        pscom_request_t *q = r->recvs[i];
        if (!pscom_req_is_done(q)) continue;
        if (pscom_req_successful(q)) {
            fuzz_openib_last.recvs_ok++;
        } else if (q->state & PSCOM_REQ_STATE_ERROR) {
            fuzz_openib_last.recvs_error++;
        }
    }
    /* the first receive's message, also truncated */
    if (r->nrecvs && pscom_req_is_done(r->recvs[0]) &&
        !(r->recvs[0]->state & (PSCOM_REQ_STATE_ERROR | PSCOM_REQ_STATE_CANCELED))) {
        fuzz_openib_last.first_len  = r->recvs[0]->header.data_len;
        fuzz_openib_last.first_xlen = r->recvs[0]->header.xheader_len;
        size_t n = r->lens[0] < sizeof(fuzz_openib_last.first) ? r->lens[0]
                                                                : sizeof(fuzz_openib_last.first);
        memcpy(fuzz_openib_last.first, r->bufs[0], n);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2) return 0;
    if (!server) sockets_open();
    run_t r     = {0};
    size_t blen = 64u * data[1];
    connect_pair(&r);
    int peer_fd = dup(r.cli->ufd.fd); /* the handshake socket: the server's death detector */
    FUZZ_CHECK(peer_fd >= 0);

    /* the set-up */
    for (unsigned i = 0; i < (data[0] & 3u); i++) post_recv(&r, blen, i == 0 && (data[0] & 8));
    if (data[0] & 4) post_send(&r, 8, 4);
    if (data[0] & 32) r.back = send_msg(r.s, FUZZ_OIB_BACK, 0);
    progress(4);

    /* the ops */
    fuzz_in_t in = {.p = data + 2, .left = size - 2};
    for (unsigned n = 1; in.left; n++) {
        put_op(&r, &in);
        if (!(data[0] & 64) && (!(data[0] & 16) || !(n % 4))) progress(8);
    }
    progress(64);
    snapshot(&r);

    /* both sides close. A peer whose packets left the server out of step
     * never gets (nor sends) the EOF: it dies. Then everything ends. */
    pscom_close_connection(r.c);
    pscom_close_connection(r.s);
    fuzz_openib_last.peer_died = !fuzz_tcp_settled(server, client, FUZZ_OIB_CLOSE_PASSES);
    if (fuzz_openib_last.peer_died) {
        shutdown(peer_fd, SHUT_RDWR);
        /* its end is seen where the fds are polled: at once with a timeout */
        uint64_t t0 = now_us();
        while (!fuzz_tcp_settled(server, client, 1)) {
            FUZZ_CHECK(now_us() - t0 < FUZZ_OIB_SETTLE_US && "closing leaves no connection");
            pscom_progress(1);
        }
    }
    close(peer_fd);
    if (trace)
        fprintf(stderr, "end: %u packets (%u waited), receives ok %u, failed %u; server %s, %s\n",
                r.injected, r.credit_waits, fuzz_openib_last.recvs_ok,
                fuzz_openib_last.recvs_error,
                fuzz_openib_last.server_stopped ? "stopped" : "up",
                fuzz_openib_last.peer_died ? "the client died" : "both closed");
    /* an any-source receive outlives the connection: it is cancelled */
    if (r.nrecvs && !r.recvs[0]->connection) pscom_cancel_recv(r.recvs[0]);
    for (unsigned i = 0; i < r.nrecvs; i++) fuzz_tcp_await_done(r.recvs[i]);
    for (unsigned i = 0; i < r.nsends; i++) fuzz_tcp_await_done(r.sends[i]);
    fuzz_tcp_await_done(r.back);
    for (unsigned i = 0; i < r.nrecvs; i++) free(r.bufs[i]);
    return 0;
}
