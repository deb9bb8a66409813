/*
 * itest_ucp_handshake: the ucp plugin's connection handshake against a
 * broken or a dying peer.
 *
 * This executable defines send() itself (exported, in front of libc's) to
 * act on the precon messages a process sends:
 *
 *   ucp_handshake_bad_offer  the client's OFFER of ucp carries a worker
 *                            address garbled on its way (every byte XOR
 *                            0x5a, the blob's header intact): UCX 1.13
 *                            aborts in ucp_ep_create() on such an address,
 *                            so the server must not hand it to UCX. It
 *                            declines ucp with one logged error, and the
 *                            connection comes up over tcp (switched on for
 *                            this case); a second connection between the
 *                            same processes is ucp again.
 *   ucp_handshake_bad_reply  the same for the server's ACCEPT: the client
 *                            must not use the address (it cancels ucp).
 *   ucp_handshake_bad_confirm
 *                            the client's CONFIRM of ucp garbled (its
 *                            magic): the server refuses it with one logged
 *                            error, the connection comes up over tcp. The
 *                            client had created its endpoint already
 *                            (generation 1, ucp_peer.c) and retires it (a
 *                            handshake failed on it); the second connection
 *                            takes generation 2, and the server, which has
 *                            created none, catches up by two: the second
 *                            connection is ucp.
 *   ucp_handshake_ep_closed  the server closes an unused endpoint at once
 *                            (PSP_UCP_EP_LINGER=0), while the client would
 *                            reuse its own (600000). The goodbye byte on the
 *                            endpoint's socket tells the client, which closes
 *                            its side too: the next connection takes
 *                            generation 2 (the server catches up by one),
 *                            over ucp with tcp off, with rendezvous messages
 *                            both ways, and no refusal. Twice in a row.
 *                            Until 2026-11-28 (seventeenth session) the
 *                            client learned nothing, named its endpoint 1,
 *                            was refused, and that connection went over tcp
 *                            (or failed without it); the refusal is now
 *                            left to a race (a goodbye still on its way),
 *                            and the connecting side then offers ucp again
 *                            on a new endpoint (PSCOM_PLUGIN_RETRY):
 *   ucp_handshake_refused    that race, made certain: the client does not
 *                            see the goodbye (this executable's recv() says
 *                            "nothing yet" on its endpoint's socket) and
 *                            names its endpoint 1; the server refuses and
 *                            asks for ucp again, the client retires endpoint
 *                            1, and the same connection comes up over ucp on
 *                            endpoint 2 (tcp off), with rendezvous messages
 *                            both ways. Without the offer again it fails.
 *   ucp_handshake_unstarted  the server connects back to the client (the
 *                            client's endpoint 1 has no socket both ends
 *                            are known to hold, so the server's handshake
 *                            keeps its socket) and fails right after the
 *                            client started its side (this executable's
 *                            recv() turns the CONFIRM_OK into a reset). The
 *                            client's kept socket ends before the server's
 *                            'K': only the connection it came with fails,
 *                            not the first one on the same endpoint, which
 *                            still echoes. Until 2026-11-28 (seventeenth
 *                            session) the client took the EOF for a dead
 *                            peer and failed both.
 *   ucp_handshake_linger     the server's unused endpoint closes after
 *                            PSP_UCP_EP_LINGER (300 ms) while the server
 *                            sleeps in a blocking wait without any ucp
 *                            connection (its poller off): the client, which
 *                            watches the server's log, connects again only
 *                            then, on its endpoint 2 (it keeps none:
 *                            PSP_UCP_EP_LINGER=0), and the server catches
 *                            up. Until 2026-11-28 (seventh session) only the
 *                            poller closed lingering endpoints, and the
 *                            client waited until the watchdog.
 *   ucp_handshake_death      a client that dies right after the last
 *                            message of the handshake (see hs_server);
 *   ucp_handshake_stopped    one that stops there, alive: it never
 *                            progresses its UCX worker again.
 *   ucp_handshake_wireup_timeout
 *                            one that stops there until the server's
 *                            PSP_UCP_WIREUP_TIMEOUT (300 ms) has run out
 *                            (over UCX's tcp; over shared memory UCX wires
 *                            up without the peer): the server declines ucp
 *                            with one logged error, and the connection
 *                            comes up over tcp once the client goes on.
 */
#define _GNU_SOURCE
#include "pscom_testutil.h"

