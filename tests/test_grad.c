/* test_grad.c - gradient requests of a trace against torch autograd: for each fixture, the
 * gradient of three metrics (logit-diff:11,29, logprob:7 and the language-model loss) with
 * respect to every value tests/fixtures/make_grad_fixtures.py stored (its grad_reference
 * files: transformers' float32 model, values retained with hooks, torch 2.15 / transformers 5.24),
 * MiniMax-M2, MiMo and Kimi-Linear, within 1e-4 of the reference's largest magnitude; padding's gradient exactly 0; the built-in
 * metric against the same scalar handed in as a cotangent on the logits; nnt_attribute's AtP grid on
 * every fixture (DeepSeek-V4 too) against the estimate from torch's gradient; an edited forward
 * against central differences of nnt's own forward; and the refusals. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/internal.h"
#include "test_util.h"

#define GRAD_TOL 1e-4

static const char *const METRICS[] = {"logit-diff:11,29", "logprob:7", "loss"};

/* A fixture: its folder, the reference whose prompts the gradients were taken on, the gradients. */
typedef struct grad_fixture {
    const char *dir, *reference, *grads;
} grad_fixture;

static const grad_fixture FIXTURES[] = {
    {"minimax_m2/fp32", "minimax_m2/fp32", "minimax_m2/fp32/grad_reference.safetensors"},
    {"minimax_m2/bf16", "minimax_m2/bf16", "minimax_m2/bf16/grad_reference.safetensors"},
    {"minimax_m2/fp8", "minimax_m2/fp8", "minimax_m2/fp8/grad_reference.safetensors"},
    {"mimo_v2_flash/fp32", "mimo_v2_flash/fp32", "mimo_v2_flash/fp32/grad_reference.safetensors"},
    {"mimo_v2_flash/bf16", "mimo_v2_flash/bf16", "mimo_v2_flash/bf16/grad_reference.safetensors"},
    {"mimo_v2_flash/fp8", "mimo_v2_flash/fp8", "mimo_v2_flash/fp8/grad_reference.safetensors"},
    {"mimo_v2_flash/fp8_per_head", "mimo_v2_flash/fp8_per_head", "mimo_v2_flash/fp8_per_head/grad_reference.safetensors"},
    {"mimo_v2/fp4", "mimo_v2/fp4", "mimo_v2/fp4/grad_reference.safetensors"},
    {"kimi_linear/fp32", "kimi_linear/fp32", "kimi_linear/fp32/grad_reference.safetensors"},
    {"kimi_linear/bf16", "kimi_linear/bf16", "kimi_linear/bf16/grad_reference.safetensors"},
};

static int ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && strcmp(s + n - k, suffix) == 0;
}

/* The worst |a - b| over the entries where sel (NULL: all) is set, and the largest |b| there. */
static void max_diff(const nnt_tensor *a, const nnt_tensor *b, const unsigned char *sel, double *worst, double *scale)
{
    *worst = *scale = 0;
    for (int64_t i = 0, n = nnt_tensor_numel(b); i < n; i++) {
        if (sel && !sel[i]) continue;
        double x = nnt_tensor_get_f64(a, i), y = nnt_tensor_get_f64(b, i);
        *scale = fmax(*scale, fabs(y));
        *worst = fmax(*worst, fabs(x - y));
    }
}

/* The value path of a gradient key "<metric>/grad:<path>". */
static const char *key_path(const char *key)
{
    const char *g = strstr(key, "/grad:");
    return g ? g + 6 : NULL;
}

/* Compares nnt's gradient of one value with the reference's: expert slots aligned by the
 * reference's expert_indices, attention probabilities at the pairs the forward attends (torch
 * gives masked pairs dO . v), recurrent states at real tokens, everything else entry by entry.
 * Returns the relative error. */
