/* test_weights.c - weights in their stored encodings on the cpu backend: the matrix product and
 * the embedding look-up on F32, BF16, F16, FP8 e4m3 (F32, BF16 and E8M0 block scales) and FP4
 * e2m1 (E8M0 group scales) against double-precision products of the core's reference decoder
 * (core/checkpoint/quant.c, written separately from the kernels), on every instruction-set path this CPU
 * runs (AVX-512, AVX2, the baseline), for few-row and panel products, odd widths, partial edge
 * blocks and views that start inside a block row; bfloat16 products against hand rounding; and
 * the core's memory accounting after loading the FP8 and FP4 fixtures (no widened copy). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/internal.h"
#include "test_util.h"

static nnt_runtime *rt;
static const nnt_backend_descriptor *cpu;

static int setup(void)
{
    if (nnt_runtime_open(t_ini(), &rt) != NNT_OK) return -1;
    nnt_plugin *p = t_cpu_backend(rt);
    if (!p) return -1;
    cpu = p->backend;
    return 0;
}

static int teardown(void)
{
    nnt_runtime_close(rt);
    return 0;
}

/* A cpu backend context on instruction set `isa`, or NULL when this CPU or build lacks it. */
static void *context(const char *isa, int threads)
{
    char tn[16];
    snprintf(tn, sizeof tn, "%d", threads);
    const char *keys[2] = {"isa", "threads"}, *vals[2] = {isa, tn};
    nnt_backend_options opt = {
        .struct_size = sizeof(nnt_backend_options), .keys = keys, .values = vals, .count = 2, .ini_path = "test"};
    void *ctx = NULL;
    nnt_error err = {0};
    return cpu->create(&opt, &ctx, &err) == NNT_OK ? ctx : NULL;
}

static unsigned rng = 2024u;
static unsigned next(void)
{
    rng = rng * 1664525u + 1013904223u;
    return rng >> 8;
}
static float urand(void) /* uniform in [-1, 1) */
{
    return (float)(next() & 0xffffff) / 8388608.0f - 1.0f;
}

/* An encoded weight [R, C] with its own storage: codes, and a scale grid of blocks br x bc. */
typedef struct test_weight {
    nnt_tensor t;
    void *codes, *grid;
} test_weight;

static void weight_free(test_weight *w)
{
    free(w->codes);
    free(w->grid);
}

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
            b[i] = (v & 0x7f) == 0x7f ? 0x7e : v; /* every finite code, subnormals included */
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
            if (sdt == NNT_F8_E8M0) ((uint8_t *)w.grid)[i] = (uint8_t)(120 + next() % 8); /* 2^-7 .. 1 */
        }
        w.t.scale = w.grid;
        w.t.scale_dtype = sdt;
        w.t.block_rows = br;
        w.t.block_cols = bc;
    }
    return w;
}

/* Largest |y - x.w^T| over the bound 1e-5 * sum_k |x_k w_k| + 1e-6, with w from the reference
 * decoder and the product in double precision: below 1 passes. bf16: x and the decoded weight
 * rounded to bfloat16 first and the exact product rounded after, allowing one bfloat16 step of
 * the result. */
static double product_error(const float *x, int64_t M, const nnt_tensor *w, const float *y, int bf16)
{
    int64_t N = w->shape[0], K = w->shape[1];
    float *wd = malloc((size_t)(N * K) * sizeof *wd);
    nnt_error err = {0};
    CU_ASSERT_FATAL(wd && nnt_weight_decode(w, 0, N, wd, &err) == NNT_OK);
    if (bf16) /* bfloat16 products use the weight's values as a bfloat16 copy holds them */
        for (int64_t i = 0; i < N * K; i++) wd[i] = nnt_bf16_to_f32(nnt_f32_to_bf16(wd[i]));
    double worst = 0.0;
    for (int64_t m = 0; m < M; m++)
        for (int64_t n = 0; n < N; n++) {
            double ref = 0.0, mag = 0.0;
            for (int64_t k = 0; k < K; k++) {
                double xv = bf16 ? nnt_bf16_to_f32(nnt_f32_to_bf16(x[m * K + k])) : x[m * K + k];
                ref += xv * wd[n * K + k];
                mag += fabs(xv * wd[n * K + k]);
            }
            double bound = 1e-5 * mag + 1e-6, got = y[m * N + n];
            if (bf16) {
                float r = nnt_bf16_to_f32(nnt_f32_to_bf16((float)ref));
                bound += fabs(r) / 128.0; /* one step of bfloat16's 8-bit significand */
                ref = r;
                CU_ASSERT(nnt_bf16_to_f32(nnt_f32_to_bf16((float)got)) == (float)got); /* the output is rounded */
            }
            worst = fmax(worst, fabs(got - ref) / bound);
        }
    free(wd);
    return worst;
}

