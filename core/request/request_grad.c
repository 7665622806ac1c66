/* request_grad.c - a trace request's "grad" section (docs/requests.md): the value paths whose
 * gradients are wanted, the metric and its positions, the cotangents; parsed, freed, compared
 * and applied to a trace through nnt_trace_grad, nnt_trace_metric and nnt_trace_cotangent. */
#include <stdlib.h>
#include <string.h>

#include "request_internal.h"

void req_grad_free(nnt_request *r)
{
    for (int i = 0; i < r->n_grad_paths; i++) free(r->grad_paths[i]);
    free(r->grad_paths);
    free(r->grad_metric);
    free(r->grad_positions);
    for (int i = 0; i < r->n_cotangents; i++) {
        free(r->cotangents[i].path);
        req_tensor_free(&r->cotangents[i].tensor);
    }
    free(r->cotangents);
}

/* "grad.paths": value paths, at least one. */
static nnt_status parse_paths(const req_ctx *c, const cJSON *v, nnt_request *r)
{
    char f[REQ_FIELD_MAX], got[80];
    if (!cJSON_IsArray(v) || cJSON_GetArraySize(v) == 0)
        return req_fail(c, NNT_ERR_FORMAT, "grad.paths", "expected a non-empty array of value paths, got %s",
                        req_got(v, got, sizeof got));
    int n = cJSON_GetArraySize(v);
    if (n > REQ_MAX_ITEMS) return req_fail(c, NNT_ERR_FORMAT, "grad.paths", "%d entries; at most %d", n, REQ_MAX_ITEMS);
    if (!(r->grad_paths = calloc((size_t)n, sizeof *r->grad_paths)))
        return req_fail(c, NNT_ERR_OUT_OF_MEMORY, "grad.paths", "no memory");
    for (const cJSON *e = v->child; e; e = e->next, r->n_grad_paths++) {
        req_index(f, "grad.paths", r->n_grad_paths);
        if (!cJSON_IsString(e) || !*e->valuestring)
            return req_fail(c, NNT_ERR_FORMAT, f, "expected a value path, got %s", req_got(e, got, sizeof got));
        if (!(r->grad_paths[r->n_grad_paths] = nnt_strdup(e->valuestring)))
            return req_fail(c, NNT_ERR_OUT_OF_MEMORY, f, "no memory");
    }
    return NNT_OK;
}

/* "grad.cotangents": [{"path", "tensor"}]. */
static nnt_status parse_cotangents(const req_ctx *c, const cJSON *v, nnt_request *r)
{
    static const char *const known[] = {"path", "tensor"};
    char f[REQ_FIELD_MAX], g[REQ_FIELD_MAX], got[80];
    if (!cJSON_IsArray(v))
        return req_fail(c, NNT_ERR_FORMAT, "grad.cotangents", "expected an array of {\"path\", \"tensor\"}, got %s",
                        req_got(v, got, sizeof got));
    int n = cJSON_GetArraySize(v);
    if (n > REQ_MAX_ITEMS) return req_fail(c, NNT_ERR_FORMAT, "grad.cotangents", "%d entries; at most %d", n, REQ_MAX_ITEMS);
    if (n && !(r->cotangents = calloc((size_t)n, sizeof *r->cotangents)))
        return req_fail(c, NNT_ERR_OUT_OF_MEMORY, "grad.cotangents", "no memory");
    nnt_status st = NNT_OK;
    for (const cJSON *e = v->child; e && st == NNT_OK; e = e->next) {
        req_index(f, "grad.cotangents", r->n_cotangents);
        req_cotangent *ct = &r->cotangents[r->n_cotangents++];
        if (!cJSON_IsObject(e))
            return req_fail(c, NNT_ERR_FORMAT, f, "expected {\"path\", \"tensor\"}, got %s", req_got(e, got, sizeof got));
        st = req_members(c, e, f, known, 2);
        if (st == NNT_OK) st = req_string(c, e, f, "path", 1, &ct->path);
        if (st == NNT_OK && !req_member(e, "tensor"))
            st = req_fail(c, NNT_ERR_FORMAT, req_field(g, f, "tensor"), "missing (the cotangent dL/dV, the value's shape)");
        if (st == NNT_OK) st = req_tensor_parse(c, req_member(e, "tensor"), req_field(g, f, "tensor"), &ct->tensor);
    }
    return st;
}

