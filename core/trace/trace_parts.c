/* trace_parts.c - a value handed to the trace in parts along one axis (nnt_core_api's
 * parts_wanted and emit_part): the family kit makes a long prompt's attention pattern one block of
 * queries at a time, so a save of a slice of it (`attention_probabilities[:, 3, -1]`) holds the
 * slice and one block, never the [batch, heads, T, S] whole. Only saves are served this way (an
 * edit, a gradient or a kept copy needs the whole value at once); each save's slice is resolved on
 * the whole value and every part writes its entries into place (trace_window.c). */
#include <string.h>

#include "trace/trace_internal.h"

/* The requests of c, when every one is a save parts can fill (no rows selection); else 0. */
static int saves_only(const nnt_trace *t, const cell *c)
{
    for (int i = 0; i < c->n; i++) {
        const request *r = &t->reqs[c->ids[i]];
        if (r->kind != REQ_SAVE || r->n_rows) return 0;
    }
    return c->n > 0;
}

int nnt_trace_parts_wanted(const nnt_run *run, nnt_value_id slot, int layer, int axis, int64_t extent, int64_t *lo,
                           int64_t *hi)
{
    nnt_trace *t = run ? run->trace : NULL;
    /* a chunk of a prompt, or a recomputed block whose saves the first pass made: emitted whole */
    if (!t || t->window.total || t->grad.saves_off) return 0;
    const cell *c = nnt_trace_cell(t, layer, slot);
    if (!c || !saves_only(t, c) || axis < 0 || axis >= c->ndim || c->shape[axis] != extent) return 0;
    int64_t a = extent, b = 0;
    for (int i = 0; i < c->n; i++) {
        const request *r = &t->reqs[c->ids[i]];
        axis_sel ax[NNT_MAX_DIMS];
        nnt_error scratch = {0};
        /* a slice that does not fit is reported by the whole emission */
        if (nnt_trace_slice_resolve(r, r->text, c->ndim, c->shape, NULL, ax, &scratch) != NNT_OK) return 0;
        if (ax[axis].count == 0) continue;
        int64_t first = ax[axis].start, last = ax[axis].start + (ax[axis].count - 1) * ax[axis].step;
        if (first < a) a = first;
        if (last + 1 > b) b = last + 1;
    }
    *lo = a < b ? a : 0;
    *hi = a < b ? b : 0;
    return 1;
}

/* The open result of request req's save of (slot, layer) in this call, or NULL. */
static result *open_result(nnt_trace *t, int req, nnt_value_id slot, int layer)
{
    for (int i = t->n_results - 1; i >= 0; i--) {
        result *e = &t->results[i];
        if (e->occurrence_of_request == req && e->slot == slot && e->layer == layer && e->part_open) return e;
    }
    return NULL;
}

nnt_status nnt_trace_emit_part(nnt_run *run, nnt_value_id slot, int layer, const nnt_tensor *part, int axis,
                               int64_t first, int64_t extent)
{
    nnt_trace *t = run->trace;
    cell *c = t ? nnt_trace_cell(t, layer, slot) : NULL;
    if (!c || c->n == 0) return NNT_OK;
    char path[160];
    nnt_path_format(run->model, slot, layer, path, sizeof path);
    const char *fam = nnt_model_family(run->model);
    if (!saves_only(t, c) || t->window.total || t->grad.saves_off)
        return nnt_err_set(run->err, NNT_ERR_PLUGIN,
                           "family '%s' emitted %s in parts, which parts_wanted did not accept for this call (a "
                           "request other than a save reads it)", fam, path);
    int ok = part && part->dtype == c->dtype && part->ndim == c->ndim && axis >= 0 && axis < c->ndim &&
             c->shape[axis] == extent && first >= 0 && first + part->shape[axis] <= extent;
    for (int d = 0; ok && d < c->ndim; d++) ok = d == axis || part->shape[d] == c->shape[d];
    if (!ok) {
        char want[96], got[96];
        nnt_dims_str(c->ndim, c->shape, want, sizeof want);
        if (part)
            nnt_shape_str(part, got, sizeof got);
        else
            snprintf(got, sizeof got, "None");
        return nnt_err_set(run->err, NNT_ERR_PLUGIN,
                           "family '%s' emitted a part %s of %s at entries [%lld, +%lld) of axis %d (extent %lld); its "
                           "value_info declares %s %s for this call",
                           fam, got, path, (long long)first, part ? (long long)part->shape[axis < 0 || axis >= part->ndim ? 0 : axis] : 0LL,
                           axis, (long long)extent, nnt_dtype_name(c->dtype), want);
    }
    c->emitted++;
    nnt_tensor host = {0};
    const nnt_tensor *src = part;
    nnt_status st = NNT_OK;
    if (part->device) {
        st = nnt_trace_host_copy(run, part, &host);
        src = &host;
    }
    trace_window w = {first, part->shape[axis], extent};
    for (int i = 0; i < c->n && st == NNT_OK; i++) {
        int req = c->ids[i];
        result *res = open_result(t, req, slot, layer);
        if (res && first < res->part_end) res->part_open = 0, res = NULL; /* a new emission of the value */
        if (!res) {
            st = nnt_trace_open_result(run, req, slot, layer, &res);
            if (st != NNT_OK) break;
            res->part_open = 1;
            res->chunk_seen = 1;
        }
        run->current_request = req;
        st = nnt_trace_window_save(run, &t->reqs[req], res->path, slot, axis, &w, src, &res->t);
        res->part_end = first + w.n;
    }
    nnt_tensor_free(&host);
    return st;
}
