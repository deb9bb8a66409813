/*
 * fuzz_ondemand.c - the on-demand part of the accept side of the handshake
 * against any bytes up to two clients send at once: a peer that connects
 * for an on-demand connection (the server adopts it), asks the server to
 * connect back, or races itself with two attempts.
 *
 * The server listens on port 0 with the built-in transports (tcp, shm;
 * ucp and openib off) and has two on-demand connections, made fresh for
 * each input, to peers the clients may name in their HELLO:
 *   "fuzzcli"  a lower name than the server's ("fuzzsrv"): that peer
 *              connects, the server waits for it (adopts its connect);
 *   "fuzzzzz"  a higher one: the server connects to it itself.
 * Their listener is a plain TCP socket of the harness (the sink) that
 * never answers: a connect or back-connect request the server starts
 * towards them stays in its handshake until the connection is closed.
 *
 * One input:
 *   byte 0    bits 0-5: the bytes go in pieces of this many + 1, one of
 *                       each client in turn, the server progressing
 *                       between them (63: all at once)
 *             bit 6:    the clients close instead of shutting down writing
 *             bit 7:    the last piece goes without progress: the server reads it
 *                       only after the clients close or shut down
 *   byte 1    bit 0:    a send waits on "fuzzcli" from the start (the
 *                       server asks the peer to connect back)
 *             bit 1:    a send waits on "fuzzzzz" (the server connects)
 *             bit 2:    afterwards, if "fuzzcli" still waits, a valid
 *                       on-demand handshake from a third client must
 *                       connect it over tcp
 *   byte 2-3  n, little endian: the first client's bytes are the next n
 *             (at most what is left), the second client's the rest (none:
 *             one client)
 * FUZZ_NODE_MARK anywhere in the clients' bytes becomes the server's node id.
 *
 * What must hold (else FUZZ_CHECK aborts): no memory error; once the clients' bytes
 * ended, the server closes its side of each within FUZZ_TCP_PASSES passes
 * of progress, and neither on-demand connection is left in an accepting
 * handshake; a waiting "fuzzcli" can still be connected (bit 2); closing
 * the two and every connection the server accepted (at most one per
 * client) leaves the socket without any, also of its own (a back-connect
 * request to the silent sink), and the waiting sends end.
 *
 * Built twice: with libFuzzer (PSCOM_FUZZ, clang) and with
 * fuzz_ondemand_gen.c and fuzz_driver.c as the ctest test fuzz_ondemand.
 */
#define _GNU_SOURCE /* accept4 */
#include "fuzz_ondemand.h"

#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include "fuzz_driver.h" /* FUZZ_CHECK */
#include "fuzz_handshake.h"
#include "fuzz_tcp.h"
#include "pscom.h"
#include "pscom_con.h"
#include "pscom_core.h"

static pscom_socket_t *server;
static int server_port, sink_fd = -1, sink_port;
static fuzz_od_counts_t counts;
static pscom_connection_t *accepted[4]; /* by the server, this input */
static unsigned n_accepted;

static void on_accept(pscom_connection_t *con)
{
    FUZZ_CHECK(n_accepted < sizeof(accepted) / sizeof(accepted[0]) &&
               "no more connections than clients");
    accepted[n_accepted++] = con;
}

static void server_open(void)
{
    server                 = fuzz_tcp_pscom_socket("fuzzsrv");
    server->ops.con_accept = on_accept;
    server_port            = pscom_get_portno(server);
    sink_fd                = fuzz_tcp_listen(&sink_port);
}

fuzz_od_counts_t fuzz_ondemand_counts(void)
{
    return counts;
}

static pscom_connection_t *cur_cli; /* "fuzzcli" of the input being run */

int fuzz_ondemand_cli_tcp(void)
{
    return cur_cli && cur_cli->type == PSCOM_CON_TYPE_TCP;
}

/* the server must notice the end of each client and close its side */
static void await_closed(unsigned n, int fd[])
{
    for (unsigned i = 0; i < n; i++) {
        if (fd[i] < 0) continue;
        for (unsigned passes = 0; !fuzz_tcp_closed(fd[i]); passes++) {
            FUZZ_CHECK(passes <= FUZZ_TCP_PASSES && "the server closes its side");
            pscom_test_any();
        }
        close(fd[i]);
        fd[i] = -1;
    }
    for (int i = 0; i < 4; i++) pscom_test_any(); /* a close seen late */
}

