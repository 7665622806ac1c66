/* tape_backward.c - the gradient tape's reverse pass: the walk from the last entry to the first,
 * seeding cotangents and reading gradients at marks, clearing the gradient under constants, and
 * each op's step (tape_backward_ops.c) in between (see tape.h for why this is right under reuse
 * and aliasing). Marks on a delta_rule's states answer after that entry's step, with each token
 * state's total gradient. */
#include <stdlib.h>
#include <string.h>

#include "grad/tape.h"

/* The answers at a mark: the gradient its memory holds now, for each wanted gradient of its tag
 * not answered by a later mark. */
static nnt_status answer(nnt_tape *tp, const tape_entry *e, nnt_tape_grad *grads, int n_grads, nnt_error *err)
{
    nnt_tensor g = nnt_tape_adj(tp, &e->out[0]);
    size_t bytes = nnt_tensor_nbytes(&e->out[0]);
    nnt_status st = NNT_OK;
    for (int k = 0; k < n_grads && st == NNT_OK; k++) {
        if (grads[k].tag != e->tag || grads[k].grad->data) continue; /* the last mark answers */
        st = nnt_tensor_alloc(grads[k].grad, NNT_F32, e->out[0].ndim, e->out[0].shape);
        if (st != NNT_OK) st = nnt_err_set(err, st, "no memory for a gradient");
        if (st == NNT_OK) st = tp->be->download(tp->be_ctx, grads[k].grad->data, g.data, bytes, err);
    }
    return st;
}

/* Seeds at a mark, and its answers unless it marks a delta_rule's states (answered after that
 * entry's step). */
static nnt_status at_mark(nnt_tape *tp, const tape_entry *e, const nnt_tape_seed *seeds, int n_seeds,
                          nnt_tape_grad *grads, int n_grads, nnt_error *err)
{
    nnt_tensor g = nnt_tape_adj(tp, &e->out[0]);
    size_t bytes = nnt_tensor_nbytes(&e->out[0]);
    nnt_status st = NNT_OK;
    for (int s = 0; s < n_seeds && st == NNT_OK; s++) {
        if (seeds[s].tag != e->tag) continue;
        void *tmp = NULL;
        st = tp->be->alloc(tp->be_ctx, bytes, &tmp, err);
        nnt_tensor c = g;
        c.data = tmp;
        if (st == NNT_OK) st = tp->be->upload(tp->be_ctx, tmp, seeds[s].cotangent, bytes, err);
        if (st == NNT_OK) st = tp->be->accumulate(tp->be_ctx, &c, 1.0f, &g, err);
        if (tmp) tp->be->free(tp->be_ctx, tmp);
    }
    return st == NNT_OK && e->i[0] == 0 ? answer(tp, e, grads, n_grads, err) : st;
}

/* After the reverse step of delta_rule entry i, whose states' gradient then holds every token's
 * total gradient: the marks on those states answer (they come after i in the record, and the
 * walk has passed them), then the gradient is cleared as any output's. */
static nnt_status after_states(nnt_tape *tp, int i, nnt_tape_grad *grads, int n_grads, nnt_error *err)
{
    nnt_status st = NNT_OK;
    for (int j = tp->n - 1; j > i && st == NNT_OK; j--) /* the last mark first, as the walk meets them */
        if (tp->e[j].kind == TAPE_MARK && tp->e[j].i[0] == i + 1) st = answer(tp, &tp->e[j], grads, n_grads, err);
    nnt_tensor g = nnt_tape_adj(tp, &tp->e[i].out[2]);
    return st == NNT_OK ? nnt_tape_zero(tp, &g, err) : st;
}

/* A constant written over e->out[0]: its gradient is cleared (byte-counted constants as floats). */
static nnt_status clear_constant(const nnt_tape *tp, const tape_entry *e, nnt_error *err)
{
    nnt_tensor t = e->out[0];
    if (t.dtype == NNT_U8) {
        t.dtype = NNT_F32;
        t.shape[0] /= (int64_t)sizeof(float);
    } else if (t.dtype != NNT_F32) {
        return NNT_OK; /* indices */
    }
    nnt_tensor g = nnt_tape_adj(tp, &t);
    return nnt_tape_zero(tp, &g, err);
}

/* An edit's diagonal Jacobian: the gradient of e->out[0] times host[0], on the host (edits are
 * few and their values small beside the ops'). */
static nnt_status affine_step(const nnt_tape *tp, const tape_entry *e, nnt_error *err)
{
    nnt_tensor g = nnt_tape_adj(tp, &e->out[0]);
    if (!g.data) return NNT_OK;
    int64_t n = nnt_tensor_numel(&g);
    float *h = malloc((size_t)n * sizeof *h);
    if (!h) return nnt_err_set(err, NNT_ERR_OUT_OF_MEMORY, "no memory for an edit's gradient");
    const float *a = e->host[0];
    nnt_status st = tp->be->download(tp->be_ctx, h, g.data, (size_t)n * sizeof *h, err);
    for (int64_t i = 0; st == NNT_OK && i < n; i++) h[i] *= a[i];
    if (st == NNT_OK) st = tp->be->upload(tp->be_ctx, g.data, h, (size_t)n * sizeof *h, err);
    free(h);
    return st;
}

nnt_status nnt_tape_backward(nnt_tape *tp, const nnt_tape_seed *seeds, int n_seeds, nnt_tape_grad *grads,
                             int n_grads, nnt_error *err)
{
    if (!tp->be->accumulate) return nnt_tape_no_backward(err, "a mark", "accumulate");
    for (int k = 0; k < n_grads; k++) memset(grads[k].grad, 0, sizeof *grads[k].grad);
    for (int pass = 0; pass < 2; pass++) /* every tag asked for must have been marked */
        for (int k = 0; k < (pass ? n_grads : n_seeds); k++) {
            int tag = pass ? grads[k].tag : seeds[k].tag, found = 0;
            for (int i = 0; i < tp->n && !found; i++) found = tp->e[i].kind == TAPE_MARK && tp->e[i].tag == tag;
            if (!found)
                return nnt_err_set(err, NNT_ERR_INVALID_ARGUMENT, "the gradient tape holds no mark %d (%s %d)", tag,
                                   pass ? "wanted" : "seeded", k);
        }
    nnt_status st = nnt_tape_make_regions(tp, err);
    for (int i = tp->n - 1; i >= 0 && st == NNT_OK; i--) {
        const tape_entry *e = &tp->e[i];
        if (e->kind == TAPE_MARK)
            st = at_mark(tp, e, seeds, n_seeds, grads, n_grads, err);
        else if (e->kind == TAPE_AFFINE)
            st = affine_step(tp, e, err);
        else if (e->kind == TAPE_CONSTANT)
            st = nnt_tape_zero(tp, &(nnt_tensor){0}, err), st = st == NNT_OK ? clear_constant(tp, e, err) : st;
        else
            st = nnt_tape_backward_entry(tp, e, err);
        if (st == NNT_OK && e->kind == TAPE_DELTA_RULE && e->out[2].data) st = after_states(tp, i, grads, n_grads, err);
    }
    if (st != NNT_OK)
        for (int k = 0; k < n_grads; k++) nnt_tensor_free(grads[k].grad);
    nnt_tape_regions_free(tp);
    return st;
}
