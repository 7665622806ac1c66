/* test_attn_fused.c - the cpu backend's one-pass attention (attn_fused: tiles of keys, online
 * softmax, hidden tiles skipped) against the materialised ops it replaces (attn_scores, softmax,
 * attn_mix on the same arguments), within 1e-6 relative in float32, on every kind of mask the
 * families build: none, causal over a prompt and over a cache, padded keys and queries, sliding
 * windows with and without keys exempt from them, a per-query selection (`allow`), sinks, and
 * head layouts from one key head per query head to one for all (keys that are their own values,
 * as DeepSeek-V4's), at lengths that do not divide the tiles; its refusals; and the three ops
 * and the one pass reading a key/value cache in place (nnt_attn_mask.key_count). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/internal.h"
#include "test_util.h"

static nnt_runtime *rt;
static const nnt_backend_ops *ops;
static void *bctx;

static int setup(void)
{
    if (nnt_runtime_open(t_ini(), &rt) != NNT_OK) return -1;
    nnt_plugin *p = t_cpu_backend(rt);
    if (!p) return -1;
    ops = p->backend->ops;
    bctx = p->be_ctx;
    return 0;
}

static int teardown(void)
{
    nnt_runtime_close(rt);
    return 0;
}

static unsigned rng = 777u;
static float urand(void) /* uniform in [-1, 1) */
{
    rng = rng * 1664525u + 1013904223u;
    return (float)((rng >> 8) & 0xffffff) / 8388608.0f - 1.0f;
}

static nnt_tensor make4(int64_t a, int64_t b, int64_t c, int64_t d)
{
    int64_t shape[4] = {a, b, c, d};
    nnt_tensor t;
    CU_ASSERT_FATAL(nnt_tensor_alloc(&t, NNT_F32, 4, shape) == NNT_OK);
    return t;
}

/* One case: B rows, Hq query heads on Hkv key heads, T queries after P cached keys (S = P + T). */
typedef struct fcase {
    const char *name;
    int64_t B, Hq, Hkv, T, P, D, Dv;
    int mask;      /* 0: no mask at all */
    int causal;    /* causal rule */
    int window;    /* sliding window (0: none) */
    int nowin;     /* every 5th key exempt from the window */
    int pad_keys;  /* row 1 left-padded: its first keys invalid */
    int pad_query; /* a padding query row (sees nothing) */
    int allow;     /* a random per-query selection */
    int sinks;     /* a sink logit per head */
    int shared_kv; /* v is k */
    int must_run;  /* the backend has to take the call (enough work for its threads) */
} fcase;

