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
 * docs/plugin-guide.md. The modules and tensors are declared once, in KL_ARCH (the kit's
 * architecture table): binding, the printout, the planner's weight bytes and the reasons for the
 * mixer a block lacks are read from it. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <nnt/nnt_family_kit.h>
#include <nnt/nnt_version.h> /* the plugin reports nnt's version */

enum { KDA = 0, MLA = 1 };
enum { DENSE = 0, SPARSE = 1 };

/* A block's weights, bound from KL_ARCH (fam_arch_bind) but for the convolutions (bind_conv). */
typedef struct kda_w {
    nnt_tensor q_proj, k_proj, v_proj;     /* [P, H] */
    nnt_tensor conv_q, conv_k, conv_v;     /* [P, W] views */
    nnt_tensor f_a, f_b;                   /* [hd, H], [P, hd] */
    nnt_tensor b_proj, g_a, g_b;           /* [heads, H], [hd, H], [P, hd] */
    nnt_tensor o_norm, o_proj;             /* [hd], [H, P] */
    float *dt_bias, *a_log;                /* host F32 [P], [heads] (owned by the env) */
    nnt_tensor dt_bias_t, a_log_t;         /* the same on the backend, [P] and [heads] */
} kda_w;

typedef struct mla_w {
    nnt_tensor q_proj, kv_a, kv_a_norm, kv_b, o_proj;
    fam_attn attn;
} mla_w;

