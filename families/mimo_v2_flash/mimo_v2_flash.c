/* mimo_v2_flash.c - the MiMo-V2-Flash family plugin (MiMoV2FlashForCausalLM).
 *
 * Llama's pre-norm block. Each block is full or sliding attention (config layer_types, or the
 * hub's hybrid_layer_pattern): a sliding block has its own (by default twice as many)
 * key/value heads, a learned sink logit per query head that joins the softmax as an extra
 * column and is dropped, a window of sliding_window positions counting the query itself, and
 * its own rotary base. Queries and keys are head_dim wide, values v_head_dim wide; values are
 * multiplied by attention_value_scale before attention; NeoX rotary on the first
 * int(head_dim * partial_rotary_factor) dimensions; softmax scale head_dim ** -0.5. The MLP is
 * dense or a mixture (mlp_layer_types, or the hub's moe_layer_freq): DeepSeek-V3's router in
 * float32 - sigmoid scores, the selection bias for the choice only, n_group / topk_group,
 * renormalised weights times routed_scaling_factor - and no shared expert. Multi-token-
 * prediction tensors (model.mtp.*) are never bound. MiMo-V2.5 / V2.6-Flash (MiMoV2ForCausalLM,
 * model_type mimo_v2) is the same model with one fused qkv_proj a block (attention_projection_layout
 * "fused_qkv"): num_key_value_heads chunks [q_r; k_r; v_r], each quantised on its own, unless
 * conversion_metadata.qkv_layout says "global_q_k_v" (one chunk); its MXFP4 experts and bf16 router
 * are read as stored, the router scored in float32 whatever moe_router_dtype says (checked, and
 * reported in the printout's notes with MAX's selected-layer hidden states). Facts and sources:
 * docs/mimo-v2.5-layout.md. Both are declared once, in the kit's architecture table (MV_ARCH),
 * from which the binding, the printout's module tree, the planner's weight bytes and the
 * linear-attention answers are read. Sources:
 * src/transformers/models/mimo_v2_flash/modeling_mimo_v2_flash.py (and its
 * convert_mimo_v2_flash_weights_to_hf.py for the hub's spellings); vllm and sglang's
 * models/mimo_v2_flash.py; the XiaomiMiMo/MiMo-V2-Flash model card. Values:
 * docs/plugin-guide.md. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <nnt/nnt_family_kit.h>
#include <nnt/nnt_version.h> /* the plugin reports nnt's version */

enum { FULL = 0, SLIDING = 1 };
enum { DENSE = 0, SPARSE = 1 };

/* One block's weights: what MV_ARCH binds (fam_arch_bind), the key and value projections and the
 * qkv_proj chunk views the family binds itself, and the attention and mixture built on them. */
typedef struct mv_layer {
    nnt_tensor in_norm, post_norm;
    nnt_tensor q_proj, k_proj, v_proj, o_proj;
    nnt_tensor qkv;    /* fused releases: qkv_proj [chunks, q + k + v rows, hidden] */
    nnt_tensor *chunk; /* fused releases: [chunks] row views of qkv, one chunk each; else NULL */
    float *sinks; /* [heads] host F32, or NULL */
    fam_attn attn;
    fam_expert dense;
    fam_moe moe;      /* router, selection bias and experts bound from MV_ARCH */
    float *bias_host; /* F32 host copy of e_score_correction_bias (owned by the env), or NULL */
} mv_layer;

typedef struct mv_model {
    fam_env env;
    int first_block, end_block; /* the blocks whose weights were bound (a stage's load), and the
                                 * only ones sessions keep caches for */
    int hidden, layers, vocab, inter, moe_inter, experts, top_k, n_group, topk_group, norm_topk;
    int heads[2], kv_heads[2], qk_dim[2], v_dim[2], rot_dim[2], window;
    double theta[2], eps, v_scale, scaling_factor;
    int sinks_on[2];
    int tied;
    int *kind, *mlp_kind; /* [layers]: FULL or SLIDING, DENSE or SPARSE (layer_types, mlp_layer_types) */
    int release;   /* index into ARCHS of the architecture loaded */
    int qkv_chunks; /* fused qkv_proj chunks a block (MiMoV2ForCausalLM), 0 for separate q/k/v */
    const char *router_dtype; /* config.json moe_router_dtype (the checkpoint's string, read during load
                               * only), or NULL when absent */
    char notes[2][512];       /* the printout's notes (mv_note) */
    int n_notes;
    float *inv_freq[2];
    fam_decoder dec;
    mv_layer *l;
} mv_model;

static const char *const ARCHS[] = {"MiMoV2FlashForCausalLM", "MiMoV2ForCausalLM", NULL};
static const char *const TYPES[] = {"mimo_v2_flash", "mimo_v2", NULL};
static const nnt_rename_rule RENAMES[] = {
    {"gate", "router", "MiMoV2FlashTopkRouter"},
    {NULL, NULL, NULL},
};
static const char *const KIND_NAMES[] = {"full_attention", "sliding_attention"};
static const char *const MLP_NAMES[] = {"dense", "sparse"};

#define CK(x)                                                                                                          \
    do {                                                                                                               \
        nnt_status st_ = (x);                                                                                          \
        if (st_ != NNT_OK) return st_;                                                                                 \
    } while (0)

static nnt_status cfg_i(const mv_model *m, const nnt_checkpoint *ck, const char *key, int64_t dflt, int req, int *out,
                        nnt_error *err)
{
    int64_t v;
    CK(m->env.core->cfg_int(ck, key, dflt, req, &v, err));
    *out = (int)v;
    return NNT_OK;
}

/* Reads a per-block list (HF names or hub ints) into kinds[layers]; absent: the default rule. */
static nnt_status read_kinds(mv_model *m, const nnt_checkpoint *ck, const char *hf_key, const char *hub_key,
                             const char *const *names, int *kinds, int dflt_rule, nnt_error *err)
{
    const nnt_core_api *h = m->env.core;
    const char *key = h->cfg_has(ck, hf_key) ? hf_key : h->cfg_has(ck, hub_key) ? hub_key : NULL;
    if (!key) {
        for (int i = 0; i < m->layers; i++)
            kinds[i] = dflt_rule == 0 ? ((i == 0 || (i + 1) % 6 == 0) ? FULL : SLIDING) : (i == 0 ? DENSE : SPARSE);
        return NNT_OK;
    }
    int64_t v[4096];
    int n = 0;
    CK(h->cfg_int_list(ck, key, names, 2, v, 4096, &n, err));
    if (n < m->layers)
        return h->set_error(err, NNT_ERR_CONFIG, "%s: '%s' has %d entries, num_hidden_layers is %d", h->cfg_path(ck), key,
                            n, m->layers);
    for (int i = 0; i < m->layers; i++) {
        if (v[i] != 0 && v[i] != 1)
            return h->set_error(err, NNT_ERR_CONFIG, "%s: '%s'[%d] is %lld, expected 0 or 1", h->cfg_path(ck), key, i,
                                (long long)v[i]);
        kinds[i] = (int)v[i];
    }
    return NNT_OK;
}

