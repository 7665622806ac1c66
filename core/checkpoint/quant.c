/* quant.c - encoded weights in the checkpoint's own bytes: FP8 e4m3 with block scales and FP4
 * e2m1 packed two per byte with group scales are recognised by their scale companions and
 * handed out as views of the mapped file (nnt_tensor.scale), never widened; and a reference
 * decoder turns any weight encoding into float32 rows (tests and tools; kernels decode on their
 * own).
 *
 * Formats: FP8 e4m3fn and the 128x128 blocks of the DeepSeek-V3 report (a scale multiplies its
 * block); FP4 e2m1 with E8M0 scales per 32 inputs from the OCP Microscaling Formats v1.0, the low
 * nibble holding the even element as torch's float4_e2m1fn_x2 does. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

static int scale_dtype_ok(nnt_dtype dt)
{
    return dt == NNT_F32 || dt == NNT_BF16 || dt == NNT_F16 || dt == NNT_F8_E8M0;
}

float nnt_scale_get(nnt_dtype dt, const void *grid, int64_t i)
{
    switch (dt) {
    case NNT_F32: {
        float f;
        memcpy(&f, (const char *)grid + 4 * i, 4); /* the mapping may leave it unaligned */
        return f;
    }
    case NNT_BF16:
    case NNT_F16: {
        uint16_t h;
        memcpy(&h, (const char *)grid + 2 * i, 2);
        return dt == NNT_BF16 ? nnt_bf16_to_f32(h) : nnt_f16_to_f32(h);
    }
    case NNT_F8_E8M0: return nnt_e8m0_to_f32(((const uint8_t *)grid)[i]);
    default: return NAN;
    }
}

static int64_t ceil_div(int64_t a, int64_t b)
{
    return (a + b - 1) / b;
}

/* The FP8 block size from config.json (rows, columns), 128x128 when not given. */
static nnt_status fp8_block(const nnt_checkpoint *ck, int64_t *br, int64_t *bc, nnt_error *err)
{
    *br = *bc = 128;
    if (!nnt_cfg_has(ck, "quantization_config.weight_block_size")) return NNT_OK;
    int64_t bs[2];
    int n = 0;
    nnt_status st = nnt_cfg_int_list(ck, "quantization_config.weight_block_size", NULL, 0, bs, 2, &n, err);
    if (st != NNT_OK) return st;
    if (n != 2 || bs[0] <= 0 || bs[1] <= 0 || bs[0] > (1 << 20) || bs[1] > (1 << 20))
        return nnt_err_set(err, NNT_ERR_CONFIG,
                           "%s: quantization_config.weight_block_size must be two positive block sizes [rows, columns]",
                           nnt_cfg_path(ck));
    *br = bs[0];
    *bc = bs[1];
    return NNT_OK;
}

static nnt_status scale_dtype_check(const char *file, const char *sname, const nnt_tensor *s, nnt_error *err)
{
    if (scale_dtype_ok(s->dtype)) return NNT_OK;
    return nnt_err_set(err, NNT_ERR_SHAPE, "%s: scale tensor '%s' has dtype %s; expected F32, BF16, F16 or F8_E8M0", file,
                       sname, nnt_dtype_name(s->dtype));
}

