/*
 * pscom.h - public API of libpscom, a source-compatible implementation of
 * the ParaStation pscom communication library (ABI 5.0, API 6.1).
 *
 * Names, values and struct layouts follow the pscom API contract exactly:
 * programs and MPI devices written against that API compile unchanged.
 *
 * Includer hooks (define before including this header):
 *   PSCOM_CUDA_AWARENESS                    CUDA declarations, CUDA bit in PSCOM_VERSION
 *   PSCOM_XHEADER_USER_TYPE                 type of pscom_xheader_t.user
 *   PSCOM_XHEADER_RMA_<OP>_USER_TYPE        type of the user part of each RMA xheader
 *   PSCOM_SOCKET_USERDATA_TYPE              type of pscom_socket_t.userdata
 *   PSCOM_CONNECTION_USERDATA_TYPE          type of pscom_connection_t.userdata
 *   struct PSCOM_req_user                   what request->user points to
 * They change sizeof() of the public structs in the includer only: every
 * hook-sized member comes last and the library never depends on it.
 */
#ifndef _PSCOM_H_
#define _PSCOM_H_

#include <assert.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/types.h>

#ifdef __cplusplus
extern "C" {
#if 0
} /* for editors */
#endif
#endif

struct in_addr;
struct sockaddr_in;

/* ------------------------------------------------------------------ */
/* Versions                                                           */
/* ------------------------------------------------------------------ */

#ifdef PSCOM_CUDA_AWARENESS
#define PSCOM_ABI_CUDA_SUPPORT 1
#define PSCOM_CUDA_AWARENESS_SUPPORT
#else
#define PSCOM_ABI_CUDA_SUPPORT 0
#endif

#define PSCOM_ABI_VERSION_MAJOR 5
#define PSCOM_ABI_VERSION_MINOR 0

#define PSCOM_BIT_MASK(i) ((i) >= 64 ? ~0 : ((1 << (i)) - 1))

#define PSCOM_ABI_VERSION_CUDA_BITS  1
#define PSCOM_ABI_VERSION_MAJOR_BITS 7
#define PSCOM_ABI_VERSION_MINOR_BITS 8

#define PSCOM_ABI_VERSION_CUDA_SHIFT  15
#define PSCOM_ABI_VERSION_MAJOR_SHIFT 8

#define PSCOM_VERSION_BUILD(cuda, major, minor)                                \
    (((cuda) << PSCOM_ABI_VERSION_CUDA_SHIFT) |                                \
     ((major) << PSCOM_ABI_VERSION_MAJOR_SHIFT) | (minor))

#define PSCOM_VERSION_SPLIT(v, cuda, major, minor)                             \
    do {                                                                       \
        (cuda)  = ((v) >> PSCOM_ABI_VERSION_CUDA_SHIFT) &                      \
                 PSCOM_BIT_MASK(PSCOM_ABI_VERSION_CUDA_BITS);                  \
        (major) = ((v) >> PSCOM_ABI_VERSION_MAJOR_SHIFT) &                     \
                  PSCOM_BIT_MASK(PSCOM_ABI_VERSION_MAJOR_BITS);                \
        (minor) = (v)&PSCOM_BIT_MASK(PSCOM_ABI_VERSION_MINOR_BITS);            \
    } while (0);

#define PSCOM_VERSION                                                          \
    PSCOM_VERSION_BUILD(PSCOM_ABI_CUDA_SUPPORT, PSCOM_ABI_VERSION_MAJOR,       \
                        PSCOM_ABI_VERSION_MINOR)

/* pscom API version 6.1.0, encoded 0x00MMmmpp */
#define PSCOM_API_VERSION 0x00060100

#define PSCOM_RANK_UNDEFINED (-1)
#define PSCOM_HAS_TWO_SIDED_RMA
#define PSCOM_HAS_LISTEN_SUSPEND_RESUME 1

