/*
 * shm_segment.h - the shared-memory segment of one receiving side.
 *
 * Each side of a connection creates one segment for the ring it receives
 * on and sends its name through the handshake; the peer maps it and writes
 * into the ring. Segments are created with O_EXCL, mode 0600, a random name
 * and fully allocated up front (a tmpfs that runs full then fails the
 * handshake, instead of a SIGBUS at the first message); both sides map
 * them with MAP_POPULATE, so no message pays for page faults. They are unlinked
 * as soon as the peer has mapped them, so a killed job leaves nothing in
 * /dev/shm.
 *
 * Layout: one page of header (identification; the consumer's position on a
 * cache line of its own; the owner's single-copy job), then the ring
 * (shm_ring.h).
 */
#ifndef SHM_SEGMENT_H
#define SHM_SEGMENT_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "shm_cma.h"

#define SHM_SEG_MAGIC       0x6d687370u /* "pshm" */
#define SHM_SEG_VERSION     2u /* 2: prefer_ring */
#define SHM_SEG_NAME_MAX    48
#define SHM_SEG_RING_OFFSET 4096u

typedef struct shm_seg_hdr {
    uint32_t magic;
    uint32_t version;
    uint64_t ring_size;
    uint64_t nonce[2];    /* must match the handshake blob */
    uint32_t creator_pid;
    uint32_t reserved;
    _Alignas(64) _Atomic uint64_t consumed; /* written by the owner (consumer) only */
    /* written by the owner, read by the peer before each large message:
     * send it through the ring or announce it for single copy, and how
     * often to try the other way (pscom_shm.c, SHM_PREFER_*) */
    _Alignas(64) _Atomic uint32_t prefer_ring;
    shm_job_t job; /* the owner's current single-copy job (shm_cma.h) */
} shm_seg_hdr_t;
_Static_assert(sizeof(shm_seg_hdr_t) <= SHM_SEG_RING_OFFSET, "segment header fits one page");

typedef struct shm_seg {
    char *base;     /* mapping, NULL if none */
    size_t size;    /* of the mapping */
    char name[SHM_SEG_NAME_MAX];
    int linked;     /* the name still exists and we are to unlink it */
} shm_seg_t;

/* Create, allocate, map and initialize a segment with a ring of ring_size
 * bytes (a power of two). Returns 0 or -errno (nothing left behind). */
int shm_seg_create(shm_seg_t *seg, uint64_t ring_size, const uint64_t nonce[2]);

/* Map the peer's segment `name` and check that it is what the handshake
 * announced (owner, mode, size, magic, ring size, nonce, creator pid).
 * On success the name is ours to unlink (shm_seg_unlink()) once we are
 * sure to keep the mapping. Returns 0 or -errno. */
int shm_seg_attach(shm_seg_t *seg, const char *name, uint64_t ring_size, const uint64_t nonce[2],
                   uint32_t creator_pid);

/* Remove the name from /dev/shm (once; the mapping stays). */
void shm_seg_unlink(shm_seg_t *seg);

/* Unlink if still linked, and unmap. Safe on a zeroed or released seg. */
void shm_seg_release(shm_seg_t *seg);

/* Is name a segment name of ours (prefix, length, characters)? */
int shm_seg_name_valid(const char *name, size_t max);

static inline shm_seg_hdr_t *shm_seg_hdr(const shm_seg_t *seg)
{
    return (shm_seg_hdr_t *)seg->base;
}

static inline char *shm_seg_ring(const shm_seg_t *seg)
{
    return seg->base + SHM_SEG_RING_OFFSET;
}

/* The ring's size as mapped (created, or validated at attach). Never the
 * header's ring_size: the peer maps the header too, and could change it
 * after the check (a ring size of 1 GiB turned off every bound). */
static inline uint64_t shm_seg_ring_size(const shm_seg_t *seg)
{
    return seg->size - SHM_SEG_RING_OFFSET;
}

/* Fill buf with len random bytes (getrandom, falling back to a mix of time,
 * pid and a counter: the names are guarded by O_EXCL anyway). */
void shm_random(void *buf, size_t len);

/* Remove our segments in /dev/shm whose creator is gone and that are at
 * least min_age_s seconds old: a process killed between creating its
 * segment and the peer's attach (or the peer's refusal of shm) leaves it
 * linked, and nobody else would ever remove it. Live creators (kill(pid, 0)
 * succeeds or is not allowed) and young segments (a creator in another pid
 * namespace, its handshake still running) are left alone. Returns the
 * number removed. */
unsigned shm_seg_sweep(unsigned min_age_s);
/* the age from which shm_init() sweeps: far beyond any handshake (its
 * watchdog ends one after 12 s by default, and the segment goes with it) */
#define SHM_SEG_STALE_S 120

#endif /* SHM_SEGMENT_H */
