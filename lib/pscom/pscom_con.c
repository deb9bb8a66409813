/*
 * pscom_con.c - connection life cycle: creation, set-up, the EOF close
 * handshake, transport failure and error reporting.
 *
 * Close handshake: each side queues an EOF message behind its pending
 * sends. A side that receives the peer's EOF ends its read side (posted
 * receives fail, con_error(READ, EOF) unless the user closed) and answers
 * with its own EOF. When our EOF has left and the peer's has arrived, the
 * transport is closed and the state is CLOSED. The object is freed only
 * after the user closed it and no deferred callback refers to it.
 */
#include "pscom_con.h"

#include <assert.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pscom_config.h"
#include "pscom_core.h"
#include "pscom_group.h"
#include "pscom_log.h"
#include "pscom_loop.h"
#include "pscom_plugin.h"
#include "pscom_precon.h"
#include "pscom_progress.h"
#include "pscom_queues.h"
#include "pscom_req.h"
#include "pscom_rma.h"
#include "pscom_rndv.h"
#include "pscom_sock.h"
#include "pscom_wire.h"

pscom_con_t *pscom_con_create(pscom_sock_t *sock)
{
    /* cannot wrap: pscom_open_socket refused such a connection_userdata_size */
    size_t size      = sizeof(pscom_con_t) + sock->pub.connection_userdata_size;
    pscom_con_t *con = calloc(1, size);
    if (!con) return NULL;
    con->magic = PSCOM_CON_MAGIC;
    con->sock  = sock;
    pscom_list_init(&con->sock_next);
    pscom_list_init(&con->sendq);
    pscom_list_init(&con->recvq_user);
    pscom_list_init(&con->genrecvq);
    pscom_list_init(&con->rndv_sends);
    pscom_list_init(&con->rndv_recvs);
    pscom_list_init(&con->rma_pending);
    con->rendezvous_size = pscom_config.rendezvous >= PSCOM_ENV_UINT_INF
                               ? SIZE_MAX
                               : pscom_config.rendezvous;
    con->rma_direct_size   = SIZE_MAX;
    con->pub.socket        = &sock->pub;
    con->pub.state         = PSCOM_CON_STATE_CLOSED;
    con->pub.type          = PSCOM_CON_TYPE_NONE;
    con->pub.userdata_size = sock->pub.connection_userdata_size;
    con->pub.remote_con_info.rank = PSCOM_RANK_UNDEFINED;
    con->pub.remote_con_info.tcp.portno = -1;
    return con;
}

void pscom_con_list(pscom_con_t *con)
{
    if (con->listed) return;
    pscom_list_add_tail(&con->sock_next, &con->sock->connections);
    con->listed = 1;
}

/* ---- accessors of the plugin SDK ------------------------------------ */

void *pscom_con_plugin_priv(pscom_con_t *con)
{
    return con->plugin_priv;
}

pscom_connection_t *pscom_con_pub(pscom_con_t *con)
{
    return &con->pub;
}

pscom_sock_t *pscom_con_sock(pscom_con_t *con)
{
    return con->sock;
}

void pscom_con_set_rendezvous_size(pscom_con_t *con, size_t size)
{
    con->rendezvous_size = size;
}

void pscom_con_set_rma_direct_size(pscom_con_t *con, size_t size)
{
    con->rma_direct_size = size;
}

int pscom_con_direct(const pscom_con_t *con, uint64_t cap, size_t len)
{
    return len && len >= con->rma_direct_size && con->transport &&
           (con->transport->caps & cap);
}

const char *pscom_con_name(pscom_con_t *con)
{
    static _Thread_local char buf[64]; /* per thread: pscom_init_thread */
    snprintf(buf, sizeof(buf), "con %p (%.8s)", (void *)&con->pub,
             con->pub.remote_con_info.name);
    return buf;
}

/* ---- deferred user callbacks ------------------------------------------ */

typedef struct con_event {
    pscom_con_t *con;
    pscom_op_t op;
    pscom_err_t err;
    int accept; /* con_accept instead of con_error */
} con_event_t;

