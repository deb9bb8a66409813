/*
 * pscom_signal.c - PSP_SIGQUIT and PSP_SIGSEGV (see pscom_signal.h).
 *
 * Neither handler takes the lock or calls stdio or malloc.
 *
 * SIGQUIT: the handler only writes to an eventfd of its own in the
 * progress engine's fd set (quiet: a busy-polling loop sees it within a
 * clock tick). The next progress pass reads it and logs the dump, with the
 * lock held: a process blocked in pscom_wait() dumps at once (epoll_wait
 * ends by the signal or by the fd), one that is not inside pscom at its
 * next call that makes progress. A child forked after pscom_init() shares
 * that eventfd with its parent: there the signal gets its default action.
 *
 * SIGSEGV: the handler (on an alternate stack of ours if the thread that
 * called pscom_init() had none, so that a stack overflow there is reported
 * too) puts the action that was there before back, writes one header line
 * and the backtrace (backtrace_symbols_fd) to the log's fd, and returns:
 * the faulting instruction faults again, now into the previous handler
 * (a sanitizer's, UCX's, the application's) or the default action (core
 * dump, death by SIGSEGV). A SIGSEGV sent by kill() does not repeat by
 * itself: it is raised again (blocked until the handler returns).
 */
#define _GNU_SOURCE
#include "pscom_signal.h"

#include <errno.h>
#include <execinfo.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "pscom_config.h"
#include "pscom_dump.h"
#include "pscom_log.h"
#include "pscom_plugin.h"

/* Not under ThreadSanitizer (the library built so, PSCOM_TSAN): with a
 * handler in front of its own, its report of the repeated fault ends at
 * "nested bug in the same thread", without the stack. */
#if defined(__SANITIZE_THREAD__)
#define SEGV_HANDLER_BUILD 0
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define SEGV_HANDLER_BUILD 0
#endif
#endif
#ifndef SEGV_HANDLER_BUILD
#define SEGV_HANDLER_BUILD 1
#endif

#define BACKTRACE_MAX 64 /* frames printed */
#define OWN_FRAMES_MAX 4 /* frames of ours (and of a sanitizer's interceptor) left out */
#define ALTSTACK_SIZE (64 * 1024)

/* ---- PSP_SIGQUIT ------------------------------------------------------- */

static int quit_fd = -1; /* read by the handler */
static pid_t quit_pid;   /* the process whose state the eventfd wakes */
static pscom_ufd_t quit_ufd;
static struct sigaction quit_prev;
static int quit_installed;

static void quit_handler(int sig)
{
    int saved_errno = errno;
    int fd          = __atomic_load_n(&quit_fd, __ATOMIC_ACQUIRE);
    if (getpid() != quit_pid) { /* a forked child: not our process */
        signal(sig, SIG_DFL);
        raise(sig); /* blocked until we return */
    } else if (fd >= 0) {
        uint64_t one = 1;
        if (write(fd, &one, sizeof(one)) < 0) { /* counter full: a dump is due anyway */
        }
    }
    errno = saved_errno;
}

/* the progress engine found the eventfd readable (lock held) */
static void quit_ready(pscom_ufd_t *ufd, uint32_t revents)
{
    (void)revents;
    uint64_t count;
    if (read(ufd->fd, &count, sizeof(count)) != sizeof(count)) return; /* nothing due */
    pscom_dump_info_log("SIGQUIT");
}

static void quit_install(void)
{
    int fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (fd < 0) {
        plog_err("PSP_SIGQUIT: eventfd() failed: %m; no dump on SIGQUIT");
        return;
    }
    quit_ufd = (pscom_ufd_t){.fd = fd, .events = EPOLLIN, .handler = quit_ready, .quiet = 1};
    if (pscom_ufd_add(&quit_ufd) < 0) {
        close(fd);
        return;
    }
    quit_pid = getpid();
    __atomic_store_n(&quit_fd, fd, __ATOMIC_RELEASE);

    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = quit_handler;
    sa.sa_flags   = SA_RESTART; /* the application's calls go on */
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGQUIT, &sa, &quit_prev) < 0) {
        plog_err("PSP_SIGQUIT: sigaction() failed: %m; no dump on SIGQUIT");
        return;
    }
    quit_installed = 1;
}

static void quit_uninstall(void)
{
    if (quit_installed) {
        struct sigaction cur;
        if (sigaction(SIGQUIT, NULL, &cur) == 0 && cur.sa_handler == quit_handler)
            sigaction(SIGQUIT, &quit_prev, NULL);
        quit_installed = 0;
    }
    int fd = __atomic_exchange_n(&quit_fd, -1, __ATOMIC_ACQ_REL);
    if (fd >= 0) {
        pscom_ufd_del(&quit_ufd);
        close(fd);
    }
}

/* ---- PSP_SIGSEGV ------------------------------------------------------- */

static struct sigaction segv_prev;
static int segv_installed;
static int segv_reported; /* one report per process: the first fault */
static char altstack[ALTSTACK_SIZE] __attribute__((aligned(64)));
static int altstack_ours;

/* Append s to buf (size bytes, NUL-terminated). */
static size_t put_str(char *buf, size_t size, size_t len, const char *s)
{
    while (*s && len + 1 < size) buf[len++] = *s++;
    buf[len] = '\0';
    return len;
}

