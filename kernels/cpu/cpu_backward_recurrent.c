/* cpu_backward_recurrent.c - the cpu backend's backward ops of the recurrent mixers
 * (cpu_recurrent.c): the causal convolution, Kimi's forget gate, sigmoid, the gated delta rule
 * run backwards token by token from recomputed checkpoints of its state, and the gated RMSNorm.
 * Gradients are float32 and added into (nnt_backend.h, "backward"); sums are taken in double. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_internal.h"

/* Tokens between two kept states of delta_rule's backward: the checkpoints cost T / CHUNK
 * states per (batch, head), the recomputed stretch CHUNK + 1. */
#define CHUNK 16

static nnt_status need(const char *op, const char *arg, const nnt_tensor *t, int64_t n, nnt_error *err)
{
    if (t->dtype != NNT_F32 || nnt_tensor_numel(t) != n)
        return cpu_error(err, NNT_ERR_SHAPE, "cpu %s: %s must be F32 with %lld entries (has dtype %d, %lld)", op, arg,
                         (long long)n, (int)t->dtype, (long long)nnt_tensor_numel(t));
    return NNT_OK;
}

static double sigm(double x)
{
    return 1.0 / (1.0 + exp(-x));
}

/* x [B, T, C], w [C, W], state_in [B, W-1, C]; dy [B, T, C], dstate_out [B, W-1, C] ->
 * dx [B, T, C], dstate_in [B, W-1, C] */
nnt_status cpu_conv1d_causal_backward(void *ctx, const nnt_tensor *x, const nnt_tensor *w, const nnt_tensor *state_in,
                                      int act, const nnt_tensor *dy, const nnt_tensor *dstate_out, nnt_tensor *dx,
                                      nnt_tensor *dstate_in, nnt_error *err)
{
    static const char op[] = "conv1d_causal_backward";
    cpu_ctx *c = ctx;
    nnt_status st;
    if ((st = cpu_check(op, "x", x, NNT_F32, 3, err)) != NNT_OK) return st;
    int64_t B = x->shape[0], T = x->shape[1], C = x->shape[2], W = w->shape[w->ndim - 1], Ws = W - 1;
    if (W < 1 || nnt_tensor_numel(w) != C * W)
        return cpu_error(err, NNT_ERR_SHAPE, "cpu %s: w must hold [%lld, W]", op, (long long)C);
    if (state_in && (st = need(op, "state_in", state_in, B * Ws * C, err)) != NNT_OK) return st;
    if ((st = need(op, "dy", dy, B * T * C, err)) != NNT_OK) return st;
    if (dstate_out && (st = need(op, "dstate_out", dstate_out, B * Ws * C, err)) != NNT_OK) return st;
    if (dx && (st = need(op, "dx", dx, B * T * C, err)) != NNT_OK) return st;
    if (dstate_in && (st = need(op, "dstate_in", dstate_in, B * Ws * C, err)) != NNT_OK) return st;
    if (!state_in) dstate_in = NULL; /* no state was read: nothing to differentiate */
    const float *xd = x->data, *si = state_in ? state_in->data : NULL, *dyd = dy->data;
    const float *dso = dstate_out ? dstate_out->data : NULL;
    float *dxd = dx ? dx->data : NULL, *dsi = dstate_in ? dstate_in->data : NULL;
    if (!dxd && !dsi) return NNT_OK;
    /* one (batch, channel) per iteration: its column of dx and dstate_in is written by it alone */
#pragma omp parallel for collapse(2) num_threads(c->threads) schedule(static)
    for (int64_t b = 0; b < B; b++)
        for (int64_t ch = 0; ch < C; ch++) {
#define IN_AT(src) ((src) >= 0 ? xd[(b * T + (src)) * C + ch] : (si ? si[(b * Ws + Ws + (src)) * C + ch] : 0.0f))
#define ADD_AT(src, v)                                                                                                  \
    do {                                                                                                                \
        if ((src) >= 0) {                                                                                               \
            if (dxd) dxd[(b * T + (src)) * C + ch] += (float)(v);                                                       \
        } else if (dsi) {                                                                                               \
            dsi[(b * Ws + Ws + (src)) * C + ch] += (float)(v);                                                          \
        }                                                                                                               \
    } while (0)
            for (int64_t t = 0; t < T; t++) {
                double z = 0.0, d = dyd[(b * T + t) * C + ch];
                if (act == 1) { /* the convolution again, for the activation's slope */
                    for (int64_t j = 0; j < W; j++)
                        z += (double)cpu_load(w->data, w->dtype, ch * W + j) * IN_AT(t - Ws + j);
                    double s = sigm(z);
                    d *= s * (1.0 + z * (1.0 - s));
                }
                for (int64_t j = 0; j < W; j++) ADD_AT(t - Ws + j, (double)cpu_load(w->data, w->dtype, ch * W + j) * d);
            }
            for (int64_t j = 0; dso && j < Ws; j++) ADD_AT(T - Ws + j, dso[(b * Ws + j) * C + ch]);
#undef IN_AT
#undef ADD_AT
        }
    return NNT_OK;
}

