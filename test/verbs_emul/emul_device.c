/*
 * emul_device.c - the software HCA's devices, contexts, protection domains,
 * memory regions and completion queues (see README.md).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "emul_priv.h"
#include "verbs_emul.h"

static pthread_mutex_t vemul_dev_lock = PTHREAD_MUTEX_INITIALIZER;
static struct vemul_device vemul_devices[VEMUL_MAX_DEVICES];
static pid_t vemul_dev_pid; /* process that chose the lids */

uint32_t vemul_random(void)
{
    uint32_t r;
    if (getrandom(&r, sizeof(r), GRND_NONBLOCK) == (ssize_t)sizeof(r)) return r;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    static uint32_t fallback;
    fallback = fallback * 1103515245u + 12345u + (uint32_t)ts.tv_nsec + (uint32_t)getpid();
    return fallback;
}

/* VERBS_EMUL_FAIL lists the calls that fail; read at every call. */
int vemul_fail(const char *name)
{
    const char *s = getenv("VERBS_EMUL_FAIL");
    size_t n = strlen(name);
    while (s && *s) {
        const char *e = strchr(s, ',');
        size_t len = e ? (size_t)(e - s) : strlen(s);
        if (len == n && strncmp(s, name, n) == 0) return 1;
        s = e ? e + 1 : NULL;
    }
    return 0;
}

static int vemul_env_int(const char *name, int dflt, int min, int max)
{
    const char *s = getenv(name);
    if (!s || !*s) return dflt;
    char *end;
    long v = strtol(s, &end, 0);
    if (*end || v < min) return min;
    if (v > max) return max;
    return (int)v;
}

static void vemul_gid_of_lid(uint16_t lid, union ibv_gid *gid)
{
    memset(gid, 0, sizeof(*gid));
    gid->raw[0] = 0xfe; /* link-local subnet prefix fe80::/64 */
    gid->raw[1] = 0x80;
    memcpy(&gid->raw[8], "vemu", 4); /* marks a GID made up here */
    gid->raw[14] = (uint8_t)(lid >> 8);
    gid->raw[15] = (uint8_t)lid;
}

uint16_t verbs_emul_lid_of_gid(const union ibv_gid *gid)
{
    if (gid->raw[0] != 0xfe || gid->raw[1] != 0x80 || memcmp(&gid->raw[8], "vemu", 4) != 0)
        return 0;
    return (uint16_t)(gid->raw[14] << 8 | gid->raw[15]);
}

/* ------------------------------------------------------------ devices */

struct ibv_device **(ibv_get_device_list)(int *num_devices)
{
    int n = vemul_env_int("VERBS_EMUL_DEVICES", 1, 0, VEMUL_MAX_DEVICES);
    struct ibv_device **list = calloc((size_t)n + 1, sizeof(*list));
    if (!list) {
        errno = ENOMEM;
        return NULL;
    }
    pthread_mutex_lock(&vemul_dev_lock);
    if (vemul_dev_pid != getpid()) {
        vemul_dev_pid = getpid();
        for (int i = 0; i < VEMUL_MAX_DEVICES; i++) {
            struct vemul_device *d = &vemul_devices[i];
            memset(&d->dev, 0, sizeof(d->dev));
            d->dev.node_type = IBV_NODE_CA;
            d->dev.transport_type = IBV_TRANSPORT_IB;
            snprintf(d->dev.name, sizeof(d->dev.name), "emul%d", i);
            snprintf(d->dev.dev_name, sizeof(d->dev.dev_name), "uverbs-emul%d", i);
            snprintf(d->dev.dev_path, sizeof(d->dev.dev_path), "/nonexistent/uverbs-emul%d", i);
            snprintf(d->dev.ibdev_path, sizeof(d->dev.ibdev_path), "/nonexistent/emul%d", i);
            d->lid = (uint16_t)(1 + vemul_random() % 0xbfff);
        }
    }
    pthread_mutex_unlock(&vemul_dev_lock);
    for (int i = 0; i < n; i++) list[i] = &vemul_devices[i].dev;
    if (num_devices) *num_devices = n;
    return list;
}

