/* plan.c - pipeline plans: which contiguous blocks each rank holds and what it costs in bytes
 * (weights in their stored encoding, caches for a context), from config.json and the safetensors
 * headers alone, or from config.json's dimensions when the shards are absent. The split itself
 * (nnt_plan_split) takes any per-block costs, so distributed runs reuse it. See nnt.h. */
#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "internal.h"

#define MAX_PLAN_BLOCKS 65536

struct nnt_plan {
    char *architecture;
    int n_blocks, ranks, exact, n_files;
    int has_index;            /* model.safetensors.index.json present (its shards may not be) */
    uint64_t *weight, *cache; /* [n_blocks] */
    uint64_t first_bytes, last_bytes, unused_bytes, index_total, memory, largest;
    int *first_block;         /* [ranks + 1] */
    nnt_plan_opts opts;
};

/* ---- the split ---- */

/* Greedy from the last block: each stage takes as many blocks as fit under cap. Returns the
 * number of stages (bounds written to starts[], from the last stage back, when not NULL), or
 * -1 when one block alone exceeds cap. Packing from the right leaves the shortest possible
 * prefix for the stage holding block 0, so no split uses fewer stages under cap. */
static int pack_right(const uint64_t *b, int n, uint64_t first, uint64_t last, uint64_t cap, int *starts)
{
    int count = 0, i = n - 1;
    while (i >= 0) {
        uint64_t cost = count == 0 ? last : 0;
        int taken = 0;
        while (i >= 0) {
            uint64_t add = b[i] + (i == 0 ? first : 0);
            if (cost + add > cap) break;
            cost += add;
            i--;
            taken++;
        }
        if (!taken) return -1;
        if (starts) starts[count] = i + 1;
        count++;
    }
    return count;
}

static uint64_t stage_cost(const uint64_t *b, int n, uint64_t first, uint64_t last, int lo, int hi)
{
    uint64_t c = 0;
    for (int i = lo; i < hi; i++) c += b[i];
    if (lo == 0) c += first;
    if (hi == n) c += last;
    return c;
}

nnt_status nnt_plan_split(const uint64_t *block_bytes, int n_blocks, uint64_t first_extra, uint64_t last_extra,
                          int ranks, int *first_block, uint64_t *largest)
{
    if (!block_bytes || !first_block || n_blocks < 1 || ranks < 1 || ranks > n_blocks) return NNT_ERR_INVALID_ARGUMENT;
    uint64_t lo = 0, hi = first_extra + last_extra;
    for (int i = 0; i < n_blocks; i++) hi += block_bytes[i];
    /* the smallest cap under which at most `ranks` stages cover every block */
    while (lo < hi) {
        uint64_t mid = lo + (hi - lo) / 2;
        int k = pack_right(block_bytes, n_blocks, first_extra, last_extra, mid, NULL);
        if (k > 0 && k <= ranks)
            hi = mid;
        else
            lo = mid + 1;
    }
    /* Among the splits whose stages all cost at most that cap, the most even one: the least
     * sum of squared stage costs, by dynamic programming over (stages, blocks) when that is
     * small enough; else the packing below, split further where stages are missing. */
    if ((double)ranks * n_blocks * n_blocks <= 2e8) {
        size_t cells = (size_t)(ranks + 1) * (size_t)(n_blocks + 1);
        long double *f = malloc(cells * sizeof *f);
        int *from = malloc(cells * sizeof *from);
        uint64_t *prefix = malloc((size_t)(n_blocks + 1) * sizeof *prefix);
        if (!f || !from || !prefix) {
            free(f);
            free(from);
            free(prefix);
            return NNT_ERR_OUT_OF_MEMORY;
        }
        prefix[0] = 0;
        for (int i = 0; i < n_blocks; i++) prefix[i + 1] = prefix[i] + block_bytes[i];
#define AT(r, j) ((size_t)(r) * (size_t)(n_blocks + 1) + (size_t)(j))
        for (size_t c = 0; c < cells; c++) f[c] = -1; /* unreachable */
        f[AT(0, 0)] = 0;
        for (int r = 1; r <= ranks; r++)
            for (int j = r; j <= n_blocks - (ranks - r); j++)
                for (int i = j - 1; i >= r - 1; i--) {
                    uint64_t c = prefix[j] - prefix[i] + (i == 0 ? first_extra : 0) + (j == n_blocks ? last_extra : 0);
                    if (c > lo) break; /* longer stages only cost more */
                    if (f[AT(r - 1, i)] < 0) continue;
                    long double v = f[AT(r - 1, i)] + (long double)c * (long double)c;
                    if (f[AT(r, j)] < 0 || v < f[AT(r, j)]) {
                        f[AT(r, j)] = v;
                        from[AT(r, j)] = i;
                    }
                }
        int ok = f[AT(ranks, n_blocks)] >= 0;
        if (ok) {
            first_block[ranks] = n_blocks;
            for (int r = ranks; r > 0; r--) first_block[r - 1] = from[AT(r, first_block[r])];
        }
#undef AT
        free(f);
        free(from);
        free(prefix);
        if (ok) goto done;
    }
    int *starts = malloc((size_t)n_blocks * sizeof *starts);
    if (!starts) return NNT_ERR_OUT_OF_MEMORY;
    int k = pack_right(block_bytes, n_blocks, first_extra, last_extra, lo, starts);
    /* ascending bounds */
    first_block[0] = 0;
    for (int s = 0; s < k; s++) first_block[s] = starts[k - 1 - s];
    first_block[k] = n_blocks;
    free(starts);
    /* fewer stages than ranks: split the costliest stage of two or more blocks where its halves
     * are most even (neither half costs more than the whole, so the largest stage stays) */
    while (k < ranks) {
        int best = -1;
        uint64_t best_cost = 0;
        for (int s = 0; s < k; s++) {
            if (first_block[s + 1] - first_block[s] < 2) continue;
            uint64_t c = stage_cost(block_bytes, n_blocks, first_extra, last_extra, first_block[s], first_block[s + 1]);
            if (best < 0 || c > best_cost) best = s, best_cost = c;
        }
        int lo_b = first_block[best], hi_b = first_block[best + 1], cut = lo_b + 1;
        uint64_t best_max = UINT64_MAX;
        for (int c = lo_b + 1; c < hi_b; c++) {
            uint64_t a = stage_cost(block_bytes, n_blocks, first_extra, last_extra, lo_b, c);
            uint64_t z = stage_cost(block_bytes, n_blocks, first_extra, last_extra, c, hi_b);
            uint64_t m = a > z ? a : z;
            if (m < best_max) best_max = m, cut = c;
        }
        memmove(first_block + best + 2, first_block + best + 1, (size_t)(k - best) * sizeof *first_block);
        first_block[best + 1] = cut;
        k++;
    }
done:
    if (largest) {
        uint64_t m = 0;
        for (int s = 0; s < ranks; s++) {
            uint64_t c = stage_cost(block_bytes, n_blocks, first_extra, last_extra, first_block[s], first_block[s + 1]);
            if (c > m) m = c;
        }
        *largest = m;
    }
    return NNT_OK;
}

