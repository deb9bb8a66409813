/*
 * pscom_progress.c - epoll loop, polled transports, blocking waits.
 */
#include "pscom_progress.h"

#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <sched.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "pscom_config.h"
#include "pscom_core.h"
#include "pscom_log.h"
#include "pscom_plugin.h"
#include "pscom_req.h"
#include "pscom_sock.h"
#include "pscom_util.h"

#define MAX_EVENTS   64
#define SLEEP_MAX_MS 1000 /* a sleeping wait wakes up at least this often */
/* While polled transports are active, a non-blocking pass looks at the fd
 * set (epoll_wait: 0.16-1.2 us, on a VM with page-table isolation the
 * latter) only every fd_every passes while an fd that is not quiet is
 * registered (a tcp connection, a running handshake): a system call per
 * pass would dominate shared-memory latency. While the fds brought events
 * in the last FD_ACTIVE_NS, fd_every is FD_POLL_EVERY; after that it
 * follows the measured cost of the call against that of a pass, so that
 * looking takes about 1/FD_POLL_SHARE of the busy-polling time, up to
 * FD_POLL_MAX passes (400 passes here, 53 where the call costs 0.16 us).
 * With 32 passes of 30 ns and a call of 1.2 us, an idle tcp connection
 * cost the 8 B latency over shm 1.87x (bench/mixed.sh; now 1.22x), while
 * a tcp message that comes after a millisecond of silence now waits about
 * 6 us longer to be seen. */
#define FD_POLL_EVERY 32
#define FD_POLL_SHARE 10
#define FD_POLL_MAX   1024
#define FD_ACTIVE_NS  1000000
/* In any case, and only so while all fds are quiet (listeners, peer-death
 * detectors, the wake-up fd: pscom_ufd_t.quiet), once the coarse clock has
 * ticked (1-4 ms) since the last look: every FD_CLOCK_EVERY skipped passes
 * a look at that clock (5 ns). A count of passes alone would cost a
 * ping-pong a system call every few dozen round trips (8 B over UCX's
 * shared memory, 1.2 us per call here: 8-15 % of the latency with 1024
 * passes), and look too seldom when passes are far apart (an application
 * calling pscom_test_any() now and then). */
#define FD_CLOCK_EVERY 16
/* An idle blocking wait reads the clock every CLOCK_EVERY passes. */
#define CLOCK_EVERY 16
/* ... and offers the cpu every YIELD_EVERY_US while it spins: a peer that
 * shares our cpu (more processes than cpus) cannot move before that. With
 * nothing else to run, sched_yield() returns at once (a system call per
 * 20 us of waiting); a short wait (a ping-pong's) never gets there. Once a
 * yield has let another process run (it took YIELD_SWITCHED_US or more),
 * the cpu is taken to be shared, and waits offer it in every idle pass,
 * until YIELD_SHARED_HOLD yields in a row found nobody else to run (a
 * quick turn of the peer looks like that now and then): a peer on our cpu
 * then answers after a few microseconds, not after 20 of our spinning. */
#define YIELD_EVERY_US    20
#define YIELD_SWITCHED_US 5
#define YIELD_SHARED_HOLD 64
static unsigned cpu_shared; /* yields left to find the cpu not shared */

static int epfd = -1;

/* Threaded mode: a thread sleeping in epoll_wait must wake up when another
 * thread completed something it may wait for. sleeping: threads between
 * letting go of the lock for epoll_wait and taking it back (their events
 * may point at objects: deferred frees wait for them). in_epoll: those of
 * them still inside epoll_wait, the ones a wake-up can reach; read and
 * written without the lock. A thread that is back from epoll_wait and waits
 * for the lock needs no wake-up: waking "it" would only wake the next
 * poller, which woke the next... (with 4 threads on 2 cpus, the thread that
 * held the lock fed itself its own wake-ups as progress, never went idle
 * and never let the others have the lock: itest_threads_conns). */
static int wake_fd = -1;
static unsigned in_epoll;
/* A wake-up ends the epoll_wait of one thread only (the kernel wakes one
 * waiter per event, and the first to read the counter empties it): each
 * sleeper notes the generation of wake-ups it went to sleep in, and one
 * that comes back passes the wake-up on while a sleeper of an older
 * generation is left (until 2026-11-29 the others slept on for up to 1 s,
 * itest_threads_wake). Both under the lock. */