void ibv_free_device_list(struct ibv_device **list)
{
    free(list);
}

const char *ibv_get_device_name(struct ibv_device *device)
{
    return device ? device->name : NULL;
}

struct ibv_context *ibv_open_device(struct ibv_device *device)
{
    if (!device || vemul_fail("open_device")) {
        errno = device ? ENOMEM : EINVAL;
        return NULL;
    }
    struct vemul_context *vc = calloc(1, sizeof(*vc));
    if (vc) vc->scratch = malloc(VEMUL_FRAG);
    if (!vc || !vc->scratch) {
        free(vc);
        errno = ENOMEM;
        return NULL;
    }
    pthread_mutex_init(&vc->lock, NULL);
    pthread_mutex_init(&vc->ctx.mutex, NULL);
    /* the HCA engine runs in the process that opens the device; a context
     * must not be used across fork() (README.md) */
    vc->pid = getpid();
    int err = vemul_engine_start(vc);
    if (err) {
        pthread_mutex_destroy(&vc->lock);
        pthread_mutex_destroy(&vc->ctx.mutex);
        free(vc->scratch);
        free(vc);
        errno = err;
        return NULL;
    }
    vc->lid = ((struct vemul_device *)device)->lid;
    vc->next_key = vemul_random() & 0xffff;
    vc->ctx.device = device;
    vc->ctx.cmd_fd = -1;
    vc->ctx.async_fd = -1;
    vc->ctx.num_comp_vectors = 1;
    vc->ctx.abi_compat = NULL; /* not an extended verbs_context */
    vc->ctx.ops.poll_cq = vemul_poll_cq;
    vc->ctx.ops.req_notify_cq = vemul_req_notify_cq;
    vc->ctx.ops.post_send = vemul_post_send;
    vc->ctx.ops.post_recv = vemul_post_recv;
    return &vc->ctx;
}

/* Stops the engine, then frees whatever the application left open (as the
 * kernel would on close); unsent WRs are dropped. */
int ibv_close_device(struct ibv_context *context)
{
    struct vemul_context *vc = vemul_ctx(context);
    vemul_engine_stop(vc);
    while (vc->qps) {
        struct vemul_qp *q = vc->qps;
        vc->qps = q->next;
        vemul_qp_free(q);
    }
    while (vc->cqs) {
        struct vemul_cq *c = vc->cqs;
        vc->cqs = c->next;
        pthread_mutex_destroy(&c->cq.mutex);
        pthread_cond_destroy(&c->cq.cond);
        close(c->rx_ep);
        free(c->ring);
        free(c);
    }
    vemul_free_mrs(vc);
    while (vc->pds) {
        struct vemul_pd *p = vc->pds;
        vc->pds = p->next;
        free(p);
    }
    while (vc->chans) {
        struct vemul_chan *ch = vc->chans;
        vc->chans = ch->next;
        close(ch->ch.fd);
        free(ch);
    }
    pthread_mutex_destroy(&vc->lock);
    pthread_mutex_destroy(&vc->ctx.mutex);
    free(vc->scratch);
    free(vc);
    return 0;
}

