/*
 * ucp_recv.c - the receive side.
 *
 * The poller takes every arrived message with ucp_tag_probe_nb(remove=1)
 * and routes it by the connection id in its tag. Per connection, messages
 * are handled strictly in order (the sequence number in the tag is
 * checked), one UCX receive at a time; what arrives meanwhile waits in the
 * connection's stash (as a UCX message handle, not copied).
 *
 *   MSG   received into the connection's receive buffer and handed to the
 *         core with pscom_read_msg() (header, xheader and data at once).
 *   HEAD  the same, but only header + xheader; the core then is in the
 *         data phase, and the receive for the following DATA message is
 *         posted by its tag right away (data_early), so that UCX can place
 *         the payload as it arrives.
 *   DATA  straight into the buffer pscom_read_get_buf() names, zero-copy:
 *         the plugin pins it (pscom_read_pin), so the core keeps it in place
 *         while UCX writes. If the matched buffer is shorter than the
 *         message (truncation, or no receiver at all) a generic datatype
 *         keeps what fits and the core is told about the remaining bytes
 *         chunk by chunk, so it sees the real length and the stream stays
 *         in sync.
 *
 * Messages for connection ids we do not know (closed connections) are
 * received and dropped.
 */
#include <stdlib.h>
#include <string.h>

#include "ucp_priv.h"

#define RXBUF_MIN UCP_MSG_MAX /* every receive buffer takes a MSG */

#ifdef PSCOM_UCP_CRIT_COUNT
int ucp_crit_on;
#endif

/* ---- generic datatype: keep a prefix, drop the rest ----------------------------- */

static void *pt_start_pack(void *context, const void *buffer, size_t count)
{
    return NULL; /* never used for sending */
}

static void *pt_start_unpack(void *context, void *buffer, size_t count)
{
    return buffer; /* the ucp_partial_t */
}

static size_t pt_packed_size(void *state)
{
    return ((ucp_partial_t *)state)->total;
}

static size_t pt_pack(void *state, size_t offset, void *dest, size_t max_length)
{
    return 0;
}

static ucs_status_t pt_unpack(void *state, size_t offset, const void *src, size_t length)
{
    ucp_partial_t *p = state;
    if (offset < p->keep) {
        size_t n = p->keep - offset < length ? p->keep - offset : length;
        memcpy(p->dst + offset, src, n);
    }
    return UCS_OK;
}

static void pt_finish(void *state)
{
}

const ucp_generic_dt_ops_t ucp_partial_ops = {
    .start_pack   = pt_start_pack,
    .start_unpack = pt_start_unpack,
    .packed_size  = pt_packed_size,
    .pack         = pt_pack,
    .unpack       = pt_unpack,
    .finish       = pt_finish,
};

static ucp_partial_t *partial_new(char *dst, size_t keep, size_t total)
{
    ucp_partial_t *p = malloc(sizeof(*p));
    if (!p) return NULL;
    p->dst   = dst;
    p->keep  = keep;
    p->total = total;
    return p;
}

/* ---- core calls --------------------------------------------------------------------- */

/* A MSG is one whole message (the core's short way for it); a HEAD is
 * followed by its DATA. */
static int feed(ucp_con_t *uc, const char *buf, size_t len, unsigned kind)
{
    int stop = kind == UCPT_MSG ? pscom_read_msg(uc->con, buf, len)
                                : pscom_read_feed(uc->con, buf, len);
    return stop || uc->closed;
}

static int read_done(ucp_con_t *uc, size_t len)
{
    return pscom_read_done(uc->con, len) || uc->closed;
}

/* why a DATA receive failed with st (a peer's DATA of another length than
 * its HEAD announced ends it as truncated) */
static const char *data_what(ucs_status_t st)
{
    return st == UCS_ERR_MESSAGE_TRUNCATED
               ? "protocol error: a DATA of another length than its HEAD announced"
               : "receive";
}

/* the connection reads nothing more; its failure goes to the core */
static void rx_stop(ucp_con_t *uc)
{
    uc->rx_failed = 1;
    ucp_failed(uc);
}

/* a peer's message that breaks the protocol: dropped, and reading stops */
static void rx_reject(ucp_con_t *uc, ucp_tag_message_h msg, const ucp_tag_recv_info_t *info)
{
    ucp_rx_discard(msg, info);
    rx_stop(uc);
}