#define PSCOM_ANYPORT    (-1) /* pscom_listen(): any port */
#define PSCOM_LISTEN_FD0 0    /* pscom_listen(): use fd 0 */

#define PSCOM_DATA_LEN_MASK 0xffffffffffULL

#if defined(__has_attribute)
#if __has_attribute(__nonstring__)
#define PSCOM_V_NONSTRING __attribute__((__nonstring__))
#endif
#endif
#ifndef PSCOM_V_NONSTRING
#define PSCOM_V_NONSTRING
#endif

#define pscom_min(a, b) (((a) < (b)) ? (a) : (b))
#define pscom_max(a, b) (((a) > (b)) ? (a) : (b))

/* ------------------------------------------------------------------ */
/* Enums                                                              */
/* ------------------------------------------------------------------ */

typedef enum PSCOM_err {
    PSCOM_SUCCESS                  = 0,
    PSCOM_ERR_STDERROR             = -1, /* check errno */
    PSCOM_ERR_INVALID              = -2,
    PSCOM_ERR_ALREADY              = -3,
    PSCOM_NOT_IMPLEMENTED          = -4,
    PSCOM_ERR_EOF                  = -5,
    PSCOM_ERR_IOERROR              = -6,
    PSCOM_ERR_UNSUPPORTED_VERSION  = -7,
    PSCOM_ERR_CONNECTION_REFUSED   = -8,
} pscom_err_t;

typedef enum PSCOM_con_state {
    PSCOM_CON_STATE_NO_RW               = 0x0,
    PSCOM_CON_STATE_R                   = 0x1,
    PSCOM_CON_STATE_W                   = 0x2,
    PSCOM_CON_STATE_RW                  = 0x3,
    PSCOM_CON_STATE_CLOSED              = 0x4,
    PSCOM_CON_STATE_CONNECTING          = 0x8,
    PSCOM_CON_STATE_ACCEPTING           = 0x10,
    PSCOM_CON_STATE_CLOSE_WAIT          = 0x400,
    PSCOM_CON_STATE_CLOSING             = 0x20,
    PSCOM_CON_STATE_SUSPENDING          = 0x40,
    PSCOM_CON_STATE_SUSPEND_SENT        = (0x40 | 0x80),
    PSCOM_CON_STATE_SUSPEND_RECEIVED    = (0x40 | 0x100),
    PSCOM_CON_STATE_SUSPENDED           = (0x40 | 0x80 | 0x100),
    PSCOM_CON_STATE_CONNECTING_ONDEMAND = (0x200 | 0x8),
    PSCOM_CON_STATE_ACCEPTING_ONDEMAND  = (0x200 | 0x10),
} pscom_con_state_t;

typedef enum PSCOM_con_type {
    PSCOM_CON_TYPE_NONE                          = 0x00,
    PSCOM_CON_TYPE_LOOP                          = 0x01,
    PSCOM_CON_TYPE_TCP                           = 0x02,
    PSCOM_CON_TYPE_SHM                           = 0x03,
    PSCOM_CON_TYPE_P4S __attribute__((deprecated)) = 0x04,
    PSCOM_CON_TYPE_GM                            = 0x05,
    PSCOM_CON_TYPE_MVAPI                         = 0x06,
    PSCOM_CON_TYPE_OPENIB                        = 0x07,
    PSCOM_CON_TYPE_ELAN                          = 0x08,
    PSCOM_CON_TYPE_DAPL                          = 0x09,
    PSCOM_CON_TYPE_ONDEMAND                      = 0x0a,
    PSCOM_CON_TYPE_OFED                          = 0x0b,
    PSCOM_CON_TYPE_EXTOLL                        = 0x0c,
    PSCOM_CON_TYPE_PSM                           = 0x0d,
    PSCOM_CON_TYPE_VELO                          = 0x0e,
    PSCOM_CON_TYPE_CBC                           = 0x0f,
    PSCOM_CON_TYPE_MXM                           = 0x10,
    PSCOM_CON_TYPE_SUSPENDED                     = 0x11,
    PSCOM_CON_TYPE_UCP                           = 0x12,
    PSCOM_CON_TYPE_GW                            = 0x13,
    PSCOM_CON_TYPE_PORTALS                       = 0x14,
    PSCOM_CON_TYPE_COUNT                         = 0x15,
} pscom_con_type_t;

