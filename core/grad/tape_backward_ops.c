/* tape_backward_ops.c - the reverse step of each recorded op: take the gradient of what the op
 * wrote, clear it, and add the inputs' share through the backend's backward entries (or, for
 * the ops that only move values, through its forward ops and accumulate). */
#include <stdlib.h>
#include <string.h>

#include "grad/tape.h"

static nnt_status add_into(nnt_tape *tp, const nnt_tensor *dy, float f, const nnt_tensor *in, nnt_error *err)
{
    nnt_tensor b, *dx = nnt_tape_grad_of(tp, in, &b);
    return dx ? tp->be->accumulate(tp->be_ctx, dy, f, dx, err) : NNT_OK;
}

/* An F32 [rows, cols] scratch matrix of zeros in backend memory (*p to free). */
static nnt_status zeros(nnt_tape *tp, int64_t rows, int64_t cols, nnt_tensor *z, void **p, nnt_error *err)
{
    *z = (nnt_tensor){.dtype = NNT_F32, .ndim = 2, .shape = {rows, cols}};
    nnt_status st = tp->be->alloc(tp->be_ctx, (size_t)(rows * cols) * sizeof(float), p, err);
    z->data = *p;
    return st == NNT_OK ? tp->be->fill(tp->be_ctx, z, 0.0f, err) : st;
}

/* copy_cols: dst[:, dc + j] = src[:, sc + j]. The columns' gradient is moved to a scratch
 * matrix and cleared before it is added to the source columns', so src and dst may be one tensor
 * with overlapping columns. */
static nnt_status copy_cols_back(nnt_tape *tp, const tape_entry *e, nnt_error *err)
{
    const nnt_backend_ops *be = tp->be;
    void *c = tp->be_ctx, *p1 = NULL, *p2 = NULL;
    int64_t sc = e->i[0], dc = e->i[1], n = e->i[2], rows = e->out[0].shape[0];
    nnt_tensor gd = nnt_tape_adj(tp, &e->out[0]), gsb, *gs = nnt_tape_grad_of(tp, &e->in[0], &gsb), t1, z;
    if (!gd.data) return NNT_OK;
    nnt_status st = zeros(tp, rows, n, &t1, &p1, err);
    if (st == NNT_OK) st = zeros(tp, rows, n, &z, &p2, err);
    if (st == NNT_OK) st = be->copy_cols(c, &gd, dc, &t1, 0, n, err);
    if (st == NNT_OK) st = be->copy_cols(c, &z, 0, &gd, dc, n, err);
    if (st == NNT_OK && gs) st = be->copy_cols_backward(c, &t1, 0, gs, sc, n, err);
    if (p1) be->free(c, p1);
    if (p2) be->free(c, p2);
    return st;
}

/* scatter_rows / scatter_add_rows: dst[rows[i]] (+)= scale[i] src[i]. */
static nnt_status scatter_back(nnt_tape *tp, const tape_entry *e, nnt_error *err)
{
    const nnt_backend_ops *be = tp->be;
    void *c = tp->be_ctx, *p = NULL;
    int n = (int)e->i[0];
    const int32_t *rows = e->host[0];
    const float *scale = e->host[1];
    nnt_tensor gd = nnt_tape_adj(tp, &e->out[0]), gsb, *gs = nnt_tape_grad_of(tp, &e->in[0], &gsb), z;
    if (!gd.data) return NNT_OK;
    nnt_status st = NNT_OK;
    if (e->kind == TAPE_SCATTER_ADD_ROWS) {
        if (gs) st = be->scatter_add_rows_backward(c, &e->in[0], rows, scale, n, &gd, gs, NULL, err);
        return st; /* dst keeps its gradient: it was added to, not replaced */
    }
    if (gs) st = be->scatter_rows_backward(c, &e->in[0], rows, scale, n, &gd, gs, NULL, err);
    if (st == NNT_OK) st = zeros(tp, n, gd.shape[gd.ndim - 1], &z, &p, err);
    if (st == NNT_OK) st = be->scatter_rows(c, &z, rows, NULL, n, &gd, err); /* the replaced rows */
    if (p) be->free(c, p);
    return st;
}

static nnt_status swiglu_back(nnt_tape *tp, const tape_entry *e, nnt_error *err)
{
    nnt_tape_out_grad g = {0};
    nnt_status st = nnt_tape_take(tp, e, &e->out[1], &g, err);
    nnt_tensor bg, bu, ba, ga = {0};
    nnt_tensor *dup = nnt_tape_grad_of(tp, &e->in[1], &bu);
    if (st == NNT_OK && e->in[0].data) { /* act = silu(min(gate, limit)) was an output too */
        nnt_tensor *dgate = nnt_tape_grad_of(tp, &e->in[0], &bg);
        if (e->out[0].data) ga = nnt_tape_adj(tp, &e->out[0]);
        if (g.dy.data || ga.data)
            st = tp->be->swiglu_backward(tp->be_ctx, &e->keep[0], &e->keep[1], e->f, NULL, g.dy.data ? &g.dy : NULL,
                                         dgate, dup, ga.data ? &ga : NULL, err);
        if (st == NNT_OK && ga.data) st = nnt_tape_zero(tp, &ga, err);
    } else if (st == NNT_OK && g.dy.data) { /* act was the input */
        st = tp->be->swiglu_backward(tp->be_ctx, NULL, &e->keep[1], e->f, &e->keep[2], &g.dy, NULL, dup,
                                     nnt_tape_grad_of(tp, &e->in[2], &ba), err);
    }
    return nnt_tape_done(tp, &g, st, err);
}