/* Which release: config.json's model_type, and for MiMoV2ForCausalLM the fused
 * projection's chunk count (docs/mimo-v2.5-layout.md). */
static nnt_status read_release(mv_model *m, const nnt_checkpoint *ck, nnt_error *err)
{
    const nnt_core_api *h = m->env.core;
    const char *type = NULL, *layout = NULL, *order = NULL;
    m->release = 0; /* ARCHS and TYPES list the releases in the same order */
    CK(h->cfg_string(ck, "model_type", TYPES[0], 0, &type, err));
    for (int i = 0; TYPES[i]; i++)
        if (strcmp(type, TYPES[i]) == 0) m->release = i;
    CK(h->cfg_string(ck, "attention_projection_layout", "split", 0, &layout, err));
    if (strcmp(layout, "split") == 0) {
        m->qkv_chunks = 0;
        return NNT_OK;
    }
    if (strcmp(layout, "fused_qkv") != 0)
        return h->set_error(err, NNT_ERR_UNSUPPORTED, "%s: attention_projection_layout is '%s'; expected 'fused_qkv' or "
                            "'split'", h->cfg_path(ck), layout);
    /* Xiaomi's chunk order has num_key_value_heads chunks (the full blocks' count, sliding
     * blocks too); a re-export that says global_q_k_v holds one plain [Q; K; V] block */
    CK(h->cfg_string(ck, "conversion_metadata.qkv_layout", "chunked", 0, &order, err));
    if (strcmp(order, "global_q_k_v") == 0)
        m->qkv_chunks = 1;
    else if (strcmp(order, "chunked") == 0)
        m->qkv_chunks = m->kv_heads[FULL];
    else
        return h->set_error(err, NNT_ERR_UNSUPPORTED, "%s: conversion_metadata.qkv_layout is '%s'; expected "
                            "'global_q_k_v' or absent (Xiaomi's chunk order)", h->cfg_path(ck), order);
    for (int k = 0; k < 2; k++)
        if (m->qkv_chunks <= 0 || m->heads[k] % m->qkv_chunks || m->kv_heads[k] % m->qkv_chunks)
            return h->set_error(err, NNT_ERR_CONFIG, "%s: the fused qkv_proj has num_key_value_heads = %d chunks, which "
                                "must divide the %s blocks' %d query and %d key/value heads", h->cfg_path(ck),
                                m->qkv_chunks, KIND_NAMES[k], m->heads[k], m->kv_heads[k]);
    return NNT_OK;
}

/* Each attention kind's rotary: partial_rotary_factor and rope_theta from rope_parameters.<kind>,
 * else the hub's keys; only the default rotary. */
static nnt_status read_rotary(mv_model *m, const nnt_checkpoint *ck, nnt_error *err)
{
    const nnt_core_api *h = m->env.core;
    for (int k = 0; k < 2; k++) {
        char key[96];
        double f = 0.334;
        snprintf(key, sizeof key, "rope_parameters.%s.partial_rotary_factor", KIND_NAMES[k]);
        if (h->cfg_has(ck, key))
            CK(h->cfg_float(ck, key, 0.334, 0, &f, err));
        else
            CK(h->cfg_float(ck, "partial_rotary_factor", 0.334, 0, &f, err));
        if (!(f >= 0.0 && f <= 1.0)) /* also before the cast: a huge factor would overflow it */
            return h->set_error(err, NNT_ERR_CONFIG, "%s: partial_rotary_factor is %g; expected the rotary share of a "
                                "head, in [0, 1]", h->cfg_path(ck), f);
        m->rot_dim[k] = (int)(m->qk_dim[k] * f);
        snprintf(key, sizeof key, "rope_parameters.%s.rope_theta", KIND_NAMES[k]);
        const char *hub = k == FULL ? "rope_theta" : "swa_rope_theta";
        if (h->cfg_has(ck, key))
            CK(h->cfg_float(ck, key, 0, 1, &m->theta[k], err));
        else
            CK(h->cfg_float(ck, hub, k == FULL ? 5000000.0 : 10000.0, 0, &m->theta[k], err));
        snprintf(key, sizeof key, "rope_parameters.%s.rope_type", KIND_NAMES[k]);
        const char *rt = "default";
        CK(h->cfg_string(ck, key, "default", 0, &rt, err));
        if (strcmp(rt, "default") != 0)
            return h->set_error(err, NNT_ERR_UNSUPPORTED, "%s: %s is '%s'; only 'default' rotary is supported",
                                h->cfg_path(ck), key, rt);
    }
    return NNT_OK;
}

/* moe_router_dtype (MiMo-V2.5 configs): vLLM computes the router logits in it, SGLang and MAX
 * in float32 whatever it says; nnt scores in float32 like transformers' router (the reference
 * of every fixture) and reads the router weight as stored. Checked, then reported in a note. */
static nnt_status read_router_dtype(mv_model *m, const nnt_checkpoint *ck, nnt_error *err)
{
    const nnt_core_api *h = m->env.core;
    m->router_dtype = NULL;
    if (h->cfg_has(ck, "moe_router_dtype")) {
        CK(h->cfg_string(ck, "moe_router_dtype", NULL, 1, &m->router_dtype, err));
        if (strcmp(m->router_dtype, "float32") != 0 && strcmp(m->router_dtype, "bfloat16") != 0 &&
            strcmp(m->router_dtype, "float16") != 0)
            return h->set_error(err, NNT_ERR_CONFIG, "%s: moe_router_dtype is '%s'; expected 'float32', 'bfloat16' or "
                                "'float16' (or the key absent)", h->cfg_path(ck), m->router_dtype);
    }
    return NNT_OK;
}

/* What config.json's sizes break of the model's rules, in words, or NULL when nothing. */
static const char *config_fault(const mv_model *m)
{
    const char *bad = NULL;
    if (m->hidden <= 0 || m->layers <= 0 || m->vocab <= 0) bad = "hidden_size, num_hidden_layers and vocab_size must be positive";
    for (int k = 0; k < 2 && !bad; k++) {
        if (m->heads[k] <= 0 || m->kv_heads[k] <= 0 || m->heads[k] % m->kv_heads[k])
            bad = "attention heads must be a positive multiple of the key/value heads (full and sliding)";
        else if (m->qk_dim[k] <= 0 || m->v_dim[k] <= 0)
            bad = "head_dim and v_head_dim must be positive";
        else if (m->rot_dim[k] < 0 || m->rot_dim[k] > m->qk_dim[k] || m->rot_dim[k] % 2)
            bad = "int(head_dim * partial_rotary_factor) must be even and at most head_dim";
    }
    if (!bad && (m->experts <= 0 || m->top_k <= 0 || m->top_k > m->experts)) bad = "num_experts_per_tok must be between 1 and n_routed_experts";
    if (!bad && (m->n_group < 1 || m->experts % m->n_group || m->topk_group < 1 || m->topk_group > m->n_group))
        bad = "n_group must divide n_routed_experts and topk_group must be between 1 and n_group";
    if (!bad && m->window < 1) bad = "the sliding window must hold at least the query";
    return bad;
}

