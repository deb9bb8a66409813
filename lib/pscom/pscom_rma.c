/*
 * pscom_rma.c - one-sided operations (see pscom_rma.h).
 */
#include "pscom_rma.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "pscom_con.h"
#include "pscom_core.h"
#include "pscom_log.h"
#include "pscom_misuse.h"
#include "pscom_plugin.h"
#include "pscom_req.h"
#include "pscom_sock.h"
#include "pscom_wire.h"

#define RKEY_BUF_MAGIC   0x424b5250u /* "PRKB" */
#define RKEY_BUF_VERSION 1

/* packed remote key, little-endian */
typedef struct rkey_buf {
    uint32_t magic;
    uint16_t version;
    uint16_t reserved;
    uint64_t base;
    uint64_t len;
    uint64_t memh_id;
} rkey_buf_t;

static pscom_list_t memhs = PSCOM_LIST_INIT(memhs);
static uint64_t next_memh_id = 1;
static uint64_t next_req_id  = 1;

/* ---- regions ----------------------------------------------------------------- */

static int in_range(uint64_t base, uint64_t len, uint64_t addr, uint64_t n)
{
    return addr >= base && n <= len && addr - base <= len - n;
}

static struct PSCOM_memh *memh_find(uint64_t id)
{
    pscom_list_t *pos;
    pscom_list_for_each(pos, &memhs) {
        struct PSCOM_memh *m = pscom_list_entry(pos, struct PSCOM_memh, next);
        if (m->id == id) return m;
    }
    return NULL;
}

/* region containing [addr, addr+n) (legacy operations name no region) */
static struct PSCOM_memh *memh_covering(uint64_t addr, uint64_t n)
{
    pscom_list_t *pos;
    pscom_list_for_each(pos, &memhs) {
        struct PSCOM_memh *m = pscom_list_entry(pos, struct PSCOM_memh, next);
        if (in_range((uint64_t)(uintptr_t)m->addr, m->len, addr, n)) return m;
    }
    return NULL;
}

static pscom_sock_t *intra_job_sock(void)
{
    pscom_list_t *pos;
    pscom_list_for_each(pos, &pscom.sockets) {
        pscom_sock_t *s = pscom_list_entry(pos, pscom_sock_t, next);
        if (s->flags & PSCOM_SOCK_FLAG_INTRA_JOB) return s;
    }
    return NULL;
}

PSCOM_API pscom_err_t pscom_mem_register(pscom_socket_t *socket, void *addr, size_t length,
                                         pscom_memh_t *memh)
{
    pscom_err_t res = PSCOM_SUCCESS;
    if (!memh) return PSCOM_ERR_INVALID;
    if (socket) pscom_api_check_sock(socket); /* (NULL: the intra-job socket) */
    *memh = NULL;
    pscom_lock();
    pscom_sock_t *sock = socket ? pscom_sock_from_pub(socket) : intra_job_sock();
    if (!sock || (!addr && length)) {
        res = PSCOM_ERR_INVALID;
        goto out;
    }
    struct PSCOM_memh *m = calloc(1, sizeof(*m));
    rkey_buf_t *rb       = malloc(sizeof(*rb));
    if (!m || !rb) {
        free(m);
        free(rb);
        errno = ENOMEM;
        res   = PSCOM_ERR_STDERROR;
        goto out;
    }
    m->magic = PSCOM_MEMH_MAGIC;
    m->id    = next_memh_id++;
    m->sock  = sock;
    m->addr  = addr;
    m->len   = length;
    *rb      = (rkey_buf_t){
        .magic   = htole32(RKEY_BUF_MAGIC),
        .version = htole16(RKEY_BUF_VERSION),
        .base    = htole64((uint64_t)(uintptr_t)addr),
        .len     = htole64(length),
        .memh_id = htole64(m->id),
    };
    m->rkey_buf     = rb;
    m->rkey_buf_len = sizeof(*rb);
    pscom_list_add_tail(&m->next, &memhs);
    *memh = m;
out:
    pscom_unlock();
    return res;
}

PSCOM_API pscom_err_t pscom_mem_deregister(pscom_memh_t memh)
{
    if (!memh) return PSCOM_SUCCESS;
    pscom_api_check(memh->magic == PSCOM_MEMH_MAGIC, "a registered memory handle");
    pscom_lock();
    pscom_list_del(&memh->next);
    memh->magic = 0;
    free(memh->rkey_buf);
    free(memh);
    pscom_unlock();
    return PSCOM_SUCCESS;
}

