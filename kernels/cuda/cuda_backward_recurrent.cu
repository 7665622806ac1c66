/* cuda_backward_recurrent.cu - the cuda backend's backward ops of Kimi Delta Attention's
 * kernels (cuda_recurrent.cu; nnt_backend.h, "backward of the recurrent mixers"): the causal
 * convolution with carried state, the forget gate, sigmoid from its output, the gated delta rule
 * and the gated RMSNorm. Each follows kernels/cpu/cpu_backward_recurrent.c op for op - the same
 * recomputations, in float where the cpu keeps float and in double where it takes double -
 * and adds float32 gradients into the tensors it is handed; a NULL gradient output is skipped.
 *
 * The convolution's backward gathers rather than scatters: one thread per input position (the
 * W - 1 carried state entries, then the T tokens) adds the taps of the outputs that read it, in
 * the order the cpu adds them, so no two threads write one entry. The delta rule's backward
 * runs one block per (batch, head) through the tokens in reverse, as the cpu does: checkpoints
 * of the state every DRB_CHUNK tokens from a forward pass, each stretch recomputed from its
 * checkpoint and walked backwards; the checkpoints, the stretch, the state's gradient (double)
 * and the token's vectors live in the context's scratch memory, a slice per (batch, head).
 * Speed is not the aim here: one block per head runs every token in turn. */
#include <limits.h>

#include "cuda_device.cuh"

static nnt_status need(const char *op, const char *arg, const nnt_tensor *t, int64_t n, nnt_error *err)
{
    if (!t || !t->data) return cuda_error(err, NNT_ERR_INVALID_ARGUMENT, "cuda %s: %s is missing", op, arg);
    if (t->dtype != NNT_F32 || nnt_tensor_numel(t) != n)
        return cuda_error(err, NNT_ERR_SHAPE, "cuda %s: %s must be F32 with %lld entries (has dtype %d, %lld)", op, arg,
                          (long long)n, (int)t->dtype, (long long)nnt_tensor_numel(t));
    return NNT_OK;
}

__device__ __forceinline__ double sigm_d(double x)
{
    return 1.0 / (1.0 + exp(-x));
}

/* ---- conv1d_causal_backward ---- */

/* x, dy, dx [B, T, C]; w [C, W] F32/BF16/F16 as stored; si, dso, dsi [B, W - 1, C] (each of
 * si, dso, dx, dsi may be NULL). One thread per (b, input position p, channel c), p from
 * -(W - 1) (the carried state's first entry, into dsi) to T - 1 (into dx): with dz[t] = dy[t]
 * act'(z[t]) (z recomputed in double from x and si; SiLU when act is 1), the entry gets
 * w[c, j] dz[t] from each output t = p + W - 1 - j in [0, T), t rising, then dso's entry when
 * state_out copied input p - each term added to the float gradient in turn, as the cpu adds
 * them. */
__global__ void k_conv1d_bwd(const float *x, const void *w, int wdt, const float *si, int act, const float *dy,
                             const float *dso, float *dx, float *dsi, int64_t B, int64_t T, int64_t C, int64_t W)
{
    const int64_t Ws = W - 1, P = Ws + T;
    GRID_LOOP(i, B * P * C)
    {
        int64_t ch = i % C, r = i / C;
        int64_t p = r % P - Ws, b = r / P;
        float *out = p >= 0 ? (dx ? dx + (b * T + p) * C + ch : NULL) : (dsi ? dsi + (b * Ws + Ws + p) * C + ch : NULL);
        if (!out) continue;
        float acc = *out;
        for (int64_t j = W - 1; j >= 0; j--) {
            int64_t t = p + Ws - j;
            if (t < 0 || t >= T) continue;
            double d = dy[(b * T + t) * C + ch];
            if (act == 1) { /* the convolution again, for the activation's slope */
                double z = 0.0;
                for (int64_t jj = 0; jj < W; jj++) {
                    int64_t src = t - Ws + jj;
                    float in = src >= 0 ? x[(b * T + src) * C + ch] : (si ? si[(b * Ws + Ws + src) * C + ch] : 0.0f);
                    z += (double)load_any(w, wdt, ch * W + jj) * in;
                }
                double s = sigm_d(z);
                d *= s * (1.0 + z * (1.0 - s));
            }
            acc += (float)((double)load_any(w, wdt, ch * W + j) * d);
        }
        int64_t js = p - (T - Ws); /* state_out's entry js is a copy of input p */
        if (dso && js >= 0) acc += dso[(b * Ws + js) * C + ch];
        *out = acc;
    }
}

