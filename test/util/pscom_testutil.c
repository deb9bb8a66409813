/*
 * pscom_testutil.c - process harness, control channels, assertions and
 * pscom helpers for the integration tests (see pscom_testutil.h).
 */
#define _GNU_SOURCE
#include "pscom_testutil.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <time.h>
#include <sys/wait.h>
#include <unistd.h>

/* ------------------------------------------------------------------ */
/* Identity, logging, failure                                         */
/* ------------------------------------------------------------------ */

static char tu_who_buf[128] = "[harness]";
static unsigned tu_watchdog_secs;
static char tu_step_buf[256] = "(start)";

void tu_step(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(tu_step_buf, sizeof(tu_step_buf), fmt, ap);
    va_end(ap);
}

const char *tu_who(void)
{
    return tu_who_buf;
}

static void tu_set_who(const char *name, int rank)
{
    if (rank == TU_SERVER) {
        snprintf(tu_who_buf, sizeof(tu_who_buf), "[%s server pid %d]", name,
                 (int)getpid());
    } else {
        snprintf(tu_who_buf, sizeof(tu_who_buf), "[%s client%d pid %d]", name,
                 rank, (int)getpid());
    }
}

void tu_log(const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    fprintf(stderr, "%s %s\n", tu_who_buf, msg);
    fflush(stderr);
}

/* stderr while captured (tu_capture_begin) */
static int capture_saved_fd = -1;
static FILE *capture_file;

void tu_fail(const char *file, int line, const char *fmt, ...)
{
    char msg[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    fflush(stdout);
    /* a failure while stderr is captured: what was captured, then the
     * failure (once: tu_capture_end() may fail itself) */
    static int failing;
    if (capture_file && !failing++) free(tu_capture_end());
    fprintf(stderr, "%s:%d: %s FAILED: %s\n", file, line, tu_who_buf, msg);
    fflush(stderr);
    _exit(1);
}

#define TU_NBUF 8
static char tu_strbufs[TU_NBUF][256];
static unsigned tu_strbuf_next;

static char *tu_strbuf(void)
{
    return tu_strbufs[tu_strbuf_next++ % TU_NBUF];
}

const char *tu_err_str(pscom_err_t err)
{
    char *buf       = tu_strbuf();
    const char *str = pscom_err_str(err);
    snprintf(buf, 256, "%s", str ? str : "(null)");
    return buf;
}

const char *tu_state_str(pscom_req_state_t state)
{
    char *buf       = tu_strbuf();
    const char *str = pscom_req_state_str(state);
    snprintf(buf, 256, "%s", str ? str : "(null)");
    return buf;
}

void *tu_malloc(size_t size)
{
    void *p = malloc(size ? size : 1);
    if (!p) TU_FAIL("malloc(%zu) failed", size);
    return p;
}

void tu_pause_ms(unsigned ms)
{
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) < 0) {
    }
}

double tu_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

int tu_count_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    TU_ASSERT_NOT_NULL(d);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        char link[64];
        ssize_t len = readlinkat(dirfd(d), e->d_name, link, sizeof(link) - 1);
        if (len > 0) {
            link[len] = 0;
            if (!strcmp(link, "anon_inode:[timerfd]")) continue;
        }
        n++;
    }
    closedir(d);
    return n - 1; /* the directory's own fd */
}

size_t tu_rss_bytes(void)
{
    FILE *f = fopen("/proc/self/statm", "r");
    TU_ASSERT_NOT_NULL(f);
    unsigned long size = 0, res = 0;
    TU_ASSERT_EQ(fscanf(f, "%lu %lu", &size, &res), 2);
    fclose(f);
    return (size_t)res * (size_t)sysconf(_SC_PAGESIZE);
}

long tu_heap_bytes(void)
{
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 33))
    struct mallinfo2 mi = mallinfo2();
    return (long)(mi.uordblks + mi.hblkhd);
#else
    return 0;
#endif
}

int tu_tcp_socket(uint32_t addr, int backlog, int *port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    TU_ASSERT_GE(fd, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(addr)};
    TU_ASSERT_EQ(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    if (backlog > 0) TU_ASSERT_EQ(listen(fd, backlog), 0);
    socklen_t len = sizeof(sa);
    TU_ASSERT_EQ(getsockname(fd, (struct sockaddr *)&sa, &len), 0);
    *port = ntohs(sa.sin_port);
    return fd;
}

int tu_tcp_accept(int lfd)
{
    int fd;
    while ((fd = accept(lfd, NULL, NULL)) < 0 && errno == EINTR) {
    }
    TU_ASSERT_MSG(fd >= 0, "accept: %s", strerror(errno));
    return fd;
}

int tu_tcp_connect(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    TU_ASSERT_GE(fd, 0);
    struct sockaddr_in sa = {.sin_family      = AF_INET,
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK),
                             .sin_port        = htons((uint16_t)port)};
    TU_ASSERT_MSG(tu_sys_connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0,
                  "connect to port %d: %s", port, strerror(errno));
    return fd;
}