PSCOM_API pscom_err_t pscom_rkey_buffer_pack(void **rkeybuf, size_t *bufsize, pscom_memh_t memh)
{
    if (!rkeybuf || !bufsize) return PSCOM_ERR_INVALID;
    *rkeybuf = NULL;
    if (!memh) return PSCOM_ERR_INVALID;
    pscom_api_check(memh->magic == PSCOM_MEMH_MAGIC, "a registered memory handle");
    void *copy = malloc(memh->rkey_buf_len);
    if (!copy) {
        errno = ENOMEM;
        return PSCOM_ERR_STDERROR;
    }
    memcpy(copy, memh->rkey_buf, memh->rkey_buf_len);
    *rkeybuf = copy;
    *bufsize = memh->rkey_buf_len;
    return PSCOM_SUCCESS;
}

PSCOM_API void pscom_rkey_buffer_release(void *rkey_buffer)
{
    if (!rkey_buffer) return;
    pscom_api_check(le32toh(((rkey_buf_t *)rkey_buffer)->magic) == RKEY_BUF_MAGIC,
                    "a buffer of pscom_rkey_buffer_pack()");
    free(rkey_buffer);
}

PSCOM_API pscom_err_t pscom_rkey_generate(pscom_connection_t *connection, void *rkeybuf,
                                          size_t bufsize, pscom_rkey_t *rkey)
{
    if (!rkey) return PSCOM_ERR_INVALID;
    *rkey = NULL;
    if (!rkeybuf || !bufsize) return PSCOM_SUCCESS; /* the peer exposes no memory */
    rkey_buf_t rb;
    if (bufsize < sizeof(rb)) goto bad;
    memcpy(&rb, rkeybuf, sizeof(rb));
    if (le32toh(rb.magic) != RKEY_BUF_MAGIC || le16toh(rb.version) != RKEY_BUF_VERSION) goto bad;
    struct PSCOM_rkey *k = calloc(1, sizeof(*k));
    if (!k) {
        errno = ENOMEM;
        return PSCOM_ERR_STDERROR;
    }
    k->magic   = PSCOM_RKEY_MAGIC;
    k->con     = pscom_con_from_pub(connection);
    k->base    = le64toh(rb.base);
    k->len     = le64toh(rb.len);
    k->memh_id = le64toh(rb.memh_id);
    *rkey      = k;
    return PSCOM_SUCCESS;
bad:
    plog_err("pscom_rkey_generate: not a remote key buffer of this library (%zu bytes)", bufsize);
    return PSCOM_ERR_INVALID;
}

PSCOM_API pscom_err_t pscom_rkey_destroy(pscom_rkey_t rkey)
{
    if (!rkey) return PSCOM_SUCCESS;
    pscom_api_check(rkey->magic == PSCOM_RKEY_MAGIC, "an rkey of pscom_rkey_generate()");
    rkey->magic = 0;
    free(rkey);
    return PSCOM_SUCCESS;
}

PSCOM_API void pscom_register_rma_callbacks(void (*target_callback)(pscom_request_t *req),
                                            pscom_memh_t memh, pscom_rma_op_t rma_op)
{
    if (!memh) return;
    pscom_api_check(memh->magic == PSCOM_MEMH_MAGIC, "a registered memory handle");
    pscom_api_check((unsigned)rma_op < PSCOM_RMA_OP_COUNT, "a known RMA operation");
    memh->callbacks[rma_op] = target_callback;
}

/* ---- origin side ----------------------------------------------------------- */

/* API entry of an RMA post: the request, its connection, its buffers (a
 * macro: the misuse message names the call) */
#define rma_api_check(r, need_origin)                                                         \
    do {                                                                                      \
        pscom_api_check_req(r);                                                               \
        pscom_api_check((r)->connection, "an RMA operation needs a connection");              \
        pscom_api_check_con((r)->connection);                                                 \
        pscom_api_check(!(need_origin) || (r)->rma.origin_addr || !(r)->data_len,             \
                        "rma.origin_addr for data_len bytes");                                \
    } while (0)

/* Common start of put/get-like operations. Returns the connection, or
 * NULL after completing the request with an error. */
static pscom_con_t *rma_begin(pscom_request_t *r, pscom_req_state_t state, size_t min_xlen,
                              int check_range)
{
    pscom_api_check(r->state & PSCOM_REQ_STATE_DONE, "a request is posted only when DONE");
    pscom_api_check(r->rma.rkey && r->rma.rkey->magic == PSCOM_RKEY_MAGIC,
                    "rma.rkey is an rkey of pscom_rkey_generate()");
    if (!r->ops.io_done) r->ops.io_done = pscom_request_free; /* frees itself */
    if (r->xheader_len < min_xlen) r->xheader_len = min_xlen;
    pscom_req_state_set(r, state);
    pscom_con_t *con = pscom_con_from_pub(r->connection);
    pscom_rkey_t k   = r->rma.rkey;
    if (r->xheader_len > r->max_xheader_len || r->xheader_len > UINT16_MAX) {
        /* (the 16-bit length on the wire would wrap, and the target take
         * the message for a malformed one) */
        plog_err("RMA: xheader_len %zu > max %zu", r->xheader_len,
                 r->max_xheader_len < UINT16_MAX ? r->max_xheader_len : (size_t)UINT16_MAX);
        goto fail;
    }
    if (check_range &&
        !in_range(k->base, k->len, (uint64_t)(uintptr_t)r->rma.target_addr, r->data_len)) {
        plog_err("RMA: target %p+%zu outside the remote region %#llx+%llu",
                 r->rma.target_addr, r->data_len, (unsigned long long)k->base,
                 (unsigned long long)k->len);
        goto fail;
    }
    if (!pscom_con_writable(con)) goto fail;
    return con;
fail:
    pscom_req_complete_with(pscom_req_from_pub(r), PSCOM_REQ_STATE_ERROR);
    return NULL;
}

