/*
 * itest_connect_cycles: connect/close cycles leak nothing.
 *
 * One process, two listening sockets A ("cycA") and B ("cycB"). Each cycle
 * connects A and B (DIRECT from A, DIRECT from B, on demand with the first
 * write from the lower name A, on demand with the first write from the
 * higher name B - so B asks A to connect back -, on demand with both
 * writing at once), exchanges messages with content checks in both
 * directions, and closes again: either the connections (then progress
 * until they are gone) or the whole sockets (pscom_close_socket waits).
 * After a warm-up cycle of every kind (lazy initialisation: epoll fd,
 * reserve fd, plugin state), the number of open file descriptors
 * (/proc/self/fd) must be back at its baseline after every cycle, and the
 * heap in use (glibc mallinfo2) must not grow over CYCLES more cycles.
 * Then SOCK_CYCLES sockets opened, listening and closed with no progress
 * call in between: the heap must not grow either.
 * Run over tcp alone, then with the transports the environment selects.
 */
#define _GNU_SOURCE
#include "pscom_testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define CYCLES 60
#define KINDS  5

static pscom_connection_t *accepted_con;

static void on_accept(pscom_connection_t *con)
{
    TU_ASSERT_NULL(accepted_con);
    accepted_con = con;
}

static pscom_socket_t *open_sock(const char *name, char **ep)
{
    pscom_socket_t *s = pscom_open_socket(0, 0, name[3] == 'A' ? 0 : 1, PSCOM_SOCK_FLAG_INTER_JOB);
    TU_ASSERT_NOT_NULL(s);
    pscom_socket_set_name(s, name);
    s->ops.con_accept = on_accept;
    TU_ASSERT_OK(pscom_listen(s, PSCOM_ANYPORT));
    TU_ASSERT_OK(pscom_socket_get_ep_str(s, ep));
    return s;
}

static void send_msg(pscom_connection_t *con, uint32_t seed, size_t len, pscom_request_t **out)
{
    pscom_request_t *req = pscom_request_create(sizeof(seed), 0);
    TU_ASSERT_NOT_NULL(req);
    memcpy((void *)&req->xheader, &seed, sizeof(seed));
    req->xheader_len = sizeof(seed);
    req->connection  = con;
    req->data_len    = len;
    req->data        = tu_malloc(len);
    tu_fill(req->data, len, seed);
    pscom_post_send(req);
    *out = req;
}

static void recv_check(pscom_connection_t *con, uint32_t seed, size_t len)
{
    pscom_request_t *req = pscom_request_create(sizeof(seed), 0);
    TU_ASSERT_NOT_NULL(req);
    req->xheader_len = sizeof(seed);
    req->connection  = con;
    req->data_len    = len;
    req->data        = tu_malloc(len);
    pscom_post_recv(req);
    pscom_wait(req);
    TU_ASSERT_SUCCESSFUL(req);
    uint32_t got;
    memcpy(&got, (const void *)&req->xheader, sizeof(got));
    TU_ASSERT_EQ(got, seed);
    TU_ASSERT_EQ(req->header.data_len, len);
    TU_ASSERT_PATTERN(req->data, len, seed);
    free(req->data);
    pscom_request_free(req);
}

static void wait_send(pscom_request_t *req)
{
    pscom_wait(req);
    TU_ASSERT_SUCCESSFUL(req);
    free(req->data);
    pscom_request_free(req);
}

