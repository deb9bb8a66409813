/*
 * fuzz_openib.h - the fuzz target of fuzz_openib.c, shared with its ctest
 * side fuzz_openib_gen.c.
 */
#ifndef PSCOM_FUZZ_OPENIB_H
#define PSCOM_FUZZ_OPENIB_H

#include <stddef.h>
#include <stdint.h>

/* input ops (op bits 0-2, see fuzz_openib.c) */
enum {
    FUZZ_OIB_WHOLE,    /* a packet flagged WHOLE: one pscom message */
    FUZZ_OIB_SLICE,    /* a packet of no flags: a slice of the byte stream */
    FUZZ_OIB_TOKENS,   /* a TOKENS packet: credits alone */
    FUZZ_OIB_RAW,      /* a packet of any bytes (its header too) and any length */
    FUZZ_OIB_SEND,     /* a real pscom message of the client */
    FUZZ_OIB_PROGRESS, /* both sides progress */
    FUZZ_OIB_RECV,     /* the server posts one more receive */
    FUZZ_OIB_CANCEL,   /* the server cancels its oldest pending receive */
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
#define FUZZ_OIB_MAX_RECV 8                   /* receives the server holds */

/* what the last input left, read before the close */
typedef struct {
    unsigned recvs_ok;       /* receives done without error */
    unsigned recvs_error;    /* ... with an error */
    size_t first_len;        /* data bytes of the first receive (its header) */
    unsigned char first[64]; /* ... its first bytes */
    size_t first_xlen;       /* ... its xheader length */
    unsigned injected;       /* packets the harness posted */
    unsigned credit_waits;   /* ... of them after waiting for the server's credits */
    unsigned cut;            /* RAW packets beyond a slot cut to one (the last send slot) */
    int server_stopped;      /* the server's side stopped reading or closed */
    int peer_died;           /* the close did not end both sides: the client died */
} fuzz_openib_result_t;

extern fuzz_openib_result_t fuzz_openib_last;

/* progress passes a graceful close of both sides gets */
#define FUZZ_OIB_CLOSE_PASSES 2000
/* ... and after the client's death, microseconds until both sides ended */
#define FUZZ_OIB_SETTLE_US 10000000

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#endif /* PSCOM_FUZZ_OPENIB_H */
