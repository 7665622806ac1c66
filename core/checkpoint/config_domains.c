/* config_domains.c - the values a config.json field may take. Every number a family reads through
 * the core's config readers (nnt_cfg_float, nnt_cfg_int) is checked here by its key, whichever
 * family reads it: a float must be finite, and the fields below must lie in their domains, since
 * a value outside one gives no error downstream, only wrong numbers (rms_norm_eps = -1 makes every
 * logit NaN). docs/checkpoint-safety.md lists the same table. */
#include <math.h>
#include <string.h>

#include "internal.h"

typedef enum domain {
    POSITIVE, /* a finite number > 0 */
    NONNEG,   /* a finite number >= 0 */
    FRACTION, /* a number in [0, 1] */
    COUNT,    /* an integer >= 1 */
    COUNT0,   /* an integer >= 0 */
} domain;

static const struct {
    const char *key;
    domain dom;
} DOMAINS[] = {
    /* normalisation epsilons */
    {"rms_norm_eps", POSITIVE},
    {"layernorm_epsilon", POSITIVE},
    {"layer_norm_eps", POSITIVE},
    {"hc_eps", POSITIVE},
    /* rotary bases and fractions */
    {"rope_theta", POSITIVE},
    {"swa_rope_theta", POSITIVE},
    {"compress_rope_theta", POSITIVE},
    {"partial_rotary_factor", FRACTION},
    /* scales and limits */
    {"routed_scaling_factor", POSITIVE},
    {"attention_value_scale", POSITIVE},
    {"swiglu_limit", NONNEG},
    /* widths and counts */
    {"vocab_size", COUNT},
    {"hidden_size", COUNT},
    {"num_hidden_layers", COUNT},
    {"num_attention_heads", COUNT},
    {"num_key_value_heads", COUNT},
    {"head_dim", COUNT},
    {"v_head_dim", COUNT},
    {"swa_num_attention_heads", COUNT},
    {"swa_num_key_value_heads", COUNT},
    {"swa_head_dim", COUNT},
    {"swa_v_head_dim", COUNT},
    {"intermediate_size", COUNT0},
    {"moe_intermediate_size", COUNT},
    {"shared_intermediate_size", COUNT0},
    {"num_experts_per_tok", COUNT},
    {"num_experts_per_token", COUNT},
    {"n_routed_experts", COUNT},
    {"num_local_experts", COUNT},
    {"num_experts", COUNT},
    {"n_shared_experts", COUNT0},
    {"num_shared_experts", COUNT0},
    {"n_group", COUNT},
    {"num_expert_group", COUNT},
    {"topk_group", COUNT},
    {"first_k_dense_replace", COUNT0},
    {"kv_lora_rank", COUNT},
    {"q_lora_rank", COUNT},
    {"o_lora_rank", COUNT},
    {"o_groups", COUNT},
    {"qk_nope_head_dim", COUNT0},
    {"qk_rope_head_dim", COUNT0},
    {"rotary_dim", COUNT0},
    {"index_n_heads", COUNT},
    {"index_head_dim", COUNT},
    {"index_topk", COUNT},
    {"hc_mult", COUNT},
    {"hc_sinkhorn_iters", COUNT},
    {"num_hash_layers", COUNT0},
    {"sliding_window", COUNT0},
    {"sliding_window_size", COUNT0},
};

static const char *const DOMAIN_TEXT[] = {
    [POSITIVE] = "a finite number > 0",
    [NONNEG] = "a finite number >= 0",
    [FRACTION] = "a number in [0, 1]",
    [COUNT] = "an integer >= 1",
    [COUNT0] = "an integer >= 0",
};

const char *nnt_cfg_domain_violation(const char *key, double v)
{
    if (!isfinite(v)) return "a finite number";
    const char *dot = key ? strrchr(key, '.') : NULL; /* a nested key: its last name */
    const char *name = dot ? dot + 1 : key;
    if (!name) return NULL;
    for (size_t i = 0; i < sizeof DOMAINS / sizeof DOMAINS[0]; i++) {
        if (strcmp(DOMAINS[i].key, name) != 0) continue;
        int ok;
        switch (DOMAINS[i].dom) {
        case POSITIVE: ok = v > 0; break;
        case NONNEG: ok = v >= 0; break;
        case FRACTION: ok = v >= 0 && v <= 1; break;
        case COUNT: ok = v >= 1 && v == floor(v); break;
        default: ok = v >= 0 && v == floor(v); break;
        }
        return ok ? NULL : DOMAIN_TEXT[DOMAINS[i].dom];
    }
    return NULL;
}
