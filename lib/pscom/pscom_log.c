/*
 * pscom_log.c - prefixed, line-atomic log output (see pscom_log.h).
 *
 * Every output line is built in one buffer and written with one fwrite(),
 * so lines of concurrent threads never interleave.
 */
#define _GNU_SOURCE
#include "pscom_log.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>
#include <wordexp.h>

#include "pscom_util.h"

PSCOM_PLUGIN_API int pscom_log_level = 1;

typedef enum log_timing {
    LOG_TIMING_NONE,
    LOG_TIMING_US,    /* seconds since setup, µs resolution */
    LOG_TIMING_DATE,  /* local date and time */
    LOG_TIMING_WALL,  /* wall-clock seconds since the epoch */
    LOG_TIMING_DELTA, /* time since the previous line */
    LOG_TIMING_INVALID, /* (parsed only: an unknown value, said, then none) */
} log_timing_t;

#define LOG_NAME_MAX   8
#define LOG_PREFIX_MAX 160
#define LOG_STACK_BUF  1024

static struct {
    FILE *file;          /* PSP_DEBUG_OUT, NULL = stderr with wrapper */
    log_timing_t timing;
    uint64_t t_setup_us; /* reference of LOG_TIMING_US */
    uint64_t t_last_us;  /* reference of LOG_TIMING_DELTA */
    char name[LOG_NAME_MAX + 1];
    char host[64];
} log_state;

/* ---------------------------------------------------------------------- */
/* setup                                                                  */
/* ---------------------------------------------------------------------- */

static const char *log_host(void);

static log_timing_t log_timing_parse(const char *str)
{
    if (!str || !*str) return LOG_TIMING_NONE;
    if (!strcmp(str, "1") || !strcasecmp(str, "us")) return LOG_TIMING_US;
    if (!strcasecmp(str, "date")) return LOG_TIMING_DATE;
    if (!strcasecmp(str, "wall")) return LOG_TIMING_WALL;
    if (!strcasecmp(str, "delta")) return LOG_TIMING_DELTA;
    return LOG_TIMING_INVALID;
}

/* Shell-expand a file name; the result is malloc'ed (NULL on failure). */
static char *log_path_expand(const char *path)
{
    wordexp_t we;
    char *res = NULL;

    if (wordexp(path, &we, WRDE_NOCMD) != 0) return strdup(path);
    if (we.we_wordc == 1) res = strdup(we.we_wordv[0]);
    wordfree(&we);
    return res ? res : strdup(path);
}

static void log_file_close(void)
{
    if (log_state.file) {
        fclose(log_state.file);
        log_state.file = NULL;
    }
}

static void log_file_open(const char *debug_out)
{
    char *path = log_path_expand(debug_out);
    FILE *f = path ? fopen(path, "a") : NULL;

    if (f) {
        setvbuf(f, NULL, _IOLBF, 0);
        log_state.file = f;
    } else {
        plog_err("PSP_DEBUG_OUT: cannot open '%s' for appending: %m",
                 path ? path : debug_out);
    }
    free(path);
}

void pscom_log_setup(const char *debug_out, const char *debug_timing)
{
    int saved_errno = errno;

    if (!log_state.t_setup_us) log_state.t_setup_us = pscom_time_us();
    log_state.t_last_us = pscom_time_us();
    log_state.timing = log_timing_parse(debug_timing);

    log_file_close();
    if (debug_out && *debug_out) log_file_open(debug_out);
    if (log_state.timing == LOG_TIMING_INVALID) { /* (said into the file it names) */
        log_state.timing = LOG_TIMING_NONE;
        plog_err("PSP_DEBUG_TIMING: invalid value '%s' (1, us, date, wall or delta), "
                 "no timestamps",
                 debug_timing);
    }
    log_host(); /* now: pscom_log_sigsafe() may only read it */
    errno = saved_errno;
}

void pscom_log_set_name(const char *name, size_t len)
{
    if (len > LOG_NAME_MAX) len = LOG_NAME_MAX;
    len = name ? strnlen(name, len) : 0;
    memcpy(log_state.name, name ? name : "", len);
    log_state.name[len] = '\0';
}

void pscom_log_cleanup(void)
{
    log_file_close();
}

/* ---------------------------------------------------------------------- */
/* prefix                                                                 */
/* ---------------------------------------------------------------------- */

static const char *log_host(void)
{
    if (!log_state.host[0]) {
        char host[sizeof(log_state.host)] = "";
        if (gethostname(host, sizeof(host) - 1) != 0 || !host[0]) {
            strcpy(host, "localhost");
        }
        host[sizeof(host) - 1] = '\0';
        memcpy(log_state.host, host, sizeof(host));
    }
    return log_state.host;
}

static int log_fmt_seconds(char *buf, size_t size, uint64_t us)
{
    return snprintf(buf, size, "%llu.%06llu:", (unsigned long long)(us / 1000000u),
                    (unsigned long long)(us % 1000000u));
}

static int log_fmt_date(char *buf, size_t size)
{
    struct timeval tv;
    struct tm tm;
    char date[40];

    gettimeofday(&tv, NULL);
    localtime_r(&tv.tv_sec, &tm);
    strftime(date, sizeof(date), "%Y-%m-%d %H:%M:%S", &tm);
    return snprintf(buf, size, "%s.%06ld:", date, (long)tv.tv_usec);
}