nnt_status req_grad_parse(const req_ctx *c, const cJSON *gs, nnt_request *r)
{
    static const char *const known[] = {"paths", "metric", "positions", "cotangents"};
    char got[80];
    if (!cJSON_IsObject(gs))
        return req_fail(c, NNT_ERR_FORMAT, "grad", "expected an object {\"paths\", \"metric\", \"positions\", "
                        "\"cotangents\"}, got %s", req_got(gs, got, sizeof got));
    if (r->method != NNT_METHOD_TRACE)
        return req_fail(c, NNT_ERR_FORMAT, "grad", "gradients are taken in trace requests (this one's method is \"%s\")",
                        nnt_method_name(r->method));
    nnt_status st = req_members(c, gs, "grad", known, 4);
    r->has_grad = 1;
    if (st == NNT_OK && !req_member(gs, "paths"))
        st = req_fail(c, NNT_ERR_FORMAT, "grad.paths", "missing (the values whose gradients are wanted)");
    if (st == NNT_OK) st = parse_paths(c, req_member(gs, "paths"), r);
    if (st == NNT_OK) st = req_string(c, gs, "grad", "metric", 0, &r->grad_metric);
    const cJSON *p = req_member(gs, "positions");
    if (st == NNT_OK && p && !r->grad_metric)
        st = req_fail(c, NNT_ERR_FORMAT, "grad.positions", "positions choose where the metric is read; give grad.metric");
    if (st == NNT_OK && p) st = req_positions(c, p, "grad.positions", &r->grad_positions, &r->n_grad_positions);
    for (int k = 0; st == NNT_OK && k < r->n_grad_positions; k++)
        if (r->grad_positions[k] < REQ_POS_MIN) { /* prompt, generated, all */
            char f[REQ_FIELD_MAX];
            st = req_fail(c, NNT_ERR_INVALID_ARGUMENT, req_index(f, "grad.positions", k),
                          "expected a token position (an integer; negative counts from the end)");
        }
    if (st == NNT_OK && req_member(gs, "cotangents")) st = parse_cotangents(c, req_member(gs, "cotangents"), r);
    if (st == NNT_OK && !r->grad_metric && r->n_cotangents == 0)
        st = req_fail(c, NNT_ERR_FORMAT, "grad", "needs a scalar to differentiate: \"metric\" (logit-diff:A,B, prob:T, "
                      "logprob:T, loss) or \"cotangents\"");
    return st;
}

static int strs_eq(char *const *a, int na, char *const *b, int nb)
{
    if (na != nb) return 0;
    for (int i = 0; i < na; i++)
        if (strcmp(a[i], b[i]) != 0) return 0;
    return 1;
}

int req_grad_equal(const nnt_request *a, const nnt_request *b)
{
    if (a->has_grad != b->has_grad || !strs_eq(a->grad_paths, a->n_grad_paths, b->grad_paths, b->n_grad_paths) ||
        (!a->grad_metric) != (!b->grad_metric) || (a->grad_metric && strcmp(a->grad_metric, b->grad_metric)) ||
        a->n_grad_positions != b->n_grad_positions || a->n_cotangents != b->n_cotangents)
        return 0;
    if (a->n_grad_positions &&
        memcmp(a->grad_positions, b->grad_positions, (size_t)a->n_grad_positions * sizeof *a->grad_positions))
        return 0;
    for (int i = 0; i < a->n_cotangents; i++) {
        const nnt_tensor *x = &a->cotangents[i].tensor.t, *y = &b->cotangents[i].tensor.t;
        if (strcmp(a->cotangents[i].path, b->cotangents[i].path) || x->dtype != y->dtype ||
            !nnt_shape_equal(x->ndim, x->shape, y->ndim, y->shape) || memcmp(x->data, y->data, nnt_tensor_nbytes(x)))
            return 0;
    }
    return 1;
}

nnt_status req_grad_apply(const nnt_request *r, nnt_trace *t, nnt_error *err)
{
    nnt_status st = NNT_OK;
    char field[REQ_FIELD_MAX];
    for (int i = 0; st == NNT_OK && i < r->n_grad_paths; i++)
        if ((st = nnt_trace_grad(t, r->grad_paths[i])) != NNT_OK)
            nnt_err_prefix(err, "%s: %s", r->name, req_index(field, "grad.paths", i));
    if (st == NNT_OK && r->grad_metric &&
        (st = nnt_trace_metric(t, r->grad_metric, r->grad_positions, r->n_grad_positions)) != NNT_OK)
        nnt_err_prefix(err, "%s: grad.metric", r->name);
    for (int i = 0; st == NNT_OK && i < r->n_cotangents; i++)
        if ((st = nnt_trace_cotangent(t, r->cotangents[i].path, &r->cotangents[i].tensor.t)) != NNT_OK)
            nnt_err_prefix(err, "%s: %s", r->name, req_index(field, "grad.cotangents", i));
    return st;
}
