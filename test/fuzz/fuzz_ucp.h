/*
 * fuzz_ucp.h - the fuzz target of fuzz_ucp.c, shared with its ctest side
 * fuzz_ucp_gen.c (what all transport targets share: fuzz_pair.h).
 */
#ifndef PSCOM_FUZZ_UCP_H
#define PSCOM_FUZZ_UCP_H

#include <stddef.h>
#include <stdint.h>

/* input ops (op bits 0-2, see fuzz_ucp.c; 4-7: FUZZ_PAIR_SEND ... CANCEL of
 * fuzz_pair.h) */
enum {
    FUZZ_UCP_MSG,      /* a UCX message of tag kind MSG */
    FUZZ_UCP_HEAD,     /* ... of kind HEAD */
    FUZZ_UCP_DATA,     /* ... of kind DATA */
    FUZZ_UCP_KIND3,    /* ... of kind 3 (BYE: empty or one byte; longer is an error) */
};
#define FUZZ_UCP_HDR 8u /* MSG/HEAD op bit: a consistent USER header at the front */
/* op bits 4-6: the sequence number (0-3: the client's next one, 4: one
 * ahead, 5: the last one again, 6: any, 7: the client's next one, but
 * for another connection id: any, or the server's id of the last
 * generation) */
#define FUZZ_UCP_SEQ(m) ((unsigned)(m) << 4)
enum { FUZZ_UCP_SEQ_AHEAD = 4, FUZZ_UCP_SEQ_AGAIN, FUZZ_UCP_SEQ_ANY, FUZZ_UCP_SEQ_OTHER_ID };

#define FUZZ_UCP_MAX_LEN (70u * 1024) /* raw messages: at most this long */

/* what the last input left: fuzz_pair_last (fuzz_pair.h) */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#endif /* PSCOM_FUZZ_UCP_H */
