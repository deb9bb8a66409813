/*
 * test_env.c - PSP_* table parsing, inheritance, fallback, echo and
 * printing (lib/pscom/pscom_env.c) and the public pscom_env_get_* getters
 * with their hook (lib/pscom/pscom_env_api.c).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "capture.h"
#include "pscom_config.h"
#include "pscom_env.h"
#include "pscom_log.h"

static const char *const test_vars[] = {
    "PSP_UTA_COUNT", "PSP_UTA_LIMIT", "PSP_UTA_SIZE", "PSP_UTA_NAME", "PSP_UTA_PATH",
    "PSP_UTA_UTEST_THRESHOLD", "PSP_UTEST_THRESHOLD", "PSP_UTA_SECRET", "PSP_UTA_NOVAL",
    "PSP_UTEST_HOOKED", "PSP_UTEST_PLAIN",
};

static int setup(void **state)
{
    for (size_t i = 0; i < sizeof(test_vars) / sizeof(test_vars[0]); i++) unsetenv(test_vars[i]);
    pscom_env_table_list_clear();
    pscom_log_setup(NULL, NULL);
    pscom_log_level = PSCOM_LOG_ERROR;
    pscom_config.debug_param = 0;
    pscom_env_get = getenv;
    return 0;
}

/* ---------------------------------------------------------------------- */
/* the test table                                                         */
/* ---------------------------------------------------------------------- */

static struct {
    int count;
    unsigned limit;
    size_t size;
    char *name;
    char *path;
    unsigned threshold;
    unsigned secret;
    unsigned noval;
    unsigned plain;
} cfg;

static const pscom_env_entry_t test_entries[] = {
    {"COUNT", "3", "a counter", &cfg.count, PSCOM_ENV_INT, 0},
    {"LIMIT", "inf", "a limit", &cfg.limit, PSCOM_ENV_UINT, 0},
    {"SIZE", "4096", "a size", &cfg.size, PSCOM_ENV_SIZE_T, 0},
    {"NAME", NULL, "a name", &cfg.name, PSCOM_ENV_STR, 0},
    {"PATH", "/opt/x", "a directory", &cfg.path, PSCOM_ENV_DIR, 0},
    {"UTEST_THRESHOLD", "100", "a threshold", &cfg.threshold, PSCOM_ENV_UINT,
     PSCOM_ENV_HAS_PARENT},
    {"SECRET", "7", "a hidden one", &cfg.secret, PSCOM_ENV_UINT, PSCOM_ENV_HIDDEN},
    {"NOVAL", NULL, "numeric without default", &cfg.noval, PSCOM_ENV_UINT, 0},
    {NULL},
};

static pscom_env_table_t test_table = {
    .name = "utest", .prefix = "UTA_", .entries = test_entries};

static const pscom_env_entry_t other_entries[] = {
    {"UTEST_PLAIN", "1", "plain", &cfg.plain, PSCOM_ENV_UINT, 0},
    {NULL},
};
static pscom_env_table_t other_table = {.name = "other", .prefix = "", .entries = other_entries};

/* ---------------------------------------------------------------------- */
/* parsers                                                                */
/* ---------------------------------------------------------------------- */

static void assert_int_parse(const char *str, int want)
{
    int v = 12345;
    if (pscom_env_parse_value(PSCOM_ENV_INT, str, &v) != 0) fail_msg("int '%s' rejected", str ? str : "(null)");
    assert_int_equal(v, want);
}

static void assert_int_reject(const char *str)
{
    int v = 12345;
    errno = 0;
    if (pscom_env_parse_value(PSCOM_ENV_INT, str, &v) != -1) fail_msg("int '%s' accepted", str);
    assert_int_equal(errno, EINVAL);
    assert_int_equal(v, 12345); /* untouched */
}

static void test_parse_int(void **state)
{
    assert_int_parse("42", 42);
    assert_int_parse("-7", -7);
    assert_int_parse(" 5 ", 5);
    assert_int_parse("2147483647", INT_MAX);
    assert_int_parse("-2147483648", INT_MIN);
    assert_int_parse(NULL, 0);
    assert_int_reject("");
    assert_int_reject("abc");
    assert_int_reject("12abc");
    assert_int_reject("1.5");
    assert_int_reject("2147483648");
    assert_int_reject("-2147483649");
    assert_int_reject("99999999999999999999999");
}

