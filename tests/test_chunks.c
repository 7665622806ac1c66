/* test_chunks.c - chunked prefill ([prefill] chunk_tokens / memory_mb): on every family's
 * fixture, a left-padded 2 x 40 batch run in chunks of 7 tokens (and of 4, fewer than the
 * padding, so the first chunk reaches past it) gives every save - whole block outputs, slices of
 * logits and of a block's output across chunk borders, next_token_probs, input_ids - equal to
 * one call's within T_TOL; a trace that edits, or reads an attention pattern, runs as one call; and
 * a 3000-token MiniMax-M2 trace under a 2 MiB bound runs in chunks with the arena's high water under
 * a third of one call's, the last logits equal. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/internal.h"
#include "core/trace/trace_internal.h"
#include "test_util.h"

/* t_rel_err of a against b (test_util.h), infinite when either is missing or they disagree in
 * shape, dtype or infinities. */
static double rel_diff(const nnt_tensor *a, const nnt_tensor *b)
{
    double e = a && b && a->dtype == b->dtype ? t_rel_err(a, b, NULL) : -1;
    return e < 0 ? INFINITY : e;
}

/* A runtime with [prefill] key = value and, when block_mb is given, [attention] block_mb. */
static nnt_runtime *chunk_runtime_with(const char *key, const char *value, const char *block_mb)
{
    char ini[1024];
    CU_ASSERT_FATAL(t_ini_with("chunks.ini", "prefill", key, value, ini, sizeof ini) != NULL);
    if (block_mb) {
        FILE *f = fopen(ini, "a");
        CU_ASSERT_FATAL(f != NULL);
        fprintf(f, "[attention]\nblock_mb = %s\n", block_mb);
        fclose(f);
    }
    nnt_runtime *rt = NULL;
    CU_ASSERT_EQUAL_FATAL(nnt_runtime_open(ini, &rt), NNT_OK);
    return rt;
}

static nnt_runtime *chunk_runtime(const char *key, const char *value)
{
    return chunk_runtime_with(key, value, NULL);
}

static const char *const SAVES[] = {
    "layers.*.layer_output", "logits[:, -1]", "logits[0, 3:30:5]", "lm_head_output[1, -9:]",
    "layers.1.layer_output[:, 5:20:2, 3]", "layers.0.layer_input[1, 13]", "next_token_probs", "input_ids",
};

static nnt_trace *run(nnt_runtime *rt, nnt_model *m, const int32_t *ids, const int32_t *mask, int B, int T,
                      const char *extra)
{
    nnt_trace *t;
    T_OK(rt, nnt_trace_new(m, &t));
    for (size_t i = 0; i < sizeof SAVES / sizeof *SAVES; i++) T_OK(rt, nnt_trace_save(t, SAVES[i]));
    if (extra && strncmp(extra, "scale:", 6) == 0)
        T_OK(rt, nnt_trace_scale(t, extra + 6, 0.5f));
    else if (extra)
        T_OK(rt, nnt_trace_save(t, extra));
    T_OK(rt, nnt_trace_run(t, ids, mask, B, T));
    return t;
}

/* Every result of a equals b's, under the same keys. */
static void same_results(const char *dir, const nnt_trace *a, const nnt_trace *b)
{
    int n = nnt_trace_result_count(a);
    CU_ASSERT_EQUAL(n, nnt_trace_result_count(b));
    CU_ASSERT(n >= (int)(sizeof SAVES / sizeof *SAVES));
    for (int i = 0; i < n; i++) {
        const char *key = NULL;
        const nnt_tensor *x = NULL;
        CU_ASSERT_EQUAL_FATAL(nnt_trace_result(a, i, &key, &x), NNT_OK);
        double e = rel_diff(x, nnt_trace_get(b, key));
        if (!(e <= T_TOL)) fprintf(stderr, "\n  %s: %s differs by %.3g (relative)\n", dir, key, e);
        CU_ASSERT(e <= T_TOL);
    }
}

