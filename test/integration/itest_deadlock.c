/*
 * itest_deadlock.c - PSP_DEADLOCK_WARNINGS (environment.md): a blocking
 * wait that nothing can end any more (no fd in the epoll set, no timer, no
 * polled transport, no callback queued, no other thread) ends the process
 * with exit code 112, at once by default, after N warnings a second apart
 * with N, never with -1; a wait that something can still end must not.
 *
 * Each scenario runs in a child process of its own whose stderr the test
 * reads (the error line is part of the contract), and whose exit status it
 * checks:
 *   recv_any        pscom_recv on a socket that does not listen: 112 at
 *                   once, one error line naming PSP_DEADLOCK_WARNINGS=0
 *   warnings2       the same with PSP_DEADLOCK_WARNINGS=2: two warnings,
 *                   then 112, at least 2 s after the first
 *   wait_any_quiet  pscom_wait_any with PSP_DEBUG=0: the line still comes
 *   loopback_recv   a receive on a loopback connection nothing was sent
 *                   on (loopback delivers while the send is posted)
 *   after_close     a receive once the process's only connection and its
 *                   listener are closed: their fds left the set
 *   never           PSP_DEADLOCK_WARNINGS=-1: one line, then the wait
 *                   sleeps on (still alive 1.5 s later: N=1 would have
 *                   exited after 1 s)
 * (warnings2 and never only in the tcp variant: they take seconds and
 * depend on no transport)
 * and must not exit (0):
 *   listening       pscom_recv on a listening socket; a peer connects and
 *                   sends once the receiver sleeps in the wait
 *   retry_timer     pscom_connect to a port that listens 300 ms late: the
 *                   back-offs between the refused attempts have a timer
 *                   and no fd
 *   loopback        messages over a loopback connection of a socket that
 *                   does not listen (no fd at all), every size, both
 *                   orders, blocking calls, close
 *   handshake       a DIRECT connect waits for the HELLO of a peer that
 *                   accepted and says nothing, without the handshake's
 *                   watchdog timer (its connection is not listed yet);
 *                   the peer closes once it sleeps there: the connect fails
 *   threaded        pscom_init_thread: one thread blocks in a receive on a
 *                   loopback connection (no fd), another sends once the
 *                   first sleeps in the wait
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "pscom_testutil.h"

#define WATCHDOG_S 60
#define LINE       "deadlock: blocking wait with nothing to wait for"

/* ---- a child with its stderr read by the test ---------------------------- */

typedef struct child {
    const char *name;
    pid_t pid;
    int out;    /* read end of its stderr */
    double t0;  /* tu_now_ms() at its start */
    char *text; /* its stderr so far */
    size_t len, cap;
    int status;
} child_t;

static void child_start(child_t *c, const char *name, int (*fn)(void), const char *const *env)
{
    int p[2];
    TU_ASSERT_EQ(pipe(p), 0);
    fflush(stdout);
    fflush(stderr);
    memset(c, 0, sizeof(*c));
    c->name = name;
    c->t0   = tu_now_ms();
    c->pid  = fork();
    TU_ASSERT_GE(c->pid, 0);
    if (!c->pid) {
        close(p[0]);
        dup2(p[1], 2);
        close(p[1]);
        alarm(WATCHDOG_S); /* a wait that hangs ends by SIGALRM: not 0, not 112 */
        unsetenv("PSP_DEADLOCK_WARNINGS");
        unsetenv("PSP_DEBUG_OUT");
        for (; env && *env; env++) putenv((char *)*env);
        exit(fn()); /* atexit: the library closes what is left */
    }
    close(p[1]);
    c->out = p[0];
    c->cap = 4096;
    c->text = tu_malloc(c->cap);
    c->text[0] = 0;
}

/* Read what comes on its stderr within ms (-1: no limit): 1 if something
 * came, 0 at EOF, -1 if nothing came in time. */
