/*
 * test_ep.c - endpoint strings "host:port[@name]" (pscom_ep_parse and
 * pscom_ep_format in lib/pscom/pscom_util.c).
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

#include "pscom_util.h"

static void assert_ep(const char *str, uint32_t addr, int port, const char *name)
{
    pscom_ep_t ep;
    char want_name[8] = {0};

    memset(&ep, 0xa5, sizeof(ep));
    if (pscom_ep_parse(str, &ep) != 0) fail_msg("'%s' rejected", str);
    assert_int_equal(ep.addr, addr);
    assert_int_equal(ep.port, port);
    assert_int_equal(ep.has_name, name != NULL);
    if (name) memcpy(want_name, name, strnlen(name, 8));
    assert_memory_equal(ep.name, want_name, 8);
}

static void test_ep_parse_valid(void **state)
{
    assert_ep("10.1.2.3:7100@rank0", 0x0a010203, 7100, "rank0");
    assert_ep("127.0.0.1:0", 0x7f000001, 0, NULL);
    assert_ep("255.255.255.255:65535@x", 0xffffffff, 65535, "x");
    assert_ep("1.2.3.4:80@", 0x01020304, 80, ""); /* empty name */
    assert_ep("1.2.3.4:80@abcdefgh", 0x01020304, 80, "abcdefgh");
    assert_ep("1.2.3.4:80@abcdefghijkl", 0x01020304, 80, "abcdefgh"); /* 8 kept */
    assert_ep("1.2.3.4:80@a@b:c", 0x01020304, 80, "a@b:c");
    /* a socket that does not listen (spec 1.3: pscom_connect loops back) */
    assert_ep("1.2.3.4:-1@x", 0x01020304, -1, "x");
    assert_ep("127.0.0.1:-1", 0x7f000001, -1, NULL);
}

static void test_ep_parse_hostname(void **state)
{
    assert_ep("localhost:1234@peer", 0x7f000001, 1234, "peer");
}

static void assert_ep_reject(const char *str)
{
    pscom_ep_t ep, orig;

    memset(&ep, 0x5a, sizeof(ep));
    orig = ep;
    errno = 0;
    if (pscom_ep_parse(str, &ep) != -1) fail_msg("'%s' accepted", str ? str : "(NULL)");
    assert_int_equal(errno, EINVAL);
    assert_memory_equal(&ep, &orig, sizeof(ep)); /* untouched on failure */
}

static void test_ep_parse_malformed(void **state)
{
    static const char *const bad[] = {
        "",
        "1.2.3.4",          /* no ':' */
        "1.2.3.4@name",     /* no ':' */
        ":80",              /* empty host */
        ":80@x",
        "1.2.3.4:",         /* empty port */
        "1.2.3.4:@x",
        "1.2.3.4:65536",    /* port too large */
        "1.2.3.4:99999999999999999999",
        "1.2.3.4:-2",
        "1.2.3.4:-10",
        "1.2.3.4:-",
        "1.2.3.4:+80",
        "1.2.3.4: 80",
        "1.2.3.4:80 ",      /* trailing garbage */
        "1.2.3.4:80x",
        "1.2.3.4:80:81",
        "1.2.3.4:0x50",
        "1.2.3.4.5:80",
        "1.2.3.256:80",
        "no-such-host.invalid:80",
        "a:b:80",
        "@x:80",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) assert_ep_reject(bad[i]);
    assert_ep_reject(NULL);
    errno = 0;
    assert_int_equal(pscom_ep_parse("1.2.3.4:80", NULL), -1);
    assert_int_equal(errno, EINVAL);
}

/* Any tail after a valid host: never crashes, result is 0 or -1, and an
 * accepted string has a port in range, or -1. (Hosts stay numeric: no DNS.) */
static void test_ep_parse_fuzz(void **state)
{
    const char alphabet[] = "0123456789.:@ab-+ \t\xff";
    unsigned seed = 12345;
    char buf[40];
    pscom_ep_t ep;

    for (int n = 0; n < 20000; n++) {
        size_t len;

        strcpy(buf, "1.2.3.4");
        seed = seed * 1103515245u + 12345u;
        len = 7 + (seed >> 16) % (sizeof(buf) - 8);
        for (size_t i = 7; i < len; i++) {
            seed = seed * 1103515245u + 12345u;
            buf[i] = alphabet[(seed >> 16) % (sizeof(alphabet) - 1)];
        }
        buf[len] = '\0';
        if (buf[7] != ':' && buf[7] != '\0') buf[7] = ':'; /* keep the host numeric */
        int rc = pscom_ep_parse(buf, &ep);
        assert_true(rc == 0 || rc == -1);
        if (rc == 0) assert_true(ep.port >= -1 && ep.port <= 65535);
    }
}

static void test_ep_format(void **state)
{
    char *s;

    s = pscom_ep_format(0x0a010203, 7100, "rank0\0\0\0");
    assert_string_equal(s, "10.1.2.3:7100@rank0");
    free(s);
    s = pscom_ep_format(0xffffffff, 65535, "abcdefgh"); /* 8 bytes, no NUL */
    assert_string_equal(s, "255.255.255.255:65535@abcdefgh");
    free(s);
    s = pscom_ep_format(0x7f000001, 0, NULL);
    assert_string_equal(s, "127.0.0.1:0@");
    free(s);
}

static void test_ep_round_trip(void **state)
{
    static const struct {
        uint32_t addr;
        int port;
        const char *name;
    } t[] = {
        {0x7f000001, 1, "a"},
        {0xc0a80a0b, 54321, "abcdefgh"},
        {0x00000000, 0, ""},
        {0x0a000001, 65535, "12345678"},
    };
    for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
        char name[8] = {0};
        pscom_ep_t ep;
        char *s;

        memcpy(name, t[i].name, strlen(t[i].name));
        s = pscom_ep_format(t[i].addr, t[i].port, name);
        assert_non_null(s);
        assert_int_equal(pscom_ep_parse(s, &ep), 0);
        assert_int_equal(ep.addr, t[i].addr);
        assert_int_equal(ep.port, t[i].port);
        assert_true(ep.has_name);
        assert_memory_equal(ep.name, name, 8);
        free(s);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ep_parse_valid),
        cmocka_unit_test(test_ep_parse_hostname),
        cmocka_unit_test(test_ep_parse_malformed),
        cmocka_unit_test(test_ep_parse_fuzz),
        cmocka_unit_test(test_ep_format),
        cmocka_unit_test(test_ep_round_trip),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
