/*
 * emul_qp.c - the software HCA's RC queue pairs: a QP is a unix datagram
 * socket with an abstract name made of (uid, lid, qp_num); a send WR travels
 * as one datagram per VEMUL_FRAG bytes to the socket the RTR transition
 * named, through a second socket connected to it.
 *
 * Sending: post_send sends at once when no older WR of the QP waits. A WR
 * that meets a full peer queue (EAGAIN) waits in the send queue, and the
 * context's engine thread sends it, and those behind it, as soon as the
 * socket is writable, whether or not the application calls in (an HCA
 * does not wait for its host either). Receiving happens in poll_cq and
 * post_recv, and in the engine thread for a QP whose receive CQ is armed
 * (req_notify_cq), so that a message raises the completion event while
 * nobody polls.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/uio.h>
#include <unistd.h>

#include "emul_priv.h"
#include "verbs_emul.h"

/* the QP's socket name; rd: that of its RDMA read requests */
static socklen_t vemul_addr(struct sockaddr_un *sa, uint16_t lid, uint32_t qpn, int rd)
{
    memset(sa, 0, sizeof(*sa));
    sa->sun_family = AF_UNIX;
    /* abstract name: a leading NUL, no terminating one */
    int n = snprintf(sa->sun_path + 1, sizeof(sa->sun_path) - 1, "verbs-emul.%u.%u.%u%s",
                     (unsigned)getuid(), (unsigned)lid, (unsigned)qpn, rd ? ".r" : "");
    return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n);
}

static unsigned vemul_sq_size(const struct vemul_qp *q)
{
    return q->cap.max_send_wr ? q->cap.max_send_wr : 1;
}

static unsigned vemul_rq_size(const struct vemul_qp *q)
{
    return q->cap.max_recv_wr ? q->cap.max_recv_wr : 1;
}

/* ------------------------------------------------------------ completions */

static void vemul_send_cqe(struct vemul_qp *q, const struct vemul_swqe *e,
                           enum ibv_wc_status status)
{
    struct ibv_wc wc;
    memset(&wc, 0, sizeof(wc));
    wc.wr_id = e->wr_id;
    wc.status = status;
    wc.opcode = e->opcode == VEMUL_OP_READ_REQ ? IBV_WC_RDMA_READ : IBV_WC_SEND;
    wc.byte_len = status == IBV_WC_SUCCESS ? e->post_len : 0;
    wc.qp_num = q->qp.qp_num;
    vemul_cq_push((struct vemul_cq *)q->qp.send_cq, &wc);
}

/* completes the oldest receive WQE */
static void vemul_recv_done(struct vemul_qp *q, enum ibv_wc_status status, uint32_t len,
                            int with_imm, uint32_t imm)
{
    struct vemul_rwqe *w = &q->rq[q->rq_head];
    struct ibv_wc wc;
    memset(&wc, 0, sizeof(wc));
    wc.wr_id = w->wr_id;
    wc.status = status;
    wc.opcode = IBV_WC_RECV;
    wc.byte_len = len;
    wc.qp_num = q->qp.qp_num;
    if (status == IBV_WC_SUCCESS) {
        wc.src_qp = q->dqpn;
        wc.slid = q->dlid;
        if (with_imm) {
            wc.wc_flags = IBV_WC_WITH_IMM;
            wc.imm_data = imm;
        }
    }
    vemul_cq_push((struct vemul_cq *)q->qp.recv_cq, &wc);
    if (w->sges != &w->sge1) free(w->sges);
    q->rq_head = (q->rq_head + 1) % vemul_rq_size(q);
    q->rq_count--;
}

/* tx_blocked, counted per context so that poll_cq looks for blocked QPs
 * only while there are any */
static void vemul_set_tx_blocked(struct vemul_qp *q, int blocked)
{
    if (q->tx_blocked == blocked) return;
    q->tx_blocked = blocked;
    if (blocked)
        vemul_ctx(q->qp.context)->nblocked++;
    else
        vemul_ctx(q->qp.context)->nblocked--;
}

static void vemul_swqe_free(struct vemul_swqe *e)
{
    free(e->data);
    e->data = NULL;
    if (e->rd.sges && e->rd.sges != &e->rd.sge1) free(e->rd.sges);
    e->rd.sges = NULL;
}

/* Drops every outstanding WR; with cqe, each completes with FLUSH_ERR
 * (sent unsignaled ones excepted: they were done). */
static void vemul_drop_all(struct vemul_qp *q, int cqe)
{
    unsigned n = vemul_sq_size(q);
    for (unsigned i = 0; i < q->sq_count; i++) {
        struct vemul_swqe *e = &q->sq[(q->sq_head + i) % n];
        if (cqe && i >= q->sq_done) vemul_send_cqe(q, e, IBV_WC_WR_FLUSH_ERR);
        vemul_swqe_free(e);
    }
    q->resp_active = 0;
    q->sq_head = q->sq_count = q->sq_done = 0;
    vemul_set_tx_blocked(q, 0);
    while (q->rq_count) {
        if (cqe) {
            vemul_recv_done(q, IBV_WC_WR_FLUSH_ERR, 0, 0, 0);
        } else {
            struct vemul_rwqe *w = &q->rq[q->rq_head];
            if (w->sges != &w->sge1) free(w->sges);
            q->rq_head = (q->rq_head + 1) % vemul_rq_size(q);
            q->rq_count--;
        }
    }
    q->rq_head = 0;
    q->rx_active = 0;
}

static void vemul_enter_err(struct vemul_qp *q)
{
    q->qp.state = IBV_QPS_ERR;
    vemul_drop_all(q, 1);
}

/* the first unsent WR fails with status; the QP goes to ERR */
static void vemul_send_fail(struct vemul_qp *q, enum ibv_wc_status status)
{
    unsigned n = vemul_sq_size(q);
    struct vemul_swqe *e = &q->sq[(q->sq_head + q->sq_done) % n];
    vemul_send_cqe(q, e, status);
    vemul_swqe_free(e);
    q->sq_head = (q->sq_head + q->sq_done + 1) % n;
    q->sq_count -= q->sq_done + 1;
    q->sq_done = 0;
    vemul_enter_err(q);
}

/* ------------------------------------------------------------ progress */

/* wakes the engine thread: it looks again at which QPs wait */
static void vemul_kick(struct vemul_context *vc)
{
    uint64_t one = 1;
    while (write(vc->wake_fd, &one, sizeof(one)) < 0 && errno == EINTR) {
    }
}

/* a sending socket (*fd, -1: none yet) connected to the name to (lazily,
 * once the peer exists): 0 or an errno */
static int vemul_sock_connect(int *fd, int *connected, const struct sockaddr_un *to,
                              socklen_t len)
{
    if (*connected) return 0;
    if (*fd < 0) {
        *fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (*fd < 0) return errno;
    }
    while (connect(*fd, (const struct sockaddr *)to, len) < 0)
        if (errno != EINTR) return errno;
    *connected = 1;
    return 0;
}

