/*
 * pscom_dump.c - human-readable dumps of requests, sockets, connections,
 * descriptors and statistics (pscom_dump_*, PSP_DEBUG_STATS, PSP_SIGQUIT).
 */
#define _GNU_SOURCE
#include "pscom_dump.h"

#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "pscom_con.h"
#include "pscom_core.h"
#include "pscom_log.h"
#include "pscom_req.h"
#include "pscom_sock.h"

#define DUMP_QUEUE_MAX 8   /* requests listed per queue */
#define DUMP_FDS_MAX   256 /* descriptors listed */

PSCOM_API void pscom_dump_connection(FILE *out, pscom_connection_t *connection)
{
    pscom_api_check(out, "a stream to print to");
    pscom_api_check_con(connection);
    pscom_con_t *con = pscom_con_from_pub(connection);
    fprintf(out, "con %p %s %-7s %s sendq:%zu recvq:%zu unexpected:%zu\n", (void *)connection,
            pscom_con_type_str(connection->type), pscom_con_state_str(connection->state),
            pscom_con_info_str(&connection->remote_con_info), pscom_list_count(&con->sendq),
            pscom_list_count(&con->recvq_user), pscom_list_count(&con->genrecvq));
}

void pscom_reqstat_str(char *buf, size_t size)
{
    const pscom_stats_t *s = &pscom.stats;
    snprintf(buf, size,
             "requests created:%llu freed:%llu unexpected:%llu probes:%llu (matched %llu) "
             "rendezvous sent:%llu received:%llu progress passes:%llu sleeps:%llu",
             (unsigned long long)s->reqs_created, (unsigned long long)s->reqs_freed,
             (unsigned long long)s->gen_reqs, (unsigned long long)s->probes,
             (unsigned long long)s->iprobes_ok, (unsigned long long)s->rndv_sends,
             (unsigned long long)s->rndv_recvs, (unsigned long long)s->progress_passes,
             (unsigned long long)s->sleeps);
}

PSCOM_API void pscom_dump_reqstat(FILE *out)
{
    pscom_api_check(out, "a stream to print to");
    char line[256];
    pscom_reqstat_str(line, sizeof(line));
    fprintf(out, "%s\n", line);
}

/* The requests of queue q (linked by next), the first DUMP_QUEUE_MAX. */
static void dump_queue(FILE *out, const char *indent, const char *what, pscom_list_t *q)
{
    size_t n = 0;
    pscom_list_t *pos;
    pscom_list_for_each(pos, q) {
        if (n++ >= DUMP_QUEUE_MAX) continue;
        pscom_req_t *req = pscom_list_entry(pos, pscom_req_t, next);
        fprintf(out, "%s%s req %p %s len %zu xheader %zu\n", indent, what, (void *)&req->pub,
                pscom_req_state_str(req->pub.state), req->pub.data_len,
                req->pub.xheader_len);
    }
    if (n > DUMP_QUEUE_MAX) fprintf(out, "%s... %zu more\n", indent, n - DUMP_QUEUE_MAX);
}

/* The process's descriptors and what they are (/proc/self/fd). */
static void dump_fds(FILE *out)
{
    DIR *dir = opendir("/proc/self/fd");
    if (!dir) return;
    size_t n = 0;
    struct dirent *de;
    fprintf(out, "fds:\n");
    while ((de = readdir(dir))) {
        char target[256];
        if (de->d_name[0] == '.' || atoi(de->d_name) == dirfd(dir)) continue;
        if (n++ >= DUMP_FDS_MAX) continue;
        ssize_t len = readlinkat(dirfd(dir), de->d_name, target, sizeof(target) - 1);
        target[len > 0 ? len : 0] = '\0';
        fprintf(out, "  fd %s %s\n", de->d_name, target);
    }
    if (n > DUMP_FDS_MAX) fprintf(out, "  ... %zu more\n", n - DUMP_FDS_MAX);
    closedir(dir);
}

static void dump_info_locked(FILE *out)
{
    pscom_list_t *pos, *cpos;
    if (!pscom_list_empty(&pscom.requests)) {
        fprintf(out, "requests:\n");
        pscom_list_for_each(pos, &pscom.requests) {
            pscom_req_t *req = pscom_list_entry(pos, pscom_req_t, all);
            fprintf(out, "  req %p %s len %zu\n", (void *)&req->pub,
                    pscom_req_state_str(req->pub.state), req->pub.data_len);
        }
    }
    if (!pscom_list_empty(&pscom.recvq_any_global)) {
        fprintf(out, "receives from any socket:\n");
        dump_queue(out, "  ", "posted recv", &pscom.recvq_any_global);
    }
    pscom_list_for_each(pos, &pscom.sockets) {
        pscom_sock_t *sock = pscom_list_entry(pos, pscom_sock_t, next);
        fprintf(out, "socket %p %s port %d any-recvs:%zu unexpected:%zu\n", (void *)&sock->pub,
                pscom_con_info_str(&sock->pub.local_con_info), sock->pub.listen_portno,
                pscom_list_count(&sock->recvq_any), pscom_list_count(&sock->genrecvq_any));
        dump_queue(out, "  ", "posted recv", &sock->recvq_any);
        pscom_list_for_each(cpos, &sock->connections) {
            pscom_con_t *con = pscom_list_entry(cpos, pscom_con_t, sock_next);
            fprintf(out, "  ");
            pscom_dump_connection(out, &con->pub);
            dump_queue(out, "    ", "posted recv", &con->recvq_user);
            dump_queue(out, "    ", "send", &con->sendq);
        }
    }
    dump_fds(out);
    pscom_dump_reqstat(out);
}

PSCOM_API void pscom_dump_info(FILE *out)
{
    pscom_api_check(out, "a stream to print to");
    pscom_lock();
    dump_info_locked(out);
    pscom_unlock();
}

void pscom_dump_info_log(const char *why)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f    = open_memstream(&text, &len);
    if (!f) {
        plog_err("%s: cannot dump: open_memstream() failed: %m", why);
        return;
    }
    dump_info_locked(f);
    if (fclose(f) == 0 && text) {
        pscom_log_print("%s: dump of requests, sockets, connections, fds and statistics\n"
                        "%s%s: end of dump",
                        why, text, why);
    }
    free(text);
}
