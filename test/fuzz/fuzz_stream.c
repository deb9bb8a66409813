/*
 * fuzz_stream.c - the receive side of a connection against any bytes a
 * peer may send: the stream parser (pscom_read_feed), the zero-copy way
 * (pscom_read_get_buf/pscom_read_done) and the whole-message way
 * (pscom_read_msg), with every message type behind them (USER matching,
 * rendezvous, RMA, groups, PAD, EOF).
 *
 * One input is a few bytes of set-up and the bytes the peer sends:
 *
 *   byte 0   bits 0-1: how the bytes are handed over (fuzz_mode_t)
 *            bits 2-3: receives posted before (0-3)
 *            bit 4:    they are any-source receives
 *            bit 5:    they have a recv_accept that takes every other
 *            bit 6:    a receive is cancelled half-way
 *            bit 7:    a rendezvous send of FUZZ_RNDV_LEN bytes and an RMA
 *                      get from the peer wait for their answers
 *   byte 1   bytes per hand-over: byte + 1 (255: all at once)
 *   byte 2   receive buffers of 4 x byte bytes
 *   rest     the peer's bytes
 *
 * The ids a peer refers to are counters of the process, different in
 * each input: 8 bytes anywhere in the peer's bytes that read
 * FUZZ_SEND_MARK, FUZZ_GET_MARK or FUZZ_MEMH_MARK become the id of the
 * rendezvous send, of the RMA get, or of the registered window, and
 * FUZZ_RECV_MARK the id the first rendezvous receive of the input will
 * get (the core numbers rendezvous sends and receives with one counter:
 * the send's id + 1).
 *
 * What must hold (else abort(), which libFuzzer and the driver report):
 * no memory error (run under ASan/UBSan), and once the socket is closed
 * every posted receive, the send and the get are done. A stopped
 * connection (EOF, protocol error) is given no more bytes. The
 * connection's own sends (rendezvous answers, RMA replies) go to a sink
 * transport that takes every byte.
 *
 * RMA requests can reach a registered window: FUZZ_WIN_ADDR, mapped at
 * that fixed address where possible (fuzz_win).
 *
 * Built twice: with libFuzzer (PSCOM_FUZZ, clang) and with
 * fuzz_stream_gen.c and fuzz_driver.c as the ctest test fuzz_stream.
 */
#include "fuzz_stream.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "pscom.h"
#include "pscom_con.h"
#include "pscom_core.h"
#include "pscom_plugin.h"
#include "pscom_req.h"
#include "pscom_rma.h"
#include "pscom_sock.h"
#include "pscom_wire.h"

/* ---- a transport that takes every byte -------------------------------------------- */

size_t fuzz_sink_bytes;

static void sink_write_start(pscom_con_t *con)
{
    struct iovec iov[16];
    int n;
    while ((n = pscom_write_get_iov(con, iov, 16)) > 0) {
        size_t len = 0;
        for (int i = 0; i < n; i++) len += iov[i].iov_len;
        fuzz_sink_bytes += len;
        if (pscom_write_done(con, len)) return;
    }
}

static void sink_close(pscom_con_t *con)
{
}

static int sink_con_start(pscom_con_t *con, int *fd)
{
    return 0;
}

static const pscom_plugin_ops_t sink_ops = {
    .con_start   = sink_con_start,
    .write_start = sink_write_start,
    .close       = sink_close,
};

static const pscom_plugin_desc_t sink_desc = {
    .abi_version = PSCOM_PLUGIN_ABI_VERSION,
    .desc_size   = sizeof(pscom_plugin_desc_t),
    .name        = "fuzzsink",
    .ops         = &sink_ops,
};

/* ---- set-up ------------------------------------------------------------------------- */

