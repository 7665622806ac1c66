/* harvest.c - values over a corpus (nnt_harvest, nnt_methods.h): the corpus's rows in forwards of
 * equal-length rows, each forward's saved values appended to the shard being filled, a shard
 * written whole when it reaches its size and the manifest after it, so that a run stopped at any
 * moment continues from its last shard with the same forwards; the reductions kept alongside. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "harvest_manifest.h"
#include "harvest_shard.h"

/* Everything one harvest holds. */
typedef struct hv_run {
    nnt_model *m;
    const nnt_harvest_spec *s;
    nnt_error *err;
    cJSON *identity, *shards, *values;
    nnt_trace *t;
    hv_reduce *red;
    hv_corpus *corpus;
    hv_rows *rows;
    hv_shard *shard;
    int32_t *ids, *held_ids; /* [batch, context], [context] */
    int64_t *docs, *held_docs;
    uint8_t *keep;
    int held;                /* held_* hold a row read but not yet batched (its length) */
    int end_block;           /* the forward runs blocks [0, end_block): past the last one anything reads */
    float *hidden_out;       /* [batch, context, streams, hidden_size]: the stream after them, when cut */
    int64_t rows_done, tokens_done, kept_done, shard_first_row;
    int n_shards;
    nnt_harvest_progress prog;
    struct timespec t0;
} hv_run;

static nnt_status check_spec(const nnt_harvest_spec *s, nnt_error *err)
{
    if (!s || s->struct_size < sizeof *s)
        return nnt_err_set(err, NNT_ERR_INVALID_ARGUMENT, "spec: NULL or struct_size %u < %zu (sizeof(nnt_harvest_spec))",
                           s ? s->struct_size : 0u, sizeof *s);
    if (!s->request) return nnt_err_set(err, NNT_ERR_INVALID_ARGUMENT, "request: NULL (expected a trace request)");
    if (nnt_request_method(s->request) != NNT_METHOD_TRACE)
        return nnt_err_set(err, NNT_ERR_INVALID_ARGUMENT, "request: method %s; a harvest runs a trace request",
                           nnt_method_name(nnt_request_method(s->request)));
    if (s->context < 1 || s->context > 1048576)
        return nnt_err_set(err, NNT_ERR_INVALID_ARGUMENT, "context: %d is not in 1..1048576", s->context);
    if (s->batch < 1 || s->batch > 4096)
        return nnt_err_set(err, NNT_ERR_INVALID_ARGUMENT, "batch: %d is not in 1..4096", s->batch);
    if (s->rows < NNT_HARVEST_PACK || s->rows > NNT_HARVEST_TRUNCATE)
        return nnt_err_set(err, NNT_ERR_INVALID_ARGUMENT, "rows: %d is not a row layout (pack, split, truncate)",
                           (int)s->rows);
    if (s->dtype != NNT_F32 && s->dtype != NNT_BF16 && s->dtype != NNT_F16)
        return nnt_err_set(err, NNT_ERR_INVALID_ARGUMENT, "dtype: %s; a harvest writes F32, BF16 or F16",
                           nnt_dtype_name(s->dtype));
    if (s->shard_bytes < 1) return nnt_err_set(err, NNT_ERR_INVALID_ARGUMENT, "shard_bytes: 0 (expected >= 1)");
    if (s->n_positions < 0 || (s->n_positions > 0 && !s->positions))
        return nnt_err_set(err, NNT_ERR_INVALID_ARGUMENT, "positions: NULL or a negative count");
    for (int i = 0; i < s->n_positions; i++)
        if (s->positions[i] == NNT_POS_GENERATED)
            return nnt_err_set(err, NNT_ERR_INVALID_ARGUMENT, "positions[%d]: 'generated' names tokens after a "
                                                              "prompt; a harvest's rows are prompts", i);
    if (s->max_tokens < 0)
        return nnt_err_set(err, NNT_ERR_INVALID_ARGUMENT, "max_tokens: %lld (expected >= 0)", (long long)s->max_tokens);
    if (!s->out_dir || !*s->out_dir) return nnt_err_set(err, NNT_ERR_INVALID_ARGUMENT, "out_dir: empty");
    if (s->n_top_features < 0 || (s->n_top_features > 0 && (!s->top_features || !s->top_features_k)))
        return nnt_err_set(err, NNT_ERR_INVALID_ARGUMENT, "top_features: NULL or a negative count");
    if (s->n_top_contexts < 0 || (s->n_top_contexts > 0 && (!s->top_contexts || !s->top_contexts_k)))
        return nnt_err_set(err, NNT_ERR_INVALID_ARGUMENT, "top_contexts: NULL or a negative count");
    return NNT_OK;
}

