/* dv_internal.h - DeepSeek-V4 family internals shared by the plugin's files: the loaded
 * model's weights (deepseek_v4.c) and its generation cache (dv_cache.c). */
#ifndef NNT_DV_INTERNAL_H
#define NNT_DV_INTERNAL_H

#include <nnt/nnt_family_kit.h>

enum { SLIDING = 0, CSA = 1, HCA = 2 };

typedef struct hc_w {
    float *fn, *base, *scale; /* host F32 copies */
    nnt_tensor fn_t, base_t, scale_t;
} hc_w;

typedef struct comp_w {
    nnt_tensor wkv, wgate, norm;
    float *ape;
    nnt_tensor ape_t;
    int rate, overlap, dim;
} comp_w;

typedef struct dv_layer {
    int kind, hash;
    nnt_tensor attn_norm, ffn_norm;
    hc_w hc_attn, hc_ffn;
    nnt_tensor wq_a, q_norm, wq_b, wkv, kv_norm, wo_a, wo_b;
    float *sinks;
    comp_w comp, icomp;
    nnt_tensor iq_b, iweights;
    fam_moe moe;
    float *bias_host;
    int32_t *tid2eid;
} dv_layer;

typedef struct dv_model {
    fam_env env;
    int first_block, end_block; /* the blocks whose weights were bound (a stage's load), and the
                                 * only ones sessions keep caches for */
    int hidden, layers, vocab, heads, head_dim, q_lora, o_groups, o_lora, window, streams, sinkhorn;
    int experts, top_k, shared, moe_inter, index_heads, index_dim, index_topk, rot;
    int rate[3];
    double eps, hc_eps, scaling, limit, theta_main, theta_comp;
    int norm_topk, tied;
    float *inv_freq[2]; /* main, compress */
    nnt_tensor embed, final_norm, lm_head;
    hc_w hc_head;
    dv_layer *l;
    fam_expert *expert_pool;
    nnt_score_fn score_fn;
} dv_model;

/* Generation state of one block: the sliding window's last window - 1 keys, and for each
 * compressor the raw per-token rows (kv_proj and gate_proj outputs) of every position so far,
 * from which the compressed entries are rebuilt at each call. */
typedef struct dv_comp_cache {
    nnt_tensor kv, gate; /* backend F32 [batch, capacity * coff * dim] */
} dv_comp_cache;

typedef struct dv_layer_cache {
    fam_kv_cache win;          /* keys (= values) of the window: heads 1, dim head_dim */
    dv_comp_cache comp, icomp; /* main compressor; the indexer's (compressed sparse blocks) */
} dv_layer_cache;

typedef struct dv_cache {
    dv_layer_cache *l;
    int layers, batch, capacity;
} dv_cache;

/* The session hooks (descriptor cache_new / cache_free). */
nnt_status dv_cache_new(void *model, int batch, int capacity, void **cache, nnt_error *err);
void dv_cache_free(void *model, void *cache);

/* Appends a call's raw compressor rows (kv, gate: [batch * seq, coff * dim]) at positions
 * past..past+seq-1 of the cache and returns in kv_all / gate_all (arena, [batch, past + seq,
 * coff * dim]) every position's rows so far. Without a cache (c NULL) the call's rows are
 * returned as they are. */
nnt_status dv_comp_rows(const fam_env *env, nnt_run *run, dv_comp_cache *c, int capacity, const nnt_tensor *kv,
                        const nnt_tensor *gate, int64_t batch, int64_t past, int64_t seq, int64_t width,
                        nnt_tensor *kv_all, nnt_tensor *gate_all, nnt_error *err);

#endif
