/* minimax_m2.c - the MiniMax-M2 family plugin (MiniMaxM2ForCausalLM; also M2.1, M2.5, M2.7).
 *
 * Block (Llama's pre-norm block): h = x + self_attn(input_layernorm(x));
 * out = h + mlp(post_attention_layernorm(h)). Attention: q_norm / k_norm are one RMSNorm over
 * the whole q / k projection (before the head split), NeoX rotary on the first rotary_dim
 * dimensions of each head, grouped-query heads, no sink or window. Every MLP is a mixture:
 * sigmoid router, selection bias (e_score_correction_bias) used for the choice only, top-k,
 * weights renormalised to one, SwiGLU experts (w1 gate, w3 up, w2 down), no shared expert.
 * Final RMSNorm, untied lm_head. Sources: transformers'
 * src/transformers/models/minimax_m2/modeling_minimax_m2.py; vLLM's
 * vllm/model_executor/models/minimax_m2.py (the hub's tensor names); the MiniMaxAI/MiniMax-M2
 * model card and its config.json. Values: docs/plugin-guide.md; this file is walked through in
 * docs/adding-a-family.md. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <nnt/nnt_family_kit.h>
#include <nnt/nnt_version.h> /* the plugin reports nnt's version */

typedef struct mm_layer {
    nnt_tensor in_norm, post_norm; /* [H] */
    nnt_tensor q_proj, k_proj, v_proj, o_proj;
    nnt_tensor q_norm, k_norm; /* [Hq*D], [Hkv*D] */
    fam_moe moe;      /* router, selection bias and experts bound from MM_ARCH */
    float *bias_host; /* F32 host copy of e_score_correction_bias (owned by the env) */
} mm_layer;

typedef struct mm_model {
    fam_env env;
    int first_block, end_block; /* the blocks whose weights were bound (a stage's load), and the
                                 * only ones sessions keep caches for */
    /* config */
    int hidden, layers, heads, kv_heads, head_dim, rotary_dim, vocab, inter, experts, top_k;
    double eps, theta;
    int tied;
    char arch[64];
    /* weights */
    fam_decoder dec; /* embedding, norms, lm_head and the block callbacks */
    mm_layer *l;
    float *inv_freq;
} mm_model;

static const char *const ARCHS[] = {"MiniMaxM2ForCausalLM", NULL};
static const char *const TYPES[] = {"minimax_m2", NULL};

/* RENAME: the checkpoint's names for modules nnterp names otherwise. */
static const nnt_rename_rule RENAMES[] = {
    {"block_sparse_moe", "mlp", NULL},
    {"gate", "router", "MiniMaxM2TopKRouter"},
    {NULL, NULL, NULL},
};

#define CK(x)                                                                                                          \
    do {                                                                                                               \
        nnt_status st_ = (x);                                                                                          \
        if (st_ != NNT_OK) return st_;                                                                                 \
    } while (0)

