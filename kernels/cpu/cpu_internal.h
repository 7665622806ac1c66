/* cpu_internal.h - the cpu backend's context and the op functions each cpu_*.c file defines. */
#ifndef NNT_CPU_INTERNAL_H
#define NNT_CPU_INTERNAL_H

#include <stdarg.h>
#include <stdio.h>

#include "cpu_weights.h"
#include "nnt/nnt_backend.h"

/* The elements (or weight values) below which a loop runs on the calling thread alone: waking the
 * team and joining it costs microseconds, more than a few thousand elements' work (a decoding
 * step's rows), and a VM that took a core away makes the join wait far longer. */
#define CPU_PARALLEL_MIN 65536

/* Buffers of the many-row products (cpu_gemm.c). */
enum { CPU_BUF_PANEL, CPU_BUF_PANEL16, CPU_BUF_X16, CPU_BUF_OUT, CPU_BUF_ATTN, CPU_BUF_FUSED, CPU_BUF_COUNT };

typedef struct cpu_ctx {
    int threads;
    const cpu_kernels *k; /* the instruction set's weight kernels */
    /* scratch of one op (activation rows rounded to bfloat16) */
    float *scratch;
    size_t scratch_floats;
    /* one weight panel per thread (decoded rows for the row-streaming and OpenBLAS products) */
    float **panel;
    size_t *panel_floats;
    /* the shared panel and bfloat16 operands of the oneDNN products */
    void *buf[CPU_BUF_COUNT];
    size_t buf_bytes[CPU_BUF_COUNT];
    /* oneDNN (NULL without it): its engine and stream, and whether it multiplies bfloat16 here */
    void *dnnl_engine, *dnnl_stream;
    int dnnl_bf16;
    /* 1 when the OpenBLAS in this process is not its OpenMP build: cpu_sgemm splits the products */
    int blas_split;
} cpu_ctx;

/* Asks the OpenBLAS loaded in this process which build it is and sets its threads (cpu_blas.c):
 * the OpenMP build gets c->threads, any other one thread and c->blas_split = 1; split 0 or 1
 * (the INI's blas_split) decides instead of the build, -1 lets the build decide. */
void cpu_blas_setup(cpu_ctx *c, int split);
/* y [M, N] (rows ldy apart) = alpha op(a) op(b) + beta y, row-major float32, op(a) [M, K] and
 * op(b) [K, N] (trans_a / trans_b: the stored matrix is the transpose, as cblas_sgemm's
 * CblasTrans), on OpenBLAS; called outside a parallel region it runs on the backend's team of
 * c->threads whichever OpenBLAS build was loaded, inside one on the calling thread; on oneDNN's
 * sgemm instead where the build has oneDNN and gemm is not openblas (cpu_blas.c). No errors. */
void cpu_sgemm(const cpu_ctx *c, int trans_a, int trans_b, int64_t M, int64_t N, int64_t K, float alpha,
               const float *a, int64_t lda, const float *b, int64_t ldb, float beta, float *y, int64_t ldy);

