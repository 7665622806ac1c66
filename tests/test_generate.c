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

/* Steering positions mean tokens (nnt.h, "token positions"). One case of test_steer_positions:
 * the positions given to nnt_generate, and, for a row of len prompt tokens run alone through a
 * full forward of len + k tokens (the prompt and k tokens generated so far), the positions that
 * forward must steer to give the same next token; *n_full receives how many. */
typedef struct steer_case {
    const char *name;
    int positions[2];
    int n;
} steer_case;

static int full_positions(const steer_case *c, int len, int k, int *full)
{
    int n = 0;
    for (int i = 0; i < c->n; i++) {
        int q = c->positions[i];
        if (q == NNT_POS_GENERATED || q == -1) /* every token fed after the prompt; -1 adds the prompt's last */
            for (int p = q == -1 ? len - 1 : len; p < len + k; p++) full[n++] = p;
        else if (q == NNT_POS_PROMPT)
            for (int p = 0; p < len; p++) full[n++] = p;
        else if (q >= 0 && q < len + k)
            full[n++] = q;
    }
    return n;
}

/* Greedy generation steered at token positions, on a left-padded batch, equals greedy decoding
 * by full forwards of each row alone, each steered at the same tokens of the sequence so far:
 * position 2 (a prompt token), a position of the generated part, "generated", -1, and
 * "prompt" with a generated position. Every family. */
static void test_steer_positions(void)
{
    const char *fixtures[][2] = {{"minimax_m2/fp32", NULL},
                                 {"mimo_v2_flash/fp32", NULL},
                                 {"kimi_linear/fp32", NULL},
                                 {"deepseek_v4/fp32", "deepseek_v4/fp32/reference_L13.safetensors"}};
    enum { N = 5, MAXT = 64 };
    for (size_t fi = 0; fi < sizeof fixtures / sizeof *fixtures; fi++) {
        nnt_runtime *rt = t_runtime();
        nnt_model *m = t_model(rt, fixtures[fi][0]);
        t_ref r;
        CU_ASSERT_FATAL(t_ref_open(&r, rt, fixtures[fi][1] ? fixtures[fi][1] : fixtures[fi][0]) == 0);
        const nnt_model_info *mi = nnt_model_get_info(m);
        const int B = 2, S = r.seq, V = mi->vocab_size;
        CU_ASSERT_FATAL(r.batch >= 2 && S + N <= MAXT);
        /* row 1 gets at least 3 more pads than the fixture gives it */
        int32_t ids[2 * MAXT], mask[2 * MAXT];
        int len[2] = {0, 0};
        for (int b = 0; b < B; b++)
            for (int t = 0; t < S; t++) {
                ids[b * S + t] = r.ids[b * S + t];
                mask[b * S + t] = r.mask[b * S + t] && !(b == 1 && t < 3);
                len[b] += mask[b * S + t];
            }
        int64_t H = mi->hidden_size;
        nnt_tensor v;
        CU_ASSERT_FATAL(nnt_tensor_alloc(&v, NNT_F32, 1, &H) == NNT_OK);
        for (int64_t h = 0; h < H; h++) ((float *)v.data)[h] = (float)((h * 7) % 13) / 13.0f - 0.45f;
        const float factor = 6.0f;
        const steer_case cases[] = {{"2", {2}, 1},
                                    {"row 1's second generated token", {len[1] + 1}, 1},
                                    {"generated", {NNT_POS_GENERATED}, 1},
                                    {"-1", {-1}, 1},
                                    {"prompt + row 0's third generated token", {NNT_POS_PROMPT, len[0] + 2}, 2}};
        int32_t plain[2 * N];
        nnt_generate_opts o = {.max_new_tokens = N, .temperature = 0.0f, .top_k = 0, .top_p = 1.0f, .seed = 0};
        T_OK(rt, nnt_generate(m, NULL, ids, mask, B, S, &o, plain));
        for (size_t ci = 0; ci < sizeof cases / sizeof *cases; ci++) {
            const steer_case *c = &cases[ci];
            nnt_trace *t;
            T_OK(rt, nnt_trace_new(m, &t));
            T_OK(rt, nnt_trace_steer(t, 1, 1, c->positions, c->n, &v, factor));
            int32_t out[2 * N];
            T_OK(rt, nnt_generate(m, t, ids, mask, B, S, &o, out));
            nnt_trace_free(t);
            int mismatches = 0, moved = 0;
            for (int b = 0; b < B; b++) {
                int32_t row[MAXT];
                int n = 0;
                for (int i = 0; i < S; i++)
                    if (mask[b * S + i]) row[n++] = ids[b * S + i];
                for (int k = 0; k < N; k++) {
                    int full[2 * MAXT];
                    int nf = full_positions(c, len[b], k, full);
                    T_OK(rt, nnt_trace_new(m, &t));
                    if (nf) T_OK(rt, nnt_trace_steer(t, 1, 1, full, nf, &v, factor));
                    T_OK(rt, nnt_trace_save(t, "logits"));
                    T_OK(rt, nnt_trace_run(t, row, NULL, 1, n));
                    const float *lg = (const float *)nnt_trace_get(t, "logits")->data + (int64_t)(n - 1) * V;
                    int best = 0;
                    for (int x = 1; x < V; x++)
                        if (lg[x] > lg[best]) best = x;
                    nnt_trace_free(t);
                    mismatches += best != out[b * N + k];
                    moved += plain[b * N + k] != out[b * N + k];
                    row[n++] = best;
                }
            }
            if (mismatches || !moved)
                fprintf(stderr, "\n  %s, steering at %s: %d tokens differ from the full forwards', %d from the unsteered run's\n",
                        fixtures[fi][0], c->name, mismatches, moved);
            CU_ASSERT_EQUAL(mismatches, 0);
            CU_ASSERT(moved > 0); /* the steering changed the generation: the check is not vacuous */
        }
        nnt_tensor_free(&v);
        nnt_model_free(m);
        nnt_runtime_close(rt);
    }
}

