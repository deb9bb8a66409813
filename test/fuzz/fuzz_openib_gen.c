/*
 * fuzz_openib_gen.c - the ctest side of the fuzz target fuzz_openib.c (run
 * by fuzz_driver.c):
 *   1. valid packets deliver: real messages of the client, and the
 *      harness's own consistent messages, whole in one packet or in slices
 *      of the stream (small slices: more packets than the server has
 *      receive slots, so that the harness waits for its credits), reach
 *      the posted receives or wait as unexpected ones (one truncated, the
 *      stream in step after it); TOKENS packets that return nothing do
 *      not disturb; a bad magic, an unknown flag, a TOKENS packet with a
 *      payload, a packet shorter than its header or empty, more credits
 *      returned than lent, a packet longer than a slot and a pscom message
 *      of an unknown type stop the server; a message whose announced data
 *      never comes ends with the client's death; connections that failed
 *      leave no file descriptor open;
 *   2. sequences of plausible packets of every kind, then damaged.
 */
#include <dirent.h>
#include <stdio.h>
#include <string.h>

#include "fuzz_bytes.h"
#include "fuzz_driver.h"
#include "fuzz_pair_gen.h"
#include "fuzz_openib.h"

/* an openib connection each (and a TCP connection in TIME_WAIT) */
const long fuzz_target_runs = 4000;

#define PAYLOAD_MAX (FUZZ_OIB_SLOT - 8)

/* a WHOLE packet of a consistent USER message: xlen xheader bytes ('x'),
 * dlen data bytes (byte i: fill + i), tokens by mode tok */
static void put_whole(gen_t *g, unsigned xlen, unsigned dlen, unsigned fill, unsigned tok)
{
    put8(g, FUZZ_OIB_WHOLE | FUZZ_OIB_HDR | FUZZ_OIB_TOK(tok));
    put16(g, 8 + xlen + dlen);
    put8(g, xlen);
    for (unsigned i = 0; i < 8; i++) put8(g, 0); /* header: written by the target */
    for (unsigned i = 0; i < xlen; i++) put8(g, 'x');
    for (unsigned i = 0; i < dlen; i++) put8(g, fill + i);
}

/* a USER message of xlen + dlen bytes (data byte i: fill + i) as SLICE
 * packets of at most step payload bytes (at least 8) */
static void put_slices(gen_t *g, unsigned xlen, unsigned dlen, unsigned fill, unsigned step)
{
    unsigned total = 8 + xlen + dlen;
    for (unsigned off = 0; off < total;) {
        unsigned n = total - off < step ? total - off : step;
        put8(g, FUZZ_OIB_SLICE | (off ? 0 : FUZZ_OIB_HDR));
        put16(g, n);
        if (!off) {
            put8(g, xlen);
            put32(g, dlen);
        }
        for (unsigned i = off; i < off + n; i++)
            put8(g, i < 8 ? 0 : i < 8 + xlen ? 'x' : fill + (i - 8 - xlen));
        off += n;
    }
}

/* a RAW packet of len bytes in all, the magic right and the tokens the
 * client's owed: header {magic, flags, tokens}, then body */
static void put_raw(gen_t *g, unsigned len, unsigned flags, const void *body, unsigned blen)
{
    put8(g, FUZZ_OIB_RAW | FUZZ_OIB_RAW_OWED | FUZZ_OIB_RAW_MAGIC);
    put16(g, len);
    unsigned char h[8] = {0, 0, (unsigned char)flags, (unsigned char)(flags >> 8)};
    put(g, h, len < 8 ? len : 8);
    const unsigned char *b = body;
    for (unsigned i = 8; i < len; i++) put8(g, i - 8 < blen ? b[i - 8] : 0);
}

/* ---- 1. valid packets ------------------------------------------------------------------ */

/* open file descriptors of this process */
static unsigned fds_count(void)
{
    DIR *d = opendir("/proc/self/fd");
    FUZZ_CHECK(d != NULL);
    unsigned n = 0;
    while (readdir(d)) n++;
    closedir(d);
    return n;
}

