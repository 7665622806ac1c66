/* cpu_backend.c - the cpu kernel backend's descriptor: options, memory, weights, and the op
 * table that points at the cpu_*.c kernels. The reference every other backend is checked
 * against. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_internal.h"
#include "nnt/nnt_plugin.h"
#include <nnt/nnt_version.h> /* the plugin reports nnt's version */
#ifdef NNT_HAVE_DNNL
#include <oneapi/dnnl/dnnl.h>
#endif

/* OpenBLAS's own thread-count setter (not part of the CBLAS standard). */

nnt_status cpu_error(nnt_error *err, nnt_status st, const char *fmt, ...)
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

static float bf16(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static float f16(uint16_t h)
{
    uint32_t sign = (uint32_t)(h >> 15) << 31;
    int exp = (h >> 10) & 0x1f;
    uint32_t man = h & 0x3ffu;
    if (exp == 0) {
        float f = ldexpf((float)man, -24);
        return sign ? -f : f;
    }
    uint32_t u = exp == 31 ? (sign | 0x7f800000u | (man << 13)) : (sign | ((uint32_t)(exp + 112) << 23) | (man << 13));
    float f;
    memcpy(&f, &u, 4);
    return f;
}

float cpu_load(const void *data, nnt_dtype dt, int64_t i)
{
    switch (dt) {
    case NNT_F32: return ((const float *)data)[i];
    case NNT_BF16: return bf16(((const uint16_t *)data)[i]);
    case NNT_F16: return f16(((const uint16_t *)data)[i]);
    case NNT_I32: return (float)((const int32_t *)data)[i];
    case NNT_I64: return (float)((const int64_t *)data)[i];
    default: return NAN;
    }
}

nnt_status cpu_check(const char *op, const char *arg, const nnt_tensor *t, nnt_dtype dt, int ndim,
                     nnt_error *err)
{
    if (!t || !t->data) return cpu_error(err, NNT_ERR_INVALID_ARGUMENT, "cpu %s: %s is missing", op, arg);
    if (dt != NNT_DTYPE_INVALID && t->dtype != dt)
        return cpu_error(err, NNT_ERR_SHAPE, "cpu %s: %s has dtype %d, expected %d", op, arg, (int)t->dtype, (int)dt);
    if (ndim > 0 && t->ndim != ndim)
        return cpu_error(err, NNT_ERR_SHAPE, "cpu %s: %s has %d dimensions, expected %d", op, arg, t->ndim, ndim);
    return NNT_OK;
}

void cpu_round_result(cpu_ctx *c, nnt_tensor *t)
{
    if (!cpu_bf16(t) || t->dtype != NNT_F32) return;
    float *d = t->data;
    int64_t n = nnt_tensor_numel(t), chunk = 16384;
    const cpu_kernels *k = c->k;
#pragma omp parallel for num_threads(c->threads) schedule(static) if (n > CPU_PARALLEL_MIN)
    for (int64_t i = 0; i < n; i += chunk) k->round_bf16(d + i, d + i, n - i < chunk ? n - i : chunk);
}

nnt_status cpu_panel(cpu_ctx *c, int t, size_t floats, float **out, nnt_error *err)
{
    if (floats > c->panel_floats[t]) {
        free(c->panel[t]);
        c->panel[t] = aligned_alloc(64, ((floats * sizeof(float)) + 63) & ~(size_t)63);
        c->panel_floats[t] = c->panel[t] ? floats : 0;
        if (!c->panel[t])
            return cpu_error(err, NNT_ERR_OUT_OF_MEMORY, "cpu: no memory for a %zu-float weight panel", floats);
    }
    *out = c->panel[t];
    return NNT_OK;
}

nnt_status cpu_buffer(cpu_ctx *c, int slot, size_t bytes, void **out, nnt_error *err)
{
    if (bytes > c->buf_bytes[slot]) {
        free(c->buf[slot]);
        c->buf[slot] = aligned_alloc(64, (bytes + 63) & ~(size_t)63);
        c->buf_bytes[slot] = c->buf[slot] ? bytes : 0;
        if (!c->buf[slot]) return cpu_error(err, NNT_ERR_OUT_OF_MEMORY, "cpu: no memory for a %zu-byte panel", bytes);
    }
    *out = c->buf[slot];
    return NNT_OK;
}

#ifdef NNT_HAVE_DNNL
/* oneDNN's engine and stream for this context; with isa other than auto, oneDNN held to the same
 * instruction set (a process-wide setting oneDNN accepts before its first primitive). Without a
 * usable engine the products use OpenBLAS. */
static void dnnl_setup(cpu_ctx *c, const char *isa)
{
    if (isa && strcmp(isa, "auto") != 0)
        (void)dnnl_set_max_cpu_isa(strcmp(isa, "avx512") == 0 ? dnnl_cpu_isa_avx512_core_bf16
                                   : strcmp(isa, "avx2") == 0 ? dnnl_cpu_isa_avx2
                                                              : dnnl_cpu_isa_sse41);
    dnnl_engine_t e = NULL;
    dnnl_stream_t s = NULL;
    if (dnnl_engine_create(&e, dnnl_cpu, 0) != dnnl_success) return;
    if (dnnl_stream_create(&s, e, dnnl_stream_default_flags) != dnnl_success) {
        dnnl_engine_destroy(e);
        return;
    }
    c->dnnl_engine = e;
    c->dnnl_stream = s;
    c->dnnl_bf16 = (dnnl_get_effective_cpu_isa() & dnnl_cpu_isa_avx512_core_bf16) == dnnl_cpu_isa_avx512_core_bf16;
}
#endif

nnt_status cpu_scratch(cpu_ctx *c, size_t floats, float **out, nnt_error *err)
{
    if (floats > c->scratch_floats) {
        free(c->scratch);
        c->scratch = aligned_alloc(64, ((floats * sizeof(float)) + 63) & ~(size_t)63);
        c->scratch_floats = c->scratch ? floats : 0;
        if (!c->scratch) return cpu_error(err, NNT_ERR_OUT_OF_MEMORY, "cpu: no memory for a %zu-float scratch", floats);
    }
    *out = c->scratch;
    return NNT_OK;
}

nnt_status cpu_round_x(cpu_ctx *c, const float *x, int64_t n, const float **out, nnt_error *err)
{
    float *xr;
    nnt_status st = cpu_scratch(c, (size_t)n, &xr, err);
    if (st != NNT_OK) return st;
    const cpu_kernels *k = c->k;
    const int64_t chunk = 16384; /* a prefill's x: shared by the team */
#pragma omp parallel for num_threads(c->threads) schedule(static) if (n > CPU_PARALLEL_MIN)
    for (int64_t i = 0; i < n; i += chunk) k->round_bf16(x + i, xr + i, n - i < chunk ? n - i : chunk);
    *out = xr;
    return NNT_OK;
}

static void cpu_destroy(void *ctx);

static nnt_status cpu_create(const nnt_backend_options *opt, void **out, nnt_error *err)
{
    cpu_ctx *c = calloc(1, sizeof *c);
    if (!c) return cpu_error(err, NNT_ERR_OUT_OF_MEMORY, "no memory");
    c->threads = 1;
    const char *isa = NULL;
    int split = -1;    /* blas_split: auto */
    int use_dnnl = 1; /* gemm: auto (oneDNN where the build has it) */
    for (int i = 0; i < opt->count; i++) {
        if (strcmp(opt->keys[i], "threads") == 0) {
            char *end;
            errno = 0;
            long v = strtol(opt->values[i], &end, 10);
            if (errno || *end || v < 1 || v > 1024) {
                cpu_destroy(c);
                return cpu_error(err, NNT_ERR_CONFIG, "option threads = '%s' is not a thread count (1..1024)",
                                 opt->values[i]);
            }
            c->threads = (int)v;
        } else if (strcmp(opt->keys[i], "isa") == 0) {
            isa = opt->values[i];
        } else if (strcmp(opt->keys[i], "blas_split") == 0) {
            const char *v = opt->values[i];
            split = !strcmp(v, "yes") ? 1 : !strcmp(v, "no") ? 0 : !strcmp(v, "auto") ? -1 : -2;
            if (split == -2) {
                cpu_destroy(c);
                return cpu_error(err, NNT_ERR_CONFIG, "option blas_split = '%s': expected auto, yes or no", v);
            }
        } else if (strcmp(opt->keys[i], "gemm") == 0) {
            const char *v = opt->values[i];
            if (strcmp(v, "auto") != 0 && strcmp(v, "openblas") != 0) {
                cpu_destroy(c);
                return cpu_error(err, NNT_ERR_CONFIG, "option gemm = '%s': expected auto or openblas", v);
            }
            use_dnnl = strcmp(v, "auto") == 0;
        } else {
            cpu_destroy(c);
            return cpu_error(err, NNT_ERR_CONFIG,
                             "unknown option '%s' (the cpu backend takes: threads, isa, blas_split, gemm)",
                             opt->keys[i]);
        }
    }
    nnt_status st = cpu_pick_kernels(isa, &c->k, err);
    if (st == NNT_OK) {
        c->panel = calloc((size_t)c->threads, sizeof *c->panel);
        c->panel_floats = calloc((size_t)c->threads, sizeof *c->panel_floats);
        if (!c->panel || !c->panel_floats) st = cpu_error(err, NNT_ERR_OUT_OF_MEMORY, "no memory");
    }
    if (st != NNT_OK) {
        cpu_destroy(c);
        return st;
    }
    cpu_blas_setup(c, split);
#ifdef NNT_HAVE_DNNL
    if (use_dnnl) dnnl_setup(c, isa);
#else
    (void)use_dnnl;
#endif
    *out = c;
    return NNT_OK;
}

static void cpu_destroy(void *ctx)
{
    cpu_ctx *c = ctx;
    if (!c) return;
    if (c->panel)
        for (int t = 0; t < c->threads; t++) free(c->panel[t]);
    free(c->panel);
    free(c->panel_floats);
    for (int i = 0; i < CPU_BUF_COUNT; i++) free(c->buf[i]);
#ifdef NNT_HAVE_DNNL
    if (c->dnnl_stream) dnnl_stream_destroy(c->dnnl_stream);
    if (c->dnnl_engine) dnnl_engine_destroy(c->dnnl_engine);
#endif
    free(c->scratch);
    free(c);
}

static nnt_status cpu_alloc(void *ctx, size_t bytes, void **ptr, nnt_error *err)
{
    (void)ctx;
    size_t n = (bytes + 63) & ~(size_t)63;
    *ptr = aligned_alloc(64, n ? n : 64);
    if (!*ptr) return cpu_error(err, NNT_ERR_OUT_OF_MEMORY, "cpu: cannot allocate %zu bytes", bytes);
    return NNT_OK;
}

static void cpu_free(void *ctx, void *ptr)
{
    (void)ctx;
    free(ptr);
}

static nnt_status cpu_memcpy(void *ctx, void *dst, const void *src, size_t bytes, nnt_error *err)
{
    (void)ctx;
    (void)err;
    memcpy(dst, src, bytes);
    return NNT_OK;
}

static nnt_status cpu_prepare_weight(void *ctx, const nnt_tensor *host, nnt_tensor *out, nnt_error *err)
{
    (void)ctx;
    cpu_weight wv;
    int readable = host->dtype == NNT_I32 || host->dtype == NNT_I64 || cpu_weight_view(host, &wv);
    if (!readable)
        return cpu_error(err, NNT_ERR_UNSUPPORTED,
                         "cpu: a weight of dtype %d%s is not supported (F32, BF16, F16, I32, I64, or F8_E4M3 / "
                         "F4_E2M1 with block scales)",
                         (int)host->dtype, host->scale ? "" : " without scales");
    *out = *host; /* read in place, in its encoding, from the memory-mapped checkpoint */
    return NNT_OK;
}

static void cpu_release_weight(void *ctx, nnt_tensor *w)
{
    (void)ctx;
    (void)w; /* nothing was copied */
}

static size_t cpu_weight_bytes(void *ctx)
{
    (void)ctx;
    return 0; /* weights alias the checkpoint's mapping */
}

static const nnt_backend_ops cpu_ops = {
    .struct_size = sizeof(nnt_backend_ops),
    .alloc = cpu_alloc,
    .free = cpu_free,
    .upload = cpu_memcpy,
    .download = cpu_memcpy,
    .prepare_weight = cpu_prepare_weight,
    .release_weight = cpu_release_weight,
    .linear = cpu_linear,
    .rms_norm = cpu_rms_norm,
    .embedding = cpu_embedding,
    .add = cpu_add,
    .swap12 = cpu_swap12,
    .copy = cpu_copy,
    .fill = cpu_fill,
    .scale = cpu_scale,
    .rope = cpu_rope,
    .attn_scores = cpu_attn_scores,
    .softmax = cpu_softmax,
    .attn_mix = cpu_attn_mix,
    .swiglu = cpu_swiglu,
    .route = cpu_route,
    .gather_rows = cpu_gather_rows,
    .scatter_add_rows = cpu_scatter_add_rows,
    .scatter_rows = cpu_scatter_rows,
    .sum_axis1 = cpu_sum_axis1,
    .conv1d_causal = cpu_conv1d_causal,
    .kda_gate = cpu_kda_gate,
    .sigmoid = cpu_sigmoid,
    .delta_rule = cpu_delta_rule,
    .rms_norm_gated = cpu_rms_norm_gated,
    .copy_cols = cpu_copy_cols,
    .zero_rows = cpu_zero_rows,
    .hyper_connection = cpu_hyper_connection,
    .hyper_mix = cpu_hyper_mix,
    .hyper_head = cpu_hyper_head,
    .compress = cpu_compress,
    .indexer_scores = cpu_indexer_scores,
    .weight_bytes = cpu_weight_bytes,
    .linear_backward = cpu_linear_backward,
    .rms_norm_backward = cpu_rms_norm_backward,
    .accumulate = cpu_accumulate,
    .swap12_backward = cpu_swap12_backward,
    .rope_backward = cpu_rope_backward,
    .attn_scores_backward = cpu_attn_scores_backward,
    .softmax_backward = cpu_softmax_backward,
    .attn_mix_backward = cpu_attn_mix_backward,
    .swiglu_backward = cpu_swiglu_backward,
    .route_backward = cpu_route_backward,
    .gather_rows_backward = cpu_gather_rows_backward,
    .scatter_add_rows_backward = cpu_scatter_add_rows_backward,
    .scatter_rows_backward = cpu_scatter_rows_backward,
    .sum_axis1_backward = cpu_sum_axis1_backward,
    .copy_cols_backward = cpu_copy_cols_backward,
    .scale_rows = cpu_scale_rows,
    .scale_rows_backward = cpu_scale_rows_backward,
    .hyper_connection_backward = cpu_hyper_connection_backward,
    .hyper_mix_backward = cpu_hyper_mix_backward,
    .hyper_head_backward = cpu_hyper_head_backward,
    .compress_backward = cpu_compress_backward,
    .conv1d_causal_backward = cpu_conv1d_causal_backward,
    .kda_gate_backward = cpu_kda_gate_backward,
    .sigmoid_backward = cpu_sigmoid_backward,
    .delta_rule_backward = cpu_delta_rule_backward,
    .rms_norm_gated_backward = cpu_rms_norm_gated_backward,
    .attn_fused = cpu_attn_fused,
    .features = NNT_FEATURE_KEY_COUNT,
};

NNT_PLUGIN_EXPORT const nnt_backend_descriptor nnt_backend_plugin = {
    .header = NNT_PLUGIN_HEADER(nnt_backend_descriptor, NNT_PLUGIN_BACKEND, "cpu", NNT_VERSION_STRING,
                                      "reference CPU kernels (weights decoded in registers per instruction set; oneDNN or OpenBLAS GEMM)"),
    .host_memory = 1,
    .create = cpu_create,
    .destroy = cpu_destroy,
    .ops = &cpu_ops,
};
