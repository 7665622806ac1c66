/* cpu_kernels_impl.h - the cpu backend's weight kernels, written once with GCC/Clang vector
 * extensions and compiled once per instruction set: the including file defines VL (float lanes:
 * 16 for AVX-512, 8 for AVX2, 4 for SSE2 and NEON), CPU_KERNELS_TABLE (the table's symbol) and
 * CPU_KERNELS_NAME, and is built with that set's target flags.
 *
 * Decoding in registers, VL codes at a time, exact for every finite value:
 *   BF16  u16 << 16 is the float's bit pattern;
 *   F16   the half-to-single conversion (F16C / AVX-512 / NEON instruction, else arithmetic);
 *   FP8   e4m3 s.eeee.mmm placed in a half's bits (sign to bit 15, the rest to bits 13..7)
 *         reads as the value times 2^-8, the exponent biases being 7 and 15 - subnormals too;
 *   FP4   e2m1 s.ee.m the same way (bits 15 and 11..9): the value times 2^-14 (bias 1); two
 *         codes per byte, the low nibble first.
 * The 2^8 and 2^14 are folded into the block scale. No step makes a subnormal single, which x86
 * processors handle slowly. (The FP8 code 0x7f/0xff, NaN in e4m3fn, reads as 480; F16
 * infinities and NaNs are not decoded; checkpoint weights hold neither.) Block scales multiply
 * each block's partial dot product (few-row products) or each decoded element (panels).
 * Sources: IEEE 754 binary16; the OCP 8-bit floating point specification (e4m3fn); OCP
 * Microscaling Formats v1.0 (e2m1, e8m0). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) && (defined(__F16C__) || defined(__AVX2__) || defined(__AVX512F__))
#include <immintrin.h>
#endif
#if defined(__aarch64__)
#include <arm_neon.h>
#endif

#include "cpu_weights.h"

#ifndef VL
#error "define VL before including cpu_kernels_impl.h"
#endif

typedef float vf __attribute__((vector_size(VL * 4)));
typedef uint32_t vu __attribute__((vector_size(VL * 4)));
typedef uint16_t vh __attribute__((vector_size(VL * 2)));
typedef uint8_t vb __attribute__((vector_size(VL)));
typedef uint8_t vb2 __attribute__((vector_size(VL / 2)));
typedef int8_t vsb __attribute__((vector_size(VL)));
typedef int16_t vsh __attribute__((vector_size(VL * 2)));
typedef int32_t vsi __attribute__((vector_size(VL * 4)));

#if VL == 16
#define NIB_IDX 0, 8, 1, 9, 2, 10, 3, 11, 4, 12, 5, 13, 6, 14, 7, 15
#elif VL == 8
#define NIB_IDX 0, 4, 1, 5, 2, 6, 3, 7
#elif VL == 4
#define NIB_IDX 0, 2, 1, 3
#else
#error "VL must be 4, 8 or 16"
#endif

#define INLINE static inline __attribute__((always_inline))
/* Software prefetch of the weight rows PF_ROWS rows ahead of the tile being computed, with
 * temporal locality hint PF_HINT (2: prefetcht1 on x86, into the L2 cache). The non-temporal
 * hint (0: prefetchnta) is worse on Intel cores: there it fills only the L1 cache, which is
 * smaller than 8 rows of a 3072-wide weight, so the lines are evicted before the tile reaches
 * them and read from memory twice - measured on an Intel Xeon (family 6, model 207) with
 * bench_gemv, one thread: BF16 6.8 -> 13.7 GB/s, FP8 with float32 scales 5.5 -> 10.9, FP4
 * 5.5 -> 8.7 (hints 1, 2 and 3 within the run's spread of each other). On an AMD Zen 3 (family
 * 25 model 1, AVX2 only) hints 0 and 2 read at the same rates (bench_gemv, one thread, two runs
 * each, within 3%). The AMD Zen 5 figures elsewhere in this file were measured with hint 0 and
 * not measured again. */
#ifndef PF_ROWS
#define PF_ROWS 8
#endif
#ifndef PF_HINT
#define PF_HINT 2
#endif
#define PREFETCH(p) __builtin_prefetch((p), 0, PF_HINT)

/* Rows n .. n1 of a few-row product against MM rows of x in tiles of RR weight rows, then single
 * rows for the rest: TILE(M, R) computes rows n .. n + R against M rows of x. */
#define FEW_ROWS_TILES(TILE, MM, RR)                                                                                  \
    do {                                                                                                              \
        for (; n + (RR) <= n1; n += (RR)) TILE(MM, RR);                                                               \
        for (; n < n1; n++) TILE(MM, 1);                                                                              \
    } while (0)

/* Rows n .. n1 of a few-row product in tiles of constant shape: R1 weight rows at a time against
 * one row of x, 2 against 2, R3 against 3 or 4 rows of x and R5 against 5 to 8 (up to
 * CPU_FEW_ROWS = 8). Expects n, n1 and M. */
#define FEW_ROWS_SWITCH_R(TILE, R1, R3, R5)                                                                           \
    switch (M) {                                                                                                      \
    case 1: FEW_ROWS_TILES(TILE, 1, R1); break;                                                                       \
    case 2: FEW_ROWS_TILES(TILE, 2, 2); break;                                                                        \
    case 3: FEW_ROWS_TILES(TILE, 3, R3); break;                                                                       \
    case 4: FEW_ROWS_TILES(TILE, 4, R3); break;                                                                       \
    case 5: FEW_ROWS_TILES(TILE, 5, R5); break;                                                                       \
    case 6: FEW_ROWS_TILES(TILE, 6, R5); break;                                                                       \
    case 7: FEW_ROWS_TILES(TILE, 7, R5); break;                                                                       \
    default: FEW_ROWS_TILES(TILE, 8, R5); break;                                                                      \
    }

/* One weight row against 3 to 8 rows of x, 4 against one. */
#define FEW_ROWS_SWITCH(TILE) FEW_ROWS_SWITCH_R(TILE, 4, 1, 1)

/* For kernels whose tiles can take several weight rows against 3 to 8 rows of x: 4 weight rows
 * against 3 or 4 rows of x, 2 against 5 to 8, so that a column step's x is read once for all of
 * them (one weight row per tile reads the whole of x again for each weight row, from the L2
 * cache past 2 rows of a 3072-wide x). */
#define FEW_ROWS_SWITCH_WIDE(TILE) FEW_ROWS_SWITCH_R(TILE, 4, 4, 2)

/* As FEW_ROWS_SWITCH_WIDE, but one weight row at a time against one row of x (decoding): each
 * thread then reads one stream of weight bytes at a time, not four, and x (one row) stays in the
 * L1 cache. Taken where it paid from memory, which is where a decoding step's weights are:
 * bench_gemv --m 1, AMD Zen 5 (family 26 model 2), GB/s with 4 -> 1 weight rows per tile, two
 * threads from memory (--threads 2) | one thread in cache (--threads 1 --n 256 --mb 0):
 *   FP8 lanes kernel, float32 products, AVX-512: 33.5-37.5 -> 44.5-51.6 | 47.7-49.4 -> 43.8-44.8
 *     (E8M0 scales 40.4-44.9 -> 49.2-51.7); AVX2: within the spread | 30 -> 27
 *   FP4 planes (float32) and FP4 dot products (bfloat16, AVX512-BF16): 37.5-44.6 -> 46.1-47.2
 *     and 40.2-41.8 -> 48.5-52.0 | 27 -> 28 and 33-34 -> 29-30
 * Kept at 4: the BF16 kernel (41 -> 37 from memory), the lanes kernel's bfloat16 products on
 * AVX2 (31 -> 19), and the AVX-512 FP8 table kernel for bfloat16 products (+8-15% from memory,
 * 50 -> 29 in cache). Not measured on other CPUs. */
#define FEW_ROWS_SWITCH_STREAM(TILE) FEW_ROWS_SWITCH_R(TILE, 1, 4, 2)

INLINE vf loadf(const float *p)
{
    vf v;
    memcpy(&v, p, sizeof v);
    return v;
}

INLINE float hsum(vf v)
{
    float s = 0.0f;
    for (int i = 0; i < VL; i++) s += v[i];
    return s;
}

/* ---- half precision to single, VL lanes ----
 * With F16C (AVX2 builds) or AVX-512 the conversion instruction; otherwise arithmetic that never
 * makes a subnormal single (x86 processors take a slow assist on those): the exponent is rebased
 * by an integer add, and lanes whose half is subnormal (exponent 0) are corrected by
 * 2 * (f - 2^-15). Infinities and NaNs are not converted. */
INLINE vf half_to_float(vh h)
{
#if VL == 16 && defined(__AVX512F__)
    __m256i v;
    memcpy(&v, &h, sizeof v);
    __m512 f = _mm512_cvtph_ps(v);
    vf r;
    memcpy(&r, &f, sizeof r);
    return r;
#elif VL == 8 && defined(__F16C__)
    __m128i v;
    memcpy(&v, &h, sizeof v);
    __m256 f = _mm256_cvtph_ps(v);
    vf r;
    memcpy(&r, &f, sizeof r);
    return r;
#elif VL == 4 && defined(__aarch64__)
    float16x4_t v;
    memcpy(&v, &h, sizeof v);
    float32x4_t f = vcvt_f32_f16(v);
    vf r;
    memcpy(&r, &f, sizeof r);
    return r;
#else
    vu u = __builtin_convertvector(h, vu);
    vf fm = (vf)(((u & 0x7fffu) << 13) + (112u << 23));
    vf fc = fm * 2.0f - 0x1p-14f;
    vu sub = (vu)((u & 0x7c00u) == 0);
    return (vf)((((vu)fc & sub) | ((vu)fm & ~sub)) | ((u & 0x8000u) << 16));
#endif
}

/* ---- VL weights of a row from column c, as float32 "raw" values (c even for FP4) ----
 * FP8 and FP4 codes are moved into half-precision bit patterns that stand for the value times
 * 2^-8 (e4m3: bias 7 against 15) and 2^-14 (e2m1: bias 1), subnormals included; RAW_<type>
 * is the factor back, folded into the block scale. */
#define RAW_f32 1.0f
#define RAW_bf16 1.0f
#define RAW_f16 1.0f
#define RAW_fp8 0x1p8f
#define RAW_fp4 0x1p14f

INLINE vf ld_f32(const uint8_t *row, int64_t c)
{
    vf v;
    memcpy(&v, row + 4 * c, sizeof v);
    return v;
}

/* On x86 the widening is written with intrinsics: the compiler splits a generic 16-lane
 * conversion into halves (several instructions where one will do). */
#if VL == 16 && defined(__AVX512BW__)
#define X86_512 1
#elif VL == 8 && defined(__AVX2__)
#define X86_256 1
#endif

INLINE vf ld_bf16(const uint8_t *row, int64_t c)
{
#if defined(X86_512)
    __m512i u = _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(row + 2 * c))), 16);
    vf r;
    memcpy(&r, &u, sizeof r);
    return r;
#elif defined(X86_256)
    __m256i u = _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(row + 2 * c))), 16);
    vf r;
    memcpy(&r, &u, sizeof r);
    return r;
#else
    vh h;
    memcpy(&h, row + 2 * c, sizeof h);
    vu u = __builtin_convertvector(h, vu) << 16;
    return (vf)u;
#endif
}

INLINE vf ld_f16(const uint8_t *row, int64_t c)
{
    vh h;
    memcpy(&h, row + 2 * c, sizeof h);
    return half_to_float(h);
}

/* e4m3 to half bits: sign-extending the byte and shifting by 7 puts the sign at bit 15, a copy
 * of it at bit 14 (cleared by the mask) and the exponent and mantissa at bits 13..7 */
INLINE vf ld_fp8(const uint8_t *row, int64_t c)
{
#if defined(X86_512)
    __m256i h = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(row + c)));
    __m512 f = _mm512_cvtph_ps(_mm256_and_si256(_mm256_slli_epi16(h, 7), _mm256_set1_epi16((short)0xbf80)));
    vf r;
    memcpy(&r, &f, sizeof r);
    return r;
#elif defined(X86_256)
    __m128i h = _mm_cvtepi8_epi16(_mm_loadl_epi64((const __m128i *)(row + c)));
    __m256 f = _mm256_cvtph_ps(_mm_and_si128(_mm_slli_epi16(h, 7), _mm_set1_epi16((short)0xbf80)));
    vf r;
    memcpy(&r, &f, sizeof r);
    return r;
#else
    vsb b;
    memcpy(&b, row + c, sizeof b);
    vsh s = __builtin_convertvector(b, vsh);
    return half_to_float((vh)(s << 7) & 0xbf80u);
#endif
}

/* e2m1 to half bits: only the high byte is nonzero, ((c & 7) << 1) | ((c & 8) << 4), looked up
 * for the 16 codes (FP4_HIGH) */
#define FP4_HIGH 0x00, 0x02, 0x04, 0x06, 0x08, 0x0a, 0x0c, 0x0e, 0x80, 0x82, 0x84, 0x86, 0x88, 0x8a, 0x8c, 0x8e
INLINE vf ld_fp4(const uint8_t *row, int64_t c)
{
#if VL == 8 && defined(__AVX2__) && !defined(FP4_GENERIC_TEST)
    int32_t four;
    memcpy(&four, row + c / 2, 4);
    __m128i bytes = _mm_cvtsi32_si128(four), low = _mm_set1_epi8(0x0f);
    __m128i codes = _mm_unpacklo_epi8(_mm_and_si128(bytes, low), _mm_and_si128(_mm_srli_epi16(bytes, 4), low));
    __m128i high = _mm_shuffle_epi8(_mm_setr_epi8(FP4_HIGH), codes);
    __m256 f = _mm256_cvtph_ps(_mm_unpacklo_epi8(_mm_setzero_si128(), high));
    vf r;
    memcpy(&r, &f, sizeof r);
    return r;
#elif VL == 16 && defined(__AVX512BW__)
    __m128i bytes = _mm_loadl_epi64((const __m128i *)(row + c / 2)), low = _mm_set1_epi8(0x0f);
    __m128i codes = _mm_unpacklo_epi8(_mm_and_si128(bytes, low), _mm_and_si128(_mm_srli_epi16(bytes, 4), low));
    __m128i high = _mm_shuffle_epi8(_mm_setr_epi8(FP4_HIGH), codes), z = _mm_setzero_si128();
    __m256i h = _mm256_set_m128i(_mm_unpackhi_epi8(z, high), _mm_unpacklo_epi8(z, high));
    __m512 f = _mm512_cvtph_ps(h);
    vf r;
    memcpy(&r, &f, sizeof r);
    return r;
#else
    vb2 half;
    memcpy(&half, row + c / 2, sizeof half);
    vb2 lo = half & 0xfu, hi = half >> 4;
    vb b = __builtin_shufflevector(lo, hi, NIB_IDX); /* byte j's low nibble, then its high one */
    vh u = __builtin_convertvector(b, vh);
    return half_to_float(((u & 7u) << 9) | ((u & 8u) << 12));
#endif
}

