/*
 * openib_qp.c - a connection's verbs resources: its slots in one
 * registered buffer, its id and room in the process's completion queue
 * (openib_cq.c), and a reliable-connected queue pair taken through
 * INIT -> RTR -> RTS with what the peer sent in the handshake.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "openib_priv.h"

int openib_post_recv(openib_con_t *oc, unsigned slot)
{
    struct ibv_sge sge = {
        .addr   = (uint64_t)(uintptr_t)openib_recv_slot(oc, slot),
        .length = OPENIB_SLOT_SIZE,
        .lkey   = oc->mr->lkey,
    };
    struct ibv_recv_wr wr = {.wr_id = openib_wr_id(oc, slot), .sg_list = &sge, .num_sge = 1},
                       *bad;
    int err = ibv_post_recv(oc->qp, &wr, &bad);
    if (!err) oc->wr_out++;
    return err;
}

static int qp_init(openib_con_t *oc)
{
    struct ibv_qp_attr a = {
        .qp_state        = IBV_QPS_INIT,
        .pkey_index      = 0,
        .port_num        = openib_dev.port,
        .qp_access_flags = IBV_ACCESS_REMOTE_READ, /* the peer reads large messages */
    };
    return ibv_modify_qp(oc->qp, &a,
                         IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
}

int openib_con_resources(openib_con_t *oc, pscom_con_t *con)
{
    const char *what;
    int err   = 0;
    oc->con   = con;
    oc->nrecv = openib_cfg.recvq_size;
    oc->nsend = openib_cfg.sendq_size;
    size_t len = (size_t)(oc->nrecv + oc->nsend) * OPENIB_SLOT_SIZE;
    what = "buffer";
    /* every completion the connection can have outstanding, and one */
    oc->stash_cap = openib_con_wrs(oc) + 1;
    oc->stash     = calloc(oc->stash_cap, sizeof(*oc->stash));
    if (!oc->stash || posix_memalign((void **)&oc->buf, 4096, len)) goto err;
    memset(oc->buf, 0, len);
    what   = "memory registration";
    oc->mr = ibv_reg_mr(openib_dev.pd, oc->buf, len, IBV_ACCESS_LOCAL_WRITE);
    if (!oc->mr) goto err;
    what = "room in the completion queue";
    if (openib_con_register(oc) < 0) {
        err = ENOSPC;
        goto err;
    }
    struct ibv_qp_init_attr qa = {
        .send_cq = openib_con_cq(oc),
        .recv_cq = openib_con_cq(oc),
        /* one more send WR: an RDMA read (openib_rdma.c) */
        .cap     = {.max_send_wr = oc->nsend + 1, .max_recv_wr = oc->nrecv,
                    .max_send_sge = 1, .max_recv_sge = 1},
        .qp_type = IBV_QPT_RC,
        .sq_sig_all = 1,
    };
    what   = "queue pair";
    oc->qp = ibv_create_qp(openib_dev.pd, &qa);
    if (!oc->qp) goto err;
    what = "queue pair INIT";
    if ((err = qp_init(oc)) != 0) goto err;
    what = "receive";
    for (unsigned i = 0; i < oc->nrecv; i++) {
        if ((err = openib_post_recv(oc, i)) != 0) goto err;
    }
    uint32_t r = 0;
    if (getrandom(&r, sizeof(r), GRND_NONBLOCK) != sizeof(r)) r = (uint32_t)(uintptr_t)oc;
    oc->psn = r & 0xffffffu;
    return 0;

err:
    if (!err) err = errno;
    plog_dbg("%s: openib: %s: %s", pscom_con_name(con), what, strerror(err));
    openib_con_resources_free(oc);
    return -1;
}

void openib_con_resources_free(openib_con_t *oc)
{
    openib_con_quiesce(oc); /* none of its completions left in the queue */
    if (oc->qp && !ibv_destroy_qp(oc->qp)) {
        oc->qp = NULL;
        openib_con_destroyed(oc);
    }
    openib_con_unregister(oc);
    if (oc->read_mr) ibv_dereg_mr(oc->read_mr);
    oc->read_mr = NULL;
    if (oc->mr) ibv_dereg_mr(oc->mr);
    free(oc->buf);
    free(oc->stash);
    oc->stash = NULL;
    oc->stash_count = oc->stash_head = 0;
    oc->qp  = NULL;
    oc->mr  = NULL;
    oc->buf = NULL;
}

/* INIT -> RTR -> RTS towards the peer's queue pair. */
int openib_qp_connect(openib_con_t *oc, uint16_t lid, uint32_t qpn, uint32_t psn)
{
    struct ibv_qp_attr a = {
        .qp_state           = IBV_QPS_RTR,
        .path_mtu           = openib_dev.mtu,
        .dest_qp_num        = qpn,
        .rq_psn             = psn,
        .max_dest_rd_atomic = 1,
        .min_rnr_timer      = 12,
        .ah_attr            = {.dlid = lid, .sl = 0, .src_path_bits = 0,
                               .port_num = openib_dev.port},
    };
    int err = ibv_modify_qp(oc->qp, &a,
                            IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                                IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
                                IBV_QP_MIN_RNR_TIMER);
    if (err) goto fail;
    a = (struct ibv_qp_attr){
        .qp_state      = IBV_QPS_RTS,
        .timeout       = 14,
        .retry_cnt     = 7,
        .rnr_retry     = 7, /* infinite: credits keep a receive posted anyway */
        .sq_psn        = oc->psn,
        .max_rd_atomic = 1,
    };
    err = ibv_modify_qp(oc->qp, &a,
                        IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                            IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC);
    if (err) goto fail;
    return 0;
fail:
    plog_dbg("%s: openib: queue pair to lid %u qpn %u: %s", pscom_con_name(oc->con), lid, qpn,
             strerror(err));
    return -1;
}
