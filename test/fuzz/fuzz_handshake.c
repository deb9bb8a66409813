/*
 * fuzz_handshake.c - handshake messages for the handshake fuzz targets and
 * their generators; the random ones are in fuzz_hs_random.c.
 */
#include "fuzz_handshake.h"

#include <string.h>

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

size_t fuzz_hs_valid_accept(unsigned char *p, size_t room, uint32_t hello_flags,
                            const char *name)
{
    unsigned char offer[PSCOM_PRECON_PLUGIN_NAME] = "tcp";
    pscom_precon_hello_t h = fuzz_hs_hello(hello_flags, name);
    size_t a = fuzz_hs_put(p, room, PSCOM_PRECON_HELLO, &h, sizeof(h));
    size_t b = a ? fuzz_hs_put(p + a, room - a, PSCOM_PRECON_OFFER, offer, sizeof(offer)) : 0;
    size_t c = b ? fuzz_hs_put(p + a + b, room - a - b, PSCOM_PRECON_CONFIRM, NULL, 0) : 0;
    return c ? a + b + c : 0;
}