/* ------------------------------------------------------------------ */
/* stderr capture                                                     */
/* ------------------------------------------------------------------ */

void tu_capture_begin(void)
{
    TU_ASSERT_NULL(capture_file);
    fflush(stderr);
    capture_file = tmpfile();
    TU_ASSERT_NOT_NULL(capture_file);
    capture_saved_fd = dup(2);
    TU_ASSERT_GE(capture_saved_fd, 0);
    TU_ASSERT_GE(dup2(fileno(capture_file), 2), 0);
}

char *tu_capture_end(void)
{
    TU_ASSERT_NOT_NULL(capture_file);
    fflush(stderr);
    dup2(capture_saved_fd, 2);
    close(capture_saved_fd);
    capture_saved_fd = -1;
    long len         = ftell(capture_file);
    char *buf        = tu_malloc((size_t)len + 1);
    rewind(capture_file);
    size_t n = fread(buf, 1, (size_t)len, capture_file);
    buf[n]   = 0;
    fclose(capture_file);
    capture_file = NULL;
    fprintf(stderr, "%s[captured library output:]\n%s[end]\n", tu_who(), buf);
    return buf;
}

/* ------------------------------------------------------------------ */
/* pscom's log of each process                                        */
/* ------------------------------------------------------------------ */

static char log_prefix[256]; /* "$TMPDIR/<prefix>" once tu_log_files() ran */

void tu_log_files(const char *prefix, int debug)
{
    const char *dir = getenv("TMPDIR");
    char out[sizeof(log_prefix) + 16], level[16];
    TU_ASSERT_LT(snprintf(log_prefix, sizeof(log_prefix), "%s/%s", dir && *dir ? dir : "/tmp",
                          prefix),
                 (int)sizeof(log_prefix));
    snprintf(out, sizeof(out), "%s.$$.log", log_prefix); /* pscom puts in the pid */
    snprintf(level, sizeof(level), "%d", debug);
    setenv("PSP_DEBUG_OUT", out, 1);
    setenv("PSP_DEBUG", level, 1);
}

static void log_file_path_of(pid_t pid, char *buf, size_t size)
{
    TU_ASSERT_MSG(log_prefix[0], "tu_log_files() was not called");
    snprintf(buf, size, "%s.%d.log", log_prefix, (int)pid);
}

static void log_file_path(char *buf, size_t size)
{
    log_file_path_of(getpid(), buf, size);
}

int tu_log_file_count_of(pid_t pid, const char *needle)
{
    char path[sizeof(log_prefix) + 32];
    log_file_path_of(pid, path, sizeof(path));
    int fd = open(path, O_RDONLY);
    if (fd < 0) return 0;
    char *text = tu_read_fd(fd);
    close(fd);
    TU_ASSERT_NOT_NULL(text);
    int n = tu_count(text, needle);
    free(text);
    return n;
}

char *tu_log_file_text(void)
{
    char path[sizeof(log_prefix) + 32];
    log_file_path(path, sizeof(path));
    int fd = open(path, O_RDONLY);
    TU_ASSERT_MSG(fd >= 0, "no log at %s", path);
    char *text = tu_read_fd(fd);
    close(fd);
    TU_ASSERT_NOT_NULL(text);
    return text;
}

int tu_log_file_count(const char *needle)
{
    char *text = tu_log_file_text();
    int n      = tu_count(text, needle);
    free(text);
    return n;
}

void tu_log_file_remove_of(pid_t pid)
{
    char path[sizeof(log_prefix) + 32];
    log_file_path_of(pid, path, sizeof(path));
    unlink(path);
}

void tu_log_file_remove(void)
{
    tu_log_file_remove_of(getpid());
}

/* ------------------------------------------------------------------ */
/* Content patterns                                                   */
/* ------------------------------------------------------------------ */

static inline uint32_t tu_word(size_t widx, uint32_t seed)
{
    uint32_t w = (uint32_t)widx * 2654435761u ^ (seed * 0x9E3779B1u + 0x7f4a7c15u);
    w ^= w >> 13;
    w *= 0x5bd1e995u;
    w ^= w >> 15;
    return w;
}

static inline unsigned char tu_pat(size_t i, uint32_t seed)
{
    return (unsigned char)(tu_word(i >> 2, seed) >> ((i & 3) * 8));
}

