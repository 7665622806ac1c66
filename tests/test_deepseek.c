/* test_deepseek.c - the DeepSeek-V4 family against transformers' references (fixtures written by
 * tests/fixtures/make_fixtures.py): every stored value at five prompt lengths around the
 * compression boundaries, on transformers' save_pretrained checkpoint and on the release's native
 * FP8/FP4 layout; the lightning indexer's selection; the hyper-connection block formula from the
 * page; hash routing's independence from the hidden state; ablation; refused inputs. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"

static const int FP32_LENGTHS[] = {3, 4, 5, 13, 40};
static const int NATIVE_LENGTHS[] = {13, 40};

static nnt_model *load(nnt_runtime *rt, const char *dir) { return t_model(rt, dir); }

static void open_ref(t_ref *r, nnt_runtime *rt, const char *dir, int length)
{
    char rel[128];
    snprintf(rel, sizeof rel, "%s/reference_L%d.safetensors", dir, length);
    CU_ASSERT_FATAL(t_ref_open(r, rt, rel) == 0);
}

/* On compressed sparse blocks, the compressed entries a query may attend to are exactly the
 * indexer's selection in the reference: nnt's scores are finite there and -inf elsewhere. */
static void check_selection(nnt_runtime *rt, nnt_model *m, const t_ref *r)
{
    int L = nnt_model_get_info(m)->num_layers, blocks = 0;
    for (int l = 0; l < L; l++) {
        char key[96];
        snprintf(key, sizeof key, "layers.%d.self_attn.indexer_selection", l);
        nnt_tensor sel;
        if (t_ref_get(r, key, &sel) != 0) continue;
        blocks++;
        char sk[96];
        snprintf(sk, sizeof sk, "layers.%d.self_attn.attention_scores", l);
        nnt_trace *t;
        T_OK(rt, nnt_trace_new(m, &t));
        T_OK(rt, nnt_trace_save(t, sk));
        T_OK(rt, nnt_trace_run(t, r->ids, r->mask, r->batch, r->seq));
        const nnt_tensor *sc = nnt_trace_get(t, sk);
        CU_ASSERT_FATAL(sc != NULL);
        int64_t B = r->batch, S = r->seq, Hh = sc->shape[1], K = sc->shape[3], C = K - S, k = sel.ndim == 3 ? sel.shape[2] : 0;
        int wrong = 0;
        for (int64_t b = 0; b < B; b++)
            for (int64_t q = 0; q < S; q++)
                for (int64_t w = 0; w < C; w++) {
                    int chosen = 0;
                    for (int64_t j = 0; j < k; j++) chosen |= (int64_t)nnt_tensor_get_f64(&sel, (b * S + q) * k + j) == w;
                    for (int64_t h = 0; h < Hh; h++) {
                        double v = nnt_tensor_get_f64(sc, ((b * Hh + h) * S + q) * K + S + w);
                        wrong += chosen != (isfinite(v) != 0);
                    }
                }
        if (wrong) fprintf(stderr, "\n  %s: %s: %d entries disagree with the indexer's selection\n", r->path, key, wrong);
        CU_ASSERT_EQUAL(wrong, 0);
        nnt_tensor_free(&sel);
        nnt_trace_free(t);
    }
    CU_ASSERT(blocks > 0);
}

/* Every stored value, at every stored length, then values the references leave out because
 * they equal stored ones: attention_values is the keys' tensor, lm_head_output is logits. */
static void check_fixture(const char *dir, const int *lengths, int n_lengths)
{
    nnt_runtime *rt = t_runtime();
    nnt_model *m = load(rt, dir);
    for (int i = 0; i < n_lengths; i++) {
        t_ref r;
        open_ref(&r, rt, dir, lengths[i]);
        nnt_trace *t = t_run_reference(rt, m, &r);
        int checked = t_check_reference(&r, t);
        CU_ASSERT(checked >= 10);
        nnt_trace_free(t);
        check_selection(rt, m, &r);
        /* the omitted duplicates */
        nnt_trace *d;
        T_OK(rt, nnt_trace_new(m, &d));
        T_OK(rt, nnt_trace_save(d, "layers.1.self_attn.attention_keys"));
        T_OK(rt, nnt_trace_save(d, "layers.1.self_attn.attention_values"));
        T_OK(rt, nnt_trace_save(d, "lm_head_output"));
        T_OK(rt, nnt_trace_save(d, "logits"));
        T_OK(rt, nnt_trace_run(d, r.ids, r.mask, r.batch, r.seq));
        CU_ASSERT(t_rel_err(nnt_trace_get(d, "layers.1.self_attn.attention_keys"),
                            nnt_trace_get(d, "layers.1.self_attn.attention_values"), NULL) == 0.0);
        CU_ASSERT(t_rel_err(nnt_trace_get(d, "lm_head_output"), nnt_trace_get(d, "logits"), NULL) == 0.0);
        nnt_trace_free(d);
    }
    nnt_model_free(m);
    nnt_runtime_close(rt);
}