extern "C" nnt_status cuda_conv1d_causal_backward(void *ctx, const nnt_tensor *x, const nnt_tensor *w,
                                                  const nnt_tensor *state_in, int act, const nnt_tensor *dy,
                                                  const nnt_tensor *dstate_out, nnt_tensor *dx, nnt_tensor *dstate_in,
                                                  nnt_error *err)
{
    static const char op[] = "conv1d_causal_backward";
    cuda_ctx *c = (cuda_ctx *)ctx;
    nnt_status st;
    if ((st = cuda_check(op, "x", x, NNT_F32, 3, err)) != NNT_OK) return st;
    if ((st = cuda_check_float_weight(op, "w", w, err)) != NNT_OK) return st;
    int64_t B = x->shape[0], T = x->shape[1], C = x->shape[2], W = w->shape[w->ndim - 1], Ws = W - 1;
    if (W < 1 || nnt_tensor_numel(w) != C * W)
        return cuda_error(err, NNT_ERR_SHAPE, "cuda %s: w must hold [%lld, W]", op, (long long)C);
    if (state_in && (st = need(op, "state_in [B, W - 1, C]", state_in, B * Ws * C, err)) != NNT_OK) return st;
    if ((st = need(op, "dy (as x)", dy, B * T * C, err)) != NNT_OK) return st;
    if (dstate_out && (st = need(op, "dstate_out [B, W - 1, C]", dstate_out, B * Ws * C, err)) != NNT_OK) return st;
    if (dx && (st = need(op, "dx (as x)", dx, B * T * C, err)) != NNT_OK) return st;
    if (dstate_in && (st = need(op, "dstate_in [B, W - 1, C]", dstate_in, B * Ws * C, err)) != NNT_OK) return st;
    if (!state_in) dstate_in = NULL; /* no state was read: it gets no gradient */
    if ((!dx && !dstate_in) || B * (Ws + T) * C == 0) return NNT_OK;
    CUDA_CHECK(cudaSetDevice(c->device));
    int64_t n = B * (Ws + T) * C;
    k_conv1d_bwd<<<grid_for(n), CUDA_THREADS, 0, c->stream>>>(
        (const float *)x->data, w->data, (int)w->dtype, state_in ? (const float *)state_in->data : NULL, act,
        (const float *)dy->data, dstate_out ? (const float *)dstate_out->data : NULL, dx ? (float *)dx->data : NULL,
        dstate_in ? (float *)dstate_in->data : NULL, B, T, C, W);
    return cuda_done(c, op, err);
}

/* ---- kda_gate_backward ---- */

/* a, dg, da [M, P]; dt_bias [P], a_log [H] F32/BF16/F16 as stored; P = H K. One thread per
 * element: with x = a + dt_bias in double, da += -exp(a_log[p / K]) softplus'(x) dg, where
 * softplus'(x) is sigmoid(x) up to 20 and 1 past it (the forward's linear branch). */
__global__ void k_kda_gate_bwd(const float *a, const void *dt, int dtt, const void *al, int alt, const float *dg,
                               float *da, int64_t M, int64_t P, int64_t K)
{
    GRID_LOOP(i, M * P)
    {
        int64_t p = i % P;
        double x = (double)a[i] + load_any(dt, dtt, p);
        double slope = x > 20.0 ? 1.0 : sigm_d(x);
        double decay = exp((double)load_any(al, alt, p / K));
        da[i] += (float)(-decay * slope * dg[i]);
    }
}

