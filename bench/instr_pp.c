/*
 * instr_pp.c - an 8 B ping-pong whose client side executes the same
 * instructions every round trip, for bench/instr.sh (callgrind).
 *
 *   instr_pp s FIFO            server: prints "EP <endpoint>", echoes every
 *                              message and, after each reply, writes one byte
 *                              into FIFO
 *   instr_pp c EP FIFO N [XH]  client: N round trips with an XH-byte xheader
 *                              (default 12, as pscom_pp); before it waits for
 *                              a reply it reads the server's byte, so the reply
 *                              is there when it looks: no idle polling passes,
 *                              whose number would depend on timing
 *
 * Only pp_loop() is counted (callgrind --toggle-collect=pp_loop); the read()
 * on the FIFO is subtracted by the script.
 */
#include <fcntl.h>
#include <pscom.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_XH 100

__attribute__((noinline)) int pp_loop(pscom_connection_t *con, int fd, long n, unsigned xh,
                                     pscom_request_t *rreq, pscom_request_t *sreq, char *sbuf,
                                     char *rbuf)
{
    for (long i = 0; i < n; i++) {
        char b;
        rreq->connection  = con;
        rreq->socket      = con->socket;
        rreq->xheader_len = MAX_XH;
        rreq->data        = rbuf;
        rreq->data_len    = 8;
        pscom_post_recv(rreq);
        sreq->connection  = con;
        sreq->xheader_len = xh;
        sreq->data        = sbuf;
        sreq->data_len    = 8;
        pscom_post_send(sreq);
        pscom_wait(sreq);
        if (read(fd, &b, 1) != 1) return 3;
        pscom_wait(rreq);
        if (!pscom_req_successful(rreq) || !pscom_req_successful(sreq)) return 2;
    }
    return 0;
}

static int server(pscom_socket_t *sock, const char *fifo, pscom_request_t *rreq,
                  pscom_request_t *sreq)
{
    char buf[64] = "instr_pp", *ep;
    if (pscom_listen(sock, PSCOM_ANYPORT) != PSCOM_SUCCESS) return 1;
    if (pscom_socket_get_ep_str(sock, &ep) != PSCOM_SUCCESS) return 1;
    printf("EP %s\n", ep);
    fflush(stdout);
    int fd = open(fifo, O_RDWR); /* O_RDWR: does not wait for the client to open it */
    if (fd < 0) return 1;
    for (;;) {
        char b = 1;
        rreq->connection  = NULL;
        rreq->socket      = sock;
        rreq->xheader_len = MAX_XH;
        rreq->data        = buf;
        rreq->data_len    = sizeof(buf);
        pscom_post_recv(rreq);
        pscom_wait(rreq);
        if (!pscom_req_successful(rreq)) return 0; /* the client is gone */
        sreq->connection  = rreq->connection;
        sreq->xheader_len = rreq->header.xheader_len;
        memcpy(&sreq->xheader, &rreq->xheader, sreq->xheader_len);
        sreq->data     = buf;
        sreq->data_len = rreq->header.data_len;
        pscom_post_send(sreq);
        pscom_wait(sreq);
        if (write(fd, &b, 1) != 1) return 1;
    }
}

int main(int argc, char **argv)
{
    if (argc < 3 || (argv[1][0] == 'c' && argc < 5)) {
        fprintf(stderr, "usage: %s s FIFO | %s c EP FIFO N [XH]\n", argv[0], argv[0]);
        return 1;
    }
    if (pscom_init(PSCOM_VERSION) != PSCOM_SUCCESS) return 1;
    pscom_socket_t *sock =
        pscom_open_socket(0, 0, PSCOM_RANK_UNDEFINED, PSCOM_SOCK_FLAG_INTER_JOB);
    pscom_request_t *rreq = pscom_request_create(MAX_XH, 0);
    pscom_request_t *sreq = pscom_request_create(MAX_XH, 0);
    if (!sock || !rreq || !sreq) return 1;
    if (argv[1][0] == 's') return server(sock, argv[2], rreq, sreq);

    char sbuf[64] = "abcdefg", rbuf[64];
    long n      = atol(argv[4]);
    unsigned xh = argc > 5 ? (unsigned)atoi(argv[5]) : 12;
    if (n < 1 || xh > MAX_XH) return 1;
    pscom_connection_t *con = pscom_open_connection(sock);
    if (!con || pscom_connect(con, argv[2], PSCOM_RANK_UNDEFINED, PSCOM_CON_FLAG_DIRECT) !=
                    PSCOM_SUCCESS)
        return 1;
    int fd = open(argv[3], O_RDONLY);
    if (fd < 0) return 1;
    int rc = pp_loop(con, fd, n, xh, rreq, sreq, sbuf, rbuf);
    pscom_close_connection(con);
    return rc;
}
