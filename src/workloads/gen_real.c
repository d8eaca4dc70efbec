/*
 * gen_real.c - a workload's samples as real media files plus a manifest of
 * what probing them measured (datahelix gen).
 *
 * The descriptors come from the same seeded generator the simulator uses,
 * scaled down so a run fits a small machine: resolution, duration and the
 * keyframe interval (in frames) shrink by the same factor, so a clip keeps
 * its shape of sampling and seeking. Every written file is probed back with
 * dh_probe_file(); the manifest records measured metadata, not the intent.
 */
#include "../codec/codec.h"
#include "../probe/probe.h"
#include "../probe/tar.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Writing WebDataset shards: the current shard, and where samples go. */
typedef struct {
    const char *dir;      /* the output directory (shards under dir/shards) */
    int64_t per_shard;
    int64_t shard;        /* the open shard's number */
    dh__tar_writer w;     /* w.f NULL: none open */
} shard_out;

static int mkdirs(const char *dir)
{
    char buf[4096];
    snprintf(buf, sizeof buf, "%s", dir);
    for (char *p = buf + 1; *p; p++) {
        if (*p == '/') {
            *p = 0;
            if (mkdir(buf, 0777) != 0 && errno != EEXIST)
                return -errno;
            *p = '/';
        }
    }
    return mkdir(buf, 0777) != 0 && errno != EEXIST ? -errno : 0;
}

static int scale_factor(const char *scale)
{
    if (!scale || !strcmp(scale, "mini"))
        return 4;
    if (!strcmp(scale, "small"))
        return 2;
    if (!strcmp(scale, "full"))
        return 1;
    return 0;
}

static int even_at_least(double x, int lo)
{
    return DH_MAX(lo, (int)lround(x / 2.0) * 2);
}

/* Writes media item j of sample i, scaled by k, to dir/rel; fills rel. */
static int write_item(const dh_media_info *mi, int k, const char *dir, int64_t i, int32_t j,
                      uint64_t seed, char *rel, size_t rellen, char *err, size_t errlen)
{
    char full[4096];
    uint64_t s = dh__mix64(seed ^ (uint64_t)(i * 131 + j));
    int w = even_at_least(mi->width / (double)k, 32), h = even_at_least(mi->height / (double)k, 32);
    if (mi->type == DH_MEDIA_VIDEO) {
        double secs = DH_MAX(1.0, mi->duration_s / k);
        int64_t frames = DH_MAX(1, llround(secs * mi->fps));
        /* The descriptor's keyframe interval (its length when it has one keyframe), scaled. */
        int64_t gop = mi->keyframe_count > 1 ? mi->keyframes[1] : mi->frames;
        snprintf(rel, rellen, "video/%08lld_%d.mp4", (long long)i, j);
        snprintf(full, sizeof full, "%s/%s", dir, rel);
        return dh__encode_video(full, w, h, mi->fps, frames, (int)DH_MAX(1, gop / k), s, err, errlen);
    }
    if (mi->type == DH_MEDIA_IMAGE) {
        int png = mi->codec == DH_CODEC_PNG;
        snprintf(rel, rellen, "image/%08lld_%d.%s", (long long)i, j, png ? "png" : "jpg");
        snprintf(full, sizeof full, "%s/%s", dir, rel);
        return png ? dh__encode_png(full, w, h, s, err, errlen)
                   : dh__encode_jpeg(full, w, h, s, err, errlen);
    }
    snprintf(rel, rellen, "audio/%08lld_%d.flac", (long long)i, j);
    snprintf(full, sizeof full, "%s/%s", dir, rel);
    int rate = mi->sample_rate > 0 ? mi->sample_rate : 16000;
    return dh__encode_flac(full, rate, DH_MAX(0.5, mi->duration_s / k), s, err, errlen);
}

/* A caption of about 4 bytes a token (the workload's text tokens), seeded words. */
static char *caption(int64_t tokens, uint64_t seed)
{
    size_t want = (size_t)DH_MAX(4, DH_MIN(tokens, 100000) * 4), n = 0;
    char *t = malloc(want + 16);
    dh__rng r;
    dh__rng_seed(&r, seed);
    while (t && n < want)
        n += (size_t)snprintf(t + n, want + 16 - n, "%sw%llu", n ? " " : "",
                              (unsigned long long)dh__rng_below(&r, 5000));
    return t;
}

/* Appends member name (len bytes of data) to the open shard. */
static int add_member(shard_out *sh, const char *name, const void *data, size_t len, char *err,
                      size_t errlen)
{
    if (dh__tar_add(&sh->w, name, data, len, NULL))
        return dh__fail(err, errlen, DH_EIO, "cannot write shard %05lld: %s",
                        (long long)sh->shard, strerror(errno));
    return 0;
}