typedef enum PSCOM_connect_flags {
    PSCOM_CON_FLAG_DIRECT   = 0x1,
    PSCOM_CON_FLAG_ONDEMAND = 0x2,
} pscom_connect_flags_t;

typedef enum PSCOM_socket_flags {
    PSCOM_SOCK_FLAG_INTRA_JOB = 0x1,
    PSCOM_SOCK_FLAG_INTER_JOB = 0x2,
} pscom_socket_flags_t;

typedef enum PSCOM_op {
    PSCOM_OP_READ    = 1,
    PSCOM_OP_WRITE   = 2,
    PSCOM_OP_CONNECT = 3,
    PSCOM_OP_RW      = 4,
} pscom_op_t;

typedef enum PSCOM_rma_op {
    PSCOM_RMA_PUT              = 0,
    PSCOM_RMA_GET              = 1,
    PSCOM_RMA_ACCUMULATE       = 2,
    PSCOM_RMA_GET_ACCUMULATE   = 3,
    PSCOM_RMA_FETCH_AND_OP     = 4,
    PSCOM_RMA_COMPARE_AND_SWAP = 5,
    PSCOM_RMA_OP_COUNT         = 6,
} pscom_rma_op_t;

/* ------------------------------------------------------------------ */
/* Request state bits                                                 */
/* ------------------------------------------------------------------ */

typedef unsigned int pscom_req_state_t;

#define PSCOM_REQ_STATE_SEND_REQUEST       0x00000001
#define PSCOM_REQ_STATE_RECV_REQUEST       0x00000002
#define PSCOM_REQ_STATE_GRECV_REQUEST      0x00000004 /* generated (unexpected) */
#define PSCOM_REQ_STATE_POSTED             0x00000008
#define PSCOM_REQ_STATE_IO_STARTED         0x00000010
#define PSCOM_REQ_STATE_IO_DONE            0x00000020
#define PSCOM_REQ_STATE_ERROR              0x00000040
#define PSCOM_REQ_STATE_CANCELED           0x00000080
#define PSCOM_REQ_STATE_TRUNCATED          0x00000100
#define PSCOM_REQ_STATE_DONE               0x00000200
#define PSCOM_REQ_STATE_RMA_READ_REQUEST   0x00000400
#define PSCOM_REQ_STATE_RMA_WRITE_REQUEST  0x00000800
#define PSCOM_REQ_STATE_PASSIVE_SIDE       0x00001000
#define PSCOM_REQ_STATE_RENDEZVOUS_REQUEST 0x00002000
#define PSCOM_REQ_STATE_GRECV_MERGED       0x00004000

/* ------------------------------------------------------------------ */
/* Types                                                              */
/* ------------------------------------------------------------------ */

typedef struct PSCOM_socket pscom_socket_t;
typedef struct PSCOM_connection pscom_connection_t;
typedef struct PSCOM_request pscom_request_t;
typedef struct PSCOM_header_net pscom_header_net_t;
typedef struct PSCOM_con_info pscom_con_info_t;
typedef struct PSCOM_memh *pscom_memh_t;
typedef struct PSCOM_rkey *pscom_rkey_t;
typedef struct PSCOM_group pscom_group_t;