#include <dlfcn.h>
#include <endian.h>
#include <signal.h>
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pscom_wire.h"
#include "ucp_priv.h"

#define CHECK_FAILED "fails its check: worker address not used"

enum hs_mode {
    HS_NONE,
    HS_BAD_OFFER,          /* garble the worker address in our next OFFER of ucp */
    HS_BAD_REPLY,          /* ... in our next ACCEPT with a ucp blob */
    HS_BAD_CONFIRM,        /* garble the magic of our next CONFIRM of ucp */
    HS_DIE_AFTER_CONFIRM,  /* SIGKILL ourselves once a CONFIRM has gone out */
    HS_STOP_AFTER_CONFIRM, /* tell the server, then SIGSTOP ourselves */
    HS_PAUSE_AFTER_CONFIRM, /* the same, and go on when continued */
};

static volatile enum hs_mode arm;
static tu_ctx_t *stop_ctx; /* HS_STOP_AFTER_CONFIRM: the control channel to the server */
static unsigned garbled; /* addresses garbled so far */

/* Where the ucp blob of a precon message (type, body of len bytes at p)
 * starts, if it is the one arm asks for; else NULL. */
static const unsigned char *blob_to_garble(uint16_t type, const unsigned char *p, size_t len)
{
    const unsigned char *blob = NULL;
    if (arm == HS_BAD_OFFER && type == PSCOM_PRECON_OFFER && len > PSCOM_PRECON_PLUGIN_NAME &&
        !strncmp((const char *)p, "ucp", PSCOM_PRECON_PLUGIN_NAME))
        blob = p + PSCOM_PRECON_PLUGIN_NAME;
    if (arm == HS_BAD_REPLY && type == PSCOM_PRECON_ACCEPT) blob = p;
    if (!blob || p + len <= blob + UCP_BLOB_HDR || memcmp(blob, "UCP1", 4)) return NULL;
    return blob;
}

__attribute__((visibility("default"))) ssize_t send(int fd, const void *buf, size_t len, int flags)
{
    typedef ssize_t (*send_fn)(int, const void *, size_t, int);
    static send_fn real;
    if (!real) real = (send_fn)dlsym(RTLD_NEXT, "send");
    if (arm == HS_NONE) return real(fd, buf, len, flags);

    /* the precon messages in buf (one or more, each whole) */
    const unsigned char *in = buf;
    unsigned char *copy     = NULL;
    int die                 = 0;
    pscom_precon_header_t h;
    for (size_t off = 0; off + sizeof(h) <= len;) {
        memcpy(&h, in + off, sizeof(h));
        size_t body = off + sizeof(h), blen = le32toh(h.len);
        if (le32toh(h.magic) != PSCOM_PRECON_MAGIC || blen > len - body) break;
        uint16_t type = le16toh(h.type);
        if (arm >= HS_DIE_AFTER_CONFIRM && type == PSCOM_PRECON_CONFIRM) die = 1;
        if (arm == HS_BAD_CONFIRM && type == PSCOM_PRECON_CONFIRM && blen >= 4 &&
            !memcmp(in + body, "UCP1", 4)) {
            copy = tu_malloc(len);
            memcpy(copy, buf, len);
            copy[body] ^= 0x5a;
            garbled++;
            arm = HS_NONE;
        }
        const unsigned char *blob = blob_to_garble(type, in + body, blen);
        if (blob) {
            if (!copy) {
                copy = tu_malloc(len);
                memcpy(copy, buf, len);
            }
            for (size_t i = (size_t)(blob - in) + UCP_BLOB_HDR; i < body + blen; i++)
                copy[i] ^= 0x5a;
            garbled++;
            arm = HS_NONE;
        }
        off = body + blen;
    }
    ssize_t n = real(fd, copy ? copy : buf, len, flags);
    free(copy);
    if (die && n > 0) {
        if (arm >= HS_STOP_AFTER_CONFIRM) {
            tu_signal(stop_ctx, TU_SERVER, 1);
            raise(SIGSTOP); /* the server SIGKILLs or SIGCONTs us */
        }
        if (arm == HS_PAUSE_AFTER_CONFIRM) {
            arm = HS_NONE;
            return n;
        }
        raise(SIGKILL);
    }
    return n;
}

/* ---- a garbled worker address ------------------------------------------------------------ */

static enum hs_mode run_mode; /* of this run (set before the roles fork) */

static void check_type(pscom_connection_t *con, const char *want)
{
    TU_ASSERT_STR_EQ(pscom_con_type_str(con->type), want);
}

