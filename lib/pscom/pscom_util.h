/*
 * pscom_util.h - small helpers: node id, endpoint strings, time.
 */
#ifndef PSCOM_UTIL_H
#define PSCOM_UTIL_H

#include <stdint.h>
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
static inline uint64_t pscom_time_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static inline uint64_t pscom_time_us(void)
{
    return pscom_time_ns() / 1000u;
}

#endif /* PSCOM_UTIL_H */