/* Members whose type an includer may choose (default: empty). */
#ifdef PSCOM_XHEADER_USER_TYPE
#define PSCOM_PRIV_XH_USER PSCOM_XHEADER_USER_TYPE user
#else
#define PSCOM_PRIV_XH_USER char user[0]
#endif
#ifdef PSCOM_XHEADER_RMA_PUT_USER_TYPE
#define PSCOM_PRIV_XH_PUT_USER PSCOM_XHEADER_RMA_PUT_USER_TYPE user
#else
#define PSCOM_PRIV_XH_PUT_USER char user[0]
#endif
#ifdef PSCOM_XHEADER_RMA_ACCUMULATE_USER_TYPE
#define PSCOM_PRIV_XH_ACC_USER PSCOM_XHEADER_RMA_ACCUMULATE_USER_TYPE user
#else
#define PSCOM_PRIV_XH_ACC_USER char user[0]
#endif
#ifdef PSCOM_XHEADER_RMA_GET_USER_TYPE
#define PSCOM_PRIV_XH_GET_USER PSCOM_XHEADER_RMA_GET_USER_TYPE user
#else
#define PSCOM_PRIV_XH_GET_USER char user[0]
#endif
#ifdef PSCOM_XHEADER_RMA_GET_ACCUMULATE_USER_TYPE
#define PSCOM_PRIV_XH_GET_ACC_USER PSCOM_XHEADER_RMA_GET_ACCUMULATE_USER_TYPE user
#else
#define PSCOM_PRIV_XH_GET_ACC_USER char user[0]
#endif
#ifdef PSCOM_XHEADER_RMA_FETCH_OP_USER_TYPE
#define PSCOM_PRIV_XH_FOP_USER PSCOM_XHEADER_RMA_FETCH_OP_USER_TYPE user
#else
#define PSCOM_PRIV_XH_FOP_USER char user[0]
#endif
#ifdef PSCOM_XHEADER_RMA_COMPARE_SWAP_USER_TYPE
#define PSCOM_PRIV_XH_CAS_USER PSCOM_XHEADER_RMA_COMPARE_SWAP_USER_TYPE user
#else
#define PSCOM_PRIV_XH_CAS_USER char user[0]
#endif
#ifdef PSCOM_SOCKET_USERDATA_TYPE
#define PSCOM_PRIV_SOCK_USERDATA PSCOM_SOCKET_USERDATA_TYPE userdata
#else
#define PSCOM_PRIV_SOCK_USERDATA char userdata[0]
#endif
#ifdef PSCOM_CONNECTION_USERDATA_TYPE
#define PSCOM_PRIV_CON_USERDATA PSCOM_CONNECTION_USERDATA_TYPE userdata
#else
#define PSCOM_PRIV_CON_USERDATA char userdata[0]
#endif

typedef struct PSCOM_rma_put_data {
    void *dest;
    void *memh;
} pscom_rma_put_data_t;

typedef struct PSCOM_rma_get_data {
    void *id;
    void *src;
    uint64_t src_len;
    void *memh;
} pscom_rma_get_data_t;

typedef struct PSCOM_xheader_rma_put {
    pscom_rma_put_data_t common;
    PSCOM_PRIV_XH_PUT_USER;
} pscom_xheader_rma_put_t;

typedef struct PSCOM_xheader_rma_accumulate {
    pscom_rma_put_data_t common;
    PSCOM_PRIV_XH_ACC_USER;
} pscom_xheader_rma_accumulate_t;

typedef struct PSCOM_xheader_rma_get {
    pscom_rma_get_data_t common;
    PSCOM_PRIV_XH_GET_USER;
} pscom_xheader_rma_get_t;

typedef struct PSCOM_xheader_rma_get_accumulate {
    pscom_rma_get_data_t common;
    PSCOM_PRIV_XH_GET_ACC_USER;
} pscom_xheader_rma_get_accumulate_t;

typedef struct PSCOM_xheader_rma_fetch_op {
    pscom_rma_get_data_t common;
    PSCOM_PRIV_XH_FOP_USER;
} pscom_xheader_rma_fetch_op_t;

typedef struct PSCOM_xheader_rma_compare_swap {
    pscom_rma_get_data_t common;
    PSCOM_PRIV_XH_CAS_USER;
} pscom_xheader_rma_compare_swap_t;

