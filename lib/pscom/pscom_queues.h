/*
 * pscom_queues.h - matching of USER messages to receives (spec 5.3):
 * posted receives per connection, per socket (any-source) and global,
 * and unexpected ("generated") requests.
 */
#ifndef PSCOM_QUEUES_H
#define PSCOM_QUEUES_H

#include "pscom_types.h"

/* A USER message header arrived on con; hn points to the header followed by
 * its whole xheader (valid during the call). Returns the request receiving
 * it: default_recv's, a posted one (dequeued), or a new unexpected one.
 * NULL only if an unexpected request cannot be allocated. Sets IO_STARTED,
 * TRUNCATED, copies header+xheader, connection and socket.
 * rndv: the message is a rendezvous request (hn->data_len is the real
 * length): an unexpected one stores only the request, not the data; a
 * matched receive must then be handed to pscom_rndv_matched(). */
struct pscom_rndv_rts;
pscom_req_t *pscom_match_incoming(pscom_con_t *con, pscom_header_net_t *hn,
                                  const struct pscom_rndv_rts *rndv);

/* Post a receive (pscom_post_recv after checks). May complete at once. */
void pscom_recv_post(pscom_req_t *req);

/* Cancel a posted, not yet matched receive. Returns 1 if it was dequeued. */
int pscom_recv_cancel(pscom_req_t *req);

/* Find an unexpected message for a probe request (no dequeue). */
pscom_req_t *pscom_unexpected_find(pscom_request_t *request);

/* Connection closing: drop its unexpected messages (the sender of a
 * rendezvous announcement among them is told: pscom_rndv_decline). */
void pscom_unexpected_drop_con(pscom_con_t *con);
/* Fail (ERROR) the posted receives of the connection, also parked ones. */
void pscom_recv_fail_con(pscom_con_t *con);
/* Fail the socket's any-source receives (socket close). */
void pscom_recv_fail_sock(pscom_sock_t *sock);
/* Fail the global any-source receives (library cleanup). */
void pscom_recv_fail_global(void);

/* An unexpected request's message is complete. */
void pscom_unexpected_done(pscom_req_t *gen);

/* The short way of pscom_read_msg(): con's first posted receive, matched
 * and dequeued, if pscom_match_incoming() would take it for this USER
 * message without asking anyone (no default_recv, no recv_accept, no internal
 * on_done); else
 * NULL and nothing changed. */
pscom_req_t *pscom_match_first_posted(pscom_con_t *con, pscom_header_net_t *hn, size_t xlen,
                                      uint64_t dlen);

#endif /* PSCOM_QUEUES_H */
