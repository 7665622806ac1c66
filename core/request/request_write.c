/* request_write.c - a request as a document again (nnt_request_write): canonical JSON with every
 * default written out, its tensors inline or in one safetensors attachment named by key, so
 * that the pair parses back to an equal request in any process. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "request_internal.h"

typedef struct writer {
    nnt_status st;          /* the first failure */
    int attach;             /* tensors go to the attachment (else inline) */
    const char **keys;      /* the attachment's tensors and their keys (owned) */
    const nnt_tensor **tensors;
    int n_tensors;
} writer;

/* item added to obj under key (obj an array when key is NULL); a NULL item is out of memory. */
static void put(writer *w, cJSON *obj, const char *key, cJSON *item)
{
    if (!item || !obj) {
        cJSON_Delete(item);
        if (w->st == NNT_OK) w->st = NNT_ERR_OUT_OF_MEMORY;
        return;
    }
    if (key ? !cJSON_AddItemToObject(obj, key, item) : !cJSON_AddItemToArray(obj, item)) {
        cJSON_Delete(item);
        if (w->st == NNT_OK) w->st = NNT_ERR_OUT_OF_MEMORY;
    }
}

/* A JSON number that reads back as exactly x (finite): integers up to 2^53 in digits, other
 * values in the fewest significant digits (15 to 17) that give x again. cJSON's own printer
 * treats two doubles within an epsilon as one and may drop the last bit, so the text is made
 * here and handed to cJSON as is. */
static cJSON *number(double x)
{
    char buf[40];
    if (x == floor(x) && fabs(x) <= REQ_EXACT_MAX) {
        snprintf(buf, sizeof buf, "%.0f", x); /* -0 stays "-0": a tensor's bytes keep their sign */
    } else {
        for (int digits = 15; digits <= 17; digits++) {
            snprintf(buf, sizeof buf, "%.*g", digits, x);
            if (strtod(buf, NULL) == x) break;
        }
    }
    return cJSON_CreateRaw(buf);
}

static cJSON *int_array(const int *v, int n)
{
    cJSON *a = cJSON_CreateArray();
    for (int i = 0; a && i < n; i++)
        if (!cJSON_AddItemToArray(a, number(v[i]))) {
            cJSON_Delete(a);
            return NULL;
        }
    return a;
}

/* A list of positions, the words as words; n 0 (every token) as ["all"]. */
static cJSON *positions(const int *v, int n)
{
    cJSON *a = cJSON_CreateArray();
    if (a && n == 0 && !cJSON_AddItemToArray(a, cJSON_CreateString("all"))) a = (cJSON_Delete(a), NULL);
    for (int i = 0; a && i < n; i++) {
        const char *word = req_position_word(v[i]);
        if (!cJSON_AddItemToArray(a, word ? cJSON_CreateString(word) : number(v[i]))) a = (cJSON_Delete(a), NULL);
    }
    return a;
}

/* A row: {"tokens": [...]} or {"text": "..."} (a prompt file's row as its text). */
static cJSON *row_json(writer *w, const req_row *r)
{
    cJSON *o = cJSON_CreateObject();
    if (r->kind == REQ_ROW_TOKENS) put(w, o, "tokens", int_array((const int *)r->tokens, r->n_tokens));
    else put(w, o, "text", cJSON_CreateString(r->text));
    return o;
}

/* An inline tensor: {"dtype", "shape", "data"} (finite numbers only: JSON has no others). */
static cJSON *inline_tensor(writer *w, const nnt_tensor *t)
{
    cJSON *o = cJSON_CreateObject(), *shape = cJSON_CreateArray(), *data = cJSON_CreateArray();
    put(w, o, "dtype", cJSON_CreateString(nnt_dtype_name(t->dtype)));
    for (int d = 0; shape && d < t->ndim; d++) put(w, shape, NULL, number((double)t->shape[d]));
    put(w, o, "shape", shape);
    int64_t n = nnt_tensor_numel(t);
    for (int64_t i = 0; data && i < n && w->st == NNT_OK; i++) {
        double x = nnt_tensor_get_f64(t, i);
        if (!isfinite(x)) w->st = NNT_ERR_INVALID_ARGUMENT; /* such a tensor travels in an attachment */
        else put(w, data, NULL, number(x));
    }
    put(w, o, "data", data);
    return o;
}

/* A tensor: {"key": KEY} naming it in the attachment (KEY its field, "edits[i].tensor"), or
 * inline. */
static cJSON *tensor_json(writer *w, const req_tensor *t, const char *key)
{
    if (!w->attach) return inline_tensor(w, &t->t);
    const char **keys = realloc(w->keys, (size_t)(w->n_tensors + 1) * sizeof *keys);
    if (keys) w->keys = keys;
    const nnt_tensor **ts = realloc(w->tensors, (size_t)(w->n_tensors + 1) * sizeof *ts);
    if (ts) w->tensors = ts;
    char *copy = keys && ts ? nnt_strdup(key) : NULL;
    if (!copy) {
        w->st = NNT_ERR_OUT_OF_MEMORY;
        return NULL;
    }
    w->keys[w->n_tensors] = copy;
    w->tensors[w->n_tensors++] = &t->t;
    cJSON *o = cJSON_CreateObject();
    put(w, o, "key", cJSON_CreateString(key));
    return o;
}

