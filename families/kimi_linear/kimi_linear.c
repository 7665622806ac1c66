/* kimi_linear.c - the Kimi-Linear family plugin (KimiLinearForCausalLM).
 *
 * Llama's pre-norm block with two mixers, chosen per block by config layer_types (or the hub's
 * 1-indexed linear_attn_config.kda_layers / full_attn_layers):
 *  - Kimi Delta Attention (linear_attention; nnterp's linear_attn): q/k/v projections, a causal
 *    depthwise convolution of width short_conv_kernel_size with SiLU, a forget gate giving a log
 *    decay per key channel g = -exp(A_log) * softplus(f_b(f_a(x)) + dt_bias), beta =
 *    sigmoid(b_proj(x)), the gated delta rule on L2-normalised queries (scaled by key_dim^-0.5)
 *    and keys, then RMSNorm(o) * sigmoid(g_b(g_a(x))) per head and o_proj. Padding is zeroed
 *    before the projections, so left pads never reach the convolution or the state.
 *  - DeepSeek-V3 latent attention without rotary (full_attention; self_attn): q_proj,
 *    kv_a_proj_with_mqa split into the latent (RMSNorm, eps 1e-6) and a key part shared by every
 *    head, kv_b_proj into per-head key and value parts, softmax scale qk_head_dim^-0.5.
 * MLP: dense below first_k_dense_replace (or mlp_layer_types), else a mixture: sigmoid router
 * with the selection bias for the choice only, group-limited top-k, renormalised weights times
 * routed_scaling_factor, and shared experts. Sources: Kimi Linear tech report (arXiv:2510.26692);
 * src/transformers/models/kimi_linear/modeling_kimi_linear.py; vllm/model_executor/models/
 * kimi_linear.py (the release's names); flash-linear-attention's fla/ops/kda/naive.py. Values:
 * docs/plugin-guide.md. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <nnt/nnt_family_kit.h>
#include <nnt/nnt_version.h> /* the plugin reports nnt's version */

enum { KDA = 0, MLA = 1 };
enum { DENSE = 0, SPARSE = 1 };

typedef struct kda_w {
    nnt_tensor q_proj, k_proj, v_proj;     /* [P, H] */
    nnt_tensor conv_q, conv_k, conv_v;     /* [P, W] views */
    nnt_tensor f_a, f_b;                   /* [hd, H], [P, hd] */
    nnt_tensor b_proj, g_a, g_b;           /* [heads, H], [hd, H], [P, hd] */
    nnt_tensor o_norm, o_proj;             /* [hd], [H, P] */
    float *dt_bias, *a_log;                /* host F32 [P], [heads] */
    nnt_tensor dt_bias_t, a_log_t;
} kda_w;

typedef struct mla_w {
    nnt_tensor q_proj, kv_a, kv_a_norm, kv_b, o_proj;
    fam_attn attn;
} mla_w;

typedef struct kl_layer {
    int kind, mlp_kind;
    nnt_tensor in_norm, post_norm;
    kda_w kda;
    mla_w mla;
    fam_expert dense;
    fam_moe moe;
    float *bias_host;
} kl_layer;

typedef struct kl_model {
    fam_env env;
    int first_block, end_block; /* the blocks whose weights were bound (a stage's load), and the
                                 * only ones sessions keep caches for */
    int hidden, layers, vocab, inter, moe_inter, experts, top_k, n_group, topk_group, norm_topk, shared;
    int lin_heads, lin_dim, conv_w;
    int heads, kv_lora, q_lora, nope, rope, v_dim;
    double eps, scaling_factor;
    int tied;
    fam_decoder dec;
    kl_layer *l;
    fam_expert *expert_pool;
} kl_model;

/* Generation state: the latent blocks' key/value caches, and per KDA block the convolution's
 * last W - 1 inputs (q, k, v) and the recurrent state. */
typedef struct kda_state {
    nnt_tensor conv[3]; /* [B, W - 1, P] */
    nnt_tensor rec;     /* [B, heads, K, V] */
    int started;        /* 0 until the first call: state_input is None */
} kda_state;

typedef struct kl_cache {
    fam_layer_caches *kv;
    kda_state *kda;
    int layers;
} kl_cache;

static const char *const ARCHS[] = {"KimiLinearForCausalLM", NULL};
static const char *const TYPES[] = {"kimi_linear", NULL};
/* transformers calls both mixers self_attn; the KDA one is nnterp's linear_attn */
static const nnt_rename_rule RENAMES[] = {
    {"self_attn", "linear_attn", "KimiLinearDeltaAttention"},
    {"block_sparse_moe", "mlp", NULL},
    {"gate", "router", "KimiLinearTopkRouter"},
    {NULL, NULL, NULL},
};
static const char *const KIND_NAMES[] = {"linear_attention", "full_attention"};
static const char *const MLP_NAMES[] = {"dense", "sparse"};

/* What the release's tiktoken folder leaves to its tokenization code, moonshotai's
 * tokenization_kimi.py (TikTokenTokenizer) in the Kimi-Linear release:
 *  - its split pattern, pat_str, in Rust regex syntax (class intersections such as
 *    [\p{Lo}&&[^\p{Han}]] included, which the core rewrites for PCRE2);
 *  - num_reserved_special_tokens = 256 special tokens with the ids right after the ranks,
 *    named by tokenizer_config.json's added_tokens_decoder or "<|reserved_token_ID|>";
 *  - encode's cuts: TIKTOKEN_MAX_ENCODE_CHARS = 400000 code points a piece, and
 *    MAX_NO_WHITESPACES_CHARS = 25000, the longest run of white space or of other characters
 *    (str.isspace) left in one piece. */
static const nnt_tokenizer_hints TOKENIZER = {
    .struct_size = sizeof(nnt_tokenizer_hints),
    .split_pattern =
        "[\\p{Han}]+"
        "|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}&&[^\\p{Han}]]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}&&[^\\p{Han}]]+"
        "(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
        "|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}&&[^\\p{Han}]]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}&&[^\\p{Han}]]*"
        "(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
        "|\\p{N}{1,3}"
        "| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*"
        "|\\s*[\\r\\n]+"
        "|\\s+(?!\\S)"
        "|\\s+",
    .reserved_special_tokens = 256,
    .piece_chars = 400000,
    .piece_run = 25000,
};

#define CK(x)                                                                                                          \
    do {                                                                                                               \
        nnt_status st_ = (x);                                                                                          \
        if (st_ != NNT_OK) return st_;                                                                                 \
    } while (0)

static nnt_status cfg_i(const kl_model *m, const nnt_checkpoint *ck, const char *key, int64_t dflt, int req, int *out,
                        nnt_error *err)
{
    int64_t v;
    CK(m->env.core->cfg_int(ck, key, dflt, req, &v, err));
    *out = (int)v;
    return NNT_OK;
}

/* The first key of `keys` present in config.json, or keys[0]. */
static const char *first_key(const kl_model *m, const nnt_checkpoint *ck, const char *const *keys, int n)
{
    for (int i = 0; i < n; i++)
        if (m->env.core->cfg_has(ck, keys[i])) return keys[i];
    return keys[0];
}

