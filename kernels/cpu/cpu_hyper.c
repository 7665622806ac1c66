/* cpu_hyper.c - the cpu backend's kernels for DeepSeek-V4: manifold-constrained
 * hyper-connections (weights with a Sinkhorn projection, the stream mix, the readout collapse),
 * token compression into attention entries, and the lightning indexer's scores. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_internal.h"

#define MAX_STREAMS 16

static float sigm(float x)
{
    return 1.0f / (1.0f + expf(-x));
}

/* 1 / rms(x) over one token's n*H values (double accumulation) */
static float rms_factor(const float *x, int64_t nH, float rms_eps)
{
    double ss = 0.0;
    for (int64_t i = 0; i < nH; i++) ss += (double)x[i] * x[i];
    return 1.0f / sqrtf((float)(ss / (double)nH) + rms_eps);
}

/* sum_i row[i] (x[i] r) in double, four partial sums */
static float mix_dot(const float *row, const float *x, float r, int64_t nH)
{
    double a0 = 0.0, a1 = 0.0, a2 = 0.0, a3 = 0.0;
    int64_t i = 0;
    for (; i + 4 <= nH; i += 4) {
        a0 += (double)row[i] * (x[i] * r);
        a1 += (double)row[i + 1] * (x[i + 1] * r);
        a2 += (double)row[i + 2] * (x[i + 2] * r);
        a3 += (double)row[i + 3] * (x[i + 3] * r);
    }
    for (; i < nH; i++) a0 += (double)row[i] * (x[i] * r);
    return (float)((a0 + a1) + (a2 + a3));
}

/* mx[m, o] = sum_i fn[o, i] x[m, i] / rms(x[m]) for every token m of x [M, nH]: the (token,
 * output) pairs shared by the threads, so that one token (decoding) uses them all */
static int mixes_all(cpu_ctx *c, const float *x, int64_t M, int64_t nH, const float *fn, int64_t outs, float rms_eps,
                     float *mx)
{
    float *r = malloc((size_t)(M ? M : 1) * sizeof *r);
    if (!r) return 0;
#pragma omp parallel for num_threads(c->threads) schedule(static) if (M > 1)
    for (int64_t m = 0; m < M; m++) r[m] = rms_factor(x + m * nH, nH, rms_eps);
#pragma omp parallel for collapse(2) num_threads(c->threads) schedule(static)
    for (int64_t m = 0; m < M; m++)
        for (int64_t o = 0; o < outs; o++) mx[m * outs + o] = mix_dot(fn + o * nH, x + m * nH, r[m], nH);
    free(r);
    return 1;
}

/* x [M, n, H], fn [(2+n) n, n H], base [(2+n) n], scale [3] -> post [M, n], comb [M, n, n],
 * collapsed [M, H] */