int ibv_query_device(struct ibv_context *context, struct ibv_device_attr *a)
{
    struct vemul_context *vc = vemul_ctx(context);
    memset(a, 0, sizeof(*a));
    snprintf(a->fw_ver, sizeof(a->fw_ver), "verbs-emul %d", VEMUL_VERSION);
    a->node_guid = htobe64(0x0002c90300000000ull | vc->lid);
    a->sys_image_guid = a->node_guid;
    a->max_mr_size = 1ull << 40;
    a->page_size_cap = 0xfffff000;
    a->vendor_id = 0xffffff;
    a->vendor_part_id = 0x5645;
    a->hw_ver = 1;
    a->max_qp = 131072;
    a->max_qp_wr = VEMUL_MAX_WR;
    a->device_cap_flags = IBV_DEVICE_RC_RNR_NAK_GEN | IBV_DEVICE_PORT_ACTIVE_EVENT;
    a->max_sge = VEMUL_MAX_SGE;
    a->max_sge_rd = VEMUL_MAX_SGE;
    a->max_cq = 65536;
    a->max_cqe = VEMUL_MAX_CQE;
    a->max_mr = 1 << 24;
    a->max_pd = 1 << 24;
    a->max_qp_rd_atom = VEMUL_MAX_RD_ATOM;
    a->max_res_rd_atom = VEMUL_MAX_RD_ATOM * 131072;
    a->max_qp_init_rd_atom = VEMUL_MAX_RD_ATOM;
    a->atomic_cap = IBV_ATOMIC_NONE;
    a->max_ah = 1 << 24;
    a->max_pkeys = 1;
    a->local_ca_ack_delay = 16;
    a->phys_port_cnt = 1;
    return 0;
}

int(ibv_query_port)(struct ibv_context *context, uint8_t port_num,
                    struct _compat_ibv_port_attr *port_attr)
{
    struct vemul_context *vc = vemul_ctx(context);
    if (port_num != 1 || vemul_fail("query_port")) return EINVAL;
    /* the caller's inline wrapper zeroed a full struct ibv_port_attr; only
     * fields before 'flags' (the old struct's extent) are written */
    struct ibv_port_attr *a = (struct ibv_port_attr *)port_attr;
    const char *st = getenv("VERBS_EMUL_PORT_STATE");
    int down = st && strcmp(st, "down") == 0;
    a->state = down ? IBV_PORT_DOWN : IBV_PORT_ACTIVE;
    a->max_mtu = IBV_MTU_4096;
    a->active_mtu = IBV_MTU_4096;
    a->gid_tbl_len = 1;
    a->port_cap_flags = 0;
    a->max_msg_sz = VEMUL_MAX_MSG;
    a->pkey_tbl_len = 1;
    a->lid = vc->lid;
    a->sm_lid = 1;
    a->lmc = 0;
    a->max_vl_num = 1;
    a->subnet_timeout = 18;
    a->active_width = 2; /* 4x */
    a->active_speed = 32; /* EDR */
    a->phys_state = down ? 3 /* disabled */ : 5 /* link up */;
    a->link_layer = IBV_LINK_LAYER_INFINIBAND;
    return 0;
}

int ibv_query_gid(struct ibv_context *context, uint8_t port_num, int index, union ibv_gid *gid)
{
    if (port_num != 1 || index != 0) return -1;
    vemul_gid_of_lid(vemul_ctx(context)->lid, gid);
    return 0;
}

/* ------------------------------------------------------------ PDs */

struct ibv_pd *ibv_alloc_pd(struct ibv_context *context)
{
    struct vemul_context *vc = vemul_ctx(context);
    struct vemul_pd *p = vemul_fail("alloc_pd") ? NULL : calloc(1, sizeof(*p));
    if (!p) {
        errno = ENOMEM;
        return NULL;
    }
    pthread_mutex_lock(&vc->lock);
    p->pd.context = context;
    p->pd.handle = vc->npd++;
    p->next = vc->pds;
    vc->pds = p;
    pthread_mutex_unlock(&vc->lock);
    return &p->pd;
}

int ibv_dealloc_pd(struct ibv_pd *pd)
{
    struct vemul_context *vc = vemul_ctx(pd->context);
    struct vemul_pd *p = (struct vemul_pd *)pd;
    pthread_mutex_lock(&vc->lock);
    if (p->nmr || p->nqp) {
        pthread_mutex_unlock(&vc->lock);
        return EBUSY;
    }
    struct vemul_pd **pp = &vc->pds;
    while (*pp != p) pp = &(*pp)->next;
    *pp = p->next;
    pthread_mutex_unlock(&vc->lock);
    free(p);
    return 0;
}