static nnt_status read_layer_kinds(kl_model *m, const nnt_checkpoint *ck, int *kinds, int *mlp_kinds, nnt_error *err)
{
    const nnt_core_api *h = m->env.core;
    int64_t v[4096];
    int n = 0;
    if (h->cfg_has(ck, "layer_types")) {
        CK(h->cfg_int_list(ck, "layer_types", KIND_NAMES, 2, v, 4096, &n, err));
        if (n < m->layers)
            return h->set_error(err, NNT_ERR_CONFIG, "%s: 'layer_types' has %d entries, num_hidden_layers is %d",
                                h->cfg_path(ck), n, m->layers);
        for (int i = 0; i < m->layers; i++) kinds[i] = (int)v[i];
    } else if (h->cfg_has(ck, "linear_attn_config.full_attn_layers") && h->cfg_has(ck, "linear_attn_config.kda_layers")) {
        for (int i = 0; i < m->layers; i++) kinds[i] = -1;
        const char *lists[2] = {"linear_attn_config.kda_layers", "linear_attn_config.full_attn_layers"};
        for (int k = 0; k < 2; k++) {
            CK(h->cfg_int_list(ck, lists[k], NULL, 0, v, 4096, &n, err));
            for (int i = 0; i < n; i++) {
                if (v[i] < 1 || v[i] > m->layers)
                    return h->set_error(err, NNT_ERR_CONFIG, "%s: %s holds %lld; the lists count blocks from 1 to %d",
                                        h->cfg_path(ck), lists[k], (long long)v[i], m->layers);
                kinds[v[i] - 1] = k == 0 ? KDA : MLA; /* 1-indexed in the checkpoint */
            }
        }
        for (int i = 0; i < m->layers; i++)
            if (kinds[i] < 0)
                return h->set_error(err, NNT_ERR_CONFIG, "%s: block %d (1-indexed %d) is in neither kda_layers nor full_attn_layers",
                                    h->cfg_path(ck), i, i + 1);
    } else {
        /* transformers' default schedule */
        for (int i = 0; i < m->layers; i++) kinds[i] = (i && i % 4 == 0) ? MLA : KDA;
    }
    if (h->cfg_has(ck, "mlp_layer_types")) {
        CK(h->cfg_int_list(ck, "mlp_layer_types", MLP_NAMES, 2, v, 4096, &n, err));
        if (n < m->layers)
            return h->set_error(err, NNT_ERR_CONFIG, "%s: 'mlp_layer_types' has %d entries, num_hidden_layers is %d",
                                h->cfg_path(ck), n, m->layers);
        for (int i = 0; i < m->layers; i++) mlp_kinds[i] = (int)v[i];
    } else {
        int dense = 1, freq = 1;
        CK(cfg_i(m, ck, "first_k_dense_replace", 1, 0, &dense, err));
        CK(cfg_i(m, ck, "moe_layer_freq", 1, 0, &freq, err));
        if (freq < 1) freq = 1;
        for (int i = 0; i < m->layers; i++) mlp_kinds[i] = (i >= dense && i % freq == 0) ? SPARSE : DENSE;
    }
    return NNT_OK;
}

static nnt_status read_config(kl_model *m, const nnt_checkpoint *ck, nnt_error *err)
{
    const nnt_core_api *h = m->env.core;
    CK(cfg_i(m, ck, "hidden_size", 0, 1, &m->hidden, err));
    CK(cfg_i(m, ck, "num_hidden_layers", 0, 1, &m->layers, err));
    CK(cfg_i(m, ck, "vocab_size", 0, 1, &m->vocab, err));
    CK(cfg_i(m, ck, "intermediate_size", 0, 1, &m->inter, err));
    CK(cfg_i(m, ck, "moe_intermediate_size", 0, 1, &m->moe_inter, err));
    static const char *const ek[] = {"num_experts", "num_local_experts", "n_routed_experts"};
    CK(cfg_i(m, ck, first_key(m, ck, ek, 3), 0, 1, &m->experts, err));
    static const char *const kk[] = {"num_experts_per_token", "num_experts_per_tok"};
    CK(cfg_i(m, ck, first_key(m, ck, kk, 2), 0, 1, &m->top_k, err));
    static const char *const sk[] = {"num_shared_experts", "n_shared_experts"};
    CK(cfg_i(m, ck, first_key(m, ck, sk, 2), 1, 0, &m->shared, err));
    static const char *const gk[] = {"num_expert_group", "n_group"};
    CK(cfg_i(m, ck, first_key(m, ck, gk, 2), 1, 0, &m->n_group, err));
    CK(cfg_i(m, ck, "topk_group", 1, 0, &m->topk_group, err));
    static const char *const nk[] = {"moe_renormalize", "norm_topk_prob"};
    CK(h->cfg_bool(ck, first_key(m, ck, nk, 2), 1, 0, &m->norm_topk, err));
    CK(h->cfg_float(ck, "routed_scaling_factor", 1.0, 0, &m->scaling_factor, err));
    CK(h->cfg_float(ck, "rms_norm_eps", 1e-5, 0, &m->eps, err));
    CK(h->cfg_bool(ck, "tie_word_embeddings", 0, 0, &m->tied, err));
    static const char *const lh[] = {"linear_attn_config.num_heads", "linear_num_heads"};
    CK(cfg_i(m, ck, first_key(m, ck, lh, 2), 32, 0, &m->lin_heads, err));
    static const char *const ld[] = {"linear_attn_config.head_dim", "linear_head_dim"};
    CK(cfg_i(m, ck, first_key(m, ck, ld, 2), 128, 0, &m->lin_dim, err));
    static const char *const lw[] = {"linear_attn_config.short_conv_kernel_size", "linear_conv_kernel_dim"};
    CK(cfg_i(m, ck, first_key(m, ck, lw, 2), 4, 0, &m->conv_w, err));
    CK(cfg_i(m, ck, "num_attention_heads", 0, 1, &m->heads, err));
    CK(cfg_i(m, ck, "kv_lora_rank", 512, 0, &m->kv_lora, err));
    CK(cfg_i(m, ck, "q_lora_rank", 0, 0, &m->q_lora, err));
    CK(cfg_i(m, ck, "qk_nope_head_dim", 128, 0, &m->nope, err));
    CK(cfg_i(m, ck, "qk_rope_head_dim", 64, 0, &m->rope, err));
    CK(cfg_i(m, ck, "v_head_dim", 128, 0, &m->v_dim, err));
    const char *s = NULL;
    CK(h->cfg_string(ck, "hidden_act", "silu", 0, &s, err));
    if (strcmp(s, "silu") != 0)
        return h->set_error(err, NNT_ERR_UNSUPPORTED, "%s: hidden_act '%s' is not supported (silu expected)", h->cfg_path(ck), s);
    CK(h->cfg_string(ck, "moe_router_activation_func", "sigmoid", 0, &s, err));
    if (strcmp(s, "sigmoid") != 0)
        return h->set_error(err, NNT_ERR_UNSUPPORTED, "%s: moe_router_activation_func '%s' is not supported (sigmoid expected)",
                            h->cfg_path(ck), s);
    if (m->q_lora)
        return h->set_error(err, NNT_ERR_UNSUPPORTED, "%s: q_lora_rank %d: the latent attention's low-rank queries are not "
                                                      "supported (Kimi-Linear checkpoints use q_proj, q_lora_rank null)",
                            h->cfg_path(ck), m->q_lora);
    if (h->cfg_has(ck, "linear_attn_config.gate_lower_bound"))
        return h->set_error(err, NNT_ERR_UNSUPPORTED, "%s: linear_attn_config.gate_lower_bound asks for the bounded forget gate, "
                                                      "which this family does not implement (the released Kimi-Linear uses "
                                                      "-exp(A_log) * softplus)", h->cfg_path(ck));
    const char *bad = NULL;
    if (m->hidden <= 0 || m->layers <= 0 || m->vocab <= 0) bad = "hidden_size, num_hidden_layers and vocab_size must be positive";
    else if (m->lin_heads <= 0 || m->lin_dim <= 0 || m->conv_w < 1) bad = "the linear-attention heads, head_dim and kernel size must be positive";
    else if (m->heads <= 0 || m->kv_lora <= 0 || m->nope < 0 || m->rope < 0 || m->v_dim <= 0) bad = "the latent attention's sizes must be positive";
    else if (m->experts <= 0 || m->top_k <= 0 || m->top_k > m->experts) bad = "num_experts_per_token must be between 1 and num_experts";
    else if (m->n_group < 1 || m->experts % m->n_group || m->topk_group < 1 || m->topk_group > m->n_group)
        bad = "num_expert_group must divide num_experts and topk_group lie between 1 and it";
    if (bad) return h->set_error(err, NNT_ERR_CONFIG, "%s: %s", h->cfg_path(ck), bad);
    return NNT_OK;
}

/* The tensors of a Kimi Delta Attention block with one spelling, as tables (the kit's
 * fam_bind_names binds them into a kda_w): the input projections, then the beta, output-gate,
 * output-norm and output projections. The convolutions and the forget gate have two spellings
 * each (code below). Shapes index these sizes: H hidden, HEADS linear-attention heads, D head
 * width, P = HEADS * D. */
