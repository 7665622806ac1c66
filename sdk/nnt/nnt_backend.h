/* nnt_backend.h - the kernel-backend ABI: the table of tensor operations a backend provides.
 *
 * A backend is a shared object exporting `const nnt_backend_descriptor nnt_backend_plugin`.
 * The core creates one backend context per runtime from the INI file's [backend.NAME] options,
 * allocates the per-forward arena through it, and hands the context and the op table to the
 * family plugin's forward. Every op returns a status and fills `err` on failure; none aborts.
 *
 * Conventions for every op below:
 *   - tensors are dense row-major; shapes are given as [axis names]; M counts rows;
 *   - activations are F32. Weights of `linear` and tables of `embedding` may be F32, BF16,
 *     F16, or encoded with block scales (F8_E4M3, F4_E2M1; nnt_tensor.scale): the backend
 *     decodes as it reads and never keeps a widened copy. Other weight arguments (norm gains,
 *     convolution kernels) are F32, BF16 or F16;
 *   - integer index tensors are I32;
 *   - unless an op says otherwise, an output may not alias an input;
 *   - tensors handed to an op live in the backend's memory (device != 0 for a device backend,
 *     host memory for the cpu backend, which sets `host_memory`).
 *   - an output tensor flagged NNT_TENSOR_BF16_VALUES receives results rounded to bfloat16 (R
 *     below: nearest, ties to even), with the intermediate roundings torch takes when it runs
 *     the operation on bfloat16 tensors: linear R(R(x) . w); rms_norm R(w * R(x / rms)), or
 *     R(w x / rms) with NNT_TENSOR_BF16_ONCE, and without a gain R(x * R(1 / rms)); add
 *     R(a + b); scale R(f x); swiglu act = R(silu(g)), out = R(act * u); rope with R(cos) and
 *     R(sin), each product and the sum rounded, or one rounding of the float32 rotation with
 *     NNT_TENSOR_BF16_ONCE; attn_scores R(R(q . k) * scale); softmax R(result), with
 *     NNT_TENSOR_BF16_SHIFTED the exponent of R(s - max) instead; attn_mix R(result);
 *     scatter_add_rows y = R(y + R(s * src)); scale_rows R(x * w); conv1d_causal R(silu(R(conv))); route, when its
 *     weights are flagged, scores through the score function in bfloat16 (each step rounded),
 *     chooses on score + bias in float32 and gives R(R(s / R(sum)) * scaling) - unflagged it
 *     works in float32 throughout, as transformers does for most routers; hyper_mix
 *     R(R(R(post) a) + R(sum_j R(comb) x_j)); compress R(sum R(kv R(p))) with the slot weights p
 *     from a float32 softmax; kda_gate and indexer_scores never round (float32 in
 *     transformers), nor do the ops that only move values (gather_rows, copy, copy_cols,
 *     swap12, fill, zero_rows) or write recurrent states (delta_rule's states, conv1d_causal's
 *     state, hyper_connection's post and comb); the other ops round what they write.
 *
 * Growth (since ABI 3.0). The op table and the argument structs a family hands to a backend
 * (nnt_attn_mask, nnt_route_params) start with `struct_size`, set by whoever fills them to the
 * sizeof it was compiled with; they only grow at their end, and a reader takes every field past
 * struct_size as absent (NULL, 0). The table's memory ops and weight_bytes are required: a
 * backend that leaves one NULL is refused at load, the error naming the op. Every other op is
 * optional: a family lists the ops it calls (nnt_family_descriptor.ops_needed, bits NNT_OP_BIT
 * of nnt_op below) and a family mapped to a backend that lacks one is refused, the error
 * naming the family, the backend and each missing op. A layout change bumps NNT_ABI_MAJOR. */
#ifndef NNT_BACKEND_H
#define NNT_BACKEND_H

#include "nnt_plugin.h"

