/* fam_attention.c - softmax attention with its standard values, on the kernel backend:
 * head split, rotary, the key/value cache, then scores, softmax (with an optional sink) and
 * value mix through fam_attend (fam_attend.c), o_proj. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <nnt/nnt_family_kit.h>

nnt_status fam_mask_build(const nnt_forward_args *args, nnt_attn_mask *mask, nnt_error *err)
{
    memset(mask, 0, sizeof *mask);
    mask->struct_size = sizeof *mask;
    int64_t n = (int64_t)args->batch * args->seq, S = (int64_t)args->past + args->seq;
    uint8_t *valid = malloc((size_t)n);
    if (!valid) {
        if (err) {
            err->status = NNT_ERR_OUT_OF_MEMORY;
            snprintf(err->msg, sizeof err->msg, "no memory for the attention mask");
        }
        return NNT_ERR_OUT_OF_MEMORY;
    }
    for (int64_t i = 0; i < n; i++) valid[i] = args->attention_mask[(i / args->seq) * S + args->past + i % args->seq] != 0;
    mask->q_pos = args->positions;
    mask->k_pos = args->positions;
    mask->key_valid = valid;
    mask->query_valid = valid;
    mask->causal = 1;
    return NNT_OK;
}

nnt_status fam_kv_cache_init(const fam_env *env, fam_kv_cache *c, int batch, int heads, int dk, int dv, int keep,
                             nnt_error *err)
{
    memset(c, 0, sizeof *c);
    c->batch = batch;
    c->heads = heads;
    c->dk = dk;
    c->dv = dv;
    c->keep = keep;
    int64_t rows = (int64_t)batch * heads;
    c->k = (nnt_tensor){.dtype = NNT_F32, .ndim = 2, .shape = {rows, (int64_t)keep * dk}};
    c->v = (nnt_tensor){.dtype = NNT_F32, .ndim = 2, .shape = {rows, (int64_t)keep * dv}};
    nnt_status st = env->be->alloc(env->be_ctx, (size_t)(rows * keep * dk) * sizeof(float), &c->k.data, err);
    if (st == NNT_OK) st = env->be->alloc(env->be_ctx, (size_t)(rows * keep * dv) * sizeof(float), &c->v.data, err);
    c->pos = calloc((size_t)batch * (size_t)keep, sizeof *c->pos);
    c->valid = calloc((size_t)batch * (size_t)keep, 1);
    if (st == NNT_OK && (!c->pos || !c->valid)) {
        snprintf(err->msg, sizeof err->msg, "no memory for a key/value cache");
        st = err->status = NNT_ERR_OUT_OF_MEMORY;
    }
    return st;
}

void fam_kv_cache_free(const fam_env *env, fam_kv_cache *c)
{
    if (c->k.data) env->be->free(env->be_ctx, c->k.data);
    if (c->v.data) env->be->free(env->be_ctx, c->v.data);
    free(c->pos);
    free(c->valid);
    memset(c, 0, sizeof *c);
}

nnt_status fam_layer_caches_new(const fam_env *env, int layers, int batch, const int *heads, const int *dk,
                                const int *dv, const int *keep, fam_layer_caches **out, nnt_error *err)
{
    fam_layer_caches *c = calloc(1, sizeof *c);
    if (c) c->kv = calloc((size_t)layers, sizeof *c->kv);
    if (!c || !c->kv) {
        free(c);
        snprintf(err->msg, sizeof err->msg, "no memory for the generation cache");
        return err->status = NNT_ERR_OUT_OF_MEMORY;
    }
    c->layers = layers;
    nnt_status st = NNT_OK;
    for (int l = 0; l < layers && st == NNT_OK; l++)
        if (keep[l] > 0) st = fam_kv_cache_init(env, &c->kv[l], batch, heads[l], dk[l], dv[l], keep[l], err);
    if (st != NNT_OK) {
        fam_layer_caches_free(env, c);
        return st;
    }
    *out = c;
    return NNT_OK;
}

nnt_status fam_attention_caches_new(const fam_env *env, int layers, int batch, int capacity,
                                    int (*attn_of)(const void *model, int layer, fam_attn *out), const void *model,
                                    fam_layer_caches **out, nnt_error *err)
{
    int *heads = calloc((size_t)layers, sizeof(int) * 4);
    if (!heads) {
        snprintf(err->msg, sizeof err->msg, "no memory for the generation cache");
        return err->status = NNT_ERR_OUT_OF_MEMORY;
    }
    int *dk = heads + layers, *dv = dk + layers, *keep = dv + layers;
    for (int l = 0; l < layers; l++) {
        fam_attn a;
        if (!attn_of(model, l, &a)) continue; /* keep 0: no cache */
        heads[l] = a.num_kv_heads;
        dk[l] = a.qk_head_dim;
        dv[l] = a.v_head_dim;
        keep[l] = a.window ? (a.window > 1 ? a.window - 1 : 1) : capacity;
    }
    nnt_status st = fam_layer_caches_new(env, layers, batch, heads, dk, dv, keep, out, err);
    free(heads);
    return st;
}

