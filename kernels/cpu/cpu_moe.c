/* cpu_moe.c - the cpu backend's mixture-of-experts kernels: router scoring and top-k
 * selection, row gather and scatter, rows scaled by routing weights in backend memory, and the
 * sum over routing slots. */
#include <math.h>
#include <string.h>

#include "cpu_internal.h"

/* The score of one logit; r16: each elementwise step rounded to bfloat16, as torch applies the
 * function to a bfloat16 tensor. */
static float score(nnt_score_fn fn, float x, int r16)
{
    switch (fn) {
    case NNT_SCORE_SIGMOID: {
        float s = 1.0f / (1.0f + expf(-x));
        return r16 ? cpu_r16(s) : s;
    }
    case NNT_SCORE_SQRT_SOFTPLUS: {
        float sp = x > 20.0f ? x : log1pf(expf(x));
        return r16 ? cpu_r16(sqrtf(cpu_r16(sp))) : sqrtf(sp);
    }
    default: return x; /* softmax is handled per row */
    }
}

/* logits [M, E] F32, bias [E] F32 or NULL -> idx [M, K] I32, w [M, K] F32.
 * Choice by score + bias (ties: lowest expert index); weights from the score alone, optionally
 * renormalised and scaled. Group-limited choice: each group's strength is the sum of its two
 * best biased scores, and only the topk_group strongest groups stay eligible (DeepSeek-V3). */
nnt_status cpu_route(void *ctx, const nnt_tensor *logits, const nnt_tensor *bias, const nnt_route_params *p,
                     nnt_tensor *idx, nnt_tensor *w, nnt_error *err)
{
    cpu_ctx *c = ctx;
    nnt_status st;
    if ((st = cpu_check("route", "logits", logits, NNT_F32, 2, err)) != NNT_OK) return st;
    if ((st = cpu_check("route", "idx", idx, NNT_I32, 0, err)) != NNT_OK) return st;
    if ((st = cpu_check("route", "w", w, NNT_F32, 0, err)) != NNT_OK) return st;
    int64_t M = logits->shape[0], E = logits->shape[1];
    int K = p->top_k;
    if (K < 1 || K > E || nnt_tensor_numel(idx) != M * K || nnt_tensor_numel(w) != M * K)
        return cpu_error(err, NNT_ERR_SHAPE, "cpu route: top_k %d with %lld experts and idx/w of %lld entries", K,
                         (long long)E, (long long)nnt_tensor_numel(idx));
    if (bias && (bias->dtype != NNT_F32 || nnt_tensor_numel(bias) != E))
        return cpu_error(err, NNT_ERR_SHAPE, "cpu route: bias must be F32 [%lld]", (long long)E);
    int G = p->n_group > 1 ? p->n_group : 1;
    if (E % G) return cpu_error(err, NNT_ERR_SHAPE, "cpu route: %lld experts do not split into %d groups", (long long)E, G);
    if (E > 4096) return cpu_error(err, NNT_ERR_UNSUPPORTED, "cpu route: more than 4096 experts");
    const float *ld = logits->data;
    const float *bd = bias ? bias->data : NULL;
    int32_t *id = idx->data;
    float *wd = w->data;
    int bad = 0, r16 = cpu_bf16(w); /* scores and weights in bfloat16; the choice in float32 */
#pragma omp parallel for num_threads(c->threads) schedule(static) reduction(| : bad)
    for (int64_t m = 0; m < M; m++) {
        float sc[4096], choice[4096];
        const float *row = ld + m * E;
        if (p->score_fn == NNT_SCORE_SOFTMAX) {
            float mx = -INFINITY;
            for (int64_t e = 0; e < E; e++) mx = row[e] > mx ? row[e] : mx;
            double sum = 0.0;
            for (int64_t e = 0; e < E; e++) sum += (sc[e] = expf(row[e] - mx));
            for (int64_t e = 0; e < E; e++) sc[e] = r16 ? cpu_r16((float)(sc[e] / sum)) : (float)(sc[e] / sum);
        } else {
            for (int64_t e = 0; e < E; e++) sc[e] = score(p->score_fn, row[e], r16);
        }
        int32_t *ir = id + m * K;
        float *wr = wd + m * K;
        if (!p->indices_given) {
            for (int64_t e = 0; e < E; e++) choice[e] = sc[e] + (bd ? bd[e] : 0.0f);
            if (G > 1) {
                int64_t per = E / G;
                float gscore[4096];
                for (int g = 0; g < G; g++) {
                    float b1 = -INFINITY, b2 = -INFINITY;
                    for (int64_t e = g * per; e < (g + 1) * per; e++) {
                        if (choice[e] > b1) {
                            b2 = b1;
                            b1 = choice[e];
                        } else if (choice[e] > b2) {
                            b2 = choice[e];
                        }
                    }
                    gscore[g] = per > 1 ? b1 + b2 : b1;
                }
                unsigned char keep[4096] = {0};
                int kept = p->topk_group > 0 && p->topk_group < G ? p->topk_group : G;
                for (int r = 0; r < kept; r++) {
                    int best = -1;
                    for (int g = 0; g < G; g++)
                        if (!keep[g] && (best < 0 || gscore[g] > gscore[best])) best = g;
                    keep[best] = 1;
                }
                for (int64_t e = 0; e < E; e++)
                    if (!keep[e / per]) choice[e] = -INFINITY;
            }
            for (int k = 0; k < K; k++) {
                int64_t best = -1;
                for (int64_t e = 0; e < E; e++) {
                    int taken = 0;
                    for (int q = 0; q < k; q++) taken |= ir[q] == e;
                    if (taken) continue;
                    if (best < 0 || choice[e] > choice[best]) best = e;
                }
                ir[k] = (int32_t)best;
            }
        }
        double sum = 0.0;
        for (int k = 0; k < K; k++) {
            if (ir[k] < 0 || ir[k] >= E) {
                bad = 1;
                wr[k] = 0.0f;
                continue;
            }
            wr[k] = sc[ir[k]];
            sum += wr[k];
        }
        if (r16) { /* the sum and the eps add rounded, then the quotient, then the scaling */
            float den = cpu_r16(cpu_r16((float)sum) + p->renorm_eps);
            for (int k = 0; k < K; k++) {
                float v = p->renormalize ? cpu_r16(wr[k] / den) : wr[k];
                wr[k] = cpu_r16(v * p->scaling_factor);
            }
            continue;
        }
        for (int k = 0; k < K; k++) {
            float v = wr[k];
            if (p->renormalize) v = (float)(v / (sum + p->renorm_eps));
            wr[k] = v * p->scaling_factor;
        }
    }
    if (bad) return cpu_error(err, NNT_ERR_INVALID_ARGUMENT, "cpu route: an expert index is outside [0, %lld)", (long long)E);
    return NNT_OK;
}

