/*
 * ucp_worker.c - the one UCX context and worker of the process, the table
 * of connection ids, and progress: a pscom poller that runs
 * ucp_worker_progress(), takes arrived messages with ucp_tag_probe_nb()
 * and works through the connections that have something to do.
 *
 * Sleeping: when a blocking wait of the core is about to sleep in the
 * kernel and none of our UCX operations is in flight, the poller arms the
 * worker (ucp_worker_arm() == UCS_OK) and puts the worker's event fd into
 * the core's epoll set; the core takes the poller out of its passes
 * (pscom_poller_t.sleep), so that the wait sleeps instead of napping 1 ms
 * at a time. The event fd brings it back (and leaves the epoll set again);
 * so does every operation we post (ucp_wake()), and the end of that sleep
 * (pscom_poller_t.wake). Non-blocking calls never arm it: an application
 * that polls with pscom_test_any() pays a UCX progress per call, not a
 * system call. Without connections the poller arms the worker by itself
 * after UCP_ARM_IDLE_US of idle passes and leaves the core's passes for
 * good (nothing but a stray event can come).
 */
#define _GNU_SOURCE
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <time.h>

#include "ucp_priv.h"

/* Without connections: idle time before the worker is armed and the poller
 * leaves the core's passes. */
#define UCP_ARM_IDLE_US 500
/* idle rounds of UCX progress between two clock reads (and probes), and
 * before an idle wait pauses: 64 rounds take about as long as 32 passes
 * did before a wait's pass ran several rounds (pscom_poller_t.spin) */
#define UCP_IDLE_CLOCK_EVERY 64
/* passes with progress between two probes that nothing asked for (power of 2) */
#define UCP_BUSY_PROBE_EVERY 16
/* bounded wait for endpoint close requests at fini */
#define UCP_FINI_WAIT_US 2000000
#define UCP_FINI_DRAIN_ROUNDS 64 /* progress rounds for late messages before the endpoints close */

ucp_global_t ucp_g = {
    .dirty  = PSCOM_LIST_INIT(ucp_g.dirty),
    .failed = PSCOM_LIST_INIT(ucp_g.failed),
    .prepost = PSCOM_LIST_INIT(ucp_g.prepost),
    .wiring  = PSCOM_LIST_INIT(ucp_g.wiring),
    .discards    = PSCOM_LIST_INIT(ucp_g.discards),
    .orphan_reqs = PSCOM_LIST_INIT(ucp_g.orphan_reqs),
};

uint64_t ucp_now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

/* ---- connection ids -------------------------------------------------------- */

ucp_ids_t ucp_ids;

uint64_t ucp_con_id_alloc(ucp_con_t *uc)
{
    uint32_t slot;
    if (ucp_ids.nfree) {
        slot = ucp_ids.free_slots[--ucp_ids.nfree];
    } else {
        if (ucp_ids.n == ucp_ids.cap) {
            uint32_t cap = ucp_ids.cap ? ucp_ids.cap * 2 : 64;
            if (cap > UCP_ID_SLOT_MASK + 1) return 0;
            ucp_con_t **c = realloc(ucp_ids.con, cap * sizeof(*c));
            if (!c) return 0;
            ucp_ids.con   = c;
            uint16_t *g   = realloc(ucp_ids.gen, cap * sizeof(*g));
            if (!g) return 0;
            ucp_ids.gen   = g;
            uint32_t *f   = realloc(ucp_ids.free_slots, cap * sizeof(*f));
            if (!f) return 0;
            ucp_ids.free_slots = f;
            memset(ucp_ids.gen + ucp_ids.cap, 0, (cap - ucp_ids.cap) * sizeof(*g));
            ucp_ids.cap = cap;
        }
        slot = ucp_ids.n++;
    }
    ucp_ids.gen[slot]++;
    if (!ucp_ids.gen[slot]) ucp_ids.gen[slot] = 1; /* never id 0 */
    ucp_ids.con[slot] = uc;
    if (!ucp_g.ncons++) ucp_wake(); /* the worker sleeps on a quiet fd: poll it again */
    return (uint64_t)slot | ((uint64_t)ucp_ids.gen[slot] << UCP_ID_SLOT_BITS);
}

