/* test_tape.c - the gradient tape over the cpu backend: a small decoder block (RMS norms, grouped
 * attention with rotary and a causal mask, a softmax router, SwiGLU) written as op calls the way a
 * family writes them, with memory reused and ops in place, recorded once; the gradient at its
 * input from cotangents on its output and on the routing weights is compared with central finite
 * differences of the same block run without the tape; the same for the row and column moves of
 * the MoE combine, for a routed combine whose routing weights stay in backend memory (route,
 * per-expert products scaled in place by scale_rows, scatter_add_rows without scales), whose
 * gradient reaches the router's logits, and for DeepSeek-V4's streams (hyper-connections, their
 * mix, a compressor, the indexer's scores as a constant, the readout collapse). Also: a seed
 * read back at its own mark,
 * linearity in the seeds, and the refusals (an op the tape does not record, a backend without a
 * backward entry). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/grad/tape.h"
#include "test_util.h"

enum { T = 6, D = 8, HQ = 2, HKV = 1, DH = 4, I = 10, E = 4, K = 2 };

static nnt_runtime *rt;
static const nnt_backend_ops *cpu;
static void *cctx;

static int setup(void)
{
    if (nnt_runtime_open(t_ini(), &rt) != NNT_OK) return -1;
    nnt_plugin *p = t_cpu_backend(rt);
    if (!p) return -1;
    cpu = p->backend->ops;
    cctx = p->be_ctx;
    return 0;
}

static int teardown(void)
{
    nnt_runtime_close(rt);
    return 0;
}

static unsigned rng = 2024u;
static float urand(void) /* uniform in [-1, 1) */
{
    rng = rng * 1664525u + 1013904223u;
    return (float)((rng >> 8) & 0xffffff) / 8388608.0f - 1.0f;
}

/* The block's weights (host F32: the cpu backend reads host memory). */
typedef struct block {
    float g1[D], g2[D], wq[HQ * DH * D], wk[HKV * DH * D], wv[HKV * DH * D], wo[D * HQ * DH], wr[E * D];
    float wg[I * D], wu[I * D], wd[D * I], inv_freq[DH / 2];
    int32_t pos[T];
} block;

static nnt_tensor mat(float *p, int64_t r, int64_t c)
{
    return (nnt_tensor){.dtype = NNT_F32, .ndim = 2, .shape = {r, c}, .data = p};
}

static nnt_tensor view4(const nnt_tensor *t, int64_t a, int64_t b, int64_t c, int64_t d)
{
    nnt_tensor v = *t;
    v.ndim = 4;
    v.shape[0] = a, v.shape[1] = b, v.shape[2] = c, v.shape[3] = d;
    return v;
}

static void make_block(block *b)
{
    float *all[] = {b->g1, b->g2, b->wq, b->wk, b->wv, b->wo, b->wr, b->wg, b->wu, b->wd};
    size_t n[] = {D, D, HQ * DH * D, HKV * DH * D, HKV * DH * D, D * HQ * DH, E * D, I * D, I * D, D * I};
    for (int k = 0; k < 10; k++)
        for (size_t i = 0; i < n[k]; i++) all[k][i] = k < 2 ? 1.0f + 0.3f * urand() : 0.5f * urand();
    for (int i = 0; i < DH / 2; i++) b->inv_freq[i] = powf(100.0f, -2.0f * (float)i / DH);
    for (int t = 0; t < T; t++) b->pos[t] = t;
}

#define TRY(x)                                                                                                         \
    do {                                                                                                               \
        if ((st = (x)) != NNT_OK) return st;                                                                           \
    } while (0)

/* The attention half: x [T, D] -> a [T, D] (buffers from the pool, q's memory free afterwards). */
static nnt_status attention(const nnt_backend_ops *o, void *c, block *b, float *pool, const nnt_tensor *x,
                            nnt_tensor *a, nnt_error *err)
{
    nnt_status st;
    nnt_tensor h = mat(pool, T, D), q = mat(pool + 64, T, HQ * DH), k = mat(pool + 128, T, HKV * DH),
               v = mat(pool + 160, T, HKV * DH), qh = mat(pool + 192, 1, 1), kh = mat(pool + 256, 1, 1),
               vh = mat(pool + 288, 1, 1), s = mat(pool + 320, 1, 1), oo = mat(pool + 400, T, HQ * DH);
    nnt_tensor g1 = {.dtype = NNT_F32, .ndim = 1, .shape = {D}, .data = b->g1};
    nnt_tensor wq = mat(b->wq, HQ * DH, D), wk = mat(b->wk, HKV * DH, D), wv = mat(b->wv, HKV * DH, D),
               wo = mat(b->wo, D, HQ * DH);
    qh = view4(&qh, 1, HQ, T, DH), kh = view4(&kh, 1, HKV, T, DH), vh = view4(&vh, 1, HKV, T, DH);
    s = view4(&s, 1, HQ, T, T);
    TRY(o->rms_norm(c, x, &g1, 1e-6f, &h, err));
    TRY(o->linear(c, &h, &wq, &q, err));
    TRY(o->linear(c, &h, &wk, &k, err));
    TRY(o->linear(c, &h, &wv, &v, err));
    nnt_tensor q4 = view4(&q, 1, T, HQ, DH), k4 = view4(&k, 1, T, HKV, DH), v4 = view4(&v, 1, T, HKV, DH);
    TRY(o->swap12(c, &q4, &qh, err));
    TRY(o->swap12(c, &k4, &kh, err));
    TRY(o->swap12(c, &v4, &vh, err));
    TRY(o->rope(c, &qh, b->pos, b->inv_freq, 0, DH, NNT_ROPE_NEOX, 1.0f, err));
    TRY(o->rope(c, &kh, b->pos, b->inv_freq, 0, DH, NNT_ROPE_NEOX, 1.0f, err));
    nnt_attn_mask m = {.struct_size = sizeof m, .q_pos = b->pos, .k_pos = b->pos, .causal = 1};
    TRY(o->attn_scores(c, &qh, &kh, 0.5f, &m, &s, err));
    TRY(o->softmax(c, &s, NULL, &s, err)); /* in place */
    nnt_tensor o4 = view4(&oo, 1, T, HQ, DH);
    TRY(o->attn_mix(c, &s, &vh, &o4, err));
    return o->linear(c, &oo, &wo, a, err);
}

