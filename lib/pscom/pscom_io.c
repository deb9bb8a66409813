/*
 * pscom_io.c - the byte stream of a connection: parsing incoming messages
 * (header, xheader, data straight into the matched receive buffer) and
 * handing queued sends to the transport as iovecs.
 */
#include <assert.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "pscom_con.h"
#include "pscom_config.h"
#include "pscom_copy.h"
#include "pscom_core.h"
#include "pscom_group.h"
#include "pscom_log.h"
#include "pscom_plugin.h"
#include "pscom_queues.h"
#include "pscom_req.h"
#include "pscom_rma.h"
#include "pscom_rndv.h"
#include "pscom_wire.h"

/* ---- receive ------------------------------------------------------------ */

static char *skip_buf;
static size_t skip_len;

static int in_data_phase(const pscom_con_in_t *in)
{
    return in->req || in->skipping;
}

/* Bytes of the current message that the receiving request stores. */
static size_t store_len(const pscom_con_in_t *in)
{
    size_t cap = in->req ? in->req->pub.data_len : 0;
    return in->data_len < cap ? in->data_len : cap;
}

static int ensure_cap(pscom_con_t *con, size_t need)
{
    pscom_con_in_t *in = &con->in;
    if (in->cap >= need) return 0;
    char *nb = realloc(in->buf, need);
    if (!nb) return -1;
    in->buf = nb;
    in->cap = need;
    return 0;
}

static char *get_skip_buf(size_t *len)
{
    if (!skip_buf) {
        skip_len = pscom_config.skipblocksize ? pscom_config.skipblocksize : 8192;
        skip_buf = malloc(skip_len);
        if (!skip_buf) abort(); /* 8 KiB at start-up */
    }
    *len = skip_len;
    return skip_buf;
}

void pscom_read_get_buf(pscom_con_t *con, char **buf, size_t *len)
{
    pscom_con_in_t *in = &con->in;
    if (in_data_phase(in)) {
        size_t sl = store_len(in);
        if (in->data_done < sl) {
            *buf = (char *)in->req->pub.data + in->data_done;
            *len = sl - in->data_done;
        } else {
            size_t max;
            *buf          = get_skip_buf(&max);
            size_t remain = in->data_len - in->data_done;
            *len          = remain < max ? remain : max;
        }
        return;
    }
    size_t want = pscom_config.readahead < PSCOM_WIRE_HEADER_SIZE ? PSCOM_WIRE_HEADER_SIZE
                                                                  : pscom_config.readahead;
    if (in->cap < want && ensure_cap(con, want) < 0) {
        want = PSCOM_WIRE_HEADER_SIZE; /* low memory: read the header alone */
        if (ensure_cap(con, want) < 0) abort();
    }
    if (in->fill == in->cap) ensure_cap(con, in->cap * 2); /* only when a header outgrew it */
    *buf = in->buf + in->fill;
    *len = in->cap - in->fill;
}

static void message_done(pscom_con_t *con)
{
    pscom_con_in_t *in = &con->in;
    pscom_req_t *req   = in->req;
    in->req            = NULL;
    in->skipping       = 0;
    in->data_done = in->data_len = 0;
    if (!req) return;
    if (req->on_done) {
        req->on_done(req);
    } else if (req->pub.state & PSCOM_REQ_STATE_GRECV_REQUEST) {
        req->data_done = req->pub.data_len;
        pscom_unexpected_done(req);
    } else {
        pscom_req_complete(req);
    }
}

/* n data bytes of the current message arrived at src (copy to the request). */
static void store_data(pscom_con_in_t *in, const char *src, size_t n)
{
    size_t sl = store_len(in);
    if (in->data_done < sl) {
        size_t c = sl - in->data_done < n ? sl - in->data_done : n;
        pscom_memcpy_small((char *)in->req->pub.data + in->data_done, src, c);
    }
    in->data_done += n;
    if (in->req) in->req->data_done = in->data_done;
}

