/* request_parse.c - a request document into an nnt_request (docs/requests.md): the bytes and
 * limits, the top-level fields, the rows, the saves and the method's section; the edits and
 * tensors are read by request_edits.c and request_tensor.c. */
#include <ctype.h>
#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "request_internal.h"

#define REQ_MAX_PROMPT ((size_t)64 << 20) /* a prompt file's bytes */
#define REQ_MAX_TOKENS_FILE ((size_t)256 << 20) /* a tokens file's bytes (over 20 million ids) */

/* An array member of at most REQ_MAX_ITEMS entries (absent: *n 0); [] is allowed. */
static nnt_status list_member(const req_ctx *c, const cJSON *obj, const char *key, const char *of, const cJSON **out,
                              int *n)
{
    char got[80];
    *out = req_member(obj, key);
    *n = 0;
    if (!*out) return NNT_OK;
    if (!cJSON_IsArray(*out)) return req_fail(c, NNT_ERR_FORMAT, key, "expected an array of %s, got %s", of, req_got(*out, got, sizeof got));
    *n = cJSON_GetArraySize(*out);
    if (*n > REQ_MAX_ITEMS) return req_fail(c, NNT_ERR_FORMAT, key, "%d entries; a request holds at most %d", *n, REQ_MAX_ITEMS);
    return NNT_OK;
}

/* text [n] with every maximal invalid UTF-8 subpart replaced by U+FFFD, as the tokenizer encodes
 * it (nnt_tokenizer.h), into a new buffer *out (*out_n bytes). */
static nnt_status utf8_repaired(const char *text, size_t n, char **out, size_t *out_n)
{
    char *r = malloc(3 * n + 1), *w = r;
    if (!r) return NNT_ERR_OUT_OF_MEMORY;
    for (size_t i = 0; i < n;) {
        int l = nnt_utf8_len((const uint8_t *)text + i, n - i);
        if (l > 0) {
            memcpy(w, text + i, (size_t)l);
            w += l;
            i += (size_t)l;
        } else {
            memcpy(w, "\xEF\xBF\xBD", 3);
            w += 3;
            i += (size_t)-l;
        }
    }
    *w = '\0';
    *out = r;
    *out_n = (size_t)(w - r);
    return NNT_OK;
}

/* A prompt file's text, read whole (its last newline kept). Bytes that are not UTF-8 are read as
 * U+FFFD, which is how the tokenizer encodes them, so that the text can stand in a document as a
 * string with the same tokens; a NUL byte cannot. */
static nnt_status read_prompt(const req_ctx *c, const char *field, req_row *row)
{
    nnt_status denied = req_may_name_files(c, field);
    if (denied != NNT_OK) return denied;
    char *path = row->file[0] != '/' && c->base_dir ? nnt_path_join(c->base_dir, row->file) : nnt_strdup(row->file);
    if (!path) return req_fail(c, NNT_ERR_OUT_OF_MEMORY, field, "no memory");
    nnt_error e = {0};
    nnt_status st = nnt_read_file(path, REQ_MAX_PROMPT, &row->text, &row->text_len, &e);
    free(path);
    if (st != NNT_OK) return req_fail(c, st, field, "%s", e.msg);
    const char *nul = memchr(row->text, '\0', row->text_len);
    if (nul)
        return req_fail(c, NNT_ERR_FORMAT, field, "%s: byte %zu is NUL, which a row of text cannot hold", row->file,
                        (size_t)(nul - row->text));
    if (nnt_utf8_valid_prefix(row->text, row->text_len) < row->text_len) {
        char *fixed = NULL;
        size_t n = 0;
        if (utf8_repaired(row->text, row->text_len, &fixed, &n) != NNT_OK)
            return req_fail(c, NNT_ERR_OUT_OF_MEMORY, field, "no memory");
        free(row->text);
        row->text = fixed;
        row->text_len = n;
    }
    return NNT_OK;
}

