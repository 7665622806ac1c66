/* generate.c - generation on a session: greedy or sampled continuation (temperature, top-k,
 * top-p, seeded), rows stopping at stop tokens, under a trace whose requests apply at every step;
 * in one process or as one pipeline stage whose stream and tokens travel over a link. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

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

/* The arguments, checked before anything is allocated. */
static nnt_status check_generate(const nnt_model *m, const int32_t *mask, int batch, int seq, const nnt_generate_opts *o,
                                 const nnt_stage_link *link, nnt_trace *t, nnt_error *err)
{
    int L = m->info.num_layers;
    if (link && (link->struct_size < sizeof *link || !link->recv_hidden || !link->send_hidden || !link->share_tokens ||
                 link->first_layer < 0 || link->end_layer <= link->first_layer || link->end_layer > L))
        return nnt_err_set(err, NNT_ERR_INVALID_ARGUMENT,
                           "generate: the stage link needs its struct_size, its three functions and blocks "
                           "0 <= first_layer < end_layer <= %d (got %d, %d)", L, link->first_layer, link->end_layer);
    if (o->max_new_tokens < 0 || o->top_k < 0 || o->n_stop_ids < 0)
        return nnt_err_set(err, NNT_ERR_INVALID_ARGUMENT, "generate: max_new_tokens, top_k and n_stop_ids must be >= 0");
    if (o->n_stop_ids > 0 && !o->stop_ids)
        return nnt_err_set(err, NNT_ERR_INVALID_ARGUMENT, "generate: stop_ids is NULL but n_stop_ids is %d", o->n_stop_ids);
    if (!(o->temperature >= 0 && o->temperature <= NNT_FACTOR_MAX)) /* NaN too */
        return nnt_err_set(err, NNT_ERR_INVALID_ARGUMENT, "generate: temperature %g is not a number in 0..1e6 (0: greedy)",
                           o->temperature);
    if (!(o->top_p >= 0 && o->top_p < INFINITY)) /* NaN too; 0, as a zeroed struct holds it, is greedy's */
        return nnt_err_set(err, NNT_ERR_INVALID_ARGUMENT,
                           "generate: top_p %g is not a finite number >= 0 (1 and more: no nucleus filter)", o->top_p);
    if (o->max_new_tokens == 0) return NNT_OK;
    if (batch < 1 || seq < 1)
        return nnt_err_set(err, NNT_ERR_INVALID_ARGUMENT, "generate: needs batch, seq >= 1 (got %d, %d)", batch, seq);
    if (!t) return NNT_OK;
    /* every steering position must name a token some step processes */
    int *lens = calloc((size_t)batch, sizeof *lens);
    if (!lens) return nnt_err_set(err, NNT_ERR_OUT_OF_MEMORY, "no memory");
    for (int b = 0; b < batch; b++)
        for (int i = 0; i < seq; i++) lens[b] += mask ? mask[(int64_t)b * seq + i] != 0 : 1;
    nnt_status st = nnt_trace_check_positions(t, lens, batch, o->max_new_tokens, err);
    free(lens);
    return st;
}

/* A generation's working state. */
typedef struct gen_state {
    nnt_session *s;
    nnt_trace *own;             /* generate's trace when the caller gives none */
    cand *work;                 /* [V] for sampling */
    int32_t *next, *picked;     /* [batch]: the tokens fed next, the tokens picked */
    int32_t *reported;          /* [batch]: a step's tokens as the progress handler sees them */
    float *hidden;              /* a stage's streams in and out, or NULL */
    unsigned char *stopped;     /* [batch]: rows that emitted a stop id */
    int n_stopped;
    uint64_t rng;
} gen_state;

static void gen_free(gen_state *g)
{
    free(g->work);
    free(g->next);
    free(g->picked);
    free(g->reported);
    free(g->hidden);
    free(g->stopped);
    nnt_trace_free(g->own);
    nnt_session_free(g->s);
}

