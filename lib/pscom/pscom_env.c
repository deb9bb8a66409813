/*
 * pscom_env.c - registered tables of PSP_* variables: parsing, echoing
 * and printing (see pscom_env.h).
 */
#define _GNU_SOURCE
#include "pscom_env.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "pscom_config.h"
#include "pscom_log.h"

#define ENV_NAME_MAX  128
#define ENV_VALUE_MAX 1024

static pscom_list_t env_tables = PSCOM_LIST_INIT(env_tables);
static pthread_mutex_t env_lock = PTHREAD_MUTEX_INITIALIZER;

/* DIR values allocated by table parsing, freed when the entry is re-parsed */
typedef struct env_owned {
    char *str;
    struct env_owned *next;
} env_owned_t;
static env_owned_t *env_owned_dirs;

/* ---------------------------------------------------------------------- */
/* value parsers                                                          */
/* ---------------------------------------------------------------------- */

/* Only trailing white space may follow a number. */
static int env_rest_is_blank(const char *end)
{
    while (isspace((unsigned char)*end)) end++;
    return *end == '\0';
}

static const char *env_skip_blank(const char *str)
{
    while (isspace((unsigned char)*str)) str++;
    return str;
}

/* str equals word, ignoring case and surrounding white space */
static int env_word_is(const char *str, const char *word)
{
    size_t len = strlen(word);
    str = env_skip_blank(str);
    return !strncasecmp(str, word, len) && env_rest_is_blank(str + len);
}

static int env_parse_int(const char *str, int *target)
{
    char *end;
    long val;

    errno = 0;
    val = strtol(str, &end, 10);
    if (end == str || errno || !env_rest_is_blank(end)) return -1;
    if (val < INT_MIN || val > INT_MAX) return -1;
    *target = (int)val;
    return 0;
}

/* unsigned decimal without sign; unsigned long long covers both uint and size_t */
static int env_parse_ull(const char *str, unsigned long long max,
                         unsigned long long *val)
{
    char *end;
    const char *digits = env_skip_blank(str);

    if (!isdigit((unsigned char)*digits)) return -1;
    errno = 0;
    *val = strtoull(digits, &end, 10);
    if (errno || !env_rest_is_blank(end) || *val > max) return -1;
    return 0;
}

static int env_parse_uint(const char *str, unsigned *target)
{
    unsigned long long val;

    if (env_word_is(str, "inf")) {
        *target = PSCOM_ENV_UINT_INF;
    } else if (env_word_is(str, "auto")) {
        *target = PSCOM_ENV_UINT_AUTO;
    } else if (env_parse_ull(str, UINT_MAX, &val) == 0) {
        *target = (unsigned)val;
    } else {
        return -1;
    }
    return 0;
}

static int env_parse_size_t(const char *str, size_t *target)
{
    unsigned long long val;

    if (env_parse_ull(str, SIZE_MAX, &val) != 0) return -1;
    *target = (size_t)val;
    return 0;
}

/* malloc'ed copy with a trailing '/' ("" stays "") */
static char *env_dir_dup(const char *str)
{
    size_t len = strlen(str);
    int add_slash = len && str[len - 1] != '/';
    char *dir = malloc(len + 2);

    if (!dir) return NULL;
    memcpy(dir, str, len);
    if (add_slash) dir[len++] = '/';
    dir[len] = '\0';
    return dir;
}

int pscom_env_parse_value(pscom_env_type_t type, const char *str, void *target)
{
    int rc = -1;
    char *dir;

    switch (type) {
    case PSCOM_ENV_INT:
        rc = str ? env_parse_int(str, target) : (*(int *)target = 0, 0);
        break;
    case PSCOM_ENV_UINT:
        rc = str ? env_parse_uint(str, target) : (*(unsigned *)target = 0, 0);
        break;
    case PSCOM_ENV_SIZE_T:
        rc = str ? env_parse_size_t(str, target) : (*(size_t *)target = 0, 0);
        break;
    case PSCOM_ENV_STR:
        *(char **)target = (char *)str;
        rc = 0;
        break;
    case PSCOM_ENV_DIR:
        dir = env_dir_dup(str ? str : "");
        if (dir) *(char **)target = dir;
        rc = dir ? 0 : -1;
        break;
    }
    if (rc) errno = EINVAL;
    return rc;
}

