/*
 * pscom_openib.c - the openib transport: pscom connections over verbs
 * reliable-connected queue pairs (InfiniBand). Descriptor, configuration
 * (PSP_OPENIB_*), handshake and life cycle; the data path is in
 * openib_io.c, the verbs resources in openib_dev.c and openib_qp.c. See
 * README.md.
 *
 * Handshake (over the TCP pre-connection, never blocking)
 *   connect side  con_offer:   slots, CQ, QP (INIT, receives posted);
 *                              blob {magic, version, lid, qpn, psn, recvq, slot}
 *   accept side   con_accept:  the same, QP to RTR/RTS towards the offer; reply blob
 *   connect side  con_connect: QP to RTR/RTS towards the reply; confirm {magic, version}
 *   accept side   con_confirm: check
 * All fields little-endian, every one checked before use.
 *
 * Failure detection: the handshake's TCP socket stays open, idle, in the
 * epoll set. When the peer process ends, the kernel closes it: we take
 * what the completion queue still holds (a peer that closed properly
 * waited until its last packets had arrived) and, unless that ended the
 * connection, report a transport error. A dead peer that we send to is
 * also found by the send's completion error (retries exceeded).
 */
#define _GNU_SOURCE
#include <endian.h>
#include <errno.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "openib_priv.h"

/* ---- configuration ------------------------------------------------------- */

openib_cfg_t openib_cfg;

static const pscom_env_entry_t openib_env[] = {
    {"HCA", NULL, "verbs device name (unset: the first with an active port with a LID)",
     &openib_cfg.hca, PSCOM_ENV_STR, 0},
    {"PORT", "0", "port of the device (0: the first active one)", &openib_cfg.port,
     PSCOM_ENV_UINT, 0},
    {"PATH_MTU", "3", "path MTU: 1=256, 2=512, 3=1024 bytes (at most the port's)",
     &openib_cfg.path_mtu, PSCOM_ENV_UINT, 0},
    {"RECVQ_SIZE", "16", "receive slots of 16 KiB per connection (the peer's credits)",
     &openib_cfg.recvq_size, PSCOM_ENV_UINT, 0},
    {"GLOBAL_SENDQ", "0", "one send ring for all connections (not supported: per connection)",
     &openib_cfg.global_sendq, PSCOM_ENV_INT, 0},
    {"COMPQ_SIZE", "128", "first size of the completion queue that all connections share "
     "(it grows by RECVQ_SIZE + SENDQ_SIZE entries per connection)", &openib_cfg.compq_size,
     PSCOM_ENV_UINT, 0},
    {"SENDQ_SIZE", "16", "send slots of 16 KiB per connection (at most RECVQ_SIZE)",
     &openib_cfg.sendq_size, PSCOM_ENV_UINT, 0},
    {"EVENT_CNT", "1", "accepted for compatibility (busy is always reported while packets "
     "are in flight)", &openib_cfg.event_cnt, PSCOM_ENV_INT, 0},
    {"IGNORE_WRONG_OPCODES", "0", "accepted for compatibility (a completion of an unknown "
     "kind always ends the connection)", &openib_cfg.ignore_wrong_opcodes, PSCOM_ENV_INT, 0},
    {"LID_OFFSET", "0", "added to the port's LID (adaptive routing)", &openib_cfg.lid_offset,
     PSCOM_ENV_INT, 0},
    {"RENDEZVOUS", "40000", "pscom-level rendezvous threshold over openib",
     &openib_cfg.rendezvous, PSCOM_ENV_UINT, PSCOM_ENV_HAS_PARENT},
    {"RNDV_FALLBACKS", "1", "accepted for compatibility (a buffer that cannot be registered "
     "always goes through the slots)", &openib_cfg.rndv_fallbacks, PSCOM_ENV_INT, 0},
    {"RDMA_READ", "131072", "rendezvous messages of this size on are read by RDMA (zero copy); "
     "smaller ones go through the slots (inf: none)", &openib_cfg.rdma_read, PSCOM_ENV_UINT, 0},
    {"PENDING_TOKENS", "auto", "credits owed before they are returned alone "
     "(auto: RECVQ_SIZE - 6)", &openib_cfg.pending_tokens, PSCOM_ENV_UINT, 0},
    {"MCACHE_SIZE", "0", "registration cache entries (none: no memory is registered per "
     "message)", &openib_cfg.mcache_size, PSCOM_ENV_UINT, 0},
    {"MALLOC_OPTS", "1", "accepted for compatibility (no registration cache)",
     &openib_cfg.malloc_opts, PSCOM_ENV_INT, 0},
    {NULL},
};

