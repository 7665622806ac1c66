/* cpu_weights.h - the cpu backend's view of a weight in its stored encoding (F32, BF16, F16,
 * FP8 e4m3 and FP4 e2m1 with block scales) and the per-instruction-set kernel tables that read
 * it: few-row products that decode in registers, row decoding into float32 panels, and
 * bfloat16 rounding. One implementation (cpu_kernels_impl.h) is compiled once per instruction
 * set (cpu_kernels_avx512.c, cpu_kernels_avx2.c, cpu_kernels_base.c); cpu_isa.c picks one at
 * run time. */
#ifndef NNT_CPU_WEIGHTS_H
#define NNT_CPU_WEIGHTS_H

#include <stdint.h>

#include "nnt/nnt_types.h"

/* The products that stream the weight once through registers serve at most this many rows of x. */
#define CPU_FEW_ROWS 8

/* A weight as a matrix [rows, cols] (leading axes folded into rows), with its scale grid. An
 * unscaled dtype is one block spanning the whole row with scale 1. */
typedef struct cpu_weight {
    const uint8_t *data;
    nnt_dtype dtype;        /* F32, BF16, F16, F8_E4M3, F4_E2M1 */
    int64_t rows, cols;
    const void *scale;      /* NULL for F32, BF16, F16 */
    nnt_dtype scale_dtype;  /* F32, BF16, F16, F8_E8M0 */
    int64_t block_rows, block_cols;
    int64_t mat_rows;       /* rows of one matrix of the leading axes (the grid restarts there) */
    int64_t row0;           /* nnt_tensor.block_row0: matrix row r is grid row (r + row0) / block_rows */
    int64_t grid_rows, grid_cols; /* scale grid of one matrix */
} cpu_weight;

/* gemv's flags. CPU_GEMV_ROUND: each decoded, scaled weight value is rounded to bfloat16 first
 * (bfloat16 products on a weight whose values are not bfloat16 numbers). CPU_GEMV_X_BF16: every
 * entry of x is a bfloat16 number (bfloat16 products: the caller rounded x), so a kernel may
 * multiply through bfloat16 instructions without changing a product. */
#define CPU_GEMV_ROUND 1
#define CPU_GEMV_X_BF16 2

/* Kernels of one instruction set. Every function reads the weight in its encoding; none
 * allocates. */
typedef struct cpu_kernels {
    const char *name; /* "avx512", "avx2", "sse2", "neon", "portable" */
    /* The most rows of x that linear gives gemv (CPU_FEW_ROWS at a time, the thread's weight rows
     * read again for each group) rather than decoded panels: with AVX-512's tiles 16 (the groups
     * ran 1.3-2.1x the panels at 12 and 16 rows and lost at 32; bench_gemv --m, Intel Xeon family 6
     * model 207, bench/results/2026-12-07-43c9f67-gemv-icx.md), elsewhere CPU_FEW_ROWS (AVX2's
     * groups lost from 12 rows on). */
    int gemv_rows;
    /* y[m * ldy + n] = sum_k x[m * K + k] * w[n, k] for m < M <= CPU_FEW_ROWS and weight rows
     * n in [n0, n1); K = w->cols. flags: CPU_GEMV_ROUND and CPU_GEMV_X_BF16 (below). */
    void (*gemv)(const float *x, int64_t M, const cpu_weight *w, int64_t n0, int64_t n1, float *y, int64_t ldy,
                 int flags);
    /* dst[(r - r0) * ld + c] = w[r, c] decoded and scaled, float32, for r in [r0, r1). */
    void (*decode)(const cpu_weight *w, int64_t r0, int64_t r1, float *dst, int64_t ld);
    /* dst[i] = src[i] rounded to the nearest bfloat16 (ties to even), as float32; dst may be src. */
    void (*round_bf16)(const float *src, float *dst, int64_t n);
    /* dst[i] = the bfloat16 bits nearest src[i] (ties to even). */
    void (*pack_bf16)(const float *src, uint16_t *dst, int64_t n);
    /* As decode, into the bfloat16 bits nearest each decoded, scaled value. */
    void (*decode_bf16)(const cpu_weight *w, int64_t r0, int64_t r1, uint16_t *dst, int64_t ld);
    /* dst[i] = e^src[i] within two units in the last place (0 below -87.3, infinity above
     * 88.7, -infinity gives 0); dst may be src. */
    void (*exp)(const float *src, float *dst, int64_t n);
} cpu_kernels;

/* Fills *out from a 2-D (or higher) weight tensor; 0 when its dtype or scales are not readable
 * (the caller reports the error). */
int cpu_weight_view(const nnt_tensor *t, cpu_weight *out);

/* The kernel tables built into this backend (each NULL where not compiled for this target). */
extern const cpu_kernels cpu_kernels_avx512;
extern const cpu_kernels cpu_kernels_avx2;
extern const cpu_kernels cpu_kernels_base;

#endif
