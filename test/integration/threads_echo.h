/*
 * threads_echo.h - what the threaded tests (itest_threads,
 * itest_threads_conns) share: their message header and the server, which
 * echoes every ping with any-source receives in threaded mode until it has
 * seen `byes` goodbyes (closing each connection with its goodbye, if
 * close_on_bye).
 */
#ifndef THREADS_ECHO_H
#define THREADS_ECHO_H

#include "pscom_testutil.h"

#include <stdlib.h>
#include <string.h>

#define TAG_BYE  0xB7EB7Eu
#define TAG_PING 0x50494E47u

typedef struct xh {
    uint32_t tag;
    uint32_t thread;
    uint32_t round;
} xh_t;

static inline int threads_echo_server(tu_ctx_t *ctx, size_t maxlen, int byes_expected,
                                      int close_on_bye)
{
    TU_ASSERT_OK(pscom_init_thread(PSCOM_VERSION));
    pscom_socket_t *sock = tu_open_socket(ctx, 0, 0);
    tu_server_listen(ctx, sock);
    char *buf            = tu_malloc(maxlen);
    pscom_request_t *req = pscom_request_create(sizeof(xh_t), 0);
    int byes             = 0;
    while (byes < byes_expected) {
        req->connection  = NULL;
        req->socket      = sock;
        req->data        = buf;
        req->data_len    = maxlen;
        req->xheader_len = sizeof(xh_t);
        pscom_post_recv(req);
        pscom_wait(req);
        TU_ASSERT_SUCCESSFUL(req);
        xh_t xh;
        memcpy(&xh, &req->xheader, sizeof(xh));
        if (xh.tag == TU_TAG_HELLO) continue;
        if (xh.tag == TAG_BYE) {
            byes++;
            if (close_on_bye) pscom_close_connection(req->connection);
            continue;
        }
        TU_ASSERT_EQ(xh.tag, TAG_PING);
        pscom_send(req->connection, &xh, sizeof(xh), buf, req->header.data_len);
    }
    pscom_request_free(req);
    free(buf);
    pscom_close_socket(sock);
    return 0;
}

#endif /* THREADS_ECHO_H */
