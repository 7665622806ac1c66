/* cuda_recurrent.cu - the cuda backend's kernels for recurrent mixers: the causal depthwise
 * convolution with carried state, Kimi's forget gate, sigmoid, the gated delta rule (a
 * sequential scan per (row, head, 32 value columns) with the state tile in shared memory), the
 * gated RMSNorm, and the column copies and row masking their forward needs.
 *
 * Outputs flagged NNT_TENSOR_BF16_VALUES take the cpu backend's roundings (cpu_recurrent.c): the
 * convolution R(act(R(conv))) (its carried state is a copy of inputs, never rounded); sigmoid,
 * the delta rule's output and the gated RMSNorm round their results (the delta rule's states
 * stay float32); the forget gate never rounds (float32 in transformers); column copies and row
 * zeroing only move values. */
#include <stdlib.h>

#include "cuda_device.cuh"

/* x [B, T, C], w [C, W] F32/BF16/F16 as stored, state_in [B, W-1, C] or NULL -> y [B, T, C];
 * y[b, t, c] = act(sum_j w[c, j] x[b, t - (W - 1) + j, c]), earlier inputs from state_in. r16:
 * the sum rounded to bfloat16 before the activation, and the result after it. */
__global__ void k_conv1d(const float *x, const void *w, int wdt, const float *si, int act, float *y, int64_t B,
                         int64_t T, int64_t C, int64_t W, int r16)
{
    GRID_LOOP(i, B * T * C)
    {
        int64_t ch = i % C, r = i / C;
        int64_t t = r % T, b = r / T;
        float acc = 0.0f;
        for (int64_t j = 0; j < W; j++) {
            int64_t src = t - (W - 1) + j; /* < 0: from the state */
            float in = src >= 0 ? x[(b * T + src) * C + ch] : (si ? si[(b * (W - 1) + (W - 1) + src) * C + ch] : 0.0f);
            acc += load_any(w, wdt, ch * W + j) * in;
        }
        acc = r16_if(r16, acc);
        if (act == 1) acc = acc / (1.0f + expf(-acc));
        y[i] = r16_if(r16, acc);
    }
}

/* state_out [B, W-1, C]: the last W - 1 inputs, taken from x or, before it, from state_in */
__global__ void k_conv_state(const float *x, const float *si, float *so, int64_t B, int64_t T, int64_t C, int64_t W)
{
    GRID_LOOP(i, B * (W - 1) * C)
    {
        int64_t ch = i % C, r = i / C;
        int64_t j = r % (W - 1), b = r / (W - 1);
        int64_t src = T - (W - 1) + j;
        so[i] = src >= 0 ? x[(b * T + src) * C + ch] : (si ? si[(b * (W - 1) + (W - 1) + src) * C + ch] : 0.0f);
    }
}

static int overlaps(const void *a, size_t an, const void *b, size_t bn)
{
    const char *x = (const char *)a, *y = (const char *)b;
    return an && bn && x < y + bn && y < x + an;
}