enum { KDA_H, KDA_HEADS, KDA_D, KDA_P, KDA_SIZES };
static const fam_tensor_name KDA_IN_NAMES[] = {
    {offsetof(kda_w, q_proj), "model.layers.%d.self_attn.q_proj.weight", 2, {KDA_P, KDA_H}},
    {offsetof(kda_w, k_proj), "model.layers.%d.self_attn.k_proj.weight", 2, {KDA_P, KDA_H}},
    {offsetof(kda_w, v_proj), "model.layers.%d.self_attn.v_proj.weight", 2, {KDA_P, KDA_H}},
};
static const fam_tensor_name KDA_OUT_NAMES[] = {
    {offsetof(kda_w, b_proj), "model.layers.%d.self_attn.b_proj.weight", 2, {KDA_HEADS, KDA_H}},
    {offsetof(kda_w, g_a), "model.layers.%d.self_attn.g_a_proj.weight", 2, {KDA_D, KDA_H}},
    {offsetof(kda_w, g_b), "model.layers.%d.self_attn.g_b_proj.weight", 2, {KDA_P, KDA_D}},
    {offsetof(kda_w, o_norm), "model.layers.%d.self_attn.o_norm.weight", 1, {KDA_D}},
    {offsetof(kda_w, o_proj), "model.layers.%d.self_attn.o_proj.weight", 2, {KDA_H, KDA_P}},
};
/* The tensors of a latent-attention (MLA) block, bound into an mla_w. Shapes index: H hidden, Q
 * heads * (nope + rope), KV_A kv_lora_rank + rope, LORA kv_lora_rank, KV_B heads * (nope +
 * v_head_dim), O heads * v_head_dim. */
enum { MLA_H, MLA_Q, MLA_KV_A, MLA_LORA, MLA_KV_B, MLA_O, MLA_SIZES };
static const fam_tensor_name MLA_NAMES[] = {
    {offsetof(mla_w, q_proj), "model.layers.%d.self_attn.q_proj.weight", 2, {MLA_Q, MLA_H}},
    {offsetof(mla_w, kv_a), "model.layers.%d.self_attn.kv_a_proj_with_mqa.weight", 2, {MLA_KV_A, MLA_H}},
    {offsetof(mla_w, kv_a_norm), "model.layers.%d.self_attn.kv_a_layernorm.weight", 1, {MLA_LORA}},
    {offsetof(mla_w, kv_b), "model.layers.%d.self_attn.kv_b_proj.weight", 2, {MLA_KV_B, MLA_LORA}},
    {offsetof(mla_w, o_proj), "model.layers.%d.self_attn.o_proj.weight", 2, {MLA_H, MLA_O}},
};

/* Binds `name` as F32 host data of n values whatever its shape (A_log is [1, 1, H, 1] on the
 * hub and [H, 1] in transformers). */
static nnt_status bind_kda(kl_model *m, const nnt_checkpoint *ck, int L, kda_w *w, nnt_error *err)
{
    const fam_env *env = &m->env;
    const nnt_core_api *h = env->core;
    int64_t H = m->hidden, Hh = m->lin_heads, D = m->lin_dim, P = Hh * D, W = m->conv_w;
    char n[192], alt[192];
#define WT(field, nd, ...)                                                                                             \
    do {                                                                                                               \
        int64_t shp[] = {__VA_ARGS__};                                                                                 \
        CK(fam_weight(env, ck, n, nd, shp, &w->field, err));                                                           \
    } while (0)
#define NAME(fmt) snprintf(n, sizeof n, fmt, L)
    const int64_t sizes[KDA_SIZES] = {[KDA_H] = H, [KDA_HEADS] = Hh, [KDA_D] = D, [KDA_P] = P};
    CK(fam_bind_names(env, ck, L, KDA_IN_NAMES, (int)(sizeof KDA_IN_NAMES / sizeof KDA_IN_NAMES[0]), sizes, w, err));
    /* the hub's three convolutions, or transformers' one packed [q | k | v] */
    NAME("model.layers.%d.self_attn.conv1d.weight");
    if (h->has_tensor(ck, n)) {
        nnt_tensor packed;
        WT(conv_q, 3, 3 * P, 1, W);
        packed = w->conv_q;
        packed.ndim = 2;
        packed.shape[0] = 3 * P;
        packed.shape[1] = W;
        w->conv_q = w->conv_k = w->conv_v = packed;
        w->conv_q.shape[0] = w->conv_k.shape[0] = w->conv_v.shape[0] = P;
        w->conv_k.data = (char *)packed.data + nnt_dtype_span(packed.dtype, P * W);
        w->conv_v.data = (char *)packed.data + nnt_dtype_span(packed.dtype, 2 * P * W);
    } else {
        NAME("model.layers.%d.self_attn.q_conv1d.weight");
        WT(conv_q, 3, P, 1, W);
        NAME("model.layers.%d.self_attn.k_conv1d.weight");
        WT(conv_k, 3, P, 1, W);
        NAME("model.layers.%d.self_attn.v_conv1d.weight");
        WT(conv_v, 3, P, 1, W);
        nnt_tensor *cv[3] = {&w->conv_q, &w->conv_k, &w->conv_v};
        for (int i = 0; i < 3; i++) {
            cv[i]->ndim = 2;
            cv[i]->shape[1] = W;
        }
    }
    /* forget gate: hub names under self_attn, transformers' under self_attn.forget_gate */
    snprintf(alt, sizeof alt, "model.layers.%d.self_attn.forget_gate.f_a_proj.weight", L);
    const char *fg = h->has_tensor(ck, alt) ? "self_attn.forget_gate" : "self_attn";
    snprintf(n, sizeof n, "model.layers.%d.%s.f_a_proj.weight", L, fg);
    WT(f_a, 2, D, H);
    snprintf(n, sizeof n, "model.layers.%d.%s.f_b_proj.weight", L, fg);
    WT(f_b, 2, P, D);
    snprintf(n, sizeof n, "model.layers.%d.%s.dt_bias", L, fg);
    CK(fam_bind_vector(&m->env, ck, n, P, &w->dt_bias, &w->dt_bias_t, err));
    snprintf(n, sizeof n, "model.layers.%d.%s.A_log", L, fg);
    CK(fam_bind_vector(&m->env, ck, n, Hh, &w->a_log, &w->a_log_t, err));
    return fam_bind_names(env, ck, L, KDA_OUT_NAMES, (int)(sizeof KDA_OUT_NAMES / sizeof KDA_OUT_NAMES[0]), sizes, w,
                          err);
}

static nnt_status bind_mla(kl_model *m, const nnt_checkpoint *ck, int L, mla_w *w, nnt_error *err)
{
    const fam_env *env = &m->env;
    int64_t H = m->hidden, Hn = m->heads, qk = m->nope + m->rope;
    const int64_t sizes[MLA_SIZES] = {[MLA_H] = H,
                                      [MLA_Q] = Hn * qk,
                                      [MLA_KV_A] = (int64_t)m->kv_lora + m->rope,
                                      [MLA_LORA] = m->kv_lora,
                                      [MLA_KV_B] = Hn * (m->nope + m->v_dim),
                                      [MLA_O] = Hn * m->v_dim};
    CK(fam_bind_names(env, ck, L, MLA_NAMES, (int)(sizeof MLA_NAMES / sizeof MLA_NAMES[0]), sizes, w, err));
    fam_attn *a = &w->attn;
    memset(a, 0, sizeof *a);
    a->num_heads = (int)Hn;
    a->num_kv_heads = (int)Hn; /* keys and values for every head */
    a->qk_head_dim = (int)qk;
    a->v_head_dim = m->v_dim;
    a->rot_dim = 0; /* no rotary anywhere */
    a->scale = 1.0f / sqrtf((float)qk);
    a->o_proj = w->o_proj;
    return NNT_OK;
}

