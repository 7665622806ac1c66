/* dv_arch.c - DeepSeek-V4's architecture, declared once in the family kit's table (DV_ARCH):
 * the module tree print(model) shows and, under each module, its checkpoint tensors with their
 * spellings, shapes and storage; and the binding of a block and of the readout that reads it.
 * The printout (fam_arch_tree), the planner's weight bytes (fam_arch_costs) and the values of
 * the module no block has (fam_arch_value_info) are read from the same table by deepseek_v4.c.
 * Module and tensor names: transformers' modeling_deepseek_v4.py (the module tree) and the
 * release's inference/model.py (deepseek-ai/DeepSeek-V4-Flash: the native tensor names). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dv_internal.h"

/* Sizes the rows index (elements), filled by dv_describe from config.json: H hidden, V vocabulary,
 * D head_dim, QL q_lora_rank, QB heads * D, OA o_groups * o_lora_rank, OA_IN heads * D / o_groups,
 * HEADS attention heads, IQ index heads * index head_dim, IH index heads, ID index head_dim,
 * IW 2 * ID (the indexer's overlapping windows), E routed experts, I an expert's width, K experts
 * per token, N hc_mult streams, MIX (2 + N) N hyper-connection mixes, NH N * H, THREE and ONE
 * the hyper-connections' scale counts, RATE the block's compress rate, CW the block's compressor
 * row width (coff * D, coff 2 where windows overlap). */
enum {
    DV_H, DV_V, DV_D, DV_QL, DV_QB, DV_OA, DV_OA_IN, DV_HEADS, DV_IQ, DV_IH, DV_ID, DV_IW, DV_E, DV_I, DV_K,
    DV_N, DV_MIX, DV_NH, DV_THREE, DV_ONE, DV_RATE, DV_CW, DV_SIZES
};

/* Traits: a compressed block (sliding window plus compressed entries, CSA or HCA), a compressed
 * sparse one (the smaller rate, with the lightning indexer), a hash-routed MLP, the shared expert
 * (n_shared_experts 1, model-wide), a tied embedding (model-wide). */
enum { DV_COMPRESSED = 1u << 0, DV_CSA = 1u << 1, DV_HASH = 1u << 2, DV_SHARED = 1u << 3, DV_TIED = 1u << 4 };

/* A block tensor's spellings: the release's native name, the same under "model." (what
 * transformers' save_pretrained writes), transformers' module name. */
#define DV_NAMES(native, hf) {"layers.%d." native, "model.layers.%d." native, "model.layers.%d." hf}
/* the tensors the family binds itself (family-bound rows below) */
#define DV_TID2EID_NAMES DV_NAMES("ffn.gate.tid2eid", "mlp.gate.tid2eid")
#define DV_EMBED_NAMES {"embed.weight", "model.embed_tokens.weight"}
#define DV_NORM_NAMES {"norm.weight", "model.norm.weight"}
#define DV_HEAD_NAMES {"head.weight", "lm_head.weight"}

#define DV_AT(member) .field = offsetof(dv_layer, member)
/* a linear weight [rows, cols], quantised as quantization_config says */
#define DV_LINEAR(member, native, hf, rows, cols)                                                                      \
    {.name = DV_NAMES(native, hf), .store = FAM_STORE_LINEAR, DV_AT(member), .ndim = 2, .size = {rows, cols}}
/* a tensor the release keeps unquantised: a norm's gain [width], or a bfloat16 matrix */
#define DV_GAIN(member, native, hf, width)                                                                             \
    {.name = DV_NAMES(native, hf), .store = FAM_STORE_PLAIN, DV_AT(member), .ndim = 1, .size = {width}}
#define DV_PLAIN(member, native, hf, rows, cols)                                                                       \
    {.name = DV_NAMES(native, hf), .store = FAM_STORE_PLAIN, DV_AT(member), .ndim = 2, .size = {rows, cols}}
/* float32 parameters kept on the host and prepared in the table's shape */
#define DV_F32(member, host_member, native, hf, nd, ...)                                                               \
    {.name = DV_NAMES(native, hf), .store = FAM_STORE_F32, .bind = FAM_BIND_VECTOR, DV_AT(member),                     \
     .host = offsetof(dv_layer, host_member), .ndim = nd, .size = {__VA_ARGS__}}
