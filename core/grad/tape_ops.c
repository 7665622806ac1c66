/* tape_ops.c - the gradient tape's op table: each entry runs the backend's op and records it,
 * keeping the inputs its backward reads. Memory ops pass straight through (an upload records
 * that its destination now holds a constant); an op whose backward entry the backend lacks is
 * refused by name. */
#include <stdlib.h>
#include <string.h>

#include "grad/tape.h"

#define TP ((nnt_tape *)ctx)
#define REAL TP->be_ctx

/* ---- memory: straight through ---- */

static nnt_status t_alloc(void *ctx, size_t bytes, void **ptr, nnt_error *err)
{
    return TP->be->alloc(REAL, bytes, ptr, err);
}
static void t_free(void *ctx, void *ptr)
{
    TP->be->free(REAL, ptr);
}
static nnt_status t_download(void *ctx, void *dst, const void *src, size_t bytes, nnt_error *err)
{
    return TP->be->download(REAL, dst, src, bytes, err);
}
static nnt_status t_prepare_weight(void *ctx, const nnt_tensor *host, nnt_tensor *out, nnt_error *err)
{
    return TP->be->prepare_weight(REAL, host, out, err);
}
static void t_release_weight(void *ctx, nnt_tensor *w)
{
    TP->be->release_weight(REAL, w);
}
static size_t t_weight_bytes(void *ctx)
{
    return TP->be->weight_bytes(REAL);
}

/* A tensor standing for `bytes` bytes at p, for constants written by byte count. */
static nnt_tensor bytes_tensor(void *p, size_t bytes)
{
    nnt_tensor t = {.dtype = NNT_U8, .ndim = 1, .shape = {(int64_t)bytes}, .data = p};
    return t;
}

static nnt_status t_upload(void *ctx, void *dst, const void *src, size_t bytes, nnt_error *err)
{
    if (!TP->recording) return TP->be->upload(REAL, dst, src, bytes, err);
    nnt_status st = TP->be->upload(REAL, dst, src, bytes, err);
    nnt_tensor t = bytes_tensor(dst, bytes);
    return st == NNT_OK ? nnt_tape_constant(TP, &t, err) : st;
}

static nnt_status t_fill(void *ctx, nnt_tensor *t, float value, nnt_error *err)
{
    if (!TP->recording) return TP->be->fill(REAL, t, value, err);
    nnt_status st = TP->be->fill(REAL, t, value, err);
    return st == NNT_OK ? nnt_tape_constant(TP, t, err) : st;
}

static nnt_status t_embedding(void *ctx, const nnt_tensor *table, const nnt_tensor *ids, nnt_tensor *y, nnt_error *err)
{
    if (!TP->recording) return TP->be->embedding(REAL, table, ids, y, err);
    nnt_status st = TP->be->embedding(REAL, table, ids, y, err);
    return st == NNT_OK ? nnt_tape_constant(TP, y, err) : st; /* no gradient reaches a weight */
}

/* ---- dense algebra ---- */

static nnt_status t_linear(void *ctx, const nnt_tensor *x, const nnt_tensor *w, nnt_tensor *y, nnt_error *err)
{
    if (!TP->recording) return TP->be->linear(REAL, x, w, y, err);
    if (!TP->be->linear_backward) return nnt_tape_no_backward(err, "linear", "linear_backward");
    tape_entry *e = nnt_tape_push(TP, TAPE_LINEAR, err);
    if (!e) return NNT_ERR_OUT_OF_MEMORY;
    e->in[0] = *x;
    e->in[1] = *w; /* a weight: read again in the backward, never copied */
    e->out[0] = *y;
    return TP->be->linear(REAL, x, w, y, err);
}

static nnt_status t_rms_norm(void *ctx, const nnt_tensor *x, const nnt_tensor *w, float eps, nnt_tensor *y,
                             nnt_error *err)
{
    if (!TP->recording) return TP->be->rms_norm(REAL, x, w, eps, y, err);
    if (!TP->be->rms_norm_backward) return nnt_tape_no_backward(err, "rms_norm", "rms_norm_backward");
    tape_entry *e = nnt_tape_push(TP, TAPE_RMS_NORM, err);
    if (!e) return NNT_ERR_OUT_OF_MEMORY;
    e->in[0] = *x;
    if (w) e->in[1] = *w;
    e->out[0] = *y;
    e->f = eps;
    nnt_status st = nnt_tape_keep(TP, x, &e->keep[0], err); /* before the op: y may alias x */
    return st == NNT_OK ? TP->be->rms_norm(REAL, x, w, eps, y, err) : st;
}

static nnt_status need_accumulate(const nnt_tape *tp, nnt_error *err, const char *op)
{
    return tp->be->accumulate ? NNT_OK : nnt_tape_no_backward(err, op, "accumulate");
}

