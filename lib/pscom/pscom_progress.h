/*
 * pscom_progress.h - the progress engine: one epoll set for every fd
 * (listeners, handshakes, stream transports), a list of polled transports,
 * and blocking waits that spin for a bounded time before sleeping.
 */
#ifndef PSCOM_PROGRESS_H
#define PSCOM_PROGRESS_H

#include "pscom_list.h"
#include "pscom_types.h"

/* One-shot timer run by the progress engine (never from a signal or a
 * thread of its own): fn runs in a progress pass once due, with the lock
 * held, and may re-arm or stop any timer, its own included. A blocking
 * wait never sleeps past the earliest due timer. The timer must stay
 * valid while armed. */
typedef struct pscom_timer pscom_timer_t;
struct pscom_timer {
    pscom_list_t next;  /* armed timers, sorted by due_us */
    uint64_t due_us;    /* pscom_time_us() when due */
    void (*fn)(pscom_timer_t *timer);
    void *priv;
    int armed;
};

/* (Re-)arm: due in ms milliseconds (0: at the next pass). */
void pscom_timer_start(pscom_timer_t *timer, unsigned ms);
/* Disarm (no-op if not armed). */
void pscom_timer_stop(pscom_timer_t *timer);

int pscom_progress_init(void);
void pscom_progress_fini(void);

/* One pass: polled transports, then the fd set. timeout_ms: 0 = do not
 * block, >0 = may sleep that long (lock released while sleeping).
 * Returns non-zero if anything progressed. */
int pscom_progress(int timeout_ms);

/* Block (spin, then sleep in the kernel) until done(arg) is true. Runs
 * queued io_done callbacks while waiting. Called with the lock held. */
void pscom_wait_until(int (*done)(void *arg), void *arg);

/* Free ptr at the start of the next progress pass (objects an fd handler
 * further up the stack may still touch). */
void pscom_defer_free(void *ptr);

#endif /* PSCOM_PROGRESS_H */