const char *fuzz_target_selfcheck(void)
{
    static unsigned char in[200000];
    gen_t g = {in, 0, sizeof(in)};
    const fuzz_pair_result_t *L   = &fuzz_pair_last;
    const fuzz_openib_result_t *O = &fuzz_openib_last;

    /* a real message of the client into a receive of 6400 bytes */
    fuzz_pair_check_real(&g);
    FUZZ_CHECK(O->injected == 0);

    /* the harness's WHOLE packet, then a real message: both arrive */
    fuzz_pair_setup(&g, 2, 100);
    put_whole(&g, 4, 20, 'a', FUZZ_OIB_TOK_OWED);
    fuzz_pair_put_send(&g, 300, 0);
    fuzz_pair_run(&g);
    FUZZ_CHECK(L->recvs_ok == 2 && L->first_len == 20 && L->first_xlen == 4 &&
               L->first[0] == 'a' && L->first[19] == 'a' + 19);
    FUZZ_CHECK(!L->server_stopped && !L->peer_died && O->injected == 1);

    /* a message of 16000 bytes in three slices, into a posted receive
     * and as an unexpected one */
    fuzz_pair_setup(&g, 1, 255);
    put_slices(&g, 0, 16000, 'A', 6000);
    fuzz_pair_put_send(&g, 8, 0);
    fuzz_pair_run(&g);
    FUZZ_CHECK(L->recvs_ok == 1 && L->first_len == 16000 && L->first[0] == 'A' &&
               L->first[63] == (unsigned char)('A' + 63));
    FUZZ_CHECK(!L->server_stopped && !L->peer_died && O->injected == 3);
    fuzz_pair_setup(&g, 0, 255);
    put_slices(&g, 3, 16000, 'B', 6000);
    put8(&g, FUZZ_PAIR_RECV);
    put8(&g, 255);
    fuzz_pair_run(&g);
    FUZZ_CHECK(L->recvs_ok == 1 && L->first_len == 16000 && L->first_xlen == 3 &&
               L->first[1] == 'B' + 1);
    FUZZ_CHECK(!L->server_stopped && !L->peer_died);

    /* ... and 6000 bytes in slices of 100: more packets than the server's
     * receive slots; the harness waits for the credits it returns */
    fuzz_pair_setup(&g, 1 | 64, 100); /* no progress between the ops */
    put_slices(&g, 0, 6000, 'C', 100);
    fuzz_pair_put_send(&g, 8, 0);
    fuzz_pair_run(&g);
    FUZZ_CHECK(L->recvs_ok == 1 && L->first_len == 6000 && L->first[5] == 'C' + 5);
    FUZZ_CHECK(!L->server_stopped && !L->peer_died && O->injected == 61 && O->credit_waits > 0);

    /* a message larger than the receive of 64 bytes: truncated, and the
     * next one arrives whole */
    fuzz_pair_setup(&g, 2, 1);
    put_whole(&g, 0, 1000, 'D', FUZZ_OIB_TOK_OWED);
    put_whole(&g, 0, 10, 'E', FUZZ_OIB_TOK_OWED);
    fuzz_pair_run(&g);
    FUZZ_CHECK(L->recvs_ok == 1 && L->first_len == 1000 &&
               L->first[63] == (unsigned char)('D' + 63));
    FUZZ_CHECK(!L->server_stopped);

    /* 40 unexpected messages, then a receive: it takes the first */
    fuzz_pair_setup(&g, 64, 100); /* no progress between the ops */
    for (unsigned i = 0; i < 40; i++) put_whole(&g, 0, 100, i, FUZZ_OIB_TOK_OWED);
    put8(&g, FUZZ_PAIR_RECV);
    put8(&g, 100);
    fuzz_pair_run(&g);
    FUZZ_CHECK(L->recvs_ok == 1 && L->first_len == 100 && L->first[1] == 1);
    FUZZ_CHECK(!L->server_stopped && !L->peer_died && O->injected == 40 && O->credit_waits > 0);

    /* TOKENS packets that return nothing, more of them than the server's
     * slots, around real messages of the client and the server's message
     * back: the stream stays in step, both close */
    fuzz_pair_setup(&g, 1 | 32, 100);
    fuzz_pair_put_send(&g, 30, 0);
    for (unsigned i = 0; i < 40; i++) put8(&g, FUZZ_OIB_TOKENS | FUZZ_OIB_TOK(FUZZ_OIB_TOK_NONE));
    fuzz_pair_put_send(&g, 10000, 0);
    put8(&g, FUZZ_PAIR_RECV);
    put8(&g, 200);
    fuzz_pair_run(&g);
    FUZZ_CHECK(L->recvs_ok == 2 && L->first_len == 30 && L->first[0] == fuzz_pair_pat(0));
    FUZZ_CHECK(!L->server_stopped && !L->peer_died && O->injected == 40);

    /* what stops the server, each after a real message */
    static const unsigned char unknown_type[8] = {0, 0, 200, 0, 0, 0, 0, 0};
    for (unsigned k = 0; k < 9; k++) {
        const char *what = "";
        fuzz_pair_setup(&g, 3, 100);
        fuzz_pair_put_send(&g, 8, 0);
        switch (k) {
        case 0:
            what = "a bad magic";
            put8(&g, FUZZ_OIB_WHOLE | FUZZ_OIB_MAGIC);
            put16(&g, 0x1234);
            put16(&g, 8);
            break;
        case 1:
            what = "an unknown flag";
            put8(&g, FUZZ_OIB_SLICE | FUZZ_OIB_FLAGS);
            put16(&g, 4);
            put16(&g, 8);
            break;
        case 2:
            what = "a TOKENS packet with a payload";
            put8(&g, FUZZ_OIB_TOKENS | FUZZ_OIB_HDR);
            put16(&g, 10);
            break;
        case 3:
            what = "a packet shorter than its header";
            put_raw(&g, 5, 0, NULL, 0);
            break;
        case 4:
            what = "an empty packet";
            put_raw(&g, 0, 0, NULL, 0);
            break;
        case 5:
            what = "more credits returned than lent";
            put8(&g, FUZZ_OIB_TOKENS | FUZZ_OIB_TOK(FUZZ_OIB_TOK_ANY));
            put32(&g, 1000);
            break;
        case 6:
            what = "one credit more than owed, none in flight";
            put8(&g, FUZZ_OIB_TOKENS | FUZZ_OIB_TOK(FUZZ_OIB_TOK_MORE));
            break;
        case 7:
            what = "a packet longer than a slot";
            put_raw(&g, FUZZ_OIB_SLOT + 1, 0, NULL, 0);
            break;
        default:
            what = "a pscom message of an unknown type";
            put_raw(&g, 16, 1, unknown_type, sizeof(unknown_type));
            break;
        }
        fuzz_pair_run(&g);
        if (k == 7 && O->cut) continue; /* one send slot (fuzz_openib.tight): cut to a slot */
        fuzz_pair_check_stopped("fuzz_openib", what);
    }

    /* a message whose announced data never comes: the client's EOF goes
     * into its data, the server never answers; the client dies */
    fuzz_pair_setup(&g, 2, 100);
    fuzz_pair_put_send(&g, 8, 0);
    put8(&g, FUZZ_OIB_SLICE | FUZZ_OIB_HDR);
    put16(&g, 8);
    put8(&g, 0);
    put32(&g, 3000);
    for (unsigned i = 0; i < 8; i++) put8(&g, 0);
    fuzz_pair_run(&g);
    FUZZ_CHECK(L->recvs_ok == 1 && !L->server_stopped && L->peer_died);

    /* connections that end in a protocol error leave no descriptor open
     * (two per queue pair in the emulation) */
    fuzz_pair_setup(&g, 1, 100);
    fuzz_pair_put_send(&g, 8, 0);
    put_raw(&g, 3, 0, NULL, 0);
    fuzz_pair_check_no_growth(&g, 100, fds_count, 10, "fuzz_openib", "descriptors");

    return "real and consistent messages, whole and in slices, reach their receives (one "
           "truncated), unexpected ones wait, the harness waits for the server's credits; "
           "TOKENS packets of no credits do not disturb; a bad magic, an unknown flag, a TOKENS "
           "payload, a short or empty packet, too many credits, a packet beyond a slot and an "
           "unknown message type stop the server; a message cut short ends with the client's "
           "death; failed connections leave no descriptors behind";
}

