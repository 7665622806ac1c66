/* fam_values.c - value-info filling, weight binding and tensor views shared by nnt's family
 * plugins. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "family_common.h"

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

void fam_served(nnt_value_info *out, const nnt_call_dims *dims, nnt_dtype dtype, int writable, int ndim, ...)
{
    memset(out, 0, sizeof *out);
    out->served = 1;
    out->dtype = dtype;
    out->writable = writable;
    va_list ap;
    va_start(ap, ndim);
    for (int i = 0; i < ndim; i++) {
        int64_t v = va_arg(ap, int64_t);
        if (dims) out->shape[i] = v;
    }
    va_end(ap);
    out->ndim = dims ? ndim : 0;
}

nnt_status fam_weight(const fam_env *env, const nnt_checkpoint *ck, const char *name, int ndim,
                      const int64_t *shape, nnt_tensor *out, nnt_error *err)
{
    nnt_tensor host;
    nnt_status st = env->host->tensor(ck, name, ndim, shape, &host, err);
    if (st != NNT_OK) return st;
    if (host.dtype != NNT_F32 && host.dtype != NNT_BF16 && host.dtype != NNT_F16)
        return env->host->set_error(err, NNT_ERR_SHAPE, "%s: tensor '%s' has dtype %s; expected a float weight (F32, BF16, F16 or FP8 with scales)",
                                    env->host->cfg_path(ck), name,
                                    host.dtype == NNT_I64 ? "I64" : host.dtype == NNT_I32 ? "I32" : "?");
    return env->be->prepare_weight(env->be_ctx, &host, out, err);
}

const char *fam_first_present(const fam_env *env, const nnt_checkpoint *ck, const char *const *names, int n)
{
    for (int i = 0; i < n; i++)
        if (names[i] && env->host->has_tensor(ck, names[i])) return names[i];
    return NULL;
}

nnt_status fam_vector_f32(const fam_env *env, const nnt_checkpoint *ck, const char *name, int64_t n,
                          float **out, nnt_error *err)
{
    nnt_tensor t;
    nnt_status st = env->host->tensor(ck, name, 0, NULL, &t, err); /* any shape holding n values */
    if (st != NNT_OK) return st;
    if (nnt_tensor_numel(&t) != n)
        return env->host->set_error(err, NNT_ERR_SHAPE, "%s: tensor '%s' holds %lld values, config.json implies %lld",
                                    env->host->cfg_path(ck), name, (long long)nnt_tensor_numel(&t), (long long)n);
    float *v = malloc((size_t)n * sizeof *v);
    if (!v) return env->host->set_error(err, NNT_ERR_OUT_OF_MEMORY, "no memory for '%s'", name);
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
            return env->host->set_error(err, NNT_ERR_SHAPE, "%s: tensor '%s' is not a float vector",
                                        env->host->cfg_path(ck), name);
        }
    }
    *out = v;
    return NNT_OK;
}

nnt_tensor fam_slice3(const nnt_tensor *w, int64_t index, int64_t r0, int64_t nr)
{
    nnt_tensor v = *w;
    size_t es = w->dtype == NNT_F32 ? 4 : 2;
    int64_t R = w->shape[1], C = w->shape[2];
    v.ndim = 2;
    v.shape[0] = nr;
    v.shape[1] = C;
    v.data = (char *)w->data + (size_t)((index * R + r0) * C) * es;
    return v;
}

nnt_status fam_alloc(const fam_env *env, nnt_run *run, nnt_dtype dt, nnt_tensor *out, nnt_error *err, int ndim, ...)
{
    int64_t shape[NNT_MAX_DIMS];
    va_list ap;
    va_start(ap, ndim);
    for (int i = 0; i < ndim; i++) shape[i] = va_arg(ap, int64_t);
    va_end(ap);
    return env->host->alloc(run, dt, ndim, shape, out, err);
}

nnt_tensor fam_view(const nnt_tensor *t, int ndim, ...)
{
    nnt_tensor v = *t;
    v.ndim = ndim;
    va_list ap;
    va_start(ap, ndim);
    for (int i = 0; i < ndim; i++) v.shape[i] = va_arg(ap, int64_t);
    va_end(ap);
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
