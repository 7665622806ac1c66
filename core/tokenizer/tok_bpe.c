/* tok_bpe.c - byte-pair encoding of one pre-tokenized word (Sennrich et al. 2016, "Neural
 * Machine Translation of Rare Words with Subword Units"; byte-level variant of Radford et al.
 * 2019). The word starts as its bytes or characters; the adjacent pair that merges first is
 * merged, again and again, until no pair merges:
 *   MERGES mode (Hugging Face BPE)  a pair merges when the merge list holds it; lower rank
 *                                    first, and of equal ranks the leftmost;
 *   RANKS mode (tiktoken)           a pair merges when its joined bytes are a token; the
 *                                    token with the lowest rank (its id) first, leftmost on
 *                                    ties.
 * Candidate pairs sit in a binary min-heap keyed by (rank, position), so a word of n symbols
 * costs O(n log n), not a rescan per merge. A heap entry records the pair's byte length when
 * pushed; symbols only grow, so an entry whose pair has changed since is recognised and
 * skipped. Words already seen are served from a cache. */
#include <stdlib.h>
#include <string.h>

#include "tok_internal.h"

#define CACHE_MAX_WORD 256    /* longer words are not cached */
#define CACHE_MAX_WORDS 65536 /* the cache is emptied when it holds this many */

static int heap_less(const tok_heap_entry *a, const tok_heap_entry *b)
{
    return a->rank < b->rank || (a->rank == b->rank && a->pos < b->pos);
}

static void heap_push(tok_heap_entry *h, size_t *n, tok_heap_entry e)
{
    size_t i = (*n)++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!heap_less(&e, &h[p])) break;
        h[i] = h[p];
        i = p;
    }
    h[i] = e;
}

static tok_heap_entry heap_pop(tok_heap_entry *h, size_t *n)
{
    tok_heap_entry top = h[0], last = h[--(*n)];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= *n) break;
        if (c + 1 < *n && heap_less(&h[c + 1], &h[c])) c++;
        if (!heap_less(&h[c], &last)) break;
        h[i] = h[c];
        i = c;
    }
    if (*n) h[i] = last;
    return top;
}

/* The merge of symbols a and b (adjacent), if any: 1 and *rank, *merged. */
static int pair_rank(const tok_bpe *b, const char *s, const tok_symbol *x, const tok_symbol *y, uint32_t *rank,
                     int32_t *merged)
{
    if (b->mode == TOK_BPE_MERGES) {
        if (x->id < 0 || y->id < 0) return 0;
        const tok_pair *p = tok_pairmap_find(&b->merges, x->id, y->id);
        if (!p) return 0;
        *rank = p->rank;
        *merged = p->merged;
        return 1;
    }
    int32_t id = tok_strmap_find(&b->vocab_map, &b->vocab, s + x->start, (size_t)x->len + y->len);
    if (id < 0) return 0;
    *rank = (uint32_t)id;
    *merged = id;
    return 1;
}

/* Room for n symbols and their heap: n - 1 first pairs, and at most 2 more per merge. */
static int grow_scratch(tok_bpe *b, size_t n)
{
    size_t heap_n = 3 * n + 3;
    if (n > b->sym_cap) {
        size_t c = b->sym_cap ? b->sym_cap : 64;
        while (c < n) c *= 2;
        tok_symbol *s = realloc(b->sym, c * sizeof *s);
        if (!s) return -1;
        b->sym = s;
        b->sym_cap = c;
    }
    if (heap_n > b->heap_cap) {
        size_t c = b->heap_cap ? b->heap_cap : 64;
        while (c < heap_n) c *= 2;
        tok_heap_entry *h = realloc(b->heap, c * sizeof *h);
        if (!h) return -1;
        b->heap = h;
        b->heap_cap = c;
    }
    return 0;
}

/* Splits the word into its first symbols. Returns the count, or -1 (no memory). */
static long initial_symbols(tok_bpe *b, const char *s, size_t n)
{
    if (grow_scratch(b, n + 1) != 0) return -1;
    long k = 0;
    int32_t unk_at = -1; /* the symbol holding the current run of unknown characters */
    for (size_t i = 0; i < n;) {
        size_t l = 1;
        int32_t id;
        if (b->byte_units) {
            id = b->byte_id[(uint8_t)s[i]];
        } else {
            int u = nnt_utf8_len((const uint8_t *)s + i, n - i);
            l = (size_t)(u > 0 ? u : 1);
            id = tok_strmap_find(&b->vocab_map, &b->vocab, s + i, l);
        }
        if (id < 0 && b->byte_fallback) {
            int all = 1;
            for (size_t j = 0; j < l; j++)
                if (b->fallback_id[(uint8_t)s[i + j]] < 0) all = 0;
            if (all) {
                for (size_t j = 0; j < l; j++)
                    b->sym[k++] = (tok_symbol){.id = b->fallback_id[(uint8_t)s[i + j]], .start = (uint32_t)(i + j), .len = 1};
                unk_at = -1;
                i += l;
                continue;
            }
        }
        if (id < 0) {
            if (b->unk_id < 0) { /* no unknown token: the character is dropped */
                i += l;
                continue;
            }
            if (b->fuse_unk && unk_at >= 0) {
                b->sym[unk_at].len += (uint32_t)l;
                i += l;
                continue;
            }
            unk_at = (int32_t)k;
            b->sym[k++] = (tok_symbol){.id = b->unk_id, .start = (uint32_t)i, .len = (uint32_t)l};
            i += l;
            continue;
        }
        unk_at = -1;
        b->sym[k++] = (tok_symbol){.id = id, .start = (uint32_t)i, .len = (uint32_t)l};
        i += l;
    }
    return k;
}

