/* fam_stage.c - pipeline stages in the family kit: which blocks a forward call runs, and moving
 * the residual stream between a stage's backend memory and the hidden_in / hidden_out buffers
 * the core hands over (nnt_forward_args, ABI 3.2). */
#include <nnt/nnt_family_kit.h>

void fam_stage_blocks(const nnt_forward_args *args, int layers, int *first, int *end)
{
    *first = 0;
    *end = layers;
    if (!NNT_STRUCT_HAS(args, nnt_forward_args, end_layer) || args->end_layer == 0) return;
    *first = args->first_layer;
    *end = args->end_layer;
}

/* The stage buffer `buf` as a tensor of x's shape, after checking its dtype and element count. */
static nnt_status stage_view(const fam_env *env, const char *name, const nnt_tensor *buf, const nnt_tensor *x,
                             nnt_tensor *out, nnt_error *err)
{
    if (!buf)
        return env->core->set_error(err, NNT_ERR_SHAPE, "%s: the call runs a pipeline stage but gives no %s buffer", name,
                                    name);
    if (buf->dtype != NNT_F32 || nnt_tensor_numel(buf) != nnt_tensor_numel(x))
        return env->core->set_error(err, NNT_ERR_SHAPE,
                                    "%s: expected F32 with %lld elements (the residual stream [batch, seq, streams, "
                                    "hidden]), got %s with %lld",
                                    name, (long long)nnt_tensor_numel(x), buf->dtype == NNT_F32 ? "F32" : "another dtype",
                                    (long long)nnt_tensor_numel(buf));
    *out = *buf;
    out->ndim = x->ndim;
    for (int i = 0; i < x->ndim; i++) out->shape[i] = x->shape[i];
    return NNT_OK;
}

nnt_status fam_stage_load(const fam_env *env, const nnt_forward_args *args, const nnt_tensor *x, nnt_error *err)
{
    nnt_tensor in;
    const nnt_tensor *buf = NNT_STRUCT_HAS(args, nnt_forward_args, hidden_in) ? args->hidden_in : NULL;
    nnt_status st = stage_view(env, "hidden_in", buf, x, &in, err);
    if (st != NNT_OK) return st;
    if (in.device) {
        nnt_tensor dst = *x;
        return env->be->copy(env->be_ctx, &in, &dst, err);
    }
    return env->be->upload(env->be_ctx, x->data, in.data, (size_t)nnt_tensor_numel(x) * sizeof(float), err);
}

nnt_status fam_stage_store(const fam_env *env, const nnt_forward_args *args, const nnt_tensor *x, nnt_error *err)
{
    nnt_tensor out;
    const nnt_tensor *buf = NNT_STRUCT_HAS(args, nnt_forward_args, hidden_out) ? args->hidden_out : NULL;
    nnt_status st = stage_view(env, "hidden_out", buf, x, &out, err);
    if (st != NNT_OK) return st;
    if (out.device) return env->be->copy(env->be_ctx, x, &out, err);
    return env->be->download(env->be_ctx, out.data, x->data, (size_t)nnt_tensor_numel(x) * sizeof(float), err);
}