static int protocol_error(pscom_con_t *con, const char *what, unsigned value)
{
    plog_err("%s: protocol error: %s (%u); closing the connection", pscom_con_name(con), what,
             value);
    pscom_con_transport_error(con, PSCOM_OP_READ, EPROTO);
    return 1;
}

/* A complete header + xheader is at hn (in->buf, or a transport's buffer
 * holding a whole message, see pscom_read_feed). Returns 1 to stop reading. */
static int dispatch(pscom_con_t *con, pscom_header_net_t *hn, uint8_t type, uint64_t dlen)
{
    pscom_con_in_t *in = &con->in;
    in->data_len       = (size_t)dlen;
    in->data_done      = 0;
    int err;
    if (pscom_unlikely(con->user_closed) &&
        (type == PSCOM_MSGTYPE_USER || type == PSCOM_MSGTYPE_BCAST ||
         type == PSCOM_MSGTYPE_BARRIER)) {
        /* closed by the user: nothing of it is delivered any more (its
         * unexpected and collective messages were dropped at the close, a
         * rendezvous announcement is declined); the data is skipped */
        plog_dbg("%s: message of type %u with %llu data bytes after the close dropped",
                 pscom_con_name(con), type, (unsigned long long)dlen);
        in->req = NULL;
        return 0;
    }
    switch (type) {
    case PSCOM_MSGTYPE_USER:
        in->req = pscom_match_incoming(con, hn, NULL);
        if (!in->req) return protocol_error(con, "unexpected message too large to buffer", 0);
        return 0;
    case PSCOM_MSGTYPE_EOF:
        if (dlen) return protocol_error(con, "EOF message with data", (unsigned)dlen);
        return 0;
    case PSCOM_MSGTYPE_PAD: /* dropped: no request, the data is skipped */
        if (hn->xheader_len || dlen >= PSCOM_WIRE_PAD_MAX)
            return protocol_error(con, "malformed PAD message", (unsigned)dlen);
        return 0;
    case PSCOM_MSGTYPE_RENDEZVOUS_REQ:
    case PSCOM_MSGTYPE_RENDEZVOUS_CTS:
    case PSCOM_MSGTYPE_RENDEZVOUS_DATA:
    case PSCOM_MSGTYPE_RENDEZVOUS_FIN:
        err = pscom_rndv_recv(con, hn, &in->req);
        break;
    case PSCOM_MSGTYPE_BCAST:
    case PSCOM_MSGTYPE_BARRIER:
        err = pscom_group_recv(con, hn, &in->req);
        break;
    case PSCOM_MSGTYPE_RMA_WRITE:
    case PSCOM_MSGTYPE_RMA_READ:
    case PSCOM_MSGTYPE_RMA_READ_ANSWER:
    case PSCOM_MSGTYPE_RMA_PUT:
    case PSCOM_MSGTYPE_RMA_PUT_DONE:
    case PSCOM_MSGTYPE_RMA_ACCUMULATE:
    case PSCOM_MSGTYPE_RMA_GET_REQ:
    case PSCOM_MSGTYPE_RMA_GET_DONE:
    case PSCOM_MSGTYPE_RMA_GET_REP:
    case PSCOM_MSGTYPE_RMA_GET_ACCUMULATE_REQ:
    case PSCOM_MSGTYPE_RMA_GET_ACCUMULATE_REP:
    case PSCOM_MSGTYPE_RMA_FETCH_AND_OP_REQ:
    case PSCOM_MSGTYPE_RMA_FETCH_AND_OP_REP:
    case PSCOM_MSGTYPE_RMA_COMPARE_AND_SWAP_REQ:
    case PSCOM_MSGTYPE_RMA_COMPARE_AND_SWAP_REP:
        err = pscom_rma_recv(con, hn, &in->req);
        break;
    default:
        return protocol_error(con, "unknown message type", type);
    }
    if (err) return protocol_error(con, "malformed control message", type);
    return 0;
}

/* The message whose header + xheader (need bytes) are at p, followed by
 * avail - need bytes of its data, is taken: dispatched, and the data at hand
 * stored; *used: the bytes consumed. Then the caller moves its buffer on
 * and calls message_check_done(). Returns 1 to stop reading. */
