/* cuda_backward_hyper.cu - the cuda backend's backward ops of DeepSeek-V4's kernels
 * (cuda_hyper.cu; nnt_backend.h, "backward of hyper-connections and compressors"): the
 * hyper-connection weights through their sigmoids, row softmax and unrolled Sinkhorn passes,
 * the stream mix, the readout collapse, and token compression. Each recomputes what it needs of
 * the forward in double from the forward's inputs, as kernels/cpu/cpu_backward_hyper.c does;
 * gradients are float32 and added into. The indexer's scores have no backward (they only choose).
 *
 * The hyper-connection backward runs one block per token: the normaliser and the mixing logits
 * (warp per logit), the collapsed stream's share (block sums per stream), then one thread takes
 * the Sinkhorn passes back in shared memory - each pass's input recomputed from the first
 * (passes^2 / 2 small n x n passes, so nothing of size passes x n^2 is kept anywhere) - and the
 * block takes the logits' gradient back through fn^T and the RMS normaliser, recomputing fn^T dm
 * per element in each of its two sweeps rather than keeping a vector of n H doubles. */
#include <limits.h>

#include "cuda_device.cuh"

#define MAX_STREAMS 16
#define HB_THREADS 256
#define HB_MAX_OUTS ((2 + MAX_STREAMS) * MAX_STREAMS)

static nnt_status need(const char *op, const char *arg, const nnt_tensor *t, int64_t n, nnt_error *err)
{
    if (!t || !t->data) return cuda_error(err, NNT_ERR_INVALID_ARGUMENT, "cuda %s: %s is missing", op, arg);
    if (t->dtype != NNT_F32 || nnt_tensor_numel(t) != n)
        return cuda_error(err, NNT_ERR_SHAPE, "cuda %s: %s must be F32 with %lld entries (has dtype %d, %lld)", op, arg,
                          (long long)n, (int)t->dtype, (long long)nnt_tensor_numel(t));
    return NNT_OK;
}

/* The shapes shared by hyper_connection's and hyper_head's backward: x [M, n, H], fn [outs, n H],
 * base [outs], scale (at least `scales` entries), dx as x. */
static nnt_status check_weights(const char *op, const nnt_tensor *x, const nnt_tensor *fn, const nnt_tensor *base,
                                const nnt_tensor *scale, int64_t outs, int scales, const nnt_tensor *dx, nnt_error *err)
{
    nnt_status st;
    if ((st = cuda_check(op, "x", x, NNT_F32, 3, err)) != NNT_OK) return st;
    int64_t n = x->shape[1], H = x->shape[2];
    if (n > MAX_STREAMS)
        return cuda_error(err, NNT_ERR_SHAPE, "cuda %s: %lld streams (at most %d)", op, (long long)n, MAX_STREAMS);
    if ((st = need(op, "fn", fn, outs * n * H, err)) != NNT_OK) return st;
    if ((st = need(op, "base", base, outs, err)) != NNT_OK) return st;
    if (!scale || !scale->data || scale->dtype != NNT_F32 || nnt_tensor_numel(scale) < scales)
        return cuda_error(err, NNT_ERR_SHAPE, "cuda %s: scale must be F32 with %d entries", op, scales);
    return dx ? need(op, "dx (as x)", dx, nnt_tensor_numel(x), err) : NNT_OK;
}

/* The Sinkhorn passes of comb: 2 iters - 1 (none for iters 0); pass q normalises columns when q
 * is even and rows when q is odd (the forward's order: columns first, then rows and columns). */
__host__ __device__ static inline int hb_passes(int iters)
{
    return iters > 0 ? 2 * iters - 1 : 0;
}

/* One pass in place on C [n, n]: divide every column (cols 1) or row by its sum + eps. */
__device__ static void hb_norm_pass(double *C, int n, int cols, double eps)
{
    for (int a = 0; a < n; a++) {
        double s = 0.0;
        for (int b = 0; b < n; b++) s += cols ? C[b * n + a] : C[a * n + b];
        for (int b = 0; b < n; b++) {
            if (cols) C[b * n + a] /= s + eps;
            else C[a * n + b] /= s + eps;
        }
    }
}

