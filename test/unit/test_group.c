/*
 * test_group.c - broadcasts at their edges, driven through connections
 * with a fake transport: what one connection sends is captured, and fed
 * to another's receive side as a peer's message.
 *
 *  - dropped_at_close / dropped_after_close: broadcast messages that
 *    nobody has taken yet go with the connection when the user closes it
 *    (spec 5.7), and one arriving after the close is not kept. Until
 *    2026-11-29 they stayed in the socket's queue, keyed by the
 *    connection's address: a later connection at the same address got the
 *    stale data as a new broadcast.
 *  - member_on_other_socket: a member's connection of another socket than
 *    the group's works (until 2026-11-29 its broadcast waited forever).
 *  - failed_parent: a member whose parent's connection failed has no data
 *    to pass on. Its children's broadcasts fail too (until 2026-11-29 it
 *    sent them its buffer as it was, and theirs ended successfully with
 *    that).
 *  - xheader_too_long: pscom_post_bcast with xheader_len > max_xheader_len
 *    ends with ERROR (until 2026-11-29 the xheader was copied past the
 *    request's end, heap overflow under ASan).
 *  - xheader_cut: a user xheader that the 16-bit length on the wire cannot
 *    hold (with the 16-byte broadcast header) is cut to 65519 bytes, the
 *    same on both sides (until 2026-11-29 the length wrapped: 70000 bytes
 *    arrived as 4464, and lengths that wrapped below 16 made the receiver
 *    close the connection for a malformed message).
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
#include "pscom_queues.h"
#include "pscom_sock.h"
#include "pscom_wire.h"

#define GID 9

/* ---- the fake transport: every byte sent is captured ------------------------------ */

static struct {
    unsigned char *b;
    size_t len, cap;
} sent;

static void capture(const void *buf, size_t len)
{
    if (sent.len + len > sent.cap) {
        sent.cap = (sent.len + len) * 2;
        sent.b   = realloc(sent.b, sent.cap);
        assert_non_null(sent.b);
    }
    memcpy(sent.b + sent.len, buf, len);
    sent.len += len;
}

static void fake_write_start(pscom_con_t *con)
{
    con_fixture_write_all(con, capture);
}

CON_FIXTURE_TRANSPORT(fake_desc, "fakegrp", 0, fake_write_start);

typedef struct fixture {
    pscom_socket_t *socket;
    pscom_con_t *a, *b;
} fixture_t;

/* c's transport is the fake, and it is open */
static void fake_con(pscom_con_t *c)
{
    c->transport = &fake_desc;
    c->pub.state = PSCOM_CON_STATE_RW;
}

static int setup(void **state)
{
    fixture_t *f = calloc(1, sizeof(*f));
    f->socket    = con_fixture_open(&f->a, &f->b);
    fake_con(f->a);
    fake_con(f->b);
    sent.len = 0;
    *state   = f;
    return 0;
}

static int teardown(void **state)
{
    fixture_t *f = *state;
    /* no EOF handshake with a peer that is not there */
    f->a->transport = f->b->transport = NULL;
    f->a->user_closed = f->b->user_closed = 0;
    pscom_close_socket(f->socket);
    free(sent.b);
    memset(&sent, 0, sizeof(sent));
    free(f);
    return 0;
}

/* ---- helpers ------------------------------------------------------------------------ */

/* A BCAST message of group GID, root 0, as a peer sends it. */
static void feed_bcast(pscom_con_t *con, const char *data, size_t len)
{
    _Alignas(8) unsigned char m[PSCOM_WIRE_HEADER_SIZE + sizeof(pscom_xheader_bcast_t) + 64];
    pscom_xheader_bcast_t x = {.group_id = GID, .bcast_root = 0};
    assert_true(len <= 64);
    pscom_wire_header_encode(m, sizeof(x), PSCOM_MSGTYPE_BCAST, len);
    memcpy(m + PSCOM_WIRE_HEADER_SIZE, &x, sizeof(x));
    memcpy(m + PSCOM_WIRE_HEADER_SIZE + sizeof(x), data, len);
    assert_int_equal(pscom_read_feed(con, (const char *)m, PSCOM_WIRE_HEADER_SIZE + sizeof(x) + len),
                     0);
}

/* pscom_post_bcast of group g (root 0) into data; returns its request
 * (state checked by the caller). */
