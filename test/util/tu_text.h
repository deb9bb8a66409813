/*
 * tu_text.h - text helpers for the unit tests (test/unit/capture.c) and the
 * integration tests (pscom_testutil.h) alike: header only, since the ones
 * link libpscom statically and the others the shared library.
 */
#ifndef PSCOM_TU_TEXT_H
#define PSCOM_TU_TEXT_H

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Non-overlapping occurrences of needle in text. */
static inline int tu_count(const char *text, const char *needle)
{
    int n       = 0;
    size_t nlen = strlen(needle);
    for (const char *p = text; nlen && (p = strstr(p, needle)); p += nlen) n++;
    return n;
}

/* The content of the file at fd (from offset 0), NUL-terminated
 * (malloc'ed), or NULL if it cannot be read. */
static inline char *tu_read_fd(int fd)
{
    size_t len = 0, cap = 4096;
    char *text = malloc(cap);
    while (text) {
        if (cap - len < 2) {
            char *bigger = realloc(text, cap * 2);
            if (!bigger) break;
            text = bigger;
            cap *= 2;
        }
        ssize_t n = pread(fd, text + len, cap - len - 1, (off_t)len);
        if (n == 0) {
            text[len] = 0;
            return text;
        }
        if (n < 0 && errno != EINTR) break;
        if (n > 0) len += (size_t)n;
    }
    free(text);
    return NULL;
}

#endif /* PSCOM_TU_TEXT_H */
