/*
 * itest_ondemand_cases: on-demand connections in the situations around the
 * plain case (spec 1.3, 1.10, 3.7 #12, 5.7). Server and client each have
 * one socket; tu_open_socket() names them "server" and "client01", so the
 * client has the lower name: it connects, the server asks it to connect
 * back. Short watchdog and retry settings keep the failure cases quick:
 * PSP_RETRY=2, PSP_PRECON_TCP_RECONNECT_TIMEOUT=100 (ms),
 * PSP_PRECON_TCP_CONNECT_STALLED_MAX=3 (a stall window of 300 ms: wide
 * enough for the connections that must succeed on a loaded machine).
 *
 * "stop_listen": both create on-demand connections, then the server calls
 *   pscom_stop_listen and the client pscom_suspend_listen. The server (the
 *   higher name) writes first, so the connect needs both listeners: the
 *   client's for the back-connect request, the server's for the connect.
 *   Messages flow both ways. Once connected, the listeners really are off:
 *   a new DIRECT connect to the server fails (ETIMEDOUT: nobody accepts),
 *   and works again after pscom_resume_listen.
 * "stop_listen_before": the same with both listeners stopped before the
 *   on-demand connections are made: making them turns the listeners on
 *   again until they are connected (spec 1.3, 5.7; until 2026-11-29 they
 *   stayed off, nobody accepted, and the first message waited forever).
 * "listen_again": the server stops its listener while its on-demand
 *   connection waits (the stop is deferred), then calls pscom_listen(ANYPORT)
 *   again: once connected, its listener stays on, and the client's DIRECT
 *   connect works at once (until 2026-11-29 the deferred stop still
 *   switched it off).
 * "refused": the client has on-demand connections to the server, the
 *   server none to the client. A first write from the lower name (it
 *   connects) and from a higher name ("zzzzzzzz": it asks for a
 *   back-connect) both fail cleanly: the send completes with ERROR,
 *   con_error(WRITE, CONNECTION_REFUSED), an error message that names
 *   PSP_RETRY. The server sees nothing: no con_accept, no connection in
 *   its socket, no fd left open, its own traffic unaffected.
 * "no_backconnect": the client gets the server's back-connect request,
 *   starts its connect and then stops making progress (a peer that hangs).
 *   The server's send does not wait forever: it fails with ERROR and
 *   con_error(WRITE) once its requests are used up.
 * "gave_up": the client's connection to the server points to a dead port,
 *   so the connect back fails; the server, asking again, is told the
 *   client gave up (REJECT FAILED) and fails too, with
 *   CONNECTION_REFUSED.
 * "same_name": both sockets named alike: the first write fails at once
 *   (con_error(WRITE, INVALID)) with an error saying socket names must be
 *   unique; no hang. (The accepting side refuses such a peer too.)
 * "withdrawn" (server only): the server's first write asks a lower name to
 *   connect back, at a plain TCP listener that takes the request and never
 *   answers. Closing the connection then withdraws the request at once:
 *   the send ends with ERROR, and the listener reads EOF while the server
 *   makes no more progress (until 2026-11-27 the request went on until its
 *   stall window ran out, holding its socket and the closed connection).
 */
#define _GNU_SOURCE
#include "pscom_testutil.h"

#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define MSG_LEN 3000 /* data bytes of each checked message */

/* ---- helpers ---------------------------------------------------------------- */

/* stderr into a temporary file, to check what the library printed */

static volatile int accepts;
static pscom_connection_t *err_con;
static pscom_op_t err_op;
static pscom_err_t err_err;
static volatile int errors;

static void on_accept(pscom_connection_t *con)
{
    (void)con;
    accepts++;
}

static void on_error(pscom_connection_t *con, pscom_op_t op, pscom_err_t err)
{
    if (err == PSCOM_ERR_EOF) return;
    err_con = con;
    err_op  = op;
    err_err = err;
    errors++;
}

static pscom_socket_t *open_sock(tu_ctx_t *ctx, const char *name)
{
    pscom_socket_t *s = tu_open_socket(ctx, 0, 0);
    if (name) pscom_socket_set_name(s, name);
    s->ops.con_accept = on_accept;
    s->ops.con_error  = on_error;
    TU_ASSERT_OK(pscom_listen(s, PSCOM_ANYPORT));
    return s;
}

