/* trace.c - traces: save and edit requests on standard values, checked before the forward,
 * applied when the family emits each value, and the saved results. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "trace_internal.h"

nnt_model *nnt_trace_model(const nnt_trace *t)
{
    return t->m;
}

static nnt_error *rt_err(nnt_trace *t)
{
    return &t->m->rt->err;
}

static nnt_status trace_new_held(nnt_model *m, nnt_trace **out)
{
    if (!m || !out) return NNT_ERR_INVALID_ARGUMENT;
    nnt_trace *t = calloc(1, sizeof *t);
    if (!t) return nnt_err_set(&m->rt->err, NNT_ERR_OUT_OF_MEMORY, "no memory for a trace");
    t->m = m;
    t->next_to = -1;
    t->grad.stream_in_layer = t->grad.stream_out_layer = -1;
    *out = t;
    return NNT_OK;
}

nnt_runtime *nnt_guard_trace_rt(const nnt_trace *t)
{
    return t && t->m ? t->m->rt : NULL;
}

nnt_status nnt_trace_new(nnt_model *m, nnt_trace **out)
{
    NNT_GUARDED((m ? m->rt : NULL), "nnt_trace_new", trace_new_held(m, out));
}

static nnt_status trace_steps_held(nnt_trace *t, int from, int to)
{
    if (!t) return NNT_ERR_INVALID_ARGUMENT;
    if (from < 0 || (to >= 0 && to < from))
        return nnt_err_set(&t->m->rt->err, NNT_ERR_INVALID_ARGUMENT,
                           "steps %d..%d: need 0 <= from and from <= to (to < 0: every later step)", from, to);
    t->next_from = from;
    t->next_to = to;
    return NNT_OK;
}

nnt_status nnt_trace_steps(nnt_trace *t, int from, int to)
{
    NNT_GUARDED(nnt_guard_trace_rt(t), "nnt_trace_steps", trace_steps_held(t, from, to));
}

static void clear_results(nnt_trace *t)
{
    for (int i = 0; i < t->n_results; i++) {
        free(t->results[i].path);
        nnt_tensor_free(&t->results[i].t);
    }
    t->n_results = 0;
    for (int i = 0; i < t->n_keeps; i++) t->keeps[i].valid = 0;
    nnt_tensor_free(&t->metric_logits);
    free(t->metric_rows);
    t->metric_rows = NULL;
    t->n_metric_rows = 0;
}

void nnt_trace_metric_clear(nnt_trace *t)
{
    free(t->metric.positions);
    free(t->metric.text);
    nnt_tensor_free(&t->metric_logits);
    free(t->metric_rows);
    t->metric_rows = NULL;
    t->n_metric_rows = 0;
    memset(&t->metric, 0, sizeof t->metric);
}

static void free_cells(nnt_trace *t)
{
    for (int i = 0; i < t->n_cells; i++) free(t->cells[i].ids);
    free(t->cells);
    t->cells = NULL;
    t->n_cells = 0;
}

static void trace_free_held(nnt_trace *t)
{
    if (!t) return;
    clear_results(t);
    free(t->results);
    for (int i = 0; i < t->n_keeps; i++) nnt_tensor_free(&t->keeps[i].t);
    free(t->keeps);
    for (int i = 0; i < t->n_reqs; i++) {
        if (t->reqs[i].kind == REQ_HOOK && t->reqs[i].hook_ops->release) t->reqs[i].hook_ops->release(t->reqs[i].user);
        free(t->reqs[i].text);
        free(t->reqs[i].positions);
        free(t->reqs[i].rows);
        free(t->reqs[i].label);
        nnt_tensor_free(&t->reqs[i].param);
    }
    free(t->reqs);
    free_cells(t);
    nnt_trace_metric_clear(t);
    free(t);
}

void nnt_trace_free(nnt_trace *t)
{
    NNT_GUARDED_VOID(nnt_guard_trace_rt(t), "nnt_trace_free", trace_free_held(t));
}

/* Checks that (slot, layer) is served - on every block for a "*" path, at least one - and
 * writable when an edit asks. */
static nnt_status check_served(nnt_trace *t, const char *text, const nnt_path *p, int edit)
{
    nnt_error *err = rt_err(t);
    int lo = p->layer, hi = p->layer;
    if (p->layer == NNT_LAYER_ALL) {
        lo = 0;
        hi = t->m->info.num_layers - 1;
    }
    if (edit && p->via && p->via->read_only) {
        char what[160];
        nnt_path_format(t->m, p->slot, p->layer, what, sizeof what);
        return nnt_err_set(err, NNT_ERR_READ_ONLY,
                           "'%s': %s's input is %s, which other modules read too (the residual stream, the other "
                           "products); an edit here would reach them all. Edit %s to mean that",
                           text, p->via->standard, what, what);
    }
    int served_somewhere = 0;
    char reason[NNT_REASON_MAX] = "";
    int reason_layer = lo;
    for (int l = lo; l <= hi; l++) {
        nnt_value_info vi;
        nnt_status st = nnt_model_slot_info(t->m, l, p->slot, NULL, &vi, err);
        if (st != NNT_OK) return st;
        if (!vi.served) {
            if (!reason[0]) {
                snprintf(reason, sizeof reason, "%s", vi.reason);
                reason_layer = l;
            }
            continue;
        }
        served_somewhere = 1;
        if (edit && !vi.writable) {
            char path[160];
            nnt_path_format(t->m, p->slot, l, path, sizeof path);
            return nnt_err_set(err, NNT_ERR_READ_ONLY, "'%s': %s is read-only and cannot be edited",
                               text, path);
        }
    }
    if (!served_somewhere) {
        char path[160];
        nnt_path_format(t->m, p->slot, reason_layer, path, sizeof path);
        return nnt_err_set(err, NNT_ERR_NOT_SERVED, "'%s': %s is not served by the %s family: %s",
                           text, path, nnt_model_family(t->m), reason);
    }
    return NNT_OK;
}

static const char *slice_start(const char *text);

static nnt_status add_request(nnt_trace *t, req_kind kind, const char *text, request **out)
{
    nnt_error *err = rt_err(t);
    if (kind != REQ_SAVE && kind != REQ_GRAD && text && slice_start(text))
        return nnt_err_set(err, NNT_ERR_PATH,
                           "'%s': a [...] slice chooses what a save keeps (or a gradient request); edits take the whole value",
                           text);
    nnt_path p;
    nnt_status st = nnt_path_parse(t->m, text, &p, err);
    if (st != NNT_OK) return st;
    int edit = kind != REQ_SAVE && kind != REQ_KEEP && kind != REQ_GRAD && kind != REQ_COTANGENT;
    st = check_served(t, text, &p, edit);
    if (st != NNT_OK) return st;
    if (t->n_reqs == t->cap_reqs) {
        int cap = t->cap_reqs ? 2 * t->cap_reqs : 16;
        request *g = realloc(t->reqs, (size_t)cap * sizeof *g);
        if (!g) return nnt_err_set(err, NNT_ERR_OUT_OF_MEMORY, "no memory");
        t->reqs = g;
        t->cap_reqs = cap;
    }
    request *r = &t->reqs[t->n_reqs];
    memset(r, 0, sizeof *r);
    r->kind = kind;
    r->text = nnt_strdup(text);
    r->path = p;
    r->step_from = t->next_from;
    r->step_to = t->next_to;
    if (!r->text) return nnt_err_set(err, NNT_ERR_OUT_OF_MEMORY, "no memory");
    t->n_reqs++;
    free_cells(t); /* the table is rebuilt at the next run */
    *out = r;
    return NNT_OK;
}

static void pop_request(nnt_trace *t);

nnt_status nnt_trace_add_request(nnt_trace *t, req_kind kind, const char *text, request **out)
{
    return add_request(t, kind, text, out);
}

/* Where a trailing "[...]" slice starts in a request's text (its last '[', after the value's
 * name: a block index "layers[1]" comes before it), or NULL. */
static const char *slice_start(const char *text)
{
    size_t n = strlen(text);
    if (n < 3 || text[n - 1] != ']') return NULL;
    const char *open = strrchr(text, '[');
    return open && open > text && open[-1] != '.' && open[-1] != '[' ? open : NULL;
}

/* Parses one number of a slice item (whole text); 0 on success. */
static int slice_number(const char *s, size_t n, int64_t *out)
{
    char buf[32];
    while (n && *s == ' ') s++, n--;
    while (n && s[n - 1] == ' ') n--;
    if (n == 0 || n >= sizeof buf) return -1;
    memcpy(buf, s, n);
    buf[n] = '\0';
    char *end;
    errno = 0;
    long long v = strtoll(buf, &end, 10);
    if (*end || errno) return -1;
    *out = v;
    return 0;
}

/* Parses "[item, item, ...]" (the text from '[' to the final ']'): an index "i", a range
 * "start:stop[:step]" with any part left out, or "...". */
static nnt_status slice_parse(nnt_trace *t, const char *text, const char *open, request *r)
{
    nnt_error *err = rt_err(t);
    const char *p = open + 1, *end = text + strlen(text) - 1; /* the final ']' */
    int n = 0, ellipses = 0;
    for (;;) {
        const char *comma = memchr(p, ',', (size_t)(end - p));
        const char *stop = comma ? comma : end;
        const char *a = p, *b = stop;
        while (a < b && *a == ' ') a++;
        while (b > a && b[-1] == ' ') b--;
        if (n == NNT_MAX_DIMS + 1)
            return nnt_err_set(err, NNT_ERR_PATH, "save '%s': more slice items than a value has axes (%d)", text, NNT_MAX_DIMS);
        struct slice_item *it = &r->slice[n];
        memset(it, 0, sizeof *it);
        size_t len = (size_t)(b - a);
        const char *c1 = memchr(a, ':', len);
        if (len == 3 && memcmp(a, "...", 3) == 0) {
            it->kind = SL_ELLIPSIS;
            ellipses++;
        } else if (!c1) {
            it->kind = SL_INDEX;
            if (slice_number(a, len, &it->start) != 0)
                return nnt_err_set(err, NNT_ERR_PATH,
                                   "save '%s': slice item '%.*s' is not an index, a range start:stop[:step] or '...'",
                                   text, (int)len, a);
        } else {
            it->kind = SL_RANGE;
            const char *c2 = memchr(c1 + 1, ':', (size_t)(b - c1 - 1));
            const char *stop_end = c2 ? c2 : b;
            it->step = 1;
            int bad = 0;
            if (c1 > a) bad |= slice_number(a, (size_t)(c1 - a), &it->start), it->has_start = 1;
            if (stop_end > c1 + 1) bad |= slice_number(c1 + 1, (size_t)(stop_end - c1 - 1), &it->stop), it->has_stop = 1;
            if (c2 && b > c2 + 1) bad |= slice_number(c2 + 1, (size_t)(b - c2 - 1), &it->step);
            if (bad || it->step < 1)
                return nnt_err_set(err, NNT_ERR_PATH,
                                   "save '%s': slice item '%.*s' is not a range start:stop[:step] of integers with "
                                   "step >= 1", text, (int)len, a);
        }
        n++;
        if (!comma) break;
        p = comma + 1;
    }
    if (ellipses > 1) return nnt_err_set(err, NNT_ERR_PATH, "save '%s': '...' may appear once in a slice", text);
    r->n_slice = n;
    return NNT_OK;
}