static nnt_status fp8_view(const nnt_checkpoint *ck, const char *file, const char *name, nnt_tensor *t,
                           const nnt_tensor *s, const char *sname, nnt_error *err)
{
    if (!s)
        return nnt_err_set(err, NNT_ERR_NOT_FOUND, "%s: FP8 tensor '%s' has no companion '%s' holding its block scales",
                           file, name, sname);
    if (t->ndim < 2)
        return nnt_err_set(err, NNT_ERR_SHAPE, "%s: FP8 tensor '%s' has %d dimensions; block scales need at least 2",
                           file, name, t->ndim);
    nnt_status st = scale_dtype_check(file, sname, s, err);
    if (st != NNT_OK) return st;
    int64_t br, bc;
    if ((st = fp8_block(ck, &br, &bc, err)) != NNT_OK) return st;
    int64_t rows = t->shape[t->ndim - 2], cols = t->shape[t->ndim - 1];
    int64_t sr = ceil_div(rows, br), sc = ceil_div(cols, bc);
    int ok = s->ndim == t->ndim && s->shape[s->ndim - 2] == sr && s->shape[s->ndim - 1] == sc;
    for (int i = 0; ok && i < t->ndim - 2; i++) ok = s->shape[i] == t->shape[i];
    if (!ok) {
        char got[96], w[96];
        return nnt_err_set(err, NNT_ERR_SHAPE,
                           "%s: scale tensor '%s' has shape %s; weight '%s' %s with %lldx%lld blocks needs %lld x %lld "
                           "blocks",
                           file, sname, nnt_shape_str(s, got, sizeof got), name, nnt_shape_str(t, w, sizeof w),
                           (long long)br, (long long)bc, (long long)sr, (long long)sc);
    }
    t->scale = s->data;
    t->scale_dtype = s->dtype;
    t->block_rows = (int32_t)br;
    t->block_cols = (int32_t)bc;
    return NNT_OK;
}

/* Packed FP4: t is I8/U8 [.., cols / 2] (or F4 [.., cols]); the scales one per group of
 * columns, [.., rows, groups] or flattened to [lead * rows, groups]. */
static nnt_status fp4_view(const char *file, const char *name, nnt_tensor *t, const nnt_tensor *s, const char *sname,
                           int64_t cols, nnt_error *err)
{
    /* E8M0 scales stored as plain bytes (U8): MiMo-V2.5 / V2.6's MXFP4 experts
     * (docs/mimo-v2.5-layout.md); the byte is the E8M0 code either way */
    nnt_tensor s8 = *s;
    if (s8.dtype == NNT_U8) s8.dtype = NNT_F8_E8M0;
    s = &s8;
    nnt_status st = scale_dtype_check(file, sname, s, err);
    if (st != NNT_OK) return st;
    int64_t rows = 1;
    for (int i = 0; i < t->ndim - 1; i++) rows *= t->shape[i];
    int64_t groups = s->ndim >= 2 ? s->shape[s->ndim - 1] : 0;
    int64_t srows = 1;
    for (int i = 0; i < s->ndim - 1; i++) srows *= s->shape[i];
    if (t->ndim < 2 || s->ndim < 2 || srows != rows || groups <= 0 || cols % groups || (cols / groups) % 2) {
        char got[96], w[96];
        return nnt_err_set(err, NNT_ERR_SHAPE,
                           "%s: scale tensor '%s' has shape %s; the packed FP4 weight '%s' %s (%lld inputs a row) needs "
                           "one scale per row and group of an even number of inputs, [.., %lld, inputs / group]",
                           file, sname, nnt_shape_str(s, got, sizeof got), name, nnt_shape_str(t, w, sizeof w),
                           (long long)cols, (long long)t->shape[t->ndim - 2]);
    }
    t->dtype = NNT_F4_E2M1;
    t->shape[t->ndim - 1] = cols;
    t->scale = s->data;
    t->scale_dtype = s->dtype;
    t->block_rows = 1;
    t->block_cols = (int32_t)(cols / groups);
    return NNT_OK;
}

