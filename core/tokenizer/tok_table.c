/* tok_table.c - the tokenizer's containers: growable byte, id and span arrays, string tables,
 * and open-addressing hash maps from strings and from id pairs. */
#include <stdlib.h>
#include <string.h>

#include "tok_internal.h"

static int grow(void **p, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap) return 0;
    size_t c = *cap ? *cap : 16;
    while (c < need) c *= 2;
    void *q = realloc(*p, c * elem);
    if (!q) return -1;
    *p = q;
    *cap = c;
    return 0;
}

int tok_buf_reserve(tok_buf *b, size_t n)
{
    return grow((void **)&b->p, &b->cap, b->n + n + 1, 1);
}

int tok_buf_put(tok_buf *b, const void *s, size_t n)
{
    if (tok_buf_reserve(b, n) != 0) return -1;
    if (n) memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = '\0';
    return 0;
}

const char *tok_find(const char *hay, size_t hn, const char *needle, size_t nn)
{
    if (nn == 0 || hn < nn) return NULL;
    const char *end = hay + (hn - nn);
    for (const char *p = hay; p <= end; p++) {
        p = memchr(p, needle[0], (size_t)(end - p) + 1);
        if (!p) return NULL;
        if (memcmp(p, needle, nn) == 0) return p;
    }
    return NULL;
}

void tok_buf_free(tok_buf *b)
{
    free(b->p);
    memset(b, 0, sizeof *b);
}

int tok_ids_put(tok_ids *v, int32_t id)
{
    return tok_ids_put_n(v, &id, 1);
}

int tok_ids_put_n(tok_ids *v, const int32_t *ids, int64_t n)
{
    size_t cap = (size_t)v->cap;
    if (grow((void **)&v->p, &cap, (size_t)(v->n + n), sizeof(int32_t)) != 0) return -1;
    v->cap = (int64_t)cap;
    if (n) memcpy(v->p + v->n, ids, (size_t)n * sizeof(int32_t));
    v->n += n;
    return 0;
}

int tok_spans_put(tok_spans *v, uint32_t off, uint32_t len)
{
    if (grow((void **)&v->p, &v->cap, v->n + 1, sizeof(tok_span)) != 0) return -1;
    v->p[v->n++] = (tok_span){.off = off, .len = len};
    return 0;
}

/* ---- string tables ---- */

static int strtab_grow(tok_strtab *t, int32_t need)
{
    if (need <= t->cap) return 0;
    int64_t c = t->cap ? t->cap : 64; /* 64-bit: doubling past 2^30 must not overflow */
    while (c < need) c *= 2;
    if (c > INT32_MAX) c = INT32_MAX;
    uint64_t *off = realloc(t->off, (size_t)c * sizeof *off);
    if (!off) return -1;
    t->off = off;
    uint32_t *len = realloc(t->len, (size_t)c * sizeof *len);
    if (!len) return -1;
    t->len = len;
    t->cap = (int32_t)c;
    return 0;
}

int32_t tok_strtab_add(tok_strtab *t, const char *s, size_t n)
{
    if (n > UINT32_MAX || t->n == INT32_MAX) return -1;
    if (strtab_grow(t, t->n + 1) != 0) return -1;
    uint64_t at = t->pool.n;
    if (tok_buf_put(&t->pool, s, n) != 0) return -1;
    t->off[t->n] = at;
    t->len[t->n] = (uint32_t)n;
    return t->n++;
}

int tok_strtab_set(tok_strtab *t, int32_t i, const char *s, size_t n)
{
    if (i < 0 || n > UINT32_MAX) return -1;
    if (strtab_grow(t, i + 1) != 0) return -1;
    while (t->n <= i) {
        t->off[t->n] = t->pool.n;
        t->len[t->n] = 0;
        t->n++;
    }
    uint64_t at = t->pool.n;
    if (tok_buf_put(&t->pool, s, n) != 0) return -1;
    t->off[i] = at;
    t->len[i] = (uint32_t)n;
    return 0;
}

void tok_strtab_free(tok_strtab *t)
{
    tok_buf_free(&t->pool);
    free(t->off);
    free(t->len);
    memset(t, 0, sizeof *t);
}

/* ---- hashing: 8 bytes at a time with a multiply-xorshift mix ---- */

static inline uint64_t mix(uint64_t h)
{
    h ^= h >> 32;
    h *= 0xd6e8feb86659fd93ULL;
    h ^= h >> 32;
    h *= 0xd6e8feb86659fd93ULL;
    h ^= h >> 32;
    return h;
}

uint64_t tok_hash(const void *s, size_t n)
{
    const unsigned char *p = s;
    uint64_t h = 0x9e3779b97f4a7c15ULL ^ (uint64_t)n;
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        h = mix(h ^ w) + 0x632be59bd9b4e019ULL;
        p += 8;
        n -= 8;
    }
    uint64_t w = 0;
    memcpy(&w, p, n);
    return mix(h ^ w ^ ((uint64_t)n << 56));
}

