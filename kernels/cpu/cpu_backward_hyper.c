/* cpu_backward_hyper.c - the cpu backend's backward ops of DeepSeek-V4's kernels (cpu_hyper.c):
 * the hyper-connection weights through their sigmoids, row softmax and unrolled Sinkhorn passes,
 * the stream mix, the readout collapse, and token compression. Each recomputes what it needs of
 * the forward in double from the forward's inputs; gradients are float32 and added into
 * (nnt_backend.h, "backward"). The indexer's scores have no backward (they only choose). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_internal.h"

#define MAX_STREAMS 16

static double sigm_d(double x)
{
    return 1.0 / (1.0 + exp(-x));
}

static nnt_status need(const char *op, const char *arg, const nnt_tensor *t, int64_t n, nnt_error *err)
{
    if (!t || !t->data) return cpu_error(err, NNT_ERR_INVALID_ARGUMENT, "cpu %s: %s is missing", op, arg);
    if (t->dtype != NNT_F32 || nnt_tensor_numel(t) != n)
        return cpu_error(err, NNT_ERR_SHAPE, "cpu %s: %s must be F32 with %lld entries (has dtype %d, %lld)", op, arg,
                         (long long)n, (int)t->dtype, (long long)nnt_tensor_numel(t));
    return NNT_OK;
}

/* The shapes shared by hyper_connection's and hyper_head's backward: x [M, n, H], fn [outs, n H],
 * base [outs], scale (at least `scales` entries), dx as x. */
static nnt_status check_weights(const char *op, const nnt_tensor *x, const nnt_tensor *fn, const nnt_tensor *base,
                                const nnt_tensor *scale, int64_t outs, int scales, const nnt_tensor *dx, nnt_error *err)
{
    nnt_status st;
    if ((st = cpu_check(op, "x", x, NNT_F32, 3, err)) != NNT_OK) return st;
    int64_t n = x->shape[1], H = x->shape[2];
    if (n > MAX_STREAMS) return cpu_error(err, NNT_ERR_SHAPE, "cpu %s: %lld streams (at most %d)", op, (long long)n, MAX_STREAMS);
    if ((st = need(op, "fn", fn, outs * n * H, err)) != NNT_OK) return st;
    if ((st = need(op, "base", base, outs, err)) != NNT_OK) return st;
    if (!scale || !scale->data || scale->dtype != NNT_F32 || nnt_tensor_numel(scale) < scales)
        return cpu_error(err, NNT_ERR_SHAPE, "cpu %s: scale must be F32 with %d entries", op, scales);
    return dx ? need(op, "dx (as x)", dx, nnt_tensor_numel(x), err) : NNT_OK;
}

/* The Sinkhorn passes of one token's comb: pass q (0-based) normalises columns when q is even
 * and rows when q is odd, in the forward's order (iteration 0: columns; each later one: rows,
 * then columns). 2 iters - 1 passes (none for iters 0). */
static int passes(int iters)
{
    return iters > 0 ? 2 * iters - 1 : 0;
}

/* One pass in place on C [n, n]: divide every column (cols 1) or row by its sum + eps. */
static void norm_pass(double *C, int64_t n, int cols, double eps)
{
    for (int64_t a = 0; a < n; a++) {
        double s = 0.0;
        for (int64_t b = 0; b < n; b++) s += cols ? C[b * n + a] : C[a * n + b];
        for (int64_t b = 0; b < n; b++) {
            if (cols) C[b * n + a] /= s + eps;
            else C[a * n + b] /= s + eps;
        }
    }
}

/* The reverse of norm_pass from its input c: d (the gradient of its output) becomes the
 * gradient of its input. With y = c / (s + eps): dc = (dy - sum dy y) / (s + eps) per line. */
static void norm_pass_back(const double *c, double *d, int64_t n, int cols, double eps)
{
    for (int64_t a = 0; a < n; a++) {
        double s = 0.0, dot = 0.0;
        for (int64_t b = 0; b < n; b++) s += cols ? c[b * n + a] : c[a * n + b];
        for (int64_t b = 0; b < n; b++) {
            int64_t i = cols ? b * n + a : a * n + b;
            dot += d[i] * c[i] / (s + eps);
        }
        for (int64_t b = 0; b < n; b++) {
            int64_t i = cols ? b * n + a : a * n + b;
            d[i] = (d[i] - dot) / (s + eps);
        }
    }
}