/* The whole block from x_in [T, D]: out [T, D] and the routing weights w [T, K] downloaded to the
 * host. With a tape (o, c its table), the input, the routing weights, the activation and the
 * output are marked with tags 0, 1, 2, 3. */
static nnt_status run_block(const nnt_backend_ops *o, void *c, nnt_tape *tp, block *b, float *pool,
                            const float *x_in, float *out_h, float *w_h, nnt_error *err)
{
    nnt_status st;
    nnt_tensor x = mat(pool + 608, T, D), a = mat(pool + 704, T, D);
    TRY(o->upload(c, x.data, x_in, sizeof(float) * T * D, err));
    if (tp) TRY(nnt_tape_mark(tp, 0, &x, err));
    TRY(attention(o, c, b, pool, &x, &a, err));
    TRY(o->add(c, &x, &a, &x, err)); /* the residual, in place */
    nnt_tensor h2 = mat(pool + 64, T, D); /* q's memory again */
    nnt_tensor g2 = {.dtype = NNT_F32, .ndim = 1, .shape = {D}, .data = b->g2};
    TRY(o->rms_norm(c, &x, &g2, 1e-6f, &h2, err));
    nnt_tensor wr = mat(b->wr, E, D), lg = mat(pool + 800, T, E), w = mat(pool + 832, T, K);
    nnt_tensor idx = {.dtype = NNT_I32, .ndim = 2, .shape = {T, K}, .data = pool + 848};
    nnt_route_params rp = {.struct_size = sizeof rp, .score_fn = NNT_SCORE_SOFTMAX, .top_k = K, .renormalize = 1,
                           .scaling_factor = 1.5f};
    TRY(o->linear(c, &h2, &wr, &lg, err));
    TRY(o->route(c, &lg, NULL, &rp, &idx, &w, err));
    if (tp) TRY(nnt_tape_mark(tp, 1, &w, err));
    nnt_tensor wg = mat(b->wg, I, D), wu = mat(b->wu, I, D), wd = mat(b->wd, D, I);
    nnt_tensor gg = mat(pool + 896, T, I), uu = mat(pool + 1008, T, I), act = mat(pool + 1072, T, I),
               neu = mat(pool + 1136, T, I), mm = mat(pool + 192, T, D); /* mm: qh's memory */
    TRY(o->linear(c, &h2, &wg, &gg, err));
    TRY(o->linear(c, &h2, &wu, &uu, err));
    TRY(o->swiglu(c, &gg, &uu, 0.0f, &act, &neu, err));
    if (tp) TRY(nnt_tape_mark(tp, 2, &act, err));
    TRY(o->linear(c, &neu, &wd, &mm, err));
    TRY(o->add(c, &x, &mm, &a, err)); /* out in a's memory */
    if (tp) TRY(nnt_tape_mark(tp, 3, &a, err));
    TRY(o->download(c, out_h, a.data, sizeof(float) * T * D, err));
    return o->download(c, w_h, w.data, sizeof(float) * T * K, err);
}

static float *pool_new(void)
{
    float *p = aligned_alloc(64, 1280 * sizeof *p); /* 64-byte aligned, as the run's arena hands out */
    CU_ASSERT_FATAL(p != NULL);
    memset(p, 0, 1280 * sizeof *p);
    return p;
}

/* L = sum(c_out . out) + sum(c_w . w) of the block without a tape. */
static double loss(block *b, const float *x, const float *c_out, const float *c_w)
{
    float out[T * D], w[T * K], *pool = pool_new();
    nnt_error err = {0};
    CU_ASSERT_EQUAL_FATAL(run_block(cpu, cctx, NULL, b, pool, x, out, w, &err), NNT_OK);
    free(pool);
    double L = 0.0;
    for (int i = 0; i < T * D; i++) L += (double)c_out[i] * out[i];
    for (int i = 0; i < T * K; i++) L += (double)c_w[i] * w[i];
    return L;
}

