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
 * docs/mimo-v2.5-layout.md. Sources:
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

typedef struct mv_layer {
    int kind, mlp_kind;
    nnt_tensor in_norm, post_norm;
    nnt_tensor q_proj, k_proj, v_proj, o_proj;
    nnt_tensor qkv;    /* fused releases: qkv_proj [chunks, q + k + v rows, hidden] */
    nnt_tensor *chunk; /* fused releases: [chunks] row views of qkv, one chunk each; else NULL */
    float *sinks; /* [heads] host F32, or NULL */
    fam_attn attn;
    fam_expert dense;
    fam_moe moe;
    float *bias_host;
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
    int release;   /* index into ARCHS of the architecture loaded */
    int qkv_chunks; /* fused qkv_proj chunks a block (MiMoV2ForCausalLM), 0 for separate q/k/v */
    const char *router_dtype; /* config.json moe_router_dtype (the checkpoint's string, read during load
                               * only), or NULL when absent */
    char notes[2][512];       /* the printout's notes (mv_note) */
    int n_notes;
    float *inv_freq[2];
    fam_decoder dec;
    mv_layer *l;
    fam_expert *expert_pool;
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

static nnt_status read_config(mv_model *m, const nnt_checkpoint *ck, int **kinds, int **mlp_kinds, nnt_error *err)
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
    /* moe_router_dtype (MiMo-V2.5 configs): vLLM computes the router logits in it, SGLang and MAX
     * in float32 whatever it says; nnt scores in float32 like transformers' router (the reference
     * of every fixture) and reads the router weight as stored. Checked, then reported in a note. */
    m->router_dtype = NULL;
    if (h->cfg_has(ck, "moe_router_dtype")) {
        CK(h->cfg_string(ck, "moe_router_dtype", NULL, 1, &m->router_dtype, err));
        if (strcmp(m->router_dtype, "float32") != 0 && strcmp(m->router_dtype, "bfloat16") != 0 &&
            strcmp(m->router_dtype, "float16") != 0)
            return h->set_error(err, NNT_ERR_CONFIG, "%s: moe_router_dtype is '%s'; expected 'float32', 'bfloat16' or "
                                "'float16' (or the key absent)", h->cfg_path(ck), m->router_dtype);
    }

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
    if (bad) return h->set_error(err, NNT_ERR_CONFIG, "%s: %s", h->cfg_path(ck), bad);

    *kinds = calloc((size_t)m->layers, sizeof **kinds);
    *mlp_kinds = calloc((size_t)m->layers, sizeof **mlp_kinds);
    if (!*kinds || !*mlp_kinds) return h->set_error(err, NNT_ERR_OUT_OF_MEMORY, "no memory");
    CK(read_kinds(m, ck, "layer_types", "hybrid_layer_pattern", KIND_NAMES, *kinds, 0, err));
    CK(read_kinds(m, ck, "mlp_layer_types", "moe_layer_freq", MLP_NAMES, *mlp_kinds, 1, err));
    return NNT_OK;
}

/* Each block's tensors with one spelling, as tables (the kit's fam_bind_names binds them): the
 * norms and the query and output projections of every block, and the dense MLP of a dense
 * block. Shapes index these sizes: H hidden, Q query heads * qk head_dim, O query heads *
 * v head_dim, I the dense MLP's width (all of the block's attention kind). The key and value
 * projections (per-head FP8 scales), the sinks and the router's bias have their own code. */
enum { MV_H, MV_Q, MV_O, MV_I, MV_SIZES };
static const fam_tensor_name MV_NAMES[] = {
    {offsetof(mv_layer, in_norm), "model.layers.%d.input_layernorm.weight", 1, {MV_H}},
    {offsetof(mv_layer, post_norm), "model.layers.%d.post_attention_layernorm.weight", 1, {MV_H}},
    {offsetof(mv_layer, o_proj), "model.layers.%d.self_attn.o_proj.weight", 2, {MV_H, MV_O}},
};
/* q_proj where the release keeps query, key and value projections apart */
static const fam_tensor_name MV_Q_NAMES[] = {
    {offsetof(mv_layer, q_proj), "model.layers.%d.self_attn.q_proj.weight", 2, {MV_Q, MV_H}},
};
static const fam_tensor_name MV_DENSE_NAMES[] = {
    {offsetof(mv_layer, dense.gate), "model.layers.%d.mlp.gate_proj.weight", 2, {MV_I, MV_H}},
    {offsetof(mv_layer, dense.up), "model.layers.%d.mlp.up_proj.weight", 2, {MV_I, MV_H}},
    {offsetof(mv_layer, dense.down), "model.layers.%d.mlp.down_proj.weight", 2, {MV_H, MV_I}},
};