/* ------------------------------------------------------------ MRs */

struct vemul_mr *vemul_mr_find(struct vemul_context *vc, uint32_t lkey)
{
    struct vemul_mr *m = vc->mrs[lkey % VEMUL_MR_BUCKETS];
    while (m && m->mr.lkey != lkey) m = m->next;
    return m;
}

int vemul_sge_ok(struct vemul_context *vc, struct ibv_pd *pd, const struct ibv_sge *sge,
                 unsigned access)
{
    struct vemul_mr *m = vemul_mr_find(vc, sge->lkey);
    if (!m || m->mr.pd != pd || (m->access & access) != access) return -1;
    uintptr_t start = (uintptr_t)m->mr.addr;
    if (sge->addr < start || sge->addr - start > m->mr.length ||
        sge->length > m->mr.length - (sge->addr - start))
        return -1;
    return 0;
}

struct ibv_mr *ibv_reg_mr_iova2(struct ibv_pd *pd, void *addr, size_t length, uint64_t iova,
                                unsigned int access)
{
    struct vemul_context *vc = vemul_ctx(pd->context);
    if (vemul_fail("reg_mr")) {
        errno = ENOMEM;
        return NULL;
    }
    if ((!addr && length) || length > (1ull << 40) || iova != (uintptr_t)addr) {
        errno = EINVAL; /* an iova other than the address is not emulated */
        return NULL;
    }
    struct vemul_mr *m = calloc(1, sizeof(*m));
    if (!m) {
        errno = ENOMEM;
        return NULL;
    }
    pthread_mutex_lock(&vc->lock);
    m->mr.context = pd->context;
    m->mr.pd = pd;
    m->mr.addr = addr;
    m->mr.length = length;
    m->mr.handle = vc->next_key;
    /* key: a counter in the upper bits, a random byte below, so a stale key
     * rarely names a later MR */
    m->mr.lkey = (vc->next_key++ << 8) | (vemul_random() & 0xff);
    m->mr.rkey = m->mr.lkey;
    m->access = access;
    m->next = vc->mrs[m->mr.lkey % VEMUL_MR_BUCKETS];
    vc->mrs[m->mr.lkey % VEMUL_MR_BUCKETS] = m;
    ((struct vemul_pd *)pd)->nmr++;
    pthread_mutex_unlock(&vc->lock);
    return &m->mr;
}

struct ibv_mr *(ibv_reg_mr)(struct ibv_pd *pd, void *addr, size_t length, int access)
{
    return ibv_reg_mr_iova2(pd, addr, length, (uintptr_t)addr, (unsigned)access);
}

struct ibv_mr *(ibv_reg_mr_iova)(struct ibv_pd *pd, void *addr, size_t length, uint64_t iova,
                                 int access)
{
    return ibv_reg_mr_iova2(pd, addr, length, iova, (unsigned)access);
}

int ibv_dereg_mr(struct ibv_mr *mr)
{
    struct vemul_context *vc = vemul_ctx(mr->context);
    pthread_mutex_lock(&vc->lock);
    struct vemul_mr **pp = &vc->mrs[mr->lkey % VEMUL_MR_BUCKETS];
    while (*pp && &(*pp)->mr != mr) pp = &(*pp)->next;
    if (!*pp) {
        pthread_mutex_unlock(&vc->lock);
        return EINVAL;
    }
    *pp = (*pp)->next;
    ((struct vemul_pd *)mr->pd)->nmr--;
    pthread_mutex_unlock(&vc->lock);
    free(mr);
    return 0;
}

