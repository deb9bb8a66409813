/*
 * itest_ucp: what is particular to the ucp transport (lib/plugins/ucp).
 * Run once per UCX transport set (ctest itest_ucp.ucp-tcp / .ucp-shm, with
 * the environment of that variant: PSP_TCP=0 PSP_SHM=0 UCX_TLS=...).
 *
 *  1. sleep: see itest_wait_sleep (run over ucp too): when the core's wait
 *     is about to sleep, the plugin arms the UCX worker and its poller
 *     leaves the passes, so the wait sleeps in epoll_wait on the worker's
 *     event fd (and case 8: only then).
 *  2. unexpected_inflight: large messages arrive unexpected (UCX moves
 *     them asynchronously); the receive is posted as soon as pscom_iprobe
 *     sees the header, i.e. while the payload may still be on its way, and
 *     must get every byte right. Then the connection is closed by the
 *     receiver while another large unexpected message is arriving: no
 *     crash, no write into freed memory (run under ASan in CI). UCX writes
 *     the payloads straight into the core's buffers (pscom_read_pin), so
 *     both cases exercise what the core defers while a buffer is pinned.
 *  3. noinit: UCX cannot be initialised (UCX_TLS=bogus): exactly one log
 *     line says so at the default PSP_DEBUG, and connections fall back to
 *     tcp.
 *  4. stale_module: PSP_PLUGINDIR holds a libpscom4ucp.so of another
 *     plugin ABI version: it is rejected with one log line and the real
 *     module next to libpscom is used (connections are ucp).
 *  5. long_headers: xheaders and data around the 1 KiB limit of a MSG
 *     (longer messages, also without data, go as HEAD), up to a 65000-byte
 *     xheader, sent back to back and checked byte by byte.
 *  6. busy_wait: a blocking wait for a 4 MiB send (a UCX rendezvous in
 *     flight) whose receiver stays away for BUSY_DELAY_MS polls on and
 *     never naps (pscom_poller_t.busy; the core's wait naps 1 ms at a time
 *     after PSP_WAIT_SPIN_US, 1 ms, of nothing to do, and a nap here would
 *     delay the completion). Counted with the "sleeps:" of
 *     pscom_dump_reqstat(). The receiver's delay only creates the idle
 *     period; the order of events is fixed by the control channel. The
 *     busy polling lasts PSP_WAIT_SPIN_US x PSCOM_WAIT_BUSY_FACTOR (100 ms)
 *     at most: a wait that lasted that long (tests in parallel on few
 *     cpus) may have napped after it. Asserted with the default
 *     PSP_WAIT_SPIN_US and rendezvous thresholds only (scripts/sweep.sh).
 *  7. eager_burst (UCX_RNDV_THRESH=inf, PSP_RENDEZVOUS unset in the
 *     roles): fragmented eager messages that
 *     are all in UCX's unexpected queue, every fragment of them, before
 *     the receiver progresses at all (the sender's sends complete without
 *     it; the control channel says when). Taking such a message, UCX
 *     completes the receive inside ucp_tag_msg_recv_nbx() and runs its
 *     callback there, before the plugin knows the request. Until
 *     2026-11-25 the callback took it for an earlier request of the
 *     plugin's (UCX reuses their memory) and freed it: the receive of the
 *     next message never completed. Received in order, one of them
 *     truncated, every byte checked.
 *  8. test_loop: an application that polls with pscom_test_any() while
 *     nothing comes (here for TEST_LOOP_MS, far longer than the plugin's
 *     former 500 us before it armed the worker) pays a UCX progress per
 *     call, not a system call: the worker is armed only by a blocking wait
 *     that goes to sleep (pscom_poller_t.sleep). Counted by the
 *     epoll_wait() below, which takes the place of libc's (exported):
 *     at most one per clock tick (the core's look at its quiet fds), where
 *     an armed worker made one per call. The message sent then is received
 *     by the same loop.
 *  9. self_burst: between two sockets of one process (UCX's "self" over
 *     ucp-shm) a burst of small messages, sent before the receiver looks:
 *     the first completes the receive the plugin keeps posted inside the
 *     sender's ucp_tag_send_nbx (UCX's self transport delivers at once),
 *     the others wait in UCX's unexpected queue for the poller's probe.
 *     Received in order, one of them truncated, every byte and length
 *     checked.
 * 10. unreachable: UCX_TLS names no transport that can carry messages
 *     between two endpoints (cma only): ucp_ep_create() fails
 *     "unreachable" and connections fall back to tcp. One error line at
 *     the default PSP_DEBUG, with UCX's own reason folded in, however many
 *     connections; UCX's own message does not reach stderr (or stdout) by
 *     itself.
 * 11. exit_dead_peer: a process exits while its endpoint still has sends
 *     in flight to a peer that has died (SIGKILL; the sends are large:
 *     UCX's rendezvous waits for the receiver). The endpoint's flush at
 *     exit cannot end (over shared memory UCX 1.13 keeps the rendezvous
 *     send in flight even after the endpoint's FORCE close); the process
 *     must see that nothing can end any more and not wait out the 2 s
 *     bound (until 2026-11-29 it did, after a peer's death with data in
 *     flight, and over shared memory whenever peers exited together with
 *     a full FIFO). Read from the exiting process's log (PSP_DEBUG=4): no
 *     "UCX operations still in flight at exit" (the line of the 2 s bound).
 * 12. sleep_after_death: the same stuck send (a rendezvous to a peer
 *     killed in the middle of it, the connection failed and closed) must
 *     not keep the process from sleeping afterwards. A blocking wait for a
 *     message that another client sends after SLEEP_DELAY_MS sleeps on the
 *     worker's event fd, not 100 ms of polling and then a 1 ms nap after
 *     another (about 200): naps counted as libpscom's epoll_wait() calls
 *     of 1 ms (below; a sleep's are longer; "sleeps:" of
 *     pscom_dump_reqstat() counts both, and every signal that cuts a
 *     sleep short: scripts/sigstorm.sh).
 *     Until 2026-11-29 an operation that could never end stayed counted
 *     in flight for the life of the process and kept the worker unarmed
 *     (over UCX's shared memory: 184 naps; over its tcp the send ends with
 *     the endpoint's FORCE close).
 *     The client's delay only creates the idle period.
 * 13. death_drain: a client sends DRAIN_MSGS small messages and is killed
 *     before the server takes any of them (the server makes no pscom call
 *     until the client has sent them all and is gone; the control channel
 *     says when). Every one of them must be delivered, in order, before
 *     the connection fails. UCX takes them from its transport a few at a
 *     time (its shared-memory FIFO: UCX_POSIX_FIFO_MAX_POLL per progress,
 *     set to 1 here, so that it takes longer than the core's first look
 *     at the death detector, which comes within 16 passes once the
 *     core's coarse clock has ticked: the server lets it tick first), and
 *     the failure must wait for them. Until 2026-11-29 it waited only for
 *     what the plugin or UCX's unexpected queue held: over shared memory
 *     3-45 of 48 were delivered (with UCX's default of 16 per progress,
 *     now and then); over UCX's tcp one progress reads them all.
 */
