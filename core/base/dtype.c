/* dtype.c - element types: names, sizes, conversions (bf16, f16, fp8 e4m3, e8m0), and the
 * host-tensor helpers of the public API. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

static const struct {
    const char *name;
    size_t size;
    int is_float;
} dtype_table[NNT_DTYPE_COUNT] = {
    [NNT_DTYPE_INVALID] = {"INVALID", 0, 0},
    [NNT_F32] = {"F32", 4, 1},
    [NNT_F16] = {"F16", 2, 1},
    [NNT_BF16] = {"BF16", 2, 1},
    [NNT_F64] = {"F64", 8, 1},
    [NNT_F8_E4M3] = {"F8_E4M3", 1, 1},
    [NNT_F8_E5M2] = {"F8_E5M2", 1, 1},
    [NNT_F8_E8M0] = {"F8_E8M0", 1, 1},
    [NNT_I64] = {"I64", 8, 0},
    [NNT_I32] = {"I32", 4, 0},
    [NNT_I16] = {"I16", 2, 0},
    [NNT_I8] = {"I8", 1, 0},
    [NNT_U8] = {"U8", 1, 0},
    [NNT_BOOL] = {"BOOL", 1, 0},
    [NNT_F4_E2M1] = {"F4", 0, 1}, /* safetensors' spelling; two per byte, so no whole-byte size */
};

const char *nnt_dtype_name(nnt_dtype dt)
{
    if ((int)dt <= 0 || dt >= NNT_DTYPE_COUNT) return "INVALID";
    return dtype_table[dt].name;
}

size_t nnt_dtype_size(nnt_dtype dt)
{
    if ((int)dt <= 0 || dt >= NNT_DTYPE_COUNT) return 0;
    return dtype_table[dt].size;
}

int nnt_dtype_is_float(nnt_dtype dt)
{
    if ((int)dt <= 0 || dt >= NNT_DTYPE_COUNT) return 0;
    return dtype_table[dt].is_float;
}

nnt_dtype nnt_dtype_from_name(const char *name)
{
    for (int i = 1; i < NNT_DTYPE_COUNT; i++)
        if (strcmp(dtype_table[i].name, name) == 0) return (nnt_dtype)i;
    /* other spellings seen in checkpoints */
    if (strcmp(name, "F8_E4M3FN") == 0) return NNT_F8_E4M3;
    return NNT_DTYPE_INVALID;
}

float nnt_bf16_to_f32(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

uint16_t nnt_f32_to_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40); /* keep NaN */
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

float nnt_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h >> 15) << 31;
    int exp = (h >> 10) & 0x1f;
    uint32_t man = h & 0x3ffu;
    float f;
    if (exp == 0) {
        f = ldexpf((float)man, -24);
        if (sign) f = -f;
        return f;
    }
    uint32_t u;
    if (exp == 31)
        u = sign | 0x7f800000u | (man << 13);
    else
        u = sign | ((uint32_t)(exp - 15 + 127) << 23) | (man << 13);
    memcpy(&f, &u, 4);
    return f;
}

uint16_t nnt_f32_to_f16(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    float a = fabsf(f);
    if (isnan(f)) return sign | 0x7e00u;
    if (a >= 65520.0f) return sign | 0x7c00u;
    if (a < 6.103515625e-05f) { /* subnormal half */
        long m = lrintf(a * 16777216.0f);
        return (uint16_t)(sign | (uint16_t)m);
    }
    int e;
    float m = frexpf(a, &e); /* a = m * 2^e, m in [0.5, 1) */
    long mant = lrintf((m * 2.0f - 1.0f) * 1024.0f);
    int exp = e - 1 + 15;
    if (mant == 1024) {
        mant = 0;
        exp++;
    }
    if (exp >= 31) return sign | 0x7c00u;
    return (uint16_t)(sign | (uint16_t)(exp << 10) | (uint16_t)mant);
}

/* float8 e4m3fn: 1 sign, 4 exponent (bias 7), 3 mantissa; exponent 0 is subnormal; all ones
 * exponent and mantissa is NaN; no infinity. Source: OCP 8-bit floating point spec, v1.0. */
float nnt_fp8_e4m3_to_f32(uint8_t b)
{
    int sign = b >> 7;
    int exp = (b >> 3) & 0xf;
    int man = b & 0x7;
    float v;
    if (exp == 0xf && man == 0x7)
        v = NAN;
    else if (exp == 0)
        v = ldexpf((float)man / 8.0f, -6);
    else
        v = ldexpf(1.0f + (float)man / 8.0f, exp - 7);
    return sign ? -v : v;
}

/* The e4m3fn code nearest v (ties to even), for |v| up to 448, its largest finite value;
 * beyond that the largest finite code of v's sign (saturation: a scaled encoder asks more than
 * 448 only by rounding), NaN to 0x7f. From 2^-6 up: the float's exponent and top three
 * significand bits, rounded on the other twenty; below, the subnormal steps of 2^-9. Source:
 * OCP 8-bit floating point spec, v1.0. */
uint8_t nnt_f32_to_fp8_e4m3(float v)
{
    if (isnan(v)) return 0x7f;
    uint8_t sign = signbit(v) ? 0x80 : 0;
    float a = fabsf(v);
    if (a >= 464.0f) return sign | 0x7e; /* 464 is halfway from 448 to the next (NaN) step */
    if (a < 0.015625f) return sign | (uint8_t)lrintf(a * 512.0f); /* 8 steps: the smallest normal */
    uint32_t u;
    memcpy(&u, &a, 4);
    uint32_t r = (u + 0x7ffffu + ((u >> 20) & 1u)) >> 20; /* float exponent (8 bits) : 3 bits */
    r -= (127u - 7u) << 3;                                /* e4m3's exponent bias is 7 */
    return sign | (uint8_t)(r > 0x7eu ? 0x7eu : r);
}

