/* cpu_gemm.c - the cpu backend's products with more rows than the register kernels serve
 * (prefill, experts that receive many tokens): y[M, N] = x[M, K] . w[N, K]^T with the weight in
 * any encoding, never widened as a whole.
 *
 * The GEMM library was chosen by measurement (bench/gemm/bench_gemm.c, report in bench/results/):
 * oneDNN's matmul primitive on plain row-major operands ran about twice OpenBLAS 0.3.21's sgemm
 * on an AVX-512 CPU that OpenBLAS does not recognise (it falls back to its AVX2 kernels), and its
 * bfloat16 matmul twice that again where the CPU has AVX512-BF16. So:
 *   - an F32 weight in float32 goes to one matmul as it is;
 *   - any other weight is decoded panel by panel (every thread decoding its share of a panel's
 *     rows) into a float32 or bfloat16 panel that one matmul multiplies;
 *   - bfloat16 products (NNT_TENSOR_BF16_PRODUCTS / _VALUES) round x, and any weight value that
 *     is not already a bfloat16 number, to bfloat16 - as torch holds a bfloat16 copy of the
 *     weight - and use oneDNN's bfloat16 matmul where the CPU runs one, else the float32 matmul
 *     on those bfloat16 values (the same products, float32 accumulation either way). The
 *     bfloat16 matmul reads a subnormal operand (magnitude under 2^-126) as zero, as the CPU's
 *     bfloat16 dot-product instruction does; the few-row kernels keep such weights.
 * Without oneDNN (or when it refuses a shape), OpenBLAS's sgemm takes each thread's own panel. */
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif
#ifdef NNT_HAVE_DNNL
#include <oneapi/dnnl/dnnl.h>
#include <oneapi/dnnl/dnnl_debug.h>
#endif

#include "cpu_internal.h"

#define PANEL_BYTES ((size_t)4 << 20) /* a decoded panel (float32), shared by the threads */
#define THREAD_PANEL_MAX_ROWS 256     /* OpenBLAS path: weight rows a thread decodes per sgemm */

/* 1 when every value of w, decoded and scaled, is already a bfloat16 number: BF16 itself, and FP8
 * or FP4 codes times power-of-two (E8M0) scales. */
static int exact_in_bf16(const cpu_weight *w)
{
    if (w->dtype == NNT_BF16) return 1;
    return (w->dtype == NNT_F8_E4M3 || w->dtype == NNT_F4_E2M1) && w->scale_dtype == NNT_F8_E8M0;
}

#ifdef NNT_HAVE_DNNL
/* Rows [r0, r1) of w decoded into panel [r1 - r0, K] by the calling team, rounded to bfloat16
 * values when `round`. */
static void decode_rows(const cpu_ctx *c, const cpu_weight *w, int64_t r0, int64_t r1, float *panel, int round)
{
    const cpu_kernels *k = c->k;
    int64_t K = w->cols, step = 8;
#pragma omp parallel for num_threads(c->threads) schedule(static) if ((r1 - r0) * K > CPU_PARALLEL_MIN)
    for (int64_t r = r0; r < r1; r += step) {
        int64_t e = r + step < r1 ? r + step : r1;
        k->decode(w, r, e, panel + (r - r0) * K, K);
        if (round) k->round_bf16(panel + (r - r0) * K, panel + (r - r0) * K, (e - r) * K);
    }
}

/* y[M, N] (rows ldy apart) = x[M, K] . w[N, K]^T, x and w of type dt (rows K apart), on oneDNN's
 * matmul (oneDNN caches the primitive of a repeated shape). Call it with ldy = N: oneDNN 2.6
 * serves a strided destination with a slower, poorly threaded kernel (measured 3-4x slower). */
/* The batched form: `batch` products, x [M, K] and y [M, N] contiguous per product (batch
 * strides M K and M N), w [N, K] per product when wt (w^T multiplies), else [K, N]; batch stride
 * of w N K. */