/* con_accept/con_error callbacks this thread is running (nested ones too) */
static __thread unsigned con_cb_depth;

static void con_event_done(pscom_request_t *request)
{
    con_event_t *ev  = (con_event_t *)request->user;
    pscom_con_t *con = ev->con;
    pscom_socket_t *s = &con->sock->pub;

    /* decided under the lock, with pscom_con_close: a close that comes
     * while the callback runs waits for it (close_waits_callbacks) */
    pscom_lock();
    int user_closed = con->user_closed;
    if (!user_closed) con->cb_running++;
    pscom_unlock_keep_queue();
    if (!user_closed) {
        con_cb_depth++;
        if (ev->accept) {
            if (s->ops.con_accept) s->ops.con_accept(&con->pub);
        } else if (s->ops.con_error) {
            s->ops.con_error(&con->pub, ev->op, ev->err);
        }
        con_cb_depth--;
    }
    pscom_lock();
    if (!user_closed) con->cb_running--;
    con->refcnt--;
    pscom_req_free(pscom_req_from_pub(request));
    pscom_con_release(con);
    pscom_unlock();
}

static void queue_con_event(pscom_con_t *con, pscom_op_t op, pscom_err_t err, int accept)
{
    pscom_req_t *req = pscom_req_create(0, sizeof(con_event_t));
    if (!req) {
        plog_err("%s: out of memory for a connection callback", pscom_con_name(con));
        return;
    }
    con_event_t *ev = (con_event_t *)req->pub.user;
    ev->con         = con;
    ev->op          = op;
    ev->err         = err;
    ev->accept      = accept;
    req->flags |= PSCOM_REQF_INTERNAL;
    pscom_req_state_set(&req->pub, 0);
    req->pub.ops.io_done = con_event_done;
    con->refcnt++;
    pscom_req_complete(req);
}

void pscom_con_report_error(pscom_con_t *con, pscom_op_t op, pscom_err_t err)
{
    plog_dbg("%s: %s error: %s", pscom_con_name(con), pscom_op_str(op), pscom_err_str(err));
    if (con->user_closed || !con->sock->pub.ops.con_error) {
        if (!con->user_closed && err != PSCOM_ERR_EOF)
            plog_err("%s: %s failed: %s", pscom_con_str(&con->pub), pscom_op_str(op),
                     pscom_err_str(err));
        return;
    }
    queue_con_event(con, op, err, 0);
}

/* ---- set-up ----------------------------------------------------------- */

/* con is no longer on demand (connected, failed or closed): the socket's
 * bookkeeping drops what waited for it, its back-connect requests among
 * them, whose references to con go; con stays until our caller releases it */
static void ondemand_over(pscom_con_t *con)
{
    con->refcnt++;
    pscom_sock_ondemand_changed(con->sock);
    con->refcnt--;
}

void pscom_con_setup_ok(pscom_con_t *con)
{
    int accepted   = con->pub.state == PSCOM_CON_STATE_ACCEPTING;
    int ondemand   = con->ondemand;
    con->pub.state = PSCOM_CON_STATE_RW;
    con->pub.type  = con->transport->con_type;
    con->ondemand  = 0;
    pscom_con_list(con);
    if (ondemand) ondemand_over(con);
    pscom_log_force(pscom_config.debug_contype, PSCOM_LOG_INFO, "%s %s via %s",
                    accepted ? "ACCEPT" : "CONNECT", pscom_con_str(&con->pub),
                    con->transport->name);
    if (accepted) {
        con->user_closed = 0; /* from now on the user owns it */
        queue_con_event(con, 0, PSCOM_SUCCESS, 1);
    }
    if (pscom_write_pending(con)) con->transport->ops->write_start(con);
}

