/* fuzz_tar.c - any bytes as a tar archive: the walk ends (0 or an error with a sentence),
 * and every member it reports lies inside the file with a terminated name. */
#define _GNU_SOURCE
#include "probe/tar.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int64_t file_size;

static int check(const dh__tar_member *m, void *user)
{
    (void)user;
    if (m->offset < 512 || m->size < 0 || m->offset + m->size > file_size ||
        m->header < 0 || m->header >= m->offset || memchr(m->name, 0, sizeof m->name) == NULL)
        abort();
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static int fd = -1;
    if (fd < 0 && (fd = memfd_create("fuzz_tar", MFD_CLOEXEC)) < 0)
        abort();
    if (ftruncate(fd, 0) || pwrite(fd, data, size, 0) != (ssize_t)size)
        abort();
    file_size = (int64_t)size;
    char err[256] = "";
    int rc = dh__tar_walk(fd, file_size, check, NULL, err, sizeof err);
    if (rc && !err[0]) /* every failure says why */
        abort();
    return 0;
}
