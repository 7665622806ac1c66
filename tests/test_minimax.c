/* test_minimax.c - the MiniMax-M2 family against transformers' values (fp32, bf16 sharded,
 * fp8 block-scaled), the identities its values obey, its write semantics, and the family kit's
 * MoE combine giving the same numbers on a backend with and without scale_rows.
 *
 * Tolerances: every float value within 1e-5 of the reference's largest magnitude (fp32
 * compute on fp32, bf16 and dequantised fp8 weights; transformers ran in float32 on the same
 * weights); expert indices compared as sets per token, slot-aligned weights and outputs;
 * values compared at real tokens only (transformers' padding rows are not meaningful). The bf16
 * precision is held against transformers run in bfloat16 by a relative bound (see below). */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/internal.h"
#include "test_util.h"

static const char *const FIXTURES[] = {"minimax_m2/fp32", "minimax_m2/bf16", "minimax_m2/fp8"};

static void check_fixture(const char *rel)
{
    nnt_runtime *rt = t_runtime();
    nnt_model *m = t_model(rt, rel);
    t_ref r;
    CU_ASSERT_FATAL(t_ref_open(&r, rt, rel) == 0);
    nnt_trace *t = t_run_reference(rt, m, &r);
    /* 5 model values and 20 per block: every value of the page the family serves */
    CU_ASSERT_EQUAL(t_check_reference(&r, t), 5 + 20 * nnt_model_get_info(m)->num_layers);
    nnt_trace_free(t);
    nnt_model_free(m);
    nnt_runtime_close(rt);
}

static void test_fp32(void) { check_fixture(FIXTURES[0]); }
static void test_bf16_sharded(void) { check_fixture(FIXTURES[1]); }
static void test_fp8_blocks(void) { check_fixture(FIXTURES[2]); }

/* The bf16 checkpoint run entirely in bfloat16 by transformers stays close to nnt's float32
 * compute on the same weights (a loose sanity bound: bf16 rounds every activation). */
static void test_bf16_compute_close(void)
{
    nnt_runtime *rt = t_runtime();
    nnt_model *m = t_model(rt, FIXTURES[1]);
    t_ref r;
    CU_ASSERT_FATAL(t_ref_open(&r, rt, FIXTURES[1]) == 0);
    nnt_trace *t;
    T_OK(rt, nnt_trace_new(m, &t));
    T_OK(rt, nnt_trace_save(t, "logits"));
    T_OK(rt, nnt_trace_run(t, r.ids, r.mask, r.batch, r.seq));
    nnt_tensor ref;
    CU_ASSERT_FATAL(t_ref_get(&r, "bf16_compute.logits", &ref) == 0);
    unsigned char *sel = t_sel_tokens(&r, &ref);
    double e = t_rel_err(nnt_trace_get(t, "logits"), &ref, sel);
    CU_ASSERT(e >= 0 && e < 0.05);
    free(sel);
    nnt_tensor_free(&ref);
    nnt_trace_free(t);
    nnt_model_free(m);
    nnt_runtime_close(rt);
}

/* ---- precision = bf16 ----
 * [family.minimax_m2] precision = bf16 makes the products round their activations to bfloat16
 * before and their results after (float32 accumulation). Its values are held against
 * transformers running the same bf16 checkpoint in torch.bfloat16 (reference_bf16.safetensors,
 * same inputs): nnt-bf16 must be at least as close to transformers-bf16 as transformers-bf16 is
 * to transformers-fp32 (reference.safetensors), on logits and every block's layer_output.
 *
 * The distance is the relative RMS over real tokens, rms(x - y) / rms(fp32 reference). Rounding
 * to bfloat16 leaves many small, nearly independent errors spread over every entry; their RMS
 * measures that typical size over the whole value, where a max picks the single entry at which
 * two different sets of roundings happen to add up worst and so says more about luck than about
 * the precision. Dividing by the RMS of the value puts logits and block outputs on one scale, and
 * both distances share the denominator, so comparing them compares the RMS differences
 * themselves. */
static const char *const BF16_REFERENCE = "minimax_m2/bf16/reference_bf16.safetensors";

/* A runtime from the build INI with [family.minimax_m2] precision set (NULL: left to the default). */
static nnt_runtime *runtime_with_precision(const char *ini_name, const char *precision)
{
    char ini[768];
    const char *path = t_ini_with(ini_name, "family.minimax_m2", precision ? "precision" : NULL, precision, ini, sizeof ini);
    CU_ASSERT_PTR_NOT_NULL_FATAL(path);
    nnt_runtime *rt = NULL;
    nnt_status st = nnt_runtime_open(path, &rt);
    if (st != NNT_OK) fprintf(stderr, "\n  %s: %s\n", path, nnt_last_error(rt));
    CU_ASSERT_EQUAL_FATAL(st, NNT_OK);
    return rt;
}

static nnt_trace *run_saving(nnt_runtime *rt, nnt_model *m, const t_ref *r, const char *const *keys, int n)
{
    nnt_trace *t;
    T_OK(rt, nnt_trace_new(m, &t));
    for (int i = 0; i < n; i++) T_OK(rt, nnt_trace_save(t, keys[i]));
    T_OK(rt, nnt_trace_run(t, r->ids, r->mask, r->batch, r->seq));
    return t;
}