/* ---- 2. plausible packets, damaged ------------------------------------------------------ */

static void gen_op(gen_t *g)
{
    switch (fuzz_rnd_below(17)) {
    case 0: case 1: case 2: fuzz_pair_gen_send(g); break; /* a real message */
    case 3: case 4: /* a consistent WHOLE message, mostly returning what is owed */
        put_whole(g, (unsigned)fuzz_rnd_below(20),
                  (unsigned)fuzz_rnd_below(fuzz_rnd_below(4) ? 200 : 3000), (unsigned)fuzz_rnd(),
                  fuzz_rnd_below(4) ? FUZZ_OIB_TOK_OWED : (unsigned)fuzz_rnd_below(3));
        break;
    case 5: case 6: { /* a message in slices, mostly whole */
        unsigned dlen = (unsigned)fuzz_rnd_below(fuzz_rnd_below(2) ? 300 : 20000);
        unsigned step = 8 + (unsigned)fuzz_rnd_below(fuzz_rnd_below(2) ? 200 : PAYLOAD_MAX - 7);
        put_slices(g, (unsigned)fuzz_rnd_below(10), dlen, (unsigned)fuzz_rnd(), step);
        break;
    }
    case 7: /* TOKENS, mostly harmless */
        put8(g, FUZZ_OIB_TOKENS | FUZZ_OIB_TOK(fuzz_rnd_below(8) ? fuzz_rnd_below(2) : 2));
        break;
    case 8: { /* a packet of any header and bytes */
        unsigned len = (unsigned)fuzz_rnd_below(fuzz_rnd_below(4) ? 64 : FUZZ_OIB_RAW_MAX + 1);
        put8(g, FUZZ_OIB_RAW | (unsigned)fuzz_rnd_below(32) << 3);
        put16(g, len);
        unsigned h[2] = {0x4f49u | (unsigned)fuzz_rnd_below(4) << 16, (unsigned)fuzz_rnd_below(4)};
        put(g, h, len < 8 ? len : 8);
        for (unsigned i = 8; i < len && i < 64; i++) put8(g, (unsigned)fuzz_rnd());
        break;
    }
    case 9: { /* a packet op of any bits */
        put8(g, (unsigned)fuzz_rnd_below(3) | (unsigned)fuzz_rnd_below(32) << 3);
        for (unsigned i = 0, n = (unsigned)fuzz_rnd_below(16); i < n; i++)
            put8(g, (unsigned)fuzz_rnd());
        break;
    }
    case 10: case 11: fuzz_pair_gen_progress(g); break;
    case 12: case 13: fuzz_pair_gen_recv(g); break;
    case 14: fuzz_pair_gen_cancel(g); break;
    case 15: { /* a pscom message of any type (EOF, rendezvous, RMA, ...), whole or not */
        unsigned xl = (unsigned)fuzz_rnd_below(40), dl = (unsigned)fuzz_rnd_below(64);
        unsigned char body[8 + 40 + 64];
        uint64_t w = xl | (uint64_t)fuzz_rnd_below(26) << 16 | (uint64_t)dl << 24;
        memcpy(body, &w, 8); /* the message header, little-endian */
        for (unsigned i = 8; i < sizeof(body); i++) body[i] = (unsigned char)fuzz_rnd();
        put_raw(g, 16 + xl + dl, (unsigned)fuzz_rnd_below(2), body, 8 + xl + dl);
        break;
    }
    default: fuzz_pair_gen_junk(g); /* a few random bytes as an op */
    }
}

size_t fuzz_target_generate(unsigned char *in, size_t room)
{
    return fuzz_pair_generate(in, room, 128, gen_op);
}
