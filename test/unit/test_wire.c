/*
 * test_wire.c - the wire formats are frozen: sizes, field offsets, message
 * type values and the header encoding (which must equal the public
 * struct PSCOM_header_net's memory layout on this host).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "pscom_copy.h"
#include "pscom_wire.h"

static void test_header_size(void **state)
{
    assert_int_equal(sizeof(pscom_header_net_t), 8);
    assert_int_equal(offsetof(pscom_request_t, xheader) - offsetof(pscom_request_t, header), 8);
}

static void check_roundtrip(uint16_t xlen, uint8_t type, uint64_t dlen)
{
    unsigned char buf[8];
    pscom_wire_header_encode(buf, xlen, type, dlen);

    /* the public struct sees the same values */
    pscom_header_net_t h;
    memcpy(&h, buf, sizeof(h));
    assert_int_equal(h.xheader_len, xlen);
    assert_int_equal(h.msg_type, type);
    assert_true((uint64_t)h.data_len == (dlen & PSCOM_DATA_LEN_MASK));

    uint16_t x2;
    uint8_t t2;
    uint64_t d2;
    pscom_wire_header_decode(buf, &x2, &t2, &d2);
    assert_int_equal(x2, xlen);
    assert_int_equal(t2, type);
    assert_true(d2 == (dlen & PSCOM_DATA_LEN_MASK));
}

static void test_header_encoding(void **state)
{
    check_roundtrip(0, 0, 0);
    check_roundtrip(12, PSCOM_MSGTYPE_USER, 8);
    check_roundtrip(0xffff, PSCOM_MSGTYPE_EOF, PSCOM_DATA_LEN_MASK);
    check_roundtrip(100, PSCOM_MSGTYPE_RMA_PUT, (5ULL << 30) + 3); /* > 4 GiB */
    /* bytes on the wire are little-endian: xheader_len first */
    unsigned char buf[8];
    pscom_wire_header_encode(buf, 0x1122, 0x33, 0x4455667788ULL);
    const unsigned char want[8] = {0x22, 0x11, 0x33, 0x88, 0x77, 0x66, 0x55, 0x44};
    assert_memory_equal(buf, want, 8);
}

static void test_header_struct_writes(void **state)
{
    /* what the compiler writes through the bitfield decodes identically */
    pscom_header_net_t h = {0};
    h.xheader_len        = 7;
    h.msg_type           = PSCOM_MSGTYPE_USER;
    h.data_len           = 123456789;
    uint16_t x;
    uint8_t t;
    uint64_t d;
    pscom_wire_header_decode(&h, &x, &t, &d);
    assert_int_equal(x, 7);
    assert_int_equal(t, 0);
    assert_true(d == 123456789);
}

static void test_msgtype_values(void **state)
{
    assert_int_equal(PSCOM_MSGTYPE_USER, 0);
    assert_int_equal(PSCOM_MSGTYPE_RENDEZVOUS_REQ, 4);
    assert_int_equal(PSCOM_MSGTYPE_EOF, 8);
    assert_int_equal(PSCOM_MSGTYPE_RMA_PUT, 11);
    assert_int_equal(PSCOM_MSGTYPE_RMA_COMPARE_AND_SWAP_REQ, 20);
    assert_int_equal(PSCOM_MSGTYPE_RMA_GET_DONE, 24);
    assert_int_equal(PSCOM_MSGTYPE_PAD, 25);
    assert_int_equal(PSCOM_WIRE_PAD_MAX, 64);
    assert_int_equal(PSCOM_WIRE_VERSION, 2);
}

static void test_precon_formats(void **state)
{
    assert_int_equal(sizeof(pscom_precon_header_t), 16);
    assert_int_equal(offsetof(pscom_precon_header_t, type), 4);
    assert_int_equal(offsetof(pscom_precon_header_t, version), 6);
    assert_int_equal(offsetof(pscom_precon_header_t, len), 8);
    assert_int_equal(sizeof(pscom_precon_hello_t), 40);
    assert_int_equal(offsetof(pscom_precon_hello_t, node_id), 8);
    assert_int_equal(offsetof(pscom_precon_hello_t, con_id), 24);
    assert_int_equal(offsetof(pscom_precon_hello_t, name), 32);
    assert_int_equal(PSCOM_PRECON_MAGIC, 0x31435350u);
    assert_int_equal(PSCOM_PRECON_OFFER, 2);
    assert_int_equal(PSCOM_PRECON_REJECT, 10);
}

/* pscom_memcpy_small (every small message's header, xheader and data):
 * exactly n bytes, for every length of each of its cases and beyond, at
 * every alignment */
static void test_memcpy_small(void **state)
{
    char src[80], dst[96], want[96];
    for (size_t i = 0; i < sizeof(src); i++) src[i] = (char)(i * 7 + 1);
    for (size_t n = 0; n <= 64; n++) {
        for (size_t off = 0; off < 8; off++) {
            memset(dst, 0x5a, sizeof(dst));
            memset(want, 0x5a, sizeof(want));
            memcpy(want + 8 + off, src + off, n);
            pscom_memcpy_small(dst + 8 + off, src + off, n);
            assert_memory_equal(dst, want, sizeof(dst));
        }
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_header_size),
        cmocka_unit_test(test_memcpy_small),
        cmocka_unit_test(test_header_encoding),
        cmocka_unit_test(test_header_struct_writes),
        cmocka_unit_test(test_msgtype_values),
        cmocka_unit_test(test_precon_formats),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
