/*
 * shm_recv.c - the receiving side of the shm transport: reading our ring
 * (packets, single-copy receives, ACKs), and the one poller of all shm
 * connections.
 */
#define _GNU_SOURCE
#include "shm_priv.h"

/* ---- polling: one poller for all shm connections --------------------------- */

/* Every shm connection is in one table; a progress pass looks at the first
 * cache line of each (its receive ring position and the busy flag) and at
 * the stamp of its next packet, and does more only where a packet is there
 * or something else needs attention. */
static struct {
    shm_con_t **con;
    unsigned n, cap;
    pscom_poller_t poller;
} shm_polled;

/* ---- receiving ----------------------------------------------------------- */

static void shm_protocol_error(shm_con_t *sc, const char *what)
{
    plog_err("%s: shm: protocol error (%s); closing the connection", pscom_con_name(sc->con),
             what);
    sc->read_stopped = 1;
    pscom_con_transport_error(sc->con, PSCOM_OP_READ, EPROTO);
}

/* The receiver is done with our RNDV message. Returns 1 to stop reading. */
static int shm_recv_ack(shm_con_t *sc, const shm_ack_t *ack)
{
    pscom_con_t *con = sc->con;
    size_t dlen      = sc->cur_data.iov_len;
    if (!sc->cur_rndv || ack->done > dlen || (ack->status == SHM_ACK_OK && ack->done != dlen) ||
        ack->status > SHM_ACK_PUSH) {
        shm_protocol_error(sc, "unexpected ACK");
        return 1;
    }
    sc->cur_rndv = 0;
    if (ack->status == SHM_ACK_PUSH) {
        /* the peer cannot read our memory: the rest goes through the ring */
        plog_dbg("%s: shm: single copy refused after %llu bytes; using the ring",
                 pscom_con_name(con), (unsigned long long)ack->done);
        sc->cma = 0;
    }
    sc->cur_off += (size_t)ack->done;
    if (sc->cur_off == sc->cur_head.iov_len + dlen) sc->cur_active = 0;
    if (ack->done && pscom_write_done(con, (size_t)ack->done)) return 1;
    if (sc->closed) return 1;
    shm_write(sc);
    return sc->closed;
}

/* Is the peer process still there? (Its end of the handshake socket
 * closes when it exits, after its memory is gone.) */
static int shm_peer_alive(void *arg)
{
    shm_con_t *sc = arg;
    char c;
    ssize_t r = recv(sc->ufd.fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
    return r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR);
}

/* Copy the data of the RNDV message being received, at most
 * PSP_SHM_COPY_BUDGET bytes per call, to wherever the core wants it
 * (pscom_read_get_buf): the matched receive buffer, or the buffer of an
 * unexpected message. The sender helps (shm_job_run). Returns -1 to stop
 * reading, 0 while the message is incomplete, 1 when it is done. */
