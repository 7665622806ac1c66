/* tokenizer.c - the tokenizer's public API (sdk/nnt/nnt_tokenizer.h): loading a model folder's
 * tokenizer, encoding (added tokens, normalization, pre-tokenization, byte-pair merging,
 * post-processing), decoding, and left-padded batches. */
#include <cjson/cJSON.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "tok_internal.h"

/* The caller's hints in tok->hints: the fields this library knows (a shorter, older struct:
 * those it has), checked. */
static nnt_status take_hints(nnt_tokenizer *tok, const nnt_tokenizer_hints *hints)
{
    if (hints) {
        if (hints->struct_size < sizeof(uint32_t))
            return nnt_err_set(&tok->err, NNT_ERR_INVALID_ARGUMENT,
                               "tokenizer hints: struct_size is %u; expected sizeof(nnt_tokenizer_hints)",
                               (unsigned)hints->struct_size);
        memcpy(&tok->hints, hints, hints->struct_size < sizeof tok->hints ? hints->struct_size : sizeof tok->hints);
    }
    tok->hints.struct_size = sizeof tok->hints;
    const char *names[3] = {"reserved_special_tokens", "piece_chars", "piece_run"};
    int64_t values[3] = {tok->hints.reserved_special_tokens, tok->hints.piece_chars, tok->hints.piece_run};
    for (int i = 0; i < 3; i++)
        if (values[i] < 0)
            return nnt_err_set(&tok->err, NNT_ERR_INVALID_ARGUMENT, "tokenizer hints: %s is %lld; expected 0 or more",
                               names[i], (long long)values[i]);
    return NNT_OK;
}

nnt_status nnt_tokenizer_load(const char *dir, nnt_tokenizer **out)
{
    return nnt_tokenizer_load_hinted(dir, NULL, out);
}

/* Reads the folder's files into tok (its hints taken already). */
static nnt_status load_folder(nnt_tokenizer *tok, const char *dir)
{
    tok->dir = nnt_strdup(dir);
    if (!tok->dir || tok_matcher_init(&tok->m) != 0)
        return nnt_err_set(&tok->err, NNT_ERR_OUT_OF_MEMORY, "tokenizer: no memory");
    char *json = nnt_path_join(dir, "tokenizer.json");
    char *tik = nnt_path_join(dir, "tiktoken.model");
    nnt_status st;
    if (!json || !tik) {
        st = nnt_err_set(&tok->err, NNT_ERR_OUT_OF_MEMORY, "tokenizer: no memory");
    } else if (nnt_file_exists(json)) {
        st = tok_load_json(tok, json);
        if (!st) st = tok_read_config(tok, NULL);
    } else if (nnt_file_exists(tik)) {
        st = tok_load_tiktoken(tok, tik);
    } else {
        st = nnt_err_set(&tok->err, NNT_ERR_NOT_FOUND,
                         "%s: no tokenizer: the folder holds neither tokenizer.json nor tiktoken.model", dir);
    }
    free(json);
    free(tik);
    if (!st && tok->want_bos) {
        if (tok->bos_id < 0)
            st = nnt_err_set(&tok->err, NNT_ERR_CONFIG,
                             "%s/tokenizer_config.json: add_bos_token is true but bos_token names no token", dir);
        int already = 0;
        for (int64_t i = 0; i < tok->prefix.n; i++)
            if (tok->prefix.p[i] == tok->bos_id) already = 1;
        tok->add_bos = !already;
    }
    /* the template's ids must name tokens: an unassigned id (a hole in the vocabulary) would be
     * encoded and then refused by decode */
    for (int k = 0; k < 2 && !st; k++) {
        const tok_ids *v = k ? &tok->suffix : &tok->prefix;
        for (int64_t i = 0; i < v->n && !st; i++)
            if (!tok_id_assigned(tok, v->p[i]))
                st = nnt_err_set(&tok->err, NNT_ERR_FORMAT,
                                 "%s/tokenizer.json: post_processor: the template's token id %d is not in the vocabulary "
                                 "or the added tokens",
                                 dir, v->p[i]);
    }
    return st;
}