static int take_message(pscom_con_t *con, char *p, size_t need, size_t avail, uint8_t type,
                        uint64_t dlen, size_t *used)
{
    pscom_con_in_t *in = &con->in;
    if (dispatch(con, (pscom_header_net_t *)p, type, dlen)) return 1;
    if (pscom_unlikely(con->transport_closed)) return 1; /* closed by the message */
    size_t take = avail - need < in->data_len ? avail - need : in->data_len;
    if (take) store_data(in, p + need, take);
    *used = need + take;
    return 0;
}

/* len bytes arrived after the peer's EOF message. The read side ended
 * there (spec 5.7): they are not parsed. A peer that sends after its EOF
 * is broken (ours never does: nothing is queued behind an EOF), so this is
 * a protocol error. Returns 1 (stop reading). */
static int after_eof(pscom_con_t *con, size_t len)
{
    if (!len) return 1;
    plog_err("%s: protocol error: message after the peer's EOF (%zu bytes); closing the "
             "connection",
             pscom_con_name(con), len);
    pscom_con_transport_error(con, PSCOM_OP_READ, EPROTO);
    return 1;
}

/* After take_message() and moving the buffer on (rest: bytes behind the
 * message in the caller's buffer): complete the message if all its data
 * is in. Returns 1 to stop reading: an EOF, or the message's completion
 * closed the connection (say a rendezvous answer that failed to go out),
 * and no later message may be taken then: none would ever complete. */
static int message_check_done(pscom_con_t *con, uint8_t type, size_t rest)
{
    pscom_con_in_t *in = &con->in;
    if (in->data_done != in->data_len) {
        in->skipping = !in->req;
        return 0;
    }
    message_done(con);
    if (pscom_unlikely(type == PSCOM_MSGTYPE_EOF)) {
        in->fill = 0; /* the read side ends here */
        pscom_con_eof_received(con);
        return after_eof(con, rest); /* (said even if our EOF had left: closed now) */
    }
    return pscom_unlikely(con->transport_closed);
}

/* Parse what the readahead buffer holds. Returns 1 to stop reading. */
static int process_buffer(pscom_con_t *con)
{
    pscom_con_in_t *in = &con->in;
    while (!in_data_phase(in) && in->fill >= PSCOM_WIRE_HEADER_SIZE) {
        uint16_t xlen;
        uint8_t type;
        uint64_t dlen;
        pscom_wire_header_decode(in->buf, &xlen, &type, &dlen);
        size_t need = PSCOM_WIRE_HEADER_SIZE + xlen;
        if (in->fill < need) {
            if (ensure_cap(con, need) < 0) return protocol_error(con, "xheader too large", xlen);
            return 0;
        }
        size_t used;
        if (take_message(con, in->buf, need, in->fill, type, dlen, &used)) return 1;
        if (in->fill > used) memmove(in->buf, in->buf + used, in->fill - used);
        in->fill -= used;
        if (message_check_done(con, type, in->fill)) return 1;
    }
    return 0;
}

size_t pscom_read_drop_len(pscom_con_t *con)
{
    const pscom_con_in_t *in = &con->in;
    if (!in_data_phase(in) || in->pinned) return 0;
    return in->data_done < store_len(in) ? 0 : in->data_len - in->data_done;
}

void pscom_read_pin(pscom_con_t *con)
{
    con->in.pinned = 1;
}

int pscom_read_req_core_own(const pscom_con_t *con, const pscom_req_t *req)
{
    /* an unexpected message's, or one dropped while the transport filled it */
    return (req->pub.state & PSCOM_REQ_STATE_GRECV_REQUEST) || con->in.pin_drop;
}

void pscom_read_drop_req(pscom_con_t *con, pscom_req_t *gen)
{
    pscom_con_in_t *in = &con->in;
    if (in->req == gen) {
        if (in->pinned) { /* the transport writes into gen: at its read_done */
            in->pin_drop = 1;
            return;
        }
        in->req      = NULL; /* the rest of this message is dropped */
        in->skipping = 1;
    }
    pscom_req_free(gen);
}

