/*
 * test_util.c - node id (PSP_NETWORK) and the public misc helpers
 * pscom_writeall/readall, pscom_atoport/atoaddr and
 * pscom_ascii_to_sockaddr_in (lib/pscom/pscom_util.c).
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "pscom.h"
#include "pscom_log.h"
#include "pscom_util.h"

#define LOOPBACK_HOST 0x7f000001u

static int has_loopback_if(void)
{
    struct ifaddrs *ifs, *i;
    int found = 0;

    if (getifaddrs(&ifs) != 0) return 0;
    for (i = ifs; i; i = i->ifa_next) {
        if (i->ifa_addr && i->ifa_addr->sa_family == AF_INET &&
            ntohl(((struct sockaddr_in *)i->ifa_addr)->sin_addr.s_addr) == LOOPBACK_HOST) {
            found = 1;
        }
    }
    freeifaddrs(ifs);
    return found;
}

/* ---------------------------------------------------------------------- */
/* node id                                                                */
/* ---------------------------------------------------------------------- */

static void test_nodeid_network(void **state)
{
    int fallback;

    pscom_log_level = 0; /* the no-match warning is expected */
    fallback = pscom_nodeid_lookup(NULL);
    assert_int_not_equal(fallback, 0);
    assert_int_equal(pscom_nodeid_lookup(""), fallback);
    if (!has_loopback_if()) skip();

    assert_int_equal(pscom_nodeid_lookup("127.0.0.1"), (int)LOOPBACK_HOST);
    assert_int_equal(pscom_nodeid_lookup("127.0.0.0/8"), (int)LOOPBACK_HOST);
    assert_int_equal(pscom_nodeid_lookup("127.0.0.0"), (int)LOOPBACK_HOST);
    assert_int_equal(pscom_nodeid_lookup("localhost"), (int)LOOPBACK_HOST);
    /* a list: the first token that matches wins; bad tokens are skipped */
    assert_int_equal(pscom_nodeid_lookup("192.0.2.77/32, 127.0.0.1"), (int)LOOPBACK_HOST);
    assert_int_equal(pscom_nodeid_lookup("1.2.3.4/99 127.0.0.0/8"), (int)LOOPBACK_HOST);
    /* nothing matches (TEST-NET-1): the host name's address */
    assert_int_equal(pscom_nodeid_lookup("192.0.2.77/32"), fallback);
    assert_int_equal(pscom_nodeid_lookup("/,,  /8"), fallback);
    pscom_log_level = 1;
}

static void test_nodeid_cached(void **state)
{
    int first = pscom_nodeid_compute("127.0.0.1");

    assert_int_not_equal(first, 0);
    assert_int_equal(pscom_nodeid_compute("192.0.2.77/32"), first);
    assert_int_equal(pscom_nodeid_compute(NULL), first);
}

/* ---------------------------------------------------------------------- */
/* writeall / readall                                                     */
/* ---------------------------------------------------------------------- */

#define BIG (1024 * 1024)

struct reader {
    int fd;
    char *buf;
    ssize_t got;
};

static void *reader_thread(void *arg)
{
    struct reader *r = arg;
    r->got = pscom_readall(r->fd, r->buf, BIG + 100); /* asks for more than sent */
    return NULL;
}

/* Given a non-blocking pipe much smaller than the data, writeall retries on
 * EAGAIN until all is written; readall returns the bytes read before EOF. */
static void test_writeall_readall(void **state)
{
    int fds[2];
    char *data = malloc(BIG);
    struct reader r = {.buf = malloc(BIG + 100)};
    pthread_t t;

    assert_non_null(data);
    assert_non_null(r.buf);
    for (size_t i = 0; i < BIG; i++) data[i] = (char)(i * 7 + i / 251);
    assert_int_equal(pipe(fds), 0);
    assert_int_equal(fcntl(fds[1], F_SETFL, O_NONBLOCK), 0);
    r.fd = fds[0];
    assert_int_equal(pthread_create(&t, NULL, reader_thread, &r), 0);

    assert_int_equal(pscom_writeall(fds[1], data, BIG), BIG);
    close(fds[1]);
    pthread_join(t, NULL);
    assert_int_equal(r.got, BIG);
    assert_memory_equal(r.buf, data, BIG);
    close(fds[0]);
    free(data);
    free(r.buf);
}

