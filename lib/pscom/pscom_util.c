/*
 * pscom_util.c - endpoint strings, the node id, and the public misc
 * helpers of pscom.h (readall/writeall, port and address parsing).
 */
#define _GNU_SOURCE
#include "pscom_util.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <ifaddrs.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "pscom_log.h"

#define UTIL_HOST_MAX 256
#define UTIL_PORT_MAX 65535

/* ---------------------------------------------------------------------- */
/* host names                                                             */
/* ---------------------------------------------------------------------- */

/* Dotted quad or host name to an IPv4 in network byte order. */
static int util_resolve_ipv4(const char *host, struct in_addr *addr)
{
    struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM};
    struct addrinfo *res = NULL;

    if (!host || !*host) return -1;
    if (inet_pton(AF_INET, host, addr) == 1) return 0;
    if (getaddrinfo(host, NULL, &hints, &res) != 0 || !res) return -1;
    *addr = ((struct sockaddr_in *)res->ai_addr)->sin_addr;
    freeaddrinfo(res);
    return 0;
}

/* ---------------------------------------------------------------------- */
/* endpoint strings                                                       */
/* ---------------------------------------------------------------------- */

/* all digits, at most 5 of them, value <= 65535; or -1 (a socket that
 * does not listen: pscom_connect makes that a loopback connection) */
static int ep_parse_port(const char *str, size_t len, int *port)
{
    int val = 0;

    if (len == 2 && str[0] == '-' && str[1] == '1') {
        *port = -1;
        return 0;
    }
    if (len == 0 || len > 5) return -1;
    for (size_t i = 0; i < len; i++) {
        if (!isdigit((unsigned char)str[i])) return -1;
        val = val * 10 + (str[i] - '0');
    }
    if (val > UTIL_PORT_MAX) return -1;
    *port = val;
    return 0;
}

static int ep_parse_host(const char *str, size_t len, uint32_t *addr)
{
    char host[UTIL_HOST_MAX];
    struct in_addr in;

    if (len == 0 || len >= sizeof(host)) return -1;
    memcpy(host, str, len);
    host[len] = '\0';
    if (util_resolve_ipv4(host, &in) != 0) return -1;
    *addr = ntohl(in.s_addr);
    return 0;
}

int pscom_ep_parse(const char *ep_str, pscom_ep_t *ep)
{
    const char *colon, *at, *port_end;
    pscom_ep_t res = {0};

    if (!ep_str || !ep) goto err_inval;
    colon = strchr(ep_str, ':');
    if (!colon) goto err_inval;
    at = strchr(colon + 1, '@');
    port_end = at ? at : colon + strlen(colon);

    if (ep_parse_host(ep_str, (size_t)(colon - ep_str), &res.addr)) goto err_inval;
    if (ep_parse_port(colon + 1, (size_t)(port_end - colon - 1), &res.port)) goto err_inval;
    if (at) {
        res.has_name = 1;
        memcpy(res.name, at + 1, strnlen(at + 1, sizeof(res.name))); /* zero-padded */
    }
    *ep = res;
    return 0;

err_inval:
    errno = EINVAL;
    return -1;
}

char *pscom_ep_format(uint32_t addr, int port, const char name[8])
{
    char *str = NULL;
    const char *n = name ? name : "";

    if (asprintf(&str, "%u.%u.%u.%u:%u@%.8s", (addr >> 24) & 0xff, (addr >> 16) & 0xff,
                 (addr >> 8) & 0xff, addr & 0xff, (unsigned)port, n) < 0) {
        return NULL;
    }
    return str;
}

/* ---------------------------------------------------------------------- */
/* node id                                                                */
/* ---------------------------------------------------------------------- */

/* Is addr (host order) on the network of one local interface? Returns
 * the interface address (host order) or 0. len < 0: use the interface's
 * own netmask, so a host address and a network address both match. */
static uint32_t nodeid_match_if(const struct ifaddrs *ifs, uint32_t addr, int len)
{
    uint32_t exact = 0, net = 0;

    for (const struct ifaddrs *i = ifs; i; i = i->ifa_next) {
        uint32_t if_addr, mask;

        if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET) continue;
        if_addr = ntohl(((const struct sockaddr_in *)i->ifa_addr)->sin_addr.s_addr);
        if (len >= 0) {
            mask = len ? ~0u << (32 - len) : 0;
        } else {
            mask = i->ifa_netmask
                       ? ntohl(((const struct sockaddr_in *)i->ifa_netmask)->sin_addr.s_addr)
                       : ~0u;
        }
        if (if_addr == addr) exact = if_addr;
        if (!net && (if_addr & mask) == (addr & mask)) net = if_addr;
    }
    return exact ? exact : net;
}