void *pscom_read_pin_keep(pscom_con_t *con)
{
    pscom_con_in_t *in = &con->in;
    pscom_req_t *gen   = in->req;
    if (!in->pinned || !gen || !pscom_read_req_core_own(con, gen)) return NULL;
    /* out of the unexpected queues (if a drop has not taken it already);
     * a receive that matched it (pin_merge) fails with the connection */
    pscom_list_del(&gen->next);
    pscom_list_del(&gen->next_alt);
    in->req      = NULL;
    in->pinned   = 0;
    in->pin_drop = 0;
    return gen;
}

void pscom_read_pin_release(void *held)
{
    pscom_req_free(held);
}

/* The pinned buffer is filled up to data_done + len: now do what was
 * deferred for its unexpected request (pscom_queues.c merge() and
 * pscom_unexpected_drop_con()). */
static void read_unpin(pscom_con_t *con, size_t len)
{
    pscom_con_in_t *in = &con->in;
    pscom_req_t *gen   = in->req;
    in->pinned         = 0;
    if (in->pin_merge) {
        pscom_req_t *req = in->pin_merge;
        size_t have      = in->data_done + len;
        size_t copy      = have < req->pub.data_len ? have : req->pub.data_len;
        in->pin_merge    = NULL;
        if (copy) memcpy(req->pub.data, gen->pub.data, copy);
        in->req = req;
        pscom_req_free(gen);
    } else if (in->pin_drop) {
        in->pin_drop = 0;
        in->req      = NULL;
        in->skipping = 1;
        pscom_req_free(gen);
    }
}

int pscom_read_done(pscom_con_t *con, size_t len)
{
    pscom_con_in_t *in = &con->in;
    if (pscom_unlikely(in->pinned)) read_unpin(con, len);
    if (!len) return 0;
    pscom.progress_counter++;
    if (pscom_unlikely(con->eof_received)) return con->transport_closed ? 1 : after_eof(con, len);
    if (in_data_phase(in)) {
        in->data_done += len;
        if (in->req) in->req->data_done = in->data_done;
        if (in->data_done < in->data_len) return 0;
        message_done(con);
        if (pscom_unlikely(con->transport_closed)) return 1; /* closed by its completion */
        return in->fill ? process_buffer(con) : 0;
    }
    in->fill += len;
    return process_buffer(con);
}

/* Between messages, nothing buffered: a message at buf can be parsed where
 * it is (hn must be aligned like in->buf for the message handlers). */
static inline int in_place(const pscom_con_in_t *in, const char *buf, size_t len)
{
    return !in->fill && !in_data_phase(in) && !in->pinned && len >= PSCOM_WIRE_HEADER_SIZE &&
           !((uintptr_t)buf & 7);
}

/* The short way: between messages, a USER message for a plain posted
 * receive. What the general parser would do with it, without its
 * byte-stream state (take_message, store_data, message_done). */
int pscom_read_msg_posted(pscom_con_t *con, const char *buf, size_t len)
{
    if (!in_place(&con->in, buf, len)) return 0;
    uint16_t xlen;
    uint8_t type;
    uint64_t dlen;
    pscom_wire_header_decode(buf, &xlen, &type, &dlen);
    pscom_req_t *req;
    if (type != PSCOM_MSGTYPE_USER || len != PSCOM_WIRE_HEADER_SIZE + xlen + dlen ||
        !(req = pscom_match_first_posted(con, (pscom_header_net_t *)buf, xlen, dlen)))
        return 0;
    size_t n = dlen < req->pub.data_len ? (size_t)dlen : req->pub.data_len;
    pscom_memcpy_small(req->pub.data, buf + PSCOM_WIRE_HEADER_SIZE + xlen, n);
    pscom_req_complete(req); /* counts as progress */
    return 1;
}

int pscom_read_msg(pscom_con_t *con, const char *buf, size_t len)
{
    if (pscom_read_msg_posted(con, buf, len)) return 0;
    return pscom_read_feed(con, buf, len);
}

