/* cpu_isa.c - choosing the weight kernels for this CPU (or the instruction set the INI file's
 * `isa` option names, to measure a narrower path on a wider CPU), and the kernels' view of a
 * weight tensor. */
#include <string.h>

#include "cpu_internal.h"

#if defined(__x86_64__)
static int has_avx512(void)
{
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
}

static int has_avx2(void)
{
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}
#endif

nnt_status cpu_pick_kernels(const char *want, const cpu_kernels **out, nnt_error *err)
{
    if (!want || strcmp(want, "auto") == 0) {
#if defined(__x86_64__)
        *out = has_avx512() ? &cpu_kernels_avx512 : has_avx2() ? &cpu_kernels_avx2 : &cpu_kernels_base;
#else
        *out = &cpu_kernels_base;
#endif
        return NNT_OK;
    }
#if defined(__x86_64__)
    if (strcmp(want, "avx512") == 0) {
        if (!has_avx512())
            return cpu_error(err, NNT_ERR_CONFIG, "option isa = avx512: this CPU lacks AVX-512 F, BW, VL and DQ");
        *out = &cpu_kernels_avx512;
        return NNT_OK;
    }
    if (strcmp(want, "avx2") == 0) {
        if (!has_avx2()) return cpu_error(err, NNT_ERR_CONFIG, "option isa = avx2: this CPU lacks AVX2 and FMA");
        *out = &cpu_kernels_avx2;
        return NNT_OK;
    }
#endif
    if (strcmp(want, cpu_kernels_base.name) == 0) {
        *out = &cpu_kernels_base;
        return NNT_OK;
    }
    return cpu_error(err, NNT_ERR_CONFIG, "option isa = '%s' is not one this build offers here (auto, %s%s)", want,
#if defined(__x86_64__)
                     "avx512, avx2, ",
#else
                     "",
#endif
                     cpu_kernels_base.name);
}

int cpu_weight_view(const nnt_tensor *t, cpu_weight *o)
{
    if (!t || !t->data || t->ndim < 1) return 0;
    int encoded = t->dtype == NNT_F8_E4M3 || t->dtype == NNT_F4_E2M1;
    if (!encoded && t->dtype != NNT_F32 && t->dtype != NNT_BF16 && t->dtype != NNT_F16) return 0;
    int64_t cols = t->shape[t->ndim - 1], n = nnt_tensor_numel(t);
    memset(o, 0, sizeof *o);
    o->data = t->data;
    o->dtype = t->dtype;
    o->cols = cols;
    o->rows = cols ? n / cols : 0;
    o->mat_rows = t->ndim >= 2 ? t->shape[t->ndim - 2] : o->rows;
    if (o->mat_rows <= 0) o->mat_rows = 1;
    if (!encoded) {
        o->block_rows = o->mat_rows;
        o->block_cols = cols > 0 ? cols : 1;
        o->grid_rows = o->grid_cols = 1;
        return 1;
    }
    if (!t->scale || t->block_rows <= 0 || t->block_cols <= 0 || t->ndim < 2) return 0;
    if (t->scale_dtype != NNT_F32 && t->scale_dtype != NNT_BF16 && t->scale_dtype != NNT_F16 &&
        t->scale_dtype != NNT_F8_E8M0)
        return 0;
    if (t->dtype == NNT_F4_E2M1 && (cols % 2 || t->block_cols % 2)) return 0;
    o->scale = t->scale;
    o->scale_dtype = t->scale_dtype;
    if (t->block_row0 < 0 || t->block_row0 >= t->block_rows) return 0;
    o->block_rows = t->block_rows;
    o->block_cols = t->block_cols;
    o->row0 = t->block_row0;
    o->grid_rows = (o->row0 + o->mat_rows + o->block_rows - 1) / o->block_rows;
    o->grid_cols = (cols + o->block_cols - 1) / o->block_cols;
    return 1;
}
