/* trace_grad.c - gradient requests of a trace: the scalar (a metric of the logits, the
 * language-model loss, or cotangents the caller hands in), the checks before the forward, the
 * marks and edit Jacobians recorded on the model's tape at emission, and the backward after the
 * forward that saves each requested gradient as "grad:PATH" beside "metric". docs/gradients.md
 * describes what is differentiated and how. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "trace_internal.h"
#include "grad/tape.h"
#include "nnt/nnt_methods.h"

static nnt_error *t_err(nnt_trace *t)
{
    return &t->m->rt->err;
}

/* The tape's tag of a value: its cell's index. */
static int cell_tag(int layer, nnt_value_id slot)
{
    return (layer + 1) * NNT_SLOT_COUNT + (int)slot;
}

int nnt_trace_wants_grad(const nnt_trace *t)
{
    if (!t) return 0;
    for (int i = 0; i < t->n_reqs; i++)
        if (t->reqs[i].kind == REQ_GRAD || t->reqs[i].kind == REQ_COTANGENT) return 1;
    return t->metric.kind != TM_NONE;
}

/* Why value (slot, layer) has no gradient, or NULL when it may have one: the value's dtype and
 * what it is. */
static const char *not_differentiable(const nnt_model *m, nnt_value_id slot, int layer, nnt_error *err,
                                      nnt_status *failed)
{
    *failed = NNT_OK;
    switch (slot) {
    case NNT_VALUE_INPUT_IDS: return "token ids are integers the forward reads, not a function of anything";
    case NNT_VALUE_ATTENTION_MASK: return "the attention mask is an input of 0s and 1s, not a function of anything";
    case NNT_VALUE_INPUT_SIZE: return "the input's size is a pair of integers";
    case NNT_VALUE_NEXT_TOKEN_PROBS:
        return "next_token_probs is derived on the host from the logits after the forward; ask for the gradient of "
               "logits (its softmax's Jacobian is p_i (delta_ij - p_j))";
    default: break;
    }
    int lo = layer == NNT_LAYER_ALL ? 0 : layer, hi = layer == NNT_LAYER_ALL ? m->info.num_layers - 1 : layer;
    for (int l = lo; l <= hi; l++) {
        nnt_value_info vi;
        if ((*failed = nnt_model_slot_info(m, l, slot, NULL, &vi, err)) != NNT_OK) return NULL;
        if (!vi.served) continue;
        if (vi.dtype != NNT_F32)
            return slot == NNT_VALUE_EXPERT_INDICES
                       ? "expert_indices is the router's choice (int32): a choice has no gradient; the gradient reaches "
                         "router_logits through expert_weights"
                       : "its dtype is not float32 (integers are choices or counts, with no gradient)";
        return NULL;
    }
    return NULL;
}

/* Checks that path names values a gradient can be taken of; the error names the value and why. */
static nnt_status check_differentiable(nnt_trace *t, const char *what, const char *path)
{
    nnt_path p;
    nnt_path_wild w;
    int wild = nnt_path_wildcard(t->m, path, &w, t_err(t));
    if (wild < 0) return t_err(t)->status;
    if (wild)
        return nnt_err_set(t_err(t), NNT_ERR_PATH,
                           "%s '%s': a gradient names its values (over blocks as 'layers.*.NAME'); a wildcard over "
                           "value names is for saves", what, path);
    nnt_status st = nnt_path_parse(t->m, path, &p, t_err(t));
    if (st != NNT_OK) return st;
    nnt_status failed;
    const char *why = not_differentiable(t->m, p.slot, p.layer, t_err(t), &failed);
    if (failed != NNT_OK) return failed;
    if (why) return nnt_err_set(t_err(t), NNT_ERR_UNSUPPORTED, "%s '%s': no gradient: %s", what, path, why);
    return NNT_OK;
}

static nnt_status trace_grad_held(nnt_trace *t, const char *path)
{
    if (!t || !path) return NNT_ERR_INVALID_ARGUMENT;
    char base[256];
    snprintf(base, sizeof base, "%s", path);
    char *open = strrchr(base, '[');
    if (open && base[strlen(base) - 1] == ']' && open > base && open[-1] != '.' && open[-1] != '[') *open = '\0';
    nnt_status st = check_differentiable(t, "grad", base);
    return st != NNT_OK ? st : nnt_trace_save_kind(t, REQ_GRAD, path);
}

