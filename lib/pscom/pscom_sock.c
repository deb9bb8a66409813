/*
 * pscom_sock.c - sockets: open/close, name, listener, endpoint strings,
 * con-type masks.
 */
#define _GNU_SOURCE
#include "pscom_sock.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "pscom_con.h"
#include "pscom_config.h"
#include "pscom_core.h"
#include "pscom_group.h"
#include "pscom_log.h"
#include "pscom_loop.h"
#include "pscom_misuse.h"
#include "pscom_ondemand.h"
#include "pscom_plugin_reg.h"
#include "pscom_precon.h"
#include "pscom_progress.h"
#include "pscom_queues.h"
#include "pscom_precon_tcp.h"
#include "pscom_util.h"

#define MASK_BACKUP_MAGIC 0x6d61736bu /* "mask" */

typedef struct mask_backup {
    uint32_t magic;
    uint64_t mask;
} mask_backup_t;

/* ---- listener ------------------------------------------------------------
 * Level-triggered in the epoll set. When accept() fails for lack of file
 * descriptors (EMFILE/ENFILE), the pending connection is still taken off
 * the backlog - with a reserve fd released for the moment - and closed at
 * once, so the peer sees a reset (and retries within PSP_RETRY) instead of
 * the listener spinning on a connection it can never accept; an error
 * naming the limit is logged (at most once a second). Without a reserve
 * fd the listener is paused for LISTEN_PAUSE_MS. Existing connections are
 * not affected. */

#define LISTEN_PAUSE_MS 100

static int reserve_fd = -1; /* /dev/null, given up to accept-and-close */

static void reserve_open(void)
{
    if (reserve_fd < 0) reserve_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
}

typedef struct listen_pause {
    pscom_list_t next;
    pscom_sock_t *sock;
    pscom_timer_t timer;
} listen_pause_t;

static pscom_list_t listen_pauses = PSCOM_LIST_INIT(listen_pauses);

static listen_pause_t *pause_find(pscom_sock_t *sock)
{
    pscom_list_t *pos;
    pscom_list_for_each(pos, &listen_pauses) {
        listen_pause_t *p = pscom_list_entry(pos, listen_pause_t, next);
        if (p->sock == sock) return p;
    }
    return NULL;
}

static void pause_end(listen_pause_t *p)
{
    pscom_timer_stop(&p->timer);
    pscom_list_del(&p->next);
    free(p);
}

static void pause_expired(pscom_timer_t *timer)
{
    listen_pause_t *p  = timer->priv;
    pscom_sock_t *sock = p->sock;
    pause_end(p);
    reserve_open();
    if (sock->listen_active && !sock->listen_ufd.registered) pscom_ufd_add(&sock->listen_ufd);
}

static void listen_pause(pscom_sock_t *sock)
{
    if (pause_find(sock)) return;
    listen_pause_t *p = calloc(1, sizeof(*p));
    if (!p) return;
    p->sock       = sock;
    p->timer.fn   = pause_expired;
    p->timer.priv = p;
    pscom_list_add_tail(&p->next, &listen_pauses);
    pscom_ufd_del(&sock->listen_ufd);
    pscom_timer_start(&p->timer, LISTEN_PAUSE_MS);
}

static void accept_one(pscom_sock_t *sock, int fd)
{
    pscom_con_t *con = pscom_con_create(sock);
    if (!con) {
        plog_err("out of memory for an incoming connection");
        close(fd);
        return;
    }
    pscom_tcp_tune_precon(fd);
    con->user_closed = 1; /* owned by the library until the handshake succeeds */
    con->pub.state   = PSCOM_CON_STATE_ACCEPTING;
    pscom_con_list(con);
    if (pscom_precon_accept(con, fd) < 0) pscom_con_setup_failed(con, PSCOM_ERR_STDERROR);
}

/* accept() failed with EMFILE/ENFILE. Returns 1 if a connection was taken
 * off the backlog (refused: try the next), 0 if there is nothing more to
 * do now (backlog empty, or the listener paused). */
