/*
 * itest_connect_errors: pscom_connect failure paths (spec 1.3, 3.7 #10,
 * 5.7 DIRECT, 5.10).
 *
 * Scenario "refused" (single process):
 *  - DIRECT to 127.0.0.1:<port> and to <own node ip>:<port> where nobody
 *    listens (a port we bound with port 0 ourselves and closed again)
 *    returns PSCOM_ERR_STDERROR, con_error(con, PSCOM_OP_CONNECT, ...) is
 *    called, the connection is CLOSED and can be closed;
 *  - unparsable endpoint strings give PSCOM_ERR_STDERROR with errno EINVAL;
 *  - neither or both of DIRECT/ONDEMAND give PSCOM_ERR_INVALID;
 *  - ONDEMAND on a socket that does not listen gives PSCOM_ERR_INVALID;
 *  - pscom_socket_get_ep_str on a socket that does not listen gives
 *    PSCOM_ERR_STDERROR with errno EINVAL;
 *  - pscom_get_next_connection(sock, con) of a connection never connected
 *    or whose DIRECT connect failed returns NULL (it is not in the list).
 * Scenario "handshake" (server = a plain TCP listener, no pscom):
 *  - the listener accepts and closes at once, or answers with garbage and
 *    closes: pscom_connect(DIRECT) must return, either with an error or
 *    with SUCCESS plus con_error(OP_CONNECT) and state CLOSED (5.7);
 *  - the listener echoes what it reads: pscom_connect(DIRECT) fails at once
 *    (EPROTO) and says that its own HELLO came back (until 2026-11-29 it
 *    took its own HELLO for the peer's, its remote_con_info its own).
 *
 * PSP_RETRY is set to 1 (unless the environment sets it) so that refused
 * connects are not retried for 10 seconds.
 */
#include "pscom_testutil.h"

#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* a TCP port where nobody listens: bound (with port 0) and kept so, not
 * listening, so that no test running beside this one can take it (bound
 * and closed again, it could) */
static int dead_port(void)
{
    int port;
    (void)tu_tcp_socket(INADDR_ANY, 0, &port); /* open until the process ends */
    return port;
}

static void expect_refused(pscom_socket_t *sock, const char *ep)
{
    int before              = tu_nerrs;
    pscom_connection_t *con = pscom_open_connection(sock);
    TU_ASSERT_NOT_NULL(con);
    pscom_err_t rc = pscom_connect(con, ep, 0, PSCOM_CON_FLAG_DIRECT);
    TU_ASSERT_MSG(rc != PSCOM_SUCCESS,
                  "pscom_connect(DIRECT, \"%s\") to a closed port returned "
                  "SUCCESS (spec 3.7 #10)",
                  ep);
    TU_ASSERT_ERR(rc, PSCOM_ERR_STDERROR);
    /* con_error(OP_CONNECT) is queued; it runs in some later pscom call */
    for (int i = 0; i < 100 && tu_nerrs == before; i++) pscom_test_any();
    TU_ASSERT_MSG(tu_nerrs == before + 1, "con_error calls: %d (expected 1)", tu_nerrs - before);
    TU_ASSERT_PTR_EQ(tu_errs[before].con, con);
    TU_ASSERT_EQ(tu_errs[before].op, PSCOM_OP_CONNECT);
    TU_ASSERT_NE(tu_errs[before].err, PSCOM_SUCCESS);
    TU_ASSERT_EQ(con->state, PSCOM_CON_STATE_CLOSED);
    TU_ASSERT(pscom_get_next_connection(sock, NULL) != con);
    tu_step("pscom_get_next_connection after a failed connection");
    TU_ASSERT_NULL(pscom_get_next_connection(sock, con)); /* not listed: the end (spec 1.4) */
    pscom_close_connection(con);
}

