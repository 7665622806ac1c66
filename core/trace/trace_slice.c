/* trace_slice.c - the [...] slice of a save on a value's shape: its items resolved to one
 * selection per axis, and the selected entries copied out of a host tensor. */
#include <stdio.h>
#include <string.h>

#include "trace/trace_internal.h"

nnt_status nnt_trace_slice_resolve(const request *r, const char *path, int ndim, const int64_t *shape, const char *axes,
                                   axis_sel *ax, nnt_error *err)
{
    int items = 0;
    for (int i = 0; i < r->n_slice; i++) items += r->slice[i].kind != SL_ELLIPSIS;
    char dims[96];
    nnt_dims_str(ndim, shape, dims, sizeof dims);
    if (items > ndim)
        return nnt_err_set(err, NNT_ERR_INDEX, "save '%s': %d slice items for the %d axes of %s %s", r->text, items, ndim,
                           path, dims);
    int d = 0;
    for (int i = 0; i < r->n_slice; i++) {
        const struct slice_item *it = &r->slice[i];
        if (it->kind == SL_ELLIPSIS) {
            for (int k = 0; k < ndim - items; k++, d++) ax[d] = (axis_sel){0, 1, shape[d], 1};
            continue;
        }
        int64_t n = shape[d];
        char name[32] = "";
        if (axes) { /* the d-th word of "[a b c]" */
            const char *w = axes + (axes[0] == '[');
            for (int k = 0; k < d && w; k++) {
                w = strchr(w, ' ');
                if (w) w++;
            }
            size_t len = w ? strcspn(w, " ]") : 0;
            if (len && len < sizeof name - 3) snprintf(name, sizeof name, " (%.*s)", (int)len, w);
        }
        if (it->kind == SL_INDEX) {
            int64_t x = it->start < 0 ? it->start + n : it->start;
            if (x < 0 || x >= n)
                return nnt_err_set(err, NNT_ERR_INDEX, "save '%s': index %lld is outside axis %d%s of size %lld of %s %s",
                                   r->text, (long long)it->start, d, name, (long long)n, path, dims);
            ax[d++] = (axis_sel){x, 1, 1, 0};
            continue;
        }
        int64_t a = it->has_start ? it->start : 0, b = it->has_stop ? it->stop : n;
        a = a < 0 ? a + n : a;
        b = b < 0 ? b + n : b;
        a = a < 0 ? 0 : a > n ? n : a; /* ranges are clipped to the axis, as in Python */
        b = b < 0 ? 0 : b > n ? n : b;
        int64_t count = b > a ? (b - a + it->step - 1) / it->step : 0;
        if (count == 0)
            return nnt_err_set(err, NNT_ERR_INDEX, "save '%s': the range of axis %d%s selects nothing of its %lld entries (%s %s)",
                               r->text, d, name, (long long)n, path, dims);
        ax[d++] = (axis_sel){a, it->step, count, 1};
    }
    for (; d < ndim; d++) ax[d] = (axis_sel){0, 1, shape[d], 1};
    return NNT_OK;
}

nnt_status nnt_trace_slice_copy(const nnt_tensor *src, const axis_sel *ax, nnt_tensor *dst, nnt_error *err)
{
    int nd = src->ndim, out_nd = 0;
    int64_t out_shape[NNT_MAX_DIMS], stride[NNT_MAX_DIMS];
    size_t es = nnt_dtype_size(src->dtype);
    int64_t acc = 1;
    for (int d = nd - 1; d >= 0; d--) {
        stride[d] = acc;
        acc *= src->shape[d];
    }
    for (int d = 0; d < nd; d++)
        if (ax[d].keep) out_shape[out_nd++] = ax[d].count;
    if (nnt_tensor_alloc(dst, src->dtype, out_nd, out_shape) != NNT_OK)
        return nnt_err_set(err, NNT_ERR_OUT_OF_MEMORY, "no memory to save a slice");
    if (nd == 0) {
        memcpy(dst->data, src->data, es);
        return NNT_OK;
    }
    /* an odometer over every axis but the last; the last axis is copied as a run */
    int64_t idx[NNT_MAX_DIMS] = {0};
    const axis_sel *last = &ax[nd - 1];
    char *out = dst->data;
    for (;;) {
        int64_t off = 0;
        for (int d = 0; d < nd - 1; d++) off += (ax[d].start + idx[d] * ax[d].step) * stride[d];
        const char *in = (const char *)src->data + (size_t)(off + last->start) * es;
        if (last->step == 1) {
            memcpy(out, in, (size_t)last->count * es);
            out += (size_t)last->count * es;
        } else {
            for (int64_t i = 0; i < last->count; i++, out += es) memcpy(out, in + (size_t)(i * last->step) * es, es);
        }
        int d = nd - 2;
        while (d >= 0 && ++idx[d] == ax[d].count) idx[d--] = 0;
        if (d < 0) break;
    }
    return NNT_OK;
}
