/*
 * itest_shm_killed: the peer of an shm connection dies by SIGKILL in the
 * middle of a 64 MiB transfer, over both data paths (single copy with the
 * defaults; the pipelined ring with PSP_SHM_CMA=0). Only shm may be used.
 *
 *  A. the survivor receives: its receive was matched and part of the data
 *     has arrived (the sender stays out of pscom, so the transfer cannot
 *     finish); the receive ends with ERROR;
 *  B. the survivor sends: the peer does not read; the send and a posted
 *     receive on the same connection end with ERROR;
 *  C. the survivor sends while the peer is receiving (and, with single
 *     copy, the survivor helps copying): no hang, no crash; the send ends
 *     (successfully only if it completed before the kill).
 *  D. (no kill) the sender's single-copy send is cut off by its close
 *     (PSP_SHUTDOWN_TIMEOUT) while the survivor stays out of pscom; the
 *     sender writes its buffer over and lives on. The survivor's receive
 *     must end with ERROR: until 2026-11-29 it copied the new bytes and
 *     completed successfully.
 * In A-C con_error(PSCOM_OP_READ, PSCOM_ERR_IOERROR) is called, and
 * it comes less than 2 s after the peer process is gone; no segment of
 * either process is left in /dev/shm.
 */
#define _GNU_SOURCE
#include "pscom_testutil.h"

#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define BIG      (64u << 20)
#define TAG_MSG  0x4d534721u
#define LIMIT_US 2000000.0

static volatile int con_errors;
static pscom_op_t err_op;
static pscom_err_t err_err;
static double err_at; /* ms */

static void on_con_error(pscom_connection_t *con, pscom_op_t op, pscom_err_t err)
{
    (void)con;
    if (!con_errors++) {
        err_op  = op;
        err_err = err;
        err_at  = tu_now_ms();
    }
}

static void assert_no_segments(pid_t a, pid_t b)
{
    char pa[64], pb[64];
    snprintf(pa, sizeof(pa), "pscom-shm-%d-", (int)a);
    snprintf(pb, sizeof(pb), "pscom-shm-%d-", (int)b);
    DIR *d = opendir("/dev/shm");
    if (!d) return;
    struct dirent *e;
    while ((e = readdir(d))) {
        TU_ASSERT_MSG(strncmp(e->d_name, pa, strlen(pa)) && strncmp(e->d_name, pb, strlen(pb)),
                      "segment /dev/shm/%s is still there", e->d_name);
    }
    closedir(d);
}

static pscom_request_t *post(pscom_connection_t *con, void *data, size_t len, int send)
{
    uint32_t xh[2]       = {TAG_MSG, 1};
    pscom_request_t *req = pscom_request_create(sizeof(xh), 0);
    TU_ASSERT_NOT_NULL(req);
    pscom_req_prepare(req, con, data, len, xh, sizeof(xh));
    req->socket = con->socket;
    if (send) {
        pscom_post_send(req);
    } else {
        pscom_post_recv(req);
    }
    return req;
}

static void expect_error(pscom_request_t *req)
{
    pscom_wait(req);
    TU_ASSERT_STATE_HAS(req->state, PSCOM_REQ_STATE_ERROR | PSCOM_REQ_STATE_DONE);
    TU_ASSERT(!pscom_req_successful(req));
}

/* the client is gone (dead_at, ms): con_error must come, in time, and no
 * shared-memory segment of either process may be left */
static void expect_con_error(tu_ctx_t *ctx, double dead_at)
{
    tu_wait_flag(&con_errors);
    TU_ASSERT_EQ(con_errors, 1);
    TU_ASSERT_EQ(err_op, PSCOM_OP_READ);
    TU_ASSERT_ERR(err_err, PSCOM_ERR_IOERROR);
    double us = err_at > dead_at ? (err_at - dead_at) * 1e3 : 0;
    tu_log("con_error %.0f us after the peer was gone", us);
    TU_ASSERT_MSG(us < LIMIT_US, "con_error came %.0f us after the peer died", us);
    assert_no_segments(getpid(), ctx->client_pids[1]);
}

/* kill the client and wait until it is really gone; returns the time (ms) */
static double kill_client(tu_ctx_t *ctx)
{
    TU_ASSERT_EQ(kill(ctx->client_pids[1], SIGKILL), 0);
    tu_wait_peer_exit(ctx, 1); /* its control channel closes when it exits */
    return tu_now_ms();
}