static nnt_status read_config(mm_model *m, const nnt_checkpoint *ck, nnt_error *err)
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
    CK(h->cfg_int(ck, "intermediate_size", 0, 1, &v, err));
    m->inter = (int)v;
    const char *ekey = h->cfg_has(ck, "num_local_experts") ? "num_local_experts" : "num_experts";
    CK(h->cfg_int(ck, ekey, 0, 1, &v, err));
    m->experts = (int)v;
    CK(h->cfg_int(ck, "num_experts_per_tok", 0, 1, &v, err));
    m->top_k = (int)v;
    CK(h->cfg_float(ck, "rms_norm_eps", 1e-6, 0, &m->eps, err));
    CK(h->cfg_bool(ck, "tie_word_embeddings", 0, 0, &m->tied, err));
    /* rotary: the hub's rotary_dim, else the partial factor, else half the head */
    if (h->cfg_has(ck, "rotary_dim")) {
        CK(h->cfg_int(ck, "rotary_dim", 0, 1, &v, err));
        m->rotary_dim = (int)v;
    } else {
        double f = 0.5;
        const char *fkey = h->cfg_has(ck, "rope_parameters.partial_rotary_factor") ? "rope_parameters.partial_rotary_factor"
                                                                                   : "partial_rotary_factor";
        CK(h->cfg_float(ck, fkey, 0.5, 0, &f, err));
        if (!(f >= 0.0 && f <= 1.0)) /* also before the cast: a huge factor would overflow it */
            return h->set_error(err, NNT_ERR_CONFIG, "%s: %s is %g; expected the rotary share of a head, in [0, 1]",
                                h->cfg_path(ck), fkey, f);
        m->rotary_dim = (int)(m->head_dim * f);
    }
    const char *tkey = h->cfg_has(ck, "rope_theta") ? "rope_theta" : "rope_parameters.rope_theta";
    CK(h->cfg_float(ck, tkey, 5000000.0, 0, &m->theta, err));
    const char *s = NULL;
    CK(h->cfg_string(ck, "rope_parameters.rope_type", "default", 0, &s, err));
    if (strcmp(s, "default") != 0)
        return h->set_error(err, NNT_ERR_UNSUPPORTED, "%s: rope_parameters.rope_type '%s' is not supported (only 'default')",
                            h->cfg_path(ck), s);
    CK(h->cfg_string(ck, "hidden_act", "silu", 0, &s, err));
    if (strcmp(s, "silu") != 0)
        return h->set_error(err, NNT_ERR_UNSUPPORTED, "%s: hidden_act '%s' is not supported (MiniMax-M2 experts use silu)",
                            h->cfg_path(ck), s);
    CK(h->cfg_string(ck, "scoring_func", "sigmoid", 0, &s, err));
    if (strcmp(s, "sigmoid") != 0)
        return h->set_error(err, NNT_ERR_UNSUPPORTED, "%s: scoring_func '%s' is not supported (MiniMax-M2 routes by sigmoid)",
                            h->cfg_path(ck), s);
    CK(h->cfg_int(ck, "shared_intermediate_size", 0, 0, &v, err));
    if (v != 0)
        return h->set_error(err, NNT_ERR_UNSUPPORTED, "%s: shared_intermediate_size is %lld; MiniMax-M2 has no shared expert",
                            h->cfg_path(ck), (long long)v);
    snprintf(m->arch, sizeof m->arch, "%s", "MiniMaxM2ForCausalLM");

    const char *bad = NULL;
    if (m->hidden <= 0) bad = "hidden_size must be positive";
    else if (m->layers <= 0) bad = "num_hidden_layers must be positive";
    else if (m->heads <= 0 || m->kv_heads <= 0 || m->heads % m->kv_heads) bad = "num_attention_heads must be a positive multiple of num_key_value_heads";
    else if (m->head_dim <= 0) bad = "head_dim must be positive";
    else if (m->rotary_dim < 0 || m->rotary_dim > m->head_dim || m->rotary_dim % 2) bad = "rotary_dim must be even and at most head_dim";
    else if (m->vocab <= 0 || m->inter <= 0) bad = "vocab_size and intermediate_size must be positive";
    else if (m->experts <= 0 || m->top_k <= 0 || m->top_k > m->experts) bad = "num_experts_per_tok must be between 1 and num_local_experts";
    if (bad) return h->set_error(err, NNT_ERR_CONFIG, "%s: %s", h->cfg_path(ck), bad);
    return NNT_OK;
}

/* The architecture, declared once (the kit's fam_arch): the module tree print(model) shows and,
 * under each module, its checkpoint tensors - where each binds in mm_layer, its shape as indices
 * into the sizes mm_describe gives, how the checkpoint stores it, and its spellings (the hub's
 * names under block_sparse_moe, transformers' under mlp). fam_arch_bind binds a block from it,
 * fam_arch_tree builds the printout, fam_arch_costs adds up the planner's weight bytes and
 * fam_arch_value_info serves the modules' values. Sizes: H hidden, V vocabulary, Q query heads *
 * head_dim, KV key/value heads * head_dim, E experts, I an expert's width. The embedding, final
 * norm and lm_head are bound by fam_bind_readout_stage (FAM_BIND_NONE here). */
enum { MM_H, MM_V, MM_Q, MM_KV, MM_E, MM_I, MM_SIZES };
enum { MM_TIED = 1u << 0 }; /* traits: tie_word_embeddings (lm_head is the embedding) */

#define MM_LINEAR(member, pattern, rows, cols)                                                                         \
    {.name = {pattern}, .store = FAM_STORE_LINEAR, .field = offsetof(mm_layer, member), .ndim = 2, .size = {rows, cols}}
#define MM_GAIN(member, pattern, width)                                                                                \
    {.name = {pattern}, .store = FAM_STORE_PLAIN, .field = offsetof(mm_layer, member), .ndim = 1, .size = {width}}

