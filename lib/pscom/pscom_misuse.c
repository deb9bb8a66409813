/*
 * pscom_misuse.c - see pscom_misuse.h.
 */
#include "pscom_misuse.h"

#include <stdlib.h>

#include "pscom_log.h"

void pscom_api_misuse(const char *call, const char *cond, const char *rule)
{
    pscom_log_print("%s: API misuse: %s (%s failed)", call, rule, cond);
    abort();
}
