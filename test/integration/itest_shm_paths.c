/*
 * itest_shm_paths: messages over shm through each data path, chosen by the
 * environment the test sets for its children (only shm may be used:
 * PSP_TCP=0 ..., PSCOM_TEST_CONTYPE=shm):
 *
 *   adapt : defaults; messages of at least PSP_SHM_RENDEZVOUS (32 KiB) data
 *           bytes take the single copy or the ring, whichever the receiver
 *           measured faster, and every 32nd the other way;
 *   cma   : PSP_SHM_ADAPT=0: such messages are copied once, straight from
 *           the sender's buffer (process_vm_readv, the sender helping with
 *           process_vm_writev);
 *   ring  : PSP_SHM_CMA=0: every message is pipelined through the ring;
 *   eager : PSP_SHM_RENDEZVOUS=inf: the ring as well, with cross-memory
 *           attach available;
 *   tiny  : PSP_SHM_CMA=0 and the smallest ring (16 KiB, 8 KiB packets):
 *           wrap-around, a full ring and messages of many packets all the
 *           time;
 *   budget: PSP_SHM_CMA=0, a 1 MiB ring but a ring budget of 1 byte: the
 *           connection gets the small ring (128 KiB) instead.
 *
 * In each mode:
 *  - the path is the expected one: a 256 KiB send to a peer that is out of
 *    pscom stays pending with single copy (it ends with the receiver's ACK)
 *    and completes at once through the 1 MiB ring (not through the tiny or
 *    small one); PATH_SENDS such sends in a row (in mode adapt the first
 *    two take the ring, the next two the single copy);
 *  - the segments are gone from /dev/shm once the connection is up;
 *  - 0 B .. 64 MiB (4 MiB with the tiny and the small ring) both ways,
 *    with the receive posted before the message arrives and after
 *    (unexpected), content and lengths checked;
 *  - truncated receives (2 MiB + 7 into 1000 bytes, posted and
 *    unexpected): TRUNCATED, the posted bytes right, a guard untouched, the
 *    next message intact;
 *  - both sides send 8 MiB (1 MiB) to each other at the same time, 5 rounds;
 *  - 300 messages of mixed sizes keep their order.
 *
 * Mode zero (PSP_SHM_RENDEZVOUS=0, every message with data "large") only
 * sends messages of a 2000-byte xheader and no data: the receiver's timing
 * of large messages divided by their data length, 0 (SIGFPE until
 * 2026-11-29, at the second such message).
 *
 * "itest_shm_paths contype" only connects, with PSP_DEBUG_CONTYPE=1 (the
 * ctest entry checks for the "via shm" lines); "itest_shm_paths MODE" runs
 * the one mode.
 */
#define _GNU_SOURCE
#include "pscom_testutil.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define TAG_MSG   0x4d534721u
#define TAG_FENCE 0x46454e43u
#define GUARD     64

static const size_t sizes[] = {0,          1,          8,          100,
                               4095,       32767,      32768,      32769,
                               65536 + 13, 262144,     1048576 + 7, 4194304,
                               16777216 + 5, 67108864};
#define NSIZES (sizeof(sizes) / sizeof(sizes[0]))

static const char *mode;

/* A small ring (tiny: 16 KiB, budget: 128 KiB) moves a few KiB per
 * hand-over between the two processes: with more runnable processes than
 * cpus (tests in parallel) each hand-over can cost a time slice, and
 * 64 MiB through the tiny ring took over a minute (ctest -j3 on 2 cpus).
 * Up to 4 MiB a message still wraps and fills the ring all the time. */
static int small_ring(void)
{
    return !strcmp(mode, "tiny") || !strcmp(mode, "budget");
}

/* the sizes of CMD_SIZES: all, or those up to 4 MiB for a small ring */
static unsigned nsizes(void)
{
    return small_ring() ? 12 : NSIZES; /* sizes[11] is 4 MiB */
}

/* CMD_BOTH: bytes each way per round */
static size_t both_len(void)
{
    return small_ring() ? 1u << 20 : 8u << 20;
}

/* ---- helpers ---------------------------------------------------------------- */

typedef struct xh {
    uint32_t tag;
    uint32_t seq;
    uint64_t len;
} xh_t;

static pscom_request_t *post_send(pscom_connection_t *con, uint32_t seq, void *data,
                                  size_t len)
{
    xh_t xh              = {TAG_MSG, seq, len};
    pscom_request_t *req = pscom_request_create(sizeof(xh), 0);
    TU_ASSERT_NOT_NULL(req);
    pscom_req_prepare(req, con, data, len, &xh, sizeof(xh));
    pscom_post_send(req);
    return req;
}

