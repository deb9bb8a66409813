/*
 * itest_precon_commit: the last step of the handshake, where the accepting
 * side starts the transport (CONFIRM_OK) and the connecting side may give
 * up on the attempt (its watchdog, PSP_PRECON_TCP_RECONNECT_TIMEOUT x
 * PSP_PRECON_TCP_CONNECT_STALLED_MAX) and start another one: an attempt
 * the connecting side gave up on must not leave the accepting side with a
 * second connection (con_accept twice for one pscom_connect; over a loaded
 * machine itest_connect_storm counted 385 connections of 384).
 *
 * The client connects through a proxy (a thread of its own process, raw
 * sockets) that forwards the handshake message by message and then the
 * bytes of the socket (tcp's data; over shm, ucp and openib, entries of
 * their own, the bytes of the death detection), except:
 *
 * "late_ok": the first attempt's CONFIRM_OK is held for 5/3 windows of
 *   the client (window 3 x 300 ms). The accepting side has started the
 *   transport already: the client must wait for the answer instead of
 *   starting a new attempt (it waits two windows after its CONFIRM). One
 *   attempt, one con_accept.
 * "gave_up": the first attempt's CONFIRM is held until the client has
 *   given up on it (two windows) and closed; then it goes to the server
 *   together with the end of the stream (TCP_CORK: data and FIN in one
 *   segment). The server must not start a transport whose peer is gone: it
 *   looks before its CONFIRM_OK. Two attempts, one con_accept.
 *
 * "od_late_ok", "od_gave_up": the same over on-demand connections (the
 *   client, the lower name, connects when it writes first; the server's
 *   waiting connection adopts the handshake). Before the fix the server's
 *   connection took the given-up attempt and failed with it: its receive
 *   ended with PSCOM_ERR_IOERROR, and the client's next attempts found no
 *   waiting connection any more.
 *
 * Every case also asserts that neither side saw a con_error.
 * The server's own window is long (3 x 5 s), so only the client's runs out.
 */
#define _GNU_SOURCE
#include "pscom_testutil.h"

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define CLIENT_TICK_MS   300
#define CLIENT_STALLS    3
#define WINDOW_MS        (CLIENT_TICK_MS * CLIENT_STALLS)
/* The client's watchdog ticks every CLIENT_TICK_MS; the tick after the
 * CONFIRM sees it moved, so a client gives up 1-1.33 windows after its
 * CONFIRM when it waits one window (before the fix), 2-2.33 when it waits
 * two: CONFIRM_OK held for 5/3 windows comes 0.33 windows (300 ms) from
 * either */
#define HOLD_MS          (WINDOW_MS * 5 / 3)

/* handshake message types (doc/wire-protocol.md) */
#define PRE_CONFIRM    5
#define PRE_CONFIRM_OK 6
#define HDR_SIZE       16

enum hold { HOLD_CONFIRM_OK, HOLD_CONFIRM };

typedef struct proxy {
    int lfd, stop_rd, stop_wr;
    int srv_port;
    enum hold hold;
    int attempts;     /* client connections accepted */
    int held_dropped; /* the held message never reached its receiver */
} proxy_t;

/* one direction of a relayed connection */
typedef struct dir {
    int from, to;
    int raw;                   /* handshake over: bytes as they come */
    unsigned char buf[65536];  /* handshake bytes not yet forwarded */
    size_t have;
    int holding;               /* buf holds the message held back */
    int eof;
} dir_t;