static const char *const ISAS[] = {"avx512", "avx2", "sse2", "neon", "portable"};

/* One weight on every instruction-set path and row count. */
static void check_weight(const char *what, const nnt_tensor *w, int bf16)
{
    static const int64_t Ms[] = {1, 2, 3, 5, 8, 9, 16, 40};
    int64_t N = w->shape[0], K = w->shape[1];
    nnt_tensor wv = *w;
    if (bf16) wv.flags |= NNT_TENSOR_BF16_PRODUCTS;
    int paths = 0;
    for (size_t ii = 0; ii < sizeof ISAS / sizeof *ISAS; ii++) {
        void *ctx = context(ISAS[ii], 2);
        if (!ctx) continue;
        paths++;
        for (size_t mi = 0; mi < sizeof Ms / sizeof *Ms; mi++) {
            int64_t M = Ms[mi], xs[2] = {M, K}, ys[2] = {M, N};
            nnt_tensor x, y;
            CU_ASSERT_FATAL(nnt_tensor_alloc(&x, NNT_F32, 2, xs) == NNT_OK && nnt_tensor_alloc(&y, NNT_F32, 2, ys) == NNT_OK);
            for (int64_t i = 0; i < M * K; i++) ((float *)x.data)[i] = urand();
            nnt_error err = {0};
            nnt_status st = cpu->ops->linear(ctx, &x, &wv, &y, &err);
            CU_ASSERT_EQUAL(st, NNT_OK);
            if (st != NNT_OK) fprintf(stderr, "\n  %s on %s: %s\n", what, ISAS[ii], err.msg);
            double e = st == NNT_OK ? product_error(x.data, M, &wv, y.data, bf16) : 0.0;
            if (e > 1.0)
                fprintf(stderr, "\n  %s%s on %s, M = %lld: %.3g of the bound\n", what, bf16 ? " (bf16)" : "", ISAS[ii],
                        (long long)M, e);
            CU_ASSERT(e <= 1.0);
            nnt_tensor_free(&x);
            nnt_tensor_free(&y);
        }
        cpu->destroy(ctx);
    }
    CU_ASSERT(paths >= 1);
}

