/*
 * fuzz_connect.c - the connect side of the handshake against any bytes the
 * peer it connects to answers with.
 *
 * One input is a byte of set-up and the peer's bytes:
 *
 *   byte 0   bits 0-5: the bytes go in pieces of this many + 1, the
 *                      client progressing between them (63: all at once)
 *            bit 6:    the peer closes instead of shutting down writing
 *   rest     the peer's bytes; 4 bytes anywhere that read FUZZ_NODE_MARK
 *            become the client's node id (the peer then is on the same
 *            node, and shm is offered first)
 *
 * The peer is a plain TCP socket of this process that listens on port 0;
 * the client a pscom connection that connects to it with the built-in
 * transports (tcp, shm; ucp and openib off) and without retries
 * (PSP_RETRY=0). The peer accepts, sends the bytes, then ends. What must
 * hold (else abort()): no memory error, and once the peer's bytes ended
 * the client is done with the handshake and closes its side within
 * FUZZ_TCP_PASSES passes of progress, whatever state the bytes left it
 * in (failed, or connected over tcp and then failed).
 *
 * Built twice: with libFuzzer (PSCOM_FUZZ, clang) and with
 * fuzz_connect_gen.c and fuzz_driver.c as the ctest test fuzz_connect.
 */
#define _GNU_SOURCE /* accept4 */
#include "fuzz_connect.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "fuzz_tcp.h"
#include "pscom.h"
#include "pscom_con.h"
#include "pscom_core.h"
#include "pscom_precon.h"

static pscom_socket_t *client;
static int peer_fd = -1, peer_port;
static unsigned connected;

static void client_open(void)
{
    setenv("PSP_DEBUG", "0", 0); /* the handshake errors by the thousand */
    setenv("PSP_UCP", "0", 1);
    setenv("PSP_OPENIB", "0", 1);
    setenv("PSP_RETRY", "0", 1); /* one attempt: the peer answers once */
    /* an shm offer creates its ring (fully allocated): the smallest one */
    setenv("PSP_SHM_RING_SIZE", "16384", 1);
    if (pscom_init(PSCOM_VERSION) != PSCOM_SUCCESS) abort();
    client = pscom_open_socket(0, 0, 0, PSCOM_SOCK_FLAG_INTER_JOB);
    if (!client) abort();
    pscom_socket_set_name(client, "fuzzcli");

    peer_fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (peer_fd < 0) abort();
    struct sockaddr_in sa = {.sin_family = AF_INET};
    sa.sin_addr.s_addr    = htonl(INADDR_LOOPBACK);
    socklen_t sl          = sizeof(sa);
    if (bind(peer_fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(peer_fd, 16) < 0 ||
        getsockname(peer_fd, (struct sockaddr *)&sa, &sl) < 0)
        abort();
    peer_port = ntohs(sa.sin_port);
}

unsigned fuzz_connect_connected(void)
{
    return connected;
}

/* the peer's side of the connection, once the client's connect arrived */
static int peer_accept(void)
{
    for (unsigned passes = 0;; passes++) {
        int fd = accept4(peer_fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (fd >= 0) return fd;
        if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) abort();
        if (passes > FUZZ_TCP_PASSES) abort(); /* the client never connected */
        pscom_test_any();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1) return 0;
    if (!client) client_open();
    uint8_t *bytes = fuzz_node_marks_replaced(data + 1, size - 1);

    pscom_connection_t *c = pscom_open_connection(client);
    if (!c) abort();
    pscom_con_t *con = pscom_con_from_pub(c);
    pscom_lock();
    con->pub.state = PSCOM_CON_STATE_CONNECTING;
    pscom_precon_connect_to(con, INADDR_LOOPBACK, peer_port, 0, NULL);
    pscom_unlock();

    int fd = fuzz_tcp_play(peer_accept(), bytes, size - 1, data[0]);

    /* the client must notice the end, finish the handshake and close */
    for (unsigned passes = 0; con->precon || (fd >= 0 && !fuzz_tcp_closed(fd)); passes++) {
        if (passes > FUZZ_TCP_PASSES) abort(); /* left hanging */
        pscom_test_any();
    }
    if (fd >= 0) close(fd);
    if (c->type == PSCOM_CON_TYPE_TCP) connected++;
    pscom_close_connection(c);
    free(bytes);
    return 0;
}
