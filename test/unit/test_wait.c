/*
 * test_wait.c - a blocking wait naps (sleeps in the kernel 1 ms at a time)
 * once nothing happened for PSP_WAIT_SPIN_US, except while a polled
 * transport reports operations in flight (pscom_poller_t.busy): then it
 * keeps polling, for at most PSCOM_WAIT_BUSY_FACTOR times the spin time.
 *
 * While it spins it offers the cpu (sched_yield()) every 20 us of idle
 * time, for a peer that may share the cpu; a wait that ends at once never
 * does. Once a yield took long (another process ran), in every idle pass.
 *
 * The polled transport here is a fake whose one operation completes once a
 * given time has passed on the clock, or at an event of the wait: its first
 * nap (UNTIL_NAP), or its third question whether the transport is busy
 * (UNTIL_BUSY, asked only once the spin time is over). The waits end at
 * what they must show, whenever it comes, so a test process that loses its
 * cpu for a while under load still sees it. What is checked is whether the
 * wait napped (pscom.stats.sleeps), that a nap came no earlier than the spin
 * time or the busy bound allow (a lower bound on the time waited, which
 * load can only lengthen), and whether it yielded (counted by the
 * sched_yield() below, which takes the place of libc's).
 *
 * A poller with a sleep hook is asked to leave only by a blocking wait
 * that goes to sleep (never by non-blocking passes), is out of the passes
 * while the wait sleeps, and is woken (wake hook) and back afterwards; one
 * that comes back by itself (pscom_poller_add from its fd's handler) is
 * not woken again.
 *
 * The one active poller may run several rounds per pass in a blocking
 * wait (pscom_poller_t.spin), never in non-blocking calls.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <limits.h>
#include <sched.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "pscom.h"
#include "pscom_config.h"
#include "pscom_core.h"
#include "pscom_plugin.h"
#include "pscom_progress.h"
#include "pscom_util.h"

/* the fake transport: its operation is done at done_at_us, or with
 * until_nap once the wait napped (pscom.stats.sleeps above sleeps_before),
 * with until_busy once busy() was asked three times */
static uint64_t done_at_us;
static int until_nap, until_busy;
static uint64_t sleeps_before;
static int op_done;
static int fake_busy;
static unsigned busy_calls;

/* the spin hints the fake poller was given (pscom_poller_t.spin) */
static unsigned spin_min = ~0u, spin_max;

static void saw_spin(unsigned spin)
{
    if (spin < spin_min) spin_min = spin;
    if (spin > spin_max) spin_max = spin;
}

static int fake_poll(pscom_poller_t *poller)
{
    saw_spin(poller->spin);
    if (op_done) return 0;
    int event = (until_nap && pscom.stats.sleeps != sleeps_before) || (until_busy && busy_calls >= 3);
    if (!event && pscom_time_us() < done_at_us) return 0;
    op_done = 1;
    pscom.progress_counter++; /* what completes a request does this */
    return 1;
}

static int fake_busy_fn(pscom_poller_t *poller)
{
    busy_calls++;
    return fake_busy && !op_done;
}

/* counts the calls; with yield_takes_us as if another process ran for
 * that long (else there is nothing else to run here) */
static unsigned yields, yield_takes_us;
static uint64_t passes_at_first_yield;
int sched_yield(void)
{
    if (!yields++) passes_at_first_yield = pscom.stats.progress_passes;
    uint64_t t0 = pscom_time_us();
    while (pscom_time_us() - t0 < yield_takes_us) {
    }
    return 0;
}

static int is_done(void *arg)
{
    return *(int *)arg;
}

static pscom_poller_t poller;
static unsigned saved_spin;

static int setup(void **state)
{
    assert_int_equal(pscom_init(PSCOM_VERSION), PSCOM_SUCCESS);
    saved_spin = pscom_config.wait_spin_us;
    return 0;
}

static int teardown(void **state)
{
    pscom_config.wait_spin_us = saved_spin;
    return 0;
}

/* op_ms of wait_op(): the operation ends at the wait's first nap, or at its
 * third busy() (or after 10 s, when a wait that never gets there fails the
 * test) */
#define UNTIL_NAP  UINT_MAX
#define UNTIL_BUSY (UINT_MAX - 1)

/* how long the last wait_op() waited */
static uint64_t waited_us;

