/* test_generate.c - sessions and generation on every family: the logits of a prompt of length T
 * equal those of its first T - k tokens followed by k single-token steps (k >= 8, crossing
 * sliding windows, Kimi's convolution width and DeepSeek-V4's compression boundaries), in a
 * left-padded batch; greedy generation agrees with a full forward over its own output;
 * sampling is reproducible from its seed; edits apply at every step or only the chosen ones;
 * stop tokens end a row as a run without them predicts. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"

/* Compares a full forward over the fixture's prompts (cut to T) with a session run of T - k
 * tokens then k single steps; returns the largest relative difference of the logits at the last
 * k positions of every row. */
static double stepwise_vs_full(const char *rel, const char *ref, int T, int k, int batch_rows)
{
    nnt_runtime *rt = t_runtime();
    nnt_model *m = t_model(rt, rel);
    t_ref r;
    CU_ASSERT_FATAL(t_ref_open(&r, rt, ref ? ref : rel) == 0);
    int B = batch_rows, S = r.seq;
    CU_ASSERT_FATAL(T <= S);
    /* the last T tokens of each row: row 1 keeps its left padding */
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)(B * T)), *mask = malloc(sizeof(int32_t) * (size_t)(B * T));
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            ids[b * T + t] = r.ids[b * S + S - T + t];
            mask[b * T + t] = r.mask[b * S + S - T + t] && !(b == 1 && t < 3); /* row 1: at least 3 pads */
        }
    nnt_trace *full;
    T_OK(rt, nnt_trace_new(m, &full));
    T_OK(rt, nnt_trace_save(full, "logits"));
    T_OK(rt, nnt_trace_run(full, ids, mask, B, T));
    const nnt_tensor *fl = nnt_trace_get(full, "logits");
    int V = nnt_model_get_info(m)->vocab_size;

    nnt_session *s;
    T_OK(rt, nnt_session_new(m, B, T, &s));
    nnt_trace *st;
    T_OK(rt, nnt_trace_new(m, &st));
    T_OK(rt, nnt_trace_save(st, "logits"));
    int P = T - k;
    int32_t *pids = malloc(sizeof(int32_t) * (size_t)(B * P)), *pmask = malloc(sizeof(int32_t) * (size_t)(B * P));
    for (int b = 0; b < B; b++)
        for (int t = 0; t < P; t++) {
            pids[b * P + t] = ids[b * T + t];
            pmask[b * P + t] = mask[b * T + t];
        }
    T_OK(rt, nnt_session_forward(s, st, pids, pmask, P));
    for (int i = 0; i < k; i++) {
        int32_t step[8];
        for (int b = 0; b < B; b++) step[b] = ids[b * T + P + i];
        T_OK(rt, nnt_session_forward(s, st, step, NULL, 1));
    }
    CU_ASSERT_EQUAL(nnt_session_length(s), T);
    double worst = 0, scale = 0;
    for (int i = 0; i <= k; i++) {
        char key[32];
        snprintf(key, sizeof key, i ? "logits@%d" : "logits", i);
        const nnt_tensor *sl = nnt_trace_get(st, key);
        CU_ASSERT_FATAL(sl != NULL);
        int64_t Ts = sl->shape[1];
        for (int b = 0; b < B; b++) {
            /* step i's last position is the full run's position P - 1 + i */
            const float *a = (const float *)sl->data + ((int64_t)b * Ts + Ts - 1) * V;
            const float *c = (const float *)fl->data + ((int64_t)b * T + P - 1 + i) * V;
            for (int v = 0; v < V; v++) {
                worst = fmax(worst, fabs(a[v] - c[v]));
                scale = fmax(scale, fabs(c[v]));
            }
        }
    }
    free(ids);
    free(mask);
    free(pids);
    free(pmask);
    nnt_trace_free(full);
    nnt_trace_free(st);
    nnt_session_free(s);
    nnt_model_free(m);
    nnt_runtime_close(rt);
    return worst / scale;
}

static void check_stepwise(const char *rel, const char *ref, int T, int k)
{
    double e = stepwise_vs_full(rel, ref, T, k, 2);
    if (e > 1e-5) fprintf(stderr, "\n  %s: stepwise logits differ by %.3g\n", rel, e);
    CU_ASSERT(e <= 1e-5);
}

