/*
 * pscom_signal.h - the library's signal handlers: PSP_SIGQUIT (a dump of
 * requests, sockets, connections, fds and statistics on SIGQUIT) and
 * PSP_SIGSEGV (a backtrace on SIGSEGV, then the action that was there
 * before). doc/architecture.md, *Signal handlers*.
 */
#ifndef PSCOM_SIGNAL_H
#define PSCOM_SIGNAL_H

/* Install what PSP_SIGQUIT and PSP_SIGSEGV ask for (pscom_init, after the
 * configuration and the progress engine; lock held). */
void pscom_signal_init(void);
/* The previous actions back, where ours are still installed (at exit,
 * before the progress engine goes). */
void pscom_signal_fini(void);

#endif /* PSCOM_SIGNAL_H */
