/*
 * test_fd_poll.c - how often a busy-polling pass looks at the fd set.
 *
 * While a polled transport is active, pscom_progress(0) calls epoll_wait
 * (a system call: 0.16-1.2 us on the hosts here) every 32 passes or more
 * while an fd that is not quiet is registered (once the fds brought no
 * events for a millisecond, as many more as keep the call at about a tenth
 * of the time, up to 1024), and else only once the coarse clock has ticked
 * since the last look (quiet fds: listeners, peer-death detectors).
 * Counted by the epoll_wait() below, which takes the place of libc's (and
 * can be made free or slow); what is compared is calls against passes and
 * clock ticks, never a duration.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "pscom.h"
#include "pscom_plugin.h"
#include "pscom_progress.h"

static void spin_ns(long ns)
{
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    do clock_gettime(CLOCK_MONOTONIC, &t);
    while ((t.tv_sec - t0.tv_sec) * 1000000000 + (t.tv_nsec - t0.tv_nsec) < ns);
}

static unsigned epoll_calls;
static enum { REAL, FREE, SLOW } epoll_cost = REAL;
int epoll_wait(int epfd, struct epoll_event *events, int maxevents, int timeout)
{
    epoll_calls++;
    if (epoll_cost == FREE) return 0;
    if (epoll_cost == SLOW) spin_ns(200000); /* a system call of 200 us */
    return epoll_pwait(epfd, events, maxevents, timeout, NULL);
}

/* the polled transport: a pass of 200 ns while pass_cost (a ping-pong's
 * wait polls shared memory at 20-50 ns a pass) */
static int pass_cost;
static int idle_poll(pscom_poller_t *poller)
{
    if (pass_cost) spin_ns(200);
    return 0;
}

static unsigned handled;
static int keep_readable; /* the handler leaves the event: the fd stays readable */
static void efd_handler(pscom_ufd_t *ufd, uint32_t revents)
{
    uint64_t v;
    if (keep_readable) {
        handled++;
    } else if (read(ufd->fd, &v, sizeof(v)) == (ssize_t)sizeof(v)) {
        handled++;
    }
}

static pscom_poller_t poller = {.poll = idle_poll};
static pscom_ufd_t efd;

static int64_t coarse_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* one tick of the coarse clock */
static int64_t tick_ns(void)
{
    struct timespec res;
    assert_int_equal(clock_getres(CLOCK_MONOTONIC_COARSE, &res), 0);
    return (int64_t)res.tv_sec * 1000000000 + res.tv_nsec;
}

/* ticks of the coarse clock since t0 (its value then), rounded up: the
 * clock steps at the kernel's timer ticks, whose times jitter around the
 * resolution (steps of 3999999 ns at 4 ms here). Rounded down, one tick
 * read as none, and the look it allows failed the test (once, under ASan). */
static int64_t ticks_since(int64_t t0)
{
    int64_t tick = tick_ns();
    return (coarse_ns() - t0 + tick - 1) / tick;
}

static int setup(void **state)
{
    assert_int_equal(pscom_init(PSCOM_VERSION), PSCOM_SUCCESS);
    efd.fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    assert_true(efd.fd >= 0);
    efd.events  = EPOLLIN;
    efd.handler = efd_handler;
    pscom_poller_add(&poller);
    return 0;
}

static int teardown(void **state)
{
    pscom_poller_del(&poller);
    close(efd.fd);
    return 0;
}

/* passes in a row; returns the epoll_wait calls they made */
static unsigned passes(unsigned n)
{
    unsigned before = epoll_calls;
    for (unsigned i = 0; i < n; i++) pscom_progress(0);
    return epoll_calls - before;
}

/* Only quiet fds: at most one look per tick of the coarse clock (a count
 * of passes alone, 1024 as before, makes 97 calls in 100000 passes however
 * fast they run), and an event on a quiet fd is still handled. */
static void test_quiet_once_per_tick(void **state)
{
    efd.quiet = 1;
    assert_int_equal(pscom_ufd_add(&efd), 0);
    int64_t t0     = coarse_ns();
    unsigned calls = passes(100000);
    int64_t ticks  = ticks_since(t0);
    print_message("%u epoll_wait calls in 100000 passes over %lld ticks\n", calls,
                  (long long)ticks);
    assert_true(calls <= (unsigned)ticks + 1);

    uint64_t one = 1;
    assert_int_equal(write(efd.fd, &one, sizeof(one)), (ssize_t)sizeof(one));
    handled = 0;
    for (unsigned i = 0; !handled && i < 100000000u; i++) pscom_progress(0);
    assert_int_equal(handled, 1);
}

/* An fd that is not quiet (a tcp connection), looking at it costs next to
 * nothing against a pass: a look every 32 passes. */
static void test_hot_every_32(void **state)
{
    efd.quiet  = 0;
    epoll_cost = FREE;
    pass_cost  = 1;
    assert_int_equal(pscom_ufd_add(&efd), 0);
    passes(3200); /* whatever an earlier test left */
    unsigned calls = passes(3200);
    epoll_cost     = REAL;
    pass_cost      = 0;
    print_message("%u epoll_wait calls of next to nothing in 3200 passes\n", calls);
    assert_true(calls >= 90);
}

/* ... it costs 1000 passes: the looks space out to 1024 passes (32 would
 * be 625 calls in 20000 passes), and an event on the fd is still handled. */
static void test_hot_adapts(void **state)
{
    efd.quiet  = 0;
    epoll_cost = SLOW;
    pass_cost  = 1;
    assert_int_equal(pscom_ufd_add(&efd), 0);
    passes(10000); /* settle */
    int64_t t0     = coarse_ns();
    unsigned calls = passes(20000);
    int64_t ticks  = ticks_since(t0);
    print_message("%u epoll_wait calls of 200 us in 20000 passes of 200 ns over %lld ticks\n",
                  calls, (long long)ticks);
    assert_true(calls <= 20000 / 1024 + 2 + (unsigned)ticks); /* a tick also makes a look */

    uint64_t one = 1;
    assert_int_equal(write(efd.fd, &one, sizeof(one)), (ssize_t)sizeof(one));
    handled = 0;
    for (unsigned i = 0; !handled && i < 2048; i++) pscom_progress(0);
    epoll_cost = REAL;
    pass_cost  = 0;
    assert_int_equal(handled, 1);
}

/* ... unless the fds bring events (a tcp connection in use): then a look
 * every 32 passes, however much it costs. */
static void test_hot_active(void **state)
{
    efd.quiet     = 0;
    epoll_cost    = SLOW;
    pass_cost     = 1;
    keep_readable = 1;
    assert_int_equal(pscom_ufd_add(&efd), 0);
    uint64_t one = 1;
    assert_int_equal(write(efd.fd, &one, sizeof(one)), (ssize_t)sizeof(one));
    passes(320);
    unsigned calls = passes(3200);
    epoll_cost     = REAL;
    pass_cost      = 0;
    keep_readable  = 0;
    uint64_t v;
    assert_int_equal(read(efd.fd, &v, sizeof(v)), (ssize_t)sizeof(v));
    print_message("%u epoll_wait calls of 200 us with events in 3200 passes\n", calls);
    assert_true(calls >= 90);
}

static int del_efd(void **state)
{
    if (efd.registered) pscom_ufd_del(&efd);
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_quiet_once_per_tick, del_efd),
        cmocka_unit_test_teardown(test_hot_every_32, del_efd),
        cmocka_unit_test_teardown(test_hot_adapts, del_efd),
        cmocka_unit_test_teardown(test_hot_active, del_efd),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
