/*
 * test_queues.c - matching of incoming USER messages to receives (spec
 * 5.3/5.5), driven through the receive parser of a connection without a
 * transport: messages are fed as bytes with pscom_read_feed(). The matching
 * tests run twice, the second time ("msg: ...") fed as whole messages with
 * pscom_read_msg(), whose short way must match exactly as the parser does.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "con_fixture.h"
#include "pscom.h"
#include "pscom_con.h"
#include "pscom_core.h"
#include "pscom_plugin.h"
#include "pscom_queues.h"
#include "pscom_req.h"
#include "pscom_sock.h"
#include "pscom_wire.h"

/* how deliver() hands a message to the core */
static int (*feed)(pscom_con_t *con, const char *buf, size_t len) = pscom_read_feed;

typedef struct fixture {
    pscom_socket_t *socket;
    pscom_con_t *con1, *con2;
} fixture_t;

static int setup(void **state)
{
    fixture_t *f = calloc(1, sizeof(*f));
    f->socket    = con_fixture_open(&f->con1, &f->con2);
    *state       = f;
    return 0;
}

static int teardown(void **state)
{
    fixture_t *f = *state;
    pscom_close_socket(f->socket);
    free(f);
    feed = pscom_read_feed;
    return 0;
}

static int setup_msg(void **state)
{
    feed = pscom_read_msg;
    return setup(state);
}

/* feed one USER message: xheader = tag (4 bytes), data = len bytes of fill */
static void deliver(pscom_con_t *con, uint32_t tag, size_t len, char fill)
{
    size_t total      = 8 + sizeof(tag) + len;
    unsigned char *buf = malloc(total);
    pscom_wire_header_encode(buf, sizeof(tag), PSCOM_MSGTYPE_USER, len);
    memcpy(buf + 8, &tag, sizeof(tag));
    memset(buf + 12, fill, len);
    assert_int_equal(feed(con, (char *)buf, total), 0);
    free(buf);
}

static pscom_request_t *recv_req(pscom_connection_t *c, pscom_socket_t *s, size_t len)
{
    pscom_request_t *r = pscom_request_create(sizeof(uint32_t), 0);
    r->connection      = c;
    r->socket          = s;
    r->data            = calloc(1, len ? len : 1);
    r->data_len        = len;
    r->xheader_len     = sizeof(uint32_t);
    return r;
}

static void free_req(pscom_request_t *r)
{
    free(r->data);
    pscom_request_free(r);
}

static uint32_t tag_of(pscom_request_t *r)
{
    uint32_t t;
    memcpy(&t, &r->xheader, sizeof(t));
    return t;
}

static void test_posted_in_order(void **state)
{
    fixture_t *f       = *state;
    pscom_request_t *a = recv_req(&f->con1->pub, NULL, 16);
    pscom_request_t *b = recv_req(&f->con1->pub, NULL, 16);
    pscom_post_recv(a);
    pscom_post_recv(b);
    assert_false(pscom_req_is_done(a));
    deliver(f->con1, 1, 16, 'x');
    assert_true(pscom_req_successful(a));
    assert_false(pscom_req_is_done(b));
    assert_int_equal(tag_of(a), 1);
    assert_int_equal(((char *)a->data)[15], 'x');
    assert_int_equal(a->header.data_len, 16);
    assert_ptr_equal(a->connection, &f->con1->pub);
    deliver(f->con1, 2, 16, 'y');
    assert_true(pscom_req_successful(b));
    assert_int_equal(tag_of(b), 2);
    free_req(a);
    free_req(b);
}

static void test_unexpected_then_post(void **state)
{
    fixture_t *f = *state;
    deliver(f->con1, 7, 100, 'u');
    assert_int_equal(pscom_list_count(&f->con1->genrecvq), 1);
    pscom_request_t *a = recv_req(&f->con1->pub, NULL, 100);
    pscom_post_recv(a);
    /* merged synchronously, before pscom_post_recv returned */
    assert_true(pscom_req_successful(a));
    assert_int_equal(tag_of(a), 7);
    assert_int_equal(((char *)a->data)[99], 'u');
    assert_int_equal(pscom_list_count(&f->con1->genrecvq), 0);
    assert_int_equal(pscom_list_count(&f->con1->sock->genrecvq_any), 0);
    free_req(a);
}

