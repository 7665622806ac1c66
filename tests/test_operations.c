/* test_operations.c - nnterp's operations on every family, each checked by the identity that
 * defines it: the lens of the last block's output is logits; after skip_layers(s, e) block e's
 * output is block s's input; steer adds factor * vector to layer_output at the chosen positions
 * (every stream) and nowhere else; requests with bad arguments fail before any forward. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"

/* each family's fixture directory and the reference file whose prompts the checks run */
static const char *const FAMILIES[][2] = {{"minimax_m2/fp32", "minimax_m2/fp32"},
                                          {"mimo_v2_flash/fp32", "mimo_v2_flash/fp32"},
                                          {"kimi_linear/fp32", "kimi_linear/fp32"},
                                          {"deepseek_v4/fp32", "deepseek_v4/fp32/reference_L13.safetensors"}};
#define N_FAMILIES (sizeof FAMILIES / sizeof *FAMILIES)

/* Largest |a - b|. */
static double max_diff(const nnt_tensor *a, const nnt_tensor *b)
{
    double w = 0;
    for (int64_t i = 0; i < nnt_tensor_numel(a); i++) w = fmax(w, fabs(nnt_tensor_get_f64(a, i) - nnt_tensor_get_f64(b, i)));
    return w;
}

/* The lens (project_on_vocab) of the last block's output equals logits exactly, on every family;
 * a tensor whose last axis is not hidden_size is refused. */
static void test_lens(void)
{
    for (size_t f = 0; f < N_FAMILIES; f++) {
        nnt_runtime *rt = t_runtime();
        nnt_model *m = t_model(rt, FAMILIES[f][0]);
        t_ref r;
        CU_ASSERT_FATAL(t_ref_open(&r, rt, FAMILIES[f][1]) == 0);
        const nnt_model_info *mi = nnt_model_get_info(m);
        char last[64];
        snprintf(last, sizeof last, "layers.%d.layer_output", mi->num_layers - 1);
        nnt_trace *t;
        T_OK(rt, nnt_trace_new(m, &t));
        T_OK(rt, nnt_trace_save(t, last));
        T_OK(rt, nnt_trace_save(t, "logits"));
        T_OK(rt, nnt_trace_run(t, r.ids, r.mask, r.batch, r.seq));
        nnt_tensor lens = {0};
        T_OK(rt, nnt_project_on_vocab(m, nnt_trace_get(t, last), &lens));
        const nnt_tensor *lg = nnt_trace_get(t, "logits");
        CU_ASSERT_EQUAL_FATAL(nnt_tensor_numel(&lens), nnt_tensor_numel(lg));
        double d = max_diff(&lens, lg);
        if (d != 0.0) fprintf(stderr, "\n  %s: lens of the last block differs from logits by %.3g\n", FAMILIES[f][0], d);
        CU_ASSERT(d == 0.0);
        nnt_tensor_free(&lens);
        nnt_tensor bad;
        int64_t shape[2] = {2, mi->hidden_size + 1};
        CU_ASSERT_FATAL(nnt_tensor_alloc(&bad, NNT_F32, 2, shape) == NNT_OK);
        CU_ASSERT_EQUAL(nnt_project_on_vocab(m, &bad, &lens), NNT_ERR_SHAPE);
        nnt_tensor_free(&bad);
        nnt_trace_free(t);
        nnt_model_free(m);
        nnt_runtime_close(rt);
    }
}

