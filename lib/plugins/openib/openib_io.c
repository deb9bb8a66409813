/*
 * openib_io.c - the data path: queued messages go into send slots as
 * packets (a small message whole, a larger one in slices of the byte
 * stream), each one IBV_WR_SEND into a receive slot of the peer; received
 * packets go to the core and their slots are posted again at once.
 *
 * Credits: a packet may go only while the peer has a free receive slot for
 * it (credits). The receiver returns slots in the header of its next
 * packet, or alone in a TOKENS packet once PSP_OPENIB_PENDING_TOKENS are
 * owed. The last credit is kept for a TOKENS packet: otherwise both sides
 * could run out of credits while each owes the other, and wait forever.
 * A TOKENS packet goes when PENDING_TOKENS slots freed by data packets
 * are owed, or when all but one of our slots are owed (the peer may be
 * blocked at its reserve), never for slots of TOKENS packets alone: so
 * TOKENS packets cannot call for each other without end (with at least
 * three receive slots), and a side blocked for credits always gets them
 * back (README.md, *Credits*).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <string.h>
#include <sys/uio.h>

#include "openib_priv.h"

/* The connection failed on our side (a work completion error, a protocol
 * error in what the peer sent): every request of it ends with an error. */
static void con_fail(openib_con_t *oc, pscom_op_t op, int err)
{
    if (oc->failed || oc->closed) return;
    oc->failed = 1;
    pscom_con_transport_error(oc->con, op, err);
}

static void protocol_error(openib_con_t *oc, const char *what)
{
    plog_err("%s: openib: protocol error: %s", pscom_con_name(oc->con), what);
    con_fail(oc, PSCOM_OP_READ, EPROTO);
}

/* Post the next send slot, its first len bytes as they are (header
 * included), and count it busy and a credit taken: 0, or the error of
 * ibv_post_send() (nothing counted). */
int openib_slot_post(openib_con_t *oc, size_t len)
{
    unsigned slot      = oc->send_head;
    char *buf          = openib_send_slot(oc, slot);
    struct ibv_sge sge = {
        .addr   = (uint64_t)(uintptr_t)buf,
        .length = (uint32_t)len,
        .lkey   = oc->mr->lkey,
    };
    struct ibv_send_wr wr = {
        .wr_id      = openib_wr_id(oc, OPENIB_WR_SEND | slot),
        .sg_list    = &sge,
        .num_sge    = 1,
        .opcode     = IBV_WR_SEND,
        .send_flags = IBV_SEND_SIGNALED,
    }, *bad;
    int err = ibv_post_send(oc->qp, &wr, &bad);
    if (err) return err;
    oc->wr_out++;
    oc->send_head = slot + 1 == oc->nsend ? 0 : slot + 1;
    oc->send_busy++;
    oc->credits--;
    return 0;
}

/* Post the next send slot, holding len payload bytes: the owed tokens go
 * with it. 0, or the error of ibv_post_send() (nothing sent). */
static int pkt_send(openib_con_t *oc, unsigned flags, size_t len)
{
    openib_pkt_hdr_t *hdr = (openib_pkt_hdr_t *)openib_send_slot(oc, oc->send_head);
    hdr->magic            = OPENIB_PKT_MAGIC;
    hdr->flags            = (uint16_t)flags;
    hdr->tokens           = oc->owed;
    int err               = openib_slot_post(oc, sizeof(*hdr) + len);
    if (err) return err;
    oc->owed      = 0;
    oc->owed_data = 0;
    return 0;
}

/* pkt_send(), and the connection fails if it cannot: 0, or -1. */
static int pkt_post(openib_con_t *oc, unsigned flags, size_t len)
{
    int err = pkt_send(oc, flags, len);
    if (err) {
        plog_err("%s: openib: ibv_post_send: %s", pscom_con_name(oc->con), strerror(err));
        con_fail(oc, PSCOM_OP_WRITE, err);
        return -1;
    }
    return 0;
}

/* Copy up to room bytes of head+data from offset off. Returns the count. */
static size_t copy_slice(char *dst, size_t room, const struct iovec *head,
                         const struct iovec *data, size_t off)
{
    size_t done = 0;
    const struct iovec *parts[2] = {head, data};
    for (int i = 0; i < 2 && done < room; i++) {
        size_t plen = parts[i]->iov_len;
        if (off >= plen) {
            off -= plen;
            continue;
        }
        size_t n = plen - off;
        if (n > room - done) n = room - done;
        memcpy(dst + done, (const char *)parts[i]->iov_base + off, n);
        done += n;
        off = 0;
    }
    return done;
}