nnt_status cpu_hyper_connection(void *ctx, const nnt_tensor *x, const nnt_tensor *fn, const nnt_tensor *base,
                                const nnt_tensor *scale, float rms_eps, float hc_eps, int iters, nnt_tensor *post,
                                nnt_tensor *comb, nnt_tensor *collapsed, nnt_error *err)
{
    cpu_ctx *c = ctx;
    if (x->ndim != 3 || x->dtype != NNT_F32) return cpu_error(err, NNT_ERR_SHAPE, "cpu hyper_connection: x must be F32 [M, n, H]");
    int64_t M = x->shape[0], n = x->shape[1], H = x->shape[2], outs = (2 + n) * n;
    if (n > MAX_STREAMS || fn->dtype != NNT_F32 || base->dtype != NNT_F32 || scale->dtype != NNT_F32 ||
        nnt_tensor_numel(fn) != outs * n * H || nnt_tensor_numel(base) != outs || nnt_tensor_numel(scale) != 3 ||
        nnt_tensor_numel(post) != M * n || nnt_tensor_numel(comb) != M * n * n || nnt_tensor_numel(collapsed) != M * H)
        return cpu_error(err, NNT_ERR_SHAPE, "cpu hyper_connection: fn, base, scale, post, comb or collapsed disagree with x");
    const float *xd = x->data, *f = fn->data, *b = base->data, *sc = scale->data;
    float *pd = post->data, *cd = comb->data, *yd = collapsed->data;
    float *mxa = malloc((size_t)(M * outs + 1) * sizeof *mxa);
    if (!mxa || !mixes_all(c, xd, M, n * H, f, outs, rms_eps, mxa)) {
        free(mxa);
        return cpu_error(err, NNT_ERR_OUT_OF_MEMORY, "cpu hyper_connection: no memory");
    }
#pragma omp parallel for num_threads(c->threads) schedule(static)
    for (int64_t m = 0; m < M; m++) {
        float pre[MAX_STREAMS], C[MAX_STREAMS * MAX_STREAMS];
        const float *xm = xd + m * n * H, *mx = mxa + m * outs;
        for (int64_t j = 0; j < n; j++) {
            pre[j] = sigm(mx[j] * sc[0] + b[j]) + hc_eps;
            pd[m * n + j] = 2.0f * sigm(mx[n + j] * sc[1] + b[n + j]);
        }
        for (int64_t j = 0; j < n; j++) { /* row softmax, then + eps */
            float mxr = -INFINITY;
            for (int64_t k = 0; k < n; k++) {
                C[j * n + k] = mx[2 * n + j * n + k] * sc[2] + b[2 * n + j * n + k];
                mxr = C[j * n + k] > mxr ? C[j * n + k] : mxr;
            }
            float sum = 0.0f;
            for (int64_t k = 0; k < n; k++) sum += (C[j * n + k] = expf(C[j * n + k] - mxr));
            for (int64_t k = 0; k < n; k++) C[j * n + k] = C[j * n + k] / sum + hc_eps;
        }
        for (int it = 0; it < iters; it++) {
            if (it > 0)
                for (int64_t j = 0; j < n; j++) { /* rows */
                    float s = 0.0f;
                    for (int64_t k = 0; k < n; k++) s += C[j * n + k];
                    for (int64_t k = 0; k < n; k++) C[j * n + k] /= s + hc_eps;
                }
            for (int64_t k = 0; k < n; k++) { /* columns */
                float s = 0.0f;
                for (int64_t j = 0; j < n; j++) s += C[j * n + k];
                for (int64_t j = 0; j < n; j++) C[j * n + k] /= s + hc_eps;
            }
        }
        memcpy(cd + m * n * n, C, sizeof(float) * (size_t)(n * n));
        for (int64_t h = 0; h < H; h++) {
            float acc = 0.0f;
            for (int64_t j = 0; j < n; j++) acc += pre[j] * xm[j * H + h];
            yd[m * H + h] = acc;
        }
    }
    free(mxa);
    cpu_round_result(c, collapsed);
    return NNT_OK;
}

/* x [M, n, H], a [M, H], post [M, n], comb [M, n, n] -> out [M, n, H] (out may not alias x) */
nnt_status cpu_hyper_mix(void *ctx, const nnt_tensor *x, const nnt_tensor *a, const nnt_tensor *post,
                         const nnt_tensor *comb, nnt_tensor *out, nnt_error *err)
{
    cpu_ctx *c = ctx;
    if (x->ndim != 3) return cpu_error(err, NNT_ERR_SHAPE, "cpu hyper_mix: x must be [M, n, H]");
    int64_t M = x->shape[0], n = x->shape[1], H = x->shape[2];
    if (nnt_tensor_numel(a) != M * H || nnt_tensor_numel(post) != M * n || nnt_tensor_numel(comb) != M * n * n ||
        nnt_tensor_numel(out) != M * n * H || x->data == out->data)
        return cpu_error(err, NNT_ERR_SHAPE, "cpu hyper_mix: a, post, comb or out disagree with x");
    const float *xd = x->data, *ad = a->data, *pd = post->data, *cd = comb->data;
    float *od = out->data;
    /* bfloat16 values: R(R(R(post) a) + R(sum_j R(comb) x_j)), the weights cast to the stream's
     * dtype and each of the two terms rounded before their sum */
    int r16 = cpu_bf16(out);
#pragma omp parallel for num_threads(c->threads) schedule(static)
    for (int64_t m = 0; m < M; m++)
        for (int64_t k = 0; k < n; k++) {
            float *o = od + (m * n + k) * H;
            const float *ar = ad + m * H;
            float pk = r16 ? cpu_r16(pd[m * n + k]) : pd[m * n + k];
            for (int64_t h = 0; h < H; h++) {
                float mix = 0.0f;
                for (int64_t j = 0; j < n; j++) {
                    float w = cd[(m * n + j) * n + k];
                    mix += (r16 ? cpu_r16(w) : w) * xd[(m * n + j) * H + h];
                }
                o[h] = r16 ? cpu_r16(cpu_r16(pk * ar[h]) + cpu_r16(mix)) : pk * ar[h] + mix;
            }
        }
    return NNT_OK;
}