void pscom_con_setup_loop(pscom_con_t *con)
{
    pscom_con_info_t *ri = &con->pub.remote_con_info;
    int rank             = ri->rank;
    *ri                  = con->sock->pub.local_con_info;
    ri->rank             = rank;
    ri->id               = &con->pub;
    con->transport       = &pscom_loop_desc;
    con->rma_direct_size = 1; /* loop: direct memory access is a memcpy */
    con->pub.state       = PSCOM_CON_STATE_RW;
    con->pub.type        = PSCOM_CON_TYPE_LOOP;
    pscom_con_list(con);
    pscom_log_force(pscom_config.debug_contype, PSCOM_LOG_INFO, "CONNECT %s via loop",
                    pscom_con_str(&con->pub));
    queue_con_event(con, 0, PSCOM_SUCCESS, 1);
}

void pscom_con_setup_failed(pscom_con_t *con, pscom_err_t err)
{
    int ondemand        = con->ondemand;
    con->connect_failed = 1;
    con->ondemand       = 0;
    con->transport      = NULL;
    con->pub.state      = PSCOM_CON_STATE_CLOSED;
    pscom_con_fail_requests(con);
    /* an on-demand connect is started by a send: it fails as a write */
    if (!con->user_closed)
        pscom_con_report_error(con, ondemand ? PSCOM_OP_WRITE : PSCOM_OP_CONNECT, err);
    if (ondemand) ondemand_over(con);
    pscom_con_release(con);
}

/* ---- sending ---------------------------------------------------------- */

void pscom_con_write_kick(pscom_con_t *con)
{
    if (con->transport && !con->precon && !con->transport_closed)
        con->transport->ops->write_start(con);
}

void pscom_con_queue_send(pscom_con_t *con, pscom_req_t *req)
{
    req->send_off = 0;
    req->send_pad = 0;
    pscom_list_add_tail(&req->next, &con->sendq);
    pscom_con_write_kick(con);
}

pscom_req_t *pscom_ctrl_create(uint8_t type, const void *xheader, size_t xheader_len,
                               size_t data_copy_len)
{
    pscom_req_t *req = pscom_req_create(xheader_len, data_copy_len);
    if (!req) {
        plog_err("out of memory for a control message");
        return NULL;
    }
    req->flags |= PSCOM_REQF_INTERNAL;
    req->on_done     = pscom_ctrl_free;
    pscom_req_state_set(&req->pub, PSCOM_REQ_STATE_SEND_REQUEST | PSCOM_REQ_STATE_POSTED);
    req->pub.data    = req->pub.user;
    req->pub.data_len = data_copy_len;
    req->pub.xheader_len = xheader_len;
    if (xheader_len) memcpy(&req->pub.xheader, xheader, xheader_len);
    pscom_wire_header_encode(&req->pub.header, (uint16_t)xheader_len, type, data_copy_len);
    return req;
}

void pscom_ctrl_set_data(pscom_req_t *req, void *data, size_t len)
{
    uint16_t xlen;
    uint8_t type;
    uint64_t old;
    pscom_wire_header_decode(&req->pub.header, &xlen, &type, &old);
    req->pub.data     = data;
    req->pub.data_len = len;
    pscom_wire_header_encode(&req->pub.header, xlen, type, len);
}

void pscom_ctrl_free(pscom_req_t *req)
{
    pscom_req_free(req);
}

void pscom_con_send_ctrl(pscom_con_t *con, pscom_req_t *req)
{
    req->con = con;
    if (con->eof_queued || con->transport_closed || con->connect_failed) {
        pscom_req_state_add(&req->pub, PSCOM_REQ_STATE_ERROR);
        req->on_done(req);
        return;
    }
    pscom_con_queue_send(con, req);
}

void pscom_con_post_send(pscom_con_t *con, pscom_req_t *req, uint8_t msg_type)
{
    pscom_request_t *r = &req->pub;
    if (pscom_unlikely(r->xheader_len > r->max_xheader_len || r->data_len > PSCOM_DATA_LEN_MASK ||
                       !pscom_con_writable(con))) {
        if (pscom_con_writable(con))
            plog_err("send: xheader_len %zu > max %zu or data_len %zu too large", r->xheader_len,
                     r->max_xheader_len, r->data_len);
        pscom_req_complete_with(req, PSCOM_REQ_STATE_ERROR);
        return;
    }
    /* the xheader length is 16 bits on the wire (truncated, as specified) */
    pscom_wire_header_encode(&r->header, (uint16_t)r->xheader_len, msg_type, r->data_len);
    if (pscom_write_now(con, req)) return;
    pscom_con_queue_send(con, req);
}

