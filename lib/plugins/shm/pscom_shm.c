/*
 * pscom_shm.c - the shared-memory transport, for processes of one node.
 *
 * Data path
 *   Each direction has a single-producer/single-consumer packet ring in
 *   the receiver's segment (shm_ring.h, shm_segment.h). A message (8-byte
 *   header, xheader, data) is copied into one packet, each byte once; a
 *   longer message is pipelined through the ring in packets growing from
 *   4 KiB to PSP_SHM_CHUNK, never buffered whole. The receiver polls (no
 *   system call, no lock; one poller for all connections) and hands the
 *   bytes to the core, which puts the data straight into the matched
 *   receive buffer.
 *
 *   Single copy: a message with at least PSP_SHM_RENDEZVOUS data bytes goes
 *   as an RNDV packet: its head plus {address, length} of the data in the
 *   sender's buffer. The receiver hands the head to the core, asks it where
 *   the data goes (the matched receive buffer, or the buffer of an
 *   unexpected message) and copies straight from the sender's buffer into
 *   it with cross-memory attach (process_vm_readv, shm_cma.h), while the
 *   sender, waiting anyway, copies chunks of the same message into that
 *   buffer from its side (process_vm_writev; a copy job in the receiver's
 *   segment hands out the chunks). Then the receiver answers with an ACK
 *   packet; only then is the send complete. Nothing else is sent on the
 *   connection meanwhile, so sends queued behind it stay cancellable. If a
 *   read fails (other than for a dead peer) the receiver answers PUSH
 *   {bytes done} and the sender sends the rest through the ring. Where
 *   cross-memory attach is refused (different users, ptrace policy, pid
 *   namespaces; found out once per connection in the handshake) or
 *   PSP_SHM_CMA=0, every message takes the pipelined ring.
 *
 *   This is the plugin's rendezvous; the core's (RTS, matching, then the
 *   data; unexpected messages are not buffered) is independent and chosen
 *   by PSP_RENDEZVOUS (default inf) as for every transport. When it is on,
 *   the data message it sends after the match takes the single copy too.
 *
 * Handshake (over the TCP pre-connection, never blocking)
 *   connect side  offer:   create my receive segment; blob {pid, nonce,
 *                          probe address, ring size, segment name}
 *   accept side   accept:  map the peer's segment, check it and unlink it;
 *                          probe cross-memory attach (read the nonce at the
 *                          probe address); create my segment; reply blob
 *   connect side  connect: map, check, unlink; probe; confirm {probe ok}
 *   accept side   confirm: single-copy iff both probes succeeded
 *   Same-node detection: equal node ids, and the segment must really be
 *   attachable (and carry the announced nonce), else tcp is used.
 *
 * Failure detection
 *   The handshake's TCP socket is kept open, idle, in the epoll set. When
 *   the peer process ends, the kernel closes it and we see EOF: we drain
 *   the ring (a peer that closed properly left its EOF message there) and,
 *   unless that ended the connection, report a transport error, which
 *   fails every pending request and calls con_error. Costs nothing per
 *   message.
 */
#define _GNU_SOURCE
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

/* ---- configuration ------------------------------------------------------- */

static struct {
    unsigned rendezvous;
    unsigned cma;
    unsigned ring_size;
    unsigned ring_budget;
    unsigned chunk;
    unsigned copy_budget;
    unsigned copy_chunk;
    unsigned help;
    unsigned adapt;
} shm_config;

static const pscom_env_entry_t shm_env[] = {
    {"RENDEZVOUS", "32768",
     "shm messages of at least this many data bytes are copied once, straight from "
     "the sender's buffer into the receive buffer (cross-memory attach; inf: never)",
     &shm_config.rendezvous, PSCOM_ENV_UINT, PSCOM_ENV_HAS_PARENT},
    {"CMA", "1",
     "use cross-memory attach (process_vm_readv) for large messages; 0: always the "
     "pipelined copy through the ring",
     &shm_config.cma, PSCOM_ENV_UINT, 0},
    {"RING_SIZE", "2097152",
     "bytes of each receive ring (power of two, 16 KiB .. 1 GiB) while PSP_SHM_RING_BUDGET "
     "lasts; a ring holds one per connection and direction",
     &shm_config.ring_size, PSCOM_ENV_UINT, 0},
    {"RING_BUDGET", "16777216",
     "bytes of receive rings a process keeps at most; connections beyond it get rings of "
     "128 KiB (or PSP_SHM_RING_SIZE if smaller)",
     &shm_config.ring_budget, PSCOM_ENV_UINT, 0},
    {"CHUNK", "65536",
     "largest packet in the ring in bytes; larger messages are pipelined in "
     "packets of this size (at most a quarter of the ring)",
     &shm_config.chunk, PSCOM_ENV_UINT, 0},
    {"COPY_BUDGET", "524288",
     "single copy: bytes copied per connection and progress pass, twice that while "
     "the sender helps (responsiveness of pscom_test calls during a large transfer)",
     &shm_config.copy_budget, PSCOM_ENV_UINT, PSCOM_ENV_HIDDEN},
    {"COPY_CHUNK", "0",
     "single copy: bytes per chunk shared between receiver and sender (0: auto)",
     &shm_config.copy_chunk, PSCOM_ENV_UINT, PSCOM_ENV_HIDDEN},
    {"HELP", "1",
     "single copy: the waiting sender copies chunks into the receiver too",
     &shm_config.help, PSCOM_ENV_UINT, PSCOM_ENV_HIDDEN},
    {"ADAPT", "1",
     "messages of at least PSP_SHM_RENDEZVOUS bytes: 1 take the ring or single copy, "
     "whichever the receiver measured faster; 0 always single copy",
     &shm_config.adapt, PSCOM_ENV_UINT, PSCOM_ENV_HIDDEN},
    {NULL},
};

static pscom_env_table_t shm_env_table = {.name = "shm", .prefix = "SHM_", .entries = shm_env};