/* Append v in base 10 or 16 ("0x" first). */
static size_t put_num(char *buf, size_t size, size_t len, uintptr_t v, unsigned base)
{
    char digits[2 + 2 * sizeof(v) * 3], *p = digits + sizeof(digits);
    *--p = '\0';
    do {
        *--p = "0123456789abcdef"[v % base];
    } while (v /= base);
    if (base == 16) {
        *--p = 'x';
        *--p = '0';
    }
    return put_str(buf, size, len, p);
}

static void write_all(int fd, const char *buf, size_t len)
{
    while (len) {
        ssize_t n = write(fd, buf, len);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return;
        buf += n;
        len -= (size_t)n;
    }
}

/* The header and the backtrace from the frame that called the handler on
 * (handler_ret: the handler's return address, the signal trampoline or a
 * sanitizer's wrapper): our own frames are left out. */
static void segv_report(const siginfo_t *si, void *handler_ret)
{
    char line[512];
    const char *suffix;
    size_t len;
    int fd = pscom_log_sigsafe(line, sizeof(line), &len, &suffix);
    if (si->si_code > 0) { /* a fault */
        len = put_str(line, sizeof(line), len, "SIGSEGV at address ");
        len = put_num(line, sizeof(line), len, (uintptr_t)si->si_addr, 16);
    } else if (si->si_pid == getpid()) {
        /* raise(), or another handler that caught a fault first and raised
         * it again (UCX's, after its own report): not from outside (until
         * 2026-11-29 "sent by pid <ours>") */
        len = put_str(line, sizeof(line), len,
                      "SIGSEGV raised by this process (raise(), or another handler's "
                      "report of a fault raised again)");
    } else {
        len = put_str(line, sizeof(line), len, "SIGSEGV sent by pid ");
        len = put_num(line, sizeof(line), len, (uintptr_t)si->si_pid, 10);
    }
    len = put_str(line, sizeof(line), len, ", backtrace:");
    len = put_str(line, sizeof(line), len, suffix);
    write_all(fd, line, len);

    void *frames[BACKTRACE_MAX + OWN_FRAMES_MAX];
    int n    = backtrace(frames, BACKTRACE_MAX + OWN_FRAMES_MAX);
    int skip = 0;
    while (skip < n && skip < OWN_FRAMES_MAX && frames[skip] != handler_ret) skip++;
    if (skip == n || frames[skip] != handler_ret) skip = 0; /* not found: all of them */
    backtrace_symbols_fd(frames + skip, n - skip, fd);
}

static void segv_handler(int sig, siginfo_t *si, void *ucontext)
{
    (void)ucontext;
    int saved_errno = errno;
    /* the previous action back first: a fault in here, or one in another
     * thread meanwhile, goes there */
    sigaction(sig, &segv_prev, NULL);
    if (!__atomic_exchange_n(&segv_reported, 1, __ATOMIC_ACQ_REL))
        segv_report(si, __builtin_return_address(0));
    if (si->si_code <= 0) raise(sig); /* sent: it does not repeat by itself */
    errno = saved_errno;
}

/* An alternate signal stack for this thread, unless it has one. */
static void altstack_install(void)
{
    stack_t cur;
    if (sigaltstack(NULL, &cur) < 0 || !(cur.ss_flags & SS_DISABLE)) return;
#ifdef _SC_MINSIGSTKSZ
    long min = sysconf(_SC_MINSIGSTKSZ); /* what the cpu's signal frame needs */
    if (min > 0 && (size_t)min > ALTSTACK_SIZE / 4) return;
#endif
    stack_t ss = {.ss_sp = altstack, .ss_size = sizeof(altstack), .ss_flags = 0};
    if (sigaltstack(&ss, NULL) == 0) altstack_ours = 1;
}

static void altstack_uninstall(void)
{
    stack_t cur;
    if (!altstack_ours) return;
    altstack_ours = 0;
    if (sigaltstack(NULL, &cur) < 0 || cur.ss_sp != altstack || (cur.ss_flags & SS_ONSTACK))
        return; /* another thread's, or replaced */
    stack_t off = {.ss_flags = SS_DISABLE};
    sigaltstack(&off, NULL);
}

static void segv_install(void)
{
    void *frame;
    backtrace(&frame, 1); /* loads the unwinder (libgcc_s) now, not in the handler */

    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_sigaction = segv_handler;
    sa.sa_flags     = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGSEGV, &sa, &segv_prev) < 0) {
        plog_err("PSP_SIGSEGV: sigaction() failed: %m; no backtrace on SIGSEGV");
        return;
    }
    if (!(segv_prev.sa_flags & SA_SIGINFO) && segv_prev.sa_handler == SIG_IGN) {
        sigaction(SIGSEGV, &segv_prev, NULL); /* the application's choice */
        return;
    }
    segv_installed = 1;
    altstack_install();
}

static void segv_uninstall(void)
{
    if (segv_installed) {
        struct sigaction cur;
        if (sigaction(SIGSEGV, NULL, &cur) == 0 && (cur.sa_flags & SA_SIGINFO) &&
            cur.sa_sigaction == segv_handler)
            sigaction(SIGSEGV, &segv_prev, NULL);
        segv_installed = 0;
    }
    altstack_uninstall();
}

/* ------------------------------------------------------------------------ */

void pscom_signal_init(void)
{
    if (pscom_config.sigquit) quit_install();
    if (pscom_config.sigsegv && SEGV_HANDLER_BUILD) segv_install();
    if (pscom_config.sigsegv && !SEGV_HANDLER_BUILD)
        plog_dbg("PSP_SIGSEGV: no handler in a ThreadSanitizer build (it reports a fault itself)");
}

void pscom_signal_fini(void)
{
    quit_uninstall();
    segv_uninstall();
}