/* ---- one weight element, raw as above, for the columns past the last whole vector ---- */

INLINE float bits_f(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* half-precision bits to float, finite values */
INLINE float half1(uint32_t h)
{
    uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    float v = e ? bits_f(((e + 112u) << 23) | (m << 13)) : (float)m * 0x1p-24f;
    return (h & 0x8000u) ? -v : v;
}

INLINE float d1_f32(const uint8_t *row, int64_t c)
{
    float f;
    memcpy(&f, row + 4 * c, 4);
    return f;
}

INLINE float d1_bf16(const uint8_t *row, int64_t c)
{
    uint16_t h;
    memcpy(&h, row + 2 * c, 2);
    return bits_f((uint32_t)h << 16);
}

INLINE float d1_f16(const uint8_t *row, int64_t c)
{
    uint16_t h;
    memcpy(&h, row + 2 * c, 2);
    return half1(h);
}

INLINE float d1_fp8(const uint8_t *row, int64_t c)
{
    uint32_t b = row[c];
    return half1(((b & 0x7fu) << 7) | ((b & 0x80u) << 8));
}

INLINE float d1_fp4(const uint8_t *row, int64_t c)
{
    uint32_t b = (c & 1) ? (uint32_t)(row[c / 2] >> 4) : (uint32_t)(row[c / 2] & 0xfu);
    return half1(((b & 7u) << 9) | ((b & 8u) << 12));
}

/* ---- block scales ---- */

/* The scale grid's row for weight row r (NULL for an unscaled weight), found once per row. */
INLINE const uint8_t *scale_row(const cpu_weight *w, int64_t r)
{
    if (!w->scale) return NULL;
    int64_t mat = r / w->mat_rows, rr = r - mat * w->mat_rows + w->row0;
    return (const uint8_t *)w->scale +
           nnt_dtype_span(w->scale_dtype, (mat * w->grid_rows + rr / w->block_rows) * w->grid_cols);
}

/* Scale cb of a grid row, times `raw` (the decoding's power of two). */
INLINE float scale_get(const cpu_weight *w, const uint8_t *srow, int64_t cb, float raw)
{
    if (!srow) return raw;
    switch (w->scale_dtype) {
    case NNT_F32: {
        float f;
        memcpy(&f, srow + 4 * cb, 4);
        return f * raw;
    }
    case NNT_BF16: {
        uint16_t h;
        memcpy(&h, srow + 2 * cb, 2);
        return bits_f((uint32_t)h << 16) * raw;
    }
    case NNT_F16: return d1_f16(srow, cb) * raw;
    default: { /* F8_E8M0: 2^(b - 127), 255 NaN */
        uint32_t b = srow[cb];
        return b == 255 ? NAN : b == 0 ? 0x1p-127f * raw : bits_f(b << 23) * raw;
    }
    }
}

INLINE const uint8_t *row_at(const cpu_weight *w, int64_t r)
{
    return w->data + nnt_dtype_span(w->dtype, r * w->cols);
}

/* to the nearest bfloat16 (ties to even); finite values (weights) */
INLINE vf round_vec(vf v)
{
    vu u = (vu)v;
    return (vf)((u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u);
}

/* to bfloat16 by adding half a step and truncating: the nearest, except that an exact tie goes
 * away from zero instead of to even */
INLINE vf round_half(vf v)
{
    return (vf)(((vu)v + 0x8000u) & 0xffff0000u);
}

/* 1 when a block scaled by s (times the decoding's factor) may hold a weight whose scaled value
 * lies exactly halfway between two bfloat16 numbers, so that round_half would differ from
 * round_vec. An FP8 e4m3 code's significand is one of 1 + k/8 (k = 0..7, subnormal codes too),
 * an FP4 e2m1 one's 1 or 1.5, and the scaled weight is the float32 product of that significand,
 * a power of two and s: its low 16 bits are those of significand x s unless the product leaves
 * the normal range (scales outside [2^-100, 2^100] are taken as tied). Other encodings: always. */
INLINE int tie_scan(float s, const float *sig, int n)
{
    if (!(fabsf(s) >= 0x1p-100f && fabsf(s) <= 0x1p100f)) return 1;
    for (int k = 0; k < n; k++) {
        float p = sig[k] * s;
        uint32_t u;
        memcpy(&u, &p, 4);
        if ((u & 0xffffu) == 0x8000u) return 1;
    }
    return 0;
}
INLINE int tie_fp8(float s)
{
    static const float sig[8] = {1.0f, 1.125f, 1.25f, 1.375f, 1.5f, 1.625f, 1.75f, 1.875f};
    return tie_scan(s, sig, 8);
}
INLINE int tie_fp4(float s)
{
    static const float sig[2] = {1.0f, 1.5f};
    return tie_scan(s, sig, 2);
}
INLINE int tie_f32(float s) { return (void)s, 1; }
INLINE int tie_bf16(float s) { return (void)s, 1; }
INLINE int tie_f16(float s) { return (void)s, 1; }

INLINE float round1(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    u = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
    memcpy(&f, &u, 4);
    return f;
}

/* ---- few-row products: rows n .. n + R of w against rows 0 .. M of x, y[m * ldy + n + r] ----
 * Each column block accumulates x . codes in registers, then adds the block's sum times its
 * scale; R weight rows (with M = 1) or M rows of x keep several accumulation chains going. With
 * 32 vector registers (VL 16, AVX-512), 3 to 8 rows of x take two weight rows per tile, so that
 * each load of x (packed by pack_rows) feeds two fused multiply-adds; the block sums'
 * accumulators then outnumber the registers, but they are touched once per scale block. Where x
 * could not be packed, and for a last odd weight row, the rows of x go two at a time (tiles of the
 * one- and two-row shapes only, which keeps the number of tile shapes, and the compile time of
 * this file with sanitizers, near what it was before). */
/* tile_T with the arguments rows_T passes (for FEW_ROWS_SWITCH) */
/* x [M, K] with its whole vectors interleaved by column step, xi[(c / VL) M VL + m VL + j] =
 * x[m K + c + j], for the generic tiles when M >= 3: a tile then reads the M rows' vectors of one
 * step from one stretch of memory. At 8 rows of 3072 columns x is twice an L1 cache and its rows
 * lie a multiple of 4 KiB apart, so that read row by row they compete for the same cache sets
 * (bench_gemv --m 8, Intel Xeon family 6 model 207: see bench/results/2026-12-07-43c9f67-gemv-icx.md).
 * NULL (the tiles read x itself) for one or two rows (they fit the L1 cache), without memory,
 * when a scale block's columns are not whole vectors (the steps would not fall on the packing's),
 * and with 16 vector registers (VL 8: AVX2), where the tiles keep one weight row and packing
 * measured slower at 4 rows (0.66-0.90x, interleaved rounds, same report). Owned by the caller. */
static float *pack_rows(const float *x, int64_t M, const cpu_weight *w)
{
    const int64_t K = w->cols, bc = w->block_cols, steps = K / VL;
    if (VL < 16 || M < 3 || steps == 0 || (w->scale && bc % VL && bc < K)) return NULL;
    float *xi = aligned_alloc(64, (size_t)(steps * M * VL) * sizeof(float));
    if (!xi) return NULL;
    for (int64_t st = 0; st < steps; st++)
        for (int64_t m = 0; m < M; m++) memcpy(xi + (st * M + m) * VL, x + m * K + st * VL, VL * sizeof(float));
    return xi;
}

#define TILE_f32(MM, RR) tile_f32(x, w, n, y, ldy, MM, RR, RND)
#define TILE_bf16(MM, RR) tile_bf16(x, w, n, y, ldy, MM, RR, RND)
#define TILE_f16(MM, RR) tile_f16(x, w, n, y, ldy, MM, RR, RND)
#define TILE_fp8(MM, RR) tile_fp8(x, w, n, y, ldy, MM, RR, RND)
#define TILE_fp4(MM, RR) tile_fp4(x, w, n, y, ldy, MM, RR, RND)
/* the same with x also packed (xi, pack_rows below) */
#define TILEP_f32(MM, RR) tilex_f32(x, xi, w, n, y, ldy, MM, RR, RND)
#define TILEP_bf16(MM, RR) tilex_bf16(x, xi, w, n, y, ldy, MM, RR, RND)
#define TILEP_f16(MM, RR) tilex_f16(x, xi, w, n, y, ldy, MM, RR, RND)
#define TILEP_fp8(MM, RR) tilex_fp8(x, xi, w, n, y, ldy, MM, RR, RND)
#define TILEP_fp4(MM, RR) tilex_fp4(x, xi, w, n, y, ldy, MM, RR, RND)
#define DEFINE_TILE(T)                                                                                              \
    INLINE void tilex_##T(const float *x, const float *xi, const cpu_weight *w, int64_t n, float *y, int64_t ldy,   \
                          const int M, const int R, const int RND)                                                  \
    {                                                                                                               \
        const int64_t K = w->cols, bc = w->block_cols, nb = (K + bc - 1) / bc;                                      \
        const uint8_t *row[4], *srow[4];                                                                            \
        vf acc[CPU_FEW_ROWS][4];                                                                                    \
        float tacc[CPU_FEW_ROWS][4];                                                                                \
        for (int r = 0; r < R; r++) {                                                                               \
            row[r] = row_at(w, n + r);                                                                              \
            srow[r] = scale_row(w, n + r);                                                                          \
        }                                                                                                           \
        for (int m = 0; m < M; m++)                                                                                 \
            for (int r = 0; r < R; r++) {                                                                           \
                acc[m][r] = (vf){0};                                                                                \
                tacc[m][r] = 0.0f;                                                                                  \
            }                                                                                                       \
        for (int64_t cb = 0; cb < nb; cb++) {                                                                       \
            int64_t c = cb * bc, c1 = c + bc < K ? c + bc : K;                                                      \
            vf b[CPU_FEW_ROWS][4];                                                                                  \
            float t[CPU_FEW_ROWS][4], s[4];                                                                         \
            int tie = 0;                                                                                            \
            for (int r = 0; r < R; r++) {                                                                           \
                s[r] = scale_get(w, srow[r], cb, RAW_##T);                                                          \
                if (RND) tie |= tie_##T(s[r]);                                                                      \
            }                                                                                                       \
            for (int m = 0; m < M; m++)                                                                             \
                for (int r = 0; r < R; r++) {                                                                       \
                    b[m][r] = (vf){0};                                                                              \
                    t[m][r] = 0.0f;                                                                                 \
                }                                                                                                   \
            for (; c + VL <= c1; c += VL) {                                                                         \
                vf wv[4];                                                                                           \
                for (int r = 0; r < R; r++) {                                                                       \
                    PREFETCH(row[r] + nnt_dtype_span(w->dtype, PF_ROWS * K + c));                   \
                    wv[r] = ld_##T(row[r], c);                                                                      \
                    if (RND) wv[r] = tie ? round_vec(wv[r] * s[r]) : round_half(wv[r] * s[r]);                      \
                }                                                                                                   \
                for (int m = 0; m < M; m++) {                                                                       \
                    vf xv = loadf(xi ? xi + (c / VL) * (M * VL) + m * VL : x + m * K + c);                          \
                    for (int r = 0; r < R; r++) b[m][r] += xv * wv[r];                                              \
                }                                                                                                   \
            }                                                                                                       \
            for (; c < c1; c++)                                                                                     \
                for (int r = 0; r < R; r++) {                                                                       \
                    float wr = d1_##T(row[r], c);                                                                   \
                    if (RND) wr = round1(wr * s[r]);                                                                \
                    for (int m = 0; m < M; m++) t[m][r] += x[m * K + c] * wr;                                       \
                }                                                                                                   \
            for (int r = 0; r < R; r++)                                                                             \
                for (int m = 0; m < M; m++) {                                                                       \
                    acc[m][r] += RND ? b[m][r] : b[m][r] * s[r];                                                    \
                    tacc[m][r] += RND ? t[m][r] : t[m][r] * s[r];                                                   \
                }                                                                                                   \
        }                                                                                                           \
        for (int m = 0; m < M; m++)                                                                                 \
            for (int r = 0; r < R; r++) y[m * ldy + n + r] = hsum(acc[m][r]) + tacc[m][r];                          \
    }                                                                                                               \
                                                                                                                    \
    INLINE void tile_##T(const float *x, const cpu_weight *w, int64_t n, float *y, int64_t ldy, const int M,         \
                         const int R, const int RND)                                                                \
    {                                                                                                               \
        tilex_##T(x, NULL, w, n, y, ldy, M, R, RND);                                                                \
    }                                                                                                               \
                                                                                                                    \
    INLINE void rows_##T(const float *x, const float *xi, int64_t M, const cpu_weight *w, int64_t n0, int64_t n1,   \
                         float *y, int64_t ldy, const int RND)                                                      \
    {                                                                                                               \
        int64_t n = n0;                                                                                             \
        if (VL >= 16 && M >= 3) {                                                                                   \
            const int64_t K = w->cols;                                                                              \
            if (xi) {                                                                                               \
                switch (M) {                                                                                        \
                case 3: for (; n + 2 <= n1; n += 2) TILEP_##T(3, 2); break;                                         \
                case 4: for (; n + 2 <= n1; n += 2) TILEP_##T(4, 2); break;                                         \
                case 5: for (; n + 2 <= n1; n += 2) TILEP_##T(5, 2); break;                                         \
                case 6: for (; n + 2 <= n1; n += 2) TILEP_##T(6, 2); break;                                         \
                case 7: for (; n + 2 <= n1; n += 2) TILEP_##T(7, 2); break;                                         \
                default: for (; n + 2 <= n1; n += 2) TILEP_##T(8, 2); break;                                        \
                }                                                                                                   \
            }                                                                                                       \
            /* x not packed, or a last odd weight row: the rows of x two at a time */                                \
            for (int64_t m0 = 0; m0 < M && n < n1; m0 += 2) {                                                      \
                const float *xm = x + m0 * K;                                                                       \
                float *ym = y + m0 * ldy;                                                                           \
                int64_t r = n;                                                                                      \
                if (M - m0 >= 2) {                                                                                  \
                    for (; r + 2 <= n1; r += 2) tile_##T(xm, w, r, ym, ldy, 2, 2, RND);                             \
                    for (; r < n1; r++) tile_##T(xm, w, r, ym, ldy, 2, 1, RND);                                     \
                } else {                                                                                            \
                    for (; r + 4 <= n1; r += 4) tile_##T(xm, w, r, ym, ldy, 1, 4, RND);                             \
                    for (; r < n1; r++) tile_##T(xm, w, r, ym, ldy, 1, 1, RND);                                     \
                }                                                                                                   \
            }                                                                                                       \
            return;                                                                                                 \
        }                                                                                                           \
        FEW_ROWS_SWITCH_WIDE(TILE_##T);                                                                             \
    }                                                                                                               \
                                                                                                                    \
    /* rnd: each decoded, scaled weight rounded to bfloat16 first (bfloat16 products) */                            \
    static void gemv_##T(const float *x, int64_t M, const cpu_weight *w, int64_t n0, int64_t n1, float *y,           \
                         int64_t ldy, int rnd)                                                                      \
    {                                                                                                               \
        float *xi = pack_rows(x, M, w);                                                                             \
        if (rnd)                                                                                                    \
            rows_##T(x, xi, M, w, n0, n1, y, ldy, 1);                                                               \
        else                                                                                                        \
            rows_##T(x, xi, M, w, n0, n1, y, ldy, 0);                                                               \
        free(xi);                                                                                                   \
    }                                                                                                               \
                                                                                                                    \
    /* rows r0 .. r1 decoded and scaled into dst [r1 - r0, ld] */                                                   \
    static void decode_##T(const cpu_weight *w, int64_t r0, int64_t r1, float *dst, int64_t ld)                     \
    {                                                                                                               \
        const int64_t K = w->cols, bc = w->block_cols, nb = (K + bc - 1) / bc;                                      \
        for (int64_t r = r0; r < r1; r++) {                                                                         \
            const uint8_t *row = row_at(w, r), *srow = scale_row(w, r);                                             \
            float *d = dst + (r - r0) * ld;                                                                         \
            for (int64_t cb = 0; cb < nb; cb++) {                                                                   \
                int64_t c = cb * bc, c1 = c + bc < K ? c + bc : K;                                                  \
                float s = scale_get(w, srow, cb, RAW_##T);                                                          \
                for (; c + VL <= c1; c += VL) {                                                                     \
                    vf v = ld_##T(row, c) * s;                                                                      \
                    memcpy(d + c, &v, sizeof v);                                                                    \
                }                                                                                                   \
                for (; c < c1; c++) d[c] = d1_##T(row, c) * s;                                                      \
            }                                                                                                       \
        }                                                                                                           \
    }                                                                                                               \
                                                                                                                    \
    /* rows r0 .. r1 decoded, scaled and rounded to bfloat16 bits into dst [r1 - r0, ld] */                         \
    static void decode16_##T(const cpu_weight *w, int64_t r0, int64_t r1, uint16_t *dst, int64_t ld)                \
    {                                                                                                               \
        const int64_t K = w->cols, bc = w->block_cols, nb = (K + bc - 1) / bc;                                      \
        for (int64_t r = r0; r < r1; r++) {                                                                         \
            const uint8_t *row = row_at(w, r), *srow = scale_row(w, r);                                             \
            uint16_t *d = dst + (r - r0) * ld;                                                                      \
            for (int64_t cb = 0; cb < nb; cb++) {                                                                   \
                int64_t c = cb * bc, c1 = c + bc < K ? c + bc : K;                                                  \
                float s = scale_get(w, srow, cb, RAW_##T);                                                          \
                for (; c + VL <= c1; c += VL) {                                                                     \
                    vh h = __builtin_convertvector((vu)round_vec(ld_##T(row, c) * s) >> 16, vh);                    \
                    memcpy(d + c, &h, sizeof h);                                                                    \
                }                                                                                                   \
                for (; c < c1; c++) {                                                                               \
                    float v = round1(d1_##T(row, c) * s);                                                           \
                    uint32_t u;                                                                                     \
                    memcpy(&u, &v, 4);                                                                              \
                    d[c] = (uint16_t)(u >> 16);                                                                     \
                }                                                                                                   \
            }                                                                                                       \
        }                                                                                                           \
    }

DEFINE_TILE(f32)
DEFINE_TILE(bf16)
DEFINE_TILE(f16)
DEFINE_TILE(fp8)
DEFINE_TILE(fp4)

/* ---- FP4 e2m1 with E8M0 scales, few rows, on x86: a table lookup per code ----
 * The 2 VL codes of VL bytes are widened to one 32-bit lane per byte; a permute whose index is
 * the lane (only its low bits count) reads the low nibbles' values from a table of the 16 e2m1
 * values (AVX-512) or of the 8 magnitudes, the sign put in by a shift and xor (AVX2), and the
 * lane shifted right by 4 the high nibbles'. Lane j then holds the weights of columns 2j and
 * 2j + 1, so x is first split per 2 VL columns into its even and odd columns (xs). The table is
 * multiplied by the block's scale, a power of two: the scaled weights are exact, as the generic
 * kernel's are, and only the order of the additions differs. */
#if defined(X86_512) || defined(X86_256)
#define FP4_LUT 1
#if defined(X86_512)
typedef __m512 lut_v;
typedef __m512i lut_i;
#define LUT_FMA _mm512_fmadd_ps
#define LUT_SET1 _mm512_set1_ps
#define LUT_MUL _mm512_mul_ps
#define LUT_ADD _mm512_add_ps
#define LUT_ZERO _mm512_setzero_ps
#define LUT_LOADX _mm512_loadu_ps
INLINE lut_v lut_table(void)
{
    return _mm512_setr_ps(0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f, -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f,
                          -4.0f, -6.0f);
}
INLINE lut_i lut_codes(const uint8_t *p)
{
    return _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)p));
}
INLINE lut_v lut_lo(lut_i q, lut_v t)
{
    return _mm512_permutexvar_ps(q, t);
}
INLINE lut_v lut_hi(lut_i q, lut_v t)
{
    return _mm512_permutexvar_ps(_mm512_srli_epi32(q, 4), t);
}
INLINE float lut_hsum(lut_v v)
{
    return _mm512_reduce_add_ps(v);
}
#else
typedef __m256 lut_v;
typedef __m256i lut_i;
#define LUT_FMA _mm256_fmadd_ps
#define LUT_SET1 _mm256_set1_ps
#define LUT_MUL _mm256_mul_ps
#define LUT_ADD _mm256_add_ps
#define LUT_ZERO _mm256_setzero_ps
#define LUT_LOADX _mm256_loadu_ps
INLINE lut_v lut_table(void)
{
    return _mm256_setr_ps(0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f);
}
INLINE lut_i lut_codes(const uint8_t *p)
{
    return _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)p));
}
INLINE lut_v lut_lo(lut_i q, lut_v t)
{
    __m256i sign = _mm256_and_si256(_mm256_slli_epi32(q, 28), _mm256_set1_epi32((int)0x80000000u));
    return _mm256_xor_ps(_mm256_permutevar8x32_ps(t, q), _mm256_castsi256_ps(sign));
}
INLINE lut_v lut_hi(lut_i q, lut_v t)
{
    __m256i sign = _mm256_and_si256(_mm256_slli_epi32(q, 24), _mm256_set1_epi32((int)0x80000000u));
    return _mm256_xor_ps(_mm256_permutevar8x32_ps(t, _mm256_srli_epi32(q, 4)), _mm256_castsi256_ps(sign));
}
INLINE float lut_hsum(lut_v v)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}
#endif