nnt_status nnt_tokenizer_load_hinted(const char *dir, const nnt_tokenizer_hints *hints, nnt_tokenizer **out)
{
    if (!out) return NNT_ERR_INVALID_ARGUMENT;
    nnt_tokenizer *tok = calloc(1, sizeof *tok);
    *out = tok;
    if (!tok) return NNT_ERR_OUT_OF_MEMORY;
    pthread_mutexattr_t attr; /* recursive: encode_batch encodes through nnt_tokenizer_encode */
    pthread_mutexattr_init(&attr);
    pthread_mutexattr_settype(&attr, PTHREAD_MUTEX_RECURSIVE);
    pthread_mutex_init(&tok->mu, &attr);
    pthread_mutexattr_destroy(&attr);
    tok->bos_id = tok->eos_id = tok->pad_id = -1;
    tok_bytelevel_init(&tok->bl);
    if (!dir) return nnt_err_set(&tok->err, NNT_ERR_INVALID_ARGUMENT, "tokenizer: no folder given");
    nnt_status st = take_hints(tok, hints);
    if (!st) st = load_folder(tok, dir);
    tok->hints.split_pattern = NULL; /* compiled or unused: the caller's string is not read again */
    return st;
}

void nnt_tokenizer_free(nnt_tokenizer *tok)
{
    if (!tok) return;
    tok_bpe_free(&tok->bpe);
    tok_normalizer_free(&tok->norm);
    tok_pretok_free(&tok->pre);
    if (tok->tik_re) pcre2_code_free(tok->tik_re);
    for (int32_t i = 0; i < tok->n_added; i++) free(tok->added[i].content);
    free(tok->added);
    tok_trie_free(&tok->trie_raw);
    tok_trie_free(&tok->trie_norm);
    free(tok->prefix.p);
    free(tok->suffix.p);
    tok_strtab_free(&tok->dec);
    free(tok->flags);
    tok_matcher_free(&tok->m);
    tok_buf_free(&tok->text);
    tok_buf_free(&tok->normed);
    tok_buf_free(&tok->tmp);
    tok_buf_free(&tok->work);
    free(tok->segs.p);
    free(tok->segs2.p);
    free(tok->pieces.p);
    free(tok->pieces_tmp.p);
    free(tok->dir);
    pthread_mutex_destroy(&tok->mu);
    free(tok);
}

const char *nnt_tokenizer_last_error(const nnt_tokenizer *tok)
{
    return tok ? tok->err.msg : "no tokenizer (out of memory)";
}

const char *nnt_tokenizer_kind(const nnt_tokenizer *tok)
{
    return tok && tok->format == TOK_FORMAT_TIKTOKEN ? "tiktoken" : "tokenizer.json (BPE)";
}

int32_t nnt_tokenizer_vocab_size(const nnt_tokenizer *tok) { return tok ? tok->vocab_size : 0; }
int32_t nnt_tokenizer_bos_id(const nnt_tokenizer *tok) { return tok ? tok->bos_id : -1; }
int32_t nnt_tokenizer_eos_id(const nnt_tokenizer *tok) { return tok ? tok->eos_id : -1; }
int32_t nnt_tokenizer_pad_id(const nnt_tokenizer *tok) { return tok ? tok->pad_id : -1; }

static int32_t token_id_locked(const nnt_tokenizer *tok, const char *text)
{
    if (!tok || !text) return -1;
    return tok_lookup(tok, text, strlen(text));
}

int32_t nnt_tokenizer_token_id(const nnt_tokenizer *tok, const char *text)
{
    if (!tok) return -1;
    pthread_mutex_lock((pthread_mutex_t *)&tok->mu);
    int32_t r = token_id_locked(tok, text);
    pthread_mutex_unlock((pthread_mutex_t *)&tok->mu);
    return r;
}