static pscom_request_t *post_bcast(fixture_t *f, void *data, size_t len, size_t user_xlen,
                                   size_t xheader_len)
{
    pscom_request_t *r        = pscom_request_create(sizeof(pscom_xheader_bcast_t) + user_xlen, 0);
    r->socket                 = f->socket;
    r->xheader.bcast.group_id = GID;
    r->xheader.bcast.bcast_root = 0;
    r->xheader_len            = xheader_len;
    r->data                   = data;
    r->data_len               = len;
    pscom_post_bcast(r);
    assert_true(r->state & PSCOM_REQ_STATE_DONE);
    return r;
}

/* Member 1 of two, its parent (member 0) behind `parent`, which has
 * nothing more to deliver: the broadcast must end with ERROR, data
 * untouched. */
static void expect_bcast_fails(fixture_t *f, pscom_con_t *parent)
{
    parent->eof_received   = 1; /* nothing more comes (else the receive would wait) */
    pscom_connection_t *cons[2] = {&parent->pub, &f->b->pub};
    pscom_group_t *g       = pscom_group_open(f->socket, GID, 1, 2, cons);
    assert_non_null(g);
    char data[16];
    memset(data, '-', sizeof(data));
    pscom_request_t *r = post_bcast(f, data, sizeof(data), 0, sizeof(pscom_xheader_bcast_t));
    assert_true(r->state & PSCOM_REQ_STATE_ERROR);
    assert_int_equal(data[0], '-');
    pscom_request_free(r);
    pscom_group_close(g);
}

/* The same, where `parent` delivered a broadcast of `want`: it is received. */
static void expect_bcast_gets(fixture_t *f, pscom_con_t *parent, const char *want)
{
    pscom_connection_t *cons[2] = {&parent->pub, &f->b->pub};
    pscom_group_t *g            = pscom_group_open(f->socket, GID, 1, 2, cons);
    char data[16]               = {0};
    pscom_request_t *r = post_bcast(f, data, sizeof(data), 0, sizeof(pscom_xheader_bcast_t));
    assert_true(pscom_req_successful(r));
    assert_string_equal(data, want);
    pscom_request_free(r);
    pscom_group_close(g);
}

/* ---- tests -------------------------------------------------------------------------- */

static void test_dropped_at_close(void **state)
{
    fixture_t *f = *state;
    feed_bcast(f->a, "OLD", 4); /* nobody waits: kept */
    pscom_unexpected_drop_con(f->a); /* as pscom_close_connection does */
    expect_bcast_fails(f, f->a);
}

static void test_dropped_after_close(void **state)
{
    fixture_t *f      = *state;
    f->a->user_closed = 1;
    feed_bcast(f->a, "OLD", 4);
    f->a->user_closed = 0;
    expect_bcast_fails(f, f->a);
}

/* The control: kept and taken while the connection is open. */
static void test_kept_while_open(void **state)
{
    fixture_t *f = *state;
    feed_bcast(f->a, "NEW", 4);
    expect_bcast_gets(f, f->a, "NEW");
}

/* A member's connection on another socket than the group's: its messages
 * are queued at its own socket, and found there (until 2026-11-29 the
 * broadcast looked at the group's socket only and waited forever). */
static void test_member_on_other_socket(void **state)
{
    fixture_t *f            = *state;
    pscom_socket_t *other   = pscom_open_socket(0, 0, 0, PSCOM_SOCK_FLAG_INTER_JOB);
    pscom_con_t *c          = pscom_con_create(pscom_sock_from_pub(other));
    c->user_closed          = 0;
    fake_con(c);
    pscom_con_list(c);
    feed_bcast(c, "FAR", 4);
    expect_bcast_gets(f, c, "FAR");
    c->transport = NULL;
    pscom_close_socket(other);
}

static void test_failed_parent(void **state)
{
    fixture_t *f = *state;
    /* member 1 of 5, root 0: parent member 0 (a, failed), child member 4 (b) */
    f->a->eof_received          = 1;
    pscom_connection_t *cons[5] = {&f->a->pub, &f->b->pub, &f->b->pub, &f->b->pub, &f->b->pub};
    pscom_group_t *g            = pscom_group_open(f->socket, GID, 1, 5, cons);
    char data[16];
    memset(data, 'G', sizeof(data)); /* never received: must not reach the child */
    pscom_request_t *r = post_bcast(f, data, sizeof(data), 0, sizeof(pscom_xheader_bcast_t));
    assert_true(r->state & PSCOM_REQ_STATE_ERROR);
    pscom_request_free(r);
    pscom_group_close(g);

    /* what member 1 sent its child: no data, marked failed */
    assert_true(sent.len >= PSCOM_WIRE_HEADER_SIZE);
    size_t xlen, dlen;
    pscom_wire_header_get(sent.b, &xlen, &dlen);
    assert_int_equal(xlen, sizeof(pscom_xheader_bcast_t));
    assert_int_equal(dlen, 0);

    /* member 4, parent member 1 behind a: gets that message, and fails */
    unsigned char *msg = malloc(sent.len);
    size_t msg_len     = sent.len;
    memcpy(msg, sent.b, msg_len);
    f->a->eof_received = 0;
    assert_int_equal(pscom_read_feed(f->a, (const char *)msg, msg_len), 0);
    free(msg);
    pscom_connection_t *cons4[5] = {&f->b->pub, &f->a->pub, &f->b->pub, &f->b->pub, &f->b->pub};
    g = pscom_group_open(f->socket, GID, 4, 5, cons4);
    memset(data, '-', sizeof(data));
    r = post_bcast(f, data, sizeof(data), 0, sizeof(pscom_xheader_bcast_t));
    assert_true(r->state & PSCOM_REQ_STATE_ERROR);
    assert_int_equal(data[0], '-');
    pscom_request_free(r);
    pscom_group_close(g);
}

