/*
 * pscom_precon_tcp.h - the TCP bootstrap of the handshake: non-blocking
 * connects, what is worth retrying and how long to wait, tuning handshake
 * sockets (PSP_PRECON_TCP_*) and describing file-descriptor exhaustion.
 *
 * The retry loop itself lives in the handshake (pscom_precon.c), driven by
 * the progress engine's timers, so a connect never blocks the process.
 */
#ifndef PSCOM_PRECON_TCP_H
#define PSCOM_PRECON_TCP_H

#include <stddef.h>
#include <stdint.h>

/* Apply PSP_PRECON_TCP_{NODELAY,SO_SNDBUF,SO_RCVBUF} to a socket. */
void pscom_tcp_tune_precon(int fd);

/* Start a non-blocking connect to addr:port (IPv4, host byte order).
 * Returns the fd with *connected = 1 (done) or 0 (in progress: wait for
 * EPOLLOUT, then pscom_tcp_connect_finish()), or -1 with errno set. */
int pscom_tcp_connect_start(uint32_t addr, int port, int *connected);

/* The connect on fd signalled EPOLLOUT: 0 if it is established, else -1
 * with errno = the connect error. */
int pscom_tcp_connect_finish(int fd);

/* Is a connect or early handshake failure with this errno worth another
 * attempt (refused, reset, timed out, unreachable, ...)? */
int pscom_tcp_retryable(int err);

/* Delay in ms before attempt number `attempt` (2 = the first retry):
 * 1 ms doubling per retry, capped at 1 s, with up to 25 % random jitter so
 * that a storm of refused connects does not retry in lock-step. */
unsigned pscom_tcp_retry_delay_ms(unsigned attempt);

/* "per-process limit RLIMIT_NOFILE = 64 (ulimit -n)" for EMFILE, the
 * system-wide limit for ENFILE, "" otherwise. Returns buf. */
const char *pscom_fd_limit_str(int err, char *buf, size_t len);

/* Is err an fd-exhaustion error (EMFILE, ENFILE)? */
static inline int pscom_fd_exhausted(int err)
{
    return err == 24 /* EMFILE */ || err == 23 /* ENFILE */;
}

#endif /* PSCOM_PRECON_TCP_H */