void tu_fill(void *buf, size_t len, uint32_t seed)
{
    unsigned char *p = (unsigned char *)buf;
    size_t i         = 0;
    for (; i + 4 <= len; i += 4) {
        uint32_t w = tu_word(i >> 2, seed);
        p[i]       = (unsigned char)w;
        p[i + 1]   = (unsigned char)(w >> 8);
        p[i + 2]   = (unsigned char)(w >> 16);
        p[i + 3]   = (unsigned char)(w >> 24);
    }
    for (; i < len; i++) p[i] = tu_pat(i, seed);
}

size_t tu_check(const void *buf, size_t len, uint32_t seed)
{
    const unsigned char *p = (const unsigned char *)buf;
    size_t i               = 0;
    for (; i + 4 <= len; i += 4) {
        uint32_t w = tu_word(i >> 2, seed);
        if (p[i] != (unsigned char)w || p[i + 1] != (unsigned char)(w >> 8) ||
            p[i + 2] != (unsigned char)(w >> 16) ||
            p[i + 3] != (unsigned char)(w >> 24)) {
            break;
        }
    }
    for (; i < len; i++) {
        if (p[i] != tu_pat(i, seed)) return i;
    }
    return (size_t)-1;
}

void tu_assert_pattern(const char *file, int line, const char *ebuf,
                       const void *buf, size_t len, uint32_t seed)
{
    size_t off = tu_check(buf, len, seed);
    if (off != (size_t)-1) {
        const unsigned char *p = (const unsigned char *)buf;
        tu_fail(file, line,
                "content of %s (len %zu, seed %u) wrong at offset %zu: "
                "got 0x%02x, expected 0x%02x",
                ebuf, len, seed, off, p[off], tu_pat(off, seed));
    }
}

void tu_assert_bytes(const char *file, int line, const char *ebuf,
                     const void *buf, size_t len, unsigned char val)
{
    const unsigned char *p = (const unsigned char *)buf;
    for (size_t i = 0; i < len; i++) {
        if (p[i] != val) {
            tu_fail(file, line,
                    "%s[%zu] = 0x%02x, expected 0x%02x (len %zu): bytes "
                    "were modified",
                    ebuf, i, p[i], val, len);
        }
    }
}

void tu_assert_mem_eq(const char *file, int line, const char *ea,
                      const char *eb, const void *a, const void *b, size_t n)
{
    const unsigned char *pa = (const unsigned char *)a;
    const unsigned char *pb = (const unsigned char *)b;
    for (size_t i = 0; i < n; i++) {
        if (pa[i] != pb[i]) {
            tu_fail(file, line,
                    "memory %s != %s (len %zu): first difference at offset "
                    "%zu: 0x%02x vs 0x%02x",
                    ea, eb, n, i, pa[i], pb[i]);
        }
    }
}

/* ------------------------------------------------------------------ */
/* Process harness                                                    */
/* ------------------------------------------------------------------ */

static pid_t tu_children[TU_MAX_CLIENTS + 1]; /* [0] server */
static int tu_nchildren;

static void tu_watchdog(int sig)
{
    (void)sig;
    char msg[512];
    int len = snprintf(msg, sizeof(msg),
                       "%s WATCHDOG: no completion within %u s, aborting; "
                       "last step: %s\n",
                       tu_who_buf, tu_watchdog_secs, tu_step_buf);
    if (len > 0) {
        ssize_t r = write(2, msg, (size_t)len);
        (void)r;
    }
    _exit(124);
}

/* SIGUSR1 from the parent: another process failed; say where we were */
static void tu_abort_request(int sig)
{
    (void)sig;
    char msg[512];
    int len = snprintf(msg, sizeof(msg),
                       "%s aborted after another process failed; last step: %s\n",
                       tu_who_buf, tu_step_buf);
    if (len > 0) {
        ssize_t r = write(2, msg, (size_t)len);
        (void)r;
    }
    _exit(125);
}

static void tu_parent_watchdog(int sig)
{
    (void)sig;
    static const char msg[] = "[harness] WATCHDOG: children did not finish, "
                              "killing them\n";
    ssize_t r = write(2, msg, sizeof(msg) - 1);
    (void)r;
    for (int i = 0; i <= tu_nchildren; i++) {
        if (tu_children[i] > 0) kill(tu_children[i], SIGKILL);
    }
}

static unsigned tu_default_timeout(void)
{
    const char *env = getenv("PSCOM_TEST_TIMEOUT");
    if (env && atoi(env) > 0) return (unsigned)atoi(env);
    return 60;
}

