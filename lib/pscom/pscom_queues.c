/*
 * pscom_queues.c - matching of USER messages to receives (spec 5.3).
 *
 * Posted receives live in one of three queues: the connection's
 * recvq_user, the socket's recvq_any (any-source receives, plus specific
 * ones posted while an any-source receive was pending, to keep post order)
 * and the global any-queue. Unexpected messages become generated requests
 * linked into their connection's genrecvq and the socket's genrecvq_any.
 */
#include "pscom_queues.h"

#include "pscom_group.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include "pscom_con.h"
#include "pscom_copy.h"
#include "pscom_core.h"
#include "pscom_log.h"
#include "pscom_misuse.h"
#include "pscom_req.h"
#include "pscom_rndv.h"
#include "pscom_sock.h"
#include "pscom_wire.h"

static int accepts(pscom_req_t *req, pscom_con_t *con, pscom_header_net_t *hn)
{
    int (*recv_accept)(pscom_request_t *, pscom_connection_t *, pscom_header_net_t *) =
        req->pub.ops.recv_accept;
    return !recv_accept || recv_accept(&req->pub, &con->pub, hn);
}

static void enqueue(pscom_req_t *req, pscom_list_t *queue)
{
    req->queue = queue;
    pscom_list_add_tail(&req->next, queue);
}

static void dequeue(pscom_req_t *req)
{
    pscom_list_del(&req->next);
    req->queue = NULL;
}

/* Where a specific receive goes when nothing matched at post time. */
static void place_specific(pscom_req_t *req, pscom_con_t *con, int may_park_global)
{
    if (may_park_global && !pscom_list_empty(&pscom.recvq_any_global)) {
        enqueue(req, &pscom.recvq_any_global);
    } else if (!pscom_list_empty(&con->sock->recvq_any)) {
        enqueue(req, &con->sock->recvq_any);
    } else {
        enqueue(req, &con->recvq_user);
    }
}

/* After an any-source receive left queue q: specific receives now at its
 * head were only parked there; move them back to their connections. */
static void unpark_specifics(pscom_list_t *q)
{
    while (!pscom_list_empty(q)) {
        pscom_req_t *req = pscom_list_entry(q->next, pscom_req_t, next);
        if (!req->pub.connection) break;
        dequeue(req);
        pscom_con_t *con = pscom_con_from_pub(req->pub.connection);
        if (q == &pscom.recvq_any_global) {
            place_specific(req, con, 0);
        } else {
            enqueue(req, &con->recvq_user);
        }
    }
}

static void dequeue_posted(pscom_req_t *req)
{
    pscom_list_t *q = req->queue;
    int was_any     = req->pub.connection == NULL;
    dequeue(req);
    if (was_any) unpark_specifics(q);
}

/* First request of q that takes a message from con. */
static pscom_req_t *find_posted(pscom_list_t *q, pscom_con_t *con, pscom_header_net_t *hn,
                                int any_queue)
{
    pscom_list_t *pos;
    pscom_list_for_each(pos, q) {
        pscom_req_t *req = pscom_list_entry(pos, pscom_req_t, next);
        if (any_queue && req->pub.connection && req->pub.connection != &con->pub) continue;
        if (accepts(req, con, hn)) return req;
    }
    return NULL;
}

static size_t xheader_copy_len(pscom_req_t *req, size_t incoming)
{
    size_t n = req->pub.xheader_len;
    if (n > req->pub.max_xheader_len) n = req->pub.max_xheader_len;
    return n < incoming ? n : incoming;
}

/* The matched request takes the message's header and xheader. */
static inline void take_header(pscom_req_t *req, pscom_con_t *con, pscom_header_net_t *hn,
                               size_t xlen, uint64_t dlen)
{
    memcpy(&req->pub.header, hn, sizeof(pscom_header_net_t));
    pscom_memcpy_small(&req->pub.xheader, hn + 1, xheader_copy_len(req, xlen));
    req->pub.connection = &con->pub;
    req->pub.socket     = &con->sock->pub;
    pscom_req_state_add(&req->pub, PSCOM_REQ_STATE_IO_STARTED |
                                       (dlen > req->pub.data_len ? PSCOM_REQ_STATE_TRUNCATED : 0));
}

