/*
 * api_minimal_set: the public API an MPI device needs (spec 3.5), written
 * against include/pscom.h only and linked with the shared library.
 *
 *  - The includer hooks are set the way an MPI device sets them: the user
 *    xheader type, the six RMA user xheader types, socket and connection
 *    userdata types and struct PSCOM_req_user (so that
 *    PSCOM_REQUEST_CREATE() compiles).
 *  - The addresses of all 50 functions of the minimal set go into a table,
 *    so the link must resolve every one of them from libpscom; at run
 *    time each address is checked to lie in libpscom.so (dladdr), i.e. it
 *    really came from the shared library.
 *  - The constants, the inline helpers (pscom_req_successful,
 *    pscom_req_is_done, pscom_recv_from) and the struct members of 3.5 are
 *    used; a short run on a loopback connection exercises them.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

/* the hooks, as an MPI device defines them before including pscom.h */
typedef struct mpi_xheader {
    int32_t tag;
    uint16_t context_id;
    uint8_t type;
    uint8_t flags;
    int32_t src_rank;
} mpi_xheader_t;
typedef struct mpi_rma_user {
    uint64_t win_id;
    int32_t src_rank;
    int32_t origin_count;
} mpi_rma_user_t;
struct mpi_sock_data {
    int rank;
};
struct mpi_con_data {
    int rank;
};

#define PSCOM_XHEADER_USER_TYPE                    mpi_xheader_t
#define PSCOM_XHEADER_RMA_PUT_USER_TYPE            mpi_rma_user_t
#define PSCOM_XHEADER_RMA_GET_USER_TYPE            mpi_rma_user_t
#define PSCOM_XHEADER_RMA_ACCUMULATE_USER_TYPE     mpi_rma_user_t
#define PSCOM_XHEADER_RMA_GET_ACCUMULATE_USER_TYPE mpi_rma_user_t
#define PSCOM_XHEADER_RMA_FETCH_OP_USER_TYPE       mpi_rma_user_t
#define PSCOM_XHEADER_RMA_COMPARE_SWAP_USER_TYPE   mpi_rma_user_t
#define PSCOM_SOCKET_USERDATA_TYPE                 struct mpi_sock_data
#define PSCOM_CONNECTION_USERDATA_TYPE             struct mpi_con_data
#include <pscom.h>

struct PSCOM_req_user {
    int kind;
    void *mpi_request;
};

#define FN(f) {#f, (void (*)(void))f}

static const struct {
    const char *name;
    void (*fn)(void);
} minimal_set[] = {
    /* init, errors, env */
    FN(pscom_init),
    FN(pscom_init_thread),
    FN(pscom_err_str),
    FN(pscom_env_get_int),
    FN(pscom_env_get_uint),
    /* sockets and listening */
    FN(pscom_open_socket),
    FN(pscom_socket_set_name),
    FN(pscom_listen),
    FN(pscom_stop_listen),
    FN(pscom_suspend_listen),
    FN(pscom_resume_listen),
    FN(pscom_socket_get_ep_str),
    FN(pscom_socket_free_ep_str),
    FN(pscom_close_socket),
    FN(pscom_con_type_mask_only),
    /* connections */
    FN(pscom_open_connection),
    FN(pscom_connect),
    FN(pscom_close_connection),
    FN(pscom_get_next_connection),
    FN(pscom_flush),
    FN(pscom_con_info_str),
    /* requests and messaging */
    FN(pscom_request_create),
    FN(pscom_request_free),
    FN(pscom_post_recv),
    FN(pscom_post_send),
    FN(pscom_send),
    FN(pscom_send_inplace),
    FN(pscom_recv),
    FN(pscom_iprobe),
    FN(pscom_probe),
    FN(pscom_cancel),
    FN(pscom_cancel_send),
    FN(pscom_cancel_recv),
    FN(pscom_wait),
    FN(pscom_wait_any),
    FN(pscom_test_any),
    FN(pscom_req_state_str),
    /* RMA */
    FN(pscom_mem_register),
    FN(pscom_mem_deregister),
    FN(pscom_rkey_buffer_pack),
    FN(pscom_rkey_buffer_release),
    FN(pscom_rkey_generate),
    FN(pscom_rkey_destroy),
    FN(pscom_register_rma_callbacks),
    FN(pscom_post_rma_put),
    FN(pscom_post_rma_get),
    FN(pscom_post_rma_accumulate),
    FN(pscom_post_rma_get_accumulate),
    FN(pscom_post_rma_fetch_op),
    FN(pscom_post_rma_compare_swap),
};
#define NFN (sizeof(minimal_set) / sizeof(minimal_set[0]))
_Static_assert(NFN == 50, "spec 3.5: 50 extern functions");

