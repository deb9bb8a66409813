/*
 * itest_sockets: sockets, listening, endpoint strings, accepting, request
 * defaults (spec 1.1-1.5, 5.7, 5.8, 5.12 #1/#12).
 *
 * Server, single-process checks:
 *  - pscom_request_create: state DONE, xheader_len as passed (not
 *    rounded), max_xheader_len rounded up to 8 and at least 32, data/
 *    connection/socket/ops cleared, user_size set, user just past the
 *    xheader area (and writable);
 *  - pscom_open_socket: no flag or both flags -> NULL, EINVAL and one
 *    error line that names the rule; a userdata_size or
 *    connection_userdata_size whose allocation would wrap (SIZE_MAX - 40)
 *    -> NULL, ENOMEM; a second INTRA_JOB
 *    socket -> NULL; defaults: not listening (-1), ops NULL, rank,
 *    userdata sizes, name "p<pid>" (8 bytes max); set_name truncates to
 *    8; connection userdata size; con-type mask all/only/add/del/is_set/
 *    backup/restore; pscom_init again returns SUCCESS; get_nodeid matches
 *    local_con_info.node_id;
 *  - pscom_listen(ANYPORT): port > 0 in listen_portno, get_portno and
 *    local_con_info.tcp.portno; listen again (ANYPORT or same port) is
 *    SUCCESS with the same port, another port gives ERR_ALREADY; the
 *    endpoint string is "a.b.c.d:PORT@NAME" from node_id, and identical on
 *    every call, also across stop_listen/suspend_listen/resume_listen.
 *  - pscom_listen with a port outside 0..65535 other than PSCOM_ANYPORT
 *    (-1) gives PSCOM_ERR_STDERROR, errno EINVAL, and changes nothing,
 *    whether the socket listens or not;
 *  - a re-listen of a stopped socket on a port that is busy fails
 *    (EADDRINUSE) and keeps the old listener: port, endpoint string, and
 *    after pscom_resume_listen a TCP connect to it works.
 * With 3 clients (one of them connects with "localhost:PORT@name"):
 *  - con_accept runs once per client, on exactly the connections that
 *    pscom_get_next_connection lists; remote_con_info carries the peer's
 *    rank and name on both sides;
 *  - pscom_close_socket on a client completes its still-posted any-source
 *    receive with ERROR; the server gets con_error(OP_READ, ERR_EOF) per
 *    client; the server's pscom_close_socket does the same for its own.
 * "listen_fd0" (1 client): pscom_listen(PSCOM_LISTEN_FD0) on a blocking
 * listening socket at fd 0 (inetd style) makes it non-blocking and
 * close-on-exec; a client connects and echoes (a blocking fd 0 hung the
 * listener in accept()).
 * Closing while a peer connects (2 clients; client 1 does not answer the
 * server's EOF until client 2 is done, through a pipe between the two):
 *  - "close_accept": client 2 connects (pscom, DIRECT) while the server is
 *    in pscom_close_socket: the closing socket takes no new connection
 *    (pscom_connect fails, no con_accept), and the close returns once
 *    client 1 answers (it waited forever for the new connection before);
 *  - "close_timeout" (PSP_SHUTDOWN_TIMEOUT=1 on the server): client 2
 *    opened a plain TCP connection to the listener just before the close
 *    and sends nothing; when the close gave up on client 1 and returned,
 *    client 2's connection is closed too (a handshake left running used
 *    the freed socket when it ended).
 *  - "close_all_timeout" (PSP_SHUTDOWN_TIMEOUT=1 on the server): three
 *    sockets of the server connected to a client that then stays out of
 *    pscom; pscom_close_socket(NULL) gives up once, on all three
 *    connections (until 2026-11-29 it closed the sockets one after the
 *    other, a timeout each: at exit, a timeout per socket).
 */
#include "pscom_testutil.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define NCLIENTS  3
#define TAG_CLOSE 0x434c4f53u
#define SRV_NAME  "srvname1"

