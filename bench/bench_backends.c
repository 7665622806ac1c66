/* bench_backends.c - the cpu backend against the cuda backend on the same synthetic mid-size
 * checkpoints, one per family, in one run. Not a test: it prints throughput and the ratios of
 * this run, and asserts nothing about timings.
 *
 *   nnt_bench_backends [--tokens 512] [--steps 16] [--repeats 3] [--threads N]
 *                      [--families minimax_m2,mimo_v2_flash,kimi_linear,deepseek_v4] [--keep]
 *
 * For each family it writes a random checkpoint (config.json + model.safetensors, F32) into a
 * temporary directory - the structure of tests/fixtures/<family>/fp32 at larger sizes: hidden
 * 1024, 4 blocks, 32 routed experts with top-4, a 32000-token vocabulary - loads it on a runtime
 * whose families run on cpu and on one whose families run on cuda (two INI files written next
 * to the checkpoints), and measures
 *   - prefill: one forward of batch 1 x --tokens tokens (best of --repeats, after a warm-up);
 *   - no-cache single-token forward: --steps forwards of one token each, every one a fresh
 *     call without a cache (what a decode step costs without generation state);
 *   - cached decode: --steps one-token calls of a session after the prompt (the real decode
 *     path, with key/value caches and recurrent states), where the family keeps caches.
 * Each timed call saves next_token_probs, so the time includes reading the result back (on
 * cuda, the wait for the device). The cuda column reads "n/a (reason)" when the backend is not
 * built or there is no GPU. */
#define _GNU_SOURCE
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "nnt/nnt.h"

#ifndef NNT_BENCH_BUILD_DIR
#define NNT_BENCH_BUILD_DIR "build"
#endif

/* the mid-size shape every family shares */
#define HIDDEN 1024
#define LAYERS 4
#define EXPERTS 32
#define TOPK 4
#define VOCAB 32000
#define EXPERT_WIDTH 256
#define DENSE_WIDTH 2048

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ---------------------------------------------------------------------------------------- */
/* Checkpoint writing.                                                                       */

typedef struct spec {
    char name[160];
    int ndim;
    int64_t shape[4];
    int is_int;          /* I32 with values (i * 7 + 3) % mod (a hash-routing table) */
    int mod;
    float offset, amp;   /* F32 values offset + amp * uniform(-1, 1) */
} spec;

typedef struct model_def {
    spec *t;
    int n, cap;
    char config[8192];
} model_def;

static void add(model_def *d, float offset, float amp, int ndim, int64_t a, int64_t b, int64_t c, const char *fmt, ...)
{
    if (d->n == d->cap) {
        d->cap = d->cap ? 2 * d->cap : 256;
        d->t = realloc(d->t, (size_t)d->cap * sizeof *d->t);
        if (!d->t) {
            fprintf(stderr, "no memory\n");
            exit(1);
        }
    }
    spec *s = &d->t[d->n++];
    memset(s, 0, sizeof *s);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s->name, sizeof s->name, fmt, ap);
    va_end(ap);
    s->ndim = ndim;
    s->shape[0] = a;
    s->shape[1] = b;
    s->shape[2] = c;
    s->offset = offset;
    s->amp = amp;
}

/* A weight [rows, cols] read as x . w^T: values of standard deviation about 1 / sqrt(3 cols). */
#define LIN(d, rows, cols, ...) add(d, 0.0f, 1.0f / sqrtf((float)(cols)), 2, rows, cols, 0, __VA_ARGS__)
#define ONES(d, n, ...) add(d, 1.0f, 0.0f, 1, n, 0, 0, __VA_ARGS__)
#define SMALL(d, n, amp, ...) add(d, 0.0f, amp, 1, n, 0, 0, __VA_ARGS__)

static int64_t numel(const spec *s)
{
    int64_t n = 1;
    for (int i = 0; i < s->ndim; i++) n *= s->shape[i];
    return n;
}

