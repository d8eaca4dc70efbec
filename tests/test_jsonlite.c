/*
 * test_jsonlite.c - the fast manifest-line scanner against jansson.
 *
 * The promise (jsonlite.h): whatever the scanner accepts, jansson accepts too,
 * with the same values. Checked on edge cases of the JSON grammar and on
 * hundreds of thousands of random mutations of real manifest lines.
 */
#include "catalog/jsonlite.h"
#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Structural equality; object members are matched by key (order-insensitive). */
static int same(const jv_doc *a, const jv *x, const jv_doc *b, const jv *y)
{
    if (x->type != y->type || x->count != y->count)
        return 0;
    switch (x->type) {
    case JV_INT:
        return x->i == y->i;
    case JV_REAL:
        return memcmp(&x->d, &y->d, sizeof x->d) == 0;
    case JV_STRING:
        return strcmp(jv_str(a, x), jv_str(b, y)) == 0;
    case JV_ARRAY:
        for (const jv *p = jv_first(a, x), *q = jv_first(b, y); p; p = jv_next(a, p), q = jv_next(b, q))
            if (!q || !same(a, p, b, q))
                return 0;
        return 1;
    case JV_OBJECT:
        for (const jv *p = jv_first(a, x); p; p = jv_next(a, p)) {
            const jv *q = jv_get(b, y, a->str + p->key);
            if (!q || !same(a, p, b, q))
                return 0;
        }
        return 1;
    default:
        return 1;
    }
}

/* Returns 1 if the fast path accepted; asserts the promise either way. */
static int check_line(const char *text, size_t len)
{
    jv_doc fast = {0}, ref = {0};
    int accepted = dh__jv_parse_fast(&fast, text, len) == 0;
    json_error_t e;
    json_t *j = json_loadb(text, len, JSON_REJECT_DUPLICATES, &e);
    if (accepted) {
        ck_assert_msg(j != NULL, "fast path accepted what jansson rejects: [%.*s] (%s)", (int)len,
                      text, e.text);
        ck_assert_int_eq(dh__jv_from_jansson(&ref, j), 0);
        ck_assert_msg(same(&fast, jv_root(&fast), &ref, jv_root(&ref)),
                      "values differ from jansson's for [%.*s]", (int)len, text);
    }
    json_decref(j);
    dh__jv_free(&fast);
    dh__jv_free(&ref);
    return accepted;
}

static int fast_accepts(const char *text)
{
    return check_line(text, strlen(text));
}

START_TEST(grammar_edge_cases)
{
    const char *accept[] = {
        "{}", "[]", " { } ", "\t[\r\n1 ]\n", "{\"a\":1}", "[0,-0,1,-1,123456789012345678]",
        "[0.5,-0.5,10.0,1e5,1E+2,2.5e-3,1.7976931348623157e308,5e-324,0.1,123456789.123456]",
        "{\"a\":{\"b\":[true,false,null]}}", "[[[[[]]]]]", "{\"\":\"\"}",
        "{\"id\":\"s1\",\"media\":[{\"type\":\"video\",\"fps\":29.97}]}",
    };
    for (size_t i = 0; i < sizeof accept / sizeof accept[0]; i++)
        ck_assert_msg(fast_accepts(accept[i]), "fast path should accept %s", accept[i]);
    /* Invalid JSON, or valid JSON the fast path leaves to jansson. */
    const char *decline[] = {
        "", " ", "1", "\"s\"", "true", "null",               /* top-level scalars */
        "{", "}", "[1,]", "{\"a\":1,}", "{\"a\" 1}", "{a:1}", "[1 2]", "{}x", "{}{}",
        "[01]", "[1.]", "[.5]", "[-]", "[--1]", "[1e]", "[1e+]", "[+1]", "[0x10]", "[NaN]",
        "[Infinity]", "[1234567890123456789]", "[1e999]", "[tru]", "[nul]", "[True]",
        "{\"a\":1,\"a\":2}", "[\"a\\nb\"]", "[\"caf\xc3\xa9\"]", "[\"\x01\"]", "[\"abc]",
        "[\"a\"\"b\"]", "{\"a\":}", "{,}", "[,]",
    };
    for (size_t i = 0; i < sizeof decline / sizeof decline[0]; i++)
        ck_assert_msg(!fast_accepts(decline[i]), "fast path should decline [%s]", decline[i]);
    /* Deep nesting is declined past 64 levels. */
    char deep[200];
    memset(deep, '[', 100);
    memset(deep + 100, ']', 100);
    ck_assert(!check_line(deep, 200));
    ck_assert(check_line(deep + 36, 128)); /* 64 levels */
}
END_TEST