/* a [M, H*K], dt_bias [H*K], a_log [H], dg [M, H*K] -> da [M, H*K] */
nnt_status cpu_kda_gate_backward(void *ctx, const nnt_tensor *a, const nnt_tensor *dt_bias, const nnt_tensor *a_log,
                                 const nnt_tensor *dg, nnt_tensor *da, nnt_error *err)
{
    static const char op[] = "kda_gate_backward";
    cpu_ctx *c = ctx;
    int64_t P = dt_bias ? nnt_tensor_numel(dt_bias) : 0, H = a_log ? nnt_tensor_numel(a_log) : 0;
    int64_t M = P ? nnt_tensor_numel(a) / P : 0;
    if (a->dtype != NNT_F32 || !P || !H || P % H || nnt_tensor_numel(a) != M * P)
        return cpu_error(err, NNT_ERR_SHAPE, "cpu %s: a [M, H*K], dt_bias [H*K], a_log [H] disagree", op);
    nnt_status st;
    if ((st = need(op, "dg", dg, M * P, err)) != NNT_OK) return st;
    if (!da) return NNT_OK;
    if ((st = need(op, "da", da, M * P, err)) != NNT_OK) return st;
    int64_t K = P / H;
    const float *ad = a->data, *dgd = dg->data;
    float *dad = da->data;
#pragma omp parallel for num_threads(c->threads) schedule(static)
    for (int64_t m = 0; m < M; m++)
        for (int64_t p = 0; p < P; p++) {
            double x = (double)ad[m * P + p] + cpu_load(dt_bias->data, dt_bias->dtype, p);
            double slope = x > 20.0 ? 1.0 : sigm(x); /* softplus' (the forward takes x itself past 20) */
            double decay = exp((double)cpu_load(a_log->data, a_log->dtype, p / K));
            dad[m * P + p] += (float)(-decay * slope * dgd[m * P + p]);
        }
    return NNT_OK;
}

/* y, dy, dx: F32 of one size */
nnt_status cpu_sigmoid_backward(void *ctx, const nnt_tensor *y, const nnt_tensor *dy, nnt_tensor *dx, nnt_error *err)
{
    static const char op[] = "sigmoid_backward";
    cpu_ctx *c = ctx;
    int64_t n = nnt_tensor_numel(y);
    nnt_status st;
    if ((st = need(op, "y", y, n, err)) != NNT_OK || (st = need(op, "dy", dy, n, err)) != NNT_OK) return st;
    if (!dx) return NNT_OK;
    if ((st = need(op, "dx", dx, n, err)) != NNT_OK) return st;
    const float *yd = y->data, *dyd = dy->data;
    float *dxd = dx->data;
#pragma omp parallel for num_threads(c->threads) schedule(static)
    for (int64_t i = 0; i < n; i++) dxd[i] += (float)((double)dyd[i] * yd[i] * (1.0 - (double)yd[i]));
    return NNT_OK;
}