static void tu_child_main(tu_ctx_t *ctx, tu_role_fn fn, pid_t parent, const tu_opts_t *opts)
{
    unsigned timeout = opts->timeout;
    /* die with the parent, so nothing outlives a killed test */
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(125);

    tu_set_who(ctx->name, ctx->rank);
    tu_watchdog_secs = timeout;

    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = tu_watchdog;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGALRM, &sa, NULL);
    sa.sa_handler = tu_abort_request;
    sigaction(SIGUSR1, &sa, NULL);
    alarm(timeout);

    /* pids wrap (pid_max is 32768 here) and a failed process keeps its log
     * for inspection: pscom appends, so start from an empty file */
    if (log_prefix[0]) tu_log_file_remove();
    if (opts->before_init) opts->before_init(ctx);
    /* pscom_init only now, after the fork, in every process */
    tu_step("pscom_init");
    TU_ASSERT_OK(pscom_init(PSCOM_VERSION));

    tu_step("role function");
    int rc = fn(ctx);
    tu_step("exit (library cleanup)");
    if (rc != 0) {
        tu_log("role returned %d", rc);
        fflush(NULL);
        _exit(rc & 0xff ? rc & 0xff : 1);
    }
    /* Normal exit: runs the library's atexit cleanup (still under the
     * watchdog). */
    fflush(NULL);
    exit(0);
}

/* A failed child's pscom log file (tu_log_files): its path and last lines,
 * where ctest shows them (an abort in the library says why only there). */
static void print_log_tail(pid_t pid)
{
    if (!log_prefix[0]) return;
    char path[sizeof(log_prefix) + 32];
    log_file_path_of(pid, path, sizeof(path));
    int fd = open(path, O_RDONLY);
    if (fd < 0) return;
    char *text = tu_read_fd(fd);
    close(fd);
    if (!text) return;
    const char *tail = text + strlen(text);
    for (int lines = 0; tail > text && lines <= 15; tail--)
        if (tail[-1] == '\n') lines++;
    fprintf(stderr, "%s last lines of %s:\n%s\n", tu_who_buf, path, tail);
    free(text);
}

static int tu_status_ok(int rank, int status, const tu_opts_t *opts, char *why,
                        size_t whylen)
{
    unsigned bit  = 1u << rank;
    int must_kill = rank != TU_SERVER && (opts->killed_must_mask & bit);
    int may_kill  = must_kill || (rank != TU_SERVER && (opts->killed_ok_mask & bit));

    if (WIFEXITED(status)) {
        snprintf(why, whylen, "exit status %d", WEXITSTATUS(status));
        if (must_kill) return 0;
        return WEXITSTATUS(status) == 0;
    }
    if (WIFSIGNALED(status)) {
        int sig = WTERMSIG(status);
        snprintf(why, whylen, "killed by signal %d (%s)", sig, strsignal(sig));
        return may_kill && sig == SIGKILL;
    }
    snprintf(why, whylen, "unknown wait status 0x%x", status);
    return 0;
}