/* Every encoding, with shapes that leave partial vectors and partial edge blocks. */
static void test_linear_encodings(void)
{
    struct {
        const char *what;
        nnt_dtype dt, sdt;
        int64_t R, C;
        int br, bc;
    } cases[] = {
        {"F32 37x83", NNT_F32, 0, 37, 83, 0, 0},
        {"BF16 37x83", NNT_BF16, 0, 37, 83, 0, 0},
        {"F16 37x83", NNT_F16, 0, 37, 83, 0, 0},
        {"FP8/F32 130x200, 128x128 blocks", NNT_F8_E4M3, NNT_F32, 130, 200, 128, 128},
        {"FP8/BF16 45x83, 16x16 blocks", NNT_F8_E4M3, NNT_BF16, 45, 83, 16, 16},
        {"FP8/E8M0 33x150, 8x24 blocks", NNT_F8_E4M3, NNT_F8_E8M0, 33, 150, 8, 24},
        /* widths and blocks in whole steps of 32 columns: x86's 16-bit-lane kernels (AMD) and, with
         * AVX512-BF16 elsewhere, the half-precision dot-product kernel for bfloat16 products */
        {"FP8/F32 70x256, 128x128 blocks", NNT_F8_E4M3, NNT_F32, 70, 256, 128, 128},
        {"FP8/E8M0 36x192, 32x64 blocks", NNT_F8_E4M3, NNT_F8_E8M0, 36, 192, 32, 64},
        {"FP8/BF16 21x96, 16x32 blocks", NNT_F8_E4M3, NNT_BF16, 21, 96, 16, 32},
        {"FP4/E8M0 37x96, groups of 32", NNT_F4_E2M1, NNT_F8_E8M0, 37, 96, 1, 32},
        {"FP4/E8M0 13x192, groups of 32 (whole steps of 64 columns: AVX2's shuffle kernel, AVX512-BF16's "
         "dot-product kernel)",
         NNT_F4_E2M1, NNT_F8_E8M0, 13, 192, 1, 32},
        {"FP4/E8M0 9x256, groups of 64 (the dot-product kernel takes each scale for two 32-column halves)",
         NNT_F4_E2M1, NNT_F8_E8M0, 9, 256, 1, 64},
        /* whole steps of 128 columns: AVX-512's nibble-plane kernel, groups of 32, 64 and 128 */
        {"FP4/E8M0 37x384, groups of 32 (nibble planes)", NNT_F4_E2M1, NNT_F8_E8M0, 37, 384, 1, 32},
        {"FP4/E8M0 11x256, groups of 128 (nibble planes)", NNT_F4_E2M1, NNT_F8_E8M0, 11, 256, 1, 128},
        {"FP4/E8M0 6x512, groups of 256 (nibble planes)", NNT_F4_E2M1, NNT_F8_E8M0, 6, 512, 1, 256},
        {"FP4/E8M0 21x70, groups of 14 (a partial vector per group)", NNT_F4_E2M1, NNT_F8_E8M0, 21, 70, 1, 14},
        {"FP4/F32 19x40, groups of 8", NNT_F4_E2M1, NNT_F32, 19, 40, 1, 8},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        test_weight w = weight_make(cases[i].dt, cases[i].sdt, cases[i].R, cases[i].C, cases[i].br, cases[i].bc);
        check_weight(cases[i].what, &w.t, 0);
        check_weight(cases[i].what, &w.t, 1);
        weight_free(&w);
    }
}

/* E8M0 scale bytes 0 (2^-127) and 255 (NaN) in FP4 weights: x is 2^100 at one column of block 2
 * and 0 elsewhere, so y[n] is the decoded weight times 2^100 exactly, 2^-27 times its e2m1 value
 * in row 1 (scale byte 0 there) and NaN in row 5 (byte 255 in block 6: NaN times 0 is NaN); the
 * kernels that build scales from the byte's bits must put both in. Every instruction-set path,
 * 1, 3 and 8 rows of x, widths of 256 and 384 (AVX-512's nibble planes) and 96. */
