/* cuda_backward_attention.cu - the cuda backend's backward ops of the attention kernels
 * (nnt_backend.h, "backward"): rotary embedding (the transposed rotation, in place), masked
 * scores, softmax (with or without a sink column) and the value mix, grouped heads as the
 * forward (cuda_attention.cu). Gradients are float32 and added into; rope_backward alone
 * replaces. Mirrors kernels/cpu/cpu_backward_attention.c.
 *
 * The products are cuBLAS calls with beta = 1 (adding into the gradients): the scores' backward
 * first writes the masked, scaled ds into the scratch (hidden entries 0, so their ds is never
 * read into a product), then one strided-batched GEMM per gradient over the B Hkv key heads (the
 * G query heads of a key head are G T consecutive rows of q and ds); the mix's backward runs
 * batched GEMMs over pointer arrays, dv once per query head of a group so that no two entries of
 * one batch add into the same dv block. */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_device.cuh"
#include "cuda_mask.cuh"

/* ---- rope_backward ---- */

/* dx [B, H, T, D] F32 in place; pos [B, T]; inv [half]. Every rotated pair (g1, g2) becomes
 * (c g1 + s g2, c g2 - s g1) with c, s = cos, sin(pos inv) mscale: the transpose of rope's
 * rotation, the angle computed as the forward computes it. One thread per pair. Su et al. 2021. */
__global__ void k_rope_bwd(float *x, const int32_t *pos, const float *inv, int rot_start, int half, int neox,
                           float mscale, int64_t B, int64_t H, int64_t T, int64_t D)
{
    GRID_LOOP(i, B * H * T * half)
    {
        int j = (int)(i % half);
        int64_t r = i / half; /* (b H + h) T + t */
        int64_t t = r % T, b = r / (H * T);
        float *v = x + r * D + rot_start;
        float a = (float)pos[b * T + t] * inv[j];
        float cs = cosf(a) * mscale, sn = sinf(a) * mscale;
        int i1 = neox ? j : 2 * j, i2 = neox ? j + half : 2 * j + 1;
        float g1 = v[i1], g2 = v[i2];
        v[i1] = g1 * cs + g2 * sn;
        v[i2] = g2 * cs - g1 * sn;
    }
}

extern "C" nnt_status cuda_rope_backward(void *ctx, nnt_tensor *dx, const int32_t *pos, const float *inv_freq,
                                         int rot_start, int rot_dim, nnt_rope_style style, float mscale,
                                         nnt_error *err)
{
    cuda_ctx *c = (cuda_ctx *)ctx;
    nnt_status st;
    if ((st = cuda_check("rope_backward", "dx", dx, NNT_F32, 4, err)) != NNT_OK) return st;
    int64_t B = dx->shape[0], H = dx->shape[1], T = dx->shape[2], D = dx->shape[3];
    if (rot_dim % 2 || rot_start < 0 || rot_dim < 0 || rot_start + rot_dim > D)
        return cuda_error(err, NNT_ERR_INVALID_ARGUMENT,
                          "cuda rope_backward: rotated dims [%d, %d) do not fit a head of %lld", rot_start,
                          rot_start + rot_dim, (long long)D);
    if (style != NNT_ROPE_NEOX && style != NNT_ROPE_INTERLEAVED)
        return cuda_error(err, NNT_ERR_INVALID_ARGUMENT, "cuda rope_backward: unknown rope style %d", (int)style);
    int half = rot_dim / 2;
    if (half == 0 || B * H * T == 0) return NNT_OK;
    if (!pos || !inv_freq)
        return cuda_error(err, NNT_ERR_INVALID_ARGUMENT, "cuda rope_backward: positions or inv_freq missing");
    CUDA_CHECK(cudaSetDevice(c->device));
    size_t pb = (size_t)(B * T) * sizeof(int32_t), fb = (size_t)half * sizeof(float);
    void *dpos, *dinv;
    if ((st = cuda_stage_begin(c, cuda_stage_size(pb) + cuda_stage_size(fb), err)) != NNT_OK) return st;
    if ((st = cuda_stage_put(c, pos, pb, &dpos, err)) != NNT_OK) return st;
    if ((st = cuda_stage_put(c, inv_freq, fb, &dinv, err)) != NNT_OK) return st;
    k_rope_bwd<<<grid_for(B * H * T * half), CUDA_THREADS, 0, c->stream>>>(
        (float *)dx->data, (const int32_t *)dpos, (const float *)dinv, rot_start, half, style == NNT_ROPE_NEOX,
        mscale, B, H, T, D);
    return cuda_done(c, "rope_backward", err);
}