static void test_bf16_precision(void)
{
    nnt_runtime *rt16 = runtime_with_precision("precision_bf16.ini", "bf16");
    nnt_runtime *rt32 = runtime_with_precision("precision_default.ini", NULL);
    nnt_model *m16 = t_model(rt16, FIXTURES[1]), *m32 = t_model(rt32, FIXTURES[1]);
    nnt_memory mem;
    T_OK(rt16, nnt_model_memory(m16, &mem));
    CU_ASSERT_EQUAL(mem.precision, 1);
    T_OK(rt32, nnt_model_memory(m32, &mem));
    CU_ASSERT_EQUAL(mem.precision, 0);
    t_ref hf16, hf32;
    CU_ASSERT_FATAL(t_ref_open(&hf16, rt16, BF16_REFERENCE) == 0);
    CU_ASSERT_FATAL(t_ref_open(&hf32, rt16, FIXTURES[1]) == 0);
    CU_ASSERT_FATAL(t_same_inputs(&hf16, &hf32));
    int L = nnt_model_get_info(m16)->num_layers, n = 0;
    char keys[64][96];
    const char *kp[64];
    snprintf(keys[n++], sizeof keys[0], "logits");
    snprintf(keys[n++], sizeof keys[0], "final_norm_output");
    for (int l = 0; l < L && n + 4 <= 64; l++) {
        snprintf(keys[n++], sizeof keys[0], "layers.%d.layer_output", l);
        snprintf(keys[n++], sizeof keys[0], "layers.%d.self_attn.attention_output", l);
        snprintf(keys[n++], sizeof keys[0], "layers.%d.mlp.mlp_output", l);
    }
    int n_float = n;
    for (int l = 0; l < L && n < 64; l++) snprintf(keys[n++], sizeof keys[0], "layers.%d.mlp.expert_indices", l);
    for (int i = 0; i < n; i++) kp[i] = keys[i];
    nnt_trace *t16 = run_saving(rt16, m16, &hf16, kp, n), *t32 = run_saving(rt32, m32, &hf16, kp, n);
    fprintf(stderr, "\n  relative RMS over real tokens (denominator: rms of transformers-fp32)\n"
                    "  %-36s %14s %14s %14s\n",
            "value", "nnt16-hf16", "hf16-hf32", "nnt16-nnt32");
    for (int i = 0; i < n_float; i++) {
        nnt_tensor y16, y32;
        CU_ASSERT_FATAL(t_ref_get(&hf16, kp[i], &y16) == 0 && t_ref_get(&hf32, kp[i], &y32) == 0);
        const nnt_tensor *x16 = nnt_trace_get(t16, kp[i]), *x32 = nnt_trace_get(t32, kp[i]);
        CU_ASSERT_FATAL(x16 && x32 && t_rel_err(x16, &y16, NULL) >= 0);
        double denom = t_rms_real(&hf16, &y32, NULL);
        double ours = t_rms_real(&hf16, x16, &y16) / denom, theirs = t_rms_real(&hf16, &y16, &y32) / denom;
        double effect = t_rms_real(&hf16, x16, x32) / denom;
        /* logits and each block's output are held to the bound; the rest is printed for context */
        int bound = strcmp(kp[i], "logits") == 0 || strstr(kp[i], ".layer_output") != NULL;
        fprintf(stderr, "  %-36s %14.4g %14.4g %14.4g%s\n", kp[i], ours, theirs, effect,
                bound ? (ours <= theirs ? "" : "  <- above the bound") : "  (not bound)");
        if (bound) CU_ASSERT(ours <= theirs);
        /* the setting took effect: bf16 products move the values well past float32 noise */
        CU_ASSERT(effect > 1e-4);
        nnt_tensor_free(&y16);
        nnt_tensor_free(&y32);
    }
    /* expert choices (context only): real tokens whose expert set differs from transformers-bf16's */
    for (int i = n_float; i < n; i++) {
        nnt_tensor y16;
        CU_ASSERT_FATAL(t_ref_get(&hf16, kp[i], &y16) == 0);
        const nnt_tensor *x16 = nnt_trace_get(t16, kp[i]);
        int64_t K = y16.shape[2], differ = 0;
        for (int64_t tok = 0; tok < (int64_t)hf16.batch * hf16.seq; tok++) {
            if (!hf16.mask[tok]) continue;
            int missing = 0;
            for (int64_t a = 0; a < K; a++) {
                int found = 0;
                for (int64_t b = 0; b < K; b++)
                    found |= nnt_tensor_get_f64(x16, tok * K + a) == nnt_tensor_get_f64(&y16, tok * K + b);
                missing |= !found;
            }
            differ += missing;
        }
        fprintf(stderr, "  %-36s expert sets differ from transformers-bf16 at %lld real tokens\n", kp[i], (long long)differ);
        nnt_tensor_free(&y16);
    }
    nnt_trace_free(t16);
    nnt_trace_free(t32);
    nnt_model_free(m16);
    nnt_model_free(m32);
    nnt_runtime_close(rt16);
    nnt_runtime_close(rt32);
}

/* The family kit's MoE combine weighs the experts' rows by the routing weights in backend memory
 * (scale_rows) when the backend has the op, and by their host copy as the scatters' scales when it
 * does not: the same numbers bit for bit, at the default precision and at precision = bf16, with
 * the per-slot expert outputs asked for (stores into slots) and without (adds into the sum). The
 * second model is loaded after the runtime's copy of the cpu table lost scale_rows, so its
 * family sees a backend without it. */
