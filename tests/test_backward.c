/* test_backward.c - the cpu backend's backward ops (nnt_backend.h, "backward") against central
 * finite differences of double-precision forwards written here from each op's formula (none
 * calls the backend's forward, except to obtain the forward's output or choice that a backward
 * reads: softmax's p, route's idx; and scale_rows in place, whose input the backward is handed as
 * it was before the call). For a random cotangent g, L(x) = sum g * f(x) and
 * dL/dx_i ~ (L(x + h e_i) - L(x - h e_i)) / 2h with h = 1e-4: the truncation error is of order
 * h^2 |f'''| ~ 1e-8 and the rounding error ~ 1e-16 |L| / h ~ 1e-11 on these O(1) inputs, while
 * the float32 backward carries a relative error of ~1e-6 (sums of at most a few dozen terms);
 * so the tolerance T_BWD = 1e-4, relative to the largest entry of the numeric gradient,
 * leaves a margin of ~100 over float32 rounding and catches any wrong term (checked by
 * test_comparator_catches). Every gradient starts non-zero and must keep that value plus the
 * gradient (the accumulate convention); NULL gradient outputs are passed where allowed. Odd
 * shapes throughout; seeded inputs. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/internal.h"
#include "test_util.h"

#define T_BWD 1e-4
#define FD_H 1e-4

static nnt_runtime *rt;
static const nnt_backend_ops *ops;
static const nnt_backend_descriptor *cpu;
static void *bctx;

static int setup(void)
{
    if (nnt_runtime_open(t_ini(), &rt) != NNT_OK) return -1;
    nnt_plugin *p = t_cpu_backend(rt);
    if (!p) return -1;
    cpu = p->backend;
    ops = p->backend->ops;
    bctx = p->be_ctx;
    return 0;
}

static int teardown(void)
{
    nnt_runtime_close(rt);
    return 0;
}

static unsigned rng = 30u;
static unsigned next(void)
{
    rng = rng * 1664525u + 1013904223u;
    return rng >> 8;
}
static float urand(void) /* uniform in [-1, 1) */
{
    return (float)(next() & 0xffffff) / 8388608.0f - 1.0f;
}

static nnt_tensor mk(int ndim, int64_t a, int64_t b, int64_t c, int64_t d)
{
    int64_t shape[4] = {a, b, c, d};
    nnt_tensor t;
    CU_ASSERT_FATAL(nnt_tensor_alloc(&t, NNT_F32, ndim, shape) == NNT_OK);
    return t;
}

static float *fl(nnt_tensor *t) { return t->data; }

static void fill(nnt_tensor *t, float amp)
{
    int64_t n = nnt_tensor_numel(t);
    for (int64_t i = 0; i < n; i++) fl(t)[i] = amp * urand();
}

/* A gradient tensor shaped as t, filled with random values; *before keeps a copy. */
static nnt_tensor grad_like(const nnt_tensor *t, float **before)
{
    nnt_tensor g;
    CU_ASSERT_FATAL(nnt_tensor_alloc(&g, NNT_F32, t->ndim, t->shape) == NNT_OK);
    fill(&g, 1.0f);
    int64_t n = nnt_tensor_numel(t);
    *before = malloc((size_t)(n ? n : 1) * sizeof **before);
    CU_ASSERT_FATAL(*before != NULL);
    memcpy(*before, g.data, (size_t)n * sizeof(float));
    return g;
}

/* A forward for the finite differences: y[ny] = f(x) with the op's other inputs in arg. */
typedef void (*fwd_fn)(const void *arg, const double *x, double *y);

/* The numeric gradient of L = sum g y at x (nx floats) into fd[nx]. */
static void numeric(fwd_fn f, const void *arg, const float *x, int64_t nx, const double *g, int64_t ny, double *fd)
{
    double *xd = malloc((size_t)nx * sizeof *xd), *y = malloc((size_t)ny * sizeof *y);
    CU_ASSERT_FATAL(xd && y);
    for (int64_t i = 0; i < nx; i++) xd[i] = x[i];
    for (int64_t i = 0; i < nx; i++) {
        double keep = xd[i], L[2];
        for (int sgn = 0; sgn < 2; sgn++) {
            xd[i] = keep + (sgn ? -FD_H : FD_H);
            f(arg, xd, y);
            L[sgn] = 0.0;
            for (int64_t j = 0; j < ny; j++) L[sgn] += g[j] * y[j];
        }
        xd[i] = keep;
        fd[i] = (L[0] - L[1]) / (2.0 * FD_H);
    }
    free(xd);
    free(y);
}

/* max |got - before - fd| / max |fd| (before NULL: zeros) */
static double grad_err(const float *got, const float *before, const double *fd, int64_t n)
{
    double worst = 0.0, mag = 0.0;
    for (int64_t i = 0; i < n; i++) {
        double v = (double)got[i] - (before ? (double)before[i] : 0.0);
        worst = fmax(worst, fabs(v - fd[i]));
        if (isnan(v)) worst = INFINITY;
        mag = fmax(mag, fabs(fd[i]));
    }
    return worst / (mag > 0.0 ? mag : 1.0);
}

/* The finite-difference check of one gradient: reports and asserts within T_BWD. */
static double check(const char *what, fwd_fn f, const void *arg, const float *x, int64_t nx, const double *g,
                    int64_t ny, const float *got, const float *before)
{
    double *fd = malloc((size_t)(nx ? nx : 1) * sizeof *fd);
    CU_ASSERT_FATAL(fd != NULL);
    numeric(f, arg, x, nx, g, ny, fd);
    double e = grad_err(got, before, fd, nx);
    if (!(e <= T_BWD) || getenv("NNT_BWD_VERBOSE")) fprintf(stderr, "\n  %s: relative error %.3g\n", what, e);
    CU_ASSERT(e <= T_BWD);
    free(fd);
    return e;
}

/* A random cotangent of n entries, as floats (for the backend) and doubles (for L). */
static double *cotangent(nnt_tensor *t)
{
    int64_t n = nnt_tensor_numel(t);
    fill(t, 1.0f);
    double *g = malloc((size_t)(n ? n : 1) * sizeof *g);
    CU_ASSERT_FATAL(g != NULL);
    for (int64_t i = 0; i < n; i++) g[i] = fl(t)[i];
    return g;
}

/* ---- the comparator itself ---- */

typedef struct sq_arg {
    int64_t n;
} sq_arg;
static void fwd_square(const void *arg, const double *x, double *y)
{
    const sq_arg *a = arg;
    for (int64_t i = 0; i < a->n; i++) y[i] = x[i] * x[i];
}

/* A gradient wrong by 1e-3 of its largest entry in one place exceeds T_BWD. */
static void test_comparator_catches(void)
{
    float x[5] = {0.3f, -0.7f, 0.9f, 0.1f, -0.2f}, got[5];
    double g[5] = {1, -0.5, 0.25, 2, 1}, fd[5];
    sq_arg a = {5};
    numeric(fwd_square, &a, x, 5, g, 5, fd);
    for (int i = 0; i < 5; i++) got[i] = (float)(2.0 * x[i] * g[i]);
    CU_ASSERT(grad_err(got, NULL, fd, 5) < 1e-6);
    got[3] += 1e-3f * 0.9f;
    CU_ASSERT(grad_err(got, NULL, fd, 5) > T_BWD);
}


/* ---- linear ---- */

/* An encoded weight [R, C] with its own storage (codes and a block-scale grid br x bc). */
typedef struct test_weight {
    nnt_tensor t;
    void *codes, *grid;
} test_weight;

static test_weight weight_make(nnt_dtype dt, nnt_dtype sdt, int64_t R, int64_t C, int br, int bc)
{
    test_weight w = {{0}, NULL, NULL};
    w.t = (nnt_tensor){.dtype = dt, .ndim = 2, .shape = {R, C}};
    size_t bytes = nnt_dtype_span(dt, R * C);
    w.codes = malloc(bytes ? bytes : 1);
    CU_ASSERT_FATAL(w.codes != NULL);
    uint8_t *b = w.codes;
    for (int64_t i = 0; i < R * C; i++) switch (dt) {
        case NNT_F32: ((float *)b)[i] = urand(); break;
        case NNT_BF16: ((uint16_t *)b)[i] = nnt_f32_to_bf16(urand()); break;
        case NNT_F16: ((uint16_t *)b)[i] = nnt_f32_to_f16(urand()); break;
        case NNT_F8_E4M3: {
            uint8_t v = (uint8_t)next();
            b[i] = (v & 0x7f) == 0x7f ? 0x7e : v; /* every finite code */
            break;
        }
        default:
            if (i % 2 == 0) b[i / 2] = (uint8_t)next();
            break;
        }
    w.t.data = w.codes;
    if (dt == NNT_F8_E4M3 || dt == NNT_F4_E2M1) {
        int64_t sr = (R + br - 1) / br, sc = (C + bc - 1) / bc;
        w.grid = malloc((size_t)(sr * sc) * 4);
        CU_ASSERT_FATAL(w.grid != NULL);
        for (int64_t i = 0; i < sr * sc; i++) {
            float s = 0.01f + 0.02f * (urand() + 1.0f);
            if (sdt == NNT_F32) ((float *)w.grid)[i] = s;
            if (sdt == NNT_BF16) ((uint16_t *)w.grid)[i] = nnt_f32_to_bf16(s);
            if (sdt == NNT_F8_E8M0) ((uint8_t *)w.grid)[i] = (uint8_t)(120 + next() % 8);
        }
        w.t.scale = w.grid;
        w.t.scale_dtype = sdt;
        w.t.block_rows = br;
        w.t.block_cols = bc;
    }
    return w;
}

typedef struct lin_arg {
    int64_t M, N, K;
    const double *w; /* [N, K], decoded by the core's reference decoder (core/checkpoint/quant.c) */
} lin_arg;

static void fwd_linear(const void *arg, const double *x, double *y)
{
    const lin_arg *a = arg;
    for (int64_t m = 0; m < a->M; m++)
        for (int64_t n = 0; n < a->N; n++) {
            double acc = 0.0;
            for (int64_t k = 0; k < a->K; k++) acc += x[m * a->K + k] * a->w[n * a->K + k];
            y[m * a->N + n] = acc;
        }
}

static double *decoded(const nnt_tensor *w)
{
    int64_t N = w->shape[0], K = w->shape[1];
    float *f = malloc((size_t)(N * K) * sizeof *f);
    double *d = malloc((size_t)(N * K) * sizeof *d);
    nnt_error err = {0};
    CU_ASSERT_FATAL(f && d && nnt_weight_decode(w, 0, N, f, &err) == NNT_OK);
    for (int64_t i = 0; i < N * K; i++) d[i] = f[i];
    free(f);
    return d;
}

static const char *const ISAS[] = {"avx512", "avx2", "sse2", "neon", "portable"};

static void *context(const char *isa)
{
    const char *keys[2] = {"isa", "threads"}, *vals[2] = {isa, "2"};
    nnt_backend_options opt = {
        .struct_size = sizeof(nnt_backend_options), .keys = keys, .values = vals, .count = 2, .ini_path = "test"};
    void *ctx = NULL;
    nnt_error err = {0};
    return cpu->create(&opt, &ctx, &err) == NNT_OK ? ctx : NULL;
}

/* dx += dy . w on every encoding and every instruction set this CPU runs, against finite
 * differences of x . w^T (w decoded by the core's reference decoder; bfloat16 flags ignored) */
static void test_linear(void)
{
    struct {
        const char *what;
        nnt_dtype dt, sdt;
        int64_t M, N, K;
        int br, bc;
        uint32_t flags;
    } cases[] = {
        {"F32 3x7x5", NNT_F32, 0, 3, 7, 5, 0, 0, 0},
        {"F32 11x7x5 (many rows: one sgemm)", NNT_F32, 0, 11, 7, 5, 0, 0, 0},
        {"BF16 3x7x5", NNT_BF16, 0, 3, 7, 5, 0, 0, 0},
        {"BF16 3x7x5, bf16 products flagged", NNT_BF16, 0, 3, 7, 5, 0, 0, NNT_TENSOR_BF16_PRODUCTS},
        {"F16 11x9x13", NNT_F16, 0, 11, 9, 13, 0, 0, 0},
        {"FP8/F32 3x7x5, 4x2 blocks", NNT_F8_E4M3, NNT_F32, 3, 7, 5, 4, 2, 0},
        {"FP8/BF16 9x13x11, 8x8 blocks", NNT_F8_E4M3, NNT_BF16, 9, 13, 11, 8, 8, 0},
        {"FP8/E8M0 3x7x5, 3x3 blocks", NNT_F8_E4M3, NNT_F8_E8M0, 3, 7, 5, 3, 3, 0},
        {"FP4/E8M0 3x7x6, groups of 4", NNT_F4_E2M1, NNT_F8_E8M0, 3, 7, 6, 1, 4, 0},
        {"FP4/F32 5x9x10, groups of 4", NNT_F4_E2M1, NNT_F32, 5, 9, 10, 1, 4, 0},
    };
    for (size_t ci = 0; ci < sizeof cases / sizeof *cases; ci++) {
        test_weight w = weight_make(cases[ci].dt, cases[ci].sdt, cases[ci].N, cases[ci].K, cases[ci].br, cases[ci].bc);
        w.t.flags = cases[ci].flags;
        int64_t M = cases[ci].M, N = cases[ci].N, K = cases[ci].K;
        nnt_tensor x = mk(2, M, K, 0, 0), dy = mk(2, M, N, 0, 0);
        fill(&x, 1.0f);
        double *g = cotangent(&dy);
        lin_arg a = {M, N, K, decoded(&w.t)};
        int paths = 0;
        for (size_t ii = 0; ii < sizeof ISAS / sizeof *ISAS; ii++) {
            void *ctx = context(ISAS[ii]);
            if (!ctx) continue;
            paths++;
            float *before;
            nnt_tensor dx = grad_like(&x, &before);
            nnt_error err = {0};
            CU_ASSERT_EQUAL(ops->linear_backward(ctx, &dy, &w.t, &dx, &err), NNT_OK);
            char what[128];
            snprintf(what, sizeof what, "linear %s on %s", cases[ci].what, ISAS[ii]);
            check(what, fwd_linear, &a, x.data, M * K, g, M * N, dx.data, before);
            nnt_tensor_free(&dx);
            free(before);
            cpu->destroy(ctx);
        }
        CU_ASSERT(paths >= 1);
        free((void *)a.w);
        free(g);
        nnt_tensor_free(&x);
        nnt_tensor_free(&dy);
        free(w.codes);
        free(w.grid);
    }
}

