/* family_common.h - helpers shared by nnt's own family plugins (linked statically into each):
 * value-info filling, weight binding, and the building blocks of a decoder forward - softmax
 * attention with its standard values, the mixture of experts, SwiGLU MLPs - written against the
 * SDK only (nnt_family.h, nnt_backend.h). */
#ifndef NNT_FAMILY_COMMON_H
#define NNT_FAMILY_COMMON_H

#include "nnt/nnt_family.h"

/* Every weight a family prepared on its backend, and the host buffers it made for small
 * parameter vectors, released together at unload. */
typedef struct fam_prepared {
    nnt_tensor *w;
    int n, cap;
    void **buf;
    int n_buf, cap_buf;
} fam_prepared;

/* The environment a family's code runs in: the host routines, the backend and its context, the
 * precision its products run in, and the weights it prepared. */
typedef struct fam_env {
    const nnt_host_api *host;
    const nnt_backend_ops *be;
    void *be_ctx;
    nnt_precision precision;
    uint32_t bf16_style;    /* NNT_TENSOR_BF16_ONCE / _SHIFTED: how this family's torch code rounds
                             * in bfloat16, added to every bfloat16 tensor fam_alloc makes */
    fam_prepared *prepared; /* owned; NULL until the first weight */
} fam_env;

/* Fills env from a family's load arguments. */
void fam_env_init(fam_env *env, const nnt_load_args *args);
/* Releases every weight prepared through env (the backend frees its copies), frees the host
 * vectors fam_vector_f32 made, and the lists. */
void fam_env_release(fam_env *env);

