/*
 * test_str.c - the public string functions (lib/pscom/pscom_str.c).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "pscom.h"

static void test_con_state_str(void **state)
{
    static const struct {
        pscom_con_state_t s;
        const char *str;
    } t[] = {
        {PSCOM_CON_STATE_NO_RW, "norw"},
        {PSCOM_CON_STATE_R, "ro"},
        {PSCOM_CON_STATE_W, "wo"},
        {PSCOM_CON_STATE_RW, "open"},
        {PSCOM_CON_STATE_CLOSED, "closed"},
        {PSCOM_CON_STATE_CONNECTING, "connecting"},
        {PSCOM_CON_STATE_ACCEPTING, "accepting"},
        {PSCOM_CON_STATE_CLOSE_WAIT, "close_wait"},
        {PSCOM_CON_STATE_CLOSING, "closing"},
        {PSCOM_CON_STATE_SUSPENDING, "suspending"},
        {PSCOM_CON_STATE_SUSPEND_SENT, "susp_sent"},
        {PSCOM_CON_STATE_SUSPEND_RECEIVED, "susp_recv"},
        {PSCOM_CON_STATE_SUSPENDED, "suspended"},
        {PSCOM_CON_STATE_CONNECTING_ONDEMAND, "con_ondemand"},
        {PSCOM_CON_STATE_ACCEPTING_ONDEMAND, "acc_ondemand"},
    };
    for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
        assert_string_equal(pscom_con_state_str(t[i].s), t[i].str);
    }
    assert_string_equal(pscom_con_state_str((pscom_con_state_t)0x7), "state0x7");
    assert_string_equal(pscom_con_state_str((pscom_con_state_t)0x1234), "state0x1234");
}

static void test_con_type_str(void **state)
{
    static const char *const names[] = {
        "none", "loop", "tcp", "shm", "p4s <deprecated>", "gm", "mvapi", "openib",
        "elan", "dapl", "demand", "ofed", "extoll", "psm", "velo", "cbc", "mxm",
        "susp", "ucp", "gateway", "portals",
    };
    assert_int_equal(sizeof(names) / sizeof(names[0]), PSCOM_CON_TYPE_COUNT);
    for (int i = 0; i < PSCOM_CON_TYPE_COUNT; i++) {
        assert_string_equal(pscom_con_type_str((pscom_con_type_t)i), names[i]);
    }
    assert_string_equal(pscom_con_type_str(PSCOM_CON_TYPE_TCP), "tcp");
    assert_string_equal(pscom_con_type_str(PSCOM_CON_TYPE_GW), "gateway");
    assert_string_equal(pscom_con_type_str(PSCOM_CON_TYPE_COUNT), "type0x15");
    assert_string_equal(pscom_con_type_str((pscom_con_type_t)-1), "type0xffffffff");
}

static void fill_info(pscom_con_info_t *ci, int ip, int port, int rank, void *id,
                      const char *name)
{
    memset(ci, 0, sizeof(*ci));
    ci->node_id = ip;
    ci->tcp.portno = port;
    ci->rank = rank;
    ci->id = id;
    memcpy(ci->name, name, strnlen(name, sizeof(ci->name)));
}

static void test_con_info_str(void **state)
{
    pscom_con_info_t a, b;
    char want[128];
    void *id = (void *)(uintptr_t)0x1234;

    fill_info(&a, 0x0a000102, 7100, 3, id, "abcdefgh"); /* 8 chars, no NUL */
    snprintf(want, sizeof(want), "(10.0.1.2:7100 P,3,%p,abcdefgh)", id);
    assert_string_equal(pscom_con_info_str(&a), want);

    fill_info(&b, (int)0xc0a80001, 0, -1, NULL, "");
    snprintf(want, sizeof(want), "(192.168.0.1:0 P,-1,%p,)", (void *)NULL);
    assert_string_equal(pscom_con_info_str(&b), want);
}

static void test_con_info_str2_and_con_str(void **state)
{
    pscom_socket_t sock;
    pscom_connection_t con;
    char want[512], s1[128], s2[128];

    memset(&sock, 0, sizeof(sock));
    memset(&con, 0, sizeof(con));
    fill_info(&sock.local_con_info, 0x7f000001, 5000, 0, (void *)&sock, "me");
    fill_info(&con.remote_con_info, 0x7f000001, 6000, 1, (void *)(uintptr_t)0x42, "peer");
    con.socket = &sock;

    snprintf(s1, sizeof(s1), "%s", pscom_con_info_str(&sock.local_con_info));
    snprintf(s2, sizeof(s2), "%s", pscom_con_info_str(&con.remote_con_info));
    snprintf(want, sizeof(want), "%s to %s", s1, s2);
    assert_string_equal(pscom_con_info_str2(&sock.local_con_info, &con.remote_con_info), want);

    /* con_str: the local info carries the connection as its id */
    snprintf(want, sizeof(want), "(127.0.0.1:5000 P,0,%p,me) to %s", (void *)&con, s2);
    assert_string_equal(pscom_con_str(&con), want);
    assert_ptr_equal(sock.local_con_info.id, &sock); /* the socket is untouched */
}

