/* cuda_elementwise.cu - the cuda backend's row-wise and elementwise kernels: RMSNorm, embedding
 * look-up (rows decoded from the table's stored encoding), add, axis swap, copy, fill, scale,
 * SwiGLU.
 *
 * Outputs flagged NNT_TENSOR_BF16_VALUES take the cpu backend's roundings (cpu_elementwise.c):
 * rms_norm R(w R(x / rms)), with NNT_TENSOR_BF16_ONCE R(w x / rms), without a gain R(x R(1 / rms));
 * embedding R(decoded row); add R(a + b); scale R(f x); swiglu act = R(silu(g)), out = R(act u).
 * Axis swaps, copies and fills move values and never round (nor does the cpu backend). */
#include "cuda_weights.cuh"

/* x [M, D] F32, w [D] F32/BF16/F16 as stored or NULL, y [M, D] (may alias x); one warp per row.
 * y = w * x / sqrt(mean(x^2) + eps), the sum of squares in double (Zhang & Sennrich 2019).
 * r16: bfloat16 results - the normalised value rounded before the gain multiplies it (not with
 * once: one rounding of the float32 product), without a gain 1 / rms rounded first. */
__global__ void k_rms_norm(const float *x, const void *w, int wdt, float eps, float *y, int64_t M, int64_t D, int r16,
                           int once)
{
    int lane = threadIdx.x & 31;
    ROW_LOOP(m, M)
    {
        const float *xr = x + m * D;
        float *yr = y + m * D;
        double ss = 0.0;
        for (int64_t d = lane; d < D; d += 32) ss += (double)xr[d] * xr[d];
        ss = warp_sum_d(ss);
        float inv = 1.0f / sqrtf((float)(ss / (double)D) + eps);
        if (r16 && !w) inv = round_bf16(inv);
        for (int64_t d = lane; d < D; d += 32) {
            float v = xr[d] * inv;
            if (r16 && w && !once) v = round_bf16(v);
            v = w ? load_any(w, wdt, d) * v : v;
            yr[d] = r16_if(r16, v);
        }
    }
}

extern "C" nnt_status cuda_rms_norm(void *ctx, const nnt_tensor *x, const nnt_tensor *w, float eps, nnt_tensor *y,
                                    nnt_error *err)
{
    cuda_ctx *c = (cuda_ctx *)ctx;
    nnt_status st;
    if ((st = cuda_check("rms_norm", "x", x, NNT_F32, 0, err)) != NNT_OK) return st;
    if ((st = cuda_check("rms_norm", "y", y, NNT_F32, 0, err)) != NNT_OK) return st;
    int64_t D = x->shape[x->ndim - 1];
    int64_t M = nnt_tensor_numel(x) / (D ? D : 1);
    if (nnt_tensor_numel(y) != M * D) return cuda_error(err, NNT_ERR_SHAPE, "cuda rms_norm: y size differs from x");
    if (w && (w->ndim != 1 || w->shape[0] != D))
        return cuda_error(err, NNT_ERR_SHAPE, "cuda rms_norm: gain has %lld entries, rows have %lld",
                          (long long)(w->ndim ? w->shape[0] : 0), (long long)D);
    if (w && (st = cuda_check_float_weight("rms_norm", "the gain", w, err)) != NNT_OK) return st;
    if (M == 0 || D == 0) return NNT_OK;
    CUDA_CHECK(cudaSetDevice(c->device));
    k_rms_norm<<<grid_rows(M), CUDA_THREADS, 0, c->stream>>>((const float *)x->data, w ? w->data : NULL,
                                                             w ? (int)w->dtype : 0, eps, (float *)y->data, M, D,
                                                             cuda_bf16(y), cuda_bf16_once(y));
    return cuda_done(c, "rms_norm", err);
}

/* table [V, H] in any weight encoding, ids [M] I32 -> y [M, H] F32, each gathered element decoded
 * and multiplied by its block's scale (the cpu backend's decode, bit for bit), rounded to
 * bfloat16 when round_y; an id outside [0, V) is reported through flag (count, lowest position)
 * and its row is left zero. */
