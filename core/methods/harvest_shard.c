/* harvest_shard.c - one shard of a harvest being filled: each saved value's kept tokens, converted
 * to the harvest's dtype and laid out [tokens, F...], beside each token's id, row, position and
 * document; written as one safetensors file and emptied for the next. */
#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

#include "harvest_shard.h"

typedef struct hv_buf {
    unsigned char *p;
    size_t n, cap;
} hv_buf;

typedef struct hv_value {
    char key[256];
    int topk;             /* > 0: written sparsely, each token's topk largest entries */
    hv_buf idx;           /* sparse: [tokens, topk] I32 */
    nnt_dtype out;        /* as written */
    int ndim;             /* axes after [batch seq] */
    int64_t shape[NNT_MAX_DIMS];
    int64_t features;
    hv_buf data;
} hv_value;

struct hv_shard {
    hv_value *v;
    int n;
    nnt_dtype dtype;
    hv_buf ids, rows, positions, docs;
    int64_t tokens;
};

/* Room for n more bytes in b. */
static nnt_status reserve(hv_buf *b, size_t n, nnt_error *err)
{
    if (b->n + n > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->n + n) cap *= 2;
        unsigned char *p = realloc(b->p, cap);
        if (!p) return nnt_err_set(err, NNT_ERR_OUT_OF_MEMORY, "no memory for a shard of %zu bytes", cap);
        b->p = p;
        b->cap = cap;
    }
    return NNT_OK;
}

static nnt_status put(hv_buf *b, const void *src, size_t n, nnt_error *err)
{
    nnt_status st = reserve(b, n, err);
    if (st != NNT_OK) return st;
    memcpy(b->p + b->n, src, n);
    b->n += n;
    return NNT_OK;
}

void hv_shard_free(hv_shard *s)
{
    if (!s) return;
    for (int i = 0; i < s->n; i++) {
        free(s->v[i].data.p);
        free(s->v[i].idx.p);
    }
    free(s->v);
    free(s->ids.p);
    free(s->rows.p);
    free(s->positions.p);
    free(s->docs.p);
    free(s);
}

/* The value's path without its @k / #r suffixes. */
static void base_path(const char *key, char *out, size_t n)
{
    snprintf(out, n, "%s", key);
    out[strcspn(out, "@#")] = '\0';
}

/* The K of spec s's top_features entry for key, 0 when it has none. */
static int sparse_k(const nnt_harvest_spec *s, const char *key)
{
    for (int i = 0; i < s->n_top_features; i++)
        if (s->top_features && s->top_features[i] && !strcmp(s->top_features[i], key)) return s->top_features_k[i];
    return 0;
}

