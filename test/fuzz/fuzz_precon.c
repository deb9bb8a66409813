/*
 * fuzz_precon.c - the accept side of the handshake against any bytes a
 * client sends to a listening pscom socket: anyone who can reach the port
 * can send them.
 *
 * One input is a byte of set-up and the client's bytes:
 *
 *   byte 0   bits 0-5: the bytes go in pieces of this many + 1, the
 *                      server progressing between them (63: all at once)
 *            bit 6:    the client closes instead of shutting down writing
 *   rest     the client's bytes; 4 bytes anywhere that read FUZZ_NODE_MARK
 *            become the server's node id (a HELLO from the same node lets
 *            shm accept an offer)
 *
 * The client is a plain TCP socket of this process, the server a socket
 * listening on port 0 with the built-in transports (tcp, shm; ucp and
 * openib off: their blobs have tests of their own). What must hold (else
 * abort()): no memory error, and once the client's bytes ended (EOF) the
 * server closes its side within FUZZ_PRECON_PASSES passes of progress,
 * whatever state the bytes left the handshake or the connection in. A
 * connection the server accepted is closed by the harness afterwards.
 *
 * Built twice: with libFuzzer (PSCOM_FUZZ, clang) and with
 * fuzz_precon_gen.c and fuzz_driver.c as the ctest test fuzz_precon.
 */
#include "fuzz_precon.h"

#include <arpa/inet.h>
#include <endian.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "pscom.h"

#define FUZZ_PRECON_PASSES 200000

static pscom_socket_t *server;
static int server_port;
static unsigned accepted;

static void on_accept(pscom_connection_t *con)
{
    accepted++;
}

static void server_open(void)
{
    setenv("PSP_DEBUG", "0", 0); /* the handshake errors by the thousand */
    setenv("PSP_UCP", "0", 1);
    setenv("PSP_OPENIB", "0", 1);
    if (pscom_init(PSCOM_VERSION) != PSCOM_SUCCESS) abort();
    server = pscom_open_socket(0, 0, 0, PSCOM_SOCK_FLAG_INTER_JOB);
    if (!server) abort();
    pscom_socket_set_name(server, "fuzzsrv");
    server->ops.con_accept = on_accept;
    if (pscom_listen(server, PSCOM_ANYPORT) != PSCOM_SUCCESS) abort();
    server_port = pscom_get_portno(server);
}

unsigned fuzz_precon_accepted(void)
{
    return accepted;
}

static int client_connect(void)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) abort();
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)server_port)};
    sa.sin_addr.s_addr    = htonl(INADDR_LOOPBACK);
    /* the listen queue takes it; the server accepts during progress */
    if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) abort();
    return fd;
}

/* Read and drop what the server sent. Returns 1 once it closed its side. */
static int server_closed(int fd)
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

/* Send len bytes, progressing the server while its buffers are full.
 * Returns 0, or -1 if the server closed meanwhile. */
static int client_send(int fd, const uint8_t *p, size_t len)
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
        if (++stuck > FUZZ_PRECON_PASSES) abort(); /* the server reads nothing */
        pscom_test_any();
    }
    return 0;
}

static void close_accepted(void)
{
    pscom_connection_t *c;
    while ((c = pscom_get_next_connection(server, NULL)) != NULL) pscom_close_connection(c);
}

/* a copy of the client's bytes with FUZZ_NODE_MARK replaced */
static uint8_t *node_marks_replaced(const uint8_t *data, size_t size)
{
    uint8_t *b = malloc(size ? size : 1);
    if (!b) abort();
    memcpy(b, data, size);
    uint32_t mark = htole32(FUZZ_NODE_MARK), node = htole32((uint32_t)pscom_get_nodeid());
    for (size_t k = 0; k + 4 <= size; k++)
        if (!memcmp(b + k, &mark, 4)) memcpy(b + k, &node, 4);
    return b;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1) return 0;
    if (!server) server_open();
    unsigned flags = data[0];
    size_t step    = (flags & 63) == 63 ? (size_t)-1 : (size_t)(flags & 63) + 1;
    uint8_t *bytes = node_marks_replaced(data + 1, size - 1);
    data           = bytes;
    size--;

    int fd = client_connect();
    for (size_t done = 0; done < size;) {
        size_t n = size - done < step ? size - done : step;
        if (client_send(fd, data + done, n) < 0) break;
        done += n;
        for (int i = 0; i < 4; i++) pscom_test_any(); /* the server takes the piece */
    }
    if (flags & 64) {
        close(fd);
        fd = -1;
    } else {
        shutdown(fd, SHUT_WR);
    }

    /* the server must notice the end and close its side */
    unsigned passes = 0;
    if (fd >= 0) {
        while (!server_closed(fd)) {
            if (++passes > FUZZ_PRECON_PASSES) abort(); /* left hanging */
            pscom_test_any();
        }
        close(fd);
    }
    for (int i = 0; i < 4; i++) pscom_test_any(); /* a close seen late */
    close_accepted();
    free(bytes);
    return 0;
}
