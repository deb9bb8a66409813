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
#include "pscom_precon_priv.h"

#include <errno.h>
#include <poll.h>
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

static void precon_handler(pscom_ufd_t *ufd, uint32_t revents);
static void precon_timer(pscom_timer_t *timer);

const char *precon_side(const pscom_precon_t *pre)
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

/* Ticks without a byte moved before a handshake counts as stalled. After
 * its CONFIRM the connecting side waits one window longer: the accepting
 * side may start the transport at any moment then (CONFIRM_OK), and a new
 * attempt would leave it a second connection for one pscom_connect. Within
 * its own window the accepting side answers or closes, and before it
 * starts it looks whether the connecting side is still there
 * (peer_left() in pscom_precon_msg.c). */
static unsigned stall_limit(const pscom_precon_t *pre)
{
    return pre->is_connect && pre->confirm_sent ? 2 * stalled_max() : stalled_max();
}

/* Bytes (or the end) waiting in the socket are no stall: the timers run
 * before the fd events of a pass, and a process that was not scheduled for
 * a while finds both due. */
static int input_waiting(const pscom_precon_t *pre)
{
    struct pollfd p = {.fd = pre->ufd.fd, .events = POLLIN};
    return pre->phase == PHASE_HANDSHAKE && poll(&p, 1, 0) == 1;
}

void precon_watchdog_arm(pscom_precon_t *pre)
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

void precon_pending_end(pscom_precon_t *pre)
{
    pre->pending      = 0;
    pre->pending_done = 0;
    free(pre->pending_confirm);
    pre->pending_confirm = NULL;
}

void precon_cand_abort(pscom_precon_t *pre)
{
    pscom_con_t *con = pre->con;
    precon_pending_end(pre);
    pre->confirm_sent = 0;
    if (!pre->cand) return;
    if (pre->cand->ops->con_abort) pre->cand->ops->con_abort(con);
    free(con->plugin_priv);
    con->plugin_priv = NULL;
    pre->cand        = NULL;
    pre->cand_idx    = -1;
}

/* between messages: back to the handshake's own input buffer */
static void precon_in_reset(pscom_precon_t *pre)
{
    free(pre->in_big);
    pre->in_big  = NULL;
    pre->in_have = 0;
}

static void close_fd(pscom_precon_t *pre)
{
    if (pre->ufd.fd < 0) return;
    pscom_ufd_del(&pre->ufd);
    close(pre->ufd.fd);
    pre->ufd.fd = -1;
}

static int flush_out(pscom_precon_t *pre);

/* handshakes created and not destroyed yet (pscom_precon_running) */
static unsigned precons;

unsigned pscom_precon_running(void)
{
    return precons;
}

void precon_destroy(pscom_precon_t *pre)
{
    precons--;
    /* A last small message (REJECT, BACKCONNECT_OK) goes if the socket
     * takes it now: never blocking (a peer that reads nothing), never
     * SIGPIPE (a peer that closed; pscom_writeall's write() raised it
     * and killed the process) */
    if (pre->ufd.fd >= 0) flush_out(pre);
    pscom_timer_stop(&pre->timer);
    precon_pending_end(pre);
    close_fd(pre);
    free(pre->out);
    pre->out = NULL;
    precon_in_reset(pre);
    if (pre->con->precon == pre) pre->con->precon = NULL;
    pscom_defer_free(pre);
}

void precon_fail(pscom_precon_t *pre, pscom_err_t err, int errnum)
{
    pscom_con_t *con = pre->con;
    precon_cand_abort(pre);
    errno = errnum;
    precon_backconnect_end(pre, 1, err);
    if (pre->direct_err && !pre->ever_answered) *pre->direct_err = errnum ? errnum : EIO;
    int revert = precon_adopted_ondemand(pre);
    precon_destroy(pre);
    if (revert) {
        pscom_ondemand_revert(con);
        return;
    }
    errno = errnum;
    pscom_con_setup_failed(con, err);
}

