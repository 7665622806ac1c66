/* request_sae.c - a request's "saes" (docs/requests.md, "saes"): the sparse autoencoders it
 * attaches to values, each a value path and a SAELens folder loaded when the document is parsed;
 * freed, compared, and attached to a trace before the request's edits. */
#include <stdlib.h>
#include <string.h>

#include "../sae/sae_internal.h"
#include "request_internal.h"

void req_saes_free(nnt_request *r)
{
    for (int i = 0; i < r->n_saes; i++) {
        free(r->saes[i].path);
        free(r->saes[i].dir);
        nnt_sae_free(r->saes[i].sae);
    }
    free(r->saes);
    r->saes = NULL;
    r->n_saes = 0;
}

/* Entry i, {"path": VALUE, "dir": FOLDER}: the folder resolved against the document's and loaded. */
static nnt_status parse_one(const req_ctx *c, const cJSON *v, int i, req_sae *s)
{
    static const char *const known[] = {"path", "dir"};
    char field[REQ_FIELD_MAX], f[REQ_FIELD_MAX], got[80];
    req_index(field, "saes", i);
    if (!cJSON_IsObject(v))
        return req_fail(c, NNT_ERR_FORMAT, field, "expected {\"path\", \"dir\"}, got %s", req_got(v, got, sizeof got));
    char *dir = NULL;
    nnt_status st = req_members(c, v, field, known, 2);
    if (st == NNT_OK) st = req_string(c, v, field, "path", 1, &s->path);
    if (st == NNT_OK) st = req_string(c, v, field, "dir", 1, &dir);
    if (st == NNT_OK) st = req_may_name_files(c, req_field(f, field, "dir"));
    if (st != NNT_OK) {
        free(dir);
        return st;
    }
    if (!*s->path || !*dir) {
        free(dir);
        return req_fail(c, NNT_ERR_INVALID_ARGUMENT, req_field(f, field, *dir ? "path" : "dir"),
                        "expected a name, got \"\"");
    }
    s->dir = dir[0] != '/' && c->base_dir ? nnt_path_join(c->base_dir, dir) : nnt_strdup(dir);
    free(dir);
    if (!s->dir) return req_fail(c, NNT_ERR_OUT_OF_MEMORY, field, "no memory");
    if ((st = nnt_sae_load_err(s->dir, &s->sae, c->err)) != NNT_OK)
        nnt_err_prefix(c->err, "%s: %s", c->name, req_field(f, field, "dir"));
    return st;
}

nnt_status req_saes_parse(const req_ctx *c, const cJSON *v, nnt_request *r)
{
    char got[80];
    if (!cJSON_IsArray(v))
        return req_fail(c, NNT_ERR_FORMAT, "saes", "expected a list, got %s", req_got(v, got, sizeof got));
    int n = cJSON_GetArraySize(v);
    if (n > REQ_MAX_SAES)
        return req_fail(c, NNT_ERR_FORMAT, "saes", "%d entries; a request attaches at most %d SAEs", n, REQ_MAX_SAES);
    if (n && !(r->saes = calloc((size_t)n, sizeof *r->saes)))
        return req_fail(c, NNT_ERR_OUT_OF_MEMORY, "saes", "no memory");
    int i = 0;
    for (const cJSON *e = v->child; e; e = e->next, i++) {
        nnt_status st = parse_one(c, e, i, &r->saes[i]);
        r->n_saes = i + 1; /* what the entry holds is freed with the request */
        if (st != NNT_OK) return st;
    }
    return NNT_OK;
}

int req_saes_equal(const nnt_request *a, const nnt_request *b)
{
    if (a->n_saes != b->n_saes) return 0;
    for (int i = 0; i < a->n_saes; i++)
        if (strcmp(a->saes[i].path, b->saes[i].path) != 0 || strcmp(a->saes[i].dir, b->saes[i].dir) != 0) return 0;
    return 1;
}

nnt_status req_saes_apply(const nnt_request *r, nnt_trace *t, nnt_error *err)
{
    for (int i = 0; i < r->n_saes; i++) {
        char label[REQ_FIELD_MAX + 48];
        snprintf(label, sizeof label, "%s: saes[%d]", r->name, i);
        int mark = nnt_trace_request_count(t);
        nnt_status st = nnt_trace_sae(t, r->saes[i].path, r->saes[i].sae);
        if (st != NNT_OK) {
            nnt_err_prefix(err, "%s.path", label);
            return st;
        }
        /* the checks of a run's start (the value's shape against d_in) name the entry too */
        if ((st = nnt_trace_label_since(t, mark, label, 0)) != NNT_OK) return st;
    }
    return NNT_OK;
}