/* A weight of several decoded panels (N > the rows of one 4 MiB panel at K = 1024; more than
 * CPU_FEW_ROWS rows of dy), and the few-row path on the same weight, FP8 and BF16: dx += dy . w
 * against the double-precision product (exactly what finite differences of this linear map
 * give), and a mismatched shape refused. */
static void test_linear_panels(void)
{
    for (int64_t M = 2; M <= 9; M += 7) {
        const int64_t N = 1100, K = 1024;
        nnt_dtype dts[2] = {NNT_F8_E4M3, NNT_BF16};
        for (int di = 0; di < 2; di++) {
            test_weight w = weight_make(dts[di], NNT_F32, N, K, 128, 128);
            nnt_tensor dy = mk(2, M, N, 0, 0);
            fill(&dy, 1.0f);
            float *before;
            nnt_tensor dx = grad_like(&(nnt_tensor){.dtype = NNT_F32, .ndim = 2, .shape = {M, K}}, &before);
            nnt_error err = {0};
            CU_ASSERT_EQUAL_FATAL(ops->linear_backward(bctx, &dy, &w.t, &dx, &err), NNT_OK);
            double *wd = decoded(&w.t), *ref = calloc((size_t)(M * K), sizeof *ref);
            for (int64_t m = 0; m < M; m++)
                for (int64_t n = 0; n < N; n++)
                    for (int64_t k = 0; k < K; k++) ref[m * K + k] += (double)fl(&dy)[m * N + n] * wd[n * K + k];
            double e = grad_err(dx.data, before, ref, M * K);
            if (!(e <= T_BWD)) fprintf(stderr, "\n  linear panels dtype %d: %.3g\n", (int)dts[di], e);
            CU_ASSERT(e <= T_BWD);
            nnt_tensor bad = mk(2, M, K + 1, 0, 0);
            CU_ASSERT_EQUAL(ops->linear_backward(bctx, &dy, &w.t, &bad, &err), NNT_ERR_SHAPE);
            CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "dx"));
            nnt_tensor_free(&bad);
            free(wd);
            free(ref);
            free(before);
            nnt_tensor_free(&dx);
            nnt_tensor_free(&dy);
            free(w.codes);
            free(w.grid);
        }
    }
}

/* ---- rms_norm ---- */

typedef struct rms_arg {
    int64_t M, D;
    const double *w; /* NULL: no gain */
    double eps;
} rms_arg;

static void fwd_rms(const void *arg, const double *x, double *y)
{
    const rms_arg *a = arg;
    for (int64_t m = 0; m < a->M; m++) {
        double ss = 0.0;
        for (int64_t d = 0; d < a->D; d++) ss += x[m * a->D + d] * x[m * a->D + d];
        double r = 1.0 / sqrt(ss / (double)a->D + a->eps);
        for (int64_t d = 0; d < a->D; d++) y[m * a->D + d] = (a->w ? a->w[d] : 1.0) * x[m * a->D + d] * r;
    }
}

static void test_rms_norm(void)
{
    const int64_t M = 3, D = 7;
    for (int gain = 0; gain < 3; gain++) { /* none, F32, BF16 */
        nnt_tensor x = mk(2, M, D, 0, 0), dy = mk(2, M, D, 0, 0), w = mk(1, D, 0, 0, 0);
        fill(&x, 1.5f);
        fill(&w, 1.0f);
        double wd[7];
        uint16_t wb[7];
        nnt_tensor wv = w;
        for (int64_t d = 0; d < D; d++) {
            wb[d] = nnt_f32_to_bf16(fl(&w)[d]);
            wd[d] = gain == 2 ? nnt_bf16_to_f32(wb[d]) : fl(&w)[d];
        }
        if (gain == 2) {
            wv.dtype = NNT_BF16;
            wv.data = wb;
        }
        double *g = cotangent(&dy);
        rms_arg a = {M, D, gain ? wd : NULL, 1e-5};
        float *before;
        nnt_tensor dx = grad_like(&x, &before);
        nnt_error err = {0};
        CU_ASSERT_EQUAL(ops->rms_norm_backward(bctx, &x, gain ? &wv : NULL, 1e-5f, &dy, &dx, &err), NNT_OK);
        check(gain == 0 ? "rms_norm, no gain" : gain == 1 ? "rms_norm, F32 gain" : "rms_norm, BF16 gain", fwd_rms, &a,
              x.data, M * D, g, M * D, dx.data, before);
        CU_ASSERT_EQUAL(ops->rms_norm_backward(bctx, &x, NULL, 1e-5f, &dy, NULL, &err), NNT_OK);
        nnt_tensor bad = mk(2, M, D - 1, 0, 0);
        CU_ASSERT_EQUAL(ops->rms_norm_backward(bctx, &x, NULL, 1e-5f, &bad, &dx, &err), NNT_ERR_SHAPE);
        nnt_tensor_free(&bad);
        free(g);
        free(before);
        nnt_tensor_free(&dx);
        nnt_tensor_free(&x);
        nnt_tensor_free(&dy);
        nnt_tensor_free(&w);
    }
}

/* ---- accumulate, swap12, sum_axis1, copy_cols ---- */

static void test_accumulate(void)
{
    nnt_tensor x = mk(2, 3, 7, 0, 0), y = mk(1, 21, 0, 0, 0);
    fill(&x, 1.0f);
    fill(&y, 1.0f);
    float keep[21];
    memcpy(keep, y.data, sizeof keep);
    nnt_error err = {0};
    CU_ASSERT_EQUAL(ops->accumulate(bctx, &x, -0.75f, &y, &err), NNT_OK);
    for (int i = 0; i < 21; i++) CU_ASSERT_EQUAL(fl(&y)[i], keep[i] + -0.75f * fl(&x)[i]);
    nnt_tensor bad = mk(1, 20, 0, 0, 0);
    CU_ASSERT_EQUAL(ops->accumulate(bctx, &x, 1.0f, &bad, &err), NNT_ERR_SHAPE);
    nnt_tensor_free(&bad);
    nnt_tensor_free(&x);
    nnt_tensor_free(&y);
}

typedef struct dims4 {
    int64_t A, B, C, D;
} dims4;

static void fwd_swap12(const void *arg, const double *x, double *y)
{
    const dims4 *a = arg;
    for (int64_t i = 0; i < a->A; i++)
        for (int64_t b = 0; b < a->B; b++)
            for (int64_t c = 0; c < a->C; c++)
                for (int64_t d = 0; d < a->D; d++)
                    y[((i * a->C + c) * a->B + b) * a->D + d] = x[((i * a->B + b) * a->C + c) * a->D + d];
}

static void fwd_sum_axis1(const void *arg, const double *x, double *y)
{
    const dims4 *a = arg; /* [A = M, B = K, C = H] */
    for (int64_t m = 0; m < a->A; m++)
        for (int64_t h = 0; h < a->C; h++) {
            double acc = 0.0;
            for (int64_t k = 0; k < a->B; k++) acc += x[(m * a->B + k) * a->C + h];
            y[m * a->C + h] = acc;
        }
}

typedef struct cols_arg {
    int64_t M, Cs, Cd, sc, dc, n;
    const float *dst0; /* the destination before the copy */
} cols_arg;

static void fwd_copy_cols(const void *arg, const double *x, double *y)
{
    const cols_arg *a = arg;
    for (int64_t i = 0; i < a->M * a->Cd; i++) y[i] = a->dst0[i];
    for (int64_t m = 0; m < a->M; m++)
        for (int64_t j = 0; j < a->n; j++) y[m * a->Cd + a->dc + j] = x[m * a->Cs + a->sc + j];
}

static void test_moves(void)
{
    nnt_error err = {0};
    float *before;
    { /* swap12: x [2, 3, 5, 4] -> y [2, 5, 3, 4] */
        dims4 a = {2, 3, 5, 4};
        nnt_tensor x = mk(4, 2, 3, 5, 4), dy = mk(4, 2, 5, 3, 4);
        fill(&x, 1.0f);
        double *g = cotangent(&dy);
        nnt_tensor dx = grad_like(&x, &before);
        CU_ASSERT_EQUAL(ops->swap12_backward(bctx, &dy, &dx, &err), NNT_OK);
        check("swap12", fwd_swap12, &a, x.data, 120, g, 120, dx.data, before);
        CU_ASSERT_EQUAL(ops->swap12_backward(bctx, &x, &dx, &err), NNT_ERR_SHAPE);
        free(g), free(before), nnt_tensor_free(&x), nnt_tensor_free(&dy), nnt_tensor_free(&dx);
    }
    { /* sum_axis1: x [3, 4, 5] -> y [3, 5] */
        dims4 a = {3, 4, 5, 0};
        nnt_tensor x = mk(3, 3, 4, 5, 0), dy = mk(2, 3, 5, 0, 0);
        fill(&x, 1.0f);
        double *g = cotangent(&dy);
        nnt_tensor dx = grad_like(&x, &before);
        CU_ASSERT_EQUAL(ops->sum_axis1_backward(bctx, &dy, &dx, &err), NNT_OK);
        check("sum_axis1", fwd_sum_axis1, &a, x.data, 60, g, 15, dx.data, before);
        CU_ASSERT_EQUAL(ops->sum_axis1_backward(bctx, &dy, NULL, &err), NNT_OK);
        free(g), free(before), nnt_tensor_free(&x), nnt_tensor_free(&dy), nnt_tensor_free(&dx);
    }
    { /* copy_cols: src [3, 9] cols [2, 7) -> dst [3, 8] cols [1, 6) */
        nnt_tensor src = mk(2, 3, 9, 0, 0), dst = mk(2, 3, 8, 0, 0), ddst = mk(2, 3, 8, 0, 0);
        fill(&src, 1.0f);
        fill(&dst, 1.0f);
        cols_arg a = {3, 9, 8, 2, 1, 5, dst.data};
        double *g = cotangent(&ddst);
        nnt_tensor dsrc = grad_like(&src, &before);
        CU_ASSERT_EQUAL(ops->copy_cols_backward(bctx, &ddst, 1, &dsrc, 2, 5, &err), NNT_OK);
        check("copy_cols", fwd_copy_cols, &a, src.data, 27, g, 24, dsrc.data, before);
        CU_ASSERT_EQUAL(ops->copy_cols_backward(bctx, &ddst, 4, &dsrc, 2, 5, &err), NNT_ERR_SHAPE);
        CU_ASSERT_EQUAL(ops->copy_cols_backward(bctx, &dsrc, 0, &dsrc, 2, 5, &err), NNT_ERR_INVALID_ARGUMENT);
        CU_ASSERT_EQUAL(ops->copy_cols_backward(bctx, &dsrc, 0, &dsrc, 5, 4, &err), NNT_OK); /* disjoint ranges */
        free(g), free(before), nnt_tensor_free(&src), nnt_tensor_free(&dst), nnt_tensor_free(&ddst);
        nnt_tensor_free(&dsrc);
    }
}

/* ---- rope ---- */

typedef struct rope_arg {
    int64_t B, H, T, D;
    const int32_t *pos;
    const float *inv_freq;
    int start, rot;
    nnt_rope_style style;
    double mscale;
} rope_arg;

static void fwd_rope(const void *arg, const double *x, double *y)
{
    const rope_arg *a = arg;
    int half = a->rot / 2;
    for (int64_t b = 0; b < a->B; b++)
        for (int64_t h = 0; h < a->H; h++)
            for (int64_t t = 0; t < a->T; t++) {
                const double *v = x + ((b * a->H + h) * a->T + t) * a->D;
                double *o = y + ((b * a->H + h) * a->T + t) * a->D;
                for (int64_t d = 0; d < a->D; d++) o[d] = v[d];
                for (int i = 0; i < half; i++) {
                    double ang = (double)((float)a->pos[b * a->T + t] * a->inv_freq[i]);
                    double c = cos(ang) * a->mscale, s = sin(ang) * a->mscale;
                    int i1 = a->start + (a->style == NNT_ROPE_NEOX ? i : 2 * i);
                    int i2 = a->start + (a->style == NNT_ROPE_NEOX ? i + half : 2 * i + 1);
                    o[i1] = v[i1] * c - v[i2] * s;
                    o[i2] = v[i2] * c + v[i1] * s;
                }
            }
}