/* a hyper-connection: fn [MIX, N H], base [MIX], scale [3] */
#define DV_HC(w, native, hf)                                                                                           \
    {DV_F32(w.fn_t, w.fn, native "_fn", hf ".fn", 2, DV_MIX, DV_NH),                                                   \
     DV_F32(w.base_t, w.base, native "_base", hf ".base", 1, DV_MIX),                                                  \
     DV_F32(w.scale_t, w.scale, native "_scale", hf ".scale", 1, DV_THREE)}
/* the compressor's (and the indexer's own) projections, norm and position bias */
#define DV_COMP_KV(c, nat, hf, width)                                                                                  \
    {DV_PLAIN(c.wkv, nat "wkv.weight", hf "kv_proj.weight", width, DV_H)}
#define DV_COMP_GATE(c, nat, hf, width)                                                                                \
    {DV_PLAIN(c.wgate, nat "wgate.weight", hf "gate_proj.weight", width, DV_H)}
#define DV_COMP_NORM(c, nat, hf, dim) {DV_GAIN(c.norm, nat "norm.weight", hf "kv_norm.weight", dim)}
#define DV_COMP_APE(c, nat, hf, width) {DV_F32(c.ape_t, c.ape, nat "ape", hf "position_bias", 2, DV_RATE, width)}
/* where the two compressors' tensors live: the release's, then transformers' module path */
#define DV_CP_NAT "attn.compressor."
#define DV_CP_HF "self_attn.compressor."
#define DV_IX_NAT "attn.indexer.compressor."
#define DV_IX_HF "self_attn.compressor.indexer."

const nnt_rename_rule DV_RENAMES[] = {
    {"attn", "self_attn", NULL},
    {"ffn", "mlp", NULL},
    {"gate", "router", NULL},
    {NULL, NULL, NULL},
};

/* every expert's w1 / w3 / w2 (native, under "model.", transformers' names), or transformers'
 * fused 3-D tensors */
static const fam_expert_layout DV_EXPERTS = {
    .fused_gate_up = "model.layers.%d.mlp.experts.gate_up_proj",
    .fused_down = "model.layers.%d.mlp.experts.down_proj",
    .per_expert = {{.gate = "layers.%d.ffn.experts.%d.w1.weight",
                    .up = "layers.%d.ffn.experts.%d.w3.weight",
                    .down = "layers.%d.ffn.experts.%d.w2.weight"},
                   {.gate = "model.layers.%d.ffn.experts.%d.w1.weight",
                    .up = "model.layers.%d.ffn.experts.%d.w3.weight",
                    .down = "model.layers.%d.ffn.experts.%d.w2.weight"},
                   {.gate = "model.layers.%d.mlp.experts.%d.gate_proj.weight",
                    .up = "model.layers.%d.mlp.experts.%d.up_proj.weight",
                    .down = "model.layers.%d.mlp.experts.%d.down_proj.weight"}},
};

#define DV_ROW(d, nat, c) .depth = d, .native = nat, .cls = c
#define DV_LIN(d, nat) DV_ROW(d, nat, "Linear"), .detail = FAM_DETAIL_LINEAR
#define DV_NORM(d, nat) DV_ROW(d, nat, "DeepseekV4RMSNorm"), .detail = FAM_DETAIL_NORM

