/*
 * pscom_msg_api.c - public messaging functions: send, receive, wait,
 * probe, cancel.
 */
#include <errno.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>

#include "pscom_con.h"
#include "pscom_config.h"
#include "pscom_core.h"
#include "pscom_log.h"
#include "pscom_misuse.h"
#include "pscom_progress.h"
#include "pscom_queues.h"
#include "pscom_req.h"
#include "pscom_rndv.h"
#include "pscom_sock.h"
#include "pscom_wire.h"

/* ---- send ---------------------------------------------------------------- */

static void send_user(pscom_req_t *req)
{
    pscom_con_post_send(pscom_con_from_pub(req->pub.connection), req, PSCOM_MSGTYPE_USER);
}

PSCOM_API __attribute__((flatten)) void pscom_post_send(pscom_request_t *request)
{
    pscom_api_check_req(request);
    pscom_api_check(request->state & PSCOM_REQ_STATE_DONE, "a request is posted only when DONE");
    pscom_api_check_send_con(request->connection);
    pscom_api_check(request->data || !request->data_len, "data for data_len bytes");
    pscom_lock();
    pscom_req_t *req = pscom_req_from_pub(request);
    pscom_con_t *con = pscom_con_from_pub(request->connection);
    pscom_req_state_set(request, PSCOM_REQ_STATE_SEND_REQUEST | PSCOM_REQ_STATE_POSTED);
    /* (a length the wire cannot carry, over 40 bits, fails in send_user as
     * an eager one does: until 2026-11-29 a rendezvous announced it) */
    if (request->data_len >= con->rendezvous_size && pscom_con_writable(con) &&
        request->xheader_len <= request->max_xheader_len &&
        request->data_len <= PSCOM_DATA_LEN_MASK) {
        pscom_rndv_send(con, req);
    } else {
        send_user(req);
    }
    pscom_unlock();
}

static void send_copy_done(pscom_request_t *request)
{
    pscom_request_free(request);
}

/* An internal request (pscom_send, pscom_send_inplace) with a copy of the
 * xheader: filled in and sent; io_done frees it. */
static void send_internal(pscom_req_t *req, pscom_connection_t *connection, const void *xheader,
                          size_t xheader_len, void *data, size_t data_len,
                          void (*io_done)(pscom_request_t *request))
{
    pscom_request_t *r = &req->pub;
    req->flags |= PSCOM_REQF_INTERNAL;
    if (xheader_len) memcpy(&r->xheader, xheader, xheader_len);
    r->connection  = connection;
    r->data        = data;
    r->data_len    = data_len;
    r->xheader_len = xheader_len;
    r->ops.io_done = io_done;
    pscom_req_state_set(r, PSCOM_REQ_STATE_SEND_REQUEST | PSCOM_REQ_STATE_POSTED);
    send_user(req);
}

PSCOM_API void pscom_send(pscom_connection_t *connection, void *xheader, size_t xheader_len,
                          void *data, size_t data_len)
{
    pscom_api_check_send_con(connection);
    pscom_api_check(xheader || !xheader_len, "an xheader for xheader_len bytes");
    pscom_api_check(data || !data_len, "data for data_len bytes");
    pscom_lock();
    pscom_req_t *req = pscom_req_create(xheader_len, data_len);
    if (!req) {
        plog_err("pscom_send: out of memory for %zu bytes", xheader_len + data_len);
    } else {
        if (data_len) memcpy(req->pub.user, data, data_len);
        send_internal(req, connection, xheader, xheader_len, req->pub.user, data_len,
                      send_copy_done);
    }
    pscom_unlock();
}

typedef struct inplace {
    void (*io_done)(pscom_req_state_t state, void *priv);
    void *priv;
} inplace_t;

static void send_inplace_done(pscom_request_t *request)
{
    inplace_t *ip = (inplace_t *)request->user;
    if (ip->io_done) ip->io_done(request->state, ip->priv);
    pscom_request_free(request);
}