/* ---- the gated delta rule ---- */

/* The forward's normalisation of one key or query (float, as cpu_delta_rule computes it):
 * out = in * r * f with r = 1 / sqrt(sum in^2 + 1e-6) (l2norm) or 1; returns r. */
static double normalise(float *out, const float *in, int64_t n, int l2norm, float f)
{
    float inv = 1.0f;
    if (l2norm) {
        double ss = 0.0;
        for (int64_t i = 0; i < n; i++) ss += (double)in[i] * in[i];
        inv = 1.0f / sqrtf((float)ss + 1e-6f);
    }
    for (int64_t i = 0; i < n; i++) out[i] = in[i] * inv * f;
    return inv;
}

/* The reverse of normalise: dx += f (r dxn - x r^3 (x . dxn)) with l2norm, else f dxn. */
static void normalise_back(float *dx, const float *x, const double *dxn, int64_t n, int l2norm, double r, double f)
{
    double dot = 0.0;
    if (l2norm)
        for (int64_t i = 0; i < n; i++) dot += (double)x[i] * dxn[i];
    for (int64_t i = 0; i < n; i++) dx[i] += (float)(f * (r * dxn[i] - (l2norm ? x[i] * r * r * r * dot : 0.0)));
}

/* The arguments of one delta_rule backward, shared by every (batch, head). */
typedef struct dr_args {
    int64_t T, H, K, V;
    const float *q, *k, *v, *g, *beta, *si, *dout, *dso;
    const uint8_t *valid; /* [B, T] or NULL */
    int l2norm;
    float scale;
    float *dst, *dq, *dk, *dv, *dg, *dbeta, *dsi;
} dr_args;

/* The forward's step of token (b, t) on S [K, V] in place, in float as cpu_delta_rule (so the
 * recomputed states are the forward's). kn, u: K and V floats of scratch. */
static void dr_step(const dr_args *a, int64_t b, int64_t h, int64_t t, float *S, float *kn, float *u)
{
    int64_t K = a->K, V = a->V, base = (b * a->T + t) * a->H + h;
    if (a->valid && !a->valid[b * a->T + t]) return;
    normalise(kn, a->k + base * K, K, a->l2norm, 1.0f);
    const float *gt = a->g + base * K, *vt = a->v + base * V;
    float bt = a->beta[base];
    for (int64_t j = 0; j < V; j++) u[j] = 0.0f;
    for (int64_t i = 0; i < K; i++) {
        float d = expf(gt[i]), ki = kn[i], *Si = S + i * V;
        for (int64_t j = 0; j < V; j++) {
            Si[j] *= d;
            u[j] += Si[j] * ki;
        }
    }
    for (int64_t j = 0; j < V; j++) u[j] = bt * (vt[j] - u[j]);
    for (int64_t i = 0; i < K; i++) {
        float ki = kn[i], *Si = S + i * V;
        for (int64_t j = 0; j < V; j++) Si[j] += ki * u[j];
    }
}

/* Scratch of one (batch, head): the token's vectors in float and double. */
typedef struct dr_work {
    float *kn, *qn, *u;
    double *dS, *w, *vu, *dqn, *dkn, *du;
} dr_work;

/* The reverse step of token (b, t): dS holds the gradient of S_t from the later tokens (and
 * dstate_out); on return that of S_{t-1}. Sp = S_{t-1}, S = S_t (float, as the forward). */
