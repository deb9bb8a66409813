/*
 * itest_backlog: pscom_listen() uses PSP_TCP_BACKLOG as the listen backlog
 * (the kernel caps it at net.core.somaxconn). The backlog of a listening
 * TCP socket is what the kernel's socket diagnostics (sock_diag, what
 * `ss -lt` shows as Send-Q) report as idiag_wqueue; this test asks them
 * for the socket pscom listens on.
 *
 *   default           262144 -> somaxconn
 *   PSP_TCP_BACKLOG=7 7
 *
 * Each case runs in a child process (the environment is read at init).
 */
#define _GNU_SOURCE
#include "pscom_testutil.h"

#include <errno.h>
#include <linux/inet_diag.h>
#include <linux/netlink.h>
#include <linux/sock_diag.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

/* The backlog of the IPv4 TCP listener on port, or -1 if not found. */
static long listen_backlog(int port)
{
    int fd = socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG);
    TU_ASSERT_MSG(fd >= 0, "netlink socket: %s", strerror(errno));
    struct {
        struct nlmsghdr nlh;
        struct inet_diag_req_v2 req;
    } q = {
        .nlh = {.nlmsg_len = sizeof(q), .nlmsg_type = SOCK_DIAG_BY_FAMILY,
                .nlmsg_flags = NLM_F_REQUEST | NLM_F_DUMP},
        .req = {.sdiag_family = AF_INET, .sdiag_protocol = IPPROTO_TCP,
                .idiag_states = 1u << 10 /* TCP_LISTEN */},
    };
    TU_ASSERT_EQ(send(fd, &q, sizeof(q), 0), (ssize_t)sizeof(q));
    long found = -1;
    char buf[16384] __attribute__((aligned(4)));
    for (int done = 0; !done;) {
        ssize_t n = recv(fd, buf, sizeof(buf), 0);
        TU_ASSERT_MSG(n > 0, "netlink recv: %s", strerror(errno));
        for (struct nlmsghdr *h = (struct nlmsghdr *)buf; NLMSG_OK(h, (size_t)n);
             h = NLMSG_NEXT(h, n)) {
            if (h->nlmsg_type == NLMSG_DONE || h->nlmsg_type == NLMSG_ERROR) {
                done = 1;
                break;
            }
            struct inet_diag_msg *m = NLMSG_DATA(h);
            if (ntohs(m->id.idiag_sport) == port) found = m->idiag_wqueue;
        }
    }
    close(fd);
    return found;
}

static long read_somaxconn(void)
{
    FILE *f = fopen("/proc/sys/net/core/somaxconn", "r");
    TU_ASSERT_NOT_NULL(f);
    long v = 0;
    TU_ASSERT_EQ(fscanf(f, "%ld", &v), 1);
    fclose(f);
    return v;
}

/* In a child: set PSP_TCP_BACKLOG (or not), listen, return the backlog
 * the kernel reports. */
static long backlog_with(const char *value)
{
    int p[2];
    TU_ASSERT_EQ(pipe(p), 0);
    pid_t pid = fork();
    TU_ASSERT(pid >= 0);
    if (!pid) {
        close(p[0]);
        if (value) {
            setenv("PSP_TCP_BACKLOG", value, 1);
        } else {
            unsetenv("PSP_TCP_BACKLOG");
        }
        long b = -2;
        if (pscom_init(PSCOM_VERSION) == PSCOM_SUCCESS) {
            pscom_socket_t *s = pscom_open_socket(0, 0, 0, PSCOM_SOCK_FLAG_INTER_JOB);
            if (s && pscom_listen(s, PSCOM_ANYPORT) == PSCOM_SUCCESS)
                b = listen_backlog(s->listen_portno);
            if (s) pscom_close_socket(s);
        }
        _exit(write(p[1], &b, sizeof(b)) == sizeof(b) ? 0 : 1);
    }
    close(p[1]);
    long b = -3;
    TU_ASSERT_EQ(tu_sys_read_all(p[0], &b, sizeof(b)), (ssize_t)sizeof(b));
    close(p[0]);
    int st;
    TU_ASSERT_EQ(tu_sys_waitpid(pid, &st), pid);
    TU_ASSERT(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    return b;
}

int main(void)
{
    long somaxconn = read_somaxconn();
    long def       = backlog_with(NULL);
    long seven     = backlog_with("7");
    printf("backlog: default %ld (somaxconn %ld), PSP_TCP_BACKLOG=7: %ld\n", def, somaxconn,
           seven);
    TU_ASSERT_EQ(def, somaxconn < 262144 ? somaxconn : 262144);
    TU_ASSERT_EQ(seven, 7);
    return 0;
}