/* Both styles, a partial rotated slice starting inside the head, mscale 1 and not */
static void test_rope(void)
{
    const int64_t B = 2, H = 3, T = 5, D = 9;
    int32_t pos[10];
    for (int i = 0; i < 10; i++) pos[i] = (int32_t)(next() % 40);
    float inv_freq[3];
    for (int i = 0; i < 3; i++) inv_freq[i] = (float)pow(10000.0, -2.0 * i / 6.0);
    for (int style = 0; style < 2; style++)
        for (int ms = 0; ms < 2; ms++) {
            rope_arg a = {B, H, T, D, pos, inv_freq, 1, 6, (nnt_rope_style)style, ms ? 1.3 : 1.0};
            nnt_tensor x = mk(4, B, H, T, D), dx = mk(4, B, H, T, D);
            fill(&x, 1.0f);
            double *g = cotangent(&dx); /* the gradient of the output, replaced in place */
            nnt_error err = {0};
            CU_ASSERT_EQUAL(ops->rope_backward(bctx, &dx, pos, inv_freq, 1, 6, (nnt_rope_style)style, (float)a.mscale, &err),
                            NNT_OK);
            char what[64];
            snprintf(what, sizeof what, "rope %s, mscale %.1f", style ? "interleaved" : "neox", a.mscale);
            check(what, fwd_rope, &a, x.data, B * H * T * D, g, B * H * T * D, dx.data, NULL);
            CU_ASSERT_EQUAL(ops->rope_backward(bctx, &dx, pos, inv_freq, 4, 6, NNT_ROPE_NEOX, 1.0f, &err),
                            NNT_ERR_INVALID_ARGUMENT);
            free(g), nnt_tensor_free(&x), nnt_tensor_free(&dx);
        }
}

/* ---- attention: scores, softmax, mix ---- */

typedef struct scores_arg {
    int64_t B, Hq, Hkv, T, S, D;
    float scale;
    const nnt_attn_mask *mask;
    const float *q, *k; /* the input not varied */
    int wrt_k;
} scores_arg;

/* 1 when key s is visible to query t of row b: the rules of nnt_attn_mask, written again here */
static int sees(const nnt_attn_mask *m, int64_t b, int64_t t, int64_t s, int64_t T, int64_t S)
{
    if (m->query_valid && !m->query_valid[b * T + t]) return 0;
    if (m->key_valid && !m->key_valid[b * S + s]) return 0;
    int32_t qp = m->q_pos[b * T + t], kp = m->k_pos[b * S + s];
    if (m->causal && kp > qp) return 0;
    return !(m->window > 0 && qp - kp >= m->window);
}

static void fwd_scores(const void *arg, const double *x, double *y)
{
    const scores_arg *a = arg;
    int64_t group = a->Hq / a->Hkv;
    for (int64_t b = 0; b < a->B; b++)
        for (int64_t h = 0; h < a->Hq; h++)
            for (int64_t t = 0; t < a->T; t++)
                for (int64_t s = 0; s < a->S; s++) {
                    double acc = 0.0; /* hidden entries: a constant (-inf in the op), 0 here */
                    if (sees(a->mask, b, t, s, a->T, a->S))
                        for (int64_t d = 0; d < a->D; d++) {
                            int64_t qi = ((b * a->Hq + h) * a->T + t) * a->D + d;
                            int64_t ki = ((b * a->Hkv + h / group) * a->S + s) * a->D + d;
                            acc += (a->wrt_k ? (double)a->q[qi] * x[ki] : x[qi] * (double)a->k[ki]);
                        }
                    y[((b * a->Hq + h) * a->T + t) * a->S + s] = a->scale * acc;
                }
}

/* masks: causal self-attention (T = S = 5), a sliding window of 3 with a padding key, and
 * queries after a cache (T = 3, S = 6) */
static void mask_case(int which, nnt_attn_mask *m, int32_t *qp, int32_t *kp, uint8_t *kv, int64_t *T, int64_t *S)
{
    *T = which == 2 ? 3 : 5;
    *S = which == 2 ? 6 : 5;
    for (int64_t b = 0; b < 2; b++) {
        for (int64_t t = 0; t < *T; t++) qp[b * *T + t] = (int32_t)(t + (which == 2 ? 3 : 0));
        for (int64_t s = 0; s < *S; s++) {
            kp[b * *S + s] = (int32_t)s;
            kv[b * *S + s] = !(which == 1 && b == 1 && s == 0);
        }
    }
    *m = (nnt_attn_mask){.struct_size = sizeof(nnt_attn_mask), .q_pos = qp, .k_pos = kp,
                         .key_valid = which == 1 ? kv : NULL, .causal = 1, .window = which == 1 ? 3 : 0};
}

static void test_attn_scores(void)
{
    const int64_t B = 2, Hq = 4, Hkv = 2, D = 3;
    for (int which = 0; which < 3; which++) {
        int32_t qp[16], kp[16];
        uint8_t kv[16];
        int64_t T, S;
        nnt_attn_mask mask;
        mask_case(which, &mask, qp, kp, kv, &T, &S);
        nnt_tensor q = mk(4, B, Hq, T, D), k = mk(4, B, Hkv, S, D), ds = mk(4, B, Hq, T, S);
        fill(&q, 1.0f);
        fill(&k, 1.0f);
        double *g = cotangent(&ds);
        for (int64_t i = 0; i < B * Hq * T * S; i++) /* hidden entries' ds must be ignored */
            if (!sees(&mask, i / (Hq * T * S), (i / S) % T, i % S, T, S)) fl(&ds)[i] = 1e6f, g[i] = 0.0;
        float *bq, *bk;
        nnt_tensor dq = grad_like(&q, &bq), dk = grad_like(&k, &bk);
        nnt_error err = {0};
        CU_ASSERT_EQUAL(ops->attn_scores_backward(bctx, &q, &k, 0.37f, &mask, &ds, &dq, &dk, &err), NNT_OK);
        scores_arg a = {B, Hq, Hkv, T, S, D, 0.37f, &mask, q.data, k.data, 0};
        char what[64];
        snprintf(what, sizeof what, "attn_scores dq, mask %d", which);
        check(what, fwd_scores, &a, q.data, B * Hq * T * D, g, B * Hq * T * S, dq.data, bq);
        a.wrt_k = 1;
        snprintf(what, sizeof what, "attn_scores dk, mask %d", which);
        check(what, fwd_scores, &a, k.data, B * Hkv * S * D, g, B * Hq * T * S, dk.data, bk);
        /* one of the two alone: the same values as before */
        memcpy(dq.data, bq, (size_t)(B * Hq * T * D) * sizeof(float));
        CU_ASSERT_EQUAL(ops->attn_scores_backward(bctx, &q, &k, 0.37f, &mask, &ds, &dq, NULL, &err), NNT_OK);
        a.wrt_k = 0;
        check("attn_scores dq alone", fwd_scores, &a, q.data, B * Hq * T * D, g, B * Hq * T * S, dq.data, bq);
        memcpy(dk.data, bk, (size_t)(B * Hkv * S * D) * sizeof(float));
        CU_ASSERT_EQUAL(ops->attn_scores_backward(bctx, &q, &k, 0.37f, &mask, &ds, NULL, &dk, &err), NNT_OK);
        a.wrt_k = 1;
        check("attn_scores dk alone", fwd_scores, &a, k.data, B * Hkv * S * D, g, B * Hq * T * S, dk.data, bk);
        CU_ASSERT_EQUAL(ops->attn_scores_backward(bctx, &q, &q, 0.37f, &mask, &ds, &dq, &dk, &err), NNT_ERR_SHAPE);
        free(g), free(bq), free(bk);
        nnt_tensor_free(&q), nnt_tensor_free(&k), nnt_tensor_free(&ds), nnt_tensor_free(&dq), nnt_tensor_free(&dk);
    }
}

typedef struct softmax_arg {
    int64_t H, T, S; /* rows of B * H * T */
    int64_t rows;
    const float *sinks;
} softmax_arg;

static void fwd_softmax(const void *arg, const double *x, double *y)
{
    const softmax_arg *a = arg;
    for (int64_t r = 0; r < a->rows; r++) {
        const double *s = x + r * a->S;
        double *p = y + r * a->S, mx = a->sinks ? a->sinks[(r / a->T) % a->H] : -INFINITY, sum = 0.0;
        for (int64_t j = 0; j < a->S; j++) mx = fmax(mx, s[j]);
        if (mx == -INFINITY) {
            for (int64_t j = 0; j < a->S; j++) p[j] = 0.0;
            continue;
        }
        if (a->sinks) sum = exp(a->sinks[(r / a->T) % a->H] - mx);
        for (int64_t j = 0; j < a->S; j++) sum += (p[j] = exp(s[j] - mx));
        for (int64_t j = 0; j < a->S; j++) p[j] /= sum;
    }
}

/* scores with hidden (-inf) entries and one fully hidden row, with and without sinks; p from
 * the backend's softmax (the backward reads the forward's output) */
static void test_softmax(void)
{
    const int64_t B = 2, H = 3, T = 4, S = 5, n = B * H * T * S;
    float sinks[3] = {0.5f, -1.0f, 2.0f};
    for (int withs = 0; withs < 2; withs++) {
        nnt_tensor s = mk(4, B, H, T, S), p = mk(4, B, H, T, S), dp = mk(4, B, H, T, S);
        fill(&s, 2.0f);
        for (int64_t i = 0; i < n; i++)
            if ((i / S) % T < i % S) fl(&s)[i] = -INFINITY; /* causal */
        for (int64_t j = 0; j < S; j++) fl(&s)[(1 * T + 2) * S + j] = -INFINITY; /* a fully hidden row */
        nnt_error err = {0};
        CU_ASSERT_EQUAL_FATAL(ops->softmax(bctx, &s, withs ? sinks : NULL, &p, &err), NNT_OK);
        double *g = cotangent(&dp);
        float *before;
        nnt_tensor ds = grad_like(&s, &before);
        CU_ASSERT_EQUAL(ops->softmax_backward(bctx, &p, withs ? sinks : NULL, &dp, &ds, &err), NNT_OK);
        softmax_arg a = {H, T, S, B * H * T, withs ? sinks : NULL};
        check(withs ? "softmax with sinks" : "softmax", fwd_softmax, &a, s.data, n, g, n, ds.data, before);
        for (int64_t j = 0; j < S; j++) CU_ASSERT_EQUAL(fl(&ds)[(1 * T + 2) * S + j], before[(1 * T + 2) * S + j]);
        CU_ASSERT_EQUAL(ops->softmax_backward(bctx, &p, NULL, &dp, NULL, &err), NNT_OK);
        free(g), free(before);
        nnt_tensor_free(&s), nnt_tensor_free(&p), nnt_tensor_free(&dp), nnt_tensor_free(&ds);
    }
}

typedef struct mix_arg {
    int64_t B, Hq, Hkv, T, S, Dv;
    const float *p, *v;
    int wrt_v;
} mix_arg;

static void fwd_mix(const void *arg, const double *x, double *y)
{
    const mix_arg *a = arg;
    int64_t group = a->Hq / a->Hkv;
    for (int64_t b = 0; b < a->B; b++)
        for (int64_t t = 0; t < a->T; t++)
            for (int64_t h = 0; h < a->Hq; h++)
                for (int64_t d = 0; d < a->Dv; d++) {
                    double acc = 0.0;
                    for (int64_t s = 0; s < a->S; s++) {
                        int64_t pi = ((b * a->Hq + h) * a->T + t) * a->S + s;
                        int64_t vi = ((b * a->Hkv + h / group) * a->S + s) * a->Dv + d;
                        acc += a->wrt_v ? (double)a->p[pi] * x[vi] : x[pi] * (double)a->v[vi];
                    }
                    y[((b * a->T + t) * a->Hq + h) * a->Dv + d] = acc;
                }
}