nnt_status nnt_trace_grad(nnt_trace *t, const char *path)
{
    NNT_GUARDED(nnt_guard_trace_rt(t), "nnt_trace_grad", trace_grad_held(t, path));
}

static nnt_status trace_cotangent_held(nnt_trace *t, const char *path, const nnt_tensor *cotangent)
{
    if (!t || !path || !cotangent) return NNT_ERR_INVALID_ARGUMENT;
    nnt_status st = check_differentiable(t, "cotangent", path);
    if (st != NNT_OK) return st;
    if (cotangent->device || !cotangent->data)
        return nnt_err_set(t_err(t), NNT_ERR_INVALID_ARGUMENT, "cotangent '%s': a host tensor with its data is needed",
                           path);
    request *r;
    st = nnt_trace_add_request(t, REQ_COTANGENT, path, &r);
    if (st != NNT_OK) return st;
    if (r->path.layer == NNT_LAYER_ALL) {
        nnt_trace_drop_last_request(t);
        return nnt_err_set(t_err(t), NNT_ERR_PATH, "cotangent '%s': name one block (a cotangent is one value's)", path);
    }
    if (nnt_tensor_alloc(&r->param, NNT_F32, cotangent->ndim, cotangent->shape) != NNT_OK ||
        nnt_convert(cotangent->data, cotangent->dtype, r->param.data, NNT_F32, nnt_tensor_numel(cotangent), t_err(t)) !=
            NNT_OK) {
        nnt_trace_drop_last_request(t);
        return nnt_err_set(t_err(t), NNT_ERR_INVALID_ARGUMENT, "cotangent '%s': expected a float tensor (got %s)", path,
                           nnt_dtype_name(cotangent->dtype));
    }
    return NNT_OK;
}

nnt_status nnt_trace_cotangent(nnt_trace *t, const char *path, const nnt_tensor *cotangent)
{
    NNT_GUARDED(nnt_guard_trace_rt(t), "nnt_trace_cotangent", trace_cotangent_held(t, path, cotangent));
}

/* Parses the metric word into m (kind, token ids); the error names the text. */
static nnt_status metric_parse(nnt_trace *t, const char *text, trace_metric *m)
{
    if (strcmp(text, "loss") == 0) {
        m->kind = TM_LOSS;
        return NNT_OK;
    }
    nnt_metric pm;
    nnt_error scratch;
    if (nnt_metric_parse(text, &pm, &scratch) == NNT_OK) {
        m->kind = pm.kind == NNT_METRIC_LOGIT_DIFF ? TM_LOGIT_DIFF : pm.kind == NNT_METRIC_PROB ? TM_PROB : TM_LOGPROB;
        m->a = pm.a;
        m->b = pm.b;
        return NNT_OK;
    }
    return nnt_err_set(t_err(t), NNT_ERR_INVALID_ARGUMENT,
                       "metric '%.200s': expected logit-diff:A,B, prob:T, logprob:T (A, B, T token ids as digits) or "
                       "loss (the mean next-token cross-entropy over the real positions)",
                       text);
}

static nnt_status trace_metric_held(nnt_trace *t, const char *metric, const int *positions, int n_positions)
{
    if (!t || !metric || n_positions < 0 || (n_positions > 0 && !positions)) return NNT_ERR_INVALID_ARGUMENT;
    trace_metric m = {0};
    nnt_status st = metric_parse(t, metric, &m);
    if (st != NNT_OK) return st;
    if (m.kind == TM_LOSS && n_positions > 0)
        return nnt_err_set(t_err(t), NNT_ERR_INVALID_ARGUMENT,
                           "metric 'loss' takes no positions: it averages over every real (token, next token) pair");
    for (int i = 0; i < t->n_reqs; i++)
        if (t->reqs[i].kind == REQ_COTANGENT && t->reqs[i].metric)
            return nnt_err_set(t_err(t), NNT_ERR_CONFLICT, "metric '%s': the trace has a metric already ('%s')", metric,
                               t->metric.text);
    m.text = nnt_strdup(metric);
    m.positions = n_positions ? malloc((size_t)n_positions * sizeof *m.positions) : NULL;
    if (!m.text || (n_positions && !m.positions)) {
        free(m.text);
        free(m.positions);
        return nnt_err_set(t_err(t), NNT_ERR_OUT_OF_MEMORY, "no memory");
    }
    if (n_positions) memcpy(m.positions, positions, (size_t)n_positions * sizeof *positions);
    m.n_positions = n_positions;
    /* the logits carry the metric's cotangent: a cotangent request without data */
    request *r;
    st = nnt_trace_add_request(t, REQ_COTANGENT, "logits", &r);
    if (st != NNT_OK) {
        free(m.text);
        free(m.positions);
        return st;
    }
    r->metric = 1;
    nnt_trace_metric_clear(t);
    t->metric = m;
    return NNT_OK;
}

