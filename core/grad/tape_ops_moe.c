/* tape_ops_moe.c - the gradient tape's entries for the feed-forward and mixture-of-experts ops
 * (SwiGLU, the router, row gathers and scatters, rows scaled by routing weights, the sum over
 * slots, column copies). DeepSeek-V4's ops are tape_ops_hyper.c's, the recurrent mixers'
 * tape_ops_recurrent.c's. */
#include <stdlib.h>
#include <string.h>

#include "grad/tape.h"

#define TP ((nnt_tape *)ctx)
#define REAL TP->be_ctx

static nnt_status t_swiglu(void *ctx, const nnt_tensor *gate, const nnt_tensor *up, float limit, nnt_tensor *act,
                           nnt_tensor *out, nnt_error *err)
{
    if (!TP->recording) return TP->be->swiglu(REAL, gate, up, limit, act, out, err);
    if (!TP->be->swiglu_backward) return nnt_tape_no_backward(err, "swiglu", "swiglu_backward");
    tape_entry *e = nnt_tape_push(TP, TAPE_SWIGLU, err);
    if (!e) return NNT_ERR_OUT_OF_MEMORY;
    e->f = limit;
    e->in[1] = *up;
    e->out[1] = *out;
    nnt_status st;
    if (gate) { /* act (when given) is a second output */
        e->in[0] = *gate;
        if (act) e->out[0] = *act;
        st = nnt_tape_keep(TP, gate, &e->keep[0], err);
    } else { /* act is the input */
        e->in[2] = *act;
        st = nnt_tape_keep(TP, act, &e->keep[2], err);
    }
    if (st == NNT_OK) st = nnt_tape_keep(TP, up, &e->keep[1], err);
    return st == NNT_OK ? TP->be->swiglu(REAL, gate, up, limit, act, out, err) : st;
}

static nnt_status t_route(void *ctx, const nnt_tensor *logits, const nnt_tensor *bias, const nnt_route_params *p,
                          nnt_tensor *idx, nnt_tensor *w, nnt_error *err)
{
    if (!TP->recording) return TP->be->route(REAL, logits, bias, p, idx, w, err);
    if (!TP->be->route_backward) return nnt_tape_no_backward(err, "route", "route_backward");
    tape_entry *e = nnt_tape_push(TP, TAPE_ROUTE, err);
    if (!e) return NNT_ERR_OUT_OF_MEMORY;
    e->in[0] = *logits;
    if (bias) e->in[1] = *bias;
    e->out[0] = *idx;
    e->out[1] = *w;
    e->route = *p;
    nnt_status st = nnt_tape_keep(TP, logits, &e->keep[0], err);
    if (st == NNT_OK) st = TP->be->route(REAL, logits, bias, p, idx, w, err);
    return st == NNT_OK ? nnt_tape_keep(TP, idx, &e->keep[1], err) : st; /* the choice made */
}

static nnt_status t_gather_rows(void *ctx, const nnt_tensor *src, const int32_t *rows, int n, nnt_tensor *dst,
                                nnt_error *err)
{
    if (!TP->recording) return TP->be->gather_rows(REAL, src, rows, n, dst, err);
    if (!TP->be->gather_rows_backward) return nnt_tape_no_backward(err, "gather_rows", "gather_rows_backward");
    tape_entry *e = nnt_tape_push(TP, TAPE_GATHER_ROWS, err);
    if (!e) return NNT_ERR_OUT_OF_MEMORY;
    e->in[0] = *src;
    e->out[0] = *dst;
    e->i[0] = n;
    nnt_status st = nnt_tape_keep_host(rows, (size_t)n * sizeof *rows, &e->host[0], err);
    return st == NNT_OK ? TP->be->gather_rows(REAL, src, rows, n, dst, err) : st;
}

/* scatter_add_rows and scatter_rows: the row scales are host values, constants to the tape. */
static nnt_status scatter(void *ctx, tape_kind kind, const nnt_tensor *src, const int32_t *rows, const float *scale,
                          int n, nnt_tensor *dst, nnt_error *err)
{
    const char *op = kind == TAPE_SCATTER_ROWS ? "scatter_rows" : "scatter_add_rows";
    if (kind == TAPE_SCATTER_ROWS && !TP->be->scatter_rows_backward)
        return nnt_tape_no_backward(err, op, "scatter_rows_backward");
    if (kind == TAPE_SCATTER_ADD_ROWS && !TP->be->scatter_add_rows_backward)
        return nnt_tape_no_backward(err, op, "scatter_add_rows_backward");
    tape_entry *e = nnt_tape_push(TP, kind, err);
    if (!e) return NNT_ERR_OUT_OF_MEMORY;
    e->in[0] = *src;
    e->out[0] = *dst;
    e->i[0] = n;
    nnt_status st = nnt_tape_keep_host(rows, (size_t)n * sizeof *rows, &e->host[0], err);
    if (st == NNT_OK) st = nnt_tape_keep_host(scale, (size_t)n * sizeof *scale, &e->host[1], err);
    if (st != NNT_OK) return st;
    return kind == TAPE_SCATTER_ROWS ? TP->be->scatter_rows(REAL, src, rows, scale, n, dst, err)
                                     : TP->be->scatter_add_rows(REAL, src, rows, scale, n, dst, err);
}