static nnt_status gen_init(nnt_model *m, int batch, int seq, const nnt_generate_opts *o, const nnt_stage_link *link,
                           nnt_trace *t, gen_state *g, nnt_error *err)
{
    memset(g, 0, sizeof *g);
    g->rng = o->seed;
    nnt_status st = nnt_session_new(m, batch, seq + o->max_new_tokens, &g->s);
    if (st != NNT_OK) return st;
    g->s->keep_results = 0;
    if (!t && (st = nnt_trace_new(m, &g->own)) != NNT_OK) return st; /* for the readout of each step */
    size_t V = (size_t)m->info.vocab_size;
    /* a stage's streams: the prompt's in and out, [batch, seq, streams, hidden] each */
    size_t hn = link ? 2 * (size_t)batch * (size_t)seq * (size_t)(m->info.num_streams > 0 ? m->info.num_streams : 1) *
                           (size_t)m->info.hidden_size : 0;
    g->work = malloc(V * sizeof *g->work);
    g->next = malloc((size_t)batch * sizeof *g->next);
    g->picked = malloc((size_t)batch * sizeof *g->picked);
    g->reported = malloc((size_t)batch * sizeof *g->reported);
    g->hidden = hn ? malloc(hn * sizeof *g->hidden) : NULL;
    g->stopped = calloc((size_t)batch, 1);
    if (!g->work || !g->next || !g->picked || !g->reported || !g->stopped || (hn && !g->hidden))
        return nnt_err_set(err, NNT_ERR_OUT_OF_MEMORY, "no memory");
    return NNT_OK;
}

/* Step `step`'s picked tokens into out and next; stop ids end their rows. */
static nnt_status gen_record(gen_state *g, int batch, int V, int step, const nnt_generate_opts *o, int32_t *out,
                             nnt_error *err)
{
    for (int b = 0; b < batch; b++) {
        int id = g->picked[b];
        if (id < 0 || id >= V)
            return nnt_err_set(err, NNT_ERR_FORMAT, "generate: step %d gave row %d the token %d, outside the vocabulary "
                               "[0, %d)", step, b, id, V);
        int32_t *slot = &out[(int64_t)b * o->max_new_tokens + step];
        if (g->stopped[b]) { /* fed its stop id again (next[b] unchanged) */
            *slot = NNT_TOKEN_STOPPED;
            continue;
        }
        g->next[b] = *slot = id;
        for (int k = 0; k < o->n_stop_ids; k++)
            if (id == o->stop_ids[k]) {
                g->stopped[b] = 1;
                g->n_stopped++;
                break;
            }
    }
    if (g->n_stopped == batch) /* every row is done: the remaining slots */
        for (int b = 0; b < batch; b++)
            for (int i = step + 1; i < o->max_new_tokens; i++) out[(int64_t)b * o->max_new_tokens + i] = NNT_TOKEN_STOPPED;
    return NNT_OK;
}

/* One step: the forward, the last stage's pick from its logits, the tokens shared over the link. */
static nnt_status gen_step(gen_state *g, nnt_trace *tr, const int32_t *ids, const int32_t *mask, int seq, int step,
                           const nnt_generate_opts *o, const nnt_stage_link *link, int last_stage, nnt_tensor *lg,
                           int32_t *out, nnt_error *err)
{
    int batch = g->s->batch, V = g->s->m->info.vocab_size;
    nnt_status st = step == 0 ? step_forward(g->s, tr, ids, mask, seq, link, g->hidden, err)
                              : step_forward(g->s, tr, g->next, NULL, 1, link, g->hidden, err);
    if (st != NNT_OK) return st;
    if (last_stage && !nnt_trace_take_last_result(tr, lg))
        return nnt_err_set(err, NNT_ERR_INTERNAL, "generate: no logits were saved at step %d", step);
    /* a stopped row still draws, so the other rows' samples do not depend on it */
    for (int b = 0; last_stage && b < batch; b++) {
        int64_t T = lg->shape[1];
        g->picked[b] = pick_token((const float *)lg->data + ((int64_t)b * T + T - 1) * V, V, o, &g->rng, g->work);
    }
    if (link) {
        nnt_error lerr = {0};
        if ((st = link->share_tokens(link->ctx, g->picked, batch, last_stage, &lerr)) != NNT_OK) {
            *err = lerr;
            return st;
        }
    }
    if ((st = gen_record(g, batch, V, step, o, out, err)) != NNT_OK) return st;
    for (int b = 0; b < batch; b++) g->reported[b] = out[(int64_t)b * o->max_new_tokens + step];
    nnt_progress p = {.struct_size = sizeof p, .kind = NNT_PROGRESS_TOKENS, .layer = -1, .step = step,
                      .batch = batch, .tokens = g->reported};
    if (!nnt_progress_report(g->s->m->rt, &p)) return NNT_OK;
    char where[64];
    snprintf(where, sizeof where, "generation step %d", step);
    return nnt_progress_stopped(err, where);
}

