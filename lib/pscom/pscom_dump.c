/*
 * pscom_dump.c - human-readable dumps of requests, sockets, connections
 * and statistics (pscom_dump_*, PSP_DEBUG_STATS).
 */
#include <stdio.h>

#include "pscom_con.h"
#include "pscom_core.h"
#include "pscom_req.h"
#include "pscom_sock.h"

PSCOM_API void pscom_dump_connection(FILE *out, pscom_connection_t *connection)
{
    pscom_con_t *con = pscom_con_from_pub(connection);
    fprintf(out, "con %p %s %-7s %s sendq:%zu recvq:%zu unexpected:%zu\n", (void *)connection,
            pscom_con_type_str(connection->type), pscom_con_state_str(connection->state),
            pscom_con_info_str(&connection->remote_con_info), pscom_list_count(&con->sendq),
            pscom_list_count(&con->recvq_user), pscom_list_count(&con->genrecvq));
}

PSCOM_API void pscom_dump_reqstat(FILE *out)
{
    const pscom_stats_t *s = &pscom.stats;
    fprintf(out,
            "requests created:%llu freed:%llu unexpected:%llu probes:%llu (matched %llu) "
            "progress passes:%llu sleeps:%llu\n",
            (unsigned long long)s->reqs_created, (unsigned long long)s->reqs_freed,
            (unsigned long long)s->gen_reqs, (unsigned long long)s->probes,
            (unsigned long long)s->iprobes_ok, (unsigned long long)s->progress_passes,
            (unsigned long long)s->sleeps);
}

PSCOM_API void pscom_dump_info(FILE *out)
{
    pscom_lock();
    pscom_list_t *pos, *cpos;
    if (!pscom_list_empty(&pscom.requests)) {
        fprintf(out, "requests:\n");
        pscom_list_for_each(pos, &pscom.requests) {
            pscom_req_t *req = pscom_list_entry(pos, pscom_req_t, all);
            fprintf(out, "  req %p %s len %zu\n", (void *)&req->pub,
                    pscom_req_state_str(req->pub.state), req->pub.data_len);
        }
    }
    pscom_list_for_each(pos, &pscom.sockets) {
        pscom_sock_t *sock = pscom_list_entry(pos, pscom_sock_t, next);
        fprintf(out, "socket %p %s port %d any-recvs:%zu unexpected:%zu\n", (void *)&sock->pub,
                pscom_con_info_str(&sock->pub.local_con_info), sock->pub.listen_portno,
                pscom_list_count(&sock->recvq_any), pscom_list_count(&sock->genrecvq_any));
        pscom_list_for_each(cpos, &sock->connections) {
            pscom_con_t *con = pscom_list_entry(cpos, pscom_con_t, sock_next);
            fprintf(out, "  ");
            pscom_dump_connection(out, &con->pub);
        }
    }
    pscom_dump_reqstat(out);
    pscom_unlock();
}
