/*
 * fuzz_ucp.c - the receiving side of the ucp transport against any UCX
 * messages a peer sends: tags of every kind (MSG, HEAD, DATA and the
 * unused fourth), sequence numbers in and out of order, ids of other
 * connections, any lengths and bytes, between real messages of the peer,
 * receives posted, cancelled or missing.
 *
 * The peer is real: a client socket of this process connects to a server
 * socket over ucp (the plugin is built into this program: the core's
 * table of built-in plugins below holds it), and the harness sends the
 * input's messages with ucp_tag_send_nbx() on the client's endpoint, as
 * the client's plugin would (its sequence number moves on where the
 * message takes the next one). Both connections share the process's one
 * UCX worker; UCX builds its endpoint to itself over shared memory (posix,
 * with the default UCX_TLS=posix,cma,self here): a message waits in the
 * worker's FIFO until the next progress, as one from another process
 * would (UCX_TLS=tcp UCX_NET_DEVICES=lo works too). UCX_RNDV_THRESH=inf
 * keeps every message eager (a rendezvous send the server never takes
 * would stay pending).
 *
 * One input is two bytes of set-up and the ops:
 *
 *   byte 0  bits 0-1: receives the server posts first (0-3)
 *           bit 2:    the client sends a real message first
 *           bit 3:    the first receive is an any-source one
 *           bit 4:    the server progresses after every fourth op only
 *                     (messages pile up in UCX's unexpected queue)
 *   byte 1  receive buffers of 64 x byte bytes
 *   rest    ops; each is an op byte, then
 *             bits 0-2 (what) MSG, HEAD, DATA, KIND3: a UCX message of
 *               that tag kind: len (2 bytes LE; DATA with op bit 3: one
 *               more byte on top, at most FUZZ_UCP_MAX_LEN), then its
 *               bytes (beyond the input: zeros); bits 4-6 its sequence
 *               number and id (fuzz_ucp.h). MSG with op bit 3: a
 *               consistent USER header at the front, xheader length
 *               (1 byte) before the bytes; HEAD with op bit 3: a USER
 *               header of xheader len - 8, the data length (4 bytes) it
 *               announces before the bytes.
 *             SEND: a real message of the client: data length (2 bytes),
 *               xheader length (1 byte, mod 33), both of a fixed pattern
 *             PROGRESS: the server progresses (1 byte: passes - 1)
 *             RECV: one more receive (1 byte: its buffer, 64 x byte)
 *             CANCEL: the server cancels its oldest pending receive
 *
 * What must hold (else abort(), which libFuzzer and the driver report): no
 * memory error (the receive buffers are freed after each input: a late
 * write by UCX shows as a use after free), and once both sides closed the
 * connection (and, where the messages left the two out of step so that
 * the EOFs cannot pass, the client died: its end of the handshake socket,
 * the server's death detector, shut down), every request is done, every
 * send of the harness completed, and neither socket holds a connection.
 *
 * Built twice: with libFuzzer (PSCOM_FUZZ, clang) and with fuzz_ucp_gen.c
 * and fuzz_driver.c as the ctest test fuzz_ucp.
 */
#define _GNU_SOURCE
#include "fuzz_ucp.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "fuzz_bytes.h"
#include "fuzz_driver.h" /* FUZZ_CHECK */
#include "fuzz_tcp.h"
#include "pscom.h"
#include "pscom_con.h"
#include "pscom_core.h"
#include "pscom_progress.h"
#include "pscom_wire.h"
#include "ucp_priv.h"

/* the built-in plugins of this program: ucp alone (lib/plugins/ucp,
 * compiled in; the core's own table in pscom-static is not linked) */
extern const pscom_plugin_desc_t pscom_plugin_desc_ucp;
const pscom_plugin_desc_t *const pscom_builtin_plugins[] = {&pscom_plugin_desc_ucp, NULL};

#define MAX_SENDS 16 /* real messages of the client per input */
#define MAX_RAW   64 /* harness sends UCX has not completed */
#define XH_MAX    32

static pscom_socket_t *server, *client;
static int server_port;
static pscom_connection_t *accepted;
static char raw[FUZZ_UCP_MAX_LEN];
static int trace; /* FUZZ_UCP_TRACE=1: each op on stderr (replaying a failing input) */
static char pattern[65536 + XH_MAX]; /* what real messages carry: (i * 7) */
fuzz_ucp_result_t fuzz_ucp_last;

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

