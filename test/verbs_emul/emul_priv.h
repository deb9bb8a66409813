/*
 * emul_priv.h - internals of the software HCA (see README.md): the objects
 * behind the ibv_* handles, the wire header, and the functions the two
 * halves (emul_device.c: devices, contexts, PDs, MRs, CQs; emul_qp.c: QPs,
 * posting, progress) call in each other.
 *
 * Locking: every entry point takes the context's lock (emul_context.lock)
 * and calls the vemul_* helpers with it held. The context's engine thread
 * (emul_qp.c, vemul_engine) takes the same lock whenever it touches a QP or
 * a CQ, and never blocks while it holds it.
 */
#ifndef VERBS_EMUL_PRIV_H
#define VERBS_EMUL_PRIV_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/un.h>

#include <infiniband/verbs.h>

#define VEMUL_MAX_DEVICES 16
#define VEMUL_MAX_WR 16384
#define VEMUL_MAX_SGE 30
#define VEMUL_MAX_CQE 4194303
#define VEMUL_MAX_INLINE 256
#define VEMUL_MAX_RD_ATOM 16
/* largest message of one WR (documented cap; real HCAs take 2 GiB) */
#define VEMUL_MAX_MSG (1u << 20)
/* payload bytes per datagram: a WR travels as ceil(len / FRAG) datagrams */
#define VEMUL_FRAG (64u * 1024)
#define VEMUL_MR_BUCKETS 64

#define VEMUL_MAGIC 0x56454d55u /* "VEMU" */
#define VEMUL_VERSION 1
/* READ_REQ: an RDMA read request (struct vemul_read_req after the header);
 * READ_RESP: its data, in fragments (imm: 0, or 1 = remote access error,
 * then without data) */
enum { VEMUL_OP_SEND = 1, VEMUL_OP_SEND_IMM = 2, VEMUL_OP_READ_REQ = 3, VEMUL_OP_READ_RESP = 4 };

struct vemul_read_req {
    uint64_t raddr;
    uint32_t rkey;
    uint32_t len;
};

/* One datagram: this header, then frag bytes of the message at frag_off. */
struct vemul_hdr {
    uint32_t magic;
    uint16_t version;
    uint8_t opcode;
    uint8_t pad0;
    uint16_t src_lid;
    uint16_t pad1;
    uint32_t src_qpn;
    uint32_t imm; /* as posted (network byte order), opaque here */
    uint32_t total_len;
    uint32_t frag_off;
};

struct vemul_device {
    struct ibv_device dev; /* must be first */
    uint16_t lid;
};

struct vemul_mr {
    struct ibv_mr mr; /* must be first */
    struct vemul_mr *next; /* bucket chain, by lkey */
    unsigned access; /* IBV_ACCESS_* */
};

struct vemul_pd {
    struct ibv_pd pd; /* must be first */
    struct vemul_pd *next;
    unsigned nmr, nqp;
};

/* A completion channel. ch.fd is an eventfd (close-on-exec, blocking
 * unless the application sets O_NONBLOCK) that holds 1 exactly while the
 * event queue is not empty: it is written and read only under the
 * context's lock, when the queue turns non-empty and empty, so those
 * calls never block. The queue is a FIFO of the CQs that have events
 * waiting (each at most once; vemul_cq.ev_queued counts its events). */
struct vemul_chan {
    struct ibv_comp_channel ch; /* must be first */
    struct vemul_chan *next;
    struct vemul_cq *ev_head, *ev_tail;
};

struct vemul_cq {
    struct ibv_cq cq; /* must be first */
    struct vemul_cq *next;
    struct ibv_wc *ring; /* grows (doubling) up to cap entries */
    unsigned ring_size, head, count, cap;
    unsigned nqp; /* QPs using it as send or receive CQ */
    /* epoll set of the receive sockets of the QPs that use it as receive
     * CQ (level-triggered, data.ptr = the QP): poll_cq receives for those
     * with datagrams waiting, whatever the number of QPs */
    int rx_ep;
    int overrun;
    /* completion events (README.md): armed by req_notify_cq until the next
     * CQE; events queued on the channel and not yet taken by
     * ibv_get_cq_event; taken and not yet acknowledged */
    int armed;
    unsigned ev_queued;
    unsigned long ev_unacked;
    struct vemul_cq *ev_next; /* in the channel's queue */
};

/* send queue entry */
/* receive queue entry */
struct vemul_rwqe {
    uint64_t wr_id;
    int num_sge;
    struct ibv_sge sge1; /* sges points here for a single SGE */
    struct ibv_sge *sges;
};

struct vemul_swqe {
    uint64_t wr_id;
    uint8_t *data; /* copy made at post time (NULL when len == 0) */
    uint32_t len, sent_off;
    uint32_t imm;
    uint32_t post_len; /* the length posted (len is the wire length) */
    uint8_t opcode; /* VEMUL_OP_*; READ_REQ for an RDMA read */
    uint8_t signaled;
    enum ibv_wc_status status; /* != SUCCESS: fails when it comes up (bad lkey) */
    /* an RDMA read: the remote buffer, the local SGEs (rd.sges), whether
     * the request went out (the send queue then waits for the response)
     * and how many bytes of it arrived */
    uint64_t raddr;
    uint32_t rkey;
    uint8_t req_sent;
    uint32_t rd_off;
    struct vemul_rwqe rd;
};