typedef struct PSCOM_xheader_rma_get_answer {
    void *id;
    void *req;
} pscom_xheader_rma_get_answer_t;

typedef struct PSCOM_xheader_rma_write {
    void *dest;
} pscom_xheader_rma_write_t;

typedef struct PSCOM_xheader_rma_read {
    void *id;
    void *src;
    uint64_t src_len;
} pscom_xheader_rma_read_t;

typedef struct PSCOM_xheader_rma_read_answer {
    void *id;
} pscom_xheader_rma_read_answer_t;

typedef struct PSCOM_xheader_rendezvous_fin {
    void *id;
} pscom_xheader_rendezvous_fin_t;

typedef struct PSCOM_xheader_bcast {
    uint32_t group_id;
    uint32_t bcast_root;
    uint32_t bcast_arg1; /* internal */
    uint32_t bcast_arg2; /* internal */
    char user[0];
} pscom_xheader_bcast_t;

typedef union PSCOM_xheader {
    pscom_xheader_rma_read_t rma_read;
    pscom_xheader_rma_read_answer_t rma_read_answer;
    pscom_xheader_rma_write_t rma_write;
    pscom_xheader_rendezvous_fin_t ren_fin;
    pscom_xheader_rma_get_t rma_get;
    pscom_xheader_rma_get_answer_t rma_get_answer;
    pscom_xheader_rma_put_t rma_put;
    pscom_xheader_rma_accumulate_t rma_accumulate;
    pscom_xheader_rma_get_accumulate_t rma_get_accumulate;
    pscom_xheader_rma_fetch_op_t rma_fetch_op;
    pscom_xheader_rma_compare_swap_t rma_compare_swap;
    pscom_xheader_bcast_t bcast;
    PSCOM_PRIV_XH_USER;
} pscom_xheader_t;

/* The 8-byte message header; it is also the header on the wire. */
struct PSCOM_header_net {
    uint16_t xheader_len; /* xheaders are limited to 65535 bytes */
    uint8_t msg_type;     /* pscom_msgtype_t (internal) */
    uint64_t data_len : 40;
    pscom_xheader_t xheader[0]; /* the xheader follows the header directly */
};

struct PSCOM_request_rma {
    void *origin_addr;
    void *target_addr;
    void *compare_addr;
    void *result_addr;
    pscom_rkey_t rkey;
};

struct PSCOM_request_ops {
    /* Predicate: accept this message? Called with the lock held; must not
     * call pscom. NULL accepts everything. */
    int (*recv_accept)(pscom_request_t *request, pscom_connection_t *connection,
                       pscom_header_net_t *header_net);
    /* Called once the request is DONE, without the lock. May free or
     * re-post the request. */
    void (*io_done)(pscom_request_t *request);
};

struct PSCOM_req_user;

struct PSCOM_request {
    pscom_req_state_t state;
    size_t xheader_len;
    size_t data_len;
    void *data;
    pscom_connection_t *connection;
    pscom_socket_t *socket;
    struct PSCOM_request_rma rma;
    struct PSCOM_request_ops ops;
    size_t user_size;
    struct PSCOM_req_user *user;
    size_t max_xheader_len;
    pscom_header_net_t header;
    pscom_xheader_t xheader; /* must directly follow header */
};

struct PSCOM_con_info {
    union {
        struct {
            int32_t portno;
        } tcp;
        struct {
            uint64_t jobid;
            uint32_t remote_sockid;
        } rrcomm;
    };
    int node_id;
    int rank;
    void *id;
    char name[8] PSCOM_V_NONSTRING;
};

struct PSCOM_socket_ops {
    void (*con_accept)(pscom_connection_t *new_connection);
    void (*con_error)(pscom_connection_t *connection, pscom_op_t operation,
                      pscom_err_t error);
    pscom_request_t *(*default_recv)(pscom_connection_t *connection,
                                     pscom_header_net_t *header_net);
};