static void test_combine_without_scale_rows(void)
{
    for (int bf16 = 0; bf16 < 2; bf16++) {
        nnt_runtime *rt = bf16 ? runtime_with_precision("precision_bf16.ini", "bf16") : t_runtime();
        nnt_plugin *cpu = t_cpu_backend(rt);
        CU_ASSERT_FATAL(cpu != NULL && cpu->ops.scale_rows != NULL);
        t_ref r;
        CU_ASSERT_FATAL(t_ref_open(&r, rt, FIXTURES[0]) == 0);
        for (int slots = 0; slots < 2; slots++) {
            nnt_model *with = t_model(rt, FIXTURES[0]);
            int L = nnt_model_get_info(with)->num_layers, n = 0;
            char keys[64][96];
            const char *kp[64];
            snprintf(keys[n++], sizeof keys[0], "logits");
            for (int l = 0; l < L && n + 4 <= 64; l++) {
                snprintf(keys[n++], sizeof keys[0], "layers.%d.layer_output", l);
                snprintf(keys[n++], sizeof keys[0], "layers.%d.mlp.routed_output", l);
                snprintf(keys[n++], sizeof keys[0], "layers.%d.mlp.expert_weights", l);
                if (slots) snprintf(keys[n++], sizeof keys[0], "layers.%d.mlp.expert_outputs", l);
            }
            for (int i = 0; i < n; i++) kp[i] = keys[i];
            nnt_trace *a = run_saving(rt, with, &r, kp, n);
            nnt_status (*scale_rows)(void *, const nnt_tensor *, const nnt_tensor *, const int32_t *, int,
                                     nnt_tensor *, nnt_error *) = cpu->ops.scale_rows;
            cpu->ops.scale_rows = NULL;
            nnt_model *without = t_model(rt, FIXTURES[0]);
            nnt_trace *b = run_saving(rt, without, &r, kp, n);
            cpu->ops.scale_rows = scale_rows;
            for (int i = 0; i < n; i++) {
                const nnt_tensor *x = nnt_trace_get(a, kp[i]), *y = nnt_trace_get(b, kp[i]);
                CU_ASSERT_FATAL(x && y);
                int same = nnt_tensor_nbytes(x) == nnt_tensor_nbytes(y) &&
                           memcmp(x->data, y->data, nnt_tensor_nbytes(x)) == 0;
                if (!same) fprintf(stderr, "\n  %s differs without scale_rows (precision %s)\n", kp[i], bf16 ? "bf16" : "f32");
                CU_ASSERT(same);
            }
            nnt_trace_free(a);
            nnt_trace_free(b);
            nnt_model_free(with);
            nnt_model_free(without);
        }
        nnt_runtime_close(rt);
    }
}

/* The same written INI without a precision (the default, f32) still matches the float32
 * reference on every value within T_TOL. */
static void test_default_precision_from_written_ini(void)
{
    nnt_runtime *rt = runtime_with_precision("precision_default.ini", NULL);
    nnt_model *m = t_model(rt, FIXTURES[1]);
    nnt_memory mem;
    T_OK(rt, nnt_model_memory(m, &mem));
    CU_ASSERT_EQUAL(mem.precision, 0);
    t_ref r;
    CU_ASSERT_FATAL(t_ref_open(&r, rt, FIXTURES[1]) == 0);
    nnt_trace *t = t_run_reference(rt, m, &r);
    CU_ASSERT_EQUAL(t_check_reference(&r, t), 5 + 20 * nnt_model_get_info(m)->num_layers);
    nnt_trace_free(t);
    nnt_model_free(m);
    nnt_runtime_close(rt);
}

/* ---- identities of the page ---- */

