/*
 * pscom_plugin.h - the plugin SDK: the only core header a transport plugin
 * includes. Everything a transport needs from the core is declared here.
 *
 * A plugin is one const descriptor (pscom_plugin_desc_t) with designated
 * initializers, defined with PSCOM_PLUGIN_DEFINE(). The core allocates the
 * plugin's per-socket and per-connection state from the sizes it declares.
 * Missing ops are filled with "unsupported" stubs at registration, so the
 * core never tests an op for NULL on a hot path.
 *
 * Threading: every op is called with the pscom lock held (a no-op unless
 * pscom_init_thread() was used); ops must not block unless their contract
 * says so.
 */
#ifndef PSCOM_PLUGIN_H
#define PSCOM_PLUGIN_H

#include <stdint.h>
#include <sys/uio.h>

#include "pscom_copy.h"
#include "pscom_env.h"
#include "pscom_log.h"
#include "pscom_types.h"

/* Bumped on any change of this header that affects loadable modules. */
#define PSCOM_PLUGIN_ABI_VERSION 16

/* Capability bits: they must match the ops the plugin provides. */
#define PSCOM_PLUGIN_CAP_SAME_NODE (1ULL << 0) /* only between processes of one node */
#define PSCOM_PLUGIN_CAP_RMA_READ  (1ULL << 1) /* ops.rma_read: read peer memory directly */
#define PSCOM_PLUGIN_CAP_RMA_WRITE (1ULL << 2) /* ops.rma_write: write peer memory directly */
/* The byte stream from pscom_write_get_iov() is copied by the kernel
 * (sockets): the core may put a PAD message in front of a large payload
 * so that those copies do not run into a CPU's slow path for misaligned
 * source and destination. The receiving core drops PAD messages. */
#define PSCOM_PLUGIN_CAP_STREAM_PAD (1ULL << 3)
/* Rendezvous read mode (needs ops.rma_read, or ops.rndv_export and
 * ops.rndv_read): once a receive matched, the core reads the data straight
 * from the sender's buffer with ops.rma_read (or ops.rndv_read with the key
 * the sender's rndv_export gave) and answers FIN. Without it the sender pushes the data as one message
 * (which a transport may still move its own way: shm's single copy, where
 * the sender helps, is twice as fast as one reader alone). */
#define PSCOM_PLUGIN_CAP_RNDV_READ (1ULL << 4)

/* Largest blob a plugin exchanges in one handshake step (ABI 14: was
 * 1024, too small for the UCX worker address of a node with many network
 * devices). The core's buffers for it are on the heap. */
#define PSCOM_PRECON_BLOB_MAX 16384

/* What the connecting side learned about the peer in the handshake. */
typedef struct pscom_precon_peer {
    int node_id;     /* peer's node id (IPv4, host order) */
    int rank;
    int portno;      /* peer socket's listen port or -1 */
    uint64_t con_id; /* peer's connection id */
    char name[8];    /* peer socket name, not NUL-terminated when 8 long */
} pscom_precon_peer_t;

