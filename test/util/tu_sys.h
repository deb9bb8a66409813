/*
 * tu_sys.h - system calls as the tests need them, going on after a signal
 * (EINTR): the unit tests, the integration tests' harness and the fuzz
 * targets alike (header only, as tu_text.h). An application's signal
 * handler may interrupt any of them; the library is checked under a signal
 * every 200 us (doc/architecture.md, *Progress and waiting*), and so must
 * the tests' own calls hold.
 */
#ifndef PSCOM_TU_SYS_H
#define PSCOM_TU_SYS_H

#include <errno.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

/* waitpid(pid, st, 0) */
static inline pid_t tu_sys_waitpid(pid_t pid, int *st)
{
    pid_t r;
    while ((r = waitpid(pid, st, 0)) < 0 && errno == EINTR) {
    }
    return r;
}

/* A blocking connect(); an interrupted one goes on in the kernel and is
 * waited for. 0, or -1 with errno. */
static inline int tu_sys_connect(int fd, const struct sockaddr *sa, socklen_t len)
{
    if (connect(fd, sa, len) == 0) return 0;
    if (errno != EINTR) return -1;
    struct pollfd p = {.fd = fd, .events = POLLOUT};
    while (poll(&p, 1, -1) < 0) {
        if (errno != EINTR) return -1;
    }
    int err       = 0;
    socklen_t sl  = sizeof(err);
    if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &sl) < 0) return -1;
    if (err) {
        errno = err;
        return -1;
    }
    return 0;
}

/* Read len bytes, going on after short reads: len, fewer at EOF, or -1
 * with errno. */
static inline ssize_t tu_sys_read_all(int fd, void *buf, size_t len)
{
    unsigned char *p = (unsigned char *)buf;
    size_t done      = 0;
    while (done < len) {
        ssize_t n = read(fd, p + done, len - done);
        if (n < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        if (n == 0) break;
        done += (size_t)n;
    }
    return (ssize_t)done;
}

#endif /* PSCOM_TU_SYS_H */
