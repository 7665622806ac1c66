/* cpu_backward_moe.c - the cpu backend's backward ops of the mixture-of-experts kernels: the
 * router's weights with respect to its logits (the choice has no gradient), row gathers and
 * scatters, rows scaled by routing weights, and the sum over routing slots. Gradients are float32 and added into
 * (nnt_backend.h, "backward"). */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "cpu_internal.h"

/* The score s(x) of one logit and its derivative, in double, as cpu_moe.c's float32 forward
 * computes them (softplus taken as x above 20); softmax is handled per row. */
static double score_d(nnt_score_fn fn, double x, double *deriv)
{
    if (fn == NNT_SCORE_SIGMOID) {
        double s = 1.0 / (1.0 + exp(-x));
        *deriv = s * (1.0 - s);
        return s;
    }
    double sp = x > 20.0 ? x : log1p(exp(x)), dsp = x > 20.0 ? 1.0 : 1.0 / (1.0 + exp(-x));
    double r = sqrt(sp);
    *deriv = r > 0.0 ? dsp / (2.0 * r) : 0.0;
    return r;
}

/* One row: logits l [E], idx [K], dw [K] -> dl [E] +=. sc, dsc: E doubles of scratch. */
static void route_row(const nnt_route_params *p, const float *l, int64_t E, const int32_t *idx, const float *dw,
                      float *dl, double *sc, double *dsc)
{
    int K = p->top_k;
    double der[1];
    if (p->score_fn == NNT_SCORE_SOFTMAX) {
        double mx = -INFINITY, sum = 0.0;
        for (int64_t e = 0; e < E; e++) mx = l[e] > mx ? l[e] : mx;
        for (int64_t e = 0; e < E; e++) sum += (sc[e] = exp((double)l[e] - mx));
        for (int64_t e = 0; e < E; e++) sc[e] /= sum;
    } else {
        for (int64_t e = 0; e < E; e++) sc[e] = score_d(p->score_fn, l[e], der);
    }
    for (int64_t e = 0; e < E; e++) dsc[e] = 0.0;
    double f = p->scaling_factor, S = 0.0, A = 0.0;
    for (int k = 0; k < K; k++) {
        S += sc[idx[k]];
        A += (double)dw[k] * sc[idx[k]];
    }
    /* w_k = f s_k / (S + eps): dL/ds_e = f (sum_{k: idx_k = e} dw_k / (S + eps) - A / (S + eps)^2 per
     * occurrence of e); without renormalisation w_k = f s_k */
    double den = S + p->renorm_eps;
    for (int k = 0; k < K; k++)
        dsc[idx[k]] += p->renormalize ? f * ((double)dw[k] / den - A / (den * den)) : f * dw[k];
    if (p->score_fn == NNT_SCORE_SOFTMAX) { /* ds_e = s_e (dsc_e - sum_j dsc_j s_j) */
        double dot = 0.0;
        for (int64_t e = 0; e < E; e++) dot += dsc[e] * sc[e];
        for (int64_t e = 0; e < E; e++) dl[e] += (float)(sc[e] * (dsc[e] - dot));
        return;
    }
    for (int64_t e = 0; e < E; e++)
        if (dsc[e] != 0.0) {
            score_d(p->score_fn, l[e], der);
            dl[e] += (float)(dsc[e] * der[0]);
        }
}

/* logits [M, E], idx [M, K] I32, dw [M, K], dlogits [M, E] +=; bias is not read (it only
 * chooses). Sources: as cpu_route. */
