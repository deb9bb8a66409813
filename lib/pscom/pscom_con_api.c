/*
 * pscom_con_api.c - public connection functions: open, connect (direct,
 * loopback), close, flush, iteration.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "pscom_con.h"
#include "pscom_config.h"
#include "pscom_core.h"
#include "pscom_log.h"
#include "pscom_ondemand.h"
#include "pscom_precon.h"
#include "pscom_progress.h"
#include "pscom_req.h"
#include "pscom_sock.h"
#include "pscom_util.h"

PSCOM_API pscom_connection_t *pscom_open_connection(pscom_socket_t *socket)
{
    pscom_api_check_sock(socket);
    pscom_lock();
    pscom_con_t *con = pscom_con_create(pscom_sock_from_pub(socket));
    if (con) con->user_closed = 0;
    pscom_unlock();
    return con ? &con->pub : NULL;
}

/* spec 1.3: this node or loopback with our listen port, or port -1 */
static int is_self(pscom_sock_t *sock, const pscom_ep_t *ep)
{
    if (ep->port == -1) return 1;
    if (sock->pub.listen_portno < 0 || ep->port != sock->pub.listen_portno) return 0;
    return ep->addr == (uint32_t)sock->pub.local_con_info.node_id ||
           (ep->addr >> 24) == 127; /* loopback network */
}

static int connecting(void *arg)
{
    pscom_con_t *con = arg;
    return con->pub.state != PSCOM_CON_STATE_CONNECTING;
}

static pscom_err_t connect_direct(pscom_con_t *con, const pscom_ep_t *ep)
{
    int direct_err = 0; /* set if the peer never answered (unreachable) */
    con->pub.state = PSCOM_CON_STATE_CONNECTING;
    pscom_precon_connect_to(con, ep->addr, ep->port, 0, &direct_err);
    pscom_wait_until(connecting, con);
    if (direct_err) {
        errno = direct_err;
        return PSCOM_ERR_STDERROR; /* con_error(OP_CONNECT) is queued too */
    }
    return PSCOM_SUCCESS; /* a later failure is reported through con_error */
}

PSCOM_API pscom_err_t pscom_connect(pscom_connection_t *connection, const char *ep_str,
                                    int dest_rank, uint64_t connection_flags)
{
    pscom_api_check_con(connection);
    pscom_con_t *con   = pscom_con_from_pub(connection);
    pscom_sock_t *sock = con->sock;
    pscom_err_t res    = PSCOM_SUCCESS;
    pscom_ep_t ep      = {0};

    pscom_lock();
    if (con->pub.state != PSCOM_CON_STATE_CLOSED || con->transport || con->precon) {
        res = PSCOM_ERR_ALREADY;
        goto out;
    }
    con->connect_failed           = 0;
    con->pub.remote_con_info.rank = dest_rank;
    if (ep_str && pscom_ep_parse(ep_str, &ep) < 0) {
        plog_err("pscom_connect: malformed endpoint string \"%s\"", ep_str);
        errno = EINVAL;
        res   = PSCOM_ERR_STDERROR;
        goto out;
    }
    if (!ep_str || is_self(sock, &ep)) {
        pscom_con_setup_loop(con);
        goto out;
    }
    pscom_con_info_t *ri = &con->pub.remote_con_info;
    ri->node_id          = (int)ep.addr;
    ri->tcp.portno       = ep.port;
    memcpy(ri->name, ep.name, sizeof(ri->name));

    uint64_t kind = connection_flags & (PSCOM_CON_FLAG_DIRECT | PSCOM_CON_FLAG_ONDEMAND);
    if (kind != PSCOM_CON_FLAG_DIRECT && kind != PSCOM_CON_FLAG_ONDEMAND) {
        res = PSCOM_ERR_INVALID;
        goto out;
    }
    if (kind == PSCOM_CON_FLAG_ONDEMAND && sock->pub.listen_portno < 0) {
        res = PSCOM_ERR_INVALID;
        goto out;
    }
    if (kind == PSCOM_CON_FLAG_ONDEMAND) {
        pscom_ondemand_setup(con, &ep);
        pscom_sock_ondemand_added(sock);
        goto out;
    }
    res = connect_direct(con, &ep);
out:
    pscom_unlock();
    return res;
}

PSCOM_API void pscom_close_connection(pscom_connection_t *connection)
{
    if (!connection) return;
    pscom_api_check_con(connection); /* (closed twice: gone after the first) */
    pscom_lock();
    pscom_con_close(pscom_con_from_pub(connection));
    pscom_progress(0);
    pscom_unlock();
}

static int sendq_empty(void *arg)
{
    pscom_con_t *con = arg;
    if (con->transport_closed || con->connect_failed) return 1;
    pscom_list_t *pos;
    pscom_list_for_each(pos, &con->sendq) {
        pscom_req_t *req = pscom_list_entry(pos, pscom_req_t, next);
        if (!(req->pub.state & PSCOM_REQ_STATE_IO_STARTED)) return 0;
    }
    return 1;
}

PSCOM_API void pscom_flush(pscom_connection_t *connection)
{
    if (!connection) return;
    pscom_api_check_con(connection);
    pscom_lock();
    pscom_wait_until(sendq_empty, pscom_con_from_pub(connection));
    pscom_unlock();
}

static int is_set_up(const pscom_con_t *con)
{
    switch (con->pub.state) {
    case PSCOM_CON_STATE_CLOSED:
    case PSCOM_CON_STATE_CLOSING:
    case PSCOM_CON_STATE_CLOSE_WAIT:
    case PSCOM_CON_STATE_ACCEPTING:
    case PSCOM_CON_STATE_CONNECTING:
        return 0;
    default:
        return !con->user_closed;
    }
}

PSCOM_API pscom_connection_t *pscom_get_next_connection(pscom_socket_t *socket,
                                                        pscom_connection_t *connection)
{
    pscom_api_check_sock(socket);
    if (connection) pscom_api_check_con(connection);
    pscom_sock_t *sock = pscom_sock_from_pub(socket);
    pscom_connection_t *res = NULL;
    pscom_lock();
    pscom_list_t *pos = sock->connections.next;
    if (connection) {
        /* one not in the list (never connected, failed) has no next one:
         * its sock_next points to itself, a walk from it would never end */
        pscom_con_t *con = pscom_con_from_pub(connection);
        pos = con->listed && con->sock == sock ? con->sock_next.next : &sock->connections;
    }
    for (; pos != &sock->connections; pos = pos->next) {
        pscom_con_t *con = pscom_list_entry(pos, pscom_con_t, sock_next);
        if (is_set_up(con)) {
            res = &con->pub;
            break;
        }
    }
    pscom_unlock();
    return res;
}