/* skip_layers(s, e): block e's output is block s's input, block e + 1 reads it, the logits move. */
static void test_skip_layers(void)
{
    for (size_t f = 0; f < N_FAMILIES; f++) {
        nnt_runtime *rt = t_runtime();
        nnt_model *m = t_model(rt, FAMILIES[f][0]);
        t_ref r;
        CU_ASSERT_FATAL(t_ref_open(&r, rt, FAMILIES[f][1]) == 0);
        int L = nnt_model_get_info(m)->num_layers;
        int s = 1, e = L - 2;
        char in_s[64], out_e[64], in_next[64];
        snprintf(in_s, sizeof in_s, "layers.%d.layer_input", s);
        snprintf(out_e, sizeof out_e, "layers.%d.layer_output", e);
        snprintf(in_next, sizeof in_next, "layers.%d.layer_input", e + 1);
        nnt_trace *clean, *t;
        T_OK(rt, nnt_trace_new(m, &clean));
        T_OK(rt, nnt_trace_save(clean, "logits"));
        T_OK(rt, nnt_trace_run(clean, r.ids, r.mask, r.batch, r.seq));
        T_OK(rt, nnt_trace_new(m, &t));
        T_OK(rt, nnt_trace_save(t, in_s));
        T_OK(rt, nnt_trace_skip_layers(t, s, e));
        T_OK(rt, nnt_trace_save(t, out_e));
        T_OK(rt, nnt_trace_save(t, in_next));
        T_OK(rt, nnt_trace_save(t, "logits"));
        T_OK(rt, nnt_trace_run(t, r.ids, r.mask, r.batch, r.seq));
        const nnt_tensor *a = nnt_trace_get(t, in_s), *b = nnt_trace_get(t, out_e), *c = nnt_trace_get(t, in_next);
        CU_ASSERT_FATAL(a && b && c);
        CU_ASSERT(max_diff(a, b) == 0.0);
        CU_ASSERT(max_diff(a, c) == 0.0);
        CU_ASSERT(t_rel_err(nnt_trace_get(t, "logits"), nnt_trace_get(clean, "logits"), NULL) > 1e-3);
        /* bad ranges are refused when requested */
        T_FAILS(rt, nnt_trace_skip_layers(t, 2, 1), NNT_ERR_INDEX, "skip_layers(2, 1)");
        T_FAILS(rt, nnt_trace_skip_layers(t, 0, L), NNT_ERR_INDEX, "start <= end <");
        nnt_trace_free(clean);
        nnt_trace_free(t);
        nnt_model_free(m);
        nnt_runtime_close(rt);
    }
}

/* steer(first, last, positions, v, factor): at block `first` the output moves by factor * v at
 * the chosen tokens of every row (and every stream; positions count each row's real tokens) and
 * stays bit-identical elsewhere, left padding included. */
static void check_steer(const char *const fixture[2], const int *positions, int n_positions)
{
    const char *rel = fixture[0];
    nnt_runtime *rt = t_runtime();
    nnt_model *m = t_model(rt, rel);
    t_ref r;
    CU_ASSERT_FATAL(t_ref_open(&r, rt, fixture[1]) == 0);
    const nnt_model_info *mi = nnt_model_get_info(m);
    int64_t H = mi->hidden_size;
    const int first = 1, last = 2;
    const float factor = 2.5f;
    nnt_tensor v;
    CU_ASSERT_FATAL(nnt_tensor_alloc(&v, NNT_F32, 1, &H) == NNT_OK);
    for (int64_t h = 0; h < H; h++) ((float *)v.data)[h] = (float)((h * 5) % 11) / 11.0f - 0.4f;
    char out_first[64], out_last[64];
    snprintf(out_first, sizeof out_first, "layers.%d.layer_output", first);
    snprintf(out_last, sizeof out_last, "layers.%d.layer_output", last);
    nnt_trace *clean, *t;
    T_OK(rt, nnt_trace_new(m, &clean));
    T_OK(rt, nnt_trace_save(clean, out_first));
    T_OK(rt, nnt_trace_save(clean, "logits"));
    T_OK(rt, nnt_trace_run(clean, r.ids, r.mask, r.batch, r.seq));
    T_OK(rt, nnt_trace_new(m, &t));
    T_OK(rt, nnt_trace_steer(t, first, last, positions, n_positions, &v, factor));
    T_OK(rt, nnt_trace_save(t, out_first));
    T_OK(rt, nnt_trace_save(t, "logits"));
    T_OK(rt, nnt_trace_run(t, r.ids, r.mask, r.batch, r.seq));
    const nnt_tensor *a = nnt_trace_get(clean, out_first), *b = nnt_trace_get(t, out_first);
    CU_ASSERT_FATAL(a && b);
    int64_t per = nnt_tensor_numel(a) / ((int64_t)r.batch * r.seq); /* streams x hidden */
    double worst = 0;
    int64_t n_chosen = 0;
    for (int64_t row = 0; row < r.batch; row++) {
        /* positions count the row's real tokens: left padding is never steered */
        int len = 0, p = 0;
        for (int64_t s = 0; s < r.seq; s++) len += r.mask[row * r.seq + s];
        for (int64_t s = 0; s < r.seq; s++) {
            int real = r.mask[row * r.seq + s];
            int chosen = real && n_positions == 0;
            for (int k = 0; real && k < n_positions; k++) chosen |= (positions[k] < 0 ? positions[k] + len : positions[k]) == p;
            p += real;
            n_chosen += chosen;
            for (int64_t j = 0; j < per; j++) {
                int64_t i = (row * r.seq + s) * per + j;
                double want = nnt_tensor_get_f64(a, i) + (chosen ? factor * ((float *)v.data)[j % H] : 0.0);
                worst = fmax(worst, fabs(nnt_tensor_get_f64(b, i) - want));
            }
        }
    }
    CU_ASSERT(n_chosen >= r.batch); /* every row was steered somewhere */
    if (worst > 1e-5) fprintf(stderr, "\n  %s: steered output off by %.3g\n", rel, worst);
    CU_ASSERT(worst <= 1e-5);
    CU_ASSERT(t_rel_err(nnt_trace_get(t, "logits"), nnt_trace_get(clean, "logits"), NULL) > 1e-4);
    /* a vector of the wrong length, or blocks out of range, are refused */
    nnt_tensor short_v;
    int64_t Hm = H - 1;
    CU_ASSERT_FATAL(nnt_tensor_alloc(&short_v, NNT_F32, 1, &Hm) == NNT_OK);
    T_FAILS(rt, nnt_trace_steer(t, 0, 0, NULL, 0, &short_v, 1.0f), NNT_ERR_SHAPE, "[hidden_size]");
    T_FAILS(rt, nnt_trace_steer(t, 0, mi->num_layers, NULL, 0, &v, 1.0f), NNT_ERR_INDEX, "steer");
    nnt_tensor_free(&short_v);
    nnt_tensor_free(&v);
    nnt_trace_free(clean);
    nnt_trace_free(t);
    nnt_model_free(m);
    nnt_runtime_close(rt);
}

