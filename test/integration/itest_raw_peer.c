/*
 * itest_raw_peer: a pscom server against a peer that speaks the protocol
 * by hand over plain TCP (doc/wire-protocol.md: the handshake HELLO,
 * OFFER of tcp, CONFIRM; then messages it writes itself), for what a
 * pscom peer never sends.
 *
 *   raw_short_data       the peer announces a rendezvous message of 1000
 *                        bytes (RENDEZVOUS_REQ, push mode), the server's
 *                        receive answers CTS for 1000, and the peer sends
 *                        RENDEZVOUS_DATA of 10 bytes. The receive must end
 *                        with ERROR and the connection fail with a logged
 *                        reason (until 2026-11-29 the receive completed
 *                        successfully, 990 bytes never written).
 *   raw_rts_too_long     the peer announces a rendezvous message longer
 *                        than the 40 bits of a length: a protocol error
 *                        that closes the connection; the server's
 *                        any-source receive is not taken (until 2026-11-29
 *                        it was, with the length cut to 10 bytes).
 *   raw_after_eof        the peer writes its EOF message and a USER
 *                        message behind it in one write(), while the
 *                        server's EOF answer waits behind a 64 MiB send
 *                        the peer never reads (the connection stays
 *                        open). Spec 5.7: the read side ends at the EOF;
 *                        the message must not reach the server's
 *                        any-source receive. Bytes after an EOF are a
 *                        protocol error: the connection fails (the big
 *                        send with ERROR), said in the log. Twice: with
 *                        PSP_READAHEAD=8, where the server reads the USER
 *                        message only in a later read() (until 2026-11-29
 *                        it was delivered), and with the default, where
 *                        it comes in the same read as the EOF (it was
 *                        dropped without a word).
 *
 * And peers that keep a handshake going (doc/wire-protocol.md, limits):
 *
 *   raw_offer_flood      after the HELLOs the peer writes 300 OFFERs of a
 *                        plugin nobody has at once and reads none of the
 *                        DECLINEs. The server reads at most 16 handshake
 *                        messages per pass and closes the handshake after
 *                        256, saying so; then a real handshake of the same
 *                        peer is served. (Until 2026-11-29 one progress
 *                        call read for as long as the peer sent, and the
 *                        DECLINEs queued for it grew without bound.)
 *   raw_trickle          the peer sends its handshake one byte at a time,
 *                        fast enough that no stall is seen: the server
 *                        closes it after 5 stall windows in all, saying so
 *                        (until 2026-11-29 such a peer held it for ever).
 */
#include "pscom_testutil.h"

#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pscom_wire.h"

enum { SIG_READY = 1, SIG_WRITTEN, SIG_DONE };

#define RAW_TAG   0x52415721u
#define RTS_LEN   1000
#define SHORT_LEN 10
#define HUGE_SEND (64u << 20)

/* ---- the raw peer --------------------------------------------------------- */

static void raw_write(int fd, const void *buf, size_t len)
{
    const unsigned char *p = buf;
    while (len) {
        ssize_t n = send(fd, p, len, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR) continue;
        TU_ASSERT_MSG(n > 0, "raw write: %s", strerror(errno));
        p += n;
        len -= (size_t)n;
    }
}

static void raw_read(int fd, void *buf, size_t len)
{
    TU_ASSERT_EQ(tu_sys_read_all(fd, buf, len), (ssize_t)len);
}

static void precon_send(int fd, uint16_t type, const void *payload, uint32_t len)
{
    unsigned char msg[PSCOM_PRECON_HEADER_SIZE + 64];
    pscom_precon_header_t h = {
        .magic   = htole32(PSCOM_PRECON_MAGIC),
        .type    = htole16(type),
        .version = htole16(PSCOM_PRECON_VERSION),
        .len     = htole32(len),
    };
    TU_ASSERT_LE(len, sizeof(msg) - sizeof(h));
    memcpy(msg, &h, sizeof(h));
    if (len) memcpy(msg + sizeof(h), payload, len);
    raw_write(fd, msg, sizeof(h) + len);
}