/* ---- attn_scores_backward ---- */

/* ds [B, H, T, S] -> m [B, H, T, S] = scale ds where the mask shows the entry, 0 where it hides
 * it (nnt_attn_mask's rules, as k_mask of cuda_attention.cu); one thread per entry. */
__global__ void k_mask_grad(const float *ds, mask_dev mk, float scale, float *m, int64_t B, int64_t H, int64_t T,
                            int64_t S)
{
    GRID_LOOP(i, B * H * T * S)
    {
        int64_t j = i % S, r = i / S;
        int64_t t = r % T, b = r / (T * H);
        int vis = mask_visible(mk, b, t, j, T, S);
        m[i] = vis ? ds[i] * scale : 0.0f;
    }
}

/* q [B, Hq, T, D], k [B, Hkv, S, D], ds [B, Hq, T, S]: with m the masked scale ds (scratch),
 * per key head (b, g) over its G T query rows: dq[b, g] (G T x D) += m (G T x S) . k[b, g]
 * (S x D); dk[b, g] (S x D) += m^T (S x G T) . q[b, g] (G T x D). */
extern "C" nnt_status cuda_attn_scores_backward(void *ctx, const nnt_tensor *q, const nnt_tensor *k, float scale,
                                                const nnt_attn_mask *mask, const nnt_tensor *ds, nnt_tensor *dq,
                                                nnt_tensor *dk, nnt_error *err)
{
    cuda_ctx *c = (cuda_ctx *)ctx;
    nnt_status st;
    if ((st = cuda_check("attn_scores_backward", "q", q, NNT_F32, 4, err)) != NNT_OK) return st;
    if ((st = cuda_check("attn_scores_backward", "k", k, NNT_F32, 4, err)) != NNT_OK) return st;
    if ((st = cuda_check("attn_scores_backward", "ds", ds, NNT_F32, 4, err)) != NNT_OK) return st;
    int64_t B = q->shape[0], Hq = q->shape[1], T = q->shape[2], D = q->shape[3], Hkv = k->shape[1], S = k->shape[2];
    if (k->shape[0] != B || k->shape[3] != D || Hkv == 0 || Hq % Hkv || ds->shape[0] != B || ds->shape[1] != Hq ||
        ds->shape[2] != T || ds->shape[3] != S)
        return cuda_error(err, NNT_ERR_SHAPE, "cuda attn_scores_backward: q, k and ds shapes disagree");
    if (dq && (dq->dtype != NNT_F32 || !dq->data || nnt_tensor_numel(dq) != nnt_tensor_numel(q)))
        return cuda_error(err, NNT_ERR_SHAPE, "cuda attn_scores_backward: dq is not an F32 tensor shaped as q");
    if (dk && (dk->dtype != NNT_F32 || !dk->data || nnt_tensor_numel(dk) != nnt_tensor_numel(k)))
        return cuda_error(err, NNT_ERR_SHAPE, "cuda attn_scores_backward: dk is not an F32 tensor shaped as k");
    int64_t n = B * Hq * T * S, G = Hq / Hkv;
    if ((!dq && !dk) || n == 0 || D == 0) return NNT_OK;
    if (G * T > INT_MAX || S > INT_MAX || D > INT_MAX || B * Hkv > INT_MAX)
        return cuda_error(err, NNT_ERR_UNSUPPORTED, "cuda attn_scores_backward: dimensions above %d", INT_MAX);
    CUDA_CHECK(cudaSetDevice(c->device));
    mask_dev m;
    if ((st = cuda_stage_mask(c, mask, B, T, S, 0, &m, err)) != NNT_OK) return st;
    void *scratch;
    if ((st = cuda_scratch(c, (size_t)n * sizeof(float), &scratch, err)) != NNT_OK) return st;
    float *mg = (float *)scratch;
    k_mask_grad<<<grid_for(n), CUDA_THREADS, 0, c->stream>>>((const float *)ds->data, m, scale, mg, B, Hq, T, S);
    CUDA_LAUNCHED();
    const float one = 1.0f;
    /* column-major views of the row-major blocks: dq^T (D x GT) += k^T (D x S) . m^T (S x GT) */
    if (dq)
        CUBLAS_CHECK(cublasSgemmStridedBatched(c->blas, CUBLAS_OP_N, CUBLAS_OP_N, (int)D, (int)(G * T), (int)S, &one,
                                               (const float *)k->data, (int)D, (long long)(S * D), mg, (int)S,
                                               (long long)(G * T * S), &one, (float *)dq->data, (int)D,
                                               (long long)(G * T * D), (int)(B * Hkv)));
    /* dk^T (D x S) += q^T (D x GT) . m (GT x S) */
    if (dk)
        CUBLAS_CHECK(cublasSgemmStridedBatched(c->blas, CUBLAS_OP_N, CUBLAS_OP_T, (int)D, (int)S, (int)(G * T), &one,
                                               (const float *)q->data, (int)D, (long long)(G * T * D), mg, (int)S,
                                               (long long)(G * T * S), &one, (float *)dk->data, (int)D,
                                               (long long)(S * D), (int)(B * Hkv)));
    return cuda_done(c, "attn_scores_backward", err);
}