static void rx_fail(ucp_con_t *uc, const char *what, ucs_status_t st)
{
    if (st == UCS_ERR_CANCELED || uc->ep_failed || uc->sock_dead || uc->peer_abort) {
        plog_dbg("%s: ucp: %s: %s", pscom_con_name(uc->con), what, ucs_status_string(st));
    } else {
        plog_err("%s: ucp: %s: %s", pscom_con_name(uc->con), what, ucs_status_string(st));
    }
    rx_stop(uc);
}

/* ---- posting a receive ------------------------------------------------------------- */

/*
 * UCX may complete a receive inside the call that posts it, run its
 * callback there, and still return the request: ucp_tag_msg_recv_nbx() (and
 * ucp_tag_recv_nbx() on a message in its unexpected queue) when the rest of
 * a fragmented eager message is in UCX already. Our callbacks must not take
 * such a request for one of ours: its fields are still those of a request
 * released earlier (taken for an old pre-post, it was freed while UCX
 * handed it to us, and that receive never completed). So receives are
 * posted only through rx_msg_recv() and rx_tag_recv(): while they run, the
 * callbacks only record the completion (rx_post_cb), which they then turn
 * into a completion at once (the request freed, its status returned).
 */
static struct {
    int on;              /* inside rx_msg_recv / rx_tag_recv */
    void *req;           /* the request whose callback ran there, or NULL */
    ucs_status_t status; /* ... its status and length */
    size_t len;
} rx_post;

/* In a receive callback: 1 if it runs inside a post (then recorded). */
static inline int rx_post_cb(void *request, ucs_status_t status, const ucp_tag_recv_info_t *info)
{
    if (pscom_likely(!rx_post.on)) return 0;
    rx_post.req    = request;
    rx_post.status = status;
    rx_post.len    = info ? info->length : SIZE_MAX;
    return 1;
}

/* st as the posting call returned it, or the status of a request that
 * completed inside it (*len: its length, if UCX said). */
static ucs_status_ptr_t rx_post_end(ucs_status_ptr_t st, size_t *len)
{
    rx_post.on = 0;
    if (pscom_likely(!rx_post.req)) return st;
    void *req   = rx_post.req;
    rx_post.req = NULL;
    if (!UCS_PTR_IS_PTR(st) || st != req) { /* not what UCX does */
        plog_err("ucp: a receive callback ran inside the post of another request");
        return st;
    }
    ucp_request_free(st);
    if (len && rx_post.len != SIZE_MAX) *len = rx_post.len;
    return UCS_STATUS_PTR(rx_post.status);
}

/* ucp_tag_msg_recv_nbx() of the probed message msg */
static ucs_status_ptr_t rx_msg_recv(void *buf, size_t count, ucp_tag_message_h msg,
                                    const ucp_request_param_t *prm)
{
    rx_post.on = 1;
    return rx_post_end(ucp_tag_msg_recv_nbx(ucp_g.worker, buf, count, msg, prm), NULL);
}

/* ucp_tag_recv_nbx() of the message with exactly this tag; *len as above */
static ucs_status_ptr_t rx_tag_recv(void *buf, size_t count, ucp_tag_t tag,
                                    const ucp_request_param_t *prm, size_t *len)
{
    rx_post.on = 1;
    return rx_post_end(ucp_tag_recv_nbx(ucp_g.worker, buf, count, tag, UINT64_MAX, prm), len);
}

/* ---- dropping ---------------------------------------------------------------------- */

static void discard_cb(void *request, ucs_status_t status, const ucp_tag_recv_info_t *info,
                       void *user_data)
{
    if (rx_post_cb(request, status, info)) return;
    ucp_req_release(request);
}

ucp_req_t *ucp_rx_discard(ucp_tag_message_h msg, const ucp_tag_recv_info_t *info)
{
    ucp_partial_t *p = partial_new(NULL, 0, info->length);
    if (!p) abort(); /* 24 bytes; a message left in UCX would stay forever */
    ucp_request_param_t prm = {
        .op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_DATATYPE,
        .cb.recv      = discard_cb,
        .datatype     = ucp_g.dt_partial,
    };
    plog_verb("ucp: dropping a message of %zu bytes for connection id %#llx", info->length,
              (unsigned long long)ucpt_id(info->sender_tag));
    ucs_status_ptr_t st = rx_msg_recv(p, 1, msg, &prm);
    if (UCS_PTR_IS_PTR(st)) {
        ucp_req_track(st, UCP_REQ_DISCARD, 0);
        ((ucp_req_t *)st)->partial = p;
        pscom_list_add_tail(&((ucp_req_t *)st)->pep_next, &ucp_g.discards);
        ucp_wake();
        return st;
    }
    free(p);
    return NULL;
}

