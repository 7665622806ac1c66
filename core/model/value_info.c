/* value_info.c - what a loaded model says of each standard value: the family's description
 * with the registry's defaults, the values the core serves itself (the call's inputs, the
 * next-token distribution), and which values a pipeline stage holds. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

/* Values the core serves itself on every family: the call's inputs and the derived
 * next-token distribution. Returns 1 when handled. */
static int core_slot_info(const nnt_model *m, nnt_value_id slot, const nnt_call_dims *d,
                          nnt_value_info *out)
{
    int64_t b = d ? d->batch : 0, s = d ? d->seq : 0;
    switch (slot) {
    case NNT_VALUE_INPUT_IDS:
    case NNT_VALUE_ATTENTION_MASK:
        out->dtype = NNT_I32;
        out->ndim = 2;
        out->shape[0] = b;
        out->shape[1] = s;
        break;
    case NNT_VALUE_INPUT_SIZE:
        out->dtype = NNT_I64;
        out->ndim = 1;
        out->shape[0] = 2;
        break;
    case NNT_VALUE_NEXT_TOKEN_PROBS:
        out->dtype = NNT_F32;
        out->ndim = 2;
        out->shape[0] = b;
        out->shape[1] = m->info.vocab_size;
        break;
    default: return 0;
    }
    out->served = 1;
    out->writable = 0;
    if (!d) out->ndim = 0;
    return 1;
}

nnt_status nnt_model_slot_info(const nnt_model *m, int layer, nnt_value_id slot,
                               const nnt_call_dims *dims, nnt_value_info *out, nnt_error *err)
{
    memset(out, 0, sizeof *out);
    const nnt_native_info *ni = nnt_model_native(m, slot);
    if ((int)slot >= (int)NNT_VALUE_NATIVE && !ni)
        return nnt_err_set(err, NNT_ERR_INTERNAL, "value id %d is past the model's native values", (int)slot);
    const char *name = ni ? ni->standard : nnt_value_name(slot);
    if (nnt_slot_in_block(m, slot) != (layer >= 0))
        return nnt_err_set(err, NNT_ERR_INTERNAL, "slot %s asked with layer %d", name, layer);
    if (!(!ni && nnt_value_module(slot) == NNT_MODULE_MODEL && core_slot_info(m, slot, dims, out))) {
        nnt_status st = m->family->family->value_info(m->impl, layer, slot, dims, out);
        if (st != NNT_OK)
            return nnt_err_set(err, st, "family %s could not describe %s on block %d", nnt_model_family(m),
                               name, layer);
    }
    if (!out->layout) out->layout = ni ? "Activations" : nnt_value_layout(slot);
    if (!out->axes) out->axes = ni ? ni->axes : nnt_value_axes(slot);
    if (!out->served && !out->reason[0]) snprintf(out->reason, sizeof out->reason, "not provided by this family");
    return NNT_OK;
}

int nnt_stage_holds(int L, int first, int end, nnt_value_id slot, int layer)
{
    if (layer >= 0) return layer >= first && layer < end;
    switch (slot) {
    case NNT_VALUE_TOKEN_EMBEDDINGS:
    case NNT_VALUE_INPUT_IDS:
    case NNT_VALUE_ATTENTION_MASK:
    case NNT_VALUE_INPUT_SIZE: return first == 0;
    default: return end == L; /* the readout: final norm, lm_head, logits and what derives from them */
    }
}
