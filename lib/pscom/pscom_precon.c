/*
 * pscom_precon.c - the pre-connection handshake over TCP.
 *
 *   connect side:  HELLO {wire version, flags, node id, rank, port,
 *                         attempt, con id, name}
 *   accept side:   HELLO (after reading the peer's) | REJECT {reason}
 *   connect side:  OFFER {plugin name, blob}      for each plugin by priority
 *   accept side:   ACCEPT {blob} | DECLINE
 *   connect side:  CONFIRM {blob} | CANCEL (then next OFFER)
 *   accept side:   CONFIRM_OK | CONFIRM_FAIL      then both start the transport
 *   connect side:  NO_TRANSPORT when no plugin is left
 * A back-connect request (HELLO flag BACKCONNECT) is answered with HELLO,
 * BACKCONNECT_OK (or REJECT) and closed.
 *
 * Every message has a 16-byte header whose magic, version, type and
 * payload length are checked before anything is read into memory; exactly
 * the announced bytes are read, so a transport taking over the socket
 * finds the stream at a message boundary. A peer that sends anything else
 * has its connection closed with a logged error.
 *
 * Connect side: one precon lives across attempts. An attempt is a
 * non-blocking TCP connect plus the handshake; a refused, reset or
 * timed-out attempt, an EOF before the transport started, a stalled one
 * (watchdog) or a REJECT(NOMATCH) is retried after a back-off timer, up to
 * PSP_RETRY retries; then the connection fails with a logged error that
 * names the limit. Nothing blocks: the progress engine drives it all.
 *
 * Accept side: the watchdog closes a handshake that moves no byte for the
 * stall window. A HELLO with the ONDEMAND flag continues on our own
 * waiting on-demand object for the peer's name ("adoption"); a newer
 * attempt of the same peer connection replaces an older one still in
 * progress; if an adopted handshake fails, the object goes back to waiting
 * instead of failing (the peer retries or tells us it gave up).
 */
#include "pscom_precon.h"

#include <errno.h>
#include <stdio.h>
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
#include "pscom_precon_tcp.h"
#include "pscom_progress.h"
#include "pscom_sock.h"
#include "pscom_wire.h"

enum precon_phase {
    PHASE_CONNECTING, /* connect side: TCP connect in progress */
    PHASE_HANDSHAKE,  /* exchanging messages */
    PHASE_RETRY_WAIT, /* connect side: back-off before the next attempt */
};

struct pscom_precon {
    pscom_con_t *con;
    pscom_ufd_t ufd;
    int is_connect;
    int phase;
    int hello_received;
    pscom_precon_peer_t peer;
    uint32_t peer_attempt;                /* accept side: attempt number in the peer's HELLO */

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
    int confirm_sent;                     /* connect side: CONFIRM for cand went: CONFIRM_OK
                                             or CONFIRM_FAIL is due, not ACCEPT or DECLINE */
    int start_when_flushed;               /* accept side: CONFIRM_OK queued */
    int pending;                          /* cand's con_connect/con_confirm goes on */
    int pending_done, pending_rc;         /* ... and is over (pscom_con_handshake_done) */
    unsigned char *pending_confirm;       /* connect side: the CONFIRM to send then */
    size_t pending_confirm_len;
    uint32_t flags;                       /* our HELLO flags (PSCOM_PRECON_FLAG_*) */
    pscom_con_t *od_owner;                /* back-connect request: the waiting connection */
    pscom_list_t bc_next;                 /* ... and in backconnects meanwhile */

    /* connect side: target and attempts */
    uint32_t addr;
    int port;
    unsigned attempt;                     /* attempts started (1 = the first) */
    int ever_answered;                    /* some attempt got the peer's HELLO */
    int *direct_err;                      /* see pscom_precon_connect_to() */
    int last_err;                         /* errno of the last failed attempt */
    const char *last_what;                /* what failed last (for the final message) */

