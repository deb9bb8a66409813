/*
 * itest_openib: the openib plugin where it cannot be used, over the
 * software HCA (test/verbs_emul; the module built against it is loaded
 * from PSCOM_TEST_OPENIB_EMUL_DIR). openib and tcp are enabled, openib
 * first; each time the connection must fall back to tcp, cleanly on both
 * sides (the sanitizer build checks that nothing of the attempt leaks),
 * and an echo with content checks must run over it:
 *
 *   control      nothing fails: the connection is openib (so the module
 *                was loaded and tried first in the cases below)
 *   real_module  the module built against the real libibverbs, on a
 *                machine without an RDMA device: one line says so
 *                ("openib: no verbs devices ..." or "openib: no device")
 *   no_device    no verbs device at all: one log line says so
 *   port_down    the device's port is not active: one log line says so
 *   offer_qp     the connecting side cannot create its queue pair
 *   accept_rtr   the accepting side cannot connect its queue pair (RTR)
 *   connect_rtr  the connecting side cannot connect its queue pair, after
 *                the accepting side has taken its own to RTS
 *
 * and, with the verbs of the accepting side failing later:
 *
 *   accept_rts   the accepting side's queue pair cannot reach RTS
 *
 * Then a peer whose packets arrive broken (VERBS_EMUL_CORRUPT changes the
 * client's second send on the wire, the message after its hello): the
 * server's posted receive must end with an error, con_error must come on
 * both sides, the server must log what was wrong, and nothing may hang:
 *
 *   bad_magic    the packet header's magic
 *   bad_flags    a flag that does not exist
 *   bad_tokens   more credits returned than were ever lent
 *   bad_length   a packet shorter than its header
 *   bad_type     the pscom message inside: a type that does not exist
 *
 * Credits that differ in the two directions (credits_asym): the client
 * has the fewest receive and send slots there can be and returns credits
 * at once, the server many slots and returns them alone only when all but
 * two are owed; both post 1,500 sends at once (whole, in slices,
 * rendezvous pushed and read), then receive them all, checked, in order.
 *
 * A close whose flush never comes (flush_lost): the completions that did
 * not come keep no room in the completion queue.
 *
 * One failure whose con_error closes the other connections (three
 * clients, traffic on every connection): client 1 dies (its connection
 * fails on its own, fail_one), or the server's completion queue fails
 * (the software HCA's VERBS_EMUL_FAIL=cq_overrun, at the arming when the
 * server's wait goes to sleep: the poller ends every connection in one
 * walk, fail_all). Every request of the server ends, every client gets
 * its con_error, nothing hangs, and the sanitizer build sees no memory
 * used after its free.
 */
#include "pscom_testutil.h"

#include <signal.h>
#include <stdlib.h>
#include <string.h>

typedef struct fb_case {
    const char *name;
    const char *env, *env_value; /* set in every process before pscom starts */
    const char *server_fail; /* VERBS_EMUL_FAIL of the accepting side */
    const char *client_fail; /* ... of the connecting side */
    const char *log_line;  /* every process must have logged this, or NULL */
    pscom_con_type_t want;
    int real;              /* the real module (next to libpscom), not the emulation's */
    int fail_later;        /* the *_fail calls fail only once openib is set up */
} fb_case_t;

static const fb_case_t *cur;

static void expect_type(pscom_connection_t *con)
{
    TU_ASSERT_MSG(con->type == cur->want, "%s: connection type is \"%s\", want \"%s\"",
                  cur->name, pscom_con_type_str(con->type), pscom_con_type_str(cur->want));
}

static void expect_log(void)
{
    if (!cur->log_line) return;
    TU_ASSERT_MSG(tu_log_file_count(cur->log_line) == 1, "%s: \"%s\" logged %d times, want once",
                  cur->name, cur->log_line, tu_log_file_count(cur->log_line));
}

