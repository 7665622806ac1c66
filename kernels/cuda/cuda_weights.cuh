/* cuda_weights.cuh - device-side decoding of weights in their stored encoding, shared by the
 * products (cuda_linear.cu), the tile decoder (cuda_convert.cu) and the embedding look-up
 * (cuda_elementwise.cu).
 *
 * Every decoder gives the exact float32 value of a finite code, by integer bit assembly and
 * without subnormal float arithmetic, so the results do not depend on flush-to-zero:
 *   BF16  the 16 bits are the high half of the float;
 *   F16   the hardware conversion (__half2float);
 *   FP8   e4m3fn: s.eeee.mmm, bias 7; exponent 0 is m / 8 * 2^-6; the NaN codes 0x7f / 0xff read
 *         as 480, as on the cpu backend (checkpoints hold none);
 *   FP4   e2m1: s.ee.m, bias 1; magnitudes 0, 0.5, 1, 1.5, 2, 3, 4, 6; two codes per byte, the
 *         low nibble the even column.
 * Scales: F32, BF16, F16, or E8M0 (2^(b - 127); 0 is 2^-127, 255 NaN). An element of an encoded
 * weight is decode(code) * scale of its block. Sources: IEEE 754 binary16; the OCP 8-bit floating
 * point specification (e4m3fn); OCP Microscaling Formats v1.0 (e2m1, e8m0). */
#ifndef NNT_CUDA_WEIGHTS_CUH
#define NNT_CUDA_WEIGHTS_CUH

#include "cuda_device.cuh"

/* ---- single codes ---- */

/* FP8 e4m3 byte -> float, exact */
__device__ __forceinline__ float dec_fp8(uint32_t b)
{
    uint32_t e = (b >> 3) & 15u, m = b & 7u;
    float mag = e ? __uint_as_float(((e + 120u) << 23) | (m << 20)) : (float)m * 0x1p-9f;
    return (b & 0x80u) ? -mag : mag;
}

/* FP4 e2m1 nibble -> float, exact */
__device__ __forceinline__ float dec_fp4(uint32_t q)
{
    uint32_t e = (q >> 1) & 3u, m = q & 1u;
    float mag = e ? __uint_as_float(((e + 126u) << 23) | (m << 22)) : (float)m * 0.5f;
    return (q & 8u) ? -mag : mag;
}

__device__ __forceinline__ float dec_bf16(uint32_t h)
{
    return __uint_as_float(h << 16);
}

__device__ __forceinline__ float dec_f16(uint32_t h)
{
    return __half2float(__ushort_as_half((unsigned short)h));
}

/* Element c of a weight row (row: the row's first byte) of dtype DT (an nnt_dtype). */
template <int DT> __device__ __forceinline__ float dec_at(const uint8_t *row, int64_t c)
{
    if (DT == NNT_F32) return ((const float *)row)[c];
    if (DT == NNT_BF16) return dec_bf16(((const uint16_t *)row)[c]);
    if (DT == NNT_F16) return dec_f16(((const uint16_t *)row)[c]);
    if (DT == NNT_F8_E4M3) return dec_fp8(row[c]);
    uint32_t b = row[c >> 1];
    return dec_fp4((c & 1) ? b >> 4 : b & 15u);
}

/* The same with the dtype known only at run time (F32, BF16, F16, F8_E4M3, F4_E2M1). */
__device__ __forceinline__ float dec_at_rt(int dt, const uint8_t *row, int64_t c)
{
    switch (dt) {
    case NNT_F32: return dec_at<NNT_F32>(row, c);
    case NNT_BF16: return dec_at<NNT_BF16>(row, c);
    case NNT_F16: return dec_at<NNT_F16>(row, c);
    case NNT_F8_E4M3: return dec_at<NNT_F8_E4M3>(row, c);
    default: return dec_at<NNT_F4_E2M1>(row, c);
    }
}

/* Entry i of a scale grid of dtype sdt. */
__device__ __forceinline__ float scale_get(const void *grid, int sdt, int64_t i)
{
    switch (sdt) {
    case NNT_F32: return ((const float *)grid)[i];
    case NNT_BF16: return dec_bf16(((const uint16_t *)grid)[i]);
    case NNT_F16: return dec_f16(((const uint16_t *)grid)[i]);
    default: { /* F8_E8M0 */
        uint32_t b = ((const uint8_t *)grid)[i];
        return __uint_as_float(b == 255u ? 0x7fc00000u : b == 0u ? 0x00400000u : b << 23);
    }
    }
}

/* Encoded weights carry scales; the others decode to their values alone. */
__host__ __device__ constexpr bool dt_scaled(int dt)
{
    return dt == NNT_F8_E4M3 || dt == NNT_F4_E2M1;
}

/* Bits of one code of the weight dtypes above. */
__host__ __device__ constexpr int dt_bits(int dt)
{
    return dt == NNT_F32 ? 32 : dt == NNT_F8_E4M3 ? 8 : dt == NNT_F4_E2M1 ? 4 : 16;
}

/* The first byte of row r of w (r * cols is even for FP4: its column count is). */
template <int DT> __device__ __forceinline__ const uint8_t *wrow(const cuda_wview &w, int64_t r)
{
    return (const uint8_t *)w.data + r * w.cols * dt_bits(DT) / 8;
}

__device__ __forceinline__ const uint8_t *wrow_rt(const cuda_wview &w, int64_t r)
{
    return (const uint8_t *)w.data + r * w.cols * dt_bits((int)w.dtype) / 8;
}

/* The scales of row r of w start at this grid index (add the column block). */
__device__ __forceinline__ int64_t wgrid_row(const cuda_wview &w, int64_t r)
{
    return (r + w.row0) / w.block_rows * w.grid_cols;
}

/* ---- tiles ---- */

/* Stores v into a float32 tile as it is, or into a bfloat16 tile rounded to nearest even
 * (bf16_bits, cuda_device.cuh). */
__device__ __forceinline__ void put_value(float *d, float v)
{
    *d = v;
}

__device__ __forceinline__ void put_value(uint16_t *d, float v)
{
    *d = (uint16_t)bf16_bits(v);
}

#endif