static double compare(const t_ref *fwd, const nnt_trace *t, const char *path, const nnt_tensor *want)
{
    char key[256];
    snprintf(key, sizeof key, "grad:%s", path);
    const nnt_tensor *got = nnt_trace_get(t, key);
    if (!got || !nnt_shape_equal(got->ndim, got->shape, want->ndim, want->shape)) {
        fprintf(stderr, "\n  %s: %s missing or of another shape\n", fwd->path, key);
        return INFINITY;
    }
    double worst, scale;
    if (ends_with(path, ".expert_weights") || ends_with(path, ".expert_outputs")) {
        char base[200], ki[220];
        snprintf(base, sizeof base, "%s", path);
        *strrchr(base, '.') = '\0';
        snprintf(ki, sizeof ki, "%s.expert_indices", base);
        nnt_tensor ri;
        const nnt_tensor *gi = nnt_trace_get(t, ki);
        if (!gi || t_ref_get(fwd, ki, &ri) != 0) return INFINITY;
        int64_t K = ri.shape[2], inner = nnt_tensor_numel(want) / ((int64_t)fwd->batch * fwd->seq * K);
        worst = scale = 0;
        for (int64_t tok = 0; tok < (int64_t)fwd->batch * fwd->seq; tok++)
            for (int64_t s = 0; s < K; s++) {
                int64_t e = (int64_t)nnt_tensor_get_f64(&ri, tok * K + s), found = -1;
                for (int64_t q = 0; q < K; q++)
                    if ((int64_t)nnt_tensor_get_f64(gi, tok * K + q) == e) found = q;
                for (int64_t j = 0; j < inner; j++) {
                    double y = nnt_tensor_get_f64(want, (tok * K + s) * inner + j);
                    double x = found < 0 ? NAN : nnt_tensor_get_f64(got, (tok * K + found) * inner + j);
                    scale = fmax(scale, fabs(y));
                    worst = fmax(worst, fwd->mask[tok] ? fabs(x - y) : fabs(y)); /* padding: both 0 */
                }
            }
        nnt_tensor_free(&ri);
    } else if (ends_with(path, ".attention_probabilities")) {
        char fk[220];
        snprintf(fk, sizeof fk, "%s", path);
        const nnt_tensor *p = nnt_trace_get(t, fk);
        if (!p) return INFINITY;
        unsigned char *sel = malloc((size_t)nnt_tensor_numel(p));
        for (int64_t i = 0; i < nnt_tensor_numel(p); i++) sel[i] = nnt_tensor_get_f64(p, i) != 0.0;
        max_diff(got, want, sel, &worst, &scale);
        free(sel);
    } else if (ends_with(path, ".linear_attn.states")) {
        /* real tokens only: nnt's recurrence passes the state through a pad token unchanged, torch's
         * decays it (a zero state either way, but the gradients there differ) */
        int64_t n = nnt_tensor_numel(want), inner = n / ((int64_t)fwd->batch * fwd->seq);
        unsigned char *sel = malloc((size_t)n);
        for (int64_t i = 0; i < n; i++) sel[i] = fwd->mask[i / inner] != 0;
        max_diff(got, want, sel, &worst, &scale);
        free(sel);
    } else {
        max_diff(got, want, NULL, &worst, &scale);
    }
    return scale > 0 ? worst / scale : worst;
}

/* Every gradient the fixture's reference holds for metric, in one trace. */
static void check_metric(nnt_runtime *rt, nnt_model *m, const grad_fixture *fx, const t_ref *fwd,
                         const nnt_st_file *gf, const char *metric)
{
    nnt_trace *t;
    T_OK(rt, nnt_trace_new(m, &t));
    size_t mlen = strlen(metric);
    int wanted = 0, L = nnt_model_get_info(m)->num_layers;
    for (int i = 0; i < gf->n_entries; i++) {
        const char *name = gf->entries[i].name;
        if (strncmp(name, metric, mlen) != 0 || name[mlen] != '/' || !key_path(name)) continue;
        T_OK(rt, nnt_trace_grad(t, key_path(name)));
        if (ends_with(name, ".attention_probabilities")) T_OK(rt, nnt_trace_save(t, key_path(name)));
        wanted++;
    }
    for (int l = 0; l < L; l++) {
        char p[96];
        snprintf(p, sizeof p, "layers.%d.mlp.expert_indices", l);
        nnt_trace_save(t, p); /* a block without experts refuses; nothing to align there */
    }
    T_OK(rt, nnt_trace_metric(t, metric, NULL, 0));
    T_OK(rt, nnt_trace_run(t, fwd->ids, fwd->mask, fwd->batch, fwd->seq));
    double worst = 0;
    const char *worst_path = "";
    for (int i = 0; i < gf->n_entries; i++) {
        const char *name = gf->entries[i].name;
        if (strncmp(name, metric, mlen) != 0 || name[mlen] != '/' || !key_path(name)) continue;
        nnt_tensor want;
        T_OK(rt, nnt_safetensors_read(rt, gf->path, name, &want));
        double e = compare(fwd, t, key_path(name), &want);
        if (!(e <= GRAD_TOL)) fprintf(stderr, "\n  %s %s: grad:%s relative error %.3g\n", fx->dir, metric, key_path(name), e);
        CU_ASSERT(e <= GRAD_TOL);
        if (e > worst) worst = e, worst_path = key_path(name);
        nnt_tensor_free(&want);
    }
    /* the metric's value */
    char mk[96];
    snprintf(mk, sizeof mk, "%s/metric", metric);
    nnt_tensor mref;
    T_OK(rt, nnt_safetensors_read(rt, gf->path, mk, &mref));
    const nnt_tensor *mv = nnt_trace_get(t, "metric");
    CU_ASSERT_FATAL(mv != NULL);
    double a = nnt_tensor_get_f64(mv, 0), b = nnt_tensor_get_f64(&mref, 0);
    if (fabs(a - b) > 1e-4 * fmax(1.0, fabs(b))) fprintf(stderr, "\n  %s %s: metric %.7g, torch %.7g\n", fx->dir, metric, a, b);
    CU_ASSERT(fabs(a - b) <= 1e-4 * fmax(1.0, fabs(b)));
    if (getenv("NNT_GRAD_VERBOSE"))
        fprintf(stderr, "\n  %s %s: %d gradients, worst %.2e (%s)\n", fx->dir, metric, wanted, worst, worst_path);
    CU_ASSERT(wanted >= 10);
    nnt_tensor_free(&mref);
    nnt_trace_free(t);
}

