/* cuda_attention.cu - the cuda backend's attention kernels: rotary embedding, masked scores
 * (cuBLAS strided-batched GEMM per key/value head, then the mask), softmax with an optional sink
 * column, and the value mix (one batched cuBLAS GEMM over every (row, query head)).
 *
 * Outputs flagged NNT_TENSOR_BF16_VALUES take the cpu backend's roundings (cpu_attention.c):
 * rope rounds cos and sin, each product and the sum (NNT_TENSOR_BF16_ONCE: cos and sin, then the
 * float32 rotation once); scores are R(R(q . k) * scale) - the product unscaled, the scaling after
 * its rounding - on visible entries; softmax rounds its result, and with NNT_TENSOR_BF16_SHIFTED
 * the scores less the row maximum (the sink rounded too) before the exponential; the mix rounds
 * its result. The products stay float32 cuBLAS calls: on bfloat16 operands, as a bfloat16 model
 * hands them over, every product is exact in float32 and accumulation is float32 either way.
 *
 * cuDNN is not used: its softmax has no sink column and turns an all-masked row into NaN where
 * the ABI wants zeros, and the matrix products are plain cuBLAS calls. */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_device.cuh"
#include "cuda_mask.cuh"

/* x [B, H, T, D] F32 in place; pos [B, T]; inv [half]. Pairs (i, i + half) for NEOX, (2i, 2i + 1)
 * for INTERLEAVED inside dims [rot_start, rot_start + 2 half); one thread per pair. Su et al.
 * 2021 (RoFormer). r16: cos and sin rounded to bfloat16, then each product and the sum (once:
 * only the float32 rotation, once). */
__global__ void k_rope(float *x, const int32_t *pos, const float *inv, int rot_start, int half, int neox, float mscale,
                       int64_t B, int64_t H, int64_t T, int64_t D, int r16, int once)
{
    GRID_LOOP(i, B * H * T * half)
    {
        int j = (int)(i % half);
        int64_t r = i / half; /* (b H + h) T + t */
        int64_t t = r % T, b = r / (H * T);
        float *v = x + r * D + rot_start;
        float p = (float)pos[b * T + t];
        float a = p * inv[j];
        float cs = cosf(a) * mscale, sn = sinf(a) * mscale;
        int i1 = neox ? j : 2 * j, i2 = neox ? j + half : 2 * j + 1;
        float x1 = v[i1], x2 = v[i2];
        if (r16) {
            cs = round_bf16(cs);
            sn = round_bf16(sn);
        }
        if (r16 && !once) {
            v[i1] = round_bf16(round_bf16(x1 * cs) - round_bf16(x2 * sn));
            v[i2] = round_bf16(round_bf16(x2 * cs) + round_bf16(x1 * sn));
        } else {
            v[i1] = r16_if(r16, x1 * cs - x2 * sn);
            v[i2] = r16_if(r16, x2 * cs + x1 * sn);
        }
    }
}

extern "C" nnt_status cuda_rope(void *ctx, nnt_tensor *x, const int32_t *pos, const float *inv_freq, int rot_start,
                                int rot_dim, nnt_rope_style style, float mscale, nnt_error *err)
{
    cuda_ctx *c = (cuda_ctx *)ctx;
    nnt_status st;
    if ((st = cuda_check("rope", "x", x, NNT_F32, 4, err)) != NNT_OK) return st;
    int64_t B = x->shape[0], H = x->shape[1], T = x->shape[2], D = x->shape[3];
    if (rot_dim % 2 || rot_start < 0 || rot_dim < 0 || rot_start + rot_dim > D)
        return cuda_error(err, NNT_ERR_INVALID_ARGUMENT, "cuda rope: rotated dims [%d, %d) do not fit a head of %lld",
                          rot_start, rot_start + rot_dim, (long long)D);
    int half = rot_dim / 2;
    if (half == 0 || B * H * T == 0) return NNT_OK;
    if (!pos || !inv_freq) return cuda_error(err, NNT_ERR_INVALID_ARGUMENT, "cuda rope: positions or inv_freq missing");
    CUDA_CHECK(cudaSetDevice(c->device));
    size_t pb = (size_t)(B * T) * sizeof(int32_t), fb = (size_t)half * sizeof(float);
    void *dpos, *dinv;
    if ((st = cuda_stage_begin(c, cuda_stage_size(pb) + cuda_stage_size(fb), err)) != NNT_OK) return st;
    if ((st = cuda_stage_put(c, pos, pb, &dpos, err)) != NNT_OK) return st;
    if ((st = cuda_stage_put(c, inv_freq, fb, &dinv, err)) != NNT_OK) return st;
    k_rope<<<grid_for(B * H * T * half), CUDA_THREADS, 0, c->stream>>>(
        (float *)x->data, (const int32_t *)dpos, (const float *)dinv, rot_start, half, style == NNT_ROPE_NEOX, mscale,
        B, H, T, D, cuda_bf16(x), cuda_bf16_once(x));
    return cuda_done(c, "rope", err);
}