static void vemul_sock_close(int *fd, int *connected)
{
    if (*fd >= 0) close(*fd);
    *fd = -1;
    *connected = 0;
}

static void vemul_tx_close(struct vemul_qp *q)
{
    vemul_sock_close(&q->txfd, &q->tx_connected);
}

/* connects the send socket to the peer's; 0 or an errno */
static int vemul_tx_connect(struct vemul_qp *q)
{
    return vemul_sock_connect(&q->txfd, &q->tx_connected, &q->peer, q->peer_len);
}

static enum ibv_wc_status vemul_tx_status(int err)
{
    /* the peer QP is gone (destroyed, or its process died) */
    return err == ECONNREFUSED || err == ENOENT ? IBV_WC_RETRY_EXC_ERR : IBV_WC_GENERAL_ERR;
}

/* one datagram on the send socket: 0, EAGAIN (the peer's queue or ours is
 * full), or another errno */
static int vemul_datagram(struct vemul_qp *q, int fd, struct vemul_hdr *h, const void *data,
                          uint32_t flen)
{
    h->magic = VEMUL_MAGIC;
    h->version = VEMUL_VERSION;
    h->src_lid = vemul_ctx(q->qp.context)->lid;
    h->src_qpn = q->qp.qp_num;
    struct iovec iov[2] = {{h, sizeof(*h)}, {(void *)data, flen}};
    struct msghdr m;
    memset(&m, 0, sizeof(m));
    m.msg_iov = iov;
    m.msg_iovlen = flen ? 2 : 1;
    for (;;) {
        if (sendmsg(fd, &m, MSG_DONTWAIT | MSG_NOSIGNAL) >= 0) return 0;
        if (errno == EINTR) continue;
        if (errno == EWOULDBLOCK || errno == ENOBUFS) return EAGAIN;
        return errno;
    }
}

/* the send socket is full: the engine goes on when it has room */
static void vemul_tx_wait(struct vemul_qp *q)
{
    if (!q->tx_blocked) {
        vemul_set_tx_blocked(q, 1);
        vemul_kick(vemul_ctx(q->qp.context));
    }
}

/* connects the read socket's sender to the peer's read socket; 0 or an
 * errno (RDMA read requests and responses go there: they pass SENDs that
 * wait for a receive, as on an HCA) */
static int vemul_rd_connect(struct vemul_qp *q)
{
    return vemul_sock_connect(&q->rdtx, &q->rd_connected, &q->peer_rd, q->peer_rd_len);
}

static void vemul_rd_close(struct vemul_qp *q)
{
    vemul_sock_close(&q->rdtx, &q->rd_connected);
    q->rd_blocked = 0;
}

/* the peer's read socket is full: the engine goes on when it has room */
static void vemul_rd_wait(struct vemul_qp *q)
{
    if (!q->rd_blocked) {
        q->rd_blocked = 1;
        vemul_kick(vemul_ctx(q->qp.context));
    }
}

/* Sends what is left of the RDMA read response we owe, read from our
 * memory as it goes. 0 when done (or the requester is gone), EAGAIN. */
static int vemul_send_response(struct vemul_qp *q)
{
    while (q->resp_active) {
        if (vemul_rd_connect(q)) break; /* the requester is gone */
        uint32_t flen = q->resp_err ? 0 : q->resp_len - q->resp_off;
        if (flen > VEMUL_FRAG) flen = VEMUL_FRAG;
        struct vemul_hdr h;
        memset(&h, 0, sizeof(h));
        h.opcode = VEMUL_OP_READ_RESP;
        h.imm = q->resp_err;
        h.total_len = q->resp_err ? 0 : q->resp_len;
        h.frag_off = q->resp_off;
        int err = vemul_datagram(q, q->rdtx, &h,
                                 (const uint8_t *)(uintptr_t)q->resp_raddr + q->resp_off, flen);
        if (err == EAGAIN) return EAGAIN;
        if (err) break;
        q->resp_off += flen;
        if (q->resp_err || q->resp_off == q->resp_len) break;
    }
    q->resp_active = 0;
    return 0;
}

/* e's RDMA read request, to the peer's read socket: 0, EAGAIN or an errno */
static int vemul_read_send_request(struct vemul_qp *q, struct vemul_swqe *e)
{
    int err = vemul_rd_connect(q);
    if (err) return err;
    struct vemul_hdr h;
    memset(&h, 0, sizeof(h));
    h.opcode = VEMUL_OP_READ_REQ;
    h.total_len = e->len; /* sizeof(struct vemul_read_req), unless damaged on purpose */
    uint32_t flen = e->len < VEMUL_FRAG ? e->len : VEMUL_FRAG;
    return vemul_datagram(q, q->rdtx, &h, e->data, flen);
}

/* e (the oldest unsent WR) is done: its completion, if signaled, frees
 * its slot and those of the unsignaled WRs before it */
static void vemul_sq_complete(struct vemul_qp *q, struct vemul_swqe *e)
{
    unsigned n = vemul_sq_size(q);
    vemul_swqe_free(e);
    if (e->signaled) {
        vemul_send_cqe(q, e, IBV_WC_SUCCESS);
        q->sq_head = (q->sq_head + q->sq_done + 1) % n;
        q->sq_count -= q->sq_done + 1;
        q->sq_done = 0;
    } else {
        q->sq_done++;
    }
}

/* Sends the read response we owe, then the unsent WRs in order until all
 * are sent, the peer's queue is full (then the QP is tx_blocked and the
 * engine thread carries on) or an RDMA read waits for its response. */
static void vemul_progress_send(struct vemul_qp *q)
{
    unsigned n = vemul_sq_size(q);
    if (vemul_send_response(q) == EAGAIN) vemul_rd_wait(q);
    while (q->qp.state == IBV_QPS_RTS && q->sq_done < q->sq_count) {
        struct vemul_swqe *e = &q->sq[(q->sq_head + q->sq_done) % n];
        if (e->status != IBV_WC_SUCCESS) {
            vemul_send_fail(q, e->status);
            return;
        }
        if (e->opcode == VEMUL_OP_READ_REQ) {
            if (e->req_sent) break; /* awaits its response */
            int err = vemul_read_send_request(q, e);
            if (err == EAGAIN) { /* the engine sends it when there is room */
                vemul_rd_wait(q);
                break;
            }
            if (err) {
                vemul_send_fail(q, vemul_tx_status(err));
                return;
            }
            free(e->data);
            e->data = NULL;
            e->req_sent = 1;
            break;
        }
        int err = vemul_tx_connect(q);
        if (err) {
            vemul_send_fail(q, vemul_tx_status(err));
            return;
        }
        do { /* one datagram per fragment; at least one (zero-length SEND) */
            uint32_t flen = e->len - e->sent_off;
            if (flen > VEMUL_FRAG) flen = VEMUL_FRAG;
            struct vemul_hdr h;
            memset(&h, 0, sizeof(h));
            h.opcode = e->opcode;
            h.imm = e->imm;
            h.total_len = e->len;
            h.frag_off = e->sent_off;
            err = vemul_datagram(q, q->txfd, &h, e->data ? e->data + e->sent_off : NULL, flen);
            if (err == EAGAIN) {
                /* the peer's queue (or our send buffer) is full: the
                 * engine sends on, in order, when there is room */
                vemul_tx_wait(q);
                return;
            }
            if (err) {
                vemul_send_fail(q, vemul_tx_status(err));
                return;
            }
            e->sent_off += flen;
        } while (e->sent_off < e->len);
        vemul_sq_complete(q, e);
    }
    vemul_set_tx_blocked(q, 0);
}

