/* test_grad_recompute.c - the memory modes of a gradient run: per-block recomputation gives the
 * gradients keep-everything gives (within 1e-6 of each value's largest magnitude) on MiniMax-M2,
 * MiMo-V2-Flash, DeepSeek-V4 and Kimi-Linear (fp32 fixtures, left-padded batches), for three metrics, with an
 * edit in place, saves reported once; it keeps fewer bytes; the estimate bounds what each mode
 * keeps; a bound too small is refused before anything runs, naming the prompt length and the key;
 * two pipeline stages run in one process, each recomputed block by block, give what they give
 * keeping everything (every gradient, the stream's gradient between them, bit for bit). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/internal.h"
#include "core/trace/trace_internal.h"
#include "test_util.h"

static const char *const METRICS[] = {"logit-diff:11,29", "logprob:7", "loss"};

/* Values asked for on every block where served (a request a family does not serve is skipped). */
static const char *const VALUES[] = {"layers.*.layer_input", "layers.*.layer_output", "layers.*.attention_norm_output",
                                     "layers.*.mlp.expert_weights", "layers.*.self_attn.attention_probabilities",
                                     "layers.*.attention_comb", "layers.*.mlp_post", "token_embeddings",
                                     "final_norm_output", "logits"};

/* A trace of metric on fixture r: every value's gradient, a save of each block's output, and
 * layers.0.layer_output scaled by 0.5 in place; run in `mode`. */
static nnt_trace *run_mode(nnt_runtime *rt, nnt_model *m, const t_ref *r, const char *metric, int mode)
{
    nnt_trace *t;
    T_OK(rt, nnt_trace_new(m, &t));
    for (size_t i = 0; i < sizeof VALUES / sizeof *VALUES; i++) nnt_trace_grad(t, VALUES[i]);
    T_OK(rt, nnt_trace_save(t, "layers.*.layer_output"));
    T_OK(rt, nnt_trace_scale(t, "layers.0.layer_output", 0.5f));
    T_OK(rt, nnt_trace_metric(t, metric, NULL, 0));
    nnt_trace_grad_memory(t, mode, 0);
    T_OK(rt, nnt_trace_run(t, r->ids, r->mask, r->batch, r->seq));
    return t;
}

static void check_fixture(const char *dir, const char *ref)
{
    nnt_runtime *rt = t_runtime();
    nnt_model *m = t_model(rt, dir);
    t_ref r;
    CU_ASSERT_FATAL(t_ref_open(&r, rt, ref) == 0);
    int padded = 0;
    for (int i = 0; i < r.batch * r.seq; i++) padded += !r.mask[i];
    if (!padded && r.seq > 4) { /* a last row of the first row's first tokens after 3 pads */
        int b = r.batch < 2 ? 1 : r.batch - 1;
        for (int s = 0; s < r.seq; s++) {
            r.ids[b * r.seq + s] = s < 3 ? 0 : r.ids[s - 3];
            r.mask[b * r.seq + s] = s >= 3;
            r.mask[s] = 1;
        }
        if (r.batch < 2) r.batch = 2;
        padded = 3;
    }
    CU_ASSERT(r.batch >= 2 && padded > 0); /* a left-padded batch */
    for (int k = 0; k < 3; k++) {
        nnt_trace *a = run_mode(rt, m, &r, METRICS[k], TRACE_GRAD_KEEP);
        nnt_trace *b = run_mode(rt, m, &r, METRICS[k], TRACE_GRAD_RECOMPUTE);
        int na = nnt_trace_result_count(a), nb = nnt_trace_result_count(b), grads = 0;
        CU_ASSERT_EQUAL(na, nb); /* saves once, every gradient once */
        double worst = 0;
        for (int i = 0; i < na; i++) {
            const char *key = NULL;
            const nnt_tensor *x = NULL;
            T_OK(rt, nnt_trace_result(a, i, &key, &x));
            const nnt_tensor *y = nnt_trace_get(b, key);
            CU_ASSERT_FATAL(x && y);
            CU_ASSERT_FATAL(nnt_shape_equal(x->ndim, x->shape, y->ndim, y->shape));
            double scale = 0, diff = 0;
            for (int64_t j = 0, n = nnt_tensor_numel(x); j < n; j++) {
                double u = nnt_tensor_get_f64(x, j), v = nnt_tensor_get_f64(y, j);
                scale = fmax(scale, fabs(u));
                diff = fmax(diff, fabs(u - v));
            }
            double e = scale > 0 ? diff / scale : diff;
            if (!(e <= 1e-6)) fprintf(stderr, "\n  %s %s: %s differs by %.3g (relative)\n", dir, METRICS[k], key, e);
            CU_ASSERT(e <= 1e-6);
            worst = fmax(worst, e);
            grads += strncmp(key, "grad:", 5) == 0;
        }
        CU_ASSERT(grads >= 10);
        int mode_a, mode_b;
        size_t kept_a, kept_b, streams_b;
        uint64_t est_keep, est_rec;
        nnt_trace_grad_report(a, &mode_a, &kept_a, NULL, &est_keep, NULL, NULL);
        nnt_trace_grad_report(b, &mode_b, &kept_b, &streams_b, NULL, &est_rec, NULL);
        CU_ASSERT_EQUAL(mode_a, TRACE_GRAD_KEEP);
        CU_ASSERT_EQUAL(mode_b, TRACE_GRAD_RECOMPUTE);
        CU_ASSERT(kept_b < kept_a);
        CU_ASSERT(est_keep >= kept_a);           /* the estimate bounds keep-everything ... */
        CU_ASSERT(est_rec >= kept_b + streams_b); /* ... and recomputation */
        if (getenv("NNT_GRAD_VERBOSE") || est_keep < kept_a || est_rec < kept_b + streams_b)
            fprintf(stderr,
                    "\n  %s (%d x %d tokens) %s: %d results (%d gradients), worst %.2e; kept: everything %zu bytes (estimate %llu), "
                    "recompute %zu + %zu block inputs (estimate %llu)\n",
                    dir, r.batch, r.seq, METRICS[k], na, grads, worst, kept_a, (unsigned long long)est_keep, kept_b, streams_b,
                    (unsigned long long)est_rec);
        nnt_trace_free(a);
        nnt_trace_free(b);
    }
    nnt_model_free(m);
    nnt_runtime_close(rt);
}