/* Send what is queued until the queue is empty or slots or credits run
 * out (then the poller goes on when completions or tokens come). A
 * message counts as sent once it is copied into the slots: the
 * application's buffer is free. Called from the core (may_harvest), a
 * write that is short of slots or credits first takes what the
 * completion queue holds: the peer's credits may be there already, and
 * the application may not call pscom again before the peer needs this
 * message. Returns 1 if anything went. */
static int openib_write(openib_con_t *oc, int may_harvest)
{
    pscom_con_t *con = oc->con;
    int progress     = 0;
    if (oc->in_write || oc->closed || oc->failed) return 0;
    oc->in_write = 1;
    for (;;) {
        struct iovec head, data;
        if (!pscom_write_pending(con)) break;
        /* the last credit stays for a TOKENS packet */
        if (oc->send_busy >= oc->nsend || oc->credits < 2) {
            if (!may_harvest) break;
            may_harvest = 0;
            openib_cq_take();
            continue;
        }
        if (!pscom_write_peek(con, 0, &head, &data)) break;
        size_t total   = head.iov_len + data.iov_len;
        char *payload  = openib_send_slot(oc, oc->send_head) + sizeof(openib_pkt_hdr_t);
        unsigned flags = oc->cur_off == 0 && total <= OPENIB_PAYLOAD_MAX ? OPENIB_PKT_WHOLE : 0;
        size_t n       = copy_slice(payload, OPENIB_PAYLOAD_MAX, &head, &data, oc->cur_off);
        if (pkt_post(oc, flags, n) < 0) break;
        progress = 1;
        oc->cur_off += n;
        if (oc->cur_off < total) continue;
        oc->cur_off = 0;
        if (pscom_write_done(con, total)) return 1; /* closed: not ours any more */
        if (oc->closed) return 1;
    }
    oc->in_write = 0;
    return progress;
}

void openib_write_start(pscom_con_t *con)
{
    openib_con_t *oc = openib_con(con);
    if (!oc->started || oc->delivering) return; /* delivering: openib_con_progress writes */
    openib_wake(); /* a send from another thread while a wait sleeps */
    openib_write(oc, 1);
}

/* The core's send queue is empty: a message that fits one packet goes
 * whole into the next send slot right away, if a slot and a credit (not
 * the last) are free. Anything else, and a failed post, takes the queue
 * and openib_write_start() (which reports the failure). */
int openib_write_now(pscom_con_t *con, void *priv, const void *head, size_t hlen,
                     const void *data, size_t dlen)
{
    openib_con_t *oc = priv;
    if (!oc->started || oc->closed || oc->failed || oc->in_write || oc->delivering ||
        hlen + dlen > OPENIB_PAYLOAD_MAX || oc->send_busy >= oc->nsend || oc->credits < 2)
        return 0;
    char *payload = openib_send_slot(oc, oc->send_head) + sizeof(openib_pkt_hdr_t);
    memcpy(payload, head, hlen);
    if (dlen) memcpy(payload + hlen, data, dlen);
    return pkt_send(oc, OPENIB_PKT_WHOLE, hlen + dlen) == 0;
}

/* Credits alone, when enough slots freed by data are owed and no data
 * packet took them, or when the peer may be down to its last credit
 * (all but one of our slots owed). Slots that TOKENS packets took do not
 * count towards the first: else each TOKENS packet would call for the
 * next. */
static void send_tokens(openib_con_t *oc)
{
    if (oc->closed || oc->failed) return;
    if (oc->owed_data < openib_cfg.pending_tokens && oc->owed + 1 < oc->nrecv) return;
    if (oc->send_busy >= oc->nsend || oc->credits < 1) return;
    pkt_post(oc, OPENIB_PKT_TOKENS, 0);
}

/* A received packet's completion and header: NULL if sound, else what is
 * wrong with it. */
