/*
 * test_misuse.c - misuse of the API is caught (spec 5.10) in every build,
 * release builds (NDEBUG) included: the process aborts with a message that
 * names the call and the rule it broke, instead of corrupting its queues.
 * Each case runs in a child process; the parent checks that it died of
 * SIGABRT and what it printed. The first case does everything right and
 * must exit normally.
 *
 * pscom_req_prepare() is inline in pscom.h and asserts the xheader length
 * in the caller's build; compiled here as a release build would (NDEBUG),
 * a too long xheader must not be copied past the request's xheader area,
 * and the send ends with ERROR.
 */
#define NDEBUG 1 /* the header's inline helpers as in a release build */
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "pscom.h"
#include "tu_sys.h"
#include "tu_text.h"

static pscom_socket_t *sock;

/* a receive that stays pending: nothing is ever sent */
static pscom_request_t *pending_recv(void)
{
    pscom_request_t *r = pscom_request_create(0, 0);
    r->socket          = sock;
    pscom_post_recv(r);
    assert_false(pscom_req_is_done(r));
    return r;
}

static void right(void)
{
    pscom_request_t *r = pending_recv();
    assert_int_equal(pscom_cancel_recv(r), 1);
    pscom_request_free(r);
}

static void repost_recv(void)
{
    pscom_post_recv(pending_recv());
}

static void free_pending(void)
{
    pscom_request_free(pending_recv());
}

static void probe_pending(void)
{
    pscom_iprobe(pending_recv());
}

static void send_without_connection(void)
{
    pscom_request_t *r = pscom_request_create(0, 0);
    pscom_post_send(r);
}

static void send_to_null(void)
{
    char b[4] = "abc";
    pscom_send(NULL, NULL, 0, b, sizeof(b));
}

static void send_inplace_to_null(void)
{
    char b[4] = "abc";
    pscom_send_inplace(NULL, NULL, 0, b, sizeof(b), NULL, NULL);
}

static void listen_on_null(void)
{
    pscom_listen(NULL, PSCOM_ANYPORT);
}

/* (a closed socket's memory goes at the next progress pass: until then
 * its cleared magic says so) */
static void open_connection_on_closed_socket(void)
{
    pscom_socket_t *s = pscom_open_socket(0, 0, 0, PSCOM_SOCK_FLAG_INTER_JOB);
    pscom_close_socket(s);
    pscom_open_connection(s);
}

static void post_recv_null(void)
{
    pscom_post_recv(NULL);
}

static void send_null_data(void)
{
    pscom_connection_t *self = pscom_open_connection(sock);
    assert_int_equal(pscom_connect(self, NULL, 0, PSCOM_CON_FLAG_DIRECT), PSCOM_SUCCESS);
    pscom_send(self, NULL, 0, NULL, 100);
}

static void dump_to_null(void)
{
    pscom_dump_info(NULL);
}

static void env_get_into_null(void)
{
    setenv("PSP_TEST_MISUSE_SET", "1", 1);
    pscom_env_get_int(NULL, "PSP_TEST_MISUSE_SET");
}

static void rma_put_without_connection(void)
{
    pscom_request_t *r = pscom_request_create(sizeof(pscom_xheader_rma_put_t), 0);
    pscom_post_rma_put(r);
}

static void cancel_recv_as_send(void)
{
    pscom_cancel_send(pending_recv());
}

static void con_type_out_of_range(void)
{
    pscom_con_type_mask_only(sock, (pscom_con_type_t)64);
}

static void resume_without_listen(void)
{
    pscom_resume_listen(sock);
}

/* memory that is no object of pscom's: its magics do not match */
static uint64_t not_ours[64];

static void deregister_bogus(void)
{
    pscom_mem_deregister((pscom_memh_t)not_ours);
}

static void release_bogus_rkey_buffer(void)
{
    pscom_rkey_buffer_release(not_ours);
}

static void restore_bogus_mask(void)
{
    pscom_con_type_mask_restore(sock, not_ours);
}

static pscom_group_t *group_of_self(uint32_t id)
{
    pscom_connection_t *self = pscom_open_connection(sock);
    assert_int_equal(pscom_connect(self, NULL, 0, PSCOM_CON_FLAG_DIRECT), PSCOM_SUCCESS);
    pscom_group_t *g = pscom_group_open(sock, id, 0, 1, &self);
    assert_non_null(g);
    return g;
}

static void group_id_twice(void)
{
    group_of_self(7);
    group_of_self(7);
}

static void bcast_root_outside(void)
{
    char buf[8];
    pscom_bcast(group_of_self(8), 1, NULL, 0, buf, sizeof(buf));
}

static void post_bcast_root_outside(void)
{
    group_of_self(9);
    pscom_request_t *r          = pscom_request_create(sizeof(pscom_xheader_bcast_t), 0);
    r->socket                   = sock;
    r->xheader.bcast.group_id   = 9;
    r->xheader.bcast.bcast_root = 1;
    r->xheader_len              = sizeof(pscom_xheader_bcast_t);
    pscom_post_bcast(r);
}

static void group_id_of_null(void)
{
    pscom_group_get_id(NULL);
}

static void group_find_without_socket(void)
{
    pscom_group_find(NULL, 1);
}

static void post_bcast_without_socket(void)
{
    pscom_request_t *r = pscom_request_create(sizeof(pscom_xheader_bcast_t), 0);
    pscom_post_bcast(r);
}

