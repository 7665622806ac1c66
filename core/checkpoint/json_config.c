/* json_config.c - config.json access for family plugins, on top of cJSON. Keys may be dotted
 * to reach nested objects ("rope_parameters.rope_theta"); every error names the file and the
 * key. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

/* config.json is read whole into a cJSON tree (families read any of its fields by name), which
 * costs some 40 times the text for arrays of small numbers: the cap bounds that. Released configs
 * are kilobytes (the largest seen, with per-module quantization lists, about 0.2 MB). */
#define MAX_CONFIG_JSON ((size_t)4 << 20)

struct nnt_json {
    char *path;
    cJSON *root;
    const char **architectures; /* NULL-terminated; strings owned by root */
};

static int cmp_key(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* A key given twice in one object of config.json: cJSON's look-up finds the first, Python's
 * json module (so transformers) keeps the last, so the two would build different models from
 * one file; refused. `where` is the dotted path of `node` ("" at the top). */
static nnt_status unique_keys(const char *path, const cJSON *node, char *where, size_t cap, nnt_error *err)
{
    if (cJSON_IsObject(node)) {
        int n = 0;
        for (const cJSON *c = node->child; c; c = c->next) n++;
        if (n > 1) {
            const char **keys = malloc((size_t)n * sizeof *keys);
            if (!keys) return nnt_err_set(err, NNT_ERR_OUT_OF_MEMORY, "no memory");
            int k = 0;
            for (const cJSON *c = node->child; c; c = c->next) keys[k++] = c->string ? c->string : "";
            qsort(keys, (size_t)n, sizeof *keys, cmp_key);
            for (int i = 1; i < n; i++)
                if (strcmp(keys[i], keys[i - 1]) == 0) {
                    nnt_status st = nnt_err_set(err, NNT_ERR_FORMAT, "%s: key '%s%s%s' appears twice", path, where,
                                                where[0] ? "." : "", keys[i]);
                    free(keys);
                    return st;
                }
            free(keys);
        }
    }
    size_t len = strlen(where);
    int i = 0;
    for (const cJSON *c = node->child; c; c = c->next, i++) {
        if (!cJSON_IsObject(c) && !cJSON_IsArray(c)) continue;
        if (cJSON_IsObject(node))
            snprintf(where + len, cap - len, "%s%s", len ? "." : "", c->string ? c->string : "");
        else
            snprintf(where + len, cap - len, "[%d]", i);
        nnt_status st = unique_keys(path, c, where, cap, err);
        where[len] = '\0';
        if (st != NNT_OK) return st;
    }
    return NNT_OK;
}

nnt_status nnt_json_load(const char *path, nnt_json **out, nnt_error *err)
{
    *out = NULL;
    if (!nnt_file_exists(path))
        return nnt_err_set(err, NNT_ERR_IO, "%s: cannot open (does the checkpoint directory hold a config.json?)", path);
    char *text = NULL;
    nnt_status st = nnt_read_file(path, MAX_CONFIG_JSON, &text, NULL, err);
    if (st != NNT_OK) return st;
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithOpts(text, &end, 1);
    if (!root) {
        long off = end ? (long)(end - text) : -1;
        free(text);
        return nnt_err_set(err, NNT_ERR_FORMAT, "%s: malformed JSON near byte %ld", path, off);
    }
    free(text);
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return nnt_err_set(err, NNT_ERR_FORMAT, "%s: expected a JSON object at the top level", path);
    }
    char where[256] = "";
    nnt_status dup = unique_keys(path, root, where, sizeof where, err);
    if (dup != NNT_OK) {
        cJSON_Delete(root);
        return dup;
    }
    nnt_json *j = calloc(1, sizeof *j);
    if (!j) {
        cJSON_Delete(root);
        return nnt_err_set(err, NNT_ERR_OUT_OF_MEMORY, "no memory");
    }
    j->path = nnt_strdup(path);
    j->root = root;
    cJSON *arch = cJSON_GetObjectItemCaseSensitive(root, "architectures");
    int n = cJSON_IsArray(arch) ? cJSON_GetArraySize(arch) : 0;
    j->architectures = calloc((size_t)n + 1, sizeof *j->architectures);
    if (!j->architectures) {
        nnt_json_free(j);
        return nnt_err_set(err, NNT_ERR_OUT_OF_MEMORY, "no memory");
    }
    int k = 0;
    for (int i = 0; i < n; i++) {
        cJSON *e = cJSON_GetArrayItem(arch, i);
        if (cJSON_IsString(e)) j->architectures[k++] = e->valuestring;
    }
    *out = j;
    return NNT_OK;
}