void vemul_free_mrs(struct vemul_context *vc)
{
    for (int i = 0; i < VEMUL_MR_BUCKETS; i++) {
        while (vc->mrs[i]) {
            struct vemul_mr *m = vc->mrs[i];
            vc->mrs[i] = m->next;
            free(m);
        }
    }
}

/* ------------------------------------------------------------ completion channels */

/* Events (README.md): req_notify_cq arms a CQ; the next CQE added to it
 * queues one event on its channel and disarms it. The channel's fd (an
 * eventfd) holds 1 while events are queued and 0 otherwise; it is changed
 * only here, under the context's lock, so its read never blocks even when
 * the application left the fd blocking. */
static void vemul_chan_fd_set(struct vemul_chan *ch, int readable)
{
    uint64_t v = 1;
    if (readable) {
        while (write(ch->ch.fd, &v, sizeof(v)) < 0 && errno == EINTR) {
        }
    } else {
        /* a read only when there is something to read (the application
         * might have read the fd itself, which it must not) */
        struct pollfd p = {.fd = ch->ch.fd, .events = POLLIN};
        if (poll(&p, 1, 0) == 1 && (p.revents & POLLIN))
            while (read(ch->ch.fd, &v, sizeof(v)) < 0 && errno == EINTR) {
            }
    }
}

/* appends one event of c to its channel's queue */
static void vemul_cq_event(struct vemul_cq *c)
{
    struct vemul_chan *ch = (struct vemul_chan *)c->cq.channel;
    c->armed = 0;
    if (!ch) return; /* armed without a channel: the event goes nowhere */
    if (c->ev_queued++) return; /* already queued */
    c->ev_next = NULL;
    if (ch->ev_tail)
        ch->ev_tail->ev_next = c;
    else
        ch->ev_head = c;
    ch->ev_tail = c;
    if (ch->ev_head == c) vemul_chan_fd_set(ch, 1);
}

/* removes c from its channel's queue (all of its queued events) */
static void vemul_cq_unqueue(struct vemul_cq *c)
{
    struct vemul_chan *ch = (struct vemul_chan *)c->cq.channel;
    if (!ch || !c->ev_queued) return;
    struct vemul_cq *prev = NULL, **pp = &ch->ev_head;
    while (*pp != c) {
        prev = *pp;
        pp = &(*pp)->ev_next;
    }
    *pp = c->ev_next;
    if (ch->ev_tail == c) ch->ev_tail = prev;
    c->ev_next = NULL;
    c->ev_queued = 0;
    if (!ch->ev_head) vemul_chan_fd_set(ch, 0);
}

/* The fd is close-on-exec and blocking, as a real channel's is; an
 * application sets O_NONBLOCK with fcntl() if it wants. */
struct ibv_comp_channel *ibv_create_comp_channel(struct ibv_context *context)
{
    struct vemul_context *vc = vemul_ctx(context);
    struct vemul_chan *ch = calloc(1, sizeof(*ch));
    if (!ch) {
        errno = ENOMEM;
        return NULL;
    }
    ch->ch.fd = eventfd(0, EFD_CLOEXEC);
    if (ch->ch.fd < 0) {
        free(ch);
        return NULL;
    }
    ch->ch.context = context;
    pthread_mutex_lock(&vc->lock);
    ch->next = vc->chans;
    vc->chans = ch;
    pthread_mutex_unlock(&vc->lock);
    return &ch->ch;
}

int ibv_destroy_comp_channel(struct ibv_comp_channel *channel)
{
    struct vemul_context *vc = vemul_ctx(channel->context);
    struct vemul_chan *ch = (struct vemul_chan *)channel;
    pthread_mutex_lock(&vc->lock);
    if (channel->refcnt) { /* CQs are bound to it (their events with them) */
        pthread_mutex_unlock(&vc->lock);
        return EBUSY;
    }
    struct vemul_chan **pp = &vc->chans;
    while (*pp != ch) pp = &(*pp)->next;
    *pp = ch->next;
    pthread_mutex_unlock(&vc->lock);
    close(channel->fd);
    free(ch);
    return 0;
}

