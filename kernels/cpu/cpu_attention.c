/* cpu_attention.c - the cpu backend's attention kernels: rotary embedding, masked scores,
 * softmax with an optional sink column, and the value mix. */
#include <math.h>
#include <string.h>

#include "cpu_internal.h"

/* x [B, H, T, D] F32 in place; pos [B, T]; dims [rot_start, rot_start + rot_dim) rotate.
 * NEOX pairs i with i + R/2; INTERLEAVED pairs 2i with 2i + 1. Su et al. 2021 (RoFormer). */
nnt_status cpu_rope(void *ctx, nnt_tensor *x, const int32_t *pos, const float *inv_freq, int rot_start,
                    int rot_dim, nnt_rope_style style, float mscale, nnt_error *err)
{
    cpu_ctx *c = ctx;
    nnt_status st;
    if ((st = cpu_check("rope", "x", x, NNT_F32, 4, err)) != NNT_OK) return st;
    int64_t B = x->shape[0], H = x->shape[1], T = x->shape[2], D = x->shape[3];
    if (rot_dim % 2 || rot_start < 0 || rot_start + rot_dim > D)
        return cpu_error(err, NNT_ERR_INVALID_ARGUMENT, "cpu rope: rotated dims [%d, %d) do not fit a head of %lld",
                         rot_start, rot_start + rot_dim, (long long)D);
    /* bfloat16 values: cos and sin rounded, then each product and the sum (or, with ..._ONCE, the
     * float32 rotation rounded once) */
    int half = rot_dim / 2, r16 = cpu_bf16(x), once = r16 && (x->flags & NNT_TENSOR_BF16_ONCE);
    float *xd = x->data;
#pragma omp parallel for collapse(2) num_threads(c->threads) schedule(static)
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < H; h++)
            for (int64_t t = 0; t < T; t++) {
                float *v = xd + ((b * H + h) * T + t) * D + rot_start;
                float p = (float)pos[b * T + t];
                for (int i = 0; i < half; i++) {
                    float a = p * inv_freq[i];
                    float cs = cosf(a) * mscale, sn = sinf(a) * mscale;
                    int i1 = style == NNT_ROPE_NEOX ? i : 2 * i;
                    int i2 = style == NNT_ROPE_NEOX ? i + half : 2 * i + 1;
                    float x1 = v[i1], x2 = v[i2];
                    if (once) {
                        cs = cpu_r16(cs);
                        sn = cpu_r16(sn);
                        v[i1] = cpu_r16(x1 * cs - x2 * sn);
                        v[i2] = cpu_r16(x2 * cs + x1 * sn);
                    } else if (r16) {
                        cs = cpu_r16(cs);
                        sn = cpu_r16(sn);
                        v[i1] = cpu_r16(cpu_r16(x1 * cs) - cpu_r16(x2 * sn));
                        v[i2] = cpu_r16(cpu_r16(x2 * cs) + cpu_r16(x1 * sn));
                    } else {
                        v[i1] = x1 * cs - x2 * sn;
                        v[i2] = x2 * cs + x1 * sn;
                    }
                }
            }
    return NNT_OK;
}

/* q [B, Hq, T, D], k [B, Hkv, C, D] -> s [B, Hq, T, S] = scale * q . k^T over k's first S keys
 * (S = nnt_attn_keys(mask, C)), -inf where hidden */
