/*
 * itest_garbage: a pscom server must survive non-pscom peers on its
 * listening port (robustness; spec 5.7 accept side).
 *
 * The client process first attacks the listener with plain TCP sockets
 * (no pscom): connect+close; random bytes; zeros; 0xff; huge length
 * fields; fake 8-byte message headers with maximal lengths; an HTTP
 * request; 20 quick connect/write/close cycles; and one connection that
 * sends 3 bytes and then stays open, silent, until the end. For the
 * connections that end with shutdown(SHUT_WR) it waits until the server
 * closes its side (proving the garbage was processed, bounded by a poll
 * timeout so nothing hangs).
 * Then it connects properly with pscom (twice) and runs an echo exchange
 * with content checks: the server keeps serving.
 */
#include "pscom_testutil.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define TAG_ECHO 0x4543484fu
#define TAG_END  0x454e4421u

/* ---------------- server: echo until TAG_END ---------------- */

static int server(tu_ctx_t *ctx)
{
    pscom_socket_t *sock = tu_open_socket(ctx, 0, 0);
    tu_server_listen(ctx, sock);
    unsigned char buf[4096];
    pscom_request_t *req = pscom_request_create(8, 0);
    for (;;) {
        req->connection  = NULL;
        req->socket      = sock;
        req->data        = buf;
        req->data_len    = sizeof(buf);
        req->xheader_len = 8;
        pscom_post_recv(req);
        pscom_wait(req);
        TU_ASSERT_SUCCESSFUL(req);
        uint32_t xh[2];
        memcpy(xh, (const void *)&req->xheader, sizeof(xh));
        if (xh[0] == TU_TAG_HELLO) {
            tu_send_tag(req->connection, TU_TAG_WELCOME);
            continue;
        }
        if (xh[0] == TAG_END) break;
        TU_ASSERT_EQ(xh[0], TAG_ECHO);
        pscom_send(req->connection, xh, sizeof(xh), buf, req->header.data_len);
    }
    pscom_request_free(req);
    return 0;
}

/* ---------------- client ---------------- */

static struct sockaddr_in server_addr;

static void parse_ep(const char *ep)
{
    char host[64];
    const char *colon = strchr(ep, ':');
    TU_ASSERT_NOT_NULL(colon);
    TU_ASSERT_LT((size_t)(colon - ep), sizeof(host));
    memcpy(host, ep, (size_t)(colon - ep));
    host[colon - ep] = 0;
    int port         = atoi(colon + 1);
    TU_ASSERT_GT(port, 0);
    memset(&server_addr, 0, sizeof(server_addr));
    server_addr.sin_family = AF_INET;
    server_addr.sin_port   = htons((uint16_t)port);
    TU_ASSERT_EQ(inet_pton(AF_INET, host, &server_addr.sin_addr), 1);
}

static int raw_connect(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    TU_ASSERT_GE(fd, 0);
    TU_ASSERT_MSG(tu_sys_connect(fd, (struct sockaddr *)&server_addr, sizeof(server_addr)) == 0,
                  "raw connect: %s", strerror(errno));
    return fd;
}

static void raw_send(int fd, const void *buf, size_t len)
{
    const unsigned char *p = (const unsigned char *)buf;
    while (len > 0) {
        ssize_t n = send(fd, p, len, MSG_NOSIGNAL);
        if (n < 0) {
            if (errno == EINTR) continue;
            /* the server may drop us half-way: that is fine */
            if (errno == EPIPE || errno == ECONNRESET) return;
            TU_FAIL("raw send: %s", strerror(errno));
        }
        p += n;
        len -= (size_t)n;
    }
}