static void eof_req_sent(pscom_req_t *req)
{
    pscom_con_t *con = req->con;
    int failed       = req->pub.state & PSCOM_REQ_STATE_ERROR;
    pscom_req_free(req);
    if (!failed) pscom_con_eof_sent(con);
}

static void queue_eof(pscom_con_t *con)
{
    if (con->eof_queued) return;
    pscom_req_t *req = pscom_ctrl_create(PSCOM_MSGTYPE_EOF, NULL, 0, 0);
    if (!req) {
        pscom_con_transport_error(con, PSCOM_OP_WRITE, ENOMEM);
        return;
    }
    req->flags |= PSCOM_REQF_EOF;
    req->on_done = eof_req_sent;
    req->con        = con;
    con->eof_queued = 1; /* before queueing: loopback answers re-entrantly */
    pscom_con_queue_send(con, req);
}

/* ---- closing ---------------------------------------------------------- */

int pscom_con_closing_gracefully(pscom_con_t *con)
{
    return con->eof_sent && con->eof_received;
}

int pscom_con_closing(pscom_con_t *con)
{
    return con->eof_sent || con->eof_received;
}

static void close_transport(pscom_con_t *con)
{
    if (con->transport_closed) return;
    con->transport_closed = 1;
    if (con->transport) con->transport->ops->close(con);
}

static void check_closed(pscom_con_t *con)
{
    if (!(con->eof_sent && con->eof_received)) return;
    close_transport(con);
    pscom_con_fail_requests(con);
    con->pub.state = PSCOM_CON_STATE_CLOSED;
    pscom_con_release(con);
}

void pscom_con_rndv_sends_drained(pscom_con_t *con)
{
    if (!con->eof_deferred || !pscom_list_empty(&con->rndv_sends)) return;
    con->eof_deferred = 0;
    /* the transport failed meanwhile (the last one's DATA could not go
     * out): the connection is closed, no EOF (it would stay queued) */
    if (con->transport_closed) return;
    queue_eof(con);
    if (con->eof_sent) con->pub.state = PSCOM_CON_STATE_CLOSE_WAIT;
    check_closed(con);
}

void pscom_con_eof_received(pscom_con_t *con)
{
    con->eof_received = 1;
    pscom_recv_fail_con(con);
    if (!con->user_closed) {
        pscom_con_report_error(con, PSCOM_OP_READ, PSCOM_ERR_EOF);
        if (con->pub.state == PSCOM_CON_STATE_RW) con->pub.state = PSCOM_CON_STATE_CLOSING;
    }
    queue_eof(con); /* answer with ours (no-op if already queued) */
    check_closed(con);
}

void pscom_con_eof_sent(pscom_con_t *con)
{
    con->eof_sent = 1;
    if (con->user_closed && con->pub.state == PSCOM_CON_STATE_CLOSING)
        con->pub.state = PSCOM_CON_STATE_CLOSE_WAIT;
    check_closed(con);
}

void pscom_con_fail_requests(pscom_con_t *con)
{
    pscom_list_t *pos, *tmp;
    pscom_list_for_each_safe(pos, tmp, &con->sendq) {
        pscom_req_t *req = pscom_list_entry(pos, pscom_req_t, next);
        pscom_list_del(&req->next);
        if (req->flags & PSCOM_REQF_EOF) {
            pscom_req_free(req);
        } else {
            pscom_req_fail(req);
        }
    }
    /* a message being received */
    pscom_req_t *in = con->in.req;
    if (in) {
        con->in.req = NULL;
        if (pscom_read_req_core_own(con, in)) { /* freed */
            pscom_list_del(&in->next);
            pscom_list_del(&in->next_alt);
            pscom_req_free(in);
        } else {
            pscom_req_fail(in);
        }
    }
    if (con->in.pin_merge) pscom_req_fail(con->in.pin_merge); /* matched the pinned one */
    con->in.pin_merge = NULL;
    con->in.pinned    = 0; /* the transport's close op stopped its writes */
    con->in.pin_drop  = 0;
    con->in.skipping  = 0;
    con->in.fill      = 0;
    pscom_recv_fail_con(con);
    pscom_rndv_fail_con(con);
    pscom_rma_fail_con(con);
    pscom_group_fail_con(con);
}

