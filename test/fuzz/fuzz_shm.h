/*
 * fuzz_shm.h - the fuzz target of fuzz_shm.c, shared with its ctest side
 * fuzz_shm_gen.c.
 */
#ifndef PSCOM_FUZZ_SHM_H
#define PSCOM_FUZZ_SHM_H

#include <stddef.h>
#include <stdint.h>

/* input kinds of packets (op bits 0-2, see fuzz_shm.c) */
enum { FUZZ_SHM_DATA, FUZZ_SHM_RNDV, FUZZ_SHM_ACK, FUZZ_SHM_WRAP, FUZZ_SHM_HEADER, FUZZ_SHM_MSG };
#define FUZZ_SHM_RNDV_LOCAL  8u  /* RNDV op bit: the data is in fuzz_src */
#define FUZZ_SHM_RNDV_HEADER 16u /* RNDV op bit: a consistent USER header */
#define FUZZ_SHM_RNDV_LEN    32u /* RNDV op bit: with LOCAL, the length stays as given */

#define FUZZ_SHM_SRC_LEN 65536 /* fuzz_src[i] = i * 7 */
#define FUZZ_SHM_BIG     65536 /* the server's own large message (set-up bit 3) */

/* what the last input left, read before the close */
typedef struct {
    unsigned recvs_ok;     /* receives of the set-up done without error */
    size_t first_len;      /* data bytes of the first one */
    unsigned char first[64]; /* ... its first bytes */
    int server_stopped;    /* the server's side stopped reading or closed */
    int peer_died;         /* the close did not end both sides: the client died */
    uint64_t progress;     /* the core's progress counter over the packets */
} fuzz_shm_result_t;

/* progress passes a graceful close of both sides gets */
#define FUZZ_SHM_CLOSE_PASSES 100

extern fuzz_shm_result_t fuzz_shm_last;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#endif /* PSCOM_FUZZ_SHM_H */