static int write_safetensors(const char *path, const model_def *d)
{
    size_t cap = 1 << 20, len = 0;
    char *h = malloc(cap);
    if (!h) return -1;
    len += (size_t)snprintf(h + len, cap - len, "{");
    int64_t off = 0;
    for (int i = 0; i < d->n; i++) {
        const spec *s = &d->t[i];
        int64_t bytes = numel(s) * 4;
        if (cap - len < 512) {
            cap *= 2;
            char *g = realloc(h, cap);
            if (!g) {
                free(h);
                return -1;
            }
            h = g;
        }
        len += (size_t)snprintf(h + len, cap - len, "%s\"%s\":{\"dtype\":\"%s\",\"shape\":[", i ? "," : "", s->name,
                                s->is_int ? "I32" : "F32");
        for (int k = 0; k < s->ndim; k++) len += (size_t)snprintf(h + len, cap - len, "%s%lld", k ? "," : "", (long long)s->shape[k]);
        len += (size_t)snprintf(h + len, cap - len, "],\"data_offsets\":[%lld,%lld]}", (long long)off, (long long)(off + bytes));
        off += bytes;
    }
    len += (size_t)snprintf(h + len, cap - len, "}");
    while (len % 8) h[len++] = ' ';
    FILE *f = fopen(path, "wb");
    if (!f) {
        free(h);
        return -1;
    }
    uint64_t hl = len;
    int ok = fwrite(&hl, 8, 1, f) == 1 && fwrite(h, 1, len, f) == len;
    free(h);
    enum { CHUNK = 1 << 20 };
    float *buf = malloc(CHUNK * sizeof(float));
    uint32_t rng = 0x9e3779b9u;
    for (int i = 0; ok && buf && i < d->n; i++) {
        const spec *s = &d->t[i];
        for (int64_t done = 0, n = numel(s); ok && done < n;) {
            int64_t k = n - done < CHUNK ? n - done : CHUNK;
            for (int64_t j = 0; j < k; j++) {
                if (s->is_int) {
                    ((int32_t *)buf)[j] = (int32_t)(((done + j) * 7 + 3 + (done + j) / TOPK) % s->mod);
                } else {
                    rng ^= rng << 13;
                    rng ^= rng >> 17;
                    rng ^= rng << 5;
                    float u = (float)(rng >> 8) / 8388608.0f - 1.0f;
                    buf[j] = s->offset + s->amp * u;
                }
            }
            ok = fwrite(buf, sizeof(float), (size_t)k, f) == (size_t)k;
            done += k;
        }
    }
    free(buf);
    return fclose(f) == 0 && ok && buf ? 0 : -1;
}

/* ---------------------------------------------------------------------------------------- */
/* The four families, after tests/fixtures/<family>/fp32 (tensor names and config keys).      */

static void experts(model_def *d, int L, const char *pre, const char *g, const char *u, const char *dn)
{
    for (int e = 0; e < EXPERTS; e++) {
        LIN(d, EXPERT_WIDTH, HIDDEN, "%s.experts.%d.%s.weight", pre, e, g);
        LIN(d, EXPERT_WIDTH, HIDDEN, "%s.experts.%d.%s.weight", pre, e, u);
        LIN(d, HIDDEN, EXPERT_WIDTH, "%s.experts.%d.%s.weight", pre, e, dn);
    }
    (void)L;
}

static void readout(model_def *d)
{
    add(d, 0.0f, 1.0f, 2, VOCAB, HIDDEN, 0, "model.embed_tokens.weight");
    ONES(d, HIDDEN, "model.norm.weight");
    LIN(d, VOCAB, HIDDEN, "lm_head.weight");
}

static void minimax_m2(model_def *d)
{
    const int Hq = 16, Hkv = 4, D = 64;
    readout(d);
    for (int L = 0; L < LAYERS; L++) {
        char p[96];
        snprintf(p, sizeof p, "model.layers.%d", L);
        ONES(d, HIDDEN, "%s.input_layernorm.weight", p);
        ONES(d, HIDDEN, "%s.post_attention_layernorm.weight", p);
        LIN(d, Hq * D, HIDDEN, "%s.self_attn.q_proj.weight", p);
        LIN(d, Hkv * D, HIDDEN, "%s.self_attn.k_proj.weight", p);
        LIN(d, Hkv * D, HIDDEN, "%s.self_attn.v_proj.weight", p);
        LIN(d, HIDDEN, Hq * D, "%s.self_attn.o_proj.weight", p);
        ONES(d, Hq * D, "%s.self_attn.q_norm.weight", p);
        ONES(d, Hkv * D, "%s.self_attn.k_norm.weight", p);
        LIN(d, EXPERTS, HIDDEN, "%s.block_sparse_moe.gate.weight", p);
        SMALL(d, EXPERTS, 0.01f, "%s.block_sparse_moe.e_score_correction_bias", p);
        char pre[128];
        snprintf(pre, sizeof pre, "%s.block_sparse_moe", p);
        experts(d, L, pre, "w1", "w3", "w2");
    }
    snprintf(d->config, sizeof d->config,
             "{\"architectures\": [\"MiniMaxM2ForCausalLM\"], \"model_type\": \"minimax_m2\", \"hidden_size\": %d, "
             "\"num_hidden_layers\": %d, \"num_attention_heads\": %d, \"num_key_value_heads\": %d, \"head_dim\": %d, "
             "\"intermediate_size\": %d, \"num_local_experts\": %d, \"num_experts_per_tok\": %d, \"vocab_size\": %d, "
             "\"rms_norm_eps\": 1e-06, \"rotary_dim\": 32, \"rope_parameters\": {\"partial_rotary_factor\": 0.5, "
             "\"rope_theta\": 5000000.0, \"rope_type\": \"default\"}, \"hidden_act\": \"silu\", "
             "\"tie_word_embeddings\": false, \"dtype\": \"float32\"}\n",
             HIDDEN, LAYERS, Hq, Hkv, D, EXPERT_WIDTH, EXPERTS, TOPK, VOCAB);
}