static void test_minimax_steps(void) { check_stepwise("minimax_m2/fp32", NULL, 24, 10); }
/* window 7: the steps run well past it */
static void test_mimo_steps(void) { check_stepwise("mimo_v2_flash/fp32", NULL, 24, 12); }
/* convolution width 4, the latent block's cache, the recurrent state carried */
static void test_kimi_steps(void) { check_stepwise("kimi_linear/fp32", NULL, 24, 9); }
/* window 5, compression rates 4 and 8: the steps close entries at 16, 20 and 24 real tokens
 * (row 1, with 3 pads, at 20), and the indexer picks among a growing set */
static void test_deepseek_steps(void) { check_stepwise("deepseek_v4/fp32", "deepseek_v4/fp32/reference_L40.safetensors", 26, 12); }
static void test_deepseek_native_steps(void)
{
    check_stepwise("deepseek_v4/native", "deepseek_v4/native/reference_L40.safetensors", 30, 9);
}

/* Greedy generation: every generated token is the argmax of a full forward over the prompt and
 * the tokens before it. */
static void test_greedy_consistent(void)
{
    const char *fixtures[][2] = {{"minimax_m2/fp32", NULL},
                                 {"mimo_v2_flash/fp32", NULL},
                                 {"kimi_linear/fp32", NULL},
                                 {"deepseek_v4/fp32", "deepseek_v4/fp32/reference_L13.safetensors"}};
    for (size_t fi = 0; fi < sizeof fixtures / sizeof *fixtures; fi++) {
        nnt_runtime *rt = t_runtime();
        nnt_model *m = t_model(rt, fixtures[fi][0]);
        t_ref r;
        CU_ASSERT_FATAL(t_ref_open(&r, rt, fixtures[fi][1] ? fixtures[fi][1] : fixtures[fi][0]) == 0);
        const int N = 6, B = r.batch, S = r.seq, T = S + N;
        int32_t out[2 * 6];
        nnt_generate_opts o = {.max_new_tokens = N, .temperature = 0.0f, .top_k = 0, .top_p = 1.0f, .seed = 0};
        T_OK(rt, nnt_generate(m, NULL, r.ids, r.mask, B, S, &o, out));
        int32_t *ids = malloc(sizeof(int32_t) * (size_t)(B * T)), *mask = malloc(sizeof(int32_t) * (size_t)(B * T));
        for (int b = 0; b < B; b++)
            for (int t = 0; t < T; t++) {
                ids[b * T + t] = t < S ? r.ids[b * S + t] : out[b * N + t - S];
                mask[b * T + t] = t < S ? r.mask[b * S + t] : 1;
            }
        nnt_trace *t;
        T_OK(rt, nnt_trace_new(m, &t));
        T_OK(rt, nnt_trace_save(t, "logits"));
        T_OK(rt, nnt_trace_run(t, ids, mask, B, T));
        const nnt_tensor *lg = nnt_trace_get(t, "logits");
        int V = nnt_model_get_info(m)->vocab_size, mismatches = 0;
        for (int b = 0; b < B; b++)
            for (int i = 0; i < N; i++) {
                const float *row = (const float *)lg->data + ((int64_t)b * T + S - 1 + i) * V;
                int best = 0;
                for (int v = 1; v < V; v++)
                    if (row[v] > row[best]) best = v;
                mismatches += best != out[b * N + i];
            }
        if (mismatches) fprintf(stderr, "\n  %s: %d generated tokens are not the full run's argmax\n", fixtures[fi][0], mismatches);
        CU_ASSERT_EQUAL(mismatches, 0);
        free(ids);
        free(mask);
        nnt_trace_free(t);
        nnt_model_free(m);
        nnt_runtime_close(rt);
    }
}

/* Sampling: the same seed gives the same tokens, another seed (almost surely) others; top_k = 1
 * is greedy whatever the temperature. */