void pscom_con_transport_error(pscom_con_t *con, pscom_op_t op, int err)
{
    if (con->transport_closed) return;
    int graceful = con->eof_received; /* the peer said goodbye before */
    close_transport(con);
    con->eof_received = 1; /* nothing more will be read */
    pscom_con_fail_requests(con);
    con->pub.state = PSCOM_CON_STATE_CLOSED;
    if (!graceful && !con->user_closed) {
        if (err) errno = err;
        if (err == 0 || op == PSCOM_OP_READ) {
            pscom_con_report_error(con, PSCOM_OP_READ, PSCOM_ERR_IOERROR);
        } else {
            pscom_con_report_error(con, op, PSCOM_ERR_STDERROR);
        }
    }
    pscom_con_release(con);
}

int pscom_con_held_by_callback(const pscom_con_t *con)
{
    return con_cb_depth && con->cb_running;
}

/* Threaded: the user closes con while other threads run a con_accept or
 * con_error of it. Once the close returned the user may free what those
 * callbacks use (and the spec has no callback after the close): wait for
 * them, the lock let go. Not when the closing thread is itself inside a
 * connection callback (of con or another): the callbacks waited for could
 * be waiting for it (nested in it, or each closing the other's
 * connection), so it returns at once, as without threads. */
static void close_waits_callbacks(pscom_con_t *con)
{
    if (!pscom.threaded || !con->cb_running || con_cb_depth) return;
    con->refcnt++; /* the callbacks' end must not free con under us */
    while (con->cb_running) {
        pthread_mutex_unlock(&pscom.lock);
        sched_yield();
        pthread_mutex_lock(&pscom.lock);
    }
    con->refcnt--;
}

void pscom_con_close(pscom_con_t *con)
{
    con->user_closed = 1;
    close_waits_callbacks(con);
    pscom_unexpected_drop_con(con);
    if (con->precon) {
        pscom_precon_abort(con->precon);
        return;
    }
    if (con->ondemand) {
        /* never connected: as if the peer's EOF had arrived */
        con->ondemand = 0;
        close_transport(con);
        pscom_con_fail_requests(con);
        con->pub.state = PSCOM_CON_STATE_CLOSED;
        ondemand_over(con);
        pscom_con_release(con);
        return;
    }
    if (con->transport_closed || con->connect_failed || !con->transport) {
        pscom_con_fail_requests(con);
        con->pub.state = PSCOM_CON_STATE_CLOSED;
        pscom_con_release(con);
        return;
    }
    if (con->pub.state & (PSCOM_CON_STATE_RW)) con->pub.state = PSCOM_CON_STATE_CLOSING;
    if (!pscom_list_empty(&con->rndv_sends)) {
        /* the EOF goes behind the data of pending rendezvous sends (spec 5.7) */
        con->eof_deferred = 1;
        return;
    }
    queue_eof(con);
    if (con->eof_sent) con->pub.state = PSCOM_CON_STATE_CLOSE_WAIT;
    check_closed(con);
}

void pscom_con_release(pscom_con_t *con)
{
    if (!con->user_closed || con->refcnt || con->precon) return;
    if (con->transport && !con->transport_closed) return;
    if (con->magic != PSCOM_CON_MAGIC) return; /* already released */
    if (con->listed) {
        pscom_list_del(&con->sock_next);
        con->listed = 0;
    }
    pscom_unexpected_drop_con(con);
    con->magic = 0;
    free(con->in.buf);
    con->in.buf = NULL;
    if (con->plugin_priv) pscom_defer_free(con->plugin_priv);
    pscom_defer_free(con);
}