static void dr_back_step(const dr_args *a, int64_t b, int64_t h, int64_t t, const float *Sp, const float *S,
                         dr_work *wk)
{
    int64_t K = a->K, V = a->V, base = (b * a->T + t) * a->H + h, KV = K * V;
    double *dS = wk->dS;
    if (a->dst) { /* the states output's own cotangent */
        const float *c = a->dst + base * KV;
        for (int64_t i = 0; i < KV; i++) dS[i] += c[i];
    }
    int valid = !a->valid || a->valid[b * a->T + t];
    if (valid && a->dout) { /* o_t = S_t^T qn */
        const float *dot = a->dout + base * V;
        double r = normalise(wk->qn, a->q + base * K, K, a->l2norm, a->scale);
        for (int64_t i = 0; i < K; i++) {
            double acc = 0.0;
            for (int64_t j = 0; j < V; j++) {
                acc += (double)S[i * V + j] * dot[j];
                dS[i * V + j] += (double)wk->qn[i] * dot[j];
            }
            wk->dqn[i] = acc;
        }
        if (a->dq) normalise_back(a->dq + base * K, a->q + base * K, wk->dqn, K, a->l2norm, r, a->scale);
    }
    if (a->dst) { /* the total gradient of S_t replaces the cotangent */
        float *c = a->dst + base * KV;
        for (int64_t i = 0; i < KV; i++) c[i] = (float)dS[i];
    }
    if (!valid) return; /* S passed unchanged: so does its gradient */
    const float *kt = a->k + base * K, *gt = a->g + base * K, *vt = a->v + base * V;
    double rk = normalise(wk->kn, kt, K, a->l2norm, 1.0f), bt = a->beta[base];
    /* u = Sd^T kn with Sd = diag(exp g) S_{t-1}; w = beta (v - u) */
    for (int64_t j = 0; j < V; j++) wk->vu[j] = 0.0;
    for (int64_t i = 0; i < K; i++) {
        double d = exp((double)gt[i]);
        for (int64_t j = 0; j < V; j++) wk->vu[j] += d * Sp[i * V + j] * wk->kn[i];
    }
    for (int64_t j = 0; j < V; j++) {
        wk->vu[j] = vt[j] - wk->vu[j];
        wk->w[j] = bt * wk->vu[j];
        wk->du[j] = 0.0; /* dw for now */
    }
    /* S_t = Sd + kn w^T: dw = dS^T kn, dkn = dS w */
    for (int64_t i = 0; i < K; i++) {
        double acc = 0.0;
        for (int64_t j = 0; j < V; j++) {
            acc += dS[i * V + j] * wk->w[j];
            wk->du[j] += dS[i * V + j] * wk->kn[i];
        }
        wk->dkn[i] = acc;
    }
    double dbeta = 0.0;
    for (int64_t j = 0; j < V; j++) {
        double dw = wk->du[j];
        dbeta += dw * wk->vu[j];
        if (a->dv) a->dv[base * V + j] += (float)(bt * dw);
        wk->du[j] = -bt * dw;
    }
    if (a->dbeta) a->dbeta[base] += (float)dbeta;
    /* u = Sd^T kn: dSd = dS + kn du^T, dkn += Sd du; Sd = diag(e^g) S_{t-1}: dg = rowsum(dSd Sd) */
    for (int64_t i = 0; i < K; i++) {
        double d = exp((double)gt[i]), acc = 0.0, dgi = 0.0;
        for (int64_t j = 0; j < V; j++) {
            double sd = d * Sp[i * V + j], dsd = dS[i * V + j] + wk->kn[i] * wk->du[j];
            acc += sd * wk->du[j];
            dgi += dsd * sd;
            dS[i * V + j] = d * dsd;
        }
        wk->dkn[i] += acc;
        if (a->dg) a->dg[base * K + i] += (float)dgi;
    }
    if (a->dk) normalise_back(a->dk + base * K, kt, wk->dkn, K, a->l2norm, rk, 1.0);
}

/* One (batch, head): checkpoints of S every CHUNK tokens by a forward, then each stretch
 * recomputed and run backwards. Returns 0 without memory. */