/* Runs one case through both paths; returns the relative difference (-1: infinities differ). */
static double run_case(const fcase *c, int *done_out)
{
    int64_t B = c->B, Hq = c->Hq, Hkv = c->Hkv, T = c->T, S = c->P + c->T, D = c->D, Dv = c->shared_kv ? c->D : c->Dv;
    nnt_tensor q = make4(B, Hq, T, D), k = make4(B, Hkv, S, D), v = c->shared_kv ? k : make4(B, Hkv, S, Dv);
    nnt_tensor s = make4(B, Hq, T, S), o1 = make4(B, T, Hq, Dv), o2 = make4(B, T, Hq, Dv);
    float *qd = q.data, *kd = k.data, *vd = v.data;
    for (int64_t i = 0; i < B * Hq * T * D; i++) qd[i] = 2.0f * urand();
    for (int64_t i = 0; i < B * Hkv * S * D; i++) kd[i] = 2.0f * urand();
    if (!c->shared_kv)
        for (int64_t i = 0; i < B * Hkv * S * Dv; i++) vd[i] = urand();
    int32_t *qpos = calloc((size_t)(B * T), sizeof *qpos), *kpos = calloc((size_t)(B * S), sizeof *kpos);
    uint8_t *kvalid = calloc((size_t)(B * S), 1), *qvalid = calloc((size_t)(B * T), 1), *nowin = calloc((size_t)S, 1);
    uint8_t *allow = calloc((size_t)(B * T * S), 1);
    float *sinks = calloc((size_t)Hq, sizeof *sinks);
    CU_ASSERT_FATAL(qpos && kpos && kvalid && qvalid && nowin && allow && sinks);
    for (int64_t b = 0; b < B; b++) {
        int64_t pad = c->pad_keys && b == 1 ? (S / 3 > 0 ? S / 3 : 1) : 0; /* row 1's first keys are padding */
        if (pad >= S) pad = S - 1;
        for (int64_t j = 0; j < S; j++) {
            kvalid[b * S + j] = j >= pad;
            kpos[b * S + j] = (int32_t)(j >= pad ? j - pad : 0);
        }
        for (int64_t t = 0; t < T; t++) {
            int64_t j = c->P + t;
            qvalid[b * T + t] = kvalid[b * S + j] && !(c->pad_query && b == 0 && t == T / 2);
            qpos[b * T + t] = kpos[b * S + j];
            for (int64_t jj = 0; jj < S; jj++) allow[(b * T + t) * S + jj] = urand() > -0.4f;
        }
    }
    for (int64_t j = 0; j < S; j++) nowin[j] = c->nowin && j % 5 == 0;
    for (int64_t h = 0; h < Hq; h++) sinks[h] = 1.5f * urand();
    nnt_attn_mask m = {.struct_size = sizeof m,
                       .q_pos = qpos,
                       .k_pos = kpos,
                       .key_valid = c->pad_keys ? kvalid : NULL,
                       .query_valid = c->pad_keys || c->pad_query ? qvalid : NULL,
                       .key_no_window = c->nowin ? nowin : NULL,
                       .allow = c->allow ? allow : NULL,
                       .causal = c->causal,
                       .window = c->window};
    const nnt_attn_mask *mp = c->mask ? &m : NULL;
    const float *sk = c->sinks ? sinks : NULL;
    float scale = 1.0f / sqrtf((float)D);
    nnt_error err = {0};
    CU_ASSERT_FATAL(ops->attn_scores(bctx, &q, &k, scale, mp, &s, &err) == NNT_OK);
    CU_ASSERT_FATAL(ops->softmax(bctx, &s, sk, &s, &err) == NNT_OK);
    CU_ASSERT_FATAL(ops->attn_mix(bctx, &s, &v, &o1, &err) == NNT_OK);
    int done = -1;
    for (int64_t i = 0; i < nnt_tensor_numel(&o2); i++) ((float *)o2.data)[i] = 12345.0f;
    nnt_status st = ops->attn_fused(bctx, &q, &k, &v, scale, mp, sk, &o2, &done, &err);
    CU_ASSERT_EQUAL(st, NNT_OK);
    if (st != NNT_OK) fprintf(stderr, "\n  %s: %s\n", c->name, err.msg);
    double e = done == 1 ? t_rel_err(&o2, &o1, NULL) : 0.0;
    if (done == 0) { /* declined: o untouched */
        int untouched = 1;
        for (int64_t i = 0; i < nnt_tensor_numel(&o2); i++) untouched &= ((float *)o2.data)[i] == 12345.0f;
        CU_ASSERT(untouched);
    }
    *done_out = done;
    free(qpos);
    free(kpos);
    free(kvalid);
    free(qvalid);
    free(nowin);
    free(allow);
    free(sinks);
    nnt_tensor_free(&q);
    nnt_tensor_free(&k);
    if (!c->shared_kv) nnt_tensor_free(&v);
    nnt_tensor_free(&s);
    nnt_tensor_free(&o1);
    nnt_tensor_free(&o2);
    return e;
}

