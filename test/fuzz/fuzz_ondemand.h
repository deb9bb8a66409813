/*
 * fuzz_ondemand.h - the fuzz target of fuzz_ondemand.c, shared with its
 * ctest side fuzz_ondemand_gen.c.
 */
#ifndef PSCOM_FUZZ_ONDEMAND_H
#define PSCOM_FUZZ_ONDEMAND_H

#include <stddef.h>
#include <stdint.h>

#include "fuzz_handshake.h" /* FUZZ_NODE_MARK */

/* set-up bits of an input's second byte */
#define FUZZ_OD_SEND_CLI 1u /* a send waits on "fuzzcli" */
#define FUZZ_OD_SEND_ZZZ 2u /* a send waits on "fuzzzzz" */
#define FUZZ_OD_PROBE    4u /* afterwards a valid handshake connects a waiting "fuzzcli" */

/* what the inputs so far did */
typedef struct fuzz_od_counts {
    unsigned cli_connected;  /* "fuzzcli" ended up connected over tcp */
    unsigned by_probe;       /* ... by the valid handshake of FUZZ_OD_PROBE */
    unsigned zzz_connecting; /* the server was connecting "fuzzzzz" */
} fuzz_od_counts_t;
fuzz_od_counts_t fuzz_ondemand_counts(void);

/* "fuzzcli" of the input being run is connected over tcp (for
 * fuzz_tcp_end_after) */
int fuzz_ondemand_cli_tcp(void);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#endif /* PSCOM_FUZZ_ONDEMAND_H */