/* ---- receiving ---------------------------------------------------------------------- */

/* The connection keeps the buffer of its pre-posted receive r (unless it
 * has one): r's message has been delivered, or r was cancelled. */
static inline void rxbuf_keep(ucp_con_t *uc, ucp_req_t *r)
{
    if (!uc->rxbuf && r->buf) {
        uc->rxbuf     = r->buf;
        uc->rxbuf_cap = RXBUF_MIN;
        r->buf        = NULL;
    }
}

/* The receive r, just posted into the connection's buffer, takes that
 * buffer with it (close may come first) and is the one in flight. */
static inline void rxbuf_lend(ucp_con_t *uc, ucp_req_t *r, size_t len, unsigned kind)
{
    r->buf        = uc->rxbuf;
    r->len        = len;
    r->slot       = kind;
    uc->rxbuf     = NULL;
    uc->rxbuf_cap = 0;
    uc->rx_req    = r;
}

/* After a delivery outside ucp_rx_pump: pre-post the next receive at the
 * start of the poller's next pass, or let the pump take the stash. */
static inline void rx_next_later(ucp_con_t *uc)
{
    if (pscom_list_empty(&uc->stash)) {
        if (!pscom_list_linked(&uc->prepost_next)) pscom_list_add_tail(&uc->prepost_next, &ucp_g.prepost);
    } else {
        ucp_dirty(uc);
    }
}

void ucp_rx_after(void)
{
    ucp_req_t *r  = ucp_g.rx_done;
    ucp_con_t *uc = ucp_con_lookup(r->con_id);
    ucp_g.rx_done = NULL;
    if (uc && !uc->closed && !uc->rx_failed) {
        rxbuf_keep(uc, r);
        if (!uc->rx_req && uc->started) rx_next_later(uc);
    }
    ucp_req_release(r);
}

/* The pre-posted receive r has been delivered: the rest (ucp_rx_after)
 * waits for the start of the poller's next pass, off the way from a
 * message to its answer. */
static inline void rx_after_later(ucp_req_t *r)
{
    if (pscom_unlikely(ucp_g.rx_done != NULL)) ucp_rx_after();
    ucp_g.rx_done = r;
}

/* The pre-posted receive r of uc completed inside the poller's progress
 * with a message that a posted receive takes: completed right here
 * (pscom_read_msg_posted calls nothing of ours), so that the application
 * sees it as soon as progress returns. Returns 0 if the core did not take
 * it. */
static inline int rx_posted(ucp_con_t *uc, ucp_req_t *r, size_t len)
{
    if (!pscom_read_msg_posted(uc->con, r->buf, len)) return 0;
    uc->rx_req = NULL;
    uc->rx_seq++;
    rx_after_later(r);
    ucp_g.rx_direct = 1;
    return 1;
}

/* the message of uc's pre-posted receive r may be delivered right away */
static inline int rx_now(const ucp_con_t *uc, const ucp_req_t *r, ucs_status_t status)
{
    return ucp_g.in_poll_progress && status == UCS_OK && uc && uc->rx_req == r && !uc->closed &&
           !uc->rx_busy && !uc->rx_failed;
}

static void recv_cb(void *request, ucs_status_t status, const ucp_tag_recv_info_t *info,
                    void *user_data)
{
    if (pscom_unlikely(rx_post_cb(request, status, info))) return;
    ucp_req_t *r  = request;
    ucp_con_t *uc = ucp_con_lookup(r->con_id);
    ucp_g.rx_cbs++; /* see ucp_poll */
    if (r->type == UCP_REQ_PREPOST) {
        UCP_CRIT_BEGIN();
        ucp_g.preposts--;
        /* the usual small message: delivered now if a posted receive takes
         * it, else by ucp_poll right after progress */
        int now = rx_now(uc, r, status);
        if (now && info && rx_posted(uc, r, info->length)) return;
        r->completed = 1;
        r->status    = status;
        if (info) r->len = info->length;
        if (now && !ucp_g.rx_fast) {
            ucp_g.rx_fast = uc;
            return;
        }
    } else {
        r->completed = 1;
        r->status    = status;
        if (status == UCS_OK && info && info->length != r->len) /* DATA received by tag */
            r->status = UCS_ERR_MESSAGE_TRUNCATED;
    }
    if (!uc || uc->closed || uc->rx_req != r) {
        ucp_req_release(r); /* orphaned by close */
        return;
    }
    ucp_dirty(uc);
}

