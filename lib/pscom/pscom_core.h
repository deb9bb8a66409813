/*
 * pscom_core.h - process-wide state: init, the global lock, the queue of
 * completed requests whose io_done is pending, and the socket list.
 */
#ifndef PSCOM_CORE_H
#define PSCOM_CORE_H

#include <pthread.h>
#include <sys/types.h>

#include "pscom_list.h"
#include "pscom_types.h"

typedef struct pscom_stats {
    uint64_t reqs_created;
    uint64_t reqs_freed;
    uint64_t gen_reqs;     /* unexpected messages */
    uint64_t probes;
    uint64_t iprobes_ok;
    uint64_t progress_passes;
    uint64_t sleeps;       /* blocking waits that slept in the kernel */
    uint64_t rndv_sends;   /* sends announced for rendezvous */
    uint64_t rndv_recvs;   /* announcements that a receive took */
} pscom_stats_t;

typedef struct pscom_global {
    int initialized;
    pscom_err_t init_result;
    pid_t init_pid;                /* the process that called pscom_init() */
    int threaded;
    pthread_mutex_t lock;

    pscom_list_t sockets;          /* pscom_sock_t.next, in creation order */
    pscom_list_t recvq_any_global; /* posted receives with socket == connection == NULL */
    pscom_list_t io_doneq;         /* completed requests awaiting io_done (FIFO) */
    pscom_list_t requests;         /* all requests, only with PSP_DEBUG_REQ */
    int intra_job_socket;          /* an INTRA_JOB socket exists */
    int plugins_initialized;

    uint64_t progress_counter;     /* bumped whenever anything progressed */
    uint64_t told_counter;         /* threaded: progress_counter when sleepers were last told */
    pscom_stats_t stats;
} pscom_global_t;

extern pscom_global_t pscom;

/* Lock for API entry points (no-op unless pscom_init_thread()). */
static inline void pscom_lock(void)
{
    if (pscom.threaded) pthread_mutex_lock(&pscom.lock);
}

/* Threaded: something completed since sleepers were last told (inside an
 * API call: a loopback send, a cancel, a close failing receives): threads
 * asleep in epoll_wait may be waiting for it, and no fd event wakes them
 * (pscom_progress.c; until 2026-11-29 they slept on for up to 1 s) */
void pscom_wake_sleepers_on_progress(void);

static inline void pscom_unlock_threaded(void)
{
    if (pscom.progress_counter != pscom.told_counter) {
        pscom.told_counter = pscom.progress_counter;
        pscom_wake_sleepers_on_progress();
    }
    pthread_mutex_unlock(&pscom.lock);
}

/* Run the queued io_done callbacks (lock held; they run without it).
 * pscom_req_run_io_done() leaves them to the calls below it when io_done
 * callbacks nest deeper than a few levels (pscom_req.c, IO_DONE_NEST_MAX);
 * pscom_req_run_io_done_all() runs them at any depth: for the calls that
 * make progress on purpose (waits, pscom_test_any), whose caller may wait
 * for one of them. */
void pscom_req_run_io_done(void);
void pscom_req_run_io_done_all(void);

/* Release the lock and run the queued io_done callbacks (without the lock). */
static inline void pscom_unlock(void)
{
    if (pscom_unlikely(!pscom_list_empty(&pscom.io_doneq))) pscom_req_run_io_done();
    if (pscom.threaded) pscom_unlock_threaded();
}

/* Release the lock without running the io_done queue, around a user
 * callback run from io_done (whose order against the queued requests
 * matters: RMA target callbacks, con_accept/con_error). */
static inline void pscom_unlock_keep_queue(void)
{
    if (pscom.threaded) pthread_mutex_unlock(&pscom.lock);
}

/* The same at the end of a call that makes progress on purpose. */
static inline void pscom_unlock_progress(void)
{
    if (pscom_unlikely(!pscom_list_empty(&pscom.io_doneq))) pscom_req_run_io_done_all();
    if (pscom.threaded) pscom_unlock_threaded();
}

/* Make sure pscom_init() ran (for API calls made before it, e.g. by tools). */
void pscom_ensure_init(void);

#endif /* PSCOM_CORE_H */