typedef struct sleeper {
    struct sleeper *next;
    unsigned gen;
} sleeper_t;
static sleeper_t *sleeping; /* NULL: none */
static unsigned wake_gen;
static pscom_ufd_t wake_ufd;
static pscom_list_t pollers = PSCOM_LIST_INIT(pollers);
static unsigned pollers_active;
static pscom_list_t pollers_asleep = PSCOM_LIST_INIT(pollers_asleep); /* pscom_poller_t.sleep */
static unsigned hot_fds; /* registered fds that are not quiet */
static unsigned ufds;    /* registered fds, the wake-up fd not counted */

static pscom_list_t timers = PSCOM_LIST_INIT(timers);

typedef struct deferred {
    struct deferred *next;
    void *ptr;
} deferred_t;
static deferred_t *deferred_head;
static unsigned deferred_count;

static void wake_handler(pscom_ufd_t *ufd, uint32_t revents)
{
    uint64_t v;
    if (read(ufd->fd, &v, sizeof(v)) < 0) { /* drained by another thread */
    }
}

static void wake_one(void)
{
    uint64_t one = 1;
    if (write(wake_fd, &one, sizeof(one)) < 0) { /* counter full: already signalled */
    }
}

static void wake_sleepers(void)
{
    wake_gen++;
    wake_one();
}

/* Back from epoll_wait (lock held): me out of the sleepers. */
static void sleeper_back(sleeper_t *me)
{
    sleeper_t **pp = &sleeping;
    while (*pp != me) pp = &(*pp)->next;
    *pp = me->next;
}

/* After the events of a sleep (a wake-up read and emptied): passed on if a
 * sleeper has not had it. (Written before the read, it would wake the next
 * sleeper's epoll_wait only for it to find the counter empty and sleep on.) */
static void wake_pass_on(void)
{
    for (sleeper_t *s = sleeping; s; s = s->next) {
        if (s->gen != wake_gen) {
            wake_one();
            return;
        }
    }
}

void pscom_wake_sleepers_on_progress(void)
{
    if (__atomic_load_n(&in_epoll, __ATOMIC_SEQ_CST) && wake_fd >= 0) wake_sleepers();
}

int pscom_progress_init(void)
{
    if (epfd >= 0) return 0;
    epfd = epoll_create1(EPOLL_CLOEXEC);
    if (epfd < 0) {
        plog_err("epoll_create1() failed: %m");
        return -1;
    }
    wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (wake_fd >= 0) {
        wake_ufd = (pscom_ufd_t){
            .fd = wake_fd, .events = EPOLLIN, .handler = wake_handler, .quiet = 1};
        pscom_ufd_add(&wake_ufd);
    }
    return 0;
}

void pscom_progress_fini(void)
{
    /* threads asleep in epoll_wait at exit (their requests never came):
     * the fds stay for the process's end, not closed under them */
    if (sleeping) return;
    if (wake_fd >= 0) {
        pscom_ufd_del(&wake_ufd);
        close(wake_fd);
    }
    wake_fd = -1;
    if (epfd >= 0) close(epfd);
    epfd = -1;
}

int pscom_ufd_add(pscom_ufd_t *ufd)
{
    struct epoll_event ev = {.events = ufd->events, .data.ptr = ufd};
    if (pscom_progress_init() < 0) return -1;
    if (epoll_ctl(epfd, EPOLL_CTL_ADD, ufd->fd, &ev) < 0) {
        plog_err("epoll_ctl(ADD, fd %d) failed: %m", ufd->fd);
        return -1;
    }
    ufd->registered = 1;
    if (!ufd->quiet) hot_fds++;
    if (ufd != &wake_ufd) ufds++;
    return 0;
}

int pscom_ufd_set_events(pscom_ufd_t *ufd, uint32_t events)
{
    if (ufd->events == events) return 0;
    ufd->events           = events;
    struct epoll_event ev = {.events = events, .data.ptr = ufd};
    if (epoll_ctl(epfd, EPOLL_CTL_MOD, ufd->fd, &ev) < 0) {
        plog_err("epoll_ctl(MOD, fd %d) failed: %m", ufd->fd);
        return -1;
    }
    return 0;
}