static void check_fixture(const grad_fixture *fx)
{
    nnt_runtime *rt = t_runtime();
    nnt_model *m = t_model(rt, fx->dir);
    t_ref fwd;
    CU_ASSERT_FATAL(t_ref_open(&fwd, rt, fx->reference) == 0);
    char path[512];
    nnt_st_file *gf;
    nnt_error err = {0};
    if (nnt_st_open(t_fixture(fx->grads, path, sizeof path), &gf, &err) != NNT_OK) fprintf(stderr, "\n  %s\n", err.msg);
    CU_ASSERT_FATAL(gf != NULL);
    for (int k = 0; k < 3; k++) check_metric(rt, m, fx, &fwd, gf, METRICS[k]);
    nnt_st_close(gf);
    nnt_model_free(m);
    nnt_runtime_close(rt);
}

static void test_minimax_fp32(void) { check_fixture(&FIXTURES[0]); }
static void test_minimax_bf16(void) { check_fixture(&FIXTURES[1]); }
static void test_minimax_fp8(void) { check_fixture(&FIXTURES[2]); }
static void test_mimo_fp32(void) { check_fixture(&FIXTURES[3]); }
static void test_mimo_bf16(void) { check_fixture(&FIXTURES[4]); }
static void test_mimo_fp8(void) { check_fixture(&FIXTURES[5]); }
static void test_mimo_fp8_per_head(void) { check_fixture(&FIXTURES[6]); }
static void test_mimo_v25_fp4(void) { check_fixture(&FIXTURES[7]); }
static void test_kimi_fp32(void) { check_fixture(&FIXTURES[8]); }
static void test_kimi_bf16(void) { check_fixture(&FIXTURES[9]); }

/* ---- the scalar's forms, padding, edits, refusals (MiniMax-M2 fp32) ---- */

/* The gradient of layers.0.layer_output under `metric`, or under the same logit difference
 * handed in as a cotangent on the logits (metric NULL). */
