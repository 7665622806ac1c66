/* trace_backward.c - a trace's backward of one stage (the whole model, or blocks of it): the
 * checks before the forward, the forward recorded on the model's tape, the built-in scalar and
 * its cotangent on the logits, the reverse pass, and the gradients saved as "grad:PATH" beside
 * "metric". */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "trace_internal.h"
#include "grad/tape.h"

static int cell_tag(int layer, nnt_value_id slot)
{
    return (layer + 1) * NNT_SLOT_COUNT + (int)slot;
}

/* Softmax of row x[V] into p (double), returning log(sum exp(x - max)) + max. */
static double softmax_row(const float *x, int64_t V, double *p)
{
    double mx = -INFINITY, sum = 0.0;
    for (int64_t v = 0; v < V; v++) mx = x[v] > mx ? x[v] : mx;
    for (int64_t v = 0; v < V; v++) sum += (p[v] = exp((double)x[v] - mx));
    for (int64_t v = 0; v < V; v++) p[v] /= sum;
    return mx + log(sum);
}

/* The metric of one (row, position) of the logits x[V] and its gradient added into g[V]. */
static double metric_at(const trace_metric *m, const float *x, int64_t V, double *p, float *g)
{
    if (m->kind == TM_LOGIT_DIFF) {
        g[m->a] += 1.0f;
        g[m->b] -= 1.0f;
        return (double)x[m->a] - (double)x[m->b];
    }
    double lse = softmax_row(x, V, p);
    if (m->kind == TM_LOGPROB) { /* d log p_a / dx_v = [v == a] - p_v */
        for (int64_t v = 0; v < V; v++) g[v] += (float)((v == m->a) - p[v]);
        return (double)x[m->a] - lse;
    }
    double pa = p[m->a]; /* d p_a / dx_v = p_a ([v == a] - p_v) */
    for (int64_t v = 0; v < V; v++) g[v] += (float)(pa * ((v == m->a) - p[v]));
    return pa;
}

/* The language-model loss over logits [B, T, V]: the mean over the pairs (b, t) with both t and
 * t + 1 real of -log softmax(logits[b, t])[ids[b, t + 1]]; its gradient into g. */
static nnt_status loss(const nnt_tensor *lg, const int32_t *ids, const int32_t *mask, double *p, float *g,
                       double *out, nnt_error *err)
{
    int64_t B = lg->shape[0], T = lg->shape[1], V = lg->shape[2], pairs = 0;
    for (int64_t b = 0; b < B; b++)
        for (int64_t s = 0; s + 1 < T; s++) pairs += !mask || (mask[b * T + s] && mask[b * T + s + 1]);
    if (pairs == 0)
        return nnt_err_set(err, NNT_ERR_INVALID_ARGUMENT,
                           "metric 'loss': no row has two real tokens in a row, so there is no next token to predict");
    double total = 0.0;
    for (int64_t b = 0; b < B; b++)
        for (int64_t s = 0; s + 1 < T; s++) {
            if (mask && !(mask[b * T + s] && mask[b * T + s + 1])) continue;
            const float *x = (const float *)lg->data + (b * T + s) * V;
            float *gr = g + (b * T + s) * V;
            int32_t y = ids[b * T + s + 1];
            total += softmax_row(x, V, p) - (double)x[y];
            for (int64_t v = 0; v < V; v++) gr[v] += (float)((p[v] - (v == y)) / (double)pairs);
        }
    *out = total / (double)pairs;
    return NNT_OK;
}

/* The row of metric_logits holding position s of the call: s itself, or its index among the
 * positions the readout was computed at (t->metric_rows); -1 when it was not computed. */
static int64_t metric_row(const nnt_trace *t, int64_t s)
{
    if (!t->metric_rows) return s;
    int64_t lo = 0, hi = t->n_metric_rows; /* binary search: the positions ascend */
    while (lo < hi) {
        int64_t mid = (lo + hi) / 2;
        if (t->metric_rows[mid] < s) lo = mid + 1;
        else hi = mid;
    }
    return lo < t->n_metric_rows && t->metric_rows[lo] == s ? lo : -1;
}

/* The metric's value and its cotangent on the logits (g shaped as metric_logits, [B, T, V] or
 * [B, K, V] at the K positions of metric_rows; zeroed by the caller). */
