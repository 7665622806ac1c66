/* cuda_hyper.cu - the cuda backend's kernels for DeepSeek-V4: manifold-constrained
 * hyper-connections (weights with the Sinkhorn projection, the stream mix, the readout
 * collapse), token compression into attention entries, and the lightning indexer's scores
 * (dot products by cuBLAS, the weighted ReLU sum by a kernel). The hyper-connection parameters
 * (fn, base, scale) are F32: families bind them from F32 host vectors, as the cpu backend
 * requires too; compression's ape may be F32, BF16 or F16 and is read as stored.
 *
 * Outputs flagged NNT_TENSOR_BF16_VALUES take the cpu backend's roundings (cpu_hyper.c): the
 * collapsed streams of hyper_connection and hyper_head round their results (post and comb stay
 * float32); hyper_mix gives R(R(R(post) a) + R(sum_j R(comb) x_j)) - the weights cast to the
 * streams' dtype, each term rounded before the sum; compress gives R(sum_i R(kv_i R(p_i))), the
 * slot weights p from the float32 softmax; the indexer's scores never round (float32 in
 * transformers). */
#include <limits.h>

#include "cuda_device.cuh"

#define MAX_STREAMS 16
#define HC_THREADS 256

/* One token per block. x [M, n, H]; fn [outs, n H] with outs = (2 + n) n (head = 0) or n
 * (head = 1); base [outs]; scale [3] (or [1] for the head). With r the RMS normaliser of the
 * token's n H values, m = fn . (x r) (double accumulation, one warp per output), then
 *   pre_j = sigmoid(m_j scale0 + base_j) + hc_eps;  out [M, H] = sum_j pre_j x_j;
 * and unless head: post_j = 2 sigmoid(m_{n+j} scale1 + base_{n+j}) -> post [M, n], comb [M, n, n]
 * = Sinkhorn(softmax_rows(m_C scale2 + base_C) + hc_eps), `iters` column/row passes, column
 * first (computed by one thread, in the cpu backend's order). Xie et al. 2026 (mHC). r16: out
 * rounded to bfloat16 (post and comb never). */
__global__ void k_hyper(const float *x, const float *fn, const float *base, const float *sc, float rms_eps,
                        float hc_eps, int iters, int head, float *post, float *comb, float *out, int n, int64_t H,
                        int r16)
{
    __shared__ float mix[(2 + MAX_STREAMS) * MAX_STREAMS];
    __shared__ float pre[MAX_STREAMS];
    __shared__ double red[32];
    int64_t m = blockIdx.x, nH = (int64_t)n * H;
    int tid = threadIdx.x, lane = tid & 31, wid = tid >> 5, nw = (int)(blockDim.x >> 5);
    const float *xm = x + m * nH;
    double ss = 0.0;
    for (int64_t i = tid; i < nH; i += blockDim.x) ss += (double)xm[i] * xm[i];
    ss = block_sum_d(ss, red);
    float r = 1.0f / sqrtf((float)(ss / (double)nH) + rms_eps);
    int outs = head ? n : (2 + n) * n;
    for (int o = wid; o < outs; o += nw) {
        const float *row = fn + (int64_t)o * nH;
        double acc = 0.0;
        for (int64_t i = lane; i < nH; i += 32) acc += (double)row[i] * (double)(xm[i] * r);
        acc = warp_sum_d(acc);
        if (lane == 0) mix[o] = (float)acc;
    }
    __syncthreads();
    if (tid == 0) {
        for (int j = 0; j < n; j++) pre[j] = sigmoidf_(mix[j] * sc[0] + base[j]) + hc_eps;
        if (!head) {
            for (int j = 0; j < n; j++) post[m * n + j] = 2.0f * sigmoidf_(mix[n + j] * sc[1] + base[n + j]);
            float C[MAX_STREAMS * MAX_STREAMS];
            for (int j = 0; j < n; j++) { /* row softmax, then + eps */
                float mxr = -INFINITY;
                for (int k = 0; k < n; k++) {
                    C[j * n + k] = mix[2 * n + j * n + k] * sc[2] + base[2 * n + j * n + k];
                    mxr = C[j * n + k] > mxr ? C[j * n + k] : mxr;
                }
                float sum = 0.0f;
                for (int k = 0; k < n; k++) sum += (C[j * n + k] = expf(C[j * n + k] - mxr));
                for (int k = 0; k < n; k++) C[j * n + k] = C[j * n + k] / sum + hc_eps;
            }
            for (int it = 0; it < iters; it++) {
                if (it > 0)
                    for (int j = 0; j < n; j++) { /* rows */
                        float s = 0.0f;
                        for (int k = 0; k < n; k++) s += C[j * n + k];
                        for (int k = 0; k < n; k++) C[j * n + k] /= s + hc_eps;
                    }
                for (int k = 0; k < n; k++) { /* columns */
                    float s = 0.0f;
                    for (int j = 0; j < n; j++) s += C[j * n + k];
                    for (int j = 0; j < n; j++) C[j * n + k] /= s + hc_eps;
                }
            }
            for (int i = 0; i < n * n; i++) comb[m * n * n + i] = C[i];
        }
    }
    __syncthreads();
    for (int64_t h = tid; h < H; h += blockDim.x) {
        float acc = 0.0f;
        for (int j = 0; j < n; j++) acc += pre[j] * xm[j * H + h];
        out[m * H + h] = r16_if(r16, acc);
    }
}

