/*
 * itest_threads_conns: connections come and go from several threads at
 * once (pscom_init_thread). The client runs 4 threads; each opens a
 * connection, does a few ping-pongs (some with io_done callbacks that run
 * unlocked), waits in pscom_wait() for a receive that a fifth thread
 * cancels, says goodbye and closes the connection, CYCLES times over.
 * Meanwhile the server echoes with any-source receives and closes each
 * connection once its goodbye came. Every message and every goodbye must
 * arrive, with its content; every cancelled receive ends CANCELED.
 *
 * Over ucp it found that UCX pairs the endpoints two processes create to
 * each other in the order each side created them: connections set up at
 * once were paired crosswise, and closing one cancelled the rendezvous
 * transfers of another (lib/plugins/ucp/ucp_peer.c).
 * scripts/test.sh runs it under ThreadSanitizer too.
 */
#include "threads_echo.h"

#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>

#define NTHREADS 4
#define CYCLES   12
#define PINGS    8
#define MAXLEN   (64 * 1024)

static size_t len_of(uint32_t t, uint32_t r)
{
    return r % 5 == 4 ? MAXLEN - r : ((size_t)r * 7919u + t * 104729u) % 2048;
}

static int server(tu_ctx_t *ctx)
{
    return threads_echo_server(ctx, MAXLEN, NTHREADS * CYCLES, 1);
}

typedef struct targ {
    tu_ctx_t *ctx;
    pscom_socket_t *sock;
    uint32_t id;
} targ_t;

/* a receive completed by its io_done callback (unlocked, maybe in another
 * thread's progress), which checks it and says so */
typedef struct cb_state {
    uint32_t thread, round;
    size_t len;
    int done; /* set by the callback, read by the owner: atomically */
} cb_state_t;

struct PSCOM_req_user {
    cb_state_t *st;
};

static void recv_done(pscom_request_t *req)
{
    cb_state_t *st = req->user->st;
    xh_t back;
    memcpy(&back, &req->xheader, sizeof(back));
    TU_ASSERT_SUCCESSFUL(req);
    TU_ASSERT_EQ(back.thread, st->thread);
    TU_ASSERT_EQ(back.round, st->round);
    TU_ASSERT_PATTERN(req->data, st->len, st->thread * 100000 + st->round);
    __atomic_store_n(&st->done, 1, __ATOMIC_RELEASE);
}

/* receives for the canceller: one slot per worker */
static pscom_request_t *to_cancel[NTHREADS];
static int workers_left = NTHREADS;

static int accept_nothing(pscom_request_t *req, pscom_connection_t *con,
                          pscom_header_net_t *header)
{
    return 0;
}

/* Cancels the receives the workers wait for, from a thread of its own. */
static void *canceller(void *p)
{
    while (__atomic_load_n(&workers_left, __ATOMIC_ACQUIRE) > 0) {
        for (int i = 0; i < NTHREADS; i++) {
            pscom_request_t *req = __atomic_exchange_n(&to_cancel[i], NULL, __ATOMIC_ACQ_REL);
            if (req) TU_ASSERT_EQ(pscom_cancel_recv(req), 1);
        }
        sched_yield();
    }
    return p;
}

/* A receive nothing matches, cancelled by the canceller while we wait. */
static void wait_cancelled(targ_t *a, pscom_connection_t *con)
{
    pscom_request_t *req = pscom_request_create(sizeof(xh_t), 0);
    req->connection      = con;
    req->xheader_len     = sizeof(xh_t);
    req->ops.recv_accept = accept_nothing;
    pscom_post_recv(req);
    __atomic_store_n(&to_cancel[a->id], req, __ATOMIC_RELEASE);
    pscom_wait(req);
    TU_ASSERT(req->state & PSCOM_REQ_STATE_CANCELED);
    TU_ASSERT(!pscom_req_successful(req));
    pscom_request_free(req);
}

static void *worker(void *p)
{
    targ_t *a = p;
    char *out = tu_malloc(MAXLEN), *in = tu_malloc(MAXLEN);
    for (uint32_t c = 0; c < CYCLES; c++) {
        pscom_connection_t *con = pscom_open_connection(a->sock);
        TU_ASSERT_NOT_NULL(con);
        TU_ASSERT_OK(pscom_connect(con, a->ctx->ep, TU_SERVER, PSCOM_CON_FLAG_DIRECT));
        tu_check_con_type(con);
        for (uint32_t i = 0; i < PINGS; i++) {
            uint32_t r = c * PINGS + i;
            size_t len = len_of(a->id, r);
            xh_t xh    = {TAG_PING, a->id, r};
            tu_fill(out, len, a->id * 100000 + r);
            if (i % 2 == 0) {
                xh_t back;
                pscom_send(con, &xh, sizeof(xh), out, len);
                TU_ASSERT_OK(pscom_recv_from(con, &back, sizeof(back), in, len));
                TU_ASSERT_EQ(back.thread, a->id);
                TU_ASSERT_EQ(back.round, r);
                TU_ASSERT_PATTERN(in, len, a->id * 100000 + r);
            } else {
                cb_state_t st         = {a->id, r, len, 0};
                pscom_request_t *req  = pscom_request_create(sizeof(xh_t), sizeof(*req->user));
                req->user->st         = &st;
                req->connection       = con;
                req->data             = in;
                req->data_len         = len;
                req->xheader_len      = sizeof(xh_t);
                req->ops.io_done      = recv_done;
                pscom_post_recv(req); /* before the ping: the answer may be quick */
                pscom_send(con, &xh, sizeof(xh), out, len);
                while (!__atomic_load_n(&st.done, __ATOMIC_ACQUIRE)) pscom_test_any();
                pscom_request_free(req);
            }
        }
        wait_cancelled(a, con);
        xh_t bye = {TAG_BYE, a->id, c};
        pscom_send(con, &bye, sizeof(bye), NULL, 0);
        pscom_flush(con);
        pscom_close_connection(con);
    }
    free(out);
    free(in);
    __atomic_sub_fetch(&workers_left, 1, __ATOMIC_RELEASE);
    return NULL;
}

static int client(tu_ctx_t *ctx)
{
    TU_ASSERT_OK(pscom_init_thread(PSCOM_VERSION));
    pscom_socket_t *sock = tu_open_socket(ctx, 0, 0);
    tu_client_get_ep(ctx);
    pthread_t th[NTHREADS], cth;
    targ_t args[NTHREADS];
    TU_ASSERT_EQ(pthread_create(&cth, NULL, canceller, NULL), 0);
    for (uint32_t i = 0; i < NTHREADS; i++) {
        args[i] = (targ_t){ctx, sock, i};
        TU_ASSERT_EQ(pthread_create(&th[i], NULL, worker, &args[i]), 0);
    }
    for (int i = 0; i < NTHREADS; i++) pthread_join(th[i], NULL);
    pthread_join(cth, NULL);
    pscom_close_socket(sock);
    return 0;
}

int main(void)
{
    return tu_run("threads_conns", 1, server, client, NULL);
}
