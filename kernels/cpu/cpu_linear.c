/* cpu_linear.c - the cpu backend's matrix product y = x . w^T through OpenBLAS sgemm; BF16 and
 * F16 weights are widened one panel of rows at a time into a scratch buffer. */
#include <cblas.h>

#include "cpu_internal.h"

#define PANEL_ROWS 256

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
    if (w->dtype == NNT_F32) {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)M, (int)N, (int)K, 1.0f, xd, (int)K,
                    (const float *)w->data, (int)K, 0.0f, yd, (int)N);
        return NNT_OK;
    }
    if (w->dtype != NNT_BF16 && w->dtype != NNT_F16)
        return cpu_error(err, NNT_ERR_UNSUPPORTED, "cpu linear: weight dtype %d is not F32, BF16 or F16", (int)w->dtype);
    float *panel;
    int64_t rows = N < PANEL_ROWS ? N : PANEL_ROWS;
    if ((st = cpu_scratch(c, (size_t)(rows * K), &panel, err)) != NNT_OK) return st;
    for (int64_t n0 = 0; n0 < N; n0 += rows) {
        int64_t nr = N - n0 < rows ? N - n0 : rows;
#pragma omp parallel for num_threads(c->threads) schedule(static)
        for (int64_t r = 0; r < nr; r++)
            for (int64_t k = 0; k < K; k++) panel[r * K + k] = cpu_load(w->data, w->dtype, (n0 + r) * K + k);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)M, (int)nr, (int)K, 1.0f, xd, (int)K, panel,
                    (int)K, 0.0f, yd + n0, (int)N);
    }
    return NNT_OK;
}
