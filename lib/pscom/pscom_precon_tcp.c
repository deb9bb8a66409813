/*
 * pscom_precon_tcp.c - TCP connect with retries, socket tuning.
 */
#include "pscom_precon_tcp.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "pscom_config.h"
#include "pscom_log.h"

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

static int retryable(int e)
{
    return e == ECONNREFUSED || e == ECONNRESET || e == ETIMEDOUT || e == EAGAIN ||
           e == EINTR || e == ENETUNREACH || e == EHOSTUNREACH;
}

/* one attempt: 0 and *fdp, or -1 and errno */
static int connect_once(const struct sockaddr_in *sa, int timeout_ms, int *fdp)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    pscom_tcp_tune_precon(fd);
    if (connect(fd, (const struct sockaddr *)sa, sizeof(*sa)) < 0) {
        if (errno != EINPROGRESS) goto err;
        struct pollfd p = {.fd = fd, .events = POLLOUT};
        int n;
        do {
            n = poll(&p, 1, timeout_ms);
        } while (n < 0 && errno == EINTR);
        if (n == 0) {
            errno = ETIMEDOUT;
            goto err;
        }
        int soerr     = 0;
        socklen_t len = sizeof(soerr);
        if (n < 0 || getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &len) < 0) goto err;
        if (soerr) {
            errno = soerr;
            goto err;
        }
    }
    *fdp = fd;
    return 0;
err:;
    int e = errno;
    close(fd);
    errno = e;
    return -1;
}

int pscom_tcp_connect(uint32_t addr, int port)
{
    struct sockaddr_in sa = {.sin_family = AF_INET};
    sa.sin_addr.s_addr    = htonl(addr);
    sa.sin_port           = htons((uint16_t)port);
    unsigned timeout = pscom_config.precon_tcp_reconnect_timeout *
                       (pscom_config.precon_tcp_connect_stalled_max ? pscom_config.precon_tcp_connect_stalled_max : 1);
    if (!timeout || timeout > 600000) timeout = 600000;
    unsigned delay_ms = 1;

    for (unsigned attempt = 0;; attempt++) {
        int fd;
        if (connect_once(&sa, (int)timeout, &fd) == 0) return fd;
        int e = errno;
        if (!retryable(e) || attempt >= pscom_config.retry) {
            plog_dbg("connect to %s:%d failed after %u attempt(s): %m", inet_ntoa(sa.sin_addr),
                     port, attempt + 1);
            errno = e;
            return -1;
        }
        struct timespec ts = {.tv_sec = delay_ms / 1000, .tv_nsec = (long)(delay_ms % 1000) * 1000000L};
        nanosleep(&ts, NULL);
        delay_ms = delay_ms * 2 > 1000 ? 1000 : delay_ms * 2;
    }
}
