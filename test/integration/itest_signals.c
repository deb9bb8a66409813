/*
 * itest_signals: PSP_SIGSEGV and PSP_SIGQUIT (lib/pscom/pscom_signal.c).
 *
 * Every case runs in a child of its own whose stderr is a pipe the parent
 * reads (to EOF, or until the text it waits for is there: never a sleep).
 *
 * SIGSEGV: a child calls pscom_init() and writes through a NULL pointer
 * (or overflows its stack, or raises SIGSEGV itself). By default its
 * stderr has the header line "<PSP:host:pid:SIGSEGV at address 0x0,
 * backtrace:>" and a backtrace, and it dies by SIGSEGV all the same; with
 * PSP_SIGSEGV=0 it dies so without them, and pscom_init() left the action
 * alone. A handler the application installed before pscom_init() runs
 * after ours (it exits 42 here).
 *
 * Under a sanitizer (ASan, TSan) the sanitizer's own handler is the one
 * installed before ours: it must still report after our header, and the
 * child then ends as the sanitizer ends it (exit 1 or abort), not by
 * SIGSEGV; that is what is checked there. Under ThreadSanitizer the
 * library installs no handler (pscom_signal.c): there the header must not
 * appear, and TSan's report must be whole (its SUMMARY line).
 *
 * SIGQUIT: with PSP_SIGQUIT=1 a child blocked in pscom_wait() on a receive
 * that never comes dumps its state when sent SIGQUIT (the posted receive
 * among it), twice, and keeps waiting: the parent then connects and sends
 * the message, and the child ends with exit status 0. Without PSP_SIGQUIT
 * the signal keeps its default action (the child dies by SIGQUIT).
 */
#define _GNU_SOURCE
#include <pscom.h>

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "pscom_testutil.h"

#if defined(__SANITIZE_THREAD__)
#define TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define TSAN 1
#endif
#endif
#ifndef TSAN
#define TSAN 0
#endif
#if defined(__SANITIZE_ADDRESS__) || TSAN
#define SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SANITIZED 1
#endif
#endif
#ifndef SANITIZED
#define SANITIZED 0
#endif

#define RECV_LEN 4242 /* the receive the SIGQUIT dump must show */
#define APP_EXIT 42   /* the application's own SIGSEGV handler exits so */

typedef void (*child_fn)(int ctl);

static int failures;

static void fail(const char *name, const char *why)
{
    printf("FAIL %s: %s\n", name, why);
    failures++;
}

/* ---- the children ------------------------------------------------------- */

/* (the sanitizers would report the write themselves, before it faults) */
__attribute__((no_sanitize("address", "thread", "undefined"))) static void write_null(void)
{
    volatile int *volatile p = NULL;
    *p = 1;
}

static void child_fault(int ctl)
{
    (void)ctl;
    TU_ASSERT_OK(pscom_init(PSCOM_VERSION));
    write_null();
    _exit(0); /* not reached */
}

/* PSP_SIGSEGV=0: pscom_init() leaves SIGSEGV's action as it was */
static void child_fault_off(int ctl)
{
    (void)ctl;
    struct sigaction before, after;
    sigaction(SIGSEGV, NULL, &before);
    TU_ASSERT_OK(pscom_init(PSCOM_VERSION));
    sigaction(SIGSEGV, NULL, &after);
    TU_ASSERT_PTR_EQ((void *)after.sa_handler, (void *)before.sa_handler);
    write_null();
    _exit(0);
}

static void app_handler(int sig, siginfo_t *si, void *uc)
{
    (void)uc;
    static const char msg[] = "application handler: SIGSEGV\n";
    ssize_t w = write(2, msg, sizeof(msg) - 1);
    (void)w;
    _exit(sig == SIGSEGV && si->si_addr == NULL ? APP_EXIT : 1);
}

static void child_fault_app_handler(int ctl)
{
    (void)ctl;
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_sigaction = app_handler;
    sa.sa_flags     = SA_SIGINFO;
    sigemptyset(&sa.sa_mask);
    TU_ASSERT_EQ(sigaction(SIGSEGV, &sa, NULL), 0);
    TU_ASSERT_OK(pscom_init(PSCOM_VERSION));
    write_null();
    _exit(0);
}