static pscom_env_table_t openib_env_table = {
    .name = "openib", .prefix = "OPENIB_", .entries = openib_env};

#define OPENIB_SLOTS_MAX 4096u

static void cfg_check(void)
{
    pscom_env_clamp_uint("PSP_OPENIB_PATH_MTU", &openib_cfg.path_mtu, 1, 3);
    /* three at least: the last credit is kept for returning credits, and
     * one TOKENS packet may wait unreturned (openib_io.c) */
    pscom_env_clamp_uint("PSP_OPENIB_RECVQ_SIZE", &openib_cfg.recvq_size, 3, OPENIB_SLOTS_MAX);
    pscom_env_clamp_uint("PSP_OPENIB_SENDQ_SIZE", &openib_cfg.sendq_size, 1,
                         openib_cfg.recvq_size);
    if (openib_cfg.pending_tokens == PSCOM_ENV_UINT_AUTO)
        openib_cfg.pending_tokens = openib_cfg.recvq_size > 7 ? openib_cfg.recvq_size - 6 : 1;
    pscom_env_clamp_uint("PSP_OPENIB_PENDING_TOKENS", &openib_cfg.pending_tokens, 1,
                         openib_cfg.recvq_size - 2);
    if (openib_cfg.global_sendq)
        plog_err("PSP_OPENIB_GLOBAL_SENDQ=%d: not supported, using send slots per connection",
                 openib_cfg.global_sendq);
}

static int openib_init(void)
{
    pscom_env_table_register_and_parse(&openib_env_table);
    cfg_check();
    if (openib_dev_open() < 0) return -1;
    if (openib_wait_init() < 0 || openib_cq_open() < 0) {
        openib_wait_fini();
        openib_dev_close();
        return -1;
    }
    return 0;
}

static void openib_fini(void)
{
    openib_cq_close();
    openib_wait_fini();
    openib_dev_close();
}

/* ---- handshake blobs ------------------------------------------------------ */

#define OPENIB_BLOB_MAGIC   0x3142494fu /* "OIB1" */
#define OPENIB_BLOB_VERSION 1u

typedef struct openib_blob {
    uint32_t magic;
    uint16_t version;
    uint16_t lid;
    uint32_t qpn;
    uint32_t psn;
    uint32_t recvq;     /* receive slots: the credits of the peer */
    uint32_t slot_size; /* must be ours */
} openib_blob_t;
_Static_assert(sizeof(openib_blob_t) == 24, "openib handshake blob");

static void blob_make(openib_con_t *oc, void *blob, size_t *len)
{
    openib_blob_t b = {
        .magic     = htole32(OPENIB_BLOB_MAGIC),
        .version   = htole16(OPENIB_BLOB_VERSION),
        .lid       = htole16(openib_dev.lid),
        .qpn       = htole32(oc->qp->qp_num),
        .psn       = htole32(oc->psn),
        .recvq     = htole32(oc->nrecv),
        .slot_size = htole32(OPENIB_SLOT_SIZE),
    };
    memcpy(blob, &b, sizeof(b));
    *len = sizeof(b);
}

