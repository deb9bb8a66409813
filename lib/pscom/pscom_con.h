/*
 * pscom_con.h - private connection: queues, the receive parser state, the
 * transport in use and the close handshake.
 */
#ifndef PSCOM_CON_H
#define PSCOM_CON_H

#include "pscom_list.h"
#include "pscom_misuse.h"
#include "pscom_types.h"

#define PSCOM_CON_MAGIC 0x636f6e6eu /* "conn" */

struct pscom_plugin_desc;

/* Receive parser: a message header is read into buf (readahead); its data
 * goes straight into the receiving request's buffer. */
typedef struct pscom_con_in {
    char *buf;          /* readahead / header buffer */
    size_t cap, fill;   /* capacity and bytes held */
    pscom_req_t *req;   /* request receiving the current message's data, or NULL */
    size_t data_done;   /* data bytes of the current message consumed so far */
    size_t data_len;    /* data bytes of the current message */
    int skipping;       /* current message has no request (data is dropped) */
    /* pscom_read_pin(): the transport fills the buffer of req asynchronously
     * until its next pscom_read_done(). Until then req stays where it is: an
     * unexpected req that a receive matches or that is dropped meanwhile is
     * merged or freed at that read_done (pscom_io.c read_unpin). */
    int pinned;
    int pin_drop;           /* the pinned unexpected req was dropped (user close) */
    pscom_req_t *pin_merge; /* the receive that matched the pinned unexpected req */
} pscom_con_in_t;

struct pscom_con {
    uint32_t magic;
    pscom_list_t sock_next;     /* sock->connections */
    pscom_sock_t *sock;
    const struct pscom_plugin_desc *transport; /* in use, or during handshake */
    void *plugin_priv;          /* transport's per-connection state */
    pscom_precon_t *precon;     /* handshake in progress, else NULL */

    pscom_list_t sendq;         /* requests to send (req.next), FIFO */
    pscom_list_t recvq_user;    /* posted receives on this connection */
    pscom_list_t genrecvq;      /* unexpected messages (req.next) in arrival order */
    pscom_con_in_t in;
    pscom_list_t rndv_sends;    /* rendezvous sends waiting for the peer (req.next) */
    pscom_list_t rndv_recvs;    /* rendezvous receives waiting for data (req.next) */
    pscom_list_t rma_pending;   /* RMA reads/gets waiting for their answer (req.next) */
    size_t rendezvous_size;     /* sends of at least this many bytes use rendezvous */
    size_t rma_direct_size;     /* direct memory access (transport caps) from this size */

    unsigned listed : 1;        /* in sock->connections (visible to the user) */
    unsigned user_closed : 1;   /* pscom_close_connection() was called */
    unsigned eof_queued : 1;    /* our EOF message is in the send queue */
    unsigned eof_sent : 1;      /* ... and has left */
    unsigned eof_received : 1;  /* peer's EOF message arrived: no more reads */
    unsigned transport_closed : 1;
    unsigned connect_failed : 1;
    unsigned ondemand : 1;      /* on-demand: not connected yet */
    unsigned od_started : 1;    /* on-demand: the real connect was started */
    unsigned loop_busy : 1;     /* loopback: inside its write loop (re-entrancy guard) */
    unsigned eof_deferred : 1;  /* closed: EOF waits for pending rendezvous sends */
    uint32_t od_addr;           /* on-demand: peer listener */
    int od_port;
    int refcnt;                 /* pending con_error callbacks, target-side RMA requests */
    unsigned cb_running;        /* con_accept/con_error callbacks running now */
    pscom_connection_t pub;     /* must be last */
};

static inline pscom_con_t *pscom_con_from_pub(pscom_connection_t *connection)
{
    return pscom_container_of(connection, pscom_con_t, pub);
}

/* API entry (pscom_misuse.h): a connection of pscom_open_connection(), not
 * gone (a closed one stays until its close has ended) */
#define pscom_api_check_con(c)                                                   \
    pscom_api_check((c) && pscom_con_from_pub(c)->magic == PSCOM_CON_MAGIC, \
                    "a connection of pscom_open_connection(), not closed")
/* ... of a send: the same, said as the spec says it */
#define pscom_api_check_send_con(c)                                              \
    pscom_api_check((c) && pscom_con_from_pub(c)->magic == PSCOM_CON_MAGIC, \
                    "a send needs a connection (of pscom_open_connection(), not closed)")