/* The reverse of hb_norm_pass from its input c: d (its output's gradient) becomes its input's,
 * with y = c / (s + eps) per line: dc = (dy - sum dy y) / (s + eps). */
__device__ static void hb_norm_pass_back(const double *c, double *d, int n, int cols, double eps)
{
    for (int a = 0; a < n; a++) {
        double s = 0.0, dot = 0.0;
        for (int b = 0; b < n; b++) s += cols ? c[b * n + a] : c[a * n + b];
        for (int b = 0; b < n; b++) {
            int i = cols ? b * n + a : a * n + b;
            dot += d[i] * c[i] / (s + eps);
        }
        for (int b = 0; b < n; b++) {
            int i = cols ? b * n + a : a * n + b;
            d[i] = (d[i] - dot) / (s + eps);
        }
    }
}

__device__ __forceinline__ double sigm_d(double x)
{
    return 1.0 / (1.0 + exp(-x));
}

/* One block per token. x, dx [M, n, H]; fn [outs, n H]; base [outs]; sc [3] (head: [1]);
 * dpost [M, n], dcomb [M, n, n], dcoll [M, H] (each may be NULL; hyper_head: only dcoll, its
 * dy). With v = x r and m = fn . v as the forward computes them: dcoll gives dx_j += pre_j dcoll
 * and dm_j = (dcoll . x_j) sigmoid'; dpost gives dm_{n+j} = 2 dpost_j sigmoid'; dcomb goes back
 * through the Sinkhorn passes and the row softmax (one thread); then dv = fn^T dm and dx += r dv
 * - x r^3 (dv . x) / (n H). Xie et al. 2026 (mHC); Adams and Zemel 2011 (unrolled Sinkhorn). */