void pscom_env_format_value(const pscom_env_entry_t *entry, char *buf, size_t size)
{
    const char *str;
    unsigned u;

    switch (entry->type) {
    case PSCOM_ENV_INT:
        snprintf(buf, size, "%d", *(const int *)entry->target);
        return;
    case PSCOM_ENV_UINT:
        u = *(const unsigned *)entry->target;
        if (u == UINT_MAX && (entry->flags & PSCOM_ENV_NEG1)) snprintf(buf, size, "-1");
        else if (u == PSCOM_ENV_UINT_INF) snprintf(buf, size, "inf");
        else if (u == PSCOM_ENV_UINT_AUTO) snprintf(buf, size, "auto");
        else snprintf(buf, size, "%u", u);
        return;
    case PSCOM_ENV_SIZE_T:
        snprintf(buf, size, "%zu", *(const size_t *)entry->target);
        return;
    case PSCOM_ENV_STR:
    case PSCOM_ENV_DIR:
        str = *(char *const *)entry->target;
        snprintf(buf, size, "%s", str ? str : "");
        return;
    }
    if (size) buf[0] = '\0';
}

/* ---------------------------------------------------------------------- */
/* owned DIR strings                                                      */
/* ---------------------------------------------------------------------- */

static void env_dir_release(char *str)
{
    for (env_owned_t **p = &env_owned_dirs; *p; p = &(*p)->next) {
        if ((*p)->str == str) {
            env_owned_t *o = *p;
            *p = o->next;
            free(o->str);
            free(o);
            return;
        }
    }
}

static void env_dir_own(char *str)
{
    env_owned_t *o = malloc(sizeof(*o));
    if (!o) return; /* not tracked: leaks on re-parse, nothing worse */
    o->str = str;
    o->next = env_owned_dirs;
    env_owned_dirs = o;
}

/* ---------------------------------------------------------------------- */
/* table parsing                                                          */
/* ---------------------------------------------------------------------- */

static void env_var_name(char *buf, size_t size, const char *prefix, const char *name)
{
    snprintf(buf, size, "PSP_%s%s", prefix ? prefix : "", name);
}

/* the environment value of an entry, falling back to the parent */
static const char *env_entry_lookup(const pscom_env_table_t *table,
                                    const pscom_env_entry_t *entry,
                                    char *name, size_t size)
{
    const char *val;

    env_var_name(name, size, table->prefix, entry->name);
    val = getenv(name);
    if (!val && (entry->flags & PSCOM_ENV_HAS_PARENT)) {
        char parent[ENV_NAME_MAX];
        env_var_name(parent, sizeof(parent), "", entry->name);
        val = getenv(parent);
    }
    return val;
}

static int env_entry_parse_default(const pscom_env_entry_t *entry, const char *name)
{
    char shown[ENV_VALUE_MAX];
    int rc = pscom_env_parse_value(entry->type, entry->default_str, entry->target);

    if (rc) {
        plog_err("%s: default '%s' does not parse; please report this bug", name,
                 entry->default_str);
        pscom_env_parse_value(entry->type, NULL, entry->target);
    }
    pscom_env_format_value(entry, shown, sizeof(shown));
    pscom_log_force(pscom_config.debug_param >= 2, PSCOM_LOG_VERBOSE,
                    "default %s = %s", name, shown);
    return rc;
}

/* DIR targets own a malloc'ed string: release the one the re-parse replaced */
static void env_entry_dir_update(const pscom_env_entry_t *entry, char *old_dir)
{
    char *new_dir = *(char **)entry->target;

    if (new_dir == old_dir) return;
    if (old_dir) env_dir_release(old_dir);
    env_dir_own(new_dir);
}

/* pscom_env_parse_value() for an entry: with PSCOM_ENV_NEG1, "-1" too */
static int env_entry_parse_value(const pscom_env_entry_t *entry, const char *val)
{
    if ((entry->flags & PSCOM_ENV_NEG1) && env_word_is(val, "-1")) {
        *(unsigned *)entry->target = UINT_MAX;
        return 0;
    }
    return pscom_env_parse_value(entry->type, val, entry->target);
}

