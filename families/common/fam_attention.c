/* fam_attention.c - softmax attention with its standard values, on the kernel backend:
 * head split, rotary, masked scores, softmax (with an optional sink), value mix, o_proj. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "family_common.h"

nnt_status fam_mask_build(const nnt_forward_args *args, nnt_attn_mask *mask, nnt_error *err)
{
    memset(mask, 0, sizeof *mask);
    int64_t n = (int64_t)args->batch * args->seq;
    uint8_t *valid = malloc((size_t)n);
    if (!valid) {
        if (err) {
            err->status = NNT_ERR_OUT_OF_MEMORY;
            snprintf(err->msg, sizeof err->msg, "no memory for the attention mask");
        }
        return NNT_ERR_OUT_OF_MEMORY;
    }
    for (int64_t i = 0; i < n; i++) valid[i] = args->attention_mask[i] != 0;
    mask->q_pos = args->positions;
    mask->k_pos = args->positions;
    mask->key_valid = valid;
    mask->query_valid = valid;
    mask->causal = 1;
    return NNT_OK;
}

void fam_mask_free(nnt_attn_mask *mask)
{
    free((void *)mask->key_valid);
    memset(mask, 0, sizeof *mask);
}

void fam_attention_info(const fam_attn *a, int hidden, nnt_slot slot, const nnt_call_dims *d, nnt_value_info *out)
{
    int64_t B = d ? d->batch : 0, T = d ? d->seq : 0, S = d ? d->past + d->seq : 0;
    switch (slot) {
    case NNT_SV_ATTN_QUERIES: fam_served(out, d, NNT_F32, 1, 4, B, (int64_t)a->num_heads, T, (int64_t)a->qk_head_dim); break;
    case NNT_SV_ATTN_KEYS: fam_served(out, d, NNT_F32, 1, 4, B, (int64_t)a->num_kv_heads, S, (int64_t)a->qk_head_dim); break;
    case NNT_SV_ATTN_VALUES: fam_served(out, d, NNT_F32, 1, 4, B, (int64_t)a->num_kv_heads, S, (int64_t)a->v_head_dim); break;
    case NNT_SV_ATTN_SCORES:
    case NNT_SV_ATTN_PROBABILITIES: fam_served(out, d, NNT_F32, 1, 4, B, (int64_t)a->num_heads, T, S); break;
    case NNT_SV_ATTN_PREMIX:
    case NNT_SV_ATTN_HEAD_OUTPUTS: fam_served(out, d, NNT_F32, 1, 4, B, T, (int64_t)a->num_heads, (int64_t)a->v_head_dim); break;
    case NNT_SV_ATTN_OUTPUT: fam_served(out, d, NNT_F32, 1, 3, B, T, (int64_t)hidden); break;
    default: fam_unserved(out, "not a self_attn value"); break;
    }
}

nnt_status fam_attention_forward(const fam_env *env, nnt_run *run, int layer, const fam_attn *a,
                                 const nnt_forward_args *args, const nnt_attn_mask *mask,
                                 const nnt_tensor *q, const nnt_tensor *k, const nnt_tensor *v,
                                 nnt_tensor *out, nnt_error *err)
{
    const nnt_host_api *h = env->host;
    const nnt_backend_ops *be = env->be;
    void *bc = env->be_ctx;
    int64_t B = args->batch, T = args->seq, S = T, M = B * T;
    int64_t Hq = a->num_heads, Hkv = a->num_kv_heads, Dq = a->qk_head_dim, Dv = a->v_head_dim;
    nnt_status st;
    size_t mark = h->arena_mark(run);
    nnt_tensor qh, kh, vh, scores, probs, ho;
#define TRY(x)                                                                                                         \
    do {                                                                                                               \
        if ((st = (x)) != NNT_OK) goto done;                                                                           \
    } while (0)
    TRY(fam_alloc(env, run, NNT_F32, &qh, err, 4, B, Hq, T, Dq));
    TRY(fam_alloc(env, run, NNT_F32, &kh, err, 4, B, Hkv, S, Dq));
    TRY(fam_alloc(env, run, NNT_F32, &vh, err, 4, B, Hkv, S, Dv));
    nnt_tensor q4 = fam_view(q, 4, B, T, Hq, Dq), k4 = fam_view(k, 4, B, T, Hkv, Dq), v4 = fam_view(v, 4, B, T, Hkv, Dv);
    TRY(be->swap12(bc, &q4, &qh, err));
    TRY(be->swap12(bc, &k4, &kh, err));
    TRY(be->swap12(bc, &v4, &vh, err));
    if (a->rot_dim > 0) {
        TRY(be->rope(bc, &qh, args->positions, a->inv_freq, a->rot_start, a->rot_dim, a->rope_style, a->rope_mscale, err));
        TRY(be->rope(bc, &kh, args->positions, a->inv_freq, a->rot_start, a->rot_dim, a->rope_style, a->rope_mscale, err));
    }
    TRY(h->emit(run, NNT_SV_ATTN_QUERIES, layer, &qh));
    TRY(h->emit(run, NNT_SV_ATTN_KEYS, layer, &kh));
    TRY(h->emit(run, NNT_SV_ATTN_VALUES, layer, &vh));
    TRY(fam_alloc(env, run, NNT_F32, &scores, err, 4, B, Hq, T, S));
    nnt_attn_mask m = *mask;
    m.window = a->window;
    TRY(be->attn_scores(bc, &qh, &kh, a->scale, &m, &scores, err));
    TRY(h->emit(run, NNT_SV_ATTN_SCORES, layer, &scores));
    TRY(fam_alloc(env, run, NNT_F32, &probs, err, 4, B, Hq, T, S));
    TRY(be->softmax(bc, &scores, a->sinks, &probs, err));
    TRY(h->emit(run, NNT_SV_ATTN_PROBABILITIES, layer, &probs));
    TRY(fam_alloc(env, run, NNT_F32, &ho, err, 4, B, T, Hq, Dv));
    TRY(be->attn_mix(bc, &probs, &vh, &ho, err));
    TRY(h->emit(run, NNT_SV_ATTN_HEAD_OUTPUTS, layer, &ho));
    TRY(h->emit(run, NNT_SV_ATTN_PREMIX, layer, &ho));
    nnt_tensor flat = fam_view(&ho, 2, M, Hq * Dv);
    TRY(be->linear(bc, &flat, &a->o_proj, out, err));
    nnt_tensor out3 = fam_view(out, 3, B, T, out->shape[1]);
    TRY(h->emit(run, NNT_SV_ATTN_OUTPUT, layer, &out3));
#undef TRY
done:
    h->arena_release(run, mark);
    return st;
}
