/* test_kernels.c - the cpu backend's recurrent kernels against naive loops written here from
 * their formulas: the gated delta rule with key_dim != value_dim (so a transposed state cannot
 * pass) at sequence lengths 1, 2, 63, 64, 65 and 130, with and without an initial state and with
 * padding tokens; the causal convolution with a carried state; Kimi's forget gate; the matrix
 * product on half-precision weights; attention with one key/value head shared by many query
 * heads (few and many queries); rows scaled by entries of a weight tensor (scale_rows), by hand,
 * in place, rounded to bfloat16, and composed with the scatters as the MoE combine uses it; the
 * scatters on a destination wide enough for the threads to split, against the serial loop. */
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

static unsigned rng = 12345u;
static float urand(void) /* uniform in [-1, 1) */
{
    rng = rng * 1664525u + 1013904223u;
    return (float)((rng >> 8) & 0xffffff) / 8388608.0f - 1.0f;
}

static nnt_tensor make(int ndim, int64_t a, int64_t b, int64_t c, int64_t d, int64_t e)
{
    int64_t shape[5] = {a, b, c, d, e};
    nnt_tensor t;
    CU_ASSERT_FATAL(nnt_tensor_alloc(&t, NNT_F32, ndim, shape) == NNT_OK);
    return t;
}

/* The recurrence, straight from the formula, in double precision. */
static void naive_delta(int64_t B, int64_t T, int64_t H, int64_t K, int64_t V, const float *q, const float *k,
                        const float *v, const float *g, const float *beta, const uint8_t *valid, const float *s0,
                        float scale, double *o, double *S_all, double *S_last)
{
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < H; h++) {
            double S[16][16] = {{0}};
            if (s0)
                for (int64_t i = 0; i < K; i++)
                    for (int64_t j = 0; j < V; j++) S[i][j] = s0[((b * H + h) * K + i) * V + j];
            for (int64_t t = 0; t < T; t++) {
                int64_t base = (b * T + t) * H + h;
                if (!valid || valid[b * T + t]) {
                    double qn[16], kn[16], nq = 0, nk = 0;
                    for (int64_t i = 0; i < K; i++) {
                        nq += (double)q[base * K + i] * q[base * K + i];
                        nk += (double)k[base * K + i] * k[base * K + i];
                    }
                    for (int64_t i = 0; i < K; i++) {
                        qn[i] = q[base * K + i] / sqrt(nq + 1e-6) * scale;
                        kn[i] = k[base * K + i] / sqrt(nk + 1e-6);
                    }
                    for (int64_t i = 0; i < K; i++)
                        for (int64_t j = 0; j < V; j++) S[i][j] *= exp(g[base * K + i]);
                    for (int64_t j = 0; j < V; j++) {
                        double u = 0;
                        for (int64_t i = 0; i < K; i++) u += S[i][j] * kn[i];
                        double delta = beta[base] * (v[base * V + j] - u);
                        for (int64_t i = 0; i < K; i++) S[i][j] += kn[i] * delta;
                    }
                    for (int64_t j = 0; j < V; j++) {
                        double acc = 0;
                        for (int64_t i = 0; i < K; i++) acc += S[i][j] * qn[i];
                        o[base * V + j] = acc;
                    }
                } else {
                    for (int64_t j = 0; j < V; j++) o[base * V + j] = 0;
                }
                for (int64_t i = 0; i < K; i++)
                    for (int64_t j = 0; j < V; j++) S_all[(base * K + i) * V + j] = S[i][j];
            }
            for (int64_t i = 0; i < K; i++)
                for (int64_t j = 0; j < V; j++) S_last[((b * H + h) * K + i) * V + j] = S[i][j];
        }
}

static double max_diff(const float *a, const double *b, int64_t n)
{
    double w = 0;
    for (int64_t i = 0; i < n; i++) w = fmax(w, fabs(a[i] - b[i]));
    return w;
}