/* The request must hold no rows (the corpus gives them) and no gradients. */
static nnt_status check_request(const cJSON *id, nnt_error *err)
{
    const cJSON *req = cJSON_GetObjectItemCaseSensitive(id, "request");
    if (cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(req, "rows")) > 0)
        return nnt_err_set(err, NNT_ERR_INVALID_ARGUMENT, "request: rows: a harvest's rows come from its data; the "
                                                          "request gives none");
    if (cJSON_GetObjectItemCaseSensitive(req, "grad"))
        return nnt_err_set(err, NNT_ERR_INVALID_ARGUMENT, "request: grad: a harvest keeps values, not gradients");
    return NNT_OK;
}

static void run_free(hv_run *r)
{
    cJSON_Delete(r->identity);
    cJSON_Delete(r->shards);
    cJSON_Delete(r->values);
    nnt_trace_free(r->t);
    hv_reduce_free(r->red);
    hv_rows_free(r->rows);
    hv_corpus_free(r->corpus);
    hv_shard_free(r->shard);
    free(r->ids);
    free(r->held_ids);
    free(r->docs);
    free(r->held_docs);
    free(r->keep);
    free(r->hidden_out);
}

static char *out_file(const hv_run *r, const char *fmt, int k)
{
    char name[64];
    snprintf(name, sizeof name, fmt, k);
    return nnt_path_join(r->s->out_dir, name);
}

/* The manifest: the identity, then what is done. */
static nnt_status write_manifest(hv_run *r, int complete)
{
    cJSON *doc = cJSON_Duplicate(r->identity, 1);
    if (!doc) return nnt_err_set(r->err, NNT_ERR_OUT_OF_MEMORY, "no memory");
    cJSON_AddItemToObject(doc, "values", r->values ? cJSON_Duplicate(r->values, 1) : cJSON_CreateObject());
    cJSON_AddItemToObject(doc, "shards", cJSON_Duplicate(r->shards, 1));
    cJSON_AddNumberToObject(doc, "rows_done", (double)r->rows_done);
    cJSON_AddNumberToObject(doc, "tokens_done", (double)r->tokens_done);
    cJSON_AddNumberToObject(doc, "tokens_kept", (double)r->kept_done);
    char name[64];
    snprintf(name, sizeof name, "reduce-%05d.safetensors", r->n_shards - 1);
    if (r->red && !complete && r->n_shards > 0) cJSON_AddStringToObject(doc, "reduce_state", name);
    else cJSON_AddNullToObject(doc, "reduce_state");
    if (complete) {
        uint64_t bytes_done, total;
        int64_t skipped, end;
        hv_corpus_progress(r->corpus, &bytes_done, &total, &skipped);
        const int64_t *firsts = hv_corpus_firsts(r->corpus, &end);
        cJSON *f = cJSON_AddArrayToObject(doc, "data_first_document");
        for (int i = 0; f && i < r->s->n_data; i++) cJSON_AddItemToArray(f, cJSON_CreateNumber((double)firsts[i]));
        cJSON_AddNumberToObject(doc, "documents", (double)end);
        cJSON_AddNumberToObject(doc, "skipped_lines", (double)skipped);
        cJSON_AddNumberToObject(doc, "dropped_tokens", (double)hv_rows_dropped(r->rows));
        if (r->red) cJSON_AddStringToObject(doc, "stats", "stats.safetensors");
    }
    cJSON_AddBoolToObject(doc, "complete", complete);
    nnt_status st = hv_manifest_write(r->s->out_dir, doc, r->err);
    cJSON_Delete(doc);
    return st;
}

/* Writes the shard being filled, the reductions' state after it and the manifest naming both,
 * in that order; then removes the state before it. */