static nnt_status bind_layer(mv_model *m, const nnt_checkpoint *ck, int L, int kind, int mlp_kind, nnt_error *err)
{
    const fam_env *env = &m->env;
    const nnt_core_api *h = env->core;
    mv_layer *ly = &m->l[L];
    ly->kind = kind;
    ly->mlp_kind = mlp_kind;
    int64_t H = m->hidden, Hq = m->heads[kind], Hkv = m->kv_heads[kind], Dq = m->qk_dim[kind], Dv = m->v_dim[kind];
    const int64_t sizes[MV_SIZES] = {[MV_H] = H, [MV_Q] = Hq * Dq, [MV_O] = Hq * Dv, [MV_I] = m->inter};
    CK(fam_bind_names(env, ck, L, MV_NAMES, (int)(sizeof MV_NAMES / sizeof MV_NAMES[0]), sizes, ly, err));
    if (m->qkv_chunks) {
        /* one fused qkv_proj: chunk r holds query heads, then key heads, then value heads r of C */
        int64_t C = m->qkv_chunks, rows = (Hq * Dq + Hkv * Dq + Hkv * Dv) / C, shp[3] = {C, rows, H};
        char n[192];
        snprintf(n, sizeof n, "model.layers.%d.self_attn.qkv_proj.weight", L);
        CK(fam_weight(env, ck, n, 3, shp, &ly->qkv, err));
        ly->chunk = calloc((size_t)C, sizeof *ly->chunk);
        if (!ly->chunk) return h->set_error(err, NNT_ERR_OUT_OF_MEMORY, "no memory");
        for (int64_t r = 0; r < C; r++) CK(fam_rows(env, &ly->qkv, r, 0, rows, "qkv_proj", &ly->chunk[r], err));
    } else {
        CK(fam_bind_names(env, ck, L, MV_Q_NAMES, (int)(sizeof MV_Q_NAMES / sizeof MV_Q_NAMES[0]), sizes, ly, err));
        /* FP8 releases may hold k_proj's and v_proj's scales per key/value head over the head's
         * fused key and value rows; the core recognises that grid from its shape */
        char kn[192], vn[192];
        snprintf(kn, sizeof kn, "model.layers.%d.self_attn.k_proj.weight", L);
        snprintf(vn, sizeof vn, "model.layers.%d.self_attn.v_proj.weight", L);
        CK(fam_weight_kv_heads(env, ck, kn, vn, Hkv, Dq, Dv, H, &ly->k_proj, &ly->v_proj, err));
    }
    if (m->sinks_on[kind]) {
        char a[192], b[192];
        snprintf(a, sizeof a, "model.layers.%d.self_attn.sinks", L);
        snprintf(b, sizeof b, "model.layers.%d.self_attn.attention_sink_bias", L);
        const char *names[] = {a, b};
        const char *found = fam_first_present(env, ck, names, 2);
        if (!found)
            return h->set_error(err, NNT_ERR_NOT_FOUND, "%s: block %d (%s) needs its sinks: neither '%s' nor '%s' is in the checkpoint",
                                h->cfg_path(ck), L, KIND_NAMES[kind], a, b);
        CK(fam_vector_f32(env, ck, found, Hq, &ly->sinks, err));
    }
    fam_attn *a = &ly->attn;
    a->num_heads = (int)Hq;
    a->num_kv_heads = (int)Hkv;
    a->qk_head_dim = (int)Dq;
    a->v_head_dim = (int)Dv;
    a->rot_start = 0;
    a->rot_dim = m->rot_dim[kind];
    a->rope_style = NNT_ROPE_NEOX;
    a->inv_freq = m->inv_freq[kind];
    a->rope_mscale = 1.0f;
    a->scale = 1.0f / sqrtf((float)Dq);
    a->window = kind == SLIDING ? m->window : 0;
    a->sinks = ly->sinks;
    a->o_proj = ly->o_proj;
    if (mlp_kind == DENSE)
        return fam_bind_names(env, ck, L, MV_DENSE_NAMES, (int)(sizeof MV_DENSE_NAMES / sizeof MV_DENSE_NAMES[0]), sizes,
                              ly, err);
    int64_t E = m->experts, I = m->moe_inter;
    char n[192];
    int64_t rs[2] = {E, H};
    snprintf(n, sizeof n, "model.layers.%d.mlp.gate.weight", L);
    CK(fam_weight(env, ck, n, 2, rs, &ly->moe.router, err));
    char b1[192], b2[192];
    snprintf(b1, sizeof b1, "model.layers.%d.mlp.gate.e_score_correction_bias", L);
    snprintf(b2, sizeof b2, "model.layers.%d.mlp.e_score_correction_bias", L);
    const char *biases[] = {b1, b2};
    const char *bias = fam_first_present(env, ck, biases, 2);
    if (bias) CK(fam_bind_vector(env, ck, bias, E, &ly->bias_host, &ly->moe.bias, err));
    static const fam_expert_names spellings[] = {
        {.gate = "model.layers.%d.mlp.experts.%d.gate_proj.weight",
         .up = "model.layers.%d.mlp.experts.%d.up_proj.weight",
         .down = "model.layers.%d.mlp.experts.%d.down_proj.weight"},
    };
    ly->moe.experts = m->expert_pool + (size_t)L * m->experts;
    CK(fam_bind_experts(env, ck, L, E, I, H, "model.layers.%d.mlp.experts.gate_up_proj",
                        "model.layers.%d.mlp.experts.down_proj", spellings, 1, ly->moe.experts, err));
    ly->moe.num_experts = m->experts;
    ly->moe.top_k = m->top_k;
    ly->moe.intermediate = m->moe_inter;
    /* transformers' MiMo-V2-Flash router multiplies in float32 (modeling_mimo_v2_flash.py) */
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
    ly->moe.swiglu_limit = 0.0f;
    ly->moe.has_shared = 0;
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
    } else if ((st = env->be->linear(env->be_ctx, xn, &ly->q_proj, &q, err)) != NNT_OK ||
        (st = env->be->linear(env->be_ctx, xn, &ly->k_proj, &k, err)) != NNT_OK ||
        (st = env->be->linear(env->be_ctx, xn, &ly->v_proj, &v, err)) != NNT_OK ||
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
    if (ly->mlp_kind == DENSE) return fam_mlp_forward(&m->env, run, L, &ly->dense, 0.0f, &dims, xn, out, 1, err);
    return fam_moe_forward(&m->env, run, L, &ly->moe, &dims, args->input_ids, xn, out, err);
}

