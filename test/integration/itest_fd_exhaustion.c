/*
 * itest_fd_exhaustion: running out of file descriptors gives a clear error
 * on the new connection and leaves the existing ones working (issue 5).
 *
 * "listener": the server lowers its RLIMIT_NOFILE so that exactly 3 more
 *   descriptors fit. Clients 1-3 connect (DIRECT) and are served. Client
 *   4's connect finds the server out of descriptors: the server takes the
 *   connection off its backlog and closes it (it must not spin on a
 *   listener it cannot accept from), logging an error that names
 *   RLIMIT_NOFILE; client 4 retries (PSP_RETRY=3) and then gets
 *   PSCOM_ERR_STDERROR from pscom_connect. The three existing connections
 *   still carry messages both ways. Once client 1 has closed, client 4
 *   connects fine.
 * "connector": a client with connections to the server (one DIRECT, one
 *   on demand and already used) lowers its own limit to what it uses.
 *   A new DIRECT connect returns PSCOM_ERR_STDERROR with errno EMFILE at
 *   once; first sends on new on-demand connections (the one where we
 *   connect and the one where we ask the peer to connect back) end with
 *   ERROR and con_error(WRITE). The log names RLIMIT_NOFILE. The existing
 *   connections work on; after the limit is raised again, a new connect
 *   works.
 *
 * Runs over tcp (one descriptor per connection): PSP_SHM=0, PSP_UCP=0
 * unless the environment says otherwise.
 */
#define _GNU_SOURCE
#include "pscom_testutil.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#define MSG_LEN 5000 /* data bytes of each checked message */

/* ---- helpers ------------------------------------------------------------------- */

/* Lower the soft RLIMIT_NOFILE so that exactly `room` more descriptors can
 * be opened (the lowest free numbers are handed out first). */
static void limit_fds(int room)
{
    static unsigned char used[65536];
    memset(used, 0, sizeof(used));
    DIR *d = opendir("/proc/self/fd");
    TU_ASSERT_NOT_NULL(d);
    int self = dirfd(d);
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        int fd = atoi(e->d_name);
        if (fd != self && fd >= 0 && fd < (int)sizeof(used)) used[fd] = 1;
    }
    closedir(d);
    int lim = 0, free_slots = 0;
    while (free_slots < room || (lim < (int)sizeof(used) && used[lim])) {
        if (!used[lim]) free_slots++;
        lim++;
    }
    struct rlimit rl;
    TU_ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &rl), 0);
    rl.rlim_cur = (rlim_t)lim;
    TU_ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &rl), 0);
    tu_log("RLIMIT_NOFILE lowered to %d: room for %d more descriptors", lim, room);
}

static void unlimit_fds(void)
{
    struct rlimit rl;
    TU_ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &rl), 0);
    rl.rlim_cur = rl.rlim_max;
    TU_ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &rl), 0);
}

/* the next hello (tu_client_connect) on the socket: its connection */
static pscom_connection_t *accept_hello(pscom_socket_t *s, int rank)
{
    pscom_connection_t *c = tu_wait_tag(NULL, s, TU_TAG_HELLO);
    TU_ASSERT_EQ(c->remote_con_info.rank, rank);
    tu_send_tag(c, TU_TAG_WELCOME);
    return c;
}

/* ---- listener ------------------------------------------------------------------- */

#define FIT 3

static int listener_server(tu_ctx_t *ctx)
{
    pscom_socket_t *s = tu_open_socket(ctx, 0, 0);
    tu_server_listen(ctx, s);
    tu_capture_begin(); /* its file is open before the limit */
    limit_fds(FIT);

    pscom_connection_t *cons[FIT + 2] = {0};
    for (int c = 1; c <= FIT; c++) {
        tu_signal(ctx, c, 1);
        cons[c] = accept_hello(s, c);
    }
    /* one too many */
    tu_signal(ctx, FIT + 1, 1);
    TU_ASSERT_EQ(tu_wait_signal_progress(ctx, FIT + 1), 1); /* it failed, as it should */
    char *log = tu_capture_end();
    TU_ASSERT_MSG(strstr(log, "RLIMIT_NOFILE") && strstr(log, "Too many open files"),
                  "no error naming the descriptor limit");
    free(log);

    /* the existing connections work on */
    for (int c = 1; c <= FIT; c++) tu_send_pattern(cons[c], 100 + (uint32_t)c, MSG_LEN);
    for (int c = 1; c <= FIT; c++) tu_recv_pattern(cons[c], 200 + (uint32_t)c, MSG_LEN);
    TU_ASSERT_NULL(pscom_get_next_connection(s, cons[FIT]));

    /* client 1 leaves; then there is room for client 4 */
    pscom_close_connection(cons[1]);
    tu_signal(ctx, 1, 2);
    TU_ASSERT_EQ(tu_wait_signal_progress(ctx, 1), 2);
    tu_signal(ctx, FIT + 1, 2);
    cons[FIT + 1] = accept_hello(s, FIT + 1);
    tu_recv_pattern(cons[FIT + 1], 400, MSG_LEN);
    tu_send_pattern(cons[FIT + 1], 401, MSG_LEN);
    for (int c = 2; c <= FIT + 1; c++) tu_signal(ctx, c, 3);
    for (int c = 2; c <= FIT + 1; c++) TU_ASSERT_EQ(tu_wait_signal_progress(ctx, c), 3);
    unlimit_fds();
    pscom_close_socket(s);
    return 0;
}

