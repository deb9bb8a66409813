/*
 * itest_rndv_close: closing a connection right after posting rendezvous
 * sends (PSP_RENDEZVOUS=65536). Spec 5.7 (local close): the EOF message is
 * queued after the pending sends, so the messages still arrive intact and
 * the sends complete successfully, as they do for eager messages. Four
 * 4 MiB sends and a small eager one, then pscom_close_connection() at
 * once; the receiver posts its receives before (first run) and only after
 * everything arrived (second run).
 *
 * Rendezvous sends nobody receives, and closes (spec 5.7: a local close
 * drops the connection's unexpected messages, the remaining sends end with
 * ERROR, any-source receives stay posted):
 *   rndv_close_both         both sides post a 1 MiB send the other never
 *                           receives and close (client first, the server at
 *                           once): each announcement arrives after the
 *                           receiving side's close. Both sends end with
 *                           ERROR, both sockets close.
 *   rndv_close_both_probed  the same, the server closes only once the
 *                           client's announcement is there (dropped by the
 *                           close itself).
 *   rndv_close_late_rts     the server has an any-source receive posted and
 *                           closes the connection; then the client sends by
 *                           rendezvous. Its announcement, arriving after the
 *                           close, is dropped: the receive stays posted (it
 *                           can be cancelled), the send ends with ERROR.
 *   rndv_close_late_eager   the same with a small (eager) message: dropped
 *                           too, the receive stays posted (until
 *                           2026-11-29 it took the any-source receive, of
 *                           a connection the user had closed).
 * Until 2026-11-29 the first two hung (each side kept its EOF back for
 * the data of its send, waiting for a CTS that the other, closed, never
 * sent), and in the third the late announcement took the any-source
 * receive and failed it.
 */
#include "pscom_testutil.h"

#include <stdlib.h>
#include <string.h>

#define N     (4u << 20)
#define NMSG  4
#define SMALL 100

enum { SIG_GO = 1, SIG_SENT, SIG_READY };

static int posted_late;

static int accept_small(pscom_request_t *req, pscom_connection_t *con, pscom_header_net_t *hn)
{
    (void)req;
    (void)con;
    return hn->data_len == SMALL;
}

static int server(tu_ctx_t *ctx)
{
    pscom_socket_t *sock = tu_open_socket(ctx, 0, 0);
    pscom_connection_t *con = tu_server_accept_one(ctx, sock);
    unsigned char *buf[NMSG + 1];
    pscom_request_t *r[NMSG + 1];
    for (int i = 0; i <= NMSG; i++) {
        buf[i] = tu_malloc(N);
        if (!posted_late) r[i] = tu_post_recv(con, buf[i], N, 4);
    }
    tu_signal(ctx, 1, SIG_GO);
    if (posted_late) {
        TU_ASSERT_EQ(tu_wait_signal(ctx, 1), SIG_SENT);
        /* the last (eager) message is there: all announcements arrived */
        pscom_request_t *p = pscom_request_create(4, 0);
        p->connection      = con;
        p->socket          = sock;
        p->xheader_len     = 4;
        p->ops.recv_accept = accept_small;
        pscom_probe(p);
        pscom_request_free(p);
        for (int i = 0; i <= NMSG; i++) r[i] = tu_post_recv(con, buf[i], N, 4);
    }
    for (int i = 0; i <= NMSG; i++) {
        pscom_wait(r[i]);
        TU_ASSERT_SUCCESSFUL(r[i]);
        uint32_t seq;
        memcpy(&seq, (void *)&r[i]->xheader, 4);
        TU_ASSERT_EQ(seq, i);
        TU_ASSERT_EQ(r[i]->header.data_len, i < NMSG ? N : SMALL);
        TU_ASSERT_PATTERN(buf[i], r[i]->header.data_len, 10 + (uint32_t)i);
        pscom_request_free(r[i]);
        free(buf[i]);
    }
    return 0;
}

static int client(tu_ctx_t *ctx)
{
    pscom_socket_t *sock    = tu_open_socket(ctx, 0, 0);
    pscom_connection_t *con = tu_client_connect(ctx, sock);
    unsigned char *buf[NMSG + 1];
    pscom_request_t *s[NMSG + 1];
    TU_ASSERT_EQ(tu_wait_signal(ctx, TU_SERVER), SIG_GO);
    for (uint32_t i = 0; i <= NMSG; i++) {
        size_t len = i < NMSG ? N : SMALL;
        buf[i]     = tu_malloc(len);
        tu_fill(buf[i], len, 10 + i);
        s[i] = pscom_request_create(4, 0);
        pscom_req_prepare(s[i], con, buf[i], len, &i, 4);
        pscom_post_send(s[i]);
    }
    pscom_close_connection(con); /* at once: the EOF goes after the pending sends */
    tu_signal(ctx, TU_SERVER, SIG_SENT);
    for (int i = 0; i <= NMSG; i++) {
        pscom_wait(s[i]);
        TU_ASSERT_SUCCESSFUL(s[i]);
        pscom_request_free(s[i]);
        free(buf[i]);
    }
    return 0;
}

/* ---- rendezvous sends nobody receives ------------------------------------ */

#define BIG (1u << 20)

static int probed; /* rndv_close_both_probed */

static pscom_request_t *post_big(pscom_connection_t *con, unsigned char *buf, uint32_t seq)
{
    tu_fill(buf, BIG, seq);
    pscom_request_t *s = pscom_request_create(4, 0);
    pscom_req_prepare(s, con, buf, BIG, &seq, 4);
    pscom_post_send(s);
    TU_ASSERT_STATE_HAS(s->state, PSCOM_REQ_STATE_RENDEZVOUS_REQUEST);
    return s;
}