static int recurse(volatile int *depth)
{
    volatile char pad[512];
    pad[0] = (char)*depth;
    if (++*depth < 0) return 0; /* never */
    return recurse(depth) + pad[0];
}

static void child_overflow(int ctl)
{
    (void)ctl;
    volatile int depth = 0;
    TU_ASSERT_OK(pscom_init(PSCOM_VERSION));
    _exit(recurse(&depth) == 42); /* not reached */
}

static void child_raise(int ctl)
{
    (void)ctl;
    TU_ASSERT_OK(pscom_init(PSCOM_VERSION));
    raise(SIGSEGV);
    _exit(0);
}

static void write_ctl(int ctl, const void *buf, size_t len)
{
    const char *p = buf;
    while (len) {
        ssize_t n = write(ctl, p, len);
        if (n < 0 && errno == EINTR) continue;
        TU_ASSERT_GT(n, 0);
        p += n;
        len -= (size_t)n;
    }
}

/* without PSP_SIGQUIT: the action stays the default one */
static void child_quit_default(int ctl)
{
    TU_ASSERT_OK(pscom_init(PSCOM_VERSION));
    struct sigaction sa;
    sigaction(SIGQUIT, NULL, &sa);
    TU_ASSERT_PTR_EQ((void *)sa.sa_handler, (void *)SIG_DFL);
    write_ctl(ctl, "r", 1);
    for (;;) pause();
}

/* PSP_SIGQUIT=1: wait for a message that comes only after the dumps */
static void child_quit(int ctl)
{
    static char buf[RECV_LEN];
    TU_ASSERT_OK(pscom_init(PSCOM_VERSION));
    pscom_socket_t *sock = pscom_open_socket(0, 0, 0, PSCOM_SOCK_FLAG_INTER_JOB);
    TU_ASSERT_NOT_NULL(sock);
    TU_ASSERT_OK(pscom_listen(sock, PSCOM_ANYPORT));
    pscom_request_t *req = pscom_request_create(0, 0);
    TU_ASSERT_NOT_NULL(req);
    req->socket     = sock;
    req->connection = NULL;
    req->data       = buf;
    req->data_len   = sizeof(buf);
    pscom_post_recv(req);

    char *ep = NULL;
    TU_ASSERT_OK(pscom_socket_get_ep_str(sock, &ep));
    uint32_t len = (uint32_t)strlen(ep);
    write_ctl(ctl, &len, sizeof(len));
    write_ctl(ctl, ep, len);
    pscom_socket_free_ep_str(ep);

    pscom_wait(req);
    TU_ASSERT_SUCCESSFUL(req);
    TU_ASSERT_EQ(req->data_len, RECV_LEN);
    TU_ASSERT_PATTERN(buf, RECV_LEN, 7);
    pscom_request_free(req);
    pscom_close_socket(sock);
    exit(0);
}

/* ---- the parent --------------------------------------------------------- */

typedef struct child {
    pid_t pid;
    int err; /* its stderr */
    int ctl; /* what it writes to its control pipe */
    char *text;
    size_t len, cap;
} child_t;

static const char *current = "start"; /* the case running (for the watchdog) */

/* Start a child running fn(its end of the control pipe) with env_name set
 * to env_value (if not NULL); 60 s for the case from now. */
static void spawn(const char *name, child_t *c, child_fn fn, const char *env_name,
                  const char *env_value)
{
    current = name;
    alarm(60);
    int err[2], ctl[2];
    TU_ASSERT_EQ(pipe(err), 0);
    TU_ASSERT_EQ(pipe(ctl), 0);
    fflush(NULL);
    memset(c, 0, sizeof(*c));
    c->pid = fork();
    TU_ASSERT_GE(c->pid, 0);
    if (c->pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        struct rlimit no_core = {0, 0}; /* the deaths here are on purpose */
        setrlimit(RLIMIT_CORE, &no_core);
        close(err[0]);
        close(ctl[0]);
        dup2(err[1], 2);
        close(err[1]);
        unsetenv("PSP_SIGSEGV");
        unsetenv("PSP_SIGQUIT");
        unsetenv("PSP_DEBUG_OUT");
        if (env_name) setenv(env_name, env_value, 1);
        fn(ctl[1]);
        _exit(0);
    }
    close(err[1]);
    close(ctl[1]);
    c->err = err[0];
    c->ctl = ctl[0];
}

