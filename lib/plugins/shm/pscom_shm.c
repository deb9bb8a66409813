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
#include "shm_priv.h"

/* ---- configuration ------------------------------------------------------- */

shm_config_t shm_config;

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
    pscom_env_clamp_uint("PSP_SHM_CHUNK", &shm_config.chunk, SHM_CHUNK_MIN, UINT_MAX);
    pscom_env_clamp_uint("PSP_SHM_COPY_BUDGET", &shm_config.copy_budget, 4096, UINT_MAX);
    /* what killed processes of ours left (README.md, Handshake) */
    unsigned swept = shm_seg_sweep(SHM_SEG_STALE_S);
    if (swept) plog_dbg("shm: removed %u segment(s) of processes gone in /dev/shm", swept);
    return 0;
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
/* ---- life cycle ----------------------------------------------------------- */

static int shm_con_start(pscom_con_t *con, int *fd)
{
    shm_con_t *sc = shm_con(con);
    sc->con       = con;
    sc->last_way  = -1;

    shm_seg_hdr_t *rh = shm_seg_hdr(&sc->rx_seg);
    sc->rx.ring       = shm_seg_ring(&sc->rx_seg);
    sc->rx.consumed   = &rh->consumed;
    sc->rx.mask       = shm_seg_ring_size(&sc->rx_seg) - 1;
    sc->rx.pos        = 0;

    shm_seg_hdr_t *th = shm_seg_hdr(&sc->tx_seg);
    sc->tx.ring       = shm_seg_ring(&sc->tx_seg);
    sc->tx.consumed   = &th->consumed;
    sc->tx.mask       = shm_seg_ring_size(&sc->tx_seg) - 1;
    sc->tx.pos        = 0;
    sc->tx.seen       = 0;
    /* at least four packets in flight (a 128 KiB ring: 32 KiB packets) */
    uint64_t maxp     = shm_seg_ring_size(&sc->tx_seg) / 4;
    uint64_t fit      = shm_ring_max_payload(shm_seg_ring_size(&sc->tx_seg)) -
                   SHM_PKT_GAP_MAX; /* room for a gap */
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