__global__ void __launch_bounds__(HB_THREADS)
    k_hyper_bwd(const float *x, const float *fn, const float *base, const float *sc, float rms_eps, double hc_eps,
                int iters, int outs, const float *dpost, const float *dcomb, const float *dcoll, float *dx, int n,
                int64_t H)
{
    __shared__ double m[HB_MAX_OUTS], dm[HB_MAX_OUTS];
    __shared__ double pm[MAX_STREAMS * MAX_STREAMS], cur[MAX_STREAMS * MAX_STREAMS], dd[MAX_STREAMS * MAX_STREAMS];
    __shared__ double red[32];
    const int64_t tok = blockIdx.x, nH = (int64_t)n * H;
    const int tid = threadIdx.x, lane = tid & 31, wid = tid >> 5, nw = (int)(blockDim.x >> 5);
    const float *xm = x + tok * nH;
    float *dxm = dx + tok * nH;
    double ss = 0.0;
    for (int64_t i = tid; i < nH; i += blockDim.x) ss += (double)xm[i] * xm[i];
    ss = block_sum_d(ss, red);
    const float rf = 1.0f / sqrtf((float)(ss / (double)nH) + rms_eps); /* as the forward */
    const double r = rf;
    for (int o = wid; o < outs; o += nw) {
        const float *row = fn + (int64_t)o * nH;
        double acc = 0.0;
        for (int64_t i = lane; i < nH; i += 32) acc += (double)row[i] * (xm[i] * rf);
        acc = warp_sum_d(acc);
        if (lane == 0) {
            m[o] = acc;
            dm[o] = 0.0;
        }
    }
    __syncthreads();
    if (dcoll) {
        const float *gc = dcoll + tok * H;
        for (int j = 0; j < n; j++) {
            double s = sigm_d(m[j] * sc[0] + base[j]), pre = s + hc_eps, part = 0.0;
            for (int64_t h = tid; h < H; h += blockDim.x) {
                part += (double)gc[h] * xm[j * H + h];
                dxm[j * H + h] += (float)(pre * gc[h]);
            }
            double dpre = block_sum_d(part, red);
            if (tid == 0) dm[j] = dpre * s * (1.0 - s) * sc[0];
        }
    }
    if (dpost && tid < n) {
        double s = sigm_d(m[n + tid] * sc[1] + base[n + tid]);
        dm[n + tid] = dpost[tok * n + tid] * 2.0 * s * (1.0 - s) * sc[1];
    }
    if (dcomb && tid == 0) {
        const int nn = n * n, P = hb_passes(iters);
        for (int j = 0; j < n; j++) { /* the row softmax of the comb logits */
            double mx = -INFINITY, sum = 0.0;
            for (int k = 0; k < n; k++) {
                double z = m[2 * n + j * n + k] * sc[2] + base[2 * n + j * n + k];
                pm[j * n + k] = z;
                mx = z > mx ? z : mx;
            }
            for (int k = 0; k < n; k++) sum += (pm[j * n + k] = exp(pm[j * n + k] - mx));
            for (int k = 0; k < n; k++) pm[j * n + k] /= sum;
        }
        for (int i = 0; i < nn; i++) dd[i] = dcomb[tok * nn + i];
        for (int q = P - 1; q >= 0; q--) {
            /* the input of pass q: p + eps through passes 0 .. q - 1 */
            for (int i = 0; i < nn; i++) cur[i] = pm[i] + hc_eps;
            for (int u = 0; u < q; u++) hb_norm_pass(cur, n, u % 2 == 0, hc_eps);
            hb_norm_pass_back(cur, dd, n, q % 2 == 0, hc_eps);
        }
        for (int j = 0; j < n; j++) { /* through the row softmax: dz = p (dC - sum p dC) */
            double dot = 0.0;
            for (int k = 0; k < n; k++) dot += pm[j * n + k] * dd[j * n + k];
            for (int k = 0; k < n; k++) dm[2 * n + j * n + k] = pm[j * n + k] * (dd[j * n + k] - dot) * sc[2];
        }
    }
    __syncthreads();
    /* dm -> dv = fn^T dm (recomputed per element in both sweeps) -> dx through v = x r */
    double part = 0.0;
    for (int64_t i = tid; i < nH; i += blockDim.x) {
        double dv = 0.0;
        for (int o = 0; o < outs; o++)
            if (dm[o] != 0.0) dv += dm[o] * fn[(int64_t)o * nH + i];
        part += dv * xm[i];
    }
    const double dvx = block_sum_d(part, red), r3 = r * r * r / (double)nH;
    for (int64_t i = tid; i < nH; i += blockDim.x) {
        double dv = 0.0;
        for (int o = 0; o < outs; o++)
            if (dm[o] != 0.0) dv += dm[o] * fn[(int64_t)o * nH + i];
        dxm[i] += (float)(r * dv - xm[i] * r3 * dvx);
    }
}

static nnt_status launch_hyper_bwd(cuda_ctx *c, const char *op, int64_t M, const nnt_tensor *x, const nnt_tensor *fn,
                                   const nnt_tensor *base, const nnt_tensor *scale, float rms_eps, float hc_eps,
                                   int iters, int outs, const nnt_tensor *dpost, const nnt_tensor *dcomb,
                                   const nnt_tensor *dcoll, nnt_tensor *dx, nnt_error *err)
{
    if (M == 0) return NNT_OK;
    if (M > INT_MAX) return cuda_error(err, NNT_ERR_UNSUPPORTED, "cuda %s: more than 2^31 tokens", op);
    CUDA_CHECK(cudaSetDevice(c->device));
    k_hyper_bwd<<<(unsigned int)M, HB_THREADS, 0, c->stream>>>(
        (const float *)x->data, (const float *)fn->data, (const float *)base->data, (const float *)scale->data,
        rms_eps, (double)hc_eps, iters, outs, dpost ? (const float *)dpost->data : NULL,
        dcomb ? (const float *)dcomb->data : NULL, dcoll ? (const float *)dcoll->data : NULL, (float *)dx->data,
        (int)x->shape[1], x->shape[2]);
    return cuda_done(c, op, err);
}