nnt_status nnt_trace_metric(nnt_trace *t, const char *metric, const int *positions, int n_positions)
{
    NNT_GUARDED(nnt_guard_trace_rt(t), "nnt_trace_metric", trace_metric_held(t, metric, positions, n_positions));
}

/* ---- at emission ---- */

/* The elementwise Jacobian of the edits of cell c on value v (F32): the edits applied to zeros
 * and to ones (each edit is elementwise affine, x -> a x + b, and so is their chain), recorded on
 * the tape unless it is the identity. Edits that are not affine in the value are refused. */
static nnt_status record_edits(nnt_run *run, const cell *c, int layer, const nnt_tensor *v, nnt_tape *tp)
{
    nnt_trace *t = run->trace;
    int any = 0;
    for (int i = 0; i < c->n; i++) {
        const request *r = &t->reqs[c->ids[i]];
        if (r->kind == REQ_SAVE || r->kind == REQ_KEEP || r->kind == REQ_GRAD || r->kind == REQ_COTANGENT) continue;
        if (r->kind == REQ_EDIT_FN || r->kind == REQ_COPY_FROM || r->kind == REQ_HOOK)
            return nnt_err_set(run->err, NNT_ERR_UNSUPPORTED,
                               "'%s': %s cannot be differentiated (its Jacobian is unknown to nnt); a gradient request "
                               "runs with set, add, scale, zero, masked fill and steering edits",
                               r->text, r->kind == REQ_EDIT_FN   ? "a callback edit"
                                        : r->kind == REQ_HOOK ? r->hook_ops->what
                                                              : "skip_layers' copy of a value");
        any = 1;
    }
    if (!any || v->dtype != NNT_F32) return NNT_OK;
    nnt_tensor zero = {0}, one = {0};
    nnt_status st = NNT_OK;
    if (nnt_tensor_alloc(&zero, NNT_F32, v->ndim, v->shape) != NNT_OK ||
        nnt_tensor_alloc(&one, NNT_F32, v->ndim, v->shape) != NNT_OK)
        st = nnt_err_set(run->err, NNT_ERR_OUT_OF_MEMORY, "no memory for an edit's Jacobian");
    int64_t n = nnt_tensor_numel(v);
    float *z = zero.data, *o = one.data;
    for (int64_t k = 0; st == NNT_OK && k < n; k++) z[k] = 0.0f, o[k] = 1.0f;
    for (int i = 0; i < c->n && st == NNT_OK; i++) {
        const request *r = &t->reqs[c->ids[i]];
        if (r->kind == REQ_SAVE || r->kind == REQ_KEEP || r->kind == REQ_GRAD || r->kind == REQ_COTANGENT) continue;
        st = nnt_trace_apply_edit(run, r, layer, &zero);
        if (st == NNT_OK) st = nnt_trace_apply_edit(run, r, layer, &one);
    }
    int identity = 1;
    for (int64_t k = 0; st == NNT_OK && k < n; k++) {
        o[k] -= z[k];
        identity &= o[k] == 1.0f;
    }
    if (st == NNT_OK && !identity) st = nnt_tape_affine(tp, v, o, run->err);
    nnt_tensor_free(&zero);
    nnt_tensor_free(&one);
    return st;
}