struct PSCOM_socket {
    struct PSCOM_socket_ops ops;
    int listen_portno; /* -1 when not listening */
    pscom_con_info_t local_con_info;
    size_t connection_userdata_size;
    size_t userdata_size;
    PSCOM_PRIV_SOCK_USERDATA;
};

struct PSCOM_connection {
    pscom_socket_t *socket;
    pscom_con_state_t state;
    pscom_con_type_t type;
    pscom_con_info_t remote_con_info;
    size_t userdata_size;
    PSCOM_PRIV_CON_USERDATA;
};

/* ------------------------------------------------------------------ */
/* Init                                                               */
/* ------------------------------------------------------------------ */

pscom_err_t pscom_init(int pscom_version);
pscom_err_t pscom_init_thread(int pscom_version);
int pscom_get_nodeid(void);

/* ------------------------------------------------------------------ */
/* Sockets                                                            */
/* ------------------------------------------------------------------ */

pscom_socket_t *pscom_open_socket(size_t userdata_size,
                                  size_t connection_userdata_size,
                                  int local_rank, uint64_t socket_flags);
void pscom_socket_set_name(pscom_socket_t *socket, const char *name);
void pscom_close_socket(pscom_socket_t *socket);
int pscom_get_portno(pscom_socket_t *socket);

void pscom_con_type_mask_all(pscom_socket_t *socket);
void pscom_con_type_mask_only(pscom_socket_t *socket, pscom_con_type_t con_type);
void pscom_con_type_mask_add(pscom_socket_t *socket, pscom_con_type_t con_type);
void pscom_con_type_mask_del(pscom_socket_t *socket, pscom_con_type_t con_type);
int pscom_con_type_mask_is_set(pscom_socket_t *socket, pscom_con_type_t con_type);
void *pscom_con_type_mask_backup(pscom_socket_t *socket);
void pscom_con_type_mask_restore(pscom_socket_t *socket, void *con_type_mask_backup);

pscom_err_t pscom_listen(pscom_socket_t *socket, int portno);
void pscom_stop_listen(pscom_socket_t *socket);
void pscom_suspend_listen(pscom_socket_t *socket);
void pscom_resume_listen(pscom_socket_t *socket);
pscom_err_t pscom_socket_get_ep_str(pscom_socket_t *socket, char **ep_str);
void pscom_socket_free_ep_str(char *ep_str);

/* ------------------------------------------------------------------ */
/* Connections                                                        */
/* ------------------------------------------------------------------ */

pscom_connection_t *pscom_open_connection(pscom_socket_t *socket);
pscom_err_t pscom_connect(pscom_connection_t *connection, const char *ep_str,
                          int dest_rank, uint64_t connection_flags);
void pscom_close_connection(pscom_connection_t *connection);
void pscom_flush(pscom_connection_t *connection);
pscom_connection_t *pscom_get_next_connection(pscom_socket_t *socket,
                                              pscom_connection_t *con);

/* ------------------------------------------------------------------ */
/* Requests                                                           */
/* ------------------------------------------------------------------ */

pscom_request_t *pscom_request_create(size_t max_xheader_len, size_t user_size);
#define PSCOM_REQUEST_CREATE()                                                 \
    pscom_request_create(sizeof(PSCOM_XHEADER_USER_TYPE),                      \
                         sizeof(struct PSCOM_req_user))
void pscom_request_free(pscom_request_t *request);

void pscom_post_recv(pscom_request_t *request);
void pscom_post_send(pscom_request_t *request);

static inline pscom_request_t *
pscom_req_prepare(pscom_request_t *req, pscom_connection_t *connection,
                  void *data, size_t data_len, void *xheader, size_t xheader_len)
{
    req->connection  = connection;
    req->data        = data;
    req->data_len    = data_len;
    req->xheader_len = xheader_len;
    if (xheader) {
        assert(xheader_len <= req->max_xheader_len);
        /* without assert() (NDEBUG) never past the xheader area either: the
         * send of the too long xheader_len then ends with ERROR */
        memcpy(&req->xheader.user, xheader,
               xheader_len <= req->max_xheader_len ? xheader_len : req->max_xheader_len);
    }
    return req;
}