PSCOM_API void pscom_send_inplace(pscom_connection_t *connection, void *xheader,
                                  size_t xheader_len, void *data, size_t data_len,
                                  void (*io_done)(pscom_req_state_t state, void *priv),
                                  void *priv)
{
    pscom_api_check_send_con(connection);
    pscom_api_check(xheader || !xheader_len, "an xheader for xheader_len bytes");
    pscom_api_check(data || !data_len, "data for data_len bytes");
    pscom_lock();
    pscom_req_t *req = pscom_req_create(xheader_len, sizeof(inplace_t));
    if (!req) {
        plog_err("pscom_send_inplace: out of memory");
    } else {
        inplace_t *ip = (inplace_t *)req->pub.user;
        ip->io_done   = io_done;
        ip->priv      = priv;
        send_internal(req, connection, xheader, xheader_len, data, data_len, send_inplace_done);
    }
    pscom_unlock();
}

/* ---- receive --------------------------------------------------------------- */

PSCOM_API void pscom_post_recv(pscom_request_t *request)
{
    pscom_api_check_req(request);
    pscom_api_check(request->state & PSCOM_REQ_STATE_DONE, "a request is posted only when DONE");
    if (request->connection) pscom_api_check_con(request->connection);
    if (request->socket) pscom_api_check_sock(request->socket);
    pscom_api_check(request->data || !request->data_len, "a buffer for data_len bytes");
    pscom_lock();
    pscom_req_state_set(request, PSCOM_REQ_STATE_RECV_REQUEST | PSCOM_REQ_STATE_POSTED);
    pscom_recv_post(pscom_req_from_pub(request));
    pscom_unlock();
}

static int req_done(void *arg)
{
    return pscom_req_state_get(arg) & PSCOM_REQ_STATE_DONE;
}

PSCOM_API void pscom_wait(pscom_request_t *request)
{
    if (pscom_req_state_get(request) & PSCOM_REQ_STATE_DONE) return;
    pscom_api_check_req(request);
    pscom_lock();
    pscom_wait_until(req_done, request);
    pscom_unlock();
}

PSCOM_API void pscom_wait_all(pscom_request_t **requests)
{
    pscom_api_check(requests, "a NULL-terminated array of requests");
    for (; *requests; requests++) pscom_wait(*requests);
}

PSCOM_API pscom_err_t pscom_recv(pscom_connection_t *connection, pscom_socket_t *socket,
                                 void *xheader, size_t xheader_len, void *data, size_t data_len)
{
    pscom_api_check(xheader || !xheader_len, "a buffer for xheader_len bytes");
    pscom_request_t *r = pscom_request_create(xheader_len, 0);
    if (!r) return PSCOM_ERR_STDERROR;
    r->connection  = connection;
    r->socket      = socket;
    r->data        = data;
    r->data_len    = data_len;
    r->xheader_len = xheader_len;
    pscom_post_recv(r);
    pscom_wait(r);
    pscom_err_t res = PSCOM_ERR_IOERROR;
    if (pscom_req_successful(r)) {
        if (xheader_len) memcpy(xheader, &r->xheader, xheader_len);
        res = PSCOM_SUCCESS;
    }
    pscom_request_free(r);
    return res;
}

/* ---- progress -------------------------------------------------------------- */

PSCOM_API int pscom_test_any(void)
{
    pscom_lock();
    uint64_t before = pscom.progress_counter;
    pscom_progress(0);
    int res = pscom.progress_counter != before || !pscom_list_empty(&pscom.io_doneq);
    pscom_unlock_progress();
    return res;
}

/* the progress counter at this thread's previous pscom_wait_any(): one
 * for the process let another thread's call take the progress this one had
 * not seen (its request DONE, it slept on for ever; pscom_probe too; until
 * 2026-11-29, itest_threads_wake wait_any_per_thread). Initial-exec: one
 * load on the message path. */
static __thread uint64_t wait_any_counter __attribute__((tls_model("initial-exec")));

static int progressed(void *arg)
{
    return pscom.progress_counter != *(uint64_t *)arg;
}

PSCOM_API void pscom_wait_any(void)
{
    pscom_lock();
    pscom_progress(0);
    if (pscom.progress_counter == wait_any_counter && pscom_list_empty(&pscom.io_doneq)) {
        uint64_t now = pscom.progress_counter;
        pscom_wait_until(progressed, &now);
    }
    wait_any_counter = pscom.progress_counter;
    pscom_unlock_progress();
}

