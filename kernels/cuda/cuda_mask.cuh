/* cuda_mask.cuh - an nnt_attn_mask on the device: its host arrays staged in one piece, and the
 * visibility rule of nnt_attn_mask for one (row, query, key) entry, shared by the attention
 * kernels of the forward (cuda_attention.cu, cuda_attention_fused.cu) and the backward
 * (cuda_backward_attention.cu). */
#ifndef NNT_CUDA_MASK_CUH
#define NNT_CUDA_MASK_CUH

#include "cuda_internal.h"

/* Device copies of an nnt_attn_mask's arrays (NULL where the mask has none; all NULL with causal
 * 0 and window 0 for no mask). */
typedef struct mask_dev {
    const int32_t *q_pos, *k_pos;
    const uint8_t *key_valid, *query_valid, *key_no_window, *allow;
    int causal, window;
} mask_dev;

/* Whether key j of row b is visible to query t (T queries, S keys per row): nnt_attn_mask's rules. */
__device__ __forceinline__ int mask_visible(const mask_dev &m, int64_t b, int64_t t, int64_t j, int64_t T, int64_t S)
{
    if (m.query_valid && !m.query_valid[b * T + t]) return 0;
    if (m.key_valid && !m.key_valid[b * S + j]) return 0;
    int32_t qp = m.q_pos ? m.q_pos[b * T + t] : (int32_t)t;
    int32_t kp = m.k_pos ? m.k_pos[b * S + j] : (int32_t)j;
    if (m.causal && kp > qp) return 0;
    if (m.window > 0 && qp - kp >= m.window && !(m.key_no_window && m.key_no_window[j])) return 0;
    if (m.allow && !m.allow[(b * T + t) * S + j]) return 0;
    return 1;
}

/* Stages mask's host arrays for B rows of T queries and S keys into *m (a NULL mask: nothing
 * hidden) with one cuda_stage_begin that also reserves `extra` bytes, which the caller then
 * fills with cuda_stage_put (each piece counted with cuda_stage_size). Defined in
 * cuda_attention.cu. Errors: the staging's (NNT_ERR_OUT_OF_MEMORY, NNT_ERR_BACKEND). */
nnt_status cuda_stage_mask(cuda_ctx *c, const nnt_attn_mask *mask, int64_t B, int64_t T, int64_t S, size_t extra,
                           mask_dev *m, nnt_error *err);

#endif