static int merge_word(tok_bpe *b, const char *s, size_t n, tok_ids *out)
{
    long k = initial_symbols(b, s, n);
    if (k < 0) return -1;
    if (k == 0) return 0;
    tok_symbol *sym = b->sym;
    for (long i = 0; i < k; i++) {
        sym[i].prev = (int32_t)i - 1;
        sym[i].next = i + 1 < k ? (int32_t)i + 1 : -1;
    }
    size_t hn = 0;
    for (long i = 0; i + 1 < k; i++) {
        uint32_t rank;
        int32_t merged;
        if (pair_rank(b, s, &sym[i], &sym[i + 1], &rank, &merged))
            heap_push(b->heap, &hn,
                      (tok_heap_entry){.rank = rank, .pos = (uint32_t)i, .span = sym[i].len + sym[i + 1].len, .merged = merged});
    }
    while (hn) {
        tok_heap_entry e = heap_pop(b->heap, &hn);
        tok_symbol *x = &sym[e.pos];
        if (x->len == 0 || x->next < 0) continue;
        tok_symbol *y = &sym[x->next];
        if (x->len + y->len != e.span) continue; /* the pair changed since it was pushed */
        /* y joins x */
        x->len += y->len;
        x->id = e.merged;
        int32_t after = y->next;
        y->len = 0;
        x->next = after;
        if (after >= 0) sym[after].prev = (int32_t)e.pos;
        uint32_t rank;
        int32_t merged;
        if (x->prev >= 0 && pair_rank(b, s, &sym[x->prev], x, &rank, &merged))
            heap_push(b->heap, &hn,
                      (tok_heap_entry){.rank = rank, .pos = (uint32_t)x->prev, .span = sym[x->prev].len + x->len,
                                       .merged = merged});
        if (after >= 0 && pair_rank(b, s, x, &sym[after], &rank, &merged))
            heap_push(b->heap, &hn,
                      (tok_heap_entry){.rank = rank, .pos = e.pos, .span = x->len + sym[after].len, .merged = merged});
    }
    for (int32_t i = 0; i >= 0; i = sym[i].next)
        if (tok_ids_put(out, sym[i].id) != 0) return -1;
    return 0;
}

void tok_bpe_cache_clear(tok_bpe *b)
{
    tok_strtab_free(&b->cache_words);
    tok_strmap_free(&b->cache_map);
    b->cache_ids.n = 0;
}

static void cache_put(tok_bpe *b, const char *s, size_t n, const int32_t *ids, int64_t count)
{
    if (n > CACHE_MAX_WORD) return;
    if (b->cache_words.n >= CACHE_MAX_WORDS) tok_bpe_cache_clear(b);
    if (b->cache_cap < b->cache_words.n + 2) {
        int32_t c = b->cache_cap ? b->cache_cap * 2 : 1024;
        int64_t *at = realloc(b->cache_at, (size_t)c * sizeof *at);
        if (!at) return;
        b->cache_at = at;
        b->cache_cap = c;
    }
    int64_t start = b->cache_ids.n;
    if (tok_ids_put_n(&b->cache_ids, ids, count) != 0) return;
    int32_t i = tok_strtab_add(&b->cache_words, s, n);
    if (i < 0 || tok_strmap_add(&b->cache_map, &b->cache_words, i) != 0) {
        tok_bpe_cache_clear(b);
        return;
    }
    b->cache_at[i] = start;
    b->cache_at[i + 1] = b->cache_ids.n;
}

int tok_bpe_word(tok_bpe *b, const char *s, size_t n, tok_ids *out)
{
    if (n == 0) return 0;
    if (n <= CACHE_MAX_WORD) {
        int32_t c = tok_strmap_find(&b->cache_map, &b->cache_words, s, n);
        if (c >= 0) { /* a word of no ids (every character dropped) may sit in an empty id array */
            int64_t k = b->cache_at[c + 1] - b->cache_at[c];
            return k ? tok_ids_put_n(out, b->cache_ids.p + b->cache_at[c], k) : 0;
        }
    }
    if (b->ignore_merges || b->mode == TOK_BPE_RANKS) {
        int32_t id = tok_strmap_find(&b->vocab_map, &b->vocab, s, n);
        if (id >= 0) return tok_ids_put(out, id);
    }
    int64_t start = out->n;
    if (merge_word(b, s, n, out) != 0) return -1;
    /* no ids when every character was dropped; out->p may then still be NULL */
    cache_put(b, s, n, out->n > start ? out->p + start : NULL, out->n - start);
    return 0;
}

void tok_bpe_free(tok_bpe *b)
{
    tok_strtab_free(&b->vocab);
    tok_strmap_free(&b->vocab_map);
    tok_pairmap_free(&b->merges);
    tok_bpe_cache_clear(b);
    free(b->cache_ids.p);
    free(b->cache_at);
    free(b->sym);
    free(b->heap);
    memset(b, 0, sizeof *b);
}