static nnt_status t_scatter_add_rows(void *ctx, const nnt_tensor *src, const int32_t *rows, const float *scale, int n,
                                     nnt_tensor *dst, nnt_error *err)
{
    if (!TP->recording) return TP->be->scatter_add_rows(REAL, src, rows, scale, n, dst, err);
    return scatter(ctx, TAPE_SCATTER_ADD_ROWS, src, rows, scale, n, dst, err);
}

static nnt_status t_scatter_rows(void *ctx, const nnt_tensor *src, const int32_t *rows, const float *scale, int n,
                                 nnt_tensor *dst, nnt_error *err)
{
    if (!TP->recording) return TP->be->scatter_rows(REAL, src, rows, scale, n, dst, err);
    return scatter(ctx, TAPE_SCATTER_ROWS, src, rows, scale, n, dst, err);
}

/* scale_rows: both x (whose memory an in-place call overwrites) and w (routing weights, an
 * activation whose memory the forward reuses later) are kept before the op runs, idx on the host. */
static nnt_status t_scale_rows(void *ctx, const nnt_tensor *x, const nnt_tensor *w, const int32_t *idx, int n,
                               nnt_tensor *y, nnt_error *err)
{
    if (!TP->recording) return TP->be->scale_rows(REAL, x, w, idx, n, y, err);
    if (!TP->be->scale_rows_backward) return nnt_tape_no_backward(err, "scale_rows", "scale_rows_backward");
    if (n < 0 || !x || !w) return TP->be->scale_rows(REAL, x, w, idx, n, y, err); /* the backend refuses it */
    tape_entry *e = nnt_tape_push(TP, TAPE_SCALE_ROWS, err);
    if (!e) return NNT_ERR_OUT_OF_MEMORY;
    e->in[0] = *x;
    e->in[1] = *w;
    e->out[0] = *y;
    e->i[0] = n;
    nnt_status st = nnt_tape_keep_host(idx, (size_t)n * sizeof *idx, &e->host[0], err);
    if (st == NNT_OK) st = nnt_tape_keep(TP, x, &e->keep[0], err);
    if (st == NNT_OK) st = nnt_tape_keep(TP, w, &e->keep[1], err);
    return st == NNT_OK ? TP->be->scale_rows(REAL, x, w, idx, n, y, err) : st;
}

static nnt_status t_sum_axis1(void *ctx, const nnt_tensor *x, nnt_tensor *y, nnt_error *err)
{
    if (!TP->recording) return TP->be->sum_axis1(REAL, x, y, err);
    if (!TP->be->sum_axis1_backward) return nnt_tape_no_backward(err, "sum_axis1", "sum_axis1_backward");
    tape_entry *e = nnt_tape_push(TP, TAPE_SUM_AXIS1, err);
    if (!e) return NNT_ERR_OUT_OF_MEMORY;
    e->in[0] = *x;
    e->out[0] = *y;
    return TP->be->sum_axis1(REAL, x, y, err);
}

static nnt_status t_copy_cols(void *ctx, const nnt_tensor *src, int64_t src_col, nnt_tensor *dst, int64_t dst_col,
                              int64_t ncols, nnt_error *err)
{
    if (!TP->recording) return TP->be->copy_cols(REAL, src, src_col, dst, dst_col, ncols, err);
    if (!TP->be->copy_cols_backward) return nnt_tape_no_backward(err, "copy_cols", "copy_cols_backward");
    tape_entry *e = nnt_tape_push(TP, TAPE_COPY_COLS, err);
    if (!e) return NNT_ERR_OUT_OF_MEMORY;
    e->in[0] = *src;
    e->out[0] = *dst;
    e->i[0] = src_col;
    e->i[1] = dst_col;
    e->i[2] = ncols;
    return TP->be->copy_cols(REAL, src, src_col, dst, dst_col, ncols, err);
}

void nnt_tape_ops_init_moe(nnt_backend_ops *o, const nnt_backend_ops *be)
{
#define WRAP(name) o->name = be->name ? t_##name : NULL
    WRAP(swiglu);
    WRAP(route);
    WRAP(gather_rows);
    WRAP(scatter_add_rows);
    WRAP(scatter_rows);
    WRAP(sum_axis1);
    WRAP(copy_cols);
    WRAP(scale_rows);
#undef WRAP
}