static void test_identities(void)
{
    nnt_runtime *rt = t_runtime();
    nnt_model *m = t_model(rt, FIXTURES[0]);
    t_ref r;
    CU_ASSERT_FATAL(t_ref_open(&r, rt, FIXTURES[0]) == 0);
    nnt_trace *t = t_run_reference(rt, m, &r);
    const nnt_model_info *info = nnt_model_get_info(m);
    int L = info->num_layers;
    int64_t H = info->hidden_size, M = (int64_t)r.batch * r.seq;
    char k[128];
    for (int l = 0; l < L; l++) {
        const nnt_tensor *x, *a, *mo, *o, *eo, *ro;
        snprintf(k, sizeof k, "layers.%d.layer_input", l);
        x = nnt_trace_get(t, k);
        snprintf(k, sizeof k, "layers.%d.self_attn.attention_output", l);
        a = nnt_trace_get(t, k);
        snprintf(k, sizeof k, "layers.%d.mlp.mlp_output", l);
        mo = nnt_trace_get(t, k);
        snprintf(k, sizeof k, "layers.%d.layer_output", l);
        o = nnt_trace_get(t, k);
        snprintf(k, sizeof k, "layers.%d.mlp.expert_outputs", l);
        eo = nnt_trace_get(t, k);
        snprintf(k, sizeof k, "layers.%d.mlp.routed_output", l);
        ro = nnt_trace_get(t, k);
        CU_ASSERT_FATAL(x && a && mo && o && eo && ro);
        int K = (int)eo->shape[2];
        double worst_sum = 0, worst_moe = 0, scale = 0;
        for (int64_t i = 0; i < M * H; i++) {
            double out = nnt_tensor_get_f64(o, i);
            scale = fmax(scale, fabs(out));
            double sum = nnt_tensor_get_f64(x, i) + nnt_tensor_get_f64(a, i) + nnt_tensor_get_f64(mo, i);
            worst_sum = fmax(worst_sum, fabs(sum - out));
            int64_t tok = i / H, h = i % H;
            double slots = 0;
            for (int s = 0; s < K; s++) slots += nnt_tensor_get_f64(eo, (tok * K + s) * H + h);
            worst_moe = fmax(worst_moe, fabs(slots - nnt_tensor_get_f64(ro, i)));
            worst_moe = fmax(worst_moe, fabs(nnt_tensor_get_f64(ro, i) - nnt_tensor_get_f64(mo, i)));
        }
        CU_ASSERT(worst_sum <= 1e-6 * scale);
        CU_ASSERT(worst_moe <= 1e-6 * scale);
        /* the block hands its output to the next block */
        if (l + 1 < L) {
            snprintf(k, sizeof k, "layers.%d.layer_input", l + 1);
            CU_ASSERT(t_rel_err(nnt_trace_get(t, k), o, NULL) == 0.0);
        }
    }
    /* a saved value is a copy: later in-place updates of the residual do not reach it */
    CU_ASSERT(t_rel_err(nnt_trace_get(t, "layers.0.layer_input"), nnt_trace_get(t, "token_embeddings"), NULL) == 0.0);
    CU_ASSERT(t_rel_err(nnt_trace_get(t, "layers.0.layer_input"), nnt_trace_get(t, "layers.0.layer_mid"), NULL) > 1e-3);

    /* logit lens on the last block: the final RMSNorm and lm_head, computed here from the
     * checkpoint's own weights, reproduce logits */
    char dir[512], file[600];
    snprintf(file, sizeof file, "%s/model.safetensors", t_fixture(FIXTURES[0], dir, sizeof dir));
    nnt_tensor normw, head;
    T_OK(rt, nnt_safetensors_read(rt, file, "model.norm.weight", &normw));
    T_OK(rt, nnt_safetensors_read(rt, file, "lm_head.weight", &head));
    snprintf(k, sizeof k, "layers.%d.layer_output", L - 1);
    const nnt_tensor *last = nnt_trace_get(t, k), *logits = nnt_trace_get(t, "logits");
    int64_t V = info->vocab_size;
    double worst = 0, scale = 0;
    for (int64_t tok = 0; tok < M; tok++) {
        const float *xr = (const float *)last->data + tok * H;
        double ss = 0;
        for (int64_t h = 0; h < H; h++) ss += (double)xr[h] * xr[h];
        double inv = 1.0 / sqrt(ss / (double)H + 1e-6);
        for (int64_t v = 0; v < V; v++) {
            double acc = 0;
            for (int64_t h = 0; h < H; h++)
                acc += ((const float *)head.data)[v * H + h] * (xr[h] * inv * ((const float *)normw.data)[h]);
            double want = ((const float *)logits->data)[tok * V + v];
            scale = fmax(scale, fabs(want));
            worst = fmax(worst, fabs(acc - want));
        }
    }
    CU_ASSERT(worst <= 1e-5 * scale);
    /* nnt's own logit lens (project_on_vocab) on the last block's output is logits, exactly */
    nnt_tensor lens;
    T_OK(rt, nnt_project_on_vocab(m, last, &lens));
    CU_ASSERT(lens.ndim == 3 && lens.shape[2] == V);
    CU_ASSERT(t_rel_err(&lens, logits, NULL) == 0.0);
    nnt_tensor_free(&lens);
    int64_t bad_shape[2] = {2, 7};
    nnt_tensor bad;
    CU_ASSERT_FATAL(nnt_tensor_alloc(&bad, NNT_F32, 2, bad_shape) == NNT_OK);
    T_FAILS(rt, nnt_project_on_vocab(m, &bad, &lens), NNT_ERR_SHAPE, "must be hidden_size 64");
    nnt_tensor_free(&bad);
    /* next_token_probs is the softmax of the last position's logits; rows sum to one */
    const nnt_tensor *p = nnt_trace_get(t, "next_token_probs");
    for (int b = 0; b < r.batch; b++) {
        double s = 0;
        for (int64_t v = 0; v < V; v++) s += nnt_tensor_get_f64(p, b * V + v);
        CU_ASSERT_DOUBLE_EQUAL(s, 1.0, 1e-5);
    }
    nnt_tensor_free(&normw);
    nnt_tensor_free(&head);
    nnt_trace_free(t);
    nnt_model_free(m);
    nnt_runtime_close(rt);
}

/* The router identity of the page: indices are the top-k of sigmoid(logits) + bias; weights are
 * the chosen sigmoids without the bias, renormalised. The bias comes from the checkpoint. */
static void test_router_identity(void)
{
    nnt_runtime *rt = t_runtime();
    nnt_model *m = t_model(rt, FIXTURES[0]);
    t_ref r;
    CU_ASSERT_FATAL(t_ref_open(&r, rt, FIXTURES[0]) == 0);
    nnt_trace *t = t_run_reference(rt, m, &r);
    char dir[512], file[600];
    snprintf(file, sizeof file, "%s/model.safetensors", t_fixture(FIXTURES[0], dir, sizeof dir));
    const nnt_model_info *info = nnt_model_get_info(m);
    int E = info->num_experts, K = info->top_k, biased_choices = 0;
    for (int l = 0; l < info->num_layers; l++) {
        char k[128];
        snprintf(k, sizeof k, "model.layers.%d.block_sparse_moe.e_score_correction_bias", l);
        nnt_tensor bias;
        T_OK(rt, nnt_safetensors_read(rt, file, k, &bias));
        snprintf(k, sizeof k, "layers.%d.mlp.router_logits", l);
        const nnt_tensor *lg = nnt_trace_get(t, k);
        snprintf(k, sizeof k, "layers.%d.mlp.expert_indices", l);
        const nnt_tensor *ix = nnt_trace_get(t, k);
        snprintf(k, sizeof k, "layers.%d.mlp.expert_weights", l);
        const nnt_tensor *w = nnt_trace_get(t, k);
        for (int64_t tok = 0; tok < (int64_t)r.batch * r.seq; tok++) {
            double sig[64], choice[64], sum = 0;
            for (int e = 0; e < E; e++) {
                sig[e] = 1.0 / (1.0 + exp(-nnt_tensor_get_f64(lg, tok * E + e)));
                choice[e] = sig[e] + nnt_tensor_get_f64(&bias, e);
            }
            /* the k-th best by choice must be in the set; count where the unbiased top-k differs */
            int chosen[64] = {0}, unbiased[64] = {0};
            for (int s = 0; s < K; s++) {
                int best = -1, ub = -1;
                for (int e = 0; e < E; e++) {
                    if (!chosen[e] && (best < 0 || choice[e] > choice[best])) best = e;
                    if (!unbiased[e] && (ub < 0 || sig[e] > sig[ub])) ub = e;
                }
                chosen[best] = 1;
                unbiased[ub] = 1;
            }
            for (int s = 0; s < K; s++) sum += sig[(int)nnt_tensor_get_f64(ix, tok * K + s)];
            int differs = 0;
            for (int s = 0; s < K; s++) {
                int e = (int)nnt_tensor_get_f64(ix, tok * K + s);
                CU_ASSERT(chosen[e]);
                differs |= !unbiased[e];
                CU_ASSERT_DOUBLE_EQUAL(nnt_tensor_get_f64(w, tok * K + s), sig[e] / sum, 1e-6);
            }
            biased_choices += differs;
        }
        nnt_tensor_free(&bias);
    }
    /* the fixture's bias matters somewhere, so the test can tell bias-in-weights from bias-for-choice */
    CU_ASSERT(biased_choices > 0);
    nnt_trace_free(t);
    nnt_model_free(m);
    nnt_runtime_close(rt);
}

