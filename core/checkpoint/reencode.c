/* reencode.c - weights re-encoded at load: a weight a checkpoint stores in F32, BF16 or F16
 * turned into FP8 e4m3 codes with one float32 scale per 128 x 128 block (the block scheme of the
 * DeepSeek-V3 report, which FP8 releases such as MiniMax-M2 use), for a researcher who asks the
 * INI file for `weights = fp8` to halve the bytes a BF16 release's products read; and the record
 * of how far the re-encoded values are from the stored ones, which `nnt info` prints.
 *
 * A block's scale is its largest magnitude over 448 (e4m3fn's largest finite value), so the block's
 * largest value is coded exactly as +-448 and every other value to the nearest code below it
 * (ties to even); a block of zeros gets scale 1. Decoding multiplies, as weight_scale_inv does in
 * those releases. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

#define REENCODE_BLOCK 128
#define E4M3_MAX 448.0f

static int64_t ceil_div(int64_t a, int64_t b)
{
    return (a + b - 1) / b;
}

static float stored_value(const nnt_tensor *t, int64_t i)
{
    switch (t->dtype) {
    case NNT_BF16: return nnt_bf16_to_f32(((const uint16_t *)t->data)[i]);
    case NNT_F16: return nnt_f16_to_f32(((const uint16_t *)t->data)[i]);
    default: {
        float f;
        memcpy(&f, (const char *)t->data + 4 * i, 4);
        return f;
    }
    }
}

/* The errors of one tensor, added to the checkpoint's record afterwards. */
typedef struct {
    double err2, ref2, max_abs;
} tensor_error;

/* Codes [R, C] and scales [ceil(R / 128), ceil(C / 128)] of matrix `mat` of t (rows R, C apart).
 * rows: a float32 buffer of 128 C values. Errors: NNT_ERR_SHAPE for a value that is not finite. */
static nnt_status encode_matrix(const nnt_checkpoint *ck, const char *name, const nnt_tensor *t, int64_t mat,
                                int64_t R, int64_t C, const float *decode, float *rows, uint8_t *codes, float *scales,
                                tensor_error *e, nnt_error *err)
{
    int64_t gc = ceil_div(C, REENCODE_BLOCK);
    for (int64_t r0 = 0; r0 < R; r0 += REENCODE_BLOCK) {
        int64_t nr = R - r0 < REENCODE_BLOCK ? R - r0 : REENCODE_BLOCK;
        for (int64_t i = 0; i < nr * C; i++) {
            rows[i] = stored_value(t, (mat * R + r0) * C + i);
            if (!isfinite(rows[i]))
                return nnt_err_set(err, NNT_ERR_SHAPE,
                                   "%s: tensor '%s' holds %g at [%lld, %lld] of matrix %lld; weights = fp8 re-encodes "
                                   "finite values only",
                                   ck->dir, name, (double)rows[i], (long long)(r0 + i / C), (long long)(i % C),
                                   (long long)mat);
        }
        for (int64_t c0 = 0; c0 < C; c0 += REENCODE_BLOCK) {
            int64_t nc = C - c0 < REENCODE_BLOCK ? C - c0 : REENCODE_BLOCK;
            float amax = 0.0f;
            for (int64_t r = 0; r < nr; r++)
                for (int64_t c = 0; c < nc; c++) {
                    float a = fabsf(rows[r * C + c0 + c]);
                    if (a > amax) amax = a;
                }
            float s = amax / E4M3_MAX;
            if (!(s > 0.0f)) s = 1.0f; /* zeros, or a magnitude too small to scale */
            scales[(r0 / REENCODE_BLOCK) * gc + c0 / REENCODE_BLOCK] = s;
            for (int64_t r = 0; r < nr; r++)
                for (int64_t c = 0; c < nc; c++) {
                    float v = rows[r * C + c0 + c];
                    uint8_t q = nnt_f32_to_fp8_e4m3(v / s);
                    codes[(r0 + r) * C + c0 + c] = q;
                    double d = (double)v - (double)(decode[q] * s);
                    e->err2 += d * d;
                    e->ref2 += (double)v * v;
                    if (fabs(d) > e->max_abs) e->max_abs = fabs(d);
                }
        }
    }
    return NNT_OK;
}

