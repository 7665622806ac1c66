/* reduce.c - a harvest's reductions over the corpus (nnt_harvest_spec.reduce, routing_stats): the
 * per-feature count, sum and sum of squares of a value (its mean and population variance), and
 * for every block with routed experts how often each expert is chosen, its summed weight, which
 * experts are chosen together and which token ids each expert takes. Every number is an integer
 * count or a float64 sum taken in corpus order, so the state saved after a shard and read back on
 * a resume continues to the same bits, and the batch a token was in does not matter. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harvest_internal.h"

#define HV_KEY_MAX 256

typedef struct hv_moment {
    char path[HV_KEY_MAX]; /* as the spec gives it */
    char key[HV_KEY_MAX + 16]; /* its result key in the trace (the last save of the path) */
    int64_t features, count;
    double *sum, *sumsq;   /* [features] */
} hv_moment;

/* (token id, expert) -> tokens, open addressing; key = id * E + expert, -1 empty. */
typedef struct hv_pairs {
    int64_t *keys, *counts;
    int64_t cap, n;
} hv_pairs;

typedef struct hv_routing {
    int layer;
    char idx_path[64], w_path[64];
    char idx_key[HV_KEY_MAX + 16], w_key[HV_KEY_MAX + 16];
    int64_t *counts;   /* [E] */
    double *wsum;      /* [E] */
    int64_t *cooc;     /* [E, E] */
    hv_pairs pairs;
} hv_routing;

/* A value's top contexts: per feature its K largest kept tokens so far, in decreasing order. */
typedef struct hv_topctx {
    char path[HV_KEY_MAX];
    char key[HV_KEY_MAX + 16];
    int shared;        /* the request saves the path itself: its key is the request's value */
    int k;
    int64_t features;  /* F, known at the first forward (or from a saved state) */
    float *values;     /* [F, K] */
    int64_t *rows;     /* [F, K] */
    int32_t *positions;/* [F, K] */
    int32_t *count;    /* [F]: entries held */
} hv_topctx;

struct hv_reduce {
    hv_moment *mom;
    int n_mom;
    hv_topctx *tc;
    int n_tc;
    hv_routing *rt;
    int n_rt;
    int experts, top;
    int64_t tokens;
    int resolved;
};

static void pairs_free(hv_pairs *p)
{
    free(p->keys);
    free(p->counts);
}

void hv_reduce_free(hv_reduce *r)
{
    if (!r) return;
    for (int i = 0; i < r->n_mom; i++) {
        free(r->mom[i].sum);
        free(r->mom[i].sumsq);
    }
    for (int i = 0; i < r->n_rt; i++) {
        free(r->rt[i].counts);
        free(r->rt[i].wsum);
        free(r->rt[i].cooc);
        pairs_free(&r->rt[i].pairs);
    }
    for (int i = 0; i < r->n_tc; i++) {
        free(r->tc[i].values);
        free(r->tc[i].rows);
        free(r->tc[i].positions);
        free(r->tc[i].count);
    }
    free(r->mom);
    free(r->rt);
    free(r->tc);
    free(r);
}

static nnt_status pairs_grow(hv_pairs *p, nnt_error *err)
{
    int64_t cap = p->cap ? 2 * p->cap : 1024;
    int64_t *k = malloc((size_t)cap * sizeof *k), *c = calloc((size_t)cap, sizeof *c);
    if (!k || !c) {
        free(k);
        free(c);
        return nnt_err_set(err, NNT_ERR_OUT_OF_MEMORY, "no memory for the routing statistics' token counts");
    }
    for (int64_t i = 0; i < cap; i++) k[i] = -1;
    for (int64_t i = 0; i < p->cap; i++) {
        if (p->keys[i] < 0) continue;
        uint64_t h = ((uint64_t)p->keys[i] * 0x9e3779b97f4a7c15ULL) & (uint64_t)(cap - 1);
        while (k[h] >= 0) h = (h + 1) & (uint64_t)(cap - 1);
        k[h] = p->keys[i];
        c[h] = p->counts[i];
    }
    pairs_free(p);
    p->keys = k;
    p->counts = c;
    p->cap = cap;
    return NNT_OK;
}

static nnt_status pairs_add(hv_pairs *p, int64_t key, int64_t by, nnt_error *err)
{
    if (2 * (p->n + 1) > p->cap && pairs_grow(p, err) != NNT_OK) return NNT_ERR_OUT_OF_MEMORY;
    uint64_t h = ((uint64_t)key * 0x9e3779b97f4a7c15ULL) & (uint64_t)(p->cap - 1);
    while (p->keys[h] >= 0 && p->keys[h] != key) h = (h + 1) & (uint64_t)(p->cap - 1);
    if (p->keys[h] < 0) {
        p->keys[h] = key;
        p->n++;
    }
    p->counts[h] += by;
    return NNT_OK;
}