/* Run fn in a child; returns its stderr (malloc'ed), *status its wait status. */
static char *in_child(void (*fn)(void), int *status)
{
    FILE *err = tmpfile();
    assert_non_null(err);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        dup2(fileno(err), 2);
        fn();
        _exit(0);
    }
    assert_int_equal(tu_sys_waitpid(pid, status), pid);
    char *out = tu_read_fd(fileno(err));
    assert_non_null(out);
    fclose(err);
    return out;
}

static void expect_abort(void (*fn)(void), const char *call, const char *rule)
{
    int status;
    char *out = in_child(fn, &status);
    if (!WIFSIGNALED(status) || WTERMSIG(status) != SIGABRT || !strstr(out, call) ||
        !strstr(out, "API misuse") || !strstr(out, rule))
        fail_msg("%s: expected an abort naming \"%s\" and \"%s\"; status %#x, printed: %s", call,
                 call, rule, status, out);
    free(out);
}

static void test_right_use_runs(void **state)
{
    int status;
    char *out = in_child(right, &status);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
    free(out);
}

static void test_misuse_aborts(void **state)
{
    expect_abort(repost_recv, "pscom_post_recv", "posted only when DONE");
    expect_abort(free_pending, "pscom_request_free", "freed only when DONE");
    expect_abort(probe_pending, "pscom_iprobe", "probed only when DONE");
    expect_abort(send_without_connection, "pscom_post_send", "needs a connection");
    /* (until 2026-11-29 these two crashed: SIGSEGV) */
    expect_abort(send_to_null, "pscom_send", "needs a connection");
    expect_abort(send_inplace_to_null, "pscom_send_inplace", "needs a connection");
    /* (until 2026-11-29 these crashed with SIGSEGV or used freed memory) */
    expect_abort(listen_on_null, "pscom_listen", "an open socket");
    expect_abort(open_connection_on_closed_socket, "pscom_open_connection", "an open socket");
    expect_abort(post_recv_null, "pscom_post_recv", "a request of pscom_request_create()");
    expect_abort(send_null_data, "pscom_send", "data for data_len bytes");
    expect_abort(rma_put_without_connection, "pscom_post_rma_put", "needs a connection");
    expect_abort(dump_to_null, "pscom_dump_info", "a stream to print to");
    expect_abort(env_get_into_null, "pscom_env_get_int", "a variable and its name");
    expect_abort(cancel_recv_as_send, "pscom_cancel_send", "a send request");
    expect_abort(con_type_out_of_range, "pscom_con_type_mask_only", "con_type < 64");
    expect_abort(resume_without_listen, "pscom_resume_listen", "pscom_listen() before");
    expect_abort(deregister_bogus, "pscom_mem_deregister", "a registered memory handle");
    expect_abort(release_bogus_rkey_buffer, "pscom_rkey_buffer_release",
                 "a buffer of pscom_rkey_buffer_pack()");
    expect_abort(restore_bogus_mask, "pscom_con_type_mask_restore",
                 "a backup of pscom_con_type_mask_backup()");
    expect_abort(group_id_twice, "pscom_group_open", "a group id unique on the socket");
    expect_abort(bcast_root_outside, "pscom_bcast", "a root within the group");
    expect_abort(post_bcast_without_socket, "pscom_post_bcast", "a broadcast names its socket");
    expect_abort(post_bcast_root_outside, "pscom_post_bcast", "a root within the group");
    expect_abort(group_id_of_null, "pscom_group_get_id", "an open group");
    expect_abort(group_find_without_socket, "pscom_group_find", "a socket");
}

/* A request that was never posted is DONE: cancelling it, as either
 * kind, does nothing and returns 0 (ParaStation MPI cancels the unposted
 * requests of MPI_PROC_NULL; until 2026-11-29 this aborted) */
static void test_cancel_never_posted(void **state)
{
    pscom_request_t *r = pscom_request_create(0, 0);
    pscom_req_state_t before = r->state;
    assert_int_equal(pscom_cancel_send(r), 0);
    assert_int_equal(pscom_cancel_recv(r), 0);
    assert_int_equal(pscom_cancel(r), 0);
    assert_int_equal(r->state, before);
    pscom_request_free(r);
}

static void test_prepare_never_overflows(void **state)
{
    pscom_connection_t *loop = pscom_open_connection(sock);
    assert_int_equal(pscom_connect(loop, NULL, 0, PSCOM_CON_FLAG_DIRECT), PSCOM_SUCCESS);
    pscom_request_t *r = pscom_request_create(8, 64);
    unsigned char *user = (unsigned char *)r->user;
    memset(user, 0xa5, 64);
    char xh[512], data[4] = "data";
    memset(xh, 0x11, sizeof(xh));
    pscom_req_prepare(r, loop, data, sizeof(data), xh, sizeof(xh));
    for (int i = 0; i < 64; i++) assert_int_equal(user[i], 0xa5); /* nothing past the area */
    pscom_post_send(r);
    pscom_wait(r);
    assert_true(r->state & PSCOM_REQ_STATE_ERROR);
    pscom_request_free(r);
    pscom_close_connection(loop);
}

static int setup(void **state)
{
    assert_int_equal(pscom_init(PSCOM_VERSION), PSCOM_SUCCESS);
    sock = pscom_open_socket(0, 0, 0, PSCOM_SOCK_FLAG_INTER_JOB);
    assert_non_null(sock);
    return 0;
}

static int teardown(void **state)
{
    pscom_close_socket(sock);
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_right_use_runs),
        cmocka_unit_test(test_misuse_aborts),
        cmocka_unit_test(test_cancel_never_posted),
        cmocka_unit_test(test_prepare_never_overflows),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
