/* test_guard.c - one call at a time per runtime (core/runtime/guard.c): an edit callback that
 * calls back into the runtime running it (a trace of the same model, a change of its own trace,
 * freeing it) is refused with NNT_ERR_BUSY and a message naming both calls, and the outer trace's
 * values are those of a run without the callback's attempt; two threads tracing one model get
 * either NNT_ERR_BUSY or the single-threaded values, never others (a free waits for the other
 * thread's call); models of two runtimes run in two threads at once with the single-threaded
 * values; four threads encode and decode with one tokenizer and get the single-threaded ids. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "core/internal.h"
#include "test_util.h"

#define FIXTURE "minimax_m2/fp32"
enum { B = 1, T = 12 };

static void make_ids(int vocab, int32_t *ids)
{
    for (int t = 0; t < B * T; t++) ids[t] = (int32_t)((t * 37 + 11) % (vocab - 1)) + 1;
}

/* logits of one plain trace of ids (caller frees the tensor) */
static void reference_logits(nnt_model *m, const int32_t *ids, nnt_tensor *out)
{
    nnt_trace *t = NULL;
    CU_ASSERT_FATAL(nnt_trace_new(m, &t) == NNT_OK);
    CU_ASSERT_FATAL(nnt_trace_save(t, "logits") == NNT_OK);
    CU_ASSERT_FATAL(nnt_trace_run(t, ids, NULL, B, T) == NNT_OK);
    const nnt_tensor *v = nnt_trace_get(t, "logits");
    CU_ASSERT_FATAL(v != NULL);
    CU_ASSERT_FATAL(nnt_tensor_alloc(out, v->dtype, v->ndim, v->shape) == NNT_OK);
    memcpy(out->data, v->data, nnt_tensor_nbytes(v));
    nnt_trace_free(t);
}

/* The fixture's runtime and model, the test's ids and their plain logits */
static void open_fixture(nnt_runtime **rt, nnt_model **m, int32_t *ids, nnt_tensor *ref)
{
    *rt = t_runtime();
    *m = t_model(*rt, FIXTURE);
    make_ids((int)nnt_model_get_info(*m)->vocab_size, ids);
    reference_logits(*m, ids, ref);
}

static void close_fixture(nnt_runtime *rt, nnt_model *m, nnt_tensor *ref)
{
    nnt_tensor_free(ref);
    nnt_model_free(m);
    nnt_runtime_close(rt);
}

static int same_tensor(const nnt_tensor *a, const nnt_tensor *b)
{
    return a && b && a->ndim == b->ndim && nnt_tensor_nbytes(a) == nnt_tensor_nbytes(b) &&
           memcmp(a->data, b->data, nnt_tensor_nbytes(a)) == 0;
}

/* ---- re-entry from an edit callback ---- */

typedef enum { TRY_TRACE, TRY_SAVE, TRY_FREE, TRY_SESSION } attempt;

typedef struct reentry {
    nnt_model *m;
    nnt_trace *self; /* the trace running the callback */
    const int32_t *ids;
    attempt what;
    nnt_runtime *rt;
    nnt_status got; /* what the attempt returned */
    char message[512]; /* nnt_last_error right after it */
    int calls;
} reentry;

static nnt_status try_reenter(void *user, const char *path, int layer, nnt_tensor *value, nnt_error *err)
{
    (void)path, (void)layer, (void)value, (void)err;
    reentry *r = user;
    r->calls++;
    switch (r->what) {
    case TRY_TRACE: {
        nnt_trace *inner = NULL;
        r->got = nnt_trace_new(r->m, &inner);
        if (r->got == NNT_OK) r->got = nnt_trace_run(inner, r->ids, NULL, B, T);
        nnt_trace_free(inner);
        break;
    }
    case TRY_SAVE: r->got = nnt_trace_save(r->self, "layers.0.layer_output"); break;
    case TRY_FREE:
        nnt_trace_free(r->self); /* refused: the trace must live on */
        r->got = NNT_ERR_BUSY;
        break;
    case TRY_SESSION: {
        nnt_session *s = NULL;
        r->got = nnt_session_new(r->m, 1, 16, &s);
        nnt_session_free(s);
        break;
    }
    }
    snprintf(r->message, sizeof r->message, "%s", nnt_last_error(r->rt));
    return NNT_OK; /* the edit itself changes nothing */
}