static void test_against_materialised(void)
{
    const fcase cases[] = {
        {"no mask", 1, 4, 2, 70, 0, 16, 12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1},
        {"causal prompt, grouped heads, 3 key tiles", 1, 8, 2, 600, 0, 16, 8, 1, 1, 0, 0, 0, 0, 0, 0, 0, 1},
        {"causal after a cache of 37", 2, 6, 3, 300, 37, 16, 16, 1, 1, 0, 0, 0, 0, 0, 0, 0, 1},
        {"padded keys and queries, 2 rows", 2, 4, 1, 281, 0, 8, 8, 1, 1, 0, 0, 1, 1, 0, 0, 0, 1},
        {"window of 100 across tiles", 1, 4, 4, 700, 0, 8, 8, 1, 1, 100, 0, 0, 0, 0, 0, 0, 1},
        {"window of 7 with exempt keys", 2, 4, 2, 523, 11, 8, 4, 1, 1, 7, 1, 1, 0, 0, 0, 0, 1},
        {"window larger than the prompt", 1, 2, 2, 129, 0, 8, 8, 1, 1, 4096, 0, 0, 0, 0, 0, 0, 1},
        {"window without the causal rule", 1, 2, 2, 300, 0, 8, 8, 1, 0, 33, 0, 0, 0, 0, 0, 0, 1},
        {"per-query selection (allow)", 2, 4, 2, 300, 20, 8, 8, 1, 1, 0, 0, 1, 0, 1, 0, 0, 1},
        {"sinks, causal, padded", 2, 8, 2, 257, 0, 16, 16, 1, 1, 0, 0, 1, 1, 0, 1, 0, 1},
        {"sinks with a window (gpt-oss style)", 1, 8, 8, 333, 0, 8, 8, 1, 1, 128, 0, 0, 0, 0, 1, 0, 1},
        {"one key head for all, keys as values (DeepSeek-V4)", 1, 16, 1, 513, 0, 24, 24, 1, 1, 0, 0, 0, 0, 0, 1, 1, 1},
        {"one key head, selection and window", 2, 16, 1, 260, 9, 24, 24, 1, 1, 64, 1, 1, 0, 1, 1, 1, 1},
        {"one query", 1, 4, 4, 1, 500, 16, 16, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0},
        {"few queries after a long cache", 2, 4, 2, 3, 777, 16, 16, 1, 1, 0, 0, 1, 0, 0, 1, 0, 0},
    };
    int failures = 0;
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        int done = -1;
        double e = run_case(&cases[i], &done);
        int ok = done == 1 || done == 0;
        if (cases[i].must_run) ok &= done == 1;
        ok &= e >= 0 && e <= 1e-6;
        if (getenv("NNT_TEST_VERBOSE")) fprintf(stderr, "  %s: done %d, %.3g\n", cases[i].name, done, e);
        if (!ok) {
            fprintf(stderr, "\n  %s: done %d, relative difference %.3g\n", cases[i].name, done, e);
            failures++;
        }
    }
    CU_ASSERT_EQUAL(failures, 0);
}

/* A padding query and a query whose keys are all hidden get zeros (no sink) as softmax gives;
 * the same queries with sinks get zeros too (the sink carries no value). */
static void test_hidden_rows(void)
{
    int64_t B = 1, H = 2, T = 40, D = 8;
    nnt_tensor q = make4(B, H, T, D), k = make4(B, H, T, D), o = make4(B, T, H, D);
    for (int64_t i = 0; i < B * H * T * D; i++) ((float *)q.data)[i] = ((float *)k.data)[i] = urand();
    int32_t pos[40];
    uint8_t qvalid[40], kvalid[40];
    for (int t = 0; t < 40; t++) {
        pos[t] = t;
        qvalid[t] = t != 5;
        kvalid[t] = t >= 10; /* queries 0..9 see no key at all */
    }
    nnt_attn_mask m = {.struct_size = sizeof m, .q_pos = pos, .k_pos = pos, .key_valid = kvalid, .query_valid = qvalid, .causal = 1};
    float sinks[2] = {0.5f, -0.5f};
    for (int with_sinks = 0; with_sinks < 2; with_sinks++) {
        int done = -1;
        nnt_error err = {0};
        CU_ASSERT_EQUAL_FATAL(ops->attn_fused(bctx, &q, &k, &k, 0.5f, &m, with_sinks ? sinks : NULL, &o, &done, &err), NNT_OK);
        CU_ASSERT_EQUAL_FATAL(done, 1);
        int zeros = 1, finite = 1;
        for (int64_t t = 0; t < T; t++)
            for (int64_t i = 0; i < H * D; i++) {
                float x = ((float *)o.data)[t * H * D + i];
                if (t < 10) zeros &= x == 0.0f;
                finite &= isfinite(x);
            }
        CU_ASSERT(zeros && finite);
    }
    nnt_tensor_free(&q);
    nnt_tensor_free(&k);
    nnt_tensor_free(&o);
}

/* Declined: a bfloat16-flagged output (the three ops' roundings) comes back done = 0 with o
 * untouched. Refused: unlike shapes (named), a NULL done. */