/* Records the block on x and runs the backward from seeds (c_out, c_w); the gradient at tag `want`. */
static void tape_grad(block *b, const float *x, const float *c_out, const float *c_w, int want, nnt_tensor *g)
{
    nnt_tape *tp;
    nnt_error err = {0};
    float out[T * D], w[T * K], *pool = pool_new();
    CU_ASSERT_EQUAL_FATAL(nnt_tape_new(cpu, cctx, &tp, &err), NNT_OK);
    nnt_status st = run_block(nnt_tape_ops(tp), nnt_tape_ctx(tp), tp, b, pool, x, out, w, &err);
    if (st != NNT_OK) fprintf(stderr, "record: %s\n", err.msg);
    CU_ASSERT_EQUAL_FATAL(st, NNT_OK);
    nnt_tape_seed seeds[2] = {{.tag = 3, .cotangent = c_out}, {.tag = 1, .cotangent = c_w}};
    nnt_tape_grad grad = {.tag = want, .grad = g};
    st = nnt_tape_backward(tp, seeds, c_w ? 2 : 1, &grad, 1, &err);
    if (st != NNT_OK) fprintf(stderr, "backward: %s\n", err.msg);
    CU_ASSERT_EQUAL_FATAL(st, NNT_OK);
    nnt_tape_free(tp);
    free(pool);
}

static void fill_rand(float *p, int n, float s)
{
    for (int i = 0; i < n; i++) p[i] = s * urand();
}

static void test_block_against_differences(void)
{
    block b;
    make_block(&b);
    float x[T * D], c_out[T * D], c_w[T * K];
    fill_rand(x, T * D, 1.0f);
    fill_rand(c_out, T * D, 1.0f);
    fill_rand(c_w, T * K, 1.0f);
    nnt_tensor g;
    tape_grad(&b, x, c_out, c_w, 0, &g);
    CU_ASSERT_EQUAL(g.ndim, 2);
    CU_ASSERT_EQUAL(g.shape[0] * g.shape[1], T * D);
    const float *gp = g.data;
    double amax = 0.0, worst = 0.0;
    for (int i = 0; i < T * D; i++) amax = fmax(amax, fabs(gp[i]));
    const float h = 2e-3f;
    for (int i = 0; i < T * D; i++) {
        float xp[T * D], xm[T * D];
        memcpy(xp, x, sizeof x);
        memcpy(xm, x, sizeof x);
        xp[i] += h, xm[i] -= h;
        double fd = (loss(&b, xp, c_out, c_w) - loss(&b, xm, c_out, c_w)) / (2.0 * h);
        worst = fmax(worst, fabs(fd - gp[i]));
    }
    /* float32 forwards: central differences at h = 2e-3 carry about 1e-4 of rounding */
    if (getenv("NNT_TAPE_VERBOSE") || worst > 3e-3 * amax) fprintf(stderr, "tape vs differences: worst %.3g, largest %.3g\n", worst, amax);
    CU_ASSERT(amax > 0.1);
    CU_ASSERT(worst <= 3e-3 * amax);
    nnt_tensor_free(&g);
}

static void test_seed_and_linearity(void)
{
    block b;
    make_block(&b);
    float x[T * D], c1[T * D], c2[T * D], c12[T * D];
    fill_rand(x, T * D, 1.0f);
    fill_rand(c1, T * D, 1.0f);
    fill_rand(c2, T * D, 1.0f);
    for (int i = 0; i < T * D; i++) c12[i] = c1[i] + c2[i];
    nnt_tensor at_out, g1, g2, g12;
    tape_grad(&b, x, c1, NULL, 3, &at_out); /* a seed read back at its own mark */
    CU_ASSERT_EQUAL(memcmp(at_out.data, c1, sizeof c1), 0);
    tape_grad(&b, x, c1, NULL, 0, &g1);
    tape_grad(&b, x, c2, NULL, 0, &g2);
    tape_grad(&b, x, c12, NULL, 0, &g12);
    const float *a = g1.data, *bb = g2.data, *s = g12.data;
    double worst = 0.0, amax = 0.0;
    for (int i = 0; i < T * D; i++) {
        worst = fmax(worst, fabs((double)a[i] + bb[i] - s[i]));
        amax = fmax(amax, fabs(s[i]));
    }
    CU_ASSERT(amax > 0.1);
    CU_ASSERT(worst <= 1e-5 * amax);
    nnt_tensor_free(&at_out);
    nnt_tensor_free(&g1);
    nnt_tensor_free(&g2);
    nnt_tensor_free(&g12);
}

/* Row and column moves as the family kit's MoE combine writes them: gather, scatter-add with row
 * scales, scatter into slots, the sum over slots, column copies (one within a tensor, its
 * columns overlapping); out [T, D] from x [T, D], marked 0 (x) and 3 (out). */