static void put_like(pscom_request_t *r, uint8_t type, uint8_t done_type)
{
    pscom_lock();
    pscom_con_t *con = rma_begin(r, PSCOM_REQ_STATE_SEND_REQUEST | PSCOM_REQ_STATE_POSTED,
                                 sizeof(pscom_rma_put_data_t), 1);
    if (!con) goto out;
    pscom_req_t *req               = pscom_req_from_pub(r);
    r->data                        = r->rma.origin_addr;
    r->xheader.rma_put.common.dest = r->rma.target_addr;
    r->xheader.rma_put.common.memh = (void *)(uintptr_t)r->rma.rkey->memh_id;
    /* direct only where the notice's xheader (the put's and 8 bytes) fits
     * the 16-bit length: else the put goes as a message */
    if (done_type && r->xheader_len + 8 <= UINT16_MAX &&
        pscom_con_direct(con, PSCOM_PLUGIN_CAP_RMA_WRITE, r->data_len) &&
        con->transport->ops->rma_write(con, r->data, (uint64_t)(uintptr_t)r->rma.target_addr,
                                       r->data_len) == 0) {
        /* data is there: only tell the target, for its callback. The
         * length (which the target's request shows as data_len) follows
         * the xheader: 8 bytes, little-endian. */
        size_t xl = r->xheader_len;
        char *xh  = malloc(xl + 8);
        if (xh) {
            uint64_t len = htole64(r->data_len);
            memcpy(xh, &r->xheader, xl);
            memcpy(xh + xl, &len, 8);
            pscom_req_t *note = pscom_ctrl_create(done_type, xh, xl + 8, 0);
            free(xh);
            if (note) pscom_con_send_ctrl(con, note);
        }
        pscom_req_state_add(r, PSCOM_REQ_STATE_IO_STARTED); /* as a put sent */
        pscom_req_complete(req);
        goto out;
    }
    pscom_con_post_send(con, req, type);
out:
    pscom_unlock();
}

PSCOM_API void pscom_post_rma_put(pscom_request_t *request)
{
    rma_api_check(request, 1);
    put_like(request, PSCOM_MSGTYPE_RMA_PUT, PSCOM_MSGTYPE_RMA_PUT_DONE);
}

PSCOM_API void pscom_post_rma_accumulate(pscom_request_t *request)
{
    rma_api_check(request, 1);
    put_like(request, PSCOM_MSGTYPE_RMA_ACCUMULATE, 0);
}

/* get-like: the request waits on the connection for the answer. origin
 * data (if any) travels with the request message. */
static void get_like(pscom_request_t *r, uint8_t type, const void *out, size_t out_len,
                     void *result)
{
    pscom_req_t *req = pscom_req_from_pub(r);
    pscom_con_t *con = pscom_con_from_pub(r->connection);
    size_t len       = r->data_len;

    r->xheader.rma_get.common.id      = (void *)(uintptr_t)(req->id = next_req_id++);
    r->xheader.rma_get.common.src     = r->rma.target_addr;
    r->xheader.rma_get.common.src_len = len;
    r->xheader.rma_get.common.memh    = (void *)(uintptr_t)r->rma.rkey->memh_id;
    pscom_req_t *msg = pscom_ctrl_create(type, &r->xheader, r->xheader_len, out_len);
    if (!msg) {
        pscom_req_complete_with(req, PSCOM_REQ_STATE_ERROR);
        return;
    }
    if (out_len) memcpy(msg->pub.data, out, out_len);
    r->data  = result; /* the answer lands here */
    req->con = con;
    pscom_list_add_tail(&req->next, &con->rma_pending);
    pscom_con_send_ctrl(con, msg);
}