static nnt_status t_add(void *ctx, const nnt_tensor *a, const nnt_tensor *b, nnt_tensor *y, nnt_error *err)
{
    if (!TP->recording) return TP->be->add(REAL, a, b, y, err);
    nnt_status st = need_accumulate(TP, err, "add");
    tape_entry *e = st == NNT_OK ? nnt_tape_push(TP, TAPE_ADD, err) : NULL;
    if (!e) return st != NNT_OK ? st : NNT_ERR_OUT_OF_MEMORY;
    e->in[0] = *a;
    e->in[1] = *b;
    e->out[0] = *y;
    return TP->be->add(REAL, a, b, y, err);
}

static nnt_status t_swap12(void *ctx, const nnt_tensor *x, nnt_tensor *y, nnt_error *err)
{
    if (!TP->recording) return TP->be->swap12(REAL, x, y, err);
    if (!TP->be->swap12_backward) return nnt_tape_no_backward(err, "swap12", "swap12_backward");
    tape_entry *e = nnt_tape_push(TP, TAPE_SWAP12, err);
    if (!e) return NNT_ERR_OUT_OF_MEMORY;
    e->in[0] = *x;
    e->out[0] = *y;
    return TP->be->swap12(REAL, x, y, err);
}

static nnt_status t_copy(void *ctx, const nnt_tensor *src, nnt_tensor *dst, nnt_error *err)
{
    if (!TP->recording) return TP->be->copy(REAL, src, dst, err);
    nnt_status st = TP->be->copy(REAL, src, dst, err);
    if (st != NNT_OK) return st;
    if (src->dtype != NNT_F32) return nnt_tape_constant(TP, dst, err); /* indices, not values */
    if ((st = need_accumulate(TP, err, "copy")) != NNT_OK) return st;
    tape_entry *e = nnt_tape_push(TP, TAPE_COPY, err);
    if (!e) return NNT_ERR_OUT_OF_MEMORY;
    e->in[0] = *src;
    e->out[0] = *dst;
    return NNT_OK;
}

static nnt_status t_scale(void *ctx, const nnt_tensor *x, float factor, nnt_tensor *y, nnt_error *err)
{
    if (!TP->recording) return TP->be->scale(REAL, x, factor, y, err);
    nnt_status st = need_accumulate(TP, err, "scale");
    tape_entry *e = st == NNT_OK ? nnt_tape_push(TP, TAPE_SCALE, err) : NULL;
    if (!e) return st != NNT_OK ? st : NNT_ERR_OUT_OF_MEMORY;
    e->in[0] = *x;
    e->out[0] = *y;
    e->f = factor;
    return TP->be->scale(REAL, x, factor, y, err);
}

/* ---- attention ---- */

static nnt_status t_rope(void *ctx, nnt_tensor *x, const int32_t *pos, const float *inv_freq, int rot_start,
                         int rot_dim, nnt_rope_style style, float mscale, nnt_error *err)
{
    if (!TP->recording) return TP->be->rope(REAL, x, pos, inv_freq, rot_start, rot_dim, style, mscale, err);
    if (!TP->be->rope_backward) return nnt_tape_no_backward(err, "rope", "rope_backward");
    tape_entry *e = nnt_tape_push(TP, TAPE_ROPE, err);
    if (!e) return NNT_ERR_OUT_OF_MEMORY;
    e->in[0] = *x;
    e->out[0] = *x;
    e->f = mscale;
    e->i[0] = rot_start;
    e->i[1] = rot_dim;
    e->i[2] = style;
    size_t n_pos = (size_t)(x->shape[0] * x->shape[2]);
    nnt_status st = nnt_tape_keep_host(pos, n_pos * sizeof *pos, &e->host[0], err);
    if (st == NNT_OK) st = nnt_tape_keep_host(inv_freq, (size_t)(rot_dim / 2) * sizeof *inv_freq, &e->host[1], err);
    return st == NNT_OK ? TP->be->rope(REAL, x, pos, inv_freq, rot_start, rot_dim, style, mscale, err) : st;
}

/* Copies mask m of a [B, T] x [B, S] score grid into e (its arrays into e->host[0..5]). */
static nnt_status keep_mask(tape_entry *e, const nnt_attn_mask *m, int64_t B, int64_t T, int64_t S, nnt_error *err)
{
    e->mask = *m;
    size_t bt = (size_t)(B * T), bs = (size_t)(B * S);
    nnt_status st = nnt_tape_keep_host(m->q_pos, bt * sizeof(int32_t), &e->host[0], err);
    if (st == NNT_OK) st = nnt_tape_keep_host(m->k_pos, bs * sizeof(int32_t), &e->host[1], err);
    if (st == NNT_OK) st = nnt_tape_keep_host(m->key_valid, bs, &e->host[2], err);
    if (st == NNT_OK) st = nnt_tape_keep_host(m->query_valid, bt, &e->host[3], err);
    if (st == NNT_OK) st = nnt_tape_keep_host(m->key_no_window, (size_t)S, &e->host[4], err);
    if (st == NNT_OK) st = nnt_tape_keep_host(m->allow, bt * (size_t)S, &e->host[5], err);
    e->mask.q_pos = e->host[0];
    e->mask.k_pos = e->host[1];
    e->mask.key_valid = e->host[2];
    e->mask.query_valid = e->host[3];
    e->mask.key_no_window = e->host[4];
    e->mask.allow = e->host[5];
    return st;
}

