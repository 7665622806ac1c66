/* test_batching.c - left-padded batches on every family: a prompt placed in a batch behind
 * padding, next to a longer unpadded row, gives at its real tokens the values it gives alone. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"

enum { MAX_VALUES = 64 };

/* Token-major values (axis 0 batch, axis 1 position) worth comparing on a model: the logits,
 * every block's output (all streams on DeepSeek-V4) and the last block's router logits. */
static int value_names(const nnt_model *m, char names[][96])
{
    const nnt_model_info *mi = nnt_model_get_info(m);
    int n = 0;
    snprintf(names[n++], 96, "logits");
    for (int l = 0; l < mi->num_layers && n < MAX_VALUES - 1; l++) snprintf(names[n++], 96, "layers.%d.layer_output", l);
    snprintf(names[n++], 96, "layers.%d.mlp.router_logits", mi->num_layers - 1);
    return n;
}

/* Runs `prompt` (n tokens) alone, then behind `pads` padding tokens in a batch of two whose
 * second row is `other` (n + pads real tokens), and compares every value at the real tokens. */
static void check_family(const char *rel, const char *ref, int n, int pads)
{
    nnt_runtime *rt = t_runtime();
    nnt_model *m = t_model(rt, rel);
    t_ref r;
    CU_ASSERT_FATAL(t_ref_open(&r, rt, ref ? ref : rel) == 0);
    CU_ASSERT_FATAL(n + pads <= r.seq);
    static char names[MAX_VALUES][96];
    int nv = value_names(m, names);
    const int32_t *prompt = r.ids; /* row 0 of the fixture is unpadded */
    nnt_trace *alone;
    T_OK(rt, nnt_trace_new(m, &alone));
    for (int i = 0; i < nv; i++) T_OK(rt, nnt_trace_save(alone, names[i]));
    T_OK(rt, nnt_trace_run(alone, prompt, NULL, 1, n));

    int T = n + pads;
    int32_t *ids = calloc((size_t)(2 * T), sizeof(int32_t)), *mask = calloc((size_t)(2 * T), sizeof(int32_t));
    for (int s = 0; s < n; s++) {
        ids[pads + s] = prompt[s];
        mask[pads + s] = 1;
    }
    for (int s = 0; s < T; s++) { /* row 1: the fixture's row 0 shifted by one token */
        ids[T + s] = r.ids[(s + 1) % r.seq];
        mask[T + s] = 1;
    }
    nnt_trace *padded;
    T_OK(rt, nnt_trace_new(m, &padded));
    for (int i = 0; i < nv; i++) T_OK(rt, nnt_trace_save(padded, names[i]));
    T_OK(rt, nnt_trace_run(padded, ids, mask, 2, T));
    for (int i = 0; i < nv; i++) {
        const nnt_tensor *a = nnt_trace_get(alone, names[i]), *b = nnt_trace_get(padded, names[i]);
        CU_ASSERT_FATAL(a && b);
        int64_t per = nnt_tensor_numel(a) / n; /* entries per token */
        CU_ASSERT_EQUAL(nnt_tensor_numel(b), 2 * T * per);
        double worst = 0, scale = 0;
        for (int s = 0; s < n; s++)
            for (int64_t j = 0; j < per; j++) {
                double x = nnt_tensor_get_f64(a, s * per + j), y = nnt_tensor_get_f64(b, (pads + s) * per + j);
                worst = fmax(worst, fabs(x - y));
                scale = fmax(scale, fabs(x));
            }
        if (!(worst <= 1e-5 * scale)) fprintf(stderr, "\n  %s, %s: %.3g of %.3g\n", rel, names[i], worst, scale);
        CU_ASSERT(worst <= 1e-5 * scale);
    }
    free(ids);
    free(mask);
    nnt_trace_free(padded);
    nnt_trace_free(alone);
    nnt_model_free(m);
    nnt_runtime_close(rt);
}

static void test_minimax(void) { check_family("minimax_m2/fp32", NULL, 17, 5); }
/* 17 tokens: past the sliding window of 7 (plus its sink) */
static void test_mimo(void) { check_family("mimo_v2_flash/fp32", NULL, 17, 5); }
static void test_kimi(void) { check_family("kimi_linear/fp32", NULL, 17, 5); }
/* 3 pads (not a multiple of either compression rate) before 18 tokens: the compressed entries
 * pool the row's own tokens from its first real one */
static void test_deepseek(void)
{
    check_family("deepseek_v4/fp32", "deepseek_v4/fp32/reference_L40.safetensors", 18, 3);
    check_family("deepseek_v4/native", "deepseek_v4/native/reference_L40.safetensors", 18, 3);
}

int register_tests(void)
{
    CU_pSuite s = CU_add_suite("batching", NULL, NULL);
    if (!s) return -1;
    if (!CU_add_test(s, "MiniMax-M2: padded row == alone", test_minimax) ||
        !CU_add_test(s, "MiMo-V2-Flash: padded row == alone", test_mimo) ||
        !CU_add_test(s, "Kimi-Linear: padded row == alone", test_kimi) ||
        !CU_add_test(s, "DeepSeek-V4: padded row == alone", test_deepseek))
        return -1;
    return 0;
}
