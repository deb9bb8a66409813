/*
 * fuzz_ucp.c - the receiving side of the ucp transport against any UCX
 * messages a peer sends: tags of every kind (MSG, HEAD, DATA and the
 * unused fourth), sequence numbers in and out of order, ids of other
 * connections, any lengths and bytes, between real messages of the peer,
 * receives posted, cancelled or missing.
 *
 * The peer is real: a client socket of this process connects to a server
 * socket over ucp (the plugin is built into this program: the core's
 * table of built-in plugins below holds it; the pair, the set-up, the
 * common ops and the end of an input are fuzz_pair.c's), and the harness
 * sends the
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
 * One input is two bytes of set-up and the ops (fuzz_pair.h):
 *
 *   byte 0  bits 0-3 as fuzz_pair.h (bit 4: the server progresses after
 *           every fourth op only: messages pile up in UCX's unexpected
 *           queue); bits 5-7 unused
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
 *             SEND, PROGRESS, RECV, CANCEL: fuzz_pair.h
 *
 * What must hold (else abort(), which libFuzzer and the driver report):
 * what fuzz_pair.c checks (no memory error: a late write by UCX into a
 * receive buffer shows as a use after free; once both sides closed, or
 * the client died, every request is done and neither socket holds a
 * connection), and every send of the harness completed.
 *
 * Built twice: with libFuzzer (PSCOM_FUZZ, clang) and with fuzz_ucp_gen.c,
 * fuzz_pair_gen.c and fuzz_driver.c as the ctest test fuzz_ucp.
 */
#define _GNU_SOURCE
#include "fuzz_ucp.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_bytes.h"
#include "fuzz_driver.h" /* FUZZ_CHECK */
#include "fuzz_pair.h"
#include "fuzz_tcp.h"
#include "pscom.h"
#include "pscom_con.h"
#include "pscom_core.h"
#include "pscom_plugin_reg.h"
#include "pscom_wire.h"
#include "ucp_priv.h"

/* the built-in plugins of this program: ucp alone (lib/plugins/ucp,
 * compiled in; the core's own table in pscom-static is not linked) */
extern const pscom_plugin_desc_t pscom_plugin_desc_ucp;
const pscom_plugin_desc_t *const pscom_builtin_plugins[] = {&pscom_plugin_desc_ucp, NULL};
const pscom_module_info_t pscom_module_plugins[] = {{NULL, 0}}; /* and no modules */

#define MAX_RAW 64 /* harness sends UCX has not completed */

static char raw[FUZZ_UCP_MAX_LEN];

static void ucp_fuzz_env(void)
{
    setenv("PSP_UCP", "1", 1);
    setenv("UCX_TLS", "posix,cma,self", 0);
    setenv("UCX_RNDV_THRESH", "inf", 0);
}

static int ucp_started(pscom_connection_t *c)
{
    return ((ucp_con_t *)fuzz_pair_priv(c))->started;
}

/* ---- the input ------------------------------------------------------------------- */

/* fuzz_in_t, in_byte() ... in_u32(): fuzz_bytes.h */

/* ---- one input's state (besides the pair's) ---------------------------------------- */

static struct {
    ucp_con_t *cli, *srv;
    void *raw_reqs[MAX_RAW];
    unsigned nraw;
} u;

static int ucp_connected(fuzz_pair_t *p)
{
    u.cli  = fuzz_pair_priv(p->c);
    u.srv  = fuzz_pair_priv(p->s);
    u.nraw = 0;
    FUZZ_CHECK(u.cli->ep != NULL && u.cli->peer_id == u.srv->id);
    return ucp_peer_sock_fd(u.cli); /* the endpoint's (ucp_peer.c) */
}

/* Can the harness still send to the server? */
static int open_to_server(void)
{
    return u.cli->ep && !u.cli->closed && !u.cli->tx_failed;
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

static void raw_send(uint64_t id, unsigned kind, uint32_t seq, size_t len)
{
    const ucp_request_param_t prm = {.op_attr_mask = 0};
    ucs_status_ptr_t st = ucp_tag_send_nbx(u.cli->ep, raw, len, ucpt_make(id, kind, seq), &prm);
    /* what the client's plugin tells the poller after a send to its own
     * worker (self_peer): the message may be in the unexpected queue */
    ucp_g.must_probe = 1;
    if (!UCS_PTR_IS_PTR(st)) return;
    if (u.nraw == MAX_RAW) {
        raw_await(u.raw_reqs[0]);
        memmove(u.raw_reqs, u.raw_reqs + 1, (MAX_RAW - 1) * sizeof(void *));
        u.nraw--;
    }
    u.raw_reqs[u.nraw++] = st;
}

/* the tag's id and sequence number of a raw message (op bits 4-6) */
static void raw_addr(fuzz_in_t *in, unsigned op, uint64_t *id, uint32_t *seq)
{
    unsigned mode = (op >> 4) & 7;
    *id           = u.cli->peer_id;
    *seq          = u.cli->tx_seq;
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
    default: u.cli->tx_seq++; return; /* the next one: taken */
    }
}

/* A message op (MSG, HEAD, DATA, KIND3). */
static void ucp_put_msg(fuzz_pair_t *p, fuzz_in_t *in, unsigned op)
{
    (void)p;
    unsigned what = op & 7;
    size_t len    = in_u16(in);
    if (what == FUZZ_UCP_DATA && (op & FUZZ_UCP_HDR)) len |= (size_t)in_byte(in) << 16;
    if (len > FUZZ_UCP_MAX_LEN) len = FUZZ_UCP_MAX_LEN;
    size_t xlen   = 0;
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
    raw_addr(in, op, &id, &seq);
    in_bytes(in, raw, len);
    if (hdr) pscom_wire_header_encode(raw, (uint16_t)xlen, PSCOM_MSGTYPE_USER, dlen);
    if (fuzz_pair_trace)
        fprintf(stderr, "op %#x: kind %u, %zu bytes, id %#llx (server %#llx), seq %u (next %u)%s\n",
                op, what, len, (unsigned long long)id, (unsigned long long)u.srv->id, seq,
                u.cli->tx_seq, open_to_server() ? "" : ": not sent");
    if (open_to_server()) raw_send(id, what, seq, len);
}

static int ucp_snapshot(const fuzz_pair_t *p)
{
    return u.srv->closed || u.srv->rx_failed || !(p->s->state & PSCOM_CON_STATE_R);
}

/* every send of the harness completes */
static void ucp_drain(fuzz_pair_t *p)
{
    (void)p;
    for (unsigned i = 0; i < u.nraw; i++) raw_await(u.raw_reqs[i]);
}

const fuzz_pair_target_t fuzz_pair_target = {
    .trace_env = "FUZZ_UCP_TRACE", /* =1: each op on stderr (replaying a failing input) */
    .con_type  = PSCOM_CON_TYPE_UCP,
    .env       = ucp_fuzz_env,
    .started   = ucp_started,
    .connected = ucp_connected,
    .put       = ucp_put_msg,
    .snapshot  = ucp_snapshot,
    .drain     = ucp_drain,
};