static int accept_exhausted(pscom_sock_t *sock, int err)
{
    static uint64_t last_log_us;
    static unsigned refused;
    int fd = -1;

    if (reserve_fd >= 0) {
        close(reserve_fd);
        reserve_fd = -1;
        fd         = accept4(sock->listen_ufd.fd, NULL, NULL, SOCK_CLOEXEC);
        int e      = errno;
        if (fd >= 0) close(fd);
        reserve_open();
        if (fd < 0 && (e == EAGAIN || e == EWOULDBLOCK)) return 0; /* nothing pending */
    }
    refused += fd >= 0;
    uint64_t now = pscom_time_us();
    if (!last_log_us || now - last_log_us >= 1000000u) {
        char lim[96];
        errno = err;
        plog_err("listener on port %d: cannot accept an incoming connection: %m (%s); %s%u "
                 "connection(s) refused so far",
                 sock->pub.listen_portno, pscom_fd_limit_str(err, lim, sizeof(lim)),
                 fd >= 0 ? "" : "pausing the listener; ", refused);
        last_log_us = now;
    }
    if (fd >= 0) return 1;
    listen_pause(sock);
    return 0;
}

static void listen_handler(pscom_ufd_t *ufd, uint32_t revents)
{
    pscom_sock_t *sock = ufd->priv;
    for (int i = 0; i < 64; i++) {
        int fd = accept4(ufd->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EINTR || errno == ECONNABORTED) continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK) return;
            if (pscom_fd_exhausted(errno)) {
                if (accept_exhausted(sock, errno)) continue;
                return;
            }
            /* anything else (ENOBUFS, ENOMEM, ...): do not spin on it */
            plog_err("accept() on port %d failed: %m; pausing the listener for %d ms",
                     sock->pub.listen_portno, LISTEN_PAUSE_MS);
            listen_pause(sock);
            return;
        }
        accept_one(sock, fd);
    }
}

static void listen_activate(pscom_sock_t *sock)
{
    if (sock->listen_active || sock->listen_ufd.fd < 0 || sock->closing) return;
    if (pscom_ufd_add(&sock->listen_ufd) == 0) sock->listen_active = 1;
}

static void listen_deactivate(pscom_sock_t *sock)
{
    if (!sock->listen_active) return;
    listen_pause_t *p = pause_find(sock);
    if (p) pause_end(p);
    pscom_ufd_del(&sock->listen_ufd);
    sock->listen_active = 0;
}

static void listen_close(pscom_sock_t *sock)
{
    listen_deactivate(sock);
    if (sock->listen_ufd.fd > 0) close(sock->listen_ufd.fd);
    sock->listen_ufd.fd = -1;
}

/* fd 0, handed to us listening (inetd style), is likely blocking; the
 * handler accepts until EAGAIN and would block in accept() */
static int listen_fd0(void)
{
    int fl = fcntl(0, F_GETFL);
    if (fl < 0 || fcntl(0, F_SETFL, fl | O_NONBLOCK) < 0) {
        plog_err("listen on fd 0: fcntl(O_NONBLOCK) failed: %m");
        return -1;
    }
    int fdfl = fcntl(0, F_GETFD);
    if (fdfl >= 0) fcntl(0, F_SETFD, fdfl | FD_CLOEXEC);
    return 0;
}

/* A new listening socket on portno (PSCOM_ANYPORT: the kernel's choice);
 * -1 with errno on failure. */
static int listen_bind(int portno)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_ANY)};
    sa.sin_port           = htons((uint16_t)(portno == PSCOM_ANYPORT ? 0 : portno));
    while (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
        if (errno == EADDRINUSE && portno == PSCOM_ANYPORT) {
            plog_warn("listen: no free port, retrying in 1 s");
            sleep(1);
            continue;
        }
        int e = errno;
        plog_err("bind(port %d) failed: %m", portno);
        close(fd);
        errno = e;
        return -1;
    }
    unsigned backlog = pscom_config.tcp_backlog;
    if (backlog > 0x7fffffff) backlog = 0x7fffffff;
    if (listen(fd, (int)backlog) < 0) {
        int e = errno;
        plog_err("listen(port %d) failed: %m", portno);
        close(fd);
        errno = e;
        return -1;
    }
    return fd;
}

/* The socket's listener becomes a new one for portno. The old one (there
 * is one only if it is inactive) is closed only once the new one is there:
 * a failed pscom_listen leaves the socket as it was, its port, endpoint
 * string and pscom_resume_listen still working. */