#define _GNU_SOURCE
#include "pscom_testutil.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <glob.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <time.h>
#include <unistd.h>

#define TAG_MSG 0x4d534721u

/* ---- 2. unexpected_inflight ----------------------------------------------- */

static const size_t sizes[] = {100000, 1u << 20, (4u << 20) + 3, 16u << 20};
#define NSIZES (sizeof(sizes) / sizeof(sizes[0]))
#define DROPLEN (32u << 20)

static int unexp_server(tu_ctx_t *ctx)
{
    pscom_socket_t *sock = tu_open_socket(ctx, 0, 0);
    pscom_connection_t *con = tu_server_accept_one(ctx, sock);

    for (unsigned i = 0; i < NSIZES; i++) {
        size_t len         = sizes[i];
        unsigned char *buf = tu_malloc(len + 64);
        memset(buf, 0xee, len + 64);
        pscom_request_t *req = pscom_request_create(sizeof(uint32_t), sizeof(uint32_t));
        uint32_t tag         = TAG_MSG;
        memcpy((void *)req->user, &tag, sizeof(tag));
        req->connection      = con;
        req->socket          = sock;
        req->xheader_len     = sizeof(uint32_t);
        req->ops.recv_accept = tu_accept_tag;
        /* the header is in: the message is unexpected and may still be arriving */
        while (!pscom_iprobe(req)) pscom_test_any();
        TU_ASSERT_EQ(req->header.data_len, len);
        req->data     = buf;
        req->data_len = len;
        pscom_post_recv(req);
        pscom_wait(req);
        TU_ASSERT_SUCCESSFUL(req);
        TU_ASSERT_PATTERN(buf, len, 100 + i);
        TU_ASSERT_BYTES(buf + len, 64, 0xee);
        pscom_request_free(req);
        free(buf);
    }

    /* close while a large unexpected message arrives */
    pscom_request_t *p = pscom_request_create(sizeof(uint32_t), sizeof(uint32_t));
    uint32_t tag       = TAG_MSG;
    memcpy((void *)p->user, &tag, sizeof(tag));
    p->connection      = con;
    p->socket          = sock;
    p->xheader_len     = sizeof(uint32_t);
    p->ops.recv_accept = tu_accept_tag;
    while (!pscom_iprobe(p)) pscom_test_any();
    TU_ASSERT_EQ(p->header.data_len, DROPLEN);
    pscom_request_free(p);
    pscom_close_connection(con);
    /* keep progressing until the client is done: the rest of the message
     * arrives and is dropped */
    tu_wait_peer_exit_progress(ctx, 1);
    pscom_close_socket(sock);
    return 0;
}

static int unexp_client(tu_ctx_t *ctx)
{
    pscom_socket_t *sock    = tu_open_socket(ctx, 0, 0);
    pscom_connection_t *con = tu_client_connect(ctx, sock);
    uint32_t tag            = TAG_MSG;
    for (unsigned i = 0; i < NSIZES; i++) {
        unsigned char *buf = tu_malloc(sizes[i]);
        tu_fill(buf, sizes[i], 100 + i);
        pscom_send(con, &tag, sizeof(tag), buf, sizes[i]);
        free(buf);
    }
    unsigned char *big = tu_malloc(DROPLEN);
    memset(big, 7, DROPLEN);
    pscom_request_t *s = pscom_request_create(sizeof(tag), 0);
    pscom_req_prepare(s, con, big, DROPLEN, &tag, sizeof(tag));
    pscom_post_send(s);
    pscom_wait(s); /* may fail: the server closes while it arrives */
    pscom_request_free(s);
    free(big);
    pscom_close_connection(con);
    pscom_close_socket(sock);
    return 0;
}

