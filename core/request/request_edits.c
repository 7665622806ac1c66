/* request_edits.c - one entry of a request's "edits" (docs/requests.md, "edits"): its "op", the
 * fields that op takes, each checked for type and range, and the rows it applies to. */
#include <stdlib.h>
#include <string.h>

#include "request_internal.h"

/* The fields each op takes ("op" first), at most 8. */
static const char *const OP_FIELDS[REQ_OP_COUNT][8] = {
    [REQ_OP_SAVE] = {"op", "path", "rows"},
    [REQ_OP_ZERO] = {"op", "path", "rows"},
    [REQ_OP_SCALE] = {"op", "path", "factor", "rows"},
    [REQ_OP_SET] = {"op", "path", "tensor", "positions", "rows"},
    [REQ_OP_ADD] = {"op", "path", "tensor", "factor", "positions", "rows"},
    [REQ_OP_MASKED_FILL] = {"op", "path", "where", "equals", "fill", "rows"},
    [REQ_OP_ABLATE_EXPERT] = {"op", "layer", "expert"},
    [REQ_OP_SKIP_LAYERS] = {"op", "start", "end"},
    [REQ_OP_STEER] = {"op", "first", "last", "tensor", "factor", "positions", "rows"},
    [REQ_OP_STEPS] = {"op", "from", "to"},
    [REQ_OP_CALLBACK] = {"op", "path", "callback", "rows"},
};

/* The fields of an edit of an SAE's features (a path "VALUE.sae.feature_acts"). */
static const char *const FEATURE_FIELDS[REQ_OP_COUNT][8] = {
    [REQ_OP_ZERO] = {"op", "path", "features"},
    [REQ_OP_SCALE] = {"op", "path", "factor", "features"},
    [REQ_OP_MASKED_FILL] = {"op", "path", "features", "fill"},
};

static int field_count(const char *const *fields)
{
    int n = 0;
    while (n < 8 && fields[n]) n++;
    return n;
}

/* 1 when the entry's path names an SAE's output ("VALUE.sae.NAME"); *features 1 when it names
 * the features ("VALUE.sae.feature_acts"). */
static int sae_path(const cJSON *v, int *features)
{
    const cJSON *p = req_member(v, "path");
    const char *at = cJSON_IsString(p) ? strstr(p->valuestring, ".sae.") : NULL;
    *features = at && strcmp(at, ".sae.feature_acts") == 0;
    return at != NULL;
}

void req_edit_free(req_edit *e)
{
    if (!e) return;
    free(e->path);
    free(e->where);
    free(e->positions);
    free(e->rows);
    free(e->features);
    req_tensor_free(&e->tensor);
    memset(e, 0, sizeof *e);
}

/* The entry's "op" word. */
static nnt_status parse_op(const req_ctx *c, const cJSON *v, const char *field, req_op *op)
{
    char f[REQ_FIELD_MAX], got[80], list[256];
    if (!cJSON_IsObject(v)) return req_fail(c, NNT_ERR_FORMAT, field, "expected an object, got %s", req_got(v, got, sizeof got));
    const cJSON *o = req_member(v, "op");
    size_t at = 0;
    for (int k = 0; k < REQ_OP_COUNT; k++) at += (size_t)snprintf(list + at, sizeof list - at, "%s\"%s\"", k ? ", " : "", req_op_names[k]);
    req_field(f, field, "op");
    if (!o) return req_fail(c, NNT_ERR_FORMAT, f, "missing (expected one of %s)", list);
    for (int k = 0; cJSON_IsString(o) && k < REQ_OP_COUNT; k++)
        if (strcmp(o->valuestring, req_op_names[k]) == 0) {
            *op = (req_op)k;
            return NNT_OK;
        }
    return req_fail(c, cJSON_IsString(o) ? NNT_ERR_INVALID_ARGUMENT : NNT_ERR_FORMAT, f, "expected one of %s, got %s", list,
                    req_got(o, got, sizeof got));
}

/* An op the request's method does not take. */
static nnt_status op_allowed(const req_ctx *c, req_op op, nnt_method m, const char *field)
{
    char f[REQ_FIELD_MAX];
    if (op == REQ_OP_STEPS && m != NNT_METHOD_GENERATE)
        return req_fail(c, NNT_ERR_INVALID_ARGUMENT, req_field(f, field, "op"),
                        "\"steps\" chooses generation steps; a %s request runs no steps", nnt_method_name(m));
    if (op == REQ_OP_SAVE && m == NNT_METHOD_LENS)
        return req_fail(c, NNT_ERR_INVALID_ARGUMENT, req_field(f, field, "op"),
                        "a lens saves every block's output itself; \"save\" belongs to trace and generate requests");
    return NNT_OK;
}