static void test_sampling(void)
{
    nnt_runtime *rt = t_runtime();
    nnt_model *m = t_model(rt, "minimax_m2/fp32");
    t_ref r;
    CU_ASSERT_FATAL(t_ref_open(&r, rt, "minimax_m2/fp32") == 0);
    enum { N = 12 };
    int32_t a[2 * N], b[2 * N], c[2 * N], g[2 * N], k1[2 * N];
    nnt_generate_opts o = {.max_new_tokens = N, .temperature = 1.5f, .top_k = 0, .top_p = 1.0f, .seed = 42};
    T_OK(rt, nnt_generate(m, NULL, r.ids, r.mask, r.batch, r.seq, &o, a));
    T_OK(rt, nnt_generate(m, NULL, r.ids, r.mask, r.batch, r.seq, &o, b));
    o.seed = 43;
    T_OK(rt, nnt_generate(m, NULL, r.ids, r.mask, r.batch, r.seq, &o, c));
    CU_ASSERT(memcmp(a, b, sizeof a) == 0);
    CU_ASSERT(memcmp(a, c, sizeof a) != 0);
    nnt_generate_opts greedy = {.max_new_tokens = N, .temperature = 0.0f, .top_k = 0, .top_p = 1.0f, .seed = 0},
                      top1 = {.max_new_tokens = N, .temperature = 2.0f, .top_k = 1, .top_p = 1.0f, .seed = 7},
                      nucleus = {.max_new_tokens = N, .temperature = 1.0f, .top_k = 0, .top_p = 1e-6f, .seed = 9};
    T_OK(rt, nnt_generate(m, NULL, r.ids, r.mask, r.batch, r.seq, &greedy, g));
    T_OK(rt, nnt_generate(m, NULL, r.ids, r.mask, r.batch, r.seq, &top1, k1));
    CU_ASSERT(memcmp(g, k1, sizeof g) == 0);
    T_OK(rt, nnt_generate(m, NULL, r.ids, r.mask, r.batch, r.seq, &nucleus, k1)); /* a tiny nucleus is the argmax */
    CU_ASSERT(memcmp(g, k1, sizeof g) == 0);
    nnt_model_free(m);
    nnt_runtime_close(rt);
}

/* A trace over a generation saves a value at every step ("path@step") and applies its edits at
 * every step, or only at the steps nnt_trace_steps chose. */
static void test_values_per_step(void)
{
    nnt_runtime *rt = t_runtime();
    nnt_model *m = t_model(rt, "minimax_m2/fp32");
    t_ref r;
    CU_ASSERT_FATAL(t_ref_open(&r, rt, "minimax_m2/fp32") == 0);
    enum { N = 5 };
    int32_t out[2 * N], clean[2 * N];
    nnt_generate_opts o = {.max_new_tokens = N, .temperature = 0.0f, .top_k = 0, .top_p = 1.0f, .seed = 0};
    T_OK(rt, nnt_generate(m, NULL, r.ids, r.mask, r.batch, r.seq, &o, clean));
    nnt_trace *t;
    T_OK(rt, nnt_trace_new(m, &t));
    T_OK(rt, nnt_trace_save(t, "layers.1.mlp.expert_indices"));
    T_OK(rt, nnt_trace_steps(t, 2, 3)); /* from here on: steps 2 and 3 only */
    T_OK(rt, nnt_trace_ablate_expert(t, 1, 0));
    T_OK(rt, nnt_trace_save(t, "layers.1.mlp.expert_weights"));
    T_OK(rt, nnt_generate(m, t, r.ids, r.mask, r.batch, r.seq, &o, out));
    /* generate reads logits through a request of its own, which leaves nothing in t */
    CU_ASSERT_PTR_NULL(nnt_trace_get(t, "logits"));
    /* indices at every step: the prompt's [2, 24, 2], then one [2, 1, 2] per continuation */
    CU_ASSERT_PTR_NOT_NULL(nnt_trace_get(t, "layers.1.mlp.expert_indices"));
    for (int s = 1; s < N; s++) {
        char key[64];
        snprintf(key, sizeof key, "layers.1.mlp.expert_indices@%d", s);
        const nnt_tensor *v = nnt_trace_get(t, key);
        CU_ASSERT(v && v->shape[1] == 1);
    }
    /* the step-limited save ran twice: steps 2 and 3, with expert 0's weights zeroed there */
    const nnt_tensor *w0 = nnt_trace_get(t, "layers.1.mlp.expert_weights"), *w1 = nnt_trace_get(t, "layers.1.mlp.expert_weights@1");
    CU_ASSERT(w0 && w1 && !nnt_trace_get(t, "layers.1.mlp.expert_weights@2"));
    const nnt_tensor *i2 = nnt_trace_get(t, "layers.1.mlp.expert_indices@2");
    for (int64_t i = 0; w0 && i2 && i < nnt_tensor_numel(w0); i++)
        if ((int)nnt_tensor_get_f64(i2, i) == 0) CU_ASSERT(nnt_tensor_get_f64(w0, i) == 0.0);
    /* the first two generated tokens cannot have changed: the edit starts at step 2 */
    for (int b = 0; b < r.batch; b++) CU_ASSERT(out[b * N] == clean[b * N] && out[b * N + 1] == clean[b * N + 1]);
    nnt_trace_free(t);
    nnt_model_free(m);
    nnt_runtime_close(rt);
}

