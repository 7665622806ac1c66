/* rows.c - a harvest's rows: each document encoded with the model's tokenizer (its special tokens
 * as the tokenizer adds them), then packed into rows of exactly `context` tokens across documents,
 * split into rows of `context` per document, or cut to a document's first `context` tokens. */
#include <stdlib.h>
#include <string.h>

#include "harvest_internal.h"

struct hv_rows {
    hv_corpus *corpus;
    nnt_tokenizer *tok;
    int32_t vocab;
    int context, flags;
    nnt_harvest_rows mode;
    int64_t max_tokens, emitted; /* tokens in the rows given out */
    int32_t *ids;                /* the pending tokens: [n] from `at` on */
    int64_t *doc;
    int64_t n, at, cap;
    int64_t dropped;
    int ended;                   /* the corpus (or max_tokens) is done */
};

nnt_status hv_rows_open(const nnt_harvest_spec *s, hv_corpus *c, nnt_tokenizer *tok, int32_t vocab, hv_rows **out,
                        nnt_error *err)
{
    *out = NULL;
    hv_rows *r = calloc(1, sizeof *r);
    if (!r) return nnt_err_set(err, NNT_ERR_OUT_OF_MEMORY, "no memory");
    r->corpus = c;
    r->tok = tok;
    r->vocab = vocab;
    r->context = s->context;
    r->mode = s->rows;
    r->flags = s->add_special ? NNT_TOKENIZE_ADD_SPECIAL : 0;
    r->max_tokens = s->max_tokens;
    *out = r;
    return NNT_OK;
}

void hv_rows_free(hv_rows *r)
{
    if (!r) return;
    free(r->ids);
    free(r->doc);
    free(r);
}

int64_t hv_rows_dropped(const hv_rows *r) { return r->dropped; }

/* Encodes the next document and appends its tokens (all, or the first `context` when truncating):
 * 1, 0 at the corpus's end, -1 on an error. */
static int take_document(hv_rows *r, nnt_error *err)
{
    hv_doc d;
    int got = hv_corpus_next(r->corpus, &d, err);
    if (got <= 0) return got;
    int32_t *ids = NULL;
    int64_t n = 0;
    if (nnt_tokenizer_encode(r->tok, d.text, d.len, r->flags, &ids, &n) != NNT_OK) {
        nnt_err_set(err, NNT_ERR_INTERNAL, "document %lld: the tokenizer failed: %s", (long long)d.number,
                    nnt_tokenizer_last_error(r->tok));
        return -1;
    }
    for (int64_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= r->vocab) {
            nnt_err_set(err, NNT_ERR_INVALID_ARGUMENT,
                        "document %lld: token %lld encodes to id %d, outside the model's vocabulary (vocab_size %d)",
                        (long long)d.number, (long long)i, ids[i], r->vocab);
            free(ids);
            return -1;
        }
    int64_t keep = n;
    if (r->mode == NNT_HARVEST_TRUNCATE && keep > r->context) {
        r->dropped += keep - r->context;
        keep = r->context;
    }
    /* compact what was given out, then grow */
    if (r->at > 0) {
        memmove(r->ids, r->ids + r->at, (size_t)(r->n - r->at) * sizeof *r->ids);
        memmove(r->doc, r->doc + r->at, (size_t)(r->n - r->at) * sizeof *r->doc);
        r->n -= r->at;
        r->at = 0;
    }
    if (r->n + keep > r->cap) {
        int64_t cap = r->cap ? r->cap : 4096;
        while (cap < r->n + keep) cap *= 2;
        int32_t *ni = realloc(r->ids, (size_t)cap * sizeof *ni);
        if (ni) r->ids = ni;
        int64_t *nd = ni ? realloc(r->doc, (size_t)cap * sizeof *nd) : NULL;
        if (nd) r->doc = nd;
        if (!ni || !nd) {
            free(ids);
            nnt_err_set(err, NNT_ERR_OUT_OF_MEMORY, "no memory for a document of %lld tokens", (long long)n);
            return -1;
        }
        r->cap = cap;
    }
    memcpy(r->ids + r->n, ids, (size_t)keep * sizeof *ids);
    for (int64_t i = 0; i < keep; i++) r->doc[r->n + i] = d.number;
    r->n += keep;
    free(ids);
    return 1;
}

int hv_rows_next(hv_rows *r, hv_row *row, nnt_error *err)
{
    for (;;) {
        int64_t pending = r->n - r->at;
        if (r->max_tokens > 0 && r->emitted >= r->max_tokens) return 0;
        int64_t want = r->context;
        /* split and truncate give out a document's tokens before the next is read: a pending
         * document is cut into rows on its own */
        int ready = pending >= want || (r->mode != NNT_HARVEST_PACK && pending > 0);
        if (ready) {
            int len = (int)(pending < want ? pending : want);
            row->len = len;
            row->ids = r->ids + r->at;
            row->doc = r->doc + r->at;
            r->at += len;
            r->emitted += len;
            return 1;
        }
        if (r->ended) {
            r->dropped += pending; /* a packed corpus's incomplete last row */
            r->at = r->n;
            return 0;
        }
        int got = take_document(r, err);
        if (got < 0) return -1;
        if (got == 0) r->ended = 1;
    }
}