static pscom_request_t *post_recv(pscom_connection_t *con, void *data, size_t len)
{
    return tu_post_recv(con, data, len, sizeof(xh_t));
}

static void wait_free(pscom_request_t *req)
{
    pscom_wait(req);
    TU_ASSERT_SUCCESSFUL(req);
    pscom_request_free(req);
}

/* a received message: header, lengths and content (pattern of seed) */
static void check_echo(pscom_request_t *req, uint32_t seq, size_t len, const void *buf,
                       uint32_t seed)
{
    xh_t xh;
    TU_ASSERT_SUCCESSFUL(req);
    memcpy(&xh, (const void *)&req->xheader, sizeof(xh));
    TU_ASSERT_EQ(xh.tag, TAG_MSG);
    TU_ASSERT_EQ(xh.seq, seq);
    TU_ASSERT_EQ(xh.len, len);
    TU_ASSERT_EQ(req->header.data_len, len);
    TU_ASSERT_PATTERN(buf, len, seed);
}

static void check_msg(pscom_request_t *req, uint32_t seq, size_t len, const void *buf)
{
    check_echo(req, seq, len, buf, seq);
}

/* no segment of these processes is left in /dev/shm */
static void assert_no_segments(pid_t a, pid_t b)
{
    char pa[64], pb[64];
    snprintf(pa, sizeof(pa), "pscom-shm-%d-", (int)a);
    snprintf(pb, sizeof(pb), "pscom-shm-%d-", (int)b);
    DIR *d = opendir("/dev/shm");
    if (!d) return; /* no /dev/shm: nothing can be left there */
    struct dirent *e;
    while ((e = readdir(d))) {
        TU_ASSERT_MSG(strncmp(e->d_name, pa, strlen(pa)) && strncmp(e->d_name, pb, strlen(pb)),
                      "segment /dev/shm/%s is still there", e->d_name);
    }
    closedir(d);
}

#define PATH_SENDS 8

/* must the i-th 256 KiB send (from 1) wait for the receiver? */
static int send_waits(unsigned i)
{
    /* adapt: the first two through the ring, the next two single copy;
     * then it depends on timing (-1: either) */
    if (!strcmp(mode, "adapt")) return i <= 4 ? i > 2 : -1;
    return !strcmp(mode, "cma") || small_ring();
}

/* ---- client -------------------------------------------------------------------- */

enum { CMD_PATH = 1, CMD_SIZES, CMD_TRUNC, CMD_BOTH, CMD_ORDER, CMD_END };

