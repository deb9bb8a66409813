/*
 * test_log.c - log line format, multi-line splitting, names, timestamps,
 * PSP_DEBUG_OUT files and errno preservation (lib/pscom/pscom_log.c).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <regex.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "capture.h"
#include "pscom_log.h"

static char host_pid[128]; /* "host:pid" as the log prints it */

static int setup(void **state)
{
    char host[64] = "";
    gethostname(host, sizeof(host) - 1);
    snprintf(host_pid, sizeof(host_pid), "%s:%d", host, (int)getpid());
    pscom_log_setup(NULL, NULL);
    pscom_log_set_name(NULL, 0);
    pscom_log_level = 1;
    return 0;
}

static int teardown(void **state)
{
    pscom_log_cleanup();
    pscom_log_setup(NULL, NULL);
    pscom_log_set_name(NULL, 0);
    return 0;
}

static char *expect_line(const char *msg)
{
    char *s = NULL;
    assert_true(asprintf(&s, "<PSP:%s:%s>\n", host_pid, msg) > 0);
    return s;
}

static void assert_regex(const char *text, const char *pattern)
{
    regex_t re;
    assert_int_equal(regcomp(&re, pattern, REG_EXTENDED | REG_NOSUB), 0);
    if (regexec(&re, text, 0, NULL, 0) != 0) fail_msg("'%s' !~ /%s/", text, pattern);
    regfree(&re);
}

/* Given stderr output, when a message is printed, then it is one line
 * "<PSP:host:pid:message>". */
static void test_log_prefix_stderr(void **state)
{
    capture_t cap;
    char *want = expect_line("hello 42"), *got;

    capture_stderr_begin(&cap);
    pscom_log_print("hello %d", 42);
    got = capture_stderr_end(&cap);

    assert_string_equal(got, want);
    free(got);
    free(want);
}

static void test_log_multiline_split(void **state)
{
    capture_t cap;
    char *a = expect_line("first"), *b = expect_line("second"), *want, *got;

    assert_true(asprintf(&want, "%s%s", a, b) > 0);
    capture_stderr_begin(&cap);
    pscom_log_print("first\nsecond");
    got = capture_stderr_end(&cap);
    assert_string_equal(got, want);
    free(got);

    /* a trailing newline does not add an empty line */
    capture_stderr_begin(&cap);
    pscom_log_print("first\nsecond\n");
    got = capture_stderr_end(&cap);
    assert_string_equal(got, want);
    free(got);
    free(want);
    free(a);
    free(b);
}

static void test_log_empty_lines(void **state)
{
    capture_t cap;
    char *got, *empty = expect_line("");

    /* an empty line in the middle is kept */
    capture_stderr_begin(&cap);
    pscom_log_print("a\n\nb");
    got = capture_stderr_end(&cap);
    assert_int_equal(tu_count(got, "<PSP:"), 3);
    assert_non_null(strstr(got, empty));
    free(got);

    /* an empty message still gives one line */
    capture_stderr_begin(&cap);
    pscom_log_print("%s", "");
    got = capture_stderr_end(&cap);
    assert_string_equal(got, empty);
    free(got);
    free(empty);
}

static void test_log_long_message(void **state)
{
    capture_t cap;
    size_t len = 5000;
    char *msg = malloc(len + 1), *got;

    for (size_t i = 0; i < len; i++) msg[i] = (char)('a' + i % 26);
    msg[len] = '\0';
    capture_stderr_begin(&cap);
    pscom_log_print("%s", msg);
    got = capture_stderr_end(&cap);
    assert_non_null(strstr(got, msg));
    assert_int_equal(strlen(got), strlen("<PSP:") + strlen(host_pid) + 1 + len + 2);
    free(got);
    free(msg);
}

static void test_log_name(void **state)
{
    capture_t cap;
    char *got, *want;

    capture_stderr_begin(&cap);
    pscom_log_set_name("aaaa", 8);
    pscom_log_print("x");
    pscom_log_set_name("abcdefghXYZ", 8); /* 8 bytes, no NUL */
    pscom_log_print("y");
    pscom_log_set_name("abcdefghXYZ", 20); /* at most 8 kept */
    pscom_log_print("z");
    pscom_log_set_name(NULL, 0); /* restores host:pid */
    pscom_log_print("w");
    got = capture_stderr_end(&cap);

    assert_true(asprintf(&want, "<PSP:aaaa:x>\n<PSP:abcdefgh:y>\n<PSP:abcdefgh:z>\n"
                                "<PSP:%s:w>\n", host_pid) > 0);
    assert_string_equal(got, want);
    free(got);
    free(want);
}

/* Given PSP_DEBUG=1, warnings are suppressed and errors printed. */
static void test_log_levels(void **state)
{
    capture_t cap;
    char *got;

    pscom_log_level = PSCOM_LOG_ERROR;
    capture_stderr_begin(&cap);
    plog_warn("hidden warning");
    plog_err("shown error");
    pscom_log_force(1, PSCOM_LOG_TRACE, "forced trace");
    pscom_log_force(0, PSCOM_LOG_TRACE, "hidden trace");
    got = capture_stderr_end(&cap);

    assert_null(strstr(got, "hidden"));
    assert_non_null(strstr(got, "shown error"));
    assert_non_null(strstr(got, "forced trace"));
    free(got);
}

static void test_log_keeps_errno(void **state)
{
    capture_t cap;
    char *got;

    capture_stderr_begin(&cap);
    errno = ENOENT;
    plog_err("open: %m");
    assert_int_equal(errno, ENOENT);
    errno = EPIPE;
    pscom_log_print("direct");
    assert_int_equal(errno, EPIPE);
    got = capture_stderr_end(&cap);
    assert_non_null(strstr(got, strerror(ENOENT)));
    free(got);
}

