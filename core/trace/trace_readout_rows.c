/* trace_readout_rows.c - saves of a readout (lm_head_output, logits) that the family computed at
 * the call's nnt_forward_args.logits_positions only: recognising such a value and picking the
 * positions a save's slice names out of its rows. */
#include <string.h>

#include "trace/trace_internal.h"

int nnt_trace_readout_narrowed(const nnt_run *run, nnt_value_id slot, const nnt_tensor *value)
{
    if (slot != NNT_VALUE_LOGITS && slot != NNT_VALUE_LM_HEAD_OUTPUT) return 0;
    const nnt_forward_args *a = run->args;
    if (!a || !a->logits_positions || a->n_logits_positions <= 0 || a->n_logits_positions >= run->dims.seq) return 0;
    return value && value->ndim == 3 && value->shape[1] == a->n_logits_positions;
}

nnt_status nnt_trace_readout_pick(const nnt_run *run, const nnt_tensor *src, const axis_sel *sel, nnt_tensor *dst)
{
    const nnt_forward_args *a = run->args;
    const int32_t *pos = a->logits_positions;
    int64_t B = src->shape[0], K = src->shape[1], V = src->shape[2], C = sel->count;
    int64_t shape[3] = {B, C, V};
    if (nnt_tensor_alloc(dst, src->dtype, 3, shape) != NNT_OK)
        return nnt_err_set(run->err, NNT_ERR_OUT_OF_MEMORY, "no memory to save a slice of the logits");
    size_t row = (size_t)V * nnt_dtype_size(src->dtype);
    for (int64_t i = 0; i < C; i++) {
        int64_t p = sel->start + i * sel->step, lo = 0, hi = K; /* binary search: pos is ascending */
        while (lo < hi) {
            int64_t mid = (lo + hi) / 2;
            if (pos[mid] < p) lo = mid + 1;
            else hi = mid;
        }
        if (lo == K || pos[lo] != p) {
            nnt_tensor_free(dst);
            return nnt_err_set(run->err, NNT_ERR_INTERNAL,
                               "the readout was computed at %lld positions of %d, not at position %lld a save reads",
                               (long long)K, run->dims.seq, (long long)p);
        }
        for (int64_t b = 0; b < B; b++)
            memcpy((char *)dst->data + (size_t)(b * C + i) * row, (const char *)src->data + (size_t)(b * K + lo) * row, row);
    }
    return NNT_OK;
}
