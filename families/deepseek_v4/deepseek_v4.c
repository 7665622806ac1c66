/* deepseek_v4.c - the DeepSeek-V4 family plugin (DeepseekV4ForCausalLM).
 *
 * The residual is hc_mult streams. Before each sublayer a manifold-constrained hyper-connection
 * reads all streams and returns (post, comb, collapsed); the sublayer's pre-norm reads the
 * collapsed stream, and its output goes into every stream scaled by post while the streams are
 * mixed by comb, used transposed: out_k = post_k a + sum_j comb[j, k] x_j. Attention is
 * multi-query with one head that is both key and value: q_a_proj, q_a_norm, q_b_proj, an
 * unweighted per-head RMSNorm, kv_proj and kv_norm; interleaved rotary on the last
 * qk_rope_head_dim dimensions (the plain base on sliding blocks, the compress base with YaRN on
 * compressed ones); a per-head sink; the sliding window; on compressed blocks the compressor's
 * entries (rate 4 with the lightning indexer's top-k, or the heavy rate, all entries) after the
 * token keys, visible once a query has reached an entry's last token; the output rotated back
 * before the grouped o_a_proj and o_b_proj. Every MLP is a mixture with sqrt(softplus) scores,
 * hash routing (tid2eid) on the first blocks, a shared expert, and SwiGLU clamped at
 * swiglu_limit on every expert. The readout collapses the streams through hc_head, then norm and
 * lm_head. Sources: src/transformers/models/deepseek_v4/modeling_deepseek_v4.py; the release's
 * inference/model.py (deepseek-ai/DeepSeek-V4-Flash on the Hugging Face hub);
 * vllm/model_executor/models/deepseek_v4.py. Values: docs/plugin-guide.md. Weights under
 * transformers' names or the release's native names (FP8 with E8M0 block scales, FP4 experts),
 * declared once with the module tree in dv_arch.c (DV_ARCH), from which loading, `nnt print`
 * and the planner's weight bytes are read; this file holds the configuration, the forward, the
 * value shapes and the lifecycle. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dv_internal.h"
#include <nnt/nnt_version.h> /* the plugin reports nnt's version */

static const char *const KIND_NAMES[] = {"sliding_attention", "compressed_sparse_attention",
                                         "heavily_compressed_attention"};
static const char *const MLP_NAMES[] = {"hash_moe", "moe"};

static const char *const ARCHS[] = {"DeepseekV4ForCausalLM", NULL};
static const char *const TYPES[] = {"deepseek_v4", NULL};

#define CK(x)                                                                                                          \
    do {                                                                                                               \
        nnt_status st_ = (x);                                                                                          \
        if (st_ != NNT_OK) return st_;                                                                                 \
    } while (0)

static nnt_status cfg_i(const dv_model *m, const nnt_checkpoint *ck, const char *key, int64_t dflt, int req, int *out,
                        nnt_error *err)
{
    int64_t v;
    CK(m->env.core->cfg_int(ck, key, dflt, req, &v, err));
    *out = (int)v;
    return NNT_OK;
}

/* YaRN inverse frequencies as transformers computes them (correction range truncated to whole
 * dimensions, a linear ramp between them). Source: Peng et al. 2023 (YaRN); transformers'
 * modeling_rope_utils. */
static void yarn_inv_freq(float *out, int dim, double base, double factor, double orig, double beta_fast,
                          double beta_slow)
{
    double low = floor(dim * log(orig / (beta_fast * 2 * M_PI)) / (2 * log(base)));
    double high = ceil(dim * log(orig / (beta_slow * 2 * M_PI)) / (2 * log(base)));
    if (low < 0) low = 0;
    if (high > dim - 1) high = dim - 1;
    if (low == high) high += 0.001;
    for (int i = 0; i < dim / 2; i++) {
        float pos = powf((float)base, (float)(2 * i) / (float)dim);
        float extrap = 1.0f / pos, interp = 1.0f / ((float)factor * pos);
        float ramp = (float)(((double)i - low) / (high - low));
        ramp = ramp < 0 ? 0 : ramp > 1 ? 1 : ramp;
        float keep = 1.0f - ramp; /* share of the unscaled frequency */
        out[i] = interp * (1.0f - keep) + extrap * keep;
    }
}

static nnt_status read_rope(dv_model *m, const nnt_checkpoint *ck, nnt_error *err)
{
    const nnt_core_api *h = m->env.core;
    double prf = 0.0;
    if (h->cfg_has(ck, "partial_rotary_factor")) {
        CK(h->cfg_float(ck, "partial_rotary_factor", 0.125, 0, &prf, err));
        if (!(prf >= 0.0 && prf <= 1.0)) /* also before the cast: a huge factor would overflow it */
            return h->set_error(err, NNT_ERR_CONFIG, "%s: partial_rotary_factor is %g; expected the rotary share of a "
                                "head, in [0, 1]", h->cfg_path(ck), prf);
        m->rot = (int)(m->head_dim * prf);
    } else {
        CK(cfg_i(m, ck, "qk_rope_head_dim", m->head_dim / 8, 0, &m->rot, err));
    }
    /* checked before the frequency tables are sized by it */
    if (m->rot <= 0 || m->rot % 2 || m->rot > m->head_dim || m->rot > m->index_dim)
        return h->set_error(err, NNT_ERR_CONFIG, "%s: %d rotary dimensions do not fit head_dim %d and index_head_dim %d",
                            h->cfg_path(ck), m->rot, m->head_dim, m->index_dim);
    const char *mkey = h->cfg_has(ck, "rope_parameters.main.rope_theta") ? "rope_parameters.main.rope_theta" : "rope_theta";
    CK(h->cfg_float(ck, mkey, 10000.0, 0, &m->theta_main, err));
    const char *ckey = h->cfg_has(ck, "rope_parameters.compress.rope_theta") ? "rope_parameters.compress.rope_theta"
                                                                                 : "compress_rope_theta";
    CK(h->cfg_float(ck, ckey, 160000.0, 0, &m->theta_comp, err));
    for (int k = 0; k < 2; k++) {
        m->inv_freq[k] = calloc((size_t)m->rot / 2 + 1, sizeof(float));
        if (!m->inv_freq[k]) return h->set_error(err, NNT_ERR_OUT_OF_MEMORY, "no memory");
    }
    fam_rope_inv_freq(m->inv_freq[0], m->rot, m->theta_main);
    /* the compress rope: YaRN when the config asks (rope_parameters.compress or rope_scaling) */
    const char *pre = h->cfg_has(ck, "rope_parameters.compress.rope_type") ? "rope_parameters.compress" : "rope_scaling";
    char key[96];
    const char *type = "default";
    snprintf(key, sizeof key, "%s.rope_type", pre);
    if (h->cfg_has(ck, key))
        CK(h->cfg_string(ck, key, "default", 0, &type, err));
    else {
        snprintf(key, sizeof key, "%s.type", pre);
        CK(h->cfg_string(ck, key, "default", 0, &type, err));
    }
    if (strcmp(type, "yarn") == 0) {
        double factor, orig, bf, bs, af;
        snprintf(key, sizeof key, "%s.factor", pre);
        CK(h->cfg_float(ck, key, 1.0, 1, &factor, err));
        snprintf(key, sizeof key, "%s.original_max_position_embeddings", pre);
        CK(h->cfg_float(ck, key, 0, 1, &orig, err));
        snprintf(key, sizeof key, "%s.beta_fast", pre);
        CK(h->cfg_float(ck, key, 32.0, 0, &bf, err));
        snprintf(key, sizeof key, "%s.beta_slow", pre);
        CK(h->cfg_float(ck, key, 1.0, 0, &bs, err));
        snprintf(key, sizeof key, "%s.attention_factor", pre);
        CK(h->cfg_float(ck, key, 1.0, 0, &af, err));
        if (af != 1.0)
            return h->set_error(err, NNT_ERR_UNSUPPORTED, "%s: %s is %g; DeepSeek-V4 applies no YaRN attention factor",
                                h->cfg_path(ck), key, af);
        yarn_inv_freq(m->inv_freq[1], m->rot, m->theta_comp, factor, orig, bf, bs);
    } else if (strcmp(type, "default") == 0) {
        fam_rope_inv_freq(m->inv_freq[1], m->rot, m->theta_comp);
    } else {
        return h->set_error(err, NNT_ERR_UNSUPPORTED, "%s: compress rope type '%s' is not supported (default or yarn)",
                            h->cfg_path(ck), type);
    }
    return NNT_OK;
}