/* ---- block membership from tensor names ---- */

/* The block a tensor belongs to: the number after a "layers" name segment; -1 outside the
 * blocks; -2 for a tensor nnt does not load (a segment starting "mtp": multi-token prediction). */
static long long block_of(const char *name)
{
    for (const char *p = name; *p;) {
        const char *seg = p;
        const char *dot = strchr(p, '.');
        size_t len = dot ? (size_t)(dot - p) : strlen(p);
        if (len >= 3 && strncmp(seg, "mtp", 3) == 0) return -2;
        p = dot ? dot + 1 : p + len;
        if (!dot) break;
    }
    for (const char *p = name; (p = strstr(p, "layers.")) != NULL; p += 7) {
        if (p != name && p[-1] != '.') continue;
        const char *d = p + 7;
        if (*d < '0' || *d > '9') continue;
        long long v = 0;
        for (; *d >= '0' && *d <= '9'; d++) v = v < 100000000 ? v * 10 + (*d - '0') : v;
        if (*d == '.' || *d == '\0') return v;
    }
    return -1;
}

static int is_embedding(const char *name)
{
    return strstr(name, "embed") != NULL;
}

/* ---- weights from the headers ---- */

static nnt_status weights_from_headers(nnt_plan *p, const char *dir, nnt_error *err)
{
    nnt_checkpoint *ck = NULL;
    nnt_status st = nnt_checkpoint_open(dir, &ck, err);
    if (st != NNT_OK) return st;
    for (int f = 0; f < ck->n_files; f++)
        for (int i = 0; i < ck->files[f]->n_entries; i++) {
            const nnt_st_entry *e = &ck->files[f]->entries[i];
            uint64_t bytes = e->end - e->begin;
            long long b = block_of(e->name);
            if (b >= p->n_blocks || b == -2)
                p->unused_bytes += bytes;
            else if (b >= 0)
                p->weight[b] += bytes;
            else if (is_embedding(e->name))
                p->first_bytes += bytes;
            else
                p->last_bytes += bytes;
        }
    p->n_files = ck->n_files;
    p->exact = 1;
    nnt_checkpoint_close(ck);
    return NNT_OK;
}

/* ---- weights and caches from config.json ---- */

typedef struct est {
    const nnt_checkpoint *ck;
    nnt_error *err;
    nnt_status st;
    int fp8;                  /* quantization_config.quant_method "fp8" */
    int64_t bs0, bs1;         /* its weight_block_size */
    int scale_bytes;          /* 4 (float32), 1 (ue8m0) */
    int fp4_experts;          /* expert_dtype "fp4" */
    int act;                  /* bytes of an unquantised element: 2 (bf16), 4 (float32) */
    int64_t B, T;
} est;

static int64_t gi(est *e, const char *key, int64_t dflt, int required)
{
    int64_t v = dflt;
    if (e->st != NNT_OK) return dflt;
    if (nnt_cfg_is_null(e->ck, key)) return dflt;
    e->st = nnt_cfg_int(e->ck, key, dflt, required, &v, e->err);
    if (e->st == NNT_OK && (v < 0 || v > ((int64_t)1 << 40))) {
        e->st = nnt_err_set(e->err, NNT_ERR_CONFIG, "%s: field '%s' is %lld; expected a count from 0 to 2^40",
                            nnt_cfg_path(e->ck), key, (long long)v);
        v = dflt;
    }
    return v;
}

static int64_t cdiv(int64_t a, int64_t b)
{
    return (a + b - 1) / b;
}

/* A matrix [out, in] stored quantised when the checkpoint is (FP8 with block scales). */
static uint64_t lin(const est *e, int64_t out, int64_t in)
{
    if (e->fp8) return (uint64_t)(out * in) + (uint64_t)(cdiv(out, e->bs0) * cdiv(in, e->bs1) * e->scale_bytes);
    return (uint64_t)(out * in * e->act);
}

/* A routed expert's matrix: FP4 (half a byte, an E8M0 scale per 32 inputs) or as lin. */
static uint64_t xlin(const est *e, int64_t out, int64_t in)
{
    if (e->fp4_experts) return (uint64_t)(out * in / 2) + (uint64_t)(out * cdiv(in, 32));
    return lin(e, out, in);
}

static uint64_t plain(const est *e, int64_t n)
{
    return (uint64_t)(n * e->act);
}

static uint64_t f32(int64_t n)
{
    return (uint64_t)n * 4;
}