nnt_status nnt_quant_view(const nnt_checkpoint *ck, const char *file, const char *name, nnt_tensor *t,
                          const nnt_tensor *s, const char *sname, int ndim, const int64_t *shape, int *encoded,
                          nnt_error *err)
{
    *encoded = 0;
    nnt_status st;
    if (t->dtype == NNT_F8_E4M3) {
        /* A stack of `n` matrices quantised each on its own but stored flattened, [n * rows, in]
         * with [n * ceil(rows / B), ..] scales, when the caller asks for [n, rows, in]: the fused
         * qkv_proj of MiMo-V2.5 / V2.6, one chunk per key/value group (docs/mimo-v2.5-layout.md).
         * Seen as [n, rows, in] with [n, ceil(rows / B), ..] scales; fp8_view checks the grid. */
        nnt_tensor s3;
        if (s && ndim == 3 && t->ndim == 2 && s->ndim == 2 && shape[0] >= 1 && shape[1] > 0 &&
            shape[0] * shape[1] == t->shape[0] && shape[2] == t->shape[1] && s->shape[0] % shape[0] == 0) {
            t->ndim = 3;
            t->shape[0] = shape[0];
            t->shape[1] = shape[1];
            t->shape[2] = shape[2];
            s3 = *s;
            s3.ndim = 3;
            s3.shape[0] = shape[0];
            s3.shape[1] = s->shape[0] / shape[0];
            s3.shape[2] = s->shape[1];
            s = &s3;
        }
        if ((st = fp8_view(ck, file, name, t, s, sname, err)) != NNT_OK) return st;
        *encoded = 1;
    } else if (s && t->dtype == NNT_F4_E2M1) {
        if ((st = fp4_view(file, name, t, s, sname, t->shape[t->ndim - 1], err)) != NNT_OK) return st;
        *encoded = 1;
    } else if (s && (t->dtype == NNT_I8 || t->dtype == NNT_U8) && ndim > 0 && ndim == t->ndim &&
               t->shape[ndim - 1] * 2 == shape[ndim - 1]) {
        /* FP4 stored two per byte: the caller asks for [.., in], the file holds [.., in / 2] */
        int lead_ok = 1;
        for (int i = 0; i < ndim - 1; i++) lead_ok &= t->shape[i] == shape[i];
        if (!lead_ok) return NNT_OK; /* the shape check names both shapes */
        if ((st = fp4_view(file, name, t, s, sname, shape[ndim - 1], err)) != NNT_OK) return st;
        *encoded = 1;
    }
    if (*encoded && ndim > 0 && !nnt_shape_equal(t->ndim, t->shape, ndim, shape)) {
        char got[96], want[96];
        return nnt_err_set(err, NNT_ERR_SHAPE, "%s: tensor '%s' has shape %s, but config.json implies %s", file, name,
                           nnt_shape_str(t, got, sizeof got), nnt_dims_str(ndim, shape, want, sizeof want));
    }
    return NNT_OK;
}

