/* cpu_linear.c - the cpu backend's matrix product y = x . w^T on weights in their stored encoding
 * (F32, BF16, F16, FP8 e4m3 and FP4 e2m1 with block scales).
 *
 * Few rows of x (decoding, and experts that receive few tokens): every thread streams its own
 * block of weight rows once through registers, decoding in registers (cpu_kernels_impl.h, the
 * instruction set chosen at run time). More rows: an F32 weight goes to OpenBLAS's sgemm as it
 * is; any other is decoded panel by panel, each thread decoding its own run of weight rows into
 * its own panel and multiplying it with a single-threaded sgemm - no widened copy of the weight
 * ever exists. With NNT_TENSOR_BF16_PRODUCTS the activations are rounded to bfloat16 on the way
 * in and the results on the way out. */
#include <cblas.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "cpu_internal.h"

#define PANEL_MAX_ROWS 256 /* weight rows a thread decodes per sgemm call */

/* rows per thread panel: enough to amortise sgemm's packing of x, few enough that every thread
 * gets work; a multiple of 16 */
static int64_t panel_rows(int64_t N, int threads)
{
    int64_t per = (N + threads - 1) / threads;
    per = (per + 15) / 16 * 16;
    if (per > PANEL_MAX_ROWS) per = PANEL_MAX_ROWS;
    if (per < 16) per = 16;
    return per;
}

/* x [M, K] F32, w [N, K] any weight encoding, y [M, N] F32 */
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
    cpu_weight wv;
    if (!cpu_weight_view(w, &wv))
        return cpu_error(err, NNT_ERR_UNSUPPORTED,
                         "cpu linear: a weight of dtype %d%s is not readable (F32, BF16, F16, or F8_E4M3 / F4_E2M1 "
                         "with block scales)",
                         (int)w->dtype, w->scale ? "" : " without scales");
    if (M == 0 || N == 0) return NNT_OK;
    float *yd = y->data;
    if (K == 0) {
        memset(yd, 0, (size_t)(M * N) * sizeof *yd);
        return NNT_OK;
    }
    const float *xd = x->data;
    int bf16 = (w->flags & NNT_TENSOR_BF16_PRODUCTS) || cpu_bf16(y);
    if (bf16) {
        float *xr;
        if ((st = cpu_scratch(c, (size_t)(M * K), &xr, err)) != NNT_OK) return st;
        c->k->round_bf16(xd, xr, M * K);
        xd = xr;
    }
    if (M <= CPU_FEW_ROWS) {
        /* each thread streams its own block of weight rows (a multiple of 4: the kernels' tile) */
        int64_t chunk = ((N + c->threads - 1) / c->threads + 3) / 4 * 4;
        const cpu_kernels *k = c->k;
#pragma omp parallel for num_threads(c->threads) schedule(static) if (N * K > 65536)
        for (int t = 0; t < c->threads; t++) {
            int64_t n0 = t * chunk, n1 = n0 + chunk < N ? n0 + chunk : N;
            if (n0 < n1) k->gemv(xd, M, &wv, n0, n1, yd, N);
        }
    } else if (w->dtype == NNT_F32) {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)M, (int)N, (int)K, 1.0f, xd, (int)K,
                    (const float *)w->data, (int)K, 0.0f, yd, (int)N);
    } else {
        int64_t rows = panel_rows(N, c->threads), chunks = (N + rows - 1) / rows;
        int threads = chunks < c->threads ? (int)chunks : c->threads;
        float **panel = c->panel;
        for (int t = 0; t < threads; t++)
            if ((st = cpu_panel(c, t, (size_t)(rows * K), &panel[t], err)) != NNT_OK) return st;
        const cpu_kernels *k = c->k;
        /* sgemm called inside the parallel region runs on the calling thread alone */
#pragma omp parallel num_threads(threads)
        {
#ifdef _OPENMP
            int t = omp_get_thread_num();
#else
            int t = 0;
#endif
#pragma omp for schedule(dynamic, 1)
            for (int64_t ch = 0; ch < chunks; ch++) {
                int64_t n0 = ch * rows, nr = N - n0 < rows ? N - n0 : rows;
                k->decode(&wv, n0, n0 + nr, panel[t], K);
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)M, (int)nr, (int)K, 1.0f, xd, (int)K,
                            panel[t], (int)K, 0.0f, yd + n0, (int)N);
            }
        }
    }
    if (bf16) {
        const cpu_kernels *k = c->k;
#pragma omp parallel for num_threads(c->threads) schedule(static) if (M * N > 65536)
        for (int64_t m = 0; m < M; m++) k->round_bf16(yd + m * N, yd + m * N, N);
    }
    return NNT_OK;
}
