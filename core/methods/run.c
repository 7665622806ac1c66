/* run.c - one request run whole (nnt_request_run, nnt_methods.h): its rows as a batch, a trace
 * with its edits and saves, the method it names - a forward, the logit lens, a patch sweep or a
 * generation, in one process or over a pipeline's ranks - and the results kept for the caller. */
#include <stdlib.h>
#include <string.h>

#include "internal.h"

struct nnt_result {
    nnt_method method;
    int holds;                 /* this process holds the results */
    nnt_runtime *rt;
    nnt_batch batch;
    nnt_trace *trace;          /* trace, generate (lens: the trace it ran) */
    int32_t *tokens;           /* generate: [B, max_new] */
    int max_new;
    int32_t *stops;            /* generate: the stop ids used */
    int n_stops;
    nnt_lens_result lens;
    nnt_patch_result patch;
    nnt_attribute_result attr;
};

void nnt_result_free(nnt_result *res)
{
    if (!res) return;
    nnt_batch_free(&res->batch);
    nnt_trace_free(res->trace);
    free(res->tokens);
    free(res->stops);
    nnt_lens_result_free(&res->lens);
    nnt_patch_result_free(&res->patch);
    nnt_attribute_result_free(&res->attr);
    free(res);
}

nnt_status nnt_result_of_trace(nnt_runtime *rt, nnt_batch *b, nnt_trace *t, nnt_result **out)
{
    nnt_result *res = calloc(1, sizeof *res);
    if (!res) return nnt_err_set(&rt->err, NNT_ERR_OUT_OF_MEMORY, "no memory");
    res->method = NNT_METHOD_TRACE;
    res->holds = 1;
    res->rt = rt;
    res->batch = *b;
    res->trace = t;
    memset(b, 0, sizeof *b);
    *out = res;
    return NNT_OK;
}

nnt_method nnt_result_method(const nnt_result *res) { return res ? res->method : NNT_METHOD_COUNT; }
int nnt_result_holds(const nnt_result *res) { return res ? res->holds : 0; }
const nnt_batch *nnt_result_batch(const nnt_result *res) { return res ? &res->batch : NULL; }
const nnt_trace *nnt_result_trace(const nnt_result *res) { return res ? res->trace : NULL; }

const int32_t *nnt_result_tokens(const nnt_result *res, int *max_new_tokens, const int32_t **stop_ids, int *n_stop)
{
    int gen = res && res->method == NNT_METHOD_GENERATE;
    if (max_new_tokens) *max_new_tokens = gen ? res->max_new : 0;
    if (stop_ids) *stop_ids = gen ? res->stops : NULL;
    if (n_stop) *n_stop = gen ? res->n_stops : 0;
    return gen ? res->tokens : NULL;
}

const nnt_lens_result *nnt_result_lens(const nnt_result *res)
{
    return res && res->method == NNT_METHOD_LENS && res->holds ? &res->lens : NULL;
}

const nnt_patch_result *nnt_result_patch(const nnt_result *res)
{
    return res && res->method == NNT_METHOD_PATCH && res->holds ? &res->patch : NULL;
}

const nnt_attribute_result *nnt_result_attribute(const nnt_result *res)
{
    return res && res->method == NNT_METHOD_ATTRIBUTE && res->holds ? &res->attr : NULL;
}

/* ---- the methods ---- */

static nnt_status run_trace(nnt_result *res, nnt_pipeline *p)
{
    const nnt_batch *b = &res->batch;
    res->holds = nnt_pipeline_rank(p) == 0;
    nnt_status st = p ? nnt_pipeline_trace(p, res->trace, b->ids, b->mask, b->batch, b->seq, 0)
                      : nnt_trace_run(res->trace, b->ids, b->mask, b->batch, b->seq);
    /* the metric is checked against the vocabulary and the rows when it runs: name its field */
    nnt_error *err = &nnt_trace_model(res->trace)->rt->err;
    if (st == NNT_ERR_INVALID_ARGUMENT && !strncmp(err->msg, "metric '", 8))
        nnt_err_prefix(err, strstr(err->msg, "no row has position") ? "grad.positions" : "grad.metric");
    return st;
}