static void test_declines_and_refusals(void)
{
    nnt_tensor q = make4(1, 4, 64, 8), k = make4(1, 2, 64, 8), o = make4(1, 64, 4, 8), bad = make4(1, 64, 4, 7);
    memset(q.data, 0, nnt_tensor_nbytes(&q));
    memset(k.data, 0, nnt_tensor_nbytes(&k));
    for (int64_t i = 0; i < nnt_tensor_numel(&o); i++) ((float *)o.data)[i] = 3.0f;
    o.flags = NNT_TENSOR_BF16_VALUES;
    nnt_error err = {0};
    int done = -1;
    CU_ASSERT_EQUAL(ops->attn_fused(bctx, &q, &k, &k, 1.0f, NULL, NULL, &o, &done, &err), NNT_OK);
    CU_ASSERT_EQUAL(done, 0);
    CU_ASSERT_EQUAL(((float *)o.data)[17], 3.0f);
    CU_ASSERT_EQUAL(ops->attn_fused(bctx, &q, &k, &k, 1.0f, NULL, NULL, &bad, &done, &err), NNT_ERR_SHAPE);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "attn_fused"));
    o.flags = 0;
    CU_ASSERT_EQUAL(ops->attn_fused(bctx, &q, &k, &k, 1.0f, NULL, NULL, &o, NULL, &err), NNT_ERR_INVALID_ARGUMENT);
    nnt_tensor_free(&q);
    nnt_tensor_free(&k);
    nnt_tensor_free(&o);
    nnt_tensor_free(&bad);
}

/* A key/value cache handed over in place (NNT_FEATURE_KEY_COUNT): k and v with a key axis of
 * capacity C longer than the S keys, its rows past S holding NaN (read, they would show), give
 * attn_scores, softmax and attn_mix the results of the same keys in tensors of exactly S bit for
 * bit (the same products, with the key heads C rows apart), in float32 and with bfloat16
 * roundings, and attn_fused the three ops' result within 1e-6 relative. */
static double in_place_case(int64_t B, int64_t Hq, int64_t Hkv, int64_t T, int64_t P, int bf16, double *fused_err)
{
    int64_t S = P + T, C = S + 13, D = 16, Dv = 12;
    nnt_tensor q = make4(B, Hq, T, D), k = make4(B, Hkv, S, D), v = make4(B, Hkv, S, Dv);
    nnt_tensor kc = make4(B, Hkv, C, D), vc = make4(B, Hkv, C, Dv);
    nnt_tensor s1 = make4(B, Hq, T, S), s2 = make4(B, Hq, T, S), o1 = make4(B, T, Hq, Dv), o2 = make4(B, T, Hq, Dv);
    nnt_tensor o3 = make4(B, T, Hq, Dv);
    float *qd = q.data, *kd = k.data, *vd = v.data, *kcd = kc.data, *vcd = vc.data;
    for (int64_t i = 0; i < B * Hq * T * D; i++) qd[i] = 2.0f * urand();
    for (int64_t i = 0; i < B * Hkv * S * D; i++) kd[i] = 2.0f * urand();
    for (int64_t i = 0; i < B * Hkv * S * Dv; i++) vd[i] = urand();
    for (int64_t i = 0; i < B * Hkv * C * D; i++) kcd[i] = NAN;
    for (int64_t i = 0; i < B * Hkv * C * Dv; i++) vcd[i] = NAN;
    for (int64_t r = 0; r < B * Hkv; r++) {
        memcpy(kcd + r * C * D, kd + r * S * D, (size_t)(S * D) * sizeof(float));
        memcpy(vcd + r * C * Dv, vd + r * S * Dv, (size_t)(S * Dv) * sizeof(float));
    }
    int32_t *qpos = calloc((size_t)(B * T), sizeof *qpos), *kpos = calloc((size_t)(B * S), sizeof *kpos);
    uint8_t *kvalid = calloc((size_t)(B * S), 1);
    CU_ASSERT_FATAL(qpos && kpos && kvalid);
    for (int64_t b = 0; b < B; b++) {
        for (int64_t j = 0; j < S; j++) {
            kpos[b * S + j] = (int32_t)j;
            kvalid[b * S + j] = !(b == 1 && j < 5); /* row 1 left-padded */
        }
        for (int64_t t = 0; t < T; t++) qpos[b * T + t] = (int32_t)(P + t);
    }
    nnt_attn_mask m = {.struct_size = sizeof m, .q_pos = qpos, .k_pos = kpos, .key_valid = kvalid, .causal = 1};
    nnt_attn_mask mc = m;
    mc.key_count = S;
    if (bf16) s1.flags = s2.flags = o1.flags = o2.flags = NNT_TENSOR_BF16_VALUES;
    float scale = 1.0f / sqrtf((float)D);
    nnt_error err = {0};
    CU_ASSERT_FATAL(ops->attn_scores(bctx, &q, &k, scale, &m, &s1, &err) == NNT_OK);
    CU_ASSERT_FATAL(ops->softmax(bctx, &s1, NULL, &s1, &err) == NNT_OK);
    CU_ASSERT_FATAL(ops->attn_mix(bctx, &s1, &v, &o1, &err) == NNT_OK);
    nnt_status st = ops->attn_scores(bctx, &q, &kc, scale, &mc, &s2, &err);
    if (st == NNT_OK) st = ops->softmax(bctx, &s2, NULL, &s2, &err);
    if (st == NNT_OK) st = ops->attn_mix(bctx, &s2, &vc, &o2, &err);
    CU_ASSERT_EQUAL(st, NNT_OK);
    if (st != NNT_OK) fprintf(stderr, "\n  in place: %s\n", err.msg);
    double e = st == NNT_OK && !memcmp(o1.data, o2.data, nnt_tensor_nbytes(&o1)) ? 0.0 : 1.0;
    *fused_err = 0.0;
    if (!bf16) { /* the one pass over the cache in place, against the compact ops' result */
        int done = -1;
        st = ops->attn_fused(bctx, &q, &kc, &vc, scale, &mc, NULL, &o3, &done, &err);
        CU_ASSERT_EQUAL(st, NNT_OK);
        *fused_err = st == NNT_OK && done == 1 ? t_rel_err(&o3, &o1, NULL) : done == 0 ? 0.0 : 1.0;
    }
    free(qpos);
    free(kpos);
    free(kvalid);
    nnt_tensor *all[] = {&q, &k, &v, &kc, &vc, &s1, &s2, &o1, &o2, &o3};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) nnt_tensor_free(all[i]);
    return e;
}