static dnnl_status_t bmatmul(cpu_ctx *c, dnnl_data_type_t dt, int64_t batch, const void *x, const void *w, int wt,
                             int64_t wstride, int64_t M, int64_t N, int64_t K, float *y, int64_t ldy)
{
    dnnl_memory_desc_t sm, wm, dm;
    dnnl_dims_t sd = {batch, M, K}, ss = {M * K, K, 1}, wd = {batch, K, N}, dd = {batch, M, N}, ds = {M * ldy, ldy, 1};
    dnnl_dims_t ws = {wstride, 1, K};
    if (!wt) {
        ws[1] = N;
        ws[2] = 1;
    }
    int nd = batch > 1 ? 3 : 2, o1 = batch > 1 ? 0 : 1; /* two dimensions for one product */
    dnnl_matmul_desc_t md;
    dnnl_primitive_desc_t pd = NULL;
    dnnl_primitive_t prim = NULL;
    dnnl_memory_t a = NULL, b = NULL, o = NULL;
    dnnl_status_t s = dnnl_memory_desc_init_by_strides(&sm, nd, sd + o1, dt, ss + o1);
    if (s == dnnl_success) s = dnnl_memory_desc_init_by_strides(&wm, nd, wd + o1, dt, ws + o1);
    if (s == dnnl_success) s = dnnl_memory_desc_init_by_strides(&dm, nd, dd + o1, dnnl_f32, ds + o1);
    if (s == dnnl_success) s = dnnl_matmul_desc_init(&md, &sm, &wm, NULL, &dm);
    if (s == dnnl_success) s = dnnl_primitive_desc_create(&pd, &md, NULL, c->dnnl_engine, NULL);
    if (s == dnnl_success) s = dnnl_primitive_create(&prim, pd);
    if (s == dnnl_success) s = dnnl_memory_create(&a, &sm, c->dnnl_engine, (void *)x);
    if (s == dnnl_success) s = dnnl_memory_create(&b, &wm, c->dnnl_engine, (void *)w);
    if (s == dnnl_success) s = dnnl_memory_create(&o, &dm, c->dnnl_engine, y);
    if (s == dnnl_success) {
        dnnl_exec_arg_t args[3] = {{DNNL_ARG_SRC, a}, {DNNL_ARG_WEIGHTS, b}, {DNNL_ARG_DST, o}};
#ifdef _OPENMP
        omp_set_num_threads(c->threads); /* oneDNN's team size */
#endif
        s = dnnl_primitive_execute(prim, c->dnnl_stream, 3, args);
        if (s == dnnl_success) s = dnnl_stream_wait(c->dnnl_stream);
    }
    dnnl_memory_destroy(a);
    dnnl_memory_destroy(b);
    dnnl_memory_destroy(o);
    dnnl_primitive_destroy(prim);
    dnnl_primitive_desc_destroy(pd);
    return s;
}

static dnnl_status_t matmul(cpu_ctx *c, dnnl_data_type_t dt, const void *x, const void *w, int64_t M, int64_t N,
                            int64_t K, float *y, int64_t ldy)
{
    return bmatmul(c, dt, 1, x, w, 1, N * K, M, N, K, y, ldy);
}

/* y[M, N] += x[M, K] . w[K, N], all float32 and row-major, x's rows ldx apart (a column block of
 * a wider matrix), w and y contiguous: one matmul with an accumulating (sum) post-op, the
 * backward's dx += dy . w on a decoded panel of weight rows. */
