/*
 * shm_segment.c - create, attach and remove shared-memory segments (see
 * shm_segment.h).
 */
#define _GNU_SOURCE
#include "shm_segment.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define SHM_SEG_PREFIX "/pscom-shm-"

void shm_random(void *buf, size_t len)
{
    static uint64_t counter;
    unsigned char *p = buf;
    size_t have      = 0;
    while (have < len) {
        ssize_t n = getrandom(p + have, len - have, GRND_NONBLOCK);
        if (n <= 0) break;
        have += (size_t)n;
    }
    while (have < len) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        uint64_t x = (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 30) ^
                     ((uint64_t)getpid() << 40) ^ (++counter * 0x9e3779b97f4a7c15ull);
        x ^= x >> 31;
        x *= 0xbf58476d1ce4e5b9ull;
        x ^= x >> 29;
        size_t c = len - have < sizeof(x) ? len - have : sizeof(x);
        memcpy(p + have, &x, c);
        have += c;
    }
}

int shm_seg_name_valid(const char *name, size_t max)
{
    size_t n = strnlen(name, max);
    size_t pl = sizeof(SHM_SEG_PREFIX) - 1;
    if (n == max || n <= pl || n >= SHM_SEG_NAME_MAX) return 0;
    if (strncmp(name, SHM_SEG_PREFIX, pl) != 0) return 0;
    for (size_t i = pl; i < n; i++) {
        char c = name[i];
        if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || c == '-')) return 0;
    }
    return 1;
}

int shm_seg_create(shm_seg_t *seg, uint64_t ring_size, const uint64_t nonce[2])
{
    size_t size = SHM_SEG_RING_OFFSET + (size_t)ring_size;
    int fd = -1, err;

    memset(seg, 0, sizeof(*seg));
    for (int tries = 0; tries < 8; tries++) {
        uint64_t r;
        shm_random(&r, sizeof(r));
        snprintf(seg->name, sizeof(seg->name), SHM_SEG_PREFIX "%u-%016llx", (unsigned)getpid(),
                 (unsigned long long)r);
        fd = shm_open(seg->name, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
        if (fd >= 0 || errno != EEXIST) break;
    }
    if (fd < 0) {
        err = -errno;
        goto err_open;
    }
    seg->linked = 1;
    /* the umask may have taken bits away; it cannot have added any */
    if (fchmod(fd, 0600) < 0) {
        err = -errno;
        goto err_setup;
    }
    err = posix_fallocate(fd, 0, (off_t)size); /* returns the error number */
    if (err == EOPNOTSUPP || err == EINVAL) {
        err = ftruncate(fd, (off_t)size) < 0 ? errno : 0;
    }
    if (err) {
        err = -err;
        goto err_setup;
    }
    void *base = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
    if (base == MAP_FAILED) {
        err = -errno;
        goto err_setup;
    }
    close(fd);
    seg->base = base;
    seg->size = size;

    shm_seg_hdr_t *h = shm_seg_hdr(seg);
    h->magic         = SHM_SEG_MAGIC;
    h->version       = SHM_SEG_VERSION;
    h->ring_size     = ring_size;
    h->nonce[0]      = nonce[0];
    h->nonce[1]      = nonce[1];
    h->creator_pid   = (uint32_t)getpid();
    atomic_store_explicit(&h->consumed, 0, memory_order_relaxed);
    return 0;

err_setup:
    close(fd);
    shm_unlink(seg->name);
    seg->linked = 0;
err_open:
    return err;
}

int shm_seg_attach(shm_seg_t *seg, const char *name, uint64_t ring_size, const uint64_t nonce[2],
                   uint32_t creator_pid)
{
    size_t size = SHM_SEG_RING_OFFSET + (size_t)ring_size;
    struct stat st;
    int err;

    memset(seg, 0, sizeof(*seg));
    if (!shm_seg_name_valid(name, SHM_SEG_NAME_MAX)) return -EINVAL;
    snprintf(seg->name, sizeof(seg->name), "%s", name);

    int fd = shm_open(seg->name, O_RDWR | O_CLOEXEC, 0);
    if (fd < 0) return -errno;
    if (fstat(fd, &st) < 0) {
        err = -errno;
        goto err_close;
    }
    /* private to the user: ours, nobody else may open it */
    if (st.st_uid != geteuid() || (st.st_mode & 0077) || (size_t)st.st_size != size) {
        err = -EPERM;
        goto err_close;
    }
    void *base = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
    if (base == MAP_FAILED) {
        err = -errno;
        goto err_close;
    }
    close(fd);
    seg->base   = base;
    seg->size   = size;
    seg->linked = 1; /* the caller unlinks it once it is sure to keep it */

    const shm_seg_hdr_t *h = shm_seg_hdr(seg);
    if (h->magic != SHM_SEG_MAGIC || h->version != SHM_SEG_VERSION || h->ring_size != ring_size ||
        h->nonce[0] != nonce[0] || h->nonce[1] != nonce[1] || h->creator_pid != creator_pid) {
        munmap(seg->base, seg->size);
        seg->base   = NULL;
        seg->linked = 0; /* not the segment we were told of: leave it alone */
        return -EPROTO;
    }
    return 0;

err_close:
    close(fd);
    return err;
}

void shm_seg_unlink(shm_seg_t *seg)
{
    if (!seg->linked) return;
    shm_unlink(seg->name);
    seg->linked = 0;
}

void shm_seg_release(shm_seg_t *seg)
{
    shm_seg_unlink(seg);
    if (seg->base) munmap(seg->base, seg->size);
    seg->base = NULL;
    seg->size = 0;
}

unsigned shm_seg_sweep(unsigned min_age_s)
{
    DIR *d = opendir("/dev/shm");
    if (!d) return 0;
    const char *prefix = &SHM_SEG_PREFIX[1]; /* the file name has no '/' */
    size_t pl          = strlen(prefix);
    uid_t me           = geteuid();
    time_t now         = time(NULL);
    unsigned removed   = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        char name[SHM_SEG_NAME_MAX + 2];
        if (strncmp(e->d_name, prefix, pl)) continue;
        if (snprintf(name, sizeof(name), "/%s", e->d_name) >= (int)sizeof(name)) continue;
        if (!shm_seg_name_valid(name, sizeof(name))) continue;
        char *end;
        unsigned long pid = strtoul(e->d_name + pl, &end, 10);
        if (*end != '-' || !pid || pid > 0x7fffffff) continue;
        struct stat st;
        if (fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0) continue;
        time_t changed = st.st_mtime > st.st_ctime ? st.st_mtime : st.st_ctime;
        if (!S_ISREG(st.st_mode) || st.st_uid != me || now - changed < (time_t)min_age_s)
            continue;
        if (kill((pid_t)pid, 0) == 0 || errno != ESRCH) continue;
        if (shm_unlink(name) == 0) removed++;
    }
    closedir(d);
    return removed;
}
