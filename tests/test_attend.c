/* test_attend.c - attention over blocks of queries (the family kit's fam_attend with
 * [attention] block_mb) and in the backend's one pass (attn_fused, [attention] fused) against the
 * whole pattern: on every family's fp32 fixture and MiMo-V2.5's (FP4), a left-padded batch of
 * 60-token rows gives the same logits, block outputs and head outputs, and the same gradients of
 * the language-model loss, whether the scores are held whole, 16 queries at a time or never
 * (within T_TOL, 1e-5, of each value's largest magnitude: a block's
 * product may sum in another order than the whole pattern's, and the differences pass through
 * the later blocks; the worst seen was 1.5e-6, DeepSeek-V4's gradients in the sanitizer build); a block whose
 * pattern is asked for is still served whole and equal; and a 3000-token MiniMax-M2 trace
 * needs under a quarter of the whole pattern's activation memory with the same last logits, in
 * blocks and in one pass. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/internal.h"
#include "test_util.h"

/* A runtime whose attention never takes the one pass, with blocks of scores of at most
 * block_mb MiB ("0.000001": as small as the kit allows, 16 queries). */
static nnt_runtime *unfused_runtime(const char *name, const char *block_mb)
{
    char ini[1024], value[64];
    snprintf(value, sizeof value, "%s\nfused = no", block_mb);
    CU_ASSERT_FATAL(t_ini_with(name, "attention", "block_mb", value, ini, sizeof ini) != NULL);
    nnt_runtime *rt = NULL;
    CU_ASSERT_EQUAL_FATAL(nnt_runtime_open(ini, &rt), NNT_OK);
    return rt;
}

/* Largest |a - b| over the largest |a|; NaNs must coincide. */
static double rel_diff(const nnt_tensor *a, const nnt_tensor *b)
{
    if (!nnt_shape_equal(a->ndim, a->shape, b->ndim, b->shape)) return INFINITY;
    double scale = 0, diff = 0;
    for (int64_t j = 0, n = nnt_tensor_numel(a); j < n; j++) {
        double u = nnt_tensor_get_f64(a, j), v = nnt_tensor_get_f64(b, j);
        if (isnan(u) || isnan(v)) {
            if (isnan(u) != isnan(v)) return INFINITY;
            continue;
        }
        scale = fmax(scale, fabs(u));
        diff = fmax(diff, fabs(u - v));
    }
    return scale > 0 ? diff / scale : diff;
}

/* Rows of T tokens: row 0 whole, row 1 after 6 pads; ids from a fixed sequence below vocab. */
static void make_rows(int T, int vocab, int32_t *ids, int32_t *mask)
{
    for (int b = 0; b < 2; b++)
        for (int t = 0; t < T; t++) {
            ids[b * T + t] = (int32_t)((t * 37 + b * 11 + 5) % (vocab - 1)) + 1;
            mask[b * T + t] = b == 0 || t >= 6;
        }
}

static nnt_trace *run(nnt_runtime *rt, nnt_model *m, const int32_t *ids, const int32_t *mask, int T, int grad,
                      const char *pattern)
{
    nnt_trace *t;
    T_OK(rt, nnt_trace_new(m, &t));
    T_OK(rt, nnt_trace_save(t, "logits"));
    T_OK(rt, nnt_trace_save(t, "layers.*.layer_output"));
    nnt_trace_save(t, "layers.*.self_attn.attention_head_outputs"); /* Kimi-Linear: on its MLA blocks only */
    if (pattern) T_OK(rt, nnt_trace_save(t, pattern));
    if (grad) {
        T_OK(rt, nnt_trace_grad(t, "layers.*.layer_output"));
        T_OK(rt, nnt_trace_metric(t, "loss", NULL, 0));
    }
    T_OK(rt, nnt_trace_run(t, ids, mask, 2, T));
    return t;
}

