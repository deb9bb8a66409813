/*
 * test_verbs_emul.c - the software HCA (test/verbs_emul) against the verbs
 * semantics the openib plugin relies on: RC QPs between two processes
 * (fork; addresses exchanged over a socketpair) and between two contexts of
 * one process (loopback), their state machine, posting limits, completions
 * and errors, and the environment controls.
 *
 * Checks inside forked children print the failed expression and _exit(1);
 * the test asserts both children exited with 0. Every wait is bounded by
 * a deadline (DEADLINE_MS) so that nothing hangs.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include <infiniband/verbs.h>

#include "tu_sys.h"
#include "verbs_emul.h"

#define DEADLINE_MS 5000
#define MAX_MSG (1u << 20)

static int in_child;

static void ck_fail(const char *what, const char *file, int line)
{
    if (in_child) {
        fprintf(stderr, "child %d: %s:%d: check failed: %s\n", (int)getpid(), file, line, what);
        _exit(1);
    }
    fail_msg("%s:%d: check failed: %s", file, line, what);
}
#define CK(c)                                                                                 \
    do {                                                                                      \
        if (!(c)) ck_fail(#c, __FILE__, __LINE__);                                            \
    } while (0)

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* ------------------------------------------------------------ endpoints */

struct cfg {
    unsigned max_send, max_recv;
    int cqe, sig_all;
    size_t buflen;
    int chan; /* the CQ is bound to a completion channel; cq_context is the ep */
};
static const struct cfg cfg_default = {64, 64, 256, 0, 2 * MAX_MSG + 4096};

/* one context, PD, CQ (send and receive), RC QP and MR over buf */
struct ep {
    struct ibv_context *ctx;
    struct ibv_pd *pd;
    struct ibv_comp_channel *chan; /* NULL unless cfg.chan */
    struct ibv_cq *cq;
    struct ibv_qp *qp;
    struct ibv_mr *mr;
    uint8_t *buf;
    size_t len;
    uint16_t lid;
};

static void ep_open(struct ep *e, const struct cfg *c)
{
    int n = -1;
    struct ibv_device **list = ibv_get_device_list(&n);
    CK(list && n >= 1);
    memset(e, 0, sizeof(*e));
    e->ctx = ibv_open_device(list[0]);
    ibv_free_device_list(list);
    CK(e->ctx);
    struct ibv_port_attr pa;
    CK(ibv_query_port(e->ctx, 1, &pa) == 0);
    e->lid = pa.lid;
    e->pd = ibv_alloc_pd(e->ctx);
    CK(e->pd);
    if (c->chan) {
        e->chan = ibv_create_comp_channel(e->ctx);
        CK(e->chan);
    }
    e->cq = ibv_create_cq(e->ctx, c->cqe, c->chan ? e : NULL, e->chan, 0);
    CK(e->cq);
    struct ibv_qp_init_attr ia = {
        .send_cq = e->cq,
        .recv_cq = e->cq,
        .cap = {.max_send_wr = c->max_send, .max_recv_wr = c->max_recv, .max_send_sge = 4,
                .max_recv_sge = 4, .max_inline_data = 64},
        .qp_type = IBV_QPT_RC,
        .sq_sig_all = c->sig_all,
    };
    e->qp = ibv_create_qp(e->pd, &ia);
    CK(e->qp);
    CK(ia.cap.max_inline_data >= 64);
    e->len = c->buflen;
    e->buf = calloc(1, e->len);
    CK(e->buf);
    e->mr = ibv_reg_mr(e->pd, e->buf, e->len, IBV_ACCESS_LOCAL_WRITE);
    CK(e->mr);
}

static void ep_close(struct ep *e)
{
    if (e->qp) CK(ibv_destroy_qp(e->qp) == 0);
    CK(ibv_dereg_mr(e->mr) == 0);
    if (e->cq) CK(ibv_destroy_cq(e->cq) == 0);
    if (e->chan) CK(ibv_destroy_comp_channel(e->chan) == 0);
    CK(ibv_dealloc_pd(e->pd) == 0);
    CK(ibv_close_device(e->ctx) == 0);
    free(e->buf);
}

static unsigned qp_access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ; /* to_init's */

static int to_init(struct ibv_qp *qp)
{
    struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .pkey_index = 0, .port_num = 1,
                            .qp_access_flags = qp_access};
    return ibv_modify_qp(qp, &a,
                         IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
}

static const int rtr_mask = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                            IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
static const int rts_mask = IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
                            IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC;

static int to_rtr(struct ibv_qp *qp, uint16_t dlid, uint32_t dqpn, int mask)
{
    struct ibv_qp_attr a = {.qp_state = IBV_QPS_RTR, .path_mtu = IBV_MTU_4096,
                            .dest_qp_num = dqpn, .rq_psn = 0, .max_dest_rd_atomic = 1,
                            .min_rnr_timer = 12,
                            .ah_attr = {.dlid = dlid, .port_num = 1}};
    return ibv_modify_qp(qp, &a, mask);
}

static int to_rts(struct ibv_qp *qp, int mask)
{
    struct ibv_qp_attr a = {.qp_state = IBV_QPS_RTS, .timeout = 14, .retry_cnt = 7,
                            .rnr_retry = 7, .sq_psn = 0, .max_rd_atomic = 1};
    return ibv_modify_qp(qp, &a, mask);
}

static void ep_connect(struct ep *e, uint16_t dlid, uint32_t dqpn)
{
    CK(to_init(e->qp) == 0);
    CK(e->qp->state == IBV_QPS_INIT);
    CK(to_rtr(e->qp, dlid, dqpn, rtr_mask) == 0);
    CK(to_rts(e->qp, rts_mask) == 0);
    CK(e->qp->state == IBV_QPS_RTS);
}

/* two endpoints of this process (two contexts), connected to each other */
static void pair_open(struct ep *a, struct ep *b, const struct cfg *c)
{
    ep_open(a, c);
    ep_open(b, c);
    ep_connect(a, b->lid, b->qp->qp_num);
    ep_connect(b, a->lid, a->qp->qp_num);
}

/* ------------------------------------------------------------ posting and polling */

static void fill(uint8_t *p, size_t len, unsigned seed)
{
    for (size_t i = 0; i < len; i++) p[i] = (uint8_t)(seed * 31 + i * 7 + (i >> 8));
}

static int check(const uint8_t *p, size_t len, unsigned seed)
{
    for (size_t i = 0; i < len; i++)
        if (p[i] != (uint8_t)(seed * 31 + i * 7 + (i >> 8))) return -1;
    return 0;
}

static int post_send_ex(struct ep *e, uint64_t wr_id, size_t off, uint32_t len, unsigned flags,
                        enum ibv_wr_opcode op, uint32_t imm, uint32_t lkey)
{
    struct ibv_sge sge = {.addr = (uintptr_t)(e->buf + off), .length = len, .lkey = lkey};
    struct ibv_send_wr wr = {.wr_id = wr_id, .sg_list = &sge, .num_sge = 1, .opcode = op,
                             .send_flags = flags, .imm_data = imm};
    struct ibv_send_wr *bad = NULL;
    int ret = ibv_post_send(e->qp, &wr, &bad);
    CK(ret ? bad == &wr : bad == NULL);
    return ret;
}

static int post_send(struct ep *e, uint64_t wr_id, size_t off, uint32_t len, unsigned flags)
{
    return post_send_ex(e, wr_id, off, len, flags, IBV_WR_SEND, 0, e->mr->lkey);
}

static int post_recv_ex(struct ep *e, uint64_t wr_id, size_t off, uint32_t len, uint32_t lkey)
{
    struct ibv_sge sge = {.addr = (uintptr_t)(e->buf + off), .length = len, .lkey = lkey};
    struct ibv_recv_wr wr = {.wr_id = wr_id, .sg_list = &sge, .num_sge = 1};
    struct ibv_recv_wr *bad = NULL;
    int ret = ibv_post_recv(e->qp, &wr, &bad);
    CK(ret ? bad == &wr : bad == NULL);
    return ret;
}

static int post_recv(struct ep *e, uint64_t wr_id, size_t off, uint32_t len)
{
    return post_recv_ex(e, wr_id, off, len, e->mr->lkey);
}

/* polls until n completions or the deadline; returns how many */
static int poll_n(struct ep *e, struct ibv_wc *wc, int n)
{
    int got = 0;
    int64_t end = now_ms() + DEADLINE_MS;
    while (got < n && now_ms() < end) {
        int r = ibv_poll_cq(e->cq, n - got, wc + got);
        CK(r >= 0);
        got += r;
    }
    return got;
}

static struct ibv_wc poll1(struct ep *e)
{
    struct ibv_wc wc;
    CK(poll_n(e, &wc, 1) == 1);
    return wc;
}

/* polls for ms and expects nothing */
static void poll_none(struct ep *e, int ms)
{
    struct ibv_wc wc;
    int64_t end = now_ms() + ms;
    while (now_ms() < end) CK(ibv_poll_cq(e->cq, 1, &wc) == 0);
}

/* polls two endpoints alternately until a has n completions */
static int poll_both(struct ep *a, struct ibv_wc *wc, int n, struct ep *b)
{
    int got = 0;
    int64_t end = now_ms() + DEADLINE_MS;
    struct ibv_wc other[16];
    while (got < n && now_ms() < end) {
        int r = ibv_poll_cq(a->cq, n - got, wc + got);
        CK(r >= 0);
        got += r;
        CK(ibv_poll_cq(b->cq, 16, other) == 0); /* b expects nothing meanwhile */
    }
    return got;
}

#define RECV_OFF (MAX_MSG + 4096) /* receive half of an endpoint's buffer */

/* ------------------------------------------------------------ two processes */

static void sock_put(int fd, uint32_t v)
{
    CK(write(fd, &v, sizeof(v)) == (ssize_t)sizeof(v));
}

/* 1 if fd is readable within ms, 0 if not (a short ms only where the test
 * asserts that nothing comes); poll() goes on after a signal (EINTR) with
 * the time left */
static int poll_in(int fd, int ms)
{
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (;;) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        clock_gettime(CLOCK_MONOTONIC, &t1);
        long spent = (t1.tv_sec - t0.tv_sec) * 1000 + (t1.tv_nsec - t0.tv_nsec) / 1000000;
        int r      = poll(&p, 1, spent >= ms ? 0 : (int)(ms - spent));
        if (r < 0 && errno == EINTR) continue;
        CK(r >= 0);
        return r == 1 && (p.revents & POLLIN);
    }
}

static uint32_t sock_get_ms(int fd, int ms)
{
    CK(poll_in(fd, ms));
    uint32_t v;
    CK(tu_sys_read_all(fd, &v, sizeof(v)) == (ssize_t)sizeof(v));
    return v;
}

static uint32_t sock_get(int fd)
{
    return sock_get_ms(fd, DEADLINE_MS);
}

typedef void role_fn(struct ep *e, int sock);

static void role_run(role_fn *role, int sock, const struct cfg *c)
{
    in_child = 1;
    alarm(30); /* a backstop only: every wait has its own deadline */
    struct ep e;
    ep_open(&e, c);
    sock_put(sock, e.lid);
    sock_put(sock, e.qp->qp_num);
    uint16_t dlid = (uint16_t)sock_get(sock);
    uint32_t dqpn = sock_get(sock);
    ep_connect(&e, dlid, dqpn);
    role(&e, sock);
    ep_close(&e);
    exit(0); /* not _exit: LeakSanitizer checks the child too */
}

/* runs a and b in two processes with connected QPs; both must exit 0 */
static void run_pair(role_fn *a, role_fn *b, const struct cfg *c)
{
    int sv[2];
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
    fflush(NULL);
    pid_t pa = fork();
    assert_true(pa >= 0);
    if (pa == 0) {
        close(sv[1]);
        role_run(a, sv[0], c);
    }
    pid_t pb = fork();
    assert_true(pb >= 0);
    if (pb == 0) {
        close(sv[0]);
        role_run(b, sv[1], c);
    }
    close(sv[0]);
    close(sv[1]);
    int sa, sb;
    assert_int_equal(tu_sys_waitpid(pa, &sa), pa);
    assert_int_equal(tu_sys_waitpid(pb, &sb), pb);
    assert_true(WIFEXITED(sa) && WEXITSTATUS(sa) == 0);
    assert_true(WIFEXITED(sb) && WEXITSTATUS(sb) == 0);
}