static nnt_status read_encoding(est *e)
{
    const char *s = NULL;
    const nnt_checkpoint *ck = e->ck;
    e->act = 2;
    const char *dkey = nnt_cfg_has(ck, "dtype") ? "dtype" : "torch_dtype";
    if (nnt_cfg_has(ck, dkey) && nnt_cfg_string(ck, dkey, "bfloat16", 0, &s, e->err) == NNT_OK && strcmp(s, "float32") == 0)
        e->act = 4;
    e->bs0 = e->bs1 = 128;
    e->scale_bytes = 4;
    if (nnt_cfg_has(ck, "quantization_config.quant_method")) {
        e->st = nnt_cfg_string(ck, "quantization_config.quant_method", "", 0, &s, e->err);
        if (e->st != NNT_OK) return e->st;
        if (strcmp(s, "fp8") != 0)
            return nnt_err_set(e->err, NNT_ERR_UNSUPPORTED,
                               "%s: quantization_config.quant_method is '%s'; nnt plans 'fp8' (or no quantization)",
                               nnt_cfg_path(ck), s);
        e->fp8 = 1;
        if (nnt_cfg_has(ck, "quantization_config.weight_block_size")) {
            int64_t v[2];
            int n = 0;
            e->st = nnt_cfg_int_list(ck, "quantization_config.weight_block_size", NULL, 0, v, 2, &n, e->err);
            if (e->st != NNT_OK) return e->st;
            if (n != 2 || v[0] < 1 || v[1] < 1)
                return nnt_err_set(e->err, NNT_ERR_CONFIG,
                                   "%s: quantization_config.weight_block_size must be two positive numbers",
                                   nnt_cfg_path(ck));
            e->bs0 = v[0];
            e->bs1 = v[1];
        }
        if (nnt_cfg_has(ck, "quantization_config.scale_fmt") &&
            nnt_cfg_string(ck, "quantization_config.scale_fmt", "", 0, &s, e->err) == NNT_OK && strcmp(s, "ue8m0") == 0)
            e->scale_bytes = 1;
    }
    if (nnt_cfg_has(ck, "expert_dtype") && nnt_cfg_string(ck, "expert_dtype", "", 0, &s, e->err) == NNT_OK &&
        strcmp(s, "fp4") == 0)
        e->fp4_experts = 1;
    return NNT_OK;
}

/* Experts of a mixture: n routed experts of width I, each gate, up [I, D] and down [D, I]. */
static uint64_t experts(const est *e, int64_t n, int64_t I, int64_t D)
{
    return (uint64_t)n * (2 * xlin(e, I, D) + xlin(e, D, I));
}

/* A gated MLP of width I, stored like attention (dense MLP, shared expert). */
static uint64_t mlp(const est *e, int64_t I, int64_t D)
{
    return 2 * lin(e, I, D) + lin(e, D, I);
}

/* A float32 key/value cache: rows x kv heads x (dk + dv) x keep tokens. */
static uint64_t kv_cache(const est *e, int64_t heads, int64_t dk, int64_t dv, int64_t keep)
{
    return (uint64_t)(e->B * heads * (dk + dv) * keep) * 4;
}

static nnt_status plan_minimax(nnt_plan *p, est *e)
{
    int64_t D = gi(e, "hidden_size", 0, 1), H = gi(e, "num_attention_heads", 0, 1);
    int64_t KV = gi(e, "num_key_value_heads", H, 0), hd = gi(e, "head_dim", H ? D / H : 0, 0);
    int64_t E = gi(e, "num_local_experts", 0, 1), I = gi(e, "intermediate_size", 0, 1);
    if (e->st != NNT_OK) return e->st;
    for (int l = 0; l < p->n_blocks; l++) {
        uint64_t w = 2 * lin(e, H * hd, D) + 2 * lin(e, KV * hd, D) + plain(e, H * hd + KV * hd) + plain(e, 2 * D);
        w += f32(E * D) + f32(E) + experts(e, E, I, D); /* router, its bias, experts */
        p->weight[l] = w;
        p->cache[l] = kv_cache(e, KV, hd, hd, e->T);
    }
    return NNT_OK;
}

/* A per-block list (names or numbers) under key1, else key2: *found 0 when neither is present. */
static nnt_status read_kinds(est *e, const char *key1, const char *key2, const char *const *names, int n_names,
                             int64_t *v, int n, int *found)
{
    const char *key = nnt_cfg_has(e->ck, key1) ? key1 : key2 && nnt_cfg_has(e->ck, key2) ? key2 : NULL;
    *found = 0;
    if (!key) return NNT_OK;
    int got = 0;
    nnt_status st = nnt_cfg_int_list(e->ck, key, names, n_names, v, MAX_PLAN_BLOCKS, &got, e->err);
    if (st != NNT_OK) return st;
    if (got < n)
        return nnt_err_set(e->err, NNT_ERR_CONFIG, "%s: '%s' has %d entries for %d blocks", nnt_cfg_path(e->ck), key, got,
                           n);
    *found = 1;
    return NNT_OK;
}