static uint64_t ring_size_round(uint64_t v)
{
    uint64_t r = SHM_RING_MIN;
    while (r < v && r < SHM_RING_MAX) r <<= 1;
    return r;
}

static int ring_size_valid(uint64_t v)
{
    return v >= SHM_RING_MIN && v <= SHM_RING_MAX && !(v & (v - 1));
}

static int shm_init(void)
{
    pscom_env_table_register_and_parse(&shm_env_table);
    uint64_t r = ring_size_round(shm_config.ring_size);
    /* settings not taken as given are said at the default log level */
    if (r != shm_config.ring_size) {
        plog_err("PSP_SHM_RING_SIZE=%u: using %llu (a power of two in 16 KiB .. 1 GiB)",
                 shm_config.ring_size, (unsigned long long)r);
        shm_config.ring_size = (unsigned)r;
    }
    if (shm_config.chunk < SHM_CHUNK_MIN) {
        plog_err("PSP_SHM_CHUNK=%u: using %u (the least)", shm_config.chunk, SHM_CHUNK_MIN);
        shm_config.chunk = SHM_CHUNK_MIN;
    }
    if (shm_config.copy_budget < 4096) {
        plog_err("PSP_SHM_COPY_BUDGET=%u: using 4096 (the least)", shm_config.copy_budget);
        shm_config.copy_budget = 4096;
    }
    return 0;
}

/* ---- per-connection state ---------------------------------------------- */

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
    char *rr_prev;     /* the previous piece's buffer */
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

static shm_con_t *shm_con(pscom_con_t *con)
{
    return pscom_con_plugin_priv(con);
}

/* ---- handshake blobs ----------------------------------------------------- */

#define SHM_BLOB_MAGIC   0x62687370u /* "pshb" */
#define SHM_BLOB_VERSION 1u
#define SHM_BLOB_CMA     0x1u /* offer: willing; reply/confirm: my probe of you worked */

/* Same node, same architecture: native byte order, fixed-width fields. */
typedef struct shm_blob {
    uint32_t magic;
    uint16_t version;
    uint16_t flags;
    uint32_t pid;
    uint32_t ring_size;   /* of the segment below */
    uint64_t nonce[2];    /* in the segment header and at probe_addr */
    uint64_t probe_addr;  /* where the sender keeps its nonce */
    char name[SHM_SEG_NAME_MAX];
} shm_blob_t;
_Static_assert(sizeof(shm_blob_t) == 88, "shm handshake blob");
_Static_assert(sizeof(shm_blob_t) <= PSCOM_PRECON_BLOB_MAX, "shm handshake blob fits");

static int same_node(pscom_con_t *con, const pscom_precon_peer_t *peer)
{
    return peer->node_id == pscom_con_pub(con)->socket->local_con_info.node_id;
}

static uint64_t rings_reserved; /* bytes of all our live receive rings */

/* Size of the next receive ring: PSP_SHM_RING_SIZE while the budget lasts
 * (a large ring moves large messages at up to 3x the speed of a small
 * one: the lines it writes are no longer in the reader's cache). */
static uint64_t rx_ring_size(void)
{
    static int told;
    uint64_t size = shm_config.ring_size;
    if (rings_reserved + size <= shm_config.ring_budget || size <= SHM_RING_SMALL) return size;
    if (!told++)
        plog_info("shm: PSP_SHM_RING_BUDGET=%u bytes of receive rings used up; further "
                  "connections get rings of %u bytes",
                  shm_config.ring_budget, SHM_RING_SMALL);
    return SHM_RING_SMALL;
}

static void rx_seg_release(shm_con_t *sc)
{
    shm_seg_release(&sc->rx_seg);
    rings_reserved -= sc->rx_ring_bytes;
    sc->rx_ring_bytes = 0;
}

/* Create our receive segment and describe it in blob. */
static int local_setup(pscom_con_t *con, shm_con_t *sc, void *blob, size_t *len, uint16_t flags)
{
    static int warned;
    uint64_t ring_size = rx_ring_size();
    shm_random(sc->probe, sizeof(sc->probe));
    int err = shm_seg_create(&sc->rx_seg, ring_size, sc->probe);
    if (err < 0) {
        if (!warned++) {
            plog_warn("shm: cannot create a shared-memory segment (%s); using other transports",
                      strerror(-err));
        } else {
            plog_dbg("%s: shm segment: %s", pscom_con_name(con), strerror(-err));
        }
        return -1;
    }
    sc->rx_ring_bytes = ring_size;
    rings_reserved += ring_size;
    shm_blob_t b = {
        .magic      = SHM_BLOB_MAGIC,
        .version    = SHM_BLOB_VERSION,
        .flags      = flags,
        .pid        = (uint32_t)getpid(),
        .ring_size  = (uint32_t)ring_size,
        .nonce      = {sc->probe[0], sc->probe[1]},
        .probe_addr = (uint64_t)(uintptr_t)sc->probe,
    };
    snprintf(b.name, sizeof(b.name), "%s", sc->rx_seg.name);
    memcpy(blob, &b, sizeof(b));
    *len = sizeof(b);
    return 0;
}

static int blob_parse(pscom_con_t *con, const void *blob, size_t len, shm_blob_t *b,
                      int need_segment)
{
    if (len != sizeof(*b)) goto bad;
    memcpy(b, blob, sizeof(*b));
    if (b->magic != SHM_BLOB_MAGIC || b->version != SHM_BLOB_VERSION) goto bad;
    if (!need_segment) return 0;
    if (!b->pid || !ring_size_valid(b->ring_size) ||
        !shm_seg_name_valid(b->name, sizeof(b->name)))
        goto bad;
    return 0;
bad:
    plog_dbg("%s: shm: malformed handshake blob (%zu bytes)", pscom_con_name(con), len);
    return -1;
}

/* Map the peer's segment described by b, unlink it, probe cross-memory
 * attach if want_cma. */