static void sockets_open(void)
{
    trace = getenv("FUZZ_UCP_TRACE") != NULL;
    setenv("PSP_DEBUG", "0", 0); /* protocol errors by the thousand */
    setenv("PSP_TCP", "0", 1);
    setenv("PSP_SHM", "0", 1);
    setenv("PSP_UCP", "1", 1);
    setenv("UCX_TLS", "posix,cma,self", 0);
    setenv("UCX_RNDV_THRESH", "inf", 0);
    FUZZ_CHECK(pscom_init(PSCOM_VERSION) == PSCOM_SUCCESS);
    server                 = open_socket("fuzzsrv");
    server->ops.con_accept = on_accept;
    server_port            = pscom_get_portno(server);
    client                 = open_socket("fuzzcli");
    for (size_t i = 0; i < sizeof(pattern); i++) pattern[i] = (char)(i * 7);
}

static ucp_con_t *ucp_of(pscom_connection_t *c)
{
    return pscom_con_plugin_priv(pscom_con_from_pub(c));
}

/* ---- the input ------------------------------------------------------------------- */

/* fuzz_in_t, in_byte() ... in_u32(): fuzz_bytes.h */

/* ---- one input's state ------------------------------------------------------------- */

typedef struct {
    pscom_connection_t *c, *s;
    ucp_con_t *cli, *srv;
    pscom_request_t *recvs[FUZZ_UCP_MAX_RECV];
    char *bufs[FUZZ_UCP_MAX_RECV];
    size_t lens[FUZZ_UCP_MAX_RECV];
    unsigned nrecvs;
    pscom_request_t *sends[MAX_SENDS];
    unsigned nsends;
    void *raw_reqs[MAX_RAW];
    unsigned nraw;
} run_t;

/* Can the harness still send to the server? */
static int open_to_server(const run_t *r)
{
    return r->cli->ep && !r->cli->closed && !r->cli->tx_failed;
}

static void server_progress(unsigned passes)
{
    for (unsigned i = 0; i < passes; i++) pscom_test_any();
}

/* a harness send UCX holds: progress until it completes, then free it */
static void raw_await(void *req)
{
    for (unsigned pass = 0; ucp_request_check_status(req) == UCS_INPROGRESS; pass++) {
        FUZZ_CHECK(pass < FUZZ_TCP_PASSES && "a send of the harness completes");
        pscom_test_any();
    }
    ucp_request_free(req);
}

static void raw_send(run_t *r, uint64_t id, unsigned kind, uint32_t seq, size_t len)
{
    const ucp_request_param_t prm = {.op_attr_mask = 0};
    ucs_status_ptr_t st = ucp_tag_send_nbx(r->cli->ep, raw, len, ucpt_make(id, kind, seq), &prm);
    /* what the client's plugin tells the poller after a send to its own
     * worker (self_peer): the message may be in the unexpected queue */
    ucp_g.must_probe = 1;
    if (!UCS_PTR_IS_PTR(st)) return;
    if (r->nraw == MAX_RAW) {
        raw_await(r->raw_reqs[0]);
        memmove(r->raw_reqs, r->raw_reqs + 1, (MAX_RAW - 1) * sizeof(void *));
        r->nraw--;
    }
    r->raw_reqs[r->nraw++] = st;
}

static pscom_request_t *post_recv(run_t *r, size_t len, int any)
{
    if (r->nrecvs == FUZZ_UCP_MAX_RECV) return NULL;
    pscom_request_t *q = pscom_request_create(XH_MAX, 0);
    char *buf          = malloc(len ? len : 1);
    FUZZ_CHECK(q != NULL && buf != NULL);
    q->connection              = any ? NULL : r->s;
    q->socket                  = server;
    q->xheader_len             = XH_MAX;
    q->data                    = buf;
    q->data_len                = len;
    r->bufs[r->nrecvs]         = buf;
    r->lens[r->nrecvs]         = len;
    r->recvs[r->nrecvs++]      = q;
    pscom_post_recv(q);
    return q;
}

