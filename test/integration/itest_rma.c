/*
 * itest_rma: the one-sided API between two processes (spec 1.7, 5.9).
 *
 * The server is the target: it registers an 8 MiB window, registers a
 * callback for each of the six operation types, packs the remote key and
 * ships it (plus the window's address, for the legacy calls) to the client
 * in an ordinary pscom message. The client generates the rkey and runs one
 * phase per operation type. Both sides keep a model of the window (the same
 * deterministic operation lists applied to a mirror); after each phase the
 * client sends a CHECK message and the server compares its window with its
 * mirror and its callback counters with the number of operations.
 *
 *  - put: 49 puts (0 B .. 200 kB, overlapping, applied in order) and one
 *    4 MiB put; a third of them with io_done == NULL (they free
 *    themselves), the others count io_done calls; state SEND_REQUEST.
 *  - get: 33 gets incl. 4 MiB compared with the mirror; self-freeing gets
 *    are checked after a later get on the connection completed (answers
 *    are ordered); state RMA_READ_REQUEST.
 *  - accumulate (u64 add, done by the target callback from req->data into
 *    xheader.rma_accumulate.common.dest), get_accumulate (old values at
 *    result_addr, callback adds), fetch_op (500 fetch-and-add: results are
 *    exactly 0..499 in order), compare_swap (the library swaps before the
 *    notification callback; failing compares leave the value).
 *  - legacy pscom_post_rma_write / pscom_post_rma_read.
 *  - Every target callback checks: PASSIVE_SIDE state, the connection, the
 *    incoming xheader length and the whole user part (a different struct
 *    type per operation, set through the PSCOM_XHEADER_RMA_*_USER_TYPE
 *    hooks as MPI does, with a byte pattern tail), and the common part
 *    (target address, length) against the values the origin meant.
 *  - Out-of-range put/get/accumulate/get_accumulate/fetch_op/compare_swap
 *    (past the end, before the start, one byte too long, whole window + 1,
 *    an rkey of a zero-length region) complete with ERROR and io_done runs
 *    exactly once (we differ from the established library here, which never
 *    completes them); self-freeing ones free themselves. Nothing is written
 *    at the target and no callback runs.
 *  - After the target deregistered the window, a get and a fetch_op with
 *    the old rkey end with ERROR (the target refuses them); a put completes
 *    locally but does not touch the memory and runs no callback. (These
 *    are small: a transport with CAP_RMA_READ/WRITE moves large put/get
 *    data directly, checked at the origin only; skipped where they would
 *    go directly too, PSP_SHM_RENDEZVOUS=0 over shm.)
 *  - Put offsets grow by 40009 bytes, more than any put below 32 KiB is
 *    long: a direct put (shm, from 32 KiB) never overlaps an earlier put
 *    still in flight as a message (it may overtake those, as MPI allows).
 *  - Local API corner cases: NULL/0 registration, NULL memh, NULL rkey
 *    buffer, NULL handles for the release/destroy/deregister calls, no
 *    intra-job socket.
 *
 * Second scenario (direct, see direct_server): over shm, 1 MiB puts and
 * gets complete while the target stays out of pscom (cross-memory attach),
 * its callbacks run once each afterwards.
 *
 * Third scenario (put_death): the origin dies (SIGKILL) in the middle of a
 * 64 MiB put; the target's PUT callback must not run for the incomplete
 * put, and con_error is called. Fourth scenario (get_death): the target dies
 * while answering a 64 MiB get (or, get_death_early, before it read the
 * request); the origin's get ends with ERROR, io_done runs and con_error is
 * called. Fifth (get_origin_death): the origin of a
 * 64 MiB get dies without reading the answer; the target's GET callback
 * must not run for the answer that never left. (Over shm they complete
 * directly before the death: then the data must be all there.)
 */
#include <stdint.h>

/* user parts of the RMA xheaders (as an MPI device would define them) */
typedef struct rma_uhead {
    uint32_t magic;
    uint16_t op;
    uint16_t self_free;
    uint32_t seq;
    uint32_t tail_len;
    uint64_t off; /* window offset the origin meant */
    uint64_t len; /* bytes the origin meant */
    uint32_t red; /* accumulate: RED_ADD or RED_REPLACE */
    uint32_t reserved;
} rma_uhead_t;

#define RED_ADD     1
#define RED_REPLACE 2

typedef struct put_user {
    rma_uhead_t h;
    unsigned char tail[5];
} put_user_t;
typedef struct get_user {
    rma_uhead_t h;
} get_user_t;
typedef struct acc_user {
    rma_uhead_t h;
    unsigned char tail[13];
} acc_user_t;
typedef struct getacc_user {
    rma_uhead_t h;
    unsigned char tail[40];
} getacc_user_t;
typedef struct fop_user {
    rma_uhead_t h;
    unsigned char tail[1];
} fop_user_t;
typedef struct cas_user {
    rma_uhead_t h;
    unsigned char tail[100];
} cas_user_t;

#define PSCOM_XHEADER_RMA_PUT_USER_TYPE            put_user_t
#define PSCOM_XHEADER_RMA_GET_USER_TYPE            get_user_t
#define PSCOM_XHEADER_RMA_ACCUMULATE_USER_TYPE     acc_user_t
#define PSCOM_XHEADER_RMA_GET_ACCUMULATE_USER_TYPE getacc_user_t
#define PSCOM_XHEADER_RMA_FETCH_OP_USER_TYPE       fop_user_t
#define PSCOM_XHEADER_RMA_COMPARE_SWAP_USER_TYPE   cas_user_t

#include "pscom_testutil.h"

#include <signal.h>
#include <stdlib.h>
#include <string.h>

#define UMAGIC 0x524d4121u /* "RMA!" */

#define WIN_LEN    (8u << 20)
#define WIN_SEED   4242u
#define PUT_AREA   (2u << 20)  /* puts: [0, 2 MiB) */
#define BIG_OFF    (4u << 20)  /* 4 MiB put/get: [4 MiB, 8 MiB) */
#define BIG_LEN    (4u << 20)
#define ACC_OFF    (2u << 20)  /* accumulate: 512 u64 */
#define GACC_OFF   ((2u << 20) + 65536u) /* get_accumulate: 512 u64 */
#define FOP_OFF    (3u << 20)
#define CAS_OFF    ((3u << 20) + 64u)
#define LEG_OFF    ((3u << 20) + 4096u)
#define LEG_LEN    5000u

#define NPUT  49
#define NGET  32
#define NACC  64
#define NGACC 32
#define NFOP  500
#define NCAS  100

#define TAG_RKEY  0x524b4559u
#define TAG_CHECK 0x43480000u /* + phase */
#define TAG_ACK   0x41430000u /* + phase */

enum { PH_PUT = 1, PH_GET, PH_ACC, PH_GACC, PH_FOP, PH_CAS, PH_LEGACY, PH_OOR, PH_DEREG,
       PH_AFTER_DEREG, PH_END };

typedef struct ctl_xh {
    uint32_t tag;
    uint32_t phase;
    uint64_t addr; /* rkey message: the window's address (legacy calls) */
} ctl_xh_t;

/* ---- shared model ------------------------------------------------------------ */

static const size_t put_sizes[] = {1, 3, 8, 100, 4096, 65536, 200000};

static void put_params(int i, size_t *off, size_t *len, uint32_t *seed)
{
    *len  = i == NPUT - 1 ? 0 : put_sizes[i % 7];
    *off  = ((size_t)i * 40009u) % (PUT_AREA - 200000u);
    *seed = 1000u + (uint32_t)i;
}

static void acc_params(int i, size_t *off, size_t *count)
{
    *count = 1 + (size_t)(i % 16);
    *off   = ACC_OFF + ((size_t)(i * 7) % (512 - 16)) * 8;
}

static uint64_t acc_val(int i, size_t j)
{
    return (uint64_t)i * 1000u + j + 1;
}

/* not commutative: the callbacks must run in arrival order */
static int acc_red(int i)
{
    return i % 4 == 3 ? RED_REPLACE : RED_ADD;
}

static void gacc_params(int i, size_t *off, size_t *count)
{
    *count = 1 + (size_t)(i % 9);
    *off   = GACC_OFF + ((size_t)(i * 13) % (512 - 9)) * 8;
}

static uint64_t gacc_val(int i, size_t j)
{
    return ((uint64_t)i << 32) + j * 3 + 7;
}

