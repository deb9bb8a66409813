/*
 * itest_rma_loopback: RMA and rendezvous on a connection of a socket to
 * itself (spec 3.7 #8: connecting to itself must work; an MPI rank's window
 * is also reachable through its connection to itself). One process,
 * PSP_RENDEZVOUS=65536.
 *
 *  - the rkey buffer travels over the loopback connection itself;
 *  - put, get, accumulate, get_accumulate, fetch_op, compare_swap once
 *    each: data, results and one target callback per operation;
 *  - a 1 MiB rendezvous message to itself, receive posted before and after;
 *  - a put with the largest xheader (65535 bytes), and one byte more;
 *  - a connection closed from a PUT callback while the target side of a
 *    fetch-op on it waits behind that callback.
 *
 * Loopback delivers synchronously inside the send: every operation that
 * answers (get, the atomics, the rendezvous CTS) is re-entered from its own
 * delivery, which is what this test is about.
 */
#include "pscom_testutil.h"

#include <stdlib.h>
#include <string.h>

#define WIN 65536

static unsigned char win[WIN];
static int cb[PSCOM_RMA_OP_COUNT];

static void cb_count(pscom_request_t *req)
{
    (void)req;
}

static void cb_put(pscom_request_t *req)
{
    cb_count(req);
    cb[PSCOM_RMA_PUT]++;
}

static void cb_get(pscom_request_t *req)
{
    cb_count(req);
    cb[PSCOM_RMA_GET]++;
}

static void add8(void *dst, const void *src)
{
    uint64_t a, b;
    memcpy(&a, dst, 8);
    memcpy(&b, src, 8);
    a += b;
    memcpy(dst, &a, 8);
}

static void cb_acc(pscom_request_t *req)
{
    add8(req->xheader.rma_accumulate.common.dest, req->data);
    cb[PSCOM_RMA_ACCUMULATE]++;
}

static void cb_gacc(pscom_request_t *req)
{
    add8(req->xheader.rma_get_accumulate.common.src, req->data);
    cb[PSCOM_RMA_GET_ACCUMULATE]++;
}

static void cb_fop(pscom_request_t *req)
{
    add8(req->xheader.rma_fetch_op.common.src, req->data);
    cb[PSCOM_RMA_FETCH_AND_OP]++;
}

static void cb_cas(pscom_request_t *req)
{
    (void)req;
    cb[PSCOM_RMA_COMPARE_AND_SWAP]++;
}

static void rma_op(pscom_connection_t *con, pscom_rkey_t rkey, void (*post)(pscom_request_t *),
                   size_t xlen, void *origin, void *result, void *compare, size_t off,
                   size_t len)
{
    pscom_request_t *r = pscom_request_create(sizeof(pscom_xheader_t), 0);
    TU_ASSERT_NOT_NULL(r);
    r->connection       = con;
    r->rma.rkey         = rkey;
    r->rma.origin_addr  = origin;
    r->rma.result_addr  = result;
    r->rma.compare_addr = compare;
    r->rma.target_addr  = win + off;
    r->data_len         = len;
    r->xheader_len      = xlen;
    r->ops.io_done      = cb_count; /* not self-freeing: we look at it */
    post(r);
    pscom_wait(r);
    TU_ASSERT_SUCCESSFUL(r);
    /* put-like requests are sends (spec 5.2), also where loopback moves
     * the data directly (until 2026-11-29 such a put lacked IO_STARTED) */
    if (r->state & PSCOM_REQ_STATE_SEND_REQUEST) {
        TU_ASSERT_STATE_HAS(r->state, PSCOM_REQ_STATE_IO_STARTED);
    }
    pscom_request_free(r);
}

/* A put with an xheader of xlen bytes (the request has room for it). */
static pscom_request_t *put_xheader(pscom_connection_t *con, pscom_rkey_t rkey, size_t xlen,
                                    void *origin, size_t off, size_t len)
{
    pscom_request_t *r = pscom_request_create(xlen, 0);
    TU_ASSERT_NOT_NULL(r);
    r->connection      = con;
    r->rma.rkey        = rkey;
    r->rma.origin_addr = origin;
    r->rma.target_addr = win + off;
    r->data_len        = len;
    r->xheader_len     = xlen;
    r->ops.io_done     = cb_count;
    pscom_post_rma_put(r);
    pscom_wait(r);
    return r;
}

/* ---- the target side of an atomic outlives its connection's close ---- */

static pscom_connection_t *close_con;
static pscom_rkey_t close_rkey;
static pscom_request_t *close_fop;
static uint64_t close_v = 1, close_res;