static void test_any_source(void **state)
{
    fixture_t *f       = *state;
    pscom_request_t *a = recv_req(NULL, f->socket, 8);
    pscom_request_t *b = recv_req(NULL, f->socket, 8);
    pscom_post_recv(a);
    pscom_post_recv(b);
    deliver(f->con2, 2, 8, 'b');
    deliver(f->con1, 1, 8, 'a');
    assert_true(pscom_req_successful(a));
    assert_true(pscom_req_successful(b));
    assert_ptr_equal(a->connection, &f->con2->pub);
    assert_ptr_equal(b->connection, &f->con1->pub);
    free_req(a);
    free_req(b);
}

static void test_post_order_specific_any_mix(void **state)
{
    fixture_t *f       = *state;
    pscom_request_t *s1 = recv_req(&f->con1->pub, f->socket, 8);
    pscom_request_t *any = recv_req(NULL, f->socket, 8);
    pscom_request_t *s2 = recv_req(&f->con1->pub, f->socket, 8);
    pscom_post_recv(s1);
    pscom_post_recv(any);
    pscom_post_recv(s2); /* parked behind the any-source receive */
    deliver(f->con1, 1, 8, '1');
    deliver(f->con1, 2, 8, '2');
    deliver(f->con1, 3, 8, '3');
    assert_int_equal(tag_of(s1), 1);
    assert_int_equal(tag_of(any), 2);
    assert_int_equal(tag_of(s2), 3);
    free_req(s1);
    free_req(any);
    free_req(s2);
}

static int accept_tag5(pscom_request_t *r, pscom_connection_t *c, pscom_header_net_t *h)
{
    uint32_t t;
    memcpy(&t, h->xheader, sizeof(t));
    return t == 5;
}

static void test_recv_accept(void **state)
{
    fixture_t *f            = *state;
    pscom_request_t *picky  = recv_req(&f->con1->pub, NULL, 8);
    picky->ops.recv_accept  = accept_tag5;
    pscom_request_t *any    = recv_req(&f->con1->pub, NULL, 8);
    pscom_post_recv(picky);
    pscom_post_recv(any);
    deliver(f->con1, 4, 8, 'a');
    assert_false(pscom_req_is_done(picky));
    assert_int_equal(tag_of(any), 4);
    deliver(f->con1, 5, 8, 'b');
    assert_int_equal(tag_of(picky), 5);
    /* also applied to unexpected messages at post time */
    deliver(f->con1, 6, 8, 'c');
    deliver(f->con1, 5, 8, 'd');
    pscom_post_recv(picky);
    assert_true(pscom_req_successful(picky));
    assert_int_equal(((char *)picky->data)[0], 'd');
    pscom_post_recv(any);
    assert_int_equal(tag_of(any), 6);
    free_req(picky);
    free_req(any);
}

static pscom_request_t *dflt_req;
static pscom_request_t *default_recv(pscom_connection_t *c, pscom_header_net_t *h)
{
    dflt_req->xheader_len = h->xheader_len;
    dflt_req->data_len    = 4;
    return dflt_req;
}

/* A receive for con1, parked behind an any-source receive that declines
 * (recv_accept), must not take a message of con2: the any-source queue
 * holds both, and only the connection's own receives may match. */
static void test_parked_specific_other_con(void **state)
{
    fixture_t *f           = *state;
    pscom_request_t *any   = recv_req(NULL, f->socket, 8);
    any->ops.recv_accept   = accept_tag5;
    pscom_request_t *s1    = recv_req(&f->con1->pub, f->socket, 8);
    pscom_post_recv(any);
    pscom_post_recv(s1); /* parked behind the any-source receive */
    deliver(f->con2, 7, 8, 'x');
    assert_false(pscom_req_is_done(any)); /* declined: not tag 5 */
    assert_false(pscom_req_is_done(s1)); /* con2's message is not for it */
    deliver(f->con1, 8, 8, 'y');
    assert_int_equal(tag_of(s1), 8);
    assert_false(pscom_req_is_done(any));
    deliver(f->con2, 5, 8, 'z');
    assert_int_equal(tag_of(any), 5);
    free_req(any);
    free_req(s1);
}

