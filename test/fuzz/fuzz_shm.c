/*
 * fuzz_shm.c - the receiving side of the shm transport against any packets
 * a peer writes into its ring: packet headers (length, type, head length,
 * gap), RNDV announcements (a message head and the address and length of
 * the data in the peer), ACKs and WRAPs, anywhere in the ring.
 *
 * The peer is real: a client socket of this process connects to a server
 * socket over shm, and the harness writes the input's packets into the
 * server's receive ring through the client's producer state, as the client
 * would (shm_ring_reserve/publish, or a header of any bytes at the
 * client's position). The server's single copy reads from this process.
 * Its ring (PSP_SHM_RING_SIZE=16384) is moved in front of an inaccessible
 * page, so that a read past the ring faults at once.
 *
 * One input is two bytes of set-up and the packets:
 *
 *   byte 0  bits 0-1: receives the server posts first (0-3)
 *           bit 2:    the client sends a real message first (the ring
 *                     positions move on)
 *           bit 3:    the server sends a message of FUZZ_SHM_BIG bytes
 *                     first (single copy: it then waits for an ACK)
 *           bit 4:    the server progresses after every fourth packet
 *                     only (packets pile up)
 *           bits 5-7: j: unless 0, the client first fills j + 1 eighths
 *                     of the ring, less a line, with PAD messages (7: the
 *                     packets start on the ring's last line)
 *   byte 1  receive buffers of 64 x byte bytes
 *   rest    packets; each is an op byte, then
 *             bits 0-2 (kind) DATA, RNDV, ACK, WRAP, HEADER, MSG:
 *               DATA/MSG  len (2 bytes LE, below the ring's largest
 *                         payload), head bytes hl (1 byte, at most len),
 *                         then len bytes; gap = op bits 3-7 (at most
 *                         len - hl). MSG: the harness writes a USER
 *                         message header into the first 8 bytes (xheader
 *                         hl - 8 bytes, data the rest).
 *               RNDV      hl (1 byte), hl head bytes, 16 bytes {src, len};
 *                         op bit 3: src and len become a buffer of this
 *                         process (fuzz_src; bit 5: src only, the length
 *                         stays), op bit 4: a consistent USER message
 *                         header (else they are as given)
 *               ACK       16 bytes {done, status, reserved}
 *               WRAP      nothing: the client goes on at the ring's
 *                         start (from the ring's second half only)
 *               HEADER    4 bytes len, 4 bytes info: a header of any bytes
 *                         at the client's position (one line taken)
 *           bytes beyond the input's end are zeros.
 *
 * What must hold (else abort(), which libFuzzer and the driver report): no
 * memory error, no read past the server's ring, and once both sides closed
 * the connection (and, where the packets left the two out of step so that
 * the EOFs cannot pass, the client died: its end of the handshake socket
 * shut down), every request is done and neither socket holds a
 * connection. The server gets no more packets once its side of the
 * connection stopped reading or closed.
 *
 * Built twice: with libFuzzer (PSCOM_FUZZ, clang) and with fuzz_shm_gen.c
 * and fuzz_driver.c as the ctest test fuzz_shm.
 */
#define _GNU_SOURCE
#include "fuzz_shm.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include "fuzz_bytes.h"
#include "fuzz_driver.h" /* FUZZ_CHECK */
#include "fuzz_tcp.h"
#include "pscom.h"
#include "pscom_con.h"
#include "pscom_core.h"
#include "pscom_progress.h"
#include "pscom_wire.h"
#include "shm_priv.h"

static pscom_socket_t *server, *client;
static int server_port;
static pscom_connection_t *accepted;
static char fuzz_src[FUZZ_SHM_SRC_LEN]; /* what RNDV packets may point at */
static char big_msg[FUZZ_SHM_BIG];
fuzz_shm_result_t fuzz_shm_last;

static void on_accept(pscom_connection_t *con)
{
    accepted = con;
}

static void sockets_open(void)
{
    server                 = fuzz_tcp_pscom_socket("fuzzsrv");
    server->ops.con_accept = on_accept;
    server_port            = pscom_get_portno(server);
    client                 = fuzz_tcp_pscom_socket("fuzzcli");
    for (size_t i = 0; i < sizeof(fuzz_src); i++) fuzz_src[i] = (char)(i * 7);
}

