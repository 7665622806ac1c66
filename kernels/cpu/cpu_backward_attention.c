/* cpu_backward_attention.c - the cpu backend's backward ops of the attention kernels: rotary
 * embedding (the transposed rotation, in place), masked scores, softmax (with or without a
 * sink column) and the value mix, grouped heads as the forward. Gradients are float32 and
 * added into (nnt_backend.h, "backward"); rope_backward alone replaces. */
#include <math.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "cpu_internal.h"

/* dx [B, H, T, D] in place: every rotated pair (x1, x2) turned by -angle and times mscale,
 * (g1, g2) -> (c g1 + s g2, c g2 - s g1), the transpose of rope's rotation. Su et al. 2021. */
nnt_status cpu_rope_backward(void *ctx, nnt_tensor *dx, const int32_t *pos, const float *inv_freq, int rot_start,
                             int rot_dim, nnt_rope_style style, float mscale, nnt_error *err)
{
    cpu_ctx *c = ctx;
    nnt_status st;
    if ((st = cpu_check("rope_backward", "dx", dx, NNT_F32, 4, err)) != NNT_OK) return st;
    int64_t B = dx->shape[0], H = dx->shape[1], T = dx->shape[2], D = dx->shape[3];
    if (rot_dim % 2 || rot_start < 0 || rot_dim < 0 || rot_start + rot_dim > D)
        return cpu_error(err, NNT_ERR_INVALID_ARGUMENT,
                         "cpu rope_backward: rotated dims [%d, %d) do not fit a head of %lld", rot_start,
                         rot_start + rot_dim, (long long)D);
    if (style != NNT_ROPE_NEOX && style != NNT_ROPE_INTERLEAVED)
        return cpu_error(err, NNT_ERR_INVALID_ARGUMENT, "cpu rope_backward: unknown rope style %d", (int)style);
    int half = rot_dim / 2;
    float *xd = dx->data;
#pragma omp parallel for collapse(2) num_threads(c->threads) schedule(static)
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < H; h++)
            for (int64_t t = 0; t < T; t++) {
                float *v = xd + ((b * H + h) * T + t) * D + rot_start;
                float p = (float)pos[b * T + t];
                for (int i = 0; i < half; i++) {
                    float a = p * inv_freq[i]; /* the forward's angle, to the bit */
                    float cs = cosf(a) * mscale, sn = sinf(a) * mscale;
                    int i1 = style == NNT_ROPE_NEOX ? i : 2 * i, i2 = style == NNT_ROPE_NEOX ? i + half : 2 * i + 1;
                    float g1 = v[i1], g2 = v[i2];
                    v[i1] = g1 * cs + g2 * sn;
                    v[i2] = g2 * cs - g1 * sn;
                }
            }
    return NNT_OK;
}

/* Head h of row b of ds [B, Hq, T, S], masked (hidden entries 0) and times scale, into m [T, S] */
static void masked_head(const float *ds, const nnt_attn_mask *mask, float scale, int64_t b, int64_t h, int64_t Hq,
                        int64_t T, int64_t S, float *m)
{
    const float *g = ds + (b * Hq + h) * T * S;
    for (int64_t t = 0; t < T; t++)
        for (int64_t s = 0; s < S; s++) m[t * S + s] = cpu_visible(mask, b, t, s, T, S) ? g[t * S + s] * scale : 0.0f;
}

static int thread_id(void)
{
#ifdef _OPENMP
    return omp_get_thread_num();
#else
    return 0;
#endif
}

/* q [B, Hq, T, D], k [B, Hkv, S, D], ds [B, Hq, T, S]; dq += scale ds . k, dk += scale ds^T . q
 * (each key head over its group of query heads), hidden entries left out. Each thread masks one
 * head's [T, S] block into its own panel and runs a single-threaded sgemm on it (OpenBLAS runs
 * it on the calling thread inside a parallel region). */