static int log_fmt_timestamp(char *buf, size_t size)
{
    struct timeval tv;
    uint64_t now, last;

    switch (log_state.timing) {
    case LOG_TIMING_US:
        return log_fmt_seconds(buf, size, pscom_time_us() - log_state.t_setup_us);
    case LOG_TIMING_DATE:
        return log_fmt_date(buf, size);
    case LOG_TIMING_WALL:
        gettimeofday(&tv, NULL);
        return log_fmt_seconds(buf, size,
                               (uint64_t)tv.tv_sec * 1000000u + (uint64_t)tv.tv_usec);
    case LOG_TIMING_DELTA:
        now = pscom_time_us();
        last = __atomic_exchange_n(&log_state.t_last_us, now, __ATOMIC_RELAXED);
        return log_fmt_seconds(buf, size, now >= last ? now - last : 0);
    case LOG_TIMING_NONE:
    case LOG_TIMING_INVALID:
        break;
    }
    buf[0] = '\0';
    return 0;
}

/* "<PSP:" (stderr only) + timestamp + "host:pid" or name + ":" */
static size_t log_fmt_prefix(char *buf, size_t size)
{
    size_t len = 0;
    int n;

    if (!log_state.file) len = (size_t)snprintf(buf, size, "<PSP:");
    n = log_fmt_timestamp(buf + len, size - len);
    if (n > 0) len += (size_t)n;
    if (len >= size) return size - 1;

    if (log_state.name[0]) {
        n = snprintf(buf + len, size - len, "%s:", log_state.name);
    } else {
        n = snprintf(buf + len, size - len, "%s:%d:", log_host(), (int)getpid());
    }
    if (n > 0) len += (size_t)n;
    return len < size ? len : size - 1;
}

/* Append s (at most size - 1 bytes in all) */
static size_t sigsafe_put(char *buf, size_t size, size_t len, const char *s)
{
    while (*s && len + 1 < size) buf[len++] = *s++;
    buf[len] = '\0';
    return len;
}

int pscom_log_sigsafe(char *buf, size_t size, size_t *len, const char **suffix)
{
    size_t n = 0;
    if (!size) return -1;
    buf[0] = '\0';
    if (!log_state.file) n = sigsafe_put(buf, size, n, "<PSP:");
    if (log_state.name[0]) {
        n = sigsafe_put(buf, size, n, log_state.name);
    } else {
        char pid[24], *p = pid + sizeof(pid);
        unsigned long v = (unsigned long)getpid();
        *--p = '\0';
        do {
            *--p = (char)('0' + v % 10);
        } while (v /= 10);
        n = sigsafe_put(buf, size, n, log_state.host[0] ? log_state.host : "localhost");
        n = sigsafe_put(buf, size, n, ":");
        n = sigsafe_put(buf, size, n, p);
    }
    *len    = sigsafe_put(buf, size, n, ":");
    *suffix = log_state.file ? "\n" : ">\n";
    return log_state.file ? fileno_unlocked(log_state.file) : 2;
}

/* ---------------------------------------------------------------------- */
/* output                                                                 */
/* ---------------------------------------------------------------------- */

static void log_write_line(const char *prefix, size_t prefix_len,
                           const char *line, size_t line_len)
{
    FILE *out = log_state.file ? log_state.file : stderr;
    const char *suffix = log_state.file ? "\n" : ">\n";
    size_t suffix_len = strlen(suffix);
    size_t total = prefix_len + line_len + suffix_len;
    char stack_buf[LOG_STACK_BUF];
    char *buf = total <= sizeof(stack_buf) ? stack_buf : malloc(total);

    if (!buf) return;
    memcpy(buf, prefix, prefix_len);
    memcpy(buf + prefix_len, line, line_len);
    memcpy(buf + prefix_len + line_len, suffix, suffix_len);
    fwrite(buf, 1, total, out);
    if (buf != stack_buf) free(buf);
}

/* Split msg at '\n'; a trailing newline ends the last line, it does not
 * start an empty one. */
static void log_write_lines(const char *msg)
{
    char prefix[LOG_PREFIX_MAX];
    size_t prefix_len = log_fmt_prefix(prefix, sizeof(prefix));
    const char *line = msg;

    do {
        const char *nl = strchr(line, '\n');
        size_t line_len = nl ? (size_t)(nl - line) : strlen(line);

        log_write_line(prefix, prefix_len, line, line_len);
        line = nl ? nl + 1 : NULL;
    } while (line && *line);
}

/* vsnprintf into buf, or into a malloc'ed buffer if buf is too small. */
static char *log_vformat(char *buf, size_t size, const char *fmt, va_list ap)
{
    va_list ap2;
    int n;
    char *big;

    va_copy(ap2, ap);
    n = vsnprintf(buf, size, fmt, ap2);
    va_end(ap2);
    if (n < 0) return NULL;
    if ((size_t)n < size) return buf;

    big = malloc((size_t)n + 1);
    if (!big) return buf; /* truncated rather than lost */
    vsnprintf(big, (size_t)n + 1, fmt, ap);
    return big;
}

PSCOM_PLUGIN_API void pscom_log_print(const char *fmt, ...)
{
    int saved_errno = errno;
    char stack_buf[LOG_STACK_BUF];
    char *msg;
    va_list ap;

    va_start(ap, fmt);
    msg = log_vformat(stack_buf, sizeof(stack_buf), fmt, ap);
    va_end(ap);

    if (msg) {
        log_write_lines(msg);
        if (msg != stack_buf) free(msg);
    }
    errno = saved_errno;
}