static const fam_module DV_MODULES[] = {
    {DV_ROW(0, "model", "DeepseekV4ForCausalLM")},
    /* the readout, bound by dv_bind_readout (stages, the tied embedding) */
    {DV_LIN(1, "lm_head"),
     .tensors = {{.name = DV_HEAD_NAMES, .store = FAM_STORE_PLAIN, .bind = FAM_BIND_NONE, .ndim = 2,
                  .size = {DV_V, DV_H}, .unless = DV_TIED}},
     .alias_in = FAM_ALIAS(NNT_VALUE_FINAL_NORM_OUTPUT), .alias_out = FAM_ALIAS(NNT_VALUE_LM_HEAD_OUTPUT), .alias_in_edit = 1},
    {DV_ROW(1, "embed_tokens", "Embedding"), .detail = FAM_DETAIL_EMBEDDING,
     .tensors = {{.name = DV_EMBED_NAMES, .store = FAM_STORE_PLAIN, .bind = FAM_BIND_NONE, .ndim = 2,
                  .size = {DV_V, DV_H}, .first_stage = 1}},
     .alias_in = FAM_ALIAS(NNT_VALUE_INPUT_IDS), .alias_out = FAM_ALIAS(NNT_VALUE_TOKEN_EMBEDDINGS), .alias_in_edit = 1},
    {DV_ROW(1, "layers", "ModuleList")},
    {DV_ROW(2, "layers", "DeepseekV4DecoderLayer"), .block = 1},
    /* attention: one head per token that is key and value, a per-head sink */
    {DV_ROW(3, "self_attn", "DeepseekV4Attention"), .module = NNT_MODULE_SELF_ATTN,
     .tensors = {{.name = DV_NAMES("attn.attn_sink", "self_attn.sinks"), .store = FAM_STORE_F32, .bind = FAM_BIND_HOST,
                  DV_AT(sinks), .ndim = 1, .size = {DV_HEADS}}},
     .alias_out = FAM_ALIAS(NNT_VALUE_ATTN_OUTPUT), .same_in = "input_layernorm", .alias_in_edit = 1},
    {DV_LIN(4, "q_a_proj"), .tensors = {DV_LINEAR(wq_a, "attn.wq_a.weight", "self_attn.q_a_proj.weight", DV_QL, DV_H)}},
    {DV_NORM(4, "q_a_norm"), .tensors = {DV_GAIN(q_norm, "attn.q_norm.weight", "self_attn.q_a_norm.weight", DV_QL)}},
    {DV_LIN(4, "q_b_proj"), .tensors = {DV_LINEAR(wq_b, "attn.wq_b.weight", "self_attn.q_b_proj.weight", DV_QB, DV_QL)}},
    {DV_ROW(4, "q_b_norm", "DeepseekV4UnweightedRMSNorm")},
    {DV_LIN(4, "kv_proj"), .tensors = {DV_LINEAR(wkv, "attn.wkv.weight", "self_attn.kv_proj.weight", DV_D, DV_H)}},
    /* save_pretrained spells it plain "norm" under attn */
    {DV_NORM(4, "kv_norm"),
     .tensors = {{.name = {"layers.%d.attn.kv_norm.weight", "model.layers.%d.attn.kv_norm.weight",
                           "model.layers.%d.attn.norm.weight", "model.layers.%d.self_attn.kv_norm.weight"},
                  .store = FAM_STORE_PLAIN, DV_AT(kv_norm), .ndim = 1, .size = {DV_D}}}},
    {DV_ROW(4, "o_a_proj", "DeepseekV4GroupedLinear"), .detail = FAM_DETAIL_LINEAR,
     .tensors = {DV_LINEAR(wo_a, "attn.wo_a.weight", "self_attn.o_a_proj.weight", DV_OA, DV_OA_IN)},
     .no_native = "the grouped o_a_proj runs one product per group of heads on that group's columns; its input is "
                  "attention_head_outputs and its output o_b_proj's input",
     .alias_in = FAM_ALIAS(NNT_VALUE_ATTN_HEAD_OUTPUTS), .alias_in_edit = 1, .same_out = "self_attn.o_b_proj"},
    {DV_LIN(4, "o_b_proj"), .tensors = {DV_LINEAR(wo_b, "attn.wo_b.weight", "self_attn.o_b_proj.weight", DV_H, DV_OA)},
     .alias_out = FAM_ALIAS(NNT_VALUE_ATTN_OUTPUT)},
    /* compressed blocks: the compressor (its class by the kind), and on CSA blocks the indexer */
    {DV_ROW(4, "compressor", "DeepseekV4HCACompressor"), .alt_cls = "DeepseekV4CSACompressor", .alt_when = DV_CSA,
     .when = DV_COMPRESSED, .tensors = DV_COMP_APE(comp, DV_CP_NAT, DV_CP_HF, DV_CW), .same_in = "input_layernorm"},
    {DV_LIN(5, "kv_proj"), .tensors = DV_COMP_KV(comp, DV_CP_NAT, DV_CP_HF, DV_CW)},
    {DV_LIN(5, "gate_proj"), .tensors = DV_COMP_GATE(comp, DV_CP_NAT, DV_CP_HF, DV_CW)},
    {DV_NORM(5, "kv_norm"), .tensors = DV_COMP_NORM(comp, DV_CP_NAT, DV_CP_HF, DV_D),
     .no_native = "the compressor's norm runs on its compressed entries, one per `compress_rate` tokens, not on the "
                  "call's tokens"},
    {DV_ROW(5, "rotary_emb", "DeepseekV4RotaryEmbedding")},
    {DV_ROW(5, "indexer", "DeepseekV4Indexer"), .when = DV_CSA,
     .tensors = DV_COMP_APE(icomp, DV_IX_NAT, DV_IX_HF, DV_IW), .same_in = "input_layernorm"},
    {DV_LIN(6, "kv_proj"), .tensors = DV_COMP_KV(icomp, DV_IX_NAT, DV_IX_HF, DV_IW)},
    {DV_LIN(6, "gate_proj"), .tensors = DV_COMP_GATE(icomp, DV_IX_NAT, DV_IX_HF, DV_IW)},
    {DV_NORM(6, "kv_norm"), .tensors = DV_COMP_NORM(icomp, DV_IX_NAT, DV_IX_HF, DV_ID),
     .no_native = "the indexer's norm runs on its compressed entries, one per `compress_rate` tokens, not on the "
                  "call's tokens"},
    {DV_LIN(6, "q_b_proj"),
     .tensors = {DV_LINEAR(iq_b, "attn.indexer.wq_b.weight", "self_attn.compressor.indexer.q_b_proj.weight", DV_IQ,
                           DV_QL)}},
    {DV_ROW(6, "rotary_emb", "DeepseekV4RotaryEmbedding")},
    {DV_ROW(6, "scorer", "DeepseekV4IndexerScorer")},
    {DV_LIN(7, "weights_proj"),
     .tensors = {DV_PLAIN(iweights, "attn.indexer.weights_proj.weight",
                          "self_attn.compressor.indexer.scorer.weights_proj.weight", DV_IH, DV_H)}},
    /* the mixture: the router (hash-routed blocks read tid2eid, the others an optional bias) */
    {DV_ROW(3, "mlp", "DeepseekV4SparseMoeBlock"), .module = NNT_MODULE_MLP, .alias_out = FAM_ALIAS(NNT_VALUE_MLP_OUTPUT),
     .same_in = "post_attention_layernorm", .alias_in_edit = 1},
    {DV_ROW(4, "gate", "DeepseekV4TopKRouter"), .alt_cls = "DeepseekV4HashRouter", .alt_when = DV_HASH,
     .tensors = {DV_PLAIN(moe.router, "ffn.gate.weight", "mlp.gate.weight", DV_E, DV_H),
                 /* int64 [V, K], read into int32 host memory with its range checked: family-bound */
                 {.name = DV_TID2EID_NAMES, .store = FAM_STORE_I64, .bind = FAM_BIND_NONE, .ndim = 2,
                  .size = {DV_V, DV_K}, .when = DV_HASH},
                 {.name = DV_NAMES("ffn.gate.bias", "mlp.gate.e_score_correction_bias"), .store = FAM_STORE_F32,
                  .bind = FAM_BIND_VECTOR, DV_AT(moe.bias), .host = offsetof(dv_layer, bias_host), .ndim = 1,
                  .size = {DV_E}, .unless = DV_HASH, .optional = 1}},
     .alias_out = FAM_ALIAS(NNT_VALUE_ROUTER_LOGITS), .same_in = "post_attention_layernorm"},
    {DV_ROW(5, "score_fn", "SqrtSoftplusActivation")},
    {DV_ROW(4, "experts", "DeepseekV4Experts"),
     .tensors = {{.store = FAM_STORE_EXPERTS, .bind = FAM_BIND_EXPERTS, DV_AT(moe.experts), .ndim = 3,
                  .size = {DV_E, DV_I, DV_H}, .experts = &DV_EXPERTS}},
     .alias_out = FAM_ALIAS(NNT_VALUE_ROUTED_OUTPUT), .same_in = "post_attention_layernorm"},
    {DV_ROW(5, "act_fn", "SiLUActivation")},
    {DV_ROW(4, "shared_experts", "DeepseekV4MLP"), .when = DV_SHARED,
     .alias_out = FAM_ALIAS(NNT_VALUE_SHARED_EXPERT_OUTPUT), .same_in = "post_attention_layernorm"},
    {DV_LIN(5, "gate_proj"),
     .tensors = {DV_LINEAR(moe.shared.gate, "ffn.shared_experts.w1.weight", "mlp.shared_experts.gate_proj.weight", DV_I,
                           DV_H)}},
    {DV_LIN(5, "up_proj"),
     .tensors = {DV_LINEAR(moe.shared.up, "ffn.shared_experts.w3.weight", "mlp.shared_experts.up_proj.weight", DV_I,
                           DV_H)}},
    {DV_LIN(5, "down_proj"),
     .tensors = {DV_LINEAR(moe.shared.down, "ffn.shared_experts.w2.weight", "mlp.shared_experts.down_proj.weight", DV_H,
                           DV_I)},
     .alias_out = FAM_ALIAS(NNT_VALUE_SHARED_EXPERT_OUTPUT)},
    {DV_ROW(5, "act_fn", "SiLUActivation")} /* reads gate_proj's output clamped at swiglu_limit */,
    {DV_NORM(3, "input_layernorm"), .tensors = {DV_GAIN(attn_norm, "attn_norm.weight", "input_layernorm.weight", DV_H)}},
    {DV_NORM(3, "post_attention_layernorm"),
     .tensors = {DV_GAIN(ffn_norm, "ffn_norm.weight", "post_attention_layernorm.weight", DV_H)}},
    /* the hyper-connections around each sublayer */
    {DV_ROW(3, "attn_hc", "DeepseekV4HyperConnection"), .tensors = DV_HC(hc_attn, "hc_attn", "attn_hc")},
    {DV_ROW(4, "input_norm", "DeepseekV4UnweightedRMSNorm")},
    {DV_ROW(3, "ffn_hc", "DeepseekV4HyperConnection"), .tensors = DV_HC(hc_ffn, "hc_ffn", "ffn_hc")},
    {DV_ROW(4, "input_norm", "DeepseekV4UnweightedRMSNorm")},
    /* the head collapsing the streams before the final norm: fn [N, N H], base [N], scale [1] */
    {DV_ROW(1, "hc_head", "DeepseekV4HyperHead"),
     .tensors = {{.name = {"hc_head_fn", "model.hc_head.hc_fn"}, .store = FAM_STORE_F32, .bind = FAM_BIND_VECTOR,
                  .field = offsetof(dv_model, hc_head.fn_t), .host = offsetof(dv_model, hc_head.fn), .ndim = 2,
                  .size = {DV_N, DV_NH}},
                 {.name = {"hc_head_base", "model.hc_head.hc_base"}, .store = FAM_STORE_F32, .bind = FAM_BIND_VECTOR,
                  .field = offsetof(dv_model, hc_head.base_t), .host = offsetof(dv_model, hc_head.base), .ndim = 1,
                  .size = {DV_N}},
                 {.name = {"hc_head_scale", "model.hc_head.hc_scale"}, .store = FAM_STORE_F32, .bind = FAM_BIND_VECTOR,
                  .field = offsetof(dv_model, hc_head.scale_t), .host = offsetof(dv_model, hc_head.scale), .ndim = 1,
                  .size = {DV_ONE}}}},
    {DV_ROW(2, "input_norm", "DeepseekV4UnweightedRMSNorm")},
    {DV_NORM(1, "norm"),
     .tensors = {{.name = DV_NORM_NAMES, .store = FAM_STORE_PLAIN, .bind = FAM_BIND_NONE, .ndim = 1, .size = {DV_H}}},
     .alias_out = FAM_ALIAS(NNT_VALUE_FINAL_NORM_OUTPUT)},
};