static nnt_status read_config(dv_model *m, const nnt_checkpoint *ck, int *kinds, int *hash, nnt_error *err)
{
    const nnt_core_api *h = m->env.core;
    CK(cfg_i(m, ck, "hidden_size", 0, 1, &m->hidden, err));
    CK(cfg_i(m, ck, "vocab_size", 0, 1, &m->vocab, err));
    CK(cfg_i(m, ck, "num_attention_heads", 0, 1, &m->heads, err));
    CK(cfg_i(m, ck, "head_dim", 512, 0, &m->head_dim, err));
    CK(cfg_i(m, ck, "q_lora_rank", 1024, 0, &m->q_lora, err));
    CK(cfg_i(m, ck, "o_groups", 8, 0, &m->o_groups, err));
    CK(cfg_i(m, ck, "o_lora_rank", 1024, 0, &m->o_lora, err));
    CK(cfg_i(m, ck, "sliding_window", 128, 0, &m->window, err));
    CK(cfg_i(m, ck, "hc_mult", 4, 0, &m->streams, err));
    CK(cfg_i(m, ck, "hc_sinkhorn_iters", 20, 0, &m->sinkhorn, err));
    CK(h->cfg_float(ck, "hc_eps", 1e-6, 0, &m->hc_eps, err));
    CK(h->cfg_float(ck, "rms_norm_eps", 1e-6, 0, &m->eps, err));
    static const char *const ek[] = {"n_routed_experts", "num_local_experts"};
    CK(cfg_i(m, ck, h->cfg_has(ck, ek[0]) ? ek[0] : ek[1], 0, 1, &m->experts, err));
    CK(cfg_i(m, ck, "num_experts_per_tok", 0, 1, &m->top_k, err));
    CK(cfg_i(m, ck, "n_shared_experts", 1, 0, &m->shared, err));
    CK(cfg_i(m, ck, h->cfg_has(ck, "moe_intermediate_size") ? "moe_intermediate_size" : "intermediate_size", 0, 1,
             &m->moe_inter, err));
    CK(cfg_i(m, ck, "index_n_heads", 64, 0, &m->index_heads, err));
    CK(cfg_i(m, ck, "index_head_dim", 128, 0, &m->index_dim, err));
    CK(cfg_i(m, ck, "index_topk", 512, 0, &m->index_topk, err));
    CK(h->cfg_float(ck, "routed_scaling_factor", 1.0, 0, &m->scaling, err));
    CK(h->cfg_float(ck, "swiglu_limit", 0.0, 0, &m->limit, err));
    CK(h->cfg_bool(ck, "norm_topk_prob", 1, 0, &m->norm_topk, err));
    CK(h->cfg_bool(ck, "tie_word_embeddings", 0, 0, &m->tied, err));
    const char *s = NULL;
    CK(h->cfg_string(ck, "scoring_func", "sqrtsoftplus", 0, &s, err));
    if (strcmp(s, "sqrtsoftplus") == 0) m->score_fn = NNT_SCORE_SQRT_SOFTPLUS;
    else if (strcmp(s, "sigmoid") == 0) m->score_fn = NNT_SCORE_SIGMOID;
    else if (strcmp(s, "softmax") == 0) m->score_fn = NNT_SCORE_SOFTMAX;
    else return h->set_error(err, NNT_ERR_UNSUPPORTED, "%s: scoring_func '%s' is not supported", h->cfg_path(ck), s);
    CK(h->cfg_string(ck, "hidden_act", "silu", 0, &s, err));
    if (strcmp(s, "silu") != 0)
        return h->set_error(err, NNT_ERR_UNSUPPORTED, "%s: hidden_act '%s' is not supported (silu expected)", h->cfg_path(ck), s);
    int kvh = 1;
    CK(cfg_i(m, ck, "num_key_value_heads", 1, 0, &kvh, err));
    if (kvh != 1)
        return h->set_error(err, NNT_ERR_UNSUPPORTED, "%s: num_key_value_heads is %d; DeepSeek-V4's attention has one shared "
                            "key/value head", h->cfg_path(ck), kvh);
    /* compress rates: transformers' dict, or the legacy per-kind keys */
    m->rate[SLIDING] = 0;
    CK(cfg_i(m, ck, h->cfg_has(ck, "compress_rates.compressed_sparse_attention") ? "compress_rates.compressed_sparse_attention"
                                                                                   : "compress_rate_csa", 4, 0, &m->rate[CSA], err));
    CK(cfg_i(m, ck, h->cfg_has(ck, "compress_rates.heavily_compressed_attention") ? "compress_rates.heavily_compressed_attention"
                                                                                    : "compress_rate_hca", 128, 0, &m->rate[HCA], err));
    int explicit_hca = h->cfg_has(ck, "compress_rates.heavily_compressed_attention") || h->cfg_has(ck, "compress_rate_hca");
    CK(cfg_i(m, ck, "num_hidden_layers", 0, 1, &m->layers, err));
    if (m->layers <= 0 || m->layers > 4096) return h->set_error(err, NNT_ERR_CONFIG, "%s: num_hidden_layers must be 1..4096", h->cfg_path(ck));
    int64_t v[4097];
    int n = 0;
    if (h->cfg_has(ck, "layer_types")) {
        CK(h->cfg_int_list(ck, "layer_types", KIND_NAMES, 3, v, 4097, &n, err));
        if (n < m->layers)
            return h->set_error(err, NNT_ERR_CONFIG, "%s: 'layer_types' has %d entries for %d blocks", h->cfg_path(ck), n, m->layers);
        for (int i = 0; i < m->layers; i++) kinds[i] = (int)v[i];
    } else if (h->cfg_has(ck, "compress_ratios")) {
        /* 0: sliding only; the CSA rate: compressed sparse; another rate: heavily compressed.
         * Entries past num_hidden_layers belong to multi-token-prediction blocks. */
        CK(h->cfg_int_list(ck, "compress_ratios", NULL, 0, v, 4097, &n, err));
        if (n < m->layers)
            return h->set_error(err, NNT_ERR_CONFIG, "%s: 'compress_ratios' has %d entries for %d blocks", h->cfg_path(ck), n, m->layers);
        for (int i = 0; i < m->layers; i++) {
            if (v[i] == 0)
                kinds[i] = SLIDING;
            else if (v[i] == m->rate[CSA])
                kinds[i] = CSA;
            else {
                if (explicit_hca && v[i] != m->rate[HCA])
                    return h->set_error(err, NNT_ERR_CONFIG, "%s: compress_ratios[%d] is %lld, but the heavily compressed "
                                        "rate is %d", h->cfg_path(ck), i, (long long)v[i], m->rate[HCA]);
                kinds[i] = HCA;
                m->rate[HCA] = (int)v[i];
            }
        }
    } else {
        for (int i = 0; i < m->layers; i++) kinds[i] = i < 2 ? HCA : (i % 2 ? CSA : HCA);
    }
    if (h->cfg_has(ck, "mlp_layer_types")) {
        CK(h->cfg_int_list(ck, "mlp_layer_types", MLP_NAMES, 2, v, 4097, &n, err));
        if (n < m->layers)
            return h->set_error(err, NNT_ERR_CONFIG, "%s: 'mlp_layer_types' has %d entries for %d blocks", h->cfg_path(ck), n, m->layers);
        for (int i = 0; i < m->layers; i++) hash[i] = v[i] == 0;
    } else {
        int nh = 3;
        CK(cfg_i(m, ck, "num_hash_layers", 3, 0, &nh, err));
        for (int i = 0; i < m->layers; i++) hash[i] = i < nh;
    }
    const char *bad = NULL;
    if (m->hidden <= 0 || m->vocab <= 0 || m->heads <= 0 || m->head_dim <= 0 || m->q_lora <= 0) bad = "sizes must be positive";
    else if (m->o_groups <= 0 || m->heads % m->o_groups || m->o_lora <= 0) bad = "o_groups must divide num_attention_heads";
    else if (m->streams < 1 || m->streams > 16) bad = "hc_mult must be between 1 and 16";
    else if (m->window < 1) bad = "sliding_window must be at least 1";
    else if (m->experts <= 0 || m->top_k <= 0 || m->top_k > m->experts) bad = "num_experts_per_tok must be between 1 and n_routed_experts";
    else if (m->rate[CSA] < 1 || m->rate[HCA] < 1) bad = "compress rates must be positive";
    else if (m->shared < 0 || m->shared > 1) bad = "n_shared_experts must be 0 or 1";
    /* iterations run per token, block and mix: an absurd count is a hang, not a model (the
     * release uses 20) */
    else if (m->sinkhorn < 0 || m->sinkhorn > 1000) bad = "hc_sinkhorn_iters must be 0..1000";
    if (bad) return h->set_error(err, NNT_ERR_CONFIG, "%s: %s", h->cfg_path(ck), bad);
    return read_rope(m, ck, err);
}