static nnt_status metric_eval(nnt_trace *t, const int32_t *ids, const int32_t *mask, float *g, double *out)
{
    const trace_metric *m = &t->metric;
    const nnt_tensor *lg = &t->metric_logits;
    nnt_error *err = &t->m->rt->err;
    int64_t B = lg->shape[0], K = lg->shape[1], V = lg->shape[2];
    int64_t T = t->metric_rows ? t->dims.seq : K; /* the call's tokens */
    if (t->metric_rows && m->kind == TM_LOSS)
        return nnt_err_set(err, NNT_ERR_INTERNAL, "metric 'loss': the logits were computed at %lld of %lld positions",
                           (long long)K, (long long)T);
    if (m->kind != TM_LOSS && (m->a >= V || m->b >= V))
        return nnt_err_set(err, NNT_ERR_INVALID_ARGUMENT, "metric '%s': token id %d is outside the vocabulary [0, %lld)",
                           m->text, m->a >= V ? m->a : m->b, (long long)V);
    double *p = malloc((size_t)V * sizeof *p);
    if (!p) return nnt_err_set(err, NNT_ERR_OUT_OF_MEMORY, "no memory");
    nnt_status st = NNT_OK;
    if (m->kind == TM_LOSS) {
        st = loss(lg, ids, mask, p, g, out, err);
    } else {
        int last = -1, n = m->n_positions ? m->n_positions : 1;
        const int *pos = m->n_positions ? m->positions : &last;
        double total = 0.0;
        for (int k = 0; k < n && st == NNT_OK; k++) {
            int rows = 0;
            for (int64_t b = 0; b < B; b++) {
                int64_t len = 0;
                for (int64_t s = 0; s < T; s++) len += !mask || mask[b * T + s];
                /* a row's p-th real token (left padding first), or p from its end */
                int64_t s = pos[k] >= 0 ? T - len + pos[k] : T + pos[k];
                if (s < T - len || s >= T) continue;
                int64_t row = metric_row(t, s);
                if (row < 0) {
                    st = nnt_err_set(err, NNT_ERR_INTERNAL, "metric '%s': position %lld's logits were not computed",
                                     m->text, (long long)s);
                    break;
                }
                int64_t at = (b * K + row) * V;
                total += metric_at(m, (const float *)lg->data + at, V, p, g + at);
                rows++;
            }
            if (st == NNT_OK && !rows)
                st = nnt_err_set(err, NNT_ERR_INVALID_ARGUMENT,
                                 "metric '%s': no row has position %d (rows of up to %lld real tokens; negative counts "
                                 "from the end)", m->text, pos[k], (long long)T);
        }
        *out = total;
    }
    free(p);
    return st;
}

nnt_status nnt_trace_grad_check(nnt_trace *t, int batch, int seq)
{
    nnt_error *err = &t->m->rt->err;
    int scalar = t->metric.kind != TM_NONE, grads = 0;
    nnt_call_dims dims = {.batch = batch, .seq = seq, .past = 0};
    for (int i = 0; i < t->n_reqs; i++) {
        const request *r = &t->reqs[i];
        grads += r->kind == REQ_GRAD;
        if (r->kind != REQ_COTANGENT || r->metric) continue;
        scalar = 1;
        nnt_value_info vi;
        nnt_status st = nnt_model_slot_info(t->m, r->path.layer, r->path.slot, &dims, &vi, err);
        if (st != NNT_OK) return st;
        if (!vi.served) continue;
        if (!nnt_shape_equal(vi.ndim, vi.shape, r->param.ndim, r->param.shape)) {
            char want[96], got[96];
            nnt_dims_str(vi.ndim, vi.shape, want, sizeof want);
            nnt_shape_str(&r->param, got, sizeof got);
            return nnt_err_set(err, NNT_ERR_SHAPE, "cotangent '%s' is %s; the value is %s in this call (batch %d, seq %d)",
                               r->text, got, want, batch, seq);
        }
    }
    if (!scalar)
        return nnt_err_set(err, NNT_ERR_INVALID_ARGUMENT,
                           "a gradient request needs a scalar to differentiate: a metric (nnt_trace_metric: "
                           "logit-diff:A,B, prob:T, logprob:T, loss) or a cotangent on a value (nnt_trace_cotangent)");
    if (!grads)
        return nnt_err_set(err, NNT_ERR_INVALID_ARGUMENT,
                           "the trace has a metric or cotangent but asks for no gradient (nnt_trace_grad)");
    return NNT_OK;
}