/* one tensor per expert (the hub's w1/w3/w2, or gate/up/down), or transformers' fused 3-D tensors */
static const fam_module MM_MODULES[] = {
    {.depth = 0, .native = "model", .cls = "MiniMaxM2ForCausalLM"},
    {.depth = 1, .native = "lm_head", .cls = "Linear", .detail = FAM_DETAIL_LINEAR,
     .tensors = {{.name = {"lm_head.weight"}, .store = FAM_STORE_PLAIN, .bind = FAM_BIND_NONE, .ndim = 2,
                  .size = {MM_V, MM_H}, .unless = MM_TIED}},
     .alias_in = FAM_ALIAS(NNT_VALUE_FINAL_NORM_OUTPUT), .alias_out = FAM_ALIAS(NNT_VALUE_LM_HEAD_OUTPUT),
     .alias_in_edit = 1},
    {.depth = 1, .native = "embed_tokens", .cls = "Embedding", .detail = FAM_DETAIL_EMBEDDING,
     .tensors = {{.name = {"model.embed_tokens.weight"}, .store = FAM_STORE_PLAIN, .bind = FAM_BIND_NONE, .ndim = 2,
                  .size = {MM_V, MM_H}, .first_stage = 1}},
     .alias_in = FAM_ALIAS(NNT_VALUE_INPUT_IDS), .alias_out = FAM_ALIAS(NNT_VALUE_TOKEN_EMBEDDINGS), .alias_in_edit = 1},
    {.depth = 1, .native = "layers", .cls = "ModuleList"},
    {.depth = 2, .native = "layers", .cls = "MiniMaxM2DecoderLayer", .block = 1},
    {.depth = 3, .native = "self_attn", .cls = "MiniMaxM2Attention", .module = NNT_MODULE_SELF_ATTN,
     .alias_in = FAM_ALIAS(NNT_VALUE_ATTENTION_NORM_OUTPUT), .alias_out = FAM_ALIAS(NNT_VALUE_ATTN_OUTPUT),
     .alias_in_edit = 1},
    {.depth = 4, .native = "q_proj", .cls = "Linear", .detail = FAM_DETAIL_LINEAR,
     .tensors = {MM_LINEAR(q_proj, "model.layers.%d.self_attn.q_proj.weight", MM_Q, MM_H)}},
    {.depth = 4, .native = "k_proj", .cls = "Linear", .detail = FAM_DETAIL_LINEAR,
     .tensors = {MM_LINEAR(k_proj, "model.layers.%d.self_attn.k_proj.weight", MM_KV, MM_H)}},
    {.depth = 4, .native = "v_proj", .cls = "Linear", .detail = FAM_DETAIL_LINEAR,
     .tensors = {MM_LINEAR(v_proj, "model.layers.%d.self_attn.v_proj.weight", MM_KV, MM_H)}},
    {.depth = 4, .native = "o_proj", .cls = "Linear", .detail = FAM_DETAIL_LINEAR,
     .tensors = {MM_LINEAR(o_proj, "model.layers.%d.self_attn.o_proj.weight", MM_H, MM_Q)},
     .alias_in = FAM_ALIAS(NNT_VALUE_ATTN_PREMIX), .alias_out = FAM_ALIAS(NNT_VALUE_ATTN_OUTPUT),
     .alias_in_edit = 1},
    /* one RMSNorm over each whole projection, all heads together */
    {.depth = 4, .native = "q_norm", .cls = "MiniMaxM2RMSNorm", .detail = FAM_DETAIL_NORM,
     .tensors = {MM_GAIN(q_norm, "model.layers.%d.self_attn.q_norm.weight", MM_Q)}},
    {.depth = 4, .native = "k_norm", .cls = "MiniMaxM2RMSNorm", .detail = FAM_DETAIL_NORM,
     .tensors = {MM_GAIN(k_norm, "model.layers.%d.self_attn.k_norm.weight", MM_KV)}},
    {.depth = 3, .native = "block_sparse_moe", .cls = "MiniMaxM2SparseMoeBlock", .module = NNT_MODULE_MLP,
     .alias_in = FAM_ALIAS(NNT_VALUE_MLP_INPUT), .alias_out = FAM_ALIAS(NNT_VALUE_MLP_OUTPUT),
     .alias_in_edit = 1},
    /* the router (float32 in the releases) and its optional selection bias, in any of three places */
    {.depth = 4, .native = "gate", .cls = "MiniMaxM2TopKRouter",
     .tensors = {{.name = {"model.layers.%d.block_sparse_moe.gate.weight", "model.layers.%d.mlp.gate.weight"},
                  .store = FAM_STORE_F32, .field = offsetof(mm_layer, moe.router), .ndim = 2, .size = {MM_E, MM_H}},
                 {.name = {"model.layers.%d.block_sparse_moe.e_score_correction_bias",
                           "model.layers.%d.mlp.e_score_correction_bias",
                           "model.layers.%d.mlp.gate.e_score_correction_bias"},
                  .store = FAM_STORE_F32, .bind = FAM_BIND_VECTOR, .field = offsetof(mm_layer, moe.bias),
                  .host = offsetof(mm_layer, bias_host), .ndim = 1, .size = {MM_E}, .optional = 1}},
     .alias_in = FAM_ALIAS(NNT_VALUE_MLP_INPUT), .alias_out = FAM_ALIAS(NNT_VALUE_ROUTER_LOGITS)},
    {.depth = 4, .native = "experts", .cls = "MiniMaxM2Experts",
     .tensors = {{.store = FAM_STORE_EXPERTS, .bind = FAM_BIND_EXPERTS, .field = offsetof(mm_layer, moe.experts),
                  .ndim = 3, .size = {MM_E, MM_I, MM_H}, .experts = &fam_experts_block_sparse_moe}},
     .alias_in = FAM_ALIAS(NNT_VALUE_MLP_INPUT), .alias_out = FAM_ALIAS(NNT_VALUE_ROUTED_OUTPUT)},
    {.depth = 5, .native = "act_fn", .cls = "SiLUActivation"},
    {.depth = 3, .native = "input_layernorm", .cls = "MiniMaxM2RMSNorm", .detail = FAM_DETAIL_NORM,
     .tensors = {MM_GAIN(in_norm, "model.layers.%d.input_layernorm.weight", MM_H)},
     .alias_out = FAM_ALIAS(NNT_VALUE_ATTENTION_NORM_OUTPUT)},
    {.depth = 3, .native = "post_attention_layernorm", .cls = "MiniMaxM2RMSNorm", .detail = FAM_DETAIL_NORM,
     .tensors = {MM_GAIN(post_norm, "model.layers.%d.post_attention_layernorm.weight", MM_H)},
     .alias_out = FAM_ALIAS(NNT_VALUE_MLP_NORM_OUTPUT)},
    /* its input is the last block's layer_output, a value of a block, not of the model */
    {.depth = 1, .native = "norm", .cls = "MiniMaxM2RMSNorm", .detail = FAM_DETAIL_NORM,
     .tensors = {{.name = {"model.norm.weight"}, .store = FAM_STORE_PLAIN, .bind = FAM_BIND_NONE, .ndim = 1,
                  .size = {MM_H}}},
     .alias_out = FAM_ALIAS(NNT_VALUE_FINAL_NORM_OUTPUT)},
};