void dv_comp_shape(const dv_model *m, int kind, int indexer, comp_w *c)
{
    c->rate = c->overlap = c->dim = 0;
    if (indexer ? kind != CSA : kind == SLIDING) return;
    c->rate = m->rate[kind];
    c->overlap = indexer || kind == CSA;
    c->dim = indexer ? m->index_dim : m->head_dim;
}

/* Block `layer`'s sizes and traits (its kind and routing from m->l), or the model's (-1). */
static void dv_describe(const void *self, int layer, fam_block_facts *out)
{
    const dv_model *m = self;
    int kind = layer >= 0 ? m->l[layer].kind : SLIDING, hash = layer >= 0 && m->l[layer].hash;
    comp_w c;
    dv_comp_shape(m, kind, 0, &c);
    out->traits = (kind != SLIDING ? DV_COMPRESSED : 0) | (kind == CSA ? DV_CSA : 0) | (hash ? DV_HASH : 0) |
                  (m->shared ? DV_SHARED : 0) | (m->tied ? DV_TIED : 0);
    out->eps = m->eps;
    int64_t *s = out->size, n = m->streams;
    s[DV_H] = m->hidden, s[DV_V] = m->vocab, s[DV_D] = m->head_dim, s[DV_QL] = m->q_lora;
    s[DV_QB] = (int64_t)m->heads * m->head_dim, s[DV_OA] = (int64_t)m->o_groups * m->o_lora;
    s[DV_OA_IN] = (int64_t)m->heads * m->head_dim / m->o_groups, s[DV_HEADS] = m->heads;
    s[DV_IQ] = (int64_t)m->index_heads * m->index_dim, s[DV_IH] = m->index_heads, s[DV_ID] = m->index_dim;
    s[DV_IW] = 2 * (int64_t)m->index_dim, s[DV_E] = m->experts, s[DV_I] = m->moe_inter, s[DV_K] = m->top_k;
    s[DV_N] = n, s[DV_MIX] = (2 + n) * n, s[DV_NH] = n * m->hidden, s[DV_THREE] = 3, s[DV_ONE] = 1;
    s[DV_RATE] = c.rate, s[DV_CW] = dv_comp_width(&c);
}