static void check_family(const char *dir, const char *pattern)
{
    nnt_runtime *one_rt = t_runtime(), *c7 = chunk_runtime("chunk_tokens", "7"), *c4 = chunk_runtime("chunk_tokens", "4");
    nnt_model *m1 = t_model(one_rt, dir), *m7 = t_model(c7, dir), *m4 = t_model(c4, dir);
    enum { B = 2, T = 40 };
    int32_t ids[B * T], mask[B * T];
    int vocab = nnt_model_get_info(m1)->vocab_size;
    for (int b = 0; b < B; b++) /* row 1 left-padded by 6 */
        for (int t = 0; t < T; t++) {
            ids[b * T + t] = (int32_t)((t * 29 + b * 17 + 3) % (vocab - 1)) + 1;
            mask[b * T + t] = b == 0 || t >= 6;
        }
    nnt_trace *one = run(one_rt, m1, ids, mask, B, T, NULL);
    CU_ASSERT_EQUAL(one->prefill_calls, 1);
    nnt_trace *a = run(c7, m7, ids, mask, B, T, NULL);
    CU_ASSERT_EQUAL(a->prefill_calls, 6); /* 40 tokens: 5 chunks of 7, then 5 */
    same_results(dir, one, a);
    nnt_trace *b = run(c4, m4, ids, mask, B, T, NULL);
    CU_ASSERT_EQUAL(b->prefill_calls, 10); /* a first chunk of 6 (past the padding), then 8 of 4, then 2 */
    same_results(dir, one, b);
    const nnt_tensor *probs = nnt_trace_get(b, "next_token_probs");
    CU_ASSERT(probs && probs->ndim == 2 && probs->shape[0] == B && probs->shape[1] == vocab);
    const nnt_tensor *cut = nnt_trace_get(b, "layers.1.layer_output#1");
    const nnt_tensor *whole1 = nnt_trace_get(b, "layers.1.layer_output"); /* DeepSeek-V4's has a streams axis */
    CU_ASSERT(cut && whole1 && cut->ndim == whole1->ndim - 1 && cut->shape[0] == B && cut->shape[1] == 8);
    nnt_trace_free(a);
    nnt_trace_free(b);
    /* an edit, or a pattern, needs the whole prompt in one call */
    nnt_trace *e1 = run(one_rt, m1, ids, mask, B, T, "scale:layers.0.mlp.mlp_output");
    nnt_trace *e7 = run(c7, m7, ids, mask, B, T, "scale:layers.0.mlp.mlp_output");
    CU_ASSERT_EQUAL(e7->prefill_calls, 1);
    same_results(dir, e1, e7);
    nnt_trace *p7 = run(c7, m7, ids, mask, B, T, pattern);
    CU_ASSERT_EQUAL(p7->prefill_calls, 1);
    nnt_trace_free(e1);
    nnt_trace_free(e7);
    nnt_trace_free(p7);
    nnt_trace_free(one);
    nnt_model_free(m1);
    nnt_model_free(m7);
    nnt_model_free(m4);
    nnt_runtime_close(one_rt);
    nnt_runtime_close(c7);
    nnt_runtime_close(c4);
}

static void test_minimax(void) { check_family("minimax_m2/fp32", "layers.1.self_attn.attention_probabilities"); }
static void test_mimo(void) { check_family("mimo_v2_flash/fp32", "layers.1.self_attn.attention_probabilities"); }
static void test_mimo_v25(void) { check_family("mimo_v2/fp4", "layers.1.self_attn.attention_probabilities"); }
static void test_kimi(void) { check_family("kimi_linear/fp32", "layers.3.self_attn.attention_probabilities"); }
static void test_deepseek(void) { check_family("deepseek_v4/fp32", "layers.2.self_attn.attention_probabilities"); }

/* 3000 tokens of MiniMax-M2 under [prefill] memory_mb = 2: chunks, under a third of one call's
 * arena and within twice the bound (the estimate is of the activations alone; each call also reads
 * the keys and values of every earlier token, here 3 MB with the grouped heads repeated).
 * Attention runs in blocks of 1 MiB in both ([attention] block_mb), so that what the arena holds
 * is the activations that grow with the call's tokens. */