static nnt_status generate(nnt_model *m, nnt_trace *t, const int32_t *ids, const int32_t *mask, int batch, int seq,
                           const nnt_generate_opts *o, const nnt_stage_link *link, int32_t *out)
{
    if (!m || !ids || !o || !out) return NNT_ERR_INVALID_ARGUMENT;
    nnt_error *err = &m->rt->err;
    nnt_err_clear(err);
    nnt_status st = check_generate(m, mask, batch, seq, o, link, t, err);
    if (st != NNT_OK || o->max_new_tokens == 0) return st;
    gen_state g;
    st = gen_init(m, batch, seq, o, link, t, &g, err);
    nnt_trace *tr = t ? t : g.own;
    /* each step's logits come from a request of generate's own, added after the caller's (so
     * their edits of logits count); its results are taken out of the trace at every step. Only
     * the last stage computes logits, and picks the tokens every stage is then given. The save
     * reads the last position only, so a prompt's lm_head runs there alone. */
    int last_stage = !link || link->end_layer == m->info.num_layers;
    if (st == NNT_OK && last_stage) st = nnt_trace_save_every_step(tr, "logits[:, -1:]");
    int logits_req = st == NNT_OK && last_stage;
    nnt_tensor lg = {0};
    for (int step = 0; st == NNT_OK && step < o->max_new_tokens && g.n_stopped < batch; step++)
        st = gen_step(&g, tr, ids, mask, seq, step, o, link, last_stage, &lg, out, err);
    nnt_tensor_free(&lg);
    if (logits_req && t) nnt_trace_drop_last_request(t); /* the caller's trace keeps only its own requests */
    gen_free(&g);
    return st;
}

static nnt_status generate_held(nnt_model *m, nnt_trace *t, const int32_t *ids, const int32_t *mask, int batch, int seq,
                                const nnt_generate_opts *o, int32_t *out)
{
    return generate(m, t, ids, mask, batch, seq, o, NULL, out);
}

nnt_status nnt_generate(nnt_model *m, nnt_trace *t, const int32_t *ids, const int32_t *mask, int batch, int seq,
                        const nnt_generate_opts *o, int32_t *out)
{
    NNT_GUARDED((m ? m->rt : NULL), "nnt_generate", generate_held(m, t, ids, mask, batch, seq, o, out));
}

static nnt_status generate_stage_held(nnt_model *m, nnt_trace *t, const int32_t *ids, const int32_t *mask, int batch,
                                      int seq, const nnt_generate_opts *o, const nnt_stage_link *link, int32_t *out)
{
    if (!link) return NNT_ERR_INVALID_ARGUMENT;
    return generate(m, t, ids, mask, batch, seq, o, link, out);
}

nnt_status nnt_generate_stage(nnt_model *m, nnt_trace *t, const int32_t *ids, const int32_t *mask, int batch, int seq,
                              const nnt_generate_opts *o, const nnt_stage_link *link, int32_t *out)
{
    NNT_GUARDED((m ? m->rt : NULL), "nnt_generate_stage",
                generate_stage_held(m, t, ids, mask, batch, seq, o, link, out));
}