PSCOM_API void pscom_post_rma_get(pscom_request_t *request)
{
    rma_api_check(request, 1); /* (origin_addr: where the data goes) */
    pscom_request_t *r = request;
    pscom_lock();
    pscom_con_t *con = rma_begin(r, PSCOM_REQ_STATE_RMA_READ_REQUEST | PSCOM_REQ_STATE_POSTED,
                                 sizeof(pscom_rma_get_data_t), 1);
    if (!con) goto out;
    if (pscom_con_direct(con, PSCOM_PLUGIN_CAP_RMA_READ, r->data_len) &&
        con->transport->ops->rma_read(con, r->rma.origin_addr,
                                      (uint64_t)(uintptr_t)r->rma.target_addr, r->data_len) == 0) {
        r->data                           = r->rma.origin_addr;
        r->xheader.rma_get.common.id      = NULL;
        r->xheader.rma_get.common.src     = r->rma.target_addr;
        r->xheader.rma_get.common.src_len = r->data_len;
        r->xheader.rma_get.common.memh    = (void *)(uintptr_t)r->rma.rkey->memh_id;
        pscom_req_t *note = pscom_ctrl_create(PSCOM_MSGTYPE_RMA_GET_DONE, &r->xheader,
                                              r->xheader_len, 0);
        if (note) pscom_con_send_ctrl(con, note);
        pscom_req_complete(pscom_req_from_pub(r));
        goto out;
    }
    get_like(r, PSCOM_MSGTYPE_RMA_GET_REQ, NULL, 0, r->rma.origin_addr);
out:
    pscom_unlock();
}

static void atomic_like(pscom_request_t *r, uint8_t type, int cas)
{
    pscom_lock();
    if (!rma_begin(r, PSCOM_REQ_STATE_RMA_READ_REQUEST | PSCOM_REQ_STATE_POSTED,
                   sizeof(pscom_rma_get_data_t), 1))
        goto out;
    size_t n = r->data_len;
    if (cas) {
        char *both = malloc(2 * n + 1);
        if (!both) {
            pscom_req_complete_with(pscom_req_from_pub(r), PSCOM_REQ_STATE_ERROR);
            goto out;
        }
        if (n) { /* (0 bytes: the addresses may be NULL) */
            memcpy(both, r->rma.compare_addr, n);
            memcpy(both + n, r->rma.origin_addr, n);
        }
        get_like(r, type, both, 2 * n, r->rma.result_addr);
        free(both);
    } else {
        get_like(r, type, r->rma.origin_addr, n, r->rma.result_addr);
    }
out:
    pscom_unlock();
}

PSCOM_API void pscom_post_rma_get_accumulate(pscom_request_t *request)
{
    rma_api_check(request, 1);
    pscom_api_check(request->rma.result_addr || !request->data_len,
                    "rma.result_addr for data_len bytes");
    atomic_like(request, PSCOM_MSGTYPE_RMA_GET_ACCUMULATE_REQ, 0);
}

PSCOM_API void pscom_post_rma_fetch_op(pscom_request_t *request)
{
    rma_api_check(request, 1);
    pscom_api_check(request->rma.result_addr || !request->data_len,
                    "rma.result_addr for data_len bytes");
    atomic_like(request, PSCOM_MSGTYPE_RMA_FETCH_AND_OP_REQ, 0);
}

PSCOM_API void pscom_post_rma_compare_swap(pscom_request_t *request)
{
    rma_api_check(request, 1);
    pscom_api_check((request->rma.result_addr && request->rma.compare_addr) || !request->data_len,
                    "rma.result_addr and rma.compare_addr for data_len bytes");
    atomic_like(request, PSCOM_MSGTYPE_RMA_COMPARE_AND_SWAP_REQ, 1);
}

/* legacy: blind write to xheader.rma_write.dest (checked against the
 * target's registered regions) */
PSCOM_API void pscom_post_rma_write(pscom_request_t *request)
{
    rma_api_check(request, 0);
    pscom_api_check(request->data || !request->data_len, "data for data_len bytes");
    pscom_api_check(request->state & PSCOM_REQ_STATE_DONE, "a request is posted only when DONE");
    pscom_lock();
    request->xheader_len = sizeof(pscom_xheader_rma_write_t);
    pscom_req_state_set(request, PSCOM_REQ_STATE_SEND_REQUEST | PSCOM_REQ_STATE_POSTED);
    pscom_con_post_send(pscom_con_from_pub(request->connection), pscom_req_from_pub(request),
                        PSCOM_MSGTYPE_RMA_WRITE);
    pscom_unlock();
}

/* legacy: read xheader.rma_read.src/src_len into data/data_len */
PSCOM_API void pscom_post_rma_read(pscom_request_t *request)
{
    rma_api_check(request, 0);
    pscom_api_check(request->data || !request->data_len, "a buffer for data_len bytes");
    pscom_api_check(request->state & PSCOM_REQ_STATE_DONE, "a request is posted only when DONE");
    pscom_lock();
    pscom_req_t *req = pscom_req_from_pub(request);
    pscom_con_t *con = pscom_con_from_pub(request->connection);
    pscom_req_state_set(request, PSCOM_REQ_STATE_RMA_READ_REQUEST | PSCOM_REQ_STATE_POSTED);
    if (!pscom_con_writable(con)) {
        pscom_req_complete_with(req, PSCOM_REQ_STATE_ERROR);
        goto out;
    }
    pscom_xheader_rma_read_t xh = request->xheader.rma_read;
    req->id                     = next_req_id++;
    xh.id                       = (void *)(uintptr_t)req->id;
    pscom_req_t *msg = pscom_ctrl_create(PSCOM_MSGTYPE_RMA_READ, &xh, sizeof(xh), 0);
    if (!msg) {
        pscom_req_complete_with(req, PSCOM_REQ_STATE_ERROR);
        goto out;
    }
    req->con = con;
    pscom_list_add_tail(&req->next, &con->rma_pending);
    pscom_con_send_ctrl(con, msg);
out:
    pscom_unlock();
}

