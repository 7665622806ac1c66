/* attribute.c - attribution patching (nnt_methods.h): the clean forward saving the value of
 * every covered block, the corrupted forward with the metric's gradient at each of them (or,
 * for integrated gradients, N forwards on the straight path between the prompts' token
 * embeddings), and the estimate (a_clean - a_corrupt) . gradient per block, position and unit. */
#include <stdlib.h>
#include <string.h>

#include "internal.h"

#define IG_STEPS_MAX 1024

void nnt_attribute_result_free(nnt_attribute_result *r)
{
    if (!r) return;
    free(r->blocks);
    free(r->grid);
    memset(r, 0, sizeof *r);
}

/* The metric as the word nnt_trace_metric reads. */
static void metric_word(const nnt_metric *m, char *buf, size_t n)
{
    if (m->kind == NNT_METRIC_LOGIT_DIFF) snprintf(buf, n, "logit-diff:%d,%d", m->a, m->b);
    else snprintf(buf, n, "%s:%d", m->kind == NNT_METRIC_PROB ? "prob" : "logprob", m->a);
}

/* A forward of ids [1, seq] saving every covered block's value (and the token embeddings when
 * keep_embeddings), the metric read at the last position into *metric. */
static nnt_status run_values(nnt_model *m, const nnt_attribute_spec *s, const nnt_attribute_result *out,
                             const int32_t *ids, int keep_embeddings, nnt_trace **t, double *metric)
{
    char p[256];
    nnt_status st = nnt_trace_new(m, t);
    if (st == NNT_OK) st = nnt_trace_save(*t, "logits[:, -1]");
    if (st == NNT_OK && keep_embeddings) st = nnt_trace_save(*t, "token_embeddings");
    for (int i = 0; i < out->n_blocks && st == NNT_OK; i++) {
        nnt_sweep_block_path(s->value, out->blocks[i], p, sizeof p);
        st = nnt_trace_save(*t, p);
    }
    if (st == NNT_OK) st = nnt_trace_run(*t, ids, NULL, 1, s->seq);
    const nnt_tensor *lg = st == NNT_OK ? nnt_trace_get(*t, "logits") : NULL;
    if (st == NNT_OK && !lg) st = nnt_err_set(&m->rt->err, NNT_ERR_STATE, "the forward saved no logits");
    if (st == NNT_OK) *metric = nnt_metric_eval(&s->metric, lg, 0);
    return st;
}

/* One backward: the corrupted prompt (embeddings NULL) or its forward with the token embeddings
 * set to `embeddings`; the gradient of every covered block's value added into grads[i]. */
static nnt_status run_gradient(nnt_model *m, const nnt_attribute_spec *s, const nnt_attribute_result *out,
                               const nnt_tensor *embeddings, nnt_tensor *grads)
{
    char p[256], word[64];
    metric_word(&s->metric, word, sizeof word);
    nnt_trace *t = NULL;
    nnt_status st = nnt_trace_new(m, &t);
    if (st == NNT_OK && embeddings) st = nnt_trace_set(t, "token_embeddings", embeddings);
    for (int i = 0; i < out->n_blocks && st == NNT_OK; i++) {
        nnt_sweep_block_path(s->value, out->blocks[i], p, sizeof p);
        st = nnt_trace_grad(t, p);
    }
    if (st == NNT_OK) st = nnt_trace_metric(t, word, NULL, 0);
    if (st == NNT_OK) st = nnt_trace_run(t, s->corrupt, NULL, 1, s->seq);
    for (int i = 0; i < out->n_blocks && st == NNT_OK; i++) {
        char key[270];
        nnt_sweep_block_path(s->value, out->blocks[i], p, sizeof p);
        snprintf(key, sizeof key, "grad:%s", p);
        const nnt_tensor *g = nnt_trace_get(t, key);
        if (!g) {
            st = nnt_err_set(&m->rt->err, NNT_ERR_STATE, "the backward gave no gradient of %s", p);
            break;
        }
        if (!grads[i].data) {
            st = nnt_tensor_alloc(&grads[i], NNT_F32, g->ndim, g->shape);
            if (st != NNT_OK) st = nnt_err_set(&m->rt->err, NNT_ERR_OUT_OF_MEMORY, "no memory");
            else memset(grads[i].data, 0, nnt_tensor_nbytes(g));
        }
        float *acc = grads[i].data;
        for (int64_t k = 0, n = nnt_tensor_numel(g); st == NNT_OK && k < n; k++) acc[k] += ((const float *)g->data)[k];
    }
    nnt_trace_free(t);
    return st;
}

