/*
 * pscom_init.c - library initialisation, the global lock, clean-up at exit.
 */
#include <stdlib.h>
#include <unistd.h>

#include "pscom_dump.h"
#include "pscom_config.h"
#include "pscom_core.h"
#include "pscom_log.h"
#include "pscom_plugin_reg.h"
#include "pscom_progress.h"
#include "pscom_queues.h"
#include "pscom_req.h"
#include "pscom_signal.h"
#include "pscom_util.h"

pscom_global_t pscom = {
    .sockets          = PSCOM_LIST_INIT(pscom.sockets),
    .recvq_any_global = PSCOM_LIST_INIT(pscom.recvq_any_global),
    .io_doneq         = PSCOM_LIST_INIT(pscom.io_doneq),
    .requests         = PSCOM_LIST_INIT(pscom.requests),
    .lock             = PTHREAD_MUTEX_INITIALIZER,
};

static void cleanup(void)
{
    if (!pscom.initialized) return;
    /* a child forked after pscom_init() that ends with exit(): what it
     * inherited (sockets, segments, endpoints) is the parent's, which
     * goes on using it. Until 2026-11-29 the copy closed it all: the
     * parent's peers saw an EOF (itest_fork). */
    if (getpid() != pscom.init_pid) return;
    pscom_close_socket(NULL);
    pscom_lock();
    pscom_recv_fail_global();
    pscom_unlock();
    pscom_log_force(pscom_config.debug_bye_msg, PSCOM_LOG_INFO, "Byee.");
    if (pscom_config.debug_stats) { /* a log line: its prefix, PSP_DEBUG_OUT */
        char line[256];
        pscom_reqstat_str(line, sizeof(line));
        pscom_log_force(1, PSCOM_LOG_INFO, "%s", line);
    }
    /* Threaded: other threads may still be in pscom_wait. From here on the
     * lock stays with the exit, so that none of them runs a handler of a
     * transport being torn down (until 2026-11-29 they did: SIGSEGV in the
     * ucp plugin at exit in about half the runs). They wait for it until
     * the process ends. */
    pscom_lock();
    pscom_plugins_fini();
    pscom_signal_fini();
    pscom_progress_fini();
    pscom_log_cleanup();
}

static pscom_err_t version_check(int version)
{
    int cuda, major, minor;
    PSCOM_VERSION_SPLIT(version, cuda, major, minor)
    if (major != PSCOM_ABI_VERSION_MAJOR || minor > PSCOM_ABI_VERSION_MINOR || cuda)
        return PSCOM_ERR_UNSUPPORTED_VERSION;
    return PSCOM_SUCCESS;
}

PSCOM_API pscom_err_t pscom_init(int pscom_version)
{
    pscom_err_t res = version_check(pscom_version);
    pscom_lock();
    if (pscom.initialized) {
        res = pscom.init_result;
    } else if (res == PSCOM_SUCCESS) {
        pscom_config_init();
        pscom.initialized = 1;
        pscom.init_result = PSCOM_SUCCESS;
        pscom.init_pid    = getpid();
        if (pscom_progress_init() < 0) {
            pscom.init_result = res = PSCOM_ERR_STDERROR;
        } else {
            pscom_signal_init();
        }
        pscom_log_force(pscom_config.debug_version, PSCOM_LOG_INFO,
                        "# Version(pscom): " PSCOM_BUILD_VERSION " (ABI %d.%d)",
                        PSCOM_ABI_VERSION_MAJOR, PSCOM_ABI_VERSION_MINOR);
        atexit(cleanup);
    }
    pscom_unlock();
    return res;
}

PSCOM_API pscom_err_t pscom_init_thread(int pscom_version)
{
    pscom.threaded = 1;
    return pscom_init(pscom_version);
}

void pscom_ensure_init(void)
{
    if (!pscom.initialized) pscom_init(PSCOM_VERSION);
}

PSCOM_API int pscom_get_nodeid(void)
{
    pscom_ensure_init();
    return pscom_nodeid_compute(pscom_config.network);
}

PSCOM_API void pscom_set_debug(int level)
{
    pscom_config.debug = level;
    pscom_log_level    = level;
}

PSCOM_API int pscom_is_cuda_enabled(void)
{
    return 0;
}