const char *nnt_tokenizer_token_bytes(const nnt_tokenizer *tok, int32_t id, size_t *len)
{
    if (len) *len = 0;
    if (!tok || !tok_id_assigned(tok, id)) return NULL;
    size_t n;
    const char *s = tok_strtab_get(&tok->dec, id, &n);
    if (len) *len = n;
    return s;
}

int nnt_tokenizer_is_special(const nnt_tokenizer *tok, int32_t id)
{
    return tok && id >= 0 && id < tok->vocab_size && (tok->flags[id] & TOK_ID_SPECIAL) != 0;
}

/* ---- encoding ---- */

/* Pre-tokenizes and merges one stretch of normalized text. */
static int encode_words(nnt_tokenizer *tok, const char *s, size_t n, tok_ids *out)
{
    if (n == 0) return 0;
    if (tok->pre.n == 0) return tok_bpe_word(&tok->bpe, s, n, out) == 0 ? 0 : -2;
    if (tok_pretokenize(&tok->pre, s, n, &tok->work, &tok->pieces, &tok->pieces_tmp, &tok->m, &tok->err) != 0)
        return -1;
    for (size_t i = 0; i < tok->pieces.n; i++)
        if (tok_bpe_word(&tok->bpe, tok->work.p + tok->pieces.p[i].off, tok->pieces.p[i].len, out) != 0) return -2;
    return 0;
}

static int encode_json(nnt_tokenizer *tok, const char *s, size_t n, tok_ids *out)
{
    tok->segs.n = 0;
    if (tok_trie_split(&tok->trie_raw, tok->added, s, n, &tok->segs) != 0) return -2;
    for (size_t i = 0; i < tok->segs.n; i++) {
        tok_seg g = tok->segs.p[i];
        if (g.index >= 0) {
            if (tok_ids_put(out, tok->added[g.index].id) != 0) return -2;
            continue;
        }
        const char *t = s + g.start;
        size_t tn = g.end - g.start;
        if (tok->norm.n) {
            if (tok_normalize(&tok->norm, t, tn, &tok->normed, &tok->tmp, &tok->m, &tok->err) != 0) return -1;
            t = tok->normed.p;
            tn = tok->normed.n;
        }
        tok->segs2.n = 0;
        if (tok_trie_split(&tok->trie_norm, tok->added, t, tn, &tok->segs2) != 0) return -2;
        for (size_t j = 0; j < tok->segs2.n; j++) {
            tok_seg h = tok->segs2.p[j];
            int r = h.index >= 0 ? (tok_ids_put(out, tok->added[h.index].id) ? -2 : 0)
                                 : encode_words(tok, t + h.start, h.end - h.start, out);
            if (r) return r;
        }
    }
    return 0;
}

/* tiktoken: special tokens split the text; the pattern's matches are the words (text between
 * matches is dropped, as tiktoken drops it). */
static int encode_tiktoken(nnt_tokenizer *tok, const char *s, size_t n, tok_ids *out)
{
    tok->segs.n = 0;
    if (tok_trie_split(&tok->trie_raw, tok->added, s, n, &tok->segs) != 0) return -2;
    for (size_t i = 0; i < tok->segs.n; i++) {
        tok_seg g = tok->segs.p[i];
        if (g.index >= 0) {
            if (tok_ids_put(out, tok->added[g.index].id) != 0) return -2;
            continue;
        }
        size_t from = g.start, ms, me;
        for (;;) {
            int r = tok_regex_next(tok->tik_re, &tok->m, s, g.end, from, &ms, &me, &tok->err);
            if (r < 0) return -1;
            if (r == 0) break;
            if (tok_bpe_word(&tok->bpe, s + ms, me - ms, out) != 0) return -2;
            from = me;
        }
    }
    return 0;
}