int pscom_read_feed(pscom_con_t *con, const char *buf, size_t len)
{
    pscom_con_in_t *in = &con->in;
    if (pscom_unlikely(con->eof_received)) return con->transport_closed ? 1 : after_eof(con, len);
    /* Fast path: a message-oriented transport feeds whole messages. While
     * the parser is between messages (nothing buffered), one whose header
     * and xheader are here is parsed in place, its data stored straight from
     * buf: no copy into the readahead buffer. */
    while (in_place(in, buf, len)) {
        uint16_t xlen;
        uint8_t type;
        uint64_t dlen;
        pscom_wire_header_decode(buf, &xlen, &type, &dlen);
        size_t need = PSCOM_WIRE_HEADER_SIZE + xlen;
        if (len < need) break;
        size_t used;
        pscom.progress_counter++;
        if (take_message(con, (char *)buf, need, len, type, dlen, &used)) return 1;
        buf += used;
        len -= used;
        if (message_check_done(con, type, len)) return 1;
        if (!len) return 0; /* the usual case: one whole message */
    }
    while (len) {
        char *dst;
        size_t n;
        pscom_read_get_buf(con, &dst, &n);
        if (n > len) n = len;
        memcpy(dst, buf, n);
        buf += n;
        len -= n;
        if (pscom_read_done(con, n)) return 1;
    }
    return 0;
}

/* ---- send --------------------------------------------------------------- */

static size_t head_len(const pscom_req_t *req)
{
    return PSCOM_WIRE_HEADER_SIZE + req->pub.header.xheader_len;
}

int pscom_write_pending(pscom_con_t *con)
{
    return !pscom_list_empty(&con->sendq);
}

/*
 * PAD messages (transports with PSCOM_PLUGIN_CAP_STREAM_PAD). The kernel
 * copies between user memory and socket buffers with `rep movsb`, which on
 * some CPUs (AMD EPYC with FSRM, measured on our machines: 3 instead of
 * 45 GB/s) takes a slow path when the destination is 1..15 bytes ahead of
 * the source modulo the page size. A write to a socket whose earlier data
 * has all been taken fills its kernel buffer pages from offset 0, so the
 * sender decides where a payload lands in them: we put it at its own
 * address + 32 modulo 64. The copy into the socket buffer then runs 32
 * bytes ahead, and the receiver's copy out into a buffer aligned like the
 * send buffer (the usual case, e.g. both from malloc) 32 bytes behind:
 * both far from the slow window, and either may be off by up to 16.
 * Payloads below PAD_MIN_DATA are not worth the extra bytes.
 */
#define PAD_MIN_DATA 1024
#define PAD_TARGET   32

static unsigned char pad_msgs[PSCOM_WIRE_PAD_MAX][PSCOM_WIRE_HEADER_SIZE + PSCOM_WIRE_PAD_MAX];

/* The PAD message with n data bytes (header and zeros). */
static const unsigned char *pad_msg(unsigned n)
{
    unsigned char *m = pad_msgs[n];
    if (pscom_unlikely(m[2] != PSCOM_MSGTYPE_PAD)) /* first use */
        pscom_wire_header_encode(m, 0, PSCOM_MSGTYPE_PAD, n);
    return m;
}

/* Bytes of PAD in front of req when its first byte goes out pos bytes
 * into the current write. */
static unsigned pad_for(const pscom_req_t *req, size_t pos)
{
    if (req->pub.data_len < PAD_MIN_DATA) return 0;
    uintptr_t lands = pos + PSCOM_WIRE_HEADER_SIZE + head_len(req); /* data with an empty pad */
    unsigned n      = (unsigned)(((uintptr_t)req->pub.data + PAD_TARGET - lands) & 63);
    return PSCOM_WIRE_HEADER_SIZE + n;
}