typedef struct pscom_plugin_ops {
    /* Global set-up, called when the first socket is opened. Registers the
     * plugin's env table. Returns 0 to enable the plugin, <0 to disable it
     * (the core logs one line). May block briefly. */
    int (*init)(void);
    /* Global tear-down at library cleanup. Safe after a failed init. */
    void (*fini)(void);
    /* Per-socket state (sock_priv_size bytes, zeroed). 0 or <0 (the plugin is
     * then not used on this socket). sock_fini is safe after a failed init. */
    int (*sock_init)(pscom_sock_t *sock, void *sock_priv);
    void (*sock_fini)(pscom_sock_t *sock, void *sock_priv);

    /* Handshake, in the progress engine; never blocks. Per-connection state
     * (con_priv_size bytes, zeroed) is at pscom_con_plugin_priv(con) from the
     * first handshake op on. Blobs hold at most PSCOM_PRECON_BLOB_MAX bytes.
     * Sequence: connect side con_offer -> accept side con_accept -> connect
     * side con_connect -> accept side con_confirm -> both con_start. Any op
     * returning <0 makes the core try the next plugin; con_abort is then
     * called on each side that ran a handshake op for this plugin.
     * con_connect and con_confirm may return PSCOM_PLUGIN_PENDING instead of
     * waiting for something (con_connect has filled in confirm then): the
     * handshake of this connection waits, nothing else does, until the
     * plugin calls pscom_con_handshake_done() (see there). con_confirm may
     * return PSCOM_PLUGIN_RETRY (see there) instead of <0. */
    int (*con_offer)(pscom_con_t *con, const pscom_precon_peer_t *peer,
                     void *blob, size_t *len);
    int (*con_accept)(pscom_con_t *con, const pscom_precon_peer_t *peer,
                      const void *blob, size_t len, void *reply, size_t *reply_len);
    int (*con_connect)(pscom_con_t *con, const void *reply, size_t len,
                       void *confirm, size_t *confirm_len);
    int (*con_confirm)(pscom_con_t *con, const void *confirm, size_t len);
    /* The transport takes the connection over. *fd is the handshake's TCP
     * socket: the plugin may take ownership by setting *fd = -1 (otherwise
     * the core keeps or closes it). Returns 0, or <0: the connection fails. */
    int (*con_start)(pscom_con_t *con, int *fd);
    /* Undo con_offer/con_accept/con_connect/con_confirm (not after start). */
    void (*con_abort)(pscom_con_t *con);

    /* Data path. The send queue became non-empty: start writing (it may
     * write inline, through pscom_write_get_iov()/pscom_write_done()). */
    void (*write_start)(pscom_con_t *con);
    /* Release the connection's transport resources. No core call for this
     * connection may follow from the plugin. */
    void (*close)(pscom_con_t *con);

    /* Direct memory access (with CAP_RMA_READ / CAP_RMA_WRITE): copy len
     * bytes between local memory and the peer's address space at remote
     * (an address valid in the peer process). Synchronous; returns 0, or
     * <0 and the core falls back to messages. Used for rendezvous reads
     * and RMA put/get. */
    int (*rma_read)(pscom_con_t *con, void *dst, uint64_t remote_src, size_t len);
    int (*rma_write)(pscom_con_t *con, const void *src, uint64_t remote_dst, size_t len);
    /* Optional (NULL: not used). A message is posted while the send queue
     * is empty: head (hlen bytes: 8-byte header + xheader) and data (dlen
     * bytes) as for pscom_write_peek(); priv is pscom_con_plugin_priv(con).
     * Return 1 if the message went whole and the buffers are no longer
     * needed (the core completes the request, it is never queued); 0 to
     * have it queued as usual (write_start follows). No core call for this
     * connection may be made from inside. (ABI version 8: scalars and priv,
     * the way from pscom_post_send to the transport's send kept short) */
    int (*write_now)(pscom_con_t *con, void *priv, const void *head, size_t hlen,
                     const void *data, size_t dlen);
    /* Optional, together (ABI version 13): rendezvous reads that need a
     * key, where the peer may read only memory made readable first
     * (registered). The sender's side: make len bytes at buf readable by
     * the peer and return a non-zero key for the announcement, with a
     * handle in *handle; 0: not possible, the message goes in push mode.
     * rndv_release(con, handle) follows exactly once when the read is over
     * (FIN), when the receiver chose push mode (CTS), or when the
     * connection failed; con may be closed then. The receiver's side:
     * rndv_read reads len bytes from src in the peer with that key into
     * dst, synchronously: 0, or <0 (the core falls back to push mode). No
     * core call for this connection may be made from inside either. */
    uint64_t (*rndv_export)(pscom_con_t *con, const void *buf, size_t len, void **handle);
    void (*rndv_release)(pscom_con_t *con, void *handle);
    int (*rndv_read)(pscom_con_t *con, void *dst, uint64_t src, uint64_t key, size_t len);
} pscom_plugin_ops_t;

typedef struct pscom_plugin_desc {
    uint32_t abi_version; /* PSCOM_PLUGIN_ABI_VERSION, must come first */
    uint32_t desc_size;   /* sizeof(pscom_plugin_desc_t) */
    const char *name;     /* lower case, e.g. "tcp"; env "PSP_TCP" = user priority */
    pscom_con_type_t con_type;
    unsigned priority;      /* default priority: higher is tried first */
    unsigned user_priority; /* default of PSP_<NAME> (0 disables by default) */
    uint64_t caps;          /* PSCOM_PLUGIN_CAP_* */
    size_t sock_priv_size;
    size_t con_priv_size;
    const pscom_plugin_ops_t *ops;
} pscom_plugin_desc_t;

/* Define a plugin's descriptor. Built in: a symbol collected into the
 * built-in table; as a module (PSCOM_PLUGIN_MODULE): the one exported
 * symbol "pscom_plugin_desc". */
#ifdef PSCOM_PLUGIN_MODULE
#define PSCOM_PLUGIN_DEFINE(pname)                                             \
    PSCOM_PLUGIN_API const pscom_plugin_desc_t pscom_plugin_desc
