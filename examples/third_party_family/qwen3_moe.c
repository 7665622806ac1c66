/* qwen3_moe.c - an nnt family plugin for Qwen3-MoE (Qwen3MoeForCausalLM, model_type qwen3_moe),
 * written outside nnt's tree against an installed nnt: the public SDK headers and the family
 * kit (<nnt/nnt_family_kit.h>, libnnt_family) only. CMakeLists.txt beside it builds it with
 * find_package(nnt CONFIG) and nnt_add_plugin().
 *
 * The architecture, as transformers' models/qwen3_moe/modeling_qwen3_moe.py (5.x) computes it:
 *   block:     h = x + self_attn(input_layernorm(x)); out = h + mlp(post_attention_layernorm(h))
 *              (RMSNorm everywhere, eps = rms_norm_eps), the kit's decoder skeleton;
 *   attention: q = q_norm(q_proj(x)) and k = k_norm(k_proj(x)) where q_norm / k_norm are RMSNorms
 *              over each head's head_dim values (weights [head_dim], shared by the heads), then
 *              rotary on the whole head in the rotate_half (NeoX) layout, grouped-query heads,
 *              softmax scale head_dim^-0.5, o_proj; no bias, no sliding window here;
 *   mlp:       Qwen3MoeSparseMoeBlock: router logits = gate(x) [.., num_experts], softmax in
 *              float32, top num_experts_per_tok experts, their probabilities divided by their
 *              sum when norm_topk_prob, SwiGLU experts (gate_proj, up_proj, down_proj), no
 *              shared expert;
 *   readout:   final RMSNorm and lm_head (tied to the embedding when tie_word_embeddings).
 * Checkpoint names: the hub's per-expert model.layers.L.mlp.experts.E.{gate,up,down}_proj.weight,
 * or transformers' fused mlp.experts.gate_up_proj / down_proj; model.layers.L.mlp.gate.weight.
 * Blocks with a dense MLP (mlp_only_layers, decoder_sparse_step > 1), attention_bias and
 * use_sliding_window are refused with a message (the released Qwen3-MoE models use none). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <nnt/nnt_family_kit.h>

typedef struct q3_layer {
    nnt_tensor in_norm, post_norm;            /* [H] */
    nnt_tensor q_proj, k_proj, v_proj, o_proj; /* [Hq*D, H], [Hkv*D, H], [Hkv*D, H], [H, Hq*D] */
    nnt_tensor q_norm, k_norm;                /* [D] each */
    fam_moe moe;                              /* router and experts bound from Q3_ARCH */
} q3_layer;

typedef struct q3_model {
    fam_env env;
    int hidden, layers, heads, kv_heads, head_dim, vocab, moe_inter, experts, top_k, norm_topk;
    double eps, theta;
    int tied;
    fam_decoder dec;
    q3_layer *l;
    float *inv_freq; /* [head_dim / 2] */
} q3_model;

static const char *const ARCHS[] = {"Qwen3MoeForCausalLM", NULL};
static const char *const TYPES[] = {"qwen3_moe", NULL};
static const nnt_rename_rule RENAMES[] = {
    {"gate", "router", "Qwen3MoeTopKRouter"},
    {NULL, NULL, NULL},
};

#define CK(x)                                                                                                          \
    do {                                                                                                               \
        nnt_status st_ = (x);                                                                                          \
        if (st_ != NNT_OK) return st_;                                                                                 \
    } while (0)

