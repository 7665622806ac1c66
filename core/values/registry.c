/* registry.c - the standard-value registry: every (host, value) slot, named as nnterp names
 * it, with its layout, axes and a one-line description (nnt's own wording; docs/plugin-guide.md
 * lists them). */
#include <string.h>

#include "internal.h"

static const nnt_value_def value_defs[NNT_VALUE_COUNT] = {
    /* model */
    {NNT_VALUE_LOGITS, NNT_MODULE_MODEL, "logits", "Logits", "[batch seq vocab_size]",
     "the model's returned logits, after any cap or scale applied past lm_head"},
    {NNT_VALUE_TOKEN_EMBEDDINGS, NNT_MODULE_MODEL, "token_embeddings", "Residual",
     "[batch seq hidden_size]", "what embed_tokens returns for the input ids"},
    {NNT_VALUE_FINAL_NORM_OUTPUT, NNT_MODULE_MODEL, "final_norm_output", "Residual",
     "[batch seq hidden_size]", "the residual after the final norm; lm_head's input"},
    {NNT_VALUE_LM_HEAD_OUTPUT, NNT_MODULE_MODEL, "lm_head_output", "Logits",
     "[batch seq vocab_size]", "lm_head's raw output, before any cap or scale"},
    {NNT_VALUE_NEXT_TOKEN_PROBS, NNT_MODULE_MODEL, "next_token_probs", "NextTokenProbs",
     "[batch vocab_size]", "softmax of the last position's logits (derived, read-only)"},
    {NNT_VALUE_INPUT_IDS, NNT_MODULE_MODEL, "input_ids", "Tokens", "[batch seq]",
     "the token ids of this call (read-only)"},
    {NNT_VALUE_ATTENTION_MASK, NNT_MODULE_MODEL, "attention_mask", "Tokens", "[batch seq]",
     "the attention mask of this call, 0 marking padding (read-only)"},
    {NNT_VALUE_INPUT_SIZE, NNT_MODULE_MODEL, "input_size", "scalar", "[2]",
     "batch and sequence length of this call (read-only)"},
    /* model.layers[i] */
    {NNT_VALUE_LAYER_INPUT, NNT_MODULE_LAYER, "layer_input", "Residual", "[batch seq hidden_size]",
     "the residual stream as the block receives it"},
    {NNT_VALUE_ATTENTION_NORM_OUTPUT, NNT_MODULE_LAYER, "attention_norm_output", "Residual",
     "[batch seq hidden_size]", "input_layernorm's output, what the mixer reads"},
    {NNT_VALUE_LAYER_MID, NNT_MODULE_LAYER, "layer_mid", "Residual", "[batch seq hidden_size]",
     "the residual stream once the mixer's output is added"},
    {NNT_VALUE_MLP_NORM_OUTPUT, NNT_MODULE_LAYER, "mlp_norm_output", "Residual",
     "[batch seq hidden_size]", "post_attention_layernorm's output"},
    {NNT_VALUE_MLP_INPUT, NNT_MODULE_LAYER, "mlp_input", "Residual", "[batch seq hidden_size]",
     "the tensor the MLP is called on"},
    {NNT_VALUE_LAYER_OUTPUT, NNT_MODULE_LAYER, "layer_output", "Residual", "[batch seq hidden_size]",
     "the residual stream as the block returns it"},
    {NNT_VALUE_ATTENTION_POST, NNT_MODULE_LAYER, "attention_post", "StreamWeights",
     "[batch seq streams]", "per-stream weight of the attention's output"},
    {NNT_VALUE_ATTENTION_COMB, NNT_MODULE_LAYER, "attention_comb", "StreamMixing",
     "[batch seq streams streams]", "stream-mixing matrix around the attention (used transposed)"},
    {NNT_VALUE_MLP_POST, NNT_MODULE_LAYER, "mlp_post", "StreamWeights", "[batch seq streams]",
     "per-stream weight of the MLP's output"},
    {NNT_VALUE_MLP_COMB, NNT_MODULE_LAYER, "mlp_comb", "StreamMixing", "[batch seq streams streams]",
     "stream-mixing matrix around the MLP (used transposed)"},
    /* model.layers[i].self_attn */
    {NNT_VALUE_ATTN_QUERIES, NNT_MODULE_SELF_ATTN, "attention_queries", "Queries",
     "[batch num_heads seq qk_head_dim]", "queries as the attention kernel receives them"},
    {NNT_VALUE_ATTN_KEYS, NNT_MODULE_SELF_ATTN, "attention_keys", "Keys",
     "[batch num_kv_heads seq qk_head_dim]", "keys as the attention kernel receives them"},
    {NNT_VALUE_ATTN_VALUES, NNT_MODULE_SELF_ATTN, "attention_values", "Values",
     "[batch num_kv_heads seq head_dim]", "values as the attention kernel receives them"},
    {NNT_VALUE_ATTN_SCORES, NNT_MODULE_SELF_ATTN, "attention_scores", "Pattern",
     "[batch num_heads query key]", "scaled, masked logits the softmax takes (-inf where masked)"},
    {NNT_VALUE_ATTN_PREMIX, NNT_MODULE_SELF_ATTN, "attention_premix", "HeadOutputs",
     "[batch seq num_heads head_dim]", "all heads' outputs side by side, o_proj's input"},
    {NNT_VALUE_ATTN_OUTPUT, NNT_MODULE_SELF_ATTN, "attention_output", "Residual",
     "[batch seq hidden_size]", "the attention's contribution to the residual stream"},
    {NNT_VALUE_ATTN_PROBABILITIES, NNT_MODULE_SELF_ATTN, "attention_probabilities", "Pattern",
     "[batch num_heads query key]", "the attention weights that mix the values"},
    {NNT_VALUE_ATTN_HEAD_OUTPUTS, NNT_MODULE_SELF_ATTN, "attention_head_outputs", "HeadOutputs",
     "[batch seq num_heads head_dim]", "each head's output before the output projection"},
    /* model.layers[i].linear_attn */
    {NNT_VALUE_LIN_OUTPUT, NNT_MODULE_LINEAR_ATTN, "attention_output", "Residual",
     "[batch seq hidden_size]", "the mixer's contribution to the residual stream"},
    {NNT_VALUE_LIN_STATE, NNT_MODULE_LINEAR_ATTN, "state", "State", "[batch heads key_dim value_dim]",
     "the recurrent state after one token (one value per step)"},
    {NNT_VALUE_LIN_STATES, NNT_MODULE_LINEAR_ATTN, "states", "States",
     "[batch seq heads key_dim value_dim]", "the recurrent state after every token of the call"},
    {NNT_VALUE_LIN_QUERIES, NNT_MODULE_LINEAR_ATTN, "attention_queries", "LinearQK",
     "[batch seq heads key_dim]", "queries entering the delta rule (before L2 norm and scale)"},
    {NNT_VALUE_LIN_KEYS, NNT_MODULE_LINEAR_ATTN, "attention_keys", "LinearQK",
     "[batch seq heads key_dim]", "keys entering the delta rule (before L2 norm)"},
    {NNT_VALUE_LIN_VALUES, NNT_MODULE_LINEAR_ATTN, "attention_values", "LinearV",
     "[batch seq heads value_dim]", "values entering the delta rule"},
    {NNT_VALUE_LIN_DECAYS, NNT_MODULE_LINEAR_ATTN, "decays", "ChannelGates",
     "[batch seq heads key_dim]", "per-token, per-key-channel log decay of the state"},
    {NNT_VALUE_LIN_BETAS, NNT_MODULE_LINEAR_ATTN, "betas", "Gates", "[batch seq heads]",
     "per-token write strength into the state"},
    {NNT_VALUE_LIN_STATE_INPUT, NNT_MODULE_LINEAR_ATTN, "state_input", "State | None",
     "[batch heads key_dim value_dim]", "the state the call starts from (none for a new prompt)"},
    {NNT_VALUE_LIN_HEAD_OUTPUTS, NNT_MODULE_LINEAR_ATTN, "attention_head_outputs", "LinearV",
     "[batch seq heads value_dim]", "per-head outputs before the gated norm and o_proj"},
    {NNT_VALUE_LIN_STATE_OUTPUT, NNT_MODULE_LINEAR_ATTN, "state_output", "State",
     "[batch heads key_dim value_dim]", "the state the call ends with"},
    /* model.layers[i].mlp */
    {NNT_VALUE_MLP_ACTIVATION, NNT_MODULE_MLP, "mlp_activation", "Neurons",
     "[batch seq intermediate_size]", "the activation function's output"},
    {NNT_VALUE_MLP_NEURONS, NNT_MODULE_MLP, "mlp_neurons", "Neurons", "[batch seq intermediate_size]",
     "the down projection's input (act(gate) * up when gated)"},
    {NNT_VALUE_MLP_OUTPUT, NNT_MODULE_MLP, "mlp_output", "Residual", "[batch seq hidden_size]",
     "the MLP's contribution to the residual stream"},
    {NNT_VALUE_ROUTER_LOGITS, NNT_MODULE_MLP, "router_logits", "RouterLogits",
     "[batch seq num_experts]", "the router's per-expert logits, before scoring"},
    {NNT_VALUE_EXPERT_WEIGHTS, NNT_MODULE_MLP, "expert_weights", "ExpertWeights",
     "[batch seq top_k]", "the weight applied to each chosen expert's output"},
    {NNT_VALUE_EXPERT_INDICES, NNT_MODULE_MLP, "expert_indices", "ExpertIndices",
     "[batch seq top_k]", "which expert each routing slot uses"},
    {NNT_VALUE_EXPERT_OUTPUTS, NNT_MODULE_MLP, "expert_outputs", "ExpertOutputs",
     "[batch seq top_k hidden_size]", "each routing slot's expert output, times its weight"},
    {NNT_VALUE_ROUTED_OUTPUT, NNT_MODULE_MLP, "routed_output", "Residual", "[batch seq hidden_size]",
     "the routed experts' summed output"},
    {NNT_VALUE_SHARED_EXPERT_OUTPUT, NNT_MODULE_MLP, "shared_expert_output", "Residual",
     "[batch seq hidden_size]", "the shared expert's output"},
};