/* A complete MSG/HEAD is in buf. Returns 1 if the connection stopped reading. */
static inline int deliver(ucp_con_t *uc, const char *buf, size_t len, unsigned kind)
{
    size_t xlen, dlen;
    if (len < 8) goto bad;
    pscom_wire_header_get(buf, &xlen, &dlen);
    if (kind == UCPT_MSG ? len != 8 + xlen + dlen || len > UCP_MSG_MAX : len != 8 + xlen) goto bad;
    if (feed(uc, buf, len, kind)) return 1;
    if (kind == UCPT_HEAD) uc->rx_data_len = dlen;
    return 0;
bad:
    plog_err("%s: ucp: protocol error: message of %zu bytes does not match its header",
             pscom_con_name(uc->con), len);
    rx_stop(uc);
    return 1;
}

/* deliver() for a buffer of ours (a completed receive's), which then
 * becomes the connection's receive buffer if it has none, or is freed */
static inline int deliver_own(ucp_con_t *uc, char *buf, size_t len, unsigned kind)
{
    int stopped = deliver(uc, buf, len, kind);
    if (!stopped && !uc->rxbuf) {
        uc->rxbuf     = buf;
        uc->rxbuf_cap = len > RXBUF_MIN ? len : RXBUF_MIN;
    } else {
        free(buf);
    }
    return stopped;
}

/* All DATA bytes arrived; the first `keep` of them are in the core's buffer. */
static int data_done(ucp_con_t *uc, size_t len, size_t keep)
{
    uc->rx_data_len = 0;
    if (keep >= len) return read_done(uc, len);
    if (read_done(uc, keep)) return 1;
    for (size_t rest = len - keep; rest;) {
        char *b;
        size_t n;
        pscom_read_get_buf(uc->con, &b, &n); /* scratch: the bytes are dropped */
        if (n > rest) n = rest;
        if (read_done(uc, n)) return 1;
        rest -= n;
    }
    return 0;
}

/*
 * DATA: msg is the probed message, or NULL to post the receive by its tag
 * before it arrives (right after its HEAD). UCX writes straight into the
 * buffer pscom_read_get_buf() names, which we pin until data_done(). If
 * that buffer is shorter than the message (a truncating receive, or the
 * core's scratch buffer when nobody receives it), the partial datatype
 * keeps what fits and drops the rest.
 */
static int post_data(ucp_con_t *uc, ucp_tag_message_h msg, size_t len)
{
    char *buf;
    size_t blen;
    pscom_read_get_buf(uc->con, &buf, &blen);
    ucp_request_param_t prm = {
        .op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK,
        .cb.recv      = recv_cb,
    };
    ucp_partial_t *p = NULL;
    void *dst        = buf;
    size_t count     = len;
    size_t keep      = len;
    if (blen < len) {
        p = partial_new(buf, blen, len);
        if (!p) goto nomem;
        prm.op_attr_mask |= UCP_OP_ATTR_FIELD_DATATYPE;
        prm.datatype = ucp_g.dt_partial;
        keep         = blen;
        dst          = p;
        count        = 1;
    } else {
        pscom_read_pin(uc->con);
    }
    ucs_status_ptr_t st;
    ucp_tag_recv_info_t info = {.length = len};
    if (msg) {
        st = rx_msg_recv(dst, count, msg, &prm);
    } else {
        prm.op_attr_mask |= UCP_OP_ATTR_FIELD_RECV_INFO;
        prm.recv_info.tag_info = &info;
        st = rx_tag_recv(dst, count, ucpt_make(uc->id, UCPT_DATA, uc->rx_seq - 1), &prm,
                         &info.length);
        if (!UCS_PTR_IS_ERR(st) && !st && info.length != len) st = UCS_STATUS_PTR(UCS_ERR_MESSAGE_TRUNCATED);
    }
    if (UCS_PTR_IS_PTR(st)) {
        ucp_req_t *r = st;
        ucp_req_track(r, UCP_REQ_DATA, uc->id);
        ucp_peer_req(uc, r);
        r->len     = len;
        r->slot    = keep;
        r->partial = p;
        uc->rx_req = r;
        /* not counted in rx_inflight (PSP_UCP_MAX_RECV, ucp_priv.h) */
        ucp_wake();
        return 0;
    }
    free(p);
    if (UCS_PTR_STATUS(st) != UCS_OK) {
        rx_fail(uc, data_what(UCS_PTR_STATUS(st)), UCS_PTR_STATUS(st));
        return 1;
    }
    return data_done(uc, len, keep);
nomem:
    if (msg) ucp_rx_discard(msg, &(ucp_tag_recv_info_t){.length = len});
    rx_fail(uc, "receive", UCS_ERR_NO_MEMORY);
    return 1;
}