/* Every result of a equals b's. */
static void same_results(const char *dir, const nnt_trace *a, const nnt_trace *b)
{
    int na = nnt_trace_result_count(a);
    CU_ASSERT_EQUAL(na, nnt_trace_result_count(b));
    CU_ASSERT(na >= 3);
    for (int i = 0; i < na; i++) {
        const char *key = NULL;
        const nnt_tensor *x = NULL;
        CU_ASSERT_EQUAL_FATAL(nnt_trace_result(a, i, &key, &x), NNT_OK);
        const nnt_tensor *y = nnt_trace_get(b, key);
        CU_ASSERT_FATAL(y != NULL);
        double e = rel_diff(x, y);
        if (!(e <= T_TOL)) fprintf(stderr, "\n  %s: %s differs by %.3g (relative)\n", dir, key, e);
        CU_ASSERT(e <= T_TOL);
    }
}

static void check_family(const char *dir, const char *pattern)
{
    /* whole: the pattern fits the default block bound; fused: the default runtime */
    nnt_runtime *whole_rt = unfused_runtime("attend-whole60.ini", "64"), *block_rt = unfused_runtime("attend-blocks.ini", "0.000001");
    nnt_runtime *fused_rt = t_runtime();
    nnt_model *mw = t_model(whole_rt, dir), *mb = t_model(block_rt, dir), *mf = t_model(fused_rt, dir);
    const nnt_model_info *info = nnt_model_get_info(mw);
    enum { T = 60 };
    int32_t ids[2 * T], mask[2 * T];
    make_rows(T, info->vocab_size, ids, mask);
    for (int grad = 0; grad < 2; grad++) {
        nnt_trace *a = run(whole_rt, mw, ids, mask, T, grad, NULL), *b = run(block_rt, mb, ids, mask, T, grad, NULL);
        nnt_trace *f = run(fused_rt, mf, ids, mask, T, grad, NULL);
        same_results(dir, a, b);
        same_results(dir, a, f);
        nnt_trace_free(a);
        nnt_trace_free(b);
        nnt_trace_free(f);
    }
    /* a pattern asked for: that block whole, the others in blocks (or one pass), every value the same */
    nnt_trace *a = run(whole_rt, mw, ids, mask, T, 0, pattern), *b = run(block_rt, mb, ids, mask, T, 0, pattern);
    nnt_trace *f = run(fused_rt, mf, ids, mask, T, 0, pattern);
    same_results(dir, a, b);
    same_results(dir, a, f);
    char key[128];
    snprintf(key, sizeof key, "%s", pattern);
    const nnt_tensor *p = nnt_trace_get(b, key), *pf = nnt_trace_get(f, key);
    CU_ASSERT(p != NULL && p->ndim == 4 && p->shape[2] == T);
    CU_ASSERT(pf != NULL && pf->ndim == 4 && pf->shape[2] == T);
    nnt_trace_free(a);
    nnt_trace_free(b);
    nnt_trace_free(f);
    nnt_model_free(mw);
    nnt_model_free(mb);
    nnt_model_free(mf);
    nnt_runtime_close(whole_rt);
    nnt_runtime_close(block_rt);
    nnt_runtime_close(fused_rt);
}

static void test_minimax(void) { check_family("minimax_m2/fp32", "layers.1.self_attn.attention_probabilities"); }
static void test_mimo(void) { check_family("mimo_v2_flash/fp32", "layers.1.self_attn.attention_probabilities"); }
static void test_mimo_v25(void) { check_family("mimo_v2/fp4", "layers.1.self_attn.attention_probabilities"); }
static void test_kimi(void) { check_family("kimi_linear/fp32", "layers.3.self_attn.attention_probabilities"); }
static void test_deepseek(void) { check_family("deepseek_v4/fp32", "layers.2.self_attn.attention_probabilities"); }

/* 3000 tokens on MiniMax-M2 (4 heads: a whole pattern of 144 MB per block, held whole under a
 * bound of 100 GB): in blocks of at most 1 MiB, and in the backend's one pass with the last
 * query's pattern of block 1 saved, the arena's high water is under a quarter of the whole
 * pattern's, the last logits and that pattern row equal. */