/* Reads config.json into m, the blocks' kinds into m->kind and m->mlp_kind (allocated here, owned by
 * m: freed by mv_unload, or by the caller of a bare read as mv_costs is, also after an error). */
static nnt_status read_config(mv_model *m, const nnt_checkpoint *ck, nnt_error *err)
{
    const nnt_core_api *h = m->env.core;
    CK(cfg_i(m, ck, "hidden_size", 0, 1, &m->hidden, err));
    CK(cfg_i(m, ck, "num_hidden_layers", 0, 1, &m->layers, err));
    CK(cfg_i(m, ck, "vocab_size", 0, 1, &m->vocab, err));
    CK(cfg_i(m, ck, "num_attention_heads", 0, 1, &m->heads[FULL], err));
    CK(cfg_i(m, ck, "num_key_value_heads", 0, 1, &m->kv_heads[FULL], err));
    CK(cfg_i(m, ck, "swa_num_attention_heads", m->heads[FULL], 0, &m->heads[SLIDING], err));
    /* transformers always doubles; the hub states the count, which wins when present */
    CK(cfg_i(m, ck, "swa_num_key_value_heads", 2 * (int64_t)m->kv_heads[FULL], 0, &m->kv_heads[SLIDING], err));
    CK(cfg_i(m, ck, "head_dim", 192, 0, &m->qk_dim[FULL], err));
    CK(cfg_i(m, ck, "v_head_dim", 128, 0, &m->v_dim[FULL], err));
    CK(cfg_i(m, ck, "swa_head_dim", m->qk_dim[FULL], 0, &m->qk_dim[SLIDING], err));
    CK(cfg_i(m, ck, "swa_v_head_dim", m->v_dim[FULL], 0, &m->v_dim[SLIDING], err));
    CK(cfg_i(m, ck, "intermediate_size", 0, 1, &m->inter, err));
    CK(cfg_i(m, ck, "moe_intermediate_size", 0, 1, &m->moe_inter, err));
    const char *ekey = h->cfg_has(ck, "n_routed_experts") ? "n_routed_experts" : "num_local_experts";
    CK(cfg_i(m, ck, ekey, 0, 1, &m->experts, err));
    CK(cfg_i(m, ck, "num_experts_per_tok", 0, 1, &m->top_k, err));
    CK(cfg_i(m, ck, "n_group", 1, 0, &m->n_group, err));
    CK(cfg_i(m, ck, "topk_group", 1, 0, &m->topk_group, err));
    CK(h->cfg_bool(ck, "norm_topk_prob", 1, 0, &m->norm_topk, err));
    CK(h->cfg_float(ck, "routed_scaling_factor", 1.0, 0, &m->scaling_factor, err)); /* null reads as 1.0 */
    const char *eps_key = h->cfg_has(ck, "rms_norm_eps") ? "rms_norm_eps" : "layernorm_epsilon";
    CK(h->cfg_float(ck, eps_key, 1e-5, 0, &m->eps, err));
    /* absent: transformers' default 0.707; null: no scaling */
    CK(h->cfg_float(ck, "attention_value_scale", 0.707, 0, &m->v_scale, err));
    if (h->cfg_is_null(ck, "attention_value_scale")) m->v_scale = 1.0;
    CK(h->cfg_bool(ck, "tie_word_embeddings", 0, 0, &m->tied, err));
    CK(h->cfg_bool(ck, "add_swa_attention_sink_bias", 1, 0, &m->sinks_on[SLIDING], err));
    CK(h->cfg_bool(ck, "add_full_attention_sink_bias", 0, 0, &m->sinks_on[FULL], err));
    /* the window counts the query: the hub's sliding_window_size plus one, else sliding_window */
    if (h->cfg_has(ck, "sliding_window_size")) {
        CK(cfg_i(m, ck, "sliding_window_size", 0, 1, &m->window, err));
        m->window += 1;
    } else {
        CK(cfg_i(m, ck, "sliding_window", 129, 0, &m->window, err));
    }
    CK(read_rotary(m, ck, err));
    const char *s = NULL;
    CK(h->cfg_string(ck, "hidden_act", "silu", 0, &s, err));
    if (strcmp(s, "silu") != 0)
        return h->set_error(err, NNT_ERR_UNSUPPORTED, "%s: hidden_act '%s' is not supported (silu expected)", h->cfg_path(ck), s);
    CK(h->cfg_string(ck, "scoring_func", "sigmoid", 0, &s, err));
    if (strcmp(s, "sigmoid") != 0)
        return h->set_error(err, NNT_ERR_UNSUPPORTED, "%s: scoring_func '%s' is not supported (sigmoid expected)", h->cfg_path(ck), s);
    int shared = 0;
    CK(cfg_i(m, ck, "n_shared_experts", 0, 0, &shared, err));
    if (shared)
        return h->set_error(err, NNT_ERR_UNSUPPORTED, "%s: n_shared_experts is %d; MiMo-V2-Flash has no shared expert",
                            h->cfg_path(ck), shared);
    CK(read_release(m, ck, err));
    CK(read_router_dtype(m, ck, err));

    const char *bad = config_fault(m);
    if (bad) return h->set_error(err, NNT_ERR_CONFIG, "%s: %s", h->cfg_path(ck), bad);

    m->kind = calloc((size_t)m->layers, sizeof *m->kind);
    m->mlp_kind = calloc((size_t)m->layers, sizeof *m->mlp_kind);
    if (!m->kind || !m->mlp_kind) return h->set_error(err, NNT_ERR_OUT_OF_MEMORY, "no memory");
    CK(read_kinds(m, ck, "layer_types", "hybrid_layer_pattern", KIND_NAMES, m->kind, 0, err));
    CK(read_kinds(m, ck, "mlp_layer_types", "moe_layer_freq", MLP_NAMES, m->mlp_kind, 1, err));
    return NNT_OK;
}

/* The architecture, declared once (the kit's fam_arch): the module tree print(model) shows and,
 * under each module, its checkpoint tensors - where each binds in mv_layer, its shape as indices
 * into the sizes mv_describe gives block by block (a sliding block has its own heads and widths),
 * how the checkpoint stores it, and its spellings (the hub's and transformers'). fam_arch_bind
 * binds a block from it, fam_arch_tree builds the printout, fam_arch_costs adds up the planner's
 * weight bytes and fam_arch_value_info answers for the linear-attention values no block has.
 * Family-bound (FAM_BIND_NONE) but listed and costed here: k_proj and v_proj (fam_weight_kv_heads
 * reads FP8 scales held per key/value head), and the embedding, final norm and lm_head
 * (fam_bind_readout_stage). The sinks are optional to the kit only so that bind_layer, not the
 * kit, words the error when a block that needs them has neither spelling. Sizes (elements, of
 * the block's attention kind): H hidden, V vocabulary, Q query heads x head_dim, K key/value
 * heads x head_dim, VR key/value heads x v_head_dim, O query heads x v_head_dim, HQ query heads,
 * I the dense MLP's width, E experts, EI an expert's width, C the fused qkv_proj's chunks and R
 * one chunk's rows (Q + K + VR) / C, each chunk quantised on its own (docs/mimo-v2.5-layout.md). */