/* The block and step numbers of ablate_expert, skip_layers, steer and steps. */
static nnt_status parse_numbers(const req_ctx *c, const cJSON *v, const char *field, req_edit *e)
{
    static const char *const names[REQ_OP_COUNT][2] = {
        [REQ_OP_ABLATE_EXPERT] = {"layer", "expert"},
        [REQ_OP_SKIP_LAYERS] = {"start", "end"},
        [REQ_OP_STEER] = {"first", "last"},
        [REQ_OP_STEPS] = {"from", "to"},
    };
    const char *const *n = names[e->op];
    long long a = 0, b = -1;
    nnt_status st = req_int(c, v, field, n[0], 1, 0, REQ_INT_MAX, &a);
    /* steer's last defaults to its first; steps' to to every later step */
    int b_required = e->op == REQ_OP_ABLATE_EXPERT || e->op == REQ_OP_SKIP_LAYERS;
    if (st == NNT_OK) st = req_int(c, v, field, n[1], b_required, 0, REQ_INT_MAX, &b);
    if (st != NNT_OK) return st;
    if (e->op == REQ_OP_STEER && !req_member(v, "last")) b = a;
    /* their order (start <= end, ...) and the model's blocks are the trace API's to check, when
     * the request is applied: one rule, in one place */
    e->a = (int)a;
    e->b = (int)b;
    return NNT_OK;
}

/* "positions" of steer, set and add. A steer's ["all"] is its default (every token): read as no
 * "positions" at all, so the written form (which names a steer's positions always) parses back
 * equal. */
static nnt_status parse_positions(const req_ctx *c, const cJSON *v, const char *field, req_edit *e)
{
    char f[REQ_FIELD_MAX];
    const cJSON *p = req_member(v, "positions");
    if (!p) return NNT_OK;
    nnt_status st = req_positions(c, p, req_field(f, field, "positions"), &e->positions, &e->n_positions);
    if (st != NNT_OK) return st;
    e->has_positions = 1;
    if (e->op == REQ_OP_STEER && e->n_positions == 1 && e->positions[0] == NNT_POS_ALL) {
        free(e->positions);
        e->positions = NULL;
        e->n_positions = 0;
        e->has_positions = 0;
    }
    return NNT_OK;
}

/* The fields of an op with a value path: path, factor, fill, where, equals, callback. */
static nnt_status parse_value_fields(const req_ctx *c, const cJSON *v, const char *field, req_edit *e)
{
    char f[REQ_FIELD_MAX];
    static const char factor[] = NNT_FACTOR_TEXT;
    nnt_status st = NNT_OK;
    if (e->op != REQ_OP_STEER && (st = req_string(c, v, field, "path", 1, &e->path)) != NNT_OK) return st;
    if (e->path && !*e->path) return req_fail(c, NNT_ERR_INVALID_ARGUMENT, req_field(f, field, "path"), "expected a value path, got \"\"");
    e->factor = 1;
    if (e->op == REQ_OP_SCALE || e->op == REQ_OP_ADD || e->op == REQ_OP_STEER)
        st = req_number(c, v, field, "factor", e->op == REQ_OP_SCALE, -REQ_FACTOR_MAX, REQ_FACTOR_MAX, factor, &e->factor);
    if (st == NNT_OK && e->op == REQ_OP_MASKED_FILL) {
        long long eq = 0;
        st = req_string(c, v, field, "where", 1, &e->where);
        if (st == NNT_OK) st = req_int(c, v, field, "equals", 1, -(long long)REQ_EXACT_MAX, (long long)REQ_EXACT_MAX, &eq);
        if (st == NNT_OK) st = req_number(c, v, field, "fill", 1, -REQ_FACTOR_MAX, REQ_FACTOR_MAX, factor, &e->fill);
        e->equals = eq;
    }
    if (st == NNT_OK && e->op == REQ_OP_CALLBACK) {
        long long k = 0;
        st = req_int(c, v, field, "callback", 1, 0, REQ_INT_MAX, &k);
        e->callback = (int)k;
    }
    return st;
}

