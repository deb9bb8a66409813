/*
 * fuzz_shm_gen.c - the ctest side of the fuzz target fuzz_shm.c (run by
 * fuzz_driver.c):
 *   1. valid packets deliver: USER messages in ring packets (with a gap,
 *      and behind a WRAP) and by single copy reach the posted receives;
 *      a packet that would end past the ring stops the server with a
 *      protocol error instead of a read past the ring;
 *   2. sequences of plausible packets of every kind, then damaged.
 */
#include <string.h>

#include "fuzz_bytes.h"
#include "fuzz_driver.h"
#include "fuzz_shm.h"

/* a shm connection each (two 20 KiB segments) and a TCP connection in
 * TIME_WAIT for a minute */
const long fuzz_target_runs = 2000;

#define RING 16384u /* PSP_SHM_RING_SIZE of the target */

/* a MSG packet: a USER message of dlen data bytes (byte i of it: fill + i),
 * no xheader, gap bytes between head and data; len = 8 + gap + dlen */
static void put_msg(gen_t *g, unsigned dlen, unsigned gap, unsigned fill)
{
    put8(g, FUZZ_SHM_MSG | gap << 3);
    put16(g, 8 + gap + dlen);
    put8(g, 8);
    for (unsigned i = 0; i < 8 + gap; i++) put8(g, 0); /* header: written by the target */
    for (unsigned i = 0; i < dlen; i++) put8(g, fill + i);
}

/* an RNDV packet for dlen bytes of fuzz_src from src on, consistent header */
static void put_rndv_local(gen_t *g, uint64_t src, uint64_t dlen)
{
    put8(g, FUZZ_SHM_RNDV | FUZZ_SHM_RNDV_LOCAL | FUZZ_SHM_RNDV_HEADER);
    put8(g, 8);
    for (unsigned i = 0; i < 8; i++) put8(g, 0);
    put(g, &src, 8);
    put(g, &dlen, 8);
}

static void run(gen_t *g)
{
    LLVMFuzzerTestOneInput(g->p, g->len);
}

/* ---- 1. valid packets -------------------------------------------------------------- */

const char *fuzz_target_selfcheck(void)
{
    unsigned char in[32768];
    gen_t g = {in, 0, sizeof(in)};

    /* a message in one packet to a receive of 6400 bytes */
    put8(&g, 1);
    put8(&g, 100);
    put_msg(&g, 40, 0, 'a');
    run(&g);
    FUZZ_CHECK(fuzz_shm_last.recvs_ok == 1 && fuzz_shm_last.first_len == 40);
    FUZZ_CHECK(fuzz_shm_last.first[0] == 'a' && fuzz_shm_last.first[39] == 'a' + 39);
    FUZZ_CHECK(!fuzz_shm_last.server_stopped);

    /* after a real message of the client, one that fills the first half
     * of the ring, a WRAP, one with a gap at the ring's start: three
     * receives of 8320 bytes */
    g.len = 0;
    put8(&g, 3 | 4);
    put8(&g, 130);
    put_msg(&g, 8100, 0, 'a'); /* 16 + 8108 bytes: up to RING / 2 */
    put8(&g, FUZZ_SHM_WRAP);
    put_msg(&g, 300, 24, 'A');
    run(&g);
    FUZZ_CHECK(fuzz_shm_last.recvs_ok == 3 && !fuzz_shm_last.server_stopped);
    FUZZ_CHECK(fuzz_shm_last.first_len == 8 && fuzz_shm_last.first[0] == 'f');
    FUZZ_CHECK(!fuzz_shm_last.peer_died); /* valid packets: a graceful close */

    /* single copy from this process */
    g.len = 0;
    put8(&g, 1);
    put8(&g, 100);
    put_rndv_local(&g, 10, 300);
    run(&g);
    FUZZ_CHECK(fuzz_shm_last.recvs_ok == 1 && fuzz_shm_last.first_len == 300);
    FUZZ_CHECK(fuzz_shm_last.first[0] == (unsigned char)(10 * 7) &&
               fuzz_shm_last.first[5] == (unsigned char)(15 * 7));

    /* single copy of a message of 2^40 - 1 bytes into a receive of 64:
     * the receiver reads 64 bytes from here, and the dropped rest costs
     * it no more than a few calls (not one per scratch buffer: 2^27) */
    g.len = 0;
    put8(&g, 1);
    put8(&g, 1);
    put8(&g, FUZZ_SHM_RNDV | FUZZ_SHM_RNDV_LOCAL | FUZZ_SHM_RNDV_HEADER | FUZZ_SHM_RNDV_LEN);
    put8(&g, 8);
    for (unsigned i = 0; i < 8; i++) put8(&g, 0);
    uint64_t src = 3, huge = (1ull << 40) - 1;
    put(&g, &src, 8);
    put(&g, &huge, 8);
    run(&g);
    FUZZ_CHECK(fuzz_shm_last.first_len == huge && fuzz_shm_last.first[0] == 3 * 7 &&
               fuzz_shm_last.first[63] == (unsigned char)(66 * 7));
    FUZZ_CHECK(fuzz_shm_last.progress < 1000 && !fuzz_shm_last.server_stopped);

    /* PAD messages up to the last line of the ring, then a header there
     * whose packet would end 4000 bytes past the ring: a protocol error */
    g.len = 0;
    put8(&g, 7 << 5);
    put8(&g, 0);
    put8(&g, FUZZ_SHM_HEADER);
    put32(&g, 4000);
    put32(&g, 0); /* DATA, no head, no gap */
    run(&g);
    FUZZ_CHECK(fuzz_shm_last.server_stopped);

    /* the same with messages (1024 bytes of ring each) up to there */
    g.len = 0;
    put8(&g, 0);
    put8(&g, 0);
    for (int i = 0; i < 15; i++) put_msg(&g, 1000, 0, 0);
    put_msg(&g, 936, 0, 0); /* 960 */
    put8(&g, FUZZ_SHM_HEADER);
    put32(&g, 4000);
    put32(&g, 0);
    run(&g);
    FUZZ_CHECK(fuzz_shm_last.server_stopped);

    /* the same packet where it fits: taken as the stream's bytes */
    g.len = 0;
    put8(&g, 0);
    put8(&g, 0);
    put_msg(&g, 1000, 0, 0);
    put8(&g, FUZZ_SHM_HEADER);
    put32(&g, 40);
    put32(&g, 0);
    run(&g);
    FUZZ_CHECK(!fuzz_shm_last.server_stopped);
    return "messages in packets, behind a WRAP and by single copy reach their receives; a "
           "packet past the ring's end is refused";
}

