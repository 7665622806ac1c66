/* tape.c - the gradient tape's record: creating and freeing a tape, appending entries, keeping
 * copies of the inputs a backward reads, and the marks and constants the caller records. The
 * recording op table is in tape_ops.c, the reverse pass in tape_backward.c. */
#include <stdlib.h>
#include <string.h>

#include "grad/tape.h"

nnt_status nnt_tape_new(const nnt_backend_ops *be, void *be_ctx, nnt_tape **out, nnt_error *err)
{
    *out = NULL;
    nnt_tape *tp = calloc(1, sizeof *tp);
    if (!tp) return nnt_err_set(err, NNT_ERR_OUT_OF_MEMORY, "no memory for a gradient tape");
    tp->be = be;
    tp->be_ctx = be_ctx;
    nnt_tape_ops_init(tp);
    *out = tp;
    return NNT_OK;
}

void nnt_tape_entry_clear(const nnt_tape *tp, tape_entry *e)
{
    for (int k = 0; k < 3; k++)
        if (e->keep[k].data) tp->be->free(tp->be_ctx, e->keep[k].data);
    for (int k = 0; k < 7; k++) free(e->host[k]);
    memset(e, 0, sizeof *e);
}

void nnt_tape_free(nnt_tape *tp)
{
    if (!tp) return;
    for (int i = 0; i < tp->n; i++) nnt_tape_entry_clear(tp, &tp->e[i]);
    free(tp->e);
    nnt_tape_regions_free(tp);
    free(tp);
}

const nnt_backend_ops *nnt_tape_ops(const nnt_tape *tp)
{
    return &tp->ops;
}

void *nnt_tape_ctx(nnt_tape *tp)
{
    return tp;
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

nnt_status nnt_tape_mark(nnt_tape *tp, int tag, const nnt_tensor *t, nnt_error *err)
{
    if (t->dtype != NNT_F32)
        return nnt_err_set(err, NNT_ERR_INVALID_ARGUMENT, "a gradient is taken only of float32 values; this one is %s",
                           nnt_dtype_name(t->dtype));
    tape_entry *e = nnt_tape_push(tp, TAPE_MARK, err);
    if (!e) return NNT_ERR_OUT_OF_MEMORY;
    e->tag = tag;
    e->out[0] = *t;
    return NNT_OK;
}

nnt_status nnt_tape_constant(nnt_tape *tp, const nnt_tensor *t, nnt_error *err)
{
    tape_entry *e = nnt_tape_push(tp, TAPE_CONSTANT, err);
    if (!e) return NNT_ERR_OUT_OF_MEMORY;
    e->out[0] = *t;
    return NNT_OK;
}

size_t nnt_tape_kept_bytes(const nnt_tape *tp)
{
    return tp->kept_bytes;
}