static nnt_tensor grad_of(nnt_runtime *rt, nnt_model *m, const t_ref *r, const char *metric, const char *edit_path,
                          float edit_factor)
{
    nnt_trace *t;
    T_OK(rt, nnt_trace_new(m, &t));
    if (edit_path) T_OK(rt, nnt_trace_scale(t, edit_path, edit_factor));
    T_OK(rt, nnt_trace_grad(t, "layers.0.layer_output"));
    nnt_tensor cot = {0};
    if (metric) {
        T_OK(rt, nnt_trace_metric(t, metric, NULL, 0));
    } else { /* d/dlogits of sum_b logits[b, -1, 11] - logits[b, -1, 29] */
        int64_t V = nnt_model_get_info(m)->vocab_size, shape[3] = {r->batch, r->seq, V};
        CU_ASSERT_FATAL(nnt_tensor_alloc(&cot, NNT_F32, 3, shape) == NNT_OK);
        float *c = cot.data;
        for (int b = 0; b < r->batch; b++) {
            c[((int64_t)b * r->seq + r->seq - 1) * V + 11] = 1.0f;
            c[((int64_t)b * r->seq + r->seq - 1) * V + 29] = -1.0f;
        }
        T_OK(rt, nnt_trace_cotangent(t, "logits", &cot));
    }
    T_OK(rt, nnt_trace_run(t, r->ids, r->mask, r->batch, r->seq));
    const nnt_tensor *g = nnt_trace_get(t, "grad:layers.0.layer_output");
    CU_ASSERT_FATAL(g != NULL);
    nnt_tensor out;
    CU_ASSERT_FATAL(nnt_tensor_alloc(&out, g->dtype, g->ndim, g->shape) == NNT_OK);
    memcpy(out.data, g->data, nnt_tensor_nbytes(g));
    nnt_tensor_free(&cot);
    nnt_trace_free(t);
    return out;
}

static void test_cotangent_equals_metric(void)
{
    nnt_runtime *rt = t_runtime();
    nnt_model *m = t_model(rt, "minimax_m2/fp32");
    t_ref r;
    CU_ASSERT_FATAL(t_ref_open(&r, rt, "minimax_m2/fp32") == 0);
    nnt_tensor a = grad_of(rt, m, &r, "logit-diff:11,29", NULL, 0), b = grad_of(rt, m, &r, NULL, NULL, 0);
    double worst, scale;
    max_diff(&a, &b, NULL, &worst, &scale);
    CU_ASSERT(scale > 0.01);
    CU_ASSERT(worst <= 1e-6 * scale);
    /* padding: row 1's five left pads get exactly nothing */
    int64_t H = a.shape[2];
    double pad = 0;
    for (int64_t i = 0; i < (int64_t)r.batch * r.seq; i++)
        for (int64_t j = 0; !r.mask[i] && j < H; j++) pad = fmax(pad, fabs(((float *)a.data)[i * H + j]));
    CU_ASSERT_EQUAL(pad, 0.0);
    nnt_tensor_free(&a);
    nnt_tensor_free(&b);
    nnt_model_free(m);
    nnt_runtime_close(rt);
}

/* The metric of the forward with `edit` (layers.1.layer_output scaled by 0.5) and with eps added
 * at entry i of layers.0.layer_output. */
static double metric_with(nnt_runtime *rt, nnt_model *m, const t_ref *r, int64_t i, float eps)
{
    nnt_trace *t;
    T_OK(rt, nnt_trace_new(m, &t));
    int64_t H = nnt_model_get_info(m)->hidden_size, shape[3] = {r->batch, r->seq, H};
    nnt_tensor d;
    CU_ASSERT_FATAL(nnt_tensor_alloc(&d, NNT_F32, 3, shape) == NNT_OK);
    memset(d.data, 0, nnt_tensor_nbytes(&d));
    ((float *)d.data)[i] = eps;
    T_OK(rt, nnt_trace_add(t, "layers.0.layer_output", &d, 1.0f));
    T_OK(rt, nnt_trace_scale(t, "layers.1.layer_output", 0.5f));
    T_OK(rt, nnt_trace_save(t, "logits"));
    T_OK(rt, nnt_trace_run(t, r->ids, r->mask, r->batch, r->seq));
    const nnt_tensor *lg = nnt_trace_get(t, "logits");
    int64_t V = lg->shape[2];
    double s = 0;
    for (int b = 0; b < r->batch; b++) {
        int64_t at = ((int64_t)b * r->seq + r->seq - 1) * V;
        s += nnt_tensor_get_f64(lg, at + 11) - nnt_tensor_get_f64(lg, at + 29);
    }
    nnt_tensor_free(&d);
    nnt_trace_free(t);
    return s;
}

/* An edit in place is differentiated as the forward it makes: the gradient of the edited
 * forward against central differences of that forward, and unlike the unedited gradient. */