/* ---- 5. long headers ------------------------------------------------------------- */

/* xheader / data lengths around UCP_MSG_MAX (1 KiB, the pre-posted receive):
 * messages up to it go as one MSG, longer ones, with or without data, as
 * HEAD (+ DATA). Sent back to back, so that HEADs also arrive while a
 * receive for the next MSG is posted (it is then cancelled). */
static const struct {
    unsigned xlen;
    size_t dlen;
} hdrs[] = {{4000, 0}, {8, 8}, {1016, 0}, {1017, 0}, {4000, 100}, {0, 2000}, {65000, 0},
            {12, 0}, {1000, 16}, {2000, 100000}, {4, 4}};
#define NHDRS (sizeof(hdrs) / sizeof(hdrs[0]))
#define XH_MAX 65000

static int hdr_server(tu_ctx_t *ctx)
{
    pscom_socket_t *sock = tu_open_socket(ctx, 0, 0);
    pscom_connection_t *con = tu_server_accept_one(ctx, sock);
    unsigned char *xexp = tu_malloc(XH_MAX), *buf = tu_malloc(100000 + 64);
    pscom_request_t *req = pscom_request_create(XH_MAX, 0);
    for (unsigned i = 0; i < NHDRS; i++) {
        memset(buf, 0xee, 100000 + 64);
        memset((void *)&req->xheader, 0, XH_MAX);
        req->connection  = con;
        req->socket      = sock;
        req->xheader_len = XH_MAX;
        req->data        = buf;
        req->data_len    = 100000;
        pscom_post_recv(req);
        pscom_wait(req);
        TU_ASSERT_SUCCESSFUL(req);
        TU_ASSERT_EQ(req->header.xheader_len, hdrs[i].xlen);
        TU_ASSERT_EQ(req->header.data_len, hdrs[i].dlen);
        tu_fill(xexp, hdrs[i].xlen, 200 + i);
        TU_ASSERT(memcmp((void *)&req->xheader, xexp, hdrs[i].xlen) == 0);
        TU_ASSERT_PATTERN(buf, hdrs[i].dlen, 300 + i);
        TU_ASSERT_BYTES(buf + hdrs[i].dlen, 64, 0xee);
    }
    pscom_request_free(req);
    free(xexp);
    free(buf);
    tu_send_tag(con, TAG_MSG);
    pscom_close_connection(con);
    pscom_close_socket(sock);
    return 0;
}

static int hdr_client(tu_ctx_t *ctx)
{
    pscom_socket_t *sock    = tu_open_socket(ctx, 0, 0);
    pscom_connection_t *con = tu_client_connect(ctx, sock);
    pscom_request_t *reqs[NHDRS];
    unsigned char *bufs[NHDRS];
    for (unsigned i = 0; i < NHDRS; i++) {
        unsigned char *xh = tu_malloc(hdrs[i].xlen + 1);
        bufs[i]           = tu_malloc(hdrs[i].dlen + 1);
        tu_fill(xh, hdrs[i].xlen, 200 + i);
        tu_fill(bufs[i], hdrs[i].dlen, 300 + i);
        reqs[i] = pscom_request_create(hdrs[i].xlen, 0);
        pscom_req_prepare(reqs[i], con, bufs[i], hdrs[i].dlen, xh, hdrs[i].xlen);
        free(xh);
        pscom_post_send(reqs[i]);
    }
    for (unsigned i = 0; i < NHDRS; i++) {
        pscom_wait(reqs[i]);
        TU_ASSERT_SUCCESSFUL(reqs[i]);
        pscom_request_free(reqs[i]);
        free(bufs[i]);
    }
    tu_wait_tag(con, NULL, TAG_MSG);
    pscom_close_connection(con);
    pscom_close_socket(sock);
    return 0;
}

/* ---- 6. busy_wait ------------------------------------------------------------------ */

#define BUSY_LEN      (4u << 20)
#define BUSY_DELAY_MS 10
#define BUSY_POLL_MS  100 /* PSP_WAIT_SPIN_US (1 ms) x PSCOM_WAIT_BUSY_FACTOR */

static unsigned long long sleeps_now(void)
{
    char *text   = NULL;
    size_t len   = 0;
    FILE *f      = open_memstream(&text, &len);
    TU_ASSERT(f != NULL);
    pscom_dump_reqstat(f);
    fclose(f);
    const char *p = strstr(text, "sleeps:");
    TU_ASSERT(p != NULL);
    unsigned long long n = strtoull(p + 7, NULL, 10);
    free(text);
    return n;
}