static void mimo_v2_flash(model_def *d)
{
    const int Hq = 16, Hkv_full = 2, Hkv_swa = 4, Dqk = 96, Dv = 64;
    const int sliding[LAYERS] = {0, 1, 1, 0}, dense[LAYERS] = {1, 0, 0, 0};
    readout(d);
    for (int L = 0; L < LAYERS; L++) {
        char p[96];
        snprintf(p, sizeof p, "model.layers.%d", L);
        int Hkv = sliding[L] ? Hkv_swa : Hkv_full;
        ONES(d, HIDDEN, "%s.input_layernorm.weight", p);
        ONES(d, HIDDEN, "%s.post_attention_layernorm.weight", p);
        LIN(d, Hq * Dqk, HIDDEN, "%s.self_attn.q_proj.weight", p);
        LIN(d, Hkv * Dqk, HIDDEN, "%s.self_attn.k_proj.weight", p);
        LIN(d, Hkv * Dv, HIDDEN, "%s.self_attn.v_proj.weight", p);
        LIN(d, HIDDEN, Hq * Dv, "%s.self_attn.o_proj.weight", p);
        if (sliding[L]) SMALL(d, Hq, 0.5f, "%s.self_attn.attention_sink_bias", p);
        if (dense[L]) {
            LIN(d, DENSE_WIDTH, HIDDEN, "%s.mlp.gate_proj.weight", p);
            LIN(d, DENSE_WIDTH, HIDDEN, "%s.mlp.up_proj.weight", p);
            LIN(d, HIDDEN, DENSE_WIDTH, "%s.mlp.down_proj.weight", p);
        } else {
            LIN(d, EXPERTS, HIDDEN, "%s.mlp.gate.weight", p);
            SMALL(d, EXPERTS, 0.01f, "%s.mlp.gate.e_score_correction_bias", p);
            char pre[128];
            snprintf(pre, sizeof pre, "%s.mlp", p);
            experts(d, L, pre, "gate_proj", "up_proj", "down_proj");
        }
    }
    snprintf(d->config, sizeof d->config,
             "{\"architectures\": [\"MiMoV2FlashForCausalLM\"], \"model_type\": \"mimo_v2_flash\", \"hidden_size\": %d, "
             "\"num_hidden_layers\": %d, \"num_attention_heads\": %d, \"num_key_value_heads\": %d, "
             "\"swa_num_key_value_heads\": %d, \"head_dim\": %d, \"v_head_dim\": %d, \"intermediate_size\": %d, "
             "\"moe_intermediate_size\": %d, \"n_routed_experts\": %d, \"num_experts_per_tok\": %d, \"n_group\": 4, "
             "\"topk_group\": 2, \"norm_topk_prob\": true, \"routed_scaling_factor\": 2.5, \"vocab_size\": %d, "
             "\"rms_norm_eps\": 1e-05, \"attention_value_scale\": 0.707, \"sliding_window\": 128, "
             "\"layer_types\": [\"full_attention\", \"sliding_attention\", \"sliding_attention\", \"full_attention\"], "
             "\"mlp_layer_types\": [\"dense\", \"sparse\", \"sparse\", \"sparse\"], "
             "\"rope_parameters\": {\"full_attention\": {\"partial_rotary_factor\": 0.334, \"rope_theta\": 5000000.0, "
             "\"rope_type\": \"default\"}, \"sliding_attention\": {\"partial_rotary_factor\": 0.334, \"rope_theta\": "
             "10000.0, \"rope_type\": \"default\"}}, \"hidden_act\": \"silu\", \"tie_word_embeddings\": false, "
             "\"dtype\": \"float32\"}\n",
             HIDDEN, LAYERS, Hq, Hkv_full, Hkv_swa, Dqk, Dv, DENSE_WIDTH, EXPERT_WIDTH, EXPERTS, TOPK, VOCAB);
}