/* Positions no call reaches are refused before anything runs: a single forward checks them
 * against its longest row, generation against the last token it feeds back; the parser reads
 * the command line's lists. */
static void test_steer_positions_refused(void)
{
    nnt_runtime *rt = t_runtime();
    nnt_model *m = t_model(rt, "minimax_m2/fp32");
    int64_t H = nnt_model_get_info(m)->hidden_size;
    nnt_tensor v;
    CU_ASSERT_FATAL(nnt_tensor_alloc(&v, NNT_F32, 1, &H) == NNT_OK);
    int32_t ids[2 * 4] = {0, 0, 5, 6, 1, 2, 3, 4}, mask[2 * 4] = {0, 0, 1, 1, 1, 1, 1, 1}, out[2 * 3];
    nnt_generate_opts o = {.max_new_tokens = 3, .temperature = 0.0f, .top_k = 0, .top_p = 1.0f, .seed = 0};
    const int cases[][2] = {{4, 0}, {-5, 0}, {NNT_POS_GENERATED, 0}, {6, 1}, {-5, 1}};
    const char *needles[] = {"position 4 names no token of this forward: its longest row has 4 tokens",
                             "position -5 names no token of this forward",
                             "position 'generated' names no token of this forward",
                             "position 6 names no token processed at steps 0..2", "position -5 names no token processed"};
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        nnt_trace *t;
        T_OK(rt, nnt_trace_new(m, &t));
        T_OK(rt, nnt_trace_steer(t, 0, 0, &cases[i][0], 1, &v, 1.0f));
        if (cases[i][1])
            T_FAILS(rt, nnt_generate(m, t, ids, mask, 2, 4, &o, out), NNT_ERR_INDEX, needles[i]);
        else
            T_FAILS(rt, nnt_trace_run(t, ids, mask, 2, 4), NNT_ERR_INDEX, needles[i]);
        nnt_trace_free(t);
    }
    /* reachable: 3 (row 1's last), 5 (the token fed at step 2), -4, generated in generation */
    const int ok[] = {3, 5, -4, NNT_POS_GENERATED};
    nnt_trace *t;
    T_OK(rt, nnt_trace_new(m, &t));
    T_OK(rt, nnt_trace_steer(t, 0, 0, ok, 4, &v, 1.0f));
    T_OK(rt, nnt_generate(m, t, ids, mask, 2, 4, &o, out));
    /* after nnt_trace_steps(2, 2) position 1 is never processed (step 2 feeds positions 3 and 5) */
    T_OK(rt, nnt_trace_steps(t, 2, 2));
    const int one = 1;
    T_OK(rt, nnt_trace_steer(t, 0, 0, &one, 1, &v, 1.0f));
    T_FAILS(rt, nnt_generate(m, t, ids, mask, 2, 4, &o, out), NNT_ERR_INDEX, "position 1 names no token processed at steps 2..2");
    nnt_trace_free(t);
    int pos[4], n = -1;
    T_OK(rt, nnt_positions_parse(rt, "0,-1,generated,prompt", pos, 4, &n));
    CU_ASSERT(n == 4 && pos[0] == 0 && pos[1] == -1 && pos[2] == NNT_POS_GENERATED && pos[3] == NNT_POS_PROMPT);
    T_OK(rt, nnt_positions_parse(rt, "all", pos, 4, &n));
    CU_ASSERT(n == 1 && pos[0] == NNT_POS_ALL);
    T_FAILS(rt, nnt_positions_parse(rt, "1,,2", pos, 4, &n), NNT_ERR_INVALID_ARGUMENT, "an empty entry");
    T_FAILS(rt, nnt_positions_parse(rt, "1,x", pos, 4, &n), NNT_ERR_INVALID_ARGUMENT, "'x' is neither an integer");
    T_FAILS(rt, nnt_positions_parse(rt, "-2147483646", pos, 4, &n), NNT_ERR_INVALID_ARGUMENT, "is neither an integer");
    T_FAILS(rt, nnt_positions_parse(rt, "1,2,3", pos, 2, &n), NNT_ERR_INVALID_ARGUMENT, "more than 2 entries");
    nnt_tensor_free(&v);
    nnt_model_free(m);
    nnt_runtime_close(rt);
}

