/*
 * pscom_pp - ping-pong benchmark over libpscom.
 *
 * Server (default role):  pscom_pp [-l PORT] [-1] [options]
 *   Listens on PORT (default 7100; 0 = any free port), prints the command
 *   line a client has to use, and echoes every message it receives with the
 *   same xheader and data length (with --sepbuf from a buffer of its own, as
 *   ucx_perftest does, instead of the data received). It serves one client
 *   after the other (with -1/--once only the first one) and finishes a client
 *   cleanly when that client closes its connection.
 *
 * Client:  pscom_pp -c [options] <ip>:<port>@<name>
 *   Sends messages of growing size (minsize, +1 while < 2, then times sqrt(2),
 *   each rounded from the unrounded product: 0 1 2 3 4 6 8 11 16 23 32 ...
 *   1024 ... 4194304; up to maxsize) and prints one row per size:
 *     msize loops time throughput
 *   time is the elapsed time of the loop in microseconds divided by
 *   2 * loops (half a round trip); throughput is msize / time (MB/s with
 *   MB = 10^6 bytes). The number of loops shrinks by sqrt(2) (rounded from
 *   the unrounded value: 1024 724 512 362 256 ...) after every size whose
 *   loop took longer than the time budget (-t, milliseconds). With -V, a
 *   size whose data came back wrong prints "%7lu Error in communication..."
 *   instead of its row; the run goes on, and exits 1.
 *
 * The output format is relied on by scripts; keep it unchanged.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "pscom.h"

#define PP_DEFAULT_PORT    7100
#define PP_DEFAULT_LOOPS   1024
#define PP_DEFAULT_TIME_MS 3000
#define PP_DEFAULT_MINSIZE 0UL
#define PP_DEFAULT_MAXSIZE (4UL * 1024 * 1024)
#define PP_DEFAULT_XHEADER 12
#define PP_MAX_XHEADER     100
#define PP_SQRT2           1.4142135623730951
/* untimed round trips per size before the measured loop (default of --warmup) */
#define PP_WARMUP 2

static struct {
    int port;
    int client;
    const char *server_ep;
    unsigned loops;
    unsigned warmup;
    unsigned long time_ms;
    unsigned long minsize;
    unsigned long maxsize;
    unsigned xheader;
    int valloc;
    int sepbuf;
    int histo;
    int verify;
    int once;
    int verbose;
} arg = {
    .port    = PP_DEFAULT_PORT,
    .loops   = PP_DEFAULT_LOOPS,
    .warmup  = PP_WARMUP,
    .time_ms = PP_DEFAULT_TIME_MS,
    .minsize = PP_DEFAULT_MINSIZE,
    .maxsize = PP_DEFAULT_MAXSIZE,
    .xheader = PP_DEFAULT_XHEADER,
};

static const char *progname = "pscom_pp";

/* ------------------------------------------------------------------ */
/* helpers                                                            */
/* ------------------------------------------------------------------ */

static double now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

/* The xheader area of a request: the union at offset 0 of the area that
 * pscom_request_create() sized for max_xheader_len bytes. */
static char *req_xheader(pscom_request_t *req)
{
    return (char *)req + offsetof(pscom_request_t, xheader);
}

static void *alloc_buf(size_t len)
{
    void *p = NULL;
    if (len == 0) len = 1;
    if (arg.valloc) {
        long pagesize = sysconf(_SC_PAGESIZE);
        if (pagesize <= 0) pagesize = 4096;
        if (posix_memalign(&p, (size_t)pagesize, len) != 0) p = NULL;
    } else {
        p = malloc(len);
    }
    if (!p) {
        fprintf(stderr, "%s: out of memory (%zu bytes)\n", progname, len);
        exit(1);
    }
    return p;
}

/* The next size: +1 below 2, then x sqrt(2). *exact keeps the unrounded
 * value, so that every second size is a power of two times the first
 * (0 1 2 3 4 6 8 11 16 23 32 ... 1024 ... 4194304, as the established
 * tool prints; rounding each step drifted: ... 1056 1493 ..., and no
 * 4 MiB row by default); the size sent is the rounded value. */
static unsigned long next_size(unsigned long ms, double *exact)
{
    unsigned long next;
    if (*exact < 2.0) {
        *exact = (double)ms + 1.0;
        return ms + 1;
    }
    *exact *= PP_SQRT2;
    next = (unsigned long)(*exact + 0.5);
    return next > ms ? next : ms + 1;
}