/* ------------------------------------------------------------ the engine */

static void vemul_progress_recv(struct vemul_qp *q);
static void vemul_rd_input(struct vemul_qp *q);

/* The engine answers q's RDMA reads from RTR on (its read socket). */
static int vemul_rd_watch(const struct vemul_qp *q)
{
    return q->rdfd >= 0 && (q->qp.state == IBV_QPS_RTR || q->qp.state == IBV_QPS_RTS);
}

/* The engine receives for q: its receive CQ is armed and has a channel,
 * and q is in RTR or RTS with a receive posted (without one, datagrams
 * wait in the socket: RNR). */
static int vemul_rx_watch(const struct vemul_qp *q)
{
    const struct vemul_cq *c = (const struct vemul_cq *)q->qp.recv_cq;
    return c->armed && c->cq.channel && !c->overrun &&
           (q->qp.state == IBV_QPS_RTR || q->qp.state == IBV_QPS_RTS) &&
           (q->rx_active || q->rq_count);
}

void vemul_rx_watch_kick(struct vemul_qp *q)
{
    if (!q->rx_polled && vemul_rx_watch(q)) vemul_kick(vemul_ctx(q->qp.context));
}

/* The HCA engine: one thread per context. It sleeps in poll() on wake_fd,
 * on the send sockets of the tx_blocked QPs (POLLOUT) and on the receive
 * sockets of the QPs that vemul_rx_watch names (POLLIN), without the lock;
 * with the lock it sends what now fits and receives what came. It reaches
 * QPs only through vc->qps under the lock, so a QP that destroy_qp
 * unlinked is never touched again. destroy_qp waits for the end of a
 * poll() that holds the QP's sockets (vc->round) before it closes them. */
static void *vemul_engine(void *arg)
{
    struct vemul_context *vc = arg;
    struct pollfd *fds = NULL;
    struct vemul_qp **rd_of = NULL; /* fds[i] is rd_of[i]'s read socket, or NULL */
    size_t cap = 0;
    pthread_mutex_lock(&vc->lock);
    while (!vc->stop) {
        size_t want = 1;
        for (struct vemul_qp *q = vc->qps; q; q = q->next) {
            if (q->rd_blocked) { /* a read response or request waits for room */
                q->rd_blocked = 0;
                if (vemul_send_response(q) == EAGAIN) q->rd_blocked = 1;
                if (!q->tx_blocked) vemul_progress_send(q);
            }
            if (q->tx_blocked) vemul_progress_send(q);
            if (vemul_rx_watch(q)) vemul_progress_recv(q); /* may raise the event */
            q->tx_polled = q->rx_polled = q->rd_polled = 0;
            if (q->tx_blocked) want++;
            if (vemul_rx_watch(q)) want++;
            if (vemul_rd_watch(q)) want++;
            if (q->rd_blocked) want++;
        }
        int timeout = -1;
        if (want > cap) {
            struct pollfd *f = realloc(fds, want * sizeof(*fds));
            if (f) fds = f;
            struct vemul_qp **r = realloc(rd_of, want * sizeof(*rd_of));
            if (r) rd_of = r;
            if (f && r) cap = want;
            vc->eng_fds   = fds;
            vc->eng_rd_of = rd_of;
        }
        size_t n = 0;
        if (cap) {
            rd_of[n] = NULL;
            fds[n++] = (struct pollfd){.fd = vc->wake_fd, .events = POLLIN};
            for (struct vemul_qp *q = vc->qps; q && n < cap; q = q->next) {
                if (q->tx_blocked) {
                    rd_of[n] = NULL;
                    fds[n++] = (struct pollfd){.fd = q->txfd, .events = POLLOUT};
                    q->tx_polled = 1;
                }
                if (n < cap && vemul_rx_watch(q)) {
                    rd_of[n] = NULL;
                    fds[n++] = (struct pollfd){.fd = q->fd, .events = POLLIN};
                    q->rx_polled = 1;
                }
                if (n < cap && vemul_rd_watch(q)) {
                    rd_of[n] = q;
                    fds[n++] = (struct pollfd){.fd = q->rdfd, .events = POLLIN};
                    q->rd_polled = 1;
                }
                if (n < cap && q->rd_blocked) {
                    rd_of[n] = NULL;
                    fds[n++] = (struct pollfd){.fd = q->rdtx, .events = POLLOUT};
                    q->rd_polled = 1;
                }
            }
        }
        if (n < want) timeout = 1; /* out of memory: look again soon */
        pthread_mutex_unlock(&vc->lock);
        int ready = 0;
        if (n) {
            ready = poll(fds, (nfds_t)n, timeout);
            if (fds[0].revents & POLLIN) {
                uint64_t v;
                while (read(vc->wake_fd, &v, sizeof(v)) < 0 && errno == EINTR) {
                }
            }
        } else {
            struct timespec ts = {0, 1000000};
            nanosleep(&ts, NULL);
        }
        pthread_mutex_lock(&vc->lock);
        /* reads: a QP destroyed meanwhile waits (ibv_destroy_qp) until this
         * round is over, so it is not freed yet */
        for (size_t i = 1; ready > 0 && i < n; i++)
            if (rd_of[i] && (fds[i].revents & POLLIN)) vemul_rd_input(rd_of[i]);
        vc->round++;
        pthread_cond_broadcast(&vc->round_cond);
    }
    vc->eng_fds = vc->eng_rd_of = NULL;
    pthread_mutex_unlock(&vc->lock);
    free(fds);
    free(rd_of);
    return NULL;
}

int vemul_engine_start(struct vemul_context *vc)
{
    vc->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (vc->wake_fd < 0) return errno;
    pthread_cond_init(&vc->round_cond, NULL);
    /* every signal stays with the application's threads */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int err = pthread_create(&vc->engine, NULL, vemul_engine, vc);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (err) {
        pthread_cond_destroy(&vc->round_cond);
        close(vc->wake_fd);
        return err;
    }
    pthread_setname_np(vc->engine, "vemul-engine");
    return 0;
}

void vemul_engine_stop(struct vemul_context *vc)
{
    pthread_mutex_lock(&vc->lock);
    vc->stop = 1;
    vemul_kick(vc);
    pthread_mutex_unlock(&vc->lock);
    pthread_join(vc->engine, NULL);
    pthread_cond_destroy(&vc->round_cond);
    close(vc->wake_fd);
}