static void test_long_prompt(void)
{
    nnt_runtime *whole_rt = unfused_runtime("attend-whole.ini", "100000"); /* a bound the whole pattern fits */
    nnt_runtime *block_rt = unfused_runtime("attend-1mb.ini", "1"), *fused_rt = t_runtime();
    nnt_model *mw = t_model(whole_rt, "minimax_m2/fp32"), *mb = t_model(block_rt, "minimax_m2/fp32");
    nnt_model *mf = t_model(fused_rt, "minimax_m2/fp32");
    enum { T = 3000 };
    int32_t *ids = malloc(T * sizeof *ids), *mask = malloc(T * sizeof *mask);
    CU_ASSERT_FATAL(ids && mask);
    for (int t = 0; t < T; t++) {
        ids[t] = (int32_t)((t * 37 + 5) % 255) + 1;
        mask[t] = 1;
    }
    nnt_trace *a, *b, *f;
    T_OK(whole_rt, nnt_trace_new(mw, &a));
    T_OK(block_rt, nnt_trace_new(mb, &b));
    T_OK(fused_rt, nnt_trace_new(mf, &f));
    T_OK(whole_rt, nnt_trace_save(a, "logits[:, -1]"));
    T_OK(block_rt, nnt_trace_save(b, "logits[:, -1]"));
    T_OK(fused_rt, nnt_trace_save(f, "logits[:, -1]"));
    /* the last query's pattern: cut from the whole, and made alone in one block of queries */
    T_OK(whole_rt, nnt_trace_save(a, "layers.1.self_attn.attention_probabilities[:, :, -1]"));
    T_OK(fused_rt, nnt_trace_save(f, "layers.1.self_attn.attention_probabilities[:, :, -1]"));
    T_OK(whole_rt, nnt_trace_run(a, ids, mask, 1, T));
    T_OK(block_rt, nnt_trace_run(b, ids, mask, 1, T));
    T_OK(fused_rt, nnt_trace_run(f, ids, mask, 1, T));
    const nnt_tensor *la = nnt_trace_get(a, "logits"), *lb = nnt_trace_get(b, "logits"), *lf = nnt_trace_get(f, "logits");
    CU_ASSERT_FATAL(la && lb && lf);
    CU_ASSERT(rel_diff(la, lb) <= 1e-6);
    CU_ASSERT(rel_diff(la, lf) <= 1e-6);
    const nnt_tensor *pa = nnt_trace_get(a, "layers.1.self_attn.attention_probabilities");
    const nnt_tensor *pf = nnt_trace_get(f, "layers.1.self_attn.attention_probabilities");
    CU_ASSERT_FATAL(pa && pf);
    CU_ASSERT(pf->ndim == 3 && pf->shape[1] == 4 && pf->shape[2] == T);
    CU_ASSERT(rel_diff(pa, pf) <= 1e-6);
    size_t hw_whole = nnt_arena_high_water(mw->arena), hw_block = nnt_arena_high_water(mb->arena);
    size_t hw_fused = nnt_arena_high_water(mf->arena);
    size_t pattern = (size_t)4 * T * T * sizeof(float);
    CU_ASSERT(hw_whole >= pattern); /* the whole pattern was held */
    CU_ASSERT(hw_block * 4 < hw_whole);
    CU_ASSERT(hw_fused * 4 < hw_whole);
    if (getenv("NNT_ATTEND_VERBOSE"))
        fprintf(stderr, "\n  3000 tokens: arena high water %zu bytes whole, %zu in blocks, %zu in one pass; logits differ by %.3g, %.3g\n",
                hw_whole, hw_block, hw_fused, rel_diff(la, lb), rel_diff(la, lf));
    nnt_trace_free(f);
    nnt_model_free(mf);
    nnt_runtime_close(fused_rt);
    nnt_trace_free(a);
    nnt_trace_free(b);
    free(ids);
    free(mask);
    nnt_model_free(mw);
    nnt_model_free(mb);
    nnt_runtime_close(whole_rt);
    nnt_runtime_close(block_rt);
}

/* A pattern past [attention] pattern_mb is refused before the forward, naming its bytes and the
 * key, when a request holds it whole (a save of all of it, an edit); a save of a slice holds only
 * the slice and is served under the same bound, equal to the slice of the whole pattern.
 * MiniMax-M2's fixture, 2 x 60 tokens, 4 heads: 115200 bytes. */