static nnt_status run_lens(nnt_model *m, const nnt_request *r, nnt_result *res, nnt_pipeline *p)
{
    int n = 0, keep = 0;
    const int *pos = nnt_request_lens_positions(r, &n, &keep);
    res->holds = nnt_pipeline_rank(p) == nnt_pipeline_size(p) - 1;
    nnt_status st = nnt_lens(m, res->trace, &res->batch, pos, n, keep, p, &res->lens);
    /* the positions are checked before anything runs: their error names the field */
    if (st == NNT_ERR_INDEX) nnt_err_prefix(&m->rt->err, "lens.positions");
    return st;
}

/* A spec's field ("value: ...") as the request's ("SECTION.value: ..."). */
static void name_section(nnt_error *err, const char *section)
{
    static const char *const fields[] = {"value:", "positions:", "metric:", "ig_steps:"};
    for (int k = 0; k < 4; k++)
        if (!strncmp(err->msg, fields[k], strlen(fields[k]))) {
            char msg[NNT_ERROR_MSG_MAX + 32]; /* room for the section; the message is cut to fit below */
            snprintf(msg, sizeof msg, "%s.%s", section, err->msg);
            memcpy(err->msg, msg, sizeof err->msg - 1);
            err->msg[sizeof err->msg - 1] = '\0';
            return;
        }
}

/* 1 when batch b is a clean and a corrupted prompt of the same length, as patching and attribution
 * need (token by token); else 0 with err set, naming SECTION.corrupt. */
static int same_length(nnt_error *err, const nnt_batch *b, const char *section, const char *method)
{
    if (b->batch == 2 && b->lens[0] == b->lens[1]) return 1;
    nnt_err_set(err, NNT_ERR_INVALID_ARGUMENT,
                "%s.corrupt: the clean prompt has %d tokens and the corrupted one %d; %s needs prompts of the same "
                "length (token by token)",
                section, b->lens[0], b->batch > 1 ? b->lens[1] : 0, method);
    return 0;
}

static nnt_status run_patch(nnt_model *m, const nnt_request *r, nnt_result *res)
{
    nnt_error *err = &m->rt->err;
    const nnt_request_patch_opts *po = nnt_request_patch(r);
    const nnt_batch *b = &res->batch;
    res->holds = 1;
    if (!same_length(err, b, "patch", "patching")) return err->status;
    nnt_patch_spec s = {.struct_size = sizeof s, .value = po->value, .clean = b->ids, .corrupt = b->ids + b->seq,
                        .seq = b->seq, .positions = po->positions, .n_positions = po->n_positions, .rows = po->batch};
    nnt_status st = nnt_metric_parse(po->metric, &s.metric, err);
    if (st != NNT_OK) {
        nnt_err_prefix(err, "patch.metric");
        return st;
    }
    st = nnt_patch(m, &s, &res->patch);
    /* the spec's field ("value: ...") becomes the request's ("patch.value: ...") */
    if (st != NNT_OK) name_section(err, "patch");
    return st;
}

static nnt_status run_attribute(nnt_model *m, const nnt_request *r, nnt_result *res)
{
    nnt_error *err = &m->rt->err;
    const nnt_request_attribute_opts *ao = nnt_request_attribute(r);
    const nnt_batch *b = &res->batch;
    res->holds = 1;
    if (!same_length(err, b, "attribute", "attribution")) return err->status;
    nnt_attribute_spec s = {.struct_size = sizeof s, .value = ao->value, .clean = b->ids, .corrupt = b->ids + b->seq,
                            .seq = b->seq, .ig_steps = ao->ig_steps};
    nnt_status st = nnt_metric_parse(ao->metric, &s.metric, err);
    if (st != NNT_OK) {
        nnt_err_prefix(err, "attribute.metric");
        return st;
    }
    st = nnt_attribute(m, &s, &res->attr);
    if (st != NNT_OK) name_section(err, "attribute");
    return st;
}