/* the most 32-column groups in a row of tile_fp4dp (below) */
#define FP4_MAX_BLOCKS 1024

/* E8M0_BITS[b]: the float32 bits of E8M0 scale byte b, 2^(b - 127) (0 is 2^-127, 255 a NaN),
 * looked up as a tile reads each scale once (converting a row's scales first cost the FP4 tiles
 * about a tenth of their time in perf) */
#define E8M0_1(b) (b) == 0 ? 0x00400000u : (b) == 255 ? 0x7fc00000u : (uint32_t)(b) << 23
#define E8M0_4(b) E8M0_1(b), E8M0_1((b) + 1), E8M0_1((b) + 2), E8M0_1((b) + 3)
#define E8M0_16(b) E8M0_4(b), E8M0_4((b) + 4), E8M0_4((b) + 8), E8M0_4((b) + 12)
#define E8M0_64(b) E8M0_16(b), E8M0_16((b) + 16), E8M0_16((b) + 32), E8M0_16((b) + 48)
static const uint32_t E8M0_BITS[256] = {E8M0_64(0), E8M0_64(64), E8M0_64(128), E8M0_64(192)};

/* The E8M0 scales of weight row r, ahead of their use: a tile's scale loads otherwise stall it
 * (about a tenth of the FP4 kernels' time in perf). */
INLINE void prefetch_scales(const cpu_weight *w, int64_t r, int64_t nb)
{
    if (r < w->rows)
        for (int64_t b = 0; b < nb; b += 64) PREFETCH(scale_row(w, r) + b);
}

/* A tile's R weight rows from n: their codes and scale rows, and the scales PF_ROWS rows on
 * fetched ahead */
INLINE void fp4_tile_rows(const cpu_weight *w, int64_t n, int R, int64_t nb, const uint8_t **row, const uint8_t **sb)
{
    for (int r = 0; r < R; r++) {
        row[r] = row_at(w, n + r);
        sb[r] = scale_row(w, n + r);
        prefetch_scales(w, n + r + PF_ROWS, nb);
    }
}

/* rows n .. n + R against the M rows of xs (split as above) */
INLINE void tile_fp4lut(const float *xs, const cpu_weight *w, int64_t n, float *y, int64_t ldy, const int M,
                        const int R)
{
    const int64_t K = w->cols, bc = w->block_cols, nb = (K + bc - 1) / bc;
    const uint8_t *row[4], *sb[4];
    lut_v acc[CPU_FEW_ROWS][4][2];
    const lut_v table = lut_table();
    fp4_tile_rows(w, n, R, nb, row, sb);
    for (int m = 0; m < M; m++)
        for (int r = 0; r < R; r++) acc[m][r][0] = acc[m][r][1] = LUT_ZERO();
    for (int64_t c0 = 0, cb = 0; c0 < K; c0 += bc, cb++) {
        int64_t c1 = c0 + bc < K ? c0 + bc : K;
        lut_v t[4];
        for (int r = 0; r < R; r++) t[r] = LUT_MUL(table, LUT_SET1(bits_f(E8M0_BITS[sb[r][cb]])));
        for (int64_t c = c0; c < c1; c += 2 * VL) {
            lut_v lo[4], hi[4];
            for (int r = 0; r < R; r++) {
                if (!(c & 127)) PREFETCH(row[r] + (PF_ROWS * K + c) / 2);
                lut_i q = lut_codes(row[r] + c / 2);
                lo[r] = lut_lo(q, t[r]);
                hi[r] = lut_hi(q, t[r]);
            }
            for (int m = 0; m < M; m++) {
                lut_v xe = LUT_LOADX(xs + m * K + c), xo = LUT_LOADX(xs + m * K + c + VL);
                for (int r = 0; r < R; r++) {
                    acc[m][r][0] = LUT_FMA(lo[r], xe, acc[m][r][0]);
                    acc[m][r][1] = LUT_FMA(hi[r], xo, acc[m][r][1]);
                }
            }
        }
    }
    for (int m = 0; m < M; m++)
        for (int r = 0; r < R; r++) y[m * ldy + n + r] = lut_hsum(acc[m][r][0]) + lut_hsum(acc[m][r][1]);
}

/* 1 when the table kernel serves w: E8M0 scales, whole steps of 2 VL columns in every block */
INLINE int fp4lut_serves(const cpu_weight *w)
{
    return w->dtype == NNT_F4_E2M1 && w->scale && w->scale_dtype == NNT_F8_E8M0 && w->cols % (2 * VL) == 0 &&
           w->block_cols % (2 * VL) == 0;
}

static void gemv_fp4lut(const float *x, int64_t M, const cpu_weight *w, int64_t n0, int64_t n1, float *y, int64_t ldy,
                        float *xs)
{
    const int64_t K = w->cols;
    for (int64_t m = 0; m < M; m++)
        for (int64_t c = 0; c < K; c += 2 * VL)
            for (int j = 0; j < VL; j++) {
                xs[m * K + c + j] = x[m * K + c + 2 * j];
                xs[m * K + c + VL + j] = x[m * K + c + 2 * j + 1];
            }
    int64_t n = n0;
#define FP4LUT_TILE(MM, RR) tile_fp4lut(xs, w, n, y, ldy, MM, RR)
    FEW_ROWS_SWITCH_WIDE(FP4LUT_TILE);
#undef FP4LUT_TILE
}