static void test_linear_fp4_scale_edges(void)
{
    static const int64_t widths[] = {256, 384, 96}, Ms[] = {1, 3, 8};
    for (size_t wi = 0; wi < sizeof widths / sizeof *widths; wi++) {
        const int64_t N = 9, K = widths[wi], nb = K / 32;
        test_weight w = weight_make(NNT_F4_E2M1, NNT_F8_E8M0, N, K, 1, 32);
        ((uint8_t *)w.grid)[1 * nb + 2] = 0;
        memset((uint8_t *)w.codes + (K + 64) / 2, 0xb5, 16); /* row 1, block 2: 3.0 and -1.5, never 0 */
        ((uint8_t *)w.grid)[5 * nb + 2] = 127;
        ((uint8_t *)w.grid)[5 * nb + 1] = 255;
        float *wd = malloc((size_t)(N * K) * sizeof *wd);
        nnt_error err = {0};
        CU_ASSERT_FATAL(wd && nnt_weight_decode(&w.t, 0, N, wd, &err) == NNT_OK);
        for (size_t ii = 0; ii < sizeof ISAS / sizeof *ISAS; ii++) {
            void *ctx = context(ISAS[ii], 2);
            if (!ctx) continue;
            for (size_t mi = 0; mi < sizeof Ms / sizeof *Ms; mi++) {
                int64_t M = Ms[mi], xs[2] = {M, K}, ys[2] = {M, N}, bad = 0;
                nnt_tensor x, y;
                CU_ASSERT_FATAL(nnt_tensor_alloc(&x, NNT_F32, 2, xs) == NNT_OK && nnt_tensor_alloc(&y, NNT_F32, 2, ys) == NNT_OK);
                memset(x.data, 0, (size_t)(M * K) * sizeof(float));
                for (int64_t m = 0; m < M; m++) ((float *)x.data)[m * K + 64 + 3 * m] = 0x1p100f;
                CU_ASSERT_EQUAL(cpu->ops->linear(ctx, &x, &w.t, &y, &err), NNT_OK);
                for (int64_t m = 0; m < M; m++)
                    for (int64_t n = 0; n < N; n++) {
                        float got = ((float *)y.data)[m * N + n], want = wd[n * K + 64 + 3 * m] * 0x1p100f;
                        int ok = n == 5 ? isnan(got) : got == want;
                        if (n == 1) ok = ok && got == nnt_fp4_e2m1_to_f32(((uint8_t *)w.codes)[(K + 64 + 3 * m) / 2] >>
                                                                         ((64 + 3 * m) % 2 * 4) & 15) * 0x1p-27f;
                        if (!ok && bad++ == 0)
                            fprintf(stderr, "\n  FP4 %lldx%lld on %s, %lld rows: y[%lld, %lld] = %.9g, expected %.9g\n",
                                    (long long)N, (long long)K, ISAS[ii], (long long)M, (long long)m, (long long)n, got,
                                    n == 5 ? NAN : want);
                    }
                CU_ASSERT_EQUAL(bad, 0);
                nnt_tensor_free(&x);
                nnt_tensor_free(&y);
            }
            cpu->destroy(ctx);
        }
        free(wd);
        weight_free(&w);
    }
}

/* bfloat16 products read each FP8 weight as torch's bfloat16 copy holds it: the float32 product
 * code x scale rounded to the nearest bfloat16, ties to even. With x one-hot at column c the
 * product is that weight alone, so y must equal it exactly. Scales: (1 + 2^-8) 2^-4, which
 * puts every code of significand 1.0 exactly halfway between two bfloat16 numbers (1 + 2^-8 is
 * the midpoint of 1 and 1 + 2^-7: ties to even gives 1, rounding half up 1 + 2^-7); 300 and
 * 1e-36, outside the range where x86's fast kernels scale exactly (they must hand over); 0.02. */
static void test_linear_bf16_ties(void)
{
    static const float scales[] = {1.00390625f * 0.0625f, 300.0f, 1e-36f, 0.02f};
    for (size_t si = 0; si < sizeof scales / sizeof *scales; si++) {
        test_weight w = weight_make(NNT_F8_E4M3, NNT_F32, 12, 64, 128, 64);
        ((float *)w.grid)[0] = scales[si];
        for (int i = 0; i < 12 * 64; i += 3) ((uint8_t *)w.codes)[i] = (uint8_t)(0x38 + (i % 7) * 8); /* significand 1.0 */
        float wd[12 * 64];
        nnt_error err = {0};
        CU_ASSERT_FATAL(nnt_weight_decode(&w.t, 0, 12, wd, &err) == NNT_OK);
        nnt_tensor wv = w.t;
        wv.flags |= NNT_TENSOR_BF16_PRODUCTS;
        for (size_t ii = 0; ii < sizeof ISAS / sizeof *ISAS; ii++) {
            void *ctx = context(ISAS[ii], 1);
            if (!ctx) continue;
            /* one row of x (the few-row kernels) at four columns, then 40 rows (the many-row
             * products on decoded panels), row m one-hot at column 13 m mod 64 */
            static const int64_t cols[] = {0, 3, 17, 63, -1};
            for (size_t ci = 0; ci < sizeof cols / sizeof *cols; ci++) {
                int64_t M = cols[ci] < 0 ? 40 : 1, xs[2] = {M, 64}, ys[2] = {M, 12}, bad = 0;
                nnt_tensor x, y;
                CU_ASSERT_FATAL(nnt_tensor_alloc(&x, NNT_F32, 2, xs) == NNT_OK && nnt_tensor_alloc(&y, NNT_F32, 2, ys) == NNT_OK);
                memset(x.data, 0, (size_t)(M * 64) * sizeof(float));
                for (int64_t m = 0; m < M; m++) ((float *)x.data)[m * 64 + (cols[ci] < 0 ? 13 * m % 64 : cols[ci])] = 1.0f;
                CU_ASSERT_EQUAL(cpu->ops->linear(ctx, &x, &wv, &y, &err), NNT_OK);
                for (int64_t m = 0; m < M; m++)
                    for (int64_t n = 0; n < 12; n++) {
                        int64_t col = cols[ci] < 0 ? 13 * m % 64 : cols[ci];
                        float want = nnt_bf16_to_f32(nnt_f32_to_bf16(wd[n * 64 + col])), got = ((float *)y.data)[m * 12 + n];
                        /* many rows: a bfloat16 matrix instruction (oneDNN's) reads a subnormal weight
                         * as zero (cpu_gemm.c) */
                        int flushed = M > 1 && got == 0.0f && fabsf(want) < 0x1p-126f;
                        if (got != want && !flushed && bad++ == 0)
                            fprintf(stderr, "\n  scale %g on %s, %lld rows: w[%lld, %lld] read as %.9g, bfloat16 of %.9g is %.9g\n",
                                    scales[si], ISAS[ii], (long long)M, (long long)n, (long long)col, got, wd[n * 64 + col], want);
                    }
                CU_ASSERT_EQUAL(bad, 0);
                nnt_tensor_free(&x);
                nnt_tensor_free(&y);
            }
            cpu->destroy(ctx);
        }
        weight_free(&w);
    }
}

