/* nnt_family_kit.h - the family kit (libnnt_family): the building blocks nnt's own family
 * plugins are made of, for any family plugin to link.
 *
 * What it holds: a per-model environment (fam_env) that owns every weight prepared on the
 * backend; weight binding from a checkpoint in its stored encoding (F32, BF16, F16, FP8/FP4 with
 * block scales); value-info helpers for `value_info`; softmax attention with rotary, sliding
 * window, sinks and key/value caches; a mixture of experts and a dense SwiGLU MLP; Llama's
 * pre-norm decoder skeleton; the byte model a family's `costs` entry adds up (fam_cost_*); and
 * the architecture table (fam_arch), one static declaration of a family's modules and tensors
 * from which its binding, module tree, costs and module-level value serving are read. Each
 * building block emits its standard values through the core's `emit` in the order nnterp's
 * paths expect, so a family that uses them serves those values without further code. minimax_m2 (families/minimax_m2/minimax_m2.c) is the shortest complete
 * family built on it; examples/third_party_family/ is one built outside the tree.
 *
 * Linking. The kit is a static library, libnnt_family.a, compiled as position-independent code
 * with hidden symbols: its code goes inside the plugin .so, which stays one self-contained file
 * with no further library to find at load time, and two plugins' copies never clash. With CMake:
 *     find_package(nnt CONFIG REQUIRED)
 *     nnt_add_plugin(my_family SOURCES my_family.c)
 *     target_link_libraries(my_family PRIVATE nnt::family_kit)
 * with pkg-config: cc -shared -fPIC -fvisibility=hidden $(pkg-config --cflags nnt) my_family.c
 *     $(pkg-config --variable=kitlibs nnt) -o my_family.so
 * The kit calls the core only through its routine table (nnt_core_api) and the backend through
 * its op table (both reach the plugin in nnt_load_args), so a plugin still never links libnnt.
 *
 * Version. The kit is versioned with the plugin ABI: its structs, their layouts and its function
 * signatures change only together with NNT_ABI_MAJOR / NNT_ABI_MINOR (nnt_types.h), and the
 * libnnt_family.a of an installation is built from the headers installed beside it.
 * NNT_FAMILY_KIT_ABI_MAJOR/_MINOR give the version a plugin compiled against; fam_kit_abi()
 * gives the one the linked library was compiled for, so a plugin can refuse to load when
 * headers and library came from different installations.
 *
 * Axis names used below (as in the rest of the SDK):
 *   B  rows of the batch (args->batch)        T  tokens of this call per row (args->seq)
 *   M  token rows B * T, row b * T + t         S  keys one query sees: cached tokens then T
 *   H  hidden_size                             V  vocab_size
 *   Hq query heads, Hkv key/value heads        Dqk, Dv  query/key and value head widths
 *   E  routed experts, K experts per token     I  one expert's (or the dense MLP's) width
 *   L  blocks (num_hidden_layers)
 * "Backend memory" is memory of the kernel backend (nnt_backend_ops alloc, a run's arena);
 * "host memory" is ordinary CPU memory the plugin reads directly. Activations are F32 in
 * backend memory unless stated otherwise. Every function taking `nnt_error *err` returns
 * NNT_OK or the status it also stored in err with a message; on an error nothing the function
 * was asked to produce is valid, but what it already registered with a fam_env stays owned by
 * that env. None of these functions is thread-safe on one env or one run at a time: the core
 * calls a family's entry points one at a time per model. */
#ifndef NNT_FAMILY_KIT_H
#define NNT_FAMILY_KIT_H

#include "nnt_family.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The plugin ABI version this header belongs to. */
#define NNT_FAMILY_KIT_ABI_MAJOR NNT_ABI_MAJOR
#define NNT_FAMILY_KIT_ABI_MINOR NNT_ABI_MINOR
/* The ABI the linked libnnt_family was compiled for, as (major << 16) | minor. A plugin may
 * compare it with (NNT_FAMILY_KIT_ABI_MAJOR << 16) | NNT_FAMILY_KIT_ABI_MINOR in its load. */
uint32_t fam_kit_abi(void);

/* ======================================================================================== */
/* ---- the environment ---- */

/* The list of what an env holds: every weight prepared on the backend (released through the
 * backend at fam_env_release) and the host buffers made for small parameter vectors (freed
 * there). Internal to the kit; a family never touches it. */
typedef struct fam_prepared {
    nnt_tensor *w;
    int n, cap;
    void **buf;
    int n_buf, cap_buf;
} fam_prepared;

/* The environment a family's code runs in, one per loaded model, embedded in the family's model
 * struct: the core's routines, the backend and its context, the precision products run in, and
 * what was prepared through it. Every kit function takes it const; only the `prepared` list
 * grows behind the const (weights and buffers registered for release). */
typedef struct fam_env {
    const nnt_core_api *core;
    const nnt_backend_ops *be;
    void *be_ctx;
    nnt_precision precision;
    uint32_t bf16_style;    /* NNT_TENSOR_BF16_ONCE / _SHIFTED: how this family's torch code rounds
                             * in bfloat16, added to every bfloat16 tensor fam_alloc makes; 0 for
                             * the default (set it after fam_env_init) */
    fam_prepared *prepared; /* owned; NULL until the first weight */
    nnt_weights weights;    /* the load's args->weights (ABI 3.12; stored before): what
                             * fam_weight_product does */
    struct fam_natives *natives; /* owned; NULL until fam_env_natives (no native values) */
} fam_env;

/* Fills env from the family's load arguments (core routines, backend, backend context, precision);
 * nothing is allocated. Call it first thing in `load`. */
void fam_env_init(fam_env *env, const nnt_load_args *args);
/* Releases everything registered with env: each prepared weight through the backend's
 * release_weight (newest first), each host vector fam_vector_f32 / fam_bind_vector copied, and
 * the lists; env can be reused afterwards. Call it in `unload` (and when `load` fails half-way);
 * tensors handed out by fam_weight & co. are invalid afterwards. Safe on an env that holds
 * nothing. */
void fam_env_release(fam_env *env);

/* ======================================================================================== */
/* ---- value info (for the family's `value_info` entry point) ---- */

/* Marks a value as not served on this block: out is cleared, out->served = 0, and the printf-
 * formatted reason (cut to NNT_REASON_MAX - 1 bytes) says why, in words the user reads in
 * `nnt support` and in the error of a request for it. */