/* Takes the oldest event. With none queued, waits until the fd is readable
 * (poll(), so a signal ends the wait with EINTR), or fails with EAGAIN if
 * the application made the fd O_NONBLOCK. A CQ with more than one event
 * queued goes to the back of the queue after each. */
int ibv_get_cq_event(struct ibv_comp_channel *channel, struct ibv_cq **cq, void **cq_context)
{
    struct vemul_context *vc = vemul_ctx(channel->context);
    struct vemul_chan *ch = (struct vemul_chan *)channel;
    for (;;) {
        pthread_mutex_lock(&vc->lock);
        struct vemul_cq *c = ch->ev_head;
        if (c) {
            ch->ev_head = c->ev_next;
            if (!ch->ev_head) ch->ev_tail = NULL;
            c->ev_next = NULL;
            if (--c->ev_queued) { /* more of its events: to the back */
                if (ch->ev_tail)
                    ch->ev_tail->ev_next = c;
                else
                    ch->ev_head = c;
                ch->ev_tail = c;
            }
            if (!ch->ev_head) vemul_chan_fd_set(ch, 0);
            c->ev_unacked++;
            *cq = &c->cq;
            *cq_context = c->cq.cq_context;
            pthread_mutex_unlock(&vc->lock);
            return 0;
        }
        pthread_mutex_unlock(&vc->lock);
        int fl = fcntl(channel->fd, F_GETFL);
        if (fl < 0) return -1;
        if (fl & O_NONBLOCK) {
            errno = EAGAIN;
            return -1;
        }
        struct pollfd p = {.fd = channel->fd, .events = POLLIN};
        if (poll(&p, 1, -1) < 0) return -1; /* EINTR included */
    }
}

void ibv_ack_cq_events(struct ibv_cq *cq, unsigned int nevents)
{
    struct vemul_context *vc = vemul_ctx(cq->context);
    struct vemul_cq *c = (struct vemul_cq *)cq;
    pthread_mutex_lock(&vc->lock);
    /* acknowledging more than was taken is ignored beyond the count */
    c->ev_unacked -= nevents < c->ev_unacked ? nevents : c->ev_unacked;
    cq->comp_events_completed += nevents;
    pthread_mutex_unlock(&vc->lock);
}

/* ------------------------------------------------------------ CQs */

struct ibv_cq *ibv_create_cq(struct ibv_context *context, int cqe, void *cq_context,
                             struct ibv_comp_channel *channel, int comp_vector)
{
    struct vemul_context *vc = vemul_ctx(context);
    if (vemul_fail("create_cq")) {
        errno = ENOMEM;
        return NULL;
    }
    if (cqe < 1 || cqe > VEMUL_MAX_CQE || comp_vector != 0) {
        errno = EINVAL;
        return NULL;
    }
    struct vemul_cq *c = calloc(1, sizeof(*c));
    if (!c) {
        errno = ENOMEM;
        return NULL;
    }
    c->rx_ep = epoll_create1(EPOLL_CLOEXEC);
    if (c->rx_ep < 0) {
        int e = errno;
        free(c);
        errno = e;
        return NULL;
    }
    c->cap = (unsigned)cqe;
    c->cq.context = context;
    c->cq.channel = channel;
    c->cq.cq_context = cq_context;
    c->cq.cqe = cqe;
    pthread_mutex_init(&c->cq.mutex, NULL);
    pthread_cond_init(&c->cq.cond, NULL);
    pthread_mutex_lock(&vc->lock);
    c->cq.handle = vc->ncq++;
    c->next = vc->cqs;
    vc->cqs = c;
    if (channel) channel->refcnt++;
    pthread_mutex_unlock(&vc->lock);
    return &c->cq;
}