extern "C" nnt_status cuda_kda_gate_backward(void *ctx, const nnt_tensor *a, const nnt_tensor *dt_bias,
                                             const nnt_tensor *a_log, const nnt_tensor *dg, nnt_tensor *da,
                                             nnt_error *err)
{
    static const char op[] = "kda_gate_backward";
    cuda_ctx *c = (cuda_ctx *)ctx;
    nnt_status st;
    if ((st = cuda_check(op, "a", a, NNT_F32, 0, err)) != NNT_OK) return st;
    int64_t P = dt_bias ? nnt_tensor_numel(dt_bias) : 0, H = a_log ? nnt_tensor_numel(a_log) : 0;
    int64_t M = P ? nnt_tensor_numel(a) / P : 0;
    if (!P || !H || P % H || nnt_tensor_numel(a) != M * P)
        return cuda_error(err, NNT_ERR_SHAPE, "cuda %s: a [M, H*K], dt_bias [H*K], a_log [H] disagree", op);
    if ((st = cuda_check_float_weight(op, "dt_bias", dt_bias, err)) != NNT_OK) return st;
    if ((st = cuda_check_float_weight(op, "a_log", a_log, err)) != NNT_OK) return st;
    if ((st = need(op, "dg (as a)", dg, M * P, err)) != NNT_OK) return st;
    if (!da) return NNT_OK;
    if ((st = need(op, "da (as a)", da, M * P, err)) != NNT_OK) return st;
    if (M == 0) return NNT_OK;
    CUDA_CHECK(cudaSetDevice(c->device));
    k_kda_gate_bwd<<<grid_for(M * P), CUDA_THREADS, 0, c->stream>>>(
        (const float *)a->data, dt_bias->data, (int)dt_bias->dtype, a_log->data, (int)a_log->dtype,
        (const float *)dg->data, (float *)da->data, M, P, P / H);
    return cuda_done(c, op, err);
}

/* ---- sigmoid_backward ---- */

/* y, dy, dx [n]: dx += dy y (1 - y) in double, from the forward's output y; one thread per element */
__global__ void k_sigmoid_bwd(const float *y, const float *dy, float *dx, int64_t n)
{
    GRID_LOOP(i, n) dx[i] += (float)((double)dy[i] * y[i] * (1.0 - (double)y[i]));
}

extern "C" nnt_status cuda_sigmoid_backward(void *ctx, const nnt_tensor *y, const nnt_tensor *dy, nnt_tensor *dx,
                                            nnt_error *err)
{
    static const char op[] = "sigmoid_backward";
    cuda_ctx *c = (cuda_ctx *)ctx;
    nnt_status st;
    if ((st = cuda_check(op, "y", y, NNT_F32, 0, err)) != NNT_OK) return st;
    int64_t n = nnt_tensor_numel(y);
    if ((st = need(op, "dy (as y)", dy, n, err)) != NNT_OK) return st;
    if (!dx) return NNT_OK;
    if ((st = need(op, "dx (as y)", dx, n, err)) != NNT_OK) return st;
    if (n == 0) return NNT_OK;
    CUDA_CHECK(cudaSetDevice(c->device));
    k_sigmoid_bwd<<<grid_for(n), CUDA_THREADS, 0, c->stream>>>((const float *)y->data, (const float *)dy->data,
                                                               (float *)dx->data, n);
    return cuda_done(c, op, err);
}

/* ---- delta_rule_backward ---- */

#define DRB_CHUNK 16    /* tokens between two kept states, as the cpu backend's */
#define DRB_THREADS 256 /* threads of the block that walks one (batch, head) */

/* The arguments of one delta_rule backward, shared by every (batch, head); device pointers.
 * work: the scratch, work_bytes of it per (batch, head); nck checkpoint slots in each. */
typedef struct drb_args {
    int64_t T, H, K, V;
    const float *q, *k, *v, *g, *beta, *si, *dout, *dso;
    const uint8_t *valid; /* [B, T] or NULL */
    int l2norm;
    float scale;
    float *dst, *dq, *dk, *dv, *dg, *dbeta, *dsi;
    unsigned char *work;
    size_t work_bytes;
    int64_t nck;
} drb_args;

/* One (batch, head)'s slice of the scratch. Floats: ck [nck, K, V] the checkpoints (ck[c] the
 * state before token c DRB_CHUNK), run [DRB_CHUNK + 1, K, V] the recomputed stretch (run[i] the
 * state after token t0 + i - 1), kn, qn, dec [K] the token's normalised key and query and its
 * float decays. Doubles: dS [K, V] the gradient of the current state, ed [K] exp(g) in double,
 * dqn, dkn [K], vu, w, dw, du [V]. */