static void check_request_defaults(void)
{
    static const struct {
        size_t in, rounded;
    } cases[] = {{0, 32}, {1, 32}, {7, 32}, {32, 32}, {33, 40}, {40, 40},
                 {64, 64}, {100, 104}, {1000, 1000}, {65535, 65536}};
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        size_t user_size     = i * 3;
        pscom_request_t *req = pscom_request_create(cases[i].in, user_size);
        TU_ASSERT_NOT_NULL(req);
        TU_ASSERT_EQ(req->state, PSCOM_REQ_STATE_DONE);
        TU_ASSERT_EQ(req->xheader_len, cases[i].in);
        TU_ASSERT_EQ(req->max_xheader_len, cases[i].rounded);
        TU_ASSERT_NULL(req->data);
        TU_ASSERT_EQ(req->data_len, 0);
        TU_ASSERT_NULL(req->connection);
        TU_ASSERT_NULL(req->socket);
        TU_ASSERT(req->ops.recv_accept == NULL);
        TU_ASSERT(req->ops.io_done == NULL);
        TU_ASSERT_EQ(req->user_size, user_size);
        /* just past the xheader area, also with no user part (spec 1.5) */
        TU_ASSERT_PTR_EQ(req->user, (char *)&req->xheader + req->max_xheader_len);
        /* the whole xheader area and the user area are ours */
        memset((void *)&req->xheader, 0x11, req->max_xheader_len);
        if (user_size) memset((void *)req->user, 0x22, user_size);
        TU_ASSERT(pscom_req_is_done(req));
        TU_ASSERT(pscom_req_successful(req));
        pscom_request_free(req);
    }
}