/* Given PSP_DEBUG_OUT with a shell variable, lines are appended bare to
 * the expanded file, and nothing goes to stderr. */
static void test_log_debug_out_file(void **state)
{
    char path[256], *dir, *base, *out, *text, *want;
    capture_t cap;
    FILE *f;

    capture_tmp_path(path, sizeof(path));
    f = fopen(path, "w");
    assert_non_null(f);
    fputs("old line\n", f);
    fclose(f);
    dir = strdup(path);
    *strrchr(dir, '/') = '\0';
    base = strrchr(path, '/') + 1;
    setenv("PSCOM_TEST_LOGDIR", dir, 1);
    assert_true(asprintf(&out, "$PSCOM_TEST_LOGDIR/%s", base) > 0);

    capture_stderr_begin(&cap);
    pscom_log_setup(out, NULL);
    pscom_log_print("one\ntwo\n");
    pscom_log_cleanup();
    text = capture_stderr_end(&cap);
    assert_string_equal(text, "");
    free(text);

    text = capture_read_file(path);
    assert_non_null(text);
    assert_true(asprintf(&want, "old line\n%s:one\n%s:two\n", host_pid, host_pid) > 0);
    assert_string_equal(text, want);

    unlink(path);
    unsetenv("PSCOM_TEST_LOGDIR");
    free(want);
    free(text);
    free(out);
    free(dir);
}

/* An unopenable PSP_DEBUG_OUT reports an error and keeps stderr. */
static void test_log_debug_out_bad_path(void **state)
{
    capture_t cap;
    char *got;

    capture_stderr_begin(&cap);
    pscom_log_setup("/nonexistent-dir/sub/log", NULL);
    pscom_log_print("still here");
    got = capture_stderr_end(&cap);
    assert_non_null(strstr(got, "/nonexistent-dir/sub/log"));
    assert_non_null(strstr(got, ":still here>\n"));
    free(got);
}

static char *log_with_timing(const char *timing)
{
    capture_t cap;

    capture_stderr_begin(&cap);
    pscom_log_setup(NULL, timing);
    pscom_log_print("t");
    return capture_stderr_end(&cap);
}

static void test_log_timing(void **state)
{
    char pat[512], *got;
    long wall;

    snprintf(pat, sizeof(pat), "^<PSP:[0-9]+\\.[0-9]{6}:%s:t>\n$", host_pid);
    got = log_with_timing("us");
    assert_regex(got, pat);
    free(got);
    got = log_with_timing("1");
    assert_regex(got, pat);
    free(got);
    got = log_with_timing("delta");
    assert_regex(got, pat);
    free(got);

    got = log_with_timing("wall");
    assert_regex(got, pat);
    wall = strtol(got + strlen("<PSP:"), NULL, 10);
    assert_true(labs(wall - (long)time(NULL)) <= 2);
    free(got);

    snprintf(pat, sizeof(pat),
             "^<PSP:[0-9]{4}-[0-9]{2}-[0-9]{2} [0-9]{2}:[0-9]{2}:[0-9]{2}\\.[0-9]{6}:%s:t>\n$",
             host_pid);
    got = log_with_timing("date");
    assert_regex(got, pat);
    free(got);

    /* unknown: said (until 2026-11-29 silently), then no timestamp */
    snprintf(pat, sizeof(pat),
             "^<PSP:%s:PSP_DEBUG_TIMING: invalid value 'bogus' \\(1, us, date, wall or "
             "delta\\), no timestamps>\n<PSP:%s:t>\n$",
             host_pid, host_pid);
    got = log_with_timing("bogus");
    assert_regex(got, pat);
    free(got);
}

#define THREADS 4
#define LINES   300

static void *log_thread(void *arg)
{
    for (int i = 0; i < LINES; i++) pscom_log_print("thread %ld line %d\nsecond half", (long)(intptr_t)arg, i);
    return NULL;
}

/* Lines of concurrent threads never interleave. */
static void test_log_threads_no_interleave(void **state)
{
    char path[256], pat[256], *text, *line, *save = NULL;
    pthread_t t[THREADS];
    int count = 0;

    capture_tmp_path(path, sizeof(path));
    pscom_log_setup(path, NULL);
    for (long i = 0; i < THREADS; i++) {
        assert_int_equal(pthread_create(&t[i], NULL, log_thread, (void *)(intptr_t)i), 0);
    }
    for (int i = 0; i < THREADS; i++) pthread_join(t[i], NULL);
    pscom_log_cleanup();

    text = capture_read_file(path);
    assert_non_null(text);
    snprintf(pat, sizeof(pat), "^%s:(thread [0-9] line [0-9]+|second half)$", host_pid);
    for (line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        assert_regex(line, pat);
        count++;
    }
    assert_int_equal(count, THREADS * LINES * 2);
    unlink(path);
    free(text);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_log_prefix_stderr, setup, teardown),
        cmocka_unit_test_setup_teardown(test_log_multiline_split, setup, teardown),
        cmocka_unit_test_setup_teardown(test_log_empty_lines, setup, teardown),
        cmocka_unit_test_setup_teardown(test_log_long_message, setup, teardown),
        cmocka_unit_test_setup_teardown(test_log_name, setup, teardown),
        cmocka_unit_test_setup_teardown(test_log_levels, setup, teardown),
        cmocka_unit_test_setup_teardown(test_log_keeps_errno, setup, teardown),
        cmocka_unit_test_setup_teardown(test_log_debug_out_file, setup, teardown),
        cmocka_unit_test_setup_teardown(test_log_debug_out_bad_path, setup, teardown),
        cmocka_unit_test_setup_teardown(test_log_timing, setup, teardown),
        cmocka_unit_test_setup_teardown(test_log_threads_no_interleave, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