static void vemul_discard_incoming(struct vemul_qp *q)
{
    uint8_t b;
    for (int i = 0; i < 4096; i++)
        if (recv(q->fd, &b, sizeof(b), MSG_DONTWAIT) < 0 && errno != EINTR) break;
}

/* 0 when the SGEs of w that hold len bytes name registered, locally
 * writable memory */
static int vemul_rwqe_ok(struct vemul_qp *q, const struct vemul_rwqe *w, uint32_t len)
{
    struct vemul_context *vc = vemul_ctx(q->qp.context);
    uint64_t covered = 0;
    for (int i = 0; i < w->num_sge && covered < len; i++) {
        if (w->sges[i].length &&
            vemul_sge_ok(vc, q->qp.pd, &w->sges[i], IBV_ACCESS_LOCAL_WRITE))
            return -1;
        covered += w->sges[i].length;
    }
    return 0;
}

static uint64_t vemul_rwqe_capacity(const struct vemul_rwqe *w)
{
    uint64_t c = 0;
    for (int i = 0; i < w->num_sge; i++) c += w->sges[i].length;
    return c;
}

static void vemul_scatter(const struct vemul_rwqe *w, uint32_t off, const uint8_t *src,
                          uint32_t len)
{
    for (int i = 0; i < w->num_sge && len; i++) {
        uint32_t l = w->sges[i].length;
        if (off >= l) {
            off -= l;
            continue;
        }
        uint32_t c = l - off < len ? l - off : len;
        memcpy((uint8_t *)(uintptr_t)w->sges[i].addr + off, src, c);
        src += c;
        len -= c;
        off = 0;
    }
}

/* An RDMA read request of the peer: answered from our memory if the key
 * names an MR of the QP's PD that allows remote reads and covers the
 * range, else with a remote access error. */
static void vemul_serve_read(struct vemul_qp *q, const struct vemul_read_req *rr)
{
    struct vemul_context *vc = vemul_ctx(q->qp.context);
    if (vemul_fail("read_exit")) _exit(0); /* a peer that dies with a read in flight */
    if (q->resp_active || (q->qp.state != IBV_QPS_RTR && q->qp.state != IBV_QPS_RTS)) {
        q->dropped++; /* a second one while we answer (never ours), or we cannot */
        return;
    }
    struct ibv_sge sge = {.addr = rr->raddr, .length = rr->len, .lkey = rr->rkey};
    if (!(q->access & IBV_ACCESS_REMOTE_READ) || !q->max_dest_rd)
        q->resp_err = 2; /* the QP takes no reads */
    else
        q->resp_err = rr->len > VEMUL_MAX_MSG ||
                      (rr->len && vemul_sge_ok(vc, q->qp.pd, &sge, IBV_ACCESS_REMOTE_READ));
    q->resp_raddr = rr->raddr;
    q->resp_len = q->resp_err ? 0 : rr->len;
    q->resp_off = 0;
    q->resp_active = 1;
    if (vemul_send_response(q) == EAGAIN) vemul_rd_wait(q);
}

static void vemul_read_response(struct vemul_qp *q, const struct vemul_hdr *h, uint32_t flen);

/* One datagram from fd into h and vc->scratch: 1 (its payload is *flen
 * bytes, it is whole, from the connected peer, of a length its header
 * allows), 0 (none waits), or -1 (one was dropped: garbage, or foreign). */
static int vemul_rx_datagram(struct vemul_qp *q, int fd, struct vemul_hdr *h, uint32_t *flen)
{
    struct vemul_context *vc = vemul_ctx(q->qp.context);
    struct iovec iov[2] = {{h, sizeof(*h)}, {vc->scratch, VEMUL_FRAG}};
    struct msghdr m;
    memset(&m, 0, sizeof(m));
    m.msg_iov = iov;
    m.msg_iovlen = 2;
    ssize_t r;
    while ((r = recvmsg(fd, &m, MSG_DONTWAIT)) < 0)
        if (errno != EINTR) return 0;
    *flen = (uint32_t)((size_t)r - sizeof(*h));
    if ((size_t)r < sizeof(*h) || (m.msg_flags & MSG_TRUNC) || h->magic != VEMUL_MAGIC ||
        h->version != VEMUL_VERSION || h->total_len > VEMUL_MAX_MSG ||
        h->frag_off > h->total_len || *flen > h->total_len - h->frag_off ||
        h->src_lid != q->dlid || h->src_qpn != q->dqpn) {
        q->dropped++;
        return -1;
    }
    return 1;
}

/* What waits in q's read socket (the engine, as an HCA would, whatever the
 * process does): requests of the peer's reads, responses to ours. */
static void vemul_rd_input(struct vemul_qp *q)
{
    struct vemul_context *vc = vemul_ctx(q->qp.context);
    struct vemul_hdr h;
    uint32_t flen;
    int got;
    while ((got = vemul_rx_datagram(q, q->rdfd, &h, &flen)) != 0) {
        if (got < 0) continue;
        if (q->qp.state == IBV_QPS_ERR) {
            q->dropped++; /* we are down */
        } else if (h.opcode == VEMUL_OP_READ_REQ && h.total_len == sizeof(struct vemul_read_req) &&
                   flen == sizeof(struct vemul_read_req)) {
            struct vemul_read_req rr;
            memcpy(&rr, vc->scratch, sizeof(rr));
            vemul_serve_read(q, &rr);
        } else if (h.opcode == VEMUL_OP_READ_RESP) {
            vemul_read_response(q, &h, flen);
        } else {
            q->dropped++;
        }
    }
}

/* A fragment of the response to our oldest unsent WR, an RDMA read whose
 * request went out: scattered into its local SGEs; the last one completes
 * it and lets the WRs behind it go. */
static void vemul_read_response(struct vemul_qp *q, const struct vemul_hdr *h, uint32_t flen)
{
    struct vemul_context *vc = vemul_ctx(q->qp.context);
    struct vemul_swqe *e = q->sq_done < q->sq_count
                               ? &q->sq[(q->sq_head + q->sq_done) % vemul_sq_size(q)]
                               : NULL;
    if (!e || e->opcode != VEMUL_OP_READ_REQ || !e->req_sent) {
        q->dropped++; /* no read waits for it */
        return;
    }
    if (h->imm) { /* the responder refused */
        vemul_send_fail(q, h->imm == 2 ? IBV_WC_REM_INV_REQ_ERR : IBV_WC_REM_ACCESS_ERR);
        return;
    }
    if (h->total_len != e->post_len || h->frag_off != e->rd_off) {
        vemul_send_fail(q, IBV_WC_BAD_RESP_ERR);
        return;
    }
    if (vemul_rwqe_ok(q, &e->rd, e->post_len)) { /* our MR went meanwhile */
        vemul_send_fail(q, IBV_WC_LOC_PROT_ERR);
        return;
    }
    vemul_scatter(&e->rd, e->rd_off, vc->scratch, flen);
    e->rd_off += flen;
    if (e->rd_off < e->post_len) return;
    e->req_sent = 0;
    vemul_sq_complete(q, e);
    if (!q->tx_blocked) vemul_progress_send(q);
}

