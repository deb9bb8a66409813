/*
 * test_wait.c - a blocking wait naps (sleeps in the kernel 1 ms at a time)
 * once nothing happened for PSP_WAIT_SPIN_US, except while a polled
 * transport reports operations in flight (pscom_poller_t.busy): then it
 * keeps polling, for at most PSCOM_WAIT_BUSY_FACTOR times the spin time.
 *
 * While it spins it offers the cpu (sched_yield()) every 20 us of idle
 * time, for a peer that may share the cpu; a wait that ends at once never
 * does.
 *
 * The polled transport here is a fake whose one operation completes once a
 * given time has passed on the clock: the waits below take that long by
 * construction, nothing is synchronised by it. What is checked is whether
 * the wait napped (pscom.stats.sleeps) and whether it yielded (counted by
 * the sched_yield() below, which takes the place of libc's), never a
 * duration.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <sched.h>

#include "pscom.h"
#include "pscom_config.h"
#include "pscom_core.h"
#include "pscom_plugin.h"
#include "pscom_progress.h"
#include "pscom_util.h"

/* the fake transport: its operation is done at done_at_us */
static uint64_t done_at_us;
static int op_done;
static int fake_busy;
static unsigned busy_calls;

static int fake_poll(pscom_poller_t *poller)
{
    if (op_done || pscom_time_us() < done_at_us) return 0;
    op_done = 1;
    pscom.progress_counter++; /* what completes a request does this */
    return 1;
}

static int fake_busy_fn(pscom_poller_t *poller)
{
    busy_calls++;
    return fake_busy && !op_done;
}

/* counts the calls (there is nothing else to run here) */
static unsigned yields;
int sched_yield(void)
{
    yields++;
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

/* Wait for the fake operation that takes op_ms; returns the naps taken. */
static uint64_t wait_op(unsigned spin_us, unsigned op_ms, int busy, int has_busy_fn)
{
    pscom_config.wait_spin_us = spin_us;
    poller.poll               = fake_poll;
    poller.busy               = has_busy_fn ? fake_busy_fn : NULL;
    fake_busy                 = busy;
    busy_calls                = 0;
    yields                    = 0;
    op_done                   = 0;
    done_at_us                = pscom_time_us() + (uint64_t)op_ms * 1000u;
    pscom_poller_add(&poller);
    uint64_t before = pscom.stats.sleeps;
    pscom_wait_until(is_done, &op_done);
    pscom_poller_del(&poller);
    assert_true(op_done);
    return pscom.stats.sleeps - before;
}

/* Nothing in flight: after 1 ms of spinning the wait naps. */
static void test_idle_naps(void **state)
{
    assert_true(wait_op(1000, 20, 0, 1) >= 1);
    assert_true(busy_calls >= 1); /* it asked before each nap */
    /* a poller without the hook counts as never busy */
    assert_true(wait_op(1000, 20, 0, 0) >= 1);
}

/* An operation in flight: the wait polls on for 20 ms, well within its
 * 100 ms (100 x 1 ms) bound, and never naps. */
static void test_busy_polls(void **state)
{
    assert_int_equal(wait_op(1000, 20, 1, 1), 0);
    assert_true(busy_calls >= 1);
}

/* A wait of 5 ms spins 1 ms before its first nap: it yields meanwhile.
 * One whose operation is done at the first pass does not. */
static void test_spin_yields(void **state)
{
    wait_op(1000, 5, 0, 1);
    assert_true(yields >= 1);
    wait_op(1000, 0, 0, 1);
    assert_int_equal(yields, 0);
}

/* Busy, but for longer than the bound (100 x 100 us = 10 ms): it naps
 * after all, so a peer that never answers does not cost a core forever. */
static void test_busy_bounded(void **state)
{
    assert_true(wait_op(100, 40, 1, 1) >= 1);
}

/* PSP_WAIT_SPIN_US=0 (nap at once) also holds while busy. */
static void test_busy_spin0(void **state)
{
    assert_true(wait_op(0, 5, 1, 1) >= 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_idle_naps),
        cmocka_unit_test(test_busy_polls),
        cmocka_unit_test(test_busy_bounded),
        cmocka_unit_test(test_busy_spin0),
        cmocka_unit_test(test_spin_yields),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