static nnt_status plan_mimo(nnt_plan *p, est *e)
{
    static const char *const kind_names[] = {"full_attention", "sliding_attention"};
    static const char *const mlp_names[] = {"dense", "sparse"};
    int64_t D = gi(e, "hidden_size", 0, 1), H[2], KV[2], dk[2], dv[2];
    H[0] = gi(e, "num_attention_heads", 0, 1);
    KV[0] = gi(e, "num_key_value_heads", 0, 1);
    H[1] = gi(e, "swa_num_attention_heads", H[0], 0);
    KV[1] = gi(e, "swa_num_key_value_heads", 2 * KV[0], 0);
    dk[0] = gi(e, "head_dim", 192, 0);
    dv[0] = gi(e, "v_head_dim", 128, 0);
    dk[1] = gi(e, "swa_head_dim", dk[0], 0);
    dv[1] = gi(e, "swa_v_head_dim", dv[0], 0);
    int64_t I = gi(e, "intermediate_size", 0, 1), MI = gi(e, "moe_intermediate_size", 0, 1);
    int64_t E = gi(e, nnt_cfg_has(e->ck, "n_routed_experts") ? "n_routed_experts" : "num_local_experts", 0, 1);
    int64_t window = nnt_cfg_has(e->ck, "sliding_window_size") ? gi(e, "sliding_window_size", 0, 1) + 1
                                                                : gi(e, "sliding_window", 129, 0);
    int sinks[2] = {0, 1};
    if (e->st != NNT_OK) return e->st;
    if (nnt_cfg_has(e->ck, "add_full_attention_sink_bias"))
        (void)nnt_cfg_bool(e->ck, "add_full_attention_sink_bias", 0, 0, &sinks[0], e->err);
    if (nnt_cfg_has(e->ck, "add_swa_attention_sink_bias"))
        (void)nnt_cfg_bool(e->ck, "add_swa_attention_sink_bias", 1, 0, &sinks[1], e->err);
    int64_t *kinds = calloc((size_t)MAX_PLAN_BLOCKS * 2, sizeof *kinds), *mlps = kinds + MAX_PLAN_BLOCKS;
    if (!kinds) return nnt_err_set(e->err, NNT_ERR_OUT_OF_MEMORY, "no memory");
    int has_kinds = 0, has_mlps = 0;
    nnt_status st = read_kinds(e, "layer_types", "hybrid_layer_pattern", kind_names, 2, kinds, p->n_blocks, &has_kinds);
    if (st == NNT_OK) st = read_kinds(e, "mlp_layer_types", "moe_layer_freq", mlp_names, 2, mlps, p->n_blocks, &has_mlps);
    for (int l = 0; l < p->n_blocks && st == NNT_OK; l++) {
        /* the family's defaults: full attention at block 0 and every 6th, dense MLP at block 0 */
        int k = has_kinds ? kinds[l] != 0 : !(l == 0 || (l + 1) % 6 == 0);
        int moe = has_mlps ? mlps[l] != 0 : l != 0;
        uint64_t w = lin(e, H[k] * dk[k], D) + lin(e, KV[k] * dk[k], D) + lin(e, KV[k] * dv[k], D) +
                     plain(e, D * H[k] * dv[k]) + plain(e, 2 * D) + (sinks[k] ? plain(e, H[k]) : 0); /* o_proj stays BF16 */
        w += moe ? f32(E * D) + f32(E) + experts(e, E, MI, D) : mlp(e, I, D);
        p->weight[l] = w;
        p->cache[l] = kv_cache(e, KV[k], dk[k], dv[k], k ? (window > 1 ? window - 1 : 1) : e->T);
    }
    free(kinds);
    return st;
}

/* The first of two keys present (else the first). */
static const char *key_of(const est *e, const char *a, const char *b)
{
    return nnt_cfg_has(e->ck, a) ? a : b;
}

static nnt_status plan_kimi(nnt_plan *p, est *e)
{
    static const char *const kind_names[] = {"linear_attention", "full_attention"};
    static const char *const mlp_names[] = {"dense", "sparse"};
    int64_t D = gi(e, "hidden_size", 0, 1), H = gi(e, "num_attention_heads", 0, 1);
    int64_t nope = gi(e, "qk_nope_head_dim", 0, 1), rope = gi(e, "qk_rope_head_dim", 0, 1), vd = gi(e, "v_head_dim", 0, 1);
    int64_t kvl = gi(e, "kv_lora_rank", 0, 1), ql = gi(e, "q_lora_rank", 0, 0);
    int64_t LH = gi(e, key_of(e, "linear_attn_config.num_heads", "linear_num_heads"), 0, 1);
    int64_t LD = gi(e, key_of(e, "linear_attn_config.head_dim", "linear_head_dim"), 0, 1);
    int64_t K = gi(e, key_of(e, "linear_attn_config.short_conv_kernel_size", "linear_conv_kernel_dim"), 4, 0);
    int64_t I = gi(e, "intermediate_size", 0, 1), MI = gi(e, "moe_intermediate_size", 0, 1);
    int64_t E = gi(e, key_of(e, "num_experts", "n_routed_experts"), 0, 1), dense = gi(e, "first_k_dense_replace", 1, 0);
    int64_t freq = gi(e, "moe_layer_freq", 1, 0);
    int64_t NS = gi(e, key_of(e, "num_shared_experts", "n_shared_experts"), 1, 0);
    if (e->st != NNT_OK) return e->st;
    int64_t *kinds = calloc((size_t)MAX_PLAN_BLOCKS * 2, sizeof *kinds), *mlps = kinds + MAX_PLAN_BLOCKS;
    if (!kinds) return nnt_err_set(e->err, NNT_ERR_OUT_OF_MEMORY, "no memory");
    int has_kinds = 0, has_mlps = 0, n = 0;
    nnt_status st = read_kinds(e, "layer_types", NULL, kind_names, 2, kinds, p->n_blocks, &has_kinds);
    if (st == NNT_OK && !has_kinds) {
        /* the release's list counts blocks from 1; without it, transformers' default schedule */
        for (int l = 0; l < p->n_blocks; l++) kinds[l] = l && l % 4 == 0;
        if (nnt_cfg_has(e->ck, "linear_attn_config.full_attn_layers")) {
            int64_t *full = mlps; /* scratch until the MLP kinds are read */
            st = nnt_cfg_int_list(e->ck, "linear_attn_config.full_attn_layers", NULL, 0, full, MAX_PLAN_BLOCKS, &n, e->err);
            for (int l = 0; l < p->n_blocks; l++) kinds[l] = 0;
            for (int i = 0; i < n && st == NNT_OK; i++) {
                if (full[i] < 1 || full[i] > p->n_blocks)
                    st = nnt_err_set(e->err, NNT_ERR_CONFIG, "%s: linear_attn_config.full_attn_layers holds %lld; the list "
                                     "counts blocks from 1 to %d", nnt_cfg_path(e->ck), (long long)full[i], p->n_blocks);
                else
                    kinds[full[i] - 1] = 1;
            }
        }
    }
    if (st == NNT_OK) st = read_kinds(e, "mlp_layer_types", NULL, mlp_names, 2, mlps, p->n_blocks, &has_mlps);
    int64_t P = LH * LD;
    for (int l = 0; l < p->n_blocks && st == NNT_OK; l++) {
        int mla = kinds[l] != 0;
        int moe = has_mlps ? mlps[l] != 0 : l >= dense && l % (freq > 0 ? freq : 1) == 0;
        uint64_t w = plain(e, 2 * D), c;
        if (mla) {
            int64_t qd = H * (nope + rope);
            w += (ql ? lin(e, ql, D) + plain(e, ql) + lin(e, qd, ql) : lin(e, qd, D)) + lin(e, kvl + rope, D) +
                 plain(e, kvl) + lin(e, H * (nope + vd), kvl) + lin(e, D, H * vd);
            c = kv_cache(e, H, nope + rope, vd, e->T);
        } else {
            w += 3 * lin(e, P, D) + lin(e, D, P) + lin(e, LH, D) + 2 * (lin(e, LD, D) + lin(e, P, LD)) +
                 plain(e, 3 * P * K) + plain(e, LH) + plain(e, P) + plain(e, LD);
            c = (uint64_t)(e->B * (3 * (K > 1 ? K - 1 : 1) * P + LH * LD * LD)) * 4;
        }
        w += moe ? plain(e, E * D) + f32(E) + experts(e, E, MI, D) + (NS ? mlp(e, MI * NS, D) : 0) : mlp(e, I, D);
        p->weight[l] = w;
        p->cache[l] = c;
    }
    free(kinds);
    return st;
}

