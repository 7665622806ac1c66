/* cuda_internal.h - the cuda backend's context, its error helpers and check macros, the staging
 * of host-memory arguments, the bfloat16 flags of a tensor, and the op functions each cuda_*.cu
 * file defines.
 *
 * Execution model: every op enqueues its work on the context's one stream and returns without
 * waiting; `download` (and the few ops that must read a device result to report an error)
 * synchronise. cuBLAS runs on the same stream, so the order of ops is the order of the work. */
#ifndef NNT_CUDA_INTERNAL_H
#define NNT_CUDA_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include "nnt/nnt_backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Page-locked staging slots used in turn; a slot is rewritten only after its previous copy. */
#define CUDA_PIN_SLOTS 16

typedef struct cuda_ctx {
    int device;
    int sync_each_op;       /* option sync = 1: wait after every op so a fault names its op */
    int smem_optin;         /* the device's largest dynamic shared memory per block (bytes) */
    cudaStream_t stream;
    cublasHandle_t blas;
    /* host-memory arguments (masks, positions, row lists, ...) of one op: packed into a
     * page-locked slot of a ring, copied with one cudaMemcpyAsync into `stage` on the device */
    unsigned char *stage;
    size_t stage_cap, stage_used;
    struct cuda_pin {
        unsigned char *host; /* page-locked */
        size_t cap;
        cudaEvent_t copied;  /* recorded after the slot's last copy */
        int pending;
    } pins[CUDA_PIN_SLOTS];
    int pin_next;
    struct cuda_pin *pin; /* the slot of the op being staged */
    /* device temporaries of one op (decoded weight tiles, rounded activations, copies through
     * a buffer, dot products) */
    void *scratch;
    size_t scratch_cap;
    /* option tile_bytes: the most bytes one decoded weight tile of `linear` takes in the scratch
     * (at least one weight row is decoded at a time, whatever the bound) */
    size_t tile_bytes;
    /* a few ints kernels write to report a bad input (e.g. an id out of range) */
    int *flag;
    /* what prepare_weight uploaded, freed by release_weight or destroy: per weight its data and
     * (encoded weights) scale-grid allocations and their bytes; the total is weight_bytes */
    struct cuda_weight {
        void *data;
        void *scale; /* NULL for unscaled dtypes */
        size_t bytes; /* data bytes plus scale-grid bytes, as uploaded */
    } *weights;
    int n_weights, cap_weights;
    size_t weight_total;
} cuda_ctx;

/* A 2-D weight [rows, cols] on the device as the kernels read it, in its stored encoding (F32,
 * BF16, F16, or F8_E4M3 / F4_E2M1 with a block-scale grid). Row r of an encoded weight takes its
 * scales from grid row (r + row0) / block_rows, column c from grid column c / block_cols; the grid
 * has grid_cols columns. For unscaled dtypes scale is NULL and the block fields are unused. */
typedef struct cuda_wview {
    const void *data;
    nnt_dtype dtype;
    int64_t rows, cols;
    const void *scale;
    nnt_dtype scale_dtype; /* F32, BF16, F16 or F8_E8M0 */
    int64_t block_rows, block_cols, row0, grid_cols;
} cuda_wview;