/* Parse and check a peer's blob (host order into b). */
static int blob_parse(pscom_con_t *con, const void *blob, size_t len, openib_blob_t *b)
{
    if (len != sizeof(*b)) goto bad;
    memcpy(b, blob, sizeof(*b));
    b->magic     = le32toh(b->magic);
    b->version   = le16toh(b->version);
    b->lid       = le16toh(b->lid);
    b->qpn       = le32toh(b->qpn);
    b->psn       = le32toh(b->psn);
    b->recvq     = le32toh(b->recvq);
    b->slot_size = le32toh(b->slot_size);
    if (b->magic != OPENIB_BLOB_MAGIC || b->version != OPENIB_BLOB_VERSION) goto bad;
    if (!b->lid || !b->qpn || b->qpn > 0xffffffu || b->psn > 0xffffffu || b->recvq < 3 ||
        b->recvq > OPENIB_SLOTS_MAX || b->slot_size != OPENIB_SLOT_SIZE)
        goto bad;
    return 0;
bad:
    plog_dbg("%s: openib: malformed handshake blob (%zu bytes)", pscom_con_name(con), len);
    return -1;
}

static int peer_connect(openib_con_t *oc, const openib_blob_t *b)
{
    if (openib_qp_connect(oc, b->lid, b->qpn, b->psn) < 0) return -1;
    oc->peer_recvq = b->recvq;
    oc->credits    = b->recvq;
    return 0;
}

static void openib_con_abort(pscom_con_t *con)
{
    openib_con_t *oc = openib_con(con);
    if (oc->started) return;
    openib_con_resources_free(oc);
}

static int openib_con_offer(pscom_con_t *con, const pscom_precon_peer_t *peer, void *blob,
                            size_t *len)
{
    openib_con_t *oc = openib_con(con);
    if (openib_con_resources(oc, con) < 0) return -1;
    blob_make(oc, blob, len);
    return 0;
}

static int openib_con_accept(pscom_con_t *con, const pscom_precon_peer_t *peer,
                             const void *blob, size_t len, void *reply, size_t *reply_len)
{
    openib_con_t *oc = openib_con(con);
    openib_blob_t b;
    if (blob_parse(con, blob, len, &b) < 0) return -1;
    if (openib_con_resources(oc, con) < 0) return -1;
    if (peer_connect(oc, &b) < 0) {
        openib_con_resources_free(oc);
        return -1;
    }
    blob_make(oc, reply, reply_len);
    return 0;
}

static int openib_con_connect(pscom_con_t *con, const void *reply, size_t len, void *confirm,
                              size_t *confirm_len)
{
    openib_con_t *oc = openib_con(con);
    openib_blob_t b;
    if (blob_parse(con, reply, len, &b) < 0 || peer_connect(oc, &b) < 0) return -1;
    uint32_t c[2] = {htole32(OPENIB_BLOB_MAGIC), htole32(OPENIB_BLOB_VERSION)};
    memcpy(confirm, c, sizeof(c));
    *confirm_len = sizeof(c);
    return 0;
}

static int openib_con_confirm(pscom_con_t *con, const void *confirm, size_t len)
{
    uint32_t c[2];
    if (len != sizeof(c)) goto bad;
    memcpy(c, confirm, sizeof(c));
    if (le32toh(c[0]) != OPENIB_BLOB_MAGIC || le32toh(c[1]) != OPENIB_BLOB_VERSION) goto bad;
    return 0;
bad:
    plog_dbg("%s: openib: malformed handshake confirmation (%zu bytes)", pscom_con_name(con),
             len);
    return -1;
}

/* ---- life cycle ------------------------------------------------------------ */

/* The handshake socket: EOF or anything else means the peer is gone. */
static void openib_fd_handler(pscom_ufd_t *ufd, uint32_t revents)
{
    openib_con_t *oc = ufd->priv;
    char c;
    ssize_t r = recv(ufd->fd, &c, 1, MSG_DONTWAIT);
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return;
    int err = r < 0 ? errno : r > 0 ? EPROTO : 0;

    /* a peer that closed properly had its last packets arrive first */
    while (!oc->closed && !oc->failed) {
        openib_cq_take();
        if (!openib_con_progress(oc)) break;
    }
    if (oc->closed || oc->failed) return;
    plog_dbg("%s: openib: peer %s", pscom_con_name(oc->con),
             r == 0 ? "closed its end" : r > 0 ? "sent unexpected bytes" : strerror(err));
    oc->failed = 1;
    pscom_con_transport_error(oc->con, PSCOM_OP_READ, err);
}

