/* request.c - a parsed request as an object: freeing it, the accessors of nnt_request.h, and
 * the comparison of two requests (what a written and re-read request must pass). */
#include <stdlib.h>
#include <string.h>

#include "request_internal.h"

void req_row_free(req_row *r)
{
    if (!r) return;
    free(r->tokens);
    free(r->text);
    free(r->file);
}

void nnt_request_free(nnt_request *r)
{
    if (!r) return;
    free(r->name);
    for (int i = 0; i < r->n_rows; i++) req_row_free(&r->rows[i]);
    free(r->rows);
    for (int i = 0; i < r->n_saves; i++) free(r->saves[i]);
    free(r->saves);
    for (int i = 0; i < r->n_edits; i++) req_edit_free(&r->edits[i]);
    free(r->edits);
    req_saes_free(r);
    free(r->gen_stop);
    free(r->lens_positions);
    free(r->patch_value);
    free(r->patch_metric);
    free(r->patch_positions);
    free(r->attr_value);
    free(r->attr_metric);
    req_grad_free(r);
    free(r);
}

nnt_method nnt_request_method(const nnt_request *r)
{
    return r ? r->method : NNT_METHOD_COUNT;
}

const nnt_generate_opts *nnt_request_generate_opts(const nnt_request *r, int *ignore_eos)
{
    if (!r || r->method != NNT_METHOD_GENERATE) return NULL;
    if (ignore_eos) *ignore_eos = r->ignore_eos;
    return &r->gen;
}

const int *nnt_request_lens_positions(const nnt_request *r, int *n, int *keep_probs)
{
    if (!r || r->method != NNT_METHOD_LENS) {
        if (n) *n = 0;
        return NULL;
    }
    if (n) *n = r->n_lens_positions;
    if (keep_probs) *keep_probs = r->lens_probs;
    static const int none = 0; /* a non-NULL answer for "every position" (n 0), read-only */
    return r->lens_positions ? r->lens_positions : &none;
}

const nnt_request_patch_opts *nnt_request_patch(const nnt_request *r)
{
    return r && r->method == NNT_METHOD_PATCH ? &r->patch : NULL;
}

const nnt_request_attribute_opts *nnt_request_attribute(const nnt_request *r)
{
    return r && r->method == NNT_METHOD_ATTRIBUTE ? &r->attr : NULL;
}

/* ---- comparison ---- */

static int str_eq(const char *a, const char *b)
{
    return (!a && !b) || (a && b && strcmp(a, b) == 0);
}

static int ints_eq(const int *a, int na, const int *b, int nb)
{
    return na == nb && (na == 0 || memcmp(a, b, (size_t)na * sizeof *a) == 0);
}

static int tensor_eq(const nnt_tensor *a, const nnt_tensor *b)
{
    return a->dtype == b->dtype && nnt_shape_equal(a->ndim, a->shape, b->ndim, b->shape) &&
           memcmp(a->data, b->data, nnt_tensor_nbytes(a)) == 0;
}

/* A file's row and a text row are equal when their text is. */
static int row_eq(const req_row *a, const req_row *b)
{
    if ((a->kind == REQ_ROW_TOKENS) != (b->kind == REQ_ROW_TOKENS)) return 0;
    if (a->kind == REQ_ROW_TOKENS) return ints_eq(a->tokens, a->n_tokens, b->tokens, b->n_tokens);
    return a->text_len == b->text_len && memcmp(a->text, b->text, a->text_len) == 0;
}

static int edit_eq(const req_edit *a, const req_edit *b)
{
    return a->op == b->op && str_eq(a->path, b->path) && str_eq(a->where, b->where) && a->equals == b->equals &&
           a->factor == b->factor && a->fill == b->fill && a->a == b->a && a->b == b->b && a->callback == b->callback &&
           a->has_tensor == b->has_tensor && (!a->has_tensor || tensor_eq(&a->tensor.t, &b->tensor.t)) &&
           a->has_positions == b->has_positions && ints_eq(a->positions, a->n_positions, b->positions, b->n_positions) &&
           ints_eq(a->rows, a->n_rows, b->rows, b->n_rows) && ints_eq(a->features, a->n_features, b->features, b->n_features);
}