static int client(tu_ctx_t *ctx)
{
    pscom_socket_t *sock    = tu_open_socket(ctx, 0, 0);
    pscom_connection_t *con = tu_client_connect(ctx, sock);
    size_t max              = sizes[nsizes() - 1];
    unsigned char *sbuf     = tu_malloc(max);
    unsigned char *rbuf     = tu_malloc(max);

    for (;;) {
        uint32_t cmd = tu_wait_signal_progress(ctx, TU_SERVER);
        if (cmd == CMD_END) break;
        switch (cmd) {
        case CMD_PATH:
            for (unsigned i = 1; i <= PATH_SENDS; i++) {
                /* the server is out of pscom until we signal */
                size_t len = 256u << 10;
                tu_fill(sbuf, len, 77);
                pscom_request_t *s = post_send(con, 77, sbuf, len);
                for (int k = 0; k < 2000 && !pscom_req_is_done(s); k++) pscom_test_any();
                int waits = send_waits(i);
                if (waits > 0) {
                    TU_ASSERT_MSG(!pscom_req_is_done(s), "%s: send %u completed before the "
                                  "receiver took it", mode, i);
                } else if (!waits) {
                    TU_ASSERT_MSG(pscom_req_is_done(s), "%s: 256 KiB send %u did not complete "
                                  "into the 1 MiB ring", mode, i);
                }
                tu_signal(ctx, TU_SERVER, 1);
                wait_free(s);
                TU_ASSERT_EQ(tu_wait_signal_progress(ctx, TU_SERVER), 2); /* taken */
            }
            break;
        case CMD_SIZES:
            for (unsigned k = 0; k < nsizes(); k++) {
                size_t len = sizes[k];
                /* 1: the server has posted its receive; 2: it has not */
                for (uint32_t round = 1; round <= 2; round++) {
                    uint32_t seq = (uint32_t)(k * 10 + round);
                    TU_ASSERT_EQ(tu_wait_signal_progress(ctx, TU_SERVER), round);
                    tu_fill(sbuf, len, seq);
                    wait_free(post_send(con, seq, sbuf, len));
                    if (round == 2) tu_send_tag(con, TAG_FENCE);
                    /* the echo */
                    memset(rbuf, 0, len < 4096 ? len : 4096);
                    pscom_request_t *r = post_recv(con, rbuf, max);
                    pscom_wait(r);
                    check_echo(r, seq + 1000, len, rbuf, seq);
                    pscom_request_free(r);
                }
            }
            break;
        case CMD_TRUNC:
            /* 1: the server has posted its receives; 2: it has not */
            for (uint32_t round = 1; round <= 2; round++) {
                size_t len = (2u << 20) + 7;
                TU_ASSERT_EQ(tu_wait_signal_progress(ctx, TU_SERVER), round);
                tu_fill(sbuf, len, 500 + round);
                wait_free(post_send(con, 500 + round, sbuf, len));
                tu_fill(sbuf, 33, 600 + round);
                wait_free(post_send(con, 600 + round, sbuf, 33));
                tu_send_tag(con, TAG_FENCE);
            }
            break;
        case CMD_BOTH:
            for (uint32_t round = 0; round < 5; round++) {
                size_t len = both_len();
                tu_fill(sbuf, len, 900 + round);
                pscom_request_t *r = post_recv(con, rbuf, len);
                tu_signal(ctx, TU_SERVER, 1); /* receive posted */
                TU_ASSERT_EQ(tu_wait_signal_progress(ctx, TU_SERVER), 1);
                pscom_request_t *s = post_send(con, 900 + round, sbuf, len);
                pscom_wait(r);
                check_msg(r, 950 + round, len, rbuf);
                pscom_request_free(r);
                wait_free(s);
            }
            break;
        case CMD_ORDER: {
            static const size_t mix[] = {8, 40000, 3, 300000, (1u << 20) + 1, 0, 32768};
            pscom_request_t *reqs[300];
            unsigned char *bufs[300];
            for (uint32_t i = 0; i < 300; i++) {
                size_t len = mix[i % (sizeof(mix) / sizeof(mix[0]))];
                bufs[i]    = tu_malloc(len ? len : 1);
                tu_fill(bufs[i], len, 2000 + i);
                reqs[i] = post_send(con, 2000 + i, bufs[i], len);
            }
            for (uint32_t i = 0; i < 300; i++) {
                wait_free(reqs[i]);
                free(bufs[i]);
            }
            break;
        }
        default: TU_FAIL("unknown command %u", cmd);
        }
        tu_signal(ctx, TU_SERVER, 0); /* done */
    }
    free(sbuf);
    free(rbuf);
    return 0;
}

/* ---- server -------------------------------------------------------------------- */

static void command(tu_ctx_t *ctx, uint32_t cmd)
{
    tu_signal(ctx, 1, cmd);
}

static void finished(tu_ctx_t *ctx)
{
    TU_ASSERT_EQ(tu_wait_signal_progress(ctx, 1), 0);
}