static void assert_uint_parse(const char *str, unsigned want)
{
    unsigned v = 12345;
    if (pscom_env_parse_value(PSCOM_ENV_UINT, str, &v) != 0) fail_msg("uint '%s' rejected", str ? str : "(null)");
    assert_int_equal(v, want);
}

static void assert_uint_reject(const char *str)
{
    unsigned v = 12345;
    if (pscom_env_parse_value(PSCOM_ENV_UINT, str, &v) != -1) fail_msg("uint '%s' accepted", str);
    assert_int_equal(v, 12345);
}

static void test_parse_uint(void **state)
{
    assert_uint_parse("0", 0);
    assert_uint_parse("350", 350);
    assert_uint_parse("4294967295", UINT_MAX);
    assert_uint_parse("inf", UINT_MAX - 1);
    assert_uint_parse("INF", PSCOM_ENV_UINT_INF);
    assert_uint_parse("Inf", PSCOM_ENV_UINT_INF);
    assert_uint_parse("auto", UINT_MAX);
    assert_uint_parse("AuTo", PSCOM_ENV_UINT_AUTO);
    assert_uint_parse(NULL, 0);
    assert_uint_reject("4294967296");
    assert_uint_reject("99999999999999999999999");
    assert_uint_reject("-1");
    assert_uint_reject("-0");
    assert_uint_reject("+5");
    assert_uint_reject("");
    assert_uint_reject("12x");
    assert_uint_reject("infinity");
    assert_uint_reject("autox");
    assert_uint_reject("garbage");
}

static void test_parse_size_t(void **state)
{
    size_t v = 1;

    assert_int_equal(pscom_env_parse_value(PSCOM_ENV_SIZE_T, "0", &v), 0);
    assert_int_equal(v, 0);
    assert_int_equal(pscom_env_parse_value(PSCOM_ENV_SIZE_T, "18446744073709551615", &v), 0);
    assert_true(v == SIZE_MAX);
    assert_int_equal(pscom_env_parse_value(PSCOM_ENV_SIZE_T, NULL, &v), 0);
    assert_int_equal(v, 0);
    v = 9;
    assert_int_equal(pscom_env_parse_value(PSCOM_ENV_SIZE_T, "18446744073709551616", &v), -1);
    assert_int_equal(pscom_env_parse_value(PSCOM_ENV_SIZE_T, "-1", &v), -1);
    assert_int_equal(pscom_env_parse_value(PSCOM_ENV_SIZE_T, "1k", &v), -1);
    assert_int_equal(pscom_env_parse_value(PSCOM_ENV_SIZE_T, "", &v), -1);
    assert_int_equal(v, 9);
}

static void test_parse_str_and_dir(void **state)
{
    const char *value = "hello";
    char *s = (char *)"x", *d = NULL;

    assert_int_equal(pscom_env_parse_value(PSCOM_ENV_STR, value, &s), 0);
    assert_ptr_equal(s, value); /* not copied */
    assert_int_equal(pscom_env_parse_value(PSCOM_ENV_STR, NULL, &s), 0);
    assert_null(s);

    assert_int_equal(pscom_env_parse_value(PSCOM_ENV_DIR, "/a/b", &d), 0);
    assert_string_equal(d, "/a/b/");
    free(d);
    assert_int_equal(pscom_env_parse_value(PSCOM_ENV_DIR, "/a/", &d), 0);
    assert_string_equal(d, "/a/");
    free(d);
    assert_int_equal(pscom_env_parse_value(PSCOM_ENV_DIR, "", &d), 0);
    assert_string_equal(d, "");
    free(d);
    assert_int_equal(pscom_env_parse_value(PSCOM_ENV_DIR, NULL, &d), 0);
    assert_string_equal(d, "");
    free(d);
}

static void assert_format(pscom_env_type_t type, void *target, const char *want)
{
    pscom_env_entry_t e = {.name = "X", .target = target, .type = type};
    char buf[64];
    pscom_env_format_value(&e, buf, sizeof(buf));
    assert_string_equal(buf, want);
}