static nnt_status flush(hv_run *r)
{
    nnt_runtime *rt = r->m->rt;
    char *file = out_file(r, "shard-%05d.safetensors", r->n_shards);
    char *state = r->red ? out_file(r, "reduce-%05d.safetensors", r->n_shards) : NULL;
    if (!file || (r->red && !state)) {
        free(file);
        free(state);
        return nnt_err_set(r->err, NNT_ERR_OUT_OF_MEMORY, "no memory");
    }
    int64_t tokens = hv_shard_tokens(r->shard);
    uint64_t bytes = hv_shard_bytes(r->shard);
    nnt_status st = hv_shard_write(r->shard, rt, file);
    if (st == NNT_OK && state) st = hv_reduce_save(r->red, rt, state);
    free(file);
    free(state);
    if (st != NNT_OK) return st;
    cJSON *e = cJSON_CreateObject(), *rows = cJSON_AddArrayToObject(e, "rows");
    char name[64];
    snprintf(name, sizeof name, "shard-%05d.safetensors", r->n_shards);
    cJSON_AddStringToObject(e, "file", name);
    cJSON_AddItemToArray(rows, cJSON_CreateNumber((double)r->shard_first_row));
    cJSON_AddItemToArray(rows, cJSON_CreateNumber((double)r->rows_done));
    cJSON_AddNumberToObject(e, "tokens", (double)tokens);
    cJSON_AddNumberToObject(e, "value_bytes", (double)bytes);
    cJSON_AddItemToArray(r->shards, e);
    r->n_shards++;
    r->shard_first_row = r->rows_done;
    st = write_manifest(r, 0);
    if (st == NNT_OK && r->red && r->n_shards > 1) {
        char *old = out_file(r, "reduce-%05d.safetensors", r->n_shards - 2);
        if (old) unlink(old);
        free(old);
    }
    r->prog.shards = r->n_shards;
    return st;
}

/* The next forward's rows (up to batch, of one length) into r->ids / docs: their count, 0 at the
 * corpus's end, -1 on an error. *len receives their length. */
static int next_batch(hv_run *r, int *len)
{
    int n = 0;
    *len = 0;
    if (r->held) {
        memcpy(r->ids, r->held_ids, (size_t)r->held * sizeof *r->ids);
        memcpy(r->docs, r->held_docs, (size_t)r->held * sizeof *r->docs);
        *len = r->held;
        r->held = 0;
        n = 1;
    }
    while (n < r->s->batch) {
        hv_row row;
        int got = hv_rows_next(r->rows, &row, r->err);
        if (got < 0) return -1;
        if (got == 0) break;
        if (n > 0 && row.len != *len) {
            memcpy(r->held_ids, row.ids, (size_t)row.len * sizeof *row.ids);
            memcpy(r->held_docs, row.doc, (size_t)row.len * sizeof *row.doc);
            r->held = row.len;
            break;
        }
        *len = row.len;
        memcpy(r->ids + (size_t)n * (size_t)row.len, row.ids, (size_t)row.len * sizeof *row.ids);
        memcpy(r->docs + (size_t)n * (size_t)row.len, row.doc, (size_t)row.len * sizeof *row.doc);
        n++;
    }
    return n;
}

/* keep [nb, len]: the tokens at the spec's positions. */
static int64_t mark_kept(const nnt_harvest_spec *s, uint8_t *keep, int nb, int len)
{
    int every = s->n_positions == 0;
    for (int i = 0; i < s->n_positions; i++) every |= s->positions[i] == NNT_POS_ALL || s->positions[i] == NNT_POS_PROMPT;
    memset(keep, every, (size_t)nb * (size_t)len);
    for (int i = 0; !every && i < s->n_positions; i++) {
        int q = s->positions[i] >= 0 ? s->positions[i] : len + s->positions[i];
        if (q >= 0 && q < len)
            for (int b = 0; b < nb; b++) keep[(size_t)b * (size_t)len + (size_t)q] = 1;
    }
    int64_t n = 0;
    for (size_t i = 0; i < (size_t)nb * (size_t)len; i++) n += keep[i];
    return n;
}

static void report(hv_run *r)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    int64_t skipped;
    hv_corpus_progress(r->corpus, &r->prog.bytes_read, &r->prog.bytes_total, &skipped);
    r->prog.tokens = r->tokens_done;
    r->prog.rows = r->rows_done;
    r->prog.seconds = (double)(now.tv_sec - r->t0.tv_sec) + 1e-9 * (double)(now.tv_nsec - r->t0.tv_nsec);
    if (r->s->progress) r->s->progress(r->s->progress_user, &r->prog);
}