/* An edit of an SAE's features: zero, scale (factor) or masked_fill (fill) of "features". */
static nnt_status parse_feature_edit(const req_ctx *c, const cJSON *v, const char *field, req_edit *e)
{
    char f[REQ_FIELD_MAX];
    static const char factor[] = NNT_FACTOR_TEXT;
    const char *const *fields = FEATURE_FIELDS[e->op];
    if (!fields[0])
        return req_fail(c, NNT_ERR_INVALID_ARGUMENT, req_field(f, field, "op"),
                        "an SAE's features take \"zero\", \"scale\" and \"masked_fill\" (with \"features\"), or "
                        "\"save\"; got \"%s\"", req_op_names[e->op]);
    nnt_status st = req_members(c, v, field, fields, field_count(fields));
    if (st == NNT_OK) st = req_string(c, v, field, "path", 1, &e->path);
    const cJSON *list = req_member(v, "features");
    if (st == NNT_OK && !list)
        st = req_fail(c, NNT_ERR_FORMAT, req_field(f, field, "features"), "missing (the feature indices edited)");
    if (st == NNT_OK)
        st = req_int_list(c, list, req_field(f, field, "features"), 0, REQ_INT_MAX, 1, REQ_MAX_ITEMS, &e->features,
                          &e->n_features);
    if (st == NNT_OK && e->op == REQ_OP_SCALE)
        st = req_number(c, v, field, "factor", 1, -REQ_FACTOR_MAX, REQ_FACTOR_MAX, factor, &e->factor);
    if (st == NNT_OK && e->op == REQ_OP_MASKED_FILL)
        st = req_number(c, v, field, "fill", 1, -REQ_FACTOR_MAX, REQ_FACTOR_MAX, factor, &e->fill);
    return st;
}

nnt_status req_edit_parse(const req_ctx *c, const cJSON *v, const char *field, nnt_method m, req_edit *e)
{
    char f[REQ_FIELD_MAX];
    memset(e, 0, sizeof *e);
    nnt_status st = parse_op(c, v, field, &e->op);
    int features = 0, sae = st == NNT_OK && sae_path(v, &features);
    e->factor = 1;
    if (st == NNT_OK && features && e->op != REQ_OP_SAVE) {
        if ((st = parse_feature_edit(c, v, field, e)) != NNT_OK) req_edit_free(e);
        return st;
    }
    if (st == NNT_OK) st = req_members(c, v, field, OP_FIELDS[e->op], field_count(OP_FIELDS[e->op]));
    if (st == NNT_OK && sae && e->op != REQ_OP_SAVE)
        st = req_fail(c, NNT_ERR_INVALID_ARGUMENT, req_field(f, field, "path"),
                      "an SAE's outputs are saved, and its features edited on \"VALUE.sae.feature_acts\"");
    if (st == NNT_OK && sae && req_member(v, "rows"))
        st = req_fail(c, NNT_ERR_INVALID_ARGUMENT, req_field(f, field, "rows"),
                      "an SAE's outputs are saved whole (every row)");
    if (st == NNT_OK) st = op_allowed(c, e->op, m, field);
    if (st != NNT_OK) {
        req_edit_free(e);
        return st;
    }
    req_op op = e->op;
    e->factor = 1;
    if (op == REQ_OP_ABLATE_EXPERT || op == REQ_OP_SKIP_LAYERS || op == REQ_OP_STEER || op == REQ_OP_STEPS)
        st = parse_numbers(c, v, field, e);
    if (st == NNT_OK && op != REQ_OP_ABLATE_EXPERT && op != REQ_OP_SKIP_LAYERS && op != REQ_OP_STEPS)
        st = parse_value_fields(c, v, field, e);
    if (st == NNT_OK && (op == REQ_OP_SET || op == REQ_OP_ADD || op == REQ_OP_STEER)) {
        const cJSON *t = req_member(v, "tensor");
        req_field(f, field, "tensor");
        if (!t) st = req_fail(c, NNT_ERR_FORMAT, f, "missing (expected {\"file\"[, \"key\"]}, {\"key\"} or {\"dtype\", "
                               "\"shape\", \"data\"})");
        else if ((st = req_tensor_parse(c, t, f, &e->tensor)) == NNT_OK) e->has_tensor = 1;
    }
    if (st == NNT_OK && (op == REQ_OP_SET || op == REQ_OP_ADD || op == REQ_OP_STEER)) st = parse_positions(c, v, field, e);
    if (st == NNT_OK && req_member(v, "rows"))
        st = req_int_list(c, req_member(v, "rows"), req_field(f, field, "rows"), 0, REQ_INT_MAX, 1, REQ_MAX_ITEMS, &e->rows,
                          &e->n_rows);
    if (st != NNT_OK) req_edit_free(e);
    return st;
}
