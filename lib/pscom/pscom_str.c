/*
 * pscom_str.c - the public string functions of pscom.h (names of states,
 * types, operations and errors; connection info; hex dumps).
 *
 * Results live in static (per-thread) buffers that the next call of the
 * same function overwrites, as the API documents.
 */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pscom_types.h"

#define STR_SMALL 32
#define CON_INFO_STR_MAX 96

#define ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

PSCOM_API const char *pscom_con_state_str(pscom_con_state_t state)
{
    static _Thread_local char buf[STR_SMALL];

    switch (state) {
    case PSCOM_CON_STATE_NO_RW: return "norw";
    case PSCOM_CON_STATE_R: return "ro";
    case PSCOM_CON_STATE_W: return "wo";
    case PSCOM_CON_STATE_RW: return "open";
    case PSCOM_CON_STATE_CLOSED: return "closed";
    case PSCOM_CON_STATE_CONNECTING: return "connecting";
    case PSCOM_CON_STATE_ACCEPTING: return "accepting";
    case PSCOM_CON_STATE_CLOSE_WAIT: return "close_wait";
    case PSCOM_CON_STATE_CLOSING: return "closing";
    case PSCOM_CON_STATE_SUSPENDING: return "suspending";
    case PSCOM_CON_STATE_SUSPEND_SENT: return "susp_sent";
    case PSCOM_CON_STATE_SUSPEND_RECEIVED: return "susp_recv";
    case PSCOM_CON_STATE_SUSPENDED: return "suspended";
    case PSCOM_CON_STATE_CONNECTING_ONDEMAND: return "con_ondemand";
    case PSCOM_CON_STATE_ACCEPTING_ONDEMAND: return "acc_ondemand";
    }
    snprintf(buf, sizeof(buf), "state0x%x", (unsigned)state);
    return buf;
}

/* indexed by pscom_con_type_t */
static const char *const con_type_names[] = {
    "none", "loop", "tcp", "shm", "p4s <deprecated>", "gm", "mvapi", "openib",
    "elan", "dapl", "demand", "ofed", "extoll", "psm", "velo", "cbc", "mxm",
    "susp", "ucp", "gateway", "portals",
};
_Static_assert(ARRAY_LEN(con_type_names) == PSCOM_CON_TYPE_COUNT,
               "one name per pscom_con_type_t");

PSCOM_API const char *pscom_con_type_str(pscom_con_type_t type)
{
    static _Thread_local char buf[STR_SMALL];

    if ((unsigned)type < ARRAY_LEN(con_type_names)) return con_type_names[type];
    snprintf(buf, sizeof(buf), "type0x%x", (unsigned)type);
    return buf;
}

/* "(a.b.c.d:PORT P,RANK,ID,NAME)"; node_id is an IPv4 in host byte order */
static void con_info_format(char *buf, size_t size, const pscom_con_info_t *ci)
{
    unsigned ip = (unsigned)ci->node_id;

    snprintf(buf, size, "(%u.%u.%u.%u:%d P,%d,%p,%.8s)", (ip >> 24) & 0xff,
             (ip >> 16) & 0xff, (ip >> 8) & 0xff, ip & 0xff, (int)ci->tcp.portno,
             ci->rank, ci->id, ci->name);
}

PSCOM_API const char *pscom_con_info_str(pscom_con_info_t *con_info)
{
    static _Thread_local char buf[CON_INFO_STR_MAX];

    if (!con_info) return "(null)";
    con_info_format(buf, sizeof(buf), con_info);
    return buf;
}

PSCOM_API const char *pscom_con_info_str2(pscom_con_info_t *con_info1,
                                          pscom_con_info_t *con_info2)
{
    static _Thread_local char buf[2 * CON_INFO_STR_MAX + 8];
    char s1[CON_INFO_STR_MAX] = "(null)", s2[CON_INFO_STR_MAX] = "(null)";

    if (con_info1) con_info_format(s1, sizeof(s1), con_info1);
    if (con_info2) con_info_format(s2, sizeof(s2), con_info2);
    snprintf(buf, sizeof(buf), "%s to %s", s1, s2);
    return buf;
}

PSCOM_API const char *pscom_con_str(pscom_connection_t *connection)
{
    pscom_con_info_t local;

    if (!connection || !connection->socket) return "(null)";
    local = connection->socket->local_con_info;
    local.id = connection;
    return pscom_con_info_str2(&local, &connection->remote_con_info);
}