static int busy_server(tu_ctx_t *ctx)
{
    pscom_socket_t *sock = tu_open_socket(ctx, 0, 0);
    pscom_connection_t *con = tu_server_accept_one(ctx, sock);
    unsigned char *buf = tu_malloc(BUSY_LEN);
    tu_wait_signal(ctx, 1); /* the client's send is posted; no progress here */
    tu_pause_ms(BUSY_DELAY_MS);
    TU_ASSERT_OK(pscom_recv_from(con, NULL, 0, buf, BUSY_LEN));
    TU_ASSERT_PATTERN(buf, BUSY_LEN, 77);
    free(buf);
    tu_send_tag(con, TAG_MSG);
    pscom_close_connection(con);
    pscom_close_socket(sock);
    return 0;
}

static int busy_client(tu_ctx_t *ctx)
{
    pscom_socket_t *sock    = tu_open_socket(ctx, 0, 0);
    pscom_connection_t *con = tu_client_connect(ctx, sock);
    unsigned char *buf      = tu_malloc(BUSY_LEN);
    tu_fill(buf, BUSY_LEN, 77);
    pscom_request_t *s = pscom_request_create(0, 0);
    pscom_req_prepare(s, con, buf, BUSY_LEN, NULL, 0);
    pscom_post_send(s);
    unsigned long long before = sleeps_now();
    double t0                 = tu_now_ms();
    tu_signal(ctx, TU_SERVER, 1);
    pscom_wait(s);
    double waited           = tu_now_ms() - t0;
    unsigned long long naps = sleeps_now() - before;
    TU_ASSERT_SUCCESSFUL(s);
    tu_log("naps while the send was in flight: %llu (%.1f ms)", naps, waited);
    /* with the defaults: PSP_WAIT_SPIN_US=0 asks for no busy polling, and
     * under pscom's own rendezvous (PSP_RENDEZVOUS, PSP_UCP_RENDEZVOUS)
     * nothing is in flight until the receiver asks for the data */
    int defaults = !getenv("PSP_WAIT_SPIN_US") && !getenv("PSP_RENDEZVOUS") &&
                   !getenv("PSP_UCP_RENDEZVOUS");
    if (defaults && waited < BUSY_POLL_MS) TU_ASSERT_EQ(naps, 0);
    pscom_request_free(s);
    free(buf);
    tu_wait_tag(con, NULL, TAG_MSG);
    pscom_close_connection(con);
    pscom_close_socket(sock);
    return 0;
}

/* ---- 7. eager_burst ------------------------------------------------------------------ */

/* Receive message i (its number in the xheader) of len bytes into
 * buf[cap], truncated where cap < len; checked against the pattern seed. */
static void recv_numbered(pscom_connection_t *con, unsigned char *buf, size_t cap, size_t len,
                          uint32_t i, uint32_t seed)
{
    pscom_request_t *req = tu_post_recv(con, buf, cap, sizeof(uint32_t));
    pscom_wait(req);
    if (cap < len) {
        TU_ASSERT_MSG(req->state & PSCOM_REQ_STATE_TRUNCATED, "message %u: state 0x%x", i,
                      (unsigned)req->state);
    } else {
        TU_ASSERT_SUCCESSFUL(req);
    }
    uint32_t seq;
    memcpy(&seq, (const void *)&req->xheader, sizeof(seq));
    TU_ASSERT_MSG(seq == i, "got message %u, expected %u", seq, i);
    TU_ASSERT_EQ(req->header.data_len, len);
    TU_ASSERT_PATTERN(buf, cap, seed);
    pscom_request_free(req);
}

/* about 110 KiB in all: fits into UCX's shared-memory FIFO (64 segments of
 * 8 KiB) and a loopback socket's buffer, so that the sends complete while
 * the receiver does not progress */
static const size_t burst_len[] = {16 * 1024 + 1, 24 * 1024, 40 * 1024 + 5, 9000, 20 * 1024};
#define NBURST (sizeof(burst_len) / sizeof(burst_len[0]))
#define BURST_TRUNC 2 /* received into a buffer of half its length */

/* the sends complete without the receiver only without pscom's own
 * rendezvous (scripts/sweep.sh sets PSP_RENDEZVOUS) */
static void eager_only(const tu_ctx_t *ctx)
{
    (void)ctx;
    unsetenv("PSP_RENDEZVOUS");
    unsetenv("PSP_UCP_RENDEZVOUS");
}

static int burst_server(tu_ctx_t *ctx)
{
    pscom_socket_t *sock    = tu_open_socket(ctx, 0, 0);
    pscom_connection_t *con = tu_server_accept_one(ctx, sock);
    tu_wait_signal(ctx, 1); /* no progress until every send is done */
    for (uint32_t i = 0; i < NBURST; i++) {
        size_t len           = burst_len[i];
        size_t cap           = i == BURST_TRUNC ? len / 2 : len;
        unsigned char *buf   = tu_malloc(cap);
        recv_numbered(con, buf, cap, len, i, 70 + i);
        free(buf);
    }
    tu_send_tag(con, TAG_MSG);
    pscom_close_socket(sock);
    return 0;
}

