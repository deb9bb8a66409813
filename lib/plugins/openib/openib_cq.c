/*
 * openib_cq.c - the process's one completion queue, shared by the queue
 * pairs of every connection, and the table that finds a completion's
 * connection.
 *
 * A work request's wr_id carries its connection's id (an index into the
 * table and that index's generation) above the slot. Taking completions
 * (openib_cq_take) never calls the core: each goes into its connection's
 * stash (credits taken, send slots freed at once) and the connection into
 * the ready list, which the poller works through. So a progress pass polls
 * one queue, whatever the number of connections.
 *
 * The queue must hold every completion the registered connections can
 * have outstanding (their receive and send slots): it is created with
 * PSP_OPENIB_COMPQ_SIZE entries and grows (ibv_resize_cq) as connections
 * come. A connection that cannot get room falls back to the next
 * transport. A closing connection takes its queue pair to the error state
 * and waits until its flushed completions have been taken (openib_con_quiesce),
 * so that none of them is left in the queue when the id is used again; the
 * generation drops any that were not.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "openib_priv.h"

#define WC_BATCH  16
#define IDX_BITS  20u
#define IDX_MASK  ((1u << IDX_BITS) - 1)
#define GEN_MASK  ((1u << (32 - IDX_BITS)) - 1)

int openib_cq_open(void)
{
    pscom_env_clamp_uint("PSP_OPENIB_COMPQ_SIZE", &openib_cfg.compq_size, 1,
                         (unsigned)openib_dev.max_cqe);
    unsigned size = openib_cfg.compq_size;
    openib_dev.cq = ibv_create_cq(openib_dev.ctx, (int)size, NULL, openib_dev.chan, 0);
    if (!openib_dev.cq) {
        plog_err("openib: %s: cannot create a completion queue of %u entries (%s); the openib "
                 "transport is disabled", openib_dev.name, size, strerror(errno));
        return -1;
    }
    openib_dev.cq_size = (unsigned)openib_dev.cq->cqe;
    pscom_list_init(&openib_dev.ready);
    return 0;
}

void openib_cq_close(void)
{
    if (openib_dev.cq) {
        openib_events_drain(); /* ibv_destroy_cq waits for unacknowledged events */
        ibv_destroy_cq(openib_dev.cq);
    }
    openib_dev.cq = NULL;
    free(openib_dev.tab);
    free(openib_dev.gen);
    free(openib_dev.free_idx);
    openib_dev.tab      = NULL;
    openib_dev.gen      = NULL;
    openib_dev.free_idx = NULL;
    openib_dev.tab_cap = openib_dev.tab_used = openib_dev.nfree = 0;
}

/* Room for n more outstanding completions: 0, or -1 (the queue cannot grow). */
static int cq_reserve(unsigned n)
{
    unsigned need = openib_dev.cq_need + openib_dev.cq_stale + n;
    if (openib_dev.cq_broken) return -1;
    if (need > openib_dev.cq_size) {
        unsigned max  = (unsigned)openib_dev.max_cqe;
        unsigned size = openib_dev.cq_size > max / 2 ? max : openib_dev.cq_size * 2;
        if (size < need) size = need;
        int err = need > max ? 0 : ibv_resize_cq(openib_dev.cq, (int)size);
        if (need > max || err) {
            plog_dbg("openib: completion queue cannot grow to %u entries (%s)", need,
                     need > max ? "device limit" : strerror(err));
            return -1;
        }
        openib_dev.cq_size = (unsigned)openib_dev.cq->cqe;
        plog_dbg("openib: completion queue now %u entries", openib_dev.cq_size);
    }
    openib_dev.cq_need += n;
    return 0;
}

static int tab_grow(void)
{
    unsigned cap = openib_dev.tab_cap ? openib_dev.tab_cap * 2 : 64;
    if (cap > IDX_MASK + 1) cap = IDX_MASK + 1;
    if (cap <= openib_dev.tab_cap) return -1;
    openib_con_t **tab = realloc(openib_dev.tab, cap * sizeof(*tab));
    if (!tab) return -1;
    openib_dev.tab = tab;
    uint16_t *gen  = realloc(openib_dev.gen, cap * sizeof(*gen));
    if (!gen) return -1;
    openib_dev.gen = gen;
    unsigned *fi   = realloc(openib_dev.free_idx, cap * sizeof(*fi));
    if (!fi) return -1;
    openib_dev.free_idx = fi;
    for (unsigned i = openib_dev.tab_cap; i < cap; i++) {
        tab[i] = NULL;
        gen[i] = 0;
    }
    openib_dev.tab_cap = cap;
    return 0;
}