void pscom_ufd_del(pscom_ufd_t *ufd)
{
    if (!ufd->registered) return;
    epoll_ctl(epfd, EPOLL_CTL_DEL, ufd->fd, NULL);
    ufd->registered = 0;
    if (!ufd->quiet) hot_fds--;
    if (ufd != &wake_ufd) ufds--;
}

/* out of the list of sleepers, if there */
static void poller_unsleep(pscom_poller_t *poller)
{
    if (!poller->asleep) return;
    pscom_list_del(&poller->next);
    poller->asleep = 0;
}

void pscom_poller_add(pscom_poller_t *poller)
{
    if (poller->active) return;
    poller_unsleep(poller);
    pscom_list_add_tail(&poller->next, &pollers);
    poller->active = 1;
    pollers_active++;
}

void pscom_poller_del(pscom_poller_t *poller)
{
    poller_unsleep(poller);
    if (!poller->active) return;
    pscom_list_del(&poller->next);
    poller->active = 0;
    pollers_active--;
}

/* A blocking wait is about to sleep in the kernel: the pollers that can be
 * woken through an fd arm it and leave (pscom_poller_t.sleep). */
static void pollers_sleep(void)
{
    pscom_list_t *pos, *tmp;
    pscom_list_for_each_safe(pos, tmp, &pollers) {
        pscom_poller_t *p = pscom_list_entry(pos, pscom_poller_t, next);
        if (!p->sleep || !p->sleep(p)) continue;
        pscom_poller_del(p);
        pscom_list_add_tail(&p->next, &pollers_asleep);
        p->asleep = 1;
    }
}

/* ... and has slept: the pollers still out come back (their fd out again) */
static void pollers_wake(void)
{
    while (!pscom_list_empty(&pollers_asleep)) {
        pscom_poller_t *p = pscom_list_entry(pollers_asleep.next, pscom_poller_t, next);
        poller_unsleep(p);
        if (p->wake) p->wake(p);
        pscom_poller_add(p);
    }
}

void pscom_defer_free(void *ptr)
{
    deferred_t *d = malloc(sizeof(*d));
    if (!d) {
        free(ptr); /* cannot defer: the caller made sure nothing refers to it */
        return;
    }
    d->ptr        = ptr;
    d->next       = deferred_head;
    deferred_head = d;
    deferred_count++;
}

static void free_chain(deferred_t *d)
{
    while (d) {
        deferred_t *next = d->next;
        free(d->ptr);
        free(d);
        d = next;
    }
}

static void free_deferred(void)
{
    free_chain(deferred_head);
    deferred_head  = NULL;
    deferred_count = 0;
}

/* Frees kept from an API call: the objects closed last stay until the
 * next progress pass (a use of one after its close meets its cleared magic,
 * spec 5.10, and not freed memory), what is older goes. */
#define DEFERRED_KEEP 16

void pscom_free_deferred_now(void)
{
    if (deferred_count <= DEFERRED_KEEP || sleeping) return;
    deferred_t *keep_last = deferred_head; /* the list is newest first */
    for (unsigned i = 1; i < DEFERRED_KEEP; i++) keep_last = keep_last->next;
    free_chain(keep_last->next);
    keep_last->next = NULL;
    deferred_count  = DEFERRED_KEEP;
}

/* ---- timers --------------------------------------------------------------- */

void pscom_timer_start(pscom_timer_t *timer, unsigned ms)
{
    pscom_timer_stop(timer);
    timer->due_us = pscom_time_us() + (uint64_t)ms * 1000u;
    /* mostly armed in due order: search for the place from the tail */
    pscom_list_t *pos = timers.prev;
    while (pos != &timers &&
           pscom_list_entry(pos, pscom_timer_t, next)->due_us > timer->due_us)
        pos = pos->prev;
    pscom_list_add(&timer->next, pos);
    timer->armed = 1;
}

void pscom_timer_stop(pscom_timer_t *timer)
{
    if (!timer->armed) return;
    pscom_list_del(&timer->next);
    timer->armed = 0;
}

/* Run the due timers; lower *timeout_ms to the next one. Returns non-zero
 * if any ran. */