static void check_open_socket_rules(void)
{
    /* refused with EINVAL and one error line each, which names the rule */
    tu_capture_begin();
    errno = 0;
    TU_ASSERT_NULL(pscom_open_socket(0, 0, PSCOM_RANK_UNDEFINED, 0));
    TU_ASSERT_EQ(errno, EINVAL);
    TU_ASSERT_NULL(pscom_open_socket(0, 0, PSCOM_RANK_UNDEFINED,
                                     PSCOM_SOCK_FLAG_INTRA_JOB | PSCOM_SOCK_FLAG_INTER_JOB));
    char *said = tu_capture_end();
    TU_ASSERT_EQ(tu_count(said, "exactly one of PSCOM_SOCK_FLAG_INTRA_JOB and "
                                "PSCOM_SOCK_FLAG_INTER_JOB must be set"), 2);
    free(said);
    /* userdata sizes whose allocation would wrap: NULL (spec 5.10) */
    tu_capture_begin();
    static const size_t huge[] = {SIZE_MAX, SIZE_MAX - 40};
    for (size_t i = 0; i < sizeof(huge) / sizeof(huge[0]); i++) {
        errno = 0;
        TU_ASSERT_NULL(pscom_open_socket(huge[i], 0, 0, PSCOM_SOCK_FLAG_INTER_JOB));
        TU_ASSERT_EQ(errno, ENOMEM);
        errno = 0;
        TU_ASSERT_NULL(pscom_open_socket(0, huge[i], 0, PSCOM_SOCK_FLAG_INTER_JOB));
        TU_ASSERT_EQ(errno, ENOMEM);
    }
    free(tu_capture_end());
    pscom_socket_t *intra = pscom_open_socket(0, 0, 3, PSCOM_SOCK_FLAG_INTRA_JOB);
    TU_ASSERT_NOT_NULL(intra);
    TU_ASSERT_NULL(pscom_open_socket(0, 0, 3, PSCOM_SOCK_FLAG_INTRA_JOB));

    pscom_socket_t *s = pscom_open_socket(16, 24, 5, PSCOM_SOCK_FLAG_INTER_JOB);
    TU_ASSERT_NOT_NULL(s);
    TU_ASSERT_EQ(s->listen_portno, -1);
    TU_ASSERT_EQ(pscom_get_portno(s), -1);
    TU_ASSERT(s->ops.con_accept == NULL);
    TU_ASSERT(s->ops.con_error == NULL);
    TU_ASSERT(s->ops.default_recv == NULL);
    TU_ASSERT_EQ(s->local_con_info.rank, 5);
    TU_ASSERT_EQ(s->userdata_size, 16);
    TU_ASSERT_EQ(s->connection_userdata_size, 24);
    TU_ASSERT_EQ(s->local_con_info.node_id, pscom_get_nodeid());
    memset((void *)s->userdata, 0x33, 16);
    {
        char want[16];
        snprintf(want, sizeof(want), "p%d", (int)getpid());
        TU_ASSERT_MSG(strncmp(s->local_con_info.name, want, 8) == 0,
                      "default socket name \"%.8s\", expected \"%.8s\"",
                      s->local_con_info.name, want);
    }
    pscom_socket_set_name(s, "abcdefghij");
    TU_ASSERT_MEM_EQ(s->local_con_info.name, "abcdefgh", 8);
    pscom_socket_set_name(s, "xy");
    TU_ASSERT_STR_EQ(s->local_con_info.name, "xy");

    pscom_connection_t *c = pscom_open_connection(s);
    TU_ASSERT_NOT_NULL(c);
    TU_ASSERT_EQ(c->userdata_size, 24);
    TU_ASSERT_PTR_EQ(c->socket, s);
    TU_ASSERT_EQ(c->state, PSCOM_CON_STATE_CLOSED);
    TU_ASSERT_EQ(c->type, PSCOM_CON_TYPE_NONE);
    memset((void *)c->userdata, 0x44, 24);
    pscom_close_connection(c);

    /* con-type mask */
    TU_ASSERT_EQ(pscom_con_type_mask_is_set(s, PSCOM_CON_TYPE_TCP), 1);
    TU_ASSERT_EQ(pscom_con_type_mask_is_set(s, PSCOM_CON_TYPE_SHM), 1);
    pscom_con_type_mask_only(s, PSCOM_CON_TYPE_TCP);
    TU_ASSERT_EQ(pscom_con_type_mask_is_set(s, PSCOM_CON_TYPE_TCP), 1);
    TU_ASSERT_EQ(pscom_con_type_mask_is_set(s, PSCOM_CON_TYPE_SHM), 0);
    void *backup = pscom_con_type_mask_backup(s);
    TU_ASSERT_NOT_NULL(backup);
    pscom_con_type_mask_add(s, PSCOM_CON_TYPE_SHM);
    TU_ASSERT_EQ(pscom_con_type_mask_is_set(s, PSCOM_CON_TYPE_SHM), 1);
    pscom_con_type_mask_restore(s, backup);
    TU_ASSERT_EQ(pscom_con_type_mask_is_set(s, PSCOM_CON_TYPE_SHM), 0);
    TU_ASSERT_EQ(pscom_con_type_mask_is_set(s, PSCOM_CON_TYPE_TCP), 1);
    pscom_con_type_mask_del(s, PSCOM_CON_TYPE_TCP);
    TU_ASSERT_EQ(pscom_con_type_mask_is_set(s, PSCOM_CON_TYPE_TCP), 0);
    pscom_con_type_mask_all(s);
    TU_ASSERT_EQ(pscom_con_type_mask_is_set(s, PSCOM_CON_TYPE_TCP), 1);
    TU_ASSERT_EQ(pscom_con_type_mask_is_set(s, PSCOM_CON_TYPE_SHM), 1);

    pscom_close_socket(s);
    pscom_close_socket(intra);

    TU_ASSERT_OK(pscom_init(PSCOM_VERSION)); /* stored result */
}

static char *expected_ep(pscom_socket_t *sock)
{
    char buf[128];
    unsigned id = (unsigned)sock->local_con_info.node_id;
    snprintf(buf, sizeof(buf), "%u.%u.%u.%u:%u@%.8s", (id >> 24) & 0xff,
             (id >> 16) & 0xff, (id >> 8) & 0xff, id & 0xff,
             (unsigned)sock->listen_portno, sock->local_con_info.name);
    return strdup(buf);
}