/* One forward of nb rows of len tokens starting at corpus row first. */
static nnt_status forward(hv_run *r, int nb, int len, int64_t first)
{
    int64_t kept = mark_kept(r->s, r->keep, nb, len);
    int L = nnt_model_get_info(r->m)->num_layers;
    nnt_status st = r->end_block < L ? nnt_trace_run_stage(r->t, r->ids, NULL, nb, len, 0, r->end_block, NULL, r->hidden_out)
                                     : nnt_trace_run(r->t, r->ids, NULL, nb, len);
    if (st != NNT_OK) {
        nnt_err_prefix(r->err, "rows %lld..%lld", (long long)first, (long long)(first + nb - 1));
        return st;
    }
    /* the reductions first: they tell their own saves from the request's */
    st = hv_reduce_add(r->red, r->t, r->ids, r->keep, nb, len, first, r->err);
    if (st != NNT_OK) return st;
    if (!r->shard) {
        st = hv_shard_new(r->m, r->t, r->red, nb, len, r->s, &r->shard, r->err);
        if (st != NNT_OK) return st;
        cJSON *v = hv_shard_values_json(r->shard);
        if (r->values && !cJSON_Compare(v, r->values, 1)) {
            cJSON_Delete(v);
            return nnt_err_set(r->err, NNT_ERR_CONFLICT, "out_dir %s: its manifest lists other values than this "
                                                         "run saves", r->s->out_dir);
        }
        cJSON_Delete(r->values);
        r->values = v;
    }
    hv_batch b = {.batch = nb, .seq = len, .first_row = first, .ids = r->ids, .docs = r->docs, .keep = r->keep};
    st = hv_shard_add(r->shard, r->t, &b, r->err);
    if (st != NNT_OK) return st;
    r->rows_done = first + nb;
    r->tokens_done += (int64_t)nb * len;
    r->kept_done += kept;
    if (hv_shard_bytes(r->shard) >= r->s->shard_bytes) st = flush(r);
    return st;
}

/* The block a path reads (from its "layers.N" / "layers[N]" prefix), or a number >= L when it may
 * read every block or the model's outputs (a wildcard, logits, the final norm, ...); the inputs and
 * token embeddings read no block (-1). */
static int block_of(const char *p, int L)
{
    if (!strncmp(p, "model.", 6)) p += 6;
    if (!strncmp(p, "layers.", 7) || !strncmp(p, "layers[", 7)) {
        char *end = NULL;
        long n = strtol(p + 7, &end, 10);
        return end != p + 7 && n >= 0 && n < L ? (int)n : L;
    }
    static const char *const INPUTS[] = {"input_ids", "attention_mask", "input_size", "token_embeddings",
                                         "embed_tokens."};
    for (size_t i = 0; i < sizeof INPUTS / sizeof *INPUTS; i++)
        if (!strncmp(p, INPUTS[i], strlen(INPUTS[i])) && !strchr(p + strlen(INPUTS[i]), '*')) return -1;
    return L;
}

/* Blocks [0, end) hold every value the harvest reads: its saves and reductions (a block's values
 * depend on the blocks before it only, so edits after the last read change nothing read). */
static int blocks_needed(const hv_run *r, int L)
{
    const nnt_harvest_spec *s = r->s;
    if (s->routing_stats) return L;
    int last = -1;
    const cJSON *req = cJSON_GetObjectItemCaseSensitive(r->identity, "request"), *it;
    cJSON_ArrayForEach(it, cJSON_GetObjectItemCaseSensitive(req, "saves"))
        if (cJSON_IsString(it)) last = block_of(it->valuestring, L) > last ? block_of(it->valuestring, L) : last;
    cJSON_ArrayForEach(it, cJSON_GetObjectItemCaseSensitive(req, "edits")) {
        const cJSON *op = cJSON_GetObjectItemCaseSensitive(it, "op"), *path = cJSON_GetObjectItemCaseSensitive(it, "path");
        if (cJSON_IsString(op) && !strcmp(op->valuestring, "save") && cJSON_IsString(path))
            last = block_of(path->valuestring, L) > last ? block_of(path->valuestring, L) : last;
    }
    for (int i = 0; i < s->n_reduce; i++) last = block_of(s->reduce[i], L) > last ? block_of(s->reduce[i], L) : last;
    for (int i = 0; i < s->n_top_contexts; i++)
        if (s->top_contexts[i]) last = block_of(s->top_contexts[i], L) > last ? block_of(s->top_contexts[i], L) : last;
    return last + 1 < 1 ? 1 : last + 1 > L ? L : last + 1;
}