/* The handshake did its job without a transport (back-connect). */
void precon_finish_quietly(pscom_precon_t *pre)
{
    pscom_con_t *con = pre->con;
    precon_backconnect_end(pre, 0, PSCOM_SUCCESS);
    precon_destroy(pre);
    con->connect_failed = 1;
    con->pub.state      = PSCOM_CON_STATE_CLOSED;
    pscom_con_release(con); /* library-owned */
}

void pscom_precon_abort(pscom_precon_t *pre)
{
    precon_fail(pre, PSCOM_ERR_EOF, ECONNABORTED);
}

/* Retries left after a failed attempt, the next back-off being delay ms?
 * At least PSP_RETRY of them. A refusal (nobody listens yet, no waiting
 * on-demand connection yet) moreover as long as the back-off stays within
 * PSP_RETRY seconds in all: the established library makes its PSP_RETRY
 * attempts 1 s apart, so a peer that starts a few seconds late still gets
 * connected; our back-off starts at 1 ms and reaches 1 s only after ten
 * retries (until 2026-11-29 the ten retries were all, about 1 s). An
 * attempt that timed out took its time already: PSP_RETRY retries. */
static int retries_left(const pscom_precon_t *pre, int errnum, unsigned delay)
{
    if (pre->attempt <= pscom_config.retry) return 1;
    return errnum != ETIMEDOUT &&
           (uint64_t)pre->backoff_ms + delay <= (uint64_t)pscom_config.retry * 1000u;
}

/* Connect side: the current attempt failed. Retry after a back-off if the
 * failure is transient and retries are left, else fail for good with a
 * message naming the limit. */
void precon_attempt_failed(pscom_precon_t *pre, int retryable, pscom_err_t err, int errnum,
                           const char *what)
{
    char tgt[96];
    pre->last_err  = errnum;
    pre->last_what = what;
    precon_cand_abort(pre);
    close_fd(pre);
    pscom_timer_stop(&pre->timer);

    /* a back-connect request whose owner stopped waiting has no purpose */
    if (pre->od_owner && !pscom_ondemand_waiting(pre->od_owner)) {
        precon_finish_quietly(pre);
        return;
    }
    unsigned delay = pscom_tcp_retry_delay_ms(pre->attempt + 1);
    if (retryable && retries_left(pre, errnum, delay)) {
        pre->backoff_ms += delay;
        plog_dbg("%s: attempt %u to %s failed (%s: %s); retrying in %u ms", pscom_con_name(pre->con),
                 pre->attempt, target_str(pre, tgt, sizeof(tgt)), what, strerror(errnum), delay);
        pre->phase = PHASE_RETRY_WAIT;
        pscom_timer_start(&pre->timer, delay);
        return;
    }
    if (retryable) {
        if (errnum == ETIMEDOUT && pre->stalled >= stalled_max()) { /* the watchdog's */
            plog_err("%s: connect to %s failed: %s, no byte moved within %u ms "
                     "(PSP_PRECON_TCP_RECONNECT_TIMEOUT=%u x PSP_PRECON_TCP_CONNECT_STALLED_MAX=%u"
                     "%s), %u attempt%s (PSP_RETRY=%u)",
                     pscom_con_name(pre->con), target_str(pre, tgt, sizeof(tgt)), what,
                     tick_ms() * pre->stalled, tick_ms(), stalled_max(),
                     pre->stalled > stalled_max() ? ", twice after CONFIRM" : "",
                     pre->attempt,
                     pre->attempt == 1 ? "" : "s", pscom_config.retry);
        } else {
            plog_err("%s: connect to %s failed after %u attempt%s in %u ms of back-off "
                     "(PSP_RETRY=%u: retries for %u s): %s: %s",
                     pscom_con_name(pre->con), target_str(pre, tgt, sizeof(tgt)), pre->attempt,
                     pre->attempt == 1 ? "" : "s", pre->backoff_ms, pscom_config.retry,
                     pscom_config.retry, what, strerror(errnum));
        }
    }
    precon_fail(pre, err, errnum);
}

/* A failure of the running handshake: the connect side retries what is
 * transient, the accept side gives up (the peer retries). */
