/*
 * itest_rndv_close: closing a connection right after posting rendezvous
 * sends (PSP_RENDEZVOUS=65536). Spec 5.7 (local close): the EOF message is
 * queued after the pending sends, so the messages still arrive intact and
 * the sends complete successfully, as they do for eager messages. Four
 * 4 MiB sends and a small eager one, then pscom_close_connection() at
 * once; the receiver posts its receives before (first run) and only after
 * everything arrived (second run).
 */
#include "pscom_testutil.h"

#include <stdlib.h>
#include <string.h>

#define N     (4u << 20)
#define NMSG  4
#define SMALL 100

enum { SIG_GO = 1, SIG_SENT };

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

int main(void)
{
    setenv("PSP_RENDEZVOUS", "65536", 1);
    posted_late = 0;
    if (tu_run("rndv_close_posted", 1, server, client, NULL)) return 1;
    posted_late = 1;
    if (tu_run("rndv_close_unexpected", 1, server, client, NULL)) return 1;
    return 0;
}
