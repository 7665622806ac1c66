/* test_arena.c - the activation arena's growth, over a host backend that only counts what it is
 * asked for: a large request asks about its own size (not double the chunk before it), a
 * temporary after it does not ask for twice the large chunk, a warm forward that releases and asks
 * again allocates nothing, and every pointer is aligned and inside memory the backend gave. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/internal.h"
#include "test_util.h"

#define MB ((size_t)1 << 20)

typedef struct counting {
    size_t asked[64]; /* every size asked, in order */
    int n;
    size_t live;      /* bytes given and not yet freed */
} counting;

/* The backend never touches memory: the arena only asks, hands out pointers and frees. */
static nnt_status c_alloc(void *ctx, size_t bytes, void **ptr, nnt_error *err)
{
    counting *c = ctx;
    (void)err;
    if (c->n < 64) c->asked[c->n] = bytes;
    c->n++;
    c->live += bytes;
    *ptr = (void *)(uintptr_t)(((uintptr_t)c->n << 40)); /* a distinct, aligned, never-dereferenced address */
    return NNT_OK;
}

static void c_free(void *ctx, void *ptr)
{
    counting *c = ctx;
    uintptr_t k = (uintptr_t)ptr >> 40;
    if (k >= 1 && k <= 64) c->live -= c->asked[k - 1];
}

static void test_large_request_asks_its_size(void)
{
    counting c = {0};
    nnt_backend_ops ops = {.struct_size = sizeof ops, .alloc = c_alloc, .free = c_free};
    nnt_error err = {0};
    nnt_arena *a = NULL;
    CU_ASSERT_EQUAL_FATAL(nnt_arena_new(&ops, &c, &a, &err), NNT_OK);
    void *p = NULL;
    /* a few small temporaries: one 16 MiB chunk */
    for (int i = 0; i < 3; i++) CU_ASSERT_EQUAL(nnt_arena_alloc(a, 1 * MB, &p, &err), NNT_OK);
    CU_ASSERT_EQUAL(c.n, 1);
    CU_ASSERT_EQUAL(c.asked[0], 16 * MB);
    /* a long prompt's tensor of 3000 MiB + 5 bytes: its own size, rounded up to 2 MiB (doubling
     * the 16 MiB chunk would not hold it) */
    size_t big = 3000 * MB + 5;
    CU_ASSERT_EQUAL(nnt_arena_alloc(a, big, &p, &err), NNT_OK);
    CU_ASSERT_EQUAL_FATAL(c.n, 2);
    CU_ASSERT_EQUAL(c.asked[1], 3002 * MB);
    CU_ASSERT(((uintptr_t)p & 63) == 0);
    /* a temporary after it: not double the 3002 MiB chunk, but 8 MiB + the 256 MiB step */
    CU_ASSERT_EQUAL(nnt_arena_alloc(a, 8 * MB, &p, &err), NNT_OK);
    CU_ASSERT_EQUAL_FATAL(c.n, 3);
    CU_ASSERT_EQUAL(c.asked[2], 264 * MB);
    /* 300 MiB more: the 256 MiB left there do not hold it; the next chunk doubles the 264 (528 MiB,
     * under 300 + 256) */
    CU_ASSERT_EQUAL(nnt_arena_alloc(a, 300 * MB, &p, &err), NNT_OK);
    CU_ASSERT_EQUAL_FATAL(c.n, 4);
    CU_ASSERT_EQUAL(c.asked[3], 528 * MB);
    /* a warm forward asking the same again allocates nothing */
    nnt_arena_reset(a);
    for (int i = 0; i < 3; i++) CU_ASSERT_EQUAL(nnt_arena_alloc(a, 1 * MB, &p, &err), NNT_OK);
    CU_ASSERT_EQUAL(nnt_arena_alloc(a, big, &p, &err), NNT_OK);
    CU_ASSERT_EQUAL(nnt_arena_alloc(a, 8 * MB, &p, &err), NNT_OK);
    CU_ASSERT_EQUAL(nnt_arena_alloc(a, 300 * MB, &p, &err), NNT_OK);
    CU_ASSERT_EQUAL(c.n, 4);
    nnt_arena_free(a);
    CU_ASSERT_EQUAL(c.live, 0);
}

static void test_small_requests_double(void)
{
    counting c = {0};
    nnt_backend_ops ops = {.struct_size = sizeof ops, .alloc = c_alloc, .free = c_free};
    nnt_error err = {0};
    nnt_arena *a = NULL;
    CU_ASSERT_EQUAL_FATAL(nnt_arena_new(&ops, &c, &a, &err), NNT_OK);
    void *p = NULL;
    /* 100 temporaries of 1 MiB: chunks of 16, 32, 64 MiB (doubling keeps the count small) */
    for (int i = 0; i < 100; i++) CU_ASSERT_EQUAL(nnt_arena_alloc(a, 1 * MB, &p, &err), NNT_OK);
    CU_ASSERT_EQUAL_FATAL(c.n, 3);
    CU_ASSERT_EQUAL(c.asked[0], 16 * MB);
    CU_ASSERT_EQUAL(c.asked[1], 32 * MB);
    CU_ASSERT_EQUAL(c.asked[2], 64 * MB);
    CU_ASSERT(nnt_arena_high_water(a) >= 100 * MB);
    nnt_arena_free(a);
    CU_ASSERT_EQUAL(c.live, 0);
}

int register_tests(void)
{
    CU_pSuite s = CU_add_suite("arena", NULL, NULL);
    if (!s) return -1;
    if (!CU_add_test(s, "a large request asks about its own size, and a warm forward allocates nothing",
                     test_large_request_asks_its_size) ||
        !CU_add_test(s, "small requests grow the arena by doubling", test_small_requests_double))
        return -1;
    return 0;
}