static void kimi_linear(model_def *d)
{
    const int lin_heads = 8, lin_dim = 128, P = lin_heads * lin_dim, W = 4;
    const int heads = 8, nope = 64, rope = 32, vdim = 64, kv_lora = 256;
    const int kda[LAYERS] = {1, 1, 1, 0}, dense[LAYERS] = {1, 0, 0, 0};
    readout(d);
    for (int L = 0; L < LAYERS; L++) {
        char p[96];
        snprintf(p, sizeof p, "model.layers.%d", L);
        ONES(d, HIDDEN, "%s.input_layernorm.weight", p);
        ONES(d, HIDDEN, "%s.post_attention_layernorm.weight", p);
        if (kda[L]) {
            LIN(d, P, HIDDEN, "%s.self_attn.q_proj.weight", p);
            LIN(d, P, HIDDEN, "%s.self_attn.k_proj.weight", p);
            LIN(d, P, HIDDEN, "%s.self_attn.v_proj.weight", p);
            add(d, 0.0f, 0.5f, 3, P, 1, W, "%s.self_attn.q_conv1d.weight", p);
            add(d, 0.0f, 0.5f, 3, P, 1, W, "%s.self_attn.k_conv1d.weight", p);
            add(d, 0.0f, 0.5f, 3, P, 1, W, "%s.self_attn.v_conv1d.weight", p);
            add(d, 1.0f, 1.0f, 3, 1, 1, lin_heads, "%s.self_attn.A_log", p);
            SMALL(d, P, 0.5f, "%s.self_attn.dt_bias", p);
            LIN(d, lin_dim, HIDDEN, "%s.self_attn.f_a_proj.weight", p);
            LIN(d, P, lin_dim, "%s.self_attn.f_b_proj.weight", p);
            LIN(d, lin_heads, HIDDEN, "%s.self_attn.b_proj.weight", p);
            LIN(d, lin_dim, HIDDEN, "%s.self_attn.g_a_proj.weight", p);
            LIN(d, P, lin_dim, "%s.self_attn.g_b_proj.weight", p);
            ONES(d, lin_dim, "%s.self_attn.o_norm.weight", p);
            LIN(d, HIDDEN, P, "%s.self_attn.o_proj.weight", p);
        } else {
            LIN(d, heads * (nope + rope), HIDDEN, "%s.self_attn.q_proj.weight", p);
            LIN(d, kv_lora + rope, HIDDEN, "%s.self_attn.kv_a_proj_with_mqa.weight", p);
            ONES(d, kv_lora, "%s.self_attn.kv_a_layernorm.weight", p);
            LIN(d, heads * (nope + vdim), kv_lora, "%s.self_attn.kv_b_proj.weight", p);
            LIN(d, HIDDEN, heads * vdim, "%s.self_attn.o_proj.weight", p);
        }
        if (dense[L]) {
            LIN(d, DENSE_WIDTH, HIDDEN, "%s.block_sparse_moe.gate_proj.weight", p);
            LIN(d, DENSE_WIDTH, HIDDEN, "%s.block_sparse_moe.up_proj.weight", p);
            LIN(d, HIDDEN, DENSE_WIDTH, "%s.block_sparse_moe.down_proj.weight", p);
        } else {
            LIN(d, EXPERTS, HIDDEN, "%s.block_sparse_moe.gate.weight", p);
            SMALL(d, EXPERTS, 0.01f, "%s.block_sparse_moe.gate.e_score_correction_bias", p);
            char pre[128];
            snprintf(pre, sizeof pre, "%s.block_sparse_moe", p);
            experts(d, L, pre, "w1", "w3", "w2");
            LIN(d, EXPERT_WIDTH, HIDDEN, "%s.block_sparse_moe.shared_experts.gate_proj.weight", p);
            LIN(d, EXPERT_WIDTH, HIDDEN, "%s.block_sparse_moe.shared_experts.up_proj.weight", p);
            LIN(d, HIDDEN, EXPERT_WIDTH, "%s.block_sparse_moe.shared_experts.down_proj.weight", p);
        }
    }
    snprintf(d->config, sizeof d->config,
             "{\"architectures\": [\"KimiLinearForCausalLM\"], \"model_type\": \"kimi_linear\", \"hidden_size\": %d, "
             "\"num_hidden_layers\": %d, \"vocab_size\": %d, \"intermediate_size\": %d, \"moe_intermediate_size\": %d, "
             "\"num_experts\": %d, \"num_experts_per_token\": %d, \"num_shared_experts\": 1, \"num_expert_group\": 1, "
             "\"topk_group\": 1, \"moe_renormalize\": true, \"routed_scaling_factor\": 2.446, \"rms_norm_eps\": 1e-05, "
             "\"linear_num_heads\": %d, \"linear_head_dim\": %d, \"linear_conv_kernel_dim\": %d, "
             "\"num_attention_heads\": %d, \"num_key_value_heads\": %d, \"kv_lora_rank\": %d, \"q_lora_rank\": null, "
             "\"qk_nope_head_dim\": %d, \"qk_rope_head_dim\": %d, \"qk_head_dim\": %d, \"v_head_dim\": %d, "
             "\"layer_types\": [\"linear_attention\", \"linear_attention\", \"linear_attention\", \"full_attention\"], "
             "\"mlp_layer_types\": [\"dense\", \"sparse\", \"sparse\", \"sparse\"], \"hidden_act\": \"silu\", "
             "\"tie_word_embeddings\": false, \"dtype\": \"float32\"}\n",
             HIDDEN, LAYERS, VOCAB, DENSE_WIDTH, EXPERT_WIDTH, EXPERTS, TOPK, lin_heads, lin_dim, W, heads, heads,
             kv_lora, nope, rope, nope + rope, vdim);
}