void fam_layer_caches_free(const fam_env *env, fam_layer_caches *c)
{
    if (!c) return;
    for (int l = 0; l < c->layers; l++) fam_kv_cache_free(env, &c->kv[l]);
    free(c->kv);
    free(c);
}

fam_kv_cache *fam_layer_cache(const nnt_forward_args *args, int layer)
{
    fam_layer_caches *c = args->cache;
    if (!c || layer >= c->layers || c->kv[layer].keep == 0) return NULL;
    return &c->kv[layer];
}

void fam_mask_free(nnt_attn_mask *mask)
{
    free((void *)mask->key_valid);
    memset(mask, 0, sizeof *mask);
}

int64_t fam_kv_cached_len(int keep, const nnt_call_dims *d)
{
    int64_t held = d->past < keep ? d->past : keep;
    return held + d->seq;
}

void fam_attention_info(const fam_attn *a, int hidden, nnt_value_id id, const nnt_call_dims *d, nnt_value_info *out)
{
    fam_attention_info_keys(a, hidden, id, d, d ? d->past + d->seq : 0, out);
}

void fam_attention_info_keys(const fam_attn *a, int hidden, nnt_value_id id, const nnt_call_dims *d, int64_t S,
                             nnt_value_info *out)
{
    int64_t B = d ? d->batch : 0, T = d ? d->seq : 0;
    switch (id) {
    case NNT_VALUE_ATTN_QUERIES: fam_served(out, d, NNT_F32, 1, NNT_SHAPE(B, (int64_t)a->num_heads, T, (int64_t)a->qk_head_dim)); break;
    case NNT_VALUE_ATTN_KEYS: fam_served(out, d, NNT_F32, 1, NNT_SHAPE(B, (int64_t)a->num_kv_heads, S, (int64_t)a->qk_head_dim)); break;
    case NNT_VALUE_ATTN_VALUES: fam_served(out, d, NNT_F32, 1, NNT_SHAPE(B, (int64_t)a->num_kv_heads, S, (int64_t)a->v_head_dim)); break;
    case NNT_VALUE_ATTN_SCORES:
    case NNT_VALUE_ATTN_PROBABILITIES: fam_served(out, d, NNT_F32, 1, NNT_SHAPE(B, (int64_t)a->num_heads, T, S)); break;
    case NNT_VALUE_ATTN_PREMIX:
    case NNT_VALUE_ATTN_HEAD_OUTPUTS: fam_served(out, d, NNT_F32, 1, NNT_SHAPE(B, T, (int64_t)a->num_heads, (int64_t)a->v_head_dim)); break;
    case NNT_VALUE_ATTN_OUTPUT: fam_served(out, d, NNT_F32, 1, NNT_SHAPE(B, T, (int64_t)hidden)); break;
    default: fam_unserved(out, "not a self_attn value"); break;
    }
}

/* The mask arrays of a cached call's S = len + T keys, [B, S]: the cached tokens' then the
 * call's. */
static void cached_key_arrays(const fam_kv_cache *c, const nnt_forward_args *args, const nnt_attn_mask *mask,
                              int32_t *kpos, uint8_t *kvalid)
{
    int64_t B = args->batch, T = args->seq, L = c->len, S = L + T;
    for (int64_t b = 0; b < B; b++) {
        for (int64_t s = 0; s < L; s++) {
            kpos[b * S + s] = c->pos[b * c->keep + s];
            kvalid[b * S + s] = c->valid[b * c->keep + s];
        }
        for (int64_t t = 0; t < T; t++) {
            kpos[b * S + L + t] = mask->q_pos[b * T + t];
            kvalid[b * S + L + t] = mask->query_valid[b * T + t];
        }
    }
}

/* Keys of a cached call copied out: cached tokens then the call's, [B, H, S, D], and their mask
 * arrays. */