static dnnl_status_t matmul_acc(cpu_ctx *c, const float *x, int64_t ldx, const float *w, int64_t M, int64_t N,
                                int64_t K, float *y)
{
    dnnl_memory_desc_t sm, wm, dm;
    dnnl_dims_t sd = {M, K}, ss = {ldx, 1}, wd = {K, N}, ws = {N, 1}, dd = {M, N}, ds = {N, 1};
    dnnl_matmul_desc_t md;
    dnnl_primitive_attr_t attr = NULL;
    dnnl_post_ops_t po = NULL;
    dnnl_primitive_desc_t pd = NULL;
    dnnl_primitive_t prim = NULL;
    dnnl_memory_t a = NULL, b = NULL, o = NULL;
    dnnl_status_t s = dnnl_memory_desc_init_by_strides(&sm, 2, sd, dnnl_f32, ss);
    if (s == dnnl_success) s = dnnl_memory_desc_init_by_strides(&wm, 2, wd, dnnl_f32, ws);
    if (s == dnnl_success) s = dnnl_memory_desc_init_by_strides(&dm, 2, dd, dnnl_f32, ds);
    if (s == dnnl_success) s = dnnl_matmul_desc_init(&md, &sm, &wm, NULL, &dm);
    if (s == dnnl_success) s = dnnl_post_ops_create(&po);
    if (s == dnnl_success) s = dnnl_post_ops_append_sum(po, 1.0f);
    if (s == dnnl_success) s = dnnl_primitive_attr_create(&attr);
    if (s == dnnl_success) s = dnnl_primitive_attr_set_post_ops(attr, po);
    if (s == dnnl_success) s = dnnl_primitive_desc_create(&pd, &md, attr, c->dnnl_engine, NULL);
    if (s == dnnl_success) s = dnnl_primitive_create(&prim, pd);
    if (s == dnnl_success) s = dnnl_memory_create(&a, &sm, c->dnnl_engine, (void *)x);
    if (s == dnnl_success) s = dnnl_memory_create(&b, &wm, c->dnnl_engine, (void *)w);
    if (s == dnnl_success) s = dnnl_memory_create(&o, &dm, c->dnnl_engine, y);
    if (s == dnnl_success) {
        dnnl_exec_arg_t args[3] = {{DNNL_ARG_SRC, a}, {DNNL_ARG_WEIGHTS, b}, {DNNL_ARG_DST, o}};
#ifdef _OPENMP
        omp_set_num_threads(c->threads);
#endif
        s = dnnl_primitive_execute(prim, c->dnnl_stream, 3, args);
        if (s == dnnl_success) s = dnnl_stream_wait(c->dnnl_stream);
    }
    dnnl_memory_destroy(a);
    dnnl_memory_destroy(b);
    dnnl_memory_destroy(o);
    dnnl_primitive_destroy(prim);
    dnnl_primitive_desc_destroy(pd);
    dnnl_primitive_attr_destroy(attr);
    dnnl_post_ops_destroy(po);
    return s;
}

static nnt_status dnnl_fail(nnt_error *err, dnnl_status_t s, const char *what)
{
    return cpu_error(err, NNT_ERR_BACKEND, "cpu linear: oneDNN's matmul on %s failed: %s", what, dnnl_status2str(s));
}

/* One panel's product into its columns [n0, n0 + nr) of y [M, N]: through the contiguous tile
 * `out` [M, nr] unless the panel is the whole weight. */
static dnnl_status_t panel_product(cpu_ctx *c, dnnl_data_type_t dt, const void *x, const void *panel, int64_t M,
                                   int64_t nr, int64_t K, float *y, int64_t n0, int64_t N, float *out)
{
    if (nr == N) return matmul(c, dt, x, panel, M, nr, K, y, N);
    dnnl_status_t s = matmul(c, dt, x, panel, M, nr, K, out, nr);
    if (s != dnnl_success) return s;
#pragma omp parallel for num_threads(c->threads) schedule(static) if (M * nr > CPU_PARALLEL_MIN)
    for (int64_t m = 0; m < M; m++) memcpy(y + m * N + n0, out + m * nr, (size_t)nr * sizeof *y);
    return dnnl_success;
}

