/*
 * pscom_precon.c - the pre-connection handshake over TCP.
 *
 *   both:          HELLO {wire version, node id, rank, port, con id, name}
 *   connect side:  OFFER {plugin name, blob}      for each plugin by priority
 *   accept side:   ACCEPT {blob} | DECLINE
 *   connect side:  CONFIRM {blob} | CANCEL (then next OFFER)
 *   accept side:   CONFIRM_OK | CONFIRM_FAIL      then both start the transport
 *   connect side:  NO_TRANSPORT when no plugin is left
 *
 * Every message has a 16-byte header whose magic, version, type and
 * payload length are checked before anything is read into memory; exactly
 * the announced bytes are read, so a transport taking over the socket
 * finds the stream at a message boundary. A peer that sends anything else
 * has its connection closed with a logged error.
 */
#include "pscom_precon.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "pscom_con.h"
#include "pscom_config.h"
#include "pscom_core.h"
#include "pscom_log.h"
#include "pscom_ondemand.h"
#include "pscom_plugin.h"
#include "pscom_plugin_reg.h"
#include "pscom_progress.h"
#include "pscom_sock.h"
#include "pscom_wire.h"

struct pscom_precon {
    pscom_con_t *con;
    pscom_ufd_t ufd;
    int is_connect;
    int hello_received;
    pscom_precon_peer_t peer;

    /* input: header, then exactly hdr.len payload bytes */
    pscom_precon_header_t hdr;
    size_t in_have;
    unsigned char in[PSCOM_PRECON_HEADER_SIZE + PSCOM_PRECON_PAYLOAD_MAX];

    /* output */
    unsigned char *out;
    size_t out_len, out_off, out_cap;

    /* negotiation */
    int next_idx;                         /* connect side: next plugin to offer */
    int cand_idx;                         /* plugin being negotiated, -1 none */
    const pscom_plugin_desc_t *cand;
    int start_when_flushed;               /* accept side: CONFIRM_OK queued */
    uint32_t flags;                       /* our HELLO flags (PSCOM_PRECON_FLAG_*) */
    pscom_con_t *od_owner;                /* back-connect request: the waiting connection */
};

#define dprecon(pre, ...)                                                      \
    pscom_log_force(pscom_config.debug_precon, PSCOM_LOG_DEBUG, __VA_ARGS__)

static void precon_handler(pscom_ufd_t *ufd, uint32_t revents);

static const char *side(const pscom_precon_t *pre)
{
    return pre->is_connect ? "connect" : "accept";
}

/* ---- teardown ------------------------------------------------------------ */

static void cand_abort(pscom_precon_t *pre)
{
    pscom_con_t *con = pre->con;
    if (!pre->cand) return;
    if (pre->cand->ops->con_abort) pre->cand->ops->con_abort(con);
    free(con->plugin_priv);
    con->plugin_priv = NULL;
    pre->cand        = NULL;
    pre->cand_idx    = -1;
}

static void precon_destroy(pscom_precon_t *pre)
{
    if (pre->ufd.fd >= 0 && pre->out_off < pre->out_len) {
        /* a last small message (REJECT, BACKCONNECT_OK) must not be lost */
        pscom_writeall(pre->ufd.fd, pre->out + pre->out_off, pre->out_len - pre->out_off);
    }
    if (pre->ufd.fd >= 0) {
        pscom_ufd_del(&pre->ufd);
        close(pre->ufd.fd);
        pre->ufd.fd = -1;
    }
    free(pre->out);
    pre->out = NULL;
    pre->con->precon = NULL;
    pscom_defer_free(pre);
}

/* A back-connect request ended: the waiting on-demand connection is
 * released from it; if the request failed, so does the connection. */
static void backconnect_end(pscom_precon_t *pre, int failed, pscom_err_t err)
{
    pscom_con_t *owner = pre->od_owner;
    if (!owner) return;
    pre->od_owner = NULL;
    owner->refcnt--;
    if (failed && owner->ondemand && !owner->precon && !owner->user_closed) {
        plog_err("%s: the peer refused to connect back", pscom_con_name(owner));
        pscom_con_setup_failed(owner, err);
    } else {
        pscom_con_release(owner);
    }
}