static int peer_attach(pscom_con_t *con, shm_con_t *sc, const shm_blob_t *b, int want_cma)
{
    int err = shm_seg_attach(&sc->tx_seg, b->name, b->ring_size, b->nonce, b->pid);
    if (err < 0) {
        plog_dbg("%s: shm: cannot attach %s: %s", pscom_con_name(con), b->name, strerror(-err));
        return -1;
    }
    shm_seg_unlink(&sc->tx_seg); /* both sides have it mapped now */
    sc->peer_pid  = (pid_t)b->pid;
    sc->cma_local = want_cma && shm_cma_probe(sc->peer_pid, b->probe_addr, b->nonce,
                                              sizeof(b->nonce));
    plog_dbg("%s: shm: attached %s, cross-memory attach %s", pscom_con_name(con), b->name,
             sc->cma_local ? "works" : "not used");
    return 0;
}

static void shm_con_abort(pscom_con_t *con)
{
    shm_con_t *sc = shm_con(con);
    shm_seg_release(&sc->tx_seg);
    rx_seg_release(sc);
}

static int shm_con_offer(pscom_con_t *con, const pscom_precon_peer_t *peer, void *blob,
                         size_t *len)
{
    shm_con_t *sc = shm_con(con);
    if (!same_node(con, peer)) return -1;
    return local_setup(con, sc, blob, len, shm_config.cma ? SHM_BLOB_CMA : 0);
}

static int shm_con_accept(pscom_con_t *con, const pscom_precon_peer_t *peer, const void *blob,
                          size_t len, void *reply, size_t *reply_len)
{
    shm_con_t *sc = shm_con(con);
    shm_blob_t b;
    if (!same_node(con, peer) || blob_parse(con, blob, len, &b, 1) < 0) return -1;
    if (peer_attach(con, sc, &b, shm_config.cma && (b.flags & SHM_BLOB_CMA)) < 0) return -1;
    if (local_setup(con, sc, reply, reply_len, sc->cma_local ? SHM_BLOB_CMA : 0) < 0) {
        shm_seg_release(&sc->tx_seg);
        return -1;
    }
    return 0;
}

static int shm_con_connect(pscom_con_t *con, const void *reply, size_t len, void *confirm,
                           size_t *confirm_len)
{
    shm_con_t *sc = shm_con(con);
    shm_blob_t b;
    if (blob_parse(con, reply, len, &b, 1) < 0) return -1;
    /* the peer accepted: it has mapped and unlinked our segment */
    shm_seg_unlink(&sc->rx_seg);
    if (peer_attach(con, sc, &b, shm_config.cma && (b.flags & SHM_BLOB_CMA)) < 0) return -1;
    sc->cma = sc->cma_local; /* implies the peer's probe of us worked */
    shm_blob_t c = {
        .magic   = SHM_BLOB_MAGIC,
        .version = SHM_BLOB_VERSION,
        .flags   = sc->cma_local ? SHM_BLOB_CMA : 0,
    };
    memcpy(confirm, &c, sizeof(c));
    *confirm_len = sizeof(c);
    return 0;
}

static int shm_con_confirm(pscom_con_t *con, const void *confirm, size_t len)
{
    shm_con_t *sc = shm_con(con);
    shm_blob_t c;
    if (blob_parse(con, confirm, len, &c, 0) < 0) return -1;
    shm_seg_unlink(&sc->rx_seg); /* the peer unlinked it already */
    sc->cma = sc->cma_local && (c.flags & SHM_BLOB_CMA);
    return 0;
}

/* ---- polling: one poller for all shm connections --------------------------- */

/* Every shm connection is in one table; a progress pass looks at the first
 * cache line of each (its receive ring position and the busy flag) and at
 * the stamp of its next packet, and does more only where a packet is there
 * or something else needs attention. */
static struct {
    shm_con_t **con;
    unsigned n, cap;
    pscom_poller_t poller;
} shm_polled;

/* busy: a blocked writer, a copy, helping the peer */
static void shm_busy_update(shm_con_t *sc)
{
    /* all flags are 0 or 1: no branches */
    sc->busy = sc->tx_blocked | sc->ack_pending | sc->rr_active | (sc->cur_rndv & sc->help);
}

/* ---- sending ------------------------------------------------------------- */

static int shm_send_ack(shm_con_t *sc)
{
    shm_pkt_t *pkt = shm_ring_reserve(&sc->tx, sizeof(shm_ack_t));
    if (!pkt) return 0;
    memcpy(shm_pkt_payload(pkt), &sc->ack, sizeof(shm_ack_t));
    shm_ring_publish(&sc->tx, pkt, sizeof(shm_ack_t), SHM_PKT_ACK, 0, 0);
    sc->ack_pending = 0;
    return 1;
}

/* Announce the oldest message for single copy. 0: ring full. */
static int shm_send_rndv(shm_con_t *sc)
{
    size_t hlen    = sc->cur_head.iov_len;
    shm_pkt_t *pkt = shm_ring_reserve(&sc->tx, (uint32_t)(hlen + sizeof(shm_rndv_t)));
    if (!pkt) return 0;
    char *dst      = shm_pkt_payload(pkt);
    shm_rndv_t rd  = {.src = (uint64_t)(uintptr_t)sc->cur_data.iov_base,
                      .len = sc->cur_data.iov_len};
    memcpy(dst, sc->cur_head.iov_base, hlen);
    memcpy(dst + hlen, &rd, sizeof(rd));
    shm_ring_publish(&sc->tx, pkt, (uint32_t)(hlen + sizeof(rd)), SHM_PKT_RNDV, (uint32_t)hlen, 0);
    sc->cur_rndv = 1;
    sc->cur_off  = hlen;
    return 1;
}

/* ---- large messages: ring or single copy ------------------------------------ */

