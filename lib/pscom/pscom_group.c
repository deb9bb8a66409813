/*
 * pscom_group.c - groups, broadcast and barrier (see pscom_group.h).
 */
#include "pscom_group.h"

#include <stdlib.h>
#include <string.h>

#include "pscom_con.h"
#include "pscom_core.h"
#include "pscom_log.h"
#include "pscom_misuse.h"
#include "pscom_progress.h"
#include "pscom_req.h"
#include "pscom_sock.h"
#include "pscom_wire.h"

#define GROUP_MAGIC 0x67727570u /* "grup" */
#define BCAST_FANOUT 3
/* bcast_arg1 of a broadcast message: the sender did not get the data from
 * its parent (failed connection), so it has none to pass on; the message
 * has none, and the receiver's broadcast ends with ERROR too */
#define BCAST_FAILED 1u
/* the user part of a collective xheader: the 16-bit xheader length on the
 * wire holds the 16-byte header too */
#define COLL_XH_MAX (UINT16_MAX - sizeof(pscom_xheader_bcast_t))

struct PSCOM_group {
    uint32_t magic;
    pscom_list_t next; /* sock->coll->groups */
    pscom_sock_t *sock;
    uint32_t id, my_grank, size;
    pscom_connection_t **cons;
};

struct pscom_sock_coll {
    pscom_list_t groups;
    pscom_list_t recvq; /* posted internal receives (req.next) */
    pscom_list_t unexp; /* arrived, not yet wanted (req.next) */
};

static struct pscom_sock_coll *coll_of(pscom_sock_t *sock)
{
    if (!sock->coll) {
        sock->coll = calloc(1, sizeof(*sock->coll));
        if (!sock->coll) return NULL;
        pscom_list_init(&sock->coll->groups);
        pscom_list_init(&sock->coll->recvq);
        pscom_list_init(&sock->coll->unexp);
    }
    return sock->coll;
}

/* ---- matching of collective messages ---------------------------------------- */

/* A collective message kept for a later coll_recv arrived whole, or its
 * connection failed (ERROR): done, and still in the unexpected queue. */
static void coll_gen_done(pscom_req_t *gen)
{
    pscom_req_state_add(&gen->pub, PSCOM_REQ_STATE_IO_DONE | PSCOM_REQ_STATE_DONE);
    pscom.progress_counter++;
}

/* key: message type, connection, group id and root (bcast) or round (barrier) */
static int same_key(pscom_req_t *a, uint8_t type, pscom_connection_t *con,
                    const pscom_xheader_bcast_t *x)
{
    const pscom_xheader_bcast_t *ax = &a->pub.xheader.bcast;
    return a->pub.header.msg_type == type && a->pub.connection == con &&
           ax->group_id == x->group_id && ax->bcast_root == x->bcast_root;
}