/* Read the child's stderr until needle occurs count times (or EOF, if
 * count is 0). Returns 0 at EOF first. */
static int read_until(child_t *c, const char *needle, int count)
{
    for (;;) {
        if (count && c->text && tu_count(c->text, needle) >= count) return 1;
        if (c->cap - c->len < 4096) {
            c->cap  = c->cap ? 2 * c->cap : 65536;
            c->text = realloc(c->text, c->cap);
            TU_ASSERT_NOT_NULL(c->text);
        }
        ssize_t n = read(c->err, c->text + c->len, c->cap - c->len - 1);
        if (n < 0 && errno == EINTR) continue;
        TU_ASSERT_GE(n, 0);
        if (n == 0) {
            c->text[c->len] = '\0';
            return !count;
        }
        c->len += (size_t)n;
        c->text[c->len] = '\0';
    }
}

/* Its stderr to EOF, then its end; the text echoed for the test's log. */
static int finish(const char *name, child_t *c)
{
    int st = 0;
    read_until(c, "", 0);
    TU_ASSERT_EQ(tu_sys_waitpid(c->pid, &st), c->pid);
    close(c->err);
    close(c->ctl);
    printf("--- %s: stderr ---\n%s--- %s: ", name, c->text ? c->text : "", name);
    if (WIFSIGNALED(st)) {
        printf("killed by signal %d\n", WTERMSIG(st));
    } else {
        printf("exit status %d\n", WEXITSTATUS(st));
    }
    return st;
}

static void read_ctl(child_t *c, void *buf, size_t len)
{
    TU_ASSERT_EQ(tu_sys_read_all(c->ctl, buf, len), (ssize_t)len);
}

/* The line of stderr that is our header: "<PSP:host:pid:" + header (its
 * start) ... ", backtrace:>". NULL if there is none. */
static const char *header_line(const char *text, const char *header)
{
    for (const char *l = text; l && *l; l = strchr(l, '\n'), l = l ? l + 1 : NULL) {
        const char *nl = strchr(l, '\n');
        const char *h  = strstr(l, header);
        const char *e  = strstr(l, ", backtrace:>\n");
        if (strncmp(l, "<PSP:", 5) == 0 && h && h[-1] == ':' && e && (!nl || h < nl) &&
            e + strlen(", backtrace:>") == nl)
            return l;
    }
    return NULL;
}

/* A SIGSEGV case: our header (the start of what follows "host:pid:";
 * with_pid: and the child's pid) or none (NULL); the end: app_exit, or as
 * without a handler of the test's own. */