static pscom_req_t *create_unexpected(pscom_con_t *con, size_t xlen, uint64_t dlen,
                                      const pscom_rndv_rts_t *rndv)
{
    if (dlen > SIZE_MAX / 2) return NULL;
    size_t store     = rndv ? sizeof(*rndv) : (size_t)dlen;
    pscom_req_t *gen = pscom_req_create(xlen, store);
    if (!gen) return NULL;
    pscom_req_state_set(&gen->pub, PSCOM_REQ_STATE_GRECV_REQUEST);
    gen->pub.data        = gen->pub.user;
    if (rndv) {
        /* only the announcement is kept; the data stays with the sender */
        memcpy(gen->pub.user, rndv, sizeof(*rndv));
        gen->pub.data = NULL;
        gen->flags |= PSCOM_REQF_RNDV;
        pscom_req_state_add(&gen->pub, PSCOM_REQ_STATE_RENDEZVOUS_REQUEST);
    }
    gen->pub.data_len    = (size_t)dlen;
    gen->pub.xheader_len = xlen;
    gen->con             = con;
    pscom_list_add_tail(&gen->next, &con->genrecvq);
    pscom_list_add_tail(&gen->next_alt, &con->sock->genrecvq_any);
    pscom.stats.gen_reqs++;
    return gen;
}

pscom_req_t *pscom_match_incoming(pscom_con_t *con, pscom_header_net_t *hn,
                                  const pscom_rndv_rts_t *rndv)
{
    pscom_sock_t *sock = con->sock;
    uint16_t xlen;
    uint8_t type;
    uint64_t dlen;
    pscom_req_t *req = NULL;

    pscom_wire_header_decode(hn, &xlen, &type, &dlen);

    if (sock->pub.ops.default_recv) {
        pscom_request_t *r = sock->pub.ops.default_recv(&con->pub, hn);
        if (r) {
            req = pscom_req_from_pub(r);
            pscom_api_check(req->magic == PSCOM_REQ_MAGIC,
                            "default_recv returns a request of pscom_request_create()");
            pscom_api_check(r->state & PSCOM_REQ_STATE_DONE, "default_recv returns a DONE request");
            pscom_req_state_set(r, PSCOM_REQ_STATE_RECV_REQUEST);
            goto matched;
        }
    }
    if ((req = find_posted(&con->recvq_user, con, hn, 0))) {
        dequeue_posted(req);
    } else if ((req = find_posted(&sock->recvq_any, con, hn, 1))) {
        dequeue_posted(req);
    } else if (!pscom_list_empty(&pscom.recvq_any_global) &&
               (req = find_posted(&pscom.recvq_any_global, con, hn, 1))) {
        dequeue_posted(req);
    } else {
        req = create_unexpected(con, xlen, dlen, rndv);
        if (!req) {
            plog_err("%s: cannot buffer an unexpected message of %llu bytes: %m",
                     pscom_con_name(con), (unsigned long long)dlen);
            return NULL;
        }
    }
matched:
    take_header(req, con, hn, xlen, dlen);
    return req;
}

pscom_req_t *pscom_match_first_posted(pscom_con_t *con, pscom_header_net_t *hn, size_t xlen,
                                      uint64_t dlen)
{
    if (con->sock->pub.ops.default_recv || pscom_list_empty(&con->recvq_user) ||
        pscom_unlikely(con->user_closed)) /* dropped by the long way */
        return NULL;
    pscom_req_t *req = pscom_list_entry(con->recvq_user.next, pscom_req_t, next);
    if (req->pub.ops.recv_accept || req->on_done) return NULL;
    dequeue(req); /* a specific receive: nothing to unpark */
    take_header(req, con, hn, xlen, dlen);
    return req;
}

void pscom_unexpected_done(pscom_req_t *gen)
{
    pscom_req_state_add(&gen->pub, PSCOM_REQ_STATE_IO_DONE | PSCOM_REQ_STATE_DONE);
}

static void unexpected_unlink(pscom_req_t *gen)
{
    pscom_list_del(&gen->next);
    pscom_list_del(&gen->next_alt);
}

/* Hand an unexpected message over to the user's receive. */
static void merge(pscom_req_t *req, pscom_req_t *gen)
{
    pscom_con_t *con = gen->con;
    size_t dlen      = gen->pub.data_len;
    size_t copy      = gen->data_done < req->pub.data_len ? gen->data_done : req->pub.data_len;
    if (gen->flags & PSCOM_REQF_RNDV) copy = 0;

    unexpected_unlink(gen);
    memcpy(&req->pub.header, &gen->pub.header,
           sizeof(pscom_header_net_t) + xheader_copy_len(req, gen->pub.header.xheader_len));
    req->pub.connection = gen->pub.connection;
    req->pub.socket     = gen->pub.socket;
    pscom_req_state_add(&req->pub, PSCOM_REQ_STATE_IO_STARTED |
                                       (dlen > req->pub.data_len ? PSCOM_REQ_STATE_TRUNCATED : 0));
    if (copy) memcpy(req->pub.data, gen->pub.data, copy);

    pscom_req_state_add(&gen->pub, PSCOM_REQ_STATE_GRECV_MERGED);
    if (gen->flags & PSCOM_REQF_RNDV) {
        pscom_rndv_rts_t rts;
        memcpy(&rts, gen->pub.user, sizeof(rts));
        pscom_req_free(gen);
        pscom_rndv_matched(con, req, &rts);
    } else if (gen->pub.state & PSCOM_REQ_STATE_IO_DONE) {
        pscom_req_free(gen);
        pscom_req_complete(req);
    } else {
        assert(con->in.req == gen);
        if (con->in.pinned) { /* the transport writes into gen: at its read_done */
            con->in.pin_merge = req;
            return;
        }
        /* still arriving: the rest goes straight into the user's buffer */
        con->in.req = req;
        pscom_req_free(gen);
    }
}

