/* tok_added.c - added and special tokens: a byte trie over their contents and the split of a
 * text around them. Matching is leftmost-longest (of the tokens that match at the leftmost
 * position, the longest wins; the search resumes after it), and the flags act as Hugging Face
 * tokenizers' added vocabulary applies them (tokenizers/src/tokenizer/added_vocabulary.rs):
 *   single_word  the match counts only with no word character (regex \w) right before and
 *                after it;
 *   lstrip       the white space right before it joins the match;
 *   rstrip       the white space right after it joins the match. */
#include <stdlib.h>
#include <string.h>

#include "tok_internal.h"

static uint64_t edge_hash(uint64_t k)
{
    k ^= k >> 31;
    k *= 0x7fb5d329728ea185ULL;
    k ^= k >> 27;
    return k;
}

static int32_t child(const tok_trie *t, int32_t node, uint8_t b)
{
    if (!t->edge_key) return -1;
    uint64_t key = (((uint64_t)node << 8) | b) + 1;
    uint64_t k = edge_hash(key) & t->edge_mask;
    while (t->edge_key[k]) {
        if (t->edge_key[k] == key) return t->edge_child[k];
        k = (k + 1) & t->edge_mask;
    }
    return -1;
}

static int edge_put(tok_trie *t, uint64_t key, int32_t c)
{
    uint64_t k = edge_hash(key) & t->edge_mask;
    while (t->edge_key[k]) k = (k + 1) & t->edge_mask;
    t->edge_key[k] = key;
    t->edge_child[k] = c;
    t->edge_used++;
    return 0;
}

static int edges_grow(tok_trie *t)
{
    if (t->edge_key && (t->edge_used + 1) * 2 <= t->edge_mask + 1) return 0;
    uint64_t size = t->edge_key ? (t->edge_mask + 1) * 2 : 256;
    uint64_t *ok = t->edge_key;
    int32_t *oc = t->edge_child;
    uint64_t old = ok ? t->edge_mask + 1 : 0;
    t->edge_key = calloc(size, sizeof *t->edge_key);
    t->edge_child = calloc(size, sizeof *t->edge_child);
    if (!t->edge_key || !t->edge_child) {
        free(t->edge_key);
        free(t->edge_child);
        t->edge_key = ok;
        t->edge_child = oc;
        return -1;
    }
    t->edge_mask = size - 1;
    t->edge_used = 0;
    for (uint64_t k = 0; k < old; k++)
        if (ok[k]) edge_put(t, ok[k], oc[k]);
    free(ok);
    free(oc);
    return 0;
}

static int32_t new_node(tok_trie *t)
{
    if (t->n_nodes == t->cap_nodes) {
        int32_t c = t->cap_nodes ? t->cap_nodes * 2 : 64;
        int32_t *term = realloc(t->term, (size_t)c * sizeof *term);
        if (!term) return -1;
        t->term = term;
        t->cap_nodes = c;
    }
    t->term[t->n_nodes] = -1;
    return t->n_nodes++;
}

int tok_trie_add(tok_trie *t, const char *s, size_t n, int32_t index)
{
    if (n == 0) return 0; /* an empty token never matches */
    if (t->n_nodes == 0 && new_node(t) < 0) return -1;
    int32_t node = 0;
    for (size_t i = 0; i < n; i++) {
        uint8_t b = (uint8_t)s[i];
        int32_t c = child(t, node, b);
        if (c < 0) {
            if (edges_grow(t) != 0 || (c = new_node(t)) < 0) return -1;
            edge_put(t, (((uint64_t)node << 8) | b) + 1, c);
        }
        node = c;
    }
    t->first[(uint8_t)s[0]] = 1;
    if (t->term[node] < 0) t->term[node] = index; /* the first of equal contents wins */
    return 0;
}

void tok_trie_free(tok_trie *t)
{
    free(t->term);
    free(t->edge_key);
    free(t->edge_child);
    memset(t, 0, sizeof *t);
}

/* The code point ending at s[end) (s valid UTF-8, end > 0). */
static uint32_t last_char(const char *s, size_t end, size_t *start)
{
    size_t i = end - 1;
    while (i > 0 && ((uint8_t)s[i] & 0xC0) == 0x80) i--;
    *start = i;
    int l = nnt_utf8_len((const uint8_t *)s + i, end - i);
    return l > 0 ? tok_utf8_decode((const uint8_t *)s + i, l) : 0xFFFD;
}

static uint32_t first_char(const char *s, size_t n, size_t at, int *len)
{
    int l = nnt_utf8_len((const uint8_t *)s + at, n - at);
    *len = l > 0 ? l : 1;
    return l > 0 ? tok_utf8_decode((const uint8_t *)s + at, l) : 0xFFFD;
}

static int seg_put(tok_segs *v, size_t start, size_t end, int32_t index)
{
    if (v->n == v->cap) {
        size_t c = v->cap ? v->cap * 2 : 16;
        tok_seg *p = realloc(v->p, c * sizeof *p);
        if (!p) return -1;
        v->p = p;
        v->cap = c;
    }
    v->p[v->n++] = (tok_seg){.start = start, .end = end, .index = index};
    return 0;
}

int tok_trie_split(const tok_trie *t, const tok_added *tokens, const char *s, size_t n, tok_segs *out)
{
    size_t done = 0; /* text before `done` is in a segment already */
    size_t pos = 0;  /* where the next search starts */
    while (t->n_nodes > 0 && pos < n) {
        /* the leftmost position where some token matches, and its longest token there */
        size_t ms = 0, me = 0;
        int32_t hit = -1;
        for (size_t p = pos; p < n && hit < 0; p++) {
            if (!t->first[(uint8_t)s[p]]) continue;
            int32_t node = 0;
            for (size_t q = p; q < n; q++) {
                node = child(t, node, (uint8_t)s[q]);
                if (node < 0) break;
                if (t->term[node] >= 0) hit = t->term[node], ms = p, me = q + 1;
            }
        }
        if (hit < 0) break;
        pos = me;
        const tok_added *a = &tokens[hit];
        if (a->single_word) {
            size_t st;
            int l;
            int word_before = ms > 0 && tok_is_word(last_char(s, ms, &st));
            int word_after = me < n && tok_is_word(first_char(s, n, me, &l));
            if (word_before || word_after) continue;
        }
        if (a->lstrip) {
            size_t st = ms;
            while (st > 0) {
                size_t c0;
                if (!tok_is_white_space(last_char(s, st, &c0))) break;
                st = c0;
            }
            ms = st > done ? st : done;
        }
        if (a->rstrip) {
            while (me < n) {
                int l;
                if (!tok_is_white_space(first_char(s, n, me, &l))) break;
                me += (size_t)l;
            }
        }
        if (done < ms && seg_put(out, done, ms, -1) != 0) return -1;
        if (seg_put(out, ms, me, hit) != 0) return -1;
        done = me;
    }
    if (done < n && seg_put(out, done, n, -1) != 0) return -1;
    return 0;
}