static uint64_t cas_new(int i)
{
    return 0x1000u + (uint64_t)i;
}

static uint64_t ld64(const void *p)
{
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}

static void st64(void *p, uint64_t v)
{
    memcpy(p, &v, 8);
}

static void add64(void *dst, const void *src, size_t n)
{
    for (size_t j = 0; j < n; j++) {
        st64((char *)dst + 8 * j, ld64((char *)dst + 8 * j) + ld64((const char *)src + 8 * j));
    }
}

/* apply a phase to a mirror of the target window */
static void model(unsigned char *m, int phase)
{
    switch (phase) {
    case PH_PUT:
        for (int i = 0; i < NPUT; i++) {
            size_t off, len;
            uint32_t seed;
            put_params(i, &off, &len, &seed);
            tu_fill(m + off, len, seed);
        }
        tu_fill(m + BIG_OFF, BIG_LEN, 777);
        break;
    case PH_ACC:
        for (int i = 0; i < NACC; i++) {
            size_t off, cnt;
            acc_params(i, &off, &cnt);
            for (size_t j = 0; j < cnt; j++)
                st64(m + off + 8 * j, (acc_red(i) == RED_ADD ? ld64(m + off + 8 * j) : 0) +
                                          acc_val(i, j));
        }
        break;
    case PH_GACC:
        for (int i = 0; i < NGACC; i++) {
            size_t off, cnt;
            gacc_params(i, &off, &cnt);
            for (size_t j = 0; j < cnt; j++)
                st64(m + off + 8 * j, ld64(m + off + 8 * j) + gacc_val(i, j));
        }
        break;
    case PH_FOP: st64(m + FOP_OFF, ld64(m + FOP_OFF) + NFOP); break;
    case PH_CAS:
        for (int i = 0; i < NCAS; i++) {
            if (i % 3 != 2) st64(m + CAS_OFF, cas_new(i));
        }
        break;
    case PH_LEGACY: tu_fill(m + LEG_OFF, LEG_LEN, 31337); break;
    default: break;
    }
}

static void fill_tail(unsigned char *t, size_t n, uint32_t seq, int op)
{
    for (size_t k = 0; k < n; k++) t[k] = (unsigned char)(seq * 31u + (unsigned)op * 7u + k);
}

static void set_head(rma_uhead_t *h, int op, uint32_t seq, size_t off, size_t len, int self_free,
                     unsigned char *tail, size_t tail_len)
{
    h->magic     = UMAGIC;
    h->op        = (uint16_t)op;
    h->self_free = (uint16_t)self_free;
    h->seq       = seq;
    h->tail_len  = (uint32_t)tail_len;
    h->off       = off;
    h->len       = len;
    h->red       = RED_ADD;
    h->reserved  = 0;
    fill_tail(tail, tail_len, seq, op);
}

/* ---- target (server) ------------------------------------------------------------ */

static unsigned char *g_win;
static pscom_connection_t *g_con;
static int cb_count[PSCOM_RMA_OP_COUNT];
static volatile int g_con_error;

static void check_user(pscom_request_t *req, const rma_uhead_t *h, const unsigned char *tail,
                       size_t tail_len, int op, size_t xlen)
{
    TU_ASSERT_STATE_HAS(req->state, PSCOM_REQ_STATE_PASSIVE_SIDE);
    TU_ASSERT_PTR_EQ(req->connection, g_con);
    TU_ASSERT_EQ(req->xheader_len, xlen);
    TU_ASSERT_EQ(h->magic, UMAGIC);
    TU_ASSERT_EQ(h->op, op);
    TU_ASSERT_EQ(h->tail_len, tail_len);
    unsigned char want[128] = {0};
    fill_tail(want, tail_len, h->seq, op);
    TU_ASSERT_MEM_EQ(tail, want, tail_len);
}

static void cb_put(pscom_request_t *req)
{
    pscom_xheader_rma_put_t *xh = &req->xheader.rma_put;
    check_user(req, &xh->user.h, xh->user.tail, sizeof(xh->user.tail), PSCOM_RMA_PUT,
               sizeof(*xh));
    TU_ASSERT_PTR_EQ(xh->common.dest, g_win + xh->user.h.off);
    TU_ASSERT_EQ(req->data_len, xh->user.h.len);
    cb_count[PSCOM_RMA_PUT]++;
}

static void cb_get(pscom_request_t *req)
{
    pscom_xheader_rma_get_t *xh = &req->xheader.rma_get;
    check_user(req, &xh->user.h, NULL, 0, PSCOM_RMA_GET, sizeof(*xh));
    TU_ASSERT_PTR_EQ(xh->common.src, g_win + xh->user.h.off);
    TU_ASSERT_EQ(xh->common.src_len, xh->user.h.len);
    cb_count[PSCOM_RMA_GET]++;
}

/* the reduction is the callback's job (spec 5.9) */
static void cb_acc(pscom_request_t *req)
{
    pscom_xheader_rma_accumulate_t *xh = &req->xheader.rma_accumulate;
    check_user(req, &xh->user.h, xh->user.tail, sizeof(xh->user.tail), PSCOM_RMA_ACCUMULATE,
               sizeof(*xh));
    TU_ASSERT_PTR_EQ(xh->common.dest, g_win + xh->user.h.off);
    TU_ASSERT_EQ(req->data_len, xh->user.h.len);
    TU_ASSERT_NOT_NULL(req->data);
    if (xh->user.h.red == RED_REPLACE) {
        memcpy(xh->common.dest, req->data, req->data_len);
    } else {
        TU_ASSERT_EQ(xh->user.h.red, RED_ADD);
        add64(xh->common.dest, req->data, req->data_len / 8);
    }
    cb_count[PSCOM_RMA_ACCUMULATE]++;
}

static void cb_gacc(pscom_request_t *req)
{
    pscom_xheader_rma_get_accumulate_t *xh = &req->xheader.rma_get_accumulate;
    check_user(req, &xh->user.h, xh->user.tail, sizeof(xh->user.tail),
               PSCOM_RMA_GET_ACCUMULATE, sizeof(*xh));
    TU_ASSERT_PTR_EQ(xh->common.src, g_win + xh->user.h.off);
    TU_ASSERT_EQ(xh->common.src_len, xh->user.h.len);
    TU_ASSERT_EQ(req->data_len, xh->user.h.len);
    add64(xh->common.src, req->data, req->data_len / 8);
    cb_count[PSCOM_RMA_GET_ACCUMULATE]++;
}

static void cb_fop(pscom_request_t *req)
{
    pscom_xheader_rma_fetch_op_t *xh = &req->xheader.rma_fetch_op;
    check_user(req, &xh->user.h, xh->user.tail, sizeof(xh->user.tail), PSCOM_RMA_FETCH_AND_OP,
               sizeof(*xh));
    TU_ASSERT_PTR_EQ(xh->common.src, g_win + FOP_OFF);
    TU_ASSERT_EQ(xh->common.src_len, 8);
    TU_ASSERT_EQ(req->data_len, 8);
    add64(xh->common.src, req->data, 1);
    cb_count[PSCOM_RMA_FETCH_AND_OP]++;
}

/* notification only: the library has compared and swapped already */
static void cb_cas(pscom_request_t *req)
{
    pscom_xheader_rma_compare_swap_t *xh = &req->xheader.rma_compare_swap;
    check_user(req, &xh->user.h, xh->user.tail, sizeof(xh->user.tail),
               PSCOM_RMA_COMPARE_AND_SWAP, sizeof(*xh));
    TU_ASSERT_PTR_EQ(xh->common.src, g_win + CAS_OFF);
    TU_ASSERT_EQ(xh->common.src_len, 8);
    TU_ASSERT_EQ(req->data_len, 16); /* compare value, then the new value */
    uint64_t cur = ld64(g_win + CAS_OFF);
    uint64_t cmp = ld64(req->data), nv = ld64((char *)req->data + 8);
    TU_ASSERT_MSG(cur == nv || cur != cmp,
                  "CAS callback before the swap: target %#llx, compare %#llx, new %#llx",
                  (unsigned long long)cur, (unsigned long long)cmp, (unsigned long long)nv);
    cb_count[PSCOM_RMA_COMPARE_AND_SWAP]++;
}

static void on_con_error(pscom_connection_t *con, pscom_op_t op, pscom_err_t err)
{
    (void)con;
    (void)op;
    (void)err;
    g_con_error++;
}