extern "C" nnt_status cuda_conv1d_causal(void *ctx, const nnt_tensor *x, const nnt_tensor *w,
                                         const nnt_tensor *state_in, int act, nnt_tensor *y, nnt_tensor *state_out,
                                         nnt_error *err)
{
    cuda_ctx *c = (cuda_ctx *)ctx;
    nnt_status st;
    if ((st = cuda_check("conv1d_causal", "x", x, NNT_F32, 3, err)) != NNT_OK) return st;
    if ((st = cuda_check_float_weight("conv1d_causal", "w", w, err)) != NNT_OK) return st;
    if ((st = cuda_check("conv1d_causal", "y", y, NNT_F32, 3, err)) != NNT_OK) return st;
    int64_t B = x->shape[0], T = x->shape[1], C = x->shape[2], W = w->shape[w->ndim - 1];
    if (W < 1 || nnt_tensor_numel(w) != C * W || nnt_tensor_numel(y) != B * T * C)
        return cuda_error(err, NNT_ERR_SHAPE, "cuda conv1d_causal: w must hold [%lld, W] and y match x", (long long)C);
    if ((state_in && nnt_tensor_numel(state_in) != B * (W - 1) * C) ||
        (state_out && nnt_tensor_numel(state_out) != B * (W - 1) * C))
        return cuda_error(err, NNT_ERR_SHAPE, "cuda conv1d_causal: states must be [B, W - 1, C]");
    if ((state_in && state_in->dtype != NNT_F32) || (state_out && state_out->dtype != NNT_F32))
        return cuda_error(err, NNT_ERR_SHAPE, "cuda conv1d_causal: states must be F32");
    if (B * C == 0) return NNT_OK;
    CUDA_CHECK(cudaSetDevice(c->device));
    const float *si = state_in ? (const float *)state_in->data : NULL;
    size_t state_bytes = (size_t)(B * (W - 1) * C) * sizeof(float);
    if (si && state_out && overlaps(si, state_bytes, state_out->data, state_bytes)) {
        /* the state is updated in place: read the old one from a copy */
        void *tmp;
        if ((st = cuda_scratch(c, state_bytes, &tmp, err)) != NNT_OK) return st;
        CUDA_CHECK(cudaMemcpyAsync(tmp, si, state_bytes, cudaMemcpyDeviceToDevice, c->stream));
        si = (const float *)tmp;
    }
    if (T > 0)
        k_conv1d<<<grid_for(B * T * C), CUDA_THREADS, 0, c->stream>>>((const float *)x->data, w->data, (int)w->dtype, si,
                                                                      act, (float *)y->data, B, T, C, W, cuda_bf16(y));
    if (state_out && W > 1)
        k_conv_state<<<grid_for(B * (W - 1) * C), CUDA_THREADS, 0, c->stream>>>((const float *)x->data, si,
                                                                                (float *)state_out->data, B, T, C, W);
    return cuda_done(c, "conv1d_causal", err);
}

/* a [M, P], dt_bias [P], a_log [H] (F32/BF16/F16 as stored), P = H K -> g [M, P] =
 * -exp(a_log[p / K]) softplus(a + dt_bias), softplus(x) = x above 20; float32 whatever g's flags */
__global__ void k_kda_gate(const float *a, const void *dt, int dtt, const void *al, int alt, float *g, int64_t M,
                           int64_t P, int64_t K)
{
    GRID_LOOP(i, M * P)
    {
        int64_t p = i % P;
        float x = a[i] + load_any(dt, dtt, p);
        float sp = x > 20.0f ? x : logf(1.0f + expf(x));
        g[i] = -expf(load_any(al, alt, p / K)) * sp;
    }
}

extern "C" nnt_status cuda_kda_gate(void *ctx, const nnt_tensor *a, const nnt_tensor *dt_bias,
                                    const nnt_tensor *a_log, nnt_tensor *g, nnt_error *err)
{
    cuda_ctx *c = (cuda_ctx *)ctx;
    nnt_status st;
    if ((st = cuda_check_float_weight("kda_gate", "dt_bias", dt_bias, err)) != NNT_OK) return st;
    if ((st = cuda_check_float_weight("kda_gate", "a_log", a_log, err)) != NNT_OK) return st;
    int64_t P = nnt_tensor_numel(dt_bias), H = nnt_tensor_numel(a_log);
    int64_t M = P ? nnt_tensor_numel(a) / P : 0;
    if (a->dtype != NNT_F32 || g->dtype != NNT_F32 || !P || !H || P % H || nnt_tensor_numel(a) != M * P ||
        nnt_tensor_numel(g) != M * P)
        return cuda_error(err, NNT_ERR_SHAPE, "cuda kda_gate: a, g [M, H*K], dt_bias [H*K], a_log [H] disagree");
    if (M == 0) return NNT_OK;
    CUDA_CHECK(cudaSetDevice(c->device));
    k_kda_gate<<<grid_for(M * P), CUDA_THREADS, 0, c->stream>>>((const float *)a->data, dt_bias->data,
                                                                (int)dt_bias->dtype, a_log->data, (int)a_log->dtype,
                                                                (float *)g->data, M, P, P / H);
    return cuda_done(c, "kda_gate", err);
}

