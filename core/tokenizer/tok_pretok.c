/* tok_pretok.c - pre-tokenizers: a text becomes the pieces ("words") that byte-pair merging
 * then encodes one at a time. Each step refines every current piece, as the Sequence
 * pre-tokenizer of Hugging Face tokenizers does. A step finds matches in a piece (a regex, a
 * literal, or characters of a class, each its own match) and then keeps, drops or merges the
 * matches and the gaps between them by the split behaviour
 * (tokenizers/src/tokenizer/normalizer.rs, NormalizedString::split):
 *   Isolated            every match and every gap is a piece;
 *   Removed             matches are dropped, gaps kept;
 *   MergedWithPrevious  a match joins the piece before it;
 *   MergedWithNext      a match joins the piece after it;
 *   Contiguous          adjacent matches join into one piece.
 * invert swaps the roles of matches and gaps. Empty pieces are dropped. */
#include <stdlib.h>
#include <string.h>

#include "tok_internal.h"

typedef struct seg3 {
    size_t s, e;
    int m;
} seg3;

typedef struct seglist {
    seg3 *p;
    size_t n, cap;
} seglist;

static int sl_put(seglist *l, size_t s, size_t e, int m)
{
    if (l->n == l->cap) {
        size_t c = l->cap ? l->cap * 2 : 64;
        seg3 *p = realloc(l->p, c * sizeof *p);
        if (!p) return -1;
        l->p = p;
        l->cap = c;
    }
    l->p[l->n++] = (seg3){.s = s, .e = e, .m = m};
    return 0;
}

/* Matches and gaps of piece s[0..n) for a step, covering the whole piece in order. */
static int find_matches(const tok_pretok_step *st, const char *s, size_t n, seglist *out, const tok_matcher *m,
                        nnt_error *err)
{
    out->n = 0;
    size_t prev = 0;
    if (st->kind == TOK_PRE_SPLIT || st->kind == TOK_PRE_BYTELEVEL) {
        size_t from = 0, ms, me;
        for (;;) {
            int r = tok_regex_next(st->re, m, s, n, from, &ms, &me, err);
            if (r < 0) return -1;
            if (r == 0) break;
            if (ms > prev && sl_put(out, prev, ms, 0) != 0) goto oom;
            if (sl_put(out, ms, me, 1) != 0) goto oom;
            prev = from = me;
        }
    } else { /* one match per character of the class */
        for (size_t i = 0; i < n;) {
            int l = nnt_utf8_len((const uint8_t *)s + i, n - i);
            if (l <= 0) l = 1;
            uint32_t cp = tok_utf8_decode((const uint8_t *)s + i, l);
            int hit = st->kind == TOK_PRE_DIGITS ? tok_is_numeric(cp) : tok_is_white_space(cp);
            if (hit) {
                if (i > prev && sl_put(out, prev, i, 0) != 0) goto oom;
                if (sl_put(out, i, i + (size_t)l, 1) != 0) goto oom;
                prev = i + (size_t)l;
            }
            i += (size_t)l;
        }
    }
    if (prev < n && sl_put(out, prev, n, 0) != 0) goto oom;
    return 0;
oom:
    nnt_err_set(err, NNT_ERR_OUT_OF_MEMORY, "tokenizer: no memory to pre-tokenize");
    return -1;
}

/* Applies a behaviour to the matches of one piece (in place), leaving the pieces to keep. */
static int apply_behavior(seglist *l, tok_split_behavior b, int invert, seglist *tmp)
{
    if (invert)
        for (size_t i = 0; i < l->n; i++) l->p[i].m = !l->p[i].m;
    tmp->n = 0;
    int prev = 0;
    switch (b) {
    case TOK_SPLIT_ISOLATED:
        return 0;
    case TOK_SPLIT_REMOVED:
        for (size_t i = 0; i < l->n; i++)
            if (!l->p[i].m && sl_put(tmp, l->p[i].s, l->p[i].e, 0) != 0) return -1;
        break;
    case TOK_SPLIT_CONTIGUOUS:
        for (size_t i = 0; i < l->n; i++) {
            int m = l->p[i].m;
            if (m == prev && tmp->n) tmp->p[tmp->n - 1].e = l->p[i].e;
            else if (sl_put(tmp, l->p[i].s, l->p[i].e, 0) != 0) return -1;
            prev = m;
        }
        break;
    case TOK_SPLIT_MERGED_WITH_PREVIOUS:
        for (size_t i = 0; i < l->n; i++) {
            int m = l->p[i].m;
            if (m && !prev && tmp->n) tmp->p[tmp->n - 1].e = l->p[i].e;
            else if (sl_put(tmp, l->p[i].s, l->p[i].e, 0) != 0) return -1;
            prev = m;
        }
        break;
    case TOK_SPLIT_MERGED_WITH_NEXT:
        for (size_t k = l->n; k-- > 0;) {
            int m = l->p[k].m;
            if (m && !prev && tmp->n) tmp->p[tmp->n - 1].s = l->p[k].s;
            else if (sl_put(tmp, l->p[k].s, l->p[k].e, 0) != 0) return -1;
            prev = m;
        }
        for (size_t i = 0, j = tmp->n ? tmp->n - 1 : 0; i < j; i++, j--) {
            seg3 t = tmp->p[i];
            tmp->p[i] = tmp->p[j];
            tmp->p[j] = t;
        }
        break;
    }
    seglist t = *l;
    *l = *tmp;
    *tmp = t;
    return 0;
}

