/*
 * pscom_tcp.c - the tcp transport. It takes over the handshake's TCP
 * socket: non-blocking, TCP_NODELAY, header+xheader+data of as many queued
 * messages as fit leave in one sendmsg(); incoming data is read straight
 * into the matched receive buffer. SIGPIPE is never raised (MSG_NOSIGNAL).
 *
 * A failed write (the peer died: reset, broken pipe) does not fail the
 * connection at once: what the peer sent before is in our socket still
 * (Linux keeps received data readable after a reset) and is read and
 * delivered first, up to what had arrived when the write failed; then the
 * connection fails with the write's error (spec 5.7: no silent loss).
 *
 * Socket buffers are left to the kernel's autotuning unless
 * PSP_TCP_SNDBUF / PSP_TCP_RCVBUF say otherwise: fixed small buffers cost
 * most of the bandwidth on fast links.
 */
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdint.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "pscom_plugin.h"

#define TCP_IOV_MAX   64
#define TCP_READ_MAX  64 /* reads per event before yielding to other fds */

typedef struct tcp_con {
    pscom_ufd_t ufd;
    pscom_con_t *con;
    int write_err;    /* errno of a failed write (0: none): nothing is written any more */
    unsigned reading; /* in tcp_read(): the core's parser may be in the middle of a message */
} tcp_con_t;

/* How tcp_read() ended */
enum {
    TCP_READ_YIELD,   /* TCP_READ_MAX reads done, maybe more there */
    TCP_READ_EMPTY,   /* nothing more for now (or the drain's bytes are read) */
    TCP_READ_STOPPED, /* the core stopped reading: closed, failed, or the peer's EOF message */
    TCP_READ_ENDED,   /* EOF or a read error (*err: 0 or errno), not reported */
};

static struct {
    unsigned sndbuf;
    unsigned rcvbuf;
    unsigned rendezvous;
} tcp_config;

static const pscom_env_entry_t tcp_env[] = {
    {"SNDBUF", "0", "SO_SNDBUF of tcp connections in bytes (0: kernel autotuning)",
     &tcp_config.sndbuf, PSCOM_ENV_UINT, 0},
    {"RCVBUF", "0", "SO_RCVBUF of tcp connections in bytes (0: kernel autotuning)",
     &tcp_config.rcvbuf, PSCOM_ENV_UINT, 0},
    {"RENDEZVOUS", "inf", "rendezvous threshold of tcp connections in bytes (inf: off)",
     &tcp_config.rendezvous, PSCOM_ENV_UINT, PSCOM_ENV_HAS_PARENT},
    {NULL},
};

static pscom_env_table_t tcp_env_table = {.name = "tcp", .prefix = "TCP_", .entries = tcp_env};

static int tcp_init(void)
{
    pscom_env_table_register_and_parse(&tcp_env_table);
    pscom_env_clamp_sockbuf("PSP_TCP_SNDBUF", &tcp_config.sndbuf);
    pscom_env_clamp_sockbuf("PSP_TCP_RCVBUF", &tcp_config.rcvbuf);
    return 0;
}

static void tcp_set_out(tcp_con_t *tc, int on)
{
    pscom_ufd_set_events(&tc->ufd, on ? EPOLLIN | EPOLLOUT : EPOLLIN);
}

static void tcp_write_failed(tcp_con_t *tc, int drain);

/* Write as much as the socket takes. */
static void tcp_do_write(tcp_con_t *tc)
{
    struct iovec iov[TCP_IOV_MAX];
    pscom_con_t *con = tc->con;
    if (pscom_unlikely(tc->write_err)) return; /* the connection fails when the drain is done */
    for (;;) {
        int n = pscom_write_get_iov(con, iov, TCP_IOV_MAX);
        if (!n) {
            tcp_set_out(tc, 0);
            return;
        }
        size_t total = 0;
        for (int i = 0; i < n; i++) total += iov[i].iov_len;
        struct msghdr msg = {.msg_iov = iov, .msg_iovlen = (size_t)n};
        ssize_t w         = sendmsg(tc->ufd.fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w < 0) {
            if (errno == EINTR) continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK) {
                tcp_set_out(tc, 1);
                return;
            }
            plog_dbg("%s: tcp write failed: %m", pscom_con_name(con));
            tc->write_err = errno;
            /* inside a read pass (a message's handling wrote): the parser
             * is busy, that pass reads the rest and fails the connection */
            if (!tc->reading) tcp_write_failed(tc, 1);
            return;
        }
        if (pscom_write_done(con, (size_t)w)) return; /* closed */
        if ((size_t)w < total) {
            tcp_set_out(tc, 1);
            return;
        }
    }
}

/* Read into the core's buffers: up to TCP_READ_MAX reads, or, to drain
 * (*drain not NULL), until *drain bytes came or the socket has no more.
 * Returns TCP_READ_*. */
