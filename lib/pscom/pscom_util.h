/*
 * pscom_util.h - small helpers: node id, endpoint strings, time.
 */
#ifndef PSCOM_UTIL_H
#define PSCOM_UTIL_H

#include <stdint.h>
#include <string.h>
#include <time.h>

#include "pscom_types.h"

/* Parsed endpoint string "host:port[@name]" (spec 5.8). */
typedef struct pscom_ep {
    uint32_t addr;  /* IPv4, host byte order */
    int port;       /* 0..65535 */
    char name[8];   /* not NUL-terminated when 8 long; all zero if absent */
    int has_name;
} pscom_ep_t;

/* Parse "a.b.c.d:PORT@NAME" or "hostname:PORT[@NAME]". The name keeps at
 * most 8 bytes. Returns 0, or -1 with errno = EINVAL (never crashes on any
 * input, including NULL). */
int pscom_ep_parse(const char *ep_str, pscom_ep_t *ep);

/* Format "%u.%u.%u.%u:%u@%.8s" into a malloc'ed string (NULL on ENOMEM). */
char *pscom_ep_format(uint32_t addr, int port, const char name[8]);

/* Node id: IPv4 of the interface matching PSP_NETWORK (space/comma
 * separated addresses, networks "a.b.c.d/len" or host names), else of
 * gethostname(); host byte order; 127.0.0.1 as the last resort. Computed
 * once and cached. */
int pscom_nodeid_compute(const char *network);

/* The same lookup without the cache (for tests and diagnostics). */
int pscom_nodeid_lookup(const char *network);

/* monotonic time */
static inline uint64_t pscom_time_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

/* memcpy for the few bytes of small messages (header, xheader, data):
 * up to 32 bytes without a call into libc */
static inline void pscom_memcpy_small(void *dst, const void *src, size_t n)
{
    char *d       = dst;
    const char *s = src;
    if (n > 32) {
        memcpy(d, s, n);
    } else if (n > 16) {
        uint64_t a, b, c, e;
        memcpy(&a, s, 8);
        memcpy(&b, s + 8, 8);
        memcpy(&c, s + n - 16, 8);
        memcpy(&e, s + n - 8, 8);
        memcpy(d, &a, 8);
        memcpy(d + 8, &b, 8);
        memcpy(d + n - 16, &c, 8);
        memcpy(d + n - 8, &e, 8);
    } else if (n >= 8) {
        uint64_t a, b;
        memcpy(&a, s, 8);
        memcpy(&b, s + n - 8, 8);
        memcpy(d, &a, 8);
        memcpy(d + n - 8, &b, 8);
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

#endif /* PSCOM_UTIL_H */