static void test_minimax(void) { check_fixture("minimax_m2/fp32", "minimax_m2/fp32"); }
static void test_mimo(void) { check_fixture("mimo_v2_flash/fp32", "mimo_v2_flash/fp32"); }
static void test_deepseek(void) { check_fixture("deepseek_v4/fp32", "deepseek_v4/fp32/reference_L13.safetensors"); }
static void test_kimi(void) { check_fixture("kimi_linear/fp32", "kimi_linear/fp32"); }

/* A bound under even recomputation's need: refused before running, naming the prompt length, the
 * bytes and the INI key; a bound between the two modes' needs chooses recomputation. */
static void test_bound(void)
{
    nnt_runtime *rt = t_runtime();
    nnt_model *m = t_model(rt, "minimax_m2/fp32");
    t_ref r;
    CU_ASSERT_FATAL(t_ref_open(&r, rt, "minimax_m2/fp32") == 0);
    nnt_trace *t;
    T_OK(rt, nnt_trace_new(m, &t));
    T_OK(rt, nnt_trace_grad(t, "layers.0.layer_output"));
    T_OK(rt, nnt_trace_metric(t, "loss", NULL, 0));
    nnt_trace_grad_memory(t, TRACE_GRAD_AUTO, 1000.0);
    CU_ASSERT_EQUAL(nnt_trace_run(t, r.ids, r.mask, r.batch, r.seq), NNT_ERR_OUT_OF_MEMORY);
    const char *msg = nnt_last_error(rt);
    char want[64];
    snprintf(want, sizeof want, "x %d tokens", r.seq);
    CU_ASSERT(strstr(msg, want) != NULL);
    CU_ASSERT(strstr(msg, "[grad] memory_gb") != NULL);
    CU_ASSERT(strstr(msg, " GB") != NULL);
    CU_ASSERT_EQUAL(nnt_trace_result_count(t), 0); /* nothing ran */
    uint64_t keep, rec;
    nnt_trace_grad_report(t, NULL, NULL, NULL, &keep, &rec, NULL);
    CU_ASSERT(rec < keep);
    nnt_trace_grad_memory(t, TRACE_GRAD_AUTO, (double)(rec + keep) / 2);
    T_OK(rt, nnt_trace_run(t, r.ids, r.mask, r.batch, r.seq));
    int mode;
    nnt_trace_grad_report(t, &mode, NULL, NULL, NULL, NULL, NULL);
    CU_ASSERT_EQUAL(mode, TRACE_GRAD_RECOMPUTE);
    nnt_trace_grad_memory(t, TRACE_GRAD_AUTO, (double)keep);
    T_OK(rt, nnt_trace_run(t, r.ids, r.mask, r.batch, r.seq));
    nnt_trace_grad_report(t, &mode, NULL, NULL, NULL, NULL, NULL);
    CU_ASSERT_EQUAL(mode, TRACE_GRAD_KEEP);
    nnt_trace_free(t);
    nnt_model_free(m);
    nnt_runtime_close(rt);
}