/* Kimi: the carried recurrent state is read and written in place when no request reads it and
 * through copies when one does: three calls of a session give the same last logits, bit for bit,
 * with no request on the states, with state_input or state_output of every block saved alone, and
 * with both. */
static void test_kimi_state_in_place(void)
{
    nnt_runtime *rt = t_runtime();
    nnt_model *m = t_model(rt, "kimi_linear/fp32");
    t_ref r;
    CU_ASSERT_FATAL(t_ref_open(&r, rt, "kimi_linear/fp32") == 0);
    const char *saves[4][2] = {{NULL, NULL},
                               {"layers.*.linear_attn.state_input", NULL},
                               {"layers.*.linear_attn.state_output", NULL},
                               {"layers.*.linear_attn.state_input", "layers.*.linear_attn.state_output"}};
    nnt_tensor first = {0};
    for (int c = 0; c < 4; c++) {
        nnt_session *s;
        T_OK(rt, nnt_session_new(m, r.batch, r.seq + 2, &s));
        nnt_trace *t;
        T_OK(rt, nnt_trace_new(m, &t));
        T_OK(rt, nnt_trace_save(t, "logits"));
        for (int j = 0; j < 2; j++)
            if (saves[c][j]) T_OK(rt, nnt_trace_save(t, saves[c][j]));
        int32_t next1[2] = {5, 9}, next2[2] = {7, 3};
        T_OK(rt, nnt_session_forward(s, t, r.ids, r.mask, r.seq));
        T_OK(rt, nnt_session_forward(s, t, next1, NULL, 1));
        T_OK(rt, nnt_session_forward(s, t, next2, NULL, 1));
        const nnt_tensor *lg = nnt_trace_get(t, "logits@2");
        CU_ASSERT_PTR_NOT_NULL_FATAL(lg);
        if (c == 0) {
            CU_ASSERT_FATAL(nnt_tensor_alloc(&first, lg->dtype, lg->ndim, lg->shape) == NNT_OK);
            memcpy(first.data, lg->data, (size_t)nnt_tensor_numel(lg) * nnt_dtype_size(lg->dtype));
        } else {
            double e = t_rel_err(lg, &first, NULL);
            if (e != 0.0) fprintf(stderr, "\n  saves %s %s: last logits differ by %.3g\n", saves[c][0], saves[c][1] ? saves[c][1] : "", e);
            CU_ASSERT(e == 0.0);
        }
        nnt_trace_free(t);
        nnt_session_free(s);
    }
    nnt_tensor_free(&first);
    nnt_model_free(m);
    nnt_runtime_close(rt);
}

