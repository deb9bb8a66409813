/*
 * fuzz_ondemand_gen.c - the ctest side of the fuzz target fuzz_ondemand.c
 * (run by fuzz_driver.c):
 *   1. valid on-demand handshakes do what they should: one from "fuzzcli"
 *      connects the waiting connection (also with a send waiting on it, and
 *      when two attempts of the peer race); one from an unknown name or the
 *      server's own is refused, and "fuzzcli" can still be connected
 *      afterwards; a back-connect request from "fuzzzzz" makes the server
 *      connect to it;
 *   2. one or two clients' handshakes of every message type, mostly on-demand
 *      and back-connect HELLOs naming the server's peers, then damaged.
 */
#include <string.h>

#include "fuzz_driver.h"
#include "fuzz_ondemand.h"
#include "fuzz_tcp.h"
#include "pscom_wire.h"

/* two or three TCP connections each, and as many sockets in TIME_WAIT for
 * a minute: few enough to run the suite repeatedly and in parallel */
const long fuzz_target_runs = 2000;

static const char *const names[] = {"fuzzcli", "fuzzzzz", "fuzzsrv", "nobody"};

/* the set-up bytes, then up to two clients' bytes (the second may be empty) */
static size_t input(unsigned char *in, size_t room, unsigned flags, unsigned setup,
                    const unsigned char *a, size_t alen, const unsigned char *b, size_t blen)
{
    if (4 + alen + blen > room) return 0;
    in[0] = (unsigned char)flags;
    in[1] = (unsigned char)setup;
    in[2] = (unsigned char)(alen & 0xff);
    in[3] = (unsigned char)(alen >> 8);
    memcpy(in + 4, a, alen);
    if (blen) memcpy(in + 4 + alen, b, blen);
    return 4 + alen + blen;
}

static size_t hello_only(unsigned char *p, size_t room, uint32_t flags, const char *name)
{
    pscom_precon_hello_t h = fuzz_hs_hello(flags, name);
    return fuzz_hs_put(p, room, PSCOM_PRECON_HELLO, &h, sizeof(h));
}

/* ---- 1. valid handshakes ----------------------------------------------------------------- */

static fuzz_od_counts_t run(unsigned flags, unsigned setup, const unsigned char *a, size_t alen,
                            const unsigned char *b, size_t blen)
{
    unsigned char in[1024];
    size_t len = input(in, sizeof(in), flags, setup, a, alen, b, blen);
    FUZZ_CHECK(len > 0);
    fuzz_od_counts_t before = fuzz_ondemand_counts();
    LLVMFuzzerTestOneInput(in, len);
    fuzz_od_counts_t after = fuzz_ondemand_counts();
    return (fuzz_od_counts_t){
        .cli_connected  = after.cli_connected - before.cli_connected,
        .by_probe       = after.by_probe - before.by_probe,
        .zzz_connecting = after.zzz_connecting - before.zzz_connecting,
    };
}

const char *fuzz_target_selfcheck(void)
{
    unsigned char a[256], b[256];
    size_t alen = fuzz_hs_valid_accept(a, sizeof(a), PSCOM_PRECON_FLAG_ONDEMAND, "fuzzcli");
    fuzz_od_counts_t d;

    fuzz_tcp_end_after = fuzz_ondemand_cli_tcp; /* clients stay until "fuzzcli" connected */
    for (unsigned step = 1; step <= 63; step = step * 2 + 1) { /* 1, 3, 7, ..., whole */
        unsigned flags = step == 63 ? 63 : step - 1;
        for (unsigned setup = 0; setup < 4; setup++) { /* with and without waiting sends */
            d = run(flags, setup | FUZZ_OD_PROBE, a, alen, NULL, 0);
            FUZZ_CHECK(d.cli_connected == 1 && d.by_probe == 0);
        }
    }

    /* two attempts of the same peer, in pieces of each in turn: one wins */
    size_t blen = fuzz_hs_valid_accept(b, sizeof(b), PSCOM_PRECON_FLAG_ONDEMAND, "fuzzcli");
    pscom_precon_hello_t h = fuzz_hs_hello(PSCOM_PRECON_FLAG_ONDEMAND, "fuzzcli");
    h.attempt              = htole32(2); /* b: the newer attempt */
    memcpy(b + PSCOM_PRECON_HEADER_SIZE, &h, sizeof(h));
    for (unsigned step = 1; step <= 63; step = step * 2 + 1) {
        d = run(step == 63 ? 63 : step - 1, FUZZ_OD_SEND_CLI, a, alen, b, blen);
        FUZZ_CHECK(d.cli_connected == 1);
    }
    fuzz_tcp_end_after = NULL;

    /* refused: not our peer, or our own name; the waiting one still connects */
    for (size_t k = 2; k < sizeof(names) / sizeof(names[0]); k++) {
        size_t n = fuzz_hs_valid_accept(b, sizeof(b), PSCOM_PRECON_FLAG_ONDEMAND, names[k]);
        d        = run(63, FUZZ_OD_SEND_CLI | FUZZ_OD_PROBE, b, n, NULL, 0);
        FUZZ_CHECK(d.cli_connected == 1 && d.by_probe == 1);
    }

    /* a back-connect request from the higher name: we connect to it */
    size_t n = hello_only(b, sizeof(b), PSCOM_PRECON_FLAG_BACKCONNECT, "fuzzzzz");
    d        = run(63, 0, b, n, NULL, 0);
    FUZZ_CHECK(d.zzz_connecting == 1 && d.cli_connected == 0);
    return "valid on-demand handshakes connect, racing attempts connect once, strangers are "
           "refused, back-connect requests are followed";
}