int tu_run(const char *name, int nclients, tu_role_fn server, tu_role_fn client,
           const tu_opts_t *opts_in)
{
    tu_opts_t opts;
    int sp[TU_MAX_CLIENTS + 1][2];
    pid_t parent = getpid();

    memset(&opts, 0, sizeof(opts));
    if (opts_in) opts = *opts_in;
    if (!opts.timeout) opts.timeout = tu_default_timeout();

    if (nclients < 0 || nclients > TU_MAX_CLIENTS) {
        TU_FAIL("tu_run(%s): bad nclients %d", name, nclients);
    }
    snprintf(tu_who_buf, sizeof(tu_who_buf), "[%s harness]", name);
    fprintf(stderr, "%s starting: server + %d client(s), watchdog %u s\n",
            tu_who_buf, nclients, opts.timeout);

    for (int i = 1; i <= nclients; i++) {
        if (socketpair(AF_UNIX, SOCK_STREAM, 0, sp[i]) != 0) {
            TU_FAIL("socketpair: %s", strerror(errno));
        }
    }

    tu_ctx_t ctx;
    memset(&ctx, 0, sizeof(ctx));
    ctx.name     = name;
    ctx.nclients = nclients;
    for (int i = 0; i <= TU_MAX_CLIENTS; i++) ctx.ctl[i] = -1;

    fflush(NULL);
    tu_nchildren = nclients;
    memset(tu_children, 0, sizeof(tu_children));

    /* clients first, so that the server knows all client pids */
    for (int i = 1; i <= nclients; i++) {
        pid_t pid = fork();
        if (pid < 0) TU_FAIL("fork: %s", strerror(errno));
        if (pid == 0) {
            for (int j = 1; j <= nclients; j++) {
                close(sp[j][0]);
                if (j != i) close(sp[j][1]);
            }
            ctx.rank   = i;
            ctx.ctl[0] = sp[i][1];
            tu_child_main(&ctx, client, parent, &opts);
        }
        tu_children[i]     = pid;
        ctx.client_pids[i] = pid;
    }
    {
        pid_t pid = fork();
        if (pid < 0) TU_FAIL("fork: %s", strerror(errno));
        if (pid == 0) {
            for (int j = 1; j <= nclients; j++) {
                close(sp[j][1]);
                ctx.ctl[j] = sp[j][0];
            }
            ctx.rank = TU_SERVER;
            tu_child_main(&ctx, server, parent, &opts);
        }
        tu_children[0] = pid;
    }
    for (int j = 1; j <= nclients; j++) {
        close(sp[j][0]);
        close(sp[j][1]);
    }

    /* parent: reap everything; a failing child brings the rest down */
    struct sigaction sa, old_sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = tu_parent_watchdog;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGALRM, &sa, &old_sa);
    unsigned old_alarm = alarm(opts.timeout + 15);

    int failed    = 0;
    int remaining = nclients + 1;
    int done[TU_MAX_CLIENTS + 1];
    memset(done, 0, sizeof(done));
    while (remaining > 0) {
        int status;
        pid_t pid = waitpid(-1, &status, 0);
        if (pid < 0) {
            if (errno == EINTR) continue;
            fprintf(stderr, "%s waitpid: %s\n", tu_who_buf, strerror(errno));
            failed = 1;
            break;
        }
        int rank = -1;
        for (int i = 0; i <= nclients; i++) {
            if (tu_children[i] == pid && !done[i]) rank = i;
        }
        if (rank < 0) continue; /* not ours */
        done[rank] = 1;
        remaining--;

        char why[128];
        int ok = tu_status_ok(rank, status, &opts, why, sizeof(why));
        char role[32];
        if (rank == TU_SERVER) {
            snprintf(role, sizeof(role), "server");
        } else {
            snprintf(role, sizeof(role), "client%d", rank);
        }
        if (!ok) {
            fprintf(stderr, "%s %s (pid %d) FAILED: %s%s\n", tu_who_buf, role,
                    (int)pid, why, failed ? " (after an earlier failure)" : "");
            if (!failed) print_log_tail(pid);
            if (!failed) {
                /* ask the others to report their last step and exit; the
                 * parent watchdog SIGKILLs whatever is left after 5 s */
                failed = 1;
                for (int i = 0; i <= nclients; i++) {
                    if (!done[i]) kill(tu_children[i], SIGUSR1);
                }
                alarm(5);
            }
        }
    }
    alarm(old_alarm);
    sigaction(SIGALRM, &old_sa, NULL);
    memset(tu_children, 0, sizeof(tu_children));

    fprintf(stderr, "%s %s\n", tu_who_buf, failed ? "FAILED" : "passed");
    snprintf(tu_who_buf, sizeof(tu_who_buf), "[harness]");
    return failed ? 1 : 0;
}

/* ------------------------------------------------------------------ */
/* Control channel                                                    */
/* ------------------------------------------------------------------ */

static int tu_ctl_fd(tu_ctx_t *ctx, int peer)
{
    if (ctx->rank == TU_SERVER) {
        if (peer < 1 || peer > ctx->nclients) TU_FAIL("bad control peer %d", peer);
        return ctx->ctl[peer];
    }
    if (peer != TU_SERVER) TU_FAIL("clients only talk to the server (peer %d)", peer);
    return ctx->ctl[0];
}

static void tu_ctl_write(tu_ctx_t *ctx, int peer, const void *buf, size_t len)
{
    int fd                 = tu_ctl_fd(ctx, peer);
    const unsigned char *p = (const unsigned char *)buf;
    while (len > 0) {
        ssize_t n = send(fd, p, len, MSG_NOSIGNAL);
        if (n < 0) {
            if (errno == EINTR) continue;
            TU_FAIL("control channel to rank %d: send: %s", peer, strerror(errno));
        }
        p += n;
        len -= (size_t)n;
    }
}

static void tu_ctl_read(tu_ctx_t *ctx, int peer, void *buf, size_t len)
{
    tu_step("waiting on the control channel from rank %d", peer);
    ssize_t n = tu_sys_read_all(tu_ctl_fd(ctx, peer), buf, len);
    if (n < 0) TU_FAIL("control channel from rank %d: read: %s", peer, strerror(errno));
    if ((size_t)n < len) TU_FAIL("control channel from rank %d: peer exited (EOF)", peer);
}

void tu_signal(tu_ctx_t *ctx, int peer, uint32_t value)
{
    tu_ctl_write(ctx, peer, &value, sizeof(value));
}

uint32_t tu_wait_signal(tu_ctx_t *ctx, int peer)
{
    uint32_t value;
    tu_ctl_read(ctx, peer, &value, sizeof(value));
    return value;
}