/* constants of 3.5 (compile-time presence; values are checked elsewhere) */
static const long constants[] = {
    PSCOM_VERSION, PSCOM_ABI_VERSION_MAJOR, PSCOM_HAS_LISTEN_SUSPEND_RESUME, PSCOM_API_VERSION,
    PSCOM_SUCCESS, PSCOM_ERR_INVALID, PSCOM_ERR_STDERROR, PSCOM_ANYPORT, PSCOM_RANK_UNDEFINED,
    PSCOM_CON_FLAG_DIRECT, PSCOM_CON_FLAG_ONDEMAND, PSCOM_SOCK_FLAG_INTRA_JOB,
    PSCOM_SOCK_FLAG_INTER_JOB, PSCOM_CON_TYPE_TCP, PSCOM_REQ_STATE_DONE,
    PSCOM_REQ_STATE_IO_DONE, PSCOM_REQ_STATE_IO_STARTED, PSCOM_REQ_STATE_POSTED,
    PSCOM_REQ_STATE_TRUNCATED, PSCOM_REQ_STATE_CANCELED, PSCOM_REQ_STATE_ERROR, PSCOM_RMA_PUT,
    PSCOM_RMA_GET, PSCOM_RMA_ACCUMULATE, PSCOM_RMA_GET_ACCUMULATE, PSCOM_RMA_FETCH_AND_OP,
    PSCOM_RMA_COMPARE_AND_SWAP, pscom_min(3, 4)};

static int failures;

#define CHECK(cond)                                                                          \
    do {                                                                                     \
        if (!(cond)) {                                                                       \
            fprintf(stderr, "api_minimal_set: %s:%d: check failed: %s\n", __FILE__, __LINE__, \
                    #cond);                                                                  \
            failures++;                                                                      \
        }                                                                                    \
    } while (0)

int main(void)
{
    /* every function comes from libpscom.so */
    for (size_t i = 0; i < NFN; i++) {
        Dl_info info;
        void *addr = *(void **)(void *)&minimal_set[i].fn;
        if (!minimal_set[i].fn || !dladdr(addr, &info) || !info.dli_fname ||
            !strstr(info.dli_fname, "libpscom")) {
            fprintf(stderr, "api_minimal_set: %s is not resolved from libpscom (%s)\n",
                    minimal_set[i].name, minimal_set[i].fn && dladdr(addr, &info) && info.dli_fname
                                             ? info.dli_fname
                                             : "unresolved");
            failures++;
        }
    }
    CHECK(constants[0] == PSCOM_VERSION);

    /* the types and members of 3.5 in a short loopback run */
    CHECK(pscom_init(PSCOM_VERSION) == PSCOM_SUCCESS);
    pscom_socket_t *sock = pscom_open_socket(sizeof(struct mpi_sock_data),
                                             sizeof(struct mpi_con_data), 0,
                                             PSCOM_SOCK_FLAG_INTER_JOB);
    CHECK(sock != NULL);
    if (!sock) return 1;
    sock->userdata.rank = 0;
    pscom_socket_set_name(sock, "r0000000");
    CHECK(pscom_listen(sock, PSCOM_ANYPORT) == PSCOM_SUCCESS);
    char *ep = NULL;
    CHECK(pscom_socket_get_ep_str(sock, &ep) == PSCOM_SUCCESS && ep);
    pscom_connection_t *con = pscom_open_connection(sock);
    CHECK(con != NULL);
    if (!con || !ep) return 1;
    con->userdata.rank = 0;
    CHECK(pscom_connect(con, ep, 0, PSCOM_CON_FLAG_DIRECT) == PSCOM_SUCCESS);
    pscom_socket_free_ep_str(ep);
    CHECK(pscom_con_info_str(&con->remote_con_info) != NULL);
    CHECK(pscom_get_next_connection(sock, NULL) == con);

    pscom_request_t *req = PSCOM_REQUEST_CREATE();
    CHECK(req != NULL && pscom_req_is_done(req));
    CHECK(req->xheader_len == sizeof(mpi_xheader_t));
    req->user->kind  = 1;
    req->connection  = con;
    req->socket      = sock;
    req->data        = NULL;
    req->data_len    = 0;
    pscom_post_recv(req);
    mpi_xheader_t xh = {.tag = 42, .context_id = 7, .type = 1, .src_rank = 0};
    pscom_send(con, &xh, sizeof(xh), NULL, 0);
    pscom_wait(req);
    CHECK(pscom_req_successful(req));
    CHECK(req->xheader.user.tag == 42 && req->xheader.user.context_id == 7);
    pscom_request_free(req);

    char buf[16] = "";
    pscom_send(con, &xh, sizeof(xh), "minimal", 8);
    CHECK(pscom_recv_from(con, &xh, sizeof(xh), buf, sizeof(buf)) == PSCOM_SUCCESS);
    CHECK(strcmp(buf, "minimal") == 0);
    pscom_flush(con);
    pscom_close_connection(con);
    pscom_close_socket(sock);

    if (failures) {
        fprintf(stderr, "api_minimal_set: %d failure(s)\n", failures);
        return 1;
    }
    printf("api_minimal_set: all %zu functions of the minimal set resolved from libpscom\n",
           NFN);
    return 0;
}
