/*
 * ucp_priv.h - internal interface of the ucp transport (UCX tag matching).
 *
 * One UCX context and one worker per process (ucp_worker.c): every pscom
 * socket and connection of the process shares them; a connection is one
 * UCX endpoint plus a 40-bit id that the peer puts into every tag it sends
 * to us, so messages of different connections never mix.
 *
 * Tag layout (64 bits):
 *     bits  0..39  connection id chosen by the receiver (slot 24 + generation 16)
 *     bits 40..41  kind: MSG (one complete pscom message), HEAD (header +
 *                  xheader; a DATA message with the payload follows), DATA
 *     bits 42..63  per-connection sequence number (mod 2^22), checked by the
 *                  receiver: a gap or a reordering is a protocol error
 *
 * Threading: every function runs with the pscom lock held (plugin contract);
 * the worker is created UCS_THREAD_MODE_SERIALIZED. UCX callbacks only run
 * inside ucp_worker_progress()/ucp_ep_close_nbx() called by us: they record
 * what happened and queue the connection; the poller acts on it afterwards.
 * The one core call from inside UCX is pscom_read_msg_posted() (recv_cb),
 * which calls no plugin op and no user callback.
 */
#ifndef UCP_PRIV_H
#define UCP_PRIV_H

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <ucp/api/ucp.h>

#include "pscom_plugin.h"

/* ---- tags ------------------------------------------------------------------ */

#define UCPT_ID_BITS    40
#define UCPT_ID_MASK    ((UINT64_C(1) << UCPT_ID_BITS) - 1)
#define UCPT_KIND_SHIFT 40
#define UCPT_KIND_MASK  UINT64_C(3)
#define UCPT_SEQ_SHIFT  42
#define UCPT_SEQ_MASK   ((UINT32_C(1) << 22) - 1)

enum ucpt_kind {
    UCPT_MSG  = 0, /* header, xheader and data of one message, at most UCP_MSG_MAX bytes */
    UCPT_HEAD = 1, /* header and xheader; the payload (if any) follows as DATA */
    UCPT_DATA = 2, /* the payload of the preceding HEAD */
    UCPT_BYE  = 3, /* the sender closed the connection: empty, gracefully (every message
                      of it has been sent), or one byte: after an error (ucp_con_close) */
};

/* Largest MSG (protocol constant): an idle connection keeps a receive of
 * this size posted for its next MSG (ucp_recv.c), so that UCX places a
 * small message without the unexpected queue. Larger messages, also those
 * without data, go as HEAD (+ DATA). */
#define UCP_MSG_MAX 1024

static inline ucp_tag_t ucpt_make(uint64_t id, unsigned kind, uint32_t seq)
{
    return (id & UCPT_ID_MASK) | ((uint64_t)kind << UCPT_KIND_SHIFT) |
           ((uint64_t)(seq & UCPT_SEQ_MASK) << UCPT_SEQ_SHIFT);
}
/* a tag mask for the connection id and the sequence number, any kind */
#define UCPT_ID_SEQ_MASK (~(UCPT_KIND_MASK << UCPT_KIND_SHIFT))
static inline uint64_t ucpt_id(ucp_tag_t t) { return t & UCPT_ID_MASK; }
static inline unsigned ucpt_kind(ucp_tag_t t) { return (unsigned)((t >> UCPT_KIND_SHIFT) & UCPT_KIND_MASK); }
static inline uint32_t ucpt_seq(ucp_tag_t t) { return (uint32_t)(t >> UCPT_SEQ_SHIFT) & UCPT_SEQ_MASK; }

/* ---- configuration (PSP_UCP_*) ------------------------------------------- */

typedef struct ucp_cfg {
    unsigned max_recv;       /* PSP_UCP_MAX_RECV: receives in flight (inf) */
    unsigned fastinit;       /* PSP_UCP_FASTINIT: context/worker in init() */
    unsigned rendezvous;     /* PSP_UCP_RENDEZVOUS: pscom-level threshold (inf) */
    unsigned small_msg_len;  /* PSP_UCP_SMALL_MSG_LEN: packed into one send */
    unsigned err_handling;   /* PSP_UCP_ERR_HANDLING: UCP_ERR_HANDLING_MODE_PEER (0) */
    unsigned wireup_timeout_ms; /* PSP_UCP_WIREUP_TIMEOUT: bound of the wire-up (10000; 0: none) */
    unsigned ep_linger_ms;      /* PSP_UCP_EP_LINGER: an unused endpoint stays open (5000) */
} ucp_cfg_t;
extern ucp_cfg_t ucp_cfg;

