/* tape_backward_recurrent.c - the reverse steps of Kimi Delta Attention's recorded ops
 * (conv1d_causal, kda_gate, sigmoid, delta_rule, rms_norm_gated, zero_rows): each takes the
 * gradient of what the op wrote, clears it, and adds the inputs' share through the backend's
 * backward entry. zero_rows needs none: the rows it zeroed get a zero gradient. delta_rule's
 * states are the exception to clearing: their gradient is left holding each token's total
 * gradient for the marks on them, and the reverse pass clears it (tape_backward.c). */
#include <stdlib.h>
#include <string.h>

#include "grad/tape.h"

static nnt_status conv1d_back(nnt_tape *tp, const tape_entry *e, nnt_error *err)
{
    nnt_tape_out_grad gy = {.out = NULL}, gs = {.out = NULL};
    nnt_status st = nnt_tape_take(tp, e, &e->out[0], &gy, err);
    if (st == NNT_OK) st = nnt_tape_take(tp, e, &e->out[1], &gs, err);
    nnt_tensor bx, bs, *dx = nnt_tape_grad_of(tp, &e->in[0], &bx), *ds = nnt_tape_grad_of(tp, &e->in[1], &bs);
    if (st == NNT_OK && gy.dy.data && (dx || ds))
        st = tp->be->conv1d_causal_backward(tp->be_ctx, &e->keep[0], e->host[0], e->in[1].data ? &e->keep[1] : NULL,
                                            (int)e->i[0], &gy.dy, nnt_tape_dy_or_null(&gs), dx, ds, err);
    st = nnt_tape_done(tp, &gy, st, err);
    return nnt_tape_done(tp, &gs, st, err);
}

/* The ops with one output, replaced whole: kda_gate, sigmoid, rms_norm_gated. */
static nnt_status single_back(nnt_tape *tp, const tape_entry *e, nnt_error *err)
{
    nnt_tape_out_grad g = {.out = NULL};
    nnt_status st = nnt_tape_take(tp, e, &e->out[0], &g, err);
    nnt_tensor b0, b1, *d0 = nnt_tape_grad_of(tp, &e->in[0], &b0), *d1 = nnt_tape_grad_of(tp, &e->in[1], &b1);
    if (st != NNT_OK || !g.dy.data || !(d0 || d1)) return nnt_tape_done(tp, &g, st, err);
    void *c = tp->be_ctx;
    switch (e->kind) {
    case TAPE_KDA_GATE: st = tp->be->kda_gate_backward(c, &e->keep[0], e->host[0], e->host[1], &g.dy, d0, err); break;
    case TAPE_SIGMOID: st = tp->be->sigmoid_backward(c, &e->keep[0], &g.dy, d0, err); break;
    case TAPE_RMS_NORM_GATED:
        st = tp->be->rms_norm_gated_backward(c, &e->keep[0], e->host[0], &e->keep[1], e->f, &g.dy, d0, d1, err);
        break;
    default: st = nnt_err_set(err, NNT_ERR_INTERNAL, "the gradient tape met an entry of unknown kind %d", e->kind);
    }
    return nnt_tape_done(tp, &g, st, err);
}

/* o, state_out and states' gradients in; the states' gradient is replaced by the total one and
 * left in place (copied back there when it had to be taken as a copy). */
static nnt_status delta_rule_back(nnt_tape *tp, const tape_entry *e, nnt_error *err)
{
    nnt_tape_out_grad g[3] = {{.out = NULL}, {.out = NULL}, {.out = NULL}};
    nnt_status st = NNT_OK;
    for (int k = 0; k < 3 && st == NNT_OK; k++) st = nnt_tape_take(tp, e, &e->out[k], &g[k], err);
    nnt_tensor b[6], *d[6];
    int any = 0;
    for (int k = 0; k < 6; k++) any |= (d[k] = nnt_tape_grad_of(tp, &e->in[k], &b[k])) != NULL;
    nnt_tensor *dstates = g[2].dy.data ? &g[2].dy : NULL;
    if (st == NNT_OK && (any || dstates) && (g[0].dy.data || g[1].dy.data || dstates))
        st = tp->be->delta_rule_backward(tp->be_ctx, &e->keep[0], &e->keep[1], &e->keep[2], &e->keep[3], &e->keep[4],
                                         e->host[0], e->in[5].data ? &e->keep[5] : NULL, (int)e->i[0], e->f,
                                         nnt_tape_dy_or_null(&g[0]), nnt_tape_dy_or_null(&g[1]), dstates, d[0], d[1],
                                         d[2], d[3], d[4], d[5], err);
    if (st == NNT_OK && dstates && g[2].cleared) {
        nnt_tensor home = nnt_tape_adj(tp, &e->out[2]);
        st = tp->be->copy(tp->be_ctx, dstates, &home, err);
    }
    g[2].out = NULL; /* left for the marks on the states; tape_backward.c clears it */
    for (int k = 0; k < 3; k++) st = nnt_tape_done(tp, &g[k], st, err);
    return st;
}

/* zero_rows in place: the zeroed rows' gradient is cut. */
static nnt_status zero_rows_back(nnt_tape *tp, const tape_entry *e, nnt_error *err)
{
    nnt_tensor gx = nnt_tape_adj(tp, &e->out[0]);
    if (!gx.data || !e->host[0]) return NNT_OK;
    return tp->be->zero_rows(tp->be_ctx, &gx, e->host[0], err);
}

nnt_status nnt_tape_backward_recurrent(nnt_tape *tp, const tape_entry *e, nnt_error *err)
{
    switch (e->kind) {
    case TAPE_CONV1D_CAUSAL: return conv1d_back(tp, e, err);
    case TAPE_KDA_GATE:
    case TAPE_SIGMOID:
    case TAPE_RMS_NORM_GATED: return single_back(tp, e, err);
    case TAPE_DELTA_RULE: return delta_rule_back(tp, e, err);
    case TAPE_ZERO_ROWS: return zero_rows_back(tp, e, err);
    default: return nnt_err_set(err, NNT_ERR_INTERNAL, "the gradient tape met an entry of unknown kind %d", e->kind);
    }
}
