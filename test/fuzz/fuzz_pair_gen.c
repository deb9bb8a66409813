/*
 * fuzz_pair_gen.c - the part of the transport targets' ctest sides
 * (fuzz_ucp_gen.c, fuzz_openib_gen.c, run by fuzz_driver.c) that is not
 * the transport's: the set-up and the common ops of an input, the checks
 * every transport passes alike, and the frame of a generated input
 * (fuzz_pair_gen.h).
 */
#include "fuzz_pair_gen.h"

#include <stdio.h>

#include "fuzz_driver.h"

void fuzz_pair_setup(gen_t *g, unsigned flags, unsigned size64)
{
    g->len = 0;
    put8(g, flags);
    put8(g, size64);
}

void fuzz_pair_put_send(gen_t *g, unsigned dlen, unsigned xlen)
{
    put8(g, FUZZ_PAIR_SEND);
    put16(g, dlen);
    put8(g, xlen);
}

void fuzz_pair_run(gen_t *g)
{
    LLVMFuzzerTestOneInput(g->p, g->len);
}

unsigned char fuzz_pair_pat(unsigned i)
{
    return (unsigned char)((FUZZ_PAIR_XH_MAX + i) * 7);
}

/* ---- checks ------------------------------------------------------------------------ */

void fuzz_pair_check_real(gen_t *g)
{
    const fuzz_pair_result_t *L = &fuzz_pair_last;
    fuzz_pair_setup(g, 1, 100);
    fuzz_pair_put_send(g, 40, 4);
    fuzz_pair_run(g);
    FUZZ_CHECK(L->recvs_ok == 1 && L->first_len == 40 && L->first_xlen == 4);
    FUZZ_CHECK(L->first[0] == fuzz_pair_pat(0) && L->first[39] == fuzz_pair_pat(39));
    FUZZ_CHECK(!L->server_stopped && !L->peer_died);
}

void fuzz_pair_check_stopped(const char *target, const char *what)
{
    const fuzz_pair_result_t *L = &fuzz_pair_last;
    if (!L->server_stopped || L->recvs_ok != 1 || L->recvs_error != 2) {
        fprintf(stderr, "%s: %s: stopped %d, receives ok %u, failed %u\n", target, what,
                L->server_stopped, L->recvs_ok, L->recvs_error);
        FUZZ_CHECK(!"stops the server, its pending receives fail");
    }
}

void fuzz_pair_check_no_growth(gen_t *g, int runs, unsigned (*count)(void), unsigned slack,
                               const char *target, const char *what)
{
    fuzz_pair_run(g);
    unsigned n0 = count();
    for (int i = 0; i < runs; i++) fuzz_pair_run(g);
    unsigned n1 = count();
    if (n1 > n0 + slack) {
        fprintf(stderr, "%s: %d failed connections: %u -> %u %s\n", target, runs, n0, n1, what);
        FUZZ_CHECK(!"failed connections leave nothing behind");
    }
}

/* ---- generated inputs ---------------------------------------------------------------- */

void fuzz_pair_gen_send(gen_t *g)
{
    fuzz_pair_put_send(g, (unsigned)fuzz_rnd_below(fuzz_rnd_below(4) ? 300 : 65536),
                       (unsigned)fuzz_rnd_below(40));
}

void fuzz_pair_gen_progress(gen_t *g)
{
    put8(g, FUZZ_PAIR_PROGRESS);
    put8(g, (unsigned)fuzz_rnd_below(32));
}

void fuzz_pair_gen_recv(gen_t *g)
{
    put8(g, FUZZ_PAIR_RECV);
    put8(g, (unsigned)fuzz_rnd_below(fuzz_rnd_below(2) ? 4 : 256));
}

void fuzz_pair_gen_cancel(gen_t *g)
{
    put8(g, FUZZ_PAIR_CANCEL);
}

void fuzz_pair_gen_junk(gen_t *g)
{
    for (unsigned i = 0, n = (unsigned)fuzz_rnd_below(8); i < n; i++) put8(g, (unsigned)fuzz_rnd());
}

size_t fuzz_pair_generate(unsigned char *in, size_t room, unsigned setups,
                          void (*gen_op)(gen_t *g))
{
    gen_t g = {in, 0, room};
    put8(&g, (unsigned)fuzz_rnd_below(setups));
    put8(&g, (unsigned)fuzz_rnd_below(256));
    for (unsigned i = 0, n = 1 + (unsigned)fuzz_rnd_below(12); i < n && g.len < room; i++)
        gen_op(&g);
    return fuzz_damage(in, g.len, 2);
}