/* The bfloat16 panels of many-row products hold every finite FP8 code's weight exactly, in its
 * own column: a [4, 128] weight of codes 0..255 in two 64-column blocks of different scales, and
 * x the identity (128 rows, past the few-row kernels), so y[m, n] = w[n, m] rounded to bfloat16
 * from the reference decoder. The not-a-number codes 127 and 255 become 0 (0 x NaN would spoil
 * the whole row of y). */
static void test_linear_bf16_panels(void)
{
    static const float scales[][2] = {{0.02f, 3.0f}, {1.00390625f * 0.0625f, 0x1p-100f}, {1e-36f, 448.0f}};
    for (size_t si = 0; si < sizeof scales / sizeof *scales; si++) {
        test_weight w = weight_make(NNT_F8_E4M3, NNT_F32, 4, 128, 128, 64);
        for (int i = 0; i < 4 * 128; i++) { /* row n, block b, column j: code 64 n + j, reversed in block 1 */
            int n = i / 128, b = i % 128 / 64, j = i % 64, code = 64 * n + (b ? 63 - j : j);
            ((uint8_t *)w.codes)[i] = (uint8_t)((code & 0x7f) == 0x7f ? 0 : code);
        }
        ((float *)w.grid)[0] = scales[si][0];
        ((float *)w.grid)[1] = scales[si][1];
        float wd[4 * 128];
        nnt_error err = {0};
        CU_ASSERT_FATAL(nnt_weight_decode(&w.t, 0, 4, wd, &err) == NNT_OK);
        nnt_tensor wv = w.t;
        wv.flags |= NNT_TENSOR_BF16_PRODUCTS;
        for (size_t ii = 0; ii < sizeof ISAS / sizeof *ISAS; ii++) {
            void *ctx = context(ISAS[ii], 2);
            if (!ctx) continue;
            int64_t xs[2] = {128, 128}, ys[2] = {128, 4}, bad = 0;
            nnt_tensor x, y;
            CU_ASSERT_FATAL(nnt_tensor_alloc(&x, NNT_F32, 2, xs) == NNT_OK && nnt_tensor_alloc(&y, NNT_F32, 2, ys) == NNT_OK);
            memset(x.data, 0, 128 * 128 * sizeof(float));
            for (int m = 0; m < 128; m++) ((float *)x.data)[m * 128 + m] = 1.0f;
            CU_ASSERT_EQUAL(cpu->ops->linear(ctx, &x, &wv, &y, &err), NNT_OK);
            for (int m = 0; m < 128; m++)
                for (int n = 0; n < 4; n++) {
                    float want = nnt_bf16_to_f32(nnt_f32_to_bf16(wd[n * 128 + m])), got = ((float *)y.data)[m * 4 + n];
                    int flushed = got == 0.0f && fabsf(want) < 0x1p-126f; /* as in test_linear_bf16_ties */
                    if (got != want && !flushed && bad++ == 0)
                        fprintf(stderr, "\n  scales %g, %g on %s: w[%d, %d] read as %.9g, bfloat16 of %.9g is %.9g\n",
                                scales[si][0], scales[si][1], ISAS[ii], n, m, got, wd[n * 128 + m], want);
                }
            CU_ASSERT_EQUAL(bad, 0);
            nnt_tensor_free(&x);
            nnt_tensor_free(&y);
            cpu->destroy(ctx);
        }
        weight_free(&w);
    }
}