/* The per-token arguments of the hyper-connection backward. */
typedef struct hc_args {
    int64_t n, H, outs; /* outs: n (hyper_head) or (2 + n) n */
    const float *fn, *base, *scale;
    double rms_eps, hc_eps;
    int iters;
} hc_args;

/* Work doubles one token needs: m and dm (outs each), dv (n H), the Sinkhorn states. */
static size_t hc_work(const hc_args *a)
{
    return (size_t)(2 * a->outs + a->n * a->H + (int64_t)(passes(a->iters) + 2) * a->n * a->n);
}

/* One token: x [n H], the output gradients (dpost [n], dcomb [n n], dcoll [H]; NULL: none) ->
 * dx [n H] +=. w: hc_work(a) doubles. */
static void hc_token(const hc_args *a, const float *x, const float *dpost, const float *dcomb, const float *dcoll,
                     float *dx, double *w)
{
    int64_t n = a->n, H = a->H, nH = n * H, outs = a->outs, nn = n * n;
    double *m = w, *dm = w + outs, *dv = dm + outs, *st = dv + nH;
    /* the normaliser as the forward computes it (float32, from a double sum) */
    double ss = 0.0;
    for (int64_t i = 0; i < nH; i++) ss += (double)x[i] * x[i];
    float rf = 1.0f / sqrtf((float)(ss / (double)nH) + (float)a->rms_eps);
    double r = rf;
    for (int64_t o = 0; o < outs; o++) {
        const float *row = a->fn + o * nH;
        double acc = 0.0;
        for (int64_t i = 0; i < nH; i++) acc += (double)row[i] * (x[i] * rf);
        m[o] = acc;
        dm[o] = 0.0;
    }
    const float *b = a->base, *sc = a->scale;
    if (dcoll)
        for (int64_t j = 0; j < n; j++) {
            double s = sigm_d(m[j] * sc[0] + b[j]), pre = s + a->hc_eps, dpre = 0.0;
            for (int64_t h = 0; h < H; h++) {
                dpre += (double)dcoll[h] * x[j * H + h];
                dx[j * H + h] += (float)(pre * dcoll[h]);
            }
            dm[j] = dpre * s * (1.0 - s) * sc[0];
        }
    if (dpost)
        for (int64_t j = 0; j < n; j++) {
            double s = sigm_d(m[n + j] * sc[1] + b[n + j]);
            dm[n + j] = dpost[j] * 2.0 * s * (1.0 - s) * sc[1];
        }
    if (dcomb) {
        int P = passes(a->iters);
        /* p: the row softmax; S[q]: the input of pass q (S[0] = p + eps); d: the gradient */
        double *p = st, *S = st + nn, *d = S + (int64_t)P * nn;
        for (int64_t j = 0; j < n; j++) {
            double mx = -INFINITY, sum = 0.0;
            for (int64_t k = 0; k < n; k++) {
                double z = m[2 * n + j * n + k] * sc[2] + b[2 * n + j * n + k];
                p[j * n + k] = z;
                mx = z > mx ? z : mx;
            }
            for (int64_t k = 0; k < n; k++) sum += (p[j * n + k] = exp(p[j * n + k] - mx));
            for (int64_t k = 0; k < n; k++) p[j * n + k] /= sum;
        }
        for (int q = 0; q < P; q++) {
            double *in = S + (int64_t)q * nn;
            if (q == 0) {
                for (int64_t i = 0; i < nn; i++) in[i] = p[i] + a->hc_eps;
            } else {
                memcpy(in, in - nn, sizeof(double) * (size_t)nn);
                norm_pass(in, n, (q - 1) % 2 == 0, a->hc_eps);
            }
        }
        for (int64_t i = 0; i < nn; i++) d[i] = dcomb[i];
        for (int q = P - 1; q >= 0; q--) norm_pass_back(S + (int64_t)q * nn, d, n, q % 2 == 0, a->hc_eps);
        for (int64_t j = 0; j < n; j++) { /* through the row softmax: dz = p (dC - sum p dC) */
            double dot = 0.0;
            for (int64_t k = 0; k < n; k++) dot += p[j * n + k] * d[j * n + k];
            for (int64_t k = 0; k < n; k++) dm[2 * n + j * n + k] = p[j * n + k] * (d[j * n + k] - dot) * sc[2];
        }
    }
    /* dm -> dv = fn^T dm -> dx through v = x r */
    for (int64_t i = 0; i < nH; i++) dv[i] = 0.0;
    for (int64_t o = 0; o < outs; o++) {
        if (dm[o] == 0.0) continue;
        const float *row = a->fn + o * nH;
        for (int64_t i = 0; i < nH; i++) dv[i] += dm[o] * row[i];
    }
    double dvx = 0.0;
    for (int64_t i = 0; i < nH; i++) dvx += dv[i] * x[i];
    double r3 = r * r * r / (double)nH;
    for (int64_t i = 0; i < nH; i++) dx[i] += (float)(r * dv[i] - x[i] * r3 * dvx);
}

