/*
 * ucp_handshake.c - connection set-up and tear-down: worker addresses and
 * connection ids in the handshake blobs, the UCX endpoint with peer error
 * handling, the handshake socket kept as a death detector, and close.
 *
 *   connect side  con_offer:   blob  {magic, version, addr_len, our id, check} + address
 *   accept side   con_accept:  reply {magic, version, addr_len, our id, check} + address
 *   connect side  con_connect: endpoint to the accept side; confirm {magic, version,
 *                              addr_len 0, the endpoint's generation (ucp_peer.c),
 *                              keep (u8: the handshake socket becomes the endpoint's),
 *                              3 bytes 0}
 *   accept side   con_confirm: the endpoint of that generation to the connect side
 * All fields little-endian; every length is checked before use. check is
 * a hash of the header fields before it and of the address: UCX parses a
 * worker address without checking it (ucp_ep_create() of random bytes ends
 * in an assertion, i.e. abort(), with UCX 1.13), so an address is handed
 * to UCX only as its owner's UCX packed it. This guards against a broken
 * or confused peer, not a hostile one: the handshake is no security
 * boundary (whoever can connect can send anything over tcp as well).
 *
 * Death detector: UCX's own peer failure detection is fast over tcp but
 * slow over shared memory (keepalive). The handshake's TCP socket of the
 * first connection on an endpoint stays open for the life of the endpoint
 * (ucp_peer.c): EOF without the goodbye byte means that the peer process
 * is gone, or that its side of the endpoint broke. Later connections on
 * the endpoint close theirs: one descriptor per peer, not per connection.
 */
#define _GNU_SOURCE
#include <endian.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "ucp_priv.h"

#define UCP_BLOB_MAGIC   0x31504355u /* "UCP1" */
#define UCP_BLOB_VERSION 5 /* 2: MSG at most UCP_MSG_MAX, HEAD without DATA; 3: check;
                              4: the endpoint's generation in the confirmation;
                              5: keep in the confirmation */
#define UCP_CONFIRM_LEN  16

#define UCP_BLOB_CHECK_OFF 16 /* the check: 8 bytes after magic, version, addr_len, id */
_Static_assert(UCP_BLOB_HDR == UCP_BLOB_CHECK_OFF + 8 && UCP_CONFIRM_LEN == 16, "blob layout");

static uint64_t fnv1a(uint64_t h, const unsigned char *p, size_t len)
{
    for (size_t i = 0; i < len; i++) h = (h ^ p[i]) * UINT64_C(0x100000001b3);
    return h;
}

/* 64-bit FNV-1a over the header up to the check and the address that
 * follows it (addr_len bytes). */
static uint64_t blob_check(const unsigned char *blob, size_t addr_len)
{
    uint64_t h = fnv1a(UINT64_C(0xcbf29ce484222325), blob, UCP_BLOB_CHECK_OFF);
    return fnv1a(h, blob + UCP_BLOB_HDR, addr_len);
}

/* The header of a blob whose address (addr_len bytes) is already in place
 * at p + UCP_BLOB_HDR. A confirmation (addr_len 0) is the first 8 bytes. */
static void put_hdr(unsigned char *p, uint16_t addr_len, uint64_t id)
{
    uint32_t magic = htole32(UCP_BLOB_MAGIC);
    uint16_t ver   = htole16(UCP_BLOB_VERSION);
    uint16_t alen  = htole16(addr_len);
    uint64_t lid   = htole64(id);
    memcpy(p, &magic, 4);
    memcpy(p + 4, &ver, 2);
    memcpy(p + 6, &alen, 2);
    if (!addr_len) return; /* UCP_CONFIRM_LEN */
    memcpy(p + 8, &lid, 8);
    uint64_t check = htole64(blob_check(p, addr_len));
    memcpy(p + UCP_BLOB_CHECK_OFF, &check, 8);
}

