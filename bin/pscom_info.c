/*
 * pscom_info - print the pscom version and the configuration.
 *
 *   -v  version line, e.g. "pscom version 6.1.0-1 (ABI 5.0)"
 *   -c  every registered configuration table with the current values
 *   -d  with -c: documentation comments, defaults and inherited names
 *   -x  with -c: hidden entries too
 *   -h  help
 *
 * Plugins register their tables when the first socket is opened, so -c
 * opens (and closes again) a dummy socket before printing.
 */
#define _GNU_SOURCE
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>

#include "pscom.h"
#include "pscom_env.h"

/* The version of this source tree, derived from the public header (the
 * library's PSCOM_BUILD_VERSION is not defined for the tools). */
#define PSCOM_INFO_VERSION_MAJOR ((PSCOM_API_VERSION >> 16) & 0xff)
#define PSCOM_INFO_VERSION_MINOR ((PSCOM_API_VERSION >> 8) & 0xff)
#define PSCOM_INFO_VERSION_PATCH (PSCOM_API_VERSION & 0xff)
#define PSCOM_INFO_RELEASE       1

static const char *progname = "pscom_info";

static void usage(FILE *out)
{
    fprintf(out,
            "Usage: %s [OPTION...]\n"
            "Show information about the pscom library.\n"
            "  -v, --version   print the version\n"
            "  -c, --config    print the configuration (PSP_* variables, current values)\n"
            "  -d, --doc, --documentation\n"
            "                  with -c: add documentation and defaults\n"
            "  -h, --help      show this help\n",
            progname);
}

static void print_version(void)
{
    printf("pscom version %d.%d.%d-%d (ABI %d.%d)%s\n", PSCOM_INFO_VERSION_MAJOR,
           PSCOM_INFO_VERSION_MINOR, PSCOM_INFO_VERSION_PATCH, PSCOM_INFO_RELEASE,
           PSCOM_ABI_VERSION_MAJOR, PSCOM_ABI_VERSION_MINOR,
           PSCOM_ABI_CUDA_SUPPORT ? " CUDA" : "");
}

static int print_config(unsigned flags)
{
    pscom_socket_t *sock;
    pscom_err_t rc = pscom_init(PSCOM_VERSION);

    if (rc != PSCOM_SUCCESS) {
        fprintf(stderr, "%s: pscom_init() failed: %s\n", progname, pscom_err_str(rc));
        return 1;
    }
    /* loads the plugins, which register their tables */
    sock = pscom_open_socket(0, 0, PSCOM_RANK_UNDEFINED, PSCOM_SOCK_FLAG_INTER_JOB);
    if (!sock) fprintf(stderr, "%s: pscom_open_socket() failed\n", progname);

    pscom_env_table_list_print(stdout, flags);
    fflush(stdout);

    if (sock) pscom_close_socket(sock);
    return 0;
}

int main(int argc, char **argv)
{
    static const struct option long_options[] = {
        {"version", no_argument, NULL, 'v'},
        {"config", no_argument, NULL, 'c'},
        {"doc", no_argument, NULL, 'd'},
        {"documentation", no_argument, NULL, 'd'}, /* the established tool's name */
        {"hidden", no_argument, NULL, 'x'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    int version = 0, config = 0, c;
    unsigned flags = 0;

    if (argc > 0 && argv[0] && argv[0][0]) progname = argv[0];

    while ((c = getopt_long(argc, argv, "vcdxh", long_options, NULL)) != -1) {
        switch (c) {
        case 'v': version = 1; break;
        case 'c': config = 1; break;
        case 'd': flags |= PSCOM_ENV_PRINT_DOC; break;
        case 'x': flags |= PSCOM_ENV_PRINT_HIDDEN; break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 1;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "%s: unexpected argument '%s'\n", progname, argv[optind]);
        usage(stderr);
        return 1;
    }
    /* -d / -x alone: they only make sense for the configuration */
    if (flags && !config) config = 1;
    if (!version && !config) {
        usage(stdout);
        return 0;
    }

    if (version) print_version();
    fflush(stdout);
    if (config) return print_config(flags);
    return 0;
}
