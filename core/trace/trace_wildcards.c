/* trace_wildcards.c - the save requests (nnt_trace_save): one value path, or a wildcard over value
 * names: "*" (every value the model serves), "layers.N.*"
 * (every value of a block, or of every block with "layers.*.*") and "layers.N.HOST.*" (one host
 * module's), each expanded into one save per served value, in the registry's order, model values
 * first. A slice after the wildcard applies to each match whose axes it fits: an item that
 * restricts axis 0 needs a batch axis there, axis 1 a seq axis, a later axis only that the value
 * has it; the other matches are left out (e.g. "*[:, -1]" keeps the last position of every
 * [batch seq ...] value and leaves out the patterns, the input size and next_token_probs). */
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "trace/trace_internal.h"

/* The name of axis i in axes ("[a b c]") into word; 0 when there is no such axis. */
static int axis_name(const char *axes, int i, char *word, size_t n)
{
    const char *w = axes ? axes + (axes[0] == '[') : "";
    for (int k = 0; *w && *w != ']'; k++) {
        size_t len = strcspn(w, " ]");
        if (k == i) {
            snprintf(word, n, "%.*s", (int)len, w);
            return 1;
        }
        w += len;
        while (*w == ' ') w++;
    }
    return 0;
}

static int axis_count(const char *axes)
{
    char w[64];
    int k = 0;
    while (axis_name(axes, k, w, sizeof w)) k++;
    return k;
}

/* 1 when slice text "[...]" (NULL: none) fits a value whose axes are `axes` (rule above). */
static int slice_fits(const char *slice, const char *axes)
{
    if (!slice) return 1;
    int rank = axis_count(axes), n_items = 0, ellipsis = -1;
    char items[NNT_MAX_DIMS + 2][32];
    for (const char *p = slice + 1; *p && *p != ']';) {
        size_t len = strcspn(p, ",]"), k = 0;
        char buf[32];
        for (size_t j = 0; j < len && k + 1 < sizeof buf; j++)
            if (p[j] != ' ') buf[k++] = p[j];
        buf[k] = '\0';
        if (n_items == NNT_MAX_DIMS + 2) return 0;
        memcpy(items[n_items], buf, sizeof buf);
        if (strcmp(buf, "...") == 0) ellipsis = n_items;
        n_items++;
        p += len + (p[len] == ',');
    }
    if (rank < n_items - (ellipsis >= 0)) return 0;
    int lead = ellipsis >= 0 ? ellipsis : n_items;
    for (int i = 0; i < lead; i++) {
        const char *it = items[i];
        int whole = strcmp(it, ":") == 0 || strcmp(it, "::") == 0 || strcmp(it, "::1") == 0;
        if (whole || i >= 2) continue;
        char name[64];
        if (!axis_name(axes, i, name, sizeof name) || strcmp(name, i == 0 ? "batch" : "seq") != 0) return 0;
    }
    return 1;
}

/* 1 when slot belongs to host module `host`: a standard value of that host, or a native value
 * of a module under it (its path's first name, in the standard spelling, is the host's). */
static int in_host(const nnt_model *m, nnt_value_id slot, int host)
{
    const nnt_native_info *ni = nnt_model_native(m, slot);
    if (!ni) return (int)nnt_value_module(slot) == host;
    const char *name = nnt_module_name((nnt_module)host);
    size_t n = strlen(name);
    return strncmp(ni->standard, name, n) == 0 && (ni->standard[n] == '.' || ni->standard[n] == '\0');
}

/* The axes of slot on the first block of [lo, hi] that serves it (layer -1: the model's);
 * NULL when none does. */
static const char *served_axes(nnt_trace *t, nnt_value_id slot, int lo, int hi)
{
    for (int l = lo; l <= hi; l++) {
        nnt_value_info vi;
        nnt_error scratch = {0};
        if (nnt_model_slot_info(t->m, l, slot, NULL, &vi, &scratch) != NNT_OK || !vi.served) continue;
        return vi.axes;
    }
    return NULL;
}