/* config.json into *m, and each block's kind and routing into m->l (calloc'ed [layers], what the
 * architecture table's describe reads), for load and costs alike. On an error m->l and the
 * rotary tables may be set: the caller frees them. Errors: read_config's, NNT_ERR_OUT_OF_MEMORY. */
static nnt_status read_model(dv_model *m, const nnt_checkpoint *ck, nnt_error *err)
{
    const nnt_core_api *h = m->env.core;
    int *kinds = calloc(4097, sizeof *kinds), *hash = calloc(4097, sizeof *hash);
    nnt_status st = kinds && hash ? read_config(m, ck, kinds, hash, err) : h->set_error(err, NNT_ERR_OUT_OF_MEMORY, "no memory");
    if (st == NNT_OK) {
        m->l = calloc((size_t)m->layers, sizeof *m->l);
        if (!m->l) st = h->set_error(err, NNT_ERR_OUT_OF_MEMORY, "no memory");
    }
    for (int L = 0; st == NNT_OK && L < m->layers; L++) {
        m->l[L].kind = kinds[L];
        m->l[L].hash = hash[L];
    }
    free(kinds);
    free(hash);
    return st;
}

/* ---------------------------------------------------------------------------------------- */
/* The forward.                                                                              */

#define TRY(e)                                                                                                         \
    do {                                                                                                               \
        if ((st = (e)) != NNT_OK) goto done;                                                                           \
    } while (0)

/* Per-call facts shared by every block: each row's first real token and real length. */
typedef struct call_rows {
    int32_t *first, *count_csa, *count_hca, *neg_pos; /* over the session's positions so far */
    int n_real_max;
    dv_cache *cache; /* NULL: a call without generation state */
} call_rows;

/* Whether token t of this call (row b) is real: the call's part of the [B, past + seq] mask. */
static int real_token(const nnt_forward_args *args, int64_t b, int64_t t)
{
    return args->attention_mask[b * (args->past + args->seq) + args->past + t] != 0;
}

/* Compressed entries of one compressor: [B, C, D], normed and rotated at positions w * rate.
 * With a generation cache the call's raw rows join those of earlier calls, so C counts entries
 * over the whole session (C = (past + seq) / rate at most). */
static nnt_status compress_entries(dv_model *m, nnt_run *run, int L, const comp_w *c, dv_comp_cache *cc, int capacity,
                                   const nnt_forward_args *args, const call_rows *rows, const int32_t *count,
                                   const nnt_tensor *xn, int64_t C, int32_t *entry_pos, nnt_tensor *entries,
                                   nnt_error *err)
{
    const fam_env *env = &m->env;
    const nnt_backend_ops *be = env->be;
    void *bc = env->be_ctx;
    int64_t B = args->batch, T = args->seq, P = args->past, M = B * T, coff = c->overlap ? 2 : 1, D = c->dim;
    nnt_status st;
    nnt_tensor kv, gate, kv3, g3;
    TRY(fam_alloc(env, run, NNT_F32, &kv, err, NNT_SHAPE(M, coff * D)));
    TRY(fam_alloc(env, run, NNT_F32, &gate, err, NNT_SHAPE(M, coff * D)));
    TRY(fam_alloc(env, run, NNT_F32, entries, err, NNT_SHAPE(B, C, D)));
    const nnt_call_dims dims = {args->batch, args->seq, args->past};
    TRY(fam_linear(env, run, L, &dims, xn, &c->wkv, &kv, err));
    TRY(fam_linear(env, run, L, &dims, xn, &c->wgate, &gate, err));
    TRY(dv_comp_rows(env, run, cc, capacity, &kv, &gate, B, P, T, coff * D, &kv3, &g3, err));
    TRY(be->compress(bc, &kv3, &g3, &c->ape_t, c->rate, c->overlap, rows->first, count, entries, err));
    if (C > 0) {
        nnt_tensor flat = fam_view(entries, NNT_SHAPE(B * C, D)), e4 = fam_view(entries, NNT_SHAPE(B, (int64_t)1, C, D));
        TRY(be->rms_norm(bc, &flat, &c->norm, (float)m->eps, &flat, err));
        for (int64_t b = 0; b < B; b++)
            for (int64_t w = 0; w < C; w++) entry_pos[b * C + w] = (int32_t)(w * c->rate);
        TRY(be->rope(bc, &e4, entry_pos, m->inv_freq[1], D - m->rot, m->rot, NNT_ROPE_INTERLEAVED, 1.0f, err));
    }
done:
    return st;
}