/* src [M, H] -> dst [n, H] */
nnt_status cpu_gather_rows(void *ctx, const nnt_tensor *src, const int32_t *rows, int n, nnt_tensor *dst,
                           nnt_error *err)
{
    cpu_ctx *c = ctx;
    int64_t M = src->shape[0], H = nnt_tensor_numel(src) / (M ? M : 1);
    if (src->dtype != NNT_F32 || dst->dtype != NNT_F32 || nnt_tensor_numel(dst) < (int64_t)n * H)
        return cpu_error(err, NNT_ERR_SHAPE, "cpu gather_rows: F32 tensors with room for %d rows expected", n);
    const float *s = src->data;
    float *d = dst->data;
    for (int i = 0; i < n; i++)
        if (rows[i] < 0 || rows[i] >= M) return cpu_error(err, NNT_ERR_INVALID_ARGUMENT, "cpu gather_rows: row %d out of range", rows[i]);
#pragma omp parallel for num_threads(c->threads) schedule(static) if ((int64_t)n * H > CPU_PARALLEL_MIN)
    for (int i = 0; i < n; i++) memcpy(d + (int64_t)i * H, s + (int64_t)rows[i] * H, (size_t)H * sizeof(float));
    return NNT_OK;
}

/* dst row rows[i] (+)= scale[i] src row i for i < n, in that order; the team splits the columns,
 * so each value sees the rows in the same order as one thread would (same sums) */
static nnt_status scatter(const cpu_ctx *c, const nnt_tensor *src, const int32_t *rows, const float *scale, int n,
                          nnt_tensor *dst, int accumulate, nnt_error *err)
{
    int64_t M = dst->shape[0], H = nnt_tensor_numel(dst) / (M ? M : 1);
    if (src->dtype != NNT_F32 || dst->dtype != NNT_F32 || nnt_tensor_numel(src) < (int64_t)n * H)
        return cpu_error(err, NNT_ERR_SHAPE, "cpu scatter_rows: F32 tensors with %d rows of %lld expected", n, (long long)H);
    for (int i = 0; i < n; i++) /* all checked before any row is written */
        if (rows[i] < 0 || rows[i] >= M) return cpu_error(err, NNT_ERR_INVALID_ARGUMENT, "cpu scatter_rows: row %d out of range", rows[i]);
    const float *s = src->data;
    float *d = dst->data;
    int r16 = cpu_bf16(dst); /* torch: the weighted row rounded, then the sum rounded */
    const int threads = c->threads;
    const int64_t chunk = ((H + threads - 1) / threads + 15) / 16 * 16;
#pragma omp parallel for num_threads(threads) schedule(static) if ((int64_t)n * H > CPU_PARALLEL_MIN)
    for (int t = 0; t < threads; t++) {
        const int64_t h0 = t * chunk, h1 = h0 + chunk < H ? h0 + chunk : H;
        for (int i = 0; i < n && h0 < h1; i++) {
            float f = scale ? scale[i] : 1.0f;
            float *dr = d + (int64_t)rows[i] * H;
            const float *sr = s + (int64_t)i * H;
            if (r16)
                for (int64_t h = h0; h < h1; h++) dr[h] = accumulate ? cpu_r16(dr[h] + cpu_r16(f * sr[h])) : cpu_r16(f * sr[h]);
            else if (accumulate)
                for (int64_t h = h0; h < h1; h++) dr[h] += f * sr[h];
            else
                for (int64_t h = h0; h < h1; h++) dr[h] = f * sr[h];
        }
    }
    return NNT_OK;
}

