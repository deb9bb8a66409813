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
 */
#define _GNU_SOURCE
#include "pscom_testutil.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* ---- helpers ---------------------------------------------------------------- */

static int count_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    TU_ASSERT_NOT_NULL(d);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d))) n += e->d_name[0] != '.';
    closedir(d);
    return n - 1;
}

/* wait for a control value while pscom keeps progressing */
static uint32_t wait_signal_progress(tu_ctx_t *ctx, int peer)
{
    int fd = ctx->rank == TU_SERVER ? ctx->ctl[peer] : ctx->ctl[0];
    for (;;) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, 0) > 0) return tu_wait_signal(ctx, peer);
        if (!pscom_test_any()) {
            p.revents = 0;
            poll(&p, 1, 1);
        }
    }
}

/* stderr into a temporary file, to check what the library printed */
static int saved_stderr = -1;
static FILE *capture;

static void capture_begin(void)
{
    fflush(stderr);
    capture = tmpfile();
    TU_ASSERT_NOT_NULL(capture);
    saved_stderr = dup(2);
    TU_ASSERT_GE(saved_stderr, 0);
    TU_ASSERT_GE(dup2(fileno(capture), 2), 0);
}

/* returns the captured text (malloc'ed) and echoes it to the real stderr */
static char *capture_end(void)
{
    fflush(stderr);
    dup2(saved_stderr, 2);
    close(saved_stderr);
    long len = ftell(capture);
    char *buf = tu_malloc((size_t)len + 1);
    rewind(capture);
    size_t n = fread(buf, 1, (size_t)len, capture);
    buf[n]   = 0;
    fclose(capture);
    fprintf(stderr, "%s[captured library output:]\n%s[end]\n", tu_who(), buf);
    return buf;
}

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

static void send_check(pscom_connection_t *con, uint32_t seed)
{
    char buf[3000];
    tu_fill(buf, sizeof(buf), seed);
    pscom_send(con, &seed, sizeof(seed), buf, sizeof(buf));
}

