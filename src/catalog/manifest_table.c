/*
 * manifest_table.c - the descriptor table a manifest's validated lines are
 * committed to (struct-of-arrays columns, catalog.h), its id index (open
 * addressing over the ids) and its lifecycle. A commit either appends the
 * whole sample or changes nothing.
 */
#include "manifest_int.h"
#include "jsonlite.h"

#include <stdlib.h>
#include <string.h>

/* Where an id of this hash starts probing. */
static size_t id_home(const dh_manifest *m, uint32_t hash)
{
    return (size_t)hash & (m->idx_cap - 1);
}

/* An index entry: the id's hash in the high 32 bits, its row + 1 in the low ones. */
#define ID_ROW(entry) ((uint32_t)(entry))

static uint32_t id_hash(const char *id, size_t len)
{
    return (uint32_t)dh__hash_bytes(id, len, 0x1d);
}

/* The index's slot for id: empty, or the row's that has it (its row is ID_ROW - 1). *hash
 * (may be NULL) gets the id's hash, which the slot keeps. */
static uint64_t *id_slot(const dh_manifest *m, const char *id, size_t len, uint32_t *hash)
{
    uint32_t hv = id_hash(id, len);
    if (hash)
        *hash = hv;
    size_t mask = m->idx_cap - 1;
    for (size_t h = id_home(m, hv);; h = (h + 1) & mask) {
        uint64_t *slot = &m->idx[h];
        if (*slot == 0 || ((uint32_t)(*slot >> 32) == hv &&
                           !strcmp(dh__str(m, m->id_off[ID_ROW(*slot) - 1]), id)))
            return slot;
    }
}

/* Puts an entry of an id not in the index yet into its first empty slot. */
static void place_entry(dh_manifest *m, uint64_t entry)
{
    size_t h = id_home(m, (uint32_t)(entry >> 32));
    while (m->idx[h])
        h = (h + 1) & (m->idx_cap - 1);
    m->idx[h] = entry;
}

/* Room in the id index for n samples; 0 or DH_ENOMEM. */
static int id_reserve(dh_manifest *m, int64_t n)
{
    if ((size_t)n * 2 <= m->idx_cap)
        return 0;
    size_t ncap = m->idx_cap ? m->idx_cap * 2 : 64;
    while ((size_t)n * 2 > ncap)
        ncap *= 2;
    uint64_t *old = m->idx;
    size_t oldcap = m->idx_cap;
    m->idx = calloc(ncap, sizeof *m->idx);
    if (!m->idx) {
        m->idx = old;
        return DH_ENOMEM;
    }
    m->idx_cap = ncap;
    for (size_t i = 0; i < oldcap; i++)
        if (old[i])
            place_entry(m, old[i]);
    free(old);
    return 0;
}

/*
 * While every id came above the one before (ids_unordered 0), a new id above the last one is
 * new without looking: the index waits, and covers the rows [0, idx_rows). Generated ids and
 * most sorted manifests never need it, which spares a random access into a table twice the
 * manifest's size per sample (a tenth of a large simulation's setup). The first id out of
 * order completes it; from then on every commit keeps it complete.
 */
static int index_complete(dh_manifest *m)
{
    if (id_reserve(m, m->n + 1))
        return DH_ENOMEM;
    for (; m->idx_rows < m->n; m->idx_rows++) { /* ids are unique: no need to look */
        const char *id = dh__str(m, m->id_off[m->idx_rows]);
        place_entry(m, (uint64_t)id_hash(id, strlen(id)) << 32 | (uint32_t)(m->idx_rows + 1));
    }
    return 0;
}

int dh__manifest_id_claim(dh_manifest *m, dh__staged_sample *s, size_t len, int64_t *dup_row)
{
    s->id_slot = NULL;
    if (!m->ids_unordered && (m->n == 0 || strcmp(s->id, dh__str(m, m->id_off[m->n - 1])) > 0))
        return 0;
    int rc = index_complete(m);
    if (rc)
        return rc;
    s->id_slot = id_slot(m, s->id, len, &s->id_hash);
    if (!*s->id_slot)
        return 0;
    *dup_row = (int64_t)ID_ROW(*s->id_slot) - 1;
    return DH_EDUP;
}