/* Validate a blob; returns the address (inside the blob) or NULL. */
static const void *get_hdr(pscom_con_t *con, const void *blob, size_t len, size_t *addr_len,
                           uint64_t *id)
{
    const unsigned char *p = blob;
    uint32_t magic;
    uint16_t ver, alen;
    uint64_t lid, check;
    if (len < UCP_BLOB_HDR) goto bad;
    memcpy(&magic, p, 4);
    memcpy(&ver, p + 4, 2);
    memcpy(&alen, p + 6, 2);
    memcpy(&lid, p + 8, 8);
    memcpy(&check, p + UCP_BLOB_CHECK_OFF, 8);
    if (le32toh(magic) != UCP_BLOB_MAGIC || le16toh(ver) != UCP_BLOB_VERSION) goto bad;
    *addr_len = le16toh(alen);
    *id       = le64toh(lid);
    if (*addr_len == 0 || *addr_len != len - UCP_BLOB_HDR || !*id || *id > UCPT_ID_MASK) goto bad;
    if (le64toh(check) != blob_check(p, *addr_len)) {
        plog_err("%s: ucp: handshake blob (%zu bytes) fails its check: worker address not used",
                 pscom_con_name(con), len);
        return NULL;
    }
    return p + UCP_BLOB_HDR;
bad:
    plog_err("%s: ucp: malformed handshake blob (%zu bytes)", pscom_con_name(con), len);
    return NULL;
}

static void con_init(ucp_con_t *uc, pscom_con_t *con)
{
    if (uc->con) return;
    uc->con = con;
    pscom_list_init(&uc->dirty_next);
    pscom_list_init(&uc->fail_next);
    pscom_list_init(&uc->prepost_next);
    pscom_list_init(&uc->wiring_next);
    pscom_list_init(&uc->stash);
}

static int own_blob(ucp_con_t *uc, void *blob, size_t *len)
{
    if (ucp_worker_ensure() < 0) return -1;
    uc->id = ucp_con_id_alloc(uc);
    if (!uc->id) {
        plog_err("%s: ucp: out of connection ids", pscom_con_name(uc->con));
        return -1;
    }
    memcpy((char *)blob + UCP_BLOB_HDR, ucp_g.addr, ucp_g.addr_len);
    put_hdr(blob, (uint16_t)ucp_g.addr_len, uc->id); /* after the address: the check covers it */
    *len = UCP_BLOB_HDR + ucp_g.addr_len; /* fits: checked when the worker was created */
    return 0;
}

/* ---- endpoint ---------------------------------------------------------------- */

/* The wire-up of a new endpoint (ucp_ep_flush_nbx completes once the
 * connection is established), before the handshake's last message: UCX
 * establishes connections only while both workers are progressed, and the
 * peer is in its progress engine until the handshake is over (it may leave
 * right after, blocking on something else: then a small send of ours could
 * not complete without it, as it does over tcp). The handshake of this
 * connection waits for it (PSCOM_PLUGIN_PENDING), nothing else does:
 * ucp_wiring_check(), from the poller, reports the end, at most
 * PSP_UCP_WIREUP_TIMEOUT ms later (default 10 s, below the core's stall
 * watchdog of 12 s: the handshake then goes on to the next transport
 * instead of starting the attempt again). A peer that stops progressing in
 * between (a stopped process, over UCX's tcp) used to block the whole
 * process for those 10 s. */

static void flush_cb(void *request, ucs_status_t status, void *user_data)
{
    ucp_req_t *r = request;
    if (!r->con_id) { /* given up on */
        ucp_req_release(r);
        return;
    }
    r->completed = 1;
    r->status    = status;
}

/* Returns 0 (wired up already), PSCOM_PLUGIN_PENDING or -1. */
static int ep_wireup(ucp_con_t *uc)
{
    if (ucp_peer_wired(uc)) return 0; /* an endpoint other connections use already */
    ucp_request_param_t p = {
        .op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK,
        .cb.send      = flush_cb,
    };
    ucs_status_ptr_t st = ucp_ep_flush_nbx(uc->ep, &p);
    if (!UCS_PTR_IS_PTR(st)) {
        if (UCS_PTR_STATUS(st) == UCS_OK) return 0;
        plog_err("%s: ucp: connecting: %s", pscom_con_name(uc->con),
                 ucs_status_string(UCS_PTR_STATUS(st)));
        return -1;
    }
    ucp_req_t *r = st;
    ucp_req_track(r, UCP_REQ_FLUSH, uc->id);
    ucp_peer_req(uc, r);
    uc->wire_req   = r;
    uc->wire_t0_us = ucp_now_us();
    pscom_list_add_tail(&uc->wiring_next, &ucp_g.wiring);
    ucp_wake();
    return PSCOM_PLUGIN_PENDING;
}

/* Stop waiting for the wire-up (flush_cb releases the request when the
 * endpoint is closed). */
static void wiring_end(ucp_con_t *uc)
{
    if (!uc->wire_req) return;
    if (uc->wire_req->completed) {
        ucp_req_release(uc->wire_req);
    } else {
        uc->wire_req->con_id = 0;
    }
    uc->wire_req = NULL;
    pscom_list_del(&uc->wiring_next);
}