/* DeepSeek-V4 under the release's native names (no "model." prefix). */
static void deepseek_v4(model_def *d)
{
    const int heads = 16, D = 128, Q = 512, G = 4, OL = 256, n = 4, nI = 16, dI = 64, csa = 4, hca = 32;
    const int kind[LAYERS] = {0, 1, 2, 1}, hash[LAYERS] = {1, 0, 0, 0}; /* 0 sliding, 1 CSA, 2 HCA */
    const int outs = (2 + n) * n;
    add(d, 0.0f, 1.0f, 2, VOCAB, HIDDEN, 0, "embed.weight");
    ONES(d, HIDDEN, "norm.weight");
    LIN(d, VOCAB, HIDDEN, "head.weight");
    add(d, 0.0f, 1.0f / sqrtf((float)(n * HIDDEN)), 2, n, n * HIDDEN, 0, "hc_head_fn");
    SMALL(d, n, 0.1f, "hc_head_base");
    ONES(d, 1, "hc_head_scale");
    for (int L = 0; L < LAYERS; L++) {
        char p[64];
        snprintf(p, sizeof p, "layers.%d", L);
        ONES(d, HIDDEN, "%s.attn_norm.weight", p);
        ONES(d, HIDDEN, "%s.ffn_norm.weight", p);
        LIN(d, Q, HIDDEN, "%s.attn.wq_a.weight", p);
        ONES(d, Q, "%s.attn.q_norm.weight", p);
        LIN(d, heads * D, Q, "%s.attn.wq_b.weight", p);
        LIN(d, D, HIDDEN, "%s.attn.wkv.weight", p);
        ONES(d, D, "%s.attn.kv_norm.weight", p);
        LIN(d, G * OL, heads * D / G, "%s.attn.wo_a.weight", p);
        LIN(d, HIDDEN, G * OL, "%s.attn.wo_b.weight", p);
        SMALL(d, heads, 0.5f, "%s.attn.attn_sink", p);
        const char *hc[2] = {"hc_attn", "hc_ffn"};
        for (int k = 0; k < 2; k++) {
            add(d, 0.0f, 1.0f / sqrtf((float)(n * HIDDEN)), 2, outs, n * HIDDEN, 0, "%s.%s_fn", p, hc[k]);
            SMALL(d, outs, 0.1f, "%s.%s_base", p, hc[k]);
            add(d, 1.0f, 0.0f, 1, 3, 0, 0, "%s.%s_scale", p, hc[k]);
        }
        if (kind[L] != 0) { /* the compressor: overlapping windows on CSA blocks */
            int coff = kind[L] == 1 ? 2 : 1, rate = kind[L] == 1 ? csa : hca;
            LIN(d, coff * D, HIDDEN, "%s.attn.compressor.wkv.weight", p);
            LIN(d, coff * D, HIDDEN, "%s.attn.compressor.wgate.weight", p);
            ONES(d, D, "%s.attn.compressor.norm.weight", p);
            add(d, 0.0f, 0.1f, 2, rate, coff * D, 0, "%s.attn.compressor.ape", p);
        }
        if (kind[L] == 1) { /* the lightning indexer */
            LIN(d, 2 * dI, HIDDEN, "%s.attn.indexer.compressor.wkv.weight", p);
            LIN(d, 2 * dI, HIDDEN, "%s.attn.indexer.compressor.wgate.weight", p);
            ONES(d, dI, "%s.attn.indexer.compressor.norm.weight", p);
            add(d, 0.0f, 0.1f, 2, csa, 2 * dI, 0, "%s.attn.indexer.compressor.ape", p);
            LIN(d, nI * dI, Q, "%s.attn.indexer.wq_b.weight", p);
            LIN(d, nI, HIDDEN, "%s.attn.indexer.weights_proj.weight", p);
        }
        LIN(d, EXPERTS, HIDDEN, "%s.ffn.gate.weight", p);
        if (hash[L]) {
            add(d, 0.0f, 0.0f, 2, VOCAB, TOPK, 0, "%s.ffn.gate.tid2eid", p);
            d->t[d->n - 1].is_int = 1;
            d->t[d->n - 1].mod = EXPERTS;
        } else {
            SMALL(d, EXPERTS, 0.01f, "%s.ffn.gate.bias", p);
        }
        char pre[96];
        snprintf(pre, sizeof pre, "%s.ffn", p);
        experts(d, L, pre, "w1", "w3", "w2");
        LIN(d, EXPERT_WIDTH, HIDDEN, "%s.ffn.shared_experts.w1.weight", p);
        LIN(d, EXPERT_WIDTH, HIDDEN, "%s.ffn.shared_experts.w3.weight", p);
        LIN(d, HIDDEN, EXPERT_WIDTH, "%s.ffn.shared_experts.w2.weight", p);
    }
    snprintf(d->config, sizeof d->config,
             "{\"architectures\": [\"DeepseekV4ForCausalLM\"], \"model_type\": \"deepseek_v4\", \"hidden_size\": %d, "
             "\"num_hidden_layers\": %d, \"vocab_size\": %d, \"num_attention_heads\": %d, \"num_key_value_heads\": 1, "
             "\"head_dim\": %d, \"partial_rotary_factor\": 0.25, \"q_lora_rank\": %d, \"o_groups\": %d, "
             "\"o_lora_rank\": %d, \"sliding_window\": 128, \"hc_mult\": %d, \"hc_sinkhorn_iters\": 20, "
             "\"hc_eps\": 1e-06, \"rms_norm_eps\": 1e-06, \"n_routed_experts\": %d, \"num_experts_per_tok\": %d, "
             "\"n_shared_experts\": 1, \"moe_intermediate_size\": %d, \"index_n_heads\": %d, \"index_head_dim\": %d, "
             "\"index_topk\": 128, \"routed_scaling_factor\": 1.5, \"swiglu_limit\": 10.0, \"scoring_func\": "
             "\"sqrtsoftplus\", \"norm_topk_prob\": true, \"rope_theta\": 10000, \"compress_rope_theta\": 160000, "
             "\"compress_rates\": {\"compressed_sparse_attention\": %d, \"heavily_compressed_attention\": %d}, "
             "\"layer_types\": [\"sliding_attention\", \"compressed_sparse_attention\", "
             "\"heavily_compressed_attention\", \"compressed_sparse_attention\"], "
             "\"mlp_layer_types\": [\"hash_moe\", \"moe\", \"moe\", \"moe\"], \"hidden_act\": \"silu\", "
             "\"tie_word_embeddings\": false, \"dtype\": \"float32\"}\n",
             HIDDEN, LAYERS, VOCAB, heads, D, Q, G, OL, n, EXPERTS, TOPK, EXPERT_WIDTH, nI, dI, csa, hca);
}