static const uint32_t pp_sizes[] = {0, 1, 7, 64, 4096, 65535, 65536, 65537, 200000, MAX_MSG};
#define NSIZES (sizeof(pp_sizes) / sizeof(pp_sizes[0]))

static void pingpong_a(struct ep *e, int sock)
{
    for (unsigned i = 0; i < NSIZES; i++) {
        uint32_t len = pp_sizes[i];
        CK(post_recv(e, 100 + i, RECV_OFF, MAX_MSG) == 0);
        fill(e->buf, len, i);
        CK(post_send(e, i, 0, len, IBV_SEND_SIGNALED) == 0);
        struct ibv_wc wc[2];
        CK(poll_n(e, wc, 2) == 2);
        for (int k = 0; k < 2; k++) {
            CK(wc[k].status == IBV_WC_SUCCESS);
            CK(wc[k].qp_num == e->qp->qp_num);
            CK(wc[k].vendor_err == 0);
            if (wc[k].opcode == IBV_WC_SEND) {
                CK(wc[k].wr_id == i);
            } else {
                CK(wc[k].opcode == IBV_WC_RECV);
                CK(wc[k].wr_id == 100 + i);
                CK(wc[k].byte_len == len);
                CK(wc[k].wc_flags == 0);
                CK(check(e->buf + RECV_OFF, len, i + 1000) == 0);
            }
        }
        CK(wc[0].opcode != wc[1].opcode);
    }
}

static void pingpong_b(struct ep *e, int sock)
{
    for (unsigned i = 0; i < NSIZES; i++) {
        uint32_t len = pp_sizes[i];
        CK(post_recv(e, 100 + i, RECV_OFF, MAX_MSG) == 0);
        struct ibv_wc wc = poll1(e);
        CK(wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_RECV);
        CK(wc.wr_id == 100 + i && wc.byte_len == len);
        CK(check(e->buf + RECV_OFF, len, i) == 0);
        fill(e->buf, len, i + 1000);
        CK(post_send(e, i, 0, len, IBV_SEND_SIGNALED) == 0);
        wc = poll1(e);
        CK(wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_SEND && wc.wr_id == i);
    }
}

static void test_pingpong(void **state)
{
    run_pair(pingpong_a, pingpong_b, &cfg_default);
}

#define NORDER 1000

static void order_a(struct ep *e, int sock)
{
    unsigned posted = 0, done = 0;
    int64_t end = now_ms() + DEADLINE_MS;
    while (done < NORDER) {
        CK(now_ms() < end);
        while (posted < NORDER && posted - done < 64) {
            size_t off = (posted % 64) * 64;
            uint32_t len = 4 + posted % 50;
            memcpy(e->buf + off, &posted, 4);
            fill(e->buf + off + 4, len - 4, posted);
            CK(post_send(e, posted, off, len, IBV_SEND_SIGNALED) == 0);
            posted++;
        }
        struct ibv_wc wc[16];
        int n = ibv_poll_cq(e->cq, 16, wc);
        CK(n >= 0);
        for (int k = 0; k < n; k++) {
            CK(wc[k].status == IBV_WC_SUCCESS && wc[k].opcode == IBV_WC_SEND);
            CK(wc[k].wr_id == done); /* send completions in order too */
            done++;
        }
    }
}

static void order_b(struct ep *e, int sock)
{
    for (unsigned i = 0; i < 64; i++) CK(post_recv(e, i, RECV_OFF + i * 64, 64) == 0);
    unsigned got = 0;
    int64_t end = now_ms() + DEADLINE_MS;
    while (got < NORDER) {
        CK(now_ms() < end);
        struct ibv_wc wc[16];
        int n = ibv_poll_cq(e->cq, 16, wc);
        CK(n >= 0);
        for (int k = 0; k < n; k++) {
            CK(wc[k].status == IBV_WC_SUCCESS && wc[k].opcode == IBV_WC_RECV);
            unsigned slot = (unsigned)wc[k].wr_id;
            CK(slot == got % 64); /* receive WQEs are consumed in order */
            uint8_t *p = e->buf + RECV_OFF + slot * 64;
            uint32_t seq;
            memcpy(&seq, p, 4);
            CK(seq == got);
            CK(wc[k].byte_len == 4 + seq % 50);
            CK(check(p + 4, wc[k].byte_len - 4, seq) == 0);
            got++;
            if (got + 63 < NORDER) CK(post_recv(e, slot, RECV_OFF + slot * 64, 64) == 0);
        }
    }
}

static void test_inorder_1000(void **state)
{
    struct cfg c = cfg_default;
    c.max_recv = 128;
    run_pair(order_a, order_b, &c);
}

static void imm_a(struct ep *e, int sock)
{
    fill(e->buf, 100, 7);
    CK(post_send_ex(e, 1, 0, 100, IBV_SEND_SIGNALED, IBV_WR_SEND_WITH_IMM, htonl(0x12345678),
                    e->mr->lkey) == 0);
    CK(post_send_ex(e, 2, 0, 0, IBV_SEND_SIGNALED, IBV_WR_SEND_WITH_IMM, htonl(0xdeadbeef),
                    e->mr->lkey) == 0);
    CK(post_send(e, 3, 0, 10, IBV_SEND_SIGNALED) == 0);
    struct ibv_wc wc[3];
    CK(poll_n(e, wc, 3) == 3);
    for (int k = 0; k < 3; k++) CK(wc[k].status == IBV_WC_SUCCESS && wc[k].wr_id == (uint64_t)k + 1);
    CK(sock_get(sock) == 1); /* b saw them: then both close */
}

static void imm_b(struct ep *e, int sock)
{
    for (int i = 0; i < 3; i++) CK(post_recv(e, i, RECV_OFF + i * 128, 128) == 0);
    struct ibv_wc wc[3];
    CK(poll_n(e, wc, 3) == 3);
    CK(wc[0].status == IBV_WC_SUCCESS && wc[0].byte_len == 100);
    CK(wc[0].wc_flags & IBV_WC_WITH_IMM);
    CK(ntohl(wc[0].imm_data) == 0x12345678);
    CK(check(e->buf + RECV_OFF, 100, 7) == 0);
    CK(wc[0].src_qp != 0 && wc[0].qp_num == e->qp->qp_num);
    CK(wc[1].status == IBV_WC_SUCCESS && wc[1].byte_len == 0);
    CK((wc[1].wc_flags & IBV_WC_WITH_IMM) && ntohl(wc[1].imm_data) == 0xdeadbeef);
    CK(wc[2].status == IBV_WC_SUCCESS && wc[2].byte_len == 10);
    CK(!(wc[2].wc_flags & IBV_WC_WITH_IMM));
    sock_put(sock, 1);
}

static void test_send_with_imm(void **state)
{
    run_pair(imm_a, imm_b, &cfg_default);
}

/* a sends before b posted a receive (RNR): held, delivered once posted */
static void rnr_a(struct ep *e, int sock)
{
    for (unsigned i = 0; i < 3; i++) {
        fill(e->buf + i * 1000, 1000, i + 50);
        CK(post_send(e, i, i * 1000, 1000, IBV_SEND_SIGNALED) == 0);
    }
    struct ibv_wc wc[3];
    CK(poll_n(e, wc, 3) == 3);
    for (int k = 0; k < 3; k++) CK(wc[k].status == IBV_WC_SUCCESS);
    sock_put(sock, 1); /* all sent */
    CK(sock_get(sock) == 2);
}

static void rnr_b(struct ep *e, int sock)
{
    CK(sock_get(sock) == 1);
    poll_none(e, 20); /* nothing without a receive */
    for (unsigned i = 0; i < 3; i++) CK(post_recv(e, i, RECV_OFF + i * 1000, 1000) == 0);
    struct ibv_wc wc[3];
    CK(poll_n(e, wc, 3) == 3);
    for (unsigned k = 0; k < 3; k++) {
        CK(wc[k].status == IBV_WC_SUCCESS && wc[k].wr_id == k && wc[k].byte_len == 1000);
        CK(check(e->buf + RECV_OFF + k * 1000, 1000, k + 50) == 0);
    }
    sock_put(sock, 2);
}

static void test_rnr_hold(void **state)
{
    run_pair(rnr_a, rnr_b, &cfg_default);
}

/* a 100-byte SEND into a 16-byte receive: LOC_LEN_ERR, the QP goes to ERR */
static void len_a(struct ep *e, int sock)
{
    CK(post_send(e, 1, 0, 100, IBV_SEND_SIGNALED) == 0);
    struct ibv_wc wc = poll1(e);
    CK(wc.status == IBV_WC_SUCCESS && wc.wr_id == 1);
    CK(sock_get(sock) == 1);
}

static void len_b(struct ep *e, int sock)
{
    CK(post_recv(e, 1, RECV_OFF, 16) == 0);
    CK(post_recv(e, 2, RECV_OFF + 16, 1000) == 0);
    struct ibv_wc wc[2];
    CK(poll_n(e, wc, 2) == 2);
    CK(wc[0].wr_id == 1 && wc[0].status == IBV_WC_LOC_LEN_ERR);
    CK(wc[1].wr_id == 2 && wc[1].status == IBV_WC_WR_FLUSH_ERR);
    CK(e->qp->state == IBV_QPS_ERR);
    sock_put(sock, 1);
}

static void test_loc_len_err(void **state)
{
    run_pair(len_a, len_b, &cfg_default);
}

/* b destroys its QP: a's next SEND fails with RETRY_EXC_ERR, the rest is
 * flushed */
static void gone_a(struct ep *e, int sock)
{
    CK(post_recv(e, 10, RECV_OFF, 100) == 0);
    CK(post_recv(e, 11, RECV_OFF + 100, 100) == 0);
    CK(sock_get(sock) == 1); /* b's QP is destroyed */
    /* one chain: 2 and 3 are queued behind 1 when it fails */
    struct ibv_sge sge = {(uintptr_t)e->buf, 10, e->mr->lkey};
    struct ibv_send_wr w[3];
    for (int k = 0; k < 3; k++)
        w[k] = (struct ibv_send_wr){.wr_id = (uint64_t)k + 1, .next = k < 2 ? &w[k + 1] : NULL,
                                    .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND,
                                    .send_flags = k == 1 ? 0 /* flushed all the same */
                                                         : IBV_SEND_SIGNALED};
    struct ibv_send_wr *bad = NULL;
    CK(ibv_post_send(e->qp, w, &bad) == 0);
    struct ibv_wc wc[5];
    CK(poll_n(e, wc, 5) == 5);
    CK(wc[0].wr_id == 1 && wc[0].status == IBV_WC_RETRY_EXC_ERR);
    int flushed = 0;
    for (int k = 1; k < 5; k++) {
        CK(wc[k].status == IBV_WC_WR_FLUSH_ERR);
        flushed |= 1 << (wc[k].wr_id % 16);
    }
    CK(flushed == ((1 << 2) | (1 << 3) | (1 << 10) | (1 << 11)));
    CK(e->qp->state == IBV_QPS_ERR);
    poll_none(e, 10);
    /* in ERR, a post completes at once, flushed */
    CK(post_send(e, 4, 0, 10, 0) == 0);
    struct ibv_wc one = poll1(e);
    CK(one.wr_id == 4 && one.status == IBV_WC_WR_FLUSH_ERR);
    sock_put(sock, 2);
}

static void gone_b(struct ep *e, int sock)
{
    CK(ibv_destroy_qp(e->qp) == 0);
    e->qp = NULL;
    sock_put(sock, 1);
    CK(sock_get(sock) == 2);
}

static void test_peer_destroyed(void **state)
{
    run_pair(gone_a, gone_b, &cfg_default);
}