/* Continues from the manifest prev: what it says is done. */
static nnt_status resume(hv_run *r, const cJSON *prev)
{
    const cJSON *rows = cJSON_GetObjectItemCaseSensitive(prev, "rows_done"),
                *tokens = cJSON_GetObjectItemCaseSensitive(prev, "tokens_done"),
                *kept = cJSON_GetObjectItemCaseSensitive(prev, "tokens_kept"),
                *values = cJSON_GetObjectItemCaseSensitive(prev, "values"),
                *state = cJSON_GetObjectItemCaseSensitive(prev, "reduce_state");
    if (!cJSON_IsNumber(rows) || !cJSON_IsNumber(tokens) || !cJSON_IsNumber(kept) || !cJSON_IsObject(values))
        return nnt_err_set(r->err, NNT_ERR_FORMAT, "%s/%s: rows_done, tokens_done, tokens_kept or values is missing",
                           r->s->out_dir, HV_MANIFEST);
    cJSON_Delete(r->shards);
    r->shards = cJSON_Duplicate(cJSON_GetObjectItemCaseSensitive(prev, "shards"), 1);
    r->n_shards = cJSON_GetArraySize(r->shards);
    r->rows_done = r->shard_first_row = (int64_t)rows->valuedouble;
    r->tokens_done = (int64_t)tokens->valuedouble;
    r->kept_done = (int64_t)kept->valuedouble;
    if (r->n_shards > 0) r->values = cJSON_Duplicate(values, 1);
    r->prog.resumed = r->n_shards > 0;
    r->prog.shards = r->n_shards;
    if (!r->red || r->n_shards == 0 || cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(prev, "complete"))) return NNT_OK;
    if (!cJSON_IsString(state))
        return nnt_err_set(r->err, NNT_ERR_FORMAT, "%s/%s: reduce_state is missing", r->s->out_dir, HV_MANIFEST);
    char *file = nnt_path_join(r->s->out_dir, state->valuestring);
    nnt_status st = file && !strchr(state->valuestring, '/') ? hv_reduce_load(r->red, r->m->rt, file)
                                                             : nnt_err_set(r->err, NNT_ERR_FORMAT, "reduce_state: "
                                                                           "not a file of the folder");
    free(file);
    return st;
}

/* The whole corpus, from where the manifest left it. */
static nnt_status run_corpus(hv_run *r)
{
    int64_t row = 0;
    for (;;) {
        int len = 0, nb = next_batch(r, &len);
        if (nb < 0) return r->err->status != NNT_OK ? r->err->status : NNT_ERR_INTERNAL;
        if (nb == 0) break;
        int64_t first = row;
        row += nb;
        if (row <= r->rows_done) continue; /* written by an earlier run */
        if (first < r->rows_done)
            return nnt_err_set(r->err, NNT_ERR_CONFLICT, "out_dir %s: its manifest ends at row %lld, inside a forward "
                                                         "of rows %lld..%lld", r->s->out_dir, (long long)r->rows_done,
                               (long long)first, (long long)(row - 1));
        nnt_status st = forward(r, nb, len, first);
        if (st != NNT_OK) return st;
        report(r);
    }
    if (r->rows_done == 0)
        return nnt_err_set(r->err, NNT_ERR_INVALID_ARGUMENT, "data: the corpus holds no row (%lld tokens dropped: "
                                                             "fewer than context %d when packed?)",
                           (long long)hv_rows_dropped(r->rows), r->s->context);
    return NNT_OK;
}

static nnt_status finish(hv_run *r)
{
    nnt_status st = NNT_OK;
    if (r->shard && (hv_shard_tokens(r->shard) > 0 || r->shard_first_row < r->rows_done)) st = flush(r);
    if (st == NNT_OK && r->red) {
        char *stats = nnt_path_join(r->s->out_dir, "stats.safetensors");
        st = stats ? hv_reduce_write_final(r->red, r->m->rt, stats) : nnt_err_set(r->err, NNT_ERR_OUT_OF_MEMORY, "no memory");
        free(stats);
    }
    if (st == NNT_OK) st = write_manifest(r, 1);
    for (int k = 0; st == NNT_OK && r->red && k < r->n_shards; k++) {
        char *old = out_file(r, "reduce-%05d.safetensors", k);
        if (old) unlink(old);
        free(old);
    }
    return st;
}

