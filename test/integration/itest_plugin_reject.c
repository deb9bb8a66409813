/*
 * itest_plugin_reject: a module in PSP_PLUGINDIR that the loader cannot
 * use is rejected with an error line (shown at the default PSP_DEBUG)
 * naming its path and the reason, as every other rejection is
 * (bad_module.c, loaded as "openib" with PSP_OPENIB=1):
 *
 *   plugin_reject_misnamed    its descriptor names the plugin "notopenib"
 *                             (until 2026-11-29 skipped without a word)
 *   plugin_reject_unresolved  dlopen fails on an undefined symbol (until
 *                             2026-11-29 said only at verbose level)
 *   plugin_reject_absent      PSP_PLUGINDIR without the module: looked for
 *                             next to libpscom, no error about the miss
 */
#include "pscom_testutil.h"

#include <stdlib.h>
#include <string.h>

static const char *want_err; /* this error line, or none at all about the module */

static int role(tu_ctx_t *ctx)
{
    tu_capture_begin();
    pscom_socket_t *sock = tu_open_socket(ctx, 0, 0); /* loads the plugins */
    char *log            = tu_capture_end();
    char path[512];
    snprintf(path, sizeof(path), "plugin %slibpscom4openib.so: ", getenv("PSP_PLUGINDIR"));
    if (want_err) {
        TU_ASSERT_MSG(tu_count(log, path) == 1, "want one line about \"%s\"", path);
        TU_ASSERT_MSG(strstr(log, want_err), "want \"%s\"", want_err);
        TU_ASSERT_MSG(strstr(log, "rejected"), "want \"rejected\"");
    } else {
        TU_ASSERT_MSG(!strstr(log, path), "a line about \"%s\"", path);
    }
    free(log);
    pscom_close_socket(sock);
    return 0;
}

static int run(const char *name, const char *dir, const char *err)
{
    setenv("PSP_PLUGINDIR", dir, 1);
    want_err = err;
    return tu_run(name, 0, role, NULL, NULL);
}

int main(void)
{
    setenv("PSP_DEBUG", "1", 1); /* errors only */
    setenv("PSP_OPENIB", "1", 1);
    setenv("PSP_UCP", "0", 1);
    if (run("plugin_reject_misnamed", PSCOM_TEST_MODULE_DIR "bad-misnamed/",
            "its descriptor names the plugin \"notopenib\", not \"openib\": rejected"))
        return 1;
    if (run("plugin_reject_unresolved", PSCOM_TEST_MODULE_DIR "bad-unresolved/",
            "undefined symbol: pscom_test_no_such_symbol"))
        return 1;
    if (run("plugin_reject_absent", PSCOM_TEST_MODULE_DIR "bad-absent/", NULL)) return 1;
    return 0;
}