static int fb_role(tu_ctx_t *ctx, int server)
{
    const char *fail = server ? cur->server_fail : cur->client_fail;
    if (fail && !cur->fail_later) setenv("VERBS_EMUL_FAIL", fail, 1);
    pscom_socket_t *sock = tu_open_socket(ctx, 0, 0); /* openib's init */
    if (fail && cur->fail_later) setenv("VERBS_EMUL_FAIL", fail, 1);
    pscom_connection_t *con = server ? tu_server_accept_one(ctx, sock) : tu_client_connect(ctx, sock);
    expect_type(con);
    if (server) {
        tu_echo_server(con, 7);
    } else {
        tu_echo_client(con, 7);
    }
    expect_log();
    pscom_close_socket(sock);
    tu_log_file_remove();
    return 0;
}

static int fb_server(tu_ctx_t *ctx)
{
    return fb_role(ctx, 1);
}

static int fb_client(tu_ctx_t *ctx)
{
    return fb_role(ctx, 0);
}

static const fb_case_t cases[] = {
#define TCP PSCOM_CON_TYPE_TCP
    {"control", NULL, NULL, NULL, NULL, NULL, PSCOM_CON_TYPE_OPENIB},
    {"real_module", NULL, NULL, NULL, NULL, "openib: no ", TCP, 1},
    {"no_device", "VERBS_EMUL_DEVICES", "0", NULL, NULL, "openib: no device", TCP},
    {"port_down", "VERBS_EMUL_PORT_STATE", "down", NULL, NULL,
     "openib: no active port with a LID", TCP},
    {"offer_qp", NULL, NULL, NULL, "create_qp", NULL, TCP},
    {"accept_rtr", NULL, NULL, "modify_qp_rtr", NULL, NULL, TCP},
    {"connect_rtr", NULL, NULL, NULL, "modify_qp_rtr", NULL, TCP},
    {"accept_rts", NULL, NULL, "modify_qp_rts", NULL, NULL, TCP},
    /* the completion queues: the first grows from one entry; where it
     * cannot, a second is made; where neither works, tcp; none at all */
#define OPENIB PSCOM_CON_TYPE_OPENIB
    {"cq_grows", "PSP_OPENIB_COMPQ_SIZE", "1", NULL, NULL, NULL, OPENIB},
    {"cq_second", "PSP_OPENIB_COMPQ_SIZE", "1", "resize_cq", "resize_cq", NULL, OPENIB, 0, 1},
    {"accept_cq_full", "PSP_OPENIB_COMPQ_SIZE", "1", "resize_cq,create_cq", NULL, NULL, TCP, 0,
     1},
    {"offer_cq_full", "PSP_OPENIB_COMPQ_SIZE", "1", NULL, "resize_cq,create_cq", NULL, TCP, 0,
     1},
    {"no_cq", NULL, NULL, "create_cq", "create_cq",
     "openib: emul0: cannot create a completion queue", TCP},
};

/* ---- a flush that never comes ----------------------------------------------- */

/* The queue pair's flush at a close does not come (the software HCA's
 * flush_hold: a provider that cleans the destroyed queue pair's
 * completions out of the queue): the close gives up after its wait, and
 * the completions that never came must not keep room in the queue. The
 * queue starts with one entry: the first connection makes it grow, a
 * second one after the close must fit without growing it again. */
static int fl_role(tu_ctx_t *ctx)
{
    int server           = ctx->rank == TU_SERVER;
    pscom_socket_t *sock = tu_open_socket(ctx, 0, 0);
    setenv("VERBS_EMUL_FAIL", "flush_hold", 1);
    if (server) tu_server_listen(ctx, sock);
    for (uint32_t round = 1; round <= 2; round++) {
        pscom_connection_t *cons[2];
        if (server) {
            tu_server_accept_all(ctx, sock, cons);
        } else {
            cons[1] = tu_client_connect(ctx, sock);
        }
        TU_ASSERT_EQ(cons[1]->type, PSCOM_CON_TYPE_OPENIB);
        if (server) { /* each closes the connection */
            tu_echo_server(cons[1], round);
        } else {
            tu_echo_client(cons[1], round);
        }
    }
    pscom_close_socket(sock); /* the last close ends here */
    unsetenv("VERBS_EMUL_FAIL");
    int lost = tu_log_file_count("work requests not flushed at close");
    TU_ASSERT_MSG(lost == 2, "flushes given up at close: %d, want 2", lost);
    int grown = tu_log_file_count("openib: completion queue 0 now");
    TU_ASSERT_MSG(grown == 1, "the completion queue grew %d times, want once", grown);
    tu_log_file_remove();
    return 0;
}

