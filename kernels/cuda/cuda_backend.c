/* cuda_backend.c - the cuda kernel backend's descriptor: options, device and stream set-up,
 * memory, weights, the staging of host-memory arguments, error reporting, and the op table that
 * points at the cuda_*.cu kernels. Numerics mirror the cpu backend (float32 throughout).
 *
 * Weights: prepare_weight keeps every float weight (F32, BF16, F16) as F32 on the device, so
 * kernels read one dtype and BF16 weights are widened exactly once. The cost is memory: a BF16
 * or F16 checkpoint takes twice its size on the device. I32/I64 tensors are copied as they are.
 * Families never call release_weight (ABI note in the report), so the context keeps every
 * weight it made and frees what is left when it is destroyed. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_internal.h"
#include "nnt/nnt_plugin.h"

#define STAGE_ALIGN 256
#define FLAG_INTS 4
#define PIN_COPY_MAX ((size_t)1 << 20) /* cuda_copy_in: larger copies go direct, with a wait */

nnt_status cuda_error(nnt_error *err, nnt_status st, const char *fmt, ...)
{
    if (err) {
        err->status = st;
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
    }
    return st;
}

static const char *base_name(const char *file)
{
    const char *s = strrchr(file, '/');
    return s ? s + 1 : file;
}

nnt_status cuda_rt_error(nnt_error *err, cudaError_t e, const char *call, const char *file, int line)
{
    (void)cudaGetLastError(); /* a non-sticky error must not resurface at the next check */
    nnt_status st = e == cudaErrorMemoryAllocation ? NNT_ERR_OUT_OF_MEMORY : NNT_ERR_BACKEND;
    return cuda_error(err, st, "cuda: %s failed at %s:%d: %s (%s)", call, base_name(file), line, cudaGetErrorString(e),
                      cudaGetErrorName(e));
}

nnt_status cuda_blas_error(nnt_error *err, cublasStatus_t s, const char *call, const char *file, int line)
{
    (void)cudaGetLastError();
    nnt_status st = s == CUBLAS_STATUS_ALLOC_FAILED ? NNT_ERR_OUT_OF_MEMORY : NNT_ERR_BACKEND;
    return cuda_error(err, st, "cuda: %s failed at %s:%d: %s", call, base_name(file), line, cublasGetStatusString(s));
}

size_t cuda_dtype_size(nnt_dtype dt)
{
    switch (dt) {
    case NNT_F32:
    case NNT_I32: return 4;
    case NNT_I64:
    case NNT_F64: return 8;
    case NNT_F16:
    case NNT_BF16:
    case NNT_I16: return 2;
    case NNT_U8:
    case NNT_I8:
    case NNT_BOOL:
    case NNT_F8_E4M3:
    case NNT_F8_E5M2:
    case NNT_F8_E8M0: return 1;
    default: return 0;
    }
}

nnt_status cuda_check(const char *op, const char *arg, const nnt_tensor *t, nnt_dtype dt, int ndim, nnt_error *err)
{
    if (!t || !t->data) return cuda_error(err, NNT_ERR_INVALID_ARGUMENT, "cuda %s: %s is missing", op, arg);
    if (dt != NNT_DTYPE_INVALID && t->dtype != dt)
        return cuda_error(err, NNT_ERR_SHAPE, "cuda %s: %s has dtype %d, expected %d", op, arg, (int)t->dtype, (int)dt);
    if (ndim > 0 && t->ndim != ndim)
        return cuda_error(err, NNT_ERR_SHAPE, "cuda %s: %s has %d dimensions, expected %d", op, arg, t->ndim, ndim);
    return NNT_OK;
}