static void precon_fail(pscom_precon_t *pre, pscom_err_t err, int errnum)
{
    pscom_con_t *con = pre->con;
    cand_abort(pre);
    backconnect_end(pre, 1, err);
    precon_destroy(pre);
    errno = errnum;
    pscom_con_setup_failed(con, err);
}

/* The handshake did its job without a transport (back-connect). */
static void precon_finish_quietly(pscom_precon_t *pre)
{
    pscom_con_t *con = pre->con;
    backconnect_end(pre, 0, PSCOM_SUCCESS);
    precon_destroy(pre);
    con->connect_failed = 1;
    con->pub.state      = PSCOM_CON_STATE_CLOSED;
    pscom_con_release(con); /* library-owned */
}

void pscom_precon_abort(pscom_precon_t *pre)
{
    precon_fail(pre, PSCOM_ERR_EOF, ECONNABORTED);
}

/* ---- output ----------------------------------------------------------------- */

static int flush_out(pscom_precon_t *pre);

static int send_msg(pscom_precon_t *pre, uint16_t type, const void *p1, size_t l1,
                    const void *p2, size_t l2)
{
    size_t len  = l1 + l2;
    size_t need = pre->out_len + PSCOM_PRECON_HEADER_SIZE + len;
    if (need > pre->out_cap) {
        unsigned char *n = realloc(pre->out, need);
        if (!n) return -1;
        pre->out     = n;
        pre->out_cap = need;
    }
    pscom_precon_header_t h = {
        .magic   = htole32(PSCOM_PRECON_MAGIC),
        .type    = htole16(type),
        .version = htole16(PSCOM_PRECON_VERSION),
        .len     = htole32((uint32_t)len),
    };
    unsigned char *dst = pre->out + pre->out_len;
    memcpy(dst, &h, sizeof(h));
    if (l1) memcpy(dst + sizeof(h), p1, l1);
    if (l2) memcpy(dst + sizeof(h) + l1, p2, l2);
    pre->out_len = need;
    dprecon(pre, "precon %s %p: send type %u len %zu", side(pre), (void *)pre, type, len);
    return flush_out(pre);
}

/* 0: all sent or waiting for EPOLLOUT, -1: error */
static int flush_out(pscom_precon_t *pre)
{
    while (pre->out_off < pre->out_len) {
        ssize_t n = send(pre->ufd.fd, pre->out + pre->out_off, pre->out_len - pre->out_off,
                         MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n < 0) {
            if (errno == EINTR) continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK) {
                pscom_ufd_set_events(&pre->ufd, EPOLLIN | EPOLLOUT);
                return 0;
            }
            return -1;
        }
        pre->out_off += (size_t)n;
    }
    pre->out_off = pre->out_len = 0;
    pscom_ufd_set_events(&pre->ufd, EPOLLIN);
    return 0;
}

/* ---- the transport takes over ------------------------------------------------ */

static void start_transport(pscom_precon_t *pre)
{
    pscom_con_t *con = pre->con;
    const pscom_plugin_desc_t *d = pre->cand;
    int fd = pre->ufd.fd;

    pscom_ufd_del(&pre->ufd);
    pre->ufd.fd    = -1;
    pre->cand      = NULL; /* owned by the connection now */
    con->transport = d;
    if (d->ops->con_start(con, &fd) < 0) {
        plog_err("%s: transport %s failed to start", pscom_con_name(con), d->name);
        if (fd >= 0) close(fd);
        con->transport = NULL;
        free(con->plugin_priv);
        con->plugin_priv = NULL;
        precon_destroy(pre);
        errno = EPROTO;
        pscom_con_setup_failed(con, PSCOM_ERR_STDERROR);
        return;
    }
    if (fd >= 0) close(fd);
    dprecon(pre, "precon %s %p: transport %s started", side(pre), (void *)pre, d->name);
    precon_destroy(pre);
    pscom_con_setup_ok(con);
}