int pscom_group_recv(pscom_con_t *con, pscom_header_net_t *hn, pscom_req_t **reqp)
{
    *reqp = NULL;
    if (hn->xheader_len < sizeof(pscom_xheader_bcast_t)) return -1;
    struct pscom_sock_coll *c = coll_of(con->sock);
    if (!c) return 0;
    pscom_xheader_bcast_t x;
    memcpy(&x, hn->xheader, sizeof(x));

    pscom_list_t *pos;
    pscom_list_for_each(pos, &c->recvq) {
        pscom_req_t *req = pscom_list_entry(pos, pscom_req_t, next);
        if (!same_key(req, hn->msg_type, &con->pub, &x)) continue;
        pscom_list_del(&req->next);
        size_t n = req->pub.xheader_len < hn->xheader_len ? req->pub.xheader_len : hn->xheader_len;
        memcpy(&req->pub.header, hn, sizeof(*hn) + n);
        if (hn->data_len > req->pub.data_len)
            pscom_req_state_add(&req->pub, PSCOM_REQ_STATE_TRUNCATED);
        pscom_req_state_add(&req->pub, PSCOM_REQ_STATE_IO_STARTED);
        *reqp = req;
        return 0;
    }
    /* nobody waits yet: keep it whole */
    pscom_req_t *gen = pscom_req_create(hn->xheader_len, hn->data_len);
    if (!gen) return -1;
    memcpy(&gen->pub.header, hn, sizeof(*hn) + hn->xheader_len);
    gen->pub.xheader_len = hn->xheader_len;
    gen->pub.connection  = &con->pub;
    gen->pub.data        = gen->pub.user;
    gen->pub.data_len    = hn->data_len;
    /* not GRECV_REQUEST: a user message's generated request is freed when
     * its connection fails in the middle, and coll_recv may be waiting
     * for this one (it gets it with ERROR, through on_done, and stays
     * queued) */
    pscom_req_state_set(&gen->pub, PSCOM_REQ_STATE_RECV_REQUEST);
    gen->on_done         = coll_gen_done;
    pscom_list_add_tail(&gen->next, &c->unexp);
    pscom_req_state_add(&gen->pub, PSCOM_REQ_STATE_IO_STARTED);
    *reqp = gen;
    return 0;
}

static int req_done(void *arg)
{
    return ((pscom_req_t *)arg)->pub.state & PSCOM_REQ_STATE_IO_DONE;
}

/* Blocking receive of one collective message (lock held). Copies the
 * user part of the xheader (after the bcast header) and the data. */
static int coll_recv(uint8_t type, pscom_connection_t *con, const pscom_xheader_bcast_t *key,
                     void *xh, size_t xh_len, void *data, size_t data_len)
{
    /* the queues of the connection's socket, where its messages arrive
     * (a group may have members on other sockets than its own) */
    struct pscom_sock_coll *c = coll_of(pscom_con_from_pub(con)->sock);
    size_t full_xlen          = sizeof(pscom_xheader_bcast_t) + xh_len;
    pscom_req_t *req          = NULL;
    if (!c) return -1;

    pscom_list_t *pos;
    pscom_list_for_each(pos, &c->unexp) {
        pscom_req_t *gen = pscom_list_entry(pos, pscom_req_t, next);
        if (!same_key(gen, type, con, key)) continue;
        /* ours from here: a close while it is still arriving does not
         * drop it under us (pscom_group_drop_con) */
        pscom_list_del(&gen->next);
        pscom_wait_until(req_done, gen);
        req = gen;
        break;
    }
    if (!req) {
        /* nothing more comes from a connection that failed (its receives
         * waiting then were failed, pscom_group_fail_con) */
        if (!pscom_con_readable(pscom_con_from_pub(con))) return -1;
        req = pscom_req_create(full_xlen, 0);
        if (!req) return -1;
        req->pub.header.msg_type = type;
        req->pub.connection      = con;
        req->pub.xheader.bcast   = *key;
        req->pub.xheader_len     = full_xlen;
        req->pub.data            = data;
        req->pub.data_len        = data_len;
        pscom_req_state_set(&req->pub, PSCOM_REQ_STATE_RECV_REQUEST | PSCOM_REQ_STATE_POSTED);
        pscom_list_add_tail(&req->next, &c->recvq);
        pscom_wait_until(req_done, req);
    } else if (data_len) {
        size_t n = req->pub.data_len < data_len ? req->pub.data_len : data_len;
        memcpy(data, req->pub.data, n);
    }
    int ok = !(req->pub.state & PSCOM_REQ_STATE_ERROR) &&
             !(req->pub.xheader.bcast.bcast_arg1 & BCAST_FAILED);
    if (xh_len && ok) {
        size_t got = req->pub.header.xheader_len > sizeof(pscom_xheader_bcast_t)
                         ? req->pub.header.xheader_len - sizeof(pscom_xheader_bcast_t)
                         : 0;
        memcpy(xh, req->pub.xheader.bcast.user, got < xh_len ? got : xh_len);
    }
    pscom_req_free(req);
    return ok ? 0 : -1;
}

