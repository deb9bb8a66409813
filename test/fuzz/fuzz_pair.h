/*
 * fuzz_pair.h - what the transport fuzz targets fuzz_ucp.c and
 * fuzz_openib.c share (fuzz_pair.c): a client and a server pscom socket of
 * this process connected over the one transport under test, the input's
 * set-up and its common ops (real messages of the client, progress,
 * receives posted and cancelled), the receive bookkeeping, and the end of
 * each input (both sides close, the client dies if they cannot, every
 * request ends). Each target brings only its transport's part
 * (fuzz_pair_target_t): the packets or messages it puts on the wire as
 * the client's plugin would. Their generators share fuzz_pair_gen.h.
 *
 * One input is two bytes of set-up and the ops:
 *
 *   byte 0  bits 0-1: receives the server posts first (0-3)
 *           bit 2:    the client sends a real message first
 *           bit 3:    the first receive is an any-source one
 *           bit 4:    progress after every fourth op only
 *           bits 5-7: the target's (fuzz_pair_target_t: setup, quiet)
 *   byte 1  receive buffers of 64 x byte bytes
 *   rest    ops; each is an op byte, then
 *             bits 0-2 (what) 0-3: the target's (its wire: the target's
 *               header), else
 *             SEND: a real message of the client: data length (2 bytes),
 *               xheader length (1 byte, mod 33), both of a fixed pattern
 *             PROGRESS: progress (1 byte: passes - 1)
 *             RECV: one more receive (1 byte: its buffer, 64 x byte)
 *             CANCEL: the server cancels its oldest pending receive
 */
#ifndef PSCOM_FUZZ_PAIR_H
#define PSCOM_FUZZ_PAIR_H

#include <stddef.h>
#include <stdint.h>

#include "fuzz_bytes.h"
#include "pscom.h"

/* the common input ops (op bits 0-2; 0-3 are the target's) */
enum {
    FUZZ_PAIR_SEND = 4, /* a real pscom message of the client */
    FUZZ_PAIR_PROGRESS, /* progress */
    FUZZ_PAIR_RECV,     /* the server posts one more receive */
    FUZZ_PAIR_CANCEL,   /* the server cancels its oldest pending receive */
};

#define FUZZ_PAIR_MAX_RECV  8  /* receives the server holds */
#define FUZZ_PAIR_MAX_SENDS 16 /* real messages of the client per input */
#define FUZZ_PAIR_XH_MAX    32 /* xheader bytes of a receive or a real message */

/* progress passes a graceful close of both sides gets */
#define FUZZ_PAIR_CLOSE_PASSES 2000
/* ... and after the client's death, microseconds until both sides ended
 * (the ucp plugin's bound for a peer that said goodbye is 0.1 s) */
#define FUZZ_PAIR_SETTLE_US 10000000

/* what the last input left, read before the close */
typedef struct {
    unsigned recvs_ok;       /* receives done without error */
    unsigned recvs_error;    /* ... with an error */
    size_t first_len;        /* data bytes of the first receive (its header) */
    unsigned char first[64]; /* ... its first bytes */
    size_t first_xlen;       /* ... its xheader length */
    int server_stopped;      /* the server's side stopped reading or closed */
    int peer_died;           /* the close did not end both sides: the client died */
} fuzz_pair_result_t;

extern fuzz_pair_result_t fuzz_pair_last;

/* one input's connection pair and requests */
typedef struct {
    pscom_connection_t *c, *s; /* the client's and the server's end */
    pscom_request_t *recvs[FUZZ_PAIR_MAX_RECV];
    char *bufs[FUZZ_PAIR_MAX_RECV];
    size_t lens[FUZZ_PAIR_MAX_RECV];
    unsigned nrecvs;
    pscom_request_t *sends[FUZZ_PAIR_MAX_SENDS];
    unsigned nsends;
} fuzz_pair_t;

/* the transport's part of a target */
typedef struct {
    const char *trace_env; /* set: each op on stderr (replaying a failing input) */
    pscom_con_type_t con_type;
    unsigned quiet; /* set-up bits: no progress between the ops at all */
    /* the environment of the transport, before pscom_init() */
    void (*env)(void);
    /* after the sockets opened (optional) */
    void (*opened)(void);
    /* Has the plugin started its side of c? */
    int (*started)(pscom_connection_t *c);
    /* the pair is connected: returns the client's end of the handshake
     * socket (the server's death detector) */
    int (*connected)(fuzz_pair_t *p);
    /* the target's set-up (byte 0), after the common one (optional) */
    void (*setup)(fuzz_pair_t *p, unsigned flags);
    /* an op of what 0-3: its fields follow in the input */
    void (*put)(fuzz_pair_t *p, fuzz_in_t *in, unsigned op);
    /* the target's own results; returns whether the server's side stopped */
    int (*snapshot)(const fuzz_pair_t *p);
    /* both sides ended (optional) */
    void (*closed)(const fuzz_pair_t *p);
    /* the target's own requests end, after the pair's (optional) */
    void (*drain)(fuzz_pair_t *p);
} fuzz_pair_target_t;

extern int fuzz_pair_trace; /* the target's trace_env is set */

/* the target's part: its LLVMFuzzerTestOneInput() is fuzz_pair.c's */
extern const fuzz_pair_target_t fuzz_pair_target;

/* progress passes (each a pscom_test_any()) */
void fuzz_pair_progress(unsigned passes);

/* a real message of len data bytes and xlen xheader bytes on c */
pscom_request_t *fuzz_pair_send_msg(pscom_connection_t *c, size_t len, size_t xlen);

/* the plugin's own state of connection c */
void *fuzz_pair_priv(pscom_connection_t *c);

/* microseconds of the monotonic clock */
uint64_t fuzz_pair_now_us(void);

#endif /* PSCOM_FUZZ_PAIR_H */
