/*
 * fuzz_connect_gen.c - the ctest side of the fuzz target fuzz_connect.c
 * (run by fuzz_driver.c):
 *   1. a valid answer (HELLO, ACCEPT of the offered tcp, CONFIRM_OK), sent
 *      whole or in pieces, gets a plain or on-demand connection up over
 *      tcp, and the peer's EOF then ends it; a CONFIRM_OK that answers the
 *      OFFER (no ACCEPT) gets no connection, whichever transport was
 *      offered; a back-connect request answered with BACKCONNECT_OK leaves
 *      the connection waiting, one refused as final fails it;
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

/* ---- 1. valid answers ------------------------------------------------------------------ */

/* the input: set-up bytes flags and mode, then the messages */
static size_t start(unsigned char *in, unsigned flags, unsigned mode)
{
    in[0] = (unsigned char)flags;
    in[1] = (unsigned char)mode;
    return 2;
}

/* a HELLO from another node (tcp only) or this one (shm offered first) */
static size_t hello(unsigned char *p, size_t room, int same_node)
{
    pscom_precon_hello_t h = fuzz_hs_hello(0, "fuzzsrv");
    h.node_id              = (int32_t)htole32(same_node ? FUZZ_NODE_MARK : 0xfffffffeu);
    h.attempt              = 0;
    return fuzz_hs_put(p, room, PSCOM_PRECON_HELLO, &h, sizeof(h));
}

static fuzz_connect_counts_t run(const unsigned char *in, size_t len)
{
    fuzz_connect_counts_t before = fuzz_connect_counts();
    LLVMFuzzerTestOneInput(in, len); /* also: the EOF ends the connection */
    fuzz_connect_counts_t after = fuzz_connect_counts();
    return (fuzz_connect_counts_t){.connected = after.connected - before.connected,
                                   .waiting   = after.waiting - before.waiting};
}

const char *fuzz_target_selfcheck(void)
{
    unsigned char in[256];
    fuzz_connect_counts_t d;
    for (unsigned mode = FUZZ_CONNECT_PLAIN; mode <= FUZZ_CONNECT_ONDEMAND; mode++) {
        for (unsigned step = 1; step <= 63; step = step * 2 + 1) { /* 1, 3, 7, ..., whole */
            size_t len = start(in, step == 63 ? 63 : step - 1, mode);
            len += hello(in + len, sizeof(in) - len, 0);
            len += fuzz_hs_put(in + len, sizeof(in) - len, PSCOM_PRECON_ACCEPT, NULL, 0);
            len += fuzz_hs_put(in + len, sizeof(in) - len, PSCOM_PRECON_CONFIRM_OK, NULL, 0);
            d = run(in, len);
            FUZZ_CHECK(d.connected == 1);
        }
    }
    /* CONFIRM_OK answers our CONFIRM, never our OFFER: a transport must not
     * start without its con_connect (shm: a NULL dereference, 2026-11-27) */
    for (int same = 0; same < 2; same++) {
        size_t len = start(in, 63, FUZZ_CONNECT_PLAIN);
        len += hello(in + len, sizeof(in) - len, same);
        len += fuzz_hs_put(in + len, sizeof(in) - len, PSCOM_PRECON_CONFIRM_OK, NULL, 0);
        d = run(in, len);
        FUZZ_CHECK(d.connected == 0);
    }
    /* CONFIRM_FAIL asking for the plugin again (PSCOM_PRECON_FAIL_RETRY):
     * offered once more, and connected; asked twice, tcp is the last
     * plugin (another node), so no transport is left */
    for (int twice = 0; twice < 2; twice++) {
        uint8_t retry = PSCOM_PRECON_FAIL_RETRY;
        size_t len    = start(in, 63, FUZZ_CONNECT_PLAIN);
        len += hello(in + len, sizeof(in) - len, 0);
        for (int i = 0; i <= twice; i++) {
            len += fuzz_hs_put(in + len, sizeof(in) - len, PSCOM_PRECON_ACCEPT, NULL, 0);
            len += fuzz_hs_put(in + len, sizeof(in) - len, PSCOM_PRECON_CONFIRM_FAIL, &retry, 1);
        }
        len += fuzz_hs_put(in + len, sizeof(in) - len, PSCOM_PRECON_ACCEPT, NULL, 0);
        len += fuzz_hs_put(in + len, sizeof(in) - len, PSCOM_PRECON_CONFIRM_OK, NULL, 0);
        d = run(in, len);
        FUZZ_CHECK(d.connected == !twice);
    }
    /* a back-connect request: answered, the connection waits for the peer;
     * refused as final, it fails */
    size_t len = start(in, 63, FUZZ_CONNECT_BACKCONNECT);
    len += hello(in + len, sizeof(in) - len, 0);
    size_t ok_len = len + fuzz_hs_put(in + len, sizeof(in) - len, PSCOM_PRECON_BACKCONNECT_OK,
                                      NULL, 0);
    d = run(in, ok_len);
    FUZZ_CHECK(d.waiting == 1 && d.connected == 0);
    uint32_t failed = htole32(PSCOM_PRECON_REJECT_FAILED);
    len += fuzz_hs_put(in + len, sizeof(in) - len, PSCOM_PRECON_REJECT, &failed, sizeof(failed));
    d = run(in, len);
    FUZZ_CHECK(d.waiting == 0 && d.connected == 0);
    return "valid answers to a plain and an on-demand connect: connected over tcp, then ended "
           "by the peer's EOF; CONFIRM_OK for an OFFER: refused; CONFIRM_FAIL asking for the "
           "plugin again: offered once more (connected), not twice; a back-connect request "
           "answered: waiting, refused: failed";
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
    return fuzz_hs_generate(in, room, 2, gen_message); /* flags, mode */
}