/* ---- 2. plausible packets, damaged ------------------------------------------------------ */

static void gen_packet(gen_t *g)
{
    switch (fuzz_rnd_below(12)) {
    case 0: case 1: case 2: case 3: /* a message */
        put_msg(g, (unsigned)fuzz_rnd_below(fuzz_rnd_below(4) ? 200 : RING / 2),
                (unsigned)fuzz_rnd_below(4) * (unsigned)fuzz_rnd_below(64),
                (unsigned)fuzz_rnd());
        break;
    case 4: { /* DATA of any bytes */
        unsigned len = (unsigned)fuzz_rnd_below(fuzz_rnd_below(4) ? 64 : RING / 2);
        put8(g, FUZZ_SHM_DATA | (unsigned)fuzz_rnd_below(32) << 3);
        put16(g, len);
        put8(g, (unsigned)fuzz_rnd_below(len + 1));
        for (unsigned i = 0; i < len; i++) put8(g, (unsigned)fuzz_rnd());
        break;
    }
    case 5: case 6: /* single copy, mostly from here */
        if (fuzz_rnd_below(4)) {
            put_rndv_local(g, fuzz_rnd_below(FUZZ_SHM_SRC_LEN),
                           fuzz_rnd_below(fuzz_rnd_below(2) ? 512 : FUZZ_SHM_SRC_LEN));
        } else {
            put8(g, FUZZ_SHM_RNDV | (unsigned)fuzz_rnd_below(8) << 3);
            unsigned hl = (unsigned)fuzz_rnd_below(40);
            put8(g, hl);
            for (unsigned i = 0; i < hl + 16; i++) put8(g, (unsigned)fuzz_rnd());
        }
        break;
    case 7: { /* ACK */
        put8(g, FUZZ_SHM_ACK);
        uint64_t done = fuzz_rnd_below(2) ? FUZZ_SHM_BIG : fuzz_rnd_below(FUZZ_SHM_BIG + 2);
        put(g, &done, 8);
        put32(g, (uint32_t)fuzz_rnd_below(3));
        put32(g, 0);
        break;
    }
    case 8: case 9:
        put8(g, FUZZ_SHM_WRAP);
        break;
    case 10: { /* a header of any bytes, often near a plausible one */
        put8(g, FUZZ_SHM_HEADER);
        uint32_t len = fuzz_rnd_below(2) ? (uint32_t)fuzz_rnd_below(RING) : (uint32_t)fuzz_rnd();
        uint32_t types[] = {0, 1, 2, 0xff, (uint32_t)fuzz_rnd_below(256)};
        uint32_t gap  = fuzz_rnd_below(2) ? (uint32_t)fuzz_rnd_below(64) : 0;
        uint32_t info = types[fuzz_rnd_below(5)] << 24 | gap << 18 |
                        (uint32_t)fuzz_rnd_below(fuzz_rnd_below(2) ? 64 : 0x40000);
        put32(g, len);
        put32(g, info);
        break;
    }
    default: /* a few random bytes as a packet */
        for (unsigned i = 0, n = (unsigned)fuzz_rnd_below(8); i < n; i++) put8(g, (unsigned)fuzz_rnd());
    }
}

size_t fuzz_target_generate(unsigned char *in, size_t room)
{
    gen_t g = {in, 0, room};
    put8(&g, (unsigned)fuzz_rnd_below(256));
    put8(&g, (unsigned)fuzz_rnd_below(256));
    for (unsigned i = 0, n = 1 + (unsigned)fuzz_rnd_below(12); i < n && g.len < room; i++)
        gen_packet(&g);
    return fuzz_damage(in, g.len, 2);
}