/* The HCA engine: a sends more than b's socket queue holds
 * (net.unix.max_dgram_qlen, 10 by default), then stops calling verbs and
 * blocks on the socketpair; b, polling only its own CQ, must get
 * everything. Then a finds all its send completions. Two rounds: 40 sends
 * of 16 KiB, and 5 of 1 MiB (16 datagrams each: fragments in order). */
static const struct {
    unsigned n;
    uint32_t len;
} engine_rounds[] = {{40, 16384}, {5, MAX_MSG}};
#define ENGINE_ROUNDS (sizeof(engine_rounds) / sizeof(engine_rounds[0]))

static void engine_a(struct ep *e, int sock)
{
    CK(verbs_emul_sends_posted() == 0); /* a forked child counts from 0 */
    for (unsigned r = 0; r < ENGINE_ROUNDS; r++) {
        unsigned n = engine_rounds[r].n;
        uint32_t len = engine_rounds[r].len;
        CK(sock_get(sock) == 10 + r); /* b's receives are posted */
        for (unsigned i = 0; i < n; i++) {
            size_t off = len * n <= MAX_MSG ? (size_t)i * len : 0; /* copied at post */
            fill(e->buf + off, len, 300 + r * 64 + i);
            CK(post_send(e, i, off, len, IBV_SEND_SIGNALED) == 0);
        }
        /* no verbs call from here until b has everything */
        sock_put(sock, 20 + r);
        CK(sock_get_ms(sock, 3 * DEADLINE_MS) == 30 + r);
        struct ibv_wc wc[40];
        CK(poll_n(e, wc, (int)n) == (int)n);
        for (unsigned k = 0; k < n; k++) {
            CK(wc[k].status == IBV_WC_SUCCESS && wc[k].opcode == IBV_WC_SEND);
            CK(wc[k].wr_id == k);
        }
        poll_none(e, 5);
    }
    CK(verbs_emul_sends_posted() == 45);
}

static void engine_b(struct ep *e, int sock)
{
    for (unsigned r = 0; r < ENGINE_ROUNDS; r++) {
        unsigned n = engine_rounds[r].n;
        uint32_t len = engine_rounds[r].len;
        for (unsigned i = 0; i < n; i++)
            CK(post_recv(e, i, RECV_OFF + (size_t)i * len, len) == 0);
        sock_put(sock, 10 + r);
        CK(sock_get(sock) == 20 + r); /* a posted all and stopped */
        struct ibv_wc wc[40];
        CK(poll_n(e, wc, (int)n) == (int)n);
        for (unsigned k = 0; k < n; k++) {
            CK(wc[k].status == IBV_WC_SUCCESS && wc[k].opcode == IBV_WC_RECV);
            CK(wc[k].wr_id == k && wc[k].byte_len == len);
            CK(check(e->buf + RECV_OFF + (size_t)k * len, len, 300 + r * 64 + k) == 0);
        }
        sock_put(sock, 30 + r);
    }
}

static void test_engine_progress(void **state)
{
    struct cfg c = cfg_default;
    c.buflen = RECV_OFF + 5 * (size_t)MAX_MSG;
    run_pair(engine_a, engine_b, &c);
}

/* ------------------------------------------------------------ one process */

/* The engine with a peer that does not receive: a QP destroyed, and a
 * context closed, while the engine waits on them; a peer destroyed while
 * sends wait (RETRY_EXC_ERR, the rest flushed); and delivery while only
 * the receiving context is called. */
static void test_engine_teardown(void **state)
{
    struct ep a, b;
    struct ibv_wc wc[64];
    pair_open(&a, &b, &cfg_default);
    for (unsigned i = 0; i < 30; i++) assert_int_equal(post_send(&a, i, 0, 16384, 0), 0);
    assert_int_equal(ibv_destroy_qp(a.qp), 0); /* sends still waiting */
    a.qp = NULL;
    ep_close(&a);
    ep_close(&b);

    pair_open(&a, &b, &cfg_default);
    for (unsigned i = 0; i < 30; i++)
        assert_int_equal(post_send(&a, i, 0, 16384, IBV_SEND_SIGNALED), 0);
    assert_int_equal(ibv_close_device(a.ctx), 0); /* frees the waiting QP */
    free(a.buf);
    ep_close(&b);

    pair_open(&a, &b, &cfg_default);
    for (unsigned i = 0; i < 30; i++)
        assert_int_equal(post_send(&a, i, 0, 16384, IBV_SEND_SIGNALED), 0);
    assert_int_equal(ibv_destroy_qp(b.qp), 0);
    b.qp = NULL;
    assert_int_equal(poll_n(&a, wc, 30), 30);
    unsigned k = 0;
    while (k < 30 && wc[k].status == IBV_WC_SUCCESS) {
        assert_int_equal(wc[k].wr_id, k);
        k++;
    }
    assert_true(k >= 1 && k < 30); /* some were in b's socket, some waited */
    assert_int_equal(wc[k].wr_id, k);
    assert_int_equal(wc[k].status, IBV_WC_RETRY_EXC_ERR);
    for (k++; k < 30; k++) {
        assert_int_equal(wc[k].wr_id, k);
        assert_int_equal(wc[k].status, IBV_WC_WR_FLUSH_ERR);
    }
    assert_int_equal(a.qp->state, IBV_QPS_ERR);
    ep_close(&a);
    ep_close(&b);

    /* a's context is not called while b receives */
    pair_open(&a, &b, &cfg_default);
    for (unsigned i = 0; i < 40; i++)
        assert_int_equal(post_recv(&b, i, RECV_OFF + i * 16384, 16384), 0);
    for (unsigned i = 0; i < 40; i++) {
        fill(a.buf + i * 16384, 16384, 500 + i);
        assert_int_equal(post_send(&a, i, i * 16384, 16384, IBV_SEND_SIGNALED), 0);
    }
    assert_int_equal(poll_n(&b, wc, 40), 40);
    for (unsigned i = 0; i < 40; i++) {
        assert_int_equal(wc[i].status, IBV_WC_SUCCESS);
        assert_int_equal(wc[i].wr_id, i);
        assert_int_equal(check(b.buf + RECV_OFF + i * 16384, 16384, 500 + i), 0);
    }
    assert_int_equal(poll_n(&a, wc, 40), 40);
    for (unsigned i = 0; i < 40; i++) assert_int_equal(wc[i].wr_id, i);
    ep_close(&a);
    ep_close(&b);
}

/* VERBS_EMUL_CORRUPT=<nth>:<offset>:<xor>[:<len>] */
static void set_corrupt(unsigned long nth, const char *rest)
{
    char v[96];
    snprintf(v, sizeof(v), "%lu:%s", nth, rest);
    setenv("VERBS_EMUL_CORRUPT", v, 1);
}

static void test_wire_corrupt(void **state)
{
    struct ep a, b;
    struct ibv_wc wc[4];
    pair_open(&a, &b, &cfg_default);

    /* the second of three sends: byte 5 XORed with 0xff on the wire */
    for (unsigned i = 0; i < 3; i++) assert_int_equal(post_recv(&b, i, RECV_OFF + i * 256, 256), 0);
    unsigned long n0 = verbs_emul_sends_posted();
    set_corrupt(n0 + 2, "5:0xff");
    for (unsigned i = 0; i < 3; i++) {
        fill(a.buf + i * 100, 100, 40 + i);
        assert_int_equal(post_send(&a, i, i * 100, 100, IBV_SEND_SIGNALED), 0);
    }
    assert_int_equal(verbs_emul_sends_posted(), n0 + 3);
    assert_int_equal(poll_n(&b, wc, 3), 3);
    for (unsigned i = 0; i < 3; i++) {
        assert_int_equal(wc[i].status, IBV_WC_SUCCESS);
        assert_int_equal(wc[i].byte_len, 100);
    }
    uint8_t *r = b.buf + RECV_OFF;
    assert_int_equal(check(r, 100, 40), 0);
    assert_int_equal(check(r + 512, 100, 42), 0);
    assert_int_not_equal(check(r + 256, 100, 41), 0);
    r[256 + 5] ^= 0xff;
    assert_int_equal(check(r + 256, 100, 41), 0); /* only that byte */
    assert_int_equal(check(a.buf + 100, 100, 41), 0); /* the sender's buffer is not touched */
    assert_int_equal(poll_n(&a, wc, 3), 3);
    assert_int_equal(wc[1].byte_len, 100);

    /* cut to 10 bytes; the XOR beyond the wire length does nothing */
    assert_int_equal(post_recv(&b, 3, RECV_OFF, 256), 0);
    set_corrupt(verbs_emul_sends_posted() + 1, "50:1:10");
    fill(a.buf, 100, 43);
    assert_int_equal(post_send(&a, 3, 0, 100, IBV_SEND_SIGNALED), 0);
    wc[0] = poll1(&b);
    assert_int_equal(wc[0].status, IBV_WC_SUCCESS);
    assert_int_equal(wc[0].byte_len, 10);
    assert_int_equal(check(b.buf + RECV_OFF, 10, 43), 0);
    wc[0] = poll1(&a);
    assert_int_equal(wc[0].status, IBV_WC_SUCCESS);
    assert_int_equal(wc[0].byte_len, 100); /* the sender's CQE: the length posted */

    /* 64 bytes extended to 100 with zeros, byte 70 XORed with 0x80 */
    memset(b.buf + RECV_OFF, 0xaa, 256);
    assert_int_equal(post_recv(&b, 4, RECV_OFF, 256), 0);
    set_corrupt(verbs_emul_sends_posted() + 1, "70:0x80:100");
    fill(a.buf, 64, 44);
    assert_int_equal(post_send(&a, 4, 0, 64, IBV_SEND_SIGNALED), 0);
    wc[0] = poll1(&b);
    assert_int_equal(wc[0].byte_len, 100);
    assert_int_equal(check(b.buf + RECV_OFF, 64, 44), 0);
    for (unsigned i = 64; i < 100; i++) assert_int_equal(b.buf[RECV_OFF + i], i == 70 ? 0x80 : 0);
    assert_int_equal(b.buf[RECV_OFF + 100], 0xaa);
    assert_int_equal(poll1(&a).status, IBV_WC_SUCCESS);

    /* a zero-length SEND made 4 bytes long, the first XORed with 7 */
    assert_int_equal(post_recv(&b, 5, RECV_OFF, 256), 0);
    set_corrupt(verbs_emul_sends_posted() + 1, "0:7:4");
    assert_int_equal(post_send(&a, 5, 0, 0, IBV_SEND_SIGNALED), 0);
    wc[0] = poll1(&b);
    assert_int_equal(wc[0].byte_len, 4);
    assert_memory_equal(b.buf + RECV_OFF, "\x07\0\0\0", 4);
    assert_int_equal(poll1(&a).status, IBV_WC_SUCCESS);

    /* malformed: one line on stderr, ignored, counting goes on */
    const char *bad[] = {"x", "1:2", "0:1:1", "1:1:256", "1:1:1:2000000", "1:1:1:1:1", "1::1",
                         "-1:1:1", "1:1:1:"};
    for (unsigned v = 0; v < sizeof(bad) / sizeof(bad[0]); v++) {
        int pfd[2];
        assert_int_equal(pipe(pfd), 0);
        fflush(stderr);
        int saved = dup(2);
        assert_true(saved >= 0);
        assert_int_equal(dup2(pfd[1], 2), 2);
        setenv("VERBS_EMUL_CORRUPT", bad[v], 1);
        n0 = verbs_emul_sends_posted();
        for (unsigned i = 0; i < 2; i++) {
            assert_int_equal(post_recv(&b, 6, RECV_OFF, 256), 0);
            fill(a.buf, 32, 45 + i);
            assert_int_equal(post_send(&a, 6, 0, 32, IBV_SEND_SIGNALED), 0);
            wc[0] = poll1(&b);
            assert_int_equal(wc[0].byte_len, 32);
            assert_int_equal(check(b.buf + RECV_OFF, 32, 45 + i), 0);
            assert_int_equal(poll1(&a).status, IBV_WC_SUCCESS);
        }
        assert_int_equal(verbs_emul_sends_posted(), n0 + 2);
        fflush(stderr);
        assert_int_equal(dup2(saved, 2), 2);
        close(saved);
        close(pfd[1]);
        char text[512];
        ssize_t got = read(pfd[0], text, sizeof(text) - 1);
        close(pfd[0]);
        assert_true(got > 0);
        text[got] = '\0';
        assert_non_null(strstr(text, "VERBS_EMUL_CORRUPT"));
        assert_non_null(strstr(text, bad[v]));
        assert_ptr_equal(strchr(text, '\n'), text + got - 1); /* one line */
    }
    unsetenv("VERBS_EMUL_CORRUPT");
    ep_close(&a);
    ep_close(&b);
}

