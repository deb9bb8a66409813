/*
 * shm_ring.h - single-producer/single-consumer packet ring in shared memory.
 *
 * Each direction of a connection has one ring. It lives in the segment of
 * the receiving process (shm_segment.h): the peer writes, the owner reads.
 *
 * The ring is a byte ring of R bytes (a power of two) holding packets that
 * start on a cache line: a 16-byte header {stamp, len, type | gap |
 * head_len} followed by the payload, the whole rounded up to 64 bytes. A
 * DATA payload is head_len bytes of message head, gap unused bytes (so
 * that the data sits at the same offset modulo 64 as in the sender's
 * buffer, see pscom_shm.c), then data. A packet never
 * wraps around the end of the ring; a WRAP packet (header only) sends the
 * consumer to the start. Types: DATA (bytes of the message stream), RNDV
 * and ACK (single copy, pscom_shm.c).
 *
 * Positions are absolute byte counts (uint64_t, never wrap in practice).
 * The producer publishes a packet by storing stamp = position + 1 with
 * release semantics, after the payload; the consumer polls the stamp of its
 * current position with acquire semantics. So a small message costs the
 * consumer one cache line and no system call, and there is no lock.
 *
 * Stale bytes: the header position of the next packet may hold payload of
 * the previous lap, which could by chance equal the expected stamp. The
 * producer therefore zeroes the stamp of the following header position
 * when it reserves a packet (it needs that line next anyway); the
 * consumer thus only ever sees 0 or a valid stamp at its position.
 *
 * Free space: the consumer stores its position into `consumed` after each
 * packet (release; a store into a line that only it writes). The producer
 * keeps a private copy and reloads it only when the copy says the ring is
 * full, so on the fast path neither side touches the other's lines beyond
 * the packet itself.
 */
#ifndef SHM_RING_H
#define SHM_RING_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define SHM_CL 64u /* cache line */

#define SHM_PKT_HDR 16u /* sizeof(shm_pkt_t) */

/* packet types (top 8 bits of shm_pkt_t.info) */
#define SHM_PKT_DATA 0u    /* bytes of the message stream */
#define SHM_PKT_RNDV 1u    /* a message head + shm_rndv_t: read the data from the sender */
#define SHM_PKT_ACK  2u    /* shm_ack_t: the receiver is done with an RNDV message */
#define SHM_PKT_WRAP 0xffu /* go on at the start of the ring */

#define SHM_PKT_HEAD_MAX  0x3ffffu /* largest head_len (18 bits) */
#define SHM_PKT_GAP_SHIFT 18       /* gap: 6 bits, below the type */
#define SHM_PKT_GAP_MAX   (SHM_CL - 1)

typedef struct shm_pkt {
    _Atomic uint64_t stamp; /* position + 1 once published, else 0 or stale */
    uint32_t len;           /* payload bytes (gap included) */
    uint32_t info;          /* type << 24 | gap << 18 | head_len: head_len leading
                               payload bytes belong to a message head (8-byte
                               header + xheader), the next gap bytes are unused */
} shm_pkt_t;
_Static_assert(sizeof(shm_pkt_t) == SHM_PKT_HDR, "shm packet header");

/* fields of shm_pkt_t.info */
static inline unsigned shm_pkt_type(uint32_t info)
{
    return info >> 24;
}

static inline uint32_t shm_pkt_head_len(uint32_t info)
{
    return info & SHM_PKT_HEAD_MAX;
}

static inline uint32_t shm_pkt_gap(uint32_t info)
{
    return (info >> SHM_PKT_GAP_SHIFT) & SHM_PKT_GAP_MAX;
}

static inline void *shm_pkt_payload(shm_pkt_t *pkt)
{
    return (char *)pkt + SHM_PKT_HDR;
}

/* bytes a packet with len payload bytes occupies in the ring */
static inline uint64_t shm_pkt_size(uint64_t len)
{
    return (SHM_PKT_HDR + len + SHM_CL - 1) & ~(uint64_t)(SHM_CL - 1);
}

/* Largest payload of one packet in a ring of `size` bytes: an empty ring
 * must always take a packet, whatever the position (wrap included). */
static inline uint32_t shm_ring_max_payload(uint64_t size)
{
    return (uint32_t)(size / 2 - SHM_CL - SHM_PKT_HDR);
}

/* ---- producer ------------------------------------------------------------ */

typedef struct shm_ring_tx {
    char *ring;                 /* R bytes in the peer's segment */
    _Atomic uint64_t *consumed; /* the peer's consumed position */
    uint64_t mask;              /* R - 1 */
    uint64_t pos;               /* next packet position */
    uint64_t seen;              /* last value read from *consumed */
} shm_ring_tx_t;

/* Room for a packet of len payload bytes? Returns the packet to fill (its
 * payload at shm_pkt_payload()), then shm_ring_publish(), or NULL if the
 * ring is full (nothing changed). May publish a WRAP packet. */