nnt_status cpu_route_backward(void *ctx, const nnt_tensor *logits, const nnt_tensor *bias, const nnt_route_params *p,
                              const nnt_tensor *idx, const nnt_tensor *dw, nnt_tensor *dlogits, nnt_error *err)
{
    cpu_ctx *c = ctx;
    nnt_status st;
    (void)bias;
    if ((st = cpu_check("route_backward", "logits", logits, NNT_F32, 2, err)) != NNT_OK) return st;
    if ((st = cpu_check("route_backward", "idx", idx, NNT_I32, 0, err)) != NNT_OK) return st;
    if ((st = cpu_check("route_backward", "dw", dw, NNT_F32, 0, err)) != NNT_OK) return st;
    if (!p) return cpu_error(err, NNT_ERR_INVALID_ARGUMENT, "cpu route_backward: the routing parameters are missing");
    int64_t M = logits->shape[0], E = logits->shape[1];
    int K = p->top_k;
    if (K < 1 || K > E || nnt_tensor_numel(idx) != M * K || nnt_tensor_numel(dw) != M * K)
        return cpu_error(err, NNT_ERR_SHAPE, "cpu route_backward: top_k %d with %lld experts; idx, dw must be [%lld, %d]",
                         K, (long long)E, (long long)M, K);
    if (!dlogits) return NNT_OK;
    if ((st = cpu_check("route_backward", "dlogits", dlogits, NNT_F32, 0, err)) != NNT_OK) return st;
    if (nnt_tensor_numel(dlogits) != M * E)
        return cpu_error(err, NNT_ERR_SHAPE, "cpu route_backward: dlogits is not shaped as logits");
    const int32_t *id = idx->data;
    for (int64_t i = 0; i < M * K; i++)
        if (id[i] < 0 || id[i] >= E)
            return cpu_error(err, NNT_ERR_INVALID_ARGUMENT, "cpu route_backward: expert index %d at %lld is outside [0, %lld)",
                             id[i], (long long)i, (long long)E);
    double *buf = malloc((size_t)(2 * E * c->threads) * sizeof *buf);
    if (!buf) return cpu_error(err, NNT_ERR_OUT_OF_MEMORY, "cpu route_backward: no memory");
    const float *ld = logits->data, *gw = dw->data;
    float *dl = dlogits->data;
#pragma omp parallel num_threads(c->threads)
    {
#ifdef _OPENMP
        double *sc = buf + 2 * E * omp_get_thread_num();
#else
        double *sc = buf;
#endif
#pragma omp for schedule(static)
        for (int64_t m = 0; m < M; m++) route_row(p, ld + m * E, E, id + m * K, gw + m * K, dl + m * E, sc, sc + E);
    }
    free(buf);
    return NNT_OK;
}

/* Checks rows[i] in [0, M) for i < n. */
static nnt_status rows_in_range(const char *op, const int32_t *rows, int n, int64_t M, nnt_error *err)
{
    if (n > 0 && !rows) return cpu_error(err, NNT_ERR_INVALID_ARGUMENT, "cpu %s: rows is missing", op);
    for (int i = 0; i < n; i++)
        if (rows[i] < 0 || rows[i] >= M)
            return cpu_error(err, NNT_ERR_INVALID_ARGUMENT, "cpu %s: row %d at %d is outside [0, %lld)", op, rows[i], i,
                             (long long)M);
    return NNT_OK;
}

/* ddst [n, H], dsrc [M, H]: dsrc[rows[i]] += ddst[i]; threads split the columns, so repeated
 * rows add in order of i */
nnt_status cpu_gather_rows_backward(void *ctx, const nnt_tensor *ddst, const int32_t *rows, int n, nnt_tensor *dsrc,
                                    nnt_error *err)
{
    cpu_ctx *c = ctx;
    nnt_status st;
    if ((st = cpu_check("gather_rows_backward", "ddst", ddst, NNT_F32, 0, err)) != NNT_OK) return st;
    if (!dsrc) return NNT_OK;
    if ((st = cpu_check("gather_rows_backward", "dsrc", dsrc, NNT_F32, 0, err)) != NNT_OK) return st;
    int64_t M = dsrc->shape[0], H = nnt_tensor_numel(dsrc) / (M ? M : 1);
    if (n < 0 || nnt_tensor_numel(ddst) < (int64_t)n * H)
        return cpu_error(err, NNT_ERR_SHAPE, "cpu gather_rows_backward: ddst has no room for %d rows of dsrc's %lld", n,
                         (long long)H);
    if ((st = rows_in_range("gather_rows_backward", rows, n, M, err)) != NNT_OK) return st;
    const float *g = ddst->data;
    float *d = dsrc->data;
    enum { COLS = 256 };
#pragma omp parallel for num_threads(c->threads) schedule(static) if ((int64_t)n * H > CPU_PARALLEL_MIN)
    for (int64_t c0 = 0; c0 < H; c0 += COLS) {
        int64_t c1 = c0 + COLS < H ? c0 + COLS : H;
        for (int i = 0; i < n; i++) {
            float *dr = d + (int64_t)rows[i] * H;
            const float *gr = g + (int64_t)i * H;
            for (int64_t h = c0; h < c1; h++) dr[h] += gr[h];
        }
    }
    return NNT_OK;
}

