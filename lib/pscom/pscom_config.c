/*
 * pscom_config.c - the core's PSP_* tables: general, precon, precon over
 * tcp and RMA (see doc/configuration.md for the user's view).
 */
#include "pscom_config.h"

#include <stdlib.h>
#include <string.h>

#include "pscom_log.h"

PSCOM_PLUGIN_API pscom_config_t pscom_config;

#define CFG(field) (&pscom_config.field)

#define READAHEAD_MIN 8 /* sizeof(pscom_header_net_t) */

/* clang-format off */
static const pscom_env_entry_t config_general[] = {
    {"DEBUG", "1", "log level: 0 fatal, 1 +errors, 2 +warnings, 3 +info, "
     "4 +debug, 5 +verbose, 6 +trace", CFG(debug), PSCOM_ENV_INT, 0},
    {"DEBUG_OUT", NULL, "append log lines to this file (shell-expanded) "
     "instead of stderr", CFG(debug_out), PSCOM_ENV_STR, 0},
    {"DEBUG_REQ", "0", "keep every request in a global list for dumps "
     "(slower)", CFG(debug_req), PSCOM_ENV_INT, 0},
    {"TCP_BACKLOG", "262144", "listen() backlog of a socket's TCP listener",
     CFG(tcp_backlog), PSCOM_ENV_UINT, 0},
    {"UNEXPECTED_RECEIVES", "0", "read from new connections even when no "
     "receive is posted", CFG(unexpected_receives), PSCOM_ENV_INT, 0},
    {"SCHED_YIELD", "0", "call sched_yield() after a progress pass that "
     "found nothing to do", CFG(sched_yield), PSCOM_ENV_INT, 0},
    {"WAIT_SPIN_US", "1000", "busy-poll time in microseconds of a blocking "
     "wait before it sleeps in the kernel", CFG(wait_spin_us),
     PSCOM_ENV_UINT, 0},
    {"RENDEZVOUS", "inf", "message size in bytes from which rendezvous is "
     "used; parent of every PSP_<PLUGIN>_RENDEZVOUS", CFG(rendezvous),
     PSCOM_ENV_UINT, 0},
    {"SIGQUIT", "0", "1: on SIGQUIT log a dump of requests, sockets, "
     "connections, fds and statistics and go on", CFG(sigquit),
     PSCOM_ENV_INT, 0},
    {"SIGSUSPEND", "0", "signal number that toggles suspend/resume of all "
     "connections (0 = none)", CFG(sigsuspend), PSCOM_ENV_INT, 0},
    {"SIGSEGV", "1", "print a backtrace on SIGSEGV, then leave the signal "
     "to the action installed before", CFG(sigsegv), PSCOM_ENV_INT, 0},
    {"READAHEAD", "350", "bytes read at the start of a message to find its "
     "header (at least 8)", CFG(readahead), PSCOM_ENV_INT, 0},
    {"SKIPBLOCKSIZE", "8192", "chunk size used to discard the tail of a "
     "truncated message", CFG(skipblocksize), PSCOM_ENV_UINT,
     PSCOM_ENV_HIDDEN},
    {"RETRY", "10", "connect() retries after refused, reset or timed-out attempts "
     "(exponential back-off from 1 ms, capped at 1 s)", CFG(retry), PSCOM_ENV_UINT, 0},
    {"SHUTDOWN_TIMEOUT", "0", "seconds without progress after which closing "
     "a socket gives up (0 = wait forever)", CFG(shutdown_timeout),
     PSCOM_ENV_UINT, 0},
    {"DEADLOCK_WARNINGS", "0", "a blocking wait that nothing can end (no "
     "listener, connection, handshake, timer or queued callback; never with "
     "pscom_init_thread): warn this many times one second apart, then "
     "_exit(112) (0 = exit at once, -1 or inf = warn once, never exit)",
     CFG(deadlock_warnings), PSCOM_ENV_UINT, PSCOM_ENV_NEG1},
    {"GUARD", "0", "keep a guard connection that detects dead peers",
     CFG(guard), PSCOM_ENV_UINT, 0},
    {"IPROBE_COUNT", "0", "pscom_iprobe() calls allowed before one forces "
     "progress", CFG(iprobe_count), PSCOM_ENV_UINT, 0},
    {"NETWORK", NULL, "space or comma separated networks, addresses or host "
     "names; the matching local interface gives the node id", CFG(network),
     PSCOM_ENV_STR, 0},
    {"INFO", NULL, "pslib info URL (used only with libpslib)", CFG(info),
     PSCOM_ENV_STR, PSCOM_ENV_HIDDEN},
    {"PLUGINDIR", "", "directory searched first for libpscom4<plugin>.so",
     CFG(plugindir), PSCOM_ENV_DIR, 0},
    {"DEBUG_TIMING", NULL, "timestamp in log lines: 1 or us (since start), "
     "date, wall, delta", CFG(debug_timing), PSCOM_ENV_STR, 0},
    {"DEBUG_VERSION", "0", "always print the version line", CFG(debug_version),
     PSCOM_ENV_INT, 0},
    {"DEBUG_STATS", "0", "log request and rendezvous counters at exit",
     CFG(debug_stats), PSCOM_ENV_INT, 0},
    {"DEBUG_BYE_MSG", "0", "always print the goodbye line at exit",
     CFG(debug_bye_msg), PSCOM_ENV_INT, 0},
    {"DEBUG_CONTYPE", "0", "always print the transport chosen for each "
     "connection", CFG(debug_contype), PSCOM_ENV_INT, 0},
    {"DEBUG_SUSPEND", "0", "trace connection suspend and resume",
     CFG(debug_suspend), PSCOM_ENV_INT, 0},
    {"DEBUG_PARAM", "0", "print parameters: 1 = those set in the environment, "
     "2 = all", CFG(debug_param), PSCOM_ENV_INT, 0},
    {"DEBUG_PRECON", "0", "trace the connection handshake", CFG(debug_precon),
     PSCOM_ENV_INT, 0},
    {"CUDA", "0", "pass GPU buffers to transports (CUDA builds only)",
     CFG(cuda), PSCOM_ENV_INT, 0},
    {NULL},
};