static void test_format_value(void **state)
{
    int i = -3;
    unsigned u = 17, inf = PSCOM_ENV_UINT_INF, aut = PSCOM_ENV_UINT_AUTO;
    size_t z = 123456789012ull;
    char *s = (char *)"str", *n = NULL;

    assert_format(PSCOM_ENV_INT, &i, "-3");
    assert_format(PSCOM_ENV_UINT, &u, "17");
    assert_format(PSCOM_ENV_UINT, &inf, "inf");
    assert_format(PSCOM_ENV_UINT, &aut, "auto");
    assert_format(PSCOM_ENV_SIZE_T, &z, "123456789012");
    assert_format(PSCOM_ENV_STR, &s, "str");
    assert_format(PSCOM_ENV_STR, &n, "");
    assert_format(PSCOM_ENV_DIR, &s, "str");
}

/* ---------------------------------------------------------------------- */
/* tables                                                                 */
/* ---------------------------------------------------------------------- */

static void test_table_defaults(void **state)
{
    cfg.noval = 77;
    assert_int_equal(pscom_env_table_register_and_parse(&test_table), 0);
    assert_int_equal(cfg.count, 3);
    assert_int_equal(cfg.limit, PSCOM_ENV_UINT_INF);
    assert_int_equal(cfg.size, 4096);
    assert_null(cfg.name);
    assert_string_equal(cfg.path, "/opt/x/");
    assert_int_equal(cfg.threshold, 100);
    assert_int_equal(cfg.secret, 7);
    assert_int_equal(cfg.noval, 0); /* NULL numeric default = 0, no crash */
}

static void test_table_env_values(void **state)
{
    setenv("PSP_UTA_COUNT", "-12", 1);
    setenv("PSP_UTA_LIMIT", "auto", 1);
    setenv("PSP_UTA_SIZE", "8589934592", 1);
    setenv("PSP_UTA_NAME", "abc", 1);
    setenv("PSP_UTA_PATH", "/tmp/plugins", 1);
    setenv("PSP_UTA_NOVAL", "5", 1);
    setenv("PSP_COUNT", "99", 1); /* no HAS_PARENT: never consulted */

    assert_int_equal(pscom_env_table_register_and_parse(&test_table), 0);
    assert_int_equal(cfg.count, -12);
    assert_int_equal(cfg.limit, PSCOM_ENV_UINT_AUTO);
    assert_true(cfg.size == 8589934592ull);
    assert_ptr_equal(cfg.name, getenv("PSP_UTA_NAME"));
    assert_string_equal(cfg.path, "/tmp/plugins/");
    assert_int_equal(cfg.noval, 5);
    unsetenv("PSP_COUNT");

    /* registering again re-parses */
    setenv("PSP_UTA_COUNT", "8", 1);
    unsetenv("PSP_UTA_PATH");
    assert_int_equal(pscom_env_table_register_and_parse(&test_table), 0);
    assert_int_equal(cfg.count, 8);
    assert_string_equal(cfg.path, "/opt/x/");
}

static void test_table_parent(void **state)
{
    setenv("PSP_UTEST_THRESHOLD", "1000", 1);
    pscom_env_table_register_and_parse(&test_table);
    assert_int_equal(cfg.threshold, 1000); /* inherited */

    setenv("PSP_UTA_UTEST_THRESHOLD", "inf", 1);
    pscom_env_table_register_and_parse(&test_table);
    assert_int_equal(cfg.threshold, PSCOM_ENV_UINT_INF); /* own value wins */

    unsetenv("PSP_UTA_UTEST_THRESHOLD");
    unsetenv("PSP_UTEST_THRESHOLD");
    pscom_env_table_register_and_parse(&test_table);
    assert_int_equal(cfg.threshold, 100);
}

/* Given an invalid value, when the table is parsed at the default log level
 * (PSP_DEBUG=1: errors), then one message names the variable, the value and
 * the default, and the default is used: a typo in a job script is seen. */