/* one PSP_NETWORK token: "a.b.c.d/len", "a.b.c.d" or a host name */
static uint32_t nodeid_match_token(const struct ifaddrs *ifs, const char *tok)
{
    char host[UTIL_HOST_MAX];
    const char *slash = strchr(tok, '/');
    size_t host_len = slash ? (size_t)(slash - tok) : strlen(tok);
    struct in_addr in;
    int len = -1;

    if (host_len == 0 || host_len >= sizeof(host)) return 0;
    memcpy(host, tok, host_len);
    host[host_len] = '\0';
    if (slash) {
        char *end;
        long l = strtol(slash + 1, &end, 10);
        if (end == slash + 1 || *end || l < 0 || l > 32) return 0;
        len = (int)l;
    }
    if (util_resolve_ipv4(host, &in) != 0) return 0;
    return nodeid_match_if(ifs, ntohl(in.s_addr), len);
}

static uint32_t nodeid_from_network(const char *network)
{
    struct ifaddrs *ifs = NULL;
    char *copy, *save = NULL;
    uint32_t id = 0;

    if (getifaddrs(&ifs) != 0) return 0;
    copy = strdup(network);
    for (char *tok = copy ? strtok_r(copy, " ,\t", &save) : NULL; tok && !id;
         tok = strtok_r(NULL, " ,\t", &save)) {
        id = nodeid_match_token(ifs, tok);
    }
    free(copy);
    freeifaddrs(ifs);
    return id;
}

static uint32_t nodeid_from_hostname(void)
{
    char host[UTIL_HOST_MAX] = "";
    struct in_addr in;

    if (gethostname(host, sizeof(host) - 1) != 0) return 0;
    if (util_resolve_ipv4(host, &in) != 0) return 0;
    return ntohl(in.s_addr);
}

int pscom_nodeid_lookup(const char *network)
{
    uint32_t id = 0;

    if (network && *network) {
        id = nodeid_from_network(network);
        if (!id) plog_err("PSP_NETWORK='%s' matches no local interface; using "
                          "the address of the host name", network);
    }
    if (!id) id = nodeid_from_hostname();
    if (!id) {
        plog_warn("cannot determine the node id; using 127.0.0.1");
        id = INADDR_LOOPBACK;
    }
    return (int)id;
}

int pscom_nodeid_compute(const char *network)
{
    static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
    static int cached, valid;
    int id;

    pthread_mutex_lock(&lock);
    if (!valid) {
        cached = pscom_nodeid_lookup(network);
        valid = 1;
    }
    id = cached;
    pthread_mutex_unlock(&lock);
    return id;
}

/* ---------------------------------------------------------------------- */
/* public helpers (pscom.h, misc utilities)                               */
/* ---------------------------------------------------------------------- */

PSCOM_API ssize_t pscom_writeall(int fd, const void *buf, size_t count)
{
    const char *p = buf;
    size_t done = 0;

    while (done < count) {
        ssize_t n = write(fd, p + done, count - done);
        if (n > 0) {
            done += (size_t)n;
        } else if (n < 0 && (errno == EINTR || errno == EAGAIN)) {
            sched_yield();
        } else {
            if (n == 0) errno = EIO; /* write() made no progress */
            return -1;
        }
    }
    return (ssize_t)done;
}

PSCOM_API ssize_t pscom_readall(int fd, void *buf, size_t count)
{
    char *p = buf;
    size_t done = 0;

    while (done < count) {
        ssize_t n = read(fd, p + done, count - done);
        if (n > 0) {
            done += (size_t)n;
        } else if (n == 0) {
            break; /* EOF */
        } else if (errno == EINTR || errno == EAGAIN) {
            sched_yield();
        } else {
            return -1;
        }
    }
    return (ssize_t)done;
}

/* numeric port (0..65535) or service name; network byte order */
PSCOM_API int pscom_atoport(const char *service, const char *proto)
{
    const char *s = service ? service : "";
    struct servent *se;
    char *end;
    long port;

    if (!*s) return 0; /* "" means port 0 */
    port = strtol(s, &end, 10);
    if (end != s && !*end) {
        if (port < 0 || port > UTIL_PORT_MAX) goto err_inval;
        return (int)htons((uint16_t)port);
    }
    se = getservbyname(s, proto);
    if (se) return se->s_port;

err_inval:
    errno = EINVAL;
    return -1;
}

PSCOM_API int pscom_atoaddr(const char *address, struct in_addr *addr)
{
    struct in_addr in;

    if (!address) {
        in.s_addr = INADDR_LOOPBACK; /* as stored, without htonl (compatibility) */
    } else if (util_resolve_ipv4(address, &in) != 0) {
        errno = EINVAL;
        return -1;
    }
    if (addr) *addr = in;
    return 0;
}

PSCOM_API int pscom_ascii_to_sockaddr_in(const char *host, const char *port,
                                         const char *protocol, struct sockaddr_in *addr)
{
    struct in_addr in;
    int portno = pscom_atoport(port, protocol);

    if (portno == -1) return -1;
    if (pscom_atoaddr(host, &in) != 0) return -1;
    if (addr) {
        memset(addr, 0, sizeof(*addr));
        addr->sin_family = AF_INET;
        addr->sin_port = (in_port_t)portno;
        addr->sin_addr = in;
    }
    return 0;
}
