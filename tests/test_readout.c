/* test_readout.c - lm_head only where it is read: on every family's fixture, saves that slice
 * logits and lm_head_output by position (and next_token_probs) give the entries of the whole
 * logits of the same prompt, so the family's readout at the asked positions alone
 * (nnt_forward_args.logits_positions, the kit's fam_readout) loses nothing; and the positions
 * the core hands the family are exactly those the saves read; and a gradient of a metric at chosen
 * positions, computed from the readout at those positions alone, equals the one computed from
 * every position. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/internal.h"
#include "core/trace/trace_internal.h"
#include "test_util.h"

/* Entry [b, p, v] of the whole logits w [B, T, V]. */
static double whole_at(const nnt_tensor *w, int64_t b, int64_t p, int64_t v)
{
    return nnt_tensor_get_f64(w, (b * w->shape[1] + p) * w->shape[2] + v);
}

/* part [rows, positions, V] (dropped axes given as -1 in rows / positions) equals w's entries. */
static void same_entries(const char *dir, const char *key, const nnt_tensor *part, const nnt_tensor *w,
                         const int64_t *rows, int nr, const int64_t *pos, int np)
{
    CU_ASSERT_FATAL(part != NULL);
    int64_t V = w->shape[2];
    CU_ASSERT_EQUAL_FATAL(nnt_tensor_numel(part), (int64_t)nr * np * V);
    double scale = 0, diff = 0;
    for (int i = 0; i < nr; i++)
        for (int j = 0; j < np; j++)
            for (int64_t v = 0; v < V; v++) {
                double a = whole_at(w, rows[i], pos[j], v), b = nnt_tensor_get_f64(part, ((int64_t)i * np + j) * V + v);
                scale = fmax(scale, fabs(a));
                diff = fmax(diff, fabs(a - b));
            }
    double e = scale > 0 ? diff / scale : diff;
    if (!(e <= T_TOL)) fprintf(stderr, "\n  %s: %s differs from the whole logits by %.3g\n", dir, key, e);
    CU_ASSERT(e <= T_TOL);
}

/* B rows of T ids below vocab, row 1 left-padded by 5. */
static void make_rows(int B, int T, int vocab, int32_t *ids, int32_t *mask)
{
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            ids[b * T + t] = (int32_t)((t * 41 + b * 13 + 7) % (vocab - 1)) + 1;
            mask[b * T + t] = b == 0 || t >= 5;
        }
}

