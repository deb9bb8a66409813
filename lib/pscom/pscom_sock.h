/*
 * pscom_sock.h - private socket: listener, connections, any-source queues.
 */
#ifndef PSCOM_SOCK_H
#define PSCOM_SOCK_H

#include "pscom_list.h"
#include "pscom_plugin.h"
#include "pscom_misuse.h"
#include "pscom_types.h"

#define PSCOM_SOCK_MAGIC 0x736f636bu /* "sock" */

struct pscom_sock {
    uint32_t magic;
    pscom_list_t next;         /* pscom.sockets */
    pscom_list_t connections;  /* pscom_con_t.sock_next: every connection of the socket */
    pscom_list_t recvq_any;    /* posted receives: connection NULL, or parked specific ones */
    pscom_list_t genrecvq_any; /* unexpected messages of all connections (req.next_alt) */
    struct pscom_sock_coll *coll; /* groups and their messages, created on first use */
    uint64_t con_type_mask;
    uint64_t flags;            /* PSCOM_SOCK_FLAG_* */
    pscom_ufd_t listen_ufd;    /* fd -1: none */
    int listen_active;
    int listen_stop_pending;   /* stopped, but kept for waiting on-demand connections */
    int closing;               /* in pscom_close_socket: takes no new connections */
    void **plugin_priv;        /* per registered plugin, NULL if unused */
    pscom_socket_t pub;        /* must be last */
};

static inline pscom_sock_t *pscom_sock_from_pub(pscom_socket_t *socket)
{
    return pscom_container_of(socket, pscom_sock_t, pub);
}

/* API entry (pscom_misuse.h): a socket of pscom_open_socket(), not closed */
#define pscom_api_check_sock(s)                                                    \
    pscom_api_check((s) && pscom_sock_from_pub(s)->magic == PSCOM_SOCK_MAGIC, \
                    "an open socket of pscom_open_socket()")

/* An on-demand connection of the socket got connected, failed or closed. */
void pscom_sock_ondemand_changed(pscom_sock_t *sock);
/* An on-demand connection was made on sock: its peer may connect to us,
 * also after pscom_stop_listen (spec 1.3, 5.7), so a stopped listener
 * comes back until no on-demand connection waits any more. */
void pscom_sock_ondemand_added(pscom_sock_t *sock);

/* Can a blocking wait still get anything through the sockets? Deadlock
 * detection (pscom_progress.c), for the case that fds or pollers are left
 * that serve none of them (ucp's worker without connections). Yes while
 * no socket is open. */
int pscom_socks_can_bring_anything(void);

/* Is this con_type allowed on the socket? */
static inline int pscom_sock_con_type_ok(pscom_sock_t *sock, pscom_con_type_t type)
{
    return (unsigned)type < 64 && (sock->con_type_mask >> type) & 1;
}

#endif /* PSCOM_SOCK_H */