static int server(tu_ctx_t *ctx)
{
    pscom_socket_t *sock = tu_open_socket(ctx, 0, 0);
    pscom_connection_t *con = tu_server_accept_one(ctx, sock);
    TU_ASSERT_EQ(con->type, PSCOM_CON_TYPE_SHM);
    assert_no_segments(getpid(), ctx->client_pids[1]);

    size_t max          = sizes[nsizes() - 1];
    unsigned char *rbuf = tu_malloc(max + GUARD);

    /* the data path */
    pscom_request_t *r;
    command(ctx, CMD_PATH);
    for (unsigned i = 1; i <= PATH_SENDS; i++) {
        TU_ASSERT_EQ(tu_wait_signal(ctx, 1), 1); /* stayed out of pscom until now */
        r = post_recv(con, rbuf, max);
        pscom_wait(r);
        check_msg(r, 77, 256u << 10, rbuf);
        pscom_request_free(r);
        tu_signal(ctx, 1, 2);
    }
    finished(ctx);

    /* all sizes, posted and unexpected, echoed */
    command(ctx, CMD_SIZES);
    for (unsigned k = 0; k < nsizes(); k++) {
        size_t len = sizes[k];
        for (uint32_t round = 1; round <= 2; round++) {
            uint32_t seq = (uint32_t)(k * 10 + round);
            memset(rbuf, 0, len < 4096 ? len : 4096);
            if (round == 1) {
                r = post_recv(con, rbuf, max);
                tu_signal(ctx, 1, round);
                pscom_wait(r);
            } else {
                tu_signal(ctx, 1, round);
                tu_wait_tag(con, NULL, TAG_FENCE); /* the message is unexpected now */
                r = post_recv(con, rbuf, max);
                pscom_wait(r);
            }
            check_msg(r, seq, len, rbuf);
            pscom_request_free(r);
            /* echo from the buffer it arrived in */
            wait_free(post_send(con, seq + 1000, rbuf, len));
        }
    }
    finished(ctx);

    /* truncation: 2 MiB + 7 into 1000 bytes, then the next message */
    command(ctx, CMD_TRUNC);
    for (uint32_t round = 1; round <= 2; round++) {
        pscom_request_t *r2;
        memset(rbuf, 0xee, 1000 + GUARD);
        unsigned char small[33 + GUARD];
        if (round == 1) {
            r  = post_recv(con, rbuf, 1000);
            r2 = post_recv(con, small, 33);
            tu_signal(ctx, 1, round);
        } else {
            tu_signal(ctx, 1, round);
            tu_wait_tag(con, NULL, TAG_FENCE); /* both are unexpected now */
            r  = post_recv(con, rbuf, 1000);
            r2 = post_recv(con, small, 33);
        }
        pscom_wait(r);
        TU_ASSERT_STATE_HAS(r->state, PSCOM_REQ_STATE_TRUNCATED | PSCOM_REQ_STATE_DONE);
        TU_ASSERT_EQ(r->header.data_len, (2u << 20) + 7);
        TU_ASSERT_PATTERN(rbuf, 1000, 500 + round);
        TU_ASSERT_BYTES(rbuf + 1000, GUARD, 0xee);
        pscom_request_free(r);
        pscom_wait(r2);
        check_msg(r2, 600 + round, 33, small);
        pscom_request_free(r2);
        if (round == 1) tu_wait_tag(con, NULL, TAG_FENCE);
    }
    finished(ctx);

    /* both ways at once */
    command(ctx, CMD_BOTH);
    unsigned char *sbuf = tu_malloc(8u << 20);
    for (uint32_t round = 0; round < 5; round++) {
        size_t len = both_len();
        tu_fill(sbuf, len, 950 + round);
        r = post_recv(con, rbuf, len);
        TU_ASSERT_EQ(tu_wait_signal_progress(ctx, 1), 1);
        tu_signal(ctx, 1, 1);
        pscom_request_t *s = post_send(con, 950 + round, sbuf, len);
        pscom_wait(r);
        check_msg(r, 900 + round, len, rbuf);
        pscom_request_free(r);
        wait_free(s);
    }
    free(sbuf);
    finished(ctx);

    /* order of mixed sizes */
    command(ctx, CMD_ORDER);
    for (uint32_t i = 0; i < 300; i++) {
        r = post_recv(con, rbuf, max);
        pscom_wait(r);
        xh_t xh;
        memcpy(&xh, (const void *)&r->xheader, sizeof(xh));
        check_msg(r, 2000 + i, (size_t)xh.len, rbuf);
        pscom_request_free(r);
    }
    finished(ctx);

    command(ctx, CMD_END);
    free(rbuf);
    return 0;
}

/* "contype": connect, and nothing else (for PSP_DEBUG_CONTYPE=1) */
static int quick_client(tu_ctx_t *ctx)
{
    pscom_socket_t *sock = tu_open_socket(ctx, 0, 0);
    tu_client_connect(ctx, sock);
    TU_ASSERT_EQ(tu_wait_signal_progress(ctx, TU_SERVER), CMD_END);
    return 0;
}

static int quick_server(tu_ctx_t *ctx)
{
    pscom_socket_t *sock = tu_open_socket(ctx, 0, 0);
    pscom_connection_t *con = tu_server_accept_one(ctx, sock);
    TU_ASSERT_EQ(con->type, PSCOM_CON_TYPE_SHM);
    command(ctx, CMD_END);
    return 0;
}

/* mode zero: xheader-only messages, the threshold at 0 */
#define XH_ONLY_N   4
#define XH_ONLY_LEN 2000

