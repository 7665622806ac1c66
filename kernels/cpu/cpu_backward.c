/* cpu_backward.c - the cpu backend's backward ops of the dense and feed-forward kernels: the
 * transposed matrix product on weights in their stored encoding, RMSNorm, gradient
 * accumulation, the axis swap, SwiGLU and the column copy. Each adds into the gradients it is
 * handed (nnt_backend.h, "backward"); bfloat16 flags are ignored, gradients being float32. */
#include <math.h>
#include <string.h>

#include "cpu_internal.h"

#define BWD_PANEL_BYTES ((size_t)4 << 20) /* decoded weight rows per product, shared by the team */

static nnt_status need_f32(const char *op, const char *arg, const nnt_tensor *t, int64_t n, nnt_error *err)
{
    if (!t || !t->data) return cpu_error(err, NNT_ERR_INVALID_ARGUMENT, "cpu %s: %s is missing", op, arg);
    if (t->dtype != NNT_F32 || nnt_tensor_numel(t) != n)
        return cpu_error(err, NNT_ERR_SHAPE, "cpu %s: %s must be F32 with %lld entries (has dtype %d, %lld)", op, arg,
                         (long long)n, (int)t->dtype, (long long)nnt_tensor_numel(t));
    return NNT_OK;
}

/* dx [M, K] += dy [M, N] . w for M <= CPU_FEW_ROWS (decoding, experts with few tokens): each
 * thread streams its own block of weight rows, FEW_STEP rows at a time decoded into a small
 * buffer that stays in cache, adds them into its own partial dx, and the partials are summed
 * into dx at the end. The weight is read once; nothing of its size is written. */
#define FEW_STEP 8
static nnt_status few_rows(cpu_ctx *c, const float *g, int64_t M, const cpu_weight *w, float *d, nnt_error *err)
{
    int64_t N = w->rows, K = w->cols, chunk = (N + c->threads - 1) / c->threads;
    chunk = (chunk + FEW_STEP - 1) / FEW_STEP * FEW_STEP;
    int threads = (int)((N + chunk - 1) / chunk);
    nnt_status st;
    float *p;
    for (int t = 0; t < threads; t++)
        if ((st = cpu_panel(c, t, (size_t)((M + FEW_STEP) * K), &p, err)) != NNT_OK) return st;
    float **panel = c->panel;
    const cpu_kernels *k = c->k;
#pragma omp parallel for num_threads(threads) schedule(static, 1)
    for (int t = 0; t < threads; t++) {
        float *part = panel[t], *rowbuf = panel[t] + M * K;
        memset(part, 0, (size_t)(M * K) * sizeof *part);
        int64_t n1 = (t + 1) * chunk < N ? (t + 1) * chunk : N;
        for (int64_t n = t * chunk; n < n1; n += FEW_STEP) {
            int64_t nr = n1 - n < FEW_STEP ? n1 - n : FEW_STEP;
            k->decode(w, n, n + nr, rowbuf, K);
            for (int64_t m = 0; m < M; m++)
                for (int64_t r = 0; r < nr; r++) {
                    float a = g[m * N + n + r], *out = part + m * K;
                    const float *row = rowbuf + r * K;
                    if (a != 0.0f)
                        for (int64_t i = 0; i < K; i++) out[i] += a * row[i];
                }
        }
    }
    int64_t total = M * K;
#pragma omp parallel for num_threads(c->threads) schedule(static) if (total * threads > CPU_PARALLEL_MIN)
    for (int64_t i = 0; i < total; i++) {
        float acc = 0.0f;
        for (int t = 0; t < threads; t++) acc += panel[t][i];
        d[i] += acc;
    }
    return NNT_OK;
}

/* dy [M, N] F32, w [N, K] any weight encoding, dx [M, K] F32: dx += dy . w.
 * Few rows of dy: few_rows (any encoding). More: an F32 weight goes to one product as it is; any
 * other is decoded a panel of rows at a time (the team decoding each panel's rows, at most
 * BWD_PANEL_BYTES of float32: never the whole weight), each panel multiplied into dx by one
 * accumulating product, as cpu_gemm.c does for the forward's panels: oneDNN's matmul where the
 * build has it (measured faster than OpenBLAS's sgemm, as in the forward), else sgemm with
 * beta = 1. */