#ifdef __cplusplus
extern "C" {
#endif

/* How rotary pairs dimensions inside the rotated slice. */
typedef enum nnt_rope_style {
    NNT_ROPE_NEOX = 0,       /* dim i pairs with dim i + R/2 (rotate_half) */
    NNT_ROPE_INTERLEAVED = 1 /* dim 2i pairs with dim 2i + 1 */
} nnt_rope_style;

/* Which keys a query may see. Positions are absolute token positions (0 at a row's first real
 * token). A key is visible to a query when all of these hold:
 *   key_valid is NULL or key_valid[b, s] != 0            (padding keys are never visible);
 *   causal == 0 or k_pos[b, s] <= q_pos[b, t];
 *   window == 0 or q_pos[b, t] - k_pos[b, s] < window    (the window counts the query itself),
 *     unless key_no_window != NULL and key_no_window[s] != 0;
 *   query_valid is NULL or query_valid[b, t] != 0        (a padding query sees nothing);
 *   allow is NULL or allow[b, t, s] != 0                  (a per-query selection, e.g. the keys a
 *                                                          sparse-attention indexer kept).
 * Invisible entries are written as -INFINITY. */
typedef struct nnt_attn_mask {
    uint32_t struct_size;         /* sizeof(nnt_attn_mask) as the family saw it */
    const int32_t *q_pos;         /* [batch, query] host memory */
    const int32_t *k_pos;         /* [batch, key] host memory */
    const uint8_t *key_valid;     /* [batch, key] host memory, or NULL */
    const uint8_t *query_valid;   /* [batch, query] host memory, or NULL */
    const uint8_t *key_no_window; /* [key] host memory, or NULL */
    const uint8_t *allow;         /* [batch, query, key] host memory, or NULL */
    int causal;
    int window;
    /* ABI 3.15: the keys, S, when k's and v's key axis is longer (a key/value cache handed over
     * in place, its capacity C on that axis): only entries [0, S) of that axis are read, and the
     * scores, probabilities, key arrays and allow have S keys. 0 (or absent): the key axis is
     * S. Only a backend whose op table sets NNT_FEATURE_KEY_COUNT in `features` reads it; a
     * family hands a longer key axis to no other. */
    int64_t key_count;
} nnt_attn_mask;

/* The number of keys of an attention call: mask's key_count when set, else k_axis (the length
 * of the key tensor's key axis). */
static inline int64_t nnt_attn_keys(const nnt_attn_mask *mask, int64_t k_axis)
{
    return mask && mask->struct_size >= offsetof(nnt_attn_mask, key_count) + sizeof mask->key_count &&
                   mask->key_count > 0
               ? mask->key_count
               : k_axis;
}

/* Scoring functions a router may use. */
typedef enum nnt_score_fn {
    NNT_SCORE_SIGMOID = 0,      /* sigmoid(logit) */
    NNT_SCORE_SOFTMAX = 1,      /* softmax over experts */
    NNT_SCORE_SQRT_SOFTPLUS = 2 /* sqrt(softplus(logit)) */
} nnt_score_fn;

/* Router parameters. Choice uses score + bias; weights use the score alone. Source: the
 * DeepSeek-V3 "noaux_tc" router as transformers implements it (DeepseekV3TopkRouter and
 * DeepseekV3MoE in src/transformers/models/deepseek_v3/modeling_deepseek_v3.py). */
typedef struct nnt_route_params {
    uint32_t struct_size; /* sizeof(nnt_route_params) as the family saw it */
    nnt_score_fn score_fn;
    int top_k;
    int n_group;          /* expert groups; 1 or 0 means no grouping */
    int topk_group;       /* groups kept when n_group > 1 */
    int renormalize;      /* divide the chosen scores by their sum */
    float renorm_eps;     /* added to the sum when renormalizing (0 or 1e-20) */
    float scaling_factor; /* multiplies the weights after renormalizing (1.0 for none) */
    int indices_given;    /* 1: idx is an input (hash routing); only weights are computed */
} nnt_route_params;

/* The operations of nnt_backend_ops, for nnt_family_descriptor.ops_needed and for messages (the
 * core names each op by its field name): in table order up to NNT_OP_INDEXER_SCORES; the forward
 * ops appended after the backward entries (NNT_OP_SCALE_ROWS, ABI 3.6) follow in the order they
 * were appended. NNT_OP_ALLOC .. NNT_OP_WEIGHT_BYTES are required; the rest are optional. New
 * ops are appended before NNT_OP_COUNT; backward entries are not nnt_op values. */
typedef enum nnt_op {
    NNT_OP_ALLOC = 0,
    NNT_OP_FREE,
    NNT_OP_UPLOAD,
    NNT_OP_DOWNLOAD,
    NNT_OP_PREPARE_WEIGHT,
    NNT_OP_RELEASE_WEIGHT,
    NNT_OP_WEIGHT_BYTES,
    NNT_OP_LINEAR, /* the first optional op */
    NNT_OP_RMS_NORM,
    NNT_OP_EMBEDDING,
    NNT_OP_ADD,
    NNT_OP_SWAP12,
    NNT_OP_COPY,
    NNT_OP_FILL,
    NNT_OP_SCALE,
    NNT_OP_ROPE,
    NNT_OP_ATTN_SCORES,
    NNT_OP_SOFTMAX,
    NNT_OP_ATTN_MIX,
    NNT_OP_SWIGLU,
    NNT_OP_ROUTE,
    NNT_OP_GATHER_ROWS,
    NNT_OP_SCATTER_ADD_ROWS,
    NNT_OP_SCATTER_ROWS,
    NNT_OP_SUM_AXIS1,
    NNT_OP_CONV1D_CAUSAL,
    NNT_OP_KDA_GATE,
    NNT_OP_SIGMOID,
    NNT_OP_DELTA_RULE,
    NNT_OP_RMS_NORM_GATED,
    NNT_OP_COPY_COLS,
    NNT_OP_ZERO_ROWS,
    NNT_OP_HYPER_CONNECTION,
    NNT_OP_HYPER_MIX,
    NNT_OP_HYPER_HEAD,
    NNT_OP_COMPRESS,
    NNT_OP_INDEXER_SCORES,
    NNT_OP_SCALE_ROWS, /* ABI 3.6 */
    NNT_OP_ATTN_FUSED, /* ABI 3.11 */
    NNT_OP_COUNT
} nnt_op;

/* The bit of op `op` in an op set (nnt_family_descriptor.ops_needed). */
#define NNT_OP_BIT(op) ((uint64_t)1 << (op))
/* Op sets: the required ops; what a softmax-attention decoder with dense or mixture-of-experts
 * blocks calls (the family kit's decoder, attention and MoE helpers; the MoE helper also calls
 * scale_rows when the backend has it and does without it otherwise, so the set leaves it out);
 * the recurrent mixer ops of Kimi Delta Attention; the hyper-connection and compressed-attention
 * ops of DeepSeek-V4. */
#define NNT_OPS_REQUIRED (NNT_OP_BIT(NNT_OP_LINEAR) - 1)
#define NNT_OPS_DECODER                                                                                         \
    (NNT_OPS_REQUIRED | NNT_OP_BIT(NNT_OP_LINEAR) | NNT_OP_BIT(NNT_OP_RMS_NORM) | NNT_OP_BIT(NNT_OP_EMBEDDING) | \
     NNT_OP_BIT(NNT_OP_ADD) | NNT_OP_BIT(NNT_OP_SWAP12) | NNT_OP_BIT(NNT_OP_COPY) | NNT_OP_BIT(NNT_OP_FILL) |      \
     NNT_OP_BIT(NNT_OP_SCALE) | NNT_OP_BIT(NNT_OP_ROPE) | NNT_OP_BIT(NNT_OP_ATTN_SCORES) |                       \
     NNT_OP_BIT(NNT_OP_SOFTMAX) | NNT_OP_BIT(NNT_OP_ATTN_MIX) | NNT_OP_BIT(NNT_OP_SWIGLU) |                      \
     NNT_OP_BIT(NNT_OP_ROUTE) | NNT_OP_BIT(NNT_OP_GATHER_ROWS) | NNT_OP_BIT(NNT_OP_SCATTER_ADD_ROWS) |           \
     NNT_OP_BIT(NNT_OP_SCATTER_ROWS) | NNT_OP_BIT(NNT_OP_SUM_AXIS1) | NNT_OP_BIT(NNT_OP_COPY_COLS))
#define NNT_OPS_RECURRENT                                                                                       \
    (NNT_OP_BIT(NNT_OP_CONV1D_CAUSAL) | NNT_OP_BIT(NNT_OP_KDA_GATE) | NNT_OP_BIT(NNT_OP_SIGMOID) |              \
     NNT_OP_BIT(NNT_OP_DELTA_RULE) | NNT_OP_BIT(NNT_OP_RMS_NORM_GATED) | NNT_OP_BIT(NNT_OP_ZERO_ROWS))
#define NNT_OPS_HYPER                                                                                           \
    (NNT_OP_BIT(NNT_OP_HYPER_CONNECTION) | NNT_OP_BIT(NNT_OP_HYPER_MIX) | NNT_OP_BIT(NNT_OP_HYPER_HEAD) |        \
     NNT_OP_BIT(NNT_OP_COMPRESS) | NNT_OP_BIT(NNT_OP_INDEXER_SCORES))
/* Every op of ABI 3.0: what a family whose descriptor predates ops_needed is taken to need. */
#define NNT_OPS_ALL_3_0 (NNT_OP_BIT(NNT_OP_INDEXER_SCORES + 1) - 1)

/* The op table. Fill it with designated initialisers and .struct_size = sizeof(nnt_backend_ops);
 * the host copies the first struct_size bytes (at least up to `linear`, the required part) and
 * reads the rest as NULL. */
typedef struct nnt_backend_ops {
    uint32_t struct_size; /* sizeof(nnt_backend_ops) as the backend saw it */

    /* ---- memory (required) ---- */
    /* Allocates `bytes` of backend memory into *ptr (aligned to 64 bytes). */
    nnt_status (*alloc)(void *ctx, size_t bytes, void **ptr, nnt_error *err);
    void (*free)(void *ctx, void *ptr);
    /* Copies bytes between host memory and backend memory. */
    nnt_status (*upload)(void *ctx, void *dst, const void *src_host, size_t bytes, nnt_error *err);
    nnt_status (*download)(void *ctx, void *dst_host, const void *src, size_t bytes, nnt_error *err);
    /* Makes a host weight usable by this backend: out describes the backend copy in the
     * weight's own encoding, block scales and flags included (it may alias the host data when
     * the backend reads host memory). release_weight undoes it; a family releases every weight
     * it prepared when it unloads. */
    nnt_status (*prepare_weight)(void *ctx, const nnt_tensor *host, nnt_tensor *out, nnt_error *err);
    void (*release_weight)(void *ctx, nnt_tensor *w);
    /* Bytes of memory this context holds for the weights prepare_weight made and release_weight
     * has not yet released: device memory for a device backend; host memory a host backend
     * allocated for them (0 when its weights alias the checkpoint's mapping). */
    size_t (*weight_bytes)(void *ctx);

    /* ---- dense algebra (optional from here on) ---- */
    /* y[M, N] = x[M, K] . w[N, K]^T. x, y F32; w F32, BF16, F16, or F8_E4M3 / F4_E2M1 with
     * block scales, each element decoded and multiplied by its block's scale. With
     * NNT_TENSOR_BF16_PRODUCTS in w->flags (or NNT_TENSOR_BF16_VALUES on y), x and the decoded
     * weight values are rounded to bfloat16 (nearest even) before the product and y after it;
     * accumulation is float32 either way. */
    nnt_status (*linear)(void *ctx, const nnt_tensor *x, const nnt_tensor *w, nnt_tensor *y,
                         nnt_error *err);
    /* y[M, D] = w[D] * x / sqrt(mean(x^2) + eps), row by row; w may be NULL (no gain).
     * y may alias x. Source: RMSNorm, Zhang & Sennrich 2019. */
    nnt_status (*rms_norm)(void *ctx, const nnt_tensor *x, const nnt_tensor *w, float eps,
                           nnt_tensor *y, nnt_error *err);
    /* y[M, H] = table[ids[m], :]; ids I32 [M]; table of any weight encoding (as for linear).
     * An id outside [0, V) is an error. */
    nnt_status (*embedding)(void *ctx, const nnt_tensor *table, const nnt_tensor *ids,
                            nnt_tensor *y, nnt_error *err);
    /* y = a + b elementwise, same shapes; y may alias a or b. */
    nnt_status (*add)(void *ctx, const nnt_tensor *a, const nnt_tensor *b, nnt_tensor *y,
                      nnt_error *err);
    /* y[A, C, B, D] = x[A, B, C, D]: swaps axes 1 and 2 of a rank-4 tensor (heads <-> seq). */
    nnt_status (*swap12)(void *ctx, const nnt_tensor *x, nnt_tensor *y, nnt_error *err);
    /* Copies src into dst (same dtype and element count). */
    nnt_status (*copy)(void *ctx, const nnt_tensor *src, nnt_tensor *dst, nnt_error *err);
    /* Sets every element of an F32 tensor to `value`. */
    nnt_status (*fill)(void *ctx, nnt_tensor *t, float value, nnt_error *err);
    /* y = factor * x elementwise (F32, same sizes); y may alias x. */
    nnt_status (*scale)(void *ctx, const nnt_tensor *x, float factor, nnt_tensor *y, nnt_error *err);

    /* ---- attention ---- */
    /* Rotary embedding in place on x[B, H, T, D] (F32): dims [rot_start, rot_start + rot_dim)
     * rotate by angle pos[b, t] * inv_freq[i] (inv_freq: host, rot_dim / 2 floats), cos and sin
     * multiplied by mscale. Source: RoFormer, Su et al. 2021. */
    nnt_status (*rope)(void *ctx, nnt_tensor *x, const int32_t *pos, const float *inv_freq,
                       int rot_start, int rot_dim, nnt_rope_style style, float mscale,
                       nnt_error *err);
    /* s[B, Hq, T, S] = scale * q[B, Hq, T, D] . k[B, Hkv, S, D]^T, query head h reading key head
     * h / (Hq / Hkv); invisible entries -INFINITY (see nnt_attn_mask). With
     * NNT_FEATURE_KEY_COUNT, k may be [B, Hkv, C, D] with C > S = mask->key_count. */
    nnt_status (*attn_scores)(void *ctx, const nnt_tensor *q, const nnt_tensor *k, float scale,
                              const nnt_attn_mask *mask, nnt_tensor *s, nnt_error *err);
    /* p[B, H, T, S] = softmax over S of s, with an optional sink logit per head (sinks: F32 [H]
     * host memory) that joins each row's softmax as one extra column and is then dropped, so a
     * row sums to less than one. A row with no finite entry (and no sink) becomes all zeros.
     * p may alias s. */
    nnt_status (*softmax)(void *ctx, const nnt_tensor *s, const float *sinks, nnt_tensor *p,
                          nnt_error *err);
    /* o[B, T, Hq, Dv] = p[B, Hq, T, S] . v[B, Hkv, S, Dv], query head h reading value head
     * h / (Hq / Hkv). With NNT_FEATURE_KEY_COUNT, v may be [B, Hkv, C, Dv] with C > S (its
     * first S rows per head read). */
    nnt_status (*attn_mix)(void *ctx, const nnt_tensor *p, const nnt_tensor *v, nnt_tensor *o,
                           nnt_error *err);

    /* ---- feed-forward and mixture of experts ---- */
    /* SwiGLU: act[M, I] = silu(min(gate, limit)) (act may be NULL), out[M, I] = act *
     * clamp(up, -limit, limit); limit 0 means no clamp. With gate NULL, act is an input (an
     * edited activation) and only out is computed. Source: Shazeer 2020, "GLU Variants". */
    nnt_status (*swiglu)(void *ctx, const nnt_tensor *gate, const nnt_tensor *up, float limit,
                         nnt_tensor *act, nnt_tensor *out, nnt_error *err);
    /* Router: from logits[M, E] (F32) choose idx[M, K] (I32) and weights w[M, K] (F32);
     * bias F32 [E] or NULL. With p->indices_given, idx is read, not written. */
    nnt_status (*route)(void *ctx, const nnt_tensor *logits, const nnt_tensor *bias,
                        const nnt_route_params *p, nnt_tensor *idx, nnt_tensor *w, nnt_error *err);
    /* dst[n, H] = src[rows[n], :]; rows: host memory, n entries. */
    nnt_status (*gather_rows)(void *ctx, const nnt_tensor *src, const int32_t *rows, int n,
                              nnt_tensor *dst, nnt_error *err);
    /* dst[rows[i], :] += scale[i] * src[i, :] for i < n; rows and scale: host memory, scale may
     * be NULL (1.0). Rows may repeat; the adds happen in order of i. */
    nnt_status (*scatter_add_rows)(void *ctx, const nnt_tensor *src, const int32_t *rows,
                                   const float *scale, int n, nnt_tensor *dst, nnt_error *err);
    /* dst[rows[i], :] = scale[i] * src[i, :] for i < n (no accumulation). */
    nnt_status (*scatter_rows)(void *ctx, const nnt_tensor *src, const int32_t *rows,
                               const float *scale, int n, nnt_tensor *dst, nnt_error *err);
    /* y[M, H] = sum over k of x[M, K, H]. */
    nnt_status (*sum_axis1)(void *ctx, const nnt_tensor *x, nnt_tensor *y, nnt_error *err);

    /* ---- recurrent mixers (Kimi Delta Attention) ---- */
    /* Causal depthwise convolution over time: x [B, T, C], w [C, W] (any float dtype), y [B, T, C]:
     * y[b, t, c] = act(sum_j w[c, j] * x[b, t - (W - 1) + j, c]), inputs before t = 0 taken from
     * state_in [B, W - 1, C] (oldest first) or zero when state_in is NULL; state_out [B, W - 1, C]
     * (may be NULL) receives the last W - 1 inputs. act: 0 none, 1 SiLU. */
    nnt_status (*conv1d_causal)(void *ctx, const nnt_tensor *x, const nnt_tensor *w, const nnt_tensor *state_in,
                                int act, nnt_tensor *y, nnt_tensor *state_out, nnt_error *err);
    /* KDA forget gate: g[M, H * K] = -exp(a_log[h]) * softplus(a + dt_bias), softplus(x) = x for
     * x > 20; a_log F32 [H], dt_bias F32 [H * K]. Source: Kimi Linear tech report (arXiv:2510.26692),
     * the channel-wise decay, as src/transformers/models/kimi_linear/modeling_kimi_linear.py
     * computes it. */
    nnt_status (*kda_gate)(void *ctx, const nnt_tensor *a, const nnt_tensor *dt_bias, const nnt_tensor *a_log,
                           nnt_tensor *g, nnt_error *err);
    /* y = 1 / (1 + exp(-x)) elementwise (F32, same sizes); y may alias x. */
    nnt_status (*sigmoid)(void *ctx, const nnt_tensor *x, nnt_tensor *y, nnt_error *err);
    /* The gated delta rule with per-key-channel decay, token by token, per (batch, head):
     *   q, k [B, T, H, K]; v [B, T, H, V]; g [B, T, H, K] (log decay); beta [B, T, H];
     *   with l2norm: q, k <- x / sqrt(sum x^2 + 1e-6); q <- q * scale;
     *   S <- diag(exp(g_t)) S;  u = S^T k_t;  S <- S + k_t (x) beta_t (v_t - u);  o_t = S^T q_t.
     * S [K, V] starts from state_in [B, H, K, V] (NULL: zeros); state_out [B, H, K, V] gets the
     * last S; states [B, T, H, K, V] (may be NULL) every token's S. state_out may be state_in
     * itself (a decoding step updates its carried state in place: read each (batch, head)'s
     * state before writing it); otherwise the two do not overlap. A token with
     * token_valid[b, t] == 0 (host memory, may be NULL) leaves S unchanged and outputs zeros.
     * Sources: Yang et al. 2024, Gated Delta Networks (arXiv:2412.06464); Kimi Linear
     * (arXiv:2510.26692); the token-by-token reference in flash-linear-attention's
     * fla/ops/kda/naive.py. */
    nnt_status (*delta_rule)(void *ctx, const nnt_tensor *q, const nnt_tensor *k, const nnt_tensor *v,
                             const nnt_tensor *g, const nnt_tensor *beta, const uint8_t *token_valid,
                             const nnt_tensor *state_in, int l2norm, float scale, nnt_tensor *o,
                             nnt_tensor *state_out, nnt_tensor *states, nnt_error *err);
    /* Gated RMSNorm: y[M, D] = w[D] * x / sqrt(mean(x^2) + eps) * sigmoid(gate[M, D]). */
    nnt_status (*rms_norm_gated)(void *ctx, const nnt_tensor *x, const nnt_tensor *w, const nnt_tensor *gate,
                                 float eps, nnt_tensor *y, nnt_error *err);
    /* dst[m, dst_col + j] = src[m, src_col + j] for j < ncols: copies a block of columns between
     * two F32 matrices with the same number of rows (splits, concatenations, cache appends). src
     * and dst may be the same tensor, the column ranges overlapping (a cache shifting left). */
    nnt_status (*copy_cols)(void *ctx, const nnt_tensor *src, int64_t src_col, nnt_tensor *dst, int64_t dst_col,
                            int64_t ncols, nnt_error *err);
    /* Zeroes the rows m of x [M, C] (F32, in place) where row_valid[m] == 0 (host memory). */
    nnt_status (*zero_rows)(void *ctx, nnt_tensor *x, const uint8_t *row_valid, nnt_error *err);

    /* ---- hyper-connections and compressed attention (DeepSeek-V4) ---- */
    /* Manifold-constrained hyper-connection weights for streams x [M, n, H]: with r the
     * unweighted RMS normaliser of each token's n*H values (eps rms_eps), m = fn . (x r)
     * (fn [(2+n) n, n H]), pre_j = sigmoid(m_j scale[0] + base_j) + hc_eps, post_j =
     * 2 sigmoid(m_{n+j} scale[1] + base_{n+j}), comb = Sinkhorn(softmax_rows(m_C scale[2] +
     * base_C) + hc_eps) with `iters` column/row passes (column first). Writes post [M, n], comb
     * [M, n, n] (row j, column k) and collapsed [M, H] = sum_j pre_j x_j. fn, base, scale F32.
     * Sources: Xie et al. 2026, mHC: Manifold-Constrained Hyper-Connections; as in
     * src/transformers/models/deepseek_v4/modeling_deepseek_v4.py. */
    nnt_status (*hyper_connection)(void *ctx, const nnt_tensor *x, const nnt_tensor *fn, const nnt_tensor *base,
                                   const nnt_tensor *scale, float rms_eps, float hc_eps, int iters, nnt_tensor *post,
                                   nnt_tensor *comb, nnt_tensor *collapsed, nnt_error *err);
    /* out[M, k, H] = post[M, k] a[M, H] + sum_j comb[M, j, k] x[M, j, H] (comb used transposed). */
    nnt_status (*hyper_mix)(void *ctx, const nnt_tensor *x, const nnt_tensor *a, const nnt_tensor *post,
                            const nnt_tensor *comb, nnt_tensor *out, nnt_error *err);
    /* The readout collapse: y[M, H] = sum_j (sigmoid(m_j scale[0] + base_j) + hc_eps) x_j with
     * m = fn . (x r), fn [n, n H]. */
    nnt_status (*hyper_head)(void *ctx, const nnt_tensor *x, const nnt_tensor *fn, const nnt_tensor *base,
                             const nnt_tensor *scale, float rms_eps, float hc_eps, nnt_tensor *y, nnt_error *err);
    /* Token compression into entries of width D: kv, gate [B, T, c D] (c = 2 with overlap, else
     * 1), ape [rate, c D] added to the gate by a token's place in its window. Row b's windows
     * start at token first[b] (host); it holds count[b] entries (host). Entry w pools, per
     * channel, softmax over slots of gate times kv: without overlap the rate tokens of window w;
     * with overlap also window w - 1's tokens through their first D channels (window w's
     * through the last D). out [B, C, D]; entries past count[b] are zero. Source: DeepSeek-V4
     * report, compressed sparse / heavily compressed attention; the compressor of
     * src/transformers/models/deepseek_v4/modeling_deepseek_v4.py. */
    nnt_status (*compress)(void *ctx, const nnt_tensor *kv, const nnt_tensor *gate, const nnt_tensor *ape, int rate,
                           int overlap, const int32_t *first, const int32_t *count, nnt_tensor *out, nnt_error *err);
    /* Lightning-indexer scores: out[B, T, C] = scale * sum_h w[B, T, h] relu(q[B, T, h, :] . k[B, C, :]).
     * Source: DeepSeek-V3.2 / V4 reports; the indexer of
     * src/transformers/models/deepseek_v4/modeling_deepseek_v4.py. */
    nnt_status (*indexer_scores)(void *ctx, const nnt_tensor *q, const nnt_tensor *k, const nnt_tensor *w,
                                 float scale, nnt_tensor *out, nnt_error *err);

    /* ---- backward (optional; gradients) ----
     * Vector-Jacobian products of the decoder ops (ABI 3.5), for a core that records a forward's
     * op calls and replays them backwards. Each `<op>_backward` takes the forward's inputs as
     * they were when the forward ran (and its output where said), the gradient of the forward's
     * output(s), and ADDS the gradient of each activation input into that input's gradient:
     * dx += dL/dx. A NULL gradient output means that gradient is not wanted (its work is
     * skipped). Every gradient is F32, shaped as the tensor it is the gradient of, in the
     * backend's memory; gradients may not alias the forward's tensors. Weights (linear's w,
     * norm gains, sinks, router biases, tables) never get one. The bfloat16 flags
     * (NNT_TENSOR_BF16_PRODUCTS / _VALUES / _ONCE / _SHIFTED) are ignored here: gradients are
     * float32 throughout, the derivative of the float32 forward. Errors: NNT_ERR_SHAPE naming the
     * tensors whose shapes disagree with the forward's, NNT_ERR_INVALID_ARGUMENT for indices
     * out of range, NNT_ERR_UNSUPPORTED for an unreadable weight encoding.
     * Not listed, needing none: embedding (its input is token ids, its table a weight); add,
     * copy, fill, scale (the core accumulates gradients with `accumulate`). A backend that
     * leaves these NULL cannot serve gradient requests; the core refuses them, naming the op. */
    /* dx[M, K] += dy[M, N] . w[N, K]: the transpose of linear, w read in its stored encoding
     * (every encoding linear reads) and decoded as it is read, never widened as a whole. */
    nnt_status (*linear_backward)(void *ctx, const nnt_tensor *dy, const nnt_tensor *w, nnt_tensor *dx,
                                  nnt_error *err);
    /* rms_norm's: x[M, D] the forward's input, w[D] or NULL its gain, dy[M, D], dx[M, D]. With
     * r = 1 / sqrt(mean(x^2) + eps) per row and u = w * dy:
     * dx += r u - x r^3 mean(u x). Source: Zhang & Sennrich 2019 (RMSNorm), its gradient. */
    nnt_status (*rms_norm_backward)(void *ctx, const nnt_tensor *x, const nnt_tensor *w, float eps,
                                    const nnt_tensor *dy, nnt_tensor *dx, nnt_error *err);
    /* y += factor * x elementwise (F32, same element count; y may not alias x): how the core
     * sums the gradients a tensor receives from each of its readers. */
    nnt_status (*accumulate)(void *ctx, const nnt_tensor *x, float factor, nnt_tensor *y, nnt_error *err);
    /* dx[A, B, C, D] += dy[A, C, B, D] with axes 1 and 2 swapped back. */
    nnt_status (*swap12_backward)(void *ctx, const nnt_tensor *dy, nnt_tensor *dx, nnt_error *err);
    /* rope's, in place on dx[B, H, T, D], with rope's own arguments: REPLACES the gradient of
     * the rotated output by the gradient of the input (rope works in place, so the two share
     * the tensor): each rotated pair is turned by -angle and multiplied by mscale (the
     * transpose of the rotation), every nnt_rope_style as rope; unrotated dims are unchanged. */
    nnt_status (*rope_backward)(void *ctx, nnt_tensor *dx, const int32_t *pos, const float *inv_freq,
                                int rot_start, int rot_dim, nnt_rope_style style, float mscale,
                                nnt_error *err);
    /* attn_scores': q[B, Hq, T, D], k[B, Hkv, S, D], scale and mask as the forward; ds[B, Hq, T,
     * S]; dq += scale ds . k and dk += scale ds^T . q, query head h against key head
     * h / (Hq / Hkv) (dk sums its group's heads). Entries the mask hides give nothing (their ds
     * is not read). dq or dk may be NULL. */
    nnt_status (*attn_scores_backward)(void *ctx, const nnt_tensor *q, const nnt_tensor *k, float scale,
                                       const nnt_attn_mask *mask, const nnt_tensor *ds, nnt_tensor *dq,
                                       nnt_tensor *dk, nnt_error *err);
    /* softmax's, from its OUTPUT p[B, H, T, S]: ds += p * (dp - sum_s dp p), row by row (the
     * softmax Jacobian diag(p) - p p^T applied to dp; e.g. Goodfellow et al. 2016, Deep
     * Learning, 6.2.2.3). With sinks the sink column shares the normalisation, so p already
     * holds it (a row sums to 1 - p_sink); the sink has no gradient output and its dp is 0,
     * so the sum runs over the S kept columns and the formula is the same: `sinks` is taken
     * for the forward's signature and not needed. Rows the forward made all zeros get 0. */
    nnt_status (*softmax_backward)(void *ctx, const nnt_tensor *p, const float *sinks, const nnt_tensor *dp,
                                   nnt_tensor *ds, nnt_error *err);
    /* attn_mix's: p[B, Hq, T, S], v[B, Hkv, S, Dv], dout[B, T, Hq, Dv]; dp[B, Hq, T, S] +=
     * dout . v^T, dv[B, Hkv, S, Dv] += p^T . dout summed over the query heads of each value
     * head (h / (Hq / Hkv)). dp or dv may be NULL. */
    nnt_status (*attn_mix_backward)(void *ctx, const nnt_tensor *p, const nnt_tensor *v, const nnt_tensor *dout,
                                    nnt_tensor *dp, nnt_tensor *dv, nnt_error *err);
    /* swiglu's, all [M, I]: gate, up, limit and act as the forward; dout the gradient of out.
     * With gate: dgate += (dout clamp(up) + dact) silu'(min(gate, L)), dup += dout act, where
     * dact (may be NULL) is the gradient the act OUTPUT received from its other readers (read,
     * not written) and act (may be NULL) is not read (silu is recomputed from gate). Without
     * gate (act was the forward's input): dact += dout clamp(up), dup += dout act; dgate is
     * unused. Clamps as torch's clamp / clamp_max backward: the gradient passes where the input
     * is inside or exactly at the bound (gate <= L; -L <= up <= L) and is 0 past it.
     * silu'(x) = sigmoid(x) (1 + x (1 - sigmoid(x))). Source: Shazeer 2020. */
    nnt_status (*swiglu_backward)(void *ctx, const nnt_tensor *gate, const nnt_tensor *up, float limit,
                                  const nnt_tensor *act, const nnt_tensor *dout, nnt_tensor *dgate,
                                  nnt_tensor *dup, nnt_tensor *dact, nnt_error *err);
    /* route's: logits[M, E], bias and p as the forward, idx[M, K] the forward's choice (I32),
     * dw[M, K] the gradient of the weights; dlogits[M, E] += the gradient through the chosen
     * experts' weights w_k = f s(idx_k) / (sum_j s(idx_j) + eps) (renormalised) or f s(idx_k),
     * through the score function s (sigmoid, softmax over all E, sqrt-softplus as the forward
     * computes them). The choice (bias, groups, top-k, or indices_given) has no gradient: bias
     * only chooses, so it is not read. Repeated experts in idx are summed. Sources: as route. */
    nnt_status (*route_backward)(void *ctx, const nnt_tensor *logits, const nnt_tensor *bias,
                                 const nnt_route_params *p, const nnt_tensor *idx, const nnt_tensor *dw,
                                 nnt_tensor *dlogits, nnt_error *err);
    /* gather_rows': dsrc[rows[i], :] += ddst[i, :] for i < n (rows repeat: their sums add);
     * ddst [n, H], dsrc [M, H]; rows host memory. */
    nnt_status (*gather_rows_backward)(void *ctx, const nnt_tensor *ddst, const int32_t *rows, int n,
                                       nnt_tensor *dsrc, nnt_error *err);
    /* scatter_add_rows': src [n, H] and rows, scale (host, NULL: 1.0) as the forward, ddst [M,
     * H]; dsrc[i, :] += scale[i] ddst[rows[i], :]; dscale (F32 [n], backend memory, may be
     * NULL) dscale[i] += src[i, :] . ddst[rows[i], :]. dsrc may be NULL. */
    nnt_status (*scatter_add_rows_backward)(void *ctx, const nnt_tensor *src, const int32_t *rows,
                                            const float *scale, int n, const nnt_tensor *ddst,
                                            nnt_tensor *dsrc, nnt_tensor *dscale, nnt_error *err);
    /* scatter_rows': as scatter_add_rows_backward, except that where rows repeat only the last
     * write of a row survived the forward, so the earlier i get nothing. That the rows of dst
     * the forward overwrote had their old gradient cut (ddst rows zeroed for the tensor dst was
     * before the call) is the core's job, after this call. */
    nnt_status (*scatter_rows_backward)(void *ctx, const nnt_tensor *src, const int32_t *rows, const float *scale,
                                        int n, const nnt_tensor *ddst, nnt_tensor *dsrc, nnt_tensor *dscale,
                                        nnt_error *err);
    /* sum_axis1's: dx[M, K, H] += dy[M, H] for every k. */
    nnt_status (*sum_axis1_backward)(void *ctx, const nnt_tensor *dy, nnt_tensor *dx, nnt_error *err);
    /* copy_cols': dsrc[m, src_col + j] += ddst[m, dst_col + j] for j < ncols, the column ranges
     * of the forward's copy_cols(src, src_col, dst, dst_col, ncols). dsrc may be ddst only when
     * the ranges do not overlap (else NNT_ERR_INVALID_ARGUMENT). As for scatter_rows, zeroing
     * the overwritten columns of ddst afterwards is the core's job. */
    nnt_status (*copy_cols_backward)(void *ctx, const nnt_tensor *ddst, int64_t dst_col, nnt_tensor *dsrc,
                                     int64_t src_col, int64_t ncols, nnt_error *err);

    /* ---- rows scaled by values in backend memory (ABI 3.6; optional), with its backward ----
     * Appended after the backward entries: the forward op is nnt_op NNT_OP_SCALE_ROWS; its
     * backward follows the backward section's convention above. */
    /* y[i, :] = x[i, :] * w[idx[i]] for i < n. x and y F32 [n, H] (first axis n, H the product
     * of the others; the same shape), backend memory; y may be x (in place), else they may not
     * overlap. w F32 of any shape, backend memory, read flat (a router's weights [M, K] are
     * indexed by token * K + slot); it may not overlap y. idx: host memory, n entries, each in
     * [0, numel(w)), repeats allowed. y flagged NNT_TENSOR_BF16_VALUES gets R(x * w), the
     * product scatter_add_rows rounds, so scale_rows then scatter_add_rows with no scale gives
     * scatter_add_rows' numbers with the scales read from w. A mixture of experts weights its
     * experts' outputs this way with routing weights that stay in backend memory, where a
     * gradient tape sees them. Errors: NNT_ERR_SHAPE (x, y or w not F32, x's first axis not n,
     * y not shaped as x), NNT_ERR_INVALID_ARGUMENT (n < 0, idx NULL with n > 0, an index outside
     * [0, numel(w)): the message names its place i and its value). */
    nnt_status (*scale_rows)(void *ctx, const nnt_tensor *x, const nnt_tensor *w, const int32_t *idx, int n,
                             nnt_tensor *y, nnt_error *err);
    /* scale_rows': x [n, H] the forward's input (as it was before an in-place forward overwrote
     * it), w [any] and idx as the forward, dy [n, H] the gradient of y. dx [n, H] (may be NULL):
     * dx[i, :] += w[idx[i]] dy[i, :]; dw shaped as w (may be NULL): dw[idx[i]] += x[i, :] .
     * dy[i, :], repeated indices adding in order of i. x is read only for dw, w only for dx and
     * for the index check. dx and dw may not alias dy, x, w or each other. Errors as scale_rows;
     * NNT_ERR_SHAPE naming dy, dx or dw when not F32 shaped as above. */
    nnt_status (*scale_rows_backward)(void *ctx, const nnt_tensor *x, const nnt_tensor *w, const int32_t *idx, int n,
                                      const nnt_tensor *dy, nnt_tensor *dx, nnt_tensor *dw, nnt_error *err);

    /* ---- backward of hyper-connections and compressors (DeepSeek-V4) ---- */
    /* Vector-Jacobian products of hyper_connection, hyper_mix, hyper_head and compress, under the
     * convention above (F32 gradients added into, NULL gradient outputs skipped; fn, base,
     * scale and ape are weights and get none). indexer_scores has no backward: its scores only
     * choose which compressed entries a query keeps (an `allow` mask), and a choice has no
     * gradient, so a core treats its output as a constant; the kept entries get theirs through
     * attn_scores and attn_mix. */
    /* hyper_connection's: x [M, n, H], fn, base, scale, rms_eps, hc_eps and iters as the forward
     * (read, never written); dpost [M, n], dcomb [M, n, n] and dcollapsed [M, H] the gradients of
     * its three outputs, each may be NULL (no gradient reached it); dx [M, n, H] += the gradient
     * through all three. Per token, with v = x r (r the RMS normaliser) and m = fn . v: collapsed
     * gives dx_j += pre_j dcollapsed and dpre_j = dcollapsed . x_j; pre and post go back through
     * their sigmoids; comb through the Sinkhorn passes in reverse, each pass (divide every
     * column, or row, by its sum + hc_eps) differentiated as the quotient it is, from the pass's
     * recomputed input, then the row softmax; dm then reaches v through fn^T and x through the
     * normaliser (as rms_norm_backward without a gain). The forward is recomputed from x, so
     * nothing of it is stored. Sources: Xie et al. 2026 (mHC), the Sinkhorn-Knopp iteration
     * (Sinkhorn and Knopp 1967) differentiated by unrolling as in Adams and Zemel 2011; as
     * modeling_deepseek_v4.py computes the forward. Errors: NNT_ERR_SHAPE as the forward's. */
    nnt_status (*hyper_connection_backward)(void *ctx, const nnt_tensor *x, const nnt_tensor *fn,
                                            const nnt_tensor *base, const nnt_tensor *scale, float rms_eps,
                                            float hc_eps, int iters, const nnt_tensor *dpost,
                                            const nnt_tensor *dcomb, const nnt_tensor *dcollapsed, nnt_tensor *dx,
                                            nnt_error *err);
    /* hyper_mix's: x [M, n, H], a [M, H], post [M, n], comb [M, n, n] as the forward, dout
     * [M, n, H]. dx[m, j] += sum_k comb[m, j, k] dout[m, k]; da[m] += sum_k post[m, k] dout[m, k];
     * dpost[m, k] += dout[m, k] . a[m]; dcomb[m, j, k] += dout[m, k] . x[m, j]. Any of dx, da,
     * dpost, dcomb may be NULL. Source: the product rule on hyper_mix's formula. */
    nnt_status (*hyper_mix_backward)(void *ctx, const nnt_tensor *x, const nnt_tensor *a, const nnt_tensor *post,
                                     const nnt_tensor *comb, const nnt_tensor *dout, nnt_tensor *dx, nnt_tensor *da,
                                     nnt_tensor *dpost, nnt_tensor *dcomb, nnt_error *err);
    /* hyper_head's: x [M, n, H], fn [n, n H], base [n], scale, rms_eps, hc_eps as the forward;
     * dy [M, H]; dx [M, n, H] += pre_j dy for stream j plus the gradient through the weights pre
     * (their sigmoids, fn^T and the RMS normaliser), as hyper_connection_backward's collapsed
     * part. Source: as hyper_head. */
    nnt_status (*hyper_head_backward)(void *ctx, const nnt_tensor *x, const nnt_tensor *fn, const nnt_tensor *base,
                                      const nnt_tensor *scale, float rms_eps, float hc_eps, const nnt_tensor *dy,
                                      nnt_tensor *dx, nnt_error *err);
    /* compress': kv, gate [B, T, c D], ape, rate, overlap, first and count as the forward; dout
     * [B, C, D]. Each entry is a softmax-weighted sum over its slots per channel, out = sum_i
     * p_i kv_i with p = softmax(gate_i + ape_i): dkv_i += p_i dout and dgate_i += p_i dout (kv_i
     * - out), at the slot's token and channel (with overlap the previous window's first D
     * channels and this window's last D). Entries past count[b] and tokens in no window get
     * nothing. dkv or dgate may be NULL. Source: the softmax Jacobian (as softmax_backward) on
     * the compressor of the DeepSeek-V4 report. Errors: as the forward's. */
    nnt_status (*compress_backward)(void *ctx, const nnt_tensor *kv, const nnt_tensor *gate, const nnt_tensor *ape,
                                    int rate, int overlap, const int32_t *first, const int32_t *count,
                                    const nnt_tensor *dout, nnt_tensor *dkv, nnt_tensor *dgate, nnt_error *err);

    /* ---- backward of the recurrent mixers (Kimi Delta Attention; ABI 3.8) ----
     * Vector-Jacobian products of conv1d_causal, kda_gate, sigmoid, delta_rule and
     * rms_norm_gated, under the convention of the backward section above (the forward's inputs
     * handed in again, F32 gradients added into, a NULL gradient output not wanted). The
     * convolution kernel, dt_bias, a_log and the norm gain are weights and get none. zero_rows
     * needs no entry: its backward zeroes the same rows of the gradient, which a core does with
     * zero_rows itself. */
    /* conv1d_causal's: x [B, T, C], w [C, W], state_in [B, W - 1, C] (may be NULL) and act as the
     * forward; dy [B, T, C] the gradient of y; dstate_out [B, W - 1, C] (may be NULL) the gradient
     * the forward's state_out received. With z the convolution before the activation (recomputed
     * from x and state_in) and dz = dy act'(z) (SiLU: act'(z) = s (1 + z (1 - s)), s = sigmoid(z);
     * none: 1): dx[b, t - (W - 1) + j, c] += w[c, j] dz[b, t, c], the taps before t = 0 going
     * into dstate_in [B, W - 1, C] instead; state_out's entries (copies of the last W - 1
     * inputs) pass dstate_out back to the input each one copied. dx or dstate_in may be NULL.
     * Source: the chain rule on the forward's sum; the causal short convolution of the Kimi
     * Linear report (arXiv:2510.26692) as modeling_kimi_linear.py applies it. Errors:
     * NNT_ERR_SHAPE as the forward's, naming dy, dstate_out, dx or dstate_in when they disagree. */
    nnt_status (*conv1d_causal_backward)(void *ctx, const nnt_tensor *x, const nnt_tensor *w,
                                         const nnt_tensor *state_in, int act, const nnt_tensor *dy,
                                         const nnt_tensor *dstate_out, nnt_tensor *dx, nnt_tensor *dstate_in,
                                         nnt_error *err);
    /* kda_gate's: a [M, H * K], dt_bias [H * K], a_log [H] as the forward, dg [M, H * K]; with
     * x = a + dt_bias: da += -exp(a_log[h]) softplus'(x) dg, softplus'(x) = sigmoid(x) for
     * x <= 20 and 1 above (where the forward takes softplus(x) = x, as torch's softplus with
     * threshold 20 differentiates). Source: the gate's formula (Kimi Linear report,
     * arXiv:2510.26692; modeling_kimi_linear.py). Errors: NNT_ERR_SHAPE as the forward's. */
    nnt_status (*kda_gate_backward)(void *ctx, const nnt_tensor *a, const nnt_tensor *dt_bias,
                                    const nnt_tensor *a_log, const nnt_tensor *dg, nnt_tensor *da, nnt_error *err);
    /* sigmoid's, from its OUTPUT y (F32, any shape; the forward may have run in place, so its
     * input may be gone): dx += dy y (1 - y). dy and dx shaped as y. Errors: NNT_ERR_SHAPE. */
    nnt_status (*sigmoid_backward)(void *ctx, const nnt_tensor *y, const nnt_tensor *dy, nnt_tensor *dx,
                                   nnt_error *err);
    /* delta_rule's: q, k [B, T, H, K], v [B, T, H, V], g [B, T, H, K], beta [B, T, H],
     * token_valid (host, may be NULL), state_in [B, H, K, V] (may be NULL), l2norm and scale as
     * the forward. do_ [B, T, H, V] the gradient of o (may be NULL: none reached it); dstate_out
     * [B, H, K, V] (may be NULL) the gradient the forward's state_out received from its readers.
     * dstates [B, T, H, K, V] (may be NULL) is read and then REPLACED (as rope_backward replaces
     * in place): on entry the gradient the forward's states output received from its readers, on
     * return the total gradient of each token's state S_t, that cotangent plus what reached S_t
     * through o_t and through every later state (the gradient torch gives a recurrent state held
     * as a tensor of the graph). Gradients added: dq, dk shaped as q, dv as v, dg as g, dbeta as
     * beta, dstate_in as state_in (only when state_in is given); each may be NULL.
     * The recurrence is run backwards token by token per (batch, head), from checkpoints of S
     * kept every few tokens by a recomputed forward. Per token, with kn, qn the normalised (and
     * for qn scaled) key and query, Sd = diag(exp(g_t)) S_{t-1}, u = Sd^T kn, w = beta (v - u),
     * S_t = Sd + kn w^T, o_t = S_t^T qn, and dS the total gradient of S_t (dstate_out at the
     * last token, plus dstates_t, plus qn do_t^T): dqn = S_t do_t; dw = dS^T kn and dkn = dS w;
     * dbeta = dw . (v - u), dv = beta dw, du = -beta dw; dSd = dS + kn du^T, dkn += Sd du;
     * dg = rowsum(dSd * Sd); the gradient of S_{t-1} is diag(exp(g_t)) dSd. The L2 norm
     * x / sqrt(sum x^2 + 1e-6) passes dx = r dxn - x r^3 (x . dxn), r its reciprocal norm, and
     * scale multiplies dqn. A token with token_valid == 0 passes dS through unchanged and gets
     * nothing. Sources: Yang et al. 2024, Gated Delta Networks (arXiv:2412.06464), the delta rule
     * and its gate; Kimi Linear (arXiv:2510.26692), the per-channel decay; the token-wise
     * recurrence of modeling_kimi_linear.py's kernels (fla's naive KDA), differentiated by the
     * chain rule. Errors: NNT_ERR_SHAPE as the forward's, naming a gradient that disagrees;
     * NNT_ERR_UNSUPPORTED as the forward's; NNT_ERR_OUT_OF_MEMORY. */
    nnt_status (*delta_rule_backward)(void *ctx, const nnt_tensor *q, const nnt_tensor *k, const nnt_tensor *v,
                                      const nnt_tensor *g, const nnt_tensor *beta, const uint8_t *token_valid,
                                      const nnt_tensor *state_in, int l2norm, float scale, const nnt_tensor *do_,
                                      const nnt_tensor *dstate_out, nnt_tensor *dstates, nnt_tensor *dq,
                                      nnt_tensor *dk, nnt_tensor *dv, nnt_tensor *dg, nnt_tensor *dbeta,
                                      nnt_tensor *dstate_in, nnt_error *err);
    /* rms_norm_gated's: x [M, D], w [D], gate [M, D] and eps as the forward, dy [M, D]. With
     * r = 1 / sqrt(mean(x^2) + eps), s = sigmoid(gate) and u = w s dy: dx += r u - x r^3 mean(u x)
     * (as rms_norm_backward with the gain w s) and dgate += dy w x r s (1 - s). dx or dgate may
     * be NULL. Source: RMSNorm's gradient (Zhang & Sennrich 2019) and the product rule; the
     * gated output norm of modeling_kimi_linear.py. Errors: NNT_ERR_SHAPE as the forward's. */
    nnt_status (*rms_norm_gated_backward)(void *ctx, const nnt_tensor *x, const nnt_tensor *w,
                                          const nnt_tensor *gate, float eps, const nnt_tensor *dy, nnt_tensor *dx,
                                          nnt_tensor *dgate, nnt_error *err);

    /* ---- attention without its pattern (ABI 3.11; optional) ----
     * Appended after the backward entries: nnt_op NNT_OP_ATTN_FUSED. No family needs to list
     * it: the family kit's fam_attend calls it when present and falls back to attn_scores,
     * softmax and attn_mix when it is absent or declines. */
    /* o[B, T, Hq, Dv] = softmax over S (with the sink column of softmax) of scale q[B, Hq, T, D]
     * . k[B, Hkv, S, D]^T under mask, times v[B, Hkv, S, Dv]: the result of attn_scores, softmax
     * and attn_mix on the same arguments, without holding the [B, Hq, T, S] scores. Query head
     * h reads key and value head h / (Hq / Hkv); v may be k (keys that are their own values).
     * Tiles of keys the mask hides from a whole tile of queries may be skipped. sinks: F32 [Hq]
     * host memory or NULL; mask as attn_scores' (host memory, or NULL: every key visible). A
     * query that sees no key (and has no sink) gets zeros. Float32 results equal the three ops'
     * within float32 rounding of a different summation order (the running maximum of the
     * online softmax: Dao et al. 2022, FlashAttention, arXiv:2205.14135). The backend may
     * decline a call it would not run well or exactly (bfloat16-flagged o, whose rounding is the
     * three ops'; too little work to spread over its threads): it then returns NNT_OK with
     * *done = 0 and o untouched; *done = 1 when o holds the result. A tape that records a
     * forward for gradients declines while recording. Errors: NNT_ERR_SHAPE (a tensor not F32
     * rank 4, shapes that disagree), NNT_ERR_INVALID_ARGUMENT (done NULL),
     * NNT_ERR_OUT_OF_MEMORY. */
    nnt_status (*attn_fused)(void *ctx, const nnt_tensor *q, const nnt_tensor *k, const nnt_tensor *v, float scale,
                             const nnt_attn_mask *mask, const float *sinks, nnt_tensor *o, int *done,
                             nnt_error *err);

    /* ---- what the backend's ops accept beyond the above (ABI 3.15) ----
     * NNT_FEATURE_* bits; 0 (or absent in an older table) for none. */
    uint64_t features;
} nnt_backend_ops;

/* nnt_backend_ops.features: attn_scores and attn_fused read nnt_attn_mask.key_count, and
 * attn_mix takes v with a key axis longer than p's last axis (its first S entries read), so a
 * family can attend over a key/value cache in place instead of copying it out each call. The
 * backward ops are not covered: a forward recorded for gradients hands over whole tensors. */
#define NNT_FEATURE_KEY_COUNT ((uint64_t)1 << 0)

/* The smallest op table the core accepts: struct_size and the required ops. */
#define NNT_BACKEND_OPS_MIN_SIZE (offsetof(nnt_backend_ops, linear))

/* Options from the INI file's [backend.NAME] section, as key/value strings. */
typedef struct nnt_backend_options {
    uint32_t struct_size; /* sizeof(nnt_backend_options) as the core saw it */
    const char *const *keys;
    const char *const *values;
    int count;
    const char *ini_path; /* for error messages */
} nnt_backend_options;

typedef struct nnt_backend_descriptor {
    nnt_plugin_header header;
    /* 1 when tensors this backend allocates are ordinary host memory. */
    int host_memory;
    /* Creates a context from the options; an unknown or malformed option is an error naming it. */
    nnt_status (*create)(const nnt_backend_options *opt, void **ctx, nnt_error *err);
    void (*destroy)(void *ctx);
    /* The op table (struct_size first), static for the life of the plugin. The host reads a
     * copy; optional ops left NULL are missing capabilities (see nnt_op). */
    const nnt_backend_ops *ops;
} nnt_backend_descriptor;

#ifdef __cplusplus
}
#endif
#endif /* NNT_BACKEND_H */