static unsigned char pattern_byte(unsigned long seed, size_t i)
{
    return (unsigned char)((i * 7u + seed * 13u + 1u) & 0xff);
}

static void fill_pattern(unsigned char *buf, size_t len, unsigned long seed)
{
    for (size_t i = 0; i < len; i++) buf[i] = pattern_byte(seed, i);
}

static void print_config(FILE *out)
{
    fprintf(out, "# pscom_pp configuration:\n");
    fprintf(out, "#   role     : %s\n", arg.client ? "client" : "server");
    if (arg.client) {
        fprintf(out, "#   server   : %s\n", arg.server_ep);
    } else {
        fprintf(out, "#   listen   : %d%s\n", arg.port, arg.port == 0 ? " (any)" : "");
        fprintf(out, "#   once     : %s\n", arg.once ? "yes" : "no");
    }
    fprintf(out, "#   loops    : %u\n", arg.loops);
    fprintf(out, "#   warmup   : %u\n", arg.warmup);
    fprintf(out, "#   time     : %lu ms\n", arg.time_ms);
    fprintf(out, "#   minsize  : %lu\n", arg.minsize);
    fprintf(out, "#   maxsize  : %lu\n", arg.maxsize);
    fprintf(out, "#   xheader  : %u\n", arg.xheader);
    fprintf(out, "#   valloc   : %s\n", arg.valloc ? "yes" : "no");
    if (!arg.client) fprintf(out, "#   sepbuf   : %s\n", arg.sepbuf ? "yes" : "no");
    fprintf(out, "#   histo    : %s\n", arg.histo ? "yes" : "no");
    fprintf(out, "#   verify   : %s\n", arg.verify ? "yes" : "no");
}

/* ------------------------------------------------------------------ */
/* options                                                            */
/* ------------------------------------------------------------------ */

enum { OPT_MINSIZE = 256, OPT_MAXSIZE, OPT_XHEADER, OPT_VALLOC, OPT_SEPBUF, OPT_WARMUP };

static const struct option long_options[] = {
    {"listen", required_argument, NULL, 'l'},
    {"client", no_argument, NULL, 'c'},
    {"loops", required_argument, NULL, 'n'},
    {"time", required_argument, NULL, 't'},
    {"minsize", required_argument, NULL, OPT_MINSIZE},
    {"maxsize", required_argument, NULL, OPT_MAXSIZE},
    {"xheader", required_argument, NULL, OPT_XHEADER},
    {"valloc", no_argument, NULL, OPT_VALLOC},
    {"sepbuf", no_argument, NULL, OPT_SEPBUF},
    {"warmup", required_argument, NULL, OPT_WARMUP},
    {"histo", no_argument, NULL, 'i'},
    {"verify", no_argument, NULL, 'V'},
    {"once", no_argument, NULL, '1'},
    {"verbose", no_argument, NULL, 'v'},
    {"help", no_argument, NULL, 'h'},
    {NULL, 0, NULL, 0},
};

static void usage(FILE *out)
{
    fprintf(out,
            "Usage: %s [OPTION...] [server endpoint]\n"
            "Ping-pong benchmark over pscom. Without -c: run as server.\n"
            "  -l, --listen=PORT    listen on PORT (default %d; 0 = any free port)\n"
            "  -c, --client         run as client, connect to the server endpoint\n"
            "                       given as argument (<ip>:<port>@<name>)\n"
            "  -n, --loops=COUNT    loops per message size (default %d)\n"
            "  -t, --time=MS        time budget per message size in ms; loops shrink\n"
            "                       by sqrt(2) after a size that exceeded it (default %d)\n"
            "      --minsize=SIZE   first message size (default %lu)\n"
            "      --maxsize=SIZE   last message size (default %lu)\n"
            "      --xheader=SIZE   xheader size, at most %d (default %d)\n"
            "      --valloc         use page aligned buffers\n"
            "      --warmup=COUNT   untimed round trips per size before the loops (default %d)\n"
            "      --sepbuf         server: reply from a buffer of its own that nobody\n"
            "                       writes, not with the data received (the memory\n"
            "                       traffic of ucx_perftest; the client's -V then fails)\n"
            "  -i, --histo          print the time of every iteration\n"
            "  -V, --verify         verify the data received\n"
            "  -1, --once           server: stop after the first client\n"
            "  -v, --verbose        print the configuration and a pscom dump at the end\n"
            "  -h, --help           show this help\n",
            progname, PP_DEFAULT_PORT, PP_DEFAULT_LOOPS, PP_DEFAULT_TIME_MS,
            PP_DEFAULT_MINSIZE, PP_DEFAULT_MAXSIZE, PP_MAX_XHEADER,
            PP_DEFAULT_XHEADER, PP_WARMUP);
}

