/*
 * test_pad.c - PAD messages of stream transports (PSCOM_PLUGIN_CAP_STREAM_PAD):
 * where pscom_write_get_iov() puts them, that the receiving core drops them
 * and delivers the messages around them intact, that partial writes keep
 * the pad chosen for a message, and that a malformed PAD closes the
 * connection with a protocol error.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "capture.h"
#include "con_fixture.h"
#include "pscom.h"
#include "pscom_con.h"
#include "pscom_plugin.h"
#include "pscom_req.h"
#include "pscom_sock.h"
#include "pscom_wire.h"

#define MAX_IOV 64

static void fake_write_start(pscom_con_t *con)
{
}

CON_FIXTURE_TRANSPORT(stream_desc, "fakestream", PSCOM_PLUGIN_CAP_STREAM_PAD, fake_write_start);
CON_FIXTURE_TRANSPORT(plain_desc, "fakeplain", 0, fake_write_start);

typedef struct fixture {
    pscom_socket_t *socket;
    pscom_con_t *tx, *rx; /* tx: sending side with a fake transport; rx: bytes fed in */
} fixture_t;

static int setup(void **state)
{
    fixture_t *f     = calloc(1, sizeof(*f));
    f->socket        = con_fixture_open(&f->tx, &f->rx);
    f->tx->transport = &stream_desc;
    f->rx->transport = &plain_desc;
    f->tx->pub.state = f->rx->pub.state = PSCOM_CON_STATE_RW;
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fixture_t *f = *state;
    /* close like connections without a transport (no EOF handshake) */
    f->tx->transport = f->rx->transport = NULL;
    pscom_close_socket(f->socket);
    free(f);
    return 0;
}

static pscom_request_t *send_req(pscom_con_t *con, size_t xlen, void *data, size_t len)
{
    pscom_request_t *r = pscom_request_create(xlen, 0);
    r->connection      = &con->pub;
    r->xheader_len     = xlen;
    memset(&r->xheader, 0x5a, xlen);
    r->data     = data;
    r->data_len = len;
    return r;
}

static pscom_request_t *recv_req(pscom_con_t *con, void *data, size_t len)
{
    pscom_request_t *r = pscom_request_create(64, 0);
    r->connection      = &con->pub;
    r->xheader_len     = 64;
    r->data            = data;
    r->data_len        = len;
    return r;
}

/* Concatenate what the iovecs hold. */
static size_t gather(const struct iovec *iov, int n, unsigned char *out)
{
    size_t len = 0;
    for (int i = 0; i < n; i++) {
        memcpy(out + len, iov[i].iov_base, iov[i].iov_len);
        len += iov[i].iov_len;
    }
    return len;
}

/* Offset of the first byte of req's data in the bytes of the iovecs. */
static long data_offset(const struct iovec *iov, int n, const void *data)
{
    size_t off = 0;
    for (int i = 0; i < n; i++) {
        if (iov[i].iov_base == data) return (long)off;
        off += iov[i].iov_len;
    }
    return -1;
}

static void test_pad_places_payloads(void **state)
{
    fixture_t *f       = *state;
    unsigned char *buf = malloc(3 * 8192 + 64);
    /* payloads at every offset modulo 64 we care about, xheaders of
     * several lengths, three messages queued in one write */
    for (unsigned shift = 0; shift < 64; shift += 5) {
        for (size_t xlen = 0; xlen <= 40; xlen += 13) {
            unsigned char *d[3] = {buf + shift, buf + 8192 + 64 - shift, buf + 2 * 8192 + 7};
            size_t len[3]       = {4096, 1024 + shift, 8000};
            pscom_request_t *s[3];
            for (int i = 0; i < 3; i++) {
                s[i] = send_req(f->tx, xlen, d[i], len[i]);
                pscom_post_send(s[i]);
            }
            struct iovec iov[MAX_IOV];
            int n = pscom_write_get_iov(f->tx, iov, MAX_IOV);
            size_t total = 0;
            for (int i = 0; i < n; i++) total += iov[i].iov_len;
            for (int i = 0; i < 3; i++) {
                long off = data_offset(iov, n, d[i]);
                assert_true(off >= 0);
                /* the payload sits at its address + 32 modulo 64 */
                assert_int_equal(((uintptr_t)off - (uintptr_t)d[i]) & 63, 32);
            }
            assert_int_equal(pscom_write_done(f->tx, total), 0);
            for (int i = 0; i < 3; i++) {
                assert_true(pscom_req_successful(s[i]));
                pscom_request_free(s[i]);
            }
        }
    }
    free(buf);
}