static nnt_status run_moves(const nnt_backend_ops *o, void *c, nnt_tape *tp, const float *wt, float *pool,
                            const float *x_in, float *out_h, nnt_error *err)
{
    nnt_status st;
    static const int32_t rows[4] = {1, 3, 3, 5}, slots[4] = {2, 7, 6, 11};
    static const float scale[4] = {0.5f, 1.0f, 2.0f, -1.0f};
    nnt_tensor x = mat(pool, T, D), xe = mat(pool + 64, 4, D), ye = mat(pool + 112, 4, D), r = mat(pool + 160, T, D),
               ps = mat(pool + 208, T * K, D), sm = mat(pool + 304, T, D), y = mat(pool + 352, T, D),
               w = mat((float *)wt, D, D);
    TRY(o->upload(c, x.data, x_in, sizeof(float) * T * D, err));
    if (tp) TRY(nnt_tape_mark(tp, 0, &x, err));
    TRY(o->gather_rows(c, &x, rows, 4, &xe, err));
    TRY(o->linear(c, &xe, &w, &ye, err));
    TRY(o->fill(c, &r, 0.0f, err));
    TRY(o->scatter_add_rows(c, &ye, rows, scale, 4, &r, err));
    TRY(o->fill(c, &ps, 0.0f, err));
    TRY(o->scatter_rows(c, &ye, slots, scale, 4, &ps, err));
    nnt_tensor ps3 = ps;
    ps3.ndim = 3, ps3.shape[0] = T, ps3.shape[1] = K, ps3.shape[2] = D;
    TRY(o->sum_axis1(c, &ps3, &sm, err));
    TRY(o->fill(c, &y, 0.0f, err));
    TRY(o->copy_cols(c, &x, 2, &y, 0, 5, err));
    TRY(o->copy_cols(c, &y, 0, &y, 2, 4, err)); /* within y, overlapping */
    TRY(o->add(c, &r, &sm, &r, err));
    TRY(o->add(c, &r, &y, &r, err));
    if (tp) TRY(nnt_tape_mark(tp, 3, &r, err));
    return o->download(c, out_h, r.data, sizeof(float) * T * D, err);
}

static double moves_loss(const float *wt, const float *x, const float *cot)
{
    float out[T * D], *pool = pool_new();
    nnt_error err = {0};
    CU_ASSERT_EQUAL_FATAL(run_moves(cpu, cctx, NULL, wt, pool, x, out, &err), NNT_OK);
    free(pool);
    double L = 0.0;
    for (int i = 0; i < T * D; i++) L += (double)cot[i] * out[i];
    return L;
}

static void test_moves_against_differences(void)
{
    float wt[D * D], x[T * D], cot[T * D], out[T * D], *pool = pool_new();
    fill_rand(wt, D * D, 0.5f);
    fill_rand(x, T * D, 1.0f);
    fill_rand(cot, T * D, 1.0f);
    nnt_tape *tp;
    nnt_error err = {0};
    CU_ASSERT_EQUAL_FATAL(nnt_tape_new(cpu, cctx, &tp, &err), NNT_OK);
    nnt_status st = run_moves(nnt_tape_ops(tp), nnt_tape_ctx(tp), tp, wt, pool, x, out, &err);
    if (st != NNT_OK) fprintf(stderr, "record: %s\n", err.msg);
    CU_ASSERT_EQUAL_FATAL(st, NNT_OK);
    nnt_tensor g;
    nnt_tape_seed seed = {.tag = 3, .cotangent = cot};
    nnt_tape_grad want = {.tag = 0, .grad = &g};
    CU_ASSERT_EQUAL_FATAL(nnt_tape_backward(tp, &seed, 1, &want, 1, &err), NNT_OK);
    const float *gp = g.data;
    double worst = 0.0, amax = 0.0;
    const float h = 1e-2f; /* the map is linear in x: differences are exact up to rounding */
    for (int i = 0; i < T * D; i++) {
        float xp[T * D], xm[T * D];
        memcpy(xp, x, sizeof x);
        memcpy(xm, x, sizeof x);
        xp[i] += h, xm[i] -= h;
        double fd = (moves_loss(wt, xp, cot) - moves_loss(wt, xm, cot)) / (2.0 * h);
        worst = fmax(worst, fabs(fd - gp[i]));
        amax = fmax(amax, fabs(gp[i]));
    }
    if (getenv("NNT_TAPE_VERBOSE") || worst > 1e-3 * amax)
        fprintf(stderr, "moves vs differences: worst %.3g, largest %.3g\n", worst, amax);
    CU_ASSERT(amax > 0.1);
    CU_ASSERT(worst <= 1e-3 * amax);
    nnt_tensor_free(&g);
    nnt_tape_free(tp);
    free(pool);
}

/* The family kit's MoE combine with the routing weights on the device: logits [T, E] (marked 0)
 * route to K experts each (softmax, renormalised, scaled); the choice is downloaded to group the
 * slots by expert; each expert's rows of x [T, D] (marked 1) go through its own matrix, are
 * scaled in place by their weights (scale_rows, reading w [T, K] flat by slot) and added into r
 * (scatter_add_rows, no scales); r is marked 3. The products' buffers are reused expert after
 * expert, and w's memory is overwritten afterwards, so the backward must read the kept copies. */
