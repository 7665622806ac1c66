/* fam_costs.c - the family kit's byte model for a family's `costs` entry (nnt_cost_args, ABI
 * 3.4): the stored encoding config.json gives, and the bytes of matrices, experts, MLPs,
 * attention projections, key/value caches and the readout in that encoding. */
#include <string.h>

#include <nnt/nnt_family_kit.h>

static int64_t ceil_div(int64_t a, int64_t b)
{
    return (a + b - 1) / b;
}

/* dtype (or torch_dtype): 4 bytes an unquantised element for "float32", else 2 (bfloat16). */
static nnt_status read_elem_bytes(const nnt_core_api *h, const nnt_checkpoint *ck, fam_encoding *out, nnt_error *err)
{
    const char *key = h->cfg_has(ck, "dtype") ? "dtype" : "torch_dtype", *s = NULL;
    out->elem_bytes = 2;
    if (!h->cfg_has(ck, key)) return NNT_OK;
    nnt_status st = h->cfg_string(ck, key, "bfloat16", 0, &s, err);
    if (st == NNT_OK && strcmp(s, "float32") == 0) out->elem_bytes = 4;
    return st;
}

static nnt_status read_quantization(const nnt_core_api *h, const nnt_checkpoint *ck, fam_encoding *out, nnt_error *err)
{
    const char *s = NULL;
    if (!h->cfg_has(ck, "quantization_config.quant_method")) return NNT_OK;
    nnt_status st = h->cfg_string(ck, "quantization_config.quant_method", "", 1, &s, err);
    if (st != NNT_OK) return st;
    if (strcmp(s, "fp8") != 0)
        return h->set_error(err, NNT_ERR_UNSUPPORTED,
                            "%s: quantization_config.quant_method is '%s'; nnt plans 'fp8' (or no quantization)",
                            h->cfg_path(ck), s);
    out->fp8 = 1;
    if (h->cfg_has(ck, "quantization_config.weight_block_size")) {
        int64_t v[2];
        int n = 0;
        st = h->cfg_int_list(ck, "quantization_config.weight_block_size", NULL, 0, v, 2, &n, err);
        if (st != NNT_OK) return st;
        if (n != 2 || v[0] < 1 || v[1] < 1)
            return h->set_error(err, NNT_ERR_CONFIG, "%s: quantization_config.weight_block_size must be two positive numbers",
                                h->cfg_path(ck));
        out->block_rows = v[0];
        out->block_cols = v[1];
    }
    if (h->cfg_has(ck, "quantization_config.scale_fmt")) {
        st = h->cfg_string(ck, "quantization_config.scale_fmt", "", 1, &s, err);
        if (st != NNT_OK) return st;
        if (strcmp(s, "ue8m0") == 0) out->scale_bytes = 1;
    }
    return NNT_OK;
}

nnt_status fam_cost_encoding(const nnt_cost_args *args, fam_encoding *out, nnt_error *err)
{
    const nnt_core_api *h = args->core;
    const nnt_checkpoint *ck = args->ckpt;
    memset(out, 0, sizeof *out);
    out->block_rows = out->block_cols = 128;
    out->scale_bytes = 4;
    nnt_status st = read_elem_bytes(h, ck, out, err);
    if (st == NNT_OK) st = read_quantization(h, ck, out, err);
    if (st == NNT_OK && h->cfg_has(ck, "expert_dtype")) {
        const char *s = NULL;
        st = h->cfg_string(ck, "expert_dtype", "", 1, &s, err);
        if (st == NNT_OK && strcmp(s, "fp4") == 0) out->fp4_experts = 1;
    }
    return st;
}

uint64_t fam_cost_matrix(const fam_encoding *e, int64_t rows, int64_t cols)
{
    if (e->fp8)
        return (uint64_t)(rows * cols) +
               (uint64_t)(ceil_div(rows, e->block_rows) * ceil_div(cols, e->block_cols) * e->scale_bytes);
    return (uint64_t)(rows * cols * e->elem_bytes);
}

uint64_t fam_cost_expert_matrix(const fam_encoding *e, int64_t rows, int64_t cols)
{
    if (e->fp4_experts) return (uint64_t)(rows * cols / 2) + (uint64_t)(rows * ceil_div(cols, 32));
    return fam_cost_matrix(e, rows, cols);
}

uint64_t fam_cost_vector(const fam_encoding *e, int64_t n)
{
    return (uint64_t)(n * e->elem_bytes);
}

uint64_t fam_cost_f32(int64_t n)
{
    return (uint64_t)n * 4;
}

uint64_t fam_cost_experts(const fam_encoding *e, int64_t n, int64_t I, int64_t H)
{
    return (uint64_t)n * (2 * fam_cost_expert_matrix(e, I, H) + fam_cost_expert_matrix(e, H, I));
}

uint64_t fam_cost_mlp(const fam_encoding *e, int64_t I, int64_t H)
{
    return 2 * fam_cost_matrix(e, I, H) + fam_cost_matrix(e, H, I);
}

uint64_t fam_cost_attention(const fam_encoding *e, int64_t H, int64_t Hq, int64_t Hkv, int64_t Dqk, int64_t Dv)
{
    return fam_cost_matrix(e, Hq * Dqk, H) + fam_cost_matrix(e, Hkv * Dqk, H) + fam_cost_matrix(e, Hkv * Dv, H) +
           fam_cost_matrix(e, H, Hq * Dv);
}

uint64_t fam_cost_kv_cache(int64_t batch, int64_t heads, int64_t dk, int64_t dv, int64_t keep)
{
    return (uint64_t)(batch * heads * (dk + dv) * keep) * 4;
}

void fam_cost_readout(nnt_cost_args *args, const fam_encoding *e, int64_t V, int64_t H, int tied)
{
    args->first_bytes = fam_cost_vector(e, V * H);
    args->last_bytes = fam_cost_vector(e, H) + (tied ? 0 : fam_cost_vector(e, V * H));
}

nnt_status fam_cost_blocks(const nnt_cost_args *args, int64_t layers, nnt_error *err)
{
    if (layers == args->n_blocks) return NNT_OK;
    return args->core->set_error(err, NNT_ERR_CONFIG, "%s: the family reads %lld blocks, the planner %d (num_hidden_layers)",
                                 args->core->cfg_path(args->ckpt), (long long)layers, args->n_blocks);
}
