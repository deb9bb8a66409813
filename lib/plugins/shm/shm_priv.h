/*
 * shm_priv.h - what the parts of the shared-memory transport share: its
 * settings, the state of a connection and the payloads of RNDV and ACK
 * packets. pscom_shm.c describes the transport.
 *
 *   pscom_shm.c  settings, handshake, life cycle, RMA, the plugin
 *   shm_send.c   writing queued messages into the peer's ring
 *   shm_recv.c   reading our ring, single-copy receives, the poller
 *   shm_adapt.c  large messages: ring or single copy, whichever is faster
 */
#ifndef SHM_PRIV_H
#define SHM_PRIV_H

#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#include "pscom_plugin.h"
#include "shm_cma.h"
#include "shm_ring.h"
#include "shm_segment.h"

#define SHM_RING_MIN   (16u << 10)
#define SHM_RING_MAX   (1u << 30)
#define SHM_CHUNK_MIN  1024u
#define SHM_READ_MAX   64  /* packets per connection and poll */
#define SHM_FEED_ONCE  256 /* smaller packets go to the core in one piece */
#define SHM_PKT_FIRST  4096u /* the first packet of a long message */
#define SHM_GAP_MIN    1024u /* packets with this much data get a gap */
#define SHM_RING_SMALL (128u << 10) /* rings beyond PSP_SHM_RING_BUDGET */
#define SHM_ADAPT_MAX  (16u << 20)  /* larger messages always take the single copy */
#define SHM_EXPLORE    32u          /* two in so many large messages take the other way */
#define SHM_EXPLORE_START 4u        /* ... and the first ones go two each way */

/* Gap between the head part and the data of a packet so that the data
 * sits in the ring at the same offset modulo 64 as at src. Copies between
 * addresses that differ by 1..31 modulo 64 are up to 20x slower on some
 * CPUs (memcpy's `rep movsb` and vector loops on AMD EPYC, measured 4 vs
 * 91 GB/s at 8 KiB); equal offsets copy at full speed on both sides when
 * the receive buffer is aligned like the send buffer. */
static inline uint32_t shm_data_gap(const char *src, size_t head_in_pkt)
{
    return (uint32_t)(((uintptr_t)src - SHM_PKT_HDR - head_in_pkt) & (SHM_CL - 1));
}

/* ---- settings (PSP_SHM_*, pscom_shm.c) ------------------------------------ */

typedef struct shm_config {
    unsigned rendezvous;
    unsigned cma;
    unsigned ring_size;
    unsigned ring_budget;
    unsigned chunk;
    unsigned copy_budget;
    unsigned copy_chunk;
    unsigned help;
    unsigned adapt;
} shm_config_t;

extern shm_config_t shm_config;

/* ---- a connection --------------------------------------------------------- */

/* payload of an RNDV packet after the head */
typedef struct shm_rndv {
    uint64_t src;      /* address of the data in the sender */
    uint64_t len;      /* data bytes (= the header's data_len) */
} shm_rndv_t;

#define SHM_ACK_OK   0u
#define SHM_ACK_PUSH 1u /* could not read: push the data from `done` on */

/* payload of an ACK packet */
typedef struct shm_ack {
    uint64_t done;     /* data bytes the receiver has */
    uint32_t status;   /* SHM_ACK_* */
    uint32_t reserved;
} shm_ack_t;
_Static_assert(sizeof(shm_rndv_t) == 16 && sizeof(shm_ack_t) == 16, "shm packet payloads");

typedef struct shm_con {
    /* receiving; with busy the cache line a progress pass reads */
    shm_ring_rx_t rx;
    int busy;          /* besides the ring: see shm_busy_update() */
    int in_read;
    int read_stopped;  /* the core stopped reading (EOF, protocol error) */
    int rr_active;     /* an RNDV message is being copied */
    uint64_t rr_src;   /* sender's address of the data */
    uint64_t rr_len;   /* data bytes */
    uint64_t rr_done;  /* ... handed to the core */
    int rr_helped;     /* the sender copied chunks of the last job */
    uint64_t rr_t0;    /* ... arrived at (ns), 0 = not timed */
    /* timing large messages (shm_large_by_ring): the ring message being timed */
    uint64_t rm_left;  /* its bytes still to come (head included) */
    uint64_t rm_len, rm_t0;
    uint64_t est_ring, est_cma; /* ns per MiB, 0 = no sample yet */
    int last_way;               /* of the last large message: 1 ring, 0 single copy, -1 none */
    uint32_t prefer_ring;       /* what we told the sender (SHM_PREFER_*) */
    uint64_t rx_ring_bytes;     /* our receive ring, counted in rings_reserved */

    /* sending: the oldest queued message may be partly in the ring */
    shm_ring_tx_t tx;
    uint32_t chunk;    /* largest packet payload */
    int in_write;
    int tx_blocked;    /* ring full, continue from the poller */
    int cur_active;    /* cur_* describe the oldest message, partly written */
    int cur_rndv;      /* ... announced by RNDV, waiting for the ACK */
    struct iovec cur_head, cur_data;
    size_t cur_off;    /* bytes of it that left (ring or single copy) */
    int ack_pending;   /* an ACK to send (at most one: see shm_send_ack) */
    shm_ack_t ack;
    size_t rndv_size;  /* single copy from this many data bytes on */
    unsigned large_sent; /* large messages so far (exploration) */

    pscom_con_t *con;
    int closed;
    int cma;           /* single copy in both directions (sender's view) */
    int cma_local;     /* we can read the peer's memory (receiver's view) */
    int help;          /* we may copy into the peer (sender helping) */
    pid_t peer_pid;
    unsigned slot;     /* index in shm_polled */
    pscom_ufd_t ufd;   /* the handshake's socket: peer death detector */

    shm_seg_t rx_seg;  /* ours: the peer writes into it */
    shm_seg_t tx_seg;  /* the peer's */
    uint64_t probe[2]; /* our nonce; the peer reads it with process_vm_readv */
} shm_con_t;

static inline shm_con_t *shm_con(pscom_con_t *con)
{
    return pscom_con_plugin_priv(con);
}

/* busy: a blocked writer, a copy, helping the peer */
static inline void shm_busy_update(shm_con_t *sc)
{
    /* all flags are 0 or 1: no branches */
    sc->busy = sc->tx_blocked | sc->ack_pending | sc->rr_active | (sc->cur_rndv & sc->help);
}

/* shm_send.c */
int shm_write(shm_con_t *sc); /* 1 if it wrote anything */
void shm_write_start(pscom_con_t *con);

/* shm_recv.c */
int shm_polled_add(shm_con_t *sc);
void shm_polled_del(shm_con_t *sc);
void shm_fd_handler(pscom_ufd_t *ufd, uint32_t revents);
void shm_fini(void);

/* shm_adapt.c */
uint64_t shm_now_ns(void);
int shm_large_by_ring(shm_con_t *sc, size_t dlen);
void shm_time_sample(shm_con_t *sc, int ring_way, uint64_t t0, uint64_t len);
int shm_time_wanted(const shm_con_t *sc, uint64_t dlen);
void shm_time_ring(shm_con_t *sc, const char *p, uint32_t head_len, uint32_t n);

#endif /* SHM_PRIV_H */
