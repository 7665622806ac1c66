/* cuda_convert.cu - dtype widening on the device (BF16/F16 weights to the F32 copies the other
 * kernels read) and the start-up probe that this build has kernels for the device. */
#include <stdio.h>

#include "cuda_device.cuh"

#ifndef NNT_CUDA_ARCHS
#define NNT_CUDA_ARCHS "unknown"
#endif

/* src [n] of dtype dt -> dst [n] F32 */
__global__ void k_widen(const void *src, int dt, float *dst, int64_t n)
{
    GRID_LOOP(i, n) dst[i] = load_any(src, dt, i);
}

extern "C" nnt_status cuda_widen(cuda_ctx *c, const void *src, nnt_dtype dt, float *dst, int64_t n, nnt_error *err)
{
    if (n <= 0) return NNT_OK;
    if (dt != NNT_F32 && dt != NNT_BF16 && dt != NNT_F16)
        return cuda_error(err, NNT_ERR_UNSUPPORTED, "cuda: cannot widen dtype %d to F32", (int)dt);
    k_widen<<<grid_for(n), CUDA_THREADS, 0, c->stream>>>(src, (int)dt, dst, n);
    CUDA_LAUNCHED();
    return NNT_OK;
}

extern "C" nnt_status cuda_probe_kernels(cuda_ctx *c, nnt_error *err)
{
    cudaFuncAttributes a;
    cudaError_t e = cudaFuncGetAttributes(&a, k_widen);
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