static void test_edited_forward(void)
{
    nnt_runtime *rt = t_runtime();
    nnt_model *m = t_model(rt, "minimax_m2/fp32");
    t_ref r;
    CU_ASSERT_FATAL(t_ref_open(&r, rt, "minimax_m2/fp32") == 0);
    nnt_tensor g = grad_of(rt, m, &r, "logit-diff:11,29", "layers.1.layer_output", 0.5f);
    nnt_tensor g0 = grad_of(rt, m, &r, "logit-diff:11,29", NULL, 0);
    double worst, scale;
    max_diff(&g, &g0, NULL, &worst, &scale);
    CU_ASSERT(worst > 0.05 * scale); /* the edit changes the gradient */
    int64_t H = g.shape[2];
    const int64_t entries[] = {(int64_t)(r.seq - 1) * H + 3, (int64_t)(r.seq + 12) * H + 40, 7 * H + 63};
    float eps = 1e-2f;
    for (int k = 0; k < 3; k++) {
        double fd = (metric_with(rt, m, &r, entries[k], eps) - metric_with(rt, m, &r, entries[k], -eps)) / (2.0 * eps);
        double x = ((float *)g.data)[entries[k]];
        if (fabs(fd - x) > 2e-3 * scale + 1e-3 * fabs(fd))
            fprintf(stderr, "\n  entry %lld: gradient %.6g, central difference %.6g\n", (long long)entries[k], x, fd);
        CU_ASSERT(fabs(fd - x) <= 2e-3 * scale + 1e-3 * fabs(fd));
    }
    nnt_tensor_free(&g);
    nnt_tensor_free(&g0);
    nnt_model_free(m);
    nnt_runtime_close(rt);
}

static nnt_status keep_value(void *user, const char *path, int layer, nnt_tensor *value, nnt_error *err)
{
    (void)value, (void)path, (void)layer, (void)user, (void)err;
    return NNT_OK;
}

static void test_refusals(void)
{
    nnt_runtime *rt = t_runtime();
    nnt_model *m = t_model(rt, "minimax_m2/fp32");
    t_ref r;
    CU_ASSERT_FATAL(t_ref_open(&r, rt, "minimax_m2/fp32") == 0);
    nnt_trace *t;
    T_OK(rt, nnt_trace_new(m, &t));
    T_FAILS(rt, nnt_trace_grad(t, "layers.0.mlp.expert_indices"), NNT_ERR_UNSUPPORTED, "a choice has no gradient");
    T_FAILS(rt, nnt_trace_grad(t, "input_ids"), NNT_ERR_UNSUPPORTED, "no gradient");
    T_FAILS(rt, nnt_trace_grad(t, "next_token_probs"), NNT_ERR_UNSUPPORTED, "gradient of logits");
    T_FAILS(rt, nnt_trace_grad(t, "layers.0.no_such_value"), NNT_ERR_PATH, "no_such_value");
    T_FAILS(rt, nnt_trace_metric(t, "logit-diff:1", NULL, 0), NNT_ERR_INVALID_ARGUMENT, "logit-diff:A,B");
    T_FAILS(rt, nnt_trace_metric(t, "loss", (const int[]){-1}, 1), NNT_ERR_INVALID_ARGUMENT, "takes no positions");
    /* a gradient without a scalar, then a metric without a gradient */
    T_OK(rt, nnt_trace_grad(t, "layers.1.layer_output"));
    T_FAILS(rt, nnt_trace_run(t, r.ids, r.mask, r.batch, r.seq), NNT_ERR_INVALID_ARGUMENT, "needs a scalar");
    nnt_trace_free(t);
    T_OK(rt, nnt_trace_new(m, &t));
    T_OK(rt, nnt_trace_metric(t, "logit-diff:11,29", NULL, 0));
    T_FAILS(rt, nnt_trace_metric(t, "loss", NULL, 0), NNT_ERR_CONFLICT, "has a metric already");
    T_FAILS(rt, nnt_trace_run(t, r.ids, r.mask, r.batch, r.seq), NNT_ERR_INVALID_ARGUMENT, "asks for no gradient");
    /* a callback edit has no known Jacobian */
    T_OK(rt, nnt_trace_grad(t, "layers.0.layer_output"));
    T_OK(rt, nnt_trace_edit(t, "layers.1.layer_output", keep_value, NULL));
    T_FAILS(rt, nnt_trace_run(t, r.ids, r.mask, r.batch, r.seq), NNT_ERR_UNSUPPORTED, "a callback edit");
    nnt_trace_free(t);
    /* a token id past the vocabulary, a position no row has */
    T_OK(rt, nnt_trace_new(m, &t));
    T_OK(rt, nnt_trace_grad(t, "layers.0.layer_output"));
    T_OK(rt, nnt_trace_metric(t, "prob:100000", NULL, 0));
    T_FAILS(rt, nnt_trace_run(t, r.ids, r.mask, r.batch, r.seq), NNT_ERR_INVALID_ARGUMENT, "outside the vocabulary");
    nnt_trace_free(t);
    T_OK(rt, nnt_trace_new(m, &t));
    T_OK(rt, nnt_trace_grad(t, "layers.0.layer_output"));
    T_OK(rt, nnt_trace_metric(t, "logprob:7", (const int[]){40}, 1));
    T_FAILS(rt, nnt_trace_run(t, r.ids, r.mask, r.batch, r.seq), NNT_ERR_INVALID_ARGUMENT, "no row has position 40");
    nnt_trace_free(t);
    /* a cotangent of the wrong shape */
    T_OK(rt, nnt_trace_new(m, &t));
    T_OK(rt, nnt_trace_grad(t, "layers.0.layer_output"));
    nnt_tensor small;
    CU_ASSERT_FATAL(nnt_tensor_alloc(&small, NNT_F32, 1, (const int64_t[]){3}) == NNT_OK);
    memset(small.data, 0, nnt_tensor_nbytes(&small));
    T_FAILS(rt, nnt_trace_cotangent(t, "layers.*.layer_output", &small), NNT_ERR_PATH, "one block");
    T_OK(rt, nnt_trace_cotangent(t, "layers.2.layer_output", &small));
    T_FAILS(rt, nnt_trace_run(t, r.ids, r.mask, r.batch, r.seq), NNT_ERR_SHAPE, "cotangent 'layers.2.layer_output'");
    nnt_tensor_free(&small);
    nnt_trace_free(t);
    /* generation takes no gradient requests */
    T_OK(rt, nnt_trace_new(m, &t));
    T_OK(rt, nnt_trace_grad(t, "layers.0.layer_output"));
    T_OK(rt, nnt_trace_metric(t, "loss", NULL, 0));
    nnt_generate_opts go = {.max_new_tokens = 2};
    int32_t out_ids[8];
    T_FAILS(rt, nnt_generate(m, t, r.ids, r.mask, r.batch, r.seq, &go, out_ids), NNT_ERR_UNSUPPORTED,
            "generation, sessions and pipeline stages take none");
    nnt_trace_free(t);
    nnt_model_free(m);
    nnt_runtime_close(rt);
}