static int send_all(int fd, const void *p, size_t n)
{
    const char *c = p;
    while (n) {
        ssize_t w = send(fd, c, n, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return -1;
        c += w;
        n -= (size_t)w;
    }
    return 0;
}

/* Complete handshake messages in d->buf: forward them, or hold the one
 * to hold (first attempt only). Returns the type of a message just held, or 0. */
static int forward_msgs(dir_t *d, int hold_type)
{
    while (!d->raw && !d->holding && d->have >= HDR_SIZE) {
        uint16_t type;
        uint32_t len;
        memcpy(&type, d->buf + 4, 2);
        memcpy(&len, d->buf + 8, 4);
        size_t whole = HDR_SIZE + len;
        TU_ASSERT(whole <= sizeof(d->buf));
        if (d->have < whole) return 0;
        if (type == hold_type) {
            d->holding = 1;
            return type;
        }
        TU_ASSERT_EQ(send_all(d->to, d->buf, whole), 0);
        memmove(d->buf, d->buf + whole, d->have - whole);
        d->have -= whole;
        /* after these the transport's bytes follow (or nothing more) */
        if (type == PRE_CONFIRM || type == PRE_CONFIRM_OK) d->raw = 1;
    }
    if (d->raw && d->have) {
        TU_ASSERT_EQ(send_all(d->to, d->buf, d->have), 0);
        d->have = 0;
    }
    return 0;
}

/* Forward the held message, then (optionally) end the stream with it. */
static void release_held(dir_t *d, int with_eof)
{
    uint32_t len;
    memcpy(&len, d->buf + 8, 4);
    size_t whole = HDR_SIZE + len;
    int one      = 1;
    if (with_eof) setsockopt(d->to, IPPROTO_TCP, TCP_CORK, &one, sizeof(one));
    TU_ASSERT_EQ(send_all(d->to, d->buf, whole), 0);
    if (with_eof) shutdown(d->to, SHUT_WR); /* the FIN rides on the corked segment */
    memmove(d->buf, d->buf + whole, d->have - whole);
    d->have -= whole;
    d->holding = 0;
    d->raw     = 1;
}

/* each message goes out as it is forwarded (no Nagle delay) */
static void nodelay(int fd)
{
    int one = 1;
    TU_ASSERT_EQ(setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)), 0);
}

/* Relay one client connection c to a new connection to the server, until
 * either side ends it (or stop). */
static void relay(proxy_t *px, int c, int first)
{
    int s          = tu_tcp_connect(px->srv_port);
    nodelay(s);
    nodelay(c);
    dir_t *up      = tu_malloc(sizeof(*up)); /* client -> server */
    dir_t *down    = tu_malloc(sizeof(*down));
    *up            = (dir_t){.from = c, .to = s};
    *down          = (dir_t){.from = s, .to = c};
    int hold_up    = first && px->hold == HOLD_CONFIRM ? PRE_CONFIRM : -1;
    int hold_down  = first && px->hold == HOLD_CONFIRM_OK ? PRE_CONFIRM_OK : -1;
    double release = 0;
    for (;;) {
        int timeout = -1;
        if (down->holding) {
            double left = release - tu_now_ms();
            if (left <= 0) {
                release_held(down, 0);
                continue;
            }
            timeout = (int)left + 1;
        }
        struct pollfd p[3] = {{.fd = c, .events = POLLIN},
                              {.fd = s, .events = POLLIN},
                              {.fd = px->stop_rd, .events = POLLIN}};
        int n = poll(p, 3, timeout);
        if (n < 0 && errno == EINTR) continue;
        TU_ASSERT(n >= 0);
        if (p[2].revents) break;
        for (int i = 0; i < 2; i++) {
            dir_t *d = i == 0 ? up : down;
            if (!p[i].revents) continue;
            ssize_t r = recv(d->from, d->buf + d->have, sizeof(d->buf) - d->have, 0);
            if (r < 0 && errno == EINTR) continue;
            if (r <= 0) {
                d->eof = 1;
                continue;
            }
            d->have += (size_t)r;
            if (forward_msgs(d, d == up ? hold_up : hold_down) == PRE_CONFIRM_OK)
                release = tu_now_ms() + HOLD_MS;
        }
        if (up->eof && up->holding) {
            /* the client gave up: the held CONFIRM, and the end, to the server */
            release_held(up, 1);
            break;
        }
        if (up->eof || down->eof) {
            if (down->holding) px->held_dropped = 1;
            break;
        }
    }
    close(s);
    close(c);
    free(up);
    free(down);
}