/* x [M, n, H], fn [n, n H], base [n], scale [1] -> y [M, H] */
nnt_status cpu_hyper_head(void *ctx, const nnt_tensor *x, const nnt_tensor *fn, const nnt_tensor *base,
                          const nnt_tensor *scale, float rms_eps, float hc_eps, nnt_tensor *y, nnt_error *err)
{
    cpu_ctx *c = ctx;
    if (x->ndim != 3) return cpu_error(err, NNT_ERR_SHAPE, "cpu hyper_head: x must be [M, n, H]");
    int64_t M = x->shape[0], n = x->shape[1], H = x->shape[2];
    if (n > MAX_STREAMS || nnt_tensor_numel(fn) != n * n * H || nnt_tensor_numel(base) != n || nnt_tensor_numel(scale) < 1 ||
        nnt_tensor_numel(y) != M * H)
        return cpu_error(err, NNT_ERR_SHAPE, "cpu hyper_head: fn, base, scale or y disagree with x");
    const float *xd = x->data, *f = fn->data, *b = base->data, *sc = scale->data;
    float *yd = y->data;
    float *mxa = malloc((size_t)(M * n + 1) * sizeof *mxa);
    if (!mxa || !mixes_all(c, xd, M, n * H, f, n, rms_eps, mxa)) {
        free(mxa);
        return cpu_error(err, NNT_ERR_OUT_OF_MEMORY, "cpu hyper_head: no memory");
    }
#pragma omp parallel for num_threads(c->threads) schedule(static)
    for (int64_t m = 0; m < M; m++) {
        float pre[MAX_STREAMS];
        const float *xm = xd + m * n * H, *mx = mxa + m * n;
        for (int64_t j = 0; j < n; j++) pre[j] = sigm(mx[j] * sc[0] + b[j]) + hc_eps;
        for (int64_t h = 0; h < H; h++) {
            float acc = 0.0f;
            for (int64_t j = 0; j < n; j++) acc += pre[j] * xm[j * H + h];
            yd[m * H + h] = acc;
        }
    }
    free(mxa);
    cpu_round_result(c, y);
    return NNT_OK;
}