nnt_status nnt_trace_hook_save(nnt_trace *t, const char *path, int *claimed)
{
    *claimed = 0;
    for (int i = t->n_reqs - 1; i >= 0; i--) {
        const request *r = &t->reqs[i];
        if (r->kind != REQ_HOOK || !r->hook_ops->save) continue;
        nnt_status st = r->hook_ops->save(t, r->user, path, claimed, rt_err(t));
        if (*claimed) return st;
    }
    if (strstr(path, ".sae.")) /* a method's output whose method is not attached */
        return *claimed = 1, nnt_err_set(rt_err(t), NNT_ERR_PATH,
                                         "save '%s': no SAE is attached to that value (attach one first: "
                                         "nnt_trace_sae, --sae PATH=DIR)", path);
    return NNT_OK;
}

nnt_status nnt_trace_save_kind(nnt_trace *t, req_kind kind, const char *path)
{
    if (!t || !path) return NNT_ERR_INVALID_ARGUMENT;
    const char *open = slice_start(path);
    char base[256];
    if (open && (size_t)(open - path) >= sizeof base)
        return nnt_err_set(rt_err(t), NNT_ERR_PATH, "%s '%s': the path is too long", kind == REQ_GRAD ? "grad" : "save",
                           path);
    if (open) snprintf(base, sizeof base, "%.*s", (int)(open - path), path);
    request *r = NULL;
    nnt_status st = add_request(t, kind, open ? base : path, &r);
    if (st != NNT_OK || !open) return st;
    char *full = nnt_strdup(path); /* messages quote the request as written */
    if (!full) {
        pop_request(t);
        return nnt_err_set(rt_err(t), NNT_ERR_OUT_OF_MEMORY, "no memory");
    }
    free(r->text);
    r->text = full;
    st = slice_parse(t, path, open, r); /* checked against the value's shape when a run starts */
    if (st != NNT_OK) pop_request(t);
    return st;
}


static nnt_status trace_edit_held(nnt_trace *t, const char *path, nnt_edit_fn fn, void *user)
{
    if (!t) return NNT_ERR_INVALID_ARGUMENT;
    if (!fn) return nnt_err_set(rt_err(t), NNT_ERR_INVALID_ARGUMENT, "'%s': the edit callback is NULL", path);
    request *r = NULL;
    nnt_status st = add_request(t, REQ_EDIT_FN, path, &r);
    if (st == NNT_OK) {
        r->fn = fn;
        r->user = user;
    }
    return st;
}

nnt_status nnt_trace_edit(nnt_trace *t, const char *path, nnt_edit_fn fn, void *user)
{
    NNT_GUARDED(nnt_guard_trace_rt(t), "nnt_trace_edit", trace_edit_held(t, path, fn, user));
}

static nnt_status copy_param(nnt_trace *t, request *r, const nnt_tensor *v)
{
    nnt_error *err = rt_err(t);
    if (!v || !v->data || v->device)
        return nnt_err_set(err, NNT_ERR_INVALID_ARGUMENT, "'%s': the tensor must be in host memory", r->text);
    if (nnt_tensor_alloc(&r->param, v->dtype, v->ndim, v->shape) != NNT_OK)
        return nnt_err_set(err, NNT_ERR_OUT_OF_MEMORY, "no memory");
    memcpy(r->param.data, v->data, nnt_tensor_nbytes(v));
    return NNT_OK;
}

/* Drops the most recent request (after a failure to complete it). */
static void pop_request(nnt_trace *t)
{
    request *r = &t->reqs[--t->n_reqs];
    if (r->kind == REQ_COTANGENT && r->metric) nnt_trace_metric_clear(t); /* the metric's own request */
    if (r->kind == REQ_HOOK && r->hook_ops->release) r->hook_ops->release(r->user);
    free(r->text);
    free(r->positions);
    free(r->rows);
    free(r->label);
    nnt_tensor_free(&r->param);
}

static nnt_status trace_set_held(nnt_trace *t, const char *path, const nnt_tensor *v)
{
    if (!t) return NNT_ERR_INVALID_ARGUMENT;
    request *r = NULL;
    nnt_status st = add_request(t, REQ_SET, path, &r);
    if (st == NNT_OK && (st = copy_param(t, r, v)) != NNT_OK) pop_request(t);
    return st;
}

nnt_status nnt_trace_set(nnt_trace *t, const char *path, const nnt_tensor *v)
{
    NNT_GUARDED(nnt_guard_trace_rt(t), "nnt_trace_set", trace_set_held(t, path, v));
}

static nnt_status trace_add_held(nnt_trace *t, const char *path, const nnt_tensor *v, float factor)
{
    if (!t) return NNT_ERR_INVALID_ARGUMENT;
    if (!nnt_factor_ok(factor))
        return nnt_err_set(rt_err(t), NNT_ERR_INVALID_ARGUMENT, "add %s: factor %g is not " NNT_FACTOR_TEXT,
                           path ? path : "(null)", factor);
    request *r = NULL;
    nnt_status st = add_request(t, REQ_ADD, path, &r);
    if (st != NNT_OK) return st;
    r->factor = factor;
    if ((st = copy_param(t, r, v)) != NNT_OK) pop_request(t);
    return st;
}

nnt_status nnt_trace_add(nnt_trace *t, const char *path, const nnt_tensor *v, float factor)
{
    NNT_GUARDED(nnt_guard_trace_rt(t), "nnt_trace_add", trace_add_held(t, path, v, factor));
}

static nnt_status trace_scale_held(nnt_trace *t, const char *path, float factor)
{
    if (!t) return NNT_ERR_INVALID_ARGUMENT;
    if (!nnt_factor_ok(factor))
        return nnt_err_set(rt_err(t), NNT_ERR_INVALID_ARGUMENT, "scale %s: factor %g is not " NNT_FACTOR_TEXT,
                           path ? path : "(null)", factor);
    request *r = NULL;
    nnt_status st = add_request(t, REQ_SCALE, path, &r);
    if (st == NNT_OK) r->factor = factor;
    return st;
}

nnt_status nnt_trace_scale(nnt_trace *t, const char *path, float factor)
{
    NNT_GUARDED(nnt_guard_trace_rt(t), "nnt_trace_scale", trace_scale_held(t, path, factor));
}

static nnt_status trace_zero_held(nnt_trace *t, const char *path)
{
    if (!t) return NNT_ERR_INVALID_ARGUMENT;
    request *r = NULL;
    return add_request(t, REQ_ZERO, path, &r);
}

nnt_status nnt_trace_zero(nnt_trace *t, const char *path)
{
    NNT_GUARDED(nnt_guard_trace_rt(t), "nnt_trace_zero", trace_zero_held(t, path));
}

/* The host module of slot: a standard value's, or for a module's value the host its path starts
 * in (layers.1.mlp.experts.down_proj.output: mlp); NNT_MODULE_LAYER for a module of the block
 * itself. */
static int slot_host(const nnt_model *m, nnt_value_id slot)
{
    const nnt_native_info *ni = nnt_model_native(m, slot);
    if (!ni) return (int)nnt_value_module(slot);
    for (int h = NNT_MODULE_SELF_ATTN; h < NNT_MODULE_COUNT; h++) {
        size_t n = strlen(nnt_module_name((nnt_module)h));
        if (strncmp(ni->standard, nnt_module_name((nnt_module)h), n) == 0 && ni->standard[n] == '.') return h;
    }
    return ni->block ? NNT_MODULE_LAYER : NNT_MODULE_MODEL;
}

static nnt_status trace_masked_fill_held(nnt_trace *t, const char *path, const char *where_path,
                                         int64_t equals, float fill)
{
    if (!t) return NNT_ERR_INVALID_ARGUMENT;
    nnt_error *err = rt_err(t);
    if (!nnt_factor_ok(fill))
        return nnt_err_set(err, NNT_ERR_INVALID_ARGUMENT, "masked fill of %s: fill %g is not " NNT_FACTOR_TEXT,
                           path ? path : "(null)", fill);
    nnt_path target, where;
    nnt_status st = nnt_path_parse(t->m, path, &target, err);
    if (st != NNT_OK) return st;
    st = nnt_path_parse(t->m, where_path, &where, err);
    if (st != NNT_OK) return st;
    if (where.layer != target.layer || target.layer == -1 || slot_host(t->m, where.slot) != slot_host(t->m, target.slot))
        return nnt_err_set(err, NNT_ERR_PATH,
                           "masked fill of '%s' by '%s': the mask must be a value of the same module of the same block",
                           path, where_path);
    request *keep;
    st = add_request(t, REQ_KEEP, where_path, &keep);
    if (st != NNT_OK) return st;
    request *r = NULL;
    st = add_request(t, REQ_MASKED_FILL, path, &r);
    if (st != NNT_OK) {
        pop_request(t);
        return st;
    }
    r->where_slot = where.slot;
    r->equals = equals;
    r->fill = fill;
    return NNT_OK;
}

nnt_status nnt_trace_masked_fill(nnt_trace *t, const char *path, const char *where_path,
                                 int64_t equals, float fill)
{
    NNT_GUARDED(nnt_guard_trace_rt(t), "nnt_trace_masked_fill",
                trace_masked_fill_held(t, path, where_path, equals, fill));
}

int nnt_trace_take_last_result(nnt_trace *t, nnt_tensor *out)
{
    if (!t || t->n_reqs == 0) return 0;
    int req = t->n_reqs - 1, found = 0;
    int keep = 0;
    for (int i = 0; i < t->n_results; i++) {
        result *r = &t->results[i];
        if (r->occurrence_of_request != req) {
            t->results[keep++] = *r;
            continue;
        }
        free(r->path);
        if (!r->none && out) { /* the latest one wins */
            nnt_tensor_free(out);
            *out = r->t;
            found = 1;
        } else {
            nnt_tensor_free(&r->t);
        }
    }
    t->n_results = keep;
    return found;
}

void nnt_trace_drop_last_request(nnt_trace *t)
{
    if (t && t->n_reqs > 0) {
        pop_request(t);
        free_cells(t);
    }
}

int nnt_trace_request_count(const nnt_trace *t)
{
    return t ? t->n_reqs : 0;
}

void nnt_trace_drop_since(nnt_trace *t, int first)
{
    if (!t) return;
    while (t->n_reqs > first && t->n_reqs > 0) pop_request(t);
    free_cells(t);
}

