/*
 * tu_text.h - text helpers for the unit tests (test/unit/capture.c) and the
 * integration tests (pscom_testutil.h) alike: header only, since the ones
 * link libpscom statically and the others the shared library.
 */
#ifndef PSCOM_TU_TEXT_H
#define PSCOM_TU_TEXT_H

#include <string.h>

/* Non-overlapping occurrences of needle in text. */
static inline int tu_count(const char *text, const char *needle)
{
    int n       = 0;
    size_t nlen = strlen(needle);
    for (const char *p = text; nlen && (p = strstr(p, needle)); p += nlen) n++;
    return n;
}

#endif /* PSCOM_TU_TEXT_H */
