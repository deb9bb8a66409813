/*
 * test_io_end.c - the receive side of a connection where it ends: the
 * peer's EOF message, and a transport that fails while a message is taken.
 * Driven through the receive parser of a connection with a fake transport
 * (bytes fed with pscom_read_feed(); what the connection sends is taken
 * by the fake, or held, or fails the transport at once).
 *
 *  - after_eof_*: bytes after the peer's EOF message are not parsed (spec
 *    5.7: the read side ends at the EOF): a USER message behind it never
 *    reaches an any-source receive. While the connection is still open
 *    (our EOF held behind other sends) they are a protocol error that
 *    closes it; once it is closed they are ignored. Until 2026-11-29 a
 *    later feed was parsed and delivered, and bytes in the same buffer
 *    were dropped without a word.
 *  - feed_stops_when_closed: one buffer holds an announcement that a
 *    posted receive takes (its CTS fails the transport at once) and a USER
 *    message. The USER message must not be taken: an any-source receive
 *    stays posted. Until 2026-11-29 the parser's fast path took it and
 *    left the receive hanging, neither completed nor queued.
 *  - drained_after_failure: a closed connection keeps its EOF back for a
 *    rendezvous send; the CTS comes, and the DATA fails the transport at
 *    once. No EOF may be queued on the dead connection after that (until
 *    2026-11-29 one was, and never freed).
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

/* ---- the fake transport ---------------------------------------------------------- */

enum fake_mode { FAKE_TAKE, FAKE_HOLD, FAKE_FAIL };
static enum fake_mode mode;

static void fake_write_start(pscom_con_t *con)
{
    if (mode == FAKE_HOLD) return;
    if (mode == FAKE_FAIL) {
        pscom_con_transport_error(con, PSCOM_OP_WRITE, EPIPE);
        return;
    }
    con_fixture_write_all(con, NULL);
}

CON_FIXTURE_TRANSPORT(fake_desc, "fakeend", 0, fake_write_start);

typedef struct fixture {
    pscom_socket_t *socket;
    pscom_con_t *con, *other;
    int released; /* con was closed by the test and is gone */
} fixture_t;

static int setup(void **state)
{
    fixture_t *f      = calloc(1, sizeof(*f));
    f->socket         = con_fixture_open(&f->con, &f->other);
    f->con->transport = &fake_desc;
    f->con->pub.state = PSCOM_CON_STATE_RW;
    mode              = FAKE_TAKE;
    *state            = f;
    return 0;
}

static int teardown(void **state)
{
    fixture_t *f = *state;
    /* no EOF handshake with a peer that is not there */
    if (!f->released) f->con->transport = NULL;
    pscom_close_socket(f->socket);
    free(f);
    return 0;
}

/* ---- messages -------------------------------------------------------------------- */

typedef struct msgbuf {
    _Alignas(8) unsigned char b[512]; /* the parser's fast path takes aligned buffers */
    size_t len;
} msgbuf_t;

static void put(msgbuf_t *m, uint8_t type, const void *xh, uint16_t xlen, const void *data,
                size_t dlen)
{
    unsigned char *p = m->b + m->len;
    assert_true(m->len + PSCOM_WIRE_HEADER_SIZE + xlen + dlen <= sizeof(m->b));
    pscom_wire_header_encode(p, xlen, type, dlen);
    if (xlen) memcpy(p + PSCOM_WIRE_HEADER_SIZE, xh, xlen);
    if (dlen) memcpy(p + PSCOM_WIRE_HEADER_SIZE + xlen, data, dlen);
    m->len += PSCOM_WIRE_HEADER_SIZE + xlen + dlen;
}

static int feed(pscom_con_t *con, msgbuf_t *m)
{
    return pscom_read_feed(con, (const char *)m->b, m->len);
}

static void put_user(msgbuf_t *m)
{
    uint64_t tag  = 0x55534552;
    char data[10] = "0123456789";
    put(m, PSCOM_MSGTYPE_USER, &tag, sizeof(tag), data, sizeof(data));
}

static pscom_request_t *any_recv(fixture_t *f, size_t len)
{
    pscom_request_t *r = pscom_request_create(8, 0);
    r->socket          = f->socket;
    r->data            = calloc(1, len);
    r->data_len        = len;
    r->xheader_len     = 8;
    pscom_post_recv(r);
    return r;
}

/* The receive is still posted: cancel it. */
static void cancel_posted(pscom_request_t *r)
{
    assert_false(r->state & PSCOM_REQ_STATE_DONE);
    assert_int_equal(pscom_cancel_recv(r), 1);
    free(r->data);
    pscom_request_free(r);
}

/* ---- after_eof --------------------------------------------------------------------- */

/* EOF and a USER message in one buffer; our EOF held: a protocol error. */
static void test_after_eof_same_buffer(void **state)
{
    fixture_t *f       = *state;
    pscom_request_t *r = any_recv(f, 100);
    mode               = FAKE_HOLD;
    msgbuf_t m         = {0};
    put(&m, PSCOM_MSGTYPE_EOF, NULL, 0, NULL, 0);
    put_user(&m);
    capture_t cap;
    capture_stderr_begin(&cap);
    assert_int_equal(feed(f->con, &m), 1);
    char *log = capture_stderr_end(&cap);
    assert_non_null(strstr(log, "protocol error: message after the peer's EOF (26 bytes)"));
    free(log);
    assert_true(f->con->eof_received);
    assert_true(f->con->transport_closed);
    cancel_posted(r);
}