static void test_modify_mask_einval(void **state)
{
    struct ep a, b;
    ep_open(&a, &cfg_default);
    ep_open(&b, &cfg_default);
    struct ibv_qp_attr at = {.qp_state = IBV_QPS_INIT, .port_num = 1};
    /* RESET -> INIT without PORT / ACCESS_FLAGS / PKEY_INDEX */
    assert_int_equal(ibv_modify_qp(a.qp, &at, IBV_QP_STATE | IBV_QP_PKEY_INDEX |
                                                  IBV_QP_ACCESS_FLAGS), EINVAL);
    assert_int_equal(ibv_modify_qp(a.qp, &at, IBV_QP_STATE | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS),
                     EINVAL);
    assert_int_equal(ibv_modify_qp(a.qp, &at, IBV_QP_STATE | IBV_QP_PORT | IBV_QP_PKEY_INDEX),
                     EINVAL);
    /* a bit that does not belong to the transition */
    assert_int_equal(ibv_modify_qp(a.qp, &at, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
                                                  IBV_QP_ACCESS_FLAGS | IBV_QP_SQ_PSN),
                     EINVAL);
    /* a port that does not exist */
    at.port_num = 2;
    assert_int_equal(ibv_modify_qp(a.qp, &at, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
                                                  IBV_QP_ACCESS_FLAGS),
                     EINVAL);
    /* RESET -> RTR, RESET -> RTS skip states */
    assert_int_equal(to_rtr(a.qp, b.lid, b.qp->qp_num, rtr_mask), EINVAL);
    assert_int_equal(to_rts(a.qp, rts_mask), EINVAL);
    assert_int_equal(a.qp->state, IBV_QPS_RESET);
    assert_int_equal(to_init(a.qp), 0);
    /* INIT -> RTS skips RTR; INIT -> RTR without each required bit */
    assert_int_equal(to_rts(a.qp, rts_mask), EINVAL);
    const int rtr_bits[] = {IBV_QP_AV, IBV_QP_PATH_MTU, IBV_QP_DEST_QPN, IBV_QP_RQ_PSN,
                            IBV_QP_MAX_DEST_RD_ATOMIC, IBV_QP_MIN_RNR_TIMER};
    for (unsigned i = 0; i < sizeof(rtr_bits) / sizeof(rtr_bits[0]); i++)
        assert_int_equal(to_rtr(a.qp, b.lid, b.qp->qp_num, rtr_mask & ~rtr_bits[i]), EINVAL);
    assert_int_equal(to_rtr(a.qp, 0, b.qp->qp_num, rtr_mask), EINVAL); /* no lid */
    assert_int_equal(a.qp->state, IBV_QPS_INIT);
    assert_int_equal(to_rtr(a.qp, b.lid, b.qp->qp_num, rtr_mask), 0);
    const int rts_bits[] = {IBV_QP_TIMEOUT, IBV_QP_RETRY_CNT, IBV_QP_RNR_RETRY, IBV_QP_SQ_PSN,
                            IBV_QP_MAX_QP_RD_ATOMIC};
    for (unsigned i = 0; i < sizeof(rts_bits) / sizeof(rts_bits[0]); i++)
        assert_int_equal(to_rts(a.qp, rts_mask & ~rts_bits[i]), EINVAL);
    assert_int_equal(to_rts(a.qp, rts_mask & ~IBV_QP_STATE), EINVAL);
    assert_int_equal(a.qp->state, IBV_QPS_RTR);
    assert_int_equal(to_rts(a.qp, rts_mask), 0);
    /* RTS -> INIT is no transition; any -> ERR and -> RESET are */
    assert_int_equal(to_init(a.qp), EINVAL);
    struct ibv_qp_attr err = {.qp_state = IBV_QPS_ERR};
    assert_int_equal(ibv_modify_qp(a.qp, &err, IBV_QP_STATE), 0);
    assert_int_equal(a.qp->state, IBV_QPS_ERR);
    struct ibv_qp_attr rst = {.qp_state = IBV_QPS_RESET};
    assert_int_equal(ibv_modify_qp(a.qp, &rst, IBV_QP_STATE), 0);
    assert_int_equal(to_init(a.qp), 0);
    ep_close(&a);
    ep_close(&b);
}

static void test_post_in_wrong_state(void **state)
{
    struct ep a, b;
    ep_open(&a, &cfg_default);
    ep_open(&b, &cfg_default);
    assert_int_equal(post_send(&a, 1, 0, 8, IBV_SEND_SIGNALED), EINVAL); /* RESET */
    assert_int_equal(post_recv(&a, 1, RECV_OFF, 8), EINVAL);             /* RESET */
    assert_int_equal(to_init(a.qp), 0);
    assert_int_equal(post_send(&a, 1, 0, 8, IBV_SEND_SIGNALED), EINVAL); /* INIT */
    assert_int_equal(post_recv(&a, 1, RECV_OFF, 8), 0);                  /* INIT: fine */
    assert_int_equal(to_rtr(a.qp, b.lid, b.qp->qp_num, rtr_mask), 0);
    assert_int_equal(post_send(&a, 1, 0, 8, IBV_SEND_SIGNALED), EINVAL); /* RTR */
    assert_int_equal(to_rts(a.qp, rts_mask), 0);
    /* RTS: an opcode not emulated, an SGE count above the cap */
    assert_int_equal(post_send_ex(&a, 1, 0, 8, 0, IBV_WR_RDMA_WRITE, 0, a.mr->lkey), EINVAL);
    struct ibv_sge sge[5] = {{(uintptr_t)a.buf, 1, a.mr->lkey}};
    for (int i = 1; i < 5; i++) sge[i] = sge[0];
    struct ibv_send_wr wr = {.wr_id = 9, .sg_list = sge, .num_sge = 5, .opcode = IBV_WR_SEND};
    struct ibv_send_wr *bad = NULL;
    assert_int_equal(ibv_post_send(a.qp, &wr, &bad), EINVAL);
    assert_ptr_equal(bad, &wr);
    /* larger than the 1 MiB cap; inline larger than max_inline_data */
    assert_int_equal(post_send(&a, 1, 0, MAX_MSG + 1, 0), EINVAL);
    assert_int_equal(post_send(&a, 1, 0, 257, IBV_SEND_INLINE), EINVAL);
    poll_none(&a, 5);
    ep_close(&a);
    ep_close(&b);
}

/* the send queue holds max_send_wr WRs; unsignaled ones keep their slot
 * until a later signaled one completes */
static void test_too_many_wrs(void **state)
{
    struct cfg c = cfg_default;
    c.max_send = 4;
    c.max_recv = 2;
    struct ep a, b;
    pair_open(&a, &b, &c);
    assert_int_equal(post_recv(&a, 1, RECV_OFF, 8), 0);
    assert_int_equal(post_recv(&a, 2, RECV_OFF, 8), 0);
    assert_int_equal(post_recv(&a, 3, RECV_OFF, 8), ENOMEM);
    for (int i = 0; i < 2; i++) assert_int_equal(post_recv(&b, 10 + i, RECV_OFF + 8 * i, 8), 0);


    /* four unsignaled WRs fill the send queue for good (as on an HCA) */
    for (int i = 0; i < 4; i++) assert_int_equal(post_send(&a, i, 0, 8, 0), 0);
    /* a chain: the first WR does not fit */
    struct ibv_sge sge = {(uintptr_t)a.buf, 8, a.mr->lkey};
    struct ibv_send_wr w2 = {.wr_id = 5, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND,
                             .send_flags = IBV_SEND_SIGNALED};
    struct ibv_send_wr w1 = w2;
    w1.wr_id = 4;
    w1.next = &w2;
    struct ibv_send_wr *bad = NULL;
    assert_int_equal(ibv_post_send(a.qp, &w1, &bad), ENOMEM);
    assert_ptr_equal(bad, &w1);
    struct ibv_wc wc[4];
    assert_int_equal(poll_n(&b, wc, 2), 2); /* they were sent all the same */
    poll_none(&a, 10);
    assert_int_equal(post_send(&a, 4, 0, 8, IBV_SEND_SIGNALED), ENOMEM);
    ep_close(&a);
    ep_close(&b);

    /* three unsignaled and a signaled one: its completion frees all four
     * slots (without that, the next round's second post would fail) */
    pair_open(&a, &b, &c);
    for (int round = 0; round < 3; round++) {
        for (int i = 0; i < 4; i++)
            assert_int_equal(post_send(&a, (uint64_t)(round * 4 + i), 0, 8,
                                       i == 3 ? IBV_SEND_SIGNALED : 0),
                             0);
        wc[0] = poll1(&a);
        assert_int_equal(wc[0].status, IBV_WC_SUCCESS);
        assert_int_equal(wc[0].wr_id, round * 4 + 3);
        poll_none(&a, 5);
        /* b takes them in, two receives at a time */
        for (int k = 0; k < 2; k++) {
            for (int i = 0; i < 2; i++)
                assert_int_equal(post_recv(&b, (uint64_t)i, RECV_OFF + 8 * i, 8), 0);
            assert_int_equal(poll_n(&b, wc, 2), 2);
            assert_int_equal(wc[0].status, IBV_WC_SUCCESS);
            assert_int_equal(wc[1].status, IBV_WC_SUCCESS);
        }
    }
    ep_close(&a);
    ep_close(&b);
}

/* unsignaled sends arrive but make no CQE; sq_sig_all signals all */
static void test_unsignaled(void **state)
{
    struct ep a, b;
    pair_open(&a, &b, &cfg_default);
    for (int i = 0; i < 4; i++) assert_int_equal(post_recv(&b, i, RECV_OFF + i * 16, 16), 0);
    for (int i = 0; i < 3; i++) assert_int_equal(post_send(&a, i, 0, 16, 0), 0);
    struct ibv_wc wc[4];
    assert_int_equal(poll_both(&b, wc, 3, &a), 3); /* delivered; a saw nothing */
    assert_int_equal(post_send(&a, 3, 0, 16, IBV_SEND_SIGNALED), 0);
    wc[0] = poll1(&a);
    assert_int_equal(wc[0].wr_id, 3);
    poll_none(&a, 10);
    assert_int_equal(poll_n(&b, wc, 1), 1);
    ep_close(&a);
    ep_close(&b);

    struct cfg c = cfg_default;
    c.sig_all = 1;
    pair_open(&a, &b, &c);
    assert_int_equal(post_recv(&b, 0, RECV_OFF, 16), 0);
    assert_int_equal(post_send(&a, 42, 0, 16, 0), 0);
    wc[0] = poll1(&a);
    assert_int_equal(wc[0].wr_id, 42);
    assert_int_equal(wc[0].status, IBV_WC_SUCCESS);
    assert_int_equal(wc[0].opcode, IBV_WC_SEND);
    ep_close(&a);
    ep_close(&b);
}