static const char *pkt_check(openib_con_t *oc, const struct ibv_wc *wc, openib_pkt_hdr_t *hdr)
{
    uint32_t slot = openib_wr_slot_bits(wc->wr_id);
    if (slot >= oc->nrecv) return "completion of an unknown receive";
    if (wc->byte_len < sizeof(*hdr) || wc->byte_len > OPENIB_SLOT_SIZE)
        return "packet of a bad length";
    memcpy(hdr, openib_recv_slot(oc, slot), sizeof(*hdr));
    size_t len = wc->byte_len - sizeof(*hdr);
    if (hdr->magic != OPENIB_PKT_MAGIC ||
        (hdr->flags & ~(OPENIB_PKT_WHOLE | OPENIB_PKT_TOKENS)) ||
        ((hdr->flags & OPENIB_PKT_TOKENS) && len))
        return "malformed packet header";
    return NULL;
}

/* The credits a packet returns. NULL, or what is wrong. */
static const char *credits_take(openib_con_t *oc, const openib_pkt_hdr_t *hdr)
{
    if (hdr->tokens > oc->peer_recvq - oc->credits) return "more credits returned than lent";
    oc->credits += hdr->tokens;
    return NULL;
}

/* One received packet (its credits taken already if credited). Returns 1
 * if the connection stopped. */
static int handle_recv(openib_con_t *oc, const struct ibv_wc *wc, int credited)
{
    openib_pkt_hdr_t hdr;
    const char *bad = pkt_check(oc, wc, &hdr);
    if (!bad && !credited) bad = credits_take(oc, &hdr);
    if (bad) {
        protocol_error(oc, bad);
        return 1;
    }
    unsigned slot = openib_wr_slot_bits(wc->wr_id);
    size_t len    = wc->byte_len - sizeof(hdr);
    /* After the peer's EOF message (or a protocol error the core found)
     * the core reads nothing more; packets still come with the credits
     * that our own EOF message may need. */
    if (len && !oc->read_stopped) {
        const char *payload = openib_recv_slot(oc, slot) + sizeof(hdr);
        /* what the core writes meanwhile (an answer: a rendezvous FIN or
         * CTS, a reply from a callback) waits until this slot is posted
         * again, so that its packet returns the slot's credit: the peer
         * may wait for nothing else (openib_write_start) */
        oc->delivering = 1;
        int stop       = (hdr.flags & OPENIB_PKT_WHOLE) ? pscom_read_msg(oc->con, payload, len)
                                                        : pscom_read_feed(oc->con, payload, len);
        oc->delivering = 0;
        if (oc->closed) return 1;
        if (stop) oc->read_stopped = 1;
    }
    int err = openib_post_recv(oc, slot);
    if (err) {
        plog_err("%s: openib: ibv_post_recv: %s", pscom_con_name(oc->con), strerror(err));
        con_fail(oc, PSCOM_OP_READ, err);
        return 1;
    }
    oc->owed++;
    if (len) oc->owed_data++;
    return 0;
}

/* A failed work completion: the peer is gone (retries exceeded), or the
 * queue pair went to the error state and flushes the rest. A write error
 * only while the application has a message queued; otherwise the failed
 * packet was our own (returned credits) and the peer is simply gone. */
static void handle_error(openib_con_t *oc, const struct ibv_wc *wc)
{
    if (oc->failed) return; /* the rest of a flush */
    int is_send = (openib_wr_slot_bits(wc->wr_id) & OPENIB_WR_SEND) != 0;
    plog_dbg("%s: openib: %s failed: %s", pscom_con_name(oc->con), is_send ? "send" : "receive",
             ibv_wc_status_str(wc->status));
    int writing = is_send && pscom_write_pending(oc->con);
    con_fail(oc, writing ? PSCOM_OP_WRITE : PSCOM_OP_READ, ECONNRESET);
}

/* One completion. Returns 1 if the connection stopped. */
static int handle_wc(openib_con_t *oc, const struct ibv_wc *wc, int credited)
{
    if (wc->status != IBV_WC_SUCCESS) {
        handle_error(oc, wc);
        return 1;
    }
    return handle_recv(oc, wc, credited); /* successful sends are not stashed */
}

/* A completion that openib_cq_take() took for oc. A successful send frees
 * its slot at once; anything else waits in the stash, in order, for the
 * next progress pass, a received packet with its credits taken already
 * (the write path that took it may need them now). */
