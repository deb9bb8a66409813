/*
 * itest_threads_close: with pscom_init_thread, pscom_close_connection in
 * one thread while another thread runs con_error of that connection: the
 * close returns only after the callback did (spec 5.1: no con_error after
 * the user closed the connection; the user may free what the callback
 * uses once the close returned). Until 2026-11-29 the close returned at
 * once, the callback still running.
 *
 * The client connects and closes; the server's polling thread runs
 * con_error (EOF), which stays in the callback for up to CB_MS and notes
 * whether the close returned meanwhile.
 *
 * cross: two threads run con_error of two connections at once, and each
 * callback closes the other connection. A close made from inside a
 * connection callback must not wait (each would wait for the other: until
 * 2026-11-29 this hung until the watchdog).
 */
#include "pscom_testutil.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

#define CB_MS 300.0

static atomic_int in_cb, cb_done, closed, cb_saw_close, stop;

static void on_error(pscom_connection_t *con, pscom_op_t op, pscom_err_t err)
{
    (void)con;
    (void)op;
    (void)err;
    atomic_store(&in_cb, 1);
    double t0 = tu_now_ms();
    while (tu_now_ms() - t0 < CB_MS) {
        if (atomic_load(&closed)) {
            atomic_store(&cb_saw_close, 1);
            break;
        }
    }
    atomic_store(&cb_done, 1);
}

static void *poller(void *arg)
{
    (void)arg;
    while (!atomic_load(&stop)) pscom_test_any();
    return NULL;
}

static int server(tu_ctx_t *ctx)
{
    TU_ASSERT_OK(pscom_init_thread(PSCOM_VERSION));
    pscom_socket_t *sock    = tu_open_socket(ctx, 0, 0);
    sock->ops.con_error     = on_error;
    pscom_connection_t *con = tu_server_accept_one(ctx, sock);
    pthread_t th;
    TU_ASSERT_EQ(pthread_create(&th, NULL, poller, NULL), 0);
    tu_signal(ctx, 1, 1); /* client: close */
    while (!atomic_load(&in_cb)) { /* bounded by the harness's watchdog */
    }
    pscom_close_connection(con); /* while its con_error runs in the poller */
    TU_ASSERT_MSG(atomic_load(&cb_done), "pscom_close_connection returned while con_error ran");
    atomic_store(&closed, 1);
    atomic_store(&stop, 1);
    pthread_join(th, NULL);
    TU_ASSERT_EQ(atomic_load(&cb_saw_close), 0);
    pscom_close_socket(sock);
    return 0;
}

static int client(tu_ctx_t *ctx)
{
    pscom_socket_t *sock    = tu_open_socket(ctx, 0, 0);
    pscom_connection_t *con = tu_client_connect(ctx, sock);
    TU_ASSERT_EQ(tu_wait_signal_progress(ctx, TU_SERVER), 1);
    pscom_close_connection(con);
    pscom_close_socket(sock);
    return 0;
}

/* ---- cross -------------------------------------------------------------- */

#define CROSS_MS 5000.0

static pscom_connection_t *cross_con[3]; /* [1], [2]: the two clients */
static atomic_int cross_in, cross_done;

static void on_error_cross(pscom_connection_t *con, pscom_op_t op, pscom_err_t err)
{
    (void)op;
    (void)err;
    /* both callbacks are running before either closes (bounded: a build
     * whose threads cannot run the two at once still ends, and fails below) */
    atomic_fetch_add(&cross_in, 1);
    double t0 = tu_now_ms();
    while (atomic_load(&cross_in) < 2 && tu_now_ms() - t0 < CROSS_MS) {
    }
    pscom_close_connection(con == cross_con[1] ? cross_con[2] : cross_con[1]);
    atomic_fetch_add(&cross_done, 1);
}

static void *cross_poller(void *arg)
{
    (void)arg;
    while (atomic_load(&cross_done) < 2) pscom_test_any();
    return NULL;
}

static int server_cross(tu_ctx_t *ctx)
{
    TU_ASSERT_OK(pscom_init_thread(PSCOM_VERSION));
    pscom_socket_t *sock = tu_open_socket(ctx, 0, 0);
    sock->ops.con_error  = on_error_cross;
    tu_server_listen(ctx, sock);
    tu_server_accept_all(ctx, sock, cross_con);
    pthread_t th[2];
    for (int i = 0; i < 2; i++) TU_ASSERT_EQ(pthread_create(&th[i], NULL, cross_poller, NULL), 0);
    tu_signal(ctx, 1, 1); /* clients: close */
    tu_signal(ctx, 2, 1);
    for (int i = 0; i < 2; i++) pthread_join(th[i], NULL);
    TU_ASSERT_EQ(atomic_load(&cross_in), 2);
    pscom_close_socket(sock);
    return 0;
}

int main(void)
{
    int rc = tu_run("threads_close", 1, server, client, NULL);
    if (!rc) rc = tu_run("threads_close_cross", 2, server_cross, client, NULL);
    return rc;
}