void fam_unserved(nnt_value_info *out, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The same, and the value is left off the family's page altogether (out->off_page = 1):
 * printouts omit it; a request still fails with the reason. For values that make no sense in
 * this architecture (e.g. hyper-connection values in a single-stream model). */
void fam_off_page(nnt_value_info *out, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Marks a value as served with `dtype` (NNT_F32 for activations, NNT_I32 for expert indices),
 * writable (1: edits may rewrite it) or not, and the shape `shape` (NNT_SHAPE(B, T, H), ...).
 * The shape is recorded only when dims != NULL (the core asks without dims when it wants no
 * shapes; then out->ndim = 0). The declared dtype and shape must be those the forward emits. */
void fam_served(nnt_value_info *out, const nnt_call_dims *dims, nnt_dtype dtype, int writable, nnt_shape shape);

/* ======================================================================================== */
/* ---- weights (in `load`) ---- */

/* Binds checkpoint tensor `name` and prepares it on the backend in its stored encoding (F32,
 * BF16, F16, or FP8 e4m3 / FP4 e2m1 with their block scales; never widened), flagged for
 * bfloat16 products when env->precision is NNT_PRECISION_BF16. With ndim > 0 the stored shape
 * must equal shape[0..ndim) (e.g. [out_features, in_features] for a Linear); ndim 0 accepts
 * any shape. *out is the backend's handle, registered with env: valid while the checkpoint is
 * open and until fam_env_release; never release it yourself.
 * Errors: NNT_ERR_NOT_FOUND (no such tensor), NNT_ERR_SHAPE (another shape, or not a float
 * dtype), the backend's status from prepare_weight, NNT_ERR_OUT_OF_MEMORY; messages name the
 * checkpoint and the tensor. */
nnt_status fam_weight(const fam_env *env, const nnt_checkpoint *ck, const char *name, int ndim,
                      const int64_t *shape, nnt_tensor *out, nnt_error *err);
/* As fam_weight, for a weight that products read (a linear layer's, an expert's: the tensors
 * an FP8 release stores in FP8): with env->weights NNT_WEIGHTS_FP8 and a core of ABI 3.12 or
 * later, a weight stored in F32, BF16 or F16 is bound through core->tensor_fp8, re-encoded as
 * FP8 e4m3 with 128 x 128 block scales; otherwise exactly fam_weight. fam_arch_bind calls it for
 * FAM_STORE_LINEAR rows, fam_bind_experts for every expert. Errors: as fam_weight, and
 * tensor_fp8's (a weight value that is not finite). */
nnt_status fam_weight_product(const fam_env *env, const nnt_checkpoint *ck, const char *name, int ndim,
                              const int64_t *shape, nnt_tensor *out, nnt_error *err);
/* The first of names[0..n) that the checkpoint holds (NULL entries skipped), or NULL when it
 * holds none: for tensors spelled differently by the hub release and by transformers. The
 * pointer returned is one of `names`. */
const char *fam_first_present(const fam_env *env, const nnt_checkpoint *ck, const char *const *names, int n);
/* A small float tensor holding n values (any shape; F32, BF16 or F16) as F32 host memory
 * *out[n]: the mapped bytes themselves when stored as aligned F32, else a widened copy
 * registered with env. For router biases, per-head decay rates, sinks. Read-only; owned by env
 * (freed by fam_env_release), never freed by the caller.
 * Errors: NNT_ERR_NOT_FOUND, NNT_ERR_SHAPE (another count, or not a float tensor),
 * NNT_ERR_OUT_OF_MEMORY. */
nnt_status fam_vector_f32(const fam_env *env, const nnt_checkpoint *ck, const char *name, int64_t n,
                          float **out, nnt_error *err);
/* A view *out of rows [r0, r0 + nr) of matrix `index` of a prepared weight w [E, R, C]
 * (`index` 0 for a 2-D weight [R, C]), block scales included (nnt_tensor_rows): e.g. one
 * expert's gate rows inside a fused gate_up tensor. The view shares w's memory and owner; it
 * is never released on its own.
 * Views may start inside a scale block (the view remembers where). Errors: NNT_ERR_SHAPE for an
 * encoded weight whose scales have no block sizes (the message names `what`). */
nnt_status fam_rows(const fam_env *env, const nnt_tensor *w, int64_t index, int64_t r0, int64_t nr, const char *what,
                    nnt_tensor *out, nnt_error *err);
/* Prepares a tensor the family built itself in host memory (e.g. an F32 vector it computed)
 * on the backend, as fam_weight does, and registers the result with env. The host memory must
 * stay valid as long as the backend may read it (the cpu backend reads it in place): keep it
 * until fam_env_release. Errors: the backend's, NNT_ERR_OUT_OF_MEMORY. */
nnt_status fam_prepare(const fam_env *env, const nnt_tensor *host, nnt_tensor *out, nnt_error *err);
/* The key and value projections of an attention block as `heads` key/value heads of widths dk
 * and dv over `in` inputs, read with the core's `tensor` and prepared: *k [heads * dk, in] and
 * *v [heads * dv, in], both registered with env. Also reads FP8 checkpoints quantised per
 * key/value head over each head's fused rows [dk key rows; dv value rows] padded to whole
 * B-row blocks (MiMo-V2-Flash's full-attention blocks), recognised from the shapes alone: the
 * key scales have heads * ceil(dk / B) rows, not the plain grid's ceil(heads * dk / B). Their
 * grids are then re-laid into plain F32 grids of gcd(B, dk, dv)-row blocks, host buffers env
 * owns (freed by fam_env_release); the weights stay mapped. Source: sglang-jax pull request 969,
 * which found this layout in the released weights (since ABI 3.4 in the kit; before, the core's
 * tensor_kv_heads did it). Errors: as fam_weight; NNT_ERR_INVALID_ARGUMENT (a count below 1);
 * NNT_ERR_SHAPE naming v_proj when k_proj's scales are per head and v_proj's are not;
 * NNT_ERR_UNSUPPORTED for a per-head layout whose value scales have another count of rows a
 * head than ceil(dv / B). */
nnt_status fam_weight_kv_heads(const fam_env *env, const nnt_checkpoint *ck, const char *k_name, const char *v_name,
                               int64_t heads, int64_t dk, int64_t dv, int64_t in, nnt_tensor *k, nnt_tensor *v,
                               nnt_error *err);

/* ======================================================================================== */
/* ---- tensors in a forward ---- */

/* Allocates *out of dtype `dt` and shape `shape` (NNT_SHAPE(M, H), ...) from the run's arena in
 * backend memory, with the bfloat16 flags the run's precision gives and env->bf16_style. Freed
 * by the arena: release it with core->arena_release(run, mark) for a mark taken before, or it
 * lives until the forward returns. Contents are undefined.
 * Errors: the core's alloc (NNT_ERR_OUT_OF_MEMORY when the arena cannot grow). */
nnt_status fam_alloc(const fam_env *env, nnt_run *run, nnt_dtype dt, nnt_tensor *out, nnt_error *err, nnt_shape shape);
/* The same data seen with another shape; the element counts must agree (not checked). A view
 * owns nothing. E.g. fam_view(&x, NNT_SHAPE(B, T, H)) turns x [M, H] into the [B, T, H] layout
 * values are emitted in. */
nnt_tensor fam_view(const nnt_tensor *t, nnt_shape shape);

/* ======================================================================================== */
/* ---- mixture of experts and MLPs ---- */

/* One SwiGLU MLP's weights: out = down(silu(gate(x)) * up(x)). Prepared weights (fam_weight,
 * fam_rows, fam_bind_experts); the struct owns nothing. */
typedef struct fam_expert {
    nnt_tensor gate; /* [I, H] */
    nnt_tensor up;   /* [I, H] */
    nnt_tensor down; /* [H, I] */
} fam_expert;

/* One block's mixture of experts, filled by the family in `load`. */
typedef struct fam_moe {
    int num_experts;        /* E */
    int top_k;              /* K */
    int intermediate;       /* I, one expert's width */
    nnt_tensor router;      /* [E, H]: router_logits = x router^T */
    nnt_tensor bias;        /* [E] F32 on the backend, data NULL when absent: a selection bias
                             * added to the scores for the choice only (fam_bind_vector) */
    nnt_route_params route; /* scoring function, top-k, groups, renormalisation, scaling */
    float swiglu_limit;     /* 0: no clamp; else the clamped SwiGLU of nnt_backend_ops.swiglu */
    fam_expert *experts;    /* [E], owned by the family */
    fam_expert shared;      /* a shared expert added to every token, used when has_shared */
    int has_shared;
    const int32_t *tid2eid; /* host [vocab, K], or NULL: hash routing picks each token's experts
                             * by its id; the router then only weighs them */
    int vocab;              /* rows of tid2eid */
    int router_f32;         /* 1: the router's product stays float32 in a bfloat16 model */
    int route_bf16;         /* 1: scores and weights are computed in bfloat16 in such a model */
} fam_moe;

/* Runs the mixture of block `layer` on x [M, H] (M = dims->batch * dims->seq, backend F32) and
 * writes the block's mlp output to out [M, H] (allocated by the caller). Emits, in order:
 * router_logits [B, T, E], expert_indices [B, T, K] (I32), expert_weights [B, T, K],
 * expert_outputs [B, T, K, H] (only when requested: each slot's expert output times its
 * weight), routed_output [B, T, H], shared_expert_output [B, T, H] (with a shared expert) and
 * mlp_output [B, T, H]; an edit of each reaches everything computed after it (edited indices
 * choose the experts). The experts run one at a time over the tokens routed to them (gather,
 * SwiGLU, weighted scatter): the routing weights stay in backend memory and weigh the rows
 * through scale_rows when the backend has it (so a gradient tape differentiates them), else the
 * scatter takes a host copy of them as its row scales (the same numbers). With moe->tid2eid the indices are the table's rows for `ids`
 * (host [M] token ids, else unused and may be NULL). Scratch comes from the run's arena and is
 * released before returning.
 * Errors: the backend's; NNT_ERR_INVALID_ARGUMENT for an (edited) expert index outside
 * [0, E); NNT_ERR_OUT_OF_MEMORY. */
nnt_status fam_moe_forward(const fam_env *env, nnt_run *run, int layer, const fam_moe *moe,
                           const nnt_call_dims *dims, const int32_t *ids, const nnt_tensor *x, nnt_tensor *out,
                           nnt_error *err);

/* A dense SwiGLU MLP of block `layer` on x [M, H] -> out [M, H] (caller-allocated, backend
 * F32), I = w->gate.shape[0], SwiGLU clamped at `limit` (0: none). With emit nonzero it emits
 * mlp_activation [B, T, I] (silu(gate)), mlp_neurons [B, T, I] (what down reads) and
 * mlp_output [B, T, H], and an edited activation feeds the neurons; with emit 0 (a shared
 * expert inside fam_moe_forward) it emits nothing. Errors: the backend's,
 * NNT_ERR_OUT_OF_MEMORY. */
nnt_status fam_mlp_forward(const fam_env *env, nnt_run *run, int layer, const fam_expert *w, float limit,
                           const nnt_call_dims *dims, const nnt_tensor *x, nnt_tensor *out, int emit,
                           nnt_error *err);

/* ======================================================================================== */
/* ---- softmax attention ---- */

/* The shape of one block's softmax attention, filled by the family (also for value_info and
 * the caches, so cheap to fill). Pointers are borrowed: they must outlive every call. */
typedef struct fam_attn {
    int num_heads;         /* Hq */
    int num_kv_heads;      /* Hkv; Hq must be a multiple (grouped-query attention) */
    int qk_head_dim;       /* Dqk */
    int v_head_dim;        /* Dv */
    int rot_start;         /* first rotated dim of each q/k head */
    int rot_dim;           /* rotated dims from rot_start; 0: no rotary */
    nnt_rope_style rope_style;
    const float *inv_freq; /* host [rot_dim / 2]: fam_rope_inv_freq, or the family's scaled ones */
    float rope_mscale;     /* multiplies cos and sin (1 for none) */
    float scale;           /* softmax scale, usually 1 / sqrt(Dqk) */
    int window;            /* 0: none; else keys within `window` positions, the query included */
    const float *sinks;    /* host [Hq] F32 attention sinks, or NULL */
    nnt_tensor o_proj;     /* [H, Hq * Dv], prepared */
} fam_attn;

/* A key/value cache of one attention block for generation: the last `keep` tokens of every row
 * (keep = the session's capacity for full attention, window - 1 for a sliding block). Made
 * and freed by the kit (fam_layer_caches_new); a family only passes it around. */
typedef struct fam_kv_cache {
    nnt_tensor k, v; /* backend [B * Hkv, keep * Dqk], [B * Hkv, keep * Dv] */
    int32_t *pos;    /* host [B, keep]: the cached keys' positions */
    uint8_t *valid;  /* host [B, keep]: 0 for padding */
    int batch, heads, dk, dv, keep, len;
} fam_kv_cache;
/* Allocates one cache for `batch` rows of `heads` key/value heads (widths dk, dv) holding up
 * to `keep` tokens, empty (len 0). Free with fam_kv_cache_free, also after a failure.
 * Errors: the backend's alloc, NNT_ERR_OUT_OF_MEMORY. */
nnt_status fam_kv_cache_init(const fam_env *env, fam_kv_cache *c, int batch, int heads, int dk, int dv, int keep,
                             nnt_error *err);
/* Frees a cache's backend and host memory and clears it; safe on a cleared cache. */
void fam_kv_cache_free(const fam_env *env, fam_kv_cache *c);
/* A generation cache: one key/value cache per block, keep[l] tokens for block l (0: block l has
 * no cache, e.g. a linear-attention block). */
typedef struct fam_layer_caches {
    fam_kv_cache *kv; /* [layers] */
    int layers;
} fam_layer_caches;
/* Makes a generation cache from per-block arrays heads[L], dk[L], dv[L], keep[L] (L = layers).
 * *out is owned by the caller: free with fam_layer_caches_free. Errors: as fam_kv_cache_init;
 * nothing is left allocated on failure. */
nnt_status fam_layer_caches_new(const fam_env *env, int layers, int batch, const int *heads, const int *dk,
                                const int *dv, const int *keep, fam_layer_caches **out, nnt_error *err);
/* Frees a generation cache and every block's cache; NULL is ignored. */
void fam_layer_caches_free(const fam_env *env, fam_layer_caches *c);
/* The same from each block's attention shape, for the family's `cache_new`: attn_of(model, l,
 * &a) fills block l's fam_attn and returns 1, or returns 0 for a block without softmax
 * attention (no cache); a sliding block (window > 0) keeps its last window - 1 keys (the query
 * is the window's last), a full one keeps `capacity` (the session's token capacity).
 * *out: as fam_layer_caches_new (the family's `cache_free` calls fam_layer_caches_free). */
nnt_status fam_attention_caches_new(const fam_env *env, int layers, int batch, int capacity,
                                    int (*attn_of)(const void *model, int layer, fam_attn *out), const void *model,
                                    fam_layer_caches **out, nnt_error *err);
/* The cache of block `layer` when the call carries a generation cache made by the kit
 * (args->cache), else NULL (a stateless call, or a block without one). */
fam_kv_cache *fam_layer_cache(const nnt_forward_args *args, int layer);

/* Keys a call with a cache of `keep` tokens attends to: the cached tokens (min(past, keep))
 * then the call's seq - the S axis value_info declares for a cached call. */
int64_t fam_kv_cached_len(int keep, const nnt_call_dims *dims);

/* One attention block from its projections q [M, Hq * Dqk], k [M, Hkv * Dqk], v [M, Hkv * Dv]
 * (backend F32, token-major; any per-head norm already applied): splits heads, applies rotary
 * at args->positions, appends the cached keys (cache non-NULL: it is read, then updated to the
 * last `keep` keys), masks (padding, causal, window, `mask`), softmax with the sinks, mixes the
 * values, and writes o_proj's result to out [M, H] (caller-allocated). Emits, in order:
 * attention_queries [B, Hq, T, Dqk], attention_keys [B, Hkv, S, Dqk], attention_values
 * [B, Hkv, S, Dv], attention_scores [B, Hq, T, S] (scaled and masked, before softmax),
 * attention_probabilities [B, Hq, T, S], attention_head_outputs and attention_premix
 * [B, T, Hq, Dv], attention_output [B, T, H]; an edit of each reaches what follows. `mask` is
 * the call's mask from fam_mask_build (the decoder skeleton passes it to the mixer).
 * Errors: the backend's, NNT_ERR_OUT_OF_MEMORY. */
nnt_status fam_attention_forward(const fam_env *env, nnt_run *run, int layer, const fam_attn *a,
                                 const nnt_forward_args *args, const nnt_attn_mask *mask,
                                 const nnt_tensor *q, const nnt_tensor *k, const nnt_tensor *v,
                                 fam_kv_cache *cache, nnt_tensor *out, nnt_error *err);

/* The default bound on one block of attention scores (nnt_forward_args.attention_block_bytes
 * 0): 64 MiB, about 48 heads by 32 queries by 10,000 keys. */
#define FAM_ATTEND_BLOCK_BYTES ((uint64_t)64 << 20)

/* Softmax attention from split heads: q [B, Hq, T, D] (rotated), keys [B, Hkv, S, D] and
 * values [B, Hkv, S, Dv] (backend F32; Hq a multiple of Hkv, query head h reading key/value
 * head h / (Hq / Hkv); with mask->key_count = S set, on a backend with NNT_FEATURE_KEY_COUNT
 * only, the key axis may be longer, only its first S entries read) -> ho [B, T, Hq, Dv]
 * (caller-allocated), with scores = scale * q . k^T
 * masked by `mask` (its query arrays [B, T], allow [B, T, S]), softmax over the keys with the
 * sinks (F32 [Hq] host memory, or NULL) joining as one column, and the values mixed by the
 * probabilities. When no request reads block `layer`'s attention_scores or
 * attention_probabilities and the backend has attn_fused, that one pass computes ho without
 * the pattern (tiles of keys with an online softmax) unless it declines the call (a tape
 * recording for gradients, bfloat16 roundings, too few rows), and neither value is emitted.
 * When only saves read the block's pattern (the core's parts_wanted), the one pass makes ho
 * and the pattern is made in blocks of queries for the queries the saves' slices read alone,
 * each block handed over with emit_part (without the one pass: every block, each also mixed).
 * Otherwise: when block `layer` has a request on attention_scores or
 * attention_probabilities, or the whole pattern fits in `args`' block bound
 * (attention_block_bytes, FAM_ATTEND_BLOCK_BYTES when 0 or absent), the [B, Hq, T, S] pattern is
 * made once and both values are emitted (an edit of the scores reaches the probabilities, one
 * of the probabilities the mix); otherwise queries go in blocks of at least 16 (the bound over
 * B * Hq * S * 4 bytes), each block's pattern made, used and released, so memory grows with T * S
 * / blocks and not T * S. Every query row sees exactly the operations of the whole pattern (the
 * backend's attn_scores, softmax, attn_mix, and copy_cols moving rows), so the values agree with
 * the whole pattern's up to the order of a product's sums, on every backend and precision, and
 * a gradient tape records the blocks like any other ops.
 * Errors: the backend's, NNT_ERR_OUT_OF_MEMORY. */
nnt_status fam_attend(const fam_env *env, nnt_run *run, int layer, const nnt_forward_args *args,
                      const nnt_tensor *q, const nnt_tensor *keys, const nnt_tensor *values, float scale,
                      const nnt_attn_mask *mask, const float *sinks, nnt_tensor *ho, nnt_error *err);

/* The padding and position masks of a call, built once per forward: key_valid = query_valid =
 * this call's part of args->attention_mask != 0 (host [B, T], allocated), q_pos = k_pos =
 * args->positions (borrowed), causal. Free with fam_mask_free. Errors: NNT_ERR_OUT_OF_MEMORY. */
nnt_status fam_mask_build(const nnt_forward_args *args, nnt_attn_mask *mask, nnt_error *err);
/* Frees what fam_mask_build allocated and clears the mask. */
void fam_mask_free(nnt_attn_mask *mask);

/* Value info of the self_attn values (attention_queries ... attention_output) for an
 * attention of shape *a in a model of width `hidden`, with S = past + seq keys; another value
 * is marked unserved. For the family's value_info. */
void fam_attention_info(const fam_attn *a, int hidden, nnt_value_id id, const nnt_call_dims *dims,
                        nnt_value_info *out);
/* The same with the key axis S = `keys` long (a sliding or capped cache: fam_kv_cached_len). */
void fam_attention_info_keys(const fam_attn *a, int hidden, nnt_value_id id, const nnt_call_dims *dims, int64_t keys,
                             nnt_value_info *out);
/* Writes the inverse frequencies theta^(-2i / rot_dim), i < rot_dim / 2, into host out
 * [rot_dim / 2], computed in float32 as transformers' default rotary embedding does. */
void fam_rope_inv_freq(float *out, int rot_dim, double theta);

/* ======================================================================================== */
/* ---- module tree text (for `build_tree`) ---- */

/* Writes "in_features=IN, out_features=OUT, bias=False" (a Linear's print() detail) into
 * buf[n] and returns buf. */
const char *fam_linear_detail(char *buf, size_t n, int64_t in, int64_t out);
/* Writes "(W,), eps=E" (an RMSNorm's print() detail) into buf[n] and returns buf. */
const char *fam_norm_detail(char *buf, size_t n, int64_t width, double eps);

/* ======================================================================================== */
/* ---- Llama's pre-norm decoder: the skeleton MiniMax-M2, MiMo-V2-Flash and Kimi-Linear share ---- */

/* x_{l+1} = h + mlp(post_attention_layernorm(h)), h = x_l + mixer(input_layernorm(x_l));
 * logits = lm_head(norm(x_L)), every norm an RMSNorm with `eps`. The family supplies each
 * block's mixer and MLP as callbacks; the skeleton emits the residual-stream values. Filled by
 * fam_bind_readout and fam_decoder_wire; weights borrowed (owned by the env). */
typedef struct fam_decoder {
    int num_layers;              /* L */
    int hidden;                  /* H */
    int vocab;                   /* V */
    float eps;
    nnt_tensor embed;            /* [V, H] */
    nnt_tensor final_norm;       /* [H] */
    nnt_tensor lm_head;          /* [V, H] (the embedding when tied) */
    const nnt_tensor *in_norm;   /* block 0's input_layernorm [H]; block l's is norm_stride * l bytes on */
    const nnt_tensor *post_norm; /* block 0's post_attention_layernorm [H], likewise */
    size_t norm_stride;          /* bytes between consecutive blocks' norms (sizeof the family's block struct) */
    void *self;                  /* the family's model, passed to the callbacks */
    /* xn [M, H] -> out [M, H] (both backend F32, out allocated by the skeleton); emits the
     * mixer's values (self_attn or linear_attn); mask: the call's, from fam_mask_build */
    nnt_status (*mixer)(void *self, nnt_run *run, int layer, const nnt_forward_args *args,
                        const nnt_attn_mask *mask, const nnt_tensor *xn, nnt_tensor *out, nnt_error *err);
    /* xn [M, H] -> out [M, H]; emits the mlp values (fam_moe_forward or fam_mlp_forward) */
    nnt_status (*mlp)(void *self, nnt_run *run, int layer, const nnt_forward_args *args, const nnt_tensor *xn,
                      nnt_tensor *out, nnt_error *err);
} fam_decoder;

/* ---- pipeline stages (nnt_forward_args' stage fields, since ABI 3.2) ---- */

/* The blocks [*first, *end) call `args` runs in a model of `layers` blocks: the args' stage
 * range, or [0, layers) when args->struct_size ends before the stage fields or end_layer is 0.
 * Cannot fail (the core checked the range before the call). */
void fam_stage_blocks(const nnt_forward_args *args, int layers, int *first, int *end);
/* Fills x (backend F32, caller-allocated, B * T * streams * H elements in any shape, e.g.
 * [M, S, H]) from args->hidden_in (F32 [B, T, S, H], host or backend memory): the residual
 * stream a later stage starts from. Errors: NNT_ERR_SHAPE (hidden_in NULL, not F32, or another
 * element count than x; the message names hidden_in and both counts), the backend's upload or
 * copy. */
nnt_status fam_stage_load(const fam_env *env, const nnt_forward_args *args, const nnt_tensor *x, nnt_error *err);
/* Writes x (backend F32, as for fam_stage_load) to args->hidden_out (F32 [B, T, S, H], host or
 * backend memory): the residual stream the next stage starts from. Errors: as fam_stage_load
 * (naming hidden_out), the backend's download or copy. */
nnt_status fam_stage_store(const fam_env *env, const nnt_forward_args *args, const nnt_tensor *x, nnt_error *err);

/* The whole forward of a single-stream decoder for the family's `forward`: embeds
 * args->input_ids, runs every block and the readout, emitting token_embeddings [B, T, H];
 * per block layer_input, attention_norm_output, (the mixer's values), layer_mid,
 * mlp_norm_output, mlp_input, (the MLP's values), layer_output, all [B, T, H]; then
 * final_norm_output [B, T, H], lm_head_output and logits (fam_readout: [B, T, V], or [B, K, V]
 * at the positions args->logits_positions names). Edits of each reach what
 * follows. Each block's scratch is released before the next block.
 * A pipeline stage (fam_stage_blocks) runs only its blocks: it starts from args->hidden_in
 * ([B, T, 1, H]) instead of the embedding when first_layer > 0 (no token_embeddings), and when
 * end_layer < L it writes the stream leaving its last block to args->hidden_out and emits no
 * final_norm_output, lm_head_output or logits.
 * Errors: the callbacks', the backend's, NNT_ERR_OUT_OF_MEMORY, fam_stage_load's and
 * fam_stage_store's. */
nnt_status fam_decoder_forward(const fam_env *env, nnt_run *run, const nnt_forward_args *args,
                               const fam_decoder *d, nnt_error *err);

/* The readout's lm_head and its values: xn [B * T, H] (backend F32, the final norm's output)
 * times lm_head into logits, run only at the rows args->logits_positions names (ABI 3.10; every
 * row when it names none, or the core predates it), emitted as lm_head_output and logits
 * F32 [B, K, V] with K the positions' count (T for every row), row (b, k) being position
 * logits_positions[k] of row b. The tensors live in the run's arena until the forward ends.
 * Errors: the backend's, NNT_ERR_OUT_OF_MEMORY, the emission's. */
nnt_status fam_readout(const fam_env *env, nnt_run *run, const nnt_forward_args *args, const nnt_tensor *xn,
                       const nnt_tensor *lm_head, int64_t vocab, nnt_error *err);

/* The readout for the family's `project` (the logit lens): x [M, H] through the final norm and
 * lm_head into logits [M, V] (caller-allocated, backend F32). Errors: the backend's,
 * NNT_ERR_OUT_OF_MEMORY. */
nnt_status fam_decoder_project(const fam_env *env, nnt_run *run, const fam_decoder *d, const nnt_tensor *x,
                               nnt_tensor *logits, nnt_error *err);

/* Value info of the model values (token_embeddings, final_norm_output, lm_head_output,
 * logits) and of the block values the skeleton emits (layer_input ... layer_output), all F32
 * and writable; hyper-connection values are marked off the page. Returns 1 when `id` was one
 * of those (out filled), 0 otherwise (out untouched: the family answers). */
int fam_decoder_info(int hidden, int vocab, nnt_value_id id, const nnt_call_dims *dims, nnt_value_info *out);

/* ======================================================================================== */
/* ---- weight binding shared by families (in `load`) ---- */

/* Reads tensor `name` ([count] values, any float dtype) as host F32 *host (fam_vector_f32:
 * owned by env) and prepares it on the backend as *out (registered with env): router biases,
 * sinks, hyper-connection parameters. Errors: as fam_vector_f32 and fam_prepare, naming the
 * tensor. */
nnt_status fam_bind_vector(const fam_env *env, const nnt_checkpoint *ck, const char *name, int64_t count, float **host,
                           nnt_tensor *out, nnt_error *err);
/* Wires a Llama-style decoder d: sizes, eps, the per-block norms found every `stride` bytes
 * from block 0's in_norm0 and post_norm0 (pointers into the family's block array, borrowed),
 * and the family's mixer and MLP callbacks called with `self`. Cannot fail. */
void fam_decoder_wire(fam_decoder *d, int layers, int hidden, int vocab, double eps, const nnt_tensor *in_norm0,
                      const nnt_tensor *post_norm0, size_t stride, void *self,
                      nnt_status (*mixer)(void *, nnt_run *, int, const nnt_forward_args *, const nnt_attn_mask *,
                                          const nnt_tensor *, nnt_tensor *, nnt_error *),
                      nnt_status (*mlp)(void *, nnt_run *, int, const nnt_forward_args *, const nnt_tensor *, nnt_tensor *,
                                        nnt_error *));
/* Binds model.embed_tokens.weight [V, H], model.norm.weight [H] and lm_head.weight [V, H] into
 * d (the embedding serves as lm_head when `tied` and the checkpoint has no lm_head.weight).
 * Errors: as fam_weight. */
nnt_status fam_bind_readout(const fam_env *env, const nnt_checkpoint *ck, int64_t V, int64_t H, int tied,
                            fam_decoder *d, nnt_error *err);
/* The blocks whose weights `load` binds, from args (nnt_load_args' first_layer / end_layer, ABI
 * 3.3; every block [0, layers) when the core predates them or asks for the whole model):
 * *first and *end, 0 <= *first < *end <= layers. */
void fam_load_blocks(const nnt_load_args *args, int layers, int *first, int *end);
/* fam_bind_readout for the load `args` asks for (ABI 3.3: one stage's blocks, fam_load_blocks):
 * writes the stage's blocks to *first and *end ([0, layers) for a whole-model load) and binds
 * from args->ckpt the embedding only when *first is 0 (or when tied and the lm_head it serves is
 * needed), the final norm and lm_head only when *end is layers; the parts left out stay zero
 * tensors. Errors: as fam_weight. */
nnt_status fam_bind_readout_stage(const fam_env *env, const nnt_load_args *args, int64_t V, int64_t H, int tied,
                                  int layers, fam_decoder *d, int *first, int *end, nnt_error *err);

/* One row of a family's tensor-name table for binding alone (the architecture table below,
 * fam_arch, supersedes it: its rows also drive the module tree and the costs), the way
 * llama.cpp's llama-arch.cpp lists each architecture's tensors: which member of the family's block struct a checkpoint tensor binds
 * to, the tensor's name as a printf pattern taking the block index (one %d), and its shape as
 * indices into a sizes array the family fills at load (so one table serves every block and
 * every configuration). E.g., with sizes[MY_Q] = heads * head_dim and sizes[MY_H] = hidden:
 *     {offsetof(my_block, q_proj), "model.layers.%d.self_attn.q_proj.weight", 2, {MY_Q, MY_H}}
 * binds [heads * head_dim, hidden] into block->q_proj. ndim 0 accepts any shape. */
typedef struct fam_tensor_name {
    size_t field;           /* offsetof(the family's block struct, an nnt_tensor member) */
    const char *pattern;    /* checkpoint name, printf pattern with one %d: the block index */
    int ndim;               /* 0..NNT_MAX_DIMS; 0: any shape */
    int size[NNT_MAX_DIMS]; /* extent i is sizes[size[i]] */
} fam_tensor_name;

/* Binds every row of names[0..n) for block `layer`: the tensor named pattern % layer, of shape
 * sizes[size[0]], ..., prepared as fam_weight does into the nnt_tensor at (char *)block +
 * field (registered with env). block: the family's block struct, sizes: the extents the rows
 * index (host memory, borrowed for the call). Rows are bound in table order; the first failure
 * stops. Errors: NNT_ERR_INTERNAL for a row whose name does not fit 256 bytes or whose ndim is
 * outside 0..NNT_MAX_DIMS (naming the pattern), then as fam_weight (naming the tensor). */
nnt_status fam_bind_names(const fam_env *env, const nnt_checkpoint *ck, int layer, const fam_tensor_name *names, int n,
                          const int64_t *sizes, void *block, nnt_error *err);

/* One spelling of a block's per-expert weight names: printf patterns taking (int layer,
 * int expert), e.g. "model.layers.%d.mlp.experts.%d.gate_proj.weight". */
typedef struct fam_expert_names {
    const char *gate, *up, *down;
} fam_expert_names;

/* Binds the E experts of block `layer` into out[E] (gate and up [I, H], down [H, I], all
 * registered with env): from transformers' fused 3-D tensors when the checkpoint holds
 * `fused_gate_up` (a pattern taking the layer; [E, 2I, H], each expert's gate rows then its up
 * rows) with `fused_down` ([E, H, I]), else from the first spelling in names[0..n) whose
 * expert-0 gate tensor exists. fused_gate_up may be NULL (per-expert names only).
 * Errors: NNT_ERR_NOT_FOUND naming the block and the names tried (no spelling matches, or an
 * expert is missing), then as fam_weight and fam_rows. */
nnt_status fam_bind_experts(const fam_env *env, const nnt_checkpoint *ck, int layer, int64_t E, int64_t I,
                            int64_t H, const char *fused_gate_up, const char *fused_down,
                            const fam_expert_names *names, int n, fam_expert *out, nnt_error *err);

/* ======================================================================================== */
/* ---- costs (for the family's `costs` entry, nnt_cost_args, since ABI 3.4) ----
 * The planner's byte model from config.json alone: what each weight takes as the checkpoint
 * stores it, and what a session's caches take. Every count below is in elements and every
 * result in bytes (uint64_t); the arithmetic is int64_t, exact for the sizes config.json can
 * hold (the core's cfg_int bounds each count by 2^31 - 1). A family's `costs` reads its own
 * dimensions (its read_config, say), then adds up its tensors with these. */

/* How a checkpoint stores its weights, read from config.json by fam_cost_encoding. */
typedef struct fam_encoding {
    int fp8;            /* quantization_config.quant_method "fp8": matrices stored F8_E4M3 (a byte a
                         * weight) with one scale per block_rows x block_cols block */
    int64_t block_rows; /* quantization_config.weight_block_size[0] (default 128) */
    int64_t block_cols; /* quantization_config.weight_block_size[1] (default 128) */
    int scale_bytes;    /* a block scale: 4 (float32), 1 (quantization_config.scale_fmt "ue8m0") */
    int fp4_experts;    /* expert_dtype "fp4": routed experts' matrices FP4 e2m1 (half a byte a
                         * weight) with one E8M0 byte per 32 inputs, whatever quant_method says */
    int elem_bytes;     /* an element stored unquantised (norms, embedding, o_proj where the
                         * release keeps it so): 2 (bfloat16), 4 when config.json's dtype (or
                         * torch_dtype) is "float32" */
} fam_encoding;

/* Reads args->ckpt's config.json into *out: dtype / torch_dtype, quantization_config
 * (quant_method, weight_block_size, scale_fmt) and expert_dtype; absent keys give BF16 without
 * quantization. Errors (naming config.json and the key): those of cfg_string and cfg_int_list
 * (a key of the wrong JSON type), NNT_ERR_UNSUPPORTED (a quant_method other than "fp8"),
 * NNT_ERR_CONFIG (weight_block_size not two positive numbers). */
nnt_status fam_cost_encoding(const nnt_cost_args *args, fam_encoding *out, nnt_error *err);
/* Bytes of a matrix [rows, cols] stored as the checkpoint stores its linear weights: rows x
 * cols bytes plus ceil(rows / block_rows) x ceil(cols / block_cols) scales when FP8, else
 * rows x cols x elem_bytes. Source: DeepSeek-V3's FP8 block layout (weight_scale_inv per
 * 128 x 128 block). */
uint64_t fam_cost_matrix(const fam_encoding *e, int64_t rows, int64_t cols);
/* A routed expert's matrix [rows, cols]: rows x cols / 2 bytes plus rows x ceil(cols / 32)
 * E8M0 scale bytes when fp4_experts (OCP Microscaling: groups of 32), else fam_cost_matrix. */
uint64_t fam_cost_expert_matrix(const fam_encoding *e, int64_t rows, int64_t cols);
/* n elements stored unquantised: n x elem_bytes (a norm's gain, the embedding). */
uint64_t fam_cost_vector(const fam_encoding *e, int64_t n);
/* n float32 elements: 4 n (routers, biases and sinks that releases keep in float32). */
uint64_t fam_cost_f32(int64_t n);
/* The n routed experts of one block, each gate and up [I, H] and down [H, I]
 * (fam_cost_expert_matrix). */
uint64_t fam_cost_experts(const fam_encoding *e, int64_t n, int64_t I, int64_t H);
/* A gated MLP of width I (a dense MLP, a shared expert): gate and up [I, H], down [H, I], stored
 * as linear weights (fam_cost_matrix). */
uint64_t fam_cost_mlp(const fam_encoding *e, int64_t I, int64_t H);
/* Grouped-query attention's projections as linear weights: q_proj [Hq * Dqk, H], k_proj
 * [Hkv * Dqk, H], v_proj [Hkv * Dv, H], o_proj [H, Hq * Dv] (no norms, no sinks). */
uint64_t fam_cost_attention(const fam_encoding *e, int64_t H, int64_t Hq, int64_t Hkv, int64_t Dqk, int64_t Dv);
/* What the kit's key/value cache of one block holds for `batch` rows: float32 keys and values of
 * `heads` heads, widths dk and dv, for `keep` tokens (the session's capacity, or window - 1 for
 * a sliding block): 4 x batch x heads x (dk + dv) x keep bytes (fam_kv_cache_init). */
uint64_t fam_cost_kv_cache(int64_t batch, int64_t heads, int64_t dk, int64_t dv, int64_t keep);
/* Sets args->first_bytes to the embedding [V, H] and args->last_bytes to the final norm [H] plus
 * lm_head [V, H] (none when `tied`: the embedding serves), all stored unquantised
 * (fam_cost_vector); a family with more readout adds it to last_bytes after the call. */
void fam_cost_readout(nnt_cost_args *args, const fam_encoding *e, int64_t V, int64_t H, int tied);
/* NNT_OK when the family's own count of blocks (`layers`, from its reading of config.json)
 * equals args->n_blocks, whose arrays it fills; else NNT_ERR_CONFIG naming config.json and both
 * counts. */
nnt_status fam_cost_blocks(const nnt_cost_args *args, int64_t layers, nnt_error *err);

/* ======================================================================================== */
/* ---- the architecture table: a family described once (families/common/fam_arch.c) ----
 * A family declares its architecture in one static table, as llama.cpp's llama-arch.cpp lists
 * each architecture's tensors (LLM_TENSOR_INFOS) and llm.c declares its activations in one
 * struct: the module tree print(model) shows and, under each module, the checkpoint tensors it
 * holds. Every consumer reads that one declaration:
 *   fam_arch_bind        binds a block's tensors in `load`;
 *   fam_arch_tree        builds the module tree in `build_tree` (`nnt print`);
 *   fam_arch_costs       adds up each block's and the readout's weight bytes in `costs`;
 *   fam_arch_value_info  answers, in `value_info`, for the values of a module a block lacks.
 * What differs from block to block and from checkpoint to checkpoint is not in the table: the
 * family's `describe` callback gives each block's sizes (the table names them by index into
 * that vector) and its traits, bits the family defines (a dense or a mixture MLP, full,
 * sliding or linear attention, a model-wide choice such as tied embeddings), by which rows say
 * which blocks have them. The table is the family's, static and read-only; the kit keeps
 * nothing of it between calls. */

#define FAM_SPELLINGS 4      /* spellings one tensor may have in the checkpoints */
#define FAM_MODULE_TENSORS 4 /* tensors one module row holds */
#define FAM_MAX_SIZES 32     /* entries of a block's size vector */
#define FAM_MAX_DEPTH 16     /* depth of the module tree, the root at 0 */

/* How a checkpoint stores a tensor: the bytes fam_arch_costs counts for it in the encoding
 * config.json gives (fam_encoding), and nothing else (fam_weight reads any float dtype). */
typedef enum fam_store {
    FAM_STORE_LINEAR = 0, /* a linear weight [.., rows, cols], quantised as quantization_config says:
                           * fam_cost_matrix(rows, cols) for each matrix of the leading axes;
                           * fam_arch_bind binds it with fam_weight_product (re-encoded as FP8
                           * under weights = fp8; the costs stay the stored encoding's) */
    FAM_STORE_PLAIN,      /* unquantised (norm gains, the embedding, what a release keeps in
                           * bfloat16): fam_cost_vector of its element count */
    FAM_STORE_F32,        /* float32 whatever the encoding (routers, biases, sinks a release keeps
                           * so): fam_cost_f32 of its element count */
    FAM_STORE_I64,        /* 64-bit integers (a hash-routing table): 8 bytes an element */
    FAM_STORE_EXPERTS     /* routed experts, shape [E, I, H]: fam_cost_experts(E, I, H), FP4
                           * when config.json's expert_dtype says so */
} fam_store;

/* What fam_arch_bind does with a tensor; `field` and `host` are byte offsets into the struct
 * fam_arch_bind is given (offsetof(the family's block struct, member)). */
typedef enum fam_bind_kind {
    FAM_BIND_WEIGHT = 0, /* fam_weight into the nnt_tensor at `field`, its shape checked */
    FAM_BIND_VECTOR,     /* as fam_bind_vector: the values as host F32 at the float * at `host`,
                          * prepared on the backend in the table's shape into the nnt_tensor at
                          * `field`; the checkpoint's tensor may have any shape holding as many
                          * elements (hyper-connection and position-bias matrices included) */
    FAM_BIND_HOST,       /* fam_vector_f32: host F32 at the float * at `field` (sinks); any shape
                          * holding the element count */
    FAM_BIND_EXPERTS,    /* fam_bind_experts: E fam_expert the kit allocates (owned by the env, freed
                          * by fam_env_release), their address stored in the fam_expert * at `field` */
    FAM_BIND_NONE        /* not bound by fam_arch_bind: the family binds it (a layout the kit does
                          * not read, e.g. per-head FP8 scales), or fam_bind_readout_stage does; it
                          * still counts in the costs and gives the printout's detail */
} fam_bind_kind;

/* The text inside a leaf module's parentheses in the printout. */
typedef enum fam_detail {
    FAM_DETAIL_NONE = 0,  /* none: "Class()" */
    FAM_DETAIL_LINEAR,    /* "in_features=IN, out_features=OUT, bias=False" from the module's first
                           * tensor [.., OUT-rows.., IN]: IN its last extent, OUT the product of
                           * the others (a fused [chunks, rows, IN] projection prints chunks * rows) */
    FAM_DETAIL_NORM,      /* "(W,), eps=E": W the first extent of the module's first tensor, E the
                           * row's eps, or the block's (fam_block_facts.eps) when that is 0 */
    FAM_DETAIL_EMBEDDING, /* "V, H" from the module's first tensor [V, H] */
    FAM_DETAIL_TEXT       /* the row's `text`, a printf pattern of up to NNT_MAX_DIMS %lld
                           * conversions fed sizes[dims[0]], sizes[dims[1]], ... in order */
} fam_detail;

/* The spellings of a block's routed experts, for a FAM_STORE_EXPERTS tensor: transformers'
 * fused 3-D tensors, tried first, then per-expert names (fam_bind_experts). */
typedef struct fam_expert_layout {
    const char *fused_gate_up, *fused_down;      /* patterns taking the block ([E, 2I, H], [E, H, I]),
                                                  * or NULL for per-expert names only */
    fam_expert_names per_expert[FAM_SPELLINGS]; /* patterns taking (block, expert); entries after the
                                                  * last are left zero */
} fam_expert_layout;

/* The spellings MiniMax-M2's and Kimi-Linear's checkpoints share: transformers' fused
 * model.layers.L.mlp.experts.{gate_up_proj, down_proj}, then the release's per-expert
 * model.layers.L.block_sparse_moe.experts.E.{w1, w3, w2}.weight (gate, up, down; Mixtral's names),
 * then transformers' per-expert model.layers.L.mlp.experts.E.{gate,up,down}_proj.weight. */
extern const fam_expert_layout fam_experts_block_sparse_moe;

/* One checkpoint tensor of a module. A tensor row is in use when name[0] or experts is set; the
 * first unused row ends the module's list. */
typedef struct fam_tensor {
    const char *name[FAM_SPELLINGS]; /* printf patterns taking the block index (one %d; none
                                      * outside the blocks), most preferred first: the first the
                                      * checkpoint holds is bound; NULL after the last */
    fam_store store;
    fam_bind_kind bind;
    size_t field;            /* offset of the member it binds to (see fam_bind_kind) */
    size_t host;             /* FAM_BIND_VECTOR: offset of the float * for the host copy */
    int ndim;                /* 1..NNT_MAX_DIMS */
    int size[NNT_MAX_DIMS];  /* extent i is the block's sizes[size[i]] */
    uint32_t when, unless;   /* the tensor exists on blocks having every trait of `when` and none of
                              * `unless` (and only where its module exists); 0, 0: everywhere */
    int optional;            /* 1: a checkpoint may lack it (bound only when present); the costs
                              * count it as present */
    int first_stage;         /* outside the blocks: held by the stage of block 0 (the embedding)
                              * rather than the last stage (final norm, lm_head, other readout) */
    const fam_expert_layout *experts; /* FAM_STORE_EXPERTS: the spellings (name[] unused) */
} fam_tensor;

/* One module of the tree, in print(model)'s order, depth-first: a row's parent is the nearest
 * row above it one level less deep. */
typedef struct fam_module {
    int depth;              /* 0 for the root (the first row, and only it); a child is one deeper */
    const char *native;     /* the attribute name in the checkpoint's module tree; the standard name
                             * comes from the arch's renames (the RENAME rules the descriptor gives
                             * the core), so the printout and the paths agree */
    const char *cls;        /* the class print(model) shows; NULL only at the root, whose class is
                             * then the describe callback's root_class */
    int module;             /* the nnt_module whose values print inside this module:
                             * NNT_MODULE_SELF_ATTN, _LINEAR_ATTN or _MLP; 0 for none (the root
                             * always hosts the model's values, the block row the block's) */
    int block;              /* 1 for the decoder block (exactly one row): it and the rows under it
                             * are repeated for every block, under the blocks' ModuleList */
    uint32_t when, unless;  /* the module exists on blocks having every trait of `when` and none of
                             * `unless`; rows outside the blocks read the model's traits. 0 on the
                             * block row */
    const char *absent;     /* why this module's values are not served on a block lacking it (its
                             * `module` set), in words `nnt support` shows; NULL: value_info says */
    fam_detail detail;
    const char *text;       /* FAM_DETAIL_TEXT's pattern */
    int dims[NNT_MAX_DIMS]; /* FAM_DETAIL_TEXT's size indices */
    double eps;             /* FAM_DETAIL_NORM: an epsilon of the module's own; 0 for the block's */
    fam_tensor tensors[FAM_MODULE_TENSORS];
    /* A class that depends on the block (e.g. a compressor whose class follows the attention kind,
     * a router whose class says whether it hashes): on a block having every trait of alt_when the
     * printout shows alt_cls instead of cls, and the renames are matched against it. NULL: cls on
     * every block; alt_when must then be 0, and it must not be 0 when alt_cls is set. */
    const char *alt_cls;
    uint32_t alt_when;
    /* Native values (ABI 3.14, fam_natives.c): the standard value this module's input and its
     * output are, when they are one, as FAM_ALIAS(NNT_VALUE_...), so that the native path names
     * it; 0: none. A linear or norm row under the block row without an alias has a value of its
     * own, which fam_linear / fam_norm emit when the family runs the product through them. */
    int alias_in, alias_out;
    /* 1 when this module is the only reader of its alias_in value, so that an edit of that value
     * is an edit of this module's input alone; 0 (the default): the path of the input reads the
     * value and refuses edits (its other readers would see them) */
    int alias_in_edit;
    /* The same for a tensor that is another module's value of its own: same_in names the module
     * (its path under the block row, or under the root, in the checkpoint's spelling) whose output
     * this module's input is (DeepSeek-V4's mlp reads post_attention_layernorm's output), same_out
     * the module whose input this module's output is (Kimi's o_norm returns o_proj's input). NULL:
     * none. alias_in_edit applies to same_in as to alias_in. */
    const char *same_in, *same_out;
    /* A linear or norm row whose product does not go through fam_linear / fam_norm (fused into
     * another kernel, or run on other rows than the call's tokens): why, in words; its own
     * values are then not served, and `nnt support` says why. NULL: served. */
    const char *no_native;
} fam_module;
/* A standard value as fam_module.alias_in / alias_out hold it (0 means none). */
#define FAM_ALIAS(id) ((int)(id) + 1)

/* What the family's describe callback says of one block (or, for layer -1, of the model outside
 * the blocks). The kit zeroes it before the call. */
typedef struct fam_block_facts {
    uint32_t traits;            /* the family's trait bits of this block (model-wide ones included) */
    double eps;                 /* the norms' epsilon the printout shows */
    const char *root_class;     /* layer -1: the root's class when the root row gives none (static,
                                 * or owned by the model) */
    int64_t size[FAM_MAX_SIZES]; /* the sizes the rows index (elements) */
} fam_block_facts;

/* A family's architecture: its module rows, how many sizes they index, the RENAME rules, the
 * modules no block has, and the callback describing each block. Static and const. */
typedef struct fam_arch {
    const fam_module *modules;
    int n_modules;
    int n_sizes;                            /* rows index sizes[0..n_sizes), n_sizes <= FAM_MAX_SIZES */
    const nnt_rename_rule *renames;         /* ended by a NULL native; NULL: none */
    const char *off_page[NNT_MODULE_COUNT]; /* for a module no block of the architecture has (e.g.
                                             * [NNT_MODULE_LINEAR_ATTN] in a softmax-only model):
                                             * why, its values then left off the page */
    /* Fills *out for block `layer` (0..L-1), or for the model outside the blocks (-1). `self` is
     * what the kit's caller passed: the loaded model, or what `costs` read from config.json.
     * Must not fail (the family checked its config before). */
    void (*describe)(const void *self, int layer, fam_block_facts *out);
} fam_arch;

/* The module a standard value belongs to (the order of nnt_value_id's groups), or
 * NNT_MODULE_COUNT for an id outside the enum. */
nnt_module fam_value_module(nnt_value_id id);
/* NNT_OK when the table is well formed: the root first and alone at depth 0, depths growing by
 * at most one, one block row below the root with no traits, classes and native names set, size
 * indices below n_sizes, tensors of 1..NNT_MAX_DIMS axes (a linear weight 2 or more, experts
 * 3), details whose first tensor they read, an alternative class with its traits (alt_cls and
 * alt_when set together). Else NNT_ERR_INTERNAL naming the row and the fault.
 * fam_arch_bind, fam_arch_tree and fam_arch_costs check it first. */
nnt_status fam_arch_check(const nnt_core_api *core, const fam_arch *a, nnt_error *err);
/* Binds into `block` the tensors of block `layer` that its traits give it (every tensor of the
 * block row and the rows under it whose bind is not FAM_BIND_NONE), in table order; `layer` -1
 * binds the tensors outside the blocks into `block` (then the family's struct for them). The
 * names take `layer`; each tensor's shape comes from describe's sizes. `self` is passed to
 * describe. Every weight and host vector is registered with env.
 * Errors: fam_arch_check's; NNT_ERR_NOT_FOUND for a required tensor none of whose spellings the
 * checkpoint holds (a tensor with one spelling: the core's message naming it; several: a message
 * naming the block, the module and every spelling); then those of fam_weight, fam_bind_vector,
 * fam_vector_f32 and fam_bind_experts; NNT_ERR_INTERNAL for a name over 255 bytes;
 * NNT_ERR_OUT_OF_MEMORY. On an error the tensors bound so far stay registered with env. */
nnt_status fam_arch_bind(const fam_env *env, const fam_arch *a, const void *self, const nnt_checkpoint *ck,
                         int layer, void *block, nnt_error *err);
/* Builds the module tree of a model of `layers` blocks through core->tree_node, for the family's
 * `build_tree`: every row that exists (outside the blocks by describe(-1)'s traits, in block L by
 * describe(L)'s), the block row and its rows once per block with layer L, the class (alt_cls on
 * a block having alt_when), the standard name from the renames for that class, the detail as
 * the row says. Errors: fam_arch_check's; NNT_ERR_INTERNAL when the
 * root has no class; NNT_ERR_OUT_OF_MEMORY when tree_node fails. */
nnt_status fam_arch_tree(const nnt_core_api *core, const fam_arch *a, const void *self, int layers, nnt_tree *tree,
                         nnt_error *err);
/* Fills args->weight_bytes[b] for every block b < args->n_blocks with the sum of the stored bytes
 * (fam_store, in encoding *e) of the tensors block b has, and args->first_bytes and
 * args->last_bytes with those of the tensors outside the blocks (first_stage ones to the first);
 * an optional tensor counts as present. cache_bytes are left to the family. Errors:
 * fam_arch_check's (with args->core). */
nnt_status fam_arch_costs(nnt_cost_args *args, const fam_arch *a, const void *self, const fam_encoding *e,
                          nnt_error *err);
/* For the family's `value_info`: answers (returns 1, *out filled) when value `id`'s module is one
 * no block has (a->off_page: off the page with that reason), or one block `layer` lacks while
 * the table has a row for it with an `absent` reason (not served, that reason). Returns 0 and
 * leaves *out alone otherwise: the module exists on the block (the family gives the shape or its
 * own reason), `id` is a model or block value, or the table says nothing. */
int fam_arch_value_info(const fam_arch *a, const void *self, int layer, nnt_value_id id, nnt_value_info *out);

/* ---- native module values (ABI 3.14; fam_natives.c) ----
 * Every module row of a family's table may name the standard values its input and output are
 * (alias_in / alias_out), and every linear or norm row under the block row serves its input and
 * output as values of their own: "layers.N.self_attn.q_proj.input", as nnsight reads a module's
 * inputs and outputs with forward hooks. The list, in table order (per row: input, then output),
 * is the descriptor's `native`; entry i has the id NNT_VALUE_NATIVE + i. The family gets the
 * values by running its products through fam_linear and fam_norm instead of the backend's ops:
 * they find the row of the weight they are given (its place in the block struct, as the table's
 * `field` says) and, when a request of the run names one of its values, emit the input (a copy,
 * so that an edit reaches this product alone) and the output (before anything reads it), each
 * [batch, seq, features] F32, writable. */

/* Says that env's model serves native values from table a: `self` the family's model (for the
 * describe callback), `layers` its array of block structs, `stride` one block struct's size.
 * Computes the list's paths (owned by env, freed at fam_env_release). Errors:
 * NNT_ERR_OUT_OF_MEMORY, NNT_ERR_INTERNAL (more entries than NNT_NATIVE_MAX). */
nnt_status fam_env_natives(fam_env *env, const fam_arch *a, const void *self, const void *layers, size_t stride,
                           nnt_error *err);
/* The descriptor's `native`, for env's model: entry i, or NNT_ERR_NOT_FOUND past the last. */
nnt_status fam_natives_entry(const fam_env *env, int i, nnt_native_info *out);
/* For the family's `value_info`: answers (returns 1) for a native id (>= NNT_VALUE_NATIVE):
 * served on block `layer` as F32 [batch, seq, features] (writable) when the block has the row,
 * else not served with the reason; returns 0 for a standard id. */
int fam_natives_value_info(const fam_env *env, int layer, nnt_value_id id, const nnt_call_dims *d,
                           nnt_value_info *out);
/* y [M, N] = x [M, K] w^T through the backend's `linear` (its formula and errors), with the
 * native values of w's row (found by w's address inside block `layer`'s struct) emitted when
 * asked: M must then be dims->batch * dims->seq. x may be replaced for this product by an edited
 * copy (arena memory of run). Errors: the backend's, the core's emit's, NNT_ERR_OUT_OF_MEMORY. */
nnt_status fam_linear(const fam_env *env, nnt_run *run, int layer, const nnt_call_dims *dims, const nnt_tensor *x,
                      const nnt_tensor *w, nnt_tensor *y, nnt_error *err);
/* For fam_moe_forward: the ids of the routed experts' values by routing slot of block `layer`
 * whose fam_moe is moe (bound by the table): ids[0] gate_proj.output, [1] up_proj.output, [2]
 * down_proj.input, [3] down_proj.output, each [batch seq top_k features] (-1 where the family
 * serves none); returns 1 when the run asks for any of them. */
int fam_natives_experts(const fam_env *env, nnt_run *run, int layer, const fam_moe *moe, int ids[4]);
/* The same for the backend's rms_norm: y [M, W] = x / rms(x) * gain over the last axis (y may be
 * x), the gain's row found as fam_linear finds a weight's. */
nnt_status fam_norm(const fam_env *env, nnt_run *run, int layer, const nnt_call_dims *dims, const nnt_tensor *x,
                    const nnt_tensor *gain, float eps, nnt_tensor *y, nnt_error *err);

#ifdef __cplusplus
}
#endif

#endif /* NNT_FAMILY_KIT_H */
