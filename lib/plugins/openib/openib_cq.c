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
 * A queue must hold every completion its connections can have outstanding
 * (their receive and send slots): the first is created with
 * PSP_OPENIB_COMPQ_SIZE entries and grows (ibv_resize_cq, doubling) as
 * connections come. Where the device cannot resize a queue, a new one of
 * twice the size is made for the connections that do not fit (each pass
 * then polls every queue: a few for many connections). A connection that gets no room falls back to the next
 * transport. A closing connection takes its queue pair to the error state
 * and waits until its flushed completions have been taken
 * (openib_con_quiesce), so that none of them is left in the queue when the
 * id is used again; the generation drops any that were not. Once its queue
 * pair is destroyed (openib_con_destroyed), the rest can no longer come:
 * they keep no room. Only a queue pair that could not be destroyed leaves
 * its outstanding count as stale room in its queue.
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

/* A new queue of size entries at cqs[ncq]: 0, or -1 (errno set). */
static int cq_add(unsigned size)
{
    if (openib_dev.ncq == openib_dev.cq_cap) {
        unsigned cap    = openib_dev.cq_cap ? openib_dev.cq_cap * 2 : 4;
        openib_cq_t *cq = realloc(openib_dev.cqs, cap * sizeof(*cq));
        if (!cq) return -1;
        openib_dev.cqs    = cq;
        openib_dev.cq_cap = cap;
    }
    struct ibv_cq *cq = ibv_create_cq(openib_dev.ctx, (int)size, NULL, openib_dev.chan, 0);
    if (!cq) return -1;
    openib_dev.cqs[openib_dev.ncq++] = (openib_cq_t){.cq = cq, .size = (unsigned)cq->cqe};
    return 0;
}

int openib_cq_open(void)
{
    pscom_env_clamp_uint("PSP_OPENIB_COMPQ_SIZE", &openib_cfg.compq_size, 1,
                         (unsigned)openib_dev.max_cqe);
    pscom_list_init(&openib_dev.ready);
    if (cq_add(openib_cfg.compq_size) < 0) {
        plog_err("openib: %s: cannot create a completion queue of %u entries (%s); the openib "
                 "transport is disabled", openib_dev.name, openib_cfg.compq_size,
                 strerror(errno));
        openib_cq_close();
        return -1;
    }
    return 0;
}

void openib_cq_close(void)
{
    openib_events_drain(); /* ibv_destroy_cq waits for unacknowledged events */
    for (unsigned i = 0; i < openib_dev.ncq; i++) ibv_destroy_cq(openib_dev.cqs[i].cq);
    free(openib_dev.cqs);
    openib_dev.cqs = NULL;
    openib_dev.ncq = openib_dev.cq_cap = 0;
    free(openib_dev.tab);
    free(openib_dev.gen);
    free(openib_dev.free_idx);
    openib_dev.tab      = NULL;
    openib_dev.gen      = NULL;
    openib_dev.free_idx = NULL;
    openib_dev.tab_cap = openib_dev.tab_used = openib_dev.nfree = 0;
}

int openib_cq_arm(void)
{
    for (unsigned i = 0; i < openib_dev.ncq; i++)
        if (ibv_req_notify_cq(openib_dev.cqs[i].cq, 0)) return -1;
    return 0;
}

/* Room for n more outstanding completions in queue q (growing it if it
 * can): 1, or 0. */
static int cq_room(openib_cq_t *q, unsigned n)
{
    unsigned need = q->need + q->stale + n;
    if (need <= q->size) return 1;
    unsigned max = (unsigned)openib_dev.max_cqe;
    if (q->fixed || need > max) return 0;
    unsigned size = q->size > max / 2 ? max : q->size * 2;
    if (size < need) size = need;
    int err = ibv_resize_cq(q->cq, (int)size);
    if (err) {
        plog_dbg("openib: a completion queue cannot grow to %u entries (%s): more queues",
                 size, strerror(err));
        q->fixed = 1;
        return 0;
    }
    q->size = (unsigned)q->cq->cqe;
    plog_dbg("openib: completion queue %u now %u entries", (unsigned)(q - openib_dev.cqs),
             q->size);
    return q->size >= need;
}

/* A queue with room for n more outstanding completions: its index, or -1. */
static int cq_reserve(unsigned n)
{
    if (openib_dev.cq_broken) return -1;
    unsigned i;
    for (i = 0; i < openib_dev.ncq; i++)
        if (cq_room(&openib_dev.cqs[i], n)) break;
    if (i == openib_dev.ncq) {
        /* twice the last one's size: a few queues for many connections */
        unsigned max  = (unsigned)openib_dev.max_cqe;
        unsigned last = openib_dev.ncq ? openib_dev.cqs[openib_dev.ncq - 1].size : 0;
        unsigned size = last > max / 2 ? max : 2 * last;
        if (size < openib_cfg.compq_size) size = openib_cfg.compq_size;
        if (size < n) size = n;
        if (size > max || cq_add(size) < 0) {
            plog_dbg("openib: no completion queue with room for %u entries", n);
            return -1;
        }
    }
    openib_dev.cqs[i].need += n;
    return (int)i;
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
    int cqi = cq_reserve(openib_con_wrs(oc));
    if (cqi < 0) {
        openib_dev.free_idx[openib_dev.nfree++] = idx;
        return -1;
    }
    oc->cqi             = (unsigned)cqi;
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
    openib_dev.cqs[oc->cqi].need -= openib_con_wrs(oc);
    openib_dev.cqs[oc->cqi].stale += oc->wr_out;
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

void openib_con_destroyed(openib_con_t *oc)
{
    if (!oc->id || !oc->wr_out) return;
    /* The queue pair is gone: no completion of it comes any more. Those
     * still in the queue are taken now; the rest the provider dropped
     * with the queue pair (mlx5 cleans them out of the queue), so they
     * keep no room. */
    openib_cq_take();
    oc->wr_out = 0;
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

static void dispatch(openib_cq_t *q, const struct ibv_wc *wc)
{
    openib_con_t *oc = con_of(wc->wr_id);
    if (!oc) { /* of a connection gone before its flush ended */
        if (q->stale) q->stale--;
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
    if (openib_dev.cq_broken) return 0;
    for (unsigned i = 0; i < openib_dev.ncq; i++) {
        openib_cq_t *q = &openib_dev.cqs[i];
        for (;;) {
            int n = ibv_poll_cq(q->cq, WC_BATCH, wc);
            if (n < 0) {
                plog_err("openib: ibv_poll_cq failed: every openib connection fails");
                openib_dev.cq_broken = 1;
                return taken + 1; /* the poller's next pass says it */
            }
            for (int k = 0; k < n; k++) dispatch(q, &wc[k]);
            taken += n;
            if (n < WC_BATCH) break;
        }
    }
    return taken;
}
