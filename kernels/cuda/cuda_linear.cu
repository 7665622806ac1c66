/* cuda_linear.cu - the cuda backend's matrix product y = x . w^T through cublasSgemm. Prepared
 * weights are F32; a BF16/F16 weight handed in directly is widened into the scratch first. */
#include <limits.h>

#include "cuda_device.cuh"

/* x [M, K] F32, w [N, K] F32/BF16/F16, y [M, N] F32.
 * Row-major y = x w^T is column-major y^T = w x^T: cuBLAS sees w as a K x N column-major
 * matrix (transposed to N x K) and x as K x M. */
extern "C" nnt_status cuda_linear(void *ctx, const nnt_tensor *x, const nnt_tensor *w, nnt_tensor *y, nnt_error *err)
{
    cuda_ctx *c = (cuda_ctx *)ctx;
    nnt_status st;
    if ((st = cuda_check("linear", "x", x, NNT_F32, 2, err)) != NNT_OK) return st;
    if ((st = cuda_check("linear", "w", w, NNT_DTYPE_INVALID, 2, err)) != NNT_OK) return st;
    if ((st = cuda_check("linear", "y", y, NNT_F32, 2, err)) != NNT_OK) return st;
    int64_t M = x->shape[0], K = x->shape[1], N = w->shape[0];
    if (w->shape[1] != K || y->shape[0] != M || y->shape[1] != N)
        return cuda_error(err, NNT_ERR_SHAPE, "cuda linear: x [%lld, %lld], w [%lld, %lld], y [%lld, %lld] do not chain",
                          (long long)M, (long long)K, (long long)w->shape[0], (long long)w->shape[1],
                          (long long)y->shape[0], (long long)y->shape[1]);
    if (M > INT_MAX || N > INT_MAX || K > INT_MAX)
        return cuda_error(err, NNT_ERR_UNSUPPORTED, "cuda linear: dimensions above %d", INT_MAX);
    if (M == 0 || N == 0) return NNT_OK;
    CUDA_CHECK(cudaSetDevice(c->device));
    if (K == 0) {
        CUDA_CHECK(cudaMemsetAsync(y->data, 0, (size_t)(M * N) * sizeof(float), c->stream));
        return cuda_done(c, "linear", err);
    }
    const float *wd = (const float *)w->data;
    if (w->dtype != NNT_F32) {
        if (w->dtype != NNT_BF16 && w->dtype != NNT_F16)
            return cuda_error(err, NNT_ERR_UNSUPPORTED, "cuda linear: weight dtype %d is not F32, BF16 or F16",
                              (int)w->dtype);
        void *tmp;
        if ((st = cuda_scratch(c, (size_t)(N * K) * sizeof(float), &tmp, err)) != NNT_OK) return st;
        if ((st = cuda_widen(c, w->data, w->dtype, (float *)tmp, N * K, err)) != NNT_OK) return st;
        wd = (const float *)tmp;
    }
    const float one = 1.0f, zero = 0.0f;
    CUBLAS_CHECK(cublasSgemm(c->blas, CUBLAS_OP_T, CUBLAS_OP_N, (int)N, (int)M, (int)K, &one, wd, (int)K,
                             (const float *)x->data, (int)K, &zero, (float *)y->data, (int)N));
    return cuda_done(c, "linear", err);
}
