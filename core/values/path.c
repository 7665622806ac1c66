/* path.c - value paths: parsing "[model.][layers.N.|layers[N].][host.]value" (PCRE2), the
 * canonical spelling, wildcards over value names ("*", "layers.N.*", "layers.N.HOST.*") and "did
 * you mean" suggestions for unknown names. */
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

static const char *const PATH_PATTERN =
    "^(?:model\\.)?"
    "(?:layers(?:\\.(-?[0-9]+|\\*)|\\[(-?[0-9]+|\\*)\\])\\.)?"
    "([A-Za-z_][A-Za-z0-9_]*)(?:\\.([A-Za-z_][A-Za-z0-9_]*))?$";

const char *nnt_path_format(const nnt_model *m, nnt_value_id slot, int layer, char *buf, size_t n)
{
    const nnt_value_def *d = nnt_value_def_get(slot);
    const nnt_native_info *ni = nnt_model_native(m, slot);
    char idx[24];
    if (layer == NNT_LAYER_ALL)
        snprintf(idx, sizeof idx, "*");
    else
        snprintf(idx, sizeof idx, "%d", layer);
    if (ni && ni->block)
        snprintf(buf, n, "layers.%s.%s.%s", idx, ni->standard, ni->io ? "output" : "input");
    else if (ni)
        snprintf(buf, n, "%s.%s", ni->standard, ni->io ? "output" : "input");
    else if (!d)
        snprintf(buf, n, "?");
    else if (d->module == NNT_MODULE_MODEL)
        snprintf(buf, n, "%s", d->name);
    else if (d->module == NNT_MODULE_LAYER)
        snprintf(buf, n, "layers.%s.%s", idx, d->name);
    else
        snprintf(buf, n, "layers.%s.%s.%s", idx, nnt_module_name(d->module), d->name);
    return buf;
}

/* Appends up to three names from `cands` close to `word` to msg. */
static void suggest(char *msg, size_t n, const char *word, const char *const *cands, int count)
{
    int limit = (int)strlen(word) / 3;
    if (limit < 2) limit = 2;
    int dist[2 * NNT_NATIVE_MAX + NNT_VALUE_COUNT];
    if (count > (int)(sizeof dist / sizeof dist[0])) count = (int)(sizeof dist / sizeof dist[0]);
    for (int i = 0; i < count; i++) {
        int d = nnt_edit_distance(word, cands[i]);
        /* containment counts as near: "expert_weight" for "expert_weights" */
        if ((strstr(cands[i], word) || strstr(word, cands[i])) && d > limit) d = limit;
        dist[i] = d;
    }
    size_t k = strlen(msg);
    int shown = 0;
    for (int d = 0; d <= limit && shown < 3; d++)
        for (int i = 0; i < count && shown < 3; i++) {
            if (dist[i] != d) continue;
            int dup = 0;
            for (int j = 0; j < i; j++) dup |= dist[j] <= limit && strcmp(cands[j], cands[i]) == 0;
            if (dup) continue;
            k += (size_t)snprintf(msg + k, k < n ? n - k : 0, "%s'%s'",
                                  shown ? " or " : "; did you mean ", cands[i]);
            shown++;
        }
    if (shown && k < n) snprintf(msg + k, n - k, "?");
}

static int parse_index(const char *s, int num_layers, const char *text, nnt_error *err, int *out)
{
    if (strcmp(s, "*") == 0) {
        *out = NNT_LAYER_ALL;
        return 0;
    }
    long v = strtol(s, NULL, 10);
    long idx = v < 0 ? v + num_layers : v;
    if (idx < 0 || idx >= num_layers) {
        nnt_err_set(err, NNT_ERR_INDEX,
                    "path '%s': block %ld is out of range; the model has %d blocks (0..%d, or -%d..-1)",
                    text, v, num_layers, num_layers - 1, num_layers);
        return -1;
    }
    *out = (int)idx;
    return 0;
}