/* The lightning indexer: which of the C entries each query keeps (allow[b, t, T + w]). */
static nnt_status indexer_select(dv_model *m, nnt_run *run, int L, const nnt_forward_args *args, const call_rows *rows,
                                 const nnt_tensor *xn, const nnt_tensor *qr, int64_t C, int64_t S, int64_t first_entry,
                                 uint8_t *allow, nnt_error *err)
{
    const fam_env *env = &m->env;
    const nnt_core_api *h = env->core;
    const nnt_backend_ops *be = env->be;
    void *bc = env->be_ctx;
    const dv_layer *ly = &m->l[L];
    int64_t B = args->batch, T = args->seq, M = B * T, nI = m->index_heads, dI = m->index_dim;
    size_t mark = h->arena_mark(run);
    nnt_status st;
    float *sc = NULL;
    int32_t *pos = malloc((size_t)(B * (C ? C : 1)) * sizeof *pos);
    nnt_tensor keys, q, w, scores;
    if (!pos) {
        st = h->set_error(err, NNT_ERR_OUT_OF_MEMORY, "no memory");
        goto done;
    }
    TRY(compress_entries(m, run, L, &ly->icomp, rows->cache ? &rows->cache->l[L].icomp : NULL,
                         rows->cache ? rows->cache->capacity : 0, args, rows, rows->count_csa, xn, C, pos, &keys, err));
    TRY(fam_alloc(env, run, NNT_F32, &q, err, NNT_SHAPE(M, nI * dI)));
    const nnt_call_dims dims = {args->batch, args->seq, args->past};
    TRY(fam_linear(env, run, L, &dims, qr, &ly->iq_b, &q, err));
    nnt_tensor q4 = fam_view(&q, NNT_SHAPE(M, nI, (int64_t)1, dI));
    TRY(be->rope(bc, &q4, args->positions, m->inv_freq[1], (int)(dI - m->rot), m->rot, NNT_ROPE_INTERLEAVED, 1.0f, err));
    TRY(fam_alloc(env, run, NNT_F32, &w, err, NNT_SHAPE(M, nI)));
    TRY(fam_linear(env, run, L, &dims, xn, &ly->iweights, &w, err));
    TRY(fam_alloc(env, run, NNT_F32, &scores, err, NNT_SHAPE(B, T, C)));
    nnt_tensor qb = fam_view(&q, NNT_SHAPE(B, T, nI, dI));
    TRY(be->indexer_scores(bc, &qb, &keys, &w, 1.0f / sqrtf((float)dI) / sqrtf((float)nI), &scores, err));
    sc = malloc((size_t)(B * T * C) * sizeof *sc);
    if (!sc) {
        st = h->set_error(err, NNT_ERR_OUT_OF_MEMORY, "no memory");
        goto done;
    }
    TRY(be->download(bc, sc, scores.data, (size_t)(B * T * C) * sizeof *sc, err));
    /* per query: the best min(index_topk, C) entries among those whose window it has reached */
    for (int64_t b = 0; b < B; b++)
        for (int64_t t = 0; t < T; t++) {
            int64_t reach = ((int64_t)args->positions[b * T + t] + 1) / m->rate[CSA];
            if (reach > rows->count_csa[b]) reach = rows->count_csa[b];
            if (!real_token(args, b, t)) reach = 0;
            int64_t keep = m->index_topk < C ? m->index_topk : C;
            for (int64_t k = 0; k < keep && k < reach; k++) {
                int64_t best = -1;
                for (int64_t e = 0; e < reach; e++) {
                    if (allow[(b * T + t) * S + first_entry + e]) continue;
                    if (best < 0 || sc[(b * T + t) * C + e] > sc[(b * T + t) * C + best]) best = e;
                }
                allow[(b * T + t) * S + first_entry + best] = 1;
            }
        }
done:
    free(sc);
    free(pos);
    h->arena_release(run, mark);
    return st;
}

/* The attention sublayer on xn [M, H] -> out [M, H]. Keys: the window's cached tokens (a
 * continued call), the call's tokens, then the compressed entries. */