/* The INI's [grad] section: memory_gb read (a tiny bound refuses, naming the file), a bad mode or
 * bound refused where the INI is read. */
static void test_ini(void)
{
    char path[600];
    const char *const KEYS[] = {"memory_gb", "mode", "memory_gb"}, *const VALUES_[] = {"0.000001", "everything", "-3"};
    for (int k = 0; k < 3; k++) {
        CU_ASSERT_FATAL(t_ini_with("grad_recompute_test.ini", "grad", KEYS[k], VALUES_[k], path, sizeof path) != NULL);
        nnt_runtime *rt = NULL;
        nnt_status st = nnt_runtime_open(path, &rt);
        if (k > 0) {
            CU_ASSERT_NOT_EQUAL(st, NNT_OK);
            CU_ASSERT(strstr(nnt_last_error(rt), k == 1 ? "[grad] mode" : "[grad] memory_gb") != NULL);
            nnt_runtime_close(rt);
            continue;
        }
        CU_ASSERT_FATAL(st == NNT_OK);
        nnt_model *m = t_model(rt, "minimax_m2/fp32");
        t_ref r;
        CU_ASSERT_FATAL(t_ref_open(&r, rt, "minimax_m2/fp32") == 0);
        nnt_trace *t;
        T_OK(rt, nnt_trace_new(m, &t));
        T_OK(rt, nnt_trace_grad(t, "layers.0.layer_output"));
        T_OK(rt, nnt_trace_metric(t, "loss", NULL, 0));
        CU_ASSERT_EQUAL(nnt_trace_run(t, r.ids, r.mask, r.batch, r.seq), NNT_ERR_OUT_OF_MEMORY);
        CU_ASSERT(strstr(nnt_last_error(rt), "grad_recompute_test.ini") != NULL);
        nnt_trace_free(t);
        nnt_model_free(m);
        nnt_runtime_close(rt);
    }
}

/* Two pipeline stages of fixture dir, blocks [0, split) and [split, L), run in one process in the
 * ranks' order (forward of the first, backward of the last, then of the first) in `mode`; the
 * stream's gradient between them is written to d_stream. */
static void run_stages(nnt_runtime *rt, nnt_model *m, const t_ref *r, int split, int mode, nnt_trace **ta,
                       nnt_trace **tb, float *stream, float *d_stream)
{
    int L = nnt_model_get_info(m)->num_layers;
    nnt_trace *t[2];
    for (int k = 0; k < 2; k++) {
        T_OK(rt, nnt_trace_new(m, &t[k]));
        T_OK(rt, nnt_trace_grad(t[k], "layers.*.layer_output"));
        T_OK(rt, nnt_trace_grad(t[k], "layers.*.layer_input"));
        T_OK(rt, nnt_trace_save(t[k], "layers.*.layer_output"));
        T_OK(rt, nnt_trace_scale(t[k], "layers.1.layer_output", 0.5f));
        T_OK(rt, nnt_trace_metric(t[k], "logit-diff:11,29", NULL, 0));
        nnt_trace_grad_memory(t[k], mode, 0);
    }
    T_OK(rt, nnt_trace_grad_stage_forward(t[0], r->ids, r->mask, r->batch, r->seq, 0, split, NULL, stream, 0));
    T_OK(rt, nnt_trace_grad_stage_forward(t[1], r->ids, r->mask, r->batch, r->seq, split, L, stream, NULL, 0));
    T_OK(rt, nnt_trace_grad_stage_backward(t[1], r->ids, r->mask, r->batch, r->seq, split, L, stream, NULL, d_stream));
    T_OK(rt, nnt_trace_grad_stage_backward(t[0], r->ids, r->mask, r->batch, r->seq, 0, split, NULL, d_stream, NULL));
    *ta = t[0], *tb = t[1];
}