static unsigned long parse_ulong(const char *opt, const char *str, unsigned long max)
{
    char *end;
    unsigned long long v;
    errno = 0;
    while (*str == ' ' || *str == '\t') str++;
    if (*str == '-') goto bad;
    v = strtoull(str, &end, 10);
    if (errno || end == str || *end != '\0' || v > max) goto bad;
    return (unsigned long)v;
bad:
    fprintf(stderr, "%s: invalid value '%s' for option %s\n", progname, str, opt);
    usage(stderr);
    exit(1);
}

static void parse_args(int argc, char **argv)
{
    int c;
    while ((c = getopt_long(argc, argv, "l:cn:t:iV1vh", long_options, NULL)) != -1) {
        switch (c) {
        case 'l': arg.port = (int)parse_ulong("--listen", optarg, 65535); break;
        case 'c': arg.client = 1; break;
        case 'n': arg.loops = (unsigned)parse_ulong("--loops", optarg, 0x7fffffffUL); break;
        case 't': arg.time_ms = parse_ulong("--time", optarg, 0x7fffffffUL); break;
        case OPT_MINSIZE: arg.minsize = parse_ulong("--minsize", optarg, PSCOM_DATA_LEN_MASK); break;
        case OPT_MAXSIZE: arg.maxsize = parse_ulong("--maxsize", optarg, PSCOM_DATA_LEN_MASK); break;
        case OPT_XHEADER: arg.xheader = (unsigned)parse_ulong("--xheader", optarg, 0x7fffffffUL); break;
        case OPT_VALLOC: arg.valloc = 1; break;
        case OPT_SEPBUF: arg.sepbuf = 1; break;
        case OPT_WARMUP: arg.warmup = (unsigned)parse_ulong("--warmup", optarg, 0x7fffffffUL); break;
        case 'i': arg.histo = 1; break;
        case 'V': arg.verify = 1; break;
        case '1': arg.once = 1; break;
        case 'v': arg.verbose = 1; break;
        case 'h': usage(stdout); exit(0);
        default: usage(stderr); exit(1);
        }
    }
    if (optind < argc) arg.server_ep = argv[optind++];
    if (optind < argc) {
        fprintf(stderr, "%s: unexpected argument '%s'\n", progname, argv[optind]);
        usage(stderr);
        exit(1);
    }
    if (arg.client && !arg.server_ep) {
        fprintf(stderr, "%s: the client needs the server endpoint (<ip>:<port>@<name>)\n",
                progname);
        usage(stderr);
        exit(1);
    }
    if (!arg.client && arg.server_ep) {
        fprintf(stderr, "%s: an endpoint argument needs -c (client mode)\n", progname);
        usage(stderr);
        exit(1);
    }
    if (arg.xheader > PP_MAX_XHEADER) arg.xheader = PP_MAX_XHEADER;
    if (arg.loops == 0) arg.loops = 1;
}

/* ------------------------------------------------------------------ */
/* server                                                             */
/* ------------------------------------------------------------------ */

/* Accepted connections, served one after the other in accept order. */
typedef struct pp_peer {
    pscom_connection_t *con;
    int gone; /* con_error seen: the client closed or failed */
    struct pp_peer *next;
} pp_peer_t;

static pp_peer_t *peers_head;
/* --sepbuf: the server's replies come from here (as large as its receive buffer) */
static void *reply_buf;
static pp_peer_t **peers_tail = &peers_head;

static pp_peer_t *peer_find(pscom_connection_t *con)
{
    for (pp_peer_t *p = peers_head; p; p = p->next)
        if (p->con == con) return p;
    return NULL;
}