static nnt_status dv_attention(dv_model *m, nnt_run *run, int L, const nnt_forward_args *args, const call_rows *rows,
                               const nnt_tensor *xn, nnt_tensor *out, nnt_error *err)
{
    const fam_env *env = &m->env;
    const nnt_core_api *h = env->core;
    const nnt_backend_ops *be = env->be;
    void *bc = env->be_ctx;
    const dv_layer *ly = &m->l[L];
    dv_layer_cache *lc = rows->cache ? &rows->cache->l[L] : NULL;
    int64_t B = args->batch, T = args->seq, P = args->past, M = B * T, Hh = m->heads, D = m->head_dim, H = m->hidden;
    int64_t G = m->o_groups, OL = m->o_lora, gin = Hh * D / G;
    int64_t W = lc ? lc->win.len : 0, K = W + T; /* token keys: cached window, then the call's */
    int64_t C = ly->kind == SLIDING ? 0 : (P + T) / m->rate[ly->kind], S = K + C;
    const float *inv = m->inv_freq[ly->kind == SLIDING ? 0 : 1];
    int rs = (int)(D - m->rot);
    size_t mark = h->arena_mark(run);
    nnt_status st;
    int32_t *kpos = calloc((size_t)(B * S), sizeof *kpos), *epos = calloc((size_t)(B * (C ? C : 1)), sizeof *epos);
    uint8_t *kvalid = calloc((size_t)(B * S), 1), *nowin = calloc((size_t)S, 1), *qvalid = calloc((size_t)(B * T), 1);
    uint8_t *allow = ly->kind == CSA ? calloc((size_t)(B * T * S), 1) : NULL;
    nnt_tensor qr, q, qh, kv, entries, keys, o, tmp, z;
    if (!kpos || !epos || !kvalid || !nowin || !qvalid || (ly->kind == CSA && !allow)) {
        st = h->set_error(err, NNT_ERR_OUT_OF_MEMORY, "no memory for block %d's attention masks", L);
        goto done;
    }
    /* queries: q_a_proj, q_a_norm, q_b_proj, then an unweighted RMSNorm per head and rotary */
    const nnt_call_dims dims = {args->batch, args->seq, args->past};
    TRY(fam_alloc(env, run, NNT_F32, &qr, err, NNT_SHAPE(M, (int64_t)m->q_lora)));
    TRY(fam_linear(env, run, L, &dims, xn, &ly->wq_a, &qr, err));
    TRY(fam_norm(env, run, L, &dims, &qr, &ly->q_norm, (float)m->eps, &qr, err));
    TRY(fam_alloc(env, run, NNT_F32, &q, err, NNT_SHAPE(M, Hh * D)));
    TRY(fam_linear(env, run, L, &dims, &qr, &ly->wq_b, &q, err));
    nnt_tensor qheads = fam_view(&q, NNT_SHAPE(M * Hh, D));
    TRY(be->rms_norm(bc, &qheads, NULL, (float)m->eps, &qheads, err));
    TRY(fam_alloc(env, run, NNT_F32, &qh, err, NNT_SHAPE(B, Hh, T, D)));
    nnt_tensor q4 = fam_view(&q, NNT_SHAPE(B, T, Hh, D));
    TRY(be->swap12(bc, &q4, &qh, err));
    TRY(be->rope(bc, &qh, args->positions, inv, rs, m->rot, NNT_ROPE_INTERLEAVED, 1.0f, err));
    /* the one key/value head of every token, then the compressed entries after them */
    TRY(fam_alloc(env, run, NNT_F32, &kv, err, NNT_SHAPE(M, D)));
    TRY(fam_linear(env, run, L, &dims, xn, &ly->wkv, &kv, err));
    TRY(fam_norm(env, run, L, &dims, &kv, &ly->kv_norm, (float)m->eps, &kv, err));
    nnt_tensor kv4 = fam_view(&kv, NNT_SHAPE(B, (int64_t)1, T, D));
    TRY(be->rope(bc, &kv4, args->positions, inv, rs, m->rot, NNT_ROPE_INTERLEAVED, 1.0f, err));
    TRY(fam_alloc(env, run, NNT_F32, &keys, err, NNT_SHAPE(B, (int64_t)1, S, D)));
    nnt_tensor keys2 = fam_view(&keys, NNT_SHAPE(B, S * D)), kv2 = fam_view(&kv, NNT_SHAPE(B, T * D));
    if (W) TRY(be->copy_cols(bc, &lc->win.k, 0, &keys2, 0, W * D, err));
    TRY(be->copy_cols(bc, &kv2, 0, &keys2, W * D, T * D, err));
    const int32_t *count = ly->kind == CSA ? rows->count_csa : rows->count_hca;
    if (ly->kind != SLIDING) {
        TRY(compress_entries(m, run, L, &ly->comp, lc ? &lc->comp : NULL, rows->cache ? rows->cache->capacity : 0, args, rows,
                             count, xn, C, epos, &entries, err));
        if (C > 0) {
            nnt_tensor e2 = fam_view(&entries, NNT_SHAPE(B, C * D));
            TRY(be->copy_cols(bc, &e2, 0, &keys2, K * D, C * D, err));
        }
    }
    /* who sees what: token keys by causality, window and padding; an entry once its window has
     * closed (its last token reached), whatever the window; on CSA only the indexer's choice */
    for (int64_t b = 0; b < B; b++) {
        for (int64_t s = 0; s < W; s++) {
            kpos[b * S + s] = lc->win.pos[b * lc->win.keep + s];
            kvalid[b * S + s] = lc->win.valid[b * lc->win.keep + s];
        }
        for (int64_t t = 0; t < T; t++) {
            kpos[b * S + W + t] = args->positions[b * T + t];
            kvalid[b * S + W + t] = (uint8_t)real_token(args, b, t);
            qvalid[b * T + t] = (uint8_t)real_token(args, b, t);
        }
        for (int64_t w = 0; w < C; w++) {
            kpos[b * S + K + w] = (int32_t)((w + 1) * m->rate[ly->kind] - 1);
            kvalid[b * S + K + w] = w < count[b];
        }
    }
    for (int64_t s = K; s < S; s++) nowin[s] = 1;
    if (ly->kind == CSA) {
        for (int64_t b = 0; b < B; b++)
            for (int64_t t = 0; t < T; t++) memset(allow + (b * T + t) * S, 1, (size_t)K);
        if (C > 0) TRY(indexer_select(m, run, L, args, rows, xn, &qr, C, S, K, allow, err));
    }
    nnt_attn_mask mask = {.struct_size = sizeof(nnt_attn_mask),
                          .q_pos = args->positions,
                          .k_pos = kpos,
                          .key_valid = kvalid,
                          .query_valid = qvalid,
                          .key_no_window = nowin,
                          .allow = allow,
                          .causal = 1,
                          .window = m->window};
    TRY(h->emit(run, NNT_VALUE_ATTN_QUERIES, L, &qh));
    /* keys and values are one tensor: an edit to either is an edit to both */
    TRY(h->emit(run, NNT_VALUE_ATTN_KEYS, L, &keys));
    TRY(h->emit(run, NNT_VALUE_ATTN_VALUES, L, &keys));
    /* the window's keys for the next call: the last window - 1 token keys, as
     * edited */
    if (lc) {
        fam_kv_cache *wc = &lc->win;
        int64_t n = K < wc->keep ? K : wc->keep, from = K - n;
        TRY(be->copy_cols(bc, &keys2, from * D, &wc->k, 0, n * D, err));
        for (int64_t b = 0; b < B; b++)
            for (int64_t s = 0; s < n; s++) {
                wc->pos[b * wc->keep + s] = kpos[b * S + from + s];
                wc->valid[b * wc->keep + s] = kvalid[b * S + from + s];
            }
        wc->len = (int)n;
    }
    /* the head outputs take the place of q (its heads were moved into qh): one [B, T, heads,
     * D] buffer fewer at once */
    o = fam_view(&q, NNT_SHAPE(B, T, Hh, D));
    TRY(fam_attend(env, run, L, args, &qh, &keys, &keys, 1.0f / sqrtf((float)D), &mask, ly->sinks, &o, err));
    /* the values carried their rotation: turn the output back at the query's position */
    nnt_tensor o4 = fam_view(&o, NNT_SHAPE(M, Hh, (int64_t)1, D));
    TRY(be->rope(bc, &o4, rows->neg_pos, inv, rs, m->rot, NNT_ROPE_INTERLEAVED, 1.0f, err));
    TRY(h->emit(run, NNT_VALUE_ATTN_HEAD_OUTPUTS, L, &o));
    /* grouped output projection: each group of heads through its own block of o_a_proj */
    TRY(fam_alloc(env, run, NNT_F32, &tmp, err, NNT_SHAPE(M, gin)));
    TRY(fam_alloc(env, run, NNT_F32, &z, err, NNT_SHAPE(M, G * OL)));
    nnt_tensor o2 = fam_view(&o, NNT_SHAPE(M, Hh * D)), zg;
    TRY(fam_alloc(env, run, NNT_F32, &zg, err, NNT_SHAPE(M, OL)));
    for (int64_t g = 0; g < G; g++) {
        nnt_tensor wg;
        TRY(fam_rows(env, &ly->wo_a, 0, g * OL, OL, "o_a_proj", &wg, err));
        TRY(be->copy_cols(bc, &o2, g * gin, &tmp, 0, gin, err));
        TRY(be->linear(bc, &tmp, &wg, &zg, err));
        TRY(be->copy_cols(bc, &zg, 0, &z, g * OL, OL, err));
    }
    TRY(fam_linear(env, run, L, &dims, &z, &ly->wo_b, out, err));
    nnt_tensor out3 = fam_view(out, NNT_SHAPE(B, T, H));
    TRY(h->emit(run, NNT_VALUE_ATTN_OUTPUT, L, &out3));
done:
    free(kpos);
    free(epos);
    free(kvalid);
    free(nowin);
    free(qvalid);
    free(allow);
    h->arena_release(run, mark);
    return st;
}

