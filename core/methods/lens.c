/* lens.c - the logit lens (nnt_methods.h): every block's layer_output at chosen positions read
 * through the family's final norm and lm_head (nnterp's project_on_vocab), with the softmax over
 * the vocabulary, its most probable token and, when asked, the whole distribution. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

void nnt_lens_result_free(nnt_lens_result *r)
{
    if (!r) return;
    free(r->positions);
    free(r->top);
    free(r->top_prob);
    free(r->probs);
    memset(r, 0, sizeof *r);
}

/* The chosen tokens: for each, its row, its position (from the row's first real token) and its
 * column in the batch (left padding counted). */
typedef struct lens_pick {
    int n, width;
    int *row, *pos, *col, *per_row;
} lens_pick;

static void pick_free(lens_pick *k)
{
    free(k->row);
    free(k->pos);
    free(k->col);
    free(k->per_row);
}

/* positions [n] (words NNT_POS_PROMPT / NNT_POS_ALL: every token) against batch b. */
static nnt_status pick(const nnt_batch *b, const int *q, int nq, lens_pick *k, nnt_error *err)
{
    memset(k, 0, sizeof *k);
    int every = nq == 0, longest = 0;
    for (int r = 0; r < b->batch; r++) longest = b->lens[r] > longest ? b->lens[r] : longest;
    for (int i = 0; i < nq; i++) {
        if (q[i] == NNT_POS_GENERATED)
            return nnt_err_set(err, NNT_ERR_INDEX, "position 'generated' names tokens after the prompt; the lens runs "
                                                   "one forward over the prompt");
        if (q[i] == NNT_POS_PROMPT || q[i] == NNT_POS_ALL) {
            every = 1;
            continue;
        }
        if (q[i] >= longest || q[i] < -longest)
            return nnt_err_set(err, NNT_ERR_INDEX,
                               "position %d names no token: the longest row has %d tokens (positions 0..%d, or -%d..-1 "
                               "from the row's end)",
                               q[i], longest, longest - 1, longest);
    }
    size_t cap = (size_t)b->batch * (size_t)b->seq;
    k->row = malloc(cap * sizeof *k->row);
    k->pos = malloc(cap * sizeof *k->pos);
    k->col = malloc(cap * sizeof *k->col);
    k->per_row = calloc((size_t)b->batch, sizeof *k->per_row);
    if (!k->row || !k->pos || !k->col || !k->per_row) {
        pick_free(k);
        return nnt_err_set(err, NNT_ERR_OUT_OF_MEMORY, "no memory");
    }
    for (int r = 0; r < b->batch; r++) {
        int len = b->lens[r];
        for (int p = 0; p < len; p++) {
            int chosen = every;
            for (int i = 0; i < nq && !chosen; i++) chosen = q[i] >= 0 ? q[i] == p : len + q[i] == p;
            if (!chosen) continue;
            k->row[k->n] = r;
            k->pos[k->n] = p;
            k->col[k->n++] = b->seq - len + p;
            k->per_row[r]++;
        }
        k->width = k->per_row[r] > k->width ? k->per_row[r] : k->width;
    }
    return NNT_OK;
}

static nnt_status result_alloc(nnt_lens_result *out, const lens_pick *k, int B, int L, int64_t V, int keep,
                               nnt_error *err)
{
    size_t cells = (size_t)B * (size_t)L * (size_t)k->width;
    *out = (nnt_lens_result){.batch = B, .layers = L, .width = k->width, .vocab = V};
    out->positions = malloc(sizeof *out->positions * (size_t)B * (size_t)(k->width ? k->width : 1));
    out->top = calloc(cells ? cells : 1, sizeof *out->top);
    out->top_prob = calloc(cells ? cells : 1, sizeof *out->top_prob);
    if (keep) out->probs = calloc(cells ? cells * (size_t)V : 1, sizeof *out->probs);
    if (!out->positions || !out->top || !out->top_prob || (keep && !out->probs)) {
        nnt_lens_result_free(out);
        return nnt_err_set(err, NNT_ERR_OUT_OF_MEMORY, "lens: no memory for [%d, %d, %d] results%s", B, L, k->width,
                           keep ? " with the whole distribution" : "");
    }
    for (size_t i = 0; i < (size_t)B * (size_t)k->width; i++) out->positions[i] = -1;
    for (int i = 0, j = 0; i < k->n; i++) {
        j = i > 0 && k->row[i] == k->row[i - 1] ? j + 1 : 0; /* the column within its row */
        out->positions[(size_t)k->row[i] * k->width + j] = k->pos[i];
    }
    return NNT_OK;
}