static void test_bad_lkey(void **state)
{
    struct ep a, b;
    pair_open(&a, &b, &cfg_default);
    assert_int_equal(post_recv(&b, 0, RECV_OFF, 64), 0);
    /* inline data is not checked against an MR */
    fill(a.buf, 32, 3);
    assert_int_equal(post_send_ex(&a, 1, 0, 32, IBV_SEND_SIGNALED | IBV_SEND_INLINE,
                                  IBV_WR_SEND, 0, 0xbad), 0);
    struct ibv_wc wc[3];
    wc[0] = poll1(&a);
    assert_int_equal(wc[0].status, IBV_WC_SUCCESS);
    wc[0] = poll1(&b);
    assert_int_equal(wc[0].status, IBV_WC_SUCCESS);
    assert_int_equal(check(b.buf + RECV_OFF, 32, 3), 0);
    /* a key no MR has, then a range beyond the MR; the WR after it flushes */
    assert_int_equal(post_send_ex(&a, 2, 0, 32, IBV_SEND_SIGNALED, IBV_WR_SEND, 0,
                                  a.mr->lkey ^ 0x100),
                     0);
    assert_int_equal(post_send(&a, 3, 0, 32, 0), 0);
    assert_int_equal(poll_n(&a, wc, 2), 2);
    assert_int_equal(wc[0].wr_id, 2);
    assert_int_equal(wc[0].status, IBV_WC_LOC_PROT_ERR);
    assert_int_equal(wc[1].wr_id, 3);
    assert_int_equal(wc[1].status, IBV_WC_WR_FLUSH_ERR);
    assert_int_equal(a.qp->state, IBV_QPS_ERR);
    ep_close(&a);
    ep_close(&b);

    pair_open(&a, &b, &cfg_default);
    assert_int_equal(post_send(&a, 4, a.len - 16, 32, IBV_SEND_SIGNALED), 0);
    wc[0] = poll1(&a);
    assert_int_equal(wc[0].status, IBV_WC_LOC_PROT_ERR);
    ep_close(&a);
    ep_close(&b);

    /* a receive with a key no MR has: LOC_PROT_ERR when data arrives */
    pair_open(&a, &b, &cfg_default);
    assert_int_equal(post_recv_ex(&b, 5, RECV_OFF, 64, b.mr->lkey + 1), 0);
    assert_int_equal(post_recv(&b, 6, RECV_OFF, 64), 0);
    assert_int_equal(post_send(&a, 7, 0, 32, IBV_SEND_SIGNALED), 0);
    assert_int_equal(poll_n(&b, wc, 2), 2);
    assert_int_equal(wc[0].wr_id, 5);
    assert_int_equal(wc[0].status, IBV_WC_LOC_PROT_ERR);
    assert_int_equal(wc[1].status, IBV_WC_WR_FLUSH_ERR);
    assert_int_equal(b.qp->state, IBV_QPS_ERR);
    ep_close(&a);
    ep_close(&b);

    /* a receive into an MR without IBV_ACCESS_LOCAL_WRITE */
    pair_open(&a, &b, &cfg_default);
    struct ibv_mr *ro = ibv_reg_mr(b.pd, b.buf + RECV_OFF, 64, 0);
    assert_non_null(ro);
    assert_int_equal(post_recv_ex(&b, 8, RECV_OFF, 64, ro->lkey), 0);
    assert_int_equal(post_send(&a, 9, 0, 32, IBV_SEND_SIGNALED), 0);
    wc[0] = poll1(&b);
    assert_int_equal(wc[0].wr_id, 8);
    assert_int_equal(wc[0].status, IBV_WC_LOC_PROT_ERR);
    assert_int_equal(ibv_dereg_mr(ro), 0);
    ep_close(&a);
    ep_close(&b);
}

static void test_modify_err_flushes(void **state)
{
    struct ep a, b;
    pair_open(&a, &b, &cfg_default);
    for (int i = 0; i < 3; i++) assert_int_equal(post_recv(&a, 20 + i, RECV_OFF, 64), 0);
    poll_none(&a, 5);
    struct ibv_qp_attr at = {.qp_state = IBV_QPS_ERR};
    assert_int_equal(ibv_modify_qp(a.qp, &at, IBV_QP_STATE), 0);
    struct ibv_wc wc[3];
    assert_int_equal(poll_n(&a, wc, 3), 3);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(wc[i].wr_id, 20 + i);
        assert_int_equal(wc[i].status, IBV_WC_WR_FLUSH_ERR);
        assert_int_equal(wc[i].opcode, IBV_WC_RECV);
    }
    /* posting in ERR completes at once, flushed */
    assert_int_equal(post_recv(&a, 30, RECV_OFF, 64), 0);
    assert_int_equal(post_send(&a, 31, 0, 64, 0), 0);
    assert_int_equal(poll_n(&a, wc, 2), 2);
    assert_int_equal(wc[0].wr_id, 30);
    assert_int_equal(wc[0].status, IBV_WC_WR_FLUSH_ERR);
    assert_int_equal(wc[1].wr_id, 31);
    assert_int_equal(wc[1].status, IBV_WC_WR_FLUSH_ERR);
    /* a receive posted before the peer went away is flushed all the same */
    assert_int_equal(post_recv(&b, 40, RECV_OFF, 64), 0);
    ep_close(&a);
    assert_int_equal(ibv_modify_qp(b.qp, &at, IBV_QP_STATE), 0);
    wc[0] = poll1(&b);
    assert_int_equal(wc[0].wr_id, 40);
    assert_int_equal(wc[0].status, IBV_WC_WR_FLUSH_ERR);
    ep_close(&b);
}

/* datagrams not from the connected peer, and garbage, are dropped */
static void test_foreign_dropped(void **state)
{
    struct ep a, b, c;
    pair_open(&a, &b, &cfg_default);
    ep_open(&c, &cfg_default);
    ep_connect(&c, b.lid, b.qp->qp_num); /* c sends to b, b listens to a */
    assert_int_equal(post_recv(&b, 1, RECV_OFF, 64), 0);
    assert_int_equal(post_send(&c, 1, 0, 16, IBV_SEND_SIGNALED), 0);
    struct ibv_wc wc = poll1(&c);
    assert_int_equal(wc.status, IBV_WC_SUCCESS);
    /* garbage, straight to b's socket */
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    int n = snprintf(sa.sun_path + 1, sizeof(sa.sun_path) - 1, "verbs-emul.%u.%u.%u",
                     (unsigned)getuid(), (unsigned)b.lid, (unsigned)b.qp->qp_num);
    int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    assert_true(fd >= 0);
    char junk[40];
    memset(junk, 0x5a, sizeof(junk));
    assert_int_equal(sendto(fd, junk, sizeof(junk), 0, (struct sockaddr *)&sa,
                            (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n)),
                     (ssize_t)sizeof(junk));
    close(fd);
    fill(a.buf, 16, 9);
    assert_int_equal(post_send(&a, 2, 0, 16, IBV_SEND_SIGNALED), 0);
    wc = poll1(&b);
    assert_int_equal(wc.status, IBV_WC_SUCCESS);
    assert_int_equal(wc.src_qp, a.qp->qp_num);
    assert_int_equal(check(b.buf + RECV_OFF, 16, 9), 0);
    assert_int_equal(verbs_emul_qp_dropped(b.qp), 2);
    assert_int_equal(verbs_emul_qp_dropped(a.qp), 0);
    ep_close(&a);
    ep_close(&b);
    ep_close(&c);
}

static void test_multi_sge(void **state)
{
    struct ep a, b;
    pair_open(&a, &b, &cfg_default);
    fill(a.buf, 300, 11);
    struct ibv_sge rs[2] = {{(uintptr_t)(b.buf + RECV_OFF), 100, b.mr->lkey},
                            {(uintptr_t)(b.buf + RECV_OFF + 1000), 400, b.mr->lkey}};
    struct ibv_recv_wr rwr = {.wr_id = 5, .sg_list = rs, .num_sge = 2};
    struct ibv_recv_wr *rbad = NULL;
    assert_int_equal(ibv_post_recv(b.qp, &rwr, &rbad), 0);
    struct ibv_sge ss[3] = {{(uintptr_t)a.buf, 50, a.mr->lkey},
                            {(uintptr_t)(a.buf + 50), 0, 0 /* empty: key not checked */},
                            {(uintptr_t)(a.buf + 50), 250, a.mr->lkey}};
    struct ibv_send_wr swr = {.wr_id = 6, .sg_list = ss, .num_sge = 3, .opcode = IBV_WR_SEND,
                              .send_flags = IBV_SEND_SIGNALED};
    struct ibv_send_wr *sbad = NULL;
    assert_int_equal(ibv_post_send(a.qp, &swr, &sbad), 0);
    struct ibv_wc wc = poll1(&b);
    assert_int_equal(wc.status, IBV_WC_SUCCESS);
    assert_int_equal(wc.byte_len, 300);
    uint8_t got[300];
    memcpy(got, b.buf + RECV_OFF, 100);
    memcpy(got + 100, b.buf + RECV_OFF + 1000, 200);
    assert_int_equal(check(got, 300, 11), 0);
    wc = poll1(&a);
    assert_int_equal(wc.wr_id, 6);
    ep_close(&a);
    ep_close(&b);
}

/* the QP addressed by the GID of ibv_query_gid (is_global = 1, no dlid) */
static void test_global_route(void **state)
{
    struct ep a, b;
    ep_open(&a, &cfg_default);
    ep_open(&b, &cfg_default);
    union ibv_gid gid;
    assert_int_equal(ibv_query_gid(b.ctx, 1, 0, &gid), 0);
    assert_int_equal(verbs_emul_lid_of_gid(&gid), b.lid);
    assert_int_equal(to_init(a.qp), 0);
    struct ibv_qp_attr at = {.qp_state = IBV_QPS_RTR, .path_mtu = IBV_MTU_1024,
                             .dest_qp_num = b.qp->qp_num, .max_dest_rd_atomic = 1,
                             .ah_attr = {.is_global = 1, .grh = {.dgid = gid}, .port_num = 1}};
    assert_int_equal(ibv_modify_qp(a.qp, &at, rtr_mask), 0);
    assert_int_equal(to_rts(a.qp, rts_mask), 0);
    ep_connect(&b, a.lid, a.qp->qp_num);
    assert_int_equal(post_recv(&b, 1, RECV_OFF, 64), 0);
    assert_int_equal(post_send(&a, 1, 0, 64, IBV_SEND_SIGNALED), 0);
    assert_int_equal(poll1(&b).status, IBV_WC_SUCCESS);
    assert_int_equal(poll1(&a).status, IBV_WC_SUCCESS);
    ep_close(&a);
    ep_close(&b);
}

static void test_cq_overrun(void **state)
{
    struct cfg c = cfg_default;
    c.cqe = 4;
    struct ep a, b;
    pair_open(&a, &b, &c);
    assert_int_equal(a.cq->cqe, 4);
    for (int i = 0; i < 5; i++) assert_int_equal(post_recv(&b, i, RECV_OFF + 16 * i, 16), 0);
    for (int i = 0; i < 4; i++) assert_int_equal(post_send(&a, i, 0, 16, IBV_SEND_SIGNALED), 0);
    struct ibv_wc wc[8];
    assert_int_equal(poll_n(&a, wc, 4), 4); /* a full CQ is no overrun */
    for (int i = 0; i < 5; i++) assert_int_equal(post_send(&a, i, 0, 16, IBV_SEND_SIGNALED), 0);
    assert_int_equal(ibv_poll_cq(a.cq, 8, wc), -1);
    assert_int_equal(ibv_poll_cq(a.cq, 8, wc), -1); /* from then on */
    ep_close(&a);
    ep_close(&b);
}

/* ibv_resize_cq: the CQ keeps its entries, in order; a size below what it
 * holds is refused; the new size is the new overrun limit */
static void test_cq_resize(void **state)
{
    struct cfg c = cfg_default;
    c.cqe = 4;
    struct ep a, b;
    pair_open(&a, &b, &c);
    for (int i = 0; i < 12; i++) assert_int_equal(post_recv(&b, i, RECV_OFF + 16 * i, 16), 0);
    for (int i = 0; i < 4; i++) assert_int_equal(post_send(&a, i, 0, 16, IBV_SEND_SIGNALED), 0);
    assert_int_equal(ibv_resize_cq(a.cq, 3), EINVAL); /* holds 4 */
    assert_int_equal(ibv_resize_cq(a.cq, 0), EINVAL);
    assert_int_equal(ibv_resize_cq(a.cq, 8), 0);
    assert_int_equal(a.cq->cqe, 8);
    for (int i = 4; i < 8; i++) assert_int_equal(post_send(&a, i, 0, 16, IBV_SEND_SIGNALED), 0);
    struct ibv_wc wc[8];
    assert_int_equal(poll_n(&a, wc, 8), 8);
    for (int i = 0; i < 8; i++) {
        assert_int_equal(wc[i].status, IBV_WC_SUCCESS);
        assert_int_equal(wc[i].wr_id, (uint64_t)i);
    }
    assert_int_equal(ibv_resize_cq(a.cq, 2), 0); /* empty: may shrink */
    for (int i = 8; i < 11; i++) assert_int_equal(post_send(&a, i, 0, 16, IBV_SEND_SIGNALED), 0);
    assert_int_equal(ibv_poll_cq(a.cq, 8, wc), -1); /* 3 in a CQ of 2 */
    setenv("VERBS_EMUL_FAIL", "resize_cq", 1);
    assert_int_equal(ibv_resize_cq(b.cq, 512), ENOMEM);
    unsetenv("VERBS_EMUL_FAIL");
    ep_close(&a);
    ep_close(&b);
}

