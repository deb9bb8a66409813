/*
 * pscom_precon_tcp.h - the TCP bootstrap of the handshake: connecting
 * with retries and tuning handshake sockets (PSP_PRECON_TCP_*).
 */
#ifndef PSCOM_PRECON_TCP_H
#define PSCOM_PRECON_TCP_H

#include <stdint.h>

/* Apply PSP_PRECON_TCP_{NODELAY,SO_SNDBUF,SO_RCVBUF} to a socket. */
void pscom_tcp_tune_precon(int fd);

/* Connect to addr:port (IPv4, host byte order). Retries refused, reset
 * and timed-out attempts up to PSP_RETRY times with exponential back-off
 * (1 ms doubling, capped at 1 s); each attempt waits at most
 * RECONNECT_TIMEOUT * CONNECT_STALLED_MAX ms. Returns a connected
 * non-blocking fd, or -1 with errno set. Blocks. */
int pscom_tcp_connect(uint32_t addr, int port);

#endif /* PSCOM_PRECON_TCP_H */