__global__ void k_sigmoid(const float *x, float *y, int64_t n, int r16)
{
    GRID_LOOP(i, n) y[i] = r16_if(r16, 1.0f / (1.0f + expf(-x[i])));
}

extern "C" nnt_status cuda_sigmoid(void *ctx, const nnt_tensor *x, nnt_tensor *y, nnt_error *err)
{
    cuda_ctx *c = (cuda_ctx *)ctx;
    int64_t n = nnt_tensor_numel(x);
    if (x->dtype != NNT_F32 || y->dtype != NNT_F32 || nnt_tensor_numel(y) != n)
        return cuda_error(err, NNT_ERR_SHAPE, "cuda sigmoid: x and y must be F32 of equal size");
    if (n == 0) return NNT_OK;
    CUDA_CHECK(cudaSetDevice(c->device));
    k_sigmoid<<<grid_for(n), CUDA_THREADS, 0, c->stream>>>((const float *)x->data, (float *)y->data, n, cuda_bf16(y));
    return cuda_done(c, "sigmoid", err);
}

#define DR_COLS 32 /* value columns per block: one warp, one column per lane */

/* The gated delta rule. q, k, g [B, T, H, K]; v [B, T, H, V]; beta [B, T, H]; valid [B, T] or
 * NULL; s_in [B, H, K, V] or NULL -> o [B, T, H, V] (rounded to bfloat16 when r16), s_out
 * [B, H, K, V] or NULL, states [B, T, H, K, V] or NULL (float32 always). Grid (B H,
 * ceil(V / 32)), one warp per block; lane l owns value column j = 32 blockIdx.y + l of the state,
 * kept in shared memory S [K, 32] next to the token's normalised q, k and decays [K] each.
 * Columns never mix, so a lane runs the recurrence of its column alone, token by token, in the
 * cpu backend's order of operations:
 *   S *= exp(g_t);  u = beta_t (v_t - S^T k_t);  S += k_t u^T;  o_t = S^T q_t. */
__global__ void k_delta_rule(const float *q, const float *k, const float *v, const float *g, const float *beta,
                             const uint8_t *valid, const float *s_in, int l2norm, float scale, float *o, float *s_out,
                             float *states, int64_t B, int64_t T, int64_t H, int64_t K, int64_t V, int r16)
{
    extern __shared__ float sm[];
    float *qn = sm, *kn = sm + K, *dec = sm + 2 * K, *S = sm + 3 * K;
    int64_t bh = blockIdx.x, b = bh / H, h = bh % H;
    int lane = threadIdx.x;
    int64_t j = (int64_t)blockIdx.y * DR_COLS + lane;
    bool col = j < V;
    for (int64_t i = 0; i < K; i++) S[i * DR_COLS + lane] = (col && s_in) ? s_in[(bh * K + i) * V + j] : 0.0f;
    for (int64_t t = 0; t < T; t++) {
        int64_t bt = b * T + t, base = bt * H + h;
        if (valid && !valid[bt]) { /* a padding token: the state stays, the output is zero */
            if (col) {
                o[base * V + j] = 0.0f;
                if (states)
                    for (int64_t i = 0; i < K; i++) states[(base * K + i) * V + j] = S[i * DR_COLS + lane];
            }
            continue;
        }
        __syncwarp(); /* every lane is done reading the previous token's q, k and decays */
        double sq = 0.0, sk = 0.0;
        for (int64_t i = lane; i < K; i += DR_COLS) {
            float qa = q[base * K + i], ka = k[base * K + i];
            qn[i] = qa;
            kn[i] = ka;
            dec[i] = expf(g[base * K + i]);
            sq += (double)qa * qa;
            sk += (double)ka * ka;
        }
        if (l2norm) {
            sq = warp_sum_d(sq);
            sk = warp_sum_d(sk);
            float iq = 1.0f / sqrtf((float)sq + 1e-6f), ik = 1.0f / sqrtf((float)sk + 1e-6f);
            for (int64_t i = lane; i < K; i += DR_COLS) {
                qn[i] = qn[i] * iq;
                kn[i] = kn[i] * ik;
            }
        }
        for (int64_t i = lane; i < K; i += DR_COLS) qn[i] *= scale;
        __syncwarp();
        if (col) {
            float bt_ = beta[base];
            float u = 0.0f;
            for (int64_t i = 0; i < K; i++) {
                float s = S[i * DR_COLS + lane] * dec[i];
                S[i * DR_COLS + lane] = s;
                u += s * kn[i];
            }
            u = bt_ * (v[base * V + j] - u);
            float acc = 0.0f;
            for (int64_t i = 0; i < K; i++) {
                float s = S[i * DR_COLS + lane] + kn[i] * u;
                S[i * DR_COLS + lane] = s;
                acc += s * qn[i];
                if (states) states[(base * K + i) * V + j] = s;
            }
            o[base * V + j] = r16_if(r16, acc);
        }
    }
    if (col && s_out)
        for (int64_t i = 0; i < K; i++) s_out[(bh * K + i) * V + j] = S[i * DR_COLS + lane];
}