uint32_t tu_wait_signal_progress(tu_ctx_t *ctx, int peer)
{
    int fd = tu_ctl_fd(ctx, peer);
    for (;;) {
        struct pollfd pfd = {fd, POLLIN, 0};
        int n             = poll(&pfd, 1, 0);
        if (n < 0 && errno != EINTR) TU_FAIL("poll: %s", strerror(errno));
        if (n > 0) return tu_wait_signal(ctx, peer);
        if (!pscom_test_any()) {
            /* nothing to do: idle up to 1 ms, or until the signal comes */
            pfd.revents = 0;
            n           = poll(&pfd, 1, 1);
            if (n < 0 && errno != EINTR) TU_FAIL("poll: %s", strerror(errno));
        }
    }
}

void tu_wait_peer_exit_progress(tu_ctx_t *ctx, int peer)
{
    int fd = tu_ctl_fd(ctx, peer);
    for (;;) {
        struct pollfd pfd = {fd, POLLIN, 0};
        int n             = poll(&pfd, 1, 1);
        if (n < 0 && errno != EINTR) TU_FAIL("poll: %s", strerror(errno));
        if (n > 0) {
            char buf[64];
            ssize_t r = read(fd, buf, sizeof(buf));
            if (r == 0 || (r < 0 && errno == ECONNRESET)) return;
            if (r < 0 && errno != EINTR) TU_FAIL("read: %s", strerror(errno));
        }
        pscom_test_any();
    }
}

void tu_wait_peer_exit(tu_ctx_t *ctx, int peer)
{
    int fd = tu_ctl_fd(ctx, peer);
    char buf[64];
    for (;;) {
        ssize_t n = read(fd, buf, sizeof(buf));
        if (n == 0) return;
        if (n < 0) {
            if (errno == EINTR) continue;
            if (errno == ECONNRESET) return;
            TU_FAIL("control channel from rank %d: read: %s", peer, strerror(errno));
        }
    }
}

/* ------------------------------------------------------------------ */
/* pscom helpers                                                      */
/* ------------------------------------------------------------------ */

pscom_socket_t *tu_open_socket(tu_ctx_t *ctx, size_t userdata_size,
                               size_t con_userdata_size)
{
    pscom_socket_t *sock = pscom_open_socket(userdata_size, con_userdata_size,
                                             ctx->rank, PSCOM_SOCK_FLAG_INTER_JOB);
    TU_ASSERT_NOT_NULL(sock);
    char name[16];
    if (ctx->rank == TU_SERVER) {
        snprintf(name, sizeof(name), "server");
    } else {
        snprintf(name, sizeof(name), "client%02d", ctx->rank % 100);
    }
    pscom_socket_set_name(sock, name);
    return sock;
}

void tu_server_listen(tu_ctx_t *ctx, pscom_socket_t *sock)
{
    char *ep = NULL;
    TU_ASSERT_EQ(ctx->rank, TU_SERVER);
    TU_ASSERT_OK(pscom_listen(sock, PSCOM_ANYPORT));
    TU_ASSERT_OK(pscom_socket_get_ep_str(sock, &ep));
    TU_ASSERT_NOT_NULL(ep);
    ctx->ep = strdup(ep);
    TU_ASSERT_NOT_NULL(ctx->ep);
    pscom_socket_free_ep_str(ep);

    uint32_t len = (uint32_t)strlen(ctx->ep);
    for (int i = 1; i <= ctx->nclients; i++) {
        tu_ctl_write(ctx, i, &len, sizeof(len));
        tu_ctl_write(ctx, i, ctx->ep, len);
    }
}

const char *tu_client_get_ep(tu_ctx_t *ctx)
{
    if (ctx->ep) return ctx->ep;
    uint32_t len;
    tu_ctl_read(ctx, TU_SERVER, &len, sizeof(len));
    TU_ASSERT_LT(len, 4096);
    ctx->ep = (char *)tu_malloc(len + 1);
    tu_ctl_read(ctx, TU_SERVER, ctx->ep, len);
    ctx->ep[len] = 0;
    return ctx->ep;
}

const char *tu_contype(void)
{
    static _Thread_local char type[32]; /* itest_threads asks from several threads */
    const char *v = getenv("PSCOM_TEST_CONTYPE");
    if (!v || !*v) return NULL;
    size_t n = strcspn(v, "-");
    TU_ASSERT_LT(n, sizeof(type));
    memcpy(type, v, n);
    type[n] = 0;
    return type;
}

void tu_check_con_type(pscom_connection_t *con)
{
    const char *want = tu_contype();
    TU_ASSERT_NOT_NULL(con);
    if (!want) return;
    const char *have = pscom_con_type_str(con->type);
    if (!have || strcmp(have, want) != 0) {
        TU_FAIL("connection type is \"%s\" (%d), PSCOM_TEST_CONTYPE wants \"%s\"",
                have ? have : "(null)", (int)con->type, want);
    }
}