static int burst_client(tu_ctx_t *ctx)
{
    pscom_socket_t *sock    = tu_open_socket(ctx, 0, 0);
    pscom_connection_t *con = tu_client_connect(ctx, sock);
    pscom_request_t *reqs[NBURST];
    unsigned char *bufs[NBURST];
    for (uint32_t i = 0; i < NBURST; i++) {
        bufs[i] = tu_malloc(burst_len[i]);
        tu_fill(bufs[i], burst_len[i], 70 + i);
        reqs[i] = pscom_request_create(sizeof(i), 0);
        TU_ASSERT_NOT_NULL(reqs[i]);
        pscom_req_prepare(reqs[i], con, bufs[i], burst_len[i], &i, sizeof(i));
        pscom_post_send(reqs[i]);
    }
    for (uint32_t i = 0; i < NBURST; i++) {
        pscom_wait(reqs[i]);
        TU_ASSERT_SUCCESSFUL(reqs[i]);
        pscom_request_free(reqs[i]);
        free(bufs[i]);
    }
    tu_signal(ctx, TU_SERVER, 1);
    tu_wait_tag(con, NULL, TAG_MSG);
    pscom_close_socket(sock);
    return 0;
}

/* ---- 8. test_loop ---------------------------------------------------------------------- */

#define TEST_LOOP_MS 20

/* epoll_wait calls made by libpscom (UCX's tcp transport makes its own in
 * every progress call, and UCX's threads wait in it) */
static _Atomic int counting; /* read by UCX's threads too */
static _Atomic unsigned epoll_calls;
static _Atomic unsigned epoll_naps; /* ... of them naps: 1 ms (case 12) */
__attribute__((visibility("default"))) int epoll_wait(int epfd, struct epoll_event *events,
                                                   int maxevents, int timeout)
{
    Dl_info di;
    if (counting && dladdr(__builtin_return_address(0), &di) && di.dli_fname &&
        strstr(di.dli_fname, "/libpscom.so")) {
        epoll_calls++;
        if (timeout == 1) epoll_naps++;
    }
    return epoll_pwait(epfd, events, maxevents, timeout, NULL);
}

static double coarse_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static int loop_server(tu_ctx_t *ctx)
{
    pscom_socket_t *sock    = tu_open_socket(ctx, 0, 0);
    pscom_connection_t *con = tu_server_accept_one(ctx, sock);
    tu_wait_signal(ctx, 1); /* the client has polled for TEST_LOOP_MS */
    tu_send_tag(con, TAG_MSG);
    tu_wait_tag(con, NULL, TAG_MSG);
    pscom_close_socket(sock);
    return 0;
}

static int loop_client(tu_ctx_t *ctx)
{
    pscom_socket_t *sock    = tu_open_socket(ctx, 0, 0);
    pscom_connection_t *con = tu_client_connect(ctx, sock);
    pscom_request_t *req    = tu_post_recv(con, NULL, 0, sizeof(uint32_t));
    struct timespec res;
    clock_getres(CLOCK_MONOTONIC_COARSE, &res);
    double tick_ms = (double)res.tv_sec * 1e3 + (double)res.tv_nsec / 1e6;
    epoll_calls    = 0;
    counting       = 1;
    unsigned long calls = 0;
    double t0 = tu_now_ms(), c0 = coarse_ms();
    while (tu_now_ms() - t0 < TEST_LOOP_MS) {
        TU_ASSERT(!pscom_test_any());
        calls++;
    }
    counting     = 0;
    double ticks = (coarse_ms() - c0) / tick_ms;
    tu_log("%lu pscom_test_any() calls in %d ms (%.0f clock ticks): %u epoll_wait calls", calls,
           TEST_LOOP_MS, ticks, epoll_calls);
    TU_ASSERT_MSG(epoll_calls <= ticks + 2, "%u epoll_wait calls in %lu pscom_test_any() calls",
                  epoll_calls, calls);
    tu_signal(ctx, TU_SERVER, 1);
    while (!pscom_req_is_done(req)) pscom_test_any();
    TU_ASSERT_SUCCESSFUL(req);
    TU_ASSERT_EQ(tu_header_tag(&req->header), TAG_MSG);
    pscom_request_free(req);
    tu_send_tag(con, TAG_MSG);
    pscom_close_socket(sock);
    return 0;
}

/* ---- 3./4. log lines and fallback (one process) ------------------------------ */

static int log_fd = -1, saved_stderr = -1;
static char log_path[64];

static void capture_stderr(void)
{
    snprintf(log_path, sizeof(log_path), "/tmp/itest_ucp.%d.log", (int)getpid());
    log_fd = open(log_path, O_RDWR | O_CREAT | O_TRUNC, 0600);
    TU_ASSERT(log_fd >= 0);
    fflush(stderr);
    saved_stderr = dup(2);
    TU_ASSERT(saved_stderr >= 0);
    TU_ASSERT(dup2(log_fd, 2) == 2);
}

/* Restore stderr; count the captured lines containing `what`. *total:
 * every line but the library's notes on settings of the environment
 * ("PSP_TCP_SNDBUF=4096: using 65536 (the least)", scripts/sweep.sh). */