/* e8m0: an exponent byte alone, 2^(b - 127); 255 is NaN. */
float nnt_e8m0_to_f32(uint8_t b)
{
    if (b == 255) return NAN;
    return ldexpf(1.0f, (int)b - 127);
}

static double load_elem(const void *src, nnt_dtype dt, int64_t i)
{
    switch (dt) {
    case NNT_F32: return ((const float *)src)[i];
    case NNT_F64: return ((const double *)src)[i];
    case NNT_F16: return nnt_f16_to_f32(((const uint16_t *)src)[i]);
    case NNT_BF16: return nnt_bf16_to_f32(((const uint16_t *)src)[i]);
    case NNT_F8_E4M3: return nnt_fp8_e4m3_to_f32(((const uint8_t *)src)[i]);
    case NNT_F8_E8M0: return nnt_e8m0_to_f32(((const uint8_t *)src)[i]);
    case NNT_I64: return (double)((const int64_t *)src)[i];
    case NNT_I32: return ((const int32_t *)src)[i];
    case NNT_I16: return ((const int16_t *)src)[i];
    case NNT_I8: return ((const int8_t *)src)[i];
    case NNT_U8:
    case NNT_BOOL: return ((const uint8_t *)src)[i];
    default: return NAN;
    }
}

nnt_status nnt_convert(const void *src, nnt_dtype sdt, void *dst, nnt_dtype ddt, int64_t n,
                       nnt_error *err)
{
    if (sdt == ddt) {
        memcpy(dst, src, (size_t)n * nnt_dtype_size(sdt));
        return NNT_OK;
    }
    if (sdt == NNT_F8_E5M2 || ddt == NNT_F8_E5M2 || ddt == NNT_F8_E4M3 || ddt == NNT_F8_E8M0 ||
        nnt_dtype_size(sdt) == 0 || nnt_dtype_size(ddt) == 0)
        return nnt_err_set(err, NNT_ERR_UNSUPPORTED, "cannot convert %s to %s",
                           nnt_dtype_name(sdt), nnt_dtype_name(ddt));
    for (int64_t i = 0; i < n; i++) {
        double v = load_elem(src, sdt, i);
        switch (ddt) {
        case NNT_F32: ((float *)dst)[i] = (float)v; break;
        case NNT_F64: ((double *)dst)[i] = v; break;
        case NNT_F16: ((uint16_t *)dst)[i] = nnt_f32_to_f16((float)v); break;
        case NNT_BF16: ((uint16_t *)dst)[i] = nnt_f32_to_bf16((float)v); break;
        case NNT_I64: ((int64_t *)dst)[i] = (int64_t)v; break;
        case NNT_I32: ((int32_t *)dst)[i] = (int32_t)v; break;
        case NNT_I16: ((int16_t *)dst)[i] = (int16_t)v; break;
        case NNT_I8: ((int8_t *)dst)[i] = (int8_t)v; break;
        case NNT_U8: ((uint8_t *)dst)[i] = (uint8_t)v; break;
        case NNT_BOOL: ((uint8_t *)dst)[i] = v != 0.0; break;
        default: break;
        }
    }
    return NNT_OK;
}

size_t nnt_tensor_nbytes(const nnt_tensor *t)
{
    return nnt_dtype_span(t->dtype, nnt_tensor_numel(t));
}

const char *nnt_dims_str(int ndim, const int64_t *shape, char *buf, size_t n)
{
    size_t k = 0;
    k += (size_t)snprintf(buf + k, n - k, "[");
    for (int i = 0; i < ndim && k < n; i++)
        k += (size_t)snprintf(buf + k, n - k, "%s%lld", i ? ", " : "", (long long)shape[i]);
    if (k < n) snprintf(buf + k, n - k, "]");
    return buf;
}

const char *nnt_shape_str(const nnt_tensor *t, char *buf, size_t n)
{
    return nnt_dims_str(t->ndim, t->shape, buf, n);
}

int nnt_shape_equal(int nd_a, const int64_t *a, int nd_b, const int64_t *b)
{
    if (nd_a != nd_b) return 0;
    for (int i = 0; i < nd_a; i++)
        if (a[i] != b[i]) return 0;
    return 1;
}

nnt_status nnt_tensor_alloc(nnt_tensor *t, nnt_dtype dtype, int ndim, const int64_t *shape)
{
    if (!t || ndim < 0 || ndim > NNT_MAX_DIMS || nnt_dtype_size(dtype) == 0)
        return NNT_ERR_INVALID_ARGUMENT;
    memset(t, 0, sizeof *t);
    t->dtype = dtype;
    t->ndim = ndim;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0) return NNT_ERR_INVALID_ARGUMENT;
        t->shape[i] = shape[i];
    }
    size_t bytes = nnt_tensor_nbytes(t);
    t->data = calloc(bytes ? bytes : 1, 1);
    return t->data ? NNT_OK : NNT_ERR_OUT_OF_MEMORY;
}

void nnt_tensor_free(nnt_tensor *t)
{
    if (!t) return;
    free(t->data);
    t->data = NULL;
}

double nnt_tensor_get_f64(const nnt_tensor *t, int64_t i)
{
    return load_elem(t->data, t->dtype, i);
}
