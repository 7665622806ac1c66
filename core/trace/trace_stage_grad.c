/* trace_stage_grad.c - a gradient trace run as pipeline stages, one per rank: each rank's two
 * passes over its stage. Forward, in rank order: the stage runs unrecorded, makes its saves and
 * hands its output stream on (the last rank skips it: its backward's recorded forward does the
 * same work). Backward, in reverse rank order: the stage is run again on the tape from the same
 * input stream (nnt_trace_stage_backward), the gradient of its output stream handed back by the
 * next rank seeded there (the last rank seeds the metric instead), and the gradient of its input
 * stream handed to the rank before; kept whole or block by block (recomputation) as the memory
 * bound decides for the stage's own blocks. The pipeline (core/methods/pipeline.c) moves the streams. */
#include "trace_internal.h"

/* The stage's ends and buffers, as nnt_trace_stage_backward and a stage's forward need them. */
static nnt_status check_ends(nnt_model *m, int first, int end, const float *hidden_in, const void *out_side)
{
    int L = m->info.num_layers;
    if (first < 0 || end <= first || end > L || (first > 0) != (hidden_in != NULL) || (end < L) != (out_side != NULL))
        return nnt_err_set(&m->rt->err, NNT_ERR_INVALID_ARGUMENT,
                           "gradient stage [%d, %d) of %d blocks: the input stream is given exactly when the stage "
                           "starts after block 0, the output side exactly when it ends before the last block",
                           first, end, L);
    return NNT_OK;
}

nnt_status nnt_trace_grad_stage_forward(nnt_trace *t, const int32_t *ids, const int32_t *mask, int batch, int seq,
                                        int first, int end, const float *hidden_in, float *hidden_out, int check_only)
{
    if (!t || !ids || batch <= 0 || seq <= 0) return NNT_ERR_INVALID_ARGUMENT;
    nnt_model *m = nnt_trace_model(t);
    nnt_error *err = &m->rt->err;
    nnt_err_clear(err);
    nnt_status st = check_ends(m, first, end, hidden_in, hidden_out);
    if (st == NNT_OK) st = nnt_trace_grad_check(t, batch, seq);
    trace_grad_mode mode;
    if (st == NNT_OK) st = nnt_trace_grad_choose(t, batch, seq, end - first, &mode); /* refused before running */
    if (st != NNT_OK) return st;
    int last = end == m->info.num_layers;
    if (last && !check_only) return NNT_OK; /* the backward's recorded forward makes this stage's saves */
    nnt_stage_call sc = {first, end, hidden_in, hidden_out, check_only};
    t->grad.unrecorded_pass = 1; /* a gradient trace runs off the tape here */
    t->grad.keep_results = 0;
    st = nnt_model_forward(m, t, NULL, ids, mask, batch, seq, &sc, err);
    t->grad.unrecorded_pass = 0;
    return st;
}

nnt_status nnt_trace_grad_stage_backward(nnt_trace *t, const int32_t *ids, const int32_t *mask, int batch, int seq,
                                         int first, int end, const float *hidden_in, const float *d_hidden_out,
                                         float *d_hidden_in)
{
    if (!t || !ids || batch <= 0 || seq <= 0) return NNT_ERR_INVALID_ARGUMENT;
    nnt_model *m = nnt_trace_model(t);
    nnt_err_clear(&m->rt->err);
    nnt_status st = check_ends(m, first, end, hidden_in, d_hidden_out);
    if (st != NNT_OK) return st;
    int last = end == m->info.num_layers;
    trace_grad_mode mode = TRACE_GRAD_KEEP;
    if ((st = nnt_trace_grad_choose(t, batch, seq, end - first, &mode)) != NNT_OK) return st;
    if (mode == TRACE_GRAD_RECOMPUTE) /* the stage block by block, as one process does */
        return nnt_trace_recompute_stage(t, ids, mask, batch, seq, first, end, hidden_in, d_hidden_out,
                                         first > 0 ? d_hidden_in : NULL, !last);
    /* a stage before the last made its saves in its forward: keep them, make none again */
    t->grad.keep_results = !last;
    t->grad.saves_off = !last;
    size_t kept = 0;
    st = nnt_trace_stage_backward(t, ids, mask, batch, seq, first, end, hidden_in, d_hidden_out,
                                  first > 0 ? d_hidden_in : NULL, &kept);
    t->grad.keep_results = 0;
    t->grad.saves_off = 0;
    t->grad.used = TRACE_GRAD_KEEP;
    t->grad.peak_kept_bytes = kept;
    t->grad.streams_bytes = 0;
    return st;
}
