/* trace_run.c - running a trace: a whole forward (in chunks for a long prompt), one pipeline
 * stage, or the checks of a stage alone (the C API's nnt_trace_run, nnt_trace_run_stage,
 * nnt_trace_check_stage). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "trace_internal.h"

static nnt_status trace_run_held(nnt_trace *t, const int32_t *ids, const int32_t *mask, int batch, int seq)
{
    if (!t) return NNT_ERR_INVALID_ARGUMENT;
    nnt_model *m = nnt_trace_model(t);
    nnt_err_clear(&m->rt->err);
    if (nnt_trace_wants_grad(t)) return nnt_trace_run_grad(t, ids, mask, batch, seq);
    int chunked = 0; /* a long prompt, in chunks when the trace allows (trace_chunks.c) */
    nnt_status st = nnt_trace_run_chunked(t, ids, mask, batch, seq, &chunked);
    if (st != NNT_OK || chunked) return st;
    t->prefill_calls = 1;
    return nnt_model_forward(m, t, NULL, ids, mask, batch, seq, NULL, &m->rt->err);
}

nnt_status nnt_trace_run(nnt_trace *t, const int32_t *ids, const int32_t *mask, int batch, int seq)
{
    NNT_GUARDED(nnt_guard_trace_rt(t), "nnt_trace_run", trace_run_held(t, ids, mask, batch, seq));
}

static nnt_status trace_run_stage_held(nnt_trace *t, const int32_t *ids, const int32_t *mask, int batch, int seq,
                                       int first_layer, int end_layer, const float *hidden_in, float *hidden_out)
{
    if (!t) return NNT_ERR_INVALID_ARGUMENT;
    nnt_model *m = nnt_trace_model(t);
    nnt_err_clear(&m->rt->err);
    nnt_stage_call sc = {first_layer, end_layer, hidden_in, hidden_out, 0};
    return nnt_model_forward(m, t, NULL, ids, mask, batch, seq, &sc, &m->rt->err);
}

nnt_status nnt_trace_run_stage(nnt_trace *t, const int32_t *ids, const int32_t *mask, int batch, int seq,
                               int first_layer, int end_layer, const float *hidden_in, float *hidden_out)
{
    NNT_GUARDED(nnt_guard_trace_rt(t), "nnt_trace_run_stage",
                trace_run_stage_held(t, ids, mask, batch, seq, first_layer, end_layer, hidden_in, hidden_out));
}

static nnt_status trace_check_stage_held(nnt_trace *t, const int32_t *ids, const int32_t *mask, int batch, int seq,
                                         int first_layer, int end_layer, const float *hidden_in, float *hidden_out)
{
    if (!t) return NNT_ERR_INVALID_ARGUMENT;
    nnt_model *m = nnt_trace_model(t);
    nnt_err_clear(&m->rt->err);
    nnt_stage_call sc = {first_layer, end_layer, hidden_in, hidden_out, 1};
    return nnt_model_forward(m, t, NULL, ids, mask, batch, seq, &sc, &m->rt->err);
}

nnt_status nnt_trace_check_stage(nnt_trace *t, const int32_t *ids, const int32_t *mask, int batch, int seq,
                                 int first_layer, int end_layer, const float *hidden_in, float *hidden_out)
{
    NNT_GUARDED(nnt_guard_trace_rt(t), "nnt_trace_check_stage",
                trace_check_stage_held(t, ids, mask, batch, seq, first_layer, end_layer, hidden_in, hidden_out));
}