const fam_arch DV_ARCH = {
    .modules = DV_MODULES,
    .n_modules = (int)(sizeof DV_MODULES / sizeof DV_MODULES[0]),
    .n_sizes = DV_SIZES,
    .renames = DV_RENAMES,
    .off_page = {[NNT_MODULE_LINEAR_ATTN] = "DeepSeek-V4 mixes tokens with softmax attention (self_attn) on every "
                                            "block; it has no linear-attention mixer or recurrent state"},
    .describe = dv_describe,
};

/* The first of a family-bound tensor's spellings (patterns taking block L) the checkpoint holds,
 * else the last, for the core's message naming what was looked for; written into buf[n][256]. */
static const char *spelling(const dv_model *m, const nnt_checkpoint *ck, const char *const *names, int n, int L,
                            char (*buf)[256])
{
    const char *filled[FAM_SPELLINGS];
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wformat-nonliteral"
    for (int i = 0; i < n; i++) {
        snprintf(buf[i], sizeof buf[i], names[i], L);
        filled[i] = buf[i];
    }
#pragma GCC diagnostic pop
    const char *found = fam_first_present(&m->env, ck, filled, n);
    return found ? found : filled[n - 1];
}

/* A hash-routed block's table [vocab, top_k] of expert ids (int64 or int32 in the checkpoint),
 * read into int32 host memory (ly->tid2eid, freed by dv_unload) with every id checked. */
