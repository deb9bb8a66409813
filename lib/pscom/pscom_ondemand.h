/*
 * pscom_ondemand.h - on-demand connections (spec 1.6 / 5.7).
 *
 * pscom_connect(ONDEMAND) makes the connection usable at once (state RW,
 * type ONDEMAND) without connecting. The first send starts the real
 * connect, without blocking: the side whose socket name is lower (memcmp
 * of the 8 bytes) connects with the ONDEMAND flag; the other side asks it
 * to connect back (a short handshake with the BACKCONNECT flag) and waits.
 * The accepting side adopts its own on-demand connection object for the
 * peer's name, so both ends keep the objects the user created; an
 * on-demand connect without a matching object is refused (the connecting
 * side retries that within PSP_RETRY, since the peer may not have created
 * its object yet).
 *
 * States of a connection with con->ondemand set:
 *   idle         od_started 0: nothing sent yet
 *   connecting   we connect: con->precon is a connect-side handshake
 *   requesting   we asked the peer to connect back (request in flight)
 *   awaiting     the peer promised to connect back; a timer of the stall
 *                window (RECONNECT_TIMEOUT x CONNECT_STALLED_MAX) repeats
 *                the request, at most PSP_RETRY times, then the
 *                connection fails with an error naming the limit
 *   accepting    the peer's connect adopted the object (con->precon is an
 *                accept-side handshake); if it fails, back to idle (and
 *                at once a new request if sends are queued)
 * con->ondemand is cleared when the transport starts, fails or the user
 * closes; pscom_sock_ondemand_changed() is called then.
 */
#ifndef PSCOM_ONDEMAND_H
#define PSCOM_ONDEMAND_H

#include "pscom_plugin.h"
#include "pscom_types.h"
#include "pscom_util.h"

/* the pseudo-transport of a not yet connected on-demand connection */
extern const pscom_plugin_desc_t pscom_ondemand_desc;

/* Make con an on-demand connection to ep. */
void pscom_ondemand_setup(pscom_con_t *con, const pscom_ep_t *ep);

/* Start the real connection now (first write, or the peer asked us).
 * No-op unless idle. Never blocks. */
void pscom_ondemand_connect(pscom_con_t *con);

/* The socket's waiting on-demand connection (any state above, not closed
 * by the user) to the peer named name, or NULL. */
pscom_con_t *pscom_ondemand_find(pscom_sock_t *sock, const char name[8]);

/* Like pscom_ondemand_find(), else the socket's connection to that peer
 * that was on demand and is connected or failed; NULL if none. */
pscom_con_t *pscom_ondemand_lookup(pscom_sock_t *sock, const char name[8]);

/* Is con still an on-demand connection nobody connected yet (idle,
 * requesting or awaiting; not connecting or accepting)? */
int pscom_ondemand_waiting(const pscom_con_t *con);

/* The peer's connect adopted con (it is accepting now). */
void pscom_ondemand_adopted(pscom_con_t *con);

/* An adopted handshake failed: con goes back to idle; queued sends start
 * a new connect at once. */
void pscom_ondemand_revert(pscom_con_t *con);

/* The back-connect request for owner ended: failed (err, errno set) or
 * answered with "will connect back". */
void pscom_ondemand_backconnect_done(pscom_con_t *owner, int failed, pscom_err_t err);

/* An on-demand connection of sock stopped being one (connected, failed,
 * closed): forget its waiting state and withdraw its back-connect requests
 * still in flight. */
void pscom_ondemand_sweep(pscom_sock_t *sock);

/* Does the socket have on-demand connections still waiting to connect? */
int pscom_ondemand_pending(pscom_sock_t *sock);

#endif /* PSCOM_ONDEMAND_H */