static void check_family(const char *dir)
{
    nnt_runtime *rt = t_runtime();
    nnt_model *m = t_model(rt, dir);
    enum { B = 2, T = 40 };
    int32_t ids[B * T], mask[B * T];
    int vocab = nnt_model_get_info(m)->vocab_size;
    make_rows(B, T, vocab, ids, mask);
    nnt_trace *whole, *part;
    T_OK(rt, nnt_trace_new(m, &whole));
    T_OK(rt, nnt_trace_save(whole, "logits"));
    T_OK(rt, nnt_trace_run(whole, ids, mask, B, T));
    T_OK(rt, nnt_trace_new(m, &part));
    static const char *const SAVES[] = {"logits[:, -1]", "logits[0, 3:9:2]", "lm_head_output[:, 20]", "logits[1, -3:]",
                                        "next_token_probs"};
    for (size_t i = 0; i < sizeof SAVES / sizeof *SAVES; i++) T_OK(rt, nnt_trace_save(part, SAVES[i]));
    T_OK(rt, nnt_trace_run(part, ids, mask, B, T));
    const nnt_tensor *w = nnt_trace_get(whole, "logits");
    CU_ASSERT_FATAL(w != NULL && w->ndim == 3 && w->shape[1] == T);
    const int64_t both[2] = {0, 1}, r0[1] = {0}, r1[1] = {1}, last[1] = {T - 1}, odd[3] = {3, 5, 7}, p20[1] = {20},
                  tail[3] = {T - 3, T - 2, T - 1};
    same_entries(dir, "logits[:, -1]", nnt_trace_get(part, "logits"), w, both, 2, last, 1);
    same_entries(dir, "logits[0, 3:9:2]", nnt_trace_get(part, "logits#1"), w, r0, 1, odd, 3);
    same_entries(dir, "lm_head_output[:, 20]", nnt_trace_get(part, "lm_head_output"), w, both, 2, p20, 1);
    same_entries(dir, "logits[1, -3:]", nnt_trace_get(part, "logits#2"), w, r1, 1, tail, 3);
    /* next_token_probs: the softmax of the last position's whole logits */
    const nnt_tensor *p = nnt_trace_get(part, "next_token_probs");
    CU_ASSERT_FATAL(p != NULL && nnt_tensor_numel(p) == (int64_t)B * w->shape[2]);
    for (int b = 0; b < B; b++) {
        int64_t V = w->shape[2];
        double mx = -INFINITY, sum = 0, worst = 0;
        for (int64_t v = 0; v < V; v++) mx = fmax(mx, whole_at(w, b, T - 1, v));
        for (int64_t v = 0; v < V; v++) sum += exp(whole_at(w, b, T - 1, v) - mx);
        for (int64_t v = 0; v < V; v++)
            worst = fmax(worst, fabs(exp(whole_at(w, b, T - 1, v) - mx) / sum - nnt_tensor_get_f64(p, b * V + v)));
        CU_ASSERT(worst <= 1e-6);
    }
    /* the positions handed to the family: those the slices name and the last, ascending; none
     * (every position) for the whole save */
    int32_t *pos = NULL;
    int n = 0;
    nnt_error err = {0};
    CU_ASSERT_EQUAL(nnt_trace_readout_positions(part, B, T, mask, &pos, &n, &err), NNT_OK);
    static const int32_t WANT[] = {3, 5, 7, 20, T - 3, T - 2, T - 1};
    CU_ASSERT(pos != NULL && n == 7 && !memcmp(pos, WANT, sizeof WANT));
    free(pos);
    CU_ASSERT_EQUAL(nnt_trace_readout_positions(whole, B, T, mask, &pos, &n, &err), NNT_OK);
    CU_ASSERT(pos == NULL && n == 0);
    nnt_trace_free(whole);
    nnt_trace_free(part);
    nnt_model_free(m);
    nnt_runtime_close(rt);
}

/* t_rel_err of a against b (test_util.h), infinite when either is missing or they disagree in
 * shape, dtype or infinities. */
static double rel_diff(const nnt_tensor *a, const nnt_tensor *b)
{
    double e = a && b && a->dtype == b->dtype ? t_rel_err(a, b, NULL) : -1;
    return e < 0 ? INFINITY : e;
}

/* A gradient of a metric at chosen positions (logit-diff at each row's 2nd real token and its
 * last) computes the readout there alone - positions {2, 7, 39} for rows of 40 and 35 real tokens -
 * and gives the metric and every block's layer_output gradient of the readout at every position
 * (a whole save of the logits asks for them all), within T_TOL; in both memory modes. */