static int post_msg(ucp_con_t *uc, ucp_tag_message_h msg, size_t len, unsigned kind)
{
    if (uc->rxbuf_cap < len) {
        size_t cap = len < RXBUF_MIN ? RXBUF_MIN : len;
        char *b    = malloc(cap);
        if (!b) {
            ucp_rx_discard(msg, &(ucp_tag_recv_info_t){.length = len});
            rx_fail(uc, "receive", UCS_ERR_NO_MEMORY);
            return 1;
        }
        free(uc->rxbuf);
        uc->rxbuf     = b;
        uc->rxbuf_cap = cap;
    }
    ucp_request_param_t prm = {
        .op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK,
        .cb.recv      = recv_cb,
    };
    ucs_status_ptr_t st = rx_msg_recv(uc->rxbuf, len, msg, &prm);
    if (UCS_PTR_IS_PTR(st)) {
        /* the buffer goes with the request: close may come first */
        ucp_req_t *r = st;
        ucp_req_track(r, UCP_REQ_RECV, uc->id);
        ucp_peer_req(uc, r);
        rxbuf_lend(uc, r, len, kind);
        ucp_g.rx_inflight++;
        ucp_wake();
        return 0;
    }
    if (UCS_PTR_STATUS(st) != UCS_OK) {
        rx_fail(uc, "receive", UCS_PTR_STATUS(st));
        return 1;
    }
    return deliver(uc, uc->rxbuf, len, kind);
}

static int rx_handle(ucp_con_t *uc, ucp_tag_message_h msg, const ucp_tag_recv_info_t *info);

/* The connection's next message if UCX has it already (removed from UCX's
 * unexpected queue, with its length in *info), or NULL. What is there is
 * taken as probed, never by a receive posted for its tag: UCX 1.13 does not
 * fill recv_info when such a receive completes at once, so the length of a
 * message taken that way could not be checked (a peer's short DATA or MSG
 * would be delivered with stale bytes at its end). After a miss, a receive
 * posted by tag cannot complete at once (posting does not progress the
 * worker). Any kind: a wrong one is the peer's protocol error. */
static inline ucp_tag_message_h rx_next_there(ucp_con_t *uc, ucp_tag_recv_info_t *info)
{
    return ucp_tag_probe_nb(ucp_g.worker, ucpt_make(uc->id, 0, uc->rx_seq), UCPT_ID_SEQ_MASK, 1,
                            info);
}

/* A HEAD was delivered: unless its DATA was taken from UCX already (then it
 * waits in the stash, or is handled now), post the receive for it by tag
 * now, so that UCX can put the payload in place as it arrives instead of
 * buffering it as an unexpected message first. */
static int data_early(ucp_con_t *uc)
{
    if (!uc->rx_data_len || uc->rx_req || uc->closed || !pscom_list_empty(&uc->stash)) return 0;
    ucp_tag_recv_info_t info;
    ucp_tag_message_h msg = rx_next_there(uc, &info);
    if (msg) return rx_handle(uc, msg, &info);
    uc->rx_seq++;
    return post_data(uc, NULL, uc->rx_data_len);
}

/*
 * An idle connection (nothing in flight, nothing stashed, no payload
 * expected) keeps a receive posted for its next message, if that is a MSG:
 * by its exact tag (connection id, kind, sequence number), into the
 * connection's receive buffer. UCX then places a small message directly
 * (as for an application's pre-posted receive) instead of queueing it as
 * unexpected for our probe. A HEAD that arrives instead is probed as usual;
 * ucp_rx_arrived() then cancels the pre-posted receive first.
 * A MSG that is in UCX's unexpected queue already completes the receive
 * inside the post: with UCP_OP_ATTR_FLAG_NO_IMM_CMPL UCX runs the callback
 * there with the message's length (without the flag UCX 1.13 completes it
 * at once and tells no length, so a short message could not be told from
 * a whole one; until 2026-11-27 each pre-post probed first for that,
 * rx_next_there: about 50 instructions per message).
 * Returns 1 when posted (pending) or the connection stopped reading, 0
 * when a message was delivered at once (the caller looks again).
 */
static const ucp_request_param_t prepost_prm = {
    .op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FLAG_NO_IMM_CMPL,
    .cb.recv      = recv_cb,
};