/* ---- string maps ---- */

static int strmap_insert(tok_strmap *m, const tok_strtab *t, int32_t i, int keep_first)
{
    size_t n;
    const char *s = tok_strtab_get(t, i, &n);
    uint64_t k = tok_hash(s, n) & m->mask;
    for (;;) {
        uint32_t v = m->slot[k];
        if (v == 0) {
            m->slot[k] = (uint32_t)i + 1;
            m->used++;
            return 0;
        }
        size_t vn;
        const char *vs = tok_strtab_get(t, (int32_t)(v - 1), &vn);
        if (vn == n && memcmp(vs, s, n) == 0) {
            if (!keep_first) m->slot[k] = (uint32_t)i + 1;
            return 0;
        }
        k = (k + 1) & m->mask;
    }
}

static int strmap_resize(tok_strmap *m, const tok_strtab *t, uint64_t want)
{
    uint64_t size = 64;
    while (size < want * 2) size *= 2;
    uint32_t *old = m->slot;
    uint64_t old_size = old ? m->mask + 1 : 0;
    m->slot = calloc(size, sizeof *m->slot);
    if (!m->slot) {
        m->slot = old;
        return -1;
    }
    m->mask = size - 1;
    m->used = 0;
    for (uint64_t k = 0; k < old_size; k++)
        if (old[k]) strmap_insert(m, t, (int32_t)(old[k] - 1), 1);
    free(old);
    return 0;
}

int tok_strmap_build(tok_strmap *m, const tok_strtab *t)
{
    tok_strmap_free(m);
    if (strmap_resize(m, t, (uint64_t)t->n + 1) != 0) return -1;
    for (int32_t i = 0; i < t->n; i++) strmap_insert(m, t, i, 1);
    return 0;
}

int tok_strmap_add(tok_strmap *m, const tok_strtab *t, int32_t i)
{
    if (!m->slot || (m->used + 1) * 2 > m->mask + 1)
        if (strmap_resize(m, t, m->used + 1) != 0) return -1;
    return strmap_insert(m, t, i, 1);
}

int32_t tok_strmap_find(const tok_strmap *m, const tok_strtab *t, const char *s, size_t n)
{
    if (!m->slot) return -1;
    uint64_t k = tok_hash(s, n) & m->mask;
    for (;;) {
        uint32_t v = m->slot[k];
        if (v == 0) return -1;
        size_t vn;
        const char *vs = tok_strtab_get(t, (int32_t)(v - 1), &vn);
        if (vn == n && memcmp(vs, s, n) == 0) return (int32_t)(v - 1);
        k = (k + 1) & m->mask;
    }
}

void tok_strmap_free(tok_strmap *m)
{
    free(m->slot);
    memset(m, 0, sizeof *m);
}

/* ---- pair maps ---- */

static void pair_insert(tok_pairmap *m, tok_pair p)
{
    uint64_t k = mix(p.key) & m->mask;
    while (m->slot[k].key) {
        if (m->slot[k].key == p.key) return; /* the first (lowest-ranked) merge stays */
        k = (k + 1) & m->mask;
    }
    m->slot[k] = p;
    m->used++;
}

int tok_pairmap_add(tok_pairmap *m, int32_t left, int32_t right, uint32_t rank, int32_t merged)
{
    if (!m->slot || (m->used + 1) * 2 > m->mask + 1) {
        uint64_t size = m->slot ? (m->mask + 1) * 2 : 1024;
        tok_pair *old = m->slot;
        uint64_t old_size = old ? m->mask + 1 : 0;
        m->slot = calloc(size, sizeof *m->slot);
        if (!m->slot) {
            m->slot = old;
            return -1;
        }
        m->mask = size - 1;
        m->used = 0;
        for (uint64_t k = 0; k < old_size; k++)
            if (old[k].key) pair_insert(m, old[k]);
        free(old);
    }
    uint64_t key = (((uint64_t)(uint32_t)left << 32) | (uint32_t)right) + 1;
    pair_insert(m, (tok_pair){.key = key, .rank = rank, .merged = merged});
    return 0;
}

const tok_pair *tok_pairmap_find(const tok_pairmap *m, int32_t left, int32_t right)
{
    if (!m->slot) return NULL;
    uint64_t key = (((uint64_t)(uint32_t)left << 32) | (uint32_t)right) + 1;
    uint64_t k = mix(key) & m->mask;
    while (m->slot[k].key) {
        if (m->slot[k].key == key) return &m->slot[k];
        k = (k + 1) & m->mask;
    }
    return NULL;
}

void tok_pairmap_free(tok_pairmap *m)
{
    free(m->slot);
    memset(m, 0, sizeof *m);
}
