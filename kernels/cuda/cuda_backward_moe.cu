/* cuda_backward_moe.cu - the cuda backend's backward ops of the mixture-of-experts kernels
 * (nnt_backend.h, "backward"): the router's weights with respect to its logits (the choice has
 * no gradient), row gathers and scatters, rows scaled by routing weights, and the sum over
 * routing slots. Gradients are float32 and added into. Mirrors kernels/cpu/cpu_backward_moe.c.
 *
 * Where several rows add into one gradient row (gather_rows' repeated rows, scale_rows' repeated
 * indices) the host groups them by destination from its copy of the row list (a counting sort,
 * stable), and one thread per (destination, column) adds the group's rows in order of i: the
 * cpu backend's order of additions, so no atomics and the same sums. Scatters' backward reads
 * ddst and writes dsrc row i alone, so its rows never collide. Row lists, scales and the kept
 * rows of scatter_rows come from host memory, are checked there and staged; route_backward's
 * expert indices are device memory, checked on the device (one wait for the verdict). */
#include <stdlib.h>
#include <string.h>

#include "cuda_device.cuh"

/* ---- route_backward ---- */

typedef struct route_bdev {
    int fn, K, renormalize;
    double renorm_eps, scaling;
} route_bdev;

/* The score of one logit and its derivative, in double, as the cpu backend's backward takes
 * them (softplus taken as x above 20); softmax is handled per row. */
__device__ __forceinline__ double score_bwd(int fn, double x, double *deriv)
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

/* logits [M, E], idx [M, K] I32, dw [M, K] -> dl [M, E] +=; one warp per token. w_k = f s_k /
 * (S + eps) with S = sum_k s(idx_k) (renormalised) or f s_k: dL/ds_e sums, over the slots k
 * choosing e, f (dw_k / (S + eps) - A / (S + eps)^2) (A = sum_k dw_k s_k) or f dw_k; then
 * through the score function (softmax: ds_e = s_e (dsc_e - sum_j dsc_j s_j)). Every lane
 * computes the K-slot sums itself (K is small); lanes split the experts. An index outside
 * [0, E) is counted in flag[0] and its token skipped (the op then fails, the other tokens'
 * gradients added). */
__global__ void k_route_bwd(const float *logits, const int32_t *idx, const float *dw, float *dl, int64_t M, int E,
                            route_bdev p, int *flag)
{
    const int lane = threadIdx.x & 31, K = p.K;
    ROW_LOOP(m, M)
    {
        const float *l = logits + m * E, *g = dw + m * K;
        const int32_t *id = idx + m * K;
        float *d = dl + m * E;
        int bad = 0;
        for (int k = lane; k < K; k += 32)
            if (id[k] < 0 || id[k] >= E) bad = 1;
        if (__any_sync(0xffffffffu, bad)) {
            if (lane == 0) atomicAdd(&flag[0], 1);
            continue;
        }
        const int soft = p.fn == NNT_SCORE_SOFTMAX;
        double mx = -INFINITY, sum = 0.0, der;
        if (soft) {
            float fm = -INFINITY;
            for (int e = lane; e < E; e += 32) fm = l[e] > fm ? l[e] : fm;
            mx = warp_max_f(fm);
            for (int e = lane; e < E; e += 32) sum += exp((double)l[e] - mx);
            sum = warp_sum_d(sum);
        }
        double S = 0.0, A = 0.0;
        for (int k = 0; k < K; k++) {
            double s = soft ? exp((double)l[id[k]] - mx) / sum : score_bwd(p.fn, l[id[k]], &der);
            S += s;
            A += (double)g[k] * s;
        }
        const double den = S + p.renorm_eps, f = p.scaling;
        double dot = 0.0; /* softmax: sum_j dsc_j s_j */
        if (soft)
            for (int k = 0; k < K; k++) {
                double coef = p.renormalize ? f * ((double)g[k] / den - A / (den * den)) : f * g[k];
                dot += coef * (exp((double)l[id[k]] - mx) / sum);
            }
        for (int e = lane; e < E; e += 32) {
            double dsc = 0.0;
            for (int k = 0; k < K; k++)
                if (id[k] == e) dsc += p.renormalize ? f * ((double)g[k] / den - A / (den * den)) : f * g[k];
            if (soft) {
                double s = exp((double)l[e] - mx) / sum;
                d[e] += (float)(s * (dsc - dot));
            } else if (dsc != 0.0) {
                score_bwd(p.fn, l[e], &der);
                d[e] += (float)(dsc * der);
            }
        }
    }
}