static int run_timers(int *timeout_ms)
{
    int ran      = 0;
    uint64_t now = pscom_time_us();
    while (!pscom_list_empty(&timers)) {
        pscom_timer_t *t = pscom_list_entry(timers.next, pscom_timer_t, next);
        if (t->due_us > now) {
            uint64_t ms = (t->due_us - now + 999) / 1000;
            if (*timeout_ms < 0 || (uint64_t)*timeout_ms > ms) *timeout_ms = (int)ms;
            break;
        }
        pscom_timer_stop(t);
        t->fn(t);
        ran = 1;
    }
    if (ran) {
        *timeout_ms = 0;
        pscom.progress_counter++;
    }
    return ran;
}

/* blocking waits running their passes (pscom_wait_until; nested in a
 * completion callback, or other threads'): the one active poller may spin
 * (pscom_poller_t.spin) */
static unsigned waiters;

static inline int poll_transports(void)
{
    int progress = 0;
    pscom_list_t *pos, *tmp;
    if (pscom_likely(pollers_active == 1)) { /* the usual case: one polled transport */
        pscom_poller_t *p = pscom_list_entry(pollers.next, pscom_poller_t, next);
        p->spin           = waiters ? PSCOM_POLL_SPIN : 1;
        return p->poll(p);
    }
    /* several: none may keep the others waiting */
    pscom_list_for_each_safe(pos, tmp, &pollers) {
        pscom_poller_t *p = pscom_list_entry(pos, pscom_poller_t, next);
        p->spin           = 1;
        progress |= p->poll(p);
    }
    return progress;
}

/* Has a polled transport operations in flight (pscom_poller_t.busy)? */
static int pollers_busy(void)
{
    pscom_list_t *pos;
    pscom_list_for_each(pos, &pollers) {
        pscom_poller_t *p = pscom_list_entry(pos, pscom_poller_t, next);
        if (p->busy && p->busy(p)) return 1;
    }
    return 0;
}

/* passes since the fd set was looked at, and the coarse clock then */
static unsigned skipped;
static time_t fds_polled_tick;
/* hot fds: passes between looks, the passes before this look, when the
 * last look of a busy-polling pass ended, and when a look last found
 * events */
static unsigned fd_every = FD_POLL_EVERY;
static unsigned fds_passes;
static uint64_t fds_end_ns, fds_event_ns;
static uint64_t fds_cost_ns; /* what a look costs, as last estimated */

/* The cost of a look that took ns: at most twice the last estimate. A look
 * during which the process lost its cpu (more processes than cpus) would
 * else space the looks out to FD_POLL_MAX passes at once, and only slowly
 * back; a call that really got slower is followed within a few looks. */
static uint64_t fds_cost(uint64_t ns)
{
    if (fds_cost_ns && ns > 2 * fds_cost_ns) ns = 2 * fds_cost_ns;
    fds_cost_ns = ns;
    return ns;
}

/* A busy-polling pass looked at the hot fds from t0 to t1: adapt fd_every
 * to the cost of that against the passes since the last look. */
static void fd_every_adapt(uint64_t t0, uint64_t t1)
{
    uint64_t cost = fds_cost(t1 - t0);
    if (t1 - fds_event_ns < FD_ACTIVE_NS) {
        fd_every = FD_POLL_EVERY;
    } else if (fds_end_ns && fds_passes && t0 > fds_end_ns) {
        uint64_t pass_ns = (t0 - fds_end_ns) / fds_passes;
        uint64_t want    = pass_ns ? cost * FD_POLL_SHARE / pass_ns : FD_POLL_MAX;
        if (want < FD_POLL_EVERY) want = FD_POLL_EVERY;
        if (want > FD_POLL_MAX) want = FD_POLL_MAX;
        fd_every = (unsigned)((3u * (uint64_t)fd_every + want) / 4);
    }
    fds_end_ns = t1;
}

/* The fd part of a pass (out of line: its event array would make every
 * busy-polling pass pay for a large stack frame). */
