/*
 * list.c - the objects under an s3:// prefix, for `index s3://BUCKET/PREFIX/` (ListObjectsV2,
 * page after page; docs/STORAGE.md).
 *
 * DESIGN: one connection (dh__remote, configured from the environment like every read) asks
 * GET BUCKET-ROOT?list-type=2&prefix=P (and the page's continuation-token); each answer is
 * XML, read with expat (libexpat, Debian's: a small, well-kept streaming parser; we need
 * four elements' text, not a tree). The query is written already in SigV4's canonical form
 * (parameters sorted, values escaped with upper-case hex), so the signature libcurl makes
 * over the query as sent is the one the store computes. Keys come back in the store's
 * order (UTF-8 binary: the order WebDataset names sort in); a key ending in '/' (a
 * "directory" a console made) is not an object to index and is left out.
 */
#include "store.h"

#include <expat.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define PAGE_MAX_BYTES ((size_t)64 << 20) /* one answer: 1,000 keys are about 300 KB */

typedef struct {
    int depth;            /* 1: in ListBucketResult; 2: in one of its children */
    int in_contents;      /* in <Contents> */
    char what[32];        /* the element whose text is being read ("" when none) */
    char *text;           /* its text so far */
    size_t tlen;
    char key[4096];       /* this <Contents>'s key */
    char token[2048];     /* NextContinuationToken */
    int truncated, oom;
    const char *bucket;
    size_t blen;
    char ***urls;
    size_t *n, cap;
} page;

static void XMLCALL on_start(void *user, const XML_Char *name, const XML_Char **attrs)
{
    (void)attrs;
    page *p = user;
    p->depth++;
    if (p->depth == 2 && !strcmp(name, "Contents"))
        p->in_contents = 1, p->key[0] = 0;
    int want = (p->depth == 2 && (!strcmp(name, "IsTruncated") ||
                                  !strcmp(name, "NextContinuationToken"))) ||
               (p->depth == 3 && p->in_contents && !strcmp(name, "Key"));
    snprintf(p->what, sizeof p->what, "%s", want ? name : "");
    p->tlen = 0;
}

static void XMLCALL on_text(void *user, const XML_Char *s, int len)
{
    page *p = user;
    if (!p->what[0] || len <= 0)
        return;
    char *t = realloc(p->text, p->tlen + (size_t)len + 1);
    if (!t) {
        p->oom = 1;
        return;
    }
    memcpy(t + p->tlen, s, (size_t)len);
    p->text = t;
    p->tlen += (size_t)len;
    t[p->tlen] = 0;
}

/* One listed key as an s3:// URL in *p->urls; 0, or -1 out of memory. */
static int add_url(page *p)
{
    size_t klen = strlen(p->key);
    if (!klen || p->key[klen - 1] == '/')
        return 0;
    if (*p->n == p->cap) {
        size_t cap = p->cap ? 2 * p->cap : 256;
        char **v = realloc(*p->urls, cap * sizeof *v);
        if (!v)
            return -1;
        *p->urls = v, p->cap = cap;
    }
    char *u = malloc(5 + p->blen + 1 + klen + 1);
    if (!u)
        return -1;
    sprintf(u, "s3://%.*s/%s", (int)p->blen, p->bucket, p->key);
    (*p->urls)[(*p->n)++] = u;
    return 0;
}

static void XMLCALL on_end(void *user, const XML_Char *name)
{
    page *p = user;
    const char *t = p->text && p->tlen ? p->text : "";
    if (p->what[0] && !strcmp(name, p->what)) {
        if (!strcmp(name, "Key"))
            snprintf(p->key, sizeof p->key, "%s", t);
        else if (!strcmp(name, "IsTruncated"))
            p->truncated = !strcmp(t, "true");
        else
            snprintf(p->token, sizeof p->token, "%s", t);
        p->what[0] = 0;
    }
    if (p->depth == 2 && p->in_contents && !strcmp(name, "Contents")) {
        p->in_contents = 0;
        if (add_url(p))
            p->oom = 1;
    }
    p->tlen = 0;
    p->depth--;
}