/* Read one handshake message; it must be of this type. */
static void precon_expect(int fd, uint16_t type)
{
    pscom_precon_header_t h;
    unsigned char payload[256];
    raw_read(fd, &h, sizeof(h));
    TU_ASSERT_EQ(le32toh(h.magic), PSCOM_PRECON_MAGIC);
    TU_ASSERT_EQ(le16toh(h.type), type);
    TU_ASSERT_LE(le32toh(h.len), sizeof(payload));
    raw_read(fd, payload, le32toh(h.len));
}

/* the HELLO of a raw peer named name */
static pscom_precon_hello_t raw_hello_msg(const char *name)
{
    pscom_precon_hello_t hello = {
        .wire_version = htole32(PSCOM_WIRE_VERSION),
        .node_id      = (int32_t)htole32(0x7f000001),
        .rank         = (int32_t)htole32(1),
        .portno       = (int32_t)htole32((uint32_t)-1),
        .attempt      = htole32(1),
        .con_id       = htole64(0x1234),
    };
    strncpy(hello.name, name, sizeof(hello.name));
    return hello;
}

static void raw_hello(int fd)
{
    pscom_precon_hello_t hello = raw_hello_msg("rawpeer");
    precon_send(fd, PSCOM_PRECON_HELLO, &hello, sizeof(hello));
}

/* A plain TCP connection to the server's listener. */
static int raw_tcp_connect(tu_ctx_t *ctx)
{
    const char *colon = strchr(tu_client_get_ep(ctx), ':');
    TU_ASSERT_NOT_NULL(colon);
    return tu_tcp_connect(atoi(colon + 1));
}

/* ... and the HELLOs exchanged. */
static int raw_hellos(tu_ctx_t *ctx)
{
    int fd = raw_tcp_connect(ctx);
    raw_hello(fd);
    precon_expect(fd, PSCOM_PRECON_HELLO);
    return fd;
}

/* A TCP connection to the server's listener, through the handshake: the
 * server's tcp transport takes it over. */
static int raw_connect(tu_ctx_t *ctx)
{
    int fd = raw_hellos(ctx);
    char plugin[PSCOM_PRECON_PLUGIN_NAME] = "tcp";
    precon_send(fd, PSCOM_PRECON_OFFER, plugin, sizeof(plugin));
    precon_expect(fd, PSCOM_PRECON_ACCEPT);
    precon_send(fd, PSCOM_PRECON_CONFIRM, NULL, 0);
    precon_expect(fd, PSCOM_PRECON_CONFIRM_OK);
    return fd;
}

/* Append one message to out at *len. */
static void msg_put(unsigned char *out, size_t *len, uint8_t type, const void *xh, uint16_t xlen,
                    const void *data, size_t dlen)
{
    pscom_wire_header_encode(out + *len, xlen, type, dlen);
    *len += PSCOM_WIRE_HEADER_SIZE;
    if (xlen) memcpy(out + *len, xh, xlen);
    *len += xlen;
    if (dlen) memcpy(out + *len, data, dlen);
    *len += dlen;
}

/* The next message but PADs: its type, its xheader (up to max bytes) in xh. */
static uint8_t msg_get(int fd, void *xh, size_t max)
{
    for (;;) {
        unsigned char head[PSCOM_WIRE_HEADER_SIZE], skip[256];
        uint16_t xlen;
        uint8_t type;
        uint64_t dlen;
        raw_read(fd, head, sizeof(head));
        pscom_wire_header_decode(head, &xlen, &type, &dlen);
        TU_ASSERT_LE(xlen, max);
        TU_ASSERT_LE(dlen, sizeof(skip));
        raw_read(fd, xh, xlen);
        raw_read(fd, skip, (size_t)dlen);
        if (type != PSCOM_MSGTYPE_PAD) return type;
    }
}