#define CONFIRM_BAD "malformed handshake confirmation"

/* recv() on this descriptor says "nothing yet" (ucp_handshake_refused) */
static int hidden_fd = -1;
/* the next precon CONFIRM_OK received is a connection reset instead
 * (ucp_handshake_unstarted) */
static int reset_confirm_ok;

__attribute__((visibility("default"))) ssize_t recv(int fd, void *buf, size_t len, int flags)
{
    typedef ssize_t (*recv_fn)(int, void *, size_t, int);
    static recv_fn real;
    if (!real) real = (recv_fn)dlsym(RTLD_NEXT, "recv");
    if (fd >= 0 && fd == hidden_fd) {
        errno = EAGAIN;
        return -1;
    }
    ssize_t n = real(fd, buf, len, flags);
    pscom_precon_header_t h;
    if (reset_confirm_ok && n >= (ssize_t)sizeof(h)) {
        memcpy(&h, buf, sizeof(h));
        if (le32toh(h.magic) == PSCOM_PRECON_MAGIC &&
            le16toh(h.type) == PSCOM_PRECON_CONFIRM_OK) {
            reset_confirm_ok = 0;
            errno            = ECONNRESET;
            return -1;
        }
    }
    return n;
}

/* The side that received the garbled address (or confirmation) logged one
 * error and fell back to tcp; the other side garbled it. Then ucp works
 * again. */
static void check_side(int client)
{
    int mine = client ? run_mode == HS_BAD_OFFER || run_mode == HS_BAD_CONFIRM
                      : run_mode == HS_BAD_REPLY;
    int confirm = run_mode == HS_BAD_CONFIRM;
    TU_ASSERT_EQ(garbled, mine);
    TU_ASSERT_EQ(tu_log_file_count(confirm ? CONFIRM_BAD : CHECK_FAILED), !mine);
    TU_ASSERT_EQ(tu_log_file_count(confirm ? CHECK_FAILED : CONFIRM_BAD), 0);
    TU_ASSERT_EQ(tu_log_file_count("ucp: ucp_ep_create()"), 0);
}

/* where the server caught up with the client's endpoint generations */
#define CAUGHT_UP(from, to) ": ucp: endpoints " #from " to " #to " created, to pair"

static int bad_server(tu_ctx_t *ctx)
{
    pscom_connection_t *cons[2];
    pscom_socket_t *sock = tu_open_socket(ctx, 0, 0);
    tu_server_listen(ctx, sock);
    if (run_mode == HS_BAD_REPLY) arm = HS_BAD_REPLY;
    tu_server_accept_all(ctx, sock, cons);
    check_type(cons[1], "tcp");
    tu_echo_server(cons[1], 1);
    check_side(0);

    tu_server_accept_all(ctx, sock, cons);
    check_type(cons[1], "ucp");
    tu_echo_server(cons[1], 2);
    check_side(0);
    /* the client's endpoint 1 never reached us: 1 and 2 created here */
    TU_ASSERT_EQ(tu_log_file_count(CAUGHT_UP(1, 2)), run_mode == HS_BAD_CONFIRM);
    tu_log_file_remove();
    pscom_close_socket(sock);
    return 0;
}

static int bad_client(tu_ctx_t *ctx)
{
    pscom_socket_t *sock = tu_open_socket(ctx, 0, 0);
    if (run_mode == HS_BAD_OFFER || run_mode == HS_BAD_CONFIRM) arm = run_mode;
    pscom_connection_t *con = tu_client_connect(ctx, sock);
    check_type(con, "tcp");
    tu_echo_client(con, 1);
    check_side(1);

    con = tu_client_connect(ctx, sock);
    check_type(con, "ucp");
    tu_echo_client(con, 2);
    check_side(1);
    tu_log_file_remove();
    pscom_close_socket(sock);
    return 0;
}

/* ---- an endpoint the accepting side has closed ----------------------------------------- */

#define EP1_CLOSED  "ucp: endpoint 1 closed"
#define EP_REFUSED  "ucp: the peer's endpoint 1 is paired with one of ours that is closed"
#define EP2_CLOSED  "ucp: endpoint 2 closed"
#define CLOSED_MINE ": ucp: close (graceful)"
#define BIG_LEN     (1u << 20) /* a rendezvous over UCX's shared memory and tcp */

#define OFFERED_AGAIN "handshake: the peer's ucp asks to be offered again"