/* ---- 2. damaged handshakes ------------------------------------------------------------------ */

/* message i of a client's bytes: mostly a handshake's HELLO, OFFER,
 * CONFIRM in order, else any type */
static size_t gen_message(unsigned char *p, size_t room, unsigned i)
{
    static const uint16_t order[] = {PSCOM_PRECON_HELLO, PSCOM_PRECON_OFFER, PSCOM_PRECON_CONFIRM};
    unsigned char pl[PSCOM_PRECON_PAYLOAD_MAX + 512];
    size_t len    = 0;
    uint16_t type = i < 3 && fuzz_rnd_below(8) ? order[i] : (uint16_t)(1 + fuzz_rnd_below(12));
    switch (type) {
    case PSCOM_PRECON_HELLO: {
        static const uint32_t flags[] = {PSCOM_PRECON_FLAG_ONDEMAND, PSCOM_PRECON_FLAG_ONDEMAND,
                                         PSCOM_PRECON_FLAG_BACKCONNECT, 0, 3};
        pscom_precon_hello_t h = fuzz_hs_hello(flags[fuzz_rnd_below(5)],
                                               names[fuzz_rnd_below(2) ? 0 : fuzz_rnd_below(4)]);
        if (fuzz_rnd_below(2)) h.node_id = (int32_t)htole32(FUZZ_NODE_MARK); /* same node */
        h.attempt = htole32(fuzz_rnd_below(8) ? (uint32_t)fuzz_rnd_below(4)
                                              : fuzz_hs_plausible32());
        h.con_id  = htole64(42 + fuzz_rnd_below(2)); /* the same peer connection, or another */
        memcpy(pl, &h, sizeof(h));
        len = sizeof(h);
        break;
    }
    case PSCOM_PRECON_OFFER:
        memset(pl, 0, PSCOM_PRECON_PLUGIN_NAME);
        strcpy((char *)pl, fuzz_rnd_below(4) ? "tcp" : "shm");
        len = PSCOM_PRECON_PLUGIN_NAME + (fuzz_rnd_below(4) ? 0 : fuzz_rnd_below(64));
        fuzz_hs_fill(pl, PSCOM_PRECON_PLUGIN_NAME, len);
        break;
    default:
        len = fuzz_rnd_below(3) ? 0 : fuzz_rnd_below(12);
        fuzz_hs_fill(pl, 0, len);
    }
    return fuzz_hs_put_any(p, room, type, pl, len);
}

static size_t gen_client(unsigned char *p, size_t room)
{
    size_t len = 0;
    for (unsigned i = 0, m = 1 + fuzz_rnd_below(5); i < m; i++)
        len += gen_message(p + len, room - len, i);
    return len;
}

size_t fuzz_target_generate(unsigned char *in, size_t room)
{
    unsigned char a[2048], b[2048];
    size_t alen = gen_client(a, sizeof(a));
    size_t blen = fuzz_rnd_below(2) ? gen_client(b, sizeof(b)) : 0;
    unsigned setup = (unsigned)fuzz_rnd_below(8);
    size_t len     = input(in, room, (unsigned)fuzz_rnd(), setup, a, alen, b, blen);
    return len ? fuzz_damage(in, len, 4) : 0;
}