/* A tokens file's ids: decimal integers in 0..REQ_INT_MAX separated by white space (a prompt too
 * long for one command-line argument, or token ids written by another program). */
static nnt_status read_tokens_file(const req_ctx *c, const char *field, req_row *row)
{
    nnt_status denied = req_may_name_files(c, field);
    if (denied != NNT_OK) return denied;
    char *path = row->file[0] != '/' && c->base_dir ? nnt_path_join(c->base_dir, row->file) : nnt_strdup(row->file);
    if (!path) return req_fail(c, NNT_ERR_OUT_OF_MEMORY, field, "no memory");
    nnt_error e = {0};
    char *text = NULL;
    size_t len = 0;
    nnt_status st = nnt_read_file(path, REQ_MAX_TOKENS_FILE, &text, &len, &e);
    free(path);
    if (st != NNT_OK) return req_fail(c, st, field, "%s", e.msg);
    size_t cap = len / 2 + 1; /* an id and its separator take two bytes at least */
    row->tokens = malloc(cap * sizeof *row->tokens);
    if (!row->tokens) {
        free(text);
        return req_fail(c, NNT_ERR_OUT_OF_MEMORY, field, "no memory");
    }
    size_t i = 0;
    while (i < len && st == NNT_OK) {
        while (i < len && isspace((unsigned char)text[i])) i++;
        if (i == len) break;
        size_t start = i;
        long long v = 0;
        while (i < len && text[i] >= '0' && text[i] <= '9' && v <= REQ_INT_MAX) v = v * 10 + (text[i++] - '0');
        if (i == start || v > REQ_INT_MAX || (i < len && !isspace((unsigned char)text[i]))) {
            size_t end = start;
            while (end < len && end - start < 24 && !isspace((unsigned char)text[end])) end++;
            st = req_fail(c, NNT_ERR_FORMAT, field,
                          "%s: byte %zu (id %d): '%.*s' is not a token id; expected decimal integers in 0..%lld "
                          "separated by white space",
                          row->file, start, row->n_tokens, (int)(end - start), text + start, REQ_INT_MAX);
            break;
        }
        if (row->n_tokens == REQ_MAX_TOKENS) {
            st = req_fail(c, NNT_ERR_FORMAT, field, "%s: more than %d token ids; a row holds at most %d", row->file,
                          REQ_MAX_TOKENS, REQ_MAX_TOKENS);
            break;
        }
        row->tokens[row->n_tokens++] = (int32_t)v;
    }
    free(text);
    if (st == NNT_OK && row->n_tokens == 0)
        st = req_fail(c, NNT_ERR_FORMAT, field, "%s: holds no token ids (expected decimal integers separated by white "
                      "space)", row->file);
    return st;
}