/*
 * A message of at least PSP_SHM_RENDEZVOUS data bytes can take the ring
 * (two copies, pipelined, both CPUs copying) or the single copy. Which one
 * is faster depends on where the two CPUs sit: measured on 2 vCPUs whose
 * cache-line ping-pong flips between 0.05 and 0.2 us as the host moves
 * them, 1 MiB through a 1-2 MiB ring 28-30 vs 17-20 GB/s by single copy in
 * the fast state, 2.2-2.4 vs 6.5 GB/s in the slow one. So the receiver
 * times the large messages that arrive either way (shm_time_*), keeps an
 * average per way, and tells the sender its choice in its segment header;
 * the first four large messages go two each way, and then two in every
 * SHM_EXPLORE take the other way, in every 4 * SHM_EXPLORE while one way is
 * at least 1.25x faster, in every 16 * SHM_EXPLORE while it is 2x faster
 * (exploring costs), so that both averages follow a change within
 * milliseconds. The receiver drops the first sample
 * after a change of way: it pays for caches the other way has cooled
 * (a ring message after 31 single copies measured slower than single
 * copies, which kept large messages on the slower way). Nothing of this
 * touches small messages.
 */
/* prefer_ring: bit 0 the ring is faster; bits 8.. the exploration period */
#define SHM_PREFER_RING         1u
#define SHM_PREFER_PERIOD_SHIFT 8
static uint64_t shm_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Sender: this large message through the ring? */
static int shm_large_by_ring(shm_con_t *sc, size_t dlen)
{
    if (!shm_config.adapt || dlen > SHM_ADAPT_MAX) return 0;
    shm_seg_hdr_t *peer = shm_seg_hdr(&sc->tx_seg);
    uint32_t prefer = atomic_load_explicit(&peer->prefer_ring, memory_order_relaxed);
    int ring        = (prefer & SHM_PREFER_RING) != 0;
    unsigned n = ++sc->large_sent;
    if (n <= SHM_EXPLORE_START) return n <= SHM_EXPLORE_START / 2; /* the ring first */
    unsigned period = prefer >> SHM_PREFER_PERIOD_SHIFT;
    if (n % (period ? period : SHM_EXPLORE) < 2) ring = !ring;
    return ring;
}

/* Receiver: a large message of len data bytes took the time since t0 one
 * way (ring: 1, single copy: 0). */
static void shm_time_sample(shm_con_t *sc, int ring_way, uint64_t t0, uint64_t len)
{
    uint64_t per_mib = ((shm_now_ns() - t0) << 20) / len;
    if (ring_way != sc->last_way) { /* caches cooled by the other way */
        sc->last_way = ring_way;
        return;
    }
    uint64_t *est = ring_way ? &sc->est_ring : &sc->est_cma;
    /* one stalled message (an interrupt, the host) must not flip the
     * choice: a sample counts as at most twice the average; a real change
     * still gets through within a few messages */
    if (*est && per_mib > 2 * *est) per_mib = 2 * *est;
    *est = *est ? (*est * 3 + per_mib) / 4 : per_mib;
    if (!sc->est_ring || !sc->est_cma) return;
    uint64_t fast = sc->est_ring < sc->est_cma ? sc->est_ring : sc->est_cma;
    uint64_t slow = sc->est_ring < sc->est_cma ? sc->est_cma : sc->est_ring;
    uint32_t period = slow >= 2 * fast ? 16 * SHM_EXPLORE
                      : slow * 4 >= fast * 5 ? 4 * SHM_EXPLORE : SHM_EXPLORE;
    uint32_t prefer = (sc->est_ring < sc->est_cma ? SHM_PREFER_RING : 0) |
                      period << SHM_PREFER_PERIOD_SHIFT;
    if (prefer != sc->prefer_ring) {
        if ((prefer ^ sc->prefer_ring) & SHM_PREFER_RING)
            plog_dbg("%s: shm: large messages now by %s (%llu vs %llu ns/MiB)",
                     pscom_con_name(sc->con), prefer & SHM_PREFER_RING ? "ring" : "single copy",
                     (unsigned long long)sc->est_ring, (unsigned long long)sc->est_cma);
        sc->prefer_ring = prefer;
        atomic_store_explicit(&shm_seg_hdr(&sc->rx_seg)->prefer_ring, prefer,
                              memory_order_relaxed);
    }
}

/* Is a message of dlen data bytes one the sender may send either way? */
static int shm_time_wanted(const shm_con_t *sc, uint64_t dlen)
{
    return shm_config.adapt && sc->cma_local && dlen >= sc->rndv_size && dlen <= SHM_ADAPT_MAX;
}

/* Receiver: a DATA packet whose stream bytes are at p (head_len bytes of
 * message head first), n of them. */
static void shm_time_ring(shm_con_t *sc, const char *p, uint32_t head_len, uint32_t n)
{
    if (!sc->rm_left) {
        size_t xlen, dlen;
        if (head_len < sizeof(pscom_header_net_t)) return;
        pscom_wire_header_get(p, &xlen, &dlen);
        if (head_len != sizeof(pscom_header_net_t) + xlen || !shm_time_wanted(sc, dlen)) return;
        sc->rm_left = head_len + dlen;
        sc->rm_len  = dlen;
        sc->rm_t0   = shm_now_ns();
    }
    if (n < sc->rm_left) {
        sc->rm_left -= n;
        return;
    }
    sc->rm_left = 0;
    shm_time_sample(sc, 1, sc->rm_t0, sc->rm_len);
}

/* Write what is queued into the ring until the queue is empty, the ring
 * is full, or an RNDV message waits for its ACK. Re-entrant calls (from
 * completions inside pscom_write_done) return at once: the outer loop
 * picks their messages up. Returns 1 if it wrote anything. */
