/* cuda_attention_fused.cu - the cuda backend's attention without the pattern (attn_fused): one
 * warp per query row walks the keys 32 at a time, one key per lane, with an online softmax
 * (the running maximum and sum of FlashAttention: Dao et al. 2022, arXiv:2205.14135), so no
 * [B, Hq, T, S] tensor is ever written; a group of 32 keys the mask hides from the row is
 * skipped before any product. The cpu backend's cpu_attention_fused.c is the reference.
 *
 * Per row: the query in shared memory, each lane's dot product with its key, the group's
 * maximum and sum by warp shuffles, then every lane adds the 32 probabilities times the value
 * rows into its slice of the output (lane d, d + 32, ...: coalesced reads of each value row).
 * A sink starts the row at m = sink, l = 1. Declined (done = 0): bfloat16-flagged outputs (the
 * three ops' roundings) and value heads wider than FUSED_MAX_DV. */
#include <limits.h>
#include <string.h>

#include "cuda_device.cuh"
#include "cuda_mask.cuh"

#define FUSED_MAX_DV 512 /* value dims a lane's registers hold: 16 per lane */
#define FUSED_SLICE (FUSED_MAX_DV / 32)

/* q [B, Hq, T, D], k [B, Hkv, S, D], v [B, Hkv, S, Dv] -> o [B, T, Hq, Dv]; sinks [Hq] or NULL;
 * dynamic shared memory ROWS_PER_BLOCK * D floats (each warp's query). */
__global__ void k_attn_fused(const float *q, const float *k, const float *v, float scale, mask_dev m,
                             const float *sinks, float *o, int64_t B, int64_t Hq, int64_t Hkv, int64_t T, int64_t S,
                             int64_t D, int64_t Dv)
{
    extern __shared__ float qs_all[];
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    float *qs = qs_all + (int64_t)w * D;
    int64_t G = Hq / Hkv;
    ROW_LOOP(row, B * Hq * T)
    {
        int64_t t = row % T, h = (row / T) % Hq, b = row / (T * Hq), g = h / G;
        __syncwarp();
        for (int64_t d = lane; d < D; d += 32) qs[d] = q[row * D + d];
        __syncwarp();
        const float *kh = k + (b * Hkv + g) * S * D, *vh = v + (b * Hkv + g) * S * Dv;
        float mx = sinks ? sinks[h] : -INFINITY, l = sinks ? 1.0f : 0.0f;
        float acc[FUSED_SLICE];
#pragma unroll
        for (int i = 0; i < FUSED_SLICE; i++) acc[i] = 0.0f;
        for (int64_t s0 = 0; s0 < S; s0 += 32) {
            int64_t j = s0 + lane;
            int vis = j < S && mask_visible(m, b, t, j, T, S);
            if (!__ballot_sync(0xffffffffu, vis)) continue; /* the row sees none of these keys */
            float sc = -INFINITY;
            if (vis) {
                const float *kr = kh + j * D;
                float dot = 0.0f;
                for (int64_t d = 0; d < D; d++) dot += qs[d] * kr[d];
                sc = dot * scale;
            }
            float mnew = warp_max_f(sc);
            mnew = mx > mnew ? mx : mnew;
            if (mnew == -INFINITY) continue; /* nothing visible yet */
            float corr = expf(mx - mnew), p = vis ? expf(sc - mnew) : 0.0f;
            l = l * corr + warp_sum_f(p);
#pragma unroll
            for (int i = 0; i < FUSED_SLICE; i++) acc[i] *= corr;
            int64_t n = S - s0 < 32 ? S - s0 : 32;
            for (int jj = 0; jj < n; jj++) {
                float pj = __shfl_sync(0xffffffffu, p, jj);
                if (pj == 0.0f) continue; /* the same for every lane */
                const float *vr = vh + (s0 + jj) * Dv;
#pragma unroll
                for (int i = 0; i < FUSED_SLICE; i++) {
                    int64_t d = lane + 32 * i;
                    if (d < Dv) acc[i] += pj * vr[d];
                }
            }
            mx = mnew;
        }
        float inv = l > 0.0f ? 1.0f / l : (l != l ? l : 0.0f); /* NaN stays; nothing visible: zeros */
        float *orow = o + ((b * T + t) * Hq + h) * Dv;
#pragma unroll
        for (int i = 0; i < FUSED_SLICE; i++) {
            int64_t d = lane + 32 * i;
            if (d < Dv) orow[d] = acc[i] * inv;
        }
    }
}

extern "C" nnt_status cuda_attn_fused(void *ctx, const nnt_tensor *q, const nnt_tensor *k, const nnt_tensor *v,
                                      float scale, const nnt_attn_mask *mask, const float *sinks, nnt_tensor *o,
                                      int *done, nnt_error *err)
{
    cuda_ctx *c = (cuda_ctx *)ctx;
    nnt_status st;
    if (!done) return cuda_error(err, NNT_ERR_INVALID_ARGUMENT, "cuda attn_fused: done is NULL");
    *done = 0;
    if ((st = cuda_check("attn_fused", "q", q, NNT_F32, 4, err)) != NNT_OK) return st;
    if ((st = cuda_check("attn_fused", "k", k, NNT_F32, 4, err)) != NNT_OK) return st;
    if ((st = cuda_check("attn_fused", "v", v, NNT_F32, 4, err)) != NNT_OK) return st;
    if ((st = cuda_check("attn_fused", "o", o, NNT_F32, 4, err)) != NNT_OK) return st;
    int64_t B = q->shape[0], Hq = q->shape[1], T = q->shape[2], D = q->shape[3];
    int64_t Hkv = k->shape[1], S = k->shape[2], Dv = v->shape[3];
    if (k->shape[0] != B || k->shape[3] != D || Hkv == 0 || Hq % Hkv || v->shape[0] != B || v->shape[1] != Hkv ||
        v->shape[2] != S || o->shape[0] != B || o->shape[1] != T || o->shape[2] != Hq || o->shape[3] != Dv)
        return cuda_error(err, NNT_ERR_SHAPE, "cuda attn_fused: q, k, v and o shapes disagree");
    size_t smem = (size_t)ROWS_PER_BLOCK * (size_t)D * sizeof(float);
    if (cuda_bf16(o) || Dv > FUSED_MAX_DV || smem > 48 * 1024) return NNT_OK; /* the three ops take it */
    if (B * Hq * T == 0) {
        *done = 1;
        return NNT_OK;
    }
    CUDA_CHECK(cudaSetDevice(c->device));
    mask_dev m;
    size_t sb = sinks ? (size_t)Hq * sizeof(float) : 0;
    if ((st = cuda_stage_mask(c, mask, B, T, S, sinks ? cuda_stage_size(sb) : 0, &m, err)) != NNT_OK) return st;
    void *dsinks = NULL;
    if (sinks && (st = cuda_stage_put(c, sinks, sb, &dsinks, err)) != NNT_OK) return st;
    k_attn_fused<<<grid_rows(B * Hq * T), CUDA_THREADS, smem, c->stream>>>(
        (const float *)q->data, (const float *)k->data, (const float *)v->data, scale, m, (const float *)dsinks,
        (float *)o->data, B, Hq, Hkv, T, S, D, Dv);
    st = cuda_done(c, "attn_fused", err);
    if (st == NNT_OK) *done = 1;
    return st;
}
