/*
 * rma_pp - RMA put/get latency and bandwidth between two local processes,
 * written against the public pscom.h only. bench/rma.sh builds and runs it.
 *
 *   rma_pp [-n ITERS] [-b BYTES] [-w WINDOW] [-p] [-s SIZE ...]
 *
 * The process forks: the parent is the target, the child the origin (both
 * call pscom_init after the fork; the transport is chosen by the PSP_*
 * environment as usual). Each side registers a 4 MiB window and sends
 * its packed rkey to the other in a pscom message.
 *
 * Measurements (one output line each, "<what> <size> <count> <value>"):
 *   put_lat  8 B put ping-pong: the origin puts, the target's PUT callback
 *            sees it and puts back, the origin's callback sees that;
 *            value = half the round trip in us.
 *   get_lat  blocking 8 B gets (post, wait); value = us per get (a get is
 *            a round trip by nature).
 *   put_bw   WINDOW puts in flight (default 16), local completion awaited
 *            per window; the clock stops when the target acknowledges that
 *            its callback counted every put; value = MB/s (10^6 B/s).
 *   get_bw   WINDOW gets in flight, all completed per window; MB/s.
 * Sizes: -s may be given several times (default 65536 1048576 4194304); the
 * latency tests always use 8 B. -b: bytes moved per bandwidth test
 * (default 256 MiB, at least 4 windows). -p pins the target to cpu 1 and
 * the origin to cpu 0. A line "contype <type>" names the transport.
 */
#define _GNU_SOURCE
#include <pscom.h>

#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define WIN_LEN (4u << 20)
#define MAX_W   64

enum { CMD_PUT_LAT = 1, CMD_PUT_BW, CMD_GET, CMD_END };

typedef struct cmd {
    uint32_t cmd;
    uint32_t iters;
    uint64_t size;
    uint64_t count; /* puts the target has seen in total when the phase is over (put_bw)
                       or before it starts (put_lat) */
} cmd_t;

static pscom_connection_t *con;
static unsigned char *win;
static pscom_rkey_t peer_rkey;
static unsigned char *peer_win;
static volatile uint64_t puts_seen; /* PUT callbacks run (the peer's puts), never reset:
                                       they may run before the command that
                                       announces them is seen */
static uint64_t puts_sent;          /* origin: puts posted so far */

static void die(const char *what)
{
    fprintf(stderr, "rma_pp: %s\n", what);
    exit(1);
}

/* target: the origin failed (e.g. no connection over the wanted
 * transport): do not wait for it forever */
static pid_t origin_pid;
static volatile int origin_status = -1;

static void on_sigchld(int sig)
{
    (void)sig;
    int st;
    if (waitpid(origin_pid, &st, WNOHANG) != origin_pid) return;
    origin_status = st;
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        static const char msg[] = "rma_pp: the origin process failed\n";
        ssize_t r = write(2, msg, sizeof(msg) - 1);
        (void)r;
        _exit(1);
    }
}

static double now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e6 + ts.tv_nsec * 1e-3;
}

static void pin(int cpu)
{
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    sched_setaffinity(0, sizeof(set), &set);
}

static void on_put(pscom_request_t *req)
{
    (void)req;
    puts_seen++;
}

/* window, callbacks, rkey exchange (each side sends its own first) */
static void setup_rma(pscom_socket_t *sock)
{
    pscom_memh_t memh;
    void *rb;
    size_t rl;
    win = malloc(WIN_LEN);
    if (!win) die("out of memory");
    memset(win, 0, WIN_LEN);
    if (pscom_mem_register(sock, win, WIN_LEN, &memh) != PSCOM_SUCCESS) die("mem_register");
    pscom_register_rma_callbacks(on_put, memh, PSCOM_RMA_PUT);
    if (pscom_rkey_buffer_pack(&rb, &rl, memh) != PSCOM_SUCCESS) die("rkey_buffer_pack");
    uint64_t addr = (uint64_t)(uintptr_t)win;
    pscom_send(con, &addr, sizeof(addr), rb, rl);
    pscom_rkey_buffer_release(rb);

    unsigned char buf[1024];
    pscom_request_t *r = pscom_request_create(sizeof(addr), 0);
    r->connection      = con;
    r->socket          = sock;
    r->xheader_len     = sizeof(addr);
    r->data            = buf;
    r->data_len        = sizeof(buf);
    pscom_post_recv(r);
    pscom_wait(r);
    if (!pscom_req_successful(r)) die("rkey exchange failed");
    memcpy(&addr, (void *)&r->xheader, sizeof(addr));
    peer_win = (unsigned char *)(uintptr_t)addr;
    if (pscom_rkey_generate(con, buf, r->header.data_len, &peer_rkey) != PSCOM_SUCCESS)
        die("rkey_generate");
    pscom_request_free(r);
}