/* Maps a host word (standard or a family's native name) to a host; -1 if unknown. */
static int host_from_word(const nnt_model *m, const char *w)
{
    for (int h = NNT_MODULE_SELF_ATTN; h < NNT_MODULE_COUNT; h++)
        if (strcmp(nnt_module_name((nnt_module)h), w) == 0) return h;
    const nnt_rename_rule *r = m && m->family ? m->family->family->renames : NULL;
    for (; r && r->native; r++) {
        if (r->module_class || strcmp(r->native, w) != 0) continue;
        for (int h = NNT_MODULE_SELF_ATTN; h < NNT_MODULE_COUNT; h++)
            if (strcmp(nnt_module_name((nnt_module)h), r->standard) == 0) return h;
    }
    return -1;
}

static nnt_status unknown_value(const nnt_model *m, const char *text, nnt_module host, const char *word,
                                nnt_error *err)
{
    const char *cands[NNT_VALUE_COUNT];
    int n = 0;
    for (int s = 0; s < NNT_VALUE_COUNT; s++)
        if (nnt_value_module((nnt_value_id)s) == host) cands[n++] = nnt_value_name((nnt_value_id)s);
    char msg[NNT_ERROR_MSG_MAX];
    const char *where = host == NNT_MODULE_MODEL ? "the model" : host == NNT_MODULE_LAYER ? "a block" : nnt_module_name(host);
    snprintf(msg, sizeof msg, "path '%s': %s has no standard value '%s'", text, where, word);
    suggest(msg, sizeof msg, word, cands, n);
    /* the name may exist under another host: point at a block of this model that serves it */
    size_t k = strlen(msg);
    for (int s = 0; s < NNT_VALUE_COUNT && k < sizeof msg; s++) {
        if (nnt_value_module((nnt_value_id)s) == host || strcmp(nnt_value_name((nnt_value_id)s), word) != 0) continue;
        int layer = -1, layers = m && nnt_value_module((nnt_value_id)s) != NNT_MODULE_MODEL ? m->info.num_layers : 0;
        for (int l = 0; l < layers && layer < 0; l++) {
            nnt_value_info vi;
            nnt_error scratch = {0};
            if (nnt_model_slot_info(m, l, (nnt_value_id)s, NULL, &vi, &scratch) == NNT_OK && vi.served) layer = l;
        }
        char p[128];
        if (layer >= 0 || nnt_value_module((nnt_value_id)s) == NNT_MODULE_MODEL) {
            nnt_path_format(m, (nnt_value_id)s, layer < 0 ? 0 : layer, p, sizeof p);
            k += (size_t)snprintf(msg + k, sizeof msg - k, " ('%s' exists as %s)", word, p);
        } else {
            k += (size_t)snprintf(msg + k, sizeof msg - k, " ('%s' belongs to %s, which no block of this model has)", word,
                                  nnt_module_name(nnt_value_module((nnt_value_id)s)));
        }
        break;
    }
    return nnt_err_set(err, NNT_ERR_PATH, "%s", msg);
}

static int parse_native(const nnt_model *m, const char *text, nnt_path *out, nnt_error *err);

