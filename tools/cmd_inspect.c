/*
 * cmd_inspect.c - `datahelix inspect MANIFEST`: what a manifest holds and what
 * it will cost, from descriptors alone. Counts per modality and codec, and
 * distributions of duration, resolution, tokens, decoded frames and output
 * bytes under a preprocessing spec. --json writes the same figures for tools.
 */
#include "cli.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char help[] =
    "usage: datahelix inspect MANIFEST [options]\n"
    "\n"
    "  --spec FILE             preprocessing spec (JSON, see docs/SPEC.md)\n"
    "  --workload NAME         use a built-in workload's spec instead (default: \"default\")\n"
    "  --augment               add the standard training augmentation to the spec\n"
    "  --on-error skip|fail    skip bad lines (default) or stop at the first\n"
    "  --check-files           every media path must exist and be readable; every object\n"
    "                          (http(s)://, s3://) is asked of its store, once, and must be\n"
    "                          as indexed (size, ETag); exits 1 when one is not\n"
    "  --json FILE             also write the summary as JSON\n";

enum { D_VDUR, D_VPIX, D_VDEC, D_VSAMP, D_IPIX, D_ADUR, D_TEXT, D_TOK, D_BYTES, D_CPU, D_COUNT };

static const char *const dist_names[D_COUNT] = {
    "video duration (s)",   "video megapixels/frame", "video decoded frames",
    "video sampled frames", "image megapixels",       "audio duration (s)",
    "text tokens",          "tokens per sample",      "output MiB per sample",
    "predicted CPU ms",
};
static const char *const dist_keys[D_COUNT] = {
    "video_duration_s", "video_megapixels", "video_decoded_frames", "video_sampled_frames",
    "image_megapixels", "audio_duration_s", "text_tokens",          "tokens_per_sample",
    "out_mib_per_sample", "predicted_cpu_ms",
};

typedef struct {
    double *v[D_COUNT];
    int64_t n[D_COUNT];
    int64_t by_type[DH_MEDIA_TYPE_COUNT];
    int64_t by_codec[DH_CODEC_COUNT];
    int64_t text_only;
    int64_t with_text, with_label, with_meta; /* samples carrying them (captions, .cls, .json) */
    int64_t underivable; /* loaded samples the spec cannot derive (each reported) */
    cli_dist dist[D_COUNT];
} summary;

typedef struct {
    const char *manifest, *spec_file, *workload, *json;
    int augment;
    dh_load_opts load;
} inspect_args;

static int parse_args(int argc, char **argv, inspect_args *a)
{
    dh_load_opts_default(&a->load);
    for (int i = 1; i < argc; i++) {
        const char *o = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
        int lim = cli_limit_option(argc, argv, &i, &a->load.limits);
        if (lim < 0)
            return CLI_USAGE;
        if (lim > 0)
            continue;
        if (!strcmp(o, "--help") || !strcmp(o, "-h")) {
            fputs(help, stdout);
            fputs(cli_limits_help, stdout);
            return -1;
        }
        const char **slot = !strcmp(o, "--spec")       ? &a->spec_file
                            : !strcmp(o, "--workload") ? &a->workload
                            : !strcmp(o, "--json")     ? &a->json
                                                       : NULL;
        if (slot || !strcmp(o, "--on-error")) {
            if (!val) {
                cli_err("%s needs a value", o);
                return CLI_USAGE;
            }
            i++;
            if (slot) {
                *slot = val;
            } else if (!strcmp(val, "skip") || !strcmp(val, "fail")) {
                a->load.on_error = !strcmp(val, "fail") ? DH_ON_ERROR_FAIL : DH_ON_ERROR_SKIP;
            } else {
                cli_err("--on-error expects skip or fail, got \"%s\"", val);
                return CLI_USAGE;
            }
        } else if (!strcmp(o, "--check-files")) {
            a->load.check_files = 1;
        } else if (!strcmp(o, "--augment")) {
            a->augment = 1;
        } else if (o[0] == '-' || a->manifest) {
            return cli_unexpected("inspect", o, (const char *const[]){help, NULL});
        } else {
            a->manifest = o;
        }
    }
    if (!a->manifest) {
        cli_err("inspect needs a MANIFEST (see datahelix inspect --help)");
        return CLI_USAGE;
    }
    if (a->spec_file && a->workload) {
        cli_err("inspect: give --spec or --workload, not both");
        return CLI_USAGE;
    }
    return 0;
}

static int open_spec(const inspect_args *a, dh_spec **spec)
{
    char err[512] = "";
    if (a->spec_file) {
        int rc = dh_spec_load(a->spec_file, spec, err, sizeof err);
        if (rc)
            cli_err("%s [%s]", err[0] ? err : dh_strerror(rc), dh_err_name(rc));
        return rc;
    }
    const char *name = a->workload ? a->workload : "default";
    int rc = dh_spec_builtin(name, spec);
    if (rc == DH_ENOENT) {
        cli_err("unknown workload \"%s\"; built-in specs:", name);
        for (const char *const *n = dh_spec_builtin_names(); *n; n++)
            fprintf(stderr, "  %s\n", *n);
    }
    return rc;
}