nnt_status cuda_malloc(cuda_ctx *c, size_t bytes, void **ptr, const char *what, nnt_error *err)
{
    *ptr = NULL;
    cudaError_t e = cudaMalloc(ptr, bytes ? bytes : STAGE_ALIGN);
    if (e == cudaSuccess) return NNT_OK;
    *ptr = NULL;
    (void)cudaGetLastError();
    if (e == cudaErrorMemoryAllocation) {
        size_t free_b = 0, total_b = 0;
        (void)cudaMemGetInfo(&free_b, &total_b);
        (void)cudaGetLastError();
        return cuda_error(err, NNT_ERR_OUT_OF_MEMORY,
                          "cuda: out of device memory: cudaMalloc of %zu bytes for %s failed on device %d "
                          "(%zu of %zu bytes free)",
                          bytes, what, c->device, free_b, total_b);
    }
    return cuda_rt_error(err, e, "cudaMalloc", __FILE__, __LINE__);
}

/* Frees device memory that kernels still queued on the stream may read. */
static void release(cuda_ctx *c, void *p)
{
    if (!p) return;
    (void)cudaStreamSynchronize(c->stream);
    (void)cudaFree(p);
    (void)cudaGetLastError();
}

nnt_status cuda_scratch(cuda_ctx *c, size_t bytes, void **ptr, nnt_error *err)
{
    if (bytes > c->scratch_cap || !c->scratch) {
        release(c, c->scratch);
        c->scratch = NULL;
        c->scratch_cap = 0;
        size_t want = bytes < ((size_t)1 << 20) ? ((size_t)1 << 20) : bytes;
        nnt_status st = cuda_malloc(c, want, &c->scratch, "the scratch buffer", err);
        if (st != NNT_OK) return st;
        c->scratch_cap = want;
    }
    *ptr = c->scratch;
    return NNT_OK;
}

size_t cuda_stage_size(size_t bytes)
{
    return (bytes + STAGE_ALIGN - 1) & ~(size_t)(STAGE_ALIGN - 1);
}

/* The next page-locked slot, at least `bytes` long, once its previous copy has been made. */
static nnt_status take_pin(cuda_ctx *c, size_t bytes, struct cuda_pin **out, nnt_error *err)
{
    struct cuda_pin *p = &c->pins[c->pin_next];
    c->pin_next = (c->pin_next + 1) % CUDA_PIN_SLOTS;
    if (p->pending) {
        CUDA_CHECK(cudaEventSynchronize(p->copied));
        p->pending = 0;
    }
    if (bytes > p->cap || !p->host) {
        if (p->host) (void)cudaFreeHost(p->host);
        p->host = NULL;
        p->cap = 0;
        size_t want = bytes < ((size_t)64 << 10) ? ((size_t)64 << 10) : bytes + bytes / 2;
        void *h = NULL;
        cudaError_t e = cudaMallocHost(&h, want);
        if (e != cudaSuccess) {
            (void)cudaGetLastError();
            return cuda_error(err, e == cudaErrorMemoryAllocation ? NNT_ERR_OUT_OF_MEMORY : NNT_ERR_BACKEND,
                              "cuda: cudaMallocHost of %zu bytes (page-locked staging) failed: %s", want,
                              cudaGetErrorString(e));
        }
        p->host = h;
        p->cap = want;
    }
    *out = p;
    return NNT_OK;
}

/* Queues the copy of `bytes` at slot offset `off` to dev and marks the slot busy until done. */
static nnt_status pin_copy(cuda_ctx *c, struct cuda_pin *p, size_t off, void *dev, size_t bytes, nnt_error *err)
{
    CUDA_CHECK(cudaMemcpyAsync(dev, p->host + off, bytes, cudaMemcpyHostToDevice, c->stream));
    CUDA_CHECK(cudaEventRecord(p->copied, c->stream));
    p->pending = 1;
    return NNT_OK;
}