static void expect_connect_err(pscom_socket_t *sock, const char *ep, uint64_t flags,
                               pscom_err_t expected, int expected_errno)
{
    pscom_connection_t *con = pscom_open_connection(sock);
    TU_ASSERT_NOT_NULL(con);
    errno          = 0;
    pscom_err_t rc = pscom_connect(con, ep, 0, flags);
    int err        = errno;
    TU_ASSERT_MSG(rc == expected, "pscom_connect(\"%s\", flags 0x%llx) = %d (%s), "
                                  "expected %d (%s)",
                  ep, (unsigned long long)flags, (int)rc, tu_err_str(rc),
                  (int)expected, tu_err_str(expected));
    if (expected_errno) TU_ASSERT_EQ(err, expected_errno);
    pscom_close_connection(con);
}

static int refused_server(tu_ctx_t *ctx)
{
    pscom_socket_t *sock = tu_open_socket(ctx, 0, 0);
    sock->ops.con_error  = tu_on_con_error;
    char ep[256];
    int port = dead_port();

    /* a connection never connected is not listed: nothing comes after it
     * (spec 1.4), also with a listed connection (loopback) in the socket */
    pscom_connection_t *fresh = pscom_open_connection(sock);
    TU_ASSERT_NOT_NULL(fresh);
    tu_step("pscom_get_next_connection after a connection never connected");
    TU_ASSERT_NULL(pscom_get_next_connection(sock, fresh));
    pscom_connection_t *loop = pscom_open_connection(sock);
    TU_ASSERT_OK(pscom_connect(loop, NULL, 0, PSCOM_CON_FLAG_DIRECT));
    TU_ASSERT_PTR_EQ(pscom_get_next_connection(sock, NULL), loop);
    TU_ASSERT_NULL(pscom_get_next_connection(sock, fresh));
    TU_ASSERT_NULL(pscom_get_next_connection(sock, loop));
    pscom_close_connection(loop);
    pscom_close_connection(fresh);

    /* not listening yet */
    char *str = NULL;
    errno     = 0;
    TU_ASSERT_ERR(pscom_socket_get_ep_str(sock, &str), PSCOM_ERR_STDERROR);
    TU_ASSERT_EQ(errno, EINVAL);
    snprintf(ep, sizeof(ep), "127.0.0.1:%d@nobody", port);
    expect_connect_err(sock, ep, PSCOM_CON_FLAG_ONDEMAND, PSCOM_ERR_INVALID, 0);

    expect_refused(sock, ep);

    /* the own node address (as in our endpoint string), dead port */
    tu_server_listen(ctx, sock);
    {
        char host[64];
        const char *colon = strchr(ctx->ep, ':');
        TU_ASSERT_NOT_NULL(colon);
        TU_ASSERT_LT((size_t)(colon - ctx->ep), sizeof(host));
        memcpy(host, ctx->ep, (size_t)(colon - ctx->ep));
        host[colon - ctx->ep] = 0;
        snprintf(ep, sizeof(ep), "%s:%d@nobody", host, port);
        expect_refused(sock, ep);
    }

    /* flags */
    snprintf(ep, sizeof(ep), "127.0.0.1:%d@nobody", port);
    expect_connect_err(sock, ep, 0, PSCOM_ERR_INVALID, 0);
    expect_connect_err(sock, ep, PSCOM_CON_FLAG_DIRECT | PSCOM_CON_FLAG_ONDEMAND,
                       PSCOM_ERR_INVALID, 0);

    /* unparsable endpoint strings */
    expect_connect_err(sock, "garbage", PSCOM_CON_FLAG_DIRECT, PSCOM_ERR_STDERROR, EINVAL);
    expect_connect_err(sock, "127.0.0.1:nosuchservice@x", PSCOM_CON_FLAG_DIRECT,
                       PSCOM_ERR_STDERROR, EINVAL);

    pscom_close_socket(sock);
    return 0;
}

/* ---------------- scenario "handshake" ---------------- */

