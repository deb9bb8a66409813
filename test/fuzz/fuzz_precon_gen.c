/*
 * fuzz_precon_gen.c - the ctest side of the fuzz target fuzz_precon.c
 * (run by fuzz_driver.c):
 *   1. a valid handshake (HELLO, OFFER of tcp, CONFIRM), sent whole or in
 *      pieces, gets the connection accepted, and the client's EOF then
 *      ends it;
 *   2. handshakes of every message type with plausible and random fields,
 *      then damaged.
 */
#include <string.h>

#include "fuzz_driver.h"
#include "fuzz_handshake.h"
#include "fuzz_precon.h"
#include "fuzz_tcp.h"
#include "pscom_wire.h"

/* a TCP connection each, and as many sockets in TIME_WAIT for a minute:
 * 0.5 s, few enough to run the suite repeatedly and in parallel */
const long fuzz_target_runs = 5000;

/* ---- 1. a valid handshake -------------------------------------------------------------- */

static unsigned accepted_before;

static int accepted_one(void)
{
    return fuzz_precon_accepted() > accepted_before;
}

const char *fuzz_target_selfcheck(void)
{
    for (unsigned step = 1; step <= 63; step = step * 2 + 1) { /* 1, 3, 7, ..., whole */
        unsigned char in[256];
        in[0]                  = (unsigned char)(step == 63 ? 63 : step - 1);
        size_t len             = 1;
        len += fuzz_hs_valid_accept(in + len, sizeof(in) - len, 0, "fuzzcli");
        accepted_before    = fuzz_precon_accepted();
        fuzz_tcp_end_after = accepted_one; /* the client stays until accepted */
        LLVMFuzzerTestOneInput(in, len);   /* also: the EOF ends the connection */
        fuzz_tcp_end_after = NULL;
        FUZZ_CHECK(fuzz_precon_accepted() == accepted_before + 1);
    }
    /* the client's end comes with its CONFIRM (it gave up on the attempt):
     * the server starts no connection; and the client closes before the
     * server read its handshake: the server's answers go to a closed peer
     * (EPIPE, never SIGPIPE) */
    for (unsigned closing = 0; closing <= 64; closing += 64) {
        unsigned char in[256];
        in[0]           = (unsigned char)(63 | 128 | closing);
        size_t len      = 1 + fuzz_hs_valid_accept(in + 1, sizeof(in) - 1, 0, "fuzzcli");
        unsigned before = fuzz_precon_accepted();
        LLVMFuzzerTestOneInput(in, len);
        FUZZ_CHECK(fuzz_precon_accepted() == before);
    }
    return "valid handshakes: accepted, then ended by the client's EOF; not accepted when the "
           "EOF comes with them; answers to a client that closed first";
}

/* ---- 2. damaged handshakes of every message type ------------------------------------------ */

static size_t gen_message(unsigned char *p, size_t room, int first)
{
    unsigned char pl[PSCOM_PRECON_PAYLOAD_MAX + 512];
    size_t len    = 0;
    uint16_t type = first && fuzz_rnd_below(4) ? PSCOM_PRECON_HELLO
                                               : (uint16_t)(1 + fuzz_rnd_below(12));
    switch (type) {
    case PSCOM_PRECON_HELLO: {
        static const uint32_t flags[] = {0, 0, PSCOM_PRECON_FLAG_ONDEMAND,
                                         PSCOM_PRECON_FLAG_BACKCONNECT, 3};
        pscom_precon_hello_t h = fuzz_hs_hello(flags[fuzz_rnd_below(5)], "fuzzcli");
        if (fuzz_rnd_below(2)) h.node_id = (int32_t)htole32(FUZZ_NODE_MARK); /* same node */
        if (!fuzz_rnd_below(4)) h.wire_version = htole32(fuzz_hs_plausible32());
        if (!fuzz_rnd_below(4)) memcpy(h.name, "fuzzsrv", 8); /* the server's own name */
        if (!fuzz_rnd_below(4)) h.attempt = htole32(fuzz_hs_plausible32());
        memcpy(pl, &h, sizeof(h));
        len = sizeof(h);
        break;
    }
    case PSCOM_PRECON_OFFER: {
        static const char *names[] = {"tcp", "shm", "ucp", "openib", "", "tcpx"};
        memset(pl, 0, sizeof(pl));
        strncpy((char *)pl, names[fuzz_rnd_below(6)], PSCOM_PRECON_PLUGIN_NAME);
        if (!fuzz_rnd_below(8)) pl[fuzz_rnd_below(PSCOM_PRECON_PLUGIN_NAME)] = (unsigned char)fuzz_rnd();
        len = PSCOM_PRECON_PLUGIN_NAME + fuzz_rnd_below(3) * fuzz_rnd_below(120);
        fuzz_hs_fill(pl, PSCOM_PRECON_PLUGIN_NAME, len);
        break;
    }
    default:
        len = fuzz_rnd_below(3) ? 0 : fuzz_rnd_below(12);
        if (!fuzz_rnd_below(16)) len = fuzz_rnd_below(sizeof(pl)); /* around the limit */
        fuzz_hs_fill(pl, 0, len);
    }
    return fuzz_hs_put_any(p, room, type, pl, len);
}

size_t fuzz_target_generate(unsigned char *in, size_t room)
{
    return fuzz_hs_generate(in, room, 1, gen_message); /* flags */
}