nnt_status hv_shard_new(nnt_model *m, const nnt_trace *t, const hv_reduce *red, int batch, int seq,
                        const nnt_harvest_spec *spec, hv_shard **out, nnt_error *err)
{
    nnt_dtype dtype = spec->dtype;
    *out = NULL;
    hv_shard *s = calloc(1, sizeof *s);
    int n = nnt_trace_result_count(t);
    if (!s || !(s->v = calloc((size_t)(n ? n : 1), sizeof *s->v))) {
        free(s);
        return nnt_err_set(err, NNT_ERR_OUT_OF_MEMORY, "no memory");
    }
    s->dtype = dtype;
    nnt_status st = NNT_OK;
    for (int i = 0; i < n && st == NNT_OK; i++) {
        const char *key = NULL;
        const nnt_tensor *v = NULL;
        nnt_trace_result(t, i, &key, &v);
        if (!key || hv_reduce_owns(red, t, key)) continue;
        char base[256];
        base_path(key, base, sizeof base);
        nnt_value_info vi;
        nnt_call_dims dims = {.batch = batch, .seq = seq};
        const char *axes = nnt_model_value_info(m, base, &dims, &vi) == NNT_OK && vi.axes ? vi.axes : "";
        if (!axes[0] && strstr(base, ".sae.") && v) { /* an attached SAE's output: [batch seq features] */
            axes = "[batch seq features]";
            vi.ndim = 3;
        }
        if (strchr(key, '@'))
            st = nnt_err_set(err, NNT_ERR_INVALID_ARGUMENT, "save %s: the value is emitted several times in one "
                                                            "forward; a harvest keeps one per token", base);
        else if (!v)
            st = nnt_err_set(err, NNT_ERR_INVALID_ARGUMENT, "save %s: the value is None in this forward; a harvest "
                                                            "keeps values every forward has", key);
        else if (strncmp(axes, "[batch seq", 10) != 0 || v->ndim < 2 || v->ndim != vi.ndim ||
                 v->shape[0] != batch || v->shape[1] != seq)
            st = nnt_err_set(err, NNT_ERR_INVALID_ARGUMENT,
                             "save %s: a harvest keeps values laid out [batch seq ...] whole on those two axes (this "
                             "one is %s; choose tokens with positions, --positions, and slice only later axes)",
                             key, axes[0] ? axes : "laid out otherwise");
        if (st != NNT_OK) break;
        hv_value *hv = &s->v[s->n++];
        snprintf(hv->key, sizeof hv->key, "%s", key);
        hv->topk = sparse_k(spec, key);
        if (hv->topk && (v->ndim != 3 || !nnt_dtype_is_float(v->dtype) || hv->topk < 1 || hv->topk > v->shape[2])) {
            st = nnt_err_set(err, NNT_ERR_INVALID_ARGUMENT, "top_features %s: K %d; a sparse save takes a float value "
                                                            "[batch seq F] and 1 <= K <= F", key, hv->topk);
            break;
        }
        hv->out = nnt_dtype_is_float(v->dtype) ? dtype : v->dtype;
        hv->ndim = v->ndim - 2;
        hv->features = 1;
        for (int d = 2; d < v->ndim; d++) {
            hv->shape[d - 2] = v->shape[d];
            hv->features *= v->shape[d];
        }
    }
    for (int i = 0; st == NNT_OK && i < spec->n_top_features; i++) {
        int found = 0;
        for (int j = 0; j < s->n; j++) found |= spec->top_features[i] && !strcmp(s->v[j].key, spec->top_features[i]);
        if (!found)
            st = nnt_err_set(err, NNT_ERR_INVALID_ARGUMENT, "top_features[%d]: '%s' is not a value the request saves "
                                                            "(save it, under that key)", i,
                             spec->top_features[i] ? spec->top_features[i] : "(null)");
    }
    if (st == NNT_OK && s->n == 0 && !red)
        st = nnt_err_set(err, NNT_ERR_INVALID_ARGUMENT, "saves: the request saves no value and no reduction is asked "
                                                        "for (reduce, routing_stats): nothing to harvest");
    if (st != NNT_OK) {
        hv_shard_free(s);
        return st;
    }
    *out = s;
    return NNT_OK;
}

static size_t elsize(nnt_dtype dt)
{
    nnt_tensor one = {.dtype = dt, .ndim = 1, .shape = {1}};
    return nnt_tensor_nbytes(&one);
}

/* Each kept token's K largest entries of v [B, T, F] (the smaller index first among equal ones):
 * indices into hv->idx, values (in hv->out) into hv->data. */