extern "C" nnt_status cuda_hyper_connection(void *ctx, const nnt_tensor *x, const nnt_tensor *fn,
                                            const nnt_tensor *base, const nnt_tensor *scale, float rms_eps,
                                            float hc_eps, int iters, nnt_tensor *post, nnt_tensor *comb,
                                            nnt_tensor *collapsed, nnt_error *err)
{
    cuda_ctx *c = (cuda_ctx *)ctx;
    if (x->ndim != 3 || x->dtype != NNT_F32)
        return cuda_error(err, NNT_ERR_SHAPE, "cuda hyper_connection: x must be F32 [M, n, H]");
    int64_t M = x->shape[0], n = x->shape[1], H = x->shape[2], outs = (2 + n) * n;
    if (n < 1 || n > MAX_STREAMS || fn->dtype != NNT_F32 || base->dtype != NNT_F32 || scale->dtype != NNT_F32 ||
        nnt_tensor_numel(fn) != outs * n * H || nnt_tensor_numel(base) != outs || nnt_tensor_numel(scale) != 3 ||
        nnt_tensor_numel(post) != M * n || nnt_tensor_numel(comb) != M * n * n || nnt_tensor_numel(collapsed) != M * H)
        return cuda_error(err, NNT_ERR_SHAPE,
                          "cuda hyper_connection: fn, base, scale, post, comb or collapsed disagree with x");
    if (M == 0) return NNT_OK;
    if (M > INT_MAX) return cuda_error(err, NNT_ERR_UNSUPPORTED, "cuda hyper_connection: more than 2^31 tokens");
    CUDA_CHECK(cudaSetDevice(c->device));
    k_hyper<<<(unsigned int)M, HC_THREADS, 0, c->stream>>>(
        (const float *)x->data, (const float *)fn->data, (const float *)base->data, (const float *)scale->data,
        rms_eps, hc_eps, iters, 0, (float *)post->data, (float *)comb->data, (float *)collapsed->data, (int)n, H,
        cuda_bf16(collapsed));
    return cuda_done(c, "hyper_connection", err);
}

/* x [M, n, H], a [M, H], post [M, n], comb [M, n, n] -> out [M, n, H]:
 * out[m, k] = post[m, k] a[m] + sum_j comb[m, j, k] x[m, j] (comb used transposed). r16: post and
 * comb rounded to bfloat16, the two terms rounded, then their sum. */
__global__ void k_hyper_mix(const float *x, const float *a, const float *post, const float *comb, float *out,
                            int64_t M, int64_t n, int64_t H, int r16)
{
    GRID_LOOP(i, M * n * H)
    {
        int64_t h = i % H, r = i / H;
        int64_t k = r % n, m = r / n;
        if (r16) {
            float mix = 0.0f;
            for (int64_t j = 0; j < n; j++) mix += round_bf16(comb[(m * n + j) * n + k]) * x[(m * n + j) * H + h];
            out[i] = round_bf16(round_bf16(round_bf16(post[m * n + k]) * a[m * H + h]) + round_bf16(mix));
            continue;
        }
        float o = post[m * n + k] * a[m * H + h];
        for (int64_t j = 0; j < n; j++) o += comb[(m * n + j) * n + k] * x[(m * n + j) * H + h];
        out[i] = o;
    }
}