/* Every token of x [M, n H] through hc_token, the threads each with their own work buffer. */
static nnt_status hc_tokens(cpu_ctx *c, const char *op, const hc_args *a, int64_t M, const float *x, const float *dpost,
                            const float *dcomb, const float *dcoll, float *dx, nnt_error *err)
{
    size_t wn = hc_work(a);
    int failed = 0;
#pragma omp parallel num_threads(c->threads) if (M > 1)
    {
        double *w = malloc(wn * sizeof *w);
        if (!w) {
#pragma omp atomic write
            failed = 1;
        }
#pragma omp for schedule(static)
        for (int64_t m = 0; m < M; m++) {
            if (!w) continue;
            int64_t n = a->n, H = a->H;
            hc_token(a, x + m * n * H, dpost ? dpost + m * n : NULL, dcomb ? dcomb + m * n * n : NULL,
                     dcoll ? dcoll + m * H : NULL, dx + m * n * H, w);
        }
        free(w);
    }
    return failed ? cpu_error(err, NNT_ERR_OUT_OF_MEMORY, "cpu %s: no memory", op) : NNT_OK;
}

nnt_status cpu_hyper_connection_backward(void *ctx, const nnt_tensor *x, const nnt_tensor *fn, const nnt_tensor *base,
                                         const nnt_tensor *scale, float rms_eps, float hc_eps, int iters,
                                         const nnt_tensor *dpost, const nnt_tensor *dcomb, const nnt_tensor *dcollapsed,
                                         nnt_tensor *dx, nnt_error *err)
{
    static const char op[] = "hyper_connection_backward";
    nnt_status st;
    if ((st = cpu_check(op, "x", x, NNT_F32, 3, err)) != NNT_OK) return st;
    int64_t M = x->shape[0], n = x->shape[1], H = x->shape[2];
    if ((st = check_weights(op, x, fn, base, scale, (2 + n) * n, 3, dx, err)) != NNT_OK) return st;
    if (dpost && (st = need(op, "dpost [M, n]", dpost, M * n, err)) != NNT_OK) return st;
    if (dcomb && (st = need(op, "dcomb [M, n, n]", dcomb, M * n * n, err)) != NNT_OK) return st;
    if (dcollapsed && (st = need(op, "dcollapsed [M, H]", dcollapsed, M * H, err)) != NNT_OK) return st;
    if (iters < 0) return cpu_error(err, NNT_ERR_INVALID_ARGUMENT, "cpu %s: %d Sinkhorn iterations", op, iters);
    if (!dx || (!dpost && !dcomb && !dcollapsed)) return NNT_OK;
    hc_args a = {n, H, (2 + n) * n, fn->data, base->data, scale->data, rms_eps, hc_eps, iters};
    return hc_tokens(ctx, op, &a, M, x->data, dpost ? dpost->data : NULL, dcomb ? dcomb->data : NULL,
                     dcollapsed ? dcollapsed->data : NULL, dx->data, err);
}