nnt_status cpu_linear_backward(void *ctx, const nnt_tensor *dy, const nnt_tensor *w, nnt_tensor *dx, nnt_error *err)
{
    cpu_ctx *c = ctx;
    nnt_status st;
    if ((st = cpu_check("linear_backward", "dy", dy, NNT_F32, 2, err)) != NNT_OK) return st;
    if ((st = cpu_check("linear_backward", "w", w, NNT_DTYPE_INVALID, 2, err)) != NNT_OK) return st;
    if ((st = cpu_check("linear_backward", "dx", dx, NNT_F32, 2, err)) != NNT_OK) return st;
    int64_t M = dy->shape[0], N = dy->shape[1], K = w->shape[1];
    if (w->shape[0] != N || dx->shape[0] != M || dx->shape[1] != K)
        return cpu_error(err, NNT_ERR_SHAPE,
                         "cpu linear_backward: dy [%lld, %lld], w [%lld, %lld], dx [%lld, %lld] do not chain",
                         (long long)M, (long long)N, (long long)w->shape[0], (long long)w->shape[1],
                         (long long)dx->shape[0], (long long)dx->shape[1]);
    cpu_weight wv;
    if (!cpu_weight_view(w, &wv))
        return cpu_error(err, NNT_ERR_UNSUPPORTED, "cpu linear_backward: a weight of dtype %d%s is not readable",
                         (int)w->dtype, w->scale ? "" : " without scales");
    if (M == 0 || N == 0 || K == 0) return NNT_OK;
    const float *g = dy->data;
    float *d = dx->data;
    if (M <= CPU_FEW_ROWS) return few_rows(c, g, M, &wv, d, err);
    int done = 0;
    if (w->dtype == NNT_F32) {
        if ((st = cpu_gemm_acc(c, M, K, N, g, N, w->data, d, &done, err)) != NNT_OK || done) return st;
        cpu_sgemm(c, 0, 0, (int)M, (int)K, (int)N, 1.0f, g, (int)N,
                    (const float *)w->data, (int)K, 1.0f, d, (int)K);
        return NNT_OK;
    }
    int64_t rows = (int64_t)(BWD_PANEL_BYTES / sizeof(float)) / K;
    rows = rows < 8 ? 8 : rows / 8 * 8;
    if (rows > N) rows = N;
    float *panel;
    if ((st = cpu_buffer(c, CPU_BUF_PANEL, (size_t)(rows * K) * sizeof(float), (void **)&panel, err)) != NNT_OK)
        return st;
    const cpu_kernels *k = c->k;
    for (int64_t n0 = 0; n0 < N; n0 += rows) {
        int64_t nr = N - n0 < rows ? N - n0 : rows;
#pragma omp parallel for num_threads(c->threads) schedule(static) if (nr * K > CPU_PARALLEL_MIN)
        for (int64_t r = 0; r < nr; r += 8) k->decode(&wv, n0 + r, n0 + (r + 8 < nr ? r + 8 : nr), panel + r * K, K);
        if ((st = cpu_gemm_acc(c, M, K, nr, g + n0, N, panel, d, &done, err)) != NNT_OK) return st;
        if (!done)
            cpu_sgemm(c, 0, 0, (int)M, (int)K, (int)nr, 1.0f, g + n0, (int)N, panel,
                        (int)K, 1.0f, d, (int)K);
    }
    return NNT_OK;
}

/* x [M, D], w [D] any float or NULL, dy [M, D], dx [M, D]; r = 1 / sqrt(mean(x^2) + eps),
 * u = w dy: dx += r u - x r^3 mean(u x) (the row sums in double). Zhang & Sennrich 2019. */
nnt_status cpu_rms_norm_backward(void *ctx, const nnt_tensor *x, const nnt_tensor *w, float eps, const nnt_tensor *dy,
                                 nnt_tensor *dx, nnt_error *err)
{
    cpu_ctx *c = ctx;
    nnt_status st;
    if ((st = cpu_check("rms_norm_backward", "x", x, NNT_F32, 0, err)) != NNT_OK) return st;
    int64_t D = x->shape[x->ndim - 1], n = nnt_tensor_numel(x), M = n / (D ? D : 1);
    if ((st = need_f32("rms_norm_backward", "dy (as x)", dy, n, err)) != NNT_OK) return st;
    if (!dx) return NNT_OK;
    if ((st = need_f32("rms_norm_backward", "dx (as x)", dx, n, err)) != NNT_OK) return st;
    if (w && (w->ndim != 1 || w->shape[0] != D))
        return cpu_error(err, NNT_ERR_SHAPE, "cpu rms_norm_backward: gain w has %lld entries, rows of x have %lld",
                         (long long)(w->ndim ? w->shape[0] : 0), (long long)D);
    if (w && w->dtype != NNT_F32 && w->dtype != NNT_BF16 && w->dtype != NNT_F16)
        return cpu_error(err, NNT_ERR_UNSUPPORTED, "cpu rms_norm_backward: the gain has dtype %d", (int)w->dtype);
    const float *xd = x->data, *gd = dy->data;
    float *dd = dx->data;
#pragma omp parallel for num_threads(c->threads) schedule(static)
    for (int64_t m = 0; m < M; m++) {
        const float *xr = xd + m * D, *gr = gd + m * D;
        float *dr = dd + m * D;
        double ss = 0.0, ux = 0.0;
        for (int64_t i = 0; i < D; i++) {
            double u = (double)gr[i] * (w ? cpu_load(w->data, w->dtype, i) : 1.0f);
            ss += (double)xr[i] * xr[i];
            ux += u * xr[i];
        }
        double r = 1.0 / sqrt(ss / (double)D + eps), corr = r * r * r * ux / (double)D;
        for (int64_t i = 0; i < D; i++) {
            double u = (double)gr[i] * (w ? cpu_load(w->data, w->dtype, i) : 1.0f);
            dr[i] += (float)(r * u - corr * xr[i]);
        }
    }
    return NNT_OK;
}