/* Until the server closes the connection. */
static void wait_closed(int fd)
{
    char buf[4096];
    ssize_t n;
    while ((n = read(fd, buf, sizeof(buf))) > 0 || (n < 0 && errno == EINTR)) {
    }
}

/* ---- the server ------------------------------------------------------------ */

static pscom_connection_t *accepted;

static void on_accept(pscom_connection_t *con)
{
    accepted = con;
}

static pscom_socket_t *server_open(tu_ctx_t *ctx)
{
    pscom_socket_t *sock = tu_open_socket(ctx, 0, 0);
    sock->ops.con_accept = on_accept;
    sock->ops.con_error  = tu_on_con_error;
    tu_server_listen(ctx, sock);
    return sock;
}

static pscom_request_t *any_recv(pscom_socket_t *sock, void *buf, size_t len)
{
    pscom_request_t *r = pscom_request_create(4, 0);
    r->socket          = sock;
    r->data            = buf;
    r->data_len        = len;
    r->xheader_len     = 4;
    pscom_post_recv(r);
    return r;
}

static void server_close(tu_ctx_t *ctx, pscom_socket_t *sock)
{
    tu_signal(ctx, 1, SIG_DONE);
    pscom_close_connection(accepted);
    pscom_close_socket(sock);
}

/* ---- raw_short_data ---------------------------------------------------------- */

static int short_server(tu_ctx_t *ctx)
{
    pscom_socket_t *sock = server_open(ctx);
    unsigned char buf[RTS_LEN];
    memset(buf, 0xee, sizeof(buf));
    pscom_request_t *r = any_recv(sock, buf, sizeof(buf));
    tu_capture_begin();
    while (!pscom_req_is_done(r)) pscom_wait_any();
    TU_ASSERT_STATE_HAS(r->state, PSCOM_REQ_STATE_ERROR);
    TU_ASSERT_PTR_EQ(r->connection, accepted);
    while (!tu_nerrs) pscom_wait_any();
    char *log = tu_capture_end();
    TU_ASSERT_EQ(tu_nerrs, 1);
    TU_ASSERT_EQ(tu_errs[0].op, PSCOM_OP_READ);
    TU_ASSERT_EQ(tu_errs[0].err, PSCOM_ERR_IOERROR);
    TU_ASSERT_MSG(strstr(log, "rendezvous: DATA of 10 bytes for a receive that asked for 1000"),
                  "no log line on the short DATA");
    free(log);
    pscom_request_free(r);
    server_close(ctx, sock);
    return 0;
}

/* The peer announces a rendezvous message of data_len bytes (tag RAW_TAG). */
static void raw_announce(int fd, uint64_t sender_id, uint64_t data_len)
{
    unsigned char out[256];
    size_t len            = 0;
    uint32_t tag          = RAW_TAG;
    pscom_rndv_rts_t rts = {.sender_id = htole64(sender_id), .data_len = htole64(data_len)};
    msg_put(out, &len, PSCOM_MSGTYPE_RENDEZVOUS_REQ, &tag, sizeof(tag), &rts, sizeof(rts));
    raw_write(fd, out, len);
}

static int short_client(tu_ctx_t *ctx)
{
    int fd = raw_connect(ctx);
    raw_announce(fd, 77, RTS_LEN);

    pscom_rndv_cts_t cts;
    TU_ASSERT_EQ(msg_get(fd, &cts, sizeof(cts)), PSCOM_MSGTYPE_RENDEZVOUS_CTS);
    TU_ASSERT_EQ(le64toh(cts.sender_id), 77);
    TU_ASSERT_EQ(le64toh(cts.len), RTS_LEN);

    unsigned char data[SHORT_LEN], out[256];
    memset(data, 0x11, sizeof(data));
    size_t len = 0;
    msg_put(out, &len, PSCOM_MSGTYPE_RENDEZVOUS_DATA, &cts.recv_id, sizeof(cts.recv_id), data,
            sizeof(data));
    raw_write(fd, out, len);
    wait_closed(fd); /* the server fails the connection */
    TU_ASSERT_EQ(tu_wait_signal(ctx, TU_SERVER), SIG_DONE);
    close(fd);
    return 0;
}

