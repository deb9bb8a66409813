/*
 * test_config.c - the core's PSP_* tables (lib/pscom/pscom_config.c):
 * defaults, environment values, clamping, re-parsing and printing.
 */
#define _GNU_SOURCE
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "capture.h"
#include "pscom_config.h"
#include "pscom_env.h"
#include "pscom_log.h"

static const char *const vars[] = {
    "PSP_DEBUG", "PSP_DEBUG_OUT", "PSP_DEBUG_TIMING", "PSP_DEBUG_PARAM", "PSP_READAHEAD",
    "PSP_RENDEZVOUS", "PSP_PLUGINDIR", "PSP_PRECON_TCP_SO_SNDBUF", "PSP_RMA_MSG_SIZE_DIRECT_MEM_COPY",
    "PSP_DEADLOCK_WARNINGS", "PSP_PRECON_TYPE", "PSP_RETRY",
};

static int setup(void **state)
{
    for (size_t i = 0; i < sizeof(vars) / sizeof(vars[0]); i++) unsetenv(vars[i]);
    pscom_env_table_list_clear();
    return 0;
}

static int teardown(void **state)
{
    setup(state);
    pscom_config_init(); /* back to defaults, stderr */
    return 0;
}

static void test_config_defaults(void **state)
{
    pscom_config_init();
    assert_int_equal(pscom_config.debug, 1);
    assert_int_equal(pscom_log_level, 1);
    assert_null(pscom_config.debug_out);
    assert_int_equal(pscom_config.tcp_backlog, 262144);
    assert_int_equal(pscom_config.wait_spin_us, 1000);
    assert_int_equal(pscom_config.rendezvous, PSCOM_ENV_UINT_INF);
    assert_int_equal(pscom_config.sigsegv, 1);
    assert_int_equal(pscom_config.readahead, 350);
    assert_int_equal(pscom_config.skipblocksize, 8192);
    assert_int_equal(pscom_config.retry, 10);
    assert_int_equal(pscom_config.shutdown_timeout, 0);
    assert_int_equal(pscom_config.deadlock_warnings, 0);
    assert_int_equal(pscom_config.guard, 0);
    assert_null(pscom_config.network);
    assert_string_equal(pscom_config.plugindir, "");
    assert_string_equal(pscom_config.precon_type, "tcp");
    assert_int_equal(pscom_config.precon_tcp_so_sndbuf, 0);
    assert_int_equal(pscom_config.precon_tcp_so_rcvbuf, 0);
    assert_int_equal(pscom_config.precon_tcp_nodelay, 1);
    assert_int_equal(pscom_config.precon_tcp_reconnect_timeout, 2000);
    assert_int_equal(pscom_config.precon_tcp_connect_stalled_max, 6);
    assert_int_equal(pscom_config.rma_msg_size_direct_mem_copy, 64);
}

static void test_config_env_and_reparse(void **state)
{
    setenv("PSP_DEBUG", "3", 1);
    setenv("PSP_RENDEZVOUS", "65536", 1);
    setenv("PSP_PLUGINDIR", "/usr/lib/pscom", 1);
    setenv("PSP_PRECON_TCP_SO_SNDBUF", "1048576", 1);
    setenv("PSP_RMA_MSG_SIZE_DIRECT_MEM_COPY", "128", 1);
    setenv("PSP_DEADLOCK_WARNINGS", "-1", 1);
    pscom_config_init();
    assert_int_equal(pscom_log_level, 3);
    assert_int_equal(pscom_config.rendezvous, 65536);
    assert_string_equal(pscom_config.plugindir, "/usr/lib/pscom/");
    assert_int_equal(pscom_config.precon_tcp_so_sndbuf, 1048576);
    assert_int_equal(pscom_config.rma_msg_size_direct_mem_copy, 128);
    assert_int_equal(pscom_config.deadlock_warnings, UINT_MAX); /* -1 = never exit */
    /* a uint (spec): inf and values past INT_MAX mean "never" too (until
     * 2026-11-29 parsed as an int: invalid, the default 0, exit at once) */
    setenv("PSP_DEADLOCK_WARNINGS", "inf", 1);
    pscom_config_init();
    assert_int_equal(pscom_config.deadlock_warnings, PSCOM_ENV_UINT_INF);
    setenv("PSP_DEADLOCK_WARNINGS", "4294967295", 1);
    pscom_config_init();
    assert_int_equal(pscom_config.deadlock_warnings, UINT_MAX);
    setenv("PSP_DEADLOCK_WARNINGS", "-1", 1);

    setenv("PSP_DEBUG", "0", 1);
    setenv("PSP_PLUGINDIR", "/opt", 1);
    unsetenv("PSP_RENDEZVOUS");
    pscom_config_init(); /* a second call re-parses */
    assert_int_equal(pscom_log_level, 0);
    assert_int_equal(pscom_config.rendezvous, PSCOM_ENV_UINT_INF);
    assert_string_equal(pscom_config.plugindir, "/opt/");
}

static void test_config_readahead_clamped(void **state)
{
    setenv("PSP_READAHEAD", "2", 1);
    pscom_config_init();
    assert_int_equal(pscom_config.readahead, 8);
    setenv("PSP_READAHEAD", "-5", 1);
    pscom_config_init();
    assert_int_equal(pscom_config.readahead, 8);
    setenv("PSP_READAHEAD", "1000", 1);
    pscom_config_init();
    assert_int_equal(pscom_config.readahead, 1000);
}