static void check_ep(pscom_socket_t *sock, const char *want)
{
    char *ep = NULL;
    TU_ASSERT_OK(pscom_socket_get_ep_str(sock, &ep));
    TU_ASSERT_STR_EQ(ep, want);
    pscom_socket_free_ep_str(ep);
}

/* a re-listen that fails keeps the old listener */
static void check_relisten_busy(void)
{
    pscom_socket_t *s = pscom_open_socket(0, 0, PSCOM_RANK_UNDEFINED, PSCOM_SOCK_FLAG_INTER_JOB);
    TU_ASSERT_NOT_NULL(s);
    TU_ASSERT_OK(pscom_listen(s, PSCOM_ANYPORT));
    int port   = s->listen_portno;
    char *want = expected_ep(s);
    int busy;
    int bfd = tu_tcp_socket(INADDR_ANY, 1, &busy);
    pscom_stop_listen(s);
    tu_capture_begin();
    errno = 0;
    TU_ASSERT_ERR(pscom_listen(s, busy), PSCOM_ERR_STDERROR);
    int err = errno;
    free(tu_capture_end());
    TU_ASSERT_EQ(err, EADDRINUSE);
    TU_ASSERT_EQ(s->listen_portno, port);
    TU_ASSERT_EQ(pscom_get_portno(s), port);
    TU_ASSERT_EQ(s->local_con_info.tcp.portno, port);
    check_ep(s, want);
    pscom_resume_listen(s);
    tu_step("TCP connect to the old listener after a failed re-listen");
    close(tu_tcp_connect(port)); /* refused if the old listener was closed */
    close(bfd);
    pscom_close_socket(s);
    free(want);
}

static const int bad_ports[] = {65536, 103888, -2, -5, INT_MIN, INT_MAX};
#define NBAD_PORTS ((int)(sizeof(bad_ports) / sizeof(bad_ports[0])))

/* port numbers out of range: refused (spec 1.3: other failures give
 * STDERROR with errno set), nothing bound, the socket as it was */
static void listen_bad_ports(pscom_socket_t *s, int port)
{
    tu_capture_begin();
    for (int i = 0; i < NBAD_PORTS; i++) {
        errno = 0;
        TU_ASSERT_ERR(pscom_listen(s, bad_ports[i]), PSCOM_ERR_STDERROR);
        TU_ASSERT_EQ(errno, EINVAL);
        TU_ASSERT_EQ(s->listen_portno, port);
        TU_ASSERT_EQ(s->local_con_info.tcp.portno, port);
    }
    free(tu_capture_end());
}

static void check_listen_range(void)
{
    pscom_socket_t *s = pscom_open_socket(0, 0, PSCOM_RANK_UNDEFINED, PSCOM_SOCK_FLAG_INTER_JOB);
    TU_ASSERT_NOT_NULL(s);
    listen_bad_ports(s, -1);
    char *ep = NULL;
    errno    = 0;
    TU_ASSERT_ERR(pscom_socket_get_ep_str(s, &ep), PSCOM_ERR_STDERROR);
    TU_ASSERT_EQ(errno, EINVAL);
    TU_ASSERT_OK(pscom_listen(s, PSCOM_ANYPORT));
    int port = s->listen_portno;
    listen_bad_ports(s, port); /* active */
    pscom_stop_listen(s);
    listen_bad_ports(s, port); /* inactive: a new port could be bound */
    pscom_close_socket(s);
}

/* ---------------- multi-process part ---------------- */

static pscom_connection_t *accepted[8];
static int naccepted;

static void on_accept(pscom_connection_t *con)
{
    if (naccepted < 8) accepted[naccepted] = con;
    naccepted++;
}

static pscom_request_t *post_parked_any(pscom_socket_t *sock)
{
    pscom_request_t *req = pscom_request_create(0, 0);
    req->connection      = NULL;
    req->socket          = sock;
    req->ops.recv_accept = tu_accept_none;
    pscom_post_recv(req);
    TU_ASSERT(!pscom_req_is_done(req));
    return req;
}

