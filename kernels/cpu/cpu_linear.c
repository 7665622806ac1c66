/* cpu_linear.c - the cpu backend's matrix product y = x . w^T. A product with few rows of x
 * (decoding) streams each weight row once through registers on every thread - F32 rows as they
 * are, BF16 and F16 rows widened in registers (AVX-512 where the CPU has it, chosen at run time):
 * sgemm would first pack the whole weight matrix for a single row. Products with more rows go to
 * OpenBLAS sgemm; BF16 and F16 weights are never converted as a whole there either: one panel of
 * weight rows at a time is widened into scratch memory, paid once for all rows of x. */
#include <cblas.h>
#include <string.h>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "cpu_internal.h"

#define PANEL_ROWS 512 /* weight rows widened per sgemm call */
#define FEW_ROWS 8     /* at most this many rows of x: the row-streaming kernel */

static inline float bf16_bits(uint16_t b)
{
    uint32_t u = (uint32_t)b << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* ---- widening: n values of src (BF16 or F16) into dst (F32) ---- */

static void widen_portable(const uint16_t *src, nnt_dtype dt, int64_t n, float *dst)
{
    if (dt == NNT_BF16)
        for (int64_t i = 0; i < n; i++) dst[i] = bf16_bits(src[i]);
    else
        for (int64_t i = 0; i < n; i++) dst[i] = cpu_load(src, NNT_F16, i);
}

#if defined(__x86_64__)
__attribute__((target("avx512f"))) static void widen_avx512(const uint16_t *src, nnt_dtype dt, int64_t n, float *dst)
{
    int64_t i = 0;
    if (dt == NNT_BF16)
        for (; i + 16 <= n; i += 16) {
            __m256i h = _mm256_loadu_si256((const __m256i *)(src + i));
            __m512i w = _mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16);
            _mm512_storeu_ps(dst + i, _mm512_castsi512_ps(w));
        }
    else
        for (; i + 16 <= n; i += 16)
            _mm512_storeu_ps(dst + i, _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(src + i))));
    widen_portable(src + i, dt, n - i, dst + i);
}

/* y[m, n] = sum_k x[m, k] w[n, k] for weight rows n0..n1 and m < M <= FEW_ROWS; BF16 or F16 rows
 * are widened 16 at a time in registers. x [M, K], w [N, K], y [M, ldy]. */
__attribute__((target("avx512f"))) static void rows_avx512(const float *x, int64_t M, int64_t K, const void *w,
                                                           nnt_dtype dt, int64_t n0, int64_t n1, float *y, int64_t ldy)
{
    for (int64_t n = n0; n < n1; n++) {
        const uint16_t *wh = (const uint16_t *)w + n * K;
        const float *wf32 = (const float *)w + n * K;
        __m512 acc[FEW_ROWS];
        for (int64_t m = 0; m < M; m++) acc[m] = _mm512_setzero_ps();
        int64_t k = 0;
        for (; k + 16 <= K; k += 16) {
            __m512 wf;
            if (dt == NNT_F32)
                wf = _mm512_loadu_ps(wf32 + k);
            else {
                __m256i h = _mm256_loadu_si256((const __m256i *)(wh + k));
                wf = dt == NNT_BF16 ? _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16)) : _mm512_cvtph_ps(h);
            }
            for (int64_t m = 0; m < M; m++) acc[m] = _mm512_fmadd_ps(_mm512_loadu_ps(x + m * K + k), wf, acc[m]);
        }
        for (int64_t m = 0; m < M; m++) {
            float s = _mm512_reduce_add_ps(acc[m]);
            for (int64_t kk = k; kk < K; kk++) s += x[m * K + kk] * cpu_load(w, dt, n * K + kk);
            y[m * ldy + n] = s;
        }
    }
}

/* Loads 16 weights of a row as F32. */
__attribute__((target("avx512f"))) static inline __m512 load16(const void *w, nnt_dtype dt, int64_t i)
{
    if (dt == NNT_F32) return _mm512_loadu_ps((const float *)w + i);
    __m256i h = _mm256_loadu_si256((const __m256i *)((const uint16_t *)w + i));
    return dt == NNT_BF16 ? _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16)) : _mm512_cvtph_ps(h);
}

/* The single-row case (a decoding step): four weight rows at a time, so four independent
 * accumulation chains keep the loads in flight. x [K], w [N, K], y [ldy] (row 0). */
__attribute__((target("avx512f"))) static void row1_avx512(const float *x, int64_t K, const void *w, nnt_dtype dt,
                                                           int64_t n0, int64_t n1, float *y)
{
    int64_t n = n0;
    for (; n + 4 <= n1; n += 4) {
        __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
        int64_t k = 0;
        for (; k + 16 <= K; k += 16) {
            __m512 xv = _mm512_loadu_ps(x + k);
            a0 = _mm512_fmadd_ps(xv, load16(w, dt, (n + 0) * K + k), a0);
            a1 = _mm512_fmadd_ps(xv, load16(w, dt, (n + 1) * K + k), a1);
            a2 = _mm512_fmadd_ps(xv, load16(w, dt, (n + 2) * K + k), a2);
            a3 = _mm512_fmadd_ps(xv, load16(w, dt, (n + 3) * K + k), a3);
        }
        float s[4] = {_mm512_reduce_add_ps(a0), _mm512_reduce_add_ps(a1), _mm512_reduce_add_ps(a2),
                      _mm512_reduce_add_ps(a3)};
        for (int r = 0; r < 4; r++) {
            for (int64_t kk = k; kk < K; kk++) s[r] += x[kk] * cpu_load(w, dt, (n + r) * K + kk);
            y[n + r] = s[r];
        }
    }
    if (n < n1) rows_avx512(x, 1, K, w, dt, n, n1, y, 0);
}
#endif