static void test_attn_mix(void)
{
    const int64_t B = 2, Hq = 4, Hkv = 2, T = 5, S = 7, Dv = 3;
    nnt_tensor p = mk(4, B, Hq, T, S), v = mk(4, B, Hkv, S, Dv), dout = mk(4, B, T, Hq, Dv);
    fill(&p, 1.0f);
    fill(&v, 1.0f);
    double *g = cotangent(&dout);
    float *bp, *bv;
    nnt_tensor dp = grad_like(&p, &bp), dv = grad_like(&v, &bv);
    nnt_error err = {0};
    CU_ASSERT_EQUAL(ops->attn_mix_backward(bctx, &p, &v, &dout, &dp, &dv, &err), NNT_OK);
    mix_arg a = {B, Hq, Hkv, T, S, Dv, p.data, v.data, 0};
    check("attn_mix dp", fwd_mix, &a, p.data, B * Hq * T * S, g, B * T * Hq * Dv, dp.data, bp);
    a.wrt_v = 1;
    check("attn_mix dv", fwd_mix, &a, v.data, B * Hkv * S * Dv, g, B * T * Hq * Dv, dv.data, bv);
    memcpy(dv.data, bv, (size_t)(B * Hkv * S * Dv) * sizeof(float));
    CU_ASSERT_EQUAL(ops->attn_mix_backward(bctx, &p, &v, &dout, NULL, &dv, &err), NNT_OK);
    check("attn_mix dv alone", fwd_mix, &a, v.data, B * Hkv * S * Dv, g, B * T * Hq * Dv, dv.data, bv);
    CU_ASSERT_EQUAL(ops->attn_mix_backward(bctx, &p, &v, &dout, &dp, NULL, &err), NNT_OK);
    CU_ASSERT_EQUAL(ops->attn_mix_backward(bctx, &p, &v, &v, &dp, &dv, &err), NNT_ERR_SHAPE);
    free(g), free(bp), free(bv);
    nnt_tensor_free(&p), nnt_tensor_free(&v), nnt_tensor_free(&dout), nnt_tensor_free(&dp), nnt_tensor_free(&dv);
}

/* ---- swiglu ---- */

typedef struct swiglu_arg {
    int64_t n;
    double L;
    const float *gate, *up, *act; /* the inputs not varied (gate NULL: act is the input) */
    int wrt;                      /* 0 gate (or act without a gate), 1 up */
    const double *gact;           /* with a gate: the act output's cotangent, or NULL */
} swiglu_arg;

/* y = [out, act] (act only with a gate): out = silu(min(g, L)) clamp(u, -L, L) */
static void fwd_swiglu(const void *arg, const double *x, double *y)
{
    const swiglu_arg *a = arg;
    for (int64_t i = 0; i < a->n; i++) {
        double u = a->wrt == 1 ? x[i] : a->up[i], first = a->wrt == 0 ? x[i] : (a->gate ? a->gate[i] : a->act[i]);
        if (a->L > 0) u = fmin(fmax(u, -a->L), a->L);
        double act = first;
        if (a->gate) {
            double gv = a->L > 0 ? fmin(first, a->L) : first;
            act = gv / (1.0 + exp(-gv));
        }
        y[i] = act * u;
        y[a->n + i] = a->gate ? act : 0.0;
    }
}

/* values kept 0.02 away from the clamps, where the finite differences would straddle a kink */
static void fill_away(nnt_tensor *t, float amp, float L)
{
    int64_t n = nnt_tensor_numel(t);
    for (int64_t i = 0; i < n; i++) {
        float v;
        do v = amp * urand();
        while (L > 0 && (fabsf(v - L) < 0.02f || fabsf(v + L) < 0.02f));
        fl(t)[i] = v;
    }
}

static void test_swiglu(void)
{
    const int64_t M = 3, I = 7, n = M * I;
    for (int li = 0; li < 2; li++)
        for (int mode = 0; mode < 3; mode++) { /* 0 gate, act output with a gradient; 1 gate, no act; 2 no gate */
            float L = li ? 1.2f : 0.0f;
            nnt_tensor gate = mk(2, M, I, 0, 0), up = mk(2, M, I, 0, 0), act = mk(2, M, I, 0, 0);
            nnt_tensor dout = mk(2, M, I, 0, 0), gact = mk(2, M, I, 0, 0);
            fill_away(&gate, 3.0f, L);
            fill_away(&up, 2.0f, L);
            fill_away(&act, 1.5f, 0.0f);
            double *gcat = calloc((size_t)(2 * n), sizeof *gcat), *go = cotangent(&dout), *ga = cotangent(&gact);
            for (int64_t i = 0; i < n; i++) {
                gcat[i] = go[i];
                gcat[n + i] = mode == 0 ? ga[i] : 0.0;
            }
            float *b1, *b2;
            nnt_tensor d1 = grad_like(&gate, &b1), d2 = grad_like(&up, &b2);
            nnt_error err = {0};
            nnt_status st;
            if (mode < 2)
                st = ops->swiglu_backward(bctx, &gate, &up, L, mode == 0 ? &act : NULL, &dout, &d1, &d2,
                                          mode == 0 ? &gact : NULL, &err);
            else
                st = ops->swiglu_backward(bctx, NULL, &up, L, &act, &dout, NULL, &d2, &d1, &err);
            CU_ASSERT_EQUAL(st, NNT_OK);
            swiglu_arg a = {n, L, mode < 2 ? gate.data : NULL, up.data, act.data, 0, NULL};
            char what[80];
            snprintf(what, sizeof what, "swiglu d%s, limit %.1f, mode %d", mode < 2 ? "gate" : "act", L, mode);
            check(what, fwd_swiglu, &a, mode < 2 ? gate.data : act.data, n, gcat, 2 * n, d1.data, b1);
            a.wrt = 1;
            snprintf(what, sizeof what, "swiglu dup, limit %.1f, mode %d", L, mode);
            check(what, fwd_swiglu, &a, up.data, n, gcat, 2 * n, d2.data, b2);
            /* one gradient wanted: the other NULL */
            memcpy(d2.data, b2, (size_t)n * sizeof(float));
            if (mode < 2)
                st = ops->swiglu_backward(bctx, &gate, &up, L, NULL, &dout, NULL, &d2, mode == 0 ? &gact : NULL, &err);
            else
                st = ops->swiglu_backward(bctx, NULL, &up, L, &act, &dout, NULL, &d2, NULL, &err);
            CU_ASSERT_EQUAL(st, NNT_OK);
            check("swiglu dup alone", fwd_swiglu, &a, up.data, n, gcat, 2 * n, d2.data, b2);
            free(gcat), free(go), free(ga), free(b1), free(b2);
            nnt_tensor_free(&gate), nnt_tensor_free(&up), nnt_tensor_free(&act), nnt_tensor_free(&dout);
            nnt_tensor_free(&gact), nnt_tensor_free(&d1), nnt_tensor_free(&d2);
        }
}

/* At exactly the bound the gradient passes (torch's clamp and clamp_max); past it, none. */
static void test_swiglu_bounds(void)
{
    const float L = 1.5f;
    float gv[4] = {L, L, 2.0f, 0.5f}, uv[4] = {L, -L, 0.3f, 2.0f}, ov[4] = {1, 1, 1, 1};
    float dg[4] = {0}, du[4] = {0};
    nnt_tensor g = {.dtype = NNT_F32, .ndim = 1, .shape = {4}, .data = gv}, u = g, o = g, tg = g, tu = g;
    u.data = uv, o.data = ov, tg.data = dg, tu.data = du;
    nnt_error err = {0};
    CU_ASSERT_EQUAL_FATAL(ops->swiglu_backward(bctx, &g, &u, L, NULL, &o, &tg, &tu, NULL, &err), NNT_OK);
    double sL = 1.0 / (1.0 + exp(-(double)L)), dsilu = sL * (1.0 + L * (1.0 - sL)), silu = L * sL;
    CU_ASSERT_DOUBLE_EQUAL(dg[0], L * dsilu, 1e-5);
    CU_ASSERT_DOUBLE_EQUAL(dg[1], -L * dsilu, 1e-5);
    CU_ASSERT_DOUBLE_EQUAL(du[0], silu, 1e-5);
    CU_ASSERT_DOUBLE_EQUAL(du[1], silu, 1e-5);
    CU_ASSERT_EQUAL(dg[2], 0.0f); /* gate past the limit */
    CU_ASSERT(du[2] != 0.0f);
    CU_ASSERT_EQUAL(du[3], 0.0f); /* up past the limit */
    CU_ASSERT(dg[3] != 0.0f);
}

/* ---- route ---- */

typedef struct route_arg {
    int64_t M, E;
    int K;
    const nnt_route_params *p;
    const int32_t *idx;
} route_arg;

/* the routing weights of the fixed choice idx, from the logits x */
static void fwd_route(const void *arg, const double *x, double *y)
{
    const route_arg *a = arg;
    for (int64_t m = 0; m < a->M; m++) {
        const double *l = x + m * a->E;
        double sc[64], mx = -INFINITY, sum = 0.0;
        for (int64_t e = 0; e < a->E; e++) mx = fmax(mx, l[e]);
        for (int64_t e = 0; e < a->E; e++) {
            switch (a->p->score_fn) {
            case NNT_SCORE_SIGMOID: sc[e] = 1.0 / (1.0 + exp(-l[e])); break;
            case NNT_SCORE_SOFTMAX: sum += (sc[e] = exp(l[e] - mx)); break;
            default: sc[e] = sqrt(log1p(exp(l[e]))); break;
            }
        }
        if (a->p->score_fn == NNT_SCORE_SOFTMAX)
            for (int64_t e = 0; e < a->E; e++) sc[e] /= sum;
        double chosen = 0.0;
        for (int k = 0; k < a->K; k++) chosen += sc[a->idx[m * a->K + k]];
        for (int k = 0; k < a->K; k++) {
            double w = sc[a->idx[m * a->K + k]];
            if (a->p->renormalize) w /= chosen + a->p->renorm_eps;
            y[m * a->K + k] = w * a->p->scaling_factor;
        }
    }
}

/* every score function, with and without groups, renormalisation, scaling and a bias; and
 * given indices (hash routing, an expert repeated) */
static void test_route(void)
{
    const int64_t M = 5, E = 8;
    const int K = 3;
    int cases = 0;
    for (int fn = 0; fn < 3; fn++)
        for (int variant = 0; variant < 5; variant++) {
            nnt_route_params p = {.struct_size = sizeof p, .score_fn = (nnt_score_fn)fn, .top_k = K, .n_group = 1,
                                  .scaling_factor = 1.0f};
            if (variant == 1) p.renormalize = 1, p.renorm_eps = 1e-20f;
            if (variant == 2) p.n_group = 4, p.topk_group = 2, p.renormalize = 1, p.scaling_factor = 2.5f;
            if (variant == 3) p.scaling_factor = 2.5f;
            if (variant == 4) p.indices_given = 1, p.renormalize = fn != 1;
            nnt_tensor logits = mk(2, M, E, 0, 0), bias = mk(1, E, 0, 0, 0), w = mk(2, M, K, 0, 0), dw = mk(2, M, K, 0, 0);
            nnt_tensor idx;
            CU_ASSERT_FATAL(nnt_tensor_alloc(&idx, NNT_I32, 2, (int64_t[]){M, K}) == NNT_OK);
            fill(&logits, 2.0f);
            fill(&bias, 0.3f);
            int32_t *id = idx.data;
            if (variant == 4)
                for (int64_t i = 0; i < M * K; i++) id[i] = (int32_t)(next() % E);
            if (variant == 4) id[1] = id[0]; /* a repeated expert */
            nnt_error err = {0};
            CU_ASSERT_EQUAL_FATAL(ops->route(bctx, &logits, variant >= 2 ? &bias : NULL, &p, &idx, &w, &err), NNT_OK);
            double *g = cotangent(&dw);
            float *before;
            nnt_tensor dl = grad_like(&logits, &before);
            CU_ASSERT_EQUAL(ops->route_backward(bctx, &logits, variant >= 2 ? &bias : NULL, &p, &idx, &dw, &dl, &err),
                            NNT_OK);
            route_arg a = {M, E, K, &p, id};
            char what[80];
            snprintf(what, sizeof what, "route, score %d, variant %d", fn, variant);
            check(what, fwd_route, &a, logits.data, M * E, g, M * K, dl.data, before);
            /* the test's forward gives the backend's weights for that choice */
            double *y = malloc((size_t)(M * K) * sizeof *y), *x = malloc((size_t)(M * E) * sizeof *x);
            for (int64_t i = 0; i < M * E; i++) x[i] = fl(&logits)[i];
            fwd_route(&a, x, y);
            for (int64_t i = 0; i < M * K; i++) CU_ASSERT_DOUBLE_EQUAL(fl(&w)[i], y[i], 1e-5);
            CU_ASSERT_EQUAL(ops->route_backward(bctx, &logits, NULL, &p, &idx, &dw, NULL, &err), NNT_OK);
            id[2] = (int32_t)E;
            CU_ASSERT_EQUAL(ops->route_backward(bctx, &logits, NULL, &p, &idx, &dw, &dl, &err), NNT_ERR_INVALID_ARGUMENT);
            free(x), free(y), free(g), free(before);
            nnt_tensor_free(&logits), nnt_tensor_free(&bias), nnt_tensor_free(&w), nnt_tensor_free(&dw);
            nnt_tensor_free(&idx), nnt_tensor_free(&dl);
            cases++;
        }
    CU_ASSERT_EQUAL(cases, 15);
}

/* ---- gather and scatter ---- */

typedef struct rows_arg {
    int64_t M, H;
    int n;
    const int32_t *rows;
    const float *scale, *src, *dst0; /* dst0: dst before the scatter */
    int wrt_scale, overwrite;
} rows_arg;

static void fwd_gather(const void *arg, const double *x, double *y)
{
    const rows_arg *a = arg;
    for (int i = 0; i < a->n; i++)
        for (int64_t h = 0; h < a->H; h++) y[i * a->H + h] = x[a->rows[i] * a->H + h];
}

