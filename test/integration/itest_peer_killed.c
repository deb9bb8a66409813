/*
 * itest_peer_killed: the peer process dies by SIGKILL (no protocol EOF)
 * while the other side waits (spec 5.7 write error / plain transport EOF,
 * 5.10). Six clients, each must end by SIGKILL:
 *
 *  1. the server has a receive posted on the connection and kills the
 *     client itself: the receive completes with ERROR, con_error is called
 *     with (PSCOM_OP_READ, PSCOM_ERR_IOERROR), nothing hangs;
 *  2. the server sits in a blocking pscom_recv_from when the client kills
 *     itself: pscom_recv_from returns PSCOM_ERR_IOERROR;
 *  3. the client dies in the middle of a 16 MiB message: the receive for
 *     it completes with ERROR (never successful with partial data; a
 *     transport that pulls the data itself may complete it, then the data
 *     must be complete and correct);
 *  4. the server's 16 MiB send to a client that never reads is in flight
 *     when the server kills it: the send completes with ERROR, never as
 *     sent (over ucp it did until 2026-11-29: UCX failed the rendezvous,
 *     the plugin retired the message anyway);
 *  5, 6. the server's 16 MiB send to a client that never reads is under
 *     way, the client sends DRAIN_MSGS messages and dies: they had all
 *     arrived (the client's kernel has them acknowledged: in our socket
 *     buffer over tcp), so every one is delivered, in order and intact,
 *     before the connection fails (con_error; the send, a later send and
 *     a receive after them end with ERROR). 5: our first pscom call after
 *     the death is another send, whose write fails at once; 6: it is a
 *     wait, the poll reports the socket readable and writable. Until
 *     2026-11-29 tcp failed the connection at the first failed write
 *     without reading what had arrived: 5 delivered none of them, 6 the
 *     first 32 of 40 (the read handler yields after 64 reads, then the
 *     write failed). Only over transports whose sends complete while the
 *     receiver stays out of pscom (tcp, shm; UCX's shared memory and the
 *     software HCA keep them until the receiver takes them, itest_ucp
 *     death_drain is about ucp): elsewhere the server kills the client;
 *  7. (a run of its own, tcp only, PSP_TCP_RENDEZVOUS=65536) as 6, the
 *     messages around a rendezvous announcement that matches a posted
 *     receive: its clear-to-send is written while the messages behind it
 *     are being read, and fails; they are read and delivered all the same
 *     (a failed write inside a read pass waits for the pass's end), the
 *     receive ends with ERROR. Until 2026-11-29 the 20 behind it were lost.
 * Afterwards, a send on a dead connection completes (no hang).
 */
#include "pscom_testutil.h"

#include <linux/sockios.h>
#include <netinet/in.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#define BIG (16u << 20)
/* cases 5, 6: they must fit into the server's TCP receive window on
 * loopback (85 KB with the default tcp_rmem), so that they all arrive */
#define DRAIN_MSGS 40
#define DRAIN_LEN  1536

/* Cases 5 and 6 need sends that complete while the receiver makes no
 * progress. */
static int sends_complete_alone(const pscom_connection_t *con)
{
    return con->type == PSCOM_CON_TYPE_TCP || con->type == PSCOM_CON_TYPE_SHM;
}

/* Until the peers of all connected TCP sockets of this process have
 * acknowledged every byte written to them (SIOCOUTQ 0): the data is in
 * their kernel, whatever becomes of us. */
static void wait_tcp_acked(void)
{
    double t0 = tu_now_ms();
    for (int fd = 0; fd < 1024; fd++) {
        int type = 0, listening = 0;
        socklen_t len = sizeof(type);
        struct sockaddr_storage sa;
        socklen_t salen = sizeof(sa);
        if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len) || type != SOCK_STREAM) continue;
        len = sizeof(listening);
        if (getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &len) || listening) continue;
        if (getsockname(fd, (struct sockaddr *)&sa, &salen) ||
            (sa.ss_family != AF_INET && sa.ss_family != AF_INET6))
            continue;
        for (;;) {
            int outq = 0;
            if (ioctl(fd, SIOCOUTQ, &outq) || !outq) break;
            TU_ASSERT_MSG(tu_now_ms() - t0 < 10000.0,
                          "fd %d: %d bytes not acknowledged by the peer after 10 s", fd, outq);
            sched_yield();
        }
    }
}

