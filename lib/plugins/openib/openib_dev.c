/*
 * openib_dev.c - the process-wide verbs state: the device and port that
 * PSP_OPENIB_HCA / PSP_OPENIB_PORT select, and its protection domain.
 *
 * Without a device (no HCA, no kernel support, no active port with a LID)
 * the plugin disables itself with one line that says why, at the default
 * log level (the user asked for openib with PSP_OPENIB); connections then
 * take the next transport.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "openib_priv.h"

openib_dev_t openib_dev;

#define DISABLED "; the openib transport is disabled"

/* The first active port of ctx with a LID (or the configured one). 0: none. */
static uint8_t usable_port(struct ibv_context *ctx, unsigned nports, struct ibv_port_attr *attr)
{
    for (unsigned p = 1; p <= nports; p++) {
        if (openib_cfg.port && p != openib_cfg.port) continue;
        memset(attr, 0, sizeof(*attr));
        if (ibv_query_port(ctx, (uint8_t)p, attr)) continue;
        if (attr->state == IBV_PORT_ACTIVE && attr->lid != 0) return (uint8_t)p;
    }
    return 0;
}

/* Open the device that has a usable port. why: what was missing. */
static struct ibv_context *open_usable(struct ibv_device **list, int n, uint8_t *port,
                                       struct ibv_port_attr *pattr,
                                       struct ibv_device_attr *dattr, const char **why)
{
    *why = openib_cfg.hca ? "device not found" : "no device";
    for (int i = 0; i < n; i++) {
        const char *name = ibv_get_device_name(list[i]);
        if (openib_cfg.hca && (!name || strcmp(name, openib_cfg.hca) != 0)) continue;
        struct ibv_context *ctx = ibv_open_device(list[i]);
        if (!ctx) {
            *why = "cannot open the device";
            continue;
        }
        if (ibv_query_device(ctx, dattr) == 0 &&
            (*port = usable_port(ctx, dattr->phys_port_cnt, pattr)) != 0)
            return ctx;
        *why = "no active port with a LID";
        ibv_close_device(ctx);
    }
    return NULL;
}

static enum ibv_mtu cfg_mtu(enum ibv_mtu active)
{
    static const enum ibv_mtu mtus[] = {IBV_MTU_256, IBV_MTU_512, IBV_MTU_1024};
    enum ibv_mtu want = mtus[openib_cfg.path_mtu - 1];
    return active && active < want ? active : want;
}

/* PSP_OPENIB_LID_OFFSET within the port's 2^LMC LIDs: a LID beyond them
 * reaches nobody, and every message of the connections would fail (the
 * handshake cannot tell). Outside: said once, 0 used. */
static unsigned lid_offset(const struct ibv_port_attr *pattr)
{
    unsigned lids = 1u << (pattr->lmc & 7);
    if (openib_cfg.lid_offset >= 0 && (unsigned)openib_cfg.lid_offset < lids)
        return (unsigned)openib_cfg.lid_offset;
    plog_err("PSP_OPENIB_LID_OFFSET=%d: the port has %u LID%s (LMC %u); using 0",
             openib_cfg.lid_offset, lids, lids == 1 ? "" : "s", (unsigned)pattr->lmc);
    return 0;
}

int openib_dev_open(void)
{
    int n = 0;
    struct ibv_device **list = ibv_get_device_list(&n);
    if (!list) {
        plog_err("openib: no verbs devices (%s)" DISABLED,
                 errno == ENOSYS ? "no RDMA support in the kernel" : strerror(errno));
        return -1;
    }
    uint8_t port = 0;
    struct ibv_port_attr pattr;
    struct ibv_device_attr dattr;
    const char *why;
    struct ibv_context *ctx = open_usable(list, n, &port, &pattr, &dattr, &why);
    if (!ctx) {
        plog_err("openib: %s%s%s" DISABLED, why, openib_cfg.hca ? ": " : "",
                 openib_cfg.hca ? openib_cfg.hca : "");
        ibv_free_device_list(list);
        return -1;
    }
    snprintf(openib_dev.name, sizeof(openib_dev.name), "%s",
             ibv_get_device_name(ctx->device) ? ibv_get_device_name(ctx->device) : "?");
    ibv_free_device_list(list);

    openib_dev.pd = ibv_alloc_pd(ctx);
    if (!openib_dev.pd) {
        plog_err("openib: %s: cannot allocate a protection domain" DISABLED, openib_dev.name);
        ibv_close_device(ctx);
        return -1;
    }
    openib_dev.ctx       = ctx;
    openib_dev.port      = port;
    openib_dev.lid       = (uint16_t)(pattr.lid + lid_offset(&pattr));
    openib_dev.mtu       = cfg_mtu(pattr.active_mtu);
    openib_dev.max_cqe   = dattr.max_cqe > 0 ? dattr.max_cqe : 1;
    openib_dev.max_msg   = pattr.max_msg_sz ? pattr.max_msg_sz : 1u << 20;
    pscom_list_init(&openib_dev.cons);
    plog_dbg("openib: %s port %u lid %u mtu %d", openib_dev.name, port, openib_dev.lid,
             128 << openib_dev.mtu);
    return 0;
}

void openib_dev_close(void)
{
    if (!openib_dev.ctx) return;
    ibv_dealloc_pd(openib_dev.pd);
    ibv_close_device(openib_dev.ctx);
    openib_dev.pd  = NULL;
    openib_dev.ctx = NULL;
}
