/*
 * pscom_rndv.c - rendezvous protocol (see pscom_rndv.h).
 */
#include "pscom_rndv.h"

#include <errno.h>
#include <string.h>

#include "pscom_con.h"
#include "pscom_core.h"
#include "pscom_log.h"
#include "pscom_plugin.h"
#include "pscom_queues.h"
#include "pscom_req.h"
#include "pscom_wire.h"

static uint64_t next_id = 1;

static pscom_req_t *find_id(pscom_list_t *q, uint64_t id)
{
    pscom_list_t *pos;
    pscom_list_for_each(pos, q) {
        pscom_req_t *req = pscom_list_entry(pos, pscom_req_t, next);
        if (req->id == id) return req;
    }
    return NULL;
}

/* ---- sender ------------------------------------------------------------ */

/* The transport's export of a rendezvous send's buffer is no longer read. */
static void export_release(pscom_con_t *con, pscom_req_t *req)
{
    if (!req->rndv_handle) return;
    con->transport->ops->rndv_release(con, req->rndv_handle);
    req->rndv_handle = NULL;
}

void pscom_rndv_send(pscom_con_t *con, pscom_req_t *req)
{
    pscom_request_t *r = &req->pub;
    size_t xlen        = (uint16_t)r->xheader_len;

    /* the announcement is ordered with the other sends; cancel is no longer possible */
    pscom_req_state_add(r, PSCOM_REQ_STATE_RENDEZVOUS_REQUEST | PSCOM_REQ_STATE_IO_STARTED);
    pscom_req_t *rts_req = pscom_ctrl_create(PSCOM_MSGTYPE_RENDEZVOUS_REQ, &r->xheader, xlen,
                                             sizeof(pscom_rndv_rts_t));
    if (!rts_req) {
        pscom_req_complete_with(req, PSCOM_REQ_STATE_ERROR);
        return;
    }
    req->id          = next_id++;
    req->con         = con;
    req->rndv_handle = NULL;
    pscom.stats.rndv_sends++;
    uint64_t src = 0, key = 0;
    if (pscom_con_direct(con, PSCOM_PLUGIN_CAP_RNDV_READ, r->data_len)) {
        const pscom_plugin_ops_t *ops = con->transport->ops;
        if (ops->rndv_export) key = ops->rndv_export(con, r->data, r->data_len, &req->rndv_handle);
        if (key || !ops->rndv_export) src = (uint64_t)(uintptr_t)r->data;
    }
    pscom_rndv_rts_t rts = {
        .sender_id = htole64(req->id),
        .data_len  = htole64(r->data_len),
        .src_addr  = htole64(src),
        .src_key   = htole64(key),
    };
    memcpy(rts_req->pub.data, &rts, sizeof(rts));
    pscom_list_add_tail(&req->next, &con->rndv_sends);
    pscom_con_send_ctrl(con, rts_req);
}

static void data_sent(pscom_req_t *dreq)
{
    pscom_req_t *req = *(pscom_req_t **)dreq->pub.user;
    if (dreq->pub.state & PSCOM_REQ_STATE_ERROR)
        pscom_req_state_add(&req->pub, PSCOM_REQ_STATE_ERROR);
    pscom_req_free(dreq);
    pscom_req_complete(req);
}

static int recv_cts(pscom_con_t *con, const pscom_rndv_cts_t *cts)
{
    uint64_t sender_id = le64toh(cts->sender_id);
    uint64_t len       = le64toh(cts->len);
    pscom_req_t *req   = find_id(&con->rndv_sends, sender_id);
    if (!req || len > req->pub.data_len) {
        plog_err("%s: rendezvous: bogus CTS (id %llu, len %llu)", pscom_con_name(con),
                 (unsigned long long)sender_id, (unsigned long long)len);
        return -1;
    }
    pscom_list_del(&req->next);
    export_release(con, req); /* push mode */
    if (!len) {
        pscom_req_complete(req);
        pscom_con_rndv_sends_drained(con);
        return 0;
    }
    uint64_t recv_id     = cts->recv_id; /* little-endian already */
    pscom_req_t *dreq    = pscom_ctrl_create(PSCOM_MSGTYPE_RENDEZVOUS_DATA, &recv_id,
                                             sizeof(recv_id), sizeof(pscom_req_t *));
    if (!dreq) {
        pscom_req_complete_with(req, PSCOM_REQ_STATE_ERROR);
        pscom_con_rndv_sends_drained(con);
        return 0;
    }
    *(pscom_req_t **)dreq->pub.user = req;
    pscom_ctrl_set_data(dreq, req->pub.data, (size_t)len);
    dreq->on_done = data_sent;
    pscom_con_send_ctrl(con, dreq);
    pscom_con_rndv_sends_drained(con); /* a deferred EOF goes behind the data */
    return 0;
}