typedef int (*encode_fn)(nnt_tokenizer *tok, const char *s, size_t n, tok_ids *out);

/* The cuts of the hints (piece_chars, piece_run): the text in pieces of at most piece_chars
 * characters, each piece cut where a run of white space (Python's str.isspace) or of other
 * characters would pass piece_run; `encode` runs on each cut on its own. No cut that is 0. */
static int encode_cut(nnt_tokenizer *tok, const char *s, size_t n, tok_ids *out, encode_fn encode)
{
    int64_t max_chars = tok->hints.piece_chars, max_run = tok->hints.piece_run;
    if (max_chars <= 0 && max_run <= 0) return encode(tok, s, n, out);
    const uint8_t *u = (const uint8_t *)s;
    size_t chunk = 0;
    while (chunk < n) {
        size_t end = chunk; /* the next max_chars characters */
        if (max_chars <= 0) end = n;
        for (int64_t c = 0; c < max_chars && end < n; c++) {
            int l = nnt_utf8_len(u + end, n - end);
            end += (size_t)(l > 0 ? l : 1);
        }
        size_t slice = chunk, p = chunk;
        int64_t run = 0;
        int run_space = -1;
        while (max_run > 0 && p < end) {
            int l = nnt_utf8_len(u + p, end - p);
            if (l <= 0) l = 1;
            int sp = tok_is_py_space(tok_utf8_decode(u + p, l));
            if (run_space < 0) run_space = sp;
            if (sp != run_space) {
                run = 1;
                run_space = sp;
            } else if (++run > max_run) {
                int r = encode(tok, s + slice, p - slice, out);
                if (r) return r;
                slice = p;
                run = 1;
            }
            p += (size_t)l;
        }
        int r = encode(tok, s + slice, end - slice, out);
        if (r) return r;
        chunk = end;
    }
    return 0;
}

static nnt_status encode_locked(nnt_tokenizer *tok, const char *text, size_t len, int flags, int32_t **ids,
                                int64_t *n_ids)
{
    if (ids) *ids = NULL;
    if (n_ids) *n_ids = 0;
    if (!tok) return NNT_ERR_INVALID_ARGUMENT;
    if (!ids || !n_ids || (!text && len))
        return nnt_err_set(&tok->err, NNT_ERR_INVALID_ARGUMENT, "nnt_tokenizer_encode: NULL argument");
    if (len > (UINT32_MAX >> 2))
        return nnt_err_set(&tok->err, NNT_ERR_INVALID_ARGUMENT, "nnt_tokenizer_encode: %zu bytes; at most %u per text",
                           len, UINT32_MAX >> 2);
    nnt_err_clear(&tok->err);
    const char *s = text ? text : "";
    if (nnt_utf8_valid_prefix(s, len) < len) { /* copied only when something must be replaced */
        if (tok_utf8_repair(s, len, &tok->text) < 0)
            return nnt_err_set(&tok->err, NNT_ERR_OUT_OF_MEMORY, "tokenizer: no memory for %zu bytes", len);
        s = tok->text.p, len = tok->text.n;
    }
    tok_ids out = {0};
    int add = (flags & NNT_TOKENIZE_ADD_SPECIAL) != 0;
    int r = 0;
    if (add && tok->add_bos && tok_ids_put(&out, tok->bos_id) != 0) r = -2;
    if (!r && add && tok_ids_put_n(&out, tok->prefix.p, tok->prefix.n) != 0) r = -2;
    if (!r) r = encode_cut(tok, s, len, &out, tok->format == TOK_FORMAT_JSON ? encode_json : encode_tiktoken);
    if (!r && add && tok_ids_put_n(&out, tok->suffix.p, tok->suffix.n) != 0) r = -2;
    if (r) {
        free(out.p);
        if (r == -2) return nnt_err_set(&tok->err, NNT_ERR_OUT_OF_MEMORY, "tokenizer: no memory encoding %zu bytes", len);
        return tok->err.status;
    }
    if (!out.p) out.p = malloc(sizeof(int32_t)); /* a valid pointer even for no ids */
    if (!out.p) return nnt_err_set(&tok->err, NNT_ERR_OUT_OF_MEMORY, "tokenizer: no memory");
    *ids = out.p;
    *n_ids = out.n;
    return NNT_OK;
}