/* Every block alike: the sizes from config.json, the tied-embedding trait. */
static void mm_describe(const void *self, int layer, fam_block_facts *out)
{
    const mm_model *m = self;
    (void)layer;
    out->traits = m->tied ? MM_TIED : 0;
    out->eps = m->eps;
    out->size[MM_H] = m->hidden;
    out->size[MM_V] = m->vocab;
    out->size[MM_Q] = (int64_t)m->heads * m->head_dim;
    out->size[MM_KV] = (int64_t)m->kv_heads * m->head_dim;
    out->size[MM_E] = m->experts;
    out->size[MM_I] = m->inter;
}

static const fam_arch MM_ARCH = {
    .modules = MM_MODULES,
    .n_modules = (int)(sizeof MM_MODULES / sizeof MM_MODULES[0]),
    .n_sizes = MM_SIZES,
    .renames = RENAMES,
    .off_page = {[NNT_MODULE_LINEAR_ATTN] = "every MiniMax-M2 block mixes tokens with softmax attention (self_attn); no "
                                            "block has a linear-attention mixer or a recurrent state"},
    .describe = mm_describe,
};

/* A block's tensors from MM_ARCH, then the routing the table does not hold: sigmoid scores, the
 * selection bias for the choice only, top-k renormalised to one, no scaling, no shared expert. */