nnt_status nnt_path_parse(const nnt_model *m, const char *text, nnt_path *out, nnt_error *err)
{
    if (!text) return nnt_err_set(err, NNT_ERR_INVALID_ARGUMENT, "value path is NULL");
    out->via = NULL;
    int native = parse_native(m, text, out, err);
    if (native) return native > 0 ? NNT_OK : err->status;
    int errcode;
    PCRE2_SIZE erroff;
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)PATH_PATTERN, PCRE2_ZERO_TERMINATED, 0, &errcode,
                                   &erroff, NULL);
    if (!re) return nnt_err_set(err, NNT_ERR_INTERNAL, "path pattern failed to compile (code %d)", errcode);
    pcre2_match_data *md = pcre2_match_data_create_from_pattern(re, NULL);
    int rc = md ? pcre2_match(re, (PCRE2_SPTR)text, PCRE2_ZERO_TERMINATED, 0, 0, md, NULL) : -1;
    if (rc < 0) {
        pcre2_match_data_free(md);
        pcre2_code_free(re);
        return nnt_err_set(err, NNT_ERR_PATH,
                           "path '%s' is not of the form [model.][layers.N.][host.]value "
                           "(e.g. 'logits', 'layers.1.mlp.expert_weights', 'layers[0].layer_output', "
                           "'layers.*.layer_output')", text);
    }
    PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
    char groups[5][128];
    for (int g = 1; g <= 4; g++) {
        groups[g][0] = '\0';
        if (g < rc && ov[2 * g] != PCRE2_UNSET) {
            size_t len = ov[2 * g + 1] - ov[2 * g];
            if (len >= sizeof groups[g]) { /* never cut: a cut number or name would be another one */
                pcre2_match_data_free(md);
                pcre2_code_free(re);
                return nnt_err_set(err, NNT_ERR_PATH,
                                   "path '%s': a part of %zu characters, longer than any block number or name (at "
                                   "most %zu)", text, len, sizeof groups[g] - 1);
            }
            memcpy(groups[g], text + ov[2 * g], len);
            groups[g][len] = '\0';
        }
    }
    pcre2_match_data_free(md);
    pcre2_code_free(re);

    const char *index = groups[1][0] ? groups[1] : groups[2][0] ? groups[2] : NULL;
    const char *w1 = groups[3], *w2 = groups[4][0] ? groups[4] : NULL;
    int num_layers = m ? m->info.num_layers : 0;

    if (!index) {
        if (w2) {
            return nnt_err_set(err, NNT_ERR_PATH,
                               "path '%s': '%s.%s' needs a block: write 'layers.N.%s.%s'", text, w1, w2, w1, w2);
        }
        int s = nnt_value_find(NNT_MODULE_MODEL, w1);
        if (s < 0) {
            /* a block value written without its block */
            for (int h = NNT_MODULE_LAYER; h < NNT_MODULE_COUNT; h++)
                if (nnt_value_find((nnt_module)h, w1) >= 0) {
                    char p[128];
                    nnt_path_format(m, (nnt_value_id)nnt_value_find((nnt_module)h, w1), 0, p, sizeof p);
                    return nnt_err_set(err, NNT_ERR_PATH,
                                       "path '%s': '%s' is a value of each block; name one, e.g. '%s'",
                                       text, w1, p);
                }
            return unknown_value(m, text, NNT_MODULE_MODEL, w1, err);
        }
        out->slot = (nnt_value_id)s;
        out->layer = -1;
        return NNT_OK;
    }
    int layer;
    if (parse_index(index, num_layers, text, err, &layer) != 0) return err->status;
    nnt_module host = NNT_MODULE_LAYER;
    const char *vname = w1;
    if (w2) {
        int h = host_from_word(m, w1);
        if (h < 0) {
            const char *cands[] = {"self_attn", "linear_attn", "mlp"};
            char msg[NNT_ERROR_MSG_MAX];
            snprintf(msg, sizeof msg, "path '%s': a block has no module '%s' holding standard values", text, w1);
            suggest(msg, sizeof msg, w1, cands, 3);
            return nnt_err_set(err, NNT_ERR_PATH, "%s", msg);
        }
        host = (nnt_module)h;
        vname = w2;
    } else {
        if (strcmp(w1, "input") == 0) vname = "layer_input";
        if (strcmp(w1, "output") == 0) vname = "layer_output";
        if (nnt_value_find(NNT_MODULE_MODEL, w1) >= 0)
            return nnt_err_set(err, NNT_ERR_PATH, "path '%s': '%s' is a model value; drop 'layers.%s.'",
                               text, w1, index);
    }
    int s = nnt_value_find(host, vname);
    if (s < 0) return unknown_value(m, text, host, vname, err);
    out->slot = (nnt_value_id)s;
    out->layer = layer;
    return NNT_OK;
}

/* "[model.]layers.N" or "layers[N]" at the start of text (N digits with a sign, or "*"): the
 * index text into index and what follows it into *rest; 0 when text does not start so (with
 * "model." alone stripped into *rest). */