/* ---- softmax_backward ---- */

/* p, dp, ds [rows, S]: ds += p (dp - sum_s dp p) per row where p != 0 (the forward's zeros:
 * hidden entries and all-masked rows get nothing), the dot product in double. One warp per row.
 * The sink needs nothing: p already holds its share of the normalisation. */
__global__ void k_softmax_bwd(const float *p, const float *dp, float *ds, int64_t rows, int64_t S)
{
    int lane = threadIdx.x & 31;
    ROW_LOOP(r, rows)
    {
        const float *pr = p + r * S, *gr = dp + r * S;
        float *dr = ds + r * S;
        double dot = 0.0;
        for (int64_t s = lane; s < S; s += 32) dot += (double)pr[s] * gr[s];
        dot = warp_sum_d(dot);
        for (int64_t s = lane; s < S; s += 32)
            if (pr[s] != 0.0f) dr[s] += (float)((double)pr[s] * ((double)gr[s] - dot));
    }
}

extern "C" nnt_status cuda_softmax_backward(void *ctx, const nnt_tensor *p, const float *sinks, const nnt_tensor *dp,
                                            nnt_tensor *ds, nnt_error *err)
{
    cuda_ctx *c = (cuda_ctx *)ctx;
    nnt_status st;
    (void)sinks; /* p already holds the sink's share; the sink itself has no gradient */
    if ((st = cuda_check("softmax_backward", "p", p, NNT_F32, 4, err)) != NNT_OK) return st;
    if ((st = cuda_check("softmax_backward", "dp", dp, NNT_F32, 0, err)) != NNT_OK) return st;
    int64_t S = p->shape[3], n = nnt_tensor_numel(p), R = n / (S ? S : 1);
    if (nnt_tensor_numel(dp) != n) return cuda_error(err, NNT_ERR_SHAPE, "cuda softmax_backward: dp is not shaped as p");
    if (!ds) return NNT_OK;
    if ((st = cuda_check("softmax_backward", "ds", ds, NNT_F32, 0, err)) != NNT_OK) return st;
    if (nnt_tensor_numel(ds) != n) return cuda_error(err, NNT_ERR_SHAPE, "cuda softmax_backward: ds is not shaped as p");
    if (n == 0) return NNT_OK;
    CUDA_CHECK(cudaSetDevice(c->device));
    k_softmax_bwd<<<grid_rows(R), CUDA_THREADS, 0, c->stream>>>((const float *)p->data, (const float *)dp->data,
                                                                (float *)ds->data, R, S);
    return cuda_done(c, "softmax_backward", err);
}

/* ---- attn_mix_backward ---- */

/* p [B, Hq, T, S], v [B, Hkv, S, Dv], dout [B, T, Hq, Dv]. Per (b, h), column-major:
 * dp[b, h]^T (S x T) += v[b, h / G] (S x Dv, from its Dv x S view transposed) . dout[b, :, h]^T
 * (Dv x T, leading dimension Hq Dv); dv[b, g]^T (Dv x S) += dout[b, :, h]^T (Dv x T) . p[b, h]
 * (T x S, from its S x T view transposed), one batch over the (b, g) per query head of the
 * group. Pointer arrays built here and staged, as the forward's. */