/* server role without pscom traffic: a plain TCP listener */
static int raw_server(tu_ctx_t *ctx)
{
    int port;
    int lfd = tu_tcp_socket(INADDR_LOOPBACK, 4, &port);
    tu_signal(ctx, 1, (uint32_t)port);
    int echo_port; /* a listener of its own: a retry of 1 may take 2's accept */
    int efd = tu_tcp_socket(INADDR_LOOPBACK, 4, &echo_port);
    tu_signal(ctx, 1, (uint32_t)echo_port);

    /* 1: accept and close at once */
    int fd = tu_tcp_accept(lfd);
    close(fd);
    /* 2: answer with garbage, then close */
    fd = tu_tcp_accept(lfd);
    unsigned char junk[4096];
    tu_fill(junk, sizeof(junk), 12345);
    ssize_t w = send(fd, junk, sizeof(junk), MSG_NOSIGNAL);
    (void)w;
    close(fd);
    close(lfd); /* (a connect of 2 left in its backlog ends) */
    /* 3: an echo server, until the client closes */
    fd = tu_tcp_accept(efd);
    unsigned char buf[4096];
    ssize_t n;
    while ((n = read(fd, buf, sizeof(buf))) > 0 || (n < 0 && errno == EINTR))
        if (n > 0 && send(fd, buf, (size_t)n, MSG_NOSIGNAL) < 0) break;
    close(fd);
    close(efd);
    TU_ASSERT_EQ(tu_wait_signal(ctx, 1), 2); /* client done */
    return 0;
}

static void expect_failed_handshake(pscom_socket_t *sock, const char *ep)
{
    int before              = tu_nerrs;
    pscom_connection_t *con = pscom_open_connection(sock);
    pscom_err_t rc          = pscom_connect(con, ep, 0, PSCOM_CON_FLAG_DIRECT);
    if (rc == PSCOM_SUCCESS) {
        /* asynchronous failure: con_error(OP_CONNECT) tells */
        for (int i = 0; i < 1000 && tu_nerrs == before; i++) pscom_test_any();
        TU_ASSERT_MSG(tu_nerrs > before, "connect to a non-pscom listener returned "
                                         "SUCCESS without con_error (spec 5.7)");
        TU_ASSERT_PTR_EQ(tu_errs[before].con, con);
        TU_ASSERT_EQ(tu_errs[before].op, PSCOM_OP_CONNECT);
        TU_ASSERT_EQ(con->state, PSCOM_CON_STATE_CLOSED);
    }
    pscom_close_connection(con);
}

static int handshake_client(tu_ctx_t *ctx)
{
    pscom_socket_t *sock = tu_open_socket(ctx, 0, 0);
    sock->ops.con_error  = tu_on_con_error;
    char ep[128];
    uint32_t port      = tu_wait_signal(ctx, TU_SERVER);
    uint32_t echo_port = tu_wait_signal(ctx, TU_SERVER);
    snprintf(ep, sizeof(ep), "127.0.0.1:%u@raw", port);
    expect_failed_handshake(sock, ep);
    expect_failed_handshake(sock, ep);
    /* 3: the echo */
    snprintf(ep, sizeof(ep), "127.0.0.1:%u@raw", echo_port);
    pscom_connection_t *con = pscom_open_connection(sock);
    tu_capture_begin();
    errno          = 0;
    pscom_err_t rc = pscom_connect(con, ep, 0, PSCOM_CON_FLAG_DIRECT);
    int e          = errno;
    char *log      = tu_capture_end();
    TU_ASSERT_ERR(rc, PSCOM_ERR_STDERROR);
    TU_ASSERT_EQ(e, EPROTO);
    TU_ASSERT_EQ(tu_count(log, "the peer sent our own HELLO back"), 1);
    free(log);
    pscom_close_connection(con);
    tu_signal(ctx, TU_SERVER, 2);
    pscom_close_socket(sock);
    return 0;
}

int main(void)
{
    setenv("PSP_RETRY", "1", 0);
    int rc = tu_run("connect_refused", 0, refused_server, NULL, NULL);
    rc |= tu_run("connect_handshake", 1, raw_server, handshake_client, NULL);
    return rc;
}
