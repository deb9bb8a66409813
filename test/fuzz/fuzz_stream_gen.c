/*
 * fuzz_stream_gen.c - the ctest side of the fuzz target fuzz_stream.c
 * (run by fuzz_driver.c):
 *   1. valid streams: USER messages of random sizes handed over in random
 *      pieces and ways arrive whole, in order, truncated exactly where the
 *      receive is shorter;
 *   2. inputs made of messages of every type with plausible and random
 *      fields (addresses in the registered window, the ids of the pending
 *      requests), then damaged.
 */
#include <stdlib.h>
#include <string.h>

#include "fuzz_driver.h"
#include "fuzz_stream.h"
#include "pscom_rma.h"
#include "pscom_wire.h"

/* ---- 1. valid streams arrive intact -------------------------------------------------- */

#define VALID_MAX 6

static void valid_round(void)
{
    unsigned nmsg = 1 + fuzz_rnd_below(VALID_MAX);
    size_t xlen[VALID_MAX], dlen[VALID_MAX], blen[VALID_MAX], off[VALID_MAX + 1];
    unsigned char *wire = NULL;
    size_t total        = 0;
    for (unsigned i = 0; i < nmsg; i++) {
        xlen[i] = fuzz_rnd_below(65);
        dlen[i] = fuzz_rnd_below(4) ? fuzz_rnd_below(300) : fuzz_rnd_below(20000);
        blen[i] = fuzz_rnd_below(4) ? dlen[i] : fuzz_rnd_below(dlen[i] + 1); /* some truncate */
        off[i]  = total;
        total += 8 + xlen[i] + dlen[i];
    }
    off[nmsg] = total;
    wire      = malloc(total);
    FUZZ_CHECK(wire);
    for (unsigned i = 0; i < nmsg; i++) {
        pscom_wire_header_encode(wire + off[i], (uint16_t)xlen[i], PSCOM_MSGTYPE_USER, dlen[i]);
        for (size_t k = 8; k < 8 + xlen[i] + dlen[i]; k++) wire[off[i] + k] = (unsigned char)fuzz_rnd();
    }

    fuzz_fixture_t f;
    fuzz_open(&f);
    pscom_request_t *r[VALID_MAX];
    unsigned posted_first = fuzz_rnd_below(nmsg + 1); /* the rest after the bytes: unexpected */
    for (unsigned i = 0; i < nmsg; i++) {
        r[i] = pscom_request_create(64, 0);
        FUZZ_CHECK(r[i]);
        r[i]->connection  = &f.con->pub;
        r[i]->xheader_len = 64;
        r[i]->data_len    = blen[i];
        r[i]->data        = malloc(blen[i] ? blen[i] : 1);
        FUZZ_CHECK(r[i]->data);
        if (i < posted_first) pscom_post_recv(r[i]);
    }
    fuzz_mode_t mode = (fuzz_mode_t)fuzz_rnd_below(4);
    int by_message   = mode == FUZZ_MSG && fuzz_rnd_below(2);
    size_t step      = fuzz_rnd_below(3) ? 1 + fuzz_rnd_below(64) : 1 + fuzz_rnd_below(total);
    for (size_t done = 0, m = 0; done < total;) {
        size_t n = by_message ? off[m + 1] - off[m] : total - done < step ? total - done : step;
        fuzz_mode_t how = mode == FUZZ_MIXED ? (fuzz_mode_t)fuzz_rnd_below(3) : mode;
        FUZZ_CHECK(fuzz_hand_over(&f, how, wire + done, n) == 0);
        done += n;
        m++;
    }
    for (unsigned i = posted_first; i < nmsg; i++) pscom_post_recv(r[i]);
    pscom_test_any();

    for (unsigned i = 0; i < nmsg; i++) {
        FUZZ_CHECK(pscom_req_is_done(r[i]));
        FUZZ_CHECK(!(r[i]->state & (PSCOM_REQ_STATE_ERROR | PSCOM_REQ_STATE_CANCELED)));
        FUZZ_CHECK(!!(r[i]->state & PSCOM_REQ_STATE_TRUNCATED) == (blen[i] < dlen[i]));
        FUZZ_CHECK(r[i]->header.data_len == dlen[i]);
        FUZZ_CHECK(r[i]->header.xheader_len == xlen[i]);
        FUZZ_CHECK(memcmp(&r[i]->xheader, wire + off[i] + 8, xlen[i]) == 0);
        size_t keep = blen[i] < dlen[i] ? blen[i] : dlen[i];
        FUZZ_CHECK(memcmp(r[i]->data, wire + off[i] + 8 + xlen[i], keep) == 0);
    }
    fuzz_close(&f);
    for (unsigned i = 0; i < nmsg; i++) {
        free(r[i]->data);
        pscom_request_free(r[i]);
    }
    free(wire);
}

/* RMA atomics of 0 bytes on the registered window (the peer's word): each
 * gets its empty answer, the connection reads on. (The answer's copy of
 * nothing passed memcpy a NULL buffer: UBSan, found by libFuzzer.) */