static nnt_status read_config(q3_model *m, const nnt_checkpoint *ck, nnt_error *err)
{
    const nnt_core_api *h = m->env.core;
    int64_t v;
    CK(h->cfg_int(ck, "hidden_size", 0, 1, &v, err));
    m->hidden = (int)v;
    CK(h->cfg_int(ck, "num_hidden_layers", 0, 1, &v, err));
    m->layers = (int)v;
    CK(h->cfg_int(ck, "num_attention_heads", 0, 1, &v, err));
    m->heads = (int)v;
    CK(h->cfg_int(ck, "num_key_value_heads", m->heads, 0, &v, err));
    m->kv_heads = (int)v;
    CK(h->cfg_int(ck, "head_dim", m->heads ? m->hidden / m->heads : 0, 0, &v, err));
    m->head_dim = (int)v;
    CK(h->cfg_int(ck, "vocab_size", 0, 1, &v, err));
    m->vocab = (int)v;
    CK(h->cfg_int(ck, "moe_intermediate_size", 0, 1, &v, err));
    m->moe_inter = (int)v;
    /* the hub's configs say num_experts; transformers 5 writes num_local_experts */
    const char *ekey = h->cfg_has(ck, "num_experts") ? "num_experts" : "num_local_experts";
    CK(h->cfg_int(ck, ekey, 0, 1, &v, err));
    m->experts = (int)v;
    CK(h->cfg_int(ck, "num_experts_per_tok", 0, 1, &v, err));
    m->top_k = (int)v;
    CK(h->cfg_bool(ck, "norm_topk_prob", 0, 0, &m->norm_topk, err));
    CK(h->cfg_float(ck, "rms_norm_eps", 1e-6, 0, &m->eps, err));
    CK(h->cfg_bool(ck, "tie_word_embeddings", 0, 0, &m->tied, err));
    const char *tkey = h->cfg_has(ck, "rope_parameters.rope_theta") ? "rope_parameters.rope_theta" : "rope_theta";
    CK(h->cfg_float(ck, tkey, 10000.0, 0, &m->theta, err));
    const char *s = NULL;
    CK(h->cfg_string(ck, "rope_parameters.rope_type", "default", 0, &s, err));
    if (strcmp(s, "default") != 0)
        return h->set_error(err, NNT_ERR_UNSUPPORTED, "%s: rope_parameters.rope_type '%s' is not supported (only 'default')",
                            h->cfg_path(ck), s);
    CK(h->cfg_string(ck, "hidden_act", "silu", 0, &s, err));
    if (strcmp(s, "silu") != 0)
        return h->set_error(err, NNT_ERR_UNSUPPORTED, "%s: hidden_act '%s' is not supported (only silu)", h->cfg_path(ck), s);
    int flag = 0;
    CK(h->cfg_bool(ck, "attention_bias", 0, 0, &flag, err));
    if (flag) return h->set_error(err, NNT_ERR_UNSUPPORTED, "%s: attention_bias is not supported", h->cfg_path(ck));
    CK(h->cfg_bool(ck, "use_sliding_window", 0, 0, &flag, err));
    if (flag) return h->set_error(err, NNT_ERR_UNSUPPORTED, "%s: use_sliding_window is not supported", h->cfg_path(ck));
    CK(h->cfg_int(ck, "decoder_sparse_step", 1, 0, &v, err));
    if (v != 1)
        return h->set_error(err, NNT_ERR_UNSUPPORTED,
                            "%s: decoder_sparse_step %lld gives blocks a dense MLP, which this family does not serve",
                            h->cfg_path(ck), (long long)v);
    if (h->cfg_has(ck, "mlp_only_layers.0"))
        return h->set_error(err, NNT_ERR_UNSUPPORTED,
                            "%s: mlp_only_layers gives blocks a dense MLP, which this family does not serve", h->cfg_path(ck));

    const char *bad = NULL;
    if (m->hidden <= 0 || m->layers <= 0 || m->vocab <= 0 || m->moe_inter <= 0) bad = "sizes must be positive";
    else if (m->heads <= 0 || m->kv_heads <= 0 || m->heads % m->kv_heads) bad = "num_attention_heads must be a positive multiple of num_key_value_heads";
    else if (m->head_dim <= 0 || m->head_dim % 2) bad = "head_dim must be positive and even";
    else if (m->experts <= 0 || m->top_k <= 0 || m->top_k > m->experts) bad = "num_experts_per_tok must be between 1 and num_experts";
    if (bad) return h->set_error(err, NNT_ERR_CONFIG, "%s: %s", h->cfg_path(ck), bad);
    return NNT_OK;
}

/* The architecture in one table (the kit's fam_arch): the module tree print(model) shows and
 * under each module its checkpoint tensors - the q3_layer member each binds to, its shape as
 * indices into the sizes q3_describe gives, and how the checkpoint stores it. fam_arch_bind
 * binds a block from it, fam_arch_tree builds `nnt print`'s tree, fam_arch_costs adds up the
 * planner's weight bytes and fam_arch_value_info answers for linear_attn. Sizes: H hidden, V
 * vocabulary, D head_dim, Q query heads * D, KV key/value heads * D, E experts, I an expert's
 * width. The embedding, final norm and lm_head are bound by fam_bind_readout (FAM_BIND_NONE). */
