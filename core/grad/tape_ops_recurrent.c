/* tape_ops_recurrent.c - the gradient tape's entries for Kimi Delta Attention's ops: the causal
 * convolution, the forget gate, sigmoid, the gated delta rule, the gated RMSNorm and the
 * zeroing of padding rows, each recorded with the inputs its backward reads. Weights (the
 * convolution kernel, dt_bias, a_log, the norm gain) are kept as descriptors, never copied:
 * they outlive the record. */
#include <stdlib.h>
#include <string.h>

#include "grad/tape.h"

#define TP ((nnt_tape *)ctx)
#define REAL TP->be_ctx

/* host[at]: the descriptor of weight w */
static nnt_status keep_weight(tape_entry *e, int at, const nnt_tensor *w, nnt_error *err)
{
    return w ? nnt_tape_keep_host(w, sizeof *w, &e->host[at], err) : NNT_OK;
}

/* x and state_in kept; w a weight. */
static nnt_status t_conv1d_causal(void *ctx, const nnt_tensor *x, const nnt_tensor *w, const nnt_tensor *s, int act,
                                  nnt_tensor *y, nnt_tensor *so, nnt_error *err)
{
    if (!TP->recording) return TP->be->conv1d_causal(REAL, x, w, s, act, y, so, err);
    if (!TP->be->conv1d_causal_backward)
        return nnt_tape_no_backward(err, "conv1d_causal", "conv1d_causal_backward");
    tape_entry *e = nnt_tape_push(TP, TAPE_CONV1D_CAUSAL, err);
    if (!e) return NNT_ERR_OUT_OF_MEMORY;
    e->in[0] = *x;
    if (s) e->in[1] = *s;
    e->out[0] = *y;
    if (so) e->out[1] = *so;
    e->i[0] = act;
    nnt_status st = keep_weight(e, 0, w, err);
    if (st == NNT_OK) st = nnt_tape_keep(TP, x, &e->keep[0], err);
    if (st == NNT_OK && s) st = nnt_tape_keep(TP, s, &e->keep[1], err);
    return st == NNT_OK ? TP->be->conv1d_causal(REAL, x, w, s, act, y, so, err) : st;
}

static nnt_status t_kda_gate(void *ctx, const nnt_tensor *a, const nnt_tensor *dt_bias, const nnt_tensor *a_log,
                             nnt_tensor *g, nnt_error *err)
{
    if (!TP->recording) return TP->be->kda_gate(REAL, a, dt_bias, a_log, g, err);
    if (!TP->be->kda_gate_backward) return nnt_tape_no_backward(err, "kda_gate", "kda_gate_backward");
    tape_entry *e = nnt_tape_push(TP, TAPE_KDA_GATE, err);
    if (!e) return NNT_ERR_OUT_OF_MEMORY;
    e->in[0] = *a;
    e->out[0] = *g;
    nnt_status st = keep_weight(e, 0, dt_bias, err);
    if (st == NNT_OK) st = keep_weight(e, 1, a_log, err);
    if (st == NNT_OK) st = nnt_tape_keep(TP, a, &e->keep[0], err);
    return st == NNT_OK ? TP->be->kda_gate(REAL, a, dt_bias, a_log, g, err) : st;
}

/* The backward reads the output (the forward may run in place): kept after the call. */
static nnt_status t_sigmoid(void *ctx, const nnt_tensor *x, nnt_tensor *y, nnt_error *err)
{
    if (!TP->recording) return TP->be->sigmoid(REAL, x, y, err);
    if (!TP->be->sigmoid_backward) return nnt_tape_no_backward(err, "sigmoid", "sigmoid_backward");
    tape_entry *e = nnt_tape_push(TP, TAPE_SIGMOID, err);
    if (!e) return NNT_ERR_OUT_OF_MEMORY;
    e->in[0] = *x;
    e->out[0] = *y;
    nnt_status st = TP->be->sigmoid(REAL, x, y, err);
    return st == NNT_OK ? nnt_tape_keep(TP, y, &e->keep[0], err) : st;
}