static nnt_status dv_forward(void *model, nnt_run *run, const nnt_forward_args *args, nnt_error *err)
{
    dv_model *m = model;
    const fam_env *env = &m->env;
    const nnt_core_api *h = env->core;
    const nnt_backend_ops *be = env->be;
    void *bc = env->be_ctx;
    int64_t B = args->batch, T = args->seq, M = B * T, H = m->hidden, V = m->vocab, n = m->streams;
    nnt_call_dims dims = {args->batch, args->seq, args->past};
    call_rows rows = {0};
    nnt_status st = NNT_OK;
    nnt_tensor ids, emb, x, hbuf, post, comb, coll, xn, sub, y;
    rows.first = calloc((size_t)B, sizeof(int32_t));
    rows.count_csa = calloc((size_t)B, sizeof(int32_t));
    rows.count_hca = calloc((size_t)B, sizeof(int32_t));
    rows.neg_pos = calloc((size_t)M, sizeof(int32_t));
    if (!rows.first || !rows.count_csa || !rows.count_hca || !rows.neg_pos) {
        st = h->set_error(err, NNT_ERR_OUT_OF_MEMORY, "no memory");
        goto done;
    }
    /* compression windows start at each row's first real token, so left padding never shifts them;
     * a continued call counts over every position of the session */
    int64_t all = args->past + T;
    rows.cache = args->cache;
    for (int64_t b = 0; b < B; b++) {
        int64_t first = 0, real = 0;
        const int32_t *mk = args->attention_mask + b * all;
        while (first < all && !mk[first]) first++;
        for (int64_t t = first; t < all; t++) real += mk[t] != 0;
        if (first + real != all) {
            st = h->set_error(err, NNT_ERR_INVALID_ARGUMENT,
                              "row %lld: DeepSeek-V4 needs left padding (padding only before a row's real tokens)", (long long)b);
            goto done;
        }
        rows.first[b] = (int32_t)first;
        rows.count_csa[b] = (int32_t)(real / m->rate[CSA]);
        rows.count_hca[b] = (int32_t)(real / m->rate[HCA]);
    }
    for (int64_t i = 0; i < M; i++) rows.neg_pos[i] = -args->positions[i];
    int first, end; /* the blocks of this call's stage (every block for a whole-model call) */
    fam_stage_blocks(args, m->layers, &first, &end);
    TRY(fam_alloc(env, run, NNT_F32, &x, err, NNT_SHAPE(M, n, H)));
    TRY(fam_alloc(env, run, NNT_F32, &hbuf, err, NNT_SHAPE(M, n, H)));
    if (first > 0) { /* a later stage: every stream as the previous stage handed it over */
        TRY(fam_stage_load(env, args, &x, err));
    } else {
        TRY(fam_alloc(env, run, NNT_I32, &ids, err, NNT_SHAPE(M)));
        TRY(be->upload(bc, ids.data, args->input_ids, (size_t)M * sizeof(int32_t), err));
        TRY(fam_alloc(env, run, NNT_F32, &emb, err, NNT_SHAPE(M, H)));
        TRY(be->embedding(bc, &m->embed, &ids, &emb, err));
        nnt_tensor e3 = fam_view(&emb, NNT_SHAPE(B, T, H));
        TRY(h->emit(run, NNT_VALUE_TOKEN_EMBEDDINGS, -1, &e3));
        /* the embedding copied into every stream */
        nnt_tensor x2 = fam_view(&x, NNT_SHAPE(M, n * H));
        for (int64_t j = 0; j < n; j++) TRY(be->copy_cols(bc, &emb, 0, &x2, j * H, H, err));
    }
    nnt_tensor x4 = fam_view(&x, NNT_SHAPE(B, T, n, H));
    for (int L = first; L < end; L++) {
        dv_layer *ly = &m->l[L];
        size_t mark = h->arena_mark(run);
        TRY(h->emit(run, NNT_VALUE_LAYER_INPUT, L, &x4));
        TRY(fam_alloc(env, run, NNT_F32, &post, err, NNT_SHAPE(M, n)));
        TRY(fam_alloc(env, run, NNT_F32, &comb, err, NNT_SHAPE(M, n, n)));
        TRY(fam_alloc(env, run, NNT_F32, &coll, err, NNT_SHAPE(M, H)));
        TRY(fam_alloc(env, run, NNT_F32, &xn, err, NNT_SHAPE(M, H)));
        TRY(fam_alloc(env, run, NNT_F32, &sub, err, NNT_SHAPE(M, H)));
        nnt_tensor p3 = fam_view(&post, NNT_SHAPE(B, T, n)), c4 = fam_view(&comb, NNT_SHAPE(B, T, n, n));
        /* around the attention */
        TRY(be->hyper_connection(bc, &x, &ly->hc_attn.fn_t, &ly->hc_attn.base_t, &ly->hc_attn.scale_t, (float)m->eps,
                                 (float)m->hc_eps, m->sinkhorn, &post, &comb, &coll, err));
        TRY(h->emit(run, NNT_VALUE_ATTENTION_POST, L, &p3));
        TRY(h->emit(run, NNT_VALUE_ATTENTION_COMB, L, &c4));
        TRY(fam_norm(env, run, L, &dims, &coll, &ly->attn_norm, (float)m->eps, &xn, err));
        TRY(dv_attention(m, run, L, args, &rows, &xn, &sub, err));
        TRY(be->hyper_mix(bc, &x, &sub, &post, &comb, &hbuf, err));
        /* around the mixture */
        TRY(be->hyper_connection(bc, &hbuf, &ly->hc_ffn.fn_t, &ly->hc_ffn.base_t, &ly->hc_ffn.scale_t, (float)m->eps,
                                 (float)m->hc_eps, m->sinkhorn, &post, &comb, &coll, err));
        TRY(h->emit(run, NNT_VALUE_MLP_POST, L, &p3));
        TRY(h->emit(run, NNT_VALUE_MLP_COMB, L, &c4));
        TRY(fam_norm(env, run, L, &dims, &coll, &ly->ffn_norm, (float)m->eps, &xn, err));
        TRY(fam_moe_forward(env, run, L, &ly->moe, &dims, args->input_ids, &xn, &sub, err));
        TRY(be->hyper_mix(bc, &hbuf, &sub, &post, &comb, &x, err));
        TRY(h->emit(run, NNT_VALUE_LAYER_OUTPUT, L, &x4));
        h->arena_release(run, mark);
    }
    if (end < m->layers) { /* an earlier stage: hand every stream over, no readout */
        TRY(fam_stage_store(env, args, &x, err));
        goto done;
    }
    /* the readout: collapse the streams through hc_head, then norm and lm_head */
    TRY(fam_alloc(env, run, NNT_F32, &y, err, NNT_SHAPE(M, H)));
    TRY(be->hyper_head(bc, &x, &m->hc_head.fn_t, &m->hc_head.base_t, &m->hc_head.scale_t, (float)m->eps, (float)m->hc_eps,
                       &y, err));
    TRY(be->rms_norm(bc, &y, &m->final_norm, (float)m->eps, &y, err));
    nnt_tensor y3 = fam_view(&y, NNT_SHAPE(B, T, H));
    TRY(h->emit(run, NNT_VALUE_FINAL_NORM_OUTPUT, -1, &y3));
    TRY(fam_readout(env, run, args, &y, &m->lm_head, V, err));
done:
    free(rows.first);
    free(rows.count_csa);
    free(rows.count_hca);
    free(rows.neg_pos);
    return st;
}