/* ---- write semantics ---- */

/* Zeroing expert e's weight where expert_indices == e changes mlp_output on exactly the tokens
 * that chose e (every expert, every block). */
static void test_ablation(void)
{
    nnt_runtime *rt = t_runtime();
    nnt_model *m = t_model(rt, FIXTURES[0]);
    t_ref r;
    CU_ASSERT_FATAL(t_ref_open(&r, rt, FIXTURES[0]) == 0);
    for (int l = 0; l < nnt_model_get_info(m)->num_layers; l++) t_check_ablation(rt, m, &r, l);
    nnt_model_free(m);
    nnt_runtime_close(rt);
}

/* A written router_logits moves both the choice and the weights: logits of +4 on expert 5 and
 * +3 on expert 2 (0 elsewhere) make {5, 2} the choice, weighted by their renormalised sigmoids. */
static void test_write_router_logits(void)
{
    nnt_runtime *rt = t_runtime();
    nnt_model *m = t_model(rt, FIXTURES[0]);
    t_ref r;
    CU_ASSERT_FATAL(t_ref_open(&r, rt, FIXTURES[0]) == 0);
    const nnt_model_info *info = nnt_model_get_info(m);
    int E = info->num_experts, K = info->top_k;
    CU_ASSERT_FATAL(K == 2 && E > 5);
    nnt_tensor v;
    int64_t shape[3] = {r.batch, r.seq, E};
    CU_ASSERT_FATAL(nnt_tensor_alloc(&v, NNT_F32, 3, shape) == NNT_OK);
    for (int64_t tok = 0; tok < (int64_t)r.batch * r.seq; tok++) {
        ((float *)v.data)[tok * E + 5] = 4.0f;
        ((float *)v.data)[tok * E + 2] = 3.0f;
    }
    nnt_trace *t;
    T_OK(rt, nnt_trace_new(m, &t));
    T_OK(rt, nnt_trace_set(t, "layers.1.mlp.router_logits", &v));
    T_OK(rt, nnt_trace_save(t, "layers.1.mlp.router_logits"));
    T_OK(rt, nnt_trace_save(t, "layers.1.mlp.expert_indices"));
    T_OK(rt, nnt_trace_save(t, "layers.1.mlp.expert_weights"));
    T_OK(rt, nnt_trace_run(t, r.ids, r.mask, r.batch, r.seq));
    CU_ASSERT(t_rel_err(nnt_trace_get(t, "layers.1.mlp.router_logits"), &v, NULL) == 0.0);
    const nnt_tensor *ix = nnt_trace_get(t, "layers.1.mlp.expert_indices"), *w = nnt_trace_get(t, "layers.1.mlp.expert_weights");
    double s5 = 1.0 / (1.0 + exp(-4.0)), s2 = 1.0 / (1.0 + exp(-3.0));
    for (int64_t tok = 0; tok < (int64_t)r.batch * r.seq; tok++) {
        for (int s = 0; s < K; s++) {
            int e = (int)nnt_tensor_get_f64(ix, tok * K + s);
            CU_ASSERT(e == 5 || e == 2);
            CU_ASSERT_DOUBLE_EQUAL(nnt_tensor_get_f64(w, tok * K + s), (e == 5 ? s5 : s2) / (s5 + s2), 1e-6);
        }
    }
    nnt_tensor_free(&v);
    nnt_trace_free(t);
    nnt_model_free(m);
    nnt_runtime_close(rt);
}

/* A written attention_probabilities sets the mix: all weight on each row's first real key
 * makes every head output equal that key's value vector (through its key/value head). */
static void test_write_probabilities(void)
{
    nnt_runtime *rt = t_runtime();
    nnt_model *m = t_model(rt, FIXTURES[0]);
    t_ref r;
    CU_ASSERT_FATAL(t_ref_open(&r, rt, FIXTURES[0]) == 0);
    const nnt_model_info *info = nnt_model_get_info(m);
    int64_t B = r.batch, T = r.seq, Hq = info->num_heads, Hkv = info->num_kv_heads, D = info->head_dim;
    nnt_tensor p;
    int64_t shape[4] = {B, Hq, T, T};
    CU_ASSERT_FATAL(nnt_tensor_alloc(&p, NNT_F32, 4, shape) == NNT_OK);
    int first[8];
    for (int b = 0; b < B; b++) {
        first[b] = 0;
        while (!r.mask[b * T + first[b]]) first[b]++;
        for (int64_t h = 0; h < Hq; h++)
            for (int64_t q = 0; q < T; q++) ((float *)p.data)[((b * Hq + h) * T + q) * T + first[b]] = 1.0f;
    }
    nnt_trace *t;
    T_OK(rt, nnt_trace_new(m, &t));
    T_OK(rt, nnt_trace_set(t, "layers.0.self_attn.attention_probabilities", &p));
    T_OK(rt, nnt_trace_save(t, "layers.0.self_attn.attention_values"));
    T_OK(rt, nnt_trace_save(t, "layers.0.self_attn.attention_head_outputs"));
    T_OK(rt, nnt_trace_run(t, r.ids, r.mask, r.batch, r.seq));
    const nnt_tensor *v = nnt_trace_get(t, "layers.0.self_attn.attention_values");
    const nnt_tensor *o = nnt_trace_get(t, "layers.0.self_attn.attention_head_outputs");
    double worst = 0;
    for (int64_t b = 0; b < B; b++)
        for (int64_t q = 0; q < T; q++)
            for (int64_t h = 0; h < Hq; h++)
                for (int64_t d = 0; d < D; d++) {
                    double want = nnt_tensor_get_f64(v, ((b * Hkv + h / (Hq / Hkv)) * T + first[b]) * D + d);
                    double got = nnt_tensor_get_f64(o, ((b * T + q) * Hq + h) * D + d);
                    worst = fmax(worst, fabs(want - got));
                }
    CU_ASSERT(worst < 1e-6);
    nnt_tensor_free(&p);
    nnt_trace_free(t);
    nnt_model_free(m);
    nnt_runtime_close(rt);
}