/* kv, gate [B, T, c D], ape [rate, c D] -> out [B, C, D] */
nnt_status cpu_compress(void *ctx, const nnt_tensor *kv, const nnt_tensor *gate, const nnt_tensor *ape, int rate,
                        int overlap, const int32_t *first, const int32_t *count, nnt_tensor *out, nnt_error *err)
{
    cpu_ctx *c = ctx;
    int64_t B = kv->shape[0], T = kv->shape[1], cD = kv->shape[2], coff = overlap ? 2 : 1, D = cD / coff;
    int64_t C = out->shape[1];
    if (kv->ndim != 3 || out->ndim != 3 || out->shape[0] != B || out->shape[2] != D || cD != coff * D ||
        nnt_tensor_numel(gate) != B * T * cD || nnt_tensor_numel(ape) != (int64_t)rate * cD || rate < 1)
        return cpu_error(err, NNT_ERR_SHAPE, "cpu compress: kv, gate [B, T, %lld], ape [%d, %lld] and out [B, C, %lld] disagree",
                         (long long)cD, rate, (long long)cD, (long long)D);
    for (int64_t b = 0; b < B; b++)
        if (count[b] < 0 || count[b] > C || first[b] < 0 || first[b] + (int64_t)count[b] * rate > T)
            return cpu_error(err, NNT_ERR_INVALID_ARGUMENT, "cpu compress: row %lld's %d entries from token %d do not fit",
                             (long long)b, count[b], first[b]);
    const float *k = kv->data, *g = gate->data;
    float *o = out->data;
    int r16 = cpu_bf16(out);
    memset(o, 0, sizeof(float) * (size_t)(B * C * D));
    const void *pe = ape->data;
    nnt_dtype pdt = ape->dtype;
#pragma omp parallel for collapse(2) num_threads(c->threads) schedule(static)
    for (int64_t b = 0; b < B; b++)
        for (int64_t w = 0; w < C; w++) {
            if (w >= count[b]) continue;
            /* slots: with overlap, the previous window's tokens (first D channels) then this
             * window's (last D channels); a softmax over the slots' gate scores (plus the
             * position bias) weights their values. Two passes: the maximum, then the sums. */
            int64_t t_prev = first[b] + (w - 1) * rate, t_this = first[b] + w * rate, hi = overlap ? D : 0;
            int prev = overlap && w > 0;
            for (int64_t ch = 0; ch < D; ch++) {
                float mx = -INFINITY;
                for (int64_t i = 0; prev && i < rate; i++) {
                    float sc = g[(b * T + t_prev + i) * cD + ch] + cpu_load(pe, pdt, i * cD + ch);
                    mx = sc > mx ? sc : mx;
                }
                for (int64_t i = 0; i < rate; i++) {
                    float sc = g[(b * T + t_this + i) * cD + hi + ch] + cpu_load(pe, pdt, i * cD + hi + ch);
                    mx = sc > mx ? sc : mx;
                }
                double sum = 0.0, acc = 0.0;
                for (int64_t i = 0; prev && i < rate; i++) {
                    float sc = g[(b * T + t_prev + i) * cD + ch] + cpu_load(pe, pdt, i * cD + ch);
                    double e = exp((double)sc - mx);
                    sum += e;
                    acc += e * k[(b * T + t_prev + i) * cD + ch];
                }
                for (int64_t i = 0; i < rate; i++) {
                    float sc = g[(b * T + t_this + i) * cD + hi + ch] + cpu_load(pe, pdt, i * cD + hi + ch);
                    double e = exp((double)sc - mx);
                    sum += e;
                    acc += e * k[(b * T + t_this + i) * cD + hi + ch];
                }
                if (r16) { /* bfloat16 values: R(sum_i R(kv_i R(p_i))), p from the float32 softmax */
                    float racc = 0.0f;
                    for (int64_t i = 0; prev && i < rate; i++) {
                        float sc = g[(b * T + t_prev + i) * cD + ch] + cpu_load(pe, pdt, i * cD + ch);
                        float pw = cpu_r16((float)(exp((double)sc - mx) / sum));
                        racc += cpu_r16(k[(b * T + t_prev + i) * cD + ch] * pw);
                    }
                    for (int64_t i = 0; i < rate; i++) {
                        float sc = g[(b * T + t_this + i) * cD + hi + ch] + cpu_load(pe, pdt, i * cD + hi + ch);
                        float pw = cpu_r16((float)(exp((double)sc - mx) / sum));
                        racc += cpu_r16(k[(b * T + t_this + i) * cD + hi + ch] * pw);
                    }
                    o[(b * C + w) * D + ch] = cpu_r16(racc);
                    continue;
                }
                o[(b * C + w) * D + ch] = (float)(acc / sum);
            }
        }
    return NNT_OK;
}

/* q [B, T, h, d], k [B, C, d], w [B, T, h] -> out [B, T, C] */
nnt_status cpu_indexer_scores(void *ctx, const nnt_tensor *q, const nnt_tensor *k, const nnt_tensor *w, float scale,
                              nnt_tensor *out, nnt_error *err)
{
    cpu_ctx *c = ctx;
    if (q->ndim != 4 || k->ndim != 3) return cpu_error(err, NNT_ERR_SHAPE, "cpu indexer_scores: q [B, T, h, d], k [B, C, d]");
    int64_t B = q->shape[0], T = q->shape[1], Hh = q->shape[2], d = q->shape[3], C = k->shape[1];
    if (k->shape[0] != B || k->shape[2] != d || nnt_tensor_numel(w) != B * T * Hh || nnt_tensor_numel(out) != B * T * C)
        return cpu_error(err, NNT_ERR_SHAPE, "cpu indexer_scores: shapes disagree");
    const float *qd = q->data, *kd = k->data, *wd = w->data;
    float *od = out->data;
#pragma omp parallel for collapse(2) num_threads(c->threads) schedule(static)
    for (int64_t b = 0; b < B; b++)
        for (int64_t t = 0; t < T; t++)
            for (int64_t e = 0; e < C; e++) {
                double acc = 0.0;
                for (int64_t h = 0; h < Hh; h++) {
                    const float *qv = qd + ((b * T + t) * Hh + h) * d, *kv = kd + (b * C + e) * d;
                    float dot = 0.0f;
                    for (int64_t i = 0; i < d; i++) dot += qv[i] * kv[i];
                    acc += (double)wd[(b * T + t) * Hh + h] * (dot > 0.0f ? dot : 0.0f);
                }
                od[(b * T + t) * C + e] = (float)(acc * scale);
            }
    return NNT_OK;
}