void pscom_send(pscom_connection_t *connection, void *xheader,
                size_t xheader_len, void *data, size_t data_len);
void pscom_send_inplace(pscom_connection_t *connection, void *xheader,
                        size_t xheader_len, void *data, size_t data_len,
                        void (*io_done)(pscom_req_state_t state, void *priv),
                        void *priv);
pscom_err_t pscom_recv(pscom_connection_t *connection, pscom_socket_t *socket,
                       void *xheader, size_t xheader_len, void *data,
                       size_t data_len);

static inline pscom_err_t pscom_recv_from(pscom_connection_t *connection,
                                          void *xheader, size_t xheader_len,
                                          void *data, size_t data_len)
{
    return pscom_recv(connection, connection->socket, xheader, xheader_len,
                      data, data_len);
}

static inline pscom_err_t pscom_recv_any(pscom_socket_t *socket, void *xheader,
                                         size_t xheader_len, void *data,
                                         size_t data_len)
{
    return pscom_recv(NULL, socket, xheader, xheader_len, data, data_len);
}

void pscom_wait(pscom_request_t *request);
void pscom_wait_all(pscom_request_t **requests);
int pscom_test_any(void);
void pscom_wait_any(void);

int pscom_cancel(pscom_request_t *request);
int pscom_cancel_send(pscom_request_t *request);
int pscom_cancel_recv(pscom_request_t *request);

int pscom_iprobe(pscom_request_t *request);
void pscom_probe(pscom_request_t *request);

/* A request's state may be read while another thread completes the request
 * (pscom_init_thread): an acquire load, so that whoever sees DONE also sees
 * the header, xheader and data (the library stores it with release order). */
#if defined(__GNUC__) || defined(__clang__)
#define PSCOM_REQ_STATE_LOAD(req) __atomic_load_n(&(req)->state, __ATOMIC_ACQUIRE)
#else
#define PSCOM_REQ_STATE_LOAD(req) ((req)->state)
#endif

static inline int pscom_req_state_successful(pscom_req_state_t state)
{
    return (state & (PSCOM_REQ_STATE_ERROR | PSCOM_REQ_STATE_CANCELED |
                     PSCOM_REQ_STATE_TRUNCATED | PSCOM_REQ_STATE_DONE)) ==
           PSCOM_REQ_STATE_DONE;
}

static inline int pscom_req_successful(pscom_request_t *req)
{
    return pscom_req_state_successful(PSCOM_REQ_STATE_LOAD(req));
}

static inline int pscom_req_state_is_done(pscom_req_state_t state)
{
    return state & PSCOM_REQ_STATE_DONE;
}

static inline int pscom_req_is_done(pscom_request_t *req)
{
    return pscom_req_state_is_done(PSCOM_REQ_STATE_LOAD(req));
}
#undef PSCOM_REQ_STATE_LOAD

/* ------------------------------------------------------------------ */
/* RMA                                                                */
/* ------------------------------------------------------------------ */

void pscom_post_rma_write(pscom_request_t *request);
void pscom_post_rma_read(pscom_request_t *request);

pscom_err_t pscom_mem_register(pscom_socket_t *socket, void *addr,
                               size_t length, pscom_memh_t *memh);
pscom_err_t pscom_mem_deregister(pscom_memh_t memh);
pscom_err_t pscom_rkey_buffer_pack(void **rkeybuf, size_t *bufsize,
                                   pscom_memh_t memh);
void pscom_rkey_buffer_release(void *rkey_buffer);
pscom_err_t pscom_rkey_generate(pscom_connection_t *connection, void *rkeybuf,
                                size_t bufsize, pscom_rkey_t *rkey);