__global__ void k_embedding(cuda_wview t, const int32_t *ids, float *y, int64_t M, int round_y, int *flag)
{
    const int64_t H = t.cols, V = t.rows;
    GRID_LOOP(i, M * H)
    {
        int64_t m = i / H, h = i % H;
        int32_t id = ids[m];
        if (id < 0 || id >= V) {
            y[i] = 0.0f;
            if (h == 0) {
                atomicAdd(&flag[0], 1);
                atomicMin(&flag[1], (int)m);
            }
            continue;
        }
        float v = dec_at_rt((int)t.dtype, wrow_rt(t, id), h);
        if (t.scale) v *= scale_get(t.scale, (int)t.scale_dtype, wgrid_row(t, id) + h / t.block_cols);
        y[i] = round_y ? round_bf16(v) : v;
    }
}

extern "C" nnt_status cuda_embedding(void *ctx, const nnt_tensor *table, const nnt_tensor *ids, nnt_tensor *y,
                                     nnt_error *err)
{
    cuda_ctx *c = (cuda_ctx *)ctx;
    nnt_status st;
    cuda_wview tv;
    if ((st = cuda_weight_view("embedding", "table", table, &tv, err)) != NNT_OK) return st;
    if ((st = cuda_check("embedding", "ids", ids, NNT_I32, 0, err)) != NNT_OK) return st;
    if ((st = cuda_check("embedding", "y", y, NNT_F32, 0, err)) != NNT_OK) return st;
    int64_t V = table->shape[0], H = table->shape[1], M = nnt_tensor_numel(ids);
    if (nnt_tensor_numel(y) != M * H)
        return cuda_error(err, NNT_ERR_SHAPE, "cuda embedding: y is not [%lld, %lld]", (long long)M, (long long)H);
    if (M == 0 || H == 0) return NNT_OK;
    if (M > INT32_MAX) return cuda_error(err, NNT_ERR_UNSUPPORTED, "cuda embedding: more than 2^31 ids");
    CUDA_CHECK(cudaSetDevice(c->device));
    /* flag[0]: bad ids counted from 0; flag[1]: the lowest bad position, from 0x7f7f7f7f down */
    if ((st = cuda_clear_flag(c, err)) != NNT_OK) return st;
    CUDA_CHECK(cudaMemsetAsync(c->flag + 1, 0x7f, sizeof(int), c->stream));
    k_embedding<<<grid_for(M * H), CUDA_THREADS, 0, c->stream>>>(tv, (const int32_t *)ids->data, (float *)y->data, M,
                                                                 cuda_bf16(y), c->flag);
    if ((st = cuda_done(c, "embedding", err)) != NNT_OK) return st;
    /* the ids live on the device: reading the flag is the one wait this op needs */
    int f[4];
    if ((st = cuda_read_flag(c, f, err)) != NNT_OK) return st;
    if (f[0] > 0) {
        int32_t bad = 0;
        CUDA_CHECK(cudaMemcpyAsync(&bad, (const int32_t *)ids->data + f[1], sizeof bad, cudaMemcpyDeviceToHost,
                                   c->stream));
        CUDA_CHECK(cudaStreamSynchronize(c->stream));
        return cuda_error(err, NNT_ERR_INVALID_ARGUMENT, "cuda embedding: id %d at %d is outside [0, %lld)", bad, f[1],
                          (long long)V);
    }
    return NNT_OK;
}

/* y = a + b (y may alias a or b), rounded to bfloat16 when r16 */
__global__ void k_add(const float *a, const float *b, float *y, int64_t n, int r16)
{
    GRID_LOOP(i, n) y[i] = r16_if(r16, a[i] + b[i]);
}