typedef struct drb_work {
    float *ck, *run, *kn, *qn, *dec;
    double *dS, *ed, *dqn, *dkn, *vu, *w, *dw, *du;
} drb_work;

__host__ __device__ static inline size_t drb_float_bytes(int64_t K, int64_t V, int64_t nck)
{
    size_t n = (size_t)(nck + DRB_CHUNK + 1) * (size_t)(K * V) + 3 * (size_t)K;
    return (n * sizeof(float) + 7) / 8 * 8;
}

__host__ __device__ static inline size_t drb_bytes(int64_t K, int64_t V, int64_t nck)
{
    size_t d = (size_t)(K * V) + 3 * (size_t)K + 4 * (size_t)V;
    return (drb_float_bytes(K, V, nck) + d * sizeof(double) + 255) / 256 * 256;
}

__device__ static drb_work drb_layout(unsigned char *base, int64_t K, int64_t V, int64_t nck)
{
    drb_work wk;
    int64_t KV = K * V;
    wk.ck = (float *)base;
    wk.run = wk.ck + nck * KV;
    wk.kn = wk.run + (DRB_CHUNK + 1) * KV;
    wk.qn = wk.kn + K;
    wk.dec = wk.qn + K;
    wk.dS = (double *)(base + drb_float_bytes(K, V, nck));
    wk.ed = wk.dS + KV;
    wk.dqn = wk.ed + K;
    wk.dkn = wk.dqn + K;
    wk.vu = wk.dkn + K;
    wk.w = wk.vu + V;
    wk.dw = wk.w + V;
    wk.du = wk.dw + V;
    return wk;
}

/* out [n] = in r f (float, as the cpu's normalise) with r = 1 / sqrt(sum in^2 + 1e-6) taken in
 * float from a double sum when l2norm, else 1; returns r. Every thread of the block calls it;
 * out is complete for all of them on return. red: 32 doubles of shared memory. */
__device__ static float drb_normalise(float *out, const float *in, int64_t n, int l2norm, float f, double *red)
{
    float inv = 1.0f;
    if (l2norm) {
        double ss = 0.0;
        for (int64_t i = threadIdx.x; i < n; i += blockDim.x) ss += (double)in[i] * in[i];
        ss = block_sum_d(ss, red);
        inv = 1.0f / sqrtf((float)ss + 1e-6f);
    }
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) out[i] = in[i] * inv * f;
    __syncthreads();
    return inv;
}

/* The reverse of drb_normalise: dx [n] += f (r dxn - x r^3 (x . dxn)) with l2norm, else f dxn.
 * Every thread of the block calls it. */
__device__ static void drb_normalise_back(float *dx, const float *x, const double *dxn, int64_t n, int l2norm, double r,
                                          double f, double *red)
{
    double dot = 0.0;
    if (l2norm) {
        for (int64_t i = threadIdx.x; i < n; i += blockDim.x) dot += (double)x[i] * dxn[i];
        dot = block_sum_d(dot, red);
    }
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x)
        dx[i] += (float)(f * (r * dxn[i] - (l2norm ? x[i] * r * r * r * dot : 0.0)));
}

/* The forward's step of token (b, t) on S [K, V] in place, in float and in the cpu's order of
 * operations per column j (so the recomputed states are the forward's): S *= exp(g_t) row by
 * row while u = S^T kn accumulates, u = beta (v - u), S += kn u^T. A padding token leaves S.
 * Every thread of the block calls it; S is complete for all of them on return. */
__device__ static void drb_step(const drb_args &a, const drb_work &wk, int64_t b, int64_t h, int64_t t, float *S,
                                double *red)
{
    const int64_t K = a.K, V = a.V, base = (b * a.T + t) * a.H + h;
    if (a.valid && !a.valid[b * a.T + t]) return;
    drb_normalise(wk.kn, a.k + base * K, K, a.l2norm, 1.0f, red);
    for (int64_t i = threadIdx.x; i < K; i += blockDim.x) wk.dec[i] = expf(a.g[base * K + i]);
    __syncthreads();
    const float bt = a.beta[base], *vt = a.v + base * V;
    for (int64_t j = threadIdx.x; j < V; j += blockDim.x) {
        float u = 0.0f;
        for (int64_t i = 0; i < K; i++) {
            float s = S[i * V + j] * wk.dec[i];
            S[i * V + j] = s;
            u += s * wk.kn[i];
        }
        u = bt * (vt[j] - u);
        for (int64_t i = 0; i < K; i++) S[i * V + j] += wk.kn[i] * u;
    }
    __syncthreads();
}