static void recv_check(pscom_connection_t *con, uint32_t seed)
{
    char buf[3000];
    uint32_t xh;
    TU_ASSERT_OK(pscom_recv(con, NULL, &xh, sizeof(xh), buf, sizeof(buf)));
    TU_ASSERT_EQ(xh, seed);
    TU_ASSERT_PATTERN(buf, sizeof(buf), seed);
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

static int stop_server(tu_ctx_t *ctx)
{
    pscom_socket_t *s = open_sock(ctx, NULL);
    tu_signal(ctx, 1, (uint32_t)s->listen_portno);
    char *ep = peer_ep(s, tu_wait_signal(ctx, 1), "client01");
    pscom_connection_t *c = ondemand(s, ep, 1);
    TU_ASSERT_EQ(tu_wait_signal(ctx, 1), 1); /* the client has its connection, is suspended */
    pscom_stop_listen(s);

    send_check(c, 11); /* we are the higher name: back-connect */
    recv_check(c, 12);
    TU_ASSERT_NE(c->type, PSCOM_CON_TYPE_ONDEMAND);
    send_check(c, 13);
    TU_ASSERT_EQ(accepts, 0);

    /* the client tries a DIRECT connect to our stopped listener */
    TU_ASSERT_EQ(wait_signal_progress(ctx, 1), 2);
    pscom_resume_listen(s);
    tu_signal(ctx, 1, 3);
    TU_ASSERT_EQ(wait_signal_progress(ctx, 1), 4); /* it connected */
    TU_ASSERT_EQ(accepts, 1);
    recv_check(c, 14);
    pscom_close_socket(s);
    free(ep);
    return 0;
}

static int stop_client(tu_ctx_t *ctx)
{
    pscom_socket_t *s = open_sock(ctx, NULL);
    tu_signal(ctx, TU_SERVER, (uint32_t)s->listen_portno);
    char *ep = peer_ep(s, tu_wait_signal(ctx, TU_SERVER), "server");
    pscom_connection_t *c = ondemand(s, ep, 0);
    pscom_suspend_listen(s);
    tu_signal(ctx, TU_SERVER, 1);

    recv_check(c, 11);
    TU_ASSERT_NE(c->type, PSCOM_CON_TYPE_ONDEMAND);
    send_check(c, 12);
    recv_check(c, 13);

    /* the server's listener is off now that nothing waits any more */
    pscom_connection_t *d = pscom_open_connection(s);
    int before            = errors;
    TU_ASSERT_ERR(pscom_connect(d, ep, 0, PSCOM_CON_FLAG_DIRECT), PSCOM_ERR_STDERROR);
    TU_ASSERT_EQ(errno, ETIMEDOUT);
    TU_ASSERT_EQ(errors, before + 1);
    pscom_close_connection(d);
    tu_signal(ctx, TU_SERVER, 2);
    TU_ASSERT_EQ(tu_wait_signal(ctx, TU_SERVER), 3); /* resumed */
    d = pscom_open_connection(s);
    TU_ASSERT_OK(pscom_connect(d, ep, 0, PSCOM_CON_FLAG_DIRECT));
    TU_ASSERT_EQ(d->state, PSCOM_CON_STATE_RW);
    tu_signal(ctx, TU_SERVER, 4);
    send_check(c, 14);
    pscom_close_socket(s);
    free(ep);
    return 0;
}

/* ---- refused ------------------------------------------------------------------------ */

static int refused_server(tu_ctx_t *ctx)
{
    pscom_socket_t *s = open_sock(ctx, NULL);
    int fds0          = count_fds();
    tu_signal(ctx, 1, (uint32_t)s->listen_portno);
    /* no on-demand connection to the client: both of its attempts fail */
    TU_ASSERT_EQ(wait_signal_progress(ctx, 1), 1);
    TU_ASSERT_EQ(accepts, 0);
    TU_ASSERT_NULL(pscom_get_next_connection(s, NULL));
    TU_ASSERT_EQ(count_fds(), fds0);
    /* still fine for a proper connection */
    pscom_connection_t *cons[2];
    tu_server_accept_all(ctx, s, cons);
    recv_check(cons[1], 21);
    send_check(cons[1], 22);
    pscom_close_socket(s);
    return 0;
}

static int refused_client(tu_ctx_t *ctx)
{
    pscom_socket_t *lo = open_sock(ctx, NULL);       /* "client01" < "server" */
    pscom_socket_t *hi = open_sock(ctx, "zzzzzzzz"); /* > "server" */
    uint32_t port      = tu_wait_signal(ctx, TU_SERVER);
    char *ep           = peer_ep(lo, port, "server");

    capture_begin();
    pscom_connection_t *a = ondemand(lo, ep, 0);
    send_fails(a, PSCOM_ERR_CONNECTION_REFUSED);
    pscom_connection_t *b = ondemand(hi, ep, 0);
    send_fails(b, PSCOM_SUCCESS);
    char *log = capture_end();
    TU_ASSERT_MSG(strstr(log, "no waiting on-demand connection") && strstr(log, "PSP_RETRY=2"),
                  "the refusal is not explained in the log");
    free(log);
    pscom_close_connection(a);
    pscom_close_connection(b);
    tu_signal(ctx, TU_SERVER, 1);

    ctx->ep               = ep;
    pscom_connection_t *c = tu_client_connect(ctx, lo);
    send_check(c, 21);
    recv_check(c, 22);
    pscom_close_socket(NULL);
    return 0;
}

/* ---- no_backconnect -------------------------------------------------------------- */

static int noback_server(tu_ctx_t *ctx)
{
    pscom_socket_t *s = open_sock(ctx, NULL);
    tu_signal(ctx, 1, (uint32_t)s->listen_portno);
    char *ep              = peer_ep(s, tu_wait_signal(ctx, 1), "client01");
    pscom_connection_t *c = ondemand(s, ep, 1);
    tu_signal(ctx, 1, 1);
    capture_begin();
    send_fails(c, PSCOM_SUCCESS);
    char *log = capture_end();
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
    tu_signal(ctx, TU_SERVER, (uint32_t)s->listen_portno);
    char *ep              = peer_ep(s, tu_wait_signal(ctx, TU_SERVER), "server");
    pscom_connection_t *c = ondemand(s, ep, 0);
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

static int dead_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    TU_ASSERT_GE(fd, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_ANY)};
    TU_ASSERT_EQ(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    socklen_t len = sizeof(sa);
    TU_ASSERT_EQ(getsockname(fd, (struct sockaddr *)&sa, &len), 0);
    return fd; /* bound, not listening: connects are refused */
}

static int gaveup_server(tu_ctx_t *ctx)
{
    pscom_socket_t *s = open_sock(ctx, NULL);
    tu_signal(ctx, 1, (uint32_t)s->listen_portno);
    char *ep              = peer_ep(s, tu_wait_signal(ctx, 1), "client01");
    pscom_connection_t *c = ondemand(s, ep, 1);
    TU_ASSERT_EQ(tu_wait_signal(ctx, 1), 1);
    send_fails(c, PSCOM_ERR_CONNECTION_REFUSED);
    tu_signal(ctx, 1, 2);
    pscom_close_connection(c);
    pscom_close_socket(s);
    free(ep);
    return 0;
}

static int gaveup_client(tu_ctx_t *ctx)
{
    pscom_socket_t *s = open_sock(ctx, NULL);
    int dead          = dead_port();
    struct sockaddr_in sa;
    socklen_t len = sizeof(sa);
    TU_ASSERT_EQ(getsockname(dead, (struct sockaddr *)&sa, &len), 0);
    tu_signal(ctx, TU_SERVER, (uint32_t)s->listen_portno);
    tu_wait_signal(ctx, TU_SERVER);
    char *ep              = peer_ep(s, ntohs(sa.sin_port), "server"); /* wrong port */
    pscom_connection_t *c = ondemand(s, ep, 0);
    tu_signal(ctx, TU_SERVER, 1);
    /* the server's request makes us connect, to nowhere: we fail first */
    while (!errors) pscom_wait_any();
    TU_ASSERT_PTR_EQ(err_con, c);
    TU_ASSERT_EQ(err_op, PSCOM_OP_WRITE);
    TU_ASSERT_EQ(wait_signal_progress(ctx, TU_SERVER), 2);
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
    tu_signal(ctx, 1, (uint32_t)s->listen_portno);
    char *ep              = peer_ep(s, tu_wait_signal(ctx, 1), "samename");
    pscom_connection_t *c = ondemand(s, ep, 1);
    (void)c;
    TU_ASSERT_EQ(wait_signal_progress(ctx, 1), 1);
    pscom_close_socket(s);
    free(ep);
    return 0;
}

static int samename_client(tu_ctx_t *ctx)
{
    pscom_socket_t *s = open_sock(ctx, "samename");
    tu_signal(ctx, TU_SERVER, (uint32_t)s->listen_portno);
    char *ep              = peer_ep(s, tu_wait_signal(ctx, TU_SERVER), "samename");
    pscom_connection_t *c = ondemand(s, ep, 0);
    capture_begin();
    send_fails(c, PSCOM_ERR_INVALID);
    char *log = capture_end();
    TU_ASSERT_MSG(strstr(log, "unique socket names"), "the name clash is not explained");
    free(log);
    tu_signal(ctx, TU_SERVER, 1);
    pscom_close_connection(c);
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
    rc |= tu_run("od_refused", 1, refused_server, refused_client, NULL);
    rc |= tu_run("od_no_backconnect", 1, noback_server, noback_client, NULL);
    rc |= tu_run("od_gave_up", 1, gaveup_server, gaveup_client, NULL);
    rc |= tu_run("od_same_name", 1, samename_server, samename_client, NULL);
    return rc;
}
