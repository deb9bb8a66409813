/*
 * fuzz_bytes.h - reading an input field by field (the targets), and
 * writing one (their generators): little-endian, and reads beyond the
 * input's end give zeros. Shared by fuzz_shm and fuzz_ucp.
 */
#ifndef PSCOM_FUZZ_BYTES_H
#define PSCOM_FUZZ_BYTES_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* ---- reading (the target) ------------------------------------------------------ */

typedef struct {
    const uint8_t *p;
    size_t left;
} fuzz_in_t;

static inline uint8_t in_byte(fuzz_in_t *in)
{
    if (!in->left) return 0;
    in->left--;
    return *in->p++;
}

static inline void in_bytes(fuzz_in_t *in, void *dst, size_t n)
{
    size_t k = n < in->left ? n : in->left;
    memcpy(dst, in->p, k);
    memset((char *)dst + k, 0, n - k);
    in->p += k;
    in->left -= k;
}

static inline uint32_t in_u16(fuzz_in_t *in)
{
    uint32_t lo = in_byte(in);
    return lo | (uint32_t)in_byte(in) << 8;
}

static inline uint32_t in_u32(fuzz_in_t *in)
{
    uint32_t lo = in_u16(in);
    return lo | in_u16(in) << 16;
}

/* ---- writing (the generator): what does not fit into room is cut --------------- */

typedef struct {
    unsigned char *p;
    size_t len, room;
} gen_t;

static inline void put(gen_t *g, const void *src, size_t n)
{
    if (g->len + n > g->room) n = g->room - g->len;
    memcpy(g->p + g->len, src, n);
    g->len += n;
}

static inline void put8(gen_t *g, unsigned v)
{
    unsigned char b = (unsigned char)v;
    put(g, &b, 1);
}

static inline void put16(gen_t *g, unsigned v)
{
    put8(g, v & 0xff);
    put8(g, v >> 8);
}

static inline void put32(gen_t *g, uint32_t v)
{
    put16(g, v & 0xffff);
    put16(g, v >> 16);
}

#endif /* PSCOM_FUZZ_BYTES_H */