static void check_stages(const char *dir, const char *ref, int split)
{
    nnt_runtime *rt = t_runtime();
    nnt_model *m = t_model(rt, dir);
    t_ref r;
    CU_ASSERT_FATAL(t_ref_open(&r, rt, ref) == 0);
    const nnt_model_info *info = nnt_model_get_info(m);
    size_t n = (size_t)r.batch * r.seq * (info->num_streams > 0 ? info->num_streams : 1) * info->hidden_size;
    float *s1 = malloc(n * sizeof *s1), *s2 = malloc(n * sizeof *s2), *d1 = malloc(n * sizeof *d1),
          *d2 = malloc(n * sizeof *d2);
    CU_ASSERT_FATAL(s1 && s2 && d1 && d2);
    nnt_trace *ka, *kb, *ra, *rb;
    run_stages(rt, m, &r, split, TRACE_GRAD_KEEP, &ka, &kb, s1, d1);
    run_stages(rt, m, &r, split, TRACE_GRAD_RECOMPUTE, &ra, &rb, s2, d2);
    CU_ASSERT(memcmp(s1, s2, n * sizeof *s1) == 0);
    CU_ASSERT(memcmp(d1, d2, n * sizeof *d1) == 0);
    double dmax = 0;
    for (size_t i = 0; i < n; i++) dmax = fmax(dmax, fabs(d1[i]));
    CU_ASSERT(dmax > 0); /* the stream's gradient is not vacuous */
    nnt_trace *keep[2] = {ka, kb}, *rec[2] = {ra, rb};
    int grads = 0;
    for (int k = 0; k < 2; k++) {
        int mode;
        nnt_trace_grad_report(rec[k], &mode, NULL, NULL, NULL, NULL, NULL);
        CU_ASSERT_EQUAL(mode, TRACE_GRAD_RECOMPUTE);
        nnt_trace_grad_report(keep[k], &mode, NULL, NULL, NULL, NULL, NULL);
        CU_ASSERT_EQUAL(mode, TRACE_GRAD_KEEP);
        int na = nnt_trace_result_count(keep[k]);
        CU_ASSERT_EQUAL(na, nnt_trace_result_count(rec[k]));
        for (int i = 0; i < na; i++) {
            const char *key = NULL;
            const nnt_tensor *x = NULL;
            T_OK(rt, nnt_trace_result(keep[k], i, &key, &x));
            const nnt_tensor *y = nnt_trace_get(rec[k], key);
            CU_ASSERT_FATAL(x && y && nnt_tensor_nbytes(x) == nnt_tensor_nbytes(y));
            if (memcmp(x->data, y->data, nnt_tensor_nbytes(x)) != 0)
                fprintf(stderr, "\n  %s stage %d: %s differs between the modes\n", dir, k, key);
            CU_ASSERT(memcmp(x->data, y->data, nnt_tensor_nbytes(x)) == 0);
            grads += strncmp(key, "grad:", 5) == 0;
        }
        nnt_trace_free(keep[k]);
        nnt_trace_free(rec[k]);
    }
    CU_ASSERT_EQUAL(grads, 2 * info->num_layers); /* layer_input and layer_output of every block */
    free(s1), free(s2), free(d1), free(d2);
    nnt_model_free(m);
    nnt_runtime_close(rt);
}

static void test_stages_mimo(void) { check_stages("mimo_v2_flash/fp32", "mimo_v2_flash/fp32", 2); }
static void test_stages_deepseek(void) { check_stages("deepseek_v4/fp32", "deepseek_v4/fp32/reference_L13.safetensors", 2); }

int register_tests(void)
{
    CU_pSuite s = CU_add_suite("grad_recompute", NULL, NULL);
    if (!s) return -1;
    CU_add_test(s, "minimax_m2 fp32: recomputation equals keep-everything", test_minimax);
    CU_add_test(s, "mimo_v2_flash fp32: recomputation equals keep-everything", test_mimo);
    CU_add_test(s, "deepseek_v4 fp32: recomputation equals keep-everything", test_deepseek);
    CU_add_test(s, "kimi_linear fp32 (delta rule and short convolutions): recomputation equals keep-everything",
                test_kimi);
    CU_add_test(s, "the bound: refused when too small, the mode chosen by it", test_bound);
    CU_add_test(s, "the INI's [grad] section", test_ini);
    CU_add_test(s, "mimo_v2_flash: two stages recomputed equal two stages kept", test_stages_mimo);
    CU_add_test(s, "deepseek_v4 (four streams): two stages recomputed equal two stages kept", test_stages_deepseek);
    return 0;
}
