/*
 * pscom_progress.c - epoll loop, polled transports, blocking waits.
 */
#include "pscom_progress.h"

#include <errno.h>
#include <sched.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <unistd.h>

#include "pscom_config.h"
#include "pscom_core.h"
#include "pscom_log.h"
#include "pscom_plugin.h"
#include "pscom_req.h"
#include "pscom_util.h"

#define MAX_EVENTS   64
#define SLEEP_MAX_MS 1000 /* a sleeping wait wakes up at least this often */
/* While polled transports are active, a non-blocking pass looks at the fd
 * set only every FD_POLL_EVERY passes: a system call per pass would
 * dominate shared-memory latency. */
#define FD_POLL_EVERY 32

static int epfd = -1;
static pscom_list_t pollers = PSCOM_LIST_INIT(pollers);
static unsigned pollers_active;

typedef struct deferred {
    struct deferred *next;
    void *ptr;
} deferred_t;
static deferred_t *deferred_head;

int pscom_progress_init(void)
{
    if (epfd >= 0) return 0;
    epfd = epoll_create1(EPOLL_CLOEXEC);
    if (epfd < 0) {
        plog_err("epoll_create1() failed: %m");
        return -1;
    }
    return 0;
}

void pscom_progress_fini(void)
{
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
}

void pscom_poller_add(pscom_poller_t *poller)
{
    if (poller->active) return;
    pscom_list_add_tail(&poller->next, &pollers);
    poller->active = 1;
    pollers_active++;
}

void pscom_poller_del(pscom_poller_t *poller)
{
    if (!poller->active) return;
    pscom_list_del(&poller->next);
    poller->active = 0;
    pollers_active--;
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
}

static void free_deferred(void)
{
    while (deferred_head) {
        deferred_t *d = deferred_head;
        deferred_head = d->next;
        free(d->ptr);
        free(d);
    }
}

static int poll_transports(void)
{
    int progress = 0;
    pscom_list_t *pos, *tmp;
    pscom_list_for_each_safe(pos, tmp, &pollers) {
        pscom_poller_t *p = pscom_list_entry(pos, pscom_poller_t, next);
        progress |= p->poll(p);
    }
    return progress;
}

int pscom_progress(int timeout_ms)
{
    struct epoll_event evs[MAX_EVENTS];
    int progress = 0;

    static unsigned skipped;

    if (pscom_unlikely(deferred_head != NULL)) free_deferred();
    pscom.stats.progress_passes++;
    if (pollers_active) {
        progress = poll_transports();
        if (progress) timeout_ms = 0;
        if (!timeout_ms && ++skipped < FD_POLL_EVERY) return progress;
        skipped = 0;
    }
    if (epfd < 0) return progress;

    int n;
    if (timeout_ms && pscom.threaded) {
        pthread_mutex_unlock(&pscom.lock);
        n = epoll_wait(epfd, evs, MAX_EVENTS, timeout_ms);
        pthread_mutex_lock(&pscom.lock);
    } else {
        n = epoll_wait(epfd, evs, MAX_EVENTS, timeout_ms);
    }
    if (n < 0) {
        if (errno != EINTR) plog_err("epoll_wait() failed: %m");
        return progress;
    }
    for (int i = 0; i < n; i++) {
        pscom_ufd_t *ufd = evs[i].data.ptr;
        if (!ufd->registered) continue; /* removed by an earlier handler */
        ufd->handler(ufd, evs[i].events);
    }
    if (n > 0) pscom.progress_counter++;
    return progress || n > 0;
}

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

void pscom_wait_until(int (*done)(void *arg), void *arg)
{
    uint64_t idle_since = 0;
    while (!done(arg)) {
        uint64_t before = pscom.progress_counter;
        pscom_progress(0);
        if (!pscom_list_empty(&pscom.io_doneq)) pscom_req_run_io_done();
        if (pscom.progress_counter != before) {
            idle_since = 0;
            continue;
        }
        if (done(arg)) break;
        uint64_t now = pscom_time_us();
        if (!idle_since) idle_since = now;
        if (now - idle_since < pscom_config.wait_spin_us) {
            if (pscom_config.sched_yield) {
                sched_yield();
            } else {
                cpu_relax();
            }
            continue;
        }
        /* idle for a while: sleep in the kernel until an fd event. Polled
         * transports cannot wake us, so with those we only nap. */
        pscom.stats.sleeps++;
        pscom_progress(pollers_active ? 1 : SLEEP_MAX_MS);
        if (!pscom_list_empty(&pscom.io_doneq)) pscom_req_run_io_done();
    }
}