/* a request with io_done == NULL would free itself: these are reused */
static void keep(pscom_request_t *req)
{
    (void)req;
}

static pscom_request_t *rma_req(size_t size)
{
    pscom_request_t *r = pscom_request_create(sizeof(pscom_xheader_t), 0);
    if (!r) die("out of memory");
    r->connection      = con;
    r->rma.rkey        = peer_rkey;
    r->rma.origin_addr = win;
    r->rma.target_addr = peer_win;
    r->data_len        = size;
    r->ops.io_done     = keep;
    return r;
}

static void put(pscom_request_t *r)
{
    r->xheader_len = sizeof(pscom_xheader_rma_put_t);
    pscom_post_rma_put(r);
}

static void get(pscom_request_t *r)
{
    r->xheader_len = sizeof(pscom_xheader_rma_get_t);
    pscom_post_rma_get(r);
}

static void wait_puts(uint64_t n)
{
    while (puts_seen < n) pscom_wait_any();
}

static void send_cmd(uint32_t c, uint32_t iters, uint64_t size, uint64_t count)
{
    cmd_t cmd = {c, iters, size, count};
    pscom_send(con, &cmd, sizeof(cmd), NULL, 0);
}

static void recv_cmd(cmd_t *cmd)
{
    if (pscom_recv_from(con, cmd, sizeof(*cmd), NULL, 0) != PSCOM_SUCCESS) die("recv");
}

/* ---- target ---------------------------------------------------------------- */

static void target(pscom_socket_t *sock)
{
    setup_rma(sock);
    pscom_request_t *r = rma_req(8);
    for (;;) {
        cmd_t cmd;
        recv_cmd(&cmd); /* progresses the gets meanwhile */
        switch (cmd.cmd) {
        case CMD_PUT_LAT:
            for (uint32_t i = 0; i < cmd.iters; i++) {
                wait_puts(cmd.count + i + 1);
                put(r);
                pscom_wait(r);
            }
            break;
        case CMD_PUT_BW:
            wait_puts(cmd.count);
            send_cmd(CMD_PUT_BW, 0, 0, 0); /* acknowledge */
            break;
        case CMD_GET: break;
        case CMD_END: pscom_request_free(r); return;
        }
    }
}

/* ---- origin ------------------------------------------------------------------- */

static double put_lat(uint32_t iters)
{
    pscom_request_t *r = rma_req(8);
    double t0          = 0;
    uint32_t warm      = iters / 10 + 10;
    uint64_t base      = puts_seen;
    send_cmd(CMD_PUT_LAT, iters + warm, 8, puts_sent);
    for (uint32_t i = 0; i < iters + warm; i++) {
        if (i == warm) t0 = now_us();
        put(r);
        puts_sent++;
        pscom_wait(r);
        wait_puts(base + i + 1);
    }
    double t = now_us() - t0;
    pscom_request_free(r);
    return t / iters / 2;
}

static double get_lat(uint32_t iters)
{
    pscom_request_t *r = rma_req(8);
    double t0          = 0;
    uint32_t warm      = iters / 10 + 10;
    send_cmd(CMD_GET, 0, 8, 0);
    for (uint32_t i = 0; i < iters + warm; i++) {
        if (i == warm) t0 = now_us();
        get(r);
        pscom_wait(r);
        if (!pscom_req_successful(r)) die("get failed");
    }
    double t = now_us() - t0;
    pscom_request_free(r);
    return t / iters;
}

static double bw(int is_put, size_t size, uint64_t bytes, int w)
{
    pscom_request_t *r[MAX_W];
    uint64_t rounds = bytes / ((uint64_t)size * w);
    if (rounds < 4) rounds = 4;
    uint64_t warm = 2;
    for (int i = 0; i < w; i++) r[i] = rma_req(size);
    if (is_put) {
        puts_sent += (rounds + warm) * (uint64_t)w;
        send_cmd(CMD_PUT_BW, 0, size, puts_sent);
    } else {
        send_cmd(CMD_GET, 0, size, 0);
    }
    double t0 = 0;
    for (uint64_t k = 0; k < rounds + warm; k++) {
        if (k == warm) t0 = now_us();
        for (int i = 0; i < w; i++) is_put ? put(r[i]) : get(r[i]);
        for (int i = 0; i < w; i++) {
            pscom_wait(r[i]);
            if (!pscom_req_successful(r[i])) die("rma op failed");
        }
    }
    if (is_put) {
        cmd_t ack;
        recv_cmd(&ack); /* the target has seen every put */
    }
    double t = now_us() - t0;
    for (int i = 0; i < w; i++) pscom_request_free(r[i]);
    return (double)size * w * rounds / t; /* bytes per us = MB/s */
}

