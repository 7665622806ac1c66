/* test_progress.c - the runtime's progress handler (core/runtime/progress.c): a trace reports
 * every block's value sites in block order; a handler that asks to stop at block 1 ends the
 * trace with NNT_ERR_INTERRUPTED naming that block, and the model then runs to the same logits
 * as before; a generation reports each step's tokens as nnt_generate writes them in its output
 * (stopped rows as NNT_TOKEN_STOPPED) and stops at the step asked; a handler that calls its own
 * runtime is refused with NNT_ERR_BUSY. */
#include <stdlib.h>
#include <string.h>

#include "core/internal.h"
#include "test_util.h"

#define FIXTURE "minimax_m2/fp32"
enum { B = 2, T = 7, NEW = 5 };

static void make_ids(int vocab, int32_t *ids)
{
    for (int t = 0; t < B * T; t++) ids[t] = (int32_t)((t * 53 + 5) % (vocab - 1)) + 1;
}

/* What the handlers below record and when they stop. */
typedef struct watch {
    nnt_runtime *rt;
    int stop_layer;               /* VALUE at this block: stop (-2: never) */
    int stop_step;                /* TOKENS at this step: stop (-1: never) */
    int values, last_layer, out_of_order;
    int steps;
    int32_t tokens[NEW][B];       /* each reported step's tokens */
    nnt_status reentry;           /* what a call of the runtime from the handler returned */
    int try_reentry;
} watch;

static int on_progress(void *user, const nnt_progress *p)
{
    watch *w = user;
    if (w->try_reentry && w->reentry == NNT_OK) w->reentry = nnt_runtime_set_progress(w->rt, NULL, NULL);
    if (p->kind == NNT_PROGRESS_VALUE) {
        w->values++;
        if (p->layer >= 0 && p->layer < w->last_layer) w->out_of_order = 1;
        if (p->layer >= 0) w->last_layer = p->layer;
        return p->layer == w->stop_layer;
    }
    if (p->kind == NNT_PROGRESS_TOKENS) {
        CU_ASSERT(p->batch == B && p->step == w->steps && p->step < NEW);
        if (p->step < NEW) memcpy(w->tokens[p->step], p->tokens, sizeof w->tokens[0]);
        w->steps++;
        return p->step == w->stop_step;
    }
    return 0;
}

static void logits_of(nnt_model *m, const int32_t *ids, nnt_status want, nnt_tensor *out)
{
    nnt_trace *t = NULL;
    CU_ASSERT_FATAL(nnt_trace_new(m, &t) == NNT_OK);
    CU_ASSERT_FATAL(nnt_trace_save(t, "logits") == NNT_OK);
    CU_ASSERT_EQUAL(nnt_trace_run(t, ids, NULL, B, T), want);
    const nnt_tensor *v = want == NNT_OK ? nnt_trace_get(t, "logits") : NULL;
    if (v) {
        CU_ASSERT_FATAL(nnt_tensor_alloc(out, v->dtype, v->ndim, v->shape) == NNT_OK);
        memcpy(out->data, v->data, nnt_tensor_nbytes(v));
    }
    nnt_trace_free(t);
}

static void test_trace_reports_and_stops(void)
{
    nnt_runtime *rt = t_runtime();
    nnt_model *m = t_model(rt, FIXTURE);
    int L = (int)nnt_model_get_info(m)->num_layers;
    int32_t ids[B * T];
    make_ids((int)nnt_model_get_info(m)->vocab_size, ids);
    nnt_tensor before = {0}, after = {0};
    logits_of(m, ids, NNT_OK, &before);

    watch w = {.rt = rt, .stop_layer = -2, .stop_step = -1, .last_layer = -1};
    CU_ASSERT_FATAL(nnt_runtime_set_progress(rt, on_progress, &w) == NNT_OK);
    nnt_tensor same = {0};
    logits_of(m, ids, NNT_OK, &same);
    /* every block reported, in order: at least its input and output sites */
    CU_ASSERT(w.values >= 2 * L && w.last_layer == L - 1 && !w.out_of_order);
    CU_ASSERT(same.data && memcmp(same.data, before.data, nnt_tensor_nbytes(&before)) == 0);

    w = (watch){.rt = rt, .stop_layer = 1, .stop_step = -1, .last_layer = -1};
    logits_of(m, ids, NNT_ERR_INTERRUPTED, NULL);
    CU_ASSERT(w.last_layer == 1); /* nothing after the stop */
    CU_ASSERT_PTR_NOT_NULL(strstr(nnt_last_error(rt), "layers.1."));
    CU_ASSERT_PTR_NOT_NULL(strstr(nnt_last_error(rt), "progress handler"));

    CU_ASSERT(nnt_runtime_set_progress(rt, NULL, NULL) == NNT_OK);
    logits_of(m, ids, NNT_OK, &after);
    CU_ASSERT(after.data && memcmp(after.data, before.data, nnt_tensor_nbytes(&before)) == 0);
    nnt_tensor_free(&before);
    nnt_tensor_free(&same);
    nnt_tensor_free(&after);
    nnt_model_free(m);
    nnt_runtime_close(rt);
}

