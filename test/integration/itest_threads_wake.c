/*
 * itest_threads_wake: with pscom_init_thread, a thread asleep in pscom_wait
 * (in epoll_wait, after PSP_WAIT_SPIN_US of spinning) wakes up at once
 * when another thread completes its request inside an API call: a send on
 * a loopback connection, pscom_cancel_recv. Half of the rounds have a third
 * thread calling pscom_test_any in a loop, which must not take the wake-up
 * away from the sleeper. (Until 2026-11-29 nothing woke it: it slept on
 * until its 1 s nap ended, and a polling thread emptied the wake-up fd.
 * The first is caught every time; the second only when the poller looks
 * at the fds before the sleeper does, one run in a few.)
 *
 * Then two threads asleep, each waiting for a receive of its own loopback
 * connection, and one of them completed (either one, by a send or a
 * cancel): it must wake at once although the other sleeps on. (Until
 * 2026-11-29 the wake-up ended the epoll_wait of one thread only: when
 * that was the other one, the one completed slept on for its 1 s.)
 *
 * Then pscom_wait_any in two threads: the main thread's receive not done,
 * another thread cancels it and calls pscom_wait_any (which returns at
 * once); the main thread's pscom_wait_any must return too: "progress since
 * its previous call" is its own (until 2026-11-29 the mark was the
 * process's, the other thread's call had taken it, and the main thread
 * slept for ever with its request DONE; pscom_probe likewise).
 *
 * The waiting thread is given WAIT_MS to fall asleep before the completing
 * call (a sleeper that is still spinning just makes the round pass); it
 * must return within LATE_MS of that call, against about 1000 - WAIT_MS ms
 * before the fix.
 */
#include "pscom_testutil.h"

#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define ROUNDS  4
#define WAIT_MS 100.0
#define LATE_MS 500.0

static pscom_request_t *req;
static volatile int stop_polling;
static _Atomic double returned_ms;

static void *waiter(void *arg)
{
    (void)arg;
    pscom_wait(req);
    returned_ms = tu_now_ms();
    return NULL;
}

static void *poller(void *arg)
{
    (void)arg;
    /* (yielding: a tight loop of lock and unlock could keep the woken
     * waiter from the lock for long under ASan on a busy machine, 626 ms
     * once, which is not what this test is about) */
    while (!__atomic_load_n(&stop_polling, __ATOMIC_ACQUIRE)) {
        pscom_test_any();
        sched_yield();
    }
    return NULL;
}

/* ---- two sleepers ---- */

static pscom_request_t *req2[2];
static _Atomic double returned2_ms[2];

static void *waiter2(void *arg)
{
    int me = (int)(intptr_t)arg;
    pscom_wait(req2[me]);
    returned2_ms[me] = tu_now_ms();
    return NULL;
}

/* complete receive i of two on its loopback connection */
static void complete(pscom_connection_t *loop, int i, int cancel)
{
    int val = 42 + i;
    if (cancel) {
        TU_ASSERT_EQ(pscom_cancel_recv(req2[i]), 1);
    } else {
        pscom_send(loop, NULL, 0, &val, sizeof(val));
    }
}

static void two_sleepers(pscom_connection_t *loops[2])
{
    for (int round = 0; round < 8; round++) { /* (without the fix, a round failed in 1 of 6) */
        int cancel = round / 4, target = round % 2, other = !target;
        int buf[2] = {0, 0};
        pthread_t w[2];
        for (int i = 0; i < 2; i++) {
            req2[i]             = tu_post_recv(loops[i], &buf[i], sizeof(buf[i]), 0);
            returned2_ms[i]     = 0;
            TU_ASSERT_EQ(pthread_create(&w[i], NULL, waiter2, (void *)(intptr_t)i), 0);
        }
        double t0 = tu_now_ms();
        while (tu_now_ms() - t0 < WAIT_MS) { /* both fall asleep */
        }
        double t1 = tu_now_ms();
        complete(loops[target], target, cancel);
        pthread_join(w[target], NULL);
        double late = returned2_ms[target] - t1;
        complete(loops[other], other, cancel);
        pthread_join(w[other], NULL);
        tu_log("two asleep, %s of one: it returned %.1f ms after", cancel ? "cancel" : "send",
               late);
        TU_ASSERT_MSG(late < LATE_MS,
                      "with two threads asleep, the one whose request the %s completed "
                      "returned %.0f ms after",
                      cancel ? "pscom_cancel_recv" : "loopback send", late);
        if (!cancel) {
            TU_ASSERT_EQ(buf[0], 42);
            TU_ASSERT_EQ(buf[1], 43);
        }
        for (int i = 0; i < 2; i++) pscom_request_free(req2[i]);
    }
}

