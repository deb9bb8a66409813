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
 *            bit 7:    the last piece goes without progress: the server reads it
 *                      only after the client closes or shuts down
 *   rest     the client's bytes; 4 bytes anywhere that read FUZZ_NODE_MARK
 *            become the server's node id (a HELLO from the same node lets
 *            shm accept an offer)
 *
 * The client is a plain TCP socket of this process, the server a socket
 * listening on port 0 with the built-in transports (tcp, shm; ucp and
 * openib off: their blobs have tests of their own). What must hold (else
 * abort()): no memory error, and once the client's bytes ended (EOF) the
 * server closes its side within FUZZ_TCP_PASSES passes of progress,
 * whatever state the bytes left the handshake or the connection in. A
 * connection the server accepted is closed by the harness afterwards.
 *
 * Built twice: with libFuzzer (PSCOM_FUZZ, clang) and with
 * fuzz_precon_gen.c and fuzz_driver.c as the ctest test fuzz_precon.
 */
#include "fuzz_precon.h"

#include <stdlib.h>
#include <unistd.h>

#include "fuzz_tcp.h"
#include "pscom.h"

static pscom_socket_t *server;
static int server_port;
static unsigned accepted;

static void on_accept(pscom_connection_t *con)
{
    accepted++;
}

static void server_open(void)
{
    server                 = fuzz_tcp_pscom_socket("fuzzsrv");
    server->ops.con_accept = on_accept;
    server_port            = pscom_get_portno(server);
}

unsigned fuzz_precon_accepted(void)
{
    return accepted;
}

static void close_accepted(void)
{
    pscom_connection_t *c;
    while ((c = pscom_get_next_connection(server, NULL)) != NULL) pscom_close_connection(c);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1) return 0;
    if (!server) server_open();
    uint8_t *bytes = fuzz_node_marks_replaced(data + 1, size - 1);
    int fd         = fuzz_tcp_play(fuzz_tcp_connect(server_port), bytes, size - 1, data[0]);

    /* the server must notice the end and close its side */
    if (fd >= 0) {
        for (unsigned passes = 0; !fuzz_tcp_closed(fd); passes++) {
            if (passes > FUZZ_TCP_PASSES) abort(); /* left hanging */
            pscom_test_any();
        }
        close(fd);
    }
    for (int i = 0; i < 4; i++) pscom_test_any(); /* a close seen late */
    close_accepted();
    free(bytes);
    return 0;
}