/* The seeds of a stage's reverse pass: the metric's cotangent on the logits (the stage holding
 * them), the caller's cotangents on values the stage holds, the cotangent of the stream leaving
 * the stage (d_out, NULL: none). */
static nnt_status make_seeds(nnt_trace *t, const int32_t *ids, const int32_t *mask, int first, int end,
                             const float *d_out, nnt_tape_seed **seeds, int *n, float **metric_g, double *metric)
{
    nnt_error *err = &t->m->rt->err;
    int L = t->m->info.num_layers;
    *seeds = calloc((size_t)t->n_reqs + 2, sizeof **seeds);
    if (!*seeds) return nnt_err_set(err, NNT_ERR_OUT_OF_MEMORY, "no memory");
    *n = 0;
    nnt_status st = NNT_OK;
    if (t->metric.kind != TM_NONE && end == L) {
        if (!t->metric_logits.data)
            return nnt_err_set(err, NNT_ERR_PLUGIN, "family '%s' emitted no logits for the metric",
                               nnt_model_family(t->m));
        *metric_g = calloc((size_t)nnt_tensor_numel(&t->metric_logits), sizeof **metric_g);
        if (!*metric_g) return nnt_err_set(err, NNT_ERR_OUT_OF_MEMORY, "no memory");
        st = metric_eval(t, ids, mask, *metric_g, metric);
        (*seeds)[(*n)++] = (nnt_tape_seed){.tag = cell_tag(-1, NNT_VALUE_LOGITS), .cotangent = *metric_g};
    }
    for (int i = 0; i < t->n_reqs && st == NNT_OK; i++) {
        const request *r = &t->reqs[i];
        if (r->kind != REQ_COTANGENT || r->metric) continue;
        if (!nnt_stage_holds(L, first, end, r->path.slot, r->path.layer)) continue; /* another stage's */
        const cell *c = nnt_trace_cell(t, r->path.layer, r->path.slot);
        if (!c || !c->marked)
            return nnt_err_set(err, NNT_ERR_NOT_SERVED, "cotangent '%s': the value was not emitted in this forward",
                               r->text);
        (*seeds)[(*n)++] = (nnt_tape_seed){.tag = cell_tag(r->path.layer, r->path.slot), .cotangent = r->param.data};
    }
    if (st == NNT_OK && d_out) (*seeds)[(*n)++] = (nnt_tape_seed){.tag = TRACE_TAG_STREAM_OUT, .cotangent = d_out};
    return st;
}

/* After a stage's recorded forward: the reverse pass from the seeds to every marked gradient cell
 * (and to the stream entering the stage, into d_in when not NULL), and the results. */
static nnt_status backward(nnt_trace *t, const int32_t *ids, const int32_t *mask, int first, int end,
                           const float *d_out, float *d_in)
{
    nnt_error *err = &t->m->rt->err;
    nnt_tape_seed *seeds = NULL;
    nnt_tape_grad *grads = calloc((size_t)t->n_cells + 2, sizeof *grads);
    nnt_tensor *gt = calloc((size_t)t->n_cells + 2, sizeof *gt);
    int *cell_of = calloc((size_t)t->n_cells + 2, sizeof *cell_of);
    float *metric_g = NULL;
    double metric = 0.0;
    int n_seeds = 0, n_grads = 0;
    nnt_status st = grads && gt && cell_of ? make_seeds(t, ids, mask, first, end, d_out, &seeds, &n_seeds, &metric_g,
                                                        &metric)
                                           : nnt_err_set(err, NNT_ERR_OUT_OF_MEMORY, "no memory");
    for (int ci = 0; st == NNT_OK && ci < t->n_cells; ci++) {
        const cell *c = &t->cells[ci];
        int wanted = 0;
        for (int i = 0; i < c->n; i++) wanted |= t->reqs[c->ids[i]].kind == REQ_GRAD;
        if (!wanted || !c->marked) continue;
        cell_of[n_grads] = ci;
        grads[n_grads] = (nnt_tape_grad){.tag = ci, .grad = &gt[n_grads]};
        n_grads++;
    }
    int n_cells_wanted = n_grads;
    if (st == NNT_OK && d_in) {
        cell_of[n_grads] = -1;
        grads[n_grads] = (nnt_tape_grad){.tag = TRACE_TAG_STREAM_IN, .grad = &gt[n_grads]};
        n_grads++;
    }
    if (st == NNT_OK) st = nnt_tape_backward(t->m->tape, seeds, n_seeds, grads, n_grads, err);
    nnt_run run = {.model = t->m, .trace = t, .err = err, .dims = t->dims, .current_request = -1};
    for (int k = 0; st == NNT_OK && k < n_cells_wanted; k++) {
        const cell *c = &t->cells[cell_of[k]];
        int layer = cell_of[k] / NNT_SLOT_COUNT - 1;
        nnt_value_id slot = (nnt_value_id)(cell_of[k] % NNT_SLOT_COUNT);
        for (int i = 0; i < c->n && st == NNT_OK; i++)
            if (t->reqs[c->ids[i]].kind == REQ_GRAD) st = nnt_trace_push_result(&run, c->ids[i], slot, layer, &gt[k]);
    }
    if (st == NNT_OK && d_in) memcpy(d_in, gt[n_cells_wanted].data, nnt_tensor_nbytes(&gt[n_cells_wanted]));
    if (st == NNT_OK && t->metric.kind != TM_NONE && end == t->m->info.num_layers) {
        float v = (float)metric;
        nnt_tensor mt = {.dtype = NNT_F32, .ndim = 0, .data = &v};
        st = nnt_trace_push_named(t, "metric", &mt, err);
    }
    for (int k = 0; k < n_grads; k++) nnt_tensor_free(&gt[k]);
    free(seeds);
    free(grads);
    free(gt);
    free(cell_of);
    free(metric_g);
    return st;
}