nnt_status cpu_attn_scores_backward(void *ctx, const nnt_tensor *q, const nnt_tensor *k, float scale,
                                    const nnt_attn_mask *mask, const nnt_tensor *ds, nnt_tensor *dq, nnt_tensor *dk,
                                    nnt_error *err)
{
    cpu_ctx *c = ctx;
    nnt_status st;
    if ((st = cpu_check("attn_scores_backward", "q", q, NNT_F32, 4, err)) != NNT_OK) return st;
    if ((st = cpu_check("attn_scores_backward", "k", k, NNT_F32, 4, err)) != NNT_OK) return st;
    if ((st = cpu_check("attn_scores_backward", "ds", ds, NNT_F32, 4, err)) != NNT_OK) return st;
    int64_t B = q->shape[0], Hq = q->shape[1], T = q->shape[2], D = q->shape[3], Hkv = k->shape[1], S = k->shape[2];
    if (k->shape[0] != B || k->shape[3] != D || Hkv == 0 || Hq % Hkv || ds->shape[0] != B || ds->shape[1] != Hq ||
        ds->shape[2] != T || ds->shape[3] != S)
        return cpu_error(err, NNT_ERR_SHAPE, "cpu attn_scores_backward: q, k and ds shapes disagree");
    if (dq && (dq->dtype != NNT_F32 || !dq->data || nnt_tensor_numel(dq) != nnt_tensor_numel(q)))
        return cpu_error(err, NNT_ERR_SHAPE, "cpu attn_scores_backward: dq is not an F32 tensor shaped as q");
    if (dk && (dk->dtype != NNT_F32 || !dk->data || nnt_tensor_numel(dk) != nnt_tensor_numel(k)))
        return cpu_error(err, NNT_ERR_SHAPE, "cpu attn_scores_backward: dk is not an F32 tensor shaped as k");
    if ((!dq && !dk) || B * Hq * T * S == 0 || D == 0) return NNT_OK;
    for (int t = 0; t < c->threads; t++) {
        float *p;
        if ((st = cpu_panel(c, t, (size_t)(T * S), &p, err)) != NNT_OK) return st;
    }
    int64_t group = Hq / Hkv;
    const float *qd = q->data, *kd = k->data, *g = ds->data;
    float **panel = c->panel;
    if (dq) {
        float *d = dq->data;
#pragma omp parallel for collapse(2) num_threads(c->threads) schedule(static)
        for (int64_t b = 0; b < B; b++)
            for (int64_t h = 0; h < Hq; h++) {
                float *m = panel[thread_id()];
                masked_head(g, mask, scale, b, h, Hq, T, S, m);
                cpu_sgemm(c, 0, 0, (int)T, (int)D, (int)S, 1.0f, m, (int)S,
                            kd + (b * Hkv + h / group) * S * D, (int)D, 1.0f, d + (b * Hq + h) * T * D, (int)D);
            }
    }
    if (dk) {
        float *d = dk->data;
#pragma omp parallel for collapse(2) num_threads(c->threads) schedule(static)
        for (int64_t b = 0; b < B; b++)
            for (int64_t kh = 0; kh < Hkv; kh++)
                for (int64_t h = kh * group; h < (kh + 1) * group; h++) {
                    float *m = panel[thread_id()];
                    masked_head(g, mask, scale, b, h, Hq, T, S, m);
                    cpu_sgemm(c, 1, 0, (int)S, (int)D, (int)T, 1.0f, m, (int)S,
                                qd + (b * Hq + h) * T * D, (int)D, 1.0f, d + (b * Hkv + kh) * S * D, (int)D);
                }
    }
    return NNT_OK;
}

/* p [B, H, T, S] (softmax's output), dp, ds: ds += p (dp - sum_s dp p) per row, in double */
nnt_status cpu_softmax_backward(void *ctx, const nnt_tensor *p, const float *sinks, const nnt_tensor *dp,
                                nnt_tensor *ds, nnt_error *err)
{
    cpu_ctx *c = ctx;
    nnt_status st;
    (void)sinks; /* p already holds the sink's share; the sink itself has no gradient */
    if ((st = cpu_check("softmax_backward", "p", p, NNT_F32, 4, err)) != NNT_OK) return st;
    if ((st = cpu_check("softmax_backward", "dp", dp, NNT_F32, 0, err)) != NNT_OK) return st;
    int64_t S = p->shape[3], n = nnt_tensor_numel(p), R = n / (S ? S : 1);
    if (nnt_tensor_numel(dp) != n) return cpu_error(err, NNT_ERR_SHAPE, "cpu softmax_backward: dp is not shaped as p");
    if (!ds) return NNT_OK;
    if ((st = cpu_check("softmax_backward", "ds", ds, NNT_F32, 0, err)) != NNT_OK) return st;
    if (nnt_tensor_numel(ds) != n) return cpu_error(err, NNT_ERR_SHAPE, "cpu softmax_backward: ds is not shaped as p");
    const float *pd = p->data, *gd = dp->data;
    float *d = ds->data;
#pragma omp parallel for num_threads(c->threads) schedule(static)
    for (int64_t r = 0; r < R; r++) {
        const float *pr = pd + r * S, *gr = gd + r * S;
        float *dr = d + r * S;
        double dot = 0.0;
        for (int64_t s = 0; s < S; s++) dot += (double)pr[s] * gr[s];
        for (int64_t s = 0; s < S; s++)
            if (pr[s] != 0.0f) dr[s] += (float)((double)pr[s] * ((double)gr[s] - dot));
    }
    return NNT_OK;
}