static void check_reentry(attempt what)
{
    nnt_runtime *rt;
    nnt_model *m;
    int32_t ids[B * T];
    nnt_tensor ref;
    open_fixture(&rt, &m, ids, &ref);

    nnt_trace *t = NULL;
    CU_ASSERT_FATAL(nnt_trace_new(m, &t) == NNT_OK);
    reentry r = {.m = m, .rt = rt, .self = t, .ids = ids, .what = what, .got = NNT_OK};
    CU_ASSERT_FATAL(nnt_trace_edit(t, "layers.1.layer_input", try_reenter, &r) == NNT_OK);
    CU_ASSERT_FATAL(nnt_trace_save(t, "logits") == NNT_OK);
    CU_ASSERT_EQUAL(nnt_trace_run(t, ids, NULL, B, T), NNT_OK);
    CU_ASSERT_EQUAL(r.calls, 1);
    CU_ASSERT_EQUAL(r.got, NNT_ERR_BUSY);
    if (what != TRY_FREE) {
        /* the refusal's message, read inside the callback, names both calls */
        int named = strstr(r.message, "busy: nnt_") && strstr(r.message, "called from an edit callback of nnt_trace_run");
        CU_ASSERT(named);
        if (!named) fprintf(stderr, "\n  %s\n", r.message);
    }
    CU_ASSERT(same_tensor(nnt_trace_get(t, "logits"), &ref));
    CU_ASSERT(nnt_trace_get(t, "layers.0.layer_output") == NULL); /* the refused save added nothing */
    /* the model serves calls again after the callback */
    nnt_tensor again;
    reference_logits(m, ids, &again);
    CU_ASSERT(same_tensor(&again, &ref));
    nnt_tensor_free(&again);
    nnt_trace_free(t);
    close_fixture(rt, m, &ref);
}

static void test_reenter_trace(void) { check_reentry(TRY_TRACE); }
static void test_reenter_save(void) { check_reentry(TRY_SAVE); }
static void test_reenter_free(void) { check_reentry(TRY_FREE); }
static void test_reenter_session(void) { check_reentry(TRY_SESSION); }

/* ---- two threads, one model ---- */

typedef struct worker {
    nnt_model *m;
    const int32_t *ids;
    const nnt_tensor *ref;
    int rounds, ok, busy, wrong, other;
} worker;

static void *trace_loop(void *arg)
{
    worker *w = arg;
    for (int i = 0; i < w->rounds; i++) {
        nnt_trace *t = NULL;
        nnt_status st = nnt_trace_new(w->m, &t);
        if (st == NNT_OK) st = nnt_trace_save(t, "logits");
        if (st == NNT_OK) st = nnt_trace_run(t, w->ids, NULL, B, T);
        if (st == NNT_OK)
            w->ok++, w->wrong += !same_tensor(nnt_trace_get(t, "logits"), w->ref);
        else if (st == NNT_ERR_BUSY)
            w->busy++;
        else
            w->other++;
        nnt_trace_free(t); /* waits for the other thread's call */
    }
    return NULL;
}

static void test_threads_one_model(void)
{
    nnt_runtime *rt;
    nnt_model *m;
    int32_t ids[B * T];
    nnt_tensor ref;
    open_fixture(&rt, &m, ids, &ref);
    worker w[2] = {{m, ids, &ref, 40, 0, 0, 0, 0}, {m, ids, &ref, 40, 0, 0, 0, 0}};
    pthread_t th[2];
    for (int i = 0; i < 2; i++) CU_ASSERT_FATAL(pthread_create(&th[i], NULL, trace_loop, &w[i]) == 0);
    for (int i = 0; i < 2; i++) pthread_join(th[i], NULL);
    for (int i = 0; i < 2; i++) {
        CU_ASSERT_EQUAL(w[i].wrong, 0);
        CU_ASSERT_EQUAL(w[i].other, 0);
        CU_ASSERT_EQUAL(w[i].ok + w[i].busy, w[i].rounds);
    }
    CU_ASSERT(w[0].ok + w[1].ok > 0);
    close_fixture(rt, m, &ref);
}

/* ---- two runtimes in two threads ---- */

typedef struct own_runtime {
    const int32_t *ids;
    const nnt_tensor *ref;
    int rounds, ok, wrong;
} own_runtime;

static void *own_loop(void *arg)
{
    own_runtime *o = arg;
    nnt_runtime *rt = NULL;
    nnt_model *m = NULL;
    char dir[1024];
    if (nnt_runtime_open(t_ini(), &rt) != NNT_OK ||
        nnt_model_load(rt, t_fixture(FIXTURE, dir, sizeof dir), &m) != NNT_OK)
        goto out;
    for (int i = 0; i < o->rounds; i++) {
        nnt_trace *t = NULL;
        if (nnt_trace_new(m, &t) == NNT_OK && nnt_trace_save(t, "logits") == NNT_OK &&
            nnt_trace_run(t, o->ids, NULL, B, T) == NNT_OK)
            o->ok++, o->wrong += !same_tensor(nnt_trace_get(t, "logits"), o->ref);
        nnt_trace_free(t);
    }
out:
    nnt_model_free(m);
    nnt_runtime_close(rt);
    return NULL;
}

