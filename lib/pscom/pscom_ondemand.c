/*
 * pscom_ondemand.c - on-demand connections (see pscom_ondemand.h).
 */
#include "pscom_ondemand.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "pscom_con.h"
#include "pscom_config.h"
#include "pscom_list.h"
#include "pscom_log.h"
#include "pscom_precon.h"
#include "pscom_progress.h"
#include "pscom_sock.h"
#include "pscom_wire.h"

/* ---- the pseudo-transport --------------------------------------------------- */

static int od_con_start(pscom_con_t *con, int *fd)
{
    return 0;
}

/* the first write starts the connect */
static void od_write_start(pscom_con_t *con)
{
    pscom_ondemand_connect(con);
}

static void od_close(pscom_con_t *con)
{
}

static const pscom_plugin_ops_t od_ops = {
    .con_start   = od_con_start,
    .write_start = od_write_start,
    .close       = od_close,
};

const pscom_plugin_desc_t pscom_ondemand_desc = {
    .abi_version = PSCOM_PLUGIN_ABI_VERSION,
    .desc_size   = sizeof(pscom_plugin_desc_t),
    .name        = "ondemand",
    .con_type    = PSCOM_CON_TYPE_ONDEMAND,
    .ops         = &od_ops,
};

/* ---- back-connect bookkeeping ------------------------------------------------
 * One entry per connection of the higher name that asked its peer to
 * connect back and is not connected yet (requesting/awaiting). Entries do
 * not hold a reference: pscom_sock_ondemand_changed() (called before such
 * a connection can be freed) sweeps them. */

typedef struct od_wait {
    pscom_list_t next; /* od_waits */
    pscom_con_t *con;
    pscom_timer_t timer;
    unsigned requests; /* back-connect requests sent */
} od_wait_t;

static pscom_list_t od_waits = PSCOM_LIST_INIT(od_waits);

static od_wait_t *wait_find(const pscom_con_t *con)
{
    pscom_list_t *pos;
    pscom_list_for_each(pos, &od_waits) {
        od_wait_t *w = pscom_list_entry(pos, od_wait_t, next);
        if (w->con == con) return w;
    }
    return NULL;
}

static void wait_free(od_wait_t *w)
{
    pscom_timer_stop(&w->timer);
    pscom_list_del(&w->next);
    free(w);
}

static void request(od_wait_t *w)
{
    pscom_con_t *con = w->con;
    w->requests++;
    pscom_timer_stop(&w->timer);
    pscom_precon_backconnect_to(con, con->od_addr, con->od_port);
}

static void await_expired(pscom_timer_t *timer)
{
    od_wait_t *w     = timer->priv;
    pscom_con_t *con = w->con;
    if (w->requests > pscom_config.retry) {
        plog_err("%s: the peer promised to connect back but did not within %u ms "
                 "(PSP_PRECON_TCP_RECONNECT_TIMEOUT x PSP_PRECON_TCP_CONNECT_STALLED_MAX), "
                 "%u requests (PSP_RETRY=%u)",
                 pscom_con_name(con), pscom_config_stall_window_ms(), w->requests,
                 pscom_config.retry);
        errno = ETIMEDOUT;
        pscom_con_setup_failed(con, PSCOM_ERR_STDERROR); /* sweeps w */
        return;
    }
    plog_dbg("%s: no back-connect within %u ms; asking again", pscom_con_name(con),
             pscom_config_stall_window_ms());
    request(w);
}

/* ---- on-demand connections ---------------------------------------------------- */

void pscom_ondemand_setup(pscom_con_t *con, const pscom_ep_t *ep)
{
    con->ondemand   = 1;
    con->od_started = 0;
    con->od_addr    = ep->addr;
    con->od_port    = ep->port;
    con->transport  = &pscom_ondemand_desc;
    con->pub.state  = PSCOM_CON_STATE_RW;
    con->pub.type   = PSCOM_CON_TYPE_ONDEMAND;
    pscom_con_list(con);
}

static int we_connect(pscom_con_t *con)
{
    /* the lower name connects (names are unique: a tie is refused before) */
    return memcmp(con->pub.remote_con_info.name, con->sock->pub.local_con_info.name, 8) >= 0;
}