static nnt_status with_cache(const fam_env *env, nnt_run *run, const fam_kv_cache *c, const nnt_forward_args *args,
                             const nnt_attn_mask *mask, const nnt_tensor *kh, const nnt_tensor *vh, nnt_tensor *kall,
                             nnt_tensor *vall, int32_t *kpos, uint8_t *kvalid, nnt_error *err)
{
    const nnt_backend_ops *be = env->be;
    void *bc = env->be_ctx;
    int64_t B = args->batch, T = args->seq, H = c->heads, L = c->len, S = L + T;
    nnt_status st = fam_alloc(env, run, NNT_F32, kall, err, NNT_SHAPE(B, H, S, (int64_t)c->dk));
    if (st == NNT_OK) st = fam_alloc(env, run, NNT_F32, vall, err, NNT_SHAPE(B, H, S, (int64_t)c->dv));
    nnt_tensor ka = fam_view(kall, NNT_SHAPE(B * H, S * c->dk)), va = fam_view(vall, NNT_SHAPE(B * H, S * c->dv));
    nnt_tensor kn = fam_view(kh, NNT_SHAPE(B * H, T * c->dk)), vn = fam_view(vh, NNT_SHAPE(B * H, T * c->dv));
    if (st == NNT_OK && L) st = be->copy_cols(bc, &c->k, 0, &ka, 0, L * c->dk, err);
    if (st == NNT_OK && L) st = be->copy_cols(bc, &c->v, 0, &va, 0, L * c->dv, err);
    if (st == NNT_OK) st = be->copy_cols(bc, &kn, 0, &ka, L * c->dk, T * c->dk, err);
    if (st == NNT_OK) st = be->copy_cols(bc, &vn, 0, &va, L * c->dv, T * c->dv, err);
    cached_key_arrays(c, args, mask, kpos, kvalid);
    return st;
}

/* Keeps the last `keep` of the call's S keys in the cache. */
static nnt_status update_cache(const fam_env *env, fam_kv_cache *c, int64_t B, int64_t S, const nnt_tensor *kall,
                               const nnt_tensor *vall, const int32_t *kpos, const uint8_t *kvalid, nnt_error *err)
{
    int64_t H = c->heads, n = S < c->keep ? S : c->keep, from = S - n;
    nnt_tensor ka = fam_view(kall, NNT_SHAPE(B * H, S * c->dk)), va = fam_view(vall, NNT_SHAPE(B * H, S * c->dv));
    nnt_status st = env->be->copy_cols(env->be_ctx, &ka, from * c->dk, &c->k, 0, n * c->dk, err);
    if (st == NNT_OK) st = env->be->copy_cols(env->be_ctx, &va, from * c->dv, &c->v, 0, n * c->dv, err);
    for (int64_t b = 0; b < B; b++)
        for (int64_t s = 0; s < n; s++) {
            c->pos[b * c->keep + s] = kpos[b * S + from + s];
            c->valid[b * c->keep + s] = kvalid[b * S + from + s];
        }
    c->len = (int)n;
    return st;
}

/* Appends a call's T keys and values (kh [B, Hkv, T, Dqk], vh [B, Hkv, T, Dv]) after the cache's
 * len tokens; the caller has checked that len + T <= keep. kpos and kvalid: the call's S =
 * len + T keys, as with_cache made them. */
static nnt_status append_cache(const fam_env *env, fam_kv_cache *c, int64_t B, int64_t T, const nnt_tensor *kh,
                               const nnt_tensor *vh, const int32_t *kpos, const uint8_t *kvalid, nnt_error *err)
{
    int64_t H = c->heads, L = c->len, S = L + T;
    nnt_tensor kn = fam_view(kh, NNT_SHAPE(B * H, T * c->dk)), vn = fam_view(vh, NNT_SHAPE(B * H, T * c->dv));
    nnt_status st = env->be->copy_cols(env->be_ctx, &kn, 0, &c->k, L * c->dk, T * c->dk, err);
    if (st == NNT_OK) st = env->be->copy_cols(env->be_ctx, &vn, 0, &c->v, L * c->dv, T * c->dv, err);
    for (int64_t b = 0; b < B; b++)
        for (int64_t s = L; s < S; s++) {
            c->pos[b * c->keep + s] = kpos[b * S + s];
            c->valid[b * c->keep + s] = kvalid[b * S + s];
        }
    c->len = (int)S;
    return st;
}

