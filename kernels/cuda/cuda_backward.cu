/* cuda_backward.cu - the cuda backend's backward ops of the dense and feed-forward kernels
 * (nnt_backend.h, "backward"): the transposed matrix product on weights in their stored
 * encoding, RMSNorm, gradient accumulation, the axis swap, SwiGLU and the column copy. Each adds
 * into the gradients it is handed; a NULL gradient output is skipped; the bfloat16 flags are
 * ignored (gradients are float32, the derivative of the float32 forward). Mirrors
 * kernels/cpu/cpu_backward.c op for op, the row sums in double where the cpu takes them so.
 *
 * linear_backward, dx [M, K] += dy [M, N] . w [N, K]: an F32 weight goes to one cublasSgemm with
 * beta = 1 as it is stored; every other encoding (BF16, F16, FP8 e4m3 and FP4 e2m1 with block
 * scales) goes to a tiled kernel that decodes each weight element in registers as it loads it
 * into a shared-memory tile of 16 x 64 values (the same decode and scale as the forward,
 * cuda_weights.cuh) - never a widened copy of the weight in device memory. A block owns 64 rows
 * of dx and 64 of its columns, so the weight is read once for every 64 rows of dy; when that
 * leaves the device short of blocks (few rows: decoding, small experts) the weight's rows are
 * split among blocks along N and their partial sums added into dx atomically. */
#include <limits.h>
#include <stdio.h>

#include "cuda_weights.cuh"

static nnt_status need_f32(const char *op, const char *arg, const nnt_tensor *t, int64_t n, nnt_error *err)
{
    if (!t || !t->data) return cuda_error(err, NNT_ERR_INVALID_ARGUMENT, "cuda %s: %s is missing", op, arg);
    if (t->dtype != NNT_F32 || nnt_tensor_numel(t) != n)
        return cuda_error(err, NNT_ERR_SHAPE, "cuda %s: %s must be F32 with %lld entries (has dtype %d, %lld)", op, arg,
                          (long long)n, (int)t->dtype, (long long)nnt_tensor_numel(t));
    return NNT_OK;
}

/* ---- linear_backward ---- */

#define LB_TM 64 /* rows of dx per block */
#define LB_TK 64 /* columns of dx per block */
#define LB_TN 16 /* weight rows per step */
#define LB_THREADS 256
#define LB_TARGET_BLOCKS 512 /* split N until the grid has about this many blocks */

/* dy [M, N] F32, w [N, K] of dtype DT (not F32: cuBLAS takes that), dx [M, K] F32 +=.
 * Grid (ceil(K / 64), ceil(M / 64), splits); block z takes weight rows [z nps, (z + 1) nps).
 * 256 threads as 16 x 16, each owning a 4 x 4 block of dx (rows ty + 16 i, columns tx + 16 j).
 * Per step: dy's [64, 16] tile and the decoded weight's [16, 64] tile in shared memory (each
 * weight element decoded once per block, times its block's scale), float32 products. atomic: dx
 * is shared with the other splits (atomicAdd); else each element has one writer. */
template <int DT>
__global__ void __launch_bounds__(LB_THREADS)
    k_linear_bwd(const float *__restrict__ dy, cuda_wview w, float *__restrict__ dx, int64_t M, int64_t nps,
                 int atomic)
{
    __shared__ float sg[LB_TN][LB_TM + 1];
    __shared__ float sw[LB_TN][LB_TK];
    const int64_t N = w.rows, K = w.cols;
    const int tid = threadIdx.x, tx = tid & 15, ty = tid >> 4;
    const int64_t m0 = (int64_t)blockIdx.y * LB_TM, k0 = (int64_t)blockIdx.x * LB_TK;
    const int64_t nb = (int64_t)blockIdx.z * nps, ne = nb + nps < N ? nb + nps : N;
    float acc[4][4];
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
        for (int j = 0; j < 4; j++) acc[i][j] = 0.0f;
    for (int64_t n0 = nb; n0 < ne; n0 += LB_TN) {
        for (int e = tid; e < LB_TM * LB_TN; e += LB_THREADS) {
            int mm = e / LB_TN, nn = e % LB_TN;
            int64_t m = m0 + mm, n = n0 + nn;
            sg[nn][mm] = m < M && n < ne ? dy[m * N + n] : 0.0f;
        }
        for (int e = tid; e < LB_TN * LB_TK; e += LB_THREADS) {
            int nn = e / LB_TK, kk = e % LB_TK;
            int64_t n = n0 + nn, k = k0 + kk;
            float v = 0.0f;
            if (n < ne && k < K) {
                v = dec_at<DT>(wrow<DT>(w, n), k);
                if (dt_scaled(DT)) v *= scale_get(w.scale, (int)w.scale_dtype, wgrid_row(w, n) + k / w.block_cols);
            }
            sw[nn][kk] = v;
        }
        __syncthreads();
#pragma unroll
        for (int nn = 0; nn < LB_TN; nn++) {
            float a[4], b[4];
#pragma unroll
            for (int i = 0; i < 4; i++) a[i] = sg[nn][ty + 16 * i];
#pragma unroll
            for (int j = 0; j < 4; j++) b[j] = sw[nn][tx + 16 * j];
#pragma unroll
            for (int i = 0; i < 4; i++)
#pragma unroll
                for (int j = 0; j < 4; j++) acc[i][j] += a[i] * b[j];
        }
        __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < 4; i++) {
        int64_t m = m0 + ty + 16 * i;
        if (m >= M) continue;
#pragma unroll
        for (int j = 0; j < 4; j++) {
            int64_t k = k0 + tx + 16 * j;
            if (k >= K) continue;
            if (atomic)
                atomicAdd(dx + m * K + k, acc[i][j]);
            else
                dx[m * K + k] += acc[i][j];
        }
    }
}