/* "host:port@name" of a peer on this host */
static char *peer_ep(pscom_socket_t *own, uint32_t port, const char *name)
{
    char *ep;
    TU_ASSERT_OK(pscom_socket_get_ep_str(own, &ep));
    *strchr(ep, ':') = 0;
    char *res = tu_malloc(128);
    snprintf(res, 128, "%s:%u@%s", ep, port, name);
    pscom_socket_free_ep_str(ep);
    return res;
}

static pscom_connection_t *ondemand(pscom_socket_t *s, const char *ep, int rank)
{
    pscom_connection_t *c = pscom_open_connection(s);
    TU_ASSERT_NOT_NULL(c);
    TU_ASSERT_OK(pscom_connect(c, ep, rank, PSCOM_CON_FLAG_ONDEMAND));
    TU_ASSERT_EQ(c->type, PSCOM_CON_TYPE_ONDEMAND);
    return c;
}

/* swap listening ports with the peer over the control channel, then open
 * an on-demand connection to it; *ep: the peer's endpoint (malloc'ed) */
static pscom_connection_t *ondemand_to_peer(tu_ctx_t *ctx, pscom_socket_t *s, const char *name,
                                            char **ep)
{
    int peer = ctx->rank == TU_SERVER ? 1 : TU_SERVER;
    tu_signal(ctx, peer, (uint32_t)s->listen_portno);
    *ep = peer_ep(s, tu_wait_signal(ctx, peer), name);
    return ondemand(s, *ep, peer);
}

/* a send that must fail: ERROR, and con_error(WRITE) */
static void send_fails(pscom_connection_t *con, pscom_err_t expected_err)
{
    int before           = errors;
    pscom_request_t *req = pscom_request_create(0, 0);
    req->connection      = con;
    req->data_len        = 0;
    pscom_post_send(req);
    pscom_wait(req);
    TU_ASSERT_STATE_HAS(req->state, PSCOM_REQ_STATE_ERROR | PSCOM_REQ_STATE_DONE);
    pscom_request_free(req);
    while (errors == before) pscom_wait_any();
    TU_ASSERT_PTR_EQ(err_con, con);
    TU_ASSERT_EQ(err_op, PSCOM_OP_WRITE);
    if (expected_err != PSCOM_SUCCESS) TU_ASSERT_ERR(err_err, expected_err);
    TU_ASSERT_EQ(con->state, PSCOM_CON_STATE_CLOSED);
}

/* ---- stop_listen ------------------------------------------------------------------- */

static enum {
    STOP_AFTER,    /* stopped after the on-demand connections were made */
    STOP_BEFORE,   /* stopped before: they turn the listeners on again */
    STOP_RELISTEN, /* stopped, then pscom_listen(ANYPORT): stays on */
} stop_mode;

static int stop_server(tu_ctx_t *ctx)
{
    pscom_socket_t *s = open_sock(ctx, NULL);
    if (stop_mode == STOP_BEFORE) pscom_stop_listen(s);
    char *ep;
    pscom_connection_t *c = ondemand_to_peer(ctx, s, "client01", &ep);
    TU_ASSERT_EQ(tu_wait_signal(ctx, 1), 1); /* the client has its connection, is suspended */
    if (stop_mode != STOP_BEFORE) pscom_stop_listen(s);
    if (stop_mode == STOP_RELISTEN) TU_ASSERT_OK(pscom_listen(s, PSCOM_ANYPORT));

    tu_send_pattern(c, 11, MSG_LEN); /* we are the higher name: back-connect */
    tu_recv_pattern(c, 12, MSG_LEN);
    TU_ASSERT_NE(c->type, PSCOM_CON_TYPE_ONDEMAND);
    tu_send_pattern(c, 13, MSG_LEN);
    TU_ASSERT_EQ(accepts, 0);

    /* the client tries a DIRECT connect to our stopped listener */
    TU_ASSERT_EQ(tu_wait_signal_progress(ctx, 1), 2);
    if (stop_mode != STOP_RELISTEN) pscom_resume_listen(s);
    tu_signal(ctx, 1, 3);
    TU_ASSERT_EQ(tu_wait_signal_progress(ctx, 1), 4); /* it connected */
    TU_ASSERT_EQ(accepts, stop_mode == STOP_RELISTEN ? 2 : 1);
    tu_recv_pattern(c, 14, MSG_LEN);
    pscom_close_socket(s);
    free(ep);
    return 0;
}