nnt_status cpu_attn_scores(void *ctx, const nnt_tensor *q, const nnt_tensor *k, float scale,
                           const nnt_attn_mask *mask, nnt_tensor *s, nnt_error *err)
{
    cpu_ctx *c = ctx;
    nnt_status st;
    if ((st = cpu_check("attn_scores", "q", q, NNT_F32, 4, err)) != NNT_OK) return st;
    if ((st = cpu_check("attn_scores", "k", k, NNT_F32, 4, err)) != NNT_OK) return st;
    if ((st = cpu_check("attn_scores", "s", s, NNT_F32, 4, err)) != NNT_OK) return st;
    int64_t B = q->shape[0], Hq = q->shape[1], T = q->shape[2], D = q->shape[3];
    int64_t Hkv = k->shape[1], C = k->shape[2], S = nnt_attn_keys(mask, C);
    if (k->shape[0] != B || k->shape[3] != D || Hkv == 0 || Hq % Hkv || S > C || s->shape[0] != B ||
        s->shape[1] != Hq || s->shape[2] != T || s->shape[3] != S)
        return cpu_error(err, NNT_ERR_SHAPE, "cpu attn_scores: q, k and s shapes disagree");
    int64_t group = Hq / Hkv;
    const float *qd = q->data, *kd = k->data;
    float *sd = s->data;
    int r16 = cpu_bf16(s); /* torch: the product rounded, then its scaling rounded */
    if (T >= 8) { /* every head's block of queries in one batched product (oneDNN), then the mask */
        int done = 0;
        if ((st = cpu_bmm(c, r16, B * Hkv, group * T, S, D, qd, kd, 1, C * D, sd, &done, err)) != NNT_OK) return st;
        if (done) {
#pragma omp parallel for collapse(2) num_threads(c->threads) schedule(static)
            for (int64_t b = 0; b < B; b++)
                for (int64_t h = 0; h < Hq; h++)
                    for (int64_t t = 0; t < T; t++) {
                        float *row = sd + ((b * Hq + h) * T + t) * S;
                        for (int64_t j = 0; j < S; j++)
                            row[j] = mask && !cpu_visible(mask, b, t, j, T, S) ? -INFINITY
                                     : r16                                  ? cpu_r16(cpu_r16(row[j]) * scale)
                                                                            : row[j] * scale;
                    }
            return NNT_OK;
        }
    }
    if (T < 8) {
        /* few queries (decoding): each key head's [group T, D] block of queries in one product
         * against its keys, so a key row is read once for the heads that share it; the key heads
         * go to the team's threads (each product on its own thread) when there are enough of
         * them, else each product takes the team. Then the mask, and torch's roundings. */
        int64_t items = B * Hkv;
        int spread = items >= c->threads;
#pragma omp parallel for num_threads(c->threads) schedule(static) if (spread)
        for (int64_t it = 0; it < items; it++) {
            int64_t b = it / Hkv, g = it % Hkv;
            cpu_sgemm(c, 0, 1, group * T, S, D, r16 ? 1.0f : scale, qd + (b * Hq + g * group) * T * D, D,
                      kd + (b * Hkv + g) * C * D, D, 0.0f, sd + (b * Hq + g * group) * T * S, S);
        }
        if (!mask && !r16) return NNT_OK;
#pragma omp parallel for collapse(2) num_threads(c->threads) schedule(static)
        for (int64_t b = 0; b < B; b++)
            for (int64_t h = 0; h < Hq; h++)
                for (int64_t t = 0; t < T; t++) {
                    float *row = sd + ((b * Hq + h) * T + t) * S;
                    for (int64_t j = 0; j < S; j++)
                        row[j] = mask && !cpu_visible(mask, b, t, j, T, S) ? -INFINITY
                                 : r16                                  ? cpu_r16(cpu_r16(row[j]) * scale)
                                                                        : row[j];
                }
        return NNT_OK;
    }
    /* a block of queries per head: one product each (single-threaded inside this loop), then
     * the mask */
#pragma omp parallel for collapse(2) num_threads(c->threads) schedule(static)
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < Hq; h++) {
            const float *qh = qd + (b * Hq + h) * T * D;
            const float *kh = kd + (b * Hkv + h / group) * C * D;
            float *sh = sd + (b * Hq + h) * T * S;
            cpu_sgemm(c, 0, 1, T, S, D, r16 ? 1.0f : scale, qh, D, kh, D, 0.0f, sh, S);
            for (int64_t t = 0; t < T; t++)
                for (int64_t j = 0; j < S; j++) {
                    if (mask && !cpu_visible(mask, b, t, j, T, S))
                        sh[t * S + j] = -INFINITY;
                    else if (r16)
                        sh[t * S + j] = cpu_r16(cpu_r16(sh[t * S + j]) * scale);
                }
        }
    return NNT_OK;
}