template <int DT>
static void launch_linear_bwd(cudaStream_t s, dim3 grid, const float *dy, const cuda_wview &w, float *dx, int64_t M,
                              int64_t nps, int atomic)
{
    k_linear_bwd<DT><<<grid, LB_THREADS, 0, s>>>(dy, w, dx, M, nps, atomic);
}

extern "C" nnt_status cuda_linear_backward(void *ctx, const nnt_tensor *dy, const nnt_tensor *w, nnt_tensor *dx,
                                           nnt_error *err)
{
    cuda_ctx *c = (cuda_ctx *)ctx;
    nnt_status st;
    cuda_wview wv;
    if ((st = cuda_check("linear_backward", "dy", dy, NNT_F32, 2, err)) != NNT_OK) return st;
    if ((st = cuda_weight_view("linear_backward", "w", w, &wv, err)) != NNT_OK) return st;
    if (!dx) return NNT_OK;
    if ((st = cuda_check("linear_backward", "dx", dx, NNT_F32, 2, err)) != NNT_OK) return st;
    int64_t M = dy->shape[0], N = dy->shape[1], K = w->shape[1];
    if (w->shape[0] != N || dx->shape[0] != M || dx->shape[1] != K)
        return cuda_error(err, NNT_ERR_SHAPE,
                          "cuda linear_backward: dy [%lld, %lld], w [%lld, %lld], dx [%lld, %lld] do not chain",
                          (long long)M, (long long)N, (long long)w->shape[0], (long long)w->shape[1],
                          (long long)dx->shape[0], (long long)dx->shape[1]);
    if (M == 0 || N == 0 || K == 0) return NNT_OK;
    if (M > INT_MAX || N > INT_MAX || K > INT_MAX)
        return cuda_error(err, NNT_ERR_UNSUPPORTED, "cuda linear_backward: dimensions above %d", INT_MAX);
    CUDA_CHECK(cudaSetDevice(c->device));
    const float *g = (const float *)dy->data;
    float *d = (float *)dx->data;
    if (wv.dtype == NNT_F32) {
        /* row-major dx = dy w is column-major dx^T (K x M) = w^T (K x N, w as stored) . dy^T (N x M) */
        const float one = 1.0f;
        CUBLAS_CHECK(cublasSgemm(c->blas, CUBLAS_OP_N, CUBLAS_OP_N, (int)K, (int)M, (int)N, &one,
                                 (const float *)wv.data, (int)K, g, (int)N, &one, d, (int)K));
        return cuda_done(c, "linear_backward", err);
    }
    int64_t gx = (K + LB_TK - 1) / LB_TK, gy = (M + LB_TM - 1) / LB_TM;
    if (gy > 65535 || gx > INT_MAX)
        return cuda_error(err, NNT_ERR_UNSUPPORTED, "cuda linear_backward: %lld rows of dy (at most %d)", (long long)M,
                          65535 * LB_TM);
    /* splits along N: enough blocks to fill the device, each split at least 8 steps long */
    int64_t splits = (LB_TARGET_BLOCKS + gx * gy - 1) / (gx * gy), most = (N + 8 * LB_TN - 1) / (8 * LB_TN);
    if (splits > most) splits = most;
    if (splits < 1) splits = 1;
    int64_t nps = (N + splits - 1) / splits;
    nps = (nps + LB_TN - 1) / LB_TN * LB_TN;
    splits = (N + nps - 1) / nps;
    dim3 grid((unsigned int)gx, (unsigned int)gy, (unsigned int)splits);
    int atomic = splits > 1;
    switch (wv.dtype) {
    case NNT_BF16: launch_linear_bwd<NNT_BF16>(c->stream, grid, g, wv, d, M, nps, atomic); break;
    case NNT_F16: launch_linear_bwd<NNT_F16>(c->stream, grid, g, wv, d, M, nps, atomic); break;
    case NNT_F8_E4M3: launch_linear_bwd<NNT_F8_E4M3>(c->stream, grid, g, wv, d, M, nps, atomic); break;
    default: launch_linear_bwd<NNT_F4_E2M1>(c->stream, grid, g, wv, d, M, nps, atomic); break;
    }
    return cuda_done(c, "linear_backward", err);
}