/* Reads a whole (small) file; 0 or an error. */
static int slurp(const char *path, uint8_t **buf, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return -errno;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    *buf = malloc((size_t)DH_MAX(n, 1));
    int rc = n < 0 || !*buf || fread(*buf, 1, (size_t)n, f) != (size_t)n ? DH_EIO : 0;
    fclose(f);
    *len = (size_t)DH_MAX(n, 0);
    return rc;
}

/* Starts shard sh->shard when sample i begins one. */
static int shard_for(shard_out *sh, int64_t i, char *err, size_t errlen)
{
    if (sh->w.f && i % sh->per_shard)
        return 0;
    if (sh->w.f && (dh__tar_finish(&sh->w) | fclose(sh->w.f)))
        return dh__fail(err, errlen, DH_EIO, "cannot finish shard %05lld", (long long)sh->shard);
    sh->shard = i / sh->per_shard;
    char path[4200];
    snprintf(path, sizeof path, "%s/shards/%05lld.tar", sh->dir, (long long)sh->shard);
    sh->w = (dh__tar_writer){fopen(path, "wb"), 0};
    return sh->w.f ? 0 : dh__fail(err, errlen, -errno, "cannot create %s: %s", path,
                                  strerror(errno));
}

/* Encodes every item of sample i, probes it back and writes the manifest line. */
static int write_sample(const dh_manifest *m, int64_t i, int k, const char *dir, uint64_t seed,
                        FILE *out, dh_gen_stats *st, char *err, size_t errlen)
{
    dh_sample_info si;
    dh_manifest_sample(m, i, &si);
    json_t *line = json_object(), *media = json_array();
    json_object_set_new(line, "id", json_string(si.id));
    json_object_set_new(line, "text_tokens", json_integer(si.text_tokens));
    json_object_set_new(line, "media", media);
    int rc = 0;
    for (int32_t j = 0; j < si.media_count && !rc; j++) {
        dh_media_info mi;
        char rel[256], full[4096];
        dh_manifest_media(m, i, j, &mi);
        if ((rc = write_item(&mi, k, dir, i, j, seed, rel, sizeof rel, err, errlen)))
            break;
        snprintf(full, sizeof full, "%s/%s", dir, rel);
        dh_probe_result pr;
        if ((rc = dh_probe_file(full, NULL, &pr, err, errlen)))
            break;
        json_array_append_new(media, dh__media_json(&pr, rel));
        st->files++;
        st->bytes += pr.info.bytes;
        dh_probe_result_clear(&pr);
    }
    char *text = rc ? NULL : json_dumps(line, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(10));
    json_decref(line);
    if (!rc && (!text || fputs(text, out) < 0 || fputc('\n', out) == EOF))
        rc = DH_EIO;
    free(text);
    return rc;
}

/* Sample i into the shards: its items encoded (KEY.EXT, or KEY.J.EXT for a sample of
 * several), a caption of the workload's token length (KEY.txt), a label (KEY.cls) and
 * metadata (KEY.json). The manifest comes from indexing the finished shards. */
static int shard_sample(const dh_manifest *m, int64_t i, int k, const char *dir, uint64_t seed,
                        shard_out *sh, dh_gen_stats *st, char *err, size_t errlen)
{
    dh_sample_info si;
    dh_manifest_sample(m, i, &si);
    char key[32], name[64], full[4096];
    snprintf(key, sizeof key, "%08lld", (long long)i);
    int rc = shard_for(sh, i, err, errlen);
    for (int32_t j = 0; j < si.media_count && !rc; j++) {
        dh_media_info mi;
        char rel[256];
        dh_manifest_media(m, i, j, &mi);
        if ((rc = write_item(&mi, k, dir, i, j, seed, rel, sizeof rel, err, errlen)))
            break;
        snprintf(full, sizeof full, "%s/%s", dir, rel);
        const char *ext = strrchr(rel, '.') + 1;
        if (si.media_count > 1)
            snprintf(name, sizeof name, "%s.%d.%s", key, j, ext);
        else
            snprintf(name, sizeof name, "%s.%s", key, ext);
        uint8_t *buf = NULL;
        size_t len = 0;
        if (!(rc = slurp(full, &buf, &len)))
            rc = add_member(sh, name, buf, len, err, errlen);
        else
            dh__msg(err, errlen, "cannot read back %s: %s", full, dh_strerror(rc));
        free(buf);
        unlink(full);
        st->files++;
        st->bytes += (int64_t)len;
    }
    char *text = rc ? NULL : caption(si.text_tokens, dh__mix64(seed ^ (uint64_t)i * 7919));
    char cls[32];
    snprintf(cls, sizeof cls, "%lld", (long long)(dh__mix64(seed ^ ((uint64_t)i << 20)) % 400));
    snprintf(name, sizeof name, "%s.txt", key);
    if (!rc)
        rc = text ? add_member(sh, name, text, strlen(text), err, errlen) : DH_ENOMEM;
    snprintf(name, sizeof name, "%s.cls", key);
    if (!rc)
        rc = add_member(sh, name, cls, strlen(cls), err, errlen);
    /* metadata as video2dataset writes it per sample (key, status, url; a small subset) */
    char meta[160];
    snprintf(meta, sizeof meta, "{\"key\": \"%s\", \"status\": \"success\", \"url\": "
             "\"gen://%lld\", \"items\": %d}", key, (long long)i, (int)si.media_count);
    snprintf(name, sizeof name, "%s.json", key);
    if (!rc)
        rc = add_member(sh, name, meta, strlen(meta), err, errlen);
    free(text);
    return rc;
}

