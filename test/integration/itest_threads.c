/*
 * itest_threads: pscom_init_thread makes the API thread-safe. The client
 * runs 4 threads, each connecting its own connection at the same time and
 * doing ping-pongs with pscom_send and a receive (sizes 0 B to 256 KiB,
 * content checked): two threads receive with the blocking pscom_recv_from,
 * two post their receive and poll pscom_req_is_done() / pscom_test_any()
 * while the others make progress. The server echoes everything with
 * any-source receives, also in threaded mode, until every thread said
 * goodbye. scripts/test.sh runs it under ThreadSanitizer too.
 */
#include "threads_echo.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define NTHREADS 4
#define ROUNDS   300
#define MAXLEN   (256 * 1024)

static size_t len_of(uint32_t t, uint32_t r)
{
    size_t l = ((size_t)r * 7919u + t * 104729u) % 4096;
    return r % 50 == 0 ? MAXLEN - r : l;
}

static int server(tu_ctx_t *ctx)
{
    return threads_echo_server(ctx, MAXLEN, NTHREADS, 0);
}

typedef struct targ {
    tu_ctx_t *ctx;
    pscom_socket_t *sock;
    uint32_t id;
} targ_t;

static void *worker(void *p)
{
    targ_t *a               = p;
    pscom_connection_t *con = pscom_open_connection(a->sock);
    TU_ASSERT_NOT_NULL(con);
    TU_ASSERT_OK(pscom_connect(con, a->ctx->ep, TU_SERVER, PSCOM_CON_FLAG_DIRECT));
    tu_check_con_type(con);
    char *out = tu_malloc(MAXLEN), *in = tu_malloc(MAXLEN);
    for (uint32_t r = 0; r < ROUNDS; r++) {
        size_t len = len_of(a->id, r);
        xh_t xh = {TAG_PING, a->id, r}, back;
        tu_fill(out, len, a->id * 100000 + r);
        pscom_send(con, &xh, sizeof(xh), out, len);
        if (a->id % 2 == 0) {
            TU_ASSERT_OK(pscom_recv_from(con, &back, sizeof(back), in, len));
        } else { /* polls, as an application with a progress loop does */
            pscom_request_t *req = pscom_request_create(sizeof(back), 0);
            req->connection      = con;
            req->data            = in;
            req->data_len        = len;
            req->xheader_len     = sizeof(back);
            pscom_post_recv(req);
            while (!pscom_req_is_done(req)) pscom_test_any();
            TU_ASSERT_SUCCESSFUL(req);
            memcpy(&back, &req->xheader, sizeof(back));
            pscom_request_free(req);
        }
        TU_ASSERT_EQ(back.thread, a->id);
        TU_ASSERT_EQ(back.round, r);
        TU_ASSERT_PATTERN(in, len, a->id * 100000 + r);
    }
    xh_t bye = {TAG_BYE, a->id, 0};
    pscom_send(con, &bye, sizeof(bye), NULL, 0);
    pscom_flush(con);
    free(out);
    free(in);
    return NULL;
}

static int client(tu_ctx_t *ctx)
{
    TU_ASSERT_OK(pscom_init_thread(PSCOM_VERSION));
    pscom_socket_t *sock = tu_open_socket(ctx, 0, 0);
    tu_client_get_ep(ctx);
    pthread_t th[NTHREADS];
    targ_t args[NTHREADS];
    for (uint32_t i = 0; i < NTHREADS; i++) {
        args[i] = (targ_t){ctx, sock, i};
        TU_ASSERT_EQ(pthread_create(&th[i], NULL, worker, &args[i]), 0);
    }
    for (int i = 0; i < NTHREADS; i++) pthread_join(th[i], NULL);
    pscom_close_socket(sock);
    return 0;
}

int main(void)
{
    return tu_run("threads", 1, server, client, NULL);
}