static void test_xheader_too_long(void **state)
{
    fixture_t *f                = *state;
    pscom_connection_t *cons[2] = {&f->a->pub, &f->b->pub};
    pscom_group_t *g            = pscom_group_open(f->socket, GID, 0, 2, cons);
    char data[8]                = "x";
    capture_t cap;
    capture_stderr_begin(&cap);
    /* room for 16 user bytes, 1000 claimed */
    pscom_request_t *r = post_bcast(f, data, sizeof(data), 16, sizeof(pscom_xheader_bcast_t) + 1000);
    char *log          = capture_stderr_end(&cap);
    assert_true(r->state & PSCOM_REQ_STATE_ERROR);
    assert_non_null(strstr(log, "bcast: xheader_len 1016 > max"));
    assert_int_equal(sent.len, 0); /* nothing sent */
    free(log);
    pscom_request_free(r);
    pscom_group_close(g);
}

static void test_xheader_cut(void **state)
{
    fixture_t *f = *state;
    enum { XH = 70000, CUT = 65535 - 16 };
    /* root (member 0), child member 1 behind b */
    pscom_connection_t *cons[2] = {&f->a->pub, &f->b->pub};
    pscom_group_t *g            = pscom_group_open(f->socket, GID, 0, 2, cons);
    unsigned char *xh           = malloc(XH);
    for (size_t i = 0; i < XH; i++) xh[i] = (unsigned char)(i * 7);
    char data[8] = "payload";
    capture_t cap;
    capture_stderr_begin(&cap);
    pscom_bcast(g, 0, xh, XH, data, sizeof(data));
    char *log = capture_stderr_end(&cap);
    assert_non_null(strstr(log, "bcast: a user xheader of 70000 bytes is cut to 65519"));
    free(log);
    pscom_group_close(g);
    size_t xlen, dlen;
    pscom_wire_header_get(sent.b, &xlen, &dlen);
    assert_int_equal(xlen, 65535);
    assert_int_equal(dlen, sizeof(data));
    assert_int_equal(sent.len, PSCOM_WIRE_HEADER_SIZE + xlen + dlen);

    /* member 1 receives it whole: the stream stays in step */
    unsigned char *msg = malloc(sent.len);
    size_t msg_len     = sent.len;
    memcpy(msg, sent.b, msg_len);
    assert_int_equal(pscom_read_feed(f->a, (const char *)msg, msg_len), 0);
    free(msg);
    assert_false(f->a->transport_closed);
    g                = pscom_group_open(f->socket, GID, 1, 2, cons);
    unsigned char *got = calloc(1, XH);
    char rdata[8]      = {0};
    capture_stderr_begin(&cap); /* the receiver cuts its side alike, and says so */
    pscom_bcast(g, 0, got, XH, rdata, sizeof(rdata));
    free(capture_stderr_end(&cap));
    assert_memory_equal(got, xh, CUT);
    assert_int_equal(got[CUT], 0);
    assert_string_equal(rdata, "payload");
    free(got);
    free(xh);
    pscom_group_close(g);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_dropped_at_close, setup, teardown),
        cmocka_unit_test_setup_teardown(test_dropped_after_close, setup, teardown),
        cmocka_unit_test_setup_teardown(test_kept_while_open, setup, teardown),
        cmocka_unit_test_setup_teardown(test_member_on_other_socket, setup, teardown),
        cmocka_unit_test_setup_teardown(test_failed_parent, setup, teardown),
        cmocka_unit_test_setup_teardown(test_xheader_too_long, setup, teardown),
        cmocka_unit_test_setup_teardown(test_xheader_cut, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
