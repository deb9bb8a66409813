/*
 * sigstorm.c - an LD_PRELOAD library for scripts/sigstorm.sh: a no-op
 * signal every SIG_US microseconds (default 200) in every process, without
 * SA_RESTART, so that blocking system calls fail with EINTR now and then.
 * A POSIX timer on SIGRTMIN+3 (the test harness's alarm() stays free),
 * created again in every forked child (timers are not inherited).
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static void on_sig(int sig)
{
    (void)sig;
}

static void arm(void)
{
    const char *us = getenv("SIG_US");
    long v         = us ? atol(us) : 200;
    struct sigevent ev;
    memset(&ev, 0, sizeof(ev));
    ev.sigev_notify = SIGEV_SIGNAL;
    ev.sigev_signo  = SIGRTMIN + 3;
    timer_t t;
    struct itimerspec it = {{v / 1000000, (v % 1000000) * 1000}, {v / 1000000, (v % 1000000) * 1000}};
    if (timer_create(CLOCK_MONOTONIC, &ev, &t) != 0 || timer_settime(t, 0, &it, NULL) != 0) {
        perror("sigstorm: timer");
        abort();
    }
}

__attribute__((constructor)) static void start(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_sig;
    sigaction(SIGRTMIN + 3, &sa, NULL);
    pthread_atfork(NULL, NULL, arm);
    arm();
}