static void run_delta(int64_t T, int with_state, int with_pads)
{
    const int64_t B = 2, H = 2, K = 8, V = 5;
    nnt_tensor q = make(4, B, T, H, K, 0), k = make(4, B, T, H, K, 0), v = make(4, B, T, H, V, 0);
    nnt_tensor g = make(4, B, T, H, K, 0), beta = make(3, B, T, H, 0, 0), o = make(4, B, T, H, V, 0);
    nnt_tensor s0 = make(4, B, H, K, V, 0), s1 = make(4, B, H, K, V, 0), all = make(5, B, T, H, K, V);
    float *qd = q.data, *kd = k.data, *vd = v.data, *gd = g.data, *bd = beta.data, *sd = s0.data;
    for (int64_t i = 0; i < B * T * H * K; i++) {
        qd[i] = urand();
        kd[i] = urand();
        gd[i] = -0.3f * (urand() + 1.0f); /* log decays in (-0.6, 0] */
    }
    for (int64_t i = 0; i < B * T * H * V; i++) vd[i] = urand();
    for (int64_t i = 0; i < B * T * H; i++) bd[i] = 0.5f * (urand() + 1.0f);
    for (int64_t i = 0; i < B * H * K * V; i++) sd[i] = urand();
    uint8_t *valid = malloc((size_t)(B * T));
    for (int64_t i = 0; i < B * T; i++) valid[i] = !(with_pads && i >= T && i < T + T / 3); /* row 1 left-padded */
    float scale = 1.0f / sqrtf((float)K);
    nnt_error err = {0};
    CU_ASSERT_EQUAL_FATAL(ops->delta_rule(bctx, &q, &k, &v, &g, &beta, with_pads ? valid : NULL, with_state ? &s0 : NULL, 1,
                                          scale, &o, &s1, &all, &err), NNT_OK);
    double *wo = malloc(sizeof(double) * (size_t)(B * T * H * V)), *wall = malloc(sizeof(double) * (size_t)(B * T * H * K * V));
    double *wlast = malloc(sizeof(double) * (size_t)(B * H * K * V));
    naive_delta(B, T, H, K, V, qd, kd, vd, gd, bd, with_pads ? valid : NULL, with_state ? sd : NULL, scale, wo, wall, wlast);
    double eo = max_diff(o.data, wo, B * T * H * V), es = max_diff(s1.data, wlast, B * H * K * V);
    double ea = max_diff(all.data, wall, B * T * H * K * V);
    if (eo > 1e-4 || es > 1e-4 || ea > 1e-4)
        fprintf(stderr, "\n  T=%lld state=%d pads=%d: output %.3g, final state %.3g, states %.3g\n", (long long)T, with_state,
                with_pads, eo, es, ea);
    CU_ASSERT(eo < 1e-4 && es < 1e-4 && ea < 1e-4);
    /* the last token's state is the final state */
    CU_ASSERT(memcmp((float *)all.data + ((0 * T + T - 1) * H) * K * V, s1.data, sizeof(float) * (size_t)(H * K * V)) == 0);
    free(valid);
    free(wo);
    free(wall);
    free(wlast);
    nnt_tensor *ts[] = {&q, &k, &v, &g, &beta, &o, &s0, &s1, &all};
    for (size_t i = 0; i < sizeof ts / sizeof *ts; i++) nnt_tensor_free(ts[i]);
}

static void test_delta_rule_lengths(void)
{
    const int64_t lengths[] = {1, 2, 63, 64, 65, 130};
    for (size_t i = 0; i < sizeof lengths / sizeof *lengths; i++) {
        run_delta(lengths[i], 0, 0);
        run_delta(lengths[i], 1, 0);
    }
}

static void test_delta_rule_padding(void)
{
    run_delta(24, 0, 1);
    run_delta(65, 1, 1);
}

/* A convolution over a whole sequence equals the same convolution run in two pieces with the
 * state carried between them, and both equal the formula. */
static void test_conv_carry(void)
{
    const int64_t B = 2, T = 11, C = 3, W = 4, T1 = 5;
    nnt_tensor x = make(3, B, T, C, 0, 0), w = make(2, C, W, 0, 0, 0), y = make(3, B, T, C, 0, 0);
    for (int64_t i = 0; i < B * T * C; i++) ((float *)x.data)[i] = urand();
    for (int64_t i = 0; i < C * W; i++) ((float *)w.data)[i] = urand();
    nnt_error err = {0};
    CU_ASSERT_EQUAL_FATAL(ops->conv1d_causal(bctx, &x, &w, NULL, 1, &y, NULL, &err), NNT_OK);
    double worst = 0;
    for (int64_t b = 0; b < B; b++)
        for (int64_t t = 0; t < T; t++)
            for (int64_t c = 0; c < C; c++) {
                double acc = 0;
                for (int64_t j = 0; j < W; j++) {
                    int64_t s = t - (W - 1) + j;
                    if (s >= 0) acc += ((float *)w.data)[c * W + j] * ((float *)x.data)[(b * T + s) * C + c];
                }
                acc = acc / (1 + exp(-acc));
                worst = fmax(worst, fabs(acc - ((float *)y.data)[(b * T + t) * C + c]));
            }
    CU_ASSERT(worst < 1e-6);
    /* split: [0, T1) then [T1, T) with the state in between */
    nnt_tensor x1 = make(3, B, T1, C, 0, 0), x2 = make(3, B, T - T1, C, 0, 0), y1 = make(3, B, T1, C, 0, 0),
               y2 = make(3, B, T - T1, C, 0, 0), st = make(3, B, W - 1, C, 0, 0);
    for (int64_t b = 0; b < B; b++) {
        memcpy((float *)x1.data + b * T1 * C, (float *)x.data + b * T * C, sizeof(float) * (size_t)(T1 * C));
        memcpy((float *)x2.data + b * (T - T1) * C, (float *)x.data + (b * T + T1) * C, sizeof(float) * (size_t)((T - T1) * C));
    }
    CU_ASSERT_EQUAL_FATAL(ops->conv1d_causal(bctx, &x1, &w, NULL, 1, &y1, &st, &err), NNT_OK);
    CU_ASSERT_EQUAL_FATAL(ops->conv1d_causal(bctx, &x2, &w, &st, 1, &y2, NULL, &err), NNT_OK);
    worst = 0;
    for (int64_t b = 0; b < B; b++)
        for (int64_t t = 0; t < T; t++)
            for (int64_t c = 0; c < C; c++) {
                float whole = ((float *)y.data)[(b * T + t) * C + c];
                float part = t < T1 ? ((float *)y1.data)[(b * T1 + t) * C + c] : ((float *)y2.data)[(b * (T - T1) + t - T1) * C + c];
                worst = fmax(worst, fabs(whole - part));
            }
    CU_ASSERT(worst == 0.0);
    nnt_tensor *ts[] = {&x, &w, &y, &x1, &x2, &y1, &y2, &st};
    for (size_t i = 0; i < sizeof ts / sizeof *ts; i++) nnt_tensor_free(ts[i]);
}