/* The key of path's last save in t (PATH, PATH#1, ...: the reductions' saves come after the
 * request's), or "" when t holds none. */
static void last_key(const nnt_trace *t, const char *path, char *key, size_t n)
{
    key[0] = '\0';
    char k[HV_KEY_MAX + 16];
    for (int r = 0; r < 1024; r++) {
        if (r) snprintf(k, sizeof k, "%s#%d", path, r);
        else snprintf(k, sizeof k, "%s", path);
        if (nnt_trace_lookup(t, k, NULL, NULL) != NNT_OK) return;
        snprintf(key, n, "%s", k);
    }
}

static nnt_status open_moments(const nnt_harvest_spec *s, nnt_model *m, nnt_trace *t, hv_reduce *r, nnt_error *err)
{
    r->mom = calloc((size_t)s->n_reduce, sizeof *r->mom);
    if (!r->mom) return nnt_err_set(err, NNT_ERR_OUT_OF_MEMORY, "no memory");
    for (int i = 0; i < s->n_reduce; i++) {
        const char *p = s->reduce[i];
        if (!p || !*p || strlen(p) >= HV_KEY_MAX || strpbrk(p, "*[@#"))
            return nnt_err_set(err, NNT_ERR_INVALID_ARGUMENT,
                               "reduce[%d]: '%s': expected one value's path (no wildcard, slice or suffix), under %d "
                               "characters", i, p ? p : "(null)", HV_KEY_MAX);
        nnt_value_info vi;
        nnt_call_dims dims = {.batch = 1, .seq = 1};
        nnt_status st = nnt_model_value_info(m, p, &dims, &vi);
        if (st != NNT_OK) {
            nnt_err_prefix(err, "reduce[%d]", i);
            return st;
        }
        const char *axes = vi.axes ? vi.axes : "";
        if (!vi.served || vi.ndim < 2 || strncmp(axes, "[batch seq", 10) != 0 || !nnt_dtype_is_float(vi.dtype))
            return nnt_err_set(err, NNT_ERR_INVALID_ARGUMENT,
                               "reduce[%d]: '%s' %s; a reduction takes a float value laid out [batch seq ...]", i, p,
                               !vi.served ? "is not served here" : "is laid out otherwise");
        hv_moment *mo = &r->mom[r->n_mom++];
        snprintf(mo->path, sizeof mo->path, "%s", p);
        mo->features = 1;
        for (int d = 2; d < vi.ndim; d++) mo->features *= vi.shape[d];
        mo->sum = calloc((size_t)mo->features, sizeof *mo->sum);
        mo->sumsq = calloc((size_t)mo->features, sizeof *mo->sumsq);
        if (!mo->sum || !mo->sumsq) return nnt_err_set(err, NNT_ERR_OUT_OF_MEMORY, "no memory");
        if ((st = nnt_trace_save(t, p)) != NNT_OK) {
            nnt_err_prefix(err, "reduce[%d]", i);
            return st;
        }
    }
    return NNT_OK;
}

static nnt_status open_routing(nnt_model *m, nnt_trace *t, hv_reduce *r, nnt_error *err)
{
    const nnt_model_info *mi = nnt_model_get_info(m);
    r->experts = mi->num_experts;
    r->rt = calloc((size_t)mi->num_layers, sizeof *r->rt);
    if (!r->rt) return nnt_err_set(err, NNT_ERR_OUT_OF_MEMORY, "no memory");
    int64_t E = r->experts;
    for (int l = 0; l < mi->num_layers; l++) {
        hv_routing *ro = &r->rt[r->n_rt];
        snprintf(ro->idx_path, sizeof ro->idx_path, "layers.%d.mlp.expert_indices", l);
        snprintf(ro->w_path, sizeof ro->w_path, "layers.%d.mlp.expert_weights", l);
        nnt_value_info a, b;
        if (nnt_model_value_info(m, ro->idx_path, NULL, &a) != NNT_OK || !a.served) continue;
        if (nnt_model_value_info(m, ro->w_path, NULL, &b) != NNT_OK || !b.served) continue;
        ro->layer = l;
        ro->counts = calloc((size_t)E, sizeof *ro->counts);
        ro->wsum = calloc((size_t)E, sizeof *ro->wsum);
        ro->cooc = calloc((size_t)(E * E), sizeof *ro->cooc);
        r->n_rt++;
        if (!ro->counts || !ro->wsum || !ro->cooc) return nnt_err_set(err, NNT_ERR_OUT_OF_MEMORY, "no memory");
        nnt_status st = nnt_trace_save(t, ro->idx_path);
        if (st == NNT_OK) st = nnt_trace_save(t, ro->w_path);
        if (st != NNT_OK) return st;
    }
    if (!r->n_rt || E < 1)
        return nnt_err_set(err, NNT_ERR_INVALID_ARGUMENT,
                           "routing_stats: no block of this model serves expert_indices and expert_weights");
    return NNT_OK;
}

