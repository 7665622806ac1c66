/* cpu_elementwise.c - the cpu backend's row-wise and elementwise kernels: RMSNorm, embedding
 * look-up, add, axis swap, copy, fill, SwiGLU. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_internal.h"

/* x [M, D] F32, w [D] any float or NULL, y [M, D] F32 (may alias x).
 * y = w * x / sqrt(mean(x^2) + eps); Zhang & Sennrich 2019. */
nnt_status cpu_rms_norm(void *ctx, const nnt_tensor *x, const nnt_tensor *w, float eps, nnt_tensor *y,
                        nnt_error *err)
{
    cpu_ctx *c = ctx;
    nnt_status st;
    if ((st = cpu_check("rms_norm", "x", x, NNT_F32, 0, err)) != NNT_OK) return st;
    if ((st = cpu_check("rms_norm", "y", y, NNT_F32, 0, err)) != NNT_OK) return st;
    int64_t D = x->shape[x->ndim - 1];
    int64_t M = nnt_tensor_numel(x) / (D ? D : 1);
    if (nnt_tensor_numel(y) != M * D) return cpu_error(err, NNT_ERR_SHAPE, "cpu rms_norm: y size differs from x");
    if (w && (w->ndim != 1 || w->shape[0] != D))
        return cpu_error(err, NNT_ERR_SHAPE, "cpu rms_norm: gain has %lld entries, rows have %lld",
                         (long long)(w->ndim ? w->shape[0] : 0), (long long)D);
    if (w && w->dtype != NNT_F32 && w->dtype != NNT_BF16 && w->dtype != NNT_F16)
        return cpu_error(err, NNT_ERR_UNSUPPORTED, "cpu rms_norm: the gain has dtype %d; expected F32, BF16 or F16",
                         (int)w->dtype);
    const float *xd = x->data;
    float *yd = y->data;
    /* the gain as float32: its own data, or decoded once for every row */
    float *own = w && w->dtype != NNT_F32 ? malloc((size_t)(D ? D : 1) * sizeof *own) : NULL;
    if (w && w->dtype != NNT_F32 && !own)
        return cpu_error(err, NNT_ERR_OUT_OF_MEMORY, "cpu rms_norm: no memory for %lld gain values", (long long)D);
    for (int64_t d = 0; own && d < D; d++) own[d] = cpu_load(w->data, w->dtype, d);
    const float *g = own ? own : w ? (const float *)w->data : NULL;
    /* bfloat16 values: the normalised row rounded, then the gain product rounded; with ..._ONCE
     * one rounding of the float32 product; without a gain, 1 / rms rounded, then the product */
    int r16 = cpu_bf16(y), once = r16 && (y->flags & NNT_TENSOR_BF16_ONCE);
#pragma omp parallel for num_threads(c->threads) schedule(static) if (M * D > CPU_PARALLEL_MIN)
    for (int64_t m = 0; m < M; m++) {
        const float *xr = xd + m * D;
        float *yr = yd + m * D;
        /* the sum of squares in double precision, eight partial sums (vectorised), added in a
         * fixed order */
        double part[8] = {0};
        int64_t d = 0;
        for (; d + 8 <= D; d += 8)
            for (int j = 0; j < 8; j++) part[j] += (double)xr[d + j] * xr[d + j];
        for (; d < D; d++) part[0] += (double)xr[d] * xr[d];
        double ss = ((part[0] + part[1]) + (part[2] + part[3])) + ((part[4] + part[5]) + (part[6] + part[7]));
        float inv = 1.0f / sqrtf((float)(ss / (double)D) + eps);
        if (r16 && !g) inv = cpu_r16(inv);
        if (!g)
            for (d = 0; d < D; d++) yr[d] = r16 ? cpu_r16(xr[d] * inv) : xr[d] * inv;
        else if (!r16)
            for (d = 0; d < D; d++) yr[d] = g[d] * (xr[d] * inv);
        else if (once)
            for (d = 0; d < D; d++) yr[d] = cpu_r16(g[d] * (xr[d] * inv));
        else
            for (d = 0; d < D; d++) yr[d] = cpu_r16(g[d] * cpu_r16(xr[d] * inv));
    }
    free(own);
    return NNT_OK;
}

