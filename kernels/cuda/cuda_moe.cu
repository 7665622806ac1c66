/* cuda_moe.cu - the cuda backend's mixture-of-experts kernels: router scoring with top-k and
 * group-limited choice (one block per token), row gather and scatter (rows and scales come from
 * host memory and are checked there), rows scaled by device values (routing weights; the
 * indices come from host memory and are checked there), and the sum over routing slots.
 *
 * Bfloat16 values (NNT_TENSOR_BF16_VALUES), as the cpu backend rounds them (cpu_moe.c): a router
 * whose weights output is flagged scores in bfloat16 - sigmoid R(sigmoid(x)), sqrt-softplus
 * R(sqrt(R(softplus(x)))), softmax R(e / sum) - chooses on those scores plus the bias in float32,
 * and gives R(R(s / R(R(sum) + eps)) * scaling); unflagged it is float32 throughout. A flagged
 * scatter destination receives R(dst + R(scale src)) (or R(scale src) when storing), a flagged
 * scale_rows output R(x w); the sum over slots rounds its result; a gather only moves values. */
#include <stdlib.h>
#include <string.h>

#include "cuda_device.cuh"

#define ROUTE_THREADS 256
#define MAX_EXPERTS 4096

typedef struct route_dev {
    int fn;          /* nnt_score_fn */
    int r16;         /* scores and weights in bfloat16 (the weights output is flagged) */
    int K, G, kept;  /* top_k, groups (1: none), groups kept */
    int renormalize, indices_given;
    float renorm_eps, scaling;
} route_dev;

/* The score of one logit; r16: each elementwise step rounded to bfloat16, as torch applies the
 * function to a bfloat16 tensor. */
__device__ __forceinline__ float score_of(int fn, float x, int r16)
{
    if (fn == NNT_SCORE_SIGMOID) return r16_if(r16, 1.0f / (1.0f + expf(-x)));
    if (fn == NNT_SCORE_SQRT_SOFTPLUS) {
        float sp = x > 20.0f ? x : log1pf(expf(x));
        return r16 ? round_bf16(sqrtf(round_bf16(sp))) : sqrtf(sp);
    }
    return x;
}

/* Of two candidate experts (-1: none), the one the cpu backend's scan keeps: the larger
 * choice, the lower index on a tie. */
__device__ __forceinline__ int better(const float *choice, int a, int b)
{
    if (a < 0) return b;
    if (b < 0) return a;
    if (choice[b] > choice[a]) return b;
    if (choice[a] > choice[b]) return a;
    return a < b ? a : b;
}

/* logits [M, E], bias [E] or NULL -> idx [M, K] (read when indices_given), w [M, K].
 * One block per token. Shared memory: sc [E], choice [E], gscore [G], taken [E], keep [G].
 * Scores, then (unless given) the group filter and K rounds of a block-wide arg-max over the
 * experts not yet taken; then the weights from the plain scores (DeepSeek-V3 noaux_tc).
 * An index outside [0, E) among given ones is counted in flag[0]. */