static void server_con_accept(pscom_connection_t *con)
{
    pp_peer_t *p = calloc(1, sizeof(*p));
    printf("New connection from %s via %s\n", pscom_con_info_str(&con->remote_con_info),
           pscom_con_type_str(con->type));
    fflush(stdout);
    if (!p) {
        fprintf(stderr, "%s: out of memory\n", progname);
        pscom_close_connection(con);
        return;
    }
    p->con     = con;
    *peers_tail = p;
    peers_tail  = &p->next;
}

static void server_con_error(pscom_connection_t *con, pscom_op_t op, pscom_err_t err)
{
    pp_peer_t *p = peer_find(con);
    if (p) p->gone = 1;
    if (arg.verbose || !(op == PSCOM_OP_READ && err == PSCOM_ERR_EOF)) {
        fprintf(stderr, "%s: connection %s: %s error: %s\n", progname,
                pscom_con_info_str(&con->remote_con_info), pscom_op_str(op),
                pscom_err_str(err));
    }
}

static void peer_remove_head(void)
{
    pp_peer_t *p = peers_head;
    peers_head   = p->next;
    if (!peers_head) peers_tail = &peers_head;
    free(p);
}

/* Wait until req is done or the peer is gone. Returns 1 if done. */
static int server_wait(pscom_request_t *req, pp_peer_t *peer)
{
    while (!pscom_req_is_done(req)) {
        if (peer->gone) return 0;
        pscom_wait_any();
    }
    return 1;
}

/* Post the server's receive for the next message of con into buf. */
static inline void post_echo_recv(pscom_request_t *rreq, pscom_connection_t *con, void *buf,
                                  size_t cap)
{
    rreq->connection  = con;
    rreq->socket      = con->socket;
    rreq->xheader_len = PP_MAX_XHEADER;
    rreq->data        = buf;
    rreq->data_len    = cap;
    pscom_post_recv(rreq);
}

/* Echo every message of one client until it closes the connection. */
static void serve_peer(pp_peer_t *peer, pscom_request_t **rreqp, pscom_request_t **sreqp,
                       void **bufp, size_t *capp)
{
    pscom_connection_t *con = peer->con;
    pscom_request_t *rreq = *rreqp, *sreq = *sreqp;
    int warned = 0;

    post_echo_recv(rreq, con, *bufp, *capp);

    for (;;) {
        size_t xlen, dlen;

        if (!server_wait(rreq, peer)) {
            /* con_error without a finished receive: take the request back
             * if possible, otherwise leave it to the library and use a
             * fresh one for the next client. */
            if (!pscom_cancel_recv(rreq) && !pscom_req_is_done(rreq)) {
                *rreqp = pscom_request_create(PP_MAX_XHEADER, 0);
                if (!*rreqp) {
                    fprintf(stderr, "%s: out of memory\n", progname);
                    exit(1);
                }
            }
            break;
        }
        if (rreq->state & (PSCOM_REQ_STATE_ERROR | PSCOM_REQ_STATE_CANCELED)) break;

        xlen = rreq->header.xheader_len;
        dlen = rreq->header.data_len;
        if (xlen > PP_MAX_XHEADER) xlen = PP_MAX_XHEADER;

        if (dlen > *capp) {
            /* The message was truncated: the client sends more than our
             * --maxsize. Grow the buffer; this one reply has wrong data. */
            void *nbuf = alloc_buf(dlen);
            if (!warned) {
                fprintf(stderr,
                        "%s: message of %zu bytes exceeds the server buffer (%zu bytes);"
                        " start the server with --maxsize=%zu or more\n",
                        progname, dlen, *capp, dlen);
                warned = 1;
            }
            memcpy(nbuf, *bufp, *capp);
            free(*bufp);
            *bufp = nbuf;
            *capp = dlen;
            if (reply_buf) {
                free(reply_buf);
                reply_buf = alloc_buf(dlen);
                memset(reply_buf, 0, dlen);
            }
        }

        /* echo (copies of constant length, the usual xheader's or the whole
         * area: a few moves; one of xlen bytes is a `rep movsb`, slow for a
         * few bytes) */
        if (xlen <= 16)
            memcpy(req_xheader(sreq), req_xheader(rreq), 16);
        else
            memcpy(req_xheader(sreq), req_xheader(rreq), PP_MAX_XHEADER);
        sreq->connection  = con;
        sreq->xheader_len = xlen;
        sreq->data        = reply_buf ? reply_buf : *bufp;
        sreq->data_len    = dlen;
        pscom_post_send(sreq);

        /* The next message cannot arrive before the client got this reply
         * completely, so the receive can share the buffer. */
        post_echo_recv(rreq, con, *bufp, *capp);

        if (!server_wait(sreq, peer)) {
            if (!pscom_cancel_send(sreq) && !pscom_req_is_done(sreq)) {
                /* still owned by the library; use a fresh one */
                *sreqp = sreq = pscom_request_create(PP_MAX_XHEADER, 0);
                if (!sreq) {
                    fprintf(stderr, "%s: out of memory\n", progname);
                    exit(1);
                }
            }
            /* the receive finishes with an error (or is caught above) */
            continue;
        }
    }
}

