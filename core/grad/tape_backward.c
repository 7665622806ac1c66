/* tape_backward.c - the gradient tape's reverse pass: the gradient memory (one zeroed shadow
 * region per stretch of activation memory the record touched) and the walk from the last entry
 * to the first, each op reading the gradient of what it wrote, clearing it and adding its inputs'
 * share (see tape.h for why this is right under reuse and aliasing). */
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

/* Collects the activation ranges of the record into r (room for 5 per entry); returns the count. */
static int collect(const nnt_tape *tp, range *r)
{
    int n = 0;
    for (int i = 0; i < tp->n; i++) {
        const tape_entry *e = &tp->e[i];
        for (int k = 0; k < 5; k++) {
            const nnt_tensor *t = k < 3 ? &e->in[k] : &e->out[k - 3];
            if (!is_activation(t) || (k < 3 && is_weight(e->kind, k))) continue;
            r[n].lo = (uintptr_t)t->data;
            r[n].hi = r[n].lo + nnt_tensor_nbytes(t);
            if (r[n].hi > r[n].lo) n++;
        }
    }
    return n;
}

/* Makes the zeroed gradient memory: the union of every activation range, one region per piece. */
static nnt_status make_regions(nnt_tape *tp, nnt_error *err)
{
    nnt_tape_regions_free(tp);
    range *r = malloc((size_t)(tp->n ? tp->n : 1) * 5 * sizeof *r);
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
    for (int k = 0; k < 3; k++) alias |= overlaps(out, &e->in[k]) && !is_weight(e->kind, k);
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

/* Seeds and answers at a mark. */
static nnt_status at_mark(nnt_tape *tp, const tape_entry *e, const nnt_tape_seed *seeds, int n_seeds,
                          nnt_tape_grad *grads, int n_grads, nnt_error *err)
{
    nnt_tensor g = nnt_tape_adj(tp, &e->out[0]);
    size_t bytes = nnt_tensor_nbytes(&e->out[0]);
    nnt_status st = NNT_OK;
    for (int s = 0; s < n_seeds && st == NNT_OK; s++) {
        if (seeds[s].tag != e->tag) continue;
        void *tmp = NULL;
        st = tp->be->alloc(tp->be_ctx, bytes, &tmp, err);
        nnt_tensor c = g;
        c.data = tmp;
        if (st == NNT_OK) st = tp->be->upload(tp->be_ctx, tmp, seeds[s].cotangent, bytes, err);
        if (st == NNT_OK) st = tp->be->accumulate(tp->be_ctx, &c, 1.0f, &g, err);
        if (tmp) tp->be->free(tp->be_ctx, tmp);
    }
    for (int k = 0; k < n_grads && st == NNT_OK; k++) {
        if (grads[k].tag != e->tag || grads[k].grad->data) continue; /* the last mark answers */
        st = nnt_tensor_alloc(grads[k].grad, NNT_F32, e->out[0].ndim, e->out[0].shape);
        if (st != NNT_OK) st = nnt_err_set(err, st, "no memory for a gradient");
        if (st == NNT_OK) st = tp->be->download(tp->be_ctx, grads[k].grad->data, g.data, bytes, err);
    }
    return st;
}

/* A constant written over e->out[0]: its gradient is cleared (byte-counted constants as floats). */
static nnt_status clear_constant(const nnt_tape *tp, const tape_entry *e, nnt_error *err)
{
    nnt_tensor t = e->out[0];
    if (t.dtype == NNT_U8) {
        t.dtype = NNT_F32;
        t.shape[0] /= (int64_t)sizeof(float);
    } else if (t.dtype != NNT_F32) {
        return NNT_OK; /* indices */
    }
    nnt_tensor g = nnt_tape_adj(tp, &t);
    return nnt_tape_zero(tp, &g, err);
}

nnt_status nnt_tape_backward(nnt_tape *tp, const nnt_tape_seed *seeds, int n_seeds, nnt_tape_grad *grads,
                             int n_grads, nnt_error *err)
{
    if (!tp->be->accumulate) return nnt_tape_no_backward(err, "a mark", "accumulate");
    for (int k = 0; k < n_grads; k++) memset(grads[k].grad, 0, sizeof *grads[k].grad);
    for (int pass = 0; pass < 2; pass++) /* every tag asked for must have been marked */
        for (int k = 0; k < (pass ? n_grads : n_seeds); k++) {
            int tag = pass ? grads[k].tag : seeds[k].tag, found = 0;
            for (int i = 0; i < tp->n && !found; i++) found = tp->e[i].kind == TAPE_MARK && tp->e[i].tag == tag;
            if (!found)
                return nnt_err_set(err, NNT_ERR_INVALID_ARGUMENT, "the gradient tape holds no mark %d (%s %d)", tag,
                                   pass ? "wanted" : "seeded", k);
        }
    nnt_status st = make_regions(tp, err);
    for (int i = tp->n - 1; i >= 0 && st == NNT_OK; i--) {
        const tape_entry *e = &tp->e[i];
        if (e->kind == TAPE_MARK)
            st = at_mark(tp, e, seeds, n_seeds, grads, n_grads, err);
        else if (e->kind == TAPE_CONSTANT)
            st = nnt_tape_zero(tp, &(nnt_tensor){0}, err), st = st == NNT_OK ? clear_constant(tp, e, err) : st;
        else
            st = nnt_tape_backward_entry(tp, e, err);
    }
    if (st != NNT_OK)
        for (int k = 0; k < n_grads; k++) nnt_tensor_free(grads[k].grad);
    nnt_tape_regions_free(tp);
    return st;
}