/* ---- rms_norm_backward ---- */

/* x, dy, dx [M, D]; w [D] F32/BF16/F16 as stored or NULL. One warp per row: with r = 1 /
 * sqrt(mean(x^2) + eps) and u = w dy, dx += r u - x r^3 mean(u x), the sums and the formula in
 * double as the cpu backend takes them. Zhang & Sennrich 2019. */
__global__ void k_rms_norm_bwd(const float *x, const void *w, int wdt, float eps, const float *dy, float *dx,
                               int64_t M, int64_t D)
{
    int lane = threadIdx.x & 31;
    ROW_LOOP(m, M)
    {
        const float *xr = x + m * D, *gr = dy + m * D;
        float *dr = dx + m * D;
        double ss = 0.0, ux = 0.0;
        for (int64_t i = lane; i < D; i += 32) {
            double u = (double)gr[i] * (w ? load_any(w, wdt, i) : 1.0f);
            ss += (double)xr[i] * xr[i];
            ux += u * xr[i];
        }
        ss = warp_sum_d(ss);
        ux = warp_sum_d(ux);
        double r = 1.0 / sqrt(ss / (double)D + eps), corr = r * r * r * ux / (double)D;
        for (int64_t i = lane; i < D; i += 32) {
            double u = (double)gr[i] * (w ? load_any(w, wdt, i) : 1.0f);
            dr[i] += (float)(r * u - corr * xr[i]);
        }
    }
}

extern "C" nnt_status cuda_rms_norm_backward(void *ctx, const nnt_tensor *x, const nnt_tensor *w, float eps,
                                             const nnt_tensor *dy, nnt_tensor *dx, nnt_error *err)
{
    cuda_ctx *c = (cuda_ctx *)ctx;
    nnt_status st;
    if ((st = cuda_check("rms_norm_backward", "x", x, NNT_F32, 0, err)) != NNT_OK) return st;
    int64_t D = x->shape[x->ndim - 1], n = nnt_tensor_numel(x), M = n / (D ? D : 1);
    if ((st = need_f32("rms_norm_backward", "dy (as x)", dy, n, err)) != NNT_OK) return st;
    if (!dx) return NNT_OK;
    if ((st = need_f32("rms_norm_backward", "dx (as x)", dx, n, err)) != NNT_OK) return st;
    if (w && (w->ndim != 1 || w->shape[0] != D))
        return cuda_error(err, NNT_ERR_SHAPE, "cuda rms_norm_backward: gain w has %lld entries, rows of x have %lld",
                          (long long)(w->ndim ? w->shape[0] : 0), (long long)D);
    if (w && (st = cuda_check_float_weight("rms_norm_backward", "the gain", w, err)) != NNT_OK) return st;
    if (M == 0 || D == 0) return NNT_OK;
    CUDA_CHECK(cudaSetDevice(c->device));
    k_rms_norm_bwd<<<grid_rows(M), CUDA_THREADS, 0, c->stream>>>((const float *)x->data, w ? w->data : NULL,
                                                                 w ? (int)w->dtype : 0, eps, (const float *)dy->data,
                                                                 (float *)dx->data, M, D);
    return cuda_done(c, "rms_norm_backward", err);
}

/* ---- accumulate ---- */

/* y [n] += f x [n], one thread per element */
__global__ void k_accumulate(const float *x, float f, float *y, int64_t n)
{
    GRID_LOOP(i, n) y[i] += f * x[i];
}