static void test_threads_two_runtimes(void)
{
    nnt_runtime *rt;
    nnt_model *m;
    int32_t ids[B * T];
    nnt_tensor ref;
    open_fixture(&rt, &m, ids, &ref);
    own_runtime o[2] = {{ids, &ref, 20, 0, 0}, {ids, &ref, 20, 0, 0}};
    pthread_t th[2];
    for (int i = 0; i < 2; i++) CU_ASSERT_FATAL(pthread_create(&th[i], NULL, own_loop, &o[i]) == 0);
    for (int i = 0; i < 2; i++) pthread_join(th[i], NULL);
    for (int i = 0; i < 2; i++) {
        CU_ASSERT_EQUAL(o[i].ok, o[i].rounds);
        CU_ASSERT_EQUAL(o[i].wrong, 0);
    }
    close_fixture(rt, m, &ref);
}

/* ---- one tokenizer, four threads ---- */

#define N_TEXTS 6
static const char *const TEXTS[N_TEXTS] = {
    "The people of the United States shall have a new birth of freedom.",
    "freedom freedom of the people, by the people, for the people",
    "  leading spaces, tabs\tand\nnew lines  ",
    "caf\xc3\xa9 na\xc3\xafve \xe2\x80\x94 dashes and accents",
    "1234567890 + 0.5 = ?",
    "",
};

typedef struct encoder {
    nnt_tokenizer *tok;
    int32_t *want[N_TEXTS];
    int64_t want_n[N_TEXTS];
    int rounds, wrong, failed;
} encoder;

static void *encode_loop(void *arg)
{
    encoder *e = arg;
    for (int i = 0; i < e->rounds; i++)
        for (int k = 0; k < N_TEXTS; k++) {
            int32_t *ids = NULL;
            int64_t n = 0;
            nnt_status st = nnt_tokenizer_encode(e->tok, TEXTS[k], strlen(TEXTS[k]), NNT_TOKENIZE_ADD_SPECIAL, &ids, &n);
            if (st != NNT_OK) {
                e->failed++;
                continue;
            }
            e->wrong += n != e->want_n[k] || memcmp(ids, e->want[k], (size_t)n * sizeof *ids) != 0;
            char *text = NULL;
            size_t len = 0;
            if (nnt_tokenizer_decode(e->tok, ids, n, 0, &text, &len) != NNT_OK) e->failed++;
            free(text);
            free(ids);
        }
    return NULL;
}

static void test_tokenizer_threads(void)
{
    nnt_tokenizer *tok = NULL;
    CU_ASSERT_FATAL(nnt_tokenizer_load(NNT_TEST_SOURCE_DIR "/examples/tiny-minimax-m2", &tok) == NNT_OK);
    encoder e[4];
    memset(e, 0, sizeof e);
    int32_t *want[N_TEXTS];
    int64_t want_n[N_TEXTS];
    for (int k = 0; k < N_TEXTS; k++)
        CU_ASSERT_FATAL(nnt_tokenizer_encode(tok, TEXTS[k], strlen(TEXTS[k]), NNT_TOKENIZE_ADD_SPECIAL, &want[k],
                                             &want_n[k]) == NNT_OK);
    /* a new tokenizer, so that its word cache starts empty under the threads */
    nnt_tokenizer_free(tok);
    CU_ASSERT_FATAL(nnt_tokenizer_load(NNT_TEST_SOURCE_DIR "/examples/tiny-minimax-m2", &tok) == NNT_OK);
    pthread_t th[4];
    for (int i = 0; i < 4; i++) {
        e[i].tok = tok;
        e[i].rounds = 300;
        memcpy(e[i].want, want, sizeof want);
        memcpy(e[i].want_n, want_n, sizeof want_n);
        CU_ASSERT_FATAL(pthread_create(&th[i], NULL, encode_loop, &e[i]) == 0);
    }
    for (int i = 0; i < 4; i++) pthread_join(th[i], NULL);
    for (int i = 0; i < 4; i++) {
        CU_ASSERT_EQUAL(e[i].wrong, 0);
        CU_ASSERT_EQUAL(e[i].failed, 0);
    }
    for (int k = 0; k < N_TEXTS; k++) free(want[k]);
    nnt_tokenizer_free(tok);
}

int register_tests(void)
{
    CU_pSuite s = CU_add_suite("guard", NULL, NULL);
    if (!s) return -1;
    CU_add_test(s, "a callback tracing the model that runs it is refused", test_reenter_trace);
    CU_add_test(s, "a callback changing its own trace is refused", test_reenter_save);
    CU_add_test(s, "a callback freeing its own trace is refused", test_reenter_free);
    CU_add_test(s, "a callback opening a session on its model is refused", test_reenter_session);
    CU_add_test(s, "two threads on one model: busy or the right values", test_threads_one_model);
    CU_add_test(s, "two runtimes in two threads at once", test_threads_two_runtimes);
    CU_add_test(s, "four threads encoding with one tokenizer", test_tokenizer_threads);
    return 0;
}