typedef struct kl_layer {
    int kind, mlp_kind; /* KDA or MLA; DENSE or SPARSE (read_layer_kinds) */
    nnt_tensor in_norm, post_norm;
    kda_w kda;
    mla_w mla;
    fam_expert dense;
    fam_moe moe;       /* router, selection bias, experts (the env's array) and shared experts */
    float *bias_host;  /* F32 host copy of e_score_correction_bias (owned by the env) */
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
    kl_layer *l; /* [layers]: every block's kinds; the weights of the bound blocks only */
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

/* Each block's mixer (KDA or MLA) and MLP (DENSE or SPARSE) into m->l[0..layers), from
 * config.json: layer_types or the hub's 1-indexed lists, and mlp_layer_types or
 * first_k_dense_replace and moe_layer_freq. Errors: NNT_ERR_CONFIG naming config.json and the key. */
static nnt_status read_layer_kinds(kl_model *m, const nnt_checkpoint *ck, nnt_error *err)
{
    const nnt_core_api *h = m->env.core;
    int64_t v[4096];
    int n = 0;
    if (h->cfg_has(ck, "layer_types")) {
        CK(h->cfg_int_list(ck, "layer_types", KIND_NAMES, 2, v, 4096, &n, err));
        if (n < m->layers)
            return h->set_error(err, NNT_ERR_CONFIG, "%s: 'layer_types' has %d entries, num_hidden_layers is %d",
                                h->cfg_path(ck), n, m->layers);
        for (int i = 0; i < m->layers; i++) m->l[i].kind = (int)v[i];
    } else if (h->cfg_has(ck, "linear_attn_config.full_attn_layers") && h->cfg_has(ck, "linear_attn_config.kda_layers")) {
        for (int i = 0; i < m->layers; i++) m->l[i].kind = -1;
        const char *lists[2] = {"linear_attn_config.kda_layers", "linear_attn_config.full_attn_layers"};
        for (int k = 0; k < 2; k++) {
            CK(h->cfg_int_list(ck, lists[k], NULL, 0, v, 4096, &n, err));
            for (int i = 0; i < n; i++) {
                if (v[i] < 1 || v[i] > m->layers)
                    return h->set_error(err, NNT_ERR_CONFIG, "%s: %s holds %lld; the lists count blocks from 1 to %d",
                                        h->cfg_path(ck), lists[k], (long long)v[i], m->layers);
                m->l[v[i] - 1].kind = k == 0 ? KDA : MLA; /* 1-indexed in the checkpoint */
            }
        }
        for (int i = 0; i < m->layers; i++)
            if (m->l[i].kind < 0)
                return h->set_error(err, NNT_ERR_CONFIG, "%s: block %d (1-indexed %d) is in neither kda_layers nor full_attn_layers",
                                    h->cfg_path(ck), i, i + 1);
    } else {
        /* transformers' default schedule */
        for (int i = 0; i < m->layers; i++) m->l[i].kind = (i && i % 4 == 0) ? MLA : KDA;
    }
    if (h->cfg_has(ck, "mlp_layer_types")) {
        CK(h->cfg_int_list(ck, "mlp_layer_types", MLP_NAMES, 2, v, 4096, &n, err));
        if (n < m->layers)
            return h->set_error(err, NNT_ERR_CONFIG, "%s: 'mlp_layer_types' has %d entries, num_hidden_layers is %d",
                                h->cfg_path(ck), n, m->layers);
        for (int i = 0; i < m->layers; i++) m->l[i].mlp_kind = (int)v[i];
    } else {
        int dense = 1, freq = 1;
        CK(cfg_i(m, ck, "first_k_dense_replace", 1, 0, &dense, err));
        CK(cfg_i(m, ck, "moe_layer_freq", 1, 0, &freq, err));
        if (freq < 1) freq = 1;
        for (int i = 0; i < m->layers; i++) m->l[i].mlp_kind = (i >= dense && i % freq == 0) ? SPARSE : DENSE;
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

/* The architecture, declared once (the kit's fam_arch): the module tree print(model) shows and,
 * under each module, its checkpoint tensors - where each binds in kl_layer, its shape as indices
 * into the sizes kl_describe gives, how the release stores it, and its spellings, the release's
 * (hub) names first, then transformers'. fam_arch_bind binds a block from it, fam_arch_tree builds
 * the printout, fam_arch_costs adds up the planner's weight bytes and fam_arch_value_info answers
 * for the mixer a block lacks. Bound elsewhere (FAM_BIND_NONE here, still printed and costed): the
 * embedding, final norm and lm_head (fam_bind_readout_stage), and the convolutions, which a
 * checkpoint holds either as one packed [3P, 1, W] tensor (transformers) or as three [P, 1, W]
 * ones (the release), chosen by which exist: bind_conv.
 * Sizes: H hidden, V vocabulary; Kimi Delta Attention: HEADS heads of width D, P = HEADS * D,
 * P3 = 3 P, W the kernel, W1 = W - 1 its padding; latent attention: Q heads * (nope + rope), KV_A
 * kv_lora_rank + rope, LORA kv_lora_rank, KV_B heads * (nope + v_head_dim), O heads * v_head_dim;
 * MLPs: I the dense MLP's width, E experts of width MI, S = MI * num_shared_experts. */
enum { KL_H, KL_V, KL_HEADS, KL_D, KL_P, KL_P3, KL_W, KL_W1, KL_Q, KL_KV_A, KL_LORA, KL_KV_B, KL_O, KL_I, KL_E, KL_MI,
       KL_S, KL_SIZES };
/* traits: a Kimi Delta Attention block (else latent attention), a mixture MLP (else dense), shared
 * experts in the mixture, and tie_word_embeddings (model-wide: lm_head is the embedding) */
enum { KL_KDA = 1u << 0, KL_SPARSE = 1u << 1, KL_SHARED = 1u << 2, KL_TIED = 1u << 3 };

/* a linear weight [rows, cols] and a norm's gain [width], bound into kl_layer's `member`, under
 * the spellings that follow */
#define KL_LINEAR(member, rows, cols, ...)                                                                             \
    {.name = {__VA_ARGS__}, .store = FAM_STORE_LINEAR, .field = offsetof(kl_layer, member), .ndim = 2,                \
     .size = {rows, cols}}
#define KL_GAIN(member, width, ...)                                                                                    \
    {.name = {__VA_ARGS__}, .store = FAM_STORE_PLAIN, .field = offsetof(kl_layer, member), .ndim = 1, .size = {width}}
/* a leaf Linear module holding one linear weight */
#define KL_LINEAR_ROW(d, native_name, member, rows, cols, ...)                                                         \
    {.depth = d, .native = native_name, .cls = "Linear", .detail = FAM_DETAIL_LINEAR,                                  \
     .tensors = {KL_LINEAR(member, rows, cols, __VA_ARGS__)}}
/* the same with the standard values its input and output are (native values: 0 for none) */
#define KL_LINEAR_ROW_AS(d, native_name, member, rows, cols, in, out, in_edit, ...)                                    \
    {.depth = d, .native = native_name, .cls = "Linear", .detail = FAM_DETAIL_LINEAR,                                  \
     .tensors = {KL_LINEAR(member, rows, cols, __VA_ARGS__)}, .alias_in = in, .alias_out = out, .alias_in_edit = in_edit}
#define KL_NORM_ROW(d, native_name, member, width, ...)                                                                \
    {.depth = d, .native = native_name, .cls = "KimiLinearRMSNorm", .detail = FAM_DETAIL_NORM,                         \
     .tensors = {KL_GAIN(member, width, __VA_ARGS__)}}
/* a KDA tensor under self_attn, or (transformers) under self_attn.forget_gate */
#define KL_FG(leaf) "model.layers.%d.self_attn." leaf, "model.layers.%d.self_attn.forget_gate." leaf
/* a shared expert's projection under block_sparse_moe (the release), or mlp (transformers) */
#define KL_SHARED_NAMES(proj)                                                                                          \
    "model.layers.%d.block_sparse_moe.shared_experts." proj ".weight",                                                 \
        "model.layers.%d.mlp.shared_experts." proj ".weight"

/* one tensor per expert (the release's w1/w3/w2, or gate/up/down), or transformers' fused 3-D ones */
static const fam_module KL_MODULES[] = {
    {.depth = 0, .native = "model", .cls = "KimiLinearForCausalLM"},
    {.depth = 1, .native = "lm_head", .cls = "Linear", .detail = FAM_DETAIL_LINEAR,
     .tensors = {{.name = {"lm_head.weight"}, .store = FAM_STORE_PLAIN, .bind = FAM_BIND_NONE, .ndim = 2,
                  .size = {KL_V, KL_H}, .unless = KL_TIED}},
     .alias_in = FAM_ALIAS(NNT_VALUE_FINAL_NORM_OUTPUT), .alias_out = FAM_ALIAS(NNT_VALUE_LM_HEAD_OUTPUT), .alias_in_edit = 1},
    {.depth = 1, .native = "embed_tokens", .cls = "Embedding", .detail = FAM_DETAIL_EMBEDDING,
     .tensors = {{.name = {"model.embed_tokens.weight"}, .store = FAM_STORE_PLAIN, .bind = FAM_BIND_NONE, .ndim = 2,
                  .size = {KL_V, KL_H}, .first_stage = 1}},
     .alias_in = FAM_ALIAS(NNT_VALUE_INPUT_IDS), .alias_out = FAM_ALIAS(NNT_VALUE_TOKEN_EMBEDDINGS), .alias_in_edit = 1},
    {.depth = 1, .native = "layers", .cls = "ModuleList"},
    {.depth = 2, .native = "layers", .cls = "KimiLinearDecoderLayer", .block = 1},
    /* Kimi Delta Attention (nnterp's linear_attn; transformers names it self_attn too) */
    {.depth = 3, .native = "self_attn", .cls = "KimiLinearDeltaAttention", .module = NNT_MODULE_LINEAR_ATTN,
     .when = KL_KDA,
     .absent = "this block runs latent attention (self_attn): it has no linear_attn mixer and no recurrent state",
     .alias_in = FAM_ALIAS(NNT_VALUE_ATTENTION_NORM_OUTPUT), .alias_out = FAM_ALIAS(NNT_VALUE_LIN_OUTPUT), .alias_in_edit = 1},
    KL_LINEAR_ROW(4, "q_proj", kda.q_proj, KL_P, KL_H, "model.layers.%d.self_attn.q_proj.weight"),
    KL_LINEAR_ROW(4, "k_proj", kda.k_proj, KL_P, KL_H, "model.layers.%d.self_attn.k_proj.weight"),
    KL_LINEAR_ROW(4, "v_proj", kda.v_proj, KL_P, KL_H, "model.layers.%d.self_attn.v_proj.weight"),
    /* q, k and v's depthwise convolutions, costed as one [3P, W] (bind_conv binds either layout) */
    {.depth = 4, .native = "conv1d", .cls = "Conv1d", .detail = FAM_DETAIL_TEXT,
     .text = "%lld, %lld, kernel_size=(%lld,), stride=(1,), padding=(%lld,), groups=%lld, bias=False",
     .dims = {KL_P3, KL_P3, KL_W, KL_W1, KL_P3},
     .tensors = {{.name = {"model.layers.%d.self_attn.conv1d.weight"}, .store = FAM_STORE_PLAIN, .bind = FAM_BIND_NONE,
                  .ndim = 2, .size = {KL_P3, KL_W}}}},
    /* the forget gate's per-channel bias and per-head log decay rates, any shape of that count
     * (A_log is [1, 1, heads, 1] in the release, [heads, 1] in transformers) */
    {.depth = 4, .native = "forget_gate", .cls = "KimiLinearForgetGate",
     .alias_in = FAM_ALIAS(NNT_VALUE_ATTENTION_NORM_OUTPUT), .alias_out = FAM_ALIAS(NNT_VALUE_LIN_DECAYS),
     .tensors = {{.name = {KL_FG("dt_bias")}, .store = FAM_STORE_PLAIN, .bind = FAM_BIND_VECTOR,
                  .field = offsetof(kl_layer, kda.dt_bias_t), .host = offsetof(kl_layer, kda.dt_bias), .ndim = 1,
                  .size = {KL_P}},
                 {.name = {KL_FG("A_log")}, .store = FAM_STORE_PLAIN, .bind = FAM_BIND_VECTOR,
                  .field = offsetof(kl_layer, kda.a_log_t), .host = offsetof(kl_layer, kda.a_log), .ndim = 1,
                  .size = {KL_HEADS}}}},
    KL_LINEAR_ROW(5, "f_a_proj", kda.f_a, KL_D, KL_H, KL_FG("f_a_proj.weight")),
    KL_LINEAR_ROW(5, "f_b_proj", kda.f_b, KL_P, KL_D, KL_FG("f_b_proj.weight")),
    KL_LINEAR_ROW(4, "b_proj", kda.b_proj, KL_HEADS, KL_H, "model.layers.%d.self_attn.b_proj.weight"),
    KL_LINEAR_ROW(4, "g_a_proj", kda.g_a, KL_D, KL_H, "model.layers.%d.self_attn.g_a_proj.weight"),
    KL_LINEAR_ROW(4, "g_b_proj", kda.g_b, KL_P, KL_D, "model.layers.%d.self_attn.g_b_proj.weight"),
    /* its output is o_proj's input */
    {.depth = 4, .native = "o_norm", .cls = "KimiLinearRMSNormGated",
     .tensors = {KL_GAIN(kda.o_norm, KL_D, "model.layers.%d.self_attn.o_norm.weight")},
     .alias_in = FAM_ALIAS(NNT_VALUE_LIN_HEAD_OUTPUTS), .alias_in_edit = 1, .same_out = "self_attn.o_proj"},
    KL_LINEAR_ROW_AS(4, "o_proj", kda.o_proj, KL_H, KL_P, 0, FAM_ALIAS(NNT_VALUE_LIN_OUTPUT), 0,
                     "model.layers.%d.self_attn.o_proj.weight"),
    /* latent attention without rotary */
    {.depth = 3, .native = "self_attn", .cls = "KimiLinearAttention", .module = NNT_MODULE_SELF_ATTN, .unless = KL_KDA,
     .absent = "this block mixes tokens with Kimi Delta Attention, served as linear_attn; it has no self_attn (no "
               "softmax pattern, queries or keys of that kind)",
     .alias_in = FAM_ALIAS(NNT_VALUE_ATTENTION_NORM_OUTPUT), .alias_out = FAM_ALIAS(NNT_VALUE_ATTN_OUTPUT), .alias_in_edit = 1},
    KL_LINEAR_ROW(4, "q_proj", mla.q_proj, KL_Q, KL_H, "model.layers.%d.self_attn.q_proj.weight"),
    KL_LINEAR_ROW(4, "kv_a_proj_with_mqa", mla.kv_a, KL_KV_A, KL_H,
                  "model.layers.%d.self_attn.kv_a_proj_with_mqa.weight"),
    /* the latent's norm keeps the default epsilon whatever rms_norm_eps says */
    {.depth = 4, .native = "kv_a_layernorm", .cls = "KimiLinearRMSNorm", .detail = FAM_DETAIL_NORM, .eps = 1e-6,
     .tensors = {KL_GAIN(mla.kv_a_norm, KL_LORA, "model.layers.%d.self_attn.kv_a_layernorm.weight")}},
    KL_LINEAR_ROW(4, "kv_b_proj", mla.kv_b, KL_KV_B, KL_LORA, "model.layers.%d.self_attn.kv_b_proj.weight"),
    KL_LINEAR_ROW_AS(4, "o_proj", mla.o_proj, KL_H, KL_O, FAM_ALIAS(NNT_VALUE_ATTN_PREMIX), FAM_ALIAS(NNT_VALUE_ATTN_OUTPUT),
                     1, "model.layers.%d.self_attn.o_proj.weight"),
    /* the dense MLP: under mlp in the release, under block_sparse_moe in transformers 5.24 */
    {.depth = 3, .native = "mlp", .cls = "KimiLinearMLP", .module = NNT_MODULE_MLP, .unless = KL_SPARSE,
     .alias_in = FAM_ALIAS(NNT_VALUE_MLP_INPUT), .alias_out = FAM_ALIAS(NNT_VALUE_MLP_OUTPUT), .alias_in_edit = 1},
    KL_LINEAR_ROW(4, "gate_proj", dense.gate, KL_I, KL_H, "model.layers.%d.mlp.gate_proj.weight",
                  "model.layers.%d.block_sparse_moe.gate_proj.weight"),
    KL_LINEAR_ROW(4, "up_proj", dense.up, KL_I, KL_H, "model.layers.%d.mlp.up_proj.weight",
                  "model.layers.%d.block_sparse_moe.up_proj.weight"),
    KL_LINEAR_ROW_AS(4, "down_proj", dense.down, KL_H, KL_I, FAM_ALIAS(NNT_VALUE_MLP_NEURONS),
                     FAM_ALIAS(NNT_VALUE_MLP_OUTPUT), 1, "model.layers.%d.mlp.down_proj.weight",
                     "model.layers.%d.block_sparse_moe.down_proj.weight"),
    {.depth = 4, .native = "act_fn", .cls = "SiLUActivation", .alias_out = FAM_ALIAS(NNT_VALUE_MLP_ACTIVATION),
     .same_in = "mlp.gate_proj", .alias_in_edit = 1},
    /* the mixture: under block_sparse_moe in the release, under mlp in transformers */
    {.depth = 3, .native = "mlp", .cls = "KimiLinearMoE", .module = NNT_MODULE_MLP, .when = KL_SPARSE,
     .alias_in = FAM_ALIAS(NNT_VALUE_MLP_INPUT), .alias_out = FAM_ALIAS(NNT_VALUE_MLP_OUTPUT), .alias_in_edit = 1},
    {.depth = 4, .native = "experts", .cls = "KimiLinearExperts",
     .tensors = {{.store = FAM_STORE_EXPERTS, .bind = FAM_BIND_EXPERTS, .field = offsetof(kl_layer, moe.experts),
                  .ndim = 3, .size = {KL_E, KL_MI, KL_H}, .experts = &fam_experts_block_sparse_moe}},
     .alias_in = FAM_ALIAS(NNT_VALUE_MLP_INPUT), .alias_out = FAM_ALIAS(NNT_VALUE_ROUTED_OUTPUT)},
    {.depth = 5, .native = "act_fn", .cls = "SiLUActivation"},
    /* the router as the release stores it, and its optional float32 selection bias */
    {.depth = 4, .native = "gate", .cls = "KimiLinearTopkRouter",
     .tensors = {{.name = {"model.layers.%d.block_sparse_moe.gate.weight", "model.layers.%d.mlp.gate.weight"},
                  .store = FAM_STORE_PLAIN, .field = offsetof(kl_layer, moe.router), .ndim = 2, .size = {KL_E, KL_H}},
                 {.name = {"model.layers.%d.block_sparse_moe.gate.e_score_correction_bias",
                           "model.layers.%d.mlp.gate.e_score_correction_bias"},
                  .store = FAM_STORE_F32, .bind = FAM_BIND_VECTOR, .field = offsetof(kl_layer, moe.bias),
                  .host = offsetof(kl_layer, bias_host), .ndim = 1, .size = {KL_E}, .optional = 1}},
     .alias_in = FAM_ALIAS(NNT_VALUE_MLP_INPUT), .alias_out = FAM_ALIAS(NNT_VALUE_ROUTER_LOGITS)},
    {.depth = 4, .native = "shared_experts", .cls = "KimiLinearMLP", .when = KL_SHARED,
     .alias_in = FAM_ALIAS(NNT_VALUE_MLP_INPUT), .alias_out = FAM_ALIAS(NNT_VALUE_SHARED_EXPERT_OUTPUT)},
    KL_LINEAR_ROW(5, "gate_proj", moe.shared.gate, KL_S, KL_H, KL_SHARED_NAMES("gate_proj")),
    KL_LINEAR_ROW(5, "up_proj", moe.shared.up, KL_S, KL_H, KL_SHARED_NAMES("up_proj")),
    KL_LINEAR_ROW_AS(5, "down_proj", moe.shared.down, KL_H, KL_S, 0, FAM_ALIAS(NNT_VALUE_SHARED_EXPERT_OUTPUT), 0,
                     KL_SHARED_NAMES("down_proj")),
    {.depth = 5, .native = "act_fn", .cls = "SiLUActivation", .same_in = "mlp.shared_experts.gate_proj", .alias_in_edit = 1},
    {.depth = 3, .native = "input_layernorm", .cls = "KimiLinearRMSNorm", .detail = FAM_DETAIL_NORM,
     .tensors = {KL_GAIN(in_norm, KL_H, "model.layers.%d.input_layernorm.weight")},
     .alias_out = FAM_ALIAS(NNT_VALUE_ATTENTION_NORM_OUTPUT)},
    {.depth = 3, .native = "post_attention_layernorm", .cls = "KimiLinearRMSNorm", .detail = FAM_DETAIL_NORM,
     .tensors = {KL_GAIN(post_norm, KL_H, "model.layers.%d.post_attention_layernorm.weight")},
     .alias_out = FAM_ALIAS(NNT_VALUE_MLP_NORM_OUTPUT)},
    /* its input is the last block's layer_output, a value of a block, not of the model */
    {.depth = 1, .native = "norm", .cls = "KimiLinearRMSNorm", .detail = FAM_DETAIL_NORM,
     .tensors = {{.name = {"model.norm.weight"}, .store = FAM_STORE_PLAIN, .bind = FAM_BIND_NONE, .ndim = 1,
                  .size = {KL_H}}},
     .alias_out = FAM_ALIAS(NNT_VALUE_FINAL_NORM_OUTPUT)},
};

/* Block `layer`'s traits (its mixer and MLP, shared experts, tied embeddings) and the sizes, all
 * from config.json; layer -1: the model-wide traits. `self` is a kl_model whose l[] holds every
 * block's kinds (load's, or costs'). */
static void kl_describe(const void *self, int layer, fam_block_facts *out)
{
    const kl_model *m = self;
    int64_t P = (int64_t)m->lin_heads * m->lin_dim;
    out->traits = m->tied ? KL_TIED : 0;
    if (layer >= 0) {
        const kl_layer *ly = &m->l[layer];
        out->traits |= (ly->kind == KDA ? KL_KDA : 0) | (ly->mlp_kind == SPARSE ? KL_SPARSE : 0) |
                       (m->shared > 0 ? KL_SHARED : 0);
    }
    out->eps = m->eps;
    out->size[KL_H] = m->hidden;
    out->size[KL_V] = m->vocab;
    out->size[KL_HEADS] = m->lin_heads;
    out->size[KL_D] = m->lin_dim;
    out->size[KL_P] = P;
    out->size[KL_P3] = 3 * P;
    out->size[KL_W] = m->conv_w;
    out->size[KL_W1] = m->conv_w - 1;
    out->size[KL_Q] = (int64_t)m->heads * (m->nope + m->rope);
    out->size[KL_KV_A] = (int64_t)m->kv_lora + m->rope;
    out->size[KL_LORA] = m->kv_lora;
    out->size[KL_KV_B] = (int64_t)m->heads * (m->nope + m->v_dim);
    out->size[KL_O] = (int64_t)m->heads * m->v_dim;
    out->size[KL_I] = m->inter;
    out->size[KL_E] = m->experts;
    out->size[KL_MI] = m->moe_inter;
    out->size[KL_S] = (int64_t)m->moe_inter * m->shared;
}

static const fam_arch KL_ARCH = {
    .modules = KL_MODULES,
    .n_modules = (int)(sizeof KL_MODULES / sizeof KL_MODULES[0]),
    .n_sizes = KL_SIZES,
    .renames = RENAMES,
    .describe = kl_describe,
};

/* The convolutions of KDA block L, [P, W] views of q, k and v: transformers' one packed
 * [3P, 1, W] tensor ([q | k | v] along its rows) when the checkpoint holds it, else the release's
 * three [P, 1, W] ones. Errors: as fam_weight (a missing split tensor is named). */
static nnt_status bind_conv(kl_model *m, const nnt_checkpoint *ck, int L, kda_w *w, nnt_error *err)
{
    const fam_env *env = &m->env;
    int64_t P = (int64_t)m->lin_heads * m->lin_dim, W = m->conv_w;
    char n[192];
    snprintf(n, sizeof n, "model.layers.%d.self_attn.conv1d.weight", L);
    if (env->core->has_tensor(ck, n)) {
        nnt_tensor packed;
        CK(fam_weight(env, ck, n, 3, (int64_t[]){3 * P, 1, W}, &packed, err));
        packed.ndim = 2;
        packed.shape[1] = W;
        packed.shape[0] = P;
        w->conv_q = w->conv_k = w->conv_v = packed;
        w->conv_k.data = (char *)packed.data + nnt_dtype_span(packed.dtype, P * W);
        w->conv_v.data = (char *)packed.data + nnt_dtype_span(packed.dtype, 2 * P * W);
        return NNT_OK;
    }
    static const char *const split[3] = {"model.layers.%d.self_attn.q_conv1d.weight",
                                         "model.layers.%d.self_attn.k_conv1d.weight",
                                         "model.layers.%d.self_attn.v_conv1d.weight"};
    nnt_tensor *cv[3] = {&w->conv_q, &w->conv_k, &w->conv_v};
    for (int i = 0; i < 3; i++) {
        snprintf(n, sizeof n, split[i], L);
        CK(fam_weight(env, ck, n, 3, (int64_t[]){P, 1, W}, cv[i], err));
        cv[i]->ndim = 2;
        cv[i]->shape[1] = W;
    }
    return NNT_OK;
}

/* The latent attention's shape, the same on every MLA block: every head its own keys and values
 * (qk_head_dim wide, of which the rope part is shared), no rotary, softmax scale qk_head_dim^-0.5. */
static void mla_shape(const kl_model *m, const nnt_tensor *o_proj, fam_attn *a)
{
    memset(a, 0, sizeof *a);
    a->num_heads = m->heads;
    a->num_kv_heads = m->heads;
    a->qk_head_dim = m->nope + m->rope;
    a->v_head_dim = m->v_dim;
    a->rot_dim = 0;
    a->scale = 1.0f / sqrtf((float)(m->nope + m->rope));
    if (o_proj) a->o_proj = *o_proj;
}

/* The mixture's routing, which the table does not hold: sigmoid scores, the selection bias for the
 * choice only, group-limited top-k, renormalised weights times routed_scaling_factor, the shared
 * experts when config.json has them. */
static void moe_route(const kl_model *m, fam_moe *moe)
{
    moe->num_experts = m->experts;
    moe->top_k = m->top_k;
    moe->intermediate = m->moe_inter;
    moe->has_shared = m->shared > 0;
    moe->router_f32 = 1; /* transformers' Kimi-Linear router multiplies in float32 (modeling_kimi_linear.py) */
    moe->route = (nnt_route_params){
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
}

/* Block L's weights: the table's tensors, then what it leaves to the family. */
static nnt_status bind_layer(kl_model *m, const nnt_checkpoint *ck, int L, nnt_error *err)
{
    kl_layer *ly = &m->l[L];
    CK(fam_arch_bind(&m->env, &KL_ARCH, m, ck, L, ly, err));
    if (ly->kind == KDA)
        CK(bind_conv(m, ck, L, &ly->kda, err));
    else
        mla_shape(m, &ly->mla.o_proj, &ly->mla.attn);
    if (ly->mlp_kind == SPARSE) moe_route(m, &ly->moe);
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
    const nnt_call_dims dims = {args->batch, args->seq, args->past};
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
        TRY(fam_linear(env, run, L, &dims, &x, projs[i], &raw, err));
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
    TRY(fam_linear(env, run, L, &dims, &x, &w->f_a, &fa, err));
    TRY(fam_linear(env, run, L, &dims, &fa, &w->f_b, &a, err));
    TRY(be->kda_gate(bc, &a, &w->dt_bias_t, &w->a_log_t, &g, err));
    nnt_tensor g4 = fam_view(&g, NNT_SHAPE(B, T, Hh, D));
    TRY(h->emit(run, NNT_VALUE_LIN_DECAYS, L, &g4));
    TRY(fam_alloc(env, run, NNT_F32, &braw, err, NNT_SHAPE(M, Hh)));
    TRY(fam_alloc(env, run, NNT_F32, &beta, err, NNT_SHAPE(M, Hh)));
    TRY(fam_linear(env, run, L, &dims, &x, &w->b_proj, &braw, err));
    TRY(be->sigmoid(bc, &braw, &beta, err));
    nnt_tensor b3 = fam_view(&beta, NNT_SHAPE(B, T, Hh));
    TRY(h->emit(run, NNT_VALUE_LIN_BETAS, L, &b3));
    /* a prompt starts from no state (state_input is None); a continued call from the carried one.
     * When no request reads or edits state_input (or state_output), the rule reads (or writes)
     * the cache's state itself, in place when both: a decoding step then moves its states
     * ([B, heads, D, D] float32, 2 MiB a block at the release's widths) once, not five times. */
    int in_place_in = carried && !h->wants(run, NNT_VALUE_LIN_STATE_INPUT, L);
    int in_place_out = ks && !h->wants(run, NNT_VALUE_LIN_STATE_OUTPUT, L);
    if (in_place_in) {
        s_in = ks->rec;
        TRY(h->emit(run, NNT_VALUE_LIN_STATE_INPUT, L, &s_in));
    } else if (carried) {
        TRY(fam_alloc(env, run, NNT_F32, &s_in, err, NNT_SHAPE(B, Hh, D, D)));
        TRY(be->copy(bc, &ks->rec, &s_in, err));
        TRY(h->emit(run, NNT_VALUE_LIN_STATE_INPUT, L, &s_in));
    } else {
        TRY(h->emit(run, NNT_VALUE_LIN_STATE_INPUT, L, NULL));
    }
    TRY(fam_alloc(env, run, NNT_F32, &o, err, NNT_SHAPE(B, T, Hh, D)));
    if (in_place_out)
        s_out = ks->rec;
    else
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
        if (!in_place_out) TRY(be->copy(bc, &s_out, &ks->rec, err));
        ks->started = 1;
    }
    /* output gate and the gated RMSNorm per head, then o_proj */
    TRY(fam_alloc(env, run, NNT_F32, &ga, err, NNT_SHAPE(M, D)));
    TRY(fam_alloc(env, run, NNT_F32, &gate, err, NNT_SHAPE(M, P)));
    TRY(fam_alloc(env, run, NNT_F32, &normed, err, NNT_SHAPE(M, P)));
    TRY(fam_linear(env, run, L, &dims, &x, &w->g_a, &ga, err));
    TRY(fam_linear(env, run, L, &dims, &ga, &w->g_b, &gate, err));
    nnt_tensor oh = fam_view(&o, NNT_SHAPE(M * Hh, D)), gh = fam_view(&gate, NNT_SHAPE(M * Hh, D)), nh = fam_view(&normed, NNT_SHAPE(M * Hh, D));
    TRY(be->rms_norm_gated(bc, &oh, &w->o_norm, &gh, (float)m->eps, &nh, err));
    TRY(fam_linear(env, run, L, &dims, &normed, &w->o_proj, out, err));
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
    const nnt_call_dims dims = {args->batch, args->seq, args->past};
    size_t mark = h->arena_mark(run);
    nnt_status st;
    nnt_tensor q, ckv, c, kv, k, v;
    TRY(fam_alloc(env, run, NNT_F32, &q, err, NNT_SHAPE(M, Hn * qk)));
    TRY(fam_linear(env, run, L, &dims, xn, &w->q_proj, &q, err));
    TRY(fam_alloc(env, run, NNT_F32, &ckv, err, NNT_SHAPE(M, R + rope)));
    TRY(fam_linear(env, run, L, &dims, xn, &w->kv_a, &ckv, err));
    TRY(fam_alloc(env, run, NNT_F32, &c, err, NNT_SHAPE(M, R)));
    TRY(be->copy_cols(bc, &ckv, 0, &c, 0, R, err));
    TRY(fam_norm(env, run, L, &dims, &c, &w->kv_a_norm, 1e-6f, &c, err)); /* the latent's norm uses the default eps */
    TRY(fam_alloc(env, run, NNT_F32, &kv, err, NNT_SHAPE(M, Hn * (nope + Dv))));
    TRY(fam_linear(env, run, L, &dims, &c, &w->kv_b, &kv, err));
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
    fam_env_release(&m->env); /* weights, parameter vectors and the experts' arrays */
    free(m->l);
    free(m);
}

static nnt_status kl_load(const nnt_load_args *args, void **out, nnt_error *err)
{
    kl_model *m = calloc(1, sizeof *m);
    if (!m) return args->core->set_error(err, NNT_ERR_OUT_OF_MEMORY, "no memory");
    fam_env_init(&m->env, args);
    const nnt_checkpoint *ck = args->ckpt;
    nnt_status st = read_config(m, ck, err);
    if (st == NNT_OK) {
        m->l = calloc((size_t)m->layers, sizeof *m->l);
        if (!m->l) st = args->core->set_error(err, NNT_ERR_OUT_OF_MEMORY, "no memory");
    }
    if (st == NNT_OK) st = read_layer_kinds(m, ck, err); /* every block's, another stage's included */
    if (st == NNT_OK) /* a stage's load binds its blocks only */
        st = fam_bind_readout_stage(&m->env, args, m->vocab, m->hidden, m->tied, m->layers, &m->dec, &m->first_block,
                                    &m->end_block, err);
    for (int L = m->first_block; st == NNT_OK && L < m->end_block; L++) st = bind_layer(m, ck, L, err);
    if (st != NNT_OK) {
        kl_unload(m);
        return st;
    }
    fam_decoder_wire(&m->dec, m->layers, m->hidden, m->vocab, m->eps, &m->l[0].in_norm, &m->l[0].post_norm,
                     sizeof(kl_layer), m, kl_mixer, kl_mlp);
    if ((st = fam_env_natives(&m->env, &KL_ARCH, m, m->l, sizeof *m->l, err)) != NNT_OK) {
        kl_unload(m);
        return st;
    }
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

/* The shapes of a KDA block's linear_attn values. */
static void kda_value_info(const kl_model *m, nnt_value_id id, const nnt_call_dims *d, nnt_value_info *out)
{
    int64_t B = d ? d->batch : 0, T = d ? d->seq : 0, H = m->hidden, Hh = m->lin_heads, D = m->lin_dim;
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
}

/* The mlp values of a dense or a mixture block, and why the other kind's are not served. */
static void mlp_value_info(const kl_model *m, const kl_layer *ly, nnt_value_id id, const nnt_call_dims *d,
                           nnt_value_info *out)
{
    int64_t B = d ? d->batch : 0, T = d ? d->seq : 0, H = m->hidden;
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
        return;
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
}

/* The model's and the skeleton's values (fam_decoder_info), the mixer a block lacks (KL_ARCH's
 * reasons), then the block's own mixer and MLP. */
/* The native module values, from KL_ARCH's rows. */
static nnt_status kl_native(const void *model, int i, nnt_native_info *out)
{
    const kl_model *m = model;
    return fam_natives_entry(&m->env, i, out);
}

static nnt_status kl_value_info(const void *model, int layer, nnt_value_id id, const nnt_call_dims *d,
                                nnt_value_info *out)
{
    const kl_model *m = model;
    if (fam_decoder_info(m->hidden, m->vocab, id, d, out)) return NNT_OK;
    if (fam_natives_value_info(&m->env, layer, id, d, out)) return NNT_OK; /* q_proj.output, ... */
    if (fam_arch_value_info(&KL_ARCH, m, layer, id, out)) return NNT_OK;
    const kl_layer *ly = &m->l[layer];
    switch (fam_value_module(id)) {
    case NNT_MODULE_SELF_ATTN: {
        fam_attn a;
        mla_shape(m, NULL, &a);
        fam_attention_info(&a, m->hidden, id, d, out);
        break;
    }
    case NNT_MODULE_LINEAR_ATTN: kda_value_info(m, id, d, out); break;
    default: mlp_value_info(m, ly, id, d, out); break;
    }
    return NNT_OK;
}

/* `nnt print`'s module tree, from KL_ARCH. */
static nnt_status kl_build_tree(const void *model, nnt_tree *tree, nnt_error *err)
{
    const kl_model *m = model;
    return fam_arch_tree(m->env.core, &KL_ARCH, m, m->layers, tree, err);
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

/* What a session keeps for block l, for the planner: a latent-attention block caches keys of
 * nope + rope and values of v_head_dim for each of its heads and every token; a Kimi Delta
 * Attention block its recurrent state [heads, head_dim, head_dim] and three convolution states
 * of kernel - 1 inputs of P channels, all float32 (kl_cache_new). */
static uint64_t kl_cache_bytes(const kl_model *m, const nnt_cost_args *args, int l)
{
    int64_t LH = m->lin_heads, LD = m->lin_dim, P = LH * LD, K = m->conv_w;
    if (m->l[l].kind == MLA) return fam_cost_kv_cache(args->batch, m->heads, (int64_t)m->nope + m->rope, m->v_dim, args->context);
    return fam_cost_f32(args->batch * (3 * (K > 1 ? K - 1 : 1) * P + LH * LD * LD));
}

/* The planner's byte model (nnt_cost_args) from config.json alone: the weights of every tensor
 * KL_ARCH lists for each block's kinds, as the encoding config.json gives stores them
 * (fam_arch_costs), and each block's caches. */
static nnt_status kl_costs(nnt_cost_args *args, nnt_error *err)
{
    kl_model m = {0};
    m.env.core = args->core;
    fam_encoding e;
    nnt_status st = read_config(&m, args->ckpt, err);
    if (st == NNT_OK) st = fam_cost_blocks(args, m.layers, err);
    if (st == NNT_OK) {
        m.l = calloc((size_t)m.layers, sizeof *m.l);
        if (!m.l) st = args->core->set_error(err, NNT_ERR_OUT_OF_MEMORY, "no memory");
    }
    if (st == NNT_OK) st = read_layer_kinds(&m, args->ckpt, err);
    if (st == NNT_OK) st = fam_cost_encoding(args, &e, err);
    if (st == NNT_OK) st = fam_arch_costs(args, &KL_ARCH, &m, &e, err);
    for (int l = 0; st == NNT_OK && l < args->n_blocks; l++) args->cache_bytes[l] = kl_cache_bytes(&m, args, l);
    free(m.l);
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
    .native = kl_native,
};