/* accept side: the peer connects for an on-demand connection; continue on
 * our own on-demand object for it instead of the new one. */
static int adopt_ondemand(pscom_precon_t *pre)
{
    pscom_con_t *tmp = pre->con;
    pscom_con_t *m   = pscom_ondemand_find(tmp->sock, pre->peer.name);
    if (!m) return -1;
    tmp->precon    = NULL;
    tmp->pub.state = PSCOM_CON_STATE_CLOSED;
    pscom_con_release(tmp); /* library-owned, never seen by the user */
    pre->con       = m;
    m->precon      = pre;
    m->transport   = NULL;
    m->od_started  = 1;
    m->pub.state   = PSCOM_CON_STATE_ACCEPTING_ONDEMAND;
    return 0;
}

/* accept side: the peer asks us to connect to it */
static void handle_backconnect(pscom_precon_t *pre)
{
    pscom_con_t *m = pscom_ondemand_find_peer(pre->con->sock, pre->peer.name);
    if (!m) {
        plog_warn("%s: back-connect request from \"%.8s\" without a matching on-demand "
                  "connection: refused", pscom_con_name(pre->con), pre->peer.name);
        send_msg(pre, PSCOM_PRECON_REJECT, NULL, 0, NULL, 0);
        precon_fail(pre, PSCOM_ERR_CONNECTION_REFUSED, ECONNREFUSED);
        return;
    }
    send_msg(pre, PSCOM_PRECON_BACKCONNECT_OK, NULL, 0, NULL, 0);
    precon_finish_quietly(pre);
    pscom_ondemand_connect(m);
}

/* ---- negotiation ------------------------------------------------------------- */

static int cand_begin(pscom_precon_t *pre, int idx)
{
    const pscom_plugin_desc_t *d = pscom_plugin_at(idx);
    pscom_con_t *con             = pre->con;
    con->plugin_priv = calloc(1, d->con_priv_size ? d->con_priv_size : 1);
    if (!con->plugin_priv) return -1;
    pre->cand     = d;
    pre->cand_idx = idx;
    return 0;
}

/* connect side: offer the next usable plugin */
static void offer_next(pscom_precon_t *pre)
{
    pscom_con_t *con = pre->con;
    unsigned char blob[PSCOM_PRECON_BLOB_MAX];

    while (pre->next_idx < pscom_plugins_count()) {
        int idx = pre->next_idx++;
        if (!pscom_plugin_usable(con->sock, idx)) continue;
        if (cand_begin(pre, idx) < 0) continue;
        size_t len = 0;
        if (pre->cand->ops->con_offer &&
            pre->cand->ops->con_offer(con, &pre->peer, blob, &len) < 0) {
            cand_abort(pre);
            continue;
        }
        if (len > PSCOM_PRECON_BLOB_MAX) len = PSCOM_PRECON_BLOB_MAX;
        char name[PSCOM_PRECON_PLUGIN_NAME] = {0};
        strncpy(name, pre->cand->name, sizeof(name) - 1);
        if (send_msg(pre, PSCOM_PRECON_OFFER, name, sizeof(name), blob, len) < 0) {
            precon_fail(pre, PSCOM_ERR_STDERROR, errno);
        }
        return;
    }
    plog_err("%s: no common transport with the peer", pscom_con_name(con));
    send_msg(pre, PSCOM_PRECON_NO_TRANSPORT, NULL, 0, NULL, 0);
    precon_fail(pre, PSCOM_ERR_STDERROR, ENOPROTOOPT);
}