static int recv_fin(pscom_con_t *con, const pscom_rndv_fin_t *fin)
{
    pscom_req_t *req = find_id(&con->rndv_sends, le64toh(fin->sender_id));
    if (!req) {
        plog_err("%s: rendezvous: FIN for an unknown send", pscom_con_name(con));
        return -1;
    }
    pscom_list_del(&req->next);
    export_release(con, req);
    if (fin->status) pscom_req_state_add(&req->pub, PSCOM_REQ_STATE_ERROR);
    pscom_req_complete(req);
    pscom_con_rndv_sends_drained(con);
    return 0;
}

/* ---- receiver ---------------------------------------------------------- */

static void send_fin(pscom_con_t *con, uint64_t sender_id, uint64_t status)
{
    pscom_rndv_fin_t fin = {.sender_id = htole64(sender_id), .status = htole64(status)};
    pscom_req_t *req     = pscom_ctrl_create(PSCOM_MSGTYPE_RENDEZVOUS_FIN, &fin, sizeof(fin), 0);
    if (req) pscom_con_send_ctrl(con, req);
}

int pscom_rndv_decline(pscom_con_t *con, const pscom_rndv_rts_t *rts)
{
    if (!pscom_con_writable(con)) return 0; /* our EOF is out: the peer's send fails at it */
    send_fin(con, le64toh(rts->sender_id), PSCOM_RNDV_FIN_DROPPED);
    return 1;
}

/* Read len bytes of the sender's buffer src straight into dst: with the
 * key its transport exported, or without one (memory the transport can
 * read as it is). 0, or <0: push mode then. */
static int direct_read(pscom_con_t *con, void *dst, uint64_t src, uint64_t key, size_t len)
{
    const pscom_plugin_ops_t *ops = con->transport->ops;
    if (key) return ops->rndv_read ? ops->rndv_read(con, dst, src, key, len) : -1;
    return ops->rma_read ? ops->rma_read(con, dst, src, len) : -1;
}

void pscom_rndv_matched(pscom_con_t *con, pscom_req_t *req, const pscom_rndv_rts_t *rts)
{
    uint64_t sender_id = le64toh(rts->sender_id);
    uint64_t full      = le64toh(rts->data_len);
    uint64_t src       = le64toh(rts->src_addr);
    uint64_t key       = le64toh(rts->src_key);
    pscom.stats.rndv_recvs++;
    size_t len         = full < req->pub.data_len ? (size_t)full : req->pub.data_len;

    pscom_req_state_add(&req->pub, PSCOM_REQ_STATE_RENDEZVOUS_REQUEST | PSCOM_REQ_STATE_IO_STARTED);
    if (!pscom_con_writable(con) || !pscom_con_readable(con)) {
        /* an announcement kept as unexpected message of a connection that
         * has failed or closed since: the data can never come */
        pscom_req_complete_with(req, PSCOM_REQ_STATE_ERROR);
        return;
    }
    if (src && pscom_con_direct(con, PSCOM_PLUGIN_CAP_RNDV_READ, len) &&
        direct_read(con, req->pub.data, src, key, len) == 0) {
        send_fin(con, sender_id, 0);
        pscom_req_complete(req);
        return;
    }
    pscom_rndv_cts_t cts = {.sender_id = htole64(sender_id), .len = htole64(len)};
    if (len) {
        req->id       = next_id++;
        req->con      = con;
        req->rndv_len = len; /* the DATA must bring exactly this */
        cts.recv_id   = htole64(req->id);
        pscom_list_add_tail(&req->next, &con->rndv_recvs);
    }
    pscom_req_t *creq = pscom_ctrl_create(PSCOM_MSGTYPE_RENDEZVOUS_CTS, &cts, sizeof(cts), 0);
    if (!creq) {
        if (len) pscom_list_del(&req->next);
        pscom_req_complete_with(req, PSCOM_REQ_STATE_ERROR);
        return;
    }
    pscom_con_send_ctrl(con, creq);
    if (!len) pscom_req_complete(req);
}

