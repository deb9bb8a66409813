/*
 * pscom_env_api.c - the public environment getters of pscom.h: they read
 * through the overridable hook pscom_env_get and change *val only if the
 * variable is set ("override only if set"), so the caller's value is the
 * default.
 */
#include <stdlib.h>
#include <string.h>

#include "pscom_config.h"
#include "pscom_log.h"
#include "pscom_misuse.h"
#include "pscom_types.h"

PSCOM_API char *(*pscom_env_get)(const char *name) = getenv;
PSCOM_API int (*pscom_env_set)(const char *name, const char *value,
                               int overwrite) = setenv;

static const char *env_api_get(const char *name)
{
    const char *val = (name && pscom_env_get) ? pscom_env_get(name) : NULL;

    if (val) {
        pscom_log_force(pscom_config.debug_param >= 1, PSCOM_LOG_DEBUG,
                        "set %s = %s", name, val);
    } else if (name) {
        pscom_log_force(pscom_config.debug_param >= 2, PSCOM_LOG_VERBOSE,
                        "default %s is not set", name);
    }
    return val;
}

PSCOM_API void pscom_env_get_int(int *val, const char *name)
{
    pscom_api_check(val && name, "a variable and its name");
    const char *str = env_api_get(name);
    if (str) *val = (int)strtol(str, NULL, 10); /* atoi without overflow UB */
}

PSCOM_API void pscom_env_get_uint(unsigned int *val, const char *name)
{
    pscom_api_check(val && name, "a variable and its name");
    const char *str = env_api_get(name);
    if (str) *val = (unsigned int)strtoul(str, NULL, 10);
}

PSCOM_API void pscom_env_get_size_t(size_t *val, const char *name)
{
    pscom_api_check(val && name, "a variable and its name");
    const char *str = env_api_get(name);
    if (str) *val = (size_t)strtoull(str, NULL, 10);
}

PSCOM_API void pscom_env_get_str(char **val, const char *name)
{
    pscom_api_check(val && name, "a variable and its name");
    const char *str = env_api_get(name);
    if (str) *val = (char *)str;
}

PSCOM_API void pscom_env_get_dir(char **val, const char *name)
{
    pscom_api_check(val && name, "a variable and its name");
    const char *str = env_api_get(name);
    size_t len;
    char *dir;

    if (!str) return;
    len = strlen(str);
    dir = malloc(len + 2);
    if (!dir) return;
    memcpy(dir, str, len + 1);
    if (len && dir[len - 1] != '/') strcpy(dir + len, "/");
    *val = dir;
}