static void check_grad(const char *dir)
{
    nnt_runtime *rt = t_runtime();
    nnt_model *m = t_model(rt, dir);
    enum { B = 2, T = 40 };
    int32_t ids[B * T], mask[B * T];
    int vocab = nnt_model_get_info(m)->vocab_size;
    make_rows(B, T, vocab, ids, mask);
    static const int POS[] = {2, -1};
    for (int mode = TRACE_GRAD_KEEP; mode <= TRACE_GRAD_RECOMPUTE; mode++) {
        nnt_trace *t[2];
        for (int k = 0; k < 2; k++) {
            T_OK(rt, nnt_trace_new(m, &t[k]));
            T_OK(rt, nnt_trace_grad(t[k], "layers.*.layer_output"));
            T_OK(rt, nnt_trace_metric(t[k], "logit-diff:3,5", POS, 2));
            if (k == 1) T_OK(rt, nnt_trace_save(t[k], "logits"));
            nnt_trace_grad_memory(t[k], mode, 0);
            T_OK(rt, nnt_trace_run(t[k], ids, mask, B, T));
        }
        /* the positions asked of the family, from the cells of the trace's last call: in keep mode
         * the one forward (recomputation's last call reruns block 0, which holds no readout) */
        if (mode == TRACE_GRAD_KEEP) {
            int32_t *pos = NULL;
            int n = 0;
            nnt_error err = {0};
            CU_ASSERT_EQUAL(nnt_trace_readout_positions(t[0], B, T, mask, &pos, &n, &err), NNT_OK);
            static const int32_t WANT[] = {2, 7, T - 1};
            CU_ASSERT(pos != NULL && n == 3 && !memcmp(pos, WANT, sizeof WANT));
            free(pos);
            CU_ASSERT_EQUAL(nnt_trace_readout_positions(t[1], B, T, mask, &pos, &n, &err), NNT_OK);
            CU_ASSERT(pos == NULL);
        }
        int count = nnt_trace_result_count(t[0]), grads = 0;
        CU_ASSERT(count >= 2);
        for (int i = 0; i < count; i++) {
            const char *key = NULL;
            const nnt_tensor *x = NULL;
            CU_ASSERT_EQUAL_FATAL(nnt_trace_result(t[0], i, &key, &x), NNT_OK);
            double e = rel_diff(x, nnt_trace_get(t[1], key));
            grads += strncmp(key, "grad:", 5) == 0;
            if (!(e <= T_TOL)) fprintf(stderr, "\n  %s (mode %d): %s differs by %.3g\n", dir, mode, key, e);
            CU_ASSERT(e <= T_TOL);
        }
        CU_ASSERT(grads == nnt_model_get_info(m)->num_layers);
        nnt_trace_free(t[0]);
        nnt_trace_free(t[1]);
    }
    nnt_model_free(m);
    nnt_runtime_close(rt);
}

static void test_minimax(void) { check_family("minimax_m2/fp32"); }
static void test_mimo(void) { check_family("mimo_v2_flash/fp32"); }
static void test_mimo_v25(void) { check_family("mimo_v2/fp4"); }
static void test_kimi(void) { check_family("kimi_linear/fp32"); }
static void test_deepseek(void) { check_family("deepseek_v4/fp32"); }
static void test_grad_minimax(void) { check_grad("minimax_m2/fp32"); }
static void test_grad_mimo(void) { check_grad("mimo_v2_flash/fp32"); }
static void test_grad_mimo_v25(void) { check_grad("mimo_v2/fp4"); }
static void test_grad_kimi(void) { check_grad("kimi_linear/fp32"); }
static void test_grad_deepseek(void) { check_grad("deepseek_v4/fp32"); }

int register_tests(void)
{
    CU_pSuite s = CU_add_suite("readout", NULL, NULL);
    if (!s) return -1;
    CU_add_test(s, "MiniMax-M2 logits at the positions read", test_minimax);
    CU_add_test(s, "MiMo-V2-Flash logits at the positions read", test_mimo);
    CU_add_test(s, "MiMo-V2.5 logits at the positions read", test_mimo_v25);
    CU_add_test(s, "Kimi-Linear logits at the positions read", test_kimi);
    CU_add_test(s, "DeepSeek-V4 logits at the positions read", test_deepseek);
    CU_add_test(s, "MiniMax-M2 gradient of a metric at chosen positions", test_grad_minimax);
    CU_add_test(s, "MiMo-V2-Flash gradient of a metric at chosen positions", test_grad_mimo);
    CU_add_test(s, "MiMo-V2.5 gradient of a metric at chosen positions", test_grad_mimo_v25);
    CU_add_test(s, "Kimi-Linear gradient of a metric at chosen positions", test_grad_kimi);
    CU_add_test(s, "DeepSeek-V4 gradient of a metric at chosen positions", test_grad_deepseek);
    return 0;
}
