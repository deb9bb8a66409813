/*
 * itest_ondemand_mesh: N processes (default 32) connect all-to-all and
 * exchange messages; content, length and per-sender order are checked.
 *
 * Phase "ondemand": every process creates an on-demand connection to every
 * other one (no barrier between creating them and sending, so first
 * messages cross in both directions and peers may still be setting up)
 * and then sends MSGS messages of assorted sizes to everybody. Afterwards
 * every connection is a real transport (not ONDEMAND), the socket lists
 * exactly N-1 connections (no duplicates from crossing connects), and
 * con_accept was never called (spec 5.7: adoption, not acceptance).
 *
 * Phase "direct": the same with DIRECT connections; the lower rank
 * connects, the higher one maps the accepted connection by the peer's rank
 * (remote_con_info.rank) in con_accept.
 *
 * The harness is a small launcher of its own (test/util's tu_run() takes
 * at most 16 clients): the parent forks the processes, hands endpoint
 * strings around over socketpairs and runs barriers that also reduce a few
 * numbers (used by the bench). The parent never uses pscom.
 *
 *   itest_ondemand_mesh                      test: 32 processes, both phases
 *   itest_ondemand_mesh --bench N MODE       one phase, MODE ondemand|direct:
 *       prints "N MODE connect_ms rss_per_con heap_per_con" (bench/connect.sh)
 *   itest_ondemand_mesh --procs N            test with N processes
 */
#define _GNU_SOURCE
#include "pscom_testutil.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAXP   128
#define EPLEN  128
#define MSGS   6

static int nprocs = 32;
static int bench;
static int me;
static int ctl = -1; /* child: control channel to the parent */

/* ------------------------------------------------------------------ */
/* launcher                                                           */
/* ------------------------------------------------------------------ */

typedef struct red {
    double v[4]; /* parent returns {max v0, sum v1, sum v2, sum v3} */
} red_t;

static void xwrite(int fd, const void *buf, size_t len)
{
    const char *p = buf;
    while (len) {
        ssize_t n = write(fd, p, len);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) TU_FAIL("rank %d: control write: %s", me, strerror(errno));
        p += n;
        len -= (size_t)n;
    }
}

/* 0 on EOF before the first byte */
static int xread(int fd, void *buf, size_t len)
{
    char *p     = buf;
    size_t have = 0;
    while (have < len) {
        ssize_t n = read(fd, p + have, len - have);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) TU_FAIL("rank %d: control read: %s", me, strerror(errno));
        if (n == 0) {
            if (!have) return 0;
            TU_FAIL("rank %d: control channel: short read", me);
        }
        have += (size_t)n;
    }
    return 1;
}

/* every process: contribute r, get the reduction. pscom progresses while
 * we wait, as in an MPI barrier: what a process has received may still owe
 * its peers a message that pscom sends by itself (the FIN of a rendezvous,
 * PSP_RENDEZVOUS), and over a transport whose queue to that peer is full
 * (UCX's shared memory) it goes out only with our progress. Before
 * 2026-11-29 the wait here blocked, and with PSP_RENDEZVOUS=1024 over
 * ucp-shm a peer waited for such a FIN until the watchdog. */
static red_t barrier(red_t r)
{
    xwrite(ctl, &r, sizeof(r));
    struct pollfd pfd = {.fd = ctl, .events = POLLIN};
    while (poll(&pfd, 1, 1) == 0) pscom_test_any();
    if (!xread(ctl, &r, sizeof(r))) TU_FAIL("rank %d: parent gone", me);
    return r;
}

static void barrier0(void)
{
    red_t r = {{0}};
    barrier(r);
}