extern "C" nnt_status cuda_route_backward(void *ctx, const nnt_tensor *logits, const nnt_tensor *bias,
                                          const nnt_route_params *p, const nnt_tensor *idx, const nnt_tensor *dw,
                                          nnt_tensor *dlogits, nnt_error *err)
{
    cuda_ctx *c = (cuda_ctx *)ctx;
    nnt_status st;
    (void)bias; /* it only chooses */
    if ((st = cuda_check("route_backward", "logits", logits, NNT_F32, 2, err)) != NNT_OK) return st;
    if ((st = cuda_check("route_backward", "idx", idx, NNT_I32, 0, err)) != NNT_OK) return st;
    if ((st = cuda_check("route_backward", "dw", dw, NNT_F32, 0, err)) != NNT_OK) return st;
    if (!p) return cuda_error(err, NNT_ERR_INVALID_ARGUMENT, "cuda route_backward: the routing parameters are missing");
    int64_t M = logits->shape[0], E = logits->shape[1];
    int K = p->top_k;
    if (K < 1 || K > E || nnt_tensor_numel(idx) != M * K || nnt_tensor_numel(dw) != M * K)
        return cuda_error(err, NNT_ERR_SHAPE,
                          "cuda route_backward: top_k %d with %lld experts; idx, dw must be [%lld, %d]", K,
                          (long long)E, (long long)M, K);
    if (p->score_fn != NNT_SCORE_SIGMOID && p->score_fn != NNT_SCORE_SOFTMAX && p->score_fn != NNT_SCORE_SQRT_SOFTPLUS)
        return cuda_error(err, NNT_ERR_INVALID_ARGUMENT, "cuda route_backward: unknown score function %d",
                          (int)p->score_fn);
    if (!dlogits) return NNT_OK;
    if ((st = cuda_check("route_backward", "dlogits", dlogits, NNT_F32, 0, err)) != NNT_OK) return st;
    if (nnt_tensor_numel(dlogits) != M * E)
        return cuda_error(err, NNT_ERR_SHAPE, "cuda route_backward: dlogits is not shaped as logits");
    if (E > 0x7fffffff) return cuda_error(err, NNT_ERR_UNSUPPORTED, "cuda route_backward: too many experts");
    if (M == 0) return NNT_OK;
    CUDA_CHECK(cudaSetDevice(c->device));
    route_bdev rp = {(int)p->score_fn, K, p->renormalize, (double)p->renorm_eps, (double)p->scaling_factor};
    if ((st = cuda_clear_flag(c, err)) != NNT_OK) return st;
    k_route_bwd<<<grid_rows(M), CUDA_THREADS, 0, c->stream>>>((const float *)logits->data, (const int32_t *)idx->data,
                                                              (const float *)dw->data, (float *)dlogits->data, M,
                                                              (int)E, rp, c->flag);
    if ((st = cuda_done(c, "route_backward", err)) != NNT_OK) return st;
    int f[4];
    if ((st = cuda_read_flag(c, f, err)) != NNT_OK) return st;
    if (f[0] == 0) return NNT_OK;
    /* name the first bad index as the cpu backend does (the error path may wait and copy) */
    int32_t *h = (int32_t *)malloc((size_t)(M * K) * sizeof *h);
    if (!h) return cuda_error(err, NNT_ERR_INVALID_ARGUMENT, "cuda route_backward: an expert index is outside [0, %lld)",
                              (long long)E);
    CUDA_CHECK(cudaMemcpy(h, idx->data, (size_t)(M * K) * sizeof *h, cudaMemcpyDeviceToHost));
    int64_t at = 0;
    while (at < M * K && h[at] >= 0 && h[at] < E) at++;
    int32_t v = at < M * K ? h[at] : -1;
    free(h);
    return cuda_error(err, NNT_ERR_INVALID_ARGUMENT,
                      "cuda route_backward: expert index %d at %lld is outside [0, %lld) (%d tokens skipped)", v,
                      (long long)at, (long long)E, f[0]);
}

