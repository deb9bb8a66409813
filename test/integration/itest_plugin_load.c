/*
 * itest_plugin_load: a transport module switched off is not loaded.
 *
 * Loading a module runs the constructors of the libraries it links: UCX's
 * install handlers for SIGSEGV, SIGBUS, ... and hook mmap/munmap/madvise
 * (which, for one, crashed ThreadSanitizer-built applications at thread
 * exit). A process that set PSP_UCP=0, or left openib at its default (off),
 * must get none of that. Each case runs in a child of its own with its
 * PSP_* environment, opens a socket (which loads the plugins) and reports
 * which modules and libraries /proc/self/maps shows and whether SIGSEGV
 * still has the action it had after pscom_init (which installs the
 * library's own, PSP_SIGSEGV).
 *
 * PSCOM_TEST_UCP_MODULE / PSCOM_TEST_OPENIB_MODULE: 1 if that module was
 * built next to libpscom (then the cases that switch it on expect it).
 */
#define _GNU_SOURCE
#include <pscom.h>

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef PSCOM_TEST_UCP_MODULE
#define PSCOM_TEST_UCP_MODULE 0
#endif
#ifndef PSCOM_TEST_OPENIB_MODULE
#define PSCOM_TEST_OPENIB_MODULE 0
#endif

enum { UCP_MOD = 1, UCX_LIB = 2, OPENIB_MOD = 4, VERBS_LIB = 8, SEGV_HANDLER = 16 };

static const char *const what[] = {"libpscom4ucp.so", "libucs", "libpscom4openib.so",
                                   "libibverbs", "a SIGSEGV handler"};

static unsigned mapped(void)
{
    unsigned m = 0;
    FILE *f    = fopen("/proc/self/maps", "r");
    if (!f) {
        perror("/proc/self/maps");
        _exit(100);
    }
    char line[1024];
    while (fgets(line, sizeof(line), f)) {
        if (strstr(line, "/libpscom4ucp.so")) m |= UCP_MOD;
        if (strstr(line, "/libucs.so")) m |= UCX_LIB;
        if (strstr(line, "/libpscom4openib.so")) m |= OPENIB_MOD;
        if (strstr(line, "/libibverbs.so")) m |= VERBS_LIB;
    }
    fclose(f);
    return m;
}

/* In a child: set the environment, load the plugins, report. */
static unsigned probe(const char *ucp, const char *openib)
{
    int fd[2];
    if (pipe(fd) < 0) return ~0u;
    pid_t pid = fork();
    if (pid == 0) {
        close(fd[0]);
        if (ucp) setenv("PSP_UCP", ucp, 1);
        if (!ucp) unsetenv("PSP_UCP");
        if (openib) setenv("PSP_OPENIB", openib, 1);
        if (!openib) unsetenv("PSP_OPENIB");
        if (pscom_init(PSCOM_VERSION) != PSCOM_SUCCESS) _exit(101);
        /* pscom_init's own (PSP_SIGSEGV), a sanitizer's, or the default */
        struct sigaction before;
        sigaction(SIGSEGV, NULL, &before);
        pscom_socket_t *s = pscom_open_socket(0, 0, PSCOM_RANK_UNDEFINED, PSCOM_SOCK_FLAG_INTRA_JOB);
        if (!s) _exit(102);
        unsigned m = mapped();
        struct sigaction sa;
        sigaction(SIGSEGV, NULL, &sa);
        if (sa.sa_handler != before.sa_handler) m |= SEGV_HANDLER;
        pscom_close_socket(s);
        ssize_t w;
        while ((w = write(fd[1], &m, sizeof(m))) < 0 && errno == EINTR) {
        }
        if (w != sizeof(m)) _exit(103);
        _exit(0);
    }
    close(fd[1]);
    unsigned m = ~0u;
    ssize_t n;
    do { /* (scripts/sigstorm.sh interrupts every call) */
        n = pid < 0 ? -1 : read(fd[0], &m, sizeof(m));
    } while (n < 0 && errno == EINTR);
    if (n != sizeof(m)) m = ~0u;
    close(fd[0]);
    int st;
    while (pid > 0 && waitpid(pid, &st, 0) < 0 && errno == EINTR) {
    }
    return m;
}

static int failures;

static void expect(const char *name, unsigned have, unsigned must, unsigned must_not)
{
    int before = failures;
    if (have == ~0u) {
        printf("FAIL %s: the child did not report\n", name);
        failures++;
        return;
    }
    for (unsigned i = 0; i < sizeof(what) / sizeof(what[0]); i++) {
        unsigned bit = 1u << i;
        if ((must & bit) && !(have & bit)) {
            printf("FAIL %s: %s expected, not there\n", name, what[i]);
            failures++;
        }
        if ((must_not & bit) && (have & bit)) {
            printf("FAIL %s: %s there, must not be\n", name, what[i]);
            failures++;
        }
    }
    printf("%s %s (seen: 0x%x)\n", failures == before ? "ok" : "FAILED", name, have);
}

int main(void)
{
    unsigned ucp_on    = PSCOM_TEST_UCP_MODULE ? UCP_MOD | UCX_LIB : 0;
    unsigned openib_on = PSCOM_TEST_OPENIB_MODULE ? OPENIB_MOD | VERBS_LIB : 0;
    unsigned all_off   = UCP_MOD | UCX_LIB | OPENIB_MOD | VERBS_LIB | SEGV_HANDLER;

    expect("PSP_UCP=0, openib at its default", probe("0", NULL), 0, all_off);
    expect("PSP_UCP=0 PSP_OPENIB=0", probe("0", "0"), 0, all_off);
    /* (UCX loads libibverbs itself, for its own verbs transports) */
    expect("ucp at its default", probe(NULL, NULL), ucp_on, OPENIB_MOD);
    expect("PSP_UCP=0 PSP_OPENIB=1", probe("0", "1"), openib_on, UCP_MOD | UCX_LIB);
    expect("PSP_UCP=2 PSP_OPENIB=1", probe("2", "1"), ucp_on | openib_on, 0);
    return failures ? 1 : 0;
}