__global__ void k_route(const float *logits, const float *bias, route_dev p, int32_t *idx, float *w, int E,
                        int *flag)
{
    extern __shared__ float smem[];
    __shared__ double red_d[32];
    __shared__ float red_f[32];
    __shared__ int red_i[32];
    float *sc = smem, *choice = sc + E, *gscore = choice + E;
    unsigned char *taken = (unsigned char *)(gscore + p.G), *keep = taken + E;
    int64_t m = blockIdx.x;
    int tid = threadIdx.x, lane = tid & 31, wid = tid >> 5;
    const float *row = logits + m * E;
    if (p.fn == NNT_SCORE_SOFTMAX) {
        float mx = -INFINITY;
        for (int e = tid; e < E; e += blockDim.x) mx = row[e] > mx ? row[e] : mx;
        mx = block_max_f(mx, red_f);
        double part = 0.0;
        for (int e = tid; e < E; e += blockDim.x) part += (sc[e] = expf(row[e] - mx));
        double sum = block_sum_d(part, red_d);
        for (int e = tid; e < E; e += blockDim.x) sc[e] = r16_if(p.r16, (float)(sc[e] / sum));
    } else {
        for (int e = tid; e < E; e += blockDim.x) sc[e] = score_of(p.fn, row[e], p.r16);
    }
    int32_t *ir = idx + m * p.K;
    float *wr = w + m * p.K;
    if (!p.indices_given) {
        for (int e = tid; e < E; e += blockDim.x) {
            choice[e] = sc[e] + (bias ? bias[e] : 0.0f);
            taken[e] = 0;
        }
        __syncthreads();
        if (p.G > 1) {
            int per = E / p.G;
            for (int g = tid; g < p.G; g += blockDim.x) { /* a group's strength: its two best choices */
                float b1 = -INFINITY, b2 = -INFINITY;
                for (int e = g * per; e < (g + 1) * per; e++) {
                    if (choice[e] > b1) {
                        b2 = b1;
                        b1 = choice[e];
                    } else if (choice[e] > b2) {
                        b2 = choice[e];
                    }
                }
                gscore[g] = per > 1 ? b1 + b2 : b1;
                keep[g] = 0;
            }
            __syncthreads();
            if (tid == 0)
                for (int r = 0; r < p.kept; r++) {
                    int best = -1;
                    for (int g = 0; g < p.G; g++)
                        if (!keep[g] && (best < 0 || gscore[g] > gscore[best])) best = g;
                    keep[best] = 1;
                }
            __syncthreads();
            for (int e = tid; e < E; e += blockDim.x)
                if (!keep[e / per]) choice[e] = -INFINITY;
            __syncthreads();
        }
        for (int k = 0; k < p.K; k++) {
            int best = -1;
            for (int e = tid; e < E; e += blockDim.x)
                if (!taken[e]) best = better(choice, best, e);
            for (int o = 16; o > 0; o >>= 1) best = better(choice, best, __shfl_xor_sync(0xffffffffu, best, o));
            if (lane == 0) red_i[wid] = best;
            __syncthreads();
            if (tid == 0) {
                int b = -1;
                for (int i = 0; i < (int)(blockDim.x >> 5); i++) b = better(choice, b, red_i[i]);
                ir[k] = b;
                taken[b] = 1;
            }
            __syncthreads();
        }
    } else {
        __syncthreads();
    }
    if (tid == 0) {
        double sum = 0.0;
        for (int k = 0; k < p.K; k++) {
            int32_t e = ir[k];
            if (e < 0 || e >= E) {
                atomicAdd(&flag[0], 1);
                wr[k] = 0.0f;
                continue;
            }
            wr[k] = sc[e];
            sum += wr[k];
        }
        if (p.r16) { /* the sum and the eps add rounded, then the quotient, then the scaling */
            float den = round_bf16(round_bf16((float)sum) + p.renorm_eps);
            for (int k = 0; k < p.K; k++) {
                float v = p.renormalize ? round_bf16(wr[k] / den) : wr[k];
                wr[k] = round_bf16(v * p.scaling);
            }
        } else {
            for (int k = 0; k < p.K; k++) {
                float v = wr[k];
                if (p.renormalize) v = (float)(v / (sum + p.renorm_eps));
                wr[k] = v * p.scaling;
            }
        }
    }
}