#if defined(X86_512)
/* ---- FP4 e2m1 with E8M0 scales, few rows, AVX-512: the codes as eight nibble planes ----
 * A 64-byte load holds 128 columns' codes as 16 dwords, dword j the 8 columns 8j .. 8j + 7 with
 * column 8j + k in bits 4k .. 4k + 3 (low nibble first). A permute reads only the low 4 bits of
 * each index lane, so shifting the load right by 4k and permuting the table of the 16 e2m1 values
 * gives plane k: lane j holds the weight of column 8j + k. That is one shift and one permute per
 * 16 weights, with no widening of bytes to lanes (tile_fp4lut's). x is rearranged once per call
 * into the same order (xs: group g, plane k, lane j is column 128 g + 8 j + k).
 * Lane j's 8 columns lie in one 32-column scale group, so each lane has its own scale: a vector
 * of 2^(b - 127) built per 128 columns from the scale bytes (bits b << 23; bytes 0 and 255, 2^-127
 * and NaN, are put in only for tiles whose rows hold one). One or two rows of x: each plane's
 * products are summed unscaled over the 8 planes, then times the scale (a power of two, so exact
 * but at the edge of the range); from three rows on, the permuted weights are scaled first and
 * shared by the rows of x, with one sum per row of x and weight row (few enough to stay in
 * registers). Either way only the order of the additions differs from the generic kernel. */
#define FP4_PLANES 1

/* 1 when the planes kernel serves w: E8M0 scales whose groups are 32 or 64 columns or whole
 * 128-column steps, and whole 128-column steps in a row (so fp4lut_serves(w) holds too) */
INLINE int fp4planes_serves(const cpu_weight *w)
{
    int64_t bc = w->block_cols;
    return w->dtype == NNT_F4_E2M1 && w->scale && w->scale_dtype == NNT_F8_E8M0 && w->cols % 128 == 0 &&
           (bc == 32 || bc == 64 || bc % 128 == 0);
}

/* x's rows in plane order (above) */
INLINE void fp4planes_perm(const float *x, int64_t M, int64_t K, float *xs)
{
    for (int64_t m = 0; m < M; m++)
        for (int64_t g = 0; g < K; g += 128)
            for (int k = 0; k < 8; k++)
                for (int j = 0; j < 16; j++) xs[m * K + g + 16 * k + j] = x[m * K + g + 8 * j + k];
}

/* 1 when scale row sb (nb bytes) holds a 0 or a 255 */
INLINE int e8m0_special(const uint8_t *sb, int64_t nb)
{
    for (int64_t b = 0; b < nb; b += 64) {
        __mmask64 in = nb - b >= 64 ? ~(__mmask64)0 : (((__mmask64)1 << (nb - b)) - 1);
        __m512i v = _mm512_maskz_loadu_epi8(in, sb + b);
        __mmask64 s = _mm512_mask_cmpeq_epi8_mask(in, v, _mm512_setzero_si512()) |
                      _mm512_mask_cmpeq_epi8_mask(in, v, _mm512_set1_epi8((char)0xff));
        if (s) return 1;
    }
    return 0;
}

/* The 16 lanes' scales of the 128 columns from c: each lane's byte picked by `pick` (a byte
 * shuffle within 128-bit lanes) from the 1, 2 or 4 bytes of the groups there, then put in the
 * float32 exponent. SPEC: a tile with bytes 0 or 255, put in as 2^-127 and NaN. */
INLINE __m512 fp4planes_scale(const uint8_t *sb, int64_t c, int64_t bc, __m512i pick, const int SPEC)
{
    uint32_t u = 0;
    if (bc == 32)
        memcpy(&u, sb + c / 32, 4);
    else if (bc == 64)
        memcpy(&u, sb + c / 64, 2);
    else
        u = sb[c / bc];
    __m512i b = _mm512_shuffle_epi8(_mm512_set1_epi32((int)u), pick);
    __m512i bits = _mm512_slli_epi32(b, 23);
    if (SPEC) {
        bits = _mm512_mask_mov_epi32(bits, _mm512_cmpeq_epi32_mask(b, _mm512_setzero_si512()),
                                     _mm512_set1_epi32(0x00400000));
        bits = _mm512_mask_mov_epi32(bits, _mm512_cmpeq_epi32_mask(b, _mm512_set1_epi32(255)),
                                     _mm512_set1_epi32(0x7fc00000));
    }
    return _mm512_castsi512_ps(bits);
}

/* rows n .. n + R against the M rows of xs (in plane order) */
INLINE void tile_fp4planes(const float *xs, const cpu_weight *w, int64_t n, float *y, int64_t ldy, __m512i pick,
                           const int M, const int R, const int SPEC)
{
    const int64_t K = w->cols, bc = w->block_cols, nb = (K + bc - 1) / bc;
    const int PRE = M >= 3; /* scale the weights first, shared by the rows of x */
    const __m512 table = _mm512_setr_ps(0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f, -0.0f, -0.5f, -1.0f,
                                        -1.5f, -2.0f, -3.0f, -4.0f, -6.0f);
    const uint8_t *row[4], *sb[4];
    __m512 acc[CPU_FEW_ROWS][4][2];
    fp4_tile_rows(w, n, R, nb, row, sb);
    for (int m = 0; m < M; m++)
        for (int r = 0; r < R; r++) acc[m][r][0] = acc[m][r][1] = _mm512_setzero_ps();
    for (int64_t c = 0; c < K; c += 128) {
        __m512i q[4];
        __m512 s[4];
        for (int r = 0; r < R; r++) {
            PREFETCH(row[r] + (PF_ROWS * K + c) / 2);
            q[r] = _mm512_loadu_si512(row[r] + c / 2);
            s[r] = fp4planes_scale(sb[r], c, bc, pick, SPEC);
        }
        if (PRE) {
            for (int k = 0; k < 8; k++)
                for (int r = 0; r < R; r++) {
                    __m512 wk = _mm512_mul_ps(_mm512_permutexvar_ps(_mm512_srli_epi32(q[r], 4 * k), table), s[r]);
                    for (int m = 0; m < M; m++)
                        acc[m][r][0] = _mm512_fmadd_ps(wk, _mm512_loadu_ps(xs + m * K + c + 16 * k), acc[m][r][0]);
                }
        } else {
            __m512 t[CPU_FEW_ROWS][4][2];
            for (int k = 0; k < 8; k++)
                for (int r = 0; r < R; r++) {
                    __m512 wk = _mm512_permutexvar_ps(_mm512_srli_epi32(q[r], 4 * k), table);
                    for (int m = 0; m < M; m++) {
                        __m512 xk = _mm512_loadu_ps(xs + m * K + c + 16 * k);
                        t[m][r][k & 1] = k < 2 ? _mm512_mul_ps(wk, xk) : _mm512_fmadd_ps(wk, xk, t[m][r][k & 1]);
                    }
                }
            for (int m = 0; m < M; m++)
                for (int r = 0; r < R; r++) {
                    acc[m][r][0] = _mm512_fmadd_ps(t[m][r][0], s[r], acc[m][r][0]);
                    acc[m][r][1] = _mm512_fmadd_ps(t[m][r][1], s[r], acc[m][r][1]);
                }
        }
    }
    for (int m = 0; m < M; m++)
        for (int r = 0; r < R; r++) y[m * ldy + n + r] = _mm512_reduce_add_ps(_mm512_add_ps(acc[m][r][0], acc[m][r][1]));
}

/* 1 when a 0 or 255 scale byte is in rows n .. n + R */
INLINE int fp4planes_tile_special(const cpu_weight *w, int64_t n, int R)
{
    int64_t nb = (w->cols + w->block_cols - 1) / w->block_cols;
    for (int r = 0; r < R; r++)
        if (e8m0_special(scale_row(w, n + r), nb)) return 1;
    return 0;
}

static void gemv_fp4planes(const float *x, int64_t M, const cpu_weight *w, int64_t n0, int64_t n1, float *y,
                           int64_t ldy, float *xs)
{
    /* the byte of lane j (dword j, 4 per 128-bit lane L): 32-column groups j / 4 = L, 64-column
     * ones j / 8 = L / 2, wider ones the one byte; 0x80 zeroes the dword's other bytes */
    const int64_t bc = w->block_cols;
    const char z = (char)0x80;
#define PICK4(b) z, z, z, (char)(b), z, z, z, (char)(b), z, z, z, (char)(b), z, z, z, (char)(b)
    const __m512i pick = bc == 32 ? _mm512_set_epi8(PICK4(3), PICK4(2), PICK4(1), PICK4(0))
                         : bc == 64 ? _mm512_set_epi8(PICK4(1), PICK4(1), PICK4(0), PICK4(0))
                                    : _mm512_set_epi8(PICK4(0), PICK4(0), PICK4(0), PICK4(0));
#undef PICK4
    fp4planes_perm(x, M, w->cols, xs);
    int64_t n = n0;
#define FP4PLANES_TILE(MM, RR)                                                                                         \
    (fp4planes_tile_special(w, n, RR) ? tile_fp4planes(xs, w, n, y, ldy, pick, MM, RR, 1)                              \
                                      : tile_fp4planes(xs, w, n, y, ldy, pick, MM, RR, 0))
    FEW_ROWS_SWITCH_STREAM(FP4PLANES_TILE);
#undef FP4PLANES_TILE
}
#endif

/* ---- FP8 e4m3, few rows, on x86: codes widened to 16-bit lanes that read as bfloat16 ----
 * Sign-extending a code to 16 bits and shifting it left by 4 puts its sign at bit 15 and its
 * exponent and mantissa at bits 10..4 (the sign copies above bit 10 are masked off): the bits of
 * a bfloat16 whose value is the code's times 2^-120 (exponent bias 7 against 127). Interleaving
 * those lanes with zero lanes (unpack low and high, within each 128-bit lane) makes two float
 * vectors of 2 VL codes, whose lane 4l + j holds column c + 8l + j (first vector) and
 * c + 8l + 4 + j (second); x is permuted once per product into that order (xp). Per 2 VL codes
 * that is four integer steps and no conversion instruction: about 1.3x the half-precision path
 * above on AMD Zen 5 (bench/gemv), which then runs at the read rate with AVX-512.
 * Subnormal codes become subnormal floats. AMD's cores (Zen 5 measured) take them at full speed
 * in fused multiply-adds, though not in plain multiplies (fp8_scale); Intel's cores may take a
 * slow assist on subnormal operands, so there the half-precision path (which never makes one)
 * is kept: fp8_lanes_cpu says which.
 * - float32 products: x is also multiplied by 2^64 (exact), so each product x w 2^-56 stays a
 *   normal float, and each block's sum is multiplied by its scale times 2^56: the products and
 *   their roundings are those of x . w in float32; only the order of the additions differs.
 * - bfloat16 products (rnd): each code times its scale times 2^120 is the float32 product
 *   code x scale (what transformers' dequantisation computes), rounded to bfloat16: by the
 *   AVX512-BF16 conversion, feeding its bfloat16 dot product, where the CPU has them; otherwise
 *   by adding half a bfloat16 step and truncating, which is ties-to-even except on exact ties.
 *   Every code's significand is one of 1 + k/8 (k = 0..7, subnormals included), so a block has
 *   an exact tie only if one of those eight times its scale has one: such a block (rare: about
 *   one scale in 8000) is rounded the full way.
 * Scales outside the range where these scalings stay exact (a block scale of 2^7 or more, or
 * under 2^-117, for rnd; |x| of 2^60 or more) send the tile or the call to the kernels above. */
#define FP8_LANES 1
#define FP8_MAX_BLOCKS 1024
#if defined(X86_512)
INLINE void fp8_lanes(const uint8_t *p, lut_v *lo, lut_v *hi)
{
    __m512i h = _mm512_cvtepi8_epi16(_mm256_loadu_si256((const __m256i *)p));
    h = _mm512_and_si512(_mm512_slli_epi16(h, 4), _mm512_set1_epi16((short)0x87f0));
    *lo = _mm512_castsi512_ps(_mm512_unpacklo_epi16(_mm512_setzero_si512(), h));
    *hi = _mm512_castsi512_ps(_mm512_unpackhi_epi16(_mm512_setzero_si512(), h));
}
/* to bfloat16 by adding half a step and truncating; exact=1: ties to even */
INLINE lut_v fp8_round(lut_v v, const int exact)
{
    __m512i u = _mm512_castps_si512(v), add = _mm512_set1_epi32(0x8000);
    if (exact) add = _mm512_add_epi32(_mm512_set1_epi32(0x7fff), _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1)));
    return _mm512_castsi512_ps(_mm512_and_si512(_mm512_add_epi32(u, add), _mm512_set1_epi32((int)0xffff0000u)));
}
#else
INLINE void fp8_lanes(const uint8_t *p, lut_v *lo, lut_v *hi)
{
    __m256i h = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)p));
    h = _mm256_and_si256(_mm256_slli_epi16(h, 4), _mm256_set1_epi16((short)0x87f0));
    *lo = _mm256_castsi256_ps(_mm256_unpacklo_epi16(_mm256_setzero_si256(), h));
    *hi = _mm256_castsi256_ps(_mm256_unpackhi_epi16(_mm256_setzero_si256(), h));
}
INLINE lut_v fp8_round(lut_v v, const int exact)
{
    __m256i u = _mm256_castps_si256(v), add = _mm256_set1_epi32(0x8000);
    if (exact) add = _mm256_add_epi32(_mm256_set1_epi32(0x7fff), _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1)));
    return _mm256_castsi256_ps(_mm256_and_si256(_mm256_add_epi32(u, add), _mm256_set1_epi32((int)0xffff0000u)));
}
#endif

/* w s, as a fused multiply-add of -0 (exactly the rounded product): AMD Zen 5 multiplies a
 * subnormal operand (a subnormal code's w) at a fraction of the speed, its fused multiply-add at
 * full speed (measured: 2.2x on the whole product with random codes) */
INLINE lut_v fp8_scale(lut_v w, lut_v s)
{
    return LUT_FMA(w, s, LUT_SET1(-0.0f));
}

/* 1 when one of the significands 1 + k/8 times s (a float32 product) lies exactly halfway
 * between two bfloat16 numbers */
INLINE int fp8_tie(float s)
{
    __m256 p = _mm256_mul_ps(_mm256_setr_ps(1.0f, 1.125f, 1.25f, 1.375f, 1.5f, 1.625f, 1.75f, 1.875f), _mm256_set1_ps(s));
    __m256i low = _mm256_and_si256(_mm256_castps_si256(p), _mm256_set1_epi32(0xffff));
    return _mm256_movemask_epi8(_mm256_cmpeq_epi32(low, _mm256_set1_epi32(0x8000))) != 0;
}

/* This CPU takes subnormal operands at full speed (see above). */
INLINE int fp8_lanes_cpu(void)
{
    return __builtin_cpu_is("amd");
}

