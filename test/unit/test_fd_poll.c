/*
 * test_fd_poll.c - how often a busy-polling pass looks at the fd set.
 *
 * While a polled transport is active, pscom_progress(0) calls epoll_wait
 * (a system call: 0.16-1.2 us on the hosts here) every 32 passes while an
 * fd that is not quiet is registered, and else only once the coarse clock
 * has ticked since the last look (quiet fds: listeners, peer-death
 * detectors). Counted by the epoll_wait() below, which takes the place of
 * libc's; what is compared is calls against passes and clock ticks, never
 * a duration.
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

static unsigned epoll_calls;
int epoll_wait(int epfd, struct epoll_event *events, int maxevents, int timeout)
{
    epoll_calls++;
    return epoll_pwait(epfd, events, maxevents, timeout, NULL);
}

static int idle_poll(pscom_poller_t *poller)
{
    return 0;
}

static unsigned handled;
static void efd_handler(pscom_ufd_t *ufd, uint32_t revents)
{
    uint64_t v;
    if (read(ufd->fd, &v, sizeof(v)) == (ssize_t)sizeof(v)) handled++;
}

static pscom_poller_t poller = {.poll = idle_poll};
static pscom_ufd_t efd;

static int64_t coarse_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
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
    struct timespec res;
    assert_int_equal(clock_getres(CLOCK_MONOTONIC_COARSE, &res), 0);
    int64_t tick = (int64_t)res.tv_sec * 1000000000 + res.tv_nsec;
    efd.quiet    = 1;
    assert_int_equal(pscom_ufd_add(&efd), 0);
    int64_t t0     = coarse_ns();
    unsigned calls = passes(100000);
    int64_t ticks  = (coarse_ns() - t0) / tick;
    print_message("%u epoll_wait calls in 100000 passes over %lld ticks\n", calls,
                  (long long)ticks);
    assert_true(calls <= (unsigned)ticks + 1);

    uint64_t one = 1;
    assert_int_equal(write(efd.fd, &one, sizeof(one)), (ssize_t)sizeof(one));
    handled = 0;
    for (unsigned i = 0; !handled && i < 100000000u; i++) pscom_progress(0);
    assert_int_equal(handled, 1);
}

/* An fd that is not quiet (a tcp connection): a look every 32 passes. */
static void test_hot_every_32(void **state)
{
    efd.quiet = 0;
    assert_int_equal(pscom_ufd_add(&efd), 0);
    assert_true(passes(3200) >= 99);
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
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