nnt_status nnt_result_add_tokens(nnt_result *res, const int32_t *tokens, int max_new, const int32_t *stops, int n_stops)
{
    size_t cells = (size_t)res->batch.batch * (size_t)(max_new > 0 ? max_new : 1);
    res->tokens = malloc(cells * sizeof *res->tokens);
    res->stops = malloc(sizeof *res->stops * (size_t)(n_stops + 1));
    if (!res->tokens || !res->stops) return nnt_err_set(&res->rt->err, NNT_ERR_OUT_OF_MEMORY, "no memory");
    memcpy(res->tokens, tokens, (size_t)res->batch.batch * (size_t)max_new * sizeof *res->tokens);
    if (n_stops) memcpy(res->stops, stops, (size_t)n_stops * sizeof *stops);
    res->n_stops = n_stops;
    res->max_new = max_new;
    res->method = NNT_METHOD_GENERATE;
    return NNT_OK;
}

nnt_status nnt_generation_stops(nnt_model *m, const nnt_request *r, int32_t **stops, int *n_stops)
{
    int ignore_eos = 0;
    const nnt_generate_opts *g = nnt_request_generate_opts(r, &ignore_eos);
    *n_stops = 0;
    *stops = malloc(sizeof **stops * (size_t)(g->n_stop_ids + 1));
    if (!*stops) return nnt_err_set(&m->rt->err, NNT_ERR_OUT_OF_MEMORY, "no memory");
    nnt_tokenizer *tok = NULL;
    if (!ignore_eos && nnt_model_tokenizer(m, &tok) == NNT_OK && nnt_tokenizer_eos_id(tok) >= 0)
        (*stops)[(*n_stops)++] = nnt_tokenizer_eos_id(tok);
    nnt_err_clear(&m->rt->err); /* a folder without a tokenizer has no eos: no stop token */
    int64_t V = m->info.vocab_size;
    for (int k = 0; k < g->n_stop_ids; k++) {
        if (g->stop_ids[k] < 0 || g->stop_ids[k] >= V)
            return nnt_err_set(&m->rt->err, NNT_ERR_INVALID_ARGUMENT,
                               "generate.stop_ids[%d]: %d is outside the model's vocabulary (vocab_size %lld)", k,
                               g->stop_ids[k], (long long)V);
        (*stops)[(*n_stops)++] = g->stop_ids[k];
    }
    return NNT_OK;
}

static nnt_status run_generate(nnt_model *m, const nnt_request *r, nnt_result *res, nnt_pipeline *p)
{
    const nnt_generate_opts *req = nnt_request_generate_opts(r, NULL);
    const nnt_batch *b = &res->batch;
    nnt_status st = nnt_generation_stops(m, r, &res->stops, &res->n_stops);
    if (st != NNT_OK) return st;
    nnt_generate_opts g = *req;
    g.stop_ids = res->n_stops ? res->stops : NULL;
    g.n_stop_ids = res->n_stops;
    res->max_new = g.max_new_tokens;
    res->tokens = calloc((size_t)b->batch * (size_t)(g.max_new_tokens > 0 ? g.max_new_tokens : 1), sizeof *res->tokens);
    if (!res->tokens) return nnt_err_set(&m->rt->err, NNT_ERR_OUT_OF_MEMORY, "no memory");
    res->holds = nnt_pipeline_rank(p) == 0;
    return p ? nnt_pipeline_generate(p, m, res->trace, b->ids, b->mask, b->batch, b->seq, &g, res->tokens, 0)
             : nnt_generate(m, res->trace, b->ids, b->mask, b->batch, b->seq, &g, res->tokens);
}

/* The batch, the trace with the request's edits and saves, and the front end's extra saves. */
static nnt_status prepare(nnt_model *m, const nnt_request *r, const nnt_run_opts *o, nnt_result *res)
{
    nnt_status st = nnt_request_batch(r, m, &res->batch);
    if (st == NNT_OK) st = nnt_trace_new(m, &res->trace);
    if (st == NNT_OK) st = nnt_request_apply(r, res->trace, o ? o->callbacks : NULL, o ? o->n_callbacks : 0);
    for (int i = 0; st == NNT_OK && o && i < o->n_extra_saves; i++) {
        /* a generation keeps the front end's readings at every step */
        st = res->method == NNT_METHOD_GENERATE ? nnt_trace_save_every_step(res->trace, o->extra_saves[i])
                                                : nnt_trace_save(res->trace, o->extra_saves[i]);
    }
    return st;
}