/* The mean gradient over the N points of the straight path between the token embeddings. */
static nnt_status integrated(nnt_model *m, const nnt_attribute_spec *s, nnt_attribute_result *out,
                             const nnt_tensor *e_clean, const nnt_tensor *e_corrupt, nnt_tensor *grads)
{
    nnt_tensor e;
    if (nnt_tensor_alloc(&e, NNT_F32, e_corrupt->ndim, e_corrupt->shape) != NNT_OK)
        return nnt_err_set(&m->rt->err, NNT_ERR_OUT_OF_MEMORY, "no memory");
    nnt_status st = NNT_OK;
    int64_t n = nnt_tensor_numel(&e);
    for (int k = 1; k <= s->ig_steps && st == NNT_OK; k++) {
        double alpha = (double)k / s->ig_steps;
        for (int64_t i = 0; i < n; i++) {
            double a = nnt_tensor_get_f64(e_corrupt, i), b = nnt_tensor_get_f64(e_clean, i);
            ((float *)e.data)[i] = (float)(a + alpha * (b - a));
        }
        st = run_gradient(m, s, out, &e, grads);
        out->forwards++;
        out->backwards++;
    }
    for (int i = 0; i < out->n_blocks && st == NNT_OK; i++)
        for (int64_t k = 0, ng = nnt_tensor_numel(&grads[i]); k < ng; k++) ((float *)grads[i].data)[k] /= s->ig_steps;
    nnt_tensor_free(&e);
    return st;
}

/* grid[b, p, u] = sum over the entries of unit u at position p of (clean - corrupt) * gradient. */
static nnt_status estimate(nnt_model *m, const nnt_attribute_spec *s, nnt_attribute_result *out, nnt_trace *clean,
                           nnt_trace *corrupt, const nnt_tensor *grads)
{
    char p[256];
    for (int i = 0; i < out->n_blocks; i++) {
        nnt_sweep_block_path(s->value, out->blocks[i], p, sizeof p);
        const nnt_tensor *a = nnt_trace_get(clean, p), *b = nnt_trace_get(corrupt, p), *g = &grads[i];
        if (!a || !b || nnt_tensor_numel(a) != nnt_tensor_numel(g) || nnt_tensor_numel(b) != nnt_tensor_numel(g))
            return nnt_err_set(&m->rt->err, NNT_ERR_STATE, "%s: the clean or corrupted run holds no value like its gradient",
                               p);
        int64_t U = out->n_units, inner = nnt_tensor_numel(g) / ((int64_t)s->seq * U);
        for (int64_t q = 0; q < s->seq; q++)
            for (int64_t u = 0; u < U; u++) {
                double sum = 0.0;
                for (int64_t j = 0; j < inner; j++) {
                    int64_t at = (q * U + u) * inner + j;
                    sum += (nnt_tensor_get_f64(a, at) - nnt_tensor_get_f64(b, at)) * ((const float *)g->data)[at];
                }
                out->grid[((int64_t)i * s->seq + q) * U + u] = sum;
            }
    }
    return NNT_OK;
}