/* What nnt_generate must return with stop ids, derived from a run without them: each row equal
 * to that run up to and including the first stop id it emitted, NNT_TOKEN_STOPPED after it; a
 * row that never emits one unchanged. *steps: how many steps must run (all N unless every row
 * stops, else one past the latest stop). */
static void expect_stops(const int32_t *clean, int B, int N, const int32_t *stops, int n_stops, int32_t *want, int *steps)
{
    int all_stop = 1, latest = 0;
    for (int b = 0; b < B; b++) {
        int end = -1;
        for (int i = 0; i < N; i++) {
            want[b * N + i] = end >= 0 ? NNT_TOKEN_STOPPED : clean[b * N + i];
            for (int k = 0; end < 0 && k < n_stops; k++)
                if (clean[b * N + i] == stops[k]) end = i;
        }
        if (end < 0) all_stop = 0;
        latest = end > latest ? end : latest;
    }
    *steps = all_stop ? latest + 1 : N;
}

/* Stop tokens: greedy and sampled, one row or every row stopping; a zero-initialised struct
 * keeps every token; bad stop arguments are refused. */
static void test_stop_tokens(void)
{
    nnt_runtime *rt = t_runtime();
    nnt_model *m = t_model(rt, "minimax_m2/fp32");
    t_ref r;
    CU_ASSERT_FATAL(t_ref_open(&r, rt, "minimax_m2/fp32") == 0);
    enum { N = 10 };
    const int B = r.batch;
    CU_ASSERT_FATAL(B == 2);
    int32_t clean[2 * N], out[2 * N], want[2 * N];
    int steps;
    for (int sampled = 0; sampled < 2; sampled++) {
        nnt_generate_opts o = {.max_new_tokens = N, .temperature = sampled ? 1.3f : 0.0f, .top_k = 0, .top_p = 1.0f, .seed = 5};
        T_OK(rt, nnt_generate(m, NULL, r.ids, r.mask, B, r.seq, &o, clean));
        /* one stop id: the token row 0 generated at step 3 (its first occurrence may be earlier) */
        int32_t stop = clean[3];
        o.stop_ids = &stop;
        o.n_stop_ids = 1;
        for (int i = 0; i < 2 * N; i++) out[i] = -7;
        T_OK(rt, nnt_generate(m, NULL, r.ids, r.mask, B, r.seq, &o, out));
        expect_stops(clean, B, N, &stop, 1, want, &steps);
        CU_ASSERT(memcmp(out, want, sizeof out) == 0);
        CU_ASSERT(want[4] == NNT_TOKEN_STOPPED); /* the check is not vacuous: row 0 stopped by step 3 */
        /* two stop ids that end both rows: no step runs past the later stop */
        int32_t stops[2] = {clean[2], clean[N + 4]};
        o.stop_ids = stops;
        o.n_stop_ids = 2;
        nnt_trace *t;
        T_OK(rt, nnt_trace_new(m, &t));
        T_OK(rt, nnt_trace_save(t, "layers.0.layer_output"));
        T_OK(rt, nnt_generate(m, t, r.ids, r.mask, B, r.seq, &o, out));
        expect_stops(clean, B, N, stops, 2, want, &steps);
        CU_ASSERT(steps <= 5);
        CU_ASSERT(memcmp(out, want, sizeof out) == 0);
        char key[64];
        snprintf(key, sizeof key, steps > 1 ? "layers.0.layer_output@%d" : "layers.0.layer_output", steps - 1);
        CU_ASSERT_PTR_NOT_NULL(nnt_trace_get(t, key));
        snprintf(key, sizeof key, "layers.0.layer_output@%d", steps);
        CU_ASSERT_PTR_NULL(nnt_trace_get(t, key));
        nnt_trace_free(t);
        /* an id never generated changes nothing */
        int32_t never = -5;
        o.stop_ids = &never;
        o.n_stop_ids = 1;
        T_OK(rt, nnt_generate(m, NULL, r.ids, r.mask, B, r.seq, &o, out));
        CU_ASSERT(memcmp(out, clean, sizeof out) == 0);
        o.stop_ids = NULL;
        CU_ASSERT_EQUAL(nnt_generate(m, NULL, r.ids, r.mask, B, r.seq, &o, out), NNT_ERR_INVALID_ARGUMENT);
        o.n_stop_ids = -1;
        CU_ASSERT_EQUAL(nnt_generate(m, NULL, r.ids, r.mask, B, r.seq, &o, out), NNT_ERR_INVALID_ARGUMENT);
    }
    nnt_model_free(m);
    nnt_runtime_close(rt);
}