static nnt_status request_run_held(nnt_model *m, const nnt_request *r, const nnt_run_opts *o, nnt_result **out)
{
    if (!m || !r || !out) return NNT_ERR_INVALID_ARGUMENT;
    *out = NULL;
    nnt_err_clear(&m->rt->err);
    nnt_pipeline *p = o && o->struct_size >= offsetof(nnt_run_opts, pipeline) + sizeof(void *) ? o->pipeline : NULL;
    nnt_result *res = calloc(1, sizeof *res);
    if (!res) return nnt_err_set(&m->rt->err, NNT_ERR_OUT_OF_MEMORY, "no memory");
    res->method = nnt_request_method(r);
    res->rt = m->rt;
    int one_process = res->method == NNT_METHOD_PATCH || res->method == NNT_METHOD_ATTRIBUTE;
    nnt_status st = one_process && p ? nnt_err_set(&m->rt->err, NNT_ERR_UNSUPPORTED,
                                                   "%s runs in one process; over several ranks nnt runs trace, lens and "
                                                   "generate", nnt_method_name(res->method))
                                     : prepare(m, r, o, res);
    if (st == NNT_OK) {
        switch (res->method) {
        case NNT_METHOD_TRACE: st = run_trace(res, p); break;
        case NNT_METHOD_LENS: st = run_lens(m, r, res, p); break;
        case NNT_METHOD_PATCH: st = run_patch(m, r, res); break;
        case NNT_METHOD_GENERATE: st = run_generate(m, r, res, p); break;
        case NNT_METHOD_ATTRIBUTE: st = run_attribute(m, r, res); break;
        default: st = nnt_err_set(&m->rt->err, NNT_ERR_INTERNAL, "request of an unknown method %d", (int)res->method);
        }
    }
    if (st != NNT_OK) {
        nnt_result_free(res);
        return st;
    }
    *out = res;
    return NNT_OK;
}

nnt_status nnt_request_run(nnt_model *m, const nnt_request *r, const nnt_run_opts *o, nnt_result **out)
{
    NNT_GUARDED((m ? m->rt : NULL), "nnt_request_run", request_run_held(m, r, o, out));
}

/* ---- --out ---- */

static nnt_status write_lens(const nnt_result *res, const nnt_st_sink *sink, const char *file)
{
    const nnt_lens_result *l = &res->lens;
    if (!l->probs)
        return nnt_err_set(&res->rt->err, NNT_ERR_STATE,
                           "%s: the lens kept only each cell's top token; ask for the whole distribution (\"probs\": true) "
                           "to write it",
                           file);
    nnt_tensor t[2] = {
        {.dtype = NNT_F32, .ndim = 4, .shape = {l->batch, l->layers, l->width, l->vocab}, .data = l->probs},
        {.dtype = NNT_I32, .ndim = 2, .shape = {l->batch, l->width}, .data = l->positions},
    };
    const char *keys[2] = {"lens_probs", "lens_positions"};
    const nnt_tensor *ptrs[2] = {&t[0], &t[1]};
    return nnt_st_emit(sink, 2, keys, ptrs, NULL, &res->rt->err);
}

/* A method's grid [blocks, positions] (or [blocks, positions, units] when units > 1, F64) with its
 * axes and the clean and corrupted runs' metrics, under the keys PREFIX_metric, PREFIX_blocks,
 * PREFIX_positions, clean_metric and corrupt_metric. positions NULL: 0 .. n_positions - 1. */