extern "C" nnt_status cuda_hyper_mix(void *ctx, const nnt_tensor *x, const nnt_tensor *a, const nnt_tensor *post,
                                     const nnt_tensor *comb, nnt_tensor *out, nnt_error *err)
{
    cuda_ctx *c = (cuda_ctx *)ctx;
    if (x->ndim != 3) return cuda_error(err, NNT_ERR_SHAPE, "cuda hyper_mix: x must be [M, n, H]");
    int64_t M = x->shape[0], n = x->shape[1], H = x->shape[2];
    if (x->dtype != NNT_F32 || a->dtype != NNT_F32 || post->dtype != NNT_F32 || comb->dtype != NNT_F32 ||
        out->dtype != NNT_F32 || nnt_tensor_numel(a) != M * H || nnt_tensor_numel(post) != M * n ||
        nnt_tensor_numel(comb) != M * n * n || nnt_tensor_numel(out) != M * n * H || x->data == out->data)
        return cuda_error(err, NNT_ERR_SHAPE, "cuda hyper_mix: a, post, comb or out disagree with x");
    if (M * n * H == 0) return NNT_OK;
    CUDA_CHECK(cudaSetDevice(c->device));
    k_hyper_mix<<<grid_for(M * n * H), CUDA_THREADS, 0, c->stream>>>((const float *)x->data, (const float *)a->data,
                                                                     (const float *)post->data,
                                                                     (const float *)comb->data, (float *)out->data, M,
                                                                     n, H, cuda_bf16(out));
    return cuda_done(c, "hyper_mix", err);
}

extern "C" nnt_status cuda_hyper_head(void *ctx, const nnt_tensor *x, const nnt_tensor *fn, const nnt_tensor *base,
                                      const nnt_tensor *scale, float rms_eps, float hc_eps, nnt_tensor *y,
                                      nnt_error *err)
{
    cuda_ctx *c = (cuda_ctx *)ctx;
    if (x->ndim != 3 || x->dtype != NNT_F32) return cuda_error(err, NNT_ERR_SHAPE, "cuda hyper_head: x must be [M, n, H]");
    int64_t M = x->shape[0], n = x->shape[1], H = x->shape[2];
    if (n < 1 || n > MAX_STREAMS || fn->dtype != NNT_F32 || base->dtype != NNT_F32 || scale->dtype != NNT_F32 ||
        y->dtype != NNT_F32 || nnt_tensor_numel(fn) != n * n * H || nnt_tensor_numel(base) != n ||
        nnt_tensor_numel(scale) < 1 || nnt_tensor_numel(y) != M * H)
        return cuda_error(err, NNT_ERR_SHAPE, "cuda hyper_head: fn, base, scale or y disagree with x");
    if (M == 0) return NNT_OK;
    if (M > INT_MAX) return cuda_error(err, NNT_ERR_UNSUPPORTED, "cuda hyper_head: more than 2^31 tokens");
    CUDA_CHECK(cudaSetDevice(c->device));
    k_hyper<<<(unsigned int)M, HC_THREADS, 0, c->stream>>>((const float *)x->data, (const float *)fn->data,
                                                           (const float *)base->data, (const float *)scale->data,
                                                           rms_eps, hc_eps, 0, 1, NULL, NULL, (float *)y->data, (int)n,
                                                           H, cuda_bf16(y));
    return cuda_done(c, "hyper_head", err);
}

/* kv, gate [B, T, c D] (c = 2 with overlap), ape [rate, c D] F32/BF16/F16, first/count [B]
 * -> out [B, C, D] (zeroed beforehand). One thread per (b, entry w, channel): a softmax over the
 * window's slots of gate + ape pools kv, exponentials and sums in double; with overlap the
 * previous window's tokens join through their first D channels, this window's through the
 * last D. r16: each slot's weight exp(s - max) / sum rounded to bfloat16, each weighted value
 * rounded, their float32 sum (in slot order) rounded. */
