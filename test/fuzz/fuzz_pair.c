/*
 * fuzz_pair.c - the part of the transport fuzz targets (fuzz_ucp.c,
 * fuzz_openib.c) that is not the transport's: a client socket of this
 * process connects to a server socket over the one transport the target
 * enables (its plugin built into the program), the input's set-up and its
 * common ops (fuzz_pair.h), and the end of each input.
 *
 * What must hold (else abort(), which libFuzzer and the driver report),
 * besides the target's own checks: no memory error (the receive buffers
 * are freed after each input: a late write shows as a use after free),
 * and once both sides closed the connection (and, where the input left
 * the two out of step so that the EOFs cannot pass, the client died: its
 * end of the handshake socket, the server's death detector, shut down),
 * every request is done and neither socket holds a connection.
 */
#define _GNU_SOURCE
#include "fuzz_pair.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "fuzz_driver.h" /* FUZZ_CHECK */
#include "fuzz_tcp.h"
#include "plugin/pscom_plugin.h"
#include "pscom_con.h"
#include "pscom_progress.h"

static pscom_socket_t *server, *client;
static int server_port;
static pscom_connection_t *accepted;
static char pattern[65536 + FUZZ_PAIR_XH_MAX]; /* what real messages carry: (i * 7) */
int fuzz_pair_trace;
fuzz_pair_result_t fuzz_pair_last;

uint64_t fuzz_pair_now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000 + (uint64_t)ts.tv_nsec / 1000;
}

void *fuzz_pair_priv(pscom_connection_t *c)
{
    return pscom_con_plugin_priv(pscom_con_from_pub(c));
}

void fuzz_pair_progress(unsigned passes)
{
    for (unsigned i = 0; i < passes; i++) pscom_test_any();
}

static void on_accept(pscom_connection_t *con)
{
    accepted = con;
}

static pscom_socket_t *open_socket(const char *name)
{
    pscom_socket_t *s = pscom_open_socket(0, 0, 0, PSCOM_SOCK_FLAG_INTER_JOB);
    FUZZ_CHECK(s != NULL);
    pscom_socket_set_name(s, name);
    FUZZ_CHECK(pscom_listen(s, PSCOM_ANYPORT) == PSCOM_SUCCESS);
    return s;
}

static void sockets_open(const fuzz_pair_target_t *t)
{
    fuzz_pair_trace = getenv(t->trace_env) != NULL;
    setenv("PSP_DEBUG", "0", 0); /* protocol errors by the thousand */
    setenv("PSP_TCP", "0", 1);
    setenv("PSP_SHM", "0", 1);
    t->env();
    FUZZ_CHECK(pscom_init(PSCOM_VERSION) == PSCOM_SUCCESS);
    server                 = open_socket("fuzzsrv");
    server->ops.con_accept = on_accept;
    server_port            = pscom_get_portno(server);
    client                 = open_socket("fuzzcli");
    if (t->opened) t->opened();
    for (size_t i = 0; i < sizeof(pattern); i++) pattern[i] = (char)(i * 7);
}

static void connect_pair(const fuzz_pair_target_t *t, fuzz_pair_t *p)
{
    char ep[64];
    snprintf(ep, sizeof(ep), "127.0.0.1:%d", server_port);
    p->c = pscom_open_connection(client);
    FUZZ_CHECK(p->c != NULL);
    accepted = NULL;
    FUZZ_CHECK(pscom_connect(p->c, ep, PSCOM_RANK_UNDEFINED, PSCOM_CON_FLAG_DIRECT) ==
               PSCOM_SUCCESS);
    for (unsigned pass = 0; !accepted || !t->started(accepted); pass++) {
        FUZZ_CHECK(pass < FUZZ_TCP_PASSES);
        pscom_test_any();
    }
    p->s = accepted;
    FUZZ_CHECK(p->c->type == t->con_type && p->s->type == t->con_type);
}

/* ---- the common ops ------------------------------------------------------------------ */

static pscom_request_t *post_recv(fuzz_pair_t *p, size_t len, int any)
{
    if (p->nrecvs == FUZZ_PAIR_MAX_RECV) return NULL;
    pscom_request_t *q = pscom_request_create(FUZZ_PAIR_XH_MAX, 0);
    char *buf          = malloc(len ? len : 1);
    FUZZ_CHECK(q != NULL && buf != NULL);
    q->connection         = any ? NULL : p->s;
    q->socket             = server;
    q->xheader_len        = FUZZ_PAIR_XH_MAX;
    q->data               = buf;
    q->data_len           = len;
    p->bufs[p->nrecvs]    = buf;
    p->lens[p->nrecvs]    = len;
    p->recvs[p->nrecvs++] = q;
    pscom_post_recv(q);
    return q;
}

pscom_request_t *fuzz_pair_send_msg(pscom_connection_t *c, size_t len, size_t xlen)
{
    pscom_request_t *q = pscom_request_create(FUZZ_PAIR_XH_MAX, 0);
    FUZZ_CHECK(q != NULL);
    memcpy(&q->xheader, pattern, xlen);
    q->xheader_len = xlen;
    q->connection  = c;
    q->data        = pattern + FUZZ_PAIR_XH_MAX;
    q->data_len    = len;
    pscom_post_send(q);
    return q;
}

static void post_send(fuzz_pair_t *p, size_t len, size_t xlen)
{
    if (p->nsends == FUZZ_PAIR_MAX_SENDS) return;
    p->sends[p->nsends++] = fuzz_pair_send_msg(p->c, len, xlen);
}

