/* session.c - sessions: a batch's caches carried from call to call, one forward (or one
 * pipeline stage's forward) per call. Generation runs on them (generate.c). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

static nnt_status session_new_held(nnt_model *m, int batch, int capacity, nnt_session **out)
{
    if (!m || !out) return NNT_ERR_INVALID_ARGUMENT;
    *out = NULL;
    nnt_error *err = &m->rt->err;
    nnt_err_clear(err);
    if (batch < 1 || capacity < 1)
        return nnt_err_set(err, NNT_ERR_INVALID_ARGUMENT, "a session needs batch >= 1 and capacity >= 1 (got %d, %d)", batch,
                           capacity);
    const nnt_family_descriptor *f = m->family->family;
    if (!f->cache_new || !f->cache_free)
        return nnt_err_set(err, NNT_ERR_UNSUPPORTED, "family %s keeps no generation state (no cache_new)", f->header.name);
    nnt_session *s = calloc(1, sizeof *s);
    if (!s) return nnt_err_set(err, NNT_ERR_OUT_OF_MEMORY, "no memory");
    s->m = m;
    s->batch = batch;
    s->capacity = capacity;
    s->mask_hist = calloc((size_t)batch * (size_t)capacity, sizeof *s->mask_hist);
    s->count = calloc((size_t)batch, sizeof *s->count);
    if (!s->mask_hist || !s->count) {
        nnt_session_free(s);
        return nnt_err_set(err, NNT_ERR_OUT_OF_MEMORY, "no memory for a session of %d x %d tokens", batch, capacity);
    }
    nnt_status st = f->cache_new(m->impl, batch, capacity, &s->cache, err);
    if (st != NNT_OK) {
        s->cache = NULL;
        nnt_session_free(s);
        return st;
    }
    *out = s;
    return NNT_OK;
}

nnt_status nnt_session_new(nnt_model *m, int batch, int capacity, nnt_session **out)
{
    NNT_GUARDED((m ? m->rt : NULL), "nnt_session_new", session_new_held(m, batch, capacity, out));
}

static void session_free_held(nnt_session *s)
{
    if (!s) return;
    if (s->cache) s->m->family->family->cache_free(s->m->impl, s->cache);
    free(s->mask_hist);
    free(s->count);
    free(s);
}

void nnt_session_free(nnt_session *s)
{
    NNT_GUARDED_VOID((s ? s->m->rt : NULL), "nnt_session_free", session_free_held(s));
}

int nnt_session_length(const nnt_session *s)
{
    return s ? s->len : 0;
}

static nnt_status session_forward_held(nnt_session *s, nnt_trace *t, const int32_t *ids, const int32_t *mask, int seq)
{
    if (!s) return NNT_ERR_INVALID_ARGUMENT;
    nnt_model *m = s->m;
    nnt_err_clear(&m->rt->err);
    if (t && nnt_trace_model(t) != m)
        return nnt_err_set(&m->rt->err, NNT_ERR_INVALID_ARGUMENT, "the trace belongs to another model");
    return nnt_model_forward(m, t, s, ids, mask, s->batch, seq, NULL, &m->rt->err);
}

nnt_status nnt_session_forward(nnt_session *s, nnt_trace *t, const int32_t *ids, const int32_t *mask, int seq)
{
    NNT_GUARDED((s ? s->m->rt : NULL), "nnt_session_forward", session_forward_held(s, t, ids, mask, seq));
}

static nnt_status session_forward_stage_held(nnt_session *s, nnt_trace *t, const int32_t *ids, const int32_t *mask,
                                             int seq, int first_layer, int end_layer, const float *hidden_in,
                                             float *hidden_out)
{
    if (!s) return NNT_ERR_INVALID_ARGUMENT;
    nnt_model *m = s->m;
    nnt_err_clear(&m->rt->err);
    if (t && nnt_trace_model(t) != m)
        return nnt_err_set(&m->rt->err, NNT_ERR_INVALID_ARGUMENT, "the trace belongs to another model");
    nnt_stage_call sc = {first_layer, end_layer, hidden_in, hidden_out, 0};
    return nnt_model_forward(m, t, s, ids, mask, s->batch, seq, &sc, &m->rt->err);
}

nnt_status nnt_session_forward_stage(nnt_session *s, nnt_trace *t, const int32_t *ids, const int32_t *mask, int seq,
                                     int first_layer, int end_layer, const float *hidden_in, float *hidden_out)
{
    NNT_GUARDED((s ? s->m->rt : NULL), "nnt_session_forward_stage",
                session_forward_stage_held(s, t, ids, mask, seq, first_layer, end_layer, hidden_in, hidden_out));
}