nnt_status nnt_trace_stage_backward(nnt_trace *t, const int32_t *ids, const int32_t *mask, int batch, int seq,
                                    int first, int end, const float *hidden_in, const float *d_hidden_out,
                                    float *d_hidden_in, size_t *kept)
{
    if (!t || !ids || batch <= 0 || seq <= 0) return NNT_ERR_INVALID_ARGUMENT;
    nnt_model *m = nnt_trace_model(t);
    nnt_error *err = &m->rt->err;
    int L = m->info.num_layers;
    if (first < 0 || end <= first || end > L || (first > 0) != (hidden_in != NULL) ||
        (end < L) != (d_hidden_out != NULL) || (first == 0 && d_hidden_in))
        return nnt_err_set(err, NNT_ERR_INVALID_ARGUMENT,
                           "stage backward of blocks [%d, %d) of %d: hidden_in is given exactly when the stage starts "
                           "after block 0, d_hidden_out exactly when it ends before the last block, d_hidden_in only "
                           "when a stream enters", first, end, L);
    int64_t S = m->info.num_streams > 0 ? m->info.num_streams : 1;
    size_t stream = (size_t)batch * (size_t)seq * (size_t)S * (size_t)m->info.hidden_size * sizeof(float);
    float *scratch = end < L ? malloc(stream) : NULL; /* the stream the stage writes again (unused) */
    if (end < L && !scratch) return nnt_err_set(err, NNT_ERR_OUT_OF_MEMORY, "no memory for a stage's stream");
    t->grad.stream_in_layer = first > 0 ? first : -1;
    t->grad.stream_out_layer = end < L ? end - 1 : -1;
    t->grad.stream_in_marked = t->grad.stream_out_marked = 0;
    nnt_stage_call sc = {first, end, hidden_in, scratch, 0};
    nnt_tape_record(m->tape, 1);
    nnt_status st = nnt_model_forward(m, t, NULL, ids, mask, batch, seq, first == 0 && end == L ? NULL : &sc, err);
    nnt_tape_record(m->tape, 0);
    if (kept) *kept = nnt_tape_kept_bytes(m->tape);
    if (st == NNT_OK && ((first > 0 && !t->grad.stream_in_marked) || (end < L && !t->grad.stream_out_marked)))
        st = nnt_err_set(err, NNT_ERR_UNSUPPORTED,
                         "family '%s' did not emit %s of block %d, where the stage's residual stream %s: the gradient "
                         "cannot pass between blocks one at a time",
                         nnt_model_family(m), first > 0 && !t->grad.stream_in_marked ? "layer_input" : "layer_output",
                         first > 0 && !t->grad.stream_in_marked ? first : end - 1,
                         first > 0 && !t->grad.stream_in_marked ? "enters" : "leaves");
    if (st == NNT_OK) st = backward(t, ids, mask, first, end, d_hidden_out, d_hidden_in);
    nnt_tape_clear(m->tape);
    nnt_tensor_free(&t->metric_logits);
    t->grad.stream_in_layer = t->grad.stream_out_layer = -1;
    free(scratch);
    return st;
}

