/* tape_backward_hyper.c - the reverse steps of DeepSeek-V4's recorded ops (hyper_connection,
 * hyper_mix, hyper_head, compress): each takes the gradient of what the op wrote, clears it, and
 * adds the inputs' share through the backend's backward entry. The indexer's scores were
 * recorded as a constant and need no step here. */
#include <stdlib.h>
#include <string.h>

#include "grad/tape.h"

static nnt_status hyper_connection_back(nnt_tape *tp, const tape_entry *e, nnt_error *err)
{
    nnt_tape_out_grad g[3] = {{.out = NULL}, {.out = NULL}, {.out = NULL}};
    nnt_status st = NNT_OK;
    for (int k = 0; k < 3 && st == NNT_OK; k++) st = nnt_tape_take(tp, e, &e->out[k], &g[k], err);
    const float *eps = e->host[3];
    nnt_tensor b, *dx = nnt_tape_grad_of(tp, &e->in[0], &b);
    if (st == NNT_OK && dx && (g[0].dy.data || g[1].dy.data || g[2].dy.data))
        st = tp->be->hyper_connection_backward(tp->be_ctx, &e->keep[0], e->host[0], e->host[1], e->host[2], eps[0], eps[1],
                                               (int)e->i[0], nnt_tape_dy_or_null(&g[0]), nnt_tape_dy_or_null(&g[1]),
                                               nnt_tape_dy_or_null(&g[2]), dx, err);
    for (int k = 0; k < 3; k++) st = nnt_tape_done(tp, &g[k], st, err);
    return st;
}

static nnt_status hyper_mix_back(nnt_tape *tp, const tape_entry *e, nnt_error *err)
{
    nnt_tape_out_grad g = {.out = NULL};
    nnt_status st = nnt_tape_take(tp, e, &e->out[0], &g, err);
    nnt_tensor b[4], *d[4];
    for (int k = 0; k < 4; k++) d[k] = nnt_tape_grad_of(tp, &e->in[k], &b[k]);
    if (st == NNT_OK && g.dy.data && (d[0] || d[1] || d[2] || d[3]))
        st = tp->be->hyper_mix_backward(tp->be_ctx, &e->keep[0], &e->keep[1], &e->keep[2], &e->keep[3], &g.dy, d[0], d[1],
                                        d[2], d[3], err);
    return nnt_tape_done(tp, &g, st, err);
}

static nnt_status hyper_head_back(nnt_tape *tp, const tape_entry *e, nnt_error *err)
{
    nnt_tape_out_grad g = {.out = NULL};
    nnt_status st = nnt_tape_take(tp, e, &e->out[0], &g, err);
    const float *eps = e->host[3];
    nnt_tensor b, *dx = nnt_tape_grad_of(tp, &e->in[0], &b);
    if (st == NNT_OK && g.dy.data && dx)
        st = tp->be->hyper_head_backward(tp->be_ctx, &e->keep[0], e->host[0], e->host[1], e->host[2], eps[0], eps[1],
                                         &g.dy, dx, err);
    return nnt_tape_done(tp, &g, st, err);
}

static nnt_status compress_back(nnt_tape *tp, const tape_entry *e, nnt_error *err)
{
    nnt_tape_out_grad g = {.out = NULL};
    nnt_status st = nnt_tape_take(tp, e, &e->out[0], &g, err);
    nnt_tensor bk, bg, *dkv = nnt_tape_grad_of(tp, &e->in[0], &bk), *dgate = nnt_tape_grad_of(tp, &e->in[1], &bg);
    if (st == NNT_OK && g.dy.data && (dkv || dgate))
        st = tp->be->compress_backward(tp->be_ctx, &e->keep[0], &e->keep[1], e->host[0], (int)e->i[0], (int)e->i[1],
                                       e->host[1], e->host[2], &g.dy, dkv, dgate, err);
    return nnt_tape_done(tp, &g, st, err);
}

nnt_status nnt_tape_backward_hyper(nnt_tape *tp, const tape_entry *e, nnt_error *err)
{
    switch (e->kind) {
    case TAPE_HYPER_CONNECTION: return hyper_connection_back(tp, e, err);
    case TAPE_HYPER_MIX: return hyper_mix_back(tp, e, err);
    case TAPE_HYPER_HEAD: return hyper_head_back(tp, e, err);
    case TAPE_COMPRESS: return compress_back(tp, e, err);
    default: return nnt_err_set(err, NNT_ERR_INTERNAL, "the gradient tape met an entry of unknown kind %d", e->kind);
    }
}