void ucp_wiring_check(void)
{
    pscom_list_t *pos, *tmp;
    uint64_t now = 0;
    pscom_list_for_each_safe(pos, tmp, &ucp_g.wiring)
    {
        ucp_con_t *uc = pscom_list_entry(pos, ucp_con_t, wiring_next);
        ucp_req_t *r  = uc->wire_req;
        int failed    = 1;
        if (r->completed) {
            failed = r->status != UCS_OK;
            if (failed)
                plog_err("%s: ucp: connecting: %s", pscom_con_name(uc->con),
                         ucs_status_string(r->status));
        } else if (uc->ep_failed) {
            plog_err("%s: ucp: connecting: endpoint error", pscom_con_name(uc->con));
        } else {
            uint64_t limit_us = (uint64_t)ucp_cfg.wireup_timeout_ms * 1000;
            if (!now) now = ucp_now_us();
            if (!limit_us || now - uc->wire_t0_us < limit_us) continue;
            plog_err("%s: ucp: connecting: no answer from the peer's worker within %u ms "
                     "(PSP_UCP_WIREUP_TIMEOUT)",
                     pscom_con_name(uc->con), ucp_cfg.wireup_timeout_ms);
        }
        ucp_g.must_probe = 1; /* messages may have arrived meanwhile */
        if (!failed) ucp_peer_set_wired(uc);
        wiring_end(uc);
        pscom_con_handshake_done(uc->con, failed ? -1 : 0);
    }
}

/* ---- handshake ops --------------------------------------------------------------- */

int ucp_con_offer(pscom_con_t *con, const pscom_precon_peer_t *peer, void *blob, size_t *len)
{
    ucp_con_t *uc = pscom_con_plugin_priv(con);
    con_init(uc, con);
    return own_blob(uc, blob, len);
}

int ucp_con_accept(pscom_con_t *con, const pscom_precon_peer_t *peer, const void *blob,
                   size_t len, void *reply, size_t *reply_len)
{
    ucp_con_t *uc = pscom_con_plugin_priv(con);
    size_t alen;
    uint64_t peer_id;
    con_init(uc, con);
    const void *addr = get_hdr(con, blob, len, &alen, &peer_id);
    if (!addr) return -1;
    uc->peer_addr = malloc(alen);
    if (!uc->peer_addr) return -1;
    memcpy(uc->peer_addr, addr, alen);
    uc->peer_addr_len = alen;
    uc->peer_id       = peer_id;
    return own_blob(uc, reply, reply_len);
}

int ucp_con_connect(pscom_con_t *con, const void *reply, size_t len, void *confirm,
                    size_t *confirm_len)
{
    ucp_con_t *uc = pscom_con_plugin_priv(con);
    size_t alen;
    uint64_t peer_id;
    const void *addr = get_hdr(con, reply, len, &alen, &peer_id);
    if (!addr) return -1;
    uc->peer_id = peer_id;
    uint32_t gen;
    uc->connect_side = 1;
    if (ucp_peer_connect(uc, addr, alen, &gen) < 0) return -1;
    uc->keep_sock = ucp_peer_keep_wanted(uc);
    put_hdr(confirm, 0, 0); /* magic and version */
    gen = htole32(gen);
    memcpy((char *)confirm + 8, &gen, 4); /* the endpoint's generation (ucp_peer.c) */
    memset((char *)confirm + 12, 0, 4);
    ((unsigned char *)confirm)[12] = uc->keep_sock;
    *confirm_len = UCP_CONFIRM_LEN;
    return ep_wireup(uc);
}

int ucp_con_confirm(pscom_con_t *con, const void *confirm, size_t len)
{
    ucp_con_t *uc = pscom_con_plugin_priv(con);
    uint32_t magic, gen;
    uint16_t ver;
    if (len != UCP_CONFIRM_LEN) goto bad;
    memcpy(&magic, confirm, 4);
    memcpy(&ver, (const char *)confirm + 4, 2);
    memcpy(&gen, (const char *)confirm + 8, 4);
    unsigned char keep = ((const unsigned char *)confirm)[12];
    if (le32toh(magic) != UCP_BLOB_MAGIC || le16toh(ver) != UCP_BLOB_VERSION || !gen || keep > 1)
        goto bad;
    uc->keep_sock = keep;
    if (!uc->peer_addr) return -1;
    int rc = ucp_peer_accept(uc, uc->peer_addr, uc->peer_addr_len, le32toh(gen));
    if (rc == UCP_PEER_REFUSED) rc = PSCOM_PLUGIN_RETRY; /* the peer offers ucp again */
    if (rc == 0) rc = ep_wireup(uc); /* 0, PSCOM_PLUGIN_PENDING or -1 */
    free(uc->peer_addr);
    uc->peer_addr = NULL;
    return rc;
bad:
    plog_err("%s: ucp: malformed handshake confirmation (%zu bytes)", pscom_con_name(con), len);
    return -1;
}

