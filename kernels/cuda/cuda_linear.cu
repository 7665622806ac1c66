/* cuda_linear.cu - the cuda backend's matrix product y = x . w^T on weights in their stored
 * encoding (F32, BF16, F16, FP8 e4m3 and FP4 e2m1 with block scales); no widened copy of a weight
 * is ever made.
 *
 * Float32 products. Few rows of x (M <= FEW_ROWS: decoding, experts that receive few tokens): one
 * warp per weight row streams the row once, 16 bytes per lane per step, decodes the codes in
 * registers and accumulates in float32; each 16-byte chunk lies inside one scale block, so its
 * partial sum is multiplied by the block's scale once. Rows whose length or address does not
 * allow 16-byte loads go element by element. More rows: an F32 weight goes to cublasSgemm as it
 * is; any other is decoded a tile of rows at a time into the scratch (at most the context's
 * tile_bytes, at least one row) and each tile multiplied by cublasSgemm into its columns of y.
 *
 * Bfloat16 products: NNT_TENSOR_BF16_PRODUCTS on w or NNT_TENSOR_BF16_VALUES on y, as the cpu
 * backend defines them - x rounded to bfloat16, every decoded and scaled weight value rounded to
 * bfloat16 as torch's bfloat16 copy of the weight holds it (a no-op for BF16 weights and for FP8 /
 * FP4 codes under E8M0 scales, which are bfloat16 numbers already), float32 accumulation, y
 * rounded. Few rows: x is rounded into the scratch and the streaming kernel rounds each weight
 * value it decodes (value times its block's scale, then the rounding) before the product. More
 * rows: x is rounded to bfloat16 bits in the scratch and every weight runs on bfloat16 tensor
 * cores (cublasGemmEx, bf16 x bf16, CUBLAS_COMPUTE_32F, float32 output): a BF16 weight as it is,
 * any other decoded into bfloat16 tiles (cuda_convert.cu rounds each value). y is rounded in place
 * at the end. cuBLASLt's block-scaled FP8 products are not used. */
#include <limits.h>

#include "cuda_weights.cuh"

/* Rows of x up to which the streaming kernel serves a product. */
#define FEW_ROWS 8

/* ---- few-row products ---- */

