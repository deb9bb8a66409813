/*
 * fuzz_stream.h - the fuzz target of fuzz_stream.c and its fixture, shared
 * with its ctest side fuzz_stream_gen.c.
 */
#ifndef PSCOM_FUZZ_STREAM_H
#define PSCOM_FUZZ_STREAM_H

#include <stddef.h>
#include <stdint.h>

#include "pscom.h"
#include "pscom_con.h"

/* the registered RMA window, at this address where it can be mapped */
#define FUZZ_WIN_ADDR 0x500000000000ull
#define FUZZ_WIN_LEN  4096

/* the rendezvous send of an input (fuzz_stream.c, bit 7), and what in
 * the peer's bytes stands for the ids of it, of the RMA get, of the
 * registered window and of the first rendezvous receive */
#define FUZZ_RNDV_LEN  4096
#define FUZZ_SEND_MARK 0x7e57a11d5e11d1d5ull
#define FUZZ_GET_MARK  0x7e57a11d6e7d1d5ull
#define FUZZ_MEMH_MARK 0x7e57a11d3e3d1d5ull
#define FUZZ_RECV_MARK 0x7e57a11d4ec1d1d5ull

/* how bytes are handed to the connection */
typedef enum fuzz_mode {
    FUZZ_FEED    = 0, /* pscom_read_feed (stream transports with own buffers) */
    FUZZ_GET_BUF = 1, /* pscom_read_get_buf + pscom_read_done (zero-copy) */
    FUZZ_MSG     = 2, /* pscom_read_msg (message transports) */
    FUZZ_MIXED   = 3, /* each hand-over another of the three */
} fuzz_mode_t;

typedef struct fuzz_fixture {
    pscom_socket_t *socket;
    pscom_con_t *con; /* the connection the bytes go to, with a sink transport */
    pscom_memh_t memh;
    pscom_rkey_t rkey; /* for the RMA get, or NULL */
} fuzz_fixture_t;

/* the bytes the connection has sent (to the sink that takes them) */
extern size_t fuzz_sink_bytes;

void *fuzz_win(void);
void fuzz_open(fuzz_fixture_t *f);
void fuzz_close(fuzz_fixture_t *f);
int fuzz_hand_over(fuzz_fixture_t *f, fuzz_mode_t mode, const unsigned char *p, size_t len);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#endif /* PSCOM_FUZZ_STREAM_H */