/* Until the process pid has ended (a zombie, or already reaped): its
 * files are closed, its sockets reset. Its control channel's EOF alone
 * does not say that: the kernel closes a dying process's files one by
 * one. */
static void wait_dead(pid_t pid)
{
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    for (;;) {
        FILE *f = fopen(path, "r");
        if (!f) return;
        char buf[512];
        size_t n = fread(buf, 1, sizeof(buf) - 1, f);
        fclose(f);
        buf[n]        = 0;
        const char *p = strrchr(buf, ')');
        if (!p || !p[1] || p[2] == 'Z' || p[2] == 'X') return;
        sched_yield();
    }
}

static pscom_request_t *post_send(pscom_connection_t *con, void *data, size_t len,
                                  uint32_t tag)
{
    pscom_request_t *s = pscom_request_create(sizeof(tag), 0);
    pscom_req_prepare(s, con, data, len, &tag, sizeof(tag));
    pscom_post_send(s);
    return s;
}

/* Messages first .. first+n-1 (DRAIN_LEN bytes of pattern i, xheader i),
 * each waited for until the transport has all of it. */
static void send_drain_msgs(pscom_connection_t *con, uint32_t first, uint32_t n)
{
    pscom_request_t *s[DRAIN_MSGS];
    TU_ASSERT(n <= DRAIN_MSGS);
    unsigned char *buf = (unsigned char *)tu_malloc((size_t)n * DRAIN_LEN);
    for (uint32_t i = 0; i < n; i++) {
        tu_fill(buf + (size_t)i * DRAIN_LEN, DRAIN_LEN, first + i);
        s[i] = post_send(con, buf + (size_t)i * DRAIN_LEN, DRAIN_LEN, first + i);
    }
    for (uint32_t i = 0; i < n; i++) {
        pscom_wait(s[i]);
        TU_ASSERT_SUCCESSFUL(s[i]);
        pscom_request_free(s[i]);
    }
    free(buf);
}

/* All DRAIN_MSGS messages of send_drain_msgs(), in order and intact; a
 * receive after them fails, and so does the connection. Returns its
 * con_error. */
static const tu_err_rec_t *recv_drain_msgs(pscom_connection_t *con)
{
    unsigned char buf[DRAIN_LEN];
    tu_recv_sequence(con, DRAIN_MSGS, DRAIN_LEN, "that arrived before the peer died");
    pscom_request_t *r = tu_post_recv(con, buf, sizeof(buf), sizeof(uint32_t));
    pscom_wait(r);
    TU_ASSERT_MSG(r->state & PSCOM_REQ_STATE_ERROR, "receive after the last message: [%s]",
                  tu_state_str(r->state));
    pscom_request_free(r);
    const tu_err_rec_t *e;
    while (!(e = tu_error_of(con))) pscom_wait_any();
    tu_log("con_error(%s, %s)", e->op == PSCOM_OP_WRITE ? "WRITE" : "READ", tu_err_str(e->err));
    return e;
}

static int client(tu_ctx_t *ctx)
{
    pscom_socket_t *sock    = tu_open_socket(ctx, 0, 0);
    pscom_connection_t *con = tu_client_connect(ctx, sock);
    pscom_flush(con); /* the hello is on its way */

    switch (ctx->rank) {
    case 1:
        /* wait to be killed; the server never signals */
        tu_wait_signal(ctx, TU_SERVER);
        TU_FAIL("client 1 should have been killed");
    case 2:
        tu_wait_signal(ctx, TU_SERVER);
        raise(SIGKILL);
        break;
    case 3: {
        tu_wait_signal(ctx, TU_SERVER);
        unsigned char *big = (unsigned char *)tu_malloc(BIG);
        uint32_t tag       = 3;
        tu_fill(big, BIG, 3);
        pscom_request_t *s = pscom_request_create(4, 0);
        pscom_req_prepare(s, con, big, BIG, &tag, sizeof(tag));
        pscom_post_send(s);
        TU_ASSERT_MSG(!pscom_req_is_done(s),
                      "16 MiB send to a non-reading peer completed at once");
        tu_signal(ctx, TU_SERVER, 1);
        raise(SIGKILL);
        break;
    }
    case 4:
        /* never reads: wait to be killed */
        tu_wait_signal(ctx, TU_SERVER);
        TU_FAIL("client 4 should have been killed");
    case 5:
    case 6:
        /* the server's large send to us is under way; we never read it
         * (over another transport than tcp or shm: wait to be killed) */
        tu_wait_signal(ctx, TU_SERVER);
        TU_ASSERT(sends_complete_alone(con));
        send_drain_msgs(con, 0, DRAIN_MSGS);
        wait_tcp_acked();
        tu_signal(ctx, TU_SERVER, 1);
        raise(SIGKILL);
        break;
    }
    TU_FAIL("survived SIGKILL");
}

