/* request_batch.c - a request's rows as one left-padded batch for a model (nnt_request_batch):
 * ids as given, text through the tokenizer of the model's folder, every id checked against the
 * model's vocabulary; and the padding itself (nnt_batch_from_rows). */
#include <stdlib.h>
#include <string.h>

#include "request_internal.h"

void nnt_batch_free(nnt_batch *b)
{
    if (!b) return;
    free(b->ids);
    free(b->mask);
    free(b->lens);
    memset(b, 0, sizeof *b);
}

nnt_status nnt_batch_from_rows(const int32_t *const *rows, const int *lens, int n, nnt_batch *out, nnt_error *err)
{
    if (!out) return nnt_err_set(err, NNT_ERR_INVALID_ARGUMENT, "batch: no place for the batch");
    memset(out, 0, sizeof *out);
    if (n < 1 || !rows || !lens) return nnt_err_set(err, NNT_ERR_INVALID_ARGUMENT, "batch: needs at least one row (got %d)", n);
    int seq = 0;
    for (int r = 0; r < n; r++) {
        if (lens[r] < 1 || !rows[r])
            return nnt_err_set(err, NNT_ERR_INVALID_ARGUMENT, "batch: row %d has no token (%d)", r, lens[r]);
        seq = lens[r] > seq ? lens[r] : seq;
    }
    size_t cells = (size_t)n * (size_t)seq;
    out->ids = calloc(cells, sizeof *out->ids);
    out->mask = calloc(cells, sizeof *out->mask);
    out->lens = malloc((size_t)n * sizeof *out->lens);
    if (!out->ids || !out->mask || !out->lens) {
        nnt_batch_free(out);
        return nnt_err_set(err, NNT_ERR_OUT_OF_MEMORY, "batch: no memory for %d x %d tokens", n, seq);
    }
    out->batch = n;
    out->seq = seq;
    for (int r = 0; r < n; r++) { /* padding first (id 0, mask 0), then the row's tokens */
        size_t at = (size_t)r * (size_t)seq + (size_t)(seq - lens[r]);
        memcpy(out->ids + at, rows[r], (size_t)lens[r] * sizeof *out->ids);
        for (int s = 0; s < lens[r]; s++) out->mask[at + (size_t)s] = 1;
        out->lens[r] = lens[r];
    }
    return NNT_OK;
}

/* A token's text for a message: its bytes, quoted, with what is not printable ASCII as \xNN. */
static void token_text(const nnt_tokenizer *tok, int32_t id, char *out, size_t n)
{
    size_t len = 0, k = 0;
    const char *b = nnt_tokenizer_token_bytes(tok, id, &len);
    if (!b) {
        snprintf(out, n, "?");
        return;
    }
    k += (size_t)snprintf(out + k, n - k, "\"");
    for (size_t i = 0; i < len && k + 6 < n; i++) {
        unsigned char ch = (unsigned char)b[i];
        k += (size_t)(ch >= 0x20 && ch < 0x7f && ch != '"' && ch != '\\' ? snprintf(out + k, n - k, "%c", ch)
                                                                          : snprintf(out + k, n - k, "\\x%02x", ch));
    }
    snprintf(out + k, n - k, "\"");
}

