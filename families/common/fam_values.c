/* fam_values.c - value-info filling, weight binding and tensor views shared by nnt's family
 * plugins. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <nnt/nnt_family_kit.h>

#include "fam_internal.h"

static void unserved_v(nnt_value_info *out, int off_page, const char *fmt, va_list ap)
{
    memset(out, 0, sizeof *out);
    vsnprintf(out->reason, sizeof out->reason, fmt, ap);
    out->off_page = off_page;
}

void fam_unserved(nnt_value_info *out, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    unserved_v(out, 0, fmt, ap);
    va_end(ap);
}

void fam_off_page(nnt_value_info *out, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    unserved_v(out, 1, fmt, ap);
    va_end(ap);
}

void fam_served(nnt_value_info *out, const nnt_call_dims *dims, nnt_dtype dtype, int writable, nnt_shape shape)
{
    memset(out, 0, sizeof *out);
    out->served = 1;
    out->dtype = dtype;
    out->writable = writable;
    if (dims) {
        out->ndim = shape.ndim;
        for (int i = 0; i < shape.ndim; i++) out->shape[i] = shape.dim[i];
    }
}

void fam_env_init(fam_env *env, const nnt_load_args *args)
{
    *env = (fam_env){
        .core = args->core,
        .be = args->be,
        .be_ctx = args->be_ctx,
        .precision = args->precision,
        .bf16_style = 0,
        .prepared = NULL,
        .weights = NNT_STRUCT_HAS(args, nnt_load_args, weights) ? args->weights : NNT_WEIGHTS_STORED,
    };
}

void fam_env_release(fam_env *env)
{
    free(env->natives); /* fam_env_natives' list */
    env->natives = NULL;
    fam_prepared *p = env->prepared;
    if (!p) return;
    for (int i = p->n - 1; i >= 0; i--) env->be->release_weight(env->be_ctx, &p->w[i]);
    for (int i = 0; i < p->n_buf; i++) free(p->buf[i]);
    free(p->w);
    free(p->buf);
    free(p);
    env->prepared = NULL;
}

static fam_prepared *held(const fam_env *env)
{
    fam_env *e = (fam_env *)env; /* the lists of what env holds grow; nothing else changes */
    if (!e->prepared) e->prepared = calloc(1, sizeof *e->prepared);
    return e->prepared;
}

nnt_status fam_keep_buffer(const fam_env *env, void *b, nnt_error *err)
{
    fam_prepared *p = held(env);
    if (p && p->n_buf == p->cap_buf) {
        int cap = p->cap_buf ? 2 * p->cap_buf : 64;
        void **g = realloc(p->buf, (size_t)cap * sizeof *g);
        if (g) {
            p->buf = g;
            p->cap_buf = cap;
        }
    }
    if (!p || p->n_buf == p->cap_buf) {
        free(b);
        return env->core->set_error(err, NNT_ERR_OUT_OF_MEMORY, "no memory");
    }
    p->buf[p->n_buf++] = b;
    return NNT_OK;
}

nnt_status fam_prepare(const fam_env *env, const nnt_tensor *host, nnt_tensor *out, nnt_error *err)
{
    fam_prepared *p = held(env);
    if (!p) return env->core->set_error(err, NNT_ERR_OUT_OF_MEMORY, "no memory");
    if (p->n == p->cap) {
        int cap = p->cap ? 2 * p->cap : 256;
        nnt_tensor *g = realloc(p->w, (size_t)cap * sizeof *g);
        if (!g) return env->core->set_error(err, NNT_ERR_OUT_OF_MEMORY, "no memory");
        p->w = g;
        p->cap = cap;
    }
    nnt_tensor h = *host;
    if (env->precision == NNT_PRECISION_BF16) h.flags |= NNT_TENSOR_BF16_PRODUCTS;
    nnt_status st = env->be->prepare_weight(env->be_ctx, &h, out, err);
    if (st == NNT_OK) p->w[p->n++] = *out;
    return st;
}

/* fam_weight and fam_weight_product: the tensor bound by `bind` (core->tensor or tensor_fp8) */
static nnt_status weight_from(const fam_env *env, const nnt_checkpoint *ck, const char *name, int ndim,
                              const int64_t *shape,
                              nnt_status (*bind)(const nnt_checkpoint *, const char *, int, const int64_t *,
                                                 nnt_tensor *, nnt_error *),
                              nnt_tensor *out, nnt_error *err)
{
    nnt_tensor host;
    nnt_status st = bind(ck, name, ndim, shape, &host, err);
    if (st != NNT_OK) return st;
    if (host.dtype != NNT_F32 && host.dtype != NNT_BF16 && host.dtype != NNT_F16 && host.dtype != NNT_F8_E4M3 &&
        host.dtype != NNT_F4_E2M1)
        return env->core->set_error(err, NNT_ERR_SHAPE,
                                    "%s: tensor '%s' has dtype %s; expected a float weight (F32, BF16, F16, FP8 or FP4 "
                                    "with scales)",
                                    env->core->cfg_path(ck), name,
                                    host.dtype == NNT_I64 ? "I64" : host.dtype == NNT_I32 ? "I32" : "?");
    return fam_prepare(env, &host, out, err);
}