static void test_default_recv_wins(void **state)
{
    fixture_t *f                   = *state;
    pscom_request_t *posted        = recv_req(&f->con1->pub, NULL, 8);
    dflt_req                       = recv_req(NULL, NULL, 4);
    f->socket->ops.default_recv    = default_recv;
    pscom_post_recv(posted);
    deliver(f->con1, 9, 4, 'd');
    f->socket->ops.default_recv = NULL;
    assert_true(pscom_req_successful(dflt_req));
    assert_int_equal(tag_of(dflt_req), 9);
    assert_false(dflt_req->state & PSCOM_REQ_STATE_POSTED);
    assert_false(pscom_req_is_done(posted));
    assert_int_equal(pscom_cancel_recv(posted), 1);
    assert_true(posted->state & PSCOM_REQ_STATE_CANCELED);
    free_req(posted);
    free_req(dflt_req);
}

static void test_truncation(void **state)
{
    fixture_t *f       = *state;
    pscom_request_t *a = recv_req(&f->con1->pub, NULL, 10);
    pscom_request_t *b = recv_req(&f->con1->pub, NULL, 10);
    a->xheader_len     = 2; /* shorter than the 4-byte xheader sent */
    memset(&a->xheader, 0xee, 4);
    pscom_post_recv(a);
    pscom_post_recv(b);
    deliver(f->con1, 0x04030201, 1000, 't');
    deliver(f->con1, 2, 10, 'n');
    assert_true(pscom_req_is_done(a));
    assert_true(a->state & PSCOM_REQ_STATE_TRUNCATED);
    assert_false(pscom_req_successful(a));
    assert_int_equal(a->header.data_len, 1000);
    assert_int_equal(a->header.xheader_len, 4);
    assert_int_equal(a->data_len, 10);
    unsigned char *xh = (unsigned char *)&a->xheader;
    assert_int_equal(xh[0], 1);
    assert_int_equal(xh[1], 2);
    assert_int_equal(xh[2], 0xee); /* not written */
    assert_int_equal(((char *)a->data)[9], 't');
    /* the stream stayed in sync */
    assert_true(pscom_req_successful(b));
    assert_int_equal(tag_of(b), 2);
    free_req(a);
    free_req(b);
}

static void test_global_any_and_iprobe(void **state)
{
    fixture_t *f       = *state;
    deliver(f->con2, 3, 20, 'p');
    pscom_request_t *p = recv_req(NULL, NULL, 10);
    assert_int_equal(pscom_iprobe(p), 1);
    assert_ptr_equal(p->connection, &f->con2->pub);
    assert_true(p->state & PSCOM_REQ_STATE_TRUNCATED);
    assert_int_equal(tag_of(p), 3);
    assert_int_equal(pscom_list_count(&f->con2->genrecvq), 1); /* still queued */
    p->connection      = NULL;
    p->data_len        = 20;
    free(p->data);
    p->data            = calloc(1, 20);
    pscom_post_recv(p); /* global any-source takes it */
    assert_true(pscom_req_successful(p));
    pscom_request_t *g = recv_req(NULL, NULL, 8);
    pscom_post_recv(g);
    assert_false(pscom_req_is_done(g));
    deliver(f->con1, 4, 8, 'g');
    assert_true(pscom_req_successful(g));
    assert_ptr_equal(g->connection, &f->con1->pub);
    free_req(p);
    free_req(g);
}

static void test_cancel_unparks(void **state)
{
    fixture_t *f         = *state;
    pscom_request_t *any = recv_req(NULL, f->socket, 8);
    pscom_request_t *s   = recv_req(&f->con1->pub, f->socket, 8);
    pscom_post_recv(any);
    pscom_post_recv(s);
    assert_int_equal(pscom_list_count(&f->con1->recvq_user), 0);
    assert_int_equal(pscom_cancel_recv(any), 1);
    assert_int_equal(pscom_list_count(&f->con1->recvq_user), 1);
    assert_int_equal(pscom_cancel_recv(any), 0);
    deliver(f->con1, 8, 8, 's');
    assert_true(pscom_req_successful(s));
    free_req(any);
    free_req(s);
}

static void test_closed_connection_fails_receive(void **state)
{
    fixture_t *f            = *state;
    pscom_request_t *parked = recv_req(&f->con2->pub, NULL, 8);
    pscom_post_recv(parked);
    pscom_recv_fail_con(f->con2);
    assert_true(parked->state & PSCOM_REQ_STATE_ERROR);
    f->con2->eof_received = 1;
    pscom_request_t *late = recv_req(&f->con2->pub, NULL, 8);
    pscom_post_recv(late);
    assert_true(pscom_req_is_done(late));
    assert_true(late->state & PSCOM_REQ_STATE_ERROR);
    free_req(parked);
    free_req(late);
}