/* Edit i in canonical form: its op's fields in a fixed order, defaults written out. */
static cJSON *edit_json(writer *w, const req_edit *e, int i)
{
    cJSON *o = cJSON_CreateObject();
    req_op op = e->op;
    put(w, o, "op", cJSON_CreateString(req_op_names[op]));
    if (e->path) put(w, o, "path", cJSON_CreateString(e->path));
    if (e->n_features) { /* an SAE's features: their indices, then the factor or the fill */
        put(w, o, "features", int_array(e->features, e->n_features));
        if (op == REQ_OP_SCALE) put(w, o, "factor", number(e->factor));
        if (op == REQ_OP_MASKED_FILL) put(w, o, "fill", number(e->fill));
        return o;
    }
    if (op == REQ_OP_MASKED_FILL) {
        put(w, o, "where", cJSON_CreateString(e->where));
        put(w, o, "equals", number((double)e->equals));
        put(w, o, "fill", number(e->fill));
    }
    static const char *const numbers[REQ_OP_COUNT][2] = {
        [REQ_OP_ABLATE_EXPERT] = {"layer", "expert"},
        [REQ_OP_SKIP_LAYERS] = {"start", "end"},
        [REQ_OP_STEER] = {"first", "last"},
        [REQ_OP_STEPS] = {"from", "to"},
    };
    if (numbers[op][0]) put(w, o, numbers[op][0], number(e->a));
    if (numbers[op][1] && e->b >= 0) put(w, o, numbers[op][1], number(e->b));
    char key[64];
    snprintf(key, sizeof key, "edits[%d].tensor", i);
    if (e->has_tensor) put(w, o, "tensor", tensor_json(w, &e->tensor, key));
    if (op == REQ_OP_SCALE || op == REQ_OP_ADD || op == REQ_OP_STEER) put(w, o, "factor", number(e->factor));
    if (op == REQ_OP_CALLBACK) put(w, o, "callback", number(e->callback));
    if (op == REQ_OP_STEER || e->has_positions) put(w, o, "positions", positions(e->positions, e->n_positions));
    if (e->n_rows) put(w, o, "rows", int_array(e->rows, e->n_rows));
    return o;
}

/* The method's section: "generate", "lens", "patch" or "attribute" (trace has none). */
static void method_json(writer *w, const nnt_request *r, cJSON *root)
{
    cJSON *o = cJSON_CreateObject();
    if (r->method == NNT_METHOD_GENERATE) {
        const nnt_generate_opts *g = &r->gen;
        char seed[24];
        snprintf(seed, sizeof seed, "%llu", (unsigned long long)g->seed);
        put(w, o, "max_new_tokens", number(g->max_new_tokens));
        put(w, o, "temperature", number(g->temperature));
        put(w, o, "top_k", number(g->top_k));
        put(w, o, "top_p", number(g->top_p));
        put(w, o, "seed", g->seed > (uint64_t)REQ_EXACT_MAX ? cJSON_CreateString(seed) : number((double)g->seed));
        put(w, o, "stop_ids", int_array((const int *)g->stop_ids, g->n_stop_ids));
        put(w, o, "ignore_eos", cJSON_CreateBool(r->ignore_eos));
        put(w, root, "generate", o);
    } else if (r->method == NNT_METHOD_LENS) {
        put(w, o, "positions", positions(r->lens_positions, r->n_lens_positions));
        put(w, o, "probs", cJSON_CreateBool(r->lens_probs));
        put(w, root, "lens", o);
    } else if (r->method == NNT_METHOD_PATCH) {
        put(w, o, "clean", row_json(w, &r->rows[0]));
        put(w, o, "corrupt", row_json(w, &r->rows[1]));
        put(w, o, "metric", cJSON_CreateString(r->patch.metric));
        put(w, o, "value", cJSON_CreateString(r->patch.value));
        put(w, o, "positions", positions(r->patch.positions, r->patch.n_positions));
        put(w, o, "batch", number(r->patch.batch));
        put(w, root, "patch", o);
    } else if (r->method == NNT_METHOD_ATTRIBUTE) {
        put(w, o, "clean", row_json(w, &r->rows[0]));
        put(w, o, "corrupt", row_json(w, &r->rows[1]));
        put(w, o, "metric", cJSON_CreateString(r->attr.metric));
        put(w, o, "value", cJSON_CreateString(r->attr.value));
        put(w, o, "ig_steps", number(r->attr.ig_steps));
        put(w, root, "attribute", o);
    } else {
        cJSON_Delete(o);
    }
}

