/* cuda_convert.cu - conversions on the device: rows of a weight decoded from their stored
 * encoding into float32 or bfloat16 tiles (the products of more than a few rows multiply such
 * tiles with cuBLAS, a bounded number of rows at a time; a bfloat16 tile holds each decoded,
 * scaled value rounded to nearest even), bfloat16 rounding of activations and results (also of
 * a whole flagged output, cuda_round_result), and the start-up probe that this build has
 * kernels for the device. */
#include <limits.h>
#include <stdio.h>

#include "cuda_weights.cuh"

#ifndef NNT_CUDA_ARCHS
#define NNT_CUDA_ARCHS "unknown"
#endif

/* w rows [r0, r0 + nr) -> dst [nr, K] (K = w.cols), float32 (OUT float) or bfloat16 bits (OUT
 * uint16_t). Blocks walk the rows along y and the columns along x, consecutive threads on
 * consecutive columns. */
template <int DT, typename OUT>
__global__ void k_decode_rows(cuda_wview w, int64_t r0, int64_t nr, OUT *dst)
{
    const int64_t K = w.cols;
    for (int64_t i = blockIdx.y; i < nr; i += gridDim.y) {
        const int64_t r = r0 + i;
        const uint8_t *row = wrow<DT>(w, r);
        const int64_t g = dt_scaled(DT) ? wgrid_row(w, r) : 0;
        OUT *d = dst + i * K;
        for (int64_t c = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; c < K; c += (int64_t)gridDim.x * blockDim.x) {
            float v = dec_at<DT>(row, c);
            /* column block by 32-bit division: K <= INT_MAX */
            if (dt_scaled(DT)) v *= scale_get(w.scale, (int)w.scale_dtype, g + (uint32_t)c / (uint32_t)w.block_cols);
            put_value(d + c, v);
        }
    }
}

template <typename OUT>
static void launch_decode(cudaStream_t s, const cuda_wview &w, int64_t r0, int64_t nr, OUT *dst)
{
    int64_t gx = (w.cols + CUDA_THREADS - 1) / CUDA_THREADS;
    dim3 g((unsigned int)(gx < 4096 ? gx : 4096), (unsigned int)(nr < 65535 ? nr : 65535));
    switch (w.dtype) {
    case NNT_F32: k_decode_rows<NNT_F32, OUT><<<g, CUDA_THREADS, 0, s>>>(w, r0, nr, dst); break;
    case NNT_BF16: k_decode_rows<NNT_BF16, OUT><<<g, CUDA_THREADS, 0, s>>>(w, r0, nr, dst); break;
    case NNT_F16: k_decode_rows<NNT_F16, OUT><<<g, CUDA_THREADS, 0, s>>>(w, r0, nr, dst); break;
    case NNT_F8_E4M3: k_decode_rows<NNT_F8_E4M3, OUT><<<g, CUDA_THREADS, 0, s>>>(w, r0, nr, dst); break;
    default: k_decode_rows<NNT_F4_E2M1, OUT><<<g, CUDA_THREADS, 0, s>>>(w, r0, nr, dst); break;
    }
}

extern "C" nnt_status cuda_decode_rows(cuda_ctx *c, const cuda_wview *w, int64_t r0, int64_t nr, void *dst,
                                       int to_bf16, nnt_error *err)
{
    if (r0 < 0 || nr < 0 || r0 + nr > w->rows)
        return cuda_error(err, NNT_ERR_INTERNAL, "cuda: decoding rows [%lld, %lld) of a weight of %lld rows",
                          (long long)r0, (long long)(r0 + nr), (long long)w->rows);
    if (nr == 0 || w->cols == 0) return NNT_OK;
    if (w->cols > INT_MAX)
        return cuda_error(err, NNT_ERR_UNSUPPORTED, "cuda: decoding rows of %lld columns (above %d)", (long long)w->cols,
                          INT_MAX);
    if (to_bf16)
        launch_decode(c->stream, *w, r0, nr, (uint16_t *)dst);
    else
        launch_decode(c->stream, *w, r0, nr, (float *)dst);
    CUDA_LAUNCHED();
    return NNT_OK;
}

/* src [n] -> dst [n] rounded to bfloat16: float32 values (OUT float, dst may be src) or the
 * bfloat16 bits (OUT uint16_t) */
template <typename OUT>
__global__ void k_round_bf16(const float *src, OUT *dst, int64_t n)
{
    GRID_LOOP(i, n) put_value(dst + i, round_bf16(src[i]));
}

extern "C" nnt_status cuda_round_bf16(cuda_ctx *c, const float *src, void *dst, int64_t n, int to_bf16, nnt_error *err)
{
    if (n <= 0) return NNT_OK;
    if (to_bf16)
        k_round_bf16<uint16_t><<<grid_for(n), CUDA_THREADS, 0, c->stream>>>(src, (uint16_t *)dst, n);
    else
        k_round_bf16<float><<<grid_for(n), CUDA_THREADS, 0, c->stream>>>(src, (float *)dst, n);
    CUDA_LAUNCHED();
    return NNT_OK;
}

extern "C" nnt_status cuda_round_result(cuda_ctx *c, nnt_tensor *t, nnt_error *err)
{
    if (!cuda_bf16(t) || t->dtype != NNT_F32) return NNT_OK;
    return cuda_round_bf16(c, (const float *)t->data, t->data, nnt_tensor_numel(t), 0, err);
}

extern "C" nnt_status cuda_probe_kernels(cuda_ctx *c, nnt_error *err)
{
    cudaFuncAttributes a;
    cudaError_t e = cudaFuncGetAttributes(&a, k_round_bf16<float>);
    if (e == cudaSuccess) return NNT_OK;
    (void)cudaGetLastError();
    int major = 0, minor = 0;
    (void)cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, c->device);
    (void)cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, c->device);
    (void)cudaGetLastError();
    return cuda_error(err, NNT_ERR_BACKEND,
                      "the cuda backend has no kernels for device %d (compute capability %d.%d); it was built for "
                      "CUDA architectures %s - rebuild with -DCMAKE_CUDA_ARCHITECTURES=%d%d: %s",
                      c->device, major, minor, NNT_CUDA_ARCHS, major, minor, cudaGetErrorString(e));
}
