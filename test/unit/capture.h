/*
 * capture.h - unit-test helpers: capture what is written to stderr or
 * printed by the configuration tables, and read files back.
 */
#ifndef PSCOM_TEST_CAPTURE_H
#define PSCOM_TEST_CAPTURE_H

#include <stddef.h>

typedef struct capture {
    int saved_fd; /* the original stderr */
    int tmp_fd;   /* temporary file now behind fd 2 */
} capture_t;

/* Redirect fd 2 into a fresh temporary file. */
void capture_stderr_begin(capture_t *cap);
/* Restore stderr; returns everything written meanwhile (malloc'ed). */
char *capture_stderr_end(capture_t *cap);

/* Whole file content (malloc'ed, NUL-terminated), NULL if unreadable. */
char *capture_read_file(const char *path);

/* A fresh temporary file name in buf (the file exists and is empty). */
void capture_tmp_path(char *buf, size_t size);

/* What pscom_env_table_list_print(flags) prints (malloc'ed). */
char *capture_env_print(unsigned flags);

/* tu_count(text, needle): occurrences of needle; tu_read_fd() */
#include "tu_text.h"

#endif /* PSCOM_TEST_CAPTURE_H */