/* y += factor * x, F32, same element count */
nnt_status cpu_accumulate(void *ctx, const nnt_tensor *x, float factor, nnt_tensor *y, nnt_error *err)
{
    cpu_ctx *c = ctx;
    nnt_status st;
    if (!x || !x->data || x->dtype != NNT_F32)
        return cpu_error(err, NNT_ERR_SHAPE, "cpu accumulate: x must be an F32 tensor");
    int64_t n = nnt_tensor_numel(x);
    if ((st = need_f32("accumulate", "y (as x)", y, n, err)) != NNT_OK) return st;
    const float *xd = x->data;
    float *yd = y->data;
#pragma omp parallel for num_threads(c->threads) schedule(static) if (n > CPU_PARALLEL_MIN)
    for (int64_t i = 0; i < n; i++) yd[i] += factor * xd[i];
    return NNT_OK;
}

/* dy [A, C, B, D] -> dx [A, B, C, D] += dy with axes 1 and 2 swapped back */
nnt_status cpu_swap12_backward(void *ctx, const nnt_tensor *dy, nnt_tensor *dx, nnt_error *err)
{
    cpu_ctx *c = ctx;
    nnt_status st;
    if ((st = cpu_check("swap12_backward", "dy", dy, NNT_F32, 4, err)) != NNT_OK) return st;
    if ((st = cpu_check("swap12_backward", "dx", dx, NNT_F32, 4, err)) != NNT_OK) return st;
    if (dx->shape[0] != dy->shape[0] || dx->shape[1] != dy->shape[2] || dx->shape[2] != dy->shape[1] ||
        dx->shape[3] != dy->shape[3])
        return cpu_error(err, NNT_ERR_SHAPE, "cpu swap12_backward: dx must be dy with axes 1 and 2 swapped");
    int64_t A = dx->shape[0], B = dx->shape[1], C = dx->shape[2], D = dx->shape[3];
    const float *g = dy->data;
    float *d = dx->data;
#pragma omp parallel for collapse(2) num_threads(c->threads) schedule(static)
    for (int64_t a = 0; a < A; a++)
        for (int64_t b = 0; b < B; b++)
            for (int64_t cc = 0; cc < C; cc++) {
                float *dr = d + ((a * B + b) * C + cc) * D;
                const float *gr = g + ((a * C + cc) * B + b) * D;
                for (int64_t i = 0; i < D; i++) dr[i] += gr[i];
            }
    return NNT_OK;
}

/* One element of swiglu's backward: g the gate (unused without one), u up, a act (without a
 * gate), L the limit; adds into *dg, *du, *da (each may be NULL); ga the act output's own
 * gradient (with a gate). */
static inline void swiglu_one(const float *g, float u, const float *a, float L, float dout, float ga, float *dg,
                              float *du, float *da)
{
    int uin = !(L > 0.0f) || (u >= -L && u <= L); /* torch's clamp: passes at the bound */
    float uc = L > 0.0f ? (u < -L ? -L : u > L ? L : u) : u;
    if (!g) {
        if (da) *da += dout * uc;
        if (du && uin) *du += dout * *a;
        return;
    }
    float gv = *g;
    int gin = !(L > 0.0f) || gv <= L; /* torch's clamp_max: passes at the bound */
    if (L > 0.0f && gv > L) gv = L;
    double sg = 1.0 / (1.0 + exp(-(double)gv));
    if (dg && gin) *dg += (float)(((double)dout * uc + ga) * sg * (1.0 + gv * (1.0 - sg)));
    if (du && uin) *du += (float)(dout * gv * sg);
}

