/*
 * mixed_pp.c - an 8 B ping-pong over one transport while the processes
 * also hold an idle connection over another, as in a job whose processes
 * talk over shared memory within a node and over tcp across nodes.
 *
 *   mixed_pp shm <other> [round trips]   A <-> B over shm; with other=1 both
 *                                        also hold a tcp connection to C
 *   mixed_pp tcp <other> [round trips]   A <-> C over tcp; with other=1 A also
 *                                        holds a shm connection to B
 *
 * A answers (cpu 1), the pinger (B or C) runs on cpu 0, the idle peer
 * sleeps in read() (a third busy process would share a cpu). C runs with
 * PSP_SHM=0, so that its connections are tcp. Prints
 * "mixed_pp <mode> <other> <half round trip us> <type of the ping-pong
 * connection>". Build: cc -O2 -std=gnu11 mixed_pp.c -lpscom.
 */
#define _GNU_SOURCE
#include <pscom.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define EP_LEN 256
#define WARM   2000

static double now_us(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e6 + (double)t.tv_nsec / 1e3;
}

static void pin(int cpu)
{
    cpu_set_t s;
    CPU_ZERO(&s);
    CPU_SET(cpu, &s);
    sched_setaffinity(0, sizeof(s), &s);
}

static void die(const char *what)
{
    fprintf(stderr, "mixed_pp: %s\n", what);
    exit(1);
}

static void put(int fd, const char *ep)
{
    if (write(fd, ep, EP_LEN) != EP_LEN) die("pipe write");
}

static void get(int fd, char *ep)
{
    size_t off = 0;
    while (off < EP_LEN) {
        ssize_t n = read(fd, ep + off, EP_LEN - off);
        if (n <= 0) die("pipe read");
        off += (size_t)n;
    }
}

static pscom_connection_t *accepted[4];
static int naccepted;
static void on_accept(pscom_connection_t *con)
{
    if (naccepted < 4) accepted[naccepted++] = con;
}

static pscom_socket_t *open_socket(char *ep)
{
    pscom_socket_t *s = pscom_open_socket(0, 0, PSCOM_RANK_UNDEFINED, PSCOM_SOCK_FLAG_INTER_JOB);
    if (!s) die("pscom_open_socket");
    s->ops.con_accept = on_accept;
    if (pscom_listen(s, PSCOM_ANYPORT) != PSCOM_SUCCESS) die("pscom_listen");
    char *e;
    if (pscom_socket_get_ep_str(s, &e) != PSCOM_SUCCESS) die("pscom_socket_get_ep_str");
    snprintf(ep, EP_LEN, "%s", e);
    return s;
}

static pscom_connection_t *connect_to(pscom_socket_t *s, const char *ep)
{
    pscom_connection_t *c = pscom_open_connection(s);
    if (!c || pscom_connect(c, ep, PSCOM_RANK_UNDEFINED, PSCOM_CON_FLAG_DIRECT) != PSCOM_SUCCESS)
        die("pscom_connect");
    return c;
}

int main(int argc, char **argv)
{
    if (argc < 3 || (strcmp(argv[1], "shm") && strcmp(argv[1], "tcp"))) {
        fprintf(stderr, "usage: %s shm|tcp 0|1 [round trips]\n", argv[0]);
        return 2;
    }
    int tcp_pp = !strcmp(argv[1], "tcp"), other = atoi(argv[2]);
    long iters = argc > 3 ? atol(argv[3]) : (tcp_pp ? 20000 : 200000);
    int to_b[2], to_c[2], done[2]; /* endpoints for B and C; "finished" for the idle peer */
    if (pipe(to_b) || pipe(to_c) || pipe(done)) die("pipe");
    int has_b = !tcp_pp || other, has_c = tcp_pp || other;
    int pinger_is_b = !tcp_pp;
    char ep[EP_LEN], ep_a[EP_LEN];

    pid_t pid[2] = {0, 0};
    for (int role = 0; role < 2; role++) { /* 0: B, 1: C */
        if (!(role ? has_c : has_b)) continue;
        if ((pid[role] = fork()) < 0) die("fork");
        if (pid[role]) continue;
        int pinger = role == (pinger_is_b ? 0 : 1);
        if (role == 1) setenv("PSP_SHM", "0", 1); /* C: tcp only */
        if (pinger) pin(0);
        if (pscom_init(PSCOM_VERSION) != PSCOM_SUCCESS) die("pscom_init");
        pscom_socket_t *s = open_socket(ep);
        get(role ? to_c[0] : to_b[0], ep_a);
        int c_to_b = !tcp_pp && other;                /* shm mode: C holds tcp to B too */
        if (role == 0 && c_to_b) put(to_c[1], ep);     /* for C */
        pscom_connection_t *c = connect_to(s, ep_a);
        if (role == 1 && c_to_b) { /* the endpoint of B */
            get(to_c[0], ep_a);
            connect_to(s, ep_a);
        }
        if (!pinger) { /* idle: sleep until the pinger is done */
            char x;
            if (read(done[0], &x, 1) != 1) die("pipe read");
            return 0;
        }
        if (role == 0 && c_to_b)
            while (naccepted < 1) pscom_test_any(); /* C's connection */
        char buf[8] = {0};
        double t0 = 0;
        for (long i = -WARM; i < iters; i++) {
            if (!i) t0 = now_us();
            pscom_send(c, NULL, 0, buf, sizeof(buf));
            if (pscom_recv_from(c, NULL, 0, buf, sizeof(buf)) != PSCOM_SUCCESS) die("receive");
        }
        printf("mixed_pp %s %d %.4f %s\n", argv[1], other, (now_us() - t0) / (double)iters / 2,
               pscom_con_type_str(c->type));
        fflush(stdout);
        char x = 1;
        if (write(done[1], &x, 1) != 1) die("pipe write");
        return 0;
    }

    /* A: the responder */
    pin(1);
    if (pscom_init(PSCOM_VERSION) != PSCOM_SUCCESS) die("pscom_init");
    pscom_socket_t *s = open_socket(ep);
    if (has_c) put(to_c[1], ep);
    if (has_b) put(to_b[1], ep);
    while (naccepted < has_b + has_c) pscom_test_any();
    pscom_connection_t *c = NULL;
    for (int i = 0; i < naccepted; i++)
        if ((strcmp(pscom_con_type_str(accepted[i]->type), "tcp") == 0) == tcp_pp) c = accepted[i];
    if (!c) die("no connection of the ping-pong's type");
    char buf[8];
    for (long i = -WARM; i < iters; i++) {
        if (pscom_recv_from(c, NULL, 0, buf, sizeof(buf)) != PSCOM_SUCCESS) die("receive");
        pscom_send(c, NULL, 0, buf, sizeof(buf));
    }
    for (int role = 0; role < 2; role++)
        if (pid[role])
            while (waitpid(pid[role], NULL, WNOHANG) == 0) pscom_test_any();
    (void)s;
    return 0;
}
