/*
 * pscom_rma.h - one-sided operations (spec 1.7 / 5.9): memory regions,
 * remote keys, put/get/accumulate/get-accumulate/fetch-op/compare-swap
 * and the legacy rma_write/rma_read.
 *
 * Origin and target exchange messages over the connection; a transport
 * with PSCOM_PLUGIN_CAP_RMA_READ/WRITE (shm with cross-memory attach,
 * loopback) moves put/get data of at least the connection's direct size
 * itself, without the target's CPU, and only a notification goes through
 * the stream (the target's callback still runs once per operation). Every
 * address a peer sends is checked against a registered region before it
 * is touched; a direct operation is checked at the origin against the
 * remote key (the target can only log one on a region deregistered since).
 */
#ifndef PSCOM_RMA_H
#define PSCOM_RMA_H

#include "pscom_list.h"
#include "pscom_types.h"

#define PSCOM_MEMH_MAGIC 0x6d656d68u /* "memh" */
#define PSCOM_RKEY_MAGIC 0x726b6579u /* "rkey" */

struct PSCOM_memh {
    uint32_t magic;
    uint64_t id;            /* what peers name it by (in rkeys and xheaders) */
    pscom_list_t next;      /* registered regions */
    pscom_sock_t *sock;
    char *addr;
    size_t len;
    void (*callbacks[PSCOM_RMA_OP_COUNT])(pscom_request_t *req);
    void *rkey_buf;         /* packed remote key */
    size_t rkey_buf_len;
};

struct PSCOM_rkey {
    uint32_t magic;
    pscom_con_t *con;
    uint64_t base;    /* region in the owner's address space */
    uint64_t len;
    uint64_t memh_id;
};

/* A RMA message header is at hn: set *req to the request receiving its
 * data (NULL: drop it). <0: malformed. */
int pscom_rma_recv(pscom_con_t *con, pscom_header_net_t *hn, pscom_req_t **req);

/* The connection failed: end its pending gets and reads with an error. */
void pscom_rma_fail_con(pscom_con_t *con);

#endif /* PSCOM_RMA_H */