/* ---- cancel ------------------------------------------------------------------ */

PSCOM_API int pscom_cancel_send(pscom_request_t *request)
{
    /* unlocked: another thread may be completing it */
    pscom_api_check_req(request);
    /* a request that was never posted (ParaStation MPI cancels those of
     * MPI_PROC_NULL): nothing to cancel, of whatever kind */
    if (pscom_req_state_get(request) & PSCOM_REQ_STATE_DONE) return 0;
    pscom_api_check(pscom_req_state_get(request) & PSCOM_REQ_STATE_SEND_REQUEST, "a send request");
    int res = 0;
    pscom_lock();
    /* (DONE is set by the thread that runs io_done, without the lock) */
    if ((pscom_req_state_get(request) & (PSCOM_REQ_STATE_POSTED | PSCOM_REQ_STATE_IO_STARTED |
                                         PSCOM_REQ_STATE_IO_DONE | PSCOM_REQ_STATE_DONE)) ==
        PSCOM_REQ_STATE_POSTED) {
        pscom_req_t *req = pscom_req_from_pub(request);
        pscom_list_del(&req->next);
        pscom_req_complete_with(req, PSCOM_REQ_STATE_CANCELED);
        res = 1;
    }
    pscom_unlock();
    return res;
}

PSCOM_API int pscom_cancel_recv(pscom_request_t *request)
{
    pscom_api_check_req(request);
    if (pscom_req_state_get(request) & PSCOM_REQ_STATE_DONE) return 0; /* as cancel_send */
    pscom_api_check(pscom_req_state_get(request) & PSCOM_REQ_STATE_RECV_REQUEST,
                    "a receive request");
    int res = 0;
    pscom_lock();
    if ((pscom_req_state_get(request) & (PSCOM_REQ_STATE_IO_STARTED | PSCOM_REQ_STATE_DONE)) == 0)
        res = pscom_recv_cancel(pscom_req_from_pub(request));
    pscom_unlock();
    return res;
}

PSCOM_API int pscom_cancel(pscom_request_t *request)
{
    pscom_api_check_req(request);
    pscom_req_state_t state = pscom_req_state_get(request);
    if (state & PSCOM_REQ_STATE_SEND_REQUEST) return pscom_cancel_send(request);
    if (state & PSCOM_REQ_STATE_RECV_REQUEST) return pscom_cancel_recv(request);
    return 0;
}

/* ---- probe -------------------------------------------------------------------- */

static unsigned iprobe_calls;

PSCOM_API int pscom_iprobe(pscom_request_t *request)
{
    pscom_api_check_req(request);
    if (request->connection) pscom_api_check_con(request->connection);
    if (request->socket) pscom_api_check_sock(request->socket);
    pscom_api_check(request->state & PSCOM_REQ_STATE_DONE, "a request is probed only when DONE");
    pscom_lock();
    pscom.stats.probes++;
    if (++iprobe_calls > pscom_config.iprobe_count) {
        iprobe_calls = 0;
        pscom_progress(0);
    }
    pscom_req_state_set(request, PSCOM_REQ_STATE_RECV_REQUEST | PSCOM_REQ_STATE_POSTED);
    pscom_req_t *gen = pscom_unexpected_find(request);
    int res          = 0;
    if (gen) {
        size_t n = request->xheader_len;
        if (n > request->max_xheader_len) n = request->max_xheader_len;
        if (n > gen->pub.header.xheader_len) n = gen->pub.header.xheader_len;
        memcpy(&request->header, &gen->pub.header, sizeof(pscom_header_net_t) + n);
        request->connection = gen->pub.connection;
        if (gen->pub.data_len > request->data_len)
            pscom_req_state_add(request, PSCOM_REQ_STATE_TRUNCATED);
        pscom.stats.iprobes_ok++;
        res = 1;
    }
    pscom_req_state_add(request, PSCOM_REQ_STATE_DONE);
    pscom_unlock();
    return res;
}

PSCOM_API void pscom_probe(pscom_request_t *request)
{
    while (!pscom_iprobe(request)) pscom_wait_any();
}