    /* watchdog: ticks every RECONNECT_TIMEOUT ms while connecting or
     * handshaking; the retry delay while waiting */
    pscom_timer_t timer;
    unsigned stalled;                     /* ticks without a byte moved */
    int moved;                            /* a byte moved since the last tick */
};

/* back-connect requests in flight (od_owner set), of every socket */
static pscom_list_t backconnects = PSCOM_LIST_INIT(backconnects);

#define dprecon(pre, ...)                                                      \
    pscom_log_force(pscom_config.debug_precon, PSCOM_LOG_DEBUG, __VA_ARGS__)

static void precon_handler(pscom_ufd_t *ufd, uint32_t revents);
static void precon_timer(pscom_timer_t *timer);
static void attempt_start(pscom_precon_t *pre);

static const char *side(const pscom_precon_t *pre)
{
    return pre->is_connect ? "connect" : "accept";
}

/* watchdog interval and ticks without progress before a stall */
static unsigned tick_ms(void)
{
    return pscom_config.precon_tcp_reconnect_timeout;
}

static unsigned stalled_max(void)
{
    return pscom_config.precon_tcp_connect_stalled_max ? pscom_config.precon_tcp_connect_stalled_max
                                                       : 1;
}

static void watchdog_arm(pscom_precon_t *pre)
{
    pre->stalled = 0;
    pre->moved   = 0;
    if (tick_ms()) pscom_timer_start(&pre->timer, tick_ms());
}

static const char *target_str(const pscom_precon_t *pre, char *buf, size_t len)
{
    snprintf(buf, len, "%u.%u.%u.%u:%d (\"%.8s\")", pre->addr >> 24, (pre->addr >> 16) & 0xff,
             (pre->addr >> 8) & 0xff, pre->addr & 0xff, pre->port,
             pre->con->pub.remote_con_info.name);
    return buf;
}

/* ---- teardown ------------------------------------------------------------ */

static void pending_end(pscom_precon_t *pre)
{
    pre->pending      = 0;
    pre->pending_done = 0;
    free(pre->pending_confirm);
    pre->pending_confirm = NULL;
}

static void cand_abort(pscom_precon_t *pre)
{
    pscom_con_t *con = pre->con;
    pending_end(pre);
    pre->confirm_sent = 0;
    if (!pre->cand) return;
    if (pre->cand->ops->con_abort) pre->cand->ops->con_abort(con);
    free(con->plugin_priv);
    con->plugin_priv = NULL;
    pre->cand        = NULL;
    pre->cand_idx    = -1;
}

static void close_fd(pscom_precon_t *pre)
{
    if (pre->ufd.fd < 0) return;
    pscom_ufd_del(&pre->ufd);
    close(pre->ufd.fd);
    pre->ufd.fd = -1;
}

static void precon_destroy(pscom_precon_t *pre)
{
    if (pre->ufd.fd >= 0 && pre->phase == PHASE_HANDSHAKE && pre->out_off < pre->out_len) {
        /* a last small message (REJECT, BACKCONNECT_OK) must not be lost */
        pscom_writeall(pre->ufd.fd, pre->out + pre->out_off, pre->out_len - pre->out_off);
    }
    pscom_timer_stop(&pre->timer);
    pending_end(pre);
    close_fd(pre);
    free(pre->out);
    pre->out = NULL;
    if (pre->con->precon == pre) pre->con->precon = NULL;
    pscom_defer_free(pre);
}

/* A back-connect request ended: the waiting on-demand connection is told
 * and released from it. */
static void backconnect_end(pscom_precon_t *pre, int failed, pscom_err_t err)
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
static int adopted_ondemand(const pscom_precon_t *pre)
{
    return !pre->is_connect && pre->con->ondemand && !pre->con->user_closed;
}