enum { Q3_H, Q3_V, Q3_D, Q3_Q, Q3_KV, Q3_E, Q3_I, Q3_SIZES };
enum { Q3_TIED = 1u << 0 }; /* traits: tie_word_embeddings */

#define Q3_LINEAR(member, pattern, rows, cols)                                                                         \
    {.name = {pattern}, .store = FAM_STORE_LINEAR, .field = offsetof(q3_layer, member), .ndim = 2, .size = {rows, cols}}
#define Q3_GAIN(member, pattern, width)                                                                                \
    {.name = {pattern}, .store = FAM_STORE_PLAIN, .field = offsetof(q3_layer, member), .ndim = 1, .size = {width}}

/* the hub's one tensor per expert, or transformers' fused 3-D tensors */
static const fam_expert_layout Q3_EXPERTS = {
    .fused_gate_up = "model.layers.%d.mlp.experts.gate_up_proj",
    .fused_down = "model.layers.%d.mlp.experts.down_proj",
    .per_expert = {{.gate = "model.layers.%d.mlp.experts.%d.gate_proj.weight",
                    .up = "model.layers.%d.mlp.experts.%d.up_proj.weight",
                    .down = "model.layers.%d.mlp.experts.%d.down_proj.weight"}},
};

static const fam_module Q3_MODULES[] = {
    {.depth = 0, .native = "model", .cls = "Qwen3MoeForCausalLM"},
    {.depth = 1, .native = "lm_head", .cls = "Linear", .detail = FAM_DETAIL_LINEAR,
     .tensors = {{.name = {"lm_head.weight"}, .store = FAM_STORE_PLAIN, .bind = FAM_BIND_NONE, .ndim = 2,
                  .size = {Q3_V, Q3_H}, .unless = Q3_TIED}}},
    {.depth = 1, .native = "embed_tokens", .cls = "Embedding", .detail = FAM_DETAIL_EMBEDDING,
     .tensors = {{.name = {"model.embed_tokens.weight"}, .store = FAM_STORE_PLAIN, .bind = FAM_BIND_NONE, .ndim = 2,
                  .size = {Q3_V, Q3_H}, .first_stage = 1}}},
    {.depth = 1, .native = "layers", .cls = "ModuleList"},
    {.depth = 2, .native = "layers", .cls = "Qwen3MoeDecoderLayer", .block = 1},
    {.depth = 3, .native = "self_attn", .cls = "Qwen3MoeAttention", .module = NNT_MODULE_SELF_ATTN},
    {.depth = 4, .native = "q_proj", .cls = "Linear", .detail = FAM_DETAIL_LINEAR,
     .tensors = {Q3_LINEAR(q_proj, "model.layers.%d.self_attn.q_proj.weight", Q3_Q, Q3_H)}},
    {.depth = 4, .native = "k_proj", .cls = "Linear", .detail = FAM_DETAIL_LINEAR,
     .tensors = {Q3_LINEAR(k_proj, "model.layers.%d.self_attn.k_proj.weight", Q3_KV, Q3_H)}},
    {.depth = 4, .native = "v_proj", .cls = "Linear", .detail = FAM_DETAIL_LINEAR,
     .tensors = {Q3_LINEAR(v_proj, "model.layers.%d.self_attn.v_proj.weight", Q3_KV, Q3_H)}},
    {.depth = 4, .native = "o_proj", .cls = "Linear", .detail = FAM_DETAIL_LINEAR,
     .tensors = {Q3_LINEAR(o_proj, "model.layers.%d.self_attn.o_proj.weight", Q3_H, Q3_Q)}},
    /* per-head RMSNorms: one [head_dim] gain shared by the heads */
    {.depth = 4, .native = "q_norm", .cls = "Qwen3MoeRMSNorm", .detail = FAM_DETAIL_NORM,
     .tensors = {Q3_GAIN(q_norm, "model.layers.%d.self_attn.q_norm.weight", Q3_D)}},
    {.depth = 4, .native = "k_norm", .cls = "Qwen3MoeRMSNorm", .detail = FAM_DETAIL_NORM,
     .tensors = {Q3_GAIN(k_norm, "model.layers.%d.self_attn.k_norm.weight", Q3_D)}},
    {.depth = 3, .native = "mlp", .cls = "Qwen3MoeSparseMoeBlock", .module = NNT_MODULE_MLP},
    {.depth = 4, .native = "gate", .cls = "Qwen3MoeTopKRouter",
     .tensors = {{.name = {"model.layers.%d.mlp.gate.weight"}, .store = FAM_STORE_PLAIN,
                  .field = offsetof(q3_layer, moe.router), .ndim = 2, .size = {Q3_E, Q3_H}}}},
    {.depth = 4, .native = "experts", .cls = "Qwen3MoeExperts",
     .tensors = {{.store = FAM_STORE_EXPERTS, .bind = FAM_BIND_EXPERTS, .field = offsetof(q3_layer, moe.experts),
                  .ndim = 3, .size = {Q3_E, Q3_I, Q3_H}, .experts = &Q3_EXPERTS}}},
    {.depth = 5, .native = "act_fn", .cls = "SiLUActivation"},
    {.depth = 3, .native = "input_layernorm", .cls = "Qwen3MoeRMSNorm", .detail = FAM_DETAIL_NORM,
     .tensors = {Q3_GAIN(in_norm, "model.layers.%d.input_layernorm.weight", Q3_H)}},
    {.depth = 3, .native = "post_attention_layernorm", .cls = "Qwen3MoeRMSNorm", .detail = FAM_DETAIL_NORM,
     .tensors = {Q3_GAIN(post_norm, "model.layers.%d.post_attention_layernorm.weight", Q3_H)}},
    {.depth = 1, .native = "norm", .cls = "Qwen3MoeRMSNorm", .detail = FAM_DETAIL_NORM,
     .tensors = {{.name = {"model.norm.weight"}, .store = FAM_STORE_PLAIN, .bind = FAM_BIND_NONE, .ndim = 1,
                  .size = {Q3_H}}}},
};