void ucp_con_id_free(uint64_t id)
{
    if (!id || !ucp_con_lookup(id)) return;
    uint32_t slot     = (uint32_t)(id & UCP_ID_SLOT_MASK);
    ucp_ids.con[slot] = NULL;
    ucp_ids.free_slots[ucp_ids.nfree++] = slot;
    ucp_g.ncons--;
}

static void ids_fini(void)
{
    free(ucp_ids.con);
    free(ucp_ids.gen);
    free(ucp_ids.free_slots);
    memset(&ucp_ids, 0, sizeof(ucp_ids));
}

/* ---- work lists ------------------------------------------------------------------ */

/* Operations of ours in flight that need progress (pre-posted receives
 * do not, nor orphans): they keep the worker from being armed. */
static inline int ops_in_flight(void)
{
    return ucp_g.inflight > ucp_g.preposts + ucp_g.orphans || ucp_g.rx_inflight;
}

/* The worker's event fd is in the core's epoll set only while we sleep on
 * it: while the poller runs, UCX is progressed anyway, and an epoll set
 * nested in the core's would cost a little on every look at the fd set.
 * Arm the worker and put its fd there: 1 if done, 0 if we must poll on
 * (something in flight, an event pending, or no fd). */
static int arm(void)
{
    if (ops_in_flight()) return 0;
    ucs_status_t st  = ucp_worker_arm(ucp_g.worker);
    ucp_g.must_probe = 1; /* arming may have progressed the worker */
    if (st != UCS_OK) {
        if (st != UCS_ERR_BUSY) plog_dbg("ucp: ucp_worker_arm(): %s", ucs_status_string(st));
        return 0;
    }
    /* without connections nothing but a stray event can come: a quiet fd
     * keeps the fd set out of other transports' busy-polling passes */
    ucp_g.efd.quiet = ucp_g.ncons == 0;
    if (pscom_ufd_add(&ucp_g.efd) < 0) return 0;
    ucp_g.armed = 1;
    return 1;
}

static void disarm(void)
{
    ucp_g.armed = 0;
    pscom_ufd_del(&ucp_g.efd);
}

void ucp_sleep_end(void)
{
    disarm();
    pscom_poller_add(&ucp_g.poller);
}

/* pscom_poller_t.sleep and .wake: a blocking wait sleeps */
static int ucp_sleep(pscom_poller_t *poller)
{
    return arm();
}

static void ucp_sleep_over(pscom_poller_t *poller)
{
    disarm();
}

void ucp_failed(ucp_con_t *uc)
{
    if (!pscom_list_linked(&uc->fail_next)) pscom_list_add_tail(&uc->fail_next, &ucp_g.failed);
    ucp_wake();
}

static int run_dirty(void)
{
    int progress = 0;
    while (!pscom_list_empty(&ucp_g.dirty)) {
        ucp_con_t *uc = pscom_list_entry(ucp_g.dirty.next, ucp_con_t, dirty_next);
        pscom_list_del(&uc->dirty_next);
        progress = 1;
        if (uc->closed) continue;
        ucp_rx_pump(uc);
        /* the send side needs us only while UCX holds a message of it
         * (ucp_write_start hands over the rest) */
        if (uc->tx_inflight && !uc->closed) ucp_tx_progress(uc);
    }
    return progress;
}