/* Row views of an FP8 weight that start inside a block row (as DeepSeek-V4's grouped output
 * projection and transformers' fused experts slice them) take the right scales. */
static void test_linear_views(void)
{
    test_weight w = weight_make(NNT_F8_E4M3, NNT_F32, 300, 140, 128, 128);
    static const int64_t from[] = {16, 100, 128, 200}, rows[] = {100, 40, 64, 100};
    for (size_t i = 0; i < sizeof from / sizeof *from; i++) {
        nnt_tensor v = {0};
        CU_ASSERT_FATAL(nnt_tensor_rows(&w.t, 0, from[i], rows[i], &v));
        CU_ASSERT_EQUAL(v.block_row0, (int32_t)(from[i] % 128));
        char what[64];
        snprintf(what, sizeof what, "FP8 rows %lld..%lld of 300", (long long)from[i], (long long)(from[i] + rows[i]));
        check_weight(what, &v, 0);
    }
    /* matrix 1 of a stacked [2, 130, 64] FP4 tensor */
    test_weight s = weight_make(NNT_F4_E2M1, NNT_F8_E8M0, 260, 64, 1, 32);
    nnt_tensor st3 = s.t, v = {0};
    st3.ndim = 3;
    st3.shape[0] = 2;
    st3.shape[1] = 130;
    st3.shape[2] = 64;
    CU_ASSERT_FATAL(nnt_tensor_rows(&st3, 1, 5, 50, &v));
    float *a = malloc(50 * 64 * sizeof *a), *b = malloc(50 * 64 * sizeof *b);
    nnt_error err = {0};
    CU_ASSERT_FATAL(a && b);
    CU_ASSERT_EQUAL(nnt_weight_decode(&v, 0, 50, a, &err), NNT_OK);
    CU_ASSERT_EQUAL(nnt_weight_decode(&s.t, 135, 50, b, &err), NNT_OK); /* the same rows of the flat view */
    CU_ASSERT_EQUAL(memcmp(a, b, 50 * 64 * sizeof *a), 0);
    check_weight("FP4 rows 5..55 of matrix 1", &v, 0);
    free(a);
    free(b);
    weight_free(&s);
    weight_free(&w);
}

/* The embedding look-up decodes whole rows exactly as the reference decoder does. */
static void test_embedding_encodings(void)
{
    const nnt_dtype dts[] = {NNT_F32, NNT_BF16, NNT_F16, NNT_F8_E4M3, NNT_F4_E2M1};
    void *ctx = context("auto", 2);
    CU_ASSERT_FATAL(ctx != NULL);
    for (size_t i = 0; i < sizeof dts / sizeof *dts; i++) {
        test_weight w = weight_make(dts[i], NNT_F8_E8M0, 50, 64, dts[i] == NNT_F4_E2M1 ? 1 : 16, 32);
        int32_t idv[5] = {0, 49, 7, 7, 23};
        int64_t is[1] = {5}, ys[2] = {5, 64};
        nnt_tensor ids = {.dtype = NNT_I32, .ndim = 1, .shape = {5}, .data = idv}, y;
        (void)is;
        CU_ASSERT_FATAL(nnt_tensor_alloc(&y, NNT_F32, 2, ys) == NNT_OK);
        nnt_error err = {0};
        CU_ASSERT_EQUAL_FATAL(cpu->ops->embedding(ctx, &w.t, &ids, &y, &err), NNT_OK);
        float ref[64];
        int bad = 0;
        for (int m = 0; m < 5; m++) {
            CU_ASSERT_FATAL(nnt_weight_decode(&w.t, idv[m], 1, ref, &err) == NNT_OK);
            bad += memcmp(ref, (float *)y.data + m * 64, sizeof ref) != 0;
        }
        CU_ASSERT_EQUAL(bad, 0);
        nnt_tensor_free(&y);
        weight_free(&w);
    }
    cpu->destroy(ctx);
}