int ibv_destroy_cq(struct ibv_cq *cq)
{
    struct vemul_context *vc = vemul_ctx(cq->context);
    struct vemul_cq *c = (struct vemul_cq *)cq;
    pthread_mutex_lock(&vc->lock);
    /* QPs use it, or events were taken and not acknowledged (where a real
     * libibverbs waits for the acknowledgements) */
    if (c->nqp || c->ev_unacked) {
        pthread_mutex_unlock(&vc->lock);
        return EBUSY;
    }
    vemul_cq_unqueue(c); /* events not taken yet are dropped */
    struct vemul_cq **pp = &vc->cqs;
    while (*pp != c) pp = &(*pp)->next;
    *pp = c->next;
    if (cq->channel) cq->channel->refcnt--;
    pthread_mutex_unlock(&vc->lock);
    pthread_mutex_destroy(&cq->mutex);
    pthread_cond_destroy(&cq->cond);
    close(c->rx_ep);
    free(c->ring);
    free(c);
    return 0;
}

/* The new size must hold what the CQ holds now (else EINVAL, as a
 * provider would); entries stay, in order. */
int ibv_resize_cq(struct ibv_cq *cq, int cqe)
{
    struct vemul_context *vc = vemul_ctx(cq->context);
    struct vemul_cq *c = (struct vemul_cq *)cq;
    if (vemul_fail("resize_cq")) return ENOMEM;
    pthread_mutex_lock(&vc->lock);
    if (cqe < 1 || cqe > VEMUL_MAX_CQE || (unsigned)cqe < c->count) {
        pthread_mutex_unlock(&vc->lock);
        return EINVAL;
    }
    c->cap = (unsigned)cqe;
    cq->cqe = cqe;
    pthread_mutex_unlock(&vc->lock);
    return 0;
}

void vemul_cq_push(struct vemul_cq *c, const struct ibv_wc *wc)
{
    if (c->overrun) return;
    /* the event comes for the CQE, or for the overrun (so that a waiter
     * wakes and finds poll_cq failing) */
    if (c->armed) vemul_cq_event(c);
    if (c->count == c->cap) {
        c->overrun = 1;
        fprintf(stderr, "verbs_emul: CQ %p overrun (%u entries): completions lost\n",
                (void *)c, c->cap);
        return;
    }
    if (c->count == c->ring_size) {
        unsigned n = c->ring_size ? c->ring_size * 2 : 64;
        if (n > c->cap) n = c->cap;
        struct ibv_wc *r = malloc((size_t)n * sizeof(*r));
        if (!r) {
            c->overrun = 1;
            fprintf(stderr, "verbs_emul: CQ %p: out of memory: completions lost\n", (void *)c);
            return;
        }
        for (unsigned i = 0; i < c->count; i++) r[i] = c->ring[(c->head + i) % c->ring_size];
        free(c->ring);
        c->ring = r;
        c->ring_size = n;
        c->head = 0;
    }
    c->ring[(c->head + c->count) % c->ring_size] = *wc;
    c->count++;
}

int vemul_poll_cq(struct ibv_cq *cq, int num_entries, struct ibv_wc *wc)
{
    struct vemul_context *vc = vemul_ctx(cq->context);
    struct vemul_cq *c = (struct vemul_cq *)cq;
    pthread_mutex_lock(&vc->lock);
    /* sends that wait for room (only blocked QPs have any), then receives
     * for the QPs whose sockets hold datagrams: an idle poll costs the
     * same whatever the number of QPs, as on an HCA */
    for (struct vemul_qp *q = vc->nblocked && !c->overrun ? vc->qps : NULL; q; q = q->next)
        if (q->tx_blocked && q->qp.send_cq == cq) vemul_qp_progress_tx(q);
    if (!c->overrun && c->nqp) {
        struct epoll_event ev[64];
        int n = epoll_wait(c->rx_ep, ev, 64, 0);
        for (int i = 0; i < n && !c->overrun; i++) vemul_qp_progress_rx(ev[i].data.ptr);
    }
    if (c->overrun) {
        pthread_mutex_unlock(&vc->lock);
        return -1;
    }
    int n = 0;
    while (n < num_entries && c->count) {
        wc[n++] = c->ring[c->head];
        c->head = (c->head + 1) % c->ring_size;
        c->count--;
    }
    pthread_mutex_unlock(&vc->lock);
    return n;
}

