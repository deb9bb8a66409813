/*
 * fuzz_connect.c - the connect side of the handshake against any bytes the
 * peer it connects to answers with.
 *
 * One input is two bytes of set-up and the peer's bytes:
 *
 *   byte 0   bits 0-5: the bytes go in pieces of this many + 1, the
 *                      client progressing between them (63: all at once)
 *            bit 6:    the peer closes instead of shutting down writing
 *            bit 7:    the last piece goes without progress: the client reads it
 *                      only after the peer closes or shuts down
 *   byte 1   what connects, modulo 3 (FUZZ_CONNECT_*):
 *            0 a plain connect;
 *            1 an on-demand connection with a send waiting, to a peer of a
 *              higher name ("zzzzzzz"): the client connects, with the
 *              ONDEMAND flag;
 *            2 the same to a peer of a lower name ("aaaaaaa"): the client
 *              asks it to connect back (a back-connect request)
 *   rest     the peer's bytes; 4 bytes anywhere that read FUZZ_NODE_MARK
 *            become the client's node id (the peer then is on the same
 *            node, and shm is offered first)
 *
 * The peer is a plain TCP socket of this process that listens on port 0;
 * the client a pscom socket with the built-in transports (tcp, shm; ucp and
 * openib off) and without retries (PSP_RETRY=0). The peer accepts, sends
 * the bytes, then ends. What must hold (else FUZZ_CHECK aborts): no memory
 * error; once the peer's bytes ended the client is done with the handshake
 * and closes its side within FUZZ_TCP_PASSES passes of progress, whatever
 * state the bytes left it in (failed, or connected over tcp and then
 * failed); closing the connection then leaves the socket without any, and
 * the waiting send ends.
 *
 * Built twice: with libFuzzer (PSCOM_FUZZ, clang) and with
 * fuzz_connect_gen.c and fuzz_driver.c as the ctest test fuzz_connect.
 */
#define _GNU_SOURCE /* accept4 */
#include "fuzz_connect.h"

#include <errno.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include "fuzz_driver.h" /* FUZZ_CHECK */
#include "fuzz_tcp.h"
#include "pscom.h"
#include "pscom_con.h"
#include "pscom_core.h"
#include "pscom_precon.h"
#include "pscom_sock.h"

static pscom_socket_t *client;
static int peer_fd = -1, peer_port;
static fuzz_connect_counts_t counts;

static void client_open(void)
{
    setenv("PSP_RETRY", "0", 1); /* one attempt: the peer answers once */
    /* listening: on-demand connections need a way back for the peer */
    client  = fuzz_tcp_pscom_socket("fuzzcli");
    peer_fd = fuzz_tcp_listen(&peer_port);
}

fuzz_connect_counts_t fuzz_connect_counts(void)
{
    return counts;
}

/* the peer's side of the connection, once the client's connect arrived */
static int peer_accept(void)
{
    for (unsigned passes = 0;; passes++) {
        int fd = accept4(peer_fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (fd >= 0) return fd;
        if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) abort();
        FUZZ_CHECK(passes <= FUZZ_TCP_PASSES && "the client connects");
        pscom_test_any();
    }
}

/* the client's connection in mode; *send: its waiting send, if any */
static pscom_connection_t *client_connect(unsigned mode, pscom_request_t **send)
{
    *send = NULL;
    if (mode != FUZZ_CONNECT_PLAIN) {
        pscom_connection_t *c = fuzz_tcp_ondemand(
            client, peer_port, mode == FUZZ_CONNECT_ONDEMAND ? "zzzzzzz" : "aaaaaaa");
        *send = fuzz_tcp_send_waiting(c); /* starts the connect or the request */
        return c;
    }
    pscom_connection_t *c = pscom_open_connection(client);
    if (!c) abort();
    pscom_con_t *con = pscom_con_from_pub(c);
    pscom_lock();
    con->pub.state = PSCOM_CON_STATE_CONNECTING;
    pscom_precon_connect_to(con, INADDR_LOOPBACK, peer_port, 0, NULL);
    pscom_unlock();
    return c;
}

/* a handshake of the socket goes on (a back-connect request has a
 * connection of its own) */
static int handshaking(pscom_sock_t *sock)
{
    pscom_list_t *pos;
    pscom_list_for_each(pos, &sock->connections) {
        if (pscom_list_entry(pos, pscom_con_t, sock_next)->precon) return 1;
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2) return 0;
    if (!client) client_open();
    unsigned mode  = data[1] % 3;
    uint8_t *bytes = fuzz_node_marks_replaced(data + 2, size - 2);
    pscom_request_t *send;
    pscom_connection_t *c = client_connect(mode, &send);

    int fd = fuzz_tcp_play(peer_accept(), bytes, size - 2, data[0]);

    /* the client must notice the end, finish the handshake and close */
    pscom_sock_t *sock = pscom_sock_from_pub(client);
    for (unsigned passes = 0; handshaking(sock) || (fd >= 0 && !fuzz_tcp_closed(fd)); passes++) {
        FUZZ_CHECK(passes <= FUZZ_TCP_PASSES && "the client ends the handshake and closes");
        pscom_test_any();
    }
    if (fd >= 0) close(fd);
    if (c->type == PSCOM_CON_TYPE_TCP) counts.connected++;
    if (c->type == PSCOM_CON_TYPE_ONDEMAND && c->state == PSCOM_CON_STATE_RW) counts.waiting++;

    pscom_close_connection(c);
    fuzz_tcp_await_no_connection(client);
    fuzz_tcp_await_done(send);
    free(bytes);
    return 0;
}