static int captured_lines(const char *what, int *total)
{
    fflush(stderr);
    dup2(saved_stderr, 2);
    close(saved_stderr);
    char *text = tu_read_fd(log_fd);
    TU_ASSERT_NOT_NULL(text);
    close(log_fd);
    unlink(log_path);
    int hits = 0, lines = 0;
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        tu_log("captured: %s", line);
        if (strstr(line, ":PSP_") && strstr(line, ": using ")) continue;
        lines++;
        if (strstr(line, what)) hits++;
    }
    free(text);
    *total = lines;
    return hits;
}

/* Two sockets of this process, b connected to a (DIRECT): con is b's end,
 * acc a's. */
typedef struct self_pair {
    pscom_socket_t *a, *b;
    pscom_connection_t *con, *acc;
} self_pair_t;

static void self_pair_open(tu_ctx_t *ctx, self_pair_t *p)
{
    p->a = tu_open_socket(ctx, 0, 0);
    p->b = tu_open_socket(ctx, 0, 0);
    TU_ASSERT_OK(pscom_listen(p->a, PSCOM_ANYPORT));
    char *ep = NULL;
    TU_ASSERT_OK(pscom_socket_get_ep_str(p->a, &ep));
    p->con = pscom_open_connection(p->b);
    TU_ASSERT_OK(pscom_connect(p->con, ep, PSCOM_RANK_UNDEFINED, PSCOM_CON_FLAG_DIRECT));
    pscom_socket_free_ep_str(ep);
    while (!(p->acc = pscom_get_next_connection(p->a, NULL))) pscom_test_any();
}

static void self_pair_close(self_pair_t *p)
{
    pscom_close_connection(p->con);
    pscom_close_socket(p->b);
    pscom_close_socket(p->a);
}

/* A connection between two sockets of this process; returns its type. */
static pscom_con_type_t self_connection_type(tu_ctx_t *ctx)
{
    self_pair_t p;
    self_pair_open(ctx, &p);
    pscom_con_type_t type = p.con->type;
    uint32_t v = 42, w = 0;
    pscom_send(p.con, NULL, 0, &v, sizeof(v));
    TU_ASSERT_OK(pscom_recv_from(p.acc, NULL, 0, &w, sizeof(w)));
    TU_ASSERT_EQ(w, 42);
    self_pair_close(&p);
    return type;
}

/* ---- 9. self_burst (one process) ------------------------------------------------------ */

#define SELF_BURST 48
#define SELF_TRUNC 17 /* received into half the buffer */

static size_t self_len(uint32_t i)
{
    return (i * 37u) % 300u; /* 0..299 bytes: with the xheader, a MSG each */
}

static int self_burst_server(tu_ctx_t *ctx)
{
    self_pair_t p;
    self_pair_open(ctx, &p);
    tu_check_con_type(p.con);
    unsigned char buf[300];
    for (uint32_t i = 0; i < SELF_BURST; i++) {
        tu_fill(buf, self_len(i), 500 + i);
        pscom_send(p.con, &i, sizeof(i), buf, self_len(i));
    }
    for (uint32_t i = 0; i < SELF_BURST; i++) {
        size_t len = self_len(i), cap = i == SELF_TRUNC ? len / 2 : len;
        memset(buf, 0xee, sizeof(buf));
        recv_numbered(p.acc, buf, cap, len, i, 500 + i);
        for (size_t k = cap; k < sizeof(buf); k++) TU_ASSERT_EQ(buf[k], 0xee);
    }
    self_pair_close(&p);
    return 0;
}

static int noinit_server(tu_ctx_t *ctx)
{
    int total;
    capture_stderr();
    pscom_con_type_t type = self_connection_type(ctx);
    int hits = captured_lines("UCX cannot be initialised", &total);
    TU_ASSERT_EQ(hits, 1);
    TU_ASSERT_EQ(total, 1); /* nothing else: UCX's own messages are folded in */
    TU_ASSERT_STR_EQ(pscom_con_type_str(type), "tcp");
    return 0;
}

#define UNREACHABLE_CONS 3

static int unreachable_server(tu_ctx_t *ctx)
{
    int total;
    capture_stderr();
    for (int i = 0; i < UNREACHABLE_CONS; i++)
        TU_ASSERT_STR_EQ(pscom_con_type_str(self_connection_type(ctx)), "tcp");
    int hits = captured_lines("ucp_ep_create(): Destination is unreachable: ", &total);
    TU_ASSERT_EQ(hits, 1);
    TU_ASSERT_EQ(total, 1);
    return 0;
}

static int stale_server(tu_ctx_t *ctx)
{
    int total;
    capture_stderr();
    pscom_con_type_t type = self_connection_type(ctx);
    int hits = captured_lines("rejected", &total);
    TU_ASSERT_EQ(hits, 1);
    TU_ASSERT_STR_EQ(pscom_con_type_str(type), "ucp");
    return 0;
}

/* ---- 11. exit_dead_peer ------------------------------------------------------------ */

#define EXIT_SENDS 8
#define EXIT_LEN   (256u << 10)

/* The server of 11 and 12: EXIT_SENDS large sends to client 1 (s: the
 * requests, posted from buf; NULL: pscom_send, copied), which is killed
 * while they are in flight (UCX's rendezvous waits for the receiver).
 * Returns the socket. */