void nnt_json_free(nnt_json *j)
{
    if (!j) return;
    cJSON_Delete(j->root);
    free(j->architectures);
    free(j->path);
    free(j);
}

/* Follows a dotted key; returns NULL when any part is missing (or, unless keep_null, when the
 * value is null). */
static const cJSON *lookup_raw(const nnt_checkpoint *ck, const char *key, int keep_null)
{
    if (!ck || !ck->config) return NULL;
    const cJSON *node = ck->config->root;
    char part[128];
    const char *p = key;
    while (node && *p) {
        const char *dot = strchr(p, '.');
        size_t n = dot ? (size_t)(dot - p) : strlen(p);
        if (n >= sizeof part) return NULL;
        memcpy(part, p, n);
        part[n] = '\0';
        if (!cJSON_IsObject(node)) return NULL;
        node = cJSON_GetObjectItemCaseSensitive(node, part);
        p = dot ? dot + 1 : p + n;
    }
    if (!node || (!keep_null && cJSON_IsNull(node))) return NULL;
    return node;
}

static const cJSON *lookup(const nnt_checkpoint *ck, const char *key)
{
    return lookup_raw(ck, key, 0);
}

int nnt_cfg_is_null(const nnt_checkpoint *ck, const char *key)
{
    const cJSON *v = lookup_raw(ck, key, 1);
    return v && cJSON_IsNull(v);
}

static nnt_status missing(const nnt_checkpoint *ck, const char *key, const char *what,
                          nnt_error *err)
{
    return nnt_err_set(err, NNT_ERR_CONFIG, "%s: required field '%s' is missing (expected %s)",
                       nnt_cfg_path(ck), key, what);
}

static nnt_status wrong_type(const nnt_checkpoint *ck, const char *key, const char *what,
                             const cJSON *v, nnt_error *err)
{
    char *text = cJSON_PrintUnformatted(v);
    nnt_status st = nnt_err_set(err, NNT_ERR_CONFIG, "%s: field '%s' is %.60s, expected %s",
                                nnt_cfg_path(ck), key, text ? text : "?", what);
    free(text);
    return st;
}

/* a number outside its field's domain (config_domains.c) */
static nnt_status out_of_domain(const nnt_checkpoint *ck, const char *key, const char *domain, const cJSON *v,
                                nnt_error *err)
{
    char *text = cJSON_PrintUnformatted(v);
    nnt_status st = nnt_err_set(err, NNT_ERR_CONFIG,
                                "%s: field '%s' is %.60s, outside its domain: expected %s "
                                "(docs/checkpoint-safety.md lists each field's domain)",
                                nnt_cfg_path(ck), key, text ? text : "?", domain);
    free(text);
    return st;
}

nnt_status nnt_cfg_int(const nnt_checkpoint *ck, const char *key, int64_t dflt, int required,
                       int64_t *out, nnt_error *err)
{
    const cJSON *v = lookup(ck, key);
    if (!v) {
        if (required) return missing(ck, key, "an integer", err);
        *out = dflt;
        return NNT_OK;
    }
    if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble))
        return wrong_type(ck, key, "an integer", v, err);
    /* every integer a family reads (sizes, counts, ids) fits 32 bits; larger is a broken file */
    if (fabs(v->valuedouble) > 2147483647.0)
        return wrong_type(ck, key, "an integer of at most 2147483647 in magnitude", v, err);
    const char *domain = nnt_cfg_domain_violation(key, v->valuedouble);
    if (domain) return out_of_domain(ck, key, domain, v, err);
    *out = (int64_t)v->valuedouble;
    return NNT_OK;
}

nnt_status nnt_cfg_float(const nnt_checkpoint *ck, const char *key, double dflt, int required,
                         double *out, nnt_error *err)
{
    const cJSON *v = lookup(ck, key);
    if (!v) {
        if (required) return missing(ck, key, "a number", err);
        *out = dflt;
        return NNT_OK;
    }
    if (!cJSON_IsNumber(v)) return wrong_type(ck, key, "a number", v, err);
    const char *domain = nnt_cfg_domain_violation(key, v->valuedouble);
    if (domain) return out_of_domain(ck, key, domain, v, err);
    *out = v->valuedouble;
    return NNT_OK;
}