/* ---- pscom_read_pin(): a buffer the transport fills asynchronously ------ */

/* Feed header + xheader of a USER message of len data bytes; return the
 * (pinned) buffer pscom_read_get_buf() names for the data. */
static char *head_pinned(pscom_con_t *con, uint32_t tag, size_t len)
{
    unsigned char head[8 + sizeof(tag)];
    pscom_wire_header_encode(head, sizeof(tag), PSCOM_MSGTYPE_USER, len);
    memcpy(head + 8, &tag, sizeof(tag));
    assert_int_equal(pscom_read_feed(con, (char *)head, sizeof(head)), 0);
    char *buf;
    size_t n;
    pscom_read_get_buf(con, &buf, &n);
    assert_int_equal(n, len);
    pscom_read_pin(con);
    return buf;
}

static void test_pin_merge(void **state)
{
    fixture_t *f = *state;
    char *buf    = head_pinned(f->con1, 5, 64); /* unexpected: the library's buffer */
    pscom_request_t *a = recv_req(&f->con1->pub, NULL, 64);
    pscom_request_t *t = recv_req(&f->con1->pub, NULL, 16);
    pscom_post_recv(a); /* matches while the transport still writes */
    assert_false(pscom_req_is_done(a));
    assert_int_equal(pscom_list_count(&f->con1->genrecvq), 0);
    assert_int_equal(((char *)a->data)[0], 0); /* nothing copied yet */
    memset(buf, 'p', 64);                      /* the buffer stayed valid */
    assert_int_equal(pscom_read_done(f->con1, 64), 0);
    assert_true(pscom_req_successful(a));
    assert_int_equal(tag_of(a), 5);
    assert_int_equal(((char *)a->data)[0], 'p');
    assert_int_equal(((char *)a->data)[63], 'p');
    /* truncating receive, then the stream goes on */
    buf = head_pinned(f->con1, 6, 32);
    pscom_post_recv(t);
    memset(buf, 'q', 32);
    assert_int_equal(pscom_read_done(f->con1, 32), 0);
    assert_true(pscom_req_is_done(t));
    assert_true(t->state & PSCOM_REQ_STATE_TRUNCATED);
    assert_int_equal(((char *)t->data)[15], 'q');
    pscom_request_t *b = recv_req(&f->con1->pub, NULL, 8);
    pscom_post_recv(b);
    deliver(f->con1, 7, 8, 'r');
    assert_true(pscom_req_successful(b));
    assert_int_equal(tag_of(b), 7);
    free_req(a);
    free_req(t);
    free_req(b);
}

static void test_pin_drop(void **state)
{
    fixture_t *f = *state;
    char *buf    = head_pinned(f->con1, 5, 4096);
    pscom_unexpected_drop_con(f->con1); /* as pscom_close_connection does */
    assert_int_equal(pscom_list_count(&f->con1->genrecvq), 0);
    memset(buf, 'd', 4096); /* still valid (ASan checks) */
    assert_int_equal(pscom_read_done(f->con1, 4096), 0);
    pscom_request_t *b = recv_req(&f->con1->pub, NULL, 8);
    pscom_post_recv(b);
    deliver(f->con1, 8, 8, 's');
    assert_true(pscom_req_successful(b));
    assert_int_equal(tag_of(b), 8);
    free_req(b);
}

static void test_pin_fail(void **state)
{
    fixture_t *f       = *state;
    (void)head_pinned(f->con1, 5, 128);
    pscom_request_t *a = recv_req(&f->con1->pub, NULL, 128);
    pscom_post_recv(a);
    assert_false(pscom_req_is_done(a));
    /* the transport failed (its close op stopped the writes) */
    pscom_con_fail_requests(f->con1);
    assert_true(pscom_req_is_done(a));
    assert_true(a->state & PSCOM_REQ_STATE_ERROR);
    assert_false(f->con1->in.pinned);
    free_req(a);
}

/* The library goes on writing after the close: the close op takes the
 * core's buffer over (pscom_read_pin_keep), and the core must not free it. */