nnt_status cuda_stage_begin(cuda_ctx *c, size_t total, nnt_error *err)
{
    c->stage_used = 0;
    c->pin = NULL;
    if (total > c->stage_cap || !c->stage) {
        release(c, c->stage);
        c->stage = NULL;
        c->stage_cap = 0;
        size_t want = total < ((size_t)64 << 10) ? ((size_t)64 << 10) : total + total / 2;
        void *p;
        nnt_status st = cuda_malloc(c, want, &p, "host arguments (staging)", err);
        if (st != NNT_OK) return st;
        c->stage = p;
        c->stage_cap = want;
    }
    return take_pin(c, total, &c->pin, err);
}

nnt_status cuda_stage_put(cuda_ctx *c, const void *host, size_t bytes, void **dev, nnt_error *err)
{
    size_t need = cuda_stage_size(bytes), off = c->stage_used;
    if (!c->pin || off + need > c->stage_cap || off + need > c->pin->cap)
        return cuda_error(err, NNT_ERR_INTERNAL, "cuda: staging overflow (%zu + %zu bytes beyond the reserve)", off, need);
    *dev = c->stage + off;
    c->stage_used += need;
    if (bytes == 0) return NNT_OK;
    memcpy(c->pin->host + off, host, bytes);
    return pin_copy(c, c->pin, off, *dev, bytes, err);
}

nnt_status cuda_copy_in(cuda_ctx *c, void *dev, const void *host, size_t bytes, nnt_error *err)
{
    if (bytes == 0) return NNT_OK;
    if (bytes <= PIN_COPY_MAX) {
        struct cuda_pin *p = NULL;
        nnt_status st = take_pin(c, bytes, &p, err);
        if (st != NNT_OK) return st;
        memcpy(p->host, host, bytes);
        return pin_copy(c, p, 0, dev, bytes, err);
    }
    CUDA_CHECK(cudaMemcpyAsync(dev, host, bytes, cudaMemcpyHostToDevice, c->stream));
    CUDA_CHECK(cudaStreamSynchronize(c->stream));
    return NNT_OK;
}

nnt_status cuda_done(cuda_ctx *c, const char *op, nnt_error *err)
{
    cudaError_t e = cudaGetLastError();
    if (e == cudaErrorNotReady) e = cudaSuccess; /* a query's answer, not a failure */
    if (e == cudaSuccess && c->sync_each_op) e = cudaStreamSynchronize(c->stream);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return cuda_error(err, NNT_ERR_BACKEND, "cuda %s: %s (%s)", op, cudaGetErrorString(e), cudaGetErrorName(e));
    }
    return NNT_OK;
}

nnt_status cuda_clear_flag(cuda_ctx *c, nnt_error *err)
{
    CUDA_CHECK(cudaMemsetAsync(c->flag, 0, FLAG_INTS * sizeof(int), c->stream));
    return NNT_OK;
}

nnt_status cuda_read_flag(cuda_ctx *c, int out[4], nnt_error *err)
{
    CUDA_CHECK(cudaMemcpyAsync(out, c->flag, FLAG_INTS * sizeof(int), cudaMemcpyDeviceToHost, c->stream));
    CUDA_CHECK(cudaStreamSynchronize(c->stream));
    return NNT_OK;
}

/* ---- the descriptor's functions ---- */

static void destroy_ctx(cuda_ctx *c)
{
    if (!c) return;
    if (c->stream) (void)cudaStreamSynchronize(c->stream);
    for (int i = 0; i < c->n_weights; i++) (void)cudaFree(c->weights[i]);
    free(c->weights);
    free(c->weight_sizes);
    if (c->stage) (void)cudaFree(c->stage);
    for (int i = 0; i < CUDA_PIN_SLOTS; i++) {
        if (c->pins[i].host) (void)cudaFreeHost(c->pins[i].host);
        if (c->pins[i].copied) (void)cudaEventDestroy(c->pins[i].copied);
    }
    if (c->scratch) (void)cudaFree(c->scratch);
    if (c->flag) (void)cudaFree(c->flag);
    if (c->blas) (void)cublasDestroy(c->blas);
    if (c->stream) (void)cudaStreamDestroy(c->stream);
    (void)cudaGetLastError();
    free(c);
}

