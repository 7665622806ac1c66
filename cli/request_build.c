/* request_build.c - the request document the nnt command's options make (docs/requests.md),
 * built with cJSON and parsed by libnnt like any other request; or --request FILE read as it is;
 * and --print-request's canonical form. */
#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "fields.h"

/* Adds positions [n] (the words as NNT_POS_*) as a JSON array under key. */
static void add_positions(cJSON *obj, const char *key, const int *pos, int n)
{
    cJSON *a = cJSON_AddArrayToObject(obj, key);
    for (int i = 0; a && i < n; i++) {
        const char *word = pos[i] == NNT_POS_PROMPT ? "prompt" : pos[i] == NNT_POS_GENERATED ? "generated"
                           : pos[i] == NNT_POS_ALL      ? "all"
                                                        : NULL;
        cJSON_AddItemToArray(a, word ? cJSON_CreateString(word) : cJSON_CreateNumber(pos[i]));
    }
}

/* A row as the request writes it. Returns NULL (message printed) for a bad --tokens list. */
static cJSON *row_json(const cli_row *r)
{
    cJSON *row = cJSON_CreateObject();
    if (!row) return NULL;
    if (r->kind == ROW_PROMPT) {
        cJSON_AddStringToObject(row, "text", r->arg);
    } else if (r->kind == ROW_FILE) {
        cJSON_AddStringToObject(row, "file", r->arg);
    } else if (r->kind == ROW_TOKENS_FILE) {
        cJSON_AddStringToObject(row, "tokens_file", r->arg);
    } else {
        int32_t *ids = NULL;
        int n = 0;
        if (cli_parse_tokens(r->arg, &ids, &n) != 0) {
            cJSON_Delete(row);
            return NULL;
        }
        cJSON *a = cJSON_AddArrayToObject(row, "tokens");
        for (int i = 0; a && i < n; i++) cJSON_AddItemToArray(a, cJSON_CreateNumber(ids[i]));
        free(ids);
    }
    return row;
}

static void add_tensor(cJSON *edit, const cli_req *q)
{
    cJSON *t = cJSON_AddObjectToObject(edit, "tensor");
    cJSON_AddStringToObject(t, "file", q->file);
    if (q->key) cJSON_AddStringToObject(t, "key", q->key);
}

/* An SAE's features named in a path "VALUE.sae.feature_acts[F,F,...]" (--zero, --scale, --fill):
 * "path" without the list and "features" with it. Returns 0, 1 when the path has no such list
 * (nothing added), or 2 (message printed) for a list that is not integers. */
static int add_features(cJSON *e, const cli_req *q)
{
    const char *open = strstr(q->path, ".sae.feature_acts[");
    size_t n = strlen(q->path);
    if (!open || q->path[n - 1] != ']') return 1;
    open += strlen(".sae.feature_acts");
    char *path = strndup(q->path, (size_t)(open - q->path));
    cJSON *list = cJSON_CreateArray();
    if (!path || !list) {
        free(path);
        cJSON_Delete(list);
        return cli_arg_error("%s", "out of memory");
    }
    for (const char *p = open + 1; *p != ']';) {
        char *end;
        long f = strtol(p, &end, 10);
        if (end == p || (*end != ',' && *end != ']') || f < 0 || f > 2147483647L) {
            free(path);
            cJSON_Delete(list);
            return cli_arg_error("%s %s: expected VALUE.sae.feature_acts[F,F,...] with feature indices 0..2147483647",
                                 q->flag, q->text);
        }
        cJSON_AddItemToArray(list, cJSON_CreateNumber((double)f));
        p = *end == ',' ? end + 1 : end;
    }
    cJSON_AddStringToObject(e, "path", path);
    cJSON_AddItemToObject(e, "features", list);
    free(path);
    return 0;
}

