/*
 * itest_shm_units: the shm plugin's building blocks between two real
 * processes (fork, an anonymous shared mapping; no pscom):
 *
 *  - ring (shm_ring.h): a 16 KiB ring, 60,000 packets of random sizes
 *    (mostly small, a third up to the largest payload), so it wraps (about
 *    10,000 times) and is full all the time; every packet arrives once, in
 *    order, with its length, head length, type and content. (300,000
 *    until 2026-11-28: a hand-over between the two processes waits for
 *    the other one's time slice when the cpus are busy, about 1 ms each
 *    under ASan with four cpu hogs on two cpus, and the ring then took
 *    more than the watchdog's 60 s; now 18 s there, 1 s alone);
 *  - copy jobs (shm_cma.c): 8 MiB copied by the receiver with the sender
 *    helping, 30 times; then with a sender that refuses the upper half
 *    (its chunk comes back and the receiver copies it; the sender stops
 *    helping, as the plugin does), 30 times; then with no helper at all.
 *    The destination equals the source every time;
 *  - the sweep of segments (shm_segment.c): one of a process that is gone
 *    is removed, one of a live process is kept, and so is any younger than
 *    the age asked for (until 2026-11-29 a process killed while its peer
 *    declined shm left its segment in /dev/shm for good);
 *  - a broken sender that overwrites the job's claim word while the
 *    receiver runs it (a chunk index beyond the job; a count that ends the
 *    claims early): the receiver returns -EPROTO at once, without waiting
 *    for chunks nobody copies, and writes nothing past its destination (a
 *    guard page behind it).
 */
#define _GNU_SOURCE
#include "pscom_testutil.h"
#include "shm_cma.h"
#include "shm_ring.h"
#include "shm_segment.h"

#include <errno.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sched.h>
#include <sys/wait.h>
#include <unistd.h>

static uint32_t rnd(uint32_t *s)
{
    *s = *s * 1103515245u + 12345u;
    return *s >> 8;
}

/* One turn of a busy wait for the other process. Every 256th gives the cpu
 * away: with more runnable processes than cpus (tests in parallel) the
 * other one may be waiting for ours, and a pure spin then costs a whole
 * time slice per hand-over (this test took more than 60 s instead of 3). */
static void spin(unsigned *spins)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
    if (!(++*spins % 256)) sched_yield();
}

/* ---- ring ---------------------------------------------------------------------- */

#define RING    (16u << 10)
#define PACKETS 60000u

static uint32_t next_len(uint32_t *s, uint32_t maxp)
{
    return rnd(s) % 3 ? rnd(s) % 200 : rnd(s) % (maxp + 1);
}

