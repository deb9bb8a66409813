/*
 * fuzz_precon.h - the fuzz target of fuzz_precon.c, shared with its ctest
 * side fuzz_precon_gen.c.
 */
#ifndef PSCOM_FUZZ_PRECON_H
#define PSCOM_FUZZ_PRECON_H

#include <stddef.h>
#include <stdint.h>

#include "fuzz_handshake.h" /* FUZZ_NODE_MARK */

/* connections the server has accepted so far (its con_accept callback) */
unsigned fuzz_precon_accepted(void);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#endif /* PSCOM_FUZZ_PRECON_H */
