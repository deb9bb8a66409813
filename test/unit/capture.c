/*
 * capture.c - see capture.h.
 */
#include "capture.h"

#include <stdarg.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <unistd.h>

#include <cmocka.h>

#include "pscom_env.h"

static char *capture_read_fd(int fd)
{
    char *text = tu_read_fd(fd);
    assert_non_null(text);
    return text;
}

void capture_tmp_path(char *buf, size_t size)
{
    const char *dir = getenv("TMPDIR");
    int fd;

    snprintf(buf, size, "%s/pscom_unit_XXXXXX", dir && *dir ? dir : "/tmp");
    fd = mkstemp(buf);
    assert_true(fd >= 0);
    close(fd);
}

void capture_stderr_begin(capture_t *cap)
{
    char path[256];

    fflush(stderr);
    capture_tmp_path(path, sizeof(path));
    cap->tmp_fd = open(path, O_RDWR);
    assert_true(cap->tmp_fd >= 0);
    unlink(path);
    cap->saved_fd = dup(2);
    assert_true(cap->saved_fd >= 0);
    assert_true(dup2(cap->tmp_fd, 2) == 2);
}

char *capture_stderr_end(capture_t *cap)
{
    char *text;

    fflush(stderr);
    assert_true(dup2(cap->saved_fd, 2) == 2);
    close(cap->saved_fd);
    text = capture_read_fd(cap->tmp_fd);
    close(cap->tmp_fd);
    return text;
}

char *capture_read_file(const char *path)
{
    FILE *f = fopen(path, "r");
    char *text;

    if (!f) return NULL;
    text = capture_read_fd(fileno(f));
    fclose(f);
    return text;
}

char *capture_env_print(unsigned flags)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);

    assert_non_null(f);
    pscom_env_table_list_print(f, flags);
    fclose(f);
    return buf;
}