/* ---- target side -------------------------------------------------------------- */

typedef struct passive {
    uint64_t memh_id; /* 0: no callback */
    int op;
    int reply; /* get-accumulate / fetch-op / compare-swap: answer first */
} passive_t;

#define PASSIVE_HDR ((sizeof(passive_t) + 15) & ~(size_t)15)

static void atomic_reply(pscom_req_t *p, struct PSCOM_memh *m);

/* io_done of a target-side request: for the atomics the answer with the
 * old value and the library's compare-and-swap, then the op's callback
 * (not for an operation that failed half-way), then free. Target-side
 * requests are PSCOM_REQF_SERIAL: they complete in arrival order and their
 * io_done runs in that order, one at a time, also with several threads
 * making progress, so every atomic sees the effect of all earlier
 * callbacks (MPI's accumulate ordering). */
static void passive_done(pscom_request_t *request)
{
    passive_t *pa = (passive_t *)request->user;
    void (*cb)(pscom_request_t *) = NULL;
    pscom_lock();
    struct PSCOM_memh *m = pa->memh_id ? memh_find(pa->memh_id) : NULL;
    int ok               = m && !(request->state & PSCOM_REQ_STATE_ERROR);
    if (pa->reply && !(request->state & PSCOM_REQ_STATE_ERROR)) {
        atomic_reply(pscom_req_from_pub(request), m);
        ok = ok && !(request->state & PSCOM_REQ_STATE_ERROR);
    }
    if (ok) cb = m->callbacks[pa->op];
    /* not pscom_unlock(): the io_done of a later message (the application's
     * synchronisation after its RMA operations) would run before cb */
    pscom_unlock_keep_queue();
    if (cb) cb(request);
    pscom_lock();
    pscom_con_t *con = pscom_con_from_pub(request->connection);
    pscom_req_free(pscom_req_from_pub(request));
    con->refcnt--; /* passive_create's: the connection may go now */
    pscom_con_release(con);
    pscom_unlock_keep_queue();
}

/* A target-side request with a copy of the header and the first xlen bytes
 * of the xheader, and temp bytes of scratch space (req->data when temp > 0). */
static pscom_req_t *passive_create(pscom_con_t *con, pscom_header_net_t *hn, size_t xlen,
                                   size_t temp, uint64_t memh_id, int op)
{
    pscom_req_t *p = pscom_req_create(xlen, PASSIVE_HDR + temp);
    if (!p) return NULL;
    /* until passive_done: its answer goes out on con, and the callback
     * sees con, also when the user closed it meanwhile (an earlier
     * io_done may; until 2026-11-29 a use after free) */
    con->refcnt++;
    memcpy(&p->pub.header, hn, sizeof(*hn) + xlen);
    p->pub.header.xheader_len = (uint16_t)xlen;
    p->pub.xheader_len        = xlen;
    p->pub.connection  = &con->pub;
    p->pub.socket      = &con->sock->pub;
    pscom_req_state_set(&p->pub, PSCOM_REQ_STATE_RMA_WRITE_REQUEST | PSCOM_REQ_STATE_PASSIVE_SIDE);
    p->pub.ops.io_done = passive_done;
    p->flags |= PSCOM_REQF_SERIAL;
    passive_t *pa      = (passive_t *)p->pub.user;
    pa->memh_id        = memh_id;
    pa->op             = op;
    if (temp) {
        p->pub.data     = (char *)p->pub.user + PASSIVE_HDR;
        p->pub.data_len = temp;
    }
    return p;
}

/* The answer left: now complete the target-side request it was holding. */
static void answer_sent(pscom_req_t *msg)
{
    pscom_req_t *after = msg->pub.rma.origin_addr;
    int failed         = !!(msg->pub.state & PSCOM_REQ_STATE_ERROR);
    pscom_req_free(msg);
    /* an answer that never left (the connection failed): no callback */
    if (failed) {
        pscom_req_complete_with(after, PSCOM_REQ_STATE_ERROR);
    } else {
        pscom_req_complete(after);
    }
}