/* ---- rendezvous by RDMA read ------------------------------------------------- */

/* Large messages both ways, verified. With fail set (VERBS_EMUL_FAIL of
 * this side once connected: "reg_mr"), this side can register neither a
 * buffer to be read nor one to read into: every message to and from it is
 * pushed through the slots instead, and says so in the log. */
typedef struct rd_case {
    const char *name;
    const char *server_fail, *client_fail;
} rd_case_t;

static const rd_case_t *rcur;
static const size_t rd_sizes[] = {1u << 20, (1u << 20) + 13, 300000, (3u << 20) + 1};
#define RD_N (sizeof(rd_sizes) / sizeof(rd_sizes[0]))

static void send_big(pscom_connection_t *con, uint32_t seed, size_t len)
{
    pscom_request_t *s = pscom_request_create(sizeof(seed), 0);
    unsigned char *buf = tu_malloc(len);
    tu_fill(buf, len, seed);
    pscom_req_prepare(s, con, buf, len, &seed, sizeof(seed));
    pscom_post_send(s);
    pscom_wait(s);
    TU_ASSERT_SUCCESSFUL(s);
    pscom_request_free(s);
    free(buf);
}

static int rd_role(tu_ctx_t *ctx, int server)
{
    const char *fail        = server ? rcur->server_fail : rcur->client_fail;
    pscom_socket_t *sock    = tu_open_socket(ctx, 0, 0);
    pscom_connection_t *con = server ? tu_server_accept_one(ctx, sock) : tu_client_connect(ctx, sock);
    TU_ASSERT_EQ(con->type, PSCOM_CON_TYPE_OPENIB);
    if (fail) setenv("VERBS_EMUL_FAIL", fail, 1);
    for (unsigned i = 0; i < RD_N; i++) {
        if (server) {
            tu_recv_pattern(con, 100 + i, rd_sizes[i]);
            send_big(con, 200 + i, rd_sizes[i]);
        } else {
            send_big(con, 100 + i, rd_sizes[i]);
            tu_recv_pattern(con, 200 + i, rd_sizes[i]);
        }
    }
    unsetenv("VERBS_EMUL_FAIL");
    int pushed = tu_log_file_count("(pushed instead)");
    int read   = tu_log_file_count("read by RDMA");
    if (fail) { /* its exports and its reads: one of each per size */
        TU_ASSERT_MSG(pushed == 2 * (int)RD_N, "%s: %d messages pushed, want %d", rcur->name,
                      pushed, 2 * (int)RD_N);
        TU_ASSERT_MSG(read == 0, "%s: %d read by RDMA, want none", rcur->name, read);
    } else if (!rcur->server_fail && !rcur->client_fail) {
        TU_ASSERT_MSG(pushed == 0 && read == (int)RD_N, "%s: %d read by RDMA, %d pushed; want %d, 0",
                      rcur->name, read, pushed, (int)RD_N);
    } else { /* the peer fails: what it sends is pushed, what we send it too */
        TU_ASSERT_MSG(pushed == 0 && read == 0, "%s: %d read, %d pushed here; want 0, 0",
                      rcur->name, read, pushed);
    }

    pscom_close_socket(sock);
    tu_log_file_remove();
    return 0;
}

static int rd_server(tu_ctx_t *ctx)
{
    return rd_role(ctx, 1);
}

static int rd_client(tu_ctx_t *ctx)
{
    return rd_role(ctx, 0);
}

/* The sender dies as the receiver's read request reaches it (the software
 * HCA's read_exit): the read ends when the handshake socket says the peer
 * is gone, the receive with an error, and con_error is called; no hang. */