static int listed(const char *const *saved, int n, const char *path)
{
    for (int i = 0; i < n; i++)
        if (saved[i] && !strcmp(saved[i], path)) return 1;
    return 0;
}

static nnt_status open_contexts(const nnt_harvest_spec *s, nnt_trace *t, const char *const *saved, int n_saved,
                                hv_reduce *r, nnt_error *err)
{
    if (!s->top_contexts || !s->top_contexts_k)
        return nnt_err_set(err, NNT_ERR_INVALID_ARGUMENT, "top_contexts: NULL with n_top_contexts > 0");
    r->tc = calloc((size_t)s->n_top_contexts, sizeof *r->tc);
    if (!r->tc) return nnt_err_set(err, NNT_ERR_OUT_OF_MEMORY, "no memory");
    for (int i = 0; i < s->n_top_contexts; i++) {
        const char *p = s->top_contexts[i];
        if (!p || !*p || strlen(p) >= HV_KEY_MAX || strpbrk(p, "*[@#"))
            return nnt_err_set(err, NNT_ERR_INVALID_ARGUMENT, "top_contexts[%d]: '%s': expected one value's path (no "
                                                              "wildcard, slice or suffix)", i, p ? p : "(null)");
        if (s->top_contexts_k[i] < 1 || s->top_contexts_k[i] > 4096)
            return nnt_err_set(err, NNT_ERR_INVALID_ARGUMENT, "top_contexts[%d]: K %d is not in 1..4096", i,
                               s->top_contexts_k[i]);
        hv_topctx *tc = &r->tc[r->n_tc++];
        snprintf(tc->path, sizeof tc->path, "%s", p);
        tc->k = s->top_contexts_k[i];
        tc->shared = listed(saved, n_saved, p);
        nnt_status st = tc->shared ? NNT_OK : nnt_trace_save(t, p);
        if (st != NNT_OK) {
            nnt_err_prefix(err, "top_contexts[%d]", i);
            return st;
        }
    }
    return NNT_OK;
}

nnt_status hv_reduce_open(const nnt_harvest_spec *s, nnt_model *m, nnt_trace *t, const char *const *saved,
                          int n_saved, hv_reduce **out, nnt_error *err)
{
    *out = NULL;
    if (s->n_reduce < 1 && !s->routing_stats && s->n_top_contexts < 1) return NNT_OK;
    if (s->n_reduce > 0 && !s->reduce) return nnt_err_set(err, NNT_ERR_INVALID_ARGUMENT, "reduce: NULL with n_reduce > 0");
    if (s->top_tokens < 0 || s->top_tokens > 65536)
        return nnt_err_set(err, NNT_ERR_INVALID_ARGUMENT, "top_tokens: %d is not in 0..65536", s->top_tokens);
    hv_reduce *r = calloc(1, sizeof *r);
    if (!r) return nnt_err_set(err, NNT_ERR_OUT_OF_MEMORY, "no memory");
    r->top = s->top_tokens ? s->top_tokens : 32;
    nnt_status st = s->n_reduce > 0 ? open_moments(s, m, t, r, err) : NNT_OK;
    if (st == NNT_OK && s->routing_stats) st = open_routing(m, t, r, err);
    if (st == NNT_OK && s->n_top_contexts > 0) st = open_contexts(s, t, saved, n_saved, r, err);
    if (st != NNT_OK) {
        hv_reduce_free(r);
        return st;
    }
    *out = r;
    return NNT_OK;
}

int hv_reduce_owns(const hv_reduce *r, const nnt_trace *t, const char *key)
{
    (void)t;
    if (!r) return 0;
    for (int i = 0; i < r->n_mom; i++)
        if (!strcmp(key, r->mom[i].key)) return 1;
    for (int i = 0; i < r->n_rt; i++)
        if (!strcmp(key, r->rt[i].idx_key) || !strcmp(key, r->rt[i].w_key)) return 1;
    for (int i = 0; i < r->n_tc; i++)
        if (!r->tc[i].shared && !strcmp(key, r->tc[i].key)) return 1;
    return 0;
}

static double elem(const nnt_tensor *v, int64_t i)
{
    return v->dtype == NNT_F32 ? ((const float *)v->data)[i] : nnt_tensor_get_f64(v, i);
}

static nnt_status add_moment(hv_moment *mo, const nnt_tensor *v, const uint8_t *keep, int B, int T, nnt_error *err)
{
    if (!v || v->ndim < 2 || v->shape[0] != B || v->shape[1] != T)
        return nnt_err_set(err, NNT_ERR_SHAPE, "reduce: %s was not saved as [batch seq ...] of this forward", mo->path);
    int64_t F = mo->features;
    for (int64_t i = 0; i < (int64_t)B * T; i++) {
        if (!keep[i]) continue;
        mo->count++;
        for (int64_t f = 0; f < F; f++) {
            double x = elem(v, i * F + f);
            mo->sum[f] += x;
            mo->sumsq[f] += x * x;
        }
    }
    return NNT_OK;
}