static void post_send(run_t *r, size_t len, size_t xlen)
{
    if (r->nsends == MAX_SENDS) return;
    pscom_request_t *q = pscom_request_create(XH_MAX, 0);
    FUZZ_CHECK(q != NULL);
    memcpy(&q->xheader, pattern, xlen);
    q->xheader_len        = xlen;
    q->connection         = r->c;
    q->data               = pattern + XH_MAX;
    q->data_len           = len;
    r->sends[r->nsends++] = q;
    pscom_post_send(q);
}

/* the tag's id and sequence number of a raw message (op bits 4-6) */
static void raw_addr(run_t *r, fuzz_in_t *in, unsigned op, uint64_t *id, uint32_t *seq)
{
    unsigned mode = (op >> 4) & 7;
    *id           = r->cli->peer_id;
    *seq          = r->cli->tx_seq;
    switch (mode) {
    case FUZZ_UCP_SEQ_AHEAD: *seq += 1; return;
    case FUZZ_UCP_SEQ_AGAIN: *seq -= 1; return;
    case FUZZ_UCP_SEQ_ANY: *seq = in_u32(in); return;
    case FUZZ_UCP_SEQ_OTHER_ID: {
        uint64_t any = in_u32(in) | (uint64_t)in_byte(in) << 32;
        /* 0: the server's id of the generation before (a closed connection) */
        *id = any ? any : (*id & UCP_ID_SLOT_MASK) |
                              ((((*id >> UCP_ID_SLOT_BITS) - 1) & UCP_ID_GEN_MASK)
                               << UCP_ID_SLOT_BITS);
        return;
    }
    default: r->cli->tx_seq++; return; /* the next one: taken */
    }
}