/* g = -exp(A_log) * softplus(a + dt_bias): at a + dt_bias = 0, -exp(A_log) ln 2; above 20, the
 * linear branch. */
static void test_kda_gate(void)
{
    nnt_tensor a = make(2, 1, 4, 0, 0, 0), dt = make(1, 4, 0, 0, 0, 0), alog = make(1, 2, 0, 0, 0, 0), g = make(2, 1, 4, 0, 0, 0);
    float av[4] = {0.0f, 1.0f, 25.0f, -3.0f}, dv[4] = {0.0f, -1.0f, 0.0f, 1.0f}, lv[2] = {0.0f, logf(3.0f)};
    memcpy(a.data, av, sizeof av);
    memcpy(dt.data, dv, sizeof dv);
    memcpy(alog.data, lv, sizeof lv);
    nnt_error err = {0};
    CU_ASSERT_EQUAL_FATAL(ops->kda_gate(bctx, &a, &dt, &alog, &g, &err), NNT_OK);
    const float *gd = g.data;
    CU_ASSERT_DOUBLE_EQUAL(gd[0], -log(2.0), 1e-6);        /* head 0: exp(0) = 1 */
    CU_ASSERT_DOUBLE_EQUAL(gd[1], -log(2.0), 1e-6);        /* 1 + (-1) = 0 */
    CU_ASSERT_DOUBLE_EQUAL(gd[2], -3.0 * 25.0, 1e-4);      /* head 1: exp(log 3) = 3, linear branch */
    CU_ASSERT_DOUBLE_EQUAL(gd[3], -3.0 * log1p(exp(-2.0)), 1e-6);
    nnt_tensor *ts[] = {&a, &dt, &alog, &g};
    for (size_t i = 0; i < sizeof ts / sizeof *ts; i++) nnt_tensor_free(ts[i]);
}

/* blas_split = yes with gemm = openblas (the backend splitting OpenBLAS's products itself, as it
 * does when the process loaded OpenBLAS's pthreads build): linear_backward on an F32 weight (one
 * sgemm) and on a BF16
 * weight (panels) against a double-precision dx += dy . w, by rows of dx (M >= K) and by columns
 * (M < K); the products are large enough to be split. A bad value of either option is refused. */
