/* tape_record.c - what every part of the gradient tape builds on: appending entries to the
 * record, keeping copies of the inputs a backward reads, the marks and constants the caller
 * records, and the refusal of an op whose backward the backend lacks. */
#include <stdlib.h>
#include <string.h>

#include "grad/tape.h"

void nnt_tape_entry_clear(const nnt_tape *tp, tape_entry *e)
{
    for (int k = 0; k < TAPE_SLOTS(e->keep); k++)
        if (e->keep[k].data) tp->be->free(tp->be_ctx, e->keep[k].data);
    for (int k = 0; k < TAPE_SLOTS(e->host); k++) free(e->host[k]);
    memset(e, 0, sizeof *e);
}

tape_entry *nnt_tape_push(nnt_tape *tp, tape_kind k, nnt_error *err)
{
    if (tp->n == tp->cap) {
        int cap = tp->cap ? tp->cap * 2 : 256;
        tape_entry *g = realloc(tp->e, (size_t)cap * sizeof *g);
        if (!g) {
            nnt_err_set(err, NNT_ERR_OUT_OF_MEMORY, "no memory for the gradient tape (%d ops recorded)", tp->n);
            return NULL;
        }
        tp->e = g;
        tp->cap = cap;
    }
    tape_entry *e = &tp->e[tp->n++];
    memset(e, 0, sizeof *e);
    e->kind = k;
    return e;
}

nnt_status nnt_tape_keep(nnt_tape *tp, const nnt_tensor *t, nnt_tensor *kept, nnt_error *err)
{
    *kept = *t;
    kept->data = NULL;
    size_t bytes = nnt_tensor_nbytes(t);
    nnt_status st = tp->be->alloc(tp->be_ctx, bytes ? bytes : 1, &kept->data, err);
    if (st != NNT_OK) {
        kept->data = NULL;
        return st;
    }
    st = tp->be->copy(tp->be_ctx, t, kept, err);
    if (st != NNT_OK) {
        tp->be->free(tp->be_ctx, kept->data);
        kept->data = NULL;
        return st;
    }
    tp->kept_bytes += bytes;
    return NNT_OK;
}

nnt_status nnt_tape_keep_host(const void *p, size_t n, void **kept, nnt_error *err)
{
    *kept = NULL;
    if (!p || n == 0) return NNT_OK;
    *kept = malloc(n);
    if (!*kept) return nnt_err_set(err, NNT_ERR_OUT_OF_MEMORY, "no memory for the gradient tape");
    memcpy(*kept, p, n);
    return NNT_OK;
}

/* 1 when [a, a + na) and [b, b + nb) share a byte. */
static int overlaps(const void *a, size_t na, const void *b, size_t nb)
{
    const char *x = a, *y = b;
    return x && y && x < y + nb && y < x + na;
}

/* 1 + the index of the delta_rule entry whose states t is, when that entry is the last to have
 * written t's memory; else 0. Such a mark answers after the entry's reverse step, which leaves
 * the states' total gradient (through every later token) where a mark reads it. */
static int64_t states_of(const nnt_tape *tp, const nnt_tensor *t)
{
    size_t n = nnt_tensor_nbytes(t);
    for (int i = tp->n - 1; i >= 0; i--) {
        const tape_entry *e = &tp->e[i];
        if (e->kind == TAPE_MARK) continue;
        for (int k = 0; k < TAPE_SLOTS(e->out); k++)
            if (overlaps(e->out[k].data, nnt_tensor_nbytes(&e->out[k]), t->data, n))
                return e->kind == TAPE_DELTA_RULE && k == 2 && e->out[2].data == t->data &&
                               nnt_tensor_nbytes(&e->out[2]) == n
                           ? i + 1
                           : 0;
    }
    return 0;
}

nnt_status nnt_tape_mark(nnt_tape *tp, int tag, const nnt_tensor *t, nnt_error *err)
{
    if (t->dtype != NNT_F32)
        return nnt_err_set(err, NNT_ERR_INVALID_ARGUMENT, "a gradient is taken only of float32 values; this one is %s",
                           nnt_dtype_name(t->dtype));
    int64_t after = states_of(tp, t);
    tape_entry *e = nnt_tape_push(tp, TAPE_MARK, err);
    if (!e) return NNT_ERR_OUT_OF_MEMORY;
    e->tag = tag;
    e->out[0] = *t;
    e->i[0] = after;
    return NNT_OK;
}

nnt_status nnt_tape_constant(nnt_tape *tp, const nnt_tensor *t, nnt_error *err)
{
    tape_entry *e = nnt_tape_push(tp, TAPE_CONSTANT, err);
    if (!e) return NNT_ERR_OUT_OF_MEMORY;
    e->out[0] = *t;
    return NNT_OK;
}

nnt_status nnt_tape_affine(nnt_tape *tp, const nnt_tensor *t, const float *a, nnt_error *err)
{
    if (t->dtype != NNT_F32)
        return nnt_err_set(err, NNT_ERR_INVALID_ARGUMENT, "an edit is differentiated only on float32 values; this one is %s",
                           nnt_dtype_name(t->dtype));
    tape_entry *e = nnt_tape_push(tp, TAPE_AFFINE, err);
    if (!e) return NNT_ERR_OUT_OF_MEMORY;
    e->out[0] = *t;
    nnt_status st = nnt_tape_keep_host(a, nnt_tensor_nbytes(t), &e->host[0], err);
    if (st != NNT_OK) tp->n--;
    return st;
}

int nnt_tape_written(const nnt_tape *tp, const nnt_tensor *t)
{
    size_t n = nnt_tensor_nbytes(t);
    for (int i = 0; i < tp->n; i++) {
        const tape_entry *e = &tp->e[i];
        if (e->kind == TAPE_MARK) continue;
        for (int k = 0; k < TAPE_SLOTS(e->out); k++)
            if (overlaps(e->out[k].data, nnt_tensor_nbytes(&e->out[k]), t->data, n)) return 1;
    }
    return 0;
}

size_t nnt_tape_kept_bytes(const nnt_tape *tp)
{
    return tp->kept_bytes;
}

nnt_status nnt_tape_no_backward(nnt_error *err, const char *op, const char *entry)
{
    return nnt_err_set(err, NNT_ERR_UNSUPPORTED,
                       "a gradient cannot pass through %s: the backend has no %s (its optional backward entry)", op,
                       entry);
}