enum { MV_H, MV_V, MV_Q, MV_K, MV_VR, MV_O, MV_HQ, MV_I, MV_E, MV_EI, MV_C, MV_R, MV_SIZES };
/* traits: tie_word_embeddings; one fused qkv_proj a block (MiMoV2ForCausalLM's layout); a mixture
 * MLP (mlp_layer_types 'sparse'); sinks on the block's attention kind */
enum { MV_TIED = 1u << 0, MV_FUSED = 1u << 1, MV_SPARSE = 1u << 2, MV_SINKS = 1u << 3 };

/* names the table lists and the family's own code formats too: the sinks' two spellings
 * (transformers', the hub's), the key and value projections */
#define MV_SINKS_NAME "model.layers.%d.self_attn.sinks"
#define MV_SINK_BIAS_NAME "model.layers.%d.self_attn.attention_sink_bias"
#define MV_K_NAME "model.layers.%d.self_attn.k_proj.weight"
#define MV_V_NAME "model.layers.%d.self_attn.v_proj.weight"

#define MV_LINEAR(member, pattern, rows, cols)                                                                         \
    {.name = {pattern}, .store = FAM_STORE_LINEAR, .field = offsetof(mv_layer, member), .ndim = 2, .size = {rows, cols}}
#define MV_GAIN(member, pattern)                                                                                       \
    {.name = {pattern}, .store = FAM_STORE_PLAIN, .field = offsetof(mv_layer, member), .ndim = 1, .size = {MV_H}}

/* transformers' fused 3-D tensors, else one tensor per expert (the hub's) */
static const fam_expert_layout MV_EXPERTS = {
    .fused_gate_up = "model.layers.%d.mlp.experts.gate_up_proj",
    .fused_down = "model.layers.%d.mlp.experts.down_proj",
    .per_expert = {{.gate = "model.layers.%d.mlp.experts.%d.gate_proj.weight",
                    .up = "model.layers.%d.mlp.experts.%d.up_proj.weight",
                    .down = "model.layers.%d.mlp.experts.%d.down_proj.weight"}},
};