static nnt_status bind_mlp(kl_model *m, const nnt_checkpoint *ck, int L, kl_layer *ly, nnt_error *err)
{
    const fam_env *env = &m->env;
    const nnt_core_api *h = env->core;
    int64_t H = m->hidden;
    char n[192];
    if (ly->mlp_kind == DENSE) {
        /* the release keeps the dense MLP under mlp; transformers 5.24 writes it under
         * block_sparse_moe */
        int64_t I = m->inter;
        fam_expert *w = &ly->dense;
        snprintf(n, sizeof n, "model.layers.%d.mlp.gate_proj.weight", L);
        const char *pre = h->has_tensor(ck, n) ? "mlp" : "block_sparse_moe";
        snprintf(n, sizeof n, "model.layers.%d.%s.gate_proj.weight", L, pre);
        WT(gate, 2, I, H);
        snprintf(n, sizeof n, "model.layers.%d.%s.up_proj.weight", L, pre);
        WT(up, 2, I, H);
        snprintf(n, sizeof n, "model.layers.%d.%s.down_proj.weight", L, pre);
        WT(down, 2, H, I);
        return NNT_OK;
    }
    /* hub spelling under block_sparse_moe, transformers' under mlp */
    snprintf(n, sizeof n, "model.layers.%d.block_sparse_moe.gate.weight", L);
    const char *pre = h->has_tensor(ck, n) ? "block_sparse_moe" : "mlp";
    int64_t E = m->experts, I = m->moe_inter, S = (int64_t)m->moe_inter * m->shared;
    int64_t rs[2] = {E, H};
    snprintf(n, sizeof n, "model.layers.%d.%s.gate.weight", L, pre);
    CK(fam_weight(env, ck, n, 2, rs, &ly->moe.router, err));
    snprintf(n, sizeof n, "model.layers.%d.%s.gate.e_score_correction_bias", L, pre);
    if (h->has_tensor(ck, n)) {
        CK(fam_bind_vector(&m->env, ck, n, E, &ly->bias_host, &ly->moe.bias, err));
    }
    static const fam_expert_names spellings[] = {
        {.gate = "model.layers.%d.block_sparse_moe.experts.%d.w1.weight",
         .up = "model.layers.%d.block_sparse_moe.experts.%d.w3.weight",
         .down = "model.layers.%d.block_sparse_moe.experts.%d.w2.weight"},
        {.gate = "model.layers.%d.mlp.experts.%d.gate_proj.weight",
         .up = "model.layers.%d.mlp.experts.%d.up_proj.weight",
         .down = "model.layers.%d.mlp.experts.%d.down_proj.weight"},
    };
    ly->moe.experts = m->expert_pool + (size_t)L * m->experts;
    CK(fam_bind_experts(env, ck, L, E, I, H, "model.layers.%d.mlp.experts.gate_up_proj",
                        "model.layers.%d.mlp.experts.down_proj", spellings, 2, ly->moe.experts, err));
    if (m->shared > 0) {
        fam_expert *w = &ly->moe.shared;
        snprintf(n, sizeof n, "model.layers.%d.%s.shared_experts.gate_proj.weight", L, pre);
        WT(gate, 2, S, H);
        snprintf(n, sizeof n, "model.layers.%d.%s.shared_experts.up_proj.weight", L, pre);
        WT(up, 2, S, H);
        snprintf(n, sizeof n, "model.layers.%d.%s.shared_experts.down_proj.weight", L, pre);
        WT(down, 2, H, S);
        ly->moe.has_shared = 1;
    }
#undef WT
#undef NAME
    ly->moe.num_experts = m->experts;
    ly->moe.top_k = m->top_k;
    ly->moe.intermediate = m->moe_inter;
    /* transformers' Kimi-Linear router multiplies in float32 (modeling_kimi_linear.py) */
    ly->moe.router_f32 = 1;
    ly->moe.route = (nnt_route_params){
        .struct_size = sizeof(nnt_route_params),
        .score_fn = NNT_SCORE_SIGMOID,
        .top_k = m->top_k,
        .n_group = m->n_group,
        .topk_group = m->topk_group,
        .renormalize = m->norm_topk,
        .renorm_eps = 1e-20f,
        .scaling_factor = (float)m->scaling_factor,
        .indices_given = 0,
    };
    return NNT_OK;
}

/* ---- forward ---- */

#define TRY(e)                                                                                                         \
    do {                                                                                                               \
        if ((st = (e)) != NNT_OK) goto done;                                                                           \
    } while (0)