/* The reverse step of token (b, t), Sp = S_{t-1} and S = S_t (float, recomputed): wk.dS holds
 * the gradient of S_t from the later tokens (and dstate_out) and leaves with that of S_{t-1}.
 * The states output's cotangent is added first, then qn do_t^T; that total replaces dstates_t.
 * Then (valid tokens only), with Sd = diag(exp g) S_{t-1}, u = Sd^T kn, w = beta (v - u):
 * dw = dS^T kn (columns), dkn = dS w (rows); dbeta = dw . (v - u), dv = beta dw, du = -beta dw;
 * per row dSd = dS + kn du^T, dkn += Sd du, dg = rowsum(dSd * Sd), and the gradient of S_{t-1}
 * is diag(exp g) dSd. Row sums run over j and column sums over i in the cpu's order, in double.
 * Every thread of the block calls it; every write is complete for all of them on return. */
__device__ static void drb_back_step(const drb_args &a, const drb_work &wk, int64_t b, int64_t h, int64_t t,
                                     const float *Sp, const float *S, double *red)
{
    const int64_t K = a.K, V = a.V, KV = K * V, base = (b * a.T + t) * a.H + h;
    const int64_t tid = threadIdx.x, nt = blockDim.x;
    const int valid = !a.valid || a.valid[b * a.T + t], with_o = valid && a.dout;
    const float *dot = with_o ? a.dout + base * V : NULL;
    double rq = 1.0;
    if (with_o) rq = drb_normalise(wk.qn, a.q + base * K, K, a.l2norm, a.scale, red);
    for (int64_t e = tid; e < KV; e += nt) {
        double x = wk.dS[e];
        if (a.dst) x += a.dst[base * KV + e];
        if (with_o) x += (double)wk.qn[e / V] * dot[e % V];
        wk.dS[e] = x;
        if (a.dst) a.dst[base * KV + e] = (float)x; /* the total gradient of S_t replaces the cotangent */
    }
    if (with_o) { /* o_t = S_t^T qn: dqn = S_t do_t */
        for (int64_t i = tid; i < K; i += nt) {
            double acc = 0.0;
            for (int64_t j = 0; j < V; j++) acc += (double)S[i * V + j] * dot[j];
            wk.dqn[i] = acc;
        }
        __syncthreads();
        if (a.dq) drb_normalise_back(a.dq + base * K, a.q + base * K, wk.dqn, K, a.l2norm, rq, a.scale, red);
    }
    __syncthreads();
    if (!valid) return; /* S passed unchanged: so does its gradient */
    const float *kt = a.k + base * K, *gt = a.g + base * K, *vt = a.v + base * V;
    const double rk = drb_normalise(wk.kn, kt, K, a.l2norm, 1.0f, red), bt = a.beta[base];
    for (int64_t i = tid; i < K; i += nt) wk.ed[i] = exp((double)gt[i]);
    __syncthreads();
    for (int64_t j = tid; j < V; j += nt) { /* u = Sd^T kn; vu = v - u; w = beta vu */
        double u = 0.0;
        for (int64_t i = 0; i < K; i++) u += wk.ed[i] * Sp[i * V + j] * wk.kn[i];
        wk.vu[j] = vt[j] - u;
        wk.w[j] = bt * wk.vu[j];
    }
    __syncthreads();
    for (int64_t i = tid; i < K; i += nt) { /* dkn = dS w */
        double acc = 0.0;
        for (int64_t j = 0; j < V; j++) acc += wk.dS[i * V + j] * wk.w[j];
        wk.dkn[i] = acc;
    }
    for (int64_t j = tid; j < V; j += nt) { /* dw = dS^T kn */
        double acc = 0.0;
        for (int64_t i = 0; i < K; i++) acc += wk.dS[i * V + j] * wk.kn[i];
        wk.dw[j] = acc;
    }
    __syncthreads();
    double part = 0.0;
    for (int64_t j = tid; j < V; j += nt) {
        double dw = wk.dw[j];
        part += dw * wk.vu[j];
        if (a.dv) a.dv[base * V + j] += (float)(bt * dw);
        wk.du[j] = -bt * dw;
    }
    double dbeta = block_sum_d(part, red); /* its barriers also publish du */
    if (a.dbeta && tid == 0) a.dbeta[base] += (float)dbeta;
    for (int64_t i = tid; i < K; i += nt) {
        double d = wk.ed[i], acc = 0.0, dgi = 0.0;
        for (int64_t j = 0; j < V; j++) {
            double sd = d * Sp[i * V + j], dsd = wk.dS[i * V + j] + wk.kn[i] * wk.du[j];
            acc += sd * wk.du[j];
            dgi += dsd * sd;
            wk.dS[i * V + j] = d * dsd;
        }
        wk.dkn[i] += acc;
        if (a.dg) a.dg[base * K + i] += (float)dgi;
    }
    __syncthreads();
    if (a.dk) drb_normalise_back(a.dk + base * K, kt, wk.dkn, K, a.l2norm, rk, 1.0, red);
    __syncthreads();
}

