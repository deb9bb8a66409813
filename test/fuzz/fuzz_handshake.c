/*
 * fuzz_handshake.c - handshake messages for the generators of the
 * handshake fuzz targets (fuzz_precon_gen.c, fuzz_connect_gen.c).
 */
#include "fuzz_handshake.h"

#include <string.h>

#include "fuzz_driver.h"

size_t fuzz_hs_put_msg(unsigned char *p, size_t room, uint32_t magic, uint16_t type,
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

size_t fuzz_hs_put(unsigned char *p, size_t room, uint16_t type, const void *payload, size_t len)
{
    return fuzz_hs_put_msg(p, room, PSCOM_PRECON_MAGIC, type, PSCOM_PRECON_VERSION, payload, len);
}

pscom_precon_hello_t fuzz_hs_hello(uint32_t flags, const char *name)
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
    size_t n = strlen(name);
    memcpy(h.name, name, n < sizeof(h.name) ? n : sizeof(h.name)); /* not terminated at 8 */
    return h;
}

uint32_t fuzz_hs_plausible32(void)
{
    switch (fuzz_rnd_below(6)) {
    case 0: return 0;
    case 1: return (uint32_t)fuzz_rnd_below(16);
    case 2: return PSCOM_WIRE_VERSION;
    case 3: return ~(uint32_t)0 - (uint32_t)fuzz_rnd_below(4);
    default: return (uint32_t)fuzz_rnd();
    }
}

void fuzz_hs_fill(unsigned char *pl, size_t from, size_t len)
{
    for (size_t k = from; k + 4 <= len; k += 4) {
        uint32_t v = fuzz_hs_plausible32();
        memcpy(pl + k, &v, 4);
    }
}

size_t fuzz_hs_put_any(unsigned char *p, size_t room, uint16_t type, const void *payload,
                       size_t len)
{
    uint32_t magic   = fuzz_rnd_below(32) ? PSCOM_PRECON_MAGIC : fuzz_hs_plausible32();
    uint16_t version = fuzz_rnd_below(32) ? PSCOM_PRECON_VERSION : (uint16_t)fuzz_hs_plausible32();
    return fuzz_hs_put_msg(p, room, magic, type, version, payload, len);
}

size_t fuzz_hs_generate(unsigned char *in, size_t room,
                        size_t (*gen_message)(unsigned char *p, size_t room, int first))
{
    in[0]      = (unsigned char)fuzz_rnd();
    size_t len = 1;
    for (unsigned m = 1 + fuzz_rnd_below(5), first = 1; m; m--, first = 0)
        len += gen_message(in + len, room - len, first);
    return fuzz_damage(in, len, 1);
}