static void coll_sent(pscom_req_t *req)
{
    int *pending = *(int **)req->pub.user;
    (*pending)--;
    pscom_req_free(req);
}

static int none_pending(void *arg)
{
    return *(int *)arg == 0;
}

static void coll_send(pscom_connection_t *connection, uint8_t type,
                      const pscom_xheader_bcast_t *hdr, const void *xh, size_t xh_len,
                      void *data, size_t data_len, int *pending)
{
    size_t xlen      = sizeof(*hdr) + xh_len;
    pscom_req_t *req = pscom_req_create(xlen, sizeof(int *));
    if (!req) return;
    req->flags |= PSCOM_REQF_INTERNAL;
    req->pub.xheader.bcast = *hdr;
    if (xh_len) memcpy(req->pub.xheader.bcast.user, xh, xh_len);
    req->pub.xheader_len = xlen;
    req->pub.data        = data;
    req->pub.data_len    = data_len;
    pscom_req_state_set(&req->pub, PSCOM_REQ_STATE_SEND_REQUEST | PSCOM_REQ_STATE_POSTED);
    *(int **)req->pub.user = pending;
    req->on_done           = coll_sent;
    (*pending)++;
    pscom_con_t *con = pscom_con_from_pub(connection);
    req->con         = con;
    if (!pscom_con_writable(con)) {
        coll_sent(req);
        return;
    }
    pscom_wire_header_encode(&req->pub.header, (uint16_t)xlen, type, data_len);
    pscom_con_queue_send(con, req);
}

/* ---- API ------------------------------------------------------------------------ */

/* lock held */
static pscom_group_t *find_group(pscom_sock_t *sock, uint32_t group_id)
{
    if (!sock->coll) return NULL;
    pscom_list_t *pos;
    pscom_list_for_each(pos, &sock->coll->groups) {
        pscom_group_t *g = pscom_list_entry(pos, pscom_group_t, next);
        if (g->id == group_id) return g;
    }
    return NULL;
}

PSCOM_API pscom_group_t *pscom_group_open(pscom_socket_t *socket, uint32_t group_id,
                                          uint32_t my_grank, uint32_t group_size,
                                          pscom_connection_t **connections)
{
    pscom_api_check_sock(socket);
    pscom_api_check(connections || !group_size, "an array of group_size connections");
    pscom_sock_t *sock = pscom_sock_from_pub(socket);
    pscom_api_check(my_grank < group_size, "my_grank < group_size");
    for (uint32_t i = 0; i < group_size; i++)
        pscom_api_check(connections[i] &&
                            pscom_con_from_pub(connections[i])->magic == PSCOM_CON_MAGIC,
                        "a connection for every member, self included");
    pscom_lock();
    pscom_api_check(!find_group(sock, group_id), "a group id unique on the socket");
    struct pscom_sock_coll *c = coll_of(sock);
    pscom_group_t *g          = c ? calloc(1, sizeof(*g)) : NULL;
    if (g) g->cons = malloc(group_size * sizeof(*g->cons));
    if (!g || !g->cons) {
        if (g) free(g);
        g = NULL;
        goto out;
    }
    g->magic    = GROUP_MAGIC;
    g->sock     = sock;
    g->id       = group_id;
    g->my_grank = my_grank;
    g->size     = group_size;
    memcpy(g->cons, connections, group_size * sizeof(*g->cons));
    pscom_list_add_tail(&g->next, &c->groups);
out:
    pscom_unlock();
    return g;
}

PSCOM_API void pscom_group_close(pscom_group_t *group)
{
    if (!group) return;
    pscom_api_check(group->magic == GROUP_MAGIC, "an open group");
    pscom_lock();
    pscom_list_del(&group->next);
    group->magic = 0;
    free(group->cons);
    free(group);
    pscom_unlock();
}