int pscom_write_get_iov(pscom_con_t *con, struct iovec *iov, int max)
{
    int n      = 0;
    size_t pos = 0; /* bytes in iov[0..n) */
    int pads   = (con->transport->caps & PSCOM_PLUGIN_CAP_STREAM_PAD) != 0;
    pscom_list_t *it;
    pscom_list_for_each(it, &con->sendq) {
        pscom_req_t *req = pscom_list_entry(it, pscom_req_t, next);
        size_t off       = req->send_off;
        if (n == max) break;
        if (off == 0 && pads) req->send_pad = pad_for(req, pos);
        size_t pl       = req->send_pad;
        size_t head_end = pl + head_len(req); /* pad, header and xheader */
        if (off < pl) {
            const unsigned char *m = pad_msg(pl - PSCOM_WIRE_HEADER_SIZE);
            iov[n].iov_base = (void *)(m + off);
            iov[n].iov_len  = pl - off;
            pos += iov[n++].iov_len;
            off = pl;
            if (n == max) break;
        }
        if (off < head_end) {
            iov[n].iov_base = (char *)&req->pub.header + (off - pl);
            iov[n].iov_len  = head_end - off;
            pos += iov[n++].iov_len;
            off = head_end;
        }
        size_t doff = off - head_end;
        if (req->pub.data_len > doff) {
            if (n == max) break;
            iov[n].iov_base = (char *)req->pub.data + doff;
            iov[n].iov_len  = req->pub.data_len - doff;
            pos += iov[n++].iov_len;
        }
    }
    return n;
}

int pscom_write_peek(pscom_con_t *con, unsigned idx, struct iovec *head, struct iovec *data)
{
    pscom_list_t *pos;
    pscom_list_for_each(pos, &con->sendq) {
        if (idx--) continue;
        pscom_req_t *req = pscom_list_entry(pos, pscom_req_t, next);
        assert(req->send_off == 0);
        /* handed to the transport: no cancel */
        pscom_req_state_add(&req->pub, PSCOM_REQ_STATE_IO_STARTED);
        head->iov_base = &req->pub.header;
        head->iov_len  = head_len(req);
        data->iov_base = req->pub.data;
        data->iov_len  = req->pub.data_len;
        return 1;
    }
    return 0;
}

void pscom_wire_header_get(const void *head, size_t *xheader_len, size_t *data_len)
{
    uint16_t x;
    uint8_t t;
    uint64_t d;
    pscom_wire_header_decode(head, &x, &t, &d);
    *xheader_len = x;
    *data_len    = (size_t)d;
}

/* A send request left the transport's hands for good. */
static void send_complete(pscom_req_t *req)
{
    if (req->on_done) {
        pscom.progress_counter++; /* pscom_req_complete counts the others */
        req->on_done(req);
    } else {
        pscom_req_complete(req);
    }
}

static void send_done(pscom_con_t *con, pscom_req_t *req)
{
    pscom_list_del(&req->next);
    send_complete(req);
}

int pscom_write_now(pscom_con_t *con, pscom_req_t *req)
{
    int (*write_now)(pscom_con_t *, void *, const void *, size_t, const void *, size_t) =
        con->transport ? con->transport->ops->write_now : NULL;
    if (!write_now || con->precon || !pscom_list_empty(&con->sendq)) return 0;
    if (!write_now(con, con->plugin_priv, &req->pub.header, head_len(req), req->pub.data,
                   req->pub.data_len))
        return 0;
    pscom_req_state_add(&req->pub, PSCOM_REQ_STATE_IO_STARTED);
    send_complete(req); /* counts as progress */
    return 1;
}

int pscom_write_done(pscom_con_t *con, size_t len)
{
    if (len) pscom.progress_counter++;
    while (len) {
        assert(!pscom_list_empty(&con->sendq));
        pscom_req_t *req = pscom_list_entry(con->sendq.next, pscom_req_t, next);
        size_t total     = req->send_pad + head_len(req) + req->pub.data_len;
        size_t c         = total - req->send_off < len ? total - req->send_off : len;
        req->send_off += c;
        len -= c;
        pscom_req_state_add(&req->pub, PSCOM_REQ_STATE_IO_STARTED);
        if (req->send_off == total) send_done(con, req);
    }
    return con->transport_closed;
}