static void epclosed_env(const tu_ctx_t *ctx)
{
    /* the server closes an unused endpoint at once; the client may reuse
     * its own for five minutes */
    setenv("PSP_UCP_EP_LINGER", ctx->rank == TU_SERVER ? "0" : "600000", 1);
    setenv("PSP_TCP", "0", 1); /* ucp or nothing */
}

/* progress until our log has line (at least n times) */
static void wait_log(const char *line, int n)
{
    tu_step("waiting for the log line '%s'", line);
    while (tu_log_file_count(line) < n) {
        for (int i = 0; i < 100; i++) pscom_test_any();
    }
}

/* BIG_LEN bytes each way: UCX answers a rendezvous over the endpoint it
 * paired with the sender's; with ours paired wrongly it would not arrive */
static void big_echo(pscom_connection_t *con, int client, uint32_t seed)
{
    unsigned char *buf = tu_malloc(BIG_LEN);
    uint32_t tag       = 0xB16EC40u;
    if (client) {
        tu_fill(buf, BIG_LEN, seed);
        pscom_send(con, &tag, sizeof(tag), buf, BIG_LEN);
        memset(buf, 0, BIG_LEN);
    }
    TU_ASSERT_OK(pscom_recv_from(con, &tag, sizeof(tag), buf, BIG_LEN));
    TU_ASSERT_PATTERN(buf, BIG_LEN, seed);
    if (!client) pscom_send(con, &tag, sizeof(tag), buf, BIG_LEN);
    free(buf);
}

/* A first connection over ucp, an echo on it, closed (the endpoint it used
 * lingers then): the server's side returns its listening socket, the
 * client's its socket. */
static pscom_socket_t *first_ucp_server(tu_ctx_t *ctx)
{
    pscom_connection_t *cons[2];
    pscom_socket_t *sock = tu_open_socket(ctx, 0, 0);
    tu_server_listen(ctx, sock);
    tu_server_accept_all(ctx, sock, cons);
    check_type(cons[1], "ucp");
    tu_echo_server(cons[1], 1);
    return sock;
}

/* The same, the connection (cons[1]) left open. */
static pscom_socket_t *first_ucp_server_open(tu_ctx_t *ctx, pscom_connection_t **cons)
{
    pscom_socket_t *sock = tu_open_socket(ctx, 0, 0);
    tu_server_listen(ctx, sock);
    tu_server_accept_all(ctx, sock, cons);
    check_type(cons[1], "ucp");
    return sock;
}

/* A socket (*sock) and a connection over ucp from it to the server. */
static pscom_connection_t *ucp_client_con(tu_ctx_t *ctx, pscom_socket_t **sock)
{
    *sock                   = tu_open_socket(ctx, 0, 0);
    pscom_connection_t *con = tu_client_connect(ctx, *sock);
    check_type(con, "ucp");
    return con;
}

static pscom_socket_t *first_ucp_client(tu_ctx_t *ctx)
{
    pscom_socket_t *sock;
    tu_echo_client(ucp_client_con(ctx, &sock), 1);
    return sock;
}

static int epclosed_server(tu_ctx_t *ctx)
{
    pscom_connection_t *cons[2];
    pscom_socket_t *sock = first_ucp_server(ctx);
    for (uint32_t gen = 2; gen <= 3; gen++) {
        /* the connection's close, and the endpoint at once, its goodbye
         * on the socket before our log line */
        wait_log(gen == 2 ? EP1_CLOSED : EP2_CLOSED, 1);
        tu_signal(ctx, 1, gen);
        tu_server_accept_all(ctx, sock, cons);
        check_type(cons[1], "ucp");
        TU_ASSERT_EQ(tu_log_file_count(gen == 2 ? CAUGHT_UP(2, 2) : CAUGHT_UP(3, 3)), 1);
        big_echo(cons[1], 0, gen);
        tu_echo_server(cons[1], 10 + gen);
    }
    TU_ASSERT_EQ(tu_log_file_count(EP_REFUSED), 0);
    TU_ASSERT_EQ(tu_log_file_count("ucp: ucp_ep_create()"), 0);
    tu_log_file_remove();
    pscom_close_socket(sock);
    return 0;
}

