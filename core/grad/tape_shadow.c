/* tape_shadow.c - the gradient tape's gradient memory: one zeroed shadow region per stretch of
 * activation memory the record touched, the gradient of a tensor found at its place there, the
 * output gradient an op's backward reads, and the helpers every reverse step takes and clears
 * gradients with. */
#include <stdlib.h>
#include <string.h>

#include "grad/tape.h"

struct tape_region {
    uintptr_t lo, hi; /* [lo, hi): forward memory */
    void *shadow;     /* hi - lo bytes of gradient, backend memory */
};

typedef struct range {
    uintptr_t lo, hi;
} range;

static int by_lo(const void *a, const void *b)
{
    const range *x = a, *y = b;
    return x->lo < y->lo ? -1 : x->lo > y->lo;
}

/* Whether slot in[k] of an entry of kind k is a weight (never differentiated). */
static int is_weight(tape_kind kind, int k)
{
    return k == 1 && (kind == TAPE_LINEAR || kind == TAPE_RMS_NORM || kind == TAPE_ROUTE);
}

static int is_activation(const nnt_tensor *t)
{
    return t->data && t->dtype == NNT_F32;
}

void nnt_tape_regions_free(nnt_tape *tp)
{
    for (int i = 0; i < tp->n_regions; i++)
        if (tp->regions[i].shadow) tp->be->free(tp->be_ctx, tp->regions[i].shadow);
    free(tp->regions);
    tp->regions = NULL;
    tp->n_regions = 0;
}

/* Tensors an entry names: its inputs, then its outputs. */
#define ENTRY_TENSORS (TAPE_SLOTS(((tape_entry *)0)->in) + TAPE_SLOTS(((tape_entry *)0)->out))

/* Collects the activation ranges of the record into r (room for ENTRY_TENSORS per entry);
 * returns the count. */
static int collect(const nnt_tape *tp, range *r)
{
    int n = 0, nin = TAPE_SLOTS(tp->e[0].in);
    for (int i = 0; i < tp->n; i++) {
        const tape_entry *e = &tp->e[i];
        for (int k = 0; k < ENTRY_TENSORS; k++) {
            const nnt_tensor *t = k < nin ? &e->in[k] : &e->out[k - nin];
            if (!is_activation(t) || (k < nin && is_weight(e->kind, k))) continue;
            r[n].lo = (uintptr_t)t->data;
            r[n].hi = r[n].lo + nnt_tensor_nbytes(t);
            if (r[n].hi > r[n].lo) n++;
        }
    }
    return n;
}

/* Makes the zeroed gradient memory: the union of every activation range, one region per piece. */
nnt_status nnt_tape_make_regions(nnt_tape *tp, nnt_error *err)
{
    nnt_tape_regions_free(tp);
    range *r = malloc((size_t)(tp->n ? tp->n : 1) * ENTRY_TENSORS * sizeof *r);
    if (!r) return nnt_err_set(err, NNT_ERR_OUT_OF_MEMORY, "no memory for the gradient's regions");
    int n = collect(tp, r), m = 0;
    qsort(r, (size_t)n, sizeof *r, by_lo);
    for (int i = 0; i < n; i++) { /* merge overlapping and touching ranges */
        if (m > 0 && r[i].lo <= r[m - 1].hi) {
            if (r[i].hi > r[m - 1].hi) r[m - 1].hi = r[i].hi;
        } else {
            r[m++] = r[i];
        }
    }
    tp->regions = calloc((size_t)(m ? m : 1), sizeof *tp->regions);
    nnt_status st = tp->regions ? NNT_OK : nnt_err_set(err, NNT_ERR_OUT_OF_MEMORY, "no memory for the gradient");
    for (int i = 0; i < m && st == NNT_OK; i++) {
        struct tape_region *g = &tp->regions[i];
        g->lo = r[i].lo;
        g->hi = r[i].hi;
        tp->n_regions = i + 1;
        size_t bytes = g->hi - g->lo;
        st = tp->be->alloc(tp->be_ctx, bytes, &g->shadow, err);
        nnt_tensor z = {.dtype = NNT_F32, .ndim = 1, .shape = {(int64_t)(bytes / sizeof(float))}, .data = g->shadow};
        if (st == NNT_OK) st = tp->be->fill(tp->be_ctx, &z, 0.0f, err);
    }
    free(r);
    return st;
}

