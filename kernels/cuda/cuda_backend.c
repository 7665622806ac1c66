/* cuda_backend.c - the cuda kernel backend's descriptor: options, device and stream set-up,
 * memory, weights, the staging of host-memory arguments, error reporting, and the op table that
 * points at the cuda_*.cu kernels. Numerics mirror the cpu backend: float32 accumulation, and in
 * bfloat16 mode the cpu's roundings op by op - bfloat16 products (NNT_TENSOR_BF16_PRODUCTS on a
 * weight or NNT_TENSOR_BF16_VALUES on the output) round the activations, the weight's values and
 * the results; every other op writing an output flagged NNT_TENSOR_BF16_VALUES takes the
 * intermediate roundings nnt_backend.h lists for it (and the NNT_TENSOR_BF16_ONCE / _SHIFTED
 * styles), and the forget gate and indexer scores stay float32. Each cuda_*.cu file's header says
 * how its ops round.
 *
 * Weights: prepare_weight uploads every weight in its stored encoding - F32, BF16, F16, FP8 e4m3
 * and FP4 e2m1 codes as they are, an encoded weight's scale grid next to them in a second
 * allocation, I32/I64 as they are - and never keeps a widened copy; the kernels decode as they
 * read (cuda_weights.cuh). weight_bytes counts the bytes uploaded (codes plus grids). Families
 * release what they prepared when they unload; the context frees whatever is left when it is
 * destroyed. Views of a prepared weight (nnt_tensor_rows) point into its allocations and need
 * no release. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_internal.h"
#include "nnt/nnt_plugin.h"
#include <nnt/nnt_version.h> /* the plugin reports nnt's version */

#define STAGE_ALIGN 256
#define FLAG_INTS 4
#define PIN_COPY_MAX ((size_t)1 << 20) /* cuda_copy_in: larger copies go direct, with a wait */
#define DEFAULT_TILE_BYTES (64L << 20)   /* option tile_bytes: a decoded weight tile of `linear` */

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

nnt_status cuda_check_float_weight(const char *op, const char *arg, const nnt_tensor *t, nnt_error *err)
{
    if (!t || !t->data) return cuda_error(err, NNT_ERR_INVALID_ARGUMENT, "cuda %s: %s is missing", op, arg);
    if (t->dtype != NNT_F32 && t->dtype != NNT_BF16 && t->dtype != NNT_F16)
        return cuda_error(err, NNT_ERR_UNSUPPORTED, "cuda %s: %s has dtype %d; expected F32, BF16 or F16", op, arg,
                          (int)t->dtype);
    return NNT_OK;
}

static int scale_dtype_ok(nnt_dtype dt)
{
    return dt == NNT_F32 || dt == NNT_BF16 || dt == NNT_F16 || dt == NNT_F8_E8M0;
}

/* Why an encoded tensor's block description is unusable, or NULL when it is fine. */
static const char *encoding_problem(const nnt_tensor *t)
{
    if (t->ndim < 2) return "an encoded weight needs at least 2 dimensions";
    if (!t->scale) return "an encoded weight without block scales";
    if (t->block_rows <= 0 || t->block_cols <= 0) return "block sizes are not set";
    if (!scale_dtype_ok(t->scale_dtype)) return "the scale dtype is not F32, BF16, F16 or F8_E8M0";
    if (t->block_row0 < 0 || t->block_row0 >= t->block_rows) return "block_row0 is outside [0, block_rows)";
    if (t->dtype == NNT_F4_E2M1 && (t->shape[t->ndim - 1] % 2 || t->block_cols % 2))
        return "FP4 needs an even number of columns and of columns per block";
    return NULL;
}