static void test_blas_split(void)
{
    char path[512];
    /* gemm = openblas as well (a second line under the same section): with oneDNN built in the
     * backward's products would not reach OpenBLAS at all */
    CU_ASSERT_PTR_NOT_NULL_FATAL(t_ini_with("kernels_blas_split.ini", "backend.cpu", "blas_split",
                                            "yes\ngemm = openblas", path, sizeof path));
    nnt_runtime *rt2 = NULL;
    CU_ASSERT_EQUAL_FATAL(nnt_runtime_open(path, &rt2), NNT_OK);
    nnt_plugin *p = t_cpu_backend(rt2);
    CU_ASSERT_PTR_NOT_NULL_FATAL(p);
    const nnt_backend_ops *o = p->backend->ops;
    static const int64_t SHAPES[2][3] = {{200, 64, 48}, {24, 64, 256}}; /* M, N, K */
    for (int sh = 0; sh < 2; sh++)
        for (int bf = 0; bf < 2; bf++) {
            int64_t M = SHAPES[sh][0], N = SHAPES[sh][1], K = SHAPES[sh][2];
            nnt_tensor dy = make(2, M, N, 0, 0, 0), dx = make(2, M, K, 0, 0, 0), w;
            int64_t ws[2] = {N, K};
            CU_ASSERT_FATAL(nnt_tensor_alloc(&w, bf ? NNT_BF16 : NNT_F32, 2, ws) == NNT_OK);
            for (int64_t i = 0; i < M * N; i++) ((float *)dy.data)[i] = urand();
            for (int64_t i = 0; i < M * K; i++) ((float *)dx.data)[i] = urand();
            for (int64_t i = 0; i < N * K; i++) {
                if (bf) ((uint16_t *)w.data)[i] = nnt_f32_to_bf16(urand());
                else ((float *)w.data)[i] = urand();
            }
            double *want = malloc((size_t)(M * K) * sizeof *want);
            const float *g = dy.data, *d0 = dx.data;
            for (int64_t m = 0; m < M; m++)
                for (int64_t k = 0; k < K; k++) {
                    double acc = d0[m * K + k];
                    for (int64_t n = 0; n < N; n++) acc += (double)g[m * N + n] * nnt_tensor_get_f64(&w, n * K + k);
                    want[m * K + k] = acc;
                }
            nnt_error err = {0};
            CU_ASSERT_EQUAL(o->linear_backward(p->be_ctx, &dy, &w, &dx, &err), NNT_OK);
            double worst = 0, scale = 0;
            for (int64_t i = 0; i < M * K; i++) {
                worst = fmax(worst, fabs(((float *)dx.data)[i] - want[i]));
                scale = fmax(scale, fabs(want[i]));
            }
            if (worst > 1e-5 * scale) fprintf(stderr, "\n  split %lldx%lldx%lld bf16 %d: worst %.3g of %.3g\n",
                                              (long long)M, (long long)N, (long long)K, bf, worst, scale);
            CU_ASSERT(scale > 1.0 && worst <= 1e-5 * scale);
            free(want);
            nnt_tensor_free(&dy), nnt_tensor_free(&w), nnt_tensor_free(&dx);
        }
    nnt_runtime_close(rt2);
    CU_ASSERT_PTR_NOT_NULL_FATAL(t_ini_with("kernels_blas_bad.ini", "backend.cpu", "blas_split", "maybe", path,
                                            sizeof path));
    CU_ASSERT_NOT_EQUAL(nnt_runtime_open(path, &rt2), NNT_OK);
    CU_ASSERT_PTR_NOT_NULL(strstr(nnt_last_error(rt2), "blas_split = 'maybe'"));
    nnt_runtime_close(rt2);
    CU_ASSERT_PTR_NOT_NULL_FATAL(t_ini_with("kernels_gemm_bad.ini", "backend.cpu", "gemm", "mkl", path, sizeof path));
    CU_ASSERT_NOT_EQUAL(nnt_runtime_open(path, &rt2), NNT_OK);
    CU_ASSERT_PTR_NOT_NULL(strstr(nnt_last_error(rt2), "gemm = 'mkl': expected auto or openblas"));
    nnt_runtime_close(rt2);
}

/* y = x . w^T with F32, BF16 and F16 weights, against a double-precision product of the same
 * (rounded) weights: the few-row kernel (M <= 8) and sgemm / the panel path, K not a multiple of
 * 16. */
static void test_linear_half(void)
{
    const int64_t Ms[] = {1, 3, 8, 9, 40}, K = 83, N = 37;
    const nnt_dtype dts[] = {NNT_BF16, NNT_F16, NNT_F32};
    for (int di = 0; di < 3; di++)
        for (size_t mi = 0; mi < sizeof Ms / sizeof *Ms; mi++) {
            int64_t M = Ms[mi], ws[2] = {N, K};
            nnt_tensor x = make(2, M, K, 0, 0, 0), y = make(2, M, N, 0, 0, 0), w;
            CU_ASSERT_FATAL(nnt_tensor_alloc(&w, dts[di], 2, ws) == NNT_OK);
            for (int64_t i = 0; i < M * K; i++) ((float *)x.data)[i] = urand();
            for (int64_t i = 0; i < N * K; i++) {
                if (dts[di] == NNT_F32)
                    ((float *)w.data)[i] = urand();
                else
                    ((uint16_t *)w.data)[i] = dts[di] == NNT_BF16 ? nnt_f32_to_bf16(urand()) : nnt_f32_to_f16(urand());
            }
            nnt_error err = {0};
            CU_ASSERT_FATAL(ops->linear(bctx, &x, &w, &y, &err) == NNT_OK);
            double worst = 0;
            for (int64_t m = 0; m < M; m++)
                for (int64_t n = 0; n < N; n++) {
                    double ref = 0;
                    for (int64_t k = 0; k < K; k++) ref += (double)((float *)x.data)[m * K + k] * nnt_tensor_get_f64(&w, n * K + k);
                    worst = fmax(worst, fabs(ref - ((float *)y.data)[m * N + n]));
                }
            if (worst > 1e-4) fprintf(stderr, "\n  linear %s M=%lld: off by %.3g\n", nnt_dtype_name(dts[di]), (long long)M, worst);
            CU_ASSERT(worst <= 1e-4);
            nnt_tensor_free(&x);
            nnt_tensor_free(&y);
            nnt_tensor_free(&w);
        }
}