/* Kimi Delta Attention on xn [M, H] -> out [M, H]. */
static nnt_status kda_forward(kl_model *m, nnt_run *run, int L, const nnt_forward_args *args,
                              const nnt_attn_mask *mask, const nnt_tensor *xn, nnt_tensor *out, nnt_error *err)
{
    const fam_env *env = &m->env;
    const nnt_core_api *h = env->core;
    const nnt_backend_ops *be = env->be;
    void *bc = env->be_ctx;
    const kda_w *w = &m->l[L].kda;
    int64_t B = args->batch, T = args->seq, M = B * T, H = m->hidden, Hh = m->lin_heads, D = m->lin_dim, P = Hh * D;
    kl_cache *kc = args->cache;
    kda_state *ks = kc ? &kc->kda[L] : NULL;
    int carried = ks && ks->started;
    size_t mark = h->arena_mark(run);
    nnt_status st;
    nnt_tensor x, raw, q, k, v, fa, a, g, braw, beta, o, s_out, states = {0}, ga, gate, normed, conv_out, s_in;
    /* padding never reaches the convolution or the state: zero it before the projections */
    TRY(fam_alloc(env, run, NNT_F32, &x, err, NNT_SHAPE(M, H)));
    TRY(be->copy(bc, xn, &x, err));
    TRY(be->zero_rows(bc, &x, mask->key_valid, err));
    TRY(fam_alloc(env, run, NNT_F32, &raw, err, NNT_SHAPE(M, P)));
    TRY(fam_alloc(env, run, NNT_F32, &q, err, NNT_SHAPE(M, P)));
    TRY(fam_alloc(env, run, NNT_F32, &k, err, NNT_SHAPE(M, P)));
    TRY(fam_alloc(env, run, NNT_F32, &v, err, NNT_SHAPE(M, P)));
    const nnt_tensor *projs[3] = {&w->q_proj, &w->k_proj, &w->v_proj}, *convs[3] = {&w->conv_q, &w->conv_k, &w->conv_v};
    nnt_tensor *outs[3] = {&q, &k, &v};
    if (ks) TRY(fam_alloc(env, run, NNT_F32, &conv_out, err, NNT_SHAPE(B, (int64_t)m->conv_w - 1, P)));
    for (int i = 0; i < 3; i++) {
        TRY(be->linear(bc, &x, projs[i], &raw, err));
        nnt_tensor r3 = fam_view(&raw, NNT_SHAPE(B, T, P)), o3 = fam_view(outs[i], NNT_SHAPE(B, T, P));
        /* a continued call convolves over the previous call's last inputs */
        TRY(be->conv1d_causal(bc, &r3, convs[i], carried ? &ks->conv[i] : NULL, 1, &o3, ks ? &conv_out : NULL, err));
        if (ks) TRY(be->copy(bc, &conv_out, &ks->conv[i], err));
    }
    nnt_tensor q4 = fam_view(&q, NNT_SHAPE(B, T, Hh, D)), k4 = fam_view(&k, NNT_SHAPE(B, T, Hh, D)), v4 = fam_view(&v, NNT_SHAPE(B, T, Hh, D));
    TRY(h->emit(run, NNT_VALUE_LIN_QUERIES, L, &q4));
    TRY(h->emit(run, NNT_VALUE_LIN_KEYS, L, &k4));
    TRY(h->emit(run, NNT_VALUE_LIN_VALUES, L, &v4));
    TRY(fam_alloc(env, run, NNT_F32, &fa, err, NNT_SHAPE(M, D)));
    TRY(fam_alloc(env, run, NNT_F32, &a, err, NNT_SHAPE(M, P)));
    TRY(fam_alloc(env, run, NNT_F32, &g, err, NNT_SHAPE(M, P)));
    TRY(be->linear(bc, &x, &w->f_a, &fa, err));
    TRY(be->linear(bc, &fa, &w->f_b, &a, err));
    TRY(be->kda_gate(bc, &a, &w->dt_bias_t, &w->a_log_t, &g, err));
    nnt_tensor g4 = fam_view(&g, NNT_SHAPE(B, T, Hh, D));
    TRY(h->emit(run, NNT_VALUE_LIN_DECAYS, L, &g4));
    TRY(fam_alloc(env, run, NNT_F32, &braw, err, NNT_SHAPE(M, Hh)));
    TRY(fam_alloc(env, run, NNT_F32, &beta, err, NNT_SHAPE(M, Hh)));
    TRY(be->linear(bc, &x, &w->b_proj, &braw, err));
    TRY(be->sigmoid(bc, &braw, &beta, err));
    nnt_tensor b3 = fam_view(&beta, NNT_SHAPE(B, T, Hh));
    TRY(h->emit(run, NNT_VALUE_LIN_BETAS, L, &b3));
    /* a prompt starts from no state (state_input is None); a continued call from the carried one */
    if (carried) {
        TRY(fam_alloc(env, run, NNT_F32, &s_in, err, NNT_SHAPE(B, Hh, D, D)));
        TRY(be->copy(bc, &ks->rec, &s_in, err));
        TRY(h->emit(run, NNT_VALUE_LIN_STATE_INPUT, L, &s_in));
    } else {
        TRY(h->emit(run, NNT_VALUE_LIN_STATE_INPUT, L, NULL));
    }
    TRY(fam_alloc(env, run, NNT_F32, &o, err, NNT_SHAPE(B, T, Hh, D)));
    TRY(fam_alloc(env, run, NNT_F32, &s_out, err, NNT_SHAPE(B, Hh, D, D)));
    int want_states = h->wants(run, NNT_VALUE_LIN_STATES, L) || h->wants(run, NNT_VALUE_LIN_STATE, L);
    if (want_states) TRY(fam_alloc(env, run, NNT_F32, &states, err, NNT_SHAPE(B, T, Hh, D, D)));
    TRY(be->delta_rule(bc, &q4, &k4, &v4, &g4, &b3, mask->key_valid, carried ? &s_in : NULL, 1, 1.0f / sqrtf((float)D), &o,
                       &s_out, want_states ? &states : NULL, err));
    if (want_states) {
        /* the state after each token, one emission per token, then all of them */
        nnt_tensor one, flat = fam_view(&states, NNT_SHAPE(B * T, Hh * D * D));
        TRY(fam_alloc(env, run, NNT_F32, &one, err, NNT_SHAPE(B, Hh, D, D)));
        nnt_tensor one2 = fam_view(&one, NNT_SHAPE(B, Hh * D * D));
        for (int64_t t = 0; t < T && h->wants(run, NNT_VALUE_LIN_STATE, L); t++) {
            int32_t rows[256];
            if (B > 256) {
                st = h->set_error(err, NNT_ERR_UNSUPPORTED, "per-token states for more than 256 rows");
                goto done;
            }
            for (int64_t b = 0; b < B; b++) rows[b] = (int32_t)(b * T + t);
            TRY(be->gather_rows(bc, &flat, rows, (int)B, &one2, err));
            TRY(h->emit(run, NNT_VALUE_LIN_STATE, L, &one));
        }
        TRY(h->emit(run, NNT_VALUE_LIN_STATES, L, &states));
    }
    nnt_tensor o4 = fam_view(&o, NNT_SHAPE(B, T, Hh, D));
    TRY(h->emit(run, NNT_VALUE_LIN_HEAD_OUTPUTS, L, &o4));
    TRY(h->emit(run, NNT_VALUE_LIN_STATE_OUTPUT, L, &s_out));
    if (ks) { /* the state the next call starts from (an edited state_output included) */
        TRY(be->copy(bc, &s_out, &ks->rec, err));
        ks->started = 1;
    }
    /* output gate and the gated RMSNorm per head, then o_proj */
    TRY(fam_alloc(env, run, NNT_F32, &ga, err, NNT_SHAPE(M, D)));
    TRY(fam_alloc(env, run, NNT_F32, &gate, err, NNT_SHAPE(M, P)));
    TRY(fam_alloc(env, run, NNT_F32, &normed, err, NNT_SHAPE(M, P)));
    TRY(be->linear(bc, &x, &w->g_a, &ga, err));
    TRY(be->linear(bc, &ga, &w->g_b, &gate, err));
    nnt_tensor oh = fam_view(&o, NNT_SHAPE(M * Hh, D)), gh = fam_view(&gate, NNT_SHAPE(M * Hh, D)), nh = fam_view(&normed, NNT_SHAPE(M * Hh, D));
    TRY(be->rms_norm_gated(bc, &oh, &w->o_norm, &gh, (float)m->eps, &nh, err));
    TRY(be->linear(bc, &normed, &w->o_proj, out, err));
    nnt_tensor out3 = fam_view(out, NNT_SHAPE(B, T, H));
    TRY(h->emit(run, NNT_VALUE_LIN_OUTPUT, L, &out3));
done:
    h->arena_release(run, mark);
    return st;
}

/* Latent attention without rotary on xn [M, H] -> out [M, H]. */
static nnt_status mla_forward(kl_model *m, nnt_run *run, int L, const nnt_forward_args *args,
                              const nnt_attn_mask *mask, const nnt_tensor *xn, nnt_tensor *out, nnt_error *err)
{
    const fam_env *env = &m->env;
    const nnt_core_api *h = env->core;
    const nnt_backend_ops *be = env->be;
    void *bc = env->be_ctx;
    const mla_w *w = &m->l[L].mla;
    int64_t M = xn->shape[0], Hn = m->heads, nope = m->nope, rope = m->rope, qk = nope + rope, Dv = m->v_dim;
    int64_t R = m->kv_lora;
    size_t mark = h->arena_mark(run);
    nnt_status st;
    nnt_tensor q, ckv, c, kv, k, v;
    TRY(fam_alloc(env, run, NNT_F32, &q, err, NNT_SHAPE(M, Hn * qk)));
    TRY(be->linear(bc, xn, &w->q_proj, &q, err));
    TRY(fam_alloc(env, run, NNT_F32, &ckv, err, NNT_SHAPE(M, R + rope)));
    TRY(be->linear(bc, xn, &w->kv_a, &ckv, err));
    TRY(fam_alloc(env, run, NNT_F32, &c, err, NNT_SHAPE(M, R)));
    TRY(be->copy_cols(bc, &ckv, 0, &c, 0, R, err));
    TRY(be->rms_norm(bc, &c, &w->kv_a_norm, 1e-6f, &c, err)); /* the latent's norm uses the default eps */
    TRY(fam_alloc(env, run, NNT_F32, &kv, err, NNT_SHAPE(M, Hn * (nope + Dv))));
    TRY(be->linear(bc, &c, &w->kv_b, &kv, err));
    TRY(fam_alloc(env, run, NNT_F32, &k, err, NNT_SHAPE(M, Hn * qk)));
    TRY(fam_alloc(env, run, NNT_F32, &v, err, NNT_SHAPE(M, Hn * Dv)));
    for (int64_t hd = 0; hd < Hn; hd++) {
        TRY(be->copy_cols(bc, &kv, hd * (nope + Dv), &k, hd * qk, nope, err));
        TRY(be->copy_cols(bc, &ckv, R, &k, hd * qk + nope, rope, err)); /* shared by every head */
        TRY(be->copy_cols(bc, &kv, hd * (nope + Dv) + nope, &v, hd * Dv, Dv, err));
    }
    kl_cache *kc = args->cache;
    TRY(fam_attention_forward(env, run, L, &w->attn, args, mask, &q, &k, &v, kc ? &kc->kv->kv[L] : NULL, out, err));
done:
    h->arena_release(run, mark);
    return st;
}

static nnt_status kl_mixer(void *self, nnt_run *run, int L, const nnt_forward_args *args, const nnt_attn_mask *mask,
                           const nnt_tensor *xn, nnt_tensor *out, nnt_error *err)
{
    kl_model *m = self;
    return m->l[L].kind == KDA ? kda_forward(m, run, L, args, mask, xn, out, err) : mla_forward(m, run, L, args, mask, xn, out, err);
}

static nnt_status kl_mlp(void *self, nnt_run *run, int L, const nnt_forward_args *args, const nnt_tensor *xn,
                         nnt_tensor *out, nnt_error *err)
{
    kl_model *m = self;
    nnt_call_dims dims = {args->batch, args->seq, args->past};
    const kl_layer *ly = &m->l[L];
    if (ly->mlp_kind == DENSE) return fam_mlp_forward(&m->env, run, L, &ly->dense, 0.0f, &dims, xn, out, 1, err);
    return fam_moe_forward(&m->env, run, L, &ly->moe, &dims, args->input_ids, xn, out, err);
}