#define UCP_SMALL_MAX  UCP_MSG_MAX /* upper bound for PSP_UCP_SMALL_MSG_LEN */

/* ---- requests ----------------------------------------------------------------- */

/* Our part of every UCX request (ucp_params.request_size). Filled right
 * after the post returned; callbacks run later, inside progress. */
typedef enum ucp_req_type {
    UCP_REQ_SEND,    /* one of the one or two sends of a message */
    UCP_REQ_RECV,    /* MSG/HEAD into buf (owned by the request) */
    UCP_REQ_PREPOST, /* the next MSG of an idle connection, by tag, into buf */
    UCP_REQ_DATA,    /* DATA into the core's buffer */
    UCP_REQ_DISCARD, /* a message nobody wants */
    UCP_REQ_FLUSH,   /* ucp_ep_flush_nbx: wire-up during the handshake */
    UCP_REQ_CLOSE,   /* ucp_ep_close_nbx */
} ucp_req_type_t;

typedef struct ucp_partial ucp_partial_t;

typedef struct ucp_req {
    ucp_req_type_t type;
    int completed;
    ucs_status_t status;
    uint64_t con_id;         /* owner (looked up, never a pointer) */
    size_t slot;             /* RECV: kind; DATA: bytes kept (a size: until 2026-11-29
                              * an unsigned, which cut the part of a message of 4 GiB or
                              * more that an unexpected receive had kept) */
    char *buf;               /* RECV: its buffer; SEND: heap copy; or NULL */
    size_t len;
    ucp_partial_t *partial;  /* DATA/DISCARD through the generic datatype */
    void *held;              /* DATA: the core's buffer UCX writes, left to us at the
                              * close (pscom_read_pin_keep), or NULL */
    /* in its endpoint's operations (ucp_peer_req), or alone */
    pscom_list_t pep_next;
    /* it can never end (its peer is gone, its endpoint closed): not waited
     * for (ucp_g.orphans) */
    int orphan;
} ucp_req_t;

/* Generic datatype state (ucp_recv.c): keep the first `keep` bytes at
 * dst, drop the rest (truncated receives, dropped messages). */
struct ucp_partial {
    char *dst;
    size_t keep;
    size_t total;
};

/* ---- connections ---------------------------------------------------------------- */

typedef struct ucp_stash {
    pscom_list_t next;
    ucp_tag_message_h msg;
    ucp_tag_recv_info_t info;
} ucp_stash_t;

typedef struct ucp_pep ucp_pep_t; /* an endpoint to a peer worker (ucp_peer.c) */