/* Bfloat16 products round x to bfloat16 before the product on every path: few rows (the
 * kernels), many rows on oneDNN (x packed to bfloat16) and on OpenBLAS (gemm = openblas, x
 * rounded into the scratch). By hand: x = 1 + 3 * 2^-9 rounds to 1 + 2^-7 (bfloat16 steps of
 * 2^-7 above 1); against a BF16 weight of ones over K = 100 columns the rounded sum is
 * 100.78125, which rounds to 101 (steps of 0.5 there), where the unrounded 100.5859375 would
 * give 100.5. */
static void test_linear_bf16_rounds_x(void)
{
    const int64_t K = 100, N = 24, Ms[] = {3, 40, 300};
    char path[512];
    CU_ASSERT_PTR_NOT_NULL_FATAL(t_ini_with("kernels_gemm_openblas.ini", "backend.cpu", "gemm", "openblas", path,
                                            sizeof path));
    nnt_runtime *rt2 = NULL;
    CU_ASSERT_EQUAL_FATAL(nnt_runtime_open(path, &rt2), NNT_OK);
    nnt_plugin *p2 = t_cpu_backend(rt2);
    CU_ASSERT_PTR_NOT_NULL_FATAL(p2);
    const nnt_backend_ops *backends[2] = {ops, p2->backend->ops};
    void *ctxs[2] = {bctx, p2->be_ctx};
    int64_t ws[2] = {N, K};
    nnt_tensor w;
    CU_ASSERT_FATAL(nnt_tensor_alloc(&w, NNT_BF16, 2, ws) == NNT_OK);
    for (int64_t i = 0; i < N * K; i++) ((uint16_t *)w.data)[i] = nnt_f32_to_bf16(1.0f);
    for (int b = 0; b < 2; b++)
        for (size_t mi = 0; mi < sizeof Ms / sizeof *Ms; mi++) {
            int64_t M = Ms[mi];
            nnt_tensor x = make(2, M, K, 0, 0, 0), y = make(2, M, N, 0, 0, 0);
            for (int64_t i = 0; i < M * K; i++) ((float *)x.data)[i] = 1.0f + 3.0f / 512.0f;
            y.flags = NNT_TENSOR_BF16_VALUES;
            nnt_error err = {0};
            CU_ASSERT_FATAL(backends[b]->linear(ctxs[b], &x, &w, &y, &err) == NNT_OK);
            int64_t off = 0;
            for (int64_t i = 0; i < M * N; i++) off += ((float *)y.data)[i] != 101.0f;
            if (off) fprintf(stderr, "\n  %s, M = %lld: %lld of %lld not 101 (y[0] = %g)\n", b ? "openblas" : "default",
                             (long long)M, (long long)off, (long long)(M * N), ((float *)y.data)[0]);
            CU_ASSERT_EQUAL(off, 0);
            CU_ASSERT_EQUAL(((float *)x.data)[0], 1.0f + 3.0f / 512.0f); /* the input is not overwritten */
            nnt_tensor_free(&x);
            nnt_tensor_free(&y);
        }
    nnt_tensor_free(&w);
    nnt_runtime_close(rt2);
}

/* Attention with one key/value head shared by many query heads (DeepSeek-V4's layout) at few
 * queries (decoding: one sgemm per key/value head) and more (prefill: blocks of rows), one and
 * two rows: scores under a causal mask and the probability-weighted values, against loops in
 * double precision. */
