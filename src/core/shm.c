/*
 * shm.c - shared memory regions (see shm.h).
 */
#include "shm.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

static int64_t page_round(int64_t size)
{
    long page = sysconf(_SC_PAGESIZE);
    int64_t p = page > 0 ? page : 4096;
    return (DH_MAX(size, 1) + p - 1) / p * p;
}

/* A number from the first line of a file that starts with key (or the file's only line). */
static int64_t read_kb_field(const char *path, const char *key)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    char line[256];
    int64_t v = -1;
    while (fgets(line, sizeof line, f)) {
        size_t k = strlen(key);
        if (!strncmp(line, key, k)) {
            long long x;
            if (sscanf(line + k, "%lld", &x) == 1)
                v = x;
            break;
        }
    }
    fclose(f);
    return v;
}

/*
 * Bytes this process may still fill with shared memory: the memory the
 * kernel says is available, and what its control groups (v1 or v2) still
 * allow. Reserving more does not fail on Linux: it invites the OOM killer.
 */
int64_t dh__memory_available(void)
{
    int64_t kb = read_kb_field("/proc/meminfo", "MemAvailable:");
    int64_t avail = kb >= 0 ? kb * 1024 : -1;
    int64_t room = dh__cgroup_room("/proc/self/cgroup", "/proc/self/mountinfo");
    if (room >= 0 && (avail < 0 || room < avail))
        avail = room;
    return avail;
}

int dh__shm_create(dh__shm *s, int64_t size, int share, int reserve, int populate, char *err,
                   size_t errlen)
{
    memset(s, 0, sizeof *s);
    s->fd = s->ro_fd = -1;
    s->size = page_round(size);
    int flags = populate ? MAP_POPULATE : 0;
    if (!share) {
        s->base = mmap(NULL, (size_t)s->size, PROT_READ | PROT_WRITE,
                       MAP_SHARED | MAP_ANONYMOUS | flags, -1, 0);
        if (s->base == MAP_FAILED) {
            s->base = NULL;
            return dh__fail(err, errlen, DH_ENOMEM, "cannot map %.1f MiB for the batch pool",
                            (double)s->size / 1048576.0);
        }
        return 0;
    }
    int64_t avail = reserve ? dh__memory_available() : -1;
    if (avail >= 0 && s->size > avail)
        return dh__fail(err, errlen, DH_ENOMEM,
                        "the batch pool needs %.1f MiB of shared memory but %.1f MiB are "
                        "available: lower --memory-budget (or the batch size), or give this "
                        "job more memory", (double)s->size / 1048576.0, (double)avail / 1048576.0);
    s->fd = memfd_create("datahelix-pool", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (s->fd < 0)
        return dh__fail(err, errlen, -errno, "cannot create shared memory: %s", strerror(errno));
    int rc = ftruncate(s->fd, (off_t)s->size) ? errno : 0;
    if (!rc && reserve)
        rc = posix_fallocate(s->fd, 0, (off_t)s->size);
    if (!rc && fcntl(s->fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL))
        rc = errno;
    if (!rc) { /* the descriptor others get: read-only, so their mappings are too */
        char self[64];
        snprintf(self, sizeof self, "/proc/self/fd/%d", s->fd);
        s->ro_fd = open(self, O_RDONLY | O_CLOEXEC);
        rc = s->ro_fd < 0 ? errno : 0;
    }
    if (rc) {
        dh__shm_destroy(s);
        return dh__fail(err, errlen, DH_ENOMEM,
                        "cannot reserve %.1f MiB of shared memory for the batch pool (%s): lower "
                        "--memory-budget, or raise the memory (or the cgroup's memory limit) this "
                        "job "
                        "may use", (double)size / 1048576.0, strerror(rc));
    }
    s->base = mmap(NULL, (size_t)s->size, PROT_READ | PROT_WRITE, MAP_SHARED | flags, s->fd, 0);
    if (s->base == MAP_FAILED) {
        s->base = NULL;
        rc = errno;
        dh__shm_destroy(s);
        return dh__fail(err, errlen, DH_ENOMEM, "cannot map %.1f MiB of shared memory: %s",
                        (double)size / 1048576.0, strerror(rc));
    }
    return 0;
}

int dh__shm_map(dh__shm *s, int fd, int64_t size, int writable)
{
    memset(s, 0, sizeof *s);
    s->fd = s->ro_fd = -1;
    struct stat st;
    if (fd < 0 || size <= 0 || fstat(fd, &st) || st.st_size < size)
        return DH_EINVAL; /* mapping past the end would be a SIGBUS later */
    s->fd = fd;
    s->size = size;
    int prot = PROT_READ | (writable ? PROT_WRITE : 0);
    s->base = mmap(NULL, (size_t)size, prot, MAP_SHARED, fd, 0);
    if (s->base == MAP_FAILED) {
        s->base = NULL;
        return -errno;
    }
    return 0;
}

void dh__shm_destroy(dh__shm *s)
{
    if (s->base)
        munmap(s->base, (size_t)s->size);
    if (s->fd >= 0)
        close(s->fd);
    if (s->ro_fd >= 0)
        close(s->ro_fd);
    memset(s, 0, sizeof *s);
    s->fd = s->ro_fd = -1;
}
