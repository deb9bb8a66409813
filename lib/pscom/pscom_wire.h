/*
 * pscom_wire.h - every on-the-wire format of the core.
 *
 * 1. The message header (protocol version PSCOM_WIRE_VERSION): 8 bytes,
 *    one little-endian 64-bit word
 *        bits  0..15  xheader_len
 *        bits 16..23  msg_type (pscom_msgtype_t)
 *        bits 24..63  data_len (40 bits)
 *    followed by xheader_len bytes of xheader and data_len bytes of data.
 *    On little-endian LP64 hosts this is exactly the memory layout of the
 *    public struct PSCOM_header_net (checked in test/unit/test_wire.c), so
 *    a header can be handed to the user in place.
 * 2. The pre-connection (precon) handshake messages: a 16-byte header
 *    {magic, type, version, payload length} and a bounded payload.
 * See doc/wire-protocol.md.
 */
#ifndef PSCOM_WIRE_H
#define PSCOM_WIRE_H

#include <endian.h>
#include <stdint.h>
#include <string.h>

#include "pscom.h"

#define PSCOM_WIRE_VERSION 2 /* 2: PAD messages */

/* Message types. The values are part of the protocol: never renumber. */
typedef enum pscom_msgtype {
    PSCOM_MSGTYPE_USER                     = 0,
    PSCOM_MSGTYPE_RMA_WRITE                = 1,
    PSCOM_MSGTYPE_RMA_READ                 = 2,
    PSCOM_MSGTYPE_RMA_READ_ANSWER          = 3,
    PSCOM_MSGTYPE_RENDEZVOUS_REQ           = 4,
    PSCOM_MSGTYPE_RENDEZVOUS_FIN           = 5,
    PSCOM_MSGTYPE_BCAST                    = 6,
    PSCOM_MSGTYPE_BARRIER                  = 7,
    PSCOM_MSGTYPE_EOF                      = 8,
    PSCOM_MSGTYPE_SUSPEND                  = 9,
    PSCOM_MSGTYPE_GW_ENVELOPE              = 10, /* reserved */
    PSCOM_MSGTYPE_RMA_PUT                  = 11,
    PSCOM_MSGTYPE_RMA_GET_REP              = 12,
    PSCOM_MSGTYPE_RMA_ACCUMULATE           = 13,
    PSCOM_MSGTYPE_RMA_GET_ACCUMULATE_REP   = 14,
    PSCOM_MSGTYPE_RMA_FETCH_AND_OP_REP     = 15,
    PSCOM_MSGTYPE_RMA_COMPARE_AND_SWAP_REP = 16,
    PSCOM_MSGTYPE_RMA_GET_REQ              = 17,
    PSCOM_MSGTYPE_RMA_GET_ACCUMULATE_REQ   = 18,
    PSCOM_MSGTYPE_RMA_FETCH_AND_OP_REQ     = 19,
    PSCOM_MSGTYPE_RMA_COMPARE_AND_SWAP_REQ = 20,
    PSCOM_MSGTYPE_RENDEZVOUS_CTS           = 21, /* ours: receiver is ready (push mode) */
    PSCOM_MSGTYPE_RENDEZVOUS_DATA          = 22, /* ours: rendezvous payload (push mode) */
    PSCOM_MSGTYPE_RMA_PUT_DONE             = 23, /* ours: put data already written directly */
    PSCOM_MSGTYPE_RMA_GET_DONE             = 24, /* ours: get data already read directly */
    PSCOM_MSGTYPE_PAD                      = 25, /* ours: filler, no xheader, < 64 data bytes */
    PSCOM_MSGTYPE_COUNT                    = 26,
} pscom_msgtype_t;

#define PSCOM_WIRE_HEADER_SIZE 8

_Static_assert(sizeof(pscom_header_net_t) == PSCOM_WIRE_HEADER_SIZE,
               "the message header is 8 bytes");

static inline void pscom_wire_header_encode(void *dst, uint16_t xheader_len,
                                            uint8_t msg_type, uint64_t data_len)
{
    uint64_t w = (uint64_t)xheader_len | ((uint64_t)msg_type << 16) |
                 ((data_len & PSCOM_DATA_LEN_MASK) << 24);
    w = htole64(w);
    memcpy(dst, &w, sizeof(w));
}

static inline void pscom_wire_header_decode(const void *src, uint16_t *xheader_len,
                                            uint8_t *msg_type, uint64_t *data_len)
{
    uint64_t w;
    memcpy(&w, src, sizeof(w));
    w            = le64toh(w);
    *xheader_len = (uint16_t)(w & 0xffff);
    *msg_type    = (uint8_t)((w >> 16) & 0xff);
    *data_len    = w >> 24;
}

/* ---- PAD ------------------------------------------------------------------
 * A PAD message (no xheader, data_len < PSCOM_WIRE_PAD_MAX bytes of
 * anything) carries nothing; the receiver drops it. Stream transports put
 * one in front of a large payload so that the payload sits at a chosen
 * offset modulo 64 in the byte stream (see pscom_write_get_iov).
 */
#define PSCOM_WIRE_PAD_MAX 64

/* ---- rendezvous (all fields little-endian) -------------------------------
 * RENDEZVOUS_REQ  xheader: the user's xheader     data: pscom_rndv_rts_t
 * RENDEZVOUS_CTS  xheader: pscom_rndv_cts_t       data: none
 * RENDEZVOUS_DATA xheader: uint64_t recv_id       data: cts.len bytes
 * RENDEZVOUS_FIN  xheader: pscom_rndv_fin_t       data: none (read mode)
 */