static nnt_status parse_flag(const char *key, const char *val, long lo, long hi, long *out, nnt_error *err)
{
    char *end;
    errno = 0;
    long v = strtol(val, &end, 10);
    if (errno || end == val || *end || v < lo || v > hi)
        return cuda_error(err, NNT_ERR_CONFIG, "option %s = '%s' is not an integer in %ld..%ld", key, val, lo, hi);
    *out = v;
    return NNT_OK;
}

static nnt_status setup(cuda_ctx *c, nnt_error *err)
{
    CUDA_CHECK(cudaSetDevice(c->device));
    CUDA_CHECK(cudaDeviceGetAttribute(&c->smem_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, c->device));
    CUDA_CHECK(cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking));
    CUBLAS_CHECK(cublasCreate(&c->blas));
    CUBLAS_CHECK(cublasSetStream(c->blas, c->stream));
    /* CUBLAS_DEFAULT_MATH never lowers float32 products to TF32 (that takes
     * CUBLAS_TF32_TENSOR_OP_MATH); the results stay comparable with the cpu backend. */
    CUBLAS_CHECK(cublasSetMathMode(c->blas, CUBLAS_DEFAULT_MATH));
    for (int i = 0; i < CUDA_PIN_SLOTS; i++)
        CUDA_CHECK(cudaEventCreateWithFlags(&c->pins[i].copied, cudaEventDisableTiming));
    void *f;
    nnt_status st = cuda_malloc(c, FLAG_INTS * sizeof(int), &f, "the error flag", err);
    if (st != NNT_OK) return st;
    c->flag = f;
    CUDA_CHECK(cudaMemset(c->flag, 0, FLAG_INTS * sizeof(int)));
    return cuda_probe_kernels(c, err);
}

static nnt_status cuda_create(const nnt_backend_options *opt, void **out, nnt_error *err)
{
    *out = NULL;
    long device = 0, sync = 0;
    for (int i = 0; i < opt->count; i++) {
        nnt_status st;
        if (strcmp(opt->keys[i], "device") == 0)
            st = parse_flag("device", opt->values[i], 0, 1023, &device, err);
        else if (strcmp(opt->keys[i], "sync") == 0)
            st = parse_flag("sync", opt->values[i], 0, 1, &sync, err);
        else
            st = cuda_error(err, NNT_ERR_CONFIG, "unknown option '%s' (the cuda backend takes: device, sync)", opt->keys[i]);
        if (st != NNT_OK) return st;
    }
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return cuda_error(err, NNT_ERR_BACKEND, "no CUDA device: %s (%s)", cudaGetErrorString(e), cudaGetErrorName(e));
    }
    if (count <= 0) return cuda_error(err, NNT_ERR_BACKEND, "no CUDA device: the CUDA runtime reports none");
    if (device >= count)
        return cuda_error(err, NNT_ERR_CONFIG, "option device = %ld, but there %s only %d CUDA device%s (0..%d)", device,
                          count == 1 ? "is" : "are", count, count == 1 ? "" : "s", count - 1);
    cuda_ctx *c = calloc(1, sizeof *c);
    if (!c) return cuda_error(err, NNT_ERR_OUT_OF_MEMORY, "no memory");
    c->device = (int)device;
    c->sync_each_op = (int)sync;
    nnt_status st = setup(c, err);
    if (st != NNT_OK) {
        destroy_ctx(c);
        return st;
    }
    *out = c;
    return NNT_OK;
}

static void cuda_destroy(void *ctx)
{
    cuda_ctx *c = ctx;
    if (!c) return;
    (void)cudaSetDevice(c->device);
    destroy_ctx(c);
}

static nnt_status cuda_alloc(void *ctx, size_t bytes, void **ptr, nnt_error *err)
{
    cuda_ctx *c = ctx;
    CUDA_CHECK(cudaSetDevice(c->device));
    return cuda_malloc(c, bytes, ptr, "an activation arena block", err);
}

