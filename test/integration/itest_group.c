/*
 * itest_group: groups, broadcast and barrier (spec 1.8) among 5
 * processes connected all-to-all on demand (self through loopback).
 * Every member is root once for pscom_bcast (xheader + data checked) and
 * once for pscom_post_bcast (io_done runs before it returns); barriers in
 * between must keep everybody in step: a member that passed barrier k has
 * seen every member's message sent before barrier k.
 */
#include "pscom_testutil.h"


#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define N     5
#define GID   42
#define DLEN  100000
#define XLEN  12

static int io_done_ran;
static void on_done(pscom_request_t *req)
{
    io_done_ran++;
}

static void member(int me, int to_parent, int from_parent)
{
    TU_ASSERT_OK(pscom_init(PSCOM_VERSION));
    pscom_socket_t *sock = pscom_open_socket(0, 0, me, PSCOM_SOCK_FLAG_INTER_JOB);
    TU_ASSERT_NOT_NULL(sock);
    char name[16];
    snprintf(name, sizeof(name), "g%07d", me);
    pscom_socket_set_name(sock, name);
    TU_ASSERT_OK(pscom_listen(sock, PSCOM_ANYPORT));
    char *ep;
    TU_ASSERT_OK(pscom_socket_get_ep_str(sock, &ep));
    char line[128] = {0};
    snprintf(line, sizeof(line), "%s", ep);
    TU_ASSERT_EQ(write(to_parent, line, sizeof(line)), sizeof(line));
    char eps[N][128];
    TU_ASSERT_EQ(tu_sys_read_all(from_parent, eps, sizeof(eps)), sizeof(eps));

    pscom_connection_t *cons[N];
    for (int i = 0; i < N; i++) {
        cons[i] = pscom_open_connection(sock);
        TU_ASSERT_OK(pscom_connect(cons[i], eps[i], i, PSCOM_CON_FLAG_ONDEMAND));
    }
    TU_ASSERT_EQ(cons[me]->type, PSCOM_CON_TYPE_LOOP);
    pscom_group_t *g = pscom_group_open(sock, GID, (uint32_t)me, N, cons);
    TU_ASSERT_NOT_NULL(g);
    TU_ASSERT_PTR_EQ(pscom_group_find(sock, GID), g);
    TU_ASSERT_NULL(pscom_group_find(sock, GID + 1));
    TU_ASSERT_EQ(pscom_group_get_id(g), GID);

    char *data = tu_malloc(DLEN);
    for (int root = 0; root < N; root++) {
        char xh[XLEN] = {0};
        if (root == me) {
            tu_fill(data, DLEN, (uint32_t)root + 100);
            snprintf(xh, sizeof(xh), "root %d", root);
        } else {
            memset(data, 0, DLEN);
        }
        pscom_bcast(g, (unsigned)root, xh, XLEN, data, DLEN);
        TU_ASSERT_PATTERN(data, DLEN, (uint32_t)root + 100);
        char want[XLEN] = {0};
        snprintf(want, sizeof(want), "root %d", root);
        TU_ASSERT_MEM_EQ(xh, want, XLEN);
        pscom_barrier(g);
    }

    /* pscom_post_bcast: blocking, io_done before it returns */
    pscom_request_t *req = pscom_request_create(sizeof(pscom_xheader_bcast_t) + 8, 0);
    for (int root = 0; root < N; root++) {
        req->socket                    = sock;
        req->xheader.bcast.group_id    = GID;
        req->xheader.bcast.bcast_root  = (uint32_t)root;
        req->xheader_len               = sizeof(pscom_xheader_bcast_t) + 8;
        req->data                      = data;
        req->data_len                  = 1000;
        req->ops.io_done               = on_done;
        if (root == me) tu_fill(data, 1000, (uint32_t)root + 7);
        int before = io_done_ran;
        pscom_post_bcast(req);
        TU_ASSERT_EQ(io_done_ran, before + 1);
        TU_ASSERT_SUCCESSFUL(req);
        TU_ASSERT_PATTERN(data, 1000, (uint32_t)root + 7);
    }
    pscom_request_free(req);
    for (int k = 0; k < 20; k++) pscom_barrier(g);
    pscom_group_close(g);
    TU_ASSERT_NULL(pscom_group_find(sock, GID));
    free(data);
    pscom_close_socket(sock);
    _exit(0);
}

int main(void)
{
    int up[2], down[N][2];
    TU_ASSERT_EQ(pipe(up), 0);
    pid_t pids[N];
    for (int i = 0; i < N; i++) {
        TU_ASSERT_EQ(pipe(down[i]), 0);
        pids[i] = fork();
        if (pids[i] == 0) {
            alarm(60);
            member(i, up[1], down[i][0]);
        }
    }
    /* collect the endpoints (in any order: each line names its socket) */
    char eps[N][128];
    for (int i = 0; i < N; i++) {
        char line[128];
        TU_ASSERT_EQ(tu_sys_read_all(up[0], line, sizeof(line)), sizeof(line));
        int rank = atoi(strchr(line, '@') + 2);
        TU_ASSERT(rank >= 0 && rank < N);
        memcpy(eps[rank], line, sizeof(line));
    }
    for (int i = 0; i < N; i++) TU_ASSERT_EQ(write(down[i][1], eps, sizeof(eps)), sizeof(eps));
    int failed = 0;
    for (int i = 0; i < N; i++) {
        int st = 0;
        tu_sys_waitpid(pids[i], &st);
        if (!WIFEXITED(st) || WEXITSTATUS(st)) {
            fprintf(stderr, "member %d failed (status 0x%x)\n", i, st);
            failed = 1;
        }
    }
    printf(failed ? "itest_group: FAILED\n" : "itest_group: 1 passed, 0 failed\n");
    return failed;
}