/* nnt attribute's AtP grid on a fixture's first unpadded prompt (the corrupted one) against the
 * estimate made from torch's gradient of that prompt: sum over hidden of (a_clean - a_corrupt) *
 * dM/da per (block, position, unit), the values from nnt's own forwards (held to transformers' by
 * each family's suite), the gradient from the reference's row (rows do not mix, so it is the
 * gradient of the row alone; DeepSeek-V4's layer_output carries a streams axis, one unit each). */
static void attribute_against_torch(const char *dir, const char *reference, const char *grads)
{
    nnt_runtime *rt = t_runtime();
    nnt_model *m = t_model(rt, dir);
    t_ref r, g;
    CU_ASSERT_FATAL(t_ref_open(&r, rt, reference) == 0);
    CU_ASSERT_FATAL(t_ref_open(&g, rt, reference) == 0);
    char gdir[512];
    snprintf(g.path, sizeof g.path, "%s", t_fixture(grads, gdir, sizeof gdir)); /* the gradients' file */
    int T = r.seq, L = nnt_model_get_info(m)->num_layers, row = -1;
    for (int b = 0; b < r.batch && row < 0; b++) {
        int full = 1;
        for (int q = 0; q < T; q++) full &= r.mask[(int64_t)b * T + q] != 0;
        if (full) row = b;
    }
    CU_ASSERT_FATAL(row >= 0 && T >= 12 && T <= 4096);
    int32_t corrupt[4096], clean[4096];
    for (int i = 0; i < T; i++) corrupt[i] = clean[i] = r.ids[(int64_t)row * T + i];
    clean[5] = 17, clean[11] = 42, clean[T - 2] = 99;
    nnt_attribute_spec s = {.struct_size = sizeof s, .value = "layers.*.layer_output", .clean = clean,
                            .corrupt = corrupt, .seq = T, .metric = {.kind = NNT_METRIC_LOGIT_DIFF, .a = 11, .b = 29}};
    nnt_attribute_result a;
    T_OK(rt, nnt_attribute(m, &s, &a));
    CU_ASSERT_FATAL(a.n_blocks == L && a.n_positions == T);
    CU_ASSERT(a.forwards == 3 && a.backwards == 1);
    nnt_trace *tc, *tk;
    T_OK(rt, nnt_trace_new(m, &tc));
    T_OK(rt, nnt_trace_new(m, &tk));
    T_OK(rt, nnt_trace_save(tc, "layers.*.layer_output"));
    T_OK(rt, nnt_trace_save(tk, "layers.*.layer_output"));
    T_OK(rt, nnt_trace_run(tc, clean, NULL, 1, T));
    T_OK(rt, nnt_trace_run(tk, corrupt, NULL, 1, T));
    double worst = 0, scale = 0;
    for (int l = 0; l < L; l++) {
        char p[64], k[96];
        snprintf(p, sizeof p, "layers.%d.layer_output", l);
        snprintf(k, sizeof k, "logit-diff:11,29/grad:%s", p);
        nnt_tensor ref;
        CU_ASSERT_FATAL(t_ref_get(&g, k, &ref) == 0);
        const nnt_tensor *xc = nnt_trace_get(tc, p), *xk = nnt_trace_get(tk, p);
        CU_ASSERT_FATAL(xc && xk && ref.shape[0] == r.batch && ref.shape[1] == T);
        int64_t U = a.n_units, inner = nnt_tensor_numel(&ref) / ((int64_t)r.batch * T * U);
        CU_ASSERT_FATAL(nnt_tensor_numel(xc) == (int64_t)T * U * inner);
        for (int q = 0; q < T; q++)
            for (int64_t u = 0; u < U; u++) {
                double want = 0;
                for (int64_t j = 0; j < inner; j++) {
                    int64_t at = ((int64_t)q * U + u) * inner + j;
                    want += (nnt_tensor_get_f64(xc, at) - nnt_tensor_get_f64(xk, at)) *
                            nnt_tensor_get_f64(&ref, (int64_t)row * T * U * inner + at);
                }
                scale = fmax(scale, fabs(want));
                worst = fmax(worst, fabs(want - a.grid[((int64_t)l * T + q) * U + u]));
            }
        nnt_tensor_free(&ref);
    }
    if (worst > GRAD_TOL * scale || getenv("NNT_GRAD_VERBOSE"))
        fprintf(stderr, "\n  %s AtP against torch: worst %.3g of %.3g\n", dir, worst, scale);
    CU_ASSERT(scale > 1e-3);
    CU_ASSERT(worst <= GRAD_TOL * scale);
    nnt_attribute_result_free(&a);
    nnt_trace_free(tc);
    nnt_trace_free(tk);
    nnt_model_free(m);
    nnt_runtime_close(rt);
}

