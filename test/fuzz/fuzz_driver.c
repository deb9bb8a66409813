/*
 * fuzz_driver.c - main() of the ctest fuzz tests (fuzz_stream,
 * fuzz_precon); for long runs build the targets with libFuzzer
 * (scripts/fuzz.sh).
 *
 *   <test> [FILE...]      replay these inputs (e.g. a crash libFuzzer saved)
 *   <test>                1. the target's check of valid inputs;
 *                         2. FUZZ_RUNS (default: the target's) generated
 *                            inputs, plausible and damaged, through the
 *                            target
 *   <test> --corpus DIR N write N inputs of part 2 into DIR (a seed corpus
 *                         for libFuzzer)
 *
 * FUZZ_SEED picks the pseudo-random sequence (default fixed: the same
 * inputs in every run); an input of part 2 that fails is written to
 * fuzz.crash (in the working directory) for replay.
 */
#include "fuzz_driver.h"

#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>

static uint64_t rng_state;

uint64_t fuzz_rnd(void) /* splitmix64 */
{
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
    z          = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z          = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

size_t fuzz_rnd_below(size_t n)
{
    return n ? (size_t)(fuzz_rnd() % n) : 0;
}

size_t fuzz_damage(unsigned char *in, size_t len, size_t keep)
{
    unsigned damage = fuzz_rnd_below(4); /* some stay whole */
    for (unsigned d = 0; d < damage && len > keep; d++) {
        size_t at = keep + fuzz_rnd_below(len - keep);
        switch (fuzz_rnd_below(3)) {
        case 0: in[at] ^= (unsigned char)(1u << fuzz_rnd_below(8)); break;
        case 1: in[at] = (unsigned char)fuzz_rnd(); break;
        default: len = at; break; /* cut off */
        }
    }
    return len;
}

static unsigned char cur_in[8192]; /* the input of part 2 under test */
static size_t cur_len;

static void save_input(void)
{
    if (!cur_len) return; /* not in part 2 */
    int fd = open("fuzz.crash", O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
        ssize_t w = write(fd, cur_in, cur_len);
        (void)w;
        close(fd);
    }
    static const char msg[] = "fuzz: the failing input is in fuzz.crash\n";
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
        size_t len = fuzz_target_generate(cur_in, sizeof(cur_in));
        FILE *fp   = fopen(name, "wb");
        if (!fp || fwrite(cur_in, 1, len, fp) != len) {
            perror(name);
            return 2;
        }
        fclose(fp);
    }
    return 0;
}

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
    long runs     = r ? atol(r) : fuzz_target_runs;
    if (argc == 4 && !strcmp(argv[1], "--corpus")) return write_corpus(argv[2], atol(argv[3]));
    if (argc > 1) return replay(argc, argv);

    printf("%s\n", fuzz_target_selfcheck());
    save_on_crash();
    for (long i = 0; i < runs; i++) {
        cur_len = fuzz_target_generate(cur_in, sizeof(cur_in));
        LLVMFuzzerTestOneInput(cur_in, cur_len);
    }
    cur_len = 0;
    printf("generated and damaged inputs: %ld, no failure\n", runs);
    return 0;
}