static void empty_atomics(void)
{
    static const uint8_t types[] = {PSCOM_MSGTYPE_RMA_GET_ACCUMULATE_REQ,
                                    PSCOM_MSGTYPE_RMA_FETCH_AND_OP_REQ,
                                    PSCOM_MSGTYPE_RMA_COMPARE_AND_SWAP_REQ};
    fuzz_fixture_t f;
    fuzz_open(&f);
    size_t before = fuzz_sink_bytes;
    for (unsigned i = 0; i < sizeof(types); i++) {
        unsigned char m[8 + sizeof(pscom_rma_get_data_t)];
        pscom_wire_header_encode(m, sizeof(pscom_rma_get_data_t), types[i], 0);
        uint64_t c[4] = {htole64(i + 1), htole64((uint64_t)(uintptr_t)fuzz_win()), 0,
                         htole64(f.memh->id)}; /* id, src, src_len, memh */
        memcpy(m + 8, c, sizeof(c));
        FUZZ_CHECK(fuzz_hand_over(&f, (fuzz_mode_t)i, m, sizeof(m)) == 0);
    }
    pscom_test_any();
    FUZZ_CHECK(fuzz_sink_bytes - before == sizeof(types) * (8 + sizeof(pscom_xheader_rma_get_answer_t)));
    FUZZ_CHECK(f.con->pub.state == PSCOM_CON_STATE_RW);
    fuzz_close(&f);
}

const long fuzz_target_runs = 100000; /* 1 s; 6 s under ASan */

const char *fuzz_target_selfcheck(void)
{
    for (int i = 0; i < 2000; i++) valid_round();
    empty_atomics();
    return "valid streams: 2000 rounds intact; RMA atomics of 0 bytes answered";
}

/* ---- 2. damaged streams of every message type ----------------------------------------- */

/* a value a field of a control message might hold, or any */
static uint64_t plausible(void)
{
    switch (fuzz_rnd_below(12)) {
    case 0: return 0;
    case 8: return FUZZ_SEND_MARK;
    case 9: return FUZZ_GET_MARK;
    case 10: return FUZZ_MEMH_MARK;
    case 11: return FUZZ_RECV_MARK;
    case 1: return fuzz_rnd_below(16);
    case 2: return (uint64_t)(uintptr_t)fuzz_win() + fuzz_rnd_below(FUZZ_WIN_LEN + 64);
    case 3: return fuzz_rnd_below(FUZZ_WIN_LEN + 64);
    case 4: return (uint64_t)1 << fuzz_rnd_below(64);
    case 5: return ~(uint64_t)0 - fuzz_rnd_below(4);
    default: return fuzz_rnd();
    }
}

static size_t gen_message(unsigned char *p, size_t room)
{
    uint8_t type  = fuzz_rnd_below(16) ? (uint8_t)fuzz_rnd_below(PSCOM_MSGTYPE_COUNT) : (uint8_t)fuzz_rnd();
    size_t xlen   = fuzz_rnd_below(4) ? 8 * fuzz_rnd_below(6) : fuzz_rnd_below(80);
    uint64_t dlen = 0; /* control messages mostly carry none */
    switch (fuzz_rnd_below(4)) {
    case 0: dlen = plausible() & PSCOM_DATA_LEN_MASK; break;
    case 1:
    case 2: dlen = fuzz_rnd_below(200); break;
    }
    size_t body   = xlen + (dlen < 4096 ? dlen : fuzz_rnd_below(64)); /* a long one stays short */
    if (8 + body > room) return 0;
    pscom_wire_header_encode(p, (uint16_t)xlen, type, dlen);
    for (size_t k = 0; k + 8 <= body; k += 8) {
        uint64_t v = plausible();
        memcpy(p + 8 + k, &v, 8);
    }
    for (size_t k = body & ~(size_t)7; k < body; k++) p[8 + k] = (unsigned char)fuzz_rnd();
    return 8 + body;
}

/* a rendezvous as a peer runs it: the announcement (RTS), and the data for
 * the receive it matched (RENDEZVOUS_DATA with that receive's id) */
static size_t gen_rendezvous(unsigned char *p, size_t room)
{
    size_t xlen = fuzz_rnd_below(17), dlen = fuzz_rnd_below(4) ? fuzz_rnd_below(64) : plausible();
    size_t n    = 8 + xlen + sizeof(pscom_rndv_rts_t);
    size_t m    = 8 + 8 + (dlen < 64 ? dlen : 0);
    if (n + m > room) return 0;
    pscom_wire_header_encode(p, (uint16_t)xlen, PSCOM_MSGTYPE_RENDEZVOUS_REQ, sizeof(pscom_rndv_rts_t));
    for (size_t k = 0; k < xlen; k++) p[8 + k] = (unsigned char)fuzz_rnd();
    pscom_rndv_rts_t rts = {
        .sender_id = htole64(plausible()),
        .data_len  = htole64(dlen),
        .src_addr  = htole64(fuzz_rnd_below(4) ? 0 : plausible()),
    };
    memcpy(p + 8 + xlen, &rts, sizeof(rts));
    unsigned char *d = p + n;
    pscom_wire_header_encode(d, 8, PSCOM_MSGTYPE_RENDEZVOUS_DATA,
                             fuzz_rnd_below(8) ? dlen : plausible());
    uint64_t id = htole64(FUZZ_RECV_MARK);
    memcpy(d + 8, &id, 8);
    for (size_t k = 16; k < m; k++) d[k] = (unsigned char)fuzz_rnd();
    return n + m;
}

size_t fuzz_target_generate(unsigned char *in, size_t room)
{
    in[0]      = (unsigned char)fuzz_rnd();
    in[1]      = fuzz_rnd_below(4) ? (unsigned char)fuzz_rnd_below(64) : (unsigned char)fuzz_rnd();
    in[2]      = (unsigned char)fuzz_rnd();
    size_t len = 3;
    if (!fuzz_rnd_below(8)) { /* with the send (bit 7) whose id the receive's follows */
        in[0] |= 0x80;
        len += gen_rendezvous(in + len, room - len);
    }
    for (unsigned m = fuzz_rnd_below(6); m; m--) len += gen_message(in + len, room - len);
    return fuzz_damage(in, len, 3);
}