/* ---- pscom_wait_any in two threads ---- */

static pscom_request_t *wa_req;
static int wa_go[2], wa_back[2]; /* pipes: main -> other, other -> main */

static void *wa_other(void *arg)
{
    (void)arg;
    char c;
    TU_ASSERT_EQ(read(wa_go[0], &c, 1), 1);
    TU_ASSERT_EQ(pscom_cancel_recv(wa_req), 1);
    pscom_wait_any(); /* returns at once: the cancel was progress */
    TU_ASSERT_EQ(write(wa_back[1], "x", 1), 1);
    return NULL;
}

static void wait_any_per_thread(pscom_socket_t *s)
{
    TU_ASSERT_EQ(pipe(wa_go), 0);
    TU_ASSERT_EQ(pipe(wa_back), 0);
    pscom_wait_any(); /* this thread's mark: now */
    wa_req         = pscom_request_create(0, 0);
    wa_req->socket = s;
    pscom_post_recv(wa_req);
    pthread_t t;
    TU_ASSERT_EQ(pthread_create(&t, NULL, wa_other, NULL), 0);
    int first = 1;
    while (!pscom_req_is_done(wa_req)) {
        if (first) { /* the other thread runs between our test and our call */
            first = 0;
            char c;
            TU_ASSERT_EQ(write(wa_go[1], "x", 1), 1);
            TU_ASSERT_EQ(read(wa_back[0], &c, 1), 1);
        }
        pscom_wait_any();
    }
    pthread_join(t, NULL);
    TU_ASSERT_STATE_HAS(wa_req->state, PSCOM_REQ_STATE_CANCELED);
    pscom_request_free(wa_req);
    for (int i = 0; i < 2; i++) {
        close(wa_go[i]);
        close(wa_back[i]);
    }
}

static int self(tu_ctx_t *ctx)
{
    (void)ctx;
    TU_ASSERT_OK(pscom_init_thread(PSCOM_VERSION));
    pscom_socket_t *s = tu_open_socket(ctx, 0, 0);
    pscom_connection_t *loop = pscom_open_connection(s);
    TU_ASSERT_OK(pscom_connect(loop, NULL, 0, PSCOM_CON_FLAG_DIRECT));
    for (int cancel = 0; cancel <= 1; cancel++) {
        for (int round = 0; round < ROUNDS; round++) {
            int with_poller = round % 2;
            int buf = 0, val = 42;
            req              = pscom_request_create(0, 0);
            req->connection  = loop;
            req->data        = &buf;
            req->data_len    = sizeof(buf);
            pscom_post_recv(req);
            pthread_t w, p;
            stop_polling = 0;
            TU_ASSERT_EQ(pthread_create(&w, NULL, waiter, NULL), 0);
            if (with_poller) TU_ASSERT_EQ(pthread_create(&p, NULL, poller, NULL), 0);
            double t0 = tu_now_ms();
            while (tu_now_ms() - t0 < WAIT_MS) { /* the waiter falls asleep */
            }
            double t1 = tu_now_ms();
            if (cancel) {
                TU_ASSERT_EQ(pscom_cancel_recv(req), 1);
            } else {
                pscom_send(loop, NULL, 0, &val, sizeof(val));
            }
            pthread_join(w, NULL);
            double late = returned_ms - t1;
            __atomic_store_n(&stop_polling, 1, __ATOMIC_RELEASE);
            if (with_poller) pthread_join(p, NULL);
            tu_log("%s, %s: the waiter returned %.1f ms after", cancel ? "cancel" : "send",
                   with_poller ? "a thread polling" : "no poller", late);
            TU_ASSERT_MSG(late < LATE_MS,
                          "the waiting thread returned %.0f ms after the %s completed its "
                          "request (%s)",
                          late, cancel ? "pscom_cancel_recv" : "loopback send",
                          with_poller ? "another thread polling" : "no other thread");
            if (!cancel) TU_ASSERT_EQ(buf, 42);
            pscom_request_free(req);
        }
    }
    pscom_connection_t *loops[2] = {loop, pscom_open_connection(s)};
    TU_ASSERT_OK(pscom_connect(loops[1], NULL, 0, PSCOM_CON_FLAG_DIRECT));
    two_sleepers(loops);
    wait_any_per_thread(s);
    pscom_close_connection(loops[1]);
    pscom_close_connection(loop);
    pscom_close_socket(s);
    return 0;
}

int main(void)
{
    setenv("PSP_UCP", "0", 0); /* (TSan and UCX do not mix; the loopback needs neither) */
    return tu_run("threads_wake", 0, self, NULL, NULL);
}