/* src [n, H], ddst [M, H], dsrc [n, H], dscale [n]: dsrc[i] += scale[i] ddst[rows[i]],
 * dscale[i] += src[i] . ddst[rows[i]]; last_only: only for the last i writing each row */
static nnt_status scatter_backward(cpu_ctx *c, const char *op, const nnt_tensor *src, const int32_t *rows,
                                   const float *scale, int n, const nnt_tensor *ddst, nnt_tensor *dsrc,
                                   nnt_tensor *dscale, int last_only, nnt_error *err)
{
    nnt_status st;
    if ((st = cpu_check(op, "ddst", ddst, NNT_F32, 0, err)) != NNT_OK) return st;
    int64_t M = ddst->shape[0], H = nnt_tensor_numel(ddst) / (M ? M : 1);
    if (n < 0) return cpu_error(err, NNT_ERR_INVALID_ARGUMENT, "cpu %s: %d rows", op, n);
    if (dscale && (st = cpu_check(op, "src", src, NNT_F32, 0, err)) != NNT_OK) return st;
    if (dscale && nnt_tensor_numel(src) < (int64_t)n * H)
        return cpu_error(err, NNT_ERR_SHAPE, "cpu %s: src has no room for %d rows of ddst's %lld", op, n, (long long)H);
    if (dsrc && (dsrc->dtype != NNT_F32 || !dsrc->data || nnt_tensor_numel(dsrc) < (int64_t)n * H))
        return cpu_error(err, NNT_ERR_SHAPE, "cpu %s: dsrc must be F32 with %d rows of ddst's %lld", op, n, (long long)H);
    if (dscale && (dscale->dtype != NNT_F32 || !dscale->data || nnt_tensor_numel(dscale) < n))
        return cpu_error(err, NNT_ERR_SHAPE, "cpu %s: dscale must be F32 [%d]", op, n);
    if ((st = rows_in_range(op, rows, n, M, err)) != NNT_OK) return st;
    if ((!dsrc && !dscale) || n == 0) return NNT_OK;
    int32_t *last = NULL; /* scatter_rows: the last i writing each row of dst */
    if (last_only) {
        if (!(last = malloc((size_t)(M ? M : 1) * sizeof *last)))
            return cpu_error(err, NNT_ERR_OUT_OF_MEMORY, "cpu %s: no memory", op);
        for (int i = 0; i < n; i++) last[rows[i]] = i;
    }
    const float *s = dscale ? src->data : NULL, *g = ddst->data;
    float *d = dsrc ? dsrc->data : NULL, *ds = dscale ? dscale->data : NULL;
#pragma omp parallel for num_threads(c->threads) schedule(static) if ((int64_t)n * H > CPU_PARALLEL_MIN)
    for (int i = 0; i < n; i++) {
        if (last && last[rows[i]] != i) continue; /* overwritten later in the forward */
        const float *gr = g + (int64_t)rows[i] * H;
        float f = scale ? scale[i] : 1.0f;
        if (d) {
            float *dr = d + (int64_t)i * H;
            for (int64_t h = 0; h < H; h++) dr[h] += f * gr[h];
        }
        if (ds) {
            double acc = 0.0;
            for (int64_t h = 0; h < H; h++) acc += (double)s[(int64_t)i * H + h] * gr[h];
            ds[i] += (float)acc;
        }
    }
    free(last);
    return NNT_OK;
}

nnt_status cpu_scatter_add_rows_backward(void *ctx, const nnt_tensor *src, const int32_t *rows, const float *scale,
                                         int n, const nnt_tensor *ddst, nnt_tensor *dsrc, nnt_tensor *dscale,
                                         nnt_error *err)
{
    return scatter_backward(ctx, "scatter_add_rows_backward", src, rows, scale, n, ddst, dsrc, dscale, 0, err);
}

nnt_status cpu_scatter_rows_backward(void *ctx, const nnt_tensor *src, const int32_t *rows, const float *scale, int n,
                                     const nnt_tensor *ddst, nnt_tensor *dsrc, nnt_tensor *dscale, nnt_error *err)
{
    return scatter_backward(ctx, "scatter_rows_backward", src, rows, scale, n, ddst, dsrc, dscale, 1, err);
}