pscom_connection_t *tu_client_connect(tu_ctx_t *ctx, pscom_socket_t *sock)
{
    const char *ep          = tu_client_get_ep(ctx);
    pscom_connection_t *con = pscom_open_connection(sock);
    TU_ASSERT_NOT_NULL(con);
    tu_step("pscom_connect(DIRECT) to %s", ep);
    TU_ASSERT_OK(pscom_connect(con, ep, TU_SERVER, PSCOM_CON_FLAG_DIRECT));
    TU_ASSERT_EQ(con->state, PSCOM_CON_STATE_RW);
    tu_check_con_type(con);

    uint32_t hello[2] = {TU_TAG_HELLO, (uint32_t)ctx->rank};
    pscom_send(con, hello, sizeof(hello), NULL, 0);
    tu_wait_tag(con, NULL, TU_TAG_WELCOME);
    return con;
}

uint32_t tu_header_tag(const pscom_header_net_t *header_net)
{
    uint32_t tag = 0;
    if (header_net->xheader_len >= sizeof(tag)) {
        memcpy(&tag, (const void *)header_net->xheader, sizeof(tag));
    }
    return tag;
}

int tu_accept_tag(pscom_request_t *req, pscom_connection_t *con,
                  pscom_header_net_t *header_net)
{
    (void)con;
    uint32_t want;
    memcpy(&want, (const void *)req->user, sizeof(want));
    return header_net->xheader_len >= sizeof(want) && tu_header_tag(header_net) == want;
}

int tu_accept_none(pscom_request_t *req, pscom_connection_t *con,
                   pscom_header_net_t *header_net)
{
    (void)req;
    (void)con;
    (void)header_net;
    return 0;
}

void tu_server_accept_all(tu_ctx_t *ctx, pscom_socket_t *sock,
                          pscom_connection_t **cons)
{
    for (int i = 0; i <= ctx->nclients; i++) cons[i] = NULL;
    for (int k = 1; k <= ctx->nclients; k++) {
        tu_step("accepting: waiting for hello %d of %d", k, ctx->nclients);
        pscom_request_t *req = pscom_request_create(8, sizeof(uint32_t));
        TU_ASSERT_NOT_NULL(req);
        uint32_t tag = TU_TAG_HELLO;
        memcpy((void *)req->user, &tag, sizeof(tag));
        req->connection       = NULL;
        req->socket           = sock;
        req->xheader_len      = 8;
        req->data             = NULL;
        req->data_len         = 0;
        req->ops.recv_accept  = tu_accept_tag;
        req->ops.io_done      = NULL;
        pscom_post_recv(req);
        pscom_wait(req);
        TU_ASSERT_SUCCESSFUL(req);
        uint32_t hello[2];
        memcpy(hello, (const void *)&req->xheader, sizeof(hello));
        TU_ASSERT_EQ(hello[0], TU_TAG_HELLO);
        int rank = (int)hello[1];
        TU_ASSERT_MSG(rank >= 1 && rank <= ctx->nclients, "hello from rank %d", rank);
        TU_ASSERT_NULL(cons[rank]);
        TU_ASSERT_NOT_NULL(req->connection);
        cons[rank] = req->connection;
        tu_check_con_type(cons[rank]);
        tu_send_tag(cons[rank], TU_TAG_WELCOME);
        pscom_request_free(req);
    }
}

pscom_connection_t *tu_server_accept_one(tu_ctx_t *ctx, pscom_socket_t *sock)
{
    pscom_connection_t *cons[2];
    TU_ASSERT_EQ(ctx->nclients, 1);
    tu_server_listen(ctx, sock);
    tu_server_accept_all(ctx, sock, cons);
    return cons[1];
}

pscom_request_t *tu_make_recv(pscom_connection_t *con, void *data, size_t data_len,
                              size_t xheader_len)
{
    pscom_request_t *req = pscom_request_create(xheader_len, 0);
    TU_ASSERT_NOT_NULL(req);
    req->connection  = con;
    req->socket      = con->socket;
    req->data        = data;
    req->data_len    = data_len;
    req->xheader_len = xheader_len;
    return req;
}

pscom_request_t *tu_post_recv(pscom_connection_t *con, void *data, size_t data_len,
                              size_t xheader_len)
{
    pscom_request_t *req = tu_make_recv(con, data, data_len, xheader_len);
    pscom_post_recv(req);
    return req;
}

void tu_send_pattern(pscom_connection_t *con, uint32_t seed, size_t len)
{
    unsigned char *buf = tu_malloc(len);
    tu_fill(buf, len, seed);
    pscom_send(con, &seed, sizeof(seed), buf, len);
    free(buf);
}

