/*
 * fuzz_tcp.c - see fuzz_tcp.h.
 */
#include "fuzz_tcp.h"

#include <endian.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "fuzz_handshake.h"
#include "pscom.h"

uint8_t *fuzz_node_marks_replaced(const uint8_t *data, size_t size)
{
    uint8_t *b = malloc(size ? size : 1);
    if (!b) abort();
    memcpy(b, data, size);
    uint32_t mark = htole32(FUZZ_NODE_MARK), node = htole32((uint32_t)pscom_get_nodeid());
    for (size_t k = 0; k + 4 <= size; k++)
        if (!memcmp(b + k, &mark, 4)) memcpy(b + k, &node, 4);
    return b;
}

int fuzz_tcp_closed(int fd)
{
    char buf[4096];
    for (;;) {
        ssize_t n = recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
        if (n > 0) continue;
        if (n == 0) return 1;
        if (errno == EINTR) continue;
        return errno != EAGAIN && errno != EWOULDBLOCK; /* ECONNRESET: closed */
    }
}

/* Send len bytes, progressing the pscom side while its buffers are full.
 * Returns 0, or -1 if it closed meanwhile. */
static int send_all(int fd, const uint8_t *p, size_t len)
{
    unsigned stuck = 0;
    while (len) {
        ssize_t n = send(fd, p, len, MSG_DONTWAIT | MSG_NOSIGNAL);
        if (n > 0) {
            p += n;
            len -= (size_t)n;
            stuck = 0;
            continue;
        }
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) return -1;
        if (++stuck > FUZZ_TCP_PASSES) abort(); /* the pscom side reads nothing */
        pscom_test_any();
    }
    return 0;
}

void fuzz_tcp_play_n(unsigned n, int fd[], const uint8_t *const bytes[], const size_t size[],
                     unsigned flags)
{
    size_t step = (flags & 63) == 63 ? (size_t)-1 : (size_t)(flags & 63) + 1;
    size_t done[FUZZ_TCP_MAX_PEERS] = {0};
    int more = 1;
    if (n > FUZZ_TCP_MAX_PEERS) abort();
    while (more) {
        more = 0;
        for (unsigned i = 0; i < n; i++) { /* a piece of each in turn */
            if (fd[i] < 0 || done[i] >= size[i]) continue;
            size_t len = size[i] - done[i] < step ? size[i] - done[i] : step;
            if (send_all(fd[i], bytes[i] + done[i], len) < 0) {
                done[i] = size[i]; /* the pscom side closed it */
                continue;
            }
            done[i] += len;
            more |= done[i] < size[i];
            for (int k = 0; k < 4; k++) pscom_test_any(); /* the pscom side takes the piece */
        }
    }
    for (unsigned i = 0; i < n; i++) {
        if (fd[i] < 0) continue;
        if (flags & 64) {
            close(fd[i]);
            fd[i] = -1;
        } else {
            shutdown(fd[i], SHUT_WR);
        }
    }
}

int fuzz_tcp_play(int fd, const uint8_t *bytes, size_t size, unsigned flags)
{
    fuzz_tcp_play_n(1, &fd, &bytes, &size, flags);
    return fd;
}