/* ---- raw_rts_too_long --------------------------------------------------------- */

#define TOO_LONG ((1ull << 40) + 10) /* more than the 40 bits of a message's length */

static int long_server(tu_ctx_t *ctx)
{
    pscom_socket_t *sock = server_open(ctx);
    unsigned char buf[100];
    memset(buf, 0xee, sizeof(buf));
    pscom_request_t *r = any_recv(sock, buf, sizeof(buf));
    tu_capture_begin();
    while (!tu_nerrs) pscom_wait_any();
    char *log = tu_capture_end();
    TU_ASSERT_EQ(tu_errs[0].op, PSCOM_OP_READ);
    TU_ASSERT_MSG(strstr(log, "protocol error: rendezvous announcement of 1099511627786 bytes"),
                  "no log line on the announcement");
    free(log);
    /* not taken: the any-source receive is still posted, its buffer as it was */
    TU_ASSERT_EQ(pscom_cancel_recv(r), 1);
    TU_ASSERT_BYTES(buf, sizeof(buf), 0xee);
    pscom_request_free(r);
    server_close(ctx, sock);
    return 0;
}

static int long_client(tu_ctx_t *ctx)
{
    int fd = raw_connect(ctx);
    raw_announce(fd, 78, TOO_LONG);
    wait_closed(fd); /* the server fails the connection (until 2026-11-29 it took the
                      * announcement, cut to 10 bytes, and answered CTS) */
    TU_ASSERT_EQ(tu_wait_signal(ctx, TU_SERVER), SIG_DONE);
    close(fd);
    return 0;
}

/* ---- raw_after_eof ----------------------------------------------------------- */

static int eof_server(tu_ctx_t *ctx)
{
    pscom_socket_t *sock = server_open(ctx);
    while (!accepted) pscom_wait_any();
    unsigned char *big = tu_malloc(HUGE_SEND);
    memset(big, 0x5a, HUGE_SEND);
    pscom_request_t *s = pscom_request_create(0, 0);
    pscom_req_prepare(s, accepted, big, HUGE_SEND, NULL, 0);
    pscom_post_send(s); /* the peer never reads: our EOF will wait behind it */
    unsigned char buf[100];
    pscom_request_t *r = any_recv(sock, buf, sizeof(buf));
    tu_signal(ctx, 1, SIG_READY);
    TU_ASSERT_EQ(tu_wait_signal(ctx, 1), SIG_WRITTEN);

    tu_capture_begin();
    while (!pscom_req_is_done(r) && !pscom_req_is_done(s)) pscom_wait_any();
    char *log = tu_capture_end();
    TU_ASSERT_MSG(!pscom_req_is_done(r), "the message after the EOF was delivered: %s",
                  tu_state_str(r->state));
    TU_ASSERT_STATE_HAS(s->state, PSCOM_REQ_STATE_ERROR);
    TU_ASSERT_MSG(strstr(log, "protocol error: message after the peer's EOF"),
                  "no log line on the message after the EOF");
    free(log);
    /* the peer's EOF was reported; the protocol error after it is not */
    while (!tu_nerrs) pscom_wait_any();
    TU_ASSERT_EQ(tu_nerrs, 1);
    TU_ASSERT_EQ(tu_errs[0].op, PSCOM_OP_READ);
    TU_ASSERT_EQ(tu_errs[0].err, PSCOM_ERR_EOF);

    TU_ASSERT_EQ(pscom_cancel_recv(r), 1); /* any-source: still posted */
    pscom_request_free(r);
    pscom_request_free(s);
    free(big);
    server_close(ctx, sock);
    return 0;
}