typedef struct ucp_con {
    pscom_con_t *con;
    uint64_t id;        /* ours: in the tags the peer sends us */
    uint64_t peer_id;   /* the peer's: in the tags we send */
    ucp_ep_h ep;        /* pep's, shared with the other connections on it */
    ucp_pep_t *pep;
    pscom_list_t peer_next; /* in pep's connections */
    void *peer_addr;    /* accept side: worker address until con_confirm */
    size_t peer_addr_len;

    unsigned started : 1;    /* con_start done: feed the core */
    unsigned closed : 1;     /* close op ran */
    unsigned ep_failed : 1;  /* UCX reported an error on the endpoint */
    unsigned sock_dead : 1;  /* the endpoint's socket: EOF without goodbye (ucp_peer.c) */
    unsigned bye_eof : 1;    /* ... EOF after the goodbye: the peer closed its endpoint
                                (bye_t0_us) */
    unsigned peer_abort : 1; /* the peer's BYE after an error (ucp_recv.c rx_bye) */
    unsigned keep_sock : 1;  /* the handshake socket becomes the endpoint's (confirmation) */
    unsigned connect_side : 1; /* we connected (con_connect ran) */
    unsigned tx_busy : 1;    /* in ucp_tx_progress (re-entrancy guard) */
    unsigned tx_again : 1;
    unsigned tx_failed : 1;
    unsigned rx_busy : 1;    /* in ucp_rx_pump */
    unsigned rx_failed : 1;  /* a receive ended with an error */
    unsigned error_reported : 1;
    unsigned prepost_now : 1; /* in the poller's pre-post pass */
    unsigned self_peer : 1;   /* the peer is our own worker (UCX "self"): a send may
                               * put a message into our unexpected queue at once */
    pscom_list_t dirty_next; /* in ucp_g.dirty: work for the poller */
    pscom_list_t fail_next;  /* in ucp_g.failed: a failure to report */
    pscom_list_t prepost_next; /* in ucp_g.prepost: idle, post the next receive */
    pscom_list_t wiring_next;  /* in ucp_g.wiring: the handshake waits for the wire-up */
    struct ucp_req *wire_req;  /* ... its ucp_ep_flush_nbx */
    uint64_t wire_t0_us;       /* ... posted then */
    uint64_t bye_t0_us;        /* bye_eof: since then (ucp_con_check_failed) */
    unsigned bye_checks;       /* ... checks of the poller since then */

    /* send */
    uint32_t tx_seq;
    size_t tx_inflight;  /* head + data of the message UCX holds (0: none; one at a time) */
    unsigned tx_pending; /* its UCX sends not completed */

    /* receive */
    uint32_t rx_seq;
    size_t rx_data_len;  /* > 0: the next message is DATA of this size */
    ucp_req_t *rx_req;   /* receive in flight (one per connection) */
    pscom_list_t stash;  /* probed messages waiting for their turn */
    unsigned nstash;
    char *rxbuf;
    size_t rxbuf_cap;

    /* a failure waits for what arrived before it (ucp_con_check_failed) */
    uint64_t fail_t0_us; /* since then */
    unsigned fail_checks;
} ucp_con_t;

/* ---- critical-path count (bench/instr.sh CRIT=1) ---------------------------------------
 * Built with -DPSCOM_UCP_CRIT_COUNT, callgrind counts only from the
 * completion of a pre-posted receive (recv_cb) to the next send's
 * ucp_tag_send_nbx: what an echoing peer executes between a message's
 * arrival and its answer. Nothing in a normal build. */
#ifdef PSCOM_UCP_CRIT_COUNT
#include <valgrind/callgrind.h>
extern int ucp_crit_on;
#define UCP_CRIT_BEGIN()                                                                          \
    do {                                                                                          \
        if (!ucp_crit_on) {                                                                       \
            ucp_crit_on = 1;                                                                      \
            CALLGRIND_TOGGLE_COLLECT;                                                             \
        }                                                                                         \
    } while (0)
#define UCP_CRIT_END()                                                                            \
    do {                                                                                          \
        if (ucp_crit_on) {                                                                        \
            ucp_crit_on = 0;                                                                      \
            CALLGRIND_TOGGLE_COLLECT;                                                             \
        }                                                                                         \
    } while (0)
#else
#define UCP_CRIT_BEGIN() ((void)0)
#define UCP_CRIT_END()   ((void)0)
#endif

/* ---- ucp_worker.c: the process-wide context and worker ------------------------ */