int tok_pretokenize(const tok_pretok *pt, const char *text, size_t n, tok_buf *work, tok_spans *pieces,
                    tok_spans *tmp, const tok_matcher *m, nnt_error *err)
{
    work->n = 0;
    pieces->n = 0;
    if (n == 0) return 0;
    if (tok_buf_put(work, text, n) != 0 || tok_spans_put(pieces, 0, (uint32_t)n) != 0) goto oom;
    seglist segs = {0}, stmp = {0};
    int rc = -1;
    for (int k = 0; k < pt->n; k++) {
        const tok_pretok_step *st = &pt->steps[k];
        tmp->n = 0;
        for (size_t i = 0; i < pieces->n; i++) {
            tok_span sp = pieces->p[i];
            if (st->kind == TOK_PRE_BYTELEVEL && st->add_prefix_space && work->p[sp.off] != ' ') {
                /* the piece gains a leading space: it is rebuilt at the end of work */
                size_t at = work->n;
                if (tok_buf_reserve(work, sp.len + 1) != 0) goto oom_local;
                work->p[work->n++] = ' ';
                memcpy(work->p + work->n, work->p + sp.off, sp.len);
                work->n += sp.len;
                work->p[work->n] = '\0';
                if (work->n > UINT32_MAX) goto oom_local;
                sp = (tok_span){.off = (uint32_t)at, .len = sp.len + 1};
            }
            if (st->kind == TOK_PRE_BYTELEVEL && !st->re) {
                if (tok_spans_put(tmp, sp.off, sp.len) != 0) goto oom_local;
                continue;
            }
            if (find_matches(st, work->p + sp.off, sp.len, &segs, m, err) != 0) goto out;
            tok_split_behavior b = st->kind == TOK_PRE_SPLIT ? st->behavior
                                   : st->kind == TOK_PRE_DIGITS
                                       ? (st->individual_digits ? TOK_SPLIT_ISOLATED : TOK_SPLIT_CONTIGUOUS)
                                   : st->kind == TOK_PRE_WHITESPACE_SPLIT ? TOK_SPLIT_REMOVED
                                                                          : TOK_SPLIT_ISOLATED;
            if (apply_behavior(&segs, b, st->kind == TOK_PRE_SPLIT && st->invert, &stmp) != 0) goto oom_local;
            for (size_t j = 0; j < segs.n; j++)
                if (segs.p[j].e > segs.p[j].s &&
                    tok_spans_put(tmp, sp.off + (uint32_t)segs.p[j].s, (uint32_t)(segs.p[j].e - segs.p[j].s)) != 0)
                    goto oom_local;
        }
        tok_spans t = *pieces;
        *pieces = *tmp;
        *tmp = t;
    }
    rc = 0;
    goto out;
oom_local:
    nnt_err_set(err, NNT_ERR_OUT_OF_MEMORY, "tokenizer: no memory to pre-tokenize %zu bytes", n);
out:
    free(segs.p);
    free(stmp.p);
    return rc;
oom:
    nnt_err_set(err, NNT_ERR_OUT_OF_MEMORY, "tokenizer: no memory to pre-tokenize %zu bytes", n);
    return -1;
}

void tok_pretok_free(tok_pretok *pt)
{
    for (int i = 0; i < pt->n; i++)
        if (pt->steps[i].re) pcre2_code_free(pt->steps[i].re);
    free(pt->steps);
    memset(pt, 0, sizeof *pt);
}
