/*
 * pscom_precon_tcp.c - non-blocking TCP connects, retry policy, socket
 * tuning, fd-limit messages.
 */
#include "pscom_precon_tcp.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include "pscom_config.h"
#include "pscom_log.h"

_Static_assert(EMFILE == 24 && ENFILE == 23, "pscom_fd_exhausted() constants");

void pscom_tcp_tune_precon(int fd)
{
    int one = 1;
    if (pscom_config.precon_tcp_nodelay)
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    if (pscom_config.precon_tcp_so_sndbuf) {
        int v = (int)pscom_config.precon_tcp_so_sndbuf;
        setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &v, sizeof(v));
    }
    if (pscom_config.precon_tcp_so_rcvbuf) {
        int v = (int)pscom_config.precon_tcp_so_rcvbuf;
        setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &v, sizeof(v));
    }
}

int pscom_tcp_retryable(int e)
{
    switch (e) {
    case ECONNREFUSED: /* listener not (yet) there, or its backlog overflowed */
    case ECONNRESET:
    case ECONNABORTED:
    case EPIPE:
    case ETIMEDOUT:
    case EAGAIN: /* no free local port */
    case EINTR:
    case ENETUNREACH:
    case EHOSTUNREACH:
    case EADDRNOTAVAIL:
        return 1;
    default:
        return 0;
    }
}

int pscom_tcp_connect_start(uint32_t addr, int port, int *connected)
{
    struct sockaddr_in sa = {.sin_family = AF_INET};
    sa.sin_addr.s_addr    = htonl(addr);
    sa.sin_port           = htons((uint16_t)port);

    *connected = 0;
    int fd     = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    pscom_tcp_tune_precon(fd);
    int rc;
    do {
        rc = connect(fd, (const struct sockaddr *)&sa, sizeof(sa));
    } while (rc < 0 && errno == EINTR);
    if (rc == 0) {
        *connected = 1;
        return fd;
    }
    if (errno == EINPROGRESS) return fd;
    int e = errno;
    close(fd);
    errno = e;
    return -1;
}

int pscom_tcp_connect_finish(int fd)
{
    int soerr     = 0;
    socklen_t len = sizeof(soerr);
    if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &len) < 0) return -1;
    if (soerr) {
        errno = soerr;
        return -1;
    }
    return 0;
}

unsigned pscom_tcp_retry_delay_ms(unsigned attempt)
{
    static unsigned seed;
    if (!seed) seed = (unsigned)getpid() * 2654435761u + 1;
    unsigned shift = attempt >= 2 ? attempt - 2 : 0;
    unsigned ms    = shift >= 10 ? 1000 : 1u << shift;
    if (ms > 1000) ms = 1000;
    unsigned jitter = ms / 4 ? (unsigned)rand_r(&seed) % (ms / 4 + 1) : 0;
    return ms + jitter;
}

const char *pscom_fd_limit_str(int err, char *buf, size_t len)
{
    buf[0] = 0;
    if (err == EMFILE) {
        struct rlimit rl;
        if (getrlimit(RLIMIT_NOFILE, &rl) == 0) {
            snprintf(buf, len, "per-process limit RLIMIT_NOFILE = %llu (ulimit -n)",
                     (unsigned long long)rl.rlim_cur);
        } else {
            snprintf(buf, len, "per-process limit RLIMIT_NOFILE (ulimit -n)");
        }
    } else if (err == ENFILE) {
        snprintf(buf, len, "system-wide limit fs.file-max");
    }
    return buf;
}