static int64_t str_push(dh_manifest *m, const char *s)
{
    size_t len = strlen(s) + 1;
    if (m->nstr + len > UINT32_MAX)
        return DH_ELIMIT;
    if (dh__grow((void **)&m->str, &m->strcap, m->nstr + len, 1))
        return DH_ENOMEM;
    memcpy(m->str + m->nstr, s, len);
    m->nstr += len;
    return (int64_t)(m->nstr - len);
}

int dh__manifest_spans(const dh_manifest *m, dh__manifest_span *out, int max)
{
    const dh__manifest_span all[] = {
        {m->id_off, 4, m->cap},      {m->line, 4, m->cap},       {m->text_tokens, 4, m->cap},
        {m->media_first, 4, m->cap}, {m->media_count, 2, m->cap}, {m->sim_cpu_ms, 4, m->cap},
        {m->sim_gpu_ms, 4, m->cap},  {m->m_type, 1, m->mcap},    {m->m_codec, 1, m->mcap},
        {m->m_channels, 1, m->mcap}, {m->m_path_off, 4, m->mcap}, {m->m_width, 4, m->mcap},
        {m->m_height, 4, m->mcap},   {m->m_fps, 4, m->mcap},     {m->m_frames, 4, m->mcap},
        {m->m_duration, 4, m->mcap}, {m->m_rate, 4, m->mcap},    {m->m_bytes, 8, m->mcap},
        {m->m_kf_off, 4, m->mcap},   {m->m_kf_count, 4, m->mcap}};
    int n = 0;
    for (size_t k = 0; k < sizeof all / sizeof *all && n < max; k++)
        if (all[k].base && all[k].rows)
            out[n++] = all[k];
    return n;
}

/* Grows a family of parallel arrays to at least need rows together. */
static int grow_columns(void **const *cols, const size_t *elem, size_t ncols, size_t *cap,
                        size_t need)
{
    if (need <= *cap)
        return 0;
    size_t want = *cap ? *cap * 2 : 1024;
    while (want < need)
        want *= 2;
    for (size_t k = 0; k < ncols; k++) {
        size_t c = *cap; /* each column grows from the shared capacity */
        if (dh__grow(cols[k], &c, want, elem[k]))
            return DH_ENOMEM; /* columns already grown stay valid, just larger */
        dh__huge_hint(*cols[k], want * elem[k]); /* a table read at random by sample */
    }
    *cap = want;
    return 0;
}

/* An optional column grown (or made) from `from` to `to` rows, new rows set to *absent. */
static int optional_column(void **col, size_t elem, size_t from, size_t to, const void *absent)
{
    if (!*col)
        from = 0;
    if (from >= to)
        return 0;
    void *p = realloc(*col, to * elem);
    if (!p)
        return DH_ENOMEM;
    for (size_t r = from; r < to; r++)
        memcpy((char *)p + r * elem, absent, elem);
    *col = p;
    return 0;
}

/* Makes the optional columns sample s needs, rows so far marked absent. 0 or DH_ENOMEM. */
static int need_optional(dh_manifest *m, const dh__staged_sample *s)
{
    int range = 0, member = 0, pinned = 0, etag = 0, rc = 0;
    for (int j = 0; j < s->media_count; j++)
        range |= s->media[j].offset > 0, member |= s->media[j].member != NULL,
            pinned |= s->media[j].file_bytes > 0, etag |= s->media[j].etag != NULL;
    if (s->text && !m->text_off)
        rc |= optional_column((void **)&m->text_off, 4, 0, m->cap, &(uint32_t){DH__NO_STR});
    if (s->meta && !m->meta_off)
        rc |= optional_column((void **)&m->meta_off, 4, 0, m->cap, &(uint32_t){DH__NO_STR});
    if (s->has_label && !m->label)
        rc |= optional_column((void **)&m->label, 8, 0, m->cap, &(int64_t){DH__NO_LABEL});
    if (range && !m->m_offset)
        rc |= optional_column((void **)&m->m_offset, 8, 0, m->mcap, &(int64_t){0});
    if (member && !m->m_member_off)
        rc |= optional_column((void **)&m->m_member_off, 4, 0, m->mcap, &(uint32_t){DH__NO_STR});
    if (pinned && !m->m_file_bytes)
        rc |= optional_column((void **)&m->m_file_bytes, 8, 0, m->mcap, &(int64_t){0});
    if (etag && !m->m_etag_off)
        rc |= optional_column((void **)&m->m_etag_off, 4, 0, m->mcap, &(uint32_t){DH__NO_STR});
    return rc ? DH_ENOMEM : 0;
}