static pscom_err_t listen_open(pscom_sock_t *sock, int portno)
{
    int fd = portno == PSCOM_LISTEN_FD0 ? 0 : listen_bind(portno);
    if (fd < 0) return PSCOM_ERR_STDERROR;
    struct sockaddr_in sa;
    socklen_t len = sizeof(sa);
    if (getsockname(fd, (struct sockaddr *)&sa, &len) < 0 || (fd == 0 && listen_fd0() < 0)) {
        int e = errno;
        if (fd) close(fd);
        errno = e;
        return PSCOM_ERR_STDERROR;
    }
    if (sock->listen_ufd.fd != fd) listen_close(sock); /* fd 0 again: the same listener */
    reserve_open();
    sock->listen_ufd.fd              = fd;
    sock->listen_ufd.events          = EPOLLIN;
    sock->listen_ufd.handler         = listen_handler;
    sock->listen_ufd.priv            = sock;
    sock->listen_ufd.quiet           = 1; /* a connect may wait a clock tick */
    sock->pub.listen_portno          = ntohs(sa.sin_port);
    sock->pub.local_con_info.tcp.portno = sock->pub.listen_portno;
    return PSCOM_SUCCESS;
}

/* PSCOM_ANYPORT (-1), PSCOM_LISTEN_FD0 (0) or a TCP port */
static int listen_portno_valid(int portno)
{
    return portno == PSCOM_ANYPORT || portno == PSCOM_LISTEN_FD0 || (portno > 0 && portno <= 65535);
}

PSCOM_API pscom_err_t pscom_listen(pscom_socket_t *socket, int portno)
{
    pscom_api_check_sock(socket);
    pscom_sock_t *sock = pscom_sock_from_pub(socket);
    pscom_err_t res    = PSCOM_SUCCESS;
    if (!listen_portno_valid(portno)) {
        plog_err("pscom_listen: port %d is not a TCP port, PSCOM_ANYPORT or PSCOM_LISTEN_FD0",
                 portno);
        errno = EINVAL;
        return PSCOM_ERR_STDERROR;
    }
    pscom_lock();
    if (sock->listen_ufd.fd >= 0) {
        if (portno == PSCOM_ANYPORT || portno == socket->listen_portno) {
            sock->listen_stop_pending = 0; /* listening again, as pscom_resume_listen */
            listen_activate(sock);
            goto out;
        }
        if (sock->listen_active) {
            res = PSCOM_ERR_ALREADY;
            goto out;
        }
    }
    res = listen_open(sock, portno);
    if (res == PSCOM_SUCCESS) listen_activate(sock);
out:
    pscom_unlock();
    return res;
}

PSCOM_API void pscom_stop_listen(pscom_socket_t *socket)
{
    pscom_api_check_sock(socket);
    pscom_sock_t *sock = pscom_sock_from_pub(socket);
    pscom_lock();
    if (pscom_ondemand_pending(sock)) {
        /* peers of waiting on-demand connections may still connect */
        sock->listen_stop_pending = 1;
    } else {
        listen_deactivate(sock);
    }
    pscom_unlock();
}

void pscom_sock_ondemand_added(pscom_sock_t *sock)
{
    if (sock->listen_active || sock->listen_ufd.fd < 0) return;
    listen_activate(sock);
    if (sock->listen_active) sock->listen_stop_pending = 1; /* off again once none waits */
}

void pscom_sock_ondemand_changed(pscom_sock_t *sock)
{
    pscom_ondemand_sweep(sock);
    if (sock->listen_stop_pending && !pscom_ondemand_pending(sock)) {
        sock->listen_stop_pending = 0;
        listen_deactivate(sock);
    }
}

PSCOM_API void pscom_suspend_listen(pscom_socket_t *socket)
{
    pscom_stop_listen(socket);
}

PSCOM_API void pscom_resume_listen(pscom_socket_t *socket)
{
    pscom_api_check_sock(socket);
    pscom_api_check(socket->listen_portno != -1, "pscom_listen() before");
    pscom_lock();
    pscom_sock_from_pub(socket)->listen_stop_pending = 0;
    listen_activate(pscom_sock_from_pub(socket));
    pscom_unlock();
}

PSCOM_API int pscom_get_portno(pscom_socket_t *socket)
{
    pscom_api_check_sock(socket);
    return socket->listen_portno;
}

PSCOM_API pscom_err_t pscom_socket_get_ep_str(pscom_socket_t *socket, char **ep_str)
{
    pscom_api_check_sock(socket);
    pscom_api_check(ep_str, "a place for the string");
    *ep_str = NULL;
    if (socket->listen_portno < 0) {
        errno = EINVAL;
        return PSCOM_ERR_STDERROR;
    }
    *ep_str = pscom_ep_format((uint32_t)socket->local_con_info.node_id, socket->listen_portno,
                              socket->local_con_info.name);
    if (!*ep_str) {
        errno = ENOMEM;
        return PSCOM_ERR_STDERROR;
    }
    return PSCOM_SUCCESS;
}

