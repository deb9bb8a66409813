/*
 * pscom_copy.h - copies of the few bytes of small messages, for the core and
 * the transport plugins (part of the plugin SDK).
 */
#ifndef PSCOM_COPY_H
#define PSCOM_COPY_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* 8 <= n <= 16 bytes: the first and the last 8 (they may overlap) */
static inline void pscom_copy_ends8(char *d, const char *s, size_t n)
{
    uint64_t a, b;
    memcpy(&a, s, 8);
    memcpy(&b, s + n - 8, 8);
    memcpy(d, &a, 8);
    memcpy(d + n - 8, &b, 8);
}

/* memcpy for the few bytes of small messages (header, xheader, data):
 * up to 32 bytes without a call into libc */
static inline void pscom_memcpy_small(void *dst, const void *src, size_t n)
{
    char *d       = dst;
    const char *s = src;
    if (n > 32) {
        memcpy(d, s, n);
    } else if (n > 16) { /* the first and the last 16 */
        pscom_copy_ends8(d, s, 16);
        pscom_copy_ends8(d + n - 16, s + n - 16, 16);
    } else if (n >= 8) {
        pscom_copy_ends8(d, s, n);
    } else if (n >= 4) {
        uint32_t a, b;
        memcpy(&a, s, 4);
        memcpy(&b, s + n - 4, 4);
        memcpy(d, &a, 4);
        memcpy(d + n - 4, &b, 4);
    } else {
        for (size_t i = 0; i < n; i++) d[i] = s[i];
    }
}

#endif /* PSCOM_COPY_H */