/* Appends v escaped as SigV4's canonical query wants it (unreserved bytes as they are). */
static void query_value(char *out, size_t len, const char *v)
{
    size_t o = strlen(out);
    for (const unsigned char *q = (const unsigned char *)v; *q && o + 4 < len; q++) {
        int keep = (*q >= 'A' && *q <= 'Z') || (*q >= 'a' && *q <= 'z') ||
                   (*q >= '0' && *q <= '9') || strchr("-_.~", *q);
        o += (size_t)snprintf(out + o, len - o, keep ? "%c" : "%%%02X", *q);
    }
}

void dh_store_list_free(char **urls, size_t n)
{
    for (size_t k = 0; urls && k < n; k++)
        free(urls[k]);
    free(urls);
}

int dh_store_list(const char *prefix, char ***urls, size_t *n, char *err, size_t errlen)
{
    *urls = NULL, *n = 0;
    char root[8192], shown[1024];
    dh__store_display(prefix, shown, sizeof shown);
    dh__store_conf c;
    char why[400];
    int rc = dh__store_conf_env(&c, err, errlen);
    if (rc)
        return rc;
    if ((rc = dh__store_bucket_url(&c, prefix, root, sizeof root, why, sizeof why)))
        return dh__fail(err, errlen, rc, "%s: %s", shown, why);
    dh__remote *r = dh__remote_new(&c, err, errlen);
    if (!r)
        return DH_ENOMEM;
    page p = {.bucket = prefix + 5, .blen = strcspn(prefix + 5, "/"), .urls = urls, .n = n};
    const char *key_prefix = prefix + 5 + p.blen + (prefix[5 + p.blen] == '/');
    do {
        char url[8192 + 8192];
        snprintf(url, sizeof url, "%s?", root);
        if (p.token[0]) {
            strcat(url, "continuation-token=");
            query_value(url, sizeof url, p.token);
            strcat(url, "&");
        }
        strcat(url, "list-type=2&prefix=");
        query_value(url, sizeof url, key_prefix);
        uint8_t *body = NULL;
        size_t len = 0;
        rc = dh__remote_get_all(r, prefix, url, PAGE_MAX_BYTES, &body, &len, err, errlen);
        if (rc)
            break;
        XML_Parser x = XML_ParserCreate(NULL);
        if (!x) {
            free(body);
            rc = dh__fail(err, errlen, DH_ENOMEM, "out of memory");
            break;
        }
        p.depth = 0, p.in_contents = 0, p.truncated = 0, p.token[0] = 0, p.what[0] = 0;
        XML_SetUserData(x, &p);
        XML_SetElementHandler(x, on_start, on_end);
        XML_SetCharacterDataHandler(x, on_text);
        if (XML_Parse(x, (const char *)body, (int)len, 1) == XML_STATUS_ERROR)
            rc = dh__fail(err, errlen, DH_EREMOTE, "listing %s: the store's answer is not a "
                          "listing (XML error at line %lu: %s)", shown,
                          (unsigned long)XML_GetCurrentLineNumber(x),
                          XML_ErrorString(XML_GetErrorCode(x)));
        else if (p.oom)
            rc = dh__fail(err, errlen, DH_ENOMEM, "out of memory");
        else if (p.truncated && !p.token[0])
            rc = dh__fail(err, errlen, DH_EREMOTE, "listing %s: the store said there is more "
                          "but gave no continuation token", shown);
        XML_ParserFree(x);
        free(body);
    } while (!rc && p.truncated);
    free(p.text);
    dh__remote_free(r);
    if (rc) {
        dh_store_list_free(*urls, *n);
        *urls = NULL, *n = 0;
    }
    return rc;
}
