/*
 * pscom_precon_msg.c - the messages of the pre-connection handshake: the
 * HELLO exchange, transport negotiation by priority (OFFER, ACCEPT or
 * DECLINE, CONFIRM, CONFIRM_OK or CONFIRM_FAIL, CANCEL, NO_TRANSPORT) and
 * REJECT; which message is valid when (see pscom_precon.c and
 * doc/wire-protocol.md).
 */
#include "pscom_precon_priv.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "pscom_con.h"
#include "pscom_ondemand.h"
#include "pscom_plugin_reg.h"
#include "pscom_sock.h"

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

_Static_assert(PSCOM_PRECON_PAYLOAD_MAX == PSCOM_PRECON_PLUGIN_NAME + PSCOM_PRECON_BLOB_MAX,
              "an OFFER (plugin name and the largest blob) is the largest payload");

/* A buffer for a blob of the handshake (PSCOM_PRECON_BLOB_MAX bytes:
 * not on the stack of whatever thread progresses), or NULL after the
 * handshake failed for want of memory. */
static unsigned char *blob_alloc(pscom_precon_t *pre)
{
    unsigned char *b = malloc(PSCOM_PRECON_BLOB_MAX);
    if (!b) {
        plog_err("%s: handshake: out of memory", pscom_con_name(pre->con));
        precon_fail(pre, PSCOM_ERR_STDERROR, ENOMEM);
    }
    return b;
}

/* connect side: offer the next usable plugin */
static void offer_next(pscom_precon_t *pre)
{
    pscom_con_t *con    = pre->con;
    unsigned char *blob = blob_alloc(pre);
    if (!blob) return;

    while (pre->next_idx < pscom_plugins_count()) {
        int idx = pre->next_idx++;
        if (!pscom_plugin_usable(con->sock, idx)) continue;
        if (cand_begin(pre, idx) < 0) continue;
        size_t len = 0;
        if (pre->cand->ops->con_offer &&
            pre->cand->ops->con_offer(con, &pre->peer, blob, &len) < 0) {
            precon_cand_abort(pre);
            continue;
        }
        if (len > PSCOM_PRECON_BLOB_MAX) len = PSCOM_PRECON_BLOB_MAX;
        char name[PSCOM_PRECON_PLUGIN_NAME] = {0};
        strncpy(name, pre->cand->name, sizeof(name) - 1);
        int rc = precon_send_msg(pre, PSCOM_PRECON_OFFER, name, sizeof(name), blob, len);
        int e  = errno;
        free(blob);
        if (rc < 0) precon_handshake_failed(pre, 1, PSCOM_ERR_STDERROR, e, "send");
        return;
    }
    free(blob);
    plog_err("%s: no common transport with the peer", pscom_con_name(con));
    precon_send_msg(pre, PSCOM_PRECON_NO_TRANSPORT, NULL, 0, NULL, 0);
    precon_fail(pre, PSCOM_ERR_STDERROR, ENOPROTOOPT);
}

/* our HELLO (its bytes on the wire) */
static void hello_build(const pscom_precon_t *pre, pscom_precon_hello_t *out)
{
    const pscom_sock_t *sock = pre->con->sock;
    pscom_precon_hello_t h   = {
        .wire_version = htole32(PSCOM_WIRE_VERSION),
        .flags        = htole32(pre->flags),
        .node_id      = (int32_t)htole32((uint32_t)sock->pub.local_con_info.node_id),
        .rank         = (int32_t)htole32((uint32_t)sock->pub.local_con_info.rank),
        .portno       = (int32_t)htole32((uint32_t)sock->pub.listen_portno),
        .attempt      = htole32(pre->is_connect ? pre->attempt : 0),
        .con_id       = htole64((uint64_t)(uintptr_t)&pre->con->pub),
    };
    memcpy(h.name, sock->pub.local_con_info.name, sizeof(h.name));
    *out = h;
}

/* h is our own HELLO, byte for byte */
static int hello_is_ours(const pscom_precon_t *pre, const pscom_precon_hello_t *h)
{
    pscom_precon_hello_t ours;
    hello_build(pre, &ours);
    return !memcmp(h, &ours, sizeof(ours));
}