/* ---- rows grouped by destination ---- */

/* The groups of n keys in [0, range): ord [n] the positions i sorted by key (stable, so in order
 * of i within a key), start [ng + 1] where each group begins in ord, key [ng] its key. One host
 * allocation, freed by group_free. */
typedef struct row_groups {
    int32_t *buf, *ord, *start, *key;
    int ng;
} row_groups;

static void group_free(row_groups *g)
{
    free(g->buf);
    g->buf = NULL;
}

static nnt_status group_rows(const char *op, const int32_t *keys, int n, int64_t range, row_groups *g, nnt_error *err)
{
    memset(g, 0, sizeof *g);
    int64_t *count = (int64_t *)calloc((size_t)(range + 1), sizeof *count);
    g->buf = (int32_t *)malloc((size_t)(3 * n + 1) * sizeof(int32_t));
    if (!count || !g->buf) {
        free(count);
        group_free(g);
        return cuda_error(err, NNT_ERR_OUT_OF_MEMORY, "cuda %s: no memory to group %d rows", op, n);
    }
    g->ord = g->buf;
    g->start = g->buf + n;
    g->key = g->buf + 2 * n + 1;
    for (int i = 0; i < n; i++) count[keys[i] + 1]++;
    int ng = 0;
    for (int64_t r = 0; r < range; r++) {
        if (count[r + 1]) {
            g->key[ng] = (int32_t)r;
            g->start[ng] = (int32_t)count[r];
            ng++;
        }
        count[r + 1] += count[r];
    }
    g->start[ng] = n;
    for (int i = 0; i < n; i++) g->ord[count[keys[i]]++] = i;
    g->ng = ng;
    free(count);
    return NNT_OK;
}

/* Stages a group list: ord, start, key on the device. */
static nnt_status stage_groups(cuda_ctx *c, const row_groups *g, int n, const int32_t **ord, const int32_t **start,
                               const int32_t **key, nnt_error *err)
{
    size_t ob = (size_t)n * 4, sb = (size_t)(g->ng + 1) * 4, kb = (size_t)g->ng * 4;
    nnt_status st;
    void *a, *b, *k;
    if ((st = cuda_stage_begin(c, cuda_stage_size(ob) + cuda_stage_size(sb) + cuda_stage_size(kb), err)) != NNT_OK)
        return st;
    if ((st = cuda_stage_put(c, g->ord, ob, &a, err)) != NNT_OK) return st;
    if ((st = cuda_stage_put(c, g->start, sb, &b, err)) != NNT_OK) return st;
    if ((st = cuda_stage_put(c, g->key, kb, &k, err)) != NNT_OK) return st;
    *ord = (const int32_t *)a;
    *start = (const int32_t *)b;
    *key = (const int32_t *)k;
    return NNT_OK;
}

/* Checks rows[i] in [0, M) for i < n. */
static nnt_status rows_in_range(const char *op, const int32_t *rows, int n, int64_t M, nnt_error *err)
{
    if (n > 0 && !rows) return cuda_error(err, NNT_ERR_INVALID_ARGUMENT, "cuda %s: rows is missing", op);
    for (int i = 0; i < n; i++)
        if (rows[i] < 0 || rows[i] >= M)
            return cuda_error(err, NNT_ERR_INVALID_ARGUMENT, "cuda %s: row %d at %d is outside [0, %lld)", op, rows[i],
                              i, (long long)M);
    return NNT_OK;
}

/* ---- gather_rows_backward ---- */

/* ddst [n, H] -> dsrc [M, H]: for each group g (one destination row key[g]) and column h, one
 * thread adds the group's rows ddst[ord[j]] in order of j into dsrc[key[g], h]. */