/* receive the next message with this tag (and copy data_len bytes of data) */
static size_t recv_tag(pscom_connection_t *con, uint32_t tag, ctl_xh_t *xh, void *data,
                       size_t data_len)
{
    pscom_request_t *req = pscom_request_create(sizeof(ctl_xh_t), sizeof(uint32_t));
    TU_ASSERT_NOT_NULL(req);
    memcpy((void *)req->user, &tag, sizeof(tag));
    req->connection      = con;
    req->socket          = con->socket;
    req->xheader_len     = sizeof(ctl_xh_t);
    req->data            = data;
    req->data_len        = data_len;
    req->ops.recv_accept = tu_accept_tag;
    pscom_post_recv(req);
    pscom_wait(req);
    TU_ASSERT_SUCCESSFUL(req);
    if (xh) memcpy(xh, (void *)&req->xheader, sizeof(*xh));
    size_t n = req->header.data_len;
    pscom_request_free(req);
    return n;
}

static void send_ctl(pscom_connection_t *con, uint32_t tag, uint32_t phase, uint64_t addr,
                     void *data, size_t len)
{
    ctl_xh_t xh = {tag, phase, addr};
    pscom_send(con, &xh, sizeof(xh), data, len);
}

static void expect_counts(const int *want)
{
    for (int op = 0; op < PSCOM_RMA_OP_COUNT; op++) {
        TU_ASSERT_MSG(cb_count[op] == want[op], "callback count of op %d: %d, expected %d", op,
                      cb_count[op], want[op]);
    }
}

static int server(tu_ctx_t *ctx)
{
    pscom_socket_t *sock = tu_open_socket(ctx, 0, 0);
    g_con = tu_server_accept_one(ctx, sock);

    g_win             = tu_malloc(WIN_LEN);
    unsigned char *mm = tu_malloc(WIN_LEN);
    tu_fill(g_win, WIN_LEN, WIN_SEED);
    tu_fill(mm, WIN_LEN, WIN_SEED);

    pscom_memh_t memh = NULL;
    TU_ASSERT_OK(pscom_mem_register(sock, g_win, WIN_LEN, &memh));
    TU_ASSERT_NOT_NULL(memh);
    pscom_register_rma_callbacks(cb_put, memh, PSCOM_RMA_PUT);
    pscom_register_rma_callbacks(cb_get, memh, PSCOM_RMA_GET);
    pscom_register_rma_callbacks(cb_acc, memh, PSCOM_RMA_ACCUMULATE);
    pscom_register_rma_callbacks(cb_gacc, memh, PSCOM_RMA_GET_ACCUMULATE);
    pscom_register_rma_callbacks(cb_fop, memh, PSCOM_RMA_FETCH_AND_OP);
    pscom_register_rma_callbacks(cb_cas, memh, PSCOM_RMA_COMPARE_AND_SWAP);

    void *rkeybuf = NULL;
    size_t rkeylen = 0;
    TU_ASSERT_OK(pscom_rkey_buffer_pack(&rkeybuf, &rkeylen, memh));
    TU_ASSERT_NOT_NULL(rkeybuf);
    TU_ASSERT_GT(rkeylen, 0);
    send_ctl(g_con, TAG_RKEY, 0, (uint64_t)(uintptr_t)g_win, rkeybuf, rkeylen);
    pscom_rkey_buffer_release(rkeybuf);

    int want[PSCOM_RMA_OP_COUNT] = {0};
    for (int phase = PH_PUT; phase <= PH_END; phase++) {
        ctl_xh_t xh;
        recv_tag(g_con, TAG_CHECK + (uint32_t)phase, &xh, NULL, 0);
        model(mm, phase);
        switch (phase) {
        case PH_PUT: want[PSCOM_RMA_PUT] += NPUT + 1; break;
        case PH_GET: want[PSCOM_RMA_GET] += NGET + 1; break;
        case PH_ACC: want[PSCOM_RMA_ACCUMULATE] += NACC; break;
        case PH_GACC: want[PSCOM_RMA_GET_ACCUMULATE] += NGACC; break;
        case PH_FOP: want[PSCOM_RMA_FETCH_AND_OP] += NFOP; break;
        case PH_CAS: want[PSCOM_RMA_COMPARE_AND_SWAP] += NCAS; break;
        case PH_DEREG:
            /* the window stays allocated, but is no longer exposed */
            TU_ASSERT_OK(pscom_mem_deregister(memh));
            memh = NULL;
            break;
        default: break;
        }
        TU_ASSERT_MEM_EQ(g_win, mm, WIN_LEN);
        expect_counts(want);
        send_ctl(g_con, TAG_ACK + (uint32_t)phase, (uint32_t)phase, 0, NULL, 0);
    }
    free(mm);
    return 0; /* the window is never freed: exit closes the socket first */
}

/* ---- origin (client) --------------------------------------------------------------- */

static int io_done_count;
static int io_done_errors;

static void count_io_done(pscom_request_t *req)
{
    io_done_count++;
    if (req->state & PSCOM_REQ_STATE_ERROR) io_done_errors++;
    TU_ASSERT(pscom_req_is_done(req));
}

static void wait_io_done(int n)
{
    while (io_done_count < n) pscom_wait_any();
}

static pscom_request_t *rma_req(pscom_connection_t *con, pscom_rkey_t rkey, int self_free)
{
    pscom_request_t *r = pscom_request_create(sizeof(pscom_xheader_t), 0);
    TU_ASSERT_NOT_NULL(r);
    r->connection  = con;
    r->rma.rkey    = rkey;
    r->ops.io_done = self_free ? NULL : count_io_done;
    return r;
}

static void check_phase(pscom_connection_t *con, int phase)
{
    send_ctl(con, TAG_CHECK + (uint32_t)phase, (uint32_t)phase, 0, NULL, 0);
    recv_tag(con, TAG_ACK + (uint32_t)phase, NULL, NULL, 0);
}

static void local_api_checks(pscom_socket_t *sock, pscom_connection_t *con)
{
    pscom_memh_t memh = (pscom_memh_t)(uintptr_t)1;
    char byte         = 0;

    /* no intra-job socket in this process */
    TU_ASSERT_ERR(pscom_mem_register(NULL, &byte, 1, &memh), PSCOM_ERR_INVALID);
    TU_ASSERT_NULL(memh);
    memh = (pscom_memh_t)(uintptr_t)1;
    TU_ASSERT_ERR(pscom_mem_register(sock, NULL, 16, &memh), PSCOM_ERR_INVALID);
    TU_ASSERT_NULL(memh);

    void *buf      = (void *)(uintptr_t)1;
    size_t buf_len = 0;
    TU_ASSERT_ERR(pscom_rkey_buffer_pack(&buf, &buf_len, NULL), PSCOM_ERR_INVALID);
    TU_ASSERT_NULL(buf);

    pscom_rkey_t rkey = (pscom_rkey_t)(uintptr_t)1;
    TU_ASSERT_OK(pscom_rkey_generate(con, NULL, 0, &rkey));
    TU_ASSERT_NULL(rkey);
    TU_ASSERT_OK(pscom_rkey_destroy(NULL));
    TU_ASSERT_OK(pscom_mem_deregister(NULL));
    pscom_rkey_buffer_release(NULL);
    pscom_register_rma_callbacks(cb_put, NULL, PSCOM_RMA_PUT); /* no-op */

    /* NULL/0 is a valid, empty region */
    TU_ASSERT_OK(pscom_mem_register(sock, NULL, 0, &memh));
    TU_ASSERT_NOT_NULL(memh);
    TU_ASSERT_OK(pscom_rkey_buffer_pack(&buf, &buf_len, memh));
    TU_ASSERT_NOT_NULL(buf);
    TU_ASSERT_GT(buf_len, 0);
    /* a copy: two packs are independent buffers */
    void *buf2      = NULL;
    size_t buf2_len = 0;
    TU_ASSERT_OK(pscom_rkey_buffer_pack(&buf2, &buf2_len, memh));
    TU_ASSERT(buf2 != buf);
    TU_ASSERT_EQ(buf2_len, buf_len);
    TU_ASSERT_MEM_EQ(buf, buf2, buf_len);
    pscom_rkey_buffer_release(buf2);

    TU_ASSERT_OK(pscom_rkey_generate(con, buf, buf_len, &rkey));
    TU_ASSERT_NOT_NULL(rkey);
    /* anything through an rkey of an empty region is out of range */
    int before               = io_done_count;
    pscom_request_t *r       = rma_req(con, rkey, 0);
    uint64_t v               = 0;
    r->rma.origin_addr       = &v;
    r->rma.target_addr       = NULL;
    r->data_len              = 1;
    r->xheader_len           = sizeof(pscom_xheader_rma_put_t);
    r->xheader.rma_put.user.h.magic = UMAGIC;
    pscom_post_rma_put(r);
    pscom_wait(r);
    TU_ASSERT_STATE_HAS(r->state, PSCOM_REQ_STATE_ERROR | PSCOM_REQ_STATE_DONE);
    TU_ASSERT_EQ(io_done_count, before + 1);
    pscom_request_free(r);
    io_done_errors = 0;
    io_done_count  = 0;

    TU_ASSERT_OK(pscom_rkey_destroy(rkey));
    pscom_rkey_buffer_release(buf);
    TU_ASSERT_OK(pscom_mem_deregister(memh));
}