/* one cycle of the given kind; returns with everything closed */
static void cycle(int kind, int close_sockets, uint32_t n)
{
    char *ep_a, *ep_b;
    pscom_socket_t *a = open_sock("cycA", &ep_a);
    pscom_socket_t *b = open_sock("cycB", &ep_b);
    pscom_connection_t *ca = pscom_open_connection(a);
    pscom_connection_t *cb = NULL;
    size_t len             = 1000 + n % 7 * 3000;
    pscom_request_t *s1, *s2;
    accepted_con = NULL;

    switch (kind) {
    case 0: /* DIRECT a -> b */
        TU_ASSERT_OK(pscom_connect(ca, ep_b, 1, PSCOM_CON_FLAG_DIRECT));
        while (!accepted_con) pscom_wait_any();
        cb = accepted_con;
        break;
    case 1: /* DIRECT b -> a */
        cb = pscom_open_connection(b);
        TU_ASSERT_OK(pscom_connect(cb, ep_a, 0, PSCOM_CON_FLAG_DIRECT));
        while (!accepted_con) pscom_wait_any();
        pscom_close_connection(ca); /* never connected: just freed */
        ca = accepted_con;
        break;
    default: /* on demand */
        cb = pscom_open_connection(b);
        TU_ASSERT_OK(pscom_connect(ca, ep_b, 1, PSCOM_CON_FLAG_ONDEMAND));
        TU_ASSERT_OK(pscom_connect(cb, ep_a, 0, PSCOM_CON_FLAG_ONDEMAND));
        TU_ASSERT_EQ(ca->type, PSCOM_CON_TYPE_ONDEMAND);
        break;
    }
    if (kind == 3) {
        /* the higher name writes first: it asks for a back-connect */
        send_msg(cb, n * 2 + 1, len, &s2);
        recv_check(ca, n * 2 + 1, len);
        send_msg(ca, n * 2, len, &s1);
        recv_check(cb, n * 2, len);
    } else {
        /* kind 2: the lower name first; 0, 1, 4: both at once */
        send_msg(ca, n * 2, len, &s1);
        if (kind != 2) send_msg(cb, n * 2 + 1, len, &s2);
        recv_check(cb, n * 2, len);
        if (kind == 2) send_msg(cb, n * 2 + 1, len, &s2);
        recv_check(ca, n * 2 + 1, len);
    }
    wait_send(s1);
    wait_send(s2);
    TU_ASSERT_NE(ca->type, PSCOM_CON_TYPE_ONDEMAND);
    TU_ASSERT_NE(cb->type, PSCOM_CON_TYPE_ONDEMAND);
    TU_ASSERT_PTR_EQ(pscom_get_next_connection(a, NULL), ca);
    TU_ASSERT_NULL(pscom_get_next_connection(a, ca));
    TU_ASSERT_PTR_EQ(pscom_get_next_connection(b, NULL), cb);
    TU_ASSERT_NULL(pscom_get_next_connection(b, cb));
    TU_ASSERT(kind >= 2 ? accepted_con == NULL : accepted_con != NULL);

    if (!close_sockets) {
        pscom_close_connection(ca);
        pscom_close_connection(cb);
    }
    pscom_close_socket(a);
    pscom_close_socket(b);
    pscom_socket_free_ep_str(ep_a);
    pscom_socket_free_ep_str(ep_b);
    pscom_test_any(); /* deferred frees */
}

#define SOCK_CYCLES 500

static int run(tu_ctx_t *ctx)
{
    (void)ctx;
    /* warm-up: every kind once, both ways of closing */
    for (int k = 0; k < KINDS; k++) {
        cycle(k, 0, (uint32_t)k);
        cycle(k, 1, (uint32_t)k);
    }
    int fds0   = tu_count_fds();
    long heap0 = tu_heap_bytes();
    for (uint32_t n = 0; n < CYCLES; n++) {
        cycle((int)(n % KINDS), (int)(n / KINDS) % 2, n + 100);
        int fds = tu_count_fds();
        TU_ASSERT_MSG(fds == fds0, "cycle %u (kind %u): %d open fds, %d before: fd leak", n,
                      n % KINDS, fds, fds0);
    }
    long heap1 = tu_heap_bytes();
    tu_log("%d cycles: open fds %d before and after, heap in use %ld -> %ld bytes", CYCLES, fds0,
           heap0, heap1);
    /* a leak of one connection per cycle would be tens of kilobytes */
    TU_ASSERT_MSG(heap1 - heap0 < 16384, "heap grew by %ld bytes over %d cycles", heap1 - heap0,
                  CYCLES);
    /* sockets opened, listening and closed with no progress call between:
     * a close frees those closed before the last 16 (until 2026-11-29 all
     * waited for the next progress pass: 288 bytes per socket piled up) */
    heap0 = tu_heap_bytes();
    for (int n = 0; n < SOCK_CYCLES; n++) {
        pscom_socket_t *s = pscom_open_socket(0, 0, PSCOM_RANK_UNDEFINED, PSCOM_SOCK_FLAG_INTER_JOB);
        TU_ASSERT_NOT_NULL(s);
        TU_ASSERT_OK(pscom_listen(s, PSCOM_ANYPORT));
        pscom_close_socket(s);
    }
    heap1 = tu_heap_bytes();
    tu_log("%d sockets without progress: heap in use %ld -> %ld bytes", SOCK_CYCLES, heap0, heap1);
    TU_ASSERT_MSG(heap1 - heap0 < 16384, "heap grew by %ld bytes over %d sockets", heap1 - heap0,
                  SOCK_CYCLES);
    return 0;
}

int main(void)
{
    /* connection set-up over the built-in transports; over ucp in the
     * test entries of its own that set PSP_UCP=1 (test/integration/CMakeLists.txt) */
    setenv("PSP_UCP", "0", 0);
    /* over tcp alone, then over whatever the environment selects (shm
     * between the two sockets, when it is built) */
    const char *shm = getenv("PSP_SHM");
    char *saved     = shm ? strdup(shm) : NULL;
    setenv("PSP_SHM", "0", 1);
    int rc = tu_run("connect_cycles_tcp", 0, run, NULL, NULL);
    if (saved) {
        setenv("PSP_SHM", saved, 1);
    } else {
        unsetenv("PSP_SHM");
    }
    free(saved);
    rc |= tu_run("connect_cycles", 0, run, NULL, NULL);
    return rc;
}