__global__ void k_gather_bwd(const float *g, const int32_t *ord, const int32_t *start, const int32_t *key, float *d,
                             int64_t ng, int64_t H)
{
    GRID_LOOP(i, ng * H)
    {
        int64_t q = i / H, h = i % H;
        float *out = d + (int64_t)key[q] * H + h;
        float v = *out;
        for (int32_t j = start[q]; j < start[q + 1]; j++) v += g[(int64_t)ord[j] * H + h];
        *out = v;
    }
}

extern "C" nnt_status cuda_gather_rows_backward(void *ctx, const nnt_tensor *ddst, const int32_t *rows, int n,
                                                nnt_tensor *dsrc, nnt_error *err)
{
    cuda_ctx *c = (cuda_ctx *)ctx;
    nnt_status st;
    if ((st = cuda_check("gather_rows_backward", "ddst", ddst, NNT_F32, 0, err)) != NNT_OK) return st;
    if (!dsrc) return NNT_OK;
    if ((st = cuda_check("gather_rows_backward", "dsrc", dsrc, NNT_F32, 0, err)) != NNT_OK) return st;
    int64_t M = dsrc->shape[0], H = nnt_tensor_numel(dsrc) / (M ? M : 1);
    if (n < 0 || nnt_tensor_numel(ddst) < (int64_t)n * H)
        return cuda_error(err, NNT_ERR_SHAPE, "cuda gather_rows_backward: ddst has no room for %d rows of dsrc's %lld",
                          n, (long long)H);
    if ((st = rows_in_range("gather_rows_backward", rows, n, M, err)) != NNT_OK) return st;
    if (n == 0 || H == 0) return NNT_OK;
    CUDA_CHECK(cudaSetDevice(c->device));
    row_groups gr;
    if ((st = group_rows("gather_rows_backward", rows, n, M, &gr, err)) != NNT_OK) return st;
    const int32_t *ord, *start, *key;
    st = stage_groups(c, &gr, n, &ord, &start, &key, err);
    int64_t ng = gr.ng;
    group_free(&gr);
    if (st != NNT_OK) return st;
    k_gather_bwd<<<grid_for(ng * H), CUDA_THREADS, 0, c->stream>>>((const float *)ddst->data, ord, start, key,
                                                                   (float *)dsrc->data, ng, H);
    return cuda_done(c, "gather_rows_backward", err);
}

/* ---- scatter_add_rows_backward, scatter_rows_backward ---- */

/* src [n, H], ddst [M, H], dsrc [n, H] (may be NULL), dscale [n] (may be NULL); rows [n],
 * scale [n] (NULL: 1), keep [n] (NULL: all; scatter_rows: the last i writing each row). One
 * warp per i: dsrc[i] += scale[i] ddst[rows[i]], dscale[i] += src[i] . ddst[rows[i]] (double). */
__global__ void k_scatter_bwd(const float *src, const int32_t *rows, const float *scale, const uint8_t *keep,
                              const float *g, float *d, float *ds, int64_t n, int64_t H)
{
    int lane = threadIdx.x & 31;
    ROW_LOOP(i, n)
    {
        if (keep && !keep[i]) continue; /* overwritten later in the forward */
        const float *gr = g + (int64_t)rows[i] * H;
        float f = scale ? scale[i] : 1.0f;
        if (d) {
            float *dr = d + i * H;
            for (int64_t h = lane; h < H; h += 32) dr[h] += f * gr[h];
        }
        if (ds) {
            double acc = 0.0;
            for (int64_t h = lane; h < H; h += 32) acc += (double)src[i * H + h] * gr[h];
            acc = warp_sum_d(acc);
            if (lane == 0) ds[i] += (float)acc;
        }
    }
}