static const fam_module MV_MODULES[] = {
    {.depth = 0, .native = "model"}, /* its class: the release's architecture (mv_describe) */
    {.depth = 1, .native = "lm_head", .cls = "Linear", .detail = FAM_DETAIL_LINEAR,
     .tensors = {{.name = {"lm_head.weight"}, .store = FAM_STORE_PLAIN, .bind = FAM_BIND_NONE, .ndim = 2,
                  .size = {MV_V, MV_H}, .unless = MV_TIED}},
     .alias_in = FAM_ALIAS(NNT_VALUE_FINAL_NORM_OUTPUT), .alias_out = FAM_ALIAS(NNT_VALUE_LM_HEAD_OUTPUT), .alias_in_edit = 1},
    {.depth = 1, .native = "embed_tokens", .cls = "Embedding", .detail = FAM_DETAIL_EMBEDDING,
     .tensors = {{.name = {"model.embed_tokens.weight"}, .store = FAM_STORE_PLAIN, .bind = FAM_BIND_NONE, .ndim = 2,
                  .size = {MV_V, MV_H}, .first_stage = 1}},
     .alias_in = FAM_ALIAS(NNT_VALUE_INPUT_IDS), .alias_out = FAM_ALIAS(NNT_VALUE_TOKEN_EMBEDDINGS), .alias_in_edit = 1},
    {.depth = 1, .native = "layers", .cls = "ModuleList"},
    {.depth = 2, .native = "layers", .cls = "MiMoV2FlashDecoderLayer", .block = 1},
    /* the sinks: one logit a query head, unquantised, on the blocks whose kind has them */
    {.depth = 3, .native = "self_attn", .cls = "MiMoV2FlashAttention", .module = NNT_MODULE_SELF_ATTN,
     .tensors = {{.name = {MV_SINKS_NAME, MV_SINK_BIAS_NAME}, .store = FAM_STORE_PLAIN, .bind = FAM_BIND_HOST,
                  .field = offsetof(mv_layer, sinks), .ndim = 1, .size = {MV_HQ}, .when = MV_SINKS, .optional = 1}},
     .alias_in = FAM_ALIAS(NNT_VALUE_ATTENTION_NORM_OUTPUT), .alias_out = FAM_ALIAS(NNT_VALUE_ATTN_OUTPUT), .alias_in_edit = 1},
    /* MiMoV2ForCausalLM: C chunks [q_r; k_r; v_r] (bind_kv makes the chunk views) */
    {.depth = 4, .native = "qkv_proj", .cls = "Linear", .detail = FAM_DETAIL_LINEAR, .when = MV_FUSED,
     .tensors = {{.name = {"model.layers.%d.self_attn.qkv_proj.weight"}, .store = FAM_STORE_LINEAR,
                  .field = offsetof(mv_layer, qkv), .ndim = 3, .size = {MV_C, MV_R, MV_H}}},
     .alias_in = FAM_ALIAS(NNT_VALUE_ATTENTION_NORM_OUTPUT), .alias_in_edit = 1,
     .no_native = "the fused qkv_proj runs as one product per chunk, each chunk's rows copied into the queries, keys "
                  "and values, so its [q; k; v] output is never held; attention_queries, attention_keys and "
                  "attention_values hold them (after the rotary and the value scale)"},
    {.depth = 4, .native = "q_proj", .cls = "Linear", .detail = FAM_DETAIL_LINEAR, .unless = MV_FUSED,
     .tensors = {MV_LINEAR(q_proj, "model.layers.%d.self_attn.q_proj.weight", MV_Q, MV_H)}},
    {.depth = 4, .native = "k_proj", .cls = "Linear", .detail = FAM_DETAIL_LINEAR, .unless = MV_FUSED,
     .tensors = {{.name = {MV_K_NAME}, .store = FAM_STORE_LINEAR, .bind = FAM_BIND_NONE,
                  .field = offsetof(mv_layer, k_proj), .ndim = 2, .size = {MV_K, MV_H}}}},
    {.depth = 4, .native = "v_proj", .cls = "Linear", .detail = FAM_DETAIL_LINEAR, .unless = MV_FUSED,
     .tensors = {{.name = {MV_V_NAME}, .store = FAM_STORE_LINEAR, .bind = FAM_BIND_NONE,
                  .field = offsetof(mv_layer, v_proj), .ndim = 2, .size = {MV_VR, MV_H}}}},
    /* the FP8 releases keep o_proj in bfloat16 (quantization_config.ignored_layers) */
    {.depth = 4, .native = "o_proj", .cls = "Linear", .detail = FAM_DETAIL_LINEAR,
     .tensors = {{.name = {"model.layers.%d.self_attn.o_proj.weight"}, .store = FAM_STORE_PLAIN,
                  .field = offsetof(mv_layer, o_proj), .ndim = 2, .size = {MV_H, MV_O}}},
     .alias_in = FAM_ALIAS(NNT_VALUE_ATTN_PREMIX), .alias_out = FAM_ALIAS(NNT_VALUE_ATTN_OUTPUT), .alias_in_edit = 1},
    {.depth = 3, .native = "mlp", .cls = "MiMoV2FlashMLP", .module = NNT_MODULE_MLP, .unless = MV_SPARSE,
     .alias_in = FAM_ALIAS(NNT_VALUE_MLP_INPUT), .alias_out = FAM_ALIAS(NNT_VALUE_MLP_OUTPUT), .alias_in_edit = 1},
    {.depth = 4, .native = "gate_proj", .cls = "Linear", .detail = FAM_DETAIL_LINEAR,
     .tensors = {MV_LINEAR(dense.gate, "model.layers.%d.mlp.gate_proj.weight", MV_I, MV_H)}},
    {.depth = 4, .native = "up_proj", .cls = "Linear", .detail = FAM_DETAIL_LINEAR,
     .tensors = {MV_LINEAR(dense.up, "model.layers.%d.mlp.up_proj.weight", MV_I, MV_H)}},
    {.depth = 4, .native = "down_proj", .cls = "Linear", .detail = FAM_DETAIL_LINEAR,
     .tensors = {MV_LINEAR(dense.down, "model.layers.%d.mlp.down_proj.weight", MV_H, MV_I)},
     .alias_in = FAM_ALIAS(NNT_VALUE_MLP_NEURONS), .alias_out = FAM_ALIAS(NNT_VALUE_MLP_OUTPUT), .alias_in_edit = 1},
    {.depth = 4, .native = "act_fn", .cls = "SiLUActivation", .alias_out = FAM_ALIAS(NNT_VALUE_MLP_ACTIVATION),
     .same_in = "mlp.gate_proj", .alias_in_edit = 1},
    {.depth = 3, .native = "mlp", .cls = "MiMoV2FlashMoE", .module = NNT_MODULE_MLP, .when = MV_SPARSE,
     .alias_in = FAM_ALIAS(NNT_VALUE_MLP_INPUT), .alias_out = FAM_ALIAS(NNT_VALUE_MLP_OUTPUT), .alias_in_edit = 1},
    {.depth = 4, .native = "experts", .cls = "MiMoV2FlashExperts",
     .tensors = {{.store = FAM_STORE_EXPERTS, .bind = FAM_BIND_EXPERTS, .field = offsetof(mv_layer, moe.experts),
                  .ndim = 3, .size = {MV_E, MV_EI, MV_H}, .experts = &MV_EXPERTS}},
     .alias_in = FAM_ALIAS(NNT_VALUE_MLP_INPUT), .alias_out = FAM_ALIAS(NNT_VALUE_ROUTED_OUTPUT)},
    {.depth = 5, .native = "act_fn", .cls = "SiLUActivation"},
    /* the router (float32 in the FP8 release, bf16 in MiMo-V2.5's) and its optional selection bias */
    {.depth = 4, .native = "gate", .cls = "MiMoV2FlashTopkRouter",
     .tensors = {{.name = {"model.layers.%d.mlp.gate.weight"}, .store = FAM_STORE_F32,
                  .field = offsetof(mv_layer, moe.router), .ndim = 2, .size = {MV_E, MV_H}},
                 {.name = {"model.layers.%d.mlp.gate.e_score_correction_bias", "model.layers.%d.mlp.e_score_correction_bias"},
                  .store = FAM_STORE_F32, .bind = FAM_BIND_VECTOR, .field = offsetof(mv_layer, moe.bias),
                  .host = offsetof(mv_layer, bias_host), .ndim = 1, .size = {MV_E}, .optional = 1}},
     .alias_in = FAM_ALIAS(NNT_VALUE_MLP_INPUT), .alias_out = FAM_ALIAS(NNT_VALUE_ROUTER_LOGITS)},
    {.depth = 3, .native = "input_layernorm", .cls = "MiMoV2FlashRMSNorm", .detail = FAM_DETAIL_NORM,
     .tensors = {MV_GAIN(in_norm, "model.layers.%d.input_layernorm.weight")},
     .alias_out = FAM_ALIAS(NNT_VALUE_ATTENTION_NORM_OUTPUT)},
    {.depth = 3, .native = "post_attention_layernorm", .cls = "MiMoV2FlashRMSNorm", .detail = FAM_DETAIL_NORM,
     .tensors = {MV_GAIN(post_norm, "model.layers.%d.post_attention_layernorm.weight")},
     .alias_out = FAM_ALIAS(NNT_VALUE_MLP_NORM_OUTPUT)},
    /* its input is the last block's layer_output, a value of a block, not of the model */
    {.depth = 1, .native = "norm", .cls = "MiMoV2FlashRMSNorm", .detail = FAM_DETAIL_NORM,
     .tensors = {{.name = {"model.norm.weight"}, .store = FAM_STORE_PLAIN, .bind = FAM_BIND_NONE, .ndim = 1,
                  .size = {MV_H}}},
     .alias_out = FAM_ALIAS(NNT_VALUE_FINAL_NORM_OUTPUT)},
};

/* Block `layer`'s sizes and traits from its kinds (layer -1: the model's, and the root's class). */
static void mv_describe(const void *self, int layer, fam_block_facts *out)
{
    const mv_model *m = self;
    out->traits = (m->tied ? MV_TIED : 0u) | (m->qkv_chunks ? MV_FUSED : 0u);
    out->eps = m->eps;
    out->root_class = ARCHS[m->release];
    out->size[MV_H] = m->hidden;
    out->size[MV_V] = m->vocab;
    out->size[MV_I] = m->inter;
    out->size[MV_E] = m->experts;
    out->size[MV_EI] = m->moe_inter;
    if (layer < 0) return;
    int k = m->kind[layer];
    int64_t Hq = m->heads[k], Hkv = m->kv_heads[k], C = m->qkv_chunks;
    out->traits |= (m->mlp_kind[layer] == SPARSE ? MV_SPARSE : 0u) | (m->sinks_on[k] ? MV_SINKS : 0u);
    out->size[MV_Q] = Hq * m->qk_dim[k];
    out->size[MV_K] = Hkv * m->qk_dim[k];
    out->size[MV_VR] = Hkv * m->v_dim[k];
    out->size[MV_O] = Hq * m->v_dim[k];
    out->size[MV_HQ] = Hq;
    out->size[MV_C] = C;
    out->size[MV_R] = C ? (out->size[MV_Q] + out->size[MV_K] + out->size[MV_VR]) / C : 0;
}

