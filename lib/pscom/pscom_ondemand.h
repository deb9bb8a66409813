/*
 * pscom_ondemand.h - on-demand connections (spec 1.6 / 5.7).
 *
 * pscom_connect(ONDEMAND) makes the connection usable at once (state RW,
 * type ONDEMAND) without connecting. The first send starts the real
 * connect: the side whose socket name is lower (memcmp of the 8 bytes)
 * connects; the other side asks it to connect back (a short handshake
 * with the BACKCONNECT flag). The accepting side adopts its own on-demand
 * connection object for the peer's name, so both ends keep the objects the
 * user created; an on-demand connect without a matching object is refused.
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

/* Start the real connection now (first write, or the peer asked us). */
void pscom_ondemand_connect(pscom_con_t *con);

/* The socket's not yet connected on-demand connection to the peer named
 * name, or NULL. */
pscom_con_t *pscom_ondemand_find(pscom_sock_t *sock, const char name[8]);

/* The socket's on-demand connection to the peer named name, waiting,
 * connecting or connected; NULL if there is none. */
pscom_con_t *pscom_ondemand_find_peer(pscom_sock_t *sock, const char name[8]);

/* Does the socket have on-demand connections still waiting to connect? */
int pscom_ondemand_pending(pscom_sock_t *sock);

#endif /* PSCOM_ONDEMAND_H */
