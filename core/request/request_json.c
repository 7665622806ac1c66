/* request_json.c - reading a request document's JSON: the checks on its bytes before cJSON
 * parses them (UTF-8, control bytes, nesting), and typed, range-checked members whose errors
 * name the document, the field's JSON path and what was expected. */
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "request_internal.h"

nnt_status req_fail(const req_ctx *c, nnt_status st, const char *field, const char *fmt, ...)
{
    char msg[NNT_ERROR_MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (field && *field) return nnt_err_set(c->err, st, "%s: %s: %s", c->name, field, msg);
    return nnt_err_set(c->err, st, "%s: %s", c->name, msg);
}

nnt_status req_may_name_files(const req_ctx *c, const char *field)
{
    if (!c->no_files) return NNT_OK;
    return req_fail(c, NNT_ERR_INVALID_ARGUMENT, field,
                    "this request may not name files or folders (it comes from elsewhere): give tensor data "
                    "inline or in the attachment, and rows as tokens or text");
}

const char *req_field(char *buf, const char *parent, const char *key)
{
    snprintf(buf, REQ_FIELD_MAX, "%s%s%s", parent, *parent ? "." : "", *key ? key : "\"\""); /* an empty name shows as "" */
    return buf;
}

const char *req_index(char *buf, const char *parent, int i)
{
    snprintf(buf, REQ_FIELD_MAX, "%s[%d]", parent, i);
    return buf;
}

const char *req_got(const cJSON *v, char *buf, size_t n)
{
    if (!v) return snprintf(buf, n, "nothing"), buf;
    if (cJSON_IsNumber(v) && !isfinite(v->valuedouble)) return snprintf(buf, n, "a number beyond a double's range"), buf;
    if (cJSON_IsArray(v)) return snprintf(buf, n, "an array"), buf;
    if (cJSON_IsObject(v)) return snprintf(buf, n, "an object"), buf;
    char *text = cJSON_PrintUnformatted(v);
    if (!text) return snprintf(buf, n, "a value"), buf;
    size_t len = strlen(text), keep = n > 4 && n - 4 < 60 ? n - 4 : 60;
    if (len > keep)
        snprintf(buf, n, "%.*s...", (int)keep, text);
    else
        snprintf(buf, n, "%s", text);
    cJSON_free(text);
    return buf;
}

/* The length of the "\uXXXX" escape at s (n bytes left) when it is \u0000, else 0. */
static int nul_escape(const char *s, size_t n)
{
    return n >= 6 && s[0] == '\\' && s[1] == 'u' && memcmp(s + 2, "0000", 4) == 0 ? 6 : 0;
}

nnt_status req_scan(const req_ctx *c, const char *json, size_t len)
{
    size_t valid = nnt_utf8_valid_prefix(json, len);
    if (valid < len) return req_fail(c, NNT_ERR_FORMAT, "", "byte %zu is not valid UTF-8 (a request is UTF-8 JSON text)", valid);
    int depth = 0, in_string = 0;
    for (size_t i = 0; i < len; i++) {
        unsigned char ch = (unsigned char)json[i];
        if (ch < 0x20 && ch != '\t' && ch != '\n' && ch != '\r')
            return req_fail(c, NNT_ERR_FORMAT, "", "byte %zu is the control byte 0x%02x (JSON text escapes control "
                            "characters in strings and has none elsewhere)", i, (unsigned)ch);
        if (in_string) {
            if (nul_escape(json + i, len - i))
                return req_fail(c, NNT_ERR_FORMAT, "", "byte %zu: a string holds the escape \\u0000 (NUL), which no "
                                "field of a request takes", i);
            if (ch == '\\') i++; /* the escaped byte never ends the string */
            else if (ch == '"') in_string = 0;
            continue;
        }
        if (ch == '"') in_string = 1;
        else if (ch == '[' || ch == '{') {
            if (++depth > REQ_MAX_DEPTH)
                return req_fail(c, NNT_ERR_FORMAT, "", "byte %zu: arrays and objects nested deeper than %d levels", i,
                                REQ_MAX_DEPTH);
        } else if (ch == ']' || ch == '}') {
            depth--;
        }
    }
    return NNT_OK;
}

const cJSON *req_member(const cJSON *obj, const char *key)
{
    return cJSON_GetObjectItemCaseSensitive(obj, key);
}

nnt_status req_members(const req_ctx *c, const cJSON *obj, const char *field, const char *const *known, int n)
{
    char f[REQ_FIELD_MAX];
    if (!cJSON_IsObject(obj)) {
        char got[80];
        return req_fail(c, NNT_ERR_FORMAT, field, "expected an object, got %s", req_got(obj, got, sizeof got));
    }
    for (const cJSON *m = obj->child; m; m = m->next) {
        int k = 0;
        while (k < n && strcmp(m->string, known[k]) != 0) k++;
        if (k == n) {
            char list[512];
            size_t at = 0;
            list[0] = '\0';
            for (int j = 0; j < n && at < sizeof list; j++)
                at += (size_t)snprintf(list + at, sizeof list - at, "%s%s", j ? ", " : "", known[j]);
            return req_fail(c, NNT_ERR_FORMAT, req_field(f, field, m->string), "unknown field; %s takes %s",
                            *field ? field : "a request", list);
        }
        for (const cJSON *p = obj->child; p != m; p = p->next)
            if (strcmp(p->string, m->string) == 0)
                return req_fail(c, NNT_ERR_FORMAT, req_field(f, field, m->string),
                                "given twice (a request names each field once)");
    }
    return NNT_OK;
}

nnt_status req_int_value(const req_ctx *c, const cJSON *v, const char *field, long long min, long long max,
                         long long *out)
{
    char got[80];
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble) || v->valuedouble != floor(v->valuedouble))
        return req_fail(c, NNT_ERR_FORMAT, field, "expected an integer in %lld..%lld, got %s", min, max,
                        req_got(v, got, sizeof got));
    double d = v->valuedouble;
    if (d < (double)min || d > (double)max)
        return req_fail(c, NNT_ERR_INVALID_ARGUMENT, field, "expected an integer in %lld..%lld, got %s", min, max,
                        req_got(v, got, sizeof got));
    *out = (long long)d;
    return NNT_OK;
}

