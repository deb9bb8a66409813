/*
 * shm_cma.h - cross-memory attach (process_vm_readv/process_vm_writev):
 * copy straight between our memory and the peer process's memory, one
 * copy and no staging through the ring.
 *
 * Whether it works between two processes (same user, ptrace policy, pid
 * namespaces) is probed once per connection during the handshake: we read
 * a nonce from the peer's memory at an address it announced and compare.
 * A pid that names a different process (other pid namespace) fails the
 * comparison, so we never copy from a stranger.
 *
 * Copy jobs: the receiver of a large message copies it from the sender's
 * buffer in chunks, and the sender, which has nothing else to do while it
 * waits, copies chunks of the same message into the receiver's buffer from
 * its side. The two claim chunks from a job descriptor in the receiver's
 * segment (shm_job_t); a sender that is not in pscom simply leaves all
 * chunks to the receiver, so nobody waits for a process that does not
 * progress, except for the one chunk the peer has claimed and is copying.
 * A job starts and ends within one call of the receiver (no other core
 * call in between), because the core may move the destination buffer
 * between calls (an unexpected message that gets matched).
 *
 *   claim word = generation (24 bits) | chunk count (20) | next chunk (20),
 *   changed only by compare-and-swap. The receiver writes the parameters
 *   of a job, then publishes a new generation (release); a successful
 *   claim (acquire) thus sees the parameters of its generation, and those
 *   stay put until every claimed chunk is done.
 */
#ifndef SHM_CMA_H
#define SHM_CMA_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* 1 if len bytes at remote address addr in process pid equal expect. */
int shm_cma_probe(pid_t pid, uint64_t addr, const void *expect, size_t len);

/* Copy len bytes from the peer's address src into dst. 0 or -errno. */
int shm_cma_read(pid_t pid, void *dst, uint64_t src, size_t len);

/* Copy len bytes from src into the peer's address dst. 0 or -errno. */
int shm_cma_write(pid_t pid, const void *src, uint64_t dst, size_t len);

/* ---- copy jobs ----------------------------------------------------------- */

#define SHM_JOB_IDX_BITS 20
#define SHM_JOB_MAX_CHUNKS ((1u << SHM_JOB_IDX_BITS) - 1)

/* the claim word's fields (see above) */
static inline uint64_t shm_job_claim_word(uint64_t gen, uint64_t n, uint64_t idx)
{
    return gen << (2 * SHM_JOB_IDX_BITS) | n << SHM_JOB_IDX_BITS | idx;
}
static inline uint64_t shm_job_claim_gen(uint64_t c)
{
    return c >> (2 * SHM_JOB_IDX_BITS);
}
static inline uint64_t shm_job_claim_count(uint64_t c)
{
    return (c >> SHM_JOB_IDX_BITS) & SHM_JOB_MAX_CHUNKS;
}

typedef struct shm_job {
    /* parameters of the current generation (written by the receiver) */
    _Alignas(64) _Atomic uint64_t dst; /* receiver's address of chunk 0 */
    _Atomic uint64_t src;              /* sender's address of chunk 0 */
    _Atomic uint64_t len;              /* bytes in all */
    _Atomic uint64_t chunk;            /* bytes per chunk (the last may be short) */
    /* claims and completions */
    _Alignas(64) _Atomic uint64_t claim; /* see above; 0: no job yet */
    _Atomic uint64_t done;               /* chunks finished, by either side */
    _Atomic uint64_t redo;               /* 1 + a chunk the sender failed to copy */
} shm_job_t;

/* Receiver: copy len bytes from the peer's address src into dst, sharing
 * the chunks (chunk_size bytes, 0: shm_job_chunk_size()) with the peer if
 * it helps. Returns when no chunk is in flight
 * any more (the peer no longer writes into dst), 0 or -errno. While it
 * waits for the peer's last chunk it calls alive(arg) now and then; if that
 * returns 0 (the peer process is gone) it returns -ESRCH. -EPROTO: the job
 * in our segment was overwritten (a broken peer; returned without waiting
 * for it). *helped says whether the peer copied any chunk. */
int shm_job_run(shm_job_t *job, pid_t peer, void *dst, uint64_t src, size_t len,
                size_t chunk_size, int (*alive)(void *arg), void *arg, int *helped);

/* Sender: claim and copy chunks of the receiver's current job into the
 * peer, about budget bytes at most, only from within [lo, hi) of our memory
 * (the message we announced). Returns the bytes copied, or -errno (the
 * failed chunk goes back to the receiver). */
ssize_t shm_job_help(shm_job_t *job, pid_t peer, size_t budget, uint64_t lo, uint64_t hi);

/* Chunk size for a job of len bytes: up to 8 chunks of at least 32 KiB
 * (fewer system calls), small jobs in two even halves (both sides busy for
 * the same time). Measured with pscom_pp, see README.md. */
#define SHM_JOB_CHUNK_MIN (32u << 10)
uint64_t shm_job_chunk_size(uint64_t len);

#endif /* SHM_CMA_H */
