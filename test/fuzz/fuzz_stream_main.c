/*
 * fuzz_stream_main.c - the ctest driver of the fuzz target in fuzz_stream.c
 * (test fuzz_stream; for long runs build it with libFuzzer, see
 * scripts/fuzz.sh).
 *
 *   fuzz_stream [FILE...]   replay these inputs (e.g. a crash libFuzzer
 *                           saved) and stop
 *   fuzz_stream             1. valid streams: USER messages of random
 *                              sizes handed over in random pieces and ways
 *                              arrive whole, in order, truncated exactly
 *                              where the receive is shorter;
 *                           2. FUZZ_RUNS (default 200000) inputs made of
 *                              messages of every type with plausible and
 *                              random fields, then damaged, through the
 *                              fuzz target.
 *
 *   fuzz_stream --corpus DIR N
 *                           write N inputs of part 2 into DIR (a seed
 *                           corpus for libFuzzer) and stop
 *
 * FUZZ_SEED picks the pseudo-random sequence (default fixed: the same
 * inputs in every run); an input of part 2 that fails is written to
 * fuzz_stream.crash (in the working directory) for replay.
 */
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fuzz_stream.h"
#include "pscom_wire.h"

static uint64_t rng_state;

static uint64_t rnd(void) /* splitmix64 */
{
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
    z          = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z          = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static size_t rnd_below(size_t n)
{
    return n ? (size_t)(rnd() % n) : 0;
}

#define CHECK(cond)                                                                          \
    do {                                                                                     \
        if (!(cond)) {                                                                       \
            fprintf(stderr, "fuzz_stream: %s:%d: check failed: %s\n", __FILE__, __LINE__, \
                    #cond);                                                                  \
            abort();                                                                         \
        }                                                                                    \
    } while (0)

/* ---- 1. valid streams arrive intact -------------------------------------------------- */

#define VALID_MAX 6

static void valid_round(void)
{
    unsigned nmsg = 1 + rnd_below(VALID_MAX);
    size_t xlen[VALID_MAX], dlen[VALID_MAX], blen[VALID_MAX], off[VALID_MAX + 1];
    unsigned char *wire = NULL;
    size_t total        = 0;
    for (unsigned i = 0; i < nmsg; i++) {
        xlen[i] = rnd_below(65);
        dlen[i] = rnd_below(4) ? rnd_below(300) : rnd_below(20000);
        blen[i] = rnd_below(4) ? dlen[i] : rnd_below(dlen[i] + 1); /* some truncate */
        off[i]  = total;
        total += 8 + xlen[i] + dlen[i];
    }
    off[nmsg] = total;
    wire      = malloc(total);
    CHECK(wire);
    for (unsigned i = 0; i < nmsg; i++) {
        pscom_wire_header_encode(wire + off[i], (uint16_t)xlen[i], PSCOM_MSGTYPE_USER, dlen[i]);
        for (size_t k = 8; k < 8 + xlen[i] + dlen[i]; k++) wire[off[i] + k] = (unsigned char)rnd();
    }

    fuzz_fixture_t f;
    fuzz_open(&f);
    pscom_request_t *r[VALID_MAX];
    unsigned posted_first = rnd_below(nmsg + 1); /* the rest after the bytes: unexpected */
    for (unsigned i = 0; i < nmsg; i++) {
        r[i] = pscom_request_create(64, 0);
        CHECK(r[i]);
        r[i]->connection  = &f.con->pub;
        r[i]->xheader_len = 64;
        r[i]->data_len    = blen[i];
        r[i]->data        = malloc(blen[i] ? blen[i] : 1);
        CHECK(r[i]->data);
        if (i < posted_first) pscom_post_recv(r[i]);
    }
    fuzz_mode_t mode = (fuzz_mode_t)rnd_below(4);
    int by_message   = mode == FUZZ_MSG && rnd_below(2);
    size_t step      = rnd_below(3) ? 1 + rnd_below(64) : 1 + rnd_below(total);
    for (size_t done = 0, m = 0; done < total;) {
        size_t n = by_message ? off[m + 1] - off[m] : total - done < step ? total - done : step;
        fuzz_mode_t how = mode == FUZZ_MIXED ? (fuzz_mode_t)rnd_below(3) : mode;
        CHECK(fuzz_hand_over(&f, how, wire + done, n) == 0);
        done += n;
        m++;
    }
    for (unsigned i = posted_first; i < nmsg; i++) pscom_post_recv(r[i]);
    pscom_test_any();

    for (unsigned i = 0; i < nmsg; i++) {
        CHECK(pscom_req_is_done(r[i]));
        CHECK(!(r[i]->state & (PSCOM_REQ_STATE_ERROR | PSCOM_REQ_STATE_CANCELED)));
        CHECK(!!(r[i]->state & PSCOM_REQ_STATE_TRUNCATED) == (blen[i] < dlen[i]));
        CHECK(r[i]->header.data_len == dlen[i]);
        CHECK(r[i]->header.xheader_len == xlen[i]);
        CHECK(memcmp(&r[i]->xheader, wire + off[i] + 8, xlen[i]) == 0);
        size_t keep = blen[i] < dlen[i] ? blen[i] : dlen[i];
        CHECK(memcmp(r[i]->data, wire + off[i] + 8 + xlen[i], keep) == 0);
    }
    fuzz_close(&f);
    for (unsigned i = 0; i < nmsg; i++) {
        free(r[i]->data);
        pscom_request_free(r[i]);
    }
    free(wire);
}

/* ---- 2. damaged streams of every message type ----------------------------------------- */

/* a value a field of a control message might hold, or any */
static uint64_t plausible(void)
{
    switch (rnd_below(11)) {
    case 0: return 0;
    case 8: return FUZZ_SEND_MARK;
    case 9: return FUZZ_GET_MARK;
    case 10: return FUZZ_MEMH_MARK;
    case 1: return rnd_below(16);
    case 2: return (uint64_t)(uintptr_t)fuzz_win() + rnd_below(FUZZ_WIN_LEN + 64);
    case 3: return rnd_below(FUZZ_WIN_LEN + 64);
    case 4: return (uint64_t)1 << rnd_below(64);
    case 5: return ~(uint64_t)0 - rnd_below(4);
    default: return rnd();
    }
}

static size_t gen_message(unsigned char *p, size_t room)
{
    uint8_t type  = rnd_below(16) ? (uint8_t)rnd_below(PSCOM_MSGTYPE_COUNT) : (uint8_t)rnd();
    size_t xlen   = rnd_below(4) ? 8 * rnd_below(6) : rnd_below(80);
    uint64_t dlen = 0; /* control messages mostly carry none */
    switch (rnd_below(4)) {
    case 0: dlen = plausible() & PSCOM_DATA_LEN_MASK; break;
    case 1:
    case 2: dlen = rnd_below(200); break;
    }
    size_t body   = xlen + (dlen < 4096 ? dlen : rnd_below(64)); /* a long one stays short */
    if (8 + body > room) return 0;
    pscom_wire_header_encode(p, (uint16_t)xlen, type, dlen);
    for (size_t k = 0; k + 8 <= body; k += 8) {
        uint64_t v = plausible();
        memcpy(p + 8 + k, &v, 8);
    }
    for (size_t k = body & ~(size_t)7; k < body; k++) p[8 + k] = (unsigned char)rnd();
    return 8 + body;
}

static size_t gen_input(unsigned char *in, size_t room)
{
    in[0]      = (unsigned char)rnd();
    in[1]      = rnd_below(4) ? (unsigned char)rnd_below(64) : (unsigned char)rnd();
    in[2]      = (unsigned char)rnd();
    size_t len = 3;
    for (unsigned m = 1 + rnd_below(6); m; m--) len += gen_message(in + len, room - len);
    unsigned damage = rnd_below(4); /* some stay whole */
    for (unsigned d = 0; d < damage && len > 3; d++) {
        size_t at = 3 + rnd_below(len - 3);
        switch (rnd_below(3)) {
        case 0: in[at] ^= (unsigned char)(1u << rnd_below(8)); break;
        case 1: in[at] = (unsigned char)rnd(); break;
        default: len = at; break; /* cut off */
        }
    }
    return len;
}

/* ---- main ------------------------------------------------------------------------------ */

static unsigned char cur_in[8192]; /* the input of part 2 under test */
static size_t cur_len;

static void save_input(void)
{
    if (!cur_len) return; /* not in part 2 */
    int fd = open("fuzz_stream.crash", O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
        ssize_t w = write(fd, cur_in, cur_len);
        (void)w;
        close(fd);
    }
    static const char msg[] = "fuzz_stream: the failing input is in fuzz_stream.crash\n";
    ssize_t w = write(2, msg, sizeof(msg) - 1);
    (void)w;
    cur_len = 0;
}

static void on_signal(int sig)
{
    save_input();
    signal(sig, SIG_DFL);
    raise(sig);
}

/* save the input on a crash, leaving a sanitizer's own handler in place
 * (it reports first, then dies through its death callback) */
extern void __sanitizer_set_death_callback(void (*cb)(void)) __attribute__((weak));

static void save_on_crash(void)
{
    int sigs[] = {SIGABRT, SIGSEGV, SIGBUS, SIGFPE};
    for (size_t i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++) {
        struct sigaction old;
        if (sigaction(sigs[i], NULL, &old) == 0 && old.sa_handler == SIG_DFL)
            signal(sigs[i], on_signal);
    }
    if (__sanitizer_set_death_callback) __sanitizer_set_death_callback(save_input);
}

static int write_corpus(const char *dir, long n)
{
    for (long i = 0; i < n; i++) {
        char name[4096];
        snprintf(name, sizeof(name), "%s/gen-%06ld", dir, i);
        size_t len = gen_input(cur_in, sizeof(cur_in));
        FILE *fp   = fopen(name, "wb");
        if (!fp || fwrite(cur_in, 1, len, fp) != len) {
            perror(name);
            return 2;
        }
        fclose(fp);
    }
    return 0;
}

/* ---- replay ------------------------------------------------------------------------------ */

static int replay(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        FILE *fp = fopen(argv[i], "rb");
        if (!fp) {
            perror(argv[i]);
            return 2;
        }
        static unsigned char buf[1 << 20];
        size_t n = fread(buf, 1, sizeof(buf), fp);
        fclose(fp);
        LLVMFuzzerTestOneInput(buf, n);
        printf("%s: ok (%zu bytes)\n", argv[i], n);
    }
    return 0;
}

int main(int argc, char **argv)
{
    const char *s = getenv("FUZZ_SEED");
    const char *r = getenv("FUZZ_RUNS");
    rng_state     = s ? strtoull(s, NULL, 0) : 0x5053434f4du;
    long runs     = r ? atol(r) : 200000;
    if (argc == 4 && !strcmp(argv[1], "--corpus")) return write_corpus(argv[2], atol(argv[3]));
    if (argc > 1) return replay(argc, argv);

    for (int i = 0; i < 2000; i++) valid_round();
    printf("valid streams: 2000 rounds intact\n");

    save_on_crash();
    for (long i = 0; i < runs; i++) {
        cur_len = gen_input(cur_in, sizeof(cur_in));
        LLVMFuzzerTestOneInput(cur_in, cur_len);
    }
    printf("damaged streams: %ld inputs, no failure\n", runs);
    return 0;
}