static void vemul_progress_recv(struct vemul_qp *q)
{
    struct vemul_context *vc = vemul_ctx(q->qp.context);
    if (q->qp.state == IBV_QPS_RESET || q->qp.state == IBV_QPS_INIT)
        return; /* datagrams wait in the socket until RTR */
    for (;;) {
        if (q->qp.state == IBV_QPS_ERR) {
            vemul_discard_incoming(q);
            return;
        }
        /* no receive posted (RNR): the datagram stays in the socket, in
         * order, and the sender's later datagrams wait behind it */
        if (!q->rx_active && !q->rq_count) return;

        struct vemul_hdr h;
        uint32_t flen;
        int got = vemul_rx_datagram(q, q->fd, &h, &flen);
        if (got == 0) return;
        if (got < 0) continue;
        if (h.opcode != VEMUL_OP_SEND && h.opcode != VEMUL_OP_SEND_IMM) {
            q->dropped++; /* garbage */
            continue;
        }
        if (h.frag_off == 0) {
            /* a new message (one cut short before, if any, is abandoned) */
            if (vemul_rwqe_capacity(&q->rq[q->rq_head]) < h.total_len) {
                vemul_recv_done(q, IBV_WC_LOC_LEN_ERR, 0, 0, 0);
                vemul_enter_err(q);
                return;
            }
            q->rx_active = 1;
            q->rx_total = h.total_len;
            q->rx_off = 0;
            q->rx_imm = h.imm;
            q->rx_opcode = h.opcode;
        } else if (!q->rx_active || h.frag_off != q->rx_off) {
            q->dropped++;
            continue;
        }
        struct vemul_rwqe *w = &q->rq[q->rq_head];
        if (vemul_rwqe_ok(q, w, q->rx_total)) {
            q->rx_active = 0;
            vemul_recv_done(q, IBV_WC_LOC_PROT_ERR, 0, 0, 0);
            vemul_enter_err(q);
            return;
        }
        vemul_scatter(w, q->rx_off, vc->scratch, flen);
        q->rx_off += flen;
        if (q->rx_off == q->rx_total) {
            q->rx_active = 0;
            vemul_recv_done(q, IBV_WC_SUCCESS, q->rx_total, q->rx_opcode == VEMUL_OP_SEND_IMM,
                            q->rx_imm);
        }
    }
}

void vemul_qp_progress_rx(struct vemul_qp *q)
{
    vemul_progress_recv(q);
}

void vemul_qp_progress_tx(struct vemul_qp *q)
{
    vemul_progress_send(q);
}

/* ------------------------------------------------------------ create / destroy */

struct ibv_qp *ibv_create_qp(struct ibv_pd *pd, struct ibv_qp_init_attr *attr)
{
    struct vemul_context *vc = vemul_ctx(pd->context);
    if (vemul_fail("create_qp")) {
        errno = ENOMEM;
        return NULL;
    }
    struct ibv_qp_cap *cap = &attr->cap;
    if (attr->qp_type != IBV_QPT_RC || attr->srq || !attr->send_cq || !attr->recv_cq ||
        attr->send_cq->context != pd->context || attr->recv_cq->context != pd->context ||
        cap->max_send_wr > VEMUL_MAX_WR || cap->max_recv_wr > VEMUL_MAX_WR ||
        cap->max_send_sge > VEMUL_MAX_SGE || cap->max_recv_sge > VEMUL_MAX_SGE ||
        cap->max_inline_data > VEMUL_MAX_INLINE) {
        errno = EINVAL;
        return NULL;
    }
    struct vemul_qp *q = calloc(1, sizeof(*q));
    if (!q) {
        errno = ENOMEM;
        return NULL;
    }
    q->fd = -1;
    q->txfd = -1;
    q->rdfd = -1;
    q->rdtx = -1;
    q->cap = *cap;
    if (!q->cap.max_send_sge) q->cap.max_send_sge = 1;
    if (!q->cap.max_recv_sge) q->cap.max_recv_sge = 1;
    q->cap.max_inline_data = VEMUL_MAX_INLINE;
    q->sq = calloc(vemul_sq_size(q), sizeof(*q->sq));
    q->rq = calloc(vemul_rq_size(q), sizeof(*q->rq));
    if (!q->sq || !q->rq) goto err_nomem;

    q->fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (q->fd < 0) goto err_errno;
    uint32_t qpn = 0;
    for (int tries = 0;; tries++) {
        struct sockaddr_un sa;
        qpn = vemul_random() & 0xffffff;
        if (qpn < 2) continue; /* QP0 and QP1 are special */
        socklen_t len = vemul_addr(&sa, vc->lid, qpn, 0);
        if (bind(q->fd, (struct sockaddr *)&sa, len) == 0) break;
        if (errno != EADDRINUSE || tries == 1000) goto err_errno;
    }
    q->rdfd = socket(AF_UNIX, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (q->rdfd < 0) goto err_errno;
    {
        struct sockaddr_un sa;
        socklen_t len = vemul_addr(&sa, vc->lid, qpn, 1);
        if (bind(q->rdfd, (struct sockaddr *)&sa, len) < 0) goto err_errno;
    }

    q->sq_sig_all = attr->sq_sig_all;
    q->qp.context = pd->context;
    q->qp.qp_context = attr->qp_context;
    q->qp.pd = pd;
    q->qp.send_cq = attr->send_cq;
    q->qp.recv_cq = attr->recv_cq;
    q->qp.handle = qpn;
    q->qp.qp_num = qpn;
    q->qp.state = IBV_QPS_RESET;
    q->qp.qp_type = IBV_QPT_RC;
    pthread_mutex_init(&q->qp.mutex, NULL);
    pthread_cond_init(&q->qp.cond, NULL);
    *cap = q->cap;

    pthread_mutex_lock(&vc->lock);
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = q};
    if (epoll_ctl(((struct vemul_cq *)attr->recv_cq)->rx_ep, EPOLL_CTL_ADD, q->fd, &ev) < 0) {
        pthread_mutex_unlock(&vc->lock);
        goto err_errno;
    }
    q->next = vc->qps;
    vc->qps = q;
    vc->nqp++;
    ((struct vemul_cq *)attr->send_cq)->nqp++;
    ((struct vemul_cq *)attr->recv_cq)->nqp++;
    ((struct vemul_pd *)pd)->nqp++;
    pthread_mutex_unlock(&vc->lock);
    return &q->qp;

err_nomem:
    errno = ENOMEM;
err_errno: {
    int e = errno;
    if (q->fd >= 0) close(q->fd);
    if (q->rdfd >= 0) close(q->rdfd);
    free(q->sq);
    free(q->rq);
    free(q);
    errno = e;
    return NULL;
}
}

