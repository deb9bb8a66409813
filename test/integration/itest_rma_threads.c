/*
 * itest_rma_threads: the target's RMA callbacks run one at a time and in
 * arrival order also when several threads make progress (pscom_init_thread;
 * MPI's accumulate ordering: every atomic sees the effect of all earlier
 * accumulates from the same origin).
 *
 * The client (origin) posts an accumulate (+1), a fetch-and-add (+10) on
 * the same word, then a plain message, all on one connection. The server
 * (target) runs two threads that both call pscom_test_any(). The
 * ACCUMULATE callback waits until the plain message's receive is DONE:
 * its io_done runs from the completion queue after the fetch-and-add's, so
 * by then another thread has taken the fetch-and-add. Its callback must not
 * have run yet (until 2026-11-29 it ran at once, beside the accumulate's,
 * and fetched the value without the accumulate's +1). The origin must
 * fetch 1, and the word ends at 11. scripts/test.sh runs it under
 * ThreadSanitizer too.
 */
#include "pscom_testutil.h"

#include <pthread.h>
#include <stdint.h>
#include <string.h>

#define TAG_RKEY   1u
#define TAG_MARKER 2u

static uint64_t win[8];
static volatile int acc_done, fop_ran, fop_saw_acc = -1, stop;
static pscom_request_t *marker;

static void marker_done(pscom_request_t *req)
{
    (void)req; /* through the completion queue: DONE only once its turn came */
}

static void cb_acc(pscom_request_t *req)
{
    /* bounded by the harness's watchdog */
    while (!pscom_req_is_done(marker)) {
        TU_ASSERT_MSG(!fop_ran, "the FETCH_AND_OP callback ran during the ACCUMULATE callback");
    }
    TU_ASSERT_MSG(!fop_ran, "the FETCH_AND_OP callback ran during the ACCUMULATE callback");
    uint64_t v;
    memcpy(&v, req->data, sizeof(v));
    *(uint64_t *)req->xheader.rma_accumulate.common.dest += v;
    __atomic_store_n(&acc_done, 1, __ATOMIC_RELEASE);
}

static void cb_fop(pscom_request_t *req)
{
    fop_saw_acc = __atomic_load_n(&acc_done, __ATOMIC_ACQUIRE);
    uint64_t v;
    memcpy(&v, req->data, sizeof(v));
    *(uint64_t *)req->xheader.rma_fetch_op.common.src += v;
    __atomic_store_n(&fop_ran, 1, __ATOMIC_RELEASE);
}

static void *progress_thread(void *arg)
{
    (void)arg;
    while (!__atomic_load_n(&stop, __ATOMIC_ACQUIRE)) pscom_test_any();
    return NULL;
}

static int server(tu_ctx_t *ctx)
{
    TU_ASSERT_OK(pscom_init_thread(PSCOM_VERSION));
    pscom_socket_t *sock    = tu_open_socket(ctx, 0, 0);
    pscom_connection_t *con = tu_server_accept_one(ctx, sock);
    pscom_memh_t memh;
    TU_ASSERT_OK(pscom_mem_register(sock, win, sizeof(win), &memh));
    pscom_register_rma_callbacks(cb_acc, memh, PSCOM_RMA_ACCUMULATE);
    pscom_register_rma_callbacks(cb_fop, memh, PSCOM_RMA_FETCH_AND_OP);

    uint32_t tag = TAG_MARKER;
    marker       = pscom_request_create(sizeof(tag), 0);
    TU_ASSERT_NOT_NULL(marker);
    marker->connection  = con;
    marker->xheader_len = sizeof(tag);
    marker->ops.io_done = marker_done;
    pscom_post_recv(marker);

    void *rb;
    size_t rl;
    TU_ASSERT_OK(pscom_rkey_buffer_pack(&rb, &rl, memh));
    tag = TAG_RKEY;
    uint64_t addr = (uint64_t)(uintptr_t)win;
    unsigned char msg[4096];
    TU_ASSERT(rl + sizeof(addr) <= sizeof(msg));
    memcpy(msg, &addr, sizeof(addr));
    memcpy(msg + sizeof(addr), rb, rl);
    pscom_send(con, &tag, sizeof(tag), msg, sizeof(addr) + rl);
    pscom_rkey_buffer_release(rb);

    pthread_t th;
    TU_ASSERT_EQ(pthread_create(&th, NULL, progress_thread, NULL), 0);
    while (!__atomic_load_n(&fop_ran, __ATOMIC_ACQUIRE) || !pscom_req_is_done(marker))
        pscom_test_any();
    __atomic_store_n(&stop, 1, __ATOMIC_RELEASE);
    pthread_join(th, NULL);

    TU_ASSERT_EQ(acc_done, 1);
    TU_ASSERT_EQ(fop_saw_acc, 1);
    TU_ASSERT_EQ(win[0], 11);
    TU_ASSERT_SUCCESSFUL(marker);
    pscom_request_free(marker);
    tu_wait_signal(ctx, 1); /* the origin checked its result */
    TU_ASSERT_OK(pscom_mem_deregister(memh));
    pscom_close_connection(con);
    pscom_close_socket(sock);
    return 0;
}