PSCOM_API pscom_group_t *pscom_group_find(pscom_socket_t *socket, uint32_t group_id)
{
    pscom_api_check(socket, "a socket");
    pscom_lock();
    pscom_group_t *g = find_group(pscom_sock_from_pub(socket), group_id);
    pscom_unlock();
    return g;
}

PSCOM_API uint32_t pscom_group_get_id(pscom_group_t *group)
{
    pscom_api_check(group && group->magic == GROUP_MAGIC, "an open group");
    return group->id;
}

static uint32_t member(const pscom_group_t *g, uint32_t vrank, uint32_t root)
{
    return (vrank + root) % g->size;
}

/* lock held; returns 0 or -1 */
static int bcast_locked(pscom_group_t *g, uint32_t root, void *xh, size_t xh_len, void *data,
                        size_t data_len)
{
    uint32_t n = g->size, me = g->my_grank;
    uint32_t vr = (me + n - root) % n;
    pscom_xheader_bcast_t hdr = {.group_id = g->id, .bcast_root = root};
    int res = 0, pending = 0;

    if (xh_len > COLL_XH_MAX) {
        plog_err("bcast: a user xheader of %zu bytes is cut to %zu (its length is 16 bits on "
                 "the wire, with the 16-byte broadcast header)",
                 xh_len, (size_t)COLL_XH_MAX);
        xh_len = COLL_XH_MAX;
    }
    if (vr) {
        uint32_t parent = member(g, (vr - 1) / BCAST_FANOUT, root);
        res = coll_recv(PSCOM_MSGTYPE_BCAST, g->cons[parent], &hdr, xh, xh_len, data, data_len);
    }
    if (res) { /* nothing to pass on: the subtree's broadcasts fail as well */
        hdr.bcast_arg1 = BCAST_FAILED;
        xh_len = data_len = 0;
    }
    for (uint32_t c = 1; c <= BCAST_FANOUT; c++) {
        uint64_t child = (uint64_t)vr * BCAST_FANOUT + c;
        if (child >= n) break;
        coll_send(g->cons[member(g, (uint32_t)child, root)], PSCOM_MSGTYPE_BCAST, &hdr, xh,
                  xh_len, data, data_len, &pending);
    }
    pscom_wait_until(none_pending, &pending);
    return res;
}

PSCOM_API void pscom_bcast(pscom_group_t *group, unsigned bcast_root, void *xheader,
                           size_t xheader_len, void *data, size_t data_len)
{
    pscom_api_check(group && group->magic == GROUP_MAGIC, "an open group");
    pscom_api_check(bcast_root < group->size, "a root within the group");
    pscom_api_check(xheader || !xheader_len, "an xheader for xheader_len bytes");
    pscom_api_check(data || !data_len, "data for data_len bytes");
    pscom_lock();
    bcast_locked(group, bcast_root, xheader, xheader_len, data, data_len);
    pscom_unlock();
}

PSCOM_API void pscom_post_bcast(pscom_request_t *request)
{
    pscom_api_check_req(request);
    pscom_api_check(request->data || !request->data_len, "data for data_len bytes");
    pscom_api_check(request->state & PSCOM_REQ_STATE_DONE, "a request is posted only when DONE");
    pscom_api_check(request->socket, "a broadcast names its socket");
    pscom_lock();
    pscom_group_t *g = find_group(pscom_sock_from_pub(request->socket),
                                  request->xheader.bcast.group_id);
    pscom_api_check(g, "the group of xheader.bcast exists");
    pscom_api_check(request->xheader.bcast.bcast_root < g->size, "a root within the group");
    size_t hdr       = sizeof(pscom_xheader_bcast_t);
    size_t user_xlen = request->xheader_len > hdr ? request->xheader_len - hdr : 0;
    int root = request->xheader.bcast.bcast_root == g->my_grank;
    pscom_req_state_set(request, PSCOM_REQ_STATE_POSTED | (root ? PSCOM_REQ_STATE_SEND_REQUEST
                                                                : PSCOM_REQ_STATE_RECV_REQUEST));
    int res;
    if (pscom_unlikely(request->xheader_len > request->max_xheader_len)) {
        /* as a send (pscom_con_post_send): the request has no room for it */
        plog_err("bcast: xheader_len %zu > max %zu", request->xheader_len,
                 request->max_xheader_len);
        res = -1;
    } else {
        res = bcast_locked(g, request->xheader.bcast.bcast_root, request->xheader.bcast.user,
                           user_xlen, request->data, request->data_len);
    }
    pscom_req_complete_with(pscom_req_from_pub(request), res ? PSCOM_REQ_STATE_ERROR : 0);
    pscom_unlock(); /* runs io_done: synchronously, before we return */
}