static void test_steer_all_positions(void)
{
    for (size_t f = 0; f < N_FAMILIES; f++) check_steer(FAMILIES[f], NULL, 0);
}

static void test_steer_chosen_positions(void)
{
    const int pos[] = {3, -1};
    for (size_t f = 0; f < N_FAMILIES; f++) check_steer(FAMILIES[f], pos, 2);
}

/* ablate_expert(i, e) is masked_fill(expert_weights, where expert_indices == e, 0), checked before
 * the run: an expert or block out of range fails when requested. */
static void test_ablation_arguments(void)
{
    for (size_t f = 0; f < N_FAMILIES; f++) {
        nnt_runtime *rt = t_runtime();
        nnt_model *m = t_model(rt, FAMILIES[f][0]);
        const nnt_model_info *mi = nnt_model_get_info(m);
        nnt_trace *t;
        T_OK(rt, nnt_trace_new(m, &t));
        T_FAILS(rt, nnt_trace_ablate_expert(t, mi->num_layers - 1, mi->num_experts), NNT_ERR_INDEX, "experts 0..");
        CU_ASSERT_NOT_EQUAL(nnt_trace_ablate_expert(t, mi->num_layers, 0), NNT_OK);
        nnt_trace_free(t);
        nnt_model_free(m);
        nnt_runtime_close(rt);
    }
}

/* nnt lens over batch rows at chosen positions: the command's lens_probs equal, for each row run
 * alone (no padding) through a trace, softmax(lm_head . RMSNorm(layer_output)) computed here from
 * the checkpoint's own model.norm.weight, lm_head.weight and rms_norm_eps (MiniMax-M2's final
 * norm), at each chosen position of each block; lens_positions names each column's position. */