/* table [V, H] any weight encoding, ids [M] I32, y [M, H] F32: each row decoded as it is read */
nnt_status cpu_embedding(void *ctx, const nnt_tensor *table, const nnt_tensor *ids, nnt_tensor *y, nnt_error *err)
{
    cpu_ctx *c = ctx;
    nnt_status st;
    if ((st = cpu_check("embedding", "table", table, NNT_DTYPE_INVALID, 2, err)) != NNT_OK) return st;
    if ((st = cpu_check("embedding", "ids", ids, NNT_I32, 0, err)) != NNT_OK) return st;
    int64_t V = table->shape[0], H = table->shape[1], M = nnt_tensor_numel(ids);
    if (nnt_tensor_numel(y) != M * H) return cpu_error(err, NNT_ERR_SHAPE, "cpu embedding: y is not [%lld, %lld]",
                                                       (long long)M, (long long)H);
    const int32_t *id = ids->data;
    for (int64_t m = 0; m < M; m++)
        if (id[m] < 0 || id[m] >= V)
            return cpu_error(err, NNT_ERR_INVALID_ARGUMENT, "cpu embedding: id %d at %lld is outside [0, %lld)", id[m],
                             (long long)m, (long long)V);
    cpu_weight wv;
    if (!cpu_weight_view(table, &wv))
        return cpu_error(err, NNT_ERR_UNSUPPORTED, "cpu embedding: a table of dtype %d is not readable", (int)table->dtype);
    float *yd = y->data;
    const cpu_kernels *k = c->k;
#pragma omp parallel for num_threads(c->threads) schedule(static) if (M * H > CPU_PARALLEL_MIN)
    for (int64_t m = 0; m < M; m++) k->decode(&wv, id[m], (int64_t)id[m] + 1, yd + m * H, H);
    cpu_round_result(c, y);
    return NNT_OK;
}

/* y = a + b, F32, same sizes */
nnt_status cpu_add(void *ctx, const nnt_tensor *a, const nnt_tensor *b, nnt_tensor *y, nnt_error *err)
{
    cpu_ctx *c = ctx;
    int64_t n = nnt_tensor_numel(a);
    if (a->dtype != NNT_F32 || b->dtype != NNT_F32 || y->dtype != NNT_F32 || nnt_tensor_numel(b) != n ||
        nnt_tensor_numel(y) != n)
        return cpu_error(err, NNT_ERR_SHAPE, "cpu add: operands must be F32 of equal size");
    const float *ad = a->data, *bd = b->data;
    float *yd = y->data;
    int r16 = cpu_bf16(y);
#pragma omp parallel for num_threads(c->threads) schedule(static) if (n > CPU_PARALLEL_MIN)
    for (int64_t i = 0; i < n; i++) yd[i] = r16 ? cpu_r16(ad[i] + bd[i]) : ad[i] + bd[i];
    return NNT_OK;
}

/* x [A, B, C, D] -> y [A, C, B, D], any 4-byte dtype */
nnt_status cpu_swap12(void *ctx, const nnt_tensor *x, nnt_tensor *y, nnt_error *err)
{
    cpu_ctx *c = ctx;
    if (x->ndim != 4 || y->ndim != 4 || x->dtype != y->dtype || x->shape[0] != y->shape[0] ||
        x->shape[1] != y->shape[2] || x->shape[2] != y->shape[1] || x->shape[3] != y->shape[3])
        return cpu_error(err, NNT_ERR_SHAPE, "cpu swap12: y must be x with axes 1 and 2 swapped");
    int64_t A = x->shape[0], B = x->shape[1], C = x->shape[2], D = x->shape[3];
    size_t es = x->dtype == NNT_F32 || x->dtype == NNT_I32 ? 4 : 0;
    if (!es) return cpu_error(err, NNT_ERR_UNSUPPORTED, "cpu swap12: only 4-byte elements");
    const char *xd = x->data;
    char *yd = y->data;
#pragma omp parallel for collapse(2) num_threads(c->threads) schedule(static) if (A * B * C * D > CPU_PARALLEL_MIN)
    for (int64_t a = 0; a < A; a++)
        for (int64_t b = 0; b < B; b++)
            for (int64_t cc = 0; cc < C; cc++)
                memcpy(yd + (((a * C + cc) * B + b) * D) * es, xd + (((a * B + b) * C + cc) * D) * es, (size_t)D * es);
    return NNT_OK;
}