extern "C" nnt_status cuda_delta_rule(void *ctx, const nnt_tensor *q, const nnt_tensor *k, const nnt_tensor *v,
                                      const nnt_tensor *g, const nnt_tensor *beta, const uint8_t *token_valid,
                                      const nnt_tensor *state_in, int l2norm, float scale, nnt_tensor *o,
                                      nnt_tensor *state_out, nnt_tensor *states, nnt_error *err)
{
    cuda_ctx *c = (cuda_ctx *)ctx;
    nnt_status st;
    if ((st = cuda_check("delta_rule", "q", q, NNT_F32, 4, err)) != NNT_OK) return st;
    if ((st = cuda_check("delta_rule", "v", v, NNT_F32, 4, err)) != NNT_OK) return st;
    if ((st = cuda_check("delta_rule", "k", k, NNT_F32, 0, err)) != NNT_OK) return st;
    if ((st = cuda_check("delta_rule", "g", g, NNT_F32, 0, err)) != NNT_OK) return st;
    if ((st = cuda_check("delta_rule", "beta", beta, NNT_F32, 0, err)) != NNT_OK) return st;
    if ((st = cuda_check("delta_rule", "o", o, NNT_F32, 0, err)) != NNT_OK) return st;
    int64_t B = q->shape[0], T = q->shape[1], H = q->shape[2], K = q->shape[3], V = v->shape[3];
    if (nnt_tensor_numel(k) != B * T * H * K || nnt_tensor_numel(g) != B * T * H * K ||
        nnt_tensor_numel(v) != B * T * H * V || nnt_tensor_numel(beta) != B * T * H ||
        nnt_tensor_numel(o) != B * T * H * V || (state_in && nnt_tensor_numel(state_in) != B * H * K * V) ||
        (state_out && nnt_tensor_numel(state_out) != B * H * K * V) ||
        (states && nnt_tensor_numel(states) != B * T * H * K * V))
        return cuda_error(err, NNT_ERR_SHAPE,
                          "cuda delta_rule: q, k, g [B, T, H, K], v, o [B, T, H, V], beta [B, T, H] and "
                          "states [B, H, K, V] disagree");
    if (K > 1024 || V > 1024) return cuda_error(err, NNT_ERR_UNSUPPORTED, "cuda delta_rule: head widths above 1024");
    if (B * H == 0 || V == 0) return NNT_OK;
    CUDA_CHECK(cudaSetDevice(c->device));
    size_t smem = (size_t)(3 + DR_COLS) * (size_t)K * sizeof(float);
    if (smem > 48 * 1024) {
        if ((int64_t)smem > c->smem_optin)
            return cuda_error(err, NNT_ERR_UNSUPPORTED, "cuda delta_rule: key width %lld needs %zu bytes of shared memory",
                              (long long)K, smem);
        CUDA_CHECK(cudaFuncSetAttribute(k_delta_rule, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    }
    void *dvalid = NULL;
    if (token_valid) {
        size_t vb = (size_t)(B * T);
        if ((st = cuda_stage_begin(c, cuda_stage_size(vb), err)) != NNT_OK) return st;
        if ((st = cuda_stage_put(c, token_valid, vb, &dvalid, err)) != NNT_OK) return st;
    }
    dim3 grid((unsigned int)(B * H), (unsigned int)((V + DR_COLS - 1) / DR_COLS));
    k_delta_rule<<<grid, DR_COLS, smem, c->stream>>>(
        (const float *)q->data, (const float *)k->data, (const float *)v->data, (const float *)g->data,
        (const float *)beta->data, (const uint8_t *)dvalid, state_in ? (const float *)state_in->data : NULL, l2norm,
        scale, (float *)o->data, state_out ? (float *)state_out->data : NULL, states ? (float *)states->data : NULL, B,
        T, H, K, V, cuda_bf16(o));
    return cuda_done(c, "delta_rule", err);
}

/* x [M, D], w [D] F32/BF16/F16 as stored, gate [M, D] -> y [M, D] = w x / sqrt(mean(x^2) + eps)
 * sigmoid(gate), rounded to bfloat16 when r16; one warp per row */
__global__ void k_rms_norm_gated(const float *x, const void *w, int wdt, const float *gate, float eps, float *y,
                                 int64_t M, int64_t D, int r16)
{
    int lane = threadIdx.x & 31;
    ROW_LOOP(m, M)
    {
        const float *xr = x + m * D, *gr = gate + m * D;
        float *yr = y + m * D;
        double ss = 0.0;
        for (int64_t d = lane; d < D; d += 32) ss += (double)xr[d] * xr[d];
        ss = warp_sum_d(ss);
        float inv = 1.0f / sqrtf((float)(ss / (double)D) + eps);
        for (int64_t d = lane; d < D; d += 32) {
            float gv = gr[d];
            yr[d] = r16_if(r16, load_any(w, wdt, d) * (xr[d] * inv) * (1.0f / (1.0f + expf(-gv))));
        }
    }
}

extern "C" nnt_status cuda_rms_norm_gated(void *ctx, const nnt_tensor *x, const nnt_tensor *w, const nnt_tensor *gate,
                                          float eps, nnt_tensor *y, nnt_error *err)
{
    cuda_ctx *c = (cuda_ctx *)ctx;
    nnt_status st;
    if ((st = cuda_check_float_weight("rms_norm_gated", "w", w, err)) != NNT_OK) return st;
    int64_t D = nnt_tensor_numel(w), n = nnt_tensor_numel(x);
    if (!D || n % D || x->dtype != NNT_F32 || gate->dtype != NNT_F32 || y->dtype != NNT_F32 ||
        nnt_tensor_numel(gate) != n || nnt_tensor_numel(y) != n)
        return cuda_error(err, NNT_ERR_SHAPE, "cuda rms_norm_gated: x, gate, y [M, D] and w [D] disagree");
    int64_t M = n / D;
    if (M == 0) return NNT_OK;
    CUDA_CHECK(cudaSetDevice(c->device));
    k_rms_norm_gated<<<grid_rows(M), CUDA_THREADS, 0, c->stream>>>((const float *)x->data, w->data, (int)w->dtype,
                                                                   (const float *)gate->data, eps, (float *)y->data,
                                                                   M, D, cuda_bf16(y));
    return cuda_done(c, "rms_norm_gated", err);
}

/* dst[m, dst_col + j] = src[m, src_col + j], j < ncols, as one 2-D copy; when the two blocks
 * share memory (a cache shifting left inside one tensor) the block goes through the scratch,
 * which gives memmove's result. */
extern "C" nnt_status cuda_copy_cols(void *ctx, const nnt_tensor *src, int64_t src_col, nnt_tensor *dst,
                                     int64_t dst_col, int64_t ncols, nnt_error *err)
{
    cuda_ctx *c = (cuda_ctx *)ctx;
    int64_t M = src->shape[0], Cs = nnt_tensor_numel(src) / (M ? M : 1), Cd = nnt_tensor_numel(dst) / (M ? M : 1);
    if (src->dtype != NNT_F32 || dst->dtype != NNT_F32 || dst->shape[0] != M || src_col < 0 || dst_col < 0 ||
        ncols < 0 || src_col + ncols > Cs || dst_col + ncols > Cd)
        return cuda_error(err, NNT_ERR_SHAPE, "cuda copy_cols: columns [%lld, +%lld) and [%lld, +%lld) do not fit",
                          (long long)src_col, (long long)ncols, (long long)dst_col, (long long)ncols);
    if (M == 0 || ncols == 0) return NNT_OK;
    CUDA_CHECK(cudaSetDevice(c->device));
    const float *s = (const float *)src->data + src_col;
    float *d = (float *)dst->data + dst_col;
    size_t width = (size_t)ncols * sizeof(float), sp = (size_t)Cs * sizeof(float), dp = (size_t)Cd * sizeof(float);
    size_t sspan = (size_t)(M - 1) * sp + width, dspan = (size_t)(M - 1) * dp + width;
    if (overlaps(s, sspan, d, dspan)) {
        void *tmp;
        nnt_status st = cuda_scratch(c, (size_t)M * width, &tmp, err);
        if (st != NNT_OK) return st;
        CUDA_CHECK(cudaMemcpy2DAsync(tmp, width, s, sp, width, (size_t)M, cudaMemcpyDeviceToDevice, c->stream));
        s = (const float *)tmp;
        sp = width;
    }
    CUDA_CHECK(cudaMemcpy2DAsync(d, dp, s, sp, width, (size_t)M, cudaMemcpyDeviceToDevice, c->stream));
    return cuda_done(c, "copy_cols", err);
}

/* x [M, C]: rows[i] of the n listed rows become zero */
__global__ void k_zero_rows(float *x, const int32_t *rows, int64_t n, int64_t C)
{
    GRID_LOOP(i, n * C) x[(int64_t)rows[i / C] * C + i % C] = 0.0f;
}

extern "C" nnt_status cuda_zero_rows(void *ctx, nnt_tensor *x, const uint8_t *row_valid, nnt_error *err)
{
    cuda_ctx *c = (cuda_ctx *)ctx;
    if (x->dtype != NNT_F32) return cuda_error(err, NNT_ERR_SHAPE, "cuda zero_rows: F32 only");
    int64_t M = x->shape[0], C = nnt_tensor_numel(x) / (M ? M : 1);
    if (M == 0 || C == 0) return NNT_OK;
    if (M > INT32_MAX) return cuda_error(err, NNT_ERR_UNSUPPORTED, "cuda zero_rows: more than 2^31 rows");
    if (!row_valid) return cuda_error(err, NNT_ERR_INVALID_ARGUMENT, "cuda zero_rows: row_valid is missing");
    int64_t n = 0;
    for (int64_t m = 0; m < M; m++) n += !row_valid[m];
    if (n == 0) return NNT_OK; /* nothing to zero: no device work at all */
    CUDA_CHECK(cudaSetDevice(c->device));
    int32_t *rows = (int32_t *)malloc((size_t)n * sizeof(int32_t));
    if (!rows) return cuda_error(err, NNT_ERR_OUT_OF_MEMORY, "no memory");
    for (int64_t m = 0, i = 0; m < M; m++)
        if (!row_valid[m]) rows[i++] = (int32_t)m;
    size_t rb = (size_t)n * sizeof(int32_t);
    void *drows;
    nnt_status st = cuda_stage_begin(c, cuda_stage_size(rb), err);
    if (st == NNT_OK) st = cuda_stage_put(c, rows, rb, &drows, err);
    free(rows);
    if (st != NNT_OK) return st;
    k_zero_rows<<<grid_for(n * C), CUDA_THREADS, 0, c->stream>>>((float *)x->data, (const int32_t *)drows, n, C);
    return cuda_done(c, "zero_rows", err);
}