/* dst[rows[i]] (+)= scale[i] src[i], in order of i; x is src, or scale when wrt_scale */
static void fwd_scatter(const void *arg, const double *x, double *y)
{
    const rows_arg *a = arg;
    for (int64_t i = 0; i < a->M * a->H; i++) y[i] = a->dst0[i];
    for (int i = 0; i < a->n; i++) {
        double f = a->wrt_scale ? x[i] : a->scale[i];
        for (int64_t h = 0; h < a->H; h++) {
            double s = a->wrt_scale ? a->src[i * a->H + h] : x[i * a->H + h];
            double *d = y + a->rows[i] * a->H + h;
            *d = a->overwrite ? f * s : *d + f * s;
        }
    }
}

static void test_rows(void)
{
    const int64_t M = 4, H = 5;
    const int n = 7;
    int32_t rows[7] = {2, 0, 3, 2, 1, 2, 0}; /* rows repeat */
    float scale[7];
    for (int i = 0; i < n; i++) scale[i] = urand();
    nnt_error err = {0};
    { /* gather: src [M, H] -> dst [n, H] */
        nnt_tensor src = mk(2, M, H, 0, 0), ddst = mk(2, n, H, 0, 0);
        fill(&src, 1.0f);
        double *g = cotangent(&ddst);
        float *before;
        nnt_tensor dsrc = grad_like(&src, &before);
        CU_ASSERT_EQUAL(ops->gather_rows_backward(bctx, &ddst, rows, n, &dsrc, &err), NNT_OK);
        rows_arg a = {M, H, n, rows, NULL, NULL, NULL, 0, 0};
        check("gather_rows", fwd_gather, &a, src.data, M * H, g, n * H, dsrc.data, before);
        int32_t badrows[7] = {0, 1, 2, 3, 4, 0, 0};
        CU_ASSERT_EQUAL(ops->gather_rows_backward(bctx, &ddst, badrows, n, &dsrc, &err), NNT_ERR_INVALID_ARGUMENT);
        free(g), free(before), nnt_tensor_free(&src), nnt_tensor_free(&ddst), nnt_tensor_free(&dsrc);
    }
    for (int overwrite = 0; overwrite < 2; overwrite++) { /* scatter_add_rows, scatter_rows */
        nnt_tensor src = mk(2, n, H, 0, 0), dst0 = mk(2, M, H, 0, 0), ddst = mk(2, M, H, 0, 0);
        nnt_tensor sc = mk(1, n, 0, 0, 0);
        memcpy(sc.data, scale, sizeof scale);
        fill(&src, 1.0f);
        fill(&dst0, 1.0f);
        double *g = cotangent(&ddst);
        float *bs, *bsc;
        nnt_tensor dsrc = grad_like(&src, &bs), dscale = grad_like(&sc, &bsc);
        nnt_status st = overwrite ? ops->scatter_rows_backward(bctx, &src, rows, scale, n, &ddst, &dsrc, &dscale, &err)
                                  : ops->scatter_add_rows_backward(bctx, &src, rows, scale, n, &ddst, &dsrc, &dscale, &err);
        CU_ASSERT_EQUAL(st, NNT_OK);
        rows_arg a = {M, H, n, rows, scale, src.data, dst0.data, 0, overwrite};
        check(overwrite ? "scatter_rows dsrc" : "scatter_add_rows dsrc", fwd_scatter, &a, src.data, n * H, g, M * H,
              dsrc.data, bs);
        a.wrt_scale = 1;
        check(overwrite ? "scatter_rows dscale" : "scatter_add_rows dscale", fwd_scatter, &a, scale, n, g, M * H,
              dscale.data, bsc);
        /* no scale (1.0), dscale not wanted */
        memcpy(dsrc.data, bs, (size_t)(n * H) * sizeof(float));
        st = overwrite ? ops->scatter_rows_backward(bctx, &src, rows, NULL, n, &ddst, &dsrc, NULL, &err)
                       : ops->scatter_add_rows_backward(bctx, &src, rows, NULL, n, &ddst, &dsrc, NULL, &err);
        CU_ASSERT_EQUAL(st, NNT_OK);
        float ones[7] = {1, 1, 1, 1, 1, 1, 1};
        a.scale = ones;
        a.wrt_scale = 0;
        check("scatter without scale", fwd_scatter, &a, src.data, n * H, g, M * H, dsrc.data, bs);
        free(g), free(bs), free(bsc);
        nnt_tensor_free(&src), nnt_tensor_free(&dst0), nnt_tensor_free(&ddst), nnt_tensor_free(&sc);
        nnt_tensor_free(&dsrc), nnt_tensor_free(&dscale);
    }
}

/* ---- rows scaled by entries of a tensor ---- */

typedef struct srows_arg {
    int n;
    int64_t H;
    const int32_t *idx;
    const float *x, *w;
    int wrt_w;
} srows_arg;

/* y[i] = x[i] w[idx[i]]; the variable is x, or w (read flat) when wrt_w */
static void fwd_scale_rows(const void *arg, const double *v, double *y)
{
    const srows_arg *a = arg;
    for (int i = 0; i < a->n; i++) {
        double f = a->wrt_w ? v[a->idx[i]] : a->w[a->idx[i]];
        for (int64_t h = 0; h < a->H; h++) {
            double xv = a->wrt_w ? a->x[i * a->H + h] : v[i * a->H + h];
            y[i * a->H + h] = f * xv;
        }
    }
}

static void test_scale_rows(void)
{
    const int n = 7;
    const int64_t H = 5, W = 6;
    const int32_t idx[7] = {4, 0, 4, 5, 2, 4, 0}; /* repeats; w[1] and w[3] are not read */
    nnt_error err = {0};
    nnt_tensor x = mk(2, n, H, 0, 0), w = mk(2, 3, 2, 0, 0), dy = mk(2, n, H, 0, 0), xi = mk(2, n, H, 0, 0);
    fill(&x, 1.0f);
    fill(&w, 1.0f);
    memcpy(xi.data, x.data, (size_t)(n * H) * sizeof(float));
    /* an in-place forward overwrites its input: the backward is handed the input as it was */
    CU_ASSERT_EQUAL(ops->scale_rows(bctx, &xi, &w, idx, n, &xi, &err), NNT_OK);
    CU_ASSERT_EQUAL(fl(&xi)[3 * H + 2], fl(&x)[3 * H + 2] * fl(&w)[5]);
    double *g = cotangent(&dy);
    float *bx, *bw;
    nnt_tensor dx = grad_like(&x, &bx), dw = grad_like(&w, &bw);
    CU_ASSERT_EQUAL(ops->scale_rows_backward(bctx, &x, &w, idx, n, &dy, &dx, &dw, &err), NNT_OK);
    srows_arg a = {n, H, idx, x.data, w.data, 0};
    check("scale_rows dx", fwd_scale_rows, &a, x.data, n * H, g, n * H, dx.data, bx);
    a.wrt_w = 1;
    check("scale_rows dw", fwd_scale_rows, &a, w.data, W, g, n * H, dw.data, bw);
    CU_ASSERT(fl(&dw)[1] == bw[1] && fl(&dw)[3] == bw[3]); /* entries no row read keep their gradient */
    /* one gradient wanted at a time: the other is NULL */
    memcpy(dx.data, bx, (size_t)(n * H) * sizeof(float));
    memcpy(dw.data, bw, (size_t)W * sizeof(float));
    CU_ASSERT_EQUAL(ops->scale_rows_backward(bctx, &x, &w, idx, n, &dy, NULL, &dw, &err), NNT_OK);
    check("scale_rows dw alone", fwd_scale_rows, &a, w.data, W, g, n * H, dw.data, bw);
    CU_ASSERT_EQUAL(ops->scale_rows_backward(bctx, NULL, &w, idx, n, &dy, &dx, NULL, &err), NNT_OK); /* x unread */
    a.wrt_w = 0;
    check("scale_rows dx alone", fwd_scale_rows, &a, x.data, n * H, g, n * H, dx.data, bx);
    /* refusals: an index outside w's 6 entries; gradients not shaped as their tensors */
    const int32_t bad[7] = {4, 0, 4, 6, 2, 4, 0};
    CU_ASSERT_EQUAL(ops->scale_rows_backward(bctx, &x, &w, bad, n, &dy, &dx, &dw, &err), NNT_ERR_INVALID_ARGUMENT);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "idx[3] = 6"));
    nnt_tensor short_dw = dw, short_dx = dx;
    short_dw.shape[0] = 2, short_dx.shape[0] = n - 1;
    CU_ASSERT_EQUAL(ops->scale_rows_backward(bctx, &x, &w, idx, n, &dy, &dx, &short_dw, &err), NNT_ERR_SHAPE);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "dw"));
    CU_ASSERT_EQUAL(ops->scale_rows_backward(bctx, &x, &w, idx, n, &dy, &short_dx, NULL, &err), NNT_ERR_SHAPE);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "dx"));
    free(g), free(bx), free(bw);
    nnt_tensor *ts[] = {&x, &w, &dy, &xi, &dx, &dw};
    for (size_t i = 0; i < sizeof ts / sizeof *ts; i++) nnt_tensor_free(ts[i]);
}

/* ---- hyper-connections and compressors (DeepSeek-V4) ---- */

typedef struct hc_arg {
    int64_t M, n, H;
    const float *fn, *base, *scale;
    double rms_eps, hc_eps;
    int iters, head; /* head: hyper_head (only the collapse, fn [n, n H]) */
} hc_arg;

/* y = [post [M, n], comb [M, n, n], collapsed [M, H]] of hyper_connection from x (head: only
 * collapsed), from the formula in nnt_backend.h */
static void fwd_hc(const void *arg, const double *x, double *y)
{
    const hc_arg *a = arg;
    int64_t n = a->n, H = a->H, nH = n * H, outs = a->head ? n : (2 + n) * n;
    double *post = y, *comb = y + a->M * n, *coll = a->head ? y : comb + a->M * n * n;
    for (int64_t m = 0; m < a->M; m++) {
        const double *xm = x + m * nH;
        double ss = 0.0, mx[16 * 18], C[256];
        for (int64_t i = 0; i < nH; i++) ss += xm[i] * xm[i];
        double r = 1.0 / sqrt(ss / (double)nH + a->rms_eps);
        for (int64_t o = 0; o < outs; o++) {
            mx[o] = 0.0;
            for (int64_t i = 0; i < nH; i++) mx[o] += a->fn[o * nH + i] * xm[i] * r;
        }
        for (int64_t h = 0; h < H; h++) {
            double acc = 0.0;
            for (int64_t j = 0; j < n; j++)
                acc += (1.0 / (1.0 + exp(-(mx[j] * a->scale[0] + a->base[j]))) + a->hc_eps) * xm[j * H + h];
            coll[m * H + h] = acc;
        }
        if (a->head) continue;
        for (int64_t j = 0; j < n; j++) post[m * n + j] = 2.0 / (1.0 + exp(-(mx[n + j] * a->scale[1] + a->base[n + j])));
        for (int64_t j = 0; j < n; j++) {
            double sum = 0.0;
            for (int64_t k = 0; k < n; k++) sum += (C[j * n + k] = exp(mx[2 * n + j * n + k] * a->scale[2] + a->base[2 * n + j * n + k]));
            for (int64_t k = 0; k < n; k++) C[j * n + k] = C[j * n + k] / sum + a->hc_eps;
        }
        for (int it = 0; it < a->iters; it++) {
            for (int64_t j = 0; it > 0 && j < n; j++) {
                double s = 0.0;
                for (int64_t k = 0; k < n; k++) s += C[j * n + k];
                for (int64_t k = 0; k < n; k++) C[j * n + k] /= s + a->hc_eps;
            }
            for (int64_t k = 0; k < n; k++) {
                double s = 0.0;
                for (int64_t j = 0; j < n; j++) s += C[j * n + k];
                for (int64_t j = 0; j < n; j++) C[j * n + k] /= s + a->hc_eps;
            }
        }
        for (int64_t i = 0; i < n * n; i++) comb[m * n * n + i] = C[i];
    }
}

/* hyper_connection's backward with every output gradient, with each alone, with none; and
 * hyper_head's; the weights of both, and the forward's outputs against the formula */