/* q, k, v, g, beta and state_in kept (in[0..5]), token_valid on the host. */
static nnt_status t_delta_rule(void *ctx, const nnt_tensor *q, const nnt_tensor *k, const nnt_tensor *v,
                               const nnt_tensor *g, const nnt_tensor *beta, const uint8_t *tv, const nnt_tensor *si,
                               int l2norm, float scale, nnt_tensor *o, nnt_tensor *so, nnt_tensor *ss, nnt_error *err)
{
    if (!TP->recording) return TP->be->delta_rule(REAL, q, k, v, g, beta, tv, si, l2norm, scale, o, so, ss, err);
    if (!TP->be->delta_rule_backward) return nnt_tape_no_backward(err, "delta_rule", "delta_rule_backward");
    tape_entry *e = nnt_tape_push(TP, TAPE_DELTA_RULE, err);
    if (!e) return NNT_ERR_OUT_OF_MEMORY;
    const nnt_tensor *in[6] = {q, k, v, g, beta, si};
    nnt_status st = NNT_OK;
    for (int j = 0; j < 6 && st == NNT_OK; j++)
        if (in[j]) {
            e->in[j] = *in[j];
            st = nnt_tape_keep(TP, in[j], &e->keep[j], err);
        }
    e->out[0] = *o;
    if (so) e->out[1] = *so;
    if (ss) e->out[2] = *ss;
    e->i[0] = l2norm;
    e->f = scale;
    size_t rows = (size_t)(q->ndim >= 2 ? q->shape[0] * q->shape[1] : 0); /* B T */
    if (st == NNT_OK) st = nnt_tape_keep_host(tv, rows, &e->host[0], err);
    return st == NNT_OK ? TP->be->delta_rule(REAL, q, k, v, g, beta, tv, si, l2norm, scale, o, so, ss, err) : st;
}

static nnt_status t_rms_norm_gated(void *ctx, const nnt_tensor *x, const nnt_tensor *w, const nnt_tensor *gate,
                                   float eps, nnt_tensor *y, nnt_error *err)
{
    if (!TP->recording) return TP->be->rms_norm_gated(REAL, x, w, gate, eps, y, err);
    if (!TP->be->rms_norm_gated_backward)
        return nnt_tape_no_backward(err, "rms_norm_gated", "rms_norm_gated_backward");
    tape_entry *e = nnt_tape_push(TP, TAPE_RMS_NORM_GATED, err);
    if (!e) return NNT_ERR_OUT_OF_MEMORY;
    e->in[0] = *x;
    e->in[1] = *gate;
    e->out[0] = *y;
    e->f = eps;
    nnt_status st = keep_weight(e, 0, w, err);
    if (st == NNT_OK) st = nnt_tape_keep(TP, x, &e->keep[0], err);
    if (st == NNT_OK) st = nnt_tape_keep(TP, gate, &e->keep[1], err);
    return st == NNT_OK ? TP->be->rms_norm_gated(REAL, x, w, gate, eps, y, err) : st;
}

/* In place; its reverse zeroes the same rows of the gradient with zero_rows (no backward entry). */
static nnt_status t_zero_rows(void *ctx, nnt_tensor *x, const uint8_t *valid, nnt_error *err)
{
    if (!TP->recording) return TP->be->zero_rows(REAL, x, valid, err);
    tape_entry *e = nnt_tape_push(TP, TAPE_ZERO_ROWS, err);
    if (!e) return NNT_ERR_OUT_OF_MEMORY;
    e->in[0] = *x;
    e->out[0] = *x;
    size_t rows = (size_t)(x->ndim > 0 ? x->shape[0] : 0);
    nnt_status st = nnt_tape_keep_host(valid, rows, &e->host[0], err);
    return st == NNT_OK ? TP->be->zero_rows(REAL, x, valid, err) : st;
}

void nnt_tape_ops_init_recurrent(nnt_backend_ops *o, const nnt_backend_ops *be)
{
#define WRAP(name) o->name = be->name ? t_##name : NULL
    WRAP(conv1d_causal);
    WRAP(kda_gate);
    WRAP(sigmoid);
    WRAP(delta_rule);
    WRAP(rms_norm_gated);
    WRAP(zero_rows);
#undef WRAP
}