/* Every block alike: the sizes from config.json and the tied-embedding trait. */
static void q3_describe(const void *self, int layer, fam_block_facts *out)
{
    const q3_model *m = self;
    (void)layer;
    out->traits = m->tied ? Q3_TIED : 0;
    out->eps = m->eps;
    out->size[Q3_H] = m->hidden;
    out->size[Q3_V] = m->vocab;
    out->size[Q3_D] = m->head_dim;
    out->size[Q3_Q] = (int64_t)m->heads * m->head_dim;
    out->size[Q3_KV] = (int64_t)m->kv_heads * m->head_dim;
    out->size[Q3_E] = m->experts;
    out->size[Q3_I] = m->moe_inter;
}

static const fam_arch Q3_ARCH = {
    .modules = Q3_MODULES,
    .n_modules = (int)(sizeof Q3_MODULES / sizeof Q3_MODULES[0]),
    .n_sizes = Q3_SIZES,
    .renames = RENAMES,
    .off_page = {[NNT_MODULE_LINEAR_ATTN] = "every Qwen3-MoE block uses softmax attention; none has a linear-attention "
                                            "mixer"},
    .describe = q3_describe,
};

/* A block's tensors from Q3_ARCH, then the routing the table does not hold. */
static nnt_status bind_layer(q3_model *m, const nnt_checkpoint *ck, int L, nnt_error *err)
{
    q3_layer *ly = &m->l[L];
    CK(fam_arch_bind(&m->env, &Q3_ARCH, m, ck, L, ly, err));
    ly->moe.num_experts = m->experts;
    ly->moe.top_k = m->top_k;
    ly->moe.intermediate = m->moe_inter;
    /* softmax over all experts in float32, top-k, optionally renormalised (Qwen3MoeTopKRouter) */
    ly->moe.route = (nnt_route_params){
        .struct_size = sizeof(nnt_route_params),
        .score_fn = NNT_SCORE_SOFTMAX,
        .top_k = m->top_k,
        .n_group = 1,
        .topk_group = 1,
        .renormalize = m->norm_topk,
        .renorm_eps = 0.0f,
        .scaling_factor = 1.0f,
        .indices_given = 0,
    };
    ly->moe.router_f32 = 0;
    ly->moe.route_bf16 = 0;
    return NNT_OK;
}