nnt_status nnt_cfg_bool(const nnt_checkpoint *ck, const char *key, int dflt, int required,
                        int *out, nnt_error *err)
{
    const cJSON *v = lookup(ck, key);
    if (!v) {
        if (required) return missing(ck, key, "true or false", err);
        *out = dflt;
        return NNT_OK;
    }
    if (cJSON_IsBool(v)) {
        *out = cJSON_IsTrue(v);
        return NNT_OK;
    }
    if (cJSON_IsNumber(v) && (v->valuedouble == 0.0 || v->valuedouble == 1.0)) {
        *out = v->valuedouble != 0.0;
        return NNT_OK;
    }
    return wrong_type(ck, key, "true or false", v, err);
}

nnt_status nnt_cfg_string(const nnt_checkpoint *ck, const char *key, const char *dflt,
                          int required, const char **out, nnt_error *err)
{
    const cJSON *v = lookup(ck, key);
    if (!v) {
        if (required) return missing(ck, key, "a string", err);
        *out = dflt;
        return NNT_OK;
    }
    if (!cJSON_IsString(v)) return wrong_type(ck, key, "a string", v, err);
    *out = v->valuestring;
    return NNT_OK;
}

int nnt_cfg_has(const nnt_checkpoint *ck, const char *key)
{
    return lookup(ck, key) != NULL;
}

nnt_status nnt_cfg_int_list(const nnt_checkpoint *ck, const char *key, const char *const *names,
                            int n_names, int64_t *out, int max, int *count, nnt_error *err)
{
    const cJSON *v = lookup(ck, key);
    *count = 0;
    if (!v) return missing(ck, key, "a list", err);
    if (!cJSON_IsArray(v)) return wrong_type(ck, key, "a list", v, err);
    int n = cJSON_GetArraySize(v);
    if (n > max)
        return nnt_err_set(err, NNT_ERR_CONFIG, "%s: field '%s' has %d entries, at most %d expected",
                           nnt_cfg_path(ck), key, n, max);
    for (int i = 0; i < n; i++) {
        const cJSON *e = cJSON_GetArrayItem(v, i);
        if (names && cJSON_IsString(e)) {
            int found = -1;
            for (int k = 0; k < n_names; k++)
                if (strcmp(names[k], e->valuestring) == 0) found = k;
            if (found < 0) {
                char want[256] = "";
                size_t w = 0;
                for (int k = 0; k < n_names && w < sizeof want; k++)
                    w += (size_t)snprintf(want + w, sizeof want - w, "%s\"%s\"", k ? ", " : "", names[k]);
                return nnt_err_set(err, NNT_ERR_CONFIG,
                                   "%s: field '%s'[%d] is \"%s\", expected one of %s",
                                   nnt_cfg_path(ck), key, i, e->valuestring, want);
            }
            out[i] = found;
        } else if (cJSON_IsNumber(e) && e->valuedouble == floor(e->valuedouble) && fabs(e->valuedouble) <= 2147483647.0) {
            out[i] = (int64_t)e->valuedouble;
            /* with names, a number stands for a name's index: the family indexes by it */
            if (names && (out[i] < 0 || out[i] >= n_names))
                return nnt_err_set(err, NNT_ERR_CONFIG,
                                   "%s: field '%s'[%d] is %lld; a number there is the index of one of its %d names, "
                                   "0..%d", nnt_cfg_path(ck), key, i, (long long)out[i], n_names, n_names - 1);
        } else if (cJSON_IsBool(e)) {
            out[i] = cJSON_IsTrue(e);
        } else {
            char label[160];
            snprintf(label, sizeof label, "%s[%d]", key, i);
            return wrong_type(ck, label, names ? "a known name or an integer" : "an integer", e, err);
        }
    }
    *count = n;
    return NNT_OK;
}

const char *nnt_cfg_path(const nnt_checkpoint *ck)
{
    return ck && ck->config_path ? ck->config_path : "config.json";
}

const char *const *nnt_cfg_architectures(const nnt_checkpoint *ck)
{
    static const char *const none[] = {NULL};
    return ck && ck->config ? ck->config->architectures : none;
}