/* The spec's checks; the unit axis of the value into out. Errors name the field. */
static nnt_status check_spec(nnt_model *m, const nnt_attribute_spec *s, nnt_attribute_result *out)
{
    nnt_error *err = &m->rt->err;
    if (!s->value || !s->clean || !s->corrupt || s->seq < 1)
        return nnt_err_set(err, NNT_ERR_INVALID_ARGUMENT, "attribute: the spec needs a value path, both prompts and seq >= 1");
    if (s->ig_steps < 0 || s->ig_steps > IG_STEPS_MAX)
        return nnt_err_set(err, NNT_ERR_INVALID_ARGUMENT, "ig_steps: %d; expected 0 (AtP) or 1..%d", s->ig_steps,
                           IG_STEPS_MAX);
    int64_t V = nnt_model_get_info(m)->vocab_size;
    int32_t ids[2] = {s->metric.a, s->metric.kind == NNT_METRIC_LOGIT_DIFF ? s->metric.b : 0};
    for (int k = 0; k < 2; k++)
        if (ids[k] < 0 || ids[k] >= V)
            return nnt_err_set(err, NNT_ERR_INVALID_ARGUMENT, "metric: token %d is outside the model's vocabulary "
                               "(vocab_size %lld)", ids[k], (long long)V);
    nnt_status st = nnt_sweep_blocks(m, "attribute", s->value, s->seq, 0, &out->blocks, &out->n_blocks, err);
    if (st != NNT_OK) return nnt_err_prefix(err, "value"), st;
    char p[256];
    nnt_sweep_block_path(s->value, out->blocks[0], p, sizeof p);
    nnt_value_info vi;
    nnt_call_dims d = {.batch = 1, .seq = s->seq, .past = 0};
    if ((st = nnt_model_value_info(m, p, &d, &vi)) != NNT_OK) return nnt_err_prefix(err, "value"), st;
    out->n_units = vi.ndim == 4 ? (int)vi.shape[2] : 1; /* heads or expert slots */
    out->n_positions = s->seq;
    out->grid = calloc((size_t)out->n_blocks * (size_t)s->seq * (size_t)out->n_units, sizeof *out->grid);
    return out->grid ? NNT_OK : nnt_err_set(err, NNT_ERR_OUT_OF_MEMORY, "no memory");
}

static nnt_status attribute_held(nnt_model *m, const nnt_attribute_spec *s, nnt_attribute_result *out)
{
    if (!m || !s || !out) return NNT_ERR_INVALID_ARGUMENT;
    memset(out, 0, sizeof *out);
    nnt_err_clear(&m->rt->err);
    nnt_trace *clean = NULL, *corrupt = NULL;
    nnt_tensor *grads = NULL;
    nnt_status st = check_spec(m, s, out);
    if (st == NNT_OK) st = run_values(m, s, out, s->clean, s->ig_steps > 0, &clean, &out->clean_metric);
    if (st == NNT_OK) st = run_values(m, s, out, s->corrupt, s->ig_steps > 0, &corrupt, &out->corrupt_metric);
    if (st == NNT_OK) out->forwards = 2;
    if (st == NNT_OK && !(grads = calloc((size_t)out->n_blocks, sizeof *grads)))
        st = nnt_err_set(&m->rt->err, NNT_ERR_OUT_OF_MEMORY, "no memory");
    if (st == NNT_OK && s->ig_steps == 0) {
        st = run_gradient(m, s, out, NULL, grads);
        out->forwards++;
        out->backwards++;
    } else if (st == NNT_OK) {
        const nnt_tensor *ec = nnt_trace_get(clean, "token_embeddings"), *ek = nnt_trace_get(corrupt, "token_embeddings");
        st = ec && ek ? integrated(m, s, out, ec, ek, grads)
                      : nnt_err_set(&m->rt->err, NNT_ERR_STATE, "the forwards saved no token_embeddings");
    }
    if (st == NNT_OK) st = estimate(m, s, out, clean, corrupt, grads);
    for (int i = 0; grads && i < out->n_blocks; i++) nnt_tensor_free(&grads[i]);
    free(grads);
    nnt_trace_free(clean);
    nnt_trace_free(corrupt);
    if (st != NNT_OK) nnt_attribute_result_free(out);
    return st;
}

nnt_status nnt_attribute(nnt_model *m, const nnt_attribute_spec *s, nnt_attribute_result *out)
{
    NNT_GUARDED((m ? m->rt : NULL), "nnt_attribute", attribute_held(m, s, out));
}