/* Kimi: a continued call's state_input is the state the previous call left; the prompt's, None,
 * is recorded as absent (nnt_trace_lookup's flag, the file's none_values metadata). */
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
    /* the prompt's state_input is recorded as absent, not dropped: found, flagged None */
    const nnt_tensor *v = out0;
    int none = 0;
    CU_ASSERT_EQUAL(nnt_trace_lookup(t, "layers.1.linear_attn.state_input", &v, &none), NNT_OK);
    CU_ASSERT(v == NULL && none == 1);
    CU_ASSERT_EQUAL(nnt_trace_lookup(t, "layers.1.linear_attn.state_input@1", &v, &none), NNT_OK);
    CU_ASSERT(v == in1 && none == 0);
    CU_ASSERT_EQUAL(nnt_trace_lookup(t, "layers.1.linear_attn.state_input@2", &v, &none), NNT_ERR_NOT_FOUND);
    const char *key;
    T_OK(rt, nnt_trace_result(t, 0, &key, &v));
    CU_ASSERT(strcmp(key, "layers.1.linear_attn.state_input") == 0 && v == NULL);
    /* and in a written file: no tensor, its key in the metadata's none_values */
    char file[768];
    snprintf(file, sizeof file, "%s/kimi_none.safetensors", t_tmpdir());
    T_OK(rt, nnt_trace_write_safetensors(t, file));
    nnt_tensor back;
    CU_ASSERT_NOT_EQUAL(nnt_safetensors_read(rt, file, "layers.1.linear_attn.state_input", &back), NNT_OK);
    T_OK(rt, nnt_safetensors_read(rt, file, "layers.1.linear_attn.state_input@1", &back));
    nnt_tensor_free(&back);
    FILE *f = fopen(file, "rb");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    unsigned char len8[8];
    char header[4096] = "";
    CU_ASSERT_FATAL(fread(len8, 1, 8, f) == 8);
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = hlen << 8 | len8[i];
    CU_ASSERT_FATAL(hlen < sizeof header);
    CU_ASSERT_FATAL(fread(header, 1, (size_t)hlen, f) == hlen);
    fclose(f);
    if (!strstr(header, "\"none_values\":\"layers.1.linear_attn.state_input\"")) fprintf(stderr, "\n  header: %s\n", header);
    CU_ASSERT_PTR_NOT_NULL(strstr(header, "\"none_values\":\"layers.1.linear_attn.state_input\""));
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
        !CU_add_test(s, "Kimi: states in place or copied give the same logits", test_kimi_state_in_place) ||
        !CU_add_test(s, "Kimi: state_input carries over; None recorded as absent", test_kimi_state_carried) ||
        !CU_add_test(s, "steering positions mean tokens: generation == full forwards", test_steer_positions) ||
        !CU_add_test(s, "steering positions no call reaches are refused", test_steer_positions_refused))
        return -1;
    return 0;
}