static nnt_status run_routed(const nnt_backend_ops *o, void *c, nnt_tape *tp, const float *we, float *pool,
                             const float *lg_in, const float *x_in, float *out_h, nnt_error *err)
{
    nnt_status st;
    nnt_tensor lg = mat(pool, T, E), x = mat(pool + 64, T, D), w = mat(pool + 144, T, K), r = mat(pool + 288, T, D);
    nnt_tensor idx = {.dtype = NNT_I32, .ndim = 2, .shape = {T, K}, .data = pool + 128};
    TRY(o->upload(c, lg.data, lg_in, sizeof(float) * T * E, err));
    TRY(o->upload(c, x.data, x_in, sizeof(float) * T * D, err));
    if (tp) TRY(nnt_tape_mark(tp, 0, &lg, err));
    if (tp) TRY(nnt_tape_mark(tp, 1, &x, err));
    nnt_route_params rp = {.struct_size = sizeof rp, .score_fn = NNT_SCORE_SOFTMAX, .top_k = K, .renormalize = 1,
                           .scaling_factor = 1.5f};
    TRY(o->route(c, &lg, NULL, &rp, &idx, &w, err));
    int32_t idx_h[T * K];
    TRY(o->download(c, idx_h, idx.data, sizeof idx_h, err));
    TRY(o->fill(c, &r, 0.0f, err));
    for (int e = 0; e < E; e++) {
        int32_t rows[T * K], slots[T * K];
        int n = 0;
        for (int i = 0; i < T * K; i++)
            if (idx_h[i] == e) rows[n] = i / K, slots[n] = i, n++;
        if (n == 0) continue;
        nnt_tensor xn = mat(pool + 352, n, D), yn = mat(pool + 416, n, D), m = mat((float *)we + e * D * D, D, D);
        TRY(o->gather_rows(c, &x, rows, n, &xn, err));
        TRY(o->linear(c, &xn, &m, &yn, err));
        TRY(o->scale_rows(c, &yn, &w, slots, n, &yn, err)); /* in place */
        TRY(o->scatter_add_rows(c, &yn, rows, NULL, n, &r, err));
    }
    TRY(o->fill(c, &w, 7.0f, err)); /* w's memory taken for something else */
    if (tp) TRY(nnt_tape_mark(tp, 3, &r, err));
    return o->download(c, out_h, r.data, sizeof(float) * T * D, err);
}

static double routed_loss(const float *we, const float *lg, const float *x, const float *cot)
{
    float out[T * D], *pool = pool_new();
    nnt_error err = {0};
    CU_ASSERT_EQUAL_FATAL(run_routed(cpu, cctx, NULL, we, pool, lg, x, out, &err), NNT_OK);
    free(pool);
    double L = 0.0;
    for (int i = 0; i < T * D; i++) L += (double)cot[i] * out[i];
    return L;
}

/* max |fd - g| over the entries of v (n of them, perturbed by h one at a time; which 0: the
 * logits, 1: x); *amax gets max |g|. */
static double routed_worst(const float *we, float *lg, float *x, const float *cot, int which, const float *g,
                           float h, double *amax)
{
    float *v = which ? x : lg;
    int n = which ? T * D : T * E;
    double worst = 0.0;
    *amax = 0.0;
    for (int i = 0; i < n; i++) {
        float keep = v[i];
        v[i] = keep + h;
        double lp = routed_loss(we, lg, x, cot);
        v[i] = keep - h;
        double lm = routed_loss(we, lg, x, cot);
        v[i] = keep;
        worst = fmax(worst, fabs((lp - lm) / (2.0 * h) - g[i]));
        *amax = fmax(*amax, fabs(g[i]));
    }
    return worst;
}

static void test_routed_against_differences(void)
{
    float we[E * D * D], lg[T * E], x[T * D], cot[T * D], out[T * D], *pool = pool_new();
    fill_rand(we, E * D * D, 0.5f);
    fill_rand(x, T * D, 1.0f);
    fill_rand(cot, T * D, 1.0f);
    for (int t = 0; t < T; t++) /* logits 0.5 apart per token, in a token's own order, plus small noise: */
        for (int e = 0; e < E; e++) /* no near-tie a difference step could flip */
            lg[t * E + e] = 0.5f * (float)((e + 3 * t) % E) + 0.05f * urand();
    nnt_tape *tp;
    nnt_error err = {0};
    CU_ASSERT_EQUAL_FATAL(nnt_tape_new(cpu, cctx, &tp, &err), NNT_OK);
    nnt_status st = run_routed(nnt_tape_ops(tp), nnt_tape_ctx(tp), tp, we, pool, lg, x, out, &err);
    if (st != NNT_OK) fprintf(stderr, "record: %s\n", err.msg);
    CU_ASSERT_EQUAL_FATAL(st, NNT_OK);
    nnt_tensor g_lg, g_x;
    nnt_tape_seed seed = {.tag = 3, .cotangent = cot};
    nnt_tape_grad want[2] = {{.tag = 0, .grad = &g_lg}, {.tag = 1, .grad = &g_x}};
    st = nnt_tape_backward(tp, &seed, 1, want, 2, &err);
    if (st != NNT_OK) fprintf(stderr, "backward: %s\n", err.msg);
    CU_ASSERT_EQUAL_FATAL(st, NNT_OK);
    double amax_lg, amax_x;
    double worst_lg = routed_worst(we, lg, x, cot, 0, g_lg.data, 2e-3f, &amax_lg);
    double worst_x = routed_worst(we, lg, x, cot, 1, g_x.data, 2e-3f, &amax_x);
    if (getenv("NNT_TAPE_VERBOSE") || worst_lg > 3e-3 * amax_lg || worst_x > 3e-3 * amax_x)
        fprintf(stderr, "routed vs differences: logits worst %.3g of %.3g, x worst %.3g of %.3g\n", worst_lg, amax_lg,
                worst_x, amax_x);
    CU_ASSERT(amax_lg > 0.05); /* the router's path carries a gradient */
    CU_ASSERT(worst_lg <= 3e-3 * amax_lg);
    CU_ASSERT(amax_x > 0.1);
    CU_ASSERT(worst_x <= 3e-3 * amax_x);
    nnt_tensor_free(&g_lg);
    nnt_tensor_free(&g_x);
    nnt_tape_free(tp);
    free(pool);
}