static int shm_rndv_progress(shm_con_t *sc, int *progress)
{
    pscom_con_t *con = sc->con;
    shm_job_t *job   = &shm_seg_hdr(&sc->rx_seg)->job;
    /* about the same time per call: twice the bytes while the sender helps */
    size_t budget    = shm_config.copy_budget << (sc->rr_helped ? 1 : 0);
    int err;

    while (sc->rr_done < sc->rr_len) {
        uint64_t rest = sc->rr_len - sc->rr_done;
        size_t n      = pscom_read_drop_len(con);
        if (n) {
            /* nobody takes the rest (a truncated receive): it stays in the
             * sender, and goes at once (a peer may announce up to 1 TiB) */
            if (n > rest) n = (size_t)rest;
        } else {
            char *buf;
            pscom_read_get_buf(con, &buf, &n);
            if (n > rest) n = (size_t)rest;
            if (!budget) return 0; /* more in the next poll */
            if (n > budget) n = budget;
            err = shm_job_run(job, sc->peer_pid, buf, sc->rr_src + sc->rr_done, n,
                              shm_config.copy_chunk, shm_peer_alive, sc, &sc->rr_helped);
            /* The sender closes its handshake socket before its failed send
             * hands the buffer back (a cut-off close, PSP_SHUTDOWN_TIMEOUT):
             * still open after the copy, what we copied was the message;
             * closed, it may be what the application wrote there since
             * (until 2026-11-29 delivered as a successful message) */
            if (!err && !shm_peer_alive(sc)) err = -ECONNRESET;
            if (err) goto failed;
            budget -= n;
        }
        sc->rr_done += n;
        *progress = 1;
        if (pscom_read_done(con, n) || sc->closed) return -1;
    }
    sc->rr_active   = 0;
    sc->ack.done    = sc->rr_done;
    sc->ack.status  = SHM_ACK_OK;
    sc->ack_pending = 1;
    if (sc->rr_t0) shm_time_sample(sc, 0, sc->rr_t0, sc->rr_len);
    shm_write(sc);
    return sc->closed ? -1 : 1;

failed:
    sc->rr_active = 0;
    if (err == -ESRCH) { /* the sender is gone */
        pscom_con_transport_error(con, PSCOM_OP_READ, ESRCH);
        return -1;
    }
    if (err == -ECONNRESET) {
        plog_err("%s: shm: the sender left the connection during the single copy of a message "
                 "of %llu bytes; the message is dropped",
                 pscom_con_name(con), (unsigned long long)sc->rr_len);
        pscom_con_transport_error(con, PSCOM_OP_READ, ECONNRESET);
        return -1;
    }
    if (err == -EPROTO) { /* it wrote garbage into the copy job */
        shm_protocol_error(sc, "copy job overwritten");
        return -1;
    }
    plog_dbg("%s: shm: process_vm_readv failed (%s); asking for the data through the ring",
             pscom_con_name(con), strerror(-err));
    sc->cma_local   = 0;
    sc->ack.done    = sc->rr_done;
    sc->ack.status  = SHM_ACK_PUSH;
    sc->ack_pending = 1;
    shm_write(sc);
    return sc->closed ? -1 : 1;
}

/* An RNDV packet: the head is at p (hl bytes), then shm_rndv_t. Hand the
 * head to the core, then copy the data. Returns as shm_rndv_progress(). */
static int shm_recv_rndv(shm_con_t *sc, const shm_pkt_in_t *pkt, int *progress)
{
    pscom_con_t *con = sc->con;
    const char *p    = pkt->payload;
    uint32_t hl      = shm_pkt_head_len(pkt->info);
    shm_rndv_t rd;
    size_t xlen, wire_dlen;

    if (pkt->len != hl + sizeof(rd) || hl < 8) goto bad;
    memcpy(&rd, p + hl, sizeof(rd));
    pscom_wire_header_get(p, &xlen, &wire_dlen);
    if (hl != 8 + xlen || wire_dlen != rd.len || !rd.len) goto bad;

    if (pscom_read_feed(con, p, hl) || sc->closed) return -1;
    shm_ring_consume(&sc->rx, pkt);
    sc->rr_active = 1;
    sc->rr_src    = rd.src;
    sc->rr_len    = rd.len;
    sc->rr_done   = 0;
    sc->rr_t0     = shm_time_wanted(sc, rd.len) ? shm_now_ns() : 0;
    if (!sc->cma_local) {
        sc->rr_active   = 0;
        sc->ack.done    = 0;
        sc->ack.status  = SHM_ACK_PUSH;
        sc->ack_pending = 1;
        shm_write(sc);
        return sc->closed ? -1 : 1;
    }
    return shm_rndv_progress(sc, progress);
bad:
    shm_protocol_error(sc, "bad RNDV packet");
    return -1;
}

static int shm_is_ack(const shm_pkt_in_t *pkt)
{
    return shm_pkt_type(pkt->info) == SHM_PKT_ACK && pkt->len == sizeof(shm_ack_t);
}

/* An ACK packet (shm_is_ack): taken from the ring and acted on. Returns 1
 * to stop reading. */
static int shm_take_ack(shm_con_t *sc, const shm_pkt_in_t *pkt)
{
    shm_ack_t ack;
    memcpy(&ack, pkt->payload, sizeof(ack));
    shm_ring_consume(&sc->rx, pkt);
    return shm_recv_ack(sc, &ack);
}

