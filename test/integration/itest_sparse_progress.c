/*
 * itest_sparse_progress: an application that drives pscom only now and
 * then (here one pscom_test_any() per millisecond) while shm's poller is
 * active still hears its quiet fds in time.
 *
 * While all fds are quiet (listener, peer-death sockets), a busy-polling
 * pass looks at the fd set only once the coarse clock has ticked since the
 * last look, and reads that clock every 16 passes: a system call per
 * clock tick in a tight loop, one per 16 calls when the calls are a
 * millisecond apart. Asserted here, in calls of pscom_test_any() (not in
 * time, so a loaded machine cannot fail it; without the clock, never):
 *
 *  1. a second connection from the client is accepted within SPARSE_MAX
 *     calls;
 *  2. the client is killed: con_error comes within SPARSE_MAX calls.
 *
 * Over shm by default; the ucp variants (PSCOM_TEST_CONTYPE=ucp-...) run
 * the same over ucp, whose poller makes the passes busy-polling ones too.
 */
#define _GNU_SOURCE
#include "pscom_testutil.h"

#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#define SPARSE_MAX 200u /* expected: 16 calls per look at the fds (47-63 to accept, 16 to see a death) */
#define SPARSE_GIVEUP 20000u

static volatile int accepts;
static volatile int con_errors;

static void on_accept(pscom_connection_t *con)
{
    (void)con;
    accepts++;
}

static void on_con_error(pscom_connection_t *con, pscom_op_t op, pscom_err_t err)
{
    (void)con;
    (void)op;
    (void)err;
    con_errors++;
}

/* one pscom_test_any() per millisecond until *flag leaves `from`; the calls */
static unsigned sparse_until(volatile int *flag, int from)
{
    unsigned calls = 0;
    while (*flag == from) {
        TU_ASSERT_MSG(calls < SPARSE_GIVEUP, "nothing after %u sparse calls", calls);
        pscom_test_any();
        calls++;
        poll(NULL, 0, 1);
    }
    return calls;
}

static int server(tu_ctx_t *ctx)
{
    pscom_socket_t *sock = tu_open_socket(ctx, 0, 0);
    sock->ops.con_accept = on_accept;
    sock->ops.con_error  = on_con_error;
    pscom_connection_t *con = tu_server_accept_one(ctx, sock);
    tu_check_con_type(con); /* shm: its poller makes passes busy-polling ones */

    int before = accepts;
    tu_signal(ctx, 1, 1); /* connect once more */
    unsigned calls = sparse_until(&accepts, before);
    tu_log("second connection accepted after %u sparse calls", calls);
    TU_ASSERT_MSG(calls <= SPARSE_MAX, "accepted only after %u calls (limit %u)", calls,
                  SPARSE_MAX);
    TU_ASSERT_EQ(tu_wait_signal_progress(ctx, 1), 2); /* it is connected */

    TU_ASSERT_EQ(kill(ctx->client_pids[1], SIGKILL), 0);
    tu_wait_peer_exit(ctx, 1);
    calls = sparse_until(&con_errors, 0);
    tu_log("con_error after %u sparse calls", calls);
    TU_ASSERT_MSG(calls <= SPARSE_MAX, "con_error only after %u calls (limit %u)", calls,
                  SPARSE_MAX);
    pscom_close_socket(sock);
    return 0;
}

static int client(tu_ctx_t *ctx)
{
    pscom_socket_t *sock = tu_open_socket(ctx, 0, 0);
    tu_client_connect(ctx, sock);
    TU_ASSERT_EQ(tu_wait_signal(ctx, TU_SERVER), 1);
    pscom_connection_t *d = pscom_open_connection(sock);
    TU_ASSERT_NOT_NULL(d);
    TU_ASSERT_OK(pscom_connect(d, ctx->ep, 0, PSCOM_CON_FLAG_DIRECT));
    tu_signal(ctx, TU_SERVER, 2);
    tu_wait_signal(ctx, TU_SERVER); /* out of pscom until killed */
    TU_FAIL("not killed");
}

int main(void)
{
    tu_opts_t opts = {.killed_must_mask = 1u << 1};
    const char *want = tu_contype();
    if (!want || strcmp(want, "ucp") != 0) { /* the ucp variants set their own */
        setenv("PSP_TCP", "0", 1);
        setenv("PSP_UCP", "0", 1);
        setenv("PSP_OPENIB", "0", 1);
        setenv("PSCOM_TEST_CONTYPE", "shm", 1);
    }
    return tu_run("sparse_progress", 1, server, client, &opts);
}
