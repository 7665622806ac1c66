/* natives.c - a loaded model's native module values: the family's list read at load (the
 * input and output of the modules of its tree, nnt_native_info), and which entry a value id
 * past the standard ones names. */
#include <string.h>

#include "internal.h"

nnt_status nnt_model_read_natives(nnt_model *m, nnt_error *err)
{
    m->n_natives = 0;
    nnt_status (*native)(const void *, int, nnt_native_info *) = m->family->family->native;
    for (int i = 0; native; i++) {
        nnt_native_info ni = {.struct_size = sizeof ni, .alias = -1};
        nnt_status st = native(m->impl, i, &ni);
        if (st == NNT_ERR_NOT_FOUND) break;
        const char *bad = st != NNT_OK ? "the call failed"
                          : i >= NNT_NATIVE_MAX ? "more entries than NNT_NATIVE_MAX"
                          : !ni.module || !ni.module[0] || !ni.standard || !ni.standard[0] ? "no module path"
                          : ni.io != 0 && ni.io != 1 ? "io is neither 0 (input) nor 1 (output)"
                          : ni.alias < -1 || ni.alias >= (int)NNT_VALUE_NATIVE + NNT_NATIVE_MAX ? "its alias is no value id"
                          : ni.alias >= 0 && ni.alias < NNT_VALUE_COUNT &&
                                  (nnt_value_module((nnt_value_id)ni.alias) != NNT_MODULE_MODEL) != !!ni.block
                              ? "its alias belongs to another host (a block's value for a model module, or the reverse)"
                          : ni.alias < 0 && !ni.axes ? "a value of its own without axes"
                                                     : NULL;
        if (bad)
            return nnt_err_set(err, NNT_ERR_PLUGIN, "family %s: native value %d%s%s: %s", m->family->family->header.name, i,
                               st == NNT_OK && ni.module ? " of " : "", st == NNT_OK && ni.module ? ni.module : "", bad);
        m->natives[m->n_natives++] = ni;
    }
    /* an alias of another entry: an entry of the list with a value of its own, of the same host */
    for (int i = 0; i < m->n_natives; i++) {
        int j = m->natives[i].alias - (int)NNT_VALUE_NATIVE;
        if (m->natives[i].alias < (int)NNT_VALUE_NATIVE) continue;
        if (j >= m->n_natives || m->natives[j].alias >= 0 || m->natives[j].block != m->natives[i].block)
            return nnt_err_set(err, NNT_ERR_PLUGIN, "family %s: native value %d of %s: its alias is no value of its own "
                               "of a module of the same host", m->family->family->header.name, i, m->natives[i].module);
    }
    return NNT_OK;
}

const nnt_native_info *nnt_model_native(const nnt_model *m, nnt_value_id slot)
{
    int i = (int)slot - (int)NNT_VALUE_NATIVE;
    return m && i >= 0 && i < m->n_natives ? &m->natives[i] : NULL;
}

int nnt_slot_in_block(const nnt_model *m, nnt_value_id slot)
{
    const nnt_native_info *ni = nnt_model_native(m, slot);
    if (ni) return ni->block;
    return nnt_value_module(slot) != NNT_MODULE_MODEL;
}
