/* session.c - sessions (a batch's caches carried from call to call) and generation: greedy or
 * sampled continuation with temperature, top-k and top-p, rows stopping at stop tokens, under a
 * trace whose requests apply at every step. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

nnt_status nnt_session_new(nnt_model *m, int batch, int capacity, nnt_session **out)
{
    if (!m || !out) return NNT_ERR_INVALID_ARGUMENT;
    *out = NULL;
    nnt_error *err = &m->rt->err;
    nnt_err_clear(err);
    if (batch < 1 || capacity < 1)
        return nnt_err_set(err, NNT_ERR_INVALID_ARGUMENT, "a session needs batch >= 1 and capacity >= 1 (got %d, %d)", batch,
                           capacity);
    const nnt_family_descriptor *f = m->family->family;
    if (!f->cache_new || !f->cache_free)
        return nnt_err_set(err, NNT_ERR_UNSUPPORTED, "family %s keeps no generation state (no cache_new)", f->header.name);
    nnt_session *s = calloc(1, sizeof *s);
    if (!s) return nnt_err_set(err, NNT_ERR_OUT_OF_MEMORY, "no memory");
    s->m = m;
    s->batch = batch;
    s->capacity = capacity;
    s->mask_hist = calloc((size_t)batch * (size_t)capacity, sizeof *s->mask_hist);
    s->count = calloc((size_t)batch, sizeof *s->count);
    if (!s->mask_hist || !s->count) {
        nnt_session_free(s);
        return nnt_err_set(err, NNT_ERR_OUT_OF_MEMORY, "no memory for a session of %d x %d tokens", batch, capacity);
    }
    nnt_status st = f->cache_new(m->impl, batch, capacity, &s->cache, err);
    if (st != NNT_OK) {
        s->cache = NULL;
        nnt_session_free(s);
        return st;
    }
    *out = s;
    return NNT_OK;
}

void nnt_session_free(nnt_session *s)
{
    if (!s) return;
    if (s->cache) s->m->family->family->cache_free(s->m->impl, s->cache);
    free(s->mask_hist);
    free(s->count);
    free(s);
}

int nnt_session_length(const nnt_session *s)
{
    return s ? s->len : 0;
}

nnt_status nnt_session_forward(nnt_session *s, nnt_trace *t, const int32_t *ids, const int32_t *mask, int seq)
{
    if (!s) return NNT_ERR_INVALID_ARGUMENT;
    nnt_model *m = s->m;
    nnt_err_clear(&m->rt->err);
    if (t && nnt_trace_model(t) != m)
        return nnt_err_set(&m->rt->err, NNT_ERR_INVALID_ARGUMENT, "the trace belongs to another model");
    return nnt_model_forward(m, t, s, ids, mask, s->batch, seq, NULL, &m->rt->err);
}

nnt_status nnt_session_forward_stage(nnt_session *s, nnt_trace *t, const int32_t *ids, const int32_t *mask, int seq,
                                     int first_layer, int end_layer, const float *hidden_in, float *hidden_out)
{
    if (!s) return NNT_ERR_INVALID_ARGUMENT;
    nnt_model *m = s->m;
    nnt_err_clear(&m->rt->err);
    if (t && nnt_trace_model(t) != m)
        return nnt_err_set(&m->rt->err, NNT_ERR_INVALID_ARGUMENT, "the trace belongs to another model");
    nnt_stage_call sc = {first_layer, end_layer, hidden_in, hidden_out, 0};
    return nnt_model_forward(m, t, s, ids, mask, s->batch, seq, &sc, &m->rt->err);
}

/* splitmix64: a small, well-mixed generator for reproducible sampling */
static uint64_t next_u64(uint64_t *state)
{
    uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

typedef struct cand {
    float p;
    int id;
} cand;

static int by_prob_desc(const void *a, const void *b)
{
    const cand *x = a, *y = b;
    if (x->p != y->p) return x->p < y->p ? 1 : -1;
    return x->id - y->id;
}

/* One token from a row of logits: greedy, or sampled after temperature, top-k and top-p. */
static int pick_token(const float *logits, int V, const nnt_generate_opts *o, uint64_t *rng, cand *work)
{
    if (o->temperature <= 0.0f) {
        int best = 0;
        for (int v = 1; v < V; v++)
            if (logits[v] > logits[best]) best = v;
        return best;
    }
    float mx = -INFINITY;
    for (int v = 0; v < V; v++) mx = logits[v] > mx ? logits[v] : mx;
    double sum = 0.0;
    for (int v = 0; v < V; v++) {
        work[v].id = v;
        work[v].p = expf((logits[v] - mx) / o->temperature);
        sum += work[v].p;
    }
    for (int v = 0; v < V; v++) work[v].p = (float)(work[v].p / sum);
    qsort(work, (size_t)V, sizeof *work, by_prob_desc);
    int keep = V;
    if (o->top_k > 0 && o->top_k < keep) keep = o->top_k;
    if (o->top_p > 0.0f && o->top_p < 1.0f) {
        double acc = 0.0;
        for (int i = 0; i < keep; i++) {
            acc += work[i].p;
            if (acc >= o->top_p) {
                keep = i + 1;
                break;
            }
        }
    }
    double total = 0.0;
    for (int i = 0; i < keep; i++) total += work[i].p;
    double u = (double)(next_u64(rng) >> 11) / 9007199254740992.0 * total, acc = 0.0;
    for (int i = 0; i < keep; i++) {
        acc += work[i].p;
        if (u < acc) return work[i].id;
    }
    return work[keep - 1].id;
}

/* One forward of a generation step: the whole model, or the link's stage with its stream
 * received before and sent after. */
static nnt_status step_forward(nnt_session *s, nnt_trace *tr, const int32_t *ids, const int32_t *mask, int seq,
                               const nnt_stage_link *link, float *hidden, nnt_error *err)
{
    if (!link) return nnt_session_forward(s, tr, ids, mask, seq);
    nnt_model *m = s->m;
    int L = m->info.num_layers;
    size_t n = (size_t)s->batch * (size_t)seq * (size_t)(m->info.num_streams > 0 ? m->info.num_streams : 1) *
               (size_t)m->info.hidden_size;
    float *in = link->first_layer > 0 ? hidden : NULL, *out = link->end_layer < L ? hidden : NULL;
    nnt_status st = NNT_OK;
    if (in && (st = link->recv_hidden(link->ctx, in, n, err)) != NNT_OK) return st;
    /* the stage reads its input stream before it writes its output: one buffer serves both
     * only when they do not overlap, so the output goes to the second half */
    if (in && out) out = hidden + n;
    st = nnt_session_forward_stage(s, tr, ids, mask, seq, link->first_layer, link->end_layer, in, out);
    if (st == NNT_OK && out) {
        nnt_error lerr = {0};
        if ((st = link->send_hidden(link->ctx, out, n, &lerr)) != NNT_OK) *err = lerr;
    }
    return st;
}

static nnt_status generate(nnt_model *m, nnt_trace *t, const int32_t *ids, const int32_t *mask, int batch, int seq,
                           const nnt_generate_opts *o, const nnt_stage_link *link, int32_t *out)
{
    if (!m || !ids || !o || !out) return NNT_ERR_INVALID_ARGUMENT;
    nnt_error *err = &m->rt->err;
    nnt_err_clear(err);
    int L = m->info.num_layers;
    if (link && (link->struct_size < sizeof *link || !link->recv_hidden || !link->send_hidden || !link->share_tokens ||
                 link->first_layer < 0 || link->end_layer <= link->first_layer || link->end_layer > L))
        return nnt_err_set(err, NNT_ERR_INVALID_ARGUMENT,
                           "generate: the stage link needs its struct_size, its three functions and blocks "
                           "0 <= first_layer < end_layer <= %d (got %d, %d)", L, link->first_layer, link->end_layer);
    int last_stage = !link || link->end_layer == L;
    if (o->max_new_tokens < 0 || o->top_k < 0 || o->n_stop_ids < 0)
        return nnt_err_set(err, NNT_ERR_INVALID_ARGUMENT, "generate: max_new_tokens, top_k and n_stop_ids must be >= 0");
    if (o->n_stop_ids > 0 && !o->stop_ids)
        return nnt_err_set(err, NNT_ERR_INVALID_ARGUMENT, "generate: stop_ids is NULL but n_stop_ids is %d", o->n_stop_ids);
    if (o->max_new_tokens == 0) return NNT_OK;
    if (batch < 1 || seq < 1)
        return nnt_err_set(err, NNT_ERR_INVALID_ARGUMENT, "generate: needs batch, seq >= 1 (got %d, %d)", batch, seq);
    nnt_status st = NNT_OK;
    if (t) { /* every steering position must name a token some step processes */
        int *lens = calloc((size_t)batch, sizeof *lens);
        if (!lens) return nnt_err_set(err, NNT_ERR_OUT_OF_MEMORY, "no memory");
        for (int b = 0; b < batch; b++)
            for (int i = 0; i < seq; i++) lens[b] += mask ? mask[(int64_t)b * seq + i] != 0 : 1;
        st = nnt_trace_check_positions(t, lens, batch, o->max_new_tokens, err);
        free(lens);
        if (st != NNT_OK) return st;
    }
    nnt_session *s;
    st = nnt_session_new(m, batch, seq + o->max_new_tokens, &s);
    if (st != NNT_OK) return st;
    s->keep_results = 0;
    /* the readout of each step: an internal trace when the caller's does not save logits */
    nnt_trace *own = NULL, *tr = t;
    if (!tr) {
        st = nnt_trace_new(m, &own);
        tr = own;
    }
    int V = m->info.vocab_size;
    cand *work = malloc((size_t)V * sizeof *work);
    int32_t *next = malloc((size_t)batch * sizeof *next), *picked = malloc((size_t)batch * sizeof *picked);
    /* a stage's streams: the prompt's in and out, [batch, seq, streams, hidden] each */
    size_t hn = link ? 2 * (size_t)batch * (size_t)seq * (size_t)(m->info.num_streams > 0 ? m->info.num_streams : 1) *
                           (size_t)m->info.hidden_size : 0;
    float *hidden = hn ? malloc(hn * sizeof *hidden) : NULL;
    unsigned char *stopped = calloc((size_t)batch, 1); /* rows that emitted a stop id */
    int n_stopped = 0;
    uint64_t rng = o->seed;
    if (st == NNT_OK && (!work || !next || !picked || !stopped || (hn && !hidden)))
        st = nnt_err_set(err, NNT_ERR_OUT_OF_MEMORY, "no memory");
    /* each step's logits come from a request of generate's own, added after the caller's (so
     * their edits of logits count); its results are taken out of the trace at every step. Only
     * the last stage computes logits, and picks the tokens every stage is then given. */
    if (st == NNT_OK && last_stage) st = nnt_trace_save_every_step(tr, "logits");
    int logits_req = st == NNT_OK && last_stage;
    nnt_tensor lg = {0};
    for (int step = 0; st == NNT_OK && step < o->max_new_tokens; step++) {
        st = step == 0 ? step_forward(s, tr, ids, mask, seq, link, hidden, err)
                       : step_forward(s, tr, next, NULL, 1, link, hidden, err);
        if (st != NNT_OK) break;
        if (last_stage && !nnt_trace_take_last_result(tr, &lg)) {
            st = nnt_err_set(err, NNT_ERR_INTERNAL, "generate: no logits were saved at step %d", step);
            break;
        }
        /* a stopped row still draws, so the other rows' samples do not depend on it */
        for (int b = 0; last_stage && b < batch; b++) {
            int64_t T = lg.shape[1];
            picked[b] = pick_token((const float *)lg.data + ((int64_t)b * T + T - 1) * V, V, o, &rng, work);
        }
        if (link) {
            nnt_error lerr = {0};
            if ((st = link->share_tokens(link->ctx, picked, batch, last_stage, &lerr)) != NNT_OK) {
                *err = lerr;
                break;
            }
        }
        for (int b = 0; b < batch; b++) {
            int id = picked[b];
            if (id < 0 || id >= V) {
                st = nnt_err_set(err, NNT_ERR_FORMAT, "generate: step %d gave row %d the token %d, outside the vocabulary "
                                 "[0, %d)", step, b, id, V);
                break;
            }
            int32_t *slot = &out[(int64_t)b * o->max_new_tokens + step];
            if (stopped[b]) { /* fed its stop id again (next[b] unchanged) */
                *slot = NNT_TOKEN_STOPPED;
                continue;
            }
            next[b] = *slot = id;
            for (int k = 0; k < o->n_stop_ids; k++)
                if (id == o->stop_ids[k]) {
                    stopped[b] = 1;
                    n_stopped++;
                    break;
                }
        }
        if (st != NNT_OK) break;
        if (n_stopped == batch) { /* every row is done: fill the remaining slots and stop */
            for (int b = 0; b < batch; b++)
                for (int i = step + 1; i < o->max_new_tokens; i++) out[(int64_t)b * o->max_new_tokens + i] = NNT_TOKEN_STOPPED;
            break;
        }
    }
    nnt_tensor_free(&lg);
    if (logits_req && t) nnt_trace_drop_last_request(t); /* the caller's trace keeps only its own requests */
    free(work);
    free(next);
    free(picked);
    free(hidden);
    free(stopped);
    nnt_trace_free(own);
    nnt_session_free(s);
    return st;
}

nnt_status nnt_generate(nnt_model *m, nnt_trace *t, const int32_t *ids, const int32_t *mask, int batch, int seq,
                        const nnt_generate_opts *o, int32_t *out)
{
    return generate(m, t, ids, mask, batch, seq, o, NULL, out);
}

nnt_status nnt_generate_stage(nnt_model *m, nnt_trace *t, const int32_t *ids, const int32_t *mask, int batch, int seq,
                              const nnt_generate_opts *o, const nnt_stage_link *link, int32_t *out)
{
    if (!link) return NNT_ERR_INVALID_ARGUMENT;
    return generate(m, t, ids, mask, batch, seq, o, link, out);
}