nnt_status nnt_ck_tensor_fp8(const nnt_checkpoint *ck_const, const char *name, int ndim, const int64_t *shape,
                             nnt_tensor *out, nnt_error *err)
{
    nnt_checkpoint *ck = (nnt_checkpoint *)ck_const; /* owns the codes and keeps the record */
    nnt_tensor t;
    nnt_status st = nnt_ck_tensor(ck, name, ndim, shape, &t, err);
    if (st != NNT_OK) return st;
    if ((t.dtype != NNT_F32 && t.dtype != NNT_BF16 && t.dtype != NNT_F16) || t.ndim < 2) {
        *out = t;
        return NNT_OK;
    }
    int64_t R = t.shape[t.ndim - 2], C = t.shape[t.ndim - 1], n = nnt_tensor_numel(&t);
    int64_t mats = R && C ? n / (R * C) : 0, gr = ceil_div(R, REENCODE_BLOCK), gc = ceil_div(C, REENCODE_BLOCK);
    size_t code_bytes = ((size_t)n + 63) / 64 * 64, grid_bytes = (size_t)(mats * gr * gc) * sizeof(float);
    uint8_t *buf = malloc(code_bytes + grid_bytes + 1);
    float *rows = malloc((size_t)(REENCODE_BLOCK * (C ? C : 1)) * sizeof *rows);
    if (!buf || !rows) {
        free(buf);
        free(rows);
        return nnt_err_set(err, NNT_ERR_OUT_OF_MEMORY, "%s: no memory to re-encode tensor '%s' as FP8", ck->dir, name);
    }
    float decode[256];
    for (int q = 0; q < 256; q++) decode[q] = nnt_fp8_e4m3_to_f32((uint8_t)q);
    float *scales = (float *)(buf + code_bytes);
    tensor_error e = {0};
    for (int64_t m = 0; m < mats && st == NNT_OK; m++)
        st = encode_matrix(ck, name, &t, m, R, C, decode, rows, buf + m * R * C, scales + m * gr * gc, &e, err);
    free(rows);
    if (st == NNT_OK) st = nnt_ck_own(ck, buf, code_bytes + grid_bytes, err);
    if (st != NNT_OK) {
        free(buf);
        return st;
    }
    nnt_reencode_record *rec = &ck->reencoded;
    double rel = e.ref2 > 0 ? sqrt(e.err2 / e.ref2) : 0.0;
    if (rec->tensors == 0 || rel > rec->worst_rel_rms) {
        rec->worst_rel_rms = rel;
        snprintf(rec->worst, sizeof rec->worst, "%s", name);
    }
    rec->tensors++;
    rec->values += (uint64_t)n;
    rec->stored_bytes += nnt_tensor_nbytes(&t);
    rec->encoded_bytes += (uint64_t)n + grid_bytes;
    rec->err2 += e.err2;
    rec->ref2 += e.ref2;
    if (e.max_abs > rec->max_abs) rec->max_abs = e.max_abs;
    nnt_tensor q = t;
    q.dtype = NNT_F8_E4M3;
    q.data = buf;
    q.scale = scales;
    q.scale_dtype = NNT_F32;
    q.block_rows = q.block_cols = REENCODE_BLOCK;
    q.block_row0 = 0;
    *out = q;
    return NNT_OK;
}

void nnt_ck_reencoding(const nnt_checkpoint *ck, nnt_reencoding *out)
{
    const nnt_reencode_record *rec = &ck->reencoded;
    out->tensors = rec->tensors;
    out->values = rec->values;
    out->stored_bytes = rec->stored_bytes;
    out->encoded_bytes = rec->encoded_bytes;
    out->rel_rms = rec->ref2 > 0 ? sqrt(rec->err2 / rec->ref2) : 0.0;
    out->max_abs = rec->max_abs;
    out->worst_rel_rms = rec->worst_rel_rms;
    snprintf(out->worst, sizeof out->worst, "%s", rec->worst);
}
