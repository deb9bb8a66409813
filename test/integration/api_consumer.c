/*
 * api_consumer.c - a program written against the installed <pscom.h> only
 * (no harness, no private headers). Built by install_consumer.sh from an
 * installed prefix with pkg-config, as C (also with -Wall -Wextra -Werror)
 * and as C++. It
 *  - defines every includer hook (PSCOM_XHEADER_USER_TYPE, the six RMA
 *    user xheader types, socket/connection userdata types, struct
 *    PSCOM_req_user) before including the header;
 *  - takes the address of all 87 exported functions and of the two
 *    exported variables, so linking proves they exist in libpscom;
 *  - uses the constants, macros and inline helpers;
 *  - runs a loopback send/recv through a broad set of calls.
 * Written in the common subset of C and C++.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <netinet/in.h>

struct my_xheader {
    uint32_t tag;
    uint32_t seq;
    char text[24];
};
struct my_rma_user {
    uint64_t cookie;
};
struct my_sock_data {
    int magic;
    double weight;
};
struct my_con_data {
    int magic;
    char peer[8];
};
struct PSCOM_req_user {
    int id;
    char note[40];
};

#define PSCOM_XHEADER_USER_TYPE                   struct my_xheader
#define PSCOM_XHEADER_RMA_PUT_USER_TYPE           struct my_rma_user
#define PSCOM_XHEADER_RMA_ACCUMULATE_USER_TYPE    struct my_rma_user
#define PSCOM_XHEADER_RMA_GET_USER_TYPE           struct my_rma_user
#define PSCOM_XHEADER_RMA_GET_ACCUMULATE_USER_TYPE struct my_rma_user
#define PSCOM_XHEADER_RMA_FETCH_OP_USER_TYPE      struct my_rma_user
#define PSCOM_XHEADER_RMA_COMPARE_SWAP_USER_TYPE  struct my_rma_user
#define PSCOM_SOCKET_USERDATA_TYPE                struct my_sock_data
#define PSCOM_CONNECTION_USERDATA_TYPE            struct my_con_data
#include <pscom.h>

#if !defined(PSCOM_API_VERSION) || PSCOM_API_VERSION < 0x00060100
#error "PSCOM_API_VERSION missing or too old"
#endif
#if PSCOM_ABI_VERSION_MAJOR != 5
#error "unexpected ABI major"
#endif
#ifndef PSCOM_HAS_LISTEN_SUSPEND_RESUME
#error "PSCOM_HAS_LISTEN_SUSPEND_RESUME missing"
#endif
#ifdef PSCOM_CUDA_AWARENESS_SUPPORT
#error "PSCOM_CUDA_AWARENESS_SUPPORT without PSCOM_CUDA_AWARENESS"
#endif

#define CHECK(cond)                                                            \
    do {                                                                       \
        if (!(cond)) {                                                         \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__,   \
                    #cond);                                                    \
            exit(1);                                                           \
        }                                                                      \
    } while (0)

struct sym {
    const char *name;
    uintptr_t addr;
};
#define SYM(f) {#f, (uintptr_t)&f}

static const struct sym symbols[] = {
    SYM(pscom_ascii_to_sockaddr_in),
    SYM(pscom_atoaddr),
    SYM(pscom_atoport),
    SYM(pscom_barrier),
    SYM(pscom_bcast),
    SYM(pscom_cancel),
    SYM(pscom_cancel_recv),
    SYM(pscom_cancel_send),
    SYM(pscom_close_connection),
    SYM(pscom_close_socket),
    SYM(pscom_con_info_str),
    SYM(pscom_con_info_str2),
    SYM(pscom_con_state_str),
    SYM(pscom_con_str),
    SYM(pscom_con_type_mask_add),
    SYM(pscom_con_type_mask_all),
    SYM(pscom_con_type_mask_backup),
    SYM(pscom_con_type_mask_del),
    SYM(pscom_con_type_mask_is_set),
    SYM(pscom_con_type_mask_only),
    SYM(pscom_con_type_mask_restore),
    SYM(pscom_con_type_str),
    SYM(pscom_connect),
    SYM(pscom_dump_connection),
    SYM(pscom_dump_info),
    SYM(pscom_dump_reqstat),
    SYM(pscom_dumpstr),
    SYM(pscom_env_get_dir),
    SYM(pscom_env_get_int),
    SYM(pscom_env_get_size_t),
    SYM(pscom_env_get_str),
    SYM(pscom_env_get_uint),
    SYM(pscom_err_str),
    SYM(pscom_flush),
    SYM(pscom_get_next_connection),
    SYM(pscom_get_nodeid),
    SYM(pscom_get_portno),
    SYM(pscom_group_close),
    SYM(pscom_group_find),
    SYM(pscom_group_get_id),
    SYM(pscom_group_open),
    SYM(pscom_init),
    SYM(pscom_init_thread),
    SYM(pscom_iprobe),
    SYM(pscom_is_cuda_enabled),
    SYM(pscom_listen),
    SYM(pscom_mem_deregister),
    SYM(pscom_mem_register),
    SYM(pscom_op_str),
    SYM(pscom_open_connection),
    SYM(pscom_open_socket),
    SYM(pscom_post_bcast),
    SYM(pscom_post_recv),
    SYM(pscom_post_rma_accumulate),
    SYM(pscom_post_rma_compare_swap),
    SYM(pscom_post_rma_fetch_op),
    SYM(pscom_post_rma_get),
    SYM(pscom_post_rma_get_accumulate),
    SYM(pscom_post_rma_put),
    SYM(pscom_post_rma_read),
    SYM(pscom_post_rma_write),
    SYM(pscom_post_send),
    SYM(pscom_probe),
    SYM(pscom_readall),
    SYM(pscom_recv),
    SYM(pscom_register_rma_callbacks),
    SYM(pscom_req_state_str),
    SYM(pscom_request_create),
    SYM(pscom_request_free),
    SYM(pscom_resume_listen),
    SYM(pscom_rkey_buffer_pack),
    SYM(pscom_rkey_buffer_release),
    SYM(pscom_rkey_destroy),
    SYM(pscom_rkey_generate),
    SYM(pscom_send),
    SYM(pscom_send_inplace),
    SYM(pscom_set_debug),
    SYM(pscom_socket_free_ep_str),
    SYM(pscom_socket_get_ep_str),
    SYM(pscom_socket_set_name),
    SYM(pscom_stop_listen),
    SYM(pscom_suspend_listen),
    SYM(pscom_test_any),
    SYM(pscom_wait),
    SYM(pscom_wait_all),
    SYM(pscom_wait_any),
    SYM(pscom_writeall),
    SYM(pscom_env_get),
    SYM(pscom_env_set),
};

static int accepted;
static void on_accept(pscom_connection_t *con)
{
    con->userdata.magic = 4711;
    accepted++;
}

static void on_error(pscom_connection_t *con, pscom_op_t op, pscom_err_t err)
{
    fprintf(stderr, "con_error %s %s %s\n", pscom_con_str(con), pscom_op_str(op),
            pscom_err_str(err));
}

static int inplace_done;
static void inplace_io_done(pscom_req_state_t state, void *priv)
{
    CHECK(pscom_req_state_successful(state));
    CHECK(priv == (void *)&inplace_done);
    inplace_done++;
}

static int accept_seq2(pscom_request_t *req, pscom_connection_t *con,
                       pscom_header_net_t *header_net)
{
    (void)req;
    (void)con;
    return header_net->xheader_len >= sizeof(struct my_xheader) &&
           header_net->xheader[0].user.seq == 2;
}

int main(void)
{
    size_t i;
    unsigned cuda, major, minor;

    /* every exported symbol resolved */
    CHECK(sizeof(symbols) / sizeof(symbols[0]) == 89);
    for (i = 0; i < sizeof(symbols) / sizeof(symbols[0]); i++) CHECK(symbols[i].addr != 0);

    PSCOM_VERSION_SPLIT(PSCOM_VERSION, cuda, major, minor)
    CHECK(cuda == 0 && major == PSCOM_ABI_VERSION_MAJOR && minor == PSCOM_ABI_VERSION_MINOR);
    CHECK(pscom_min(3, 4) == 3 && pscom_max(3, 4) == 4);
    CHECK(sizeof(pscom_header_net_t) == 8);
    CHECK(sizeof(((struct PSCOM_header_net *)0)->xheader_len) == 2);
    CHECK(PSCOM_DATA_LEN_MASK == 0xffffffffffULL);

    CHECK(pscom_init(PSCOM_VERSION) == PSCOM_SUCCESS);
    CHECK(pscom_is_cuda_enabled() == 0);
    pscom_set_debug(1);
    (void)pscom_get_nodeid();

    /* environment helpers: override only if set */
    {
        int iv          = 17;
        unsigned uv     = 18;
        size_t sv       = 19;
        char *str       = NULL;
        char *dir       = NULL;
        CHECK(pscom_env_get != NULL && pscom_env_set != NULL);
        CHECK(pscom_env_set("API_CONSUMER_INT", "42", 1) == 0);
        pscom_env_get_int(&iv, "API_CONSUMER_INT");
        CHECK(iv == 42);
        pscom_env_get_uint(&uv, "API_CONSUMER_UNSET_VAR");
        CHECK(uv == 18);
        pscom_env_get_size_t(&sv, "API_CONSUMER_INT");
        CHECK(sv == 42);
        pscom_env_get_str(&str, "API_CONSUMER_INT");
        CHECK(str && strcmp(str, "42") == 0);
        CHECK(pscom_env_set("API_CONSUMER_DIR", "/tmp", 1) == 0);
        pscom_env_get_dir(&dir, "API_CONSUMER_DIR");
        CHECK(dir && strcmp(dir, "/tmp/") == 0);
        free(dir);
    }

    /* misc utilities */
    {
        struct in_addr a;
        struct sockaddr_in sa;
        int fds[2];
        char buf[6];
        CHECK(pscom_atoport("80", "tcp") == (int)htons(80));
        CHECK(pscom_atoaddr("127.0.0.1", &a) == 0);
        CHECK(a.s_addr == htonl(0x7f000001));
        CHECK(pscom_ascii_to_sockaddr_in("127.0.0.1", "1234", "tcp", &sa) == 0);
        CHECK(sa.sin_port == htons(1234));
        CHECK(pipe(fds) == 0);
        CHECK(pscom_writeall(fds[1], "hello", 5) == 5);
        CHECK(pscom_readall(fds[0], buf, 5) == 5);
        CHECK(memcmp(buf, "hello", 5) == 0);
        close(fds[0]);
        close(fds[1]);
    }

    /* strings */
    CHECK(strcmp(pscom_con_type_str(PSCOM_CON_TYPE_TCP), "tcp") == 0);
    CHECK(strcmp(pscom_con_state_str(PSCOM_CON_STATE_RW), "open") == 0);
    CHECK(strcmp(pscom_op_str(PSCOM_OP_READ), "read") == 0);
    CHECK(pscom_err_str(PSCOM_ERR_EOF) != NULL);
    CHECK(pscom_req_state_str(PSCOM_REQ_STATE_DONE) != NULL);
    CHECK(pscom_dumpstr("ab", 2) != NULL);

    /* socket with typed userdata */
    pscom_socket_t *sock = pscom_open_socket(sizeof(struct my_sock_data),
                                             sizeof(struct my_con_data), 0,
                                             PSCOM_SOCK_FLAG_INTER_JOB);
    CHECK(sock != NULL);
    sock->userdata.magic  = 42;
    sock->userdata.weight = 0.5;
    {
        struct PSCOM_socket_ops ops;
        memset(&ops, 0, sizeof(ops));
        ops.con_accept = on_accept;
        ops.con_error  = on_error;
        sock->ops      = ops;
    }
    pscom_socket_set_name(sock, "consumer");
    pscom_con_type_mask_all(sock);
    {
        void *backup = pscom_con_type_mask_backup(sock);
        pscom_con_type_mask_only(sock, PSCOM_CON_TYPE_TCP);
        pscom_con_type_mask_add(sock, PSCOM_CON_TYPE_SHM);
        pscom_con_type_mask_del(sock, PSCOM_CON_TYPE_SHM);
        CHECK(pscom_con_type_mask_is_set(sock, PSCOM_CON_TYPE_TCP) == 1);
        pscom_con_type_mask_restore(sock, backup);
    }
    CHECK(pscom_listen(sock, PSCOM_ANYPORT) == PSCOM_SUCCESS);
    CHECK(pscom_get_portno(sock) > 0);
    char *ep = NULL;
    CHECK(pscom_socket_get_ep_str(sock, &ep) == PSCOM_SUCCESS && ep != NULL);
    pscom_suspend_listen(sock);
    pscom_resume_listen(sock);

    /* loopback connection */
    pscom_connection_t *con = pscom_open_connection(sock);
    CHECK(con != NULL);
    CHECK(pscom_connect(con, ep, PSCOM_RANK_UNDEFINED, PSCOM_CON_FLAG_DIRECT) == PSCOM_SUCCESS);
    pscom_socket_free_ep_str(ep);
    CHECK(con->type == PSCOM_CON_TYPE_LOOP);
    CHECK(accepted == 1 && con->userdata.magic == 4711);
    CHECK(pscom_get_next_connection(sock, NULL) == con);
    CHECK(pscom_con_info_str(&con->remote_con_info) != NULL);
    CHECK(pscom_con_info_str2(&sock->local_con_info, &con->remote_con_info) != NULL);
    CHECK(pscom_con_str(con) != NULL);

    /* request API with the typed xheader and user part */
    {
        char data[100], got[100];
        struct my_xheader xh;
        pscom_request_t *rreq = PSCOM_REQUEST_CREATE();
        pscom_request_t *sreq = PSCOM_REQUEST_CREATE();
        pscom_request_t *all[3];
        CHECK(rreq && sreq);
        CHECK(pscom_req_is_done(rreq));
        CHECK(rreq->xheader_len == sizeof(struct my_xheader));
        CHECK(rreq->max_xheader_len >= sizeof(struct my_xheader));
        rreq->user->id = 1;
        strcpy(rreq->user->note, "receive");
        sreq->user->id = 2;

        rreq->connection  = con;
        rreq->socket      = sock;
        rreq->data        = got;
        rreq->data_len    = sizeof(got);
        rreq->xheader_len = sizeof(struct my_xheader);
        pscom_post_recv(rreq);

        for (i = 0; i < sizeof(data); i++) data[i] = (char)i;
        memset(&xh, 0, sizeof(xh));
        xh.tag = 7;
        xh.seq = 1;
        strcpy(xh.text, "loopback");
        pscom_req_prepare(sreq, con, data, sizeof(data), &xh, sizeof(xh));
        pscom_post_send(sreq);
        all[0] = rreq;
        all[1] = sreq;
        all[2] = NULL;
        pscom_wait_all(all);
        CHECK(pscom_req_successful(rreq) && pscom_req_successful(sreq));
        CHECK(pscom_req_state_is_done(rreq->state));
        CHECK(rreq->header.data_len == sizeof(data));
        CHECK(memcmp(got, data, sizeof(data)) == 0);
        CHECK(rreq->xheader.user.tag == 7 && rreq->xheader.user.seq == 1);
        CHECK(strcmp(rreq->xheader.user.text, "loopback") == 0);
        CHECK(rreq->user->id == 1 && strcmp(rreq->user->note, "receive") == 0);

        /* probe with recv_accept, then receive it */
        xh.seq = 2;
        pscom_send(con, &xh, sizeof(xh), data, 10);
        rreq->connection       = con;
        rreq->data_len         = 5;
        rreq->ops.recv_accept  = accept_seq2;
        CHECK(pscom_iprobe(rreq) == 1);
        CHECK(rreq->header.data_len == 10);
        CHECK(rreq->state & PSCOM_REQ_STATE_TRUNCATED);
        pscom_probe(rreq);
        CHECK(pscom_recv_from(con, &xh, sizeof(xh), got, 10) == PSCOM_SUCCESS);
        CHECK(xh.seq == 2 && memcmp(got, data, 10) == 0);

        /* cancel a receive nobody will satisfy */
        rreq->ops.recv_accept = NULL;
        rreq->connection      = con;
        rreq->data_len        = sizeof(got);
        pscom_post_recv(rreq);
        CHECK(pscom_cancel(rreq) == 1);
        CHECK(rreq->state & PSCOM_REQ_STATE_CANCELED);
        CHECK(pscom_cancel_recv(rreq) == 0);
        CHECK(pscom_cancel_send(sreq) == 0);

        /* inplace send, any-source receive */
        xh.seq = 3;
        pscom_send_inplace(con, &xh, sizeof(xh), data, 20, inplace_io_done, &inplace_done);
        CHECK(pscom_recv_any(sock, &xh, sizeof(xh), got, sizeof(got)) == PSCOM_SUCCESS);
        CHECK(xh.seq == 3);
        while (!inplace_done) pscom_wait_any();
        (void)pscom_test_any();
        pscom_flush(con);

        pscom_request_free(rreq);
        pscom_request_free(sreq);
    }

    {
        FILE *null = fopen("/dev/null", "w");
        CHECK(null != NULL);
        pscom_dump_connection(null, con);
        pscom_dump_reqstat(null);
        pscom_dump_info(null);
        fclose(null);
    }

    pscom_stop_listen(sock);
    pscom_close_connection(con);
    pscom_close_socket(sock);
    printf("api_consumer: OK (%u symbols)\n",
           (unsigned)(sizeof(symbols) / sizeof(symbols[0])));
    return 0;
}
