/*
 * pscom_env.h - table-driven configuration through PSP_* variables.
 *
 * A component declares a table of entries and registers it; registering
 * also parses it (plain getenv()). The variable name is "PSP_" + table
 * prefix + entry name. An entry flagged PSCOM_ENV_HAS_PARENT that is not
 * set falls back to "PSP_" + entry name (PSP_SHM_RENDEZVOUS -> PSP_RENDEZVOUS).
 * A value that does not parse gives one warning and the default is used.
 * Parsers: INT (decimal, also negative), UINT (decimal, or "inf" = UINT_MAX-1,
 * "auto" = UINT_MAX, case-insensitive), SIZE_T, STR (pointer into the
 * environment, not copied; NULL default allowed), DIR (malloc'ed copy with a
 * trailing '/'). A NULL default of a numeric entry means 0 (never a crash).
 */
#ifndef PSCOM_ENV_H
#define PSCOM_ENV_H

#include <limits.h>
#include <stdio.h>

#include "pscom_list.h"
#include "pscom_types.h"

#define PSCOM_ENV_UINT_INF  (UINT_MAX - 1)
#define PSCOM_ENV_UINT_AUTO UINT_MAX

typedef enum pscom_env_type {
    PSCOM_ENV_INT,    /* int * */
    PSCOM_ENV_UINT,   /* unsigned int * */
    PSCOM_ENV_SIZE_T, /* size_t * */
    PSCOM_ENV_STR,    /* char ** (points into the environment or the default) */
    PSCOM_ENV_DIR,    /* char ** (malloc'ed, ends with '/'; "" stays "") */
} pscom_env_type_t;

#define PSCOM_ENV_HAS_PARENT 0x1 /* unset -> inherit "PSP_" + name */
#define PSCOM_ENV_HIDDEN     0x2 /* printed by pscom_info only with -x */
#define PSCOM_ENV_NEG1       0x4 /* a uint that also takes -1 (stored as UINT_MAX,
                                    printed as -1): "never" where documented */

typedef struct pscom_env_entry {
    const char *name;        /* without "PSP_" and prefix; NULL ends the table */
    const char *default_str; /* parsed when unset or invalid; may be NULL */
    const char *help;        /* one line, shown by pscom_info -d */
    void *target;
    pscom_env_type_t type;
    unsigned flags;
} pscom_env_entry_t;

typedef struct pscom_env_table {
    const char *name;   /* component name for printing, e.g. "pscom", "tcp" */
    const char *prefix; /* "" or e.g. "PRECON_TCP_", "SHM_" */
    const pscom_env_entry_t *entries;
    pscom_list_t next;  /* in the list of registered tables (internal) */
} pscom_env_table_t;

/* Register the table (once; re-registering re-parses) and parse every entry.
 * Returns 0, or the number of entries whose value was invalid. */
PSCOM_PLUGIN_API int pscom_env_table_register_and_parse(pscom_env_table_t *table);

/* Bring a parsed uint setting into [lo, hi]. A value outside is used as the
 * nearest bound, and that is said at the default log level, as for every
 * setting not taken as given: "<name>=<value>: using <bound> (the least)"
 * (or "(the most)"). name: the variable's full name, e.g. "PSP_UCP_MAX_RECV". */
PSCOM_PLUGIN_API void pscom_env_clamp_uint(const char *name, unsigned *v, unsigned lo, unsigned hi);

/* A TCP socket buffer size (SO_SNDBUF, SO_RCVBUF) in bytes: 0 leaves the
 * socket to the kernel's autotuning; other values are brought into
 * [PSCOM_TCP_BUF_MIN, INT_MAX] as pscom_env_clamp_uint() does. A fixed
 * buffer leaves a receive window of about twice its size, and over
 * loopback, whose MSS is about 64 KiB, a window below the MSS stalls every
 * message larger than the window: the sender waits for a window as large
 * as its segment and moves on only by zero-window probes, hundreds of
 * milliseconds each (pscom_pp over tcp stopped at 4 KiB messages with 4096,
 * at 32 KiB with 16384). A send buffer of 32768 (the established library's
 * default) holds one such segment: every message larger than it waited
 * for the receiver's delayed ACK, 40 ms, when the receive buffer was left
 * to autotuning (44 ms per 64 KiB message instead of 0.03; 2026-11-29);
 * from 65536 on, two segments fit and the receiver acknowledges at once. */
#define PSCOM_TCP_BUF_MIN 65536
PSCOM_PLUGIN_API void pscom_env_clamp_sockbuf(const char *name, unsigned *v);

/* Parse one value of the given type into target. Returns 0 or -1 (EINVAL). */
int pscom_env_parse_value(pscom_env_type_t type, const char *str, void *target);

/* Format the current value of an entry into buf ("inf"/"auto" for those). */
void pscom_env_format_value(const pscom_env_entry_t *entry, char *buf, size_t size);

#define PSCOM_ENV_PRINT_DOC    0x1 /* -d: help comments and default/inherits lines */
#define PSCOM_ENV_PRINT_HIDDEN 0x2 /* -x: hidden entries too */
/* Print every registered table, in registration order (pscom_info -c):
 *   "##" and "### <table name>" lines, then per entry "PSP_<PREFIX><NAME>=<value>"
 *   (uint inf/auto as "inf"/"auto", unset strings empty). HIDDEN entries only
 *   with PSCOM_ENV_PRINT_HIDDEN. PSCOM_ENV_PRINT_DOC puts "# <help>",
 *   "# default: <default>" (NULL: "0" for numbers, "(unset)" for strings) and,
 *   for HAS_PARENT entries, "# inherits from: PSP_<NAME>" before each entry. */
PSCOM_PLUGIN_API void pscom_env_table_list_print(FILE *out, unsigned flags);

/* Unregister all tables (library cleanup; tables themselves are static). */
void pscom_env_table_list_clear(void);

#endif /* PSCOM_ENV_H */
