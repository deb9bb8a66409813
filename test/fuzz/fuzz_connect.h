/*
 * fuzz_connect.h - the fuzz target of fuzz_connect.c, shared with its ctest
 * side fuzz_connect_gen.c.
 */
#ifndef PSCOM_FUZZ_CONNECT_H
#define PSCOM_FUZZ_CONNECT_H

#include <stddef.h>
#include <stdint.h>

#include "fuzz_handshake.h" /* FUZZ_NODE_MARK */

/* connections that came up over tcp so far */
unsigned fuzz_connect_connected(void);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#endif /* PSCOM_FUZZ_CONNECT_H */