extern "C" nnt_status cuda_add(void *ctx, const nnt_tensor *a, const nnt_tensor *b, nnt_tensor *y, nnt_error *err)
{
    cuda_ctx *c = (cuda_ctx *)ctx;
    int64_t n = nnt_tensor_numel(a);
    if (a->dtype != NNT_F32 || b->dtype != NNT_F32 || y->dtype != NNT_F32 || nnt_tensor_numel(b) != n ||
        nnt_tensor_numel(y) != n)
        return cuda_error(err, NNT_ERR_SHAPE, "cuda add: operands must be F32 of equal size");
    if (n == 0) return NNT_OK;
    CUDA_CHECK(cudaSetDevice(c->device));
    k_add<<<grid_for(n), CUDA_THREADS, 0, c->stream>>>((const float *)a->data, (const float *)b->data,
                                                       (float *)y->data, n, cuda_bf16(y));
    return cuda_done(c, "add", err);
}

/* x [A, B, C, D] -> y [A, C, B, D], 4-byte elements; one thread per element of y */
__global__ void k_swap12(const uint32_t *x, uint32_t *y, int64_t A, int64_t B, int64_t C, int64_t D)
{
    GRID_LOOP(i, A * B * C * D)
    {
        int64_t d = i % D, r = i / D;
        int64_t b = r % B; /* y's axis 2 */
        r /= B;
        int64_t cc = r % C; /* y's axis 1 */
        int64_t a = r / C;
        y[i] = x[((a * B + b) * C + cc) * D + d];
    }
}

extern "C" nnt_status cuda_swap12(void *ctx, const nnt_tensor *x, nnt_tensor *y, nnt_error *err)
{
    cuda_ctx *c = (cuda_ctx *)ctx;
    if (x->ndim != 4 || y->ndim != 4 || x->dtype != y->dtype || x->shape[0] != y->shape[0] ||
        x->shape[1] != y->shape[2] || x->shape[2] != y->shape[1] || x->shape[3] != y->shape[3])
        return cuda_error(err, NNT_ERR_SHAPE, "cuda swap12: y must be x with axes 1 and 2 swapped");
    if (x->dtype != NNT_F32 && x->dtype != NNT_I32)
        return cuda_error(err, NNT_ERR_UNSUPPORTED, "cuda swap12: only 4-byte elements");
    int64_t A = x->shape[0], B = x->shape[1], C = x->shape[2], D = x->shape[3], n = A * B * C * D;
    if (n == 0) return NNT_OK;
    CUDA_CHECK(cudaSetDevice(c->device));
    k_swap12<<<grid_for(n), CUDA_THREADS, 0, c->stream>>>((const uint32_t *)x->data, (uint32_t *)y->data, A, B, C, D);
    return cuda_done(c, "swap12", err);
}

/* Copies src into dst (same dtype and element count); overlapping ranges behave as memmove. */
extern "C" nnt_status cuda_copy(void *ctx, const nnt_tensor *src, nnt_tensor *dst, nnt_error *err)
{
    cuda_ctx *c = (cuda_ctx *)ctx;
    if (src->dtype != dst->dtype || nnt_tensor_numel(src) != nnt_tensor_numel(dst))
        return cuda_error(err, NNT_ERR_SHAPE, "cuda copy: source and destination differ in dtype or size");
    size_t es = cuda_dtype_size(src->dtype);
    if (!es) return cuda_error(err, NNT_ERR_UNSUPPORTED, "cuda copy: dtype %d", (int)src->dtype);
    size_t bytes = (size_t)nnt_tensor_numel(src) * es;
    if (bytes == 0 || src->data == dst->data) return NNT_OK;
    CUDA_CHECK(cudaSetDevice(c->device));
    const char *s = (const char *)src->data;
    char *d = (char *)dst->data;
    if (s < d + bytes && d < s + bytes) { /* overlapping: through the scratch */
        void *tmp;
        nnt_status st = cuda_scratch(c, bytes, &tmp, err);
        if (st != NNT_OK) return st;
        CUDA_CHECK(cudaMemcpyAsync(tmp, s, bytes, cudaMemcpyDeviceToDevice, c->stream));
        s = (const char *)tmp;
    }
    CUDA_CHECK(cudaMemcpyAsync(d, s, bytes, cudaMemcpyDeviceToDevice, c->stream));
    return cuda_done(c, "copy", err);
}

__global__ void k_fill(float *t, float v, int64_t n)
{
    GRID_LOOP(i, n) t[i] = v;
}

