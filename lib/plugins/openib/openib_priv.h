/*
 * openib_priv.h - the openib transport's internals: configuration, the
 * process-wide device state, the per-connection state and the packet
 * format. See README.md for the design.
 */
#ifndef OPENIB_PRIV_H
#define OPENIB_PRIV_H

#include <infiniband/verbs.h>
#include <stdint.h>
#include <time.h>

#include "pscom_plugin.h"

/* ---- configuration (PSP_OPENIB_*) ---------------------------------------- */

typedef struct openib_cfg {
    char *hca;               /* device name, NULL: the first with an active port */
    unsigned port;           /* 0: the first active port */
    unsigned path_mtu;       /* 1=256, 2=512, 3=1024 */
    unsigned recvq_size;     /* receive slots per connection = the peer's credits */
    unsigned sendq_size;     /* send slots per connection */
    unsigned compq_size;     /* first size of the completion queue (it grows) */
    unsigned pending_tokens; /* credits owed before they go back alone */
    int lid_offset;          /* added to the port's LID in the handshake */
    unsigned rendezvous;     /* pscom-level rendezvous threshold */
    unsigned rdma_read;      /* rendezvous messages of this size on are read by RDMA */
    int global_sendq;        /* accepted, not supported (said once) */
    int event_cnt;
    int ignore_wrong_opcodes;
    unsigned mcache_size;
    int malloc_opts;
    int rndv_fallbacks;
} openib_cfg_t;

extern openib_cfg_t openib_cfg;

/* ---- packets -------------------------------------------------------------- */

/* Every send and receive slot holds one packet: this header, then up to
 * OPENIB_PAYLOAD_MAX bytes of the pscom byte stream. WHOLE: the payload is
 * exactly one pscom message (the receiver hands it over with
 * pscom_read_msg); TOKENS: no payload, the credits alone. */
#define OPENIB_SLOT_SIZE   16384u
#define OPENIB_PKT_MAGIC   0x4f49u /* "IO" */
#define OPENIB_PKT_WHOLE   0x1u
#define OPENIB_PKT_TOKENS  0x2u

typedef struct openib_pkt_hdr {
    uint16_t magic;
    uint16_t flags;
    uint32_t tokens; /* receive slots of the sender freed since its last packet */
} openib_pkt_hdr_t;
_Static_assert(sizeof(openib_pkt_hdr_t) == 8, "openib packet header");

#define OPENIB_PAYLOAD_MAX (OPENIB_SLOT_SIZE - sizeof(openib_pkt_hdr_t))

/* ---- the device (one per process) --------------------------------------- */

typedef struct openib_con openib_con_t;

/* A completion queue shared by connections (openib_cq.c). */
typedef struct openib_cq {
    struct ibv_cq *cq;
    unsigned size;            /* its entries */
    unsigned need;            /* entries its registered connections may fill */
    unsigned stale;           /* entries of connections gone before their flush */
    int fixed;                /* ibv_resize_cq failed: it keeps its size */
} openib_cq_t;

typedef struct openib_dev {
    struct ibv_context *ctx;
    struct ibv_pd *pd;
    uint8_t port;
    uint16_t lid;             /* with PSP_OPENIB_LID_OFFSET */
    enum ibv_mtu mtu;         /* path MTU we use */
    char name[64];
    int max_cqe;              /* the device's */
    uint32_t max_msg;         /* the port's largest message (one RDMA read) */
    pscom_poller_t poller;    /* one for all connections */
    struct ibv_comp_channel *chan; /* the completion queue's; NULL: none */
    pscom_ufd_t chan_ufd;     /* its fd, in the epoll set while we sleep */
    int armed;                /* asleep on the channel (openib_wait.c) */
    pscom_list_t cons;        /* started connections (openib_con_t.next) */
    pscom_list_t ready;       /* started connections with completions taken
                                 (openib_con_t.ready_next) */
    unsigned ncons;

    /* the completion queues (openib_cq.c): one, unless it cannot grow */
    struct openib_cq *cqs;
    unsigned ncq, cq_cap;
    int cq_broken;            /* ibv_poll_cq failed: every connection fails */
    openib_con_t **tab;       /* registered connections, by index (NULL: free) */
    uint16_t *gen;            /* each index's generation */
    unsigned *free_idx;       /* free indices below tab_used */
    unsigned tab_cap, tab_used, nfree;
} openib_dev_t;

extern openib_dev_t openib_dev;

/* ---- connections ----------------------------------------------------------- */

/* A completion taken from the queue by the write path, not yet handled. */
typedef struct openib_stash {
    struct ibv_wc wc;
    int credited; /* its credits are taken already */
} openib_stash_t;

struct openib_con {
    pscom_con_t *con;
    uint32_t id;              /* index and generation in openib_dev.tab; 0: none */
    unsigned cqi;             /* its completion queue: openib_dev.cqs[cqi] */
    unsigned wr_out;          /* work requests posted and not yet completed */
    struct ibv_qp *qp;
    struct ibv_mr *mr;        /* over buf */
    char *buf;                /* recvq_size receive slots, then sendq_size send slots */
    unsigned nrecv, nsend;    /* slots */
    uint32_t psn;             /* our first packet sequence number */