nnt_status nnt_trace_save_wildcard(nnt_trace *t, const char *text, const nnt_path_wild *w, const char *slice)
{
    nnt_error *err = &t->m->rt->err;
    int L = t->m->info.num_layers, before = t->n_reqs, added = 0;
    nnt_status st = NNT_OK;
    for (int pass = 0; pass < 2 && st == NNT_OK; pass++) { /* the model's values, then the blocks' */
        if (pass == 0 && !w->all) continue;
        int layer = pass == 0 ? -1 : w->all ? NNT_LAYER_ALL : w->layer;
        int lo = layer == NNT_LAYER_ALL ? 0 : layer, hi = layer == NNT_LAYER_ALL ? L - 1 : layer;
        /* the standard values, then the model's native values of their own (nnt_native_info) */
        for (int s = 0; s < (int)NNT_VALUE_NATIVE + t->m->n_natives && st == NNT_OK; s++) {
            const nnt_native_info *ni = nnt_model_native(t->m, (nnt_value_id)s);
            if (ni && ni->alias >= 0) continue; /* a standard value under another name */
            if ((pass == 0) != !nnt_slot_in_block(t->m, (nnt_value_id)s)) continue;
            if (pass == 1 && w->host >= 0 && !in_host(t->m, (nnt_value_id)s, w->host)) continue;
            const char *axes = served_axes(t, (nnt_value_id)s, lo, hi);
            if (!axes || !slice_fits(slice, axes)) continue;
            char path[224];
            nnt_path_format(t->m, (nnt_value_id)s, layer, path, 160);
            if (slice) snprintf(path + strlen(path), sizeof path - strlen(path), "%s", slice);
            st = nnt_trace_save_kind(t, REQ_SAVE, path);
            added += st == NNT_OK;
        }
    }
    if (st == NNT_OK && !added)
        st = nnt_err_set(err, NNT_ERR_NOT_SERVED, "'%s%s': the %s family serves no value %s", text, slice ? slice : "",
                         nnt_model_family(t->m),
                         slice ? "there whose axes fit the slice (it may restrict a batch axis first and a seq axis "
                                 "second)"
                               : "there");
    if (st != NNT_OK) nnt_trace_drop_since(t, before);
    return st;
}

static nnt_status trace_save_held(nnt_trace *t, const char *path)
{
    if (!t || !path) return NNT_ERR_INVALID_ARGUMENT;
    int claimed = 0; /* a path of a method attached to a value (an SAE's outputs) */
    nnt_status hs = nnt_trace_hook_save(t, path, &claimed);
    if (claimed) return hs;
    const char *open = strrchr(path, '[');
    size_t n = strlen(path);
    /* a trailing slice (after the name: a block index "layers[1]" comes before it) */
    if (!(n >= 3 && path[n - 1] == ']' && open && open > path && open[-1] != '.' && open[-1] != '[')) open = NULL;
    char base[256];
    if ((size_t)(open ? open - path : (ptrdiff_t)n) >= sizeof base) return nnt_trace_save_kind(t, REQ_SAVE, path);
    snprintf(base, sizeof base, "%.*s", (int)(open ? open - path : (ptrdiff_t)n), path);
    nnt_path_wild w;
    int wild = nnt_path_wildcard(t->m, base, &w, &t->m->rt->err);
    if (wild < 0) return t->m->rt->err.status;
    return wild ? nnt_trace_save_wildcard(t, base, &w, open) : nnt_trace_save_kind(t, REQ_SAVE, path);
}

nnt_status nnt_trace_save(nnt_trace *t, const char *path)
{
    NNT_GUARDED(nnt_guard_trace_rt(t), "nnt_trace_save", trace_save_held(t, path));
}

nnt_status nnt_trace_save_every_step(nnt_trace *t, const char *path)
{
    int from = t->next_from, to = t->next_to;
    t->next_from = 0;
    t->next_to = -1;
    nnt_status st = nnt_trace_save(t, path);
    t->next_from = from;
    t->next_to = to;
    return st;
}