static void test_table_invalid_falls_back(void **state)
{
    capture_t cap;
    char *out;
    int invalid;

    setenv("PSP_UTA_LIMIT", "-1", 1);
    setenv("PSP_UTA_COUNT", "lots", 1);
    pscom_log_level = PSCOM_LOG_ERROR;
    capture_stderr_begin(&cap);
    invalid = pscom_env_table_register_and_parse(&test_table);
    out = capture_stderr_end(&cap);

    assert_int_equal(invalid, 2);
    assert_int_equal(cfg.limit, PSCOM_ENV_UINT_INF);
    assert_int_equal(cfg.count, 3);
    assert_int_equal(tu_count(out, "\n"), 2);
    assert_non_null(strstr(out, "PSP_UTA_LIMIT: invalid value '-1', using the default 'inf'"));
    assert_non_null(strstr(out, "PSP_UTA_COUNT: invalid value 'lots', using the default '3'"));
    free(out);
}

static void test_table_echo(void **state)
{
    capture_t cap;
    char *out;

    setenv("PSP_UTA_COUNT", "4", 1);
    capture_stderr_begin(&cap);
    pscom_config.debug_param = 1; /* level 1, but forced */
    pscom_env_table_register_and_parse(&test_table);
    pscom_config.debug_param = 0;
    out = capture_stderr_end(&cap);
    assert_non_null(strstr(out, "set PSP_UTA_COUNT = 4 (default: 3)>"));
    assert_null(strstr(out, "default PSP_UTA_LIMIT"));
    free(out);

    capture_stderr_begin(&cap);
    pscom_config.debug_param = 2;
    pscom_env_table_register_and_parse(&test_table);
    pscom_config.debug_param = 0;
    out = capture_stderr_end(&cap);
    assert_non_null(strstr(out, "set PSP_UTA_COUNT = 4 (default: 3)>"));
    assert_non_null(strstr(out, "default PSP_UTA_LIMIT = inf>"));
    free(out);

    capture_stderr_begin(&cap); /* level 4 shows sets, level 5 defaults */
    pscom_log_level = PSCOM_LOG_DEBUG;
    pscom_env_table_register_and_parse(&test_table);
    pscom_log_level = PSCOM_LOG_ERROR;
    out = capture_stderr_end(&cap);
    assert_non_null(strstr(out, "set PSP_UTA_COUNT = 4"));
    assert_null(strstr(out, "default PSP_UTA_LIMIT"));
    free(out);

    capture_stderr_begin(&cap); /* quiet by default */
    pscom_env_table_register_and_parse(&test_table);
    out = capture_stderr_end(&cap);
    assert_string_equal(out, "");
    free(out);
}

static void test_table_print(void **state)
{
    char *out;

    setenv("PSP_UTA_NAME", "nm", 1);
    pscom_env_table_register_and_parse(&test_table);
    pscom_env_table_register_and_parse(&other_table);
    pscom_env_table_register_and_parse(&test_table); /* listed once */

    out = capture_env_print(0);
    assert_string_equal(out, "##\n### utest\n"
                             "PSP_UTA_COUNT=3\n"
                             "PSP_UTA_LIMIT=inf\n"
                             "PSP_UTA_SIZE=4096\n"
                             "PSP_UTA_NAME=nm\n"
                             "PSP_UTA_PATH=/opt/x/\n"
                             "PSP_UTA_UTEST_THRESHOLD=100\n"
                             "PSP_UTA_NOVAL=0\n"
                             "##\n### other\n"
                             "PSP_UTEST_PLAIN=1\n");
    free(out);

    out = capture_env_print(PSCOM_ENV_PRINT_HIDDEN);
    assert_non_null(strstr(out, "PSP_UTA_UTEST_THRESHOLD=100\nPSP_UTA_SECRET=7\n"));
    free(out);

    out = capture_env_print(PSCOM_ENV_PRINT_DOC);
    assert_null(strstr(out, "SECRET"));
    assert_non_null(strstr(out, "##\n### utest\n# a counter\n# default: 3\nPSP_UTA_COUNT=3\n"));
    assert_non_null(strstr(out, "# a name\n# default: (unset)\nPSP_UTA_NAME=nm\n"));
    assert_non_null(strstr(out, "# a threshold\n# default: 100\n"
                                "# inherits from: PSP_UTEST_THRESHOLD\n"
                                "PSP_UTA_UTEST_THRESHOLD=100\n"));
    assert_non_null(strstr(out, "# numeric without default\n# default: 0\nPSP_UTA_NOVAL=0\n"));
    assert_int_equal(tu_count(out, "# inherits from:"), 1);
    free(out);

    pscom_env_table_list_clear();
    out = capture_env_print(PSCOM_ENV_PRINT_DOC | PSCOM_ENV_PRINT_HIDDEN);
    assert_string_equal(out, "");
    free(out);
}