pscom_err_t pscom_rkey_destroy(pscom_rkey_t rkey);

void pscom_post_rma_put(pscom_request_t *request);
void pscom_post_rma_get(pscom_request_t *request);
void pscom_post_rma_accumulate(pscom_request_t *request);
void pscom_post_rma_get_accumulate(pscom_request_t *request);
void pscom_post_rma_fetch_op(pscom_request_t *request);
void pscom_post_rma_compare_swap(pscom_request_t *request);
void pscom_register_rma_callbacks(void (*target_callback)(pscom_request_t *req),
                                  pscom_memh_t memh, pscom_rma_op_t rma_op);

/* ------------------------------------------------------------------ */
/* Groups                                                             */
/* ------------------------------------------------------------------ */

pscom_group_t *pscom_group_open(pscom_socket_t *socket, uint32_t group_id,
                                uint32_t my_grank, uint32_t group_size,
                                pscom_connection_t **connections);
void pscom_group_close(pscom_group_t *group);
pscom_group_t *pscom_group_find(pscom_socket_t *socket, uint32_t group_id);
uint32_t pscom_group_get_id(pscom_group_t *group);
void pscom_post_bcast(pscom_request_t *request);
void pscom_bcast(pscom_group_t *group, unsigned bcast_root, void *xheader,
                 size_t xheader_len, void *data, size_t data_len);
void pscom_barrier(pscom_group_t *group);

/* ------------------------------------------------------------------ */
/* Memory / CUDA                                                      */
/* ------------------------------------------------------------------ */

#ifdef PSCOM_CUDA_AWARENESS
void pscom_memcpy(void *dst, const void *src, size_t len);
int pscom_is_gpu_mem(const void *ptr);
#else
static inline void pscom_memcpy(void *dst, const void *src, size_t len)
{
    memcpy(dst, src, len);
}
#endif
int pscom_is_cuda_enabled(void);

/* ------------------------------------------------------------------ */
/* Debug, strings, environment                                        */
/* ------------------------------------------------------------------ */

void pscom_set_debug(int level);
void pscom_dump_connection(FILE *out, pscom_connection_t *connection);
void pscom_dump_reqstat(FILE *out);
void pscom_dump_info(FILE *out);

const char *pscom_con_state_str(pscom_con_state_t state);
const char *pscom_con_type_str(pscom_con_type_t type);
const char *pscom_con_info_str(pscom_con_info_t *con_info);
const char *pscom_con_info_str2(pscom_con_info_t *con_info1,
                                pscom_con_info_t *con_info2);
const char *pscom_con_str(pscom_connection_t *connection);
const char *pscom_req_state_str(pscom_req_state_t state);
const char *pscom_err_str(pscom_err_t error);
const char *pscom_op_str(pscom_op_t operation);
const char *pscom_dumpstr(const void *buf, size_t size);

void pscom_env_get_int(int *val, const char *name);
void pscom_env_get_uint(unsigned int *val, const char *name);
void pscom_env_get_size_t(size_t *val, const char *name);
void pscom_env_get_str(char **val, const char *name);
void pscom_env_get_dir(char **val, const char *name);
extern char *(*pscom_env_get)(const char *name);
extern int (*pscom_env_set)(const char *name, const char *value, int overwrite);

/* ------------------------------------------------------------------ */
/* Misc utilities                                                     */
/* ------------------------------------------------------------------ */

ssize_t pscom_writeall(int fd, const void *buf, size_t count);
ssize_t pscom_readall(int fd, void *buf, size_t count);
int pscom_atoport(const char *service, const char *proto);
int pscom_atoaddr(const char *address, struct in_addr *addr);
int pscom_ascii_to_sockaddr_in(const char *host, const char *port,
                               const char *protocol, struct sockaddr_in *addr);

#ifdef __cplusplus
#if 0
{ /* for editors */
#endif
}
#endif

#endif /* _PSCOM_H_ */