/* After the peer's EOF (the core stopped reading) one packet may still
 * come: the ACK of our RNDV message, when the peer closed while it copied
 * the message. Returns 1 if it came. */
static int shm_read_final_ack(shm_con_t *sc)
{
    if (sc->closed || !sc->cur_rndv) return 0;
    shm_pkt_in_t pkt;
    if (shm_ring_peek(&sc->rx, &pkt) <= 0 || !shm_is_ack(&pkt)) return 0;
    sc->in_read = 1;
    shm_take_ack(sc, &pkt);
    sc->in_read = 0;
    shm_busy_update(sc);
    return 1;
}

/* Hand the packets that arrived to the core. Returns 1 if it made progress. */
static int shm_read(shm_con_t *sc)
{
    pscom_con_t *con = sc->con;
    int progress     = 0;
    int stop         = 0;

    if (pscom_unlikely(sc->in_read | sc->read_stopped))
        return sc->in_read ? 0 : shm_read_final_ack(sc);
    sc->in_read = 1;
    if (sc->rr_active) {
        int r = shm_rndv_progress(sc, &progress);
        if (r < 0) stop = 1;
        if (r <= 0) goto out; /* nothing else may pass the message */
    }
    for (int i = 0; i < SHM_READ_MAX; i++) {
        shm_pkt_in_t pkt;
        int there = shm_ring_peek(&sc->rx, &pkt);
        if (!there) break;
        progress      = 1;
        const char *p = pkt.payload;
        uint32_t len  = pkt.len;
        uint32_t hl   = shm_pkt_head_len(pkt.info);
        if (pscom_unlikely(there < 0 || hl > len || shm_pkt_size(len) > sc->rx.mask / 2 + 1)) {
            shm_protocol_error(sc, "bad packet length");
            stop = 1;
        } else if (pscom_likely(shm_pkt_type(pkt.info) == SHM_PKT_DATA)) {
            uint32_t gap = shm_pkt_gap(pkt.info);
            if (pscom_unlikely(gap > len - hl)) {
                shm_protocol_error(sc, "bad packet gap");
                stop = 1;
                break;
            }
            uint64_t completions = pscom_req_completions;
            if (!gap && (len <= SHM_FEED_ONCE || !hl)) {
                stop = pscom_read_feed(con, p, len);
            } else {
                /* the head alone, so that the data goes straight to the receive buffer */
                if (hl) stop = pscom_read_feed(con, p, hl);
                if (!stop && !sc->closed) stop = pscom_read_feed(con, p + hl + gap, len - hl - gap);
            }
            if (stop && !sc->closed) shm_ring_consume(&sc->rx, &pkt); /* EOF: the rest is dropped */
            if (stop || sc->closed) break;
            /* (a large message's first packet has at least SHM_CHUNK_MIN bytes) */
            if (sc->rm_left || (hl && len >= SHM_CHUNK_MIN && sc->cma_local))
                shm_time_ring(sc, p, hl, len - gap);
            shm_ring_consume(&sc->rx, &pkt);
            /* A request completed: let its waiter go on before we look at
             * the next packet, whose stamp line the writer has just zeroed
             * (a cross-CPU miss). 8 B: +9-14 % in interleaved A/Bs. */
            if (completions != pscom_req_completions) break;
        } else if (shm_pkt_type(pkt.info) == SHM_PKT_RNDV) {
            int r = shm_recv_rndv(sc, &pkt, &progress);
            if (r < 0) stop = 1;
            if (r <= 0) break;
        } else if (shm_is_ack(&pkt)) {
            stop = shm_take_ack(sc, &pkt);
        } else {
            shm_protocol_error(sc, "unknown packet type");
            stop = 1;
        }
        if (stop || sc->closed) break;
    }
out:
    if (stop) sc->read_stopped = 1;
    sc->in_read = 0;
    shm_busy_update(sc);
    return progress;
}

/* While our RNDV message waits for its ACK: copy chunks of it into the
 * receiver, which has opened a job for it in its segment. */