void openib_con_stash(openib_con_t *oc, const struct ibv_wc *wc)
{
    uint32_t bits = openib_wr_slot_bits(wc->wr_id);
    if (bits == OPENIB_WR_READ) { /* openib_rndv_read() waits for it */
        oc->read_busy   = 0;
        oc->read_status = wc->status;
        if (wc->status == IBV_WC_SUCCESS) return;
    } else if (wc->status == IBV_WC_SUCCESS && (bits & OPENIB_WR_SEND)) {
        oc->send_busy--;
        return;
    }
    if (oc->stash_count == oc->stash_cap) { /* cannot happen: one per posted receive */
        oc->overflow = 1;
        return;
    }
    openib_stash_t *e = &oc->stash[(oc->stash_head + oc->stash_count++) % oc->stash_cap];
    openib_pkt_hdr_t hdr;
    e->wc       = *wc;
    e->credited = wc->status == IBV_WC_SUCCESS && !pkt_check(oc, wc, &hdr) &&
                  !credits_take(oc, &hdr);
}

/* Hand what the stash holds to the core, in order, then send what waits
 * and the credits owed. Returns 1 if anything was done, and then the
 * connection may have been closed meanwhile. */
int openib_con_progress(openib_con_t *oc)
{
    int progress = 0;
    if (oc->closed || oc->failed) return 0;
    if (oc->overflow || openib_dev.cq_broken) {
        plog_err("%s: openib: %s", pscom_con_name(oc->con),
                 oc->overflow ? "more completions than work requests" : "completion queue failed");
        con_fail(oc, PSCOM_OP_READ, EIO);
        return 1;
    }
    while (oc->stash_count) {
        openib_stash_t e = oc->stash[oc->stash_head];
        oc->stash_head   = (oc->stash_head + 1) % oc->stash_cap;
        oc->stash_count--;
        progress = 1;
        if (handle_wc(oc, &e.wc, e.credited)) return 1;
    }
    if (pscom_write_pending(oc->con) && openib_write(oc, 0)) progress = 1;
    if (!oc->closed) send_tokens(oc);
    return progress;
}

/* The poller of all connections: take what the completion queue holds,
 * then work through the connections it concerned. One that did something
 * ends the pass (a waiter may be done; it may have closed others); the
 * rest stay ready for the next pass, in order. */
int openib_poll(pscom_poller_t *poller)
{
    openib_cq_take();
    if (openib_dev.cq_broken) { /* every connection fails, once */
        pscom_list_t *pos, *tmp;
        int progress = 0;
        pscom_list_for_each_safe(pos, tmp, &openib_dev.cons) {
            openib_con_t *oc = pscom_list_entry(pos, openib_con_t, next);
            progress |= openib_con_progress(oc);
        }
        return progress;
    }
    while (!pscom_list_empty(&openib_dev.ready)) {
        openib_con_t *oc = pscom_list_entry(openib_dev.ready.next, openib_con_t, ready_next);
        pscom_list_del(&oc->ready_next);
        if (openib_con_progress(oc)) return 1;
    }
    return 0;
}

/* Busy while packets are in flight or messages wait for credits: only
 * the peer's completions and tokens move them on. */
int openib_busy(pscom_poller_t *poller)
{
    pscom_list_t *pos;
    if (!pscom_list_empty(&openib_dev.ready)) return 1;
    pscom_list_for_each(pos, &openib_dev.cons) {
        openib_con_t *oc = pscom_list_entry(pos, openib_con_t, next);
        if (oc->send_busy || pscom_write_pending(oc->con)) return 1;
    }
    return 0;
}

/* At a graceful close: wait until our last packets (the EOF message among
 * them) reached the peer, for a second at most, before the queue pair is
 * taken down. What else comes is taken, and dropped with the connection:
 * the stream has ended. */
void openib_drain_sends(openib_con_t *oc)
{
    uint64_t t0 = openib_now_ms();
    while (oc->send_busy && !openib_dev.cq_broken && openib_now_ms() - t0 < 1000) {
        openib_cq_take();
        for (unsigned i = 0; i < oc->stash_count; i++) /* a send failed: the peer is gone */
            if (oc->stash[(oc->stash_head + i) % oc->stash_cap].wc.status != IBV_WC_SUCCESS)
                return;
    }
}