static void attn_shape(const q3_model *m, const q3_layer *ly, fam_attn *a)
{
    memset(a, 0, sizeof *a);
    a->num_heads = m->heads;
    a->num_kv_heads = m->kv_heads;
    a->qk_head_dim = m->head_dim;
    a->v_head_dim = m->head_dim;
    a->rot_start = 0;
    a->rot_dim = m->head_dim; /* the whole head */
    a->rope_style = NNT_ROPE_NEOX;
    a->inv_freq = m->inv_freq;
    a->rope_mscale = 1.0f;
    a->scale = 1.0f / sqrtf((float)m->head_dim);
    if (ly) a->o_proj = ly->o_proj;
}

/* Projections, then q_norm / k_norm on each head's head_dim values: q [M, Hq*D] seen as
 * [M*Hq, D] with the [D] gain, likewise k; then the kit's attention (rotary, softmax, o_proj). */
static nnt_status q3_attention(void *self, nnt_run *run, int L, const nnt_forward_args *args, const nnt_attn_mask *mask,
                               const nnt_tensor *xn, nnt_tensor *out, nnt_error *err)
{
    q3_model *m = self;
    const fam_env *env = &m->env;
    const q3_layer *ly = &m->l[L];
    int64_t M = xn->shape[0], D = m->head_dim, Q = (int64_t)m->heads * D, KV = (int64_t)m->kv_heads * D;
    size_t mark = env->core->arena_mark(run);
    nnt_tensor q, k, v;
    nnt_status st;
    if ((st = fam_alloc(env, run, NNT_F32, &q, err, NNT_SHAPE(M, Q))) != NNT_OK ||
        (st = fam_alloc(env, run, NNT_F32, &k, err, NNT_SHAPE(M, KV))) != NNT_OK ||
        (st = fam_alloc(env, run, NNT_F32, &v, err, NNT_SHAPE(M, KV))) != NNT_OK ||
        (st = env->be->linear(env->be_ctx, xn, &ly->q_proj, &q, err)) != NNT_OK ||
        (st = env->be->linear(env->be_ctx, xn, &ly->k_proj, &k, err)) != NNT_OK ||
        (st = env->be->linear(env->be_ctx, xn, &ly->v_proj, &v, err)) != NNT_OK)
        goto done;
    nnt_tensor qh = fam_view(&q, NNT_SHAPE(M * m->heads, D)), kh = fam_view(&k, NNT_SHAPE(M * m->kv_heads, D));
    if ((st = env->be->rms_norm(env->be_ctx, &qh, &ly->q_norm, (float)m->eps, &qh, err)) != NNT_OK ||
        (st = env->be->rms_norm(env->be_ctx, &kh, &ly->k_norm, (float)m->eps, &kh, err)) != NNT_OK)
        goto done;
    fam_attn a;
    attn_shape(m, ly, &a);
    st = fam_attention_forward(env, run, L, &a, args, mask, &q, &k, &v, fam_layer_cache(args, L), out, err);
done:
    env->core->arena_release(run, mark);
    return st;
}

static nnt_status q3_mlp(void *self, nnt_run *run, int L, const nnt_forward_args *args, const nnt_tensor *xn,
                         nnt_tensor *out, nnt_error *err)
{
    q3_model *m = self;
    nnt_call_dims dims = {args->batch, args->seq, args->past};
    return fam_moe_forward(&m->env, run, L, &m->l[L].moe, &dims, args->input_ids, xn, out, err);
}

static void q3_unload(void *model)
{
    q3_model *m = model;
    if (!m) return;
    fam_env_release(&m->env); /* weights and the experts' arrays */
    free(m->l);
    free(m->inv_freq);
    free(m);
}