/* One block of DRB_THREADS per (b, h): q, k, g, dq, dk, dg [B, T, H, K]; v, dout, dv
 * [B, T, H, V]; beta, dbeta [B, T, H]; si, dso, dsi [B, H, K, V]; dst [B, T, H, K, V]; valid
 * [B, T] (all but q, k, v, g, beta may be NULL). A forward pass keeps the state before every
 * DRB_CHUNK-th token; then from the last stretch to the first each is recomputed from its
 * checkpoint and its tokens are taken back from the last, dS starting from dso; dsi += the
 * gradient left at the start. The (b, h) slices of the gradients are disjoint: no atomics. */
__global__ void __launch_bounds__(DRB_THREADS) k_delta_rule_bwd(drb_args a)
{
    __shared__ double red[32];
    const int64_t bh = blockIdx.x, b = bh / a.H, h = bh % a.H, KV = a.K * a.V, T = a.T;
    const int64_t tid = threadIdx.x, nt = blockDim.x, NC = (T + DRB_CHUNK - 1) / DRB_CHUNK;
    const drb_work wk = drb_layout(a.work + (size_t)bh * a.work_bytes, a.K, a.V, a.nck);
    for (int64_t e = tid; e < KV; e += nt) wk.ck[e] = a.si ? a.si[bh * KV + e] : 0.0f;
    __syncthreads();
    for (int64_t c = 1; c < NC; c++) {
        float *cur = wk.ck + c * KV;
        for (int64_t e = tid; e < KV; e += nt) cur[e] = cur[e - KV];
        __syncthreads();
        for (int64_t t = (c - 1) * DRB_CHUNK; t < c * DRB_CHUNK; t++) drb_step(a, wk, b, h, t, cur, red);
    }
    for (int64_t e = tid; e < KV; e += nt) wk.dS[e] = a.dso ? (double)a.dso[bh * KV + e] : 0.0;
    __syncthreads();
    for (int64_t c = NC - 1; c >= 0; c--) {
        int64_t t0 = c * DRB_CHUNK, t1 = t0 + DRB_CHUNK < T ? t0 + DRB_CHUNK : T;
        for (int64_t e = tid; e < KV; e += nt) wk.run[e] = wk.ck[c * KV + e];
        __syncthreads();
        for (int64_t t = t0; t < t1; t++) {
            float *nx = wk.run + (t - t0 + 1) * KV;
            for (int64_t e = tid; e < KV; e += nt) nx[e] = nx[e - KV];
            __syncthreads();
            drb_step(a, wk, b, h, t, nx, red);
        }
        for (int64_t t = t1 - 1; t >= t0; t--)
            drb_back_step(a, wk, b, h, t, wk.run + (t - t0) * KV, wk.run + (t - t0 + 1) * KV, red);
    }
    if (a.dsi)
        for (int64_t e = tid; e < KV; e += nt) a.dsi[bh * KV + e] += (float)wk.dS[e];
}