typedef struct family {
    const char *name;
    void (*build)(model_def *d);
} family;

static const family FAMILIES[] = {
    {.name = "minimax_m2", .build = minimax_m2},
    {.name = "mimo_v2_flash", .build = mimo_v2_flash},
    {.name = "kimi_linear", .build = kimi_linear},
    {.name = "deepseek_v4", .build = deepseek_v4},
};
#define N_FAMILIES ((int)(sizeof FAMILIES / sizeof FAMILIES[0]))

static int write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    if (!f) return -1;
    int ok = fputs(text, f) >= 0;
    return fclose(f) == 0 && ok ? 0 : -1;
}

/* Writes DIR/<family>/{config.json, model.safetensors}; returns the bytes of weights or -1. */
static int64_t make_checkpoint(const family *fam, const char *dir, char *model_dir, size_t n)
{
    model_def d = {0};
    fam->build(&d);
    snprintf(model_dir, n, "%s/%s", dir, fam->name);
    mkdir(model_dir, 0755);
    char path[1200];
    snprintf(path, sizeof path, "%s/config.json", model_dir);
    int64_t bytes = 0;
    for (int i = 0; i < d.n; i++) bytes += numel(&d.t[i]) * 4;
    int rc = write_file(path, d.config);
    snprintf(path, sizeof path, "%s/model.safetensors", model_dir);
    if (rc == 0) rc = write_safetensors(path, &d);
    free(d.t);
    return rc == 0 ? bytes : -1;
}

static void remove_checkpoint(const char *model_dir)
{
    char path[1200];
    snprintf(path, sizeof path, "%s/config.json", model_dir);
    unlink(path);
    snprintf(path, sizeof path, "%s/model.safetensors", model_dir);
    unlink(path);
    rmdir(model_dir);
}

/* ---------------------------------------------------------------------------------------- */
/* Measurements.                                                                             */

enum { PREFILL, SINGLE, DECODE, N_METRICS };
static const char *const METRIC_NAMES[N_METRICS] = {"prefill (batch 1 x T tokens)", "no-cache single-token forward",
                                                    "decode (session, cached)"};

typedef struct result {
    double tps[N_METRICS]; /* tokens per second; < 0: not measured (see why) */
    char why[N_METRICS][160];
} result;

static void not_measured(result *r, int metric, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    for (int k = metric < 0 ? 0 : metric; k < (metric < 0 ? N_METRICS : metric + 1); k++) {
        va_list aq;
        va_copy(aq, ap);
        r->tps[k] = -1;
        vsnprintf(r->why[k], sizeof r->why[k], fmt, aq);
        va_end(aq);
    }
    va_end(ap);
}

/* The part of a runtime error worth a table cell: from "no CUDA device" on when present. */
static const char *short_reason(const char *msg)
{
    const char *p = strstr(msg, "no CUDA device");
    return p ? p : msg;
}