typedef struct ucp_global {
    ucp_context_h ctx;
    ucp_worker_h worker;
    ucp_address_t *addr;
    size_t addr_len;
    ucp_datatype_t dt_partial; /* generic datatype of ucp_partial_t */
    int init_failed;           /* do not try again */
    pscom_ufd_t efd;           /* worker event fd, in the core's epoll set */
    pscom_poller_t poller;
    int armed;                 /* poller removed, sleeping on efd */
    int must_probe;            /* the unexpected queue may hold new messages */
    unsigned rx_cbs;           /* receive completions seen (recv_cb), see ucp_poll */
    int in_poll_progress;      /* inside the poller's ucp_worker_progress() */
    struct ucp_con *rx_fast;   /* its pre-posted receive completed there (ucp_rx_fast) */
    struct ucp_req *rx_done;   /* a pre-posted receive delivered in this pass (ucp_rx_after) */
    int rx_direct;             /* a pre-posted receive's message was completed in recv_cb */
    unsigned busy_polls;       /* passes with progress since the last probe */
    uint64_t idle_since_us;
    unsigned idle_rounds;
    int idle_pause;            /* idle for UCP_IDLE_CLOCK_EVERY rounds: pause */
    unsigned inflight;         /* our UCX requests not completed */
    unsigned preposts;         /* ... of which UCP_REQ_PREPOST (they need no progress) */
    unsigned orphans;          /* ... of which orphans (ucp_req_orphan: they cannot end) */
    /* MSG/HEAD receives in flight (fragments still arriving), at most
     * PSP_UCP_MAX_RECV; beyond, the probe leaves messages in UCX. DATA
     * receives (into the core's buffer) and stashed messages (handles of
     * messages still in UCX, behind their connection's receive) take no
     * buffer of ours and do not count: counted, one connection waiting for
     * its DATA held every other connection's messages, for good behind a
     * DATA a broken peer sent with another tag (whose probe finds that) */
    unsigned rx_inflight;
    unsigned ncons;            /* connections holding an id */
    pscom_list_t dirty;        /* connections with work for the poller */
    pscom_list_t failed;       /* connections with a failure to report */
    pscom_list_t prepost;      /* idle connections to post a receive for (ucp_recv.c) */
    pscom_list_t wiring;       /* connections whose handshake waits for the wire-up */
    pscom_list_t discards;     /* drops in flight (ucp_req_t.pep_next): orphans at exit */
    pscom_list_t orphan_reqs;  /* the orphans (ucp_req_t.pep_next): at exit, what they
                                  hold of ours is freed after the worker (ucp_worker_fini) */
} ucp_global_t;
extern ucp_global_t ucp_g;

uint64_t ucp_now_us(void);
int ucp_worker_ensure(void); /* lazily (PSP_UCP_FASTINIT=0) */

/* ucp_log.c: hold UCX's own log messages back around a call; release
 * returns (if failed) the most telling one, else passes them on */
void ucp_log_hold(void);
const char *ucp_log_release(int failed);
/* from the worker's creation to its end, UCX's messages go to our log
 * (unless UCX_LOG_FILE is set), its failed-flush errors to our debug log
 * (our callbacks handle every flush's status) */
void ucp_log_start(void);
void ucp_log_stop(void);
void ucp_worker_fini(void);
void ucp_sleep_end(void);
/* make sure the poller runs (after posting) */
static inline void ucp_wake(void)
{
    if (__builtin_expect(ucp_g.armed, 0)) ucp_sleep_end();
}
/* the connection has work for the poller */
static inline void ucp_dirty(ucp_con_t *uc)
{
    if (!pscom_list_linked(&uc->dirty_next)) pscom_list_add_tail(&uc->dirty_next, &ucp_g.dirty);
    ucp_wake();
}
void ucp_failed(ucp_con_t *uc);
uint64_t ucp_con_id_alloc(ucp_con_t *uc);
void ucp_con_id_free(uint64_t id);

/* connection ids: slot (24 bits) and generation (16 bits) */
#define UCP_ID_SLOT_BITS 24
#define UCP_ID_SLOT_MASK ((UINT64_C(1) << UCP_ID_SLOT_BITS) - 1)
#define UCP_ID_GEN_MASK  UINT64_C(0xffff)
typedef struct ucp_ids {
    ucp_con_t **con;
    uint16_t *gen;
    uint32_t *free_slots;
    uint32_t n, cap, nfree;
} ucp_ids_t;
extern ucp_ids_t ucp_ids;