/* In-place softmax of n entries, then the index of the largest. */
static int softmax_top(float *v, int64_t n)
{
    float mx = -INFINITY;
    int64_t top = 0;
    for (int64_t i = 0; i < n; i++)
        if (v[i] > mx) mx = v[i], top = i;
    double sum = 0;
    for (int64_t i = 0; i < n; i++) sum += (v[i] = expf(v[i] - mx));
    for (int64_t i = 0; i < n; i++) v[i] = (float)(v[i] / sum);
    return (int)top;
}

/* Block `layer`'s output x [B, T, ...] at the chosen tokens through the readout, into out. */
static nnt_status project_block(nnt_model *m, const nnt_tensor *x, const lens_pick *k, int layer, const nnt_batch *b,
                                nnt_lens_result *out)
{
    nnt_tensor sel = {0}, lg = {0};
    int64_t shape[NNT_MAX_DIMS] = {1, k->n};
    for (int d = 2; d < x->ndim; d++) shape[d] = x->shape[d];
    if (nnt_tensor_alloc(&sel, x->dtype, x->ndim, shape) != NNT_OK)
        return nnt_err_set(&m->rt->err, NNT_ERR_OUT_OF_MEMORY, "lens: no memory");
    size_t inner = (size_t)(nnt_tensor_numel(x) / ((int64_t)b->batch * b->seq)) * nnt_dtype_size(x->dtype);
    for (int i = 0; i < k->n; i++)
        memcpy((char *)sel.data + (size_t)i * inner, (const char *)x->data + ((size_t)k->row[i] * b->seq + k->col[i]) * inner,
               inner);
    nnt_status st = nnt_project_on_vocab(m, &sel, &lg);
    nnt_tensor_free(&sel);
    if (st != NNT_OK) return st;
    int64_t V = out->vocab;
    int W = out->width, L = out->layers;
    for (int i = 0, j = 0; i < k->n; i++) {
        j = i > 0 && k->row[i] == k->row[i - 1] ? j + 1 : 0;
        float *p = (float *)lg.data + (int64_t)i * V;
        int top = softmax_top(p, V);
        size_t cell = ((size_t)k->row[i] * L + layer) * W + j;
        out->top[cell] = top;
        out->top_prob[cell] = p[top];
        if (out->probs) memcpy(out->probs + cell * (size_t)V, p, sizeof(float) * (size_t)V);
    }
    nnt_tensor_free(&lg);
    return NNT_OK;
}

static nnt_status lens_read(nnt_model *m, const nnt_trace *t, const nnt_batch *b, const lens_pick *k,
                            nnt_lens_result *out)
{
    nnt_status st = NNT_OK;
    for (int layer = 0; layer < out->layers && st == NNT_OK; layer++) {
        char path[64];
        snprintf(path, sizeof path, "layers.%d.layer_output", layer);
        const nnt_tensor *x = nnt_trace_get(t, path);
        st = x ? project_block(m, x, k, layer, b, out) : nnt_err_set(&m->rt->err, NNT_ERR_STATE, "lens: %s is None", path);
    }
    return st;
}

static nnt_status lens_held(nnt_model *m, nnt_trace *t, const nnt_batch *b, const int *positions, int n_positions,
                            int keep_probs, nnt_pipeline *p, nnt_lens_result *out)
{
    if (!m || !t || !b || !out || (n_positions > 0 && !positions) || n_positions < 0) return NNT_ERR_INVALID_ARGUMENT;
    memset(out, 0, sizeof *out);
    nnt_error *err = &m->rt->err;
    lens_pick k;
    nnt_status st = pick(b, positions, n_positions, &k, err);
    if (st != NNT_OK) return st;
    st = nnt_trace_save(t, "layers.*.layer_output");
    int root = nnt_pipeline_size(p) - 1; /* the last stage holds the readout */
    if (st == NNT_OK)
        st = p ? nnt_pipeline_trace(p, t, b->ids, b->mask, b->batch, b->seq, root)
               : nnt_trace_run(t, b->ids, b->mask, b->batch, b->seq);
    if (st == NNT_OK && nnt_pipeline_rank(p) == root) {
        const nnt_model_info *mi = nnt_model_get_info(m);
        st = result_alloc(out, &k, b->batch, mi->num_layers, mi->vocab_size, keep_probs, err);
        if (st == NNT_OK) st = lens_read(m, t, b, &k, out);
        if (st != NNT_OK) nnt_lens_result_free(out);
    }
    pick_free(&k);
    return st;
}

nnt_status nnt_lens(nnt_model *m, nnt_trace *t, const nnt_batch *b, const int *positions, int n_positions,
                    int keep_probs, nnt_pipeline *p, nnt_lens_result *out)
{
    NNT_GUARDED((m ? m->rt : NULL), "nnt_lens", lens_held(m, t, b, positions, n_positions, keep_probs, p, out));
}