INLINE int fp8_lanes_serve(const cpu_weight *w)
{
    return w->dtype == NNT_F8_E4M3 && w->cols % (2 * VL) == 0 && w->block_cols % (2 * VL) == 0 &&
           w->grid_cols <= FP8_MAX_BLOCKS && fp8_lanes_cpu();
}

/* The scales of row r's blocks times `raw`, into s; 0 when one leaves [lo, hi] (a zero scale is
 * taken) or is not a number. */
INLINE int fp8_scales(const cpu_weight *w, int64_t r, float raw, float lo, float hi, float *s)
{
    const uint8_t *srow = scale_row(w, r);
    const int64_t nb = (w->cols + w->block_cols - 1) / w->block_cols;
    for (int64_t cb = 0; cb < nb; cb++) {
        float v = scale_get(w, srow, cb, raw);
        if (!(v == 0.0f || (fabsf(v) >= lo && fabsf(v) <= hi))) return 0;
        s[cb] = v;
    }
    return 1;
}

/* The checked scales of the grid row a tile last read, kept across one call's tiles: a grid
 * row (128 weight rows in the releases) serves 32 tiles of 4 rows, and checking its scales
 * again for each took about a sixth of an FP8 product's time (bench/gemv, AMD EPYC). */
typedef struct fp8_grid {
    const uint8_t *srow; /* the grid row held; valid when ok >= 0 */
    int ok;              /* -1: empty, 0: a scale out of range, 1: s holds them */
    float s[FP8_MAX_BLOCKS];
} fp8_grid;

/* sp[r] = the scales of rows n .. n + R times raw, checked against [lo, hi] (fp8_scales) once per
 * grid row; scl holds rows whose grid row is neither g's nor the row before's; 0 when a scale is
 * out of range */
INLINE int fp8_tile_scales(fp8_grid *g, const cpu_weight *w, int64_t n, const int R, float raw, float lo,
                           float hi, float (*scl)[FP8_MAX_BLOCKS], const float **sp)
{
    const uint8_t *prev = NULL;
    for (int r = 0; r < R; r++) {
        const uint8_t *srow = scale_row(w, n + r);
        if (g->ok >= 0 && srow == g->srow) {
            if (!g->ok) return 0;
            sp[r] = g->s;
        } else if (r && srow == prev) {
            sp[r] = sp[r - 1];
        } else if (!r) {
            g->srow = srow;
            g->ok = fp8_scales(w, n, raw, lo, hi, g->s);
            if (!g->ok) return 0;
            sp[r] = g->s;
        } else {
            if (!fp8_scales(w, n + r, raw, lo, hi, scl[r])) return 0;
            sp[r] = scl[r];
        }
        prev = srow;
    }
    return 1;
}

/* one block's columns c0 .. c1 of rows row[0 .. R] into acc[m][r][0 .. 1] (two chains per row and
 * row of x; one, [0], with ONE or RND); RND: each weight times sv[r] and rounded to bfloat16
 * (EXACT: ties to even) */
INLINE void block_fp8lanes(const float *xp, const uint8_t *const *row, int64_t K, int64_t c0, int64_t c1,
                           const lut_v *sv, lut_v (*acc)[4][2], const int M, const int R, const int RND,
                           const int EXACT, const int ONE)
{
    for (int64_t c = c0; c < c1; c += 2 * VL) {
        if (!(c & 63))
            for (int r = 0; r < R; r++) PREFETCH(row[r] + PF_ROWS * K + c);
        for (int r = 0; r < R; r++) { /* one row's two vectors at a time: few registers live */
            lut_v lo, hi;
            fp8_lanes(row[r] + c, &lo, &hi);
            if (RND) {
                lo = fp8_round(fp8_scale(lo, sv[r]), EXACT);
                hi = fp8_round(fp8_scale(hi, sv[r]), EXACT);
            }
            for (int m = 0; m < M; m++) { /* RND: one chain (the rounding, not the latency, bounds it) */
                acc[m][r][0] = LUT_FMA(lo, LUT_LOADX(xp + m * K + c), acc[m][r][0]);
                acc[m][r][RND || ONE ? 0 : 1] = LUT_FMA(hi, LUT_LOADX(xp + m * K + c + VL), acc[m][r][RND || ONE ? 0 : 1]);
            }
        }
    }
}

/* rows n .. n + R against the M rows of xp (permuted as above; times 2^64 unless RND); 0 when a
 * scale is out of range (nothing written) */
INLINE int tile_fp8lanes(fp8_grid *g, const float *xp, const cpu_weight *w, int64_t n, float *y, int64_t ldy,
                         const int M, const int R, const int RND)
{
    const int64_t K = w->cols, bc = w->block_cols;
    const uint8_t *row[4];
    float scl[4][FP8_MAX_BLOCKS];
    const float *sp[4];
    lut_v acc[CPU_FEW_ROWS][4][2], b[CPU_FEW_ROWS][4][2];
    for (int r = 0; r < R; r++) row[r] = row_at(w, n + r);
    if (RND ? !fp8_tile_scales(g, w, n, R, 0x1p120f, 0x1p3f, 0x1p127f, scl, sp)
            : !fp8_tile_scales(g, w, n, R, 0x1p56f, 0.0f, 3.4e38f, scl, sp))
        return 0;
    for (int m = 0; m < M; m++)
        for (int r = 0; r < R; r++) acc[m][r][0] = acc[m][r][1] = LUT_ZERO();
    for (int64_t c0 = 0, cb = 0; c0 < K; c0 += bc, cb++) {
        const int64_t c1 = c0 + bc < K ? c0 + bc : K;
        lut_v sv[4];
        int tie = 0;
        for (int r = 0; r < R; r++) {
            sv[r] = LUT_SET1(sp[r][cb]);
            if (RND) tie |= fp8_tie(sp[r][cb]);
        }
        if (RND) { /* the weights carry their scales: straight into the row sums */
            if (tie)
                block_fp8lanes(xp, row, K, c0, c1, sv, acc, M, R, 1, 1, 1);
            else
                block_fp8lanes(xp, row, K, c0, c1, sv, acc, M, R, 1, 0, 1);
            continue;
        }
        /* with 3 or more rows of x their sums are independent chains enough: one per row pair
         * keeps the block sums in registers for tiles of several weight rows (see rows_fp8lanes) */
        const int ONE = M >= 3;
        for (int m = 0; m < M; m++)
            for (int r = 0; r < R; r++) b[m][r][0] = b[m][r][1] = LUT_ZERO();
        block_fp8lanes(xp, row, K, c0, c1, sv, b, M, R, 0, 0, ONE);
        for (int m = 0; m < M; m++)
            for (int r = 0; r < R; r++)
                acc[m][r][0] = LUT_FMA(ONE ? b[m][r][0] : LUT_ADD(b[m][r][0], b[m][r][1]), sv[r], acc[m][r][0]);
    }
    for (int m = 0; m < M; m++)
        for (int r = 0; r < R; r++) y[m * ldy + n + r] = lut_hsum(acc[m][r][0]) + lut_hsum(acc[m][r][1]);
    return 1;
}

#if defined(X86_512) && (defined(__GNUC__) || defined(__clang__))
/* bfloat16 products with AVX512-BF16: xb [M, K] bfloat16 bits in the permuted order, each pair
 * of the conversion's lanes multiplied and summed by the dot-product instruction (which reads
 * subnormal inputs as zero: the rounded, scaled weights and x are normal or zero here). */
#define FP8_DPBF16 1
#define TARGET_BF16 __attribute__((target("avx512f,avx512bw,avx512bf16")))
/* 2 VL codes from p, decoded to 16-bit lanes (fp8_lanes), times s, rounded to bfloat16 in the
 * lanes' permuted order */
TARGET_BF16 static inline __m512bh lanes_pair(const uint8_t *p, lut_v s)
{
    const __m512 nz = _mm512_set1_ps(-0.0f); /* see fp8_scale */
    lut_v lo, hi;
    fp8_lanes(p, &lo, &hi);
    return _mm512_cvtne2ps_pbh(_mm512_fmadd_ps(hi, s, nz), _mm512_fmadd_ps(lo, s, nz));
}

/* the 2 VL codes of row from column c, decoded through half precision (ld_fp8), times s (which
 * holds the decoding's 2^8), rounded to bfloat16 in column order */
TARGET_BF16 static inline __m512bh half_pair(const uint8_t *row, int64_t c, lut_v s)
{
    vf a = ld_fp8(row, c), b = ld_fp8(row, c + VL);
    __m512 lo, hi;
    memcpy(&lo, &a, sizeof lo);
    memcpy(&hi, &b, sizeof hi);
    return _mm512_cvtne2ps_pbh(_mm512_mul_ps(hi, s), _mm512_mul_ps(lo, s));
}

/* rows n .. n + R against the M rows of xb; HALF 0: the codes decoded to 16-bit lanes
 * (fp8_lanes, xb in the permuted order), 1: through half precision (ld_fp8, xb in column order;
 * see the kernel notes below pack_pairs). 0 when a scale is out of range (nothing written). */
TARGET_BF16 static inline __attribute__((always_inline)) int tile_fp8dp(fp8_grid *g, const uint16_t *xb,
                                                                       const cpu_weight *w, int64_t n, float *y, int64_t ldy,
                                                                       const int M, const int R, const int HALF)
{
    const int64_t K = w->cols, bc = w->block_cols;
    const uint8_t *row[4];
    float scl[4][FP8_MAX_BLOCKS];
    const float *sp[4];
    __m512 acc[CPU_FEW_ROWS][4];
    for (int r = 0; r < R; r++) row[r] = row_at(w, n + r);
    if (HALF ? !fp8_tile_scales(g, w, n, R, RAW_fp8, 0x1p-109f, 0x1p15f, scl, sp)
             : !fp8_tile_scales(g, w, n, R, 0x1p120f, 0x1p3f, 0x1p127f, scl, sp))
        return 0;
    for (int m = 0; m < M; m++)
        for (int r = 0; r < R; r++) acc[m][r] = _mm512_setzero_ps();
    for (int64_t c0 = 0, cb = 0; c0 < K; c0 += bc, cb++) {
        const int64_t c1 = c0 + bc < K ? c0 + bc : K;
        lut_v sv[4];
        for (int r = 0; r < R; r++) sv[r] = _mm512_set1_ps(sp[r][cb]);
        for (int64_t c = c0; c < c1; c += 2 * VL) {
            __m512bh wb[4];
            for (int r = 0; r < R; r++) {
                if (!(c & 63)) PREFETCH(row[r] + PF_ROWS * K + c);
                wb[r] = HALF ? half_pair(row[r], c, sv[r]) : lanes_pair(row[r] + c, sv[r]);
            }
            for (int m = 0; m < M; m++) {
                __m512bh xv;
                memcpy(&xv, xb + m * K + c, sizeof xv);
                for (int r = 0; r < R; r++) acc[m][r] = _mm512_dpbf16_ps(acc[m][r], wb[r], xv);
            }
        }
    }
    for (int m = 0; m < M; m++)
        for (int r = 0; r < R; r++) y[m * ldy + n + r] = _mm512_reduce_add_ps(acc[m][r]);
    return 1;
}

/* rows n0 .. n1 in tiles of constant shape (as rows_fp8lanes); a tile whose scales are out of
 * range goes to the generic kernel */
#define FP8DP_TILE(MM, RR)                                                                                   \
    do {                                                                                                      \
        if (!tile_fp8dp(&g, xb, w, n, y, ldy, MM, RR, HALF)) tile_fp8(x, w, n, y, ldy, MM, RR, 1);             \
    } while (0)
TARGET_BF16 static void rows_fp8dp(const float *x, const uint16_t *xb, int64_t M, const cpu_weight *w, int64_t n0,
                                   int64_t n1, float *y, int64_t ldy, const int HALF)
{
    fp8_grid g = {.ok = -1};
    int64_t n = n0;
    FEW_ROWS_SWITCH_WIDE(FP8DP_TILE);
}
#undef FP8DP_TILE

TARGET_BF16 static void pack_pairs(const float *xp, uint16_t *xb, int64_t n)
{
    for (int64_t c = 0; c < n; c += 2 * VL) {
        __m512bh v = _mm512_cvtne2ps_pbh(_mm512_loadu_ps(xp + c + VL), _mm512_loadu_ps(xp + c));
        memcpy(xb + c, &v, sizeof v);
    }
}

/* ---- FP8 bfloat16 products with AVX512-BF16 where the 16-bit-lane decoding is not used ----
 * (Intel cores: fp8_lanes_cpu.) The codes are decoded through half precision as ld_fp8 does
 * (never a subnormal single), 2 VL at a time into columns c .. c + VL and c + VL .. c + 2 VL;
 * each times its block's scale (times 2^8, the decoding's factor: the float32 product
 * code x scale, what transformers' dequantisation computes) is rounded to bfloat16 by the
 * conversion instruction (to nearest, ties to even) into one vector in column order, whose
 * pairs the dot-product instruction multiplies with x's - x already rounded to bfloat16 by the
 * caller, so packing it is exact, in column order too. Scales whose products could leave the
 * normal range (block scales under 2^-117 or of 2^7 and more, as tile_fp8lanes) send the tile
 * to the generic kernel. Against that kernel (ld_fp8, a multiply and five integer steps of
 * rounding per VL weights, then a fused multiply-add), bench_gemv on an Intel Xeon (family 6,
 * model 207), one thread: 6.1 -> 7.4 GB/s (its float32 products: 11.7). */

/* 1 when tile_fp8dp with HALF = 1 serves w's bfloat16 products on this CPU */
INLINE int fp8_halfdp_serve(const cpu_weight *w)
{
    return w->dtype == NNT_F8_E4M3 && w->cols % (2 * VL) == 0 && w->block_cols % (2 * VL) == 0 &&
           w->grid_cols <= FP8_MAX_BLOCKS && !fp8_lanes_cpu() && __builtin_cpu_supports("avx512bf16");
}

