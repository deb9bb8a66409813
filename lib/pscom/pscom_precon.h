/*
 * pscom_precon.h - the pre-connection handshake over TCP: protocol
 * version exchange, then transport negotiation by priority (see
 * doc/wire-protocol.md). Runs in the progress engine, never blocks: the
 * TCP connect is non-blocking, refused/reset/timed-out attempts are
 * retried after a back-off timer (PSP_RETRY), and a watchdog restarts a
 * connect that moves no byte for PSP_PRECON_TCP_RECONNECT_TIMEOUT x
 * PSP_PRECON_TCP_CONNECT_STALLED_MAX ms (accept side: closes it).
 */
#ifndef PSCOM_PRECON_H
#define PSCOM_PRECON_H

#include <stdint.h>

#include "pscom_types.h"

/* Connecting side: connect con to the listener at addr:port (IPv4, host
 * order) and run the handshake; the connection must be CONNECTING or
 * CONNECTING_ONDEMAND. flags: PSCOM_PRECON_FLAG_* of our HELLO.
 * direct_err (may be NULL): if the connect finally fails before the peer
 * ever answered, *direct_err gets the errno (pscom_connect(DIRECT)
 * returns an error then, spec 3.7 #10); it must stay valid until the
 * connection leaves the connecting state. On failure the connection is
 * failed through pscom_con_setup_failed(). Returns -1 if it already failed
 * synchronously (con may be gone if library-owned), else 0. */
int pscom_precon_connect_to(pscom_con_t *con, uint32_t addr, int port, uint32_t flags,
                            int *direct_err);

/* Ask the listener at addr:port to connect back to the waiting on-demand
 * connection owner (a short handshake with the BACKCONNECT flag on a
 * library-owned connection). The outcome is reported to
 * pscom_ondemand_backconnect_done(). */
void pscom_precon_backconnect_to(pscom_con_t *owner, uint32_t addr, int port);
/* End the back-connect requests still in flight whose connection no longer
 * waits (connected, failed or closed by the user): a peer that is silent
 * would keep them, their sockets and the connection until their stall
 * window ran out. Each drops its reference to its connection, which may be
 * released then (pscom_sock_ondemand_changed()). */
void pscom_precon_backconnect_sweep(pscom_sock_t *sock);

/* Accepting side: fd came from accept(). The connection is ACCEPTING. */
int pscom_precon_accept(pscom_con_t *con, int fd);

/* Stop a handshake (local close, socket close): the connection fails. */
void pscom_precon_abort(pscom_precon_t *pre);

/* Handshakes running, of connections listed or not (a DIRECT connect's
 * connection is listed only once connected): deadlock detection. */
unsigned pscom_precon_running(void);

#endif /* PSCOM_PRECON_H */