void precon_handshake_failed(pscom_precon_t *pre, int retryable, pscom_err_t err, int errnum,
                             const char *what)
{
    if (pre->is_connect) {
        precon_attempt_failed(pre, retryable, err, errnum, what);
        return;
    }
    plog_dbg("%s: incoming handshake failed: %s: %s", pscom_con_name(pre->con), what,
             strerror(errnum));
    precon_fail(pre, err, errnum);
}

/* ---- output ----------------------------------------------------------------- */

int precon_send_msg(pscom_precon_t *pre, uint16_t type, const void *p1, size_t l1,
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
    dprecon(pre, "precon %s %p: send type %u len %zu", precon_side(pre), (void *)pre, type, len);
    return flush_out(pre);
}

void precon_send_reject(pscom_precon_t *pre, uint32_t reason)
{
    uint32_t r = htole32(reason);
    precon_send_msg(pre, PSCOM_PRECON_REJECT, &r, sizeof(r), NULL, 0);
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

void precon_start_transport(pscom_precon_t *pre)
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
    dprecon(pre, "precon %s %p: transport %s started", precon_side(pre), (void *)pre, d->name);
    precon_destroy(pre);
    pscom_con_setup_ok(con);
}

/* ---- refusing --------------------------------------------------------------- */

/* Refuse the peer: REJECT(reason), then close. */
void precon_refuse(pscom_precon_t *pre, uint32_t reason)
{
    precon_send_reject(pre, reason);
    precon_fail(pre, PSCOM_ERR_CONNECTION_REFUSED, ECONNREFUSED);
}

/* ---- input ------------------------------------------------------------------- */

/* A peer that sends and sends must neither hold up the progress engine
 * nor keep a handshake going for ever: at most MSGS_PER_PASS messages per
 * event (the rest at the next pass), at most MSGS_MAX in a handshake (a
 * real one has a HELLO, an OFFER and a CANCEL per plugin and a CONFIRM),
 * and at most TICKS_MAX_FACTOR stall windows in all (the watchdog). Until
 * 2026-11-29 a raw peer's flood of OFFERs kept one pscom_test_any() from
 * returning for as long as it sent, and the DECLINEs queued for it grew
 * without bound while it did not read. */
#define MSGS_PER_PASS    16
#define MSGS_MAX         256
#define TICKS_MAX_FACTOR 5