static nnt_status q3_load(const nnt_load_args *args, void **out, nnt_error *err)
{
    if (fam_kit_abi() != (((uint32_t)NNT_FAMILY_KIT_ABI_MAJOR << 16) | NNT_FAMILY_KIT_ABI_MINOR))
        return args->core->set_error(err, NNT_ERR_ABI, "qwen3_moe: linked with a family kit of ABI %u.%u, built against %d.%d",
                                     (unsigned)(fam_kit_abi() >> 16), (unsigned)(fam_kit_abi() & 0xffff),
                                     NNT_FAMILY_KIT_ABI_MAJOR, NNT_FAMILY_KIT_ABI_MINOR);
    q3_model *m = calloc(1, sizeof *m);
    if (!m) return args->core->set_error(err, NNT_ERR_OUT_OF_MEMORY, "no memory");
    fam_env_init(&m->env, args);
    const nnt_checkpoint *ck = args->ckpt;
    nnt_status st = read_config(m, ck, err);
    if (st == NNT_OK) {
        m->l = calloc((size_t)m->layers, sizeof *m->l);
        m->inv_freq = calloc((size_t)(m->head_dim / 2 + 1), sizeof *m->inv_freq);
        if (!m->l || !m->inv_freq) st = args->core->set_error(err, NNT_ERR_OUT_OF_MEMORY, "no memory");
    }
    if (st == NNT_OK) {
        fam_rope_inv_freq(m->inv_freq, m->head_dim, m->theta);
        st = fam_bind_readout(&m->env, ck, m->vocab, m->hidden, m->tied, &m->dec, err);
    }
    for (int L = 0; st == NNT_OK && L < m->layers; L++) st = bind_layer(m, ck, L, err);
    if (st != NNT_OK) {
        q3_unload(m);
        return st;
    }
    fam_decoder_wire(&m->dec, m->layers, m->hidden, m->vocab, m->eps, &m->l[0].in_norm, &m->l[0].post_norm,
                     sizeof(q3_layer), m, q3_attention, q3_mlp);
    *out = m;
    return NNT_OK;
}

static void q3_info(const void *model, nnt_model_info *out)
{
    const q3_model *m = model;
    memset(out, 0, sizeof *out);
    out->architecture = "Qwen3MoeForCausalLM";
    out->model_type = "qwen3_moe";
    out->root_class = "Qwen3MoeForCausalLM";
    out->num_layers = m->layers;
    out->hidden_size = m->hidden;
    out->vocab_size = m->vocab;
    out->num_heads = m->heads;
    out->num_kv_heads = m->kv_heads;
    out->head_dim = m->head_dim;
    out->qk_head_dim = m->head_dim;
    out->intermediate_size = m->moe_inter;
    out->num_experts = m->experts;
    out->top_k = m->top_k;
    out->num_streams = 1;
}

static nnt_status q3_value_info(const void *model, int layer, nnt_value_id id, const nnt_call_dims *d, nnt_value_info *out)
{
    const q3_model *m = model;
    int64_t B = d ? d->batch : 0, T = d ? d->seq : 0, H = m->hidden, E = m->experts, K = m->top_k;
    if (fam_decoder_info(m->hidden, m->vocab, id, d, out)) return NNT_OK;
    if (fam_arch_value_info(&Q3_ARCH, m, layer, id, out)) return NNT_OK; /* linear_attn: no such module */
    switch (id) {
    case NNT_VALUE_MLP_OUTPUT:
    case NNT_VALUE_ROUTED_OUTPUT: fam_served(out, d, NNT_F32, 1, NNT_SHAPE(B, T, H)); return NNT_OK;
    case NNT_VALUE_ROUTER_LOGITS: fam_served(out, d, NNT_F32, 1, NNT_SHAPE(B, T, E)); return NNT_OK;
    case NNT_VALUE_EXPERT_WEIGHTS: fam_served(out, d, NNT_F32, 1, NNT_SHAPE(B, T, K)); return NNT_OK;
    case NNT_VALUE_EXPERT_INDICES: fam_served(out, d, NNT_I32, 1, NNT_SHAPE(B, T, K)); return NNT_OK;
    case NNT_VALUE_EXPERT_OUTPUTS: fam_served(out, d, NNT_F32, 1, NNT_SHAPE(B, T, K, H)); return NNT_OK;
    case NNT_VALUE_SHARED_EXPERT_OUTPUT:
        fam_unserved(out, "Qwen3-MoE has no shared expert; routed_output is the whole mlp_output");
        return NNT_OK;
    case NNT_VALUE_MLP_ACTIVATION:
    case NNT_VALUE_MLP_NEURONS:
        fam_unserved(out, "every Qwen3-MoE MLP here is a mixture; an expert's activations exist only for the tokens "
                          "routed to it, so no [batch seq intermediate_size] tensor exists");
        return NNT_OK;
    default: break;
    }
    if (fam_value_module(id) == NNT_MODULE_SELF_ATTN) {
        fam_attn a;
        attn_shape(m, layer >= 0 ? &m->l[layer] : NULL, &a);
        fam_attention_info(&a, m->hidden, id, d, out);
        return NNT_OK;
    }
    fam_unserved(out, "not a Qwen3-MoE value");
    return NNT_OK;
}