static void test_req_state_str(void **state)
{
    assert_string_equal(pscom_req_state_str(0), "(.........)");
    assert_string_equal(pscom_req_state_str(PSCOM_REQ_STATE_SEND_REQUEST | PSCOM_REQ_STATE_POSTED),
                        "send(P........)");
    assert_string_equal(pscom_req_state_str(PSCOM_REQ_STATE_RECV_REQUEST |
                                            PSCOM_REQ_STATE_IO_DONE | PSCOM_REQ_STATE_DONE |
                                            PSCOM_REQ_STATE_TRUNCATED),
                        "recv(....d..t.)done");
    assert_string_equal(pscom_req_state_str(0x7fff),
                        "sendrecvrmarrmawrdvu(Pgpsdectm)done");
    assert_string_equal(pscom_req_state_str(PSCOM_REQ_STATE_RMA_READ_REQUEST |
                                            PSCOM_REQ_STATE_PASSIVE_SIDE),
                        "rmar(..p......)");
    assert_string_equal(pscom_req_state_str(PSCOM_REQ_STATE_RMA_WRITE_REQUEST |
                                            PSCOM_REQ_STATE_RENDEZVOUS_REQUEST |
                                            PSCOM_REQ_STATE_GRECV_REQUEST |
                                            PSCOM_REQ_STATE_GRECV_MERGED |
                                            PSCOM_REQ_STATE_ERROR |
                                            PSCOM_REQ_STATE_CANCELED |
                                            PSCOM_REQ_STATE_IO_STARTED),
                        "rmawrdvu(.g.s.ec.m)");
    /* bits outside the known ones are ignored */
    assert_string_equal(pscom_req_state_str(0x80000000u | PSCOM_REQ_STATE_DONE), "(.........)done");
}

static void test_err_str(void **state)
{
    const char *s;

    assert_string_equal(pscom_err_str(PSCOM_SUCCESS), "success");
    assert_string_equal(pscom_err_str(PSCOM_ERR_INVALID), "Invalid argument");
    assert_string_equal(pscom_err_str(PSCOM_ERR_ALREADY), "Operation already in progress");
    assert_string_equal(pscom_err_str(PSCOM_NOT_IMPLEMENTED), "Function not implemented");
    assert_string_equal(pscom_err_str(PSCOM_ERR_EOF), "End of file");
    assert_string_equal(pscom_err_str(PSCOM_ERR_IOERROR), "IO Error");
    assert_string_equal(pscom_err_str(PSCOM_ERR_UNSUPPORTED_VERSION), "Unsupported version");
    assert_string_equal(pscom_err_str(PSCOM_ERR_CONNECTION_REFUSED), "Connection refused");
    errno = ENOENT;
    s = pscom_err_str(PSCOM_ERR_STDERROR);
    assert_string_equal(s, strerror(ENOENT));
    errno = ECONNRESET;
    assert_string_equal(pscom_err_str(PSCOM_ERR_STDERROR), strerror(ECONNRESET));
    assert_string_equal(pscom_err_str((pscom_err_t)-99), "error -99");
    assert_string_equal(pscom_err_str((pscom_err_t)5), "error 5");
}

static void test_op_str(void **state)
{
    assert_string_equal(pscom_op_str(PSCOM_OP_READ), "read");
    assert_string_equal(pscom_op_str(PSCOM_OP_WRITE), "write");
    assert_string_equal(pscom_op_str(PSCOM_OP_CONNECT), "connect");
    assert_string_equal(pscom_op_str(PSCOM_OP_RW), "rw");
    assert_string_equal(pscom_op_str((pscom_op_t)0), "op0");
    assert_string_equal(pscom_op_str((pscom_op_t)77), "op77");
}

static void test_dumpstr(void **state)
{
    const unsigned char bytes[] = {'A', 'b', 0x00, '\n', 0xff, ' '};
    char big[300];
    const char *s;

    assert_string_equal(pscom_dumpstr(bytes, sizeof(bytes)),
                        "<41><62><00><0a><ff><20> \"Ab... \"");
    assert_string_equal(pscom_dumpstr("", 0), " \"\"");
    assert_string_equal(pscom_dumpstr(NULL, 5), " \"\"");

    memset(big, 'z', sizeof(big)); /* grows the reused buffer */
    s = pscom_dumpstr(big, sizeof(big));
    assert_int_equal(strlen(s), sizeof(big) * 5 + 3);
    assert_string_equal(pscom_dumpstr("hi", 2), "<68><69> \"hi\"");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_con_state_str),
        cmocka_unit_test(test_con_type_str),
        cmocka_unit_test(test_con_info_str),
        cmocka_unit_test(test_con_info_str2_and_con_str),
        cmocka_unit_test(test_req_state_str),
        cmocka_unit_test(test_err_str),
        cmocka_unit_test(test_op_str),
        cmocka_unit_test(test_dumpstr),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