/* ---- hyper-connection streams (DeepSeek-V4's ops) ---- */

enum { HN = 3, HD = 8, HOUT = (2 + HN) * HN, HRATE = 2, HC = T / HRATE };

/* Weights of a two-sublayer streams chain: two hyper-connections, their sublayers (linears), a
 * compressor with overlap, the readout collapse. */
typedef struct hyper_w {
    float fn[2][HOUT * HN * HD], base[2][HOUT], scale[2][3], w[2][HD * HD], wkv[HD * HD], wg[HD * HD], ape[HRATE * HD];
    float fnh[HN * HN * HD], baseh[HN], scaleh[1];
} hyper_w;

/* Activations, each its own buffer, reused as a family reuses them: post, comb and coll of the
 * second hyper-connection overwrite the first's; the last mix writes over the streams x. */
typedef struct hyper_mem {
    float x[T * HN * HD], h[T * HN * HD], post[T * HN], comb[T * HN * HN], coll[T * HD], a[T * HD];
    float kv[T * HD], gate[T * HD], ent[HC * HD / 2], scores[T * HC], y[T * HD];
} hyper_mem;

static nnt_tensor vec(float *p, int64_t n)
{
    return (nnt_tensor){.dtype = NNT_F32, .ndim = 1, .shape = {n}, .data = p};
}

static nnt_tensor t3(float *p, int64_t a, int64_t b, int64_t c)
{
    return (nnt_tensor){.dtype = NNT_F32, .ndim = 3, .shape = {a, b, c}, .data = p};
}

/* y [T, HD] = hyper_head(streams after two mixed sublayers) from x [T, HN, HD], marked 0 (x), 3
 * (y) and 4 (the compressed entries); the indexer's scores are computed and left unread. */
static nnt_status run_hyper(const nnt_backend_ops *o, void *c, nnt_tape *tp, hyper_w *w, hyper_mem *m,
                            const float *x_in, float *y_h, float *ent_h, nnt_error *err)
{
    nnt_status st;
    nnt_tensor x = t3(m->x, T, HN, HD), h = t3(m->h, T, HN, HD), post = mat(m->post, T, HN), comb = t3(m->comb, T, HN, HN),
               coll = mat(m->coll, T, HD), a = mat(m->a, T, HD), y = mat(m->y, T, HD);
    TRY(o->upload(c, x.data, x_in, sizeof m->x, err));
    if (tp) TRY(nnt_tape_mark(tp, 0, &x, err));
    for (int L = 0; L < 2; L++) {
        nnt_tensor fn = mat(w->fn[L], HOUT, HN * HD), base = vec(w->base[L], HOUT), sc = vec(w->scale[L], 3);
        nnt_tensor wl = mat(w->w[L], HD, HD), *in = L ? &h : &x, *out = L ? &x : &h;
        TRY(o->hyper_connection(c, in, &fn, &base, &sc, 1e-6f, 1e-6f, 3, &post, &comb, &coll, err));
        TRY(o->linear(c, &coll, &wl, &a, err));
        if (L == 1) { /* a compressor over the collapsed stream, and the indexer's scores of its entries */
            nnt_tensor wkv = mat(w->wkv, HD, HD), wg = mat(w->wg, HD, HD), kv = mat(m->kv, T, HD), gate = mat(m->gate, T, HD);
            nnt_tensor ape = mat(w->ape, HRATE, HD), ent = t3(m->ent, 1, HC, HD / 2);
            TRY(o->linear(c, &coll, &wkv, &kv, err));
            TRY(o->linear(c, &coll, &wg, &gate, err));
            nnt_tensor kv3 = t3(m->kv, 1, T, HD), g3 = t3(m->gate, 1, T, HD);
            const int32_t first[1] = {0}, count[1] = {HC};
            TRY(o->compress(c, &kv3, &g3, &ape, HRATE, 1, first, count, &ent, err));
            if (tp) TRY(nnt_tape_mark(tp, 4, &ent, err));
            nnt_tensor q = {.dtype = NNT_F32, .ndim = 4, .shape = {1, T, 2, HD / 2}, .data = m->kv};
            nnt_tensor iw = t3(m->gate, 1, T, 2), scores = t3(m->scores, 1, T, HC);
            iw.data = m->post; /* any [1, T, 2] floats: the weights only choose */
            TRY(o->indexer_scores(c, &q, &ent, &iw, 0.5f, &scores, err));
            TRY(o->download(c, ent_h, ent.data, sizeof m->ent, err));
        }
        TRY(o->hyper_mix(c, in, &a, &post, &comb, out, err));
    }
    nnt_tensor fnh = mat(w->fnh, HN, HN * HD), baseh = vec(w->baseh, HN), sch = vec(w->scaleh, 1);
    TRY(o->hyper_head(c, &x, &fnh, &baseh, &sch, 1e-6f, 1e-6f, &y, err));
    if (tp) TRY(nnt_tape_mark(tp, 3, &y, err));
    return o->download(c, y_h, y.data, sizeof m->y, err);
}