static void run_failed(void)
{
    pscom_list_t later = PSCOM_LIST_INIT(later);
    while (!pscom_list_empty(&ucp_g.failed)) {
        ucp_con_t *uc = pscom_list_entry(ucp_g.failed.next, ucp_con_t, fail_next);
        pscom_list_del(&uc->fail_next);
        if (!ucp_con_check_failed(uc)) pscom_list_add_tail(&uc->fail_next, &later);
    }
    while (!pscom_list_empty(&later)) {
        pscom_list_t *item = later.next;
        pscom_list_del(item);
        pscom_list_add_tail(item, &ucp_g.failed);
    }
}

/* ---- progress ---------------------------------------------------------------------- */

static inline void ucp_cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

static int in_poll;

static inline void poll_idle(unsigned rounds);

/* something happened: the idle rounds, their clock and the pause start anew */
static inline void idle_end(void)
{
    ucp_g.idle_rounds   = 0;
    ucp_g.idle_since_us = 0;
    ucp_g.idle_pause    = 0;
}
static int poll_idle_clock(void);

/* The part of a pass after ucp_worker_progress() reported n events, cbs of
 * them completions of our receives, or when there is work anyway. */
static __attribute__((noinline)) int poll_work(unsigned n, unsigned cbs)
{
    int progress = 0;
    in_poll      = 1;
    /* Messages reach the unexpected queue only inside UCX progress: look
     * there only after progress did more than complete our receives (an
     * event that completed none may have queued a message; the count is
     * UCX's, one per message or fragment arrived), now and then anyway, or
     * when someone else progressed the worker, the probe loop stopped at
     * PSP_UCP_MAX_RECV, or we sent to ourselves. */
    if (n) {
        progress = 1;
        if (n > cbs || !(++ucp_g.busy_polls & (UCP_BUSY_PROBE_EVERY - 1))) ucp_g.must_probe = 1;
    }
    if (!pscom_list_empty(&ucp_g.dirty)) progress |= run_dirty();
    /* here, not in every pass: this part runs every UCP_IDLE_CLOCK_EVERY
     * idle passes (their probe) and every UCP_BUSY_PROBE_EVERY busy ones */
    if (!pscom_list_empty(&ucp_g.wiring)) ucp_wiring_check();

    if (ucp_g.must_probe) {
        ucp_tag_recv_info_t info;
        ucp_g.must_probe = 0;
        for (;;) {
            if (ucp_g.rx_inflight >= ucp_cfg.max_recv) {
                ucp_g.must_probe = 1; /* more may be waiting */
                break;
            }
            ucp_tag_message_h msg = ucp_tag_probe_nb(ucp_g.worker, 0, 0, 1, &info);
            if (!msg) break;
            ucp_rx_arrived(msg, &info);
            progress = 1;
        }
    }
    if (!pscom_list_empty(&ucp_g.dirty)) progress |= run_dirty();
    if (!pscom_list_empty(&ucp_g.failed)) {
        run_failed();
        progress = 1;
    }
    in_poll = 0;

    if (progress) {
        idle_end();
        return 1;
    }
    poll_idle(1);
    return 0;
}

/* Nothing happened in the last rounds of UCX progress. */
static inline void poll_idle(unsigned rounds)
{
    /* The core's busy wait leaves the pause between passes to the pollers.
     * Not in the first UCP_IDLE_CLOCK_EVERY idle rounds after activity
     * (until poll_idle_clock() sets idle_pause): a ping-pong's wait for its
     * answer is that short, and a pause there delays seeing the answer
     * (8 B over posix: 3 % of the latency). Longer waits pause in every
     * pass, which leaves a core's SMT sibling its share. */
    if (ucp_g.idle_pause) ucp_cpu_relax();
    ucp_g.idle_rounds += rounds;
    if (pscom_unlikely(ucp_g.idle_rounds >= UCP_IDLE_CLOCK_EVERY)) poll_idle_clock();
}

/* Before UCX progress: what the last delivery left for later
 * (ucp_rx_after), and the receives to pre-post, off the way from a message
 * to its answer. */