static nnt_status add_sparse(hv_value *hv, const nnt_tensor *v, const hv_batch *b, nnt_error *err)
{
    int K = hv->topk;
    int64_t F = hv->features;
    int32_t top[4096];
    float val[4096], one[4096];
    int32_t *ti = K <= 4096 ? top : malloc((size_t)K * sizeof *ti);
    float *tv = K <= 4096 ? val : malloc((size_t)K * sizeof *tv), *cv = K <= 4096 ? one : malloc((size_t)K * sizeof *cv);
    nnt_status st = ti && tv && cv ? NNT_OK : nnt_err_set(err, NNT_ERR_OUT_OF_MEMORY, "no memory");
    size_t dst_el = elsize(hv->out);
    for (int64_t k = 0; st == NNT_OK && k < (int64_t)b->batch * b->seq; k++) {
        if (!b->keep[k]) continue;
        int n = 0;
        for (int64_t f = 0; f < F; f++) {
            float x = (float)(v->dtype == NNT_F32 ? ((const float *)v->data)[k * F + f] : nnt_tensor_get_f64(v, k * F + f));
            if (n == K && !(x > tv[K - 1])) continue;
            int at = n < K ? n : K - 1;
            while (at > 0 && x > tv[at - 1]) at--;
            int last = n < K ? n : K - 1;
            memmove(tv + at + 1, tv + at, (size_t)(last - at) * sizeof *tv);
            memmove(ti + at + 1, ti + at, (size_t)(last - at) * sizeof *ti);
            tv[at] = x;
            ti[at] = (int32_t)f;
            if (n < K) n++;
        }
        for (int j = n; j < K; j++) { /* fewer than K comparable entries (NaN): index -1 */
            ti[j] = -1;
            tv[j] = 0;
        }
        memcpy(cv, tv, (size_t)K * sizeof *cv);
        st = reserve(&hv->data, (size_t)K * dst_el, err);
        if (st == NNT_OK) st = nnt_convert(cv, NNT_F32, hv->data.p + hv->data.n, hv->out, K, err);
        if (st == NNT_OK) hv->data.n += (size_t)K * dst_el;
        if (st == NNT_OK) st = put(&hv->idx, ti, (size_t)K * sizeof *ti, err);
    }
    if (ti != top) free(ti);
    if (tv != val) free(tv);
    if (cv != one) free(cv);
    return st;
}

nnt_status hv_shard_add(hv_shard *s, const nnt_trace *t, const hv_batch *b, nnt_error *err)
{
    int B = b->batch, T = b->seq;
    for (int i = 0; i < s->n; i++) {
        hv_value *hv = &s->v[i];
        const nnt_tensor *v = nnt_trace_get(t, hv->key);
        int ok = v && v->ndim == hv->ndim + 2 && v->shape[0] == B && v->shape[1] == T;
        for (int d = 0; ok && d < hv->ndim; d++) ok = v->shape[d + 2] == hv->shape[d];
        if (!ok)
            return nnt_err_set(err, NNT_ERR_SHAPE, "save %s: this forward (%d rows of %d tokens) has it in another "
                                                   "shape than the first", hv->key, B, T);
        if (hv->topk) {
            nnt_status st = add_sparse(hv, v, b, err);
            if (st != NNT_OK) return st;
            continue;
        }
        size_t src_el = elsize(v->dtype), dst_el = elsize(hv->out), row = (size_t)hv->features * dst_el;
        for (int64_t k = 0; k < (int64_t)B * T; k++) {
            if (!b->keep[k]) continue;
            size_t at = hv->data.n;
            nnt_status st = reserve(&hv->data, row, err);
            if (st != NNT_OK) return st;
            const unsigned char *src = (const unsigned char *)v->data + (size_t)k * (size_t)hv->features * src_el;
            if (hv->out == v->dtype) memcpy(hv->data.p + at, src, row);
            else if ((st = nnt_convert(src, v->dtype, hv->data.p + at, hv->out, hv->features, err)) != NNT_OK)
                return st;
            hv->data.n = at + row;
        }
    }
    for (int r = 0; r < B; r++)
        for (int j = 0; j < T; j++) {
            if (!b->keep[r * T + j]) continue;
            int32_t pos = j;
            int64_t row = b->first_row + r;
            nnt_status st = put(&s->ids, &b->ids[r * T + j], 4, err);
            if (st == NNT_OK) st = put(&s->rows, &row, 8, err);
            if (st == NNT_OK) st = put(&s->positions, &pos, 4, err);
            if (st == NNT_OK) st = put(&s->docs, &b->docs[r * T + j], 8, err);
            if (st != NNT_OK) return st;
            s->tokens++;
        }
    return NNT_OK;
}

uint64_t hv_shard_bytes(const hv_shard *s)
{
    uint64_t n = s->ids.n + s->rows.n + s->positions.n + s->docs.n;
    for (int i = 0; i < s->n; i++) n += s->v[i].data.n + s->v[i].idx.n;
    return n;
}

int64_t hv_shard_tokens(const hv_shard *s) { return s->tokens; }