static nnt_status bind_layer(mm_model *m, const nnt_checkpoint *ck, int L, nnt_error *err)
{
    mm_layer *ly = &m->l[L];
    CK(fam_arch_bind(&m->env, &MM_ARCH, m, ck, L, ly, err));
    ly->moe.num_experts = m->experts;
    ly->moe.top_k = m->top_k;
    ly->moe.intermediate = m->inter;
    ly->moe.route = (nnt_route_params){
        .struct_size = sizeof(nnt_route_params),
        .score_fn = NNT_SCORE_SIGMOID,
        .top_k = m->top_k,
        .n_group = 1,
        .topk_group = 1,
        .renormalize = 1,
        .renorm_eps = 0.0f,
        .scaling_factor = 1.0f,
        .indices_given = 0,
    };
    ly->moe.swiglu_limit = 0.0f;
    ly->moe.has_shared = 0;
    return NNT_OK;
}

static void attn_shape(const mm_model *m, const mm_layer *ly, fam_attn *a)
{
    memset(a, 0, sizeof *a);
    a->num_heads = m->heads;
    a->num_kv_heads = m->kv_heads;
    a->qk_head_dim = m->head_dim;
    a->v_head_dim = m->head_dim;
    a->rot_start = 0;
    a->rot_dim = m->rotary_dim;
    a->rope_style = NNT_ROPE_NEOX;
    a->inv_freq = m->inv_freq;
    a->rope_mscale = 1.0f;
    a->scale = 1.0f / sqrtf((float)m->head_dim);
    a->window = 0;
    a->sinks = NULL;
    if (ly) a->o_proj = ly->o_proj;
}

/* The attention sublayer: projections, one RMSNorm over each whole projection (all heads
 * together: their weights are num_heads * head_dim and num_kv_heads * head_dim long, as in
 * transformers' MiniMaxM2Attention), then the shared attention with partial NeoX rotary. */
static nnt_status mm_attention(void *self, nnt_run *run, int L, const nnt_forward_args *args,
                               const nnt_attn_mask *mask, const nnt_tensor *xn, nnt_tensor *out, nnt_error *err)
{
    mm_model *m = self;
    const fam_env *env = &m->env;
    const mm_layer *ly = &m->l[L];
    int64_t M = xn->shape[0], Q = (int64_t)m->heads * m->head_dim, KV = (int64_t)m->kv_heads * m->head_dim;
    size_t mark = env->core->arena_mark(run);
    nnt_tensor q, k, v;
    nnt_status st;
    const nnt_call_dims dims = {args->batch, args->seq, args->past};
    if ((st = fam_alloc(env, run, NNT_F32, &q, err, NNT_SHAPE(M, Q))) != NNT_OK ||
        (st = fam_alloc(env, run, NNT_F32, &k, err, NNT_SHAPE(M, KV))) != NNT_OK ||
        (st = fam_alloc(env, run, NNT_F32, &v, err, NNT_SHAPE(M, KV))) != NNT_OK ||
        (st = fam_linear(env, run, L, &dims, xn, &ly->q_proj, &q, err)) != NNT_OK ||
        (st = fam_linear(env, run, L, &dims, xn, &ly->k_proj, &k, err)) != NNT_OK ||
        (st = fam_linear(env, run, L, &dims, xn, &ly->v_proj, &v, err)) != NNT_OK ||
        (st = fam_norm(env, run, L, &dims, &q, &ly->q_norm, (float)m->eps, &q, err)) != NNT_OK ||
        (st = fam_norm(env, run, L, &dims, &k, &ly->k_norm, (float)m->eps, &k, err)) != NNT_OK)
        goto done;
    fam_attn a;
    attn_shape(m, ly, &a);
    st = fam_attention_forward(env, run, L, &a, args, mask, &q, &k, &v, fam_layer_cache(args, L), out, err);
done:
    env->core->arena_release(run, mark);
    return st;
}

static nnt_status mm_mlp(void *self, nnt_run *run, int L, const nnt_forward_args *args, const nnt_tensor *xn,
                         nnt_tensor *out, nnt_error *err)
{
    mm_model *m = self;
    nnt_call_dims dims = {args->batch, args->seq, args->past};
    return fam_moe_forward(&m->env, run, L, &m->l[L].moe, &dims, args->input_ids, xn, out, err);
}

static void mm_unload(void *model)
{
    mm_model *m = model;
    if (!m) return;
    fam_env_release(&m->env); /* weights, router biases and the experts' arrays */
    free(m->l);
    free(m->inv_freq);
    free(m);
}