static void mv_unload(void *model)
{
    mv_model *m = model;
    if (!m) return;
    fam_env_release(&m->env); /* weights, sinks and router biases */
    for (int L = 0; m->l && L < m->layers; L++) free(m->l[L].chunk);
    free(m->l);
    free(m->expert_pool);
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
    int *kinds = NULL, *mlp_kinds = NULL;
    nnt_status st = read_config(m, ck, &kinds, &mlp_kinds, err);
    if (st == NNT_OK) {
        m->l = calloc((size_t)m->layers, sizeof *m->l);
        m->expert_pool = calloc((size_t)m->layers * (size_t)m->experts, sizeof *m->expert_pool);
        for (int k = 0; k < 2; k++) m->inv_freq[k] = calloc((size_t)m->rot_dim[k] / 2 + 1, sizeof(float));
        if (!m->l || !m->expert_pool || !m->inv_freq[0] || !m->inv_freq[1])
            st = args->core->set_error(err, NNT_ERR_OUT_OF_MEMORY, "no memory");
    }
    if (st == NNT_OK) {
        for (int k = 0; k < 2; k++) fam_rope_inv_freq(m->inv_freq[k], m->rot_dim[k], m->theta[k]);
    }
    if (st == NNT_OK) /* a stage's load binds its blocks only */
        st = fam_bind_readout_stage(&m->env, args, m->vocab, m->hidden, m->tied, m->layers, &m->dec, &m->first_block,
                                    &m->end_block, err);
    for (int L = 0; st == NNT_OK && L < m->layers; L++) {
        if (L >= m->first_block && L < m->end_block) {
            st = bind_layer(m, ck, L, kinds[L], mlp_kinds[L], err);
        } else { /* another stage's block: its kind only (the tree and the value shapes read it) */
            m->l[L].kind = kinds[L];
            m->l[L].mlp_kind = mlp_kinds[L];
        }
    }
    free(kinds);
    free(mlp_kinds);
    if (st != NNT_OK) {
        mv_unload(m);
        return st;
    }
    mv_write_notes(m);
    fam_decoder_wire(&m->dec, m->layers, m->hidden, m->vocab, m->eps, &m->l[0].in_norm, &m->l[0].post_norm,
                     sizeof(mv_layer), m, mv_attention, mv_mlp);
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

static nnt_status mv_value_info(const void *model, int layer, nnt_value_id id, const nnt_call_dims *d,
                                nnt_value_info *out)
{
    const mv_model *m = model;
    if (fam_decoder_info(m->hidden, m->vocab, id, d, out)) return NNT_OK;
    int64_t B = d ? d->batch : 0, T = d ? d->seq : 0, H = m->hidden;
    if (id >= NNT_VALUE_ATTN_QUERIES && id <= NNT_VALUE_ATTN_HEAD_OUTPUTS) {
        /* a continued call's keys: the cache (a sliding block keeps window - 1 tokens) and the call's */
        const fam_attn *a = &m->l[layer].attn;
        int64_t keys = d ? (a->window ? fam_kv_cached_len(a->window - 1, d) : d->past + d->seq) : 0;
        fam_attention_info_keys(a, m->hidden, id, d, keys, out);
        return NNT_OK;
    }
    if (id >= NNT_VALUE_LIN_OUTPUT && id <= NNT_VALUE_LIN_STATE_OUTPUT) {
        fam_off_page(out, "every MiMo-V2-Flash block mixes tokens with softmax attention (self_attn), full or sliding; "
                          "none has a linear-attention mixer or a recurrent state");
        return NNT_OK;
    }
    const mv_layer *ly = &m->l[layer];
    if (ly->mlp_kind == DENSE) {
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

static nnt_status mv_build_tree(const void *model, nnt_tree *tree, nnt_error *err)
{
    const mv_model *m = model;
    const nnt_core_api *h = m->env.core;
    char d[160];
    int64_t H = m->hidden;
    int root = h->tree_node(tree, -1, "model", NULL, ARCHS[m->release], NULL, NNT_MODULE_MODEL, -1);
    if (root < 0) return h->set_error(err, NNT_ERR_OUT_OF_MEMORY, "no memory for the module tree");
    h->tree_node(tree, root, "lm_head", NULL, "Linear", fam_linear_detail(d, sizeof d, H, m->vocab), -1, -1);
    snprintf(d, sizeof d, "%d, %d", m->vocab, m->hidden);
    h->tree_node(tree, root, "embed_tokens", NULL, "Embedding", d, -1, -1);
    int layers = h->tree_node(tree, root, "layers", NULL, "ModuleList", NULL, -1, -1);
    for (int L = 0; L < m->layers; L++) {
        const mv_layer *ly = &m->l[L];
        const fam_attn *a = &ly->attn;
        int64_t Q = (int64_t)a->num_heads * a->qk_head_dim, K = (int64_t)a->num_kv_heads * a->qk_head_dim;
        int64_t V = (int64_t)a->num_kv_heads * a->v_head_dim, O = (int64_t)a->num_heads * a->v_head_dim;
        int lay = h->tree_node(tree, layers, "layers", NULL, "MiMoV2FlashDecoderLayer", NULL, NNT_MODULE_LAYER, L);
        int at = h->tree_node(tree, lay, "self_attn", NULL, "MiMoV2FlashAttention", NULL, NNT_MODULE_SELF_ATTN, L);
        if (m->qkv_chunks) {
            h->tree_node(tree, at, "qkv_proj", NULL, "Linear", fam_linear_detail(d, sizeof d, H, Q + K + V), -1, L);
        } else {
            h->tree_node(tree, at, "q_proj", NULL, "Linear", fam_linear_detail(d, sizeof d, H, Q), -1, L);
            h->tree_node(tree, at, "k_proj", NULL, "Linear", fam_linear_detail(d, sizeof d, H, K), -1, L);
            h->tree_node(tree, at, "v_proj", NULL, "Linear", fam_linear_detail(d, sizeof d, H, V), -1, L);
        }
        h->tree_node(tree, at, "o_proj", NULL, "Linear", fam_linear_detail(d, sizeof d, O, H), -1, L);
        if (ly->mlp_kind == DENSE) {
            int mlp = h->tree_node(tree, lay, "mlp", NULL, "MiMoV2FlashMLP", NULL, NNT_MODULE_MLP, L);
            h->tree_node(tree, mlp, "gate_proj", NULL, "Linear", fam_linear_detail(d, sizeof d, H, m->inter), -1, L);
            h->tree_node(tree, mlp, "up_proj", NULL, "Linear", fam_linear_detail(d, sizeof d, H, m->inter), -1, L);
            h->tree_node(tree, mlp, "down_proj", NULL, "Linear", fam_linear_detail(d, sizeof d, m->inter, H), -1, L);
            h->tree_node(tree, mlp, "act_fn", NULL, "SiLUActivation", NULL, -1, L);
        } else {
            int mlp = h->tree_node(tree, lay, "mlp", NULL, "MiMoV2FlashMoE", NULL, NNT_MODULE_MLP, L);
            int ex = h->tree_node(tree, mlp, "experts", NULL, "MiMoV2FlashExperts", NULL, -1, L);
            h->tree_node(tree, ex, "act_fn", NULL, "SiLUActivation", NULL, -1, L);
            h->tree_node(tree, mlp, "gate", "router", "MiMoV2FlashTopkRouter", NULL, -1, L);
        }
        h->tree_node(tree, lay, "input_layernorm", NULL, "MiMoV2FlashRMSNorm", fam_norm_detail(d, sizeof d, H, m->eps), -1, L);
        if (h->tree_node(tree, lay, "post_attention_layernorm", NULL, "MiMoV2FlashRMSNorm",
                         fam_norm_detail(d, sizeof d, H, m->eps), -1, L) < 0)
            return h->set_error(err, NNT_ERR_OUT_OF_MEMORY, "no memory for the module tree");
    }
    if (h->tree_node(tree, root, "norm", NULL, "MiMoV2FlashRMSNorm", fam_norm_detail(d, sizeof d, H, m->eps), -1, -1) < 0)
        return h->set_error(err, NNT_ERR_OUT_OF_MEMORY, "no memory for the module tree");
    return NNT_OK;
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

/* Block l's weight and cache bytes for the planner: q, k and v projections as the checkpoint's
 * linear weights (a fused qkv_proj holds the same elements), o_proj unquantised (the FP8
 * releases keep it in bfloat16), two layer norms, the sinks of a block that has them; a
 * mixture's float32 router and selection bias and its experts, or the dense MLP. A full block
 * caches every token, a sliding one window - 1 (the query is the window's last). */
static void mv_block_costs(const mv_model *m, const fam_encoding *e, nnt_cost_args *args, int l, int kind, int mlp_kind)
{
    int64_t H = m->hidden, Hq = m->heads[kind], Hkv = m->kv_heads[kind], Dq = m->qk_dim[kind], Dv = m->v_dim[kind];
    int64_t E = m->experts;
    uint64_t w = fam_cost_matrix(e, Hq * Dq, H) + fam_cost_matrix(e, Hkv * Dq, H) + fam_cost_matrix(e, Hkv * Dv, H) +
                 fam_cost_vector(e, H * Hq * Dv) + fam_cost_vector(e, 2 * H) + (m->sinks_on[kind] ? fam_cost_vector(e, Hq) : 0);
    w += mlp_kind == SPARSE ? fam_cost_f32(E * H) + fam_cost_f32(E) + fam_cost_experts(e, E, m->moe_inter, H)
                            : fam_cost_mlp(e, m->inter, H);
    args->weight_bytes[l] = w;
    int64_t keep = kind == SLIDING ? (m->window > 1 ? m->window - 1 : 1) : args->context;
    args->cache_bytes[l] = fam_cost_kv_cache(args->batch, Hkv, Dq, Dv, keep);
}

/* The planner's byte model (nnt_cost_args) from config.json alone, block by block. */
static nnt_status mv_costs(nnt_cost_args *args, nnt_error *err)
{
    mv_model m = {0};
    m.env.core = args->core;
    int *kinds = NULL, *mlp_kinds = NULL;
    fam_encoding e;
    nnt_status st = read_config(&m, args->ckpt, &kinds, &mlp_kinds, err);
    if (st == NNT_OK) st = fam_cost_blocks(args, m.layers, err);
    if (st == NNT_OK) st = fam_cost_encoding(args, &e, err);
    for (int l = 0; st == NNT_OK && l < args->n_blocks; l++) mv_block_costs(&m, &e, args, l, kinds[l], mlp_kinds[l]);
    if (st == NNT_OK) fam_cost_readout(args, &e, m.vocab, m.hidden, m.tied);
    free(kinds);
    free(mlp_kinds);
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
};