static void test_pin_keep(void **state)
{
    fixture_t *f       = *state;
    char *buf          = head_pinned(f->con1, 5, 128);
    pscom_request_t *a = recv_req(&f->con1->pub, NULL, 128);
    pscom_post_recv(a); /* matches while the transport still writes */
    void *held = pscom_read_pin_keep(f->con1);
    assert_non_null(held);
    assert_false(f->con1->in.pinned);
    assert_null(f->con1->in.req);
    pscom_con_fail_requests(f->con1);
    assert_true(a->state & PSCOM_REQ_STATE_ERROR);
    assert_null(pscom_read_pin_keep(f->con1)); /* nothing pinned any more */
    memset(buf, 'k', 128);                     /* still ours (ASan checks) */
    pscom_read_pin_release(held);
    free_req(a);
}

/* A dropped one (user close) is kept the same way. */
static void test_pin_keep_dropped(void **state)
{
    fixture_t *f = *state;
    char *buf    = head_pinned(f->con1, 5, 4096);
    pscom_unexpected_drop_con(f->con1);
    void *held = pscom_read_pin_keep(f->con1);
    assert_non_null(held);
    pscom_con_fail_requests(f->con1);
    memset(buf, 'k', 4096);
    pscom_read_pin_release(held);
}

/* The user's buffer is not the core's to give: it goes back, failed. */
static void test_pin_keep_user(void **state)
{
    fixture_t *f       = *state;
    pscom_request_t *a = recv_req(&f->con1->pub, NULL, 64);
    pscom_post_recv(a);
    char *buf = head_pinned(f->con1, 5, 64);
    assert_ptr_equal(buf, a->data);
    assert_null(pscom_read_pin_keep(f->con1));
    assert_true(f->con1->in.pinned);
    pscom_con_fail_requests(f->con1);
    assert_true(a->state & PSCOM_REQ_STATE_ERROR);
    free_req(a);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_posted_in_order, setup, teardown),
        cmocka_unit_test_setup_teardown(test_unexpected_then_post, setup, teardown),
        cmocka_unit_test_setup_teardown(test_any_source, setup, teardown),
        cmocka_unit_test_setup_teardown(test_post_order_specific_any_mix, setup, teardown),
        cmocka_unit_test_setup_teardown(test_recv_accept, setup, teardown),
        cmocka_unit_test_setup_teardown(test_parked_specific_other_con, setup, teardown),
        cmocka_unit_test_setup_teardown(test_default_recv_wins, setup, teardown),
        cmocka_unit_test_setup_teardown(test_truncation, setup, teardown),
        cmocka_unit_test_setup_teardown(test_global_any_and_iprobe, setup, teardown),
        cmocka_unit_test_setup_teardown(test_cancel_unparks, setup, teardown),
        cmocka_unit_test_setup_teardown(test_closed_connection_fails_receive, setup, teardown),
        {"msg: posted_in_order", test_posted_in_order, setup_msg, teardown, NULL},
        {"msg: unexpected_then_post", test_unexpected_then_post, setup_msg, teardown, NULL},
        {"msg: any_source", test_any_source, setup_msg, teardown, NULL},
        {"msg: post_order_specific_any_mix", test_post_order_specific_any_mix, setup_msg, teardown, NULL},
        {"msg: recv_accept", test_recv_accept, setup_msg, teardown, NULL},
        {"msg: parked_specific_other_con", test_parked_specific_other_con, setup_msg, teardown, NULL},
        {"msg: default_recv_wins", test_default_recv_wins, setup_msg, teardown, NULL},
        {"msg: truncation", test_truncation, setup_msg, teardown, NULL},
        {"msg: global_any_and_iprobe", test_global_any_and_iprobe, setup_msg, teardown, NULL},
        {"msg: cancel_unparks", test_cancel_unparks, setup_msg, teardown, NULL},
        {"msg: closed_connection_fails_receive", test_closed_connection_fails_receive, setup_msg, teardown, NULL},
        cmocka_unit_test_setup_teardown(test_pin_merge, setup, teardown),
        cmocka_unit_test_setup_teardown(test_pin_drop, setup, teardown),
        cmocka_unit_test_setup_teardown(test_pin_fail, setup, teardown),
        cmocka_unit_test_setup_teardown(test_pin_keep, setup, teardown),
        cmocka_unit_test_setup_teardown(test_pin_keep_dropped, setup, teardown),
        cmocka_unit_test_setup_teardown(test_pin_keep_user, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
