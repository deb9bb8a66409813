/*
 * itest_loopback: connecting a socket to itself (spec 1.3 pscom_connect,
 * 3.7 #8, 5.7 loopback, 5.12 #8). Single process.
 *
 *  - pscom_open_connection gives CLOSED/NONE, not yet listed;
 *  - pscom_connect(DIRECT) to the socket's own endpoint string returns
 *    SUCCESS, type LOOP, state RW, con_accept is called synchronously on
 *    the very same object; the connection is listed by
 *    pscom_get_next_connection;
 *  - a send is delivered into the posted receive during pscom_post_send;
 *    a receive posted after the send completes inside pscom_post_recv;
 *  - sizes 0 B .. 1 MiB with xheaders, pscom_send/pscom_recv_from;
 *  - a NULL endpoint string, ONDEMAND and even no flags also give LOOP
 *    connections (one con_accept each); messages stay on their connection.
 *
 * loopback_rndv_unreceived (PSP_RENDEZVOUS=1024): a rendezvous send that
 * no receive takes, then pscom_close_connection() resp. pscom_close_socket()
 * without a wait before. Spec 5.7 (local close): the unexpected messages
 * are dropped (its announcement among them) and the send ends with ERROR;
 * both closes return. Until 2026-11-29 the close held the EOF back for the
 * send's data, which no receive would ever ask for: pscom_wait() on the
 * send and pscom_close_socket() hung.
 */
#include "pscom_testutil.h"

#include <stdlib.h>
#include <string.h>

#define MAX_XH 64

static pscom_connection_t *accepted[8];
static int naccepted;

static void on_accept(pscom_connection_t *con)
{
    if (naccepted < 8) accepted[naccepted] = con;
    naccepted++;
}

static pscom_request_t *make_send(pscom_connection_t *con, void *data, size_t len,
                                  size_t xlen, uint32_t seed)
{
    unsigned char xh[MAX_XH];
    pscom_request_t *req = pscom_request_create(MAX_XH, 0);
    TU_ASSERT_NOT_NULL(req);
    tu_fill(data, len, seed);
    tu_fill(xh, xlen, ~seed);
    pscom_req_prepare(req, con, data, len, xh, xlen);
    return req;
}

static void check_recv(pscom_request_t *req, pscom_connection_t *con,
                       const void *buf, size_t len, size_t xlen, uint32_t seed)
{
    TU_ASSERT_SUCCESSFUL(req);
    TU_ASSERT_PTR_EQ(req->connection, con);
    TU_ASSERT_EQ(req->header.data_len, len);
    TU_ASSERT_EQ(req->header.xheader_len, xlen);
    TU_ASSERT_PATTERN(buf, len, seed);
    TU_ASSERT_PATTERN((const void *)&req->xheader, xlen, ~seed);
}

/* one message, receive posted first or second */
static void exchange(pscom_connection_t *con, size_t len, size_t xlen,
                     uint32_t seed, int recv_first)
{
    unsigned char *sbuf  = (unsigned char *)tu_malloc(len);
    unsigned char *rbuf  = (unsigned char *)tu_malloc(len);
    pscom_request_t *s   = make_send(con, sbuf, len, xlen, seed);
    pscom_request_t *r   = tu_make_recv(con, rbuf, len, MAX_XH);
    if (recv_first) {
        pscom_post_recv(r);
        TU_ASSERT(!pscom_req_is_done(r));
        pscom_post_send(s);
        TU_ASSERT_MSG(pscom_req_is_done(r),
                      "loopback: message (len %zu) not delivered during "
                      "pscom_post_send (spec 5.7): [%s]",
                      len, tu_state_str(r->state));
    } else {
        pscom_post_send(s);
        pscom_post_recv(r);
        TU_ASSERT_MSG(pscom_req_is_done(r),
                      "loopback: receive posted after the send (len %zu) did "
                      "not complete in pscom_post_recv: [%s]",
                      len, tu_state_str(r->state));
    }
    pscom_wait(s);
    TU_ASSERT_SUCCESSFUL(s);
    check_recv(r, con, rbuf, len, xlen, seed);
    pscom_request_free(s);
    pscom_request_free(r);
    free(sbuf);
    free(rbuf);
}