extern "C" nnt_status cuda_delta_rule_backward(void *ctx, const nnt_tensor *q, const nnt_tensor *k,
                                               const nnt_tensor *v, const nnt_tensor *g, const nnt_tensor *beta,
                                               const uint8_t *token_valid, const nnt_tensor *state_in, int l2norm,
                                               float scale, const nnt_tensor *do_, const nnt_tensor *dstate_out,
                                               nnt_tensor *dstates, nnt_tensor *dq, nnt_tensor *dk, nnt_tensor *dv,
                                               nnt_tensor *dg, nnt_tensor *dbeta, nnt_tensor *dstate_in,
                                               nnt_error *err)
{
    static const char op[] = "delta_rule_backward";
    cuda_ctx *c = (cuda_ctx *)ctx;
    nnt_status st;
    if ((st = cuda_check(op, "q", q, NNT_F32, 4, err)) != NNT_OK) return st;
    if ((st = cuda_check(op, "v", v, NNT_F32, 4, err)) != NNT_OK) return st;
    int64_t B = q->shape[0], T = q->shape[1], H = q->shape[2], K = q->shape[3], V = v->shape[3];
    int64_t nk = B * T * H * K, nv = B * T * H * V, ns = B * H * K * V;
    const struct {
        const char *name;
        const nnt_tensor *t;
        int64_t n;
        int required;
    } want[] = {{"k (as q)", k, nk, 1},
                {"v [B, T, H, V]", v, nv, 1},
                {"g (as q)", g, nk, 1},
                {"beta [B, T, H]", beta, B * T * H, 1},
                {"state_in [B, H, K, V]", state_in, ns, 0},
                {"do_ (as v)", do_, nv, 0},
                {"dstate_out [B, H, K, V]", dstate_out, ns, 0},
                {"dstates [B, T, H, K, V]", dstates, ns * T, 0},
                {"dq (as q)", dq, nk, 0},
                {"dk (as k)", dk, nk, 0},
                {"dv (as v)", dv, nv, 0},
                {"dg (as g)", dg, nk, 0},
                {"dbeta (as beta)", dbeta, B * T * H, 0},
                {"dstate_in [B, H, K, V]", dstate_in, ns, 0}};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        if ((want[i].required || want[i].t) && (st = need(op, want[i].name, want[i].t, want[i].n, err)) != NNT_OK)
            return st;
    if (K > 1024 || V > 1024) return cuda_error(err, NNT_ERR_UNSUPPORTED, "cuda %s: head widths above 1024", op);
    if (!state_in) dstate_in = NULL; /* no state was read: it gets no gradient */
    if (B * H == 0 || (!dstates && !dq && !dk && !dv && !dg && !dbeta && !dstate_in)) return NNT_OK;
    if (B * H > INT_MAX)
        return cuda_error(err, NNT_ERR_UNSUPPORTED, "cuda %s: %lld (batch, head) pairs (at most %d)", op,
                          (long long)(B * H), INT_MAX);
    CUDA_CHECK(cudaSetDevice(c->device));
    int64_t NC = (T + DRB_CHUNK - 1) / DRB_CHUNK, nck = NC > 0 ? NC : 1;
    size_t per = drb_bytes(K, V, nck);
    if (per > SIZE_MAX / (size_t)(B * H))
        return cuda_error(err, NNT_ERR_OUT_OF_MEMORY, "cuda %s: the states of %lld heads do not fit in memory", op,
                          (long long)(B * H));
    void *work;
    if ((st = cuda_scratch(c, per * (size_t)(B * H), &work, err)) != NNT_OK) return st;
    void *dvalid = NULL;
    if (token_valid && B * T > 0) {
        size_t vb = (size_t)(B * T);
        if ((st = cuda_stage_begin(c, cuda_stage_size(vb), err)) != NNT_OK) return st;
        if ((st = cuda_stage_put(c, token_valid, vb, &dvalid, err)) != NNT_OK) return st;
    }
    drb_args a;
    a.T = T, a.H = H, a.K = K, a.V = V;
    a.q = (const float *)q->data, a.k = (const float *)k->data, a.v = (const float *)v->data;
    a.g = (const float *)g->data, a.beta = (const float *)beta->data;
    a.si = state_in ? (const float *)state_in->data : NULL;
    a.dout = do_ ? (const float *)do_->data : NULL;
    a.dso = dstate_out ? (const float *)dstate_out->data : NULL;
    a.valid = (const uint8_t *)dvalid;
    a.l2norm = l2norm, a.scale = scale;
    a.dst = dstates ? (float *)dstates->data : NULL;
    a.dq = dq ? (float *)dq->data : NULL, a.dk = dk ? (float *)dk->data : NULL, a.dv = dv ? (float *)dv->data : NULL;
    a.dg = dg ? (float *)dg->data : NULL, a.dbeta = dbeta ? (float *)dbeta->data : NULL;
    a.dsi = dstate_in ? (float *)dstate_in->data : NULL;
    a.work = (unsigned char *)work, a.work_bytes = per, a.nck = nck;
    k_delta_rule_bwd<<<(unsigned int)(B * H), DRB_THREADS, 0, c->stream>>>(a);
    return cuda_done(c, op, err);
}

