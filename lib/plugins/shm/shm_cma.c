/*
 * shm_cma.c - cross-memory attach (see shm_cma.h).
 */
#define _GNU_SOURCE
#include "shm_cma.h"

#include <errno.h>
#include <string.h>
#include <sys/uio.h>

/* Partial transfers happen (a fault in the middle); go on from there. */
static int cma_copy(pid_t pid, char *local, uint64_t remote, size_t len, int write)
{
    while (len) {
        struct iovec l = {.iov_base = local, .iov_len = len};
        struct iovec r = {.iov_base = (void *)(uintptr_t)remote, .iov_len = len};
        ssize_t n      = write ? process_vm_writev(pid, &l, 1, &r, 1, 0)
                               : process_vm_readv(pid, &l, 1, &r, 1, 0);
        if (n < 0) {
            if (errno == EINTR) continue;
            return -errno;
        }
        if (n == 0) return -EFAULT;
        local += n;
        remote += (uint64_t)n;
        len -= (size_t)n;
    }
    return 0;
}

int shm_cma_read(pid_t pid, void *dst, uint64_t src, size_t len)
{
    return cma_copy(pid, dst, src, len, 0);
}

int shm_cma_write(pid_t pid, const void *src, uint64_t dst, size_t len)
{
    return cma_copy(pid, (char *)src, dst, len, 1);
}

int shm_cma_probe(pid_t pid, uint64_t addr, const void *expect, size_t len)
{
    unsigned char buf[64];
    if (len > sizeof(buf) || !addr || pid <= 0) return 0;
    if (shm_cma_read(pid, buf, addr, len) < 0) return 0;
    return memcmp(buf, expect, len) == 0;
}

/* ---- copy jobs ----------------------------------------------------------- */

#include <sched.h>

#define IDX_MASK ((uint64_t)SHM_JOB_MAX_CHUNKS)

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

uint64_t shm_job_chunk_size(uint64_t len)
{
    uint64_t c = len / 8;
    if (c < SHM_JOB_CHUNK_MIN) c = SHM_JOB_CHUNK_MIN;
    if (c > (len + 1) / 2) c = (len + 1) / 2; /* small: two even halves */
    if (len / c >= SHM_JOB_MAX_CHUNKS) c = len / (SHM_JOB_MAX_CHUNKS - 1) + 1;
    return (c + 4095) & ~(uint64_t)4095;
}

/* Opens a job of n = ceil(len / chunk) chunks; returns its claim word
 * once all are claimed: shm_job_claim_word(gen, n, n). */
static uint64_t job_open(shm_job_t *job, uint64_t dst, uint64_t src, uint64_t len,
                         uint64_t chunk)
{
    uint64_t old = atomic_load_explicit(&job->claim, memory_order_relaxed);
    uint64_t gen = (shm_job_claim_gen(old) + 1) & 0xffffff;
    uint64_t n   = (len + chunk - 1) / chunk;
    atomic_store_explicit(&job->dst, dst, memory_order_relaxed);
    atomic_store_explicit(&job->src, src, memory_order_relaxed);
    atomic_store_explicit(&job->len, len, memory_order_relaxed);
    atomic_store_explicit(&job->chunk, chunk, memory_order_relaxed);
    atomic_store_explicit(&job->done, 0, memory_order_relaxed);
    atomic_store_explicit(&job->redo, 0, memory_order_relaxed);
    atomic_store_explicit(&job->claim, shm_job_claim_word(gen, n, 0), memory_order_release);
    return shm_job_claim_word(gen, n, n);
}

/* Claim the next chunk: its index, or -1 if none is left. */
static int64_t job_claim(shm_job_t *job)
{
    uint64_t c = atomic_load_explicit(&job->claim, memory_order_acquire);
    for (;;) {
        uint64_t n   = shm_job_claim_count(c);
        uint64_t idx = c & IDX_MASK;
        if (idx >= n) return -1;
        if (atomic_compare_exchange_weak_explicit(&job->claim, &c, c + 1, memory_order_acquire,
                                                  memory_order_acquire))
            return (int64_t)idx;
    }
}

/* No more claims. Returns how many chunks were claimed. */
static uint64_t job_close(shm_job_t *job)
{
    uint64_t c = atomic_load_explicit(&job->claim, memory_order_relaxed);
    for (;;) {
        uint64_t n   = shm_job_claim_count(c);
        uint64_t idx = c & IDX_MASK;
        if (idx >= n) return n;
        if (atomic_compare_exchange_weak_explicit(&job->claim, &c, (c & ~IDX_MASK) | n,
                                                  memory_order_relaxed, memory_order_relaxed))
            return idx;
    }
}

