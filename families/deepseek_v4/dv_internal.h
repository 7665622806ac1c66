/* dv_internal.h - DeepSeek-V4 family internals shared by the plugin's files: the loaded
 * model's weights (deepseek_v4.c), its architecture table and binding (dv_arch.c) and its
 * generation cache (dv_cache.c). */
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
    int rate, overlap, dim; /* 0, 0, 0 on a block without this compressor (dv_comp_shape) */
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
    nnt_score_fn score_fn;
} dv_model;

/* ---- the architecture (dv_arch.c) ---- */

/* The table: modules, tensors, sizes and traits of every block (fam_arch). */
extern const fam_arch DV_ARCH;
/* RENAME: the release's module names nnterp names otherwise (attn, ffn, gate). */
extern const nnt_rename_rule DV_RENAMES[];
/* The compressor of a block of kind `kind` (indexer 0) or its lightning indexer's (1): *c's
 * rate, overlap (windows of 2 x rate tokens, on compressed sparse blocks) and row width dim;
 * all 0 when the block has no such compressor. Its tensors are left alone. */
void dv_comp_shape(const dv_model *m, int kind, int indexer, comp_w *c);
/* Binds block L's tensors from DV_ARCH (m->l[L].kind and .hash set before), its hash table when
 * hash-routed, and sets the compressors' shapes and the routing. Errors: fam_arch_bind's;
 * NNT_ERR_NOT_FOUND / NNT_ERR_SHAPE for the hash table (missing, not integers, or an expert id
 * outside 0..n_routed_experts - 1), NNT_ERR_OUT_OF_MEMORY. */
nnt_status dv_bind_block(dv_model *m, const nnt_checkpoint *ck, int L, nnt_error *err);
/* Binds the readout for the stage m->first_block..m->end_block (set before): the embedding on
 * the first stage (and on the last when it serves as lm_head: tied, no lm_head in the
 * checkpoint), the final norm, lm_head and hc_head on the last. Errors: as fam_weight and
 * fam_arch_bind. */
nnt_status dv_bind_readout(dv_model *m, const nnt_load_args *args, nnt_error *err);

/* One token's raw compressor rows of c (kv_proj or gate_proj output): (overlap ? 2 : 1) x dim
 * floats, 0 without the compressor. */
static inline int64_t dv_comp_width(const comp_w *c)
{
    return c->rate ? (int64_t)(c->overlap ? 2 : 1) * c->dim : 0;
}
/* The token keys the sliding window keeps for the next call: window - 1 (the query is the
 * window's last), at least 1. */
static inline int dv_window_keep(const dv_model *m)
{
    return m->window > 1 ? m->window - 1 : 1;
}

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
/* Bytes dv_cache_new allocates for one block of `batch` rows and `capacity` tokens, for the
 * planner: the window's float32 keys and values of one head of head_dim for dv_window_keep
 * tokens (fam_cost_kv_cache), and the float32 kv and gate rows of every token of each compressor
 * of row widths comp_width and index_width (dv_comp_width; 0: the block has none). */
uint64_t dv_cache_bytes(const dv_model *m, int64_t batch, int64_t capacity, int64_t comp_width, int64_t index_width);

/* Appends a call's raw compressor rows (kv, gate: [batch * seq, coff * dim]) at positions
 * past..past+seq-1 of the cache and returns in kv_all / gate_all ([batch, past + seq, coff *
 * dim]) every position's rows so far: a copy in the arena, or for one row a view of the cache
 * itself (read only: the caller must not write them). Without a cache (c NULL) the call's rows
 * are returned as they are. */
nnt_status dv_comp_rows(const fam_env *env, nnt_run *run, dv_comp_cache *c, int capacity, const nnt_tensor *kv,
                        const nnt_tensor *gate, int64_t batch, int64_t past, int64_t seq, int64_t width,
                        nnt_tensor *kv_all, nnt_tensor *gate_all, nnt_error *err);

#endif