static shm_con_t *shm_of(pscom_connection_t *c)
{
    return shm_con(pscom_con_from_pub(c));
}

/* Move the server's receive segment in front of a page without access. */
static void *guard_ring(shm_con_t *sc)
{
    size_t size = sc->rx_seg.size;
    char *room  = mmap(NULL, size + 4096, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    FUZZ_CHECK(room != MAP_FAILED);
    void *moved = mremap(sc->rx_seg.base, size, size, MREMAP_MAYMOVE | MREMAP_FIXED, room);
    FUZZ_CHECK(moved == room);
    sc->rx_seg.base = room;
    sc->rx.ring     = shm_seg_ring(&sc->rx_seg);
    sc->rx.consumed = &shm_seg_hdr(&sc->rx_seg)->consumed;
    return room + size;
}

/* ---- the input ------------------------------------------------------------------- */

/* fuzz_in_t, in_byte() ... in_u32(): fuzz_bytes.h */

/* ---- writing as the client -------------------------------------------------------- */

/* Can the harness still write into the server's ring? */
static int ring_open(shm_con_t *cli, shm_con_t *srv)
{
    return !cli->closed && !srv->closed && !srv->read_stopped;
}

/* Let the server read what is in its ring. */
static void server_read(shm_con_t *cli, shm_con_t *srv)
{
    for (unsigned pass = 0; pass < 64 && ring_open(cli, srv); pass++) {
        pscom_test_any();
        if (ring_open(cli, srv) && atomic_load(srv->rx.consumed) == cli->tx.pos && !srv->busy)
            break;
    }
}

/* A packet of len payload bytes, reserved in the server's ring (the
 * server reads to make room), or NULL. */
static shm_pkt_t *reserve(shm_con_t *cli, shm_con_t *srv, uint32_t len)
{
    shm_pkt_t *pkt = shm_ring_reserve(&cli->tx, len);
    if (!pkt && ring_open(cli, srv)) {
        server_read(cli, srv);
        if (ring_open(cli, srv)) pkt = shm_ring_reserve(&cli->tx, len);
    }
    return pkt;
}

/* One packet of the input. Returns 0 when the ring takes no more. */
static int put_packet(fuzz_in_t *in, shm_con_t *cli, shm_con_t *srv)
{
    uint8_t op     = in_byte(in);
    unsigned kind  = op & 7;
    uint32_t maxp  = shm_ring_max_payload(cli->tx.mask + 1);
    shm_pkt_t *pkt = NULL;
    switch (kind) {
    case 0:   /* DATA */
    case 5: { /* MSG */
        uint32_t len = in_u16(in) % (maxp + 1);
        uint32_t hl  = in_byte(in);
        if (hl > len) hl = len;
        uint32_t gap = op >> 3;
        if (gap > len - hl) gap = len - hl;
        if (!(pkt = reserve(cli, srv, len))) return 0;
        char *p = shm_pkt_payload(pkt);
        in_bytes(in, p, len);
        uint32_t x = hl >= PSCOM_WIRE_HEADER_SIZE ? hl - PSCOM_WIRE_HEADER_SIZE : 0;
        if (kind == 5 && len - gap >= PSCOM_WIRE_HEADER_SIZE + x)
            pscom_wire_header_encode(p, (uint16_t)x, PSCOM_MSGTYPE_USER,
                                     len - gap - PSCOM_WIRE_HEADER_SIZE - x);
        shm_ring_publish(&cli->tx, pkt, len, SHM_PKT_DATA, hl, gap);
        return 1;
    }
    case 1: { /* RNDV */
        uint32_t hl = in_byte(in);
        if (!(pkt = reserve(cli, srv, hl + sizeof(shm_rndv_t)))) return 0;
        char *p = shm_pkt_payload(pkt);
        in_bytes(in, p, hl);
        shm_rndv_t rd;
        in_bytes(in, &rd, sizeof(rd));
        if ((op & 8) && (op & 32)) { /* the receiver reads what its buffer takes */
            rd.src = (uint64_t)(uintptr_t)fuzz_src + rd.src % FUZZ_SHM_SRC_LEN;
        } else if (op & 8) {
            rd.len %= FUZZ_SHM_SRC_LEN;
            rd.src = (uint64_t)(uintptr_t)fuzz_src + rd.src % (FUZZ_SHM_SRC_LEN - rd.len + 1);
        }
        if ((op & 16) && hl >= PSCOM_WIRE_HEADER_SIZE)
            pscom_wire_header_encode(p, (uint16_t)(hl - PSCOM_WIRE_HEADER_SIZE),
                                     PSCOM_MSGTYPE_USER, rd.len);
        memcpy(p + hl, &rd, sizeof(rd));
        shm_ring_publish(&cli->tx, pkt, hl + (uint32_t)sizeof(rd), SHM_PKT_RNDV, hl, 0);
        return 1;
    }
    case 2: { /* ACK */
        if (!(pkt = reserve(cli, srv, sizeof(shm_ack_t)))) return 0;
        in_bytes(in, shm_pkt_payload(pkt), sizeof(shm_ack_t));
        shm_ring_publish(&cli->tx, pkt, sizeof(shm_ack_t), SHM_PKT_ACK, 0, 0);
        return 1;
    }
    case 3: { /* WRAP: the consumer goes on at the ring's start */
        uint64_t off = cli->tx.pos & cli->tx.mask;
        /* the producer's count of free space takes the skipped part as
         * used until the consumer's next packet: only a wrap from the
         * second half leaves room at the start (as the client's own) */
        if (off <= cli->tx.mask / 2) return 1;
        if (!(pkt = reserve(cli, srv, 0))) return 0;
        shm_ring_publish(&cli->tx, pkt, 0, SHM_PKT_WRAP, 0, 0);
        cli->tx.pos += cli->tx.mask + 1 - off - shm_pkt_size(0);
        return 1;
    }
    default: { /* HEADER: any bytes in one line */
        uint32_t len  = in_u32(in);
        uint32_t info = in_u32(in);
        if (!(pkt = reserve(cli, srv, 0))) return 0;
        pkt->len  = len;
        pkt->info = info;
        atomic_store_explicit(&pkt->stamp, cli->tx.pos + 1, memory_order_release);
        cli->tx.pos += shm_pkt_size(0);
        return 1;
    }
    }
}

/* k / 8 of the ring, less a line, in packets of PAD messages (the core
 * drops them): 64 bytes each (8 of header, 56 of data), the last 48 */
static void fill_ring(shm_con_t *cli, shm_con_t *srv, unsigned k)
{
    uint64_t R   = cli->tx.mask + 1;
    uint64_t end = cli->tx.pos + k * R / 8 - SHM_CL;
    while (cli->tx.pos < end) {
        uint64_t size = end - cli->tx.pos < R / 8 ? end - cli->tx.pos : R / 8;
        uint32_t len  = (uint32_t)size - SHM_PKT_HDR; /* shm_pkt_size(len) == size */
        shm_pkt_t *pkt = reserve(cli, srv, len);
        if (!pkt) return;
        char *p = shm_pkt_payload(pkt);
        for (uint32_t off = 0; off < len; off += 64) {
            uint32_t n = len - off < 64 ? len - off : 64;
            pscom_wire_header_encode(p + off, 0, PSCOM_MSGTYPE_PAD, n - PSCOM_WIRE_HEADER_SIZE);
            memset(p + off + PSCOM_WIRE_HEADER_SIZE, 0, n - PSCOM_WIRE_HEADER_SIZE);
        }
        shm_ring_publish(&cli->tx, pkt, len, SHM_PKT_DATA, 0, 0);
    }
}

/* ---- one input --------------------------------------------------------------------- */

static pscom_request_t *post(pscom_connection_t *c, size_t len, int send, void *buf)
{
    pscom_request_t *r = pscom_request_create(0, 0);
    FUZZ_CHECK(r != NULL);
    r->connection = c;
    r->data       = buf;
    r->data_len   = len;
    if (send) {
        pscom_post_send(r);
    } else {
        pscom_post_recv(r);
    }
    return r;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2) return 0;
    if (!server) sockets_open();
    char ep[64];
    snprintf(ep, sizeof(ep), "127.0.0.1:%d", server_port);
    pscom_connection_t *c = pscom_open_connection(client);
    FUZZ_CHECK(c != NULL);
    accepted = NULL;
    FUZZ_CHECK(pscom_connect(c, ep, PSCOM_RANK_UNDEFINED, PSCOM_CON_FLAG_DIRECT) ==
               PSCOM_SUCCESS);
    for (unsigned pass = 0; !accepted; pass++) {
        FUZZ_CHECK(pass < FUZZ_TCP_PASSES);
        pscom_test_any();
    }
    pscom_connection_t *s = accepted;
    FUZZ_CHECK(c->type == PSCOM_CON_TYPE_SHM && s->type == PSCOM_CON_TYPE_SHM);
    shm_con_t *cli = shm_of(c), *srv = shm_of(s);
    char *guard    = guard_ring(srv);
    int peer_fd    = dup(cli->ufd.fd); /* the handshake socket: the server's peer death detector */
    FUZZ_CHECK(peer_fd >= 0);

    /* the set-up */
    size_t blen = 64u * data[1];
    char *bufs  = malloc(3 * blen + 1);
    FUZZ_CHECK(bufs != NULL);
    pscom_request_t *recvs[3] = {NULL}, *sends[2] = {NULL};
    for (unsigned i = 0; i < (data[0] & 3u) && i < 3; i++) recvs[i] = post(s, blen, 0, bufs + i * blen);
    if (data[0] & 4) sends[0] = post(c, 8, 1, "fuzzshm!");
    if (data[0] & 8) sends[1] = post(s, sizeof(big_msg), 1, big_msg);
    if (data[0] >> 5) fill_ring(cli, srv, (data[0] >> 5) + 1u);
    server_read(cli, srv);

    /* the packets */
    uint64_t progress0 = pscom.progress_counter;
    fuzz_in_t in       = {.p = data + 2, .left = size - 2};
    for (unsigned n = 1; in.left && ring_open(cli, srv); n++) {
        if (!put_packet(&in, cli, srv)) break;
        if (!(data[0] & 16) || !(n % 4)) server_read(cli, srv);
    }
    server_read(cli, srv);
    fuzz_shm_last = (fuzz_shm_result_t){.server_stopped = srv->closed || srv->read_stopped,
                                        .progress       = pscom.progress_counter - progress0};
    for (unsigned i = 0; i < 3; i++)
        if (recvs[i] && pscom_req_successful(recvs[i])) fuzz_shm_last.recvs_ok++;
    if (recvs[0]) {
        fuzz_shm_last.first_len = recvs[0]->header.data_len;
        memcpy(fuzz_shm_last.first, bufs,
               blen < sizeof(fuzz_shm_last.first) ? blen : sizeof(fuzz_shm_last.first));
    }

    /* both sides close. A peer whose packets left the server reading
     * elsewhere in the ring never gets (nor sends) the EOF: it dies. Then
     * everything ends. */
    pscom_close_connection(c);
    pscom_close_connection(s);
    fuzz_shm_last.peer_died = !fuzz_tcp_settled(server, client, FUZZ_SHM_CLOSE_PASSES);
    if (fuzz_shm_last.peer_died) {
        shutdown(peer_fd, SHUT_RDWR);
        /* its end is seen where the fds are polled: at once with a timeout
         * (a pass without one looks at them once per clock tick) */
        for (unsigned i = 0; i < FUZZ_SHM_CLOSE_PASSES && !fuzz_tcp_settled(server, client, 1);
             i++)
            pscom_progress(1);
    }
    close(peer_fd);
    fuzz_tcp_await_no_connection(server);
    fuzz_tcp_await_no_connection(client);
    for (unsigned i = 0; i < 3; i++) fuzz_tcp_await_done(recvs[i]);
    for (unsigned i = 0; i < 2; i++) fuzz_tcp_await_done(sends[i]);
    munmap(guard, 4096);
    free(bufs);
    return 0;
}
