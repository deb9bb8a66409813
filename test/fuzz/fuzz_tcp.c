/*
 * fuzz_tcp.c - see fuzz_tcp.h.
 */
#include "fuzz_tcp.h"

#include <arpa/inet.h>
#include <endian.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "fuzz_driver.h" /* FUZZ_CHECK */
#include "fuzz_handshake.h"
#include "pscom_sock.h"
#include "tu_sys.h"

pscom_socket_t *fuzz_tcp_pscom_socket(const char *name)
{
    setenv("PSP_DEBUG", "0", 0); /* the handshake errors by the thousand */
    setenv("PSP_UCP", "0", 1);   /* ucp and openib: their blobs have tests of their own */
    setenv("PSP_OPENIB", "0", 1);
    /* an shm accept or offer creates its ring (fully allocated): the smallest one */
    setenv("PSP_SHM_RING_SIZE", "16384", 1);
    if (pscom_init(PSCOM_VERSION) != PSCOM_SUCCESS) abort();
    pscom_socket_t *s = pscom_open_socket(0, 0, 0, PSCOM_SOCK_FLAG_INTER_JOB);
    if (!s) abort();
    pscom_socket_set_name(s, name);
    if (pscom_listen(s, PSCOM_ANYPORT) != PSCOM_SUCCESS) abort();
    return s;
}

int fuzz_tcp_listen(int *port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) abort();
    struct sockaddr_in sa = {.sin_family = AF_INET};
    sa.sin_addr.s_addr    = htonl(INADDR_LOOPBACK);
    socklen_t sl          = sizeof(sa);
    if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(fd, 64) < 0 ||
        getsockname(fd, (struct sockaddr *)&sa, &sl) < 0)
        abort();
    *port = ntohs(sa.sin_port);
    return fd;
}

int fuzz_tcp_connect(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) abort();
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    sa.sin_addr.s_addr    = htonl(INADDR_LOOPBACK);
    if (tu_sys_connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) abort();
    /* pieces go out as they are sent: with Nagle a small one waits for the
     * acknowledgement of the one before, delayed up to 40 ms on loopback */
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    return fd;
}

pscom_connection_t *fuzz_tcp_ondemand(pscom_socket_t *s, int port, const char *name)
{
    char ep[64];
    snprintf(ep, sizeof(ep), "127.0.0.1:%d@%s", port, name);
    pscom_connection_t *c = pscom_open_connection(s);
    if (!c || pscom_connect(c, ep, 1, PSCOM_CON_FLAG_ONDEMAND) != PSCOM_SUCCESS) abort();
    return c;
}

pscom_request_t *fuzz_tcp_send_waiting(pscom_connection_t *c)
{
    static char msg[8] = "ondemand";
    pscom_request_t *r = pscom_request_create(0, 0);
    if (!r) abort();
    r->connection = c;
    r->data       = msg;
    r->data_len   = sizeof(msg);
    pscom_post_send(r);
    return r;
}

int fuzz_tcp_no_connection(pscom_socket_t *s)
{
    return pscom_list_empty(&pscom_sock_from_pub(s)->connections);
}

int fuzz_tcp_settled(pscom_socket_t *a, pscom_socket_t *b, unsigned passes)
{
    for (unsigned i = 0; i < passes; i++) {
        if (fuzz_tcp_no_connection(a) && fuzz_tcp_no_connection(b)) return 1;
        pscom_test_any();
    }
    return 0;
}

void fuzz_tcp_await_no_connection(pscom_socket_t *s)
{
    for (unsigned passes = 0; !fuzz_tcp_no_connection(s); passes++) {
        FUZZ_CHECK(passes <= FUZZ_TCP_PASSES && "closing leaves no connection");
        pscom_test_any();
    }
}

void fuzz_tcp_await_done(pscom_request_t *r)
{
    if (!r) return;
    for (unsigned passes = 0; !pscom_req_is_done(r); passes++) {
        FUZZ_CHECK(passes <= FUZZ_TCP_PASSES && "a waiting send ends");
        pscom_test_any();
    }
    pscom_request_free(r);
}

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

int (*fuzz_tcp_end_after)(void);

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
            if ((flags & 128) && done[i] == size[i]) continue; /* closed before it is read */
            for (int k = 0; k < 4; k++) pscom_test_any(); /* the pscom side takes the piece */
        }
    }
    for (unsigned passes = 0; fuzz_tcp_end_after && !fuzz_tcp_end_after(); passes++) {
        FUZZ_CHECK(passes <= FUZZ_TCP_PASSES && "the pscom side takes the handshake");
        pscom_test_any();
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