static int rd_death_server(tu_ctx_t *ctx)
{
    pscom_socket_t *sock    = tu_open_socket(ctx, 0, 0);
    sock->ops.con_error     = tu_on_con_error;
    pscom_connection_t *con = tu_server_accept_one(ctx, sock);
    TU_ASSERT_EQ(con->type, PSCOM_CON_TYPE_OPENIB);
    size_t len         = 1u << 20;
    unsigned char *buf = tu_malloc(len);
    TU_ASSERT_EQ(tu_wait_signal(ctx, 1), 1); /* the send is posted */
    pscom_request_t *r = tu_post_recv(con, buf, len, 4);
    pscom_wait(r);
    TU_ASSERT_MSG(!pscom_req_successful(r), "the receive from a dead sender succeeded: [%s]",
                  tu_state_str(r->state));
    while (!tu_error_of(con)) pscom_wait_any();
    int gone = tu_log_file_count("RDMA read given up: the peer is gone");
    TU_ASSERT_MSG(gone == 1, "the read was given up %d times, want once", gone);
    pscom_request_free(r);
    free(buf);
    pscom_close_socket(sock);
    tu_log_file_remove();
    tu_log_file_remove_of(ctx->client_pids[1]); /* it died with its log open */
    return 0;
}

static int rd_death_client(tu_ctx_t *ctx)
{
    setenv("VERBS_EMUL_FAIL", "read_exit", 1); /* before the device is opened */
    pscom_socket_t *sock    = tu_open_socket(ctx, 0, 0);
    pscom_connection_t *con = tu_client_connect(ctx, sock);
    size_t len              = 1u << 20;
    unsigned char *buf      = tu_malloc(len);
    uint32_t seed           = 7;
    tu_fill(buf, len, seed);
    pscom_request_t *s = pscom_request_create(sizeof(seed), 0);
    pscom_req_prepare(s, con, buf, len, &seed, sizeof(seed));
    pscom_post_send(s);
    tu_signal(ctx, TU_SERVER, 1);
    for (;;) pscom_wait_any(); /* until the read request ends the process */
    return 1;                  /* not reached */
}

static const rd_case_t rd_cases[] = {
    {"rdma_read", NULL, NULL},
    {"rdma_read_server_cannot_register", "reg_mr", NULL},
    {"rdma_read_client_cannot_register", NULL, "reg_mr"},
};

/* ---- broken packets ---------------------------------------------------------- */

typedef struct gb_case {
    const char *name;
    const char *corrupt;  /* VERBS_EMUL_CORRUPT of the client */
    const char *log_line; /* the server must have logged this once, or NULL */
} gb_case_t;

static const gb_case_t *gcur;

static int gb_server(tu_ctx_t *ctx)
{
    unsigned char buf[100];
    pscom_socket_t *sock    = tu_open_socket(ctx, 0, 0);
    sock->ops.con_error     = tu_on_con_error;
    pscom_connection_t *con = tu_server_accept_one(ctx, sock);
    TU_ASSERT_EQ(con->type, PSCOM_CON_TYPE_OPENIB);
    pscom_request_t *r = tu_post_recv(con, buf, sizeof(buf), 4);
    tu_signal(ctx, 1, 1);
    pscom_wait(r);
    TU_ASSERT_MSG((r->state & PSCOM_REQ_STATE_ERROR) && !pscom_req_successful(r),
                  "%s: the receive of the broken message did not fail: [%s]", gcur->name,
                  tu_state_str(r->state));
    while (!tu_error_of(con)) pscom_wait_any();
    if (gcur->log_line) {
        TU_ASSERT_MSG(tu_log_file_count(gcur->log_line) == 1, "%s: \"%s\" logged %d times",
                      gcur->name, gcur->log_line, tu_log_file_count(gcur->log_line));
    }
    pscom_request_free(r);
    pscom_close_socket(sock);
    tu_log_file_remove();
    return 0;
}

static int gb_client(tu_ctx_t *ctx)
{
    pscom_socket_t *sock    = tu_open_socket(ctx, 0, 0);
    sock->ops.con_error     = tu_on_con_error;
    pscom_connection_t *con = tu_client_connect(ctx, sock); /* its hello: send 1 */
    TU_ASSERT_EQ(tu_wait_signal(ctx, TU_SERVER), 1);
    setenv("VERBS_EMUL_CORRUPT", gcur->corrupt, 1);
    tu_send_pattern(con, 5, 100); /* send 2 */
    while (!tu_error_of(con)) pscom_wait_any();
    pscom_close_socket(sock);
    tu_log_file_remove();
    return 0;
}