static void test_hyper_connection(void)
{
    const int64_t M = 3, n = 3, H = 5;
    const int iter_cases[3] = {0, 1, 4};
    nnt_error err = {0};
    for (int ic = 0; ic < 3; ic++)
        for (int which = 0; which < 5; which++) { /* 0: all three; 1..3: post, comb, collapsed alone; 4: none */
            int64_t outs = (2 + n) * n;
            nnt_tensor x = mk(3, M, n, H, 0), fn = mk(2, outs, n * H, 0, 0), base = mk(1, outs, 0, 0, 0),
                       scale = mk(1, 3, 0, 0, 0), post = mk(2, M, n, 0, 0), comb = mk(3, M, n, n, 0),
                       coll = mk(2, M, H, 0, 0);
            fill(&x, 1.0f);
            fill(&fn, 0.6f);
            fill(&base, 0.5f);
            fl(&scale)[0] = 0.7f, fl(&scale)[1] = 1.3f, fl(&scale)[2] = 0.9f;
            const float hc_eps = 0.01f, rms_eps = 1e-6f;
            int iters = iter_cases[ic];
            CU_ASSERT_EQUAL_FATAL(ops->hyper_connection(bctx, &x, &fn, &base, &scale, rms_eps, hc_eps, iters, &post, &comb,
                                                        &coll, &err), NNT_OK);
            nnt_tensor dpost = mk(2, M, n, 0, 0), dcomb = mk(3, M, n, n, 0), dcoll = mk(2, M, H, 0, 0);
            double *gp = cotangent(&dpost), *gc = cotangent(&dcomb), *gl = cotangent(&dcoll);
            int64_t ny = M * n + M * n * n + M * H;
            double *g = calloc((size_t)ny, sizeof *g);
            CU_ASSERT_FATAL(g != NULL);
            int use[3] = {which == 0 || which == 1, which == 0 || which == 2, which == 0 || which == 3};
            for (int64_t i = 0; i < M * n && use[0]; i++) g[i] = gp[i];
            for (int64_t i = 0; i < M * n * n && use[1]; i++) g[M * n + i] = gc[i];
            for (int64_t i = 0; i < M * H && use[2]; i++) g[M * n + M * n * n + i] = gl[i];
            float *before;
            nnt_tensor dx = grad_like(&x, &before);
            CU_ASSERT_EQUAL(ops->hyper_connection_backward(bctx, &x, &fn, &base, &scale, rms_eps, hc_eps, iters,
                                                           use[0] ? &dpost : NULL, use[1] ? &dcomb : NULL,
                                                           use[2] ? &dcoll : NULL, &dx, &err), NNT_OK);
            hc_arg a = {M, n, H, fn.data, base.data, scale.data, rms_eps, hc_eps, iters, 0};
            char what[96];
            snprintf(what, sizeof what, "hyper_connection, %d iterations, outputs %d", iters, which);
            check(what, fwd_hc, &a, x.data, M * n * H, g, ny, dx.data, before);
            if (which == 0) { /* the formula gives the backend's outputs */
                double *xd = malloc((size_t)(M * n * H) * sizeof *xd), *y = malloc((size_t)ny * sizeof *y);
                CU_ASSERT_FATAL(xd && y);
                for (int64_t i = 0; i < M * n * H; i++) xd[i] = fl(&x)[i];
                fwd_hc(&a, xd, y);
                for (int64_t i = 0; i < M * n; i++) CU_ASSERT_DOUBLE_EQUAL(fl(&post)[i], y[i], 1e-5);
                for (int64_t i = 0; i < M * n * n; i++) CU_ASSERT_DOUBLE_EQUAL(fl(&comb)[i], y[M * n + i], 1e-5);
                for (int64_t i = 0; i < M * H; i++) CU_ASSERT_DOUBLE_EQUAL(fl(&coll)[i], y[M * n + M * n * n + i], 1e-5);
                free(xd), free(y);
                /* shapes refused */
                nnt_tensor bad = mk(2, M, n + 1, 0, 0);
                CU_ASSERT_EQUAL(ops->hyper_connection_backward(bctx, &x, &fn, &base, &scale, rms_eps, hc_eps, iters, &bad,
                                                               NULL, NULL, &dx, &err), NNT_ERR_SHAPE);
                nnt_tensor_free(&bad);
            }
            free(g), free(gp), free(gc), free(gl), free(before);
            nnt_tensor_free(&x), nnt_tensor_free(&fn), nnt_tensor_free(&base), nnt_tensor_free(&scale);
            nnt_tensor_free(&post), nnt_tensor_free(&comb), nnt_tensor_free(&coll), nnt_tensor_free(&dx);
            nnt_tensor_free(&dpost), nnt_tensor_free(&dcomb), nnt_tensor_free(&dcoll);
        }
    { /* hyper_head: fn [n, n H], base [n], one scale */
        const int64_t Mh = 5, nh = 4, Hh = 7;
        nnt_tensor x = mk(3, Mh, nh, Hh, 0), fn = mk(2, nh, nh * Hh, 0, 0), base = mk(1, nh, 0, 0, 0),
                   scale = mk(1, 1, 0, 0, 0), y = mk(2, Mh, Hh, 0, 0), dy = mk(2, Mh, Hh, 0, 0);
        fill(&x, 1.0f);
        fill(&fn, 0.6f);
        fill(&base, 0.5f);
        fl(&scale)[0] = 1.1f;
        CU_ASSERT_EQUAL_FATAL(ops->hyper_head(bctx, &x, &fn, &base, &scale, 1e-6f, 1e-6f, &y, &err), NNT_OK);
        double *g = cotangent(&dy);
        float *before;
        nnt_tensor dx = grad_like(&x, &before);
        CU_ASSERT_EQUAL(ops->hyper_head_backward(bctx, &x, &fn, &base, &scale, 1e-6f, 1e-6f, &dy, &dx, &err), NNT_OK);
        hc_arg a = {Mh, nh, Hh, fn.data, base.data, scale.data, 1e-6, 1e-6, 0, 1};
        check("hyper_head", fwd_hc, &a, x.data, Mh * nh * Hh, g, Mh * Hh, dx.data, before);
        CU_ASSERT_EQUAL(ops->hyper_head_backward(bctx, &x, &fn, &base, &scale, 1e-6f, 1e-6f, &dy, NULL, &err), NNT_OK);
        nnt_tensor bad = mk(2, Mh, Hh + 1, 0, 0);
        CU_ASSERT_EQUAL(ops->hyper_head_backward(bctx, &x, &fn, &base, &scale, 1e-6f, 1e-6f, &bad, &dx, &err), NNT_ERR_SHAPE);
        free(g), free(before);
        nnt_tensor_free(&x), nnt_tensor_free(&fn), nnt_tensor_free(&base), nnt_tensor_free(&scale);
        nnt_tensor_free(&y), nnt_tensor_free(&dy), nnt_tensor_free(&dx), nnt_tensor_free(&bad);
    }
}

typedef struct hmix_arg {
    int64_t M, n, H;
    const float *t[4]; /* x, a, post, comb */
    int which;         /* the argument x stands for */
} hmix_arg;

static void fwd_hmix(const void *arg, const double *v, double *y)
{
    const hmix_arg *a = arg;
    int64_t n = a->n, H = a->H;
#define HM_IN(k, i) (a->which == (k) ? v[i] : (double)a->t[k][i])
    for (int64_t m = 0; m < a->M; m++)
        for (int64_t k = 0; k < n; k++)
            for (int64_t h = 0; h < H; h++) {
                double o = HM_IN(2, m * n + k) * HM_IN(1, m * H + h);
                for (int64_t j = 0; j < n; j++) o += HM_IN(3, (m * n + j) * n + k) * HM_IN(0, (m * n + j) * H + h);
                y[(m * n + k) * H + h] = o;
            }
#undef HM_IN
}

static void test_hyper_mix(void)
{
    const int64_t M = 3, n = 4, H = 5;
    nnt_error err = {0};
    nnt_tensor in[4] = {mk(3, M, n, H, 0), mk(2, M, H, 0, 0), mk(2, M, n, 0, 0), mk(3, M, n, n, 0)};
    for (int k = 0; k < 4; k++) fill(&in[k], 1.0f);
    nnt_tensor out = mk(3, M, n, H, 0), dout = mk(3, M, n, H, 0);
    CU_ASSERT_EQUAL(ops->hyper_mix(bctx, &in[0], &in[1], &in[2], &in[3], &out, &err), NNT_OK);
    double *g = cotangent(&dout);
    float *before[4];
    nnt_tensor d[4];
    for (int k = 0; k < 4; k++) d[k] = grad_like(&in[k], &before[k]);
    CU_ASSERT_EQUAL(ops->hyper_mix_backward(bctx, &in[0], &in[1], &in[2], &in[3], &dout, &d[0], &d[1], &d[2], &d[3], &err),
                    NNT_OK);
    static const char *const names[4] = {"hyper_mix dx", "hyper_mix da", "hyper_mix dpost", "hyper_mix dcomb"};
    hmix_arg a = {M, n, H, {in[0].data, in[1].data, in[2].data, in[3].data}, 0};
    for (int k = 0; k < 4; k++) {
        a.which = k;
        check(names[k], fwd_hmix, &a, in[k].data, nnt_tensor_numel(&in[k]), g, M * n * H, d[k].data, before[k]);
    }
    /* the forward agrees with the formula; gradients not wanted; shapes refused */
    double *xd = malloc((size_t)(M * n * H) * sizeof *xd), *y = malloc((size_t)(M * n * H) * sizeof *y);
    for (int64_t i = 0; i < M * n * H; i++) xd[i] = fl(&in[0])[i];
    a.which = 0;
    fwd_hmix(&a, xd, y);
    for (int64_t i = 0; i < M * n * H; i++) CU_ASSERT_DOUBLE_EQUAL(fl(&out)[i], y[i], 1e-5);
    CU_ASSERT_EQUAL(ops->hyper_mix_backward(bctx, &in[0], &in[1], &in[2], &in[3], &dout, NULL, NULL, NULL, NULL, &err), NNT_OK);
    CU_ASSERT_EQUAL(ops->hyper_mix_backward(bctx, &in[0], &in[1], &in[3], &in[3], &dout, &d[0], NULL, NULL, NULL, &err),
                    NNT_ERR_SHAPE);
    free(xd), free(y), free(g);
    for (int k = 0; k < 4; k++) free(before[k]), nnt_tensor_free(&in[k]), nnt_tensor_free(&d[k]);
    nnt_tensor_free(&out), nnt_tensor_free(&dout);
}

typedef struct comp_arg {
    int64_t B, T, cD, C;
    int rate, overlap, wrt_gate;
    const int32_t *first, *count;
    const float *kv, *gate, *ape;
} comp_arg;

/* out [B, C, D] of compress from kv (or gate, when wrt_gate), from the formula in nnt_backend.h */
static void fwd_compress(const void *arg, const double *v, double *y)
{
    const comp_arg *a = arg;
    int64_t D = a->overlap ? a->cD / 2 : a->cD, T = a->T, cD = a->cD;
    for (int64_t i = 0; i < a->B * a->C * D; i++) y[i] = 0.0;
    for (int64_t b = 0; b < a->B; b++)
        for (int64_t w = 0; w < a->count[b]; w++)
            for (int64_t ch = 0; ch < D; ch++) {
                double num = 0.0, den = 0.0;
                for (int part = a->overlap && w > 0 ? 0 : 1; part < 2; part++)
                    for (int i = 0; i < a->rate; i++) {
                        int64_t t = a->first[b] + (w - 1 + part) * a->rate + i, c = part && a->overlap ? D + ch : ch;
                        int64_t at = (b * T + t) * cD + c;
                        double gz = a->wrt_gate ? v[at] : a->gate[at], kz = a->wrt_gate ? a->kv[at] : v[at];
                        double e = exp(gz + a->ape[i * cD + c]);
                        num += e * kz;
                        den += e;
                    }
                y[(b * a->C + w) * D + ch] = num / den;
            }
}

static void test_compress(void)
{
    const int64_t B = 2, T = 11, D = 5, C = 4;
    const int rate = 3;
    int32_t first[2] = {0, 2}, count[2] = {3, 2};
    nnt_error err = {0};
    for (int overlap = 0; overlap < 2; overlap++) {
        int64_t cD = overlap ? 2 * D : D;
        nnt_tensor kv = mk(3, B, T, cD, 0), gate = mk(3, B, T, cD, 0), ape = mk(2, rate, cD, 0, 0), out = mk(3, B, C, D, 0),
                   dout = mk(3, B, C, D, 0);
        fill(&kv, 1.0f);
        fill(&gate, 1.5f);
        fill(&ape, 0.5f);
        CU_ASSERT_EQUAL_FATAL(ops->compress(bctx, &kv, &gate, &ape, rate, overlap, first, count, &out, &err), NNT_OK);
        double *g = cotangent(&dout);
        float *bk, *bg;
        nnt_tensor dkv = grad_like(&kv, &bk), dgate = grad_like(&gate, &bg);
        CU_ASSERT_EQUAL(ops->compress_backward(bctx, &kv, &gate, &ape, rate, overlap, first, count, &dout, &dkv, &dgate, &err),
                        NNT_OK);
        comp_arg a = {B, T, cD, C, rate, overlap, 0, first, count, kv.data, gate.data, ape.data};
        check(overlap ? "compress dkv, overlap" : "compress dkv", fwd_compress, &a, kv.data, B * T * cD, g, B * C * D,
              dkv.data, bk);
        a.wrt_gate = 1;
        check(overlap ? "compress dgate, overlap" : "compress dgate", fwd_compress, &a, gate.data, B * T * cD, g, B * C * D,
              dgate.data, bg);
        /* the forward agrees with the formula; gradients not wanted; entries that do not fit */
        double *xd = malloc((size_t)(B * T * cD) * sizeof *xd), *y = malloc((size_t)(B * C * D) * sizeof *y);
        for (int64_t i = 0; i < B * T * cD; i++) xd[i] = fl(&gate)[i];
        fwd_compress(&a, xd, y);
        for (int64_t i = 0; i < B * C * D; i++) CU_ASSERT_DOUBLE_EQUAL(fl(&out)[i], y[i], 1e-5);
        CU_ASSERT_EQUAL(ops->compress_backward(bctx, &kv, &gate, &ape, rate, overlap, first, count, &dout, NULL, NULL, &err),
                        NNT_OK);
        int32_t too_many[2] = {4, 2};
        CU_ASSERT_EQUAL(ops->compress_backward(bctx, &kv, &gate, &ape, rate, overlap, first, too_many, &dout, &dkv, NULL, &err),
                        NNT_ERR_INVALID_ARGUMENT);
        free(xd), free(y), free(g), free(bk), free(bg);
        nnt_tensor_free(&kv), nnt_tensor_free(&gate), nnt_tensor_free(&ape), nnt_tensor_free(&out);
        nnt_tensor_free(&dout), nnt_tensor_free(&dkv), nnt_tensor_free(&dgate);
    }
}

