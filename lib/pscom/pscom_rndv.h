/*
 * pscom_rndv.h - the rendezvous protocol for large messages.
 *
 * The sender announces the message (RENDEZVOUS_REQ: the user's xheader
 * and {sender id, length, buffer address}); the receiver matches it like
 * any USER message, without buffering its data. Once a receive is
 * matched, the receiver either reads the data straight from the sender's
 * buffer (transports with PSCOM_PLUGIN_CAP_RNDV_READ) and answers with FIN,
 * or answers CTS {length it wants}, and the sender pushes the data as one
 * RENDEZVOUS_DATA message from the user's buffer into the user's buffer
 * (the byte stream pipelines it; nothing is buffered twice, and a
 * truncated tail is never sent).
 */
#ifndef PSCOM_RNDV_H
#define PSCOM_RNDV_H

#include "pscom_types.h"

struct pscom_rndv_rts;

/* Send req (a posted USER send) with rendezvous on con. */
void pscom_rndv_send(pscom_con_t *con, pscom_req_t *req);

/* A RENDEZVOUS_* message header is at hn (xheader follows): set *req to
 * the request receiving its data (NULL: drop it). <0: malformed. */
int pscom_rndv_recv(pscom_con_t *con, pscom_header_net_t *hn, pscom_req_t **req);

/* The user's receive req matched a rendezvous request. */
void pscom_rndv_matched(pscom_con_t *con, pscom_req_t *req, const struct pscom_rndv_rts *rts);

/* FIN status of an announcement the receiver dropped (local close). */
#define PSCOM_RNDV_FIN_DROPPED 1

/* The announcement rts of con is dropped unmatched (a local close): tell
 * the sender with a FIN of status PSCOM_RNDV_FIN_DROPPED, so that its send
 * ends with ERROR and a deferred EOF of its side goes out. Only while con
 * can still send (returns 1 then): once our EOF is queued the sender's
 * send fails at it anyway. */
int pscom_rndv_decline(pscom_con_t *con, const struct pscom_rndv_rts *rts);

/* The connection failed: end its pending rendezvous sends and receives. */
void pscom_rndv_fail_con(pscom_con_t *con);

#endif /* PSCOM_RNDV_H */