static void cuda_free(void *ctx, void *ptr)
{
    cuda_ctx *c = ctx;
    (void)cudaSetDevice(c->device);
    release(c, ptr);
}

static nnt_status cuda_upload(void *ctx, void *dst, const void *src_host, size_t bytes, nnt_error *err)
{
    cuda_ctx *c = ctx;
    CUDA_CHECK(cudaSetDevice(c->device));
    return cuda_copy_in(c, dst, src_host, bytes, err);
}

static nnt_status cuda_download(void *ctx, void *dst_host, const void *src, size_t bytes, nnt_error *err)
{
    cuda_ctx *c = ctx;
    CUDA_CHECK(cudaSetDevice(c->device));
    if (bytes == 0) return NNT_OK;
    CUDA_CHECK(cudaMemcpyAsync(dst_host, src, bytes, cudaMemcpyDeviceToHost, c->stream));
    CUDA_CHECK(cudaStreamSynchronize(c->stream));
    return NNT_OK;
}

static nnt_status remember_weight(cuda_ctx *c, void *p, size_t bytes, nnt_error *err)
{
    if (c->n_weights == c->cap_weights) {
        int cap = c->cap_weights ? 2 * c->cap_weights : 256;
        void **g = realloc(c->weights, (size_t)cap * sizeof *g);
        if (!g) return cuda_error(err, NNT_ERR_OUT_OF_MEMORY, "no memory");
        c->weights = g;
        size_t *z = realloc(c->weight_sizes, (size_t)cap * sizeof *z);
        if (!z) return cuda_error(err, NNT_ERR_OUT_OF_MEMORY, "no memory");
        c->weight_sizes = z;
        c->cap_weights = cap;
    }
    c->weight_sizes[c->n_weights] = bytes;
    c->weights[c->n_weights++] = p;
    c->weight_total += bytes;
    return NNT_OK;
}

static nnt_status cuda_prepare_weight(void *ctx, const nnt_tensor *host, nnt_tensor *out, nnt_error *err)
{
    cuda_ctx *c = ctx;
    if (!host || !out) return cuda_error(err, NNT_ERR_INVALID_ARGUMENT, "cuda prepare_weight: missing tensor");
    nnt_dtype dt = host->dtype;
    if (dt != NNT_F32 && dt != NNT_BF16 && dt != NNT_F16 && dt != NNT_I32 && dt != NNT_I64)
        return cuda_error(err, NNT_ERR_UNSUPPORTED, "cuda: weights of dtype %d are not supported", (int)dt);
    int64_t n = nnt_tensor_numel(host);
    if (n < 0 || (n > 0 && !host->data))
        return cuda_error(err, NNT_ERR_INVALID_ARGUMENT, "cuda prepare_weight: a tensor of %lld elements without data",
                          (long long)n);
    CUDA_CHECK(cudaSetDevice(c->device));
    int widen = dt == NNT_BF16 || dt == NNT_F16;
    size_t es = cuda_dtype_size(dt), out_bytes = (size_t)n * (widen ? sizeof(float) : es);
    void *dev;
    nnt_status st = cuda_malloc(c, out_bytes, &dev, "a weight", err);
    if (st != NNT_OK) return st;
    if (!widen) {
        st = cuda_copy_in(c, dev, host->data, out_bytes, err);
    } else {
        /* raw 16-bit values through the scratch a slice at a time, widened on the device */
        const int64_t slice = (int64_t)1 << 24;
        for (int64_t i0 = 0; i0 < n && st == NNT_OK; i0 += slice) {
            int64_t k = n - i0 < slice ? n - i0 : slice;
            void *raw;
            st = cuda_scratch(c, (size_t)k * es, &raw, err);
            if (st == NNT_OK) st = cuda_copy_in(c, raw, (const char *)host->data + (size_t)i0 * es, (size_t)k * es, err);
            if (st == NNT_OK) st = cuda_widen(c, raw, dt, (float *)dev + i0, k, err);
        }
    }
    if (st == NNT_OK) st = remember_weight(c, dev, out_bytes, err);
    if (st != NNT_OK) {
        release(c, dev);
        return st;
    }
    *out = *host;
    out->dtype = widen ? NNT_F32 : dt;
    out->data = dev;
    out->device = 1;
    return NNT_OK;
}

