/* fam_readout.c - the readout's last product, lm_head, run at the sequence positions the core
 * says are read (nnt_forward_args.logits_positions) rather than at every position, and its two
 * values emitted. */
#include <stddef.h>
#include <stdlib.h>

#include <nnt/nnt_family_kit.h>

/* The positions args asks for, or NULL (every position) when it asks none or predates them. */
static const int32_t *asked_positions(const nnt_forward_args *args, int *n)
{
    size_t end = offsetof(nnt_forward_args, n_logits_positions) + sizeof args->n_logits_positions;
    *n = 0;
    if (!args || args->struct_size < end || !args->logits_positions || args->n_logits_positions <= 0) return NULL;
    if (args->n_logits_positions >= args->seq) return NULL;
    *n = args->n_logits_positions;
    return args->logits_positions;
}

nnt_status fam_readout(const fam_env *env, nnt_run *run, const nnt_forward_args *args, const nnt_tensor *xn,
                       const nnt_tensor *lm_head, int64_t vocab, nnt_error *err)
{
    const nnt_core_api *h = env->core;
    int64_t B = args->batch, T = args->seq, H = xn->shape[xn->ndim - 1];
    int n = 0;
    const int32_t *pos = asked_positions(args, &n);
    int64_t K = pos ? n : T;
    nnt_tensor rows, logits;
    const nnt_tensor *x = xn;
    int32_t *idx = NULL;
    nnt_status st = NNT_OK;
    if (pos) { /* rows (b, pos[k]) of xn [B * T, H] gathered into [B * K, H] */
        idx = malloc((size_t)(B * K) * sizeof *idx);
        if (!idx) return h->set_error(err, NNT_ERR_OUT_OF_MEMORY, "no memory for the readout's %lld rows", (long long)(B * K));
        for (int64_t b = 0; b < B; b++)
            for (int64_t k = 0; k < K; k++) idx[b * K + k] = (int32_t)(b * T + pos[k]);
        st = fam_alloc(env, run, NNT_F32, &rows, err, NNT_SHAPE(B * K, H));
        if (st == NNT_OK) st = env->be->gather_rows(env->be_ctx, xn, idx, (int)(B * K), &rows, err);
        x = &rows;
    }
    if (st == NNT_OK) st = fam_alloc(env, run, NNT_F32, &logits, err, NNT_SHAPE(B * K, vocab));
    if (st == NNT_OK) st = env->be->linear(env->be_ctx, x, lm_head, &logits, err);
    nnt_tensor l3 = st == NNT_OK ? fam_view(&logits, NNT_SHAPE(B, K, vocab)) : (nnt_tensor){0};
    if (st == NNT_OK) st = h->emit(run, NNT_VALUE_LM_HEAD_OUTPUT, -1, &l3);
    if (st == NNT_OK) st = h->emit(run, NNT_VALUE_LOGITS, -1, &l3);
    free(idx);
    return st;
}
