/*
 * fuzz_tcp.h - what the handshake fuzz targets (fuzz_precon.c,
 * fuzz_connect.c, fuzz_ondemand.c) share, fuzz_tcp.c: the plain TCP side
 * (clients, peers, listeners), the pscom side's set-up, and the waits
 * their checks end with.
 */
#ifndef PSCOM_FUZZ_TCP_H
#define PSCOM_FUZZ_TCP_H

#include <stddef.h>
#include <stdint.h>

#include "pscom.h"

/* progress passes a pscom side gets to read, answer or close before the
 * harness calls it hanging (abort) */
#define FUZZ_TCP_PASSES 200000

/* pscom initialised for a handshake target (built-in transports: tcp and
 * shm with its smallest ring; no log), and a socket of this name that
 * listens on a port of its own */
pscom_socket_t *fuzz_tcp_pscom_socket(const char *name);

/* a plain TCP socket listening on a port of 127.0.0.1 (*port) */
int fuzz_tcp_listen(int *port);

/* a plain TCP socket connected to port of 127.0.0.1 (the listen queue
 * takes it; a pscom side accepts during progress) */
int fuzz_tcp_connect(int port);

/* an on-demand connection of s to the peer name listening on port of
 * 127.0.0.1 */
pscom_connection_t *fuzz_tcp_ondemand(pscom_socket_t *s, int port, const char *name);

/* an 8-byte send posted on c (on demand: it starts the connect) */
pscom_request_t *fuzz_tcp_send_waiting(pscom_connection_t *c);

/* Does s hold no connection at all (not even one in its handshake)? */
int fuzz_tcp_no_connection(pscom_socket_t *s);

/* Progress until neither a nor b holds a connection: 1 if that came
 * within passes (each a pscom_test_any()), else 0. */
int fuzz_tcp_settled(pscom_socket_t *a, pscom_socket_t *b, unsigned passes);

/* Progress until s holds no connection at all, within FUZZ_TCP_PASSES
 * passes (else FUZZ_CHECK aborts). */
void fuzz_tcp_await_no_connection(pscom_socket_t *s);

/* Progress until r is done, within FUZZ_TCP_PASSES passes (else FUZZ_CHECK
 * aborts), then free it; r may be NULL. */
void fuzz_tcp_await_done(pscom_request_t *r);

/* a copy of the bytes (free it) with each FUZZ_NODE_MARK replaced by our
 * node id */
uint8_t *fuzz_node_marks_replaced(const uint8_t *data, size_t size);

/* Send the bytes to the pscom side on fd in pieces of (flags & 63) + 1
 * (63: all at once), progressing it after each (flags & 128: not after the
 * last one, so that it reads that only after the close); then close fd
 * (flags & 64, returns -1) or shut down writing (returns fd). */
int fuzz_tcp_play(int fd, const uint8_t *bytes, size_t size, unsigned flags);

/* Unless NULL: the close or shut-down of fuzz_tcp_play waits, progressing,
 * until this holds (at most FUZZ_TCP_PASSES passes, else abort): a client
 * that stays until the pscom side took its handshake. A valid handshake
 * whose CONFIRM comes together with the client's end is dropped (the
 * client gave up on it); the passes after each piece need not look at the
 * sockets (the busy passes look every few ms). For the ctest sides'
 * valid handshakes; off (NULL) for the fuzzed inputs. */
extern int (*fuzz_tcp_end_after)(void);

/* The same for n (at most FUZZ_TCP_MAX_PEERS) peers at once, a piece of
 * each in turn; fd[i] < 0: none. Sets fd[i] to -1 where it closed. */
#define FUZZ_TCP_MAX_PEERS 4
void fuzz_tcp_play_n(unsigned n, int fd[], const uint8_t *const bytes[], const size_t size[],
                     unsigned flags);

/* Read and drop what the pscom side sent. Returns 1 once it closed its side. */
int fuzz_tcp_closed(int fd);

#endif /* PSCOM_FUZZ_TCP_H */