    /* sending */
    unsigned send_head;       /* next send slot to fill (index mod nsend) */
    unsigned send_busy;       /* slots posted and not yet completed */
    unsigned credits;         /* receive slots free at the peer */
    unsigned peer_recvq;      /* the peer's receive slots (credits at most) */
    size_t cur_off;           /* bytes of the oldest queued message already sent */
    int in_write;             /* re-entrancy guard of openib_write */
    int read_busy;            /* an RDMA read (openib_rdma.c) is in flight */
    struct ibv_mr *read_mr;   /* the region of one given up while in flight */
    enum ibv_wc_status read_status; /* ... and how it ended */

    /* receiving */
    openib_stash_t *stash;    /* ring of stash_cap: completions taken, not yet handled */
    unsigned stash_head, stash_count, stash_cap;
    unsigned owed;            /* receive slots freed, not yet told to the peer */
    unsigned owed_data;       /* ... of them freed by packets with data */

    pscom_ufd_t ufd;          /* the handshake socket: the peer's death */
    pscom_list_t next;        /* in openib_dev.cons */
    pscom_list_t ready_next;  /* in openib_dev.ready (or alone) */
    unsigned started : 1;
    unsigned draining : 1;    /* closing: completions are only counted */
    unsigned overflow : 1;    /* more completions than work requests (a bug) */
    unsigned closed : 1;
    unsigned failed : 1;      /* an error was reported */
    unsigned read_stopped : 1; /* the core reads no more (the peer's EOF came) */
    unsigned delivering : 1;  /* a packet is with the core (openib_io.c, handle_recv) */
};

static inline openib_con_t *openib_con(pscom_con_t *con)
{
    return pscom_con_plugin_priv(con);
}

/* The work requests oc can have outstanding, each a completion to come:
 * its receive and send slots and one RDMA read (openib_rdma.c). */
static inline unsigned openib_con_wrs(const openib_con_t *oc)
{
    return oc->nrecv + oc->nsend + 1;
}

static inline char *openib_recv_slot(openib_con_t *oc, unsigned i)
{
    return oc->buf + (size_t)i * OPENIB_SLOT_SIZE;
}

static inline char *openib_send_slot(openib_con_t *oc, unsigned i)
{
    return oc->buf + (size_t)(oc->nrecv + i) * OPENIB_SLOT_SIZE;
}

/* wr_id of a work request: the connection's id in the upper 32 bits, the
 * slot and its direction in the lower (or READ: an RDMA read) */
#define OPENIB_WR_SEND 0x80000000u
#define OPENIB_WR_READ 0x40000000u

static inline uint64_t openib_wr_id(const openib_con_t *oc, uint32_t slot_bits)
{
    return (uint64_t)oc->id << 32 | slot_bits;
}

static inline uint32_t openib_wr_slot_bits(uint64_t wr_id)
{
    return (uint32_t)wr_id;
}

static inline uint64_t openib_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* openib_dev.c */
int openib_dev_open(void);
void openib_dev_close(void);

/* openib_cq.c: the one completion queue, and the connections by id */
int openib_cq_open(void);
void openib_cq_close(void);
/* an id for oc, and room in a queue for its work requests: 0 or -1 */
int openib_con_register(openib_con_t *oc);
static inline struct ibv_cq *openib_con_cq(const openib_con_t *oc)
{
    return openib_dev.cqs[oc->cqi].cq;
}
/* arm every queue: 0, or -1 */
int openib_cq_arm(void);
/* after openib_con_quiesce (or before any work request) */
void openib_con_unregister(openib_con_t *oc);
/* take the QP to the error state and count its flushed completions */
void openib_con_quiesce(openib_con_t *oc);
/* after ibv_destroy_qp succeeded, before openib_con_unregister: what did
 * not come by then never will */
void openib_con_destroyed(openib_con_t *oc);
/* poll the queue empty: each completion to its connection's stash (credits
 * taken, send slots freed), the connection marked ready. Never calls the
 * core. Returns the number taken. */
int openib_cq_take(void);
void openib_ready_add(openib_con_t *oc);

/* openib_qp.c: the connection's verbs resources */
int openib_con_resources(openib_con_t *oc, pscom_con_t *con);
void openib_con_resources_free(openib_con_t *oc);
int openib_qp_connect(openib_con_t *oc, uint16_t lid, uint32_t qpn, uint32_t psn);
int openib_post_recv(openib_con_t *oc, unsigned slot);

/* openib_io.c: the data path */
void openib_write_start(pscom_con_t *con);
int openib_write_now(pscom_con_t *con, void *priv, const void *head, size_t hlen,
                     const void *data, size_t dlen);
int openib_con_progress(openib_con_t *oc);
int openib_poll(pscom_poller_t *poller);
int openib_busy(pscom_poller_t *poller);
void openib_drain_sends(openib_con_t *oc);
/* a taken completion of oc into its stash (openib_cq_take) */
void openib_con_stash(openib_con_t *oc, const struct ibv_wc *wc);
/* post the next send slot's first len bytes (the packet as it is there) */
int openib_slot_post(openib_con_t *oc, size_t len);

/* openib_rdma.c: rendezvous by RDMA read (plugin ops rndv_*) */
uint64_t openib_rndv_export(pscom_con_t *con, const void *buf, size_t len, void **handle);
void openib_rndv_release(pscom_con_t *con, void *handle);
int openib_rndv_read(pscom_con_t *con, void *dst, uint64_t src, uint64_t key, size_t len);

/* openib_wait.c: blocked waits sleep on the completion channel */
int openib_wait_init(void);
void openib_wait_fini(void);
void openib_wake(void);
void openib_events_drain(void);

#endif /* OPENIB_PRIV_H */