nnt_status cpu_hyper_head_backward(void *ctx, const nnt_tensor *x, const nnt_tensor *fn, const nnt_tensor *base,
                                   const nnt_tensor *scale, float rms_eps, float hc_eps, const nnt_tensor *dy,
                                   nnt_tensor *dx, nnt_error *err)
{
    static const char op[] = "hyper_head_backward";
    nnt_status st;
    if ((st = cpu_check(op, "x", x, NNT_F32, 3, err)) != NNT_OK) return st;
    int64_t M = x->shape[0], n = x->shape[1], H = x->shape[2];
    if ((st = check_weights(op, x, fn, base, scale, n, 1, dx, err)) != NNT_OK) return st;
    if ((st = need(op, "dy [M, H]", dy, M * H, err)) != NNT_OK) return st;
    if (!dx) return NNT_OK;
    hc_args a = {n, H, n, fn->data, base->data, scale->data, rms_eps, hc_eps, 0};
    return hc_tokens(ctx, op, &a, M, x->data, NULL, NULL, dy->data, dx->data, err);
}

/* x [M, n, H], a [M, H], post [M, n], comb [M, n, n], dout [M, n, H] */
nnt_status cpu_hyper_mix_backward(void *ctx, const nnt_tensor *x, const nnt_tensor *a, const nnt_tensor *post,
                                  const nnt_tensor *comb, const nnt_tensor *dout, nnt_tensor *dx, nnt_tensor *da,
                                  nnt_tensor *dpost, nnt_tensor *dcomb, nnt_error *err)
{
    static const char op[] = "hyper_mix_backward";
    cpu_ctx *c = ctx;
    nnt_status st;
    if ((st = cpu_check(op, "x", x, NNT_F32, 3, err)) != NNT_OK) return st;
    int64_t M = x->shape[0], n = x->shape[1], H = x->shape[2];
    if ((st = need(op, "a [M, H]", a, M * H, err)) != NNT_OK || (st = need(op, "post [M, n]", post, M * n, err)) != NNT_OK ||
        (st = need(op, "comb [M, n, n]", comb, M * n * n, err)) != NNT_OK ||
        (st = need(op, "dout [M, n, H]", dout, M * n * H, err)) != NNT_OK)
        return st;
    if ((dx && (st = need(op, "dx (as x)", dx, M * n * H, err)) != NNT_OK) ||
        (da && (st = need(op, "da (as a)", da, M * H, err)) != NNT_OK) ||
        (dpost && (st = need(op, "dpost (as post)", dpost, M * n, err)) != NNT_OK) ||
        (dcomb && (st = need(op, "dcomb (as comb)", dcomb, M * n * n, err)) != NNT_OK))
        return st;
    const float *xd = x->data, *ad = a->data, *pd = post->data, *cd = comb->data, *g = dout->data;
    float *gx = dx ? dx->data : NULL, *ga = da ? da->data : NULL, *gp = dpost ? dpost->data : NULL;
    float *gc = dcomb ? dcomb->data : NULL;
#pragma omp parallel for num_threads(c->threads) schedule(static) if (M > 1)
    for (int64_t m = 0; m < M; m++) {
        const float *xm = xd + m * n * H, *am = ad + m * H, *gm = g + m * n * H, *pm = pd + m * n, *cm = cd + m * n * n;
        for (int64_t k = 0; k < n; k++) {
            const float *gk = gm + k * H;
            if (gp) {
                double s = 0.0;
                for (int64_t h = 0; h < H; h++) s += (double)gk[h] * am[h];
                gp[m * n + k] += (float)s;
            }
            if (ga)
                for (int64_t h = 0; h < H; h++) ga[m * H + h] += pm[k] * gk[h];
            for (int64_t j = 0; j < n; j++) {
                const float *xj = xm + j * H;
                if (gc) {
                    double s = 0.0;
                    for (int64_t h = 0; h < H; h++) s += (double)gk[h] * xj[h];
                    gc[m * n * n + j * n + k] += (float)s;
                }
                if (gx) {
                    float w = cm[j * n + k], *dj = gx + m * n * H + j * H;
                    for (int64_t h = 0; h < H; h++) dj[h] += w * gk[h];
                }
            }
        }
    }
    return NNT_OK;
}