/* x [M, K] (bfloat16 values in float32) packed in column order; 0 without memory */
TARGET_BF16 static int gemv_fp8halfdp(const float *x, int64_t M, const cpu_weight *w, int64_t n0, int64_t n1,
                                      float *y, int64_t ldy)
{
    const int64_t K = w->cols;
    uint16_t *xb = aligned_alloc(64, (size_t)(M * K) * 2 + 64);
    if (!xb) return 0;
    pack_pairs(x, xb, M * K);
    rows_fp8dp(x, xb, M, w, n0, n1, y, ldy, 1);
    free(xb);
    return 1;
}

/* ---- FP4 e2m1 with E8M0 scales, bfloat16 products with AVX512-BF16 ----
 * Every e2m1 value is a bfloat16 number (FP4_WORDS), and with x holding bfloat16 numbers
 * (CPU_GEMV_X_BF16) the dot-product instruction forms each code's product with x exactly, two
 * columns per float32 lane; only a block's sum is then multiplied by its scale, a power of two,
 * which is exact as scaling each weight first would be (the sums are float32 in both). 32 bytes
 * of a row (64 columns) widen to one 16-bit lane per byte; a word permute indexed by the lane
 * (its low 5 bits: the 16 values are stored twice) gives the low nibbles' values and, the lane
 * shifted right by 4, the high nibbles'. Lane k then holds columns c + 2k and c + 2k + 1, so x
 * is packed per 64 columns as its even then its odd columns (xb); float32 lanes 0..7 sum
 * columns c .. c + 31 and lanes 8..15 the next 32, each times its own block's scale. The
 * instruction reads subnormal inputs as zero: the codes' values are normal, and so is any
 * bfloat16 x above 2^-126 in magnitude.
 * Only for bfloat16 products: a float32 x needs a fused multiply-add per 16 columns. On an AMD
 * EPYC (Zen 4), with the weight in cache (bench_gemv --mb 0), the table kernel above reads 12 GB/s
 * and this one 19 GB/s, against 25-30 GB/s one core reads from memory
 * (bench/results/2026-12-06-62c4724-gemv-zen4.md). */
#define FP4_DPBF16 1
static const uint16_t FP4_WORDS[32] = {
    0x0000, 0x3f00, 0x3f80, 0x3fc0, 0x4000, 0x4040, 0x4080, 0x40c0, 0x8000, 0xbf00, 0xbf80, 0xbfc0, 0xc000, 0xc040, 0xc080, 0xc0c0,
    0x0000, 0x3f00, 0x3f80, 0x3fc0, 0x4000, 0x4040, 0x4080, 0x40c0, 0x8000, 0xbf00, 0xbf80, 0xbfc0, 0xc000, 0xc040, 0xc080, 0xc0c0,
};

/* 1 when tile_fp4dp serves w on this CPU: E8M0 scales, blocks in whole 32 columns, K in 64 */
INLINE int fp4dp_serves(const cpu_weight *w)
{
    return w->dtype == NNT_F4_E2M1 && w->scale && w->scale_dtype == NNT_F8_E8M0 && w->cols % 64 == 0 &&
           w->block_cols % 32 == 0 && w->cols / 32 <= FP4_MAX_BLOCKS && __builtin_cpu_supports("avx512bf16");
}

/* rows n .. n + R against the M rows of xb [M, K] (bfloat16 bits, packed as above) */
TARGET_BF16 static inline __attribute__((always_inline)) void tile_fp4dp(const uint16_t *xb, const cpu_weight *w,
                                                                        int64_t n, float *y, int64_t ldy,
                                                                        const int M, const int R)
{
    const int64_t K = w->cols, bc = w->block_cols, nb = (K + bc - 1) / bc, per = bc / 32;
    const __m512i table = _mm512_loadu_si512(FP4_WORDS);
    const uint8_t *row[4], *sb[4];
    uint8_t spread[4][FP4_MAX_BLOCKS]; /* blocks wider than 32 columns: the scale of each 32 */
    __m512 acc[CPU_FEW_ROWS][4];
    for (int r = 0; r < R; r++) {
        row[r] = row_at(w, n + r);
        sb[r] = scale_row(w, n + r);
        if (per > 1) {
            for (int64_t h = 0; h < K / 32; h++) spread[r][h] = sb[r][h / per];
            sb[r] = spread[r];
        }
        prefetch_scales(w, n + r + PF_ROWS, nb);
    }
    for (int m = 0; m < M; m++)
        for (int r = 0; r < R; r++) acc[m][r] = _mm512_setzero_ps();
    for (int64_t c = 0; c < K; c += 64) {
        __m512bh lo[4], hi[4];
        __m512 sv[4];
        for (int r = 0; r < R; r++) {
            if (!(c & 127)) PREFETCH(row[r] + (PF_ROWS * K + c) / 2);
            __m512i q = _mm512_cvtepu8_epi16(_mm256_loadu_si256((const __m256i *)(row[r] + c / 2)));
            __m512i l = _mm512_permutexvar_epi16(q, table), h = _mm512_permutexvar_epi16(_mm512_srli_epi16(q, 4), table);
            memcpy(&lo[r], &l, sizeof l);
            memcpy(&hi[r], &h, sizeof h);
            const uint8_t *b = sb[r] + c / 32;
            sv[r] = _mm512_castsi512_ps(_mm512_mask_set1_epi32(_mm512_set1_epi32((int)E8M0_BITS[b[0]]), 0xff00,
                                                                (int)E8M0_BITS[b[1]]));
        }
        for (int m = 0; m < M; m++) {
            __m512bh xl, xh;
            memcpy(&xl, xb + m * K + c, sizeof xl);
            memcpy(&xh, xb + m * K + c + 32, sizeof xh);
            for (int r = 0; r < R; r++) {
                __m512 p = _mm512_dpbf16_ps(_mm512_dpbf16_ps(_mm512_setzero_ps(), lo[r], xl), hi[r], xh);
                acc[m][r] = _mm512_fmadd_ps(p, sv[r], acc[m][r]);
            }
        }
    }
    for (int m = 0; m < M; m++)
        for (int r = 0; r < R; r++) y[m * ldy + n + r] = _mm512_reduce_add_ps(acc[m][r]);
}

/* x [M, K] of bfloat16 numbers; 0 without memory (nothing written) */
TARGET_BF16 static int gemv_fp4dp(const float *x, int64_t M, const cpu_weight *w, int64_t n0, int64_t n1, float *y,
                                  int64_t ldy)
{
    const int64_t K = w->cols;
    uint16_t *xb = aligned_alloc(64, (size_t)(M * K) * 2 + 64);
    if (!xb) return 0;
    for (int64_t i = 0; i < M * K; i += 64)
        for (int k = 0; k < 32; k++) {
            uint32_t e, o;
            memcpy(&e, x + i + 2 * k, 4);
            memcpy(&o, x + i + 2 * k + 1, 4);
            xb[i + k] = (uint16_t)(e >> 16);
            xb[i + 32 + k] = (uint16_t)(o >> 16);
        }
    int64_t n = n0;
#define FP4DP_TILE(MM, RR) tile_fp4dp(xb, w, n, y, ldy, MM, RR)
    FEW_ROWS_SWITCH_STREAM(FP4DP_TILE);
#undef FP4DP_TILE
    free(xb);
    return 1;
}

/* ---- FP8 e4m3, bfloat16 products with AVX512-VBMI and AVX512-BF16: a table per block ----
 * In bfloat16 products each weight is the float32 product code x scale rounded to bfloat16 (as
 * torch's bfloat16 copy holds it), so one block's weights take at most 256 values: the table of
 * its 128 magnitudes times the scale, rounded by the conversion instruction (to nearest, ties
 * to even), built once per grid row and block, is those weights exactly (the product of a
 * negative code is the negated product: the sign bit is flipped by an xor). A byte permute over
 * two registers indexed by a code's low 7 bits (VBMI) gives 64 weights' high bytes, another
 * their low bytes; interleaving the two (unpack, within each 128-bit lane) gives two vectors of
 * 32 bfloat16 weights, where lane 8L + j of the first holds column 16L + j and of the second
 * column 16L + 8 + j, and x (bfloat16 numbers: CPU_GEMV_X_BF16) is packed once per product in
 * that order. The dot-product instruction then multiplies and sums pairs, with no per-weight
 * multiply, rounding or per-block scaling left. Against tile_fp8dp's decoding (per 32 weights:
 * two multiplies by the scale and a conversion ahead of the dot product), bench_gemv on an AMD
 * EPYC (Zen 4), one thread, FP8 with 128x128 float32 scales: 16.4 -> 25.3 GB/s
 * (bench/results/2026-12-06-62c4724-gemv-zen4.md). Blocks
 * whose products could leave the normal range (|scale| under 2^-117 or over 2^100, or not a
 * number: both instructions read subnormal inputs as zero) and tiles whose rows lie in two grid
 * rows go to the generic kernel. */
#define FP8_TABLES 1
#define TARGET_VBMI __attribute__((target("avx512f,avx512bw,avx512bf16,avx512vbmi")))
#define TARGET_VBMIF __attribute__((target("avx512f,avx512bw,avx512vbmi")))
#define TARGET_TABLES __attribute__((target("avx512f,avx512bw")))
/* the e4m3 magnitude of code c < 128: m 2^-9 for exponent field 0, (8 + m) 2^(e - 10) above;
 * code 127 is not a number */
#define E4M3_V(c)                                                                                             \
    ((c) == 127 ? NAN                                                                                         \
     : ((c) >> 3) == 0 ? (float)((c) & 7) / 512.0f                                                            \
                       : (float)(8 + ((c) & 7)) * (float)(1 << ((c) >> 3)) / 1024.0f)
#define E4M3_V4(c) E4M3_V(c), E4M3_V((c) + 1), E4M3_V((c) + 2), E4M3_V((c) + 3)
#define E4M3_V16(c) E4M3_V4(c), E4M3_V4((c) + 4), E4M3_V4((c) + 8), E4M3_V4((c) + 12)
static const float E4M3_MAG[128] = {E4M3_V16(0), E4M3_V16(16), E4M3_V16(32), E4M3_V16(48),
                                    E4M3_V16(64), E4M3_V16(80), E4M3_V16(96), E4M3_V16(112)};

/* The tables of one grid row, kept across a call's tiles (a grid row serves block_rows rows). */
typedef struct fp8_tables {
    const uint8_t *srow; /* the grid row the tables hold; ok < 0: none yet */
    int ok;              /* 0: one of its scales is out of range */
    int64_t nb;          /* blocks in a row */
    uint8_t *t;          /* [nb][256]: high bytes of magnitudes 0..127, then their low bytes */
} fp8_tables;

INLINE int fp8tab_serves(const cpu_weight *w)
{
    return w->dtype == NNT_F8_E4M3 && w->cols % 64 == 0 && (!w->scale || w->block_cols % 64 == 0) &&
           __builtin_cpu_supports("avx512bf16") && __builtin_cpu_supports("avx512vbmi");
}

/* g's tables for grid row srow; g->ok = 0 when a scale is out of range. Each entry is rounded to
 * bfloat16 by integer steps (add 0x7fff plus the lowest kept bit, truncate: to nearest, ties to
 * even), as the conversion instruction does for the normal numbers the scale range leaves, so
 * that CPUs without AVX512-BF16 build the same tables (a NaN stays a NaN). */
TARGET_TABLES static void fp8tab_build(fp8_tables *g, const cpu_weight *w, const uint8_t *srow)
{
    g->srow = srow;
    g->ok = 0;
    const __m512i half = _mm512_set1_epi32(0x7fff), one = _mm512_set1_epi32(1);
    for (int64_t cb = 0; cb < g->nb; cb++) {
        const float s = scale_get(w, srow, cb, 1.0f);
        if (!(s == 0.0f || (fabsf(s) >= 0x1p-117f && fabsf(s) <= 0x1p100f))) return;
        const __m512 sv = _mm512_set1_ps(s);
        uint8_t *t = g->t + cb * 256;
        for (int i = 0; i < 128; i += 16) {
            __m512i u = _mm512_castps_si512(_mm512_mul_ps(_mm512_loadu_ps(E4M3_MAG + i), sv));
            u = _mm512_add_epi32(u, _mm512_add_epi32(half, _mm512_and_si512(_mm512_srli_epi32(u, 16), one)));
            u = _mm512_srli_epi32(u, 16);
            _mm_storeu_si128((__m128i *)(t + i), _mm512_cvtepi32_epi8(_mm512_srli_epi32(u, 8)));
            _mm_storeu_si128((__m128i *)(t + 128 + i), _mm512_cvtepi32_epi8(u));
        }
    }
    g->ok = 1;
}

/* g's tables for rows n .. n + R and the rows' codes in row[0 .. R); 0 when the rows lie in two grid
 * rows or a scale of theirs is out of the tables' range */
TARGET_TABLES static inline __attribute__((always_inline)) int fp8tab_rows(fp8_tables *g, const cpu_weight *w,
                                                                          int64_t n, const int R,
                                                                          const uint8_t **row)
{
    const uint8_t *srow = scale_row(w, n);
    for (int r = 1; r < R; r++)
        if (scale_row(w, n + r) != srow) return 0;
    if (g->ok < 0 || g->srow != srow) fp8tab_build(g, w, srow);
    if (!g->ok) return 0;
    for (int r = 0; r < R; r++) row[r] = row_at(w, n + r);
    return 1;
}

/* 64 codes q of one block -> the rounded weights as bfloat16 numbers, interleaved as described
 * above: *u0 holds columns 16L + j (lanes 8L + j), *u1 columns 16L + 8 + j. h0, h1: the block's
 * high-byte table, l0, l1: its low-byte table */
TARGET_VBMIF static inline __attribute__((always_inline)) void fp8tab_lookup(__m512i q, __m512i h0, __m512i h1,
                                                                            __m512i l0, __m512i l1,
                                                                            __m512i *u0, __m512i *u1)
{
    __m512i hb = _mm512_permutex2var_epi8(h0, q, h1), lb = _mm512_permutex2var_epi8(l0, q, l1);
    hb = _mm512_ternarylogic_epi32(hb, q, _mm512_set1_epi8((char)0x80), 0x78); /* hb ^ (q & 0x80) */
    *u0 = _mm512_unpacklo_epi8(lb, hb);
    *u1 = _mm512_unpackhi_epi8(lb, hb);
}