PSCOM_API void pscom_socket_free_ep_str(char *ep_str)
{
    free(ep_str);
}

/* ---- open / close -------------------------------------------------------- */

PSCOM_API pscom_socket_t *pscom_open_socket(size_t userdata_size, size_t connection_userdata_size,
                                            int local_rank, uint64_t socket_flags)
{
    uint64_t kind = socket_flags & (PSCOM_SOCK_FLAG_INTRA_JOB | PSCOM_SOCK_FLAG_INTER_JOB);
    pscom_ensure_init();
    if (kind != PSCOM_SOCK_FLAG_INTRA_JOB && kind != PSCOM_SOCK_FLAG_INTER_JOB) {
        plog_err("pscom_open_socket: socket_flags %#llx: exactly one of PSCOM_SOCK_FLAG_INTRA_JOB "
                 "and PSCOM_SOCK_FLAG_INTER_JOB must be set",
                 (unsigned long long)socket_flags);
        errno = EINVAL;
        return NULL;
    }
    pscom_lock();
    pscom_sock_t *sock = NULL;
    if (kind == PSCOM_SOCK_FLAG_INTRA_JOB && pscom.intra_job_socket) {
        plog_err("pscom_open_socket: only one INTRA_JOB socket per process");
        errno = EBUSY;
        goto out;
    }
    pscom_plugins_init();
    if (userdata_size > SIZE_MAX - sizeof(*sock) ||
        connection_userdata_size > SIZE_MAX - sizeof(pscom_con_t)) {
        /* the size of the socket or of each connection would wrap */
        plog_err("pscom_open_socket: userdata_size %zu / connection_userdata_size %zu too large",
                 userdata_size, connection_userdata_size);
        errno = ENOMEM;
        goto out;
    }
    sock = calloc(1, sizeof(*sock) + userdata_size);
    if (!sock) goto out;
    sock->magic = PSCOM_SOCK_MAGIC;
    pscom_list_init(&sock->connections);
    pscom_list_init(&sock->recvq_any);
    pscom_list_init(&sock->genrecvq_any);
    sock->con_type_mask = ~0ULL;
    sock->flags         = socket_flags;
    sock->listen_ufd.fd = -1;

    pscom_socket_t *pub               = &sock->pub;
    pub->listen_portno                = -1;
    pub->local_con_info.tcp.portno    = -1;
    pub->local_con_info.node_id       = pscom_nodeid_compute(pscom_config.network);
    pub->local_con_info.rank          = local_rank;
    pub->local_con_info.id            = NULL;
    pub->connection_userdata_size     = connection_userdata_size;
    pub->userdata_size                = userdata_size;
    char name[16];
    snprintf(name, sizeof(name), "p%d", (int)getpid());
    strncpy(pub->local_con_info.name, name, sizeof(pub->local_con_info.name));

    if (pscom_plugins_sock_init(sock) < 0) {
        free(sock);
        sock = NULL;
        goto out;
    }
    if (kind == PSCOM_SOCK_FLAG_INTRA_JOB) pscom.intra_job_socket = 1;
    pscom_list_add_tail(&sock->next, &pscom.sockets);
out:
    pscom_unlock();
    return sock ? &sock->pub : NULL;
}

PSCOM_API void pscom_socket_set_name(pscom_socket_t *socket, const char *name)
{
    pscom_api_check_sock(socket);
    pscom_api_check(name, "a name");
    strncpy(socket->local_con_info.name, name, sizeof(socket->local_con_info.name));
    pscom_log_set_name(socket->local_con_info.name, sizeof(socket->local_con_info.name));
}

/* Yes while a socket listens (or pauses its listener, or keeps it for
 * waiting on-demand connections), a handshake runs, or a connection has a
 * transport open other than the loopback, which delivers while a message
 * is posted: a tcp, shm, ucp or openib connection, closing ones included,
 * and an on-demand one not connected yet (conservatively: it may still
 * get connected). What a transport's fds and pollers can bring, they
 * bring through such a connection. Without any socket there is nothing to
 * judge by: yes (the fds and pollers themselves decide then; test_wait's
 * fake transport completes its operation with neither). */