static __attribute__((noinline)) int poll_fds(int timeout_ms, int progress)
{
    struct epoll_event evs[MAX_EVENTS];
    int n;
    if (timeout_ms && pscom.threaded) {
        sleeper_t me = {sleeping, wake_gen};
        sleeping     = &me;
        __atomic_add_fetch(&in_epoll, 1, __ATOMIC_SEQ_CST);
        pthread_mutex_unlock(&pscom.lock);
        n = epoll_wait(epfd, evs, MAX_EVENTS, timeout_ms);
        __atomic_sub_fetch(&in_epoll, 1, __ATOMIC_SEQ_CST);
        pthread_mutex_lock(&pscom.lock);
        sleeper_back(&me);
    } else if (!timeout_ms && hot_fds && pollers_active) { /* a busy-polling pass */
        uint64_t t0 = pscom_time_ns();
        n           = epoll_wait(epfd, evs, MAX_EVENTS, 0);
        uint64_t t1 = pscom_time_ns();
        if (n > 0) fds_event_ns = t1;
        fd_every_adapt(t0, t1);
    } else {
        n = epoll_wait(epfd, evs, MAX_EVENTS, timeout_ms);
        if (n > 0 && hot_fds) fds_event_ns = pscom_time_ns();
    }
    int slept = timeout_ms && pscom.threaded;
    if (n < 0) {
        if (errno != EINTR) plog_err("epoll_wait() failed: %m");
        if (slept) wake_pass_on(); /* it may have ended by a wake-up too */
        return progress;
    }
    int events = 0; /* a wake-up is not one: it only ends a sleep */
    for (int i = 0; i < n; i++) {
        pscom_ufd_t *ufd = evs[i].data.ptr;
        if (!ufd->registered) continue; /* removed by an earlier handler */
        /* a wake-up is for a thread asleep in epoll_wait: a polling pass
         * leaves it to that one (reading it here, a thread calling
         * pscom_test_any in a loop kept a waiting one asleep for up to
         * SLEEP_MAX_MS) */
        if (ufd == &wake_ufd && !timeout_ms && __atomic_load_n(&in_epoll, __ATOMIC_SEQ_CST))
            continue;
        ufd->handler(ufd, evs[i].events);
        events += ufd != &wake_ufd;
    }
    if (events) pscom.progress_counter++;
    if ((progress || events) && __atomic_load_n(&in_epoll, __ATOMIC_SEQ_CST) && wake_fd >= 0) {
        wake_sleepers();
    } else if (slept) {
        wake_pass_on();
    }
    return progress || events;
}