static const char *const module_names[NNT_MODULE_COUNT] = {
    [NNT_MODULE_MODEL] = "model",
    [NNT_MODULE_LAYER] = "",
    [NNT_MODULE_SELF_ATTN] = "self_attn",
    [NNT_MODULE_LINEAR_ATTN] = "linear_attn",
    [NNT_MODULE_MLP] = "mlp",
};

const nnt_value_def *nnt_value_def_get(nnt_value_id slot)
{
    if ((int)slot < 0 || slot >= NNT_VALUE_COUNT) return NULL;
    return &value_defs[slot];
}

int nnt_value_find(nnt_module host, const char *name)
{
    for (int i = 0; i < NNT_VALUE_COUNT; i++)
        if (value_defs[i].module == host && strcmp(value_defs[i].name, name) == 0) return i;
    return -1;
}

const char *nnt_module_name(nnt_module host)
{
    if ((int)host < 0 || host >= NNT_MODULE_COUNT) return "?";
    return module_names[host];
}

const char *nnt_value_name(nnt_value_id slot)
{
    const nnt_value_def *d = nnt_value_def_get(slot);
    return d ? d->name : "?";
}

nnt_module nnt_value_module(nnt_value_id slot)
{
    const nnt_value_def *d = nnt_value_def_get(slot);
    return d ? d->module : NNT_MODULE_MODEL;
}

const char *nnt_value_layout(nnt_value_id slot)
{
    const nnt_value_def *d = nnt_value_def_get(slot);
    return d ? d->layout : "?";
}

const char *nnt_value_axes(nnt_value_id slot)
{
    const nnt_value_def *d = nnt_value_def_get(slot);
    return d ? d->axes : "?";
}

const char *nnt_value_description(nnt_value_id slot)
{
    const nnt_value_def *d = nnt_value_def_get(slot);
    return d ? d->description : "?";
}