static void send_answer(pscom_con_t *con, uint8_t type, uint64_t id, uint64_t status,
                        void *data, size_t len, int copy, pscom_req_t *after)
{
    pscom_xheader_rma_get_answer_t ans = {.id = (void *)(uintptr_t)id,
                                          .req = (void *)(uintptr_t)status};
    pscom_req_t *msg = pscom_ctrl_create(type, &ans, sizeof(ans), copy ? len : 0);
    if (!msg) {
        if (after) pscom_req_complete(after);
        return;
    }
    if (len) { /* (an empty answer, a peer may ask for 0 bytes, has no buffer) */
        if (copy) {
            memcpy(msg->pub.data, data, len);
        } else {
            pscom_ctrl_set_data(msg, data, len);
        }
    }
    if (after) {
        /* complete `after` (and so run its callback) once the answer left */
        msg->pub.rma.origin_addr = after; /* control messages do not use rma */
        msg->on_done             = answer_sent;
    }
    pscom_con_send_ctrl(con, msg);
}

static pscom_req_t *pending_find(pscom_con_t *con, uint64_t id)
{
    pscom_list_t *pos;
    pscom_list_for_each(pos, &con->rma_pending) {
        pscom_req_t *req = pscom_list_entry(pos, pscom_req_t, next);
        if (req->id == id) return req;
    }
    return NULL;
}

static int min_xlen(const pscom_header_net_t *hn, size_t n)
{
    return hn->xheader_len >= n;
}

static void log_bad(pscom_con_t *con, const char *what, uint64_t addr, uint64_t len)
{
    plog_err("%s: RMA %s of %llu bytes at %#llx outside any registered region: dropped",
             pscom_con_name(con), what, (unsigned long long)len, (unsigned long long)addr);
}

/* The peer moved the data itself (transport with direct memory access;
 * it checked the range against its remote key), but the region is gone:
 * it used a key of a region deregistered since. */
static void log_stale(pscom_con_t *con, const char *what, uint64_t addr, uint64_t len)
{
    plog_err("%s: RMA %s of %llu bytes at %#llx was done directly by the peer, but no region "
             "is registered there (any more): an operation after pscom_mem_deregister?",
             pscom_con_name(con), what, (unsigned long long)len, (unsigned long long)addr);
}

static int recv_put(pscom_con_t *con, pscom_header_net_t *hn, pscom_req_t **reqp, int op,
                    int direct)
{
    pscom_rma_put_data_t c;
    if (!min_xlen(hn, sizeof(c))) return -1;
    memcpy(&c, hn->xheader, sizeof(c));
    uint64_t dest = (uint64_t)(uintptr_t)c.dest, id = (uint64_t)(uintptr_t)c.memh;
    uint64_t len  = hn->data_len;
    size_t xlen   = hn->xheader_len;
    if (direct) { /* PUT_DONE: the length follows the xheader */
        if (xlen < sizeof(c) + 8) return -1;
        xlen -= 8;
        memcpy(&len, (char *)hn->xheader + xlen, 8);
        len = le64toh(len);
    }
    struct PSCOM_memh *m = memh_find(id);
    if (!m || !in_range((uint64_t)(uintptr_t)m->addr, m->len, dest, len)) {
        (direct ? log_stale : log_bad)(con, op == PSCOM_RMA_PUT ? "put" : "accumulate", dest,
                                       len);
        return 0;
    }
    int temp       = op == PSCOM_RMA_ACCUMULATE;
    pscom_req_t *p = passive_create(con, hn, xlen, temp ? (size_t)len : 0, id, op);
    if (!p) return 0;
    if (!temp) {
        p->pub.data     = (void *)(uintptr_t)dest; /* straight into the region */
        p->pub.data_len = (size_t)len;
    }
    *reqp = p;
    return 0;
}

static void answer_get(pscom_con_t *con, pscom_header_net_t *hn, int direct)
{
    pscom_rma_get_data_t c;
    memcpy(&c, hn->xheader, sizeof(c));
    uint64_t src = (uint64_t)(uintptr_t)c.src, memh_id = (uint64_t)(uintptr_t)c.memh;
    struct PSCOM_memh *m = memh_find(memh_id);
    int ok = m && in_range((uint64_t)(uintptr_t)m->addr, m->len, src, c.src_len);
    if (!ok) (direct ? log_stale : log_bad)(con, "get", src, c.src_len);
    pscom_req_t *p =
        ok ? passive_create(con, hn, hn->xheader_len, 0, memh_id, PSCOM_RMA_GET) : NULL;
    if (direct) {
        if (p) pscom_req_complete(p); /* data was read directly: callback only */
        return;
    }
    /* the GET callback runs after the answer has been sent */
    send_answer(con, PSCOM_MSGTYPE_RMA_GET_REP, (uint64_t)(uintptr_t)c.id, ok ? 0 : 1,
                ok ? (void *)(uintptr_t)src : NULL, ok ? (size_t)c.src_len : 0, 0, p);
}

