/* fam_bind.c - binding checkpoint tensors shared by families: the readout (embedding, final
 * norm, lm_head), F32 parameter vectors, a block's experts under either the hub's per-expert
 * names or transformers' fused 3-D tensors, per-block tensors from a family's name table, and
 * the decoder skeleton's wiring. */
#include <stdio.h>
#include <string.h>

#include <nnt/nnt_family_kit.h>

nnt_status fam_bind_readout(const fam_env *env, const nnt_checkpoint *ck, int64_t V, int64_t H, int tied,
                            fam_decoder *d, nnt_error *err)
{
    int64_t es[2] = {V, H}, ns[1] = {H};
    nnt_status st = fam_weight(env, ck, "model.embed_tokens.weight", 2, es, &d->embed, err);
    if (st == NNT_OK) st = fam_weight(env, ck, "model.norm.weight", 1, ns, &d->final_norm, err);
    if (st != NNT_OK) return st;
    if (tied && !env->core->has_tensor(ck, "lm_head.weight")) {
        d->lm_head = d->embed;
        return NNT_OK;
    }
    return fam_weight(env, ck, "lm_head.weight", 2, es, &d->lm_head, err);
}

void fam_load_blocks(const nnt_load_args *args, int layers, int *first, int *end)
{
    *first = 0;
    *end = layers;
    if (!NNT_STRUCT_HAS(args, nnt_load_args, end_layer) || args->end_layer <= 0) return;
    if (args->first_layer >= 0 && args->first_layer < args->end_layer && args->end_layer <= layers) {
        *first = args->first_layer;
        *end = args->end_layer;
    }
}

nnt_status fam_bind_readout_stage(const fam_env *env, const nnt_load_args *args, int64_t V, int64_t H, int tied,
                                  int layers, fam_decoder *d, int *first, int *end, nnt_error *err)
{
    const nnt_checkpoint *ck = args->ckpt;
    fam_load_blocks(args, layers, first, end);
    if (*first == 0 && *end == layers) return fam_bind_readout(env, ck, V, H, tied, d, err);
    int64_t es[2] = {V, H}, ns[1] = {H};
    int readout = *end == layers, lm_is_embed = tied && !env->core->has_tensor(ck, "lm_head.weight");
    nnt_status st = NNT_OK;
    if (*first == 0 || (readout && lm_is_embed)) st = fam_weight(env, ck, "model.embed_tokens.weight", 2, es, &d->embed, err);
    if (st != NNT_OK || !readout) return st;
    st = fam_weight(env, ck, "model.norm.weight", 1, ns, &d->final_norm, err);
    if (st != NNT_OK) return st;
    if (lm_is_embed) {
        d->lm_head = d->embed;
        return NNT_OK;
    }
    return fam_weight(env, ck, "lm_head.weight", 2, es, &d->lm_head, err);
}

nnt_status fam_bind_vector(const fam_env *env, const nnt_checkpoint *ck, const char *name, int64_t count, float **host,
                           nnt_tensor *out, nnt_error *err)
{
    nnt_status st = fam_vector_f32(env, ck, name, count, host, err);
    if (st != NNT_OK) return st;
    nnt_tensor t = {.dtype = NNT_F32, .ndim = 1, .shape = {count}, .data = *host};
    return fam_prepare(env, &t, out, err);
}

void fam_decoder_wire(fam_decoder *d, int layers, int hidden, int vocab, double eps, const nnt_tensor *in_norm0,
                      const nnt_tensor *post_norm0, size_t stride, void *self,
                      nnt_status (*mixer)(void *, nnt_run *, int, const nnt_forward_args *, const nnt_attn_mask *,
                                          const nnt_tensor *, nnt_tensor *, nnt_error *),
                      nnt_status (*mlp)(void *, nnt_run *, int, const nnt_forward_args *, const nnt_tensor *, nnt_tensor *,
                                        nnt_error *))
{
    d->num_layers = layers;
    d->hidden = hidden;
    d->vocab = vocab;
    d->eps = (float)eps;
    d->in_norm = in_norm0;
    d->post_norm = post_norm0;
    d->norm_stride = stride;
    d->self = self;
    d->mixer = mixer;
    d->mlp = mlp;
}