nnt_status req_int(const req_ctx *c, const cJSON *obj, const char *parent, const char *key, int required, long long min,
                   long long max, long long *out)
{
    char f[REQ_FIELD_MAX];
    const cJSON *v = req_member(obj, key);
    if (!v && required)
        return req_fail(c, NNT_ERR_FORMAT, req_field(f, parent, key), "missing (expected an integer in %lld..%lld)", min,
                        max);
    return v ? req_int_value(c, v, req_field(f, parent, key), min, max, out) : NNT_OK;
}

nnt_status req_number(const req_ctx *c, const cJSON *obj, const char *parent, const char *key, int required, double min,
                      double max, const char *expected, double *out)
{
    char f[REQ_FIELD_MAX], got[80];
    const cJSON *v = req_member(obj, key);
    req_field(f, parent, key);
    if (!v) return required ? req_fail(c, NNT_ERR_FORMAT, f, "missing (expected %s)", expected) : NNT_OK;
    if (!cJSON_IsNumber(v)) return req_fail(c, NNT_ERR_FORMAT, f, "expected %s, got %s", expected, req_got(v, got, sizeof got));
    double d = v->valuedouble;
    if (!isfinite(d) || d < min || d > max)
        return req_fail(c, NNT_ERR_INVALID_ARGUMENT, f, "expected %s, got %s", expected, req_got(v, got, sizeof got));
    *out = d;
    return NNT_OK;
}

nnt_status req_bool(const req_ctx *c, const cJSON *obj, const char *parent, const char *key, int *out)
{
    char f[REQ_FIELD_MAX], got[80];
    const cJSON *v = req_member(obj, key);
    if (!v) return NNT_OK;
    if (!cJSON_IsBool(v))
        return req_fail(c, NNT_ERR_FORMAT, req_field(f, parent, key), "expected true or false, got %s",
                        req_got(v, got, sizeof got));
    *out = cJSON_IsTrue(v);
    return NNT_OK;
}

nnt_status req_string(const req_ctx *c, const cJSON *obj, const char *parent, const char *key, int required, char **out)
{
    char f[REQ_FIELD_MAX], got[80];
    const cJSON *v = req_member(obj, key);
    *out = NULL;
    req_field(f, parent, key);
    if (!v) return required ? req_fail(c, NNT_ERR_FORMAT, f, "missing (expected a string)") : NNT_OK;
    if (!cJSON_IsString(v)) return req_fail(c, NNT_ERR_FORMAT, f, "expected a string, got %s", req_got(v, got, sizeof got));
    if (!(*out = nnt_strdup(v->valuestring))) return req_fail(c, NNT_ERR_OUT_OF_MEMORY, f, "no memory");
    return NNT_OK;
}