/* Arms the CQ once: the next CQE added to it (any, solicited_only or not)
 * raises one event. CQEs already in it do not. The engine now receives
 * for the QPs that use it as receive CQ, so that a message raises the
 * event while nobody polls. */
int vemul_req_notify_cq(struct ibv_cq *cq, int solicited_only)
{
    struct vemul_context *vc = vemul_ctx(cq->context);
    struct vemul_cq *c = (struct vemul_cq *)cq;
    (void)solicited_only;
    int overrun = vemul_fail("cq_overrun"); /* only here: arming is rare, polling is not */
    pthread_mutex_lock(&vc->lock);
    c->armed = 1;
    if (overrun && !c->overrun) {
        /* as vemul_cq_push() does when the CQ is full: the event, then
         * poll_cq fails from now on */
        vemul_cq_event(c);
        c->overrun = 1;
        fprintf(stderr, "verbs_emul: CQ %p overrun (VERBS_EMUL_FAIL=cq_overrun)\n", (void *)c);
    }
    for (struct vemul_qp *q = vc->qps; q; q = q->next)
        if (q->qp.recv_cq == cq) vemul_rx_watch_kick(q);
    pthread_mutex_unlock(&vc->lock);
    return 0;
}

/* ------------------------------------------------------------ misc */

const char *ibv_wc_status_str(enum ibv_wc_status status)
{
    static const char *const str[] = {
        [IBV_WC_SUCCESS] = "success",
        [IBV_WC_LOC_LEN_ERR] = "local length error",
        [IBV_WC_LOC_QP_OP_ERR] = "local QP operation error",
        [IBV_WC_LOC_EEC_OP_ERR] = "local EE context operation error",
        [IBV_WC_LOC_PROT_ERR] = "local protection error",
        [IBV_WC_WR_FLUSH_ERR] = "work request flushed",
        [IBV_WC_MW_BIND_ERR] = "memory window bind error",
        [IBV_WC_BAD_RESP_ERR] = "bad response",
        [IBV_WC_LOC_ACCESS_ERR] = "local access error",
        [IBV_WC_REM_INV_REQ_ERR] = "remote invalid request",
        [IBV_WC_REM_ACCESS_ERR] = "remote access error",
        [IBV_WC_REM_OP_ERR] = "remote operation error",
        [IBV_WC_RETRY_EXC_ERR] = "transport retries exceeded",
        [IBV_WC_RNR_RETRY_EXC_ERR] = "RNR retries exceeded",
        [IBV_WC_LOC_RDD_VIOL_ERR] = "local RDD violation",
        [IBV_WC_REM_INV_RD_REQ_ERR] = "remote invalid RD request",
        [IBV_WC_REM_ABORT_ERR] = "remote aborted",
        [IBV_WC_INV_EECN_ERR] = "invalid EE context number",
        [IBV_WC_INV_EEC_STATE_ERR] = "invalid EE context state",
        [IBV_WC_FATAL_ERR] = "fatal error",
        [IBV_WC_RESP_TIMEOUT_ERR] = "response timeout",
        [IBV_WC_GENERAL_ERR] = "general error",
        [IBV_WC_TM_ERR] = "tag matching error",
        [IBV_WC_TM_RNDV_INCOMPLETE] = "tag matching rendezvous incomplete",
    };
    if ((unsigned)status < sizeof(str) / sizeof(str[0]) && str[status]) return str[status];
    return "unknown";
}