static void phase_put(pscom_connection_t *con, pscom_rkey_t rkey, unsigned char *win)
{
    unsigned char *src = tu_malloc(PUT_AREA + BIG_LEN);
    pscom_request_t *reqs[NPUT + 1];
    int counted = 0;
    size_t soff = 0;
    for (int i = 0; i <= NPUT; i++) {
        size_t off, len;
        uint32_t seed;
        int big = i == NPUT;
        if (big) {
            off  = BIG_OFF;
            len  = BIG_LEN;
            seed = 777;
        } else {
            put_params(i, &off, &len, &seed);
        }
        int self_free = !big && i % 3 == 0;
        unsigned char *s = src + soff;
        soff += len;
        tu_fill(s, len, seed);
        pscom_request_t *r = rma_req(con, rkey, self_free);
        r->rma.origin_addr = s;
        r->rma.target_addr = win + off;
        r->data_len        = len;
        r->xheader_len     = sizeof(pscom_xheader_rma_put_t);
        set_head(&r->xheader.rma_put.user.h, PSCOM_RMA_PUT, (uint32_t)i, off, len, self_free,
                 r->xheader.rma_put.user.tail, sizeof(r->xheader.rma_put.user.tail));
        reqs[i] = self_free ? NULL : r;
        if (!self_free) counted++;
        pscom_post_rma_put(r);
    }
    wait_io_done(counted);
    TU_ASSERT_EQ(io_done_errors, 0);
    for (int i = 0; i <= NPUT; i++) {
        if (!reqs[i]) continue;
        TU_ASSERT_SUCCESSFUL(reqs[i]);
        TU_ASSERT_STATE_HAS(reqs[i]->state, PSCOM_REQ_STATE_SEND_REQUEST);
        pscom_request_free(reqs[i]);
    }
    io_done_count = 0;
    free(src);
}

static void phase_get(pscom_connection_t *con, pscom_rkey_t rkey, unsigned char *win,
                      const unsigned char *mirror)
{
    unsigned char *dst[NGET + 1];
    size_t offs[NGET + 1], lens[NGET + 1];
    pscom_request_t *reqs[NGET + 1];
    int counted = 0;
    for (int i = 0; i <= NGET; i++) {
        int big   = i == NGET;
        size_t len = big ? BIG_LEN : (size_t[]){0, 1, 9, 64, 1000, 65536, 300000, 8}[i % 8];
        size_t off = big ? BIG_OFF : ((size_t)i * 262147u) % (WIN_LEN - len);
        /* self-freeing ones are never last: a later counted get proves they finished */
        int self_free = !big && i % 4 == 1;
        offs[i]       = off;
        lens[i]       = len;
        dst[i]        = tu_malloc(len + 16);
        memset(dst[i], 0xee, len + 16);
        pscom_request_t *r = rma_req(con, rkey, self_free);
        r->rma.origin_addr = dst[i];
        r->rma.target_addr = win + off;
        r->data_len        = len;
        r->xheader_len     = sizeof(pscom_xheader_rma_get_t);
        set_head(&r->xheader.rma_get.user.h, PSCOM_RMA_GET, (uint32_t)i, off, len, self_free,
                 NULL, 0);
        reqs[i] = self_free ? NULL : r;
        if (!self_free) counted++;
        pscom_post_rma_get(r);
    }
    wait_io_done(counted);
    TU_ASSERT_EQ(io_done_errors, 0);
    for (int i = 0; i <= NGET; i++) {
        TU_ASSERT_MEM_EQ(dst[i], mirror + offs[i], lens[i]);
        TU_ASSERT_BYTES(dst[i] + lens[i], 16, 0xee);
        free(dst[i]);
        if (!reqs[i]) continue;
        TU_ASSERT_SUCCESSFUL(reqs[i]);
        TU_ASSERT_STATE_HAS(reqs[i]->state, PSCOM_REQ_STATE_RMA_READ_REQUEST);
        pscom_request_free(reqs[i]);
    }
    io_done_count = 0;
}

static void phase_acc(pscom_connection_t *con, pscom_rkey_t rkey, unsigned char *win)
{
    uint64_t *vals = tu_malloc(NACC * 16 * 8);
    int counted    = 0;
    pscom_request_t *reqs[NACC];
    for (int i = 0; i < NACC; i++) {
        size_t off, cnt;
        acc_params(i, &off, &cnt);
        uint64_t *v = vals + i * 16;
        for (size_t j = 0; j < cnt; j++) v[j] = acc_val(i, j);
        int self_free      = i % 2 == 0;
        pscom_request_t *r = rma_req(con, rkey, self_free);
        r->rma.origin_addr = v;
        r->rma.target_addr = win + off;
        r->data_len        = cnt * 8;
        r->xheader_len     = sizeof(pscom_xheader_rma_accumulate_t);
        set_head(&r->xheader.rma_accumulate.user.h, PSCOM_RMA_ACCUMULATE, (uint32_t)i, off,
                 cnt * 8, self_free, r->xheader.rma_accumulate.user.tail,
                 sizeof(r->xheader.rma_accumulate.user.tail));
        r->xheader.rma_accumulate.user.h.red = (uint32_t)acc_red(i);
        reqs[i] = self_free ? NULL : r;
        if (!self_free) counted++;
        pscom_post_rma_accumulate(r);
    }
    wait_io_done(counted);
    TU_ASSERT_EQ(io_done_errors, 0);
    for (int i = 0; i < NACC; i++) {
        if (!reqs[i]) continue;
        TU_ASSERT_SUCCESSFUL(reqs[i]);
        pscom_request_free(reqs[i]);
    }
    io_done_count = 0;
    /* origin buffers must stay until the data left: all io_done ran, and
     * the self-freeing ones are ahead of counted ones in the send queue */
    free(vals);
}

static void phase_gacc(pscom_connection_t *con, pscom_rkey_t rkey, unsigned char *win,
                       unsigned char *mirror)
{
    uint64_t *vals = tu_malloc(NGACC * 9 * 8);
    uint64_t *res  = tu_malloc(NGACC * 9 * 8);
    uint64_t *want = tu_malloc(NGACC * 9 * 8);
    memset(res, 0xee, NGACC * 9 * 8);
    pscom_request_t *reqs[NGACC];
    int counted = 0;
    for (int i = 0; i < NGACC; i++) {
        size_t off, cnt;
        gacc_params(i, &off, &cnt);
        /* expected old values: the model applied up to op i-1 */
        memcpy(want + i * 9, mirror + off, cnt * 8);
        for (size_t j = 0; j < cnt; j++) {
            vals[i * 9 + j] = gacc_val(i, j);
            st64(mirror + off + 8 * j, ld64(mirror + off + 8 * j) + gacc_val(i, j));
        }
        int self_free      = i % 3 == 2;
        pscom_request_t *r = rma_req(con, rkey, self_free);
        r->rma.origin_addr = vals + i * 9;
        r->rma.result_addr = res + i * 9;
        r->rma.target_addr = win + off;
        r->data_len        = cnt * 8;
        r->xheader_len     = sizeof(pscom_xheader_rma_get_accumulate_t);
        set_head(&r->xheader.rma_get_accumulate.user.h, PSCOM_RMA_GET_ACCUMULATE, (uint32_t)i,
                 off, cnt * 8, self_free, r->xheader.rma_get_accumulate.user.tail,
                 sizeof(r->xheader.rma_get_accumulate.user.tail));
        reqs[i] = self_free ? NULL : r;
        if (!self_free) counted++;
        pscom_post_rma_get_accumulate(r);
    }
    TU_ASSERT(reqs[NGACC - 1] != NULL);
    wait_io_done(counted);
    TU_ASSERT_EQ(io_done_errors, 0);
    for (int i = 0; i < NGACC; i++) {
        size_t off, cnt;
        gacc_params(i, &off, &cnt);
        TU_ASSERT_MEM_EQ(res + i * 9, want + i * 9, cnt * 8);
        if (!reqs[i]) continue;
        TU_ASSERT_SUCCESSFUL(reqs[i]);
        TU_ASSERT_STATE_HAS(reqs[i]->state, PSCOM_REQ_STATE_RMA_READ_REQUEST);
        pscom_request_free(reqs[i]);
    }
    io_done_count = 0;
    free(vals);
    free(res);
    free(want);
}