/* send, half-close, and wait until the server drops the connection */
static void attack(const char *what, const void *buf, size_t len)
{
    int fd = raw_connect();
    raw_send(fd, buf, len);
    shutdown(fd, SHUT_WR);
    for (;;) {
        struct pollfd pfd = {fd, POLLIN, 0};
        int n             = poll(&pfd, 1, 20000);
        if (n < 0 && errno == EINTR) continue;
        TU_ASSERT_MSG(n == 1, "%s: the server did not close the connection "
                              "within 20 s after the peer's EOF",
                      what);
        char tmp[4096];
        ssize_t r = read(fd, tmp, sizeof(tmp));
        if (r == 0) break;                       /* orderly close */
        if (r < 0 && errno == ECONNRESET) break; /* reset */
        if (r < 0 && errno == EINTR) continue;
        TU_ASSERT_MSG(r > 0, "%s: read: %s", what, strerror(errno));
        /* the server may answer (handshake bytes); keep draining */
    }
    close(fd);
}

static void echo(pscom_connection_t *con, uint32_t n)
{
    size_t len = (size_t)(n * 97u) % 4000u;
    unsigned char out[4096], in[4096];
    uint32_t xh[2] = {TAG_ECHO, n}, rxh[2];
    tu_fill(out, len, n);
    pscom_send(con, xh, sizeof(xh), out, len);
    TU_ASSERT_OK(pscom_recv_from(con, rxh, sizeof(rxh), in, sizeof(in)));
    TU_ASSERT_EQ(rxh[0], TAG_ECHO);
    TU_ASSERT_EQ(rxh[1], n);
    TU_ASSERT_PATTERN(in, len, n);
}

static int client(tu_ctx_t *ctx)
{
    parse_ep(tu_client_get_ep(ctx));
    size_t big          = 1u << 20;
    unsigned char *junk = (unsigned char *)tu_malloc(big);

    /* connect and close */
    close(raw_connect());

    /* a connection that stays open and silent after 3 bytes */
    int stalled = raw_connect();
    raw_send(stalled, "\x01\x02\x03", 3);

    tu_fill(junk, 65536, 1);
    attack("random 64 KiB", junk, 65536);
    tu_fill(junk, 7, 2);
    attack("random 7 bytes", junk, 7);
    memset(junk, 0, 4096);
    attack("zeros", junk, 4096);
    memset(junk, 0xff, big);
    attack("0xff 1 MiB", junk, big);
    {
        uint32_t lens[1024];
        for (int i = 0; i < 1024; i++) lens[i] = 0xffffffffu - (uint32_t)i;
        attack("huge length fields", lens, sizeof(lens));
    }
    {
        /* what a pscom message header with maximal lengths looks like */
        pscom_header_net_t h[64];
        memset(h, 0, sizeof(h));
        for (int i = 0; i < 64; i++) {
            h[i].xheader_len = 0xffff;
            h[i].msg_type    = (uint8_t)i;
            h[i].data_len    = PSCOM_DATA_LEN_MASK;
        }
        attack("fake message headers", h, sizeof(h));
    }
    {
        static const char http[] = "GET / HTTP/1.0\r\nHost: x\r\n\r\n";
        attack("HTTP request", http, sizeof(http) - 1);
    }
    for (uint32_t i = 0; i < 20; i++) {
        int fd = raw_connect();
        tu_fill(junk, 1000 + i, 100 + i);
        raw_send(fd, junk, 1000 + i);
        close(fd);
    }
    free(junk);

    /* the server still serves a proper client */
    pscom_socket_t *sock    = tu_open_socket(ctx, 0, 0);
    pscom_connection_t *con = tu_client_connect(ctx, sock);
    for (uint32_t n = 0; n < 20; n++) echo(con, n);
    pscom_connection_t *con2 = tu_client_connect(ctx, sock);
    for (uint32_t n = 20; n < 40; n++) echo(n % 2 ? con : con2, n);

    close(stalled);
    uint32_t end[2] = {TAG_END, 0};
    pscom_send(con, end, sizeof(end), NULL, 0);
    pscom_flush(con);
    return 0;
}

int main(void)
{
    return tu_run("garbage", 1, server, client, NULL);
}