static nnt_status dv_project(void *model, nnt_run *run, const nnt_tensor *x, int streams, nnt_tensor *logits,
                             nnt_error *err)
{
    dv_model *m = model;
    const fam_env *env = &m->env;
    int64_t M = x->shape[0], H = m->hidden;
    size_t mark = env->core->arena_mark(run);
    nnt_tensor y;
    nnt_status st = fam_alloc(env, run, NNT_F32, &y, err, NNT_SHAPE(M, H));
    if (st == NNT_OK && streams)
        st = env->be->hyper_head(env->be_ctx, x, &m->hc_head.fn_t, &m->hc_head.base_t, &m->hc_head.scale_t, (float)m->eps,
                                 (float)m->hc_eps, &y, err);
    else if (st == NNT_OK)
        st = env->be->copy(env->be_ctx, x, &y, err);
    if (st == NNT_OK) st = env->be->rms_norm(env->be_ctx, &y, &m->final_norm, (float)m->eps, &y, err);
    if (st == NNT_OK) st = env->be->linear(env->be_ctx, &y, &m->lm_head, logits, err);
    env->core->arena_release(run, mark);
    return st;
}

/* ---------------------------------------------------------------------------------------- */
/* Lifecycle, description, printout.                                                         */

static void dv_unload(void *model)
{
    dv_model *m = model;
    if (!m) return;
    fam_env_release(&m->env); /* weights and parameter vectors */
    if (m->l)
        for (int L = 0; L < m->layers; L++) free(m->l[L].tid2eid);
    free(m->l);
    free(m->inv_freq[0]);
    free(m->inv_freq[1]);
    free(m);
}

static nnt_status dv_load(const nnt_load_args *args, void **out, nnt_error *err)
{
    dv_model *m = calloc(1, sizeof *m);
    if (!m) return args->core->set_error(err, NNT_ERR_OUT_OF_MEMORY, "no memory");
    fam_env_init(&m->env, args);
    /* in bfloat16, transformers' DeepSeek-V4 multiplies its float32 norm gains and its rotation
     * in float32 and casts once (modeling_deepseek_v4.py, DeepseekV4RMSNorm, apply_rotary_pos_emb) */
    m->env.bf16_style = NNT_TENSOR_BF16_ONCE;
    nnt_status st = read_model(m, args->ckpt, err);
    /* a stage's load binds its blocks only (another stage's keep their kind: the tree and the
     * value shapes read it), and the readout parts that stage holds */
    if (st == NNT_OK) {
        fam_load_blocks(args, m->layers, &m->first_block, &m->end_block);
        st = dv_bind_readout(m, args, err);
    }
    for (int L = m->first_block; st == NNT_OK && L < m->end_block; L++) st = dv_bind_block(m, args->ckpt, L, err);
    if (st == NNT_OK) st = fam_env_natives(&m->env, &DV_ARCH, m, m->l, sizeof *m->l, err);
    if (st != NNT_OK) {
        dv_unload(m);
        return st;
    }
    *out = m;
    return NNT_OK;
}

static void dv_info(const void *model, nnt_model_info *out)
{
    const dv_model *m = model;
    memset(out, 0, sizeof *out);
    out->architecture = "DeepseekV4ForCausalLM";
    out->model_type = "deepseek_v4";
    out->root_class = "DeepseekV4ForCausalLM";
    out->num_layers = m->layers;
    out->hidden_size = m->hidden;
    out->vocab_size = m->vocab;
    out->num_heads = m->heads;
    out->num_kv_heads = 1;
    out->head_dim = m->head_dim;
    out->qk_head_dim = m->head_dim;
    out->intermediate_size = m->moe_inter;
    out->num_experts = m->experts;
    out->top_k = m->top_k;
    out->num_streams = m->streams;
}

static const char STREAMS_REASON[] =
    "hyper-connection streams: each sublayer reads a weighted mix of the residual streams rather than one stream, "
    "and this family does not map the block's inner boundaries";

/* The native module values, from DV_ARCH's rows. */
static nnt_status dv_native(const void *model, int i, nnt_native_info *out)
{
    const dv_model *m = model;
    return fam_natives_entry(&m->env, i, out);
}