static int epclosed_client(tu_ctx_t *ctx)
{
    pscom_socket_t *sock = first_ucp_client(ctx);
    for (uint32_t gen = 2; gen <= 3; gen++) {
        wait_log(CLOSED_MINE, (int)gen - 1); /* our endpoint gen - 1 lingers */
        TU_ASSERT_EQ(tu_wait_signal(ctx, TU_SERVER), gen);
        pscom_connection_t *con = tu_client_connect(ctx, sock);
        check_type(con, "ucp");
        /* the server's goodbye closed ours before we chose one */
        TU_ASSERT_EQ(tu_log_file_count(gen == 2 ? EP1_CLOSED : EP2_CLOSED), 1);
        big_echo(con, 1, gen);
        tu_echo_client(con, 10 + gen);
    }
    TU_ASSERT_EQ(tu_log_file_count(OFFERED_AGAIN), 0);
    tu_log_file_remove();
    pscom_close_socket(sock);
    return 0;
}

/* The one socket of ours connected to the server's listening port: our
 * endpoint's (the first connection's handshake socket, kept). */
static int endpoint_socket(const tu_ctx_t *ctx)
{
    const char *colon = strrchr(ctx->ep, ':');
    TU_ASSERT_NOT_NULL(colon);
    int port = atoi(colon + 1), found = -1;
    for (int fd = 0; fd < 1024; fd++) {
        struct sockaddr_in sa;
        socklen_t sl = sizeof(sa);
        if (getpeername(fd, (struct sockaddr *)&sa, &sl) < 0 || sa.sin_family != AF_INET ||
            ntohs(sa.sin_port) != port)
            continue;
        TU_ASSERT_MSG(found < 0, "two sockets to the server's port: %d and %d", found, fd);
        found = fd;
    }
    TU_ASSERT_MSG(found >= 0, "no socket to the server's port %d", port);
    return found;
}

static int refused_server(tu_ctx_t *ctx)
{
    pscom_connection_t *cons[2];
    pscom_socket_t *sock = first_ucp_server(ctx);
    wait_log(EP1_CLOSED, 1); /* and its goodbye sent */
    tu_signal(ctx, 1, 1);
    tu_server_accept_all(ctx, sock, cons); /* endpoint 1 refused, then endpoint 2 */
    check_type(cons[1], "ucp");
    TU_ASSERT_EQ(tu_log_file_count(EP_REFUSED), 1);
    TU_ASSERT_EQ(tu_log_file_count(CAUGHT_UP(2, 2)), 1);
    big_echo(cons[1], 0, 3);
    tu_echo_server(cons[1], 4);
    tu_log_file_remove();
    pscom_close_socket(sock);
    return 0;
}

static int refused_client(tu_ctx_t *ctx)
{
    pscom_socket_t *sock;
    pscom_connection_t *con = ucp_client_con(ctx, &sock);
    hidden_fd               = endpoint_socket(ctx); /* before the server can close its side */
    tu_echo_client(con, 1);
    wait_log(CLOSED_MINE, 1); /* our endpoint 1 lingers */
    tu_wait_signal(ctx, TU_SERVER);
    con = tu_client_connect(ctx, sock);
    check_type(con, "ucp");
    TU_ASSERT_EQ(tu_log_file_count(OFFERED_AGAIN), 1);
    TU_ASSERT_EQ(tu_log_file_count(EP1_CLOSED), 0); /* the goodbye not seen */
    big_echo(con, 1, 3);
    tu_echo_client(con, 4);
    hidden_fd = -1; /* now the goodbye closes endpoint 1 */
    wait_log(EP1_CLOSED, 1);
    tu_log_file_remove();
    pscom_close_socket(sock);
    return 0;
}

/* ---- a handshake that fails after the other side started ---------------------------------- */

static int unstarted_server(tu_ctx_t *ctx)
{
    pscom_connection_t *cons[2];
    pscom_socket_t *sock = first_ucp_server_open(ctx, cons);
    /* connect back to the client's listening socket, on our host */
    uint32_t port = tu_wait_signal(ctx, 1);
    char ep[64];
    const char *colon = strrchr(ctx->ep, ':');
    TU_ASSERT_NOT_NULL(colon);
    snprintf(ep, sizeof(ep), "%.*s:%u", (int)(colon - ctx->ep), ctx->ep, port);
    reset_confirm_ok        = 1;
    pscom_connection_t *c2  = pscom_open_connection(sock);
    pscom_err_t rc          = pscom_connect(c2, ep, 1, PSCOM_CON_FLAG_DIRECT);
    tu_log("connect back: %s, state %d", pscom_err_str(rc), c2->state);
    TU_ASSERT_EQ(reset_confirm_ok, 0); /* the reset happened */
    pscom_close_connection(c2);
    tu_signal(ctx, 1, 2);
    tu_echo_server(cons[1], 5); /* the first connection still works */
    tu_log_file_remove();
    pscom_close_socket(sock);
    return 0;
}

