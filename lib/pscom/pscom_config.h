/*
 * pscom_config.h - the core's configuration (general, precon and RMA tables
 * of PSP_* variables, see doc/configuration.md). Plugins keep their own
 * tables in their own directory.
 */
#ifndef PSCOM_CONFIG_H
#define PSCOM_CONFIG_H

#include "pscom_env.h"

typedef struct pscom_config {
    /* general ("PSP_" + name) */
    int debug;                  /* PSP_DEBUG, 1 */
    char *debug_out;            /* PSP_DEBUG_OUT, unset */
    int debug_req;              /* PSP_DEBUG_REQ, 0 */
    unsigned tcp_backlog;       /* PSP_TCP_BACKLOG, 262144 */
    int unexpected_receives;    /* PSP_UNEXPECTED_RECEIVES, 0 */
    int sched_yield;            /* PSP_SCHED_YIELD, 0 */
    unsigned wait_spin_us;      /* PSP_WAIT_SPIN_US, 1000 (ours): busy-poll time before sleeping */
    unsigned rendezvous;        /* PSP_RENDEZVOUS, inf */
    int sigquit;                /* PSP_SIGQUIT, 0 */
    int sigsuspend;             /* PSP_SIGSUSPEND, 0 */
    int sigsegv;                /* PSP_SIGSEGV, 1 */
    unsigned readahead;         /* PSP_READAHEAD, 350 (int parser), clamped to >= 8 */
    unsigned skipblocksize;     /* PSP_SKIPBLOCKSIZE, 8192 (hidden) */
    unsigned retry;             /* PSP_RETRY, 10 */
    unsigned shutdown_timeout;  /* PSP_SHUTDOWN_TIMEOUT, 0 = forever (seconds) */
    unsigned deadlock_warnings; /* PSP_DEADLOCK_WARNINGS, 0 */
    unsigned guard;             /* PSP_GUARD, 0 */
    unsigned iprobe_count;      /* PSP_IPROBE_COUNT, 0 */
    char *network;              /* PSP_NETWORK, unset */
    char *info;                 /* PSP_INFO, unset (hidden) */
    char *plugindir;            /* PSP_PLUGINDIR, "" (dir) */
    char *debug_timing;         /* PSP_DEBUG_TIMING, unset */
    int debug_version;          /* PSP_DEBUG_VERSION, 0 */
    int debug_stats;            /* PSP_DEBUG_STATS, 0 */
    int debug_bye_msg;          /* PSP_DEBUG_BYE_MSG, 0 */
    int debug_contype;          /* PSP_DEBUG_CONTYPE, 0 */
    int debug_suspend;          /* PSP_DEBUG_SUSPEND, 0 */
    int debug_param;            /* PSP_DEBUG_PARAM, 0 */
    int debug_precon;           /* PSP_DEBUG_PRECON, 0 */
    int cuda;                   /* PSP_CUDA, 0 */

    /* precon ("PSP_PRECON_" + name) */
    char *precon_type; /* PSP_PRECON_TYPE, "tcp" (only tcp exists) */

    /* precon over tcp ("PSP_PRECON_TCP_" + name) */
    unsigned precon_tcp_so_sndbuf;        /* SO_SNDBUF, 0 = kernel autotuning (ours; established: 32768) */
    unsigned precon_tcp_so_rcvbuf;        /* SO_RCVBUF, 0 = kernel autotuning (ours; established: 32768) */
    int precon_tcp_nodelay;               /* NODELAY, 1 */
    unsigned precon_tcp_reconnect_timeout;/* RECONNECT_TIMEOUT ms, 2000 */
    unsigned precon_tcp_connect_stalled_max; /* CONNECT_STALLED_MAX, 6 */

    /* RMA ("PSP_RMA_" + name) */
    unsigned rma_msg_size_direct_mem_copy; /* MSG_SIZE_DIRECT_MEM_COPY, 64 */
} pscom_config_t;

/* the one configuration of the process; valid after pscom_config_init() */
extern PSCOM_PLUGIN_API pscom_config_t pscom_config;

/* Register and parse the general, precon, precon-tcp and RMA tables
 * (PSP_DEBUG_OUT first, so later messages go there), apply PSP_DEBUG to
 * pscom_log_level and set up the log output. Called once by pscom_init(). */
void pscom_config_init(void);

/* How long a handshake (or a back-connect request) may wait for a silent
 * peer: PSP_PRECON_TCP_RECONNECT_TIMEOUT x ..._CONNECT_STALLED_MAX (a
 * stalled max of 0 counts as 1), at most an hour; 0 when the reconnect
 * timeout is 0, which turns the stall check off (no limit). */
unsigned pscom_config_stall_window_ms(void);

#endif /* PSCOM_CONFIG_H */