/* An unknown instruction set, and one this CPU lacks, are refused by name. */
static void test_isa_option(void)
{
    const char *keys[1] = {"isa"}, *vals[1] = {"avx9000"};
    nnt_backend_options opt = {
        .struct_size = sizeof(nnt_backend_options), .keys = keys, .values = vals, .count = 1, .ini_path = "test"};
    void *ctx = NULL;
    nnt_error err = {0};
    CU_ASSERT_EQUAL(cpu->create(&opt, &ctx, &err), NNT_ERR_CONFIG);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "isa = 'avx9000'"));
#if defined(__x86_64__)
    if (!__builtin_cpu_supports("avx512f")) {
        vals[0] = "avx512";
        CU_ASSERT_EQUAL(cpu->create(&opt, &ctx, &err), NNT_ERR_CONFIG);
        CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "lacks AVX-512"));
    }
#endif
}

/* Loading the FP8 (MiniMax-M2, MiMo-V2-Flash) and FP8 + FP4 (DeepSeek-V4) fixtures binds their
 * stored bytes: what the model holds stays within 1.15 x the files (a float32 copy of the FP8
 * weights alone would be about 4 x their bytes), and every FP8 weight's bytes count as mapped. */
static void test_memory_accounting(void)
{
    const char *fixtures[] = {"minimax_m2/fp8", "mimo_v2_flash/fp8", "deepseek_v4/native"};
    for (size_t i = 0; i < sizeof fixtures / sizeof *fixtures; i++) {
        nnt_model *m = t_model(rt, fixtures[i]);
        CU_ASSERT_PTR_NOT_NULL_FATAL(m);
        nnt_memory mem;
        CU_ASSERT_EQUAL(nnt_model_memory(m, &mem), NNT_OK);
        uint64_t held = mem.mapped_bytes + mem.allocated_bytes + mem.device_bytes;
        fprintf(stderr, "\n  %s: files %llu, mapped %llu, allocated %llu, device %llu: held %.3f x the files", fixtures[i],
                (unsigned long long)mem.file_bytes, (unsigned long long)mem.mapped_bytes,
                (unsigned long long)mem.allocated_bytes, (unsigned long long)mem.device_bytes,
                (double)held / (double)mem.file_bytes);
        if (i + 1 == sizeof fixtures / sizeof *fixtures) fprintf(stderr, "\n");
        CU_ASSERT(mem.file_bytes > 0);
        CU_ASSERT(mem.mapped_bytes <= mem.file_bytes);
        CU_ASSERT(mem.mapped_bytes >= mem.file_bytes / 2); /* the weights are read in place */
        CU_ASSERT((double)held <= 1.15 * (double)mem.file_bytes);
        CU_ASSERT_EQUAL(mem.device_bytes, 0);
        nnt_model_free(m);
    }
}

int register_tests(void)
{
    CU_pSuite s = CU_add_suite("weights", setup, teardown);
    if (!s) return -1;
    if (!CU_add_test(s, "linear on every encoding, instruction set and row count", test_linear_encodings) ||
        !CU_add_test(s, "linear on row views that start inside a block", test_linear_views) ||
        !CU_add_test(s, "bfloat16 products round FP8 weights to even on ties", test_linear_bf16_ties) ||
        !CU_add_test(s, "FP4 scale bytes 0 and 255 on every path", test_linear_fp4_scale_edges) ||
        !CU_add_test(s, "bfloat16 panels hold every FP8 code in its column", test_linear_bf16_panels) ||
        !CU_add_test(s, "embedding rows of every encoding", test_embedding_encodings) ||
        !CU_add_test(s, "the isa option", test_isa_option) ||
        !CU_add_test(s, "FP8 and FP4 fixtures load without a widened copy", test_memory_accounting))
        return -1;
    return 0;
}