/* One row: {"tokens": [...]}, {"tokens_file": "..."}, {"text": "..."} or {"file": "..."}. */
static nnt_status parse_row(const req_ctx *c, const cJSON *v, const char *field, req_row *row)
{
    static const char *const known[] = {"tokens", "tokens_file", "text", "file"};
    char f[REQ_FIELD_MAX];
    snprintf(row->field, sizeof row->field, "%.31s", field); /* "rows[N]", "patch.clean": always fits */
    nnt_status st = req_members(c, v, field, known, 4);
    if (st != NNT_OK) return st;
    int given = !!req_member(v, "tokens") + !!req_member(v, "tokens_file") + !!req_member(v, "text") +
                !!req_member(v, "file");
    if (given != 1)
        return req_fail(c, NNT_ERR_FORMAT, field, "a row is {\"tokens\": [ids]}, {\"tokens_file\": \"ids.txt\"}, "
                        "{\"text\": \"...\"} or {\"file\": \"prompt.txt\"}; this one gives %s",
                        given ? "more than one" : "none");
    if (req_member(v, "tokens_file")) {
        row->kind = REQ_ROW_TOKENS;
        st = req_string(c, v, field, "tokens_file", 1, &row->file);
        if (st == NNT_OK && !*row->file)
            return req_fail(c, NNT_ERR_INVALID_ARGUMENT, req_field(f, field, "tokens_file"),
                            "expected a file name, got \"\"");
        return st == NNT_OK ? read_tokens_file(c, req_field(f, field, "tokens_file"), row) : st;
    }
    if (req_member(v, "tokens")) {
        row->kind = REQ_ROW_TOKENS;
        int *ids = NULL;
        st = req_int_list(c, req_member(v, "tokens"), req_field(f, field, "tokens"), 0, REQ_INT_MAX, 0, REQ_MAX_TOKENS, &ids,
                          &row->n_tokens);
        row->tokens = (int32_t *)ids; /* int and int32_t are one type on every platform nnt builds for */
        return st;
    }
    if (req_member(v, "text")) {
        row->kind = REQ_ROW_TEXT;
        st = req_string(c, v, field, "text", 1, &row->text);
        if (st == NNT_OK) row->text_len = strlen(row->text);
        return st;
    }
    row->kind = REQ_ROW_FILE;
    st = req_string(c, v, field, "file", 1, &row->file);
    if (st == NNT_OK && !*row->file)
        return req_fail(c, NNT_ERR_INVALID_ARGUMENT, req_field(f, field, "file"), "expected a file name, got \"\"");
    return st == NNT_OK ? read_prompt(c, req_field(f, field, "file"), row) : st;
}

static nnt_status parse_rows(const req_ctx *c, const cJSON *root, nnt_request *r)
{
    const cJSON *rows;
    int n;
    char f[REQ_FIELD_MAX];
    nnt_status st = list_member(c, root, "rows", "rows", &rows, &n);
    if (st != NNT_OK || n == 0) return st;
    if (!(r->rows = calloc((size_t)n, sizeof *r->rows))) return req_fail(c, NNT_ERR_OUT_OF_MEMORY, "rows", "no memory");
    for (const cJSON *e = rows->child; e && st == NNT_OK; e = e->next, r->n_rows++)
        st = parse_row(c, e, req_index(f, "rows", r->n_rows), &r->rows[r->n_rows]);
    return st;
}

static nnt_status parse_saves(const req_ctx *c, const cJSON *root, nnt_request *r)
{
    const cJSON *saves;
    int n;
    char f[REQ_FIELD_MAX], got[80];
    nnt_status st = list_member(c, root, "saves", "value paths", &saves, &n);
    if (st != NNT_OK || n == 0) return st;
    if (!(r->saves = calloc((size_t)n, sizeof *r->saves))) return req_fail(c, NNT_ERR_OUT_OF_MEMORY, "saves", "no memory");
    for (const cJSON *e = saves->child; e; e = e->next, r->n_saves++) {
        req_index(f, "saves", r->n_saves);
        if (!cJSON_IsString(e)) return req_fail(c, NNT_ERR_FORMAT, f, "expected a value path, got %s", req_got(e, got, sizeof got));
        if (!*e->valuestring) return req_fail(c, NNT_ERR_INVALID_ARGUMENT, f, "expected a value path, got \"\"");
        if (!(r->saves[r->n_saves] = nnt_strdup(e->valuestring))) return req_fail(c, NNT_ERR_OUT_OF_MEMORY, f, "no memory");
    }
    return NNT_OK;
}

static nnt_status parse_edits(const req_ctx *c, const cJSON *root, nnt_request *r)
{
    const cJSON *edits;
    int n;
    char f[REQ_FIELD_MAX];
    nnt_status st = list_member(c, root, "edits", "edits", &edits, &n);
    if (st != NNT_OK || n == 0) return st;
    if (!(r->edits = calloc((size_t)n, sizeof *r->edits))) return req_fail(c, NNT_ERR_OUT_OF_MEMORY, "edits", "no memory");
    for (const cJSON *e = edits->child; e; e = e->next) {
        st = req_edit_parse(c, e, req_index(f, "edits", r->n_edits), r->method, &r->edits[r->n_edits]);
        if (st != NNT_OK) return st;
        r->n_edits++;
    }
    return NNT_OK;
}