static void expect_failed(pscom_request_t *s)
{
    pscom_wait(s);
    TU_ASSERT_STATE_HAS(s->state, PSCOM_REQ_STATE_ERROR);
    pscom_request_free(s);
}

static int both_server(tu_ctx_t *ctx)
{
    pscom_socket_t *sock    = tu_open_socket(ctx, 0, 0);
    pscom_connection_t *con = tu_server_accept_one(ctx, sock);
    unsigned char *buf      = tu_malloc(BIG);
    pscom_request_t *s      = post_big(con, buf, 1);
    tu_signal(ctx, 1, SIG_GO);
    TU_ASSERT_EQ(tu_wait_signal(ctx, 1), SIG_SENT); /* the client has closed */
    if (probed) {
        pscom_request_t *p = pscom_request_create(4, 0);
        p->connection      = con;
        p->socket          = sock;
        p->xheader_len     = 4;
        pscom_probe(p); /* the client's announcement is there */
        TU_ASSERT_EQ(p->header.data_len, BIG);
        pscom_request_free(p);
    }
    pscom_close_connection(con);
    expect_failed(s);
    pscom_close_socket(sock);
    free(buf);
    return 0;
}

static int both_client(tu_ctx_t *ctx)
{
    pscom_socket_t *sock    = tu_open_socket(ctx, 0, 0);
    pscom_connection_t *con = tu_client_connect(ctx, sock);
    unsigned char *buf      = tu_malloc(BIG);
    TU_ASSERT_EQ(tu_wait_signal(ctx, TU_SERVER), SIG_GO);
    pscom_request_t *s = post_big(con, buf, 2);
    pscom_close_connection(con);
    tu_signal(ctx, TU_SERVER, SIG_SENT);
    expect_failed(s);
    pscom_close_socket(sock);
    free(buf);
    return 0;
}

#define LATE_RTS_LOG   "rendezvous announcement after the close"
#define LATE_EAGER_LOG "data bytes after the close dropped"

static int late_eager; /* rndv_close_late_eager: a small message instead */

static int late_server(tu_ctx_t *ctx)
{
    pscom_socket_t *sock    = tu_open_socket(ctx, 0, 0);
    pscom_connection_t *con = tu_server_accept_one(ctx, sock);
    unsigned char *buf      = tu_malloc(BIG);
    pscom_request_t *r      = pscom_request_create(4, 0);
    r->socket               = sock; /* any connection of sock */
    r->data                 = buf;
    r->data_len             = BIG;
    r->xheader_len          = 4;
    pscom_post_recv(r);
    /* the client reads nothing from now on: its send goes out as if it
     * had not seen our EOF yet */
    TU_ASSERT_EQ(tu_wait_signal(ctx, 1), SIG_READY);
    pscom_close_connection(con);
    tu_signal(ctx, 1, SIG_GO); /* the client's send comes after the close */
    tu_step("wait for the late announcement");
    const char *said = late_eager ? LATE_EAGER_LOG : LATE_RTS_LOG;
    while (!pscom_req_is_done(r) && !tu_log_file_count(said)) pscom_wait_any();
    TU_ASSERT_MSG(!pscom_req_is_done(r), "the late message took the any-source receive: %s",
                  tu_state_str(r->state));
    TU_ASSERT_EQ(pscom_cancel_recv(r), 1);
    TU_ASSERT_STATE_HAS(r->state, PSCOM_REQ_STATE_CANCELED);
    pscom_request_free(r);
    TU_ASSERT_EQ(tu_wait_signal_progress(ctx, 1), SIG_SENT);
    pscom_close_socket(sock);
    free(buf);
    tu_log_file_remove();
    return 0;
}

static int late_client(tu_ctx_t *ctx)
{
    pscom_socket_t *sock    = tu_open_socket(ctx, 0, 0);
    pscom_connection_t *con = tu_client_connect(ctx, sock);
    unsigned char *buf      = tu_malloc(BIG);
    tu_signal(ctx, TU_SERVER, SIG_READY);
    TU_ASSERT_EQ(tu_wait_signal(ctx, TU_SERVER), SIG_GO);
    if (late_eager) {
        /* goes out at once; whether it then sees the server's EOF first
         * decides its state: either is right */
        pscom_request_t *e = pscom_request_create(4, 0);
        uint32_t seq       = 4;
        pscom_req_prepare(e, con, buf, SMALL, &seq, 4);
        pscom_post_send(e);
        pscom_wait(e);
        pscom_request_free(e);
    } else {
        expect_failed(post_big(con, buf, 3));
    }
    tu_signal(ctx, TU_SERVER, SIG_SENT);
    pscom_close_connection(con);
    pscom_close_socket(sock);
    free(buf);
    tu_log_file_remove();
    return 0;
}

int main(void)
{
    setenv("PSP_RENDEZVOUS", "65536", 1);
    posted_late = 0;
    if (tu_run("rndv_close_posted", 1, server, client, NULL)) return 1;
    posted_late = 1;
    if (tu_run("rndv_close_unexpected", 1, server, client, NULL)) return 1;
    tu_opts_t opts = {.timeout = 30};
    probed         = 0;
    if (tu_run("rndv_close_both", 1, both_server, both_client, &opts)) return 1;
    probed = 1;
    if (tu_run("rndv_close_both_probed", 1, both_server, both_client, &opts)) return 1;
    tu_log_files("itest_rndv_close", 4); /* the late announcement is said at debug level */
    if (tu_run("rndv_close_late_rts", 1, late_server, late_client, &opts)) return 1;
    late_eager = 1;
    if (tu_run("rndv_close_late_eager", 1, late_server, late_client, &opts)) return 1;
    return 0;
}
