/*
 * itest_threads_exit: with pscom_init_thread, the process ends (exit) while
 * other threads are in pscom: the clean-up at exit must not tear the
 * transports down under them. Of the client's four threads two wait for
 * receives nobody sends (one on the connection, one any-source), two call
 * pscom_test_any for ever (progress threads); the main thread sends MSGS
 * messages and returns from its role (exit(0)).
 * The client must end with status 0 and the server get every message.
 * (Until 2026-11-29 the clean-up ran without the lock: over ucp a waiting
 * thread ran an endpoint's handler while the worker was destroyed, and
 * the client died with SIGSEGV in about half the runs.) ROUNDS runs, over
 * ucp only (the other transports never crashed there; suite time).
 */
#include "pscom_testutil.h"

#include <pthread.h>
#include <sched.h>

#define ROUNDS  4
#define THREADS 4
#define MSGS    100
#define LEN     100000 /* (rendezvous over ucp) */

static pscom_socket_t *sock;
static pscom_connection_t *con;
static int posted; /* receives posted by the waiters (atomic) */

/* a progress thread, as MPI implementations have: pscom_test_any for ever */
static void *poller(void *arg)
{
    (void)arg;
    __atomic_add_fetch(&posted, 1, __ATOMIC_RELEASE);
    for (;;) pscom_test_any();
    return NULL;
}

static void *waiter(void *arg)
{
    int any = (int)(intptr_t)arg & 1;
    char buf[16];
    pscom_request_t *r = pscom_request_create(0, 0);
    r->connection      = any ? NULL : con;
    r->socket          = sock;
    r->data            = buf;
    r->data_len        = sizeof(buf);
    pscom_post_recv(r);
    __atomic_add_fetch(&posted, 1, __ATOMIC_RELEASE);
    pscom_wait(r); /* until the exit, or failed by it */
    pscom_request_free(r);
    return NULL;
}

static int server(tu_ctx_t *ctx)
{
    pscom_socket_t *s       = tu_open_socket(ctx, 0, 0);
    pscom_connection_t *c   = tu_server_accept_one(ctx, s);
    static unsigned char buf[LEN];
    for (uint32_t i = 0; i < MSGS; i++) {
        uint32_t tag = i;
        TU_ASSERT_OK(pscom_recv_from(c, &tag, sizeof(tag), buf, sizeof(buf)));
        TU_ASSERT_PATTERN(buf, sizeof(buf), i);
    }
    pscom_close_socket(s); /* at once: its close meets the client's exit */
    return 0;
}

static int client(tu_ctx_t *ctx)
{
    TU_ASSERT_OK(pscom_init_thread(PSCOM_VERSION));
    sock = tu_open_socket(ctx, 0, 0);
    con  = tu_client_connect(ctx, sock);
    pthread_t t[THREADS];
    for (intptr_t i = 0; i < THREADS; i++) {
        TU_ASSERT_EQ(pthread_create(&t[i], NULL, i < 2 ? waiter : poller, (void *)i), 0);
        pthread_detach(t[i]);
    }
    while (__atomic_load_n(&posted, __ATOMIC_ACQUIRE) < THREADS) sched_yield();
    static unsigned char buf[LEN];
    for (uint32_t i = 0; i < MSGS; i++) {
        tu_fill(buf, sizeof(buf), i);
        pscom_send(con, &i, sizeof(i), buf, sizeof(buf));
    }
    return 0; /* exit(0) with the threads in pscom_wait */
}

int main(void)
{
    for (int round = 0; round < ROUNDS; round++)
        if (tu_run("threads_exit", 1, server, client, NULL)) return 1;
    return 0;
}