static void handle_hello(pscom_precon_t *pre, const unsigned char *p, size_t len)
{
    pscom_con_t *con = pre->con;
    pscom_precon_hello_t h;
    memcpy(&h, p, sizeof(h));
    if (le32toh(h.wire_version) != PSCOM_WIRE_VERSION) {
        plog_err("%s: peer speaks wire protocol %u, we speak %u", pscom_con_name(con),
                 le32toh(h.wire_version), PSCOM_WIRE_VERSION);
        precon_send_reject(pre, PSCOM_PRECON_REJECT_VERSION);
        precon_fail(pre, PSCOM_ERR_CONNECTION_REFUSED, EPROTO);
        return;
    }
    if (pre->is_connect && hello_is_ours(pre, &h)) {
        /* our own HELLO back, byte for byte: an echo server, not a pscom
         * peer, whose HELLO has attempt 0 and its own port (the con_id
         * alone is no proof: processes forked from one parent can have
         * their connections at the same address). Until 2026-11-29 we
         * took ourselves for the peer. */
        plog_err("%s: the peer sent our own HELLO back (an echo, not pscom); closing",
                 pscom_con_name(con));
        precon_fail(pre, PSCOM_ERR_IOERROR, EPROTO);
        return;
    }
    pre->hello_received = 1;
    pre->peer.node_id   = (int32_t)le32toh((uint32_t)h.node_id);
    pre->peer.rank      = (int32_t)le32toh((uint32_t)h.rank);
    pre->peer.portno    = (int32_t)le32toh((uint32_t)h.portno);
    pre->peer.con_id    = le64toh(h.con_id);
    pre->peer_attempt   = le32toh(h.attempt);
    memcpy(pre->peer.name, h.name, sizeof(pre->peer.name));
    uint32_t peer_flags = le32toh(h.flags);

    if (pre->is_connect) {
        pre->ever_answered = 1;
        pre->direct_err    = NULL; /* from now on failures are asynchronous (spec 5.7) */
    } else {
        if (peer_flags & PSCOM_PRECON_FLAG_BACKCONNECT) {
            precon_handle_backconnect(pre);
            return;
        }
        if ((peer_flags & PSCOM_PRECON_FLAG_ONDEMAND) && precon_adopt_ondemand(pre) < 0) return;
        con = pre->con;
        if (precon_send_hello(pre) < 0) {
            precon_fail(pre, PSCOM_ERR_STDERROR, errno);
            return;
        }
    }
    /* the rank we were given in pscom_connect() stays; an accepted
     * connection learns it from the peer */
    int keep_rank        = pre->is_connect || (peer_flags & PSCOM_PRECON_FLAG_ONDEMAND);
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
    size_t reply_len = 0;
    int idx;

    precon_cand_abort(pre); /* a new offer replaces an unanswered one */
    unsigned char *reply = blob_alloc(pre);
    if (!reply) return;
    memcpy(name, p, PSCOM_PRECON_PLUGIN_NAME);
    name[PSCOM_PRECON_PLUGIN_NAME] = 0;
    const pscom_plugin_desc_t *d   = pscom_plugin_find(name, &idx);
    if (!d || !pscom_plugin_usable(con->sock, idx) || cand_begin(pre, idx) < 0) goto decline;
    if (d->ops->con_accept &&
        d->ops->con_accept(con, &pre->peer, p + PSCOM_PRECON_PLUGIN_NAME,
                           len - PSCOM_PRECON_PLUGIN_NAME, reply, &reply_len) < 0) {
        precon_cand_abort(pre);
        goto decline;
    }
    if (reply_len > PSCOM_PRECON_BLOB_MAX) reply_len = PSCOM_PRECON_BLOB_MAX;
    int rc = precon_send_msg(pre, PSCOM_PRECON_ACCEPT, reply, reply_len, NULL, 0);
    int e  = errno;
    free(reply);
    if (rc < 0) precon_fail(pre, PSCOM_ERR_STDERROR, e);
    return;
decline:
    free(reply);
    dprecon(pre, "precon accept %p: decline %s", (void *)pre, name);
    if (precon_send_msg(pre, PSCOM_PRECON_DECLINE, NULL, 0, NULL, 0) < 0)
        precon_fail(pre, PSCOM_ERR_STDERROR, errno);
}