/* Read what is available, exactly up to message boundaries. */
static void read_msgs(pscom_precon_t *pre)
{
    for (unsigned pass_msgs = 0; pass_msgs < MSGS_PER_PASS;) {
        size_t want = PSCOM_PRECON_HEADER_SIZE;
        if (pre->in_have >= PSCOM_PRECON_HEADER_SIZE) want += pre->hdr.len;
        ssize_t n =
            recv(pre->ufd.fd, precon_in(pre) + pre->in_have, want - pre->in_have, MSG_DONTWAIT);
        if (n == 0) {
            precon_handshake_failed(pre, 1, PSCOM_ERR_EOF, ECONNRESET, "the peer closed the connection");
            return;
        }
        if (n < 0) {
            if (errno == EINTR) continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK) return;
            int e = errno;
            precon_handshake_failed(pre, pscom_tcp_retryable(e), PSCOM_ERR_STDERROR, e, "read");
            return;
        }
        pre->moved = 1;
        pre->in_have += (size_t)n;
        if (pre->in_have == PSCOM_PRECON_HEADER_SIZE) {
            pscom_precon_header_t h;
            memcpy(&h, pre->in_inline, sizeof(h));
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
                precon_send_reject(pre, PSCOM_PRECON_REJECT_VERSION);
                precon_fail(pre, PSCOM_ERR_CONNECTION_REFUSED, EPROTO);
                return;
            }
            if (pre->hdr.len > PSCOM_PRECON_IN_INLINE) { /* a large blob */
                pre->in_big = malloc(PSCOM_PRECON_HEADER_SIZE + pre->hdr.len);
                if (!pre->in_big) {
                    plog_err("%s: handshake: no memory for a message of %u bytes",
                             pscom_con_name(pre->con), pre->hdr.len);
                    precon_fail(pre, PSCOM_ERR_STDERROR, ENOMEM);
                    return;
                }
                memcpy(pre->in_big, pre->in_inline, PSCOM_PRECON_HEADER_SIZE);
            }
        }
        if (pre->in_have >= PSCOM_PRECON_HEADER_SIZE &&
            pre->in_have == PSCOM_PRECON_HEADER_SIZE + pre->hdr.len) {
            /* the message is the handler's now: a new attempt or the end
             * of the handshake inside it (precon_in_reset) leaves it be */
            if (++pre->msgs > MSGS_MAX) {
                plog_err("%s: handshake of more than %u messages: closing",
                         pscom_con_name(pre->con), MSGS_MAX);
                precon_handshake_failed(pre, 0, PSCOM_ERR_IOERROR, EPROTO, "too many messages");
                return;
            }
            pass_msgs++;
            unsigned char *msg = precon_in(pre), *big = pre->in_big;
            pre->in_big        = NULL;
            pre->in_have       = 0;
            unsigned att       = pre->attempt;
            precon_handle_msg(pre, msg + PSCOM_PRECON_HEADER_SIZE);
            free(big);
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
            precon_attempt_failed(pre, pscom_tcp_retryable(e), PSCOM_ERR_STDERROR, e, "connect");
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
            precon_handshake_failed(pre, pscom_tcp_retryable(e), PSCOM_ERR_STDERROR, e, "write");
            return;
        }
        if (pre->start_when_flushed && !pre->out_len) {
            precon_start_transport(pre);
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
        precon_pending_resume(pre);
        return;
    }
    if (pre->phase == PHASE_RETRY_WAIT) {
        precon_attempt_start(pre);
        return;
    }
    if (++pre->ticks >= TICKS_MAX_FACTOR * stalled_max()) {
        plog_err("%s: handshake not done within %u ms (%u x PSP_PRECON_TCP_RECONNECT_TIMEOUT x "
                 "PSP_PRECON_TCP_CONNECT_STALLED_MAX) although bytes moved: closing",
                 pscom_con_name(pre->con), tick_ms() * pre->ticks, TICKS_MAX_FACTOR);
        precon_handshake_failed(pre, 1, PSCOM_ERR_STDERROR, ETIMEDOUT, "handshake too long");
        return;
    }
    if (pre->moved || input_waiting(pre)) {
        pre->moved   = 0;
        pre->stalled = 0;
    } else if (++pre->stalled >= stall_limit(pre)) {
        if (pre->is_connect) {
            precon_attempt_failed(pre, 1, PSCOM_ERR_STDERROR, ETIMEDOUT,
                                  pre->phase == PHASE_CONNECTING ? "TCP connect stalled"
                                  : pre->confirm_sent ? "no answer to CONFIRM"
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

pscom_precon_t *precon_create(pscom_con_t *con, int is_connect)
{
    pscom_precon_t *pre = calloc(1, sizeof(*pre));
    if (!pre) return NULL;
    precons++;
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

/* ---- connect side ------------------------------------------------------------ */

/* Begin attempt number pre->attempt + 1: a fresh socket, a fresh handshake. */
void precon_attempt_start(pscom_precon_t *pre)
{
    char tgt[96], lim[96];
    pre->attempt++;
    pre->hello_received     = 0;
    pre->ticks              = 0;
    pre->msgs               = 0;
    precon_in_reset(pre);
    pre->out_len            = 0;
    pre->out_off            = 0;
    pre->next_idx           = 0;
    pre->retried            = 0;
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
        precon_attempt_failed(pre, pscom_tcp_retryable(e), PSCOM_ERR_STDERROR, e, "connect");
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
    if (precon_send_hello(pre) < 0) { /* queued until connected */
        precon_fail(pre, PSCOM_ERR_STDERROR, errno);
        return;
    }
    precon_watchdog_arm(pre);
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
    precon_attempt_start(pre);
    return con->precon == pre ? 0 : -1;
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
        precon_destroy(pre); /* (counted: a free() alone left it running for good) */
        return -1;
    }
    /* we answer the peer's HELLO: by then we know which connection it is for */
    precon_watchdog_arm(pre);
    return 0;
}
