/* project.c - the logit lens' projection (nnterp's project_on_vocab): hidden states through
 * the family's final norm and lm_head. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

static nnt_status project_on_vocab_held(nnt_model *m, const nnt_tensor *x, nnt_tensor *out)
{
    if (!m || !x || !out || !x->data || x->device) return NNT_ERR_INVALID_ARGUMENT;
    nnt_error *err = &m->rt->err;
    nnt_err_clear(err);
    memset(out, 0, sizeof *out);
    const nnt_model_info *info = &m->info;
    int64_t H = info->hidden_size, V = info->vocab_size;
    if (m->end_loaded < info->num_layers)
        return nnt_err_set(err, NNT_ERR_UNSUPPORTED,
                           "project_on_vocab: this model was loaded with blocks %d..%d only, without the final norm and "
                           "lm_head (the stage ending at block %d holds them)",
                           m->first_loaded, m->end_loaded - 1, info->num_layers - 1);
    if (x->ndim < 1 || x->shape[x->ndim - 1] != H) {
        char got[96];
        return nnt_err_set(err, NNT_ERR_SHAPE, "project_on_vocab: x has shape %s; its last axis must be hidden_size %lld",
                           nnt_shape_str(x, got, sizeof got), (long long)H);
    }
    int streams = info->num_streams > 1 && (x->ndim == 2 || x->ndim == 4) && x->shape[x->ndim - 2] == info->num_streams;
    int64_t per = streams ? (int64_t)info->num_streams * H : H;
    int64_t rows = nnt_tensor_numel(x) / per;
    const nnt_plugin *be = m->family->be;
    nnt_run run = {.model = m,
                   .trace = NULL,
                   .arena = m->arena,
                   .err = err,
                   .dims = {.batch = 1, .seq = (int)rows, .past = 0},
                   .step = 0,
                   .args = NULL,
                   .current_request = -1,
                   .first_layer = 0,
                   .end_layer = info->num_layers};
    nnt_arena_reset(m->arena);
    nnt_tensor dx = {0}, dy = {0};
    int64_t xs[3] = {rows, streams ? info->num_streams : H, H};
    int64_t ys[2] = {rows, V};
    float *host = malloc((size_t)nnt_tensor_numel(x) * sizeof(float));
    nnt_status st = host ? nnt_convert(x->data, x->dtype, host, NNT_F32, nnt_tensor_numel(x), err)
                         : nnt_err_set(err, NNT_ERR_OUT_OF_MEMORY, "no memory");
    if (st == NNT_OK) st = nnt_run_alloc(&run, NNT_F32, streams ? 3 : 2, xs, &dx, err);
    if (st == NNT_OK) st = nnt_run_alloc(&run, NNT_F32, 2, ys, &dy, err);
    if (st == NNT_OK) st = be->ops.upload(be->be_ctx, dx.data, host, nnt_tensor_nbytes(&dx), err);
    if (st == NNT_OK) st = m->family->family->project(m->impl, &run, &dx, streams, &dy, err);
    if (st == NNT_OK) {
        int64_t shape[NNT_MAX_DIMS];
        int nd = x->ndim - (streams ? 1 : 0);
        for (int i = 0; i < nd - 1; i++) shape[i] = x->shape[i];
        shape[nd - 1] = V;
        if (nnt_tensor_alloc(out, NNT_F32, nd, shape) != NNT_OK)
            st = nnt_err_set(err, NNT_ERR_OUT_OF_MEMORY, "no memory");
        else
            st = be->ops.download(be->be_ctx, out->data, dy.data, nnt_tensor_nbytes(out), err);
        if (st != NNT_OK) nnt_tensor_free(out);
    }
    free(host);
    nnt_arena_reset(m->arena);
    return st;
}

nnt_status nnt_project_on_vocab(nnt_model *m, const nnt_tensor *x, nnt_tensor *out)
{
    NNT_GUARDED((m ? m->rt : NULL), "nnt_project_on_vocab", project_on_vocab_held(m, x, out));
}