extern "C" nnt_status cuda_route(void *ctx, const nnt_tensor *logits, const nnt_tensor *bias,
                                 const nnt_route_params *p, nnt_tensor *idx, nnt_tensor *w, nnt_error *err)
{
    cuda_ctx *c = (cuda_ctx *)ctx;
    nnt_status st;
    if ((st = cuda_check("route", "logits", logits, NNT_F32, 2, err)) != NNT_OK) return st;
    if ((st = cuda_check("route", "idx", idx, NNT_I32, 0, err)) != NNT_OK) return st;
    if ((st = cuda_check("route", "w", w, NNT_F32, 0, err)) != NNT_OK) return st;
    int64_t M = logits->shape[0], E = logits->shape[1];
    int K = p->top_k;
    if (K < 1 || K > E || nnt_tensor_numel(idx) != M * K || nnt_tensor_numel(w) != M * K)
        return cuda_error(err, NNT_ERR_SHAPE, "cuda route: top_k %d with %lld experts and idx/w of %lld entries", K,
                          (long long)E, (long long)nnt_tensor_numel(idx));
    if (bias && (bias->dtype != NNT_F32 || nnt_tensor_numel(bias) != E))
        return cuda_error(err, NNT_ERR_SHAPE, "cuda route: bias must be F32 [%lld]", (long long)E);
    int G = p->n_group > 1 ? p->n_group : 1;
    if (E % G)
        return cuda_error(err, NNT_ERR_SHAPE, "cuda route: %lld experts do not split into %d groups", (long long)E, G);
    if (E > MAX_EXPERTS) return cuda_error(err, NNT_ERR_UNSUPPORTED, "cuda route: more than %d experts", MAX_EXPERTS);
    if (M == 0) return NNT_OK;
    if (M > INT32_MAX) return cuda_error(err, NNT_ERR_UNSUPPORTED, "cuda route: more than 2^31 tokens");
    CUDA_CHECK(cudaSetDevice(c->device));
    route_dev rd;
    rd.fn = (int)p->score_fn;
    rd.r16 = cuda_bf16(w);
    rd.K = K;
    rd.G = G;
    rd.kept = p->topk_group > 0 && p->topk_group < G ? p->topk_group : G;
    rd.renormalize = p->renormalize;
    rd.indices_given = p->indices_given;
    rd.renorm_eps = p->renorm_eps;
    rd.scaling = p->scaling_factor;
    size_t smem = (size_t)(2 * E + G) * sizeof(float) + (size_t)(E + G);
    if (smem + 1024 > 48 * 1024) { /* beyond the default (the kernel's static arrays take 512 bytes) */
        if ((int64_t)smem + 1024 > c->smem_optin)
            return cuda_error(err, NNT_ERR_UNSUPPORTED, "cuda route: %zu bytes of shared memory for %lld experts", smem,
                              (long long)E);
        CUDA_CHECK(cudaFuncSetAttribute(k_route, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    }
    if (p->indices_given && (st = cuda_clear_flag(c, err)) != NNT_OK) return st;
    k_route<<<(unsigned int)M, ROUTE_THREADS, smem, c->stream>>>(
        (const float *)logits->data, bias ? (const float *)bias->data : NULL, rd, (int32_t *)idx->data,
        (float *)w->data, (int)E, c->flag);
    if ((st = cuda_done(c, "route", err)) != NNT_OK) return st;
    if (p->indices_given) { /* given indices live on the device: check them there, wait here */
        int f[4];
        if ((st = cuda_read_flag(c, f, err)) != NNT_OK) return st;
        if (f[0])
            return cuda_error(err, NNT_ERR_INVALID_ARGUMENT, "cuda route: an expert index is outside [0, %lld)",
                              (long long)E);
    }
    return NNT_OK;
}

/* src [M, H] -> dst [n, H]: dst[i] = src[rows[i]] */
__global__ void k_gather(const float *src, const int32_t *rows, float *dst, int64_t n, int64_t H)
{
    GRID_LOOP(i, n * H)
    {
        int64_t r = i / H, h = i % H;
        dst[i] = src[(int64_t)rows[r] * H + h];
    }
}

extern "C" nnt_status cuda_gather_rows(void *ctx, const nnt_tensor *src, const int32_t *rows, int n, nnt_tensor *dst,
                                       nnt_error *err)
{
    cuda_ctx *c = (cuda_ctx *)ctx;
    int64_t M = src->shape[0], H = nnt_tensor_numel(src) / (M ? M : 1);
    if (src->dtype != NNT_F32 || dst->dtype != NNT_F32 || n < 0 || nnt_tensor_numel(dst) < (int64_t)n * H)
        return cuda_error(err, NNT_ERR_SHAPE, "cuda gather_rows: F32 tensors with room for %d rows expected", n);
    for (int i = 0; i < n; i++)
        if (rows[i] < 0 || rows[i] >= M)
            return cuda_error(err, NNT_ERR_INVALID_ARGUMENT, "cuda gather_rows: row %d out of range", rows[i]);
    if (n == 0 || H == 0) return NNT_OK;
    CUDA_CHECK(cudaSetDevice(c->device));
    size_t rb = (size_t)n * sizeof(int32_t);
    void *drows;
    nnt_status st;
    if ((st = cuda_stage_begin(c, cuda_stage_size(rb), err)) != NNT_OK) return st;
    if ((st = cuda_stage_put(c, rows, rb, &drows, err)) != NNT_OK) return st;
    k_gather<<<grid_for((int64_t)n * H), CUDA_THREADS, 0, c->stream>>>((const float *)src->data,
                                                                       (const int32_t *)drows, (float *)dst->data,
                                                                       (int64_t)n, H);
    return cuda_done(c, "gather_rows", err);
}

/* dst[rows[i]] (+)= scale[i] src[sel[i]] for i < n, rows distinct; one thread per element.
 * sel NULL: sel[i] = i; scale NULL: 1. r16: the weighted row rounded to bfloat16, then the sum. */
__global__ void k_scatter(const float *src, const int32_t *rows, const int32_t *sel, const float *scale, float *dst,
                          int64_t n, int64_t H, int accumulate, int r16)
{
    GRID_LOOP(i, n * H)
    {
        int64_t r = i / H, h = i % H;
        int64_t from = sel ? sel[r] : r;
        float f = scale ? scale[r] : 1.0f;
        float *d = dst + (int64_t)rows[r] * H + h;
        float v = f * src[from * H + h];
        if (r16)
            *d = accumulate ? round_bf16(*d + round_bf16(v)) : round_bf16(v);
        else if (accumulate)
            *d += v;
        else
            *d = v;
    }
}

/* The same with repeated rows: one thread per column walks i in order, so the adds to one row
 * happen in the order of i (as the ABI asks). */
__global__ void k_scatter_add_ordered(const float *src, const int32_t *rows, const float *scale, float *dst, int64_t n,
                                      int64_t H, int r16)
{
    GRID_LOOP(h, H)
    {
        for (int64_t i = 0; i < n; i++) {
            float f = scale ? scale[i] : 1.0f, *d = dst + (int64_t)rows[i] * H + h;
            if (r16)
                *d = round_bf16(*d + round_bf16(f * src[i * H + h]));
            else
                *d += f * src[i * H + h];
        }
    }
}

static nnt_status scatter(cuda_ctx *c, const char *op, const nnt_tensor *src, const int32_t *rows, const float *scale,
                          int n, nnt_tensor *dst, int accumulate, nnt_error *err)
{
    int64_t M = dst->shape[0], H = nnt_tensor_numel(dst) / (M ? M : 1);
    if (src->dtype != NNT_F32 || dst->dtype != NNT_F32 || n < 0 || nnt_tensor_numel(src) < (int64_t)n * H)
        return cuda_error(err, NNT_ERR_SHAPE, "cuda %s: F32 tensors with %d rows of %lld expected", op, n, (long long)H);
    for (int i = 0; i < n; i++)
        if (rows[i] < 0 || rows[i] >= M)
            return cuda_error(err, NNT_ERR_INVALID_ARGUMENT, "cuda %s: row %d out of range", op, rows[i]);
    if (n == 0 || H == 0) return NNT_OK;
    CUDA_CHECK(cudaSetDevice(c->device));
    /* repeated rows? For a plain store only the last write of a row counts: keep that one */
    unsigned char *seen = (unsigned char *)calloc((size_t)M, 1);
    int32_t *keep_rows = (int32_t *)malloc((size_t)n * sizeof(int32_t)), *keep_sel = (int32_t *)malloc((size_t)n * sizeof(int32_t));
    float *keep_scale = (float *)malloc((size_t)n * sizeof(float));
    nnt_status st = NNT_OK;
    if (!seen || !keep_rows || !keep_sel || !keep_scale) {
        st = cuda_error(err, NNT_ERR_OUT_OF_MEMORY, "no memory");
        goto done;
    }
    {
        int repeats = 0, kept = 0;
        for (int i = n - 1; i >= 0; i--) {
            if (seen[rows[i]]) {
                repeats = 1;
                continue;
            }
            seen[rows[i]] = 1;
            keep_rows[kept] = rows[i];
            keep_sel[kept] = i;
            keep_scale[kept] = scale ? scale[i] : 1.0f;
            kept++;
        }
        if (accumulate && repeats) {
            size_t rb = (size_t)n * sizeof(int32_t), sb = scale ? (size_t)n * sizeof(float) : 0;
            void *dr, *ds = NULL;
            if ((st = cuda_stage_begin(c, cuda_stage_size(rb) + cuda_stage_size(sb), err)) != NNT_OK) goto done;
            if ((st = cuda_stage_put(c, rows, rb, &dr, err)) != NNT_OK) goto done;
            if (scale && (st = cuda_stage_put(c, scale, sb, &ds, err)) != NNT_OK) goto done;
            k_scatter_add_ordered<<<grid_for(H), CUDA_THREADS, 0, c->stream>>>(
                (const float *)src->data, (const int32_t *)dr, (const float *)ds, (float *)dst->data, (int64_t)n, H,
                cuda_bf16(dst));
        } else {
            size_t ib = (size_t)kept * sizeof(int32_t), fb = (size_t)kept * sizeof(float);
            void *dr, *dsel, *ds;
            if ((st = cuda_stage_begin(c, 2 * cuda_stage_size(ib) + cuda_stage_size(fb), err)) != NNT_OK) goto done;
            if ((st = cuda_stage_put(c, keep_rows, ib, &dr, err)) != NNT_OK) goto done;
            if ((st = cuda_stage_put(c, keep_sel, ib, &dsel, err)) != NNT_OK) goto done;
            if ((st = cuda_stage_put(c, keep_scale, fb, &ds, err)) != NNT_OK) goto done;
            k_scatter<<<grid_for((int64_t)kept * H), CUDA_THREADS, 0, c->stream>>>(
                (const float *)src->data, (const int32_t *)dr, (const int32_t *)dsel, (const float *)ds,
                (float *)dst->data, (int64_t)kept, H, accumulate, cuda_bf16(dst));
        }
        st = cuda_done(c, op, err);
    }
done:
    free(seen);
    free(keep_rows);
    free(keep_sel);
    free(keep_scale);
    return st;
}

extern "C" nnt_status cuda_scatter_add_rows(void *ctx, const nnt_tensor *src, const int32_t *rows,
                                            const float *scale, int n, nnt_tensor *dst, nnt_error *err)
{
    return scatter((cuda_ctx *)ctx, "scatter_add_rows", src, rows, scale, n, dst, 1, err);
}

extern "C" nnt_status cuda_scatter_rows(void *ctx, const nnt_tensor *src, const int32_t *rows, const float *scale,
                                        int n, nnt_tensor *dst, nnt_error *err)
{
    return scatter((cuda_ctx *)ctx, "scatter_rows", src, rows, scale, n, dst, 0, err);
}

/* y[i, h] = x[i, h] w[idx[i]] for i < n, one thread per element (y may be x: each thread reads
 * its element before it writes it); r16: the product rounded to bfloat16. */
__global__ void k_scale_rows(const float *x, const float *w, const int32_t *idx, float *y, int64_t n, int64_t H,
                             int r16)
{
    GRID_LOOP(i, n * H)
    {
        float v = x[i] * w[idx[i / H]];
        y[i] = r16_if(r16, v);
    }
}

extern "C" nnt_status cuda_scale_rows(void *ctx, const nnt_tensor *x, const nnt_tensor *w, const int32_t *idx, int n,
                                      nnt_tensor *y, nnt_error *err)
{
    cuda_ctx *c = (cuda_ctx *)ctx;
    nnt_status st;
    if ((st = cuda_check("scale_rows", "x", x, NNT_F32, 0, err)) != NNT_OK) return st;
    if ((st = cuda_check("scale_rows", "w", w, NNT_F32, 0, err)) != NNT_OK) return st;
    if ((st = cuda_check("scale_rows", "y", y, NNT_F32, 0, err)) != NNT_OK) return st;
    if (n < 0) return cuda_error(err, NNT_ERR_INVALID_ARGUMENT, "cuda scale_rows: %d rows", n);
    if (x->ndim < 1 || x->shape[0] != n)
        return cuda_error(err, NNT_ERR_SHAPE, "cuda scale_rows: x must have %d rows (its first axis)", n);
    int64_t H = n ? nnt_tensor_numel(x) / n : 0, W = nnt_tensor_numel(w);
    if (y->ndim < 1 || y->shape[0] != n || nnt_tensor_numel(y) != nnt_tensor_numel(x))
        return cuda_error(err, NNT_ERR_SHAPE, "cuda scale_rows: y is not shaped as x [%d, %lld]", n, (long long)H);
    if (n > 0 && !idx) return cuda_error(err, NNT_ERR_INVALID_ARGUMENT, "cuda scale_rows: idx is missing");
    for (int i = 0; i < n; i++)
        if (idx[i] < 0 || idx[i] >= W)
            return cuda_error(err, NNT_ERR_INVALID_ARGUMENT,
                              "cuda scale_rows: idx[%d] = %d is outside [0, %lld) (the entries of w)", i, idx[i],
                              (long long)W);
    if (n == 0 || H == 0) return NNT_OK;
    CUDA_CHECK(cudaSetDevice(c->device));
    size_t ib = (size_t)n * sizeof(int32_t);
    void *didx;
    if ((st = cuda_stage_begin(c, cuda_stage_size(ib), err)) != NNT_OK) return st;
    if ((st = cuda_stage_put(c, idx, ib, &didx, err)) != NNT_OK) return st;
    k_scale_rows<<<grid_for((int64_t)n * H), CUDA_THREADS, 0, c->stream>>>(
        (const float *)x->data, (const float *)w->data, (const int32_t *)didx, (float *)y->data, (int64_t)n, H,
        cuda_bf16(y));
    return cuda_done(c, "scale_rows", err);
}

/* x [M, K, H] -> y [M, H]: y[m, h] = sum over k of x[m, k, h], in order of k; the sum rounded to
 * bfloat16 when r16 */
__global__ void k_sum_axis1(const float *x, float *y, int64_t M, int64_t K, int64_t H, int r16)
{
    GRID_LOOP(i, M * H)
    {
        int64_t m = i / H, h = i % H;
        float acc = 0.0f;
        for (int64_t k = 0; k < K; k++) acc += x[(m * K + k) * H + h];
        y[i] = r16_if(r16, acc);
    }
}

extern "C" nnt_status cuda_sum_axis1(void *ctx, const nnt_tensor *x, nnt_tensor *y, nnt_error *err)
{
    cuda_ctx *c = (cuda_ctx *)ctx;
    if (x->ndim < 3 || x->dtype != NNT_F32 || y->dtype != NNT_F32)
        return cuda_error(err, NNT_ERR_SHAPE, "cuda sum_axis1: x must be F32 [M, K, H]");
    int64_t M = x->shape[0], K = x->shape[1], MK = M * K, H = nnt_tensor_numel(x) / (MK ? MK : 1);
    if (nnt_tensor_numel(y) != M * H) return cuda_error(err, NNT_ERR_SHAPE, "cuda sum_axis1: y is not [M, H]");
    if (M * H == 0) return NNT_OK;
    CUDA_CHECK(cudaSetDevice(c->device));
    k_sum_axis1<<<grid_for(M * H), CUDA_THREADS, 0, c->stream>>>((const float *)x->data, (float *)y->data, M, K, H,
                                                                 cuda_bf16(y));
    return cuda_done(c, "sum_axis1", err);
}