/* Connect side: con_connect is over (rc); CONFIRM, or CANCEL and the next plugin. */
static void connect_done(pscom_precon_t *pre, int rc, const void *confirm, size_t clen)
{
    if (rc < 0) {
        precon_cand_abort(pre);
        if (precon_send_msg(pre, PSCOM_PRECON_CANCEL, NULL, 0, NULL, 0) < 0) {
            precon_handshake_failed(pre, 1, PSCOM_ERR_STDERROR, errno, "send");
            return;
        }
        offer_next(pre);
        return;
    }
    if (clen > PSCOM_PRECON_BLOB_MAX) clen = PSCOM_PRECON_BLOB_MAX;
    pre->confirm_sent = 1;
    if (precon_send_msg(pre, PSCOM_PRECON_CONFIRM, confirm, clen, NULL, 0) < 0)
        precon_handshake_failed(pre, 1, PSCOM_ERR_STDERROR, errno, "send");
}

static void handle_accept(pscom_precon_t *pre, const unsigned char *p, size_t len)
{
    unsigned char *confirm = blob_alloc(pre);
    if (!confirm) return;
    size_t clen = 0;
    int rc      = 0;
    if (pre->cand->ops->con_connect)
        rc = pre->cand->ops->con_connect(pre->con, p, len, confirm, &clen);
    if (rc == PSCOM_PLUGIN_PENDING) {
        if (clen > PSCOM_PRECON_BLOB_MAX) clen = PSCOM_PRECON_BLOB_MAX;
        unsigned char *fit       = realloc(confirm, clen ? clen : 1); /* many may pend */
        pre->pending_confirm     = fit ? fit : confirm; /* sent by precon_pending_resume */
        pre->pending_confirm_len = clen;
        pre->pending             = 1;
        return;
    }
    connect_done(pre, rc, confirm, clen);
    free(confirm);
}

/* Accepting side, before it starts the transport: has the connecting side
 * closed this attempt (given up on it, and maybe started another)? */