static void handle_hello(pscom_precon_t *pre, const unsigned char *p, size_t len)
{
    pscom_con_t *con = pre->con;
    pscom_precon_hello_t h;
    memcpy(&h, p, sizeof(h));
    if (le32toh(h.wire_version) != PSCOM_WIRE_VERSION) {
        plog_err("%s: peer speaks wire protocol %u, we speak %u", pscom_con_name(con),
                 le32toh(h.wire_version), PSCOM_WIRE_VERSION);
        send_msg(pre, PSCOM_PRECON_REJECT, NULL, 0, NULL, 0);
        precon_fail(pre, PSCOM_ERR_CONNECTION_REFUSED, EPROTO);
        return;
    }
    pre->hello_received = 1;
    pre->peer.node_id   = (int32_t)le32toh((uint32_t)h.node_id);
    pre->peer.rank      = (int32_t)le32toh((uint32_t)h.rank);
    pre->peer.portno    = (int32_t)le32toh((uint32_t)h.portno);
    pre->peer.con_id    = le64toh(h.con_id);
    memcpy(pre->peer.name, h.name, sizeof(pre->peer.name));
    uint32_t peer_flags = le32toh(h.flags);

    if (!pre->is_connect && (peer_flags & PSCOM_PRECON_FLAG_BACKCONNECT)) {
        handle_backconnect(pre);
        return;
    }
    int keep_rank = pre->is_connect;
    if (!pre->is_connect && (peer_flags & PSCOM_PRECON_FLAG_ONDEMAND)) {
        if (adopt_ondemand(pre) < 0) {
            plog_warn("%s: on-demand connection from \"%.8s\" without a matching on-demand "
                      "connection: refused", pscom_con_name(con), pre->peer.name);
            send_msg(pre, PSCOM_PRECON_REJECT, NULL, 0, NULL, 0);
            precon_fail(pre, PSCOM_ERR_CONNECTION_REFUSED, ECONNREFUSED);
            return;
        }
        con       = pre->con;
        keep_rank = 1;
    }
    pscom_con_info_t *ri = &con->pub.remote_con_info;
    ri->node_id          = pre->peer.node_id;
    ri->tcp.portno       = pre->peer.portno;
    ri->id               = (void *)(uintptr_t)pre->peer.con_id;
    memcpy(ri->name, pre->peer.name, sizeof(ri->name));
    if (!keep_rank) ri->rank = pre->peer.rank;
    if (pre->is_connect && !(pre->flags & PSCOM_PRECON_FLAG_BACKCONNECT)) offer_next(pre);
}

static void handle_offer(pscom_precon_t *pre, const unsigned char *p, size_t len)
{
    pscom_con_t *con = pre->con;
    char name[PSCOM_PRECON_PLUGIN_NAME + 1];
    unsigned char reply[PSCOM_PRECON_BLOB_MAX];
    size_t reply_len = 0;
    int idx;

    cand_abort(pre); /* a new offer replaces an unanswered one */
    memcpy(name, p, PSCOM_PRECON_PLUGIN_NAME);
    name[PSCOM_PRECON_PLUGIN_NAME] = 0;
    const pscom_plugin_desc_t *d   = pscom_plugin_find(name, &idx);
    if (!d || !pscom_plugin_usable(con->sock, idx) || cand_begin(pre, idx) < 0) goto decline;
    if (d->ops->con_accept &&
        d->ops->con_accept(con, &pre->peer, p + PSCOM_PRECON_PLUGIN_NAME,
                           len - PSCOM_PRECON_PLUGIN_NAME, reply, &reply_len) < 0) {
        cand_abort(pre);
        goto decline;
    }
    if (reply_len > PSCOM_PRECON_BLOB_MAX) reply_len = PSCOM_PRECON_BLOB_MAX;
    if (send_msg(pre, PSCOM_PRECON_ACCEPT, reply, reply_len, NULL, 0) < 0)
        precon_fail(pre, PSCOM_ERR_STDERROR, errno);
    return;
decline:
    dprecon(pre, "precon accept %p: decline %s", (void *)pre, name);
    if (send_msg(pre, PSCOM_PRECON_DECLINE, NULL, 0, NULL, 0) < 0)
        precon_fail(pre, PSCOM_ERR_STDERROR, errno);
}

