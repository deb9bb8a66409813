/*
 * openib_rdma.c - rendezvous by RDMA read: the receiver reads a large
 * message straight from the sender's buffer into its own (no copies
 * through the slots). The core drives it (plugin ops rndv_export,
 * rndv_release, rndv_read; doc/plugin-interface.md):
 *
 *   sender    rndv_export:  register the buffer for remote reads; its key
 *                           (1 << 32 | rkey) goes into the announcement
 *   receiver  rndv_read:    register the receive buffer, post
 *                           IBV_WR_RDMA_READs (one at a time, each at most
 *                           the port's largest message) and take
 *                           completions until they are done; then the core
 *                           answers FIN
 *   sender    rndv_release: deregister, at FIN (or CTS, or failure)
 *
 * Messages from PSP_OPENIB_RDMA_READ bytes on go so (the connection's
 * direct size); smaller rendezvous messages, and any whose buffer cannot
 * be registered, are pushed through the slots as before. Taking
 * completions while waiting never calls the core (openib_cq.c), so the
 * wait is safe inside the core's call. A peer that dies meanwhile ends
 * the read with an error completion (retries exceeded) or, over the
 * software HCA, through the handshake socket, which is looked at while
 * waiting.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <string.h>

#include "openib_priv.h"

#define KEY_MARK (1ull << 32)

uint64_t openib_rndv_export(pscom_con_t *con, const void *buf, size_t len, void **handle)
{
    openib_con_t *oc = openib_con(con);
    if (!oc->started || oc->closed || oc->failed) return 0;
    /* remote read only: the buffer may be read-only memory */
    struct ibv_mr *mr = ibv_reg_mr(openib_dev.pd, (void *)buf, len, IBV_ACCESS_REMOTE_READ);
    if (!mr) {
        plog_dbg("%s: openib: registering %zu bytes for a read: %s (pushed instead)",
                 pscom_con_name(con), len, strerror(errno));
        return 0;
    }
    *handle = mr;
    return KEY_MARK | mr->rkey;
}

void openib_rndv_release(pscom_con_t *con, void *handle)
{
    (void)con; /* may be closed: the region belongs to the device's PD */
    ibv_dereg_mr(handle);
}

/* Is the peer gone (its end of the handshake socket closed)? */
static int peer_gone(openib_con_t *oc)
{
    if (oc->ufd.fd < 0) return 0;
    struct pollfd p = {.fd = oc->ufd.fd, .events = POLLIN};
    return poll(&p, 1, 0) > 0; /* EOF, an error, or bytes it never sends */
}

/* One RDMA read of len bytes at src into dst (in mr); 0 or -1. */
static int read_one(openib_con_t *oc, struct ibv_mr *mr, char *dst, uint64_t src, uint32_t rkey,
                    uint32_t len)
{
    struct ibv_sge sge = {.addr = (uint64_t)(uintptr_t)dst, .length = len, .lkey = mr->lkey};
    struct ibv_send_wr wr = {
        .wr_id      = openib_wr_id(oc, OPENIB_WR_READ),
        .sg_list    = &sge,
        .num_sge    = 1,
        .opcode     = IBV_WR_RDMA_READ,
        .send_flags = IBV_SEND_SIGNALED,
    }, *bad;
    wr.wr.rdma.remote_addr = src;
    wr.wr.rdma.rkey        = rkey;
    int err                = ibv_post_send(oc->qp, &wr, &bad);
    if (err) {
        plog_dbg("%s: openib: RDMA read: ibv_post_send: %s", pscom_con_name(oc->con),
                 strerror(err));
        return -1;
    }
    oc->wr_out++;
    oc->read_busy = 1;
    for (unsigned spins = 1; oc->read_busy; spins++) {
        if (openib_dev.cq_broken || oc->closed) return -1;
        if (!openib_cq_take() && !(spins % 4096) && peer_gone(oc)) {
            plog_dbg("%s: openib: RDMA read given up: the peer is gone", pscom_con_name(oc->con));
            return -1;
        }
    }
    if (oc->read_status != IBV_WC_SUCCESS) {
        plog_dbg("%s: openib: RDMA read failed: %s", pscom_con_name(oc->con),
                 ibv_wc_status_str(oc->read_status));
        return -1;
    }
    return 0;
}

int openib_rndv_read(pscom_con_t *con, void *dst, uint64_t src, uint64_t key, size_t len)
{
    openib_con_t *oc = openib_con(con);
    if (!oc->started || oc->closed || oc->failed || oc->read_busy || (key >> 32) != 1) return -1;
    struct ibv_mr *mr = ibv_reg_mr(openib_dev.pd, dst, len, IBV_ACCESS_LOCAL_WRITE);
    if (!mr) {
        plog_dbg("%s: openib: registering %zu bytes for a read: %s (pushed instead)",
                 pscom_con_name(con), len, strerror(errno));
        return -1;
    }
    int rc = 0;
    for (size_t off = 0; off < len && rc == 0;) {
        size_t n = len - off < openib_dev.max_msg ? len - off : openib_dev.max_msg;
        rc       = read_one(oc, mr, (char *)dst + off, src + off, (uint32_t)key, (uint32_t)n);
        off += n;
    }
    if (rc == 0) plog_dbg("%s: openib: %zu bytes read by RDMA", pscom_con_name(con), len);
    if (oc->read_busy) {
        oc->read_mr = mr; /* given up (the peer is gone), still posted: its
                             region goes with the queue pair */
    } else {
        ibv_dereg_mr(mr);
    }
    return rc;
}