void vemul_qp_free(struct vemul_qp *q)
{
    vemul_drop_all(q, 0);
    close(q->fd);
    if (q->rdfd >= 0) close(q->rdfd);
    vemul_rd_close(q);
    vemul_tx_close(q);
    pthread_mutex_destroy(&q->qp.mutex);
    pthread_cond_destroy(&q->qp.cond);
    free(q->sq);
    free(q->rq);
    free(q);
}

/* Closes the socket (the peer's sends then fail with RETRY_EXC_ERR); the
 * QP's completions already in its CQs stay there. */
int ibv_destroy_qp(struct ibv_qp *qp)
{
    struct vemul_context *vc = vemul_ctx(qp->context);
    struct vemul_qp *q = (struct vemul_qp *)qp;
    pthread_mutex_lock(&vc->lock);
    struct vemul_qp **pp = &vc->qps;
    while (*pp && *pp != q) pp = &(*pp)->next;
    if (!*pp) {
        pthread_mutex_unlock(&vc->lock);
        return EINVAL;
    }
    *pp = q->next;
    epoll_ctl(((struct vemul_cq *)qp->recv_cq)->rx_ep, EPOLL_CTL_DEL, q->fd, NULL);
    if ((q->tx_polled || q->rx_polled || q->rd_polled) && vc->pid == getpid()) {
        /* the engine's poll() holds the sockets (a closed fd would not end
         * it, and the receive socket's name would stay bound until it
         * ends): wake it and wait until it is out (not in a forked child,
         * which has no engine: README.md, fork) */
        unsigned long r = vc->round;
        vemul_kick(vc);
        while (vc->round == r) pthread_cond_wait(&vc->round_cond, &vc->lock);
    } else if (q->tx_blocked) {
        vemul_kick(vc); /* the engine forgets the QP */
    }
    vemul_set_tx_blocked(q, 0);
    vc->nqp--;
    ((struct vemul_cq *)qp->send_cq)->nqp--;
    ((struct vemul_cq *)qp->recv_cq)->nqp--;
    ((struct vemul_pd *)qp->pd)->nqp--;
    pthread_mutex_unlock(&vc->lock);
    vemul_qp_free(q);
    return 0;
}

/* ------------------------------------------------------------ modify */

#define VEMUL_RTR_REQ                                                                         \
    (IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |                          \
     IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER)
#define VEMUL_RTS_REQ                                                                         \
    (IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |                   \
     IBV_QP_MAX_QP_RD_ATOMIC)

static int vemul_modify(struct vemul_qp *q, struct ibv_qp_attr *a, int mask)
{
    if (!(mask & IBV_QP_STATE)) return EINVAL; /* attribute-only changes: not emulated */
    enum ibv_qp_state cur = q->qp.state, to = a->qp_state;
    if ((mask & IBV_QP_CUR_STATE) && a->cur_qp_state != cur) return EINVAL;
    int req = 0, opt = 0;
    const char *fault = NULL;
    if (to == IBV_QPS_RESET || to == IBV_QPS_ERR) {
        /* from any state, nothing else */
    } else if (cur == IBV_QPS_RESET && to == IBV_QPS_INIT) {
        req = IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;
        fault = "modify_qp_init";
    } else if (cur == IBV_QPS_INIT && to == IBV_QPS_INIT) {
        opt = IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;
    } else if (cur == IBV_QPS_INIT && to == IBV_QPS_RTR) {
        req = VEMUL_RTR_REQ;
        opt = IBV_QP_ALT_PATH | IBV_QP_ACCESS_FLAGS | IBV_QP_PKEY_INDEX;
        fault = "modify_qp_rtr";
    } else if (cur == IBV_QPS_RTR && to == IBV_QPS_RTS) {
        req = VEMUL_RTS_REQ;
        opt = IBV_QP_ALT_PATH | IBV_QP_ACCESS_FLAGS | IBV_QP_MIN_RNR_TIMER |
              IBV_QP_PATH_MIG_STATE;
        fault = "modify_qp_rts";
    } else if (cur == IBV_QPS_RTS && to == IBV_QPS_RTS) {
        opt = IBV_QP_ALT_PATH | IBV_QP_ACCESS_FLAGS | IBV_QP_MIN_RNR_TIMER |
              IBV_QP_PATH_MIG_STATE;
    } else {
        return EINVAL;
    }
    if ((mask & req) != req || (mask & ~(req | opt | IBV_QP_STATE | IBV_QP_CUR_STATE)))
        return EINVAL;
    if (fault && vemul_fail(fault)) return EIO;

    if ((mask & IBV_QP_PORT) && a->port_num != 1) return EINVAL;
    if ((mask & IBV_QP_PKEY_INDEX) && a->pkey_index != 0) return EINVAL;
    if ((mask & IBV_QP_PATH_MTU) && (a->path_mtu < IBV_MTU_256 || a->path_mtu > IBV_MTU_4096))
        return EINVAL;
    if ((mask & IBV_QP_DEST_QPN) && a->dest_qp_num > 0xffffff) return EINVAL;
    if ((mask & IBV_QP_MAX_DEST_RD_ATOMIC) && a->max_dest_rd_atomic > VEMUL_MAX_RD_ATOM)
        return EINVAL;
    if ((mask & IBV_QP_MAX_QP_RD_ATOMIC) && a->max_rd_atomic > VEMUL_MAX_RD_ATOM) return EINVAL;
    if ((mask & IBV_QP_MIN_RNR_TIMER) && a->min_rnr_timer > 31) return EINVAL;
    if ((mask & IBV_QP_TIMEOUT) && a->timeout > 31) return EINVAL;
    if ((mask & IBV_QP_RETRY_CNT) && a->retry_cnt > 7) return EINVAL;
    if ((mask & IBV_QP_RNR_RETRY) && a->rnr_retry > 7) return EINVAL;
    uint16_t dlid = 0;
    if (mask & IBV_QP_AV) {
        dlid = a->ah_attr.is_global ? verbs_emul_lid_of_gid(&a->ah_attr.grh.dgid)
                                    : a->ah_attr.dlid;
        if (!dlid) return EINVAL;
    }

    if (mask & IBV_QP_ACCESS_FLAGS) q->access = a->qp_access_flags;
    if (mask & IBV_QP_MAX_DEST_RD_ATOMIC) q->max_dest_rd = a->max_dest_rd_atomic;

    switch (to) {
    case IBV_QPS_RESET:
        if (q->tx_blocked) vemul_kick(vemul_ctx(q->qp.context));
        vemul_drop_all(q, 0);
        vemul_discard_incoming(q);
        vemul_tx_close(q);
        vemul_rd_close(q);
        q->dlid = 0;
        q->dqpn = 0;
        break;
    case IBV_QPS_ERR:
        if (q->tx_blocked) vemul_kick(vemul_ctx(q->qp.context));
        if (vemul_fail("flush_hold")) { /* flushed late, cleaned out by destroy_qp */
            q->qp.state = IBV_QPS_ERR;
            vemul_drop_all(q, 0);
        } else {
            vemul_enter_err(q);
        }
        break;
    case IBV_QPS_RTR: {
        q->dlid = dlid;
        q->dqpn = a->dest_qp_num;
        q->peer_len = vemul_addr(&q->peer, dlid, a->dest_qp_num, 0);
        q->peer_rd_len = vemul_addr(&q->peer_rd, dlid, a->dest_qp_num, 1);
        vemul_kick(vemul_ctx(q->qp.context)); /* the engine answers its reads from now on */
        vemul_tx_close(q);
        vemul_rd_close(q);
        int err = vemul_tx_connect(q);
        if (err == EMFILE || err == ENFILE || err == ENOMEM || err == ENOBUFS) return err;
        /* a peer that does not exist yet: connected at the first send */
        break;
    }
    default:
        break;
    }
    q->qp.state = to;
    return 0;
}