static void test_generation_reports_tokens(void)
{
    nnt_runtime *rt = t_runtime();
    nnt_model *m = t_model(rt, FIXTURE);
    int32_t ids[B * T], out[B * NEW], plain[B * NEW];
    make_ids((int)nnt_model_get_info(m)->vocab_size, ids);
    nnt_generate_opts o = {.max_new_tokens = NEW};
    T_OK(rt, nnt_generate(m, NULL, ids, NULL, B, T, &o, plain));
    /* row 0's second token as a stop id: row 0 stops there, row 1 goes on (unless it picks it too) */
    int32_t stop = plain[1];
    o.stop_ids = &stop;
    o.n_stop_ids = 1;

    watch w = {.rt = rt, .stop_layer = -2, .stop_step = -1, .last_layer = -1};
    CU_ASSERT_FATAL(nnt_runtime_set_progress(rt, on_progress, &w) == NNT_OK);
    T_OK(rt, nnt_generate(m, NULL, ids, NULL, B, T, &o, out));
    CU_ASSERT(w.steps >= 2 && w.steps <= NEW);
    int stopped_seen = 0;
    for (int s = 0; s < w.steps; s++)
        for (int b = 0; b < B; b++) {
            CU_ASSERT_EQUAL(w.tokens[s][b], out[b * NEW + s]);
            stopped_seen |= w.tokens[s][b] == NNT_TOKEN_STOPPED;
        }
    CU_ASSERT(stopped_seen || w.steps == 2); /* row 0 stopped after step 1 */

    w = (watch){.rt = rt, .stop_layer = -2, .stop_step = 2, .last_layer = -1};
    o.stop_ids = NULL;
    o.n_stop_ids = 0;
    CU_ASSERT_EQUAL(nnt_generate(m, NULL, ids, NULL, B, T, &o, out), NNT_ERR_INTERRUPTED);
    CU_ASSERT_EQUAL(w.steps, 3);
    CU_ASSERT_PTR_NOT_NULL(strstr(nnt_last_error(rt), "generation step 2"));
    for (int s = 0; s < 3; s++)
        for (int b = 0; b < B; b++) CU_ASSERT_EQUAL(w.tokens[s][b], plain[b * NEW + s]);

    /* the handler calling its own runtime is refused, and the call it watches goes on */
    w = (watch){.rt = rt, .stop_layer = -2, .stop_step = -1, .last_layer = -1, .try_reentry = 1};
    T_OK(rt, nnt_generate(m, NULL, ids, NULL, B, T, &o, out));
    CU_ASSERT_EQUAL(w.reentry, NNT_ERR_BUSY);
    CU_ASSERT(memcmp(out, plain, sizeof out) == 0);
    CU_ASSERT(nnt_runtime_set_progress(rt, NULL, NULL) == NNT_OK);
    CU_ASSERT_EQUAL(nnt_runtime_set_progress(NULL, NULL, NULL), NNT_ERR_INVALID_ARGUMENT);
    nnt_model_free(m);
    nnt_runtime_close(rt);
}

int register_tests(void)
{
    CU_pSuite s = CU_add_suite("progress", NULL, NULL);
    if (!s) return -1;
    CU_add_test(s, "a trace reports its blocks in order and stops where asked", test_trace_reports_and_stops);
    CU_add_test(s, "a generation reports each step's tokens and stops where asked", test_generation_reports_tokens);
    return 0;
}
