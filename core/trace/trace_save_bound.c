/* trace_save_bound.c - the bound on what one call's saves hold: the bytes of every saved value
 * (a save's slice, its rows, the whole prompt's length when the prompt runs in chunks) added up
 * before the forward and, past [trace] save_mb, the call refused naming the total, the largest
 * saves and the key that raises the bound. A save of everything ("*") on a long prompt is the
 * case it is for: nnt states the bytes instead of running out of memory halfway. */
#include <stdio.h>
#include <string.h>

#include "trace/trace_internal.h"

uint64_t nnt_trace_save_bytes(nnt_dtype dtype, int ndim, const int64_t *shape, const axis_sel *ax)
{
    uint64_t b = nnt_dtype_size(dtype);
    for (int d = 0; d < ndim; d++) b *= (uint64_t)(ax ? ax[d].count : shape[d]);
    return b;
}

nnt_status nnt_trace_save_bound(const nnt_trace *t, uint64_t total, const char *largest, uint64_t largest_bytes,
                                int n_saves, nnt_error *err)
{
    const nnt_ini *ini = t->m->rt->ini;
    uint64_t bound = ini && ini->trace_save_bytes ? ini->trace_save_bytes : TRACE_SAVE_DEFAULT_BYTES;
    if (total <= bound) return NNT_OK;
    return nnt_err_set(err, NNT_ERR_OUT_OF_MEMORY,
                       "the %d saved values of this call (batch %d, seq %d) would hold %llu bytes (%.2f MiB), over the "
                       "%llu bytes of [trace] save_mb (%s); the largest is %s (%llu bytes). Raise save_mb in %s, save "
                       "fewer values or a slice of them (e.g. '*[:, -1]'), or trace fewer tokens",
                       n_saves, t->dims.batch, t->dims.seq, (unsigned long long)total, (double)total / 1048576.0,
                       (unsigned long long)bound, ini && ini->trace_save_bytes ? "as set" : "its default, 8192 MiB",
                       largest, (unsigned long long)largest_bytes,
                       t->m->rt->config_path ? t->m->rt->config_path : "the INI");
}