/* the connection holding id, or NULL (closed, or never ours) */
static inline ucp_con_t *ucp_con_lookup(uint64_t id)
{
    uint64_t slot = id & UCP_ID_SLOT_MASK;
    if (slot >= ucp_ids.n || ucp_ids.gen[slot] != ((id >> UCP_ID_SLOT_BITS) & UCP_ID_GEN_MASK))
        return NULL;
    return ucp_ids.con[slot];
}
/* a request of ours was posted and did not complete at once */
static inline void ucp_req_track(ucp_req_t *r, ucp_req_type_t type, uint64_t con_id)
{
    r->type      = type;
    r->completed = 0;
    r->status    = UCS_INPROGRESS;
    r->con_id    = con_id;
    r->buf       = NULL;
    r->partial   = NULL;
    r->held      = NULL;
    r->orphan    = 0;
    pscom_list_init(&r->pep_next);
    ucp_g.inflight++;
}
/* free buf/partial, ucp_request_free */
static inline void ucp_req_release(ucp_req_t *r)
{
    if (r->buf) free(r->buf);
    if (r->partial) free(r->partial);
    if (r->held) pscom_read_pin_release(r->held);
    r->buf     = NULL;
    r->partial = NULL;
    r->held    = NULL;
    pscom_list_del(&r->pep_next);
    if (r->orphan) ucp_g.orphans--;
    ucp_g.inflight--;
    ucp_request_free(r);
}
/* The request can never end, or only when UCX sees fit (its peer is gone,
 * its endpoint closed): nobody waits for it any more. It stays counted in
 * ucp_g.inflight (UCX owns it until its callback), but no longer keeps the
 * worker from being armed (ops_in_flight, ucp_worker.c): an operation
 * that never ends made every later blocking wait of the process poll for
 * 100 ms and then nap 1 ms at a time instead of sleeping on the worker's
 * event fd (itest_ucp ucp_sleep_after_death). */
static inline void ucp_req_orphan(ucp_req_t *r)
{
    if (r->orphan) return;
    pscom_list_del(&r->pep_next);
    pscom_list_add_tail(&r->pep_next, &ucp_g.orphan_reqs);
    r->orphan = 1;
    ucp_g.orphans++;
}

/* ---- ucp_handshake.c --------------------------------------------------------------- */

int ucp_con_offer(pscom_con_t *con, const pscom_precon_peer_t *peer, void *blob, size_t *len);
int ucp_con_accept(pscom_con_t *con, const pscom_precon_peer_t *peer, const void *blob,
                   size_t len, void *reply, size_t *reply_len);
int ucp_con_connect(pscom_con_t *con, const void *reply, size_t len, void *confirm,
                    size_t *confirm_len);
int ucp_con_confirm(pscom_con_t *con, const void *confirm, size_t len);
int ucp_con_start(pscom_con_t *con, int *fd);
void ucp_con_abort(pscom_con_t *con);
void ucp_con_close(pscom_con_t *con);

/* ---- ucp_peer.c: endpoints per peer worker, shared, paired in order --------------- */

/* connecting side: an endpoint to the worker at addr (*gen: its generation,
 * for the confirmation); accepting side: the one of that generation, or
 * UCP_PEER_REFUSED where ours of it is closed (the connecting side retires
 * its own when the handshake fails: a new offer takes the next one) */
#define UCP_PEER_REFUSED (-2)
int ucp_peer_connect(ucp_con_t *uc, const void *addr, size_t addr_len, uint32_t *gen);
int ucp_peer_accept(ucp_con_t *uc, const void *addr, size_t addr_len, uint32_t gen);
int ucp_peer_wired(const ucp_con_t *uc);
void ucp_peer_set_wired(ucp_con_t *uc);
/* The operation r (tracked: a send, BYE, wire-up flush, receive of a
 * message of uc's peer) goes with uc's endpoint: orphaned when the peer
 * turns out gone (EOF without goodbye on the endpoint's socket, UCX's
 * error) or when the endpoint's close ends without it (FORCE) */
void ucp_peer_req(const ucp_con_t *uc, ucp_req_t *r);
/* the connection leaves its endpoint; force: close it with FORCE (its
 * operations cancelled; the other connections on it fail); retire: no new
 * connections on it (the connection did not end gracefully) */
void ucp_peer_detach(ucp_con_t *uc, int force, int retire);
/* connecting side: should this handshake's socket be kept for the
 * endpoint (said in the confirmation)? */
