/* trace_window.c - saves filled part by part along one axis: a chunk of a longer prompt
 * (chunked prefill) along the token axis, or a block of queries of an attention pattern
 * (trace_parts.c): a save's slice resolved on the whole extent, the part at hand picked out and
 * written into the whole save at its place along that axis. */
#include <string.h>

#include "trace/trace_internal.h"

int nnt_trace_token_axis(const char *axes)
{
    if (!axes) return -1;
    const char *w = axes + (axes[0] == '[');
    for (int d = 0; *w && *w != ']'; d++) {
        size_t len = strcspn(w, " ]");
        if (len == 3 && strncmp(w, "seq", 3) == 0) return d;
        w += len;
        while (*w == ' ') w++;
    }
    return -1;
}

int64_t nnt_trace_window_select(const trace_window *w, const axis_sel *full, axis_sel *local, int64_t *first)
{
    /* the entries i of full with t0 <= start + i step < t0 + n */
    int64_t lo = w->t0 - full->start, hi = w->t0 + w->n - full->start; /* offsets from start */
    int64_t i0 = lo <= 0 ? 0 : (lo + full->step - 1) / full->step;
    int64_t i1 = hi <= 0 ? 0 : (hi + full->step - 1) / full->step; /* first index at or past the end */
    if (i1 > full->count) i1 = full->count;
    *first = i0;
    *local = (axis_sel){full->start + i0 * full->step - w->t0, full->step, i1 > i0 ? i1 - i0 : 0, full->keep};
    return local->count;
}

nnt_status nnt_trace_window_save(nnt_run *run, const request *rq, const char *path, nnt_value_id slot, int token_axis,
                                 const trace_window *w, const nnt_tensor *src, nnt_tensor *dst)
{
    int nd = src->ndim, narrowed = nnt_trace_readout_narrowed(run, slot, src);
    if (token_axis < 0 || token_axis >= nd)
        return nnt_err_set(run->err, NNT_ERR_INTERNAL, "save '%s': a chunk of the prompt was given a value without "
                           "a token axis", rq->text);
    int64_t shape[NNT_MAX_DIMS];
    memcpy(shape, src->shape, sizeof shape);
    if (narrowed) shape[token_axis] = run->dims.seq;
    if (shape[token_axis] != w->n)
        return nnt_err_set(run->err, NNT_ERR_SHAPE, "save '%s': the value has %lld entries on its token axis in a "
                           "chunk of %lld tokens", rq->text, (long long)shape[token_axis], (long long)w->n);
    shape[token_axis] = w->total; /* the slice names positions of the whole prompt */
    axis_sel ax[NNT_MAX_DIMS];
    nnt_status st = nnt_trace_slice_resolve(rq, path, nd, shape, NULL, ax, run->err);
    if (st != NNT_OK) return st;
    int64_t out_shape[NNT_MAX_DIMS];
    int out_nd = 0, out_axis = 0;
    for (int d = 0; d < nd; d++) {
        if (d == token_axis) out_axis = out_nd;
        if (ax[d].keep) out_shape[out_nd++] = ax[d].count;
    }
    if (!dst->data) {
        if (nnt_tensor_alloc(dst, src->dtype, out_nd, out_shape) != NNT_OK)
            return nnt_err_set(run->err, NNT_ERR_OUT_OF_MEMORY, "no memory to save '%s'", rq->text);
        memset(dst->data, 0, nnt_tensor_nbytes(dst));
    } else if (dst->dtype != src->dtype || !nnt_shape_equal(dst->ndim, dst->shape, out_nd, out_shape)) {
        return nnt_err_set(run->err, NNT_ERR_SHAPE, "save '%s': a chunk of the prompt gave another dtype or shape "
                           "than the first chunk", rq->text);
    }
    int64_t first;
    if (nnt_trace_window_select(w, &ax[token_axis], &ax[token_axis], &first) == 0) return NNT_OK;
    nnt_tensor picked = {0}, piece = {0};
    if (narrowed) { /* the readout's rows hold the positions asked only */
        st = nnt_trace_readout_pick(run, src, &ax[token_axis], &picked);
        src = &picked;
        ax[token_axis] = (axis_sel){0, 1, ax[token_axis].count, ax[token_axis].keep};
    }
    if (st == NNT_OK) st = nnt_trace_slice_copy(src, ax, &piece, run->err);
    if (st == NNT_OK) {
        /* the piece's token entries go to [first, first + count) of the whole save's axis; an index
         * drops the axis, and the piece is the whole save */
        size_t es = nnt_dtype_size(dst->dtype);
        int64_t outer = 1, inner = 1, count = ax[token_axis].count, along = 1;
        if (ax[token_axis].keep) {
            for (int d = 0; d < out_axis; d++) outer *= out_shape[d];
            for (int d = out_axis + 1; d < out_nd; d++) inner *= out_shape[d];
            along = out_shape[out_axis];
        } else {
            first = 0;
            inner = nnt_tensor_numel(dst);
        }
        for (int64_t o = 0; o < outer; o++)
            memcpy((char *)dst->data + (size_t)((o * along + first) * inner) * es,
                   (const char *)piece.data + (size_t)(o * count * inner) * es, (size_t)(count * inner) * es);
    }
    nnt_tensor_free(&piece);
    nnt_tensor_free(&picked);
    return st;
}