/* pscom_close_socket() must fail the socket's posted any-source receive */
static void close_socket_fails(pscom_socket_t *sock, pscom_request_t *parked)
{
    pscom_close_socket(sock);
    TU_ASSERT_MSG(pscom_req_is_done(parked) && (parked->state & PSCOM_REQ_STATE_ERROR),
                  "pscom_close_socket did not fail the socket's posted "
                  "any-source receive (spec 1.2): [%s]",
                  tu_state_str(parked->state));
    pscom_request_free(parked);
}

static int server(tu_ctx_t *ctx)
{
    check_request_defaults();
    check_open_socket_rules();
    check_listen_range();
    check_relisten_busy();

    pscom_socket_t *sock = pscom_open_socket(0, 0, 0, PSCOM_SOCK_FLAG_INTER_JOB);
    TU_ASSERT_NOT_NULL(sock);
    pscom_socket_set_name(sock, SRV_NAME);
    sock->ops.con_accept = on_accept;
    sock->ops.con_error  = tu_on_con_error;

    TU_ASSERT_OK(pscom_listen(sock, PSCOM_ANYPORT));
    int port = sock->listen_portno;
    TU_ASSERT_GT(port, 0);
    TU_ASSERT_EQ(pscom_get_portno(sock), port);
    TU_ASSERT_EQ(sock->local_con_info.tcp.portno, port);
    TU_ASSERT_OK(pscom_listen(sock, PSCOM_ANYPORT));
    TU_ASSERT_EQ(sock->listen_portno, port);
    TU_ASSERT_OK(pscom_listen(sock, port));
    TU_ASSERT_EQ(sock->listen_portno, port);
    TU_ASSERT_ERR(pscom_listen(sock, port == 65535 ? port - 1 : port + 1), PSCOM_ERR_ALREADY);
    TU_ASSERT_EQ(sock->listen_portno, port);

    char *want = expected_ep(sock);
    check_ep(sock, want);
    check_ep(sock, want);
    pscom_stop_listen(sock);
    TU_ASSERT_EQ(sock->listen_portno, port);
    check_ep(sock, want);
    pscom_resume_listen(sock);
    pscom_suspend_listen(sock);
    check_ep(sock, want);
    pscom_resume_listen(sock);
    check_ep(sock, want);

    tu_server_listen(ctx, sock); /* listen is a no-op now; publishes ep */
    TU_ASSERT_STR_EQ(ctx->ep, want);
    TU_ASSERT_EQ(sock->listen_portno, port);

    pscom_connection_t *cons[NCLIENTS + 1];
    tu_server_accept_all(ctx, sock, cons);

    /* con_accept on exactly the listed connections */
    TU_ASSERT_EQ(naccepted, NCLIENTS);
    int listed = 0;
    for (pscom_connection_t *c = pscom_get_next_connection(sock, NULL); c;
         c                     = pscom_get_next_connection(sock, c)) {
        listed++;
        TU_ASSERT_LE(listed, NCLIENTS);
        int found = 0;
        for (int i = 0; i < NCLIENTS; i++) found += accepted[i] == c;
        TU_ASSERT_MSG(found == 1, "listed connection %p was not passed to con_accept",
                      (void *)c);
        TU_ASSERT_EQ(c->state, PSCOM_CON_STATE_RW);
        TU_ASSERT_PTR_EQ(c->socket, sock);
    }
    TU_ASSERT_EQ(listed, NCLIENTS);
    for (int r = 1; r <= NCLIENTS; r++) {
        char name[16];
        snprintf(name, sizeof(name), "client%02d", r);
        TU_ASSERT_EQ(cons[r]->remote_con_info.rank, r);
        TU_ASSERT_MEM_EQ(cons[r]->remote_con_info.name, name, 8);
        int found = 0;
        for (int i = 0; i < NCLIENTS; i++) found += accepted[i] == cons[r];
        TU_ASSERT_EQ(found, 1);
    }

    pscom_request_t *parked = post_parked_any(sock);
    for (int r = 1; r <= NCLIENTS; r++) tu_send_tag(cons[r], TAG_CLOSE);

    /* each client closes its socket: EOF per connection */
    while (tu_nerrs < NCLIENTS) pscom_wait_any();
    TU_ASSERT_EQ(tu_nerrs, NCLIENTS);
    for (int i = 0; i < NCLIENTS; i++) {
        int found = 0;
        for (int r = 1; r <= NCLIENTS; r++) found += tu_errs[i].con == cons[r];
        TU_ASSERT_EQ(found, 1);
        TU_ASSERT_EQ(tu_errs[i].op, PSCOM_OP_READ);
        TU_ASSERT_ERR(tu_errs[i].err, PSCOM_ERR_EOF);
    }
    TU_ASSERT(!pscom_req_is_done(parked));

    close_socket_fails(sock, parked);
    free(want);
    return 0;
}

