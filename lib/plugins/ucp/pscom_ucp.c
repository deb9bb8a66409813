/*
 * pscom_ucp.c - the ucp transport: pscom connections over UCX tag
 * matching. Descriptor, configuration (PSP_UCP_*) and plugin life cycle;
 * the work is in ucp_worker.c (context, worker, progress), ucp_handshake.c
 * (set-up, close, failures), ucp_send.c and ucp_recv.c. See README.md.
 *
 * Built as the loadable module libpscom4ucp.so; it uses the core only
 * through the plugin SDK.
 */
#include "ucp_priv.h"

ucp_cfg_t ucp_cfg;

static const pscom_env_entry_t ucp_env[] = {
    {"MAX_RECV", "inf", "Max UCX receives in flight handled by the plugin (receives straight "
     "into the core's or the user's buffer do not count)", &ucp_cfg.max_recv, PSCOM_ENV_UINT, 0},
    {"FASTINIT", "1", "Create the UCX context and worker in plugin init (0: at the first ucp "
     "connection)", &ucp_cfg.fastinit, PSCOM_ENV_UINT, 0},
    {"RENDEZVOUS", "inf", "pscom-level rendezvous threshold over ucp (large messages use "
     "UCX's own protocols)", &ucp_cfg.rendezvous, PSCOM_ENV_UINT,
     PSCOM_ENV_HAS_PARENT | PSCOM_ENV_HIDDEN},
    {"SMALL_MSG_LEN", "350", "Messages up to this size (header, xheader and data) are packed "
     "into one UCX send", &ucp_cfg.small_msg_len, PSCOM_ENV_UINT, 0},
    {"ERR_HANDLING", "0", "1: UCX's own peer failure detection (UCP_ERR_HANDLING_MODE_PEER; "
     "UCX 1.13 then moves large messages over tcp without RDMA-style zero copy, about a third "
     "slower); 0: dead peers are noticed through the handshake socket only",
     &ucp_cfg.err_handling, PSCOM_ENV_UINT, 0},
    {"WIREUP_TIMEOUT", "10000", "ms a new connection waits for UCX's wire-up with the peer "
     "before the handshake goes on to the next transport (0: no limit of its own; the "
     "handshake's stall watchdog, PSP_PRECON_TCP_RECONNECT_TIMEOUT x _CONNECT_STALLED_MAX, "
     "then ends the attempt)", &ucp_cfg.wireup_timeout_ms, PSCOM_ENV_UINT, 0},
    {"EP_LINGER", "5000", "ms an endpoint to a peer process stays open after its last "
     "connection closed, for new connections to reuse within half that time",
     &ucp_cfg.ep_linger_ms, PSCOM_ENV_UINT, 0},
    {NULL},
};

static pscom_env_table_t ucp_env_table = {.name = "ucp", .prefix = "UCP_", .entries = ucp_env};

static int ucp_plugin_init(void)
{
    pscom_env_table_register_and_parse(&ucp_env_table);
    /* settings not taken as given are said at the default log level */
    pscom_env_clamp_uint("PSP_UCP_SMALL_MSG_LEN", &ucp_cfg.small_msg_len, 0, UCP_SMALL_MAX);
    pscom_env_clamp_uint("PSP_UCP_MAX_RECV", &ucp_cfg.max_recv, 1, UINT_MAX);
    pscom_env_clamp_uint("PSP_UCP_ERR_HANDLING", &ucp_cfg.err_handling, 0, 1);
    pscom_env_clamp_uint("PSP_UCP_FASTINIT", &ucp_cfg.fastinit, 0, 1);
    if (ucp_cfg.fastinit && ucp_worker_ensure() < 0) return -1;
    return 0;
}

static void ucp_plugin_fini(void)
{
    ucp_worker_fini();
}

static const pscom_plugin_ops_t ucp_ops = {
    .init        = ucp_plugin_init,
    .fini        = ucp_plugin_fini,
    .con_offer   = ucp_con_offer,
    .con_accept  = ucp_con_accept,
    .con_connect = ucp_con_connect,
    .con_confirm = ucp_con_confirm,
    .con_start   = ucp_con_start,
    .con_abort   = ucp_con_abort,
    .write_start = ucp_write_start,
    .write_now   = ucp_write_now,
    .close       = ucp_con_close,
};

PSCOM_PLUGIN_DEFINE(ucp) = {
    .abi_version   = PSCOM_PLUGIN_ABI_VERSION,
    .desc_size     = sizeof(pscom_plugin_desc_t),
    .name          = "ucp",
    .con_type      = PSCOM_CON_TYPE_UCP,
    .priority      = 30, /* shm 90 > ucp 30 > tcp 10 */
    .user_priority = 1,
    .caps          = 0,
    .con_priv_size = sizeof(ucp_con_t),
    .ops           = &ucp_ops,
};
