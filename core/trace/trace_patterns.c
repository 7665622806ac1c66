/* trace_patterns.c - the bound on an attention pattern a request reads: a value laid out over
 * queries and keys ([batch num_heads query key]) takes T^2 memory on a long prompt. A save holds
 * its slice (the family kit hands the pattern over a block of queries at a time, trace_parts.c);
 * an edit, a gradient or a kept copy holds the whole pattern. Past [attention] pattern_mb the
 * request is refused before the forward, naming its bytes and the key that raises the bound. */
#include <string.h>

#include "trace/trace_internal.h"

/* 1 when axes ("[a b c]") hold the words "query" and "key". */
static int over_queries_and_keys(const char *axes)
{
    int q = 0, k = 0;
    for (const char *w = axes ? axes + (axes[0] == '[') : ""; *w && *w != ']';) {
        size_t len = strcspn(w, " ]");
        q |= len == 5 && strncmp(w, "query", 5) == 0;
        k |= len == 3 && strncmp(w, "key", 3) == 0;
        w += len;
        while (*w == ' ') w++;
    }
    return q && k;
}

nnt_status nnt_trace_pattern_check(const nnt_trace *t, const request *r, int layer, const nnt_value_info *vi,
                                   nnt_error *err)
{
    if (!over_queries_and_keys(vi->axes)) return NNT_OK;
    const nnt_ini *ini = t->m->rt->ini;
    uint64_t bound = ini && ini->attention_pattern_bytes ? ini->attention_pattern_bytes : TRACE_PATTERN_DEFAULT_BYTES;
    uint64_t bytes = nnt_dtype_size(vi->dtype);
    axis_sel ax[NNT_MAX_DIMS];
    nnt_error scratch = {0};
    /* a save: the entries its slice keeps (a slice outside the value is reported at the save) */
    int sliced = r->kind == REQ_SAVE && !r->n_rows &&
                 nnt_trace_slice_resolve(r, r->text, vi->ndim, vi->shape, NULL, ax, &scratch) == NNT_OK;
    for (int d = 0; d < vi->ndim; d++) bytes *= (uint64_t)(sliced ? ax[d].count : vi->shape[d]);
    if (bytes <= bound) return NNT_OK;
    char path[160], dims[96];
    nnt_path_format(t->m, r->path.slot, layer, path, sizeof path);
    nnt_dims_str(vi->ndim, vi->shape, dims, sizeof dims);
    return nnt_err_set(err, NNT_ERR_OUT_OF_MEMORY,
                       "'%s' asks for %s, a pattern of %s %s in this call: %llu bytes (%.3f GB) held at once (%s), "
                       "over the %llu bytes of [attention] pattern_mb (%s); raise pattern_mb in %s, save a slice "
                       "of it or trace fewer tokens",
                       r->text, path, nnt_dtype_name(vi->dtype), dims, (unsigned long long)bytes, (double)bytes / 1e9,
                       sliced ? "the saved entries" : "an edit, a gradient or a kept copy holds the whole pattern",
                       (unsigned long long)bound,
                       ini && ini->attention_pattern_bytes ? "as set" : "its default, 4096 MiB",
                       t->m->rt->config_path ? t->m->rt->config_path : "the INI");
}