static int eof_client(tu_ctx_t *ctx)
{
    int fd = raw_connect(ctx);
    TU_ASSERT_EQ(tu_wait_signal(ctx, TU_SERVER), SIG_READY);
    unsigned char out[256], data[16];
    size_t len   = 0;
    uint32_t tag = RAW_TAG;
    memset(data, 0x22, sizeof(data));
    msg_put(out, &len, PSCOM_MSGTYPE_EOF, NULL, 0, NULL, 0);
    msg_put(out, &len, PSCOM_MSGTYPE_USER, &tag, sizeof(tag), data, sizeof(data));
    raw_write(fd, out, len); /* both at once */
    tu_signal(ctx, TU_SERVER, SIG_WRITTEN);
    TU_ASSERT_EQ(tu_wait_signal(ctx, TU_SERVER), SIG_DONE);
    close(fd);
    return 0;
}

/* ---- raw_offer_flood ---------------------------------------------------------- */

#define FLOOD_OFFERS   300
#define FLOOD_PER_PASS 16  /* MSGS_PER_PASS in pscom_precon.c */
#define FLOOD_MARK     "--- pass ---"

static int flood_server(tu_ctx_t *ctx)
{
    pscom_socket_t *sock = server_open(ctx);
    tu_capture_begin();
    while (!accepted) { /* the raw peer's second, real handshake */
        pscom_wait_any();
        fprintf(stderr, FLOOD_MARK "\n");
    }
    char *log = tu_capture_end();
    TU_ASSERT_EQ(tu_count(log, "handshake of more than 256 messages: closing"), 1);
    /* the OFFERs read per pass (PSP_DEBUG_PRECON): at most FLOOD_PER_PASS */
    int total = 0, most = 0;
    for (char *pass = log; pass;) {
        char *end = strstr(pass, FLOOD_MARK);
        if (end) *end = 0;
        int n = tu_count(pass, "recv type 2 ");
        total += n;
        if (n > most) most = n;
        pass = end ? end + strlen(FLOOD_MARK) : NULL;
    }
    tu_log("%d OFFERs read in all, at most %d in one pass", total, most);
    TU_ASSERT_MSG(most <= FLOOD_PER_PASS, "%d handshake messages read in one pass, want at most %d",
                  most, FLOOD_PER_PASS);
    TU_ASSERT_GE(total, 256 - 1); /* (the HELLO was the first of the 256) */
    free(log);
    server_close(ctx, sock);
    return 0;
}

static int flood_client(tu_ctx_t *ctx)
{
    int fd = raw_hellos(ctx);
    enum { ONE = PSCOM_PRECON_HEADER_SIZE + PSCOM_PRECON_PLUGIN_NAME };
    unsigned char *out = tu_malloc(FLOOD_OFFERS * ONE);
    for (int i = 0; i < FLOOD_OFFERS; i++) {
        pscom_precon_header_t h = {
            .magic   = htole32(PSCOM_PRECON_MAGIC),
            .type    = htole16(PSCOM_PRECON_OFFER),
            .version = htole16(PSCOM_PRECON_VERSION),
            .len     = htole32(PSCOM_PRECON_PLUGIN_NAME),
        };
        char name[PSCOM_PRECON_PLUGIN_NAME] = "nosuch";
        memcpy(out + i * ONE, &h, sizeof(h));
        memcpy(out + i * ONE + sizeof(h), name, sizeof(name));
    }
    raw_write(fd, out, FLOOD_OFFERS * ONE); /* at once; no DECLINE read */
    free(out);
    wait_closed(fd); /* the server ends the handshake */
    close(fd);
    fd = raw_connect(ctx); /* and still serves */
    TU_ASSERT_EQ(tu_wait_signal(ctx, TU_SERVER), SIG_DONE);
    close(fd);
    return 0;
}