/* ---- errors ---- */
nnt_status cuda_error(nnt_error *err, nnt_status st, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* A failed CUDA runtime call: NNT_ERR_OUT_OF_MEMORY for cudaErrorMemoryAllocation, else
 * NNT_ERR_BACKEND; the message names the call, the file and the line. Clears the (non-sticky)
 * last error so a later check does not report it again. */
nnt_status cuda_rt_error(nnt_error *err, cudaError_t e, const char *call, const char *file, int line);
nnt_status cuda_blas_error(nnt_error *err, cublasStatus_t s, const char *call, const char *file, int line);

/* Checks a CUDA runtime call in a function that has `nnt_error *err` and returns nnt_status. */
#define CUDA_CHECK(call)                                                                                               \
    do {                                                                                                               \
        cudaError_t e_ = (call);                                                                                       \
        if (e_ != cudaSuccess) return cuda_rt_error(err, e_, #call, __FILE__, __LINE__);                               \
    } while (0)

#define CUBLAS_CHECK(call)                                                                                             \
    do {                                                                                                               \
        cublasStatus_t s_ = (call);                                                                                    \
        if (s_ != CUBLAS_STATUS_SUCCESS) return cuda_blas_error(err, s_, #call, __FILE__, __LINE__);                   \
    } while (0)

/* After a kernel launch: a bad launch configuration or a missing kernel image. */
#define CUDA_LAUNCHED() CUDA_CHECK(cudaGetLastError())

/* Tensor argument check: present, dtype (NNT_DTYPE_INVALID: any), rank (0: any). */
nnt_status cuda_check(const char *op, const char *arg, const nnt_tensor *t, nnt_dtype dt, int ndim, nnt_error *err);
/* Bytes of one element of the dtypes ops handle (F32, I32, I64, F16, BF16, U8/BOOL); 0 otherwise. */
size_t cuda_dtype_size(nnt_dtype dt);
/* A plain float weight argument (norm gains, convolution kernels, ...): present and F32, BF16 or
 * F16; NNT_ERR_UNSUPPORTED naming op and arg otherwise. */
nnt_status cuda_check_float_weight(const char *op, const char *arg, const nnt_tensor *t, nnt_error *err);
/* Fills *out from a 2-D weight (F32, BF16, F16, or F8_E4M3 / F4_E2M1 with block scales: scale
 * set, block sizes positive, 0 <= block_row0 < block_rows, scale dtype F32, BF16, F16 or
 * F8_E8M0, FP4 with even column counts). NNT_ERR_UNSUPPORTED naming op and arg when the weight
 * is not readable. */
nnt_status cuda_weight_view(const char *op, const char *arg, const nnt_tensor *t, cuda_wview *out, nnt_error *err);

/* ---- bfloat16 values ----
 * An output flagged NNT_TENSOR_BF16_VALUES receives results rounded to bfloat16 with the
 * intermediate roundings nnt_backend.h lists per op; NNT_TENSOR_BF16_ONCE (rms_norm's gain
 * product, rope) and NNT_TENSOR_BF16_SHIFTED (softmax) choose the style. The ops reproduce the
 * cpu backend's roundings step for step (kernels/cpu). */
static inline int cuda_bf16(const nnt_tensor *t)
{
    return t && (t->flags & NNT_TENSOR_BF16_VALUES) != 0;
}

static inline int cuda_bf16_once(const nnt_tensor *t)
{
    return cuda_bf16(t) && (t->flags & NNT_TENSOR_BF16_ONCE) != 0;
}

static inline int cuda_bf16_shifted(const nnt_tensor *t)
{
    return cuda_bf16(t) && (t->flags & NNT_TENSOR_BF16_SHIFTED) != 0;
}

/* ---- memory ---- */
/* cudaMalloc with an NNT_ERR_OUT_OF_MEMORY naming the byte count and the purpose on failure. */
nnt_status cuda_malloc(cuda_ctx *c, size_t bytes, void **ptr, const char *what, nnt_error *err);
/* Makes the scratch at least `bytes` long (its content is not kept when it grows). */
nnt_status cuda_scratch(cuda_ctx *c, size_t bytes, void **ptr, nnt_error *err);

/* Host arguments: an op first reserves the total it needs (each piece rounded by
 * cuda_stage_size), then adds the pieces with cuda_stage_put, which returns their device
 * addresses. Each piece is copied (memcpy) into the op's page-locked slot at once - the caller
 * may free its array as soon as the op returns - and from there to the device buffer `stage` by
 * cudaMemcpyAsync on the stream, which orders it after the previous op's kernels (that may still
 * read `stage`) and before this op's. No wait on the host unless a slot comes round again while
 * its copy of CUDA_PIN_SLOTS ops ago is still queued. */
size_t cuda_stage_size(size_t bytes);
nnt_status cuda_stage_begin(cuda_ctx *c, size_t total, nnt_error *err);
nnt_status cuda_stage_put(cuda_ctx *c, const void *host, size_t bytes, void **dev, nnt_error *err);
/* Copies host memory to any device address: small copies through a staging slot (no wait),
 * large ones directly with a wait for the copy. Either way the caller may reuse `host` on return
 * (cudaMemcpyAsync alone does not promise that for pageable memory). */
nnt_status cuda_copy_in(cuda_ctx *c, void *dev, const void *host, size_t bytes, nnt_error *err);

/* Every op ends with this: reports a launch error under the op's name and, with sync = 1,
 * waits for the op's work so an execution fault is reported by the op that caused it. */
nnt_status cuda_done(cuda_ctx *c, const char *op, nnt_error *err);
/* Waits for the stream, then reads c->flag[0..3] into out. */
nnt_status cuda_read_flag(cuda_ctx *c, int out[4], nnt_error *err);
/* Clears c->flag on the stream. */
nnt_status cuda_clear_flag(cuda_ctx *c, nnt_error *err);

/* ---- cuda_convert.cu ---- */
/* Decodes rows [r0, r0 + nr) of w into dst [nr, w->cols] (dense), each element decoded and
 * multiplied by its block's scale: float32 when to_bf16 is 0, else bfloat16 (nearest even) as
 * uint16_t. Enqueued on the stream; dst is device memory the caller owns. */
nnt_status cuda_decode_rows(cuda_ctx *c, const cuda_wview *w, int64_t r0, int64_t nr, void *dst, int to_bf16,
                            nnt_error *err);
/* dst[i] = src[i] rounded to the nearest bfloat16 (ties to even, NaN kept quiet), n elements:
 * as float32 when to_bf16 is 0 (dst may be src), else as bfloat16 bits (uint16_t). */
nnt_status cuda_round_bf16(cuda_ctx *c, const float *src, void *dst, int64_t n, int to_bf16, nnt_error *err);
/* Rounds an F32 tensor's elements to bfloat16 in place when it is flagged NNT_TENSOR_BF16_VALUES
 * (the ops whose only rounding is that of their result, computed by cuBLAS); else nothing. */
nnt_status cuda_round_result(cuda_ctx *c, nnt_tensor *t, nnt_error *err);
/* Checks that this build carries kernels the device can run; the message names the device's
 * architecture and the ones built. */
nnt_status cuda_probe_kernels(cuda_ctx *c, nnt_error *err);

/* ---- the ops ---- */
/* cuda_linear.cu */
nnt_status cuda_linear(void *ctx, const nnt_tensor *x, const nnt_tensor *w, nnt_tensor *y, nnt_error *err);
/* cuda_elementwise.cu */
nnt_status cuda_rms_norm(void *ctx, const nnt_tensor *x, const nnt_tensor *w, float eps, nnt_tensor *y,
                         nnt_error *err);
nnt_status cuda_embedding(void *ctx, const nnt_tensor *table, const nnt_tensor *ids, nnt_tensor *y, nnt_error *err);
nnt_status cuda_add(void *ctx, const nnt_tensor *a, const nnt_tensor *b, nnt_tensor *y, nnt_error *err);
nnt_status cuda_swap12(void *ctx, const nnt_tensor *x, nnt_tensor *y, nnt_error *err);
nnt_status cuda_copy(void *ctx, const nnt_tensor *src, nnt_tensor *dst, nnt_error *err);
nnt_status cuda_fill(void *ctx, nnt_tensor *t, float value, nnt_error *err);
nnt_status cuda_scale(void *ctx, const nnt_tensor *x, float factor, nnt_tensor *y, nnt_error *err);
nnt_status cuda_swiglu(void *ctx, const nnt_tensor *gate, const nnt_tensor *up, float limit, nnt_tensor *act,
                       nnt_tensor *out, nnt_error *err);
/* cuda_attention.cu */
nnt_status cuda_rope(void *ctx, nnt_tensor *x, const int32_t *pos, const float *inv_freq, int rot_start, int rot_dim,
                     nnt_rope_style style, float mscale, nnt_error *err);
nnt_status cuda_attn_scores(void *ctx, const nnt_tensor *q, const nnt_tensor *k, float scale,
                            const nnt_attn_mask *mask, nnt_tensor *s, nnt_error *err);
nnt_status cuda_softmax(void *ctx, const nnt_tensor *s, const float *sinks, nnt_tensor *p, nnt_error *err);
nnt_status cuda_attn_mix(void *ctx, const nnt_tensor *p, const nnt_tensor *v, nnt_tensor *o, nnt_error *err);
/* cuda_attention_fused.cu */
nnt_status cuda_attn_fused(void *ctx, const nnt_tensor *q, const nnt_tensor *k, const nnt_tensor *v, float scale,
                           const nnt_attn_mask *mask, const float *sinks, nnt_tensor *o, int *done, nnt_error *err);
/* cuda_moe.cu */
nnt_status cuda_route(void *ctx, const nnt_tensor *logits, const nnt_tensor *bias, const nnt_route_params *p,
                      nnt_tensor *idx, nnt_tensor *w, nnt_error *err);
nnt_status cuda_gather_rows(void *ctx, const nnt_tensor *src, const int32_t *rows, int n, nnt_tensor *dst,
                            nnt_error *err);
nnt_status cuda_scatter_add_rows(void *ctx, const nnt_tensor *src, const int32_t *rows, const float *scale, int n,
                                 nnt_tensor *dst, nnt_error *err);
nnt_status cuda_scatter_rows(void *ctx, const nnt_tensor *src, const int32_t *rows, const float *scale, int n,
                             nnt_tensor *dst, nnt_error *err);
nnt_status cuda_sum_axis1(void *ctx, const nnt_tensor *x, nnt_tensor *y, nnt_error *err);
nnt_status cuda_scale_rows(void *ctx, const nnt_tensor *x, const nnt_tensor *w, const int32_t *idx, int n,
                           nnt_tensor *y, nnt_error *err);
/* cuda_recurrent.cu */
nnt_status cuda_conv1d_causal(void *ctx, const nnt_tensor *x, const nnt_tensor *w, const nnt_tensor *state_in,
                              int act, nnt_tensor *y, nnt_tensor *state_out, nnt_error *err);
nnt_status cuda_kda_gate(void *ctx, const nnt_tensor *a, const nnt_tensor *dt_bias, const nnt_tensor *a_log,
                         nnt_tensor *g, nnt_error *err);
nnt_status cuda_sigmoid(void *ctx, const nnt_tensor *x, nnt_tensor *y, nnt_error *err);
nnt_status cuda_delta_rule(void *ctx, const nnt_tensor *q, const nnt_tensor *k, const nnt_tensor *v,
                           const nnt_tensor *g, const nnt_tensor *beta, const uint8_t *token_valid,
                           const nnt_tensor *state_in, int l2norm, float scale, nnt_tensor *o,
                           nnt_tensor *state_out, nnt_tensor *states, nnt_error *err);
nnt_status cuda_rms_norm_gated(void *ctx, const nnt_tensor *x, const nnt_tensor *w, const nnt_tensor *gate,
                               float eps, nnt_tensor *y, nnt_error *err);
nnt_status cuda_copy_cols(void *ctx, const nnt_tensor *src, int64_t src_col, nnt_tensor *dst, int64_t dst_col,
                          int64_t ncols, nnt_error *err);
nnt_status cuda_zero_rows(void *ctx, nnt_tensor *x, const uint8_t *row_valid, nnt_error *err);
/* cuda_hyper.cu */
nnt_status cuda_hyper_connection(void *ctx, const nnt_tensor *x, const nnt_tensor *fn, const nnt_tensor *base,
                                 const nnt_tensor *scale, float rms_eps, float hc_eps, int iters, nnt_tensor *post,
                                 nnt_tensor *comb, nnt_tensor *collapsed, nnt_error *err);
nnt_status cuda_hyper_mix(void *ctx, const nnt_tensor *x, const nnt_tensor *a, const nnt_tensor *post,
                          const nnt_tensor *comb, nnt_tensor *out, nnt_error *err);
nnt_status cuda_hyper_head(void *ctx, const nnt_tensor *x, const nnt_tensor *fn, const nnt_tensor *base,
                           const nnt_tensor *scale, float rms_eps, float hc_eps, nnt_tensor *y, nnt_error *err);
nnt_status cuda_compress(void *ctx, const nnt_tensor *kv, const nnt_tensor *gate, const nnt_tensor *ape, int rate,
                         int overlap, const int32_t *first, const int32_t *count, nnt_tensor *out, nnt_error *err);
nnt_status cuda_indexer_scores(void *ctx, const nnt_tensor *q, const nnt_tensor *k, const nnt_tensor *w, float scale,
                               nnt_tensor *out, nnt_error *err);

/* cuda_backward.cu (the backward section of nnt_backend.h, and accumulate) */
nnt_status cuda_linear_backward(void *ctx, const nnt_tensor *dy, const nnt_tensor *w, nnt_tensor *dx, nnt_error *err);
nnt_status cuda_rms_norm_backward(void *ctx, const nnt_tensor *x, const nnt_tensor *w, float eps, const nnt_tensor *dy,
                                  nnt_tensor *dx, nnt_error *err);
nnt_status cuda_accumulate(void *ctx, const nnt_tensor *x, float factor, nnt_tensor *y, nnt_error *err);
nnt_status cuda_swap12_backward(void *ctx, const nnt_tensor *dy, nnt_tensor *dx, nnt_error *err);
nnt_status cuda_swiglu_backward(void *ctx, const nnt_tensor *gate, const nnt_tensor *up, float limit,
                                const nnt_tensor *act, const nnt_tensor *dout, nnt_tensor *dgate, nnt_tensor *dup,
                                nnt_tensor *dact, nnt_error *err);
nnt_status cuda_copy_cols_backward(void *ctx, const nnt_tensor *ddst, int64_t dst_col, nnt_tensor *dsrc,
                                   int64_t src_col, int64_t ncols, nnt_error *err);
/* cuda_backward_attention.cu */
nnt_status cuda_rope_backward(void *ctx, nnt_tensor *dx, const int32_t *pos, const float *inv_freq, int rot_start,
                              int rot_dim, nnt_rope_style style, float mscale, nnt_error *err);
nnt_status cuda_attn_scores_backward(void *ctx, const nnt_tensor *q, const nnt_tensor *k, float scale,
                                     const nnt_attn_mask *mask, const nnt_tensor *ds, nnt_tensor *dq, nnt_tensor *dk,
                                     nnt_error *err);
nnt_status cuda_softmax_backward(void *ctx, const nnt_tensor *p, const float *sinks, const nnt_tensor *dp,
                                 nnt_tensor *ds, nnt_error *err);
nnt_status cuda_attn_mix_backward(void *ctx, const nnt_tensor *p, const nnt_tensor *v, const nnt_tensor *dout,
                                  nnt_tensor *dp, nnt_tensor *dv, nnt_error *err);
/* cuda_backward_moe.cu */
nnt_status cuda_route_backward(void *ctx, const nnt_tensor *logits, const nnt_tensor *bias, const nnt_route_params *p,
                               const nnt_tensor *idx, const nnt_tensor *dw, nnt_tensor *dlogits, nnt_error *err);
nnt_status cuda_gather_rows_backward(void *ctx, const nnt_tensor *ddst, const int32_t *rows, int n, nnt_tensor *dsrc,
                                     nnt_error *err);
nnt_status cuda_scatter_add_rows_backward(void *ctx, const nnt_tensor *src, const int32_t *rows, const float *scale,
                                          int n, const nnt_tensor *ddst, nnt_tensor *dsrc, nnt_tensor *dscale,
                                          nnt_error *err);
nnt_status cuda_scatter_rows_backward(void *ctx, const nnt_tensor *src, const int32_t *rows, const float *scale, int n,
                                      const nnt_tensor *ddst, nnt_tensor *dsrc, nnt_tensor *dscale, nnt_error *err);
nnt_status cuda_sum_axis1_backward(void *ctx, const nnt_tensor *dy, nnt_tensor *dx, nnt_error *err);
nnt_status cuda_scale_rows_backward(void *ctx, const nnt_tensor *x, const nnt_tensor *w, const int32_t *idx, int n,
                                    const nnt_tensor *dy, nnt_tensor *dx, nnt_tensor *dw, nnt_error *err);
/* cuda_backward_hyper.cu */
nnt_status cuda_hyper_connection_backward(void *ctx, const nnt_tensor *x, const nnt_tensor *fn, const nnt_tensor *base,
                                          const nnt_tensor *scale, float rms_eps, float hc_eps, int iters,
                                          const nnt_tensor *dpost, const nnt_tensor *dcomb,
                                          const nnt_tensor *dcollapsed, nnt_tensor *dx, nnt_error *err);
nnt_status cuda_hyper_mix_backward(void *ctx, const nnt_tensor *x, const nnt_tensor *a, const nnt_tensor *post,
                                   const nnt_tensor *comb, const nnt_tensor *dout, nnt_tensor *dx, nnt_tensor *da,
                                   nnt_tensor *dpost, nnt_tensor *dcomb, nnt_error *err);
nnt_status cuda_hyper_head_backward(void *ctx, const nnt_tensor *x, const nnt_tensor *fn, const nnt_tensor *base,
                                    const nnt_tensor *scale, float rms_eps, float hc_eps, const nnt_tensor *dy,
                                    nnt_tensor *dx, nnt_error *err);
nnt_status cuda_compress_backward(void *ctx, const nnt_tensor *kv, const nnt_tensor *gate, const nnt_tensor *ape,
                                  int rate, int overlap, const int32_t *first, const int32_t *count,
                                  const nnt_tensor *dout, nnt_tensor *dkv, nnt_tensor *dgate, nnt_error *err);
/* cuda_backward_recurrent.cu */
nnt_status cuda_conv1d_causal_backward(void *ctx, const nnt_tensor *x, const nnt_tensor *w, const nnt_tensor *state_in,
                                       int act, const nnt_tensor *dy, const nnt_tensor *dstate_out, nnt_tensor *dx,
                                       nnt_tensor *dstate_in, nnt_error *err);
nnt_status cuda_kda_gate_backward(void *ctx, const nnt_tensor *a, const nnt_tensor *dt_bias, const nnt_tensor *a_log,
                                  const nnt_tensor *dg, nnt_tensor *da, nnt_error *err);
nnt_status cuda_sigmoid_backward(void *ctx, const nnt_tensor *y, const nnt_tensor *dy, nnt_tensor *dx, nnt_error *err);
nnt_status cuda_delta_rule_backward(void *ctx, const nnt_tensor *q, const nnt_tensor *k, const nnt_tensor *v,
                                    const nnt_tensor *g, const nnt_tensor *beta, const uint8_t *token_valid,
                                    const nnt_tensor *state_in, int l2norm, float scale, const nnt_tensor *do_,
                                    const nnt_tensor *dstate_out, nnt_tensor *dstates, nnt_tensor *dq, nnt_tensor *dk,
                                    nnt_tensor *dv, nnt_tensor *dg, nnt_tensor *dbeta, nnt_tensor *dstate_in,
                                    nnt_error *err);
nnt_status cuda_rms_norm_gated_backward(void *ctx, const nnt_tensor *x, const nnt_tensor *w, const nnt_tensor *gate,
                                        float eps, const nnt_tensor *dy, nnt_tensor *dx, nnt_tensor *dgate,
                                        nnt_error *err);

#ifdef __cplusplus
}
#endif
#endif