/* Wait for the fake operation that takes op_ms; returns the naps taken. */
static uint64_t wait_op(unsigned spin_us, unsigned op_ms, int busy, int has_busy_fn)
{
    pscom_config.wait_spin_us = spin_us;
    poller.poll               = fake_poll;
    poller.busy               = has_busy_fn ? fake_busy_fn : NULL;
    fake_busy                 = busy;
    busy_calls                = 0;
    yields                    = 0;
    spin_min                  = ~0u;
    spin_max                  = 0;
    op_done                   = 0;
    until_nap                 = op_ms == UNTIL_NAP;
    until_busy                = op_ms == UNTIL_BUSY;
    sleeps_before             = pscom.stats.sleeps;
    uint64_t t0               = pscom_time_us();
    done_at_us                = t0 + (until_nap || until_busy ? 10000000u : (uint64_t)op_ms * 1000u);
    pscom_poller_add(&poller);
    pscom_wait_until(is_done, &op_done);
    pscom_poller_del(&poller);
    assert_true(op_done);
    waited_us = pscom_time_us() - t0;
    return pscom.stats.sleeps - sleeps_before;
}

/* Nothing in flight: after 1 ms of spinning the wait naps. */
static void test_idle_naps(void **state)
{
    assert_true(wait_op(1000, UNTIL_NAP, 0, 1) >= 1);
    assert_true(waited_us >= 1000);
    assert_true(busy_calls >= 1); /* it asked before each nap */
    /* a poller without the hook counts as never busy */
    assert_true(wait_op(1000, UNTIL_NAP, 0, 0) >= 1);
    assert_true(waited_us >= 1000);
}

/* An operation in flight: past the spin time of 1 ms the wait asks whether
 * the transport is busy and polls on (the operation ends at the third
 * question, well within the 100 ms (100 x 1 ms) bound): it never naps. */
static void test_busy_polls(void **state)
{
    assert_int_equal(wait_op(1000, UNTIL_BUSY, 1, 1), 0);
    assert_int_equal(busy_calls, 3);
    assert_true(waited_us >= 1000);
}

/* A wait spins 1 ms before its first nap: it yields meanwhile. One whose
 * operation is done at the first pass does not. */
static void test_spin_yields(void **state)
{
    wait_op(1000, UNTIL_NAP, 0, 1);
    assert_true(yields >= 1);
    wait_op(1000, 0, 0, 1);
    assert_int_equal(yields, 0);
}

/* A yield that let another process run (one of 10 us here) shows the cpu
 * is shared: from then on the wait offers it in every idle pass (a peer on
 * our cpu then answers within microseconds, not after 20 us of our
 * spinning), not once per 20 us. After 64 yields in a row that found
 * nobody else to run it is back to once per 20 us. */
static void test_shared_cpu_yields(void **state)
{
    yield_takes_us = 10;
    wait_op(1000, UNTIL_NAP, 0, 1);
    /* from the first yield on, most passes yielded (not one in hundreds) */
    uint64_t passes = pscom.stats.progress_passes - passes_at_first_yield;
    assert_true(yields >= 10);
    assert_true(2 * (uint64_t)yields >= passes);

    yield_takes_us = 0; /* nobody else to run any more */
    wait_op(1000, UNTIL_NAP, 0, 1);
    assert_true(yields >= 64);
    wait_op(1000, UNTIL_NAP, 0, 1);
    assert_true(yields >= 1);
    /* once per 20 us, not in every pass (thousands in this wait). A yield
     * that a signal or the host's scheduler made look long (it measures
     * the time around the call) makes the cpu look shared again for up to
     * YIELD_SHARED_HOLD (64) yields: allowed twice (scripts/sigstorm.sh,
     * a signal every 200 us, once failed a bound without it) */
    assert_true(yields <= waited_us / 20 + 2 + 2 * 64);
}

/* the sleep hooks: counted; the poller leaves while sleep_ok */
static unsigned sleep_calls, wake_calls;
static int sleep_ok;
static int fake_sleep(pscom_poller_t *p)
{
    sleep_calls++;
    return sleep_ok;
}
static void fake_wake(pscom_poller_t *p)
{
    wake_calls++;
    assert_false(p->active); /* still out when woken */
}

static void hooks(int ok)
{
    poller.sleep = fake_sleep;
    poller.wake  = fake_wake;
    sleep_ok     = ok;
    sleep_calls = wake_calls = 0;
}

/* Non-blocking passes never ask the poller to leave; a wait that sleeps
 * does, and the poller is back in the passes afterwards. */
static void test_sleep_hook(void **state)
{
    hooks(1);
    pscom_poller_add(&poller);
    for (int i = 0; i < 100000; i++) pscom_progress(0);
    assert_int_equal(sleep_calls, 0);
    pscom_poller_del(&poller);

    /* the operation is done on the clock, which only the poller reads: the
     * wait sleeps (up to 1 s at a time with the poller out), wakes it, and
     * polls on until it is done */
    assert_true(wait_op(0, UNTIL_NAP, 0, 1) >= 1);
    assert_true(sleep_calls >= 1);
    assert_int_equal(wake_calls, sleep_calls);
    assert_false(poller.active);
    assert_false(poller.asleep);
    poller.sleep = NULL;
    poller.wake  = NULL;
}