static int run_server(void)
{
    pscom_socket_t *sock;
    pscom_request_t *rreq, *sreq;
    pscom_err_t rc;
    char *ep = NULL;
    void *buf;
    size_t cap;

    sock = pscom_open_socket(0, 0, PSCOM_RANK_UNDEFINED, PSCOM_SOCK_FLAG_INTER_JOB);
    if (!sock) {
        fprintf(stderr, "%s: pscom_open_socket() failed\n", progname);
        return 1;
    }
    sock->ops.con_accept = server_con_accept;
    sock->ops.con_error  = server_con_error;

    rc = pscom_listen(sock, arg.port == 0 ? PSCOM_ANYPORT : arg.port);
    if (rc != PSCOM_SUCCESS) {
        fprintf(stderr, "%s: pscom_listen(%d) failed: %s\n", progname, arg.port,
                pscom_err_str(rc));
        return 1;
    }
    rc = pscom_socket_get_ep_str(sock, &ep);
    if (rc != PSCOM_SUCCESS || !ep) {
        fprintf(stderr, "%s: pscom_socket_get_ep_str() failed: %s\n", progname,
                pscom_err_str(rc));
        return 1;
    }

    printf("Waiting for client.\n");
    printf("Call client with:\n");
    printf("%s -c %s\n", progname, ep);
    fflush(stdout);
    pscom_socket_free_ep_str(ep);

    cap  = arg.maxsize ? (size_t)arg.maxsize : 1;
    buf  = alloc_buf(cap);
    memset(buf, 0, cap);
    if (arg.sepbuf) {
        reply_buf = alloc_buf(cap);
        memset(reply_buf, 0, cap);
    }
    rreq = pscom_request_create(PP_MAX_XHEADER, 0);
    sreq = pscom_request_create(PP_MAX_XHEADER, 0);
    if (!rreq || !sreq) {
        fprintf(stderr, "%s: pscom_request_create() failed\n", progname);
        return 1;
    }

    for (;;) {
        pp_peer_t *peer;
        while (!peers_head) pscom_wait_any();
        peer = peers_head;
        serve_peer(peer, &rreq, &sreq, &buf, &cap);
        pscom_close_connection(peer->con);
        peer_remove_head();
        if (arg.verbose) { /* after each client: without -1 the server never ends */
            print_config(stdout);
            pscom_dump_info(stdout);
            fflush(stdout);
        }
        if (arg.once) break;
    }

    if (pscom_req_is_done(rreq)) pscom_request_free(rreq);
    if (pscom_req_is_done(sreq)) pscom_request_free(sreq);
    pscom_close_socket(sock);
    free(buf);
    free(reply_buf);
    return 0;
}

/* ------------------------------------------------------------------ */
/* client                                                             */
/* ------------------------------------------------------------------ */

static volatile int client_con_failed;

static void client_con_error(pscom_connection_t *con, pscom_op_t op, pscom_err_t err)
{
    client_con_failed = 1;
    if (arg.verbose) {
        fprintf(stderr, "%s: connection %s: %s error: %s\n", progname,
                pscom_con_info_str(&con->remote_con_info), pscom_op_str(op),
                pscom_err_str(err));
    }
}

typedef struct pp_client {
    pscom_connection_t *con;
    pscom_request_t *sreq, *rreq;
    unsigned char *sbuf, *rbuf;
    unsigned char xh[PP_MAX_XHEADER]; /* xheader the client sends */
    double *histo;                    /* per iteration half round trip */
} pp_client_t;

/* Stamp iteration i into the message (with -V), so that a reply that was
 * not received cannot pass for a correct one. */