static __attribute__((noinline)) void poll_before(void)
{
    if (ucp_g.rx_done) ucp_rx_after();
    if (!pscom_list_empty(&ucp_g.prepost)) {
        in_poll = 1;
        ucp_rx_preposts();
        in_poll = 0;
    }
}

/* poll_work() has something to do whatever progress reported */
static inline int work_pending(void)
{
    return ucp_g.must_probe || !pscom_list_empty(&ucp_g.dirty) || !pscom_list_empty(&ucp_g.failed);
}

/* nothing but the one delivery of this pass happened: the rest of
 * poll_work() has nothing to do */
static inline int only_delivered(unsigned n)
{
    return n == 1 && !work_pending();
}

/* The probe now and then of busy passes (poll_work) is left to the next
 * pass: in a ping-pong that one runs after the answer went out, while here
 * it delayed the answer once every UCP_BUSY_PROBE_EVERY messages (about 9
 * instructions per message on the critical path, bench/instr.sh CRIT=1). */
static inline int poll_delivered(void)
{
    if (!(++ucp_g.busy_polls & (UCP_BUSY_PROBE_EVERY - 1))) ucp_g.must_probe = 1;
    idle_end();
    return 1;
}

/* After UCX progress, unless recv_cb delivered the only event: a
 * pre-posted receive to deliver (ucp_rx_fast), work, or an idle pass. */
static __attribute__((noinline)) int poll_after(unsigned n, unsigned cbs, int fast)
{
    if (ucp_g.rx_fast) { /* a pre-posted receive completed: deliver it first */
        ucp_con_t *uc = ucp_g.rx_fast;
        ucp_g.rx_fast = NULL;
        in_poll       = 1;
        ucp_rx_fast(uc);
        in_poll = 0;
        fast    = 1;
    }
    if (fast && only_delivered(n)) return poll_delivered();
    if (n || work_pending()) return poll_work(n, ucp_g.rx_cbs - cbs);
    poll_idle(1);
    return 0;
}

/* one round of UCX progress; returns its count of events */
static inline unsigned progress_round(void)
{
    ucp_g.in_poll_progress = 1;
    unsigned n             = ucp_worker_progress(ucp_g.worker);
    ucp_g.in_poll_progress = 0;
    return n;
}

static int ucp_poll(pscom_poller_t *poller)
{
    if (in_poll) return 0;
    if (ucp_g.rx_done || !pscom_list_empty(&ucp_g.prepost)) poll_before();
    unsigned cbs = ucp_g.rx_cbs;
    /* Rounds of progress while nothing happens (pscom_poller_t.spin): more
     * than one in the passes of a blocking wait, where the core's part of
     * a pass would delay seeing a message; one once the wait pauses. A
     * round asks only whether UCX reported events or recv_cb delivered:
     * what a callback records without an event counted waits for the end
     * of the rounds (8 rounds, about 0.2 us). */
    unsigned rounds = 1, n = progress_round();
    int fast        = ucp_g.rx_direct;
    if (!n && !fast && !ucp_g.idle_pause && poller->spin > 1) { /* not before a message is seen */
        rounds        = poller->spin;
        unsigned spin = rounds;
        while (--spin) {
            n    = progress_round();
            fast = ucp_g.rx_direct;
            if (n || fast) break;
        }
    }
    /* the usual pass with a message: recv_cb completed a posted receive
     * (ucp_recv.c rx_posted), and that was all */
    if (fast) {
        ucp_g.rx_direct = 0;
        if (pscom_likely(!ucp_g.rx_fast && only_delivered(n))) return poll_delivered();
    } else if (pscom_likely(!n) && !ucp_g.rx_fast && !work_pending()) {
        /* idle rounds (most of a wait), without poll_after's call and
         * checks (README.md, *8 B latency*) */
        poll_idle(rounds);
        return 0;
    }
    return poll_after(n, cbs, fast);
}