static void phase_fop(pscom_connection_t *con, pscom_rkey_t rkey, unsigned char *win,
                      const unsigned char *mirror)
{
    static uint64_t one = 1;
    uint64_t *res       = tu_malloc(NFOP * 8);
    uint64_t init       = ld64(mirror + FOP_OFF);
    pscom_request_t **reqs = tu_malloc(NFOP * sizeof(*reqs));
    int counted = 0;
    for (int i = 0; i < NFOP; i++) {
        int self_free      = i % 5 == 2;
        pscom_request_t *r = rma_req(con, rkey, self_free);
        res[i]             = 0xeeeeeeeeeeeeeeeeull;
        r->rma.origin_addr = &one;
        r->rma.result_addr = &res[i];
        r->rma.target_addr = win + FOP_OFF;
        r->data_len        = 8;
        r->xheader_len     = sizeof(pscom_xheader_rma_fetch_op_t);
        set_head(&r->xheader.rma_fetch_op.user.h, PSCOM_RMA_FETCH_AND_OP, (uint32_t)i, FOP_OFF,
                 8, self_free, r->xheader.rma_fetch_op.user.tail,
                 sizeof(r->xheader.rma_fetch_op.user.tail));
        reqs[i] = self_free ? NULL : r;
        if (!self_free) counted++;
        pscom_post_rma_fetch_op(r);
    }
    wait_io_done(counted);
    TU_ASSERT_EQ(io_done_errors, 0);
    for (int i = 0; i < NFOP; i++) {
        TU_ASSERT_MSG(res[i] == init + (uint64_t)i, "fetch_op %d fetched %llu, expected %llu",
                      i, (unsigned long long)(res[i] - init), (unsigned long long)i);
        if (reqs[i]) pscom_request_free(reqs[i]);
    }
    io_done_count = 0;
    free(res);
    free(reqs);
}

static void phase_cas(pscom_connection_t *con, pscom_rkey_t rkey, unsigned char *win,
                      const unsigned char *mirror)
{
    uint64_t cur = ld64(mirror + CAS_OFF);
    for (int i = 0; i < NCAS; i++) {
        uint64_t cmp       = i % 3 != 2 ? cur : cur ^ 1;
        uint64_t nv        = cas_new(i);
        uint64_t res       = 0xeeeeeeeeeeeeeeeeull;
        pscom_request_t *r = rma_req(con, rkey, 0);
        r->rma.origin_addr  = &nv;
        r->rma.compare_addr = &cmp;
        r->rma.result_addr  = &res;
        r->rma.target_addr  = win + CAS_OFF;
        r->data_len         = 8;
        r->xheader_len      = sizeof(pscom_xheader_rma_compare_swap_t);
        set_head(&r->xheader.rma_compare_swap.user.h, PSCOM_RMA_COMPARE_AND_SWAP, (uint32_t)i,
                 CAS_OFF, 8, 0, r->xheader.rma_compare_swap.user.tail,
                 sizeof(r->xheader.rma_compare_swap.user.tail));
        pscom_post_rma_compare_swap(r);
        pscom_wait(r);
        TU_ASSERT_SUCCESSFUL(r);
        TU_ASSERT_EQ(res, cur); /* the old value */
        if (cmp == cur) cur = nv;
        pscom_request_free(r);
    }
    wait_io_done(NCAS);
    io_done_count = 0;
}

static void phase_legacy(pscom_connection_t *con, unsigned char *win)
{
    unsigned char *src = tu_malloc(LEG_LEN);
    unsigned char *dst = tu_malloc(LEG_LEN + 16);
    tu_fill(src, LEG_LEN, 31337);
    memset(dst, 0xee, LEG_LEN + 16);

    pscom_request_t *w = pscom_request_create(sizeof(pscom_xheader_t), 0);
    TU_ASSERT_NOT_NULL(w);
    w->connection            = con;
    w->xheader.rma_write.dest = win + LEG_OFF;
    w->data                  = src;
    w->data_len              = LEG_LEN;
    w->ops.io_done           = count_io_done;
    pscom_post_rma_write(w);
    TU_ASSERT_EQ(w->xheader_len, sizeof(pscom_xheader_rma_write_t));

    pscom_request_t *r = pscom_request_create(sizeof(pscom_xheader_t), 0);
    TU_ASSERT_NOT_NULL(r);
    r->connection              = con;
    r->xheader.rma_read.src     = win + LEG_OFF;
    r->xheader.rma_read.src_len = LEG_LEN;
    r->data                    = dst;
    r->data_len                = LEG_LEN;
    r->ops.io_done             = NULL;
    pscom_post_rma_read(r);
    pscom_wait(r);
    TU_ASSERT_SUCCESSFUL(r);
    TU_ASSERT_PATTERN(dst, LEG_LEN, 31337); /* the write came first */
    TU_ASSERT_BYTES(dst + LEG_LEN, 16, 0xee);
    wait_io_done(1);
    TU_ASSERT_SUCCESSFUL(w);
    TU_ASSERT_EQ(io_done_errors, 0);
    pscom_request_free(w);
    pscom_request_free(r);
    io_done_count = 0;
    free(src);
    free(dst);
}

typedef void (*post_fn)(pscom_request_t *);

/* one out-of-range operation: must end DONE|ERROR with exactly one io_done */
static void oor_one(pscom_connection_t *con, pscom_rkey_t rkey, post_fn post, size_t xlen,
                    void *target, size_t len, int self_free)
{
    static uint64_t buf[4], res[4], cmp[4];
    int before         = io_done_count;
    int err_before     = io_done_errors;
    pscom_request_t *r = rma_req(con, rkey, self_free);
    r->rma.origin_addr  = buf;
    r->rma.result_addr  = res;
    r->rma.compare_addr = cmp;
    r->rma.target_addr  = target;
    r->data_len         = len;
    r->xheader_len      = xlen;
    /* any user part: the op must not reach the target at all */
    memset(&r->xheader.rma_compare_swap.user, 0, sizeof(r->xheader.rma_compare_swap.user));
    unsigned char *big = NULL;
    if (len > sizeof(buf) && len <= WIN_LEN + 1) { /* the wrap-around case is never touched */
        big                = tu_malloc(len);
        r->rma.origin_addr = big;
        r->rma.result_addr = big;
    }
    post(r);
    if (self_free) {
        /* it frees itself: nothing to look at but it must not crash or leak */
        pscom_test_any();
    } else {
        pscom_wait(r);
        TU_ASSERT_STATE_HAS(r->state, PSCOM_REQ_STATE_DONE | PSCOM_REQ_STATE_ERROR);
        TU_ASSERT_EQ(io_done_count, before + 1);
        TU_ASSERT_EQ(io_done_errors, err_before + 1);
        pscom_request_free(r);
    }
    free(big);
}