int main(int argc, char **argv)
{
    uint32_t iters = 2000;
    uint64_t bytes = 256ull << 20;
    int w = 16, dopin = 0, c;
    size_t sizes[16];
    int nsizes = 0;
    while ((c = getopt(argc, argv, "n:b:w:ps:h")) != -1) {
        switch (c) {
        case 'n': iters = (uint32_t)strtoul(optarg, NULL, 0); break;
        case 'b': bytes = strtoull(optarg, NULL, 0); break;
        case 'w': w = atoi(optarg); break;
        case 'p': dopin = 1; break;
        case 's':
            if (nsizes < 16) sizes[nsizes++] = strtoul(optarg, NULL, 0);
            break;
        default:
            fprintf(stderr, "usage: rma_pp [-n ITERS] [-b BYTES] [-w WINDOW] [-p] [-s SIZE ...]\n");
            return c == 'h' ? 0 : 1;
        }
    }
    if (!nsizes) {
        sizes[nsizes++] = 65536;
        sizes[nsizes++] = 1u << 20;
        sizes[nsizes++] = 4u << 20;
    }
    if (w < 1 || w > MAX_W || !iters) die("bad -w or -n");
    for (int i = 0; i < nsizes; i++)
        if (!sizes[i] || sizes[i] > WIN_LEN) die("sizes must be 1..4 MiB");

    int pfd[2];
    if (pipe(pfd)) die("pipe");
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) die("fork");
    if (pid > 0) { /* target */
        origin_pid = pid;
        struct sigaction sa;
        memset(&sa, 0, sizeof(sa));
        sa.sa_handler = on_sigchld;
        sa.sa_flags   = SA_RESTART;
        sigemptyset(&sa.sa_mask);
        sigaction(SIGCHLD, &sa, NULL);
        close(pfd[0]);
        if (dopin) pin(1);
        if (pscom_init(PSCOM_VERSION) != PSCOM_SUCCESS) die("pscom_init");
        pscom_socket_t *sock = pscom_open_socket(0, 0, 0, PSCOM_SOCK_FLAG_INTER_JOB);
        if (!sock || pscom_listen(sock, PSCOM_ANYPORT) != PSCOM_SUCCESS) die("listen");
        char *ep;
        if (pscom_socket_get_ep_str(sock, &ep) != PSCOM_SUCCESS) die("ep");
        size_t n = strlen(ep) + 1;
        if (write(pfd[1], ep, n) != (ssize_t)n) die("pipe write");
        close(pfd[1]);
        pscom_socket_free_ep_str(ep);
        /* the origin's first message identifies its connection */
        char hello;
        if (pscom_recv_any(sock, &hello, 1, NULL, 0) != PSCOM_SUCCESS) die("hello");
        con = pscom_get_next_connection(sock, NULL);
        if (!con) die("no connection");
        target(sock);
        pscom_close_connection(con);
        int st = origin_status;
        if (st == -1 && waitpid(pid, &st, 0) != pid) st = origin_status;
        return st != -1 && WIFEXITED(st) ? WEXITSTATUS(st) : 1;
    }
    /* origin */
    close(pfd[1]);
    if (dopin) pin(0);
    char ep[1024];
    size_t got = 0;
    ssize_t k;
    while (got < sizeof(ep) && (k = read(pfd[0], ep + got, sizeof(ep) - got)) > 0) got += k;
    if (!got || ep[got - 1]) die("no endpoint from the target");
    if (pscom_init(PSCOM_VERSION) != PSCOM_SUCCESS) die("pscom_init");
    pscom_socket_t *sock = pscom_open_socket(0, 0, 1, PSCOM_SOCK_FLAG_INTER_JOB);
    con                  = pscom_open_connection(sock);
    if (!con || pscom_connect(con, ep, 0, PSCOM_CON_FLAG_DIRECT) != PSCOM_SUCCESS) die("connect");
    /* a failed handshake (no common transport) still returns SUCCESS */
    if (con->state != PSCOM_CON_STATE_RW || con->type == PSCOM_CON_TYPE_NONE)
        die("no connection (transport not available?)");
    char hello = 'h';
    pscom_send(con, &hello, 1, NULL, 0);
    printf("contype %s\n", pscom_con_type_str(con->type));
    setup_rma(sock);

    printf("put_lat 8 %u %.2f\n", iters, put_lat(iters));
    printf("get_lat 8 %u %.2f\n", iters, get_lat(iters));
    for (int i = 0; i < nsizes; i++) {
        printf("put_bw %zu %d %.0f\n", sizes[i], w, bw(1, sizes[i], bytes, w));
        printf("get_bw %zu %d %.0f\n", sizes[i], w, bw(0, sizes[i], bytes, w));
        fflush(stdout);
    }
    send_cmd(CMD_END, 0, 0, 0);
    pscom_flush(con);
    pscom_close_connection(con);
    return 0;
}
