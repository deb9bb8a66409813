/*
 * bad_module.c - a libpscom4openib.so that the loader must reject with an
 * error line naming its path and the reason, for itest_plugin_reject.
 * Built twice, into directories of their own (PSP_PLUGINDIR):
 *   BAD_MODULE_MISNAMED    its descriptor names another plugin
 *   BAD_MODULE_UNRESOLVED  it needs a symbol nobody defines (dlopen fails)
 */
#include "pscom_plugin.h"

#ifdef BAD_MODULE_UNRESOLVED
void pscom_test_no_such_symbol(void); /* defined nowhere */
#endif

static int bad_con_start(pscom_con_t *con, int *fd)
{
#ifdef BAD_MODULE_UNRESOLVED
    pscom_test_no_such_symbol();
#endif
    return -1;
}

static void bad_write_start(pscom_con_t *con)
{
}

static void bad_close(pscom_con_t *con)
{
}

static const pscom_plugin_ops_t bad_ops = {
    .con_start   = bad_con_start,
    .write_start = bad_write_start,
    .close       = bad_close,
};

PSCOM_PLUGIN_DEFINE(openib) = {
    .abi_version = PSCOM_PLUGIN_ABI_VERSION,
    .desc_size   = sizeof(pscom_plugin_desc_t),
#ifdef BAD_MODULE_MISNAMED
    .name = "notopenib",
#else
    .name = "openib",
#endif
    .con_type      = PSCOM_CON_TYPE_OPENIB,
    .priority      = 20,
    .user_priority = 0,
    .ops           = &bad_ops,
};