static void *proxy_main(void *arg)
{
    proxy_t *px = arg;
    for (;;) {
        struct pollfd p[2] = {{.fd = px->lfd, .events = POLLIN}, {.fd = px->stop_rd, .events = POLLIN}};
        if (poll(p, 2, -1) < 0) continue;
        if (p[1].revents) break;
        int c = tu_tcp_accept(px->lfd);
        relay(px, c, ++px->attempts == 1);
    }
    return NULL;
}

/* the proxy thread, started for the server's endpoint ep */
typedef struct proxy_run {
    proxy_t px;
    pthread_t th;
    int port;     /* where the proxy listens */
    char via[128]; /* ep with the proxy's port */
} proxy_run_t;

static void proxy_start(proxy_run_t *pr, const char *ep, enum hold hold)
{
    int stop[2];
    TU_ASSERT_EQ(pipe(stop), 0);
    pr->px = (proxy_t){.hold = hold, .srv_port = atoi(strrchr(ep, ':') + 1), .stop_rd = stop[0],
                       .stop_wr = stop[1]};
    pr->px.lfd = tu_tcp_socket(INADDR_LOOPBACK, 16, &pr->port);
    snprintf(pr->via, sizeof(pr->via), "127.0.0.1:%d%s", pr->port, strchr(ep, '@'));
    TU_ASSERT_EQ(pthread_create(&pr->th, NULL, proxy_main, &pr->px), 0);
}

/* stop it; the attempts it relayed */
static int proxy_stop(proxy_run_t *pr)
{
    ssize_t w;
    while ((w = write(pr->px.stop_wr, "x", 1)) < 0 && errno == EINTR) {
    }
    TU_ASSERT_EQ(w, 1);
    TU_ASSERT_EQ(pthread_join(pr->th, NULL), 0);
    close(pr->px.lfd);
    close(pr->px.stop_rd);
    close(pr->px.stop_wr);
    TU_ASSERT_EQ(pr->px.held_dropped, 0);
    return pr->px.attempts;
}

static int accepts;

static void on_accept(pscom_connection_t *con)
{
    (void)con;
    accepts++;
}

static int listed(pscom_socket_t *s)
{
    int n = 0;
    for (pscom_connection_t *c = pscom_get_next_connection(s, NULL); c;
         c = pscom_get_next_connection(s, c))
        n++;
    return n;
}

/* the server's socket, listening, its accepts and errors counted */
static pscom_socket_t *server_socket(tu_ctx_t *ctx)
{
    pscom_socket_t *s = tu_open_socket(ctx, 0, 0);
    s->ops.con_accept = on_accept;
    s->ops.con_error  = tu_on_con_error;
    tu_server_listen(ctx, s);
    return s;
}

/* what the server has once the client has its answer; then the end */
static void server_end(tu_ctx_t *ctx, pscom_socket_t *s, int want_accepts)
{
    TU_ASSERT_EQ(tu_wait_signal_progress(ctx, 1), 1); /* the client has its answer */
    int n = listed(s);
    TU_ASSERT_MSG(accepts == want_accepts && n == 1 && !tu_nerrs,
                  "one connection wanted, but %d con_accept, %d connections, %d errors",
                  accepts, n, tu_nerrs);
    tu_signal(ctx, 1, 2);
    pscom_close_socket(s);
}

/* one message from the client, answered */
static int server(tu_ctx_t *ctx)
{
    pscom_socket_t *s = server_socket(ctx);
    uint32_t v;
    pscom_request_t *req = pscom_request_create(0, 0);
    req->socket          = s;
    req->data_len        = sizeof(v);
    req->data            = &v;
    pscom_post_recv(req);
    pscom_wait(req);
    TU_ASSERT_SUCCESSFUL(req);
    TU_ASSERT_EQ(v, 0x5eed);
    pscom_send(req->connection, NULL, 0, &v, sizeof(v));
    pscom_request_free(req);
    server_end(ctx, s, 1);
    return 0;
}

/* the same over on-demand connections: the client ("client01", the lower
 * name) connects when it writes first */