static nnt_status scatter_backward(cuda_ctx *c, const char *op, const nnt_tensor *src, const int32_t *rows,
                                   const float *scale, int n, const nnt_tensor *ddst, nnt_tensor *dsrc,
                                   nnt_tensor *dscale, int last_only, nnt_error *err)
{
    nnt_status st;
    if ((st = cuda_check(op, "ddst", ddst, NNT_F32, 0, err)) != NNT_OK) return st;
    int64_t M = ddst->shape[0], H = nnt_tensor_numel(ddst) / (M ? M : 1);
    if (n < 0) return cuda_error(err, NNT_ERR_INVALID_ARGUMENT, "cuda %s: %d rows", op, n);
    if (dscale && (st = cuda_check(op, "src", src, NNT_F32, 0, err)) != NNT_OK) return st;
    if (dscale && nnt_tensor_numel(src) < (int64_t)n * H)
        return cuda_error(err, NNT_ERR_SHAPE, "cuda %s: src has no room for %d rows of ddst's %lld", op, n,
                          (long long)H);
    if (dsrc && (dsrc->dtype != NNT_F32 || !dsrc->data || nnt_tensor_numel(dsrc) < (int64_t)n * H))
        return cuda_error(err, NNT_ERR_SHAPE, "cuda %s: dsrc must be F32 with %d rows of ddst's %lld", op, n,
                          (long long)H);
    if (dscale && (dscale->dtype != NNT_F32 || !dscale->data || nnt_tensor_numel(dscale) < n))
        return cuda_error(err, NNT_ERR_SHAPE, "cuda %s: dscale must be F32 [%d]", op, n);
    if ((st = rows_in_range(op, rows, n, M, err)) != NNT_OK) return st;
    if ((!dsrc && !dscale) || n == 0) return NNT_OK;
    CUDA_CHECK(cudaSetDevice(c->device));
    uint8_t *keep = NULL; /* scatter_rows: whether i is the last to write its row */
    if (last_only) {
        int32_t *last = (int32_t *)malloc((size_t)(M ? M : 1) * sizeof *last);
        keep = (uint8_t *)malloc((size_t)n);
        if (!last || !keep) {
            free(last);
            free(keep);
            return cuda_error(err, NNT_ERR_OUT_OF_MEMORY, "cuda %s: no memory", op);
        }
        for (int i = 0; i < n; i++) last[rows[i]] = i;
        for (int i = 0; i < n; i++) keep[i] = last[rows[i]] == i;
        free(last);
    }
    size_t rb = (size_t)n * 4, sb = scale ? (size_t)n * 4 : 0, kb = keep ? (size_t)n : 0;
    void *drows = NULL, *dsc = NULL, *dkeep = NULL;
    st = cuda_stage_begin(c, cuda_stage_size(rb) + (sb ? cuda_stage_size(sb) : 0) + (kb ? cuda_stage_size(kb) : 0),
                          err);
    if (st == NNT_OK) st = cuda_stage_put(c, rows, rb, &drows, err);
    if (st == NNT_OK && scale) st = cuda_stage_put(c, scale, sb, &dsc, err);
    if (st == NNT_OK && keep) st = cuda_stage_put(c, keep, kb, &dkeep, err);
    free(keep);
    if (st != NNT_OK) return st;
    if (H == 0 && !dscale) return NNT_OK;
    k_scatter_bwd<<<grid_rows(n), CUDA_THREADS, 0, c->stream>>>(
        dscale ? (const float *)src->data : NULL, (const int32_t *)drows, (const float *)dsc, (const uint8_t *)dkeep,
        (const float *)ddst->data, dsrc ? (float *)dsrc->data : NULL, dscale ? (float *)dscale->data : NULL,
        (int64_t)n, H);
    return cuda_done(c, op, err);
}

extern "C" nnt_status cuda_scatter_add_rows_backward(void *ctx, const nnt_tensor *src, const int32_t *rows,
                                                     const float *scale, int n, const nnt_tensor *ddst,
                                                     nnt_tensor *dsrc, nnt_tensor *dscale, nnt_error *err)
{
    return scatter_backward((cuda_ctx *)ctx, "scatter_add_rows_backward", src, rows, scale, n, ddst, dsrc, dscale, 0,
                            err);
}

extern "C" nnt_status cuda_scatter_rows_backward(void *ctx, const nnt_tensor *src, const int32_t *rows,
                                                 const float *scale, int n, const nnt_tensor *ddst, nnt_tensor *dsrc,
                                                 nnt_tensor *dscale, nnt_error *err)
{
    return scatter_backward((cuda_ctx *)ctx, "scatter_rows_backward", src, rows, scale, n, ddst, dsrc, dscale, 1,
                            err);
}