/* Many QPs on one CQ in each context: every message comes out of the
 * shared CQ with its QP's number, in order per QP; an idle poll finds
 * nothing; a QP destroyed in between leaves the others working. */
#define SHARED_NQP 48
static void test_shared_cq(void **state)
{
    struct ep a, b;
    ep_open(&a, &cfg_default);
    ep_open(&b, &cfg_default);
    struct ibv_qp *qa[SHARED_NQP], *qb[SHARED_NQP];
    struct ibv_qp_init_attr ia = {
        .cap = {.max_send_wr = 8, .max_recv_wr = 8, .max_send_sge = 1, .max_recv_sge = 1},
        .qp_type = IBV_QPT_RC, .sq_sig_all = 1};
    for (int i = 0; i < SHARED_NQP; i++) {
        ia.send_cq = ia.recv_cq = a.cq;
        CK(qa[i] = ibv_create_qp(a.pd, &ia));
        ia.send_cq = ia.recv_cq = b.cq;
        CK(qb[i] = ibv_create_qp(b.pd, &ia));
    }
    for (int i = 0; i < SHARED_NQP; i++) {
        struct ep ea = a, eb = b;
        ea.qp = qa[i];
        eb.qp = qb[i];
        ep_connect(&ea, b.lid, qb[i]->qp_num);
        ep_connect(&eb, a.lid, qa[i]->qp_num);
        for (int k = 0; k < 2; k++) /* two receives each, 16 bytes apart per QP */
            assert_int_equal(post_recv(&eb, (uint64_t)i << 8 | k, RECV_OFF + 32 * i + 16 * k, 16), 0);
    }
    poll_none(&b, 20); /* idle */
    /* the last QP first, then the others, two messages each */
    for (int k = 0; k < 2; k++)
        for (int i = SHARED_NQP - 1; i >= 0; i--) {
            struct ep ea = a;
            ea.qp = qa[i];
            a.buf[16 * i + k] = (uint8_t)(i + k);
            assert_int_equal(post_send(&ea, (uint64_t)i << 8 | k, 16 * i + k, 1, 0), 0);
        }
    struct ibv_wc wc[2 * SHARED_NQP];
    assert_int_equal(poll_n(&b, wc, 2 * SHARED_NQP), 2 * SHARED_NQP);
    int next[SHARED_NQP] = {0};
    for (int n = 0; n < 2 * SHARED_NQP; n++) {
        assert_int_equal(wc[n].status, IBV_WC_SUCCESS);
        int i = (int)(wc[n].wr_id >> 8), k = (int)(wc[n].wr_id & 0xff);
        assert_true(i >= 0 && i < SHARED_NQP);
        assert_int_equal(wc[n].qp_num, qb[i]->qp_num);
        assert_int_equal(k, next[i]++); /* in order per QP */
        assert_int_equal(b.buf[RECV_OFF + 32 * i + 16 * k], (uint8_t)(i + k));
    }
    assert_int_equal(poll_n(&a, wc, 2 * SHARED_NQP), 2 * SHARED_NQP); /* the sends */
    /* destroy one receiving QP: the others still receive through the CQ */
    assert_int_equal(ibv_destroy_qp(qb[7]), 0);
    struct ep eb = b, ea = a;
    eb.qp = qb[8];
    ea.qp = qa[8];
    assert_int_equal(post_recv(&eb, 99, RECV_OFF, 16), 0);
    assert_int_equal(post_send(&ea, 98, 0, 4, 0), 0);
    struct ibv_wc w = poll1(&b);
    assert_int_equal(w.status, IBV_WC_SUCCESS);
    assert_int_equal(w.wr_id, 99);
    assert_int_equal(w.qp_num, qb[8]->qp_num);
    for (int i = 0; i < SHARED_NQP; i++) {
        CK(ibv_destroy_qp(qa[i]) == 0);
        if (i != 7) CK(ibv_destroy_qp(qb[i]) == 0);
    }
    ep_close(&a);
    ep_close(&b);
}

static int post_read(struct ep *e, uint64_t wr_id, size_t off, uint32_t len, uint64_t raddr,
                     uint32_t rkey)
{
    struct ibv_sge sge = {.addr = (uintptr_t)(e->buf + off), .length = len, .lkey = e->mr->lkey};
    struct ibv_send_wr wr = {.wr_id = wr_id, .sg_list = &sge, .num_sge = 1,
                             .opcode = IBV_WR_RDMA_READ, .send_flags = IBV_SEND_SIGNALED};
    wr.wr.rdma.remote_addr = raddr;
    wr.wr.rdma.rkey = rkey;
    struct ibv_send_wr *bad = NULL;
    return ibv_post_send(e->qp, &wr, &bad);
}

/* RDMA read: the responder serves it from an MR with remote read access
 * (in fragments, with no receive posted on its side; poll_both: serving
 * makes it no completions); the read completes
 * before a SEND posted after it; a bad key, an MR without remote read
 * access and a range outside the MR end in IBV_WC_REM_ACCESS_ERR */
static void test_rdma_read(void **state)
{
    struct ep a, b;
    pair_open(&a, &b, &cfg_default);
    const uint32_t len = 200000; /* four datagrams */
    fill(b.buf, len, 5);
    struct ibv_mr *rmr = ibv_reg_mr(b.pd, b.buf, len, IBV_ACCESS_LOCAL_WRITE |
                                                         IBV_ACCESS_REMOTE_READ);
    assert_non_null(rmr);
    struct ibv_mr *nmr = ibv_reg_mr(b.pd, b.buf, len, IBV_ACCESS_LOCAL_WRITE);
    assert_non_null(nmr);

    assert_int_equal(post_read(&a, 1, 0, len, (uintptr_t)b.buf, rmr->rkey), 0);
    assert_int_equal(post_recv(&b, 7, RECV_OFF, 16), 0);
    assert_int_equal(post_send(&a, 2, len, 8, IBV_SEND_SIGNALED), 0);
    struct ibv_wc wc[2];
    /* b polls too: it serves the read and receives the send */
    int got = 0;
    int64_t end = now_ms() + DEADLINE_MS;
    struct ibv_wc bw;
    int bgot = 0;
    while ((got < 2 || !bgot) && now_ms() < end) {
        int r = ibv_poll_cq(a.cq, 2 - got, wc + got);
        CK(r >= 0);
        got += r;
        if (!bgot) bgot = ibv_poll_cq(b.cq, 1, &bw);
        CK(bgot >= 0);
    }
    assert_int_equal(got, 2);
    assert_int_equal(bgot, 1);
    assert_int_equal(wc[0].wr_id, 1); /* in order */
    assert_int_equal(wc[0].status, IBV_WC_SUCCESS);
    assert_int_equal(wc[0].opcode, IBV_WC_RDMA_READ);
    assert_int_equal(wc[0].byte_len, len);
    assert_int_equal(check(a.buf, len, 5), 0);
    assert_int_equal(wc[1].wr_id, 2);
    assert_int_equal(wc[1].opcode, IBV_WC_SEND);
    assert_int_equal(bw.wr_id, 7);

    /* part of the MR, at an offset; b has no receive posted */
    memset(a.buf, 0, len);
    assert_int_equal(post_read(&a, 3, 100, 1000, (uintptr_t)b.buf + 5000, rmr->rkey), 0);
    assert_int_equal(poll_both(&a, wc, 1, &b), 1);
    assert_int_equal(wc[0].status, IBV_WC_SUCCESS);
    assert_int_equal(memcmp(a.buf + 100, b.buf + 5000, 1000), 0);

    /* no remote read access: refused, the requester's QP goes to ERR */
    assert_int_equal(post_read(&a, 4, 0, 64, (uintptr_t)b.buf, nmr->rkey), 0);
    assert_int_equal(poll_both(&a, wc, 1, &b), 1);
    assert_int_equal(wc[0].wr_id, 4);
    assert_int_equal(wc[0].status, IBV_WC_REM_ACCESS_ERR);
    assert_int_equal(a.qp->state, IBV_QPS_ERR);
    assert_int_equal(ibv_dereg_mr(rmr), 0);
    assert_int_equal(ibv_dereg_mr(nmr), 0);
    ep_close(&a);
    ep_close(&b);

    /* past the end of the MR, and a key that names nothing */
    pair_open(&a, &b, &cfg_default);
    rmr = ibv_reg_mr(b.pd, b.buf, 4096, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ);
    assert_non_null(rmr);
    assert_int_equal(post_read(&a, 5, 0, 64, (uintptr_t)b.buf + 4090, rmr->rkey), 0);
    assert_int_equal(poll_both(&a, wc, 1, &b), 1);
    assert_int_equal(wc[0].status, IBV_WC_REM_ACCESS_ERR);
    assert_int_equal(ibv_dereg_mr(rmr), 0);
    ep_close(&a);
    ep_close(&b);
    pair_open(&a, &b, &cfg_default);
    assert_int_equal(post_read(&a, 6, 0, 64, (uintptr_t)b.buf, 0x7777), 0);
    assert_int_equal(poll_both(&a, wc, 1, &b), 1);
    assert_int_equal(wc[0].status, IBV_WC_REM_ACCESS_ERR);
    ep_close(&a);
    ep_close(&b);

    /* a responder QP without IBV_ACCESS_REMOTE_READ takes no reads */
    qp_access = IBV_ACCESS_LOCAL_WRITE;
    pair_open(&a, &b, &cfg_default);
    qp_access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ;
    rmr = ibv_reg_mr(b.pd, b.buf, 4096, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ);
    assert_non_null(rmr);
    assert_int_equal(post_read(&a, 7, 0, 64, (uintptr_t)b.buf, rmr->rkey), 0);
    assert_int_equal(poll_both(&a, wc, 1, &b), 1);
    assert_int_equal(wc[0].status, IBV_WC_REM_INV_REQ_ERR);
    assert_int_equal(ibv_dereg_mr(rmr), 0);
    ep_close(&a);
    ep_close(&b);
}

static void test_destroy_busy(void **state)
{
    struct ep a;
    ep_open(&a, &cfg_default);
    assert_int_equal(ibv_destroy_cq(a.cq), EBUSY);
    assert_int_equal(ibv_dealloc_pd(a.pd), EBUSY);
    assert_int_equal(ibv_destroy_qp(a.qp), 0);
    a.qp = NULL;
    assert_int_equal(ibv_dealloc_pd(a.pd), EBUSY); /* the MR */
    ep_close(&a);
    /* close_device frees what was left */
    ep_open(&a, &cfg_default);
    assert_int_equal(ibv_close_device(a.ctx), 0);
    free(a.buf);
}