/* The whole announcement (header, xheader, rts) has arrived in tmp. */
static void rts_arrived(pscom_req_t *tmp)
{
    pscom_con_t *con = tmp->con;
    if (tmp->pub.state & PSCOM_REQ_STATE_ERROR) {
        pscom_req_free(tmp);
        return;
    }
    pscom_rndv_rts_t rts;
    memcpy(&rts, tmp->pub.data, sizeof(rts));
    if (le64toh(rts.data_len) > PSCOM_DATA_LEN_MASK) {
        /* more than a message can hold (40 bits): a broken peer */
        plog_err("%s: protocol error: rendezvous announcement of %llu bytes; closing the "
                 "connection",
                 pscom_con_name(con), (unsigned long long)le64toh(rts.data_len));
        pscom_req_free(tmp);
        pscom_con_transport_error(con, PSCOM_OP_READ, EPROTO);
        return;
    }
    if (con->user_closed) {
        /* spec 5.7: after a local close nothing is matched any more (an
         * any-source receive would be taken and failed): dropped, as the
         * close dropped the unexpected messages before it */
        int told = pscom_rndv_decline(con, &rts);
        plog_dbg("%s: rendezvous announcement after the close: dropped%s", pscom_con_name(con),
                 told ? " (FIN with an error status sent)" : "");
        pscom_req_free(tmp);
        return;
    }
    /* present it to matching as the USER message it stands for */
    pscom_wire_header_encode(&tmp->pub.header, (uint16_t)tmp->pub.xheader_len,
                             PSCOM_MSGTYPE_USER, le64toh(rts.data_len));
    pscom_req_t *req = pscom_match_incoming(con, &tmp->pub.header, &rts);
    pscom_req_free(tmp);
    if (!req) {
        plog_err("%s: rendezvous: out of memory", pscom_con_name(con));
        return;
    }
    if (req->pub.state & PSCOM_REQ_STATE_GRECV_REQUEST) {
        pscom_unexpected_done(req); /* waits for a receive to be posted */
    } else {
        pscom_rndv_matched(con, req, &rts);
    }
}

static int recv_rts(pscom_con_t *con, pscom_header_net_t *hn, pscom_req_t **reqp)
{
    if (hn->data_len != sizeof(pscom_rndv_rts_t)) return -1;
    size_t xlen      = hn->xheader_len;
    pscom_req_t *tmp = pscom_req_create(xlen, sizeof(pscom_rndv_rts_t));
    if (!tmp) return -1;
    memcpy(&tmp->pub.header, hn, sizeof(*hn) + xlen);
    tmp->pub.xheader_len = xlen;
    tmp->pub.data        = tmp->pub.user;
    tmp->pub.data_len    = sizeof(pscom_rndv_rts_t);
    pscom_req_state_set(&tmp->pub, PSCOM_REQ_STATE_RECV_REQUEST);
    tmp->con             = con;
    tmp->on_done         = rts_arrived;
    *reqp                = tmp;
    return 0;
}

static int recv_data(pscom_con_t *con, pscom_header_net_t *hn, pscom_req_t **reqp)
{
    uint64_t recv_id;
    if (hn->xheader_len != sizeof(recv_id)) return -1;
    memcpy(&recv_id, hn->xheader, sizeof(recv_id));
    pscom_req_t *req = find_id(&con->rndv_recvs, le64toh(recv_id));
    if (!req) {
        plog_err("%s: rendezvous: data for an unknown receive", pscom_con_name(con));
        return -1;
    }
    uint16_t xlen;
    uint8_t type;
    uint64_t dlen;
    pscom_wire_header_decode(hn, &xlen, &type, &dlen);
    if (dlen != req->rndv_len) {
        /* the receive stays in rndv_recvs: the connection's failure fails it */
        plog_err("%s: rendezvous: DATA of %llu bytes for a receive that asked for %llu",
                 pscom_con_name(con), (unsigned long long)dlen,
                 (unsigned long long)req->rndv_len);
        return -1;
    }
    pscom_list_del(&req->next);
    *reqp = req; /* completes normally when the data is in */
    return 0;
}

int pscom_rndv_recv(pscom_con_t *con, pscom_header_net_t *hn, pscom_req_t **reqp)
{
    *reqp = NULL;
    switch (hn->msg_type) {
    case PSCOM_MSGTYPE_RENDEZVOUS_REQ: return recv_rts(con, hn, reqp);
    case PSCOM_MSGTYPE_RENDEZVOUS_DATA: return recv_data(con, hn, reqp);
    case PSCOM_MSGTYPE_RENDEZVOUS_CTS:
        if (hn->xheader_len != sizeof(pscom_rndv_cts_t) || hn->data_len) return -1;
        return recv_cts(con, (const pscom_rndv_cts_t *)hn->xheader);
    case PSCOM_MSGTYPE_RENDEZVOUS_FIN:
        if (hn->xheader_len != sizeof(pscom_rndv_fin_t) || hn->data_len) return -1;
        return recv_fin(con, (const pscom_rndv_fin_t *)hn->xheader);
    }
    return -1;
}

void pscom_rndv_fail_con(pscom_con_t *con)
{
    pscom_list_t *pos;
    pscom_list_for_each(pos, &con->rndv_sends) {
        export_release(con, pscom_list_entry(pos, pscom_req_t, next));
    }
    pscom_req_fail_all(&con->rndv_sends);
    pscom_req_fail_all(&con->rndv_recvs);
}