/* `nnt print`'s module tree, from Q3_ARCH. */
static nnt_status q3_build_tree(const void *model, nnt_tree *tree, nnt_error *err)
{
    const q3_model *m = model;
    return fam_arch_tree(m->env.core, &Q3_ARCH, m, m->layers, tree, err);
}

static nnt_status q3_forward(void *model, nnt_run *run, const nnt_forward_args *args, nnt_error *err)
{
    q3_model *m = model;
    return fam_decoder_forward(&m->env, run, args, &m->dec, err);
}

static nnt_status q3_project(void *model, nnt_run *run, const nnt_tensor *x, int streams, nnt_tensor *logits,
                             nnt_error *err)
{
    q3_model *m = model;
    (void)streams; /* one residual stream */
    return fam_decoder_project(&m->env, run, &m->dec, x, logits, err);
}

static int q3_attn_of(const void *model, int layer, fam_attn *out)
{
    const q3_model *m = model;
    attn_shape(m, &m->l[layer], out);
    return 1;
}

static nnt_status q3_cache_new(void *model, int batch, int capacity, void **cache, nnt_error *err)
{
    q3_model *m = model;
    return fam_attention_caches_new(&m->env, m->layers, batch, capacity, q3_attn_of, m, (fam_layer_caches **)cache, err);
}

static void q3_cache_free(void *model, void *cache)
{
    q3_model *m = model;
    fam_layer_caches_free(&m->env, cache);
}

/* The planner's byte model (nnt_cost_args, ABI 3.4) from config.json alone: the weights of every
 * tensor Q3_ARCH lists as the checkpoint's encoding stores them (fam_arch_costs), and a
 * key/value cache of every token. `nnt plan` and a run over several ranks (mpirun) split the
 * blocks by these. */
static nnt_status q3_costs(nnt_cost_args *args, nnt_error *err)
{
    q3_model m = {0};
    m.env.core = args->core;
    fam_encoding e;
    CK(read_config(&m, args->ckpt, err));
    CK(fam_cost_blocks(args, m.layers, err));
    CK(fam_cost_encoding(args, &e, err));
    CK(fam_arch_costs(args, &Q3_ARCH, &m, &e, err));
    for (int l = 0; l < args->n_blocks; l++)
        args->cache_bytes[l] = fam_cost_kv_cache(args->batch, m.kv_heads, m.head_dim, m.head_dim, args->context);
    return NNT_OK;
}

NNT_PLUGIN_EXPORT const nnt_family_descriptor nnt_family_plugin = {
    .header = NNT_PLUGIN_HEADER(nnt_family_descriptor, NNT_PLUGIN_FAMILY, "qwen3_moe", "0.1.0",
                                "Qwen3-MoE (Qwen3MoeForCausalLM), an out-of-tree example family"),
    .architectures = ARCHS,
    .model_types = TYPES,
    .renames = RENAMES,
    .load = q3_load,
    .unload = q3_unload,
    .info = q3_info,
    .value_info = q3_value_info,
    .build_tree = q3_build_tree,
    .forward = q3_forward,
    .project = q3_project,
    .cache_new = q3_cache_new,
    .cache_free = q3_cache_free,
    .ops_needed = NNT_OPS_DECODER, /* the kit's decoder, attention and MoE helpers */
    .costs = q3_costs,
};