static void test_device_and_port(void **state)
{
    unsetenv("VERBS_EMUL_DEVICES");
    int n = -1;
    struct ibv_device **list = ibv_get_device_list(&n);
    assert_non_null(list);
    assert_int_equal(n, 1);
    assert_null(list[1]);
    assert_string_equal(ibv_get_device_name(list[0]), "emul0");
    struct ibv_context *ctx = ibv_open_device(list[0]);
    ibv_free_device_list(list);
    assert_non_null(ctx);
    struct ibv_device_attr da;
    assert_int_equal(ibv_query_device(ctx, &da), 0);
    assert_int_equal(da.max_qp_wr, 16384);
    assert_int_equal(da.max_sge, 30);
    assert_int_equal(da.max_cqe, 4194303);
    assert_int_equal(da.phys_port_cnt, 1);
    assert_true(da.max_mr_size >= MAX_MSG);
    struct ibv_port_attr pa;
    assert_int_equal(ibv_query_port(ctx, 1, &pa), 0);
    assert_int_equal(pa.state, IBV_PORT_ACTIVE);
    assert_int_equal(pa.link_layer, IBV_LINK_LAYER_INFINIBAND);
    assert_int_equal(pa.active_mtu, IBV_MTU_4096);
    assert_int_equal(pa.gid_tbl_len, 1);
    assert_true(pa.lid >= 1 && pa.lid <= 0xbfff);
    assert_int_not_equal(ibv_query_port(ctx, 2, &pa), 0);
    setenv("VERBS_EMUL_PORT_STATE", "down", 1);
    assert_int_equal(ibv_query_port(ctx, 1, &pa), 0);
    assert_int_equal(pa.state, IBV_PORT_DOWN);
    unsetenv("VERBS_EMUL_PORT_STATE");
    assert_string_equal(ibv_wc_status_str(IBV_WC_SUCCESS), "success");
    assert_string_equal(ibv_wc_status_str(IBV_WC_WR_FLUSH_ERR), "work request flushed");
    assert_int_equal(ibv_close_device(ctx), 0);

    setenv("VERBS_EMUL_DEVICES", "0", 1); /* a machine without an HCA */
    list = ibv_get_device_list(&n);
    assert_non_null(list);
    assert_int_equal(n, 0);
    assert_null(list[0]);
    ibv_free_device_list(list);
    setenv("VERBS_EMUL_DEVICES", "3", 1);
    list = ibv_get_device_list(&n);
    assert_int_equal(n, 3);
    assert_string_equal(ibv_get_device_name(list[2]), "emul2");
    ibv_free_device_list(list);
    unsetenv("VERBS_EMUL_DEVICES");
}

static void test_fault_injection(void **state)
{
    struct ep a;
    int n;
    struct ibv_device **list = ibv_get_device_list(&n);
    assert_int_equal(n, 1);
    setenv("VERBS_EMUL_FAIL", "open_device", 1);
    errno = 0;
    assert_null(ibv_open_device(list[0]));
    assert_int_equal(errno, ENOMEM);
    unsetenv("VERBS_EMUL_FAIL");
    ibv_free_device_list(list);

    ep_open(&a, &cfg_default);
    struct ibv_qp_init_attr ia = {.send_cq = a.cq, .recv_cq = a.cq, .qp_type = IBV_QPT_RC,
                                  .cap = {.max_send_wr = 4, .max_recv_wr = 4,
                                          .max_send_sge = 1, .max_recv_sge = 1}};
    setenv("VERBS_EMUL_FAIL", "create_qp", 1);
    errno = 0;
    assert_null(ibv_create_qp(a.pd, &ia));
    assert_int_equal(errno, ENOMEM);
    setenv("VERBS_EMUL_FAIL", "alloc_pd,create_cq,reg_mr,query_port", 1);
    assert_null(ibv_alloc_pd(a.ctx));
    assert_null(ibv_create_cq(a.ctx, 4, NULL, NULL, 0));
    assert_null(ibv_reg_mr(a.pd, a.buf, 64, IBV_ACCESS_LOCAL_WRITE));
    struct ibv_port_attr pa;
    assert_int_not_equal(ibv_query_port(a.ctx, 1, &pa), 0);
    struct ibv_qp *qp = ibv_create_qp(a.pd, &ia); /* not listed: works */
    assert_non_null(qp);
    assert_int_equal(ibv_destroy_qp(qp), 0);
    setenv("VERBS_EMUL_FAIL", "modify_qp_init", 1);
    assert_int_not_equal(to_init(a.qp), 0);
    setenv("VERBS_EMUL_FAIL", "modify_qp_rtr", 1);
    assert_int_equal(to_init(a.qp), 0);
    assert_int_not_equal(to_rtr(a.qp, a.lid, 2, rtr_mask), 0);
    setenv("VERBS_EMUL_FAIL", "modify_qp_rts", 1);
    assert_int_equal(to_rtr(a.qp, a.lid, 2, rtr_mask), 0);
    assert_int_not_equal(to_rts(a.qp, rts_mask), 0);
    unsetenv("VERBS_EMUL_FAIL");
    assert_int_equal(to_rts(a.qp, rts_mask), 0);
    ep_close(&a);
}

/* ------------------------------------------------------------ completion events */

static const struct cfg cfg_chan = {64, 64, 256, 0, 2 * MAX_MSG + 4096, 1};


/* takes one event, which must be e's CQ's, and acknowledges it */
static void event_take(struct ep *e)
{
    struct ibv_cq *cq = NULL;
    void *cq_ctx = NULL;
    CK(ibv_get_cq_event(e->chan, &cq, &cq_ctx) == 0);
    CK(cq == e->cq);
    CK(cq_ctx == e);
    ibv_ack_cq_events(cq, 1);
}

#define NO_EVENT_MS 100 /* how long "no event" is watched for */

/* a sends one 100-byte message (seed n) when b says n, and says n + 100
 * once its send completion shows the data is in b's socket */
static void events_a(struct ep *e, int sock)
{
    for (uint32_t n = 1; n <= 5; n++) {
        CK(sock_get(sock) == n);
        fill(e->buf, 100, n);
        CK(post_send(e, n, 0, 100, IBV_SEND_SIGNALED) == 0);
        struct ibv_wc wc = poll1(e);
        CK(wc.status == IBV_WC_SUCCESS && wc.wr_id == n);
        sock_put(sock, n + 100);
    }
    CK(sock_get(sock) == 200);
}

static void recv_check(struct ep *e, struct ibv_wc *wc, uint32_t n)
{
    CK(wc->status == IBV_WC_SUCCESS && wc->opcode == IBV_WC_RECV);
    CK(wc->wr_id == n && wc->byte_len == 100);
    CK(check(e->buf + RECV_OFF + n * 128, 100, n) == 0);
}

static void events_b(struct ep *e, int sock)
{
    int fd = e->chan->fd;
    struct ibv_wc wc[4];
    for (uint32_t n = 1; n <= 5; n++) CK(post_recv(e, n, RECV_OFF + n * 128, 128) == 0);

    /* not armed: the message waits in the socket, no event; poll_cq takes
     * it, still no event */
    sock_put(sock, 1);
    CK(sock_get(sock) == 101);
    CK(!poll_in(fd, NO_EVENT_MS));
    CK(poll_n(e, wc, 1) == 1);
    recv_check(e, &wc[0], 1);
    CK(!poll_in(fd, 0));

    /* armed, and b does not poll: the engine receives, the event comes;
     * the CQE is there after it */
    CK(ibv_req_notify_cq(e->cq, 0) == 0);
    sock_put(sock, 2);
    CK(poll_in(fd, DEADLINE_MS));
    event_take(e);
    CK(!poll_in(fd, 0));
    CK(ibv_poll_cq(e->cq, 4, wc) == 1);
    recv_check(e, &wc[0], 2);
    CK(sock_get(sock) == 102);

    /* one event per arming: the CQ is no longer armed, so the next message
     * waits in the socket without an event ... */
    sock_put(sock, 3);
    CK(sock_get(sock) == 103);
    CK(!poll_in(fd, NO_EVENT_MS));
    /* ... until it is armed again: what waits in the socket is received
     * after the arming, so it raises the event */
    CK(ibv_req_notify_cq(e->cq, 0) == 0);
    CK(poll_in(fd, DEADLINE_MS));
    event_take(e);
    CK(ibv_poll_cq(e->cq, 4, wc) == 1);
    recv_check(e, &wc[0], 3);

    /* armed after the CQE is in the CQ (poll_cq with no room takes the
     * datagram into the CQ): no event; polling after arming finds it */
    sock_put(sock, 4);
    CK(sock_get(sock) == 104);
    CK(ibv_poll_cq(e->cq, 0, wc) == 0);
    CK(ibv_req_notify_cq(e->cq, 0) == 0);
    CK(!poll_in(fd, NO_EVENT_MS));
    CK(ibv_poll_cq(e->cq, 4, wc) == 1);
    recv_check(e, &wc[0], 4);
    /* still armed: the next message raises it */
    sock_put(sock, 5);
    CK(poll_in(fd, DEADLINE_MS));
    event_take(e);
    CK(poll_n(e, wc, 1) == 1);
    recv_check(e, &wc[0], 5);
    CK(!poll_in(fd, 0));
    CK(sock_get(sock) == 105);
    sock_put(sock, 200);
}

/* completion events across two processes: the receiver sleeps in poll()
 * on the channel's fd while the sender sends */
static void test_event_recv(void **state)
{
    run_pair(events_a, events_b, &cfg_chan);
}

/* VERBS_EMUL_FAIL=cq_overrun: the next arming puts the CQ into the
 * overrun state, with its event; poll_cq fails from then on, with or
 * without CQEs (the openib plugin's path for a failed poll) */
static void test_cq_overrun_fault(void **state)
{
    struct ep a;
    ep_open(&a, &cfg_chan);
    struct ibv_wc wc[4];
    assert_int_equal(ibv_req_notify_cq(a.cq, 0), 0); /* not set: nothing */
    assert_int_equal(ibv_poll_cq(a.cq, 4, wc), 0);
    assert_false(poll_in(a.chan->fd, 0));
    setenv("VERBS_EMUL_FAIL", "cq_overrun", 1);
    assert_int_equal(ibv_poll_cq(a.cq, 4, wc), 0); /* only an arming looks */
    assert_int_equal(ibv_req_notify_cq(a.cq, 0), 0);
    unsetenv("VERBS_EMUL_FAIL");
    assert_true(poll_in(a.chan->fd, 0));
    event_take(&a);
    assert_int_equal(ibv_poll_cq(a.cq, 4, wc), -1);
    assert_int_equal(ibv_poll_cq(a.cq, 4, wc), -1);
    ep_close(&a);
}

/* a send completion that the engine makes raises the event */
static void test_event_send_engine(void **state)
{
    struct ep a, b;
    ep_open(&a, &cfg_chan);
    ep_open(&b, &cfg_default);
    ep_connect(&a, b.lid, b.qp->qp_num);
    ep_connect(&b, a.lid, a.qp->qp_num);
    for (unsigned i = 0; i < 30; i++)
        assert_int_equal(post_send(&a, i, 0, 16384, IBV_SEND_SIGNALED), 0);
    /* b receives nothing: b's socket is full, the rest waits at a */
    struct ibv_wc wc[30];
    int k = 0, r;
    while ((r = ibv_poll_cq(a.cq, 30 - k, wc + k)) > 0) k += r;
    assert_int_equal(r, 0);
    assert_true(k < 30);
    assert_int_equal(ibv_req_notify_cq(a.cq, 0), 0);
    assert_false(poll_in(a.chan->fd, NO_EVENT_MS));
    /* b posts its receives (and takes what is in its socket): a's engine
     * sends on, and its first completion raises a's event; a calls no
     * verbs until then */
    for (unsigned i = 0; i < 30; i++)
        assert_int_equal(post_recv(&b, i, RECV_OFF + i * 16384, 16384), 0);
    assert_true(poll_in(a.chan->fd, DEADLINE_MS));
    event_take(&a);
    assert_false(poll_in(a.chan->fd, 0));
    struct ibv_wc bw[30];
    assert_int_equal(poll_n(&b, bw, 30), 30);
    assert_int_equal(poll_n(&a, wc + k, 30 - k), 30 - k);
    for (unsigned i = 0; i < 30; i++) {
        assert_int_equal(wc[i].status, IBV_WC_SUCCESS);
        assert_int_equal(wc[i].wr_id, i);
        assert_int_equal(bw[i].wr_id, i);
    }
    ep_close(&a);
    ep_close(&b);
}

struct getter {
    struct ibv_comp_channel *chan;
    struct ibv_cq *cq;
    void *ctx;
    int ret;
    int done[2]; /* a pipe: written when ibv_get_cq_event returned */
};