/* s [B, H, T, S] -> p (may alias s): softmax over S, sinks F32 [H] joining as one column */
nnt_status cpu_softmax(void *ctx, const nnt_tensor *s, const float *sinks, nnt_tensor *p, nnt_error *err)
{
    cpu_ctx *c = ctx;
    nnt_status st;
    if ((st = cpu_check("softmax", "s", s, NNT_F32, 4, err)) != NNT_OK) return st;
    if ((st = cpu_check("softmax", "p", p, NNT_F32, 4, err)) != NNT_OK) return st;
    int64_t B = s->shape[0], H = s->shape[1], T = s->shape[2], S = s->shape[3];
    if (nnt_tensor_numel(p) != B * H * T * S) return cpu_error(err, NNT_ERR_SHAPE, "cpu softmax: p size differs");
    const float *sd = s->data;
    float *pd = p->data;
    int shifted = cpu_bf16(p) && (p->flags & NNT_TENSOR_BF16_SHIFTED); /* R(s - max) before exp */
    const cpu_kernels *k = c->k;
#pragma omp parallel for collapse(2) num_threads(c->threads) schedule(static)
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < H; h++)
            for (int64_t t = 0; t < T; t++) {
                const float *row = sd + ((b * H + h) * T + t) * S;
                float *out = pd + ((b * H + h) * T + t) * S;
                float mx = sinks ? (shifted ? cpu_r16(sinks[h]) : sinks[h]) : -INFINITY;
                for (int64_t j = 0; j < S; j++) mx = row[j] > mx ? row[j] : mx;
                if (mx == -INFINITY || isnan(mx)) {
                    for (int64_t j = 0; j < S; j++) out[j] = isnan(mx) ? NAN : 0.0f;
                    continue;
                }
                double sum = sinks ? exp(shifted ? (double)cpu_r16(cpu_r16(sinks[h]) - mx) : (double)sinks[h] - mx) : 0.0;
                for (int64_t j = 0; j < S; j++) out[j] = shifted ? cpu_r16(row[j] - mx) : row[j] - mx; /* -inf stays */
                k->exp(out, out, S);
                for (int64_t j = 0; j < S; j++) sum += out[j];
                float inv = (float)(1.0 / sum);
                for (int64_t j = 0; j < S; j++) out[j] *= inv;
            }
    cpu_round_result(c, p);
    return NNT_OK;
}