/* Every UCP_IDLE_CLOCK_EVERY idle rounds: probe anyway (cheap, and
 * robust). Without connections, also arm the worker and leave the core's
 * passes once idle for UCP_ARM_IDLE_US. */
static __attribute__((noinline)) int poll_idle_clock(void)
{
    ucp_g.idle_rounds = 0;
    ucp_g.idle_pause = 1; /* a longer wait: pause in each pass (poll_idle) */
    ucp_g.must_probe = 1;
    if (ucp_g.ncons || ops_in_flight()) return 0;
    uint64_t now = ucp_now_us();
    if (!ucp_g.idle_since_us) {
        ucp_g.idle_since_us = now;
        return 0;
    }
    if (now - ucp_g.idle_since_us < UCP_ARM_IDLE_US) return 0;
    if (arm()) { /* if the fd cannot be watched, we keep polling */
        ucp_g.idle_since_us = 0;
        pscom_poller_del(&ucp_g.poller);
    }
    return 0;
}

/* A blocking wait must poll, not nap, while ops_in_flight()
 * (pscom_poller_t.busy). A rendezvous over cma, for one, completes without
 * an event on our side while the peer copies. */
static int ucp_busy(pscom_poller_t *poller)
{
    return ops_in_flight();
}

static void efd_handler(pscom_ufd_t *ufd, uint32_t revents)
{
    ucp_g.must_probe = 1;
    if (ucp_g.armed) ucp_sleep_end();
    ucp_poll(&ucp_g.poller);
}

/* ---- set-up and tear-down ---------------------------------------------------------- */

int ucp_worker_ensure(void)
{
    ucs_status_t st;
    ucp_config_t *config;
    const char *what;
    int held = 1; /* UCX's log messages held back (ucp_log.c) */

    if (ucp_g.worker) return 0;
    if (ucp_g.init_failed) return -1;

    ucp_log_start();
    ucp_log_hold();
    what = "ucp_config_read()";
    st   = ucp_config_read(NULL, NULL, &config);
    if (st != UCS_OK) goto err_config;

    ucp_params_t params = {
        .field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_REQUEST_SIZE |
                      UCP_PARAM_FIELD_MT_WORKERS_SHARED | UCP_PARAM_FIELD_NAME,
        .features          = UCP_FEATURE_TAG | UCP_FEATURE_WAKEUP,
        .request_size      = sizeof(ucp_req_t),
        .mt_workers_shared = 0,
        .name              = "pscom",
    };
    what = "ucp_init()";
    st   = ucp_init(&params, config, &ucp_g.ctx);
    ucp_config_release(config);
    if (st != UCS_OK) goto err_config;

    ucp_worker_params_t wparams = {
        .field_mask  = UCP_WORKER_PARAM_FIELD_THREAD_MODE,
        .thread_mode = UCS_THREAD_MODE_SERIALIZED, /* callers hold the pscom lock */
    };
    what = "ucp_worker_create()";
    st   = ucp_worker_create(ucp_g.ctx, &wparams, &ucp_g.worker);
    if (st != UCS_OK) goto err_worker;

    what = "ucp_worker_get_address()";
    st   = ucp_worker_get_address(ucp_g.worker, &ucp_g.addr, &ucp_g.addr_len);
    if (st != UCS_OK) goto err_address;
    if (ucp_g.addr_len + UCP_BLOB_HDR > PSCOM_PRECON_BLOB_MAX) {
        ucp_log_release(0);
        held = 0;
        plog_err("ucp: UCX cannot be used: its worker address (%zu bytes) does not fit the "
                 "handshake (%d bytes); restrict UCX_TLS/UCX_NET_DEVICES",
                 ucp_g.addr_len, PSCOM_PRECON_BLOB_MAX - UCP_BLOB_HDR);
        st = UCS_OK; /* reported */
        goto err_size;
    }

    int efd;
    what = "ucp_worker_get_efd()";
    st   = ucp_worker_get_efd(ucp_g.worker, &efd);
    if (st != UCS_OK) goto err_efd;

    what = "ucp_dt_create_generic()";
    st   = ucp_dt_create_generic(&ucp_partial_ops, NULL, &ucp_g.dt_partial);
    if (st != UCS_OK) goto err_efd;

    ucp_log_release(0);
    held = 0;
    ucp_g.efd          = (pscom_ufd_t){.fd = efd, .events = EPOLLIN, .handler = efd_handler};
    ucp_g.poller.poll  = ucp_poll;
    ucp_g.poller.busy  = ucp_busy;
    ucp_g.poller.sleep = ucp_sleep;
    ucp_g.poller.wake  = ucp_sleep_over;
    ucp_g.armed        = 0;
    pscom_poller_add(&ucp_g.poller);
    plog_dbg("ucp: UCX %s, worker address %zu bytes", ucp_get_version_string(), ucp_g.addr_len);
    return 0;

err_efd:
err_size:
    ucp_worker_release_address(ucp_g.worker, ucp_g.addr);
    ucp_g.addr = NULL;
err_address:
    ucp_worker_destroy(ucp_g.worker);
    ucp_g.worker = NULL;
err_worker:
    ucp_cleanup(ucp_g.ctx);
    ucp_g.ctx = NULL;
err_config:
    if (st != UCS_OK) {
        const char *why = held ? ucp_log_release(1) : NULL;
        plog_err("ucp: UCX cannot be initialised (%s: %s%s%s); the ucp transport is disabled",
                 what, ucs_status_string(st), why ? ": " : "", why ? why : "");
    }
    ucp_log_stop();
    ucp_g.init_failed = 1;
    return -1;
}