/* dy [M, H] -> dx [M, K, H] += dy for every k */
nnt_status cpu_sum_axis1_backward(void *ctx, const nnt_tensor *dy, nnt_tensor *dx, nnt_error *err)
{
    cpu_ctx *c = ctx;
    nnt_status st;
    if ((st = cpu_check("sum_axis1_backward", "dy", dy, NNT_F32, 0, err)) != NNT_OK) return st;
    if (!dx) return NNT_OK;
    if ((st = cpu_check("sum_axis1_backward", "dx", dx, NNT_F32, 0, err)) != NNT_OK) return st;
    if (dx->ndim < 3) return cpu_error(err, NNT_ERR_SHAPE, "cpu sum_axis1_backward: dx must be [M, K, H]");
    int64_t M = dx->shape[0], K = dx->shape[1], MK = M * K, H = nnt_tensor_numel(dx) / (MK ? MK : 1);
    if (nnt_tensor_numel(dy) != M * H)
        return cpu_error(err, NNT_ERR_SHAPE, "cpu sum_axis1_backward: dy is not [%lld, %lld] as dx [M, K, H] needs",
                         (long long)M, (long long)H);
    const float *g = dy->data;
    float *d = dx->data;
#pragma omp parallel for collapse(2) num_threads(c->threads) schedule(static) if (MK * H > CPU_PARALLEL_MIN)
    for (int64_t m = 0; m < M; m++)
        for (int64_t k = 0; k < K; k++) {
            float *dr = d + (m * K + k) * H;
            for (int64_t h = 0; h < H; h++) dr[h] += g[m * H + h];
        }
    return NNT_OK;
}

/* x, dy, dx [n, H]; w and dw of one shape, read flat: dx[i] += w[idx[i]] dy[i], dw[idx[i]] +=
 * x[i] . dy[i]. The dot products are taken in parallel (double sums), then added into dw one
 * after the other in order of i, so repeated indices cannot race. */
nnt_status cpu_scale_rows_backward(void *ctx, const nnt_tensor *x, const nnt_tensor *w, const int32_t *idx, int n,
                                   const nnt_tensor *dy, nnt_tensor *dx, nnt_tensor *dw, nnt_error *err)
{
    cpu_ctx *c = ctx;
    const char *op = "scale_rows_backward";
    int64_t H;
    nnt_status st = cpu_scale_rows_args(op, "dy", dy, w, idx, n, &H, err);
    if (st != NNT_OK) return st;
    if (dx && (dx->dtype != NNT_F32 || !dx->data || nnt_tensor_numel(dx) != (int64_t)n * H))
        return cpu_error(err, NNT_ERR_SHAPE, "cpu %s: dx must be F32 shaped as dy [%d, %lld]", op, n, (long long)H);
    if (dw && (dw->dtype != NNT_F32 || !dw->data || nnt_tensor_numel(dw) != nnt_tensor_numel(w)))
        return cpu_error(err, NNT_ERR_SHAPE, "cpu %s: dw must be F32 shaped as w (%lld entries)", op,
                         (long long)nnt_tensor_numel(w));
    if (dw && (st = cpu_check(op, "x", x, NNT_F32, 0, err)) != NNT_OK) return st;
    if (dw && nnt_tensor_numel(x) != (int64_t)n * H)
        return cpu_error(err, NNT_ERR_SHAPE, "cpu %s: x is not shaped as dy [%d, %lld]", op, n, (long long)H);
    if ((!dx && !dw) || n == 0) return NNT_OK;
    double *dot = NULL;
    if (dw && !(dot = malloc((size_t)n * sizeof *dot))) return cpu_error(err, NNT_ERR_OUT_OF_MEMORY, "cpu %s: no memory", op);
    const float *xd = dw ? x->data : NULL, *wd = w->data, *g = dy->data;
    float *d = dx ? dx->data : NULL;
#pragma omp parallel for num_threads(c->threads) schedule(static) if ((int64_t)n * H > CPU_PARALLEL_MIN)
    for (int i = 0; i < n; i++) {
        const float *gr = g + (int64_t)i * H;
        if (d) {
            float f = wd[idx[i]], *dr = d + (int64_t)i * H;
            for (int64_t h = 0; h < H; h++) dr[h] += f * gr[h];
        }
        if (dot) {
            double acc = 0.0;
            for (int64_t h = 0; h < H; h++) acc += (double)xd[(int64_t)i * H + h] * gr[h];
            dot[i] = acc;
        }
    }
    if (dot) {
        float *dwd = dw->data;
        for (int i = 0; i < n; i++) dwd[idx[i]] += (float)dot[i];
        free(dot);
    }
    return NNT_OK;
}