nnt_status cuda_weight_view(const char *op, const char *arg, const nnt_tensor *t, cuda_wview *out, nnt_error *err)
{
    if (!t || !t->data) return cuda_error(err, NNT_ERR_INVALID_ARGUMENT, "cuda %s: %s is missing", op, arg);
    if (t->ndim != 2)
        return cuda_error(err, NNT_ERR_SHAPE, "cuda %s: %s has %d dimensions, expected 2", op, arg, t->ndim);
    int encoded = t->dtype == NNT_F8_E4M3 || t->dtype == NNT_F4_E2M1;
    if (!encoded && t->dtype != NNT_F32 && t->dtype != NNT_BF16 && t->dtype != NNT_F16)
        return cuda_error(err, NNT_ERR_UNSUPPORTED,
                          "cuda %s: %s has dtype %d; expected F32, BF16, F16, or F8_E4M3 / F4_E2M1 with block scales",
                          op, arg, (int)t->dtype);
    const char *why = encoded ? encoding_problem(t) : NULL;
    if (why) return cuda_error(err, NNT_ERR_UNSUPPORTED, "cuda %s: %s (dtype %d): %s", op, arg, (int)t->dtype, why);
    memset(out, 0, sizeof *out);
    out->data = t->data;
    out->dtype = t->dtype;
    out->rows = t->shape[0];
    out->cols = t->shape[1];
    out->block_rows = out->block_cols = out->grid_cols = 1;
    if (encoded) {
        out->scale = t->scale;
        out->scale_dtype = t->scale_dtype;
        out->block_rows = t->block_rows;
        out->block_cols = t->block_cols;
        out->row0 = t->block_row0;
        out->grid_cols = (out->cols + out->block_cols - 1) / out->block_cols;
    }
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
    for (int i = 0; i < c->n_weights; i++) {
        (void)cudaFree(c->weights[i].data);
        if (c->weights[i].scale) (void)cudaFree(c->weights[i].scale);
    }
    free(c->weights);
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
    long device = 0, sync = 0, tile = DEFAULT_TILE_BYTES;
    for (int i = 0; i < opt->count; i++) {
        nnt_status st;
        if (strcmp(opt->keys[i], "device") == 0)
            st = parse_flag("device", opt->values[i], 0, 1023, &device, err);
        else if (strcmp(opt->keys[i], "sync") == 0)
            st = parse_flag("sync", opt->values[i], 0, 1, &sync, err);
        else if (strcmp(opt->keys[i], "tile_bytes") == 0)
            st = parse_flag("tile_bytes", opt->values[i], 1, (long)1 << 40, &tile, err);
        else
            st = cuda_error(err, NNT_ERR_CONFIG, "unknown option '%s' (the cuda backend takes: device, sync, tile_bytes)",
                            opt->keys[i]);
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
    c->tile_bytes = (size_t)tile;
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

static nnt_status remember_weight(cuda_ctx *c, void *data, void *scale, size_t bytes, nnt_error *err)
{
    if (c->n_weights == c->cap_weights) {
        int cap = c->cap_weights ? 2 * c->cap_weights : 256;
        struct cuda_weight *g = realloc(c->weights, (size_t)cap * sizeof *g);
        if (!g) return cuda_error(err, NNT_ERR_OUT_OF_MEMORY, "cuda prepare_weight: no host memory for the weight list");
        c->weights = g;
        c->cap_weights = cap;
    }
    c->weights[c->n_weights++] = (struct cuda_weight){data, scale, bytes};
    c->weight_total += bytes;
    return NNT_OK;
}

/* host [lead.., R, C] in any weight encoding -> out: the same description over device copies of
 * the codes (nnt_dtype_span bytes) and, for F8_E4M3 / F4_E2M1, of the scale grid
 * [lead.., ceil((R + block_row0) / block_rows), ceil(C / block_cols)]. */
static nnt_status cuda_prepare_weight(void *ctx, const nnt_tensor *host, nnt_tensor *out, nnt_error *err)
{
    cuda_ctx *c = ctx;
    if (!host || !out) return cuda_error(err, NNT_ERR_INVALID_ARGUMENT, "cuda prepare_weight: missing tensor");
    nnt_dtype dt = host->dtype;
    int encoded = dt == NNT_F8_E4M3 || dt == NNT_F4_E2M1;
    if (!encoded && dt != NNT_F32 && dt != NNT_BF16 && dt != NNT_F16 && dt != NNT_I32 && dt != NNT_I64)
        return cuda_error(err, NNT_ERR_UNSUPPORTED,
                          "cuda prepare_weight: weights of dtype %d are not supported (F32, BF16, F16, I32, I64, or "
                          "F8_E4M3 / F4_E2M1 with block scales)",
                          (int)dt);
    if (host->ndim < 0 || host->ndim > NNT_MAX_DIMS)
        return cuda_error(err, NNT_ERR_SHAPE, "cuda prepare_weight: a tensor of %d dimensions", host->ndim);
    const char *why = encoded ? encoding_problem(host) : NULL;
    if (why) return cuda_error(err, NNT_ERR_UNSUPPORTED, "cuda prepare_weight: dtype %d: %s", (int)dt, why);
    int64_t n = nnt_tensor_numel(host);
    if (n < 0 || (n > 0 && !host->data))
        return cuda_error(err, NNT_ERR_INVALID_ARGUMENT, "cuda prepare_weight: a tensor of %lld elements without data",
                          (long long)n);
    size_t data_bytes = nnt_dtype_span(dt, n), scale_bytes = 0;
    if (encoded) {
        int64_t R = host->shape[host->ndim - 2], C = host->shape[host->ndim - 1], lead = 1;
        for (int i = 0; i < host->ndim - 2; i++) lead *= host->shape[i];
        int64_t sr = (R + host->block_row0 + host->block_rows - 1) / host->block_rows;
        int64_t sc = (C + host->block_cols - 1) / host->block_cols;
        scale_bytes = nnt_dtype_span(host->scale_dtype, lead * sr * sc);
    }
    CUDA_CHECK(cudaSetDevice(c->device));
    void *dev = NULL, *dscale = NULL;
    nnt_status st = cuda_malloc(c, data_bytes, &dev, "a weight", err);
    if (st == NNT_OK && encoded) st = cuda_malloc(c, scale_bytes, &dscale, "a weight's block scales", err);
    if (st == NNT_OK) st = cuda_copy_in(c, dev, host->data, data_bytes, err);
    if (st == NNT_OK && encoded) st = cuda_copy_in(c, dscale, host->scale, scale_bytes, err);
    if (st == NNT_OK) st = remember_weight(c, dev, dscale, data_bytes + scale_bytes, err);
    if (st != NNT_OK) {
        release(c, dev);
        release(c, dscale);
        return st;
    }
    *out = *host; /* dtype, shape, block sizes, block_row0 and flags as given */
    out->data = dev;
    out->scale = encoded ? dscale : NULL;
    out->device = 1;
    return NNT_OK;
}

static void cuda_release_weight(void *ctx, nnt_tensor *w)
{
    cuda_ctx *c = ctx;
    if (!w || !w->data) return;
    for (int i = 0; i < c->n_weights; i++)
        if (c->weights[i].data == w->data) {
            (void)cudaSetDevice(c->device);
            release(c, c->weights[i].data);
            release(c, c->weights[i].scale);
            c->weight_total -= c->weights[i].bytes;
            c->weights[i] = c->weights[--c->n_weights];
            w->data = NULL;
            w->scale = NULL;
            return;
        }
    /* a view into a prepared weight (a slice, an alias): the owner frees it */
}

static size_t cuda_weight_bytes(void *ctx)
{
    return ((const cuda_ctx *)ctx)->weight_total;
}

static const nnt_backend_ops cuda_ops = {
    .struct_size = sizeof(nnt_backend_ops),
    .alloc = cuda_alloc,
    .free = cuda_free,
    .upload = cuda_upload,
    .download = cuda_download,
    .prepare_weight = cuda_prepare_weight,
    .release_weight = cuda_release_weight,
    .linear = cuda_linear,
    .rms_norm = cuda_rms_norm,
    .embedding = cuda_embedding,
    .add = cuda_add,
    .swap12 = cuda_swap12,
    .copy = cuda_copy,
    .fill = cuda_fill,
    .scale = cuda_scale,
    .rope = cuda_rope,
    .attn_scores = cuda_attn_scores,
    .softmax = cuda_softmax,
    .attn_mix = cuda_attn_mix,
    .swiglu = cuda_swiglu,
    .route = cuda_route,
    .gather_rows = cuda_gather_rows,
    .scatter_add_rows = cuda_scatter_add_rows,
    .scatter_rows = cuda_scatter_rows,
    .sum_axis1 = cuda_sum_axis1,
    .conv1d_causal = cuda_conv1d_causal,
    .kda_gate = cuda_kda_gate,
    .sigmoid = cuda_sigmoid,
    .delta_rule = cuda_delta_rule,
    .rms_norm_gated = cuda_rms_norm_gated,
    .copy_cols = cuda_copy_cols,
    .zero_rows = cuda_zero_rows,
    .hyper_connection = cuda_hyper_connection,
    .hyper_mix = cuda_hyper_mix,
    .hyper_head = cuda_hyper_head,
    .compress = cuda_compress,
    .indexer_scores = cuda_indexer_scores,
    .weight_bytes = cuda_weight_bytes,
    .scale_rows = cuda_scale_rows,
    /* backward (cuda_backward*.cu): every entry the cpu backend has. An entry this table does
     * not name (one the ABI grows later) stays NULL, and the core refuses a gradient through
     * such an op by its name. */
    .linear_backward = cuda_linear_backward,
    .rms_norm_backward = cuda_rms_norm_backward,
    .accumulate = cuda_accumulate,
    .swap12_backward = cuda_swap12_backward,
    .rope_backward = cuda_rope_backward,
    .attn_scores_backward = cuda_attn_scores_backward,
    .softmax_backward = cuda_softmax_backward,
    .attn_mix_backward = cuda_attn_mix_backward,
    .swiglu_backward = cuda_swiglu_backward,
    .route_backward = cuda_route_backward,
    .gather_rows_backward = cuda_gather_rows_backward,
    .scatter_add_rows_backward = cuda_scatter_add_rows_backward,
    .scatter_rows_backward = cuda_scatter_rows_backward,
    .sum_axis1_backward = cuda_sum_axis1_backward,
    .copy_cols_backward = cuda_copy_cols_backward,
    .scale_rows_backward = cuda_scale_rows_backward,
    .hyper_connection_backward = cuda_hyper_connection_backward,
    .hyper_mix_backward = cuda_hyper_mix_backward,
    .hyper_head_backward = cuda_hyper_head_backward,
    .compress_backward = cuda_compress_backward,
    .conv1d_causal_backward = cuda_conv1d_causal_backward,
    .kda_gate_backward = cuda_kda_gate_backward,
    .sigmoid_backward = cuda_sigmoid_backward,
    .delta_rule_backward = cuda_delta_rule_backward,
    .rms_norm_gated_backward = cuda_rms_norm_gated_backward,
    .attn_fused = cuda_attn_fused,
};

NNT_PLUGIN_EXPORT const nnt_backend_descriptor nnt_backend_plugin = {
    .header = NNT_PLUGIN_HEADER(nnt_backend_descriptor, NNT_PLUGIN_BACKEND, "cuda", NNT_VERSION_STRING,
                                      "NVIDIA GPU kernels (weights kept in their encoding, cuBLAS GEMM, own CUDA kernels)"),
    .host_memory = 0,
    .create = cuda_create,
    .destroy = cuda_destroy,
    .ops = &cuda_ops,
};