static const gb_case_t gb_cases[] = {
    {"bad_magic", "2:0:0xff", "openib: protocol error: malformed packet header"},
    {"bad_flags", "2:2:0x80", "openib: protocol error: malformed packet header"},
    {"bad_tokens", "2:7:0x40", "openib: protocol error: more credits returned than lent"},
    {"bad_length", "2:0:0:4", "openib: protocol error: packet of a bad length"},
    {"bad_type", "2:10:0x7f", NULL},
};

/* ---- credits that differ in the two directions ------------------------------- */

#define CR_N 1500

/* message i from side dir (1: client, 2: server): rendezvous by RDMA read
 * (from 131072 bytes, the default), rendezvous pushed through the slots
 * (from 40000), slices of the byte stream (more than a slot), whole */
static size_t cr_len(uint32_t dir, uint32_t i)
{
    switch (i % 50) {
    case 49: return 140000 + (i * 7919u + dir) % 90000;
    case 24: return 41000 + (i * 6151u + dir) % 80000;
    case 5:
    case 15:
    case 35: return 16500 + (i * 4099u + dir) % 23000;
    default: return (i * 37u + dir) % 301;
    }
}

static void cr_env(const tu_ctx_t *ctx)
{
    int server = ctx->rank == TU_SERVER;
    setenv("PSP_OPENIB_RECVQ_SIZE", server ? "64" : "3", 1);
    setenv("PSP_OPENIB_SENDQ_SIZE", server ? "64" : "1", 1);
    setenv("PSP_OPENIB_PENDING_TOKENS", server ? "62" : "1", 1);
}

static int cr_role(tu_ctx_t *ctx)
{
    int server              = ctx->rank == TU_SERVER;
    uint32_t me             = server ? 2 : 1, peer = 3 - me;
    pscom_socket_t *sock    = tu_open_socket(ctx, 0, 0);
    pscom_connection_t *con = server ? tu_server_accept_one(ctx, sock) : tu_client_connect(ctx, sock);
    TU_ASSERT_EQ(con->type, PSCOM_CON_TYPE_OPENIB);
    /* the slots of this side, the credits the other's */
    const char *started = server ? "64/64 slots, 3 credits" : "3/1 slots, 64 credits";
    TU_ASSERT_MSG(tu_log_file_count(started) == 1, "\"%s\" logged %d times, want once", started,
                  tu_log_file_count(started));
    pscom_request_t **s = tu_malloc(CR_N * sizeof(*s));
    unsigned char **buf = tu_malloc(CR_N * sizeof(*buf));
    for (uint32_t i = 0; i < CR_N; i++) {
        size_t len    = cr_len(me, i);
        uint32_t seed = me << 24 | i;
        buf[i]        = tu_malloc(len + 1);
        tu_fill(buf[i], len, seed);
        s[i] = pscom_request_create(sizeof(seed), 0);
        pscom_req_prepare(s[i], con, buf[i], len, &seed, sizeof(seed));
        pscom_post_send(s[i]);
    }
    for (uint32_t i = 0; i < CR_N; i++) {
        tu_step("credits_asym: message %u of %u from the peer", i, CR_N);
        tu_recv_pattern(con, peer << 24 | i, cr_len(peer, i));
    }
    for (uint32_t i = 0; i < CR_N; i++) {
        pscom_wait(s[i]);
        TU_ASSERT_SUCCESSFUL(s[i]);
        pscom_request_free(s[i]);
        free(buf[i]);
    }
    free(s);
    free(buf);
    pscom_close_socket(sock);
    tu_log_file_remove();
    return 0;
}

/* ---- one failure, and its con_error closes the other connections ------------- */

#define FO_NC   3
#define FO_SEND 100
#define FO_RECV 32
#define FO_LEN  3000

