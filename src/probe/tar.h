/*
 * tar.h - the members of a tar archive, read from its headers alone: each
 * member's name, type, and the offset and size of its data in the file, so
 * that a shard's media can be read in place as byte ranges (internal).
 *
 * Formats: POSIX ustar (with its name prefix), pax extended headers (a
 * member's `path` and `size` records; global headers are skipped), GNU long
 * names ('L') and base-256 sizes, as Python's tarfile and GNU tar write them.
 * libarchive would read these too but gives no member offsets, which is the
 * one thing needed here.
 */
#ifndef DH_TAR_H
#define DH_TAR_H

#include "../core/core.h"

#include <stdio.h>
#include <sys/types.h>

/* Longest member name accepted (a pax path or GNU long name over it is an error). */
#define DH__TAR_NAME_MAX 4096
/* Largest pax extended header read. */
#define DH__TAR_PAX_MAX (1 << 20)

typedef struct {
    char name[DH__TAR_NAME_MAX];
    char type;           /* '0' regular file, '5' directory, ... (ustar typeflag) */
    int64_t header;      /* offset of the member's first header block (pax/GNU ones included) */
    int64_t offset;      /* of its data */
    int64_t size;        /* of its data */
} dh__tar_member;

/*
 * Calls each(member, user) for every member of the archive open on fd (of file_size
 * bytes), in order; each returns 0 to go on or an error to stop with. 0 at the end of the
 * archive (two zero blocks, or the end of the file exactly at a block boundary), else an
 * error: DH_ECORRUPT with a sentence in err naming the offset and what is wrong (a bad
 * checksum, a member past the end of the file, a malformed size or pax record), DH_ELIMIT
 * for a name or pax header over the limits, or each's error.
 */
int dh__tar_walk(int fd, int64_t file_size, int (*each)(const dh__tar_member *m, void *user),
                 void *user, char *err, size_t errlen);

/* Where an archive is read from: read(ctx, buf, n, off) gives up to n bytes at off, 0 at
 * the end, or a negative error (a file's pread, an object's ranged reads). */
typedef struct {
    ssize_t (*read)(void *ctx, void *buf, size_t n, int64_t off);
    void *ctx;
} dh__tar_reader;

/* dh__tar_walk over a reader; when the archive breaks inside a member whose header was read
 * (its data runs past the end of the file), broken gets its name (else ""). */
int dh__tar_walk_at(const dh__tar_reader *rd, int64_t file_size, int (*each)(const dh__tar_member *m, void *user),
                    void *user, char *broken, size_t blen, char *err, size_t errlen);

/*
 * WebDataset's grouping of a member name: the key is the path up to the first dot of its
 * base name, the suffix what follows that dot (lowercased into suffix; "" without a dot).
 * Returns the key's length. Members with the same key, adjacent, form one sample.
 */
size_t dh__wds_split(const char *name, char *suffix, size_t suffix_len);

/*
 * Writing a shard (gen --format wds): ustar members, names of at most 100 bytes. add
 * appends a member with len bytes of data and gives the offset of its data; finish writes
 * the end-of-archive blocks. 0 or DH_EIO / DH_EINVAL.
 */
typedef struct {
    FILE *f;
    int64_t off;
} dh__tar_writer;

int dh__tar_add(dh__tar_writer *w, const char *name, const void *data, size_t len,
                int64_t *data_off);
int dh__tar_finish(dh__tar_writer *w);

#endif