static void expect_con_error(pscom_connection_t *con)
{
    const tu_err_rec_t *e;
    while (!(e = tu_error_of(con))) pscom_wait_any();
    TU_ASSERT_EQ(e->op, PSCOM_OP_READ);
    /* no protocol EOF before the transport EOF */
    TU_ASSERT_ERR(e->err, PSCOM_ERR_IOERROR);
}

static void expect_error(pscom_request_t *req, const char *what)
{
    pscom_wait(req);
    TU_ASSERT_MSG((req->state & PSCOM_REQ_STATE_ERROR) && !pscom_req_successful(req),
                  "%s: receive did not fail: state [%s], header.data_len %llu",
                  what, tu_state_str(req->state),
                  (unsigned long long)req->header.data_len);
}

/* Cases 5 and 6 (see the top); send_first: our first call after the
 * death is a send. */
static void death_drain(tu_ctx_t *ctx, pscom_connection_t *con, int rank, int send_first)
{
    if (!sends_complete_alone(con)) {
        tu_log("%d: not over %s: the client is killed", rank, pscom_con_type_str(con->type));
        TU_ASSERT_EQ(kill(ctx->client_pids[rank], SIGKILL), 0);
        while (!tu_error_of(con)) pscom_wait_any();
        return;
    }
    unsigned char *big = (unsigned char *)tu_malloc(BIG);
    tu_fill(big, BIG, (uint32_t)rank);
    pscom_request_t *s = post_send(con, big, BIG, (uint32_t)rank);
    for (int i = 0; i < 100; i++) pscom_test_any(); /* under way, as far as it goes */
    TU_ASSERT_MSG(!pscom_req_is_done(s), "16 MiB send to a non-reading peer completed");
    /* no pscom call from here until the client has sent all and is gone */
    tu_signal(ctx, rank, 1);
    TU_ASSERT_EQ(tu_wait_signal(ctx, rank), 1);
    tu_wait_peer_exit(ctx, rank);
    wait_dead(ctx->client_pids[rank]);

    unsigned char small[64];
    memset(small, 1, sizeof(small));
    pscom_request_t *s2 = send_first ? post_send(con, small, sizeof(small), 9) : NULL;
    pscom_wait(s);
    TU_ASSERT_MSG((s->state & PSCOM_REQ_STATE_ERROR) && !pscom_req_successful(s),
                  "16 MiB send to a peer that died did not fail: [%s]",
                  tu_state_str(s->state));
    if (s2) {
        pscom_wait(s2);
        TU_ASSERT_MSG(s2->state & PSCOM_REQ_STATE_ERROR, "send after the death did not fail: [%s]",
                      tu_state_str(s2->state));
        pscom_request_free(s2);
    }
    pscom_request_free(s);
    free(big);

    /* everything the client sent had arrived: delivered, then the failure */
    const tu_err_rec_t *e = recv_drain_msgs(con);
    /* over tcp the failure is the write's, as it was without the drain */
    if (con->type == PSCOM_CON_TYPE_TCP) TU_ASSERT_EQ(e->op, PSCOM_OP_WRITE);
}