static int fo_all; /* fail_all: the server's completion queue fails */
static pscom_connection_t *fo_cons[FO_NC + 1];
static pscom_connection_t *fo_first; /* the connection of the first con_error */
static int fo_errs;

/* The first con_error closes every other connection. With fail_all the
 * con_errors of the others came with the first: they may run inside
 * pscom_close_connection (its unlock runs what is queued), before their
 * connection is closed. */
static void fo_on_error(pscom_connection_t *con, pscom_op_t op, pscom_err_t err)
{
    (void)op;
    (void)err;
    fo_errs++;
    if (fo_first) return;
    fo_first = con;
    for (int i = 1; i <= FO_NC; i++) {
        if (fo_cons[i] == con) continue;
        pscom_connection_t *other = fo_cons[i];
        fo_cons[i]                = NULL;
        pscom_close_connection(other);
    }
}

static int fo_server(tu_ctx_t *ctx)
{
    static char sbuf[FO_LEN], rbuf[FO_NC + 1][FO_RECV][FO_LEN];
    static pscom_request_t *s[FO_NC + 1][FO_SEND], *r[FO_NC + 1][FO_RECV];
    pscom_socket_t *sock = tu_open_socket(ctx, 0, 0);
    sock->ops.con_error  = fo_on_error;
    tu_server_listen(ctx, sock);
    tu_server_accept_all(ctx, sock, fo_cons);
    pscom_connection_t *first_client = fo_cons[1];
    /* at the next arming, when this side's wait goes to sleep */
    if (fo_all) setenv("VERBS_EMUL_FAIL", "cq_overrun", 1);
    for (int c = 1; c <= FO_NC; c++) {
        TU_ASSERT_EQ(fo_cons[c]->type, PSCOM_CON_TYPE_OPENIB);
        for (int k = 0; k < FO_RECV; k++) r[c][k] = tu_post_recv(fo_cons[c], rbuf[c][k], FO_LEN, 4);
        for (uint32_t k = 0; k < FO_SEND; k++) {
            s[c][k] = pscom_request_create(sizeof(k), 0);
            pscom_req_prepare(s[c][k], fo_cons[c], sbuf, (k * 37) % FO_LEN, &k, sizeof(k));
            pscom_post_send(s[c][k]);
        }
        tu_signal(ctx, c, 1);
    }
    tu_step("%s: waiting for the first con_error", ctx->name);
    while (!fo_first) pscom_wait_any();
    unsetenv("VERBS_EMUL_FAIL");
    if (!fo_all) { /* the others were closed before anything failed them */
        TU_ASSERT_PTR_EQ(fo_first, first_client);
        TU_ASSERT_EQ(fo_errs, 1);
    }
    tu_step("%s: waiting for every request to end", ctx->name);
    for (int c = 1; c <= FO_NC; c++) {
        for (int k = 0; k < FO_RECV; k++) {
            pscom_wait(r[c][k]);
            pscom_request_free(r[c][k]);
        }
        for (int k = 0; k < FO_SEND; k++) {
            pscom_wait(s[c][k]);
            pscom_request_free(s[c][k]);
        }
    }
    if (fo_all) {
        int n = tu_log_file_count("openib: ibv_poll_cq failed: every openib connection fails");
        TU_ASSERT_MSG(n == 1, "the failed poll logged %d times, want once", n);
        n = tu_log_file_count("openib: completion queue failed");
        TU_ASSERT_MSG(n == FO_NC, "%d connections failed with the queue, want %d", n, FO_NC);
    }
    pscom_close_socket(sock);
    tu_log_file_remove();
    if (!fo_all) tu_log_file_remove_of(ctx->client_pids[1]); /* it died with its log open */
    return 0;
}