static int shm_write(shm_con_t *sc)
{
    pscom_con_t *con = sc->con;
    int progress     = 0;

    if (sc->in_write) return 0;
    sc->in_write   = 1;
    sc->tx_blocked = 0;
    for (;;) {
        if (sc->ack_pending) {
            if (!shm_send_ack(sc)) goto full;
            progress = 1;
        }
        if (sc->cur_rndv) break; /* the ACK will call us again */
        if (!sc->cur_active) {
            if (!pscom_write_peek(con, 0, &sc->cur_head, &sc->cur_data)) break;
            sc->cur_active = 1;
            sc->cur_off    = 0;
            size_t dlen    = sc->cur_data.iov_len;
            if (sc->cma && dlen && dlen >= sc->rndv_size &&
                sc->cur_head.iov_len + sizeof(shm_rndv_t) <= sc->chunk &&
                !shm_large_by_ring(sc, dlen)) {
                if (!shm_send_rndv(sc)) {
                    sc->cur_active = 0; /* not started: may still be cancelled */
                    goto full;
                }
                progress = 1;
                /* the head left: the send is started and no longer cancellable */
                if (pscom_write_done(con, sc->cur_off) || sc->closed) break;
                continue;
            }
        }
        size_t hlen  = sc->cur_head.iov_len;
        size_t total = hlen + sc->cur_data.iov_len;
        size_t off   = sc->cur_off;
        /* Packets grow from SHM_PKT_FIRST to the chunk size: the receiver
         * starts copying out early, and long messages take few packets.
         * Towards the end they shrink again by halves: the receiver copies
         * the last packet after the sender is done with it, so a small one
         * ends the message sooner (1 MiB +7 %, 64 KiB +10 %). */
        size_t n    = off > SHM_PKT_FIRST ? off : SHM_PKT_FIRST;
        size_t left = total - off;
        if (n > sc->chunk) n = sc->chunk;
        if (left > n && left / 2 < n) n = left / 2 > SHM_PKT_FIRST ? left / 2 : SHM_PKT_FIRST;
        if (n > left) n = left;

        size_t hl       = off < hlen ? (hlen - off < n ? hlen - off : n) : 0;
        const char *src = NULL; /* data of this packet, if any (then the head is done) */
        uint32_t gap    = 0;
        if (n > hl) {
            src = (const char *)sc->cur_data.iov_base + (off + hl - hlen);
            if (n - hl >= SHM_GAP_MIN) gap = shm_data_gap(src, hl);
        }

        shm_pkt_t *pkt = shm_ring_reserve(&sc->tx, (uint32_t)(n + gap));
        if (!pkt) {
            if (!off) sc->cur_active = 0; /* not started: may still be cancelled */
            goto full;
        }
        char *dst = shm_pkt_payload(pkt);
        if (hl) pscom_memcpy_small(dst, (const char *)sc->cur_head.iov_base + off, hl);
        if (n > hl) pscom_memcpy_small(dst + hl + gap, src, n - hl);
        shm_ring_publish(&sc->tx, pkt, (uint32_t)(n + gap), SHM_PKT_DATA, (uint32_t)hl, gap);
        progress = 1;

        /* Retire what left. A message of several packets is retired packet
         * by packet, which also marks it started (no cancel after the first
         * packet); it is never peeked again meanwhile. */
        sc->cur_off += n;
        if (sc->cur_off == total) sc->cur_active = 0;
        if (pscom_write_done(con, n) || sc->closed) break;
    }
    sc->in_write = 0;
    shm_busy_update(sc);
    return progress;
full:
    sc->tx_blocked = 1; /* the poller goes on */
    sc->in_write   = 0;
    shm_busy_update(sc);
    return progress;
}

static void shm_write_start(pscom_con_t *con)
{
    shm_con_t *sc = shm_con(con);
    if (!sc->closed) shm_write(sc);
}

/* ---- receiving ----------------------------------------------------------- */

static void shm_protocol_error(shm_con_t *sc, const char *what)
{
    plog_err("%s: shm: protocol error (%s); closing the connection", pscom_con_name(sc->con),
             what);
    sc->read_stopped = 1;
    pscom_con_transport_error(sc->con, PSCOM_OP_READ, EPROTO);
}

/* The receiver is done with our RNDV message. Returns 1 to stop reading. */
static int shm_recv_ack(shm_con_t *sc, const shm_ack_t *ack)
{
    pscom_con_t *con = sc->con;
    size_t dlen      = sc->cur_data.iov_len;
    if (!sc->cur_rndv || ack->done > dlen || (ack->status == SHM_ACK_OK && ack->done != dlen) ||
        ack->status > SHM_ACK_PUSH) {
        shm_protocol_error(sc, "unexpected ACK");
        return 1;
    }
    sc->cur_rndv = 0;
    if (ack->status == SHM_ACK_PUSH) {
        /* the peer cannot read our memory: the rest goes through the ring */
        plog_dbg("%s: shm: single copy refused after %llu bytes; using the ring",
                 pscom_con_name(con), (unsigned long long)ack->done);
        sc->cma = 0;
    }
    sc->cur_off += (size_t)ack->done;
    if (sc->cur_off == sc->cur_head.iov_len + dlen) sc->cur_active = 0;
    if (ack->done && pscom_write_done(con, (size_t)ack->done)) return 1;
    if (sc->closed) return 1;
    shm_write(sc);
    return sc->closed;
}

/* Is the peer process still there? (Its end of the handshake socket
 * closes when it exits, after its memory is gone.) */
static int shm_peer_alive(void *arg)
{
    shm_con_t *sc = arg;
    char c;
    ssize_t r = recv(sc->ufd.fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
    return r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR);
}

/* Copy the data of the RNDV message being received, at most
 * PSP_SHM_COPY_BUDGET bytes per call, to wherever the core wants it
 * (pscom_read_get_buf): the matched receive buffer, or the buffer of an
 * unexpected message. The sender helps (shm_job_run). Returns -1 to stop
 * reading, 0 while the message is incomplete, 1 when it is done. */