static void test_writeall_readall_errors(void **state)
{
    int fds[2];
    char buf[8];

    errno = 0;
    assert_int_equal(pscom_writeall(-1, "x", 1), -1);
    assert_int_equal(errno, EBADF);
    assert_int_equal(pscom_readall(-1, buf, sizeof(buf)), -1);
    assert_int_equal(errno, EBADF);

    assert_int_equal(pipe(fds), 0);
    assert_int_equal(pscom_writeall(fds[1], "abc", 3), 3);
    assert_int_equal(pscom_writeall(fds[1], "", 0), 0);
    close(fds[1]);
    assert_int_equal(pscom_readall(fds[0], buf, sizeof(buf)), 3); /* short at EOF */
    assert_memory_equal(buf, "abc", 3);
    assert_int_equal(pscom_readall(fds[0], buf, sizeof(buf)), 0);
    close(fds[0]);
}

/* ---------------------------------------------------------------------- */
/* ports and addresses                                                    */
/* ---------------------------------------------------------------------- */

static void assert_port_reject(const char *service)
{
    errno = 0;
    assert_int_equal(pscom_atoport(service, "tcp"), -1);
    assert_int_equal(errno, EINVAL);
}

static void test_atoport(void **state)
{
    struct servent *se = getservbyname("ssh", "tcp");
    int ssh_port = se ? se->s_port : -1; /* se points to static storage */

    assert_int_equal(pscom_atoport("80", "tcp"), htons(80));
    assert_int_equal(pscom_atoport("7100", NULL), htons(7100));
    assert_int_equal(pscom_atoport("65535", "tcp"), htons(65535));
    assert_int_equal(pscom_atoport("0", "tcp"), 0);
    assert_int_equal(pscom_atoport("", "tcp"), 0);
    assert_int_equal(pscom_atoport(NULL, "tcp"), 0);
    assert_port_reject("65536");
    assert_port_reject("-1");
    assert_port_reject("80x");
    assert_port_reject("no-such-service-pscom");
    if (ssh_port != -1) assert_int_equal(pscom_atoport("ssh", "tcp"), ssh_port);
}

static void test_atoaddr(void **state)
{
    struct in_addr a;

    assert_int_equal(pscom_atoaddr("10.1.2.3", &a), 0);
    assert_int_equal(a.s_addr, htonl(0x0a010203));
    assert_int_equal(pscom_atoaddr("localhost", &a), 0);
    assert_int_equal(a.s_addr, htonl(LOOPBACK_HOST));
    assert_int_equal(pscom_atoaddr(NULL, &a), 0);
    assert_int_equal(a.s_addr, INADDR_LOOPBACK); /* stored without htonl */
    assert_int_equal(pscom_atoaddr("1.2.3.4", NULL), 0);

    a.s_addr = 0x12345678;
    errno = 0;
    assert_int_equal(pscom_atoaddr("1.2.3.256", &a), -1);
    assert_int_equal(errno, EINVAL);
    assert_int_equal(pscom_atoaddr("", &a), -1);
    assert_int_equal(pscom_atoaddr("no-such-host.invalid", &a), -1);
    assert_int_equal(a.s_addr, 0x12345678); /* untouched */
}

static void test_ascii_to_sockaddr_in(void **state)
{
    struct sockaddr_in sa;

    memset(&sa, 0xff, sizeof(sa));
    assert_int_equal(pscom_ascii_to_sockaddr_in("10.0.0.9", "5000", "tcp", &sa), 0);
    assert_int_equal(sa.sin_family, AF_INET);
    assert_int_equal(sa.sin_port, htons(5000));
    assert_int_equal(sa.sin_addr.s_addr, htonl(0x0a000009));

    assert_int_equal(pscom_ascii_to_sockaddr_in("localhost", NULL, "tcp", NULL), 0);
    assert_int_equal(pscom_ascii_to_sockaddr_in("10.0.0.9", "99999", "tcp", &sa), -1);
    assert_int_equal(pscom_ascii_to_sockaddr_in("10.0.0.300", "80", "tcp", &sa), -1);
    assert_int_equal(sa.sin_port, htons(5000)); /* untouched on failure */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_nodeid_network),
        cmocka_unit_test(test_nodeid_cached),
        cmocka_unit_test(test_writeall_readall),
        cmocka_unit_test(test_writeall_readall_errors),
        cmocka_unit_test(test_atoport),
        cmocka_unit_test(test_atoaddr),
        cmocka_unit_test(test_ascii_to_sockaddr_in),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