int ibv_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr, int attr_mask)
{
    struct vemul_context *vc = vemul_ctx(qp->context);
    pthread_mutex_lock(&vc->lock);
    int ret = vemul_modify((struct vemul_qp *)qp, attr, attr_mask);
    vemul_rx_watch_kick((struct vemul_qp *)qp); /* RTR with the receive CQ armed */
    pthread_mutex_unlock(&vc->lock);
    return ret;
}

/* ------------------------------------------------------------ wire faults */

/* VERBS_EMUL_CORRUPT=<nth>:<offset>:<xor>[:<len>] (README.md). Send WRs are
 * counted per process from its start (a forked child starts again at 0),
 * over all contexts and QPs: every WR that post_send takes into a send
 * queue counts. */
struct vemul_corrupt {
    unsigned long nth;
    uint32_t off;
    uint8_t xor_;
    int has_len;
    uint32_t len;
};

static pthread_mutex_t vemul_wire_lock = PTHREAD_MUTEX_INITIALIZER;
static pid_t vemul_wire_pid;
static unsigned long vemul_wire_sends;
static char vemul_wire_bad[128]; /* the malformed value reported last */

static int vemul_field(const char **s, unsigned long long max, unsigned long long *v)
{
    const char *p = *s;
    if (*p < '0' || *p > '9') return -1; /* no sign, no blank, not empty */
    char *end;
    errno = 0;
    unsigned long long x = strtoull(p, &end, 0);
    if (errno || x > max || (*end && *end != ':')) return -1;
    *v = x;
    *s = *end ? end + 1 : end;
    return *end ? 1 : 0; /* 1: more fields follow */
}

static int vemul_corrupt_parse(const char *s, struct vemul_corrupt *c)
{
    static const unsigned long long max[4] = {ULONG_MAX, UINT32_MAX, 255, VEMUL_MAX_MSG};
    unsigned long long v[4];
    int n = 0, more = 1;
    while (more) {
        if (n == 4) return -1;
        more = vemul_field(&s, max[n], &v[n]);
        if (more < 0) return -1;
        n++;
    }
    if (n < 3 || v[0] == 0) return -1;
    c->nth = (unsigned long)v[0];
    c->off = (uint32_t)v[1];
    c->xor_ = (uint8_t)v[2];
    c->has_len = n == 4;
    c->len = n == 4 ? (uint32_t)v[3] : 0;
    return 0;
}

/* counts one send WR; 1 when VERBS_EMUL_CORRUPT names it (c filled) */
static int vemul_wire_count(struct vemul_corrupt *c)
{
    const char *s = getenv("VERBS_EMUL_CORRUPT");
    int hit = 0;
    pthread_mutex_lock(&vemul_wire_lock);
    if (vemul_wire_pid != getpid()) {
        vemul_wire_pid = getpid();
        vemul_wire_sends = 0;
        vemul_wire_bad[0] = '\0';
    }
    unsigned long n = ++vemul_wire_sends;
    if (s && *s) {
        if (vemul_corrupt_parse(s, c) == 0) {
            hit = c->nth == n;
        } else if (strncmp(vemul_wire_bad, s, sizeof(vemul_wire_bad) - 1) != 0) {
            fprintf(stderr,
                    "verbs_emul: VERBS_EMUL_CORRUPT=\"%s\" ignored: "
                    "not <nth>:<offset>:<xor>[:<len>]\n",
                    s);
            snprintf(vemul_wire_bad, sizeof(vemul_wire_bad), "%s", s);
        }
    }
    pthread_mutex_unlock(&vemul_wire_lock);
    return hit;
}

unsigned long verbs_emul_sends_posted(void)
{
    pthread_mutex_lock(&vemul_wire_lock);
    unsigned long n = vemul_wire_pid == getpid() ? vemul_wire_sends : 0;
    pthread_mutex_unlock(&vemul_wire_lock);
    return n;
}

/* the wire copy of e: its length set to len (cut, or extended with zero
 * bytes) if asked, then byte off XORed (if the wire has it) */
static int vemul_corrupt_apply(struct vemul_swqe *e, const struct vemul_corrupt *c)
{
    if (c->has_len && c->len != e->len) {
        uint8_t *d = NULL;
        if (c->len) {
            d = calloc(1, c->len);
            if (!d) return ENOMEM;
            if (e->len) memcpy(d, e->data, e->len < c->len ? e->len : c->len);
        }
        free(e->data);
        e->data = d;
        e->len = c->len;
    }
    if (c->off < e->len) e->data[c->off] ^= c->xor_;
    return 0;
}

/* ------------------------------------------------------------ post */

/* An RDMA read into the local SGEs of wr (len bytes): the wire carries a
 * request (which VEMUL_CORRUPT may change like any send) and the send
 * queue waits for its response. */
static int vemul_post_read(struct vemul_qp *q, struct vemul_swqe *e, const struct ibv_send_wr *wr,
                           uint32_t len)
{
    e->wr_id = wr->wr_id;
    e->opcode = VEMUL_OP_READ_REQ;
    e->signaled = q->sq_sig_all || (wr->send_flags & IBV_SEND_SIGNALED);
    e->status = IBV_WC_SUCCESS;
    e->post_len = len;
    e->raddr = wr->wr.rdma.remote_addr;
    e->rkey = wr->wr.rdma.rkey;
    e->rd.num_sge = wr->num_sge;
    e->rd.sges = &e->rd.sge1;
    if (wr->num_sge > 1) {
        e->rd.sges = malloc((size_t)wr->num_sge * sizeof(*e->rd.sges));
        if (!e->rd.sges) return ENOMEM;
    }
    if (wr->num_sge) memcpy(e->rd.sges, wr->sg_list, (size_t)wr->num_sge * sizeof(*e->rd.sges));
    if (vemul_rwqe_ok(q, &e->rd, len)) e->status = IBV_WC_LOC_PROT_ERR; /* when it comes up */
    struct vemul_read_req rr = {.raddr = e->raddr, .rkey = e->rkey, .len = len};
    e->len = sizeof(rr);
    e->data = malloc(sizeof(rr));
    if (!e->data) {
        vemul_swqe_free(e);
        return ENOMEM;
    }
    memcpy(e->data, &rr, sizeof(rr));
    struct vemul_corrupt c;
    if (vemul_wire_count(&c) && e->status == IBV_WC_SUCCESS) {
        int err = vemul_corrupt_apply(e, &c);
        if (err) {
            vemul_swqe_free(e);
            return err;
        }
    }
    q->sq_count++;
    return 0;
}