static void measure(nnt_runtime *rt, const char *model_dir, int T, int steps, int repeats, result *r)
{
    nnt_model *m = NULL;
    if (nnt_model_load(rt, model_dir, &m) != NNT_OK) {
        not_measured(r, -1, "load failed: %s", short_reason(nnt_last_error(rt)));
        return;
    }
    int vocab = nnt_model_get_info(m)->vocab_size;
    int32_t *ids = malloc((size_t)(T + steps + 1) * sizeof *ids);
    uint32_t seed = 12345u;
    for (int i = 0; i < T + steps + 1; i++) {
        seed = seed * 1664525u + 1013904223u;
        ids[i] = 1 + (int32_t)((seed >> 8) % (uint32_t)(vocab - 1));
    }
    nnt_trace *t = NULL;
    if (nnt_trace_new(m, &t) != NNT_OK || nnt_trace_save(t, "next_token_probs") != NNT_OK) {
        not_measured(r, -1, "trace: %s", nnt_last_error(rt));
        goto done;
    }
    /* prefill: a warm-up, then the best of `repeats` */
    double best = INFINITY;
    for (int rep = 0; rep <= repeats; rep++) {
        double t0 = now();
        if (nnt_trace_run(t, ids, NULL, 1, T) != NNT_OK) {
            not_measured(r, PREFILL, "forward failed: %s", nnt_last_error(rt));
            break;
        }
        double dt = now() - t0;
        if (rep > 0 && dt < best) best = dt;
    }
    if (!r->why[PREFILL][0]) r->tps[PREFILL] = T / best;
    /* one-token forwards, no cache */
    if (nnt_trace_run(t, ids, NULL, 1, 1) == NNT_OK) {
        double t0 = now();
        int ok = 1;
        for (int i = 0; i < steps && ok; i++) ok = nnt_trace_run(t, ids + 1 + i, NULL, 1, 1) == NNT_OK;
        if (ok) r->tps[SINGLE] = steps / (now() - t0);
        else not_measured(r, SINGLE, "forward failed: %s", nnt_last_error(rt));
    } else {
        not_measured(r, SINGLE, "forward failed: %s", nnt_last_error(rt));
    }
    /* decode with the family's caches: the prompt (not timed), then `steps` tokens */
    nnt_session *s = NULL;
    if (nnt_session_new(m, 1, T + steps + 1, &s) != NNT_OK) {
        not_measured(r, DECODE, "%s", nnt_last_error(rt));
    } else if (nnt_session_forward(s, NULL, ids, NULL, T) != NNT_OK) {
        not_measured(r, DECODE, "prompt failed: %s", nnt_last_error(rt));
    } else {
        double t0 = now();
        int ok = 1;
        for (int i = 0; i < steps && ok; i++) ok = nnt_session_forward(s, t, ids + T + i, NULL, 1) == NNT_OK;
        if (ok) r->tps[DECODE] = steps / (now() - t0);
        else not_measured(r, DECODE, "step failed: %s", nnt_last_error(rt));
    }
    nnt_session_free(s);
done:
    nnt_trace_free(t);
    free(ids);
    nnt_model_free(m);
}

/* ---------------------------------------------------------------------------------------- */

static void usage(void)
{
    fprintf(stderr, "usage: nnt_bench_backends [--tokens N] [--steps N] [--repeats N] [--threads N] "
                    "[--families a,b,...] [--keep]\n");
    exit(2);
}

static int wanted(const char *list, const char *name)
{
    if (!list) return 1;
    size_t n = strlen(name);
    for (const char *p = list; (p = strstr(p, name)); p += n)
        if ((p == list || p[-1] == ',') && (p[n] == ',' || p[n] == '\0')) return 1;
    return 0;
}

static void cell(char *buf, size_t n, const result *r, int k)
{
    if (r->tps[k] >= 0)
        snprintf(buf, n, "%.1f", r->tps[k]);
    else
        snprintf(buf, n, "n/a");
}