/* At exit: what the orphans (operations that never ended) hold of ours, a
 * receive's buffer, a partial datatype's state, the core's buffer of an
 * unexpected message (ucp_rx_close_end), to be freed once the worker is
 * gone: UCX keeps their requests until ucp_worker_destroy()
 * and may use that until then. Until 2026-11-29 it leaked (24 bytes of a
 * truncating receive cut off at a close, LeakSanitizer in
 * itest_ucp_garbage ucp_garbage_late_data.ucp-tcp). */
static void **orphans_mem(size_t *n, size_t *nheld)
{
    size_t cap = 0;
    pscom_list_t *pos;
    pscom_list_for_each(pos, &ucp_g.orphan_reqs) cap += 3;
    *n = *nheld = 0;
    void **mem  = cap ? malloc(cap * sizeof(*mem)) : NULL;
    if (!mem) return NULL; /* none, or left to the exit */
    /* for free() from the front, the core's buffers (r->held) from the back */
    while (!pscom_list_empty(&ucp_g.orphan_reqs)) {
        ucp_req_t *r = pscom_list_entry(ucp_g.orphan_reqs.next, ucp_req_t, pep_next);
        pscom_list_del(&r->pep_next);
        if (r->buf) mem[(*n)++] = r->buf;
        if (r->partial) mem[(*n)++] = r->partial;
        if (r->held) mem[cap - ++*nheld] = r->held;
        r->buf     = NULL;
        r->partial = NULL;
        r->held    = NULL;
    }
    memmove(mem + *n, mem + cap - *nheld, *nheld * sizeof(*mem));
    return mem;
}

/* At exit: every message nobody took is dropped. 1 if there was one. */
static int drop_unexpected(void)
{
    ucp_tag_recv_info_t info;
    ucp_tag_message_h msg;
    int dropped = 0;
    while ((msg = ucp_tag_probe_nb(ucp_g.worker, 0, 0, 1, &info))) {
        ucp_rx_discard(msg, &info);
        dropped = 1;
    }
    return dropped;
}