/* ---- lifecycle ---- */

static void kl_unload(void *model)
{
    kl_model *m = model;
    if (!m) return;
    fam_env_release(&m->env); /* weights and parameter vectors */
    free(m->l);
    free(m->expert_pool);
    free(m);
}

static nnt_status kl_load(const nnt_load_args *args, void **out, nnt_error *err)
{
    kl_model *m = calloc(1, sizeof *m);
    if (!m) return args->core->set_error(err, NNT_ERR_OUT_OF_MEMORY, "no memory");
    fam_env_init(&m->env, args);
    const nnt_checkpoint *ck = args->ckpt;
    int *kinds = NULL, *mlp_kinds = NULL;
    nnt_status st = read_config(m, ck, err);
    if (st == NNT_OK) {
        m->l = calloc((size_t)m->layers, sizeof *m->l);
        m->expert_pool = calloc((size_t)m->layers * (size_t)m->experts, sizeof *m->expert_pool);
        kinds = calloc((size_t)m->layers, sizeof *kinds);
        mlp_kinds = calloc((size_t)m->layers, sizeof *mlp_kinds);
        if (!m->l || !m->expert_pool || !kinds || !mlp_kinds) st = args->core->set_error(err, NNT_ERR_OUT_OF_MEMORY, "no memory");
    }
    if (st == NNT_OK) st = read_layer_kinds(m, ck, kinds, mlp_kinds, err);
    if (st == NNT_OK) /* a stage's load binds its blocks only */
        st = fam_bind_readout_stage(&m->env, args, m->vocab, m->hidden, m->tied, m->layers, &m->dec, &m->first_block,
                                    &m->end_block, err);
    for (int L = 0; st == NNT_OK && L < m->layers; L++) {
        kl_layer *ly = &m->l[L];
        ly->kind = kinds[L];
        ly->mlp_kind = mlp_kinds[L];
        if (L < m->first_block || L >= m->end_block) continue; /* another stage's block: its kinds only */
        int64_t H = m->hidden;
        char n[160];
        snprintf(n, sizeof n, "model.layers.%d.input_layernorm.weight", L);
        st = fam_weight(&m->env, ck, n, 1, &H, &ly->in_norm, err);
        snprintf(n, sizeof n, "model.layers.%d.post_attention_layernorm.weight", L);
        if (st == NNT_OK) st = fam_weight(&m->env, ck, n, 1, &H, &ly->post_norm, err);
        if (st == NNT_OK) st = ly->kind == KDA ? bind_kda(m, ck, L, &ly->kda, err) : bind_mla(m, ck, L, &ly->mla, err);
        if (st == NNT_OK) st = bind_mlp(m, ck, L, ly, err);
    }
    free(kinds);
    free(mlp_kinds);
    if (st != NNT_OK) {
        kl_unload(m);
        return st;
    }
    fam_decoder_wire(&m->dec, m->layers, m->hidden, m->vocab, m->eps, &m->l[0].in_norm, &m->l[0].post_norm,
                     sizeof(kl_layer), m, kl_mixer, kl_mlp);
    *out = m;
    return NNT_OK;
}

static void kl_info(const void *model, nnt_model_info *out)
{
    const kl_model *m = model;
    memset(out, 0, sizeof *out);
    out->architecture = "KimiLinearForCausalLM";
    out->model_type = "kimi_linear";
    out->root_class = "KimiLinearForCausalLM";
    out->num_layers = m->layers;
    out->hidden_size = m->hidden;
    out->vocab_size = m->vocab;
    out->num_heads = m->heads;
    out->num_kv_heads = m->heads; /* the latent attention projects keys for every head */
    out->head_dim = m->v_dim;
    out->qk_head_dim = m->nope + m->rope;
    out->intermediate_size = m->inter;
    out->num_experts = m->experts;
    out->top_k = m->top_k;
    out->num_streams = 1;
}

static nnt_status kl_value_info(const void *model, int layer, nnt_value_id id, const nnt_call_dims *d,
                                nnt_value_info *out)
{
    const kl_model *m = model;
    if (fam_decoder_info(m->hidden, m->vocab, id, d, out)) return NNT_OK;
    const kl_layer *ly = &m->l[layer];
    int64_t B = d ? d->batch : 0, T = d ? d->seq : 0, H = m->hidden, Hh = m->lin_heads, D = m->lin_dim;
    if (id >= NNT_VALUE_ATTN_QUERIES && id <= NNT_VALUE_ATTN_HEAD_OUTPUTS) {
        if (ly->kind == KDA)
            fam_unserved(out, "this block mixes tokens with Kimi Delta Attention, served as linear_attn; it has no self_attn "
                              "(no softmax pattern, queries or keys of that kind)");
        else
            fam_attention_info(&ly->mla.attn, m->hidden, id, d, out);
        return NNT_OK;
    }
    if (id >= NNT_VALUE_LIN_OUTPUT && id <= NNT_VALUE_LIN_STATE_OUTPUT) {
        if (ly->kind == MLA) {
            fam_unserved(out, "this block runs latent attention (self_attn): it has no linear_attn mixer and no recurrent state");
            return NNT_OK;
        }
        switch (id) {
        case NNT_VALUE_LIN_OUTPUT: fam_served(out, d, NNT_F32, 1, NNT_SHAPE(B, T, H)); break;
        case NNT_VALUE_LIN_STATE: fam_served(out, d, NNT_F32, 0, NNT_SHAPE(B, Hh, D, D)); break;
        case NNT_VALUE_LIN_STATES: fam_served(out, d, NNT_F32, 0, NNT_SHAPE(B, T, Hh, D, D)); break;
        case NNT_VALUE_LIN_QUERIES:
        case NNT_VALUE_LIN_KEYS:
        case NNT_VALUE_LIN_VALUES:
        case NNT_VALUE_LIN_DECAYS:
        case NNT_VALUE_LIN_HEAD_OUTPUTS: fam_served(out, d, NNT_F32, 1, NNT_SHAPE(B, T, Hh, D)); break;
        case NNT_VALUE_LIN_BETAS: fam_served(out, d, NNT_F32, 1, NNT_SHAPE(B, T, Hh)); break;
        case NNT_VALUE_LIN_STATE_INPUT:
            fam_served(out, d, NNT_F32, 1, NNT_SHAPE(B, Hh, D, D));
            out->may_be_none = 1;
            break;
        case NNT_VALUE_LIN_STATE_OUTPUT: fam_served(out, d, NNT_F32, 1, NNT_SHAPE(B, Hh, D, D)); break;
        default: break;
        }
        return NNT_OK;
    }
    if (ly->mlp_kind == DENSE) {
        switch (id) {
        case NNT_VALUE_MLP_ACTIVATION:
        case NNT_VALUE_MLP_NEURONS: fam_served(out, d, NNT_F32, 1, NNT_SHAPE(B, T, (int64_t)m->inter)); break;
        case NNT_VALUE_MLP_OUTPUT: fam_served(out, d, NNT_F32, 1, NNT_SHAPE(B, T, H)); break;
        default:
            fam_unserved(out, "this block's MLP is dense (below first_k_dense_replace): it has no router, no experts and no "
                              "shared expert");
            break;
        }
        return NNT_OK;
    }
    switch (id) {
    case NNT_VALUE_MLP_OUTPUT:
    case NNT_VALUE_ROUTED_OUTPUT:
    case NNT_VALUE_SHARED_EXPERT_OUTPUT: fam_served(out, d, NNT_F32, 1, NNT_SHAPE(B, T, H)); break;
    case NNT_VALUE_ROUTER_LOGITS: fam_served(out, d, NNT_F32, 1, NNT_SHAPE(B, T, (int64_t)m->experts)); break;
    case NNT_VALUE_EXPERT_WEIGHTS: fam_served(out, d, NNT_F32, 1, NNT_SHAPE(B, T, (int64_t)m->top_k)); break;
    case NNT_VALUE_EXPERT_INDICES: fam_served(out, d, NNT_I32, 1, NNT_SHAPE(B, T, (int64_t)m->top_k)); break;
    case NNT_VALUE_EXPERT_OUTPUTS: fam_served(out, d, NNT_F32, 1, NNT_SHAPE(B, T, (int64_t)m->top_k, H)); break;
    case NNT_VALUE_MLP_ACTIVATION:
    case NNT_VALUE_MLP_NEURONS:
        fam_unserved(out, "this block's MLP is a mixture: each routed expert's activations exist only for its tokens and "
                          "the shared expert's are not the block's, so no single [batch seq intermediate_size] tensor "
                          "exists (the dense block serves them)");
        break;
    default: fam_unserved(out, "not a Kimi-Linear value"); break;
    }
    return NNT_OK;
}

