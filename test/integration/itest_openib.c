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
 */
#include "pscom_testutil.h"

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
    return 0;
}
