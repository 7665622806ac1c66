/* fam_decoder.c - Llama's pre-norm decoder skeleton with its standard values: embedding, each
 * block's norms and residual adds around a family-supplied mixer and MLP, final norm, lm_head. */
#include <nnt/nnt_family_kit.h>

int fam_decoder_info(int hidden, int vocab, nnt_value_id id, const nnt_call_dims *d, nnt_value_info *out)
{
    int64_t B = d ? d->batch : 0, T = d ? d->seq : 0;
    switch (id) {
    case NNT_VALUE_LOGITS:
    case NNT_VALUE_LM_HEAD_OUTPUT: fam_served(out, d, NNT_F32, 1, NNT_SHAPE(B, T, (int64_t)vocab)); return 1;
    case NNT_VALUE_TOKEN_EMBEDDINGS:
    case NNT_VALUE_FINAL_NORM_OUTPUT:
    case NNT_VALUE_LAYER_INPUT:
    case NNT_VALUE_ATTENTION_NORM_OUTPUT:
    case NNT_VALUE_LAYER_MID:
    case NNT_VALUE_MLP_NORM_OUTPUT:
    case NNT_VALUE_MLP_INPUT:
    case NNT_VALUE_LAYER_OUTPUT: fam_served(out, d, NNT_F32, 1, NNT_SHAPE(B, T, (int64_t)hidden)); return 1;
    case NNT_VALUE_ATTENTION_POST:
    case NNT_VALUE_ATTENTION_COMB:
    case NNT_VALUE_MLP_POST:
    case NNT_VALUE_MLP_COMB:
        fam_off_page(out, "a single residual stream: no hyper-connections weigh or mix streams in this family");
        return 1;
    default: return 0;
    }
}

static const nnt_tensor *norm_at(const nnt_tensor *base, size_t stride, int layer)
{
    return (const nnt_tensor *)((const char *)base + stride * (size_t)layer);
}

nnt_status fam_decoder_forward(const fam_env *env, nnt_run *run, const nnt_forward_args *args,
                               const fam_decoder *d, nnt_error *err)
{
    const nnt_core_api *h = env->core;
    const nnt_backend_ops *be = env->be;
    void *bc = env->be_ctx;
    int64_t B = args->batch, T = args->seq, M = B * T, H = d->hidden, V = d->vocab;
    const nnt_call_dims dims = {args->batch, args->seq, args->past};
    nnt_attn_mask mask;
    nnt_status st = fam_mask_build(args, &mask, err);
    if (st != NNT_OK) return st;
    nnt_tensor x, ids, xn, sub;
#define TRY(e)                                                                                                         \
    do {                                                                                                               \
        if ((st = (e)) != NNT_OK) goto done;                                                                           \
    } while (0)
    int first, end; /* the blocks of this call's stage (every block for a whole-model call) */
    fam_stage_blocks(args, d->num_layers, &first, &end);
    TRY(fam_alloc(env, run, NNT_F32, &x, err, NNT_SHAPE(M, H)));
    nnt_tensor x3 = fam_view(&x, NNT_SHAPE(B, T, H));
    if (first > 0) { /* a later stage: the stream the previous stage handed over */
        TRY(fam_stage_load(env, args, &x, err));
    } else {
        TRY(fam_alloc(env, run, NNT_I32, &ids, err, NNT_SHAPE(M)));
        TRY(be->upload(bc, ids.data, args->input_ids, (size_t)M * sizeof(int32_t), err));
        TRY(be->embedding(bc, &d->embed, &ids, &x, err));
        TRY(h->emit(run, NNT_VALUE_TOKEN_EMBEDDINGS, -1, &x3));
    }
    for (int L = first; L < end; L++) {
        size_t mark = h->arena_mark(run);
        TRY(h->emit(run, NNT_VALUE_LAYER_INPUT, L, &x3));
        TRY(fam_alloc(env, run, NNT_F32, &xn, err, NNT_SHAPE(M, H)));
        TRY(fam_alloc(env, run, NNT_F32, &sub, err, NNT_SHAPE(M, H)));
        nnt_tensor xn3 = fam_view(&xn, NNT_SHAPE(B, T, H));
        TRY(fam_norm(env, run, L, &dims, &x, norm_at(d->in_norm, d->norm_stride, L), d->eps, &xn, err));
        TRY(h->emit(run, NNT_VALUE_ATTENTION_NORM_OUTPUT, L, &xn3));
        TRY(d->mixer(d->self, run, L, args, &mask, &xn, &sub, err));
        TRY(be->add(bc, &x, &sub, &x, err));
        TRY(h->emit(run, NNT_VALUE_LAYER_MID, L, &x3));
        TRY(fam_norm(env, run, L, &dims, &x, norm_at(d->post_norm, d->norm_stride, L), d->eps, &xn, err));
        TRY(h->emit(run, NNT_VALUE_MLP_NORM_OUTPUT, L, &xn3));
        TRY(h->emit(run, NNT_VALUE_MLP_INPUT, L, &xn3));
        TRY(d->mlp(d->self, run, L, args, &xn, &sub, err));
        TRY(be->add(bc, &x, &sub, &x, err));
        TRY(h->emit(run, NNT_VALUE_LAYER_OUTPUT, L, &x3));
        h->arena_release(run, mark);
    }
    if (end < d->num_layers) { /* an earlier stage: hand the stream over, no readout */
        TRY(fam_stage_store(env, args, &x, err));
        goto done;
    }
    TRY(fam_alloc(env, run, NNT_F32, &xn, err, NNT_SHAPE(M, H)));
    TRY(be->rms_norm(bc, &x, &d->final_norm, d->eps, &xn, err));
    nnt_tensor f3 = fam_view(&xn, NNT_SHAPE(B, T, H));
    TRY(h->emit(run, NNT_VALUE_FINAL_NORM_OUTPUT, -1, &f3));
    TRY(fam_readout(env, run, args, &xn, &d->lm_head, V, err));
#undef TRY
done:
    fam_mask_free(&mask);
    return st;
}

nnt_status fam_decoder_project(const fam_env *env, nnt_run *run, const fam_decoder *d, const nnt_tensor *x,
                               nnt_tensor *logits, nnt_error *err)
{
    nnt_tensor xn;
    size_t mark = env->core->arena_mark(run);
    nnt_status st = fam_alloc(env, run, NNT_F32, &xn, err, NNT_SHAPE(x->shape[0], (int64_t)d->hidden));
    if (st == NNT_OK) st = env->be->rms_norm(env->be_ctx, x, &d->final_norm, d->eps, &xn, err);
    if (st == NNT_OK) st = env->be->linear(env->be_ctx, &xn, &d->lm_head, logits, err);
    env->core->arena_release(run, mark);
    return st;
}