/* The ops with one output that they replace whole. */
static nnt_status single(nnt_tape *tp, const tape_entry *e, const nnt_tensor *dy, nnt_error *err)
{
    const nnt_backend_ops *be = tp->be;
    void *c = tp->be_ctx;
    nnt_tensor b0, b1;
    nnt_tensor *d0 = nnt_tape_grad_of(tp, &e->in[0], &b0), *d1 = nnt_tape_grad_of(tp, &e->in[1], &b1);
    switch (e->kind) {
    case TAPE_LINEAR: return d0 ? be->linear_backward(c, dy, &e->in[1], d0, err) : NNT_OK;
    case TAPE_RMS_NORM:
        return d0 ? be->rms_norm_backward(c, &e->keep[0], e->in[1].data ? &e->in[1] : NULL, e->f, dy, d0, err) : NNT_OK;
    case TAPE_ADD: {
        nnt_status st = add_into(tp, dy, 1.0f, &e->in[0], err);
        return st == NNT_OK ? add_into(tp, dy, 1.0f, &e->in[1], err) : st;
    }
    case TAPE_COPY: return add_into(tp, dy, 1.0f, &e->in[0], err);
    case TAPE_SCALE: return add_into(tp, dy, e->f, &e->in[0], err);
    case TAPE_SWAP12: return d0 ? be->swap12_backward(c, dy, d0, err) : NNT_OK;
    case TAPE_ATTN_SCORES:
        return d0 || d1 ? be->attn_scores_backward(c, &e->keep[0], &e->keep[1], e->f, &e->mask, dy, d0, d1, err)
                        : NNT_OK;
    case TAPE_SOFTMAX: return d0 ? be->softmax_backward(c, &e->keep[0], e->host[0], dy, d0, err) : NNT_OK;
    case TAPE_ATTN_MIX:
        return d0 || d1 ? be->attn_mix_backward(c, &e->keep[0], &e->keep[1], dy, d0, d1, err) : NNT_OK;
    case TAPE_ROUTE:
        return d0 ? be->route_backward(c, &e->keep[0], e->in[1].data ? &e->in[1] : NULL, &e->route, &e->keep[1], dy,
                                       d0, err)
                  : NNT_OK;
    case TAPE_GATHER_ROWS:
        return d0 ? be->gather_rows_backward(c, dy, e->host[0], (int)e->i[0], d0, err) : NNT_OK;
    case TAPE_SUM_AXIS1: return d0 ? be->sum_axis1_backward(c, dy, d0, err) : NNT_OK;
    case TAPE_SCALE_ROWS: /* dy is a copy when y is x (in place): the caller took it before d0 is added to */
        return d0 || d1 ? be->scale_rows_backward(c, &e->keep[0], &e->keep[1], e->host[0], (int)e->i[0], dy, d0, d1,
                                                  err)
                        : NNT_OK;
    default: return nnt_err_set(err, NNT_ERR_INTERNAL, "the gradient tape met an entry of unknown kind %d", e->kind);
    }
}

nnt_status nnt_tape_backward_entry(nnt_tape *tp, const tape_entry *e, nnt_error *err)
{
    switch (e->kind) {
    case TAPE_ROPE: { /* in place: the gradient is rotated back where it is */
        nnt_tensor g = nnt_tape_adj(tp, &e->out[0]);
        if (!g.data) return NNT_OK;
        return tp->be->rope_backward(tp->be_ctx, &g, e->host[0], e->host[1], (int)e->i[0], (int)e->i[1],
                                     (nnt_rope_style)e->i[2], e->f, err);
    }
    case TAPE_COPY_COLS: return copy_cols_back(tp, e, err);
    case TAPE_SCATTER_ROWS:
    case TAPE_SCATTER_ADD_ROWS: return scatter_back(tp, e, err);
    case TAPE_SWIGLU: return swiglu_back(tp, e, err);
    case TAPE_HYPER_CONNECTION:
    case TAPE_HYPER_MIX:
    case TAPE_HYPER_HEAD:
    case TAPE_COMPRESS: return nnt_tape_backward_hyper(tp, e, err);
    case TAPE_CONV1D_CAUSAL:
    case TAPE_KDA_GATE:
    case TAPE_SIGMOID:
    case TAPE_DELTA_RULE:
    case TAPE_RMS_NORM_GATED:
    case TAPE_ZERO_ROWS: return nnt_tape_backward_recurrent(tp, e, err);
    default: break;
    }
    const nnt_tensor *out = e->kind == TAPE_ROUTE ? &e->out[1] : &e->out[0];
    nnt_tape_out_grad g = {0};
    nnt_status st = nnt_tape_take(tp, e, out, &g, err);
    if (st == NNT_OK && g.dy.data) st = single(tp, e, &g.dy, err);
    return nnt_tape_done(tp, &g, st, err);
}