/* The PUT callback (target side, from the put's io_done): a fetch-op on the
 * same connection, whose target side queues behind this callback (they
 * run in arrival order), then the close. That target side answers on the
 * closed connection afterwards: until 2026-11-29 it was freed by then. */
static void cb_put_then_close(pscom_request_t *req)
{
    (void)req;
    close_fop = pscom_request_create(sizeof(pscom_xheader_t), 0);
    TU_ASSERT_NOT_NULL(close_fop);
    close_fop->connection      = close_con;
    close_fop->rma.rkey        = close_rkey;
    close_fop->rma.origin_addr = &close_v;
    close_fop->rma.result_addr = &close_res;
    close_fop->rma.target_addr = win + 16384;
    close_fop->data_len        = 8;
    close_fop->xheader_len     = sizeof(pscom_xheader_rma_fetch_op_t);
    close_fop->ops.io_done     = cb_count;
    pscom_post_rma_fetch_op(close_fop);
    pscom_close_connection(close_con);
}

static uint64_t ld(size_t off)
{
    uint64_t v;
    memcpy(&v, win + off, 8);
    return v;
}

static int self(tu_ctx_t *ctx)
{
    pscom_socket_t *sock = tu_open_socket(ctx, 0, 0);
    TU_ASSERT_OK(pscom_listen(sock, PSCOM_ANYPORT));
    char *ep;
    TU_ASSERT_OK(pscom_socket_get_ep_str(sock, &ep));
    pscom_connection_t *con = pscom_open_connection(sock);
    TU_ASSERT_NOT_NULL(con);
    TU_ASSERT_OK(pscom_connect(con, ep, TU_SERVER, PSCOM_CON_FLAG_DIRECT));
    pscom_socket_free_ep_str(ep);
    TU_ASSERT_EQ(con->type, PSCOM_CON_TYPE_LOOP);

    tu_fill(win, WIN, 5);
    pscom_memh_t memh;
    TU_ASSERT_OK(pscom_mem_register(sock, win, WIN, &memh));
    pscom_register_rma_callbacks(cb_put, memh, PSCOM_RMA_PUT);
    pscom_register_rma_callbacks(cb_get, memh, PSCOM_RMA_GET);
    pscom_register_rma_callbacks(cb_acc, memh, PSCOM_RMA_ACCUMULATE);
    pscom_register_rma_callbacks(cb_gacc, memh, PSCOM_RMA_GET_ACCUMULATE);
    pscom_register_rma_callbacks(cb_fop, memh, PSCOM_RMA_FETCH_AND_OP);
    pscom_register_rma_callbacks(cb_cas, memh, PSCOM_RMA_COMPARE_AND_SWAP);

    /* the rkey buffer over the loopback connection */
    void *rb;
    size_t rl;
    TU_ASSERT_OK(pscom_rkey_buffer_pack(&rb, &rl, memh));
    unsigned char got[1024];
    TU_ASSERT_LE(rl, sizeof(got));
    pscom_send(con, NULL, 0, rb, rl);
    TU_ASSERT_OK(pscom_recv_from(con, NULL, 0, got, rl));
    pscom_rkey_buffer_release(rb);
    pscom_rkey_t rkey;
    TU_ASSERT_OK(pscom_rkey_generate(con, got, rl, &rkey));

    unsigned char src[4096], dst[4096];
    tu_fill(src, sizeof(src), 77);
    rma_op(con, rkey, pscom_post_rma_put, sizeof(pscom_xheader_rma_put_t), src, NULL, NULL, 100,
           sizeof(src));
    pscom_test_any(); /* the target side of a loopback put may finish later */
    TU_ASSERT_PATTERN(win + 100, sizeof(src), 77);

    memset(dst, 0, sizeof(dst));
    rma_op(con, rkey, pscom_post_rma_get, sizeof(pscom_xheader_rma_get_t), dst, NULL, NULL, 100,
           sizeof(dst));
    TU_ASSERT_PATTERN(dst, sizeof(dst), 77);

    uint64_t v = 5, res = 0, cmp;
    size_t a   = 8192;
    uint64_t a0 = ld(a);
    rma_op(con, rkey, pscom_post_rma_accumulate, sizeof(pscom_xheader_rma_accumulate_t), &v, NULL,
           NULL, a, 8);
    rma_op(con, rkey, pscom_post_rma_get_accumulate,
           sizeof(pscom_xheader_rma_get_accumulate_t), &v, &res, NULL, a, 8);
    TU_ASSERT_EQ(res, a0 + 5);
    rma_op(con, rkey, pscom_post_rma_fetch_op, sizeof(pscom_xheader_rma_fetch_op_t), &v, &res,
           NULL, a, 8);
    TU_ASSERT_EQ(res, a0 + 10);
    cmp = a0 + 15;
    v   = 42;
    rma_op(con, rkey, pscom_post_rma_compare_swap, sizeof(pscom_xheader_rma_compare_swap_t), &v,
           &res, &cmp, a, 8);
    TU_ASSERT_EQ(res, a0 + 15);
    for (int i = 0; i < 10; i++) pscom_test_any();
    TU_ASSERT_EQ(ld(a), 42);
    for (int op = 0; op < PSCOM_RMA_OP_COUNT; op++) TU_ASSERT_EQ(cb[op], 1);

    /* the largest xheader a put can have: over loopback the data moves
     * directly, and the target's notice (the xheader and 8 bytes) would
     * not fit the 16-bit length; it goes as a message (until 2026-11-29
     * the length wrapped, the target closed the connection for a malformed
     * message and the process aborted) */
    pscom_request_t *big = put_xheader(con, rkey, 65535, src, 200, 64);
    TU_ASSERT_SUCCESSFUL(big);
    pscom_request_free(big);
    pscom_test_any();
    TU_ASSERT_EQ(cb[PSCOM_RMA_PUT], 2);
    TU_ASSERT_PATTERN(win + 200, 64, 77);
    TU_ASSERT_EQ(con->state, PSCOM_CON_STATE_RW);
    /* one byte more cannot go on the wire: the put fails at the origin */
    big = put_xheader(con, rkey, 65536, src, 200, 64);
    TU_ASSERT_MSG(big->state & PSCOM_REQ_STATE_ERROR, "[%s]", tu_state_str(big->state));
    pscom_request_free(big);
    TU_ASSERT_EQ(cb[PSCOM_RMA_PUT], 2);
    TU_ASSERT_EQ(con->state, PSCOM_CON_STATE_RW);

    /* rendezvous to itself, posted before and after */
    size_t n            = 1u << 20;
    unsigned char *sbuf = tu_malloc(n), *rbuf = tu_malloc(n);
    for (int k = 0; k < 2; k++) {
        tu_fill(sbuf, n, 100 + k);
        memset(rbuf, 0, n);
        pscom_request_t *r = pscom_request_create(0, 0), *s = pscom_request_create(0, 0);
        r->connection      = con;
        r->socket          = sock;
        r->data            = rbuf;
        r->data_len        = n;
        r->xheader_len     = 0;
        if (k == 0) pscom_post_recv(r);
        pscom_req_prepare(s, con, sbuf, n, NULL, 0);
        pscom_post_send(s);
        if (k == 1) pscom_post_recv(r);
        pscom_wait(s);
        pscom_wait(r);
        TU_ASSERT_SUCCESSFUL(s);
        TU_ASSERT_STATE_HAS(s->state, PSCOM_REQ_STATE_RENDEZVOUS_REQUEST);
        TU_ASSERT_SUCCESSFUL(r);
        TU_ASSERT_PATTERN(rbuf, n, 100 + k);
        pscom_request_free(r);
        pscom_request_free(s);
    }
    free(sbuf);
    free(rbuf);

    /* a second connection to itself, closed from a PUT callback while a
     * fetch-op's target side waits behind it */
    close_con = pscom_open_connection(sock);
    TU_ASSERT_OK(pscom_connect(close_con, NULL, 0, PSCOM_CON_FLAG_DIRECT));
    TU_ASSERT_OK(pscom_rkey_generate(close_con, got, rl, &close_rkey));
    pscom_register_rma_callbacks(cb_put_then_close, memh, PSCOM_RMA_PUT);
    rma_op(close_con, close_rkey, pscom_post_rma_put, sizeof(pscom_xheader_rma_put_t), src, NULL,
           NULL, 300, 64);
    TU_ASSERT_NOT_NULL(close_fop);
    pscom_wait(close_fop);
    /* its answer could not come: the connection was closed before */
    TU_ASSERT_MSG(close_fop->state & PSCOM_REQ_STATE_ERROR, "fetch-op: [%s]",
                  tu_state_str(close_fop->state));
    pscom_request_free(close_fop);
    TU_ASSERT_OK(pscom_rkey_destroy(close_rkey));

    TU_ASSERT_OK(pscom_rkey_destroy(rkey));
    TU_ASSERT_OK(pscom_mem_deregister(memh));
    pscom_close_connection(con);
    pscom_close_socket(sock);
    return 0;
}

int main(void)
{
    setenv("PSP_RENDEZVOUS", "65536", 1);
    tu_opts_t o = {.timeout = 30};
    return tu_run("rma_loopback", 0, self, NULL, &o);
}
