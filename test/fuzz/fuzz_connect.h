/*
 * fuzz_connect.h - the fuzz target of fuzz_connect.c, shared with its ctest
 * side fuzz_connect_gen.c.
 */
#ifndef PSCOM_FUZZ_CONNECT_H
#define PSCOM_FUZZ_CONNECT_H

#include <stddef.h>
#include <stdint.h>

#include "fuzz_handshake.h" /* FUZZ_NODE_MARK */

/* byte 1 of an input, modulo 3: what connects */
#define FUZZ_CONNECT_PLAIN       0u /* a plain connect */
#define FUZZ_CONNECT_ONDEMAND    1u /* an on-demand connection connects */
#define FUZZ_CONNECT_BACKCONNECT 2u /* an on-demand connection asks the peer to connect back */

/* what the inputs so far did */
typedef struct fuzz_connect_counts {
    unsigned connected; /* the connection came up over tcp */
    unsigned waiting;   /* an on-demand connection still waited at the end */
} fuzz_connect_counts_t;
fuzz_connect_counts_t fuzz_connect_counts(void);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#endif /* PSCOM_FUZZ_CONNECT_H */
