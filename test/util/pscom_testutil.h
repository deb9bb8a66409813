/*
 * pscom_testutil.h - harness for the multi-process integration tests.
 *
 * tu_run() forks one server process and N client processes. Every child
 * calls pscom_init() itself after the fork (the parent never touches
 * pscom), arms a watchdog (alarm) and runs its role function. The server
 * typically opens a socket, listens on PSCOM_ANYPORT and hands its
 * endpoint string to the clients through the control channels
 * (tu_server_listen()). The parent waits for all children and fails if any
 * exits non-zero or by a signal (SIGKILL may be declared as expected per
 * client); as soon as one child fails, the others are killed.
 *
 * Control channels: one AF_UNIX socketpair per client between the server
 * and that client (tu_signal()/tu_wait_signal()). They are only used for
 * start-up and for synchronisation points the test needs; never sleep.
 *
 * Assertion macros print file:line, the failed expression and the values,
 * then _exit(1) (no atexit handlers, so a failing child never blocks in
 * the library's shutdown).
 *
 * Environment:
 *   PSCOM_TEST_TIMEOUT  watchdog seconds per process (default 60)
 *   PSCOM_TEST_CONTYPE  if set (e.g. "tcp"), every connection set up
 *                       through the harness must have this type
 *                       (pscom_con_type_str()); this lets a ctest entry
 *                       prove which transport it ran over. A variant of a
 *                       transport is named "<type>-<variant>" ("ucp-shm":
 *                       ucp over UCX's shared memory); only <type> is
 *                       compared (tu_contype()).
 *   PSP_*               passed through to the library untouched.
 */
#ifndef PSCOM_TESTUTIL_H
#define PSCOM_TESTUTIL_H

#include <pscom.h>

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "tu_sys.h"
#include "tu_text.h" /* tu_count(), tu_read_fd() */