static void test_attention_shared_head(void)
{
    const int64_t Ts[] = {1, 3, 9}, Bs[] = {1, 2}, Hq = 16, D = 24, P = 5;
    for (size_t ti = 0; ti < sizeof Ts / sizeof *Ts; ti++)
        for (size_t bi = 0; bi < sizeof Bs / sizeof *Bs; bi++) {
            int64_t T = Ts[ti], B = Bs[bi], S = P + T;
            nnt_tensor q = make(4, B, Hq, T, D, 0), k = make(4, B, 1, S, D, 0), s = make(4, B, Hq, T, S, 0);
            nnt_tensor p = make(4, B, Hq, T, S, 0), o = make(4, B, T, Hq, D, 0);
            float *qd = q.data, *kd = k.data, *sd = s.data, *pd = p.data, *od = o.data;
            for (int64_t i = 0; i < B * Hq * T * D; i++) qd[i] = urand();
            for (int64_t i = 0; i < B * S * D; i++) kd[i] = urand();
            for (int64_t i = 0; i < B * Hq * T * S; i++) pd[i] = 0.5f * (urand() + 1.0f);
            int32_t *qpos = malloc((size_t)(B * T) * sizeof *qpos), *kpos = malloc((size_t)(B * S) * sizeof *kpos);
            CU_ASSERT_FATAL(qpos && kpos);
            for (int64_t b = 0; b < B; b++) {
                for (int64_t t = 0; t < T; t++) qpos[b * T + t] = (int32_t)(P + t);
                for (int64_t j = 0; j < S; j++) kpos[b * S + j] = (int32_t)j;
            }
            nnt_attn_mask mask = {.struct_size = sizeof(nnt_attn_mask), .q_pos = qpos, .k_pos = kpos, .causal = 1};
            nnt_error err = {0};
            float scale = 0.3f;
            CU_ASSERT_FATAL(ops->attn_scores(bctx, &q, &k, scale, &mask, &s, &err) == NNT_OK);
            CU_ASSERT_FATAL(ops->attn_mix(bctx, &p, &k, &o, &err) == NNT_OK);
            double worst_s = 0, worst_o = 0;
            int masked_ok = 1;
            for (int64_t b = 0; b < B; b++)
                for (int64_t h = 0; h < Hq; h++)
                    for (int64_t t = 0; t < T; t++) {
                        for (int64_t j = 0; j < S; j++) {
                            float got = sd[((b * Hq + h) * T + t) * S + j];
                            if (j > P + t) {
                                masked_ok &= got == -INFINITY;
                                continue;
                            }
                            double ref = 0;
                            for (int64_t d = 0; d < D; d++)
                                ref += (double)qd[((b * Hq + h) * T + t) * D + d] * kd[(b * S + j) * D + d];
                            worst_s = fmax(worst_s, fabs(ref * scale - got));
                        }
                        for (int64_t d = 0; d < D; d++) {
                            double ref = 0;
                            for (int64_t j = 0; j < S; j++)
                                ref += (double)pd[((b * Hq + h) * T + t) * S + j] * kd[(b * S + j) * D + d];
                            worst_o = fmax(worst_o, fabs(ref - od[((b * T + t) * Hq + h) * D + d]));
                        }
                    }
            if (worst_s > 1e-4 || worst_o > 1e-4 || !masked_ok)
                fprintf(stderr, "\n  attention B=%lld T=%lld: scores off by %.3g, outputs by %.3g, mask %s\n", (long long)B,
                        (long long)T, worst_s, worst_o, masked_ok ? "kept" : "broken");
            CU_ASSERT(worst_s <= 1e-4 && worst_o <= 1e-4 && masked_ok);
            free(qpos);
            free(kpos);
            nnt_tensor_free(&q);
            nnt_tensor_free(&k);
            nnt_tensor_free(&s);
            nnt_tensor_free(&p);
            nnt_tensor_free(&o);
        }
}

/* scale_rows: y[i] = x[i] w[idx[i]] on a case worked by hand (exact in float32), then in place;
 * a flagged y rounds the product once to bfloat16; out-of-range indices and unlike shapes are
 * refused. */