/* A written layer_output reaches the next block: adding a vector to every position of block
 * 0's output shows up, exactly, in block 1's input; and steering changes the logits. */
static void test_write_layer_output(void)
{
    nnt_runtime *rt = t_runtime();
    nnt_model *m = t_model(rt, FIXTURES[0]);
    t_ref r;
    CU_ASSERT_FATAL(t_ref_open(&r, rt, FIXTURES[0]) == 0);
    int64_t H = nnt_model_get_info(m)->hidden_size, M = (int64_t)r.batch * r.seq;
    nnt_tensor vec;
    CU_ASSERT_FATAL(nnt_tensor_alloc(&vec, NNT_F32, 1, &H) == NNT_OK);
    for (int64_t h = 0; h < H; h++) ((float *)vec.data)[h] = (float)(h % 7) - 3.0f;
    nnt_trace *clean, *t;
    T_OK(rt, nnt_trace_new(m, &clean));
    T_OK(rt, nnt_trace_save(clean, "layers.0.layer_output"));
    T_OK(rt, nnt_trace_save(clean, "logits"));
    T_OK(rt, nnt_trace_run(clean, r.ids, r.mask, r.batch, r.seq));
    T_OK(rt, nnt_trace_new(m, &t));
    T_OK(rt, nnt_trace_add(t, "layers[0].output", &vec, 0.5f));
    T_OK(rt, nnt_trace_save(t, "layers.1.input"));
    T_OK(rt, nnt_trace_save(t, "logits"));
    T_OK(rt, nnt_trace_run(t, r.ids, r.mask, r.batch, r.seq));
    const nnt_tensor *a = nnt_trace_get(clean, "layers.0.layer_output"), *b = nnt_trace_get(t, "layers.1.layer_input");
    double worst = 0;
    for (int64_t i = 0; i < M * H; i++)
        worst = fmax(worst, fabs(nnt_tensor_get_f64(a, i) + 0.5 * ((float *)vec.data)[i % H] - nnt_tensor_get_f64(b, i)));
    CU_ASSERT(worst < 1e-6);
    CU_ASSERT(t_rel_err(nnt_trace_get(t, "logits"), nnt_trace_get(clean, "logits"), NULL) > 1e-3);
    nnt_tensor_free(&vec);
    nnt_trace_free(clean);
    nnt_trace_free(t);
    nnt_model_free(m);
    nnt_runtime_close(rt);
}

/* An edit callback sees the value and its changes are what later values see; requests on one
 * value run in order, so a save before the edit keeps the original. */
static nnt_status zero_head0(void *user, const char *path, int layer, nnt_tensor *v, nnt_error *err)
{
    int *calls = user;
    (*calls)++;
    if (v->ndim != 4 || strcmp(path, "layers.1.self_attn.attention_queries") != 0 || layer != 1) {
        snprintf(err->msg, sizeof err->msg, "unexpected value %s", path);
        return NNT_ERR_INVALID_ARGUMENT;
    }
    int64_t B = v->shape[0], H = v->shape[1], TD = v->shape[2] * v->shape[3];
    for (int64_t b = 0; b < B; b++) memset((float *)v->data + b * H * TD, 0, (size_t)TD * sizeof(float));
    return NNT_OK;
}

static nnt_status failing_edit(void *user, const char *path, int layer, nnt_tensor *v, nnt_error *err)
{
    snprintf(err->msg, sizeof err->msg, "refusing %s", path);
    return NNT_ERR_INVALID_ARGUMENT;
}