nnt_status fam_bind_experts(const fam_env *env, const nnt_checkpoint *ck, int layer, int64_t E, int64_t I,
                            int64_t H, const char *fused_gate_up, const char *fused_down,
                            const fam_expert_names *names, int n, fam_expert *out, nnt_error *err)
{
    char a[256], b[256], c[256];
    nnt_status st;
    if (fused_gate_up) {
        snprintf(a, sizeof a, fused_gate_up, layer);
        if (env->core->has_tensor(ck, a)) {
            snprintf(b, sizeof b, fused_down, layer);
            int64_t s1[3] = {E, 2 * I, H}, s2[3] = {E, H, I};
            nnt_tensor gu, dn;
            if ((st = fam_weight_product(env, ck, a, 3, s1, &gu, err)) != NNT_OK) return st;
            if ((st = fam_weight_product(env, ck, b, 3, s2, &dn, err)) != NNT_OK) return st;
            for (int64_t e = 0; e < E; e++) {
                if ((st = fam_rows(env, &gu, e, 0, I, a, &out[e].gate, err)) != NNT_OK ||
                    (st = fam_rows(env, &gu, e, I, I, a, &out[e].up, err)) != NNT_OK ||
                    (st = fam_rows(env, &dn, e, 0, H, b, &out[e].down, err)) != NNT_OK)
                    return st;
            }
            return NNT_OK;
        }
    }
    const fam_expert_names *use = NULL;
    for (int i = 0; i < n && !use; i++) {
        snprintf(a, sizeof a, names[i].gate, layer, 0);
        if (env->core->has_tensor(ck, a)) use = &names[i];
    }
    if (!use) {
        snprintf(a, sizeof a, names[0].gate, layer, 0);
        if (fused_gate_up) snprintf(b, sizeof b, fused_gate_up, layer);
        return env->core->set_error(err, NNT_ERR_NOT_FOUND,
                                    "%s: the experts of block %d are missing: the checkpoint holds neither '%s'%s%s%s",
                                    env->core->cfg_path(ck), layer, a, fused_gate_up ? " nor '" : "",
                                    fused_gate_up ? b : "", fused_gate_up ? "'" : "");
    }
    int64_t gi[2] = {I, H}, di[2] = {H, I};
    for (int64_t e = 0; e < E; e++) {
        snprintf(a, sizeof a, use->gate, layer, (int)e);
        snprintf(b, sizeof b, use->up, layer, (int)e);
        snprintf(c, sizeof c, use->down, layer, (int)e);
        if (!env->core->has_tensor(ck, a))
            return env->core->set_error(err, NNT_ERR_NOT_FOUND, "%s: expert %lld of block %d is missing: no tensor '%s'",
                                        env->core->cfg_path(ck), (long long)e, layer, a);
        if ((st = fam_weight_product(env, ck, a, 2, gi, &out[e].gate, err)) != NNT_OK) return st;
        if ((st = fam_weight_product(env, ck, b, 2, gi, &out[e].up, err)) != NNT_OK) return st;
        if ((st = fam_weight_product(env, ck, c, 2, di, &out[e].down, err)) != NNT_OK) return st;
    }
    return NNT_OK;
}

nnt_status fam_bind_names(const fam_env *env, const nnt_checkpoint *ck, int layer, const fam_tensor_name *names, int n,
                          const int64_t *sizes, void *block, nnt_error *err)
{
    for (int i = 0; i < n; i++) {
        const fam_tensor_name *r = &names[i];
        char name[256];
        int len = snprintf(name, sizeof name, r->pattern, layer);
        if (len < 0 || (size_t)len >= sizeof name || r->ndim < 0 || r->ndim > NNT_MAX_DIMS)
            return env->core->set_error(err, NNT_ERR_INTERNAL,
                                        "tensor-name table row %d ('%s', %d axes) does not give a name of under "
                                        "256 bytes with 0..%d axes",
                                        i, r->pattern, r->ndim, NNT_MAX_DIMS);
        int64_t shape[NNT_MAX_DIMS];
        for (int d = 0; d < r->ndim; d++) shape[d] = sizes[r->size[d]];
        nnt_status st = fam_weight(env, ck, name, r->ndim, shape, (nnt_tensor *)((char *)block + r->field), err);
        if (st != NNT_OK) return st;
    }
    return NNT_OK;
}