int dh_workload_write(const char *name, const char *dir, int64_t samples, uint64_t seed,
                      const char *scale, void (*progress)(int64_t, int64_t, void *), void *user,
                      dh_gen_stats *stats, char *err, size_t errlen)
{
    return dh_workload_write_shards(name, dir, samples, seed, scale, 0, progress, user, stats,
                                    err, errlen);
}

int dh_workload_write_shards(const char *name, const char *dir, int64_t samples, uint64_t seed,
                             const char *scale, int64_t per_shard,
                             void (*progress)(int64_t, int64_t, void *), void *user,
                             dh_gen_stats *stats, char *err, size_t errlen)
{
    dh_gen_stats local;
    stats = stats ? stats : &local;
    memset(stats, 0, sizeof *stats);
    int k = scale_factor(scale);
    if (!name || !dir || samples < 1 || !k) {
        dh__msg(err, errlen, "gen needs a workload, a directory, samples >= 1 and scale "
                             "mini, small or full");
        return DH_EINVAL;
    }
    dh_manifest *m;
    int rc = dh_workload_generate(name, samples, seed, &m);
    if (rc) {
        dh__msg(err, errlen, "workload \"%s\": %s", name, dh_strerror(rc));
        return rc;
    }
    char sub[4096], path[4096];
    const char *subs[] = {"", "/video", "/image", "/audio", "/shards"};
    for (int d = 0; d < (per_shard > 0 ? 5 : 4) && !rc; d++) {
        snprintf(sub, sizeof sub, "%s%s", dir, subs[d]);
        if ((rc = mkdirs(sub)))
            dh__msg(err, errlen, "cannot create %s: %s", sub, dh_strerror(rc));
    }
    snprintf(path, sizeof path, "%s/manifest.jsonl", dir);
    char tmp[sizeof path + 32];
    /* The manifest appears only once every sample is written: an interrupted gen (or demo)
     * leaves no partial manifest that the next one would reuse. */
    /* Shards: the manifest is what index makes of them once they are complete (each member
     * pinned to its shard's final size). */
    FILE *out = rc || per_shard > 0 ? NULL : dh__out_open(path, tmp, sizeof tmp);
    if (!rc && !out && per_shard <= 0)
        rc = -errno;
    shard_out sh = {.dir = dir, .per_shard = per_shard};
    for (int64_t i = 0; !rc && i < samples; i++) {
        rc = per_shard > 0 ? shard_sample(m, i, k, dir, seed, &sh, stats, err, errlen)
                           : write_sample(m, i, k, dir, seed, out, stats, err, errlen);
        stats->samples += !rc;
        if (progress)
            progress(i + 1, samples, user);
    }
    if (sh.w.f) { /* the last shard, and the loose directories it emptied */
        int frc = dh__tar_finish(&sh.w) | fclose(sh.w.f);
        if (!rc && frc)
            rc = dh__fail(err, errlen, DH_EIO, "cannot finish shard %05lld",
                          (long long)sh.shard);
        for (int d = 1; d < 4; d++) {
            snprintf(sub, sizeof sub, "%s%s", dir, subs[d]);
            rmdir(sub);
        }
    }
    if (!rc && per_shard > 0) {
        dh_index_stats ist;
        if ((rc = dh_index_dir(dir, path, NULL, &ist)))
            dh__msg(err, errlen, "indexing the shards written: %s", dh_strerror(rc));
        else if (ist.shard_samples != stats->samples)
            rc = dh__fail(err, errlen, DH_ECORRUPT, "%lld samples written, %lld indexed",
                          (long long)stats->samples, (long long)ist.shard_samples);
    }
    if (out) {
        int crc = dh__out_close(out, tmp, path, !rc);
        rc = rc ? rc : crc;
    }
    dh_manifest_free(m);
    return rc;
}