static int rx_prepost(ucp_con_t *uc)
{
    if (uc->rx_req || uc->rx_data_len || uc->rx_failed || uc->closed || !uc->started ||
        !pscom_list_empty(&uc->stash))
        return 1;
    if (!uc->rxbuf) {
        uc->rxbuf = malloc(RXBUF_MIN);
        if (!uc->rxbuf) return 1; /* then MSGs are probed */
        uc->rxbuf_cap = RXBUF_MIN;
    }
    size_t len = SIZE_MAX; /* unknown: UCX completed it without the callback */
    ucs_status_ptr_t st =
        rx_tag_recv(uc->rxbuf, UCP_MSG_MAX, ucpt_make(uc->id, UCPT_MSG, uc->rx_seq), &prepost_prm,
                    &len);
    if (UCS_PTR_IS_PTR(st)) {
        ucp_req_t *r = st;
        ucp_req_track(r, UCP_REQ_PREPOST, uc->id);
        ucp_g.preposts++;
        rxbuf_lend(uc, r, UCP_MSG_MAX, UCPT_MSG);
        return 1;
    }
    if (UCS_PTR_STATUS(st) != UCS_OK) {
        rx_fail(uc, "receive", UCS_PTR_STATUS(st));
        return 1;
    }
    uc->rx_seq++;
    return deliver(uc, uc->rxbuf, len, UCPT_MSG); /* SIZE_MAX: a protocol error */
}

void ucp_rx_fast(ucp_con_t *uc)
{
    ucp_req_t *r = uc->rx_req;
    if (uc->rx_busy || uc->closed || uc->rx_failed || !r || !r->completed ||
        r->type != UCP_REQ_PREPOST || r->status != UCS_OK) {
        ucp_dirty(uc);
        return;
    }
    /* what ucp_rx_pump does for it, the request released after delivery */
    uc->rx_req = NULL;
    uc->rx_seq++;
    char *buf = r->buf;
    r->buf    = NULL;
    uc->rx_busy = 1;
    int stopped = deliver_own(uc, buf, r->len, UCPT_MSG);
    uc->rx_busy = 0;
    if (stopped) {
        ucp_req_release(r); /* no next receive (closed, failed, or EOF) */
        return;
    }
    rx_after_later(r); /* not before the application sees its message */
}

/* Idle connections post their receive at the start of the poller's next
 * pass, not right after a delivery: that one usually happens inside the
 * application's wait, which then returns at once (its answer goes out
 * before we spend time on the next receive). */
void ucp_rx_preposts(void)
{
    while (!pscom_list_empty(&ucp_g.prepost)) {
        ucp_con_t *uc = pscom_list_entry(ucp_g.prepost.next, ucp_con_t, prepost_next);
        pscom_list_del(&uc->prepost_next);
        uc->prepost_now = 1;
        ucp_rx_pump(uc);
        uc->prepost_now = 0;
    }
}

/* A message was probed while the pre-posted receive waits: take that back
 * (it completes at once, cancelled). Returns 0 if it did not. */
static int prepost_cancel(ucp_con_t *uc)
{
    ucp_req_t *r = uc->rx_req;
    if (!r->completed) ucp_request_cancel(ucp_g.worker, r);
    if (!r->completed || r->status != UCS_ERR_CANCELED) return 0;
    uc->rx_req = NULL;
    rxbuf_keep(uc, r);
    ucp_req_release(r);
    return 1;
}

/* The peer's BYE. Empty: it closed the connection gracefully, everything
 * it sent is on its way or here; what is still on its way must arrive soon
 * (ucp_con_check_failed bounds the wait: a broken peer may have sent a HEAD
 * without its DATA). One byte: it closed the connection after an error;
 * what arrived before is delivered, then the connection fails. Returns 1
 * (the connection reads nothing more after it), or 0 if it was no BYE. */
static int rx_bye(ucp_con_t *uc, ucp_tag_message_h msg, const ucp_tag_recv_info_t *info)
{
    if (ucpt_kind(info->sender_tag) != UCPT_BYE || info->length > 1) return 0;
    ucp_rx_discard(msg, info);
    if (info->length) {
        plog_dbg("%s: ucp: the peer closed the connection after an error",
                 pscom_con_name(uc->con));
        uc->peer_abort = 1;
        ucp_failed(uc);
    } else {
        ucp_con_peer_closed(uc);
    }
    return 1;
}

/* The next message of the connection, in order. Returns 1 if the
 * connection stopped reading. */