/* A seed: an integer 0..2^53 as a number, or any of 0..2^64-1 as a decimal string. */
static nnt_status parse_seed(const req_ctx *c, const cJSON *g, uint64_t *out)
{
    const cJSON *v = req_member(g, "seed");
    char got[80];
    if (!v) return NNT_OK;
    if (cJSON_IsString(v)) {
        const char *s = v->valuestring;
        char *end;
        errno = 0;
        unsigned long long x = strtoull(s, &end, 10);
        if (s[0] < '0' || s[0] > '9' || *end || errno)
            return req_fail(c, NNT_ERR_INVALID_ARGUMENT, "generate.seed", "expected an integer in 0..18446744073709551615 "
                            "(a decimal string above 2^53), got %s", req_got(v, got, sizeof got));
        *out = x;
        return NNT_OK;
    }
    if (!cJSON_IsNumber(v) || v->valuedouble != v->valuedouble || v->valuedouble < 0 || v->valuedouble > REQ_EXACT_MAX ||
        v->valuedouble != (double)(uint64_t)v->valuedouble)
        return req_fail(c, cJSON_IsNumber(v) ? NNT_ERR_INVALID_ARGUMENT : NNT_ERR_FORMAT, "generate.seed",
                        "expected an integer in 0..9007199254740992 (2^53; a larger seed is written as a decimal string, "
                        "up to \"18446744073709551615\"), got %s", req_got(v, got, sizeof got));
    *out = (uint64_t)v->valuedouble;
    return NNT_OK;
}

/* "generate": {"max_new_tokens", "temperature", "top_k", "top_p", "seed", "stop_ids", "ignore_eos"}. */
static nnt_status parse_generate(const req_ctx *c, const cJSON *g, nnt_request *r)
{
    static const char *const known[] = {"max_new_tokens", "temperature", "top_k", "top_p", "seed", "stop_ids", "ignore_eos"};
    nnt_status st = req_members(c, g, "generate", known, 7);
    long long max_new = 0, top_k = 0;
    double temperature = 0, top_p = 1;
    if (st == NNT_OK) st = req_int(c, g, "generate", "max_new_tokens", 1, 1, 1000000, &max_new);
    if (st == NNT_OK)
        st = req_number(c, g, "generate", "temperature", 0, 0, REQ_FACTOR_MAX, "a number in 0..1e6 (0: greedy)", &temperature);
    if (st == NNT_OK) st = req_int(c, g, "generate", "top_k", 0, 0, REQ_INT_MAX, &top_k);
    if (st == NNT_OK) st = req_number(c, g, "generate", "top_p", 0, 0, 1, "a number in (0, 1]", &top_p);
    if (st == NNT_OK && top_p <= 0)
        st = req_fail(c, NNT_ERR_INVALID_ARGUMENT, "generate.top_p", "expected a number in (0, 1], got 0");
    if (st == NNT_OK) st = parse_seed(c, g, &r->gen.seed);
    if (st == NNT_OK) st = req_bool(c, g, "generate", "ignore_eos", &r->ignore_eos);
    const cJSON *stop = req_member(g, "stop_ids");
    if (st == NNT_OK && stop && !(cJSON_IsArray(stop) && cJSON_GetArraySize(stop) == 0)) {
        int *ids = NULL;
        st = req_int_list(c, stop, "generate.stop_ids", 0, REQ_INT_MAX, 0, REQ_MAX_ITEMS, &ids, &r->gen.n_stop_ids);
        r->gen_stop = (int32_t *)ids;
    }
    if (st != NNT_OK) return st;
    if (temperature == 0 && (top_k != 0 || top_p != 1))
        return req_fail(c, NNT_ERR_INVALID_ARGUMENT, top_k != 0 ? "generate.top_k" : "generate.top_p",
                        "top_k and top_p filter sampling: give a temperature > 0 too (0 is greedy)");
    r->gen.max_new_tokens = (int)max_new;
    r->gen.temperature = (float)temperature;
    r->gen.top_k = (int)top_k;
    r->gen.top_p = (float)top_p;
    r->gen.stop_ids = r->gen_stop;
    return NNT_OK;
}