/* One op of the input. */
static void put_op(run_t *r, fuzz_in_t *in)
{
    uint8_t op    = in_byte(in);
    unsigned what = op & 7;
    switch (what) {
    case FUZZ_UCP_MSG:
    case FUZZ_UCP_HEAD:
    case FUZZ_UCP_DATA:
    case FUZZ_UCP_KIND3: {
        size_t len = in_u16(in);
        if (what == FUZZ_UCP_DATA && (op & FUZZ_UCP_HDR)) len |= (size_t)in_byte(in) << 16;
        if (len > FUZZ_UCP_MAX_LEN) len = FUZZ_UCP_MAX_LEN;
        size_t xlen = 0;
        uint64_t dlen = 0;
        int hdr       = (op & FUZZ_UCP_HDR) && len >= PSCOM_WIRE_HEADER_SIZE &&
                  (what == FUZZ_UCP_MSG || what == FUZZ_UCP_HEAD);
        if (hdr && what == FUZZ_UCP_MSG) {
            xlen = in_byte(in);
            if (xlen > len - PSCOM_WIRE_HEADER_SIZE) xlen = len - PSCOM_WIRE_HEADER_SIZE;
            dlen = len - PSCOM_WIRE_HEADER_SIZE - xlen;
        } else if (hdr) {
            xlen = len - PSCOM_WIRE_HEADER_SIZE;
            dlen = in_u32(in);
            if (xlen > 0xffff) hdr = 0;
        }
        uint64_t id;
        uint32_t seq;
        raw_addr(r, in, op, &id, &seq);
        in_bytes(in, raw, len);
        if (hdr) pscom_wire_header_encode(raw, (uint16_t)xlen, PSCOM_MSGTYPE_USER, dlen);
        if (trace)
            fprintf(stderr, "op %#x: kind %u, %zu bytes, id %#llx (server %#llx), seq %u (next %u)%s\n",
                    op, what, len, (unsigned long long)id, (unsigned long long)r->srv->id, seq,
                    r->cli->tx_seq, open_to_server(r) ? "" : ": not sent");
        if (open_to_server(r)) raw_send(r, id, what, seq, len);
        return;
    }
    case FUZZ_UCP_SEND: {
        size_t len  = in_u16(in);
        size_t xlen = in_byte(in) % (XH_MAX + 1);
        if (trace) fprintf(stderr, "op %#x: send %zu + %zu bytes\n", op, xlen, len);
        post_send(r, len, xlen);
        return;
    }
    case FUZZ_UCP_PROGRESS: server_progress(in_byte(in) + 1u); return;
    case FUZZ_UCP_RECV: post_recv(r, 64u * in_byte(in), 0); return;
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
    for (unsigned pass = 0; !accepted || !ucp_of(accepted)->started; pass++) {
        FUZZ_CHECK(pass < FUZZ_TCP_PASSES);
        pscom_test_any();
    }
    r->s = accepted;
    FUZZ_CHECK(r->c->type == PSCOM_CON_TYPE_UCP && r->s->type == PSCOM_CON_TYPE_UCP);
    r->cli = ucp_of(r->c);
    r->srv = ucp_of(r->s);
    FUZZ_CHECK(r->cli->ep != NULL && r->cli->peer_id == r->srv->id);
}

static void snapshot(const run_t *r)
{
    fuzz_ucp_last = (fuzz_ucp_result_t){
        .server_stopped = r->srv->closed || r->srv->rx_failed ||
                          !(r->s->state & PSCOM_CON_STATE_R),
    };
    for (unsigned i = 0; i < r->nrecvs; i++) {
        pscom_request_t *q = r->recvs[i];
        if (!pscom_req_is_done(q)) continue;
        if (pscom_req_successful(q)) {
            fuzz_ucp_last.recvs_ok++;
        } else if (q->state & PSCOM_REQ_STATE_ERROR) {
            fuzz_ucp_last.recvs_error++;
        }
    }
    /* the first receive's message, also truncated */
    if (r->nrecvs && pscom_req_is_done(r->recvs[0]) &&
        !(r->recvs[0]->state & (PSCOM_REQ_STATE_ERROR | PSCOM_REQ_STATE_CANCELED))) {
        fuzz_ucp_last.first_len  = r->recvs[0]->header.data_len;
        fuzz_ucp_last.first_xlen = r->recvs[0]->header.xheader_len;
        size_t n = r->lens[0] < sizeof(fuzz_ucp_last.first) ? r->lens[0] : sizeof(fuzz_ucp_last.first);
        memcpy(fuzz_ucp_last.first, r->bufs[0], n);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2) return 0;
    if (!server) sockets_open();
    run_t r     = {0};
    size_t blen = 64u * data[1];
    connect_pair(&r);
    int peer_fd = dup(r.cli->sock.fd); /* the handshake socket: the server's death detector */
    FUZZ_CHECK(peer_fd >= 0);

    /* the set-up */
    for (unsigned i = 0; i < (data[0] & 3u); i++) post_recv(&r, blen, i == 0 && (data[0] & 8));
    if (data[0] & 4) post_send(&r, 8, 4);
    server_progress(4);

    /* the ops */
    fuzz_in_t in = {.p = data + 2, .left = size - 2};
    for (unsigned n = 1; in.left; n++) {
        put_op(&r, &in);
        if (!(data[0] & 16) || !(n % 4)) server_progress(8);
    }
    server_progress(64);
    snapshot(&r);

    /* both sides close. A peer whose messages left the server out of step
     * never gets (nor sends) the EOF: it dies. Then everything ends. */
    pscom_close_connection(r.c);
    pscom_close_connection(r.s);
    fuzz_ucp_last.peer_died = !fuzz_tcp_settled(server, client, FUZZ_UCP_CLOSE_PASSES);
    if (fuzz_ucp_last.peer_died) {
        shutdown(peer_fd, SHUT_RDWR);
        /* Its end is seen where the fds are polled: at once with a timeout
         * (a pass without one looks at them once per clock tick). A peer
         * that said goodbye gets UCP_BYE_GRACE_US to deliver the rest. */
        uint64_t t0 = ucp_now_us();
        while (!fuzz_tcp_settled(server, client, 1)) {
            FUZZ_CHECK(ucp_now_us() - t0 < FUZZ_UCP_SETTLE_US && "closing leaves no connection");
            pscom_progress(1);
        }
    }
    close(peer_fd);
    /* an any-source receive outlives the connection: it is cancelled */
    if (r.nrecvs && !r.recvs[0]->connection) pscom_cancel_recv(r.recvs[0]);
    for (unsigned i = 0; i < r.nrecvs; i++) fuzz_tcp_await_done(r.recvs[i]);
    for (unsigned i = 0; i < r.nsends; i++) fuzz_tcp_await_done(r.sends[i]);
    for (unsigned i = 0; i < r.nraw; i++) raw_await(r.raw_reqs[i]);
    for (unsigned i = 0; i < r.nrecvs; i++) free(r.bufs[i]);
    return 0;
}