static void test_lens_command(void)
{
    nnt_runtime *rt = t_runtime();
    const char *rel = "minimax_m2/fp32";
    nnt_model *m = t_model(rt, rel);
    t_ref r;
    CU_ASSERT_FATAL(t_ref_open(&r, rt, rel) == 0);
    const nnt_model_info *mi = nnt_model_get_info(m);
    const int L = mi->num_layers, H = mi->hidden_size, V = mi->vocab_size, B = r.batch, S = r.seq;
    CU_ASSERT_FATAL(B == 2);
    char dir[512], file[768], weights[768], cmd[8192];
    t_fixture(rel, dir, sizeof dir);
    snprintf(file, sizeof file, "%s/lens_rows.safetensors", t_tmpdir());
    snprintf(weights, sizeof weights, "%s/model.safetensors", dir);
    /* the rows' real tokens, row 1 shorter (the fixture left-pads it) */
    int32_t rows[2][64];
    int len[2] = {0, 0};
    size_t k = (size_t)snprintf(cmd, sizeof cmd, "'%s/nnt' lens --model '%s'", NNT_TEST_BUILD_DIR, dir);
    for (int b = 0; b < B; b++) {
        k += (size_t)snprintf(cmd + k, sizeof cmd - k, " --tokens '");
        for (int s = 0; s < S; s++)
            if (r.mask[b * S + s]) {
                rows[b][len[b]++] = r.ids[b * S + s];
                k += (size_t)snprintf(cmd + k, sizeof cmd - k, "%d ", r.ids[b * S + s]);
            }
        k += (size_t)snprintf(cmd + k, sizeof cmd - k, "'");
    }
    CU_ASSERT_FATAL(len[1] < len[0] && len[1] > 3);
    snprintf(cmd + k, sizeof cmd - k, " --positions 2,0,-1,%d --out '%s' > /dev/null", len[0] - 2, file);
    CU_ASSERT_EQUAL_FATAL(system(cmd), 0);
    /* the columns each row must have, ascending: 0, 2, (len[0] - 2 where the row has it), len - 1 */
    int want[2][4], n_want[2];
    for (int b = 0; b < B; b++) {
        n_want[b] = 0;
        want[b][n_want[b]++] = 0;
        want[b][n_want[b]++] = 2;
        if (len[0] - 2 < len[b] - 1) want[b][n_want[b]++] = len[0] - 2;
        want[b][n_want[b]++] = len[b] - 1;
    }
    nnt_tensor probs, pos, norm_w, head;
    T_OK(rt, nnt_safetensors_read(rt, file, "lens_probs", &probs));
    T_OK(rt, nnt_safetensors_read(rt, file, "lens_positions", &pos));
    T_OK(rt, nnt_safetensors_read(rt, weights, "model.norm.weight", &norm_w));
    T_OK(rt, nnt_safetensors_read(rt, weights, "lm_head.weight", &head));
    const int W = 3 + (len[0] - 2 < len[0] - 1);
    CU_ASSERT_FATAL(probs.ndim == 4 && probs.shape[0] == B && probs.shape[1] == L && probs.shape[2] == W && probs.shape[3] == V);
    CU_ASSERT_FATAL(pos.ndim == 2 && pos.shape[0] == B && pos.shape[1] == W);
    const double eps = 1e-6; /* config.json's rms_norm_eps */
    double worst = 0, *logit = malloc(sizeof(double) * (size_t)V);
    CU_ASSERT_FATAL(logit != NULL);
    for (int b = 0; b < B; b++) {
        nnt_trace *t;
        T_OK(rt, nnt_trace_new(m, &t));
        T_OK(rt, nnt_trace_save(t, "layers.*.layer_output"));
        T_OK(rt, nnt_trace_run(t, rows[b], NULL, 1, len[b]));
        for (int j = 0; j < W; j++) {
            int p = j < n_want[b] ? want[b][j] : -1;
            CU_ASSERT_EQUAL(nnt_tensor_get_f64(&pos, (int64_t)b * W + j), p);
            for (int layer = 0; layer < L; layer++) {
                const float *got = (const float *)probs.data + (((int64_t)b * L + layer) * W + j) * V;
                if (p < 0) { /* past the row's own columns: zeros */
                    for (int v = 0; v < V; v++) worst = fmax(worst, fabs(got[v]));
                    continue;
                }
                char path[64];
                snprintf(path, sizeof path, "layers.%d.layer_output", layer);
                const float *x = (const float *)nnt_trace_get(t, path)->data + (int64_t)p * H;
                double ms = 0, mx = -INFINITY, sum = 0;
                for (int h = 0; h < H; h++) ms += (double)x[h] * x[h];
                double inv = 1.0 / sqrt(ms / H + eps);
                for (int v = 0; v < V; v++) {
                    double acc = 0;
                    for (int h = 0; h < H; h++)
                        acc += nnt_tensor_get_f64(&head, (int64_t)v * H + h) * x[h] * inv * nnt_tensor_get_f64(&norm_w, h);
                    logit[v] = acc;
                    mx = fmax(mx, acc);
                }
                for (int v = 0; v < V; v++) sum += exp(logit[v] - mx);
                for (int v = 0; v < V; v++) worst = fmax(worst, fabs(got[v] - exp(logit[v] - mx) / sum));
            }
        }
        nnt_trace_free(t);
    }
    if (worst > 1e-6) fprintf(stderr, "\n  lens_probs differ from the projection by %.3g\n", worst);
    CU_ASSERT(worst <= 1e-6);
    free(logit);
    nnt_tensor_free(&probs);
    nnt_tensor_free(&pos);
    nnt_tensor_free(&norm_w);
    nnt_tensor_free(&head);
    nnt_model_free(m);
    nnt_runtime_close(rt);
}

int register_tests(void)
{
    CU_pSuite s = CU_add_suite("operations", NULL, NULL);
    if (!s) return -1;
    if (!CU_add_test(s, "project_on_vocab(last block) == logits", test_lens) ||
        !CU_add_test(s, "skip_layers: block end's output is block start's input", test_skip_layers) ||
        !CU_add_test(s, "steer at every position", test_steer_all_positions) ||
        !CU_add_test(s, "steer at chosen positions only", test_steer_chosen_positions) ||
        !CU_add_test(s, "ablate_expert arguments", test_ablation_arguments) ||
        !CU_add_test(s, "nnt lens over rows and positions == the final norm and lm_head", test_lens_command))
        return -1;
    return 0;
}