static const fam_arch MV_ARCH = {
    .modules = MV_MODULES,
    .n_modules = (int)(sizeof MV_MODULES / sizeof MV_MODULES[0]),
    .n_sizes = MV_SIZES,
    .renames = RENAMES,
    .off_page = {[NNT_MODULE_LINEAR_ATTN] = "every MiMo-V2-Flash block mixes tokens with softmax attention (self_attn), "
                                            "full or sliding; none has a linear-attention mixer or a recurrent state"},
    .describe = mv_describe,
};

/* The projections MV_ARCH leaves to the family: a fused release's chunk views of qkv_proj (chunk
 * r holds query heads, then key heads, then value heads r of C), else k_proj and v_proj, whose
 * FP8 scales a release may hold per key/value head over the head's fused key and value rows
 * (the kit recognises that grid from its shape). */
static nnt_status bind_kv(mv_model *m, const nnt_checkpoint *ck, int L, nnt_error *err)
{
    const fam_env *env = &m->env;
    mv_layer *ly = &m->l[L];
    int kind = m->kind[L];
    int64_t H = m->hidden, Hq = m->heads[kind], Hkv = m->kv_heads[kind], Dq = m->qk_dim[kind], Dv = m->v_dim[kind];
    if (m->qkv_chunks) {
        int64_t C = m->qkv_chunks, rows = (Hq * Dq + Hkv * Dq + Hkv * Dv) / C;
        ly->chunk = calloc((size_t)C, sizeof *ly->chunk);
        if (!ly->chunk) return env->core->set_error(err, NNT_ERR_OUT_OF_MEMORY, "no memory");
        for (int64_t r = 0; r < C; r++) CK(fam_rows(env, &ly->qkv, r, 0, rows, "qkv_proj", &ly->chunk[r], err));
        return NNT_OK;
    }
    char kn[192], vn[192];
    snprintf(kn, sizeof kn, MV_K_NAME, L);
    snprintf(vn, sizeof vn, MV_V_NAME, L);
    return fam_weight_kv_heads(env, ck, kn, vn, Hkv, Dq, Dv, H, &ly->k_proj, &ly->v_proj, err);
}

/* Block L's attention shape (also for value_info and the caches). */
static void attn_shape(const mv_model *m, int L, fam_attn *a)
{
    const mv_layer *ly = &m->l[L];
    int kind = m->kind[L];
    a->num_heads = m->heads[kind];
    a->num_kv_heads = m->kv_heads[kind];
    a->qk_head_dim = m->qk_dim[kind];
    a->v_head_dim = m->v_dim[kind];
    a->rot_start = 0;
    a->rot_dim = m->rot_dim[kind];
    a->rope_style = NNT_ROPE_NEOX;
    a->inv_freq = m->inv_freq[kind];
    a->rope_mscale = 1.0f;
    a->scale = 1.0f / sqrtf((float)m->qk_dim[kind]);
    a->window = kind == SLIDING ? m->window : 0;
    a->sinks = ly->sinks;
    a->o_proj = ly->o_proj;
}

/* DeepSeek-V3's routing as MiMo-V2-Flash configures it: sigmoid scores, the selection bias for the
 * choice only, n_group / topk_group, renormalised weights times routed_scaling_factor, no shared
 * expert; transformers' router multiplies in float32 (modeling_mimo_v2_flash.py). */
static void route_params(const mv_model *m, fam_moe *moe)
{
    moe->num_experts = m->experts;
    moe->top_k = m->top_k;
    moe->intermediate = m->moe_inter;
    moe->router_f32 = 1;
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
    moe->swiglu_limit = 0.0f;
    moe->has_shared = 0;
}

/* A block's tensors from MV_ARCH, the projections it leaves to the family, then the attention and
 * the routing the table does not hold. */
static nnt_status bind_layer(mv_model *m, const nnt_checkpoint *ck, int L, nnt_error *err)
{
    const nnt_core_api *h = m->env.core;
    mv_layer *ly = &m->l[L];
    int kind = m->kind[L];
    CK(fam_arch_bind(&m->env, &MV_ARCH, m, ck, L, ly, err));
    if (m->sinks_on[kind] && !ly->sinks) {
        char a[192], b[192];
        snprintf(a, sizeof a, MV_SINKS_NAME, L);
        snprintf(b, sizeof b, MV_SINK_BIAS_NAME, L);
        return h->set_error(err, NNT_ERR_NOT_FOUND, "%s: block %d (%s) needs its sinks: neither '%s' nor '%s' is in the checkpoint",
                            h->cfg_path(ck), L, KIND_NAMES[kind], a, b);
    }
    CK(bind_kv(m, ck, L, err));
    attn_shape(m, L, &ly->attn);
    if (m->mlp_kind[L] == SPARSE) route_params(m, &ly->moe);
    return NNT_OK;
}

/* The attention sublayer: projections, values scaled by attention_value_scale, then the
 * shared attention with the block's heads, rotary base, window and sinks. */
static nnt_status mv_attention(void *self, nnt_run *run, int L, const nnt_forward_args *args,
                               const nnt_attn_mask *mask, const nnt_tensor *xn, nnt_tensor *out, nnt_error *err)
{
    mv_model *m = self;
    const fam_env *env = &m->env;
    const mv_layer *ly = &m->l[L];
    const fam_attn *a = &ly->attn;
    int64_t M = xn->shape[0];
    size_t mark = env->core->arena_mark(run);
    const nnt_call_dims dims = {args->batch, args->seq, args->past};
    nnt_tensor q, k, v;
    nnt_status st;
    if ((st = fam_alloc(env, run, NNT_F32, &q, err, NNT_SHAPE(M, (int64_t)a->num_heads * a->qk_head_dim))) != NNT_OK ||
        (st = fam_alloc(env, run, NNT_F32, &k, err, NNT_SHAPE(M, (int64_t)a->num_kv_heads * a->qk_head_dim))) != NNT_OK ||
        (st = fam_alloc(env, run, NNT_F32, &v, err, NNT_SHAPE(M, (int64_t)a->num_kv_heads * a->v_head_dim))) != NNT_OK)
        goto done;
    if (m->qkv_chunks) {
        /* each chunk's projection, its rows split into the query, key and value columns */
        int64_t C = m->qkv_chunks, qr = q.shape[1] / C, kr = k.shape[1] / C, vr = v.shape[1] / C;
        nnt_tensor part;
        if ((st = fam_alloc(env, run, NNT_F32, &part, err, NNT_SHAPE(M, qr + kr + vr))) != NNT_OK) goto done;
        for (int64_t r = 0; r < C; r++)
            if ((st = env->be->linear(env->be_ctx, xn, &ly->chunk[r], &part, err)) != NNT_OK ||
                (st = env->be->copy_cols(env->be_ctx, &part, 0, &q, r * qr, qr, err)) != NNT_OK ||
                (st = env->be->copy_cols(env->be_ctx, &part, qr, &k, r * kr, kr, err)) != NNT_OK ||
                (st = env->be->copy_cols(env->be_ctx, &part, qr + kr, &v, r * vr, vr, err)) != NNT_OK)
                goto done;
        if ((st = env->be->scale(env->be_ctx, &v, (float)m->v_scale, &v, err)) != NNT_OK) goto done;
    } else if ((st = fam_linear(env, run, L, &dims, xn, &ly->q_proj, &q, err)) != NNT_OK ||
        (st = fam_linear(env, run, L, &dims, xn, &ly->k_proj, &k, err)) != NNT_OK ||
        (st = fam_linear(env, run, L, &dims, xn, &ly->v_proj, &v, err)) != NNT_OK ||
        (st = env->be->scale(env->be_ctx, &v, (float)m->v_scale, &v, err)) != NNT_OK)
        goto done;
    st = fam_attention_forward(env, run, L, a, args, mask, &q, &k, &v, fam_layer_cache(args, L), out, err);
done:
    env->core->arena_release(run, mark);
    return st;
}