static pscom_socket_t *kill_mid_send(tu_ctx_t *ctx, pscom_connection_t **cons,
                                     pscom_request_t **s, char *buf)
{
    pscom_socket_t *sock = tu_open_socket(ctx, 0, 0);
    tu_server_listen(ctx, sock);
    tu_server_accept_all(ctx, sock, cons);
    tu_check_con_type(cons[1]);
    memset(buf, 7, EXIT_LEN);
    for (int i = 0; i < EXIT_SENDS; i++) {
        if (!s) {
            pscom_send(cons[1], NULL, 0, buf, EXIT_LEN);
            continue;
        }
        s[i] = pscom_request_create(0, 0);
        pscom_req_prepare(s[i], cons[1], buf, EXIT_LEN, NULL, 0);
        pscom_post_send(s[i]);
    }
    pscom_test_any();
    TU_ASSERT_EQ(kill(ctx->client_pids[1], SIGKILL), 0);
    return sock;
}

static int exit_server(tu_ctx_t *ctx)
{
    pscom_connection_t *cons[2];
    char *buf = tu_malloc(EXIT_LEN);
    kill_mid_send(ctx, cons, NULL, buf);
    free(buf);
    return 0; /* the exit closes the connection and the endpoint */
}

static int exit_client(tu_ctx_t *ctx)
{
    pscom_socket_t *sock = tu_open_socket(ctx, 0, 0);
    tu_client_connect(ctx, sock);
    tu_wait_signal(ctx, TU_SERVER); /* none comes: killed meanwhile */
    TU_FAIL("survived SIGKILL");
}

/* ---- 12. sleep_after_death ----------------------------------------------------------- */

#define SLEEP_DELAY_MS 300
#define SLEEP_MAX_NAPS 10

static int sleep_server(tu_ctx_t *ctx)
{
    pscom_connection_t *cons[3];
    pscom_request_t *s[EXIT_SENDS];
    char *buf            = tu_malloc(EXIT_LEN);
    pscom_socket_t *sock = kill_mid_send(ctx, cons, s, buf);
    /* the death is noticed: the connection fails, with the sends that
     * had not gone out (over UCX's tcp the first may have) */
    pscom_request_t *dead = tu_post_recv(cons[1], NULL, 0, sizeof(uint32_t));
    pscom_wait(dead);
    TU_ASSERT(dead->state & PSCOM_REQ_STATE_ERROR);
    pscom_request_free(dead);
    for (int i = 0; i < EXIT_SENDS; i++) {
        pscom_wait(s[i]);
        pscom_request_free(s[i]);
    }
    free(buf);
    pscom_request_t *req      = tu_post_recv(cons[2], NULL, 0, sizeof(uint32_t));
    unsigned long long before = sleeps_now();
    epoll_naps                = 0;
    counting                  = 1;
    tu_signal(ctx, 2, 1); /* send after SLEEP_DELAY_MS */
    pscom_wait(req);
    counting       = 0;
    unsigned naps  = epoll_naps;
    unsigned long long sleeps = sleeps_now() - before;
    TU_ASSERT_SUCCESSFUL(req);
    pscom_request_free(req);
    tu_log("waiting %d ms after the death: %llu sleeps, %u of them naps of 1 ms",
           SLEEP_DELAY_MS, sleeps, naps);
    TU_ASSERT_MSG(naps <= SLEEP_MAX_NAPS, "%u naps instead of a sleep on the worker", naps);
    tu_send_tag(cons[2], TAG_MSG);
    pscom_close_socket(sock);
    return 0;
}

static int sleep_client(tu_ctx_t *ctx)
{
    pscom_socket_t *sock    = tu_open_socket(ctx, 0, 0);
    pscom_connection_t *con = tu_client_connect(ctx, sock);
    tu_wait_signal(ctx, TU_SERVER); /* client 1: none comes, killed meanwhile */
    TU_ASSERT(ctx->rank == 2);
    tu_pause_ms(SLEEP_DELAY_MS);
    tu_send_tag(con, TAG_MSG);
    tu_wait_tag(con, NULL, TAG_MSG);
    pscom_close_socket(sock);
    return 0;
}

/* ---- 13. death_drain ------------------------------------------------------------------ */

#define DRAIN_MSGS 48 /* fit into UCX's shared-memory FIFO (64) with room to spare */
#define DRAIN_LEN  8

static int drain_server(tu_ctx_t *ctx)
{
    pscom_socket_t *sock    = tu_open_socket(ctx, 0, 0);
    sock->ops.con_error     = tu_on_con_error;
    pscom_connection_t *con = tu_server_accept_one(ctx, sock);
    tu_check_con_type(con);
    /* no pscom call until the client has sent everything and is gone */
    TU_ASSERT_EQ(tu_wait_signal(ctx, 1), 1);
    tu_wait_peer_exit(ctx, 1);
    /* The core looks at its quiet fds (the death detector) within 16
     * passes once its coarse clock has ticked since the last look: let it
     * tick (at most one tick), so that the death is seen while UCX still
     * holds most of the messages, in every run */
    double t0 = coarse_ms();
    while (coarse_ms() == t0) continue;
    unsigned char buf[DRAIN_LEN];
    tu_recv_sequence(con, DRAIN_MSGS, DRAIN_LEN, "sent before the peer died");
    pscom_request_t *r = tu_post_recv(con, buf, sizeof(buf), sizeof(uint32_t));
    pscom_wait(r);
    TU_ASSERT(r->state & PSCOM_REQ_STATE_ERROR);
    pscom_request_free(r);
    while (!tu_error_of(con)) pscom_wait_any();
    pscom_close_socket(sock);
    return 0;
}