START_TEST(numbers_match_strtod_exactly)
{
    char buf[64];
    srand(11);
    for (int i = 0; i < 20000; i++) {
        int ip = rand() % 100000, fp = rand(), fd = 1 + rand() % 9;
        snprintf(buf, sizeof buf, "[%s%d.%0*d]", rand() % 2 ? "-" : "", ip, fd, fp % 1000000000);
        check_line(buf, strlen(buf)); /* asserts equality when accepted */
    }
}
END_TEST

static const char *seeds[] = {
    "{\"id\":\"s000123\",\"text_tokens\":412,\"media\":[{\"type\":\"video\",\"path\":"
    "\"v/000123.mp4\",\"codec\":\"h264\",\"width\":1280,\"height\":720,\"fps\":30,\"frames\":300,"
    "\"duration\":10.0,\"keyframes\":[0,250],\"bytes\":1234567}],\"sim\":{\"cpu_ms\":41.5,"
    "\"gpu_ms\":12.0}}",
    "{\"id\":\"mm\",\"media\":[{\"type\":\"image\",\"path\":\"i/1.jpg\",\"width\":1024,"
    "\"height\":768},{\"type\":\"audio\",\"path\":\"a/1.flac\",\"duration\":12.3,"
    "\"sample_rate\":16000}],\"extra\":[null,true,false,-1.5e3,{}]}",
};

START_TEST(random_mutations_never_accept_more_than_jansson)
{
    static const char alphabet[] = "{}[]\",:.-+eE0123456789 \t\\ntfalsu\x01\xc3";
    char buf[1024];
    int accepted = 0, total = 0;
    srand(20261129);
    for (int round = 0; round < 200000; round++) {
        const char *seed = seeds[round % 2];
        size_t len = strlen(seed);
        memcpy(buf, seed, len);
        int edits = 1 + rand() % 3;
        for (int k = 0; k < edits; k++) {
            size_t pos = (size_t)rand() % (len + 1);
            char c = alphabet[rand() % (int)(sizeof alphabet - 1)];
            switch (rand() % 3) {
            case 0: /* replace */
                if (pos < len)
                    buf[pos] = c;
                break;
            case 1: /* insert */
                if (len + 1 < sizeof buf) {
                    memmove(buf + pos + 1, buf + pos, len - pos);
                    buf[pos] = c;
                    len++;
                }
                break;
            default: /* delete */
                if (pos < len) {
                    memmove(buf + pos, buf + pos + 1, len - pos - 1);
                    len--;
                }
            }
        }
        accepted += check_line(buf, len);
        total++;
    }
    /* Both outcomes must be exercised for the test to mean anything. */
    ck_assert_int_gt(accepted, total / 50);
    ck_assert_int_lt(accepted, total - total / 50);
}
END_TEST

START_TEST(manifest_lines_take_either_path_with_one_meaning)
{
    /* The escaped line goes through jansson, the plain one through the fast path. */
    dh_manifest *m;
    dh_manifest_new("", NULL, &m);
    const char *plain = "{\"id\":\"caf1\",\"text_tokens\":3}";
    const char *escaped = "{\"id\":\"caf\\u00e9\",\"text_tokens\":3, \"media\" : [ ]}";
    const char *dup = "{\"id\":\"caf\xc3\xa9\",\"text_tokens\":4}";
    ck_assert_int_eq(dh_manifest_parse_line(m, plain, strlen(plain), 1, NULL, 0), 0);
    ck_assert_int_eq(dh_manifest_parse_line(m, escaped, strlen(escaped), 2, NULL, 0), 0);
    ck_assert_int_eq(dh_manifest_find(m, "caf\xc3\xa9"), 1);
    char err[256];
    ck_assert_int_eq(dh_manifest_parse_line(m, dup, strlen(dup), 3, err, sizeof err), DH_EDUP);
    dh_manifest_free(m);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("jsonlite");
    TCase *tc = tcase_create("jsonlite");
    tcase_set_timeout(tc, 120);
    ADD_TEST(tc, grammar_edge_cases);
    ADD_TEST(tc, numbers_match_strtod_exactly);
    ADD_TEST(tc, random_mutations_never_accept_more_than_jansson);
    ADD_TEST(tc, manifest_lines_take_either_path_with_one_meaning);
    suite_add_tcase(s, tc);
    return tu_run(s);
}