/* ---- value info ---- */
void fam_unserved(nnt_value_info *out, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Not served and not listed on the family's page at all (printouts omit it). */
void fam_off_page(nnt_value_info *out, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Served with the given dtype and shape (shape copied only when dims != NULL). */
void fam_served(nnt_value_info *out, const nnt_call_dims *dims, nnt_dtype dtype, int writable, int ndim, ...);

/* ---- weights ---- */
/* Binds checkpoint tensor `name` (shape checked when ndim > 0) and prepares it on the backend in
 * its stored encoding (F32, BF16, F16, or FP8/FP4 with block scales), flagged for bfloat16
 * products when the family runs in that precision. out stays valid while the checkpoint is
 * open and the family has not released its weights (fam_env_release). */
nnt_status fam_weight(const fam_env *env, const nnt_checkpoint *ck, const char *name, int ndim,
                      const int64_t *shape, nnt_tensor *out, nnt_error *err);
/* The first of several candidate names the checkpoint holds, or NULL. */
const char *fam_first_present(const fam_env *env, const nnt_checkpoint *ck, const char *const *names, int n);
/* A small float tensor of n values (any shape) as F32 host memory (e.g. a router bias, a
 * per-head decay rate): the mapped bytes themselves when stored as aligned F32, else a widened
 * copy. Read-only; owned by env (released by fam_env_release), never freed by the caller. */
nnt_status fam_vector_f32(const fam_env *env, const nnt_checkpoint *ck, const char *name, int64_t n,
                          float **out, nnt_error *err);
/* A view of rows [r0, r0 + nr) of matrix `index` of a weight [E, R, C] (index 0 of [R, C]),
 * block scales included (nnt_tensor_rows). Errors: NNT_ERR_SHAPE for an encoded weight without
 * block sizes (the message names `what`). */
nnt_status fam_rows(const fam_env *env, const nnt_tensor *w, int64_t index, int64_t r0, int64_t nr, const char *what,
                    nnt_tensor *out, nnt_error *err);
/* Prepares a host tensor the family built itself (F32 vectors) and registers it for release. */
nnt_status fam_prepare(const fam_env *env, const nnt_tensor *host, nnt_tensor *out, nnt_error *err);
/* The two projections of a block's key/value heads (host->tensor_kv_heads), prepared. */
nnt_status fam_weight_kv_heads(const fam_env *env, const nnt_checkpoint *ck, const char *k_name, const char *v_name,
                               int64_t heads, int64_t dk, int64_t dv, int64_t in, nnt_tensor *k, nnt_tensor *v,
                               nnt_error *err);

/* ---- tensors in a forward ---- */
nnt_status fam_alloc(const fam_env *env, nnt_run *run, nnt_dtype dt, nnt_tensor *out, nnt_error *err, int ndim, ...);
/* The same data seen with another shape (element counts must agree). */
nnt_tensor fam_view(const nnt_tensor *t, int ndim, ...);

/* ---- mixture of experts ---- */
typedef struct fam_expert {
    nnt_tensor gate; /* [I, H] */
    nnt_tensor up;   /* [I, H] */
    nnt_tensor down; /* [H, I] */
} fam_expert;

typedef struct fam_moe {
    int num_experts;
    int top_k;
    int intermediate; /* one expert's width */
    nnt_tensor router;      /* [E, H] */
    nnt_tensor bias;        /* [E] F32 on the backend, data NULL when absent: the selection bias */
    nnt_route_params route;
    float swiglu_limit;     /* 0: no clamp */
    fam_expert *experts;    /* [E] */
    fam_expert shared;      /* used when has_shared */
    int has_shared;
    const int32_t *tid2eid; /* host [vocab, top_k], or NULL: hash routing picks experts by token id */
    int vocab;
    int router_f32;         /* 1: the router's product stays float32 in a bfloat16 model */
    int route_bf16;         /* 1: scores and weights are computed in bfloat16 in such a model */
} fam_moe;

/* Runs the mixture on x [M, H] (M = batch * seq) and writes out [M, H], emitting router_logits,
 * expert_indices, expert_weights, expert_outputs, routed_output, shared_expert_output and
 * mlp_output of block `layer` in that order; edits to each reach what follows. Experts run per
 * expert over the tokens routed to it (gather, SwiGLU, scatter). With moe->tid2eid the experts
 * are the table's row for each token id (ids: host [M]) and only the weights come from the
 * router. */
nnt_status fam_moe_forward(const fam_env *env, nnt_run *run, int layer, const fam_moe *moe,
                           const nnt_call_dims *dims, const int32_t *ids, const nnt_tensor *x, nnt_tensor *out,
                           nnt_error *err);

/* A dense SwiGLU MLP on x [M, H] -> out [M, H], emitting mlp_activation, mlp_neurons and
 * mlp_output when emit is nonzero (a shared expert runs with emit 0). */
nnt_status fam_mlp_forward(const fam_env *env, nnt_run *run, int layer, const fam_expert *w, float limit,
                           const nnt_call_dims *dims, const nnt_tensor *x, nnt_tensor *out, int emit,
                           nnt_error *err);

/* ---- softmax attention ---- */
typedef struct fam_attn {
    int num_heads;
    int num_kv_heads;
    int qk_head_dim;
    int v_head_dim;
    int rot_start;        /* first rotated dim of each q/k head */
    int rot_dim;          /* 0: no rotary */
    nnt_rope_style rope_style;
    const float *inv_freq; /* [rot_dim / 2] */
    float rope_mscale;
    float scale;           /* softmax scale */
    int window;            /* 0: none; else keys within `window` positions, the query included */
    const float *sinks;    /* [num_heads] F32 host, or NULL */
    nnt_tensor o_proj;     /* [H, num_heads * v_head_dim] */
} fam_attn;

/* A key/value cache of one attention block for generation: the last `keep` tokens of every row
 * (keep = the session's capacity for full attention, window - 1 for a sliding block). */
typedef struct fam_kv_cache {
    nnt_tensor k, v; /* backend [B * Hkv, keep * Dqk], [B * Hkv, keep * Dv] */
    int32_t *pos;    /* host [B, keep]: the cached keys' positions */
    uint8_t *valid;  /* host [B, keep]: 0 for padding */
    int batch, heads, dk, dv, keep, len;
} fam_kv_cache;
nnt_status fam_kv_cache_init(const fam_env *env, fam_kv_cache *c, int batch, int heads, int dk, int dv, int keep,
                             nnt_error *err);
void fam_kv_cache_free(const fam_env *env, fam_kv_cache *c);
/* A generation cache of one key/value cache per block (keep[l] tokens for block l; 0: none). */
typedef struct fam_layer_caches {
    fam_kv_cache *kv;
    int layers;
} fam_layer_caches;
nnt_status fam_layer_caches_new(const fam_env *env, int layers, int batch, const int *heads, const int *dk,
                                const int *dv, const int *keep, fam_layer_caches **out, nnt_error *err);
void fam_layer_caches_free(const fam_env *env, fam_layer_caches *c);
/* The same from each block's attention shape: attn_of fills block l's (returning 0 for a block
 * without softmax attention, which gets no cache); a sliding block (window > 0) keeps its last
 * window - 1 keys, the query being the window's last; a full one keeps `capacity`. */
nnt_status fam_attention_caches_new(const fam_env *env, int layers, int batch, int capacity,
                                    int (*attn_of)(const void *model, int layer, fam_attn *out), const void *model,
                                    fam_layer_caches **out, nnt_error *err);
/* The cache of block `layer` when args carry one, else NULL. */
fam_kv_cache *fam_layer_cache(const nnt_forward_args *args, int layer);

/* Keys a cached call attends to: the cache's tokens then the call's (value_info's key axis). */
int64_t fam_kv_cached_len(int keep, const nnt_call_dims *dims);

/* From projected q [M, Hq*Dqk], k [M, Hkv*Dqk], v [M, Hkv*Dv] (M = B*T, token-major), splits
 * heads, applies rotary, and emits attention_queries/keys/values, attention_scores,
 * attention_probabilities, attention_head_outputs, attention_premix and attention_output
 * (o_proj's result, written to out [M, H]). */
nnt_status fam_attention_forward(const fam_env *env, nnt_run *run, int layer, const fam_attn *a,
                                 const nnt_forward_args *args, const nnt_attn_mask *mask,
                                 const nnt_tensor *q, const nnt_tensor *k, const nnt_tensor *v,
                                 fam_kv_cache *cache, nnt_tensor *out, nnt_error *err);

/* Padding and position masks of a call, built once per forward: key_valid = query_valid = this
 * call's part of attention_mask != 0, q_pos = k_pos = positions, causal. Free with
 * fam_mask_free. */
nnt_status fam_mask_build(const nnt_forward_args *args, nnt_attn_mask *mask, nnt_error *err);
void fam_mask_free(nnt_attn_mask *mask);

/* Value info of the self_attn host for an attention of this shape. */
void fam_attention_info(const fam_attn *a, int hidden, nnt_slot slot, const nnt_call_dims *dims,
                        nnt_value_info *out);
/* The same with the key axis `keys` long (a cached call: fam_kv_cached_len). */
void fam_attention_info_keys(const fam_attn *a, int hidden, nnt_slot slot, const nnt_call_dims *dims, int64_t keys,
                             nnt_value_info *out);
/* Inverse frequencies theta^(-2i/R), i < R/2, computed as transformers does (float32). */
void fam_rope_inv_freq(float *out, int rot_dim, double theta);

/* ---- module tree text ---- */
/* "Linear(in_features=I, out_features=O, bias=False)" into buf. */
const char *fam_linear_detail(char *buf, size_t n, int64_t in, int64_t out);
/* "(W,), eps=E" as print() writes an RMSNorm. */
const char *fam_norm_detail(char *buf, size_t n, int64_t width, double eps);

#endif

/* ---- Llama's pre-norm decoder: the skeleton MiniMax-M2, MiMo-V2-Flash and Kimi-Linear share ---- */
/* x_{l+1} = h + mlp(post_attention_layernorm(h)), h = x_l + mixer(input_layernorm(x_l));
 * logits = lm_head(norm(x_L)). The family supplies each block's mixer and MLP. */
typedef struct fam_decoder {
    int num_layers;
    int hidden;
    int vocab;
    float eps;
    nnt_tensor embed;      /* [V, H] */
    nnt_tensor final_norm; /* [H] */
    nnt_tensor lm_head;    /* [V, H] */
    const nnt_tensor *in_norm;   /* [num_layers] of [H] */
    const nnt_tensor *post_norm; /* [num_layers] of [H] */
    size_t norm_stride;          /* bytes between consecutive blocks' norms in those arrays */
    void *self;
    /* xn [M, H] -> out [M, H]; emits the mixer's values (self_attn or linear_attn host) */
    nnt_status (*mixer)(void *self, nnt_run *run, int layer, const nnt_forward_args *args,
                        const nnt_attn_mask *mask, const nnt_tensor *xn, nnt_tensor *out, nnt_error *err);
    /* xn [M, H] -> out [M, H]; emits the mlp host's values */
    nnt_status (*mlp)(void *self, nnt_run *run, int layer, const nnt_forward_args *args, const nnt_tensor *xn,
                      nnt_tensor *out, nnt_error *err);
} fam_decoder;

/* Runs the decoder, emitting token_embeddings, every block's layer values, final_norm_output,
 * lm_head_output and logits. */
nnt_status fam_decoder_forward(const fam_env *env, nnt_run *run, const nnt_forward_args *args,
                               const fam_decoder *d, nnt_error *err);

/* The readout of a single-stream decoder: x [M, H] through the final norm and lm_head. */
nnt_status fam_decoder_project(const fam_env *env, nnt_run *run, const fam_decoder *d, const nnt_tensor *x,
                               nnt_tensor *logits, nnt_error *err);

/* Value info of the model host and the block host of a single-stream Llama-style decoder; 1
 * when the slot was one of those, 0 otherwise. Hyper-connection values are off the page. */
int fam_decoder_info(int hidden, int vocab, nnt_slot slot, const nnt_call_dims *dims, nnt_value_info *out);

/* ---- weight binding shared by families ---- */
/* Reads tensor `name` ([count], any float dtype) as host F32 *host (fam_vector_f32: owned by env)
 * and hands it to the backend as *out (router biases, sinks, hyper-connection parameters,
 * position biases). Errors: the checkpoint's, naming the tensor. */
nnt_status fam_bind_vector(const fam_env *env, const nnt_checkpoint *ck, const char *name, int64_t count, float **host,
                           nnt_tensor *out, nnt_error *err);
/* Wires a Llama-style decoder: sizes, the per-block norms found every `stride` bytes from the
 * first block's in_norm and post_norm, and the family's mixer and MLP callbacks. */
void fam_decoder_wire(fam_decoder *d, int layers, int hidden, int vocab, double eps, const nnt_tensor *in_norm0,
                      const nnt_tensor *post_norm0, size_t stride, void *self,
                      nnt_status (*mixer)(void *, nnt_run *, int, const nnt_forward_args *, const nnt_attn_mask *,
                                          const nnt_tensor *, nnt_tensor *, nnt_error *),
                      nnt_status (*mlp)(void *, nnt_run *, int, const nnt_forward_args *, const nnt_tensor *, nnt_tensor *,
                                        nnt_error *));
/* Binds model.embed_tokens.weight [V, H], model.norm.weight [H] and lm_head.weight [V, H]
 * (the embedding when tied and lm_head is absent). */
nnt_status fam_bind_readout(const fam_env *env, const nnt_checkpoint *ck, int64_t V, int64_t H, int tied,
                            fam_decoder *d, nnt_error *err);

/* One spelling of a block's per-expert weights: printf patterns taking (layer, expert). */
typedef struct fam_expert_names {
    const char *gate, *up, *down;
} fam_expert_names;

/* Binds E experts of block `layer` ([I, H] gate and up, [H, I] down): from transformers'
 * fused 3-D tensors when `fused_gate_up` (pattern taking the layer) names one (gate rows first,
 * then up rows; `fused_down` [E, H, I]), else from the first per-expert spelling in `names`
 * (n of them) whose expert-0 gate tensor exists. */
nnt_status fam_bind_experts(const fam_env *env, const nnt_checkpoint *ck, int layer, int64_t E, int64_t I,
                            int64_t H, const char *fused_gate_up, const char *fused_down,
                            const fam_expert_names *names, int n, fam_expert *out, nnt_error *err);