extern "C" nnt_status cuda_hyper_connection_backward(void *ctx, const nnt_tensor *x, const nnt_tensor *fn,
                                                     const nnt_tensor *base, const nnt_tensor *scale, float rms_eps,
                                                     float hc_eps, int iters, const nnt_tensor *dpost,
                                                     const nnt_tensor *dcomb, const nnt_tensor *dcollapsed,
                                                     nnt_tensor *dx, nnt_error *err)
{
    static const char op[] = "hyper_connection_backward";
    nnt_status st;
    if ((st = cuda_check(op, "x", x, NNT_F32, 3, err)) != NNT_OK) return st;
    int64_t M = x->shape[0], n = x->shape[1], H = x->shape[2];
    if ((st = check_weights(op, x, fn, base, scale, (2 + n) * n, 3, dx, err)) != NNT_OK) return st;
    if (dpost && (st = need(op, "dpost [M, n]", dpost, M * n, err)) != NNT_OK) return st;
    if (dcomb && (st = need(op, "dcomb [M, n, n]", dcomb, M * n * n, err)) != NNT_OK) return st;
    if (dcollapsed && (st = need(op, "dcollapsed [M, H]", dcollapsed, M * H, err)) != NNT_OK) return st;
    if (iters < 0) return cuda_error(err, NNT_ERR_INVALID_ARGUMENT, "cuda %s: %d Sinkhorn iterations", op, iters);
    if (!dx || (!dpost && !dcomb && !dcollapsed) || n == 0) return NNT_OK;
    return launch_hyper_bwd((cuda_ctx *)ctx, op, M, x, fn, base, scale, rms_eps, hc_eps, iters, (int)((2 + n) * n),
                            dpost, dcomb, dcollapsed, dx, err);
}

extern "C" nnt_status cuda_hyper_head_backward(void *ctx, const nnt_tensor *x, const nnt_tensor *fn,
                                               const nnt_tensor *base, const nnt_tensor *scale, float rms_eps,
                                               float hc_eps, const nnt_tensor *dy, nnt_tensor *dx, nnt_error *err)
{
    static const char op[] = "hyper_head_backward";
    nnt_status st;
    if ((st = cuda_check(op, "x", x, NNT_F32, 3, err)) != NNT_OK) return st;
    int64_t M = x->shape[0], n = x->shape[1], H = x->shape[2];
    if ((st = check_weights(op, x, fn, base, scale, n, 1, dx, err)) != NNT_OK) return st;
    if ((st = need(op, "dy [M, H]", dy, M * H, err)) != NNT_OK) return st;
    if (!dx || n == 0) return NNT_OK;
    return launch_hyper_bwd((cuda_ctx *)ctx, op, M, x, fn, base, scale, rms_eps, hc_eps, 0, (int)n, NULL, NULL, dy,
                            dx, err);
}

/* ---- hyper_mix_backward ---- */

/* x, dout, dx [M, n, H]; a, da [M, H]; post [M, n]; comb [M, n, n]. One thread per (m, h):
 * da[m, h] += sum_k post[m, k] dout[m, k, h]; dx[m, j, h] += sum_k comb[m, j, k] dout[m, k, h],
 * added one term at a time in order of k (the cpu's order). */
__global__ void k_hyper_mix_bwd_rows(const float *post, const float *comb, const float *g, float *dx, float *da,
                                     int64_t M, int64_t n, int64_t H)
{
    GRID_LOOP(i, M * H)
    {
        int64_t m = i / H, h = i % H;
        const float *gm = g + m * n * H + h;
        if (da) {
            float v = da[i];
            for (int64_t k = 0; k < n; k++) v += post[m * n + k] * gm[k * H];
            da[i] = v;
        }
        if (dx)
            for (int64_t j = 0; j < n; j++) {
                float *d = dx + (m * n + j) * H + h, v = *d;
                for (int64_t k = 0; k < n; k++) v += comb[(m * n + j) * n + k] * gm[k * H];
                *d = v;
            }
    }
}

/* One block per token m, one warp per dot product (double sums): for q < n (with dpost)
 * dpost[m, q] += dout[m, q] . a[m]; for q = n + j n + k (with dcomb) dcomb[m, j, k] +=
 * dout[m, k] . x[m, j]. */
