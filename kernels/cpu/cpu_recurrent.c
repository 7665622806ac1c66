/* cpu_recurrent.c - the cpu backend's kernels for recurrent mixers: the causal depthwise
 * convolution, Kimi's forget gate, sigmoid, the gated delta rule, the gated RMSNorm, and the
 * column copies and row masking their forward needs. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_internal.h"

/* x [B, T, C], w [C, W], state_in/out [B, W-1, C], y [B, T, C] */
nnt_status cpu_conv1d_causal(void *ctx, const nnt_tensor *x, const nnt_tensor *w, const nnt_tensor *state_in, int act,
                             nnt_tensor *y, nnt_tensor *state_out, nnt_error *err)
{
    cpu_ctx *c = ctx;
    nnt_status st;
    if ((st = cpu_check("conv1d_causal", "x", x, NNT_F32, 3, err)) != NNT_OK) return st;
    if ((st = cpu_check("conv1d_causal", "y", y, NNT_F32, 3, err)) != NNT_OK) return st;
    int64_t B = x->shape[0], T = x->shape[1], C = x->shape[2], W = w->shape[w->ndim - 1];
    if (nnt_tensor_numel(w) != C * W || nnt_tensor_numel(y) != B * T * C)
        return cpu_error(err, NNT_ERR_SHAPE, "cpu conv1d_causal: w must hold [%lld, W] and y match x", (long long)C);
    if ((state_in && nnt_tensor_numel(state_in) != B * (W - 1) * C) || (state_out && nnt_tensor_numel(state_out) != B * (W - 1) * C))
        return cpu_error(err, NNT_ERR_SHAPE, "cpu conv1d_causal: states must be [B, W - 1, C]");
    const float *xd = x->data, *si = state_in ? state_in->data : NULL;
    float *yd = y->data;
    int r16 = cpu_bf16(y); /* bfloat16 values: the convolution rounded, then its activation */
#pragma omp parallel for collapse(2) num_threads(c->threads) schedule(static)
    for (int64_t b = 0; b < B; b++)
        for (int64_t ch = 0; ch < C; ch++)
            for (int64_t t = 0; t < T; t++) {
                float acc = 0.0f;
                for (int64_t j = 0; j < W; j++) {
                    int64_t src = t - (W - 1) + j; /* < 0: from the state */
                    float in = src >= 0 ? xd[(b * T + src) * C + ch]
                                        : (si ? si[(b * (W - 1) + (W - 1) + src) * C + ch] : 0.0f);
                    acc += cpu_load(w->data, w->dtype, ch * W + j) * in;
                }
                if (r16) acc = cpu_r16(acc);
                if (act == 1) acc = acc / (1.0f + expf(-acc));
                yd[(b * T + t) * C + ch] = r16 ? cpu_r16(acc) : acc;
            }
    if (state_out) {
        float *so = state_out->data;
        for (int64_t b = 0; b < B; b++)
            for (int64_t j = 0; j < W - 1; j++) {
                int64_t src = T - (W - 1) + j;
                for (int64_t ch = 0; ch < C; ch++)
                    so[(b * (W - 1) + j) * C + ch] =
                        src >= 0 ? xd[(b * T + src) * C + ch] : (si ? si[(b * (W - 1) + (W - 1) + src) * C + ch] : 0.0f);
            }
    }
    return NNT_OK;
}

/* a [M, H*K], dt_bias [H*K], a_log [H] -> g [M, H*K] */
nnt_status cpu_kda_gate(void *ctx, const nnt_tensor *a, const nnt_tensor *dt_bias, const nnt_tensor *a_log,
                        nnt_tensor *g, nnt_error *err)
{
    cpu_ctx *c = ctx;
    int64_t P = dt_bias ? nnt_tensor_numel(dt_bias) : 0, H = nnt_tensor_numel(a_log);
    int64_t M = P ? nnt_tensor_numel(a) / P : 0;
    if (a->dtype != NNT_F32 || g->dtype != NNT_F32 || !P || !H || P % H || nnt_tensor_numel(a) != M * P ||
        nnt_tensor_numel(g) != M * P)
        return cpu_error(err, NNT_ERR_SHAPE, "cpu kda_gate: a, g [M, H*K], dt_bias [H*K], a_log [H] disagree");
    int64_t K = P / H;
    const float *ad = a->data;
    float *gd = g->data;
#pragma omp parallel for num_threads(c->threads) schedule(static)
    for (int64_t m = 0; m < M; m++)
        for (int64_t p = 0; p < P; p++) {
            float x = ad[m * P + p] + cpu_load(dt_bias->data, dt_bias->dtype, p);
            float sp = x > 20.0f ? x : logf(1.0f + expf(x));
            gd[m * P + p] = -expf(cpu_load(a_log->data, a_log->dtype, p / K)) * sp;
        }
    return NNT_OK;
}

