/*
 * shm_adapt.c - large messages: the ring or the single copy, whichever
 * the receiver measured faster.
 */
#define _GNU_SOURCE
#include "shm_priv.h"

/* ---- large messages: ring or single copy ------------------------------------ */

/*
 * A message of at least PSP_SHM_RENDEZVOUS data bytes can take the ring
 * (two copies, pipelined, both CPUs copying) or the single copy. Which one
 * is faster depends on where the two CPUs sit: measured on 2 vCPUs whose
 * cache-line ping-pong flips between 0.05 and 0.2 us as the host moves
 * them, 1 MiB through a 1-2 MiB ring 28-30 vs 17-20 GB/s by single copy in
 * the fast state, 2.2-2.4 vs 6.5 GB/s in the slow one. So the receiver
 * times the large messages that arrive either way (shm_time_*), keeps an
 * average per way, and tells the sender its choice in its segment header;
 * the first four large messages go two each way, and then two in every
 * SHM_EXPLORE take the other way, in every 4 * SHM_EXPLORE while one way is
 * at least 1.25x faster, in every 16 * SHM_EXPLORE while it is 2x faster
 * (exploring costs), so that both averages follow a change within
 * milliseconds. The receiver drops the first sample
 * after a change of way: it pays for caches the other way has cooled
 * (a ring message after 31 single copies measured slower than single
 * copies, which kept large messages on the slower way). Nothing of this
 * touches small messages.
 */
/* prefer_ring: bit 0 the ring is faster; bits 8.. the exploration period */
#define SHM_PREFER_RING         1u
#define SHM_PREFER_PERIOD_SHIFT 8
uint64_t shm_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Sender: this large message through the ring? */
int shm_large_by_ring(shm_con_t *sc, size_t dlen)
{
    if (!shm_config.adapt || dlen > SHM_ADAPT_MAX) return 0;
    shm_seg_hdr_t *peer = shm_seg_hdr(&sc->tx_seg);
    uint32_t prefer = atomic_load_explicit(&peer->prefer_ring, memory_order_relaxed);
    int ring        = (prefer & SHM_PREFER_RING) != 0;
    unsigned n = ++sc->large_sent;
    if (n <= SHM_EXPLORE_START) return n <= SHM_EXPLORE_START / 2; /* the ring first */
    unsigned period = prefer >> SHM_PREFER_PERIOD_SHIFT;
    if (n % (period ? period : SHM_EXPLORE) < 2) ring = !ring;
    return ring;
}

/* Receiver: a large message of len data bytes took the time since t0 one
 * way (ring: 1, single copy: 0). */
void shm_time_sample(shm_con_t *sc, int ring_way, uint64_t t0, uint64_t len)
{
    uint64_t per_mib = ((shm_now_ns() - t0) << 20) / len;
    if (ring_way != sc->last_way) { /* caches cooled by the other way */
        sc->last_way = ring_way;
        return;
    }
    uint64_t *est = ring_way ? &sc->est_ring : &sc->est_cma;
    /* one stalled message (an interrupt, the host) must not flip the
     * choice: a sample counts as at most twice the average; a real change
     * still gets through within a few messages */
    if (*est && per_mib > 2 * *est) per_mib = 2 * *est;
    *est = *est ? (*est * 3 + per_mib) / 4 : per_mib;
    if (!sc->est_ring || !sc->est_cma) return;
    uint64_t fast = sc->est_ring < sc->est_cma ? sc->est_ring : sc->est_cma;
    uint64_t slow = sc->est_ring < sc->est_cma ? sc->est_cma : sc->est_ring;
    uint32_t period = slow >= 2 * fast ? 16 * SHM_EXPLORE
                      : slow * 4 >= fast * 5 ? 4 * SHM_EXPLORE : SHM_EXPLORE;
    uint32_t prefer = (sc->est_ring < sc->est_cma ? SHM_PREFER_RING : 0) |
                      period << SHM_PREFER_PERIOD_SHIFT;
    if (prefer != sc->prefer_ring) {
        if ((prefer ^ sc->prefer_ring) & SHM_PREFER_RING)
            plog_dbg("%s: shm: large messages now by %s (%llu vs %llu ns/MiB)",
                     pscom_con_name(sc->con), prefer & SHM_PREFER_RING ? "ring" : "single copy",
                     (unsigned long long)sc->est_ring, (unsigned long long)sc->est_cma);
        sc->prefer_ring = prefer;
        atomic_store_explicit(&shm_seg_hdr(&sc->rx_seg)->prefer_ring, prefer,
                              memory_order_relaxed);
    }
}

/* Is a message of dlen data bytes one the sender may send either way? */
int shm_time_wanted(const shm_con_t *sc, uint64_t dlen)
{
    /* (not without data, whatever the threshold: the sample is per byte;
     * PSP_SHM_RENDEZVOUS=0 divided by 0) */
    return shm_config.adapt && sc->cma_local && dlen && dlen >= sc->rndv_size &&
           dlen <= SHM_ADAPT_MAX;
}

/* Receiver: a DATA packet whose stream bytes are at p (head_len bytes of
 * message head first), n of them. */
void shm_time_ring(shm_con_t *sc, const char *p, uint32_t head_len, uint32_t n)
{
    if (!sc->rm_left) {
        size_t xlen, dlen;
        if (head_len < sizeof(pscom_header_net_t)) return;
        pscom_wire_header_get(p, &xlen, &dlen);
        if (head_len != sizeof(pscom_header_net_t) + xlen || !shm_time_wanted(sc, dlen)) return;
        sc->rm_left = head_len + dlen;
        sc->rm_len  = dlen;
        sc->rm_t0   = shm_now_ns();
    }
    if (n < sc->rm_left) {
        sc->rm_left -= n;
        return;
    }
    sc->rm_left = 0;
    shm_time_sample(sc, 1, sc->rm_t0, sc->rm_len);
}