static int server(tu_ctx_t *ctx)
{
    pscom_socket_t *sock = tu_open_socket(ctx, 0, 0);
    sock->ops.con_accept = on_accept;
    tu_server_listen(ctx, sock);

    pscom_connection_t *con = pscom_open_connection(sock);
    TU_ASSERT_NOT_NULL(con);
    TU_ASSERT_EQ(con->state, PSCOM_CON_STATE_CLOSED);
    TU_ASSERT_EQ(con->type, PSCOM_CON_TYPE_NONE);
    TU_ASSERT_PTR_EQ(con->socket, sock);
    TU_ASSERT_NULL(pscom_get_next_connection(sock, NULL));

    /* DIRECT connect to our own endpoint */
    TU_ASSERT_OK(pscom_connect(con, ctx->ep, 0, PSCOM_CON_FLAG_DIRECT));
    TU_ASSERT_EQ(con->type, PSCOM_CON_TYPE_LOOP);
    TU_ASSERT_STR_EQ(pscom_con_type_str(con->type), "loop");
    TU_ASSERT_EQ(con->state, PSCOM_CON_STATE_RW);
    TU_ASSERT_EQ(naccepted, 1);
    TU_ASSERT_PTR_EQ(accepted[0], con);
    TU_ASSERT_PTR_EQ(pscom_get_next_connection(sock, NULL), con);
    TU_ASSERT_NULL(pscom_get_next_connection(sock, con));

    /* sizes, both orders */
    static const size_t lens[] = {0, 1, 7, 8, 100, 4095, 4096, 65537, 1u << 20};
    static const size_t xlens[] = {0, 1, 8, 33, 64};
    for (size_t i = 0; i < sizeof(lens) / sizeof(lens[0]); i++) {
        for (int order = 0; order < 2; order++) {
            exchange(con, lens[i], xlens[(i + (size_t)order) % 5],
                     (uint32_t)(i * 2 + (size_t)order), order == 0);
        }
    }

    /* pscom_send (copying) and blocking pscom_recv_from */
    {
        unsigned char data[300], got[300], xh[12], gotxh[12];
        tu_fill(data, sizeof(data), 77);
        tu_fill(xh, sizeof(xh), 78);
        pscom_send(con, xh, sizeof(xh), data, sizeof(data));
        memset(data, 0, sizeof(data));
        TU_ASSERT_OK(pscom_recv_from(con, gotxh, sizeof(gotxh), got, sizeof(got)));
        TU_ASSERT_PATTERN(got, sizeof(got), 77);
        TU_ASSERT_PATTERN(gotxh, sizeof(gotxh), 78);
    }

    /* NULL endpoint string, ONDEMAND, no flags: all loopback */
    pscom_connection_t *con2 = pscom_open_connection(sock);
    TU_ASSERT_OK(pscom_connect(con2, NULL, 0, PSCOM_CON_FLAG_DIRECT));
    TU_ASSERT_EQ(con2->type, PSCOM_CON_TYPE_LOOP);
    TU_ASSERT_EQ(naccepted, 2);
    TU_ASSERT_PTR_EQ(accepted[1], con2);
    pscom_connection_t *con3 = pscom_open_connection(sock);
    TU_ASSERT_OK(pscom_connect(con3, ctx->ep, 0, PSCOM_CON_FLAG_ONDEMAND));
    TU_ASSERT_EQ(con3->type, PSCOM_CON_TYPE_LOOP);
    TU_ASSERT_EQ(naccepted, 3);
    TU_ASSERT_PTR_EQ(accepted[2], con3);
    pscom_connection_t *con4 = pscom_open_connection(sock);
    TU_ASSERT_OK(pscom_connect(con4, ctx->ep, 0, 0));
    TU_ASSERT_EQ(con4->type, PSCOM_CON_TYPE_LOOP);
    TU_ASSERT_EQ(naccepted, 4);

    /* all four are listed, each once */
    int seen[4] = {0, 0, 0, 0};
    int count   = 0;
    for (pscom_connection_t *c = pscom_get_next_connection(sock, NULL); c;
         c                     = pscom_get_next_connection(sock, c)) {
        count++;
        TU_ASSERT_LE(count, 4);
        if (c == con) seen[0]++;
        if (c == con2) seen[1]++;
        if (c == con3) seen[2]++;
        if (c == con4) seen[3]++;
    }
    TU_ASSERT_EQ(count, 4);
    for (int i = 0; i < 4; i++) TU_ASSERT_EQ(seen[i], 1);

    /* a message sent on con2 is not received on con */
    {
        unsigned char b1[16], b2[16];
        pscom_request_t *r1 = tu_make_recv(con, b1, sizeof(b1), MAX_XH);
        pscom_post_recv(r1);
        exchange(con2, 16, 8, 99, 1);
        exchange(con3, 10, 4, 98, 0);
        TU_ASSERT(!pscom_req_is_done(r1));
        pscom_request_t *s = make_send(con, b2, sizeof(b2), 0, 97);
        pscom_post_send(s);
        TU_ASSERT(pscom_req_is_done(r1));
        pscom_wait(s);
        check_recv(r1, con, b1, sizeof(b1), 0, 97);
        pscom_request_free(r1);
        pscom_request_free(s);
    }

    pscom_close_connection(con4);
    pscom_close_connection(con3);
    pscom_close_connection(con2);
    pscom_close_connection(con);
    pscom_close_socket(sock);

    /* port -1 (the endpoint of a socket that does not listen): loopback,
     * on a socket that does not listen either (spec 1.3; until 2026-11-29
     * a malformed endpoint) */
    pscom_socket_t *quiet = tu_open_socket(ctx, 0, 0);
    pscom_connection_t *c5 = pscom_open_connection(quiet);
    TU_ASSERT_OK(pscom_connect(c5, "127.0.0.1:-1@x", 0, PSCOM_CON_FLAG_DIRECT));
    TU_ASSERT_EQ(c5->type, PSCOM_CON_TYPE_LOOP);
    exchange(c5, 100, 8, 96, 1);
    pscom_close_connection(c5);
    pscom_close_socket(quiet);
    return 0;
}

