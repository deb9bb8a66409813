/*
 * test_layout.c - public struct layouts, enum values and macros are the
 * ABI 5.0 contract (spec section 2): freeze them.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "pscom.h"

#define OFF(t, f, v) assert_int_equal(offsetof(t, f), v)

static void test_request(void **state)
{
    assert_int_equal(sizeof(pscom_request_t), 168);
    OFF(pscom_request_t, state, 0);
    OFF(pscom_request_t, xheader_len, 8);
    OFF(pscom_request_t, data_len, 16);
    OFF(pscom_request_t, data, 24);
    OFF(pscom_request_t, connection, 32);
    OFF(pscom_request_t, socket, 40);
    OFF(pscom_request_t, rma.origin_addr, 48);
    OFF(pscom_request_t, rma.target_addr, 56);
    OFF(pscom_request_t, rma.compare_addr, 64);
    OFF(pscom_request_t, rma.result_addr, 72);
    OFF(pscom_request_t, rma.rkey, 80);
    OFF(pscom_request_t, ops.recv_accept, 88);
    OFF(pscom_request_t, ops.io_done, 96);
    OFF(pscom_request_t, user_size, 104);
    OFF(pscom_request_t, user, 112);
    OFF(pscom_request_t, max_xheader_len, 120);
    OFF(pscom_request_t, header, 128);
    OFF(pscom_request_t, xheader, 136);
    assert_int_equal(sizeof(pscom_xheader_t), 32);
    assert_int_equal(sizeof(pscom_header_net_t), 8);
    assert_int_equal(sizeof(pscom_rma_get_data_t), 32);
    assert_int_equal(sizeof(pscom_rma_put_data_t), 16);
    assert_int_equal(sizeof(pscom_xheader_rma_read_t), 24);
    assert_int_equal(sizeof(pscom_xheader_bcast_t), 16);
}

static void test_socket_connection(void **state)
{
    assert_int_equal(sizeof(pscom_con_info_t), 40);
    OFF(pscom_con_info_t, tcp.portno, 0);
    OFF(pscom_con_info_t, rrcomm.jobid, 0);
    OFF(pscom_con_info_t, rrcomm.remote_sockid, 8);
    OFF(pscom_con_info_t, node_id, 16);
    OFF(pscom_con_info_t, rank, 20);
    OFF(pscom_con_info_t, id, 24);
    OFF(pscom_con_info_t, name, 32);

    assert_int_equal(sizeof(pscom_socket_t), 88);
    OFF(pscom_socket_t, ops.con_accept, 0);
    OFF(pscom_socket_t, ops.con_error, 8);
    OFF(pscom_socket_t, ops.default_recv, 16);
    OFF(pscom_socket_t, listen_portno, 24);
    OFF(pscom_socket_t, local_con_info, 32);
    OFF(pscom_socket_t, connection_userdata_size, 72);
    OFF(pscom_socket_t, userdata_size, 80);
    OFF(pscom_socket_t, userdata, 88);

    assert_int_equal(sizeof(pscom_connection_t), 64);
    OFF(pscom_connection_t, socket, 0);
    OFF(pscom_connection_t, state, 8);
    OFF(pscom_connection_t, type, 12);
    OFF(pscom_connection_t, remote_con_info, 16);
    OFF(pscom_connection_t, userdata_size, 56);
    OFF(pscom_connection_t, userdata, 64);
}

static void test_values(void **state)
{
    assert_int_equal(PSCOM_VERSION, 0x0500);
    assert_int_equal(PSCOM_API_VERSION, 0x00060100);
    assert_int_equal(PSCOM_ERR_CONNECTION_REFUSED, -8);
    assert_int_equal(PSCOM_NOT_IMPLEMENTED, -4);
    assert_int_equal(PSCOM_CON_STATE_CLOSE_WAIT, 0x400);
    assert_int_equal(PSCOM_CON_STATE_SUSPENDED, 0x1c0);
    assert_int_equal(PSCOM_CON_STATE_ACCEPTING_ONDEMAND, 0x210);
    assert_int_equal(PSCOM_CON_TYPE_UCP, 0x12);
    assert_int_equal(PSCOM_CON_TYPE_COUNT, 21);
    assert_int_equal(PSCOM_REQ_STATE_GRECV_MERGED, 0x4000);
    assert_int_equal(PSCOM_RMA_OP_COUNT, 6);
    assert_int_equal(PSCOM_OP_RW, 4);
    assert_int_equal(sizeof(pscom_err_t), 4);
    assert_true(PSCOM_DATA_LEN_MASK == 0xffffffffffULL);
    int cuda, major, minor;
    PSCOM_VERSION_SPLIT(0x8503, cuda, major, minor)
    assert_int_equal(cuda, 1);
    assert_int_equal(major, 5);
    assert_int_equal(minor, 3);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_request),
        cmocka_unit_test(test_socket_connection),
        cmocka_unit_test(test_values),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