static void test_edit_callback(void)
{
    nnt_runtime *rt = t_runtime();
    nnt_model *m = t_model(rt, FIXTURES[0]);
    t_ref r;
    CU_ASSERT_FATAL(t_ref_open(&r, rt, FIXTURES[0]) == 0);
    int calls = 0;
    nnt_trace *t;
    T_OK(rt, nnt_trace_new(m, &t));
    T_OK(rt, nnt_trace_save(t, "layers.1.self_attn.attention_queries"));
    T_OK(rt, nnt_trace_edit(t, "layers.1.self_attn.attention_queries", zero_head0, &calls));
    T_OK(rt, nnt_trace_save(t, "layers.1.self_attn.attention_queries"));
    T_OK(rt, nnt_trace_save(t, "layers.1.self_attn.attention_scores"));
    T_OK(rt, nnt_trace_run(t, r.ids, r.mask, r.batch, r.seq));
    CU_ASSERT_EQUAL(calls, 1);
    CU_ASSERT_EQUAL(nnt_trace_result_count(t), 3);
    const char *p0, *p1;
    const nnt_tensor *before, *after, *scores;
    nnt_trace_result(t, 0, &p0, &before);
    nnt_trace_result(t, 1, &p1, &after);
    scores = nnt_trace_get(t, "layers.1.self_attn.attention_scores");
    int64_t TD = after->shape[2] * after->shape[3], T = r.seq;
    double head0 = 0, other_before = 0, other_after = 0;
    for (int64_t i = 0; i < TD; i++) {
        head0 += fabs(nnt_tensor_get_f64(after, i));
        other_before += nnt_tensor_get_f64(before, TD + i);
        other_after += nnt_tensor_get_f64(after, TD + i);
    }
    CU_ASSERT(head0 == 0.0);
    CU_ASSERT(other_before == other_after);
    CU_ASSERT(nnt_tensor_get_f64(before, 0) != 0.0);
    /* head 0's scores are 0 at every visible key of row 0 */
    for (int64_t q = 0; q < T; q++)
        for (int64_t k = 0; k <= q; k++) CU_ASSERT(nnt_tensor_get_f64(scores, q * T + k) == 0.0);
    nnt_trace_free(t);
    /* a failing callback stops the run with its message */
    T_OK(rt, nnt_trace_new(m, &t));
    T_OK(rt, nnt_trace_edit(t, "layers.0.layer_mid", failing_edit, NULL));
    T_FAILS(rt, nnt_trace_run(t, r.ids, r.mask, r.batch, r.seq), NNT_ERR_CALLBACK, "refusing layers.0.layer_mid");
    nnt_trace_free(t);
    nnt_model_free(m);
    nnt_runtime_close(rt);
}

/* Left padding does not move a row's real tokens: the padded row of the batch equals the same
 * prompt run alone (positions count real tokens from 0). */
static void test_padding_invariance(void)
{
    nnt_runtime *rt = t_runtime();
    nnt_model *m = t_model(rt, FIXTURES[0]);
    t_ref r;
    CU_ASSERT_FATAL(t_ref_open(&r, rt, FIXTURES[0]) == 0);
    int b = 1, pads = 0;
    while (!r.mask[b * r.seq + pads]) pads++;
    CU_ASSERT_FATAL(pads > 0);
    int n = r.seq - pads;
    nnt_trace *batch, *alone;
    T_OK(rt, nnt_trace_new(m, &batch));
    T_OK(rt, nnt_trace_save(batch, "logits"));
    T_OK(rt, nnt_trace_run(batch, r.ids, r.mask, r.batch, r.seq));
    T_OK(rt, nnt_trace_new(m, &alone));
    T_OK(rt, nnt_trace_save(alone, "logits"));
    T_OK(rt, nnt_trace_run(alone, r.ids + b * r.seq + pads, NULL, 1, n));
    const nnt_tensor *x = nnt_trace_get(batch, "logits"), *y = nnt_trace_get(alone, "logits");
    int64_t V = x->shape[2];
    double worst = 0, scale = 0;
    for (int t = 0; t < n; t++)
        for (int64_t v = 0; v < V; v++) {
            double a = nnt_tensor_get_f64(x, ((int64_t)b * r.seq + pads + t) * V + v), c = nnt_tensor_get_f64(y, (int64_t)t * V + v);
            worst = fmax(worst, fabs(a - c));
            scale = fmax(scale, fabs(c));
        }
    CU_ASSERT(worst <= 1e-5 * scale);
    nnt_trace_free(batch);
    nnt_trace_free(alone);
    nnt_model_free(m);
    nnt_runtime_close(rt);
}

/* Collects hub-named experts into fused buffers and moves block_sparse_moe.* to mlp.*. */
typedef struct fuse_ctx {
    int E, I, H;
    float *gu, *dn; /* [L, E, 2I, H], [L, E, H, I] */
} fuse_ctx;

static int fuse_experts(void *user, char *name, size_t n, const nnt_tensor *in, nnt_tensor *out, int *owned)
{
    fuse_ctx *c = user;
    int layer, ex;
    char which[8];
    if (sscanf(name, "model.layers.%d.block_sparse_moe.experts.%d.%2[w0-9].weight", &layer, &ex, which) == 3) {
        size_t sz = (size_t)c->I * c->H, base = (size_t)layer * c->E + ex;
        if (strcmp(which, "w1") == 0) memcpy(c->gu + base * 2 * sz, in->data, sz * sizeof(float));
        if (strcmp(which, "w3") == 0) memcpy(c->gu + base * 2 * sz + sz, in->data, sz * sizeof(float));
        if (strcmp(which, "w2") == 0) memcpy(c->dn + base * sz, in->data, sz * sizeof(float));
        return 0;
    }
    char *moe = strstr(name, "block_sparse_moe.");
    if (moe) {
        char rest[256];
        snprintf(rest, sizeof rest, "%s", moe + strlen("block_sparse_moe."));
        snprintf(moe, n - (size_t)(moe - name), "mlp.%s", rest);
    }
    return 1;
}

/* transformers' in-memory names: experts fused into 3-D tensors (gate rows, then up rows),
 * the router and bias under mlp. A checkpoint written that way loads and gives the same
 * values as the hub spelling. */