/* A trace's "grad" section: paths, metric and positions when a metric is given, cotangents. */
static void grad_json(writer *w, const nnt_request *r, cJSON *root)
{
    cJSON *o = cJSON_CreateObject(), *paths = cJSON_CreateArray(), *cots = cJSON_CreateArray();
    for (int i = 0; paths && i < r->n_grad_paths; i++) put(w, paths, NULL, cJSON_CreateString(r->grad_paths[i]));
    put(w, o, "paths", paths);
    if (r->grad_metric) {
        put(w, o, "metric", cJSON_CreateString(r->grad_metric));
        if (r->n_grad_positions) put(w, o, "positions", int_array(r->grad_positions, r->n_grad_positions));
    }
    for (int i = 0; cots && i < r->n_cotangents; i++) {
        cJSON *c = cJSON_CreateObject();
        char key[64];
        snprintf(key, sizeof key, "grad.cotangents[%d].tensor", i);
        put(w, c, "path", cJSON_CreateString(r->cotangents[i].path));
        put(w, c, "tensor", tensor_json(w, &r->cotangents[i].tensor, key));
        put(w, cots, NULL, c);
    }
    put(w, o, "cotangents", cots);
    put(w, root, "grad", o);
}

static cJSON *request_json(writer *w, const nnt_request *r)
{
    cJSON *root = cJSON_CreateObject();
    put(w, root, "nnt_request", number(NNT_REQUEST_FORMAT));
    put(w, root, "method", cJSON_CreateString(nnt_method_name(r->method)));
    put(w, root, "add_special", cJSON_CreateBool(r->add_special));
    if (r->method != NNT_METHOD_PATCH && r->method != NNT_METHOD_ATTRIBUTE) {
        cJSON *rows = cJSON_CreateArray(), *edits = cJSON_CreateArray();
        for (int i = 0; rows && i < r->n_rows; i++) put(w, rows, NULL, row_json(w, &r->rows[i]));
        put(w, root, "rows", rows);
        if (r->method != NNT_METHOD_LENS) {
            cJSON *saves = cJSON_CreateArray();
            for (int i = 0; saves && i < r->n_saves; i++) put(w, saves, NULL, cJSON_CreateString(r->saves[i]));
            put(w, root, "saves", saves);
        }
        if (r->n_saes) { /* absent when empty, its default */
            cJSON *saes = cJSON_CreateArray();
            for (int i = 0; saes && i < r->n_saes; i++) {
                cJSON *e = cJSON_CreateObject();
                put(w, e, "path", cJSON_CreateString(r->saes[i].path));
                put(w, e, "dir", cJSON_CreateString(r->saes[i].dir));
                put(w, saes, NULL, e);
            }
            put(w, root, "saes", saes);
        }
        for (int i = 0; edits && i < r->n_edits; i++) put(w, edits, NULL, edit_json(w, &r->edits[i], i));
        put(w, root, "edits", edits);
    }
    method_json(w, r, root);
    if (r->has_grad) grad_json(w, r, root);
    return root;
}

nnt_status nnt_request_write(const nnt_request *r, char **json, size_t *json_len, void **tensors, size_t *tensors_len)
{
    if (json) *json = NULL;
    if (json_len) *json_len = 0;
    if (tensors) *tensors = NULL;
    if (tensors_len) *tensors_len = 0;
    if (!r || !json || (tensors && !tensors_len)) return NNT_ERR_INVALID_ARGUMENT;
    writer w = {.st = NNT_OK, .attach = tensors != NULL};
    cJSON *root = request_json(&w, r);
    char *text = w.st == NNT_OK && root ? cJSON_PrintUnformatted(root) : NULL;
    cJSON_Delete(root);
    if (w.st == NNT_OK && !text) w.st = NNT_ERR_OUT_OF_MEMORY;
    if (w.st == NNT_OK && strlen(text) > REQ_MAX_BYTES) w.st = NNT_ERR_INVALID_ARGUMENT; /* would not parse back */
    if (w.st == NNT_OK && tensors) {
        nnt_error err;
        w.st = nnt_st_serialize(w.n_tensors, w.keys, w.tensors, NULL, tensors, tensors_len, &err);
    }
    for (int i = 0; i < w.n_tensors; i++) free((char *)w.keys[i]);
    free(w.keys);
    free(w.tensors);
    if (w.st != NNT_OK) {
        cJSON_free(text);
        return w.st;
    }
    /* the caller frees with free(): cJSON allocates with malloc unless told otherwise, but the
     * text is copied so that no cJSON hook can change that */
    size_t n = strlen(text);
    *json = malloc(n + 1);
    if (*json) memcpy(*json, text, n + 1);
    cJSON_free(text);
    if (!*json) return NNT_ERR_OUT_OF_MEMORY;
    if (json_len) *json_len = n;
    return NNT_OK;
}
