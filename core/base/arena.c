/* arena.c - the per-forward activation arena: a list of large blocks of backend memory handed
 * out by bumping a pointer. A forward marks and releases to reuse a block's tail for each
 * layer's temporaries; the blocks themselves are kept across forwards, so a warm forward
 * allocates nothing. */
#include <stdlib.h>
#include <string.h>

#include "internal.h"

#define ARENA_ALIGN 64
#define ARENA_MIN_CHUNK ((size_t)16 << 20)
#define ARENA_MAX_STEP ((size_t)256 << 20) /* at most this much asked beyond a request */
#define ARENA_ROUND ((size_t)2 << 20)      /* chunk sizes are multiples of this (huge pages) */

typedef struct chunk {
    void *base;
    size_t size;
    size_t used;
} chunk;

struct nnt_arena {
    const nnt_backend_ops *be;
    void *be_ctx;
    chunk *chunks;
    int n, cap;
    int cur;
    size_t high_water;
};

nnt_status nnt_arena_new(const nnt_backend_ops *be, void *be_ctx, nnt_arena **out, nnt_error *err)
{
    nnt_arena *a = calloc(1, sizeof *a);
    if (!a) return nnt_err_set(err, NNT_ERR_OUT_OF_MEMORY, "no memory for the arena");
    a->be = be;
    a->be_ctx = be_ctx;
    *out = a;
    return NNT_OK;
}

void nnt_arena_free(nnt_arena *a)
{
    if (!a) return;
    for (int i = 0; i < a->n; i++) a->be->free(a->be_ctx, a->chunks[i].base);
    free(a->chunks);
    free(a);
}

/* The size of the chunk added after one of `last` bytes (0: none) for a request of `need`: twice
 * the last, so that a forward of many temporaries makes few chunks, but never more than
 * ARENA_MAX_STEP beyond what is needed, so that a large tensor (a long prompt's activations)
 * asks for about its own size and not double; rounded up to ARENA_ROUND. */
static size_t chunk_size(size_t last, size_t need)
{
    size_t size = last * 2;
    if (size < ARENA_MIN_CHUNK) size = ARENA_MIN_CHUNK;
    if (size > need + ARENA_MAX_STEP) size = need + ARENA_MAX_STEP;
    if (size < need) size = need;
    return (size + ARENA_ROUND - 1) & ~(ARENA_ROUND - 1);
}

static size_t position(const nnt_arena *a)
{
    size_t pos = 0;
    for (int i = 0; i < a->cur && i < a->n; i++) pos += a->chunks[i].size;
    if (a->cur < a->n) pos += a->chunks[a->cur].used;
    return pos;
}

nnt_status nnt_arena_alloc(nnt_arena *a, size_t bytes, void **out, nnt_error *err)
{
    size_t need = (bytes + ARENA_ALIGN - 1) & ~(size_t)(ARENA_ALIGN - 1);
    if (need == 0) need = ARENA_ALIGN;
    while (a->cur < a->n) {
        chunk *c = &a->chunks[a->cur];
        if (c->size - c->used >= need) {
            *out = (char *)c->base + c->used;
            c->used += need;
            size_t pos = position(a);
            if (pos > a->high_water) a->high_water = pos;
            return NNT_OK;
        }
        if (a->cur + 1 < a->n && a->chunks[a->cur + 1].size >= need) {
            a->cur++;
            a->chunks[a->cur].used = 0;
            continue;
        }
        break;
    }
    /* drop chunks past the current one that were too small, then add a bigger one */
    for (int i = a->cur + 1; i < a->n; i++) a->be->free(a->be_ctx, a->chunks[i].base);
    if (a->cur + 1 < a->n) a->n = a->cur + 1;
    if (a->n == a->cap) {
        int cap = a->cap ? a->cap * 2 : 8;
        chunk *g = realloc(a->chunks, (size_t)cap * sizeof *g);
        if (!g) return nnt_err_set(err, NNT_ERR_OUT_OF_MEMORY, "no memory for the arena");
        a->chunks = g;
        a->cap = cap;
    }
    size_t size = chunk_size(a->n > 0 ? a->chunks[a->n - 1].size : 0, need);
    void *base = NULL;
    nnt_status st = a->be->alloc(a->be_ctx, size, &base, err);
    if (st != NNT_OK) return st;
    a->chunks[a->n] = (chunk){base, size, 0};
    a->cur = a->n;
    a->n++;
    return nnt_arena_alloc(a, bytes, out, err);
}

size_t nnt_arena_mark(nnt_arena *a)
{
    return position(a);
}

void nnt_arena_release(nnt_arena *a, size_t mark)
{
    size_t pos = 0;
    for (int i = 0; i < a->n; i++) {
        if (mark <= pos + a->chunks[i].size) {
            a->cur = i;
            a->chunks[i].used = mark - pos;
            return;
        }
        pos += a->chunks[i].size;
    }
}

void nnt_arena_reset(nnt_arena *a)
{
    a->cur = 0;
    for (int i = 0; i < a->n; i++) a->chunks[i].used = 0;
}

size_t nnt_arena_high_water(const nnt_arena *a)
{
    return a->high_water;
}