static int dr_backward_one(const dr_args *a, int64_t b, int64_t h)
{
    int64_t T = a->T, K = a->K, V = a->V, KV = K * V, NC = (T + CHUNK - 1) / CHUNK;
    float *ck = malloc((size_t)((NC + 1) * KV + (CHUNK + 1) * KV + 2 * K + V) * sizeof(float));
    double *dd = malloc((size_t)(KV + 3 * V + 2 * K + V) * sizeof(double));
    if (!ck || !dd) {
        free(ck), free(dd);
        return 0;
    }
    float *run = ck + NC * KV, *kn = run + (CHUNK + 1) * KV, *qn = kn + K, *u = qn + K;
    dr_work wk = {kn, qn, u, dd, dd + KV, dd + KV + V, dd + KV + 2 * V, dd + KV + 2 * V + K, dd + KV + 2 * V + 2 * K};
    if (a->si)
        memcpy(ck, a->si + (b * a->H + h) * KV, (size_t)KV * sizeof(float));
    else
        memset(ck, 0, (size_t)KV * sizeof(float));
    for (int64_t c = 1; c < NC; c++) { /* ck[c]: S before token c * CHUNK */
        memcpy(ck + c * KV, ck + (c - 1) * KV, (size_t)KV * sizeof(float));
        for (int64_t t = (c - 1) * CHUNK; t < c * CHUNK; t++) dr_step(a, b, h, t, ck + c * KV, kn, u);
    }
    for (int64_t i = 0; i < KV; i++) wk.dS[i] = a->dso ? a->dso[(b * a->H + h) * KV + i] : 0.0;
    for (int64_t c = NC - 1; c >= 0; c--) {
        int64_t t0 = c * CHUNK, t1 = t0 + CHUNK < T ? t0 + CHUNK : T;
        memcpy(run, ck + c * KV, (size_t)KV * sizeof(float)); /* run[i]: S after token t0 + i - 1 */
        for (int64_t t = t0; t < t1; t++) {
            memcpy(run + (t - t0 + 1) * KV, run + (t - t0) * KV, (size_t)KV * sizeof(float));
            dr_step(a, b, h, t, run + (t - t0 + 1) * KV, kn, u);
        }
        for (int64_t t = t1 - 1; t >= t0; t--)
            dr_back_step(a, b, h, t, run + (t - t0) * KV, run + (t - t0 + 1) * KV, &wk);
    }
    if (a->dsi)
        for (int64_t i = 0; i < KV; i++) a->dsi[(b * a->H + h) * KV + i] += (float)wk.dS[i];
    free(ck);
    free(dd);
    return 1;
}

nnt_status cpu_delta_rule_backward(void *ctx, const nnt_tensor *q, const nnt_tensor *k, const nnt_tensor *v,
                                   const nnt_tensor *g, const nnt_tensor *beta, const uint8_t *token_valid,
                                   const nnt_tensor *state_in, int l2norm, float scale, const nnt_tensor *do_,
                                   const nnt_tensor *dstate_out, nnt_tensor *dstates, nnt_tensor *dq, nnt_tensor *dk,
                                   nnt_tensor *dv, nnt_tensor *dg, nnt_tensor *dbeta, nnt_tensor *dstate_in,
                                   nnt_error *err)
{
    static const char op[] = "delta_rule_backward";
    cpu_ctx *c = ctx;
    nnt_status st;
    if ((st = cpu_check(op, "q", q, NNT_F32, 4, err)) != NNT_OK) return st;
    if ((st = cpu_check(op, "v", v, NNT_F32, 4, err)) != NNT_OK) return st;
    int64_t B = q->shape[0], T = q->shape[1], H = q->shape[2], K = q->shape[3], V = v->shape[3];
    int64_t nk = B * T * H * K, nv = B * T * H * V, ns = B * H * K * V;
    const struct {
        const char *name;
        const nnt_tensor *t;
        int64_t n;
    } want[] = {{"k", k, nk},           {"v", v, nv},           {"g", g, nk},           {"beta", beta, B * T * H},
                {"state_in", state_in, ns}, {"do_", do_, nv},   {"dstate_out", dstate_out, ns},
                {"dstates", dstates, ns * T}, {"dq", dq, nk},   {"dk", dk, nk},         {"dv", dv, nv},
                {"dg", dg, nk},         {"dbeta", dbeta, B * T * H}, {"dstate_in", dstate_in, ns}};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        if (want[i].t && (st = need(op, want[i].name, want[i].t, want[i].n, err)) != NNT_OK) return st;
    if (K > 1024 || V > 1024) return cpu_error(err, NNT_ERR_UNSUPPORTED, "cpu %s: head widths above 1024", op);
    dr_args a = {T, H, K, V, q->data, k->data, v->data, g->data, beta->data, state_in ? state_in->data : NULL,
                 do_ ? do_->data : NULL, dstate_out ? dstate_out->data : NULL, token_valid, l2norm, scale,
                 dstates ? dstates->data : NULL, dq ? dq->data : NULL, dk ? dk->data : NULL, dv ? dv->data : NULL,
                 dg ? dg->data : NULL, dbeta ? dbeta->data : NULL, state_in && dstate_in ? dstate_in->data : NULL};
    int bad = 0;
#pragma omp parallel for collapse(2) num_threads(c->threads) schedule(static) reduction(| : bad)
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < H; h++) bad |= !dr_backward_one(&a, b, h);
    if (bad) return cpu_error(err, NNT_ERR_OUT_OF_MEMORY, "cpu %s: no memory for the states of a head", op);
    return NNT_OK;
}