static nnt_status add_routing(hv_routing *ro, int64_t E, const nnt_tensor *idx, const nnt_tensor *w, const int32_t *ids,
                              const uint8_t *keep, int B, int T, nnt_error *err)
{
    if (!idx || !w || idx->ndim != 3 || idx->shape[0] != B || idx->shape[1] != T || w->ndim != 3 ||
        w->shape[2] != idx->shape[2])
        return nnt_err_set(err, NNT_ERR_SHAPE, "routing_stats: block %d's expert_indices or expert_weights is not "
                                               "[batch seq top_k]", ro->layer);
    int64_t K = idx->shape[2];
    for (int64_t i = 0; i < (int64_t)B * T; i++) {
        if (!keep[i]) continue;
        for (int64_t k = 0; k < K; k++) {
            int64_t e = (int64_t)nnt_tensor_get_f64(idx, i * K + k);
            if (e < 0 || e >= E) continue; /* a slot no expert fills */
            ro->counts[e]++;
            ro->wsum[e] += elem(w, i * K + k);
            for (int64_t j = 0; j < K; j++) {
                int64_t o = (int64_t)nnt_tensor_get_f64(idx, i * K + j);
                if (j != k && o >= 0 && o < E) ro->cooc[e * E + o]++;
            }
            if (pairs_add(&ro->pairs, (int64_t)ids[i] * E + e, 1, err) != NNT_OK) return NNT_ERR_OUT_OF_MEMORY;
        }
    }
    return NNT_OK;
}

static nnt_status contexts_alloc(hv_topctx *tc, int64_t F, nnt_error *err)
{
    size_t n = (size_t)F * (size_t)tc->k;
    tc->features = F;
    tc->values = calloc(n, sizeof *tc->values);
    tc->rows = malloc(n * sizeof *tc->rows);
    tc->positions = malloc(n * sizeof *tc->positions);
    tc->count = calloc((size_t)F, sizeof *tc->count);
    if (!tc->values || !tc->rows || !tc->positions || !tc->count)
        return nnt_err_set(err, NNT_ERR_OUT_OF_MEMORY, "no memory for the top contexts of %s", tc->path);
    for (size_t i = 0; i < n; i++) {
        tc->rows[i] = -1;
        tc->positions[i] = -1;
    }
    return NNT_OK;
}

/* Token (row, pos) with entries x [F] into each feature's list: after every held value at least as
 * large (so the earlier token stays first among equal values). */
static void contexts_token(hv_topctx *tc, const float *x, int64_t row, int32_t pos)
{
    int K = tc->k;
    for (int64_t f = 0; f < tc->features; f++) {
        float v = x[f];
        float *vals = tc->values + f * K;
        int n = tc->count[f];
        if (v != v || (n == K && !(v > vals[K - 1]))) continue; /* NaN, or not above the K-th */
        int at = n < K ? n : K - 1;
        while (at > 0 && v > vals[at - 1]) at--;
        int last = n < K ? n : K - 1;
        int64_t *rows = tc->rows + f * K;
        int32_t *p = tc->positions + f * K;
        memmove(vals + at + 1, vals + at, (size_t)(last - at) * sizeof *vals);
        memmove(rows + at + 1, rows + at, (size_t)(last - at) * sizeof *rows);
        memmove(p + at + 1, p + at, (size_t)(last - at) * sizeof *p);
        vals[at] = v;
        rows[at] = row;
        p[at] = pos;
        if (n < K) tc->count[f] = n + 1;
    }
}

static nnt_status add_contexts(hv_topctx *tc, const nnt_tensor *v, const uint8_t *keep, int B, int T, int64_t first_row,
                               nnt_error *err)
{
    if (!v || v->ndim != 3 || v->shape[0] != B || v->shape[1] != T || v->dtype != NNT_F32)
        return nnt_err_set(err, NNT_ERR_SHAPE, "top_contexts: %s is not a float32 [batch seq features] value",
                           tc->path);
    if (!tc->values) {
        nnt_status st = contexts_alloc(tc, v->shape[2], err);
        if (st != NNT_OK) return st;
    }
    if (v->shape[2] != tc->features)
        return nnt_err_set(err, NNT_ERR_SHAPE, "top_contexts: %s has %lld features, its saved state %lld", tc->path,
                           (long long)v->shape[2], (long long)tc->features);
    for (int b = 0; b < B; b++)
        for (int j = 0; j < T; j++)
            if (keep[(int64_t)b * T + j])
                contexts_token(tc, (const float *)v->data + ((int64_t)b * T + j) * tc->features, first_row + b,
                               (int32_t)j);
    return NNT_OK;
}

