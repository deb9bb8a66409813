/*
 * pscom_misuse.h - checks of the rules the API puts on its callers.
 *
 * Spec 5.10: misuse (posting or freeing a request that is not DONE, a bad
 * magic, an out-of-range con_type, ...) is caught like assert() does, not
 * reported by error codes. assert() is gone in release builds (NDEBUG),
 * where a re-posted request would corrupt the queues silently; these
 * checks stay: a message naming the call and the rule, then abort(). One
 * predictable branch each. Internal invariants keep using assert().
 */
#ifndef PSCOM_MISUSE_H
#define PSCOM_MISUSE_H

#include "pscom_types.h"

/* Print "<call>: API misuse: <rule> (<cond> failed)" and abort(). */
void pscom_api_misuse(const char *call, const char *cond, const char *rule)
    __attribute__((cold, noreturn));

#define pscom_api_check(cond, rule)                                            \
    do {                                                                       \
        if (pscom_unlikely(!(cond))) pscom_api_misuse(__func__, #cond, rule);  \
    } while (0)

#endif /* PSCOM_MISUSE_H */