static int methods_eq(const nnt_request *a, const nnt_request *b)
{
    const nnt_generate_opts *x = &a->gen, *y = &b->gen;
    const nnt_request_patch_opts *p = &a->patch, *q = &b->patch;
    return x->max_new_tokens == y->max_new_tokens && x->temperature == y->temperature && x->top_k == y->top_k &&
           x->top_p == y->top_p && x->seed == y->seed && ints_eq(x->stop_ids, x->n_stop_ids, y->stop_ids, y->n_stop_ids) &&
           a->ignore_eos == b->ignore_eos && a->lens_probs == b->lens_probs &&
           ints_eq(a->lens_positions, a->n_lens_positions, b->lens_positions, b->n_lens_positions) &&
           str_eq(p->value, q->value) && str_eq(p->metric, q->metric) && p->batch == q->batch &&
           ints_eq(p->positions, p->n_positions, q->positions, q->n_positions) && str_eq(a->attr.value, b->attr.value) &&
           str_eq(a->attr.metric, b->attr.metric) && a->attr.ig_steps == b->attr.ig_steps;
}

int nnt_request_equal(const nnt_request *a, const nnt_request *b)
{
    if (!a || !b) return a == b;
    if (a->method != b->method || a->add_special != b->add_special || a->n_rows != b->n_rows ||
        a->n_saves != b->n_saves || a->n_edits != b->n_edits || !methods_eq(a, b) || !req_grad_equal(a, b) ||
        !req_saes_equal(a, b))
        return 0;
    for (int i = 0; i < a->n_rows; i++)
        if (!row_eq(&a->rows[i], &b->rows[i])) return 0;
    for (int i = 0; i < a->n_saves; i++)
        if (strcmp(a->saves[i], b->saves[i]) != 0) return 0;
    for (int i = 0; i < a->n_edits; i++)
        if (!edit_eq(&a->edits[i], &b->edits[i])) return 0;
    return 1;
}

/* Whether the generation stops rows: the tokenizer's eos (unless ignore_eos) or stop ids. */
static int gen_stops(const nnt_request *r) { return !r->ignore_eos || r->gen.n_stop_ids > 0; }

/* Whether r saves anything (its "saves", or a save among its edits). */
static int saves_any(const nnt_request *r)
{
    if (r->n_saves) return 1;
    for (int i = 0; i < r->n_edits; i++)
        if (r->edits[i].op == REQ_OP_SAVE) return 1;
    return 0;
}

int nnt_request_shareable(const nnt_request *r)
{
    if (!r || (r->method != NNT_METHOD_TRACE && r->method != NNT_METHOD_GENERATE) || r->has_grad || r->n_saes) return 0;
    /* a generation: greedy (a sampled row's draws depend on the rows before it), and one whose
     * rows may stop early saves nothing (alone it would save fewer steps than in company) */
    if (r->method == NNT_METHOD_GENERATE && (r->gen.temperature > 0 || (gen_stops(r) && saves_any(r)))) return 0;
    for (int i = 0; i < r->n_edits; i++) {
        req_op op = r->edits[i].op;
        if (op == REQ_OP_STEPS || op == REQ_OP_SKIP_LAYERS || op == REQ_OP_ABLATE_EXPERT || op == REQ_OP_CALLBACK)
            return 0;
    }
    return 1;
}

int nnt_request_share_compatible(const nnt_request *a, const nnt_request *b)
{
    if (!nnt_request_shareable(a) || !nnt_request_shareable(b) || a->method != b->method) return 0;
    if (a->method != NNT_METHOD_GENERATE) return 1;
    if (a->gen.max_new_tokens != b->gen.max_new_tokens || a->ignore_eos != b->ignore_eos ||
        a->gen.n_stop_ids != b->gen.n_stop_ids)
        return 0;
    for (int k = 0; k < a->gen.n_stop_ids; k++)
        if (a->gen.stop_ids[k] != b->gen.stop_ids[k]) return 0;
    return 1;
}