void ucp_con_peer_closed(ucp_con_t *uc)
{
    if (!uc->bye_eof) {
        uc->bye_eof   = 1;
        uc->bye_t0_us = ucp_now_us();
    }
    ucp_failed(uc); /* reported once the stream ended, or its time is over */
}

/* Only the peer's goodbye: has the stream had the time to end? */
static int bye_grace_over(ucp_con_t *uc)
{
    if (++uc->bye_checks < UCP_BYE_GRACE_CHECKS) return 0;
    return ucp_now_us() - uc->bye_t0_us >= UCP_BYE_GRACE_US;
}

int ucp_con_start(pscom_con_t *con, int *fd)
{
    ucp_con_t *uc = pscom_con_plugin_priv(con);
    if (!uc->ep) return -1;
    if (uc->keep_sock) {
        /* the endpoint's death detector from now on; both ends keep it.
         * Otherwise the core closes it (the peer closes its end, too) */
        if (*fd < 0 || ucp_peer_keep(uc, *fd) < 0) return -1;
        *fd = -1;
    }
    pscom_con_set_rendezvous_size(con, ucp_cfg.rendezvous >= PSCOM_ENV_UINT_INF
                                           ? SIZE_MAX
                                           : (size_t)ucp_cfg.rendezvous);
    uc->started = 1;
    ucp_dirty(uc); /* messages that arrived before we started; the first pre-post */
    if (uc->ep_failed || uc->sock_dead) ucp_failed(uc);
    ucp_wake();
    return 0;
}

/* Everything of the connection except the socket. */
static void con_teardown(ucp_con_t *uc, int force)
{
    /* The endpoint is shared with the other connections to the same peer
     * worker (ucp_peer.c) and stays for them. After an error (force) with
     * a send or a matched DATA receive of ours still in flight (the
     * receive is cancelled first where UCX has not matched it yet), the
     * endpoint is closed with UCP_EP_CLOSE_FLAG_FORCE, which cancels its
     * operations: a dead or broken peer may never end them, and the core
     * takes their buffers back when we return; the other connections on
     * it fail too (their peer is dead or broken). UCX 1.13 allows FORCE on
     * endpoints of error handling mode PEER only; on others it works but
     * keeps resources (over shared memory, mappings of the peer's
     * segments: 30 KB of memory and 760 KB of address space, found by
     * fuzz_ucp), so it is kept for that case. */
    wiring_end(uc);
    ucp_rx_close(uc);
    int busy = uc->tx_pending ||
               (uc->rx_req && uc->rx_req->type == UCP_REQ_DATA && !uc->rx_req->completed);
    /* Not graceful (force), after the start: where the endpoint failed
     * (UCX's error, a failed send), it breaks: its sockets close without
     * the goodbye byte and both sides fail their connections on it
     * (ucp_peer.c). Else (a protocol error in what the peer sent, say) the
     * peer, perhaps waiting for our EOF, gets a BYE that says so and fails
     * this connection only. A failed handshake retires the endpoint. */
    int broken = force && uc->started && (uc->ep_failed || uc->tx_failed);
    if (force && uc->started && !broken && !busy && uc->ep && !uc->sock_dead && !uc->bye_eof &&
        !uc->peer_abort)
        ucp_send_bye(uc, 1);
    ucp_peer_detach(uc, force && busy, force && (!uc->started || broken));
    ucp_rx_close_end(uc);
    ucp_g.must_probe = 1; /* the worker may have been progressed meanwhile */
    uc->closed = 1;
    ucp_con_id_free(uc->id); /* from now on, arrivals and completions are dropped */
    uc->id = 0;
    pscom_list_del(&uc->dirty_next);
    pscom_list_del(&uc->fail_next);
    pscom_list_del(&uc->prepost_next);
    free(uc->peer_addr);
    uc->peer_addr = NULL;
}

void ucp_con_abort(pscom_con_t *con)
{
    ucp_con_t *uc = pscom_con_plugin_priv(con);
    if (!uc->con) return;
    con_teardown(uc, 1);
}