nnt_status hv_reduce_add(hv_reduce *r, const nnt_trace *t, const int32_t *ids, const uint8_t *keep, int batch, int seq,
                         int64_t first_row, nnt_error *err)
{
    if (!r) return NNT_OK;
    if (!r->resolved) {
        for (int i = 0; i < r->n_mom; i++) last_key(t, r->mom[i].path, r->mom[i].key, sizeof r->mom[i].key);
        for (int i = 0; i < r->n_rt; i++) {
            last_key(t, r->rt[i].idx_path, r->rt[i].idx_key, sizeof r->rt[i].idx_key);
            last_key(t, r->rt[i].w_path, r->rt[i].w_key, sizeof r->rt[i].w_key);
        }
        for (int i = 0; i < r->n_tc; i++)
            if (r->tc[i].shared) snprintf(r->tc[i].key, sizeof r->tc[i].key, "%s", r->tc[i].path);
            else last_key(t, r->tc[i].path, r->tc[i].key, sizeof r->tc[i].key);
        r->resolved = 1;
    }
    for (int64_t i = 0; i < (int64_t)batch * seq; i++) r->tokens += keep[i] != 0;
    for (int i = 0; i < r->n_mom; i++) {
        nnt_status st = add_moment(&r->mom[i], nnt_trace_get(t, r->mom[i].key), keep, batch, seq, err);
        if (st != NNT_OK) return st;
    }
    for (int i = 0; i < r->n_rt; i++) {
        hv_routing *ro = &r->rt[i];
        nnt_status st = add_routing(ro, r->experts, nnt_trace_get(t, ro->idx_key), nnt_trace_get(t, ro->w_key), ids,
                                    keep, batch, seq, err);
        if (st != NNT_OK) return st;
    }
    for (int i = 0; i < r->n_tc; i++) {
        nnt_status st = add_contexts(&r->tc[i], nnt_trace_get(t, r->tc[i].key), keep, batch, seq, first_row, err);
        if (st != NNT_OK) return st;
    }
    return NNT_OK;
}

/* ---- files ---- */

/* A list of tensors to write: keys owned, data borrowed or owned. */
typedef struct hv_list {
    char **keys;
    nnt_tensor *ts;
    void **owned;
    int n, cap, failed;
} hv_list;

static void list_free(hv_list *l)
{
    for (int i = 0; i < l->n; i++) {
        free(l->keys[i]);
        free(l->owned[i]);
    }
    free(l->keys);
    free(l->ts);
    free(l->owned);
}

/* Adds a 1-D or 2-D tensor of `data` (owned when own) under key. */
static void list_add(hv_list *l, const char *key, nnt_dtype dt, int64_t d0, int64_t d1, void *data, int own)
{
    if (l->failed) {
        if (own) free(data);
        return;
    }
    if (l->n == l->cap) {
        int cap = l->cap ? 2 * l->cap : 32;
        char **k = realloc(l->keys, (size_t)cap * sizeof *k);
        if (k) l->keys = k;
        nnt_tensor *t = k ? realloc(l->ts, (size_t)cap * sizeof *t) : NULL;
        if (t) l->ts = t;
        void **o = t ? realloc(l->owned, (size_t)cap * sizeof *o) : NULL;
        if (o) l->owned = o;
        if (!o) {
            l->failed = 1;
            if (own) free(data);
            return;
        }
        l->cap = cap;
    }
    l->keys[l->n] = nnt_strdup(key);
    l->owned[l->n] = own ? data : NULL;
    l->ts[l->n] = (nnt_tensor){.dtype = dt, .ndim = d1 > 0 ? 2 : 1, .shape = {d0, d1}, .data = data};
    if (!l->keys[l->n] || !data) l->failed = 1;
    l->n++;
}

static nnt_status list_write(hv_list *l, nnt_runtime *rt, const char *file)
{
    nnt_status st = l->failed ? nnt_err_set(&rt->err, NNT_ERR_OUT_OF_MEMORY, "%s: no memory", file)
                              : nnt_safetensors_write(rt, file, l->n, (const char *const *)l->keys, l->ts);
    list_free(l);
    return st;
}

/* The pairs as arrays sorted by key (the hash table's layout depends on the order of insertion). */
static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

