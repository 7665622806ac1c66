/* tape_ops_hyper.c - the gradient tape's entries for DeepSeek-V4's ops: the hyper-connection
 * weights, the stream mix, the readout collapse and the compressors are recorded with the
 * inputs their backward reads; the lightning indexer's scores are recorded as a constant (they
 * only choose which compressed entries a query keeps, and a choice has no gradient). Weights
 * (fn, base, scale, ape) are kept as descriptors, never copied: they outlive the record. */
#include <stdlib.h>
#include <string.h>

#include "grad/tape.h"

#define TP ((nnt_tape *)ctx)
#define REAL TP->be_ctx

/* host[at..at+2]: the descriptors of weights w0..w2 (NULL ones skipped) */
static nnt_status keep_weights(tape_entry *e, int at, const nnt_tensor *w0, const nnt_tensor *w1, const nnt_tensor *w2,
                               nnt_error *err)
{
    const nnt_tensor *w[3] = {w0, w1, w2};
    nnt_status st = NNT_OK;
    for (int k = 0; k < 3 && st == NNT_OK; k++)
        if (w[k]) st = nnt_tape_keep_host(w[k], sizeof *w[k], &e->host[at + k], err);
    return st;
}

/* host[3]: the two epsilons (rms_eps, hc_eps) */
static nnt_status keep_eps(tape_entry *e, float rms_eps, float hc_eps, nnt_error *err)
{
    float eps[2] = {rms_eps, hc_eps};
    return nnt_tape_keep_host(eps, sizeof eps, &e->host[3], err);
}

static nnt_status t_hyper_connection(void *ctx, const nnt_tensor *x, const nnt_tensor *fn, const nnt_tensor *base,
                                     const nnt_tensor *scale, float rms_eps, float hc_eps, int iters, nnt_tensor *post,
                                     nnt_tensor *comb, nnt_tensor *collapsed, nnt_error *err)
{
    if (!TP->recording)
        return TP->be->hyper_connection(REAL, x, fn, base, scale, rms_eps, hc_eps, iters, post, comb, collapsed, err);
    if (!TP->be->hyper_connection_backward)
        return nnt_tape_no_backward(err, "hyper_connection", "hyper_connection_backward");
    tape_entry *e = nnt_tape_push(TP, TAPE_HYPER_CONNECTION, err);
    if (!e) return NNT_ERR_OUT_OF_MEMORY;
    e->in[0] = *x;
    e->out[0] = *post;
    e->out[1] = *comb;
    e->out[2] = *collapsed;
    e->i[0] = iters;
    nnt_status st = keep_weights(e, 0, fn, base, scale, err);
    if (st == NNT_OK) st = keep_eps(e, rms_eps, hc_eps, err);
    if (st == NNT_OK) st = nnt_tape_keep(TP, x, &e->keep[0], err);
    return st == NNT_OK ? TP->be->hyper_connection(REAL, x, fn, base, scale, rms_eps, hc_eps, iters, post, comb,
                                                   collapsed, err)
                        : st;
}

static nnt_status t_hyper_mix(void *ctx, const nnt_tensor *x, const nnt_tensor *a, const nnt_tensor *post,
                              const nnt_tensor *comb, nnt_tensor *out, nnt_error *err)
{
    if (!TP->recording) return TP->be->hyper_mix(REAL, x, a, post, comb, out, err);
    if (!TP->be->hyper_mix_backward) return nnt_tape_no_backward(err, "hyper_mix", "hyper_mix_backward");
    tape_entry *e = nnt_tape_push(TP, TAPE_HYPER_MIX, err);
    if (!e) return NNT_ERR_OUT_OF_MEMORY;
    const nnt_tensor *in[4] = {x, a, post, comb};
    nnt_status st = NNT_OK;
    for (int k = 0; k < 4 && st == NNT_OK; k++) {
        e->in[k] = *in[k];
        st = nnt_tape_keep(TP, in[k], &e->keep[k], err);
    }
    e->out[0] = *out;
    return st == NNT_OK ? TP->be->hyper_mix(REAL, x, a, post, comb, out, err) : st;
}

static nnt_status t_hyper_head(void *ctx, const nnt_tensor *x, const nnt_tensor *fn, const nnt_tensor *base,
                               const nnt_tensor *scale, float rms_eps, float hc_eps, nnt_tensor *y, nnt_error *err)
{
    if (!TP->recording) return TP->be->hyper_head(REAL, x, fn, base, scale, rms_eps, hc_eps, y, err);
    if (!TP->be->hyper_head_backward) return nnt_tape_no_backward(err, "hyper_head", "hyper_head_backward");
    tape_entry *e = nnt_tape_push(TP, TAPE_HYPER_HEAD, err);
    if (!e) return NNT_ERR_OUT_OF_MEMORY;
    e->in[0] = *x;
    e->out[0] = *y;
    nnt_status st = keep_weights(e, 0, fn, base, scale, err);
    if (st == NNT_OK) st = keep_eps(e, rms_eps, hc_eps, err);
    if (st == NNT_OK) st = nnt_tape_keep(TP, x, &e->keep[0], err);
    return st == NNT_OK ? TP->be->hyper_head(REAL, x, fn, base, scale, rms_eps, hc_eps, y, err) : st;
}

static nnt_status t_compress(void *ctx, const nnt_tensor *kv, const nnt_tensor *gate, const nnt_tensor *ape, int rate,
                             int overlap, const int32_t *first, const int32_t *count, nnt_tensor *out, nnt_error *err)
{
    if (!TP->recording) return TP->be->compress(REAL, kv, gate, ape, rate, overlap, first, count, out, err);
    if (!TP->be->compress_backward) return nnt_tape_no_backward(err, "compress", "compress_backward");
    tape_entry *e = nnt_tape_push(TP, TAPE_COMPRESS, err);
    if (!e) return NNT_ERR_OUT_OF_MEMORY;
    e->in[0] = *kv;
    e->in[1] = *gate;
    e->out[0] = *out;
    e->i[0] = rate;
    e->i[1] = overlap;
    size_t rows = (size_t)(kv->ndim > 0 ? kv->shape[0] : 0) * sizeof(int32_t); /* B of each host array */
    nnt_status st = keep_weights(e, 0, ape, NULL, NULL, err);
    if (st == NNT_OK) st = nnt_tape_keep_host(first, rows, &e->host[1], err);
    if (st == NNT_OK) st = nnt_tape_keep_host(count, rows, &e->host[2], err);
    if (st == NNT_OK) st = nnt_tape_keep(TP, kv, &e->keep[0], err);
    if (st == NNT_OK) st = nnt_tape_keep(TP, gate, &e->keep[1], err);
    return st == NNT_OK ? TP->be->compress(REAL, kv, gate, ape, rate, overlap, first, count, out, err) : st;
}

/* The scores choose, and choosing has no gradient: their memory holds a constant. */
static nnt_status t_indexer_scores(void *ctx, const nnt_tensor *q, const nnt_tensor *k, const nnt_tensor *w, float s,
                                   nnt_tensor *out, nnt_error *err)
{
    nnt_status st = TP->be->indexer_scores(REAL, q, k, w, s, out, err);
    if (!TP->recording || st != NNT_OK) return st;
    return nnt_tape_constant(TP, out, err);
}

void nnt_tape_ops_init_hyper(nnt_backend_ops *o, const nnt_backend_ops *be)
{
#define WRAP(name) o->name = be->name ? t_##name : NULL
    WRAP(hyper_connection);
    WRAP(hyper_mix);
    WRAP(hyper_head);
    WRAP(compress);
    WRAP(indexer_scores);
#undef WRAP
}