nnt_status nnt_tokenizer_encode(nnt_tokenizer *tok, const char *text, size_t len, int flags, int32_t **ids,
                                int64_t *n_ids)
{
    if (!tok) return NNT_ERR_INVALID_ARGUMENT;
    pthread_mutex_lock(&tok->mu);
    nnt_status r = encode_locked(tok, text, len, flags, ids, n_ids);
    pthread_mutex_unlock(&tok->mu);
    return r;
}

/* ---- decoding ---- */

static nnt_status decode_locked(nnt_tokenizer *tok, const int32_t *ids, int64_t n_ids, int flags, char **text,
                                size_t *len)
{
    if (text) *text = NULL;
    if (len) *len = 0;
    if (!tok) return NNT_ERR_INVALID_ARGUMENT;
    if (!text || (!ids && n_ids) || n_ids < 0)
        return nnt_err_set(&tok->err, NNT_ERR_INVALID_ARGUMENT, "nnt_tokenizer_decode: NULL argument or negative count");
    tok_buf out = {0};
    int first = 1;
    for (int64_t i = 0; i < n_ids; i++) {
        int32_t id = ids[i];
        if (!tok_id_assigned(tok, id)) {
            tok_buf_free(&out);
            return nnt_err_set(&tok->err, NNT_ERR_INDEX, "nnt_tokenizer_decode: ids[%lld] = %d is not a token (vocabulary of %d)",
                               (long long)i, id, tok->vocab_size);
        }
        if ((flags & NNT_DECODE_SKIP_SPECIAL) && (tok->flags[id] & TOK_ID_SPECIAL)) continue;
        size_t n;
        const char *s = tok_strtab_get(&tok->dec, id, &n);
        if ((tok->join_space && !first && tok_buf_put(&out, " ", 1) != 0) || tok_buf_put(&out, s, n) != 0) {
            tok_buf_free(&out);
            return nnt_err_set(&tok->err, NNT_ERR_OUT_OF_MEMORY, "tokenizer: no memory decoding");
        }
        first = 0;
    }
    if (tok_buf_put(&out, "", 0) != 0) return nnt_err_set(&tok->err, NNT_ERR_OUT_OF_MEMORY, "tokenizer: no memory");
    if (flags & NNT_DECODE_REPLACE_INVALID) {
        tok_buf fixed = {0};
        long bad = tok_utf8_repair(out.p, out.n, &fixed);
        tok_buf_free(&out);
        if (bad < 0 || tok_buf_put(&fixed, "", 0) != 0) {
            tok_buf_free(&fixed);
            return nnt_err_set(&tok->err, NNT_ERR_OUT_OF_MEMORY, "tokenizer: no memory");
        }
        out = fixed;
    }
    *text = out.p;
    if (len) *len = out.n;
    return NNT_OK;
}

nnt_status nnt_tokenizer_decode(nnt_tokenizer *tok, const int32_t *ids, int64_t n_ids, int flags, char **text,
                                size_t *len)
{
    if (!tok) return NNT_ERR_INVALID_ARGUMENT;
    pthread_mutex_lock(&tok->mu);
    nnt_status r = decode_locked(tok, ids, n_ids, flags, text, len);
    pthread_mutex_unlock(&tok->mu);
    return r;
}

/* ---- batches ---- */