nnt_status fam_attention_forward(const fam_env *env, nnt_run *run, int layer, const fam_attn *a,
                                 const nnt_forward_args *args, const nnt_attn_mask *mask,
                                 const nnt_tensor *q, const nnt_tensor *k, const nnt_tensor *v,
                                 fam_kv_cache *cache, nnt_tensor *out, nnt_error *err)
{
    const nnt_core_api *h = env->core;
    const nnt_backend_ops *be = env->be;
    void *bc = env->be_ctx;
    int64_t B = args->batch, T = args->seq, S = cache ? cache->len + T : T, M = B * T;
    int64_t Hq = a->num_heads, Hkv = a->num_kv_heads, Dq = a->qk_head_dim, Dv = a->v_head_dim;
    nnt_status st;
    size_t mark = h->arena_mark(run);
    nnt_tensor qh, kh, vh, kall, vall, ho;
    int32_t *kpos = NULL;
    uint8_t *kvalid = NULL;
#define TRY(x)                                                                                                         \
    do {                                                                                                               \
        if ((st = (x)) != NNT_OK) goto done;                                                                           \
    } while (0)
    TRY(fam_alloc(env, run, NNT_F32, &qh, err, NNT_SHAPE(B, Hq, T, Dq)));
    TRY(fam_alloc(env, run, NNT_F32, &kh, err, NNT_SHAPE(B, Hkv, T, Dq)));
    TRY(fam_alloc(env, run, NNT_F32, &vh, err, NNT_SHAPE(B, Hkv, T, Dv)));
    nnt_tensor q4 = fam_view(q, NNT_SHAPE(B, T, Hq, Dq)), k4 = fam_view(k, NNT_SHAPE(B, T, Hkv, Dq)), v4 = fam_view(v, NNT_SHAPE(B, T, Hkv, Dv));
    TRY(be->swap12(bc, &q4, &qh, err));
    TRY(be->swap12(bc, &k4, &kh, err));
    TRY(be->swap12(bc, &v4, &vh, err));
    if (a->rot_dim > 0) {
        TRY(be->rope(bc, &qh, args->positions, a->inv_freq, a->rot_start, a->rot_dim, a->rope_style, a->rope_mscale, err));
        TRY(be->rope(bc, &kh, args->positions, a->inv_freq, a->rot_start, a->rot_dim, a->rope_style, a->rope_mscale, err));
    }
    nnt_attn_mask m = *mask;
    m.struct_size = sizeof m;
    m.window = a->window;
    kall = kh;
    vall = vh;
    /* Nothing evicted and no request reading or editing this call's keys or values: the cached
     * tokens are already in the cache, so only the call's own T tokens are appended (a decoding
     * step then writes one token, not the whole cache again); and where the backend takes a key
     * axis longer than the keys (NNT_FEATURE_KEY_COUNT), attention reads the cache in place
     * instead of a copy of it. Otherwise the keys are copied out and the last `keep` of them,
     * edits included, replace the cache's. */
    int append = cache && S <= cache->keep && !h->wants(run, NNT_VALUE_ATTN_KEYS, layer) &&
                 !h->wants(run, NNT_VALUE_ATTN_VALUES, layer);
    int in_place = append && NNT_STRUCT_HAS(be, nnt_backend_ops, features) && (be->features & NNT_FEATURE_KEY_COUNT);
    if (cache) {
        kpos = malloc((size_t)(B * S) * sizeof *kpos);
        kvalid = malloc((size_t)(B * S));
        if (!kpos || !kvalid) {
            st = h->set_error(err, NNT_ERR_OUT_OF_MEMORY, "no memory for the cached keys' mask");
            goto done;
        }
        if (in_place) {
            cached_key_arrays(cache, args, mask, kpos, kvalid);
            TRY(append_cache(env, cache, B, T, &kh, &vh, kpos, kvalid, err));
            kall = fam_view(&cache->k, NNT_SHAPE(B, (int64_t)cache->heads, (int64_t)cache->keep, (int64_t)cache->dk));
            vall = fam_view(&cache->v, NNT_SHAPE(B, (int64_t)cache->heads, (int64_t)cache->keep, (int64_t)cache->dv));
            m.key_count = S;
        } else {
            TRY(with_cache(env, run, cache, args, mask, &kh, &vh, &kall, &vall, kpos, kvalid, err));
        }
        m.k_pos = kpos;
        m.key_valid = kvalid;
    }
    TRY(h->emit(run, NNT_VALUE_ATTN_QUERIES, layer, &qh));
    if (!in_place) { /* in place, neither is asked for (above) */
        TRY(h->emit(run, NNT_VALUE_ATTN_KEYS, layer, &kall));
        TRY(h->emit(run, NNT_VALUE_ATTN_VALUES, layer, &vall));
    }
    if (append && !in_place) TRY(append_cache(env, cache, B, T, &kh, &vh, kpos, kvalid, err));
    else if (cache && !append) TRY(update_cache(env, cache, B, S, &kall, &vall, kpos, kvalid, err));
    TRY(fam_alloc(env, run, NNT_F32, &ho, err, NNT_SHAPE(B, T, Hq, Dv)));
    TRY(fam_attend(env, run, layer, args, &qh, &kall, &vall, a->scale, &m, a->sinks, &ho, err));
    TRY(h->emit(run, NNT_VALUE_ATTN_HEAD_OUTPUTS, layer, &ho));
    TRY(h->emit(run, NNT_VALUE_ATTN_PREMIX, layer, &ho));
    nnt_tensor flat = fam_view(&ho, NNT_SHAPE(M, Hq * Dv));
    TRY(be->linear(bc, &flat, &a->o_proj, out, err));
    nnt_tensor out3 = fam_view(out, NNT_SHAPE(B, T, out->shape[1]));
    TRY(h->emit(run, NNT_VALUE_ATTN_OUTPUT, layer, &out3));
#undef TRY
done:
    free(kpos);
    free(kvalid);
    h->arena_release(run, mark);
    return st;
}
