/*
 * pscom_loop.c - loopback: a connection of a socket to itself. Sending
 * feeds the bytes straight into the same connection's receive side,
 * synchronously, during pscom_post_send().
 */
#include "pscom_loop.h"

#include <string.h>

#include "pscom_con.h"
#include "pscom_plugin.h"

#define LOOP_IOV 16

static int loop_con_start(pscom_con_t *con, int *fd)
{
    return 0;
}

static void loop_write_start(pscom_con_t *con)
{
    struct iovec iov[LOOP_IOV];
    int n;
    /* Feeding a message may queue answers on this same connection (RMA
     * replies, rendezvous CTS/DATA): the running loop picks them up once
     * the current messages are retired; a nested call would feed them twice. */
    if (con->loop_busy) return;
    con->loop_busy = 1;
    while (!con->transport_closed && (n = pscom_write_get_iov(con, iov, LOOP_IOV)) > 0) {
        size_t total = 0;
        int stop     = 0;
        for (int i = 0; i < n && !stop; i++) {
            stop = pscom_read_feed(con, iov[i].iov_base, iov[i].iov_len);
            total += iov[i].iov_len;
        }
        /* a message that closed the connection (a protocol error) ended
         * its send queue: nothing to retire */
        if (con->transport_closed || pscom_write_done(con, total) || stop) break;
    }
    con->loop_busy = 0;
}

static void loop_close(pscom_con_t *con)
{
}

/* The peer's memory is ours: RMA puts/gets and rendezvous data are one
 * memcpy (pscom_con_setup_loop makes every size direct). */
static int loop_rma_read(pscom_con_t *con, void *dst, uint64_t remote_src, size_t len)
{
    memcpy(dst, (const void *)(uintptr_t)remote_src, len);
    return 0;
}

static int loop_rma_write(pscom_con_t *con, const void *src, uint64_t remote_dst, size_t len)
{
    memcpy((void *)(uintptr_t)remote_dst, src, len);
    return 0;
}

static const pscom_plugin_ops_t loop_ops = {
    .con_start   = loop_con_start,
    .write_start = loop_write_start,
    .close       = loop_close,
    .rma_read    = loop_rma_read,
    .rma_write   = loop_rma_write,
};

const pscom_plugin_desc_t pscom_loop_desc = {
    .abi_version = PSCOM_PLUGIN_ABI_VERSION,
    .desc_size   = sizeof(pscom_plugin_desc_t),
    .name        = "loop",
    .con_type    = PSCOM_CON_TYPE_LOOP,
    .caps        = PSCOM_PLUGIN_CAP_RMA_READ | PSCOM_PLUGIN_CAP_RMA_WRITE |
                   PSCOM_PLUGIN_CAP_RNDV_READ,
    .ops         = &loop_ops,
};