static void test_pattern_bound(void)
{
    char small[1024], roomy[1024];
    CU_ASSERT_FATAL(t_ini_with("attend-pattern.ini", "attention", "pattern_mb", "0.1", small, sizeof small) != NULL);
    CU_ASSERT_FATAL(t_ini_with("attend-pattern2.ini", "attention", "pattern_mb", "0.12", roomy, sizeof roomy) != NULL);
    nnt_runtime *a = NULL, *b = NULL;
    CU_ASSERT_EQUAL_FATAL(nnt_runtime_open(small, &a), NNT_OK);
    CU_ASSERT_EQUAL_FATAL(nnt_runtime_open(roomy, &b), NNT_OK);
    nnt_model *ma = t_model(a, "minimax_m2/fp32"), *mb = t_model(b, "minimax_m2/fp32");
    enum { T = 60 };
    int32_t ids[2 * T], mask[2 * T];
    make_rows(T, nnt_model_get_info(ma)->vocab_size, ids, mask);
    for (int edit = 0; edit < 2; edit++) {
        nnt_trace *ta;
        T_OK(a, nnt_trace_new(ma, &ta));
        if (edit)
            T_OK(a, nnt_trace_scale(ta, "layers.1.self_attn.attention_probabilities", 0.5f));
        else
            T_OK(a, nnt_trace_save(ta, "layers.1.self_attn.attention_probabilities"));
        CU_ASSERT_EQUAL(nnt_trace_run(ta, ids, mask, 2, T), NNT_ERR_OUT_OF_MEMORY);
        const char *msg = nnt_last_error(a);
        CU_ASSERT(strstr(msg, "115200 bytes") != NULL && strstr(msg, "[attention] pattern_mb") != NULL &&
                  strstr(msg, "layers.1.self_attn.attention_probabilities") != NULL);
        CU_ASSERT_EQUAL(nnt_trace_result_count(ta), 0);
        nnt_trace_free(ta);
    }
    nnt_trace *ta, *tb;
    T_OK(a, nnt_trace_new(ma, &ta));
    T_OK(b, nnt_trace_new(mb, &tb));
    T_OK(a, nnt_trace_save(ta, "layers.1.self_attn.attention_probabilities[:, 0, -1]"));
    T_OK(b, nnt_trace_save(tb, "layers.1.self_attn.attention_probabilities"));
    T_OK(a, nnt_trace_run(ta, ids, mask, 2, T));
    T_OK(b, nnt_trace_run(tb, ids, mask, 2, T));
    const nnt_tensor *p = nnt_trace_get(ta, "layers.1.self_attn.attention_probabilities");
    const nnt_tensor *whole = nnt_trace_get(tb, "layers.1.self_attn.attention_probabilities");
    CU_ASSERT_FATAL(p && whole && p->ndim == 2 && p->shape[0] == 2 && p->shape[1] == T);
    double worst = 0;
    for (int64_t r = 0; r < 2; r++) /* [row, head 0, query T - 1, key] of the whole */
        for (int64_t k = 0; k < T; k++)
            worst = fmax(worst, fabs(nnt_tensor_get_f64(p, r * T + k) -
                                     nnt_tensor_get_f64(whole, ((r * 4 + 0) * T + T - 1) * T + k)));
    CU_ASSERT(worst <= 1e-6);
    nnt_trace_free(ta);
    nnt_trace_free(tb);
    nnt_model_free(ma);
    nnt_model_free(mb);
    nnt_runtime_close(a);
    nnt_runtime_close(b);
}

/* Slices of a pattern on every family's fixture: saved in parts (one block of queries at a time,
 * the one pass making the mix) they equal the same slices of the whole pattern, and the values
 * after them are unchanged; two slices of one value and a whole save beside a slice too. */