static nnt_status plan_deepseek_v4(nnt_plan *p, est *e)
{
    int64_t D = gi(e, "hidden_size", 0, 1), H = gi(e, "num_attention_heads", 0, 1), hd = gi(e, "head_dim", 512, 0);
    int64_t QL = gi(e, "q_lora_rank", 1024, 0), G = gi(e, "o_groups", 8, 0), OL = gi(e, "o_lora_rank", 1024, 0);
    int64_t window = gi(e, "sliding_window", 128, 0), IH = gi(e, "index_n_heads", 64, 0), ID = gi(e, "index_head_dim", 128, 0);
    int64_t n = gi(e, "hc_mult", 4, 0), E = gi(e, "n_routed_experts", 0, 1), MI = gi(e, "moe_intermediate_size", 0, 1);
    int64_t NS = gi(e, "n_shared_experts", 1, 0), hash = gi(e, "num_hash_layers", 3, 0);
    int64_t V = gi(e, "vocab_size", 0, 1), topk = gi(e, "num_experts_per_tok", 0, 1);
    if (e->st != NNT_OK) return e->st;
    if (G < 1 || H % G)
        return nnt_err_set(e->err, NNT_ERR_CONFIG, "%s: o_groups (%lld) must divide num_attention_heads (%lld)",
                           nnt_cfg_path(e->ck), (long long)G, (long long)H);
    static const char *const kind_names[] = {"sliding_attention", "compressed_sparse_attention",
                                             "heavily_compressed_attention"};
    static const char *const mlp_names[] = {"hash_moe", "moe"};
    int64_t csa = gi(e, key_of(e, "compress_rates.compressed_sparse_attention", "compress_rate_csa"), 4, 0);
    int64_t hca = gi(e, key_of(e, "compress_rates.heavily_compressed_attention", "compress_rate_hca"), 128, 0);
    if (e->st != NNT_OK) return e->st;
    int64_t *rate = calloc((size_t)MAX_PLAN_BLOCKS * 2 + 1, sizeof *rate), *mlps = rate + MAX_PLAN_BLOCKS + 1;
    if (!rate) return nnt_err_set(e->err, NNT_ERR_OUT_OF_MEMORY, "no memory");
    int got = 0, has_kinds = 0, has_mlps = 0;
    nnt_status st = read_kinds(e, "layer_types", NULL, kind_names, 3, rate, p->n_blocks, &has_kinds);
    if (st == NNT_OK && has_kinds) {
        for (int l = 0; l < p->n_blocks; l++) rate[l] = rate[l] == 0 ? 0 : rate[l] == 1 ? csa : hca;
    } else if (st == NNT_OK && nnt_cfg_has(e->ck, "compress_ratios")) {
        /* entries past num_hidden_layers belong to multi-token-prediction blocks */
        st = nnt_cfg_int_list(e->ck, "compress_ratios", NULL, 0, rate, MAX_PLAN_BLOCKS + 1, &got, e->err);
        if (st == NNT_OK && got < p->n_blocks)
            st = nnt_err_set(e->err, NNT_ERR_CONFIG, "%s: 'compress_ratios' has %d entries for %d blocks",
                             nnt_cfg_path(e->ck), got, p->n_blocks);
    } else if (st == NNT_OK) {
        for (int l = 0; l < p->n_blocks; l++) rate[l] = l < 2 ? hca : l % 2 ? csa : hca; /* transformers' default */
    }
    if (st == NNT_OK) st = read_kinds(e, "mlp_layer_types", NULL, mlp_names, 2, mlps, p->n_blocks, &has_mlps);
    int64_t mix = (2 + n) * n; /* a hyper-connection's mixing rows */
    for (int l = 0; l < p->n_blocks && st == NNT_OK; l++) {
        int64_t r = rate[l];
        uint64_t w = lin(e, QL, D) + plain(e, QL) + lin(e, H * hd, QL) + lin(e, hd, D) + plain(e, hd) +
                     lin(e, G * OL, H * hd / G) + lin(e, D, G * OL) + f32(H) + plain(e, 2 * D);
        w += 2 * (f32(mix * n * D) + f32(mix) + f32(3));
        uint64_t c = kv_cache(e, 1, hd, hd, window > 1 ? window - 1 : 1);
        if (r < 0 || r > ((int64_t)1 << 20)) {
            st = nnt_err_set(e->err, NNT_ERR_CONFIG, "%s: block %d's compress rate is %lld; expected 0 to 2^20",
                             nnt_cfg_path(e->ck), l, (long long)r);
            break;
        }
        if (r > 0) { /* compressed sparse blocks overlap their windows and have the indexer */
            int64_t coff = r == csa ? 2 : 1;
            w += f32(r * coff * hd) + 2 * plain(e, coff * hd * D) + plain(e, hd);
            c += 2 * (uint64_t)(e->B * e->T * coff * hd) * 4;
            if (r == csa) { /* the lightning indexer and its own compressor */
                w += f32(r * 2 * ID) + 2 * plain(e, 2 * ID * D) + plain(e, ID) + plain(e, IH * D) + lin(e, IH * ID, QL);
                c += 2 * (uint64_t)(e->B * e->T * 2 * ID) * 4;
            }
        }
        int hashed = has_mlps ? mlps[l] == 0 : l < hash;
        w += plain(e, E * D) + (hashed ? (uint64_t)(V * topk) * 8 : f32(E)) + experts(e, E, MI, D) +
             (NS ? mlp(e, MI * NS, D) : 0);
        p->weight[l] = w;
        p->cache[l] = c;
    }
    free(rate);
    return st;
}

