/* trace_readout.c - the readout only where it is read: the sequence positions a trace's requests
 * read lm_head_output and logits at (handed to the family as nnt_forward_args.logits_positions),
 * and the saves of a readout the family computed at those positions only. */
#include <stdlib.h>
#include <string.h>

#include "trace/trace_internal.h"

/* Marks in need[seq] the positions request r of cell c reads; 0 when it reads every position. */
static int request_positions(const request *r, const cell *c, int seq, uint8_t *need)
{
    if (r->kind != REQ_SAVE || !r->n_slice || c->ndim != 3 || c->shape[1] != seq) return 0;
    int64_t shape[NNT_MAX_DIMS];
    memcpy(shape, c->shape, sizeof shape);
    if (r->n_rows) shape[0] = r->n_rows;
    axis_sel ax[NNT_MAX_DIMS];
    nnt_error scratch = {0}; /* a slice that does not resolve is reported by the save itself */
    if (nnt_trace_slice_resolve(r, "logits", 3, shape, NULL, ax, &scratch) != NNT_OK) return 0;
    for (int64_t i = 0; i < ax[1].count; i++) need[ax[1].start + i * ax[1].step] = 1;
    return 1;
}

nnt_status nnt_trace_readout_positions(nnt_trace *t, int seq, int32_t **out, int *n, nnt_error *err)
{
    *out = NULL;
    *n = 0;
    if (t && nnt_trace_wants_grad(t)) return NNT_OK; /* the gradient tape follows the whole readout */
    uint8_t *need = calloc((size_t)seq, 1);
    if (!need) return nnt_err_set(err, NNT_ERR_OUT_OF_MEMORY, "no memory");
    int every = 0;
    static const nnt_value_id readout[2] = {NNT_VALUE_LOGITS, NNT_VALUE_LM_HEAD_OUTPUT};
    for (int s = 0; t && s < 2 && !every; s++) {
        const cell *c = nnt_trace_cell(t, -1, readout[s]);
        for (int i = 0; c && i < c->n && !every; i++) every = !request_positions(&t->reqs[c->ids[i]], c, seq, need);
    }
    const cell *probs = t ? nnt_trace_cell(t, -1, NNT_VALUE_NEXT_TOKEN_PROBS) : NULL;
    if (probs && probs->n > 0) need[seq - 1] = 1; /* next_token_probs: the last position */
    int count = 0;
    for (int p = 0; p < seq; p++) count += need[p];
    if (count == 0) need[seq - 1] = count = 1; /* nothing reads it: the last position, cheaply */
    if (!every && count < seq) {
        *out = malloc((size_t)count * sizeof **out);
        if (!*out) {
            free(need);
            return nnt_err_set(err, NNT_ERR_OUT_OF_MEMORY, "no memory");
        }
        for (int p = 0; p < seq; p++)
            if (need[p]) (*out)[(*n)++] = p;
    }
    free(need);
    return NNT_OK;
}

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
