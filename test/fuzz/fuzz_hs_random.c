/*
 * fuzz_hs_random.c - random handshake messages and inputs for the
 * generators of the handshake fuzz targets (fuzz_precon_gen.c,
 * fuzz_connect_gen.c, fuzz_ondemand_gen.c); declared in fuzz_handshake.h.
 */
#include <string.h>

#include "fuzz_driver.h"
#include "fuzz_handshake.h"

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
    size_t k = from;
    for (; k + 4 <= len; k += 4) {
        uint32_t v = fuzz_hs_plausible32();
        memcpy(pl + k, &v, 4);
    }
    /* and the last 1-3 bytes: an input is made of the generator's numbers
     * only (before, they were stack bytes, so that the same FUZZ_SEED could
     * give other inputs; found by valgrind) */
    for (; k < len; k++) pl[k] = (unsigned char)fuzz_rnd();
}

size_t fuzz_hs_put_any(unsigned char *p, size_t room, uint16_t type, const void *payload,
                       size_t len)
{
    uint32_t magic   = fuzz_rnd_below(32) ? PSCOM_PRECON_MAGIC : fuzz_hs_plausible32();
    uint16_t version = fuzz_rnd_below(32) ? PSCOM_PRECON_VERSION : (uint16_t)fuzz_hs_plausible32();
    return fuzz_hs_put_msg(p, room, magic, type, version, payload, len);
}

size_t fuzz_hs_generate(unsigned char *in, size_t room, size_t setup,
                        size_t (*gen_message)(unsigned char *p, size_t room, int first))
{
    for (size_t k = 0; k < setup; k++) in[k] = (unsigned char)fuzz_rnd();
    size_t len = setup;
    for (unsigned m = 1 + fuzz_rnd_below(5), first = 1; m; m--, first = 0)
        len += gen_message(in + len, room - len, first);
    return fuzz_damage(in, len, setup);
}
