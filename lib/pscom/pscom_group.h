/*
 * pscom_group.h - groups, broadcast and barrier (spec 1.8).
 *
 * A group is an array of connections, one per member (self included).
 * Broadcasts run over a tree of fan-out 3 rooted at the broadcast's root;
 * barriers are dissemination barriers (log2 rounds). Both use their own
 * message types (BCAST, BARRIER) and their own queues, never user
 * messages; a broadcast or barrier message that arrives before anyone
 * waits for it is kept until its group asks for it.
 */
#ifndef PSCOM_GROUP_H
#define PSCOM_GROUP_H

#include "pscom_types.h"

/* A BCAST or BARRIER message header is at hn: set *req to the request
 * receiving it. <0: malformed. */
int pscom_group_recv(pscom_con_t *con, pscom_header_net_t *hn, pscom_req_t **req);

/* The connection failed: its waiting broadcast/barrier receives fail. */
void pscom_group_fail_con(pscom_con_t *con);

/* The user closed the connection: the collective messages it brought that
 * nobody has taken yet are dropped (spec 5.7, as its unexpected messages). */
void pscom_group_drop_con(pscom_con_t *con);

/* Socket close: free its groups and queued collective messages. */
void pscom_group_sock_fini(pscom_sock_t *sock);

#endif /* PSCOM_GROUP_H */