static nnt_status bind_tid2eid(dv_model *m, const nnt_checkpoint *ck, int L, nnt_error *err)
{
    static const char *const names[] = DV_TID2EID_NAMES;
    const nnt_core_api *h = m->env.core;
    dv_layer *ly = &m->l[L];
    char buf[3][256];
    const char *tn = spelling(m, ck, names, 3, L, buf);
    int64_t K = m->top_k, E = m->experts, ts[2] = {m->vocab, K};
    nnt_tensor t;
    nnt_status st = h->tensor(ck, tn, 2, ts, &t, err);
    if (st != NNT_OK) return st;
    if (t.dtype != NNT_I64 && t.dtype != NNT_I32)
        return h->set_error(err, NNT_ERR_SHAPE, "%s: '%s' has dtype %s; the hash table must hold integers", h->cfg_path(ck),
                            tn, t.dtype == NNT_F32 ? "F32" : "a float type");
    ly->tid2eid = malloc((size_t)(m->vocab * K) * sizeof(int32_t));
    if (!ly->tid2eid) return h->set_error(err, NNT_ERR_OUT_OF_MEMORY, "no memory");
    for (int64_t i = 0; i < m->vocab * K; i++) {
        int64_t e = t.dtype == NNT_I64 ? ((const int64_t *)t.data)[i] : ((const int32_t *)t.data)[i];
        if (e < 0 || e >= E)
            return h->set_error(err, NNT_ERR_SHAPE, "%s: '%s' routes token %lld to expert %lld; experts are 0..%lld",
                                h->cfg_path(ck), tn, (long long)(i / K), (long long)e, (long long)(E - 1));
        ly->tid2eid[i] = (int32_t)e;
    }
    ly->moe.tid2eid = ly->tid2eid;
    ly->moe.vocab = m->vocab;
    return NNT_OK;
}