__global__ void k_compress(const float *kv, const float *g, const void *ape, int adt, int rate, int overlap,
                           const int32_t *first, const int32_t *count, float *out, int64_t B, int64_t T, int64_t C,
                           int64_t D, int r16)
{
    int64_t cD = overlap ? 2 * D : D;
    GRID_LOOP(i, B * C * D)
    {
        int64_t ch = i % D, r = i / D;
        int64_t w = r % C, b = r / C;
        if (w >= count[b]) continue;
        int64_t f = first[b], cc = overlap ? D + ch : ch;
        float mx = -INFINITY;
        if (overlap && w > 0)
            for (int k = 0; k < rate; k++) {
                int64_t t = f + (w - 1) * rate + k;
                float s = g[(b * T + t) * cD + ch] + load_any(ape, adt, (int64_t)k * cD + ch);
                mx = s > mx ? s : mx;
            }
        for (int k = 0; k < rate; k++) {
            int64_t t = f + w * rate + k;
            float s = g[(b * T + t) * cD + cc] + load_any(ape, adt, (int64_t)k * cD + cc);
            mx = s > mx ? s : mx;
        }
        double sum = 0.0, acc = 0.0;
        if (overlap && w > 0)
            for (int k = 0; k < rate; k++) {
                int64_t t = f + (w - 1) * rate + k;
                float s = g[(b * T + t) * cD + ch] + load_any(ape, adt, (int64_t)k * cD + ch);
                double e = exp((double)s - mx);
                sum += e;
                acc += e * kv[(b * T + t) * cD + ch];
            }
        for (int k = 0; k < rate; k++) {
            int64_t t = f + w * rate + k;
            float s = g[(b * T + t) * cD + cc] + load_any(ape, adt, (int64_t)k * cD + cc);
            double e = exp((double)s - mx);
            sum += e;
            acc += e * kv[(b * T + t) * cD + cc];
        }
        if (r16) {
            float racc = 0.0f;
            if (overlap && w > 0)
                for (int k = 0; k < rate; k++) {
                    int64_t t = f + (w - 1) * rate + k;
                    float s = g[(b * T + t) * cD + ch] + load_any(ape, adt, (int64_t)k * cD + ch);
                    float pw = round_bf16((float)(exp((double)s - mx) / sum));
                    racc += round_bf16(kv[(b * T + t) * cD + ch] * pw);
                }
            for (int k = 0; k < rate; k++) {
                int64_t t = f + w * rate + k;
                float s = g[(b * T + t) * cD + cc] + load_any(ape, adt, (int64_t)k * cD + cc);
                float pw = round_bf16((float)(exp((double)s - mx) / sum));
                racc += round_bf16(kv[(b * T + t) * cD + cc] * pw);
            }
            out[i] = round_bf16(racc);
            continue;
        }
        out[i] = (float)(acc / sum);
    }
}

extern "C" nnt_status cuda_compress(void *ctx, const nnt_tensor *kv, const nnt_tensor *gate, const nnt_tensor *ape,
                                    int rate, int overlap, const int32_t *first, const int32_t *count, nnt_tensor *out,
                                    nnt_error *err)
{
    cuda_ctx *c = (cuda_ctx *)ctx;
    nnt_status st;
    if ((st = cuda_check_float_weight("compress", "ape", ape, err)) != NNT_OK) return st;
    int64_t B = kv->shape[0], T = kv->shape[1], cD = kv->shape[2], coff = overlap ? 2 : 1, D = cD / coff;
    int64_t C = out->shape[1];
    if (kv->ndim != 3 || out->ndim != 3 || kv->dtype != NNT_F32 || gate->dtype != NNT_F32 || out->dtype != NNT_F32 ||
        out->shape[0] != B || out->shape[2] != D || cD != coff * D || nnt_tensor_numel(gate) != B * T * cD ||
        nnt_tensor_numel(ape) != (int64_t)rate * cD || rate < 1)
        return cuda_error(err, NNT_ERR_SHAPE,
                          "cuda compress: kv, gate [B, T, %lld], ape [%d, %lld] and out [B, C, %lld] disagree",
                          (long long)cD, rate, (long long)cD, (long long)D);
    for (int64_t b = 0; b < B; b++)
        if (count[b] < 0 || count[b] > C || first[b] < 0 || first[b] + (int64_t)count[b] * rate > T)
            return cuda_error(err, NNT_ERR_INVALID_ARGUMENT,
                              "cuda compress: row %lld's %d entries from token %d do not fit", (long long)b, count[b],
                              first[b]);
    if (B * C * D == 0) return NNT_OK;
    CUDA_CHECK(cudaSetDevice(c->device));
    size_t bb = (size_t)B * sizeof(int32_t);
    void *dfirst, *dcount;
    if ((st = cuda_stage_begin(c, 2 * cuda_stage_size(bb), err)) != NNT_OK) return st;
    if ((st = cuda_stage_put(c, first, bb, &dfirst, err)) != NNT_OK) return st;
    if ((st = cuda_stage_put(c, count, bb, &dcount, err)) != NNT_OK) return st;
    CUDA_CHECK(cudaMemsetAsync(out->data, 0, (size_t)(B * C * D) * sizeof(float), c->stream));
    k_compress<<<grid_for(B * C * D), CUDA_THREADS, 0, c->stream>>>(
        (const float *)kv->data, (const float *)gate->data, ape->data, (int)ape->dtype, rate, overlap,
        (const int32_t *)dfirst, (const int32_t *)dcount, (float *)out->data, B, T, C, D, cuda_bf16(out));
    return cuda_done(c, "compress", err);
}