nnt_status cpu_error(nnt_error *err, nnt_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* 1 when t holds bfloat16 values (NNT_TENSOR_BF16_VALUES): its writer rounds. */
static inline int cpu_bf16(const nnt_tensor *t)
{
    return t && (t->flags & NNT_TENSOR_BF16_VALUES);
}

/* f rounded to the nearest bfloat16 (ties to even), as float; a NaN stays NaN. */
static inline float cpu_r16(float f)
{
    uint32_t u;
    __builtin_memcpy(&u, &f, 4);
    u = (u & 0x7fffffffu) > 0x7f800000u ? ((u | 0x00400000u) & 0xffff0000u) : ((u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u);
    __builtin_memcpy(&f, &u, 4);
    return f;
}

/* 1 when key s is visible to query t of row b under mask m (NULL: all visible); T queries and S
 * keys per row. The rules are nnt_attn_mask's. */
static inline int cpu_visible(const nnt_attn_mask *m, int64_t b, int64_t t, int64_t s, int64_t T, int64_t S)
{
    if (!m) return 1;
    if (m->query_valid && !m->query_valid[b * T + t]) return 0;
    if (m->key_valid && !m->key_valid[b * S + s]) return 0;
    int32_t qp = m->q_pos ? m->q_pos[b * T + t] : (int32_t)t;
    int32_t kp = m->k_pos ? m->k_pos[b * S + s] : (int32_t)s;
    if (m->causal && kp > qp) return 0;
    if (m->window > 0 && qp - kp >= m->window && !(m->key_no_window && m->key_no_window[s])) return 0;
    if (m->allow && !m->allow[(b * T + t) * S + s]) return 0;
    return 1;
}

/* Rounds every element of t to bfloat16 when t is flagged (the ops whose rounding is only
 * that of their result). */
void cpu_round_result(cpu_ctx *c, nnt_tensor *t);
float cpu_load(const void *data, nnt_dtype dt, int64_t i);
/* Checks dtype and rank; names the op and the argument on failure. */
nnt_status cpu_check(const char *op, const char *arg, const nnt_tensor *t, nnt_dtype dt, int ndim,
                     nnt_error *err);
nnt_status cpu_scratch(cpu_ctx *c, size_t floats, float **out, nnt_error *err);
/* Makes thread t's weight panel at least `floats` long. */
nnt_status cpu_panel(cpu_ctx *c, int t, size_t floats, float **out, nnt_error *err);
/* x [n] rounded to bfloat16 numbers (nearest even) into the context's scratch, *out pointing
 * there until the next cpu_scratch call. */
nnt_status cpu_round_x(cpu_ctx *c, const float *x, int64_t n, const float **out, nnt_error *err);
/* Makes buffer `slot` (CPU_BUF_*) at least `bytes` long (its content is not kept). */
nnt_status cpu_buffer(cpu_ctx *c, int slot, size_t bytes, void **out, nnt_error *err);

/* cpu_gemm.c: y[M, N] = x[M, K] . w[N, K]^T for many rows of x (see the file); bf16: bfloat16
 * products (x and the weight values rounded here: x as oneDNN's bfloat16 operand is packed, or
 * into the scratch for the other paths; weight values unless exact). */
nnt_status cpu_gemm(cpu_ctx *c, const float *x, int64_t M, const cpu_weight *w, int bf16, float *y, nnt_error *err);
/* y[b] = x[b] . w[b]^T (wt) or x[b] . w[b] for `batch` products of x [M, K], w [N, K] or [K, N]
 * and y [M, N] (attention's per-head products) on oneDNN, in bfloat16 when bf16 (the operands
 * then hold bfloat16 values); x and y contiguous, w's products wstride floats apart (0: N K,
 * contiguous; more: a key/value cache's capacity). *done = 0 without oneDNN: the caller
 * computes it. */
nnt_status cpu_bmm(cpu_ctx *c, int bf16, int64_t batch, int64_t M, int64_t N, int64_t K, const float *x,
                   const float *w, int wt, int64_t wstride, float *y, int *done, nnt_error *err);
/* y[M, N] += x[M, K] . w[K, N] in float32 on oneDNN (the backward's products on a decoded
 * weight panel): x's rows ldx apart, w and y contiguous row-major. *done = 0 without oneDNN. */
nnt_status cpu_gemm_acc(cpu_ctx *c, int64_t M, int64_t N, int64_t K, const float *x, int64_t ldx, const float *w,
                        float *y, int *done, nnt_error *err);
/* 1 when w's decoded values are not all bfloat16 numbers (bfloat16 products round them). */
int cpu_needs_rounding(const cpu_weight *w);
/* The weight kernels for `want` (NULL or "auto": the widest this CPU runs). Errors:
 * NNT_ERR_CONFIG naming the option when the CPU or the build lacks the instruction set. */
nnt_status cpu_pick_kernels(const char *want, const cpu_kernels **out, nnt_error *err);

/* cpu_linear.c */
nnt_status cpu_linear(void *ctx, const nnt_tensor *x, const nnt_tensor *w, nnt_tensor *y, nnt_error *err);
/* cpu_elementwise.c */
nnt_status cpu_rms_norm(void *ctx, const nnt_tensor *x, const nnt_tensor *w, float eps, nnt_tensor *y,
                        nnt_error *err);
nnt_status cpu_embedding(void *ctx, const nnt_tensor *table, const nnt_tensor *ids, nnt_tensor *y,
                         nnt_error *err);
nnt_status cpu_add(void *ctx, const nnt_tensor *a, const nnt_tensor *b, nnt_tensor *y, nnt_error *err);
nnt_status cpu_swap12(void *ctx, const nnt_tensor *x, nnt_tensor *y, nnt_error *err);
nnt_status cpu_copy(void *ctx, const nnt_tensor *src, nnt_tensor *dst, nnt_error *err);
nnt_status cpu_fill(void *ctx, nnt_tensor *t, float value, nnt_error *err);
nnt_status cpu_scale(void *ctx, const nnt_tensor *x, float factor, nnt_tensor *y, nnt_error *err);
nnt_status cpu_swiglu(void *ctx, const nnt_tensor *gate, const nnt_tensor *up, float limit, nnt_tensor *act,
                      nnt_tensor *out, nnt_error *err);
/* cpu_attention.c */
nnt_status cpu_rope(void *ctx, nnt_tensor *x, const int32_t *pos, const float *inv_freq, int rot_start,
                    int rot_dim, nnt_rope_style style, float mscale, nnt_error *err);
nnt_status cpu_attn_scores(void *ctx, const nnt_tensor *q, const nnt_tensor *k, float scale,
                           const nnt_attn_mask *mask, nnt_tensor *s, nnt_error *err);
nnt_status cpu_softmax(void *ctx, const nnt_tensor *s, const float *sinks, nnt_tensor *p, nnt_error *err);
nnt_status cpu_attn_mix(void *ctx, const nnt_tensor *p, const nnt_tensor *v, nnt_tensor *o, nnt_error *err);
/* cpu_attention_fused.c */
nnt_status cpu_attn_fused(void *ctx, const nnt_tensor *q, const nnt_tensor *k, const nnt_tensor *v, float scale,
                          const nnt_attn_mask *mask, const float *sinks, nnt_tensor *o, int *done, nnt_error *err);
/* cpu_moe.c */
nnt_status cpu_route(void *ctx, const nnt_tensor *logits, const nnt_tensor *bias, const nnt_route_params *p,
                     nnt_tensor *idx, nnt_tensor *w, nnt_error *err);
nnt_status cpu_gather_rows(void *ctx, const nnt_tensor *src, const int32_t *rows, int n, nnt_tensor *dst,
                           nnt_error *err);
nnt_status cpu_scatter_add_rows(void *ctx, const nnt_tensor *src, const int32_t *rows, const float *scale,
                                int n, nnt_tensor *dst, nnt_error *err);
nnt_status cpu_scatter_rows(void *ctx, const nnt_tensor *src, const int32_t *rows, const float *scale, int n,
                            nnt_tensor *dst, nnt_error *err);
nnt_status cpu_sum_axis1(void *ctx, const nnt_tensor *x, nnt_tensor *y, nnt_error *err);
nnt_status cpu_scale_rows(void *ctx, const nnt_tensor *x, const nnt_tensor *w, const int32_t *idx, int n,
                          nnt_tensor *y, nnt_error *err);
/* The checks scale_rows and its backward share, for op `op`: t (named arg: x or dy) F32 with
 * first axis n, its row width into *H; w F32; n >= 0; idx present and each entry in
 * [0, numel(w)) (NNT_ERR_INVALID_ARGUMENT naming the place and the value). */
nnt_status cpu_scale_rows_args(const char *op, const char *arg, const nnt_tensor *t, const nnt_tensor *w,
                               const int32_t *idx, int n, int64_t *H, nnt_error *err);

/* cpu_recurrent.c */
nnt_status cpu_conv1d_causal(void *ctx, const nnt_tensor *x, const nnt_tensor *w, const nnt_tensor *state_in, int act,
                             nnt_tensor *y, nnt_tensor *state_out, nnt_error *err);
nnt_status cpu_kda_gate(void *ctx, const nnt_tensor *a, const nnt_tensor *dt_bias, const nnt_tensor *a_log,
                        nnt_tensor *g, nnt_error *err);
nnt_status cpu_sigmoid(void *ctx, const nnt_tensor *x, nnt_tensor *y, nnt_error *err);
nnt_status cpu_delta_rule(void *ctx, const nnt_tensor *q, const nnt_tensor *k, const nnt_tensor *v,
                          const nnt_tensor *g, const nnt_tensor *beta, const uint8_t *token_valid,
                          const nnt_tensor *state_in, int l2norm, float scale, nnt_tensor *o,
                          nnt_tensor *state_out, nnt_tensor *states, nnt_error *err);
nnt_status cpu_rms_norm_gated(void *ctx, const nnt_tensor *x, const nnt_tensor *w, const nnt_tensor *gate, float eps,
                              nnt_tensor *y, nnt_error *err);
nnt_status cpu_copy_cols(void *ctx, const nnt_tensor *src, int64_t src_col, nnt_tensor *dst, int64_t dst_col,
                         int64_t ncols, nnt_error *err);
nnt_status cpu_zero_rows(void *ctx, nnt_tensor *x, const uint8_t *row_valid, nnt_error *err);

/* cpu_hyper.c */
nnt_status cpu_hyper_connection(void *ctx, const nnt_tensor *x, const nnt_tensor *fn, const nnt_tensor *base,
                                const nnt_tensor *scale, float rms_eps, float hc_eps, int iters, nnt_tensor *post,
                                nnt_tensor *comb, nnt_tensor *collapsed, nnt_error *err);
nnt_status cpu_hyper_mix(void *ctx, const nnt_tensor *x, const nnt_tensor *a, const nnt_tensor *post,
                         const nnt_tensor *comb, nnt_tensor *out, nnt_error *err);
nnt_status cpu_hyper_head(void *ctx, const nnt_tensor *x, const nnt_tensor *fn, const nnt_tensor *base,
                          const nnt_tensor *scale, float rms_eps, float hc_eps, nnt_tensor *y, nnt_error *err);
nnt_status cpu_compress(void *ctx, const nnt_tensor *kv, const nnt_tensor *gate, const nnt_tensor *ape, int rate,
                        int overlap, const int32_t *first, const int32_t *count, nnt_tensor *out, nnt_error *err);
nnt_status cpu_indexer_scores(void *ctx, const nnt_tensor *q, const nnt_tensor *k, const nnt_tensor *w, float scale,
                              nnt_tensor *out, nnt_error *err);

/* cpu_backward.c: the backward ops of the dense and feed-forward kernels */
nnt_status cpu_linear_backward(void *ctx, const nnt_tensor *dy, const nnt_tensor *w, nnt_tensor *dx, nnt_error *err);
nnt_status cpu_rms_norm_backward(void *ctx, const nnt_tensor *x, const nnt_tensor *w, float eps, const nnt_tensor *dy,
                                 nnt_tensor *dx, nnt_error *err);
nnt_status cpu_accumulate(void *ctx, const nnt_tensor *x, float factor, nnt_tensor *y, nnt_error *err);
nnt_status cpu_swap12_backward(void *ctx, const nnt_tensor *dy, nnt_tensor *dx, nnt_error *err);
nnt_status cpu_swiglu_backward(void *ctx, const nnt_tensor *gate, const nnt_tensor *up, float limit,
                               const nnt_tensor *act, const nnt_tensor *dout, nnt_tensor *dgate, nnt_tensor *dup,
                               nnt_tensor *dact, nnt_error *err);
nnt_status cpu_copy_cols_backward(void *ctx, const nnt_tensor *ddst, int64_t dst_col, nnt_tensor *dsrc,
                                  int64_t src_col, int64_t ncols, nnt_error *err);
/* cpu_backward_attention.c */
nnt_status cpu_rope_backward(void *ctx, nnt_tensor *dx, const int32_t *pos, const float *inv_freq, int rot_start,
                             int rot_dim, nnt_rope_style style, float mscale, nnt_error *err);
nnt_status cpu_attn_scores_backward(void *ctx, const nnt_tensor *q, const nnt_tensor *k, float scale,
                                    const nnt_attn_mask *mask, const nnt_tensor *ds, nnt_tensor *dq, nnt_tensor *dk,
                                    nnt_error *err);
nnt_status cpu_softmax_backward(void *ctx, const nnt_tensor *p, const float *sinks, const nnt_tensor *dp,
                                nnt_tensor *ds, nnt_error *err);
nnt_status cpu_attn_mix_backward(void *ctx, const nnt_tensor *p, const nnt_tensor *v, const nnt_tensor *dout,
                                 nnt_tensor *dp, nnt_tensor *dv, nnt_error *err);
/* cpu_backward_moe.c */
nnt_status cpu_route_backward(void *ctx, const nnt_tensor *logits, const nnt_tensor *bias, const nnt_route_params *p,
                              const nnt_tensor *idx, const nnt_tensor *dw, nnt_tensor *dlogits, nnt_error *err);
nnt_status cpu_gather_rows_backward(void *ctx, const nnt_tensor *ddst, const int32_t *rows, int n, nnt_tensor *dsrc,
                                    nnt_error *err);
nnt_status cpu_scatter_add_rows_backward(void *ctx, const nnt_tensor *src, const int32_t *rows, const float *scale,
                                         int n, const nnt_tensor *ddst, nnt_tensor *dsrc, nnt_tensor *dscale,
                                         nnt_error *err);
nnt_status cpu_scatter_rows_backward(void *ctx, const nnt_tensor *src, const int32_t *rows, const float *scale, int n,
                                     const nnt_tensor *ddst, nnt_tensor *dsrc, nnt_tensor *dscale, nnt_error *err);
nnt_status cpu_sum_axis1_backward(void *ctx, const nnt_tensor *dy, nnt_tensor *dx, nnt_error *err);
nnt_status cpu_scale_rows_backward(void *ctx, const nnt_tensor *x, const nnt_tensor *w, const int32_t *idx, int n,
                                   const nnt_tensor *dy, nnt_tensor *dx, nnt_tensor *dw, nnt_error *err);
/* cpu_backward_hyper.c: hyper-connections and compressors (DeepSeek-V4) */
nnt_status cpu_hyper_connection_backward(void *ctx, const nnt_tensor *x, const nnt_tensor *fn, const nnt_tensor *base,
                                         const nnt_tensor *scale, float rms_eps, float hc_eps, int iters,
                                         const nnt_tensor *dpost, const nnt_tensor *dcomb, const nnt_tensor *dcollapsed,
                                         nnt_tensor *dx, nnt_error *err);
nnt_status cpu_hyper_mix_backward(void *ctx, const nnt_tensor *x, const nnt_tensor *a, const nnt_tensor *post,
                                  const nnt_tensor *comb, const nnt_tensor *dout, nnt_tensor *dx, nnt_tensor *da,
                                  nnt_tensor *dpost, nnt_tensor *dcomb, nnt_error *err);
nnt_status cpu_hyper_head_backward(void *ctx, const nnt_tensor *x, const nnt_tensor *fn, const nnt_tensor *base,
                                   const nnt_tensor *scale, float rms_eps, float hc_eps, const nnt_tensor *dy,
                                   nnt_tensor *dx, nnt_error *err);
nnt_status cpu_compress_backward(void *ctx, const nnt_tensor *kv, const nnt_tensor *gate, const nnt_tensor *ape,
                                 int rate, int overlap, const int32_t *first, const int32_t *count,
                                 const nnt_tensor *dout, nnt_tensor *dkv, nnt_tensor *dgate, nnt_error *err);
/* cpu_backward_recurrent.c: the recurrent mixers (Kimi Delta Attention) */
nnt_status cpu_conv1d_causal_backward(void *ctx, const nnt_tensor *x, const nnt_tensor *w, const nnt_tensor *state_in,
                                      int act, const nnt_tensor *dy, const nnt_tensor *dstate_out, nnt_tensor *dx,
                                      nnt_tensor *dstate_in, nnt_error *err);
nnt_status cpu_kda_gate_backward(void *ctx, const nnt_tensor *a, const nnt_tensor *dt_bias, const nnt_tensor *a_log,
                                 const nnt_tensor *dg, nnt_tensor *da, nnt_error *err);
nnt_status cpu_sigmoid_backward(void *ctx, const nnt_tensor *y, const nnt_tensor *dy, nnt_tensor *dx, nnt_error *err);
nnt_status cpu_delta_rule_backward(void *ctx, const nnt_tensor *q, const nnt_tensor *k, const nnt_tensor *v,
                                   const nnt_tensor *g, const nnt_tensor *beta, const uint8_t *token_valid,
                                   const nnt_tensor *state_in, int l2norm, float scale, const nnt_tensor *do_,
                                   const nnt_tensor *dstate_out, nnt_tensor *dstates, nnt_tensor *dq, nnt_tensor *dk,
                                   nnt_tensor *dv, nnt_tensor *dg, nnt_tensor *dbeta, nnt_tensor *dstate_in,
                                   nnt_error *err);
nnt_status cpu_rms_norm_gated_backward(void *ctx, const nnt_tensor *x, const nnt_tensor *w, const nnt_tensor *gate,
                                       float eps, const nnt_tensor *dy, nnt_tensor *dx, nnt_tensor *dgate,
                                       nnt_error *err);

#endif