static void segv_case(const char *name, child_fn fn, const char *env_name,
                      const char *env_value, const char *header, int with_pid, int app_exit)
{
    child_t c;
    char want[128];
    spawn(name, &c, fn, env_name, env_value);
    if (header) snprintf(want, sizeof(want), "%s", header);
    if (header && with_pid) snprintf(want, sizeof(want), "%s %d,", header, (int)c.pid);
    int st           = finish(name, &c);
    const char *text = c.text ? c.text : "";

    if (header && TSAN) { /* no handler: nothing of ours, TSan's whole report */
        if (strstr(text, "SIGSEGV at") || strstr(text, "SIGSEGV sent") ||
            strstr(text, "SIGSEGV raised"))
            fail(name, "backtrace header printed in a ThreadSanitizer build");
        if (!app_exit && !strstr(text, "SUMMARY: ThreadSanitizer"))
            fail(name, "ThreadSanitizer's report is not whole");
    } else if (header) {
        const char *h = header_line(text, want);
        if (!h) {
            fail(name, "no header line \"<PSP:host:pid:SIGSEGV ..., backtrace:>\"");
        } else if (!strstr(h, "[0x")) { /* backtrace_symbols_fd: "...[0xADDR]" */
            fail(name, "no backtrace after the header");
        }
        if (h && app_exit && !strstr(h, "application handler"))
            fail(name, "the application's handler did not run after ours");
        if (h && !app_exit && SANITIZED && !strstr(h, "Sanitizer"))
            fail(name, "the sanitizer did not report after our header");
    } else if (strstr(text, "SIGSEGV at") || strstr(text, "SIGSEGV sent")) {
        fail(name, "backtrace header printed although switched off");
    }

    if (app_exit) {
        if (!WIFEXITED(st) || WEXITSTATUS(st) != app_exit)
            fail(name, "did not end through the application's handler");
    } else if (SANITIZED) {
        if (WIFEXITED(st) && WEXITSTATUS(st) == 0) fail(name, "exited with status 0");
        if (!strstr(text, "Sanitizer")) fail(name, "no sanitizer report");
    } else if (!WIFSIGNALED(st) || WTERMSIG(st) != SIGSEGV) {
        fail(name, "did not die by SIGSEGV");
    }
    printf("%s %s\n", failures ? "(failures so far)" : "ok", name);
    free(c.text);
}

/* PSP_DEBUG_OUT: the header and the backtrace go to the log file, its
 * lines without "<PSP:" and ">" */
static void debug_out_case(void)
{
    const char *name = "NULL write, PSP_DEBUG_OUT";
    if (TSAN) {
        printf("skipped %s: no SIGSEGV handler in a ThreadSanitizer build\n", name);
        return;
    }
    const char *dir  = getenv("TMPDIR");
    char path[512], want[128];
    snprintf(path, sizeof(path), "%s/itest_signals.%d.log", dir && *dir ? dir : "/tmp",
             (int)getpid());
    unlink(path);
    child_t c;
    spawn(name, &c, child_fault, "PSP_DEBUG_OUT", path);
    snprintf(want, sizeof(want), ":%d:SIGSEGV at address 0x0, backtrace:\n", (int)c.pid);
    int st = finish(name, &c);
    FILE *f = fopen(path, "r");
    char log[8192] = "";
    size_t n = f ? fread(log, 1, sizeof(log) - 1, f) : 0;
    log[n] = '\0';
    if (f) fclose(f);
    printf("--- %s: %s ---\n%s", name, path, log);
    const char *h = strstr(log, want);
    if (!h || strstr(log, "<PSP:")) fail(name, "no header line \"host:pid:SIGSEGV ...\" in the log");
    if (h && !strstr(h, "[0x")) fail(name, "no backtrace after the header");
    if (c.text && strstr(c.text, "SIGSEGV at")) fail(name, "header on stderr, not in the log");
    if (!SANITIZED && (!WIFSIGNALED(st) || WTERMSIG(st) != SIGSEGV))
        fail(name, "did not die by SIGSEGV");
    printf("%s %s\n", failures ? "(failures so far)" : "ok", name);
    unlink(path);
    free(c.text);
}

static void quit_default_case(void)
{
    const char *name = "SIGQUIT, PSP_SIGQUIT unset";
    child_t c;
    char r;
    spawn(name, &c, child_quit_default, NULL, NULL);
    read_ctl(&c, &r, 1);
    TU_ASSERT_EQ(kill(c.pid, SIGQUIT), 0);
    int st = finish(name, &c);
    if (!WIFSIGNALED(st) || WTERMSIG(st) != SIGQUIT) fail(name, "did not die by SIGQUIT");
    if (c.text && strstr(c.text, "dump")) fail(name, "dumped although not asked to");
    printf("%s %s\n", failures ? "(failures so far)" : "ok", name);
    free(c.text);
}