static void test_fp32(void) { check_fixture("deepseek_v4/fp32", FP32_LENGTHS, 5); }
static void test_native(void) { check_fixture("deepseek_v4/native", NATIVE_LENGTHS, 2); }

/* The page's block formula, stream by stream: h = comb_a^T x + post_a (x) attention_output and
 * layer_output = comb_f^T h + post_f (x) mlp_output (stream k of comb^T x is sum_j comb[j,k] x_j);
 * every comb column sums to one (Sinkhorn's last step normalises columns); post lies in (0, 2). */
static void test_block_formula(void)
{
    nnt_runtime *rt = t_runtime();
    nnt_model *m = load(rt, "deepseek_v4/fp32");
    t_ref r;
    open_ref(&r, rt, "deepseek_v4/fp32", 40);
    const nnt_model_info *mi = nnt_model_get_info(m);
    int n = mi->num_streams, H = mi->hidden_size;
    CU_ASSERT_EQUAL_FATAL(n, 4);
    static const char *const names[] = {"layer_input", "attention_comb", "attention_post", "self_attn.attention_output",
                                        "mlp_comb", "mlp_post", "mlp.mlp_output", "layer_output"};
    nnt_trace *t;
    T_OK(rt, nnt_trace_new(m, &t));
    for (int l = 0; l < mi->num_layers; l++)
        for (int i = 0; i < 8; i++) {
            char k[96];
            snprintf(k, sizeof k, "layers.%d.%s", l, names[i]);
            T_OK(rt, nnt_trace_save(t, k));
        }
    T_OK(rt, nnt_trace_run(t, r.ids, r.mask, r.batch, r.seq));
    int64_t M = (int64_t)r.batch * r.seq;
    double *hbuf = malloc(sizeof(double) * (size_t)(n * H));
    double worst = 0, scale = 0, col_err = 0, post_min = 1e9, post_max = -1e9;
    for (int l = 0; l < mi->num_layers; l++) {
        const nnt_tensor *v[8];
        for (int i = 0; i < 8; i++) {
            char k[96];
            snprintf(k, sizeof k, "layers.%d.%s", l, names[i]);
            v[i] = nnt_trace_get(t, k);
            CU_ASSERT_FATAL(v[i] != NULL);
        }
        for (int64_t tok = 0; tok < M; tok++) {
            for (int pass = 0; pass < 2; pass++) {
                const nnt_tensor *comb = v[pass ? 4 : 1], *post = v[pass ? 5 : 2], *sub = v[pass ? 6 : 3];
                for (int kk = 0; kk < n; kk++) {
                    double csum = 0;
                    for (int j = 0; j < n; j++) csum += nnt_tensor_get_f64(comb, (tok * n + j) * n + kk);
                    col_err = fmax(col_err, fabs(csum - 1.0));
                    double p = nnt_tensor_get_f64(post, tok * n + kk);
                    post_min = fmin(post_min, p);
                    post_max = fmax(post_max, p);
                }
                double out[4 * 1024];
                for (int kk = 0; kk < n; kk++)
                    for (int h = 0; h < H; h++) {
                        double acc = nnt_tensor_get_f64(post, tok * n + kk) * nnt_tensor_get_f64(sub, tok * H + h);
                        for (int j = 0; j < n; j++) {
                            double xj = pass ? hbuf[j * H + h] : nnt_tensor_get_f64(v[0], (tok * n + j) * H + h);
                            acc += nnt_tensor_get_f64(comb, (tok * n + j) * n + kk) * xj;
                        }
                        out[kk * H + h] = acc;
                    }
                for (int i = 0; i < n * H; i++) {
                    if (!pass) {
                        hbuf[i] = out[i];
                        continue;
                    }
                    double want = nnt_tensor_get_f64(v[7], tok * n * H + i);
                    worst = fmax(worst, fabs(out[i] - want));
                    scale = fmax(scale, fabs(want));
                }
            }
        }
    }
    if (worst > 1e-5 * scale) fprintf(stderr, "\n  block formula off by %.3g of %.3g\n", worst, scale);
    CU_ASSERT(worst <= 1e-5 * scale);
    CU_ASSERT(col_err < 1e-4);
    CU_ASSERT(post_min > 0.0 && post_max < 2.0);
    free(hbuf);
    nnt_trace_free(t);
    nnt_model_free(m);
    nnt_runtime_close(rt);
}