static void test_attribute_against_torch(void)
{
    for (size_t i = 0; i < sizeof FIXTURES / sizeof *FIXTURES; i++)
        attribute_against_torch(FIXTURES[i].dir, FIXTURES[i].reference, FIXTURES[i].grads);
    attribute_against_torch("deepseek_v4/fp32", "deepseek_v4/fp32/reference_L13.safetensors",
                            "deepseek_v4/fp32/grad_reference_L13.safetensors");
    attribute_against_torch("deepseek_v4/native", "deepseek_v4/native/reference_L13.safetensors",
                            "deepseek_v4/native/grad_reference_L13.safetensors");
}

/* Integrated gradients over one point (MiniMax-M2 fp32): the corrupted prompt's forward with the
 * clean prompt's token embeddings set is the clean forward, so the grid is (a_clean - a_corrupt) .
 * the clean forward's gradient (taken here by a gradient request on the clean prompt). */
static void test_attribute_ig_one_step(void)
{
    nnt_runtime *rt = t_runtime();
    nnt_model *m = t_model(rt, "minimax_m2/fp32");
    t_ref r;
    CU_ASSERT_FATAL(t_ref_open(&r, rt, "minimax_m2/fp32") == 0);
    int T = r.seq, L = nnt_model_get_info(m)->num_layers;
    int32_t corrupt[4096], clean[4096];
    for (int i = 0; i < T; i++) corrupt[i] = clean[i] = r.ids[i]; /* row 0: no padding */
    clean[5] = 17, clean[11] = 42, clean[T - 2] = 99;
    nnt_attribute_spec s = {.struct_size = sizeof s, .value = "layers.*.layer_output", .clean = clean,
                            .corrupt = corrupt, .seq = T, .metric = {.kind = NNT_METRIC_LOGIT_DIFF, .a = 11, .b = 29}};
    nnt_attribute_result a;
    nnt_trace *tc, *tk;
    T_OK(rt, nnt_trace_new(m, &tc));
    T_OK(rt, nnt_trace_new(m, &tk));
    T_OK(rt, nnt_trace_save(tc, "layers.*.layer_output"));
    T_OK(rt, nnt_trace_save(tk, "layers.*.layer_output"));
    T_OK(rt, nnt_trace_run(tc, clean, NULL, 1, T));
    T_OK(rt, nnt_trace_run(tk, corrupt, NULL, 1, T));
    double worst, scale;
    s.ig_steps = 1;
    T_OK(rt, nnt_attribute(m, &s, &a));
    CU_ASSERT(a.forwards == 3 && a.backwards == 1);
    nnt_trace *tg;
    T_OK(rt, nnt_trace_new(m, &tg));
    T_OK(rt, nnt_trace_grad(tg, "layers.*.layer_output"));
    T_OK(rt, nnt_trace_metric(tg, "logit-diff:11,29", NULL, 0));
    T_OK(rt, nnt_trace_run(tg, clean, NULL, 1, T));
    worst = scale = 0;
    for (int l = 0; l < L; l++) {
        char p[64], k[96];
        snprintf(p, sizeof p, "layers.%d.layer_output", l);
        snprintf(k, sizeof k, "grad:%s", p);
        const nnt_tensor *xc = nnt_trace_get(tc, p), *xk = nnt_trace_get(tk, p), *gr = nnt_trace_get(tg, k);
        CU_ASSERT_FATAL(gr != NULL);
        int64_t H = gr->shape[2];
        for (int q = 0; q < T; q++) {
            double want = 0;
            for (int64_t j = 0; j < H; j++)
                want += (nnt_tensor_get_f64(xc, (int64_t)q * H + j) - nnt_tensor_get_f64(xk, (int64_t)q * H + j)) *
                        nnt_tensor_get_f64(gr, (int64_t)q * H + j);
            scale = fmax(scale, fabs(want));
            worst = fmax(worst, fabs(want - a.grid[(int64_t)l * T + q]));
        }
    }
    CU_ASSERT(scale > 1e-3);
    CU_ASSERT(worst <= 1e-6 * scale);
    nnt_trace_free(tg);
    nnt_trace_free(tc);
    nnt_trace_free(tk);
    nnt_attribute_result_free(&a);
    nnt_model_free(m);
    nnt_runtime_close(rt);
}

