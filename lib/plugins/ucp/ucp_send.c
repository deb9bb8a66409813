/*
 * ucp_send.c - the send side.
 *
 * Messages are taken whole from the core (pscom_write_peek) and retired in
 * order with pscom_write_done() once UCX is done with their buffers. Like
 * a socket that accepts data until it is full, messages are handed over
 * as long as UCX completes them at once; while one is in flight (a
 * rendezvous, or UCX out of resources) the rest stays queued in the core,
 * where it can still be cancelled.
 *
 *   no data             one MSG send of the header + xheader, in place
 *                       (a HEAD without DATA if longer than UCP_MSG_MAX);
 *   head + data <= PSP_UCP_SMALL_MSG_LEN
 *                       packed into one buffer, one MSG send that must
 *                       complete at once (UCP_OP_ATTR_FLAG_FORCE_IMM_CMPL);
 *                       if UCX cannot, the packed copy goes to the heap;
 *   larger              a HEAD send of header + xheader and a DATA send of
 *                       the payload, both in place: UCX picks its own
 *                       (zero-copy, rendezvous) protocol for the payload.
 */
#include <stdlib.h>
#include <string.h>

#include "ucp_priv.h"

static char pack_buf[UCP_SMALL_MAX]; /* one packed message at a time (pscom lock) */

void ucp_send_cb(void *request, ucs_status_t status, void *user_data)
{
    ucp_req_t *r  = request;
    ucp_con_t *uc = ucp_con_lookup(r->con_id);
    if (uc && !uc->closed) {
        uc->tx_pending--;
        if (status != UCS_OK && !uc->tx_failed) {
            plog_dbg("%s: ucp: send failed: %s", pscom_con_name(uc->con),
                     ucs_status_string(status));
            uc->tx_failed = 1;
            ucp_failed(uc);
        }
        ucp_dirty(uc);
    }
    ucp_req_release(r);
}

static const ucp_request_param_t send_prm = {
    .op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK,
    .cb.send      = ucp_send_cb,
};
static const ucp_request_param_t send_imm_prm = { /* must complete at once */
    .op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FLAG_FORCE_IMM_CMPL,
    .cb.send      = ucp_send_cb,
};

/* One UCX send of the message in flight. heap: a malloc'ed copy of buf the
 * request owns, or NULL. Returns UCS_OK (done or in flight) or an error. */
static inline ucs_status_t send_one(ucp_con_t *uc, const void *buf, size_t len, unsigned kind,
                                    const ucp_request_param_t *prm, char *heap)
{
    UCP_CRIT_END();
    ucs_status_ptr_t st =
        ucp_tag_send_nbx(uc->ep, buf, len, ucpt_make(uc->peer_id, kind, uc->tx_seq), prm);
    /* over "self" the message is already in our own unexpected queue */
    if (uc->self_peer) ucp_g.must_probe = 1;
    if (UCS_PTR_IS_PTR(st)) {
        ucp_req_t *r = st;
        ucp_req_track(r, UCP_REQ_SEND, uc->id);
        ucp_peer_req(uc, r);
        r->buf = heap;
        uc->tx_pending++;
        uc->tx_seq++;
        ucp_wake();
        return UCS_OK;
    }
    if (heap) free(heap); /* sent at once or failed: UCX holds no reference */
    if (UCS_PTR_STATUS(st) == UCS_OK) uc->tx_seq++;
    return UCS_PTR_STATUS(st);
}

/* A small message packed into one MSG that UCX must send at once:
 * UCS_OK, UCS_ERR_NO_RESOURCE (nothing sent) or an error. */
static inline ucs_status_t send_packed(ucp_con_t *uc, const void *head, size_t hlen,
                                       const void *data, size_t dlen)
{
    pscom_memcpy_small(pack_buf, head, hlen);
    pscom_memcpy_small(pack_buf + hlen, data, dlen);
    return send_one(uc, pack_buf, hlen + dlen, UCPT_MSG, &send_imm_prm, NULL);
}

/* Hand the next queued message to UCX. Returns UCS_OK (done, or in
 * flight: tx_pending) or an error. */
static ucs_status_t post(ucp_con_t *uc, const struct iovec *head, const struct iovec *data)
{
    size_t total = head->iov_len + data->iov_len;
    ucs_status_t st;

    if (!data->iov_len)
        return send_one(uc, head->iov_base, head->iov_len,
                        head->iov_len <= UCP_MSG_MAX ? UCPT_MSG : UCPT_HEAD, &send_prm, NULL);

    if (total <= ucp_cfg.small_msg_len) {
        st = send_packed(uc, head->iov_base, head->iov_len, data->iov_base, data->iov_len);
        if (st != UCS_ERR_NO_RESOURCE) return st;
        char *heap = malloc(total);
        if (!heap) return UCS_ERR_NO_MEMORY;
        memcpy(heap, pack_buf, total);
        return send_one(uc, heap, total, UCPT_MSG, &send_prm, heap);
    }

    st = send_one(uc, head->iov_base, head->iov_len, UCPT_HEAD, &send_prm, NULL);
    if (st != UCS_OK) return st;
    return send_one(uc, data->iov_base, data->iov_len, UCPT_DATA, &send_prm, NULL);
}

/* A send failed at once: the connection stops sending; the poller
 * reports it (the message stays queued and fails with the connection). */
static void tx_fail(ucp_con_t *uc, ucs_status_t st)
{
    plog_dbg("%s: ucp: send: %s", pscom_con_name(uc->con), ucs_status_string(st));
    uc->tx_failed = 1;
    ucp_failed(uc);
}