extern "C" nnt_status cuda_attn_mix_backward(void *ctx, const nnt_tensor *p, const nnt_tensor *v,
                                             const nnt_tensor *dout, nnt_tensor *dp, nnt_tensor *dv, nnt_error *err)
{
    cuda_ctx *c = (cuda_ctx *)ctx;
    nnt_status st;
    if ((st = cuda_check("attn_mix_backward", "p", p, NNT_F32, 4, err)) != NNT_OK) return st;
    if ((st = cuda_check("attn_mix_backward", "v", v, NNT_F32, 4, err)) != NNT_OK) return st;
    if ((st = cuda_check("attn_mix_backward", "dout", dout, NNT_F32, 4, err)) != NNT_OK) return st;
    int64_t B = p->shape[0], Hq = p->shape[1], T = p->shape[2], S = p->shape[3], Hkv = v->shape[1], Dv = v->shape[3];
    if (v->shape[0] != B || v->shape[2] != S || Hkv == 0 || Hq % Hkv || dout->shape[0] != B || dout->shape[1] != T ||
        dout->shape[2] != Hq || dout->shape[3] != Dv)
        return cuda_error(err, NNT_ERR_SHAPE, "cuda attn_mix_backward: p, v and dout shapes disagree");
    if (dp && (dp->dtype != NNT_F32 || !dp->data || nnt_tensor_numel(dp) != nnt_tensor_numel(p)))
        return cuda_error(err, NNT_ERR_SHAPE, "cuda attn_mix_backward: dp is not an F32 tensor shaped as p");
    if (dv && (dv->dtype != NNT_F32 || !dv->data || nnt_tensor_numel(dv) != nnt_tensor_numel(v)))
        return cuda_error(err, NNT_ERR_SHAPE, "cuda attn_mix_backward: dv is not an F32 tensor shaped as v");
    int64_t G = Hq / Hkv, batch = B * Hq, ldo = Hq * Dv;
    if ((!dp && !dv) || batch == 0 || T == 0 || S == 0 || Dv == 0) return NNT_OK;
    if (T > INT_MAX || S > INT_MAX || ldo > INT_MAX || batch > INT_MAX)
        return cuda_error(err, NNT_ERR_UNSUPPORTED, "cuda attn_mix_backward: dimensions above %d", INT_MAX);
    CUDA_CHECK(cudaSetDevice(c->device));
    /* [0, 3 batch): dp's A (v), B (dout), C (dp) per (b, h); [3 batch, 6 batch): dv's A (dout),
     * B (p), C (dv) ordered by query head in group, then (b, g) */
    const float **ptrs = (const float **)malloc((size_t)(6 * batch) * sizeof *ptrs);
    if (!ptrs)
        return cuda_error(err, NNT_ERR_OUT_OF_MEMORY, "cuda attn_mix_backward: no memory for %lld pointers",
                          (long long)(6 * batch));
    const float *pd = (const float *)p->data, *vd = (const float *)v->data, *go = (const float *)dout->data;
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < Hq; h++) {
            int64_t i = b * Hq + h, gi = h % G, g = h / G, j = gi * (B * Hkv) + b * Hkv + g;
            ptrs[i] = vd + (b * Hkv + g) * S * Dv;
            ptrs[batch + i] = go + b * T * ldo + h * Dv;
            ptrs[2 * batch + i] = dp ? (const float *)dp->data + (b * Hq + h) * T * S : NULL;
            ptrs[3 * batch + j] = go + b * T * ldo + h * Dv;
            ptrs[4 * batch + j] = pd + (b * Hq + h) * T * S;
            ptrs[5 * batch + j] = dv ? (const float *)dv->data + (b * Hkv + g) * S * Dv : NULL;
        }
    size_t bytes = (size_t)(6 * batch) * sizeof *ptrs;
    void *dptrs;
    st = cuda_stage_begin(c, cuda_stage_size(bytes), err);
    if (st == NNT_OK) st = cuda_stage_put(c, ptrs, bytes, &dptrs, err);
    free(ptrs);
    if (st != NNT_OK) return st;
    const float *const *P = (const float *const *)dptrs;
    const float one = 1.0f;
    if (dp)
        CUBLAS_CHECK(cublasSgemmBatched(c->blas, CUBLAS_OP_T, CUBLAS_OP_N, (int)S, (int)T, (int)Dv, &one, P, (int)Dv,
                                        P + batch, (int)ldo, &one, (float *const *)(P + 2 * batch), (int)S,
                                        (int)batch));
    if (dv) {
        int64_t nb = B * Hkv;
        for (int64_t gi = 0; gi < G; gi++) {
            const float *const *Q = P + 3 * batch + gi * nb;
            CUBLAS_CHECK(cublasSgemmBatched(c->blas, CUBLAS_OP_N, CUBLAS_OP_T, (int)Dv, (int)S, (int)T, &one, Q,
                                            (int)ldo, Q + batch, (int)S, &one, (float *const *)(Q + 2 * batch),
                                            (int)Dv, (int)nb));
        }
    }
    return cuda_done(c, "attn_mix_backward", err);
}