int register_tests(void)
{
    CU_pSuite s = CU_add_suite("grad", NULL, NULL);
    if (!s) return -1;
    CU_add_test(s, "minimax_m2 fp32 against torch autograd", test_minimax_fp32);
    CU_add_test(s, "minimax_m2 bf16 checkpoint", test_minimax_bf16);
    CU_add_test(s, "minimax_m2 fp8 block-scaled", test_minimax_fp8);
    CU_add_test(s, "mimo_v2_flash fp32", test_mimo_fp32);
    CU_add_test(s, "mimo_v2_flash bf16", test_mimo_bf16);
    CU_add_test(s, "mimo_v2_flash fp8", test_mimo_fp8);
    CU_add_test(s, "mimo_v2_flash fp8 per head", test_mimo_fp8_per_head);
    CU_add_test(s, "mimo_v2.5 fp4 experts", test_mimo_v25_fp4);
    CU_add_test(s, "kimi_linear fp32 (through the delta rule, its states at real tokens)", test_kimi_fp32);
    CU_add_test(s, "kimi_linear bf16 checkpoint", test_kimi_bf16);
    CU_add_test(s, "a cotangent on the logits equals the metric; padding gets 0", test_cotangent_equals_metric);
    CU_add_test(s, "an edited forward against central differences", test_edited_forward);
    CU_add_test(s, "refusals", test_refusals);
    CU_add_test(s, "nnt_attribute (AtP) against torch's gradient on every fixture", test_attribute_against_torch);
    CU_add_test(s, "integrated gradients over one step equal a gradient request", test_attribute_ig_one_step);
    return 0;
}
