/* dv_cache.c - DeepSeek-V4's generation cache: per block, the sliding window's keys (window - 1
 * tokens, the query is the window's last) and the raw rows of each compressor for every position
 * so far, and the bytes it takes (the planner's cache costs). Compressed entries are rebuilt
 * from those rows at each call, so an entry that closes during generation is exactly the one a
 * full forward would pool (as in the release's inference/model.py, deepseek-ai/DeepSeek-V4-Flash:
 * positions are absolute, a compressor fires when its window fills). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dv_internal.h"

static nnt_status comp_cache_init(const fam_env *env, dv_comp_cache *c, int batch, int capacity, int64_t width,
                                  nnt_error *err)
{
    int64_t cols = (int64_t)capacity * width;
    c->kv = (nnt_tensor){.dtype = NNT_F32, .ndim = 2, .shape = {batch, cols}};
    c->gate = c->kv;
    size_t bytes = (size_t)(batch * cols) * sizeof(float);
    nnt_status st = env->be->alloc(env->be_ctx, bytes, &c->kv.data, err);
    if (st == NNT_OK) st = env->be->alloc(env->be_ctx, bytes, &c->gate.data, err);
    return st;
}

static void comp_cache_free(const fam_env *env, dv_comp_cache *c)
{
    if (c->kv.data) env->be->free(env->be_ctx, c->kv.data);
    if (c->gate.data) env->be->free(env->be_ctx, c->gate.data);
    memset(c, 0, sizeof *c);
}

void dv_cache_free(void *model, void *cache)
{
    dv_model *m = model;
    dv_cache *c = cache;
    if (!c) return;
    for (int L = 0; c->l && L < c->layers; L++) {
        fam_kv_cache_free(&m->env, &c->l[L].win);
        comp_cache_free(&m->env, &c->l[L].comp);
        comp_cache_free(&m->env, &c->l[L].icomp);
    }
    free(c->l);
    free(c);
}

nnt_status dv_cache_new(void *model, int batch, int capacity, void **cache, nnt_error *err)
{
    dv_model *m = model;
    const nnt_core_api *h = m->env.core;
    dv_cache *c = calloc(1, sizeof *c);
    if (c) c->l = calloc((size_t)m->layers, sizeof *c->l);
    if (!c || !c->l) {
        free(c);
        return h->set_error(err, NNT_ERR_OUT_OF_MEMORY, "no memory for the generation cache");
    }
    c->layers = m->layers;
    c->batch = batch;
    c->capacity = capacity;
    nnt_status st = NNT_OK;
    for (int L = m->first_block; L < m->end_block && st == NNT_OK; L++) { /* a stage's blocks only */
        const dv_layer *ly = &m->l[L];
        st = fam_kv_cache_init(&m->env, &c->l[L].win, batch, 1, m->head_dim, m->head_dim, dv_window_keep(m), err);
        if (st == NNT_OK && ly->comp.rate)
            st = comp_cache_init(&m->env, &c->l[L].comp, batch, capacity, dv_comp_width(&ly->comp), err);
        if (st == NNT_OK && ly->icomp.rate)
            st = comp_cache_init(&m->env, &c->l[L].icomp, batch, capacity, dv_comp_width(&ly->icomp), err);
    }
    if (st != NNT_OK) {
        dv_cache_free(m, c);
        return st;
    }
    *cache = c;
    return NNT_OK;
}

uint64_t dv_cache_bytes(const dv_model *m, int64_t batch, int64_t capacity, int64_t comp_width, int64_t index_width)
{
    return fam_cost_kv_cache(batch, 1, m->head_dim, m->head_dim, dv_window_keep(m)) +
           2 * fam_cost_f32(batch * capacity * comp_width) + 2 * fam_cost_f32(batch * capacity * index_width);
}

nnt_status dv_comp_rows(const fam_env *env, nnt_run *run, dv_comp_cache *c, int capacity, const nnt_tensor *kv,
                        const nnt_tensor *gate, int64_t B, int64_t P, int64_t T, int64_t W, nnt_tensor *kv_all,
                        nnt_tensor *gate_all, nnt_error *err)
{
    if (!c) {
        *kv_all = fam_view(kv, NNT_SHAPE(B, T, W));
        *gate_all = fam_view(gate, NNT_SHAPE(B, T, W));
        return NNT_OK;
    }
    const nnt_backend_ops *be = env->be;
    void *bc = env->be_ctx;
    if (P + T > capacity) {
        snprintf(err->msg, sizeof err->msg, "the session holds %d tokens per row; this call would make %lld", capacity,
                 (long long)(P + T));
        return err->status = NNT_ERR_INVALID_ARGUMENT;
    }
    const nnt_tensor *src[2] = {kv, gate};
    nnt_tensor *store[2] = {&c->kv, &c->gate}, *all[2] = {kv_all, gate_all};
    for (int i = 0; i < 2; i++) {
        nnt_tensor call = fam_view(src[i], NNT_SHAPE(B, T * W));
        nnt_status st = be->copy_cols(bc, &call, 0, store[i], P * W, T * W, err);
        if (st == NNT_OK && B == 1) { /* one row: the store's first P + T rows are the call's rows */
            *all[i] = fam_view(store[i], NNT_SHAPE(1, P + T, W));
            continue;
        }
        if (st == NNT_OK) st = fam_alloc(env, run, NNT_F32, all[i], err, NNT_SHAPE(B, P + T, W));
        nnt_tensor flat = fam_view(all[i], NNT_SHAPE(B, (P + T) * W));
        if (st == NNT_OK) st = be->copy_cols(bc, store[i], 0, &flat, 0, (P + T) * W, err);
        if (st != NNT_OK) return st;
    }
    return NNT_OK;
}