static int stop_client(tu_ctx_t *ctx)
{
    pscom_socket_t *s = open_sock(ctx, NULL);
    if (stop_mode == STOP_BEFORE) pscom_suspend_listen(s);
    char *ep;
    pscom_connection_t *c = ondemand_to_peer(ctx, s, "server", &ep);
    if (stop_mode != STOP_BEFORE) pscom_suspend_listen(s);
    tu_signal(ctx, TU_SERVER, 1);

    tu_recv_pattern(c, 11, MSG_LEN);
    TU_ASSERT_NE(c->type, PSCOM_CON_TYPE_ONDEMAND);
    tu_send_pattern(c, 12, MSG_LEN);
    tu_recv_pattern(c, 13, MSG_LEN);

    /* the server's listener is off now that nothing waits any more
     * (unless it listened again) */
    pscom_connection_t *d = pscom_open_connection(s);
    int before            = errors;
    if (stop_mode == STOP_RELISTEN) {
        TU_ASSERT_OK(pscom_connect(d, ep, 0, PSCOM_CON_FLAG_DIRECT));
    } else {
        TU_ASSERT_ERR(pscom_connect(d, ep, 0, PSCOM_CON_FLAG_DIRECT), PSCOM_ERR_STDERROR);
        TU_ASSERT_EQ(errno, ETIMEDOUT);
        TU_ASSERT_EQ(errors, before + 1);
    }
    pscom_close_connection(d);
    tu_signal(ctx, TU_SERVER, 2);
    TU_ASSERT_EQ(tu_wait_signal(ctx, TU_SERVER), 3); /* resumed */
    d = pscom_open_connection(s);
    TU_ASSERT_OK(pscom_connect(d, ep, 0, PSCOM_CON_FLAG_DIRECT));
    TU_ASSERT_EQ(d->state, PSCOM_CON_STATE_RW);
    tu_signal(ctx, TU_SERVER, 4);
    tu_send_pattern(c, 14, MSG_LEN);
    pscom_close_socket(s);
    free(ep);
    return 0;
}

/* ---- refused ------------------------------------------------------------------------ */

static int refused_server(tu_ctx_t *ctx)
{
    pscom_socket_t *s = open_sock(ctx, NULL);
    int fds0          = tu_count_fds();
    tu_signal(ctx, 1, (uint32_t)s->listen_portno);
    /* no on-demand connection to the client: both of its attempts fail */
    TU_ASSERT_EQ(tu_wait_signal_progress(ctx, 1), 1);
    TU_ASSERT_EQ(accepts, 0);
    TU_ASSERT_NULL(pscom_get_next_connection(s, NULL));
    TU_ASSERT_EQ(tu_count_fds(), fds0);
    /* still fine for a proper connection */
    pscom_connection_t *cons[2];
    tu_server_accept_all(ctx, s, cons);
    tu_recv_pattern(cons[1], 21, MSG_LEN);
    tu_send_pattern(cons[1], 22, MSG_LEN);
    pscom_close_socket(s);
    return 0;
}

static int refused_client(tu_ctx_t *ctx)
{
    pscom_socket_t *lo = open_sock(ctx, NULL);       /* "client01" < "server" */
    pscom_socket_t *hi = open_sock(ctx, "zzzzzzzz"); /* > "server" */
    uint32_t port      = tu_wait_signal(ctx, TU_SERVER);
    char *ep           = peer_ep(lo, port, "server");

    tu_capture_begin();
    pscom_connection_t *a = ondemand(lo, ep, 0);
    send_fails(a, PSCOM_ERR_CONNECTION_REFUSED);
    pscom_connection_t *b = ondemand(hi, ep, 0);
    send_fails(b, PSCOM_SUCCESS);
    char *log = tu_capture_end();
    TU_ASSERT_MSG(strstr(log, "no waiting on-demand connection") && strstr(log, "PSP_RETRY=2"),
                  "the refusal is not explained in the log");
    free(log);
    pscom_close_connection(a);
    pscom_close_connection(b);
    tu_signal(ctx, TU_SERVER, 1);

    ctx->ep               = ep;
    pscom_connection_t *c = tu_client_connect(ctx, lo);
    tu_send_pattern(c, 21, MSG_LEN);
    tu_recv_pattern(c, 22, MSG_LEN);
    pscom_close_socket(NULL);
    return 0;
}