static int client(tu_ctx_t *ctx)
{
    pscom_socket_t *sock = tu_open_socket(ctx, 0, 0); /* rank = ctx->rank */
    pscom_connection_t *con;
    if (ctx->rank == 3) {
        /* host name instead of the dotted quad (spec 5.8) */
        const char *ep    = tu_client_get_ep(ctx);
        const char *colon = strchr(ep, ':');
        TU_ASSERT_NOT_NULL(colon);
        char buf[256];
        snprintf(buf, sizeof(buf), "localhost%s", colon);
        con = pscom_open_connection(sock);
        TU_ASSERT_OK(pscom_connect(con, buf, TU_SERVER, PSCOM_CON_FLAG_DIRECT));
        TU_ASSERT_EQ(con->state, PSCOM_CON_STATE_RW);
        tu_check_con_type(con);
        uint32_t hello[2] = {TU_TAG_HELLO, (uint32_t)ctx->rank};
        pscom_send(con, hello, sizeof(hello), NULL, 0);
        tu_wait_tag(con, NULL, TU_TAG_WELCOME);
    } else {
        con = tu_client_connect(ctx, sock);
    }
    TU_ASSERT_PTR_EQ(con->socket, sock);
    TU_ASSERT_EQ(con->remote_con_info.rank, TU_SERVER);
    TU_ASSERT_MEM_EQ(con->remote_con_info.name, SRV_NAME, 8);
    TU_ASSERT_PTR_EQ(pscom_get_next_connection(sock, NULL), con);
    TU_ASSERT_NULL(pscom_get_next_connection(sock, con));

    tu_wait_tag(con, NULL, TAG_CLOSE);
    pscom_request_t *parked = post_parked_any(sock);
    close_socket_fails(sock, parked);
    return 0;
}

/* ---------------- listen on fd 0 ---------------- */

static int fd0_server(tu_ctx_t *ctx)
{
    int port;
    int lfd = tu_tcp_socket(INADDR_ANY, 8, &port); /* blocking, as inetd hands it over */
    TU_ASSERT_EQ(dup2(lfd, 0), 0);
    close(lfd);
    TU_ASSERT_EQ(fcntl(0, F_GETFL) & O_NONBLOCK, 0);
    pscom_socket_t *sock = tu_open_socket(ctx, 0, 0);
    TU_ASSERT_OK(pscom_listen(sock, PSCOM_LISTEN_FD0));
    TU_ASSERT_EQ(sock->listen_portno, port);
    TU_ASSERT_EQ(sock->local_con_info.tcp.portno, port);
    TU_ASSERT(fcntl(0, F_GETFL) & O_NONBLOCK);
    TU_ASSERT(fcntl(0, F_GETFD) & FD_CLOEXEC);
    /* tu_server_listen's pscom_listen(ANYPORT) keeps the fd 0 listener */
    pscom_connection_t *con = tu_server_accept_one(ctx, sock);
    TU_ASSERT_EQ(sock->listen_portno, port);
    tu_echo_server(con, 7);
    pscom_close_socket(sock);
    return 0;
}