static int listener_client(tu_ctx_t *ctx)
{
    pscom_socket_t *s = tu_open_socket(ctx, 0, 0);
    tu_client_get_ep(ctx);
    TU_ASSERT_EQ(tu_wait_signal(ctx, TU_SERVER), 1);
    pscom_connection_t *c;
    if (ctx->rank == FIT + 1) {
        c = pscom_open_connection(s);
        pscom_err_t rc = pscom_connect(c, ctx->ep, 0, PSCOM_CON_FLAG_DIRECT);
        TU_ASSERT_MSG(rc == PSCOM_ERR_STDERROR,
                      "connect to a server out of descriptors returned %d (%s)", rc,
                      tu_err_str(rc));
        tu_log("connect refused as expected: %s", strerror(errno));
        pscom_close_connection(c);
        tu_signal(ctx, TU_SERVER, 1);
        TU_ASSERT_EQ(tu_wait_signal(ctx, TU_SERVER), 2);
        c = tu_client_connect(ctx, s);
        tu_send_pattern(c, 400, MSG_LEN);
        tu_recv_pattern(c, 401, MSG_LEN);
    } else {
        c = tu_client_connect(ctx, s);
        tu_recv_pattern(c, 100 + (uint32_t)ctx->rank, MSG_LEN);
        tu_send_pattern(c, 200 + (uint32_t)ctx->rank, MSG_LEN);
        if (ctx->rank == 1) {
            TU_ASSERT_EQ(tu_wait_signal_progress(ctx, TU_SERVER), 2);
            pscom_close_socket(s);
            tu_signal(ctx, TU_SERVER, 2);
            return 0;
        }
    }
    TU_ASSERT_EQ(tu_wait_signal_progress(ctx, TU_SERVER), 3);
    tu_signal(ctx, TU_SERVER, 3);
    pscom_close_socket(s);
    return 0;
}

/* ---- connector ----------------------------------------------------------------- */

static volatile int errors;
static pscom_connection_t *err_con;
static pscom_op_t err_op;

static void on_error(pscom_connection_t *con, pscom_op_t op, pscom_err_t err)
{
    if (err == PSCOM_ERR_EOF) return;
    err_con = con;
    err_op  = op;
    errors++;
}

static int connector_server(tu_ctx_t *ctx)
{
    pscom_socket_t *s = tu_open_socket(ctx, 0, 0);
    tu_server_listen(ctx, s);
    pscom_connection_t *direct = accept_hello(s, 1);
    /* our on-demand connection to the client */
    uint32_t port = tu_wait_signal(ctx, 1);
    char ep[128];
    snprintf(ep, sizeof(ep), "%.*s:%u@client01", (int)(strchr(ctx->ep, ':') - ctx->ep), ctx->ep,
             port);
    pscom_connection_t *od = pscom_open_connection(s);
    TU_ASSERT_OK(pscom_connect(od, ep, 1, PSCOM_CON_FLAG_ONDEMAND));
    tu_signal(ctx, 1, 1);
    tu_recv_pattern(od, 1, MSG_LEN); /* the client connects (lower name) */
    tu_send_pattern(od, 2, MSG_LEN);
    /* the client is at its limit now; existing connections work */
    tu_recv_pattern(direct, 3, MSG_LEN);
    tu_recv_pattern(od, 4, MSG_LEN);
    tu_send_pattern(direct, 5, MSG_LEN);
    tu_send_pattern(od, 6, MSG_LEN);
    pscom_connection_t *again = accept_hello(s, 1); /* after the limit was raised */
    tu_recv_pattern(again, 7, MSG_LEN);
    tu_signal(ctx, 1, 2);
    pscom_close_socket(s);
    return 0;
}

