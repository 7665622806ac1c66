/* fam_kv_heads.c - the key and value projections of an attention block (fam_weight_kv_heads),
 * FP8 checkpoints quantised per key/value head included: there each head's rows [k_head_dim key
 * rows; v_head_dim value rows] were quantised together in B-row blocks, padded to whole blocks,
 * so one block can hold a head's last key rows and its first value rows; k_proj's scales hold
 * each head's first ceil(k_head_dim / B) blocks and v_proj's the rest. The kit re-lays both
 * grids into plain grids of finer row blocks; the weights stay mapped. Source: sglang-jax pull
 * request 969 (dequant_fused_kv), which found this layout in MiMo-V2-Flash's released weights. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <nnt/nnt_family_kit.h>

#include "fam_internal.h"

static int64_t ceil_div(int64_t a, int64_t b)
{
    return (a + b - 1) / b;
}

static int64_t gcd64(int64_t a, int64_t b)
{
    while (b) {
        int64_t r = a % b;
        a = b;
        b = r;
    }
    return a;
}

/* IEEE half precision to float, exactly (subnormals, infinities and NaN kept). */
static float half_to_f32(uint16_t h)
{
    int e = (h >> 10) & 31, m = h & 1023;
    float f = e == 0 ? ldexpf((float)m, -24) : e == 31 ? (m ? NAN : INFINITY) : ldexpf((float)(1024 + m), e - 25);
    return (h & 0x8000) ? -f : f;
}

/* Scale i of a grid of dtype dt (the scale dtypes `tensor` hands out: F32, BF16, F16, F8_E8M0),
 * read byte-wise: a mapped grid may be unaligned. E8M0 is 2^(code - 127), code 255 NaN (OCP
 * Microscaling Formats v1.0). */
static float scale_at(nnt_dtype dt, const void *grid, int64_t i)
{
    const unsigned char *g = grid;
    uint16_t h;
    uint32_t u;
    float f;
    switch (dt) {
    case NNT_F32: memcpy(&f, g + 4 * i, 4); return f;
    case NNT_BF16:
        memcpy(&h, g + 2 * i, 2);
        u = (uint32_t)h << 16;
        memcpy(&f, &u, 4);
        return f;
    case NNT_F16: memcpy(&h, g + 2 * i, 2); return half_to_f32(h);
    case NNT_F8_E8M0: return g[i] == 255 ? NAN : ldexpf(1.0f, (int)g[i] - 127);
    default: return NAN;
    }
}

/* One block's key/value geometry: heads of dk key and dv value rows over `in` inputs, B-row and
 * C-column scale blocks (br, bc), kb blocks a head in the key scales, vb in the value scales, sc
 * column blocks. */
typedef struct kv_layout {
    int64_t heads, dk, dv, in;
    int64_t br, bc, kb, vb, sc;
} kv_layout;

/* Recognises the per-head layout from the shapes alone: k_proj's scales have heads * kb rows,
 * which is not the plain grid's ceil(heads * dk / B). `tensor` then gives k_proj as `heads`
 * matrices [heads, dk, in] each with its own kb scale rows, and v_proj as [heads, dv, in] with
 * vb rows each (so vb must equal ceil(dv / B)); the grids are the stored ones. *per_head 0 (and
 * nothing reported) when the layout is another: the plain reading then says what is wrong. */
static nnt_status per_head_views(const fam_env *env, const nnt_checkpoint *ck, const char *k_name, const char *v_name,
                                 kv_layout *L, nnt_tensor *k3, nnt_tensor *v3, int *per_head, nnt_error *err)
{
    *per_head = 0;
    nnt_error quiet = {0};
    int64_t ks[3] = {L->heads, L->dk, L->in}, vs[3] = {L->heads, L->dv, L->in};
    if (!env->core->has_tensor(ck, k_name) || env->core->tensor(ck, k_name, 3, ks, k3, &quiet) != NNT_OK ||
        k3->dtype != NNT_F8_E4M3 || !k3->scale || k3->block_rows <= 0 || k3->block_cols <= 0)
        return NNT_OK;
    L->br = k3->block_rows;
    L->bc = k3->block_cols;
    L->kb = ceil_div(L->dk, L->br);
    if (L->heads * L->kb == ceil_div(L->heads * L->dk, L->br)) return NNT_OK; /* that grid is the plain one too */
    *per_head = 1;
    L->vb = ceil_div(L->dk + L->dv, L->br) - L->kb;
    L->sc = ceil_div(L->in, L->bc);
    const char *cfg = env->core->cfg_path(ck);
    if (L->vb != ceil_div(L->dv, L->br))
        return env->core->set_error(err, NNT_ERR_UNSUPPORTED,
                                    "%s: '%s' holds its scales per key/value head (%lld blocks of %lld rows a head over "
                                    "%lld key and %lld value rows), which leaves '%s' %lld scale rows a head for %lld "
                                    "value rows; the family kit reads this layout only where those are "
                                    "ceil(v_head_dim / %lld) = %lld",
                                    cfg, k_name, (long long)(L->kb + L->vb), (long long)L->br, (long long)L->dk,
                                    (long long)L->dv, v_name, (long long)L->vb, (long long)L->dv, (long long)L->br,
                                    (long long)ceil_div(L->dv, L->br));
    char why[NNT_ERROR_MSG_MAX] = "it is stored in another encoding";
    nnt_status st = env->core->tensor(ck, v_name, 3, vs, v3, err);
    if (st != NNT_OK) snprintf(why, sizeof why, "%s", err->msg);
    else if (v3->dtype != NNT_F8_E4M3 || !v3->scale) st = NNT_ERR_SHAPE;
    if (st != NNT_OK)
        return env->core->set_error(err, st,
                                    "%s: '%s' holds its scales per key/value head, so '%s' must be F8_E4M3 [%lld, %lld] "
                                    "with [%lld, %lld] scales: %s",
                                    cfg, k_name, v_name, (long long)(L->heads * L->dv), (long long)L->in,
                                    (long long)(L->heads * L->vb), (long long)L->sc, why);
    return NNT_OK;
}

