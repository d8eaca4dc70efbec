/*
 * tarhdr.h - the fields of one 512-byte tar header block (internal): what the
 * shard reader (src/probe/tar.c) walks archives with, and what a decoder's
 * source (src/codec/source.c) checks a member's own header with before it
 * reads the member in place.
 */
#ifndef DH_TARHDR_H
#define DH_TARHDR_H

#include "core.h"

#define DH__TAR_BLOCK 512

/* An octal field (spaces and NULs around it), or -1. */
int64_t dh__tar_octal(const unsigned char *f, size_t len);
/* A size field: octal, or GNU's base-256 (first byte 0x80, big-endian); -1 if malformed. */
int64_t dh__tar_size(const unsigned char *f, size_t len);
/* 1 when the header's checksum is right (unsigned sums, or signed as some old tars wrote). */
int dh__tar_checksum_ok(const unsigned char *h);
/*
 * 1 when h is the header of a regular member of `size` bytes named `member`: a sound
 * checksum, a regular type, the size (unless a pax record gave it: the field then reads 0
 * or less) and, for a short ASCII name (the ustar name field holds it whole), the name.
 * Else 0 with what differs in why.
 */
int dh__tar_header_is(const unsigned char *h, const char *member, int64_t size, char *why,
                      size_t len);

#endif