static int shm_rndv_progress(shm_con_t *sc, int *progress)
{
    pscom_con_t *con = sc->con;
    shm_job_t *job   = &shm_seg_hdr(&sc->rx_seg)->job;
    /* about the same time per call: twice the bytes while the sender helps */
    size_t budget    = shm_config.copy_budget << (sc->rr_helped ? 1 : 0);
    int err;

    while (sc->rr_done < sc->rr_len) {
        char *buf;
        size_t n;
        pscom_read_get_buf(con, &buf, &n);
        if (n > sc->rr_len - sc->rr_done) n = (size_t)(sc->rr_len - sc->rr_done);
        if (buf != sc->rr_prev) {
            if (!budget) return 0; /* more in the next poll */
            if (n > budget) n = budget;
            err = shm_job_run(job, sc->peer_pid, buf, sc->rr_src + sc->rr_done, n,
                              shm_config.copy_chunk, shm_peer_alive, sc, &sc->rr_helped);
            if (err) goto failed;
            budget -= n;
        } /* else: the same buffer twice is the core's scratch for the tail of a
           * truncated message, which it drops: nothing to fetch */
        sc->rr_prev = buf;
        sc->rr_done += n;
        *progress = 1;
        if (pscom_read_done(con, n) || sc->closed) return -1;
    }
    sc->rr_active   = 0;
    sc->ack.done    = sc->rr_done;
    sc->ack.status  = SHM_ACK_OK;
    sc->ack_pending = 1;
    if (sc->rr_t0) shm_time_sample(sc, 0, sc->rr_t0, sc->rr_len);
    shm_write(sc);
    return sc->closed ? -1 : 1;

failed:
    sc->rr_active = 0;
    if (err == -ESRCH) { /* the sender is gone */
        pscom_con_transport_error(con, PSCOM_OP_READ, ESRCH);
        return -1;
    }
    plog_dbg("%s: shm: process_vm_readv failed (%s); asking for the data through the ring",
             pscom_con_name(con), strerror(-err));
    sc->cma_local   = 0;
    sc->ack.done    = sc->rr_done;
    sc->ack.status  = SHM_ACK_PUSH;
    sc->ack_pending = 1;
    shm_write(sc);
    return sc->closed ? -1 : 1;
}

/* An RNDV packet: the head is at p (hl bytes), then shm_rndv_t. Hand the
 * head to the core, then copy the data. Returns as shm_rndv_progress(). */
static int shm_recv_rndv(shm_con_t *sc, shm_pkt_t *pkt, const char *p, uint32_t hl,
                         int *progress)
{
    pscom_con_t *con = sc->con;
    shm_rndv_t rd;
    size_t xlen, wire_dlen;

    if (pkt->len != hl + sizeof(rd) || hl < 8) goto bad;
    memcpy(&rd, p + hl, sizeof(rd));
    pscom_wire_header_get(p, &xlen, &wire_dlen);
    if (hl != 8 + xlen || wire_dlen != rd.len || !rd.len) goto bad;

    if (pscom_read_feed(con, p, hl) || sc->closed) return -1;
    shm_ring_consume(&sc->rx, pkt);
    sc->rr_active = 1;
    sc->rr_src    = rd.src;
    sc->rr_len    = rd.len;
    sc->rr_done   = 0;
    sc->rr_prev   = NULL;
    sc->rr_t0     = shm_time_wanted(sc, rd.len) ? shm_now_ns() : 0;
    if (!sc->cma_local) {
        sc->rr_active   = 0;
        sc->ack.done    = 0;
        sc->ack.status  = SHM_ACK_PUSH;
        sc->ack_pending = 1;
        shm_write(sc);
        return sc->closed ? -1 : 1;
    }
    return shm_rndv_progress(sc, progress);
bad:
    shm_protocol_error(sc, "bad RNDV packet");
    return -1;
}

static int shm_is_ack(const shm_pkt_t *pkt)
{
    return shm_pkt_type(pkt) == SHM_PKT_ACK && pkt->len == sizeof(shm_ack_t);
}

/* An ACK packet (shm_is_ack): taken from the ring and acted on. Returns 1
 * to stop reading. */
static int shm_take_ack(shm_con_t *sc, shm_pkt_t *pkt)
{
    shm_ack_t ack;
    memcpy(&ack, shm_pkt_payload(pkt), sizeof(ack));
    shm_ring_consume(&sc->rx, pkt);
    return shm_recv_ack(sc, &ack);
}

/* After the peer's EOF (the core stopped reading) one packet may still
 * come: the ACK of our RNDV message, when the peer closed while it copied
 * the message. Returns 1 if it came. */
static int shm_read_final_ack(shm_con_t *sc)
{
    if (sc->closed || !sc->cur_rndv) return 0;
    shm_pkt_t *pkt = shm_ring_peek(&sc->rx);
    if (!pkt || !shm_is_ack(pkt)) return 0;
    sc->in_read = 1;
    shm_take_ack(sc, pkt);
    sc->in_read = 0;
    shm_busy_update(sc);
    return 1;
}