static int split_block(const char *text, char *index, size_t n, const char **rest)
{
    const char *s = strncmp(text, "model.", 6) == 0 ? text + 6 : text;
    *rest = s;
    if (strncmp(s, "layers", 6) != 0) return 0;
    s += 6;
    size_t k;
    if (*s == '.') {
        k = strcspn(s + 1, ".");
        if (k == 0 || k >= n) return 0;
        memcpy(index, s + 1, k);
        s += 1 + k;
    } else if (*s == '[') {
        k = strcspn(s + 1, "]");
        if (k == 0 || k >= n || s[1 + k] != ']') return 0;
        memcpy(index, s + 1, k);
        s += 2 + k;
    } else {
        return 0;
    }
    index[k] = '\0';
    if (strcmp(index, "*") != 0) { /* digits with an optional sign, as the path pattern takes */
        size_t d = index[0] == '-';
        if (!index[d] || strspn(index + d, "0123456789") != strlen(index + d)) return 0;
    }
    *rest = s;
    return 1;
}

/* 1 when module path p (n characters) names entry ni: as many dotted names as its path, each in
 * the checkpoint's or the standard spelling ("mlp.gate", transformers' own mix, names
 * block_sparse_moe.gate = mlp.router). */
static int module_matches(const nnt_native_info *ni, const char *p, size_t n)
{
    const char *a = ni->module, *b = ni->standard;
    size_t i = 0;
    for (;;) {
        size_t la = strcspn(a, "."), lb = strcspn(b, "."), lp = 0;
        while (i + lp < n && p[i + lp] != '.') lp++;
        if (!((lp == la && strncmp(p + i, a, la) == 0) || (lp == lb && strncmp(p + i, b, lb) == 0))) return 0;
        a += la;
        b += lb;
        i += lp;
        int end = i >= n;
        if ((*a == 0) != end || (*b == 0) != end) return 0;
        if (end) return 1;
        a++, b++, i++;
    }
}

/* A native module value: "[model.][layers.N.]MODULE.input|output" with MODULE an entry of m's
 * native list (either spelling). 1 and *out when text is one, 0 when it is not, -1 with err set
 * for a block index out of range. */
static int parse_native(const nnt_model *m, const char *text, nnt_path *out, nnt_error *err)
{
    if (!m || !m->n_natives) return 0;
    char index[32];
    const char *rest;
    int block = split_block(text, index, sizeof index, &rest);
    if (block) {
        if (*rest != '.') return 0;
        rest++;
    }
    size_t len = strlen(rest);
    int io = len > 6 && strcmp(rest + len - 6, ".input") == 0 ? 0 : len > 7 && strcmp(rest + len - 7, ".output") == 0 ? 1 : -1;
    if (io < 0) return 0;
    size_t mlen = len - (io ? 7 : 6);
    /* several rows may have the path (Kimi's self_attn is delta attention on some blocks, latent
     * attention on others): the one block N has; for every block ("*"), the one whose standard
     * spelling it is (the canonical path); else the first */
    int pick = -1, layer = -1;
    for (int i = 0; i < m->n_natives; i++) {
        const nnt_native_info *ni = &m->natives[i];
        if (ni->io != io || ni->block != block || !module_matches(ni, rest, mlen)) continue;
        if (pick < 0) {
            pick = i;
            if (block && parse_index(index, m->info.num_layers, text, err, &layer) != 0) return -1;
            if (!block) break;
        }
        if (layer == NNT_LAYER_ALL) {
            if (strlen(ni->standard) == mlen && strncmp(ni->standard, rest, mlen) == 0) {
                pick = i;
                break;
            }
            continue;
        }
        nnt_value_info vi;
        nnt_error scratch = {0};
        nnt_value_id id = ni->alias >= 0 ? (nnt_value_id)ni->alias : (nnt_value_id)((int)NNT_VALUE_NATIVE + i);
        if (nnt_model_slot_info(m, layer, id, NULL, &vi, &scratch) == NNT_OK && vi.served) {
            pick = i;
            break;
        }
    }
    if (pick >= 0) {
        const nnt_native_info *ni = &m->natives[pick];
        out->slot = ni->alias >= 0 ? (nnt_value_id)ni->alias : (nnt_value_id)((int)NNT_VALUE_NATIVE + pick);
        out->layer = layer;
        out->via = ni->alias >= 0 ? ni : NULL;
        return 1;
    }
    /* "MODULE.input" with a dotted module path names no module: say so, with the nearest */
    char word[128];
    if (mlen == 0 || mlen >= sizeof word || !memchr(rest, '.', mlen)) return 0;
    memcpy(word, rest, mlen);
    word[mlen] = '\0';
    const char *cands[2 * NNT_NATIVE_MAX];
    int k = 0;
    for (int i = 0; i < m->n_natives; i++)
        if (m->natives[i].block == block) {
            cands[k++] = m->natives[i].standard;
            cands[k++] = m->natives[i].module;
        }
    char msg[NNT_ERROR_MSG_MAX];
    snprintf(msg, sizeof msg, "path '%s': %s has no module '%s' with an %s (`nnt print` lists the modules)", text,
             block ? "a block" : "the model", word, io ? "output" : "input");
    suggest(msg, sizeof msg, word, cands, k);
    nnt_err_set(err, NNT_ERR_PATH, "%s", msg);
    return -1;
}