void ucp_con_close(pscom_con_t *con)
{
    ucp_con_t *uc = pscom_con_plugin_priv(con);
    if (uc->closed) return;
    /* graceful: after the EOF exchange, and nothing of ours failed. Else
     * (a protocol error in what the peer sent, for one) the endpoint
     * breaks: the peer, perhaps still waiting for our EOF, sees its side
     * fail (ucp_peer.c) */
    int graceful = pscom_con_closing_gracefully(con) && !uc->error_reported && !uc->ep_failed &&
                   !uc->sock_dead && !uc->peer_abort && !uc->tx_failed && !uc->rx_failed;
    plog_dbg("%s: ucp: close (%s)", pscom_con_name(con), graceful ? "graceful" : "after an error");
    if (graceful && uc->ep) ucp_send_bye(uc, 0);
    con_teardown(uc, !graceful);
}

/*
 * A failure (other than of reading itself) is reported after what the
 * peer sent before it: returns 1 while some of that is still to be
 * delivered (the poller's next pass does; then we are asked again).
 * Some of it may still be in UCX's transports, which progress hands over
 * a few at a time (a shared-memory FIFO up to UCX_POSIX_FIFO_MAX_POLL,
 * 16, messages per call): the death detector can fire in the pass that
 * took the first of them. Until 2026-11-29 only what the plugin or UCX's
 * unexpected queue held was waited for (itest_ucp death_drain over shared
 * memory: 3-45 of 48 messages of a killed peer lost), and nothing at all
 * after a failed send (tx_failed: itest_ucp_garbage
 * ucp_garbage_send_error, 47 of 48 lost; the README's *Errors* said
 * otherwise). A receive in flight that does not end here (a dead peer
 * died in the middle of the message) is not waited for; nor, after
 * UCP_FAIL_DRAIN_US and as many checks, is a peer that goes on sending
 * (it may be alive: our send failed).
 */
static int rx_before_failure(ucp_con_t *uc)
{
    if (!uc->fail_checks++) {
        uc->fail_t0_us = ucp_now_us();
    } else if (uc->fail_checks > UCP_FAIL_DRAIN_CHECKS &&
               ucp_now_us() - uc->fail_t0_us >= UCP_FAIL_DRAIN_US) {
        return 0;
    }
    unsigned rounds = 0;
    while (rounds < UCP_FAIL_DRAIN_ROUNDS && ucp_worker_progress(ucp_g.worker)) rounds++;
    if (rounds) ucp_g.must_probe = 1; /* messages for others, too */
    ucp_req_t *r = uc->rx_req;
    if (r && !r->completed) {
        if (r->type != UCP_REQ_PREPOST) return 0; /* stuck */
        r = NULL; /* a pre-posted receive that got nothing yet */
    }
    ucp_tag_recv_info_t info;
    if (r || !pscom_list_empty(&uc->stash) ||
        ucp_tag_probe_nb(ucp_g.worker, uc->id, UCPT_ID_MASK, 0, &info)) {
        ucp_dirty(uc);
        return 1;
    }
    return 0;
}

int ucp_con_check_failed(ucp_con_t *uc)
{
    if (uc->closed || uc->error_reported) return 1;
    if (!uc->started) return 0; /* reported once started */
    if (uc->bye_eof && !uc->ep_failed && !uc->sock_dead && !uc->peer_abort && !uc->tx_failed &&
        !uc->rx_failed) {
        /* the peer closed gracefully, and our side has not seen the end
         * of its messages (else the close would have come): wait for the
         * rest, but not forever (a peer that sent a HEAD without its
         * DATA, say) */
        if (!bye_grace_over(uc)) return 0;
        plog_err("%s: ucp: protocol error: the peer closed without the end of its messages",
                 pscom_con_name(uc->con));
    } else if (!uc->rx_failed && rx_before_failure(uc)) {
        /* first take what the peer sent before the failure. Not after a
         * failed receive: messages are delivered strictly in order, and
         * all before the failed one have been; what follows it cannot be */
        return 0;
    }
    plog_dbg("%s: ucp: connection failed (%s%s%s%s%s%s)", pscom_con_name(uc->con),
             uc->ep_failed ? "endpoint error " : "", uc->sock_dead ? "peer gone " : "",
             uc->bye_eof ? "peer closed " : "", uc->peer_abort ? "peer's error " : "",
             uc->tx_failed ? "send failed " : "", uc->rx_failed ? "receive failed" : "");
    uc->error_reported = 1;
    pscom_con_transport_error(uc->con, PSCOM_OP_READ, ECONNRESET);
    return 1;
}
