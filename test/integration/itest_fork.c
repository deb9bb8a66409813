/*
 * itest_fork: a child forked after pscom_init() that ends with exit() (its
 * atexit handlers run) must leave the parent's connections alone: the
 * sockets, segments and endpoints it inherited are the parent's. The
 * client connects, forks a child that calls exit(0), waits for it, and
 * only then echoes with the server; the connection must work, and the
 * client sees no con_error. (Until 2026-11-29 the child's exit closed
 * every socket of the copy: it sent the parent's peer an EOF over the
 * shared TCP socket, or took down shared segments and endpoints.)
 */
#include "pscom_testutil.h"

#include <sys/wait.h>
#include <unistd.h>

static int server(tu_ctx_t *ctx)
{
    pscom_socket_t *sock    = tu_open_socket(ctx, 0, 0);
    sock->ops.con_error     = tu_on_con_error;
    pscom_connection_t *con = tu_server_accept_one(ctx, sock);
    tu_echo_server(con, 17); /* (the client's EOF may come before its close: no check) */
    pscom_close_socket(sock);
    return 0;
}

static int client(tu_ctx_t *ctx)
{
    pscom_socket_t *sock    = tu_open_socket(ctx, 0, 0);
    sock->ops.con_error     = tu_on_con_error;
    pscom_connection_t *con = tu_client_connect(ctx, sock);
    pid_t pid               = fork();
    TU_ASSERT_GE(pid, 0);
    if (pid == 0) exit(0); /* the atexit handlers of the copy run */
    int status;
    TU_ASSERT_EQ(waitpid(pid, &status, 0), pid);
    TU_ASSERT_MSG(WIFEXITED(status) && WEXITSTATUS(status) == 0,
                  "the forked child did not exit cleanly (status 0x%x)", status);
    tu_echo_client(con, 17);
    TU_ASSERT_MSG(tu_nerrs == 0, "con_error on the client (op %d, err %d)", tu_errs[0].op,
                  tu_errs[0].err);
    pscom_close_socket(sock);
    return 0;
}

int main(void)
{
    return tu_run("fork", 1, server, client, NULL);
}