static int drain_client(tu_ctx_t *ctx)
{
    pscom_socket_t *sock    = tu_open_socket(ctx, 0, 0);
    pscom_connection_t *con = tu_client_connect(ctx, sock);
    for (uint32_t i = 0; i < DRAIN_MSGS; i++) tu_send_pattern(con, i, DRAIN_LEN);
    pscom_flush(con);
    tu_signal(ctx, TU_SERVER, 1);
    raise(SIGKILL);
    TU_FAIL("survived SIGKILL");
}

/* Occurrences of needle in the logs of tu_log_files(prefix), which are
 * removed */
static int logs_count(const char *prefix, const char *needle)
{
    const char *dir = getenv("TMPDIR");
    char pattern[512];
    snprintf(pattern, sizeof(pattern), "%s/%s.*.log", dir && *dir ? dir : "/tmp", prefix);
    glob_t g;
    int hits = 0;
    if (glob(pattern, 0, NULL, &g)) return 0;
    for (size_t i = 0; i < g.gl_pathc; i++) {
        int fd = open(g.gl_pathv[i], O_RDONLY);
        TU_ASSERT(fd >= 0);
        char *text = tu_read_fd(fd);
        close(fd);
        TU_ASSERT_NOT_NULL(text);
        for (char *p = text; (p = strstr(p, needle)); p++) hits++;
        free(text);
        unlink(g.gl_pathv[i]);
    }
    globfree(&g);
    return hits;
}

int main(void)
{
    if (tu_run("ucp_unexpected_inflight", 1, unexp_server, unexp_client, NULL)) return 1;
    if (tu_run("ucp_long_headers", 1, hdr_server, hdr_client, NULL)) return 1;
    if (tu_run("ucp_busy_wait", 1, busy_server, busy_client, NULL)) return 1;
    if (tu_run("ucp_test_loop", 1, loop_server, loop_client, NULL)) return 1;
    if (tu_run("ucp_self_burst", 0, self_burst_server, NULL, NULL)) return 1;

    /* 3: the children inherit this environment (pscom_init after fork) */
    char *tls = getenv("UCX_TLS") ? strdup(getenv("UCX_TLS")) : NULL;
    setenv("UCX_TLS", "bogus", 1);
    setenv("PSP_TCP", "1", 1);
    setenv("PSP_DEBUG", "1", 1);
    if (tu_run("ucp_noinit", 0, noinit_server, NULL, NULL)) return 1;
    /* 10: the same fallback, with UCX up but unable to reach anyone */
    setenv("UCX_TLS", "cma", 1);
    if (tu_run("ucp_unreachable", 0, unreachable_server, NULL, NULL)) return 1;
    if (tls) {
        setenv("UCX_TLS", tls, 1);
    } else {
        unsetenv("UCX_TLS");
    }
    setenv("PSP_TCP", "0", 1);
    free(tls);

    /* 4 */
    setenv("PSP_PLUGINDIR", PSCOM_TEST_STALE_MODULE_DIR, 1);
    if (tu_run("ucp_stale_module", 0, stale_server, NULL, NULL)) return 1;
    unsetenv("PSP_PLUGINDIR");

    /* 7: eager fragments at any size (the children inherit it) */
    setenv("UCX_RNDV_THRESH", "inf", 1);
    const tu_opts_t burst_opts = {.before_init = eager_only};
    if (tu_run("ucp_eager_burst", 1, burst_server, burst_client, &burst_opts)) return 1;
    unsetenv("UCX_RNDV_THRESH");

    /* 12 */
    const tu_opts_t sleep_opts = {.killed_must_mask = 1u << 1};
    if (tu_run("ucp_sleep_after_death", 2, sleep_server, sleep_client, &sleep_opts)) return 1;

    /* 13: UCX takes one message from its shared-memory FIFO per progress
     * (inherited by the roles) */
    setenv("UCX_POSIX_FIFO_MAX_POLL", "1", 1);
    const tu_opts_t drain_opts = {.killed_must_mask = 1u << 1};
    if (tu_run("ucp_death_drain", 1, drain_server, drain_client, &drain_opts)) return 1;
    unsetenv("UCX_POSIX_FIFO_MAX_POLL");

    /* 11: last, it sends every process's log into a file */
    char prefix[64];
    snprintf(prefix, sizeof(prefix), "itest_ucp_exit.%d", (int)getpid());
    tu_log_files(prefix, 4);
    const tu_opts_t exit_opts = {.killed_must_mask = 1u << 1};
    if (tu_run("ucp_exit_dead_peer", 1, exit_server, exit_client, &exit_opts)) return 1;
    int waited = logs_count(prefix, "UCX operations still in flight at exit");
    if (waited) {
        fprintf(stderr, "ucp_exit_dead_peer: the server waited out the bound at exit for "
                        "operations to its dead peer\n");
        return 1;
    }
    return 0;
}