int pscom_socks_can_bring_anything(void)
{
    if (pscom_precon_running() || pscom_list_empty(&pscom.sockets)) return 1;
    pscom_list_t *ps, *pc;
    pscom_list_for_each(ps, &pscom.sockets) {
        pscom_sock_t *sock = pscom_list_entry(ps, pscom_sock_t, next);
        if (sock->listen_active || sock->listen_ufd.registered || sock->listen_stop_pending)
            return 1;
        pscom_list_for_each(pc, &sock->connections) {
            pscom_con_t *con = pscom_list_entry(pc, pscom_con_t, sock_next);
            if (con->precon) return 1;
            if (con->transport && con->transport != &pscom_loop_desc && !con->transport_closed)
                return 1;
        }
    }
    return 0;
}

typedef struct close_wait {
    pscom_sock_t *sock; /* or NULL: every socket */
    uint64_t last_counter;
    uint64_t last_change_us;
} close_wait_t;

/* sock still has a connection to wait for */
static int sock_waits(const pscom_sock_t *sock)
{
    const pscom_list_t *pos;
    pscom_list_for_each(pos, &sock->connections) {
        const pscom_con_t *con = pscom_list_entry(pos, pscom_con_t, sock_next);
        if (!pscom_con_held_by_callback(con)) return 1;
    }
    return 0;
}

/* s is one of the sockets the wait is for */
static int waited_for(const close_wait_t *w, const pscom_sock_t *s)
{
    return !w->sock || s == w->sock;
}

static size_t connections_left(const close_wait_t *w)
{
    size_t n = 0;
    pscom_list_t *pos;
    pscom_list_for_each(pos, &pscom.sockets) {
        pscom_sock_t *s = pscom_list_entry(pos, pscom_sock_t, next);
        if (waited_for(w, s)) n += pscom_list_count(&s->connections);
    }
    return n;
}

static int sock_closed(void *arg)
{
    close_wait_t *w = arg;
    int waits       = 0;
    pscom_list_t *pos;
    pscom_list_for_each(pos, &pscom.sockets) {
        pscom_sock_t *s = pscom_list_entry(pos, pscom_sock_t, next);
        if (waited_for(w, s) && sock_waits(s)) waits = 1;
    }
    if (!waits) return 1;
    if (!pscom_config.shutdown_timeout) return 0;
    uint64_t now = pscom_time_us();
    if (w->last_counter != pscom.progress_counter) {
        w->last_counter   = pscom.progress_counter;
        w->last_change_us = now;
        return 0;
    }
    if (now - w->last_change_us >= (uint64_t)pscom_config.shutdown_timeout * 1000000u) {
        plog_warn("pscom_close_socket: no progress for %u s, giving up on %zu connection(s)",
                  pscom_config.shutdown_timeout, connections_left(w));
        return 1;
    }
    return 0;
}

/* Connections that did not finish in time. A handshake still running is
 * ended too, and whatever a pending callback keeps alive leaves the list:
 * both refer to the socket, whose memory goes after this. */
static void cut_off_connections(pscom_sock_t *sock)
{
    while (!pscom_list_empty(&sock->connections)) {
        pscom_con_t *con = pscom_list_entry(sock->connections.next, pscom_con_t, sock_next);
        if (con->precon) {
            pscom_precon_abort(con->precon);
        } else {
            pscom_con_transport_error(con, PSCOM_OP_RW, ETIMEDOUT);
            pscom_con_release(con);
        }
        if (sock->connections.next == &con->sock_next) { /* not released (freeing is deferred) */
            pscom_list_del(&con->sock_next);
            con->listed = 0;
        }
    }
}

/* The start of a close: no new connections, the connections closing. */
static void close_begin(pscom_sock_t *sock)
{
    /* No new connections from here on: one accepted while we wait would be
     * a user connection nobody closes, and we would wait for it forever.
     * Peers that connect now are refused. */
    sock->closing = 1;
    listen_close(sock);

    pscom_list_t *pos, *tmp;
    pscom_list_for_each_safe(pos, tmp, &sock->connections) {
        pscom_con_t *con = pscom_list_entry(pos, pscom_con_t, sock_next);
        if (!con->user_closed || con->precon) pscom_con_close(con);
    }
}

/* Until the connections of sock (NULL: of every socket) are gone; with
 * PSP_SHUTDOWN_TIMEOUT, or until nothing moved for that long. A connection
 * that a callback this thread runs keeps alive is not waited for: it
 * cannot go before the wait ends (until 2026-11-29 exit() in a con_error
 * waited for ever, or ended as a deadlock with status 112). */