static void test_keys_in_place(void)
{
    const struct {
        int64_t B, Hq, Hkv, T, P;
    } cases[] = {{2, 6, 2, 1, 300}, {1, 4, 4, 3, 50}, {2, 8, 2, 20, 40}, {1, 16, 1, 9, 700}, {2, 2, 2, 1, 7}};
    CU_ASSERT_FATAL(NNT_STRUCT_HAS(ops, nnt_backend_ops, features) && (ops->features & NNT_FEATURE_KEY_COUNT));
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
        for (int bf16 = 0; bf16 < 2; bf16++) {
            double fe = -1.0, e = in_place_case(cases[i].B, cases[i].Hq, cases[i].Hkv, cases[i].T, cases[i].P, bf16, &fe);
            int ok = e >= 0 && e <= 1e-6 && fe >= 0 && fe <= 1e-6;
            if (!ok || getenv("NNT_TEST_VERBOSE"))
                fprintf(stderr, "\n  in place, case %zu%s: ops %.3g, fused %.3g\n", i, bf16 ? " bf16" : "", e, fe);
            CU_ASSERT(ok);
        }
    /* a key count past the key axis is refused */
    nnt_tensor q = make4(1, 2, 1, 8), k = make4(1, 2, 10, 8), s = make4(1, 2, 1, 11);
    memset(q.data, 0, nnt_tensor_nbytes(&q));
    memset(k.data, 0, nnt_tensor_nbytes(&k));
    nnt_attn_mask m = {.struct_size = sizeof m, .key_count = 11};
    nnt_error err = {0};
    CU_ASSERT_EQUAL(ops->attn_scores(bctx, &q, &k, 1.0f, &m, &s, &err), NNT_ERR_SHAPE);
    nnt_tensor_free(&q);
    nnt_tensor_free(&k);
    nnt_tensor_free(&s);
}

int register_tests(void)
{
    CU_pSuite s = CU_add_suite("attn_fused", setup, teardown);
    if (!s) return -1;
    if (!CU_add_test(s, "one pass equals scores, softmax and mix on every mask kind and head layout",
                     test_against_materialised) ||
        !CU_add_test(s, "queries that see nothing get zeros, with and without sinks", test_hidden_rows) ||
        !CU_add_test(s, "bfloat16 declined, bad shapes and a NULL done refused", test_declines_and_refusals) ||
        !CU_add_test(s, "keys and values read in place from a longer key axis (key_count)", test_keys_in_place))
        return -1;
    return 0;
}