static void precon_fail(pscom_precon_t *pre, pscom_err_t err, int errnum)
{
    pscom_con_t *con = pre->con;
    cand_abort(pre);
    errno = errnum;
    backconnect_end(pre, 1, err);
    if (pre->direct_err && !pre->ever_answered) *pre->direct_err = errnum ? errnum : EIO;
    int revert = adopted_ondemand(pre);
    precon_destroy(pre);
    if (revert) {
        pscom_ondemand_revert(con);
        return;
    }
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

/* Connect side: the current attempt failed. Retry after a back-off if the
 * failure is transient and retries are left, else fail for good with a
 * message naming the limit. */
static void attempt_failed(pscom_precon_t *pre, int retryable, pscom_err_t err, int errnum,
                           const char *what)
{
    char tgt[96];
    pre->last_err  = errnum;
    pre->last_what = what;
    cand_abort(pre);
    close_fd(pre);
    pscom_timer_stop(&pre->timer);

    /* a back-connect request whose owner stopped waiting has no purpose */
    if (pre->od_owner && !pscom_ondemand_waiting(pre->od_owner)) {
        precon_finish_quietly(pre);
        return;
    }
    if (retryable && pre->attempt <= pscom_config.retry) {
        unsigned delay = pscom_tcp_retry_delay_ms(pre->attempt + 1);
        plog_dbg("%s: attempt %u to %s failed (%s: %s); retrying in %u ms", pscom_con_name(pre->con),
                 pre->attempt, target_str(pre, tgt, sizeof(tgt)), what, strerror(errnum), delay);
        pre->phase = PHASE_RETRY_WAIT;
        pscom_timer_start(&pre->timer, delay);
        return;
    }
    if (retryable) {
        if (errnum == ETIMEDOUT) {
            plog_err("%s: connect to %s failed: %s, no byte moved within %u ms "
                     "(PSP_PRECON_TCP_RECONNECT_TIMEOUT=%u x PSP_PRECON_TCP_CONNECT_STALLED_MAX=%u), "
                     "%u attempt%s (PSP_RETRY=%u)",
                     pscom_con_name(pre->con), target_str(pre, tgt, sizeof(tgt)), what,
                     tick_ms() * stalled_max(), tick_ms(), stalled_max(), pre->attempt,
                     pre->attempt == 1 ? "" : "s", pscom_config.retry);
        } else {
            plog_err("%s: connect to %s failed after %u attempt%s (PSP_RETRY=%u): %s: %s",
                     pscom_con_name(pre->con), target_str(pre, tgt, sizeof(tgt)), pre->attempt,
                     pre->attempt == 1 ? "" : "s", pscom_config.retry, what, strerror(errnum));
        }
    }
    precon_fail(pre, err, errnum);
}

/* A failure of the running handshake: the connect side retries what is
 * transient, the accept side gives up (the peer retries). */
static void handshake_failed(pscom_precon_t *pre, int retryable, pscom_err_t err, int errnum,
                             const char *what)
{
    if (pre->is_connect) {
        attempt_failed(pre, retryable, err, errnum, what);
        return;
    }
    plog_dbg("%s: incoming handshake failed: %s: %s", pscom_con_name(pre->con), what,
             strerror(errnum));
    precon_fail(pre, err, errnum);
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

static void send_reject(pscom_precon_t *pre, uint32_t reason)
{
    uint32_t r = htole32(reason);
    send_msg(pre, PSCOM_PRECON_REJECT, &r, sizeof(r), NULL, 0);
}

/* 0: all sent or waiting for EPOLLOUT (or for the connect), -1: error */
static int flush_out(pscom_precon_t *pre)
{
    if (pre->phase != PHASE_HANDSHAKE) return 0; /* sent once connected */
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
        pre->moved = 1;
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

/* ---- accept side: HELLO ------------------------------------------------------ */

static int send_hello(pscom_precon_t *pre);

/* Refuse the peer: REJECT(reason), then close. */
static void refuse(pscom_precon_t *pre, uint32_t reason)
{
    send_reject(pre, reason);
    precon_fail(pre, PSCOM_ERR_CONNECTION_REFUSED, ECONNREFUSED);
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
static int adopt_ondemand(pscom_precon_t *pre)
{
    pscom_con_t *tmp = pre->con;
    if (same_name(pre)) {
        refuse(pre, PSCOM_PRECON_REJECT_FAILED);
        return -1;
    }
    pscom_con_t *m = pscom_ondemand_find(tmp->sock, pre->peer.name);
    if (!m) {
        plog_warn("%s: on-demand connection from \"%.8s\" without a matching on-demand "
                  "connection: refused", pscom_con_name(tmp), pre->peer.name);
        refuse(pre, PSCOM_PRECON_REJECT_NOMATCH);
        return -1;
    }
    pscom_precon_t *old = m->precon;
    if (old) {
        if (old->is_connect) {
            /* only the lower name connects: this is not the peer we know */
            plog_warn("%s: unexpected on-demand connection from \"%.8s\" while connecting "
                      "to it: refused", pscom_con_name(tmp), pre->peer.name);
            refuse(pre, PSCOM_PRECON_REJECT_NOMATCH);
            return -1;
        }
        if (old->peer.con_id == pre->peer.con_id && old->peer_attempt > pre->peer_attempt) {
            /* an attempt the peer already abandoned, overtaken by a newer one */
            dprecon(pre, "precon accept %p: stale attempt %u (have %u)", (void *)pre,
                    pre->peer_attempt, old->peer_attempt);
            refuse(pre, PSCOM_PRECON_REJECT_NOMATCH);
            return -1;
        }
        /* a newer attempt replaces the one in progress */
        dprecon(pre, "precon accept %p: attempt %u replaces %p", (void *)pre, pre->peer_attempt,
                (void *)old);
        cand_abort(old);
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
static void handle_backconnect(pscom_precon_t *pre)
{
    if (same_name(pre)) {
        refuse(pre, PSCOM_PRECON_REJECT_FAILED);
        return;
    }
    pscom_con_t *m = pscom_ondemand_lookup(pre->con->sock, pre->peer.name);
    if (!m) {
        plog_warn("%s: back-connect request from \"%.8s\" without a matching on-demand "
                  "connection: refused", pscom_con_name(pre->con), pre->peer.name);
        refuse(pre, PSCOM_PRECON_REJECT_NOMATCH);
        return;
    }
    if (m->connect_failed) {
        refuse(pre, PSCOM_PRECON_REJECT_FAILED); /* we gave up on it: so should the peer */
        return;
    }
    if (!m->ondemand) {
        /* already connected: a request that crossed the connection */
        refuse(pre, PSCOM_PRECON_REJECT_NOMATCH);
        return;
    }
    if (send_hello(pre) < 0 || send_msg(pre, PSCOM_PRECON_BACKCONNECT_OK, NULL, 0, NULL, 0) < 0) {
        precon_fail(pre, PSCOM_ERR_STDERROR, errno);
        return;
    }
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
        if (send_msg(pre, PSCOM_PRECON_OFFER, name, sizeof(name), blob, len) < 0)
            handshake_failed(pre, 1, PSCOM_ERR_STDERROR, errno, "send");
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
        send_reject(pre, PSCOM_PRECON_REJECT_VERSION);
        precon_fail(pre, PSCOM_ERR_CONNECTION_REFUSED, EPROTO);
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
            handle_backconnect(pre);
            return;
        }
        if ((peer_flags & PSCOM_PRECON_FLAG_ONDEMAND) && adopt_ondemand(pre) < 0) return;
        con = pre->con;
        if (send_hello(pre) < 0) {
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

/* Connect side: con_connect is over (rc); CONFIRM, or CANCEL and the next plugin. */
static void connect_done(pscom_precon_t *pre, int rc, const void *confirm, size_t clen)
{
    if (rc < 0) {
        cand_abort(pre);
        if (send_msg(pre, PSCOM_PRECON_CANCEL, NULL, 0, NULL, 0) < 0) {
            handshake_failed(pre, 1, PSCOM_ERR_STDERROR, errno, "send");
            return;
        }
        offer_next(pre);
        return;
    }
    if (clen > PSCOM_PRECON_BLOB_MAX) clen = PSCOM_PRECON_BLOB_MAX;
    pre->confirm_sent = 1;
    if (send_msg(pre, PSCOM_PRECON_CONFIRM, confirm, clen, NULL, 0) < 0)
        handshake_failed(pre, 1, PSCOM_ERR_STDERROR, errno, "send");
}

static void handle_accept(pscom_precon_t *pre, const unsigned char *p, size_t len)
{
    unsigned char confirm[PSCOM_PRECON_BLOB_MAX];
    size_t clen = 0;
    int rc      = 0;
    if (pre->cand->ops->con_connect)
        rc = pre->cand->ops->con_connect(pre->con, p, len, confirm, &clen);
    if (rc == PSCOM_PLUGIN_PENDING) {
        if (clen > PSCOM_PRECON_BLOB_MAX) clen = PSCOM_PRECON_BLOB_MAX;
        pre->pending_confirm = malloc(clen ? clen : 1);
        if (pre->pending_confirm) {
            memcpy(pre->pending_confirm, confirm, clen);
            pre->pending_confirm_len = clen;
            pre->pending             = 1;
            return;
        }
        rc = -1;
    }
    connect_done(pre, rc, confirm, clen);
}

/* Accept side: con_confirm is over (rc); CONFIRM_OK and the transport
 * starts, or CONFIRM_FAIL and the peer offers the next plugin. */
static void confirm_done(pscom_precon_t *pre, int rc)
{
    if (rc < 0) {
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
    pre->pending_rc   = rc < 0 ? -1 : 0;
    pscom_timer_start(&pre->timer, 0); /* precon_timer goes on, at the next pass */
}

/* The plugin's pending step is over: go on where it left off. */
static void pending_resume(pscom_precon_t *pre)
{
    int rc                 = pre->pending_rc;
    unsigned char *confirm = pre->pending_confirm;
    size_t clen            = pre->pending_confirm_len;
    pre->pending_confirm   = NULL;
    pending_end(pre);
    watchdog_arm(pre); /* before: what follows may end the handshake */
    dprecon(pre, "precon %s %p: %s step over: %d", side(pre), (void *)pre, pre->cand->name, rc);
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
        attempt_failed(pre, 1, PSCOM_ERR_CONNECTION_REFUSED, ECONNREFUSED,
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
    case PSCOM_PRECON_REJECT: handle_reject(pre, p, len); break;
    case PSCOM_PRECON_BACKCONNECT_OK: precon_finish_quietly(pre); break;
    }
}

/* Read what is available, exactly up to message boundaries. */
static void read_msgs(pscom_precon_t *pre)
{
    for (;;) {
        size_t want = PSCOM_PRECON_HEADER_SIZE;
        if (pre->in_have >= PSCOM_PRECON_HEADER_SIZE) want += pre->hdr.len;
        ssize_t n = recv(pre->ufd.fd, pre->in + pre->in_have, want - pre->in_have, MSG_DONTWAIT);
        if (n == 0) {
            handshake_failed(pre, 1, PSCOM_ERR_EOF, ECONNRESET, "the peer closed the connection");
            return;
        }
        if (n < 0) {
            if (errno == EINTR) continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK) return;
            int e = errno;
            handshake_failed(pre, pscom_tcp_retryable(e), PSCOM_ERR_STDERROR, e, "read");
            return;
        }
        pre->moved = 1;
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
                return;
            }
            if (pre->hdr.version != PSCOM_PRECON_VERSION) {
                plog_err("%s: peer speaks handshake version %u, we speak %u; closing",
                         pscom_con_name(pre->con), pre->hdr.version, PSCOM_PRECON_VERSION);
                send_reject(pre, PSCOM_PRECON_REJECT_VERSION);
                precon_fail(pre, PSCOM_ERR_CONNECTION_REFUSED, EPROTO);
                return;
            }
        }
        if (pre->in_have >= PSCOM_PRECON_HEADER_SIZE &&
            pre->in_have == PSCOM_PRECON_HEADER_SIZE + pre->hdr.len) {
            pre->in_have  = 0;
            unsigned att  = pre->attempt;
            handle_msg(pre);
            /* finished, failed, handed over, or a new attempt began */
            if (pre->con->precon != pre || pre->phase != PHASE_HANDSHAKE || pre->attempt != att)
                return;
        }
    }
}

static void precon_handler(pscom_ufd_t *ufd, uint32_t revents)
{
    pscom_precon_t *pre = ufd->priv;
    if (pre->phase == PHASE_CONNECTING) {
        if (pscom_tcp_connect_finish(ufd->fd) < 0) {
            int e = errno;
            attempt_failed(pre, pscom_tcp_retryable(e), PSCOM_ERR_STDERROR, e, "connect");
            return;
        }
        pre->phase = PHASE_HANDSHAKE;
        pre->moved = 1;
        pscom_ufd_set_events(&pre->ufd, EPOLLIN);
        revents |= EPOLLOUT; /* send the queued HELLO */
    }
    if (revents & EPOLLOUT) {
        if (flush_out(pre) < 0) {
            int e = errno;
            handshake_failed(pre, pscom_tcp_retryable(e), PSCOM_ERR_STDERROR, e, "write");
            return;
        }
        if (pre->start_when_flushed && !pre->out_len) {
            start_transport(pre);
            return;
        }
    }
    if (revents & (EPOLLIN | EPOLLERR | EPOLLHUP)) read_msgs(pre);
}

/* Watchdog tick, or the end of a retry delay. */
static void precon_timer(pscom_timer_t *timer)
{
    pscom_precon_t *pre = timer->priv;
    if (pre->pending_done) {
        pending_resume(pre);
        return;
    }
    if (pre->phase == PHASE_RETRY_WAIT) {
        attempt_start(pre);
        return;
    }
    if (pre->moved) {
        pre->moved   = 0;
        pre->stalled = 0;
    } else if (++pre->stalled >= stalled_max()) {
        if (pre->is_connect) {
            attempt_failed(pre, 1, PSCOM_ERR_STDERROR, ETIMEDOUT,
                           pre->phase == PHASE_CONNECTING ? "TCP connect stalled"
                                                          : "handshake stalled");
        } else {
            plog_warn("%s: incoming connection on port %d moved no byte for %u ms "
                      "(PSP_PRECON_TCP_RECONNECT_TIMEOUT x PSP_PRECON_TCP_CONNECT_STALLED_MAX): "
                      "closed", pscom_con_name(pre->con), pre->con->sock->pub.listen_portno,
                      tick_ms() * stalled_max());
            precon_fail(pre, PSCOM_ERR_STDERROR, ETIMEDOUT);
        }
        return;
    }
    pscom_timer_start(&pre->timer, tick_ms());
}

static pscom_precon_t *precon_create(pscom_con_t *con, int is_connect)
{
    pscom_precon_t *pre = calloc(1, sizeof(*pre));
    if (!pre) return NULL;
    pre->con         = con;
    pre->is_connect  = is_connect;
    pre->cand_idx    = -1;
    pre->ufd.fd      = -1;
    pre->ufd.handler = precon_handler;
    pre->ufd.priv    = pre;
    pre->timer.fn    = precon_timer;
    pre->timer.priv  = pre;
    con->precon      = pre;
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
        .attempt      = htole32(pre->is_connect ? pre->attempt : 0),
        .con_id       = htole64((uint64_t)(uintptr_t)&pre->con->pub),
    };
    memcpy(h.name, sock->pub.local_con_info.name, sizeof(h.name));
    return send_msg(pre, PSCOM_PRECON_HELLO, &h, sizeof(h), NULL, 0);
}

/* ---- connect side ------------------------------------------------------------ */

/* Begin attempt number pre->attempt + 1: a fresh socket, a fresh handshake. */
static void attempt_start(pscom_precon_t *pre)
{
    char tgt[96], lim[96];
    pre->attempt++;
    pre->hello_received     = 0;
    pre->in_have            = 0;
    pre->out_len            = 0;
    pre->out_off            = 0;
    pre->next_idx           = 0;
    pre->start_when_flushed = 0;
    pre->phase              = PHASE_CONNECTING;

    if (pre->od_owner && !pscom_ondemand_waiting(pre->od_owner)) {
        precon_finish_quietly(pre); /* nobody waits for this back-connect any more */
        return;
    }
    int connected;
    int fd = pscom_tcp_connect_start(pre->addr, pre->port, &connected);
    if (fd < 0) {
        int e = errno;
        if (pscom_fd_exhausted(e)) {
            plog_err("%s: cannot open a socket to connect to %s: %s (%s)", pscom_con_name(pre->con),
                     target_str(pre, tgt, sizeof(tgt)), strerror(e),
                     pscom_fd_limit_str(e, lim, sizeof(lim)));
            precon_fail(pre, PSCOM_ERR_STDERROR, e);
            return;
        }
        attempt_failed(pre, pscom_tcp_retryable(e), PSCOM_ERR_STDERROR, e, "connect");
        return;
    }
    pre->ufd.fd     = fd;
    pre->ufd.events = connected ? EPOLLIN : EPOLLOUT;
    if (pscom_ufd_add(&pre->ufd) < 0) {
        int e = errno;
        close(fd);
        pre->ufd.fd = -1;
        precon_fail(pre, PSCOM_ERR_STDERROR, e);
        return;
    }
    dprecon(pre, "precon connect %p: attempt %u to %s%s", (void *)pre, pre->attempt,
            target_str(pre, tgt, sizeof(tgt)), connected ? " (connected)" : "");
    if (send_hello(pre) < 0) { /* queued until connected */
        precon_fail(pre, PSCOM_ERR_STDERROR, errno);
        return;
    }
    watchdog_arm(pre);
    if (connected) precon_handler(&pre->ufd, EPOLLOUT);
}

int pscom_precon_connect_to(pscom_con_t *con, uint32_t addr, int port, uint32_t flags,
                            int *direct_err)
{
    pscom_precon_t *pre = precon_create(con, 1);
    if (!pre) {
        if (direct_err) *direct_err = ENOMEM;
        errno = ENOMEM;
        pscom_con_setup_failed(con, PSCOM_ERR_STDERROR);
        return -1;
    }
    pre->addr       = addr;
    pre->port       = port;
    pre->flags      = flags;
    pre->direct_err = direct_err;
    attempt_start(pre);
    return con->precon == pre ? 0 : -1;
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
    attempt_start(pre);
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

/* ---- accept side -------------------------------------------------------------- */

int pscom_precon_accept(pscom_con_t *con, int fd)
{
    pscom_precon_t *pre = precon_create(con, 0);
    if (!pre) {
        close(fd);
        return -1;
    }
    pre->phase      = PHASE_HANDSHAKE;
    pre->ufd.fd     = fd;
    pre->ufd.events = EPOLLIN;
    if (pscom_ufd_add(&pre->ufd) < 0) {
        pre->ufd.fd = -1;
        close(fd);
        con->precon = NULL;
        free(pre);
        return -1;
    }
    /* we answer the peer's HELLO: by then we know which connection it is for */
    watchdog_arm(pre);
    return 0;
}
