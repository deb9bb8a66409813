/*
 * fuzz_driver.h - the ctest driver shared by the fuzz targets of
 * test/fuzz (fuzz_driver.c): each target provides its libFuzzer entry
 * (LLVMFuzzerTestOneInput), a check of valid inputs and a generator of
 * plausible, damaged ones.
 */
#ifndef PSCOM_FUZZ_DRIVER_H
#define PSCOM_FUZZ_DRIVER_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

/* pseudo-random numbers of the run (FUZZ_SEED) */
uint64_t fuzz_rnd(void);
size_t fuzz_rnd_below(size_t n); /* 0..n-1 (0 if n is 0) */

/* Damage a generated input after its first keep bytes (its set-up): up to
 * three bit flips, random bytes or a cut, or none. Returns its new length. */
size_t fuzz_damage(unsigned char *in, size_t len, size_t keep);

#define FUZZ_CHECK(cond)                                                                    \
    do {                                                                                    \
        if (!(cond)) {                                                                      \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);       \
            abort();                                                                        \
        }                                                                                   \
    } while (0)

/* provided by the target */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
/* part 1: valid inputs do what they should (FUZZ_CHECK); returns what it
 * checked, for the log line */
const char *fuzz_target_selfcheck(void);
/* part 2: one generated input of at most room bytes; returns its length */
size_t fuzz_target_generate(unsigned char *in, size_t room);
/* part 2: how many inputs without FUZZ_RUNS */
extern const long fuzz_target_runs;

#endif /* PSCOM_FUZZ_DRIVER_H */
