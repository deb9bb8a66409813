/*
 * ucp_stale_module.c - a libpscom4ucp.so of another plugin ABI version,
 * for itest_ucp (stale_module): the loader must reject it with one log
 * line and go on looking (next to libpscom).
 */
#include "pscom_plugin.h"

static int stale_con_start(pscom_con_t *con, int *fd)
{
    return -1;
}

static void stale_write_start(pscom_con_t *con)
{
}

static void stale_close(pscom_con_t *con)
{
}

static const pscom_plugin_ops_t stale_ops = {
    .con_start   = stale_con_start,
    .write_start = stale_write_start,
    .close       = stale_close,
};

PSCOM_PLUGIN_DEFINE(ucp) = {
    .abi_version   = PSCOM_PLUGIN_ABI_VERSION + 1,
    .desc_size     = sizeof(pscom_plugin_desc_t),
    .name          = "ucp",
    .con_type      = PSCOM_CON_TYPE_UCP,
    .priority      = 30,
    .user_priority = 1,
    .ops           = &stale_ops,
};
