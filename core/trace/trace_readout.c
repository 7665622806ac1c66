/* trace_readout.c - the readout only where it is read: the sequence positions a trace's requests
 * read lm_head_output and logits at, handed to the family as nnt_forward_args.logits_positions
 * (trace_readout_rows.c maps saves onto the rows computed). */
#include <stdlib.h>
#include <string.h>

#include "trace/trace_internal.h"

/* Marks in need[seq] the positions request r of cell c reads; 0 when it reads every position. A
 * chunk of a longer prompt (w->total > 0) resolves the slice on the whole prompt and marks the
 * positions inside the chunk. */
static int request_positions(const request *r, const cell *c, const trace_window *w, int seq, uint8_t *need)
{
    if (r->kind != REQ_SAVE || !r->n_slice || c->ndim != 3 || c->shape[1] != seq) return 0;
    int64_t shape[NNT_MAX_DIMS];
    memcpy(shape, c->shape, sizeof shape);
    if (r->n_rows) shape[0] = r->n_rows;
    if (w->total) shape[1] = w->total;
    axis_sel ax[NNT_MAX_DIMS];
    nnt_error scratch = {0}; /* a slice that does not resolve is reported by the save itself */
    if (nnt_trace_slice_resolve(r, "logits", 3, shape, NULL, ax, &scratch) != NNT_OK) return 0;
    int64_t first;
    if (w->total) nnt_trace_window_select(w, &ax[1], &ax[1], &first);
    for (int64_t i = 0; i < ax[1].count; i++) need[ax[1].start + i * ax[1].step] = 1;
    return 1;
}

/* Marks in need[seq] the positions metric m reads in each row of the call (mask [batch, seq] or
 * NULL): a row's p-th real token (left padding first), or p from its end; 0 for the loss, which
 * reads every position. The positions no row has are left for the metric to report. */
static int metric_positions(const trace_metric *m, int batch, int seq, const int32_t *mask, uint8_t *need)
{
    if (m->kind != TM_LOGIT_DIFF && m->kind != TM_PROB && m->kind != TM_LOGPROB) return 0;
    int last = -1, n = m->n_positions ? m->n_positions : 1;
    const int *pos = m->n_positions ? m->positions : &last;
    for (int b = 0; b < batch; b++) {
        int len = 0;
        for (int s = 0; s < seq; s++) len += !mask || mask[(int64_t)b * seq + s];
        for (int k = 0; k < n; k++) {
            int s = pos[k] >= 0 ? seq - len + pos[k] : seq + pos[k];
            if (s >= seq - len && s < seq) need[s] = 1;
        }
    }
    return 1;
}

nnt_status nnt_trace_readout_positions(nnt_trace *t, int batch, int seq, const int32_t *mask, int32_t **out, int *n,
                                       nnt_error *err)
{
    *out = NULL;
    *n = 0;
    uint8_t *need = calloc((size_t)seq, 1);
    if (!need) return nnt_err_set(err, NNT_ERR_OUT_OF_MEMORY, "no memory");
    int every = 0;
    static const nnt_value_id readout[2] = {NNT_VALUE_LOGITS, NNT_VALUE_LM_HEAD_OUTPUT};
    for (int s = 0; t && s < 2 && !every; s++) {
        const cell *c = nnt_trace_cell(t, -1, readout[s]);
        for (int i = 0; c && i < c->n && !every; i++) {
            const request *r = &t->reqs[c->ids[i]];
            every = r->kind == REQ_COTANGENT && r->metric ? !metric_positions(&t->metric, batch, seq, mask, need)
                                                          : !request_positions(r, c, &t->window, seq, need);
        }
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