#else
#define PSCOM_PLUGIN_DEFINE(pname) const pscom_plugin_desc_t pscom_plugin_desc_##pname
#endif

/* ---- connections ------------------------------------------------------ */

PSCOM_PLUGIN_API void *pscom_con_plugin_priv(pscom_con_t *con);
PSCOM_PLUGIN_API pscom_connection_t *pscom_con_pub(pscom_con_t *con);
PSCOM_PLUGIN_API pscom_sock_t *pscom_con_sock(pscom_con_t *con);
PSCOM_PLUGIN_API void *pscom_sock_plugin_priv(pscom_sock_t *sock, const pscom_plugin_desc_t *desc);
PSCOM_PLUGIN_API const char *pscom_con_name(pscom_con_t *con); /* for logs */
/* In close(): non-zero if the connection ends by the EOF exchange (ours
 * went out, the peer's arrived), 0 if it ends by an error (the transport's,
 * a protocol error in what the peer sent, an abort), when the peer may
 * still be waiting for our EOF and must be told otherwise. */
PSCOM_PLUGIN_API int pscom_con_closing_gracefully(pscom_con_t *con);
/* Non-zero once the connection is ending: its EOF went out or the peer's
 * arrived (no new message will be sent on it after its EOF). */
PSCOM_PLUGIN_API int pscom_con_closing(pscom_con_t *con);

/* The step that returned PSCOM_PLUGIN_PENDING (con_connect or con_confirm)
 * is over: rc 0 (as if the op had returned 0) or <0. Called once, from the
 * progress engine (the plugin's poller, say), never from inside a handshake
 * op; the core goes on at its next pass. The plugin must bound its wait:
 * until then the handshake's own watchdog (PSP_PRECON_TCP_RECONNECT_TIMEOUT x
 * PSP_PRECON_TCP_CONNECT_STALLED_MAX, 12 s by default) is the only limit. If
 * the handshake ends first (the peer gave up, the watchdog), con_abort comes
 * instead, and this must not be called after it. (ABI version 6) */
#define PSCOM_PLUGIN_PENDING 1
PSCOM_PLUGIN_API void pscom_con_handshake_done(pscom_con_t *con, int rc);
/* con_confirm refuses this confirmation, but a new offer of the same
 * plugin on this connection can succeed (the ucp plugin: the endpoint the
 * confirmation names is closed on this side, the connecting side takes a
 * new one next time). The core aborts the plugin on both sides as for <0,
 * and the connecting side offers the same plugin once more, at most once
 * per connection, before the next one. Not from pscom_con_handshake_done().
 * (ABI version 15) */
#define PSCOM_PLUGIN_RETRY 2
/* Sends of at least size bytes use the rendezvous protocol on this
 * connection (default: PSP_RENDEZVOUS). Call from con_start. */
PSCOM_PLUGIN_API void pscom_con_set_rendezvous_size(pscom_con_t *con, size_t size);
/* RMA puts/gets and rendezvous reads of at least size bytes use the
 * direct ops (rma_write/rma_read, with CAP_RMA_WRITE/READ) on this
 * connection; smaller ones go as messages (default: SIZE_MAX, never).
 * Call from con_start. */
PSCOM_PLUGIN_API void pscom_con_set_rma_direct_size(pscom_con_t *con, size_t size);

/* ---- reading ---------------------------------------------------------- */

/* Where the next incoming bytes go: a buffer of *len > 0 bytes. Only
 * valid until the next core call for this connection. */
PSCOM_PLUGIN_API void pscom_read_get_buf(pscom_con_t *con, char **buf, size_t *len);
/* len bytes were stored into the buffer from pscom_read_get_buf().
 * Returns 0, or 1 if the connection stopped reading (EOF message, protocol
 * error): the plugin must then not read further for this connection (its
 * close op has been or will be called; memory stays valid until the
 * current API call returns). */
PSCOM_PLUGIN_API int pscom_read_done(pscom_con_t *con, size_t len);
/* In the data phase of a message: how many of its remaining data bytes
 * nobody stores (the receive is truncated, or there is none), 0 while
 * the next bytes go into a receive buffer or between messages. A
 * transport that need not move those bytes (a single copy leaves them in
 * the sender) may pass up to that many to pscom_read_done() at once,
 * without a buffer: their count alone ends the message. */
PSCOM_PLUGIN_API size_t pscom_read_drop_len(pscom_con_t *con);
/* Hand over len bytes from the transport's own buffer (copies them).
 * Returns as pscom_read_done(). */