static int64_t *sorted_pairs(const hv_pairs *p, int64_t **counts_out)
{
    int64_t n = p->n ? p->n : 1;
    int64_t *kv = malloc((size_t)(2 * n) * sizeof *kv), *keys = malloc((size_t)n * sizeof *keys),
            *counts = malloc((size_t)n * sizeof *counts);
    if (!kv || !keys || !counts) {
        free(kv);
        free(keys);
        free(counts);
        *counts_out = NULL;
        return NULL;
    }
    int64_t j = 0;
    for (int64_t i = 0; i < p->cap; i++)
        if (p->keys[i] >= 0) {
            kv[2 * j] = p->keys[i];
            kv[2 * j + 1] = p->counts[i];
            j++;
        }
    qsort(kv, (size_t)j, 2 * sizeof *kv, cmp_i64);
    for (int64_t i = 0; i < j; i++) {
        keys[i] = kv[2 * i];
        counts[i] = kv[2 * i + 1];
    }
    free(kv);
    *counts_out = counts;
    return keys;
}

static void *copy_of(const void *p, size_t n)
{
    void *c = malloc(n ? n : 1);
    if (c && n) memcpy(c, p, n);
    return c;
}

/* A top-contexts list's arrays under "cI.*" (the state) or, with path, "PATH.top_context_*". */
static void add_contexts_list(hv_list *l, const hv_topctx *tc, int i, const char *path)
{
    char key[HV_KEY_MAX + 64];
    int64_t F = tc->features, K = tc->k;
    size_t n = (size_t)(F * K);
    if (!F) return; /* no forward reached it */
    if (path) snprintf(key, sizeof key, "%s.top_context_values", path);
    else snprintf(key, sizeof key, "c%d.values", i);
    list_add(l, key, NNT_F32, F, K, tc->values, 0);
    if (path) snprintf(key, sizeof key, "%s.top_context_rows", path);
    else snprintf(key, sizeof key, "c%d.rows", i);
    list_add(l, key, NNT_I64, F, K, copy_of(tc->rows, n * sizeof *tc->rows), 1);
    if (path) snprintf(key, sizeof key, "%s.top_context_positions", path);
    else snprintf(key, sizeof key, "c%d.positions", i);
    list_add(l, key, NNT_I32, F, K, copy_of(tc->positions, n * sizeof *tc->positions), 1);
    if (path) return;
    snprintf(key, sizeof key, "c%d.count", i);
    list_add(l, key, NNT_I32, F, 0, tc->count, 0);
}

nnt_status hv_reduce_save(const hv_reduce *r, nnt_runtime *rt, const char *file)
{
    hv_list l = {0};
    char key[HV_KEY_MAX + 32];
    int64_t E = r->experts;
    list_add(&l, "tokens", NNT_I64, 1, 0, copy_of(&r->tokens, sizeof r->tokens), 1);
    for (int i = 0; i < r->n_mom; i++) {
        const hv_moment *mo = &r->mom[i];
        snprintf(key, sizeof key, "m%d.count", i);
        list_add(&l, key, NNT_I64, 1, 0, copy_of(&mo->count, sizeof mo->count), 1);
        snprintf(key, sizeof key, "m%d.sum", i);
        list_add(&l, key, NNT_F64, mo->features, 0, mo->sum, 0);
        snprintf(key, sizeof key, "m%d.sumsq", i);
        list_add(&l, key, NNT_F64, mo->features, 0, mo->sumsq, 0);
    }
    for (int i = 0; i < r->n_rt; i++) {
        const hv_routing *ro = &r->rt[i];
        snprintf(key, sizeof key, "r%d.counts", i);
        list_add(&l, key, NNT_I64, E, 0, ro->counts, 0);
        snprintf(key, sizeof key, "r%d.wsum", i);
        list_add(&l, key, NNT_F64, E, 0, ro->wsum, 0);
        snprintf(key, sizeof key, "r%d.cooc", i);
        list_add(&l, key, NNT_I64, E, E, ro->cooc, 0);
        int64_t *counts = NULL, *keys = sorted_pairs(&ro->pairs, &counts), n = ro->pairs.n;
        if (!n && counts) counts[0] = keys[0] = -1; /* an empty list is written as one entry of -1 */
        snprintf(key, sizeof key, "r%d.pair_keys", i);
        list_add(&l, key, NNT_I64, n ? n : 1, 0, keys, 1);
        snprintf(key, sizeof key, "r%d.pair_counts", i);
        list_add(&l, key, NNT_I64, n ? n : 1, 0, counts, 1);
    }
    for (int i = 0; i < r->n_tc; i++)
        add_contexts_list(&l, &r->tc[i], i, NULL);
    return list_write(&l, rt, file);
}

/* Reads key of file into dst, checking its dtype and element count. */
static nnt_status read_into(nnt_runtime *rt, const char *file, const char *key, nnt_dtype dt, int64_t n, void *dst)
{
    nnt_tensor t = {0};
    nnt_status st = nnt_safetensors_read(rt, file, key, &t);
    if (st != NNT_OK) return st;
    int64_t got = 1;
    for (int d = 0; d < t.ndim; d++) got *= t.shape[d];
    if (t.dtype != dt || got != n)
        st = nnt_err_set(&rt->err, NNT_ERR_FORMAT, "%s: %s holds %lld elements of another dtype or count than this "
                                                   "harvest keeps (%lld)", file, key, (long long)got, (long long)n);
    else memcpy(dst, t.data, (size_t)n * (dt == NNT_F64 || dt == NNT_I64 ? 8 : 4));
    nnt_tensor_free(&t);
    return st;
}