/* s [B, H, T, S]: entries the mask hides become -INFINITY (nnt_attn_mask's rules; a mask_dev
 * of NULL arrays, causal 0 and window 0 hides nothing); with r16 the visible ones, unscaled
 * products, become R(R(s) * scale). */
__global__ void k_mask(float *s, mask_dev m, int64_t B, int64_t H, int64_t T, int64_t S, int r16, float scale)
{
    GRID_LOOP(i, B * H * T * S)
    {
        int64_t j = i % S, r = i / S;
        int64_t t = r % T, b = r / (T * H);
        if (!mask_visible(m, b, t, j, T, S))
            s[i] = -INFINITY;
        else if (r16)
            s[i] = round_bf16(round_bf16(s[i]) * scale);
    }
}

/* Stages one optional mask array; *dev stays NULL for a NULL array. */
static nnt_status put_opt(cuda_ctx *c, const void *host, size_t bytes, const void **dev, nnt_error *err)
{
    *dev = NULL;
    if (!host) return NNT_OK;
    void *d;
    nnt_status st = cuda_stage_put(c, host, bytes, &d, err);
    *dev = d;
    return st;
}

nnt_status cuda_stage_mask(cuda_ctx *c, const nnt_attn_mask *mask, int64_t B, int64_t T, int64_t S, size_t extra,
                           mask_dev *m, nnt_error *err)
{
    memset(m, 0, sizeof *m);
    size_t bt = (size_t)(B * T), bs = (size_t)(B * S), total = extra;
    if (mask)
        total += (mask->q_pos ? cuda_stage_size(bt * 4) : 0) + (mask->k_pos ? cuda_stage_size(bs * 4) : 0) +
                 (mask->key_valid ? cuda_stage_size(bs) : 0) + (mask->query_valid ? cuda_stage_size(bt) : 0) +
                 (mask->key_no_window ? cuda_stage_size((size_t)S) : 0) +
                 (mask->allow ? cuda_stage_size(bt * (size_t)S) : 0);
    nnt_status st;
    if (total && (st = cuda_stage_begin(c, total, err)) != NNT_OK) return st;
    if (!mask) return NNT_OK;
    const void *p;
    if ((st = put_opt(c, mask->q_pos, bt * 4, &p, err)) != NNT_OK) return st;
    m->q_pos = (const int32_t *)p;
    if ((st = put_opt(c, mask->k_pos, bs * 4, &p, err)) != NNT_OK) return st;
    m->k_pos = (const int32_t *)p;
    if ((st = put_opt(c, mask->key_valid, bs, &p, err)) != NNT_OK) return st;
    m->key_valid = (const uint8_t *)p;
    if ((st = put_opt(c, mask->query_valid, bt, &p, err)) != NNT_OK) return st;
    m->query_valid = (const uint8_t *)p;
    if ((st = put_opt(c, mask->key_no_window, (size_t)S, &p, err)) != NNT_OK) return st;
    m->key_no_window = (const uint8_t *)p;
    if ((st = put_opt(c, mask->allow, bt * (size_t)S, &p, err)) != NNT_OK) return st;
    m->allow = (const uint8_t *)p;
    m->causal = mask->causal;
    m->window = mask->window;
    return NNT_OK;
}

/* q [B, Hq, T, D], k [B, Hkv, S, D] -> s [B, Hq, T, S] = scale q . k^T, -inf where hidden.
 * The G = Hq / Hkv query heads of one key head are G T consecutive rows of q and of s, so one
 * strided-batched GEMM over the B Hkv key heads computes every score. */