int ucp_peer_keep_wanted(const ucp_con_t *uc);
/* con_start with keep_sock: the endpoint owns fd from now on (0), or -1 */
int ucp_peer_keep(ucp_con_t *uc, int fd);
/* the first socket of uc's endpoint, or -1 (test/fuzz/fuzz_ucp.c) */
int ucp_peer_sock_fd(const ucp_con_t *uc);
void ucp_peers_fini(void);
void ucp_peers_abandon(void); /* at exit: closes that did not end */
/* at exit, after ucp_peers_fini(): is a close under way to a peer that may
 * still take what it flushes (one that has not closed its side)? */
int ucp_peers_closes_may_end(void);
/* Report a deferred failure (endpoint error, dead socket, failed send or
 * receive) to the core once the messages that arrived before it are in.
 * Returns 1 when done with it, 0 to be asked again. */
int ucp_con_check_failed(ucp_con_t *uc);
/* The peer closed its side gracefully (its BYE, or its endpoint's goodbye):
 * everything it sent is here or on its way, which must arrive soon */
void ucp_con_peer_closed(ucp_con_t *uc);
/* the poller (its work part), while ucp_g.wiring is not empty: wire-ups
 * done, failed or timed out go back to the core (pscom_con_handshake_done) */
void ucp_wiring_check(void);

/* handshake blob: magic, version, address length, connection id, check */
#define UCP_BLOB_HDR 24

/* ---- ucp_send.c ------------------------------------------------------------------------- */

void ucp_write_start(pscom_con_t *con);
/* at close: UCPT_BYE to the peer, empty (graceful) or of one byte (error) */
void ucp_send_bye(ucp_con_t *uc, int error);
int ucp_write_now(pscom_con_t *con, void *priv, const void *head, size_t hlen, const void *data,
                  size_t dlen);
void ucp_tx_progress(ucp_con_t *uc);
void ucp_send_cb(void *request, ucs_status_t status, void *user_data);

/* ---- ucp_recv.c ------------------------------------------------------------------------- */

/* a probed message (any connection); returns 1 if it was taken */
void ucp_rx_arrived(ucp_tag_message_h msg, const ucp_tag_recv_info_t *info);
/* handle completions and stashed messages of a connection */
void ucp_rx_pump(ucp_con_t *uc);
/* the pre-posted receive of uc completed inside the poller's progress:
 * deliver it without the dirty list (else hand it to ucp_rx_pump) */
void ucp_rx_fast(ucp_con_t *uc);
/* at the start of the poller's pass after a delivery of ucp_g.rx_done's
 * message: its connection keeps the buffer and pre-posts its next receive;
 * the request is released */
void ucp_rx_after(void);
/* post the receives for the next MSG of idle connections (ucp_recv.c) */
void ucp_rx_preposts(void);
/* close: before the endpoint is closed, drop stashed messages and cancel
 * the receive in flight; after it, let a receive into the core's buffer end
 * (bounded by UCP_RX_DRAIN_US, see ucp_recv.c) */
void ucp_rx_close(ucp_con_t *uc);
void ucp_rx_close_end(ucp_con_t *uc);
#define UCP_RX_DRAIN_US 100000
/* A peer that closed gracefully (goodbye byte, then its handshake socket
 * closed) sent the rest of its messages, and the EOF last, before it: they
 * may still be on their way (over tcp). If the stream has not ended after
 * this long and as many of the poller's passes, it never will: the
 * connection fails (ucp_con_check_failed). */
#define UCP_BYE_GRACE_US     100000
#define UCP_BYE_GRACE_CHECKS 1000
/* A failure is reported once what arrived before it is delivered (UCX's
 * transports drained by up to UCP_FAIL_DRAIN_ROUNDS rounds of progress
 * per check), but a peer that goes on sending (alive: our send failed)
 * is not waited for longer than this (ucp_con_check_failed) */
#define UCP_FAIL_DRAIN_US     100000
#define UCP_FAIL_DRAIN_CHECKS 1000
#define UCP_FAIL_DRAIN_ROUNDS 256
/* receive and drop a message; returns the request if it is in flight */
ucp_req_t *ucp_rx_discard(ucp_tag_message_h msg, const ucp_tag_recv_info_t *info);
extern const ucp_generic_dt_ops_t ucp_partial_ops;

#endif /* UCP_PRIV_H */