static void stamp(pp_client_t *c, unsigned long ms, unsigned long i)
{
    uint32_t s = (uint32_t)(ms * 2654435761UL + i + 1);
    size_t xl  = pscom_min((size_t)arg.xheader, sizeof(s));
    size_t dl  = pscom_min((size_t)ms, sizeof(s));
    memcpy(c->xh, &s, xl);
    memcpy(req_xheader(c->sreq), c->xh, xl);
    memcpy(c->sbuf, &s, dl);
}

static int check_reply(pp_client_t *c, unsigned long ms)
{
    pscom_request_t *r = c->rreq;
    if (r->header.data_len != ms) return 0;
    if (r->header.xheader_len != arg.xheader) return 0;
    if (memcmp(req_xheader(r), c->xh, arg.xheader) != 0) return 0;
    if (memcmp(c->rbuf, c->sbuf, ms) != 0) return 0;
    return 1;
}

/* One round trip. Returns 0 on success, -1 on a communication error,
 * 1 on a verification error. */
static int round_trip(pp_client_t *c, unsigned long ms, unsigned long i)
{
    pscom_request_t *sreq = c->sreq, *rreq = c->rreq;

    if (arg.verify) stamp(c, ms, i);

    /* The send first, then the receive for the reply (as ucx_perftest and
     * osu_latency order them): the reply cannot come before the send went
     * out, and posting the receive is then no longer between the arrival
     * of the previous reply and this send. A reply that comes before the
     * receive is posted is matched from the unexpected queue. */
    sreq->connection  = c->con;
    sreq->xheader_len = arg.xheader;
    sreq->data        = c->sbuf;
    sreq->data_len    = ms;
    pscom_post_send(sreq);

    rreq->connection  = c->con;
    rreq->socket      = c->con->socket;
    rreq->xheader_len = PP_MAX_XHEADER;
    rreq->data        = c->rbuf;
    rreq->data_len    = ms;
    pscom_post_recv(rreq);

    pscom_wait(sreq);
    pscom_wait(rreq);

    if (!pscom_req_successful(sreq) || !pscom_req_successful(rreq)) return -1;
    if (arg.verify && !check_reply(c, ms)) return 1;
    return 0;
}

/* Run one message size. Returns 0, -1 (communication error) or 1 (verify). */
static int run_size(pp_client_t *c, unsigned long ms, unsigned loops, double *elapsed_us)
{
    int rc = 0, ret;
    double t0, t1;

    if (arg.verify) {
        fill_pattern(c->sbuf, ms, ms);
        memset(c->rbuf, 0, ms);
    }

    for (unsigned long i = 0; i < arg.warmup; i++) {
        ret = round_trip(c, ms, i);
        if (ret < 0) return ret;
        if (ret > 0) rc = 1;
    }

    if (arg.histo) {
        double tprev = now_us();
        t0           = tprev;
        for (unsigned i = 0; i < loops; i++) {
            double t;
            ret = round_trip(c, ms, arg.warmup + (unsigned long)i);
            t   = now_us();
            c->histo[i] = (t - tprev) / 2.0;
            tprev       = t;
            if (ret < 0) return ret;
            if (ret > 0) rc = 1;
        }
        t1 = tprev;
    } else {
        t0 = now_us();
        for (unsigned i = 0; i < loops; i++) {
            ret = round_trip(c, ms, arg.warmup + (unsigned long)i);
            if (ret < 0) return ret;
            if (ret > 0) rc = 1;
        }
        t1 = now_us();
    }
    *elapsed_us = t1 - t0;
    return rc;
}