/* x [M, D], w [D], gate [M, D], dy [M, D] -> dx [M, D], dgate [M, D] */
nnt_status cpu_rms_norm_gated_backward(void *ctx, const nnt_tensor *x, const nnt_tensor *w, const nnt_tensor *gate,
                                       float eps, const nnt_tensor *dy, nnt_tensor *dx, nnt_tensor *dgate,
                                       nnt_error *err)
{
    static const char op[] = "rms_norm_gated_backward";
    cpu_ctx *c = ctx;
    int64_t D = w ? nnt_tensor_numel(w) : 0, n = nnt_tensor_numel(x);
    if (!D || n % D || x->dtype != NNT_F32)
        return cpu_error(err, NNT_ERR_SHAPE, "cpu %s: x [M, D] and w [D] disagree", op);
    nnt_status st;
    if ((st = need(op, "gate", gate, n, err)) != NNT_OK || (st = need(op, "dy", dy, n, err)) != NNT_OK) return st;
    if (dx && (st = need(op, "dx", dx, n, err)) != NNT_OK) return st;
    if (dgate && (st = need(op, "dgate", dgate, n, err)) != NNT_OK) return st;
    int64_t M = n / D;
    const float *xd = x->data, *gd = gate->data, *dyd = dy->data;
    float *dxd = dx ? dx->data : NULL, *dgd = dgate ? dgate->data : NULL;
#pragma omp parallel for num_threads(c->threads) schedule(static)
    for (int64_t m = 0; m < M; m++) {
        const float *xr = xd + m * D, *gr = gd + m * D, *dr = dyd + m * D;
        double ss = 0.0, ux = 0.0;
        for (int64_t d = 0; d < D; d++) ss += (double)xr[d] * xr[d];
        double r = 1.0 / sqrt(ss / (double)D + eps);
        for (int64_t d = 0; d < D; d++) {
            double s = sigm(gr[d]), wd = cpu_load(w->data, w->dtype, d);
            ux += wd * s * dr[d] * xr[d];
            if (dgd) dgd[m * D + d] += (float)(dr[d] * wd * xr[d] * r * s * (1.0 - s));
        }
        for (int64_t d = 0; dxd && d < D; d++) {
            double u = cpu_load(w->data, w->dtype, d) * sigm(gr[d]) * dr[d];
            dxd[m * D + d] += (float)(r * u - xr[d] * r * r * r * ux / (double)D);
        }
    }
    return NNT_OK;
}
