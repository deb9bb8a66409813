/*
 * con_fixture.c - see con_fixture.h.
 */
#include "con_fixture.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "pscom_sock.h"

pscom_socket_t *con_fixture_open(pscom_con_t **a, pscom_con_t **b)
{
    assert_int_equal(pscom_init(PSCOM_VERSION), PSCOM_SUCCESS);
    pscom_socket_t *socket = pscom_open_socket(0, 0, 0, PSCOM_SOCK_FLAG_INTER_JOB);
    assert_non_null(socket);
    pscom_sock_t *sock = pscom_sock_from_pub(socket);
    *a                 = pscom_con_create(sock);
    *b                 = pscom_con_create(sock);
    (*a)->user_closed = (*b)->user_closed = 0;
    pscom_con_list(*a);
    pscom_con_list(*b);
    return socket;
}

int con_fixture_con_start(pscom_con_t *con, int *fd)
{
    (void)con;
    (void)fd;
    return 0;
}

void con_fixture_close(pscom_con_t *con)
{
    (void)con;
}

void con_fixture_write_all(pscom_con_t *con, void (*sink)(const void *buf, size_t len))
{
    struct iovec iov[16];
    int n;
    while ((n = pscom_write_get_iov(con, iov, 16)) > 0) {
        size_t len = 0;
        for (int i = 0; i < n; i++) {
            if (sink) sink(iov[i].iov_base, iov[i].iov_len);
            len += iov[i].iov_len;
        }
        if (pscom_write_done(con, len)) return;
    }
}