static void test_no_pad_for_small_or_plain(void **state)
{
    fixture_t *f = *state;
    char small[100];
    pscom_request_t *s = send_req(f->tx, 12, small, sizeof(small));
    pscom_post_send(s);
    struct iovec iov[MAX_IOV];
    int n = pscom_write_get_iov(f->tx, iov, MAX_IOV);
    assert_int_equal(n, 2); /* header+xheader, data */
    assert_ptr_equal(iov[0].iov_base, &s->header);
    assert_int_equal(pscom_write_done(f->tx, iov[0].iov_len + iov[1].iov_len), 0);
    assert_true(pscom_req_successful(s));
    pscom_request_free(s);

    /* a transport without the capability never gets pads */
    char *big = malloc(65536);
    f->tx->transport = &plain_desc;
    s                = send_req(f->tx, 12, big + 3, 65000);
    pscom_post_send(s);
    n = pscom_write_get_iov(f->tx, iov, MAX_IOV);
    assert_int_equal(n, 2);
    assert_ptr_equal(iov[0].iov_base, &s->header);
    assert_int_equal(pscom_write_done(f->tx, iov[0].iov_len + iov[1].iov_len), 0);
    pscom_request_free(s);
    f->tx->transport = &stream_desc;
    free(big);
}

/* The bytes of padded messages, fed to the receiving side in odd pieces
 * (as a stream transport reads them), arrive intact; partial writes keep
 * each message's pad. */
static void test_pad_roundtrip_partial(void **state)
{
    fixture_t *f = *state;
    enum { N = 6 };
    size_t len[N] = {5000, 0, 70000, 1024, 8, 33333};
    unsigned char *src[N], *dst[N];
    pscom_request_t *s[N], *r[N];
    for (int i = 0; i < N; i++) {
        src[i] = malloc(len[i] + 64);
        dst[i] = calloc(1, len[i] + 64);
        for (size_t k = 0; k < len[i] + 64; k++) src[i][k] = (unsigned char)(k * 7 + i);
        r[i] = recv_req(f->rx, dst[i], len[i]);
        pscom_post_recv(r[i]);
        s[i] = send_req(f->tx, (size_t)i * 3, src[i] + i * 9, len[i]);
        pscom_post_send(s[i]);
    }
    unsigned char *wire = malloc(200000);
    size_t step         = 1;
    for (;;) {
        struct iovec iov[MAX_IOV];
        int n = pscom_write_get_iov(f->tx, iov, 3); /* few iovecs: many calls */
        if (!n) break;
        size_t have = gather(iov, n, wire);
        size_t w    = have < step ? have : step; /* a partial write */
        step        = step * 3 + 1;
        assert_int_equal(pscom_read_feed(f->rx, (char *)wire, w), 0);
        assert_int_equal(pscom_write_done(f->tx, w), 0);
    }
    for (int i = 0; i < N; i++) {
        assert_true(pscom_req_successful(s[i]));
        assert_true(pscom_req_successful(r[i]));
        assert_int_equal(r[i]->header.data_len, len[i]);
        assert_int_equal(r[i]->header.xheader_len, (size_t)i * 3);
        assert_memory_equal(dst[i], src[i] + i * 9, len[i]);
        pscom_request_free(s[i]);
        pscom_request_free(r[i]);
        free(src[i]);
        free(dst[i]);
    }
    free(wire);
}

static void feed_bad_pad(fixture_t *f, uint16_t xlen, uint64_t dlen)
{
    char data[8];
    pscom_request_t *r = recv_req(f->rx, data, sizeof(data));
    pscom_post_recv(r);
    unsigned char msg[8 + 128] = {0};
    pscom_wire_header_encode(msg, xlen, PSCOM_MSGTYPE_PAD, dlen);
    capture_t cap;
    capture_stderr_begin(&cap);
    assert_int_equal(pscom_read_feed(f->rx, (char *)msg, sizeof(msg)), 1);
    char *log = capture_stderr_end(&cap);
    assert_non_null(strstr(log, "malformed PAD message"));
    free(log);
    assert_true(pscom_req_is_done(r));
    assert_true(r->state & PSCOM_REQ_STATE_ERROR);
    pscom_request_free(r);
}

static void test_pad_with_xheader_is_an_error(void **state)
{
    feed_bad_pad(*state, 4, 0);
}

static void test_pad_too_long_is_an_error(void **state)
{
    feed_bad_pad(*state, 0, PSCOM_WIRE_PAD_MAX);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_pad_places_payloads, setup, teardown),
        cmocka_unit_test_setup_teardown(test_no_pad_for_small_or_plain, setup, teardown),
        cmocka_unit_test_setup_teardown(test_pad_roundtrip_partial, setup, teardown),
        cmocka_unit_test_setup_teardown(test_pad_with_xheader_is_an_error, setup, teardown),
        cmocka_unit_test_setup_teardown(test_pad_too_long_is_an_error, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