/* p [B, Hq, T, S], v [B, Hkv, S, Dv], dout [B, T, Hq, Dv]: dp += dout . v^T per head;
 * dv += p^T . dout over each value head's query heads */
nnt_status cpu_attn_mix_backward(void *ctx, const nnt_tensor *p, const nnt_tensor *v, const nnt_tensor *dout,
                                 nnt_tensor *dp, nnt_tensor *dv, nnt_error *err)
{
    cpu_ctx *c = ctx;
    nnt_status st;
    if ((st = cpu_check("attn_mix_backward", "p", p, NNT_F32, 4, err)) != NNT_OK) return st;
    if ((st = cpu_check("attn_mix_backward", "v", v, NNT_F32, 4, err)) != NNT_OK) return st;
    if ((st = cpu_check("attn_mix_backward", "dout", dout, NNT_F32, 4, err)) != NNT_OK) return st;
    int64_t B = p->shape[0], Hq = p->shape[1], T = p->shape[2], S = p->shape[3], Hkv = v->shape[1], Dv = v->shape[3];
    if (v->shape[0] != B || v->shape[2] != S || Hkv == 0 || Hq % Hkv || dout->shape[0] != B || dout->shape[1] != T ||
        dout->shape[2] != Hq || dout->shape[3] != Dv)
        return cpu_error(err, NNT_ERR_SHAPE, "cpu attn_mix_backward: p, v and dout shapes disagree");
    if (dp && (dp->dtype != NNT_F32 || !dp->data || nnt_tensor_numel(dp) != nnt_tensor_numel(p)))
        return cpu_error(err, NNT_ERR_SHAPE, "cpu attn_mix_backward: dp is not an F32 tensor shaped as p");
    if (dv && (dv->dtype != NNT_F32 || !dv->data || nnt_tensor_numel(dv) != nnt_tensor_numel(v)))
        return cpu_error(err, NNT_ERR_SHAPE, "cpu attn_mix_backward: dv is not an F32 tensor shaped as v");
    if (B * Hq * T == 0 || S == 0 || Dv == 0) return NNT_OK;
    int64_t group = Hq / Hkv, ldo = Hq * Dv;
    const float *pd = p->data, *vd = v->data, *go = dout->data;
    if (dp) {
        float *d = dp->data;
#pragma omp parallel for collapse(2) num_threads(c->threads) schedule(static)
        for (int64_t b = 0; b < B; b++)
            for (int64_t h = 0; h < Hq; h++)
                cpu_sgemm(c, 0, 1, (int)T, (int)S, (int)Dv, 1.0f,
                            go + b * T * ldo + h * Dv, (int)ldo, vd + (b * Hkv + h / group) * S * Dv, (int)Dv, 1.0f,
                            d + (b * Hq + h) * T * S, (int)S);
    }
    if (dv) {
        float *d = dv->data;
#pragma omp parallel for collapse(2) num_threads(c->threads) schedule(static)
        for (int64_t b = 0; b < B; b++)
            for (int64_t g = 0; g < Hkv; g++)
                for (int64_t h = g * group; h < (g + 1) * group; h++)
                    cpu_sgemm(c, 1, 0, (int)S, (int)Dv, (int)T, 1.0f,
                                pd + (b * Hq + h) * T * S, (int)S, go + b * T * ldo + h * Dv, (int)ldo, 1.0f,
                                d + (b * Hkv + g) * S * Dv, (int)Dv);
    }
    return NNT_OK;
}