typedef struct family_plan {
    const char *architecture;
    nnt_status (*blocks)(nnt_plan *p, est *e);
    int hc;                   /* DeepSeek-V4's hyper-connection head (hc_head_*) on the last stage */
} family_plan;

static const family_plan FAMILIES[] = {
    {.architecture = "MiniMaxM2ForCausalLM", .blocks = plan_minimax},
    {.architecture = "MiMoV2FlashForCausalLM", .blocks = plan_mimo},
    {.architecture = "MiMoV2ForCausalLM", .blocks = plan_mimo}, /* V2.5/V2.6-Flash: fused qkv_proj, same sizes */
    {.architecture = "KimiLinearForCausalLM", .blocks = plan_kimi},
    {.architecture = "DeepseekV4ForCausalLM", .blocks = plan_deepseek_v4, .hc = 1},
};

/* ---- the plan ---- */

static uint64_t physical_memory(void)
{
    long pages = sysconf(_SC_PHYS_PAGES), size = sysconf(_SC_PAGE_SIZE);
    return pages > 0 && size > 0 ? (uint64_t)pages * (uint64_t)size : 0;
}

/* Whether every shard model.safetensors.index.json names is present; *total gets its
 * metadata.total_size (0 when absent). */
static nnt_status index_shards(const char *dir, const char *index, int *all_present, uint64_t *total, nnt_error *err)
{
    char *text = NULL;
    *all_present = 1;
    *total = 0;
    nnt_status st = nnt_read_file(index, (size_t)256 << 20, &text, NULL, err);
    if (st != NNT_OK) return st;
    cJSON *root = cJSON_Parse(text);
    free(text);
    if (!root) return nnt_err_set(err, NNT_ERR_FORMAT, "%s: malformed JSON", index);
    const cJSON *map = cJSON_GetObjectItemCaseSensitive(root, "weight_map");
    const cJSON *ts = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(root, "metadata"), "total_size");
    if (cJSON_IsNumber(ts) && ts->valuedouble >= 0) *total = (uint64_t)ts->valuedouble;
    if (!cJSON_IsObject(map)) {
        cJSON_Delete(root);
        return nnt_err_set(err, NNT_ERR_FORMAT, "%s: expected an object field 'weight_map'", index);
    }
    for (const cJSON *e = map->child; e && *all_present; e = e->next) {
        if (!cJSON_IsString(e) || strchr(e->valuestring, '/')) {
            cJSON_Delete(root);
            return nnt_err_set(err, NNT_ERR_FORMAT, "%s: weight_map['%s'] is not a file name in the directory", index,
                               e->string);
        }
        char *file = nnt_path_join(dir, e->valuestring);
        if (!file || !nnt_file_exists(file)) *all_present = 0;
        free(file);
    }
    cJSON_Delete(root);
    return NNT_OK;
}

