/*
 * pending_module.c - a libpscom4openib.so (loaded from PSP_PLUGINDIR in
 * place of the real one) whose handshake step returns PSCOM_PLUGIN_PENDING
 * and fails at the poller's next pass, for itest_precon_pending: the core
 * must then go on to the next transport. PENDING_STEP in the environment
 * says which step pends: "connect" (con_connect, on the connecting side)
 * or "confirm" (con_confirm, on the accepting side). Each failure is
 * logged as "pending: the <step> step failed".
 *
 * With PENDING_STEP=blob nothing pends: every blob of the handshake is as
 * large as a blob may be (PSCOM_PRECON_BLOB_MAX), with content of its own
 * that the receiving side checks and logs as "pending: blob <n> of <len>
 * bytes intact" (n = 1 offer, 2 reply, 3 confirmation); then con_confirm
 * fails, and the handshake goes on to the next transport.
 */
#include <stdlib.h>
#include <string.h>

#include "pscom_plugin.h"

typedef struct pend_con {
    pscom_list_t next; /* in pending while its step pends */
    pscom_con_t *con;
} pend_con_t;

static pscom_list_t pending = PSCOM_LIST_INIT(pending);

static int pend_poll(pscom_poller_t *poller)
{
    if (pscom_list_empty(&pending)) {
        pscom_poller_del(poller);
        return 0;
    }
    pend_con_t *pc = pscom_list_entry(pending.next, pend_con_t, next);
    pscom_list_del(&pc->next);
    pscom_list_init(&pc->next);
    plog_err("%s: pending: the %s step failed", pscom_con_name(pc->con), getenv("PENDING_STEP"));
    pscom_con_handshake_done(pc->con, -1);
    return 1;
}

static pscom_poller_t poller = {.poll = pend_poll};

static int big_blobs(void)
{
    const char *want = getenv("PENDING_STEP");
    return want && !strcmp(want, "blob");
}

/* blob number n: PSCOM_PRECON_BLOB_MAX bytes */
static size_t blob_fill(void *blob, unsigned n)
{
    unsigned char *b = blob;
    for (size_t i = 0; i < PSCOM_PRECON_BLOB_MAX; i++) b[i] = (unsigned char)(i * 7 + i / 251 + n);
    return PSCOM_PRECON_BLOB_MAX;
}

/* 0 if blob (len bytes) is blob number n, whole (logged) */
static int blob_check(pscom_con_t *con, const void *blob, size_t len, unsigned n)
{
    const unsigned char *b = blob;
    if (len != PSCOM_PRECON_BLOB_MAX) return -1;
    for (size_t i = 0; i < len; i++)
        if (b[i] != (unsigned char)(i * 7 + i / 251 + n)) return -1;
    plog_err("%s: pending: blob %u of %zu bytes intact", pscom_con_name(con), n, len);
    return 0;
}

static int pend(pscom_con_t *con, const char *step)
{
    const char *want = getenv("PENDING_STEP");
    if (!want || strcmp(want, step)) return 0;
    pend_con_t *pc = pscom_con_plugin_priv(con);
    pc->con        = con;
    pscom_list_add_tail(&pc->next, &pending);
    pscom_poller_add(&poller);
    return PSCOM_PLUGIN_PENDING;
}

static int pend_offer(pscom_con_t *con, const pscom_precon_peer_t *peer, void *blob, size_t *len)
{
    pend_con_t *pc = pscom_con_plugin_priv(con);
    pscom_list_init(&pc->next);
    if (big_blobs()) {
        *len = blob_fill(blob, 1);
        return 0;
    }
    *(char *)blob = 'P';
    *len          = 1;
    return 0;
}

static int pend_accept(pscom_con_t *con, const pscom_precon_peer_t *peer, const void *blob,
                       size_t len, void *reply, size_t *reply_len)
{
    pend_con_t *pc = pscom_con_plugin_priv(con);
    pscom_list_init(&pc->next);
    if (big_blobs()) {
        if (blob_check(con, blob, len, 1) < 0) return -1;
        *reply_len = blob_fill(reply, 2);
        return 0;
    }
    if (len != 1 || *(const char *)blob != 'P') return -1;
    *(char *)reply = 'P';
    *reply_len     = 1;
    return 0;
}

static int pend_connect(pscom_con_t *con, const void *reply, size_t len, void *confirm,
                        size_t *confirm_len)
{
    if (big_blobs()) {
        if (blob_check(con, reply, len, 2) < 0) return -1;
        *confirm_len = blob_fill(confirm, 3);
        return 0;
    }
    if (len != 1 || *(const char *)reply != 'P') return -1;
    *(char *)confirm = 'P';
    *confirm_len     = 1;
    return pend(con, "connect");
}

static int pend_confirm(pscom_con_t *con, const void *confirm, size_t len)
{
    if (big_blobs()) {
        blob_check(con, confirm, len, 3);
        return -1; /* on to tcp */
    }
    if (len != 1 || *(const char *)confirm != 'P') return -1;
    return pend(con, "confirm");
}

static void pend_abort(pscom_con_t *con)
{
    pend_con_t *pc = pscom_con_plugin_priv(con);
    pscom_list_del(&pc->next); /* if its step pends: it is over */
    pscom_list_init(&pc->next);
}

static int pend_start(pscom_con_t *con, int *fd)
{
    return -1; /* never reached: every step of ours fails */
}

static void pend_write_start(pscom_con_t *con)
{
}

static void pend_close(pscom_con_t *con)
{
}

static const pscom_plugin_ops_t pend_ops = {
    .con_offer   = pend_offer,
    .con_accept  = pend_accept,
    .con_connect = pend_connect,
    .con_confirm = pend_confirm,
    .con_abort   = pend_abort,
    .con_start   = pend_start,
    .write_start = pend_write_start,
    .close       = pend_close,
};

PSCOM_PLUGIN_DEFINE(openib) = {
    .abi_version   = PSCOM_PLUGIN_ABI_VERSION,
    .desc_size     = sizeof(pscom_plugin_desc_t),
    .name          = "openib",
    .con_type      = PSCOM_CON_TYPE_OPENIB,
    .priority      = 50,
    .user_priority = 1,
    .con_priv_size = sizeof(pend_con_t),
    .ops           = &pend_ops,
};
