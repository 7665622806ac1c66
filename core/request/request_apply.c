/* request_apply.c - a request's edits and saves added to a trace (nnt_request_apply), in the
 * document's order, through the C API's own calls; each failure names the entry's field, and
 * each request made is labelled with it for the checks made when the run starts. */
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "request_internal.h"

typedef struct applier {
    const nnt_request *r;
    nnt_trace *t;
    nnt_error *err;
    int L, experts; /* the model's blocks and experts */
    const nnt_request_callback *callbacks;
    int n_callbacks;
    int row0, n_window; /* n_window > 0: the request's rows are rows row0.. of a shared batch */
    int *window;        /* [n_window]: row0, row0 + 1, ... */
} applier;

/* Prefixes the trace API's message with "NAME: FIELD" (field: the entry, then sub). */
static nnt_status blame(const applier *a, nnt_status st, const char *entry, const char *sub)
{
    nnt_err_prefix(a->err, "%s: %s%s", a->r->name, entry, sub);
    return st;
}

/* An error of ours naming "NAME: ENTRYSUB". */
static nnt_status refuse(const applier *a, nnt_status st, const char *entry, const char *sub, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
static nnt_status refuse(const applier *a, nnt_status st, const char *entry, const char *sub, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return nnt_err_set(a->err, st, "%s: %s%s: %s", a->r->name, entry, sub, msg);
}

/* The field a trace API failure of an edit on a value path points at. */
static const char *path_field(const req_edit *e, nnt_status st, const char *msg)
{
    if (e->n_features) return st == NNT_ERR_INDEX ? ".features" : ".path";
    if (st == NNT_ERR_SHAPE && e->has_tensor) return ".tensor";
    if (e->op == REQ_OP_MASKED_FILL && e->where) { /* the API quotes the path at fault first */
        size_t n = strlen(e->where);
        if (msg[0] == '\'' && strncmp(msg + 1, e->where, n) == 0 && msg[n + 1] == '\'') return ".where";
        if (!strncmp(msg, "masked fill of '", 16)) return ".where"; /* a mask of another block or module */
    }
    if (e->op == REQ_OP_CALLBACK && st == NNT_ERR_INVALID_ARGUMENT) return ".callback";
    if (e->op == REQ_OP_SKIP_LAYERS || e->op == REQ_OP_ABLATE_EXPERT || e->op == REQ_OP_STEPS) return ""; /* no path */
    return e->op == REQ_OP_STEER ? (e->has_tensor && st != NNT_ERR_INDEX ? ".tensor" : "") : ".path";
}

/* A block or expert number against the model: NNT_ERR_INDEX naming the field. */
static nnt_status check_number(const applier *a, const char *entry, const char *sub, int v, int n, const char *what)
{
    if (v < n) return NNT_OK;
    if (n <= 0) return refuse(a, NNT_ERR_INDEX, entry, sub, "%s %d is out of range; the model has no %ss", what, v, what);
    return refuse(a, NNT_ERR_INDEX, entry, sub, "%s %d is out of range; the model has %ss 0..%d", what, v, what, n - 1);
}

/* The C API call of edit e. */
static nnt_status call_api(const applier *a, const req_edit *e, const char *entry)
{
    nnt_trace *t = a->t;
    float f = (float)e->factor;
    nnt_status st = NNT_OK;
    if (e->n_features) { /* an edit of the features of the SAE attached to a value */
        nnt_sae_edit_op op = e->op == REQ_OP_ZERO ? NNT_SAE_EDIT_ZERO : e->op == REQ_OP_SCALE ? NNT_SAE_EDIT_SCALE
                                                                                               : NNT_SAE_EDIT_FILL;
        float value = e->op == REQ_OP_SCALE ? f : (float)e->fill;
        return nnt_trace_sae_edit(t, e->path, op, e->features, e->n_features, value);
    }
    switch (e->op) {
    case REQ_OP_SAVE: return nnt_trace_save(t, e->path);
    case REQ_OP_ZERO: return nnt_trace_zero(t, e->path);
    case REQ_OP_SCALE: return nnt_trace_scale(t, e->path, f);
    case REQ_OP_SET: return nnt_trace_set(t, e->path, &e->tensor.t);
    case REQ_OP_ADD: return nnt_trace_add(t, e->path, &e->tensor.t, f);
    case REQ_OP_MASKED_FILL: {
        nnt_path p; /* each path on its own first, so that a failure names its field */
        if ((st = nnt_path_parse(nnt_trace_model(t), e->path, &p, a->err)) != NNT_OK) return blame(a, st, entry, ".path");
        if ((st = nnt_path_parse(nnt_trace_model(t), e->where, &p, a->err)) != NNT_OK) return blame(a, st, entry, ".where");
        return nnt_trace_masked_fill(t, e->path, e->where, e->equals, (float)e->fill);
    }
    case REQ_OP_ABLATE_EXPERT:
        if ((st = check_number(a, entry, ".layer", e->a, a->L, "block")) != NNT_OK) return st;
        if ((st = check_number(a, entry, ".expert", e->b, a->experts, "expert")) != NNT_OK) return st;
        return nnt_trace_ablate_expert(t, e->a, e->b);
    case REQ_OP_SKIP_LAYERS:
        if ((st = check_number(a, entry, ".start", e->a, a->L, "block")) != NNT_OK) return st;
        if ((st = check_number(a, entry, ".end", e->b, a->L, "block")) != NNT_OK) return st;
        return nnt_trace_skip_layers(t, e->a, e->b);
    case REQ_OP_STEER:
        if ((st = check_number(a, entry, ".first", e->a, a->L, "block")) != NNT_OK) return st;
        if ((st = check_number(a, entry, ".last", e->b, a->L, "block")) != NNT_OK) return st;
        return nnt_trace_steer(t, e->a, e->b, e->positions, e->n_positions, &e->tensor.t, f);
    case REQ_OP_STEPS: return nnt_trace_steps(t, e->a, e->b);
    case REQ_OP_CALLBACK:
        if (e->callback >= a->n_callbacks)
            return refuse(a, NNT_ERR_INVALID_ARGUMENT, entry, ".callback", "index %d, but %d callbacks were given",
                          e->callback, a->n_callbacks);
        if (!a->callbacks[e->callback].fn)
            return refuse(a, NNT_ERR_INVALID_ARGUMENT, entry, ".callback", "callback %d has no function", e->callback);
        return nnt_trace_edit(t, e->path, a->callbacks[e->callback].fn, a->callbacks[e->callback].user);
    default: return NNT_ERR_INTERNAL;
    }
}

/* Edit i: the call, then its positions and rows, then the label of what it added. */
static nnt_status apply_edit(const applier *a, int i)
{
    const req_edit *e = &a->r->edits[i];
    char entry[48], label[REQ_FIELD_MAX + 48];
    snprintf(entry, sizeof entry, "edits[%d]", i);
    snprintf(label, sizeof label, "%s: %s", a->r->name, entry);
    int mark = nnt_trace_request_count(a->t);
    nnt_status st = call_api(a, e, entry);
    if (st != NNT_OK) {
        /* our own refusals name their field already */
        size_t n = strlen(label);
        if (strncmp(a->err->msg, label, n) == 0 && (a->err->msg[n] == '.' || a->err->msg[n] == ':')) return st;
        return blame(a, st, entry, path_field(e, st, a->err->msg));
    }
    if (e->has_positions && e->op != REQ_OP_STEER &&
        (st = nnt_trace_limit_positions(a->t, mark, e->positions, e->n_positions)) != NNT_OK)
        return blame(a, st, entry, ".positions");
    if (e->n_rows > 0 && a->n_window) { /* its rows, counted in the shared batch: never another request's */
        for (int k = 0; k < e->n_rows; k++)
            if (e->rows[k] >= a->n_window) {
                char sub[32];
                snprintf(sub, sizeof sub, ".rows[%d]", k);
                return refuse(a, NNT_ERR_INDEX, entry, sub, "row %d is not in this request's batch of %d rows",
                              e->rows[k], a->n_window);
            }
        int *rows = malloc(sizeof *rows * (size_t)e->n_rows);
        if (!rows) return nnt_err_set(a->err, NNT_ERR_OUT_OF_MEMORY, "no memory");
        for (int k = 0; k < e->n_rows; k++) rows[k] = e->rows[k] + a->row0;
        st = nnt_trace_limit_rows(a->t, mark, rows, e->n_rows);
        free(rows);
        if (st != NNT_OK) return blame(a, st, entry, ".rows");
    } else if (e->n_rows && (st = nnt_trace_limit_rows(a->t, mark, e->rows, e->n_rows)) != NNT_OK) {
        return blame(a, st, entry, ".rows");
    } else if (!e->n_rows && a->n_window && (st = nnt_trace_limit_rows(a->t, mark, a->window, a->n_window)) != NNT_OK) {
        return blame(a, st, entry, "");
    }
    return nnt_trace_label_since(a->t, mark, label, 0);
}

/* The edits and saves of r on t; with n_window > 0, limited to rows row0 .. row0 + n_window - 1
 * (nnt_request_apply_rows). */
static nnt_status apply_window(const nnt_request *r, nnt_trace *t, const nnt_request_callback *callbacks,
                               int n_callbacks, int row0, int n_window)
{
    if (!r || !t || row0 < 0 || n_window < 0) return NNT_ERR_INVALID_ARGUMENT;
    nnt_model *m = nnt_trace_model(t);
    applier a = {.r = r, .t = t, .err = &m->rt->err, .L = m->info.num_layers, .experts = m->info.num_experts,
                 .callbacks = callbacks, .n_callbacks = callbacks ? n_callbacks : 0, .row0 = row0,
                 .n_window = n_window};
    nnt_err_clear(a.err);
    if (n_window && !(a.window = malloc(sizeof *a.window * (size_t)n_window)))
        return nnt_err_set(a.err, NNT_ERR_OUT_OF_MEMORY, "no memory");
    for (int k = 0; k < n_window; k++) a.window[k] = row0 + k;
    if (n_callbacks < 0 || (n_callbacks > 0 && !callbacks))
        return nnt_err_set(a.err, NNT_ERR_INVALID_ARGUMENT, "%s: %d callbacks but no array of them", r->name, n_callbacks);
    int start = nnt_trace_request_count(t);
    nnt_status st = nnt_trace_steps(t, 0, -1); /* the edits start at every step, as a document reads */
    if (st == NNT_OK) st = req_saes_apply(r, t, a.err); /* the SAEs first: the edits may name their features */
    for (int i = 0; st == NNT_OK && i < r->n_edits; i++) st = apply_edit(&a, i);
    if (st == NNT_OK) st = nnt_trace_steps(t, 0, -1); /* the saves apply at every step */
    for (int i = 0; st == NNT_OK && i < r->n_saves; i++) {
        char entry[48], label[REQ_FIELD_MAX + 48];
        snprintf(entry, sizeof entry, "saves[%d]", i);
        snprintf(label, sizeof label, "%s: %s", r->name, entry);
        int mark = nnt_trace_request_count(t);
        st = nnt_trace_save(t, r->saves[i]);
        if (st != NNT_OK) st = blame(&a, st, entry, "");
        else if (n_window && (st = nnt_trace_limit_rows(t, mark, a.window, n_window)) != NNT_OK) st = blame(&a, st, entry, "");
        else st = nnt_trace_label_since(t, mark, label, 1);
    }
    if (st == NNT_OK && r->has_grad) st = req_grad_apply(r, t, a.err);
    if (st != NNT_OK) { /* the trace is left as it was, its step range at every step */
        nnt_trace_drop_since(t, start);
        nnt_error keep = *a.err;
        nnt_trace_steps(t, 0, -1);
        *a.err = keep;
    }
    free(a.window);
    return st;
}

static nnt_status request_apply_held(const nnt_request *r, nnt_trace *t, const nnt_request_callback *callbacks,
                                     int n_callbacks)
{
    return apply_window(r, t, callbacks, n_callbacks, 0, 0);
}

nnt_status nnt_request_apply_rows(const nnt_request *r, nnt_trace *t, int row0, int n_rows)
{
    if (n_rows < 1) return NNT_ERR_INVALID_ARGUMENT;
    return apply_window(r, t, NULL, 0, row0, n_rows);
}

nnt_status nnt_request_apply(const nnt_request *r, nnt_trace *t, const nnt_request_callback *callbacks, int n_callbacks)
{
    NNT_GUARDED(nnt_guard_trace_rt(t), "nnt_request_apply", request_apply_held(r, t, callbacks, n_callbacks));
}