static void ring_test(void)
{
    char *mem = mmap(NULL, RING + 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    TU_ASSERT(mem != MAP_FAILED);
    _Atomic uint64_t *consumed = (_Atomic uint64_t *)mem;
    char *ring                 = mem + 4096;
    uint32_t maxp              = shm_ring_max_payload(RING);

    pid_t pid = fork();
    TU_ASSERT(pid >= 0);
    if (!pid) { /* producer; it never outlives us */
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() == 1) _exit(1);
        shm_ring_tx_t tx = {.ring = ring, .consumed = consumed, .mask = RING - 1};
        uint32_t s       = 1;
        for (uint32_t i = 0; i < PACKETS; i++) {
            uint32_t len = next_len(&s, maxp);
            shm_pkt_t *p;
            unsigned spins = 0;
            while (!(p = shm_ring_reserve(&tx, len))) spin(&spins);
            unsigned char *d = shm_pkt_payload(p);
            for (uint32_t k = 0; k < len; k++) d[k] = (unsigned char)(i + k * 13);
            shm_ring_publish(&tx, p, len, i % 3 ? SHM_PKT_DATA : SHM_PKT_ACK, i & 0xffff,
                             i % SHM_CL);
        }
        _exit(0);
    }
    shm_ring_rx_t rx = {.ring = ring, .consumed = consumed, .mask = RING - 1};
    uint32_t s       = 1;
    for (uint32_t i = 0; i < PACKETS; i++) {
        uint32_t len = next_len(&s, maxp);
        shm_pkt_in_t p;
        unsigned spins = 0;
        int there;
        while (!(there = shm_ring_peek(&rx, &p))) spin(&spins);
        TU_ASSERT_EQ(there, 1);
        TU_ASSERT_EQ(p.len, len);
        TU_ASSERT_EQ(shm_pkt_head_len(p.info), i & 0xffff);
        TU_ASSERT_EQ(shm_pkt_gap(p.info), i % SHM_CL);
        TU_ASSERT_EQ(shm_pkt_type(p.info), i % 3 ? SHM_PKT_DATA : SHM_PKT_ACK);
        const unsigned char *d = (const unsigned char *)p.payload;
        for (uint32_t k = 0; k < len; k++) {
            if (d[k] != (unsigned char)(i + k * 13))
                TU_FAIL("packet %u: byte %u is 0x%02x", i, k, d[k]);
        }
        shm_ring_consume(&rx, &p);
    }
    TU_ASSERT(!shm_ring_ready(&rx));
    int st;
    TU_ASSERT_EQ(tu_sys_waitpid(pid, &st), pid);
    TU_ASSERT(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    munmap(mem, RING + 4096);
    tu_log("ring: %u packets through %u bytes", PACKETS, RING);
}

/* ---- copy jobs ------------------------------------------------------------------- */

#define JOB_LEN (8u << 20)
#define ROUNDS  30

typedef struct ctl {
    shm_job_t job;
    _Alignas(64) volatile uint32_t stop; /* the round is over: helper, exit */
    uint64_t claim0;                     /* the claim word before the round */
} ctl_t;

static int always_alive(void *arg)
{
    (void)arg;
    return 1;
}

/* One round: a helper process (refusing the upper half of the message if
 * refuse) copies while we run the job into dst (zeroed first). Returns
 * whether it helped. */
static int job_round(ctl_t *ctl, unsigned char *dst, unsigned char *src, int refuse)
{
    pid_t receiver = getpid();
    ctl->stop      = 0;
    memset(dst, 0, JOB_LEN);
    pid_t helper = fork();
    TU_ASSERT(helper >= 0);
    if (!helper) { /* it never outlives us */
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != receiver) _exit(1);
        uint64_t lo = (uint64_t)(uintptr_t)src;
        uint64_t hi = lo + (refuse ? JOB_LEN / 2 : JOB_LEN);
        /* like the plugin: no more help after a failure */
        unsigned spins = 0;
        while (!ctl->stop && shm_job_help(&ctl->job, receiver, 1u << 20, lo, hi) >= 0)
            spin(&spins);
        while (!ctl->stop) spin(&spins);
        _exit(0);
    }
    int helped = 0;
    TU_ASSERT_EQ(shm_job_run(&ctl->job, helper, dst, (uint64_t)(uintptr_t)src, JOB_LEN, 0,
                             always_alive, NULL, &helped),
                 0);
    TU_ASSERT_MEM_EQ(dst, src, JOB_LEN);
    ctl->stop = 1;
    int st;
    TU_ASSERT_EQ(tu_sys_waitpid(helper, &st), helper);
    TU_ASSERT(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    return helped;
}

/* ---- a broken sender ---- */

enum { BREAK_INDEX, BREAK_COUNT };
#define BREAK_CHUNK 4096u /* 2048 chunks: the receiver takes milliseconds */

/* A receiver waiting for chunks of an overwritten job would wait as long
 * as the peer lives: fail instead (about 1 s of waiting). */
static int alive_a_while(void *arg)
{
    unsigned *calls = arg;
    if (++*calls > 4000) TU_FAIL("the receiver waits for a job the peer overwrote");
    return 1;
}

/* The helper: as soon as the receiver opened its job, overwrite the claim
 * word (same generation) so that the next claim is index n + 5 of a count
 * of 2^20 - 1, or index 5 of a count of 1. */
static void breaker(ctl_t *ctl, int how)
{
    unsigned spins = 0;
    uint64_t c;
    while ((c = atomic_load(&ctl->job.claim)) == ctl->claim0 && !ctl->stop) spin(&spins);
    if (ctl->stop) return; /* the receiver was done first */
    uint64_t n   = shm_job_claim_count(c);
    uint64_t cnt = how == BREAK_INDEX ? SHM_JOB_MAX_CHUNKS : 1;
    uint64_t idx = how == BREAK_INDEX ? n + 5 : 5;
    atomic_store(&ctl->job.claim, shm_job_claim_word(shm_job_claim_gen(c), cnt, idx));
    while (!ctl->stop) spin(&spins); /* its memory is the source */
}

/* Rounds with a breaking helper until one breaks the job before the
 * receiver is done (a round it missed must copy correctly). */
static void break_test(ctl_t *ctl, unsigned char *dst, unsigned char *src, int how)
{
    unsigned missed = 0;
    for (;;) {
        pid_t receiver = getpid();
        ctl->stop      = 0;
        ctl->claim0    = atomic_load(&ctl->job.claim);
        memset(dst, 0, JOB_LEN);
        pid_t helper = fork();
        TU_ASSERT(helper >= 0);
        if (!helper) {
            prctl(PR_SET_PDEATHSIG, SIGKILL);
            if (getppid() != receiver) _exit(1);
            breaker(ctl, how);
            _exit(0);
        }
        unsigned calls = 0;
        int helped     = 0;
        int r = shm_job_run(&ctl->job, helper, dst, (uint64_t)(uintptr_t)src, JOB_LEN,
                            BREAK_CHUNK, alive_a_while, &calls, &helped);
        ctl->stop = 1;
        int st;
        TU_ASSERT_EQ(tu_sys_waitpid(helper, &st), helper);
        TU_ASSERT(WIFEXITED(st) && WEXITSTATUS(st) == 0);
        if (r == -EPROTO) break;
        TU_ASSERT_EQ(r, 0); /* the helper came too late */
        TU_ASSERT_MEM_EQ(dst, src, JOB_LEN);
        if (++missed == 50) TU_FAIL("the helper never overwrote a job in time (50 rounds)");
    }
    tu_log("copy job with %s: -EPROTO (after %u rounds the helper missed)",
           how == BREAK_INDEX ? "a chunk index beyond it" : "a count ending the claims early",
           missed);
}

static void job_test(void)
{
    ctl_t *ctl = mmap(NULL, sizeof(ctl_t), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
                      -1, 0);
    TU_ASSERT(ctl != MAP_FAILED);
    unsigned char *src = tu_malloc(JOB_LEN); /* the same address in the helper (fork) */
    tu_fill(src, JOB_LEN, 4711);
    /* One destination for all rounds, not inherited by the helpers: no
     * fresh pages and no copy-on-write faults in each round (11 us a page
     * on some hosts, 30 rounds of 2048 pages twice). */
    unsigned char *dst = mmap(NULL, JOB_LEN + 4096, PROT_READ | PROT_WRITE,
                              MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    TU_ASSERT(dst != MAP_FAILED);
    TU_ASSERT_EQ(madvise(dst, JOB_LEN, MADV_DONTFORK), 0);
    TU_ASSERT_EQ(mprotect(dst + JOB_LEN, 4096, PROT_NONE), 0); /* a write past it faults */

    for (int refuse = 0; refuse < 2; refuse++) {
        unsigned helped = 0;
        for (unsigned r = 0; r < ROUNDS; r++) helped += (unsigned)job_round(ctl, dst, src, refuse);
        tu_log("copy jobs%s: the sender helped in %u of %u rounds",
               refuse ? " (sender refusing the upper half)" : "", helped, ROUNDS);
    }

    /* nobody helps: the receiver copies everything */
    memset(dst, 0, JOB_LEN);
    int helped = 1;
    TU_ASSERT_EQ(shm_job_run(&ctl->job, getpid(), dst, (uint64_t)(uintptr_t)src, JOB_LEN, 0,
                             always_alive, NULL, &helped),
                 0);
    TU_ASSERT_EQ(helped, 0);
    TU_ASSERT_MEM_EQ(dst, src, JOB_LEN);

    break_test(ctl, dst, src, BREAK_INDEX);
    break_test(ctl, dst, src, BREAK_COUNT);
    munmap(dst, JOB_LEN + 4096);
    free(src);
    munmap(ctl, sizeof(ctl_t));
}

/* ---- the sweep of segments whose creator is gone ---------------------------- */

static void make_segment(const char *name)
{
    int fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL, 0600);
    TU_ASSERT_MSG(fd >= 0, "shm_open(%s): %s", name, strerror(errno));
    close(fd);
}

static int segment_exists(const char *name)
{
    int fd = shm_open(name, O_RDONLY, 0);
    if (fd >= 0) close(fd);
    return fd >= 0;
}

static void sweep_test(void)
{
    pid_t dead = fork();
    TU_ASSERT(dead >= 0);
    if (!dead) _exit(0);
    int status;
    TU_ASSERT_EQ(tu_sys_waitpid(dead, &status), dead);
    char gone[64], alive[64];
    snprintf(gone, sizeof(gone), "/pscom-shm-%d-00000000deadbeef", (int)dead);
    snprintf(alive, sizeof(alive), "/pscom-shm-%d-00000000a11ce000", (int)getpid());
    make_segment(gone);
    make_segment(alive);
    shm_seg_sweep(3600); /* both young: kept */
    TU_ASSERT(segment_exists(gone));
    TU_ASSERT(segment_exists(alive));
    TU_ASSERT_GE(shm_seg_sweep(0), 1);
    TU_ASSERT_MSG(!segment_exists(gone), "the segment of a process gone is still there");
    TU_ASSERT_MSG(segment_exists(alive), "the segment of a live process was removed");
    shm_unlink(alive);
}

static int run(tu_ctx_t *ctx)
{
    (void)ctx;
    ring_test();
    job_test();
    sweep_test();
    return 0;
}

int main(void)
{
    return tu_run("shm_units", 0, run, NULL, NULL);
}