/* Positions of a method that runs forwards over the prompt only (lens, patch): 'generated' is
 * refused; a list holding "all" or "prompt" means every token, kept as the empty list (the form
 * the writer gives back as ["all"]). */
static nnt_status prompt_positions(const req_ctx *c, const char *field, const char *why, int **list, int *n)
{
    int every = 0;
    for (int k = 0; k < *n; k++) {
        int q = (*list)[k];
        if (q == NNT_POS_GENERATED) {
            char f[REQ_FIELD_MAX];
            return req_fail(c, NNT_ERR_INVALID_ARGUMENT, req_index(f, field, k),
                            "'generated' names tokens after the prompt; %s", why);
        }
        every |= q == NNT_POS_ALL || q == NNT_POS_PROMPT;
    }
    if (every) {
        free(*list);
        *list = NULL;
        *n = 0;
    }
    return NNT_OK;
}

/* "lens": {"positions", "probs"}; positions holding "all" or "prompt" read every token. */
static nnt_status parse_lens(const req_ctx *c, const cJSON *l, nnt_request *r)
{
    static const char *const known[] = {"positions", "probs"};
    nnt_status st = req_members(c, l, "lens", known, 2);
    if (st == NNT_OK) st = req_bool(c, l, "lens", "probs", &r->lens_probs);
    const cJSON *p = req_member(l, "positions");
    if (st != NNT_OK || !p) return st;
    st = req_positions(c, p, "lens.positions", &r->lens_positions, &r->n_lens_positions);
    if (st == NNT_OK)
        st = prompt_positions(c, "lens.positions", "a lens runs one forward over the prompt", &r->lens_positions,
                              &r->n_lens_positions);
    return st;
}

/* A patch or attribute section's prompts ("clean", "corrupt" into rows 0 and 1), its metric
 * (required, checked) and value (default every block's layer_output). */
static nnt_status parse_pair(const req_ctx *c, const cJSON *p, const char *section, nnt_request *r, char **metric,
                             char **value)
{
    char field[REQ_FIELD_MAX];
    nnt_status st = NNT_OK;
    if (!(r->rows = calloc(2, sizeof *r->rows))) return req_fail(c, NNT_ERR_OUT_OF_MEMORY, section, "no memory");
    for (int k = 0; k < 2 && st == NNT_OK; k++) {
        const char *key = k ? "corrupt" : "clean";
        const cJSON *row = req_member(p, key);
        req_field(field, section, key);
        st = row ? parse_row(c, row, field, &r->rows[k])
                 : req_fail(c, NNT_ERR_FORMAT, field, "missing (expected a row: {\"tokens\": [ids]}, {\"text\": ...} or "
                            "{\"file\": ...})");
        r->n_rows = k + 1;
    }
    if (st == NNT_OK) st = req_string(c, p, section, "metric", 1, metric);
    if (st == NNT_OK) {
        nnt_metric m;
        nnt_error e = {0};
        if ((st = nnt_metric_parse(*metric, &m, &e)) != NNT_OK)
            return req_fail(c, st, req_field(field, section, "metric"), "%s", e.msg);
    }
    if (st == NNT_OK) st = req_string(c, p, section, "value", 0, value);
    if (st == NNT_OK && !*value && !(*value = nnt_strdup("layers.*.layer_output")))
        st = req_fail(c, NNT_ERR_OUT_OF_MEMORY, req_field(field, section, "value"), "no memory");
    return st;
}