static void cuda_release_weight(void *ctx, nnt_tensor *w)
{
    cuda_ctx *c = ctx;
    if (!w || !w->data) return;
    for (int i = 0; i < c->n_weights; i++)
        if (c->weights[i] == w->data) {
            (void)cudaSetDevice(c->device);
            release(c, w->data);
            c->weight_total -= c->weight_sizes[i];
            c->n_weights--;
            c->weights[i] = c->weights[c->n_weights];
            c->weight_sizes[i] = c->weight_sizes[c->n_weights];
            w->data = NULL;
            return;
        }
    /* a view into a prepared weight (a slice, an alias): the owner frees it */
}

static size_t cuda_weight_bytes(void *ctx)
{
    return ((const cuda_ctx *)ctx)->weight_total;
}

static const nnt_backend_ops cuda_ops = {
    /* .alloc = */ cuda_alloc,
    /* .free = */ cuda_free,
    /* .upload = */ cuda_upload,
    /* .download = */ cuda_download,
    /* .prepare_weight = */ cuda_prepare_weight,
    /* .release_weight = */ cuda_release_weight,
    /* .linear = */ cuda_linear,
    /* .rms_norm = */ cuda_rms_norm,
    /* .embedding = */ cuda_embedding,
    /* .add = */ cuda_add,
    /* .swap12 = */ cuda_swap12,
    /* .copy = */ cuda_copy,
    /* .fill = */ cuda_fill,
    /* .scale = */ cuda_scale,
    /* .rope = */ cuda_rope,
    /* .attn_scores = */ cuda_attn_scores,
    /* .softmax = */ cuda_softmax,
    /* .attn_mix = */ cuda_attn_mix,
    /* .swiglu = */ cuda_swiglu,
    /* .route = */ cuda_route,
    /* .gather_rows = */ cuda_gather_rows,
    /* .scatter_add_rows = */ cuda_scatter_add_rows,
    /* .scatter_rows = */ cuda_scatter_rows,
    /* .sum_axis1 = */ cuda_sum_axis1,
    /* .conv1d_causal = */ cuda_conv1d_causal,
    /* .kda_gate = */ cuda_kda_gate,
    /* .sigmoid = */ cuda_sigmoid,
    /* .delta_rule = */ cuda_delta_rule,
    /* .rms_norm_gated = */ cuda_rms_norm_gated,
    /* .copy_cols = */ cuda_copy_cols,
    /* .zero_rows = */ cuda_zero_rows,
    /* .hyper_connection = */ cuda_hyper_connection,
    /* .hyper_mix = */ cuda_hyper_mix,
    /* .hyper_head = */ cuda_hyper_head,
    /* .compress = */ cuda_compress,
    /* .indexer_scores = */ cuda_indexer_scores,
    /* .weight_bytes = */ cuda_weight_bytes,
};

NNT_PLUGIN_EXPORT const nnt_backend_descriptor nnt_backend_plugin = {
    /* .header = */ NNT_PLUGIN_HEADER(nnt_backend_descriptor, NNT_PLUGIN_BACKEND, "cuda", "0.1.0",
                                      "NVIDIA GPU kernels (cuBLAS GEMM, own CUDA kernels; float32)"),
    /* .host_memory = */ 0,
    /* .create = */ cuda_create,
    /* .destroy = */ cuda_destroy,
    /* .ops = */ &cuda_ops,
};