/* Nothing in flight or being handed over: the next message may go at once. */
static inline int tx_idle(const ucp_con_t *uc)
{
    return !uc->tx_busy && !uc->tx_inflight && !uc->tx_failed && uc->ep;
}

static int write_done(ucp_con_t *uc, size_t len)
{
    return pscom_write_done(uc->con, len) || uc->closed;
}

/* Nothing in flight: hand the oldest queued message to UCX; a message that
 * UCX completes at once is retired at once. Returns 0
 * to go on, 1 to stop (nothing queued, in flight, failed), -1 if the
 * connection closed meanwhile. */
static inline __attribute__((always_inline)) int send_next(ucp_con_t *uc)
{
    struct iovec head, data;
    if (!pscom_write_peek(uc->con, 0, &head, &data)) return 1;
    uc->tx_pending  = 0;
    ucs_status_t st = post(uc, &head, &data);
    size_t n        = head.iov_len + data.iov_len;
    /* in flight: ucp_send_cb, then retired by ucp_tx_progress */
    if (uc->tx_pending) uc->tx_inflight = n;
    if (st != UCS_OK) {
        tx_fail(uc, st);
        return 1;
    }
    if (uc->tx_inflight) return 1;
    return write_done(uc, n) ? -1 : 0;
}

void ucp_tx_progress(ucp_con_t *uc)
{
    if (uc->tx_busy) { /* called back from inside pscom_write_done() */
        uc->tx_again = 1;
        return;
    }
    uc->tx_busy = 1;
    do {
        uc->tx_again = 0;
        /* retire the message in flight once UCX is done with it; one
         * whose send failed stays queued for the connection's failure to
         * end with ERROR (until 2026-11-29 it was retired as sent: a
         * rendezvous to a peer that died completed successfully) */
        if (uc->tx_inflight && !uc->tx_pending && !uc->tx_failed) {
            size_t n        = uc->tx_inflight;
            uc->tx_inflight = 0;
            if (write_done(uc, n)) goto out; /* closed */
        }
        /* Like a socket that is full: nothing new while UCX still holds a
         * message (queued messages stay cancellable). */
        while (!uc->tx_inflight && !uc->tx_failed && uc->ep) {
            int r = send_next(uc);
            if (r < 0) goto out; /* closed */
            if (r > 0) break;
        }
    } while (uc->tx_again && !uc->closed);
out:
    uc->tx_busy = 0;
}

void ucp_write_start(pscom_con_t *con)
{
    ucp_con_t *uc = pscom_con_plugin_priv(con);
    if (uc->closed) return;
    /* The usual case first, with as little as possible before the send:
     * nothing in flight, the message goes to UCX at once; what is queued
     * behind it goes the general way. */
    if (tx_idle(uc)) {
        uc->tx_busy = 1;
        int r       = send_next(uc);
        uc->tx_busy = 0;
        if (r) return; /* nothing queued, in flight, failed, or closed */
    }
    ucp_tx_progress(uc);
}

/* The core's send queue is empty: a small message with data goes to UCX
 * right away if nothing of ours is in flight before it. Anything else, and
 * a full UCX (NO_RESOURCE), takes the queue and ucp_write_start(). */
int ucp_write_now(pscom_con_t *con, void *priv, const void *head, size_t hlen, const void *data,
                  size_t dlen)
{
    ucp_con_t *uc = priv;
    if (uc->closed || !tx_idle(uc) || !dlen || hlen + dlen > ucp_cfg.small_msg_len) return 0;
    ucs_status_t st = send_packed(uc, head, hlen, data, dlen);
    if (st == UCS_OK) return 1;
    if (st != UCS_ERR_NO_RESOURCE) tx_fail(uc, st);
    return 0;
}

/* The BYE of a closing connection, after all its messages. Graceful
 * (empty): the peer's side may be waiting for a DATA that a broken sender
 * never sent, and stops waiting. After an error (one byte): the peer,
 * perhaps waiting for our EOF, fails its side of the connection
 * (ucp_recv.c rx_bye). At once if UCX can; else (a full FIFO or socket, an
 * endpoint still wiring up) as an operation in flight that belongs to no
 * connection (its completion is only released): the endpoint may stay open
 * long after this close, for other connections, and nothing else would
 * tell the peer. The endpoint's close flushes it (FLUSH) or cancels it
 * (FORCE); at exit, ucp_worker_fini() bounds the wait for it. Until
 * 2026-11-29 such a BYE was dropped (itest_ucp_garbage
 * ucp_garbage_from_server_busy). */
void ucp_send_bye(ucp_con_t *uc, int error)
{
    static const char one = 1;
    ucp_tag_t tag       = ucpt_make(uc->peer_id, UCPT_BYE, uc->tx_seq);
    size_t len          = error ? 1 : 0;
    ucs_status_ptr_t st = ucp_tag_send_nbx(uc->ep, &one, len, tag, &send_imm_prm);
    if (UCS_PTR_STATUS(st) == UCS_ERR_NO_RESOURCE) {
        st = ucp_tag_send_nbx(uc->ep, &one, len, tag, &send_prm);
        if (UCS_PTR_IS_PTR(st)) {
            ucp_req_track(st, UCP_REQ_SEND, 0);
            ucp_peer_req(uc, st);
            ucp_wake();
            return;
        }
    }
    if (UCS_PTR_STATUS(st) != UCS_OK)
        plog_dbg("%s: ucp: BYE not sent: %s", pscom_con_name(uc->con),
                 ucs_status_string(UCS_PTR_STATUS(st)));
}