static void check_slices(const char *dir, int layer)
{
    nnt_runtime *whole_rt = unfused_runtime("attend-whole-sl.ini", "64"), *part_rt = unfused_runtime("attend-blocks-sl.ini", "0.000001");
    nnt_runtime *fused_rt = t_runtime();
    nnt_runtime *rts[2] = {fused_rt, part_rt}; /* parts after the one pass; parts of the three ops in blocks */
    nnt_model *mw = t_model(whole_rt, dir);
    enum { T = 60 };
    int32_t ids[2 * T], mask[2 * T];
    make_rows(T, nnt_model_get_info(mw)->vocab_size, ids, mask);
    char pp[128], ps[128], pl[128], sp1[160], sp2[160], ss[160];
    snprintf(pp, sizeof pp, "layers.%d.self_attn.attention_probabilities", layer);
    snprintf(ps, sizeof ps, "layers.%d.self_attn.attention_scores", layer);
    snprintf(pl, sizeof pl, "layers.%d.layer_output", layer);
    snprintf(sp1, sizeof sp1, "%s[:, 1, -1]", pp);
    snprintf(sp2, sizeof sp2, "%s[1, :, 7:50:3, 2:]", pp);
    snprintf(ss, sizeof ss, "%s[:, :, 30]", ps);
    nnt_trace *w;
    T_OK(whole_rt, nnt_trace_new(mw, &w));
    T_OK(whole_rt, nnt_trace_save(w, pp));
    T_OK(whole_rt, nnt_trace_save(w, ps));
    T_OK(whole_rt, nnt_trace_save(w, pl));
    T_OK(whole_rt, nnt_trace_run(w, ids, mask, 2, T));
    const nnt_tensor *wp = nnt_trace_get(w, pp), *wsc = nnt_trace_get(w, ps), *wl = nnt_trace_get(w, pl);
    CU_ASSERT_FATAL(wp && wsc && wl);
    int64_t H = wp->shape[1], S = wp->shape[3];
    for (int k = 0; k < 2; k++) {
        nnt_model *m = t_model(rts[k], dir);
        nnt_trace *t;
        T_OK(rts[k], nnt_trace_new(m, &t));
        T_OK(rts[k], nnt_trace_save(t, sp1));
        T_OK(rts[k], nnt_trace_save(t, sp2));
        T_OK(rts[k], nnt_trace_save(t, ss));
        T_OK(rts[k], nnt_trace_save(t, pl));
        T_OK(rts[k], nnt_trace_run(t, ids, mask, 2, T));
        const nnt_tensor *a = nnt_trace_get(t, pp);
        char key2[192];
        snprintf(key2, sizeof key2, "%s#1", pp);
        const nnt_tensor *c = nnt_trace_get(t, key2), *d = nnt_trace_get(t, ps), *l = nnt_trace_get(t, pl);
        CU_ASSERT_FATAL(a && c && d && l);
        CU_ASSERT(a->ndim == 2 && a->shape[0] == 2 && a->shape[1] == S);
        CU_ASSERT(c->ndim == 3 && c->shape[0] == H && c->shape[1] == 15 && c->shape[2] == S - 2);
        CU_ASSERT(d->ndim == 3 && d->shape[1] == H && d->shape[2] == S);
        double worst = 0, scale = 0;
#define CMP(got, want)                                                                                                 \
    do {                                                                                                               \
        double g_ = (got), w_ = (want);                                                                                \
        if (isinf(w_) || isinf(g_)) {                                                                                  \
            if (g_ != w_) worst = INFINITY;                                                                            \
        } else {                                                                                                       \
            worst = fmax(worst, fabs(g_ - w_));                                                                        \
            scale = fmax(scale, fabs(w_));                                                                             \
        }                                                                                                              \
    } while (0)
        for (int64_t r = 0; r < 2; r++)
            for (int64_t j = 0; j < S; j++)
                CMP(nnt_tensor_get_f64(a, r * S + j), nnt_tensor_get_f64(wp, ((r * H + 1) * T + T - 1) * S + j));
        for (int64_t h = 0; h < H; h++)
            for (int64_t i = 0; i < 15; i++)
                for (int64_t j = 2; j < S; j++)
                    CMP(nnt_tensor_get_f64(c, (h * 15 + i) * (S - 2) + j - 2),
                        nnt_tensor_get_f64(wp, ((1 * H + h) * T + 7 + 3 * i) * S + j));
        for (int64_t r = 0; r < 2; r++)
            for (int64_t h = 0; h < H; h++)
                for (int64_t j = 0; j < S; j++)
                    CMP(nnt_tensor_get_f64(d, (r * H + h) * S + j), nnt_tensor_get_f64(wsc, ((r * H + h) * T + 30) * S + j));
#undef CMP
        double e = worst / (scale > 0 ? scale : 1);
        if (!(e <= 1e-6)) fprintf(stderr, "\n  %s (%s): slices differ by %.3g (relative)\n", dir, k ? "blocks" : "one pass", e);
        CU_ASSERT(e <= 1e-6);
        CU_ASSERT(rel_diff(l, wl) <= T_TOL);
        nnt_trace_free(t);
        nnt_model_free(m);
    }
    nnt_trace_free(w);
    nnt_model_free(mw);
    nnt_runtime_close(whole_rt);
    nnt_runtime_close(part_rt);
    nnt_runtime_close(fused_rt);
}