static int peer_left(const pscom_precon_t *pre)
{
    char c;
    ssize_t n = recv(pre->ufd.fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
    return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

/* Accept side: con_confirm is over (rc); CONFIRM_OK and the transport
 * starts, or CONFIRM_FAIL and the peer offers the next plugin. */
static void confirm_done(pscom_precon_t *pre, int rc)
{
    if (rc < 0 || rc == PSCOM_PLUGIN_RETRY) {
        /* the reason byte only where an offer of the plugin again may work */
        uint8_t retry = PSCOM_PRECON_FAIL_RETRY;
        precon_cand_abort(pre);
        if (precon_send_msg(pre, PSCOM_PRECON_CONFIRM_FAIL, &retry, rc < 0 ? 0 : 1, NULL, 0) < 0)
            precon_fail(pre, PSCOM_ERR_STDERROR, errno);
        return;
    }
    if (peer_left(pre)) {
        /* the peer gave up on this attempt: start no connection it would never use */
        precon_handshake_failed(pre, 1, PSCOM_ERR_EOF, ECONNRESET,
                                "the peer closed the connection before CONFIRM_OK");
        return;
    }
    if (precon_send_msg(pre, PSCOM_PRECON_CONFIRM_OK, NULL, 0, NULL, 0) < 0) {
        precon_fail(pre, PSCOM_ERR_STDERROR, errno);
        return;
    }
    if (pre->out_len) {
        pre->start_when_flushed = 1; /* start once CONFIRM_OK has left */
    } else {
        precon_start_transport(pre);
    }
}

static void handle_confirm(pscom_precon_t *pre, const unsigned char *p, size_t len)
{
    int rc = pre->cand->ops->con_confirm ? pre->cand->ops->con_confirm(pre->con, p, len) : 0;
    if (rc == PSCOM_PLUGIN_PENDING) {
        pre->pending = 1;
        return;
    }
    confirm_done(pre, rc);
}

void pscom_con_handshake_done(pscom_con_t *con, int rc)
{
    pscom_precon_t *pre = con->precon;
    if (!pre || !pre->pending || pre->pending_done) {
        plog_err("%s: plugin error: pscom_con_handshake_done() without a pending handshake step",
                 pscom_con_name(con));
        return;
    }
    pre->pending_done = 1;
    pre->pending_rc   = rc == 0 ? 0 : -1; /* no PSCOM_PLUGIN_RETRY from here */
    pscom_timer_start(&pre->timer, 0); /* precon_timer goes on, at the next pass */
}

/* The plugin's pending step is over: go on where it left off. */
void precon_pending_resume(pscom_precon_t *pre)
{
    int rc                 = pre->pending_rc;
    unsigned char *confirm = pre->pending_confirm;
    size_t clen            = pre->pending_confirm_len;
    pre->pending_confirm   = NULL;
    precon_pending_end(pre);
    precon_watchdog_arm(pre); /* before: what follows may end the handshake */
    dprecon(pre, "precon %s %p: %s step over: %d", precon_side(pre), (void *)pre, pre->cand->name, rc);
    if (pre->is_connect) {
        connect_done(pre, rc, confirm, clen);
    } else {
        confirm_done(pre, rc);
    }
    free(confirm);
}

static void handle_reject(pscom_precon_t *pre, const unsigned char *p, size_t len)
{
    uint32_t reason = PSCOM_PRECON_REJECT_VERSION;
    if (len >= sizeof(reason)) {
        memcpy(&reason, p, sizeof(reason));
        reason = le32toh(reason);
    }
    if (pre->is_connect && reason == PSCOM_PRECON_REJECT_NOMATCH) {
        /* the peer has not (yet) set up its on-demand connection to us */
        precon_attempt_failed(pre, 1, PSCOM_ERR_CONNECTION_REFUSED, ECONNREFUSED,
                       "refused: the peer has no waiting on-demand connection to us");
        return;
    }
    plog_err("%s: the peer refused the connection (%s)", pscom_con_name(pre->con),
             reason == PSCOM_PRECON_REJECT_VERSION ? "protocol version"
             : reason == PSCOM_PRECON_REJECT_FAILED ? "its connection to us failed"
                                                     : "no matching on-demand connection");
    precon_fail(pre, PSCOM_ERR_CONNECTION_REFUSED, ECONNREFUSED);
}

/* Is this message type valid now? */
static int expected(const pscom_precon_t *pre, uint16_t type, size_t len)
{
    if (type == PSCOM_PRECON_REJECT || type == PSCOM_PRECON_NO_TRANSPORT) return 1;
    if (type == PSCOM_PRECON_HELLO) return !pre->hello_received && len == sizeof(pscom_precon_hello_t);
    if (!pre->hello_received || pre->start_when_flushed || pre->pending) return 0;
    if (pre->flags & PSCOM_PRECON_FLAG_BACKCONNECT) return type == PSCOM_PRECON_BACKCONNECT_OK;
    if (pre->is_connect) {
        /* the answer to our OFFER, then the one to our CONFIRM: a transport
         * must not start before its con_connect ran */
        switch (type) {
        case PSCOM_PRECON_ACCEPT:
        case PSCOM_PRECON_DECLINE: return pre->cand != NULL && !pre->confirm_sent;
        case PSCOM_PRECON_CONFIRM_OK:
        case PSCOM_PRECON_CONFIRM_FAIL: return pre->cand != NULL && pre->confirm_sent;
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

/* One complete message: pre->hdr, and its payload at p. */
void precon_handle_msg(pscom_precon_t *pre, const unsigned char *p)
{
    uint16_t type            = pre->hdr.type;
    size_t len               = pre->hdr.len;

    dprecon(pre, "precon %s %p: recv type %u len %zu", precon_side(pre), (void *)pre, type, len);
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
    case PSCOM_PRECON_CONFIRM_FAIL:
        if (len >= 1 && p[0] == PSCOM_PRECON_FAIL_RETRY && !pre->retried) {
            /* the same plugin once more (PSCOM_PLUGIN_RETRY) */
            plog_dbg("%s: handshake: the peer's %s asks to be offered again",
                     pscom_con_name(pre->con), pre->cand->name);
            pre->retried  = 1;
            pre->next_idx = pre->cand_idx;
        }
        /* fall through */
    case PSCOM_PRECON_DECLINE:
        precon_cand_abort(pre);
        offer_next(pre);
        break;
    case PSCOM_PRECON_CONFIRM: handle_confirm(pre, p, len); break;
    case PSCOM_PRECON_CONFIRM_OK: precon_start_transport(pre); break;
    case PSCOM_PRECON_CANCEL: precon_cand_abort(pre); break;
    case PSCOM_PRECON_NO_TRANSPORT:
        plog_info("%s: peer found no common transport", pscom_con_name(pre->con));
        precon_fail(pre, PSCOM_ERR_STDERROR, ENOPROTOOPT);
        break;
    case PSCOM_PRECON_REJECT: handle_reject(pre, p, len); break;
    case PSCOM_PRECON_BACKCONNECT_OK: precon_finish_quietly(pre); break;
    }
}

int precon_send_hello(pscom_precon_t *pre)
{
    pscom_precon_hello_t h;
    hello_build(pre, &h);
    return precon_send_msg(pre, PSCOM_PRECON_HELLO, &h, sizeof(h), NULL, 0);
}