/* k [heads, dk, in] and v [heads, dv, in] with their per-head grids made [heads * dk, in] and
 * [heads * dv, in] with plain F32 grids of g-row blocks, g = gcd(B, dk, dv): every g rows of a
 * head lie inside one B-row block of its fused rows, whose scale they take. The new grids are
 * host buffers env owns. */
static nnt_status relay(const fam_env *env, const kv_layout *L, nnt_tensor *k, nnt_tensor *v, const char *k_name,
                        nnt_error *err)
{
    int64_t g = gcd64(L->br, gcd64(L->dk, L->dv)), sc = L->sc;
    int64_t krows = L->heads * L->dk / g, vrows = L->heads * L->dv / g;
    float *kg = malloc((size_t)(krows * sc) * sizeof *kg), *vg = malloc((size_t)(vrows * sc) * sizeof *vg);
    if (!kg || !vg) {
        free(kg);
        free(vg);
        return env->core->set_error(err, NNT_ERR_OUT_OF_MEMORY, "no memory for the re-laid scales of '%s'", k_name);
    }
    for (int64_t i = 0; i < krows + vrows; i++) {
        int is_v = i >= krows;
        int64_t row = (is_v ? i - krows : i) * g, width = is_v ? L->dv : L->dk;
        int64_t h = row / width, fused = (is_v ? L->dk : 0) + row % width, b = fused / L->br;
        const nnt_tensor *src = b < L->kb ? k : v; /* the first kb blocks of a head: the key grid */
        int64_t srow = b < L->kb ? h * L->kb + b : h * L->vb + (b - L->kb);
        float *dst = is_v ? vg + (i - krows) * sc : kg + i * sc;
        for (int64_t c = 0; c < sc; c++) dst[c] = scale_at(src->scale_dtype, src->scale, srow * sc + c);
    }
    nnt_status st = fam_keep_buffer(env, kg, err);
    if (st != NNT_OK) {
        free(vg);
        return st;
    }
    if ((st = fam_keep_buffer(env, vg, err)) != NNT_OK) return st;
    nnt_tensor *out[2] = {k, v};
    float *grid[2] = {kg, vg};
    for (int j = 0; j < 2; j++) {
        out[j]->ndim = 2;
        out[j]->shape[0] = L->heads * (j ? L->dv : L->dk);
        out[j]->shape[1] = L->in;
        out[j]->shape[2] = 0;
        out[j]->scale = grid[j];
        out[j]->scale_dtype = NNT_F32;
        out[j]->block_rows = (int32_t)g;
        out[j]->block_cols = (int32_t)L->bc;
        out[j]->block_row0 = 0;
    }
    return NNT_OK;
}

nnt_status fam_weight_kv_heads(const fam_env *env, const nnt_checkpoint *ck, const char *k_name, const char *v_name,
                               int64_t heads, int64_t dk, int64_t dv, int64_t in, nnt_tensor *k, nnt_tensor *v,
                               nnt_error *err)
{
    if (heads <= 0 || dk <= 0 || dv <= 0 || in <= 0)
        return env->core->set_error(err, NNT_ERR_INVALID_ARGUMENT,
                                    "%s: '%s' and '%s': %lld key/value heads of %lld key and %lld value rows over %lld "
                                    "inputs; expected positive counts",
                                    env->core->cfg_path(ck), k_name, v_name, (long long)heads, (long long)dk,
                                    (long long)dv, (long long)in);
    kv_layout L = {.heads = heads, .dk = dk, .dv = dv, .in = in};
    nnt_tensor hk, hv;
    int per_head = 0;
    nnt_status st = per_head_views(env, ck, k_name, v_name, &L, &hk, &hv, &per_head, err);
    if (st == NNT_OK && per_head) {
        st = relay(env, &L, &hk, &hv, k_name, err);
    } else if (st == NNT_OK) {
        int64_t ks[2] = {heads * dk, in}, vs[2] = {heads * dv, in};
        st = env->core->tensor(ck, k_name, 2, ks, &hk, err);
        if (st == NNT_OK) st = env->core->tensor(ck, v_name, 2, vs, &hv, err);
    }
    if (st == NNT_OK) st = fam_prepare(env, &hk, k, err);
    if (st == NNT_OK) st = fam_prepare(env, &hv, v, err);
    return st;
}