static int child_read(child_t *c, int ms)
{
    double end = tu_now_ms() + ms;
    for (;;) {
        int left = ms < 0 ? -1 : (int)(end - tu_now_ms());
        if (ms >= 0 && left <= 0) return -1;
        struct pollfd pfd = {.fd = c->out, .events = POLLIN};
        int r             = poll(&pfd, 1, left);
        if (r < 0 && errno == EINTR) continue;
        TU_ASSERT_GE(r, 0);
        if (!r) return -1;
        if (c->cap - c->len < 1024) {
            c->cap *= 2;
            c->text = realloc(c->text, c->cap);
            TU_ASSERT_NOT_NULL(c->text);
        }
        ssize_t n = read(c->out, c->text + c->len, c->cap - c->len - 1);
        if (n < 0 && errno == EINTR) continue;
        TU_ASSERT_GE(n, 0);
        if (!n) return 0;
        c->len += (size_t)n;
        c->text[c->len] = 0;
        return 1;
    }
}

/* Until it exits; returns how long it ran (ms). Its stderr goes to ours. */
static double child_end(child_t *c)
{
    while (child_read(c, -1)) {
    }
    close(c->out);
    TU_ASSERT_EQ(tu_sys_waitpid(c->pid, &c->status), c->pid);
    double ms = tu_now_ms() - c->t0;
    fprintf(stderr, "[%s: pid %d, %.0f ms, status %#x, stderr:]\n%s[%s: end]\n", c->name,
            (int)c->pid, ms, c->status, c->text, c->name);
    return ms;
}

static void child_expect_exit(child_t *c, int code)
{
    TU_ASSERT_MSG(WIFEXITED(c->status) && WEXITSTATUS(c->status) == code,
                  "%s: status %#x, expected exit %d (signal %d)", c->name, c->status, code,
                  WIFSIGNALED(c->status) ? WTERMSIG(c->status) : 0);
}

/* ---- helpers in the children --------------------------------------------------- */

static pscom_socket_t *open_socket(void)
{
    pscom_socket_t *s = pscom_open_socket(0, 0, 0, PSCOM_SOCK_FLAG_INTER_JOB);
    TU_ASSERT_NOT_NULL(s);
    return s;
}

/* A loopback connection on s (a NULL endpoint: spec 1.3), s need not listen. */
static pscom_connection_t *loopback(pscom_socket_t *s)
{
    pscom_connection_t *c = pscom_open_connection(s);
    TU_ASSERT_NOT_NULL(c);
    TU_ASSERT_OK(pscom_connect(c, NULL, 0, PSCOM_CON_FLAG_DIRECT));
    TU_ASSERT_EQ(c->type, PSCOM_CON_TYPE_LOOP);
    return c;
}

