/*
 * itest_precon_pending: a plugin's handshake step that ends later
 * (PSCOM_PLUGIN_PENDING, then pscom_con_handshake_done) and fails. The
 * plugin is pending_module.c, loaded as "openib" from PSP_PLUGINDIR, above
 * tcp; shm and ucp are off.
 *
 *   precon_pending_connect  con_connect pends (client): the client must
 *                           cancel the plugin and offer tcp
 *   precon_pending_confirm  con_confirm pends (server): the server must
 *                           answer CONFIRM_FAIL, and the client offer tcp
 *
 *   precon_pending_blob     nothing pends, but every blob is of the largest
 *                           size (PSCOM_PRECON_BLOB_MAX, 16 KiB: a UCX
 *                           worker address on a node with many network
 *                           devices): each must arrive whole (the server
 *                           checks the offer and the confirmation, the
 *                           client the reply), then con_confirm declines
 *
 * Each time the connection comes up over tcp and carries a checked echo,
 * and exactly the side whose step pended logged its failure once.
 */
#include "pscom_testutil.h"

#include <stdlib.h>
#include <string.h>

static const char *step; /* "connect" or "confirm" */

static void check_log(int pended)
{
    char line[64];
    snprintf(line, sizeof(line), "pending: the %s step failed", step);
    TU_ASSERT_EQ(tu_log_file_count(line), pended);
    TU_ASSERT_EQ(tu_log_file_count("pending: the"), pended);
    tu_log_file_remove();
}

/* the blob size promised to plugins (PSCOM_PRECON_BLOB_MAX) */
#define BLOB_MAX 16384

/* precon_pending_blob: the blobs numbered in mine arrived whole here */
static void check_blobs(const char *mine)
{
    int n = 0;
    for (const char *c = mine; *c; c++) {
        char line[64];
        snprintf(line, sizeof(line), "pending: blob %c of %d bytes intact", *c, BLOB_MAX);
        TU_ASSERT_EQ(tu_log_file_count(line), 1);
        n++;
    }
    TU_ASSERT_EQ(tu_log_file_count("pending: blob"), n);
    TU_ASSERT_EQ(tu_log_file_count("pending: the"), 0);
    tu_log_file_remove();
}

static int server(tu_ctx_t *ctx)
{
    pscom_socket_t *sock = tu_open_socket(ctx, 0, 0);
    pscom_connection_t *con = tu_server_accept_one(ctx, sock);
    TU_ASSERT_STR_EQ(pscom_con_type_str(con->type), "tcp");
    tu_echo_server(con, 1);
    pscom_close_socket(sock);
    if (!strcmp(step, "blob")) check_blobs("13");
    else check_log(!strcmp(step, "confirm"));
    return 0;
}

static int client(tu_ctx_t *ctx)
{
    pscom_socket_t *sock    = tu_open_socket(ctx, 0, 0);
    pscom_connection_t *con = tu_client_connect(ctx, sock);
    TU_ASSERT_STR_EQ(pscom_con_type_str(con->type), "tcp");
    tu_echo_client(con, 1);
    pscom_close_socket(sock);
    if (!strcmp(step, "blob")) check_blobs("2");
    else check_log(!strcmp(step, "connect"));
    return 0;
}

int main(int argc, char **argv)
{
    static const char *const steps[] = {"connect", "confirm", "blob"};
    setenv("PSP_PLUGINDIR", PSCOM_TEST_PENDING_MODULE_DIR, 1);
    setenv("PSP_OPENIB", "1", 1);
    setenv("PSP_TCP", "1", 1);
    setenv("PSP_SHM", "0", 1);
    setenv("PSP_UCP", "0", 1);
    unsetenv("PSCOM_TEST_CONTYPE");
    tu_log_files("itest_precon_pending", 1);
    for (int i = 0; i < 3; i++) {
        char name[64];
        step = steps[i];
        snprintf(name, sizeof(name), "precon_pending_%s", step);
        if (argc > 1 && strcmp(argv[1], name)) continue;
        setenv("PENDING_STEP", step, 1);
        if (tu_run(name, 1, server, client, NULL)) return 1;
    }
    return 0;
}