nnt_status cpu_sigmoid(void *ctx, const nnt_tensor *x, nnt_tensor *y, nnt_error *err)
{
    cpu_ctx *c = ctx;
    int64_t n = nnt_tensor_numel(x);
    if (x->dtype != NNT_F32 || y->dtype != NNT_F32 || nnt_tensor_numel(y) != n)
        return cpu_error(err, NNT_ERR_SHAPE, "cpu sigmoid: x and y must be F32 of equal size");
    const float *xd = x->data;
    float *yd = y->data;
#pragma omp parallel for num_threads(c->threads) schedule(static)
    for (int64_t i = 0; i < n; i++) yd[i] = 1.0f / (1.0f + expf(-xd[i]));
    cpu_round_result(c, y);
    return NNT_OK;
}

static void l2normalize(float *out, const float *in, int64_t n)
{
    double ss = 0.0;
    for (int64_t i = 0; i < n; i++) ss += (double)in[i] * in[i];
    float inv = 1.0f / sqrtf((float)ss + 1e-6f);
    for (int64_t i = 0; i < n; i++) out[i] = in[i] * inv;
}

/* q, k [B, T, H, K], v [B, T, H, V], g [B, T, H, K], beta [B, T, H] -> o [B, T, H, V],
 * state_out [B, H, K, V], states [B, T, H, K, V]; state_in may be state_out itself (updated in
 * place) but must not overlap it otherwise */
nnt_status cpu_delta_rule(void *ctx, const nnt_tensor *q, const nnt_tensor *k, const nnt_tensor *v,
                          const nnt_tensor *g, const nnt_tensor *beta, const uint8_t *token_valid,
                          const nnt_tensor *state_in, int l2norm, float scale, nnt_tensor *o,
                          nnt_tensor *state_out, nnt_tensor *states, nnt_error *err)
{
    cpu_ctx *c = ctx;
    nnt_status st;
    if ((st = cpu_check("delta_rule", "q", q, NNT_F32, 4, err)) != NNT_OK) return st;
    if ((st = cpu_check("delta_rule", "v", v, NNT_F32, 4, err)) != NNT_OK) return st;
    int64_t B = q->shape[0], T = q->shape[1], H = q->shape[2], K = q->shape[3], V = v->shape[3];
    if (k->dtype != NNT_F32 || g->dtype != NNT_F32 || beta->dtype != NNT_F32 || o->dtype != NNT_F32 ||
        nnt_tensor_numel(k) != B * T * H * K || nnt_tensor_numel(g) != B * T * H * K || nnt_tensor_numel(v) != B * T * H * V ||
        nnt_tensor_numel(beta) != B * T * H || nnt_tensor_numel(o) != B * T * H * V ||
        (state_in && nnt_tensor_numel(state_in) != B * H * K * V) || (state_out && nnt_tensor_numel(state_out) != B * H * K * V) ||
        (states && nnt_tensor_numel(states) != B * T * H * K * V))
        return cpu_error(err, NNT_ERR_SHAPE, "cpu delta_rule: q, k, g [B, T, H, K], v, o [B, T, H, V], beta [B, T, H] and "
                                             "states [B, H, K, V] disagree");
    if (K > 1024 || V > 1024) return cpu_error(err, NNT_ERR_UNSUPPORTED, "cpu delta_rule: head widths above 1024");
    const float *qd = q->data, *kd = k->data, *vd = v->data, *gd = g->data, *bd = beta->data;
    float *od = o->data;
    int bad = 0;
#pragma omp parallel for collapse(2) num_threads(c->threads) schedule(static) reduction(| : bad)
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < H; h++) {
            /* the state is updated where state_out keeps it (state_in may be that same memory:
             * a decoding step carries its state in place), else in memory of its own */
            float *S = state_out ? (float *)state_out->data + (b * H + h) * K * V : malloc((size_t)(K * V) * sizeof(float));
            const float *Sin = state_in ? (const float *)state_in->data + (b * H + h) * K * V : NULL;
            float qn[1024], kn[1024], u[1024];
            if (!S) {
                bad = 1;
                continue;
            }
            if (!Sin)
                memset(S, 0, (size_t)(K * V) * sizeof(float));
            else if (Sin != S)
                memcpy(S, Sin, (size_t)(K * V) * sizeof(float));
            for (int64_t t = 0; t < T; t++) {
                int64_t bt = b * T + t, base = (bt * H + h);
                float *ot = od + base * V;
                if (token_valid && !token_valid[bt]) {
                    memset(ot, 0, (size_t)V * sizeof(float));
                } else {
                    const float *qt = qd + base * K, *kt = kd + base * K, *vt = vd + base * V, *gt = gd + base * K;
                    if (l2norm) {
                        l2normalize(qn, qt, K);
                        l2normalize(kn, kt, K);
                    } else {
                        memcpy(qn, qt, (size_t)K * sizeof(float));
                        memcpy(kn, kt, (size_t)K * sizeof(float));
                    }
                    for (int64_t i = 0; i < K; i++) qn[i] *= scale;
                    float bt_ = bd[base];
                    /* two sweeps over the state, row by row (contiguous in j): decay it and read
                     * u = S^T k; then write S += k u^T and read o = S^T q */
                    for (int64_t j = 0; j < V; j++) u[j] = 0.0f;
                    for (int64_t i = 0; i < K; i++) {
                        float d = expf(gt[i]), ki = kn[i], *Si = S + i * V;
                        for (int64_t j = 0; j < V; j++) {
                            Si[j] *= d;
                            u[j] += Si[j] * ki;
                        }
                    }
                    for (int64_t j = 0; j < V; j++) {
                        u[j] = bt_ * (vt[j] - u[j]);
                        ot[j] = 0.0f;
                    }
                    for (int64_t i = 0; i < K; i++) {
                        float ki = kn[i], qi = qn[i], *Si = S + i * V;
                        for (int64_t j = 0; j < V; j++) {
                            Si[j] += ki * u[j];
                            ot[j] += Si[j] * qi;
                        }
                    }
                }
                if (states) memcpy((float *)states->data + base * K * V, S, (size_t)(K * V) * sizeof(float));
            }
            if (!state_out) free(S);
        }
    if (bad) return cpu_error(err, NNT_ERR_OUT_OF_MEMORY, "cpu delta_rule: no memory for a state");
    cpu_round_result(c, o);
    return NNT_OK;
}