static double hyper_loss(hyper_w *w, const float *x, const float *cy, const float *ce)
{
    float y[T * HD], ent[HC * HD / 2];
    hyper_mem *m = calloc(1, sizeof *m);
    nnt_error err = {0};
    CU_ASSERT_FATAL(m != NULL);
    CU_ASSERT_EQUAL_FATAL(run_hyper(cpu, cctx, NULL, w, m, x, y, ent, &err), NNT_OK);
    free(m);
    double L = 0.0;
    for (int i = 0; i < T * HD; i++) L += (double)cy[i] * y[i];
    for (int i = 0; i < HC * HD / 2; i++) L += (double)ce[i] * ent[i];
    return L;
}

static void test_hyper_against_differences(void)
{
    hyper_w *w = malloc(sizeof *w);
    hyper_mem *m = calloc(1, sizeof *m);
    CU_ASSERT_FATAL(w && m);
    fill_rand(&w->fn[0][0], (int)(sizeof w->fn / sizeof(float)), 0.4f);
    fill_rand(&w->base[0][0], (int)(sizeof w->base / sizeof(float)), 0.5f);
    for (int L = 0; L < 2; L++) w->scale[L][0] = 0.8f, w->scale[L][1] = 1.2f, w->scale[L][2] = 1.5f;
    fill_rand(&w->w[0][0], (int)(sizeof w->w / sizeof(float)), 0.5f);
    fill_rand(w->wkv, HD * HD, 0.5f);
    fill_rand(w->wg, HD * HD, 0.8f);
    fill_rand(w->ape, HRATE * HD, 0.5f);
    fill_rand(w->fnh, HN * HN * HD, 0.4f);
    fill_rand(w->baseh, HN, 0.5f);
    w->scaleh[0] = 0.9f;
    float x[T * HN * HD], cy[T * HD], ce[HC * HD / 2], y[T * HD], ent[HC * HD / 2];
    fill_rand(x, T * HN * HD, 1.0f);
    fill_rand(cy, T * HD, 1.0f);
    fill_rand(ce, HC * HD / 2, 1.0f);
    nnt_tape *tp;
    nnt_error err = {0};
    CU_ASSERT_EQUAL_FATAL(nnt_tape_new(cpu, cctx, &tp, &err), NNT_OK);
    nnt_status st = run_hyper(nnt_tape_ops(tp), nnt_tape_ctx(tp), tp, w, m, x, y, ent, &err);
    if (st != NNT_OK) fprintf(stderr, "record: %s\n", err.msg);
    CU_ASSERT_EQUAL_FATAL(st, NNT_OK);
    nnt_tensor g;
    nnt_tape_seed seeds[2] = {{.tag = 3, .cotangent = cy}, {.tag = 4, .cotangent = ce}};
    nnt_tape_grad want = {.tag = 0, .grad = &g};
    st = nnt_tape_backward(tp, seeds, 2, &want, 1, &err);
    if (st != NNT_OK) fprintf(stderr, "backward: %s\n", err.msg);
    CU_ASSERT_EQUAL_FATAL(st, NNT_OK);
    CU_ASSERT_EQUAL(g.ndim, 3);
    const float *gp = g.data;
    double worst = 0.0, amax = 0.0;
    for (int i = 0; i < T * HN * HD; i++) amax = fmax(amax, fabs(gp[i]));
    const float hstep = 2e-3f;
    for (int i = 0; i < T * HN * HD; i++) {
        float xp[T * HN * HD], xm[T * HN * HD];
        memcpy(xp, x, sizeof x);
        memcpy(xm, x, sizeof x);
        xp[i] += hstep, xm[i] -= hstep;
        double fd = (hyper_loss(w, xp, cy, ce) - hyper_loss(w, xm, cy, ce)) / (2.0 * hstep);
        worst = fmax(worst, fabs(fd - gp[i]));
    }
    if (getenv("NNT_TAPE_VERBOSE") || worst > 3e-3 * amax)
        fprintf(stderr, "hyper streams vs differences: worst %.3g, largest %.3g\n", worst, amax);
    CU_ASSERT(amax > 0.1);
    CU_ASSERT(worst <= 3e-3 * amax);
    /* a backend without one of the new backward entries is refused by name */
    nnt_backend_ops lacking = *cpu;
    lacking.compress_backward = NULL;
    nnt_tape *t2;
    CU_ASSERT_EQUAL_FATAL(nnt_tape_new(&lacking, cctx, &t2, &err), NNT_OK);
    CU_ASSERT_EQUAL(run_hyper(nnt_tape_ops(t2), nnt_tape_ctx(t2), t2, w, m, x, y, ent, &err), NNT_ERR_UNSUPPORTED);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "compress_backward"));
    nnt_tape_free(t2);
    nnt_tensor_free(&g);
    nnt_tape_free(tp);
    free(w);
    free(m);
}

/* A tape that does not record passes calls through and keeps nothing; recording again starts a
 * new record. */