static int connector_client(tu_ctx_t *ctx)
{
    pscom_socket_t *s = tu_open_socket(ctx, 0, 0);
    s->ops.con_error  = on_error;
    TU_ASSERT_OK(pscom_listen(s, PSCOM_ANYPORT));
    pscom_connection_t *direct = tu_client_connect(ctx, s);
    tu_signal(ctx, TU_SERVER, (uint32_t)s->listen_portno);
    pscom_connection_t *od = pscom_open_connection(s);
    TU_ASSERT_OK(pscom_connect(od, ctx->ep, 0, PSCOM_CON_FLAG_ONDEMAND)); /* "...@server" */
    TU_ASSERT_EQ(tu_wait_signal(ctx, TU_SERVER), 1);
    tu_send_pattern(od, 1, MSG_LEN);
    tu_recv_pattern(od, 2, MSG_LEN);
    TU_ASSERT_NE(od->type, PSCOM_CON_TYPE_ONDEMAND);

    /* new on-demand connections (created before the limit: that needs no fd) */
    char ep_hi[128], ep_lo[128];
    int hostlen = (int)(strchr(ctx->ep, ':') - ctx->ep);
    snprintf(ep_hi, sizeof(ep_hi), "%.*s:1@zzzzzzzz", hostlen, ctx->ep); /* we connect */
    snprintf(ep_lo, sizeof(ep_lo), "%.*s:1@aaaaaaaa", hostlen, ctx->ep); /* we ask back */
    pscom_connection_t *od_hi = pscom_open_connection(s);
    pscom_connection_t *od_lo = pscom_open_connection(s);
    TU_ASSERT_OK(pscom_connect(od_hi, ep_hi, 2, PSCOM_CON_FLAG_ONDEMAND));
    TU_ASSERT_OK(pscom_connect(od_lo, ep_lo, 3, PSCOM_CON_FLAG_ONDEMAND));
    pscom_connection_t *d = pscom_open_connection(s);

    tu_capture_begin();
    limit_fds(0);
    TU_ASSERT_ERR(pscom_connect(d, ctx->ep, 0, PSCOM_CON_FLAG_DIRECT), PSCOM_ERR_STDERROR);
    TU_ASSERT_EQ(errno, EMFILE);
    pscom_close_connection(d);
    pscom_connection_t *fails[2] = {od_hi, od_lo};
    for (int i = 0; i < 2; i++) {
        int before           = errors;
        pscom_request_t *req = pscom_request_create(0, 0);
        req->connection      = fails[i];
        pscom_post_send(req);
        pscom_wait(req);
        TU_ASSERT_STATE_HAS(req->state, PSCOM_REQ_STATE_ERROR);
        pscom_request_free(req);
        while (errors == before) pscom_wait_any();
        TU_ASSERT_PTR_EQ(err_con, fails[i]);
        TU_ASSERT_EQ(err_op, PSCOM_OP_WRITE);
        pscom_close_connection(fails[i]);
    }
    /* the existing ones work on */
    tu_send_pattern(direct, 3, MSG_LEN);
    tu_send_pattern(od, 4, MSG_LEN);
    tu_recv_pattern(direct, 5, MSG_LEN);
    tu_recv_pattern(od, 6, MSG_LEN);
    unlimit_fds();
    char *log = tu_capture_end();
    TU_ASSERT_MSG(strstr(log, "RLIMIT_NOFILE") && strstr(log, "Too many open files"),
                  "no error naming the descriptor limit");
    free(log);

    pscom_connection_t *again = tu_client_connect(ctx, s);
    tu_send_pattern(again, 7, MSG_LEN);
    TU_ASSERT_EQ(tu_wait_signal_progress(ctx, TU_SERVER), 2);
    pscom_close_socket(s);
    return 0;
}

int main(void)
{
    setenv("PSP_SHM", "0", 0);
    setenv("PSP_UCP", "0", 0);
    setenv("PSP_RETRY", "3", 0);
    int rc = tu_run("fd_listener", FIT + 1, listener_server, listener_client, NULL);
    rc |= tu_run("fd_connector", 1, connector_server, connector_client, NULL);
    return rc;
}