/* A poller that stays (sleep returns 0) is never woken: the wait naps. */
static void test_sleep_refused(void **state)
{
    hooks(0);
    assert_true(wait_op(0, UNTIL_NAP, 0, 1) >= 1);
    assert_true(sleep_calls >= 1);
    assert_int_equal(wake_calls, 0);
    poller.sleep = NULL;
    poller.wake  = NULL;
}

/* A poller that comes back by itself while the wait sleeps (its fd's
 * handler calls pscom_poller_add, as ucp's does) is not woken again. */
static int efd = -1;
static unsigned self_wakes;
static void efd_handler(pscom_ufd_t *ufd, uint32_t revents)
{
    uint64_t v;
    assert_int_equal(read(ufd->fd, &v, sizeof(v)), (ssize_t)sizeof(v));
    self_wakes++;
    pscom_poller_add(&poller);
}
static int sleep_fd_fires(pscom_poller_t *p)
{
    uint64_t one = 1;
    sleep_calls++;
    assert_int_equal(write(efd, &one, sizeof(one)), (ssize_t)sizeof(one));
    return 1;
}

static void test_sleep_self_wake(void **state)
{
    hooks(1);
    poller.sleep = sleep_fd_fires;
    self_wakes   = 0;
    efd          = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    assert_true(efd >= 0);
    pscom_ufd_t ufd = {.fd = efd, .events = EPOLLIN, .handler = efd_handler, .quiet = 1};
    assert_int_equal(pscom_ufd_add(&ufd), 0);
    assert_true(wait_op(0, UNTIL_NAP, 0, 1) >= 1);
    pscom_ufd_del(&ufd);
    close(efd);
    assert_true(sleep_calls >= 1);
    assert_int_equal(self_wakes, sleep_calls);
    assert_int_equal(wake_calls, 0);
    assert_false(poller.asleep);
    poller.sleep = NULL;
    poller.wake  = NULL;
}

/* Busy, but for longer than the bound (100 x 100 us = 10 ms): it naps
 * after all (not before), so a peer that never answers does not cost a
 * core forever. */
static void test_busy_bounded(void **state)
{
    assert_true(wait_op(100, UNTIL_NAP, 1, 1) >= 1);
    assert_true(waited_us >= 100 * PSCOM_WAIT_BUSY_FACTOR);
}

/* PSP_WAIT_SPIN_US=0 (nap at once) also holds while busy. */
static void test_busy_spin0(void **state)
{
    assert_true(wait_op(0, UNTIL_NAP, 1, 1) >= 1);
}

/* The spin hint: a blocking wait's passes let the one active poller run
 * PSCOM_POLL_SPIN rounds; non-blocking calls, and passes with several
 * pollers (none may keep the others waiting), only one. */
static unsigned other_spin_max;
static int other_poll(pscom_poller_t *p)
{
    if (p->spin > other_spin_max) other_spin_max = p->spin;
    return 0;
}

static void test_spin_hint(void **state)
{
    assert_true(PSCOM_POLL_SPIN > 1);
    /* (no nap, whose passes poll once, within the 10 s of spin) */
    assert_int_equal(wait_op(10000000, 1, 0, 1), 0);
    assert_int_equal(spin_min, PSCOM_POLL_SPIN);
    assert_int_equal(spin_max, PSCOM_POLL_SPIN);

    pscom_poller_add(&poller);
    spin_min = ~0u;
    spin_max = 0;
    for (int i = 0; i < 3; i++) pscom_test_any();
    pscom_poller_del(&poller);
    assert_int_equal(spin_min, 1);
    assert_int_equal(spin_max, 1);

    pscom_poller_t other = {.poll = other_poll};
    pscom_poller_add(&other);
    assert_int_equal(wait_op(10000000, 1, 0, 1), 0);
    pscom_poller_del(&other);
    assert_int_equal(spin_max, 1);
    assert_int_equal(other_spin_max, 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_idle_naps),
        cmocka_unit_test(test_busy_polls),
        cmocka_unit_test(test_busy_bounded),
        cmocka_unit_test(test_busy_spin0),
        cmocka_unit_test(test_spin_yields),
        cmocka_unit_test(test_shared_cpu_yields),
        cmocka_unit_test(test_sleep_hook),
        cmocka_unit_test(test_sleep_refused),
        cmocka_unit_test(test_sleep_self_wake),
        cmocka_unit_test(test_spin_hint),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