int openib_con_register(openib_con_t *oc)
{
    unsigned idx;
    if (openib_dev.nfree) {
        idx = openib_dev.free_idx[--openib_dev.nfree];
    } else {
        if (openib_dev.tab_used == openib_dev.tab_cap && tab_grow() < 0) {
            plog_dbg("openib: no room for another connection");
            return -1;
        }
        idx = openib_dev.tab_used++;
    }
    if (cq_reserve(oc->nrecv + oc->nsend) < 0) {
        openib_dev.free_idx[openib_dev.nfree++] = idx;
        return -1;
    }
    uint16_t g = (uint16_t)((openib_dev.gen[idx] + 1) & GEN_MASK);
    if (!g) g = 1; /* an id is never 0 */
    openib_dev.gen[idx] = g;
    openib_dev.tab[idx] = oc;
    oc->id              = (uint32_t)g << IDX_BITS | idx;
    oc->wr_out          = 0;
    pscom_list_init(&oc->ready_next);
    return 0;
}

void openib_con_unregister(openib_con_t *oc)
{
    if (!oc->id) return;
    unsigned idx = oc->id & IDX_MASK;
    openib_dev.tab[idx] = NULL;
    openib_dev.free_idx[openib_dev.nfree++] = idx;
    /* completions still to come (a flush that did not end) keep their room */
    openib_dev.cq_need -= oc->nrecv + oc->nsend;
    openib_dev.cq_stale += oc->wr_out;
    if (pscom_list_linked(&oc->ready_next)) pscom_list_del(&oc->ready_next);
    oc->id = 0;
}

void openib_con_quiesce(openib_con_t *oc)
{
    if (!oc->id) return;
    oc->draining = 1;
    if (!oc->qp || !oc->wr_out) return;
    struct ibv_qp_attr a = {.qp_state = IBV_QPS_ERR};
    if (ibv_modify_qp(oc->qp, &a, IBV_QP_STATE)) return;
    uint64_t t0 = openib_now_ms();
    while (oc->wr_out && !openib_dev.cq_broken && openib_now_ms() - t0 < 1000) openib_cq_take();
    if (oc->wr_out)
        plog_dbg("%s: openib: %u work requests not flushed at close", pscom_con_name(oc->con),
                 oc->wr_out);
}

void openib_ready_add(openib_con_t *oc)
{
    if (!pscom_list_linked(&oc->ready_next)) pscom_list_add_tail(&oc->ready_next, &openib_dev.ready);
}

static openib_con_t *con_of(uint64_t wr_id)
{
    uint32_t id  = (uint32_t)(wr_id >> 32);
    unsigned idx = id & IDX_MASK;
    if (idx >= openib_dev.tab_used) return NULL;
    openib_con_t *oc = openib_dev.tab[idx];
    return oc && oc->id == id ? oc : NULL;
}

static void dispatch(const struct ibv_wc *wc)
{
    openib_con_t *oc = con_of(wc->wr_id);
    if (!oc) { /* of a connection gone before its flush ended */
        if (openib_dev.cq_stale) openib_dev.cq_stale--;
        return;
    }
    if (!oc->wr_out) {
        oc->overflow = 1; /* cannot happen: more completions than requests */
    } else {
        oc->wr_out--;
    }
    if (oc->draining) return;
    openib_con_stash(oc, wc);
    if (oc->started) openib_ready_add(oc);
}

int openib_cq_take(void)
{
    struct ibv_wc wc[WC_BATCH];
    int taken = 0;
    if (!openib_dev.cq || openib_dev.cq_broken) return 0;
    for (;;) {
        int n = ibv_poll_cq(openib_dev.cq, WC_BATCH, wc);
        if (n < 0) {
            plog_err("openib: ibv_poll_cq failed: every openib connection fails");
            openib_dev.cq_broken = 1;
            return taken + 1; /* the poller's next pass says it */
        }
        for (int i = 0; i < n; i++) dispatch(&wc[i]);
        taken += n;
        if (n < WC_BATCH) return taken;
    }
}