static nnt_status t_attn_scores(void *ctx, const nnt_tensor *q, const nnt_tensor *k, float scale,
                                const nnt_attn_mask *mask, nnt_tensor *s, nnt_error *err)
{
    if (!TP->recording) return TP->be->attn_scores(REAL, q, k, scale, mask, s, err);
    if (!TP->be->attn_scores_backward) return nnt_tape_no_backward(err, "attn_scores", "attn_scores_backward");
    tape_entry *e = nnt_tape_push(TP, TAPE_ATTN_SCORES, err);
    if (!e) return NNT_ERR_OUT_OF_MEMORY;
    e->in[0] = *q;
    e->in[1] = *k;
    e->out[0] = *s;
    e->f = scale;
    nnt_status st = keep_mask(e, mask, q->shape[0], q->shape[2], k->shape[2], err);
    if (st == NNT_OK) st = nnt_tape_keep(TP, q, &e->keep[0], err);
    if (st == NNT_OK) st = nnt_tape_keep(TP, k, &e->keep[1], err);
    return st == NNT_OK ? TP->be->attn_scores(REAL, q, k, scale, &e->mask, s, err) : st;
}

static nnt_status t_softmax(void *ctx, const nnt_tensor *s, const float *sinks, nnt_tensor *p, nnt_error *err)
{
    if (!TP->recording) return TP->be->softmax(REAL, s, sinks, p, err);
    if (!TP->be->softmax_backward) return nnt_tape_no_backward(err, "softmax", "softmax_backward");
    tape_entry *e = nnt_tape_push(TP, TAPE_SOFTMAX, err);
    if (!e) return NNT_ERR_OUT_OF_MEMORY;
    e->in[0] = *s;
    e->out[0] = *p;
    nnt_status st = nnt_tape_keep_host(sinks, (size_t)s->shape[1] * sizeof *sinks, &e->host[0], err);
    if (st == NNT_OK) st = TP->be->softmax(REAL, s, sinks, p, err);
    return st == NNT_OK ? nnt_tape_keep(TP, p, &e->keep[0], err) : st; /* the backward reads the output */
}

static nnt_status t_attn_mix(void *ctx, const nnt_tensor *p, const nnt_tensor *v, nnt_tensor *o, nnt_error *err)
{
    if (!TP->recording) return TP->be->attn_mix(REAL, p, v, o, err);
    if (!TP->be->attn_mix_backward) return nnt_tape_no_backward(err, "attn_mix", "attn_mix_backward");
    tape_entry *e = nnt_tape_push(TP, TAPE_ATTN_MIX, err);
    if (!e) return NNT_ERR_OUT_OF_MEMORY;
    e->in[0] = *p;
    e->in[1] = *v;
    e->out[0] = *o;
    nnt_status st = nnt_tape_keep(TP, p, &e->keep[0], err);
    if (st == NNT_OK) st = nnt_tape_keep(TP, v, &e->keep[1], err);
    return st == NNT_OK ? TP->be->attn_mix(REAL, p, v, o, err) : st;
}

/* No tape entry of its own: while recording (or when the INI turned it off) it declines, so the
 * kit runs the three ops above, whose entries the backward reads. */
static nnt_status t_attn_fused(void *ctx, const nnt_tensor *q, const nnt_tensor *k, const nnt_tensor *v, float scale,
                               const nnt_attn_mask *mask, const float *sinks, nnt_tensor *o, int *done, nnt_error *err)
{
    if (!TP->recording && !TP->unfused) return TP->be->attn_fused(REAL, q, k, v, scale, mask, sinks, o, done, err);
    if (!done) return nnt_err_set(err, NNT_ERR_INVALID_ARGUMENT, "attn_fused: done is NULL");
    *done = 0;
    return NNT_OK;
}

void nnt_tape_ops_init(nnt_tape *tp)
{
    const nnt_backend_ops *be = tp->be;
    nnt_backend_ops *o = &tp->ops;
    memset(o, 0, sizeof *o); /* a backend entry is never copied: it would be called with the tape as its context */
    o->struct_size = sizeof *o;
    o->alloc = t_alloc;
    o->free = t_free;
    o->upload = t_upload;
    o->download = t_download;
    o->prepare_weight = t_prepare_weight;
    o->release_weight = t_release_weight;
    o->weight_bytes = t_weight_bytes;
#define WRAP(name) o->name = be->name ? t_##name : NULL
    WRAP(linear);
    WRAP(rms_norm);
    WRAP(embedding);
    WRAP(add);
    WRAP(swap12);
    WRAP(copy);
    WRAP(fill);
    WRAP(scale);
    WRAP(rope);
    WRAP(attn_scores);
    WRAP(softmax);
    WRAP(attn_mix);
    WRAP(attn_fused);
#undef WRAP
    o->features = 0; /* set by nnt_tape_record: the backend's when not recording */
    nnt_tape_ops_init_moe(o, be);
    nnt_tape_ops_init_hyper(o, be);
    nnt_tape_ops_init_recurrent(o, be);
}