/* One request option as an entry of "edits"; NULL (message printed) for a bad feature list. */
static cJSON *edit_json(const cli_req *q)
{
    static const char *const OPS[] = {[R_SAVE] = "save", [R_ZERO] = "zero", [R_SCALE] = "scale", [R_SET] = "set",
                                      [R_ADD] = "add", [R_ABLATE] = "ablate_expert", [R_SKIP] = "skip_layers",
                                      [R_STEER] = "steer", [R_STEPS] = "steps", [R_FILL] = "masked_fill"};
    cJSON *e = cJSON_CreateObject();
    cJSON_AddStringToObject(e, "op", OPS[q->kind]);
    if (q->kind == R_ZERO || q->kind == R_SCALE || q->kind == R_FILL) {
        int rc = add_features(e, q);
        if (rc == 2 || (rc == 1 && q->kind == R_FILL)) {
            cJSON_Delete(e);
            if (rc == 1) cli_arg_error("--fill %s: expected VALUE.sae.feature_acts[F,F,...]=V", q->text);
            return NULL;
        }
        if (rc == 0) {
            if (q->kind != R_ZERO) cJSON_AddNumberToObject(e, q->kind == R_SCALE ? "factor" : "fill", q->factor);
            return e;
        }
    }
    switch (q->kind) {
    case R_SAVE:
    case R_ZERO: cJSON_AddStringToObject(e, "path", q->path); break;
    case R_SCALE:
        cJSON_AddStringToObject(e, "path", q->path);
        cJSON_AddNumberToObject(e, "factor", q->factor);
        break;
    case R_SET:
    case R_ADD:
        cJSON_AddStringToObject(e, "path", q->path);
        add_tensor(e, q);
        break;
    case R_ABLATE:
        cJSON_AddNumberToObject(e, "layer", (double)q->a);
        cJSON_AddNumberToObject(e, "expert", (double)q->b);
        break;
    case R_SKIP:
        cJSON_AddNumberToObject(e, "start", (double)q->a);
        cJSON_AddNumberToObject(e, "end", (double)q->b);
        break;
    case R_STEER:
        cJSON_AddNumberToObject(e, "first", (double)q->a);
        cJSON_AddNumberToObject(e, "last", (double)q->b);
        add_tensor(e, q);
        cJSON_AddNumberToObject(e, "factor", q->factor);
        if (q->positions) add_positions(e, "positions", q->positions, q->n_positions);
        break;
    case R_STEPS:
        cJSON_AddNumberToObject(e, "from", (double)q->a);
        if (q->b >= 0) cJSON_AddNumberToObject(e, "to", (double)q->b);
        break;
    case R_FILL: break; /* a feature fill only, above */
    }
    return e;
}

static void add_generate(cJSON *doc, const cli_opts *o)
{
    cJSON *g = cJSON_AddObjectToObject(doc, "generate");
    if (o->max_new_tokens >= 0) cJSON_AddNumberToObject(g, "max_new_tokens", o->max_new_tokens);
    cJSON_AddNumberToObject(g, "temperature", o->temperature);
    cJSON_AddNumberToObject(g, "top_k", o->top_k);
    cJSON_AddNumberToObject(g, "top_p", o->top_p);
    char seed[32]; /* a decimal string: a JSON number holds integers exactly only up to 2^53 */
    snprintf(seed, sizeof seed, "%llu", o->seed);
    cJSON_AddStringToObject(g, "seed", seed);
    cJSON *stops = cJSON_AddArrayToObject(g, "stop_ids");
    for (int k = 0; k < o->n_stop_ids; k++) cJSON_AddItemToArray(stops, cJSON_CreateNumber(o->stop_ids[k]));
    cJSON_AddBoolToObject(g, "ignore_eos", o->ignore_eos);
}

/* lens and patch --positions. Returns 0 or 2. */
static int add_method_positions(cJSON *sec, const cli_opts *o)
{
    if (!o->positions) return 0;
    int *pos = NULL, n = 0;
    if (cli_parse_positions("--positions", o->positions, &pos, &n) != 0) return 2;
    add_positions(sec, "positions", pos, n);
    free(pos);
    return 0;
}

/* patch's or attribute's section with its prompts, metric and value; NULL (message printed) for
 * a bad --clean-tokens / --corrupt-tokens list. */
static cJSON *pair_section(cJSON *doc, const char *name, const cli_opts *o)
{
    cJSON *p = cJSON_AddObjectToObject(doc, name), *clean = row_json(&o->rows[0]), *corrupt = row_json(&o->rows[1]);
    if (!p || !clean || !corrupt) {
        cJSON_Delete(clean);
        cJSON_Delete(corrupt);
        return NULL;
    }
    cJSON_AddItemToObject(p, "clean", clean);
    cJSON_AddItemToObject(p, "corrupt", corrupt);
    cJSON_AddStringToObject(p, "metric", o->metric);
    if (o->value) cJSON_AddStringToObject(p, "value", o->value);
    return p;
}

/* The method's section ("lens", "patch", "attribute", "generate"). Returns 0 or 2. */
static int add_method(cJSON *doc, const cli_opts *o)
{
    switch (o->cmd->method) {
    case NNT_METHOD_GENERATE: add_generate(doc, o); return 0;
    case NNT_METHOD_LENS: {
        cJSON *l = cJSON_AddObjectToObject(doc, "lens");
        cJSON_AddBoolToObject(l, "probs", o->out != NULL); /* --out writes the whole distribution */
        return add_method_positions(l, o);
    }
    case NNT_METHOD_PATCH: {
        cJSON *p = pair_section(doc, "patch", o);
        if (!p) return 2;
        if (o->patch_rows) cJSON_AddNumberToObject(p, "batch", o->patch_rows);
        return add_method_positions(p, o);
    }
    case NNT_METHOD_ATTRIBUTE: {
        cJSON *p = pair_section(doc, "attribute", o);
        if (!p) return 2;
        if (o->ig_steps) cJSON_AddNumberToObject(p, "ig_steps", o->ig_steps);
        return 0;
    }
    default: return 0;
    }
}