static nnt_status plan_build(nnt_plan *p, const char *dir, const nnt_plan_opts *o, nnt_error *err)
{
    nnt_checkpoint cfg = {0}; /* config.json only, for the cfg_* readers */
    cfg.dir = (char *)dir;
    cfg.config_path = nnt_path_join(dir, "config.json");
    if (!cfg.config_path) return nnt_err_set(err, NNT_ERR_OUT_OF_MEMORY, "no memory");
    nnt_status st = nnt_json_load(cfg.config_path, &cfg.config, err);
    const family_plan *fam = NULL;
    int64_t layers = 0;
    if (st == NNT_OK) {
        const char *const *arch = nnt_cfg_architectures(&cfg);
        if (!arch || !arch[0])
            st = nnt_err_set(err, NNT_ERR_CONFIG, "%s: expected a non-empty list 'architectures'", cfg.config_path);
        for (size_t i = 0; st == NNT_OK && !fam && i < sizeof FAMILIES / sizeof *FAMILIES; i++)
            if (strcmp(arch[0], FAMILIES[i].architecture) == 0) fam = &FAMILIES[i];
        if (st == NNT_OK && !fam)
            st = nnt_err_set(err, NNT_ERR_UNSUPPORTED,
                             "%s: architectures[0] is '%s'; nnt plans MiniMaxM2ForCausalLM, MiMoV2FlashForCausalLM, MiMoV2ForCausalLM, "
                             "KimiLinearForCausalLM and DeepseekV4ForCausalLM",
                             cfg.config_path, arch[0]);
        if (st == NNT_OK) p->architecture = nnt_strdup(arch[0]);
    }
    if (st == NNT_OK) st = nnt_cfg_int(&cfg, "num_hidden_layers", 0, 1, &layers, err);
    if (st == NNT_OK && (layers < 1 || layers > MAX_PLAN_BLOCKS))
        st = nnt_err_set(err, NNT_ERR_CONFIG, "%s: num_hidden_layers is %lld; expected 1 to %d", cfg.config_path,
                         (long long)layers, MAX_PLAN_BLOCKS);
    if (st == NNT_OK && o->ranks > layers)
        st = nnt_err_set(err, NNT_ERR_INVALID_ARGUMENT,
                         "%d ranks for %lld blocks (%s: num_hidden_layers): every rank needs at least one block",
                         o->ranks, (long long)layers, cfg.config_path);
    if (st == NNT_OK) {
        p->n_blocks = (int)layers;
        p->weight = calloc((size_t)layers, sizeof *p->weight);
        p->cache = calloc((size_t)layers, sizeof *p->cache);
        p->first_block = calloc((size_t)o->ranks + 1, sizeof *p->first_block);
        if (!p->weight || !p->cache || !p->first_block) st = nnt_err_set(err, NNT_ERR_OUT_OF_MEMORY, "no memory");
    }
    /* the blocks' sizes and caches from config.json (weights replaced by the headers' below) */
    est e = {.ck = &cfg, .err = err, .st = NNT_OK, .B = o->batch, .T = o->context};
    if (st == NNT_OK) st = read_encoding(&e);
    if (st == NNT_OK) st = fam->blocks(p, &e);
    if (st == NNT_OK) {
        int64_t D = gi(&e, "hidden_size", 0, 1), V = gi(&e, "vocab_size", 0, 1);
        int tied = 0;
        if (nnt_cfg_has(&cfg, "tie_word_embeddings")) (void)nnt_cfg_bool(&cfg, "tie_word_embeddings", 0, 0, &tied, err);
        st = e.st;
        p->first_bytes = plain(&e, V * D);
        p->last_bytes = plain(&e, D) + (tied ? 0 : plain(&e, V * D));
        if (fam->hc) {
            int64_t n = gi(&e, "hc_mult", 4, 0);
            p->last_bytes += f32(n * n * D) + f32(n) + f32(1);
        }
    }
    if (st == NNT_OK && !o->from_config) {
        char *index = nnt_path_join(dir, "model.safetensors.index.json");
        char *single = nnt_path_join(dir, "model.safetensors");
        int headers = 0;
        if (!index || !single)
            st = nnt_err_set(err, NNT_ERR_OUT_OF_MEMORY, "no memory");
        else if ((p->has_index = nnt_file_exists(index)) != 0)
            st = index_shards(dir, index, &headers, &p->index_total, err);
        else
            headers = nnt_file_exists(single);
        if (st == NNT_OK && headers) {
            memset(p->weight, 0, (size_t)p->n_blocks * sizeof *p->weight);
            p->first_bytes = p->last_bytes = 0;
            st = weights_from_headers(p, dir, err);
        }
        free(index);
        free(single);
    }
    nnt_json_free(cfg.config);
    free(cfg.config_path);
    return st;
}

nnt_status nnt_plan_new(const char *dir, const nnt_plan_opts *opts, nnt_plan **out, nnt_error *err)
{
    nnt_error local;
    if (!err) err = &local;
    nnt_err_clear(err);
    if (out) *out = NULL;
    if (!dir || !opts || !out) return nnt_err_set(err, NNT_ERR_INVALID_ARGUMENT, "nnt_plan_new: NULL argument");
    if (opts->ranks < 1) return nnt_err_set(err, NNT_ERR_INVALID_ARGUMENT, "ranks is %d; expected 1 or more", opts->ranks);
    if (opts->batch < 1 || opts->batch > ((int64_t)1 << 30))
        return nnt_err_set(err, NNT_ERR_INVALID_ARGUMENT, "batch is %lld; expected 1 to 2^30", (long long)opts->batch);
    if (opts->context < 0 || opts->context > ((int64_t)1 << 30))
        return nnt_err_set(err, NNT_ERR_INVALID_ARGUMENT, "context is %lld; expected 0 to 2^30 tokens",
                           (long long)opts->context);
    nnt_plan *p = calloc(1, sizeof *p);
    if (!p) return nnt_err_set(err, NNT_ERR_OUT_OF_MEMORY, "no memory");
    p->opts = *opts;
    p->ranks = opts->ranks;
    nnt_status st = plan_build(p, dir, opts, err);
    if (st == NNT_OK) {
        st = nnt_plan_split(p->weight, p->n_blocks, p->first_bytes, p->last_bytes, p->ranks, p->first_block, &p->largest);
        if (st != NNT_OK) nnt_err_set(err, st, "cannot split %d blocks over %d ranks", p->n_blocks, p->ranks);
    }
    if (st != NNT_OK) {
        nnt_plan_free(p);
        return st;
    }
    p->memory = opts->memory_bytes ? opts->memory_bytes
                                   : opts->device == NNT_PLAN_CUDA ? (uint64_t)141000000000ULL : physical_memory();
    *out = p;
    return NNT_OK;
}