static void keep(pscom_request_t *req)
{
    (void)req; /* an io_done: the request is ours to free (without, it frees itself) */
}

static void post_op(pscom_request_t *r, pscom_connection_t *con, pscom_rkey_t rkey,
                    uint64_t *origin, uint64_t *result, uint64_t target)
{
    r->connection       = con;
    r->rma.rkey         = rkey;
    r->rma.origin_addr  = origin;
    r->rma.result_addr  = result;
    r->rma.target_addr  = (void *)(uintptr_t)target;
    r->data_len         = sizeof(*origin);
    r->ops.io_done      = keep;
}

static int client(tu_ctx_t *ctx)
{
    pscom_socket_t *sock    = tu_open_socket(ctx, 0, 0);
    pscom_connection_t *con = tu_client_connect(ctx, sock);
    uint32_t tag;
    unsigned char msg[4096];
    pscom_request_t *r = pscom_request_create(sizeof(tag), 0);
    r->connection      = con;
    r->xheader_len     = sizeof(tag);
    r->data            = msg;
    r->data_len        = sizeof(msg);
    pscom_post_recv(r);
    pscom_wait(r);
    TU_ASSERT_SUCCESSFUL(r);
    memcpy(&tag, &r->xheader, sizeof(tag));
    TU_ASSERT_EQ(tag, TAG_RKEY);
    size_t len = r->header.data_len;
    pscom_request_free(r);
    uint64_t addr;
    TU_ASSERT(len > sizeof(addr));
    memcpy(&addr, msg, sizeof(addr));
    pscom_rkey_t rkey;
    TU_ASSERT_OK(pscom_rkey_generate(con, msg + sizeof(addr), len - sizeof(addr), &rkey));

    uint64_t one = 1, ten = 10, result = 12345;
    pscom_request_t *acc = pscom_request_create(sizeof(pscom_xheader_rma_accumulate_t), 0);
    pscom_request_t *fop = pscom_request_create(sizeof(pscom_xheader_rma_fetch_op_t), 0);
    post_op(acc, con, rkey, &one, NULL, addr);
    post_op(fop, con, rkey, &ten, &result, addr);
    pscom_post_rma_accumulate(acc);
    pscom_post_rma_fetch_op(fop);
    tag = TAG_MARKER;
    pscom_send(con, &tag, sizeof(tag), NULL, 0);
    pscom_wait(acc);
    pscom_wait(fop);
    TU_ASSERT_SUCCESSFUL(acc);
    TU_ASSERT_SUCCESSFUL(fop);
    TU_ASSERT_MSG(result == 1, "fetch-and-add fetched %llu, not 1: the accumulate before it "
                               "was not applied yet",
                  (unsigned long long)result);
    pscom_request_free(acc);
    pscom_request_free(fop);
    TU_ASSERT_OK(pscom_rkey_destroy(rkey));
    tu_signal(ctx, TU_SERVER, 1);
    pscom_close_connection(con);
    pscom_close_socket(sock);
    return 0;
}

int main(void)
{
    return tu_run("rma_threads", 1, server, client, NULL);
}
