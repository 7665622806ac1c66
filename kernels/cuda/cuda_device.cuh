/* cuda_device.cuh - device-side helpers the cuda_*.cu kernels share: element loads of the plain
 * weight dtypes (F32, BF16, F16 as stored; encoded weights are read through cuda_weights.cuh),
 * bfloat16 rounding (the roundings ops take on outputs flagged NNT_TENSOR_BF16_VALUES), warp
 * and block reductions, grid sizes for grid-stride loops. */
#ifndef NNT_CUDA_DEVICE_CUH
#define NNT_CUDA_DEVICE_CUH

#include <cuda_fp16.h>
#include <math.h>
#include <stdint.h>

#include "cuda_internal.h"

/* Threads per block of the elementwise kernels; a multiple of 32. */
#define CUDA_THREADS 256
/* Rows handled per block by the warp-per-row kernels (CUDA_THREADS / 32). */
#define ROWS_PER_BLOCK (CUDA_THREADS / 32)

/* Blocks for a grid-stride loop over n items; the loop covers what the grid does not. */
static inline unsigned int grid_for(int64_t n)
{
    int64_t b = (n + CUDA_THREADS - 1) / CUDA_THREADS;
    if (b < 1) b = 1;
    if (b > 1048576) b = 1048576;
    return (unsigned int)b;
}

/* Blocks for a warp-per-row kernel over `rows` rows. */
static inline unsigned int grid_rows(int64_t rows)
{
    int64_t b = (rows + ROWS_PER_BLOCK - 1) / ROWS_PER_BLOCK;
    if (b < 1) b = 1;
    if (b > 1048576) b = 1048576;
    return (unsigned int)b;
}

#define GRID_LOOP(i, n)                                                                                                \
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < (int64_t)(n);                                \
         i += (int64_t)gridDim.x * blockDim.x)

/* Warp-per-row loop: `row` walks the rows of this warp, `lane` is the thread's place in it. */
#define ROW_LOOP(row, rows)                                                                                            \
    for (int64_t row = (int64_t)blockIdx.x * ROWS_PER_BLOCK + (threadIdx.x >> 5); row < (int64_t)(rows);              \
         row += (int64_t)gridDim.x * ROWS_PER_BLOCK)

/* Element i of a plain weight of dtype dt (F32, BF16, F16; I32, I64), as float (the cpu
 * backend's cpu_load); NaN for any other dtype, which the ops refuse before launching. */
__device__ __forceinline__ float load_any(const void *p, int dt, int64_t i)
{
    switch (dt) {
    case NNT_F32: return ((const float *)p)[i];
    case NNT_BF16: return __uint_as_float((unsigned int)((const uint16_t *)p)[i] << 16);
    case NNT_F16: return __half2float(((const __half *)p)[i]);
    case NNT_I32: return (float)((const int32_t *)p)[i];
    case NNT_I64: return (float)((const int64_t *)p)[i];
    default: return __int_as_float(0x7fc00000); /* NaN */
    }
}

/* ---- bfloat16 rounding ---- */

/* The bfloat16 nearest f (ties to even) as its 16 bits. A NaN stays a NaN (made quiet), an
 * infinity stays, a finite value past the largest bfloat16 becomes infinite: the cpu backend's
 * cpu_r16, bit for bit, done on the integer bits so flush-to-zero cannot touch it. */
__device__ __forceinline__ uint32_t bf16_bits(float f)
{
    uint32_t u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (u | 0x00400000u) >> 16;
    return (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
}

/* f rounded to the nearest bfloat16 (ties to even), as a float. */
__device__ __forceinline__ float round_bf16(float f)
{
    return __uint_as_float(bf16_bits(f) << 16);
}

/* round_bf16(f) when r16 is set, else f unchanged. */
__device__ __forceinline__ float r16_if(int r16, float f)
{
    return r16 ? round_bf16(f) : f;
}

__device__ __forceinline__ double warp_sum_d(double v)
{
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ float warp_sum_f(float v)
{
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

/* The largest value of the warp; NaN never wins a comparison (as `a > b ? a : b` on the cpu). */
__device__ __forceinline__ float warp_max_f(float v)
{
    for (int o = 16; o > 0; o >>= 1) {
        float u = __shfl_xor_sync(0xffffffffu, v, o);
        v = u > v ? u : v;
    }
    return v;
}

/* Block-wide sum (blockDim.x a multiple of 32); every thread receives it. sh: 32 doubles of
 * shared memory, free to reuse once the call returns. */
__device__ __forceinline__ double block_sum_d(double v, double *sh)
{
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = (int)(blockDim.x >> 5);
    v = warp_sum_d(v);
    __syncthreads(); /* an earlier call's readers are done with sh */
    if (lane == 0) sh[w] = v;
    __syncthreads();
    if (w == 0) {
        double r = lane < nw ? sh[lane] : 0.0;
        r = warp_sum_d(r);
        if (lane == 0) sh[0] = r;
    }
    __syncthreads();
    return sh[0];
}

/* Block-wide maximum, as warp_max_f. sh: 32 floats of shared memory. */
__device__ __forceinline__ float block_max_f(float v, float *sh)
{
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = (int)(blockDim.x >> 5);
    v = warp_max_f(v);
    __syncthreads();
    if (lane == 0) sh[w] = v;
    __syncthreads();
    if (w == 0) {
        float r = lane < nw ? sh[lane] : -INFINITY;
        r = warp_max_f(r);
        if (lane == 0) sh[0] = r;
    }
    __syncthreads();
    return sh[0];
}

__device__ __forceinline__ float sigmoidf_(float x)
{
    return 1.0f / (1.0f + expf(-x));
}

#endif