static int rx_handle(ucp_con_t *uc, ucp_tag_message_h msg, const ucp_tag_recv_info_t *info)
{
    unsigned kind = ucpt_kind(info->sender_tag);
    uint32_t seq  = ucpt_seq(info->sender_tag);
    if (rx_bye(uc, msg, info)) return 1;
    if (seq != (uc->rx_seq & UCPT_SEQ_MASK) ||
        (uc->rx_data_len ? kind != UCPT_DATA || info->length != uc->rx_data_len
                         : kind == UCPT_DATA || kind > UCPT_DATA)) {
        plog_err("%s: ucp: protocol error: message kind %u seq %u len %zu, expected seq %u%s",
                 pscom_con_name(uc->con), kind, seq, info->length, uc->rx_seq & UCPT_SEQ_MASK,
                 uc->rx_data_len ? " (data)" : "");
        rx_reject(uc, msg, info);
        return 1;
    }
    uc->rx_seq++;
    if (kind == UCPT_DATA) return post_data(uc, msg, info->length);
    if (post_msg(uc, msg, info->length, kind)) return 1;
    return data_early(uc);
}

static void stash(ucp_con_t *uc, ucp_tag_message_h msg, const ucp_tag_recv_info_t *info)
{
    ucp_stash_t *s = malloc(sizeof(*s));
    if (!s) {
        ucp_rx_discard(msg, info);
        rx_fail(uc, "receive", UCS_ERR_NO_MEMORY);
        return;
    }
    s->msg  = msg;
    s->info = *info;
    pscom_list_add_tail(&s->next, &uc->stash);
    uc->nstash++;
}

void ucp_rx_arrived(ucp_tag_message_h msg, const ucp_tag_recv_info_t *info)
{
    ucp_con_t *uc = ucp_con_lookup(ucpt_id(info->sender_tag));
    if (!uc || uc->closed) {
        ucp_rx_discard(msg, info);
        return;
    }
    if (rx_bye(uc, msg, info)) return; /* not behind a DATA that never comes */
    if (uc->rx_req && uc->rx_req->type == UCP_REQ_DATA &&
        ucpt_seq(info->sender_tag) == ((uc->rx_seq - 1) & UCPT_SEQ_MASK)) {
        /* the DATA we receive by its tag would have matched: something else */
        plog_err("%s: ucp: protocol error: message kind %u len %zu where a DATA was due",
                 pscom_con_name(uc->con), ucpt_kind(info->sender_tag), info->length);
        rx_reject(uc, msg, info);
        return;
    }
    if (uc->rx_req && uc->rx_req->type == UCP_REQ_PREPOST && !uc->rx_busy) prepost_cancel(uc);
    if (!uc->started || uc->rx_req || uc->rx_busy || uc->rx_failed ||
        !pscom_list_empty(&uc->stash)) {
        stash(uc, msg, info);
        if (uc->started && !uc->rx_req) ucp_dirty(uc);
        return;
    }
    uc->rx_busy = 1;
    rx_handle(uc, msg, info);
    uc->rx_busy = 0;
    if (!uc->closed && !uc->rx_req) ucp_dirty(uc); /* stashed messages, or a pre-post */
}

void ucp_rx_pump(ucp_con_t *uc)
{
    if (uc->rx_busy) return;
    uc->rx_busy = 1;
    while (!uc->closed && !uc->rx_failed) {
        ucp_req_t *r = uc->rx_req;
        if (r) {
            if (!r->completed) break;
            uc->rx_req = NULL;
            if (r->type == UCP_REQ_PREPOST) {
                if (r->status == UCS_ERR_CANCELED) { /* see prepost_cancel */
                    ucp_req_release(r);
                    continue;
                }
                uc->rx_seq++;
            } else if (r->type == UCP_REQ_RECV) {
                ucp_g.rx_inflight--;
            }
            ucs_status_t status = r->status;
            size_t len          = r->len;
            size_t kind         = r->slot;
            if (status != UCS_OK) {
                int data = r->type == UCP_REQ_DATA;
                ucp_req_release(r);
                rx_fail(uc, data ? data_what(status) : "receive", status);
                break;
            }
            int stopped;
            if (r->type != UCP_REQ_DATA) {
                char *buf = r->buf;
                r->buf    = NULL;
                ucp_req_release(r);
                stopped = deliver_own(uc, buf, len, (unsigned)kind);
                if (!stopped) stopped = data_early(uc);
            } else { /* DATA written in place; kind holds the stored part */
                ucp_req_release(r);
                stopped = data_done(uc, len, kind);
            }
            if (stopped) break;
            continue;
        }
        if (!uc->started) break;
        if (pscom_list_empty(&uc->stash)) {
            if (!uc->prepost_now) { /* at the start of the next poll, see ucp_rx_preposts */
                if (!pscom_list_linked(&uc->prepost_next))
                    pscom_list_add_tail(&uc->prepost_next, &ucp_g.prepost);
                break;
            }
            uc->prepost_now = 0;
            if (rx_prepost(uc)) break;
            continue;
        }
        ucp_stash_t *s = pscom_list_entry(uc->stash.next, ucp_stash_t, next);
        pscom_list_del(&s->next);
        uc->nstash--;
        ucp_tag_message_h msg    = s->msg;
        ucp_tag_recv_info_t info = s->info;
        free(s);
        if (rx_handle(uc, msg, &info)) break;
    }
    uc->rx_busy = 0;
}