/* Hand the packets that arrived to the core. Returns 1 if it made progress. */
static int shm_read(shm_con_t *sc)
{
    pscom_con_t *con = sc->con;
    int progress     = 0;
    int stop         = 0;

    if (pscom_unlikely(sc->in_read | sc->read_stopped))
        return sc->in_read ? 0 : shm_read_final_ack(sc);
    sc->in_read = 1;
    if (sc->rr_active) {
        int r = shm_rndv_progress(sc, &progress);
        if (r < 0) stop = 1;
        if (r <= 0) goto out; /* nothing else may pass the message */
    }
    for (int i = 0; i < SHM_READ_MAX; i++) {
        shm_pkt_t *pkt = shm_ring_peek(&sc->rx);
        if (!pkt) break;
        progress      = 1;
        const char *p = shm_pkt_payload(pkt);
        uint32_t len  = pkt->len;
        uint32_t hl   = shm_pkt_head_len(pkt);
        if (pscom_unlikely(hl > len || shm_pkt_size(len) > sc->rx.mask / 2 + 1)) {
            shm_protocol_error(sc, "bad packet length");
            stop = 1;
        } else if (pscom_likely(shm_pkt_type(pkt) == SHM_PKT_DATA)) {
            uint32_t gap = shm_pkt_gap(pkt);
            if (pscom_unlikely(gap > len - hl)) {
                shm_protocol_error(sc, "bad packet gap");
                stop = 1;
                break;
            }
            uint64_t completions = pscom_req_completions;
            if (!gap && (len <= SHM_FEED_ONCE || !hl)) {
                stop = pscom_read_feed(con, p, len);
            } else {
                /* the head alone, so that the data goes straight to the receive buffer */
                if (hl) stop = pscom_read_feed(con, p, hl);
                if (!stop && !sc->closed) stop = pscom_read_feed(con, p + hl + gap, len - hl - gap);
            }
            if (stop && !sc->closed) shm_ring_consume(&sc->rx, pkt); /* EOF: the rest is dropped */
            if (stop || sc->closed) break;
            /* (a large message's first packet has at least SHM_CHUNK_MIN bytes) */
            if (sc->rm_left || (hl && len >= SHM_CHUNK_MIN && sc->cma_local))
                shm_time_ring(sc, p, hl, len - gap);
            shm_ring_consume(&sc->rx, pkt);
            /* A request completed: let its waiter go on before we look at
             * the next packet, whose stamp line the writer has just zeroed
             * (a cross-CPU miss). 8 B: +9-14 % in interleaved A/Bs. */
            if (completions != pscom_req_completions) break;
        } else if (shm_pkt_type(pkt) == SHM_PKT_RNDV) {
            int r = shm_recv_rndv(sc, pkt, p, hl, &progress);
            if (r < 0) stop = 1;
            if (r <= 0) break;
        } else if (shm_is_ack(pkt)) {
            stop = shm_take_ack(sc, pkt);
        } else {
            shm_protocol_error(sc, "unknown packet type");
            stop = 1;
        }
        if (stop || sc->closed) break;
    }
out:
    if (stop) sc->read_stopped = 1;
    sc->in_read = 0;
    shm_busy_update(sc);
    return progress;
}

/* While our RNDV message waits for its ACK: copy chunks of it into the
 * receiver, which has opened a job for it in its segment. */
static int shm_help(shm_con_t *sc)
{
    shm_job_t *job = &shm_seg_hdr(&sc->tx_seg)->job;
    uint64_t lo    = (uint64_t)(uintptr_t)sc->cur_data.iov_base;
    uint64_t hi    = lo + sc->cur_data.iov_len;
    ssize_t r      = shm_job_help(job, sc->peer_pid, shm_config.copy_budget, lo, hi);
    if (r < 0) {
        plog_dbg("%s: shm: process_vm_writev failed (%s); leaving the copy to the receiver",
                 pscom_con_name(sc->con), strerror((int)-r));
        sc->help = 0;
        return 1;
    }
    return r > 0;
}

static int shm_poll(shm_con_t *sc)
{
    int progress = shm_read(sc);
    if (sc->closed) return progress;
    if (sc->tx_blocked) progress |= shm_write(sc);
    if (sc->cur_rndv && sc->help && !sc->closed) {
        progress |= shm_help(sc);
        shm_busy_update(sc);
    }
    return progress;
}

static inline void shm_cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

static int shm_poll_all(pscom_poller_t *poller)
{
    int progress = 0, looked = 0;
    for (unsigned i = 0; i < shm_polled.n; i++) {
        shm_con_t *sc = shm_polled.con[i];
        if (!sc->busy && !shm_ring_ready(&sc->rx)) continue;
        looked = 1;
        progress |= shm_poll(sc);
        /* closed meanwhile: slot i holds the last connection now */
        if (i < shm_polled.n && shm_polled.con[i] != sc) i--;
    }
    /* Nothing there: back off a little before the next look. Reading the
     * lines the peers are about to write as fast as we can delays their
     * stores (measured: 8 B half round trip 0.30 -> 0.27 us). */
    if (!looked) shm_cpu_relax();
    return progress;
}

/* A blocked writer, a copy, helping the peer: a blocking wait polls on
 * instead of napping (pscom_poller_t.busy). */
static int shm_busy_any(pscom_poller_t *poller)
{
    for (unsigned i = 0; i < shm_polled.n; i++)
        if (shm_polled.con[i]->busy) return 1;
    return 0;
}

static int shm_polled_add(shm_con_t *sc)
{
    if (shm_polled.n == shm_polled.cap) {
        unsigned cap   = shm_polled.cap ? 2 * shm_polled.cap : 16;
        shm_con_t **nc = realloc(shm_polled.con, cap * sizeof(*nc));
        if (!nc) return -1;
        shm_polled.con = nc;
        shm_polled.cap = cap;
    }
    sc->slot                      = shm_polled.n++;
    shm_polled.con[sc->slot]      = sc;
    if (shm_polled.n == 1) {
        shm_polled.poller.poll = shm_poll_all;
        shm_polled.poller.busy = shm_busy_any;
        pscom_poller_add(&shm_polled.poller);
    }
    return 0;
}

static void shm_polled_del(shm_con_t *sc)
{
    unsigned last = --shm_polled.n;
    if (sc->slot != last) {
        shm_polled.con[sc->slot]       = shm_polled.con[last];
        shm_polled.con[sc->slot]->slot = sc->slot;
    }
    if (!shm_polled.n) pscom_poller_del(&shm_polled.poller);
}

static void shm_fini(void)
{
    if (shm_polled.n) return; /* connections still open: keep the table */
    free(shm_polled.con);
    shm_polled.con = NULL;
    shm_polled.cap = 0;
}

/* The handshake socket became readable: the peer is gone (EOF or error). */
static void shm_fd_handler(pscom_ufd_t *ufd, uint32_t revents)
{
    shm_con_t *sc = ufd->priv;
    char c;
    ssize_t r = recv(ufd->fd, &c, 1, MSG_DONTWAIT);
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return;
    int err = r < 0 ? errno : r > 0 ? EPROTO : 0;

    /* a peer that closed properly left its EOF message in the ring */
    while (!sc->closed && shm_read(sc)) {
    }
    if (sc->closed) return;
    plog_dbg("%s: shm: peer %s", pscom_con_name(sc->con),
             r == 0 ? "closed its end" : r > 0 ? "sent unexpected bytes" : strerror(err));
    pscom_con_transport_error(sc->con, PSCOM_OP_READ, err);
}