extern "C" nnt_status cuda_attn_scores(void *ctx, const nnt_tensor *q, const nnt_tensor *k, float scale,
                                       const nnt_attn_mask *mask, nnt_tensor *s, nnt_error *err)
{
    cuda_ctx *c = (cuda_ctx *)ctx;
    nnt_status st;
    if ((st = cuda_check("attn_scores", "q", q, NNT_F32, 4, err)) != NNT_OK) return st;
    if ((st = cuda_check("attn_scores", "k", k, NNT_F32, 4, err)) != NNT_OK) return st;
    if ((st = cuda_check("attn_scores", "s", s, NNT_F32, 4, err)) != NNT_OK) return st;
    int64_t B = q->shape[0], Hq = q->shape[1], T = q->shape[2], D = q->shape[3];
    int64_t Hkv = k->shape[1], S = k->shape[2];
    if (k->shape[0] != B || k->shape[3] != D || Hkv == 0 || Hq % Hkv || s->shape[0] != B || s->shape[1] != Hq ||
        s->shape[2] != T || s->shape[3] != S)
        return cuda_error(err, NNT_ERR_SHAPE, "cuda attn_scores: q, k and s shapes disagree");
    int64_t G = Hq / Hkv, n = B * Hq * T * S;
    if (n == 0) return NNT_OK;
    /* bfloat16 scores: the product rounded before its scaling, so cuBLAS leaves it unscaled */
    const int r16 = cuda_bf16(s);
    const float alpha = r16 ? 1.0f : scale;
    if (G * T > INT_MAX || S > INT_MAX || D > INT_MAX || B * Hkv > INT_MAX)
        return cuda_error(err, NNT_ERR_UNSUPPORTED, "cuda attn_scores: dimensions above %d", INT_MAX);
    CUDA_CHECK(cudaSetDevice(c->device));
    if (D == 0) {
        CUDA_CHECK(cudaMemsetAsync(s->data, 0, (size_t)n * sizeof(float), c->stream));
    } else {
        const float zero = 0.0f;
        CUBLAS_CHECK(cublasSgemmStridedBatched(c->blas, CUBLAS_OP_T, CUBLAS_OP_N, (int)S, (int)(G * T), (int)D, &alpha,
                                               (const float *)k->data, (int)D, (long long)(S * D),
                                               (const float *)q->data, (int)D, (long long)(G * T * D), &zero,
                                               (float *)s->data, (int)S, (long long)(G * T * S), (int)(B * Hkv)));
    }
    if (mask || r16) { /* without a mask only the rounding and the scaling */
        mask_dev m;
        if ((st = cuda_stage_mask(c, mask, B, T, S, 0, &m, err)) != NNT_OK) return st;
        k_mask<<<grid_for(n), CUDA_THREADS, 0, c->stream>>>((float *)s->data, m, B, Hq, T, S, r16, scale);
    }
    return cuda_done(c, "attn_scores", err);
}

/* s [rows = B H T, S] -> p (may alias s); one warp per row. The sink of head (row / T) % H joins
 * the row as one more column and is dropped; a row with nothing finite (and no sink) is zeros.
 * Maximum as the cpu backend takes it (NaN entries never win), the sum in double. r16: the
 * results rounded to bfloat16; shifted (with r16): the sink rounded, and each score less the
 * maximum rounded before its exponential. */
__global__ void k_softmax(const float *s, const float *sinks, float *p, int64_t rows, int64_t H, int64_t T, int64_t S,
                          int r16, int shifted)
{
    int lane = threadIdx.x & 31;
    ROW_LOOP(r, rows)
    {
        const float *row = s + r * S;
        float *out = p + r * S;
        float sink = sinks ? sinks[(r / T) % H] : -INFINITY;
        if (shifted && sinks) sink = round_bf16(sink);
        float mx = -INFINITY;
        for (int64_t j = lane; j < S; j += 32) mx = row[j] > mx ? row[j] : mx;
        mx = warp_max_f(mx);
        mx = isnan(sink) ? sink : (sink > mx ? sink : mx);
        if (mx == -INFINITY || isnan(mx)) {
            for (int64_t j = lane; j < S; j += 32) out[j] = isnan(mx) ? mx : 0.0f;
            continue;
        }
        double part = 0.0;
        for (int64_t j = lane; j < S; j += 32) {
            float d = shifted ? round_bf16(row[j] - mx) : row[j] - mx;
            float e = row[j] == -INFINITY ? 0.0f : expf(d);
            out[j] = e;
            part += e;
        }
        double sink_e = !sinks ? 0.0 : shifted ? exp((double)round_bf16(sink - mx)) : exp((double)sink - mx);
        double sum = warp_sum_d(part) + sink_e;
        float inv = (float)(1.0 / sum);
        for (int64_t j = lane; j < S; j += 32) out[j] = r16_if(r16, out[j] * inv);
    }
}

extern "C" nnt_status cuda_softmax(void *ctx, const nnt_tensor *s, const float *sinks, nnt_tensor *p, nnt_error *err)
{
    cuda_ctx *c = (cuda_ctx *)ctx;
    nnt_status st;
    if ((st = cuda_check("softmax", "s", s, NNT_F32, 4, err)) != NNT_OK) return st;
    if ((st = cuda_check("softmax", "p", p, NNT_F32, 4, err)) != NNT_OK) return st;
    int64_t B = s->shape[0], H = s->shape[1], T = s->shape[2], S = s->shape[3];
    if (nnt_tensor_numel(p) != B * H * T * S) return cuda_error(err, NNT_ERR_SHAPE, "cuda softmax: p size differs");
    int64_t rows = B * H * T;
    if (rows == 0 || S == 0) return NNT_OK;
    CUDA_CHECK(cudaSetDevice(c->device));
    void *dsinks = NULL;
    if (sinks) {
        size_t sb = (size_t)H * sizeof(float);
        if ((st = cuda_stage_begin(c, cuda_stage_size(sb), err)) != NNT_OK) return st;
        if ((st = cuda_stage_put(c, sinks, sb, &dsinks, err)) != NNT_OK) return st;
    }
    k_softmax<<<grid_rows(rows), CUDA_THREADS, 0, c->stream>>>((const float *)s->data, (const float *)dsinks,
                                                               (float *)p->data, rows, H, T, S, cuda_bf16(p),
                                                               cuda_bf16_shifted(p));
    return cuda_done(c, "softmax", err);
}