static int xh_only_client(tu_ctx_t *ctx)
{
    pscom_socket_t *sock    = tu_open_socket(ctx, 0, 0);
    pscom_connection_t *con = tu_client_connect(ctx, sock);
    unsigned char xh[XH_ONLY_LEN];
    for (unsigned i = 0; i < XH_ONLY_N; i++) {
        tu_fill(xh, sizeof(xh), 7000 + i);
        pscom_send(con, xh, sizeof(xh), NULL, 0);
    }
    TU_ASSERT_EQ(tu_wait_signal_progress(ctx, TU_SERVER), CMD_END);
    return 0;
}

static int xh_only_server(tu_ctx_t *ctx)
{
    pscom_socket_t *sock    = tu_open_socket(ctx, 0, 0);
    pscom_connection_t *con = tu_server_accept_one(ctx, sock);
    TU_ASSERT_EQ(con->type, PSCOM_CON_TYPE_SHM);
    for (unsigned i = 0; i < XH_ONLY_N; i++) {
        pscom_request_t *r = pscom_request_create(XH_ONLY_LEN, 0);
        r->connection      = con;
        r->xheader_len     = XH_ONLY_LEN;
        pscom_post_recv(r);
        pscom_wait(r);
        TU_ASSERT_SUCCESSFUL(r);
        TU_ASSERT_EQ(r->header.xheader_len, XH_ONLY_LEN);
        TU_ASSERT_EQ(r->header.data_len, 0);
        TU_ASSERT_PATTERN((const unsigned char *)&r->xheader, XH_ONLY_LEN, 7000 + i);
        pscom_request_free(r);
    }
    command(ctx, CMD_END);
    return 0;
}

int main(int argc, char **argv)
{
    static const struct {
        const char *name, *cma, *rendezvous, *ring, *adapt, *budget;
    } modes[] = {
        {"adapt", "1", NULL, "1048576", "1", NULL},
        {"cma", "1", NULL, "1048576", "0", NULL},
        {"ring", "0", NULL, "1048576", "1", NULL},
        {"eager", "1", "inf", "1048576", "1", NULL},
        {"tiny", "0", NULL, "16384", "1", NULL},
        {"budget", "0", NULL, "1048576", "1", "1"},
    };
    setenv("PSP_TCP", "0", 1);
    setenv("PSP_UCP", "0", 1);
    setenv("PSP_OPENIB", "0", 1);
    setenv("PSCOM_TEST_CONTYPE", "shm", 1);
    unsetenv("PSP_RENDEZVOUS");
    if (argc > 1 && !strcmp(argv[1], "contype")) {
        mode = "cma";
        setenv("PSP_SHM_RING_SIZE", "1048576", 1);
        setenv("PSP_DEBUG_CONTYPE", "1", 1);
        return tu_run("shm_contype", 1, quick_server, quick_client, NULL);
    }
    if (argc == 1 || !strcmp(argv[1], "zero")) {
        mode = "zero";
        setenv("PSP_SHM_CMA", "1", 1);
        setenv("PSP_SHM_ADAPT", "1", 1);
        setenv("PSP_SHM_RING_SIZE", "1048576", 1);
        setenv("PSP_SHM_RENDEZVOUS", "0", 1);
        if (tu_run("shm_paths_zero", 1, xh_only_server, xh_only_client, NULL)) return 1;
        if (argc > 1) return 0;
    }
    for (unsigned m = 0; m < sizeof(modes) / sizeof(modes[0]); m++) {
        char name[32];
        mode = modes[m].name;
        if (argc > 1 && strcmp(argv[1], mode)) continue; /* "itest_shm_paths MODE": that one */
        setenv("PSP_SHM_CMA", modes[m].cma, 1);
        setenv("PSP_SHM_RING_SIZE", modes[m].ring, 1);
        setenv("PSP_SHM_ADAPT", modes[m].adapt, 1);
        if (modes[m].budget) {
            setenv("PSP_SHM_RING_BUDGET", modes[m].budget, 1);
        } else {
            unsetenv("PSP_SHM_RING_BUDGET");
        }
        if (modes[m].rendezvous) {
            setenv("PSP_SHM_RENDEZVOUS", modes[m].rendezvous, 1);
        } else {
            unsetenv("PSP_SHM_RENDEZVOUS");
        }
        snprintf(name, sizeof(name), "shm_paths_%s", mode);
        if (tu_run(name, 1, server, client, NULL)) return 1;
    }
    return 0;
}