static void phase_oor(pscom_connection_t *con, pscom_rkey_t rkey, unsigned char *win)
{
    struct {
        post_fn post;
        size_t xlen;
    } ops[] = {
        {pscom_post_rma_put, sizeof(pscom_xheader_rma_put_t)},
        {pscom_post_rma_get, sizeof(pscom_xheader_rma_get_t)},
        {pscom_post_rma_accumulate, sizeof(pscom_xheader_rma_accumulate_t)},
        {pscom_post_rma_get_accumulate, sizeof(pscom_xheader_rma_get_accumulate_t)},
        {pscom_post_rma_fetch_op, sizeof(pscom_xheader_rma_fetch_op_t)},
        {pscom_post_rma_compare_swap, sizeof(pscom_xheader_rma_compare_swap_t)},
    };
    for (unsigned k = 0; k < sizeof(ops) / sizeof(ops[0]); k++) {
        oor_one(con, rkey, ops[k].post, ops[k].xlen, win + WIN_LEN - 4, 8, 0); /* past the end */
        oor_one(con, rkey, ops[k].post, ops[k].xlen, win - 8, 8, 0);          /* before */
        oor_one(con, rkey, ops[k].post, ops[k].xlen, win + WIN_LEN, 1, 0);    /* just after */
        oor_one(con, rkey, ops[k].post, ops[k].xlen, win - 8, 8, 1);          /* self-freeing */
    }
    /* whole window + 1 byte (put and get only: big) */
    oor_one(con, rkey, pscom_post_rma_put, sizeof(pscom_xheader_rma_put_t), win, WIN_LEN + 1,
            0);
    oor_one(con, rkey, pscom_post_rma_get, sizeof(pscom_xheader_rma_get_t), win, WIN_LEN + 1,
            0);
    /* wrap-around of the address arithmetic */
    oor_one(con, rkey, pscom_post_rma_get, sizeof(pscom_xheader_rma_get_t), win + 16,
            (size_t)-8, 0);
    io_done_count  = 0;
    io_done_errors = 0;
}

/* Would a get or put of len bytes go directly (shm's cross-memory attach
 * from PSP_SHM_RENDEZVOUS bytes on, scripts/sweep.sh sets it to 0)? Then
 * the target cannot refuse it: the origin checks only its rkey, and the
 * target logs the stale access afterwards. */
static int goes_direct(pscom_connection_t *con, size_t len)
{
    const char *v = getenv("PSP_SHM_RENDEZVOUS");
    char *end;
    if (con->type != PSCOM_CON_TYPE_SHM || !v || *v < '0' || *v > '9') return 0;
    unsigned long long n = strtoull(v, &end, 10);
    return !*end && n <= len;
}

/* the target deregistered the window: gets are refused, puts are dropped */
static void phase_after_dereg(pscom_connection_t *con, pscom_rkey_t rkey, unsigned char *win)
{
    uint64_t buf[8] = {0}, one = 1, res = 0;
    if (goes_direct(con, sizeof(buf))) {
        tu_log("after deregistration: skipped, gets and puts of %zu bytes go directly",
               sizeof(buf));
        return;
    }
    pscom_request_t *g = rma_req(con, rkey, 0);
    g->rma.origin_addr = buf;
    g->rma.target_addr = win + 64;
    g->data_len        = sizeof(buf);
    g->xheader_len     = sizeof(pscom_xheader_rma_get_t);
    set_head(&g->xheader.rma_get.user.h, PSCOM_RMA_GET, 9999, 64, sizeof(buf), 0, NULL, 0);
    pscom_post_rma_get(g);
    pscom_wait(g);
    TU_ASSERT_STATE_HAS(g->state, PSCOM_REQ_STATE_DONE | PSCOM_REQ_STATE_ERROR);

    pscom_request_t *f = rma_req(con, rkey, 0);
    f->rma.origin_addr = &one;
    f->rma.result_addr = &res;
    f->rma.target_addr = win + FOP_OFF;
    f->data_len        = 8;
    f->xheader_len     = sizeof(pscom_xheader_rma_fetch_op_t);
    set_head(&f->xheader.rma_fetch_op.user.h, PSCOM_RMA_FETCH_AND_OP, 9999, FOP_OFF, 8, 0,
             f->xheader.rma_fetch_op.user.tail, sizeof(f->xheader.rma_fetch_op.user.tail));
    pscom_post_rma_fetch_op(f);
    pscom_wait(f);
    TU_ASSERT_STATE_HAS(f->state, PSCOM_REQ_STATE_DONE | PSCOM_REQ_STATE_ERROR);

    pscom_request_t *p = rma_req(con, rkey, 0);
    uint64_t junk[8];
    memset(junk, 0x5a, sizeof(junk));
    p->rma.origin_addr = junk;
    p->rma.target_addr = win + 128;
    p->data_len        = sizeof(junk);
    p->xheader_len     = sizeof(pscom_xheader_rma_put_t);
    set_head(&p->xheader.rma_put.user.h, PSCOM_RMA_PUT, 9999, 128, sizeof(junk), 0,
             p->xheader.rma_put.user.tail, sizeof(p->xheader.rma_put.user.tail));
    pscom_post_rma_put(p);
    pscom_wait(p);
    TU_ASSERT(pscom_req_is_done(p));

    wait_io_done(3);
    TU_ASSERT_GE(io_done_errors, 2);
    pscom_request_free(g);
    pscom_request_free(f);
    pscom_request_free(p);
    io_done_count  = 0;
    io_done_errors = 0;
}

static int client(tu_ctx_t *ctx)
{
    pscom_socket_t *sock    = tu_open_socket(ctx, 0, 0);
    pscom_connection_t *con = tu_client_connect(ctx, sock);

    local_api_checks(sock, con);

    unsigned char rkeybuf[4096];
    ctl_xh_t xh;
    size_t rkeylen = recv_tag(con, TAG_RKEY, &xh, rkeybuf, sizeof(rkeybuf));
    TU_ASSERT_GT(rkeylen, 0);
    TU_ASSERT_LE(rkeylen, sizeof(rkeybuf));
    unsigned char *win = (unsigned char *)(uintptr_t)xh.addr; /* the target's address */
    pscom_rkey_t rkey  = NULL;
    TU_ASSERT_OK(pscom_rkey_generate(con, rkeybuf, rkeylen, &rkey));
    TU_ASSERT_NOT_NULL(rkey);

    unsigned char *mirror = tu_malloc(WIN_LEN);
    tu_fill(mirror, WIN_LEN, WIN_SEED);

    phase_put(con, rkey, win);
    model(mirror, PH_PUT);
    check_phase(con, PH_PUT);

    phase_get(con, rkey, win, mirror);
    check_phase(con, PH_GET);

    phase_acc(con, rkey, win);
    model(mirror, PH_ACC);
    check_phase(con, PH_ACC);

    phase_gacc(con, rkey, win, mirror); /* updates the mirror itself */
    check_phase(con, PH_GACC);

    phase_fop(con, rkey, win, mirror);
    model(mirror, PH_FOP);
    check_phase(con, PH_FOP);

    phase_cas(con, rkey, win, mirror);
    model(mirror, PH_CAS);
    check_phase(con, PH_CAS);

    phase_legacy(con, win);
    model(mirror, PH_LEGACY);
    check_phase(con, PH_LEGACY);

    phase_oor(con, rkey, win);
    check_phase(con, PH_OOR);

    check_phase(con, PH_DEREG); /* the server deregisters the window */
    phase_after_dereg(con, rkey, win);
    check_phase(con, PH_AFTER_DEREG);
    check_phase(con, PH_END);

    TU_ASSERT_OK(pscom_rkey_destroy(rkey));
    free(mirror);
    pscom_close_connection(con);
    pscom_close_socket(sock);
    return 0;
}

/* ---- peer death in the middle of a put / get -------------------------------------- */

#define DEATH_LEN (64u << 20)

static void on_con_error_any(pscom_connection_t *con, pscom_op_t op, pscom_err_t err)
{
    on_con_error(con, op, err);
}

/* put_death, get_origin_death: the server is the target of op, the client
 * the origin that dies (the put's data or the get's answer under way) */