PSCOM_PLUGIN_API int pscom_read_feed(pscom_con_t *con, const char *buf, size_t len);
/* pscom_read_feed() for transports that receive whole messages: buf (8-byte
 * aligned for the short way) holds exactly one message, header to last data
 * byte. A USER message that the connection's first posted receive takes
 * without further checks is completed straight away; anything else goes
 * through pscom_read_feed(). Same result and return value. */
PSCOM_PLUGIN_API int pscom_read_msg(pscom_con_t *con, const char *buf, size_t len);
/* The short way of pscom_read_msg() alone: returns 1 if it completed the
 * posted receive that takes the message, 0 if it did nothing (then the
 * message goes to pscom_read_msg() as usual). It calls no plugin op and
 * runs no user callback (completions with io_done are queued), so a
 * transport may call it from inside its library's completion callback.
 * (ABI version 8) */
PSCOM_PLUGIN_API int pscom_read_msg_posted(pscom_con_t *con, const char *buf, size_t len);
/* Requests completed so far (read only). A polled transport may compare it
 * around pscom_read_feed() and end its pass when it changed: a waiter may
 * be done, and looking at the next packet first can cost a cache miss on
 * the peer's line before the application gets control back. */
PSCOM_PLUGIN_API extern uint64_t pscom_req_completions;
/* For transports whose library fills the buffer from pscom_read_get_buf()
 * asynchronously (zero-copy receives): call right after getting it. Until
 * the next pscom_read_done() for this connection, the core keeps that
 * buffer where it is, however the core is called meanwhile: an unexpected
 * message that a posted receive matches is copied over, and one dropped by
 * pscom_close_connection() is freed, only at that pscom_read_done(). The
 * plugin must not call pscom_read_get_buf() or pscom_read_feed() for the
 * connection before that pscom_read_done(), and its close op must stop the
 * library writing into the buffer (the core frees or hands it back right
 * after close). */
PSCOM_PLUGIN_API void pscom_read_pin(pscom_con_t *con);
/* From the close op, when the library may go on writing into the pinned
 * buffer after the close (it cannot be stopped): if that buffer is the
 * core's own (an unexpected message's), the core leaves it to the plugin
 * and returns it as a handle, for pscom_read_pin_release() once the library
 * is done with it (at the latest after the library's teardown, in the
 * plugin's destroy). NULL if nothing is pinned or the buffer is the
 * user's (a posted receive's: it goes back to the user now, failed).
 * (ABI version 16) */
PSCOM_PLUGIN_API void *pscom_read_pin_keep(pscom_con_t *con);
PSCOM_PLUGIN_API void pscom_read_pin_release(void *held);

/* ---- writing ---------------------------------------------------------- */

/* Fill at most max iovecs with the next bytes to send (header, xheader and
 * data of queued messages, in order; with CAP_STREAM_PAD also PAD
 * messages). Returns the number filled; 0 = idle. Each call is taken to
 * start a new write: pads are chosen for the bytes of this call only. */
PSCOM_PLUGIN_API int pscom_write_get_iov(pscom_con_t *con, struct iovec *iov, int max);
/* len bytes of those iovecs left the process. Returns 0, or 1 if the
 * connection closed meanwhile (its EOF left and the peer's had arrived):
 * the plugin must then stop using it. */
PSCOM_PLUGIN_API int pscom_write_done(pscom_con_t *con, size_t len);
/* Message-oriented transports: the idx-th queued message (0 = oldest not
 * yet retired by pscom_write_done) as it goes on the wire: head = the
 * 8-byte header followed by the xheader, data = the payload (in the
 * sender's buffer, valid until retired). Returns 0 if there is no such
 * message. A transport using this retires whole messages only:
 * pscom_write_done(con, head.iov_len + data.iov_len) per message, in order. */
PSCOM_PLUGIN_API int pscom_write_peek(pscom_con_t *con, unsigned idx, struct iovec *head,
                                      struct iovec *data);
/* Decode a message header (the first 8 bytes of head above). */
PSCOM_PLUGIN_API void pscom_wire_header_get(const void *head, size_t *xheader_len,
                                            size_t *data_len);
/* Are there bytes to send? */
PSCOM_PLUGIN_API int pscom_write_pending(pscom_con_t *con);

/* ---- errors ----------------------------------------------------------- */

/* The transport failed: a read error (err = errno) or EOF (err = 0), or a
 * write error (op = PSCOM_OP_WRITE). Ends every request of the connection
 * with an error and calls the plugin's close(). */
PSCOM_PLUGIN_API void pscom_con_transport_error(pscom_con_t *con, pscom_op_t op, int err);