static void handle_accept(pscom_precon_t *pre, const unsigned char *p, size_t len)
{
    unsigned char confirm[PSCOM_PRECON_BLOB_MAX];
    size_t clen = 0;
    if (pre->cand->ops->con_connect &&
        pre->cand->ops->con_connect(pre->con, p, len, confirm, &clen) < 0) {
        cand_abort(pre);
        if (send_msg(pre, PSCOM_PRECON_CANCEL, NULL, 0, NULL, 0) < 0) {
            precon_fail(pre, PSCOM_ERR_STDERROR, errno);
            return;
        }
        offer_next(pre);
        return;
    }
    if (clen > PSCOM_PRECON_BLOB_MAX) clen = PSCOM_PRECON_BLOB_MAX;
    if (send_msg(pre, PSCOM_PRECON_CONFIRM, confirm, clen, NULL, 0) < 0)
        precon_fail(pre, PSCOM_ERR_STDERROR, errno);
}

static void handle_confirm(pscom_precon_t *pre, const unsigned char *p, size_t len)
{
    if (pre->cand->ops->con_confirm && pre->cand->ops->con_confirm(pre->con, p, len) < 0) {
        cand_abort(pre);
        if (send_msg(pre, PSCOM_PRECON_CONFIRM_FAIL, NULL, 0, NULL, 0) < 0)
            precon_fail(pre, PSCOM_ERR_STDERROR, errno);
        return;
    }
    if (send_msg(pre, PSCOM_PRECON_CONFIRM_OK, NULL, 0, NULL, 0) < 0) {
        precon_fail(pre, PSCOM_ERR_STDERROR, errno);
        return;
    }
    if (pre->out_len) {
        pre->start_when_flushed = 1; /* start once CONFIRM_OK has left */
    } else {
        start_transport(pre);
    }
}

/* Is this message type valid now? */
static int expected(const pscom_precon_t *pre, uint16_t type, size_t len)
{
    if (type == PSCOM_PRECON_REJECT || type == PSCOM_PRECON_NO_TRANSPORT) return 1;
    if (type == PSCOM_PRECON_HELLO) return !pre->hello_received && len == sizeof(pscom_precon_hello_t);
    if (!pre->hello_received || pre->start_when_flushed) return 0;
    if (pre->flags & PSCOM_PRECON_FLAG_BACKCONNECT) return type == PSCOM_PRECON_BACKCONNECT_OK;
    if (pre->is_connect) {
        switch (type) {
        case PSCOM_PRECON_ACCEPT:
        case PSCOM_PRECON_DECLINE:
        case PSCOM_PRECON_CONFIRM_OK:
        case PSCOM_PRECON_CONFIRM_FAIL: return pre->cand != NULL;
        default: return 0;
        }
    }
    switch (type) {
    case PSCOM_PRECON_OFFER: return len >= PSCOM_PRECON_PLUGIN_NAME;
    case PSCOM_PRECON_CONFIRM: return pre->cand != NULL;
    case PSCOM_PRECON_CANCEL: return 1;
    default: return 0;
    }
}