static void rows_portable(const float *x, int64_t M, int64_t K, const void *w, nnt_dtype dt, int64_t n0, int64_t n1,
                          float *y, int64_t ldy)
{
    for (int64_t n = n0; n < n1; n++)
        for (int64_t m = 0; m < M; m++) {
            float lanes[8] = {0};
            int64_t k = 0;
            for (; k + 8 <= K; k += 8)
                for (int j = 0; j < 8; j++) lanes[j] += x[m * K + k + j] * cpu_load(w, dt, n * K + k + j);
            float s = 0;
            for (int j = 0; j < 8; j++) s += lanes[j];
            for (; k < K; k++) s += x[m * K + k] * cpu_load(w, dt, n * K + k);
            y[m * ldy + n] = s;
        }
}

static int have_avx512(void)
{
#if defined(__x86_64__)
    return __builtin_cpu_supports("avx512f");
#else
    return 0;
#endif
}

static void widen(const uint16_t *src, nnt_dtype dt, int64_t n, float *dst)
{
#if defined(__x86_64__)
    if (have_avx512()) {
        widen_avx512(src, dt, n, dst);
        return;
    }
#endif
    widen_portable(src, dt, n, dst);
}

static void few_rows(const float *x, int64_t M, int64_t K, const void *w, nnt_dtype dt, int64_t n0, int64_t n1,
                     float *y, int64_t ldy)
{
#if defined(__x86_64__)
    if (have_avx512()) {
        if (M == 1)
            row1_avx512(x, K, w, dt, n0, n1, y);
        else
            rows_avx512(x, M, K, w, dt, n0, n1, y, ldy);
        return;
    }
#endif
    rows_portable(x, M, K, w, dt, n0, n1, y, ldy);
}

/* x [M, K] F32, w [N, K] F32/BF16/F16, y [M, N] F32 */
nnt_status cpu_linear(void *ctx, const nnt_tensor *x, const nnt_tensor *w, nnt_tensor *y, nnt_error *err)
{
    cpu_ctx *c = ctx;
    nnt_status st;
    if ((st = cpu_check("linear", "x", x, NNT_F32, 2, err)) != NNT_OK) return st;
    if ((st = cpu_check("linear", "w", w, NNT_DTYPE_INVALID, 2, err)) != NNT_OK) return st;
    if ((st = cpu_check("linear", "y", y, NNT_F32, 2, err)) != NNT_OK) return st;
    int64_t M = x->shape[0], K = x->shape[1], N = w->shape[0];
    if (w->shape[1] != K || y->shape[0] != M || y->shape[1] != N)
        return cpu_error(err, NNT_ERR_SHAPE, "cpu linear: x [%lld, %lld], w [%lld, %lld], y [%lld, %lld] do not chain",
                         (long long)M, (long long)K, (long long)w->shape[0], (long long)w->shape[1],
                         (long long)y->shape[0], (long long)y->shape[1]);
    if (M == 0 || N == 0) return NNT_OK;
    const float *xd = x->data;
    float *yd = y->data;
    nnt_dtype dt = w->dtype;
    if (dt != NNT_F32 && dt != NNT_BF16 && dt != NNT_F16)
        return cpu_error(err, NNT_ERR_UNSUPPORTED, "cpu linear: weight dtype %d is not F32, BF16 or F16", (int)dt);
    if (M <= FEW_ROWS) {
        /* each thread streams its own block of weight rows */
        int64_t chunk = (N + c->threads - 1) / c->threads;
#pragma omp parallel for num_threads(c->threads) schedule(static) if (N * K > 65536)
        for (int t = 0; t < c->threads; t++) {
            int64_t n0 = t * chunk, n1 = n0 + chunk < N ? n0 + chunk : N;
            if (n0 < n1) few_rows(xd, M, K, w->data, dt, n0, n1, yd, N);
        }
        return NNT_OK;
    }
    if (dt == NNT_F32) {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)M, (int)N, (int)K, 1.0f, xd, (int)K,
                    (const float *)w->data, (int)K, 0.0f, yd, (int)N);
        return NNT_OK;
    }
    const uint16_t *wd = w->data;
    float *panel;
    int64_t rows = N < PANEL_ROWS ? N : PANEL_ROWS;
    if ((st = cpu_scratch(c, (size_t)(rows * K), &panel, err)) != NNT_OK) return st;
    for (int64_t n0 = 0; n0 < N; n0 += rows) {
        int64_t nr = N - n0 < rows ? N - n0 : rows;
#pragma omp parallel for num_threads(c->threads) schedule(static) if (nr * K > 65536)
        for (int64_t r = 0; r < nr; r++) widen(wd + (n0 + r) * K, dt, K, panel + r * K);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)M, (int)nr, (int)K, 1.0f, xd, (int)K, panel,
                    (int)K, 0.0f, yd + n0, (int)N);
    }
    return NNT_OK;
}