/* rows n .. n + R against the M rows of xb (packed as above); 0 when the tile is not served */
TARGET_VBMI static inline __attribute__((always_inline)) int tile_fp8tab(fp8_tables *g, const uint16_t *xb,
                                                                        const cpu_weight *w, int64_t n, float *y,
                                                                        int64_t ldy, const int M, const int R)
{
    const int64_t K = w->cols, bc = w->scale ? w->block_cols : K;
    const uint8_t *row[4];
    if (!fp8tab_rows(g, w, n, R, row)) return 0;
    __m512 acc[CPU_FEW_ROWS][4];
    for (int m = 0; m < M; m++)
        for (int r = 0; r < R; r++) acc[m][r] = _mm512_setzero_ps();
    for (int64_t c0 = 0, cb = 0; c0 < K; c0 += bc, cb++) {
        const uint8_t *t = g->t + cb * 256;
        const __m512i h0 = _mm512_loadu_si512(t), h1 = _mm512_loadu_si512(t + 64);
        const __m512i l0 = _mm512_loadu_si512(t + 128), l1 = _mm512_loadu_si512(t + 192);
        const int64_t c1 = c0 + bc < K ? c0 + bc : K;
        for (int64_t c = c0; c < c1; c += 64) {
            __m512bh x0[CPU_FEW_ROWS], x1[CPU_FEW_ROWS];
            for (int m = 0; m < M; m++) {
                memcpy(&x0[m], xb + m * K + c, sizeof x0[m]);
                memcpy(&x1[m], xb + m * K + c + 32, sizeof x1[m]);
            }
            for (int r = 0; r < R; r++) {
                PREFETCH(row[r] + PF_ROWS * K + c);
                __m512i u0, u1;
                fp8tab_lookup(_mm512_loadu_si512(row[r] + c), h0, h1, l0, l1, &u0, &u1);
                __m512bh b0, b1;
                memcpy(&b0, &u0, sizeof b0);
                memcpy(&b1, &u1, sizeof b1);
                for (int m = 0; m < M; m++) acc[m][r] = _mm512_dpbf16_ps(_mm512_dpbf16_ps(acc[m][r], b0, x0[m]), b1, x1[m]);
            }
        }
    }
    for (int m = 0; m < M; m++)
        for (int r = 0; r < R; r++) y[m * ldy + n + r] = _mm512_reduce_add_ps(acc[m][r]);
    return 1;
}

/* rows n0 .. n1 in tiles of constant shape; a tile not served goes to the generic kernel */
#define FP8TAB_TILE(MM, RR)                                                                                   \
    do {                                                                                                      \
        if (!tile_fp8tab(g, xb, w, n, y, ldy, MM, RR)) tile_fp8(x, w, n, y, ldy, MM, RR, RND);               \
    } while (0)
TARGET_VBMI static void rows_fp8tab(fp8_tables *g, const float *x, const uint16_t *xb, int64_t M,
                                    const cpu_weight *w, int64_t n0, int64_t n1, float *y, int64_t ldy, const int RND)
{
    int64_t n = n0;
    FEW_ROWS_SWITCH_WIDE(FP8TAB_TILE);
}
#undef FP8TAB_TILE

/* x [M, K] of bfloat16 numbers; rnd as gemv's CPU_GEMV_ROUND (for tiles the generic kernel
 * takes); 0 without memory (nothing written) */
TARGET_VBMI static int gemv_fp8tab(const float *x, int64_t M, const cpu_weight *w, int64_t n0, int64_t n1, float *y,
                                   int64_t ldy, int rnd)
{
    const int64_t K = w->cols, nb = w->scale ? (K + w->block_cols - 1) / w->block_cols : 1;
    uint16_t *xb = aligned_alloc(64, (size_t)(M * K) * 2 + 64);
    fp8_tables g = {.ok = -1, .nb = nb, .t = aligned_alloc(64, (size_t)nb * 256)};
    if (!xb || !g.t) {
        free(xb);
        free(g.t);
        return 0;
    }
    for (int64_t i = 0; i < M * K; i += 64)
        for (int j = 0; j < 32; j++) {
            uint32_t a, b;
            memcpy(&a, x + i + 16 * (j / 8) + j % 8, 4);
            memcpy(&b, x + i + 16 * (j / 8) + 8 + j % 8, 4);
            xb[i + j] = (uint16_t)(a >> 16);
            xb[i + 32 + j] = (uint16_t)(b >> 16);
        }
    if (rnd)
        rows_fp8tab(&g, x, xb, M, w, n0, n1, y, ldy, 1);
    else
        rows_fp8tab(&g, x, xb, M, w, n0, n1, y, ldy, 0);
    free(xb);
    free(g.t);
    return 1;
}

/* ---- the same tables on AVX512-VBMI without AVX512-BF16 (Intel Ice Lake), float32 products ----
 * Bfloat16 products on a weight with float32 (or bfloat16) block scales, where each weight must
 * be rounded from code x scale: the tables above give the rounded weights by two byte permutes
 * as before, and a bfloat16 is the high half of a float32, so each 32-bit lane of an interleaved
 * vector gives two weights as floats with one shift (its low word) or one mask (its high word).
 * Lane 4L + i of the four vectors holds columns 16L + 2i, 16L + 2i + 1, 16L + 8 + 2i and
 * 16L + 9 + 2i of each 64; x (bfloat16 numbers in float32) is permuted once per product into that
 * order. The products of two bfloat16 numbers are exact in float32, so the sums are those of the
 * dot-product instruction up to their order. Against rounding each weight (ld_fp8, a multiply, five
 * integer steps), bench_gemv on an Intel Xeon (family 6, model 207, KVM without AVX512-BF16), two
 * threads, FP8 with 128x128 float32 scales: 9.6-11.7 -> 19.2-23.1 GB/s
 * (bench/results/2026-12-07-43c9f67-gemv-icx.md). */
INLINE int fp8tabf_serves(const cpu_weight *w)
{
    return w->dtype == NNT_F8_E4M3 && w->cols % 64 == 0 && (!w->scale || w->block_cols % 64 == 0) &&
           __builtin_cpu_supports("avx512vbmi") && !__builtin_cpu_supports("avx512bf16");
}

/* rows n .. n + R against the M rows of xf (permuted as above); 0 when the tile is not served */
TARGET_VBMIF static inline __attribute__((always_inline)) int tile_fp8tabf(fp8_tables *g, const float *xf,
                                                                          const cpu_weight *w, int64_t n, float *y,
                                                                          int64_t ldy, const int M, const int R)
{
    const int64_t K = w->cols, bc = w->scale ? w->block_cols : K;
    const uint8_t *row[4];
    if (!fp8tab_rows(g, w, n, R, row)) return 0;
    const __m512i high = _mm512_set1_epi32((int)0xffff0000u);
    __m512 acc[CPU_FEW_ROWS][4];
    for (int m = 0; m < M; m++)
        for (int r = 0; r < R; r++) acc[m][r] = _mm512_setzero_ps();
    for (int64_t c0 = 0, cb = 0; c0 < K; c0 += bc, cb++) {
        const uint8_t *t = g->t + cb * 256;
        const __m512i h0 = _mm512_loadu_si512(t), h1 = _mm512_loadu_si512(t + 64);
        const __m512i l0 = _mm512_loadu_si512(t + 128), l1 = _mm512_loadu_si512(t + 192);
        const int64_t c1 = c0 + bc < K ? c0 + bc : K;
        for (int64_t c = c0; c < c1; c += 64) {
            for (int r = 0; r < R; r++) {
                PREFETCH(row[r] + PF_ROWS * K + c);
                __m512i u0, u1;
                fp8tab_lookup(_mm512_loadu_si512(row[r] + c), h0, h1, l0, l1, &u0, &u1);
                __m512 e0 = _mm512_castsi512_ps(_mm512_slli_epi32(u0, 16));
                __m512 o0 = _mm512_castsi512_ps(_mm512_and_si512(u0, high));
                __m512 e1 = _mm512_castsi512_ps(_mm512_slli_epi32(u1, 16));
                __m512 o1 = _mm512_castsi512_ps(_mm512_and_si512(u1, high));
                for (int m = 0; m < M; m++) {
                    const float *xm = xf + m * K + c;
                    __m512 a = _mm512_fmadd_ps(e0, _mm512_loadu_ps(xm), acc[m][r]);
                    a = _mm512_fmadd_ps(o0, _mm512_loadu_ps(xm + 16), a);
                    a = _mm512_fmadd_ps(e1, _mm512_loadu_ps(xm + 32), a);
                    acc[m][r] = _mm512_fmadd_ps(o1, _mm512_loadu_ps(xm + 48), a);
                }
            }
        }
    }
    for (int m = 0; m < M; m++)
        for (int r = 0; r < R; r++) y[m * ldy + n + r] = _mm512_reduce_add_ps(acc[m][r]);
    return 1;
}

#define FP8TABF_TILE(MM, RR)                                                                                  \
    do {                                                                                                      \
        if (!tile_fp8tabf(g, xf, w, n, y, ldy, MM, RR)) tile_fp8(x, w, n, y, ldy, MM, RR, 1);                \
    } while (0)
TARGET_VBMIF static void rows_fp8tabf(fp8_tables *g, const float *x, const float *xf, int64_t M,
                                     const cpu_weight *w, int64_t n0, int64_t n1, float *y, int64_t ldy)
{
    int64_t n = n0;
    FEW_ROWS_SWITCH(FP8TABF_TILE);
}
#undef FP8TABF_TILE

/* x [M, K] of bfloat16 numbers, weights rounded (CPU_GEMV_ROUND); 0 without memory (nothing
 * written) */
TARGET_VBMIF static int gemv_fp8tabf(const float *x, int64_t M, const cpu_weight *w, int64_t n0, int64_t n1,
                                     float *y, int64_t ldy)
{
    const int64_t K = w->cols, nb = w->scale ? (K + w->block_cols - 1) / w->block_cols : 1;
    float *xf = aligned_alloc(64, (size_t)(M * K) * sizeof(float));
    fp8_tables g = {.ok = -1, .nb = nb, .t = aligned_alloc(64, (size_t)nb * 256)};
    if (!xf || !g.t) {
        free(xf);
        free(g.t);
        return 0;
    }
    for (int64_t i = 0; i < M * K; i += 64) /* group of 64: L = j / 4 % 4, i = j % 4 per quarter */
        for (int j = 0; j < 16; j++) {
            const int64_t b = i + 16 * (j / 4) + 2 * (j % 4);
            xf[i + j] = x[b];
            xf[i + 16 + j] = x[b + 1];
            xf[i + 32 + j] = x[b + 8];
            xf[i + 48 + j] = x[b + 9];
        }
    rows_fp8tabf(&g, x, xf, M, w, n0, n1, y, ldy);
    free(xf);
    free(g.t);
    return 1;
}
#endif

/* rows n .. n + R: the lanes tile, else the generic one */
INLINE void tile_fp8any(fp8_grid *g, const float *x, const float *xp, const cpu_weight *w, int64_t n, float *y,
                        int64_t ldy, const int M, const int R, const int RND)
{
    if (!tile_fp8lanes(g, xp, w, n, y, ldy, M, R, RND)) tile_fp8(x, w, n, y, ldy, M, R, RND);
}

INLINE void rows_fp8lanes(const float *x, const float *xp, int64_t M, const cpu_weight *w,
                          int64_t n0, int64_t n1, float *y, int64_t ldy, const int RND)
{
    fp8_grid g = {.ok = -1};
    int64_t n = n0;
#define FP8ANY_TILE(MM, RR) tile_fp8any(&g, x, xp, w, n, y, ldy, MM, RR, RND)
    if (RND) {
        FEW_ROWS_SWITCH(FP8ANY_TILE);
    } else {
        /* float32 products: tiles of several weight rows (the float32 block sums in one chain
         * per row pair from 3 rows of x, tile_fp8lanes) */
        FEW_ROWS_SWITCH_STREAM(FP8ANY_TILE);
    }
#undef FP8ANY_TILE
}

/* 0 when the call must take the generic kernel (no memory, or |x| too large to scale) */
static int gemv_fp8lanes(const float *x, int64_t M, const cpu_weight *w, int64_t n0, int64_t n1, float *y,
                         int64_t ldy, int rnd)
{
    const int64_t K = w->cols;
    float *xp = aligned_alloc(64, (size_t)(M * K) * sizeof(float) + 64);
    if (!xp) return 0;
    const float f = rnd ? 1.0f : 0x1p64f;
    for (int64_t m = 0; m < M; m++)
        for (int64_t c = 0; c < K; c += 2 * VL)
            for (int l = 0; l < VL / 4; l++)
                for (int j = 0; j < 4; j++) {
                    float a = x[m * K + c + 8 * l + j], b = x[m * K + c + 8 * l + 4 + j];
                    if (!(fabsf(a) < 0x1p60f) || !(fabsf(b) < 0x1p60f)) { /* also NaN */
                        free(xp);
                        return 0;
                    }
                    xp[m * K + c + 4 * l + j] = a * f;
                    xp[m * K + c + VL + 4 * l + j] = b * f;
                }
    uint16_t *xb = NULL;
#ifdef FP8_DPBF16
    if (rnd && __builtin_cpu_supports("avx512bf16") && (xb = aligned_alloc(64, (size_t)(M * K) * 2 + 64)))
        pack_pairs(xp, xb, M * K);
#endif
    if (xb)
#ifdef FP8_DPBF16
        rows_fp8dp(x, xb, M, w, n0, n1, y, ldy, 0);
#else
        ;
#endif
    else if (rnd)
        rows_fp8lanes(x, xp, M, w, n0, n1, y, ldy, 1);
    else
        rows_fp8lanes(x, xp, M, w, n0, n1, y, ldy, 0);
    free(xb);
    free(xp);
    return 1;
}

