/* cpu_linear.c - the cpu backend's matrix product y = x . w^T on weights in their stored encoding
 * (F32, BF16, F16, FP8 e4m3 and FP4 e2m1 with block scales).
 *
 * Few rows of x (decoding, and experts that receive few tokens): every thread streams its own
 * block of weight rows once through registers, decoding in registers (cpu_kernels_impl.h, the
 * instruction set chosen at run time). More rows: cpu_gemm.c (a GEMM library on decoded
 * panels). No widened copy of a weight ever exists. Bfloat16 products (the weight flagged
 * NNT_TENSOR_BF16_PRODUCTS or the output NNT_TENSOR_BF16_VALUES) round the activations on the
 * way in and the results on the way out. */
#include <string.h>

#include "cpu_internal.h"

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
    int few = M <= CPU_FEW_ROWS || (M <= c->k->gemv_rows && wv.dtype != NNT_F32);
    /* the few-row kernels read x as bfloat16 numbers; cpu_gemm rounds it itself */
    if (bf16 && few && (st = cpu_round_x(c, xd, M * K, &xd, err)) != NNT_OK) return st;
    if (few) {
        /* each thread streams its own block of weight rows (a multiple of 4: the kernels' tile);
         * bfloat16 products on a weight whose values are not bfloat16 numbers round each value
         * first, as torch's bfloat16 copy of the weight holds it. Past CPU_FEW_ROWS rows of x (up
         * to the kernel table's gemv_rows; an F32 weight needs no decoding, so it goes to the GEMM
         * library) the kernels take them CPU_FEW_ROWS at a time, reading the thread's weight rows
         * again for each group. */
        int64_t chunk = ((N + c->threads - 1) / c->threads + 3) / 4 * 4;
        int flags = bf16 ? CPU_GEMV_X_BF16 | (cpu_needs_rounding(&wv) ? CPU_GEMV_ROUND : 0) : 0;
        const cpu_kernels *k = c->k;
#pragma omp parallel for num_threads(c->threads) schedule(static) if (N * K > CPU_PARALLEL_MIN)
        for (int t = 0; t < c->threads; t++) {
            int64_t n0 = t * chunk, n1 = n0 + chunk < N ? n0 + chunk : N;
            for (int64_t m0 = 0; m0 < M && n0 < n1; m0 += CPU_FEW_ROWS) {
                int64_t mg = M - m0 < CPU_FEW_ROWS ? M - m0 : CPU_FEW_ROWS;
                k->gemv(xd + m0 * K, mg, &wv, n0, n1, yd + m0 * N, N, flags);
            }
        }
    } else if ((st = cpu_gemm(c, xd, M, &wv, bf16, yd, err)) != NNT_OK) {
        return st;
    }
    if (bf16) {
        const cpu_kernels *k = c->k;
#pragma omp parallel for num_threads(c->threads) schedule(static) if (M * N > CPU_PARALLEL_MIN)
        for (int64_t m = 0; m < M; m++) k->round_bf16(yd + m * N, yd + m * N, N);
    }
    return NNT_OK;
}
