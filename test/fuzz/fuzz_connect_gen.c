/*
 * fuzz_connect_gen.c - the ctest side of the fuzz target fuzz_connect.c
 * (run by fuzz_driver.c):
 *   1. a valid answer (HELLO, ACCEPT of the offered tcp, CONFIRM_OK), sent
 *      whole or in pieces, gets the connection up over tcp, and the peer's
 *      EOF then ends it; a CONFIRM_OK that answers the OFFER (no ACCEPT)
 *      gets no connection, whichever transport was offered;
 *   2. answers of every message type with plausible and random fields,
 *      then damaged.
 */
#include <string.h>

#include "fuzz_connect.h"
#include "fuzz_driver.h"
#include "fuzz_handshake.h"

/* a TCP connection each, and as many sockets in TIME_WAIT for a minute:
 * 0.5 s, few enough to run the suite repeatedly and in parallel */
const long fuzz_target_runs = 5000;

/* ---- 1. a valid answer ----------------------------------------------------------------- */

const char *fuzz_target_selfcheck(void)
{
    for (unsigned step = 1; step <= 63; step = step * 2 + 1) { /* 1, 3, 7, ..., whole */
        unsigned char in[256];
        in[0]                  = (unsigned char)(step == 63 ? 63 : step - 1);
        size_t len             = 1;
        pscom_precon_hello_t h = fuzz_hs_hello(0, "fuzzsrv");
        h.node_id              = (int32_t)htole32(0xfffffffeu); /* another node: tcp only */
        h.attempt              = 0;
        len += fuzz_hs_put(in + len, sizeof(in) - len, PSCOM_PRECON_HELLO, &h, sizeof(h));
        len += fuzz_hs_put(in + len, sizeof(in) - len, PSCOM_PRECON_ACCEPT, NULL, 0);
        len += fuzz_hs_put(in + len, sizeof(in) - len, PSCOM_PRECON_CONFIRM_OK, NULL, 0);
        unsigned before = fuzz_connect_connected();
        LLVMFuzzerTestOneInput(in, len); /* also: the EOF ends the connection */
        FUZZ_CHECK(fuzz_connect_connected() == before + 1);
    }
    /* CONFIRM_OK answers our CONFIRM, never our OFFER: a transport must not
     * start without its con_connect (shm: a NULL dereference, 2026-11-27) */
    for (int same = 0; same < 2; same++) {
        unsigned char in[256];
        in[0]                  = 63;
        size_t len             = 1;
        pscom_precon_hello_t h = fuzz_hs_hello(0, "fuzzsrv");
        h.node_id              = (int32_t)htole32(same ? FUZZ_NODE_MARK : 0xfffffffeu);
        h.attempt              = 0;
        len += fuzz_hs_put(in + len, sizeof(in) - len, PSCOM_PRECON_HELLO, &h, sizeof(h));
        len += fuzz_hs_put(in + len, sizeof(in) - len, PSCOM_PRECON_CONFIRM_OK, NULL, 0);
        unsigned before = fuzz_connect_connected();
        LLVMFuzzerTestOneInput(in, len);
        FUZZ_CHECK(fuzz_connect_connected() == before);
    }
    return "valid answers: connected over tcp, then ended by the peer's EOF; "
           "CONFIRM_OK for an OFFER: refused";
}

/* ---- 2. damaged answers of every message type ------------------------------------------- */

static size_t gen_message(unsigned char *p, size_t room, int first)
{
    unsigned char pl[PSCOM_PRECON_PAYLOAD_MAX + 512];
    size_t len    = 0;
    uint16_t type = first && fuzz_rnd_below(4) ? PSCOM_PRECON_HELLO
                                               : (uint16_t)(1 + fuzz_rnd_below(12));
    if (type == PSCOM_PRECON_HELLO) {
        pscom_precon_hello_t h = fuzz_hs_hello(0, "fuzzsrv");
        h.attempt              = 0;
        if (fuzz_rnd_below(2)) h.node_id = (int32_t)htole32(FUZZ_NODE_MARK); /* same node */
        if (!fuzz_rnd_below(4)) h.wire_version = htole32(fuzz_hs_plausible32());
        if (!fuzz_rnd_below(4)) h.flags = htole32(fuzz_hs_plausible32());
        if (!fuzz_rnd_below(4)) memcpy(h.name, "fuzzcli", 8); /* the client's own name */
        memcpy(pl, &h, sizeof(h));
        len = sizeof(h);
    } else { /* ACCEPT and REJECT carry a blob or a reason, the rest nothing */
        len = fuzz_rnd_below(3) ? 0 : fuzz_rnd_below(120);
        if (!fuzz_rnd_below(16)) len = fuzz_rnd_below(sizeof(pl)); /* around the limit */
        fuzz_hs_fill(pl, 0, len);
    }
    return fuzz_hs_put_any(p, room, type, pl, len);
}

size_t fuzz_target_generate(unsigned char *in, size_t room)
{
    return fuzz_hs_generate(in, room, gen_message);
}