/* ---- life cycle ----------------------------------------------------------- */

static int shm_con_start(pscom_con_t *con, int *fd)
{
    shm_con_t *sc = shm_con(con);
    sc->con       = con;
    sc->last_way  = -1;

    shm_seg_hdr_t *rh = shm_seg_hdr(&sc->rx_seg);
    sc->rx.ring       = shm_seg_ring(&sc->rx_seg);
    sc->rx.consumed   = &rh->consumed;
    sc->rx.mask       = rh->ring_size - 1;
    sc->rx.pos        = 0;

    shm_seg_hdr_t *th = shm_seg_hdr(&sc->tx_seg);
    sc->tx.ring       = shm_seg_ring(&sc->tx_seg);
    sc->tx.consumed   = &th->consumed;
    sc->tx.mask       = th->ring_size - 1;
    sc->tx.pos        = 0;
    sc->tx.seen       = 0;
    /* at least four packets in flight (a 128 KiB ring: 32 KiB packets) */
    uint64_t maxp     = th->ring_size / 4;
    uint64_t fit      = shm_ring_max_payload(th->ring_size) - SHM_PKT_GAP_MAX; /* room for a gap */
    if (maxp > fit) maxp = fit;
    sc->chunk         = shm_config.chunk < maxp ? shm_config.chunk : (uint32_t)maxp;

    sc->ufd.fd      = *fd;
    sc->ufd.events  = EPOLLIN;
    sc->ufd.handler = shm_fd_handler;
    sc->ufd.priv    = sc;
    sc->ufd.quiet   = 1; /* only the peer's death */
    if (shm_polled_add(sc) < 0) goto err_poll;
    if (pscom_ufd_add(&sc->ufd) < 0) goto err_ufd;
    *fd = -1; /* ours now */

    sc->help      = sc->cma && shm_config.help;
    /* The core's rendezvous (matching before the transfer) stays as
     * PSP_RENDEZVOUS says; the data of any large message on the wire, its
     * RENDEZVOUS_DATA included, takes our single copy. */
    sc->rndv_size = shm_config.rendezvous >= PSCOM_ENV_UINT_INF ? SIZE_MAX : shm_config.rendezvous;
    /* RMA puts/gets (and the core's rendezvous reads) of that size on go
     * straight to or from the peer's memory */
    if (sc->cma) pscom_con_set_rma_direct_size(con, sc->rndv_size);
    shm_busy_update(sc);
    plog_dbg("%s: shm: started (rings %llu/%llu bytes, chunk %u, %s)", pscom_con_name(con),
             (unsigned long long)(sc->rx.mask + 1), (unsigned long long)(sc->tx.mask + 1),
             sc->chunk, sc->cma ? "single copy" : "no single copy");
    return 0;

err_ufd:
    shm_polled_del(sc);
err_poll:
    sc->ufd.fd = -1; /* the core closes it */
    sc->con    = NULL;
    shm_con_abort(con);
    return -1;
}

/* ---- direct memory access (RMA put/get, rendezvous reads) ------------------ */

/* One system call straight between our memory and the peer's (the core
 * asks only from the single-copy threshold on, set in shm_con_start). The
 * peer's CPU is not involved; a failure (peer gone, address not mapped,
 * single copy refused) makes the core send messages instead. */
static int shm_rma_read(pscom_con_t *con, void *dst, uint64_t remote_src, size_t len)
{
    shm_con_t *sc = shm_con(con);
    if (!sc->cma || sc->closed) return -1;
    int err = shm_cma_read(sc->peer_pid, dst, remote_src, len);
    if (err) plog_dbg("%s: shm: direct read of %zu bytes failed: %s", pscom_con_name(con), len,
                      strerror(-err));
    return err ? -1 : 0;
}

static int shm_rma_write(pscom_con_t *con, const void *src, uint64_t remote_dst, size_t len)
{
    shm_con_t *sc = shm_con(con);
    if (!sc->cma || sc->closed) return -1;
    int err = shm_cma_write(sc->peer_pid, src, remote_dst, len);
    if (err) plog_dbg("%s: shm: direct write of %zu bytes failed: %s", pscom_con_name(con), len,
                      strerror(-err));
    return err ? -1 : 0;
}

static void shm_close(pscom_con_t *con)
{
    shm_con_t *sc = shm_con(con);
    if (sc->closed || !sc->con) return; /* closed, or never started */
    sc->closed = 1;
    shm_polled_del(sc);
    if (sc->ufd.fd >= 0) {
        pscom_ufd_del(&sc->ufd);
        close(sc->ufd.fd);
        sc->ufd.fd = -1;
    }
    rx_seg_release(sc);
    shm_seg_release(&sc->tx_seg);
}

static const pscom_plugin_ops_t shm_ops = {
    .init        = shm_init,
    .fini        = shm_fini,
    .con_offer   = shm_con_offer,
    .con_accept  = shm_con_accept,
    .con_connect = shm_con_connect,
    .con_confirm = shm_con_confirm,
    .con_start   = shm_con_start,
    .con_abort   = shm_con_abort,
    .write_start = shm_write_start,
    .close       = shm_close,
    .rma_read    = shm_rma_read,
    .rma_write   = shm_rma_write,
};

PSCOM_PLUGIN_DEFINE(shm) = {
    .abi_version   = PSCOM_PLUGIN_ABI_VERSION,
    .desc_size     = sizeof(pscom_plugin_desc_t),
    .name          = "shm",
    .con_type      = PSCOM_CON_TYPE_SHM,
    .priority      = 90,
    .user_priority = 1,
    .caps          = PSCOM_PLUGIN_CAP_SAME_NODE | PSCOM_PLUGIN_CAP_RMA_READ |
                     PSCOM_PLUGIN_CAP_RMA_WRITE,
    .con_priv_size = sizeof(shm_con_t),
    .ops           = &shm_ops,
};
