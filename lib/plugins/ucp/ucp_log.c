/*
 * ucp_log.c - holding back UCX's own log messages around calls whose
 * failure we report ourselves.
 *
 * UCX prints warnings and errors to stderr by itself. Where a failure is
 * expected or is reported by the plugin in one line of its own (UCX cannot
 * be initialised; the probe for peer failure support), the messages UCX
 * logs meanwhile are captured instead: on failure the first error (or
 * warning) becomes part of our line; on success they are passed on to
 * UCX's default handler unchanged. With UCX_LOG_LEVEL above "warn" (the
 * user asked UCX for details) nothing is held back.
 */
#include <stdarg.h>
#include <stdio.h>
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

static held_t held[HELD_MAX];
static unsigned nheld;
static int capturing;

static ucs_log_func_rc_t capture(const char *file, unsigned line, const char *function,
                                 ucs_log_level_t level, const ucs_log_component_config_t *comp,
                                 const char *fmt, va_list ap)
{
    if (!capturing || level > UCS_LOG_LEVEL_WARN) return UCS_LOG_FUNC_RC_CONTINUE;
    if (ucs_global_opts.log_component.log_level > UCS_LOG_LEVEL_WARN)
        return UCS_LOG_FUNC_RC_CONTINUE; /* the user wants to see UCX's details */
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
    ucs_log_default_handler(h->file, h->line, h->function, h->level, h->comp, fmt, ap);
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