nnt_status dv_bind_block(dv_model *m, const nnt_checkpoint *ck, int L, nnt_error *err)
{
    dv_layer *ly = &m->l[L];
    nnt_status st = fam_arch_bind(&m->env, &DV_ARCH, m, ck, L, ly, err);
    if (st == NNT_OK && ly->hash) st = bind_tid2eid(m, ck, L, err);
    if (st != NNT_OK) return st;
    dv_comp_shape(m, ly->kind, 0, &ly->comp);
    dv_comp_shape(m, ly->kind, 1, &ly->icomp);
    ly->moe.has_shared = m->shared;
    ly->moe.num_experts = m->experts;
    ly->moe.top_k = m->top_k;
    ly->moe.intermediate = m->moe_inter;
    ly->moe.swiglu_limit = (float)m->limit; /* routed and shared experts alike */
    /* transformers' DeepSeek-V4 router scores in the model's dtype (modeling_deepseek_v4.py,
     * DeepseekV4TopKRouter and DeepseekV4HashRouter) */
    ly->moe.route_bf16 = 1;
    ly->moe.route = (nnt_route_params){
        .struct_size = sizeof(nnt_route_params),
        .score_fn = m->score_fn,
        .top_k = m->top_k,
        .n_group = 1,
        .topk_group = 1,
        .renormalize = m->norm_topk,
        .renorm_eps = 1e-20f,
        .scaling_factor = (float)m->scaling,
        .indices_given = 0,
    };
    return NNT_OK;
}

nnt_status dv_bind_readout(dv_model *m, const nnt_load_args *args, nnt_error *err)
{
    static const char *const embed[] = DV_EMBED_NAMES, *const norm[] = DV_NORM_NAMES, *const head[] = DV_HEAD_NAMES;
    const nnt_checkpoint *ck = args->ckpt;
    const nnt_core_api *h = m->env.core;
    char b[2][256];
    int64_t es[2] = {m->vocab, m->hidden}, hs[1] = {m->hidden};
    int readout = m->end_block == m->layers;
    const char *hd = spelling(m, ck, head, 2, -1, b);
    int lm_is_embed = m->tied && !h->has_tensor(ck, hd);
    nnt_status st = NNT_OK;
    if (m->first_block == 0 || (readout && lm_is_embed))
        st = fam_weight(&m->env, ck, spelling(m, ck, embed, 2, -1, b), 2, es, &m->embed, err);
    if (st != NNT_OK || !readout) return st;
    st = fam_weight(&m->env, ck, spelling(m, ck, norm, 2, -1, b), 1, hs, &m->final_norm, err);
    if (st == NNT_OK && lm_is_embed) m->lm_head = m->embed;
    if (st == NNT_OK && !lm_is_embed) st = fam_weight(&m->env, ck, spelling(m, ck, head, 2, -1, b), 2, es, &m->lm_head, err);
    /* the tensors outside the blocks the table binds: hc_head */
    if (st == NNT_OK) st = fam_arch_bind(&m->env, &DV_ARCH, m, ck, -1, m, err);
    return st;
}