static int run_client(void)
{
    pscom_socket_t *sock;
    pp_client_t c;
    pscom_err_t rc;
    unsigned loops       = arg.loops;
    double loops_exact   = arg.loops; /* shrinks by sqrt(2) unrounded, as the sizes grow */
    double ms_exact      = arg.minsize;
    unsigned long ms;
    int ret = 0;

    memset(&c, 0, sizeof(c));
    sock = pscom_open_socket(0, 0, PSCOM_RANK_UNDEFINED, PSCOM_SOCK_FLAG_INTER_JOB);
    if (!sock) {
        fprintf(stderr, "%s: pscom_open_socket() failed\n", progname);
        return 1;
    }
    sock->ops.con_error = client_con_error;

    c.con = pscom_open_connection(sock);
    if (!c.con) {
        fprintf(stderr, "%s: pscom_open_connection() failed\n", progname);
        return 1;
    }
    rc = pscom_connect(c.con, arg.server_ep, PSCOM_RANK_UNDEFINED, PSCOM_CON_FLAG_DIRECT);
    if (rc != PSCOM_SUCCESS || client_con_failed ||
        c.con->state == PSCOM_CON_STATE_CLOSED) {
        fprintf(stderr, "%s: connect to %s failed: %s\n", progname, arg.server_ep,
                rc != PSCOM_SUCCESS ? pscom_err_str(rc) : "connection closed");
        return 1;
    }

    c.sreq = pscom_request_create(PP_MAX_XHEADER, 0);
    c.rreq = pscom_request_create(PP_MAX_XHEADER, 0);
    if (!c.sreq || !c.rreq) {
        fprintf(stderr, "%s: pscom_request_create() failed\n", progname);
        return 1;
    }
    {
        size_t len = arg.maxsize >= arg.minsize ? arg.maxsize : arg.minsize;
        c.sbuf     = alloc_buf(len);
        c.rbuf     = alloc_buf(len);
        fill_pattern(c.sbuf, len, 0);
        memset(c.rbuf, 0, len);
    }
    fill_pattern(c.xh, sizeof(c.xh), 0x5a);
    memcpy(req_xheader(c.sreq), c.xh, arg.xheader);
    if (arg.histo) {
        c.histo = malloc(sizeof(double) * loops);
        if (!c.histo) {
            fprintf(stderr, "%s: out of memory\n", progname);
            return 1;
        }
    }

    printf("Xheader : %u bytes\n", arg.xheader);
    printf("%7s %8s %8s %8s\n", "msize", "loops", "time", "throughput");
    printf("%7s %8s %8s %8s\n", "[bytes]", "[cnt]", "[us/cnt]", "[MB/s]");
    fflush(stdout);

    for (ms = arg.minsize; ms <= arg.maxsize; ms = next_size(ms, &ms_exact)) {
        double elapsed = 0.0, t;
        int res        = run_size(&c, ms, loops, &elapsed);

        if (res < 0) {
            printf("%7lu Error in communication...\n", ms);
            fflush(stdout);
            ret = 1;
            break;
        }
        if (arg.histo) {
            printf("Message size %7lu. Rtt/2[usec]\n", ms);
            for (unsigned i = 0; i < loops; i++) printf("%5d %8.1f\n", (int)i, c.histo[i]);
        }
        t = elapsed / (2.0 * loops);
        if (res > 0) {
            /* -V found wrong data: the error line instead of the row, and
             * on to the next size (the exit status says it) */
            printf("%7lu Error in communication...\n", ms);
            ret = 1;
        } else {
            printf("%7lu %8u %8.2f %8.2f%s\n", ms, loops, t, t > 0.0 ? (double)ms / t : 0.0,
                   arg.verify ? " ok" : "");
        }
        fflush(stdout);

        if (elapsed / 1000.0 > (double)arg.time_ms) {
            loops_exact /= PP_SQRT2;
            loops = (unsigned)(loops_exact + 0.5);
            if (loops < 1) loops = 1;
        }
        if (ms == PSCOM_DATA_LEN_MASK) break;
    }

    if (arg.verbose) {
        print_config(stdout);
        pscom_dump_info(stdout);
    }

    pscom_request_free(c.sreq);
    pscom_request_free(c.rreq);
    pscom_close_connection(c.con);
    pscom_close_socket(sock);
    free(c.sbuf);
    free(c.rbuf);
    free(c.histo);
    return ret;
}

/* ------------------------------------------------------------------ */

int main(int argc, char **argv)
{
    pscom_err_t rc;

    if (argc > 0 && argv[0] && argv[0][0]) progname = argv[0];
    parse_args(argc, argv);
    /* a vanishing peer must give an error, not kill the process */
    signal(SIGPIPE, SIG_IGN);

    rc = pscom_init(PSCOM_VERSION);
    if (rc != PSCOM_SUCCESS) {
        fprintf(stderr, "%s: pscom_init() failed: %s\n", progname, pscom_err_str(rc));
        return 1;
    }

    return arg.client ? run_client() : run_server();
}