void tu_recv_pattern(pscom_connection_t *con, uint32_t seed, size_t len)
{
    unsigned char *buf = tu_malloc(len);
    uint32_t xh        = 0;
    TU_ASSERT_OK(pscom_recv(con, NULL, &xh, sizeof(xh), buf, len));
    TU_ASSERT_EQ(xh, seed);
    TU_ASSERT_PATTERN(buf, len, seed);
    free(buf);
}

void tu_recv_sequence(pscom_connection_t *con, uint32_t n, size_t len, const char *what)
{
    unsigned char *buf = tu_malloc(len ? len : 1);
    for (uint32_t i = 0; i < n; i++) {
        pscom_request_t *r = tu_post_recv(con, buf, len, sizeof(uint32_t));
        pscom_wait(r);
        TU_ASSERT_MSG(pscom_req_successful(r), "message %u of the %u %s not delivered: [%s]", i, n,
                      what, tu_state_str(r->state));
        uint32_t xh;
        memcpy(&xh, &r->xheader, sizeof(xh));
        TU_ASSERT_EQ(xh, i);
        TU_ASSERT_EQ(r->header.data_len, len);
        TU_ASSERT_PATTERN(buf, len, i);
        pscom_request_free(r);
    }
    free(buf);
}

void tu_send_tag(pscom_connection_t *con, uint32_t tag)
{
    pscom_send(con, &tag, sizeof(tag), NULL, 0);
}

pscom_connection_t *tu_wait_tag(pscom_connection_t *con, pscom_socket_t *sock,
                                uint32_t tag)
{
    pscom_request_t *req = pscom_request_create(sizeof(tag), sizeof(tag));
    TU_ASSERT_NOT_NULL(req);
    memcpy((void *)req->user, &tag, sizeof(tag));
    req->connection      = con;
    req->socket          = con ? con->socket : sock;
    req->xheader_len     = sizeof(tag);
    req->data            = NULL;
    req->data_len        = 0;
    req->ops.recv_accept = tu_accept_tag;
    req->ops.io_done     = NULL;
    tu_step("waiting for tag 0x%08x", tag);
    pscom_post_recv(req);
    pscom_wait(req);
    TU_ASSERT_SUCCESSFUL(req);
    pscom_connection_t *from = req->connection;
    pscom_request_free(req);
    return from;
}

#define TU_ECHO_LEN 100
#define TU_TAG_ECHO 0xF00DEC40u

void tu_echo_server(pscom_connection_t *con, uint32_t seed)
{
    unsigned char buf[TU_ECHO_LEN];
    uint32_t tag = TU_TAG_ECHO;
    TU_ASSERT_OK(pscom_recv_from(con, &tag, sizeof(tag), buf, sizeof(buf)));
    TU_ASSERT_PATTERN(buf, sizeof(buf), seed);
    pscom_send(con, &tag, sizeof(tag), buf, sizeof(buf));
    tu_wait_tag(con, NULL, TU_TAG_DONE);
    pscom_close_connection(con);
}

void tu_echo_client(pscom_connection_t *con, uint32_t seed)
{
    unsigned char data[TU_ECHO_LEN], buf[TU_ECHO_LEN];
    tu_fill(data, sizeof(data), seed);
    memset(buf, 0, sizeof(buf));
    uint32_t tag = TU_TAG_ECHO;
    pscom_send(con, &tag, sizeof(tag), data, sizeof(data));
    TU_ASSERT_OK(pscom_recv_from(con, &tag, sizeof(tag), buf, sizeof(buf)));
    TU_ASSERT_PATTERN(buf, sizeof(buf), seed);
    tu_send_tag(con, TU_TAG_DONE);
    pscom_close_connection(con);
}

tu_err_rec_t tu_errs[TU_ERRS_MAX];
volatile int tu_nerrs;

void tu_on_con_error(pscom_connection_t *con, pscom_op_t op, pscom_err_t err)
{
    if (tu_nerrs < TU_ERRS_MAX) {
        tu_errs[tu_nerrs].con = con;
        tu_errs[tu_nerrs].op  = op;
        tu_errs[tu_nerrs].err = err;
    }
    tu_nerrs++;
}

const tu_err_rec_t *tu_error_of(pscom_connection_t *con)
{
    for (int i = 0; i < tu_nerrs && i < TU_ERRS_MAX; i++) {
        if (tu_errs[i].con == con) return &tu_errs[i];
    }
    return NULL;
}

void tu_wait_flag(volatile int *flag)
{
    while (!*flag) pscom_wait_any();
}

int tu_poll_flag(volatile int *flag, int n)
{
    for (int i = 0; i < n && !*flag; i++) pscom_test_any();
    return *flag;
}