/* ---- the recurrent mixers (Kimi Delta Attention) ---- */

typedef struct conv_arg {
    int64_t B, T, C, W;
    int act, wrt_state;
    const float *x, *w, *si;
} conv_arg;

/* y [B, T, C] then state_out [B, W - 1, C] of conv1d_causal from x (or state_in, when wrt_state) */
static void fwd_conv(const void *arg, const double *v, double *y)
{
    const conv_arg *a = arg;
    int64_t B = a->B, T = a->T, C = a->C, W = a->W, Ws = W - 1;
#define CONV_IN(b, src, c)                                                                                            \
    ((src) >= 0 ? (a->wrt_state ? a->x[((b) * T + (src)) * C + (c)] : v[((b) * T + (src)) * C + (c)])               \
                : (a->wrt_state ? v[((b) * Ws + Ws + (src)) * C + (c)] : (double)a->si[((b) * Ws + Ws + (src)) * C + (c)]))
    for (int64_t b = 0; b < B; b++)
        for (int64_t t = 0; t < T; t++)
            for (int64_t c = 0; c < C; c++) {
                double z = 0.0;
                for (int64_t j = 0; j < W; j++) z += a->w[c * W + j] * CONV_IN(b, t - Ws + j, c);
                y[(b * T + t) * C + c] = a->act ? z / (1.0 + exp(-z)) : z;
            }
    for (int64_t b = 0; b < B; b++)
        for (int64_t j = 0; j < Ws; j++)
            for (int64_t c = 0; c < C; c++) y[B * T * C + (b * Ws + j) * C + c] = CONV_IN(b, T - Ws + j, c);
#undef CONV_IN
}

/* conv1d_causal's dx and dstate_in under cotangents on y and state_out, with and without SiLU;
 * without a state (zeros before t = 0) nothing goes to dstate_in. */
static void test_conv1d_causal(void)
{
    const int64_t B = 2, T = 7, C = 5, W = 4, Ws = W - 1, ny = B * T * C + B * Ws * C;
    nnt_error err = {0};
    for (int act = 0; act < 2; act++) {
        nnt_tensor x = mk(3, B, T, C, 0), w = mk(2, C, W, 0, 0), si = mk(3, B, Ws, C, 0), y = mk(3, B, T, C, 0),
                   so = mk(3, B, Ws, C, 0), dy = mk(3, B, T, C, 0), dso = mk(3, B, Ws, C, 0);
        fill(&x, 1.5f), fill(&w, 1.0f), fill(&si, 1.0f);
        CU_ASSERT_EQUAL_FATAL(ops->conv1d_causal(bctx, &x, &w, &si, act, &y, &so, &err), NNT_OK);
        double *g1 = cotangent(&dy), *g2 = cotangent(&dso), *g = malloc((size_t)ny * sizeof *g);
        memcpy(g, g1, (size_t)(B * T * C) * sizeof *g);
        memcpy(g + B * T * C, g2, (size_t)(B * Ws * C) * sizeof *g);
        float *bx, *bs;
        nnt_tensor dx = grad_like(&x, &bx), dsi = grad_like(&si, &bs);
        CU_ASSERT_EQUAL(ops->conv1d_causal_backward(bctx, &x, &w, &si, act, &dy, &dso, &dx, &dsi, &err), NNT_OK);
        conv_arg a = {B, T, C, W, act, 0, x.data, w.data, si.data};
        check(act ? "conv1d_causal dx, SiLU" : "conv1d_causal dx", fwd_conv, &a, x.data, B * T * C, g, ny, dx.data, bx);
        a.wrt_state = 1;
        check(act ? "conv1d_causal dstate_in, SiLU" : "conv1d_causal dstate_in", fwd_conv, &a, si.data, B * Ws * C, g, ny,
              dsi.data, bs);
        /* the forward agrees with the formula */
        double *xd = malloc((size_t)(B * Ws * C) * sizeof *xd), *yy = malloc((size_t)ny * sizeof *yy);
        for (int64_t i = 0; i < B * Ws * C; i++) xd[i] = fl(&si)[i];
        fwd_conv(&a, xd, yy);
        for (int64_t i = 0; i < B * T * C; i++) CU_ASSERT_DOUBLE_EQUAL(fl(&y)[i], yy[i], 1e-5);
        for (int64_t i = 0; i < B * Ws * C; i++) CU_ASSERT_DOUBLE_EQUAL(fl(&so)[i], yy[B * T * C + i], 1e-6);
        /* without a state: zeros before t = 0, and no state gradient; shapes refused */
        a.wrt_state = 0;
        float *si0 = calloc((size_t)(B * Ws * C), sizeof *si0);
        a.si = si0;
        memcpy(dx.data, bx, nnt_tensor_nbytes(&dx));
        memcpy(dsi.data, bs, nnt_tensor_nbytes(&dsi));
        CU_ASSERT_EQUAL(ops->conv1d_causal_backward(bctx, &x, &w, NULL, act, &dy, NULL, &dx, &dsi, &err), NNT_OK);
        for (int64_t i = B * T * C; i < ny; i++) g[i] = 0.0; /* no cotangent on state_out */
        check("conv1d_causal dx, no state", fwd_conv, &a, x.data, B * T * C, g, ny, dx.data, bx);
        CU_ASSERT_EQUAL(memcmp(dsi.data, bs, nnt_tensor_nbytes(&dsi)), 0);
        CU_ASSERT_EQUAL(ops->conv1d_causal_backward(bctx, &x, &w, &si, act, &dso, NULL, &dx, NULL, &err), NNT_ERR_SHAPE);
        free(si0), free(xd), free(yy), free(g), free(g1), free(g2), free(bx), free(bs);
        nnt_tensor_free(&x), nnt_tensor_free(&w), nnt_tensor_free(&si), nnt_tensor_free(&y), nnt_tensor_free(&so);
        nnt_tensor_free(&dy), nnt_tensor_free(&dso), nnt_tensor_free(&dx), nnt_tensor_free(&dsi);
    }
}

typedef struct gate_arg {
    int64_t M, P, K;
    const float *dt_bias, *a_log;
} gate_arg;

static void fwd_kda_gate(const void *arg, const double *v, double *y)
{
    const gate_arg *a = arg;
    for (int64_t m = 0; m < a->M; m++)
        for (int64_t p = 0; p < a->P; p++) {
            double x = v[m * a->P + p] + a->dt_bias[p];
            y[m * a->P + p] = -exp((double)a->a_log[p / a->K]) * (x > 20.0 ? x : log1p(exp(x)));
        }
}

static void fwd_sigmoid(const void *arg, const double *v, double *y)
{
    const sq_arg *a = arg;
    for (int64_t i = 0; i < a->n; i++) y[i] = 1.0 / (1.0 + exp(-v[i]));
}

/* kda_gate on both sides of softplus' threshold; sigmoid from its output, in place */
static void test_kda_gate_sigmoid(void)
{
    const int64_t M = 7, H = 3, K = 5, P = H * K;
    nnt_error err = {0};
    nnt_tensor a = mk(2, M, P, 0, 0), dtb = mk(1, P, 0, 0, 0), alog = mk(1, H, 0, 0, 0), g = mk(2, M, P, 0, 0),
               dg = mk(2, M, P, 0, 0);
    fill(&a, 3.0f), fill(&dtb, 1.0f), fill(&alog, 1.0f);
    fl(&dtb)[4] = 25.0f, fl(&dtb)[11] = 24.0f; /* past 20: softplus is x there */
    CU_ASSERT_EQUAL_FATAL(ops->kda_gate(bctx, &a, &dtb, &alog, &g, &err), NNT_OK);
    double *cg = cotangent(&dg);
    float *ba;
    nnt_tensor da = grad_like(&a, &ba);
    CU_ASSERT_EQUAL(ops->kda_gate_backward(bctx, &a, &dtb, &alog, &dg, &da, &err), NNT_OK);
    gate_arg ga = {M, P, K, dtb.data, alog.data};
    check("kda_gate da", fwd_kda_gate, &ga, a.data, M * P, cg, M * P, da.data, ba);
    CU_ASSERT_EQUAL(ops->kda_gate_backward(bctx, &a, &dtb, &alog, &dg, NULL, &err), NNT_OK);
    CU_ASSERT_EQUAL(ops->kda_gate_backward(bctx, &a, &dtb, &alog, &dtb, &da, &err), NNT_ERR_SHAPE);
    /* sigmoid, in place: the backward reads the output */
    nnt_tensor x = mk(2, M, P, 0, 0), y = mk(2, M, P, 0, 0), dy = mk(2, M, P, 0, 0);
    fill(&x, 4.0f);
    float *x0 = malloc((size_t)(M * P) * sizeof *x0), *bx;
    memcpy(x0, x.data, (size_t)(M * P) * sizeof *x0);
    CU_ASSERT_EQUAL_FATAL(ops->sigmoid(bctx, &x, &x, &err), NNT_OK);
    double *cy = cotangent(&dy);
    nnt_tensor dx = grad_like(&x, &bx);
    CU_ASSERT_EQUAL(ops->sigmoid_backward(bctx, &x, &dy, &dx, &err), NNT_OK);
    sq_arg sa = {M * P};
    check("sigmoid dx", fwd_sigmoid, &sa, x0, M * P, cy, M * P, dx.data, bx);
    CU_ASSERT_EQUAL(ops->sigmoid_backward(bctx, &x, &dtb, &dx, &err), NNT_ERR_SHAPE);
    free(cg), free(cy), free(ba), free(bx), free(x0);
    nnt_tensor_free(&a), nnt_tensor_free(&dtb), nnt_tensor_free(&alog), nnt_tensor_free(&g), nnt_tensor_free(&dg);
    nnt_tensor_free(&da), nnt_tensor_free(&x), nnt_tensor_free(&y), nnt_tensor_free(&dy), nnt_tensor_free(&dx);
}

typedef struct dr_arg {
    int64_t B, T, H, K, V;
    int which; /* 0..5: q, k, v, g, beta, state_in; 6: a perturbation of every token's state */
    int l2norm;
    double scale;
    const float *t[6];
    const uint8_t *valid;
} dr_arg;

/* o [B, T, H, V], state_out [B, H, K, V], states [B, T, H, K, V] of the gated delta rule, from
 * the formula in nnt_backend.h, in double; which = 6 adds v[(b, t, h)] to S_t after its update. */
static void fwd_delta(const void *arg, const double *v, double *y)
{
    const dr_arg *a = arg;
    int64_t B = a->B, T = a->T, H = a->H, K = a->K, V = a->V, KV = K * V;
    double *o = y, *so = y + B * T * H * V, *ss = so + B * H * KV, S[64], kn[8], qn[8], u[8];
#define DR_IN(k, i) (a->which == (k) ? v[i] : (double)a->t[k][i])
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < H; h++) {
            for (int64_t i = 0; i < KV; i++) S[i] = a->t[5] || a->which == 5 ? DR_IN(5, (b * H + h) * KV + i) : 0.0;
            for (int64_t t = 0; t < T; t++) {
                int64_t base = (b * T + t) * H + h;
                int valid = !a->valid || a->valid[b * T + t];
                if (valid) {
                    double nq = 0.0, nk = 0.0;
                    for (int64_t i = 0; i < K; i++) {
                        qn[i] = DR_IN(0, base * K + i), kn[i] = DR_IN(1, base * K + i);
                        nq += qn[i] * qn[i], nk += kn[i] * kn[i];
                    }
                    double rq = a->l2norm ? 1.0 / sqrt(nq + 1e-6) : 1.0, rk = a->l2norm ? 1.0 / sqrt(nk + 1e-6) : 1.0;
                    for (int64_t i = 0; i < K; i++) qn[i] *= rq * a->scale, kn[i] *= rk;
                    for (int64_t i = 0; i < K; i++)
                        for (int64_t j = 0; j < V; j++) S[i * V + j] *= exp(DR_IN(3, base * K + i));
                    for (int64_t j = 0; j < V; j++) {
                        u[j] = 0.0;
                        for (int64_t i = 0; i < K; i++) u[j] += S[i * V + j] * kn[i];
                        u[j] = DR_IN(4, base) * (DR_IN(2, base * V + j) - u[j]);
                    }
                    for (int64_t i = 0; i < K; i++)
                        for (int64_t j = 0; j < V; j++) S[i * V + j] += kn[i] * u[j];
                }
                if (a->which == 6)
                    for (int64_t i = 0; i < KV; i++) S[i] += v[base * KV + i];
                for (int64_t j = 0; j < V; j++) {
                    double acc = 0.0;
                    for (int64_t i = 0; valid && i < K; i++) acc += S[i * V + j] * qn[i];
                    o[base * V + j] = acc;
                }
                memcpy(ss + base * KV, S, (size_t)KV * sizeof *S);
            }
            memcpy(so + (b * H + h) * KV, S, (size_t)KV * sizeof *S);
        }