static void *getter_run(void *arg)
{
    struct getter *g = arg;
    g->ret = ibv_get_cq_event(g->chan, &g->cq, &g->ctx);
    CK(write(g->done[1], "", 1) == 1);
    return NULL;
}

/* O_NONBLOCK on the fd, a blocking ibv_get_cq_event, arming twice */
static void test_event_blocking(void **state)
{
    struct ep a, b;
    ep_open(&a, &cfg_default);
    ep_open(&b, &cfg_chan);
    ep_connect(&a, b.lid, b.qp->qp_num);
    ep_connect(&b, a.lid, a.qp->qp_num);
    int fd = b.chan->fd;
    int fl = fcntl(fd, F_GETFL);
    assert_true(fl >= 0);
    assert_false(fl & O_NONBLOCK); /* blocking, as created */
    assert_true(fcntl(fd, F_GETFD) & FD_CLOEXEC);
    assert_int_equal(fcntl(fd, F_SETFL, fl | O_NONBLOCK), 0);
    struct ibv_cq *cq;
    void *ctx;
    errno = 0;
    assert_int_equal(ibv_get_cq_event(b.chan, &cq, &ctx), -1);
    assert_int_equal(errno, EAGAIN);
    assert_int_equal(fcntl(fd, F_SETFL, fl), 0);

    assert_int_equal(post_recv(&b, 1, RECV_OFF, 64), 0);
    assert_int_equal(ibv_req_notify_cq(b.cq, 0), 0);
    assert_int_equal(ibv_req_notify_cq(b.cq, 1), 0); /* solicited_only: as 0 */
    struct getter g = {.chan = b.chan, .ret = -2};
    assert_int_equal(pipe2(g.done, O_CLOEXEC), 0);
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, getter_run, &g), 0);
    assert_int_equal(post_send(&a, 1, 0, 64, IBV_SEND_SIGNALED), 0);
    /* bounded: the thread has returned before it is joined */
    assert_true(poll_in(g.done[0], DEADLINE_MS));
    assert_int_equal(pthread_join(t, NULL), 0);
    close(g.done[0]);
    close(g.done[1]);
    assert_int_equal(g.ret, 0);
    assert_ptr_equal(g.cq, b.cq);
    assert_ptr_equal(g.ctx, &b);
    ibv_ack_cq_events(g.cq, 1);
    assert_false(poll_in(fd, 0)); /* armed twice, one event */
    struct ibv_wc wc;
    assert_int_equal(ibv_poll_cq(b.cq, 1, &wc), 1);
    assert_int_equal(wc.status, IBV_WC_SUCCESS);
    assert_int_equal(wc.wr_id, 1);
    assert_int_equal(poll1(&a).status, IBV_WC_SUCCESS);
    /* a second message, not armed: no event */
    assert_int_equal(post_recv(&b, 2, RECV_OFF, 64), 0);
    assert_int_equal(post_send(&a, 2, 0, 64, IBV_SEND_SIGNALED), 0);
    assert_int_equal(poll1(&a).status, IBV_WC_SUCCESS);
    assert_false(poll_in(fd, NO_EVENT_MS));
    assert_int_equal(poll1(&b).wr_id, 2);
    ep_close(&a);
    ep_close(&b);
}

/* events and the order of the destroy calls */
static void test_event_destroy(void **state)
{
    struct ep a, b;
    struct ibv_cq *cq;
    void *ctx;

    /* a channel with a CQ bound; a CQ with an event taken, not acked */
    pair_open(&a, &b, &cfg_chan);
    int fd = b.chan->fd;
    assert_int_equal(ibv_destroy_comp_channel(b.chan), EBUSY);
    assert_int_equal(post_recv(&b, 1, RECV_OFF, 64), 0);
    assert_int_equal(ibv_req_notify_cq(b.cq, 0), 0);
    assert_int_equal(post_send(&a, 1, 0, 64, IBV_SEND_SIGNALED), 0);
    assert_true(poll_in(fd, DEADLINE_MS));
    assert_int_equal(ibv_get_cq_event(b.chan, &cq, &ctx), 0);
    assert_ptr_equal(cq, b.cq);
    assert_int_equal(ibv_destroy_qp(b.qp), 0);
    b.qp = NULL;
    assert_int_equal(ibv_destroy_cq(b.cq), EBUSY); /* not acknowledged */
    ibv_ack_cq_events(b.cq, 1);
    assert_int_equal(b.cq->comp_events_completed, 1);
    assert_int_equal(ibv_destroy_cq(b.cq), 0);
    b.cq = NULL;
    ep_close(&b); /* destroys the channel */
    ep_close(&a);

    /* an event queued and not taken is dropped with its CQ */
    pair_open(&a, &b, &cfg_chan);
    fd = b.chan->fd;
    assert_int_equal(post_recv(&b, 1, RECV_OFF, 64), 0);
    assert_int_equal(ibv_req_notify_cq(b.cq, 0), 0);
    assert_int_equal(post_send(&a, 1, 0, 64, IBV_SEND_SIGNALED), 0);
    assert_true(poll_in(fd, DEADLINE_MS));
    assert_int_equal(ibv_destroy_qp(b.qp), 0);
    b.qp = NULL;
    assert_int_equal(ibv_destroy_cq(b.cq), 0);
    b.cq = NULL;
    assert_false(poll_in(fd, 0));
    assert_int_equal(fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK), 0);
    assert_int_equal(ibv_get_cq_event(b.chan, &cq, &ctx), -1);
    assert_int_equal(errno, EAGAIN);
    ep_close(&b);
    ep_close(&a);

    /* a QP destroyed while the engine watches its socket (receive CQ
     * armed): its name is gone when destroy_qp returns, so the peer's
     * send fails */
    pair_open(&a, &b, &cfg_chan);
    assert_int_equal(post_recv(&b, 1, RECV_OFF, 64), 0);
    assert_int_equal(ibv_req_notify_cq(b.cq, 0), 0);
    assert_int_equal(ibv_destroy_qp(b.qp), 0);
    b.qp = NULL;
    assert_int_equal(post_send(&a, 1, 0, 64, IBV_SEND_SIGNALED), 0);
    assert_int_equal(poll1(&a).status, IBV_WC_RETRY_EXC_ERR);
    ep_close(&b);
    ep_close(&a);

    /* arming a CQ without a channel: 0, and no event anywhere */
    ep_open(&a, &cfg_default);
    assert_int_equal(ibv_req_notify_cq(a.cq, 0), 0);
    ep_close(&a);
}

/* several CQs on one channel: each event names its CQ; two CQEs on one
 * armed CQ make one event */
static void test_event_two_cqs(void **state)
{
    struct ep a, b, c;
    pair_open(&a, &b, &cfg_default);
    ep_open(&c, &cfg_default);
    struct ibv_comp_channel *ch = ibv_create_comp_channel(b.ctx);
    assert_non_null(ch);
    int tag1, tag2;
    struct ibv_cq *cq1 = ibv_create_cq(b.ctx, 16, &tag1, ch, 0);
    struct ibv_cq *cq2 = ibv_create_cq(b.ctx, 16, &tag2, ch, 0);
    assert_non_null(cq1);
    assert_non_null(cq2);
    /* b2: a second QP of b's context, send CQ cq1, receive CQ cq2, to c */
    struct ibv_qp_init_attr ia = {.send_cq = cq1, .recv_cq = cq2, .qp_type = IBV_QPT_RC,
                                  .cap = {.max_send_wr = 8, .max_recv_wr = 8,
                                          .max_send_sge = 1, .max_recv_sge = 1}};
    struct ep b2 = b;
    b2.qp = ibv_create_qp(b.pd, &ia);
    assert_non_null(b2.qp);
    ep_connect(&b2, c.lid, c.qp->qp_num);
    ep_connect(&c, b.lid, b2.qp->qp_num);
    assert_int_equal(ibv_req_notify_cq(cq1, 0), 0);
    assert_int_equal(ibv_req_notify_cq(cq2, 0), 0);
    assert_int_equal(post_recv(&b2, 7, RECV_OFF, 64), 0);
    assert_int_equal(post_recv(&b2, 8, RECV_OFF + 64, 64), 0);
    assert_int_equal(post_send(&c, 1, 0, 32, IBV_SEND_SIGNALED), 0);
    assert_int_equal(post_send(&c, 2, 0, 32, IBV_SEND_SIGNALED), 0);
    assert_true(poll_in(ch->fd, DEADLINE_MS));
    struct ibv_cq *cq;
    void *ctx;
    assert_int_equal(ibv_get_cq_event(ch, &cq, &ctx), 0);
    assert_ptr_equal(cq, cq2);
    assert_ptr_equal(ctx, &tag2);
    assert_false(poll_in(ch->fd, 0));
    /* the send completion on cq1 (the fast path of post_send) */
    assert_int_equal(post_recv(&c, 1, RECV_OFF, 64), 0);
    assert_int_equal(post_send(&b2, 3, 0, 32, IBV_SEND_SIGNALED), 0);
    assert_true(poll_in(ch->fd, 0));
    assert_int_equal(ibv_get_cq_event(ch, &cq, &ctx), 0);
    assert_ptr_equal(cq, cq1);
    assert_ptr_equal(ctx, &tag1);
    ibv_ack_cq_events(cq2, 1);
    ibv_ack_cq_events(cq1, 1);
    struct ibv_wc wc[2];
    /* the second message was received with the first, or waits in the
     * socket and poll_cq takes it */
    assert_int_equal(ibv_poll_cq(cq2, 2, wc), 2);
    assert_int_equal(wc[0].wr_id, 7);
    assert_int_equal(wc[1].wr_id, 8);
    assert_int_equal(ibv_poll_cq(cq1, 2, wc), 1);
    assert_int_equal(wc[0].wr_id, 3);
    assert_int_equal(ibv_destroy_qp(b2.qp), 0);
    assert_int_equal(ibv_destroy_comp_channel(ch), EBUSY);
    assert_int_equal(ibv_destroy_cq(cq1), 0);
    assert_int_equal(ibv_destroy_comp_channel(ch), EBUSY);
    assert_int_equal(ibv_destroy_cq(cq2), 0);
    assert_int_equal(ibv_destroy_comp_channel(ch), 0);
    ep_close(&a);
    ep_close(&b);
    ep_close(&c);
}

int main(void)
{
    unsetenv("VERBS_EMUL_FAIL");
    unsetenv("VERBS_EMUL_DEVICES");
    unsetenv("VERBS_EMUL_PORT_STATE");
    unsetenv("VERBS_EMUL_CORRUPT");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pingpong),
        cmocka_unit_test(test_inorder_1000),
        cmocka_unit_test(test_send_with_imm),
        cmocka_unit_test(test_rnr_hold),
        cmocka_unit_test(test_loc_len_err),
        cmocka_unit_test(test_peer_destroyed),
        cmocka_unit_test(test_engine_progress),
        cmocka_unit_test(test_engine_teardown),
        cmocka_unit_test(test_wire_corrupt),
        cmocka_unit_test(test_modify_mask_einval),
        cmocka_unit_test(test_post_in_wrong_state),
        cmocka_unit_test(test_too_many_wrs),
        cmocka_unit_test(test_unsignaled),
        cmocka_unit_test(test_bad_lkey),
        cmocka_unit_test(test_modify_err_flushes),
        cmocka_unit_test(test_foreign_dropped),
        cmocka_unit_test(test_multi_sge),
        cmocka_unit_test(test_global_route),
        cmocka_unit_test(test_cq_overrun),
        cmocka_unit_test(test_cq_overrun_fault),
        cmocka_unit_test(test_cq_resize),
        cmocka_unit_test(test_shared_cq),
        cmocka_unit_test(test_rdma_read),
        cmocka_unit_test(test_destroy_busy),
        cmocka_unit_test(test_device_and_port),
        cmocka_unit_test(test_fault_injection),
        cmocka_unit_test(test_event_recv),
        cmocka_unit_test(test_event_send_engine),
        cmocka_unit_test(test_event_blocking),
        cmocka_unit_test(test_event_destroy),
        cmocka_unit_test(test_event_two_cqs),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