/* A loopback connection with a 4 KiB rendezvous send no receive takes. */
static pscom_request_t *unreceived_send(pscom_socket_t *sock, unsigned char *buf, size_t len)
{
    pscom_connection_t *con = pscom_open_connection(sock);
    TU_ASSERT_NOT_NULL(con);
    TU_ASSERT_OK(pscom_connect(con, NULL, 0, PSCOM_CON_FLAG_DIRECT));
    TU_ASSERT_EQ(con->type, PSCOM_CON_TYPE_LOOP);
    pscom_request_t *s = make_send(con, buf, len, 8, 55);
    pscom_post_send(s);
    TU_ASSERT_STATE_HAS(s->state, PSCOM_REQ_STATE_RENDEZVOUS_REQUEST);
    TU_ASSERT(!pscom_req_is_done(s)); /* its announcement waits for a receive */
    return s;
}

static int rndv_unreceived(tu_ctx_t *ctx)
{
    static unsigned char buf[4096];
    pscom_socket_t *sock = tu_open_socket(ctx, 0, 0);

    tu_step("close the connection");
    pscom_request_t *s = unreceived_send(sock, buf, sizeof(buf));
    pscom_close_connection(s->connection);
    pscom_wait(s);
    TU_ASSERT_STATE_HAS(s->state, PSCOM_REQ_STATE_ERROR);
    pscom_request_free(s);

    tu_step("close the socket");
    s = unreceived_send(sock, buf, sizeof(buf));
    pscom_close_socket(sock);
    pscom_wait(s);
    TU_ASSERT_STATE_HAS(s->state, PSCOM_REQ_STATE_ERROR);
    pscom_request_free(s);
    return 0;
}

int main(void)
{
    if (tu_run("loopback", 0, server, NULL, NULL)) return 1;
    setenv("PSP_RENDEZVOUS", "1024", 1);
    tu_opts_t opts = {.timeout = 20};
    return tu_run("loopback_rndv_unreceived", 0, rndv_unreceived, NULL, &opts);
}