static int server(tu_ctx_t *ctx)
{
    pscom_connection_t *cons[7];
    pscom_socket_t *sock = tu_open_socket(ctx, 0, 0);
    sock->ops.con_error  = tu_on_con_error;
    tu_server_listen(ctx, sock);
    tu_server_accept_all(ctx, sock, cons);

    /* 1: pending receive, we kill the peer */
    tu_step("1: kill client 1, wait for the pending receive");
    pscom_request_t *r1 = tu_post_recv(cons[1], NULL, 0, 4);
    TU_ASSERT_EQ(kill(ctx->client_pids[1], SIGKILL), 0);
    expect_error(r1, "client 1 killed by the server");
    tu_step("1: wait for con_error of client 1");
    expect_con_error(cons[1]);

    /* 2: blocked in pscom_recv_from while the peer kills itself */
    tu_step("2: pscom_recv_from while client 2 kills itself");
    tu_signal(ctx, 2, 1);
    uint32_t x;
    TU_ASSERT_ERR(pscom_recv_from(cons[2], &x, sizeof(x), NULL, 0), PSCOM_ERR_IOERROR);
    tu_step("2: wait for con_error of client 2");
    expect_con_error(cons[2]);

    /* 3: peer dies in the middle of a message */
    tu_step("3: client 3 dies in the middle of a message");
    tu_signal(ctx, 3, 1);
    TU_ASSERT_EQ(tu_wait_signal(ctx, 3), 1);
    unsigned char *big  = (unsigned char *)tu_malloc(BIG);
    pscom_request_t *r3 = tu_post_recv(cons[3], big, BIG, 4);
    pscom_wait(r3);
    if (pscom_req_successful(r3)) {
        /* A transport that pulls the data from the sender (rendezvous
         * read) may have fetched it all before the sender died: then the
         * content must be complete and correct. Never partial data
         * reported as success. */
        TU_ASSERT_EQ(r3->header.data_len, BIG);
        TU_ASSERT_PATTERN(big, BIG, 3);
        tu_log("note: the receive from the dying sender completed (%s)",
               pscom_con_type_str(cons[3]->type));
    } else {
        expect_error(r3, "client 3 died in the middle of 16 MiB");
    }
    tu_step("3: wait for con_error of client 3");
    expect_con_error(cons[3]);
    free(big);

    /* 4: a send in flight when the receiver dies */
    tu_step("4: kill client 4 while a 16 MiB send to it is in flight");
    {
        unsigned char *data = (unsigned char *)tu_malloc(BIG);
        uint32_t tag        = 4;
        tu_fill(data, BIG, 4);
        pscom_request_t *s = pscom_request_create(4, 0);
        pscom_req_prepare(s, cons[4], data, BIG, &tag, sizeof(tag));
        pscom_post_send(s);
        for (int i = 0; i < 100; i++) pscom_test_any(); /* under way, as far as it goes */
        TU_ASSERT_MSG(!pscom_req_is_done(s), "16 MiB send to a non-reading peer completed");
        TU_ASSERT_EQ(kill(ctx->client_pids[4], SIGKILL), 0);
        pscom_wait(s);
        TU_ASSERT_MSG((s->state & PSCOM_REQ_STATE_ERROR) && !pscom_req_successful(s),
                      "send to a peer killed before it read anything did not fail: [%s]",
                      tu_state_str(s->state));
        pscom_request_free(s);
        free(data);
    }
    tu_step("4: wait for con_error of client 4");
    while (!tu_error_of(cons[4])) pscom_wait_any();

    tu_step("5: client 5 sends and dies while we write to it; then a send");
    death_drain(ctx, cons[5], 5, 1);
    tu_step("6: client 6 sends and dies while we write to it; then a wait");
    death_drain(ctx, cons[6], 6, 0);

    /* sending to a dead peer must complete (with whatever result) */
    tu_step("send to a dead peer");
    {
        unsigned char data[64];
        uint32_t tag = 9;
        memset(data, 1, sizeof(data));
        pscom_request_t *s = pscom_request_create(4, 0);
        pscom_req_prepare(s, cons[1], data, sizeof(data), &tag, sizeof(tag));
        pscom_post_send(s);
        pscom_wait(s);
        if (pscom_req_successful(s)) {
            tu_log("note: send on a connection whose peer was killed reported "
                   "success: [%s]",
                   tu_state_str(s->state));
        }
        pscom_request_free(s);
    }

    pscom_request_free(r1);
    pscom_request_free(r3);
    for (int i = 1; i <= 6; i++) pscom_close_connection(cons[i]);
    tu_step("pscom_close_socket");
    pscom_close_socket(sock);
    return 0;
}

/* ---- 7 (tcp): a clear-to-send fails while messages behind it wait ---- */

#define RNDV_TAG 0x524e4456u
#define RNDV_LEN (128u << 10)