static const struct {
    pscom_req_state_t bit;
    const char *word;
} req_kind_words[] = {
    {PSCOM_REQ_STATE_SEND_REQUEST, "send"},
    {PSCOM_REQ_STATE_RECV_REQUEST, "recv"},
    {PSCOM_REQ_STATE_RMA_READ_REQUEST, "rmar"},
    {PSCOM_REQ_STATE_RMA_WRITE_REQUEST, "rmaw"},
    {PSCOM_REQ_STATE_RENDEZVOUS_REQUEST, "rdvu"},
};

static const struct {
    pscom_req_state_t bit;
    char letter;
} req_flag_letters[] = {
    {PSCOM_REQ_STATE_POSTED, 'P'},        {PSCOM_REQ_STATE_GRECV_REQUEST, 'g'},
    {PSCOM_REQ_STATE_PASSIVE_SIDE, 'p'},  {PSCOM_REQ_STATE_IO_STARTED, 's'},
    {PSCOM_REQ_STATE_IO_DONE, 'd'},       {PSCOM_REQ_STATE_ERROR, 'e'},
    {PSCOM_REQ_STATE_CANCELED, 'c'},      {PSCOM_REQ_STATE_TRUNCATED, 't'},
    {PSCOM_REQ_STATE_GRECV_MERGED, 'm'},
};

PSCOM_API const char *pscom_req_state_str(pscom_req_state_t state)
{
    static _Thread_local char buf[64];
    size_t len = 0;

    buf[0] = '\0';
    for (size_t i = 0; i < ARRAY_LEN(req_kind_words); i++) {
        if (state & req_kind_words[i].bit) {
            strcpy(buf + len, req_kind_words[i].word);
            len += strlen(req_kind_words[i].word);
        }
    }
    buf[len++] = '(';
    for (size_t i = 0; i < ARRAY_LEN(req_flag_letters); i++) {
        buf[len++] = (state & req_flag_letters[i].bit) ? req_flag_letters[i].letter : '.';
    }
    buf[len++] = ')';
    buf[len] = '\0';
    if (state & PSCOM_REQ_STATE_DONE) strcpy(buf + len, "done");
    return buf;
}

PSCOM_API const char *pscom_err_str(pscom_err_t error)
{
    static _Thread_local char buf[STR_SMALL];

    switch (error) {
    case PSCOM_SUCCESS: return "success";
    case PSCOM_ERR_STDERROR: return strerror(errno);
    case PSCOM_ERR_INVALID: return "Invalid argument";
    case PSCOM_ERR_ALREADY: return "Operation already in progress";
    case PSCOM_NOT_IMPLEMENTED: return "Function not implemented";
    case PSCOM_ERR_EOF: return "End of file";
    case PSCOM_ERR_IOERROR: return "IO Error";
    case PSCOM_ERR_UNSUPPORTED_VERSION: return "Unsupported version";
    case PSCOM_ERR_CONNECTION_REFUSED: return "Connection refused";
    }
    snprintf(buf, sizeof(buf), "error %d", (int)error);
    return buf;
}

PSCOM_API const char *pscom_op_str(pscom_op_t operation)
{
    static _Thread_local char buf[STR_SMALL];

    switch (operation) {
    case PSCOM_OP_READ: return "read";
    case PSCOM_OP_WRITE: return "write";
    case PSCOM_OP_CONNECT: return "connect";
    case PSCOM_OP_RW: return "rw";
    }
    snprintf(buf, sizeof(buf), "op%u", (unsigned)operation);
    return buf;
}

/* "<xx>" per byte, a space, then the bytes in double quotes with
 * non-printable ones shown as '.'; e.g. "<41><0a> \"A.\"". */
PSCOM_API const char *pscom_dumpstr(const void *buf, size_t size)
{
    /* per thread, as the other strings of this file (pscom_init_thread) */
    static _Thread_local char *out;
    static _Thread_local size_t out_size;
    const unsigned char *p = buf;
    size_t need, len = 0;
    char *tmp;

    if (!p) size = 0;
    need = size * 5 + 4;
    if (need > out_size) {
        tmp = realloc(out, need);
        if (!tmp) return "<out of memory>";
        out = tmp;
        out_size = need;
    }
    for (size_t i = 0; i < size; i++) len += (size_t)sprintf(out + len, "<%02x>", p[i]);
    out[len++] = ' ';
    out[len++] = '"';
    for (size_t i = 0; i < size; i++) out[len++] = isprint(p[i]) ? (char)p[i] : '.';
    out[len++] = '"';
    out[len] = '\0';
    return out;
}