int nnt_path_wildcard(const nnt_model *m, const char *text, nnt_path_wild *out, nnt_error *err)
{
    if (!text) return 0;
    if (strcmp(text, "*") == 0 || strcmp(text, "model.*") == 0) {
        *out = (nnt_path_wild){.all = 1, .layer = NNT_LAYER_ALL, .host = -1};
        return 1;
    }
    size_t n = strlen(text);
    if (n < 3 || strcmp(text + n - 2, ".*") != 0) return 0;
    char index[32];
    const char *rest;
    if (!split_block(text, index, sizeof index, &rest)) return 0;
    /* what is left: ".*" (the block) or ".HOST.*" */
    int host = -1;
    if (strcmp(rest, ".*") != 0) {
        char word[64];
        size_t len = strlen(rest);
        if (rest[0] != '.' || len < 4 || len - 3 >= sizeof word) return 0;
        memcpy(word, rest + 1, len - 3);
        word[len - 3] = '\0';
        if (strspn(word, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_") != strlen(word)) return 0;
        host = host_from_word(m, word);
        if (host < 0) {
            const char *cands[] = {"self_attn", "linear_attn", "mlp"};
            char msg[NNT_ERROR_MSG_MAX];
            snprintf(msg, sizeof msg, "path '%s': a block has no module '%s' holding standard values", text, word);
            suggest(msg, sizeof msg, word, cands, 3);
            nnt_err_set(err, NNT_ERR_PATH, "%s", msg);
            return -1;
        }
    }
    int layer;
    if (parse_index(index, m ? m->info.num_layers : 0, text, err, &layer) != 0) return -1;
    *out = (nnt_path_wild){.all = 0, .layer = layer, .host = host};
    return 1;
}

/* The public description of one path: parsed here, described by the model (value_info.c). */
nnt_status nnt_model_value_info(const nnt_model *m, const char *path, const nnt_call_dims *dims,
                                nnt_value_info *info)
{
    if (!m || !path || !info) return NNT_ERR_INVALID_ARGUMENT;
    nnt_path p;
    nnt_status st = nnt_path_parse(m, path, &p, &m->rt->err);
    if (st != NNT_OK) return st;
    if (p.layer == NNT_LAYER_ALL)
        return nnt_err_set(&m->rt->err, NNT_ERR_PATH, "'%s': name one block, not '*'", path);
    if (dims && (dims->batch < 1 || dims->seq < 1 || dims->past < 0))
        return nnt_err_set(&m->rt->err, NNT_ERR_INVALID_ARGUMENT,
                           "value info of '%s': the call's dims need batch >= 1, seq >= 1 and past >= 0 (got %d, %d, %d)",
                           path, dims->batch, dims->seq, dims->past);
    return nnt_model_slot_info(m, p.layer, p.slot, dims, info, &m->rt->err);
}