#undef DR_IN
}

/* delta_rule's backward over 37 tokens (three of the backward's stretches of 16), a pad prefix
 * and a hole, with and without state_in and the L2 norm: every input's gradient, dstates
 * replaced by each state's total gradient, NULL gradients, and a shape refused. */
static void test_delta_rule(void)
{
    const int64_t B = 2, T = 37, H = 3, K = 5, V = 3, KV = K * V;
    const int64_t ny = B * T * H * V + B * H * KV + B * T * H * KV;
    uint8_t valid[2 * 37];
    for (int64_t i = 0; i < B * T; i++) valid[i] = !(i == 20 || (i >= T && i < T + 3)); /* a hole; row 1's pads */
    nnt_error err = {0};
    static const char *const names[7] = {"dq", "dk", "dv", "dg", "dbeta", "dstate_in", "dstates (total)"};
    for (int c = 0; c < 3; c++) {
        int with_state = c != 1, l2norm = c != 2;
        const uint8_t *tv = c == 2 ? NULL : valid;
        nnt_tensor in[6] = {mk(4, B, T, H, K), mk(4, B, T, H, K), mk(4, B, T, H, V), mk(4, B, T, H, K), mk(3, B, T, H, 0),
                            mk(4, B, H, K, V)};
        for (int k = 0; k < 6; k++) fill(&in[k], 1.0f);
        for (int64_t i = 0; i < B * T * H * K; i++) fl(&in[3])[i] = -0.05f - 0.4f * fabsf(fl(&in[3])[i]); /* log decay */
        for (int64_t i = 0; i < B * T * H; i++) fl(&in[4])[i] = 0.5f + 0.45f * fl(&in[4])[i];                /* beta */
        float scale = 1.0f / sqrtf((float)K);
        const nnt_tensor *si = with_state ? &in[5] : NULL;
        nnt_tensor o = mk(4, B, T, H, V), so = mk(4, B, H, K, V), ss = mk(4, B * T, H, K, V), dout = mk(4, B, T, H, V),
                   dso = mk(4, B, H, K, V), dss = mk(4, B * T, H, K, V);
        CU_ASSERT_EQUAL_FATAL(ops->delta_rule(bctx, &in[0], &in[1], &in[2], &in[3], &in[4], tv, si, l2norm, scale, &o, &so,
                                              &ss, &err),
                              NNT_OK);
        double *g = malloc((size_t)ny * sizeof *g), *g0 = cotangent(&dout), *g1 = cotangent(&dso), *g2 = cotangent(&dss);
        memcpy(g, g0, (size_t)(B * T * H * V) * sizeof *g);
        memcpy(g + B * T * H * V, g1, (size_t)(B * H * KV) * sizeof *g);
        memcpy(g + B * T * H * V + B * H * KV, g2, (size_t)(B * T * H * KV) * sizeof *g);
        float *before[6];
        nnt_tensor d[6];
        for (int k = 0; k < 6; k++) d[k] = grad_like(&in[k], &before[k]);
        CU_ASSERT_EQUAL(ops->delta_rule_backward(bctx, &in[0], &in[1], &in[2], &in[3], &in[4], tv, si, l2norm, scale, &dout,
                                                 &dso, &dss, &d[0], &d[1], &d[2], &d[3], &d[4], &d[5], &err),
                        NNT_OK);
        dr_arg a = {B, T, H, K, V, 0, l2norm, scale, {0}, tv};
        for (int k = 0; k < 6; k++) a.t[k] = k < 5 || with_state ? in[k].data : NULL;
        char what[96];
        for (int k = 0; k < 6; k++) {
            a.which = k;
            snprintf(what, sizeof what, "delta_rule %s (%s state_in, l2norm %d)", names[k], with_state ? "with" : "no", l2norm);
            if (k < 5 || with_state)
                check(what, fwd_delta, &a, in[k].data, nnt_tensor_numel(&in[k]), g, ny, d[k].data, before[k]);
            else /* no state was read: its gradient is left alone */
                CU_ASSERT_EQUAL(memcmp(d[5].data, before[5], nnt_tensor_nbytes(&d[5])), 0);
        }
        a.which = 6; /* each token's state perturbed: dstates now holds the total gradient (replaced) */
        float *zero = calloc((size_t)(B * T * H * KV), sizeof *zero);
        snprintf(what, sizeof what, "delta_rule %s (%s state_in, l2norm %d)", names[6], with_state ? "with" : "no", l2norm);
        check(what, fwd_delta, &a, zero, B * T * H * KV, g, ny, dss.data, NULL);
        /* the forward agrees with the formula */
        double *yy = malloc((size_t)ny * sizeof *yy), *zd = calloc((size_t)(B * T * H * KV), sizeof *zd);
        fwd_delta(&a, zd, yy);
        for (int64_t i = 0; i < B * T * H * V; i++) CU_ASSERT_DOUBLE_EQUAL(fl(&o)[i], yy[i], 1e-5);
        for (int64_t i = 0; i < B * T * H * KV; i++) CU_ASSERT_DOUBLE_EQUAL(fl(&ss)[i], yy[B * T * H * V + B * H * KV + i], 1e-5);
        /* only dq wanted, no cotangent on the states; a gradient of the wrong shape */
        memcpy(d[0].data, before[0], nnt_tensor_nbytes(&d[0]));
        CU_ASSERT_EQUAL(ops->delta_rule_backward(bctx, &in[0], &in[1], &in[2], &in[3], &in[4], tv, si, l2norm, scale, &dout,
                                                 NULL, NULL, &d[0], NULL, NULL, NULL, NULL, NULL, &err),
                        NNT_OK);
        a.which = 0;
        snprintf(what, sizeof what, "delta_rule dq alone (%s state_in, l2norm %d)", with_state ? "with" : "no", l2norm);
        for (int64_t i = B * T * H * V; i < ny; i++) g[i] = 0.0; /* o's cotangent alone */
        check(what, fwd_delta, &a, in[0].data, nnt_tensor_numel(&in[0]), g, ny, d[0].data, before[0]);
        CU_ASSERT_EQUAL(ops->delta_rule_backward(bctx, &in[0], &in[1], &in[2], &in[3], &in[4], tv, si, l2norm, scale, &dout,
                                                 NULL, NULL, &d[2], NULL, NULL, NULL, NULL, NULL, &err),
                        NNT_ERR_SHAPE);
        free(g), free(g0), free(g1), free(g2), free(zero), free(yy), free(zd);
        for (int k = 0; k < 6; k++) free(before[k]), nnt_tensor_free(&in[k]), nnt_tensor_free(&d[k]);
        nnt_tensor_free(&o), nnt_tensor_free(&so), nnt_tensor_free(&ss), nnt_tensor_free(&dout), nnt_tensor_free(&dso);
        nnt_tensor_free(&dss);
    }
}

typedef struct rng_arg {
    int64_t M, D;
    int wrt_gate;
    float eps;
    const float *x, *w, *gate;
} rng_arg;

static void fwd_rms_gated(const void *arg, const double *v, double *y)
{
    const rng_arg *a = arg;
    for (int64_t m = 0; m < a->M; m++) {
        double ss = 0.0;
        for (int64_t d = 0; d < a->D; d++) {
            double x = a->wrt_gate ? a->x[m * a->D + d] : v[m * a->D + d];
            ss += x * x;
        }
        double r = 1.0 / sqrt(ss / (double)a->D + a->eps);
        for (int64_t d = 0; d < a->D; d++) {
            int64_t i = m * a->D + d;
            double x = a->wrt_gate ? a->x[i] : v[i], gt = a->wrt_gate ? v[i] : a->gate[i];
            y[i] = a->w[d] * x * r / (1.0 + exp(-gt));
        }
    }
}

static void test_rms_norm_gated(void)
{
    const int64_t M = 9, D = 7;
    const float eps = 1e-5f;
    nnt_error err = {0};
    nnt_tensor x = mk(2, M, D, 0, 0), w = mk(1, D, 0, 0, 0), gate = mk(2, M, D, 0, 0), y = mk(2, M, D, 0, 0),
               dy = mk(2, M, D, 0, 0);
    fill(&x, 1.0f), fill(&w, 1.0f), fill(&gate, 3.0f);
    CU_ASSERT_EQUAL_FATAL(ops->rms_norm_gated(bctx, &x, &w, &gate, eps, &y, &err), NNT_OK);
    double *g = cotangent(&dy);
    float *bx, *bg;
    nnt_tensor dx = grad_like(&x, &bx), dgate = grad_like(&gate, &bg);
    CU_ASSERT_EQUAL(ops->rms_norm_gated_backward(bctx, &x, &w, &gate, eps, &dy, &dx, &dgate, &err), NNT_OK);
    rng_arg a = {M, D, 0, eps, x.data, w.data, gate.data};
    check("rms_norm_gated dx", fwd_rms_gated, &a, x.data, M * D, g, M * D, dx.data, bx);
    a.wrt_gate = 1;
    check("rms_norm_gated dgate", fwd_rms_gated, &a, gate.data, M * D, g, M * D, dgate.data, bg);
    double *xd = malloc((size_t)(M * D) * sizeof *xd), *yy = malloc((size_t)(M * D) * sizeof *yy);
    for (int64_t i = 0; i < M * D; i++) xd[i] = fl(&gate)[i];
    fwd_rms_gated(&a, xd, yy);
    for (int64_t i = 0; i < M * D; i++) CU_ASSERT_DOUBLE_EQUAL(fl(&y)[i], yy[i], 1e-5);
    CU_ASSERT_EQUAL(ops->rms_norm_gated_backward(bctx, &x, &w, &gate, eps, &dy, NULL, NULL, &err), NNT_OK);
    CU_ASSERT_EQUAL(ops->rms_norm_gated_backward(bctx, &x, &w, &w, eps, &dy, &dx, NULL, &err), NNT_ERR_SHAPE);
    free(g), free(bx), free(bg), free(xd), free(yy);
    nnt_tensor_free(&x), nnt_tensor_free(&w), nnt_tensor_free(&gate), nnt_tensor_free(&y), nnt_tensor_free(&dy);
    nnt_tensor_free(&dx), nnt_tensor_free(&dgate);
}

int register_tests(void)
{
    CU_pSuite s = CU_add_suite("backward", setup, teardown);
    if (!s) return -1;
    if (!CU_add_test(s, "the comparator catches a wrong gradient", test_comparator_catches) ||
        !CU_add_test(s, "linear on every encoding and instruction set", test_linear) ||
        !CU_add_test(s, "linear over several decoded panels; shapes refused", test_linear_panels) ||
        !CU_add_test(s, "rms_norm without, with F32 and with BF16 gains", test_rms_norm) ||
        !CU_add_test(s, "accumulate", test_accumulate) ||
        !CU_add_test(s, "swap12, sum_axis1, copy_cols", test_moves) ||
        !CU_add_test(s, "rope: both styles, partial slice, mscale", test_rope) ||
        !CU_add_test(s, "attn_scores: grouped heads, causal, sliding, padding, cache", test_attn_scores) ||
        !CU_add_test(s, "softmax with and without sinks, hidden entries and rows", test_softmax) ||
        !CU_add_test(s, "attn_mix: grouped heads", test_attn_mix) ||
        !CU_add_test(s, "swiglu: limits, act as output and as input", test_swiglu) ||
        !CU_add_test(s, "swiglu: the gradient at and past the clamp bounds", test_swiglu_bounds) ||
        !CU_add_test(s, "route: score functions, groups, renormalisation, scaling, given indices", test_route) ||
        !CU_add_test(s, "gather_rows, scatter_add_rows, scatter_rows with repeated rows", test_rows) ||
        !CU_add_test(s, "scale_rows: dx and dw, repeated indices, after an in-place forward", test_scale_rows) ||
        !CU_add_test(s, "hyper_connection (0, 1, 4 Sinkhorn iterations, each output alone) and hyper_head",
                     test_hyper_connection) ||
        !CU_add_test(s, "hyper_mix: every input", test_hyper_mix) ||
        !CU_add_test(s, "compress with and without overlap, rows of different lengths", test_compress) ||
        !CU_add_test(s, "conv1d_causal: SiLU and none, with and without a state", test_conv1d_causal) ||
        !CU_add_test(s, "kda_gate past softplus' threshold; sigmoid in place", test_kda_gate_sigmoid) ||
        !CU_add_test(s, "delta_rule over several stretches, pads, a hole, state_in, l2norm; states' total gradient",
                     test_delta_rule) ||
        !CU_add_test(s, "rms_norm_gated: dx and dgate", test_rms_norm_gated))
        return -1;
    return 0;
}