static int vemul_post_send_one(struct vemul_qp *q, const struct ibv_send_wr *wr)
{
    struct vemul_context *vc = vemul_ctx(q->qp.context);
    if (q->qp.state == IBV_QPS_ERR) {
        struct vemul_swqe e = {.wr_id = wr->wr_id};
        vemul_send_cqe(q, &e, IBV_WC_WR_FLUSH_ERR);
        return 0;
    }
    if (q->qp.state != IBV_QPS_RTS) return EINVAL;
    if (wr->opcode != IBV_WR_SEND && wr->opcode != IBV_WR_SEND_WITH_IMM &&
        wr->opcode != IBV_WR_RDMA_READ)
        return EINVAL;
    if (wr->num_sge < 0 || (unsigned)wr->num_sge > q->cap.max_send_sge) return EINVAL;
    uint64_t len = 0;
    for (int i = 0; i < wr->num_sge; i++) len += wr->sg_list[i].length;
    if (len > VEMUL_MAX_MSG) return EINVAL;
    int inl = !!(wr->send_flags & IBV_SEND_INLINE);
    if (inl && (len > q->cap.max_inline_data || wr->opcode == IBV_WR_RDMA_READ)) return EINVAL;
    if (q->sq_count >= q->cap.max_send_wr) return ENOMEM;

    struct vemul_swqe *e = &q->sq[(q->sq_head + q->sq_count) % vemul_sq_size(q)];
    memset(e, 0, sizeof(*e));
    if (wr->opcode == IBV_WR_RDMA_READ) return vemul_post_read(q, e, wr, (uint32_t)len);
    e->wr_id = wr->wr_id;
    e->len = (uint32_t)len;
    e->post_len = (uint32_t)len;
    e->opcode = wr->opcode == IBV_WR_SEND_WITH_IMM ? VEMUL_OP_SEND_IMM : VEMUL_OP_SEND;
    e->imm = wr->opcode == IBV_WR_SEND_WITH_IMM ? wr->imm_data : 0;
    e->signaled = q->sq_sig_all || (wr->send_flags & IBV_SEND_SIGNALED);
    e->status = IBV_WC_SUCCESS;
    for (int i = 0; !inl && i < wr->num_sge; i++)
        if (wr->sg_list[i].length && vemul_sge_ok(vc, q->qp.pd, &wr->sg_list[i], 0))
            e->status = IBV_WC_LOC_PROT_ERR; /* completes so when it comes up */
    if (len && e->status == IBV_WC_SUCCESS) {
        e->data = malloc(len);
        if (!e->data) return ENOMEM;
        uint8_t *p = e->data;
        for (int i = 0; i < wr->num_sge; i++) {
            memcpy(p, (const void *)(uintptr_t)wr->sg_list[i].addr, wr->sg_list[i].length);
            p += wr->sg_list[i].length;
        }
    }
    struct vemul_corrupt c;
    if (vemul_wire_count(&c) && e->status == IBV_WC_SUCCESS) {
        int err = vemul_corrupt_apply(e, &c);
        if (err) {
            free(e->data);
            e->data = NULL;
            return err;
        }
    }
    q->sq_count++;
    return 0;
}

int vemul_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad_wr)
{
    struct vemul_context *vc = vemul_ctx(qp->context);
    struct vemul_qp *q = (struct vemul_qp *)qp;
    int ret = 0;
    pthread_mutex_lock(&vc->lock);
    for (; wr; wr = wr->next) {
        ret = vemul_post_send_one(q, wr);
        if (ret) {
            if (bad_wr) *bad_wr = wr;
            break;
        }
    }
    /* the fast path; while older WRs wait for room, the engine sends */
    if (!q->tx_blocked) vemul_progress_send(q);
    pthread_mutex_unlock(&vc->lock);
    return ret;
}

static int vemul_post_recv_one(struct vemul_qp *q, const struct ibv_recv_wr *wr)
{
    if (q->qp.state == IBV_QPS_RESET) return EINVAL;
    if (wr->num_sge < 0 || (unsigned)wr->num_sge > q->cap.max_recv_sge) return EINVAL;
    if (q->qp.state == IBV_QPS_ERR) {
        struct ibv_wc wc;
        memset(&wc, 0, sizeof(wc));
        wc.wr_id = wr->wr_id;
        wc.status = IBV_WC_WR_FLUSH_ERR;
        wc.opcode = IBV_WC_RECV;
        wc.qp_num = q->qp.qp_num;
        vemul_cq_push((struct vemul_cq *)q->qp.recv_cq, &wc);
        return 0;
    }
    if (q->rq_count >= q->cap.max_recv_wr) return ENOMEM;
    struct vemul_rwqe *w = &q->rq[(q->rq_head + q->rq_count) % vemul_rq_size(q)];
    w->wr_id = wr->wr_id;
    w->num_sge = wr->num_sge;
    w->sges = &w->sge1;
    if (wr->num_sge > 1) {
        w->sges = malloc((size_t)wr->num_sge * sizeof(*w->sges));
        if (!w->sges) return ENOMEM;
    }
    if (wr->num_sge) memcpy(w->sges, wr->sg_list, (size_t)wr->num_sge * sizeof(*w->sges));
    q->rq_count++;
    return 0;
}

int vemul_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad_wr)
{
    struct vemul_context *vc = vemul_ctx(qp->context);
    struct vemul_qp *q = (struct vemul_qp *)qp;
    int ret = 0;
    pthread_mutex_lock(&vc->lock);
    for (; wr; wr = wr->next) {
        ret = vemul_post_recv_one(q, wr);
        if (ret) {
            if (bad_wr) *bad_wr = wr;
            break;
        }
    }
    vemul_progress_recv(q); /* delivers what waited for a receive (RNR) */
    vemul_rx_watch_kick(q); /* a receive posted while the receive CQ is armed */
    pthread_mutex_unlock(&vc->lock);
    return ret;
}

unsigned long verbs_emul_qp_dropped(struct ibv_qp *qp)
{
    struct vemul_context *vc = vemul_ctx(qp->context);
    pthread_mutex_lock(&vc->lock);
    unsigned long n = ((struct vemul_qp *)qp)->dropped;
    pthread_mutex_unlock(&vc->lock);
    return n;
}