/* every process: publish our endpoint, learn everybody's */
static void exchange_eps(const char *ep, char eps[][EPLEN])
{
    char mine[EPLEN] = {0};
    snprintf(mine, sizeof(mine), "%s", ep);
    xwrite(ctl, mine, sizeof(mine));
    if (!xread(ctl, eps, (size_t)nprocs * EPLEN)) TU_FAIL("rank %d: parent gone", me);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static pid_t kids[MAXP];

static void parent_alarm(int sig)
{
    (void)sig;
    static const char msg[] = "[mesh] WATCHDOG: killing the processes\n";
    ssize_t r = write(2, msg, sizeof(msg) - 1);
    (void)r;
    for (int i = 0; i < nprocs; i++)
        if (kids[i] > 0) kill(kids[i], SIGKILL);
}

static void child_alarm(int sig)
{
    (void)sig;
    static const char msg[] = "[mesh] WATCHDOG in a child\n";
    ssize_t r = write(2, msg, sizeof(msg) - 1);
    (void)r;
    _exit(124);
}

/* Parent side of the control protocol: endpoint rounds (EPLEN bytes from
 * everybody, then the table to everybody) and reduction rounds, in the
 * order the children's code runs them; ep rounds are told apart by the
 * caller's script. */
typedef enum { ROUND_EPS, ROUND_RED } round_t;

static int parent_round(int *fds, round_t kind, red_t *out, double *t_release, double *t_all)
{
    if (kind == ROUND_EPS) {
        static char eps[MAXP][EPLEN];
        for (int i = 0; i < nprocs; i++)
            if (!xread(fds[i], eps[i], EPLEN)) return -1;
        for (int i = 0; i < nprocs; i++) xwrite(fds[i], eps, (size_t)nprocs * EPLEN);
        return 0;
    }
    red_t acc = {{0}};
    for (int i = 0; i < nprocs; i++) {
        red_t r;
        if (!xread(fds[i], &r, sizeof(r))) return -1;
        if (r.v[0] > acc.v[0]) acc.v[0] = r.v[0];
        for (int k = 1; k < 4; k++) acc.v[k] += r.v[k];
    }
    if (t_all) *t_all = now_s();
    if (t_release) *t_release = now_s();
    for (int i = 0; i < nprocs; i++) xwrite(fds[i], &acc, sizeof(acc));
    if (out) *out = acc;
    return 0;
}

/* ------------------------------------------------------------------ */
/* one phase                                                          */
/* ------------------------------------------------------------------ */

enum { MODE_ONDEMAND, MODE_DIRECT };
static const char *mode_name[] = {"ondemand", "direct"};

static pscom_connection_t *cons[MAXP];
static volatile int accepted;
static volatile int con_errors;

static void on_accept(pscom_connection_t *con)
{
    int r = con->remote_con_info.rank;
    if (r < 0 || r >= nprocs || cons[r]) TU_FAIL("rank %d: con_accept for peer rank %d", me, r);
    cons[r] = con;
    accepted++;
}

static void on_error(pscom_connection_t *con, pscom_op_t op, pscom_err_t err)
{
    /* EOF while closing is normal; anything else is not */
    if (err == PSCOM_ERR_EOF) return;
    TU_FAIL("rank %d: con_error(%s, %s) on the connection to rank %d", me, pscom_op_str(op),
            tu_err_str(err), con->remote_con_info.rank);
}

static size_t msg_size(int k)
{
    static const size_t sz[] = {0, 17, 1000, 9000, 40000, 3};
    return sz[k % 6];
}

static uint32_t seed_of(int from, int to, int k)
{
    return (uint32_t)(from * 7919 + to * 104729 + k * 13 + 1);
}

typedef struct xh {
    uint32_t from, seq;
} xh_t;

/* messages per peer: the test checks content; the bench sends one tiny
 * message per peer (that is what sets the connections up) */
static int msgs(void)
{
    return bench ? 1 : MSGS;
}

static void exchange(void)
{
    int m     = msgs();
    int total = (nprocs - 1) * m;
    pscom_request_t **rr = tu_malloc(sizeof(*rr) * (size_t)total);
    pscom_request_t **sr = tu_malloc(sizeof(*sr) * (size_t)total);
    int i = 0;
    for (int p = 0; p < nprocs; p++) {
        if (p == me) continue;
        for (int k = 0; k < m; k++, i++) {
            size_t len           = bench ? 0 : msg_size(k);
            pscom_request_t *req = pscom_request_create(sizeof(xh_t), 0);
            TU_ASSERT_NOT_NULL(req);
            req->connection  = cons[p];
            req->xheader_len = sizeof(xh_t);
            req->data_len    = len + 64; /* room: a longer message would be truncated */
            req->data        = tu_malloc(req->data_len);
            pscom_post_recv(req);
            rr[i] = req;
        }
    }
    i = 0;
    for (int p = 0; p < nprocs; p++) {
        if (p == me) continue;
        for (int k = 0; k < m; k++, i++) {
            size_t len           = bench ? 0 : msg_size(k);
            pscom_request_t *req = pscom_request_create(sizeof(xh_t), 0);
            TU_ASSERT_NOT_NULL(req);
            xh_t xh = {(uint32_t)me, (uint32_t)k};
            memcpy((void *)&req->xheader, &xh, sizeof(xh));
            req->connection  = cons[p];
            req->xheader_len = sizeof(xh_t);
            req->data_len    = len;
            req->data        = tu_malloc(len);
            tu_fill(req->data, len, seed_of(me, p, k));
            pscom_post_send(req);
            sr[i] = req;
        }
    }
    for (i = 0; i < total; i++) {
        pscom_wait(sr[i]);
        TU_ASSERT_SUCCESSFUL(sr[i]);
        free(sr[i]->data);
        pscom_request_free(sr[i]);
    }
    i = 0;
    for (int p = 0; p < nprocs; p++) {
        if (p == me) continue;
        for (int k = 0; k < m; k++, i++) {
            pscom_request_t *req = rr[i];
            pscom_wait(req);
            TU_ASSERT_SUCCESSFUL(req);
            xh_t xh;
            memcpy(&xh, (const void *)&req->xheader, sizeof(xh));
            TU_ASSERT_MSG(xh.from == (uint32_t)p && xh.seq == (uint32_t)k,
                          "rank %d: message %d on the connection to rank %d is %u.%u "
                          "(per-sender order or routing broken)", me, k, p, xh.from, xh.seq);
            size_t len = bench ? 0 : msg_size(k);
            TU_ASSERT_EQ(req->header.data_len, len);
            TU_ASSERT_PTR_EQ(req->connection, cons[p]);
            TU_ASSERT_PATTERN(req->data, len, seed_of(p, me, k));
            free(req->data);
            pscom_request_free(req);
        }
    }
    free(rr);
    free(sr);
}

static void phase(int mode)
{
    memset(cons, 0, sizeof(cons));
    accepted   = 0;
    con_errors = 0;

    pscom_socket_t *sock = pscom_open_socket(0, 0, me, PSCOM_SOCK_FLAG_INTER_JOB);
    TU_ASSERT_NOT_NULL(sock);
    char name[16];
    snprintf(name, sizeof(name), "r%07d", me); /* psmpi's rank names */
    pscom_socket_set_name(sock, name);
    sock->ops.con_accept = on_accept;
    sock->ops.con_error  = on_error;
    TU_ASSERT_OK(pscom_listen(sock, PSCOM_ANYPORT));
    char *ep = NULL;
    TU_ASSERT_OK(pscom_socket_get_ep_str(sock, &ep));
    static char eps[MAXP][EPLEN];
    exchange_eps(ep, eps);
    pscom_socket_free_ep_str(ep);

    long rss0  = (long)tu_rss_bytes();
    long heap0 = tu_heap_bytes();
    barrier0(); /* start together */
    double t0 = now_s();

    if (mode == MODE_ONDEMAND) {
        for (int p = 0; p < nprocs; p++) {
            if (p == me) continue;
            cons[p] = pscom_open_connection(sock);
            TU_ASSERT_NOT_NULL(cons[p]);
            TU_ASSERT_OK(pscom_connect(cons[p], eps[p], p, PSCOM_CON_FLAG_ONDEMAND));
            TU_ASSERT_EQ(cons[p]->type, PSCOM_CON_TYPE_ONDEMAND);
            TU_ASSERT_EQ(cons[p]->state, PSCOM_CON_STATE_RW);
        }
    } else {
        for (int p = me + 1; p < nprocs; p++) {
            cons[p] = pscom_open_connection(sock);
            TU_ASSERT_NOT_NULL(cons[p]);
            TU_ASSERT_OK(pscom_connect(cons[p], eps[p], p, PSCOM_CON_FLAG_DIRECT));
            TU_ASSERT_EQ(cons[p]->state, PSCOM_CON_STATE_RW);
        }
        while (accepted < me) pscom_wait_any();
    }
    exchange();
    double t1 = now_s();

    /* one connection per peer, all of them real ones */
    int listed = 0;
    for (pscom_connection_t *c = pscom_get_next_connection(sock, NULL); c;
         c = pscom_get_next_connection(sock, c)) {
        listed++;
        int r = c->remote_con_info.rank;
        TU_ASSERT_MSG(r >= 0 && r < nprocs && r != me && cons[r] == c,
                      "rank %d: unexpected connection in the socket (peer rank %d)", me, r);
        TU_ASSERT_NE(c->type, PSCOM_CON_TYPE_ONDEMAND);
        TU_ASSERT_EQ(c->state, PSCOM_CON_STATE_RW);
        TU_ASSERT_MSG(!memcmp(c->remote_con_info.name, eps[r] + strlen(eps[r]) - 8, 8),
                      "rank %d: connection to rank %d has the peer name \"%.8s\"", me, r,
                      c->remote_con_info.name);
        tu_check_con_type(c);
    }
    TU_ASSERT_EQ(listed, nprocs - 1);
    TU_ASSERT_EQ(accepted, mode == MODE_ONDEMAND ? 0 : me);

    red_t r = {{(t1 - t0) * 1e3, (double)((long)tu_rss_bytes() - rss0),
                (double)(tu_heap_bytes() - heap0), (double)listed}};
    r = barrier(r); /* everybody connected and exchanged */
    if (bench && me == 0) {
        /* the parent prints; rank 0 only checks the sums are sane */
        TU_ASSERT_GE(r.v[3], (double)nprocs * (nprocs - 1));
    }
    pscom_close_socket(sock);
    barrier0();
}

static int child(int rank, int fd, const char *mode_arg)
{
    me  = rank;
    ctl = fd;
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    signal(SIGALRM, child_alarm);
    alarm(100);
    TU_ASSERT_OK(pscom_init(PSCOM_VERSION));
    if (!mode_arg || !strcmp(mode_arg, "ondemand")) phase(MODE_ONDEMAND);
    if (!mode_arg || !strcmp(mode_arg, "direct")) phase(MODE_DIRECT);
    fflush(NULL);
    return 0;
}

int main(int argc, char **argv)
{
    /* connection set-up over the built-in transports; over ucp in the
     * test entries of its own that set PSP_UCP=1 (test/integration/CMakeLists.txt) */
    setenv("PSP_UCP", "0", 0);
    const char *mode_arg = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--bench") && i + 2 < argc) {
            bench    = 1;
            nprocs   = atoi(argv[++i]);
            mode_arg = argv[++i];
        } else if (!strcmp(argv[i], "--procs") && i + 1 < argc) {
            nprocs = atoi(argv[++i]);
        } else {
            fprintf(stderr, "usage: %s [--procs N | --bench N ondemand|direct]\n", argv[0]);
            return 2;
        }
    }
    if (nprocs < 2 || nprocs > MAXP) {
        fprintf(stderr, "N must be 2..%d\n", MAXP);
        return 2;
    }
    if (mode_arg && strcmp(mode_arg, "ondemand") && strcmp(mode_arg, "direct")) {
        fprintf(stderr, "mode must be ondemand or direct\n");
        return 2;
    }
    if (!bench) fprintf(stderr, "[mesh] %d processes, %s\n", nprocs, mode_arg ? mode_arg : "ondemand+direct");

    int fds[MAXP];
    fflush(NULL);
    for (int i = 0; i < nprocs; i++) {
        int sp[2];
        if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp) < 0) {
            perror("socketpair");
            return 1;
        }
        pid_t pid = fork();
        if (pid < 0) {
            perror("fork");
            return 1;
        }
        if (pid == 0) {
            close(sp[0]);
            for (int j = 0; j < i; j++) close(fds[j]);
            exit(child(i, sp[1], mode_arg));
        }
        close(sp[1]);
        kids[i] = pid;
        fds[i]  = sp[0];
    }
    signal(SIGALRM, parent_alarm);
    alarm(110);

    int failed = 0;
    int phases = mode_arg ? 1 : 2;
    for (int ph = 0; ph < phases && !failed; ph++) {
        const char *mname = mode_arg ? mode_arg : mode_name[ph];
        red_t res;
        double t_start = 0, t_done = 0;
        if (parent_round(fds, ROUND_EPS, NULL, NULL, NULL) < 0 ||
            parent_round(fds, ROUND_RED, NULL, &t_start, NULL) < 0 ||
            parent_round(fds, ROUND_RED, &res, NULL, &t_done) < 0 ||
            parent_round(fds, ROUND_RED, NULL, NULL, NULL) < 0) {
            failed = 1;
            for (int j = 0; j < nprocs; j++) kill(kids[j], SIGKILL);
            break;
        }
        double cons_total = res.v[3];
        if (bench) {
            printf("%d %s %.1f %.0f %.0f\n", nprocs, mname, (t_done - t_start) * 1e3,
                   res.v[1] / cons_total, res.v[2] / cons_total);
        } else {
            fprintf(stderr, "[mesh] %s: %d processes connected all-to-all and exchanged %d "
                            "messages per pair in %.0f ms (slowest process %.0f ms)\n",
                    mname, nprocs, MSGS, (t_done - t_start) * 1e3, res.v[0]);
        }
    }
    for (int i = 0; i < nprocs; i++) close(fds[i]);
    for (int i = 0; i < nprocs; i++) {
        int st = 0;
        tu_sys_waitpid(kids[i], &st);
        if (!WIFEXITED(st) || WEXITSTATUS(st)) {
            fprintf(stderr, "[mesh] rank %d (pid %d) failed: %s %d\n", i, (int)kids[i],
                    WIFEXITED(st) ? "exit status" : "signal",
                    WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
            if (!failed)
                for (int j = 0; j < nprocs; j++) kill(kids[j], SIGKILL);
            failed = 1;
        }
        kids[i] = 0;
    }
    if (!bench) fprintf(stderr, "[mesh] %s\n", failed ? "FAILED" : "passed");
    return failed;
}