/* ---- progress engine ---------------------------------------------------- *
 * Deadlock detection (PSP_DEADLOCK_WARNINGS) takes a transport's fds and
 * pollers to bring something only through its connections or a running
 * handshake: while the process has neither (and no timer, nothing queued,
 * no threads), a blocking wait ends the process with exit code 112, whatever
 * fds or pollers a transport keeps. A transport that can complete something
 * without them must keep a timer armed meanwhile. */

struct pscom_ufd {
    int fd;
    uint32_t events; /* EPOLLIN | EPOLLOUT */
    void (*handler)(pscom_ufd_t *ufd, uint32_t revents);
    void *priv;
    int registered;
    /* Set before pscom_ufd_add() for an fd whose events may wait a clock
     * tick (1-4 ms; a listener, a peer-death detector): while only such
     * fds are registered, a busy-polling progress loop (shm, ucp) looks at
     * the fd set once per tick instead of every 32 passes, which saves it
     * a system call on nearly every round trip. Data sockets leave it 0. */
    int quiet;
};

/* Add/modify/remove an fd in the progress engine's epoll set. */
PSCOM_PLUGIN_API int pscom_ufd_add(pscom_ufd_t *ufd);
PSCOM_PLUGIN_API int pscom_ufd_set_events(pscom_ufd_t *ufd, uint32_t events);
PSCOM_PLUGIN_API void pscom_ufd_del(pscom_ufd_t *ufd);

struct pscom_poller {
    /* called on every progress pass; returns non-zero if it made progress */
    int (*poll)(pscom_poller_t *poller);
    /* optional (NULL: never): non-zero while operations are in flight that
     * only poll() moves on (a rendezvous the peer is copying, a writer
     * waiting for ring space). A blocking wait that found nothing to do for
     * PSP_WAIT_SPIN_US then keeps spinning, up to PSCOM_WAIT_BUSY_FACTOR
     * times as long, instead of napping 1 ms at a time: a nap would delay
     * the completion it waits for. Asked only when the wait would nap. */
    int (*busy)(pscom_poller_t *poller);
    /* optional (ABI version 9; NULL: never leaves): a blocking wait is
     * about to sleep in the kernel (epoll_wait). Arm an fd that wakes the
     * poller's transport (pscom_ufd_add) and return non-zero: the core then
     * takes the poller out of its passes until the wait has slept (then
     * wake) or the transport calls pscom_poller_add() (from its fd's
     * handler, or when it posts work). Return 0 to stay; the wait then
     * naps 1 ms at a time. Non-blocking calls (pscom_test_any) never ask:
     * a transport that polls them stays as cheap as its poll. */
    int (*sleep)(pscom_poller_t *poller);
    /* with sleep: the wait slept and the poller is still out. Take the fd
     * out again; the core puts the poller back when this returns. */
    void (*wake)(pscom_poller_t *poller);
    /* set by the core before each poll (ABI version 10): how many rounds of
     * polling a poll that finds nothing may run before it returns. 1 in
     * non-blocking calls (pscom_test_any; unless made from a completion
     * callback inside a blocking wait) and while several pollers are
     * active; PSCOM_POLL_SPIN in the passes of a blocking wait, where the
     * core's own work between polls would otherwise delay seeing a message
     * by half a pass on average. */
    unsigned spin;
    pscom_list_t next;
    int active;
    int asleep; /* the core's: out by sleep, in its list of sleepers */
};
#define PSCOM_WAIT_BUSY_FACTOR 100
#define PSCOM_POLL_SPIN        8
PSCOM_PLUGIN_API void pscom_poller_add(pscom_poller_t *poller);
PSCOM_PLUGIN_API void pscom_poller_del(pscom_poller_t *poller);

/* One-shot timer run by the progress engine (never from a signal or a
 * thread of its own; ABI version 14 for plugins): fn runs in a progress
 * pass once due, with the lock held, and may re-arm or stop any timer, its
 * own included. A blocking wait never sleeps past the earliest due timer,
 * so a timer fires while the process waits, whatever its pollers do. The
 * timer must stay valid while armed. */
struct pscom_timer {
    pscom_list_t next; /* armed timers, sorted by due_us */
    uint64_t due_us;   /* pscom_time_us() when due */
    void (*fn)(pscom_timer_t *timer);
    void *priv;
    int armed;
};
/* (Re-)arm: due in ms milliseconds (0: at the next pass). */
PSCOM_PLUGIN_API void pscom_timer_start(pscom_timer_t *timer, unsigned ms);
/* Disarm (no-op if not armed). */
PSCOM_PLUGIN_API void pscom_timer_stop(pscom_timer_t *timer);

#endif /* PSCOM_PLUGIN_H */