/* The gradient of t: t's shape at t's place in the gradient memory, F32, no rounding flags. A
 * tensor outside every region (never touched by a recorded op) gets data NULL. */
nnt_tensor nnt_tape_adj(const nnt_tape *tp, const nnt_tensor *t)
{
    nnt_tensor g = *t;
    g.data = NULL;
    g.dtype = NNT_F32;
    g.flags = 0;
    g.scale = NULL;
    uintptr_t a = (uintptr_t)t->data;
    int lo = 0, hi = tp->n_regions - 1;
    while (t->data && lo <= hi) {
        int mid = (lo + hi) / 2;
        const struct tape_region *r = &tp->regions[mid];
        if (a < r->lo) hi = mid - 1;
        else if (a >= r->hi) lo = mid + 1;
        else {
            if (a + nnt_tensor_nbytes(&g) <= r->hi) g.data = (char *)r->shadow + (a - r->lo);
            break;
        }
    }
    return g;
}

nnt_status nnt_tape_zero(const nnt_tape *tp, const nnt_tensor *g, nnt_error *err)
{
    if (!g->data) return NNT_OK;
    nnt_tensor z = *g;
    z.ndim = 1;
    z.shape[0] = (int64_t)(nnt_tensor_nbytes(g) / sizeof(float));
    return tp->be->fill(tp->be_ctx, &z, 0.0f, err);
}

static int overlaps(const nnt_tensor *a, const nnt_tensor *b)
{
    if (!a->data || !b->data) return 0;
    uintptr_t a0 = (uintptr_t)a->data, a1 = a0 + nnt_tensor_nbytes(a);
    uintptr_t b0 = (uintptr_t)b->data, b1 = b0 + nnt_tensor_nbytes(b);
    return a0 < b1 && b0 < a1;
}

nnt_status nnt_tape_output_gradient(nnt_tape *tp, const tape_entry *e, const nnt_tensor *out, nnt_tensor *dy,
                                    void **tmp, int *cleared, nnt_error *err)
{
    *dy = nnt_tape_adj(tp, out);
    *tmp = NULL;
    *cleared = 0;
    int alias = 0;
    for (int k = 0; k < TAPE_SLOTS(e->in); k++) alias |= overlaps(out, &e->in[k]) && !is_weight(e->kind, k);
    if (!alias || !dy->data) return NNT_OK;
    nnt_tensor copy = *dy;
    nnt_status st = tp->be->alloc(tp->be_ctx, nnt_tensor_nbytes(dy), tmp, err);
    if (st != NNT_OK) return st;
    copy.data = *tmp;
    st = tp->be->copy(tp->be_ctx, dy, &copy, err);
    if (st == NNT_OK) st = nnt_tape_zero(tp, dy, err);
    *dy = copy;
    *cleared = 1;
    return st;
}


nnt_status nnt_tape_take(nnt_tape *tp, const tape_entry *e, const nnt_tensor *out, nnt_tape_out_grad *g,
                         nnt_error *err)
{
    g->out = out;
    return nnt_tape_output_gradient(tp, e, out, &g->dy, &g->tmp, &g->cleared, err);
}

nnt_status nnt_tape_done(nnt_tape *tp, nnt_tape_out_grad *g, nnt_status st, nnt_error *err)
{
    if (st == NNT_OK && !g->cleared && g->out) {
        nnt_tensor a = nnt_tape_adj(tp, g->out);
        st = nnt_tape_zero(tp, &a, err);
    }
    if (g->tmp) tp->be->free(tp->be_ctx, g->tmp);
    g->tmp = NULL;
    return st;
}

nnt_tensor *nnt_tape_grad_of(const nnt_tape *tp, const nnt_tensor *t, nnt_tensor *buf)
{
    if (!t->data) return NULL;
    *buf = nnt_tape_adj(tp, t);
    return buf->data ? buf : NULL;
}

const nnt_tensor *nnt_tape_dy_or_null(const nnt_tape_out_grad *g)
{
    return g->dy.data ? &g->dy : NULL;
}