/* x [M, D], w [D], gate [M, D] -> y [M, D] */
nnt_status cpu_rms_norm_gated(void *ctx, const nnt_tensor *x, const nnt_tensor *w, const nnt_tensor *gate, float eps,
                              nnt_tensor *y, nnt_error *err)
{
    cpu_ctx *c = ctx;
    int64_t D = w ? nnt_tensor_numel(w) : 0, n = nnt_tensor_numel(x);
    if (!D || n % D || x->dtype != NNT_F32 || gate->dtype != NNT_F32 || y->dtype != NNT_F32 || nnt_tensor_numel(gate) != n ||
        nnt_tensor_numel(y) != n)
        return cpu_error(err, NNT_ERR_SHAPE, "cpu rms_norm_gated: x, gate, y [M, D] and w [D] disagree");
    int64_t M = n / D;
    const float *xd = x->data, *gd = gate->data;
    float *yd = y->data;
#pragma omp parallel for num_threads(c->threads) schedule(static)
    for (int64_t m = 0; m < M; m++) {
        double ss = 0.0;
        for (int64_t d = 0; d < D; d++) ss += (double)xd[m * D + d] * xd[m * D + d];
        float inv = 1.0f / sqrtf((float)(ss / (double)D) + eps);
        for (int64_t d = 0; d < D; d++) {
            float gv = gd[m * D + d];
            yd[m * D + d] = cpu_load(w->data, w->dtype, d) * (xd[m * D + d] * inv) * (1.0f / (1.0f + expf(-gv)));
        }
    }
    cpu_round_result(c, y);
    return NNT_OK;
}

nnt_status cpu_copy_cols(void *ctx, const nnt_tensor *src, int64_t src_col, nnt_tensor *dst, int64_t dst_col,
                         int64_t ncols, nnt_error *err)
{
    (void)ctx;
    int64_t M = src->shape[0], Cs = nnt_tensor_numel(src) / (M ? M : 1), Cd = nnt_tensor_numel(dst) / (M ? M : 1);
    if (src->dtype != NNT_F32 || dst->dtype != NNT_F32 || dst->shape[0] != M || src_col < 0 || dst_col < 0 ||
        src_col + ncols > Cs || dst_col + ncols > Cd)
        return cpu_error(err, NNT_ERR_SHAPE, "cpu copy_cols: columns [%lld, +%lld) and [%lld, +%lld) do not fit",
                         (long long)src_col, (long long)ncols, (long long)dst_col, (long long)ncols);
    const float *s = src->data;
    float *d = dst->data;
    for (int64_t m = 0; m < M; m++) memmove(d + m * Cd + dst_col, s + m * Cs + src_col, (size_t)ncols * sizeof(float));
    return NNT_OK;
}

nnt_status cpu_zero_rows(void *ctx, nnt_tensor *x, const uint8_t *row_valid, nnt_error *err)
{
    (void)ctx;
    if (x->dtype != NNT_F32) return cpu_error(err, NNT_ERR_SHAPE, "cpu zero_rows: F32 only");
    int64_t M = x->shape[0], C = nnt_tensor_numel(x) / (M ? M : 1);
    float *d = x->data;
    for (int64_t m = 0; m < M; m++)
        if (!row_valid[m]) memset(d + m * C, 0, (size_t)C * sizeof(float));
    return NNT_OK;
}