void ucp_worker_fini(void)
{
    if (!ucp_g.worker) return;
    if (ucp_g.rx_done) ucp_req_release(ucp_g.rx_done);
    ucp_g.rx_done = NULL;
    /* what arrived for closed connections, dropped while the endpoints are
     * still open: UCX 1.13 receives a rendezvous announcement through its
     * endpoint, and one on an endpoint to this process that was closed
     * failed an assertion (ucp_worker.inl, with UCX_RNDV_THRESH=0 even a
     * BYE is one) */
    for (unsigned round = 0; round < UCP_FINI_DRAIN_ROUNDS; round++)
        if (!drop_unexpected() && !ucp_worker_progress(ucp_g.worker)) break;
    ucp_peers_fini(); /* endpoints no connection uses any more */
    /* let graceful endpoint closes finish (bounded: a dead peer never
     * answers), and drop what nobody took (late BYEs of closed connections,
     * say): UCX warns about each message left at ucp_worker_destroy() */
    uint64_t t0  = ucp_now_us();
    int hopeless = 0;
    for (unsigned pass = 0;; pass++) {
        drop_unexpected();
        if (!ucp_g.inflight || ucp_now_us() - t0 >= UCP_FINI_WAIT_US) break;
        /* Every endpoint is closed or closing. What is left in flight
         * after some rounds (for the callbacks of cancelled operations)
         * can end only with a close under way whose peer still takes
         * messages. Not with one whose peer has closed its side (over
         * shared memory, a peer that exits leaves its full FIFO behind),
         * nor on an endpoint whose close has ended (FORCE: over shared
         * memory UCX 1.13 leaves a rendezvous send to a dead peer in
         * flight): waiting would only wait out the bound. */
        if (pass % 64 == 63 && (hopeless = !ucp_peers_closes_may_end())) break;
        ucp_worker_progress(ucp_g.worker);
    }
    ucp_peers_abandon();
    /* drops still in flight (a rendezvous whose sender has gone) may never
     * end: their memory goes after the worker, as the orphans' (until
     * 2026-11-29 it leaked, seen with UCX_RNDV_THRESH=0) */
    while (!pscom_list_empty(&ucp_g.discards))
        ucp_req_orphan(pscom_list_entry(ucp_g.discards.next, ucp_req_t, pep_next));
    if (hopeless)
        plog_dbg("ucp: %u UCX operations left in flight at exit: they cannot end (their "
                 "endpoints are closed or their peers gone)",
                 ucp_g.inflight);
    else if (ucp_g.inflight)
        plog_dbg("ucp: %u UCX operations still in flight at exit after %u ms", ucp_g.inflight,
                 (unsigned)(UCP_FINI_WAIT_US / 1000));

    pscom_poller_del(&ucp_g.poller);
    pscom_ufd_del(&ucp_g.efd); /* if armed */
    size_t nmem, nheld;
    void **mem = orphans_mem(&nmem, &nheld);
    ucp_dt_destroy(ucp_g.dt_partial);
    ucp_worker_release_address(ucp_g.worker, ucp_g.addr);
    ucp_worker_destroy(ucp_g.worker);
    for (size_t i = 0; i < nmem; i++) free(mem[i]);
    for (size_t i = 0; i < nheld; i++) pscom_read_pin_release(mem[nmem + i]);
    free(mem);
    ucp_cleanup(ucp_g.ctx);
    ucp_log_stop();
    ids_fini();
    ucp_g.worker = NULL;
    ucp_g.ctx    = NULL;
    ucp_g.addr   = NULL;
    ucp_g.armed  = 0;
    ucp_g.inflight = ucp_g.orphans = ucp_g.rx_inflight = ucp_g.ncons = 0;
    pscom_list_init(&ucp_g.dirty);
    pscom_list_init(&ucp_g.failed);
    pscom_list_init(&ucp_g.prepost);
    pscom_list_init(&ucp_g.wiring);
    pscom_list_init(&ucp_g.discards);
    pscom_list_init(&ucp_g.orphan_reqs);
}