/* The product on oneDNN; *done = 0 (and NNT_OK) when oneDNN has no matmul for it here. */
static nnt_status gemm_dnnl(cpu_ctx *c, const float *x, int64_t M, const cpu_weight *w, int bf16, float *y, int *done,
                            nnt_error *err)
{
    const cpu_kernels *k = c->k;
    int64_t N = w->rows, K = w->cols, rows = (int64_t)(PANEL_BYTES / sizeof(float)) / K;
    rows = rows < 64 ? 64 : rows / 64 * 64;
    if (rows > N) rows = N;
    int round = bf16 && !exact_in_bf16(w);
    nnt_status st;
    dnnl_status_t s = dnnl_success;
    float *out = NULL;
    *done = 0;
    if (rows < N && (st = cpu_buffer(c, CPU_BUF_OUT, (size_t)(M * rows) * sizeof(float), (void **)&out, err)) != NNT_OK)
        return st;
    if (bf16 && c->dnnl_bf16) {
        uint16_t *xb, *pb = NULL;
        if ((st = cpu_buffer(c, CPU_BUF_X16, (size_t)(M * K) * 2, (void **)&xb, err)) != NNT_OK) return st;
        if (w->dtype != NNT_BF16 &&
            (st = cpu_buffer(c, CPU_BUF_PANEL16, (size_t)(rows * K) * 2, (void **)&pb, err)) != NNT_OK)
            return st;
        int64_t step = 65536;
#pragma omp parallel for num_threads(c->threads) schedule(static) if (M * K > step)
        for (int64_t i = 0; i < M * K; i += step) k->pack_bf16(x + i, xb + i, M * K - i < step ? M * K - i : step);
        if (w->dtype == NNT_BF16) {
            s = matmul(c, dnnl_bf16, xb, w->data, M, N, K, y, N);
        } else {
            for (int64_t n0 = 0; n0 < N && s == dnnl_success; n0 += rows) {
                int64_t nr = N - n0 < rows ? N - n0 : rows, per = 8;
                /* decoded, scaled and rounded to bfloat16 in registers, rows shared by the team */
#pragma omp parallel for num_threads(c->threads) schedule(static) if (nr * K > CPU_PARALLEL_MIN)
                for (int64_t r = 0; r < nr; r += per)
                    k->decode_bf16(w, n0 + r, n0 + (r + per < nr ? r + per : nr), pb + r * K, K);
                s = panel_product(c, dnnl_bf16, xb, pb, M, nr, K, y, n0, N, out);
            }
        }
        if (s != dnnl_success) return dnnl_fail(err, s, "bfloat16 operands");
        *done = 1;
        return NNT_OK;
    }
    if (w->dtype == NNT_F32 && !round) {
        s = matmul(c, dnnl_f32, x, w->data, M, N, K, y, N);
    } else {
        float *panel;
        if ((st = cpu_buffer(c, CPU_BUF_PANEL, (size_t)(rows * K) * sizeof(float), (void **)&panel, err)) != NNT_OK)
            return st;
        for (int64_t n0 = 0; n0 < N && s == dnnl_success; n0 += rows) {
            int64_t nr = N - n0 < rows ? N - n0 : rows;
            decode_rows(c, w, n0, n0 + nr, panel, round);
            s = panel_product(c, dnnl_f32, x, panel, M, nr, K, y, n0, N, out);
        }
    }
    if (s == dnnl_unimplemented) return NNT_OK;
    if (s != dnnl_success) return dnnl_fail(err, s, "float32 operands");
    *done = 1;
    return NNT_OK;
}
#endif

/* OpenBLAS: an F32 weight in one sgemm; any other decoded by each thread into its own panel of
 * rows for a single-threaded sgemm (called inside the parallel region, OpenBLAS's OpenMP build
 * runs it on the calling thread). */
static nnt_status gemm_openblas(cpu_ctx *c, const float *x, int64_t M, const cpu_weight *w, int bf16, float *y,
                                nnt_error *err)
{
    int64_t N = w->rows, K = w->cols;
    int round = bf16 && !exact_in_bf16(w);
    if (w->dtype == NNT_F32 && !round) {
        cpu_sgemm(c, 0, 1, (int)M, (int)N, (int)K, 1.0f, x, (int)K,
                    (const float *)w->data, (int)K, 0.0f, y, (int)N);
        return NNT_OK;
    }
    int64_t rows = (N + c->threads - 1) / c->threads;
    rows = (rows + 15) / 16 * 16;
    rows = rows > THREAD_PANEL_MAX_ROWS ? THREAD_PANEL_MAX_ROWS : rows < 16 ? 16 : rows;
    int64_t chunks = (N + rows - 1) / rows;
    int threads = chunks < c->threads ? (int)chunks : c->threads;
    nnt_status st;
    for (int t = 0; t < threads; t++) {
        float *p;
        if ((st = cpu_panel(c, t, (size_t)(rows * K), &p, err)) != NNT_OK) return st;
    }
    float **panel = c->panel;
    const cpu_kernels *k = c->k;
#pragma omp parallel num_threads(threads)
    {
#ifdef _OPENMP
        int t = omp_get_thread_num();
#else
        int t = 0;
#endif
#pragma omp for schedule(dynamic, 1)
        for (int64_t ch = 0; ch < chunks; ch++) {
            int64_t n0 = ch * rows, nr = N - n0 < rows ? N - n0 : rows;
            k->decode(w, n0, n0 + nr, panel[t], K);
            if (round) k->round_bf16(panel[t], panel[t], nr * K);
            cpu_sgemm(c, 0, 1, (int)M, (int)nr, (int)K, 1.0f, x, (int)K, panel[t],
                        (int)K, 0.0f, y + n0, (int)N);
        }
    }
    return NNT_OK;
}

