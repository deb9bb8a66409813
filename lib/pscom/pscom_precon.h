/*
 * pscom_precon.h - the pre-connection handshake over TCP: protocol
 * version exchange, then transport negotiation by priority (see
 * doc/wire-protocol.md). Runs in the progress engine, never blocks.
 */
#ifndef PSCOM_PRECON_H
#define PSCOM_PRECON_H

#include "pscom_types.h"

/* Connecting side: fd is a TCP socket whose connect() completed or is in
 * progress (non-blocking). The connection is CONNECTING. */
int pscom_precon_connect(pscom_con_t *con, int fd);
/* Same with HELLO flags (PSCOM_PRECON_FLAG_ONDEMAND). */
int pscom_precon_connect_flags(pscom_con_t *con, int fd, uint32_t flags);
/* Ask the peer behind fd to connect back to the on-demand connection
 * owner (which stays waiting); a refusal fails owner. */
void pscom_precon_backconnect(pscom_con_t *owner, int fd);
/* Accepting side: fd came from accept(). The connection is ACCEPTING. */
int pscom_precon_accept(pscom_con_t *con, int fd);
/* Stop a handshake (local close, socket close): the connection fails. */
void pscom_precon_abort(pscom_precon_t *pre);

#endif /* PSCOM_PRECON_H */