static void test_scale_rows(void)
{
    nnt_tensor x = make(2, 3, 2, 0, 0, 0), y = make(2, 3, 2, 0, 0, 0), w = make(2, 2, 2, 0, 0, 0);
    const float xv[6] = {1.0f, 2.0f, 3.0f, 4.0f, -5.0f, 0.5f}, wv[4] = {0.5f, -2.0f, 3.0f, 0.25f};
    const float want[6] = {0.25f, 0.5f, 1.5f, 2.0f, -1.25f, 0.125f}; /* rows times w[3], w[0], w[3] */
    const int32_t idx[3] = {3, 0, 3};
    memcpy(x.data, xv, sizeof xv);
    memcpy(w.data, wv, sizeof wv);
    nnt_error err = {0};
    CU_ASSERT_EQUAL(ops->scale_rows(bctx, &x, &w, idx, 3, &y, &err), NNT_OK);
    CU_ASSERT_EQUAL(memcmp(y.data, want, sizeof want), 0);
    CU_ASSERT_EQUAL(memcmp(x.data, xv, sizeof xv), 0);
    CU_ASSERT_EQUAL(ops->scale_rows(bctx, &x, &w, idx, 3, &x, &err), NNT_OK); /* in place */
    CU_ASSERT_EQUAL(memcmp(x.data, want, sizeof want), 0);
    /* (1 + 2^-7)^2 = 1 + 2^-6 + 2^-14: exact in float32, 1 + 2^-6 in bfloat16 */
    float *xd = x.data, *yd = y.data, *wd = w.data;
    xd[0] = 1.0078125f, wd[1] = 1.0078125f;
    const int32_t one[1] = {1};
    nnt_tensor x1 = x, y1 = y;
    x1.shape[0] = y1.shape[0] = 1;
    CU_ASSERT_EQUAL(ops->scale_rows(bctx, &x1, &w, one, 1, &y1, &err), NNT_OK);
    CU_ASSERT_EQUAL(yd[0], 1.0f + 1.0f / 64.0f + 1.0f / 16384.0f);
    y1.flags = NNT_TENSOR_BF16_VALUES;
    CU_ASSERT_EQUAL(ops->scale_rows(bctx, &x1, &w, one, 1, &y1, &err), NNT_OK);
    CU_ASSERT_EQUAL(yd[0], 1.0f + 1.0f / 64.0f);
    /* refusals: an index past w's 4 entries or below 0 (named with its place), unlike shapes */
    const int32_t bad[3] = {0, 4, 1}, neg[3] = {0, 1, -1};
    CU_ASSERT_EQUAL(ops->scale_rows(bctx, &x, &w, bad, 3, &y, &err), NNT_ERR_INVALID_ARGUMENT);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "idx[1] = 4"));
    CU_ASSERT_EQUAL(ops->scale_rows(bctx, &x, &w, neg, 3, &y, &err), NNT_ERR_INVALID_ARGUMENT);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "idx[2] = -1"));
    CU_ASSERT_EQUAL(ops->scale_rows(bctx, &x, &w, idx, 2, &y, &err), NNT_ERR_SHAPE); /* x has 3 rows */
    CU_ASSERT_EQUAL(ops->scale_rows(bctx, &x, &w, idx, 3, &y1, &err), NNT_ERR_SHAPE);
    nnt_tensor_free(&x);
    nnt_tensor_free(&y);
    nnt_tensor_free(&w);
}

/* scatter_add_rows and scatter_rows on a wide destination (n * H past the size where the threads
 * split the columns; H = 4099 leaves a ragged last column range) with rows repeated: each value
 * equals the loop over i in order, written here (dst[rows[i]] += scale[i] src[i], or =), bit for
 * bit; a row index out of range anywhere in the list is refused before any row is written. */
static void test_scatter_wide(void)
{
    enum { M = 3, n = 24, H = 4099 };
    nnt_tensor src = make(2, n, H, 0, 0, 0), dst = make(2, M, H, 0, 0, 0);
    float *sd = src.data, *dd = dst.data, scale[n];
    float *want = malloc(sizeof(float) * M * H), *dst0 = malloc(sizeof(float) * M * H);
    CU_ASSERT_FATAL(want && dst0);
    int32_t rows[n];
    for (int i = 0; i < n; i++) rows[i] = (i * 7) % M, scale[i] = urand();
    for (int64_t i = 0; i < (int64_t)n * H; i++) sd[i] = urand();
    for (int64_t i = 0; i < (int64_t)M * H; i++) dst0[i] = urand();
    nnt_error err = {0};
    for (int overwrite = 0; overwrite < 2; overwrite++) {
        memcpy(dd, dst0, sizeof(float) * M * H);
        memcpy(want, dst0, sizeof(float) * M * H);
        for (int i = 0; i < n; i++)
            for (int64_t h = 0; h < H; h++) {
                float *w = want + (int64_t)rows[i] * H + h;
                *w = overwrite ? scale[i] * sd[(int64_t)i * H + h] : *w + scale[i] * sd[(int64_t)i * H + h];
            }
        nnt_status st = overwrite ? ops->scatter_rows(bctx, &src, rows, scale, n, &dst, &err)
                                  : ops->scatter_add_rows(bctx, &src, rows, scale, n, &dst, &err);
        CU_ASSERT_EQUAL(st, NNT_OK);
        CU_ASSERT_EQUAL(memcmp(dd, want, sizeof(float) * M * H), 0);
    }
    rows[n - 1] = M; /* past the destination's rows, after 23 good ones */
    memcpy(dd, dst0, sizeof(float) * M * H);
    CU_ASSERT_EQUAL(ops->scatter_add_rows(bctx, &src, rows, scale, n, &dst, &err), NNT_ERR_INVALID_ARGUMENT);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "row 3 out of range"));
    CU_ASSERT_EQUAL(memcmp(dd, dst0, sizeof(float) * M * H), 0);
    free(want);
    free(dst0);
    nnt_tensor_free(&src);
    nnt_tensor_free(&dst);
}