nnt_status cpu_gemm(cpu_ctx *c, const float *x, int64_t M, const cpu_weight *w, int bf16, float *y, nnt_error *err)
{
    nnt_status st;
    const float *xr = x;
    /* oneDNN's bfloat16 product packs x to bfloat16 with the same rounding (k_pack_bf16), so x
     * is rounded first only for the paths that read it as float32 */
    int packs = 0;
#ifdef NNT_HAVE_DNNL
    packs = bf16 && c->dnnl_engine && c->dnnl_bf16;
#endif
    if (bf16 && !packs && (st = cpu_round_x(c, x, M * w->cols, &xr, err)) != NNT_OK) return st;
#ifdef NNT_HAVE_DNNL
    if (c->dnnl_engine) {
        int done = 0;
        st = gemm_dnnl(c, xr, M, w, bf16, y, &done, err);
        if (st != NNT_OK || done) return st;
    }
#endif
    if (bf16 && xr == x && (st = cpu_round_x(c, x, M * w->cols, &xr, err)) != NNT_OK) return st;
    return gemm_openblas(c, xr, M, w, bf16, y, err);
}

nnt_status cpu_bmm(cpu_ctx *c, int bf16, int64_t batch, int64_t M, int64_t N, int64_t K, const float *x,
                   const float *w, int wt, int64_t wstride, float *y, int *done, nnt_error *err)
{
    *done = 0;
    int64_t nk = N * K;
    if (wstride <= 0) wstride = nk;
#ifdef NNT_HAVE_DNNL
    if (!c->dnnl_engine) return NNT_OK;
    dnnl_status_t s;
    if (bf16 && c->dnnl_bf16) {
        uint16_t *xb, *wb;
        nnt_status st;
        if ((st = cpu_buffer(c, CPU_BUF_X16, (size_t)(batch * M * K) * 2, (void **)&xb, err)) != NNT_OK ||
            (st = cpu_buffer(c, CPU_BUF_PANEL16, (size_t)(batch * N * K) * 2, (void **)&wb, err)) != NNT_OK)
            return st;
        const cpu_kernels *k = c->k;
        /* x in chunks of `step`; w per product (its products wstride apart), packed contiguous */
        int64_t nx = batch * M * K, step = 65536, cx = (nx + step - 1) / step, cwb = (nk + step - 1) / step,
                cw = batch * cwb;
#pragma omp parallel for num_threads(c->threads) schedule(static)
        for (int64_t ch = 0; ch < cx + cw; ch++) {
            if (ch < cx) {
                int64_t i = ch * step;
                k->pack_bf16(x + i, xb + i, nx - i < step ? nx - i : step);
            } else {
                int64_t b = (ch - cx) / cwb, i = (ch - cx) % cwb * step;
                k->pack_bf16(w + b * wstride + i, wb + b * nk + i, nk - i < step ? nk - i : step);
            }
        }
        s = bmatmul(c, dnnl_bf16, batch, xb, wb, wt, nk, M, N, K, y, N);
    } else {
        s = bmatmul(c, dnnl_f32, batch, x, w, wt, wstride, M, N, K, y, N);
    }
    if (s == dnnl_unimplemented) return NNT_OK;
    if (s != dnnl_success) return dnnl_fail(err, s, "attention operands");
    *done = 1;
#else
    (void)c, (void)bf16, (void)batch, (void)M, (void)N, (void)K, (void)x, (void)w, (void)wt, (void)wstride, (void)y,
        (void)err;
#endif
    return NNT_OK;
}

nnt_status cpu_gemm_acc(cpu_ctx *c, int64_t M, int64_t N, int64_t K, const float *x, int64_t ldx, const float *w,
                        float *y, int *done, nnt_error *err)
{
    *done = 0;
#ifdef NNT_HAVE_DNNL
    if (!c->dnnl_engine) return NNT_OK;
    dnnl_status_t s = matmul_acc(c, x, ldx, w, M, N, K, y);
    if (s == dnnl_unimplemented) return NNT_OK;
    if (s != dnnl_success)
        return cpu_error(err, NNT_ERR_BACKEND, "cpu linear_backward: oneDNN's matmul failed: %s", dnnl_status2str(s));
    *done = 1;
#else
    (void)c, (void)M, (void)N, (void)K, (void)x, (void)ldx, (void)w, (void)y, (void)err;
#endif
    return NNT_OK;
}

int cpu_needs_rounding(const cpu_weight *w)
{
    return !exact_in_bf16(w);
}