static nnt_status mv_mlp(void *self, nnt_run *run, int L, const nnt_forward_args *args, const nnt_tensor *xn,
                         nnt_tensor *out, nnt_error *err)
{
    mv_model *m = self;
    nnt_call_dims dims = {args->batch, args->seq, args->past};
    const mv_layer *ly = &m->l[L];
    if (m->mlp_kind[L] == DENSE) return fam_mlp_forward(&m->env, run, L, &ly->dense, 0.0f, &dims, xn, out, 1, err);
    return fam_moe_forward(&m->env, run, L, &ly->moe, &dims, args->input_ids, xn, out, err);
}

static void mv_unload(void *model)
{
    mv_model *m = model;
    if (!m) return;
    fam_env_release(&m->env); /* weights, sinks and router biases */
    for (int L = 0; m->l && L < m->layers; L++) free(m->l[L].chunk);
    free(m->l);
    free(m->kind);
    free(m->mlp_kind);
    free(m->inv_freq[0]);
    free(m->inv_freq[1]);
    free(m);
}

/* The printout's notes. For MiMoV2ForCausalLM: Modular MAX's mimo_v2 pipeline returns, for
 * ReturnHiddenStates.SELECTED_LAYERS, the outputs of the layers in target_layer_ids "post-residual,
 * before the final norm" (MAX doc, MiMoV2Config.target_layer_ids): the residual stream after a
 * block's MLP is added, which is layers.{i}.layer_output here (tests/test_mimo.c checks it against
 * transformers' output_hidden_states). MAX serves only that architecture, so MiMo-V2-Flash gets no
 * such note. And what nnt does with moe_router_dtype when config.json gives it. */
static void mv_write_notes(mv_model *m)
{
    m->n_notes = 0;
    if (strcmp(ARCHS[m->release], "MiMoV2ForCausalLM") == 0)
        snprintf(m->notes[m->n_notes++], sizeof m->notes[0],
                 "MAX's selected-layer hidden states (return_hidden_states for target_layer_ids = [i, ...]) are "
                 "layers.{i}.layer_output: block i's residual stream after its MLP output is added, before the "
                 "final norm (final_norm_output is the normed one); nnt counts blocks from 0");
    if (m->router_dtype)
        snprintf(m->notes[m->n_notes++], sizeof m->notes[0],
                 "config.json moe_router_dtype is '%s': the router weight is read as stored and router_logits are "
                 "computed in float32 whatever it says (as transformers, SGLang and MAX do; vLLM computes them in %s)",
                 m->router_dtype, m->router_dtype);
}

static const char *mv_note(const void *model, int i)
{
    const mv_model *m = model;
    return i >= 0 && i < m->n_notes ? m->notes[i] : NULL;
}

static nnt_status mv_load(const nnt_load_args *args, void **out, nnt_error *err)
{
    mv_model *m = calloc(1, sizeof *m);
    if (!m) return args->core->set_error(err, NNT_ERR_OUT_OF_MEMORY, "no memory");
    fam_env_init(&m->env, args);
    /* in bfloat16, transformers' MiMo-V2-Flash subtracts the row maximum from the scores in
     * bfloat16 before its softmax (modeling_mimo_v2_flash.py, eager attention with sinks) */
    m->env.bf16_style = NNT_TENSOR_BF16_SHIFTED;
    const nnt_checkpoint *ck = args->ckpt;
    nnt_status st = read_config(m, ck, err);
    if (st == NNT_OK) {
        m->l = calloc((size_t)m->layers, sizeof *m->l);
        for (int k = 0; k < 2; k++) m->inv_freq[k] = calloc((size_t)m->rot_dim[k] / 2 + 1, sizeof(float));
        if (!m->l || !m->inv_freq[0] || !m->inv_freq[1])
            st = args->core->set_error(err, NNT_ERR_OUT_OF_MEMORY, "no memory");
    }
    if (st == NNT_OK) {
        for (int k = 0; k < 2; k++) fam_rope_inv_freq(m->inv_freq[k], m->rot_dim[k], m->theta[k]);
    }
    if (st == NNT_OK) /* a stage's load binds its blocks only */
        st = fam_bind_readout_stage(&m->env, args, m->vocab, m->hidden, m->tied, m->layers, &m->dec, &m->first_block,
                                    &m->end_block, err);
    for (int L = m->first_block; st == NNT_OK && L < m->end_block; L++) st = bind_layer(m, ck, L, err);
    if (st != NNT_OK) {
        mv_unload(m);
        return st;
    }
    mv_write_notes(m);
    fam_decoder_wire(&m->dec, m->layers, m->hidden, m->vocab, m->eps, &m->l[0].in_norm, &m->l[0].post_norm,
                     sizeof(mv_layer), m, mv_attention, mv_mlp);
    if ((st = fam_env_natives(&m->env, &MV_ARCH, m, m->l, sizeof *m->l, err)) != NNT_OK) {
        mv_unload(m);
        return st;
    }
    *out = m;
    return NNT_OK;
}

static void mv_info(const void *model, nnt_model_info *out)
{
    const mv_model *m = model;
    memset(out, 0, sizeof *out);
    out->architecture = ARCHS[m->release];
    out->model_type = TYPES[m->release];
    out->root_class = ARCHS[m->release];
    out->num_layers = m->layers;
    out->hidden_size = m->hidden;
    out->vocab_size = m->vocab;
    out->num_heads = m->heads[FULL];
    out->num_kv_heads = m->kv_heads[FULL]; /* the config's count, the full blocks' */
    out->head_dim = m->v_dim[FULL];
    out->qk_head_dim = m->qk_dim[FULL];
    out->intermediate_size = m->inter;
    out->num_experts = m->experts;
    out->top_k = m->top_k;
    out->num_streams = 1;
}

/* The native module values, from MV_ARCH's rows. */
static nnt_status mv_native(const void *model, int i, nnt_native_info *out)
{
    const mv_model *m = model;
    return fam_natives_entry(&m->env, i, out);
}