static void test_pass_through(void)
{
    nnt_tape *tp;
    nnt_error err = {0};
    float wv[12], xv[4] = {1, 2, 3, 4}, y1[3], y2[3];
    fill_rand(wv, 12, 1.0f);
    nnt_tensor w = mat(wv, 3, 4), x = mat(xv, 1, 4), a = mat(y1, 1, 3), b = mat(y2, 1, 3);
    CU_ASSERT_EQUAL_FATAL(nnt_tape_new(cpu, cctx, &tp, &err), NNT_OK);
    nnt_tape_record(tp, 0);
    const nnt_backend_ops *o = nnt_tape_ops(tp);
    CU_ASSERT_EQUAL(o->linear(nnt_tape_ctx(tp), &x, &w, &a, &err), NNT_OK);
    CU_ASSERT_EQUAL(o->sigmoid(nnt_tape_ctx(tp), &a, &a, &err), NNT_OK); /* not refused when not recording */
    CU_ASSERT_EQUAL(cpu->linear(cctx, &x, &w, &b, &err), NNT_OK);
    CU_ASSERT_EQUAL(cpu->sigmoid(cctx, &b, &b, &err), NNT_OK);
    CU_ASSERT_EQUAL(memcmp(y1, y2, sizeof y1), 0);
    CU_ASSERT_EQUAL(tp->n, 0);
    CU_ASSERT_EQUAL(nnt_tape_kept_bytes(tp), 0);
    nnt_tape_record(tp, 1);
    CU_ASSERT_EQUAL(o->rms_norm(nnt_tape_ctx(tp), &x, NULL, 1e-6f, &x, &err), NNT_OK);
    CU_ASSERT_EQUAL(tp->n, 1);
    CU_ASSERT_EQUAL(nnt_tape_kept_bytes(tp), sizeof xv);
    nnt_tape_record(tp, 1); /* a new record */
    CU_ASSERT_EQUAL(tp->n, 0);
    nnt_tape_free(tp);
}

static void test_refusals(void)
{
    nnt_tape *tp;
    nnt_error err = {0};
    float buf[8] = {0};
    nnt_tensor t = mat(buf, 2, 4);
    nnt_backend_ops lacking = *cpu; /* the recurrent mixers without their backward entries */
    lacking.sigmoid_backward = NULL;
    lacking.delta_rule_backward = NULL;
    CU_ASSERT_EQUAL_FATAL(nnt_tape_new(&lacking, cctx, &tp, &err), NNT_OK);
    const nnt_backend_ops *o = nnt_tape_ops(tp);
    CU_ASSERT_EQUAL(o->sigmoid(nnt_tape_ctx(tp), &t, &t, &err), NNT_ERR_UNSUPPORTED);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "sigmoid_backward"));
    CU_ASSERT_EQUAL(o->delta_rule(nnt_tape_ctx(tp), &t, &t, &t, &t, &t, NULL, NULL, 1, 1.0f, &t, NULL, NULL, &err),
                    NNT_ERR_UNSUPPORTED);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "delta_rule_backward"));
    CU_ASSERT_EQUAL(tp->n, 0);
    nnt_tape_free(tp);

    lacking = *cpu; /* a backend with no backward for linear */
    lacking.linear_backward = NULL;
    CU_ASSERT_EQUAL_FATAL(nnt_tape_new(&lacking, cctx, &tp, &err), NNT_OK);
    nnt_tensor w = mat(buf, 4, 4), y = mat(buf + 4, 1, 4), x = mat(buf, 1, 4);
    CU_ASSERT_EQUAL(nnt_tape_ops(tp)->linear(nnt_tape_ctx(tp), &x, &w, &y, &err), NNT_ERR_UNSUPPORTED);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "linear_backward"));
    nnt_tape_grad g = {.tag = 9, .grad = &t};
    CU_ASSERT_EQUAL(nnt_tape_backward(tp, NULL, 0, &g, 1, &err), NNT_ERR_INVALID_ARGUMENT);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "mark 9"));
    nnt_tape_free(tp);

    lacking = *cpu; /* scale_rows without its backward */
    lacking.scale_rows_backward = NULL;
    CU_ASSERT_EQUAL_FATAL(nnt_tape_new(&lacking, cctx, &tp, &err), NNT_OK);
    const int32_t at[2] = {0, 3};
    nnt_tensor rows = mat(buf, 2, 4);
    CU_ASSERT_EQUAL(nnt_tape_ops(tp)->scale_rows(nnt_tape_ctx(tp), &rows, &t, at, 2, &rows, &err), NNT_ERR_UNSUPPORTED);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "scale_rows_backward"));
    nnt_tape_free(tp);
}

int register_tests(void)
{
    CU_pSuite s = CU_add_suite("tape", setup, teardown);
    if (!s) return -1;
    if (!CU_add_test(s, "a decoder block's input gradient equals central differences", test_block_against_differences) ||
        !CU_add_test(s, "row and column moves' input gradient equals central differences",
                     test_moves_against_differences) ||
        !CU_add_test(s, "a routed combine scaled by device routing weights: logits' and input's gradients equal "
                        "central differences",
                     test_routed_against_differences) ||
        !CU_add_test(s, "hyper-connection streams with a compressor: the input gradient equals central differences",
                     test_hyper_against_differences) ||
        !CU_add_test(s, "a seed reads back at its mark; gradients are linear in the seeds", test_seed_and_linearity) ||
        !CU_add_test(s, "a tape not recording passes calls through and keeps nothing", test_pass_through) ||
        !CU_add_test(s, "missing backward entries are refused by name", test_refusals))
        return -1;
    return 0;
}