static int unstarted_client(tu_ctx_t *ctx)
{
    pscom_socket_t *sock;
    pscom_connection_t *con = ucp_client_con(ctx, &sock);
    TU_ASSERT_OK(pscom_listen(sock, PSCOM_ANYPORT));
    tu_signal(ctx, TU_SERVER, (uint32_t)sock->listen_portno);
    /* the server's connection comes in, starts here, and fails there */
    TU_ASSERT_EQ(tu_wait_signal_progress(ctx, TU_SERVER), 2);
    wait_log("a socket closed before the peer started its connection", 1);
    tu_echo_client(con, 5);
    TU_ASSERT_EQ(tu_log_file_count("peer process gone"), 0);
    tu_log_file_remove();
    pscom_close_socket(sock);
    return 0;
}

/* ---- the linger time runs out while the process sleeps ---------------------------------- */

static void linger_env(const tu_ctx_t *ctx)
{
    setenv("PSP_UCP_EP_LINGER", ctx->rank == TU_SERVER ? "300" : "0", 1);
}

static int linger_server(tu_ctx_t *ctx)
{
    pscom_connection_t *cons[2];
    pscom_socket_t *sock = first_ucp_server(ctx);
    tu_signal(ctx, 1, (uint32_t)getpid());
    tu_server_accept_all(ctx, sock, cons); /* blocks: the client waits for our EP1_CLOSED */
    check_type(cons[1], "ucp");
    TU_ASSERT_EQ(tu_log_file_count(EP1_CLOSED), 1);
    TU_ASSERT_EQ(tu_log_file_count(CAUGHT_UP(2, 2)), 1);
    tu_echo_server(cons[1], 2);
    tu_log_file_remove();
    pscom_close_socket(sock);
    return 0;
}

static int linger_client(tu_ctx_t *ctx)
{
    pscom_socket_t *sock = first_ucp_client(ctx);
    pscom_connection_t *con;
    pid_t server = (pid_t)tu_wait_signal(ctx, TU_SERVER);
    tu_step("waiting for the server's endpoint 1 to close");
    while (!tu_log_file_count_of(server, EP1_CLOSED)) pscom_test_any();
    con = tu_client_connect(ctx, sock);
    check_type(con, "ucp");
    tu_echo_client(con, 2);
    tu_log_file_remove();
    pscom_close_socket(sock);
    return 0;
}

/* ---- a peer that dies in the handshake ------------------------------------------------- */

/* Client 1 kills itself right after sending the handshake's CONFIRM (the
 * last message of the connect side: the accept side then creates its
 * endpoint and waits for UCX's wire-up with a process that is gone).
 * Client 2 connects only then, and must be served at once: the server
 * neither stalls nor fails. The plugin's wait for the wire-up is bounded
 * by PSP_UCP_WIREUP_TIMEOUT (10 s); the watchdog is set below that (UCX
 * fails the endpoint to a dead process at once: 5-7 ms here over tcp and
 * over shared memory).
 * ucp_handshake_stopped: client 1 stops instead, alive but never
 * progressing again. Over UCX's tcp the wire-up then waits for the whole
 * 10 s; the server must serve client 2 meanwhile (until 2026-11-24 the
 * plugin waited inside the handshake op, and the whole process stood still
 * for 10.4 s). Over shared memory UCX wires up without the peer. */
static int stopped_run; /* ucp_handshake_stopped (set before the roles fork) */

static int hs_server(tu_ctx_t *ctx)
{
    pscom_socket_t *sock = tu_open_socket(ctx, 0, 0);
    tu_server_listen(ctx, sock);
    if (stopped_run) {
        tu_step("waiting for client 1 to stop in the handshake");
        tu_wait_signal_progress(ctx, 1);
    } else {
        tu_step("waiting for client 1 to die in the handshake");
        tu_wait_peer_exit_progress(ctx, 1);
    }
    double t0 = tu_now_ms();
    tu_signal(ctx, 2, 1);
    pscom_connection_t *con = tu_wait_tag(NULL, sock, TU_TAG_HELLO);
    tu_log("client 2's hello %.0f ms after client 1 %s", tu_now_ms() - t0,
           stopped_run ? "stopped" : "died");
    tu_send_tag(con, TU_TAG_WELCOME);
    tu_echo_server(con, 6);
    if (stopped_run) kill(ctx->client_pids[1], SIGKILL);
    pscom_close_socket(sock);
    return 0;
}