static nnt_status mv_value_info(const void *model, int layer, nnt_value_id id, const nnt_call_dims *d,
                                nnt_value_info *out)
{
    const mv_model *m = model;
    if (fam_decoder_info(m->hidden, m->vocab, id, d, out)) return NNT_OK;
    if (fam_natives_value_info(&m->env, layer, id, d, out)) return NNT_OK; /* q_proj.output, ... */
    if (fam_arch_value_info(&MV_ARCH, m, layer, id, out)) return NNT_OK; /* linear_attn: no such module */
    int64_t B = d ? d->batch : 0, T = d ? d->seq : 0, H = m->hidden;
    if (fam_value_module(id) == NNT_MODULE_SELF_ATTN) {
        /* a continued call's keys: the cache (a sliding block keeps window - 1 tokens) and the call's;
         * the shape from config.json, so also on another stage's block */
        fam_attn a;
        attn_shape(m, layer, &a);
        int64_t keys = d ? (a.window ? fam_kv_cached_len(a.window - 1, d) : d->past + d->seq) : 0;
        fam_attention_info_keys(&a, m->hidden, id, d, keys, out);
        return NNT_OK;
    }
    if (m->mlp_kind[layer] == DENSE) {
        switch (id) {
        case NNT_VALUE_MLP_ACTIVATION:
        case NNT_VALUE_MLP_NEURONS: fam_served(out, d, NNT_F32, 1, NNT_SHAPE(B, T, (int64_t)m->inter)); return NNT_OK;
        case NNT_VALUE_MLP_OUTPUT: fam_served(out, d, NNT_F32, 1, NNT_SHAPE(B, T, H)); return NNT_OK;
        default:
            fam_unserved(out, "this block's MLP is dense (mlp_layer_types says 'dense'): it has no router, no experts "
                              "and no shared expert");
            return NNT_OK;
        }
    }
    switch (id) {
    case NNT_VALUE_MLP_OUTPUT:
    case NNT_VALUE_ROUTED_OUTPUT: fam_served(out, d, NNT_F32, 1, NNT_SHAPE(B, T, H)); return NNT_OK;
    case NNT_VALUE_ROUTER_LOGITS: fam_served(out, d, NNT_F32, 1, NNT_SHAPE(B, T, (int64_t)m->experts)); return NNT_OK;
    case NNT_VALUE_EXPERT_WEIGHTS: fam_served(out, d, NNT_F32, 1, NNT_SHAPE(B, T, (int64_t)m->top_k)); return NNT_OK;
    case NNT_VALUE_EXPERT_INDICES: fam_served(out, d, NNT_I32, 1, NNT_SHAPE(B, T, (int64_t)m->top_k)); return NNT_OK;
    case NNT_VALUE_EXPERT_OUTPUTS: fam_served(out, d, NNT_F32, 1, NNT_SHAPE(B, T, (int64_t)m->top_k, H)); return NNT_OK;
    case NNT_VALUE_SHARED_EXPERT_OUTPUT:
        fam_unserved(out, "MiMo-V2-Flash's mixture has no shared expert; routed_output is the whole mlp_output");
        return NNT_OK;
    case NNT_VALUE_MLP_ACTIVATION:
    case NNT_VALUE_MLP_NEURONS:
        fam_unserved(out, "this block's MLP is a mixture without a shared expert: each expert's activations exist only "
                          "for the tokens routed to it, so no [batch seq intermediate_size] tensor exists (dense blocks "
                          "serve them)");
        return NNT_OK;
    default: fam_unserved(out, "not a MiMo-V2-Flash value"); return NNT_OK;
    }
}

/* `nnt print`'s module tree, from MV_ARCH. */
static nnt_status mv_build_tree(const void *model, nnt_tree *tree, nnt_error *err)
{
    const mv_model *m = model;
    return fam_arch_tree(m->env.core, &MV_ARCH, m, m->layers, tree, err);
}

static nnt_status mv_forward(void *model, nnt_run *run, const nnt_forward_args *args, nnt_error *err)
{
    mv_model *m = model;
    return fam_decoder_forward(&m->env, run, args, &m->dec, err);
}

static nnt_status mv_project(void *model, nnt_run *run, const nnt_tensor *x, int streams, nnt_tensor *logits,
                             nnt_error *err)
{
    mv_model *m = model;
    (void)streams; /* one residual stream */
    return fam_decoder_project(&m->env, run, &m->dec, x, logits, err);
}

/* Generation state: a key/value cache per block; a sliding block keeps only its window. */
static int mv_attn_of(const void *model, int layer, fam_attn *out)
{
    const mv_model *m = model;
    if (layer < m->first_block || layer >= m->end_block) return 0; /* another stage's block: no cache */
    *out = m->l[layer].attn;
    return 1;
}

static nnt_status mv_cache_new(void *model, int batch, int capacity, void **cache, nnt_error *err)
{
    mv_model *m = model;
    return fam_attention_caches_new(&m->env, m->layers, batch, capacity, mv_attn_of, m, (fam_layer_caches **)cache, err);
}

static void mv_cache_free(void *model, void *cache)
{
    mv_model *m = model;
    fam_layer_caches_free(&m->env, cache);
}

/* The planner's byte model (nnt_cost_args) from config.json alone: the weights of every tensor
 * MV_ARCH lists, as the checkpoint's encoding stores them (fam_arch_costs), and each block's
 * key/value cache: a full block caches every token, a sliding one window - 1 (the query is the
 * window's last). */
static nnt_status mv_costs(nnt_cost_args *args, nnt_error *err)
{
    mv_model m = {0};
    m.env.core = args->core;
    fam_encoding e;
    nnt_status st = read_config(&m, args->ckpt, err);
    if (st == NNT_OK) st = fam_cost_blocks(args, m.layers, err);
    if (st == NNT_OK) st = fam_cost_encoding(args, &e, err);
    if (st == NNT_OK) st = fam_arch_costs(args, &MV_ARCH, &m, &e, err);
    for (int l = 0; st == NNT_OK && l < args->n_blocks; l++) {
        int k = m.kind[l];
        int64_t keep = k == SLIDING ? (m.window > 1 ? m.window - 1 : 1) : args->context;
        args->cache_bytes[l] = fam_cost_kv_cache(args->batch, m.kv_heads[k], m.qk_dim[k], m.v_dim[k], keep);
    }
    free(m.kind);
    free(m.mlp_kind);
    return st;
}

NNT_PLUGIN_EXPORT const nnt_family_descriptor nnt_family_plugin = {
    .header = NNT_PLUGIN_HEADER(nnt_family_descriptor, NNT_PLUGIN_FAMILY, "mimo_v2_flash", NNT_VERSION_STRING,
                                      "MiMo-V2-Flash (MiMoV2FlashForCausalLM) and MiMo-V2.5 / V2.6 (MiMoV2ForCausalLM)"),
    .architectures = ARCHS,
    .model_types = TYPES,
    .renames = RENAMES,
    .load = mv_load,
    .unload = mv_unload,
    .info = mv_info,
    .value_info = mv_value_info,
    .build_tree = mv_build_tree,
    .forward = mv_forward,
    .project = mv_project,
    .cache_new = mv_cache_new,
    .cache_free = mv_cache_free,
    .ops_needed = NNT_OPS_DECODER,
    .note = mv_note,
    .costs = mv_costs,
    .native = mv_native,
};
