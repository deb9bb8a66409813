/*
 * pscom_ondemand.c - on-demand connections (see pscom_ondemand.h).
 */
#include "pscom_ondemand.h"

#include <errno.h>
#include <string.h>

#include "pscom_con.h"
#include "pscom_log.h"
#include "pscom_precon.h"
#include "pscom_precon_tcp.h"
#include "pscom_sock.h"
#include "pscom_wire.h"

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
    /* the lower name connects; on a tie both try and the peer refuses */
    return memcmp(con->pub.remote_con_info.name, con->sock->pub.local_con_info.name, 8) >= 0;
}

void pscom_ondemand_connect(pscom_con_t *con)
{
    if (!con->ondemand || con->od_started) return;
    con->od_started = 1;
    int fd          = pscom_tcp_connect(con->od_addr, con->od_port);
    if (fd < 0) {
        plog_err("%s: on-demand connect failed: %m", pscom_con_name(con));
        pscom_con_setup_failed(con, PSCOM_ERR_STDERROR);
        return;
    }
    if (we_connect(con)) {
        con->transport = NULL;
        con->pub.state = PSCOM_CON_STATE_CONNECTING_ONDEMAND;
        if (pscom_precon_connect_flags(con, fd, PSCOM_PRECON_FLAG_ONDEMAND) < 0)
            pscom_con_setup_failed(con, PSCOM_ERR_STDERROR);
    } else {
        /* ask the peer to connect to us; con stays on-demand meanwhile */
        pscom_precon_backconnect(con, fd);
    }
}

pscom_con_t *pscom_ondemand_find(pscom_sock_t *sock, const char name[8])
{
    pscom_list_t *pos;
    pscom_list_for_each(pos, &sock->connections) {
        pscom_con_t *con = pscom_list_entry(pos, pscom_con_t, sock_next);
        if (con->ondemand && !con->precon && !con->user_closed &&
            !memcmp(con->pub.remote_con_info.name, name, 8))
            return con;
    }
    return NULL;
}

pscom_con_t *pscom_ondemand_find_peer(pscom_sock_t *sock, const char name[8])
{
    pscom_list_t *pos;
    pscom_list_for_each(pos, &sock->connections) {
        pscom_con_t *con = pscom_list_entry(pos, pscom_con_t, sock_next);
        if ((con->ondemand || con->od_started) && !con->user_closed &&
            !memcmp(con->pub.remote_con_info.name, name, 8))
            return con;
    }
    return NULL;
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