nnt_status nnt_trace_grad_emit(nnt_run *run, nnt_value_id slot, int layer, nnt_tensor *value)
{
    nnt_trace *t = run->trace;
    nnt_tape *tp = run->model->tape;
    cell *c = t ? nnt_trace_cell(t, layer, slot) : NULL;
    if (!t || !value || !nnt_tape_recording(tp)) return NNT_OK;
    nnt_status st = NNT_OK;
    /* a stage's backward: the stream entering the stage, before its first block's edits */
    if (slot == NNT_VALUE_LAYER_INPUT && layer == t->grad.stream_in_layer && !t->grad.stream_in_marked) {
        st = nnt_tape_mark(tp, TRACE_TAG_STREAM_IN, value, run->err);
        t->grad.stream_in_marked = st == NNT_OK;
    }
    int out_mark = slot == NNT_VALUE_LAYER_OUTPUT && layer == t->grad.stream_out_layer && !t->grad.stream_out_marked;
    if (st == NNT_OK && (!c || c->n == 0)) {
        /* ... and leaving it, after every other mark of the value */
        if (out_mark) {
            st = nnt_tape_mark(tp, TRACE_TAG_STREAM_OUT, value, run->err);
            t->grad.stream_out_marked = st == NNT_OK;
        }
        return st;
    }
    if (st == NNT_OK) st = record_edits(run, c, layer, value, tp);
    int mark = 0;
    for (int i = 0; i < c->n; i++) {
        req_kind k = t->reqs[c->ids[i]].kind;
        mark |= k == REQ_GRAD || k == REQ_COTANGENT;
    }
    if (st == NNT_OK && !mark && out_mark) {
        st = nnt_tape_mark(tp, TRACE_TAG_STREAM_OUT, value, run->err);
        t->grad.stream_out_marked = st == NNT_OK;
    }
    if (st != NNT_OK || !mark) return st;
    char path[160];
    nnt_path_format(run->model, slot, layer, path, sizeof path);
    if (value->dtype != NNT_F32)
        return nnt_err_set(run->err, NNT_ERR_PLUGIN, "family '%s' emitted %s as %s; a gradient needs float32",
                           nnt_model_family(run->model), path, nnt_dtype_name(value->dtype));
    if (!nnt_tape_written(tp, value))
        return nnt_err_set(run->err, NNT_ERR_UNSUPPORTED,
                           "%s: family '%s' computes this value outside its backend's ops (on the host), where the "
                           "gradient tape cannot follow it, so it has no gradient here",
                           path, nnt_model_family(run->model));
    st = nnt_tape_mark(tp, cell_tag(layer, slot), value, run->err);
    if (st == NNT_OK) c->marked = 1;
    if (st == NNT_OK && out_mark) {
        st = nnt_tape_mark(tp, TRACE_TAG_STREAM_OUT, value, run->err);
        t->grad.stream_out_marked = st == NNT_OK;
    }
    if (st == NNT_OK && slot == NNT_VALUE_LOGITS && t->metric.kind != TM_NONE) {
        nnt_tensor_free(&t->metric_logits);
        if (nnt_tensor_alloc(&t->metric_logits, NNT_F32, value->ndim, value->shape) != NNT_OK)
            return nnt_err_set(run->err, NNT_ERR_OUT_OF_MEMORY, "no memory for the metric's logits");
        const nnt_plugin *be = run->model->family->be;
        size_t bytes = nnt_tensor_nbytes(value);
        if (value->device)
            st = be->ops.download(be->be_ctx, t->metric_logits.data, value->data, bytes, run->err);
        else
            memcpy(t->metric_logits.data, value->data, bytes);
        /* computed at the positions the metric reads alone: which those rows are */
        free(t->metric_rows);
        t->metric_rows = NULL;
        t->n_metric_rows = 0;
        if (st == NNT_OK && nnt_trace_readout_narrowed(run, slot, value)) {
            int k = run->args->n_logits_positions;
            if (!(t->metric_rows = malloc((size_t)k * sizeof *t->metric_rows)))
                return nnt_err_set(run->err, NNT_ERR_OUT_OF_MEMORY, "no memory for the metric's positions");
            memcpy(t->metric_rows, run->args->logits_positions, (size_t)k * sizeof *t->metric_rows);
            t->n_metric_rows = k;
        }
    }
    return st;
}