/* One complete message is in pre->in. */
static void handle_msg(pscom_precon_t *pre)
{
    uint16_t type            = pre->hdr.type;
    size_t len               = pre->hdr.len;
    const unsigned char *p   = pre->in + PSCOM_PRECON_HEADER_SIZE;

    dprecon(pre, "precon %s %p: recv type %u len %zu", side(pre), (void *)pre, type, len);
    if (!expected(pre, type, len)) {
        plog_err("%s: handshake: unexpected message type %u (len %zu) from the peer; closing",
                 pscom_con_name(pre->con), type, len);
        precon_fail(pre, PSCOM_ERR_IOERROR, EPROTO);
        return;
    }
    switch (type) {
    case PSCOM_PRECON_HELLO: handle_hello(pre, p, len); break;
    case PSCOM_PRECON_OFFER: handle_offer(pre, p, len); break;
    case PSCOM_PRECON_ACCEPT: handle_accept(pre, p, len); break;
    case PSCOM_PRECON_DECLINE:
    case PSCOM_PRECON_CONFIRM_FAIL:
        cand_abort(pre);
        offer_next(pre);
        break;
    case PSCOM_PRECON_CONFIRM: handle_confirm(pre, p, len); break;
    case PSCOM_PRECON_CONFIRM_OK: start_transport(pre); break;
    case PSCOM_PRECON_CANCEL: cand_abort(pre); break;
    case PSCOM_PRECON_NO_TRANSPORT:
        plog_info("%s: peer found no common transport", pscom_con_name(pre->con));
        precon_fail(pre, PSCOM_ERR_STDERROR, ENOPROTOOPT);
        break;
    case PSCOM_PRECON_REJECT:
        plog_err("%s: peer rejected the handshake", pscom_con_name(pre->con));
        precon_fail(pre, PSCOM_ERR_CONNECTION_REFUSED, ECONNREFUSED);
        break;
    case PSCOM_PRECON_BACKCONNECT_OK: precon_finish_quietly(pre); break;
    }
}

/* Read what is available, exactly up to message boundaries.
 * Returns 1 if the precon went away (done or failed). */
static int read_msgs(pscom_precon_t *pre)
{
    for (;;) {
        size_t want = PSCOM_PRECON_HEADER_SIZE;
        if (pre->in_have >= PSCOM_PRECON_HEADER_SIZE) want += pre->hdr.len;
        ssize_t n = recv(pre->ufd.fd, pre->in + pre->in_have, want - pre->in_have, MSG_DONTWAIT);
        if (n == 0) {
            plog_dbg("%s: peer closed during the handshake", pscom_con_name(pre->con));
            precon_fail(pre, PSCOM_ERR_EOF, ECONNRESET);
            return 1;
        }
        if (n < 0) {
            if (errno == EINTR) continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK) return 0;
            int e = errno;
            plog_dbg("%s: handshake read failed: %m", pscom_con_name(pre->con));
            precon_fail(pre, PSCOM_ERR_STDERROR, e);
            return 1;
        }
        pre->in_have += (size_t)n;
        if (pre->in_have == PSCOM_PRECON_HEADER_SIZE) {
            pscom_precon_header_t h;
            memcpy(&h, pre->in, sizeof(h));
            pre->hdr.magic   = le32toh(h.magic);
            pre->hdr.type    = le16toh(h.type);
            pre->hdr.version = le16toh(h.version);
            pre->hdr.len     = le32toh(h.len);
            if (pre->hdr.magic != PSCOM_PRECON_MAGIC || pre->hdr.len > PSCOM_PRECON_PAYLOAD_MAX) {
                plog_err("%s: garbage instead of a pscom handshake (magic 0x%08x, len %u); closing",
                         pscom_con_name(pre->con), pre->hdr.magic, pre->hdr.len);
                precon_fail(pre, PSCOM_ERR_IOERROR, EPROTO);
                return 1;
            }
            if (pre->hdr.version != PSCOM_PRECON_VERSION) {
                plog_err("%s: peer speaks handshake version %u, we speak %u; closing",
                         pscom_con_name(pre->con), pre->hdr.version, PSCOM_PRECON_VERSION);
                send_msg(pre, PSCOM_PRECON_REJECT, NULL, 0, NULL, 0);
                precon_fail(pre, PSCOM_ERR_CONNECTION_REFUSED, EPROTO);
                return 1;
            }
        }
        if (pre->in_have >= PSCOM_PRECON_HEADER_SIZE &&
            pre->in_have == PSCOM_PRECON_HEADER_SIZE + pre->hdr.len) {
            pre->in_have = 0;
            pscom_con_t *con = pre->con;
            handle_msg(pre);
            if (con->precon != pre) return 1; /* finished or failed */
        }
    }
}