/* gate, up, act, dout, dgate, dup, dact: [M, I] F32 (see nnt_backend.h for which are read) */
nnt_status cpu_swiglu_backward(void *ctx, const nnt_tensor *gate, const nnt_tensor *up, float limit,
                               const nnt_tensor *act, const nnt_tensor *dout, nnt_tensor *dgate, nnt_tensor *dup,
                               nnt_tensor *dact, nnt_error *err)
{
    cpu_ctx *c = ctx;
    nnt_status st;
    if (!gate && (!act || !act->data))
        return cpu_error(err, NNT_ERR_INVALID_ARGUMENT, "cpu swiglu_backward: needs gate or the input activation act");
    int64_t n = gate ? nnt_tensor_numel(gate) : nnt_tensor_numel(act);
    const char *base = gate ? "(as gate)" : "(as act)";
    char what[40];
#define NEED(T, NAME)                                                                                              \
    do {                                                                                                           \
        snprintf(what, sizeof what, "%s %s", NAME, base);                                                          \
        if ((T) && (st = need_f32("swiglu_backward", what, (T), n, err)) != NNT_OK) return st;                     \
    } while (0)
    NEED(gate, "gate");
    NEED(up, "up");
    NEED(dout, "dout");
    NEED(dgate, "dgate");
    NEED(dup, "dup");
    NEED(dact, "dact");
    if (!gate) NEED(act, "act");
#undef NEED
    if (!up || !dout) return cpu_error(err, NNT_ERR_INVALID_ARGUMENT, "cpu swiglu_backward: up and dout are required");
    const float *g = gate ? gate->data : NULL, *u = up->data, *a = gate ? NULL : act->data, *go = dout->data;
    const float *ga = gate && dact ? dact->data : NULL;
    float *dg = gate && dgate ? dgate->data : NULL, *du = dup ? dup->data : NULL;
    float *da = !gate && dact ? dact->data : NULL;
#pragma omp parallel for num_threads(c->threads) schedule(static) if (n > 16384)
    for (int64_t i = 0; i < n; i++)
        swiglu_one(g ? g + i : NULL, u[i], a ? a + i : NULL, limit, go[i], ga ? ga[i] : 0.0f, dg ? dg + i : NULL,
                   du ? du + i : NULL, da ? da + i : NULL);
    return NNT_OK;
}

/* ddst [M, Cd], dsrc [M, Cs]: dsrc[m, src_col + j] += ddst[m, dst_col + j] for j < ncols */
nnt_status cpu_copy_cols_backward(void *ctx, const nnt_tensor *ddst, int64_t dst_col, nnt_tensor *dsrc,
                                  int64_t src_col, int64_t ncols, nnt_error *err)
{
    cpu_ctx *c = ctx;
    nnt_status st;
    if ((st = cpu_check("copy_cols_backward", "ddst", ddst, NNT_F32, 0, err)) != NNT_OK) return st;
    if ((st = cpu_check("copy_cols_backward", "dsrc", dsrc, NNT_F32, 0, err)) != NNT_OK) return st;
    int64_t M = ddst->shape[0], Cd = nnt_tensor_numel(ddst) / (M ? M : 1), Cs = nnt_tensor_numel(dsrc) / (M ? M : 1);
    if (dsrc->shape[0] != M || ncols < 0 || src_col < 0 || dst_col < 0 || src_col + ncols > Cs || dst_col + ncols > Cd)
        return cpu_error(err, NNT_ERR_SHAPE,
                         "cpu copy_cols_backward: columns [%lld, +%lld) of dsrc and [%lld, +%lld) of ddst do not fit",
                         (long long)src_col, (long long)ncols, (long long)dst_col, (long long)ncols);
    if (ddst->data == dsrc->data && src_col < dst_col + ncols && dst_col < src_col + ncols && ncols > 0)
        return cpu_error(err, NNT_ERR_INVALID_ARGUMENT,
                         "cpu copy_cols_backward: dsrc is ddst and the column ranges overlap");
    const float *g = ddst->data;
    float *d = dsrc->data;
#pragma omp parallel for num_threads(c->threads) schedule(static) if (M * ncols > CPU_PARALLEL_MIN)
    for (int64_t m = 0; m < M; m++) {
        const float *gr = g + m * Cd + dst_col;
        float *dr = d + m * Cs + src_col;
        for (int64_t j = 0; j < ncols; j++) dr[j] += gr[j];
    }
    return NNT_OK;
}