struct vemul_qp {
    struct ibv_qp qp; /* must be first */
    struct vemul_qp *next;
    int fd; /* bound to the QP's name; receives */
    /* sends: unbound, connected to the peer's socket from RTR on (lazily,
     * if the peer did not exist yet), so that POLLOUT on it says whether
     * the peer's queue has room; -1 before RTR */
    int txfd;
    int tx_connected;
    /* a send got EAGAIN: the engine thread owns the unsent WRs until the
     * socket is writable (post_send does not send directly meanwhile) */
    int tx_blocked;
    int sq_sig_all;
    struct ibv_qp_cap cap;
    uint16_t dlid;
    uint32_t dqpn;
    /* RDMA read requests and responses travel between sockets of their
     * own, which the engine always watches (an HCA answers reads without
     * the process, and they pass SENDs that wait for a receive): rdfd is
     * bound to the QP's name with ".r" appended; rdtx is connected to the
     * peer's (peer_rd), rd_blocked when it is full */
    int rdfd, rdtx;
    int rd_connected, rd_blocked;
    unsigned access;          /* qp_access_flags: IBV_ACCESS_REMOTE_READ to answer reads */
    uint8_t max_dest_rd;      /* max_dest_rd_atomic: 0 answers no reads */
    struct sockaddr_un peer_rd;
    socklen_t peer_rd_len;
    struct sockaddr_un peer;
    socklen_t peer_len;

    /* send ring: [head, head + sq_done) were sent unsignaled and wait for a
     * later signaled completion to free their slots; the rest is unsent */
    struct vemul_swqe *sq;
    unsigned sq_head, sq_count, sq_done;

    struct vemul_rwqe *rq;
    unsigned rq_head, rq_count;

    /* the message being received (into rq[rq_head]) */
    int rx_active;
    uint32_t rx_total, rx_off, rx_imm;
    uint8_t rx_opcode;

    unsigned long dropped;

    /* the engine's current poll() set holds fd (POLLIN: the receive CQ is
     * armed) or txfd (POLLOUT: tx_blocked); set and read under the lock */
    int rx_polled, tx_polled, rd_polled;

    /* the RDMA read we answer (one at a time: a requester waits for each
     * response before it sends on), sent before our own WRs */
    int resp_active;
    uint8_t resp_err; /* 1: remote access error, 2: invalid request (the QP
                         allows no reads); one datagram without data */
    uint64_t resp_raddr;
    uint32_t resp_len, resp_off;
};

struct vemul_context {
    struct ibv_context ctx; /* must be first */
    pthread_mutex_t lock;
    uint16_t lid;
    uint32_t next_key;
    unsigned npd, ncq, nqp;
    unsigned nblocked; /* QPs with tx_blocked set (vemul_set_tx_blocked) */
    struct vemul_pd *pds;
    struct vemul_chan *chans;
    struct vemul_cq *cqs;
    struct vemul_qp *qps;
    struct vemul_mr *mrs[VEMUL_MR_BUCKETS];
    uint8_t *scratch; /* VEMUL_FRAG bytes: receive buffer for one datagram */

    /* the HCA engine: a thread that sends what post_send could not, and
     * receives for QPs whose receive CQ is armed */
    pthread_t engine;
    pid_t pid; /* the process the engine runs in */
    /* the engine's poll set, kept here: reachable from the context, so that
     * a child forked with the engine's stack gone does not see it leaked */
    void *eng_fds, *eng_rd_of;
    int wake_fd; /* eventfd: the set to watch changed, or stop */
    int stop;
    unsigned long round; /* counts the engine's returns from poll() */
    pthread_cond_t round_cond; /* broadcast at each */
};

static inline struct vemul_context *vemul_ctx(struct ibv_context *c)
{
    return (struct vemul_context *)c;
}

/* emul_device.c */
int vemul_fail(const char *name);
uint32_t vemul_random(void);
struct vemul_mr *vemul_mr_find(struct vemul_context *vc, uint32_t lkey);
/* 0 when [addr, addr + len) lies in the MR named by lkey, of pd, which
 * allows access (0 or IBV_ACCESS_LOCAL_WRITE) */
int vemul_sge_ok(struct vemul_context *vc, struct ibv_pd *pd, const struct ibv_sge *sge,
                 unsigned access);
/* adds a CQE; the first one after req_notify_cq raises the event */
void vemul_cq_push(struct vemul_cq *cq, const struct ibv_wc *wc);
void vemul_free_mrs(struct vemul_context *vc);
int vemul_poll_cq(struct ibv_cq *cq, int num_entries, struct ibv_wc *wc);
int vemul_req_notify_cq(struct ibv_cq *cq, int solicited_only);

/* emul_qp.c */
int vemul_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad_wr);
int vemul_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad_wr);
/* sends what waits in q's send queue (poll_cq, for blocked QPs) */
void vemul_qp_progress_tx(struct vemul_qp *q);
/* receives what waits in q's socket (poll_cq, through the CQ's rx_ep) */
void vemul_qp_progress_rx(struct vemul_qp *q);
/* wakes the engine if q's receive socket should now be watched and is not */
void vemul_rx_watch_kick(struct vemul_qp *q);
void vemul_qp_free(struct vemul_qp *q);
/* starts the context's engine thread (wake_fd made here); 0 or an errno */
int vemul_engine_start(struct vemul_context *vc);
/* stops and joins it; call without the lock */
void vemul_engine_stop(struct vemul_context *vc);

#endif