static nnt_status dv_value_info(const void *model, int layer, nnt_value_id id, const nnt_call_dims *d, nnt_value_info *out)
{
    const dv_model *m = model;
    int64_t B = d ? d->batch : 0, T = d ? d->seq : 0, H = m->hidden, n = m->streams, Hh = m->heads, D = m->head_dim;
    const dv_layer *ly = layer >= 0 ? &m->l[layer] : NULL;
    int64_t C = ly && ly->kind != SLIDING && d ? (d->past + d->seq) / m->rate[ly->kind] : 0;
    /* a continued call sees the window's last window - 1 cached keys, then its own tokens */
    int64_t S = d ? fam_kv_cached_len(dv_window_keep(m), d) + C : 0;
    if (fam_natives_value_info(&m->env, layer, id, d, out)) return NNT_OK; /* q_a_proj.output, ... */
    if (fam_arch_value_info(&DV_ARCH, m, layer, id, out)) return NNT_OK; /* linear_attn: no such module */
    switch (id) {
    case NNT_VALUE_LOGITS:
    case NNT_VALUE_LM_HEAD_OUTPUT: fam_served(out, d, NNT_F32, 1, NNT_SHAPE(B, T, (int64_t)m->vocab)); return NNT_OK;
    case NNT_VALUE_TOKEN_EMBEDDINGS:
    case NNT_VALUE_FINAL_NORM_OUTPUT: fam_served(out, d, NNT_F32, 1, NNT_SHAPE(B, T, H)); return NNT_OK;
    case NNT_VALUE_LAYER_INPUT:
    case NNT_VALUE_LAYER_OUTPUT:
        fam_served(out, d, NNT_F32, 1, NNT_SHAPE(B, T, n, H));
        out->layout = "Streams";
        out->axes = "[batch seq streams hidden_size]";
        return NNT_OK;
    case NNT_VALUE_ATTENTION_NORM_OUTPUT:
    case NNT_VALUE_LAYER_MID:
    case NNT_VALUE_MLP_NORM_OUTPUT:
    case NNT_VALUE_MLP_INPUT: fam_unserved(out, "%s", STREAMS_REASON); return NNT_OK;
    case NNT_VALUE_ATTENTION_POST:
    case NNT_VALUE_MLP_POST: fam_served(out, d, NNT_F32, 1, NNT_SHAPE(B, T, n)); return NNT_OK;
    case NNT_VALUE_ATTENTION_COMB:
    case NNT_VALUE_MLP_COMB: fam_served(out, d, NNT_F32, 1, NNT_SHAPE(B, T, n, n)); return NNT_OK;
    case NNT_VALUE_ATTN_QUERIES: fam_served(out, d, NNT_F32, 1, NNT_SHAPE(B, Hh, T, D)); return NNT_OK;
    case NNT_VALUE_ATTN_KEYS:
    case NNT_VALUE_ATTN_VALUES: fam_served(out, d, NNT_F32, 1, NNT_SHAPE(B, (int64_t)1, S, D)); return NNT_OK;
    case NNT_VALUE_ATTN_SCORES:
    case NNT_VALUE_ATTN_PROBABILITIES: fam_served(out, d, NNT_F32, 1, NNT_SHAPE(B, Hh, T, S)); return NNT_OK;
    case NNT_VALUE_ATTN_PREMIX:
        fam_unserved(out, "a low-rank output projection: o_a_proj compresses each group of heads before o_b_proj, so no "
                          "module receives every head's output side by side");
        return NNT_OK;
    case NNT_VALUE_ATTN_HEAD_OUTPUTS: fam_served(out, d, NNT_F32, 1, NNT_SHAPE(B, T, Hh, D)); return NNT_OK;
    case NNT_VALUE_ATTN_OUTPUT:
    case NNT_VALUE_MLP_OUTPUT:
    case NNT_VALUE_ROUTED_OUTPUT:
    case NNT_VALUE_SHARED_EXPERT_OUTPUT:
        if (id == NNT_VALUE_SHARED_EXPERT_OUTPUT && !m->shared) {
            fam_unserved(out, "this checkpoint has no shared expert (n_shared_experts is 0)");
            return NNT_OK;
        }
        fam_served(out, d, NNT_F32, 1, NNT_SHAPE(B, T, H));
        return NNT_OK;
    case NNT_VALUE_ROUTER_LOGITS: fam_served(out, d, NNT_F32, 1, NNT_SHAPE(B, T, (int64_t)m->experts)); return NNT_OK;
    case NNT_VALUE_EXPERT_WEIGHTS: fam_served(out, d, NNT_F32, 1, NNT_SHAPE(B, T, (int64_t)m->top_k)); return NNT_OK;
    case NNT_VALUE_EXPERT_INDICES: fam_served(out, d, NNT_I32, 1, NNT_SHAPE(B, T, (int64_t)m->top_k)); return NNT_OK;
    case NNT_VALUE_EXPERT_OUTPUTS: fam_served(out, d, NNT_F32, 1, NNT_SHAPE(B, T, (int64_t)m->top_k, H)); return NNT_OK;
    case NNT_VALUE_MLP_ACTIVATION:
    case NNT_VALUE_MLP_NEURONS:
        fam_unserved(out, "every DeepSeek-V4 MLP is a mixture: each routed expert's activations exist only for its tokens "
                          "and the shared expert's are not the block's, so no single [batch seq intermediate_size] tensor exists");
        return NNT_OK;
    default: fam_unserved(out, "not a DeepSeek-V4 value"); return NNT_OK;
    }
}

/* `nnt print`'s module tree, from DV_ARCH. */
static nnt_status dv_build_tree(const void *model, nnt_tree *tree, nnt_error *err)
{
    const dv_model *m = model;
    return fam_arch_tree(m->env.core, &DV_ARCH, m, m->layers, tree, err);
}

/* The planner's byte model (nnt_cost_args) from config.json alone: the weights of every tensor
 * DV_ARCH lists, as the checkpoint's encoding stores them (fam_arch_costs; the last stage's
 * readout includes hc_head), and each block's generation cache (dv_cache_bytes: the window and
 * its compressors' rows of every token). */
static nnt_status dv_costs(nnt_cost_args *args, nnt_error *err)
{
    dv_model m = {0};
    m.env.core = args->core;
    fam_encoding e;
    nnt_status st = read_model(&m, args->ckpt, err);
    if (st == NNT_OK) st = fam_cost_blocks(args, m.layers, err);
    if (st == NNT_OK) st = fam_cost_encoding(args, &e, err);
    if (st == NNT_OK) st = fam_arch_costs(args, &DV_ARCH, &m, &e, err);
    for (int l = 0; st == NNT_OK && l < args->n_blocks; l++) {
        comp_w c, ic;
        dv_comp_shape(&m, m.l[l].kind, 0, &c);
        dv_comp_shape(&m, m.l[l].kind, 1, &ic);
        args->cache_bytes[l] = dv_cache_bytes(&m, args->batch, args->context, dv_comp_width(&c), dv_comp_width(&ic));
    }
    free(m.l);
    free(m.inv_freq[0]); /* the rotary tables read_config makes, which costs do not need */
    free(m.inv_freq[1]);
    return st;
}

NNT_PLUGIN_EXPORT const nnt_family_descriptor nnt_family_plugin = {
    .header = NNT_PLUGIN_HEADER(nnt_family_descriptor, NNT_PLUGIN_FAMILY, "deepseek_v4", NNT_VERSION_STRING,
                                      "DeepSeek-V4 (DeepseekV4ForCausalLM): hyper-connections, compressed sparse attention"),
    .architectures = ARCHS,
    .model_types = TYPES,
    .renames = DV_RENAMES,
    .load = dv_load,
    .unload = dv_unload,
    .info = dv_info,
    .value_info = dv_value_info,
    .build_tree = dv_build_tree,
    .forward = dv_forward,
    .project = dv_project,
    .cache_new = dv_cache_new,
    .cache_free = dv_cache_free,
    .ops_needed = NNT_OPS_DECODER | NNT_OPS_HYPER,
    .costs = dv_costs,
    .native = dv_native,
};