static nnt_status load_pairs(hv_routing *ro, nnt_runtime *rt, const char *file, int i)
{
    char key[64];
    nnt_tensor k = {0}, c = {0};
    snprintf(key, sizeof key, "r%d.pair_keys", i);
    nnt_status st = nnt_safetensors_read(rt, file, key, &k);
    snprintf(key, sizeof key, "r%d.pair_counts", i);
    if (st == NNT_OK) st = nnt_safetensors_read(rt, file, key, &c);
    if (st == NNT_OK && (k.dtype != NNT_I64 || c.dtype != NNT_I64 || k.ndim != 1 || c.ndim != 1 ||
                         k.shape[0] != c.shape[0]))
        st = nnt_err_set(&rt->err, NNT_ERR_FORMAT, "%s: r%d.pair_keys and pair_counts are not two I64 lists of one "
                                                   "length", file, i);
    for (int64_t j = 0; st == NNT_OK && j < k.shape[0]; j++) {
        int64_t key_j = ((const int64_t *)k.data)[j];
        if (key_j >= 0) st = pairs_add(&ro->pairs, key_j, ((const int64_t *)c.data)[j], &rt->err);
    }
    nnt_tensor_free(&k);
    nnt_tensor_free(&c);
    return st;
}

nnt_status hv_reduce_load(hv_reduce *r, nnt_runtime *rt, const char *file)
{
    char key[64];
    int64_t E = r->experts;
    nnt_status st = read_into(rt, file, "tokens", NNT_I64, 1, &r->tokens);
    for (int i = 0; st == NNT_OK && i < r->n_mom; i++) {
        hv_moment *mo = &r->mom[i];
        snprintf(key, sizeof key, "m%d.count", i);
        st = read_into(rt, file, key, NNT_I64, 1, &mo->count);
        snprintf(key, sizeof key, "m%d.sum", i);
        if (st == NNT_OK) st = read_into(rt, file, key, NNT_F64, mo->features, mo->sum);
        snprintf(key, sizeof key, "m%d.sumsq", i);
        if (st == NNT_OK) st = read_into(rt, file, key, NNT_F64, mo->features, mo->sumsq);
    }
    for (int i = 0; st == NNT_OK && i < r->n_rt; i++) {
        hv_routing *ro = &r->rt[i];
        snprintf(key, sizeof key, "r%d.counts", i);
        st = read_into(rt, file, key, NNT_I64, E, ro->counts);
        snprintf(key, sizeof key, "r%d.wsum", i);
        if (st == NNT_OK) st = read_into(rt, file, key, NNT_F64, E, ro->wsum);
        snprintf(key, sizeof key, "r%d.cooc", i);
        if (st == NNT_OK) st = read_into(rt, file, key, NNT_I64, E * E, ro->cooc);
        if (st == NNT_OK) st = load_pairs(ro, rt, file, i);
    }
    for (int i = 0; st == NNT_OK && i < r->n_tc; i++) {
        hv_topctx *tc = &r->tc[i];
        nnt_tensor count = {0};
        snprintf(key, sizeof key, "c%d.count", i);
        st = nnt_safetensors_read(rt, file, key, &count);
        if (st == NNT_OK && (count.dtype != NNT_I32 || count.ndim != 1 || count.shape[0] < 1))
            st = nnt_err_set(&rt->err, NNT_ERR_FORMAT, "%s: %s is not I32 [features]", file, key);
        if (st == NNT_OK && !tc->values) st = contexts_alloc(tc, count.shape[0], &rt->err);
        int64_t F = tc->features, K = tc->k;
        if (st == NNT_OK && count.shape[0] != F)
            st = nnt_err_set(&rt->err, NNT_ERR_FORMAT, "%s: %s has %lld features, not %lld", file, key,
                             (long long)count.shape[0], (long long)F);
        if (st == NNT_OK) memcpy(tc->count, count.data, (size_t)F * sizeof *tc->count);
        nnt_tensor_free(&count);
        snprintf(key, sizeof key, "c%d.values", i);
        if (st == NNT_OK) st = read_into(rt, file, key, NNT_F32, F * K, tc->values);
        snprintf(key, sizeof key, "c%d.rows", i);
        if (st == NNT_OK) st = read_into(rt, file, key, NNT_I64, F * K, tc->rows);
        snprintf(key, sizeof key, "c%d.positions", i);
        if (st == NNT_OK) st = read_into(rt, file, key, NNT_I32, F * K, tc->positions);
    }
    return st;
}