static time_t coarse_tick(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
    return ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* After FD_CLOCK_EVERY skipped passes: look at the fd set now? (Out of
 * line, so that the busy-polling pass needs no stack frame for the clock.) */
static __attribute__((noinline)) int fds_due_slow(void)
{
    if (!hot_fds || skipped < fd_every) {
        time_t tick = coarse_tick();
        if (tick == fds_polled_tick) return 0;
        fds_polled_tick = tick;
    } else {
        fds_polled_tick = coarse_tick();
    }
    fds_passes = skipped;
    skipped    = 0;
    return 1;
}

/* Time to look at the fd set in a pass without timeout? */
static inline int fds_due(void)
{
    if (pscom_likely(++skipped & (FD_CLOCK_EVERY - 1))) return 0;
    return fds_due_slow();
}

static __attribute__((noinline)) int progress_full(int timeout_ms)
{
    int progress = 0;

    /* not while another thread sleeps in epoll_wait: it may return events
     * whose handler objects are on the deferred list */
    if (pscom_unlikely(deferred_head != NULL) && !sleeping) free_deferred();
    pscom.stats.progress_passes++;
    if (pscom_unlikely(!pscom_list_empty(&timers))) progress = run_timers(&timeout_ms);
    if (pollers_active) {
        progress |= poll_transports();
        if (progress) {
            pscom.progress_counter++; /* not idle: no nap in pscom_wait_until */
            timeout_ms = 0;
        }
        if (!timeout_ms && !fds_due()) return progress;
    }
    if (epfd < 0) return progress;
    return poll_fds(timeout_ms, progress);
}

int pscom_progress(int timeout_ms)
{
    /* the busy-polling pass, kept short: what progress_full does when
     * there are no timers and nothing to free */
    if (pscom_likely(!timeout_ms && pollers_active && !deferred_head &&
                     pscom_list_empty(&timers))) {
        pscom.stats.progress_passes++;
        int progress = poll_transports();
        /* not idle: no nap in pscom_wait_until (without a branch: one that
         * goes the other way only when a message came costs a misprediction
         * on the way to the application) */
        pscom.progress_counter += progress != 0;
        if (pscom_likely(!fds_due()) || epfd < 0) return progress;
        return poll_fds(0, progress);
    }
    return progress_full(timeout_ms);
}

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

/* Offer the cpu; in threaded mode also the lock, for the application's
 * other threads. Returns 1 if done(arg) holds now (another thread completed
 * what the wait is for meanwhile; threaded mode only). */
static int offer_cpu(int (*done)(void *arg), void *arg)
{
    if (pscom.threaded) pthread_mutex_unlock(&pscom.lock);
    uint64_t t0 = pscom_time_us();
    sched_yield();
    uint64_t took = pscom_time_us() - t0;
    if (pscom.threaded) pthread_mutex_lock(&pscom.lock);
    if (took >= YIELD_SWITCHED_US) { /* under the lock, as every reader */
        cpu_shared = YIELD_SHARED_HOLD;
    } else if (cpu_shared) {
        cpu_shared--;
    }
    return pscom.threaded && done(arg);
}

/* ---- deadlock (PSP_DEADLOCK_WARNINGS) ---------------------------------------- */

#define DEADLOCK_WHAT                                                                      \
    "deadlock: blocking wait with nothing to wait for (no listener, no connection that " \
    "can bring anything, no timer, no callback queued)"

/* Can nothing end a blocking wait any more? What can: a timer (connect
 * back-off, handshake watchdog, on-demand wait, listener pause, ucp's
 * endpoint linger), an io_done callback queued, and, with
 * pscom_init_thread, every other thread: it may post a send, listen or
 * connect at any time, so a threaded process is never taken to be stuck
 * (we cannot know what its threads will do). Then either nothing else is
 * left at all (no fd in the epoll set, no polled transport, awake or
 * asleep in a wait), or what is left serves nothing a wait can get
 * (pscom_socks_can_bring_anything(): no listener, no handshake, no
 * connection with a transport other than the loopback; ucp's worker keeps
 * its poller or event fd without connections). A loopback connection
 * delivers while a message is posted, so a wait on one is over before it
 * begins or waits for the waiting thread itself. Without threads nothing
 * but a progress pass changes any of this (signal handlers may not call
 * into pscom): once true, it stays true. */
static int nothing_to_wait_for(void)
{
    if (pscom.threaded || !pscom_list_empty(&timers) || !pscom_list_empty(&pscom.io_doneq))
        return 0;
    if (!ufds && !pollers_active && pscom_list_empty(&pollers_asleep)) return 1;
    return !pscom_socks_can_bring_anything();
}

/* Sleep up to ms (epoll_wait on the empty set; poll() without a set, when
 * pscom_init failed to make one). */
static void idle_sleep(int ms)
{
    if (epfd >= 0) {
        pscom_progress(ms);
    } else if (poll(NULL, 0, ms) < 0) { /* EINTR: the caller looks at the clock */
    }
}

/* Stay in the wait for one second: 0 after it, 1 as soon as something to
 * wait for appeared or done(arg) holds (the wait then goes on as usual). */
static int deadlock_second(int (*done)(void *arg), void *arg)
{
    uint64_t end = pscom_time_us() + 1000000u;
    for (;;) {
        uint64_t now = pscom_time_us();
        if (now >= end) return 0;
        idle_sleep((int)((end - now + 999) / 1000));
        if (!nothing_to_wait_for() || done(arg)) return 1;
    }
}

/* A blocking wait that nothing can end (nothing_to_wait_for()):
 * PSP_DEADLOCK_WARNINGS=0 exits at once, N > 0 warns N times a second
 * apart and exits, a negative value (-1 is stored as UINT_MAX) says so
 * once per wait, which then goes on as if nothing was found. The exit is
 * _exit(112): no atexit handlers (closing the sockets would wait the same
 * way). The lines go out at every log level (PSP_DEBUG=0 too). Returns
 * when the wait is to go on. */
static __attribute__((noinline)) void deadlock(int (*done)(void *arg), void *arg, int *said)
{
    unsigned n = pscom_config.deadlock_warnings;
    if (done(arg)) return;
    if (n > INT_MAX) { /* -1 (UINT_MAX), inf, or what a negative int wraps to */
        if (!*said)
            pscom_log(PSCOM_LOG_FATAL, DEADLOCK_WHAT "; waiting on (PSP_DEADLOCK_WARNINGS=%s)",
                      n == UINT_MAX ? "-1" : "inf");
        *said = 1;
        return;
    }
    for (unsigned i = 1; i <= n; i++) {
        pscom_log(PSCOM_LOG_FATAL,
                  DEADLOCK_WHAT "; warning %u of %u, exit 112 after the last "
                                "(PSP_DEADLOCK_WARNINGS=%u)",
                  i, n, n);
        if (deadlock_second(done, arg)) return;
    }
    pscom_log(PSCOM_LOG_FATAL, DEADLOCK_WHAT "; exit 112 (PSP_DEADLOCK_WARNINGS=%u)", n);
    _exit(112);
}

/* timed: done(arg) may turn true by the clock alone (pscom_wait_until_timed):
 * such a wait is no deadlock */
static void wait_passes(int (*done)(void *arg), void *arg, int timed)
{
    int deadlock_said = 0;
    uint64_t idle_since = 0, next_yield = YIELD_EVERY_US;
    unsigned idle_passes = 0;
    for (;;) {
        uint64_t before = pscom.progress_counter;
        pscom_progress(0);
        if (!pscom_list_empty(&pscom.io_doneq)) pscom_req_run_io_done_all();
        /* One branch leaves the idle passes when something happened: done()
         * is asked only then (usually yes: a branch the CPU predicts). */
        if (pscom.progress_counter != before) {
            if (done(arg)) return;
            idle_since  = 0;
            idle_passes = 0;
            next_yield  = YIELD_EVERY_US;
            continue;
        }
        /* nothing progressed, so done(arg) did not change (what completes
         * a request bumps the counter; the lock is held) */
        /* the clock costs as much as a pass: look at it every few passes */
        if (++idle_passes & (CLOCK_EVERY - 1)) {
            if (pscom_config.sched_yield) {
                sched_yield();
            } else if (cpu_shared) {
                if (offer_cpu(done, arg)) return;
            } else if (!pollers_active) {
                cpu_relax(); /* pollers pause on their own */
            }
            continue;
        }
        uint64_t now = pscom_time_us();
        if (!idle_since) idle_since = now;
        uint64_t idle = now - idle_since;
        /* nothing at all left that could end the wait: the sooner said the
         * better (what is left of transports without connections is
         * looked at only when the wait would sleep, below) */
        if (pscom_unlikely(!ufds && !pollers_active) && !timed && !deadlock_said &&
            nothing_to_wait_for()) {
            deadlock(done, arg, &deadlock_said);
            if (done(arg)) return;
            continue;
        }
        if (idle >= next_yield) {
            next_yield = idle + YIELD_EVERY_US;
            if (offer_cpu(done, arg)) return;
        }
        if (idle < pscom_config.wait_spin_us) continue;
        /* ... longer while a polled transport has work in flight that only
         * its polling moves on */
        if (idle < (uint64_t)pscom_config.wait_spin_us * PSCOM_WAIT_BUSY_FACTOR && pollers_busy())
            continue;
        if (!timed && !deadlock_said && nothing_to_wait_for()) {
            deadlock(done, arg, &deadlock_said);
            if (done(arg)) return;
            continue;
        }
        /* idle for a while: sleep in the kernel until an fd event. Polled
         * transports cannot wake us, so with those we only nap. */
        pscom.stats.sleeps++;
        if (pollers_active) pollers_sleep();
        pscom_progress(pollers_active ? 1 : SLEEP_MAX_MS);
        if (!pscom_list_empty(&pollers_asleep)) pollers_wake();
        if (!pscom_list_empty(&pscom.io_doneq)) pscom_req_run_io_done_all();
        if (done(arg)) return;
    }
}

void pscom_wait_until(int (*done)(void *arg), void *arg)
{
    if (done(arg)) return;
    waiters++;
    wait_passes(done, arg, 0);
    waiters--;
}

void pscom_wait_until_timed(int (*done)(void *arg), void *arg)
{
    if (done(arg)) return;
    waiters++;
    wait_passes(done, arg, 1);
    waiters--;
}