static int fd0_client(tu_ctx_t *ctx)
{
    pscom_socket_t *sock = tu_open_socket(ctx, 0, 0);
    tu_echo_client(tu_client_connect(ctx, sock), 7);
    pscom_close_socket(sock);
    return 0;
}

/* ---------------- closing while a peer connects ---------------- */

static int relay[2]; /* client 2 -> client 1: "done, answer the server now" */
static int close_accepts;

static void count_accept(pscom_connection_t *con)
{
    (void)con;
    close_accepts++;
}

/* server: client 1 connected; client 2 does its part around our close */
static int close_server(tu_ctx_t *ctx)
{
    pscom_socket_t *sock = tu_open_socket(ctx, 0, 0);
    sock->ops.con_accept = count_accept;
    tu_server_listen(ctx, sock);
    pscom_connection_t *c1 = tu_wait_tag(NULL, sock, TU_TAG_HELLO);
    tu_send_tag(c1, TU_TAG_WELCOME);
    TU_ASSERT_EQ(close_accepts, 1);

    tu_signal(ctx, 2, 1);
    if (tu_wait_signal(ctx, 2) == 2) { /* close_timeout: client 2's TCP connection is there */
        tu_step("pscom_close_socket (client 1 does not answer, PSP_SHUTDOWN_TIMEOUT=1)");
        pscom_close_socket(sock);
        tu_signal(ctx, 2, 3);
    } else {
        tu_step("pscom_close_socket while client 2 connects");
        pscom_close_socket(sock);
    }
    TU_ASSERT_EQ(close_accepts, 1);
    return 0;
}

static void relay_write(void)
{
    ssize_t w;
    while ((w = write(relay[1], "x", 1)) < 0 && errno == EINTR) {
    }
    TU_ASSERT_EQ(w, 1);
}

static void relay_read(void)
{
    char c;
    ssize_t r;
    while ((r = read(relay[0], &c, 1)) < 0 && errno == EINTR) {
    }
    TU_ASSERT_EQ(r, 1);
}

/* client 1: connected, then out of pscom (the server's EOF stays
 * unanswered) until client 2 is done */
static void close_client1(tu_ctx_t *ctx, pscom_socket_t *sock)
{
    tu_client_connect(ctx, sock);
    tu_step("waiting for client 2, out of pscom");
    relay_read();
    pscom_close_socket(sock);
}

static int close_accept_client(tu_ctx_t *ctx)
{
    pscom_socket_t *sock = tu_open_socket(ctx, 0, 0);
    sock->ops.con_error  = tu_on_con_error;
    if (ctx->rank == 1) {
        close_client1(ctx, sock);
        return 0;
    }
    const char *ep = tu_client_get_ep(ctx);
    TU_ASSERT_EQ(tu_wait_signal(ctx, TU_SERVER), 1);
    tu_signal(ctx, TU_SERVER, 1);
    /* the server is in pscom_close_socket now (or about to be) */
    pscom_connection_t *con = pscom_open_connection(sock);
    TU_ASSERT_NOT_NULL(con);
    tu_step("pscom_connect(DIRECT) to the closing server");
    pscom_err_t rc = pscom_connect(con, ep, TU_SERVER, PSCOM_CON_FLAG_DIRECT);
    TU_ASSERT_MSG(rc != PSCOM_SUCCESS, "a socket in pscom_close_socket accepted a new "
                                       "connection (state %s)",
                  pscom_con_state_str(con->state));
    relay_write();
    pscom_close_socket(sock);
    return 0;
}