/* One op of the input. */
static void put_op(const fuzz_pair_target_t *t, fuzz_pair_t *p, fuzz_in_t *in)
{
    uint8_t op = in_byte(in);
    switch (op & 7) {
    case FUZZ_PAIR_SEND: {
        size_t len  = in_u16(in);
        size_t xlen = in_byte(in) % (FUZZ_PAIR_XH_MAX + 1);
        if (fuzz_pair_trace) fprintf(stderr, "op %#x: send %zu + %zu bytes\n", op, xlen, len);
        post_send(p, len, xlen);
        return;
    }
    case FUZZ_PAIR_PROGRESS: fuzz_pair_progress(in_byte(in) + 1u); return;
    case FUZZ_PAIR_RECV: post_recv(p, 64u * in_byte(in), 0); return;
    case FUZZ_PAIR_CANCEL:
        for (unsigned i = 0; i < p->nrecvs; i++) {
            if (pscom_req_is_done(p->recvs[i])) continue;
            pscom_cancel_recv(p->recvs[i]);
            return;
        }
        return;
    default: t->put(p, in, op); return;
    }
}

/* ---- the end of an input ------------------------------------------------------------- */

static void snapshot(const fuzz_pair_target_t *t, const fuzz_pair_t *p)
{
    fuzz_pair_last = (fuzz_pair_result_t){.server_stopped = t->snapshot(p)};
    for (unsigned i = 0; i < p->nrecvs; i++) {
        pscom_request_t *q = p->recvs[i];
        if (!pscom_req_is_done(q)) continue;
        if (pscom_req_successful(q)) {
            fuzz_pair_last.recvs_ok++;
        } else if (q->state & PSCOM_REQ_STATE_ERROR) {
            fuzz_pair_last.recvs_error++;
        }
    }
    /* the first receive's message, also truncated */
    if (p->nrecvs && pscom_req_is_done(p->recvs[0]) &&
        !(p->recvs[0]->state & (PSCOM_REQ_STATE_ERROR | PSCOM_REQ_STATE_CANCELED))) {
        fuzz_pair_last.first_len  = p->recvs[0]->header.data_len;
        fuzz_pair_last.first_xlen = p->recvs[0]->header.xheader_len;
        size_t n = p->lens[0] < sizeof(fuzz_pair_last.first) ? p->lens[0]
                                                              : sizeof(fuzz_pair_last.first);
        memcpy(fuzz_pair_last.first, p->bufs[0], n);
    }
}

/* Both sides close. A peer whose input left the server out of step never
 * gets (nor sends) the EOF: it dies (peer_fd shut down). Then everything
 * ends. */
static void close_pair(const fuzz_pair_target_t *t, fuzz_pair_t *p, int peer_fd)
{
    pscom_close_connection(p->c);
    pscom_close_connection(p->s);
    fuzz_pair_last.peer_died = !fuzz_tcp_settled(server, client, FUZZ_PAIR_CLOSE_PASSES);
    if (fuzz_pair_last.peer_died) {
        shutdown(peer_fd, SHUT_RDWR);
        /* Its end is seen where the fds are polled: at once with a timeout
         * (a pass without one looks at them once per clock tick). A ucp
         * peer that said goodbye gets UCP_BYE_GRACE_US to deliver the rest. */
        uint64_t t0 = fuzz_pair_now_us();
        while (!fuzz_tcp_settled(server, client, 1)) {
            FUZZ_CHECK(fuzz_pair_now_us() - t0 < FUZZ_PAIR_SETTLE_US &&
                       "closing leaves no connection");
            pscom_progress(1);
        }
    }
    close(peer_fd);
    if (t->closed) t->closed(p);
    /* an any-source receive outlives the connection: it is cancelled */
    if (p->nrecvs && !p->recvs[0]->connection) pscom_cancel_recv(p->recvs[0]);
    for (unsigned i = 0; i < p->nrecvs; i++) fuzz_tcp_await_done(p->recvs[i]);
    for (unsigned i = 0; i < p->nsends; i++) fuzz_tcp_await_done(p->sends[i]);
    if (t->drain) t->drain(p);
    for (unsigned i = 0; i < p->nrecvs; i++) free(p->bufs[i]);
}

/* One input. */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const fuzz_pair_target_t *t = &fuzz_pair_target;
    if (size < 2) return 0;
    if (!server) sockets_open(t);
    fuzz_pair_t p = {0};
    size_t blen   = 64u * data[1];
    connect_pair(t, &p);
    int peer_fd = dup(t->connected(&p)); /* the handshake socket: the server's death detector */
    FUZZ_CHECK(peer_fd >= 0);

    /* the set-up */
    for (unsigned i = 0; i < (data[0] & 3u); i++) post_recv(&p, blen, i == 0 && (data[0] & 8));
    if (data[0] & 4) post_send(&p, 8, 4);
    if (t->setup) t->setup(&p, data[0]);
    fuzz_pair_progress(4);

    /* the ops */
    fuzz_in_t in = {.p = data + 2, .left = size - 2};
    for (unsigned n = 1; in.left; n++) {
        put_op(t, &p, &in);
        if (!(data[0] & t->quiet) && (!(data[0] & 16) || !(n % 4))) fuzz_pair_progress(8);
    }
    fuzz_pair_progress(64);
    snapshot(t, &p);
    close_pair(t, &p, peer_fd);
    return 0;
}