/* ---------------------------------------------------------------------- */
/* public getters                                                         */
/* ---------------------------------------------------------------------- */

static void test_api_override_only_if_set(void **state)
{
    int i = 5;
    unsigned u = 6;
    size_t z = 7;
    char *s = (char *)"dflt", *d = (char *)"ddir";

    pscom_env_get_int(&i, "PSP_UTEST_PLAIN");
    pscom_env_get_uint(&u, "PSP_UTEST_PLAIN");
    pscom_env_get_size_t(&z, "PSP_UTEST_PLAIN");
    pscom_env_get_str(&s, "PSP_UTEST_PLAIN");
    pscom_env_get_dir(&d, "PSP_UTEST_PLAIN");
    assert_int_equal(i, 5);
    assert_int_equal(u, 6);
    assert_int_equal(z, 7);
    assert_string_equal(s, "dflt");
    assert_string_equal(d, "ddir");

    setenv("PSP_UTEST_PLAIN", "-3", 1);
    pscom_env_get_int(&i, "PSP_UTEST_PLAIN");
    assert_int_equal(i, -3);
    setenv("PSP_UTEST_PLAIN", "4000000000", 1);
    pscom_env_get_uint(&u, "PSP_UTEST_PLAIN");
    assert_true(u == 4000000000u);
    setenv("PSP_UTEST_PLAIN", "10000000000", 1);
    pscom_env_get_size_t(&z, "PSP_UTEST_PLAIN");
    assert_true(z == 10000000000ull);
    pscom_env_get_str(&s, "PSP_UTEST_PLAIN");
    assert_ptr_equal(s, getenv("PSP_UTEST_PLAIN"));
    setenv("PSP_UTEST_PLAIN", "/usr/lib", 1);
    pscom_env_get_dir(&d, "PSP_UTEST_PLAIN");
    assert_string_equal(d, "/usr/lib/");
    free(d);
    setenv("PSP_UTEST_PLAIN", "abc", 1); /* atoi semantics */
    pscom_env_get_int(&i, "PSP_UTEST_PLAIN");
    assert_int_equal(i, 0);
}

static char *fake_get(const char *name)
{
    return strcmp(name, "PSP_UTEST_HOOKED") ? NULL : (char *)"17";
}

/* The getters read through the hook; the tables do not. */
static void test_api_hook(void **state)
{
    int i = 1;

    assert_ptr_equal(pscom_env_get, getenv);
    assert_true(pscom_env_set == setenv);

    pscom_env_get = fake_get;
    pscom_env_get_int(&i, "PSP_UTEST_HOOKED");
    assert_int_equal(i, 17);
    setenv("PSP_UTEST_PLAIN", "9", 1);
    i = 1;
    pscom_env_get_int(&i, "PSP_UTEST_PLAIN"); /* hidden by the hook */
    assert_int_equal(i, 1);
    pscom_env_table_register_and_parse(&other_table); /* plain getenv */
    assert_int_equal(cfg.plain, 9);
    pscom_env_get = getenv;

    assert_int_equal(pscom_env_set("PSP_UTEST_HOOKED", "23", 1), 0);
    pscom_env_get_int(&i, "PSP_UTEST_HOOKED");
    assert_int_equal(i, 23);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_parse_int, setup),
        cmocka_unit_test_setup(test_parse_uint, setup),
        cmocka_unit_test_setup(test_parse_size_t, setup),
        cmocka_unit_test_setup(test_parse_str_and_dir, setup),
        cmocka_unit_test_setup(test_format_value, setup),
        cmocka_unit_test_setup(test_table_defaults, setup),
        cmocka_unit_test_setup(test_table_env_values, setup),
        cmocka_unit_test_setup(test_table_parent, setup),
        cmocka_unit_test_setup(test_table_invalid_falls_back, setup),
        cmocka_unit_test_setup(test_table_echo, setup),
        cmocka_unit_test_setup(test_table_print, setup),
        cmocka_unit_test_setup(test_api_override_only_if_set, setup),
        cmocka_unit_test_setup(test_api_hook, setup),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