static int fo_client(tu_ctx_t *ctx)
{
    static char buf[FO_LEN];
    pscom_socket_t *sock    = tu_open_socket(ctx, 0, 0);
    sock->ops.con_error     = tu_on_con_error;
    pscom_connection_t *con = tu_client_connect(ctx, sock);
    TU_ASSERT_EQ(tu_wait_signal(ctx, TU_SERVER), 1);
    if (!fo_all && ctx->rank == 1) raise(SIGKILL);
    /* fail_one: traffic until the server closes this connection; fail_all:
     * none, so that the server's wait goes to sleep */
    for (uint32_t k = 0; !fo_all; k++) {
        tu_step("%s: message %u to the server", ctx->name, k);
        pscom_request_t *q = pscom_request_create(sizeof(k), 0);
        pscom_req_prepare(q, con, buf, (k * 13) % FO_LEN, &k, sizeof(k));
        pscom_post_send(q);
        pscom_wait(q);
        int ok = pscom_req_successful(q);
        pscom_request_free(q);
        if (!ok) break;
    }
    tu_step("%s: waiting for con_error", ctx->name);
    while (!tu_error_of(con)) pscom_wait_any();
    pscom_close_socket(sock);
    tu_log_file_remove();
    return 0;
}

int main(void)
{
    setenv("PSP_OPENIB", "1", 1);
    setenv("PSP_TCP", "1", 1);
    setenv("PSP_SHM", "0", 1);
    setenv("PSP_UCP", "0", 1);
    unsetenv("PSCOM_TEST_CONTYPE"); /* the harness would insist on openib */
    tu_log_files("itest_openib", 3);
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        cur = &cases[i];
        unsetenv("VERBS_EMUL_DEVICES");
        unsetenv("VERBS_EMUL_PORT_STATE");
        unsetenv("VERBS_EMUL_FAIL");
        if (cur->env) setenv(cur->env, cur->env_value, 1);
        if (cur->real) {
            unsetenv("PSP_PLUGINDIR");
        } else {
            setenv("PSP_PLUGINDIR", PSCOM_TEST_OPENIB_EMUL_DIR, 1);
        }
        if (tu_run(cur->name, 1, fb_server, fb_client, NULL)) return 1;
        if (cur->env) unsetenv(cur->env);
    }
    unsetenv("VERBS_EMUL_DEVICES");
    unsetenv("VERBS_EMUL_PORT_STATE");
    unsetenv("VERBS_EMUL_FAIL");
    setenv("PSP_PLUGINDIR", PSCOM_TEST_OPENIB_EMUL_DIR, 1);
    tu_log_files("itest_openib", 4); /* the reads and pushes are said at debug level */
    for (size_t i = 0; i < sizeof(rd_cases) / sizeof(rd_cases[0]); i++) {
        rcur = &rd_cases[i];
        if (tu_run(rcur->name, 1, rd_server, rd_client, NULL)) return 1;
    }
    if (tu_run("rdma_read_sender_dies", 1, rd_death_server, rd_death_client, NULL)) return 1;
    setenv("PSP_OPENIB_COMPQ_SIZE", "1", 1);
    if (tu_run("flush_lost", 1, fl_role, fl_role, NULL)) return 1;
    unsetenv("PSP_OPENIB_COMPQ_SIZE");
    tu_log_files("itest_openib", 3);
    /* The broken packet is the client's second send WR, its message after
     * the hello: a receive queue small enough, or credits returned at once,
     * put a credit packet there (scripts/sweep.sh sets both) */
    unsetenv("PSP_OPENIB_RECVQ_SIZE");
    unsetenv("PSP_OPENIB_PENDING_TOKENS");
    for (size_t i = 0; i < sizeof(gb_cases) / sizeof(gb_cases[0]); i++) {
        gcur = &gb_cases[i];
        if (tu_run(gcur->name, 1, gb_server, gb_client, NULL)) return 1;
    }
    tu_log_files("itest_openib", 4); /* "started (..., slots, credits)" is debug */
    const tu_opts_t cr_opts = {.before_init = cr_env};
    if (tu_run("credits_asym", 1, cr_role, cr_role, &cr_opts)) return 1;
    tu_log_files("itest_openib", 3);
    const tu_opts_t fo_opts = {.killed_must_mask = 1u << 1}; /* client 1 */
    if (tu_run("fail_one", FO_NC, fo_server, fo_client, &fo_opts)) return 1;
    fo_all = 1;
    if (tu_run("fail_all", FO_NC, fo_server, fo_client, NULL)) return 1;
    return 0;
}