static int rndv_client(tu_ctx_t *ctx)
{
    pscom_socket_t *sock    = tu_open_socket(ctx, 0, 0);
    pscom_connection_t *con = tu_client_connect(ctx, sock);
    /* over another transport than tcp: wait to be killed */
    tu_wait_signal(ctx, TU_SERVER);
    TU_ASSERT_EQ(con->type, PSCOM_CON_TYPE_TCP);
    send_drain_msgs(con, 0, DRAIN_MSGS / 2);
    unsigned char *big = (unsigned char *)tu_malloc(RNDV_LEN);
    tu_fill(big, RNDV_LEN, RNDV_TAG);
    pscom_request_t *s = post_send(con, big, RNDV_LEN, RNDV_TAG);
    TU_ASSERT_MSG(s->state & PSCOM_REQ_STATE_RENDEZVOUS_REQUEST, "not a rendezvous: [%s]",
                  tu_state_str(s->state));
    send_drain_msgs(con, DRAIN_MSGS / 2, DRAIN_MSGS / 2); /* the announcement left before them */
    wait_tcp_acked();
    tu_signal(ctx, TU_SERVER, 1);
    tu_wait_signal(ctx, TU_SERVER);
    TU_FAIL("should have been killed");
}

static int rndv_server(tu_ctx_t *ctx)
{
    pscom_socket_t *sock    = tu_open_socket(ctx, 0, 0);
    sock->ops.con_error     = tu_on_con_error;
    pscom_connection_t *con = tu_server_accept_one(ctx, sock);
    if (con->type != PSCOM_CON_TYPE_TCP) {
        tu_log("7: not over %s: the client is killed", pscom_con_type_str(con->type));
        TU_ASSERT_EQ(kill(ctx->client_pids[1], SIGKILL), 0);
        while (!tu_error_of(con)) pscom_wait_any();
        pscom_close_socket(sock);
        return 0;
    }
    tu_step("7: a rendezvous receive for the announcement in the middle");
    unsigned char *big = (unsigned char *)tu_malloc(RNDV_LEN);
    pscom_request_t *r = pscom_request_create(sizeof(uint32_t), sizeof(uint32_t));
    uint32_t tag       = RNDV_TAG;
    memcpy((void *)r->user, &tag, sizeof(tag));
    r->connection      = con;
    r->socket          = sock;
    r->data            = big;
    r->data_len        = RNDV_LEN;
    r->xheader_len     = sizeof(uint32_t);
    r->ops.recv_accept = tu_accept_tag;
    pscom_post_recv(r);
    /* no pscom progress from here until the client is gone */
    tu_signal(ctx, 1, 1);
    TU_ASSERT_EQ(tu_wait_signal(ctx, 1), 1);
    /* bytes it never reads: its death resets the connection, and our
     * clear-to-send then fails at once */
    unsigned char small[64];
    memset(small, 1, sizeof(small));
    pscom_request_t *s = post_send(con, small, sizeof(small), 9);
    TU_ASSERT_MSG(pscom_req_is_done(s), "64 bytes not written at once: [%s]",
                  tu_state_str(s->state));
    pscom_request_free(s);
    TU_ASSERT_EQ(kill(ctx->client_pids[1], SIGKILL), 0);
    wait_dead(ctx->client_pids[1]);

    tu_step("7: the announcement matches, its clear-to-send fails");
    pscom_wait(r);
    TU_ASSERT_MSG((r->state & PSCOM_REQ_STATE_ERROR) && !pscom_req_successful(r),
                  "rendezvous receive from a dead peer: [%s]", tu_state_str(r->state));
    pscom_request_free(r);
    free(big);
    tu_step("7: the messages around the announcement");
    TU_ASSERT_EQ(recv_drain_msgs(con)->op, PSCOM_OP_WRITE);
    pscom_close_socket(sock);
    return 0;
}

int main(void)
{
    tu_opts_t opts;
    memset(&opts, 0, sizeof(opts));
    opts.killed_must_mask = (1u << 1) | (1u << 2) | (1u << 3) | (1u << 4) | (1u << 5) | (1u << 6);
    if (tu_run("peer_killed", 6, server, client, &opts)) return 1;
    setenv("PSP_TCP_RENDEZVOUS", "65536", 1); /* the children call pscom_init after fork */
    opts.killed_must_mask = 1u << 1;
    return tu_run("peer_killed_rndv", 1, rndv_server, rndv_client, &opts);
}