static void close_wait(pscom_sock_t *sock)
{
    close_wait_t w = {.sock = sock, .last_counter = pscom.progress_counter,
                      .last_change_us = pscom_time_us()};
    /* PSP_SHUTDOWN_TIMEOUT ends the wait by the clock: no deadlock then */
    if (pscom_config.shutdown_timeout) {
        pscom_wait_until_timed(sock_closed, &w);
    } else {
        pscom_wait_until(sock_closed, &w);
    }
}

/* The end of a close: what is left cut off, the socket freed. */
static void close_end(pscom_sock_t *sock)
{
    cut_off_connections(sock);
    pscom_recv_fail_sock(sock);
    pscom_group_sock_fini(sock);
    pscom_plugins_sock_fini(sock);
    pscom_list_del(&sock->next);
    if (sock->flags & PSCOM_SOCK_FLAG_INTRA_JOB) pscom.intra_job_socket = 0;
    sock->magic = 0;
    pscom_defer_free(sock);
}

PSCOM_API void pscom_close_socket(pscom_socket_t *socket)
{
    if (socket) pscom_api_check_sock(socket); /* (NULL: all) */
    pscom_lock();
    if (socket) {
        pscom_sock_t *sock = pscom_sock_from_pub(socket);
        close_begin(sock);
        close_wait(sock);
        close_end(sock);
    } else {
        /* all at once: one wait, one PSP_SHUTDOWN_TIMEOUT (until 2026-11-29
         * one after the other: at exit a timeout per socket) */
        pscom_list_t *pos;
        pscom_list_for_each(pos, &pscom.sockets) close_begin(pscom_list_entry(pos, pscom_sock_t, next));
        close_wait(NULL);
        while (!pscom_list_empty(&pscom.sockets))
            close_end(pscom_list_entry(pscom.sockets.next, pscom_sock_t, next));
    }
    pscom_free_deferred_now(); /* earlier ones: until 2026-11-29 all at the next pass */
    pscom_unlock();
}

/* ---- con-type masks -------------------------------------------------------- */

PSCOM_API void pscom_con_type_mask_all(pscom_socket_t *socket)
{
    pscom_api_check_sock(socket);
    pscom_sock_from_pub(socket)->con_type_mask = ~0ULL;
}

PSCOM_API void pscom_con_type_mask_only(pscom_socket_t *socket, pscom_con_type_t con_type)
{
    pscom_api_check_sock(socket);
    pscom_api_check((unsigned)con_type < 64, "con_type < 64");
    pscom_sock_from_pub(socket)->con_type_mask = 1ULL << con_type;
}

PSCOM_API void pscom_con_type_mask_add(pscom_socket_t *socket, pscom_con_type_t con_type)
{
    pscom_api_check_sock(socket);
    pscom_api_check((unsigned)con_type < 64, "con_type < 64");
    pscom_sock_from_pub(socket)->con_type_mask |= 1ULL << con_type;
}

PSCOM_API void pscom_con_type_mask_del(pscom_socket_t *socket, pscom_con_type_t con_type)
{
    pscom_api_check_sock(socket);
    pscom_api_check((unsigned)con_type < 64, "con_type < 64");
    pscom_sock_from_pub(socket)->con_type_mask &= ~(1ULL << con_type);
}

PSCOM_API int pscom_con_type_mask_is_set(pscom_socket_t *socket, pscom_con_type_t con_type)
{
    pscom_api_check_sock(socket);
    pscom_api_check((unsigned)con_type < 64, "con_type < 64");
    return pscom_sock_con_type_ok(pscom_sock_from_pub(socket), con_type);
}

PSCOM_API void *pscom_con_type_mask_backup(pscom_socket_t *socket)
{
    pscom_api_check_sock(socket);
    mask_backup_t *b = malloc(sizeof(*b));
    if (!b) return NULL;
    b->magic = MASK_BACKUP_MAGIC;
    b->mask  = pscom_sock_from_pub(socket)->con_type_mask;
    return b;
}

PSCOM_API void pscom_con_type_mask_restore(pscom_socket_t *socket, void *con_type_mask_backup)
{
    pscom_api_check_sock(socket);
    mask_backup_t *b = con_type_mask_backup;
    pscom_api_check(b && b->magic == MASK_BACKUP_MAGIC, "a backup of pscom_con_type_mask_backup()");
    pscom_sock_from_pub(socket)->con_type_mask = b->mask;
    b->magic                                   = 0;
    free(b);
}