void *fuzz_win(void)
{
    static void *win;
    if (win) return win;
    win = mmap((void *)FUZZ_WIN_ADDR, FUZZ_WIN_LEN, PROT_READ | PROT_WRITE,
               MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
    if (win == MAP_FAILED) /* taken: anywhere (the fuzzer then finds it less often) */
        win = mmap(NULL, FUZZ_WIN_LEN, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (win == MAP_FAILED) abort();
    return win;
}

void fuzz_open(fuzz_fixture_t *f)
{
    static int inited;
    if (!inited) {
        setenv("PSP_DEBUG", "0", 0); /* the protocol errors by the thousand */
        setenv("PSP_UCP", "0", 1);    /* no transport module: the sink is the transport */
        setenv("PSP_OPENIB", "0", 1);
        if (pscom_init(PSCOM_VERSION) != PSCOM_SUCCESS) abort();
        inited = 1;
    }
    memset(f, 0, sizeof(*f));
    f->socket = pscom_open_socket(0, 0, 0, PSCOM_SOCK_FLAG_INTER_JOB);
    if (!f->socket) abort();
    pscom_sock_t *sock = pscom_sock_from_pub(f->socket);
    f->con             = pscom_con_create(sock);
    if (!f->con) abort();
    f->con->user_closed = 0;
    pscom_con_list(f->con);
    f->con->transport = &sink_desc;
    f->con->pub.state = PSCOM_CON_STATE_RW;
    if (pscom_mem_register(f->socket, fuzz_win(), FUZZ_WIN_LEN, &f->memh) != PSCOM_SUCCESS)
        abort();
}

void fuzz_close(fuzz_fixture_t *f)
{
    if (f->rkey) pscom_rkey_destroy(f->rkey);
    pscom_mem_deregister(f->memh);
    /* no EOF handshake with a peer that is not there */
    f->con->transport = NULL;
    pscom_close_socket(f->socket);
}

/* Hand len bytes to the connection in the given way. Returns 1 once the
 * connection stopped reading. */
int fuzz_hand_over(fuzz_fixture_t *f, fuzz_mode_t mode, const unsigned char *p, size_t len)
{
    pscom_con_t *con = f->con;
    if (mode == FUZZ_GET_BUF) {
        while (len) {
            char *buf;
            size_t n;
            pscom_read_get_buf(con, &buf, &n);
            if (!n) abort(); /* the core must always name room */
            if (n > len) n = len;
            memcpy(buf, p, n);
            if (pscom_read_done(con, n)) return 1;
            p += n;
            len -= n;
        }
        return 0;
    }
    if (mode == FUZZ_MSG) { /* an 8-byte aligned copy, as a message transport has */
        uint64_t *a = malloc(len ? len : 1);
        if (!a) abort();
        memcpy(a, p, len);
        int stop = pscom_read_msg(con, (const char *)a, len);
        free(a);
        return stop;
    }
    return pscom_read_feed(con, (const char *)p, len);
}

/* ---- the fuzz target ----------------------------------------------------------------- */

static pscom_request_t *post_rndv_send(fuzz_fixture_t *f)
{
    static char buf[FUZZ_RNDV_LEN];
    pscom_request_t *r = pscom_request_create(0, 0);
    if (!r) abort();
    r->connection           = &f->con->pub;
    r->data                 = buf;
    r->data_len             = sizeof(buf);
    f->con->rendezvous_size = sizeof(buf);
    pscom_post_send(r);
    return r;
}

/* an RMA request without io_done frees itself when done: this one stays */
static void keep_done(pscom_request_t *req)
{
}

/* a get of 16 bytes of the peer's window (an rkey made of our own) */
static pscom_request_t *post_get(fuzz_fixture_t *f)
{
    static char buf[16];
    void *kb;
    size_t kl;
    pscom_rkey_t rkey;
    if (pscom_rkey_buffer_pack(&kb, &kl, f->memh) != PSCOM_SUCCESS ||
        pscom_rkey_generate(&f->con->pub, kb, kl, &rkey) != PSCOM_SUCCESS)
        abort();
    pscom_rkey_buffer_release(kb);
    f->rkey            = rkey;
    pscom_request_t *r = pscom_request_create(sizeof(pscom_xheader_t), 0);
    if (!r) abort();
    r->connection      = &f->con->pub;
    r->rma.rkey        = rkey;
    r->ops.io_done     = keep_done;
    r->rma.origin_addr = buf;
    r->rma.target_addr = fuzz_win();
    r->data_len        = sizeof(buf);
    r->xheader_len     = sizeof(pscom_xheader_rma_get_t);
    pscom_post_rma_get(r);
    return r;
}

/* a copy of the peer's bytes with the marks replaced by ids[] */
static uint8_t *marks_replaced(const uint8_t *data, size_t size, const uint64_t ids[4])
{
    static const uint64_t marks[4] = {FUZZ_SEND_MARK, FUZZ_GET_MARK, FUZZ_MEMH_MARK,
                                      FUZZ_RECV_MARK};
    uint8_t *b                     = malloc(size ? size : 1);
    if (!b) abort();
    memcpy(b, data, size);
    for (size_t k = 0; k + 8 <= size; k++) {
        uint64_t v;
        memcpy(&v, b + k, 8);
        for (int i = 0; i < 4; i++) {
            if (v != htole64(marks[i])) continue;
            v = htole64(ids[i]);
            memcpy(b + k, &v, 8);
        }
    }
    return b;
}

static int accept_odd(pscom_request_t *req, pscom_connection_t *con, pscom_header_net_t *hn)
{
    return hn->data_len & 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 3) return 0;
    unsigned flags   = data[0];
    size_t step      = data[1] == 255 ? (size_t)-1 : (size_t)data[1] + 1;
    size_t rlen      = (size_t)data[2] * 4;
    fuzz_mode_t mode = (fuzz_mode_t)(flags & 3);
    unsigned nrecv   = (flags >> 2) & 3;
    data += 3;
    size -= 3;

    fuzz_fixture_t f;
    fuzz_open(&f);
    pscom_request_t *snd = NULL, *get = NULL;
    if (flags & 0x80) {
        snd = post_rndv_send(&f);
        get = post_get(&f);
    }
    uint64_t sid    = snd ? pscom_req_from_pub(snd)->id : 0;
    uint64_t ids[4] = {sid, get ? pscom_req_from_pub(get)->id : 0, f.memh->id, sid + 1};
    uint8_t *bytes  = marks_replaced(data, size, ids);
    data            = bytes;
    pscom_request_t *r[3] = {NULL};
    for (unsigned i = 0; i < nrecv; i++) {
        r[i] = pscom_request_create(64, 0);
        if (!r[i]) abort();
        r[i]->xheader_len = 64;
        r[i]->data_len    = rlen;
        r[i]->data        = malloc(rlen ? rlen : 1);
        if (!r[i]->data) abort();
        if (flags & 0x10) r[i]->socket = f.socket; /* any source */
        else r[i]->connection = &f.con->pub;
        if (flags & 0x20) r[i]->ops.recv_accept = accept_odd;
        pscom_post_recv(r[i]);
    }

    int stopped   = 0;
    size_t handed = 0;
    while (handed < size && !stopped) {
        size_t n = size - handed < step ? size - handed : step;
        /* FUZZ_MIXED: each hand-over another way */
        fuzz_mode_t m = mode == FUZZ_MIXED ? (fuzz_mode_t)(handed / n % 3) : mode;
        stopped       = fuzz_hand_over(&f, m, data + handed, n);
        handed += n;
        if ((flags & 0x40) && nrecv && handed * 2 >= size) pscom_cancel_recv(r[0]);
    }
    pscom_test_any(); /* the queued completions and their callbacks */

    fuzz_close(&f);
    for (unsigned i = 0; i < nrecv; i++) {
        if (!pscom_req_is_done(r[i])) abort(); /* left hanging */
        free(r[i]->data);
        pscom_request_free(r[i]);
    }
    if (snd) {
        if (!pscom_req_is_done(snd) || !pscom_req_is_done(get)) abort();
        pscom_request_free(snd);
        pscom_request_free(get);
    }
    free(bytes);
    return 0;
}