/* in a handshake accepting a peer's connect (the server's own connect to
 * "fuzzzzz" towards the sink may go on) */
static int accepting(pscom_connection_t *c)
{
    return c->state == PSCOM_CON_STATE_ACCEPTING_ONDEMAND ||
           (c->state != PSCOM_CON_STATE_CONNECTING_ONDEMAND && pscom_con_from_pub(c)->precon);
}

/* A valid on-demand handshake from "fuzzcli" (tcp): it must connect the
 * waiting connection c. */
static void valid_ondemand_connect(pscom_connection_t *c)
{
    uint8_t hs[256];
    size_t len = fuzz_hs_valid_accept(hs, sizeof(hs), PSCOM_PRECON_FLAG_ONDEMAND, "fuzzcli");
    int (*end_after)(void) = fuzz_tcp_end_after;
    fuzz_tcp_end_after     = fuzz_ondemand_cli_tcp; /* the client stays until connected */
    int fd                 = fuzz_tcp_play(fuzz_tcp_connect(server_port), hs, len, 63);
    fuzz_tcp_end_after     = end_after;
    for (unsigned passes = 0; c->type != PSCOM_CON_TYPE_TCP; passes++) {
        FUZZ_CHECK(passes <= FUZZ_TCP_PASSES && "a valid handshake connects the waiting one");
        pscom_test_any();
    }
    counts.by_probe++;
    await_closed(1, &fd);
}

/* Close our two connections and every one the server accepted: the socket
 * must then hold none, before the sink answers anything (a request to
 * connect back is withdrawn by the close). Then drop what reached the sink. */
static void close_all(pscom_connection_t *cli, pscom_connection_t *zzz)
{
    pscom_close_connection(cli);
    pscom_close_connection(zzz);
    for (unsigned i = 0; i < n_accepted; i++) pscom_close_connection(accepted[i]);
    n_accepted = 0;
    fuzz_tcp_await_no_connection(server);
    int fd;
    while ((fd = accept4(sink_fd, NULL, NULL, SOCK_CLOEXEC)) >= 0) close(fd);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 4) return 0;
    if (!server) server_open();
    unsigned flags = data[0], setup = data[1];
    size_t first   = (size_t)data[2] | (size_t)data[3] << 8;
    uint8_t *bytes = fuzz_node_marks_replaced(data + 4, size - 4);
    if (first > size - 4) first = size - 4;

    pscom_connection_t *cli = fuzz_tcp_ondemand(server, sink_port, "fuzzcli");
    pscom_connection_t *zzz = fuzz_tcp_ondemand(server, sink_port, "fuzzzzz");
    cur_cli                 = cli;
    pscom_request_t *cli_send = (setup & FUZZ_OD_SEND_CLI) ? fuzz_tcp_send_waiting(cli) : NULL;
    pscom_request_t *zzz_send = (setup & FUZZ_OD_SEND_ZZZ) ? fuzz_tcp_send_waiting(zzz) : NULL;

    unsigned n = first < size - 4 ? 2 : 1; /* clients */
    int fd[2]  = {fuzz_tcp_connect(server_port), n > 1 ? fuzz_tcp_connect(server_port) : -1};
    const uint8_t *const b[] = {bytes, bytes + first};
    const size_t len[]       = {first, size - 4 - first};
    fuzz_tcp_play_n(n, fd, b, len, flags);
    await_closed(n, fd);

    /* a client that closed (bit 6) is seen by the server within a few passes */
    for (unsigned passes = 0; accepting(cli) || accepting(zzz); passes++) {
        FUZZ_CHECK(passes <= FUZZ_TCP_PASSES && "no handshake with a client that is gone");
        pscom_test_any();
    }
    if (zzz->state == PSCOM_CON_STATE_CONNECTING_ONDEMAND) counts.zzz_connecting++;
    int waits = cli->type == PSCOM_CON_TYPE_ONDEMAND && cli->state == PSCOM_CON_STATE_RW;
    if ((setup & FUZZ_OD_PROBE) && waits) valid_ondemand_connect(cli);
    if (cli->type == PSCOM_CON_TYPE_TCP) counts.cli_connected++;

    cur_cli = NULL;
    close_all(cli, zzz);
    fuzz_tcp_await_done(cli_send);
    fuzz_tcp_await_done(zzz_send);
    free(bytes);
    return 0;
}