static void test_long_prompt(void)
{
    nnt_runtime *one_rt = chunk_runtime_with("memory_mb", "100000", "1"), *small = chunk_runtime_with("memory_mb", "2", "1");
    nnt_model *m1 = t_model(one_rt, "minimax_m2/fp32"), *mc = t_model(small, "minimax_m2/fp32");
    enum { T = 3000 };
    int32_t *ids = malloc(T * sizeof *ids);
    CU_ASSERT_FATAL(ids != NULL);
    for (int t = 0; t < T; t++) ids[t] = (int32_t)((t * 37 + 5) % 255) + 1;
    nnt_trace *a, *b;
    T_OK(one_rt, nnt_trace_new(m1, &a));
    T_OK(small, nnt_trace_new(mc, &b));
    T_OK(one_rt, nnt_trace_save(a, "logits[:, -1]"));
    T_OK(small, nnt_trace_save(b, "logits[:, -1]"));
    T_OK(one_rt, nnt_trace_save(a, "layers.1.layer_output[:, 1500:3000:500]"));
    T_OK(small, nnt_trace_save(b, "layers.1.layer_output[:, 1500:3000:500]"));
    T_OK(one_rt, nnt_trace_run(a, ids, NULL, 1, T));
    T_OK(small, nnt_trace_run(b, ids, NULL, 1, T));
    CU_ASSERT_EQUAL(a->prefill_calls, 1);
    CU_ASSERT(b->prefill_calls > 1);
    CU_ASSERT(rel_diff(nnt_trace_get(a, "logits"), nnt_trace_get(b, "logits")) <= T_TOL);
    CU_ASSERT(rel_diff(nnt_trace_get(a, "layers.1.layer_output"), nnt_trace_get(b, "layers.1.layer_output")) <= T_TOL);
    size_t hw_one = nnt_arena_high_water(m1->arena), hw_chunks = nnt_arena_high_water(mc->arena);
    CU_ASSERT(hw_chunks * 3 < hw_one);
    CU_ASSERT(hw_chunks < (size_t)2 * 2 * 1048576);
    if (getenv("NNT_CHUNKS_VERBOSE"))
        fprintf(stderr, "\n  3000 tokens: %d calls, arena high water %zu bytes in one call, %zu in chunks\n",
                b->prefill_calls, hw_one, hw_chunks);
    nnt_trace_free(a);
    nnt_trace_free(b);
    free(ids);
    nnt_model_free(m1);
    nnt_model_free(mc);
    nnt_runtime_close(one_rt);
    nnt_runtime_close(small);
}

/* [prefill] keys refuse what is not a size or a count, naming the key, the value and the line. */
static void test_ini_errors(void)
{
    static const char *const BAD[][2] = {{"memory_mb", "0"}, {"memory_mb", "lots"}, {"chunk_tokens", "0"},
                                         {"chunk_tokens", "7.5"}, {"chunk_tokens", "-3"}};
    for (size_t i = 0; i < sizeof BAD / sizeof *BAD; i++) {
        char ini[1024], want[64];
        CU_ASSERT_FATAL(t_ini_with("chunks-bad.ini", "prefill", BAD[i][0], BAD[i][1], ini, sizeof ini) != NULL);
        nnt_runtime *rt = NULL;
        CU_ASSERT_NOT_EQUAL(nnt_runtime_open(ini, &rt), NNT_OK);
        snprintf(want, sizeof want, "[prefill] %s", BAD[i][0]);
        const char *msg = nnt_last_error(rt);
        CU_ASSERT(strstr(msg, want) != NULL && strstr(msg, BAD[i][1]) != NULL);
        nnt_runtime_close(rt);
    }
}

int register_tests(void)
{
    CU_pSuite s = CU_add_suite("chunks", NULL, NULL);
    if (!s) return -1;
    CU_add_test(s, "MiniMax-M2 prefill in chunks", test_minimax);
    CU_add_test(s, "MiMo-V2-Flash prefill in chunks", test_mimo);
    CU_add_test(s, "MiMo-V2.5 prefill in chunks", test_mimo_v25);
    CU_add_test(s, "Kimi-Linear prefill in chunks", test_kimi);
    CU_add_test(s, "DeepSeek-V4 prefill in chunks", test_deepseek);
    CU_add_test(s, "3000 tokens in chunks within a third of one call's memory", test_long_prompt);
    CU_add_test(s, "[prefill] errors", test_ini_errors);
    return 0;
}