PSCOM_API void pscom_barrier(pscom_group_t *group)
{
    pscom_api_check(group && group->magic == GROUP_MAGIC, "an open group");
    uint32_t n = group->size, me = group->my_grank;
    if (n <= 1) return;
    pscom_lock();
    uint32_t round = 0;
    for (uint64_t k = 1; k < n; k <<= 1, round++) {
        pscom_xheader_bcast_t hdr = {.group_id = group->id, .bcast_root = round};
        int pending               = 0;
        coll_send(group->cons[(me + k) % n], PSCOM_MSGTYPE_BARRIER, &hdr, NULL, 0, NULL, 0,
                  &pending);
        coll_recv(PSCOM_MSGTYPE_BARRIER, group->cons[(me + n - k % n) % n], &hdr, NULL, 0, NULL,
                  0);
        pscom_wait_until(none_pending, &pending);
    }
    pscom_unlock();
}

void pscom_group_fail_con(pscom_con_t *con)
{
    struct pscom_sock_coll *c = con->sock->coll;
    if (!c) return;
    pscom_list_t *pos, *tmp;
    pscom_list_for_each_safe(pos, tmp, &c->recvq) {
        pscom_req_t *req = pscom_list_entry(pos, pscom_req_t, next);
        if (req->pub.connection != &con->pub) continue;
        pscom_list_del(&req->next);
        pscom_req_state_add(&req->pub, PSCOM_REQ_STATE_ERROR | PSCOM_REQ_STATE_IO_DONE);
    }
}

void pscom_group_drop_con(pscom_con_t *con)
{
    struct pscom_sock_coll *c = con->sock->coll;
    if (!c) return;
    pscom_list_t *pos, *tmp;
    pscom_list_for_each_safe(pos, tmp, &c->unexp) {
        pscom_req_t *gen = pscom_list_entry(pos, pscom_req_t, next);
        if (gen->pub.connection != &con->pub) continue;
        pscom_list_del(&gen->next);
        pscom_read_drop_req(con, gen);
    }
}

void pscom_group_sock_fini(pscom_sock_t *sock)
{
    struct pscom_sock_coll *c = sock->coll;
    if (!c) return;
    pscom_list_t *pos, *tmp;
    pscom_list_for_each_safe(pos, tmp, &c->groups) {
        pscom_group_t *g = pscom_list_entry(pos, pscom_group_t, next);
        pscom_list_del(&g->next);
        g->magic = 0; /* (a use after the socket's close is misuse) */
        free(g->cons);
        free(g);
    }
    pscom_list_for_each_safe(pos, tmp, &c->unexp) {
        pscom_req_t *req = pscom_list_entry(pos, pscom_req_t, next);
        pscom_list_del(&req->next);
        pscom_req_free(req);
    }
    pscom_list_for_each_safe(pos, tmp, &c->recvq) {
        pscom_req_t *req = pscom_list_entry(pos, pscom_req_t, next);
        pscom_list_del(&req->next);
        pscom_req_state_add(&req->pub, PSCOM_REQ_STATE_ERROR | PSCOM_REQ_STATE_IO_DONE);
    }
    free(c);
    sock->coll = NULL;
}