/* Hash routing reads the token id only: a perturbed input to a hash block keeps its experts
 * (tid2eid[input_ids]) while their weights move; ablating an expert there and on a scored block
 * zeroes exactly the slots that chose it. */
static void test_hash_routing(void)
{
    nnt_runtime *rt = t_runtime();
    nnt_model *m = load(rt, "deepseek_v4/fp32");
    t_ref r;
    open_ref(&r, rt, "deepseek_v4/fp32", 13);
    int64_t H = nnt_model_get_info(m)->hidden_size;
    nnt_tensor noise;
    CU_ASSERT_FATAL(nnt_tensor_alloc(&noise, NNT_F32, 1, &H) == NNT_OK);
    for (int64_t h = 0; h < H; h++) ((float *)noise.data)[h] = (float)(((h * 37) % 17) - 8) * 0.25f;
    nnt_trace *clean, *moved;
    T_OK(rt, nnt_trace_new(m, &clean));
    T_OK(rt, nnt_trace_save(clean, "layers.1.mlp.expert_indices"));
    T_OK(rt, nnt_trace_save(clean, "layers.1.mlp.expert_weights"));
    T_OK(rt, nnt_trace_run(clean, r.ids, r.mask, r.batch, r.seq));
    T_OK(rt, nnt_trace_new(m, &moved));
    T_OK(rt, nnt_trace_add(moved, "layers.1.layer_input", &noise, 1.0f));
    T_OK(rt, nnt_trace_save(moved, "layers.1.mlp.expert_indices"));
    T_OK(rt, nnt_trace_save(moved, "layers.1.mlp.expert_weights"));
    T_OK(rt, nnt_trace_run(moved, r.ids, r.mask, r.batch, r.seq));
    CU_ASSERT(t_rel_err(nnt_trace_get(clean, "layers.1.mlp.expert_indices"), nnt_trace_get(moved, "layers.1.mlp.expert_indices"),
                        NULL) == 0.0);
    CU_ASSERT(t_rel_err(nnt_trace_get(clean, "layers.1.mlp.expert_weights"), nnt_trace_get(moved, "layers.1.mlp.expert_weights"),
                        NULL) > 1e-3);
    t_check_ablation(rt, m, &r, 0); /* hash */
    t_check_ablation(rt, m, &r, 2); /* scored */
    nnt_tensor_free(&noise);
    nnt_trace_free(clean);
    nnt_trace_free(moved);
    nnt_model_free(m);
    nnt_runtime_close(rt);
}

/* What the family refuses, and the values it does not serve with their reasons. */
static void test_refusals(void)
{
    nnt_runtime *rt = t_runtime();
    nnt_model *m = load(rt, "deepseek_v4/fp32");
    int32_t ids[2 * 6] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, mask[2 * 6] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 1, 1};
    nnt_trace *t;
    T_OK(rt, nnt_trace_new(m, &t));
    T_OK(rt, nnt_trace_save(t, "logits"));
    T_FAILS(rt, nnt_trace_run(t, ids, mask, 2, 6), NNT_ERR_INVALID_ARGUMENT, "needs left padding");
    nnt_call_dims dims = {1, 4, 0};
    nnt_value_info vi;
    const char *paths[][2] = {{"layers.0.self_attn.attention_premix", "low-rank output projection"},
                              {"layers.0.mlp.mlp_activation", "mixture"},
                              {"layers.0.layer_mid", "streams"}};
    for (int i = 0; i < 3; i++) {
        T_OK(rt, nnt_model_value_info(m, paths[i][0], &dims, &vi));
        CU_ASSERT_EQUAL(vi.served, 0);
        CU_ASSERT_PTR_NOT_NULL(vi.reason ? strstr(vi.reason, paths[i][1]) : NULL);
    }
    T_FAILS(rt, nnt_trace_save(t, "layers.0.layer_mid"), NNT_ERR_NOT_SERVED, "streams");
    nnt_trace_free(t);
    nnt_model_free(m);
    nnt_runtime_close(rt);
}

int register_tests(void)
{
    CU_pSuite s = CU_add_suite("deepseek", NULL, NULL);
    if (!s) return -1;
    if (!CU_add_test(s, "fp32 (save_pretrained names): every value at 3, 4, 5, 13, 40 tokens", test_fp32) ||
        !CU_add_test(s, "native FP8/FP4: values at 13 and 40 tokens", test_native) ||
        !CU_add_test(s, "hyper-connection block formula, comb columns, post range", test_block_formula) ||
        !CU_add_test(s, "hash routing ignores the hidden state; ablation", test_hash_routing) ||
        !CU_add_test(s, "refused inputs and unserved values", test_refusals))
        return -1;
    return 0;
}