static int od_server(tu_ctx_t *ctx)
{
    pscom_socket_t *s = server_socket(ctx);
    char ep[64];
    snprintf(ep, sizeof(ep), "127.0.0.1:%u@client01", tu_wait_signal(ctx, 1));
    pscom_connection_t *c = pscom_open_connection(s);
    TU_ASSERT_OK(pscom_connect(c, ep, 1, PSCOM_CON_FLAG_ONDEMAND));
    uint32_t v = 0;
    TU_ASSERT_OK(pscom_recv(c, NULL, NULL, 0, &v, sizeof(v)));
    TU_ASSERT_EQ(v, 0x5eed);
    pscom_send(c, NULL, 0, &v, sizeof(v));
    server_end(ctx, s, 0); /* adopted by the waiting connection: no con_accept */
    return 0;
}

static int client(tu_ctx_t *ctx, enum hold hold, int ondemand)
{
    pscom_socket_t *s = tu_open_socket(ctx, 0, 0);
    s->ops.con_error  = tu_on_con_error;
    if (ondemand) {
        TU_ASSERT_OK(pscom_listen(s, PSCOM_ANYPORT));
        tu_signal(ctx, TU_SERVER, (uint32_t)s->listen_portno);
    }
    proxy_run_t pr;
    proxy_start(&pr, tu_client_get_ep(ctx), hold);
    pscom_connection_t *c = pscom_open_connection(s);
    TU_ASSERT_OK(pscom_connect(c, pr.via, 0,
                               ondemand ? PSCOM_CON_FLAG_ONDEMAND : PSCOM_CON_FLAG_DIRECT));
    uint32_t v = 0x5eed, back = 0;
    pscom_send(c, NULL, 0, &v, sizeof(v));
    TU_ASSERT_OK(pscom_recv(c, NULL, NULL, 0, &back, sizeof(back)));
    TU_ASSERT_EQ(back, v);
    tu_check_con_type(c); /* the transport of the entry (PSCOM_TEST_CONTYPE) */
    tu_signal(ctx, TU_SERVER, 1);
    TU_ASSERT_EQ(tu_wait_signal_progress(ctx, TU_SERVER), 2);
    int attempts = proxy_stop(&pr);
    TU_ASSERT_EQ(tu_nerrs, 0);
    pscom_close_socket(s);
    TU_ASSERT_EQ(attempts, hold == HOLD_CONFIRM ? 2 : 1);
    return 0;
}

static int late_ok_client(tu_ctx_t *ctx)
{
    return client(ctx, HOLD_CONFIRM_OK, 0);
}

static int gave_up_client(tu_ctx_t *ctx)
{
    return client(ctx, HOLD_CONFIRM, 0);
}

static int od_late_ok_client(tu_ctx_t *ctx)
{
    return client(ctx, HOLD_CONFIRM_OK, 1);
}

static int od_gave_up_client(tu_ctx_t *ctx)
{
    return client(ctx, HOLD_CONFIRM, 1);
}

static void windows(const tu_ctx_t *ctx)
{
    char tick[16], stalls[16];
    snprintf(tick, sizeof(tick), "%d", ctx->rank == TU_SERVER ? 5000 : CLIENT_TICK_MS);
    snprintf(stalls, sizeof(stalls), "%d", CLIENT_STALLS);
    setenv("PSP_PRECON_TCP_RECONNECT_TIMEOUT", tick, 1);
    setenv("PSP_PRECON_TCP_CONNECT_STALLED_MAX", stalls, 1);
    setenv("PSP_RETRY", "3", 1);
}

int main(void)
{
    /* one entry per transport (test/CMakeLists.txt, PSCOM_TEST_TRANSPORTS):
     * the proxy relays the handshake and then whatever the transport does
     * with the socket (tcp: its data; shm, ucp, openib: death detection) */
    tu_opts_t opts = {.before_init = windows};
    int rc         = 0;
    rc |= tu_run("late_ok", 1, server, late_ok_client, &opts);
    rc |= tu_run("gave_up", 1, server, gave_up_client, &opts);
    rc |= tu_run("od_late_ok", 1, od_server, od_late_ok_client, &opts);
    rc |= tu_run("od_gave_up", 1, od_server, od_gave_up_client, &opts);
    return rc;
}