static nnt_status mm_load(const nnt_load_args *args, void **out, nnt_error *err)
{
    mm_model *m = calloc(1, sizeof *m);
    if (!m) return args->core->set_error(err, NNT_ERR_OUT_OF_MEMORY, "no memory");
    fam_env_init(&m->env, args);
    const nnt_checkpoint *ck = args->ckpt;
    nnt_status st = read_config(m, ck, err);
    if (st == NNT_OK) {
        m->l = calloc((size_t)m->layers, sizeof *m->l);
        m->inv_freq = calloc((size_t)(m->rotary_dim / 2 + 1), sizeof *m->inv_freq);
        if (!m->l || !m->inv_freq) st = args->core->set_error(err, NNT_ERR_OUT_OF_MEMORY, "no memory");
    }
    if (st == NNT_OK) {
        fam_rope_inv_freq(m->inv_freq, m->rotary_dim, m->theta);
    }
    if (st == NNT_OK) /* a stage's load binds its blocks only */
        st = fam_bind_readout_stage(&m->env, args, m->vocab, m->hidden, m->tied, m->layers, &m->dec, &m->first_block,
                                    &m->end_block, err);
    for (int L = m->first_block; st == NNT_OK && L < m->end_block; L++) st = bind_layer(m, ck, L, err);
    if (st == NNT_OK) {
        fam_decoder_wire(&m->dec, m->layers, m->hidden, m->vocab, m->eps, &m->l[0].in_norm, &m->l[0].post_norm,
                         sizeof(mm_layer), m, mm_attention, mm_mlp);
        st = fam_env_natives(&m->env, &MM_ARCH, m, m->l, sizeof *m->l, err);
    }
    if (st != NNT_OK) {
        mm_unload(m);
        return st;
    }
    *out = m;
    return NNT_OK;
}

static void mm_info(const void *model, nnt_model_info *out)
{
    const mm_model *m = model;
    memset(out, 0, sizeof *out);
    out->architecture = m->arch;
    out->model_type = "minimax_m2";
    out->root_class = "MiniMaxM2ForCausalLM";
    out->num_layers = m->layers;
    out->hidden_size = m->hidden;
    out->vocab_size = m->vocab;
    out->num_heads = m->heads;
    out->num_kv_heads = m->kv_heads;
    out->head_dim = m->head_dim;
    out->qk_head_dim = m->head_dim;
    out->intermediate_size = m->inter;
    out->num_experts = m->experts;
    out->top_k = m->top_k;
    out->num_streams = 1;
}

static nnt_status mm_value_info(const void *model, int layer, nnt_value_id id, const nnt_call_dims *d,
                                nnt_value_info *out)
{
    const mm_model *m = model;
    int64_t B = d ? d->batch : 0, T = d ? d->seq : 0, H = m->hidden;
    if (fam_decoder_info(m->hidden, m->vocab, id, d, out)) return NNT_OK;
    if (fam_natives_value_info(&m->env, layer, id, d, out)) return NNT_OK; /* q_proj.output, ... */
    if (fam_arch_value_info(&MM_ARCH, m, layer, id, out)) return NNT_OK; /* linear_attn: no such module */
    switch (id) {
    case NNT_VALUE_MLP_OUTPUT:
    case NNT_VALUE_ROUTED_OUTPUT: fam_served(out, d, NNT_F32, 1, NNT_SHAPE(B, T, H)); return NNT_OK;
    case NNT_VALUE_ROUTER_LOGITS: fam_served(out, d, NNT_F32, 1, NNT_SHAPE(B, T, (int64_t)m->experts)); return NNT_OK;
    case NNT_VALUE_EXPERT_WEIGHTS: fam_served(out, d, NNT_F32, 1, NNT_SHAPE(B, T, (int64_t)m->top_k)); return NNT_OK;
    case NNT_VALUE_EXPERT_INDICES: fam_served(out, d, NNT_I32, 1, NNT_SHAPE(B, T, (int64_t)m->top_k)); return NNT_OK;
    case NNT_VALUE_EXPERT_OUTPUTS: fam_served(out, d, NNT_F32, 1, NNT_SHAPE(B, T, (int64_t)m->top_k, H)); return NNT_OK;
    case NNT_VALUE_SHARED_EXPERT_OUTPUT:
        fam_unserved(out, "MiniMax-M2 has no shared expert (shared_intermediate_size is 0); routed_output is the whole mlp_output");
        return NNT_OK;
    case NNT_VALUE_MLP_ACTIVATION:
    case NNT_VALUE_MLP_NEURONS:
        fam_unserved(out, "every MiniMax-M2 MLP is a mixture with neither a dense nor a shared expert, and each expert's "
                          "activations exist only for the tokens routed to it, so no [batch seq intermediate_size] tensor exists");
        return NNT_OK;
    default: break;
    }
    if (fam_value_module(id) == NNT_MODULE_SELF_ATTN) {
        fam_attn a;
        attn_shape(m, layer >= 0 ? &m->l[layer] : NULL, &a);
        fam_attention_info(&a, m->hidden, id, d, out);
        return NNT_OK;
    }
    fam_unserved(out, "not a MiniMax-M2 value");
    return NNT_OK;
}