static void quit_case(void)
{
    const char *name = "SIGQUIT, PSP_SIGQUIT=1";
    const char *end  = "SIGQUIT: end of dump";
    child_t c;
    spawn(name, &c, child_quit, "PSP_SIGQUIT", "1");
    uint32_t len;
    read_ctl(&c, &len, sizeof(len));
    TU_ASSERT_LT(len, 4096);
    char *ep = tu_malloc(len + 1);
    read_ctl(&c, ep, len);
    ep[len] = '\0';

    /* asleep in pscom_wait, nothing connected */
    tu_step("first SIGQUIT");
    TU_ASSERT_EQ(kill(c.pid, SIGQUIT), 0);
    if (!read_until(&c, end, 1)) fail(name, "no dump (stderr ended)");
    const char *words[] = {"<PSP:",       "SIGQUIT: dump of", "socket ",
                           "posted recv req", "len 4242",      "fds:",
                           "requests created:"};
    for (size_t i = 0; i < sizeof(words) / sizeof(words[0]); i++) {
        if (c.text && !strstr(c.text, words[i])) {
            char why[128];
            snprintf(why, sizeof(why), "\"%s\" not in the dump", words[i]);
            fail(name, why);
        }
    }
    size_t first_len = c.len;

    /* connected (over shm or tcp by the defaults: the child's wait may
     * busy-poll now), still waiting */
    tu_step("connect");
    TU_ASSERT_OK(pscom_init(PSCOM_VERSION));
    pscom_socket_t *sock = pscom_open_socket(0, 0, 1, PSCOM_SOCK_FLAG_INTER_JOB);
    TU_ASSERT_NOT_NULL(sock);
    pscom_connection_t *con = pscom_open_connection(sock);
    TU_ASSERT_NOT_NULL(con);
    TU_ASSERT_OK(pscom_connect(con, ep, 0, PSCOM_CON_FLAG_DIRECT));
    tu_step("second SIGQUIT");
    TU_ASSERT_EQ(kill(c.pid, SIGQUIT), 0);
    if (!read_until(&c, end, 2)) fail(name, "no second dump (stderr ended)");
    if (c.text && !strstr(c.text + first_len, "posted recv req"))
        fail(name, "the second dump lacks the posted receive");

    /* the message: the child's wait ends, it exits 0 */
    tu_step("send");
    static char data[RECV_LEN];
    tu_fill(data, sizeof(data), 7);
    pscom_send(con, NULL, 0, data, sizeof(data));
    pscom_flush(con);
    pscom_close_connection(con);
    pscom_close_socket(sock);
    int st = finish(name, &c);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) fail(name, "did not go on to exit 0");
    printf("%s %s\n", failures ? "(failures so far)" : "ok", name);
    free(ep);
    free(c.text);
}

static void watchdog(int sig)
{
    (void)sig;
    char msg[256];
    int n = snprintf(msg, sizeof(msg), "FAIL %s: WATCHDOG (60 s), aborting\n", current);
    ssize_t w = write(1, msg, n > 0 ? (size_t)n : 0);
    (void)w;
    _exit(124);
}

int main(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    signal(SIGALRM, watchdog);
    if (SANITIZED) printf("sanitizer build: a fault ends as the sanitizer ends it\n");
    if (TSAN) printf("ThreadSanitizer build: the library installs no SIGSEGV handler\n");

    segv_case("NULL write, PSP_SIGSEGV default", child_fault, NULL, NULL,
              "SIGSEGV at address 0x0,", 0, 0);
    segv_case("NULL write, PSP_SIGSEGV=1", child_fault, "PSP_SIGSEGV", "1",
              "SIGSEGV at address 0x0,", 0, 0);
    segv_case("NULL write, PSP_SIGSEGV=0", child_fault_off, "PSP_SIGSEGV", "0", NULL, 0, 0);
    segv_case("NULL write, application handler", child_fault_app_handler, NULL, NULL,
              "SIGSEGV at address 0x0,", 0, APP_EXIT);
    /* (the address: where the stack ends) */
    segv_case("stack overflow", child_overflow, NULL, NULL, "SIGSEGV at address 0x", 0, 0);
    segv_case("raise(SIGSEGV)", child_raise, NULL, NULL, "SIGSEGV raised by this process", 0, 0);
    debug_out_case();
    quit_default_case();
    quit_case(); /* last: the parent calls pscom_init() there */

    printf("%s\n", failures ? "FAILED" : "ok");
    return failures ? 1 : 0;
}