static nnt_status kl_build_tree(const void *model, nnt_tree *tree, nnt_error *err)
{
    const kl_model *m = model;
    const nnt_core_api *h = m->env.core;
    char d[200];
    int64_t H = m->hidden, Hh = m->lin_heads, D = m->lin_dim, P = Hh * D;
    int root = h->tree_node(tree, -1, "model", NULL, "KimiLinearForCausalLM", NULL, NNT_MODULE_MODEL, -1);
    if (root < 0) return h->set_error(err, NNT_ERR_OUT_OF_MEMORY, "no memory for the module tree");
    h->tree_node(tree, root, "lm_head", NULL, "Linear", fam_linear_detail(d, sizeof d, H, m->vocab), -1, -1);
    snprintf(d, sizeof d, "%d, %d", m->vocab, m->hidden);
    h->tree_node(tree, root, "embed_tokens", NULL, "Embedding", d, -1, -1);
    int layers = h->tree_node(tree, root, "layers", NULL, "ModuleList", NULL, -1, -1);
    for (int L = 0; L < m->layers; L++) {
        const kl_layer *ly = &m->l[L];
        int lay = h->tree_node(tree, layers, "layers", NULL, "KimiLinearDecoderLayer", NULL, NNT_MODULE_LAYER, L);
        if (ly->kind == KDA) {
            int at = h->tree_node(tree, lay, "self_attn", "linear_attn", "KimiLinearDeltaAttention", NULL, NNT_MODULE_LINEAR_ATTN, L);
            h->tree_node(tree, at, "q_proj", NULL, "Linear", fam_linear_detail(d, sizeof d, H, P), -1, L);
            h->tree_node(tree, at, "k_proj", NULL, "Linear", fam_linear_detail(d, sizeof d, H, P), -1, L);
            h->tree_node(tree, at, "v_proj", NULL, "Linear", fam_linear_detail(d, sizeof d, H, P), -1, L);
            snprintf(d, sizeof d, "%lld, %lld, kernel_size=(%d,), stride=(1,), padding=(%d,), groups=%lld, bias=False",
                     (long long)(3 * P), (long long)(3 * P), m->conv_w, m->conv_w - 1, (long long)(3 * P));
            h->tree_node(tree, at, "conv1d", NULL, "Conv1d", d, -1, L);
            int fg = h->tree_node(tree, at, "forget_gate", NULL, "KimiLinearForgetGate", NULL, -1, L);
            h->tree_node(tree, fg, "f_a_proj", NULL, "Linear", fam_linear_detail(d, sizeof d, H, D), -1, L);
            h->tree_node(tree, fg, "f_b_proj", NULL, "Linear", fam_linear_detail(d, sizeof d, D, P), -1, L);
            h->tree_node(tree, at, "b_proj", NULL, "Linear", fam_linear_detail(d, sizeof d, H, Hh), -1, L);
            h->tree_node(tree, at, "g_a_proj", NULL, "Linear", fam_linear_detail(d, sizeof d, H, D), -1, L);
            h->tree_node(tree, at, "g_b_proj", NULL, "Linear", fam_linear_detail(d, sizeof d, D, P), -1, L);
            h->tree_node(tree, at, "o_norm", NULL, "KimiLinearRMSNormGated", NULL, -1, L);
            h->tree_node(tree, at, "o_proj", NULL, "Linear", fam_linear_detail(d, sizeof d, P, H), -1, L);
        } else {
            int64_t Hn = m->heads, qk = m->nope + m->rope;
            int at = h->tree_node(tree, lay, "self_attn", NULL, "KimiLinearAttention", NULL, NNT_MODULE_SELF_ATTN, L);
            h->tree_node(tree, at, "q_proj", NULL, "Linear", fam_linear_detail(d, sizeof d, H, Hn * qk), -1, L);
            h->tree_node(tree, at, "kv_a_proj_with_mqa", NULL, "Linear",
                         fam_linear_detail(d, sizeof d, H, (int64_t)m->kv_lora + m->rope), -1, L);
            h->tree_node(tree, at, "kv_a_layernorm", NULL, "KimiLinearRMSNorm", fam_norm_detail(d, sizeof d, m->kv_lora, 1e-6), -1, L);
            h->tree_node(tree, at, "kv_b_proj", NULL, "Linear",
                         fam_linear_detail(d, sizeof d, m->kv_lora, Hn * (m->nope + m->v_dim)), -1, L);
            h->tree_node(tree, at, "o_proj", NULL, "Linear", fam_linear_detail(d, sizeof d, Hn * m->v_dim, H), -1, L);
        }
        if (ly->mlp_kind == DENSE) {
            int mlp = h->tree_node(tree, lay, "mlp", NULL, "KimiLinearMLP", NULL, NNT_MODULE_MLP, L);
            h->tree_node(tree, mlp, "gate_proj", NULL, "Linear", fam_linear_detail(d, sizeof d, H, m->inter), -1, L);
            h->tree_node(tree, mlp, "up_proj", NULL, "Linear", fam_linear_detail(d, sizeof d, H, m->inter), -1, L);
            h->tree_node(tree, mlp, "down_proj", NULL, "Linear", fam_linear_detail(d, sizeof d, m->inter, H), -1, L);
            h->tree_node(tree, mlp, "act_fn", NULL, "SiLUActivation", NULL, -1, L);
        } else {
            int64_t S = (int64_t)m->moe_inter * m->shared;
            int mlp = h->tree_node(tree, lay, "mlp", NULL, "KimiLinearMoE", NULL, NNT_MODULE_MLP, L);
            int ex = h->tree_node(tree, mlp, "experts", NULL, "KimiLinearExperts", NULL, -1, L);
            h->tree_node(tree, ex, "act_fn", NULL, "SiLUActivation", NULL, -1, L);
            h->tree_node(tree, mlp, "gate", "router", "KimiLinearTopkRouter", NULL, -1, L);
            if (m->shared > 0) {
                int sh = h->tree_node(tree, mlp, "shared_experts", NULL, "KimiLinearMLP", NULL, -1, L);
                h->tree_node(tree, sh, "gate_proj", NULL, "Linear", fam_linear_detail(d, sizeof d, H, S), -1, L);
                h->tree_node(tree, sh, "up_proj", NULL, "Linear", fam_linear_detail(d, sizeof d, H, S), -1, L);
                h->tree_node(tree, sh, "down_proj", NULL, "Linear", fam_linear_detail(d, sizeof d, S, H), -1, L);
                h->tree_node(tree, sh, "act_fn", NULL, "SiLUActivation", NULL, -1, L);
            }
        }
        h->tree_node(tree, lay, "input_layernorm", NULL, "KimiLinearRMSNorm", fam_norm_detail(d, sizeof d, H, m->eps), -1, L);
        if (h->tree_node(tree, lay, "post_attention_layernorm", NULL, "KimiLinearRMSNorm",
                         fam_norm_detail(d, sizeof d, H, m->eps), -1, L) < 0)
            return h->set_error(err, NNT_ERR_OUT_OF_MEMORY, "no memory for the module tree");
    }
    if (h->tree_node(tree, root, "norm", NULL, "KimiLinearRMSNorm", fam_norm_detail(d, sizeof d, H, m->eps), -1, -1) < 0)
        return h->set_error(err, NNT_ERR_OUT_OF_MEMORY, "no memory for the module tree");
    return NNT_OK;
}

static nnt_status kl_forward(void *model, nnt_run *run, const nnt_forward_args *args, nnt_error *err)
{
    kl_model *m = model;
    return fam_decoder_forward(&m->env, run, args, &m->dec, err);
}

static nnt_status kl_project(void *model, nnt_run *run, const nnt_tensor *x, int streams, nnt_tensor *logits,
                             nnt_error *err)
{
    kl_model *m = model;
    (void)streams; /* one residual stream */
    return fam_decoder_project(&m->env, run, &m->dec, x, logits, err);
}