nnt_status cpu_copy(void *ctx, const nnt_tensor *src, nnt_tensor *dst, nnt_error *err)
{
    (void)ctx;
    if (src->dtype != dst->dtype || nnt_tensor_numel(src) != nnt_tensor_numel(dst))
        return cpu_error(err, NNT_ERR_SHAPE, "cpu copy: source and destination differ in dtype or size");
    if (src->data != dst->data) {
        size_t es = src->dtype == NNT_F32 || src->dtype == NNT_I32 ? 4 : src->dtype == NNT_I64 ? 8 : 2;
        memmove(dst->data, src->data, (size_t)nnt_tensor_numel(src) * es);
    }
    return NNT_OK;
}

nnt_status cpu_fill(void *ctx, nnt_tensor *t, float value, nnt_error *err)
{
    (void)ctx;
    if (t->dtype != NNT_F32) return cpu_error(err, NNT_ERR_SHAPE, "cpu fill: F32 only");
    float *d = t->data;
    int64_t n = nnt_tensor_numel(t);
    for (int64_t i = 0; i < n; i++) d[i] = value;
    return NNT_OK;
}

/* y = factor * x, F32, same sizes (y may alias x) */
nnt_status cpu_scale(void *ctx, const nnt_tensor *x, float factor, nnt_tensor *y, nnt_error *err)
{
    cpu_ctx *c = ctx;
    int64_t n = nnt_tensor_numel(x);
    if (x->dtype != NNT_F32 || y->dtype != NNT_F32 || nnt_tensor_numel(y) != n)
        return cpu_error(err, NNT_ERR_SHAPE, "cpu scale: x and y must be F32 of equal size");
    const float *xd = x->data;
    float *yd = y->data;
    int r16 = cpu_bf16(y);
#pragma omp parallel for num_threads(c->threads) schedule(static) if (n > CPU_PARALLEL_MIN)
    for (int64_t i = 0; i < n; i++) yd[i] = r16 ? cpu_r16(factor * xd[i]) : factor * xd[i];
    return NNT_OK;
}

/* gate, up, act (optional), out: [M, I] F32.
 * act = silu(min(gate, L)), out = act * clamp(up, -L, L); L = 0: no clamp. Shazeer 2020. */
nnt_status cpu_swiglu(void *ctx, const nnt_tensor *gate, const nnt_tensor *up, float limit, nnt_tensor *act,
                      nnt_tensor *out, nnt_error *err)
{
    cpu_ctx *c = ctx;
    if (!gate && !act)
        return cpu_error(err, NNT_ERR_INVALID_ARGUMENT, "cpu swiglu: needs gate or an input activation");
    int64_t n = gate ? nnt_tensor_numel(gate) : nnt_tensor_numel(act);
    if ((gate && gate->dtype != NNT_F32) || up->dtype != NNT_F32 || out->dtype != NNT_F32 || nnt_tensor_numel(up) != n ||
        nnt_tensor_numel(out) != n || (act && (act->dtype != NNT_F32 || nnt_tensor_numel(act) != n)))
        return cpu_error(err, NNT_ERR_SHAPE, "cpu swiglu: gate, up, act and out must be F32 of equal size");
    const float *g = gate ? gate->data : NULL, *u = up->data;
    float *a = act ? act->data : NULL, *o = out->data;
    int r16 = cpu_bf16(out); /* torch: silu's result rounded, then the product rounded */
    const cpu_kernels *k = c->k;
    enum { CHUNK = 512 };
#pragma omp parallel for num_threads(c->threads) schedule(static) if (n > CPU_PARALLEL_MIN)
    for (int64_t i0 = 0; i0 < n; i0 += CHUNK) {
        int64_t i1 = i0 + CHUNK < n ? i0 + CHUNK : n;
        float e[CHUNK];
        if (g) { /* e^-gate for the chunk, vectorised */
            for (int64_t i = i0; i < i1; i++) e[i - i0] = -(limit > 0.0f && g[i] > limit ? limit : g[i]);
            k->exp(e, e, i1 - i0);
        }
        for (int64_t i = i0; i < i1; i++) {
            float uv = u[i];
            if (limit > 0.0f) uv = uv < -limit ? -limit : uv > limit ? limit : uv;
            float s;
            if (g) {
                float gv = g[i];
                if (limit > 0.0f) gv = gv < limit ? gv : limit;
                s = gv / (1.0f + e[i - i0]);
                if (r16) s = cpu_r16(s);
                if (a) a[i] = s;
            } else {
                s = a[i];
            }
            o[i] = r16 ? cpu_r16(s * uv) : s * uv;
        }
    }
    return NNT_OK;
}