typedef struct hv_entry {
    int64_t expert, count;
    int32_t id;
} hv_entry;

static int cmp_entry(const void *a, const void *b)
{
    const hv_entry *x = a, *y = b;
    if (x->expert != y->expert) return x->expert < y->expert ? -1 : 1;
    if (x->count != y->count) return x->count > y->count ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

/* Each expert's top token ids and their counts, [E, top]. */
static nnt_status top_tokens(const hv_routing *ro, int64_t E, int top, int32_t *ids, int64_t *counts)
{
    for (int64_t i = 0; i < E * top; i++) {
        ids[i] = -1;
        counts[i] = 0;
    }
    hv_entry *e = malloc((size_t)(ro->pairs.n ? ro->pairs.n : 1) * sizeof *e);
    if (!e) return NNT_ERR_OUT_OF_MEMORY;
    int64_t n = 0;
    for (int64_t i = 0; i < ro->pairs.cap; i++)
        if (ro->pairs.keys[i] >= 0)
            e[n++] = (hv_entry){ro->pairs.keys[i] % E, ro->pairs.counts[i], (int32_t)(ro->pairs.keys[i] / E)};
    qsort(e, (size_t)n, sizeof *e, cmp_entry);
    for (int64_t i = 0, rank = 0; i < n; i++) {
        rank = i > 0 && e[i].expert == e[i - 1].expert ? rank + 1 : 0;
        if (rank < top) {
            ids[e[i].expert * top + rank] = e[i].id;
            counts[e[i].expert * top + rank] = e[i].count;
        }
    }
    free(e);
    return NNT_OK;
}

nnt_status hv_reduce_write_final(const hv_reduce *r, nnt_runtime *rt, const char *file)
{
    hv_list l = {0};
    char key[HV_KEY_MAX + 64];
    int64_t E = r->experts;
    list_add(&l, "tokens", NNT_I64, 1, 0, copy_of(&r->tokens, sizeof r->tokens), 1);
    for (int i = 0; i < r->n_mom; i++) {
        const hv_moment *mo = &r->mom[i];
        double *mean = malloc((size_t)mo->features * sizeof *mean), *var = malloc((size_t)mo->features * sizeof *var);
        for (int64_t f = 0; mean && var && f < mo->features; f++) {
            double n = mo->count ? (double)mo->count : 1.0, mu = mo->sum[f] / n;
            mean[f] = mo->count ? mu : 0.0;
            double v = mo->count ? mo->sumsq[f] / n - mu * mu : 0.0;
            var[f] = v > 0 ? v : 0.0;
        }
        snprintf(key, sizeof key, "%s.count", mo->path);
        list_add(&l, key, NNT_I64, 1, 0, copy_of(&mo->count, sizeof mo->count), 1);
        snprintf(key, sizeof key, "%s.mean", mo->path);
        list_add(&l, key, NNT_F64, mo->features, 0, mean, 1);
        snprintf(key, sizeof key, "%s.var", mo->path);
        list_add(&l, key, NNT_F64, mo->features, 0, var, 1);
    }
    for (int i = 0; i < r->n_rt; i++) {
        const hv_routing *ro = &r->rt[i];
        char base[64];
        snprintf(base, sizeof base, "layers.%d.mlp.", ro->layer);
        snprintf(key, sizeof key, "%sexpert_counts", base);
        list_add(&l, key, NNT_I64, E, 0, ro->counts, 0);
        snprintf(key, sizeof key, "%sexpert_weight_sums", base);
        list_add(&l, key, NNT_F64, E, 0, ro->wsum, 0);
        int64_t *cooc = copy_of(ro->cooc, (size_t)(E * E) * sizeof *cooc);
        for (int64_t e = 0; cooc && e < E; e++) cooc[e * E + e] = ro->counts[e];
        snprintf(key, sizeof key, "%sexpert_cooccurrence", base);
        list_add(&l, key, NNT_I64, E, E, cooc, 1);
        int32_t *ids = malloc((size_t)(E * r->top) * sizeof *ids);
        int64_t *counts = malloc((size_t)(E * r->top) * sizeof *counts);
        if (ids && counts && top_tokens(ro, E, r->top, ids, counts) != NNT_OK) l.failed = 1;
        snprintf(key, sizeof key, "%sexpert_top_tokens", base);
        list_add(&l, key, NNT_I32, E, r->top, ids, 1);
        snprintf(key, sizeof key, "%sexpert_top_token_counts", base);
        list_add(&l, key, NNT_I64, E, r->top, counts, 1);
    }
    for (int i = 0; i < r->n_tc; i++) add_contexts_list(&l, &r->tc[i], i, r->tc[i].path);
    return list_write(&l, rt, file);
}