static int hs_client(tu_ctx_t *ctx)
{
    pscom_socket_t *sock = tu_open_socket(ctx, 0, 0);
    if (ctx->rank == 1) {
        stop_ctx = ctx;
        arm      = stopped_run ? HS_STOP_AFTER_CONFIRM : HS_DIE_AFTER_CONFIRM;
        tu_client_connect(ctx, sock);
        TU_FAIL("survived the handshake");
    }
    tu_client_get_ep(ctx); /* the first thing on the control channel */
    tu_wait_signal(ctx, TU_SERVER);
    tu_echo_client(tu_client_connect(ctx, sock), 6);
    pscom_close_socket(sock);
    return 0;
}

/* ---- the wire-up's time bound ---------------------------------------------------------- */

#define WIREUP_TIMEOUT_MS "300"
#define WIREUP_TIMED_OUT  "no answer from the peer's worker within " WIREUP_TIMEOUT_MS " ms"

/* UCX needs the peer's progress for the wire-up over tcp, not over shared
 * memory (which it takes between local processes whenever UCX_TLS allows) */
static int wireup_needs_peer(void)
{
    const char *tls = getenv("UCX_TLS");
    static const char *const shm[] = {"posix", "sysv", "sm", "shm", "all"};
    if (!tls || !strstr(tls, "tcp")) return 0;
    for (size_t i = 0; i < sizeof(shm) / sizeof(shm[0]); i++)
        if (strstr(tls, shm[i])) return 0;
    return 1;
}

/* Progress pscom until process pid is stopped (it signals before it stops). */
static void wait_stopped_progress(pid_t pid)
{
    char path[64], buf[256];
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    for (;;) {
        FILE *f = fopen(path, "r");
        TU_ASSERT(f != NULL);
        size_t n = fread(buf, 1, sizeof(buf) - 1, f);
        fclose(f);
        buf[n]          = 0;
        const char *st  = strrchr(buf, ')'); /* "pid (comm) S ..." */
        if (st && st[1] == ' ' && st[2] == 'T') return;
        pscom_test_any();
    }
}

static int wt_server(tu_ctx_t *ctx)
{
    pscom_socket_t *sock = tu_open_socket(ctx, 0, 0);
    tu_server_listen(ctx, sock);
    tu_step("waiting for the client to stop in the handshake");
    tu_wait_signal_progress(ctx, 1);
    if (wireup_needs_peer()) {
        tu_step("waiting for the wire-up to time out");
        while (!tu_log_file_count(WIREUP_TIMED_OUT)) pscom_test_any();
    }
    wait_stopped_progress(ctx->client_pids[1]);
    TU_ASSERT_EQ(kill(ctx->client_pids[1], SIGCONT), 0);
    pscom_connection_t *con = tu_wait_tag(NULL, sock, TU_TAG_HELLO);
    tu_send_tag(con, TU_TAG_WELCOME);
    check_type(con, wireup_needs_peer() ? "tcp" : "ucp");
    tu_echo_server(con, 7);
    TU_ASSERT_EQ(tu_log_file_count(WIREUP_TIMED_OUT), wireup_needs_peer());
    tu_log_file_remove();
    pscom_close_socket(sock);
    return 0;
}

static int wt_client(tu_ctx_t *ctx)
{
    pscom_socket_t *sock = tu_open_socket(ctx, 0, 0);
    stop_ctx                = ctx;
    arm                     = HS_PAUSE_AFTER_CONFIRM;
    pscom_connection_t *con = tu_client_connect(ctx, sock);
    TU_ASSERT_EQ(arm, HS_NONE);
    check_type(con, wireup_needs_peer() ? "tcp" : "ucp");
    tu_echo_client(con, 7);
    TU_ASSERT_EQ(tu_log_file_count(WIREUP_TIMED_OUT), 0);
    tu_log_file_remove();
    pscom_close_socket(sock);
    return 0;
}