static int close_timeout_client(tu_ctx_t *ctx)
{
    pscom_socket_t *sock = tu_open_socket(ctx, 0, 0);
    if (ctx->rank == 1) {
        close_client1(ctx, sock);
        return 0;
    }
    const char *ep = tu_client_get_ep(ctx);
    TU_ASSERT_EQ(tu_wait_signal(ctx, TU_SERVER), 1);
    int fd = tu_tcp_connect(atoi(strchr(ep, ':') + 1)); /* in the backlog: sends nothing */
    tu_signal(ctx, TU_SERVER, 2);
    TU_ASSERT_EQ(tu_wait_signal(ctx, TU_SERVER), 3); /* its close returned */
    char c;
    ssize_t r = recv(fd, &c, 1, MSG_DONTWAIT);
    TU_ASSERT_MSG(r == 0 || (r < 0 && errno == ECONNRESET),
                  "the server still holds a connection to its closed socket: recv = %zd (%s)",
                  r, r < 0 ? strerror(errno) : "data");
    close(fd);
    relay_write();
    pscom_close_socket(sock);
    return 0;
}

/* client 2's refused connect is not retried for long */
static void close_accept_env(const tu_ctx_t *ctx)
{
    (void)ctx;
    setenv("PSP_RETRY", "1", 0);
}

static void close_timeout_env(const tu_ctx_t *ctx)
{
    if (ctx->rank == TU_SERVER) setenv("PSP_SHUTDOWN_TIMEOUT", "1", 1);
}

/* ---------------- one timeout for all sockets ---------------- */

#define CA_SOCKS 3
static int ca_accepts;

static void ca_count_accept(pscom_connection_t *con)
{
    (void)con;
    ca_accepts++;
}

static int close_all_server(tu_ctx_t *ctx)
{
    uint32_t port = tu_wait_signal(ctx, 1);
    char ep[64];
    snprintf(ep, sizeof(ep), "127.0.0.1:%u@cl", port);
    for (int i = 0; i < CA_SOCKS; i++) {
        pscom_socket_t *s       = tu_open_socket(ctx, 0, 0);
        pscom_connection_t *con = pscom_open_connection(s);
        TU_ASSERT_OK(pscom_connect(con, ep, 1, PSCOM_CON_FLAG_DIRECT));
    }
    TU_ASSERT_EQ(tu_wait_signal(ctx, 1), 1); /* the client has them all, and stops */
    tu_capture_begin();
    pscom_close_socket(NULL);
    char *log = tu_capture_end();
    TU_ASSERT_EQ(tu_count(log, "giving up on"), 1);
    TU_ASSERT_EQ(tu_count(log, "giving up on 3 connection(s)"), 1);
    free(log);
    tu_signal(ctx, 1, 2);
    return 0;
}

static int close_all_client(tu_ctx_t *ctx)
{
    pscom_socket_t *s    = tu_open_socket(ctx, 0, 0);
    s->ops.con_accept    = ca_count_accept;
    TU_ASSERT_OK(pscom_listen(s, PSCOM_ANYPORT));
    tu_signal(ctx, TU_SERVER, (uint32_t)pscom_get_portno(s));
    while (ca_accepts < CA_SOCKS) pscom_wait_any();
    tu_signal(ctx, TU_SERVER, 1);
    TU_ASSERT_EQ(tu_wait_signal(ctx, TU_SERVER), 2); /* out of pscom meanwhile */
    pscom_close_socket(s);
    return 0;
}

static void close_all_env(const tu_ctx_t *ctx)
{
    if (ctx->rank != TU_SERVER) return;
    setenv("PSP_SHUTDOWN_TIMEOUT", "1", 1);
    setenv("PSP_DEBUG", "2", 1); /* the giving up is a warning */
}

int main(void)
{
    int rc = tu_run("sockets", NCLIENTS, server, client, NULL);
    rc |= tu_run("listen_fd0", 1, fd0_server, fd0_client, NULL);
    if (pipe(relay) < 0) return 1;
    tu_opts_t opts = {.before_init = close_accept_env, .timeout = 30};
    rc |= tu_run("close_accept", 2, close_server, close_accept_client, &opts);
    opts.before_init = close_timeout_env;
    rc |= tu_run("close_timeout", 2, close_server, close_timeout_client, &opts);
    opts.before_init = close_all_env;
    rc |= tu_run("close_all_timeout", 1, close_all_server, close_all_client, &opts);
    return rc;
}