/* p [B, Hq, T, S], v [B, Hkv, C, Dv] (C >= S: v's first S rows per head are read) -> o [B, T, Hq, Dv] */
nnt_status cpu_attn_mix(void *ctx, const nnt_tensor *p, const nnt_tensor *v, nnt_tensor *o, nnt_error *err)
{
    cpu_ctx *c = ctx;
    nnt_status st;
    if ((st = cpu_check("attn_mix", "p", p, NNT_F32, 4, err)) != NNT_OK) return st;
    if ((st = cpu_check("attn_mix", "v", v, NNT_F32, 4, err)) != NNT_OK) return st;
    if ((st = cpu_check("attn_mix", "o", o, NNT_F32, 4, err)) != NNT_OK) return st;
    int64_t B = p->shape[0], Hq = p->shape[1], T = p->shape[2], S = p->shape[3];
    int64_t Hkv = v->shape[1], C = v->shape[2], Dv = v->shape[3];
    if (v->shape[0] != B || C < S || Hkv == 0 || Hq % Hkv || o->shape[0] != B || o->shape[1] != T ||
        o->shape[2] != Hq || o->shape[3] != Dv)
        return cpu_error(err, NNT_ERR_SHAPE, "cpu attn_mix: p, v and o shapes disagree");
    int64_t group = Hq / Hkv;
    const float *pd = p->data, *vd = v->data;
    float *od = o->data;
    if (T >= 8 && B * Hkv == 1) {
        /* one key/value head: its [Hq T, S] probabilities in blocks of rows, each product into a
         * tile of at most 8 MiB, then its heads moved after tokens (no [Hq, T, Dv] copy) */
        int64_t R = Hq * T, chunk = ((int64_t)(8 << 20) / (Dv * (int64_t)sizeof(float))) / T * T;
        if (chunk < T) chunk = T;
        if (chunk > R) chunk = R;
        float *tmp;
        int done = 1;
        if ((st = cpu_buffer(c, CPU_BUF_ATTN, (size_t)(chunk * Dv) * sizeof(float), (void **)&tmp, err)) != NNT_OK)
            return st;
        for (int64_t r0 = 0; r0 < R && done; r0 += chunk) {
            int64_t n = R - r0 < chunk ? R - r0 : chunk;
            if ((st = cpu_bmm(c, cpu_bf16(o), 1, n, Dv, S, pd + r0 * S, vd, 0, 0, tmp, &done, err)) != NNT_OK) return st;
            if (!done) {
                if (r0 > 0) return cpu_error(err, NNT_ERR_BACKEND, "cpu attn_mix: oneDNN refused a block it ran before");
                break;
            }
#pragma omp parallel for num_threads(c->threads) schedule(static)
            for (int64_t r = r0; r < r0 + n; r++) {
                int64_t h = r / T, t = r % T;
                memcpy(od + (t * Hq + h) * Dv, tmp + (r - r0) * Dv, (size_t)Dv * sizeof(float));
            }
        }
        if (done) {
            cpu_round_result(c, o);
            return NNT_OK;
        }
    }
    if (T >= 8) { /* one batched product into [B, Hq, T, Dv] (oneDNN), then heads moved after tokens */
        float *tmp;
        int done = 0;
        if ((st = cpu_buffer(c, CPU_BUF_ATTN, (size_t)(B * Hq * T * Dv) * sizeof(float), (void **)&tmp, err)) != NNT_OK)
            return st;
        if ((st = cpu_bmm(c, cpu_bf16(o), B * Hkv, group * T, Dv, S, pd, vd, 0, C * Dv, tmp, &done, err)) != NNT_OK) return st;
        if (done) {
#pragma omp parallel for collapse(2) num_threads(c->threads) schedule(static)
            for (int64_t b = 0; b < B; b++)
                for (int64_t t = 0; t < T; t++)
                    for (int64_t h = 0; h < Hq; h++)
                        memcpy(od + ((b * T + t) * Hq + h) * Dv, tmp + ((b * Hq + h) * T + t) * Dv, (size_t)Dv * sizeof(float));
            cpu_round_result(c, o);
            return NNT_OK;
        }
    }
    if (T < 8) {
        /* few queries (decoding): one product per key/value head for the [group T, S]
         * probabilities of its heads, so a value row is read once for the heads that share it
         * (key heads spread over the team as in cpu_attn_scores), into [B, Hq, T, Dv], then
         * heads moved after tokens */
        float *tmp;
        if ((st = cpu_buffer(c, CPU_BUF_ATTN, (size_t)(B * Hq * T * Dv) * sizeof(float), (void **)&tmp, err)) != NNT_OK)
            return st;
        int64_t items = B * Hkv;
        int spread = items >= c->threads;
#pragma omp parallel for num_threads(c->threads) schedule(static) if (spread)
        for (int64_t it = 0; it < items; it++) {
            int64_t b = it / Hkv, g = it % Hkv;
            cpu_sgemm(c, 0, 0, group * T, Dv, S, 1.0f, pd + (b * Hq + g * group) * T * S, S,
                      vd + (b * Hkv + g) * C * Dv, Dv, 0.0f, tmp + (b * Hq + g * group) * T * Dv, Dv);
        }
        for (int64_t b = 0; b < B; b++)
            for (int64_t t = 0; t < T; t++)
                for (int64_t h = 0; h < Hq; h++)
                    memcpy(od + ((b * T + t) * Hq + h) * Dv, tmp + ((b * Hq + h) * T + t) * Dv, (size_t)Dv * sizeof(float));
        cpu_round_result(c, o);
        return NNT_OK;
    }
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < Hq; h++)
            cpu_sgemm(c, 0, 0, (int)T, (int)Dv, (int)S, 1.0f,
                        pd + (b * Hq + h) * T * S, (int)S, vd + (b * Hkv + h / group) * C * Dv, (int)Dv, 0.0f,
                        od + (b * T * Hq + h) * Dv, (int)(Hq * Dv));
    cpu_round_result(c, o);
    return NNT_OK;
}