/* trace's "grad" section: --grad paths, --metric and --metric-positions. Returns 0 or 2. */
static int add_grad(cJSON *doc, const cli_opts *o)
{
    if (!o->n_grads) return 0;
    cJSON *g = cJSON_AddObjectToObject(doc, "grad"), *paths = cJSON_AddArrayToObject(g, "paths");
    for (int i = 0; paths && i < o->n_grads; i++) cJSON_AddItemToArray(paths, cJSON_CreateString(o->grads[i]));
    cJSON_AddStringToObject(g, "metric", o->metric);
    if (!o->metric_positions) return 0;
    int *pos = NULL, n = 0;
    if (cli_parse_positions("--metric-positions", o->metric_positions, &pos, &n) != 0) return 2;
    add_positions(g, "positions", pos, n);
    free(pos);
    return 0;
}

/* The whole document of the options. Returns 0 or 2 (message printed). */
static int build(const cli_opts *o, cJSON **out)
{
    cJSON *doc = cJSON_CreateObject();
    *out = doc;
    if (!doc) return cli_arg_error("%s", "out of memory");
    cJSON_AddNumberToObject(doc, "nnt_request", NNT_REQUEST_FORMAT);
    cJSON_AddStringToObject(doc, "method", nnt_method_name(o->cmd->method));
    if (o->cmd->method != NNT_METHOD_PATCH && o->cmd->method != NNT_METHOD_ATTRIBUTE) {
        cJSON *rows = cJSON_AddArrayToObject(doc, "rows");
        for (int r = 0; r < o->n_rows; r++) {
            cJSON *row = row_json(&o->rows[r]);
            if (!row) return 2;
            cJSON_AddItemToArray(rows, row);
        }
    }
    cJSON_AddBoolToObject(doc, "add_special", !o->no_special);
    if (o->n_saes) { /* --sae PATH=DIR: attached before the edits, whatever the options' order */
        cJSON *saes = cJSON_AddArrayToObject(doc, "saes");
        for (int i = 0; saes && i < o->n_saes; i++) {
            const char *eq = strchr(o->saes[i], '=');
            char *path = strndup(o->saes[i], (size_t)(eq - o->saes[i]));
            cJSON *e = cJSON_CreateObject();
            if (!path || !e) {
                free(path);
                cJSON_Delete(e);
                return cli_arg_error("%s", "out of memory");
            }
            cJSON_AddStringToObject(e, "path", path);
            cJSON_AddStringToObject(e, "dir", eq + 1);
            cJSON_AddItemToArray(saes, e);
            free(path);
        }
    }
    int first_save = cli_first_trailing_save(o);
    if (first_save > 0) {
        cJSON *edits = cJSON_AddArrayToObject(doc, "edits");
        for (int q = 0; q < first_save; q++) {
            cJSON *e = edit_json(&o->reqs[q]);
            if (!e) return 2;
            cJSON_AddItemToArray(edits, e);
        }
    }
    if (first_save < o->n_reqs) {
        cJSON *saves = cJSON_AddArrayToObject(doc, "saves");
        for (int q = first_save; q < o->n_reqs; q++) cJSON_AddItemToArray(saves, cJSON_CreateString(o->reqs[q].path));
    }
    if (add_grad(doc, o)) return 2;
    return add_method(doc, o);
}

int cli_request(const cli_opts *o, nnt_runtime *rt, nnt_request **out)
{
    *out = NULL;
    if (o->request_file) {
        if (nnt_request_read(rt, o->request_file, out) != NNT_OK) return cli_fail(o, rt, NULL);
        if (nnt_request_method(*out) != o->cmd->method)
            return cli_arg_error("--request %s: the request's method is %s; this command runs %s", o->request_file,
                                 nnt_method_name(nnt_request_method(*out)), nnt_method_name(o->cmd->method));
        return 0;
    }
    cJSON *doc = NULL;
    int rc = build(o, &doc);
    char *json = rc ? NULL : cJSON_PrintUnformatted(doc);
    cJSON_Delete(doc);
    if (rc) return rc;
    if (!json) return cli_arg_error("%s", "out of memory");
    nnt_request_source src = {.struct_size = sizeof src, .json = json, .json_len = strlen(json), .name = CLI_OPTIONS_NAME};
    nnt_status st = nnt_request_parse(rt, &src, out);
    free(json);
    if (st == NNT_OK) return 0;
    cli_fail(o, rt, NULL);
    /* what the options say is wrong is a usage error; a file they name that cannot be read is not */
    return st == NNT_ERR_IO ? 1 : 2;
}

int cli_print_request(nnt_runtime *rt, const nnt_request *r)
{
    char *json = NULL;
    size_t n = 0;
    if (nnt_request_write(r, &json, &n, NULL, NULL) != NNT_OK) {
        fprintf(stderr, "nnt: error: --print-request: %s\n", nnt_last_error(rt));
        return 1;
    }
    cJSON *doc = cJSON_ParseWithLength(json, n);
    char *pretty = doc ? cJSON_Print(doc) : NULL;
    fputs(pretty ? pretty : json, stdout);
    fputc('\n', stdout);
    free(pretty);
    cJSON_Delete(doc);
    free(json);
    return 0;
}