/* "attribute": {"clean", "corrupt", "metric", "value", "ig_steps"}. */
static nnt_status parse_attribute(const req_ctx *c, const cJSON *p, nnt_request *r)
{
    static const char *const known[] = {"clean", "corrupt", "metric", "value", "ig_steps"};
    nnt_status st = req_members(c, p, "attribute", known, 5);
    if (st == NNT_OK) st = parse_pair(c, p, "attribute", r, &r->attr_metric, &r->attr_value);
    long long steps = 0;
    if (st == NNT_OK) st = req_int(c, p, "attribute", "ig_steps", 0, 0, 1024, &steps);
    r->attr = (nnt_request_attribute_opts){.value = r->attr_value, .metric = r->attr_metric, .ig_steps = (int)steps};
    return st;
}

/* "patch": {"clean", "corrupt", "metric", "value", "positions", "batch"}. */
static nnt_status parse_patch(const req_ctx *c, const cJSON *p, nnt_request *r)
{
    static const char *const known[] = {"clean", "corrupt", "metric", "value", "positions", "batch"};
    nnt_status st = req_members(c, p, "patch", known, 6);
    if (st == NNT_OK) st = parse_pair(c, p, "patch", r, &r->patch_metric, &r->patch_value);
    long long batch = 16;
    if (st == NNT_OK) st = req_int(c, p, "patch", "batch", 0, 1, 4096, &batch);
    /* positions as everywhere (negative from the end, the words); nnt_patch resolves them */
    const cJSON *pos = req_member(p, "positions");
    if (st == NNT_OK && pos) st = req_positions(c, pos, "patch.positions", &r->patch_positions, &r->patch.n_positions);
    if (st == NNT_OK && pos)
        st = prompt_positions(c, "patch.positions", "patch runs forwards over the prompts only", &r->patch_positions,
                              &r->patch.n_positions);
    r->patch = (nnt_request_patch_opts){.value = r->patch_value, .metric = r->patch_metric,
                                        .positions = r->patch_positions, .n_positions = r->patch.n_positions,
                                        .batch = (int)batch};
    return st;
}

/* The "nnt_request" version and the "method". */
static nnt_status parse_head(const req_ctx *c, const cJSON *root, nnt_request *r)
{
    char got[80];
    const cJSON *v = req_member(root, "nnt_request");
    if (!v) return req_fail(c, NNT_ERR_FORMAT, "nnt_request", "missing (the format version, %d)", NNT_REQUEST_FORMAT);
    if (!cJSON_IsNumber(v))
        return req_fail(c, NNT_ERR_FORMAT, "nnt_request", "expected the format version %d, got %s", NNT_REQUEST_FORMAT,
                        req_got(v, got, sizeof got));
    if (v->valuedouble != NNT_REQUEST_FORMAT)
        return req_fail(c, NNT_ERR_UNSUPPORTED, "nnt_request", "format version %s; this libnnt reads version %d",
                        req_got(v, got, sizeof got), NNT_REQUEST_FORMAT);
    const cJSON *m = req_member(root, "method");
    r->method = NNT_METHOD_TRACE;
    if (!m) return NNT_OK;
    for (int k = 0; cJSON_IsString(m) && k < NNT_METHOD_COUNT; k++)
        if (strcmp(m->valuestring, nnt_method_name((nnt_method)k)) == 0) {
            r->method = (nnt_method)k;
            return NNT_OK;
        }
    return req_fail(c, cJSON_IsString(m) ? NNT_ERR_INVALID_ARGUMENT : NNT_ERR_FORMAT, "method",
                    "expected one of \"trace\", \"lens\", \"patch\", \"generate\", \"attribute\", got %s", req_got(m, got, sizeof got));
}

/* The fields a method does not take: another method's section, and for patch the rows, saves
 * and edits (it makes its own), for lens the saves (it saves every block's output). */
