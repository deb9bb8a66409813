/*
 * fuzz_openib.h - the fuzz target of fuzz_openib.c, shared with its ctest
 * side fuzz_openib_gen.c (what all transport targets share: fuzz_pair.h).
 */
#ifndef PSCOM_FUZZ_OPENIB_H
#define PSCOM_FUZZ_OPENIB_H

#include <stddef.h>
#include <stdint.h>

/* input ops (op bits 0-2, see fuzz_openib.c; 4-7: FUZZ_PAIR_SEND ...
 * CANCEL of fuzz_pair.h) */
enum {
    FUZZ_OIB_WHOLE,    /* a packet flagged WHOLE: one pscom message */
    FUZZ_OIB_SLICE,    /* a packet of no flags: a slice of the byte stream */
    FUZZ_OIB_TOKENS,   /* a TOKENS packet: credits alone */
    FUZZ_OIB_RAW,      /* a packet of any bytes (its header too) and any length */
};
/* WHOLE/SLICE op bit: a consistent USER header at the front; TOKENS: a
 * payload (which no TOKENS packet may carry) */
#define FUZZ_OIB_HDR 8u
/* op bits 4-5 of WHOLE/SLICE/TOKENS: the tokens the packet returns */
#define FUZZ_OIB_TOK(m) ((unsigned)(m) << 4)
enum {
    FUZZ_OIB_TOK_OWED, /* what the client owes the server (as its plugin would) */
    FUZZ_OIB_TOK_NONE, /* 0 */
    FUZZ_OIB_TOK_MORE, /* one more than owed */
    FUZZ_OIB_TOK_ANY,  /* any (4 bytes) */
};
#define FUZZ_OIB_FLAGS 64u  /* op bit: the flags field of any value (2 bytes) */
#define FUZZ_OIB_MAGIC 128u /* op bit: the magic of any value (2 bytes) */
/* RAW op bits: the tokens field is what the client owes; the magic is right */
#define FUZZ_OIB_RAW_OWED  8u
#define FUZZ_OIB_RAW_MAGIC 16u

#define FUZZ_OIB_SLOT    16384u /* OPENIB_SLOT_SIZE */
#define FUZZ_OIB_RAW_MAX (FUZZ_OIB_SLOT + 64) /* RAW packets: at most this long */

/* what the last input left besides fuzz_pair_last (fuzz_pair.h), read
 * before the close */
typedef struct {
    unsigned injected;     /* packets the harness posted */
    unsigned credit_waits; /* ... of them after waiting for the server's credits */
    unsigned cut;          /* RAW packets beyond a slot cut to one (the last send slot) */
} fuzz_openib_result_t;

extern fuzz_openib_result_t fuzz_openib_last;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#endif /* PSCOM_FUZZ_OPENIB_H */