static inline shm_pkt_t *shm_ring_reserve(shm_ring_tx_t *tx, uint32_t len)
{
    uint64_t size = shm_pkt_size(len);
    uint64_t R    = tx->mask + 1;
    uint64_t off  = tx->pos & tx->mask;
    uint64_t skip = off + size > R ? R - off : 0;
    /* + one line: the stamp of the following position gets zeroed */
    uint64_t need = skip + size + SHM_CL;
    if (tx->pos + need - tx->seen > R) {
        tx->seen = atomic_load_explicit(tx->consumed, memory_order_acquire);
        if (tx->pos + need - tx->seen > R) return NULL;
    }
    if (skip) {
        shm_pkt_t *w = (shm_pkt_t *)(tx->ring + off);
        atomic_store_explicit(&((shm_pkt_t *)tx->ring)->stamp, 0, memory_order_relaxed);
        w->len  = 0;
        w->info = SHM_PKT_WRAP << 24;
        atomic_store_explicit(&w->stamp, tx->pos + 1, memory_order_release);
        tx->pos += skip;
    }
    /* zero the following stamp now, not between the stores of the packet:
     * the consumer polls the packet's line, and each of its reads in the
     * middle of our stores costs another transfer of the line */
    shm_pkt_t *nxt = (shm_pkt_t *)(tx->ring + ((tx->pos + size) & tx->mask));
    atomic_store_explicit(&nxt->stamp, 0, memory_order_relaxed);
    return (shm_pkt_t *)(tx->ring + (tx->pos & tx->mask));
}

/* The payload of pkt (from shm_ring_reserve(.., len)) is written: make it
 * visible to the consumer. head_len <= SHM_PKT_HEAD_MAX, gap <= SHM_PKT_GAP_MAX. */
static inline void shm_ring_publish(shm_ring_tx_t *tx, shm_pkt_t *pkt, uint32_t len,
                                    unsigned type, uint32_t head_len, uint32_t gap)
{
    pkt->len  = len;
    pkt->info = (uint32_t)type << 24 | gap << SHM_PKT_GAP_SHIFT | head_len;
    atomic_store_explicit(&pkt->stamp, tx->pos + 1, memory_order_release);
    tx->pos += shm_pkt_size(len);
}

/* ---- consumer ------------------------------------------------------------ */

typedef struct shm_ring_rx {
    char *ring;                 /* R bytes in our own segment */
    _Atomic uint64_t *consumed; /* ours, read by the peer's producer */
    uint64_t mask;
    uint64_t pos;               /* next packet position */
} shm_ring_rx_t;

/* A packet as the consumer takes it: its header read once. The peer may
 * write the ring at any time, and a broken one may write anything. */
typedef struct shm_pkt_in {
    char *payload;
    uint32_t len;  /* payload bytes */
    uint32_t info; /* type | gap | head_len, as shm_pkt_t.info */
} shm_pkt_in_t;

/* The next published packet into *in: 1, or 0 if there is none. Follows
 * WRAP packets. Returns -1 (in->len set) for a packet that would not end
 * inside the ring, which only a broken producer writes: the caller reads
 * no further. The payload stays valid until shm_ring_consume(). */
static inline int shm_ring_peek(shm_ring_rx_t *rx, shm_pkt_in_t *in)
{
    for (;;) {
        uint64_t off    = rx->pos & rx->mask;
        shm_pkt_t *pkt  = (shm_pkt_t *)(rx->ring + off);
        if (atomic_load_explicit(&pkt->stamp, memory_order_acquire) != rx->pos + 1) return 0;
        in->len  = *(volatile uint32_t *)&pkt->len;
        in->info = *(volatile uint32_t *)&pkt->info;
        if (__builtin_expect(shm_pkt_type(in->info) == SHM_PKT_WRAP, 0)) {
            rx->pos += (rx->mask + 1) - off;
            continue;
        }
        in->payload = shm_pkt_payload(pkt);
        return off + shm_pkt_size(in->len) <= rx->mask + 1 ? 1 : -1;
    }
}

/* Done with the packet from shm_ring_peek(): its space may be reused. */
static inline void shm_ring_consume(shm_ring_rx_t *rx, const shm_pkt_in_t *in)
{
    rx->pos += shm_pkt_size(in->len);
    atomic_store_explicit(rx->consumed, rx->pos, memory_order_release);
}

/* Is a packet waiting (cheap check, no side effects)? */
static inline int shm_ring_ready(const shm_ring_rx_t *rx)
{
    const shm_pkt_t *pkt = (const shm_pkt_t *)(rx->ring + (rx->pos & rx->mask));
    return atomic_load_explicit(&pkt->stamp, memory_order_acquire) == rx->pos + 1;
}

#endif /* SHM_RING_H */
