/*
 * shm_send.c - the sending side of the shm transport: queued messages go
 * into the peer's ring, in packets or announced for single copy (RNDV).
 */
#define _GNU_SOURCE
#include "shm_priv.h"

/* ---- sending ------------------------------------------------------------- */

static int shm_send_ack(shm_con_t *sc)
{
    shm_pkt_t *pkt = shm_ring_reserve(&sc->tx, sizeof(shm_ack_t));
    if (!pkt) return 0;
    memcpy(shm_pkt_payload(pkt), &sc->ack, sizeof(shm_ack_t));
    shm_ring_publish(&sc->tx, pkt, sizeof(shm_ack_t), SHM_PKT_ACK, 0, 0);
    sc->ack_pending = 0;
    return 1;
}

/* Announce the oldest message for single copy. 0: ring full. */
static int shm_send_rndv(shm_con_t *sc)
{
    size_t hlen    = sc->cur_head.iov_len;
    shm_pkt_t *pkt = shm_ring_reserve(&sc->tx, (uint32_t)(hlen + sizeof(shm_rndv_t)));
    if (!pkt) return 0;
    char *dst      = shm_pkt_payload(pkt);
    shm_rndv_t rd  = {.src = (uint64_t)(uintptr_t)sc->cur_data.iov_base,
                      .len = sc->cur_data.iov_len};
    memcpy(dst, sc->cur_head.iov_base, hlen);
    memcpy(dst + hlen, &rd, sizeof(rd));
    shm_ring_publish(&sc->tx, pkt, (uint32_t)(hlen + sizeof(rd)), SHM_PKT_RNDV, (uint32_t)hlen, 0);
    sc->cur_rndv = 1;
    sc->cur_off  = hlen;
    return 1;
}
/* Write what is queued into the ring until the queue is empty, the ring
 * is full, or an RNDV message waits for its ACK. Re-entrant calls (from
 * completions inside pscom_write_done) return at once: the outer loop
 * picks their messages up. Returns 1 if it wrote anything. */
int shm_write(shm_con_t *sc)
{
    pscom_con_t *con = sc->con;
    int progress     = 0;

    if (sc->in_write) return 0;
    sc->in_write   = 1;
    sc->tx_blocked = 0;
    for (;;) {
        if (sc->ack_pending) {
            if (!shm_send_ack(sc)) goto full;
            progress = 1;
        }
        if (sc->cur_rndv) break; /* the ACK will call us again */
        if (!sc->cur_active) {
            if (!pscom_write_peek(con, 0, &sc->cur_head, &sc->cur_data)) break;
            sc->cur_active = 1;
            sc->cur_off    = 0;
            size_t dlen    = sc->cur_data.iov_len;
            if (sc->cma && dlen && dlen >= sc->rndv_size &&
                sc->cur_head.iov_len + sizeof(shm_rndv_t) <= sc->chunk &&
                !shm_large_by_ring(sc, dlen)) {
                if (!shm_send_rndv(sc)) {
                    sc->cur_active = 0; /* not started: may still be cancelled */
                    goto full;
                }
                progress = 1;
                /* the head left: the send is started and no longer cancellable */
                if (pscom_write_done(con, sc->cur_off) || sc->closed) break;
                continue;
            }
        }
        size_t hlen  = sc->cur_head.iov_len;
        size_t total = hlen + sc->cur_data.iov_len;
        size_t off   = sc->cur_off;
        /* Packets grow from SHM_PKT_FIRST to the chunk size: the receiver
         * starts copying out early, and long messages take few packets.
         * Towards the end they shrink again by halves: the receiver copies
         * the last packet after the sender is done with it, so a small one
         * ends the message sooner (1 MiB +7 %, 64 KiB +10 %). */
        size_t n    = off > SHM_PKT_FIRST ? off : SHM_PKT_FIRST;
        size_t left = total - off;
        if (n > sc->chunk) n = sc->chunk;
        if (left > n && left / 2 < n) n = left / 2 > SHM_PKT_FIRST ? left / 2 : SHM_PKT_FIRST;
        if (n > left) n = left;

        size_t hl       = off < hlen ? (hlen - off < n ? hlen - off : n) : 0;
        const char *src = NULL; /* data of this packet, if any (then the head is done) */
        uint32_t gap    = 0;
        if (n > hl) {
            src = (const char *)sc->cur_data.iov_base + (off + hl - hlen);
            if (n - hl >= SHM_GAP_MIN) gap = shm_data_gap(src, hl);
        }

        shm_pkt_t *pkt = shm_ring_reserve(&sc->tx, (uint32_t)(n + gap));
        if (!pkt) {
            if (!off) sc->cur_active = 0; /* not started: may still be cancelled */
            goto full;
        }
        char *dst = shm_pkt_payload(pkt);
        if (hl) pscom_memcpy_small(dst, (const char *)sc->cur_head.iov_base + off, hl);
        if (n > hl) pscom_memcpy_small(dst + hl + gap, src, n - hl);
        shm_ring_publish(&sc->tx, pkt, (uint32_t)(n + gap), SHM_PKT_DATA, (uint32_t)hl, gap);
        progress = 1;

        /* Retire what left. A message of several packets is retired packet
         * by packet, which also marks it started (no cancel after the first
         * packet); it is never peeked again meanwhile. */
        sc->cur_off += n;
        if (sc->cur_off == total) sc->cur_active = 0;
        if (pscom_write_done(con, n) || sc->closed) break;
    }
    sc->in_write = 0;
    shm_busy_update(sc);
    return progress;
full:
    sc->tx_blocked = 1; /* the poller goes on */
    sc->in_write   = 0;
    shm_busy_update(sc);
    return progress;
}

void shm_write_start(pscom_con_t *con)
{
    shm_con_t *sc = shm_con(con);
    if (!sc->closed) shm_write(sc);
}