/* the server's socket (recording con_error) and its connection to the client */
static pscom_connection_t *server_setup(tu_ctx_t *ctx)
{
    pscom_socket_t *sock = tu_open_socket(ctx, 0, 0);
    sock->ops.con_error  = on_con_error;
    return tu_server_accept_one(ctx, sock);
}

/* ---- A: the survivor receives ------------------------------------------------ */

static int a_client(tu_ctx_t *ctx)
{
    pscom_socket_t *sock    = tu_open_socket(ctx, 0, 0);
    pscom_connection_t *con = tu_client_connect(ctx, sock);
    unsigned char *buf      = tu_malloc(BIG);
    tu_fill(buf, BIG, 1);
    TU_ASSERT_EQ(tu_wait_signal_progress(ctx, TU_SERVER), 1); /* receive posted */
    pscom_request_t *s = post(con, buf, BIG, 1);
    for (int i = 0; i < 20; i++) pscom_test_any(); /* fill what there is room for */
    TU_ASSERT(!pscom_req_is_done(s));
    tu_signal(ctx, TU_SERVER, 2);
    tu_wait_signal(ctx, TU_SERVER); /* out of pscom until killed */
    TU_FAIL("not killed");
}

static int a_server(tu_ctx_t *ctx)
{
    pscom_connection_t *con = server_setup(ctx);
    unsigned char *buf = tu_malloc(BIG);
    pscom_request_t *r = post(con, buf, BIG, 0);
    tu_signal(ctx, 1, 1);
    TU_ASSERT_EQ(tu_wait_signal(ctx, 1), 2);
    /* take part of it: the sender is out of pscom, so it cannot finish */
    for (int i = 0; i < 10; i++) pscom_test_any();
    TU_ASSERT_STATE_HAS(r->state, PSCOM_REQ_STATE_IO_STARTED);
    TU_ASSERT(!pscom_req_is_done(r));
    double dead = kill_client(ctx);
    expect_error(r);
    expect_con_error(ctx, dead);
    pscom_request_free(r);
    pscom_close_connection(con);
    free(buf);
    return 0;
}

/* ---- B: the survivor sends to a peer that does not read -------------------- */

static int b_client(tu_ctx_t *ctx)
{
    pscom_socket_t *sock = tu_open_socket(ctx, 0, 0);
    tu_client_connect(ctx, sock);
    tu_signal(ctx, TU_SERVER, 1);
    tu_wait_signal(ctx, TU_SERVER); /* out of pscom until killed */
    TU_FAIL("not killed");
}

static int b_server(tu_ctx_t *ctx)
{
    pscom_connection_t *con = server_setup(ctx);
    TU_ASSERT_EQ(tu_wait_signal(ctx, 1), 1);
    unsigned char *buf = tu_malloc(BIG), small[64];
    tu_fill(buf, BIG, 2);
    pscom_request_t *s = post(con, buf, BIG, 1);
    pscom_request_t *r = post(con, small, sizeof(small), 0);
    for (int i = 0; i < 100; i++) pscom_test_any();
    TU_ASSERT_STATE_HAS(s->state, PSCOM_REQ_STATE_IO_STARTED);
    TU_ASSERT(!pscom_req_is_done(s));
    double dead = kill_client(ctx);
    expect_error(s);
    expect_error(r);
    expect_con_error(ctx, dead);
    pscom_request_free(s);
    pscom_request_free(r);
    pscom_close_connection(con);
    free(buf);
    return 0;
}

/* ---- C: killed while receiving, the survivor sending (and helping) ---------- */

static int c_client(tu_ctx_t *ctx)
{
    pscom_socket_t *sock    = tu_open_socket(ctx, 0, 0);
    pscom_connection_t *con = tu_client_connect(ctx, sock);
    unsigned char *buf      = tu_malloc(BIG);
    for (;;) { /* receive until killed */
        pscom_request_t *r = post(con, buf, BIG, 0);
        tu_signal(ctx, TU_SERVER, 1);
        pscom_wait(r);
        TU_ASSERT_SUCCESSFUL(r);
        TU_ASSERT_PATTERN(buf, BIG, 3);
        pscom_request_free(r);
    }
}