/* ---- sum_axis1_backward ---- */

/* dy [M, H] -> dx [M, K, H] += dy for every k; one thread per element of dx */
__global__ void k_sum_axis1_bwd(const float *g, float *d, int64_t M, int64_t K, int64_t H)
{
    GRID_LOOP(i, M * K * H)
    {
        int64_t h = i % H, m = i / (K * H);
        d[i] += g[m * H + h];
    }
}

extern "C" nnt_status cuda_sum_axis1_backward(void *ctx, const nnt_tensor *dy, nnt_tensor *dx, nnt_error *err)
{
    cuda_ctx *c = (cuda_ctx *)ctx;
    nnt_status st;
    if ((st = cuda_check("sum_axis1_backward", "dy", dy, NNT_F32, 0, err)) != NNT_OK) return st;
    if (!dx) return NNT_OK;
    if ((st = cuda_check("sum_axis1_backward", "dx", dx, NNT_F32, 0, err)) != NNT_OK) return st;
    if (dx->ndim < 3) return cuda_error(err, NNT_ERR_SHAPE, "cuda sum_axis1_backward: dx must be [M, K, H]");
    int64_t M = dx->shape[0], K = dx->shape[1], MK = M * K, H = nnt_tensor_numel(dx) / (MK ? MK : 1);
    if (nnt_tensor_numel(dy) != M * H)
        return cuda_error(err, NNT_ERR_SHAPE, "cuda sum_axis1_backward: dy is not [%lld, %lld] as dx [M, K, H] needs",
                          (long long)M, (long long)H);
    if (MK * H == 0) return NNT_OK;
    CUDA_CHECK(cudaSetDevice(c->device));
    k_sum_axis1_bwd<<<grid_for(MK * H), CUDA_THREADS, 0, c->stream>>>((const float *)dy->data, (float *)dx->data, M,
                                                                      K, H);
    return cuda_done(c, "sum_axis1_backward", err);
}

/* ---- scale_rows_backward ---- */

/* dy, dx [n, H]; w read flat: dx[i, h] += w[idx[i]] dy[i, h]; one thread per element */
__global__ void k_scale_rows_dx(const float *w, const int32_t *idx, const float *g, float *d, int64_t n, int64_t H)
{
    GRID_LOOP(i, n * H) d[i] += w[idx[i / H]] * g[i];
}

/* x, dy [n, H] -> dot [n] = x[i] . dy[i] (double sums, stored as float as the cpu adds them);
 * one warp per row */
__global__ void k_row_dots(const float *x, const float *g, float *dot, int64_t n, int64_t H)
{
    int lane = threadIdx.x & 31;
    ROW_LOOP(i, n)
    {
        double acc = 0.0;
        for (int64_t h = lane; h < H; h += 32) acc += (double)x[i * H + h] * g[i * H + h];
        acc = warp_sum_d(acc);
        if (lane == 0) dot[i] = (float)acc;
    }
}

/* dw[key[q]] += dot[ord[j]] for the group's j in order; one thread per group */
__global__ void k_group_add(const float *dot, const int32_t *ord, const int32_t *start, const int32_t *key, float *dw,
                            int64_t ng)
{
    GRID_LOOP(q, ng)
    {
        float v = dw[key[q]];
        for (int32_t j = start[q]; j < start[q + 1]; j++) v += dot[ord[j]];
        dw[key[q]] = v;
    }
}