static int tcp_read(tcp_con_t *tc, size_t *drain, int *err)
{
    pscom_con_t *con = tc->con;
    int ret          = TCP_READ_YIELD;
    tc->reading++;
    for (unsigned i = 0; drain ? *drain > 0 : i < TCP_READ_MAX; i++) {
        char *buf;
        size_t len;
        pscom_read_get_buf(con, &buf, &len);
        ssize_t r = recv(tc->ufd.fd, buf, len, MSG_DONTWAIT);
        if (r > 0) {
            if (drain) *drain -= (size_t)r < *drain ? (size_t)r : *drain;
            if (pscom_read_done(con, (size_t)r)) {
                ret = TCP_READ_STOPPED; /* con may be closed: only its memory is left */
                break;
            }
            if (!drain && (size_t)r < len) {
                ret = TCP_READ_EMPTY; /* drained */
                break;
            }
            continue;
        }
        if (r < 0 && errno == EINTR) continue;
        if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            ret = TCP_READ_EMPTY;
            break;
        }
        *err = r < 0 ? errno : 0;
        ret  = TCP_READ_ENDED;
        break;
    }
    if (drain && ret == TCP_READ_YIELD) ret = TCP_READ_EMPTY;
    tc->reading--;
    return ret;
}

/* A write failed (tc->write_err). drain: the socket may hold more of what
 * the peer sent before; read it, as much as had arrived by now, and
 * deliver it (the read path: an EOF message or a protocol error in it
 * ends the connection as usual). Then fail the connection with the
 * write's error, unless it ended meanwhile (pscom_con_transport_error
 * does nothing then; the peer's EOF message before it: no con_error). */
static void tcp_write_failed(tcp_con_t *tc, int drain)
{
    pscom_con_t *con = tc->con;
    if (drain) {
        int inq = 0, err;
        size_t left = ioctl(tc->ufd.fd, FIONREAD, &inq) < 0 ? SIZE_MAX
                      : inq > 0                              ? (size_t)inq
                                                             : 0;
        if (left) {
            plog_dbg("%s: tcp: reading %d bytes that arrived before the write failed",
                     pscom_con_name(con), inq);
            tcp_read(tc, &left, &err); /* its EOF or read error: the write's is reported */
        }
    }
    pscom_con_transport_error(con, PSCOM_OP_WRITE, tc->write_err);
}

/* Returns 1 if the connection stopped reading. */
static int tcp_do_read(tcp_con_t *tc)
{
    int err = 0;
    int ret = tcp_read(tc, NULL, &err);
    if (pscom_unlikely(tc->write_err)) {
        /* a message's handling wrote, and that failed */
        tcp_write_failed(tc, ret == TCP_READ_YIELD || ret == TCP_READ_EMPTY);
        return 1;
    }
    if (ret == TCP_READ_ENDED) {
        if (err) plog_dbg("%s: tcp read failed: %s", pscom_con_name(tc->con), strerror(err));
        pscom_con_transport_error(tc->con, PSCOM_OP_READ, err);
    }
    return ret == TCP_READ_STOPPED || ret == TCP_READ_ENDED;
}

static void tcp_handler(pscom_ufd_t *ufd, uint32_t revents)
{
    tcp_con_t *tc = ufd->priv;
    if (revents & (EPOLLIN | EPOLLERR | EPOLLHUP)) {
        if (tcp_do_read(tc)) return;
    }
    if (revents & EPOLLOUT) tcp_do_write(tc);
}

static int tcp_con_start(pscom_con_t *con, int *fd)
{
    tcp_con_t *tc = pscom_con_plugin_priv(con);
    int one       = 1;
    tc->con         = con;
    tc->ufd.fd      = *fd;
    tc->ufd.events  = EPOLLIN;
    tc->ufd.handler = tcp_handler;
    tc->ufd.priv    = tc;
    setsockopt(tc->ufd.fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    if (tcp_config.sndbuf) {
        int v = (int)tcp_config.sndbuf;
        setsockopt(tc->ufd.fd, SOL_SOCKET, SO_SNDBUF, &v, sizeof(v));
    }
    if (tcp_config.rcvbuf) {
        int v = (int)tcp_config.rcvbuf;
        setsockopt(tc->ufd.fd, SOL_SOCKET, SO_RCVBUF, &v, sizeof(v));
    }
    if (tcp_config.rendezvous < PSCOM_ENV_UINT_INF)
        pscom_con_set_rendezvous_size(con, tcp_config.rendezvous);
    if (pscom_ufd_add(&tc->ufd) < 0) return -1;
    *fd = -1; /* ours now */
    return 0;
}

static void tcp_write_start(pscom_con_t *con)
{
    tcp_do_write(pscom_con_plugin_priv(con));
}

static void tcp_close(pscom_con_t *con)
{
    tcp_con_t *tc = pscom_con_plugin_priv(con);
    if (tc->ufd.fd < 0) return;
    pscom_ufd_del(&tc->ufd);
    close(tc->ufd.fd);
    tc->ufd.fd = -1;
}

static const pscom_plugin_ops_t tcp_ops = {
    .init        = tcp_init,
    .con_start   = tcp_con_start,
    .write_start = tcp_write_start,
    .close       = tcp_close,
};

PSCOM_PLUGIN_DEFINE(tcp) = {
    .abi_version   = PSCOM_PLUGIN_ABI_VERSION,
    .desc_size     = sizeof(pscom_plugin_desc_t),
    .name          = "tcp",
    .con_type      = PSCOM_CON_TYPE_TCP,
    .priority      = 10,
    .user_priority = 1,
    .caps          = PSCOM_PLUGIN_CAP_STREAM_PAD,
    .con_priv_size = sizeof(tcp_con_t),
    .ops           = &tcp_ops,
};