static void test_slices(void)
{
    check_slices("minimax_m2/fp32", 1);
    check_slices("mimo_v2_flash/fp32", 1);
    check_slices("mimo_v2/fp4", 1);
    check_slices("kimi_linear/fp32", 3);
    check_slices("deepseek_v4/fp32", 2);
}

/* [attention] block_mb refuses what is not a size, fused what is not yes or no, naming the key
 * and the value; an unknown key is named. */
static void test_ini_errors(void)
{
    static const char *const BAD[] = {"0", "-1", "lots", "0.0000001"};
    for (size_t i = 0; i < sizeof BAD / sizeof *BAD; i++) {
        char ini[1024];
        CU_ASSERT_FATAL(t_ini_with("attend-bad.ini", "attention", "block_mb", BAD[i], ini, sizeof ini) != NULL);
        nnt_runtime *rt = NULL;
        CU_ASSERT_NOT_EQUAL(nnt_runtime_open(ini, &rt), NNT_OK);
        const char *msg = nnt_last_error(rt);
        CU_ASSERT(strstr(msg, "[attention] block_mb") != NULL && strstr(msg, BAD[i]) != NULL);
        nnt_runtime_close(rt);
    }
    char ini[1024];
    CU_ASSERT_FATAL(t_ini_with("attend-bad.ini", "attention", "fused", "maybe", ini, sizeof ini) != NULL);
    nnt_runtime *bad = NULL;
    CU_ASSERT_NOT_EQUAL(nnt_runtime_open(ini, &bad), NNT_OK);
    CU_ASSERT(strstr(nnt_last_error(bad), "[attention] fused = 'maybe': expected yes or no") != NULL);
    nnt_runtime_close(bad);
    CU_ASSERT_FATAL(t_ini_with("attend-bad.ini", "attention", "blocks", "4", ini, sizeof ini) != NULL);
    nnt_runtime *rt = NULL;
    CU_ASSERT_NOT_EQUAL(nnt_runtime_open(ini, &rt), NNT_OK);
    CU_ASSERT(strstr(nnt_last_error(rt), "unknown key 'blocks' in [attention]") != NULL);
    nnt_runtime_close(rt);
}

int register_tests(void)
{
    CU_pSuite s = CU_add_suite("attend", NULL, NULL);
    if (!s) return -1;
    CU_add_test(s, "MiniMax-M2 in blocks of queries and in one pass", test_minimax);
    CU_add_test(s, "MiMo-V2-Flash in blocks of queries and in one pass", test_mimo);
    CU_add_test(s, "MiMo-V2.5 in blocks of queries and in one pass", test_mimo_v25);
    CU_add_test(s, "Kimi-Linear in blocks of queries and in one pass", test_kimi);
    CU_add_test(s, "DeepSeek-V4 in blocks of queries and in one pass", test_deepseek);
    CU_add_test(s, "3000 tokens within a quarter of the whole pattern's memory", test_long_prompt);
    CU_add_test(s, "a pattern past [attention] pattern_mb is refused, a slice of it served", test_pattern_bound);
    CU_add_test(s, "slices of patterns saved in parts equal those of the whole, every family", test_slices);
    CU_add_test(s, "[attention] block_mb and fused errors", test_ini_errors);
    return 0;
}