static void add(summary *s, int d, double x)
{
    s->v[d][s->n[d]++] = x;
}

static int collect(const dh_manifest *m, const dh_spec *spec, summary *s)
{
    int64_t n = dh_manifest_count(m), total_media = 0;
    dh_sample_info si;
    for (int64_t i = 0; i < n; i++) {
        dh_manifest_sample(m, i, &si);
        total_media += si.media_count;
    }
    int64_t cap = (n > total_media ? n : total_media) + 1;
    for (int d = 0; d < D_COUNT; d++) {
        s->v[d] = malloc((size_t)cap * sizeof(double));
        if (!s->v[d])
            return DH_ENOMEM;
    }
    dh_media_derived md[256];
    for (int64_t i = 0; i < n; i++) {
        dh_sample_derived sd;
        dh_manifest_sample(m, i, &si);
        int rc = dh_derive_sample(spec, m, i, &sd, md);
        if (rc) { /* that sample's error; the others are still described */
            cli_err("sample \"%s\" (line %lld): cannot derive sizes with this spec: %s: "
                    "left out of the distributions", si.id, (long long)si.line,
                    rc == DH_ELIMIT ? "a media item would be over the per-item output limit "
                                      "(lower the spec's frames, resize or tiles)"
                                    : dh_strerror(rc));
            s->underivable++;
            continue;
        }
        int64_t text = sd.tokens; /* as the spec counts them (and caps them) */
        for (int32_t j = 0; j < si.media_count; j++)
            text -= md[j].tokens;
        add(s, D_TEXT, (double)text);
        add(s, D_TOK, (double)sd.tokens);
        add(s, D_BYTES, (double)sd.out_bytes / (1024.0 * 1024.0));
        double cpu_s = 0;
        if (dh_sample_cpu_cost(spec, m, i, &cpu_s) == 0)
            add(s, D_CPU, cpu_s * 1e3);
        s->text_only += si.media_count == 0;
        s->with_text += si.text != NULL;
        s->with_label += si.has_label;
        s->with_meta += si.meta != NULL;
        for (int32_t j = 0; j < si.media_count; j++) {
            dh_media_info mi;
            dh_manifest_media(m, i, j, &mi);
            s->by_type[mi.type]++;
            s->by_codec[mi.codec]++;
            double mp = (double)mi.width * mi.height / 1e6;
            if (mi.type == DH_MEDIA_VIDEO) {
                add(s, D_VDUR, mi.duration_s);
                add(s, D_VPIX, mp);
                add(s, D_VDEC, (double)md[j].decoded_frames);
                add(s, D_VSAMP, (double)md[j].sampled_frames);
            } else if (mi.type == DH_MEDIA_IMAGE) {
                add(s, D_IPIX, mp);
            } else {
                add(s, D_ADUR, mi.duration_s);
            }
        }
    }
    for (int d = 0; d < D_COUNT; d++)
        cli_distribution(s->v[d], s->n[d], &s->dist[d]);
    return 0;
}

static void print_summary(const summary *s)
{
    printf("media by type:  ");
    for (int t = 0; t < DH_MEDIA_TYPE_COUNT; t++)
        printf(" %s %lld ", dh_media_type_name((dh_media_type)t), (long long)s->by_type[t]);
    printf(" (text-only samples %lld)\n", (long long)s->text_only);
    printf("samples with a text %lld, a label %lld, metadata %lld\n", (long long)s->with_text,
           (long long)s->with_label, (long long)s->with_meta);
    if (s->underivable)
        printf("left out: %lld samples this spec cannot derive (each named above)\n",
               (long long)s->underivable);
    printf("media by codec: ");
    for (int c = 0; c < DH_CODEC_COUNT; c++)
        if (s->by_codec[c])
            printf(" %s %lld ", dh_codec_name((dh_codec)c), (long long)s->by_codec[c]);
    printf("\n\n%-24s %9s %10s %10s %10s %10s\n", "distribution", "n", "min", "p50", "p95", "max");
    for (int d = 0; d < D_COUNT; d++) {
        const cli_dist *x = &s->dist[d];
        if (x->n)
            printf("%-24s %9lld %10.4g %10.4g %10.4g %10.4g\n", dist_names[d], (long long)x->n,
                   x->min, x->p50, x->p95, x->max);
    }
}