nnt_status nnt_trace_label_since(nnt_trace *t, int first, const char *label, int whole)
{
    if (!t || !label) return NNT_ERR_INVALID_ARGUMENT;
    for (int i = first < 0 ? 0 : first; i < t->n_reqs; i++) {
        char *copy = nnt_strdup(label);
        if (!copy) return nnt_err_set(rt_err(t), NNT_ERR_OUT_OF_MEMORY, "no memory");
        free(t->reqs[i].label);
        t->reqs[i].label = copy;
        t->reqs[i].label_whole = whole;
    }
    return NNT_OK;
}

static int cmp_int(const void *a, const void *b)
{
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

/* A copy of list [n] for a request (sorted when `sorted`, to find a repeat). */
static int *copy_list(const int *list, int n, int sorted)
{
    int *c = malloc((size_t)n * sizeof *c);
    if (c) memcpy(c, list, (size_t)n * sizeof *c);
    if (c && sorted) qsort(c, (size_t)n, sizeof *c, cmp_int);
    return c;
}

nnt_status nnt_trace_limit_rows(nnt_trace *t, int first, const int *rows, int n)
{
    if (!t) return NNT_ERR_INVALID_ARGUMENT;
    nnt_error *err = rt_err(t);
    if (n < 1 || !rows) return nnt_err_set(err, NNT_ERR_INVALID_ARGUMENT, "rows: at least one batch row is needed");
    int *sorted = copy_list(rows, n, 1);
    if (!sorted) return nnt_err_set(err, NNT_ERR_OUT_OF_MEMORY, "no memory");
    nnt_status st = NNT_OK;
    for (int k = 0; k < n && st == NNT_OK; k++)
        if (sorted[k] < 0 || (k && sorted[k] == sorted[k - 1]))
            st = nnt_err_set(err, NNT_ERR_INVALID_ARGUMENT, "rows: row %d %s", sorted[k],
                             sorted[k] < 0 ? "is negative" : "is named twice");
    free(sorted);
    for (int i = first < 0 ? 0 : first; st == NNT_OK && i < t->n_reqs; i++) {
        request *r = &t->reqs[i];
        if (r->kind == REQ_KEEP) continue; /* a mask or source kept whole for a later edit */
        if (r->kind == REQ_COPY_FROM)
            return nnt_err_set(err, NNT_ERR_INVALID_ARGUMENT, "'%s': skip_layers applies to every row", r->text);
        free(r->rows);
        if (!(r->rows = copy_list(rows, n, 0))) return nnt_err_set(err, NNT_ERR_OUT_OF_MEMORY, "no memory");
        r->n_rows = n;
    }
    free_cells(t);
    return st;
}

nnt_status nnt_trace_limit_positions(nnt_trace *t, int first, const int *positions, int n)
{
    if (!t) return NNT_ERR_INVALID_ARGUMENT;
    nnt_error *err = rt_err(t);
    if (n < 1 || !positions) return nnt_err_set(err, NNT_ERR_INVALID_ARGUMENT, "positions: at least one is needed");
    for (int i = first < 0 ? 0 : first; i < t->n_reqs; i++) {
        request *r = &t->reqs[i];
        if (r->kind != REQ_SET && r->kind != REQ_ADD)
            return nnt_err_set(err, NNT_ERR_INVALID_ARGUMENT, "'%s': only set and add take token positions", r->text);
        free(r->positions);
        if (!(r->positions = copy_list(positions, n, 0))) return nnt_err_set(err, NNT_ERR_OUT_OF_MEMORY, "no memory");
        r->n_positions = n;
        r->by_position = 1;
    }
    free_cells(t);
    return NNT_OK;
}

static nnt_status trace_ablate_expert_held(nnt_trace *t, int layer, int expert)
{
    if (!t) return NNT_ERR_INVALID_ARGUMENT;
    char w[64], i[64];
    snprintf(w, sizeof w, "layers.%d.mlp.expert_weights", layer);
    snprintf(i, sizeof i, "layers.%d.mlp.expert_indices", layer);
    if (expert < 0 || expert >= t->m->info.num_experts)
        return nnt_err_set(rt_err(t), NNT_ERR_INDEX, "ablate expert %d of block %d: the model has experts 0..%d", expert,
                           layer, t->m->info.num_experts - 1);
    return nnt_trace_masked_fill(t, w, i, expert, 0.0f);
}

nnt_status nnt_trace_ablate_expert(nnt_trace *t, int layer, int expert)
{
    NNT_GUARDED(nnt_guard_trace_rt(t), "nnt_trace_ablate_expert", trace_ablate_expert_held(t, layer, expert));
}

static nnt_status trace_skip_layers_held(nnt_trace *t, int start, int end)
{
    if (!t) return NNT_ERR_INVALID_ARGUMENT;
    int L = t->m->info.num_layers;
    if (start < 0 || end < start || end >= L)
        return nnt_err_set(rt_err(t), NNT_ERR_INDEX, "skip_layers(%d, %d): need 0 <= start <= end < %d", start, end, L);
    char src[64], dst[64];
    snprintf(src, sizeof src, "layers.%d.layer_input", start);
    snprintf(dst, sizeof dst, "layers.%d.layer_output", end);
    request *keep;
    nnt_status st = add_request(t, REQ_KEEP, src, &keep);
    if (st != NNT_OK) return st;
    request *r = NULL;
    st = add_request(t, REQ_COPY_FROM, dst, &r);
    if (st != NNT_OK) {
        pop_request(t);
        return st;
    }
    r->where_slot = NNT_VALUE_LAYER_INPUT;
    r->where_layer = start;
    return NNT_OK;
}

nnt_status nnt_trace_skip_layers(nnt_trace *t, int start, int end)
{
    NNT_GUARDED(nnt_guard_trace_rt(t), "nnt_trace_skip_layers", trace_skip_layers_held(t, start, end));
}

static nnt_status trace_steer_held(nnt_trace *t, int first, int last, const int *positions, int n_positions,
                                   const nnt_tensor *vector, float factor)
{
    if (!t) return NNT_ERR_INVALID_ARGUMENT;
    nnt_error *err = rt_err(t);
    if (!nnt_factor_ok(factor))
        return nnt_err_set(err, NNT_ERR_INVALID_ARGUMENT, "steer: factor %g is not " NNT_FACTOR_TEXT, factor);
    int L = t->m->info.num_layers;
    if (first < 0 || last < first || last >= L)
        return nnt_err_set(err, NNT_ERR_INDEX, "steer blocks %d..%d: need 0 <= first <= last < %d", first, last, L);
    if (!vector) return nnt_err_set(err, NNT_ERR_INVALID_ARGUMENT, "steer: no vector");
    /* [hidden] adds to every stream; [streams, hidden] (models of several residual streams, such as
     * DeepSeek-V4's hyper-connections) gives each stream its own row, in layer_output's order */
    int hidden = t->m->info.hidden_size, streams = t->m->info.num_streams > 0 ? t->m->info.num_streams : 1;
    int whole = vector->ndim == 1 && vector->shape[0] == hidden;
    int per_stream = streams > 1 && vector->ndim == 2 && vector->shape[0] == streams && vector->shape[1] == hidden;
    if (!whole && !per_stream) {
        char shape[96], also[96] = "";
        size_t k = (size_t)snprintf(shape, sizeof shape, "[");
        for (int d = 0; d < vector->ndim && k < sizeof shape; d++)
            k += (size_t)snprintf(shape + k, sizeof shape - k, "%s%lld", d ? ", " : "", (long long)vector->shape[d]);
        if (k < sizeof shape) snprintf(shape + k, sizeof shape - k, "]");
        if (streams > 1)
            snprintf(also, sizeof also, " (every stream) or [num_streams, hidden_size] = [%d, %d] (a row per stream)",
                     streams, hidden);
        return nnt_err_set(err, NNT_ERR_SHAPE, "steer: the vector is %s; it must be [hidden_size] = [%d]%s", shape,
                           hidden, also);
    }
    if (n_positions < 0 || (n_positions > 0 && !positions))
        return nnt_err_set(err, NNT_ERR_INVALID_ARGUMENT, "steer: %d positions but no list", n_positions);
    for (int l = first; l <= last; l++) {
        char path[64];
        snprintf(path, sizeof path, "layers.%d.layer_output", l);
        request *r = NULL;
        nnt_status st = add_request(t, REQ_STEER, path, &r);
        if (st == NNT_OK) st = copy_param(t, r, vector);
        if (st == NNT_OK && n_positions > 0) {
            r->positions = malloc((size_t)n_positions * sizeof *r->positions);
            if (!r->positions) st = nnt_err_set(err, NNT_ERR_OUT_OF_MEMORY, "no memory");
            else memcpy(r->positions, positions, (size_t)n_positions * sizeof *positions);
            r->n_positions = n_positions;
        }
        if (st != NNT_OK) {
            if (t->n_reqs && t->reqs[t->n_reqs - 1].kind == REQ_STEER && t->reqs[t->n_reqs - 1].path.layer == l) pop_request(t);
            return st;
        }
        r->factor = factor;
    }
    return NNT_OK;
}

nnt_status nnt_trace_steer(nnt_trace *t, int first, int last, const int *positions, int n_positions,
                           const nnt_tensor *vector, float factor)
{
    NNT_GUARDED(nnt_guard_trace_rt(t), "nnt_trace_steer",
                trace_steer_held(t, first, last, positions, n_positions, vector, factor));
}

nnt_status nnt_positions_parse(nnt_runtime *rt, const char *text, int *out, int max, int *n)
{
    nnt_error scratch, *err = rt ? &rt->err : &scratch;
    return nnt_positions_read(text, out, max, n, err);
}

nnt_status nnt_positions_read(const char *text, int *out, int max, int *n, nnt_error *err)
{
    nnt_error scratch;
    if (!err) err = &scratch;
    if (!text || !out || !n || max < 0) return nnt_err_set(err, NNT_ERR_INVALID_ARGUMENT, "positions: NULL argument");
    *n = 0;
    if (!*text) return nnt_err_set(err, NNT_ERR_INVALID_ARGUMENT, "positions: the list is empty");
    for (const char *p = text;;) {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        char item[32];
        if (len == 0 || len >= sizeof item)
            return nnt_err_set(err, NNT_ERR_INVALID_ARGUMENT,
                               "'%.*s' is neither an integer in -2147483645..2147483647 nor one of prompt, "
                               "generated, all (%s entry)",
                               len ? 24 : 0, p, len ? "an overlong" : "an empty");
        memcpy(item, p, len);
        item[len] = '\0';
        int v;
        if (strcmp(item, "prompt") == 0) {
            v = NNT_POS_PROMPT;
        } else if (strcmp(item, "generated") == 0) {
            v = NNT_POS_GENERATED;
        } else if (strcmp(item, "all") == 0) {
            v = NNT_POS_ALL;
        } else {
            char *end;
            errno = 0;
            long long x = strtoll(item, &end, 10);
            if (end == item || *end || errno || x > 2147483647LL || x < -2147483645LL)
                return nnt_err_set(err, NNT_ERR_INVALID_ARGUMENT,
                                   "'%s' is neither an integer in -2147483645..2147483647 nor one of prompt, "
                                   "generated, all",
                                   item);
            v = (int)x;
        }
        if (*n == max)
            return nnt_err_set(err, NNT_ERR_INVALID_ARGUMENT, "more than %d entries", max);
        out[(*n)++] = v;
        if (!comma) break;
        p = comma + 1;
    }
    return NNT_OK;
}

/* Whether position q (nnt.h, "token positions") names a token that some call processes: rows
 * of lens[b] prompt tokens, the prompt at step 0 and one token per row at each later step, for
 * the steps from..to. */
static int position_reached(int q, const int *lens, int B, int from, int to)
{
    for (int b = 0; b < B; b++) {
        if (from == 0) { /* the prompt's call: tokens 0..lens[b] - 1, the end at lens[b] */
            if (q == NNT_POS_PROMPT || q == NNT_POS_ALL) return 1;
            if (q != NNT_POS_GENERATED && (q >= 0 ? q < lens[b] : lens[b] + q >= 0)) return 1;
        }
        int lo = from > 1 ? from : 1;
        if (lo > to) continue;
        /* step s >= 1 feeds token lens[b] + s - 1, the row's newest */
        if (q == NNT_POS_GENERATED || q == NNT_POS_ALL || q == -1) return 1;
        if (q >= 0 && (int64_t)q - lens[b] + 1 >= lo && (int64_t)q - lens[b] + 1 <= to) return 1;
    }
    return 0;
}

/* The message of position k of request r that names no token of the run (see below). */
static nnt_status position_unreached(const request *r, int k, int longest, int from, int to, int n_steps,
                                     nnt_error *err)
{
    int q = r->positions[k];
    char word[32], where[320];
    if (q == NNT_POS_PROMPT || q == NNT_POS_GENERATED)
        snprintf(word, sizeof word, "'%s'", q == NNT_POS_PROMPT ? "prompt" : "generated");
    else
        snprintf(word, sizeof word, "%d", q);
    /* a request of a request document names its field; the C API's names the call */
    if (r->label)
        snprintf(where, sizeof where, "%s.positions[%d]: position", r->label, k);
    else
        snprintf(where, sizeof where, "%s %s: position", r->kind == REQ_STEER ? "steer" : r->kind == REQ_SET ? "set" : "add",
                 r->text);
    const char *why = !r->label ? "" /* the C API's message as it was */
                      : q == NNT_POS_GENERATED            ? ""
                      : q >= 0                            ? "; it is past every row's last token"
                                                          : "; it is before every row's first token";
    if (n_steps == 1)
        return nnt_err_set(err, NNT_ERR_INDEX,
                           "%s %s names no token of this forward: its longest row has %d tokens (positions 0..%d, or "
                           "-%d..-1 from the row's end)%s%s",
                           where, word, longest, longest - 1, longest,
                           q == NNT_POS_GENERATED ? "; a single forward has no generated token" : "", why);
    return nnt_err_set(err, NNT_ERR_INDEX,
                       "%s %s names no token processed at steps %d..%d: the longest prompt has %d tokens (positions "
                       "0..%d) and step s >= 1 feeds the row's token (prompt length + s - 1), up to position %d at "
                       "step %d%s",
                       where, word, from, to, longest, longest - 1, longest + n_steps - 2, n_steps - 1, why);
}

nnt_status nnt_trace_check_positions(nnt_trace *t, const int *lens, int B, int n_steps, nnt_error *err)
{
    int longest = 0;
    for (int b = 0; b < B; b++) longest = lens[b] > longest ? lens[b] : longest;
    for (int i = 0; i < t->n_reqs; i++) {
        const request *r = &t->reqs[i];
        if (r->kind != REQ_STEER && !r->by_position) continue;
        int from = r->step_from, to = r->step_to < 0 || r->step_to >= n_steps ? n_steps - 1 : r->step_to;
        if (from > to) continue; /* applies at no step of this run */
        for (int k = 0; k < r->n_positions; k++)
            if (!position_reached(r->positions[k], lens, B, from, to))
                return position_unreached(r, k, longest, from, to, n_steps, err);
    }
    return NNT_OK;
}

/* ---------------------------------------------------------------------------------------- */

static nnt_status cell_push(cell *c, int id)
{
    int *g = realloc(c->ids, (size_t)(c->n + 1) * sizeof *g);
    if (!g) return NNT_ERR_OUT_OF_MEMORY;
    c->ids = g;
    c->ids[c->n++] = id;
    return NNT_OK;
}

static cell *cell_at(nnt_trace *t, int layer, nnt_value_id slot)
{
    int idx = (layer + 1) * NNT_SLOT_COUNT + (int)slot;
    if (!t->cells || idx < 0 || idx >= t->n_cells) return NULL;
    return &t->cells[idx];
}

cell *nnt_trace_cell(nnt_trace *t, int layer, nnt_value_id slot)
{
    return cell_at(t, layer, slot);
}

/* 1 when shape [nd] equals [n_sel] + unit[und] (n_sel < 0: unit alone). */
static int shape_is(int nd, const int64_t *shape, int64_t n_sel, int und, const int64_t *unit)
{
    if (n_sel >= 0) return nd == und + 1 && shape[0] == n_sel && nnt_shape_equal(nd - 1, shape + 1, und, unit);
    return nnt_shape_equal(nd, shape, und, unit);
}

/* 1 when shape [nd] is trailing axes of unit [und] (the C API's broadcast of an add). */
static int shape_trails(int nd, const int64_t *shape, int und, const int64_t *unit)
{
    int ok = nd <= und;
    for (int i = 0; ok && i < nd; i++) ok = shape[nd - 1 - i] == unit[und - 1 - i];
    return ok;
}

/* The tensor of a SET / ADD restricted to rows or token positions: the value's axes after the
 * batch axis (rows) or after [batch, seq] (positions) - the unit one row or token holds - or
 * [n, ...unit] for one unit per listed row (or position); an add also takes trailing axes of
 * the unit, broadcast as nnt_trace_add broadcasts. */
static nnt_status check_limited_param(nnt_trace *t, const request *r, const char *path, const nnt_value_info *vi)
{
    int skip = r->by_position ? 2 : 1;
    int64_t n_sel = r->by_position ? r->n_positions : r->n_rows;
    const nnt_tensor *p = &r->param;
    if (vi->ndim < skip) return NNT_OK; /* refused by check_layout */
    const int64_t *unit = vi->shape + skip;
    int und = vi->ndim - skip;
    if (shape_is(p->ndim, p->shape, -1, und, unit) || shape_is(p->ndim, p->shape, n_sel, und, unit) ||
        (r->kind == REQ_ADD && shape_trails(p->ndim, p->shape, und, unit)))
        return NNT_OK;
    char got[96], want[96], value[96];
    return nnt_err_set(rt_err(t), NNT_ERR_SHAPE,
                       "%s '%s' at given %s: the tensor has shape %s; it must be %s (what one %s of %s %s holds%s) or "
                       "[%lld, ...] (one for each of the %lld %s given)",
                       r->kind == REQ_SET ? "set" : "add", r->text, r->by_position ? "positions" : "rows",
                       nnt_shape_str(p, got, sizeof got), nnt_dims_str(und, unit, want, sizeof want),
                       r->by_position ? "token" : "row", path, nnt_dims_str(vi->ndim, vi->shape, value, sizeof value),
                       r->kind == REQ_ADD ? ", or its trailing axes" : "", (long long)n_sel, (long long)n_sel,
                       r->by_position ? "positions" : "rows");
}

/* Checks a request restricted to rows or positions against the value and the call: the value
 * is laid out [batch ...] (rows) or [batch seq ...] (positions), and every row is in the batch. */
static nnt_status check_layout(nnt_trace *t, const request *r, const char *path, const nnt_value_info *vi,
                               const nnt_call_dims *dims, const char **field)
{
    nnt_error *err = rt_err(t);
    const char *axes = vi->axes ? vi->axes : "";
    int has_batch = strncmp(axes, "[batch ", 7) == 0 || strcmp(axes, "[batch]") == 0;
    int has_seq = strncmp(axes, "[batch seq ", 11) == 0 || strcmp(axes, "[batch seq]") == 0;
    if (r->n_rows && (!has_batch || vi->ndim < 1 || vi->shape[0] != dims->batch)) {
        *field = ".rows";
        return nnt_err_set(err, NNT_ERR_SHAPE, "'%s': %s is laid out %s, without a batch axis to choose rows of", r->text,
                           path, axes);
    }
    if (r->by_position && (!has_seq || vi->ndim < 2 || vi->shape[1] != dims->seq)) {
        *field = ".positions";
        return nnt_err_set(err, NNT_ERR_SHAPE, "'%s': %s is laid out %s, without a token axis after the batch axis",
                           r->text, path, axes);
    }
    for (int k = 0; k < r->n_rows; k++)
        if (r->rows[k] >= dims->batch) {
            char f[48];
            snprintf(f, sizeof f, ".rows[%d]", k);
            *field = NULL; /* named in the message itself */
            return nnt_err_set(err, NNT_ERR_INDEX, "%s%s: row %d is outside the batch of this call (rows 0..%d)",
                               r->label ? r->label : "", r->label ? f : f + 1, r->rows[k], dims->batch - 1);
        }
    if ((r->kind == REQ_SET || r->kind == REQ_ADD) && (r->n_rows || r->by_position)) {
        *field = ".tensor";
        return check_limited_param(t, r, path, vi);
    }
    return NNT_OK;
}

/* Checks the shape of a SET / ADD tensor, or of a masked fill's mask, against the value; *field
 * names the part of a request document's entry at fault (".tensor", ".where", ...). */
static nnt_status check_shapes(nnt_trace *t, const request *r, int layer, const nnt_value_info *vi, const char **field)
{
    nnt_error *err = rt_err(t);
    char want[96], got[96], path[160];
    nnt_path_format(t->m, r->path.slot, layer, path, sizeof path);
    if (r->kind == REQ_HOOK) {
        *field = ".path";
        return r->hook_ops->check ? r->hook_ops->check(t, r->user, path, vi, err) : NNT_OK;
    }
    *field = ".tensor";
    int limited = r->n_rows || r->by_position;
    if (limited) {
        nnt_status st = check_layout(t, r, path, vi, &t->dims, field);
        if (st != NNT_OK) return st;
        *field = ".tensor";
    }
    if (r->kind == REQ_SET && !limited) {
        if (!nnt_shape_equal(r->param.ndim, r->param.shape, vi->ndim, vi->shape))
            return nnt_err_set(err, NNT_ERR_SHAPE, "set '%s': the tensor has shape %s, the value %s is %s",
                               r->text, nnt_shape_str(&r->param, got, sizeof got), path,
                               nnt_dims_str(vi->ndim, vi->shape, want, sizeof want));
    } else if (r->kind == REQ_ADD && !limited) {
        int ok = r->param.ndim <= vi->ndim;
        for (int i = 0; ok && i < r->param.ndim; i++)
            ok = r->param.shape[r->param.ndim - 1 - i] == vi->shape[vi->ndim - 1 - i];
        if (!ok)
            return nnt_err_set(err, NNT_ERR_SHAPE,
                               "add to '%s': the tensor has shape %s, which is not the trailing axes of %s's %s",
                               r->text, nnt_shape_str(&r->param, got, sizeof got), path,
                               nnt_dims_str(vi->ndim, vi->shape, want, sizeof want));
    }
    *field = "";
    if (r->kind == REQ_COPY_FROM) {
        nnt_value_info si;
        nnt_status st = nnt_model_slot_info(t->m, r->where_layer, r->where_slot, &t->dims, &si, err);
        if (st != NNT_OK) return st;
        if (!nnt_shape_equal(si.ndim, si.shape, vi->ndim, vi->shape))
            return nnt_err_set(err, NNT_ERR_SHAPE, "'%s': the source has shape %s, the value %s", r->text,
                               nnt_dims_str(si.ndim, si.shape, got, sizeof got), nnt_dims_str(vi->ndim, vi->shape, want, sizeof want));
    }
    *field = ".tensor";
    if ((r->kind == REQ_SET || r->kind == REQ_ADD) &&
        (!nnt_dtype_is_float(r->param.dtype)) != (!nnt_dtype_is_float(vi->dtype)))
        return nnt_err_set(err, NNT_ERR_SHAPE, "'%s': the tensor has dtype %s, the value %s is %s",
                           r->text, nnt_dtype_name(r->param.dtype), path, nnt_dtype_name(vi->dtype));
    if ((r->kind == REQ_SCALE || r->kind == REQ_ADD || r->kind == REQ_MASKED_FILL || r->kind == REQ_STEER) &&
        !nnt_dtype_is_float(vi->dtype))
        return *field = ".path", nnt_err_set(err, NNT_ERR_SHAPE, "'%s': %s holds %s; scale, add and fill need a float value",
                           r->text, path, nnt_dtype_name(vi->dtype));
    if (r->kind == REQ_MASKED_FILL) {
        *field = ".where";
        nnt_value_info wi;
        nnt_status st = nnt_model_slot_info(t->m, layer, r->where_slot, &t->dims, &wi, err);
        if (st != NNT_OK) return st;
        int ok = wi.served && wi.ndim <= vi->ndim;
        for (int i = 0; ok && i < wi.ndim; i++) ok = wi.shape[i] == vi->shape[i];
        if (!ok) {
            char wpath[160];
            nnt_path_format(t->m, r->where_slot, layer, wpath, sizeof wpath);
            return nnt_err_set(err, NNT_ERR_SHAPE,
                               "masked fill of '%s': the mask %s has shape %s, not a prefix of %s",
                               r->text, wpath, nnt_dims_str(wi.ndim, wi.shape, got, sizeof got),
                               nnt_dims_str(vi->ndim, vi->shape, want, sizeof want));
        }
    }
    return NNT_OK;
}

nnt_status nnt_trace_prepare(nnt_trace *t, const nnt_call_dims *dims, int step, int keep_results, int first, int end,
                             nnt_error *err)
{
    (void)err;
    if (!keep_results) clear_results(t);
    for (int i = 0; i < t->n_results; i++) { /* a chunk fills its part of each; parts close with their call */
        t->results[i].chunk_seen = 0;
        t->results[i].part_open = 0;
    }
    for (int i = 0; i < t->n_keeps; i++) t->keeps[i].valid = 0;
    t->dims = *dims;
    t->step = step;
    int L = t->m->info.num_layers;
    free_cells(t);
    t->n_cells = (L + 1) * NNT_SLOT_COUNT;
    t->cells = calloc((size_t)t->n_cells, sizeof *t->cells);
    if (!t->cells) return nnt_err_set(rt_err(t), NNT_ERR_OUT_OF_MEMORY, "no memory");
    uint64_t save_bytes = 0, largest_bytes = 0; /* what the call's saves hold (trace_save_bound.c) */
    int n_saves = 0;
    char largest[160] = "";
    for (int i = 0; i < t->n_reqs; i++) {
        request *r = &t->reqs[i];
        /* the chunks of a prompt are one step, the prompt's */
        int at = t->window.total ? 0 : step;
        if (at < r->step_from || (r->step_to >= 0 && at > r->step_to)) continue;
        int lo = r->path.layer, hi = r->path.layer;
        if (r->path.layer == NNT_LAYER_ALL) {
            lo = 0;
            hi = L - 1;
        }
        for (int l = lo; l <= hi; l++) {
            /* a pipeline stage serves only what it holds; the other stages serve the rest */
            if (!nnt_stage_holds(L, first, end, r->path.slot, l)) continue;
            if (r->kind == REQ_COPY_FROM && !nnt_stage_holds(L, first, end, r->where_slot, r->where_layer)) {
                char src[160];
                nnt_path_format(t->m, r->where_slot, r->where_layer, src, sizeof src);
                return nnt_err_set(rt_err(t), NNT_ERR_UNSUPPORTED,
                                   "'%s' takes %s, which another pipeline stage computes (this stage runs blocks "
                                   "%d..%d): skip_layers must lie within one stage",
                                   r->text, src, first, end - 1);
            }
            nnt_value_info vi;
            nnt_status st = nnt_model_slot_info(t->m, l, r->path.slot, dims, &vi, rt_err(t));
            if (st != NNT_OK) return st;
            if (!vi.served) continue; /* a "*" request skips blocks that lack the value */
            int token_axis = nnt_trace_token_axis(vi.axes);
            /* a chunk of a prompt: a value of no token axis (next_token_probs) comes from the last */
            if (t->window.total && token_axis < 0 && t->window.t0 + t->window.n < t->window.total) continue;
            const char *field = "";
            st = check_shapes(t, r, l, &vi, &field);
            if (st == NNT_OK) st = nnt_trace_pattern_check(t, r, l, &vi, rt_err(t));
            axis_sel ax[NNT_MAX_DIMS];
            int64_t shape[NNT_MAX_DIMS];
            memcpy(shape, vi.shape, sizeof shape);
            if (r->n_rows && vi.ndim > 0) shape[0] = r->n_rows; /* the slice applies to the rows kept */
            if (t->window.total && token_axis >= 0) shape[token_axis] = t->window.total; /* the whole prompt's */
            if (st == NNT_OK && r->n_slice) {
                char path[160];
                nnt_path_format(t->m, r->path.slot, l, path, sizeof path);
                field = ".path";
                st = nnt_trace_slice_resolve(r, path, vi.ndim, shape, vi.axes, ax, rt_err(t));
            }
            if (st == NNT_OK && r->kind == REQ_SAVE) {
                uint64_t b = nnt_trace_save_bytes(vi.dtype, vi.ndim, shape, r->n_slice ? ax : NULL);
                save_bytes += b;
                n_saves++;
                if (b > largest_bytes) {
                    largest_bytes = b;
                    nnt_path_format(t->m, r->path.slot, l, largest, sizeof largest);
                }
            }
            if (st != NNT_OK) {
                if (r->label && field) nnt_err_prefix(rt_err(t), "%s%s", r->label, r->label_whole ? "" : field);
                return st;
            }
            cell *c = cell_at(t, l, r->path.slot);
            if (cell_push(c, i) != NNT_OK) return nnt_err_set(rt_err(t), NNT_ERR_OUT_OF_MEMORY, "no memory");
            c->dtype = vi.dtype;
            c->ndim = vi.ndim;
            memcpy(c->shape, vi.shape, sizeof c->shape);
            c->may_be_none = vi.may_be_none;
            c->token_axis = token_axis;
        }
    }
    return nnt_trace_save_bound(t, save_bytes, largest, largest_bytes, n_saves, rt_err(t));
}

nnt_status nnt_trace_check_emitted(nnt_trace *t, nnt_error *err)
{
    int L = t->m->info.num_layers;
    for (int layer = -1; layer < L; layer++)
        for (int slot = 0; slot < NNT_SLOT_COUNT; slot++) {
            const cell *c = cell_at(t, layer, (nnt_value_id)slot);
            if (!c || c->n == 0 || c->emitted) continue;
            char path[160], want[96];
            nnt_path_format(t->m, (nnt_value_id)slot, layer, path, sizeof path);
            return nnt_err_set(err, NNT_ERR_PLUGIN,
                               "family '%s' did not emit %s in this call (batch %d, seq %d, past %d), though its "
                               "value_info declares it served as %s %s; nothing was emitted, so no shape to compare",
                               nnt_model_family(t->m), path, t->dims.batch, t->dims.seq, t->dims.past,
                               nnt_dtype_name(c->dtype), nnt_dims_str(c->ndim, c->shape, want, sizeof want));
        }
    return NNT_OK;
}

int nnt_run_wants(const nnt_run *run, nnt_value_id slot, int layer)
{
    if (!run || !run->trace) return 0;
    const cell *c = cell_at(run->trace, layer, slot);
    return c && c->n > 0;
}

/* ---------------------------------------------------------------------------------------- */
/* Applying requests at emission.                                                            */

nnt_status nnt_trace_host_copy(nnt_run *run, const nnt_tensor *src, nnt_tensor *dst)
{
    if (nnt_tensor_alloc(dst, src->dtype, src->ndim, src->shape) != NNT_OK)
        return nnt_err_set(run->err, NNT_ERR_OUT_OF_MEMORY, "no memory to save a value");
    size_t bytes = nnt_tensor_nbytes(src);
    if (!src->device) {
        memcpy(dst->data, src->data, bytes);
        return NNT_OK;
    }
    const nnt_plugin *be = run->model->family->be;
    return be->ops.download(be->be_ctx, dst->data, src->data, bytes, run->err);
}

/* What save request rq keeps of value (host or device) under key `path`: the value, its rows
 * (nnt_trace_limit_rows), then its slice; a device value passes through host memory once. */
static nnt_status rows_gather(nnt_run *run, const request *r, const nnt_tensor *v, nnt_tensor *out);

/* value on the host (a device value copied into *tmp) with request rq's rows taken (into *rows,
 * nnt_trace_limit_rows); *src is the result: value, *tmp or *rows. */
static nnt_status host_rows(nnt_run *run, const request *rq, const nnt_tensor *value, nnt_tensor *tmp,
                            nnt_tensor *rows, const nnt_tensor **src)
{
    nnt_status st = NNT_OK;
    *src = value;
    if (value->device) {
        st = nnt_trace_host_copy(run, value, tmp);
        *src = tmp;
    }
    if (st == NNT_OK && rq->n_rows) {
        st = rows_gather(run, rq, *src, rows);
        *src = rows;
    }
    return st;
}

static nnt_status save_copy(nnt_run *run, const request *rq, nnt_value_id slot, int layer, const char *path,
                            const nnt_tensor *value, nnt_tensor *out)
{
    nnt_tensor tmp = {0}, rows = {0}, picked = {0};
    const nnt_tensor *src = value;
    nnt_status st = NNT_OK;
    /* a chunk of a longer prompt: its part of the whole save (allocated by the first chunk); a
     * value of no token axis there is the last chunk's, saved as in one call */
    const cell *c = run->trace->window.total ? cell_at(run->trace, layer, slot) : NULL;
    if (c && c->token_axis >= 0) {
        st = host_rows(run, rq, value, &tmp, &rows, &src);
        if (st == NNT_OK) st = nnt_trace_window_save(run, rq, path, slot, c->token_axis, &run->trace->window, src, out);
        nnt_tensor_free(&rows);
        nnt_tensor_free(&tmp);
        return st;
    }
    int narrowed = nnt_trace_readout_narrowed(run, slot, value);
    if (narrowed && !rq->n_slice)
        return nnt_err_set(run->err, NNT_ERR_INTERNAL, "save '%s': the readout was computed at %d of %d positions only",
                           rq->text, (int)value->shape[1], run->dims.seq);
    if (!rq->n_slice && !rq->n_rows) return nnt_trace_host_copy(run, value, out);
    st = host_rows(run, rq, value, &tmp, &rows, &src);
    if (st == NNT_OK && !rq->n_slice) { /* the rows alone: handed over as they are */
        *out = rows;
        rows = (nnt_tensor){0};
    } else if (st == NNT_OK) {
        axis_sel ax[NNT_MAX_DIMS];
        int64_t shape[NNT_MAX_DIMS];
        memcpy(shape, src->shape, sizeof shape);
        if (narrowed) shape[1] = run->dims.seq; /* the slice names positions of the call */
        st = nnt_trace_slice_resolve(rq, path, src->ndim, shape, NULL, ax, run->err);
        if (st == NNT_OK && narrowed) {
            st = nnt_trace_readout_pick(run, src, &ax[1], &picked);
            src = &picked;
            ax[1] = (axis_sel){0, 1, ax[1].count, ax[1].keep}; /* the picked positions, in order */
        }
        if (st == NNT_OK) st = nnt_trace_slice_copy(src, ax, out, run->err);
    }
    nnt_tensor_free(&picked);
    nnt_tensor_free(&rows);
    nnt_tensor_free(&tmp);
    return st;
}

static nnt_status new_result(nnt_run *run, int req, nnt_value_id slot, int layer, result **out, char *path, size_t n,
                             int *pre);

nnt_status nnt_trace_push_result(nnt_run *run, int req, nnt_value_id slot, int layer, const nnt_tensor *value)
{
    nnt_trace *t = run->trace;
    if (t->window.total) /* a later chunk of a prompt: the result its first chunk made, if any */
        for (int i = 0; i < t->n_results; i++) {
            result *e = &t->results[i];
            if (e->occurrence_of_request != req || e->slot != slot || e->layer != layer || e->chunk_seen) continue;
            e->chunk_seen = 1;
            if (!value || e->none) return NNT_OK;
            return save_copy(run, &t->reqs[req], slot, layer, e->path, value, &e->t);
        }
    result *res;
    char path[192];
    int pre;
    nnt_status st = new_result(run, req, slot, layer, &res, path, sizeof path, &pre);
    if (st != NNT_OK) return st;
    const request *rq = &t->reqs[req];
    st = value ? save_copy(run, rq, slot, layer, path + pre, value, &res->t) : NNT_OK;
    if (st != NNT_OK) {
        free(res->path);
        return st;
    }
    res->none = value == NULL;
    res->chunk_seen = 1;
    t->n_results++;
    return NNT_OK;
}

/* A new result entry at t->results[t->n_results] (not yet counted) for request req's save of
 * (slot, layer), with its key in res->path and in path[n] (grad keys' "grad:" prefix of
 * *pre bytes). */
static nnt_status new_result(nnt_run *run, int req, nnt_value_id slot, int layer, result **out, char *path, size_t n,
                             int *pre)
{
    nnt_trace *t = run->trace;
    if (t->n_results == t->cap_results) {
        int cap = t->cap_results ? 2 * t->cap_results : 32;
        result *g = realloc(t->results, (size_t)cap * sizeof *g);
        if (!g) return nnt_err_set(run->err, NNT_ERR_OUT_OF_MEMORY, "no memory");
        t->results = g;
        t->cap_results = cap;
    }
    result *res = &t->results[t->n_results];
    memset(res, 0, sizeof *res);
    /* the key (nnt.h, "saved values"): path, then @k for the request's k-th emission of the value
     * (k > 0: a later step, or a value emitted again in one call), then #r when r earlier save
     * requests cover the same value; a gradient's key is "grad:" and the same */
    const request *rq = &t->reqs[req];
    int occurrence = 0, copy = 0;
    for (int i = 0; i < t->n_results; i++)
        occurrence += t->results[i].slot == slot && t->results[i].layer == layer &&
                      t->results[i].occurrence_of_request == req;
    for (int j = 0; j < req; j++)
        copy += t->reqs[j].kind == rq->kind && t->reqs[j].path.slot == slot &&
                (t->reqs[j].path.layer == layer || t->reqs[j].path.layer == NNT_LAYER_ALL);
    *pre = rq->kind == REQ_GRAD ? snprintf(path, n, "grad:") : 0;
    nnt_path_format(run->model, slot, layer, path + *pre, n - (size_t)*pre);
    if (occurrence) snprintf(path + strlen(path), n - strlen(path), "@%d", occurrence);
    if (copy) snprintf(path + strlen(path), n - strlen(path), "#%d", copy);
    res->path = nnt_strdup(path);
    if (!res->path) return nnt_err_set(run->err, NNT_ERR_OUT_OF_MEMORY, "no memory");
    res->occurrence_of_request = req;
    res->slot = slot;
    res->layer = layer;
    res->step = run->step;
    *out = res;
    return NNT_OK;
}

nnt_status nnt_trace_open_result(nnt_run *run, int req, nnt_value_id slot, int layer, result **out)
{
    char path[192];
    int pre;
    nnt_status st = new_result(run, req, slot, layer, out, path, sizeof path, &pre);
    if (st == NNT_OK) run->trace->n_results++;
    return st;
}

static kept *find_keep(nnt_trace *t, nnt_value_id slot, int layer, int create)
{
    for (int i = 0; i < t->n_keeps; i++)
        if (t->keeps[i].slot == slot && t->keeps[i].layer == layer) return &t->keeps[i];
    if (!create) return NULL;
    if (t->n_keeps == t->cap_keeps) {
        int cap = t->cap_keeps ? 2 * t->cap_keeps : 8;
        kept *g = realloc(t->keeps, (size_t)cap * sizeof *g);
        if (!g) return NULL;
        t->keeps = g;
        t->cap_keeps = cap;
    }
    kept *k = &t->keeps[t->n_keeps++];
    memset(k, 0, sizeof *k);
    k->slot = slot;
    k->layer = layer;
    return k;
}

static void store_f(nnt_tensor *v, int64_t i, double x)
{
    if (v->dtype == NNT_F32)
        ((float *)v->data)[i] = (float)x;
    else if (v->dtype == NNT_I32)
        ((int32_t *)v->data)[i] = (int32_t)x;
    else if (v->dtype == NNT_I64)
        ((int64_t *)v->data)[i] = (int64_t)x;
    else if (v->dtype == NNT_BF16)
        ((uint16_t *)v->data)[i] = nnt_f32_to_bf16((float)x);
    else if (v->dtype == NNT_F16)
        ((uint16_t *)v->data)[i] = nnt_f32_to_f16((float)x);
}

/* Whether position q of a list (nnt.h, "token positions") names the token at position p of a row
 * whose newest token so far is end - 1, in a call at session step `step`. */
static int position_names(int q, int step, int p, int end)
{
    if (q == NNT_POS_ALL || (q == NNT_POS_PROMPT && step == 0) || (q == NNT_POS_GENERATED && step > 0)) return 1;
    if (q == NNT_POS_PROMPT || q == NNT_POS_GENERATED) return 0;
    return q >= 0 ? q == p : (int64_t)end + q == p;
}

/* Whether a list of positions (n == 0: every token) chooses that token. */
static int position_chosen(const int *list, int n, int step, int p, int end)
{
    if (n == 0) return 1;
    for (int i = 0; i < n; i++)
        if (position_names(list[i], step, p, end)) return 1;
    return 0;
}

/* The rows request r edits, k = 0 .. n_sel - 1: row_of(r, k), every row of a batch of B when r
 * names none. */
static int64_t rows_chosen(const request *r, int64_t B)
{
    return r->n_rows ? r->n_rows : B;
}
static int64_t row_of(const request *r, int64_t k)
{
    return r->n_rows ? r->rows[k] : k;
}

/* A host copy [n_rows, ...] of request r's rows of host value v (the rows in r's order). */
static nnt_status rows_gather(nnt_run *run, const request *r, const nnt_tensor *v, nnt_tensor *out)
{
    int64_t shape[NNT_MAX_DIMS];
    memcpy(shape, v->shape, sizeof shape);
    shape[0] = r->n_rows;
    if (nnt_tensor_alloc(out, v->dtype, v->ndim, shape) != NNT_OK)
        return nnt_err_set(run->err, NNT_ERR_OUT_OF_MEMORY, "no memory for the rows of a value");
    size_t row = v->shape[0] ? nnt_tensor_nbytes(v) / (size_t)v->shape[0] : 0;
    for (int k = 0; k < r->n_rows; k++)
        memcpy((char *)out->data + (size_t)k * row, (const char *)v->data + (size_t)r->rows[k] * row, row);
    return NNT_OK;
}

/* Writes part [n_rows, ...] (rows_gather's) back into host value v. */
static void rows_scatter(const request *r, const nnt_tensor *part, nnt_tensor *v)
{
    size_t row = v->shape[0] ? nnt_tensor_nbytes(v) / (size_t)v->shape[0] : 0;
    for (int k = 0; k < r->n_rows; k++)
        memcpy((char *)v->data + (size_t)r->rows[k] * row, (const char *)part->data + (size_t)k * row, row);
}

/* The edit callback of r, on the rows r chooses: a callback of a request limited to rows sees
 * those rows only, [n_rows, ...] in the order given. */
static nnt_status apply_callback(nnt_run *run, const request *r, const char *path, int layer, nnt_tensor *v)
{
    nnt_tensor part = {0}, *target = v;
    if (r->n_rows) {
        nnt_status st = rows_gather(run, r, v, &part);
        if (st != NNT_OK) return st;
        target = &part;
    }
    nnt_error cb;
    nnt_err_clear(&cb);
    nnt_runtime *rt = run->model->rt;
    nnt_guard_callback(rt, 1); /* what the callback calls on this runtime is refused */
    nnt_status st = r->fn(r->user, path, layer, target, &cb);
    nnt_guard_callback(rt, 0);
    if (st != NNT_OK) {
        nnt_tensor_free(&part);
        return nnt_err_set(run->err, NNT_ERR_CALLBACK, "edit callback on %s failed (%s): %s", path, nnt_status_str(st),
                           cb.msg[0] ? cb.msg : "no message");
    }
    if (r->n_rows) rows_scatter(r, &part, v);
    nnt_tensor_free(&part);
    return NNT_OK;
}

/* SET (add 0) or ADD (add 1) on the rows r chooses, whole: the tensor is one row's unit
 * (broadcast: an add may give trailing axes of it) or one unit per listed row. */
static void apply_rows_write(const request *r, nnt_tensor *v, int add)
{
    int64_t B = v->shape[0], per_row = B ? nnt_tensor_numel(v) / B : 0, pn = nnt_tensor_numel(&r->param);
    int each = r->param.ndim == v->ndim; /* [n_rows, ...unit] */
    for (int64_t k = 0; k < rows_chosen(r, B) && pn > 0; k++) {
        int64_t base = row_of(r, k) * per_row;
        for (int64_t j = 0; j < per_row; j++) {
            double x = nnt_tensor_get_f64(&r->param, each ? k * per_row + j : j % pn);
            store_f(v, base + j, add ? nnt_tensor_get_f64(v, base + j) + r->factor * x : x);
        }
    }
}

/* SET / ADD at token positions of the chosen rows (value [batch, seq, ...] of the call): each
 * listed position writes the unit at every token it names, one unit for all or one per position. */
static nnt_status apply_position_write(nnt_run *run, const request *r, const char *path, nnt_tensor *v, int add)
{
    const nnt_forward_args *a = run->args;
    int64_t B = v->shape[0], T = v->ndim > 1 ? v->shape[1] : 0, n = nnt_tensor_numel(v);
    if (!a || B != a->batch || T != a->seq)
        return nnt_err_set(run->err, NNT_ERR_INTERNAL, "%s at positions: the value is not [batch, seq, ...] of the call",
                           path);
    int64_t inner = n / (B * T), pn = nnt_tensor_numel(&r->param);
    int each = r->param.ndim == v->ndim - 1; /* [n_positions, ...unit] */
    for (int64_t k = 0; k < rows_chosen(r, B) && pn > 0; k++) {
        int64_t b = row_of(r, k);
        const int32_t *real = a->attention_mask + b * (a->past + T) + a->past;
        int end = 0; /* the row's tokens so far, this call's included */
        for (int64_t s = 0; s < T; s++)
            if (real[s]) end = a->positions[b * T + s] + 1;
        for (int64_t s = 0; s < T; s++)
            for (int q = 0; real[s] && q < r->n_positions; q++) {
                if (!position_names(r->positions[q], a->step, a->positions[b * T + s], end)) continue;
                for (int64_t j = 0; j < inner; j++) {
                    int64_t i = (b * T + s) * inner + j;
                    double x = nnt_tensor_get_f64(&r->param, each ? q * inner + j : j % pn);
                    store_f(v, i, add ? nnt_tensor_get_f64(v, i) + r->factor * x : x);
                }
            }
    }
    return NNT_OK;
}

/* SCALE or ZERO of the rows r chooses. */
static void apply_rows_scale(const request *r, nnt_tensor *v, int zero)
{
    int64_t B = v->shape[0], per_row = B ? nnt_tensor_numel(v) / B : 0;
    size_t row_bytes = B ? nnt_tensor_nbytes(v) / (size_t)B : 0;
    for (int64_t k = 0; k < rows_chosen(r, B); k++) {
        int64_t b = row_of(r, k);
        if (zero) {
            memset((char *)v->data + (size_t)b * row_bytes, 0, row_bytes);
            continue;
        }
        for (int64_t j = 0; j < per_row; j++) store_f(v, b * per_row + j, nnt_tensor_get_f64(v, b * per_row + j) * r->factor);
    }
}

/* value[i...] := fill where the kept mask equals r->equals, on the rows r chooses (the mask's
 * shape is a prefix of the value's, its leading axis the batch). */
static nnt_status apply_masked_fill(nnt_run *run, const request *r, const char *path, int layer, nnt_tensor *v)
{
    kept *k = find_keep(run->trace, r->where_slot, layer, 0);
    if (!k || !k->valid) {
        char wpath[160];
        nnt_path_format(run->model, r->where_slot, layer, wpath, sizeof wpath);
        return nnt_err_set(run->err, NNT_ERR_STATE,
                           "masked fill of %s: the mask %s is not emitted before it in this family's forward", path,
                           wpath);
    }
    int64_t n = nnt_tensor_numel(v), mn = nnt_tensor_numel(&k->t);
    int64_t inner = mn ? n / mn : 0;
    int64_t B = r->n_rows && k->t.ndim > 0 ? k->t.shape[0] : 1, per_row = B ? mn / B : 0;
    for (int64_t q = 0; q < (r->n_rows ? r->n_rows : 1); q++) {
        int64_t lo = r->n_rows ? r->rows[q] * per_row : 0, hi = r->n_rows ? lo + per_row : mn;
        for (int64_t i = lo; i < hi; i++) {
            if ((int64_t)nnt_tensor_get_f64(&k->t, i) != r->equals) continue;
            for (int64_t j = 0; j < inner; j++) store_f(v, i * inner + j, r->fill);
        }
    }
    return NNT_OK;
}

/* STEER: value [batch, seq, ..., hidden] += factor * vector at the chosen tokens of the chosen
 * rows: a [hidden] vector on every stream, a [streams, hidden] one row per stream (j % H walks the
 * token's streams x hidden either way); a token's position is its index among its row's real
 * tokens. */
static nnt_status apply_steer(nnt_run *run, const request *r, const char *path, nnt_tensor *v)
{
    const nnt_forward_args *a = run->args;
    int64_t n = nnt_tensor_numel(v), B = v->shape[0], T = v->shape[1], H = nnt_tensor_numel(&r->param);
    int64_t inner = n / (B * T);
    if (!a || B != a->batch || T != a->seq)
        return nnt_err_set(run->err, NNT_ERR_INTERNAL, "steer %s: the value is not [batch, seq, ...] of the call", path);
    for (int64_t k = 0; k < rows_chosen(r, B); k++) {
        int64_t b = row_of(r, k);
        const int32_t *real = a->attention_mask + b * (a->past + T) + a->past;
        int end = 0; /* the row's tokens so far, this call's included */
        for (int64_t s = 0; s < T; s++)
            if (real[s]) end = a->positions[b * T + s] + 1;
        for (int64_t s = 0; s < T; s++) {
            if (!real[s] || !position_chosen(r->positions, r->n_positions, a->step, a->positions[b * T + s], end))
                continue;
            for (int64_t j = 0; j < inner; j++)
                store_f(v, (b * T + s) * inner + j,
                        nnt_tensor_get_f64(v, (b * T + s) * inner + j) + (double)r->factor * nnt_tensor_get_f64(&r->param, j % H));
        }
    }
    return NNT_OK;
}

/* Applies one edit to a host tensor. */
nnt_status nnt_trace_apply_edit(nnt_run *run, const request *r, int layer, nnt_tensor *v)
{
    int64_t n = nnt_tensor_numel(v);
    char path[160];
    nnt_path_format(run->model, r->path.slot, layer, path, sizeof path);
    int limited = r->n_rows > 0;
    switch (r->kind) {
    case REQ_EDIT_FN: return apply_callback(run, r, path, layer, v);
    case REQ_HOOK: return r->hook_ops->apply(run, r->user, path, layer, v);
    case REQ_SET:
    case REQ_ADD:
        if (r->by_position) return apply_position_write(run, r, path, v, r->kind == REQ_ADD);
        if (limited) {
            apply_rows_write(r, v, r->kind == REQ_ADD);
            return NNT_OK;
        }
        if (r->kind == REQ_SET) return nnt_convert(r->param.data, r->param.dtype, v->data, v->dtype, n, run->err);
        for (int64_t i = 0, pn = nnt_tensor_numel(&r->param); i < n; i++) /* broadcast over the leading axes */
            store_f(v, i, nnt_tensor_get_f64(v, i) + (double)r->factor * nnt_tensor_get_f64(&r->param, i % pn));
        return NNT_OK;
    case REQ_SCALE:
    case REQ_ZERO:
        if (!limited && r->kind == REQ_ZERO) {
            memset(v->data, 0, nnt_tensor_nbytes(v));
            return NNT_OK;
        }
        if (!limited) {
            for (int64_t i = 0; i < n; i++) store_f(v, i, nnt_tensor_get_f64(v, i) * r->factor);
            return NNT_OK;
        }
        apply_rows_scale(r, v, r->kind == REQ_ZERO);
        return NNT_OK;
    case REQ_MASKED_FILL: return apply_masked_fill(run, r, path, layer, v);
    case REQ_COPY_FROM: {
        kept *k = find_keep(run->trace, r->where_slot, r->where_layer, 0);
        if (!k || !k->valid || nnt_tensor_numel(&k->t) != n) {
            char wpath[160];
            nnt_path_format(run->model, r->where_slot, r->where_layer, wpath, sizeof wpath);
            return nnt_err_set(run->err, NNT_ERR_STATE, "%s cannot take %s: it was not emitted before it", path, wpath);
        }
        return nnt_convert(k->t.data, k->t.dtype, v->data, v->dtype, n, run->err);
    }
    case REQ_STEER: return apply_steer(run, r, path, v);
    default: return NNT_OK;
    }
}

nnt_status nnt_run_emit(nnt_run *run, nnt_value_id slot, int layer, nnt_tensor *value)
{
    if (!run->trace) return NNT_OK;
    nnt_trace *t = run->trace;
    cell *c = cell_at(t, layer, slot);
    if (!c || c->n == 0) return NNT_OK;
    /* the family contract: a requested value comes as value_info declared it */
    c->emitted++;
    int64_t declared[NNT_MAX_DIMS];
    memcpy(declared, c->shape, sizeof declared);
    if (value && nnt_trace_readout_narrowed(run, slot, value)) declared[1] = value->shape[1]; /* at the positions asked */
    if (value ? value->dtype != c->dtype || !nnt_shape_equal(value->ndim, value->shape, c->ndim, declared)
              : !c->may_be_none) {
        char path[160], want[96], got[96];
        nnt_path_format(run->model, slot, layer, path, sizeof path);
        nnt_dims_str(c->ndim, c->shape, want, sizeof want);
        if (!value)
            snprintf(got, sizeof got, "None");
        else
            nnt_shape_str(value, got, sizeof got);
        return nnt_err_set(run->err, NNT_ERR_PLUGIN,
                           "family '%s' emitted %s as %s %s, but its value_info declares %s %s for this call "
                           "(batch %d, seq %d, past %d)%s",
                           nnt_model_family(run->model), path, value ? nnt_dtype_name(value->dtype) : "", got,
                           nnt_dtype_name(c->dtype), want, t->dims.batch, t->dims.seq, t->dims.past,
                           value ? "" : " and not may_be_none");
    }
    const nnt_plugin *be = run->model->family->be;
    nnt_tensor host = {0};
    int on_device = value && value->device;
    int dirty = 0;
    nnt_status st = NNT_OK;
    for (int i = 0; i < c->n && st == NNT_OK; i++) {
        const request *r = &t->reqs[c->ids[i]];
        if (r->kind == REQ_SAVE) {
            if (t->grad.saves_off) continue; /* a block recomputed for its backward: saved by the first pass */
            run->current_request = c->ids[i];
            st = nnt_trace_push_result(run, c->ids[i], slot, layer, on_device && dirty ? &host : value);
            continue;
        }
        if (r->kind == REQ_GRAD || r->kind == REQ_COTANGENT) continue; /* nnt_trace_grad_emit, below */
        if (r->kind == REQ_KEEP) {
            kept *k = find_keep(t, slot, layer, 1);
            if (!k) {
                st = nnt_err_set(run->err, NNT_ERR_OUT_OF_MEMORY, "no memory");
                break;
            }
            nnt_tensor_free(&k->t);
            k->valid = 0;
            if (value) {
                st = nnt_trace_host_copy(run, on_device && dirty ? &host : value, &k->t);
                k->valid = st == NNT_OK;
            }
            continue;
        }
        if (!value) {
            char path[160];
            nnt_path_format(run->model, slot, layer, path, sizeof path);
            st = nnt_err_set(run->err, NNT_ERR_STATE,
                             "%s is None in this call (e.g. a recurrent state at the start of a prompt): there is "
                             "nothing to edit", path);
            break;
        }
        nnt_tensor *target = value;
        if (on_device) {
            if (!host.data) {
                st = nnt_trace_host_copy(run, value, &host);
                if (st != NNT_OK) break;
            }
            target = &host;
        }
        st = nnt_trace_apply_edit(run, r, layer, target);
        if (st != NNT_OK && r->label) nnt_err_prefix(run->err, "%s", r->label);
        dirty = 1;
    }
    if (st == NNT_OK && on_device && dirty)
        st = be->ops.upload(be->be_ctx, value->data, host.data, nnt_tensor_nbytes(value), run->err);
    nnt_tensor_free(&host);
    return st;
}

/* ---------------------------------------------------------------------------------------- */

/* Reads a trailing "@k" or "#r" (digits) off key (modified in place); 1 when found. */
static int take_suffix(char *key, char mark, long *out)
{
    char *at = strrchr(key, mark);
    if (!at || !at[1]) return 0;
    char *end;
    errno = 0;
    long v = strtol(at + 1, &end, 10);
    if (*end || errno || v < 0 || at[1] == '+' || at[1] == '-' || at[1] == ' ') return 0;
    *out = v;
    *at = '\0';
    return 1;
}

/* The result saved under key (any path spelling, suffixes @k and #r in either order), or NULL. */
static const result *find_result(const nnt_trace *t, const char *key)
{
    if (!t || !key) return NULL;
    char base[192], canon[256];
    if (strlen(key) >= sizeof base) return NULL;
    snprintf(base, sizeof base, "%s", key);
    long k = 0, r = 0;
    for (int i = 0; i < 2; i++) /* "path@k#r" or "path#r@k" */
        if (!take_suffix(base, '#', &r)) take_suffix(base, '@', &k);
    const char *want = key;
    nnt_path p;
    nnt_error scratch;
    int pre = strncmp(base, "grad:", 5) == 0 ? 5 : 0; /* a gradient's key: "grad:" and a path */
    if (nnt_path_parse(t->m, base + pre, &p, &scratch) == NNT_OK && p.layer != NNT_LAYER_ALL) {
        snprintf(canon, sizeof canon, "%s", pre ? "grad:" : "");
        nnt_path_format(t->m, p.slot, p.layer, canon + pre, sizeof canon - (size_t)pre);
        if (k) snprintf(canon + strlen(canon), sizeof canon - strlen(canon), "@%ld", k);
        if (r) snprintf(canon + strlen(canon), sizeof canon - strlen(canon), "#%ld", r);
        want = canon;
    }
    for (int i = 0; i < t->n_results; i++)
        if (strcmp(t->results[i].path, want) == 0) return &t->results[i];
    return NULL;
}

static nnt_status trace_import_result_held(nnt_trace *t, const char *key, const nnt_tensor *value)
{
    if (!t || !key) return NNT_ERR_INVALID_ARGUMENT;
    nnt_error *err = &t->m->rt->err;
    nnt_err_clear(err);
    if (!*key || strlen(key) >= 192)
        return nnt_err_set(err, NNT_ERR_INVALID_ARGUMENT, "import: a key of 1 to 191 characters is needed (got %zu)",
                           strlen(key));
    if (find_result(t, key)) return nnt_err_set(err, NNT_ERR_CONFLICT, "import: the trace already holds a value under '%s'", key);
    if (value && (value->device || (!value->data && nnt_tensor_numel(value) > 0)))
        return nnt_err_set(err, NNT_ERR_INVALID_ARGUMENT, "import: '%s' must be a host tensor with its data", key);
    return nnt_trace_push_named(t, key, value, err);
}

nnt_status nnt_trace_import_result(nnt_trace *t, const char *key, const nnt_tensor *value)
{
    NNT_GUARDED(nnt_guard_trace_rt(t), "nnt_trace_import_result", trace_import_result_held(t, key, value));
}

nnt_status nnt_trace_push_named(nnt_trace *t, const char *key, const nnt_tensor *value, nnt_error *err)
{
    if (t->n_results == t->cap_results) {
        int cap = t->cap_results ? 2 * t->cap_results : 32;
        result *g = realloc(t->results, (size_t)cap * sizeof *g);
        if (!g) return nnt_err_set(err, NNT_ERR_OUT_OF_MEMORY, "no memory");
        t->results = g;
        t->cap_results = cap;
    }
    result *res = &t->results[t->n_results];
    memset(res, 0, sizeof *res);
    res->occurrence_of_request = -1; /* no request of this trace made it */
    res->slot = (nnt_value_id)-1;
    res->layer = -2;
    res->none = value == NULL;
    if (value) {
        if (nnt_tensor_alloc(&res->t, value->dtype, value->ndim, value->shape) != NNT_OK)
            return nnt_err_set(err, NNT_ERR_OUT_OF_MEMORY, "no memory for '%s'", key);
        memcpy(res->t.data, value->data, nnt_tensor_nbytes(value));
    }
    if (!(res->path = nnt_strdup(key))) {
        nnt_tensor_free(&res->t);
        return nnt_err_set(err, NNT_ERR_OUT_OF_MEMORY, "no memory");
    }
    t->n_results++;
    return NNT_OK;
}

const nnt_tensor *nnt_trace_get(const nnt_trace *t, const char *path)
{
    const result *r = find_result(t, path);
    return r && !r->none ? &r->t : NULL;
}

nnt_status nnt_trace_lookup(const nnt_trace *t, const char *key, const nnt_tensor **value, int *is_none)
{
    if (value) *value = NULL;
    if (is_none) *is_none = 0;
    if (!t || !key) return NNT_ERR_INVALID_ARGUMENT;
    const result *r = find_result(t, key);
    if (!r) return NNT_ERR_NOT_FOUND;
    if (is_none) *is_none = r->none;
    if (value && !r->none) *value = &r->t;
    return NNT_OK;
}

int nnt_trace_result_count(const nnt_trace *t)
{
    return t ? t->n_results : 0;
}

nnt_status nnt_trace_result(const nnt_trace *t, int i, const char **path, const nnt_tensor **value)
{
    if (!t || i < 0 || i >= t->n_results) return NNT_ERR_NOT_FOUND;
    if (path) *path = t->results[i].path;
    if (value) *value = t->results[i].none ? NULL : &t->results[i].t;
    return NNT_OK;
}

nnt_status nnt_trace_emit(const nnt_trace *t, const nnt_st_sink *sink, int n_extra, const char *const *extra_keys,
                          const nnt_tensor *const *extra)
{
    if (!t || !sink || n_extra < 0) return NNT_ERR_INVALID_ARGUMENT;
    nnt_error *err = &t->m->rt->err;
    const char **keys = calloc((size_t)(t->n_results + n_extra) + 1, sizeof *keys);
    const nnt_tensor **vals = calloc((size_t)(t->n_results + n_extra) + 1, sizeof *vals);
    size_t none_len = 1;
    for (int i = 0; i < t->n_results; i++) none_len += t->results[i].none ? strlen(t->results[i].path) + 1 : 0;
    char *none = malloc(none_len);
    cJSON *meta = cJSON_CreateObject();
    char *meta_text = NULL;
    nnt_status st = NNT_OK;
    if (!keys || !vals || !none || !meta) st = nnt_err_set(err, NNT_ERR_OUT_OF_MEMORY, "no memory");
    int n = 0;
    size_t len = 0;
    for (int i = 0; st == NNT_OK && i < t->n_results; i++) {
        const result *r = &t->results[i];
        if (r->none) { /* recorded as absent in the metadata: "none_values" lists the keys */
            len += (size_t)snprintf(none + len, none_len - len, "%s%s", len ? "," : "", r->path);
            continue;
        }
        keys[n] = r->path;
        vals[n++] = &r->t;
    }
    if (st == NNT_OK) {
        none[len] = '\0';
        if (!cJSON_AddStringToObject(meta, "producer", "nnt") ||
            !cJSON_AddStringToObject(meta, "family", nnt_model_family(t->m)) ||
            !cJSON_AddStringToObject(meta, "format", "pt") || (len && !cJSON_AddStringToObject(meta, "none_values", none)) ||
            !(meta_text = cJSON_PrintUnformatted(meta)))
            st = nnt_err_set(err, NNT_ERR_OUT_OF_MEMORY, "no memory");
    }
    for (int i = 0; st == NNT_OK && i < n_extra; i++) {
        keys[n] = extra_keys[i];
        vals[n++] = extra[i];
    }
    if (st == NNT_OK) st = nnt_st_emit(sink, n, keys, vals, meta_text, err);
    cJSON_free(meta_text);
    cJSON_Delete(meta);
    free(none);
    free(keys);
    free(vals);
    return st;
}

static nnt_status trace_write_safetensors_held(const nnt_trace *t, const char *file)
{
    if (!t || !file) return NNT_ERR_INVALID_ARGUMENT;
    nnt_st_sink sink = {.file = file};
    return nnt_trace_emit(t, &sink, 0, NULL, NULL);
}

nnt_status nnt_trace_write_safetensors(const nnt_trace *t, const char *file)
{
    NNT_GUARDED(nnt_guard_trace_rt(t), "nnt_trace_write_safetensors", trace_write_safetensors_held(t, file));
}