/* dots [B, Tc, h, C] (this chunk's q . k), w [B, T, h] -> out[b, t0 + t, e] =
 * scale sum_h w relu(dot), summed in double */
__global__ void k_indexer(const float *dots, const float *w, float scale, float *out, int64_t B, int64_t T, int64_t t0,
                          int64_t Tc, int64_t Hh, int64_t C)
{
    GRID_LOOP(i, B * Tc * C)
    {
        int64_t e = i % C, r = i / C;
        int64_t tc = r % Tc, b = r / Tc, t = t0 + tc;
        double acc = 0.0;
        for (int64_t h = 0; h < Hh; h++) {
            float dot = dots[((b * Tc + tc) * Hh + h) * C + e];
            acc += (double)w[(b * T + t) * Hh + h] * (dot > 0.0f ? dot : 0.0f);
        }
        out[(b * T + t) * C + e] = (float)(acc * scale);
    }
}

/* q [B, T, h, d], k [B, C, d], w [B, T, h] -> out [B, T, C]. Per chunk of tokens, one
 * strided-batched GEMM over the rows: dots[b] (Tc h x C) = q[b, chunk] (Tc h x d) . k[b]^T. The
 * chunk keeps the dot products under 256 MiB of scratch. */
extern "C" nnt_status cuda_indexer_scores(void *ctx, const nnt_tensor *q, const nnt_tensor *k, const nnt_tensor *w,
                                          float scale, nnt_tensor *out, nnt_error *err)
{
    cuda_ctx *c = (cuda_ctx *)ctx;
    if (q->ndim != 4 || k->ndim != 3)
        return cuda_error(err, NNT_ERR_SHAPE, "cuda indexer_scores: q [B, T, h, d], k [B, C, d]");
    int64_t B = q->shape[0], T = q->shape[1], Hh = q->shape[2], d = q->shape[3], C = k->shape[1];
    if (q->dtype != NNT_F32 || k->dtype != NNT_F32 || w->dtype != NNT_F32 || out->dtype != NNT_F32 ||
        k->shape[0] != B || k->shape[2] != d || nnt_tensor_numel(w) != B * T * Hh ||
        nnt_tensor_numel(out) != B * T * C)
        return cuda_error(err, NNT_ERR_SHAPE, "cuda indexer_scores: shapes disagree");
    if (B * T * C == 0) return NNT_OK;
    CUDA_CHECK(cudaSetDevice(c->device));
    if (d == 0 || Hh == 0) {
        CUDA_CHECK(cudaMemsetAsync(out->data, 0, (size_t)(B * T * C) * sizeof(float), c->stream));
        return cuda_done(c, "indexer_scores", err);
    }
    const int64_t budget = (int64_t)256 << 20;
    int64_t per_token = B * Hh * C * (int64_t)sizeof(float);
    int64_t Tc = budget / per_token;
    if (Tc < 1) Tc = 1;
    if (Tc > T) Tc = T;
    if (Tc * Hh > INT_MAX || C > INT_MAX || d > INT_MAX || B > INT_MAX)
        return cuda_error(err, NNT_ERR_UNSUPPORTED, "cuda indexer_scores: dimensions above %d", INT_MAX);
    void *dots;
    nnt_status st = cuda_scratch(c, (size_t)(Tc * per_token), &dots, err);
    if (st != NNT_OK) return st;
    const float one = 1.0f, zero = 0.0f;
    for (int64_t t0 = 0; t0 < T; t0 += Tc) {
        int64_t tc = T - t0 < Tc ? T - t0 : Tc;
        CUBLAS_CHECK(cublasSgemmStridedBatched(c->blas, CUBLAS_OP_T, CUBLAS_OP_N, (int)C, (int)(tc * Hh), (int)d, &one,
                                               (const float *)k->data, (int)d, (long long)(C * d),
                                               (const float *)q->data + t0 * Hh * d, (int)d,
                                               (long long)(T * Hh * d), &zero, (float *)dots, (int)C,
                                               (long long)(tc * Hh * C), (int)B));
        k_indexer<<<grid_for(B * tc * C), CUDA_THREADS, 0, c->stream>>>((const float *)dots, (const float *)w->data,
                                                                        scale, (float *)out->data, B, T, t0, tc, Hh, C);
        CUDA_LAUNCHED();
    }
    return cuda_done(c, "indexer_scores", err);
}