/* The ids of one row of text (or of a prompt file), encoded with the model's tokenizer. */
static nnt_status encode_row(const nnt_request *r, const req_row *row, nnt_model *m, int32_t **ids, int *n)
{
    nnt_error *err = &m->rt->err;
    const char *field = row->kind == REQ_ROW_FILE ? "file" : "text";
    nnt_tokenizer *tok = NULL;
    nnt_status st = nnt_model_tokenizer(m, &tok);
    if (st != NNT_OK) {
        nnt_err_prefix(err, "%s: %s.%s: a row of text needs the tokenizer of the model's folder", r->name, row->field,
                       field);
        return st;
    }
    int64_t count = 0;
    st = nnt_tokenizer_encode(tok, row->text, row->text_len, r->add_special ? NNT_TOKENIZE_ADD_SPECIAL : 0, ids, &count);
    if (st != NNT_OK)
        return nnt_err_set(err, st, "%s: %s.%s: %s", r->name, row->field, field, nnt_tokenizer_last_error(tok));
    if (count < 1 || count > 0x7fffffff) {
        free(*ids);
        *ids = NULL;
        return nnt_err_set(err, NNT_ERR_FORMAT, "%s: %s.%s: %s", r->name, row->field, field,
                           count < 1 ? "encodes to no token" : "more than 2147483647 tokens");
    }
    int64_t V = m->info.vocab_size;
    for (int64_t i = 0; i < count; i++)
        if ((*ids)[i] < 0 || (*ids)[i] >= V) {
            char text[64];
            token_text(tok, (*ids)[i], text, sizeof text);
            st = nnt_err_set(err, NNT_ERR_INVALID_ARGUMENT,
                             "%s: %s.%s: the tokenizer gives token id %d (%s) at position %lld, outside the model's "
                             "vocabulary (vocab_size %lld): the tokenizer does not belong to this checkpoint",
                             r->name, row->field, field, (*ids)[i], text, (long long)i, (long long)V);
            free(*ids);
            *ids = NULL;
            return st;
        }
    *n = (int)count;
    return NNT_OK;
}

/* The ids of one row given as ids, checked against the vocabulary (copied). */
static nnt_status token_row(const nnt_request *r, const req_row *row, nnt_model *m, int32_t **ids, int *n)
{
    int64_t V = m->info.vocab_size;
    for (int i = 0; i < row->n_tokens; i++)
        if (row->tokens[i] >= V) {
            if (row->file)
                return nnt_err_set(&m->rt->err, NNT_ERR_INVALID_ARGUMENT,
                                   "%s: %s.tokens_file: %s: id %d is %d, outside the model's vocabulary (vocab_size %lld)",
                                   r->name, row->field, row->file, i, row->tokens[i], (long long)V);
            return nnt_err_set(&m->rt->err, NNT_ERR_INVALID_ARGUMENT,
                               "%s: %s.tokens[%d]: token id %d at row %d, position %d is outside the model's vocabulary "
                               "(vocab_size %lld)",
                               r->name, row->field, i, row->tokens[i], (int)(row - r->rows), i, (long long)V);
        }
    *ids = malloc((size_t)row->n_tokens * sizeof **ids);
    if (!*ids) return nnt_err_set(&m->rt->err, NNT_ERR_OUT_OF_MEMORY, "%s: %s: no memory", r->name, row->field);
    memcpy(*ids, row->tokens, (size_t)row->n_tokens * sizeof **ids);
    *n = row->n_tokens;
    return NNT_OK;
}

nnt_status nnt_request_batch(const nnt_request *r, nnt_model *m, nnt_batch *out)
{
    if (out) memset(out, 0, sizeof *out);
    if (!m) return NNT_ERR_INVALID_ARGUMENT;
    nnt_error *err = &m->rt->err;
    nnt_err_clear(err);
    if (!r || !out) return nnt_err_set(err, NNT_ERR_INVALID_ARGUMENT, "request batch: NULL argument");
    if (r->n_rows == 0)
        return nnt_err_set(err, NNT_ERR_INVALID_ARGUMENT, "%s: rows: a %s request needs at least one row to run", r->name,
                           nnt_method_name(r->method));
    int32_t **ids = calloc((size_t)r->n_rows, sizeof *ids);
    int *lens = calloc((size_t)r->n_rows, sizeof *lens);
    nnt_status st = ids && lens ? NNT_OK : nnt_err_set(err, NNT_ERR_OUT_OF_MEMORY, "%s: no memory for the rows", r->name);
    for (int i = 0; st == NNT_OK && i < r->n_rows; i++) {
        const req_row *row = &r->rows[i];
        st = row->kind == REQ_ROW_TOKENS ? token_row(r, row, m, &ids[i], &lens[i]) : encode_row(r, row, m, &ids[i], &lens[i]);
    }
    if (st == NNT_OK) st = nnt_batch_from_rows((const int32_t *const *)ids, lens, r->n_rows, out, err);
    for (int i = 0; ids && i < r->n_rows; i++) free(ids[i]);
    free(ids);
    free(lens);
    return st;
}