/* Returns 0, or 1 if the environment value was invalid. */
static int env_entry_parse(const pscom_env_table_t *table, const pscom_env_entry_t *entry)
{
    char name[ENV_NAME_MAX];
    const char *val = env_entry_lookup(table, entry, name, sizeof(name));
    const char *dflt = entry->default_str ? entry->default_str : "";
    char *old_dir = entry->type == PSCOM_ENV_DIR ? *(char **)entry->target : NULL;
    int invalid = 0;

    if (val && env_entry_parse_value(entry, val) == 0) {
        pscom_log_force(pscom_config.debug_param >= 1, PSCOM_LOG_DEBUG,
                        "set %s = %s (default: %s)", name, val, dflt);
    } else {
        if (val) {
            /* at the default level: a setting that is not taken must be seen */
            plog_err("%s: invalid value '%s', using the default '%s'", name, val, dflt);
            invalid = 1;
        }
        env_entry_parse_default(entry, name);
    }
    if (entry->type == PSCOM_ENV_DIR) env_entry_dir_update(entry, old_dir);
    return invalid;
}

static int env_table_parse(const pscom_env_table_t *table)
{
    int invalid = 0;

    for (const pscom_env_entry_t *e = table->entries; e && e->name; e++) {
        invalid += env_entry_parse(table, e);
    }
    return invalid;
}

static int env_table_is_registered(const pscom_env_table_t *table)
{
    pscom_list_t *pos;

    pscom_list_for_each(pos, &env_tables) {
        if (pos == &table->next) return 1;
    }
    return 0;
}

PSCOM_PLUGIN_API int pscom_env_table_register_and_parse(pscom_env_table_t *table)
{
    int invalid;

    pthread_mutex_lock(&env_lock);
    if (!env_table_is_registered(table)) pscom_list_add_tail(&table->next, &env_tables);
    invalid = env_table_parse(table);
    pthread_mutex_unlock(&env_lock);
    return invalid;
}

PSCOM_PLUGIN_API void pscom_env_clamp_uint(const char *name, unsigned *v, unsigned lo, unsigned hi)
{
    unsigned to = *v < lo ? lo : *v > hi ? hi : *v;
    if (to == *v) return;
    plog_err("%s=%u: using %u (the %s)", name, *v, to, to == lo ? "least" : "most");
    *v = to;
}

PSCOM_PLUGIN_API void pscom_env_clamp_sockbuf(const char *name, unsigned *v)
{
    if (*v) pscom_env_clamp_uint(name, v, PSCOM_TCP_BUF_MIN, INT_MAX);
}

void pscom_env_table_list_clear(void)
{
    pscom_list_t *pos, *tmp;

    pthread_mutex_lock(&env_lock);
    pscom_list_for_each_safe(pos, tmp, &env_tables) {
        pscom_list_del(pos);
    }
    pthread_mutex_unlock(&env_lock);
}

/* ---------------------------------------------------------------------- */
/* printing                                                               */
/* ---------------------------------------------------------------------- */

static void env_entry_print_doc(FILE *out, const pscom_env_entry_t *entry)
{
    const char *dflt = entry->default_str;
    int numeric = entry->type == PSCOM_ENV_INT || entry->type == PSCOM_ENV_UINT ||
                  entry->type == PSCOM_ENV_SIZE_T;

    if (!dflt) dflt = numeric ? "0" : "(unset)";
    fprintf(out, "# %s\n", entry->help ? entry->help : "");
    fprintf(out, "# default: %s\n", dflt);
    if (entry->flags & PSCOM_ENV_HAS_PARENT) {
        fprintf(out, "# inherits from: PSP_%s\n", entry->name);
    }
}

static void env_table_print(FILE *out, const pscom_env_table_t *table, unsigned flags)
{
    char name[ENV_NAME_MAX];
    char value[ENV_VALUE_MAX];

    fprintf(out, "##\n### %s\n", table->name ? table->name : "");
    for (const pscom_env_entry_t *e = table->entries; e && e->name; e++) {
        if ((e->flags & PSCOM_ENV_HIDDEN) && !(flags & PSCOM_ENV_PRINT_HIDDEN)) continue;
        if (flags & PSCOM_ENV_PRINT_DOC) env_entry_print_doc(out, e);
        env_var_name(name, sizeof(name), table->prefix, e->name);
        pscom_env_format_value(e, value, sizeof(value));
        fprintf(out, "%s=%s\n", name, value);
    }
}

PSCOM_PLUGIN_API void pscom_env_table_list_print(FILE *out, unsigned flags)
{
    pscom_list_t *pos;

    pthread_mutex_lock(&env_lock);
    pscom_list_for_each(pos, &env_tables) {
        env_table_print(out, pscom_list_entry(pos, pscom_env_table_t, next), flags);
    }
    pthread_mutex_unlock(&env_lock);
}