int main(int argc, char **argv)
{
    static const char *const names[] = {
        [HS_BAD_OFFER] = "ucp_handshake_bad_offer",
        [HS_BAD_REPLY]   = "ucp_handshake_bad_reply",
        [HS_BAD_CONFIRM] = "ucp_handshake_bad_confirm",
    };
    const char *only = argc > 1 ? argv[1] : NULL; /* one case only */
    /* The cases read the endpoint generations off the log. With
     * PSP_UCP_ERR_HANDLING=1 over shared memory, UCX refuses mode PEER on
     * a process's first endpoint, and that refusal takes a generation too
     * (ucp_peer.c, as in UCX's sequence): every number here is one higher.
     * The mode itself is tested over tcp (itest_ucp_handshake.ucp-tcp-peer). */
    const char *eh = getenv("PSP_UCP_ERR_HANDLING");
    if (eh && atoi(eh) == 1 && !wireup_needs_peer()) {
        printf("skipped: PSP_UCP_ERR_HANDLING=1 over UCX's shared memory shifts the "
               "endpoint generations the cases expect\n");
        return 77;
    }
    /* tcp to fall back to; the connection types are checked here */
    char *tcp = getenv("PSP_TCP") ? strdup(getenv("PSP_TCP")) : NULL;
    char *contype = getenv("PSCOM_TEST_CONTYPE") ? strdup(getenv("PSCOM_TEST_CONTYPE")) : NULL;
    setenv("PSP_TCP", "1", 1);
    unsetenv("PSCOM_TEST_CONTYPE");
    tu_log_files("itest_ucp_handshake", PSCOM_LOG_DEBUG); /* CAUGHT_UP, EP_REFUSED */
    for (run_mode = HS_BAD_OFFER; run_mode <= HS_BAD_CONFIRM; run_mode++) {
        if (only && strcmp(only, names[run_mode])) continue;
        if (tu_run(names[run_mode], 1, bad_server, bad_client, NULL)) return 1;
    }
    tu_opts_t ref_opts;
    memset(&ref_opts, 0, sizeof(ref_opts));
    ref_opts.before_init = epclosed_env;
    if ((!only || !strcmp(only, "ucp_handshake_ep_closed")) &&
        tu_run("ucp_handshake_ep_closed", 1, epclosed_server, epclosed_client, &ref_opts))
        return 1;
    if ((!only || !strcmp(only, "ucp_handshake_refused")) &&
        tu_run("ucp_handshake_refused", 1, refused_server, refused_client, &ref_opts))
        return 1;
    if ((!only || !strcmp(only, "ucp_handshake_unstarted")) &&
        tu_run("ucp_handshake_unstarted", 1, unstarted_server, unstarted_client, &ref_opts))
        return 1;
    ref_opts.before_init = linger_env;
    ref_opts.timeout     = 20; /* a linger time that never runs out: the client waits */
    if ((!only || !strcmp(only, "ucp_handshake_linger")) &&
        tu_run("ucp_handshake_linger", 1, linger_server, linger_client, &ref_opts))
        return 1;
    tu_log_files("itest_ucp_handshake", 1);
    /* the default bound (10 s) is above the test's timeout */
    setenv("PSP_UCP_WIREUP_TIMEOUT", WIREUP_TIMEOUT_MS, 1);
    tu_opts_t wt_opts;
    memset(&wt_opts, 0, sizeof(wt_opts));
    wt_opts.timeout = 8;
    if ((!only || !strcmp(only, "ucp_handshake_wireup_timeout")) &&
        tu_run("ucp_handshake_wireup_timeout", 1, wt_server, wt_client, &wt_opts))
        return 1;
    unsetenv("PSP_UCP_WIREUP_TIMEOUT");
    unsetenv("PSP_DEBUG_OUT");
    if (tcp) setenv("PSP_TCP", tcp, 1);
    else unsetenv("PSP_TCP");
    if (contype) setenv("PSCOM_TEST_CONTYPE", contype, 1);
    free(tcp);
    free(contype);

    tu_opts_t opts;
    memset(&opts, 0, sizeof(opts));
    opts.killed_must_mask = 1u << 1;
    opts.timeout          = 8; /* below PSP_UCP_WIREUP_TIMEOUT (10 s) */
    static const char *const hs_names[] = {"ucp_handshake_death", "ucp_handshake_stopped"};
    for (stopped_run = 0; stopped_run < 2; stopped_run++) {
        if (only && strcmp(only, hs_names[stopped_run])) continue;
        if (tu_run(hs_names[stopped_run], 2, hs_server, hs_client, &opts)) return 1;
    }
    return 0;
}