/* ---- rms_norm_gated_backward ---- */

/* x, gate, dy, dx, dgate [M, D]; w [D] F32/BF16/F16 as stored (dx or dgate may be NULL). One
 * warp per row, in double as the cpu: r = 1 / sqrt(mean(x^2) + eps), s = sigmoid(gate), u = w s
 * dy; dgate += dy w x r s (1 - s) and dx += r u - x r^3 mean(u x). Zhang & Sennrich 2019. */
__global__ void k_rms_norm_gated_bwd(const float *x, const void *w, int wdt, const float *gate, float eps,
                                     const float *dy, float *dx, float *dgate, int64_t M, int64_t D)
{
    int lane = threadIdx.x & 31;
    ROW_LOOP(m, M)
    {
        const float *xr = x + m * D, *gr = gate + m * D, *dr = dy + m * D;
        double ss = 0.0, ux = 0.0;
        for (int64_t d = lane; d < D; d += 32) ss += (double)xr[d] * xr[d];
        ss = warp_sum_d(ss);
        double r = 1.0 / sqrt(ss / (double)D + eps);
        for (int64_t d = lane; d < D; d += 32) {
            double s = sigm_d(gr[d]), wd = load_any(w, wdt, d);
            ux += wd * s * dr[d] * xr[d];
            if (dgate) dgate[m * D + d] += (float)(dr[d] * wd * xr[d] * r * s * (1.0 - s));
        }
        ux = warp_sum_d(ux);
        if (dx)
            for (int64_t d = lane; d < D; d += 32) {
                double u = load_any(w, wdt, d) * sigm_d(gr[d]) * dr[d];
                dx[m * D + d] += (float)(r * u - xr[d] * r * r * r * ux / (double)D);
            }
    }
}

extern "C" nnt_status cuda_rms_norm_gated_backward(void *ctx, const nnt_tensor *x, const nnt_tensor *w,
                                                   const nnt_tensor *gate, float eps, const nnt_tensor *dy,
                                                   nnt_tensor *dx, nnt_tensor *dgate, nnt_error *err)
{
    static const char op[] = "rms_norm_gated_backward";
    cuda_ctx *c = (cuda_ctx *)ctx;
    nnt_status st;
    if ((st = cuda_check(op, "x", x, NNT_F32, 0, err)) != NNT_OK) return st;
    int64_t D = w ? nnt_tensor_numel(w) : 0, n = nnt_tensor_numel(x);
    if (!D || n % D) return cuda_error(err, NNT_ERR_SHAPE, "cuda %s: x [M, D] and w [D] disagree", op);
    if ((st = cuda_check_float_weight(op, "w", w, err)) != NNT_OK) return st;
    if ((st = need(op, "gate (as x)", gate, n, err)) != NNT_OK || (st = need(op, "dy (as x)", dy, n, err)) != NNT_OK)
        return st;
    if (dx && (st = need(op, "dx (as x)", dx, n, err)) != NNT_OK) return st;
    if (dgate && (st = need(op, "dgate (as gate)", dgate, n, err)) != NNT_OK) return st;
    int64_t M = n / D;
    if (M == 0 || (!dx && !dgate)) return NNT_OK;
    CUDA_CHECK(cudaSetDevice(c->device));
    k_rms_norm_gated_bwd<<<grid_rows(M), CUDA_THREADS, 0, c->stream>>>(
        (const float *)x->data, w->data, (int)w->dtype, (const float *)gate->data, eps, (const float *)dy->data,
        dx ? (float *)dx->data : NULL, dgate ? (float *)dgate->data : NULL, M, D);
    return cuda_done(c, op, err);
}
