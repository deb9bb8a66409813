/*
 * ucp_pp.c - a plain UCX tag ping-pong between two processes (fork), the
 * floor for bench/ucp.sh: what an application that uses UCX directly, with
 * malloc()ed buffers and receives posted before the message arrives, gets
 * on this host.
 *
 *   ucp_pp <size> <round trips>
 *
 * Prints "ucp_pp <size> <round trips> <half round trip us> <MB/s>". The
 * parent runs on cpu 0, the child on cpu 1 (PP_NOPIN=1: no pinning);
 * PP_VALLOC=1 page-aligns the buffers, PP_SEPBUF=1 sends from a buffer of
 * its own instead of the receive buffer (see below). UCX is configured by
 * its own environment (UCX_TLS, ...). Build:
 *   cc -O2 -std=gnu11 -o ucp_pp ucp_pp.c $(pkg-config --cflags --libs ucx)
 */
#define _GNU_SOURCE
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <ucp/api/ucp.h>
#include <unistd.h>

#define TAG 0x70696e67u

static ucp_worker_h worker;
static ucp_ep_h ep;

static void die(const char *what, ucs_status_t st)
{
    fprintf(stderr, "ucp_pp: %s: %s\n", what, ucs_status_string(st));
    exit(1);
}

static void send_cb(void *req, ucs_status_t st, void *user)
{
}

static void recv_cb(void *req, ucs_status_t st, const ucp_tag_recv_info_t *info, void *user)
{
}

static void wait_req(ucs_status_ptr_t r, const char *what)
{
    if (UCS_PTR_IS_ERR(r)) die(what, UCS_PTR_STATUS(r));
    if (!r) return;
    ucs_status_t st;
    while ((st = ucp_request_check_status(r)) == UCS_INPROGRESS) ucp_worker_progress(worker);
    if (st != UCS_OK) die(what, st);
    ucp_request_free(r);
}

static ucs_status_ptr_t post_recv(void *buf, size_t len)
{
    ucp_request_param_t p = {.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK, .cb.recv = recv_cb};
    return ucp_tag_recv_nbx(worker, buf, len, TAG, (ucp_tag_t)-1, &p);
}

static ucs_status_ptr_t post_send(void *buf, size_t len)
{
    ucp_request_param_t p = {.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK, .cb.send = send_cb};
    return ucp_tag_send_nbx(ep, buf, len, TAG, &p);
}

static void xfer(int fd, void *buf, size_t len, int out)
{
    char *p = buf;
    while (len) {
        ssize_t n = out ? write(fd, p, len) : read(fd, p, len);
        if (n <= 0) {
            perror("ucp_pp: address exchange");
            exit(1);
        }
        p += n;
        len -= (size_t)n;
    }
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: %s <size> <round trips>\n", argv[0]);
        return 2;
    }
    size_t size = strtoull(argv[1], NULL, 0);
    long iters  = strtol(argv[2], NULL, 0);
    int up[2], down[2];
    if (pipe(up) < 0 || pipe(down) < 0) return 1;
    pid_t child = fork();
    int pong    = child == 0;
    if (!getenv("PP_NOPIN")) {
        cpu_set_t cs;
        CPU_ZERO(&cs);
        CPU_SET(pong ? 1 : 0, &cs);
        sched_setaffinity(0, sizeof(cs), &cs);
    }

    ucp_config_t *cfg;
    ucs_status_t st = ucp_config_read(NULL, NULL, &cfg);
    if (st != UCS_OK) die("ucp_config_read", st);
    ucp_params_t params = {.field_mask = UCP_PARAM_FIELD_FEATURES, .features = UCP_FEATURE_TAG};
    ucp_context_h ctx;
    st = ucp_init(&params, cfg, &ctx);
    ucp_config_release(cfg);
    if (st != UCS_OK) die("ucp_init", st);
    ucp_worker_params_t wp = {.field_mask  = UCP_WORKER_PARAM_FIELD_THREAD_MODE,
                              .thread_mode = UCS_THREAD_MODE_SINGLE};
    if ((st = ucp_worker_create(ctx, &wp, &worker)) != UCS_OK) die("ucp_worker_create", st);

    ucp_address_t *addr;
    size_t alen, plen;
    if ((st = ucp_worker_get_address(worker, &addr, &alen)) != UCS_OK) die("get_address", st);
    int out = pong ? up[1] : down[1], in = pong ? down[0] : up[0];
    xfer(out, &alen, sizeof(alen), 1);
    xfer(out, addr, alen, 1);
    xfer(in, &plen, sizeof(plen), 0);
    void *peer = malloc(plen);
    xfer(in, peer, plen, 0);
    ucp_ep_params_t ep_params = {.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS,
                                 .address    = peer};
    if ((st = ucp_ep_create(worker, &ep_params, &ep)) != UCS_OK) die("ucp_ep_create", st);

    /* PP_VALLOC=1: page-aligned buffers (malloc()ed ones of 128 KiB and more
     * start 16 bytes into a page); PP_SEPBUF=1: send from a buffer of its
     * own that nobody writes (as ucx_perftest does) instead of echoing from
     * the receive buffer */
    size_t blen = size ? size : 1;
    char *buf, *sbuf;
    if (getenv("PP_VALLOC")) {
        if (posix_memalign((void **)&buf, 4096, blen) || posix_memalign((void **)&sbuf, 4096, blen))
            return 1;
    } else {
        buf  = malloc(blen);
        sbuf = malloc(blen);
        if (!buf || !sbuf) return 1;
    }
    memset(buf, 1, blen);
    memset(sbuf, 1, blen);
    if (!getenv("PP_SEPBUF")) sbuf = buf;
    long warm = iters / 10 + 1;
    struct timespec t0, t1;
    for (long i = -warm; i < iters; i++) {
        if (i == 0) clock_gettime(CLOCK_MONOTONIC, &t0);
        if (pong) {
            wait_req(post_recv(buf, size), "recv");
            wait_req(post_send(sbuf, size), "send");
        } else {
            /* the send first, then the receive for the reply, as
             * ucx_perftest and pscom_pp do: the receive posted first put
             * its post (about 170 instructions of UCX) between the reply's
             * arrival on this side and the next message, and read 1.06 x
             * tag_lat at 8 B where the host is fast (2026-11-27). The
             * reply's data cannot come before the peer has all of this
             * message, so even in one buffer the two never overlap. */
            ucs_status_ptr_t s = post_send(sbuf, size);
            ucs_status_ptr_t r = post_recv(buf, size);
            wait_req(s, "send");
            wait_req(r, "recv");
        }
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    if (!pong) {
        double us = ((double)(t1.tv_sec - t0.tv_sec) * 1e6 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e3) /
                    (double)iters / 2;
        printf("ucp_pp %zu %ld %.3f %.1f\n", size, iters, us, (double)size / us);
        waitpid(child, NULL, 0);
    }
    /* exit without tearing down: the peer may already be gone */
    return 0;
}