extern "C" nnt_status cuda_scale_rows_backward(void *ctx, const nnt_tensor *x, const nnt_tensor *w, const int32_t *idx,
                                               int n, const nnt_tensor *dy, nnt_tensor *dx, nnt_tensor *dw,
                                               nnt_error *err)
{
    cuda_ctx *c = (cuda_ctx *)ctx;
    const char *op = "scale_rows_backward";
    nnt_status st;
    if ((st = cuda_check(op, "dy", dy, NNT_F32, 0, err)) != NNT_OK) return st;
    if ((st = cuda_check(op, "w", w, NNT_F32, 0, err)) != NNT_OK) return st;
    if (n < 0) return cuda_error(err, NNT_ERR_INVALID_ARGUMENT, "cuda %s: %d rows", op, n);
    if (dy->ndim < 1 || dy->shape[0] != n)
        return cuda_error(err, NNT_ERR_SHAPE, "cuda %s: dy must have %d rows (its first axis)", op, n);
    int64_t H = n ? nnt_tensor_numel(dy) / n : 0, W = nnt_tensor_numel(w);
    if (n > 0 && !idx) return cuda_error(err, NNT_ERR_INVALID_ARGUMENT, "cuda %s: idx is missing", op);
    for (int i = 0; i < n; i++)
        if (idx[i] < 0 || idx[i] >= W)
            return cuda_error(err, NNT_ERR_INVALID_ARGUMENT, "cuda %s: idx[%d] = %d is outside [0, %lld) (the entries of w)",
                              op, i, idx[i], (long long)W);
    if (dx && (dx->dtype != NNT_F32 || !dx->data || nnt_tensor_numel(dx) != (int64_t)n * H))
        return cuda_error(err, NNT_ERR_SHAPE, "cuda %s: dx must be F32 shaped as dy [%d, %lld]", op, n, (long long)H);
    if (dw && (dw->dtype != NNT_F32 || !dw->data || nnt_tensor_numel(dw) != W))
        return cuda_error(err, NNT_ERR_SHAPE, "cuda %s: dw must be F32 shaped as w (%lld entries)", op, (long long)W);
    if (dw && (st = cuda_check(op, "x", x, NNT_F32, 0, err)) != NNT_OK) return st;
    if (dw && nnt_tensor_numel(x) != (int64_t)n * H)
        return cuda_error(err, NNT_ERR_SHAPE, "cuda %s: x is not shaped as dy [%d, %lld]", op, n, (long long)H);
    if ((!dx && !dw) || n == 0) return NNT_OK;
    CUDA_CHECK(cudaSetDevice(c->device));
    row_groups gr;
    memset(&gr, 0, sizeof gr);
    if (dw && (st = group_rows(op, idx, n, W, &gr, err)) != NNT_OK) return st;
    size_t ib = (size_t)n * 4, ob = dw ? (size_t)n * 4 : 0, sb = dw ? (size_t)(gr.ng + 1) * 4 : 0,
           kb = dw ? (size_t)gr.ng * 4 : 0;
    void *didx = NULL, *dord = NULL, *dstart = NULL, *dkey = NULL;
    st = cuda_stage_begin(c, cuda_stage_size(ib) + (dw ? cuda_stage_size(ob) + cuda_stage_size(sb) + cuda_stage_size(kb) : 0),
                          err);
    if (st == NNT_OK) st = cuda_stage_put(c, idx, ib, &didx, err);
    if (st == NNT_OK && dw) st = cuda_stage_put(c, gr.ord, ob, &dord, err);
    if (st == NNT_OK && dw) st = cuda_stage_put(c, gr.start, sb, &dstart, err);
    if (st == NNT_OK && dw) st = cuda_stage_put(c, gr.key, kb, &dkey, err);
    int64_t ng = gr.ng;
    group_free(&gr);
    if (st != NNT_OK) return st;
    if (dx && H > 0) {
        k_scale_rows_dx<<<grid_for((int64_t)n * H), CUDA_THREADS, 0, c->stream>>>(
            (const float *)w->data, (const int32_t *)didx, (const float *)dy->data, (float *)dx->data, (int64_t)n, H);
        CUDA_LAUNCHED();
    }
    if (dw) {
        void *scratch;
        if ((st = cuda_scratch(c, (size_t)n * sizeof(float), &scratch, err)) != NNT_OK) return st;
        float *dot = (float *)scratch;
        k_row_dots<<<grid_rows(n), CUDA_THREADS, 0, c->stream>>>((const float *)x->data, (const float *)dy->data, dot,
                                                                 (int64_t)n, H);
        CUDA_LAUNCHED();
        k_group_add<<<grid_for(ng), CUDA_THREADS, 0, c->stream>>>(dot, (const int32_t *)dord, (const int32_t *)dstart,
                                                                  (const int32_t *)dkey, (float *)dw->data, ng);
    }
    return cuda_done(c, op, err);
}
