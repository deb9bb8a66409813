/*
 * pscom_req.c - request allocation, completion and the io_done queue.
 */
#include "pscom_req.h"

#include <assert.h>
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>

#include "pscom_config.h"
#include "pscom_core.h"
#include "pscom_log.h"
#include "pscom_misuse.h"

/* xheader area: the library's own xheader union at least, rounded up to 8 */
static size_t xheader_area(size_t max_xheader_len)
{
    size_t n = (max_xheader_len + 7) & ~(size_t)7;
    return n < sizeof(pscom_xheader_t) ? sizeof(pscom_xheader_t) : n;
}

pscom_req_t *pscom_req_create(size_t max_xheader_len, size_t user_size)
{
    size_t head = offsetof(pscom_req_t, pub) + offsetof(pscom_request_t, xheader);
    if (max_xheader_len > SIZE_MAX / 4 || user_size > SIZE_MAX / 4) {
        errno = ENOMEM; /* no such memory, and the sums below could wrap */
        return NULL;
    }
    size_t xh        = xheader_area(max_xheader_len);
    size_t user_off  = (head + xh + 7) & ~(size_t)7;
    pscom_req_t *req = calloc(1, user_off + user_size);
    if (!req) return NULL;

    req->magic = PSCOM_REQ_MAGIC;
    pscom_list_init(&req->next);
    pscom_list_init(&req->next_alt);
    pscom_list_init(&req->all);
    pscom_req_state_set(&req->pub, PSCOM_REQ_STATE_DONE);
    req->pub.xheader_len     = max_xheader_len;
    req->pub.max_xheader_len = xh;
    req->pub.user_size       = user_size;
    req->pub.user            = (struct PSCOM_req_user *)((char *)req + user_off); /* also 0 B */

    pscom.stats.reqs_created++;
    if (pscom_config.debug_req) pscom_list_add_tail(&req->all, &pscom.requests);
    return req;
}

void pscom_req_free(pscom_req_t *req)
{
    assert(req->magic == PSCOM_REQ_MAGIC);
    assert(!pscom_list_linked(&req->next));
    if (pscom_list_linked(&req->all)) pscom_list_del(&req->all);
    req->magic = 0;
    pscom.stats.reqs_freed++;
    free(req);
}

void pscom_req_fail_all(pscom_list_t *q)
{
    while (!pscom_list_empty(q)) {
        pscom_req_t *req = pscom_list_entry(q->next, pscom_req_t, next);
        pscom_list_del(&req->next);
        pscom_req_complete_with(req, PSCOM_REQ_STATE_ERROR);
    }
}

PSCOM_PLUGIN_API uint64_t pscom_req_completions; /* plugin SDK, pscom_plugin.h */

static void run_io_done(pscom_req_t *req)
{
    void (*io_done)(pscom_request_t *) = req->pub.ops.io_done;
    pscom_unlock_keep_queue();
    pscom_req_state_add(&req->pub, PSCOM_REQ_STATE_DONE);
    io_done(&req->pub); /* may free or re-post the request */
    if (pscom.threaded) pthread_mutex_lock(&pscom.lock);
}

/* PSCOM_REQF_SERIAL requests taken from the io_done queue, in its order,
 * and whether a thread (or an outer call, when io_done makes progress
 * itself) runs them: that one runs them all. The order is fixed here,
 * under the lock: threads that took two requests in turn could else call
 * their io_done the other way round. */
static pscom_list_t serialq = PSCOM_LIST_INIT(serialq);
static int serial_running;

static void run_serial(void)
{
    serial_running = 1;
    while (!pscom_list_empty(&serialq)) {
        pscom_req_t *req = pscom_list_entry(serialq.next, pscom_req_t, next);
        pscom_list_del(&req->next);
        run_io_done(req);
    }
    serial_running = 0;
}

/* io_done callbacks that call pscom (an io_done that re-posts its request
 * onto a backlog of unexpected messages, say) drain the queue nested, one
 * level per request: 200,000 unexpected messages overflowed the stack
 * (2026-11-29). Deeper than IO_DONE_NEST_MAX levels in a thread,
 * pscom_req_run_io_done() leaves the queue to the loops of the levels
 * below, which drain it once the callback returns; the calls that make
 * progress on purpose (pscom_req_run_io_done_all: the waits,
 * pscom_test_any, pscom_wait_any) drain it at any depth, as their caller
 * may be waiting for one of these callbacks. */
#define IO_DONE_NEST_MAX 16
static __thread unsigned io_done_depth;

/* Called with the lock held; returns with it held. io_done runs unlocked. */
void pscom_req_run_io_done(void)
{
    if (io_done_depth < IO_DONE_NEST_MAX) pscom_req_run_io_done_all();
}

void pscom_req_run_io_done_all(void)
{
    io_done_depth++;
    while (!pscom_list_empty(&pscom.io_doneq)) {
        pscom_list_t *pos = pscom.io_doneq.next;
        pscom_req_t *req  = pscom_list_entry(pos, pscom_req_t, next);
        pscom_list_del(pos);
        if (pscom_unlikely(req->flags & PSCOM_REQF_SERIAL)) {
            pscom_list_add_tail(&req->next, &serialq);
            if (!serial_running) run_serial();
            continue;
        }
        run_io_done(req);
    }
    io_done_depth--;
}

PSCOM_API pscom_request_t *pscom_request_create(size_t max_xheader_len, size_t user_size)
{
    pscom_ensure_init();
    pscom_lock();
    pscom_req_t *req = pscom_req_create(max_xheader_len, user_size);
    pscom_unlock();
    return req ? &req->pub : NULL;
}

PSCOM_API void pscom_request_free(pscom_request_t *request)
{
    if (!request) return;
    pscom_req_t *req = pscom_req_from_pub(request);
    pscom_api_check(req->magic == PSCOM_REQ_MAGIC, "a request of pscom_request_create(), not yet freed");
    pscom_api_check(request->state & PSCOM_REQ_STATE_DONE, "a request is freed only when DONE");
    pscom_lock();
    pscom_req_free(req);
    pscom_unlock();
}