static pscom_req_t *find_unexpected_in(pscom_list_t *q, int alt, pscom_request_t *request)
{
    pscom_list_t *pos;
    pscom_list_for_each(pos, q) {
        pscom_req_t *gen = alt ? pscom_list_entry(pos, pscom_req_t, next_alt)
                               : pscom_list_entry(pos, pscom_req_t, next);
        pscom_req_t *req = pscom_req_from_pub(request);
        if (accepts(req, gen->con, &gen->pub.header)) return gen;
    }
    return NULL;
}

pscom_req_t *pscom_unexpected_find(pscom_request_t *request)
{
    if (request->connection) {
        pscom_con_t *con = pscom_con_from_pub(request->connection);
        return find_unexpected_in(&con->genrecvq, 0, request);
    }
    if (request->socket) {
        pscom_sock_t *sock = pscom_sock_from_pub(request->socket);
        return find_unexpected_in(&sock->genrecvq_any, 1, request);
    }
    pscom_list_t *pos;
    pscom_list_for_each(pos, &pscom.sockets) {
        pscom_sock_t *sock = pscom_list_entry(pos, pscom_sock_t, next);
        pscom_req_t *gen   = find_unexpected_in(&sock->genrecvq_any, 1, request);
        if (gen) return gen;
    }
    return NULL;
}

void pscom_recv_post(pscom_req_t *req)
{
    pscom_request_t *r = &req->pub;
    int socket_given   = r->socket != NULL;

    pscom_req_t *gen = pscom_unexpected_find(r);
    if (gen) {
        merge(req, gen);
        return;
    }
    if (r->connection) {
        pscom_con_t *con = pscom_con_from_pub(r->connection);
        r->socket        = &con->sock->pub;
        if (!pscom_con_readable(con)) {
            /* nothing more will arrive on this connection */
            pscom_req_complete_with(req, PSCOM_REQ_STATE_ERROR);
            return;
        }
        place_specific(req, con, !socket_given);
    } else if (r->socket) {
        enqueue(req, &pscom_sock_from_pub(r->socket)->recvq_any);
    } else {
        enqueue(req, &pscom.recvq_any_global);
    }
}

int pscom_recv_cancel(pscom_req_t *req)
{
    if (!req->queue) return 0;
    dequeue_posted(req);
    pscom_req_complete_with(req, PSCOM_REQ_STATE_CANCELED);
    return 1;
}

void pscom_unexpected_drop_con(pscom_con_t *con)
{
    /* one at a time from the head: telling a rendezvous sender may feed a
     * loopback connection's answers at once */
    while (!pscom_list_empty(&con->genrecvq)) {
        pscom_req_t *gen = pscom_list_entry(con->genrecvq.next, pscom_req_t, next);
        unexpected_unlink(gen);
        if (gen->flags & PSCOM_REQF_RNDV) {
            /* an announcement (never the message being read): its sender
             * waits for an answer, and would keep its EOF back for it */
            pscom_rndv_rts_t rts;
            memcpy(&rts, gen->pub.user, sizeof(rts));
            pscom_req_free(gen);
            pscom_rndv_decline(con, &rts);
            continue;
        }
        pscom_read_drop_req(con, gen);
    }
    pscom_group_drop_con(con);
}

static void fail_matching(pscom_list_t *q, pscom_con_t *con)
{
    pscom_list_t *pos, *tmp;
    pscom_list_for_each_safe(pos, tmp, q) {
        pscom_req_t *req = pscom_list_entry(pos, pscom_req_t, next);
        if (con && req->pub.connection != &con->pub) continue;
        dequeue(req);
        pscom_req_complete_with(req, PSCOM_REQ_STATE_ERROR);
    }
}

void pscom_recv_fail_con(pscom_con_t *con)
{
    fail_matching(&con->recvq_user, NULL);
    fail_matching(&con->sock->recvq_any, con);
    fail_matching(&pscom.recvq_any_global, con);
    unpark_specifics(&con->sock->recvq_any);
    unpark_specifics(&pscom.recvq_any_global);
}

void pscom_recv_fail_sock(pscom_sock_t *sock)
{
    fail_matching(&sock->recvq_any, NULL);
}

void pscom_recv_fail_global(void)
{
    fail_matching(&pscom.recvq_any_global, NULL);
}