#ifdef __cplusplus
extern "C" {
#endif

#define TU_MAX_CLIENTS 16
#define TU_SERVER      0 /* rank of the server role */

typedef struct tu_ctx {
    const char *name; /* scenario name (for messages) */
    int nclients;
    int rank;  /* 0 = server, 1..nclients = clients */
    pid_t client_pids[TU_MAX_CLIENTS + 1]; /* [1..nclients], valid in the server */
    char *ep;  /* server endpoint string: server after tu_server_listen(),
                  clients after tu_client_get_ep() / tu_client_connect() */
    int ctl[TU_MAX_CLIENTS + 1]; /* control fds: server: [1..n], client: [0] */
} tu_ctx_t;

typedef int (*tu_role_fn)(tu_ctx_t *ctx);

typedef struct tu_opts {
    unsigned timeout;          /* watchdog seconds; 0 = PSCOM_TEST_TIMEOUT or 60 */
    unsigned killed_ok_mask;   /* bit i set: client i may end by SIGKILL */
    unsigned killed_must_mask; /* bit i set: client i must end by SIGKILL */
    /* optional: runs in each role's process before its pscom_init (a
     * role's own environment, say) */
    void (*before_init)(const tu_ctx_t *ctx);
} tu_opts_t;

/* Run server + nclients clients (nclients may be 0). Returns 0 on success,
 * 1 on failure (after printing why). client may be NULL if nclients == 0. */
int tu_run(const char *name, int nclients, tu_role_fn server, tu_role_fn client,
           const tu_opts_t *opts);

/* ------------------------------------------------------------------ */
/* Failure reporting                                                  */
/* ------------------------------------------------------------------ */

void tu_fail(const char *file, int line, const char *fmt, ...)
    __attribute__((noreturn, format(printf, 3, 4)));
/* "[name role pid]" prefix of this process */
const char *tu_who(void);
void tu_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#define TU_FAIL(...) tu_fail(__FILE__, __LINE__, __VA_ARGS__)

/* Record what this process is doing now; the watchdog prints the last
 * step when it fires (diagnosing hangs without a debugger). */
void tu_step(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#define TU_ASSERT(cond)                                                        \
    do {                                                                       \
        if (!(cond)) TU_FAIL("assertion failed: %s", #cond);                   \
    } while (0)

#define TU_ASSERT_MSG(cond, fmt, ...)                                          \
    do {                                                                       \
        if (!(cond))                                                           \
            TU_FAIL("assertion failed: %s: " fmt, #cond, ##__VA_ARGS__);       \
    } while (0)

#define TU_CMP_(a, op, b)                                                      \
    do {                                                                       \
        long long tu_a_ = (long long)(a);                                      \
        long long tu_b_ = (long long)(b);                                      \
        if (!(tu_a_ op tu_b_))                                                 \
            TU_FAIL("assertion failed: %s %s %s (%lld %s %lld, 0x%llx vs "     \
                    "0x%llx)",                                                 \
                    #a, #op, #b, tu_a_, #op, tu_b_, (unsigned long long)tu_a_, \
                    (unsigned long long)tu_b_);                                \
    } while (0)
#define TU_ASSERT_EQ(a, b) TU_CMP_(a, ==, b)
#define TU_ASSERT_NE(a, b) TU_CMP_(a, !=, b)
#define TU_ASSERT_LT(a, b) TU_CMP_(a, <, b)
#define TU_ASSERT_LE(a, b) TU_CMP_(a, <=, b)
#define TU_ASSERT_GT(a, b) TU_CMP_(a, >, b)
#define TU_ASSERT_GE(a, b) TU_CMP_(a, >=, b)

#define TU_ASSERT_PTR_EQ(a, b)                                                 \
    do {                                                                       \
        const void *tu_a_ = (const void *)(a);                                 \
        const void *tu_b_ = (const void *)(b);                                 \
        if (tu_a_ != tu_b_)                                                    \
            TU_FAIL("assertion failed: %s == %s (%p vs %p)", #a, #b, tu_a_,    \
                    tu_b_);                                                    \
    } while (0)
#define TU_ASSERT_NULL(p) TU_ASSERT_PTR_EQ(p, NULL)
#define TU_ASSERT_NOT_NULL(p)                                                  \
    do {                                                                       \
        if ((p) == NULL) TU_FAIL("assertion failed: %s != NULL", #p);          \
    } while (0)

#define TU_ASSERT_STR_EQ(a, b)                                                 \
    do {                                                                       \
        const char *tu_a_ = (a);                                               \
        const char *tu_b_ = (b);                                               \
        if (!tu_a_ || !tu_b_ || strcmp(tu_a_, tu_b_) != 0)                     \
            TU_FAIL("assertion failed: %s == %s (\"%s\" vs \"%s\")", #a, #b,   \
                    tu_a_ ? tu_a_ : "(null)", tu_b_ ? tu_b_ : "(null)");       \
    } while (0)

/* pscom_err_t result */
#define TU_ASSERT_ERR(call, expected)                                          \
    do {                                                                       \
        pscom_err_t tu_e_   = (call);                                          \
        pscom_err_t tu_exp_ = (expected);                                      \
        if (tu_e_ != tu_exp_)                                                  \
            TU_FAIL("%s returned %d (%s), expected %d (%s)", #call,            \
                    (int)tu_e_, tu_err_str(tu_e_), (int)tu_exp_,               \
                    tu_err_str(tu_exp_));                                      \
    } while (0)
#define TU_ASSERT_OK(call) TU_ASSERT_ERR(call, PSCOM_SUCCESS)
const char *tu_err_str(pscom_err_t err); /* copy of pscom_err_str() */

/* request state bits */
#define TU_ASSERT_STATE_HAS(state, bits)                                       \
    do {                                                                       \
        pscom_req_state_t tu_s_ = (state);                                     \
        pscom_req_state_t tu_b_ = (bits);                                      \
        if ((tu_s_ & tu_b_) != tu_b_)                                          \
            TU_FAIL("state %s = 0x%x [%s] lacks bits %s = 0x%x [%s]", #state,  \
                    tu_s_, tu_state_str(tu_s_), #bits, tu_b_,                  \
                    tu_state_str(tu_b_));                                      \
    } while (0)
#define TU_ASSERT_STATE_LACKS(state, bits)                                     \
    do {                                                                       \
        pscom_req_state_t tu_s_ = (state);                                     \
        pscom_req_state_t tu_b_ = (bits);                                      \
        if ((tu_s_ & tu_b_) != 0)                                              \
            TU_FAIL("state %s = 0x%x [%s] must not have %s = 0x%x", #state,    \
                    tu_s_, tu_state_str(tu_s_), #bits, tu_b_);                 \
    } while (0)
#define TU_ASSERT_SUCCESSFUL(req)                                              \
    do {                                                                       \
        pscom_req_state_t tu_s_ = (req)->state;                                \
        if (!pscom_req_state_successful(tu_s_))                                \
            TU_FAIL("request %s not successful: state 0x%x [%s]", #req,        \
                    tu_s_, tu_state_str(tu_s_));                               \
    } while (0)
/* pscom_req_state_str() into a rotating private buffer */
const char *tu_state_str(pscom_req_state_t state);

/* memory */
#define TU_ASSERT_MEM_EQ(a, b, n)                                              \
    tu_assert_mem_eq(__FILE__, __LINE__, #a, #b, (a), (b), (n))
void tu_assert_mem_eq(const char *file, int line, const char *ea,
                      const char *eb, const void *a, const void *b, size_t n);

/* deterministic content: byte i of pattern `seed` */
void tu_fill(void *buf, size_t len, uint32_t seed);
/* returns the offset of the first wrong byte, or (size_t)-1 */
size_t tu_check(const void *buf, size_t len, uint32_t seed);
#define TU_ASSERT_PATTERN(buf, len, seed)                                      \
    tu_assert_pattern(__FILE__, __LINE__, #buf, (buf), (len), (seed))
void tu_assert_pattern(const char *file, int line, const char *ebuf,
                       const void *buf, size_t len, uint32_t seed);
/* every byte == val */
#define TU_ASSERT_BYTES(buf, len, val)                                         \
    tu_assert_bytes(__FILE__, __LINE__, #buf, (buf), (len), (val))
void tu_assert_bytes(const char *file, int line, const char *ebuf,
                     const void *buf, size_t len, unsigned char val);

void *tu_malloc(size_t size); /* asserts success */
/* Stay away from pscom for ms milliseconds, to create an idle period for
 * the peer (never to order events: that is what the control channel is for). */
void tu_pause_ms(unsigned ms);
/* Milliseconds on the monotonic clock (to measure how long something took). */
double tu_now_ms(void);
/* Descriptors this process has open now (/proc/self/fd), timers
 * (timerfd) not counted: pscom makes none, and UCX makes one per worker
 * when its first endpoint of mode PEER starts the keepalive
 * (PSP_UCP_ERR_HANDLING=1), which stays while the worker does. */
int tu_count_fds(void);
/* Resident set size of this process (/proc/self/statm), in bytes. */
size_t tu_rss_bytes(void);
/* Heap in use (mallinfo2: allocated chunks and mmap'ed blocks), in bytes;
 * 0 where the C library cannot tell (glibc before 2.33). */
long tu_heap_bytes(void);

/* A plain TCP socket bound to addr (INADDR_LOOPBACK, INADDR_ANY: host
 * byte order) and a free port (*port); listening if backlog > 0, else
 * bound only (connects to it are refused). */
int tu_tcp_socket(uint32_t addr, int backlog, int *port);
/* accept() on lfd, going on after EINTR (a signal); asserts success. */
int tu_tcp_accept(int lfd);
/* A TCP socket connected to port on loopback (an interrupted connect is
 * waited for); asserts success. */
int tu_tcp_connect(int port);

/* ------------------------------------------------------------------ */
/* What the library prints to stderr                                  */
/* ------------------------------------------------------------------ */

/* Redirect fd 2 into a temporary file (captures do not nest). */
void tu_capture_begin(void);
/* Restore stderr; returns what was written meanwhile (malloc'ed) and
 * echoes it to the real stderr, for the test's own log. */
char *tu_capture_end(void);

/* ------------------------------------------------------------------ */
/* pscom's log of each process, in a file of its own                  */
/* ------------------------------------------------------------------ */

/* Before tu_run(): every process started from here on logs (PSP_DEBUG_OUT)
 * into $TMPDIR/<prefix>.<pid>.log, at PSP_DEBUG=debug. */
void tu_log_files(const char *prefix, int debug);
/* What this process has logged so far (malloc'ed; fails if there is no log). */
char *tu_log_file_text(void);
/* Occurrences of needle in what this process has logged so far. */
int tu_log_file_count(const char *needle);
/* The same in the log of process pid (0 if it has none yet): watching a
 * process that waits inside pscom. */
int tu_log_file_count_of(pid_t pid, const char *needle);
/* Remove this process's log file (at the end of a role that passed). */
void tu_log_file_remove(void);
/* The same for process pid (a peer that died without removing its own). */
void tu_log_file_remove_of(pid_t pid);

/* ------------------------------------------------------------------ */
/* Control channel (server <-> client), pipe-like, never pscom        */
/* ------------------------------------------------------------------ */

/* Send one value to `peer` (server: client rank 1..n; client: TU_SERVER). */
void tu_signal(tu_ctx_t *ctx, int peer, uint32_t value);
/* Block until `peer` sends a value; fails if the peer is gone. */
uint32_t tu_wait_signal(tu_ctx_t *ctx, int peer);
/* Like tu_wait_signal(), but keeps pscom progressing while waiting (for
 * when the peer needs something from us first, e.g. a queued send): at
 * full speed while there is work, idling up to 1 ms per pass while not. */
uint32_t tu_wait_signal_progress(tu_ctx_t *ctx, int peer);
/* Block until the peer's control channel reaches EOF (peer exited). */
void tu_wait_peer_exit(tu_ctx_t *ctx, int peer);
/* Same, keeping pscom progressing while waiting. */
void tu_wait_peer_exit_progress(tu_ctx_t *ctx, int peer);

/* ------------------------------------------------------------------ */
/* pscom helpers                                                      */
/* ------------------------------------------------------------------ */

/* Open an INTER_JOB socket (rank = ctx->rank) and name it "<prefix><rank>". */
pscom_socket_t *tu_open_socket(tu_ctx_t *ctx, size_t userdata_size,
                               size_t con_userdata_size);
/* Server: pscom_listen(sock, PSCOM_ANYPORT), get the endpoint string and
 * send it to every client. Set sock->ops before calling. */
void tu_server_listen(tu_ctx_t *ctx, pscom_socket_t *sock);
/* Client: receive the server's endpoint string (stored in ctx->ep). */
const char *tu_client_get_ep(tu_ctx_t *ctx);
/* Client: open a connection on sock, connect it DIRECT to the server,
 * send the hello message (so that tu_server_accept_all() can map it) and
 * wait for the server's welcome (so the hello has surely arrived: a
 * transport need not deliver while the sender stays out of pscom). */
pscom_connection_t *tu_client_connect(tu_ctx_t *ctx, pscom_socket_t *sock);
/* Server: receive one hello from every client and answer each with a
 * welcome; cons[i] (i = 1..nclients) becomes the connection of client i.
 * cons must have nclients+1 slots. */
void tu_server_accept_all(tu_ctx_t *ctx, pscom_socket_t *sock,
                          pscom_connection_t **cons);
/* Server of a run with one client: tu_server_listen() and
 * tu_server_accept_all(); returns the client's connection. */
pscom_connection_t *tu_server_accept_one(tu_ctx_t *ctx, pscom_socket_t *sock);
/* A receive request on con (and its socket) for up to data_len bytes into
 * data and an xheader of xheader_len bytes, not posted yet. */
pscom_request_t *tu_make_recv(pscom_connection_t *con, void *data, size_t data_len,
                              size_t xheader_len);
/* The same, posted; returns the request. */
pscom_request_t *tu_post_recv(pscom_connection_t *con, void *data, size_t data_len,
                              size_t xheader_len);
/* The connection type PSCOM_TEST_CONTYPE asks for, without a variant
 * ("ucp" for "ucp-shm"), or NULL if it is not set or empty. */
const char *tu_contype(void);
/* Assert the connection type against tu_contype() (if set). */
void tu_check_con_type(pscom_connection_t *con);

/* A message of len bytes of pattern seed, its 4-byte xheader seed
 * (pscom_send(): the data is copied). */
void tu_send_pattern(pscom_connection_t *con, uint32_t seed, size_t len);
/* Receive the next message of con (pscom_recv()): the xheader must be
 * seed, the data len bytes of pattern seed. */
void tu_recv_pattern(pscom_connection_t *con, uint32_t seed, size_t len);
/* Receive n messages of con in order, each successful with xheader i
 * (4 bytes) and exactly len bytes of pattern i (i = 0 .. n-1); what says
 * where they came from in a failure ("sent before the peer died"). */
void tu_recv_sequence(pscom_connection_t *con, uint32_t n, size_t len, const char *what);

/* Tagged zero-data messages ("fences"): the xheader is the 4-byte tag. */
#define TU_TAG_HELLO   0xF00DBEEFu
#define TU_TAG_WELCOME 0xF00DCAFEu
void tu_send_tag(pscom_connection_t *con, uint32_t tag);
/* Receive the next message with this tag (other messages are left to
 * other receives or become unexpected). con may be NULL (any connection of
 * sock). Returns the connection it came from. */
pscom_connection_t *tu_wait_tag(pscom_connection_t *con, pscom_socket_t *sock,
                                uint32_t tag);
/* An echo of 100 bytes (pattern seed) with content checks, then the
 * connection is closed: the client sends, the server checks and sends it
 * back, the client checks and sends TU_TAG_DONE, the server closes only
 * after that. */
#define TU_TAG_DONE 0xF00DD0E5u
void tu_echo_server(pscom_connection_t *con, uint32_t seed);
void tu_echo_client(pscom_connection_t *con, uint32_t seed);
/* recv_accept that accepts messages whose first xheader u32 equals
 * *(uint32_t *)request->user (request created with user_size >= 4). */
int tu_accept_tag(pscom_request_t *req, pscom_connection_t *con,
                  pscom_header_net_t *header_net);
/* first u32 of an incoming xheader, or 0 if shorter than 4 bytes */
uint32_t tu_header_tag(const pscom_header_net_t *header_net);
/* recv_accept that never accepts (parked receives, spec 5.3 flow control) */
int tu_accept_none(pscom_request_t *req, pscom_connection_t *con,
                   pscom_header_net_t *header_net);

/* A con_error recorder: set sock->ops.con_error = tu_on_con_error. Every
 * call counts in tu_nerrs; the first TU_ERRS_MAX are kept in tu_errs. */
#define TU_ERRS_MAX 16
typedef struct tu_err_rec {
    pscom_connection_t *con;
    pscom_op_t op;
    pscom_err_t err;
} tu_err_rec_t;
extern tu_err_rec_t tu_errs[TU_ERRS_MAX];
extern volatile int tu_nerrs;
void tu_on_con_error(pscom_connection_t *con, pscom_op_t op, pscom_err_t err);
/* The first recorded error of con, or NULL. */
const tu_err_rec_t *tu_error_of(pscom_connection_t *con);

/* Wait (pscom_wait_any) until *flag != 0. */
void tu_wait_flag(volatile int *flag);

/* pscom_test_any() up to n times or until *flag != 0; returns *flag */
int tu_poll_flag(volatile int *flag, int n);

#ifdef __cplusplus
}
#endif

#endif /* PSCOM_TESTUTIL_H */