nnt_status fam_weight(const fam_env *env, const nnt_checkpoint *ck, const char *name, int ndim,
                      const int64_t *shape, nnt_tensor *out, nnt_error *err)
{
    return weight_from(env, ck, name, ndim, shape, env->core->tensor, out, err);
}

nnt_status fam_weight_product(const fam_env *env, const nnt_checkpoint *ck, const char *name, int ndim,
                              const int64_t *shape, nnt_tensor *out, nnt_error *err)
{
    int fp8 = env->weights == NNT_WEIGHTS_FP8 && NNT_STRUCT_HAS(env->core, nnt_core_api, tensor_fp8) &&
              env->core->tensor_fp8;
    return weight_from(env, ck, name, ndim, shape, fp8 ? env->core->tensor_fp8 : env->core->tensor, out, err);
}

nnt_status fam_rows(const fam_env *env, const nnt_tensor *w, int64_t index, int64_t r0, int64_t nr, const char *what,
                    nnt_tensor *out, nnt_error *err)
{
    if (nnt_tensor_rows(w, index, r0, nr, out)) return NNT_OK;
    return env->core->set_error(err, NNT_ERR_SHAPE, "%s: an encoded weight without block sizes cannot be split", what);
}

const char *fam_first_present(const fam_env *env, const nnt_checkpoint *ck, const char *const *names, int n)
{
    for (int i = 0; i < n; i++)
        if (names[i] && env->core->has_tensor(ck, names[i])) return names[i];
    return NULL;
}

nnt_status fam_vector_f32(const fam_env *env, const nnt_checkpoint *ck, const char *name, int64_t n,
                          float **out, nnt_error *err)
{
    nnt_tensor t;
    nnt_status st = env->core->tensor(ck, name, 0, NULL, &t, err); /* any shape holding n values */
    if (st != NNT_OK) return st;
    if (nnt_tensor_numel(&t) != n)
        return env->core->set_error(err, NNT_ERR_SHAPE, "%s: tensor '%s' holds %lld values, config.json implies %lld",
                                    env->core->cfg_path(ck), name, (long long)nnt_tensor_numel(&t), (long long)n);
    if (t.dtype == NNT_F32 && (uintptr_t)t.data % sizeof(float) == 0) {
        *out = t.data; /* read in place from the mapping */
        return NNT_OK;
    }
    float *v = malloc((size_t)(n ? n : 1) * sizeof *v);
    if (!v) return env->core->set_error(err, NNT_ERR_OUT_OF_MEMORY, "no memory for '%s'", name);
    for (int64_t i = 0; i < n; i++) {
        if (t.dtype == NNT_F32) {
            v[i] = ((const float *)t.data)[i];
        } else if (t.dtype == NNT_BF16 || t.dtype == NNT_F16) {
            uint16_t h = ((const uint16_t *)t.data)[i];
            if (t.dtype == NNT_BF16) {
                uint32_t u = (uint32_t)h << 16;
                memcpy(&v[i], &u, 4);
            } else {
                int e = (h >> 10) & 0x1f;
                float m = (float)(h & 0x3ff);
                float f = e == 0 ? ldexpf(m, -24) : e == 31 ? INFINITY : ldexpf(1.0f + m / 1024.0f, e - 15);
                v[i] = (h & 0x8000) ? -f : f;
            }
        } else {
            free(v);
            return env->core->set_error(err, NNT_ERR_SHAPE, "%s: tensor '%s' is not a float vector",
                                        env->core->cfg_path(ck), name);
        }
    }
    *out = v;
    return fam_keep_buffer(env, v, err);
}

nnt_status fam_alloc(const fam_env *env, nnt_run *run, nnt_dtype dt, nnt_tensor *out, nnt_error *err, nnt_shape shape)
{
    nnt_status st = env->core->alloc(run, dt, shape.ndim, shape.dim, out, err);
    if (st == NNT_OK && (out->flags & NNT_TENSOR_BF16_VALUES)) out->flags |= env->bf16_style;
    return st;
}

nnt_tensor fam_view(const nnt_tensor *t, nnt_shape shape)
{
    nnt_tensor v = *t;
    v.ndim = shape.ndim;
    for (int i = 0; i < shape.ndim; i++) v.shape[i] = shape.dim[i];
    return v;
}

void fam_rope_inv_freq(float *out, int rot_dim, double theta)
{
    /* transformers: 1 / theta ** (arange(0, R, 2) / R) with the exponent in float32 */
    for (int i = 0; i < rot_dim / 2; i++) {
        float expo = (float)(2 * i) / (float)rot_dim;
        out[i] = 1.0f / powf((float)theta, expo);
    }
}

const char *fam_linear_detail(char *buf, size_t n, int64_t in, int64_t out)
{
    snprintf(buf, n, "in_features=%lld, out_features=%lld, bias=False", (long long)in, (long long)out);
    return buf;
}

const char *fam_norm_detail(char *buf, size_t n, int64_t width, double eps)
{
    snprintf(buf, n, "(%lld,), eps=%g", (long long)width, eps);
    return buf;
}

uint32_t fam_kit_abi(void)
{
    return ((uint32_t)NNT_ABI_MAJOR << 16) | (uint32_t)NNT_ABI_MINOR;
}