/* Before the endpoint is closed: drop the stashed messages and cancel the
 * receive in flight (completes at once unless UCX already matched it). */
void ucp_rx_close(ucp_con_t *uc)
{
    while (!pscom_list_empty(&uc->stash)) {
        ucp_stash_t *s = pscom_list_entry(uc->stash.next, ucp_stash_t, next);
        pscom_list_del(&s->next);
        uc->nstash--;
        ucp_req_t *r = ucp_rx_discard(s->msg, &s->info);
        if (r) ucp_peer_req(uc, r); /* a rendezvous: ends with the peer */
        free(s);
    }
    free(uc->rxbuf);
    uc->rxbuf     = NULL;
    uc->rxbuf_cap = 0;
    if (uc->rx_req && !uc->rx_req->completed) ucp_request_cancel(ucp_g.worker, uc->rx_req);
}

/*
 * After the endpoint was closed: a DATA receive that UCX had matched
 * already writes into the core's buffer (pinned, or a posted receive),
 * which the core frees or hands back to the user as soon as our close op
 * returns. One through the partial datatype (a truncating receive) writes
 * only through pt_unpack: cut off at once, it writes nothing more. Any
 * other one is let end first: progress the worker until it completes.
 * With the endpoint closed UCX fails a rendezvous at once, and an eager
 * message completes as soon as its last fragment is in; if the peer died
 * in the middle of one, nothing more can arrive, and after UCP_RX_DRAIN_US
 * we give up waiting (the request is then orphaned: recv_cb frees it).
 * A live peer that stopped in the middle of one and goes on later still
 * gets its fragments into that buffer: where it is the core's (an
 * unexpected message's), the core leaves it to the request, which frees it
 * when UCX ends it, or at exit (pscom_read_pin_keep; until 2026-11-29 the
 * core freed it and UCX wrote into freed memory: itest_ucp_garbage
 * ucp_garbage_late_unexpected); where it is the user's, it goes back
 * while UCX may still write into it (README.md *Open*; ucp_garbage_late_data
 * shows it with a receive of the message's exact size by hand; until
 * 2026-11-29 also with a truncating one).
 */
void ucp_rx_close_end(ucp_con_t *uc)
{
    ucp_req_t *r = uc->rx_req;
    if (!r) return;
    if (!r->completed && r->type == UCP_REQ_DATA && r->partial) {
        r->partial->keep = 0;
        plog_dbg("%s: ucp: a receive of %zu bytes goes on after the close; nothing more of it "
                 "is stored",
                 pscom_con_name(uc->con), r->len);
    } else if (!r->completed && r->type == UCP_REQ_DATA) {
        uint64_t t0 = ucp_now_us();
        while (!r->completed && ucp_now_us() - t0 < UCP_RX_DRAIN_US) ucp_worker_progress(ucp_g.worker);
        if (!r->completed && (r->held = pscom_read_pin_keep(uc->con))) {
            ucp_req_orphan(r); /* nobody waits for it; at exit, its buffer is freed */
            plog_dbg("%s: ucp: a receive of %zu bytes goes on after the close (%d ms); the "
                     "core's buffer stays with it until UCX ends it",
                     pscom_con_name(uc->con), r->len, UCP_RX_DRAIN_US / 1000);
        } else if (!r->completed) /* not silent: the buffer goes back while UCX may write it */
            plog_err("%s: ucp: a receive of %zu bytes did not end within %d ms of the close; UCX "
                     "may still write into its buffer",
                     pscom_con_name(uc->con), r->len, UCP_RX_DRAIN_US / 1000);
    }
    uc->rx_req = NULL;
    if (r->type == UCP_REQ_RECV) ucp_g.rx_inflight--;
    if (r->completed) ucp_req_release(r);
    /* else recv_cb finds the connection gone and frees it */
}