static int origin_death_server(tu_ctx_t *ctx, pscom_rma_op_t op)
{
    pscom_socket_t *sock = tu_open_socket(ctx, 0, 0);
    sock->ops.con_error  = on_con_error_any;
    g_con                = tu_server_accept_one(ctx, sock);
    g_win                = tu_malloc(DEATH_LEN);
    memset(g_win, op == PSCOM_RMA_PUT ? 0 : 0x33, DEATH_LEN);
    pscom_memh_t memh;
    TU_ASSERT_OK(pscom_mem_register(sock, g_win, DEATH_LEN, &memh));
    pscom_register_rma_callbacks(op == PSCOM_RMA_PUT ? cb_put : cb_get, memh, op);
    void *rb;
    size_t rl;
    TU_ASSERT_OK(pscom_rkey_buffer_pack(&rb, &rl, memh));
    send_ctl(g_con, TAG_RKEY, 0, (uint64_t)(uintptr_t)g_win, rb, rl);
    pscom_rkey_buffer_release(rb);

    /* 1: the operation is posted, under way; 2: it is complete already (a
     * transport that moved the data straight from or into our memory) */
    uint32_t how = tu_wait_signal(ctx, 1);
    TU_ASSERT(how == 1 || how == 2);
    for (int i = 0; i < 100; i++) pscom_test_any(); /* take what is there, answer */
    kill(ctx->client_pids[1], SIGKILL);
    tu_wait_flag(&g_con_error);
    /* more progress: nothing else may show up */
    for (int i = 0; i < 10; i++) pscom_test_any();
    if (how == 1) {
        TU_ASSERT_EQ(cb_count[op], 0); /* the put never completed, the answer never left */
    } else {
        /* the callback ran (at most once), and a put's only with all the data there */
        TU_ASSERT_LE(cb_count[op], 1);
        if (op == PSCOM_RMA_PUT && cb_count[op]) TU_ASSERT_BYTES(g_win, DEATH_LEN, 0x77);
    }
    TU_ASSERT_EQ(g_con_error, 1);
    TU_ASSERT_OK(pscom_mem_deregister(memh));
    pscom_close_connection(g_con);
    free(g_win);
    return 0;
}

static int put_death_server(tu_ctx_t *ctx)
{
    return origin_death_server(ctx, PSCOM_RMA_PUT);
}

/* The target's packed rkey, sent as TAG_RKEY; its window address in xh. */
static pscom_rkey_t recv_rkey(pscom_connection_t *con, ctl_xh_t *xh)
{
    unsigned char rkeybuf[4096];
    size_t rl = recv_tag(con, TAG_RKEY, xh, rkeybuf, sizeof(rkeybuf));
    pscom_rkey_t rkey;
    TU_ASSERT_OK(pscom_rkey_generate(con, rkeybuf, rl, &rkey));
    return rkey;
}

static int put_death_client(tu_ctx_t *ctx)
{
    pscom_socket_t *sock    = tu_open_socket(ctx, 0, 0);
    pscom_connection_t *con = tu_client_connect(ctx, sock);
    ctl_xh_t xh;
    pscom_rkey_t rkey = recv_rkey(con, &xh);
    unsigned char *src = tu_malloc(DEATH_LEN);
    memset(src, 0x77, DEATH_LEN);
    pscom_request_t *r = rma_req(con, rkey, 0);
    r->rma.origin_addr = src;
    r->rma.target_addr = (void *)(uintptr_t)xh.addr;
    r->data_len        = DEATH_LEN;
    r->xheader_len     = sizeof(pscom_xheader_rma_put_t);
    set_head(&r->xheader.rma_put.user.h, PSCOM_RMA_PUT, 1, 0, DEATH_LEN, 0,
             r->xheader.rma_put.user.tail, sizeof(r->xheader.rma_put.user.tail));
    pscom_post_rma_put(r);
    tu_signal(ctx, TU_SERVER, pscom_req_is_done(r) ? 2 : 1);
    tu_wait_signal(ctx, TU_SERVER); /* killed while waiting */
    TU_FAIL("not killed");
}

/* A get of the whole DEATH_LEN window at addr into dst, posted. */
static pscom_request_t *post_death_get(pscom_connection_t *con, pscom_rkey_t rkey, uint64_t addr,
                                       unsigned char *dst)
{
    pscom_request_t *r = rma_req(con, rkey, 0);
    r->rma.origin_addr = dst;
    r->rma.target_addr = (void *)(uintptr_t)addr;
    r->data_len        = DEATH_LEN;
    r->xheader_len     = sizeof(pscom_xheader_rma_get_t);
    set_head(&r->xheader.rma_get.user.h, PSCOM_RMA_GET, 1, 0, DEATH_LEN, 0, NULL, 0);
    pscom_post_rma_get(r);
    return r;
}

/* get_death: the server is the origin, the client the target that dies;
 * get_death_early: before it read the request (the get is still pending
 * at the origin, not yet the connection's incoming answer) */
static int get_death_early;
/* get_death: the server is the origin, the client the target that dies */
static int get_death_server(tu_ctx_t *ctx)
{
    pscom_socket_t *sock  = tu_open_socket(ctx, 0, 0);
    sock->ops.con_error   = on_con_error_any;
    pscom_connection_t *con = tu_server_accept_one(ctx, sock);
    ctl_xh_t xh;
    pscom_rkey_t rkey  = recv_rkey(con, &xh);
    unsigned char *dst = tu_malloc(DEATH_LEN);
    pscom_request_t *r = post_death_get(con, rkey, xh.addr, dst);
    /* a transport that read the target's memory directly is done already */
    int direct = pscom_req_is_done(r);
    tu_signal(ctx, 1, direct ? 2 : 1);       /* target: answer */
    TU_ASSERT_EQ(tu_wait_signal(ctx, 1), 2); /* target: answering (blocked on us) */
    kill(ctx->client_pids[1], SIGKILL);
    pscom_wait(r);
    TU_ASSERT_EQ(io_done_count, 1);
    if (direct) {
        TU_ASSERT_SUCCESSFUL(r);
        TU_ASSERT_EQ(io_done_errors, 0);
        TU_ASSERT_BYTES(dst, DEATH_LEN, 0x33);
    } else {
        TU_ASSERT_STATE_HAS(r->state, PSCOM_REQ_STATE_DONE | PSCOM_REQ_STATE_ERROR);
        TU_ASSERT_EQ(io_done_errors, 1);
    }
    tu_wait_flag(&g_con_error);
    TU_ASSERT_EQ(g_con_error, 1);
    pscom_request_free(r);
    TU_ASSERT_OK(pscom_rkey_destroy(rkey));
    pscom_close_connection(con);
    free(dst);
    return 0;
}

static int get_death_client(tu_ctx_t *ctx)
{
    pscom_socket_t *sock    = tu_open_socket(ctx, 0, 0);
    pscom_connection_t *con = tu_client_connect(ctx, sock);
    g_con                   = con;
    g_win                   = tu_malloc(DEATH_LEN);
    memset(g_win, 0x33, DEATH_LEN);
    pscom_memh_t memh;
    TU_ASSERT_OK(pscom_mem_register(sock, g_win, DEATH_LEN, &memh));
    pscom_register_rma_callbacks(cb_get, memh, PSCOM_RMA_GET);
    void *rb;
    size_t rl;
    TU_ASSERT_OK(pscom_rkey_buffer_pack(&rb, &rl, memh));
    send_ctl(con, TAG_RKEY, 0, (uint64_t)(uintptr_t)g_win, rb, rl);
    pscom_rkey_buffer_release(rb);
    uint32_t how = tu_wait_signal(ctx, TU_SERVER);
    if (get_death_early) { /* killed before it has even read the request */
        tu_signal(ctx, TU_SERVER, 2);
        tu_wait_signal(ctx, TU_SERVER);
        TU_FAIL("not killed");
    }
    /* read the request and start the answer; the origin does not read, so
     * the 64 MiB answer stays unfinished (how == 1). A get the origin read
     * directly (how == 2) has its callback run here, at most once. */
    for (int i = 0; i < 100; i++) pscom_test_any();
    TU_ASSERT_LE(cb_count[PSCOM_RMA_GET], how == 2 ? 1 : 0);
    tu_signal(ctx, TU_SERVER, 2);
    tu_wait_signal(ctx, TU_SERVER); /* killed while waiting */
    TU_FAIL("not killed");
}

/* get_origin_death: the server is the target, the client the origin of a
 * 64 MiB get that never reads the answer and dies: the answer never left,
 * so the target's GET callback must not run (spec 1.7: it runs "after the
 * reply is sent"; the same rule as put_death's). */
static int get_origin_death_server(tu_ctx_t *ctx)
{
    return origin_death_server(ctx, PSCOM_RMA_GET);
}

