/*
 * fuzz_pair_gen.h - what the ctest sides of the transport fuzz targets
 * (fuzz_ucp_gen.c, fuzz_openib_gen.c) share (fuzz_pair_gen.c): writing the
 * set-up and the common ops of an input (fuzz_pair.h), running it, the
 * checks that are the same for every transport, and the frame of a
 * generated input.
 */
#ifndef PSCOM_FUZZ_PAIR_GEN_H
#define PSCOM_FUZZ_PAIR_GEN_H

#include <stddef.h>

#include "fuzz_bytes.h"
#include "fuzz_pair.h"

/* the start of an input: set-up flags (byte 0), receive buffers of
 * size64 x 64 bytes */
void fuzz_pair_setup(gen_t *g, unsigned flags, unsigned size64);

/* a real message of the client: dlen data bytes, xlen of xheader */
void fuzz_pair_put_send(gen_t *g, unsigned dlen, unsigned xlen);

/* the input so far, through the target */
void fuzz_pair_run(gen_t *g);

/* byte i of the data of the client's real messages (fuzz_pair.c) */
unsigned char fuzz_pair_pat(unsigned i);

/* ---- checks (FUZZ_CHECK) ---------------------------------------------------------- */

/* a real message of the client reaches a receive of 6400 bytes whole */
void fuzz_pair_check_real(gen_t *g);

/* the last input stopped the server: its receive of the one real
 * message before done, the two other pending ones failed (else abort,
 * naming what of the target) */
void fuzz_pair_check_stopped(const char *target, const char *what);

/* The input in g, run runs times more, leaves at most slack more of
 * count() (things of the process: what) behind than once (else abort). */
void fuzz_pair_check_no_growth(gen_t *g, int runs, unsigned (*count)(void), unsigned slack,
                               const char *target, const char *what);

/* ---- generated inputs -------------------------------------------------------------- */

/* a common op of random fields: a real message, progress, a receive, a
 * cancel, or a few random bytes as an op */
void fuzz_pair_gen_send(gen_t *g);
void fuzz_pair_gen_progress(gen_t *g);
void fuzz_pair_gen_recv(gen_t *g);
void fuzz_pair_gen_cancel(gen_t *g);
void fuzz_pair_gen_junk(gen_t *g);

/* An input: set-up flags below setups, any buffer size, 1 to 12 ops of
 * gen_op, then damaged after the set-up. Returns its length. */
size_t fuzz_pair_generate(unsigned char *in, size_t room, unsigned setups,
                          void (*gen_op)(gen_t *g));

#endif /* PSCOM_FUZZ_PAIR_GEN_H */