#if defined(X86_256)
/* ---- FP4 e2m1 with E8M0 scales per 32 codes, one row of x, AVX2: byte-shuffle tables ----
 * Each e2m1 value (0, 0.5, 1, 1.5, 2, 3, 4, 6 and their negatives) is a bfloat16 number, so two
 * 16-entry byte shuffles (vpshufb) give the high and the low byte of its bfloat16 bits from the
 * code; interleaving the two bytes (unpack), then moving each 32-bit lane's low 16 bits up (a
 * shift) or masking its high 16 bits (an and) gives float32 values exactly, with no subnormal
 * and no conversion instruction. 32 bytes (64 codes, two groups of 32) make 8 vectors: every
 * step stays within its 128-bit lane, so lane 4L + d of vector (n, q) holds the code of nibble n
 * (0 low, 1 high) of byte 16L + 8 (q / 2) + 2d + q % 2 - codes of the first group in the low
 * four lanes, of the second in the high four. x is permuted once per
 * product into that order; each chunk's sum is multiplied by [s0 x 4, s1 x 4]. About 1.45x the
 * table kernel above (bench/gemv, one thread). */
#define FP4_SHUF 1
#define FP4_BF16_HIGH 0x00, 0x3f, 0x3f, 0x3f, 0x40, 0x40, 0x40, 0x40, 0x80, 0xbf, 0xbf, 0xbf, 0xc0, 0xc0, 0xc0, 0xc0
#define FP4_BF16_LOW 0x00, 0x00, 0x80, 0xc0, 0x00, 0x40, 0x80, 0xc0, 0x00, 0x00, 0x80, 0xc0, 0x00, 0x40, 0x80, 0xc0

INLINE int fp4shuf_serves(const cpu_weight *w, int64_t M)
{
    return M == 1 && w->dtype == NNT_F4_E2M1 && w->scale && w->scale_dtype == NNT_F8_E8M0 && w->block_cols == 32 &&
           w->cols % 64 == 0;
}

/* xp[64 j + 32 n + 8 q + 4 L + d] = x[64 j + 2 (16 L + 8 (q / 2) + 2 d + q % 2) + n] */
INLINE void fp4shuf_perm(const float *x, int64_t K, float *xp)
{
    for (int64_t c = 0; c < K; c += 64)
        for (int n = 0; n < 2; n++)
            for (int q = 0; q < 4; q++)
                for (int L = 0; L < 2; L++)
                    for (int d = 0; d < 4; d++)
                        xp[c + 32 * n + 8 * q + 4 * L + d] = x[c + 2 * (16 * L + 8 * (q / 2) + 2 * d + q % 2) + n];
}

/* rows n .. n + R against xp */
INLINE void tile_fp4shuf(const float *xp, const cpu_weight *w, int64_t n, float *y, const int R)
{
    const int64_t K = w->cols, nb = K / 32;
    const __m256i low = _mm256_set1_epi8(0x0f), hi16 = _mm256_set1_epi32((int)0xffff0000u);
    const __m256i th = _mm256_setr_epi8(FP4_BF16_HIGH, FP4_BF16_HIGH), tl = _mm256_setr_epi8(FP4_BF16_LOW, FP4_BF16_LOW);
    const uint8_t *row[4], *sb[4];
    __m256 acc[4];
    for (int r = 0; r < R; r++) {
        row[r] = row_at(w, n + r);
        sb[r] = scale_row(w, n + r);
        prefetch_scales(w, n + r + PF_ROWS, nb);
        acc[r] = _mm256_setzero_ps();
    }
    for (int64_t c = 0; c < K; c += 64) {
        for (int r = 0; r < R; r++) {
            if (!(c & 127)) PREFETCH(row[r] + (PF_ROWS * K + c) / 2);
            __m256i b = _mm256_loadu_si256((const __m256i *)(row[r] + c / 2));
            __m256i nib[2] = {_mm256_and_si256(b, low), _mm256_and_si256(_mm256_srli_epi16(b, 4), low)};
            __m256 part[2];
            for (int h = 0; h < 2; h++) {
                __m256i hb = _mm256_shuffle_epi8(th, nib[h]), lb = _mm256_shuffle_epi8(tl, nib[h]);
                __m256i w0 = _mm256_unpacklo_epi8(lb, hb), w1 = _mm256_unpackhi_epi8(lb, hb);
                const float *xv = xp + c + 32 * h;
                __m256 s = _mm256_mul_ps(_mm256_castsi256_ps(_mm256_slli_epi32(w0, 16)), _mm256_loadu_ps(xv));
                s = _mm256_fmadd_ps(_mm256_castsi256_ps(_mm256_and_si256(w0, hi16)), _mm256_loadu_ps(xv + 8), s);
                s = _mm256_fmadd_ps(_mm256_castsi256_ps(_mm256_slli_epi32(w1, 16)), _mm256_loadu_ps(xv + 16), s);
                part[h] = _mm256_fmadd_ps(_mm256_castsi256_ps(_mm256_and_si256(w1, hi16)), _mm256_loadu_ps(xv + 24), s);
            }
            const uint8_t *sg = sb[r] + c / 32;
            __m256 sv = _mm256_castsi256_ps(_mm256_set_m128i(_mm_set1_epi32((int)E8M0_BITS[sg[1]]),
                                                             _mm_set1_epi32((int)E8M0_BITS[sg[0]])));
            acc[r] = _mm256_fmadd_ps(_mm256_add_ps(part[0], part[1]), sv, acc[r]);
        }
    }
    for (int r = 0; r < R; r++) y[n + r] = lut_hsum(acc[r]);
}

static void gemv_fp4shuf(const float *x, const cpu_weight *w, int64_t n0, int64_t n1, float *y, float *xp)
{
    fp4shuf_perm(x, w->cols, xp);
    int64_t n = n0;
    for (; n + 4 <= n1; n += 4) tile_fp4shuf(xp, w, n, y, 4);
    for (; n < n1; n++) tile_fp4shuf(xp, w, n, y, 1);
}
#endif
#endif

static void k_gemv(const float *x, int64_t M, const cpu_weight *w, int64_t n0, int64_t n1, float *y, int64_t ldy,
                   int flags)
{
    const int rnd = flags & CPU_GEMV_ROUND;
    switch (w->dtype) {
    case NNT_F32: gemv_f32(x, M, w, n0, n1, y, ldy, rnd); break;
    case NNT_BF16: /* already bfloat16 numbers: rnd does not apply */
#if defined(X86_512)
        /* The AVX2 kernel, on a CPU that has AVX-512: it read BF16 weights 1.3x as fast as this
         * table's own 512-bit kernel (37 against 28 GB/s, bench/gemv, one thread, AMD Zen 5; a
         * 512-bit kernel on even and odd columns without widening shuffles reached 28 too), and
         * Kimi-Linear's BF16 release decoded faster with isa = avx2 than with AVX-512 (bench/run.py
         * --layout release, 0a5a19c). Every CPU with AVX-512 F/BW/VL/DQ has AVX2, FMA and F16C.
         * That holds for one or two rows of x; at 4 and 8 the generic tiles below ran faster. */
        if (M < 3) {
            cpu_kernels_avx2.gemv(x, M, w, n0, n1, y, ldy, 0);
            break;
        }
        /* from 3 rows of x on, this table's tiles of two weight rows on packed x (pack_rows) */
#endif
        gemv_bf16(x, M, w, n0, n1, y, ldy, 0);
        break;
    case NNT_F16: gemv_f16(x, M, w, n0, n1, y, ldy, rnd); break;
    case NNT_F8_E4M3:
#ifdef FP8_TABLES
        if ((flags & CPU_GEMV_X_BF16) && fp8tab_serves(w) && gemv_fp8tab(x, M, w, n0, n1, y, ldy, rnd)) break;
        if (rnd && fp8tabf_serves(w) && gemv_fp8tabf(x, M, w, n0, n1, y, ldy)) break;
#endif
#ifdef FP8_LANES
        if (fp8_lanes_serve(w) && gemv_fp8lanes(x, M, w, n0, n1, y, ldy, rnd)) break;
#endif
#ifdef FP8_DPBF16
        if (rnd && fp8_halfdp_serve(w) && gemv_fp8halfdp(x, M, w, n0, n1, y, ldy)) break;
#endif
        gemv_fp8(x, M, w, n0, n1, y, ldy, rnd);
        break;
    default:
#ifdef FP4_DPBF16
        if ((flags & CPU_GEMV_X_BF16) && !rnd && fp4dp_serves(w) && gemv_fp4dp(x, M, w, n0, n1, y, ldy)) break;
#endif
#ifdef FP4_SHUF
        if (!rnd && fp4shuf_serves(w, M)) {
            float *xp = aligned_alloc(64, (size_t)w->cols * sizeof(float));
            if (xp) {
                gemv_fp4shuf(x, w, n0, n1, y, xp);
                free(xp);
                break;
            }
        }
#endif
#ifdef FP4_LUT
        if (!rnd && fp4lut_serves(w)) { /* the nibble planes serve a subset of these weights */
            float *xs = aligned_alloc(64, (size_t)(M * w->cols) * sizeof(float));
            if (xs) {
#ifdef FP4_PLANES
                if (fp4planes_serves(w))
                    gemv_fp4planes(x, M, w, n0, n1, y, ldy, xs);
                else
#endif
                    gemv_fp4lut(x, M, w, n0, n1, y, ldy, xs);
                free(xs);
                break;
            }
        }
#endif
        gemv_fp4(x, M, w, n0, n1, y, ldy, rnd);
        break;
    }
}

static void k_decode16(const cpu_weight *w, int64_t r0, int64_t r1, uint16_t *dst, int64_t ld)
{
    switch (w->dtype) {
    case NNT_F32: decode16_f32(w, r0, r1, dst, ld); break;
    case NNT_BF16: decode16_bf16(w, r0, r1, dst, ld); break;
    case NNT_F16: decode16_f16(w, r0, r1, dst, ld); break;
    case NNT_F8_E4M3: decode16_fp8(w, r0, r1, dst, ld); break;
    default: decode16_fp4(w, r0, r1, dst, ld); break;
    }
}

static void k_decode(const cpu_weight *w, int64_t r0, int64_t r1, float *dst, int64_t ld)
{
    switch (w->dtype) {
    case NNT_F32: decode_f32(w, r0, r1, dst, ld); break;
    case NNT_BF16: decode_bf16(w, r0, r1, dst, ld); break;
    case NNT_F16: decode_f16(w, r0, r1, dst, ld); break;
    case NNT_F8_E4M3: decode_fp8(w, r0, r1, dst, ld); break;
    default: decode_fp4(w, r0, r1, dst, ld); break;
    }
}

/* nearest bfloat16, ties to even; a NaN stays a (quiet) NaN */
static void k_round_bf16(const float *src, float *dst, int64_t n)
{
    int64_t i = 0;
    for (; i + VL <= n; i += VL) {
        vu u;
        memcpy(&u, src + i, sizeof u);
        vu r = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
        vu nan = (vu)((u & 0x7fffffffu) > 0x7f800000u);
        r = (r & ~nan) | ((u | 0x00400000u) & 0xffff0000u & nan);
        memcpy(dst + i, &r, sizeof r);
    }
    for (; i < n; i++) {
        uint32_t u;
        memcpy(&u, src + i, 4);
        uint32_t r = (u & 0x7fffffffu) > 0x7f800000u ? ((u | 0x00400000u) & 0xffff0000u)
                                                      : ((u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u);
        memcpy(dst + i, &r, 4);
    }
}

/* e^x: x = n ln 2 + r with |r| <= ln 2 / 2 (ln 2 split in two parts so n ln 2 is exact enough),
 * e^r by its Taylor polynomial to the sixth power (relative error below 2e-7 on that range),
 * times 2^n put into the exponent field. */
INLINE vf exp_vec(vf x)
{
    const vf zero = {0};
    vu under = (vu)(x < -87.3f), over = (vu)(x > 88.7f);
    x = (vf)(((vu)x & ~under) | ((vu)(zero - 87.3f) & under));
    x = (vf)(((vu)x & ~over) | ((vu)(zero + 88.7f) & over));
    vf n = (x * 1.44269504f + 12582912.0f) - 12582912.0f; /* round to nearest, |n| < 2^22 */
    vf r = x - n * 0.693359375f + n * 2.12194440e-4f;
    vf p = zero + 1.0f / 720.0f;
    p = p * r + 1.0f / 120.0f;
    p = p * r + 1.0f / 24.0f;
    p = p * r + 1.0f / 6.0f;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    vu e = (vu)__builtin_convertvector(n, vsi) << 23;
    return (vf)(((vu)p + e) & ~under); /* e^x underflows to 0 below -87.3 */
}

static void k_exp(const float *src, float *dst, int64_t n)
{
    int64_t i = 0;
    for (; i + VL <= n; i += VL) {
        vf v;
        memcpy(&v, src + i, sizeof v);
        v = exp_vec(v);
        memcpy(dst + i, &v, sizeof v);
    }
    if (i < n) { /* the last partial vector through a padded copy */
        float tmp[VL];
        for (int j = 0; j < VL; j++) tmp[j] = i + j < n ? src[i + j] : 0.0f;
        vf v;
        memcpy(&v, tmp, sizeof v);
        v = exp_vec(v);
        memcpy(tmp, &v, sizeof v);
        for (int j = 0; i + j < n; j++) dst[i + j] = tmp[j];
    }
}

static void k_pack_bf16(const float *src, uint16_t *dst, int64_t n)
{
    int64_t i = 0;
    for (; i + VL <= n; i += VL) {
        vu u;
        memcpy(&u, src + i, sizeof u);
        vu r = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
        vu nan = (vu)((u & 0x7fffffffu) > 0x7f800000u);
        r = (r & ~nan) | ((u | 0x00400000u) & 0xffff0000u & nan);
        vh h = __builtin_convertvector(r >> 16, vh);
        memcpy(dst + i, &h, sizeof h);
    }
    for (; i < n; i++) {
        float r;
        k_round_bf16(src + i, &r, 1);
        uint32_t u;
        memcpy(&u, &r, 4);
        dst[i] = (uint16_t)(u >> 16);
    }
}

const cpu_kernels CPU_KERNELS_TABLE = {
    .name = CPU_KERNELS_NAME,
    .gemv_rows = VL >= 16 ? 2 * CPU_FEW_ROWS : CPU_FEW_ROWS,
    .gemv = k_gemv,
    .decode = k_decode,
    .round_bf16 = k_round_bf16,
    .pack_bf16 = k_pack_bf16,
    .decode_bf16 = k_decode16,
    .exp = k_exp,
};