/* Allocate a connection of the socket: state CLOSED, type NONE, not listed. */
pscom_con_t *pscom_con_create(pscom_sock_t *sock);
/* Append to the socket's connection list (visible to get_next_connection). */
void pscom_con_list(pscom_con_t *con);
/* Handshake finished: the transport desc took over; state RW, type set. */
void pscom_con_setup_ok(pscom_con_t *con);
/* Make it a loopback connection (connect to self); con_accept is queued. */
void pscom_con_setup_loop(pscom_con_t *con);
/* Handshake failed: state CLOSED; con_error(op, err) for a user connection. */
void pscom_con_setup_failed(pscom_con_t *con, pscom_err_t err);

/* The send queue got a new request: let the transport write. */
void pscom_con_write_kick(pscom_con_t *con);
/* Queue an internal send (pscom_send copies, EOF, control messages). */
void pscom_con_queue_send(pscom_con_t *con, pscom_req_t *req);
/* The send queue is empty and the transport takes this (encoded) message
 * whole at once (its write_now op): then it is complete, 1; else 0. */
int pscom_write_now(pscom_con_t *con, pscom_req_t *req);

/* gen, the core's own request for a message nobody has asked for yet
 * (unexpected, or a collective one; out of its queues), is dropped: freed,
 * and if it is the message being read, the rest of it is skipped. While
 * the transport fills it (pscom_read_pin), it is freed at the transport's
 * next pscom_read_done() instead. */
void pscom_read_drop_req(pscom_con_t *con, pscom_req_t *gen);
/* Is req, being read on con, the core's own buffer (nobody else's)? */
int pscom_read_req_core_own(const pscom_con_t *con, const pscom_req_t *req);

/* Internal control message of the given type: xheader copied, and a data
 * area of data_copy_len bytes in the request (req->pub.data) to fill, or
 * point it elsewhere with pscom_ctrl_set_data(). on_done defaults to
 * pscom_ctrl_free. NULL on ENOMEM (logged). */
pscom_req_t *pscom_ctrl_create(uint8_t type, const void *xheader, size_t xheader_len,
                               size_t data_copy_len);
void pscom_ctrl_set_data(pscom_req_t *req, void *data, size_t len);
void pscom_ctrl_free(pscom_req_t *req);
/* Queue it on con (fails it at once, calling on_done with ERROR, if con
 * cannot send any more). */
void pscom_con_send_ctrl(pscom_con_t *con, pscom_req_t *req);

/* Can the connection take new sends? (inline: on every send's path) */
static inline int pscom_con_writable(const pscom_con_t *con)
{
    return !con->eof_queued && !con->transport_closed && !con->connect_failed &&
           (con->transport || con->precon);
}
/* Queue a posted request (state set) as a message of msg_type; fails it
 * with ERROR if the connection cannot send or the request is malformed. */
void pscom_con_post_send(pscom_con_t *con, pscom_req_t *req, uint8_t msg_type);

/* A rendezvous send left con->rndv_sends: queue a deferred EOF if it was
 * the last one. */
void pscom_con_rndv_sends_drained(pscom_con_t *con);

/* Peer's EOF message arrived. */
void pscom_con_eof_received(pscom_con_t *con);
/* Our EOF message left. */
void pscom_con_eof_sent(pscom_con_t *con);
/* Local close (pscom_close_connection, pscom_close_socket). No
 * con_accept/con_error runs after it: one that another thread is running
 * is waited for (threaded mode). */
void pscom_con_close(pscom_con_t *con);
/* This thread runs a connection callback, and one of con is running: con
 * may be kept alive by it (con_event_done), so a wait of this thread for
 * con to go would never end (pscom_close_socket from a con_error, exit()
 * there: its clean-up) */
int pscom_con_held_by_callback(const pscom_con_t *con);
/* Fail all pending sends and receives of the connection with ERROR. */
void pscom_con_fail_requests(pscom_con_t *con);
/* Queue con_error(op, err) for the user unless already closed by the user. */
void pscom_con_report_error(pscom_con_t *con, pscom_op_t op, pscom_err_t err);
/* Free if nothing refers to it any more (user closed, transport closed). */
void pscom_con_release(pscom_con_t *con);

/* Do len bytes move through the transport's direct memory access (ops
 * rma_read/rma_write): does it have cap (PSCOM_PLUGIN_CAP_RMA_READ,
 * _RMA_WRITE or _RNDV_READ) and is len at least the connection's direct
 * size? The op may still decline (<0): then messages are used. */
int pscom_con_direct(const pscom_con_t *con, uint64_t cap, size_t len);

/* Is the connection able to take new receives / sends? */
static inline int pscom_con_readable(pscom_con_t *con)
{
    return !con->eof_received && !con->transport_closed && !con->connect_failed;
}

#endif /* PSCOM_CON_H */