static int reserve_rows(dh_manifest *m, size_t nsamples, size_t nmedia)
{
    void **const scols[] = {(void **)&m->id_off,      (void **)&m->line,
                            (void **)&m->text_tokens, (void **)&m->media_first,
                            (void **)&m->media_count, (void **)&m->sim_cpu_ms,
                            (void **)&m->sim_gpu_ms};
    const size_t ssize[] = {4, 4, 4, 4, 2, 4, 4};
    void **const mcols[] = {(void **)&m->m_type,     (void **)&m->m_codec,
                            (void **)&m->m_channels, (void **)&m->m_path_off,
                            (void **)&m->m_width,    (void **)&m->m_height,
                            (void **)&m->m_fps,      (void **)&m->m_frames,
                            (void **)&m->m_duration, (void **)&m->m_rate,
                            (void **)&m->m_bytes,    (void **)&m->m_kf_off,
                            (void **)&m->m_kf_count};
    const size_t msize[] = {1, 1, 1, 4, 4, 4, 4, 4, 4, 4, 8, 4, 4};
    size_t cap = m->cap, mcap = m->mcap;
    if (grow_columns(scols, ssize, 7, &m->cap, nsamples) ||
        grow_columns(mcols, msize, 13, &m->mcap, nmedia))
        return DH_ENOMEM;
    /* The optional columns (text, label, byte ranges) exist once a sample uses them, so a
     * manifest of loose files pays nothing for them; they grow with the others. */
    int rc = 0;
    if (m->text_off)
        rc |= optional_column((void **)&m->text_off, 4, cap, m->cap, &(uint32_t){DH__NO_STR});
    if (m->meta_off)
        rc |= optional_column((void **)&m->meta_off, 4, cap, m->cap, &(uint32_t){DH__NO_STR});
    if (m->label)
        rc |= optional_column((void **)&m->label, 8, cap, m->cap, &(int64_t){DH__NO_LABEL});
    if (m->m_offset)
        rc |= optional_column((void **)&m->m_offset, 8, mcap, m->mcap, &(int64_t){0});
    if (m->m_member_off)
        rc |= optional_column((void **)&m->m_member_off, 4, mcap, m->mcap,
                              &(uint32_t){DH__NO_STR});
    if (m->m_file_bytes)
        rc |= optional_column((void **)&m->m_file_bytes, 8, mcap, m->mcap, &(int64_t){0});
    if (m->m_etag_off)
        rc |= optional_column((void **)&m->m_etag_off, 4, mcap, m->mcap, &(uint32_t){DH__NO_STR});
    return rc ? DH_ENOMEM : 0;
}

/*
 * Hash of a sample's descriptor: id, text tokens and every media field, in
 * order. The `sim` truth and the JSON spelling (whitespace, key order) are
 * left out, so re-measured truth or a reformatted manifest keeps the
 * sampler's order.
 */
