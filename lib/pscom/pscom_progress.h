/*
 * pscom_progress.h - the progress engine: one epoll set for every fd
 * (listeners, handshakes, stream transports), a list of polled transports,
 * and blocking waits that spin for a bounded time before sleeping.
 */
#ifndef PSCOM_PROGRESS_H
#define PSCOM_PROGRESS_H

#include "pscom_list.h"
#include "pscom_plugin.h"
#include "pscom_types.h"

/* timers (pscom_timer_t): see the plugin SDK, pscom_plugin.h */

int pscom_progress_init(void);
void pscom_progress_fini(void);

/* One pass: polled transports, then the fd set. timeout_ms: 0 = do not
 * block, >0 = may sleep that long (lock released while sleeping).
 * Returns non-zero if anything progressed. */
int pscom_progress(int timeout_ms);

/* Block (spin, then sleep in the kernel) until done(arg) is true. Runs
 * queued io_done callbacks while waiting. Called with the lock held.
 * Without threads, a wait that nothing can end any more (no timer, no
 * queued callback, no listener, handshake or connection that can bring
 * anything) is a deadlock: it ends the process with exit code 112
 * (PSP_DEADLOCK_WARNINGS). */
void pscom_wait_until(int (*done)(void *arg), void *arg);
/* The same for a done(arg) that may turn true by the clock alone (a
 * deadline it checks itself): never taken for a deadlock. */
void pscom_wait_until_timed(int (*done)(void *arg), void *arg);

/* Free ptr at the start of the next progress pass (objects an fd handler
 * further up the stack may still touch). */
void pscom_defer_free(void *ptr);
/* ... and what was deferred so, from an API call outside a progress pass
 * (unless a thread sleeps in epoll_wait), but the last few: a program that
 * opens and closes sockets without progress in between does not pile them
 * up, and a use right after a close still meets the cleared magic */
void pscom_free_deferred_now(void);

#endif /* PSCOM_PROGRESS_H */