/* ---- no_backconnect -------------------------------------------------------------- */

static int noback_server(tu_ctx_t *ctx)
{
    pscom_socket_t *s = open_sock(ctx, NULL);
    char *ep;
    pscom_connection_t *c = ondemand_to_peer(ctx, s, "client01", &ep);
    tu_signal(ctx, 1, 1);
    tu_capture_begin();
    send_fails(c, PSCOM_SUCCESS);
    char *log = tu_capture_end();
    free(log);
    tu_signal(ctx, 1, 2); /* the client may go on */
    pscom_close_connection(c);
    pscom_close_socket(s);
    free(ep);
    return 0;
}

static int noback_client(tu_ctx_t *ctx)
{
    pscom_socket_t *s = open_sock(ctx, NULL);
    char *ep;
    pscom_connection_t *c = ondemand_to_peer(ctx, s, "server", &ep);
    TU_ASSERT_EQ(tu_wait_signal(ctx, TU_SERVER), 1);
    /* progress until the server's request arrived and our connect started */
    while (c->state == PSCOM_CON_STATE_RW && c->type == PSCOM_CON_TYPE_ONDEMAND) pscom_wait_any();
    /* ... then hang (no progress) until the server gave up */
    TU_ASSERT_EQ(tu_wait_signal(ctx, TU_SERVER), 2);
    pscom_close_connection(c);
    pscom_close_socket(s);
    free(ep);
    return 0;
}

/* ---- gave_up ------------------------------------------------------------------------ */

static int gaveup_server(tu_ctx_t *ctx)
{
    pscom_socket_t *s = open_sock(ctx, NULL);
    char *ep;
    pscom_connection_t *c = ondemand_to_peer(ctx, s, "client01", &ep);
    TU_ASSERT_EQ(tu_wait_signal(ctx, 1), 1);
    send_fails(c, PSCOM_ERR_CONNECTION_REFUSED);
    tu_signal(ctx, 1, 2);
    pscom_close_connection(c);
    pscom_close_socket(s);
    free(ep);
    return 0;
}

/* The client gives up its connect back to the dead port at once: with
 * retries, refusals take PSP_RETRY seconds, longer than the server's
 * request waits here (3 stall windows of 300 ms; with the defaults it waits
 * 12 s for the 10 s of retries). */
static void gaveup_before_init(const tu_ctx_t *ctx)
{
    if (ctx->rank != TU_SERVER) setenv("PSP_RETRY", "0", 1);
}

static int gaveup_client(tu_ctx_t *ctx)
{
    pscom_socket_t *s = open_sock(ctx, NULL);
    int port;
    int dead = tu_tcp_socket(INADDR_ANY, 0, &port); /* bound, not listening: refused */
    tu_signal(ctx, TU_SERVER, (uint32_t)s->listen_portno);
    tu_wait_signal(ctx, TU_SERVER);
    char *ep              = peer_ep(s, (uint32_t)port, "server"); /* wrong port */
    pscom_connection_t *c = ondemand(s, ep, 0);
    tu_signal(ctx, TU_SERVER, 1);
    /* the server's request makes us connect, to nowhere: we fail first */
    while (!errors) pscom_wait_any();
    TU_ASSERT_PTR_EQ(err_con, c);
    TU_ASSERT_EQ(err_op, PSCOM_OP_WRITE);
    TU_ASSERT_EQ(tu_wait_signal_progress(ctx, TU_SERVER), 2);
    pscom_close_connection(c);
    pscom_close_socket(s);
    close(dead);
    free(ep);
    return 0;
}

/* ---- same_name ---------------------------------------------------------------------- */