/* PSP_DEBUG_OUT is applied before the tables, so their messages go there. */
static void test_config_debug_out_first(void **state)
{
    char path[256], *text;

    capture_tmp_path(path, sizeof(path));
    setenv("PSP_DEBUG_OUT", path, 1);
    setenv("PSP_DEBUG", "2", 1);
    setenv("PSP_RETRY", "many", 1);
    pscom_config_init();
    assert_string_equal(pscom_config.debug_out, path);
    assert_int_equal(pscom_config.retry, 10);
    pscom_log_cleanup();

    text = capture_read_file(path);
    assert_non_null(text);
    assert_non_null(strstr(text, "PSP_RETRY: invalid value 'many', using the default '10'\n"));
    assert_null(strstr(text, "<PSP:"));
    free(text);
    unlink(path);
}

static void test_config_param_echo(void **state)
{
    capture_t cap;
    char *out;

    setenv("PSP_DEBUG_PARAM", "1", 1);
    setenv("PSP_RETRY", "4", 1);
    capture_stderr_begin(&cap);
    pscom_config_init();
    out = capture_stderr_end(&cap);
    assert_non_null(strstr(out, "set PSP_RETRY = 4 (default: 10)>"));
    assert_non_null(strstr(out, "set PSP_DEBUG_PARAM = 1 (default: 0)>"));
    assert_null(strstr(out, "default PSP_TCP_BACKLOG"));
    free(out);
}

/* environment.md: an unknown handshake type is an error, tcp is used */
static void test_config_precon_type_unknown(void **state)
{
    capture_t cap;
    char *out;

    setenv("PSP_PRECON_TYPE", "bogus", 1);
    capture_stderr_begin(&cap);
    pscom_config_init();
    out = capture_stderr_end(&cap);
    assert_string_equal(pscom_config.precon_type, "tcp");
    assert_non_null(strstr(out, "PSP_PRECON_TYPE=bogus: unknown or not available here "
                                "(only tcp); using tcp>"));
    free(out);

    setenv("PSP_PRECON_TYPE", "tcp", 1);
    capture_stderr_begin(&cap);
    pscom_config_init();
    out = capture_stderr_end(&cap);
    assert_null(strstr(out, "PSP_PRECON_TYPE"));
    free(out);
}

/* the window a silent peer is given (handshakes, back-connect requests) */
static void test_config_stall_window(void **state)
{
    pscom_config_init();
    assert_int_equal(pscom_config_stall_window_ms(), 12000); /* 2000 ms x 6 */
    pscom_config.precon_tcp_connect_stalled_max = 0;
    assert_int_equal(pscom_config_stall_window_ms(), 2000); /* counts as 1 */
    pscom_config.precon_tcp_reconnect_timeout = 4000000;
    assert_int_equal(pscom_config_stall_window_ms(), 3600000); /* an hour at most */
    pscom_config.precon_tcp_connect_stalled_max = 4000000;
    assert_int_equal(pscom_config_stall_window_ms(), 3600000); /* no overflow */
    /* 0 turns the check off: no limit (until 2026-11-29 a back-connect
     * request then waited 1 ms and failed after PSP_RETRY of them) */
    pscom_config.precon_tcp_reconnect_timeout = 0;
    assert_int_equal(pscom_config_stall_window_ms(), 0);
}

static void test_config_print(void **state)
{
    char *out;

    pscom_config_init();
    out = capture_env_print(0);
    assert_non_null(strstr(out, "##\n### pscom\nPSP_DEBUG=1\n"));
    assert_non_null(strstr(out, "PSP_RENDEZVOUS=inf\n"));
    assert_non_null(strstr(out, "PSP_NETWORK=\n"));
    assert_non_null(strstr(out, "PSP_WAIT_SPIN_US=1000\n"));
    assert_non_null(strstr(out, "PSP_DEADLOCK_WARNINGS=0\n"));
    assert_non_null(strstr(out, "##\n### precon\nPSP_PRECON_TYPE=tcp\n"));
    assert_non_null(strstr(out, "##\n### precon.tcp\nPSP_PRECON_TCP_SO_SNDBUF=0\n"));
    assert_non_null(strstr(out, "##\n### rma\nPSP_RMA_MSG_SIZE_DIRECT_MEM_COPY=64\n"));
    assert_null(strstr(out, "PSP_SKIPBLOCKSIZE"));
    assert_null(strstr(out, "PSP_INFO="));
    assert_int_equal(tu_count(out, "### "), 4);
    free(out);

    out = capture_env_print(PSCOM_ENV_PRINT_HIDDEN | PSCOM_ENV_PRINT_DOC);
    assert_non_null(strstr(out, "PSP_SKIPBLOCKSIZE=8192\n"));
    assert_non_null(strstr(out, "PSP_INFO=\n"));
    assert_non_null(strstr(out, "# default: 262144\nPSP_TCP_BACKLOG=262144\n"));
    assert_non_null(strstr(out, "32768")); /* SO_*BUF help names the deviation */
    free(out);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_config_defaults, setup, teardown),
        cmocka_unit_test_setup_teardown(test_config_env_and_reparse, setup, teardown),
        cmocka_unit_test_setup_teardown(test_config_readahead_clamped, setup, teardown),
        cmocka_unit_test_setup_teardown(test_config_debug_out_first, setup, teardown),
        cmocka_unit_test_setup_teardown(test_config_param_echo, setup, teardown),
        cmocka_unit_test_setup_teardown(test_config_precon_type_unknown, setup, teardown),
        cmocka_unit_test_setup_teardown(test_config_stall_window, setup, teardown),
        cmocka_unit_test_setup_teardown(test_config_print, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