static nnt_status method_fields(const req_ctx *c, const cJSON *root, nnt_method m)
{
    static const char *const sections[] = {"lens", "patch", "generate", "attribute"};
    static const nnt_method owner[] = {NNT_METHOD_LENS, NNT_METHOD_PATCH, NNT_METHOD_GENERATE, NNT_METHOD_ATTRIBUTE};
    for (int k = 0; k < 4; k++)
        if (req_member(root, sections[k]) && owner[k] != m)
            return req_fail(c, NNT_ERR_FORMAT, sections[k], "the section of \"%s\" requests; this one's method is \"%s\"",
                            sections[k], nnt_method_name(m));
    static const char *const pair_free[] = {"rows", "saves", "edits", "saes"};
    const char *pair = m == NNT_METHOD_PATCH ? "patch" : m == NNT_METHOD_ATTRIBUTE ? "attribute" : NULL;
    for (int k = 0; pair && k < 4; k++)
        if (req_member(root, pair_free[k]))
            return req_fail(c, NNT_ERR_FORMAT, pair_free[k], "a%s %s request takes %s%s.clean and %s.corrupt",
                            pair[0] == 'a' ? "n" : "", pair, k == 0 ? "its prompts from " : "no saves or edits: it makes "
                            "its own from ", pair, pair);
    if (m == NNT_METHOD_ATTRIBUTE && !req_member(root, "attribute"))
        return req_fail(c, NNT_ERR_FORMAT, "attribute", "missing (an attribute request needs it)");
    if (m == NNT_METHOD_LENS && req_member(root, "saves"))
        return req_fail(c, NNT_ERR_FORMAT, "saves", "a lens saves every block's output itself; saves belong to trace "
                        "and generate requests");
    if ((m == NNT_METHOD_GENERATE || m == NNT_METHOD_PATCH) && !req_member(root, sections[m == NNT_METHOD_PATCH ? 1 : 2]))
        return req_fail(c, NNT_ERR_FORMAT, sections[m == NNT_METHOD_PATCH ? 1 : 2], "missing (a %s request needs it)",
                        nnt_method_name(m));
    return NNT_OK;
}

/* The document's top-level object into r. */
static nnt_status from_json(const req_ctx *c, const cJSON *root, nnt_request *r)
{
    static const char *const known[] = {"nnt_request", "method", "rows", "add_special", "saves", "saes", "edits",
                                        "generate", "lens", "patch", "grad", "attribute"};
    char got[80];
    if (!cJSON_IsObject(root))
        return req_fail(c, NNT_ERR_FORMAT, "", "expected a JSON object at the top, got %s", req_got(root, got, sizeof got));
    nnt_status st = req_members(c, root, "", known, 12);
    if (st == NNT_OK) st = parse_head(c, root, r);
    if (st == NNT_OK) st = method_fields(c, root, r->method);
    r->add_special = 1;
    if (st == NNT_OK) st = req_bool(c, root, "", "add_special", &r->add_special);
    if (st == NNT_OK && r->method == NNT_METHOD_PATCH) st = parse_patch(c, req_member(root, "patch"), r);
    if (st == NNT_OK && r->method == NNT_METHOD_ATTRIBUTE) st = parse_attribute(c, req_member(root, "attribute"), r);
    if (st == NNT_OK && r->method != NNT_METHOD_PATCH && r->method != NNT_METHOD_ATTRIBUTE) st = parse_rows(c, root, r);
    if (st == NNT_OK) st = parse_saves(c, root, r);
    if (st == NNT_OK && req_member(root, "saes")) st = req_saes_parse(c, req_member(root, "saes"), r);
    if (st == NNT_OK) st = parse_edits(c, root, r);
    if (st == NNT_OK && r->method == NNT_METHOD_GENERATE) st = parse_generate(c, req_member(root, "generate"), r);
    if (st == NNT_OK && r->method == NNT_METHOD_LENS && req_member(root, "lens")) st = parse_lens(c, req_member(root, "lens"), r);
    if (st == NNT_OK && req_member(root, "grad")) st = req_grad_parse(c, req_member(root, "grad"), r);
    return st;
}

/* cJSON's tree of the document's bytes (checked by req_scan first): one JSON value, then only
 * whitespace. */