static nnt_status encode_batch_locked(nnt_tokenizer *tok, const char *const *texts, int n_texts, int flags,
                                      nnt_token_batch *out)
{
    if (!tok) return NNT_ERR_INVALID_ARGUMENT;
    if (!out || !texts || n_texts < 1)
        return nnt_err_set(&tok->err, NNT_ERR_INVALID_ARGUMENT, "nnt_tokenizer_encode_batch: no texts (n_texts = %d)",
                           n_texts);
    memset(out, 0, sizeof *out);
    int32_t **rows = calloc((size_t)n_texts, sizeof *rows);
    int64_t *lens = calloc((size_t)n_texts, sizeof *lens);
    nnt_status st = NNT_OK;
    if (!rows || !lens) st = nnt_err_set(&tok->err, NNT_ERR_OUT_OF_MEMORY, "tokenizer: no memory");
    int64_t seq = 0;
    for (int r = 0; r < n_texts && !st; r++) {
        if (!texts[r]) {
            st = nnt_err_set(&tok->err, NNT_ERR_INVALID_ARGUMENT, "nnt_tokenizer_encode_batch: texts[%d] is NULL", r);
            break;
        }
        st = nnt_tokenizer_encode(tok, texts[r], strlen(texts[r]), flags, &rows[r], &lens[r]);
        if (!st && lens[r] == 0)
            st = nnt_err_set(&tok->err, NNT_ERR_INVALID_ARGUMENT, "nnt_tokenizer_encode_batch: texts[%d] encodes to no token", r);
        if (!st && lens[r] > INT32_MAX)
            st = nnt_err_set(&tok->err, NNT_ERR_INVALID_ARGUMENT, "nnt_tokenizer_encode_batch: texts[%d] has more than 2^31 tokens", r);
        if (!st && lens[r] > seq) seq = lens[r];
    }
    if (!st && (int64_t)n_texts * seq > INT32_MAX)
        st = nnt_err_set(&tok->err, NNT_ERR_INVALID_ARGUMENT, "nnt_tokenizer_encode_batch: %d rows of %lld tokens is too many",
                         n_texts, (long long)seq);
    if (!st) {
        out->batch = n_texts;
        out->seq = (int)seq;
        out->ids = malloc((size_t)n_texts * (size_t)seq * sizeof(int32_t));
        out->attention_mask = malloc((size_t)n_texts * (size_t)seq * sizeof(int32_t));
        out->lengths = malloc((size_t)n_texts * sizeof(int32_t));
        if (!out->ids || !out->attention_mask || !out->lengths) {
            nnt_token_batch_free(out);
            st = nnt_err_set(&tok->err, NNT_ERR_OUT_OF_MEMORY, "tokenizer: no memory for the batch");
        }
    }
    if (!st) {
        int32_t pad = tok->pad_id >= 0 ? tok->pad_id : tok->eos_id >= 0 ? tok->eos_id : 0;
        for (int r = 0; r < n_texts; r++) {
            int64_t lead = seq - lens[r];
            int32_t *ids = out->ids + (size_t)r * (size_t)seq, *mask = out->attention_mask + (size_t)r * (size_t)seq;
            for (int64_t j = 0; j < seq; j++) {
                ids[j] = j < lead ? pad : rows[r][j - lead];
                mask[j] = j >= lead;
            }
            out->lengths[r] = (int32_t)lens[r];
        }
    }
    for (int r = 0; rows && r < n_texts; r++) free(rows[r]);
    free(rows);
    free(lens);
    return st;
}

nnt_status nnt_tokenizer_encode_batch(nnt_tokenizer *tok, const char *const *texts, int n_texts, int flags,
                                      nnt_token_batch *out)
{
    if (!tok) return NNT_ERR_INVALID_ARGUMENT;
    pthread_mutex_lock(&tok->mu);
    nnt_status r = encode_batch_locked(tok, texts, n_texts, flags, out);
    pthread_mutex_unlock(&tok->mu);
    return r;
}

void nnt_token_batch_free(nnt_token_batch *b)
{
    if (!b) return;
    free(b->ids);
    free(b->attention_mask);
    free(b->lengths);
    memset(b, 0, sizeof *b);
}