nnt_status cpu_scatter_add_rows(void *ctx, const nnt_tensor *src, const int32_t *rows, const float *scale, int n,
                                nnt_tensor *dst, nnt_error *err)
{
    return scatter(ctx, src, rows, scale, n, dst, 1, err);
}

nnt_status cpu_scatter_rows(void *ctx, const nnt_tensor *src, const int32_t *rows, const float *scale, int n,
                            nnt_tensor *dst, nnt_error *err)
{
    return scatter(ctx, src, rows, scale, n, dst, 0, err);
}

nnt_status cpu_scale_rows_args(const char *op, const char *arg, const nnt_tensor *t, const nnt_tensor *w,
                               const int32_t *idx, int n, int64_t *H, nnt_error *err)
{
    nnt_status st;
    if ((st = cpu_check(op, arg, t, NNT_F32, 0, err)) != NNT_OK) return st;
    if ((st = cpu_check(op, "w", w, NNT_F32, 0, err)) != NNT_OK) return st;
    if (n < 0) return cpu_error(err, NNT_ERR_INVALID_ARGUMENT, "cpu %s: %d rows", op, n);
    if (t->ndim < 1 || t->shape[0] != n)
        return cpu_error(err, NNT_ERR_SHAPE, "cpu %s: %s must have %d rows (its first axis)", op, arg, n);
    *H = n ? nnt_tensor_numel(t) / n : 0;
    if (n > 0 && !idx) return cpu_error(err, NNT_ERR_INVALID_ARGUMENT, "cpu %s: idx is missing", op);
    int64_t W = nnt_tensor_numel(w);
    for (int i = 0; i < n; i++)
        if (idx[i] < 0 || idx[i] >= W)
            return cpu_error(err, NNT_ERR_INVALID_ARGUMENT,
                             "cpu %s: idx[%d] = %d is outside [0, %lld) (the entries of w)", op, i, idx[i],
                             (long long)W);
    return NNT_OK;
}

/* x [n, H] -> y [n, H]: row i times w[idx[i]] (in place when y is x); a flagged y gets the
 * product rounded once, as scatter_add_rows rounds its weighted rows. */
nnt_status cpu_scale_rows(void *ctx, const nnt_tensor *x, const nnt_tensor *w, const int32_t *idx, int n,
                          nnt_tensor *y, nnt_error *err)
{
    cpu_ctx *c = ctx;
    int64_t H;
    nnt_status st = cpu_scale_rows_args("scale_rows", "x", x, w, idx, n, &H, err);
    if (st != NNT_OK) return st;
    if ((st = cpu_check("scale_rows", "y", y, NNT_F32, 0, err)) != NNT_OK) return st;
    if (y->ndim < 1 || y->shape[0] != n || nnt_tensor_numel(y) != nnt_tensor_numel(x))
        return cpu_error(err, NNT_ERR_SHAPE, "cpu scale_rows: y is not shaped as x [%d, %lld]", n, (long long)H);
    const float *xd = x->data, *wd = w->data;
    float *yd = y->data;
    int r16 = cpu_bf16(y);
#pragma omp parallel for num_threads(c->threads) schedule(static) if ((int64_t)n * H > CPU_PARALLEL_MIN)
    for (int i = 0; i < n; i++) {
        float f = wd[idx[i]];
        const float *xr = xd + (int64_t)i * H;
        float *yr = yd + (int64_t)i * H;
        if (r16)
            for (int64_t h = 0; h < H; h++) yr[h] = cpu_r16(f * xr[h]);
        else
            for (int64_t h = 0; h < H; h++) yr[h] = f * xr[h];
    }
    return NNT_OK;
}

/* x [M, K, H] -> y [M, H] */
nnt_status cpu_sum_axis1(void *ctx, const nnt_tensor *x, nnt_tensor *y, nnt_error *err)
{
    cpu_ctx *c = ctx;
    if (x->ndim < 3 || x->dtype != NNT_F32 || y->dtype != NNT_F32)
        return cpu_error(err, NNT_ERR_SHAPE, "cpu sum_axis1: x must be F32 [M, K, H]");
    int64_t M = x->shape[0], K = x->shape[1], MK = M * K, H = nnt_tensor_numel(x) / (MK ? MK : 1);
    if (nnt_tensor_numel(y) != M * H) return cpu_error(err, NNT_ERR_SHAPE, "cpu sum_axis1: y is not [M, H]");
    const float *xd = x->data;
    float *yd = y->data;
#pragma omp parallel for num_threads(c->threads) schedule(static)
    for (int64_t m = 0; m < M; m++)
        for (int64_t h = 0; h < H; h++) {
            float acc = 0.0f;
            for (int64_t k = 0; k < K; k++) acc += xd[(m * K + k) * H + h];
            yd[m * H + h] = acc;
        }
    cpu_round_result(c, y);
    return NNT_OK;
}