extern "C" nnt_status cuda_accumulate(void *ctx, const nnt_tensor *x, float factor, nnt_tensor *y, nnt_error *err)
{
    cuda_ctx *c = (cuda_ctx *)ctx;
    nnt_status st;
    if (!x || !x->data || x->dtype != NNT_F32)
        return cuda_error(err, NNT_ERR_SHAPE, "cuda accumulate: x must be an F32 tensor");
    int64_t n = nnt_tensor_numel(x);
    if ((st = need_f32("accumulate", "y (as x)", y, n, err)) != NNT_OK) return st;
    if (n == 0) return NNT_OK;
    CUDA_CHECK(cudaSetDevice(c->device));
    k_accumulate<<<grid_for(n), CUDA_THREADS, 0, c->stream>>>((const float *)x->data, factor, (float *)y->data, n);
    return cuda_done(c, "accumulate", err);
}

/* ---- swap12_backward ---- */

/* dy [A, C, B, D] -> dx [A, B, C, D] += dy with axes 1 and 2 swapped back; one thread per
 * element of dx */
__global__ void k_swap12_bwd(const float *dy, float *dx, int64_t A, int64_t B, int64_t C, int64_t D)
{
    GRID_LOOP(i, A * B * C * D)
    {
        int64_t d = i % D, r = i / D;
        int64_t cc = r % C, b = (r / C) % B, a = r / (B * C);
        dx[i] += dy[((a * C + cc) * B + b) * D + d];
    }
}

extern "C" nnt_status cuda_swap12_backward(void *ctx, const nnt_tensor *dy, nnt_tensor *dx, nnt_error *err)
{
    cuda_ctx *c = (cuda_ctx *)ctx;
    nnt_status st;
    if ((st = cuda_check("swap12_backward", "dy", dy, NNT_F32, 4, err)) != NNT_OK) return st;
    if (!dx) return NNT_OK;
    if ((st = cuda_check("swap12_backward", "dx", dx, NNT_F32, 4, err)) != NNT_OK) return st;
    if (dx->shape[0] != dy->shape[0] || dx->shape[1] != dy->shape[2] || dx->shape[2] != dy->shape[1] ||
        dx->shape[3] != dy->shape[3])
        return cuda_error(err, NNT_ERR_SHAPE, "cuda swap12_backward: dx must be dy with axes 1 and 2 swapped");
    int64_t A = dx->shape[0], B = dx->shape[1], C = dx->shape[2], D = dx->shape[3], n = A * B * C * D;
    if (n == 0) return NNT_OK;
    CUDA_CHECK(cudaSetDevice(c->device));
    k_swap12_bwd<<<grid_for(n), CUDA_THREADS, 0, c->stream>>>((const float *)dy->data, (float *)dx->data, A, B, C,
                                                              D);
    return cuda_done(c, "swap12_backward", err);
}

/* ---- swiglu_backward ---- */

/* All [n] F32 (see nnt_backend.h for which are read); one thread per element, as the cpu's
 * swiglu_one: with a gate, dg += (dout clamp(u) + ga) silu'(min(g, L)) where g <= L, du +=
 * dout silu(min(g, L)) where -L <= u <= L (ga: the act output's own gradient, may be NULL);
 * without (a the input activation), da += dout clamp(u), du += dout a. The sigmoid in double as
 * the cpu takes it. Shazeer 2020. */
__global__ void k_swiglu_bwd(const float *g, const float *u, const float *a, float L, const float *dout,
                             const float *ga, float *dg, float *du, float *da, int64_t n)
{
    GRID_LOOP(i, n)
    {
        float uv = u[i], go = dout[i];
        int uin = !(L > 0.0f) || (uv >= -L && uv <= L); /* torch's clamp: passes at the bound */
        float uc = L > 0.0f ? (uv < -L ? -L : uv > L ? L : uv) : uv;
        if (!g) {
            if (da) da[i] += go * uc;
            if (du && uin) du[i] += go * a[i];
            continue;
        }
        float gv = g[i];
        int gin = !(L > 0.0f) || gv <= L; /* torch's clamp_max: passes at the bound */
        if (L > 0.0f && gv > L) gv = L;
        double sg = 1.0 / (1.0 + exp(-(double)gv));
        if (dg && gin) dg[i] += (float)(((double)go * uc + (ga ? ga[i] : 0.0f)) * sg * (1.0 + gv * (1.0 - sg)));
        if (du && uin) du[i] += (float)(go * gv * sg);
    }
}