typedef struct pscom_rndv_rts {
    uint64_t sender_id; /* the sender's id of the send request */
    uint64_t data_len;  /* real message length (the user sees it as header.data_len) */
    uint64_t src_addr;  /* sender's buffer for direct reads, 0 = push mode only */
    uint64_t src_key;   /* the transport's key for reading it (rndv_export), 0 = none */
} pscom_rndv_rts_t;
_Static_assert(sizeof(pscom_rndv_rts_t) == 32, "rts");

typedef struct pscom_rndv_cts {
    uint64_t sender_id;
    uint64_t recv_id; /* to put into RENDEZVOUS_DATA */
    uint64_t len;     /* bytes wanted: min(message, receive buffer) */
} pscom_rndv_cts_t;
_Static_assert(sizeof(pscom_rndv_cts_t) == 24, "cts");

typedef struct pscom_rndv_fin {
    uint64_t sender_id;
    uint64_t status; /* 0 = ok */
} pscom_rndv_fin_t;
_Static_assert(sizeof(pscom_rndv_fin_t) == 16, "fin");

/* ---- RMA --------------------------------------------------------------------
 * The xheaders are the public pscom_xheader_rma_* structs followed by the
 * user part; their pointer-typed fields carry 64-bit values: target
 * addresses, the target's memory-region id (from the rkey) and the
 * origin's request id. Replies carry pscom_xheader_rma_get_answer_t with
 * {id, status} (status 0 = ok; the data then follows).
 */

/* ---- precon handshake ---------------------------------------------------- */

#define PSCOM_PRECON_MAGIC         0x31435350u /* "PSC1" little-endian */
#define PSCOM_PRECON_VERSION       1
#define PSCOM_PRECON_HEADER_SIZE   16
#define PSCOM_PRECON_PLUGIN_NAME   16   /* bytes of the plugin name in OFFER */
/* every payload length is checked against it: an OFFER's plugin name and
 * a blob of PSCOM_PRECON_BLOB_MAX (16 KiB) bytes */
#define PSCOM_PRECON_PAYLOAD_MAX   (16384 + PSCOM_PRECON_PLUGIN_NAME)
/* payloads up to this size are read into the handshake's own buffer,
 * larger ones into one allocated for the message */
#define PSCOM_PRECON_IN_INLINE     2048

typedef enum pscom_precon_type {
    PSCOM_PRECON_HELLO        = 1, /* both: who I am (pscom_precon_hello_t) */
    PSCOM_PRECON_OFFER        = 2, /* connect side: plugin name[16] + blob */
    PSCOM_PRECON_ACCEPT       = 3, /* accept side: blob */
    PSCOM_PRECON_DECLINE      = 4, /* accept side: try the next plugin */
    PSCOM_PRECON_CONFIRM      = 5, /* connect side: blob */
    PSCOM_PRECON_CONFIRM_OK   = 6, /* accept side: transport switched */
    PSCOM_PRECON_CONFIRM_FAIL = 7, /* accept side: try the next plugin; payload: empty,
                                      or u8 PSCOM_PRECON_FAIL_RETRY */
    PSCOM_PRECON_CANCEL       = 8, /* connect side: abandon the offered plugin */
    PSCOM_PRECON_NO_TRANSPORT = 9, /* connect side: no common transport, closing */
    PSCOM_PRECON_REJECT       = 10, /* either: refused, closing; payload: u32 reason (optional) */
    PSCOM_PRECON_BACKCONNECT_OK = 11, /* accept side: will connect back (on-demand) */
} pscom_precon_type_t;

/* REJECT reasons (u32 payload; an empty payload means VERSION) */
#define PSCOM_PRECON_REJECT_VERSION 1 /* protocol version mismatch: final */
#define PSCOM_PRECON_REJECT_NOMATCH 2 /* no waiting on-demand connection for the
                                         sender (yet): the sender may retry */
#define PSCOM_PRECON_REJECT_FAILED  3 /* the matching connection failed, or the
                                         names clash: final */

/* CONFIRM_FAIL reason (u8 payload, optional): an offer of the same plugin
 * again may succeed (once per connection) */
#define PSCOM_PRECON_FAIL_RETRY 1

/* HELLO flags */
#define PSCOM_PRECON_FLAG_ONDEMAND    0x1 /* connecting for an on-demand connection */
#define PSCOM_PRECON_FLAG_BACKCONNECT 0x2 /* only asking the peer to connect back */

typedef struct pscom_precon_header {
    uint32_t magic;   /* PSCOM_PRECON_MAGIC */
    uint16_t type;    /* pscom_precon_type_t */
    uint16_t version; /* PSCOM_PRECON_VERSION */
    uint32_t len;     /* payload bytes, <= PSCOM_PRECON_PAYLOAD_MAX */
    uint32_t reserved;
} pscom_precon_header_t;
_Static_assert(sizeof(pscom_precon_header_t) == PSCOM_PRECON_HEADER_SIZE, "precon header");

/* HELLO payload, protocol version 1. All fields little-endian. */
typedef struct pscom_precon_hello {
    uint32_t wire_version; /* PSCOM_WIRE_VERSION */
    uint32_t flags;        /* PSCOM_PRECON_FLAG_* */
    int32_t node_id;
    int32_t rank;
    int32_t portno;
    uint32_t attempt;      /* connect side: attempt number (1, 2, ...); 0 from the accept side */
    uint64_t con_id;
    char name[8];
} pscom_precon_hello_t;
_Static_assert(sizeof(pscom_precon_hello_t) == 40, "precon hello");

#endif /* PSCOM_WIRE_H */