/* Chunk idx of a job of total bytes in chunks of chunk bytes (idx below
 * the job's chunk count). */
static void chunk_range(uint64_t chunk, uint64_t total, uint64_t idx, uint64_t *off,
                        uint64_t *len)
{
    *off = idx * chunk;
    *len = total - *off < chunk ? total - *off : chunk;
}

ssize_t shm_job_help(shm_job_t *job, pid_t peer, size_t budget, uint64_t lo, uint64_t hi)
{
    size_t copied = 0;
    while (copied < budget) {
        int64_t idx = job_claim(job);
        if (idx < 0) break;
        uint64_t off, len;
        chunk_range(atomic_load_explicit(&job->chunk, memory_order_relaxed),
                    atomic_load_explicit(&job->len, memory_order_relaxed), (uint64_t)idx, &off,
                    &len);
        uint64_t dst = atomic_load_explicit(&job->dst, memory_order_relaxed) + off;
        uint64_t src = atomic_load_explicit(&job->src, memory_order_relaxed) + off;
        int err      = -EFAULT; /* unless it is the message we announced */
        if (src >= lo && src <= hi && len <= hi - src)
            err = shm_cma_write(peer, (const void *)(uintptr_t)src, dst, len);
        if (err) {
            /* give it back: the receiver copies it */
            atomic_store_explicit(&job->redo, (uint64_t)idx + 1, memory_order_relaxed);
            atomic_fetch_add_explicit(&job->done, 1, memory_order_release);
            return err;
        }
        atomic_fetch_add_explicit(&job->done, 1, memory_order_release);
        copied += len;
    }
    return (ssize_t)copied;
}

int shm_job_run(shm_job_t *job, pid_t peer, void *dst, uint64_t src, size_t len,
                size_t chunk_size, int (*alive)(void *arg), void *arg, int *helped)
{
    uint64_t chunk = chunk_size ? chunk_size : shm_job_chunk_size(len);
    if (len / chunk >= SHM_JOB_MAX_CHUNKS) chunk = shm_job_chunk_size(len);
    *helped = 0;
    if (len <= chunk) return shm_cma_read(peer, dst, src, len); /* nothing to share */

    uint64_t end  = job_open(job, (uint64_t)(uintptr_t)dst, src, len, chunk);
    uint64_t n    = shm_job_claim_count(end);
    uint64_t mine = 0, mine_failed = 0;
    int err       = 0;
    int64_t idx;
    while ((idx = job_claim(job)) >= 0 && (uint64_t)idx < n) {
        uint64_t off, clen;
        chunk_range(chunk, len, (uint64_t)idx, &off, &clen);
        err = shm_cma_read(peer, (char *)dst + off, src + off, clen);
        if (err) {
            mine_failed = 1;
            n           = job_close(job);
            break;
        }
        atomic_fetch_add_explicit(&job->done, 1, memory_order_release);
        mine++;
    }
    /* Once every chunk is claimed, the claim word is `end` (job_close sets
     * it so too). Anything else means the job in our segment was
     * overwritten: a chunk index beyond the job, or a count that ended the
     * claims early. The peer is broken then; its counts are not to be
     * trusted (waiting for them could last as long as it lives), and
     * waiting would protect nothing: a peer that may attach to our memory
     * can write into it anyway. */
    if (atomic_load_explicit(&job->claim, memory_order_acquire) != end) return -EPROTO;
    /* Wait for the chunks the peer is copying: after we return it must not
     * write into dst any more (the core may hand the buffer elsewhere). */
    for (unsigned spins = 1;
         atomic_load_explicit(&job->done, memory_order_acquire) + mine_failed < n; spins++) {
        cpu_relax();
        if (!(spins % 256)) sched_yield(); /* it may need our cpu */
        if (!(spins % 4096) && !alive(arg)) return -ESRCH; /* it is gone: nobody writes */
    }
    if (err) return err;
    *helped       = mine < n;
    uint64_t redo = atomic_load_explicit(&job->redo, memory_order_relaxed);
    if (redo > n) return -EPROTO; /* the job in our segment was overwritten */
    if (redo) {
        uint64_t off, clen;
        chunk_range(chunk, len, redo - 1, &off, &clen);
        err = shm_cma_read(peer, (char *)dst + off, src + off, clen);
    }
    return err;
}