/* The native module values, from MM_ARCH's rows. */
static nnt_status mm_native(const void *model, int i, nnt_native_info *out)
{
    const mm_model *m = model;
    return fam_natives_entry(&m->env, i, out);
}

/* `nnt print`'s module tree, from MM_ARCH. */
static nnt_status mm_build_tree(const void *model, nnt_tree *tree, nnt_error *err)
{
    const mm_model *m = model;
    return fam_arch_tree(m->env.core, &MM_ARCH, m, m->layers, tree, err);
}

static nnt_status mm_forward(void *model, nnt_run *run, const nnt_forward_args *args, nnt_error *err)
{
    mm_model *m = model;
    return fam_decoder_forward(&m->env, run, args, &m->dec, err);
}

static nnt_status mm_project(void *model, nnt_run *run, const nnt_tensor *x, int streams, nnt_tensor *logits,
                             nnt_error *err)
{
    mm_model *m = model;
    (void)streams; /* one residual stream */
    return fam_decoder_project(&m->env, run, &m->dec, x, logits, err);
}

/* Generation state: one key/value cache per block, holding every token (full attention). */
static int mm_attn_of(const void *model, int layer, fam_attn *out)
{
    const mm_model *m = model;
    if (layer < m->first_block || layer >= m->end_block) return 0; /* another stage's block: no cache */
    attn_shape(m, &m->l[layer], out);
    return 1;
}

static nnt_status mm_cache_new(void *model, int batch, int capacity, void **cache, nnt_error *err)
{
    mm_model *m = model;
    return fam_attention_caches_new(&m->env, m->layers, batch, capacity, mm_attn_of, m, (fam_layer_caches **)cache, err);
}

static void mm_cache_free(void *model, void *cache)
{
    mm_model *m = model;
    fam_layer_caches_free(&m->env, cache);
}

/* The planner's byte model (nnt_cost_args) from config.json alone: the weights of every tensor
 * MM_ARCH lists, as the checkpoint's encoding stores them (fam_arch_costs), and a key/value
 * cache of every token (full attention). */
static nnt_status mm_costs(nnt_cost_args *args, nnt_error *err)
{
    mm_model m = {0};
    m.env.core = args->core;
    fam_encoding e;
    CK(read_config(&m, args->ckpt, err));
    CK(fam_cost_blocks(args, m.layers, err));
    CK(fam_cost_encoding(args, &e, err));
    CK(fam_arch_costs(args, &MM_ARCH, &m, &e, err));
    for (int l = 0; l < args->n_blocks; l++)
        args->cache_bytes[l] = fam_cost_kv_cache(args->batch, m.kv_heads, m.head_dim, m.head_dim, args->context);
    return NNT_OK;
}

NNT_PLUGIN_EXPORT const nnt_family_descriptor nnt_family_plugin = {
    .header = NNT_PLUGIN_HEADER(nnt_family_descriptor, NNT_PLUGIN_FAMILY, "minimax_m2", NNT_VERSION_STRING,
                                      "MiniMax-M2 / M2.1 / M2.5 / M2.7 (MiniMaxM2ForCausalLM)"),
    .architectures = ARCHS,
    .model_types = TYPES,
    .renames = RENAMES,
    .load = mm_load,
    .unload = mm_unload,
    .info = mm_info,
    .value_info = mm_value_info,
    .build_tree = mm_build_tree,
    .forward = mm_forward,
    .project = mm_project,
    .cache_new = mm_cache_new,
    .cache_free = mm_cache_free,
    .ops_needed = NNT_OPS_DECODER,
    .costs = mm_costs,
    .native = mm_native,
};