static void precon_handler(pscom_ufd_t *ufd, uint32_t revents)
{
    pscom_precon_t *pre = ufd->priv;
    if (revents & EPOLLOUT) {
        if (flush_out(pre) < 0) {
            precon_fail(pre, PSCOM_ERR_STDERROR, errno);
            return;
        }
        if (pre->start_when_flushed && !pre->out_len) {
            start_transport(pre);
            return;
        }
    }
    if (revents & (EPOLLIN | EPOLLERR | EPOLLHUP)) read_msgs(pre);
}

static pscom_precon_t *precon_create(pscom_con_t *con, int fd, int is_connect)
{
    pscom_precon_t *pre = calloc(1, sizeof(*pre));
    if (!pre) return NULL;
    pre->con         = con;
    pre->is_connect  = is_connect;
    pre->cand_idx    = -1;
    pre->ufd.fd      = fd;
    pre->ufd.events  = EPOLLIN;
    pre->ufd.handler = precon_handler;
    pre->ufd.priv    = pre;
    if (pscom_ufd_add(&pre->ufd) < 0) {
        free(pre);
        return NULL;
    }
    con->precon = pre;
    return pre;
}

static int send_hello(pscom_precon_t *pre)
{
    pscom_sock_t *sock = pre->con->sock;
    pscom_precon_hello_t h = {
        .wire_version = htole32(PSCOM_WIRE_VERSION),
        .flags        = htole32(pre->flags),
        .node_id      = (int32_t)htole32((uint32_t)sock->pub.local_con_info.node_id),
        .rank         = (int32_t)htole32((uint32_t)sock->pub.local_con_info.rank),
        .portno       = (int32_t)htole32((uint32_t)sock->pub.listen_portno),
        .con_id       = htole64((uint64_t)(uintptr_t)&pre->con->pub),
    };
    memcpy(h.name, sock->pub.local_con_info.name, sizeof(h.name));
    return send_msg(pre, PSCOM_PRECON_HELLO, &h, sizeof(h), NULL, 0);
}

static int precon_start(pscom_con_t *con, int fd, int is_connect, uint32_t flags)
{
    pscom_precon_t *pre = precon_create(con, fd, is_connect);
    if (!pre) {
        close(fd);
        return -1;
    }
    pre->flags = flags;
    if (send_hello(pre) < 0) {
        precon_fail(pre, PSCOM_ERR_STDERROR, errno);
        return -1;
    }
    return 0;
}

int pscom_precon_connect(pscom_con_t *con, int fd)
{
    return precon_start(con, fd, 1, 0);
}

int pscom_precon_connect_flags(pscom_con_t *con, int fd, uint32_t flags)
{
    return precon_start(con, fd, 1, flags);
}

int pscom_precon_accept(pscom_con_t *con, int fd)
{
    return precon_start(con, fd, 0, 0);
}

void pscom_precon_backconnect(pscom_con_t *owner, int fd)
{
    pscom_con_t *tmp = pscom_con_create(owner->sock);
    if (!tmp) {
        close(fd);
        pscom_con_setup_failed(owner, PSCOM_ERR_STDERROR);
        return;
    }
    tmp->user_closed         = 1; /* library-owned */
    tmp->pub.state           = PSCOM_CON_STATE_CONNECTING;
    tmp->pub.remote_con_info = owner->pub.remote_con_info;
    pscom_con_list(tmp);
    pscom_precon_t *pre = precon_create(tmp, fd, 1);
    if (!pre) {
        close(fd);
        pscom_con_setup_failed(tmp, PSCOM_ERR_STDERROR);
        pscom_con_setup_failed(owner, PSCOM_ERR_STDERROR);
        return;
    }
    owner->refcnt++;
    pre->flags    = PSCOM_PRECON_FLAG_BACKCONNECT;
    pre->od_owner = owner;
    if (send_hello(pre) < 0) precon_fail(pre, PSCOM_ERR_STDERROR, errno);
}