static uint64_t descriptor_hash(const dh_manifest *m, const dh__staged_sample *s)
{
    uint64_t h = dh__hash_bytes(s->id, strlen(s->id), 0x5eed);
    h = dh__mix64(h ^ (uint64_t)s->text_tokens);
    if (s->text) /* text, label, ranges: only when present, so older manifests keep theirs */
        h = dh__hash_bytes(s->text, strlen(s->text), h ^ 0x7e47);
    if (s->has_label)
        h = dh__mix64(h ^ (uint64_t)s->label ^ 0x1abe1);
    if (s->meta)
        h = dh__hash_bytes(s->meta, strlen(s->meta), h ^ 0x3e7a);
    for (int j = 0; j < s->media_count; j++) {
        const dh__staged_media *sm = &s->media[j];
        int64_t f[] = {sm->type,   sm->codec, sm->width, sm->height, sm->frames,
                       sm->rate,   sm->channels, sm->bytes, (int64_t)sm->kf_count};
        double d[] = {sm->fps, sm->duration};
        h = dh__hash_bytes(sm->path, strlen(sm->path), h);
        h = dh__hash_bytes(f, sizeof f, h);
        h = dh__hash_bytes(d, sizeof d, h);
        if (sm->kf_count) /* the pool may still be NULL */
            h = dh__hash_bytes(m->kf + sm->kf_first, sm->kf_count * sizeof *m->kf, h);
        if (sm->offset > 0)
            h = dh__mix64(h ^ (uint64_t)sm->offset ^ 0x0ff5e7);
    }
    return h;
}

int dh__manifest_reserve(dh_manifest *m, int64_t samples, int64_t media, int64_t str_bytes)
{
    if (samples < 0 || media < 0 || str_bytes < 0)
        return DH_EINVAL;
    if (m->n + samples >= (int64_t)UINT32_MAX - 1)
        return DH_ELIMIT; /* what the table can hold */
    str_bytes = DH_MIN(str_bytes, (int64_t)UINT32_MAX - (int64_t)m->nstr); /* a guess: clipped */
    if (reserve_rows(m, (size_t)(m->n + samples), (size_t)(m->nm + media)) ||
        (m->ids_unordered && id_reserve(m, m->n + samples)) ||
        dh__grow((void **)&m->str, &m->strcap, m->nstr + (size_t)str_bytes, 1))
        return DH_ENOMEM;
    return 0;
}

int dh__manifest_commit(dh_manifest *m, const dh__staged_sample *s, int64_t lineno, size_t kf_staged)
{
    if (reserve_rows(m, (size_t)m->n + 1, (size_t)m->nm + (size_t)s->media_count) ||
        need_optional(m, s))
        return DH_ENOMEM;
    /* Strings first: if the pool is exhausted nothing else has changed. */
    size_t nstr_before = m->nstr;
    int64_t id_off = str_push(m, s->id);
    if (id_off < 0)
        return (int)id_off;
    int64_t path_off[256], member_off[256], etag_off[256], text_off = s->text ? str_push(m, s->text) : DH__NO_STR;
    int64_t meta_off = s->meta && text_off >= 0 ? str_push(m, s->meta) : DH__NO_STR;
    if (meta_off < 0)
        text_off = meta_off;
    for (int j = 0; j < s->media_count && text_off >= 0; j++) {
        path_off[j] = str_push(m, s->media[j].path);
        member_off[j] = s->media[j].member ? str_push(m, s->media[j].member) : DH__NO_STR;
        etag_off[j] = s->media[j].etag ? str_push(m, s->media[j].etag) : DH__NO_STR;
        if (path_off[j] < 0 || member_off[j] < 0 || etag_off[j] < 0)
            text_off = path_off[j] < 0 ? path_off[j] : member_off[j] < 0 ? member_off[j]
                                                                         : etag_off[j];
    }
    if (text_off < 0) {
        m->nstr = nstr_before;
        return (int)text_off;
    }
    int64_t i = m->n;
    m->id_off[i] = (uint32_t)id_off;
    m->line[i] = (uint32_t)DH_MIN(lineno, (int64_t)UINT32_MAX);
    m->text_tokens[i] = (int32_t)s->text_tokens;
    m->media_first[i] = (uint32_t)m->nm;
    m->media_count[i] = (uint16_t)s->media_count;
    m->sim_cpu_ms[i] = (float)s->sim_cpu;
    m->sim_gpu_ms[i] = (float)s->sim_gpu;
    if (m->text_off)
        m->text_off[i] = (uint32_t)text_off;
    if (m->meta_off)
        m->meta_off[i] = (uint32_t)meta_off;
    if (m->label)
        m->label[i] = s->has_label ? s->label : DH__NO_LABEL;
    for (int j = 0; j < s->media_count; j++) {
        const dh__staged_media *sm = &s->media[j];
        int64_t k = m->nm++;
        m->m_type[k] = (uint8_t)sm->type;
        m->m_codec[k] = (uint8_t)sm->codec;
        m->m_channels[k] = (uint8_t)sm->channels;
        m->m_path_off[k] = (uint32_t)path_off[j];
        m->m_width[k] = (int32_t)sm->width;
        m->m_height[k] = (int32_t)sm->height;
        m->m_fps[k] = (float)sm->fps;
        m->m_frames[k] = (int32_t)sm->frames;
        m->m_duration[k] = (float)sm->duration;
        m->m_rate[k] = (int32_t)sm->rate;
        m->m_bytes[k] = sm->bytes;
        m->m_kf_off[k] = (uint32_t)sm->kf_first;
        m->m_kf_count[k] = (uint32_t)sm->kf_count;
        if (m->m_offset)
            m->m_offset[k] = sm->offset;
        if (m->m_member_off)
            m->m_member_off[k] = (uint32_t)member_off[j];
        if (m->m_file_bytes)
            m->m_file_bytes[k] = sm->file_bytes;
        if (m->m_etag_off)
            m->m_etag_off[k] = (uint32_t)etag_off[j];
    }
    m->nkf += kf_staged;
    m->n++;
    if (s->id_slot) { /* an id out of order: the index is complete, and was not resized since */
        *s->id_slot = (uint64_t)s->id_hash << 32 | (uint32_t)m->n;
        m->idx_rows = m->n;
        m->ids_unordered = 1;
    }
    m->hash = dh__mix64(m->hash ^ descriptor_hash(m, s)) + (uint64_t)m->n;
    return 0;
}