static const pscom_env_entry_t config_precon[] = {
    {"TYPE", "tcp", "transport of the connection handshake (only tcp)",
     CFG(precon_type), PSCOM_ENV_STR, 0},
    {NULL},
};

static const pscom_env_entry_t config_precon_tcp[] = {
    {"SO_SNDBUF", "0", "SO_SNDBUF of handshake sockets in bytes; 0 = kernel "
     "autotuning (our default; the established one is 32768)",
     CFG(precon_tcp_so_sndbuf), PSCOM_ENV_UINT, 0},
    {"SO_RCVBUF", "0", "SO_RCVBUF of handshake sockets in bytes; 0 = kernel "
     "autotuning (our default; the established one is 32768)",
     CFG(precon_tcp_so_rcvbuf), PSCOM_ENV_UINT, 0},
    {"NODELAY", "1", "set TCP_NODELAY on handshake sockets",
     CFG(precon_tcp_nodelay), PSCOM_ENV_INT, 0},
    {"RECONNECT_TIMEOUT", "2000", "interval in ms of the stalled-handshake "
     "check", CFG(precon_tcp_reconnect_timeout), PSCOM_ENV_UINT, 0},
    {"CONNECT_STALLED_MAX", "6", "intervals without any byte moved before a "
     "handshake reconnects", CFG(precon_tcp_connect_stalled_max),
     PSCOM_ENV_UINT, 0},
    {NULL},
};

static const pscom_env_entry_t config_rma[] = {
    {"MSG_SIZE_DIRECT_MEM_COPY", "64", "get-accumulate answers below this "
     "size are sent from a copy instead of in place",
     CFG(rma_msg_size_direct_mem_copy), PSCOM_ENV_UINT, 0},
    {NULL},
};
/* clang-format on */

static pscom_env_table_t config_tables[] = {
    {.name = "pscom", .prefix = "", .entries = config_general},
    {.name = "precon", .prefix = "PRECON_", .entries = config_precon},
    {.name = "precon.tcp", .prefix = "PRECON_TCP_", .entries = config_precon_tcp},
    {.name = "rma", .prefix = "RMA_", .entries = config_rma},
};

/* The variables that shape logging itself, read before any table so the
 * tables' own messages already honour them. Invalid values are reported
 * by the table parse that follows. */
static void config_init_logging(void)
{
    const char *debug = getenv("PSP_DEBUG");
    const char *param = getenv("PSP_DEBUG_PARAM");

    if (!debug || pscom_env_parse_value(PSCOM_ENV_INT, debug, &pscom_config.debug)) {
        pscom_config.debug = 1;
    }
    if (!param || pscom_env_parse_value(PSCOM_ENV_INT, param, &pscom_config.debug_param)) {
        pscom_config.debug_param = 0;
    }
    pscom_config.debug_out = getenv("PSP_DEBUG_OUT");
    pscom_config.debug_timing = getenv("PSP_DEBUG_TIMING");

    pscom_log_setup(pscom_config.debug_out, pscom_config.debug_timing);
    pscom_log_level = pscom_config.debug;
}

unsigned pscom_config_stall_window_ms(void)
{
    unsigned t            = pscom_config.precon_tcp_reconnect_timeout;
    unsigned n            = pscom_config.precon_tcp_connect_stalled_max;
    unsigned long long ms = (unsigned long long)t * (n ? n : 1);
    return ms > 3600000u ? 3600000u : (unsigned)ms;
}

void pscom_config_init(void)
{
    config_init_logging();
    for (size_t i = 0; i < sizeof(config_tables) / sizeof(config_tables[0]); i++) {
        pscom_env_table_register_and_parse(&config_tables[i]);
    }
    pscom_log_level = pscom_config.debug;
    if ((int)pscom_config.readahead < READAHEAD_MIN) { /* said, as values not taken as given are */
        plog_err("PSP_READAHEAD=%d: using %d (the least)", (int)pscom_config.readahead,
                 READAHEAD_MIN);
        pscom_config.readahead = READAHEAD_MIN;
    }
    pscom_env_clamp_sockbuf("PSP_PRECON_TCP_SO_SNDBUF", &pscom_config.precon_tcp_so_sndbuf);
    pscom_env_clamp_sockbuf("PSP_PRECON_TCP_SO_RCVBUF", &pscom_config.precon_tcp_so_rcvbuf);
    if (strcmp(pscom_config.precon_type, "tcp") != 0) { /* rrcomm or a typo */
        plog_err("PSP_PRECON_TYPE=%s: unknown or not available here (only tcp); using tcp",
                 pscom_config.precon_type);
        pscom_config.precon_type = (char *)"tcp";
    }
}