extern "C" nnt_status cuda_swiglu_backward(void *ctx, const nnt_tensor *gate, const nnt_tensor *up, float limit,
                                           const nnt_tensor *act, const nnt_tensor *dout, nnt_tensor *dgate,
                                           nnt_tensor *dup, nnt_tensor *dact, nnt_error *err)
{
    cuda_ctx *c = (cuda_ctx *)ctx;
    nnt_status st;
    if (!gate && (!act || !act->data))
        return cuda_error(err, NNT_ERR_INVALID_ARGUMENT, "cuda swiglu_backward: needs gate or the input activation act");
    int64_t n = gate ? nnt_tensor_numel(gate) : nnt_tensor_numel(act);
    const char *base = gate ? "(as gate)" : "(as act)";
    char what[40];
#define NEED(T, NAME)                                                                                                  \
    do {                                                                                                               \
        snprintf(what, sizeof what, "%s %s", NAME, base);                                                              \
        if ((T) && (st = need_f32("swiglu_backward", what, (T), n, err)) != NNT_OK) return st;                         \
    } while (0)
    NEED(gate, "gate");
    NEED(up, "up");
    NEED(dout, "dout");
    NEED(dgate, "dgate");
    NEED(dup, "dup");
    NEED(dact, "dact");
    if (!gate) NEED(act, "act");
#undef NEED
    if (!up || !dout)
        return cuda_error(err, NNT_ERR_INVALID_ARGUMENT, "cuda swiglu_backward: up and dout are required");
    float *dg = gate && dgate ? (float *)dgate->data : NULL, *du = dup ? (float *)dup->data : NULL;
    float *da = !gate && dact ? (float *)dact->data : NULL;
    if (n == 0 || (!dg && !du && !da)) return NNT_OK;
    CUDA_CHECK(cudaSetDevice(c->device));
    k_swiglu_bwd<<<grid_for(n), CUDA_THREADS, 0, c->stream>>>(
        gate ? (const float *)gate->data : NULL, (const float *)up->data, gate ? NULL : (const float *)act->data,
        limit, (const float *)dout->data, gate && dact ? (const float *)dact->data : NULL, dg, du, da, n);
    return cuda_done(c, "swiglu_backward", err);
}

/* ---- copy_cols_backward ---- */

/* ddst [M, Cd], dsrc [M, Cs]: dsrc[m, sc + j] += ddst[m, dc + j] for j < nc; one thread per
 * element (the ranges do not overlap when the two are one tensor: checked by the caller) */
__global__ void k_copy_cols_bwd(const float *g, int64_t Cd, int64_t dc, float *d, int64_t Cs, int64_t sc, int64_t M,
                                int64_t nc)
{
    GRID_LOOP(i, M * nc)
    {
        int64_t m = i / nc, j = i % nc;
        d[m * Cs + sc + j] += g[m * Cd + dc + j];
    }
}

extern "C" nnt_status cuda_copy_cols_backward(void *ctx, const nnt_tensor *ddst, int64_t dst_col, nnt_tensor *dsrc,
                                              int64_t src_col, int64_t ncols, nnt_error *err)
{
    cuda_ctx *c = (cuda_ctx *)ctx;
    nnt_status st;
    if ((st = cuda_check("copy_cols_backward", "ddst", ddst, NNT_F32, 0, err)) != NNT_OK) return st;
    if (!dsrc) return NNT_OK;
    if ((st = cuda_check("copy_cols_backward", "dsrc", dsrc, NNT_F32, 0, err)) != NNT_OK) return st;
    int64_t M = ddst->shape[0], Cd = nnt_tensor_numel(ddst) / (M ? M : 1), Cs = nnt_tensor_numel(dsrc) / (M ? M : 1);
    if (dsrc->shape[0] != M || ncols < 0 || src_col < 0 || dst_col < 0 || src_col + ncols > Cs || dst_col + ncols > Cd)
        return cuda_error(err, NNT_ERR_SHAPE,
                          "cuda copy_cols_backward: columns [%lld, +%lld) of dsrc and [%lld, +%lld) of ddst do not fit",
                          (long long)src_col, (long long)ncols, (long long)dst_col, (long long)ncols);
    if (ddst->data == dsrc->data && src_col < dst_col + ncols && dst_col < src_col + ncols && ncols > 0)
        return cuda_error(err, NNT_ERR_INVALID_ARGUMENT,
                          "cuda copy_cols_backward: dsrc is ddst and the column ranges overlap");
    if (M == 0 || ncols == 0) return NNT_OK;
    CUDA_CHECK(cudaSetDevice(c->device));
    k_copy_cols_bwd<<<grid_for(M * ncols), CUDA_THREADS, 0, c->stream>>>((const float *)ddst->data, Cd, dst_col,
                                                                         (float *)dsrc->data, Cs, src_col, M, ncols);
    return cuda_done(c, "copy_cols_backward", err);
}