static void test_fused_expert_names(void)
{
    enum { L = 3, E = 8, I = 48, H = 64 };
    char dir[768], fx[512], src[768], dst[800];
    t_checkpoint_dir("fused", FIXTURES[0], dir, sizeof dir);
    snprintf(src, sizeof src, "%s/model.safetensors", t_fixture(FIXTURES[0], fx, sizeof fx));
    snprintf(dst, sizeof dst, "%s/model.safetensors", dir);
    fuse_ctx c = {E, I, H, malloc(sizeof(float) * L * E * 2 * I * H), malloc(sizeof(float) * L * E * H * I)};
    CU_ASSERT_FATAL(c.gu && c.dn);
    /* first pass fills the fused buffers, second writes them alongside the renamed rest */
    nnt_tensor fused[2 * L];
    char names[2 * L][96];
    const char *keys[2 * L];
    for (int l = 0; l < L; l++) {
        snprintf(names[2 * l], sizeof names[0], "model.layers.%d.mlp.experts.gate_up_proj", l);
        fused[2 * l] = (nnt_tensor){.dtype = NNT_F32, .ndim = 3, .shape = {E, 2 * I, H}, .data = c.gu + (size_t)l * E * 2 * I * H};
        snprintf(names[2 * l + 1], sizeof names[0], "model.layers.%d.mlp.experts.down_proj", l);
        fused[2 * l + 1] = (nnt_tensor){.dtype = NNT_F32, .ndim = 3, .shape = {E, H, I}, .data = c.dn + (size_t)l * E * H * I};
        keys[2 * l] = names[2 * l];
        keys[2 * l + 1] = names[2 * l + 1];
    }
    CU_ASSERT_EQUAL_FATAL(t_rewrite_weights(src, dst, fuse_experts, &c, 0, NULL, NULL), 0);
    CU_ASSERT_EQUAL_FATAL(t_rewrite_weights(src, dst, fuse_experts, &c, 2 * L, keys, fused), 0);

    nnt_runtime *rt = t_runtime();
    nnt_model *m = NULL;
    T_OK(rt, nnt_model_load(rt, dir, &m));
    t_ref r;
    CU_ASSERT_FATAL(t_ref_open(&r, rt, FIXTURES[0]) == 0);
    nnt_trace *t = t_run_reference(rt, m, &r);
    CU_ASSERT(t_check_reference(&r, t) > 0);
    nnt_trace_free(t);
    nnt_model_free(m);
    nnt_runtime_close(rt);
    free(c.gu);
    free(c.dn);
}

static int to_f16(void *user, char *name, size_t n, const nnt_tensor *in, nnt_tensor *out, int *owned)
{
    nnt_error err;
    if (nnt_tensor_alloc(out, NNT_F16, in->ndim, in->shape) != NNT_OK) return 0;
    *owned = 1;
    return nnt_convert(in->data, in->dtype, out->data, NNT_F16, nnt_tensor_numel(in), &err) == NNT_OK;
}

/* An F16 copy of the fp32 checkpoint loads through the F16 path and stays within half
 * precision's rounding of the reference (10-bit mantissa: about 5e-4 per weight). */
static void test_f16_weights(void)
{
    char dir[768], fx[512], src[768], dst[800];
    t_checkpoint_dir("f16", FIXTURES[0], dir, sizeof dir);
    snprintf(src, sizeof src, "%s/model.safetensors", t_fixture(FIXTURES[0], fx, sizeof fx));
    snprintf(dst, sizeof dst, "%s/model.safetensors", dir);
    CU_ASSERT_EQUAL_FATAL(t_rewrite_weights(src, dst, to_f16, NULL, 0, NULL, NULL), 0);
    nnt_runtime *rt = t_runtime();
    nnt_model *m = NULL;
    T_OK(rt, nnt_model_load(rt, dir, &m));
    t_ref r;
    CU_ASSERT_FATAL(t_ref_open(&r, rt, FIXTURES[0]) == 0);
    nnt_trace *t;
    T_OK(rt, nnt_trace_new(m, &t));
    T_OK(rt, nnt_trace_save(t, "logits"));
    T_OK(rt, nnt_trace_run(t, r.ids, r.mask, r.batch, r.seq));
    nnt_tensor ref;
    CU_ASSERT_FATAL(t_ref_get(&r, "logits", &ref) == 0);
    unsigned char *sel = t_sel_tokens(&r, &ref);
    double e = t_rel_err(nnt_trace_get(t, "logits"), &ref, sel);
    CU_ASSERT(e > 0 && e < 1e-2);
    free(sel);
    nnt_tensor_free(&ref);
    nnt_trace_free(t);
    nnt_model_free(m);
    nnt_runtime_close(rt);
}

int register_tests(void)
{
    CU_pSuite s = CU_add_suite("minimax_m2", NULL, NULL);
    if (!s) return -1;
    if (!CU_add_test(s, "fp32 fixture matches transformers on every value", test_fp32) ||
        !CU_add_test(s, "bf16 sharded fixture matches transformers", test_bf16_sharded) ||
        !CU_add_test(s, "fp8 block-scaled fixture matches transformers", test_fp8_blocks) ||
        !CU_add_test(s, "fused 3-D expert tensors load like the hub's", test_fused_expert_names) ||
        !CU_add_test(s, "F16 weights decode within half precision", test_f16_weights) ||
        !CU_add_test(s, "bf16 compute in transformers stays close", test_bf16_compute_close) ||
        !CU_add_test(s, "precision = bf16 is as close to transformers-bf16 as transformers-bf16 is to fp32",
                     test_bf16_precision) ||
        !CU_add_test(s, "the default precision from a written INI matches the fp32 reference",
                     test_default_precision_from_written_ini) ||
        !CU_add_test(s, "the MoE combine without the backend's scale_rows gives the same numbers",
                     test_combine_without_scale_rows) ||
        !CU_add_test(s, "page identities: block sum, experts sum, lens", test_identities) ||
        !CU_add_test(s, "router identity: bias chooses, sigmoid weighs", test_router_identity) ||
        !CU_add_test(s, "expert ablation changes exactly the routed tokens", test_ablation) ||
        !CU_add_test(s, "written router_logits move choice and weights", test_write_router_logits) ||
        !CU_add_test(s, "written attention_probabilities set the mix", test_write_probabilities) ||
        !CU_add_test(s, "written layer_output reaches the next block", test_write_layer_output) ||
        !CU_add_test(s, "edit callbacks run in request order", test_edit_callback) ||
        !CU_add_test(s, "left padding leaves real tokens unchanged", test_padding_invariance))
        return -1;
    return 0;
}