void pscom_ondemand_connect(pscom_con_t *con)
{
    if (!con->ondemand || con->od_started || con->precon || con->user_closed) return;
    con->od_started = 1;
    if (!memcmp(con->pub.remote_con_info.name, con->sock->pub.local_con_info.name, 8)) {
        plog_err("%s: the peer socket has our name \"%.8s\": on-demand connections need unique "
                 "socket names (pscom_socket_set_name)",
                 pscom_con_name(con), con->pub.remote_con_info.name);
        pscom_con_setup_failed(con, PSCOM_ERR_INVALID);
        return;
    }
    if (we_connect(con)) {
        con->transport = NULL;
        con->pub.state = PSCOM_CON_STATE_CONNECTING_ONDEMAND;
        pscom_precon_connect_to(con, con->od_addr, con->od_port, PSCOM_PRECON_FLAG_ONDEMAND, NULL);
        return;
    }
    /* ask the peer to connect to us; con stays on-demand meanwhile */
    od_wait_t *w = wait_find(con);
    if (!w) {
        w = calloc(1, sizeof(*w));
        if (!w) {
            errno = ENOMEM;
            pscom_con_setup_failed(con, PSCOM_ERR_STDERROR);
            return;
        }
        w->con        = con;
        w->timer.fn   = await_expired;
        w->timer.priv = w;
        pscom_list_add_tail(&w->next, &od_waits);
    }
    request(w);
}

int pscom_ondemand_waiting(const pscom_con_t *con)
{
    return con->ondemand && !con->precon && !con->user_closed;
}

void pscom_ondemand_adopted(pscom_con_t *con)
{
    od_wait_t *w = wait_find(con);
    if (w) wait_free(w);
}

void pscom_ondemand_revert(pscom_con_t *con)
{
    plog_dbg("%s: the peer's on-demand connect failed; waiting again", pscom_con_name(con));
    con->transport  = &pscom_ondemand_desc;
    con->pub.state  = PSCOM_CON_STATE_RW;
    con->pub.type   = PSCOM_CON_TYPE_ONDEMAND;
    con->od_started = 0;
    if (pscom_write_pending(con)) pscom_ondemand_connect(con);
}

void pscom_ondemand_backconnect_done(pscom_con_t *owner, int failed, pscom_err_t err)
{
    od_wait_t *w = wait_find(owner);
    if (!pscom_ondemand_waiting(owner)) return; /* adopted, connected or closed meanwhile */
    if (failed) {
        int e = errno;
        plog_err("%s: asking the peer to connect back failed: %s", pscom_con_name(owner),
                 strerror(e));
        errno = e;
        pscom_con_setup_failed(owner, err); /* sweeps w */
        return;
    }
    /* no limit while the stall check is off (PSP_PRECON_TCP_RECONNECT_TIMEOUT=0) */
    unsigned window = pscom_config_stall_window_ms();
    if (w && window) pscom_timer_start(&w->timer, window);
}

void pscom_ondemand_sweep(pscom_sock_t *sock)
{
    pscom_precon_backconnect_sweep(sock);
    pscom_list_t *pos, *tmp;
    pscom_list_for_each_safe(pos, tmp, &od_waits) {
        od_wait_t *w = pscom_list_entry(pos, od_wait_t, next);
        if (w->con->sock == sock && (!w->con->ondemand || w->con->user_closed)) wait_free(w);
    }
}

static int name_is(const pscom_con_t *con, const char name[8])
{
    return !memcmp(con->pub.remote_con_info.name, name, 8);
}

pscom_con_t *pscom_ondemand_find(pscom_sock_t *sock, const char name[8])
{
    pscom_list_t *pos;
    pscom_list_for_each(pos, &sock->connections) {
        pscom_con_t *con = pscom_list_entry(pos, pscom_con_t, sock_next);
        if (con->ondemand && !con->user_closed && name_is(con, name)) return con;
    }
    return NULL;
}

pscom_con_t *pscom_ondemand_lookup(pscom_sock_t *sock, const char name[8])
{
    pscom_con_t *was = NULL;
    pscom_list_t *pos;
    pscom_list_for_each(pos, &sock->connections) {
        pscom_con_t *con = pscom_list_entry(pos, pscom_con_t, sock_next);
        if (con->user_closed || !name_is(con, name)) continue;
        if (con->ondemand) return con;
        if (con->od_started && !was) was = con;
    }
    return was;
}

int pscom_ondemand_pending(pscom_sock_t *sock)
{
    pscom_list_t *pos;
    pscom_list_for_each(pos, &sock->connections) {
        pscom_con_t *con = pscom_list_entry(pos, pscom_con_t, sock_next);
        if (con->ondemand && !con->user_closed) return 1;
    }
    return 0;
}