/* State letter of thread tid of process pid (/proc), 0 if it is gone. */
static char thread_state(pid_t pid, pid_t tid)
{
    char path[64], buf[512];
    snprintf(path, sizeof(path), "/proc/%d/task/%d/stat", (int)pid, (int)tid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 0;
    ssize_t n = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    if (n <= 0) return 0;
    buf[n]  = 0;
    char *p = strrchr(buf, ')');
    return p && p[1] == ' ' ? p[2] : 0;
}

/* Until thread tid of pid sleeps in the kernel (S): a thread in a blocking
 * pscom call has then gone past its spinning into epoll_wait. Looked at
 * every millisecond; fails if the process is gone. */
static void wait_asleep(pid_t pid, pid_t tid)
{
    char st;
    while ((st = thread_state(pid, tid)) != 'S') {
        TU_ASSERT_MSG(st && st != 'Z' && st != 'X', "process %d gone (state %c)", (int)pid,
                      st ? st : '-');
        poll(NULL, 0, 1);
    }
}

static pid_t my_tid(void)
{
    return (pid_t)syscall(SYS_gettid);
}

/* ---- scenarios that must exit 112 -------------------------------------------- */

static int recv_any(void)
{
    TU_ASSERT_OK(pscom_init(PSCOM_VERSION));
    pscom_socket_t *s = open_socket(); /* not listening: nothing can connect */
    char buf[8];
    pscom_recv_any(s, NULL, 0, buf, sizeof(buf));
    return 1; /* never here */
}

static int wait_any(void)
{
    TU_ASSERT_OK(pscom_init(PSCOM_VERSION));
    open_socket();
    pscom_wait_any();
    return 1;
}

static int loopback_recv(void)
{
    TU_ASSERT_OK(pscom_init(PSCOM_VERSION));
    pscom_socket_t *s     = open_socket();
    pscom_connection_t *c = loopback(s);
    tu_send_pattern(c, 1, 100);
    tu_recv_pattern(c, 1, 100); /* one that was sent: fine */
    char buf[8];
    pscom_recv_from(c, NULL, 0, buf, sizeof(buf)); /* only we could send it */
    return 1;
}

static int after_close(void)
{
    TU_ASSERT_OK(pscom_init(PSCOM_VERSION));
    pscom_socket_t *a = open_socket(), *b = open_socket();
    TU_ASSERT_OK(pscom_listen(a, PSCOM_ANYPORT));
    char *ep;
    TU_ASSERT_OK(pscom_socket_get_ep_str(a, &ep));
    pscom_connection_t *cb = pscom_open_connection(b);
    TU_ASSERT_OK(pscom_connect(cb, ep, 0, PSCOM_CON_FLAG_DIRECT));
    pscom_socket_free_ep_str(ep);
    tu_send_pattern(cb, 2, 1000);
    char buf[1000];
    TU_ASSERT_OK(pscom_recv_any(a, NULL, 0, buf, sizeof(buf)));
    TU_ASSERT_PATTERN(buf, sizeof(buf), 2);
    pscom_connection_t *ca = pscom_get_next_connection(a, NULL);
    TU_ASSERT_NOT_NULL(ca);
    fprintf(stderr, "after_close: the connection was of type %s\n",
            pscom_con_type_str(ca->type));
    tu_check_con_type(ca);
    pscom_close_connection(ca);
    pscom_close_connection(cb);
    pscom_stop_listen(a);
    pscom_recv_any(a, NULL, 0, buf, sizeof(buf)); /* ends the closes, then nothing is left */
    return 1;
}

/* ---- scenarios that must not exit ------------------------------------------- */

static int loopback_ok(void)
{
    TU_ASSERT_OK(pscom_init(PSCOM_VERSION));
    pscom_socket_t *s     = open_socket();
    pscom_connection_t *c = loopback(s);
    static const size_t lens[] = {0, 1, 100, 4096, 65537, 1u << 20, 4u << 20};
    for (size_t i = 0; i < sizeof(lens) / sizeof(lens[0]); i++) {
        size_t len          = lens[i];
        unsigned char *sbuf = tu_malloc(len + 1), *rbuf = tu_malloc(len + 1);
        /* blocking send and receive */
        tu_send_pattern(c, (uint32_t)i, len);
        tu_recv_pattern(c, (uint32_t)i, len);
        /* requests, receive first / send first, each waited for */
        for (int recv_first = 0; recv_first < 2; recv_first++) {
            uint32_t seed          = (uint32_t)(100 + 2 * i + (size_t)recv_first);
            pscom_request_t *sreq  = pscom_request_create(0, 0);
            pscom_request_t *rreq  = tu_make_recv(c, rbuf, len, 0);
            tu_fill(sbuf, len, seed);
            pscom_req_prepare(sreq, c, sbuf, len, NULL, 0);
            if (recv_first) pscom_post_recv(rreq);
            pscom_post_send(sreq);
            if (!recv_first) pscom_post_recv(rreq);
            pscom_wait(rreq);
            pscom_wait(sreq);
            TU_ASSERT_SUCCESSFUL(sreq);
            TU_ASSERT_SUCCESSFUL(rreq);
            TU_ASSERT_PATTERN(rbuf, len, seed);
            pscom_request_free(sreq);
            pscom_request_free(rreq);
        }
        free(sbuf);
        free(rbuf);
    }
    pscom_close_connection(c);
    pscom_close_socket(s);
    return 0;
}

static pscom_connection_t *thr_con;
static pid_t thr_waiter;

static void *thr_sender(void *arg)
{
    wait_asleep(getpid(), thr_waiter);
    tu_send_pattern(thr_con, 3, 100);
    return arg;
}

static int threaded(void)
{
    TU_ASSERT_OK(pscom_init_thread(PSCOM_VERSION));
    pscom_socket_t *s = open_socket();
    thr_con           = loopback(s);
    thr_waiter        = my_tid();
    pthread_t t;
    TU_ASSERT_EQ(pthread_create(&t, NULL, thr_sender, NULL), 0);
    tu_recv_pattern(thr_con, 3, 100); /* no fd: the other thread sends */
    TU_ASSERT_EQ(pthread_join(t, NULL), 0);
    pscom_close_connection(thr_con);
    pscom_close_socket(s);
    return 0;
}

/* listening: the server blocks in pscom_recv with only its listener; the
 * client connects once it sleeps there */
static int listen_server(tu_ctx_t *ctx)
{
    pscom_socket_t *s = tu_open_socket(ctx, 0, 0);
    tu_server_listen(ctx, s);
    tu_signal(ctx, 1, (uint32_t)getpid());
    char buf[100];
    TU_ASSERT_OK(pscom_recv_any(s, NULL, 0, buf, sizeof(buf)));
    TU_ASSERT_PATTERN(buf, sizeof(buf), 4);
    pscom_connection_t *c = pscom_get_next_connection(s, NULL);
    TU_ASSERT_NOT_NULL(c);
    tu_send_pattern(c, 5, 100);
    tu_wait_peer_exit_progress(ctx, 1);
    pscom_close_connection(c);
    pscom_close_socket(s);
    return 0;
}

static int listen_client(tu_ctx_t *ctx)
{
    pscom_socket_t *s = tu_open_socket(ctx, 0, 0);
    tu_client_get_ep(ctx);
    pid_t server = (pid_t)tu_wait_signal(ctx, TU_SERVER);
    wait_asleep(server, server);
    pscom_connection_t *c = pscom_open_connection(s);
    TU_ASSERT_OK(pscom_connect(c, ctx->ep, 0, PSCOM_CON_FLAG_DIRECT));
    tu_check_con_type(c);
    tu_send_pattern(c, 4, 100);
    tu_recv_pattern(c, 5, 100);
    pscom_close_connection(c);
    pscom_close_socket(s);
    return 0;
}

/* retry_timer: the client's connect is refused until the server listens
 * LATE_MS later; between its attempts it has a back-off timer, no fd */
#define LATE_MS 300

static int late_server(tu_ctx_t *ctx)
{
    pscom_socket_t *s = tu_open_socket(ctx, 0, 0);
    pscom_socket_set_name(s, "late");
    int port;
    int dead = tu_tcp_socket(INADDR_LOOPBACK, 0, &port); /* bound, not listening: refused */
    tu_signal(ctx, 1, (uint32_t)port);
    TU_ASSERT_EQ(tu_wait_signal(ctx, 1), 1); /* connecting */
    tu_pause_ms(LATE_MS);                    /* the lateness under test */
    close(dead);
    TU_ASSERT_OK(pscom_listen(s, port));
    char buf[100];
    TU_ASSERT_OK(pscom_recv_any(s, NULL, 0, buf, sizeof(buf)));
    TU_ASSERT_PATTERN(buf, sizeof(buf), 6);
    tu_wait_peer_exit_progress(ctx, 1);
    pscom_close_socket(s);
    return 0;
}

static int late_client(tu_ctx_t *ctx)
{
    pscom_socket_t *s = tu_open_socket(ctx, 0, 0);
    char ep[64];
    snprintf(ep, sizeof(ep), "127.0.0.1:%u@late", tu_wait_signal(ctx, TU_SERVER));
    pscom_connection_t *c = pscom_open_connection(s);
    tu_signal(ctx, TU_SERVER, 1);
    double t0 = tu_now_ms();
    TU_ASSERT_OK(pscom_connect(c, ep, 0, PSCOM_CON_FLAG_DIRECT));
    double dt = tu_now_ms() - t0;
    TU_ASSERT_MSG(dt >= LATE_MS, "connected after %.0f ms, before the listener came", dt);
    tu_check_con_type(c);
    tu_send_pattern(c, 6, 100);
    pscom_flush(c);
    pscom_close_connection(c);
    pscom_close_socket(s);
    return 0;
}

/* handshake: the client's DIRECT connect waits for the HELLO of a peer
 * that accepted and says nothing; without the watchdog (its timer) the
 * handshake's socket is all it has, of a connection not listed yet. The
 * peer closes once the client sleeps there: the connect fails. */
static void hs_before_init(const tu_ctx_t *ctx)
{
    if (ctx->rank == TU_SERVER) return;
    setenv("PSP_PRECON_TCP_RECONNECT_TIMEOUT", "0", 1); /* no watchdog timer */
    setenv("PSP_RETRY", "0", 1);
}

static int hs_server(tu_ctx_t *ctx)
{
    int port;
    int lfd = tu_tcp_socket(INADDR_LOOPBACK, 16, &port);
    tu_signal(ctx, 1, (uint32_t)port);
    int fd = tu_tcp_accept(lfd);
    wait_asleep(ctx->client_pids[1], ctx->client_pids[1]);
    close(fd);
    close(lfd);
    tu_wait_peer_exit(ctx, 1);
    return 0;
}

static int hs_client(tu_ctx_t *ctx)
{
    pscom_socket_t *s = tu_open_socket(ctx, 0, 0);
    char ep[64];
    snprintf(ep, sizeof(ep), "127.0.0.1:%u@silent", tu_wait_signal(ctx, TU_SERVER));
    pscom_connection_t *c = pscom_open_connection(s);
    TU_ASSERT_ERR(pscom_connect(c, ep, 0, PSCOM_CON_FLAG_DIRECT), PSCOM_ERR_STDERROR);
    pscom_close_connection(c);
    pscom_close_socket(s);
    return 0;
}

/* ---- the checks ------------------------------------------------------------------- */

/* max_ms: how long it may take, start-up included (0: any time) */
static void expect_deadlock(const char *name, int (*fn)(void), const char *const *env,
                            double max_ms)
{
    tu_log("%s", name);
    child_t c;
    child_start(&c, name, fn, env);
    double ms = child_end(&c);
    child_expect_exit(&c, 112);
    TU_ASSERT_EQ(tu_count(c.text, LINE), 1);
    TU_ASSERT_MSG(strstr(c.text, "; exit 112 (PSP_DEADLOCK_WARNINGS=0)"), "%s: no exit line",
                  name);
    TU_ASSERT_EQ(tu_count(c.text, "warning"), 0);
    TU_ASSERT_MSG(!max_ms || ms < max_ms, "%s: exit after %.0f ms", name, ms);
    free(c.text);
}

static void expect_warnings(void)
{
    static const char *const env[] = {"PSP_DEADLOCK_WARNINGS=2", NULL};
    tu_log("warnings2");
    child_t c;
    child_start(&c, "warnings2", recv_any, env);
    double ms = child_end(&c);
    child_expect_exit(&c, 112);
    TU_ASSERT_EQ(tu_count(c.text, LINE), 3);
    const char *w1 = strstr(c.text, "; warning 1 of 2, exit 112 after the last "
                                    "(PSP_DEADLOCK_WARNINGS=2)");
    const char *w2 = strstr(c.text, "; warning 2 of 2, exit 112 after the last "
                                    "(PSP_DEADLOCK_WARNINGS=2)");
    const char *ex = strstr(c.text, "; exit 112 (PSP_DEADLOCK_WARNINGS=2)");
    TU_ASSERT_MSG(w1 && w2 && ex && w1 < w2 && w2 < ex, "warnings2: lines missing or out of order");
    TU_ASSERT_EQ(tu_count(c.text, "warning "), 2);
    /* a second after each warning */
    TU_ASSERT_MSG(ms >= 2000, "warnings2: exit after %.0f ms, expected 2 s of warnings", ms);
    free(c.text);
}

static void expect_never(void)
{
    static const char *const env[] = {"PSP_DEADLOCK_WARNINGS=-1", NULL};
    tu_log("never");
    child_t c;
    child_start(&c, "never", recv_any, env);
    while (!strstr(c.text, LINE))
        TU_ASSERT_MSG(child_read(&c, -1) > 0, "never: EOF before the line");
    /* N=1 would exit a second after its warning: alive 1.5 s later */
    double end = tu_now_ms() + 1500;
    while (tu_now_ms() < end)
        TU_ASSERT_MSG(child_read(&c, (int)(end - tu_now_ms()) + 1), "never: exited");
    int st;
    TU_ASSERT_EQ(waitpid(c.pid, &st, WNOHANG), 0);
    kill(c.pid, SIGKILL);
    child_end(&c);
    TU_ASSERT(WIFSIGNALED(c.status) && WTERMSIG(c.status) == SIGKILL);
    TU_ASSERT_EQ(tu_count(c.text, LINE), 1);
    TU_ASSERT_MSG(strstr(c.text, "; waiting on (PSP_DEADLOCK_WARNINGS=-1)"), "never: wrong line");
    free(c.text);
}

static void expect_ok(const char *name, int (*fn)(void))
{
    tu_log("%s", name);
    child_t c;
    child_start(&c, name, fn, NULL);
    child_end(&c);
    child_expect_exit(&c, 0);
    TU_ASSERT_EQ(tu_count(c.text, "deadlock"), 0);
    free(c.text);
}

int main(void)
{
    static const char *const quiet[] = {"PSP_DEBUG=0", NULL};
    unsetenv("PSP_DEADLOCK_WARNINGS");

    /* at once: a warning a second apart would take 1 s (generous for
     * sanitizers and loaded machines: start-up included) */
    /* the clock-bound cases (2 s of warnings, 1.5 s alive) depend on no
     * transport: once, in the tcp variant */
    const char *type = tu_contype();
    int timed        = !type || !strcmp(type, "tcp");
    expect_deadlock("recv_any", recv_any, NULL, 5000);
    if (timed) expect_warnings();
    expect_deadlock("wait_any_quiet", wait_any, quiet, 5000);
    expect_deadlock("loopback_recv", loopback_recv, NULL, 5000);
    /* over ucp: once the endpoint's linger (PSP_UCP_EP_LINGER, a timer)
     * is over, here 200 ms; ucp's worker stays, its poller or event fd
     * serves nothing */
    static const char *const linger[] = {"PSP_UCP_EP_LINGER=200", NULL};
    expect_deadlock("after_close", after_close, linger, 0);
    if (timed) expect_never();

    expect_ok("loopback", loopback_ok);
    expect_ok("threaded", threaded);
    int rc = tu_run("listening", 1, listen_server, listen_client, NULL);
    rc |= tu_run("retry_timer", 1, late_server, late_client, NULL);
    tu_opts_t hs = {.before_init = hs_before_init};
    rc |= tu_run("handshake", 1, hs_server, hs_client, &hs);
    return rc;
}