int main(int argc, char **argv)
{
    int T = 512, steps = 16, repeats = 3, keep = 0;
    long threads = sysconf(_SC_NPROCESSORS_ONLN);
    const char *families = NULL;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--keep") == 0) keep = 1;
        else if (i + 1 >= argc) usage();
        else if (strcmp(argv[i], "--tokens") == 0) T = atoi(argv[++i]);
        else if (strcmp(argv[i], "--steps") == 0) steps = atoi(argv[++i]);
        else if (strcmp(argv[i], "--repeats") == 0) repeats = atoi(argv[++i]);
        else if (strcmp(argv[i], "--threads") == 0) threads = atol(argv[++i]);
        else if (strcmp(argv[i], "--families") == 0) families = argv[++i];
        else usage();
    }
    if (T < 1 || steps < 1 || repeats < 1 || threads < 1) usage();
    const char *tmp = getenv("TMPDIR");
    char dir[512];
    snprintf(dir, sizeof dir, "%s/nnt-bench-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(dir)) {
        fprintf(stderr, "cannot make a directory under %s: %s\n", tmp && *tmp ? tmp : "/tmp", strerror(errno));
        return 1;
    }
    /* two configurations over the build tree's plugins: every family on cpu, every one on cuda */
    char cpu_ini[600], gpu_ini[600], text[4096];
    snprintf(cpu_ini, sizeof cpu_ini, "%s/cpu.ini", dir);
    snprintf(gpu_ini, sizeof gpu_ini, "%s/cuda.ini", dir);
    snprintf(text, sizeof text, "[plugins]\ndir = %s/families\ndir = %s/kernels\n\n[backend.cpu]\nthreads = %ld\n",
             NNT_BENCH_BUILD_DIR, NNT_BENCH_BUILD_DIR, threads);
    if (write_file(cpu_ini, text) != 0) return 1;
    size_t k = (size_t)snprintf(text, sizeof text, "[plugins]\ndir = %s/families\ndir = %s/kernels\ndir = %s/kernels/cuda\n",
                                NNT_BENCH_BUILD_DIR, NNT_BENCH_BUILD_DIR, NNT_BENCH_BUILD_DIR);
    for (int f = 0; f < N_FAMILIES; f++)
        k += (size_t)snprintf(text + k, sizeof text - k, "\n[family.%s]\nbackend = cuda\n", FAMILIES[f].name);
    snprintf(text + k, sizeof text - k, "\n[backend.cuda]\ndevice = 0\n");
    if (write_file(gpu_ini, text) != 0) return 1;

    nnt_runtime *rc = NULL, *rg = NULL;
    if (nnt_runtime_open(cpu_ini, &rc) != NNT_OK) {
        fprintf(stderr, "cpu runtime: %s\n", nnt_last_error(rc));
        return 1;
    }
    char gpu_reason[400] = "";
    if (nnt_runtime_open(gpu_ini, &rg) != NNT_OK) {
        snprintf(gpu_reason, sizeof gpu_reason, "%s", short_reason(nnt_last_error(rg)));
        nnt_runtime_close(rg);
        rg = NULL;
    }
    printf("nnt backend benchmark: cpu (%ld threads) against cuda%s%s\n", threads, rg ? "" : ": n/a, ",
           rg ? "" : gpu_reason);
    printf("synthetic F32 checkpoints: hidden %d, %d blocks, %d routed experts (top-%d) of width %d, vocab %d\n", HIDDEN,
           LAYERS, EXPERTS, TOPK, EXPERT_WIDTH, VOCAB);
    printf("prefill: batch 1 x %d tokens, best of %d after a warm-up; single-token forwards without a cache and "
           "cached session decode: %d tokens each\n",
           T, repeats, steps);
    printf("throughput in tokens/s; ratio = cuda / cpu from this run\n\n");
    fflush(stdout);

    result res[N_FAMILIES][2];
    int ran[N_FAMILIES] = {0};
    memset(res, 0, sizeof res);
    for (int f = 0; f < N_FAMILIES; f++) {
        if (!wanted(families, FAMILIES[f].name)) continue;
        ran[f] = 1;
        char model_dir[800];
        double t0 = now();
        int64_t bytes = make_checkpoint(&FAMILIES[f], dir, model_dir, sizeof model_dir);
        if (bytes < 0) {
            not_measured(&res[f][0], -1, "could not write the checkpoint");
            not_measured(&res[f][1], -1, "could not write the checkpoint");
            continue;
        }
        fprintf(stderr, "%s: wrote %.0f MiB of weights in %.1f s\n", FAMILIES[f].name, bytes / 1048576.0, now() - t0);
        t0 = now();
        measure(rc, model_dir, T, steps, repeats, &res[f][0]);
        fprintf(stderr, "%s: cpu measured in %.1f s\n", FAMILIES[f].name, now() - t0);
        if (rg) {
            t0 = now();
            measure(rg, model_dir, T, steps, repeats, &res[f][1]);
            fprintf(stderr, "%s: cuda measured in %.1f s\n", FAMILIES[f].name, now() - t0);
        } else {
            not_measured(&res[f][1], -1, "%s", gpu_reason);
        }
        if (!keep) remove_checkpoint(model_dir);
    }
    printf("%-14s %-31s %16s %16s %9s\n", "family", "metric", "cpu tok/s", "cuda tok/s", "cuda/cpu");
    for (int f = 0; f < N_FAMILIES; f++) {
        if (!ran[f]) continue;
        for (int m = 0; m < N_METRICS; m++) {
            char a[200], b[200], ratio[32] = "-";
            cell(a, sizeof a, &res[f][0], m);
            cell(b, sizeof b, &res[f][1], m);
            if (res[f][0].tps[m] > 0 && res[f][1].tps[m] > 0)
                snprintf(ratio, sizeof ratio, "%.2fx", res[f][1].tps[m] / res[f][0].tps[m]);
            printf("%-14s %-31s %16s %16s %9s\n", m == 0 ? FAMILIES[f].name : "", METRIC_NAMES[m], a, b, ratio);
        }
    }
    printf("\n(no-cache single-token forward: each token is a fresh one-token call without generation state;\n"
           " decode (session, cached): nnt_session_forward one token at a time after the prompt.)\n");
    int notes = 0;
    for (int f = 0; f < N_FAMILIES; f++)
        for (int b = 0; b < 2; b++) {
            const result *r = &res[f][b];
            int same_why = 1;
            for (int m = 1; m < N_METRICS; m++)
                same_why &= r->tps[m] < 0 && r->tps[0] < 0 && strcmp(r->why[m], r->why[0]) == 0;
            for (int m = 0; m < N_METRICS; m++) {
                if (!ran[f] || r->tps[m] >= 0 || (same_why && m > 0)) continue;
                if (!notes++) printf("\nnot measured:\n");
                printf("  %s on %s%s%s: %s\n", FAMILIES[f].name, b ? "cuda" : "cpu", same_why ? "" : ", ",
                       same_why ? "" : METRIC_NAMES[m], r->why[m]);
            }
        }
    nnt_runtime_close(rg);
    nnt_runtime_close(rc);
    if (!keep) {
        unlink(cpu_ini);
        unlink(gpu_ini);
        rmdir(dir);
    } else {
        printf("checkpoints kept in %s\n", dir);
    }
    return 0;
}