static int samename_server(tu_ctx_t *ctx)
{
    pscom_socket_t *s = open_sock(ctx, "samename");
    char *ep;
    pscom_connection_t *c = ondemand_to_peer(ctx, s, "samename", &ep);
    (void)c;
    TU_ASSERT_EQ(tu_wait_signal_progress(ctx, 1), 1);
    pscom_close_socket(s);
    free(ep);
    return 0;
}

static int samename_client(tu_ctx_t *ctx)
{
    pscom_socket_t *s = open_sock(ctx, "samename");
    char *ep;
    pscom_connection_t *c = ondemand_to_peer(ctx, s, "samename", &ep);
    tu_capture_begin();
    send_fails(c, PSCOM_ERR_INVALID);
    char *log = tu_capture_end();
    TU_ASSERT_MSG(strstr(log, "unique socket names"), "the name clash is not explained");
    free(log);
    tu_signal(ctx, TU_SERVER, 1);
    pscom_close_connection(c);
    pscom_close_socket(s);
    free(ep);
    return 0;
}

/* ---- withdrawn --------------------------------------------------------------------- */

static int withdrawn_server(tu_ctx_t *ctx)
{
    pscom_socket_t *s = open_sock(ctx, NULL);
    int lfd           = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t sl          = sizeof(sa);
    TU_ASSERT_EQ(bind(lfd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    TU_ASSERT_EQ(listen(lfd, 4), 0);
    TU_ASSERT_EQ(getsockname(lfd, (struct sockaddr *)&sa, &sl), 0);
    char *ep = peer_ep(s, ntohs(sa.sin_port), "client01"); /* lower than "server" */
    pscom_connection_t *c = ondemand(s, ep, 1);

    pscom_request_t *req = pscom_request_create(0, 0);
    req->connection      = c;
    req->data_len        = 0;
    pscom_post_send(req); /* asks the peer to connect back */
    struct pollfd pl = {.fd = lfd, .events = POLLIN};
    while (poll(&pl, 1, 0) == 0) pscom_wait_any(); /* the request's connect arrived */
    int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
    TU_ASSERT_MSG(fd >= 0, "accept: %s", strerror(errno));

    pscom_close_connection(c);
    TU_ASSERT_STATE_HAS(req->state, PSCOM_REQ_STATE_ERROR | PSCOM_REQ_STATE_DONE);
    /* no more progress from here: the close alone must have ended the request */
    char buf[256];
    ssize_t n;
    struct pollfd pf = {.fd = fd, .events = POLLIN};
    do {
        TU_ASSERT_MSG(poll(&pf, 1, 10000) == 1, "the back-connect request outlived the close");
        n = recv(fd, buf, sizeof(buf), 0); /* its HELLO, then EOF */
    } while (n > 0);
    TU_ASSERT_EQ(n, 0);
    pscom_request_free(req);
    close(fd);
    close(lfd);
    pscom_close_socket(s);
    free(ep);
    return 0;
}

int main(void)
{
    /* connection set-up over the built-in transports; over ucp in the
     * test entries of its own that set PSP_UCP=1 (test/integration/CMakeLists.txt) */
    setenv("PSP_UCP", "0", 0);
    setenv("PSP_RETRY", "2", 0);
    setenv("PSP_PRECON_TCP_RECONNECT_TIMEOUT", "100", 0);
    setenv("PSP_PRECON_TCP_CONNECT_STALLED_MAX", "3", 0);
    int rc = 0;
    rc |= tu_run("od_stop_listen", 1, stop_server, stop_client, NULL);
    stop_mode = STOP_BEFORE;
    rc |= tu_run("od_stop_listen_before", 1, stop_server, stop_client, NULL);
    stop_mode = STOP_RELISTEN;
    rc |= tu_run("od_listen_again", 1, stop_server, stop_client, NULL);
    rc |= tu_run("od_refused", 1, refused_server, refused_client, NULL);
    rc |= tu_run("od_no_backconnect", 1, noback_server, noback_client, NULL);
    tu_opts_t gaveup = {.before_init = gaveup_before_init};
    rc |= tu_run("od_gave_up", 1, gaveup_server, gaveup_client, &gaveup);
    rc |= tu_run("od_same_name", 1, samename_server, samename_client, NULL);
    rc |= tu_run("od_withdrawn", 0, withdrawn_server, NULL, NULL);
    return rc;
}