/* ---- raw_trickle ----------------------------------------------------------------- */

static int trickle_server(tu_ctx_t *ctx)
{
    pscom_socket_t *sock = server_open(ctx);
    tu_capture_begin();
    TU_ASSERT_EQ(tu_wait_signal_progress(ctx, 1), SIG_WRITTEN); /* the peer saw the close */
    char *log = tu_capture_end();
    TU_ASSERT_EQ(tu_count(log, "handshake not done within"), 1);
    TU_ASSERT_EQ(tu_count(log, "moved no byte"), 0);
    free(log);
    pscom_close_socket(sock);
    return 0;
}

static int trickle_client(tu_ctx_t *ctx)
{
    int fd = raw_tcp_connect(ctx);
    /* the HELLO, then CANCELs (harmless one by one), a byte every 10 ms
     * (the stall window is 300 ms) until the server closes */
    unsigned char msg[PSCOM_PRECON_HEADER_SIZE + sizeof(pscom_precon_hello_t)];
    pscom_precon_header_t h = {
        .magic   = htole32(PSCOM_PRECON_MAGIC),
        .type    = htole16(PSCOM_PRECON_HELLO),
        .version = htole16(PSCOM_PRECON_VERSION),
        .len     = htole32(sizeof(pscom_precon_hello_t)),
    };
    pscom_precon_hello_t hello = raw_hello_msg("trickle");
    memcpy(msg, &h, sizeof(h));
    memcpy(msg + sizeof(h), &hello, sizeof(hello));
    size_t len = sizeof(msg), off = 0;
    int sent = 0;
    double t0 = tu_now_ms();
    for (;;) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        int r           = poll(&p, 1, 10); /* the pace of the trickle; the server's close ends it */
        if (r > 0) {
            char buf[256];
            ssize_t n = read(fd, buf, sizeof(buf)); /* its HELLO, then the end */
            if (n <= 0) break;
            continue;
        }
        if (off == len) { /* the next message: a CANCEL */
            h.type = htole16(PSCOM_PRECON_CANCEL);
            h.len  = 0;
            memcpy(msg, &h, sizeof(h));
            len = sizeof(h);
            off = 0;
        }
        if (send(fd, msg + off, 1, MSG_NOSIGNAL) != 1) break; /* closed */
        off++;
        sent++;
        TU_ASSERT_MSG(tu_now_ms() - t0 < 15000, "the server kept the trickling handshake open");
    }
    tu_log("closed by the server after %d bytes, %.0f ms", sent, tu_now_ms() - t0);
    close(fd);
    tu_signal(ctx, TU_SERVER, SIG_WRITTEN);
    return 0;
}

int main(void)
{
    tu_opts_t opts = {.timeout = 20};
    if (tu_run("raw_short_data", 1, short_server, short_client, &opts)) return 1;
    if (tu_run("raw_rts_too_long", 1, long_server, long_client, &opts)) return 1;
    setenv("PSP_READAHEAD", "8", 1); /* the EOF alone in the server's first read */
    if (tu_run("raw_after_eof_later_read", 1, eof_server, eof_client, &opts)) return 1;
    unsetenv("PSP_READAHEAD");
    if (tu_run("raw_after_eof_same_read", 1, eof_server, eof_client, &opts)) return 1;
    setenv("PSP_DEBUG_PRECON", "1", 1); /* the messages read, in the log */
    if (tu_run("raw_offer_flood", 1, flood_server, flood_client, &opts)) return 1;
    unsetenv("PSP_DEBUG_PRECON");
    setenv("PSP_PRECON_TCP_RECONNECT_TIMEOUT", "50", 1); /* a tick of 50 ms */
    setenv("PSP_PRECON_TCP_CONNECT_STALLED_MAX", "6", 1); /* a stall window of 300 ms */
    if (tu_run("raw_trickle", 1, trickle_server, trickle_client, &opts)) return 1;
    return 0;
}
