/*
 * fuzz_ucp.h - the fuzz target of fuzz_ucp.c, shared with its ctest side
 * fuzz_ucp_gen.c.
 */
#ifndef PSCOM_FUZZ_UCP_H
#define PSCOM_FUZZ_UCP_H

#include <stddef.h>
#include <stdint.h>

/* input ops (op bits 0-2, see fuzz_ucp.c) */
enum {
    FUZZ_UCP_MSG,      /* a UCX message of tag kind MSG */
    FUZZ_UCP_HEAD,     /* ... of kind HEAD */
    FUZZ_UCP_DATA,     /* ... of kind DATA */
    FUZZ_UCP_KIND3,    /* ... of the kind no sender uses (3) */
    FUZZ_UCP_SEND,     /* a real pscom message of the client */
    FUZZ_UCP_PROGRESS, /* the server progresses */
    FUZZ_UCP_RECV,     /* the server posts one more receive */
    FUZZ_UCP_CANCEL,   /* the server cancels its oldest pending receive */
};
#define FUZZ_UCP_HDR 8u /* MSG/HEAD op bit: a consistent USER header at the front */
/* op bits 4-6: the sequence number (0-3: the client's next one, 4: one
 * ahead, 5: the last one again, 6: any, 7: the client's next one, but
 * for another connection id: any, or the server's id of the last
 * generation) */
#define FUZZ_UCP_SEQ(m) ((unsigned)(m) << 4)
enum { FUZZ_UCP_SEQ_AHEAD = 4, FUZZ_UCP_SEQ_AGAIN, FUZZ_UCP_SEQ_ANY, FUZZ_UCP_SEQ_OTHER_ID };

#define FUZZ_UCP_MAX_LEN  (70u * 1024) /* raw messages: at most this long */
#define FUZZ_UCP_MAX_RECV 8            /* receives the server holds */

/* what the last input left, read before the close */
typedef struct {
    unsigned recvs_ok;       /* receives done without error */
    unsigned recvs_error;    /* ... with an error */
    size_t first_len;        /* data bytes of the first receive (its header) */
    unsigned char first[64]; /* ... its first bytes */
    size_t first_xlen;       /* ... its xheader length */
    int server_stopped;      /* the server's side stopped reading or closed */
    int peer_died;           /* the close did not end both sides: the client died */
} fuzz_ucp_result_t;

extern fuzz_ucp_result_t fuzz_ucp_last;

/* progress passes a graceful close of both sides gets */
#define FUZZ_UCP_CLOSE_PASSES 2000
/* ... and after the client's death, microseconds until both sides ended
 * (the plugin's bound for a peer that said goodbye is 0.1 s) */
#define FUZZ_UCP_SETTLE_US 10000000

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#endif /* PSCOM_FUZZ_UCP_H */