int64_t dh_manifest_find(const dh_manifest *m, const char *id)
{
    if (!m || !id)
        return -1;
    if (m->ids_unordered) {
        uint32_t row = ID_ROW(*id_slot(m, id, strlen(id), NULL));
        return row ? (int64_t)row - 1 : -1;
    }
    int64_t lo = 0, hi = m->n; /* ascending ids: a binary search */
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        int c = strcmp(dh__str(m, m->id_off[mid]), id);
        if (!c)
            return mid;
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return -1;
}

int dh_manifest_new(const char *base_dir, const dh_limits *limits, dh_manifest **out)
{
    if (!out)
        return DH_EINVAL;
    *out = NULL;
    dh_manifest *m = calloc(1, sizeof *m);
    if (!m)
        return DH_ENOMEM;
    m->dir = strdup(base_dir ? base_dir : "");
    if (!m->dir) {
        free(m);
        return DH_ENOMEM;
    }
    if (limits)
        m->limits = *limits;
    else
        dh_limits_default(&m->limits);
    m->hash = 0x6d616e6966657374ULL;
    *out = m;
    return 0;
}

void dh_manifest_free(dh_manifest *m)
{
    if (!m)
        return;
    void *arrs[] = {m->dir,        m->id_off,     m->line,       m->text_tokens, m->media_first,
                    m->media_count, m->sim_cpu_ms, m->sim_gpu_ms, m->m_type,      m->m_codec,
                    m->m_channels, m->m_path_off, m->m_width,    m->m_height,    m->m_fps,
                    m->m_frames,   m->m_duration, m->m_rate,     m->m_bytes,     m->m_kf_off,
                    m->m_kf_count, m->kf,         m->str,        m->idx,         m->text_off,
                    m->meta_off,   m->label,      m->m_offset,   m->m_member_off, m->m_file_bytes,
                    m->m_etag_off};
    for (size_t i = 0; i < sizeof arrs / sizeof arrs[0]; i++)
        free(arrs[i]);
    if (m->doc) {
        dh__jv_free(m->doc);
        free(m->doc);
    }
    free(m);
}