static int c_server(tu_ctx_t *ctx)
{
    pscom_connection_t *con = server_setup(ctx);
    unsigned char *buf = tu_malloc(BIG);
    tu_fill(buf, BIG, 3);
    TU_ASSERT_EQ(tu_wait_signal(ctx, 1), 1);
    pscom_request_t *s = post(con, buf, BIG, 1);
    for (int i = 0; i < 3; i++) pscom_test_any(); /* under way, maybe helping */
    double dead = kill_client(ctx);
    pscom_wait(s);
    TU_ASSERT_STATE_HAS(s->state, PSCOM_REQ_STATE_DONE);
    if (!pscom_req_successful(s)) TU_ASSERT_STATE_HAS(s->state, PSCOM_REQ_STATE_ERROR);
    expect_con_error(ctx, dead);
    pscom_request_free(s);
    pscom_close_connection(con);
    free(buf);
    return 0;
}

/* ---- D: the sender abandons a single copy and lives on ---------------------- */

#define ABANDONED (1u << 20)

static int d_client(tu_ctx_t *ctx)
{
    pscom_socket_t *sock    = tu_open_socket(ctx, 0, 0);
    pscom_connection_t *con = tu_client_connect(ctx, sock);
    unsigned char *buf      = tu_malloc(ABANDONED);
    memset(buf, 0x11, ABANDONED);
    TU_ASSERT_EQ(tu_wait_signal_progress(ctx, TU_SERVER), 1); /* receive posted */
    pscom_request_t *s = post(con, buf, ABANDONED, 1); /* announced for a single copy */
    tu_signal(ctx, TU_SERVER, 2);
    /* the server stays out of pscom: PSP_SHUTDOWN_TIMEOUT cuts the
     * connection off, and the send fails: the buffer is ours again */
    pscom_close_socket(sock);
    TU_ASSERT_STATE_HAS(s->state, PSCOM_REQ_STATE_ERROR | PSCOM_REQ_STATE_DONE);
    pscom_request_free(s);
    memset(buf, 0xee, ABANDONED);
    tu_signal(ctx, TU_SERVER, 3);
    TU_ASSERT_EQ(tu_wait_signal(ctx, TU_SERVER), 4); /* alive while the server looks */
    free(buf);
    return 0;
}

static int d_server(tu_ctx_t *ctx)
{
    pscom_connection_t *con = server_setup(ctx);
    unsigned char *buf      = tu_malloc(ABANDONED);
    memset(buf, 0, ABANDONED);
    pscom_request_t *r = post(con, buf, ABANDONED, 0);
    tu_signal(ctx, 1, 1);
    TU_ASSERT_EQ(tu_wait_signal(ctx, 1), 2);
    TU_ASSERT_EQ(tu_wait_signal(ctx, 1), 3); /* (no progress: the client gave up) */
    pscom_wait(r);
    TU_ASSERT_MSG(!pscom_req_successful(r) && (r->state & PSCOM_REQ_STATE_ERROR),
                  "a receive of an abandoned send: [%s], first byte %#x",
                  tu_state_str(r->state), buf[0]);
    tu_wait_flag(&con_errors);
    tu_signal(ctx, 1, 4);
    pscom_request_free(r);
    pscom_close_connection(con);
    free(buf);
    return 0;
}

int main(void)
{
    static const char *const cma[] = {"1", "0"};
    tu_opts_t opts = {.killed_must_mask = 1u << 1};
    setenv("PSP_TCP", "0", 1);
    setenv("PSP_UCP", "0", 1);
    setenv("PSP_OPENIB", "0", 1);
    setenv("PSCOM_TEST_CONTYPE", "shm", 1);
    unsetenv("PSP_RENDEZVOUS");
    unsetenv("PSP_SHM_RENDEZVOUS");
    for (unsigned m = 0; m < 2; m++) {
        setenv("PSP_SHM_CMA", cma[m], 1);
        const char *path = m ? "ring" : "cma";
        char name[64];
        snprintf(name, sizeof(name), "shm_killed_recv_%s", path);
        if (tu_run(name, 1, a_server, a_client, &opts)) return 1;
        snprintf(name, sizeof(name), "shm_killed_send_%s", path);
        if (tu_run(name, 1, b_server, b_client, &opts)) return 1;
        snprintf(name, sizeof(name), "shm_killed_busy_%s", path);
        if (tu_run(name, 1, c_server, c_client, &opts)) return 1;
    }
    /* single copy always (not the ring, which the receiver may measure
     * faster), a close that gives up after 1 s without progress */
    setenv("PSP_SHM_CMA", "1", 1);
    setenv("PSP_SHM_ADAPT", "0", 1);
    setenv("PSP_SHUTDOWN_TIMEOUT", "1", 1);
    tu_opts_t live = {0};
    if (tu_run("shm_abandoned_copy", 1, d_server, d_client, &live)) return 1;
    return 0;
}
