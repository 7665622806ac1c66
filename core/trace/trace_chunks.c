/* trace_chunks.c - chunked prefill: a prompt whose one forward would take more than the INI's
 * [prefill] bound runs as a session, one call per chunk of tokens (the earlier chunks' keys,
 * values and recurrent states in the session's cache), when every request of the trace is a save a
 * chunk can serve; each save is resolved on the whole prompt and filled in part by part
 * (trace_window.c), so the results are those of one call. */
#include <stdlib.h>
#include <string.h>

#include "trace_internal.h"
#include "grad/grad_memory.h"

/* The bound on one forward's activations when the INI gives none, and the shortest chunk. */
#define PREFILL_DEFAULT_BYTES ((uint64_t)1 << 30)
#define PREFILL_MIN_CHUNK 64

/* The chunks' length for batch x seq tokens, 0 when one call fits: [prefill] chunk_tokens, else
 * as many tokens as the forward's estimate (grad_memory.h, forward_blocked) puts under memory_mb. */
static int chunk_length(const nnt_trace *t, int batch, int seq)
{
    const nnt_ini *ini = t->m->rt->ini;
    if (ini && ini->prefill_chunk_tokens > 0) return ini->prefill_chunk_tokens < seq ? ini->prefill_chunk_tokens : 0;
    uint64_t bound = ini && ini->prefill_memory_bytes ? ini->prefill_memory_bytes : PREFILL_DEFAULT_BYTES;
    nnt_grad_dims d;
    nnt_grad_dims_of(&t->m->info, &d);
    nnt_grad_memory gm;
    nnt_grad_memory_estimate(&d, batch, seq, &gm);
    if (gm.forward_blocked <= bound) return 0;
    uint64_t per_token = gm.forward_blocked / (uint64_t)seq + 1, n = bound / per_token;
    if (n < PREFILL_MIN_CHUNK) n = PREFILL_MIN_CHUNK;
    return n < (uint64_t)seq ? (int)n : 0;
}

/* 1 when value (layer, slot) is served alike by a first call and a later one of `chunk` tokens:
 * with a "seq" axis of the call's tokens and the other axes unchanged, or as next_token_probs
 * (taken from the last chunk). */
static int value_chunks(const nnt_model *m, int layer, nnt_value_id slot, int batch, int chunk)
{
    nnt_call_dims first = {.batch = batch, .seq = chunk, .past = 0}, later = {.batch = batch, .seq = chunk, .past = chunk};
    nnt_value_info a, b;
    nnt_error scratch = {0}; /* a value that does not resolve is reported by the one call */
    if (nnt_model_slot_info(m, layer, slot, &first, &a, &scratch) != NNT_OK ||
        nnt_model_slot_info(m, layer, slot, &later, &b, &scratch) != NNT_OK)
        return 0;
    if (!a.served && !b.served) return 1; /* a "*" request skips it in every call */
    if (a.served != b.served || a.may_be_none || b.may_be_none) return 0;
    if (slot == NNT_VALUE_NEXT_TOKEN_PROBS) return 1;
    int axis = nnt_trace_token_axis(a.axes);
    return axis >= 0 && a.shape[axis] == chunk && nnt_shape_equal(a.ndim, a.shape, b.ndim, b.shape);
}

/* 1 when every request of t is a save of values chunks serve, and the family keeps a cache. */
static int trace_chunks(const nnt_trace *t, int batch, int chunk)
{
    const nnt_model *m = t->m;
    const nnt_family_descriptor *f = m->family->family;
    if (!f->cache_new || !f->cache_free || nnt_trace_wants_grad((nnt_trace *)t)) return 0;
    int L = m->info.num_layers;
    for (int i = 0; i < t->n_reqs; i++) {
        const request *r = &t->reqs[i];
        if (r->step_from > 0) continue; /* applies at no step of a prompt */
        if (r->kind != REQ_SAVE) return 0;
        int lo = r->path.layer == NNT_LAYER_ALL ? 0 : r->path.layer, hi = r->path.layer == NNT_LAYER_ALL ? L - 1 : lo;
        for (int l = lo; l <= hi; l++)
            if (!value_chunks(m, l, r->path.slot, batch, chunk)) return 0;
    }
    return 1;
}

nnt_status nnt_trace_run_chunked(nnt_trace *t, const int32_t *ids, const int32_t *mask, int batch, int seq, int *ran)
{
    *ran = 0;
    if (!ids || batch <= 0 || seq <= 0) return NNT_OK; /* the one call reports it */
    int chunk = chunk_length(t, batch, seq);
    if (!chunk || !trace_chunks(t, batch, chunk)) return NNT_OK;
    /* only a prompt's first call may hold padding: the first chunk reaches past the last pad */
    int first = chunk;
    for (int64_t i = 0, n = (int64_t)batch * seq; mask && i < n; i++)
        if (!mask[i] && (int)(i % seq) + 1 > first) first = (int)(i % seq) + 1;
    if (first >= seq) return NNT_OK;
    nnt_model *m = t->m;
    nnt_error *err = &m->rt->err;
    *ran = 1;
    t->prefill_calls = 0;
    int widest = first > chunk ? first : chunk;
    int32_t *cids = malloc((size_t)batch * (size_t)widest * sizeof *cids);
    int32_t *cmask = mask ? malloc((size_t)batch * (size_t)widest * sizeof *cmask) : NULL;
    nnt_session *ss = NULL;
    nnt_status st = !cids || (mask && !cmask) ? nnt_err_set(err, NNT_ERR_OUT_OF_MEMORY, "no memory for a chunk of the prompt")
                                               : nnt_session_new(m, batch, seq, &ss);
    for (int t0 = 0, n; st == NNT_OK && t0 < seq; t0 += n) {
        n = t0 == 0 ? first : seq - t0 < chunk ? seq - t0 : chunk;
        for (int b = 0; b < batch; b++) {
            memcpy(cids + (size_t)b * n, ids + (size_t)b * seq + t0, (size_t)n * sizeof *cids);
            if (mask) memcpy(cmask + (size_t)b * n, mask + (size_t)b * seq + t0, (size_t)n * sizeof *cmask);
        }
        t->window = (trace_window){.t0 = t0, .n = n, .total = seq};
        st = nnt_model_forward(m, t, ss, cids, cmask, batch, n, NULL, err);
        t->prefill_calls++;
    }
    t->window = (trace_window){0};
    t->dims = (nnt_call_dims){.batch = batch, .seq = seq, .past = 0};
    nnt_session_free(ss);
    free(cids);
    free(cmask);
    return st;
}