static void kl_cache_free(void *model, void *cache)
{
    kl_model *m = model;
    kl_cache *c = cache;
    if (!c) return;
    fam_layer_caches_free(&m->env, c->kv);
    if (c->kda)
        for (int l = 0; l < c->layers; l++) {
            for (int i = 0; i < 3; i++)
                if (c->kda[l].conv[i].data) m->env.be->free(m->env.be_ctx, c->kda[l].conv[i].data);
            if (c->kda[l].rec.data) m->env.be->free(m->env.be_ctx, c->kda[l].rec.data);
        }
    free(c->kda);
    free(c);
}

static nnt_status kl_cache_new(void *model, int batch, int capacity, void **cache, nnt_error *err)
{
    kl_model *m = model;
    const fam_env *env = &m->env;
    kl_cache *c = calloc(1, sizeof *c);
    int *heads = calloc((size_t)m->layers, sizeof(int) * 4);
    if (c) c->kda = calloc((size_t)m->layers, sizeof *c->kda);
    if (!c || !heads || !c->kda) {
        free(heads);
        if (c) free(c->kda);
        free(c);
        return env->core->set_error(err, NNT_ERR_OUT_OF_MEMORY, "no memory");
    }
    c->layers = m->layers;
    int *dk = heads + m->layers, *dv = dk + m->layers, *keep = dv + m->layers;
    for (int l = 0; l < m->layers; l++) {
        int mla = m->l[l].kind == MLA;
        heads[l] = m->heads;
        dk[l] = m->nope + m->rope;
        dv[l] = m->v_dim;
        keep[l] = mla && l >= m->first_block && l < m->end_block ? capacity : 0; /* none for another stage's */
    }
    nnt_status st = fam_layer_caches_new(env, m->layers, batch, heads, dk, dv, keep, &c->kv, err);
    free(heads);
    int64_t P = (int64_t)m->lin_heads * m->lin_dim, W1 = m->conv_w - 1, D = m->lin_dim;
    for (int l = 0; l < m->layers && st == NNT_OK; l++) {
        if (m->l[l].kind != KDA || l < m->first_block || l >= m->end_block) continue;
        kda_state *ks = &c->kda[l];
        for (int i = 0; i < 3 && st == NNT_OK; i++) {
            ks->conv[i] = (nnt_tensor){.dtype = NNT_F32, .ndim = 3, .shape = {batch, W1 > 0 ? W1 : 1, P}};
            st = env->be->alloc(env->be_ctx, (size_t)nnt_tensor_numel(&ks->conv[i]) * sizeof(float), &ks->conv[i].data, err);
            if (st == NNT_OK) st = env->be->fill(env->be_ctx, &ks->conv[i], 0.0f, err);
        }
        ks->rec = (nnt_tensor){.dtype = NNT_F32, .ndim = 4, .shape = {batch, m->lin_heads, D, D}};
        if (st == NNT_OK) st = env->be->alloc(env->be_ctx, (size_t)nnt_tensor_numel(&ks->rec) * sizeof(float), &ks->rec.data, err);
        if (st == NNT_OK) st = env->be->fill(env->be_ctx, &ks->rec, 0.0f, err);
    }
    if (st != NNT_OK) {
        kl_cache_free(m, c);
        return st;
    }
    *cache = c;
    return NNT_OK;
}

/* Block l's weight and cache bytes for the planner. A latent-attention block: q_proj,
 * kv_a_proj_with_mqa, kv_a_layernorm, kv_b_proj, o_proj, cached as heads keys of nope + rope and
 * values of v_head_dim for every token. A Kimi Delta Attention block: q, k, v [P, H], o_proj
 * [H, P], b_proj [heads, H], the forget gate's and output gate's two low-rank factors, the three
 * convolutions [P, kernel], A_log, dt_bias and o_norm, cached as the recurrent state [heads,
 * head_dim, head_dim] and three convolution states of kernel - 1 inputs of P channels (float32).
 * The MLP: a mixture (router as stored, float32 selection bias, experts, shared experts) or the
 * dense MLP. */
static void kl_block_costs(const kl_model *m, const fam_encoding *e, nnt_cost_args *args, int l, int kind, int mlp_kind)
{
    int64_t H = m->hidden, LH = m->lin_heads, LD = m->lin_dim, P = LH * LD, K = m->conv_w, E = m->experts;
    int64_t nope = m->nope, rope = m->rope, vd = m->v_dim, lora = m->kv_lora, heads = m->heads, MI = m->moe_inter;
    uint64_t w = fam_cost_vector(e, 2 * H), c;
    if (kind == MLA) {
        w += fam_cost_matrix(e, heads * (nope + rope), H) + fam_cost_matrix(e, lora + rope, H) + fam_cost_vector(e, lora) +
             fam_cost_matrix(e, heads * (nope + vd), lora) + fam_cost_matrix(e, H, heads * vd);
        c = fam_cost_kv_cache(args->batch, heads, nope + rope, vd, args->context);
    } else {
        w += 3 * fam_cost_matrix(e, P, H) + fam_cost_matrix(e, H, P) + fam_cost_matrix(e, LH, H) +
             2 * (fam_cost_matrix(e, LD, H) + fam_cost_matrix(e, P, LD)) + fam_cost_vector(e, 3 * P * K) +
             fam_cost_vector(e, LH) + fam_cost_vector(e, P) + fam_cost_vector(e, LD);
        c = fam_cost_f32(args->batch * (3 * (K > 1 ? K - 1 : 1) * P + LH * LD * LD));
    }
    w += mlp_kind == SPARSE ? fam_cost_vector(e, E * H) + fam_cost_f32(E) + fam_cost_experts(e, E, MI, H) +
                                  (m->shared ? fam_cost_mlp(e, MI * m->shared, H) : 0)
                            : fam_cost_mlp(e, m->inter, H);
    args->weight_bytes[l] = w;
    args->cache_bytes[l] = c;
}

/* The planner's byte model (nnt_cost_args) from config.json alone, block by block. */
static nnt_status kl_costs(nnt_cost_args *args, nnt_error *err)
{
    kl_model m = {0};
    m.env.core = args->core;
    fam_encoding e;
    int *kinds = NULL, *mlp_kinds = NULL;
    nnt_status st = read_config(&m, args->ckpt, err);
    if (st == NNT_OK) st = fam_cost_blocks(args, m.layers, err);
    if (st == NNT_OK) {
        kinds = calloc((size_t)m.layers, sizeof *kinds);
        mlp_kinds = calloc((size_t)m.layers, sizeof *mlp_kinds);
        if (!kinds || !mlp_kinds) st = args->core->set_error(err, NNT_ERR_OUT_OF_MEMORY, "no memory");
    }
    if (st == NNT_OK) st = read_layer_kinds(&m, args->ckpt, kinds, mlp_kinds, err);
    if (st == NNT_OK) st = fam_cost_encoding(args, &e, err);
    for (int l = 0; st == NNT_OK && l < args->n_blocks; l++) kl_block_costs(&m, &e, args, l, kinds[l], mlp_kinds[l]);
    if (st == NNT_OK) fam_cost_readout(args, &e, m.vocab, m.hidden, m.tied);
    free(kinds);
    free(mlp_kinds);
    return st;
}

NNT_PLUGIN_EXPORT const nnt_family_descriptor nnt_family_plugin = {
    .header = NNT_PLUGIN_HEADER(nnt_family_descriptor, NNT_PLUGIN_FAMILY, "kimi_linear", NNT_VERSION_STRING,
                                      "Kimi-Linear (KimiLinearForCausalLM): Kimi Delta Attention and latent attention"),
    .architectures = ARCHS,
    .model_types = TYPES,
    .renames = RENAMES,
    .load = kl_load,
    .unload = kl_unload,
    .info = kl_info,
    .value_info = kl_value_info,
    .build_tree = kl_build_tree,
    .forward = kl_forward,
    .project = kl_project,
    .cache_new = kl_cache_new,
    .cache_free = kl_cache_free,
    .ops_needed = NNT_OPS_DECODER | NNT_OPS_RECURRENT,
    .costs = kl_costs,
    .tokenizer = &TOKENIZER,
};
