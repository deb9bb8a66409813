/*
 * pscom_tcp.c - the tcp transport. It takes over the handshake's TCP
 * socket: non-blocking, TCP_NODELAY, header+xheader+data of as many queued
 * messages as fit leave in one sendmsg(); incoming data is read straight
 * into the matched receive buffer. SIGPIPE is never raised (MSG_NOSIGNAL).
 *
 * Socket buffers are left to the kernel's autotuning unless
 * PSP_TCP_SNDBUF / PSP_TCP_RCVBUF say otherwise: fixed small buffers cost
 * most of the bandwidth on fast links.
 */
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "pscom_plugin.h"

#define TCP_IOV_MAX   64
#define TCP_READ_MAX  64 /* reads per event before yielding to other fds */

typedef struct tcp_con {
    pscom_ufd_t ufd;
    pscom_con_t *con;
} tcp_con_t;

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

/* Write as much as the socket takes. */
static void tcp_do_write(tcp_con_t *tc)
{
    struct iovec iov[TCP_IOV_MAX];
    pscom_con_t *con = tc->con;
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
            pscom_con_transport_error(con, PSCOM_OP_WRITE, errno);
            return;
        }
        if (pscom_write_done(con, (size_t)w)) return; /* closed */
        if ((size_t)w < total) {
            tcp_set_out(tc, 1);
            return;
        }
    }
}

/* Returns 1 if the connection stopped reading. */
static int tcp_do_read(tcp_con_t *tc)
{
    pscom_con_t *con = tc->con;
    for (int i = 0; i < TCP_READ_MAX; i++) {
        char *buf;
        size_t len;
        pscom_read_get_buf(con, &buf, &len);
        ssize_t r = recv(tc->ufd.fd, buf, len, MSG_DONTWAIT);
        if (r > 0) {
            if (pscom_read_done(con, (size_t)r)) return 1;
            if ((size_t)r < len) return 0; /* drained */
            continue;
        }
        if (r == 0) {
            pscom_con_transport_error(con, PSCOM_OP_READ, 0);
            return 1;
        }
        if (errno == EINTR) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) return 0;
        plog_dbg("%s: tcp read failed: %m", pscom_con_name(con));
        pscom_con_transport_error(con, PSCOM_OP_READ, errno);
        return 1;
    }
    return 0;
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