__global__ void k_hyper_mix_bwd_dots(const float *x, const float *a, const float *g, float *dpost, float *dcomb,
                                     int64_t n, int64_t H)
{
    const int64_t m = blockIdx.x;
    const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nw = (int)(blockDim.x >> 5);
    for (int64_t q = wid; q < n + n * n; q += nw) {
        int is_post = q < n;
        if ((is_post && !dpost) || (!is_post && !dcomb)) continue;
        int64_t j = is_post ? 0 : (q - n) / n, k = is_post ? q : (q - n) % n;
        const float *gk = g + (m * n + k) * H, *other = is_post ? a + m * H : x + (m * n + j) * H;
        double acc = 0.0;
        for (int64_t h = lane; h < H; h += 32) acc += (double)gk[h] * other[h];
        acc = warp_sum_d(acc);
        if (lane == 0) {
            if (is_post) dpost[m * n + k] += (float)acc;
            else dcomb[(m * n + j) * n + k] += (float)acc;
        }
    }
}

extern "C" nnt_status cuda_hyper_mix_backward(void *ctx, const nnt_tensor *x, const nnt_tensor *a,
                                              const nnt_tensor *post, const nnt_tensor *comb, const nnt_tensor *dout,
                                              nnt_tensor *dx, nnt_tensor *da, nnt_tensor *dpost, nnt_tensor *dcomb,
                                              nnt_error *err)
{
    static const char op[] = "hyper_mix_backward";
    cuda_ctx *c = (cuda_ctx *)ctx;
    nnt_status st;
    if ((st = cuda_check(op, "x", x, NNT_F32, 3, err)) != NNT_OK) return st;
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
    if (M == 0 || n == 0) return NNT_OK;
    if (M > INT_MAX) return cuda_error(err, NNT_ERR_UNSUPPORTED, "cuda %s: more than 2^31 tokens", op);
    CUDA_CHECK(cudaSetDevice(c->device));
    if ((dx || da) && H > 0) {
        k_hyper_mix_bwd_rows<<<grid_for(M * H), CUDA_THREADS, 0, c->stream>>>(
            (const float *)post->data, (const float *)comb->data, (const float *)dout->data,
            dx ? (float *)dx->data : NULL, da ? (float *)da->data : NULL, M, n, H);
        CUDA_LAUNCHED();
    }
    if (dpost || dcomb)
        k_hyper_mix_bwd_dots<<<(unsigned int)M, CUDA_THREADS, 0, c->stream>>>(
            (const float *)x->data, (const float *)a->data, (const float *)dout->data,
            dpost ? (float *)dpost->data : NULL, dcomb ? (float *)dcomb->data : NULL, n, H);
    return cuda_done(c, op, err);
}

/* ---- compress_backward ---- */

/* kv, gate, dkv, dgate [B, T, c D]; ape [rate, c D] F32/BF16/F16 as stored; dout [B, C, D];
 * first, count [B]. One thread per (b, entry w, channel ch), as the cpu: the entry's slots are
 * window w's tokens through channel hi + ch (hi = D with overlap, else 0) and, with overlap past
 * the first window, window w - 1's through channel ch; p = softmax over the slots of gate + ape
 * (float32 logits, double exponentials and sums); dkv_i += p_i dout, dgate_i += p_i dout (kv_i
 * - out). No two entries share a (token, channel), so the threads never collide. */
