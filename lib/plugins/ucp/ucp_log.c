/*
 * ucp_log.c - UCX's own log messages: where they go, and holding them back
 * around calls whose failure we report ourselves.
 *
 * Where they go. UCX prints its warnings and errors to stdout unless
 * UCX_LOG_FILE names a file; in a program's stdout they mix with what
 * users parse (pscom_pp's table, an MPI job's output). From the start of
 * the worker's creation to its end, a handler of ours writes them to the
 * library's log instead (stderr, or PSP_DEBUG_OUT), as one line each:
 * "<PSP:host:pid:ucp: UCX WARN parser.c:1908: unused env variable ...>".
 * UCX has filtered them by UCX_LOG_LEVEL already. With UCX_LOG_FILE set,
 * UCX's own handler writes them where the user asked.
 *
 * Holding back. Where a failure is expected or is reported by the plugin
 * in one line of its own (UCX cannot be initialised; the probe for peer
 * failure support), the messages UCX logs meanwhile are captured instead:
 * on failure the first error (or warning) becomes part of our line; on
 * success they are passed on as above. With UCX_LOG_LEVEL above "warn"
 * (the user asked UCX for details) nothing is held back.
 *
 * One message is moved to our debug log for good: a failed flush. UCX
 * logs it as an error on endpoints of mode NONE (in mode PEER at trace
 * level), because such an endpoint is not expected to fail. Ours are
 * (ucp_peer.c: the death detector stands in for mode PEER), and each flush
 * we start reports its status to our callback, which handles it. Seen over
 * UCX's tcp when a peer process exits while the endpoint to it closes here.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <ucs/config/global_opts.h>
#include <ucs/debug/log_def.h>

#include "ucp_priv.h"

#define HELD_MAX 8

typedef struct held {
    const char *file;
    unsigned line;
    const char *function;
    ucs_log_level_t level;
    const ucs_log_component_config_t *comp;
    char msg[256];
} held_t;

static int user_wants_details(void)
{
    return ucs_global_opts.log_component.log_level > UCS_LOG_LEVEL_WARN;
}

/* UCX's handler when the user named a log file; else the library's log */
static ucs_log_func_rc_t route(const char *file, unsigned line, const char *function,
                               ucs_log_level_t level, const ucs_log_component_config_t *comp,
                               const char *fmt, va_list ap)
{
    const char *log_file = ucs_global_opts.log_file;
    if (log_file && log_file[0])
        return ucs_log_default_handler(file, line, function, level, comp, fmt, ap);
    char msg[512];
    vsnprintf(msg, sizeof(msg), fmt, ap);
    const char *base = strrchr(file, '/');
    const char *name = (unsigned)level < UCS_LOG_LEVEL_LAST ? ucs_log_level_names[level] : "?";
    pscom_log_print("ucp: UCX %s %s:%u: %s", name, base ? base + 1 : file, line, msg);
    return UCS_LOG_FUNC_RC_STOP;
}

static held_t held[HELD_MAX];
static unsigned nheld;
static int capturing;

static ucs_log_func_rc_t capture(const char *file, unsigned line, const char *function,
                                 ucs_log_level_t level, const ucs_log_component_config_t *comp,
                                 const char *fmt, va_list ap)
{
    if (!capturing || level > UCS_LOG_LEVEL_WARN) return UCS_LOG_FUNC_RC_CONTINUE;
    if (user_wants_details()) return UCS_LOG_FUNC_RC_CONTINUE;
    if (nheld < HELD_MAX) {
        held_t *h   = &held[nheld++];
        h->file     = file;
        h->line     = line;
        h->function = function;
        h->level    = level;
        h->comp     = comp;
        va_list aq;
        va_copy(aq, ap);
        vsnprintf(h->msg, sizeof(h->msg), fmt, aq);
        va_end(aq);
    }
    return UCS_LOG_FUNC_RC_STOP;
}

void ucp_log_hold(void)
{
    nheld     = 0;
    capturing = 1;
    ucs_log_push_handler(capture);
}

static void replay(const held_t *h, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    route(h->file, h->line, h->function, h->level, h->comp, fmt, ap);
    va_end(ap);
}

const char *ucp_log_release(int failed)
{
    capturing = 0;
    ucs_log_pop_handler();
    if (!failed) {
        for (unsigned i = 0; i < nheld; i++) replay(&held[i], "%s", held[i].msg);
        return NULL;
    }
    for (unsigned i = 0; i < nheld; i++) /* the first error, else the first warning */
        if (held[i].level <= UCS_LOG_LEVEL_ERROR) return held[i].msg;
    return nheld ? held[0].msg : NULL;
}

static ucs_log_func_rc_t worker_log(const char *file, unsigned line, const char *function,
                                    ucs_log_level_t level, const ucs_log_component_config_t *comp,
                                    const char *fmt, va_list ap)
{
    if (level == UCS_LOG_LEVEL_ERROR && strstr(fmt, "error during flush") &&
        !user_wants_details()) {
        char msg[256];
        vsnprintf(msg, sizeof(msg), fmt, ap);
        plog_dbg("ucp: UCX (%s:%u): %s", file, line, msg);
        return UCS_LOG_FUNC_RC_STOP;
    }
    return route(file, line, function, level, comp, fmt, ap);
}

void ucp_log_start(void)
{
    ucs_log_push_handler(worker_log);
}

void ucp_log_stop(void)
{
    ucs_log_pop_handler();
}