/* The MoE combine two ways: scale_rows by routing weights, then scatter_add_rows / scatter_rows
 * without scales, gives bit for bit what the scatters give with the same weights as host scales,
 * with and without bfloat16 rounding of the destination (the experts' rows and the destination
 * flagged alike, as one run's arena flags them). */
static void test_scale_rows_then_scatter(void)
{
    enum { N = 7, H = 13, M = 5, KW = 3 };
    const int32_t rows[N] = {4, 0, 2, 4, 1, 0, 3}, slots[N] = {12, 0, 7, 13, 3, 1, 9};
    const int32_t at[N] = {14, 2, 8, 13, 3, 1, 9}; /* where each row's weight sits in w [M, KW] */
    nnt_tensor src = make(2, N, H, 0, 0, 0), ys = make(2, N, H, 0, 0, 0), w = make(2, M, KW, 0, 0, 0);
    nnt_tensor a = make(2, M * KW, H, 0, 0, 0), b = make(2, M * KW, H, 0, 0, 0);
    float scale[N];
    for (int64_t i = 0; i < N * H; i++) ((float *)src.data)[i] = urand();
    for (int64_t i = 0; i < M * KW; i++) ((float *)w.data)[i] = urand();
    for (int i = 0; i < N; i++) scale[i] = ((float *)w.data)[at[i]];
    nnt_error err = {0};
    for (int r16 = 0; r16 < 2; r16++)
        for (int store = 0; store < 2; store++) {
            uint32_t fl = r16 ? NNT_TENSOR_BF16_VALUES : 0;
            ys.flags = a.flags = b.flags = fl;
            for (int64_t i = 0; i < M * KW * H; i++) ((float *)a.data)[i] = ((float *)b.data)[i] = r16 ? 0.5f : urand();
            nnt_tensor as = a, bs = b; /* scatter_add_rows: into the first M rows */
            if (!store) as.shape[0] = bs.shape[0] = M;
            CU_ASSERT_EQUAL(ops->scale_rows(bctx, &src, &w, at, N, &ys, &err), NNT_OK);
            if (store) {
                CU_ASSERT_EQUAL(ops->scatter_rows(bctx, &src, slots, scale, N, &as, &err), NNT_OK);
                CU_ASSERT_EQUAL(ops->scatter_rows(bctx, &ys, slots, NULL, N, &bs, &err), NNT_OK);
            } else {
                CU_ASSERT_EQUAL(ops->scatter_add_rows(bctx, &src, rows, scale, N, &as, &err), NNT_OK);
                CU_ASSERT_EQUAL(ops->scatter_add_rows(bctx, &ys, rows, NULL, N, &bs, &err), NNT_OK);
            }
            CU_ASSERT_EQUAL(memcmp(a.data, b.data, sizeof(float) * M * KW * H), 0);
        }
    nnt_tensor *ts[] = {&src, &ys, &w, &a, &b};
    for (size_t i = 0; i < sizeof ts / sizeof *ts; i++) nnt_tensor_free(ts[i]);
}

int register_tests(void)
{
    CU_pSuite s = CU_add_suite("kernels", setup, teardown);
    if (!s) return -1;
    if (!CU_add_test(s, "delta rule, K != V, lengths 1..130, with and without a state", test_delta_rule_lengths) ||
        !CU_add_test(s, "delta rule: padding tokens leave the state alone", test_delta_rule_padding) ||
        !CU_add_test(s, "causal convolution carries its state across calls", test_conv_carry) ||
        !CU_add_test(s, "KDA forget gate values", test_kda_gate) ||
        !CU_add_test(s, "linear with F32, BF16 and F16 weights, few rows and panels", test_linear_half) ||
        !CU_add_test(s, "bfloat16 products round x on every path (by hand)", test_linear_bf16_rounds_x) ||
        !CU_add_test(s, "blas_split = yes: linear_backward split by rows and by columns", test_blas_split) ||
        !CU_add_test(s, "attention with one key/value head for many query heads, few and many queries",
                     test_attention_shared_head) ||
        !CU_add_test(s, "scale_rows by hand, in place, bfloat16, refusals", test_scale_rows) ||
        !CU_add_test(s, "scale_rows then the scatters without scales equals the scatters with them",
                     test_scale_rows_then_scatter) ||
        !CU_add_test(s, "scatters on a wide destination: the serial sums, refusals before any write",
                     test_scatter_wide))
        return -1;
    return 0;
}