/* Kimi: a continued call's state_input is the state the previous call left. */
static void test_kimi_state_carried(void)
{
    nnt_runtime *rt = t_runtime();
    nnt_model *m = t_model(rt, "kimi_linear/fp32");
    t_ref r;
    CU_ASSERT_FATAL(t_ref_open(&r, rt, "kimi_linear/fp32") == 0);
    nnt_session *s;
    T_OK(rt, nnt_session_new(m, r.batch, r.seq + 1, &s));
    nnt_trace *t;
    T_OK(rt, nnt_trace_new(m, &t));
    T_OK(rt, nnt_trace_save(t, "layers.1.linear_attn.state_input"));
    T_OK(rt, nnt_trace_save(t, "layers.1.linear_attn.state_output"));
    T_OK(rt, nnt_session_forward(s, t, r.ids, r.mask, r.seq));
    int32_t next[2] = {5, 9};
    T_OK(rt, nnt_session_forward(s, t, next, NULL, 1));
    CU_ASSERT_PTR_NULL(nnt_trace_get(t, "layers.1.linear_attn.state_input"));
    const nnt_tensor *out0 = nnt_trace_get(t, "layers.1.linear_attn.state_output");
    const nnt_tensor *in1 = nnt_trace_get(t, "layers.1.linear_attn.state_input@1");
    CU_ASSERT_FATAL(out0 && in1);
    CU_ASSERT(t_rel_err(in1, out0, NULL) == 0.0);
    nnt_trace_free(t);
    nnt_session_free(s);
    nnt_model_free(m);
    nnt_runtime_close(rt);
}

int register_tests(void)
{
    CU_pSuite s = CU_add_suite("generate", NULL, NULL);
    if (!s) return -1;
    if (!CU_add_test(s, "MiniMax-M2: prompt == prefix + 10 steps", test_minimax_steps) ||
        !CU_add_test(s, "MiMo-V2-Flash: prompt == prefix + 12 steps past the window", test_mimo_steps) ||
        !CU_add_test(s, "Kimi-Linear: prompt == prefix + 9 steps (conv and state carried)", test_kimi_steps) ||
        !CU_add_test(s, "DeepSeek-V4: prompt == prefix + 12 steps across compression boundaries", test_deepseek_steps) ||
        !CU_add_test(s, "DeepSeek-V4 native FP8/FP4: prompt == prefix + 9 steps", test_deepseek_native_steps) ||
        !CU_add_test(s, "greedy tokens are the full forward's argmax", test_greedy_consistent) ||
        !CU_add_test(s, "sampling: seeds, top-k, top-p", test_sampling) ||
        !CU_add_test(s, "values and edits per step", test_values_per_step) ||
        !CU_add_test(s, "stop tokens end rows, and the call once all rows stop", test_stop_tokens) ||
        !CU_add_test(s, "Kimi: state_input carries over", test_kimi_state_carried))
        return -1;
    return 0;
}