static nnt_status write_grid(const nnt_result *res, const nnt_st_sink *sink, const char *prefix, const double *grid,
                             int n_blocks, const int *blk, int n_positions, const int *pos, int n_units, double clean,
                             double corrupt)
{
    int32_t *axes = malloc(sizeof *axes * (size_t)(n_blocks + n_positions));
    if (!axes) return nnt_err_set(&res->rt->err, NNT_ERR_OUT_OF_MEMORY, "no memory");
    for (int i = 0; i < n_blocks; i++) axes[i] = blk[i];
    for (int i = 0; i < n_positions; i++) axes[n_blocks + i] = pos ? pos[i] : i;
    nnt_tensor t[5] = {
        {.dtype = NNT_F64, .ndim = n_units > 1 ? 3 : 2, .shape = {n_blocks, n_positions, n_units}, .data = (void *)grid},
        {.dtype = NNT_I32, .ndim = 1, .shape = {n_blocks}, .data = axes},
        {.dtype = NNT_I32, .ndim = 1, .shape = {n_positions}, .data = axes + n_blocks},
        {.dtype = NNT_F64, .ndim = 1, .shape = {1}, .data = &clean},
        {.dtype = NNT_F64, .ndim = 1, .shape = {1}, .data = &corrupt},
    };
    char k0[32], k1[32], k2[32];
    snprintf(k0, sizeof k0, "%s_metric", prefix);
    snprintf(k1, sizeof k1, "%s_blocks", prefix);
    snprintf(k2, sizeof k2, "%s_positions", prefix);
    const char *keys[5] = {k0, k1, k2, "clean_metric", "corrupt_metric"};
    const nnt_tensor *ptrs[5] = {&t[0], &t[1], &t[2], &t[3], &t[4]};
    nnt_status st = nnt_st_emit(sink, 5, keys, ptrs, NULL, &res->rt->err);
    free(axes);
    return st;
}

/* What the method produced, into sink; file names it in messages. */
static nnt_status emit_held(const nnt_result *res, const nnt_st_sink *sink, const char *file)
{
    if (!res->holds)
        return nnt_err_set(&res->rt->err, NNT_ERR_STATE, "%s: this rank does not hold the run's results", file);
    switch (res->method) {
    case NNT_METHOD_LENS: return write_lens(res, sink, file);
    case NNT_METHOD_PATCH: {
        const nnt_patch_result *p = &res->patch;
        return write_grid(res, sink, "patch", p->grid, p->n_blocks, p->blocks, p->n_positions, p->positions, 1,
                          p->clean_metric, p->corrupt_metric);
    }
    case NNT_METHOD_ATTRIBUTE: {
        const nnt_attribute_result *a = &res->attr;
        return write_grid(res, sink, "attr", a->grid, a->n_blocks, a->blocks, a->n_positions, NULL, a->n_units,
                          a->clean_metric, a->corrupt_metric);
    }
    case NNT_METHOD_GENERATE: {
        nnt_tensor tok = {.dtype = NNT_I32, .ndim = 2, .shape = {res->batch.batch, res->max_new}, .data = res->tokens};
        const char *key = "generated_tokens";
        const nnt_tensor *ptr = &tok;
        return nnt_trace_emit(res->trace, sink, res->tokens ? 1 : 0, &key, &ptr);
    }
    default: return nnt_trace_emit(res->trace, sink, 0, NULL, NULL);
    }
}

static nnt_status write_held(const nnt_result *res, const char *file)
{
    if (!file) return nnt_err_set(&res->rt->err, NNT_ERR_INVALID_ARGUMENT, "writing results: needs a file name");
    nnt_st_sink sink = {.file = file};
    return emit_held(res, &sink, file);
}

nnt_status nnt_result_write_safetensors(const nnt_result *res, const char *file)
{
    if (!res) return NNT_ERR_INVALID_ARGUMENT;
    NNT_GUARDED(res->rt, "nnt_result_write_safetensors", write_held(res, file));
}

static nnt_status bytes_held(const nnt_result *res, void **bytes, size_t *len)
{
    if (!bytes || !len) return nnt_err_set(&res->rt->err, NNT_ERR_INVALID_ARGUMENT, "results as bytes: needs a place for them");
    *bytes = NULL;
    *len = 0;
    nnt_st_sink sink = {.bytes = bytes, .len = len};
    return emit_held(res, &sink, "results");
}

nnt_status nnt_result_safetensors(const nnt_result *res, void **bytes, size_t *len)
{
    if (!res) return NNT_ERR_INVALID_ARGUMENT;
    NNT_GUARDED(res->rt, "nnt_result_safetensors", bytes_held(res, bytes, len));
}