static int write_json(const char *path, const inspect_args *a, const dh_load_stats *ls,
                      const dh_manifest *m, const summary *s)
{
    FILE *f = fopen(path, "w");
    if (!f) {
        cli_err("cannot write %s", path);
        return 1;
    }
    fprintf(f, "{\"manifest\":\"%s\",\"lines\":%lld,\"loaded\":%lld,\"skipped\":%lld,", a->manifest,
            (long long)ls->lines, (long long)ls->loaded, (long long)ls->skipped);
    fprintf(f, "\"bytes_per_sample\":%.2f,\"by_type\":{", ls->loaded ? (double)dh_manifest_memory(m) / ls->loaded : 0.0);
    for (int t = 0; t < DH_MEDIA_TYPE_COUNT; t++)
        fprintf(f, "%s\"%s\":%lld", t ? "," : "", dh_media_type_name((dh_media_type)t),
                (long long)s->by_type[t]);
    fprintf(f, "},\"text_only\":%lld,\"with_text\":%lld,\"with_label\":%lld,\"with_meta\":%lld,"
            "\"underivable\":%lld,\"by_codec\":{", (long long)s->text_only,
            (long long)s->with_text, (long long)s->with_label, (long long)s->with_meta,
            (long long)s->underivable);
    for (int c = 0, first = 1; c < DH_CODEC_COUNT; c++)
        if (s->by_codec[c]) {
            fprintf(f, "%s\"%s\":%lld", first ? "" : ",", dh_codec_name((dh_codec)c),
                    (long long)s->by_codec[c]);
            first = 0;
        }
    fprintf(f, "}");
    for (int d = 0; d < D_COUNT; d++) {
        const cli_dist *x = &s->dist[d];
        fprintf(f, ",\"%s\":{\"n\":%lld,\"min\":%.17g,\"p50\":%.17g,\"p95\":%.17g,\"max\":%.17g}",
                dist_keys[d], (long long)x->n, x->min, x->p50, x->p95, x->max);
    }
    fprintf(f, "}\n");
    return fclose(f) == 0 ? 0 : 1;
}

static void object_problem(const dh_object_problem *p, void *user)
{
    cli_err("inspect: %s:%lld: sample \"%s\": %s [%s]", (const char *)user, (long long)p->line,
            p->sample_id, p->reason, dh_err_name(p->code));
}

/* --check-files on a manifest of objects: each asked of its store; 1 when one failed. */
static int check_objects(const dh_manifest *m, const char *manifest)
{
    char err[600] = "";
    int64_t checked = 0;
    static const cli_progress_what asked = {"inspect", "objects asked"};
    int64_t bad = dh_manifest_check_objects(m, object_problem, (void *)manifest,
                                            cli_progress, (void *)&asked, &checked, err,
                                            sizeof err);
    if (bad < 0) {
        cli_err("inspect: cannot ask the object store: %s [%s]", err[0] ? err : "",
                dh_err_name((int)bad));
        return 1;
    }
    if (checked)
        printf("objects: %lld asked of their stores: %lld there and as indexed, %lld missing, "
               "unreadable or changed\n", (long long)checked, (long long)(checked - bad),
               (long long)bad);
    return bad > 0;
}

int cli_inspect(int argc, char **argv)
{
    inspect_args a = {0};
    int rc = parse_args(argc, argv, &a);
    if (rc)
        return rc < 0 ? 0 : rc;
    dh_spec *spec = NULL;
    if (open_spec(&a, &spec))
        return 1;
    if (cli_not_a_shard(a.manifest)) {
        dh_spec_free(spec);
        return 1;
    }
    int64_t reported = 0;
    a.load.diag = cli_print_diag;
    a.load.diag_user = &reported;
    dh_manifest *m = NULL;
    dh_load_stats ls;
    double t0 = cli_now();
    rc = dh_manifest_load(a.manifest, &a.load, &m, &ls);
    double secs = cli_now() - t0;
    if (!rc || ls.lines) { /* a file it could not open has no lines to account for */
        printf("manifest %s: %lld lines: %lld loaded + %lld skipped", a.manifest,
               (long long)ls.lines, (long long)ls.loaded, (long long)ls.skipped);
        if (ls.blank)
            printf(" (%lld blank lines ignored)", (long long)ls.blank);
        printf(" in %.2f s\n", secs);
    }
    if (rc) {
        cli_err("inspect: %s: %s", a.manifest, dh_strerror(rc));
        dh_spec_free(spec);
        return 1;
    }
    char random[400];
    if (a.augment)
        dh_spec_augment(spec);
    dh_spec_random_text(spec, random, sizeof random);
    printf("descriptor table: %.1f bytes/sample, spec: %s%s\nrandom augmentation: %s\n",
           ls.loaded ? (double)dh_manifest_memory(m) / (double)ls.loaded : 0.0,
           a.spec_file ? a.spec_file : a.workload ? a.workload : "default",
           a.augment ? " + --augment" : "", random);
    summary s = {0};
    int out = 0;
    if (collect(m, spec, &s)) {
        out = 1;
    } else {
        print_summary(&s);
        if (a.json)
            out = write_json(a.json, &a, &ls, m, &s);
    }
    if (!out && a.load.check_files && check_objects(m, a.manifest))
        out = 1;
    if (!out && ls.skipped && !ls.loaded) { /* every line refused: nothing here is usable */
        cli_err("inspect: %s: no sample loaded (every line skipped, each named above)",
                a.manifest);
        out = 1;
    }
    for (int d = 0; d < D_COUNT; d++)
        free(s.v[d]);
    dh_manifest_free(m);
    dh_spec_free(spec);
    return out;
}