/* kv, gate [B, T, c D], ape [rate, c D], dout [B, C, D] -> dkv, dgate [B, T, c D] += */
nnt_status cpu_compress_backward(void *ctx, const nnt_tensor *kv, const nnt_tensor *gate, const nnt_tensor *ape,
                                 int rate, int overlap, const int32_t *first, const int32_t *count,
                                 const nnt_tensor *dout, nnt_tensor *dkv, nnt_tensor *dgate, nnt_error *err)
{
    static const char op[] = "compress_backward";
    cpu_ctx *c = ctx;
    nnt_status st;
    if ((st = cpu_check(op, "kv", kv, NNT_F32, 3, err)) != NNT_OK) return st;
    if ((st = cpu_check(op, "dout", dout, NNT_F32, 3, err)) != NNT_OK) return st;
    int64_t B = kv->shape[0], T = kv->shape[1], cD = kv->shape[2], coff = overlap ? 2 : 1, D = cD / coff;
    int64_t C = dout->shape[1];
    if (rate < 1 || cD != coff * D || dout->shape[0] != B || dout->shape[2] != D || !ape || !ape->data ||
        nnt_tensor_numel(ape) != (int64_t)rate * cD)
        return cpu_error(err, NNT_ERR_SHAPE, "cpu %s: kv [B, T, %lld], ape [%d, %lld] and dout [B, C, %lld] disagree", op,
                         (long long)cD, rate, (long long)cD, (long long)D);
    if ((st = need(op, "gate (as kv)", gate, B * T * cD, err)) != NNT_OK) return st;
    if ((dkv && (st = need(op, "dkv (as kv)", dkv, B * T * cD, err)) != NNT_OK) ||
        (dgate && (st = need(op, "dgate (as gate)", dgate, B * T * cD, err)) != NNT_OK))
        return st;
    for (int64_t b = 0; b < B; b++)
        if (count[b] < 0 || count[b] > C || first[b] < 0 || first[b] + (int64_t)count[b] * rate > T)
            return cpu_error(err, NNT_ERR_INVALID_ARGUMENT, "cpu %s: row %lld's %d entries from token %d do not fit", op,
                             (long long)b, count[b], first[b]);
    if (!dkv && !dgate) return NNT_OK;
    const float *k = kv->data, *g = gate->data, *go = dout->data;
    float *gk = dkv ? dkv->data : NULL, *gg = dgate ? dgate->data : NULL;
    const void *pe = ape->data;
    nnt_dtype pdt = ape->dtype;
    /* entry w writes the slots of its own window (last D channels with overlap) and of window
     * w - 1 (first D channels): no two entries share a (token, channel), so entries run in
     * parallel */
#pragma omp parallel for collapse(2) num_threads(c->threads) schedule(static)
    for (int64_t b = 0; b < B; b++)
        for (int64_t w = 0; w < C; w++) {
            if (w >= count[b]) continue;
            int prev = overlap && w > 0;
            int64_t t_prev = first[b] + (w - 1) * rate, t_this = first[b] + w * rate, hi = overlap ? D : 0;
            for (int64_t ch = 0; ch < D; ch++) {
                /* the slots: the previous window's tokens through channel ch (part 0, with
                 * overlap past the first window), this window's through hi + ch (part 1) */
                float mx = -INFINITY;
                double sum = 0.0, out = 0.0, gw = go[(b * C + w) * D + ch];
                for (int part = prev ? 0 : 1; part < 2; part++)
                    for (int64_t i = 0; i < rate; i++) {
                        int64_t at = part ? (b * T + t_this + i) * cD + hi + ch : (b * T + t_prev + i) * cD + ch;
                        float z = g[at] + cpu_load(pe, pdt, part ? i * cD + hi + ch : i * cD + ch);
                        mx = z > mx ? z : mx;
                    }
                for (int pass = 0; pass < 2; pass++) { /* 0: the sums; 1: the gradients */
                    for (int part = prev ? 0 : 1; part < 2; part++)
                        for (int64_t i = 0; i < rate; i++) {
                            int64_t at = part ? (b * T + t_this + i) * cD + hi + ch : (b * T + t_prev + i) * cD + ch;
                            float z = g[at] + cpu_load(pe, pdt, part ? i * cD + hi + ch : i * cD + ch);
                            double e = exp((double)z - mx);
                            if (pass == 0) {
                                sum += e;
                                out += e * k[at];
                            } else {
                                double pw = e / sum;
                                if (gk) gk[at] += (float)(pw * gw);
                                if (gg) gg[at] += (float)(pw * gw * (k[at] - out));
                            }
                        }
                    if (pass == 0) out /= sum;
                }
            }
        }
    return NNT_OK;
}
