/*
 * pscom_req.h - private request: bookkeeping in front of the public
 * struct PSCOM_request, which comes last because the xheader area and the
 * user area follow it in the same allocation.
 */
#ifndef PSCOM_REQ_H
#define PSCOM_REQ_H

#include <assert.h>

#include "pscom_core.h"
#include "pscom_list.h"
#include "pscom_misuse.h"
#include "pscom_types.h"

#define PSCOM_REQ_MAGIC 0x72657170u /* "preq" */

/* internal flags */
#define PSCOM_REQF_EOF      0x1 /* the EOF message of a connection */
#define PSCOM_REQF_INTERNAL 0x2 /* created by the library (pscom_send, EOF, ...) */
#define PSCOM_REQF_RNDV     0x4 /* unexpected: a rendezvous request, data not yet fetched */
/* io_done runs in completion order and one at a time, also when several
 * threads run the io_done queue (pscom_req_run_io_done): RMA target-side
 * operations, whose callbacks MPI's accumulate ordering needs in order */
#define PSCOM_REQF_SERIAL 0x8

struct pscom_req {
    uint32_t magic;
    uint32_t flags;         /* PSCOM_REQF_* */
    pscom_list_t next;      /* the one queue it is in (send, recv, unexpected, io_done) */
    pscom_list_t *queue;    /* posted receive: head of the queue it is in */
    pscom_list_t next_alt;  /* unexpected: socket's genrecvq_any */
    pscom_list_t all;       /* pscom.requests (PSP_DEBUG_REQ) */
    size_t send_off;        /* send: bytes of pad+header+xheader+data already sent */
    unsigned send_pad;      /* send: bytes of the PAD message in front (stream transports) */
    union {
        size_t data_done;   /* unexpected: data bytes stored so far */
        void *rndv_handle;  /* rendezvous send: the transport's export (rndv_export) */
    };
    pscom_con_t *con;       /* unexpected / internal: its connection */
    uint64_t id;            /* rendezvous / RMA: id the peer refers to it by */
    uint64_t rndv_len;      /* rendezvous receive: the data bytes its CTS asked for */
    /* Internal completion (lock held): called instead of the standard
     * completion when the request's bytes are sent or received, also when
     * it failed (ERROR set). It owns the request from then on. */
    void (*on_done)(pscom_req_t *req);
    pscom_request_t pub;    /* must be last */
};

static inline pscom_req_t *pscom_req_from_pub(pscom_request_t *request)
{
    return pscom_container_of(request, pscom_req_t, pub);
}

/* API entry (pscom_misuse.h): a request of pscom_request_create(), not freed */
#define pscom_api_check_req(r)                                                   \
    pscom_api_check((r) && pscom_req_from_pub(r)->magic == PSCOM_REQ_MAGIC, \
                    "a request of pscom_request_create(), not freed")

/*
 * A request's state is read without the lock: by pscom_wait()'s first test,
 * and by applications that poll pscom_req_is_done() in one thread while
 * another makes progress. So the library writes it with atomic stores,
 * release ordered: whoever sees DONE sees the request's header, xheader
 * and data as well. The writers hold the lock (or own the request), one at
 * a time, hence a load and a store rather than an atomic read-modify-write:
 * plain moves on x86, as before.
 */
#define PSCOM_REQ_STATE_INLINE static inline __attribute__((always_inline))

PSCOM_REQ_STATE_INLINE void pscom_req_state_set(pscom_request_t *r, pscom_req_state_t state)
{
    __atomic_store_n(&r->state, state, __ATOMIC_RELEASE);
}

PSCOM_REQ_STATE_INLINE void pscom_req_state_add(pscom_request_t *r, pscom_req_state_t bits)
{
    __atomic_store_n(&r->state, __atomic_load_n(&r->state, __ATOMIC_RELAXED) | bits,
                     __ATOMIC_RELEASE);
}

/* The state as a reader without the lock must read it. */
PSCOM_REQ_STATE_INLINE pscom_req_state_t pscom_req_state_get(const pscom_request_t *r)
{
    return __atomic_load_n(&r->state, __ATOMIC_ACQUIRE);
}

/* Allocate a request (see pscom_request_create). NULL on ENOMEM. */
pscom_req_t *pscom_req_create(size_t max_xheader_len, size_t user_size);
void pscom_req_free(pscom_req_t *req);

/* All bytes moved (or failed): set IO_DONE; without io_done also DONE at
 * once, else queue it for io_done (run by pscom_unlock). The request must
 * not be in any queue. (Inline: it ends every message's way.) */
PSCOM_PLUGIN_API extern uint64_t pscom_req_completions; /* plugin SDK, pscom_plugin.h */
static inline __attribute__((always_inline)) void pscom_req_complete(pscom_req_t *req)
{
    assert(!pscom_list_linked(&req->next));
    if (!req->pub.ops.io_done) {
        pscom_req_state_add(&req->pub, PSCOM_REQ_STATE_IO_DONE | PSCOM_REQ_STATE_DONE);
    } else {
        pscom_req_state_add(&req->pub, PSCOM_REQ_STATE_IO_DONE);
        pscom_list_add_tail(&req->next, &pscom.io_doneq);
    }
    pscom.progress_counter++;
    pscom_req_completions++;
}

/* Complete with an extra state bit (PSCOM_REQ_STATE_ERROR / _CANCELED). */
static inline void pscom_req_complete_with(pscom_req_t *req, unsigned bits)
{
    pscom_req_state_add(&req->pub, bits);
    pscom_req_complete(req);
}

/* Failed: ERROR, then on_done or the standard completion. */
static inline void pscom_req_fail(pscom_req_t *req)
{
    pscom_req_state_add(&req->pub, PSCOM_REQ_STATE_ERROR);
    if (req->on_done) {
        req->on_done(req);
    } else {
        pscom_req_complete(req);
    }
}

/* Take every request out of q (linked by next) and complete it with ERROR. */
void pscom_req_fail_all(pscom_list_t *q);

/* pscom_req_run_io_done(), pscom_req_run_io_done_all(): pscom_core.h */

#endif /* PSCOM_REQ_H */
