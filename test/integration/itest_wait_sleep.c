/*
 * itest_wait_sleep.c - a blocking wait spins only for a bounded time and
 * then sleeps in the kernel (issue: "must not burn a core forever"), over
 * every transport: each side blocks in a receive for PAUSE_MS while the
 * other side holds its message back, and the CPU time it used meanwhile
 * (getrusage) must stay far below the wall time. A wait that kept
 * spinning would be at 100 %. The message must still wake the sleeper.
 *
 * The pause only creates a blocked period; nothing is synchronised by it
 * (the order of events is fixed by the messages themselves), and only the
 * CPU/wall ratio is checked, never a duration.
 */
#include <stdint.h>
#include <sys/resource.h>
#include <time.h>

#include "pscom_testutil.h"

#define TAG_END  0x454e4421u
#define PAUSE_MS 300

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static double cpu_s(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru); /* all threads (a transport's own too) */
    return (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
           (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1e-6;
}

/* Receive one uint32_t in a blocking call and check how much CPU the
 * blocked time cost. */
static void blocked_recv(pscom_connection_t *con, uint32_t expect)
{
    uint32_t v = 0;
    double c0 = cpu_s(), t0 = now_s();
    TU_ASSERT_OK(pscom_recv_from(con, NULL, 0, &v, sizeof(v)));
    double wall = now_s() - t0, cpu = cpu_s() - c0;
    TU_ASSERT_EQ(v, expect);
    tu_log("blocked %.0f ms, cpu %.1f %%", wall * 1e3, 100 * cpu / wall);
    /* generous for loaded machines and sanitizer builds; spinning is 100 % */
    TU_ASSERT_MSG(wall < PAUSE_MS * 1e-3 / 2 || cpu / wall < 0.25,
                  "cpu %.1f %% of %.0f ms while blocked", 100 * cpu / wall, wall * 1e3);
}

static int server(tu_ctx_t *ctx)
{
    pscom_socket_t *sock = tu_open_socket(ctx, 0, 0);
    pscom_connection_t *con = tu_server_accept_one(ctx, sock);
    blocked_recv(con, 1); /* the client holds its message back */
    tu_pause_ms(PAUSE_MS);       /* now the client blocks */
    uint32_t v = 2;
    pscom_send(con, NULL, 0, &v, sizeof(v));
    tu_wait_tag(con, NULL, TAG_END);
    pscom_close_connection(con);
    pscom_close_socket(sock);
    return 0;
}

static int client(tu_ctx_t *ctx)
{
    pscom_socket_t *sock    = tu_open_socket(ctx, 0, 0);
    pscom_connection_t *con = tu_client_connect(ctx, sock);
    tu_pause_ms(PAUSE_MS); /* the server blocks meanwhile */
    uint32_t v = 1;
    pscom_send(con, NULL, 0, &v, sizeof(v));
    blocked_recv(con, 2);
    tu_send_tag(con, TAG_END);
    pscom_close_connection(con);
    pscom_close_socket(sock);
    return 0;
}

int main(void)
{
    return tu_run("wait_sleep", 1, server, client, NULL);
}