static nnt_status setup(hv_run *r, const cJSON **prev_out, cJSON **prev_doc)
{
    const nnt_harvest_spec *s = r->s;
    nnt_tokenizer *tok = NULL;
    nnt_status st = nnt_model_tokenizer(r->m, &tok);
    if (st != NNT_OK) return st;
    if ((st = hv_identity(r->m, s, &r->identity, r->err)) != NNT_OK) return st;
    if ((st = check_request(r->identity, r->err)) != NNT_OK) return st;
    if ((st = hv_make_dir(s->out_dir, r->err)) != NNT_OK) return st;
    if ((st = hv_manifest_read(s->out_dir, r->identity, prev_doc, r->err)) != NNT_OK) return st;
    *prev_out = *prev_doc;
    r->shards = cJSON_CreateArray();
    size_t cells = (size_t)s->batch * (size_t)s->context;
    r->ids = malloc(cells * sizeof *r->ids);
    r->docs = malloc(cells * sizeof *r->docs);
    r->keep = malloc(cells);
    r->held_ids = malloc((size_t)s->context * sizeof *r->held_ids);
    r->held_docs = malloc((size_t)s->context * sizeof *r->held_docs);
    if (!r->shards || !r->ids || !r->docs || !r->keep || !r->held_ids || !r->held_docs)
        return nnt_err_set(r->err, NNT_ERR_OUT_OF_MEMORY, "no memory for %d rows of %d tokens", s->batch, s->context);
    if ((st = nnt_trace_new(r->m, &r->t)) != NNT_OK) return st;
    if ((st = nnt_request_apply(s->request, r->t, NULL, 0)) != NNT_OK) return st;
    /* the paths the request saves, as spelled: a reduction of one of them reads that save */
    const cJSON *req = cJSON_GetObjectItemCaseSensitive(r->identity, "request"), *it;
    const char *saved[256];
    int n_saved = 0;
    cJSON_ArrayForEach(it, cJSON_GetObjectItemCaseSensitive(req, "saves"))
        if (cJSON_IsString(it) && n_saved < 256) saved[n_saved++] = it->valuestring;
    cJSON_ArrayForEach(it, cJSON_GetObjectItemCaseSensitive(req, "edits")) {
        const cJSON *op = cJSON_GetObjectItemCaseSensitive(it, "op"), *path = cJSON_GetObjectItemCaseSensitive(it, "path");
        if (cJSON_IsString(op) && !strcmp(op->valuestring, "save") && cJSON_IsString(path) && n_saved < 256)
            saved[n_saved++] = path->valuestring;
    }
    if ((st = hv_reduce_open(s, r->m, r->t, saved, n_saved, &r->red, r->err)) != NNT_OK) return st;
    const nnt_model_info *mi = nnt_model_get_info(r->m);
    r->end_block = blocks_needed(r, mi->num_layers);
    if (r->end_block < mi->num_layers) {
        size_t n = cells * (size_t)(mi->num_streams > 0 ? mi->num_streams : 1) * (size_t)mi->hidden_size;
        if (!(r->hidden_out = malloc(n * sizeof *r->hidden_out)))
            return nnt_err_set(r->err, NNT_ERR_OUT_OF_MEMORY, "no memory for the stream after block %d",
                               r->end_block - 1);
    }
    if ((st = hv_corpus_open(s, &r->corpus, r->err)) != NNT_OK) return st;
    return hv_rows_open(s, r->corpus, tok, nnt_model_get_info(r->m)->vocab_size, &r->rows, r->err);
}

nnt_status nnt_harvest(nnt_model *m, const nnt_harvest_spec *s, nnt_harvest_progress *done)
{
    if (done) memset(done, 0, sizeof *done);
    if (!m) return NNT_ERR_INVALID_ARGUMENT;
    nnt_error *err = &m->rt->err;
    nnt_status st = check_spec(s, err);
    if (st != NNT_OK) return st;
    hv_run r = {.m = m, .s = s, .err = err};
    clock_gettime(CLOCK_MONOTONIC, &r.t0);
    const cJSON *prev = NULL;
    cJSON *prev_doc = NULL;
    st = setup(&r, &prev, &prev_doc);
    if (st == NNT_OK && prev) st = resume(&r, prev);
    int complete = prev && cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(prev, "complete"));
    cJSON_Delete(prev_doc);
    if (st == NNT_OK && !complete) st = run_corpus(&r);
    if (st == NNT_OK && !complete) st = finish(&r);
    if (st == NNT_OK) {
        report(&r);
        if (done) *done = r.prog;
    }
    run_free(&r);
    return st;
}