/* The V = 128 / dt_bits(DT) codes of a 16-byte chunk, in column order. */
template <int DT> __device__ __forceinline__ void unpack16(const uint4 &raw, float *v)
{
    const uint32_t u[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
    for (int j = 0; j < 4; j++) {
        if (DT == NNT_F32) {
            v[j] = __uint_as_float(u[j]);
        } else if (DT == NNT_BF16) {
            v[2 * j] = __uint_as_float(u[j] << 16);
            v[2 * j + 1] = __uint_as_float(u[j] & 0xffff0000u);
        } else if (DT == NNT_F16) {
            v[2 * j] = dec_f16(u[j] & 0xffffu);
            v[2 * j + 1] = dec_f16(u[j] >> 16);
        } else if (DT == NNT_F8_E4M3) {
#pragma unroll
            for (int k = 0; k < 4; k++) v[4 * j + k] = dec_fp8((u[j] >> (8 * k)) & 0xffu);
        } else {
#pragma unroll
            for (int k = 0; k < 8; k++) v[8 * j + k] = dec_fp4((u[j] >> (4 * k)) & 0xfu);
        }
    }
}

/* x [M, K] F32 (already rounded in bfloat16 mode), w [N, K] of dtype DT -> y [M, N] F32, rounded
 * to bfloat16 when round_y. rnd: each decoded weight value, times its block's scale, is rounded
 * to bfloat16 before it multiplies (bfloat16 products on a weight whose values are not all
 * bfloat16 numbers); the scale then no longer multiplies the partial sums. One warp per weight
 * row n (ROW_LOOP). vec: the weight's rows and x's rows start on 16-byte boundaries, K is a
 * multiple of V and (encoded) block_cols too. Column blocks are found by 32-bit division (the
 * caller checked K <= INT_MAX). */
template <int DT, int M>
__global__ void k_gemv(const float *__restrict__ x, cuda_wview w, float *__restrict__ y, int vec, int round_y,
                       int rnd)
{
    constexpr int V = 128 / dt_bits(DT);
    const int64_t N = w.rows, K = w.cols;
    const int lane = threadIdx.x & 31;
    ROW_LOOP(n, N)
    {
        const uint8_t *row = wrow<DT>(w, n);
        const int64_t g = dt_scaled(DT) ? wgrid_row(w, n) : 0;
        float acc[M];
#pragma unroll
        for (int m = 0; m < M; m++) acc[m] = 0.0f;
        if (vec) {
            const int64_t chunks = K / V;
            for (int64_t q = lane; q < chunks; q += 32) {
                float wv[V];
                unpack16<DT>(__ldg((const uint4 *)row + q), wv);
                const int64_t c0 = q * V;
                const float s =
                    dt_scaled(DT) ? scale_get(w.scale, (int)w.scale_dtype, g + (uint32_t)c0 / (uint32_t)w.block_cols)
                                  : 1.0f;
                if (rnd) {
#pragma unroll
                    for (int j = 0; j < V; j++) wv[j] = round_bf16(dt_scaled(DT) ? wv[j] * s : wv[j]);
                }
#pragma unroll
                for (int m = 0; m < M; m++) {
                    const float4 *xp = (const float4 *)(x + m * K + c0);
                    float part = 0.0f;
#pragma unroll
                    for (int j = 0; j < V / 4; j++) {
                        float4 xv = __ldg(xp + j);
                        part += xv.x * wv[4 * j] + xv.y * wv[4 * j + 1] + xv.z * wv[4 * j + 2] + xv.w * wv[4 * j + 3];
                    }
                    acc[m] += dt_scaled(DT) && !rnd ? part * s : part;
                }
            }
        } else {
            for (int64_t c = lane; c < K; c += 32) {
                float wv = dec_at<DT>(row, c);
                if (dt_scaled(DT)) wv *= scale_get(w.scale, (int)w.scale_dtype, g + (uint32_t)c / (uint32_t)w.block_cols);
                if (rnd) wv = round_bf16(wv);
#pragma unroll
                for (int m = 0; m < M; m++) acc[m] += __ldg(x + m * K + c) * wv;
            }
        }
#pragma unroll
        for (int m = 0; m < M; m++) {
            float v = warp_sum_f(acc[m]);
            if (lane == 0) y[m * N + n] = round_y ? round_bf16(v) : v;
        }
    }
}

template <int DT>
static void launch_gemv(cudaStream_t s, const float *x, int64_t M, const cuda_wview &w, float *y, int vec, int round_y,
                        int rnd)
{
    unsigned int g = grid_rows(w.rows);
    switch (M) {
    case 1: k_gemv<DT, 1><<<g, CUDA_THREADS, 0, s>>>(x, w, y, vec, round_y, rnd); break;
    case 2: k_gemv<DT, 2><<<g, CUDA_THREADS, 0, s>>>(x, w, y, vec, round_y, rnd); break;
    case 3: k_gemv<DT, 3><<<g, CUDA_THREADS, 0, s>>>(x, w, y, vec, round_y, rnd); break;
    case 4: k_gemv<DT, 4><<<g, CUDA_THREADS, 0, s>>>(x, w, y, vec, round_y, rnd); break;
    case 5: k_gemv<DT, 5><<<g, CUDA_THREADS, 0, s>>>(x, w, y, vec, round_y, rnd); break;
    case 6: k_gemv<DT, 6><<<g, CUDA_THREADS, 0, s>>>(x, w, y, vec, round_y, rnd); break;
    case 7: k_gemv<DT, 7><<<g, CUDA_THREADS, 0, s>>>(x, w, y, vec, round_y, rnd); break;
    default: k_gemv<DT, 8><<<g, CUDA_THREADS, 0, s>>>(x, w, y, vec, round_y, rnd); break;
    }
}

/* y [M, N] = x [M, K] . w^T with M in 1..FEW_ROWS; round_y and rnd as for k_gemv */
static nnt_status few_rows(cuda_ctx *c, const float *x, int64_t M, const cuda_wview *w, float *y, int round_y,
                           int rnd, nnt_error *err)
{
    const int64_t V = 128 / dt_bits((int)w->dtype);
    int vec = (uintptr_t)w->data % 16 == 0 && (uintptr_t)x % 16 == 0 && w->cols % V == 0 &&
              (!dt_scaled((int)w->dtype) || w->block_cols % V == 0);
    switch (w->dtype) {
    case NNT_F32: launch_gemv<NNT_F32>(c->stream, x, M, *w, y, vec, round_y, rnd); break;
    case NNT_BF16: launch_gemv<NNT_BF16>(c->stream, x, M, *w, y, vec, round_y, 0); break; /* bfloat16 already */
    case NNT_F16: launch_gemv<NNT_F16>(c->stream, x, M, *w, y, vec, round_y, rnd); break;
    case NNT_F8_E4M3: launch_gemv<NNT_F8_E4M3>(c->stream, x, M, *w, y, vec, round_y, rnd); break;
    default: launch_gemv<NNT_F4_E2M1>(c->stream, x, M, *w, y, vec, round_y, rnd); break;
    }
    CUDA_LAUNCHED();
    return NNT_OK;
}

/* ---- many-row products ---- */

static size_t align256(size_t b)
{
    return (b + 255) & ~(size_t)255;
}

/* Weight rows per decoded tile of `esz`-byte elements: as many as tile_bytes holds (at least
 * one, at most N), a multiple of 64 when that leaves more than one tile. */
static int64_t tile_rows(const cuda_ctx *c, int64_t N, int64_t K, size_t esz)
{
    int64_t rows = (int64_t)(c->tile_bytes / ((size_t)K * esz));
    if (rows < 1) rows = 1;
    if (rows >= N) return N;
    if (rows > 64) rows -= rows % 64;
    return rows;
}

/* x [M, K] F32, w [N, K] any encoding, y [M, N] F32; see the file comment for the paths. */
extern "C" nnt_status cuda_linear(void *ctx, const nnt_tensor *x, const nnt_tensor *w, nnt_tensor *y, nnt_error *err)
{
    cuda_ctx *c = (cuda_ctx *)ctx;
    nnt_status st;
    cuda_wview wv;
    if ((st = cuda_check("linear", "x", x, NNT_F32, 2, err)) != NNT_OK) return st;
    if ((st = cuda_weight_view("linear", "w", w, &wv, err)) != NNT_OK) return st;
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
    float *yd = (float *)y->data;
    if (K == 0) {
        CUDA_CHECK(cudaMemsetAsync(yd, 0, (size_t)(M * N) * sizeof(float), c->stream));
        return cuda_done(c, "linear", err);
    }
    /* the weight asks for bfloat16 products, or y holds bfloat16 values (the same rounding) */
    const int bf16 = (w->flags & NNT_TENSOR_BF16_PRODUCTS) || cuda_bf16(y);
    const int scaled = dt_scaled((int)wv.dtype);
    /* decoded values that are bfloat16 numbers already: BF16, and codes times powers of two */
    const int exact16 = wv.dtype == NNT_BF16 || (scaled && wv.scale_dtype == NNT_F8_E8M0);
    /* bfloat16 tensor cores: every bfloat16 product past FEW_ROWS */
    const int tensor16 = bf16 && M > FEW_ROWS;
    /* decoded tiles past FEW_ROWS: every weight but the one cuBLAS reads as stored (F32 in
     * float32, BF16 on the tensor cores) */
    const int tiled = M > FEW_ROWS && wv.dtype != (tensor16 ? NNT_BF16 : NNT_F32);
    const size_t esz = tensor16 ? 2 : 4;
    const int64_t rows = tiled ? tile_rows(c, N, K, esz) : 0;
    /* scratch: x rounded (bfloat16 bits for the tensor cores, float32 for the streaming kernel),
     * then the weight tile */
    const size_t xbytes = bf16 ? align256((size_t)(M * K) * esz) : 0, tbytes = (size_t)(rows * K) * esz;
    void *scratch = NULL;
    if (xbytes + tbytes > 0 && (st = cuda_scratch(c, xbytes + tbytes, &scratch, err)) != NNT_OK) return st;
    const void *xd = x->data;
    if (bf16) {
        if ((st = cuda_round_bf16(c, (const float *)x->data, scratch, M * K, tensor16, err)) != NNT_OK) return st;
        xd = scratch;
    }
    void *tile = (char *)scratch + xbytes;
    const float one = 1.0f, zero = 0.0f;
    if (M <= FEW_ROWS) {
        if ((st = few_rows(c, (const float *)xd, M, &wv, yd, bf16, bf16 && !exact16, err)) != NNT_OK) return st;
        return cuda_done(c, "linear", err);
    }
    /* Row-major y = x w^T is column-major y^T = w x^T: cuBLAS sees a block of w rows as a K x nr
     * column-major matrix (transposed to nr x K), x as K x M, and that block's columns of y as
     * an nr x M matrix with leading dimension N. */
    if (!tiled) {
        if (tensor16)
            CUBLAS_CHECK(cublasGemmEx(c->blas, CUBLAS_OP_T, CUBLAS_OP_N, (int)N, (int)M, (int)K, &one, wv.data,
                                      CUDA_R_16BF, (int)K, xd, CUDA_R_16BF, (int)K, &zero, yd, CUDA_R_32F, (int)N,
                                      CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
        else
            CUBLAS_CHECK(cublasSgemm(c->blas, CUBLAS_OP_T, CUBLAS_OP_N, (int)N, (int)M, (int)K, &one,
                                     (const float *)wv.data, (int)K, (const float *)xd, (int)K, &zero, yd, (int)N));
    } else {
        for (int64_t n0 = 0; n0 < N; n0 += rows) {
            int64_t nr = N - n0 < rows ? N - n0 : rows;
            if ((st = cuda_decode_rows(c, &wv, n0, nr, tile, tensor16, err)) != NNT_OK) return st;
            if (tensor16)
                CUBLAS_CHECK(cublasGemmEx(c->blas, CUBLAS_OP_T, CUBLAS_OP_N, (int)nr, (int)M, (int)K, &one, tile,
                                          CUDA_R_16BF, (int)K, xd, CUDA_R_16BF, (int)K, &zero, yd + n0, CUDA_R_32F,
                                          (int)N, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
            else
                CUBLAS_CHECK(cublasSgemm(c->blas, CUBLAS_OP_T, CUBLAS_OP_N, (int)nr, (int)M, (int)K, &one,
                                         (const float *)tile, (int)K, (const float *)xd, (int)K, &zero, yd + n0,
                                         (int)N));
        }
    }
    if (bf16 && (st = cuda_round_bf16(c, yd, yd, M * N, 0, err)) != NNT_OK) return st;
    return cuda_done(c, "linear", err);
}
