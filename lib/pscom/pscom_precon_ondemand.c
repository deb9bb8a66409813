/*
 * pscom_precon_ondemand.c - the on-demand part of the handshake: a peer's
 * connect continues on our waiting on-demand connection for its name
 * ("adoption"), and back-connect requests, ours (a short handshake on a
 * library-owned connection, in flight in `backconnects`) and the peer's.
 */
#include "pscom_precon_priv.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "pscom_con.h"
#include "pscom_ondemand.h"
#include "pscom_plugin_reg.h"
#include "pscom_sock.h"

/* back-connect requests in flight (od_owner set), of every socket */
static pscom_list_t backconnects = PSCOM_LIST_INIT(backconnects);

/* A back-connect request ended: the waiting on-demand connection is told
 * and released from it. */
void precon_backconnect_end(pscom_precon_t *pre, int failed, pscom_err_t err)
{
    pscom_con_t *owner = pre->od_owner;
    if (!owner) return;
    pre->od_owner = NULL;
    pscom_list_del(&pre->bc_next);
    owner->refcnt--;
    pscom_ondemand_backconnect_done(owner, failed, err);
    pscom_con_release(owner);
}

/* Accept side: our adopted on-demand object survives a failed handshake
 * (the peer retries, or tells us it gave up when we ask). */
int precon_adopted_ondemand(const pscom_precon_t *pre)
{
    return !pre->is_connect && pre->con->ondemand && !pre->con->user_closed;
}

static int same_name(const pscom_precon_t *pre)
{
    if (memcmp(pre->peer.name, pre->con->sock->pub.local_con_info.name, 8)) return 0;
    plog_err("%s: the peer socket has our name \"%.8s\": on-demand connections need unique "
             "socket names (pscom_socket_set_name); refused",
             pscom_con_name(pre->con), pre->peer.name);
    return 1;
}

/* The peer connects for an on-demand connection; continue on our own
 * waiting on-demand object for it instead of the new one. Returns 0 when
 * adopted, -1 when refused or dropped (pre is gone). */
int precon_adopt_ondemand(pscom_precon_t *pre)
{
    pscom_con_t *tmp = pre->con;
    if (same_name(pre)) {
        precon_refuse(pre, PSCOM_PRECON_REJECT_FAILED);
        return -1;
    }
    pscom_con_t *m = pscom_ondemand_find(tmp->sock, pre->peer.name);
    if (!m) {
        plog_warn("%s: on-demand connection from \"%.8s\" without a matching on-demand "
                  "connection: refused", pscom_con_name(tmp), pre->peer.name);
        precon_refuse(pre, PSCOM_PRECON_REJECT_NOMATCH);
        return -1;
    }
    pscom_precon_t *old = m->precon;
    if (old) {
        if (old->is_connect) {
            /* only the lower name connects: this is not the peer we know */
            plog_warn("%s: unexpected on-demand connection from \"%.8s\" while connecting "
                      "to it: refused", pscom_con_name(tmp), pre->peer.name);
            precon_refuse(pre, PSCOM_PRECON_REJECT_NOMATCH);
            return -1;
        }
        if (old->peer.con_id == pre->peer.con_id && old->peer_attempt > pre->peer_attempt) {
            /* an attempt the peer already abandoned, overtaken by a newer one */
            dprecon(pre, "precon accept %p: stale attempt %u (have %u)", (void *)pre,
                    pre->peer_attempt, old->peer_attempt);
            precon_refuse(pre, PSCOM_PRECON_REJECT_NOMATCH);
            return -1;
        }
        /* a newer attempt replaces the one in progress */
        dprecon(pre, "precon accept %p: attempt %u replaces %p", (void *)pre, pre->peer_attempt,
                (void *)old);
        precon_cand_abort(old);
        precon_destroy(old);
    }
    tmp->precon    = NULL;
    tmp->pub.state = PSCOM_CON_STATE_CLOSED;
    pscom_con_release(tmp); /* library-owned, never seen by the user */
    pre->con       = m;
    m->precon      = pre;
    m->transport   = NULL;
    m->od_started  = 1;
    m->pub.state   = PSCOM_CON_STATE_ACCEPTING_ONDEMAND;
    pscom_ondemand_adopted(m);
    return 0;
}

/* The peer asks us to connect to it. */
void precon_handle_backconnect(pscom_precon_t *pre)
{
    if (same_name(pre)) {
        precon_refuse(pre, PSCOM_PRECON_REJECT_FAILED);
        return;
    }
    pscom_con_t *m = pscom_ondemand_lookup(pre->con->sock, pre->peer.name);
    if (!m) {
        plog_warn("%s: back-connect request from \"%.8s\" without a matching on-demand "
                  "connection: refused", pscom_con_name(pre->con), pre->peer.name);
        precon_refuse(pre, PSCOM_PRECON_REJECT_NOMATCH);
        return;
    }
    if (m->connect_failed) {
        precon_refuse(pre, PSCOM_PRECON_REJECT_FAILED); /* we gave up on it: so should the peer */
        return;
    }
    if (!m->ondemand) {
        /* already connected: a request that crossed the connection */
        precon_refuse(pre, PSCOM_PRECON_REJECT_NOMATCH);
        return;
    }
    if (precon_send_hello(pre) < 0 || precon_send_msg(pre, PSCOM_PRECON_BACKCONNECT_OK, NULL, 0, NULL, 0) < 0) {
        precon_fail(pre, PSCOM_ERR_STDERROR, errno);
        return;
    }
    precon_finish_quietly(pre);
    pscom_ondemand_connect(m);
}

void pscom_precon_backconnect_to(pscom_con_t *owner, uint32_t addr, int port)
{
    pscom_con_t *tmp = pscom_con_create(owner->sock);
    if (!tmp) {
        errno = ENOMEM;
        pscom_ondemand_backconnect_done(owner, 1, PSCOM_ERR_STDERROR);
        return;
    }
    tmp->user_closed         = 1; /* library-owned */
    tmp->pub.state           = PSCOM_CON_STATE_CONNECTING;
    tmp->pub.remote_con_info = owner->pub.remote_con_info;
    pscom_con_list(tmp);
    pscom_precon_t *pre = precon_create(tmp, 1);
    if (!pre) {
        pscom_con_setup_failed(tmp, PSCOM_ERR_STDERROR);
        errno = ENOMEM;
        pscom_ondemand_backconnect_done(owner, 1, PSCOM_ERR_STDERROR);
        return;
    }
    owner->refcnt++;
    pscom_list_add_tail(&pre->bc_next, &backconnects);
    pre->addr     = addr;
    pre->port     = port;
    pre->flags    = PSCOM_PRECON_FLAG_BACKCONNECT;
    pre->od_owner = owner;
    precon_attempt_start(pre);
}

void pscom_precon_backconnect_sweep(pscom_sock_t *sock)
{
    pscom_list_t *pos;
again:
    pscom_list_for_each(pos, &backconnects) {
        pscom_precon_t *pre = pscom_list_entry(pos, pscom_precon_t, bc_next);
        pscom_con_t *owner  = pre->od_owner;
        if (owner->sock == sock && (!owner->ondemand || owner->user_closed)) {
            pscom_precon_abort(pre); /* leaves the list, may release owner: start over */
            goto again;
        }
    }
}