static nnt_status parse_json(const req_ctx *c, const char *json, size_t len, cJSON **out)
{
    nnt_status st = req_scan(c, json, len);
    if (st != NNT_OK) return st;
    const char *end = NULL;
    *out = cJSON_ParseWithLengthOpts(json, len, &end, 0);
    if (!*out)
        return req_fail(c, NNT_ERR_FORMAT, "", "not JSON: the parse stopped near byte %ld",
                        end ? (long)(end - json) : 0L);
    for (size_t i = (size_t)(end - json); i < len; i++)
        if (json[i] != ' ' && json[i] != '\t' && json[i] != '\n' && json[i] != '\r') {
            cJSON_Delete(*out);
            *out = NULL;
            return req_fail(c, NNT_ERR_FORMAT, "", "byte %zu follows the document's JSON value; only whitespace may", i);
        }
    return NNT_OK;
}

nnt_status nnt_request_parse(nnt_runtime *rt, const nnt_request_source *src, nnt_request **out)
{
    if (out) *out = NULL;
    if (!rt) return NNT_ERR_INVALID_ARGUMENT;
    nnt_err_clear(&rt->err);
    if (!src || !out || src->struct_size < offsetof(nnt_request_source, flags) || (!src->json && src->json_len))
        return nnt_err_set(&rt->err, NNT_ERR_INVALID_ARGUMENT,
                           "request: needs a source (struct_size %zu, the JSON text) and a place for the request",
                           sizeof *src);
    int has_flags = src->struct_size >= offsetof(nnt_request_source, flags) + sizeof src->flags;
    req_ctx c = {.err = &rt->err, .name = src->name ? src->name : "request", .base_dir = src->base_dir,
                 .no_files = has_flags && (src->flags & NNT_REQUEST_NO_FILES)};
    if (src->json_len > REQ_MAX_BYTES)
        return req_fail(&c, NNT_ERR_FORMAT, "", "%zu bytes; a request document holds at most %zu (256 MiB)",
                        src->json_len, REQ_MAX_BYTES);
    char aname[300];
    snprintf(aname, sizeof aname, "%s: the attachment", c.name);
    nnt_status st = src->tensors ? nnt_st_open_memory(aname, src->tensors, src->tensors_len, &c.attachment, &rt->err) : NNT_OK;
    cJSON *root = NULL;
    if (st == NNT_OK) st = parse_json(&c, src->json ? src->json : "", src->json_len, &root);
    nnt_request *r = st == NNT_OK ? calloc(1, sizeof *r) : NULL;
    if (st == NNT_OK && (!r || !(r->name = nnt_strdup(c.name))))
        st = req_fail(&c, NNT_ERR_OUT_OF_MEMORY, "", "no memory for a request");
    if (st == NNT_OK) st = from_json(&c, root, r);
    cJSON_Delete(root);
    nnt_st_close(c.attachment);
    if (st != NNT_OK) {
        nnt_request_free(r);
        return st;
    }
    *out = r;
    return NNT_OK;
}

nnt_status nnt_request_read(nnt_runtime *rt, const char *file, nnt_request **out)
{
    if (out) *out = NULL;
    if (!rt) return NNT_ERR_INVALID_ARGUMENT;
    if (!file || !out) return nnt_err_set(&rt->err, NNT_ERR_INVALID_ARGUMENT, "request: needs a file and a place for the request");
    char *text = NULL, *dir = nnt_dirname(file);
    size_t len = 0;
    nnt_status st = dir ? nnt_read_file(file, REQ_MAX_BYTES, &text, &len, &rt->err)
                        : nnt_err_set(&rt->err, NNT_ERR_OUT_OF_MEMORY, "no memory");
    if (st == NNT_OK) {
        nnt_request_source src = {.struct_size = sizeof src, .json = text, .json_len = len, .base_dir = dir, .name = file};
        st = nnt_request_parse(rt, &src, out);
    }
    free(text);
    free(dir);
    return st;
}