nnt_status hv_shard_write(hv_shard *s, nnt_runtime *rt, const char *file)
{
    int n = 2 * s->n + 4, at = 0;
    const char **keys = calloc((size_t)n, sizeof *keys);
    char (*names)[300] = calloc((size_t)(2 * s->n + 1), sizeof *names);
    nnt_tensor *ts = calloc((size_t)n, sizeof *ts);
    if (!keys || !ts || !names) {
        free(keys);
        free(ts);
        free(names);
        return nnt_err_set(&rt->err, NNT_ERR_OUT_OF_MEMORY, "no memory");
    }
    static unsigned char empty[8];
    for (int i = 0; i < s->n; i++) {
        hv_value *hv = &s->v[i];
        if (hv->topk) { /* KEY.top_indices [N, K] I32 and KEY.top_values [N, K] */
            snprintf(names[2 * i], sizeof names[0], "%s.top_indices", hv->key);
            snprintf(names[2 * i + 1], sizeof names[0], "%s.top_values", hv->key);
            keys[at] = names[2 * i];
            ts[at++] = (nnt_tensor){.dtype = NNT_I32, .ndim = 2, .shape = {s->tokens, hv->topk},
                                    .data = hv->idx.p ? hv->idx.p : empty};
            keys[at] = names[2 * i + 1];
            ts[at++] = (nnt_tensor){.dtype = hv->out, .ndim = 2, .shape = {s->tokens, hv->topk},
                                    .data = hv->data.p ? hv->data.p : empty};
            continue;
        }
        keys[at] = hv->key;
        ts[at] = (nnt_tensor){.dtype = hv->out, .ndim = hv->ndim + 1, .data = hv->data.p ? hv->data.p : empty};
        ts[at].shape[0] = s->tokens;
        for (int d = 0; d < hv->ndim; d++) ts[at].shape[d + 1] = hv->shape[d];
        at++;
    }
    const char *meta[4] = {HV_KEY_IDS, HV_KEY_ROWS, HV_KEY_POSITIONS, HV_KEY_DOCUMENTS};
    const hv_buf *bufs[4] = {&s->ids, &s->rows, &s->positions, &s->docs};
    const nnt_dtype dts[4] = {NNT_I32, NNT_I64, NNT_I32, NNT_I64};
    for (int k = 0; k < 4; k++) {
        keys[at] = meta[k];
        ts[at++] = (nnt_tensor){.dtype = dts[k], .ndim = 1, .shape = {s->tokens}, .data = bufs[k]->p ? bufs[k]->p : empty};
    }
    nnt_status st = nnt_safetensors_write(rt, file, at, keys, ts);
    free(keys);
    free(ts);
    free(names);
    if (st != NNT_OK) return st;
    for (int i = 0; i < s->n; i++) s->v[i].data.n = s->v[i].idx.n = 0;
    s->ids.n = s->rows.n = s->positions.n = s->docs.n = 0;
    s->tokens = 0;
    return NNT_OK;
}

struct cJSON *hv_shard_values_json(const hv_shard *s)
{
    cJSON *o = cJSON_CreateObject();
    for (int i = 0; o && i < s->n; i++) {
        const hv_value *hv = &s->v[i];
        if (hv->topk) {
            char key[300];
            for (int j = 0; j < 2; j++) {
                snprintf(key, sizeof key, "%s.%s", hv->key, j ? "top_values" : "top_indices");
                cJSON *e = cJSON_AddObjectToObject(o, key), *shape = cJSON_AddArrayToObject(e, "shape");
                cJSON_AddStringToObject(e, "dtype", j ? nnt_dtype_name(hv->out) : "I32");
                cJSON_AddItemToArray(shape, cJSON_CreateString("tokens"));
                cJSON_AddItemToArray(shape, cJSON_CreateNumber(hv->topk));
            }
            continue;
        }
        cJSON *e = cJSON_AddObjectToObject(o, hv->key), *shape = cJSON_AddArrayToObject(e, "shape");
        cJSON_AddStringToObject(e, "dtype", nnt_dtype_name(hv->out));
        cJSON_AddItemToArray(shape, cJSON_CreateString("tokens"));
        for (int d = 0; d < hv->ndim; d++) cJSON_AddItemToArray(shape, cJSON_CreateNumber((double)hv->shape[d]));
    }
    return o;
}
