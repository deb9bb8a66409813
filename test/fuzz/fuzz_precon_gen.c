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
#include "fuzz_precon.h"
#include "pscom_wire.h"

static size_t put_msg(unsigned char *p, size_t room, uint32_t magic, uint16_t type,
                      uint16_t version, const void *payload, size_t len)
{
    if (PSCOM_PRECON_HEADER_SIZE + len > room) return 0;
    pscom_precon_header_t h = {
        .magic   = htole32(magic),
        .type    = htole16(type),
        .version = htole16(version),
        .len     = htole32((uint32_t)len),
    };
    memcpy(p, &h, sizeof(h));
    if (len) memcpy(p + sizeof(h), payload, len);
    return sizeof(h) + len;
}

static size_t put(unsigned char *p, size_t room, uint16_t type, const void *payload, size_t len)
{
    return put_msg(p, room, PSCOM_PRECON_MAGIC, type, PSCOM_PRECON_VERSION, payload, len);
}

static pscom_precon_hello_t hello(uint32_t flags)
{
    pscom_precon_hello_t h = {
        .wire_version = htole32(PSCOM_WIRE_VERSION),
        .flags        = htole32(flags),
        .node_id      = (int32_t)htole32(0x7f000001),
        .rank         = (int32_t)htole32(1),
        .portno       = (int32_t)htole32(1),
        .attempt      = htole32(1),
        .con_id       = htole64(42),
    };
    memcpy(h.name, "fuzzcli", 8);
    return h;
}

static size_t offer(unsigned char *p, size_t room, const char *plugin, const void *blob,
                    size_t blen)
{
    unsigned char o[PSCOM_PRECON_PLUGIN_NAME + 256] = {0};
    strncpy((char *)o, plugin, PSCOM_PRECON_PLUGIN_NAME);
    if (blen > 256) blen = 256;
    if (blen) memcpy(o + PSCOM_PRECON_PLUGIN_NAME, blob, blen);
    return put(p, room, PSCOM_PRECON_OFFER, o, PSCOM_PRECON_PLUGIN_NAME + blen);
}

/* a TCP connection each: 2 s (and as many ports in TIME_WAIT for a while) */
const long fuzz_target_runs = 20000;

/* ---- 1. a valid handshake -------------------------------------------------------------- */

const char *fuzz_target_selfcheck(void)
{
    for (unsigned step = 1; step <= 63; step = step * 2 + 1) { /* 1, 3, 7, ..., whole */
        unsigned char in[256];
        in[0]                  = (unsigned char)(step == 63 ? 63 : step - 1);
        size_t len             = 1;
        pscom_precon_hello_t h = hello(0);
        len += put(in + len, sizeof(in) - len, PSCOM_PRECON_HELLO, &h, sizeof(h));
        len += offer(in + len, sizeof(in) - len, "tcp", NULL, 0);
        len += put(in + len, sizeof(in) - len, PSCOM_PRECON_CONFIRM, NULL, 0);
        unsigned before = fuzz_precon_accepted();
        LLVMFuzzerTestOneInput(in, len); /* also: the EOF ends the connection */
        FUZZ_CHECK(fuzz_precon_accepted() == before + 1);
    }
    return "valid handshakes: accepted, then ended by the client's EOF";
}

/* ---- 2. damaged handshakes of every message type ------------------------------------------ */

static uint32_t plausible32(void)
{
    switch (fuzz_rnd_below(6)) {
    case 0: return 0;
    case 1: return (uint32_t)fuzz_rnd_below(16);
    case 2: return PSCOM_WIRE_VERSION;
    case 3: return ~(uint32_t)0 - (uint32_t)fuzz_rnd_below(4);
    default: return (uint32_t)fuzz_rnd();
    }
}

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
        pscom_precon_hello_t h = hello(flags[fuzz_rnd_below(5)]);
        if (fuzz_rnd_below(2)) h.node_id = (int32_t)htole32(FUZZ_NODE_MARK); /* same node */
        if (!fuzz_rnd_below(4)) h.wire_version = htole32(plausible32());
        if (!fuzz_rnd_below(4)) memcpy(h.name, "fuzzsrv", 8); /* the server's own name */
        if (!fuzz_rnd_below(4)) h.attempt = htole32(plausible32());
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
        for (size_t k = PSCOM_PRECON_PLUGIN_NAME; k + 4 <= len; k += 4) {
            uint32_t v = plausible32();
            memcpy(pl + k, &v, 4);
        }
        break;
    }
    default:
        len = fuzz_rnd_below(3) ? 0 : fuzz_rnd_below(12);
        if (!fuzz_rnd_below(16)) len = fuzz_rnd_below(sizeof(pl)); /* around the limit */
        for (size_t k = 0; k + 4 <= len; k += 4) {
            uint32_t v = plausible32();
            memcpy(pl + k, &v, 4);
        }
    }
    uint32_t magic   = fuzz_rnd_below(32) ? PSCOM_PRECON_MAGIC : plausible32();
    uint16_t version = fuzz_rnd_below(32) ? PSCOM_PRECON_VERSION : (uint16_t)plausible32();
    return put_msg(p, room, magic, type, version, pl, len);
}

size_t fuzz_target_generate(unsigned char *in, size_t room)
{
    in[0]      = (unsigned char)fuzz_rnd();
    size_t len = 1;
    for (unsigned m = 1 + fuzz_rnd_below(5), first = 1; m; m--, first = 0)
        len += gen_message(in + len, room - len, first);
    return fuzz_damage(in, len, 1);
}