__global__ void k_compress_bwd(const float *k, const float *g, const void *pe, int pdt, const float *go,
                               const int32_t *first, const int32_t *count, float *gk, float *gg, int64_t B, int64_t T,
                               int64_t C, int64_t D, int64_t rate, int overlap)
{
    const int64_t cD = overlap ? 2 * D : D, hi = overlap ? D : 0;
    GRID_LOOP(i, B * C * D)
    {
        int64_t ch = i % D, w = (i / D) % C, b = i / (C * D);
        if (w >= count[b]) continue;
        int prev = overlap && w > 0;
        int64_t t_prev = first[b] + (w - 1) * rate, t_this = first[b] + w * rate;
        float mx = -INFINITY;
        double sum = 0.0, out = 0.0, gw = go[(b * C + w) * D + ch];
        for (int part = prev ? 0 : 1; part < 2; part++)
            for (int64_t s = 0; s < rate; s++) {
                int64_t at = part ? (b * T + t_this + s) * cD + hi + ch : (b * T + t_prev + s) * cD + ch;
                float z = g[at] + load_any(pe, pdt, part ? s * cD + hi + ch : s * cD + ch);
                mx = z > mx ? z : mx;
            }
        for (int pass = 0; pass < 2; pass++) { /* 0: the sums; 1: the gradients */
            for (int part = prev ? 0 : 1; part < 2; part++)
                for (int64_t s = 0; s < rate; s++) {
                    int64_t at = part ? (b * T + t_this + s) * cD + hi + ch : (b * T + t_prev + s) * cD + ch;
                    float z = g[at] + load_any(pe, pdt, part ? s * cD + hi + ch : s * cD + ch);
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

extern "C" nnt_status cuda_compress_backward(void *ctx, const nnt_tensor *kv, const nnt_tensor *gate,
                                             const nnt_tensor *ape, int rate, int overlap, const int32_t *first,
                                             const int32_t *count, const nnt_tensor *dout, nnt_tensor *dkv,
                                             nnt_tensor *dgate, nnt_error *err)
{
    static const char op[] = "compress_backward";
    cuda_ctx *c = (cuda_ctx *)ctx;
    nnt_status st;
    if ((st = cuda_check(op, "kv", kv, NNT_F32, 3, err)) != NNT_OK) return st;
    if ((st = cuda_check(op, "dout", dout, NNT_F32, 3, err)) != NNT_OK) return st;
    int64_t B = kv->shape[0], T = kv->shape[1], cD = kv->shape[2], coff = overlap ? 2 : 1, D = cD / coff;
    int64_t C = dout->shape[1];
    if (rate < 1 || cD != coff * D || dout->shape[0] != B || dout->shape[2] != D || !ape || !ape->data ||
        nnt_tensor_numel(ape) != (int64_t)rate * cD)
        return cuda_error(err, NNT_ERR_SHAPE, "cuda %s: kv [B, T, %lld], ape [%d, %lld] and dout [B, C, %lld] disagree",
                          op, (long long)cD, rate, (long long)cD, (long long)D);
    if ((st = cuda_check_float_weight(op, "ape", ape, err)) != NNT_OK) return st;
    if ((st = need(op, "gate (as kv)", gate, B * T * cD, err)) != NNT_OK) return st;
    if ((dkv && (st = need(op, "dkv (as kv)", dkv, B * T * cD, err)) != NNT_OK) ||
        (dgate && (st = need(op, "dgate (as gate)", dgate, B * T * cD, err)) != NNT_OK))
        return st;
    if (B > 0 && (!first || !count))
        return cuda_error(err, NNT_ERR_INVALID_ARGUMENT, "cuda %s: first or count is missing", op);
    for (int64_t b = 0; b < B; b++)
        if (count[b] < 0 || count[b] > C || first[b] < 0 || first[b] + (int64_t)count[b] * rate > T)
            return cuda_error(err, NNT_ERR_INVALID_ARGUMENT, "cuda %s: row %lld's %d entries from token %d do not fit",
                              op, (long long)b, count[b], first[b]);
    if ((!dkv && !dgate) || B * C * D == 0) return NNT_OK;
    CUDA_CHECK(cudaSetDevice(c->device));
    size_t bb = (size_t)B * sizeof(int32_t);
    void *dfirst, *dcount;
    if ((st = cuda_stage_begin(c, 2 * cuda_stage_size(bb), err)) != NNT_OK) return st;
    if ((st = cuda_stage_put(c, first, bb, &dfirst, err)) != NNT_OK) return st;
    if ((st = cuda_stage_put(c, count, bb, &dcount, err)) != NNT_OK) return st;
    k_compress_bwd<<<grid_for(B * C * D), CUDA_THREADS, 0, c->stream>>>(
        (const float *)kv->data, (const float *)gate->data, ape->data, (int)ape->dtype, (const float *)dout->data,
        (const int32_t *)dfirst, (const int32_t *)dcount, dkv ? (float *)dkv->data : NULL,
        dgate ? (float *)dgate->data : NULL, B, T, C, D, (int64_t)rate, overlap);
    return cuda_done(c, op, err);
}
