/*
 * pscom_log.h - levelled logging that costs one predictable branch when off.
 *
 * Levels (PSP_DEBUG): 0 fatal/bugs, 1 +errors, 2 +warnings, 3 +info,
 * 4 +debug, 5 +verbose, 6 +trace.
 * Line format: "<PSP:" [timestamp] "host:pid" ":" message ">", where
 * "host:pid" is replaced by the socket name after pscom_socket_set_name().
 * Multi-line messages are split and each line gets the prefix. With
 * PSP_DEBUG_OUT the lines go bare to that file: the same timestamp and
 * "host:pid:" prefix, without "<PSP:" and ">".
 * Timestamps: "1"/"us" and "delta" print "SECONDS.MICROS:" (since setup / since
 * the previous line), "wall" the same since the epoch, "date" print
 * "YYYY-MM-DD HH:MM:SS.MICROS:" (local time).
 * The macros preserve errno, so "%m" and errno checks after them work.
 */
#ifndef PSCOM_LOG_H
#define PSCOM_LOG_H

#include <errno.h>
#include <stdio.h>

#include "pscom_types.h"

#define PSCOM_LOG_FATAL   0
#define PSCOM_LOG_ERROR   1
#define PSCOM_LOG_WARN    2
#define PSCOM_LOG_INFO    3
#define PSCOM_LOG_DEBUG   4
#define PSCOM_LOG_VERBOSE 5
#define PSCOM_LOG_TRACE   6

/* current level (PSP_DEBUG); exported for loadable plugins */
extern PSCOM_PLUGIN_API int pscom_log_level;

/* Print one (possibly multi-line) message with the prefix, unconditionally. */
PSCOM_PLUGIN_API void pscom_log_print(const char *fmt, ...)
    __attribute__((format(printf, 1, 2)));

#define pscom_log(level, ...)                                                  \
    do {                                                                       \
        if (pscom_unlikely(pscom_log_level >= (level))) {                      \
            int pscom_log_errno_ = errno;                                      \
            pscom_log_print(__VA_ARGS__);                                      \
            errno = pscom_log_errno_;                                          \
        }                                                                      \
    } while (0)

/* print if the level is reached or if force is non-zero ("force-to-level-0",
 * used by PSP_DEBUG_CONTYPE, PSP_DEBUG_PRECON, ...) */
#define pscom_log_force(force, level, ...)                                     \
    pscom_log((force) ? PSCOM_LOG_FATAL : (level), __VA_ARGS__)

#define plog_fatal(...) pscom_log(PSCOM_LOG_FATAL, __VA_ARGS__)
#define plog_err(...)   pscom_log(PSCOM_LOG_ERROR, __VA_ARGS__)
#define plog_warn(...)  pscom_log(PSCOM_LOG_WARN, __VA_ARGS__)
#define plog_info(...)  pscom_log(PSCOM_LOG_INFO, __VA_ARGS__)
#define plog_dbg(...)   pscom_log(PSCOM_LOG_DEBUG, __VA_ARGS__)
#define plog_verb(...)  pscom_log(PSCOM_LOG_VERBOSE, __VA_ARGS__)
#define plog_trace(...) pscom_log(PSCOM_LOG_TRACE, __VA_ARGS__)

/* Set up the output: PSP_DEBUG_OUT (wordexp-expanded file name, NULL =
 * stderr) and PSP_DEBUG_TIMING ("1"/"us", "date", "wall", "delta", NULL). */
void pscom_log_setup(const char *debug_out, const char *debug_timing);
/* Replace the "host:pid" part of the prefix (NULL restores it). */
void pscom_log_set_name(const char *name, size_t len);
/* Close a PSP_DEBUG_OUT file (at exit). */
void pscom_log_cleanup(void);

/* For a signal handler, which may call neither stdio nor malloc: the start
 * of a log line (as pscom_log_print()'s, without the timestamp) into buf,
 * its length into *len, the end of a line into *suffix; returns the fd
 * the log goes to (PSP_DEBUG_OUT's, else 2). Async-signal-safe once
 * pscom_log_setup() ran. */
int pscom_log_sigsafe(char *buf, size_t size, size_t *len, const char **suffix);

#endif /* PSCOM_LOG_H */