void nnt_plan_free(nnt_plan *p)
{
    if (!p) return;
    free(p->architecture);
    free(p->weight);
    free(p->cache);
    free(p->first_block);
    free(p);
}

int nnt_plan_get_stage(const nnt_plan *p, int r, nnt_plan_stage *out)
{
    if (!p || !out || r < 0 || r >= p->ranks) return 0;
    memset(out, 0, sizeof *out);
    out->first_block = p->first_block[r];
    out->n_blocks = p->first_block[r + 1] - p->first_block[r];
    for (int b = p->first_block[r]; b < p->first_block[r + 1]; b++) {
        out->weight_bytes += p->weight[b];
        out->cache_bytes += p->cache[b];
    }
    if (r == 0) out->weight_bytes += p->first_bytes;
    if (r == p->ranks - 1) out->weight_bytes += p->last_bytes;
    out->fits = out->weight_bytes + out->cache_bytes <= p->memory;
    return 1;
}

void nnt_plan_get_summary(const nnt_plan *p, nnt_plan_summary *out)
{
    if (!out) return;
    memset(out, 0, sizeof *out);
    if (!p) return;
    out->architecture = p->architecture;
    out->n_blocks = p->n_blocks;
    out->ranks = p->ranks;
    out->exact = p->exact;
    out->n_files = p->n_files;
    out->first_bytes = p->first_bytes;
    out->last_bytes = p->last_bytes;
    out->unused_bytes = p->unused_bytes;
    out->index_total_bytes = p->index_total;
    out->memory_bytes = p->memory;
    out->largest_stage = p->largest;
    out->all_fit = 1;
    nnt_plan_stage s;
    for (int r = 0; nnt_plan_get_stage(p, r, &s); r++) out->all_fit &= s.fits;
}

int nnt_plan_block(const nnt_plan *p, int b, uint64_t *weight_bytes, uint64_t *cache_bytes)
{
    if (!p || b < 0 || b >= p->n_blocks) return 0;
    if (weight_bytes) *weight_bytes = p->weight[b];
    if (cache_bytes) *cache_bytes = p->cache[b];
    return 1;
}

/* Decimal units: GB, MB, kB (1e9, 1e6, 1e3 bytes), two decimals; plain bytes below 1 kB. */
static const char *gb(uint64_t v, char *buf, size_t n)
{
    if (v >= 1000000000ULL)
        snprintf(buf, n, "%.2f GB", (double)v / 1e9);
    else if (v >= 1000000ULL)
        snprintf(buf, n, "%.2f MB", (double)v / 1e6);
    else if (v >= 1000ULL)
        snprintf(buf, n, "%.2f kB", (double)v / 1e3);
    else
        snprintf(buf, n, "%llu B", (unsigned long long)v);
    return buf;
}

nnt_status nnt_plan_print(const nnt_plan *p, const char *dir, FILE *out)
{
    if (!p || !out) return NNT_ERR_INVALID_ARGUMENT;
    nnt_plan_summary s;
    nnt_plan_get_summary(p, &s);
    char a[32], b[32], c[32];
    uint64_t total = s.first_bytes + s.last_bytes, caches = 0;
    for (int i = 0; i < p->n_blocks; i++) total += p->weight[i], caches += p->cache[i];
    fprintf(out, "plan: %s (%s), %d blocks over %d rank%s on %s, %s per rank\n", dir ? dir : "", s.architecture,
            s.n_blocks, s.ranks, s.ranks == 1 ? "" : "s", p->opts.device == NNT_PLAN_CUDA ? "cuda" : "cpu",
            gb(s.memory_bytes, a, sizeof a));
    if (s.exact)
        fprintf(out, "weights: exact, from the safetensors headers (%d file%s): %s", s.n_files, s.n_files == 1 ? "" : "s",
                gb(total, a, sizeof a));
    else
        fprintf(out, "weights: computed from config.json's dimensions and quantization (%s): %s",
                p->opts.from_config ? "as asked"
                : p->has_index      ? "the index's shards are not all present"
                                    : "no safetensors present",
                gb(total, a, sizeof a));
    if (s.unused_bytes) fprintf(out, ", plus %s nnt does not load (multi-token prediction)", gb(s.unused_bytes, b, sizeof b));
    if (s.index_total_bytes) fprintf(out, "; the index's total_size: %s", gb(s.index_total_bytes, c, sizeof c));
    fputc('\n', out);
    fprintf(out, "caches: %lld token%s x %lld row%s, float32: %s in all\n", (long long)p->opts.context,
            p->opts.context == 1 ? "" : "s", (long long)p->opts.batch, p->opts.batch == 1 ? "" : "s",
            gb(caches, a, sizeof a));
    fprintf(out, "rank 0 holds the embedding (%s); rank %d the final norm and lm_head (%s)\n",
            gb(s.first_bytes, a, sizeof a), s.ranks - 1, gb(s.last_bytes, b, sizeof b));
    fprintf(out, "%-5s %-9s %14s %14s %14s  %s\n", "rank", "blocks", "weights", "caches", "total", "fits");
    nnt_plan_stage st;
    for (int r = 0; nnt_plan_get_stage(p, r, &st); r++) {
        char blocks[32], t[32];
        snprintf(blocks, sizeof blocks, "%d-%d", st.first_block, st.first_block + st.n_blocks - 1);
        fprintf(out, "%-5d %-9s %14s %14s %14s  %s\n", r, blocks, gb(st.weight_bytes, a, sizeof a),
                gb(st.cache_bytes, b, sizeof b), gb(st.weight_bytes + st.cache_bytes, t, sizeof t),
                st.fits ? "yes" : "NO");
    }
    fprintf(out, "%s\n", s.all_fit ? "every rank fits" : "some ranks do not fit: more ranks, more memory, or a shorter context");
    return NNT_OK;
}