static int get_origin_death_client(tu_ctx_t *ctx)
{
    pscom_socket_t *sock    = tu_open_socket(ctx, 0, 0);
    pscom_connection_t *con = tu_client_connect(ctx, sock);
    ctl_xh_t xh;
    pscom_rkey_t rkey  = recv_rkey(con, &xh);
    unsigned char *dst = tu_malloc(DEATH_LEN);
    pscom_request_t *r = post_death_get(con, rkey, xh.addr, dst);
    tu_signal(ctx, TU_SERVER, pscom_req_is_done(r) ? 2 : 1);
    tu_wait_signal(ctx, TU_SERVER); /* killed while waiting, the answer unread */
    TU_FAIL("not killed");
}

/* ---- direct memory access (transport caps RMA_READ/RMA_WRITE) ---------------------
 * The target registers a window and then stays out of pscom (blocked on
 * the control channel). Over shm with cross-memory attach, the origin's
 * 1 MiB puts and gets complete without it: the data moved between the
 * two address spaces without the target's CPU. Once woken, the target
 * finds the put data in place before its first pscom call, then its PUT
 * and GET callbacks run exactly once per operation (the notifications).
 * Over other transports the same operations need the target's progress:
 * the origin only waits for them after waking the target. */

#define DIRECT_N   4
#define DIRECT_LEN (1u << 20)
#define TAG_DIRECT 0x44495200u

static int expect_direct(void)
{
    const char *type = tu_contype();
    const char *cma  = getenv("PSP_SHM_CMA");
    return type && !strcmp(type, "shm") && !(cma && !strcmp(cma, "0"));
}

static int direct_server(tu_ctx_t *ctx)
{
    pscom_socket_t *sock = tu_open_socket(ctx, 0, 0);
    g_con = tu_server_accept_one(ctx, sock);
    g_win = tu_malloc(2 * DIRECT_N * DIRECT_LEN); /* puts land in the first half */
    memset(g_win, 0, DIRECT_N * DIRECT_LEN);
    tu_fill(g_win + DIRECT_N * DIRECT_LEN, DIRECT_N * DIRECT_LEN, 99); /* gets read here */
    pscom_memh_t memh;
    TU_ASSERT_OK(pscom_mem_register(sock, g_win, 2 * DIRECT_N * DIRECT_LEN, &memh));
    pscom_register_rma_callbacks(cb_put, memh, PSCOM_RMA_PUT);
    pscom_register_rma_callbacks(cb_get, memh, PSCOM_RMA_GET);
    void *rb;
    size_t rl;
    TU_ASSERT_OK(pscom_rkey_buffer_pack(&rb, &rl, memh));
    send_ctl(g_con, TAG_RKEY, 0, (uint64_t)(uintptr_t)g_win, rb, rl);
    pscom_rkey_buffer_release(rb);
    recv_tag(g_con, TAG_DIRECT, NULL, NULL, 0); /* the origin has the key */

    tu_signal(ctx, 1, 1);
    uint32_t how = tu_wait_signal(ctx, 1); /* no pscom call in between */
    if (how == 2) {
        /* the origin's puts are complete: their data is here already */
        for (unsigned i = 0; i < DIRECT_N; i++)
            TU_ASSERT_PATTERN(g_win + i * DIRECT_LEN, DIRECT_LEN, 500u + i);
        TU_ASSERT_EQ(cb_count[PSCOM_RMA_PUT] + cb_count[PSCOM_RMA_GET], 0);
    }
    /* every notification is ahead of this message */
    recv_tag(g_con, TAG_DIRECT + 1, NULL, NULL, 0);
    for (unsigned i = 0; i < DIRECT_N; i++)
        TU_ASSERT_PATTERN(g_win + i * DIRECT_LEN, DIRECT_LEN, 500u + i);
    TU_ASSERT_EQ(cb_count[PSCOM_RMA_PUT], DIRECT_N);
    TU_ASSERT_EQ(cb_count[PSCOM_RMA_GET], DIRECT_N);
    send_ctl(g_con, TAG_ACK, 0, 0, NULL, 0);
    TU_ASSERT_OK(pscom_mem_deregister(memh));
    pscom_close_connection(g_con);
    pscom_close_socket(sock);
    return 0;
}

static int direct_client(tu_ctx_t *ctx)
{
    pscom_socket_t *sock    = tu_open_socket(ctx, 0, 0);
    pscom_connection_t *con = tu_client_connect(ctx, sock);
    ctl_xh_t xh;
    pscom_rkey_t rkey = recv_rkey(con, &xh);
    unsigned char *win = (unsigned char *)(uintptr_t)xh.addr;
    send_ctl(con, TAG_DIRECT, 0, 0, NULL, 0);
    unsigned char *src = tu_malloc(2 * DIRECT_N * DIRECT_LEN), *dst = src + DIRECT_N * DIRECT_LEN;
    memset(dst, 0xee, DIRECT_N * DIRECT_LEN);
    pscom_request_t *reqs[2 * DIRECT_N];
    /* the target stays out of pscom from then on; we progress meanwhile:
     * TAG_DIRECT may still wait for credits (openib with few slots) */
    TU_ASSERT_EQ(tu_wait_signal_progress(ctx, TU_SERVER), 1);
    for (unsigned i = 0; i < DIRECT_N; i++) {
        tu_fill(src + i * DIRECT_LEN, DIRECT_LEN, 500u + i);
        pscom_request_t *p = reqs[i] = rma_req(con, rkey, 0);
        p->rma.origin_addr = src + i * DIRECT_LEN;
        p->rma.target_addr = win + i * DIRECT_LEN;
        p->data_len        = DIRECT_LEN;
        p->xheader_len     = sizeof(pscom_xheader_rma_put_t);
        set_head(&p->xheader.rma_put.user.h, PSCOM_RMA_PUT, i, i * DIRECT_LEN, DIRECT_LEN, 0,
                 p->xheader.rma_put.user.tail, sizeof(p->xheader.rma_put.user.tail));
        pscom_post_rma_put(p);
        size_t off         = (DIRECT_N + i) * DIRECT_LEN;
        pscom_request_t *g = reqs[DIRECT_N + i] = rma_req(con, rkey, 0);
        g->rma.origin_addr = dst + i * DIRECT_LEN;
        g->rma.target_addr = win + off;
        g->data_len        = DIRECT_LEN;
        g->xheader_len     = sizeof(pscom_xheader_rma_get_t);
        set_head(&g->xheader.rma_get.user.h, PSCOM_RMA_GET, i, off, DIRECT_LEN, 0, NULL, 0);
        pscom_post_rma_get(g);
    }
    if (expect_direct()) {
        /* bounded: a transport that needs the target never gets there */
        for (int n = 0; n < 100000 && io_done_count < 2 * DIRECT_N; n++) pscom_test_any();
        TU_ASSERT_MSG(io_done_count == 2 * DIRECT_N,
                      "%d of %d puts/gets complete while the target is not in pscom: the "
                      "direct (cross-memory attach) path was not used",
                      io_done_count, 2 * DIRECT_N);
        tu_signal(ctx, TU_SERVER, 2);
    } else {
        tu_signal(ctx, TU_SERVER, 3);
        wait_io_done(2 * DIRECT_N);
    }
    TU_ASSERT_EQ(io_done_errors, 0);
    TU_ASSERT_PATTERN(dst, DIRECT_N * DIRECT_LEN, 99);
    for (unsigned i = 0; i < 2 * DIRECT_N; i++) {
        TU_ASSERT_SUCCESSFUL(reqs[i]);
        pscom_request_free(reqs[i]);
    }
    send_ctl(con, TAG_DIRECT + 1, 0, 0, NULL, 0);
    recv_tag(con, TAG_ACK, NULL, NULL, 0);
    TU_ASSERT_OK(pscom_rkey_destroy(rkey));
    free(src);
    pscom_close_connection(con);
    pscom_close_socket(sock);
    return 0;
}

int main(void)
{
    tu_opts_t death = {.killed_must_mask = 1u << 1};
    if (tu_run("rma", 1, server, client, NULL)) return 1;
    if (tu_run("rma_direct", 1, direct_server, direct_client, NULL)) return 1;
    if (tu_run("rma_put_death", 1, put_death_server, put_death_client, &death)) return 1;
    if (tu_run("rma_get_death", 1, get_death_server, get_death_client, &death)) return 1;
    get_death_early = 1;
    if (tu_run("rma_get_death_early", 1, get_death_server, get_death_client, &death)) return 1;
    if (tu_run("rma_get_origin_death", 1, get_origin_death_server, get_origin_death_client,
               &death))
        return 1;
    return 0;
}