/* p [B, Hq, T, S], v [B, Hkv, S, Dv] -> o [B, T, Hq, Dv]. For each (b, h), column-major
 * o[b, :, h, :]^T (Dv x T, stride Hq Dv) = v[b, h / G]^T (Dv x S) . p[b, h]^T (S x T): one
 * batched GEMM over pointer arrays built here and staged. */
extern "C" nnt_status cuda_attn_mix(void *ctx, const nnt_tensor *p, const nnt_tensor *v, nnt_tensor *o, nnt_error *err)
{
    cuda_ctx *c = (cuda_ctx *)ctx;
    nnt_status st;
    if ((st = cuda_check("attn_mix", "p", p, NNT_F32, 4, err)) != NNT_OK) return st;
    if ((st = cuda_check("attn_mix", "v", v, NNT_F32, 4, err)) != NNT_OK) return st;
    if ((st = cuda_check("attn_mix", "o", o, NNT_F32, 4, err)) != NNT_OK) return st;
    int64_t B = p->shape[0], Hq = p->shape[1], T = p->shape[2], S = p->shape[3];
    int64_t Hkv = v->shape[1], Dv = v->shape[3];
    if (v->shape[0] != B || v->shape[2] != S || Hkv == 0 || Hq % Hkv || o->shape[0] != B || o->shape[1] != T ||
        o->shape[2] != Hq || o->shape[3] != Dv)
        return cuda_error(err, NNT_ERR_SHAPE, "cuda attn_mix: p, v and o shapes disagree");
    int64_t G = Hq / Hkv, batch = B * Hq;
    if (batch == 0 || T == 0 || Dv == 0) return NNT_OK;
    if (T > INT_MAX || S > INT_MAX || Hq * Dv > INT_MAX || batch > INT_MAX)
        return cuda_error(err, NNT_ERR_UNSUPPORTED, "cuda attn_mix: dimensions above %d", INT_MAX);
    CUDA_CHECK(cudaSetDevice(c->device));
    if (S == 0) {
        CUDA_CHECK(cudaMemsetAsync(o->data, 0, (size_t)(B * T * Hq * Dv) * sizeof(float), c->stream));
        return cuda_done(c, "attn_mix", err);
    }
    const float **ptrs = (const float **)malloc((size_t)(3 * batch) * sizeof *ptrs);
    if (!ptrs) return cuda_error(err, NNT_ERR_OUT_OF_MEMORY, "no memory for %lld pointers", (long long)(3 * batch));
    const float *pd = (const float *)p->data, *vd = (const float *)v->data;
    float *od = (float *)o->data;
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < Hq; h++) {
            int64_t i = b * Hq + h;
            ptrs[i] = vd + (b * Hkv + h / G) * S * Dv;             /* A: v[b, h / G] */
            ptrs[batch + i] = pd + (b * Hq + h) * T * S;           /* B: p[b, h] */
            ptrs[2 * batch + i] = od + (b * T * Hq + h) * Dv;      /* C: o[b, 0, h] */
        }
    size_t bytes = (size_t)(3 * batch) * sizeof *ptrs;
    void *dptrs;
    st = cuda_stage_begin(c, cuda_stage_size(bytes), err);
    if (st == NNT_OK) st = cuda_stage_put(c, ptrs, bytes, &dptrs, err);
    free(ptrs);
    if (st != NNT_OK) return st;
    const float *const *A = (const float *const *)dptrs;
    const float *const *Bm = A + batch;
    float *const *C = (float *const *)(A + 2 * batch);
    const float one = 1.0f, zero = 0.0f;
    CUBLAS_CHECK(cublasSgemmBatched(c->blas, CUBLAS_OP_N, CUBLAS_OP_N, (int)Dv, (int)T, (int)S, &one, A, (int)Dv, Bm,
                                    (int)S, &zero, C, (int)(Hq * Dv), (int)batch));
    if ((st = cuda_round_result(c, o, err)) != NNT_OK) return st;
    return cuda_done(c, "attn_mix", err);
}