/* v is an array of 1..max_items entries; its size in *n. */
static nnt_status req_array(const req_ctx *c, const cJSON *v, const char *field, const char *of, int max_items, int *n)
{
    char got[80];
    if (!cJSON_IsArray(v)) return req_fail(c, NNT_ERR_FORMAT, field, "expected an array of %s, got %s", of, req_got(v, got, sizeof got));
    *n = cJSON_GetArraySize(v);
    if (*n < 1) return req_fail(c, NNT_ERR_INVALID_ARGUMENT, field, "expected at least one of %s, got []", of);
    if (*n > max_items)
        return req_fail(c, NNT_ERR_FORMAT, field, "%d entries; this list holds at most %d", *n, max_items);
    return NNT_OK;
}

static int cmp_int(const void *a, const void *b)
{
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

/* The first entry of list [n] that repeats an earlier one, or -1. */
static int first_repeat(const int *list, int n)
{
    int *sorted = malloc((size_t)n * sizeof *sorted);
    if (!sorted) return -2;
    memcpy(sorted, list, (size_t)n * sizeof *sorted);
    qsort(sorted, (size_t)n, sizeof *sorted, cmp_int);
    int dup = 0, found = 0;
    for (int k = 1; k < n && !found; k++)
        if (sorted[k] == sorted[k - 1]) dup = sorted[k], found = 1;
    free(sorted);
    if (!found) return -1;
    for (int k = 0, seen = 0; k < n; k++)
        if (list[k] == dup && seen++) return k;
    return -1;
}

nnt_status req_int_list(const req_ctx *c, const cJSON *v, const char *field, long long min, long long max, int unique,
                        int max_items, int **out, int *n)
{
    char f[REQ_FIELD_MAX], of[64];
    snprintf(of, sizeof of, "integers in %lld..%lld", min, max);
    nnt_status st = req_array(c, v, field, of, max_items, n);
    if (st != NNT_OK) return st;
    int *list = malloc((size_t)*n * sizeof *list);
    if (!list) return req_fail(c, NNT_ERR_OUT_OF_MEMORY, field, "no memory");
    int k = 0;
    for (const cJSON *e = v->child; e && st == NNT_OK; e = e->next, k++) {
        long long x = 0;
        st = req_int_value(c, e, req_index(f, field, k), min, max, &x);
        list[k] = (int)x;
    }
    int dup = st == NNT_OK && unique ? first_repeat(list, *n) : -1;
    if (dup == -2) st = req_fail(c, NNT_ERR_OUT_OF_MEMORY, field, "no memory");
    if (dup >= 0) st = req_fail(c, NNT_ERR_INVALID_ARGUMENT, req_index(f, field, dup), "%d is given twice", list[dup]);
    if (st != NNT_OK) {
        free(list);
        return st;
    }
    *out = list;
    return NNT_OK;
}

/* A position: an integer, or "prompt", "generated", "all". */
static nnt_status req_position(const req_ctx *c, const cJSON *e, const char *field, int *out)
{
    static const char expected[] =
        "expected a position: an integer in -2147483645..2147483647 or one of \"prompt\", \"generated\", \"all\"";
    char got[80];
    if (cJSON_IsString(e)) {
        const char *w = e->valuestring;
        if (strcmp(w, "prompt") == 0) *out = NNT_POS_PROMPT;
        else if (strcmp(w, "generated") == 0) *out = NNT_POS_GENERATED;
        else if (strcmp(w, "all") == 0) *out = NNT_POS_ALL;
        else return req_fail(c, NNT_ERR_INVALID_ARGUMENT, field, "%s, got %s", expected, req_got(e, got, sizeof got));
        return NNT_OK;
    }
    if (!cJSON_IsNumber(e) || !isfinite(e->valuedouble) || e->valuedouble != floor(e->valuedouble))
        return req_fail(c, NNT_ERR_FORMAT, field, "%s, got %s", expected, req_got(e, got, sizeof got));
    if (e->valuedouble < (double)REQ_POS_MIN || e->valuedouble > (double)REQ_INT_MAX)
        return req_fail(c, NNT_ERR_INVALID_ARGUMENT, field, "%s, got %s", expected, req_got(e, got, sizeof got));
    *out = (int)e->valuedouble;
    return NNT_OK;
}

nnt_status req_positions(const req_ctx *c, const cJSON *v, const char *field, int **out, int *n)
{
    char f[REQ_FIELD_MAX];
    nnt_status st = req_array(c, v, field, "positions", REQ_MAX_ITEMS, n);
    if (st != NNT_OK) return st;
    int *list = malloc((size_t)*n * sizeof *list);
    if (!list) return req_fail(c, NNT_ERR_OUT_OF_MEMORY, field, "no memory");
    int k = 0;
    for (const cJSON *e = v->child; e && st == NNT_OK; e = e->next, k++) st = req_position(c, e, req_index(f, field, k), &list[k]);
    if (st != NNT_OK) {
        free(list);
        return st;
    }
    *out = list;
    return NNT_OK;
}