/* get-accumulate / fetch-op / compare-swap, from passive_done (lock held):
 * the old value goes back first (a copy), then compare-and-swap is
 * applied; the origin data is in p->pub.data. The region may have been
 * deregistered since the request arrived (m == NULL): error answer and
 * ERROR on p. */
static void atomic_reply(pscom_req_t *p, struct PSCOM_memh *m)
{
    pscom_con_t *con = pscom_con_from_pub(p->pub.connection);
    pscom_rma_get_data_t c;
    memcpy(&c, &p->pub.xheader, sizeof(c));
    char *target = (char *)c.src;
    size_t n     = (size_t)c.src_len;
    uint8_t type = p->pub.header.msg_type;
    uint8_t rep  = type == PSCOM_MSGTYPE_RMA_GET_ACCUMULATE_REQ ? PSCOM_MSGTYPE_RMA_GET_ACCUMULATE_REP
                   : type == PSCOM_MSGTYPE_RMA_FETCH_AND_OP_REQ ? PSCOM_MSGTYPE_RMA_FETCH_AND_OP_REP
                                                                : PSCOM_MSGTYPE_RMA_COMPARE_AND_SWAP_REP;
    if (!m || !in_range((uint64_t)(uintptr_t)m->addr, m->len, (uint64_t)(uintptr_t)target, n)) {
        log_bad(con, "atomic", (uint64_t)(uintptr_t)target, n);
        send_answer(con, rep, (uint64_t)(uintptr_t)c.id, 1, NULL, 0, 0, NULL);
        pscom_req_state_add(&p->pub, PSCOM_REQ_STATE_ERROR);
        return;
    }
    send_answer(con, rep, (uint64_t)(uintptr_t)c.id, 0, target, n, 1, NULL);
    if (type == PSCOM_MSGTYPE_RMA_COMPARE_AND_SWAP_REQ && n) { /* (0 bytes: no data buffer) */
        const char *cmp = p->pub.data, *val = (const char *)p->pub.data + n;
        if (!memcmp(target, cmp, n)) memcpy(target, val, n);
    }
}

static int recv_atomic(pscom_con_t *con, pscom_header_net_t *hn, pscom_req_t **reqp)
{
    pscom_rma_get_data_t c;
    if (!min_xlen(hn, sizeof(c))) return -1;
    memcpy(&c, hn->xheader, sizeof(c));
    uint8_t type = hn->msg_type;
    int op       = type == PSCOM_MSGTYPE_RMA_GET_ACCUMULATE_REQ ? PSCOM_RMA_GET_ACCUMULATE
                   : type == PSCOM_MSGTYPE_RMA_FETCH_AND_OP_REQ ? PSCOM_RMA_FETCH_AND_OP
                                                                : PSCOM_RMA_COMPARE_AND_SWAP;
    uint64_t want = op == PSCOM_RMA_COMPARE_AND_SWAP ? 2 * c.src_len : c.src_len;
    uint64_t src = (uint64_t)(uintptr_t)c.src, memh_id = (uint64_t)(uintptr_t)c.memh;
    struct PSCOM_memh *m = memh_find(memh_id);
    uint8_t rep = type + (PSCOM_MSGTYPE_RMA_GET_ACCUMULATE_REP - PSCOM_MSGTYPE_RMA_GET_ACCUMULATE_REQ);
    if (type == PSCOM_MSGTYPE_RMA_FETCH_AND_OP_REQ) rep = PSCOM_MSGTYPE_RMA_FETCH_AND_OP_REP;
    if (type == PSCOM_MSGTYPE_RMA_COMPARE_AND_SWAP_REQ) rep = PSCOM_MSGTYPE_RMA_COMPARE_AND_SWAP_REP;
    if (!m || !in_range((uint64_t)(uintptr_t)m->addr, m->len, src, c.src_len) ||
        hn->data_len != want) {
        log_bad(con, "atomic", src, c.src_len);
        send_answer(con, rep, (uint64_t)(uintptr_t)c.id, 1, NULL, 0, 0, NULL);
        return 0;
    }
    pscom_req_t *p = passive_create(con, hn, hn->xheader_len, (size_t)want, memh_id, op);
    if (!p) {
        send_answer(con, rep, (uint64_t)(uintptr_t)c.id, 1, NULL, 0, 0, NULL);
        return 0;
    }
    ((passive_t *)p->pub.user)->reply = 1; /* answered in passive_done */
    *reqp = p;
    return 0;
}