static int openib_con_start(pscom_con_t *con, int *fd)
{
    openib_con_t *oc = openib_con(con);
    pscom_list_init(&oc->next);
    oc->ufd = (pscom_ufd_t){
        .fd = *fd, .events = EPOLLIN, .handler = openib_fd_handler, .priv = oc, .quiet = 1};
    if (oc->ufd.fd >= 0) {
        if (pscom_ufd_add(&oc->ufd) < 0) {
            oc->ufd.fd = -1;
            openib_con_resources_free(oc);
            return -1;
        }
        *fd = -1; /* ours now */
    }
    oc->started = 1;
    pscom_list_add_tail(&oc->next, &openib_dev.cons);
    if (oc->stash_count) openib_ready_add(oc); /* taken before the start */
    openib_wake(); /* a sleeping wait would not look at it */
    if (openib_dev.ncons++ == 0) pscom_poller_add(&openib_dev.poller);
    pscom_con_set_rendezvous_size(con, openib_cfg.rendezvous >= PSCOM_ENV_UINT_INF
                                           ? SIZE_MAX
                                           : (size_t)openib_cfg.rendezvous);
    pscom_con_set_rma_direct_size(con, openib_cfg.rdma_read >= PSCOM_ENV_UINT_INF
                                           ? SIZE_MAX
                                           : (size_t)openib_cfg.rdma_read);
    plog_dbg("%s: openib: started (qpn %u, %u/%u slots, %u credits)", pscom_con_name(con),
             oc->qp->qp_num, oc->nrecv, oc->nsend, oc->credits);
    return 0;
}

static void openib_close(pscom_con_t *con)
{
    openib_con_t *oc = openib_con(con);
    if (!oc->started || oc->closed) return;
    oc->closed = 1;
    openib_wake(); /* the poller back in the passes before it may leave them */
    pscom_list_del(&oc->next);
    if (--openib_dev.ncons == 0) pscom_poller_del(&openib_dev.poller);
    if (pscom_con_closing_gracefully(con) && !oc->failed) openib_drain_sends(oc);
    if (oc->ufd.fd >= 0) {
        pscom_ufd_del(&oc->ufd);
        close(oc->ufd.fd);
        oc->ufd.fd = -1;
    }
    openib_con_resources_free(oc);
}

static const pscom_plugin_ops_t openib_ops = {
    .init        = openib_init,
    .fini        = openib_fini,
    .con_offer   = openib_con_offer,
    .con_accept  = openib_con_accept,
    .con_connect = openib_con_connect,
    .con_confirm = openib_con_confirm,
    .con_start   = openib_con_start,
    .con_abort   = openib_con_abort,
    .write_start = openib_write_start,
    .write_now   = openib_write_now,
    .close       = openib_close,
    .rndv_export = openib_rndv_export,
    .rndv_release = openib_rndv_release,
    .rndv_read   = openib_rndv_read,
};

PSCOM_PLUGIN_DEFINE(openib) = {
    .abi_version   = PSCOM_PLUGIN_ABI_VERSION,
    .desc_size     = sizeof(pscom_plugin_desc_t),
    .name          = "openib",
    .con_type      = PSCOM_CON_TYPE_OPENIB,
    .priority      = 50, /* shm 90 > openib 50 > ucp 30 > tcp 10 */
    .user_priority = 0,  /* off unless PSP_OPENIB is set */
    .caps          = PSCOM_PLUGIN_CAP_RNDV_READ, /* with a key: openib_rdma.c */
    .con_priv_size = sizeof(openib_con_t),
    .ops           = &openib_ops,
};