float nnt_fp4_e2m1_to_f32(uint8_t code)
{
    static const float mag[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
    float v = mag[code & 7];
    return (code & 8) ? -v : v;
}

nnt_status nnt_weight_decode(const nnt_tensor *w, int64_t row0, int64_t nrows, float *dst, nnt_error *err)
{
    if (!w || !dst || w->ndim < 1 || w->device)
        return nnt_err_set(err, NNT_ERR_INVALID_ARGUMENT, "decode: a host weight and a destination are needed");
    int64_t cols = w->shape[w->ndim - 1], rows = cols ? nnt_tensor_numel(w) / cols : 0;
    if (row0 < 0 || nrows < 0 || row0 + nrows > rows)
        return nnt_err_set(err, NNT_ERR_INDEX, "decode: rows [%lld, %lld) of a weight of %lld rows", (long long)row0,
                           (long long)(row0 + nrows), (long long)rows);
    int encoded = w->dtype == NNT_F8_E4M3 || w->dtype == NNT_F4_E2M1;
    if (encoded && (!w->scale || w->block_rows <= 0 || w->block_cols <= 0 || w->ndim < 2))
        return nnt_err_set(err, NNT_ERR_SHAPE, "decode: a %s weight without block scales", nnt_dtype_name(w->dtype));
    if (!encoded && w->dtype != NNT_F32 && w->dtype != NNT_BF16 && w->dtype != NNT_F16)
        return nnt_err_set(err, NNT_ERR_UNSUPPORTED, "decode: weights of dtype %s", nnt_dtype_name(w->dtype));
    int64_t R = w->ndim >= 2 ? w->shape[w->ndim - 2] : rows, r0 = encoded ? w->block_row0 : 0;
    int64_t sr = encoded ? ceil_div(R + r0, w->block_rows) : 0, sc = encoded ? ceil_div(cols, w->block_cols) : 0;
    const uint8_t *b = w->data;
    for (int64_t r = row0; r < row0 + nrows; r++) {
        float *d = dst + (r - row0) * cols;
        int64_t mat = r / (R ? R : 1), rr = r % (R ? R : 1);
        for (int64_t c = 0; c < cols; c++) {
            int64_t i = r * cols + c;
            float v;
            switch (w->dtype) {
            case NNT_F32: memcpy(&v, b + 4 * i, 4); break;
            case NNT_BF16:
            case NNT_F16: {
                uint16_t h;
                memcpy(&h, b + 2 * i, 2);
                v = w->dtype == NNT_BF16 ? nnt_bf16_to_f32(h) : nnt_f16_to_f32(h);
                break;
            }
            case NNT_F8_E4M3: v = nnt_fp8_e4m3_to_f32(b[i]); break;
            default: v = nnt_fp4_e2m1_to_f32((uint8_t)((i & 1) ? b[i / 2] >> 4 : b[i / 2] & 0xf)); break;
            }
            if (encoded)
                v *= nnt_scale_get(w->scale_dtype, w->scale, (mat * sr + (rr + r0) / w->block_rows) * sc + c / w->block_cols);
            d[c] = v;
        }
    }
    return NNT_OK;
}

nnt_status nnt_ck_tensor(const nnt_checkpoint *ck_const, const char *name, int ndim, const int64_t *shape,
                         nnt_tensor *out, nnt_error *err)
{
    nnt_checkpoint *ck = (nnt_checkpoint *)ck_const; /* counts what is bound */
    const char *file = NULL;
    nnt_tensor t;
    nnt_status st = nnt_ck_lookup(ck, name, &t, &file, err);
    if (st == NNT_ERR_NOT_FOUND) return nnt_err_set(err, st, "%s: the checkpoint has no tensor '%s'", ck->dir, name);
    if (st != NNT_OK) return st;
    char sname[512];
    const char *scale = nnt_ck_scale_name(ck, name, sname, sizeof sname);
    nnt_tensor s;
    if (scale && (st = nnt_ck_lookup(ck, scale, &s, NULL, err)) != NNT_OK) return st;
    int encoded = 0;
    st = nnt_quant_view(ck, file, name, &t, scale ? &s : NULL, sname, ndim, shape, &encoded, err);
    if (st != NNT_OK) return st;
    if (!encoded) {
        if (ndim > 0 && !nnt_shape_equal(t.ndim, t.shape, ndim, shape)) {
            char got[96], want[96];
            return nnt_err_set(err, NNT_ERR_SHAPE, "%s: tensor '%s' has shape %s, but config.json implies %s", file,
                               name, nnt_shape_str(&t, got, sizeof got), nnt_dims_str(ndim, shape, want, sizeof want));
        }
        switch (t.dtype) {
        case NNT_F32:
        case NNT_BF16:
        case NNT_F16:
        case NNT_I64:
        case NNT_I32: break;
        default:
            return nnt_err_set(err, NNT_ERR_SHAPE,
                               "%s: tensor '%s' has dtype %s; expected F32, BF16, F16, F8_E4M3 with block scales, "
                               "or packed FP4 with group scales",
                               file, name, nnt_dtype_name(t.dtype));
        }
    } else {
        nnt_ck_mark_bound(ck, sname);
    }
    nnt_ck_mark_bound(ck, name);
    *out = t;
    return NNT_OK;
}