extern "C" nnt_status cuda_fill(void *ctx, nnt_tensor *t, float value, nnt_error *err)
{
    cuda_ctx *c = (cuda_ctx *)ctx;
    if (t->dtype != NNT_F32) return cuda_error(err, NNT_ERR_SHAPE, "cuda fill: F32 only");
    int64_t n = nnt_tensor_numel(t);
    if (n == 0) return NNT_OK;
    CUDA_CHECK(cudaSetDevice(c->device));
    k_fill<<<grid_for(n), CUDA_THREADS, 0, c->stream>>>((float *)t->data, value, n);
    return cuda_done(c, "fill", err);
}

/* y = f x (y may alias x), rounded to bfloat16 when r16 */
__global__ void k_scale(const float *x, float f, float *y, int64_t n, int r16)
{
    GRID_LOOP(i, n) y[i] = r16_if(r16, f * x[i]);
}

extern "C" nnt_status cuda_scale(void *ctx, const nnt_tensor *x, float factor, nnt_tensor *y, nnt_error *err)
{
    cuda_ctx *c = (cuda_ctx *)ctx;
    int64_t n = nnt_tensor_numel(x);
    if (x->dtype != NNT_F32 || y->dtype != NNT_F32 || nnt_tensor_numel(y) != n)
        return cuda_error(err, NNT_ERR_SHAPE, "cuda scale: x and y must be F32 of equal size");
    if (n == 0) return NNT_OK;
    CUDA_CHECK(cudaSetDevice(c->device));
    k_scale<<<grid_for(n), CUDA_THREADS, 0, c->stream>>>((const float *)x->data, factor, (float *)y->data, n,
                                                         cuda_bf16(y));
    return cuda_done(c, "scale", err);
}

/* gate (or NULL), up, act (optional; an input when gate is NULL), out: [n] F32.
 * act = silu(min(gate, L)), out = act * clamp(up, -L, L); L = 0: no clamp (Shazeer 2020).
 * r16 (out holds bfloat16 values): silu's result rounded - that is what act receives - and the
 * product rounded; an input act is used as it is. */
__global__ void k_swiglu(const float *g, const float *u, float limit, float *a, float *o, int64_t n, int r16)
{
    GRID_LOOP(i, n)
    {
        float uv = u[i];
        if (limit > 0.0f) uv = uv < -limit ? -limit : uv > limit ? limit : uv;
        float s;
        if (g) {
            float gv = g[i];
            if (limit > 0.0f) gv = gv < limit ? gv : limit;
            s = r16_if(r16, gv / (1.0f + expf(-gv)));
            if (a) a[i] = s;
        } else {
            s = a[i];
        }
        o[i] = r16_if(r16, s * uv);
    }
}

extern "C" nnt_status cuda_swiglu(void *ctx, const nnt_tensor *gate, const nnt_tensor *up, float limit,
                                  nnt_tensor *act, nnt_tensor *out, nnt_error *err)
{
    cuda_ctx *c = (cuda_ctx *)ctx;
    if (!gate && !act)
        return cuda_error(err, NNT_ERR_INVALID_ARGUMENT, "cuda swiglu: needs gate or an input activation");
    int64_t n = gate ? nnt_tensor_numel(gate) : nnt_tensor_numel(act);
    if ((gate && gate->dtype != NNT_F32) || up->dtype != NNT_F32 || out->dtype != NNT_F32 ||
        nnt_tensor_numel(up) != n || nnt_tensor_numel(out) != n ||
        (act && (act->dtype != NNT_F32 || nnt_tensor_numel(act) != n)))
        return cuda_error(err, NNT_ERR_SHAPE, "cuda swiglu: gate, up, act and out must be F32 of equal size");
    if (n == 0) return NNT_OK;
    CUDA_CHECK(cudaSetDevice(c->device));
    k_swiglu<<<grid_for(n), CUDA_THREADS, 0, c->stream>>>(gate ? (const float *)gate->data : NULL,
                                                          (const float *)up->data, limit,
                                                          act ? (float *)act->data : NULL, (float *)out->data, n,
                                                          cuda_bf16(out));
    return cuda_done(c, "swiglu", err);
}