/* The USER message in a later feed; our EOF held: a protocol error. */
static void test_after_eof_later_feed(void **state)
{
    fixture_t *f       = *state;
    pscom_request_t *r = any_recv(f, 100);
    mode               = FAKE_HOLD;
    msgbuf_t eof = {0}, user = {0};
    put(&eof, PSCOM_MSGTYPE_EOF, NULL, 0, NULL, 0);
    put_user(&user);
    assert_int_equal(feed(f->con, &eof), 1);
    assert_false(f->con->transport_closed); /* our EOF waits */
    capture_t cap;
    capture_stderr_begin(&cap);
    assert_int_equal(feed(f->con, &user), 1);
    char *log = capture_stderr_end(&cap);
    assert_non_null(strstr(log, "protocol error: message after the peer's EOF (26 bytes)"));
    free(log);
    assert_true(f->con->transport_closed);
    cancel_posted(r);
}

/* Our EOF had left: the connection is closed, a later feed is ignored. */
static void test_after_eof_closed(void **state)
{
    fixture_t *f       = *state;
    pscom_request_t *r = any_recv(f, 100);
    msgbuf_t eof = {0}, user = {0};
    put(&eof, PSCOM_MSGTYPE_EOF, NULL, 0, NULL, 0);
    put_user(&user);
    assert_int_equal(feed(f->con, &eof), 1);
    assert_true(f->con->transport_closed); /* both EOFs crossed */
    capture_t cap;
    capture_stderr_begin(&cap);
    assert_int_equal(feed(f->con, &user), 1);
    char *log = capture_stderr_end(&cap);
    assert_null(strstr(log, "protocol error"));
    free(log);
    cancel_posted(r);
}

/* ---- feed_stops_when_closed --------------------------------------------------------- */

static void test_feed_stops_when_closed(void **state)
{
    fixture_t *f        = *state;
    pscom_request_t *r1 = any_recv(f, 100); /* takes the announcement */
    pscom_request_t *r2 = any_recv(f, 100);
    mode                = FAKE_FAIL;        /* the CTS fails the transport */
    msgbuf_t m          = {0};
    uint64_t tag        = 0x52545321;
    pscom_rndv_rts_t rts = {.sender_id = htole64(5), .data_len = htole64(100)};
    put(&m, PSCOM_MSGTYPE_RENDEZVOUS_REQ, &tag, sizeof(tag), &rts, sizeof(rts));
    assert_int_equal(m.len % 8, 0); /* the USER message is parsed in place too */
    put_user(&m);
    assert_int_equal(feed(f->con, &m), 1);
    assert_true(f->con->transport_closed);
    assert_true(r1->state & PSCOM_REQ_STATE_DONE);
    assert_true(r1->state & PSCOM_REQ_STATE_ERROR);
    free(r1->data);
    pscom_request_free(r1);
    cancel_posted(r2);
}

/* ---- drained_after_failure ---------------------------------------------------------- */

static void test_drained_after_failure(void **state)
{
    fixture_t *f = *state;
    pscom_con_t *con     = f->con;
    con->rendezvous_size = 64;
    unsigned char data[100];
    memset(data, 7, sizeof(data));
    pscom_request_t *s = pscom_request_create(0, 0);
    pscom_req_prepare(s, &con->pub, data, sizeof(data), NULL, 0);
    pscom_post_send(s); /* its announcement is taken by the fake */
    assert_true(s->state & PSCOM_REQ_STATE_RENDEZVOUS_REQUEST);
    assert_false(s->state & PSCOM_REQ_STATE_DONE);
    pscom_con_close(con); /* the EOF waits for the send's data */
    assert_true(con->eof_deferred);
    assert_false(con->eof_queued);

    mode = FAKE_FAIL; /* the DATA fails the transport */
    pscom_rndv_cts_t cts = {.sender_id = htole64(pscom_req_from_pub(s)->id),
                            .recv_id   = htole64(9),
                            .len       = htole64(sizeof(data))};
    msgbuf_t m = {0};
    put(&m, PSCOM_MSGTYPE_RENDEZVOUS_CTS, &cts, sizeof(cts), NULL, 0);
    assert_int_equal(feed(con, &m), 1);
    /* con is released now (freed at the next progress pass) */
    f->released = 1;
    assert_true(con->transport_closed);
    assert_false(con->eof_queued);
    assert_true(pscom_list_empty(&con->sendq));
    assert_true(s->state & PSCOM_REQ_STATE_DONE);
    assert_true(s->state & PSCOM_REQ_STATE_ERROR);
    pscom_request_free(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_after_eof_same_buffer, setup, teardown),
        cmocka_unit_test_setup_teardown(test_after_eof_later_feed, setup, teardown),
        cmocka_unit_test_setup_teardown(test_after_eof_closed, setup, teardown),
        cmocka_unit_test_setup_teardown(test_feed_stops_when_closed, setup, teardown),
        cmocka_unit_test_setup_teardown(test_drained_after_failure, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