static int recv_answer(pscom_con_t *con, pscom_header_net_t *hn, pscom_req_t **reqp)
{
    uint64_t id, status = 0;
    if (hn->msg_type == PSCOM_MSGTYPE_RMA_READ_ANSWER) {
        pscom_xheader_rma_read_answer_t a;
        if (!min_xlen(hn, sizeof(a))) return -1;
        memcpy(&a, hn->xheader, sizeof(a));
        id = (uint64_t)(uintptr_t)a.id;
    } else {
        pscom_xheader_rma_get_answer_t a;
        if (!min_xlen(hn, sizeof(a))) return -1;
        memcpy(&a, hn->xheader, sizeof(a));
        id     = (uint64_t)(uintptr_t)a.id;
        status = (uint64_t)(uintptr_t)a.req;
    }
    pscom_req_t *req = pending_find(con, id);
    if (!req) {
        plog_err("%s: RMA answer for an unknown request", pscom_con_name(con));
        return -1;
    }
    pscom_list_del(&req->next);
    if (status || hn->data_len != req->pub.data_len) {
        pscom_req_state_add(&req->pub, PSCOM_REQ_STATE_ERROR);
        if (!hn->data_len) {
            pscom_req_complete(req);
            return 0;
        }
    }
    *reqp = req;
    return 0;
}

static int recv_legacy_write(pscom_con_t *con, pscom_header_net_t *hn, pscom_req_t **reqp)
{
    pscom_xheader_rma_write_t w;
    if (!min_xlen(hn, sizeof(w))) return -1;
    memcpy(&w, hn->xheader, sizeof(w));
    uint64_t dest = (uint64_t)(uintptr_t)w.dest;
    if (!memh_covering(dest, hn->data_len)) {
        log_bad(con, "write", dest, hn->data_len);
        return 0;
    }
    pscom_req_t *p = passive_create(con, hn, hn->xheader_len, 0, 0, 0);
    if (!p) return 0;
    p->pub.data     = w.dest;
    p->pub.data_len = hn->data_len;
    *reqp           = p;
    return 0;
}

static int recv_legacy_read(pscom_con_t *con, pscom_header_net_t *hn)
{
    pscom_xheader_rma_read_t r;
    if (!min_xlen(hn, sizeof(r))) return -1;
    memcpy(&r, hn->xheader, sizeof(r));
    uint64_t src = (uint64_t)(uintptr_t)r.src;
    int ok       = memh_covering(src, r.src_len) != NULL;
    if (!ok) log_bad(con, "read", src, r.src_len);
    pscom_xheader_rma_read_answer_t a = {.id = r.id};
    pscom_req_t *msg = pscom_ctrl_create(PSCOM_MSGTYPE_RMA_READ_ANSWER, &a, sizeof(a), 0);
    if (!msg) return 0;
    if (ok && r.src_len) pscom_ctrl_set_data(msg, r.src, (size_t)r.src_len);
    pscom_con_send_ctrl(con, msg);
    return 0;
}

int pscom_rma_recv(pscom_con_t *con, pscom_header_net_t *hn, pscom_req_t **reqp)
{
    *reqp = NULL;
    switch (hn->msg_type) {
    case PSCOM_MSGTYPE_RMA_PUT: return recv_put(con, hn, reqp, PSCOM_RMA_PUT, 0);
    case PSCOM_MSGTYPE_RMA_PUT_DONE:
        if (hn->data_len) return -1;
        return recv_put(con, hn, reqp, PSCOM_RMA_PUT, 1);
    case PSCOM_MSGTYPE_RMA_ACCUMULATE: return recv_put(con, hn, reqp, PSCOM_RMA_ACCUMULATE, 0);
    case PSCOM_MSGTYPE_RMA_GET_REQ:
    case PSCOM_MSGTYPE_RMA_GET_DONE:
        if (!min_xlen(hn, sizeof(pscom_rma_get_data_t)) || hn->data_len) return -1;
        answer_get(con, hn, hn->msg_type == PSCOM_MSGTYPE_RMA_GET_DONE);
        return 0;
    case PSCOM_MSGTYPE_RMA_GET_ACCUMULATE_REQ:
    case PSCOM_MSGTYPE_RMA_FETCH_AND_OP_REQ:
    case PSCOM_MSGTYPE_RMA_COMPARE_AND_SWAP_REQ: return recv_atomic(con, hn, reqp);
    case PSCOM_MSGTYPE_RMA_GET_REP:
    case PSCOM_MSGTYPE_RMA_GET_ACCUMULATE_REP:
    case PSCOM_MSGTYPE_RMA_FETCH_AND_OP_REP:
    case PSCOM_MSGTYPE_RMA_COMPARE_AND_SWAP_REP:
    case PSCOM_MSGTYPE_RMA_READ_ANSWER: return recv_answer(con, hn, reqp);
    case PSCOM_MSGTYPE_RMA_WRITE: return recv_legacy_write(con, hn, reqp);
    case PSCOM_MSGTYPE_RMA_READ:
        if (hn->data_len) return -1;
        return recv_legacy_read(con, hn);
    }
    return -1;
}

void pscom_rma_fail_con(pscom_con_t *con)
{
    pscom_req_fail_all(&con->rma_pending);
}
