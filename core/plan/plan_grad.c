/* plan_grad.c - `nnt plan --grad`: what a backward of a context's tokens holds, from config.json's
 * dimensions alone (grad_memory.h's estimate): the kept activations in keep-everything mode and in
 * per-block recomputation, the gradient memory, the mode a trace would choose under the bound,
 * and the peaks against the forward's. See nnt.h, "pipeline plans". */
#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "grad/grad_memory.h"

/* The largest of config.json's integer keys (NULL-terminated list) at the top level; 0: none. */
static int64_t cfg_max(const cJSON *root, const char *const *keys)
{
    int64_t v = 0;
    for (; *keys; keys++) {
        const cJSON *x = cJSON_GetObjectItemCaseSensitive(root, *keys);
        if (cJSON_IsNumber(x) && x->valuedouble > (double)v) v = (int64_t)x->valuedouble;
    }
    return v;
}

static nnt_status dims_from_config(const char *dir, nnt_grad_dims *d, nnt_error *err)
{
    char *path = nnt_path_join(dir, "config.json"), *text = NULL;
    if (!path) return nnt_err_set(err, NNT_ERR_OUT_OF_MEMORY, "no memory");
    nnt_status st = nnt_read_file(path, (size_t)16 << 20, &text, NULL, err);
    cJSON *root = st == NNT_OK ? cJSON_Parse(text) : NULL;
    if (st == NNT_OK && !cJSON_IsObject(root)) st = nnt_err_set(err, NNT_ERR_CONFIG, "%s: not a JSON object", path);
#define KEYS(...) ((const char *const[]){__VA_ARGS__, NULL})
    if (st == NNT_OK) {
        *d = (nnt_grad_dims){
            .layers = cfg_max(root, KEYS("num_hidden_layers")),
            .hidden = cfg_max(root, KEYS("hidden_size")),
            .streams = cfg_max(root, KEYS("hc_mult")),
            .heads = cfg_max(root, KEYS("num_attention_heads", "swa_num_attention_heads")),
            .kv_heads = cfg_max(root, KEYS("num_key_value_heads", "swa_num_key_value_heads")),
            .qk_head_dim = cfg_max(root, KEYS("head_dim", "swa_head_dim", "qk_head_dim")),
            .head_dim = cfg_max(root, KEYS("v_head_dim", "swa_v_head_dim", "head_dim")),
            .intermediate = cfg_max(root, KEYS("intermediate_size", "moe_intermediate_size", "shared_intermediate_size")),
            .experts = cfg_max(root, KEYS("n_routed_experts", "num_local_experts", "num_experts")),
            .top_k = cfg_max(root, KEYS("num_experts_per_tok")),
            .vocab = cfg_max(root, KEYS("vocab_size")),
        };
        if (!d->qk_head_dim && d->heads) d->qk_head_dim = d->hidden / d->heads;
        if (!d->head_dim) d->head_dim = d->qk_head_dim;
        if (d->layers < 1 || d->hidden < 1)
            st = nnt_err_set(err, NNT_ERR_CONFIG, "%s: needs num_hidden_layers and hidden_size (positive)", path);
    }
#undef KEYS
    cJSON_Delete(root);
    free(text);
    free(path);
    return st;
}

static const char *gbs(uint64_t v, char *buf, size_t n)
{
    snprintf(buf, n, "%.2f GB (%llu bytes)", (double)v / 1e9, (unsigned long long)v);
    return buf;
}

nnt_status nnt_plan_grad_print(const char *dir, const nnt_plan_opts *o, FILE *out, nnt_error *err)
{
    if (!dir || !o || !out || o->batch < 1 || o->context < 1)
        return nnt_err_set(err, NNT_ERR_INVALID_ARGUMENT, "plan --grad: needs a folder, batch >= 1 and context >= 1");
    nnt_grad_dims d;
    nnt_status st = dims_from_config(dir, &d, err);
    if (st != NNT_OK) return st;
    nnt_grad_memory g;
    nnt_grad_memory_estimate(&d, o->batch, o->context, &g);
    const nnt_ini *ini = o->runtime ? o->runtime->ini : NULL;
    uint64_t bound = o->memory_bytes ? o->memory_bytes
                     : ini && ini->grad_memory_gb > 0 ? (uint64_t)(ini->grad_memory_gb * 1e9)
                                                      : nnt_grad_default_bound();
    const char *from = o->memory_bytes ? "--memory"
                       : ini && ini->grad_memory_gb > 0 ? "[grad] memory_gb"
                                                        : "half of MemAvailable, [grad] memory_gb unset";
    int forced = ini ? ini->grad_mode : 0;
    const char *mode = forced == 1 ? "keep everything ([grad] mode = keep)"
                       : forced == 2 ? (g.recompute <= bound ? "recompute ([grad] mode = recompute)"
                                                             : "refused: recomputation exceeds the bound")
                       : g.keep_all <= bound ? "keep everything"
                       : g.recompute <= bound ? "recompute block by block"
                                              : "refused: even recomputation exceeds the bound";
    char a[64], b[64], c[64];
    fprintf(out, "grad: a backward of %lld row(s) x %lld tokens, float32, %lld blocks (%s)\n", (long long)o->batch,
            (long long)o->context, (long long)d.layers, dir);
    fprintf(out, "keep everything: %s kept (%s a block, %s the readout)\n", gbs(g.keep_all, a, sizeof a),
            gbs(g.block_keep, b, sizeof b), gbs(g.readout_keep, c, sizeof c));
    fprintf(out, "recompute: %s held (%lld block inputs of %s, one block's record and the readout's)\n",
            gbs(g.recompute, a, sizeof a), (long long)d.layers, gbs(g.stream, b, sizeof b));
    fprintf(out, "gradient memory: %s during the reverse pass (either mode)\n", gbs(g.gradient_keep, a, sizeof a));
    fprintf(out, "bound: %s (%s): %s\n", gbs(bound, a, sizeof a), from, mode);
    double f = g.forward ? (double)g.forward : 1.0;
    fprintf(out, "peak: the forward's activations %s; keep everything %.1fx that, recompute %.1fx\n",
            gbs(g.forward, a, sizeof a), (double)(g.keep_all + g.gradient_keep + g.forward) / f,
            (double)(g.recompute + g.gradient_recompute + g.forward) / f);
    fprintf(out, "(upper bounds from config.json's dimensions: docs/gradients.md, \"Memory\")\n");
    return NNT_OK;
}