static int shm_help(shm_con_t *sc)
{
    shm_job_t *job = &shm_seg_hdr(&sc->tx_seg)->job;
    uint64_t lo    = (uint64_t)(uintptr_t)sc->cur_data.iov_base;
    uint64_t hi    = lo + sc->cur_data.iov_len;
    ssize_t r      = shm_job_help(job, sc->peer_pid, shm_config.copy_budget, lo, hi);
    if (r < 0) {
        plog_dbg("%s: shm: process_vm_writev failed (%s); leaving the copy to the receiver",
                 pscom_con_name(sc->con), strerror((int)-r));
        sc->help = 0;
        return 1;
    }
    return r > 0;
}

static int shm_poll(shm_con_t *sc)
{
    int progress = shm_read(sc);
    if (sc->closed) return progress;
    if (sc->tx_blocked) progress |= shm_write(sc);
    if (sc->cur_rndv && sc->help && !sc->closed) {
        progress |= shm_help(sc);
        shm_busy_update(sc);
    }
    return progress;
}

static inline void shm_cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

static int shm_poll_all(pscom_poller_t *poller)
{
    int progress = 0, looked = 0;
    for (unsigned i = 0; i < shm_polled.n; i++) {
        shm_con_t *sc = shm_polled.con[i];
        if (!sc->busy && !shm_ring_ready(&sc->rx)) continue;
        looked = 1;
        progress |= shm_poll(sc);
        /* closed meanwhile: slot i holds the last connection now */
        if (i < shm_polled.n && shm_polled.con[i] != sc) i--;
    }
    /* Nothing there: back off a little before the next look. Reading the
     * lines the peers are about to write as fast as we can delays their
     * stores (measured: 8 B half round trip 0.30 -> 0.27 us). */
    if (!looked) shm_cpu_relax();
    return progress;
}

/* A blocked writer, a copy, helping the peer: a blocking wait polls on
 * instead of napping (pscom_poller_t.busy). */
static int shm_busy_any(pscom_poller_t *poller)
{
    for (unsigned i = 0; i < shm_polled.n; i++)
        if (shm_polled.con[i]->busy) return 1;
    return 0;
}

int shm_polled_add(shm_con_t *sc)
{
    if (shm_polled.n == shm_polled.cap) {
        unsigned cap   = shm_polled.cap ? 2 * shm_polled.cap : 16;
        shm_con_t **nc = realloc(shm_polled.con, cap * sizeof(*nc));
        if (!nc) return -1;
        shm_polled.con = nc;
        shm_polled.cap = cap;
    }
    sc->slot                      = shm_polled.n++;
    shm_polled.con[sc->slot]      = sc;
    if (shm_polled.n == 1) {
        shm_polled.poller.poll = shm_poll_all;
        shm_polled.poller.busy = shm_busy_any;
        pscom_poller_add(&shm_polled.poller);
    }
    return 0;
}

void shm_polled_del(shm_con_t *sc)
{
    unsigned last = --shm_polled.n;
    if (sc->slot != last) {
        shm_polled.con[sc->slot]       = shm_polled.con[last];
        shm_polled.con[sc->slot]->slot = sc->slot;
    }
    if (!shm_polled.n) pscom_poller_del(&shm_polled.poller);
}

void shm_fini(void)
{
    if (shm_polled.n) return; /* connections still open: keep the table */
    free(shm_polled.con);
    shm_polled.con = NULL;
    shm_polled.cap = 0;
}

/* The handshake socket became readable: the peer is gone (EOF or error). */
void shm_fd_handler(pscom_ufd_t *ufd, uint32_t revents)
{
    shm_con_t *sc = ufd->priv;
    char c;
    ssize_t r = recv(ufd->fd, &c, 1, MSG_DONTWAIT);
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return;
    int err = r < 0 ? errno : r > 0 ? EPROTO : 0;

    /* a peer that closed properly left its EOF message in the ring */
    while (!sc->closed && shm_read(sc)) {
    }
    if (sc->closed) return;
    plog_dbg("%s: shm: peer %s", pscom_con_name(sc->con),
             r == 0 ? "closed its end" : r > 0 ? "sent unexpected bytes" : strerror(err));
    pscom_con_transport_error(sc->con, PSCOM_OP_READ, err);
}
