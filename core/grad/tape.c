/* tape.c - a gradient tape's life: making one over a backend (its recording table filled by
 * tape_ops.c), handing out that table, freeing the record, the kept inputs and the gradient
 * memory. */
#include <stdlib.h>

#include "grad/tape.h"

nnt_status nnt_tape_new(const nnt_backend_ops *be, void *be_ctx, nnt_tape **out, nnt_error *err)
{
    *out = NULL;
    nnt_tape *tp = calloc(1, sizeof *tp);
    if (!tp) return nnt_err_set(err, NNT_ERR_OUT_OF_MEMORY, "no memory for a gradient tape");
    tp->be = be;
    tp->be_ctx = be_ctx;
    tp->recording = 1;
    nnt_tape_ops_init(tp);
    *out = tp;
    return NNT_OK;
}

void nnt_tape_free(nnt_tape *tp)
{
    if (!tp) return;
    for (int i = 0; i < tp->n; i++) nnt_tape_entry_clear(tp, &tp->e[i]);
    free(tp->e);
    nnt_tape_regions_free(tp);
    free(tp);
}

void nnt_tape_record(nnt_tape *tp, int on)
{
    if (on) {
        for (int i = 0; i < tp->n; i++) nnt_tape_entry_clear(tp, &tp->e[i]);
        tp->n = 0;
        tp->kept_bytes = 0;
    }
    tp->recording = on != 0;
    /* a recorded forward hands whole key/value tensors to the ops (their backward reads them
     * whole); otherwise the family may attend over its cache in place where the backend can */
    uint64_t pass = NNT_STRUCT_HAS(tp->be, nnt_backend_ops, features) ? tp->be->features & NNT_FEATURE_KEY_COUNT : 0;
    tp->ops.features = on ? 0 : pass;
}

int nnt_tape_recording(const nnt_tape *tp)
{
    return tp && tp->recording;
}

void nnt_tape_clear(nnt_tape *tp)
{
    nnt_tape_record(tp, 1);
    tp->recording = 0;
}

const nnt_backend_ops *nnt_tape_ops(const nnt_tape *tp)
{
    return &tp->ops;
}

void nnt_tape_set_unfused(nnt_tape *tp, int unfused)
{
    tp->unfused = unfused != 0;
}

void *nnt_tape_ctx(nnt_tape *tp)
{
    return tp;
}

