/* test_wildcards.c - saves over value names ("*", "layers.N.*", "layers.*.HOST.*", a slice after
 * them) and the bound on what one call's saves hold ([trace] save_mb). The values "*" saves are
 * held against `nnt support`'s listing of the same model: every value it marks served, on every
 * family's fixture, and nothing else. */
#include <stdlib.h>
#include <string.h>

#include "test_util.h"

static nnt_runtime *rt;

static int setup(void)
{
    return nnt_runtime_open(t_ini(), &rt) == NNT_OK ? 0 : -1;
}

static int teardown(void)
{
    nnt_runtime_close(rt);
    return 0;
}

static const int32_t IDS[] = {3, 17, 42, 5, 99};
#define SEQ 5

/* The canonical paths support's TSV marks served (host column "model", "layers[i]" or
 * "layers[i].HOST"), into paths[]; returns how many. */
static int served_paths(nnt_model *m, char (*paths)[160], int cap)
{
    char file[768];
    snprintf(file, sizeof file, "%s/wild-support.tsv", t_tmpdir());
    FILE *f = fopen(file, "w+");
    CU_ASSERT_FATAL(f != NULL);
    T_OK(rt, nnt_model_support(m, f, 1));
    rewind(f);
    char line[2048];
    int n = 0;
    CU_ASSERT_FATAL(fgets(line, sizeof line, f) != NULL); /* the header */
    while (fgets(line, sizeof line, f)) {
        char *col[9] = {0};
        int k = 0;
        for (char *p = line; k < 9; k++) {
            col[k] = p;
            char *tab = strchr(p, '\t');
            if (!tab) break;
            *tab = '\0';
            p = tab + 1;
        }
        if (k < 4 || strcmp(col[3], "yes") != 0) continue;
        CU_ASSERT_FATAL(n < cap);
        int layer = -1;
        char host[64] = "";
        if (strcmp(col[0], "model") != 0) CU_ASSERT_FATAL(sscanf(col[0], "layers[%d].%63s", &layer, host) >= 1);
        if (layer < 0) snprintf(paths[n], 160, "%s", col[2]);
        else if (!host[0]) snprintf(paths[n], 160, "layers.%d.%s", layer, col[2]);
        else snprintf(paths[n], 160, "layers.%d.%s.%s", layer, host, col[2]);
        n++;
    }
    fclose(f);
    return n;
}

/* The distinct keys of t's results without their "@k" step suffix, into keys[]; returns how many. */
static int result_paths(const nnt_trace *t, char (*keys)[160], int cap)
{
    int n = 0;
    for (int i = 0; i < nnt_trace_result_count(t); i++) {
        const char *key;
        const nnt_tensor *v;
        if (nnt_trace_result(t, i, &key, &v) != NNT_OK) continue;
        char base[160];
        snprintf(base, sizeof base, "%.*s", (int)strcspn(key, "@#"), key);
        int seen = 0;
        for (int j = 0; j < n && !seen; j++) seen = strcmp(keys[j], base) == 0;
        if (seen) continue;
        CU_ASSERT_FATAL(n < cap);
        memcpy(keys[n++], base, sizeof base);
    }
    return n;
}

static int cmp_path(const void *a, const void *b)
{
    return strcmp(a, b);
}

/* "*" saves exactly the values support marks served, on every family's fixture. */
static void test_everything(void)
{
    static const char *const FIXTURES[] = {"minimax_m2/fp32", "kimi_linear/fp32", "mimo_v2_flash/fp32",
                                           "mimo_v2/fp4",     "deepseek_v4/fp32"};
    static char want[2048][160], got[2048][160];
    for (size_t f = 0; f < sizeof FIXTURES / sizeof FIXTURES[0]; f++) {
        nnt_model *m = t_model(rt, FIXTURES[f]);
        int n_want = served_paths(m, want, 2048);
        nnt_trace *t = NULL;
        T_OK(rt, nnt_trace_new(m, &t));
        T_OK(rt, nnt_trace_save(t, "*"));
        T_OK(rt, nnt_trace_run(t, IDS, NULL, 1, SEQ));
        int n_got = result_paths(t, got, 2048);
        qsort(want, (size_t)n_want, sizeof want[0], cmp_path);
        qsort(got, (size_t)n_got, sizeof got[0], cmp_path);
        if (n_got != n_want) fprintf(stderr, "\n  %s: '*' saved %d values, support serves %d\n", FIXTURES[f], n_got, n_want);
        CU_ASSERT_EQUAL(n_got, n_want);
        for (int i = 0; i < n_want && i < n_got; i++)
            if (strcmp(want[i], got[i]) != 0) {
                fprintf(stderr, "\n  %s: support serves %s, '*' saved %s\n", FIXTURES[f], want[i], got[i]);
                CU_FAIL("'*' differs from support");
                break;
            }
        CU_ASSERT(n_want > 40);
        nnt_trace_free(t);
        nnt_model_free(m);
    }
}

static int has_key(const nnt_trace *t, const char *key)
{
    return nnt_trace_lookup(t, key, NULL, NULL) == NNT_OK;
}

/* A block's and a host's values; the slice rule; the same values as the paths written out. */
static void test_scopes_and_slices(void)
{
    nnt_model *m = t_model(rt, "minimax_m2/fp32");
    nnt_trace *t = NULL, *one = NULL;
    T_OK(rt, nnt_trace_new(m, &t));
    T_OK(rt, nnt_trace_save(t, "model.layers[1].*"));
    T_OK(rt, nnt_trace_run(t, IDS, NULL, 1, SEQ));
    /* block 1's values in support: 6 of the block, 8 of self_attn and 6 of mlp (router_logits,
     * expert_indices, expert_weights, expert_outputs, routed_output, mlp_output), the inputs
     * and outputs of q_proj, k_proj, v_proj, q_norm and k_norm, the inputs of the two
     * layernorms, the experts' gate_proj, up_proj and down_proj outputs and down_proj's input by
     * routing slot (the other modules' values are standard ones) */
    CU_ASSERT_EQUAL(nnt_trace_result_count(t), 36);
    for (int i = 0; i < nnt_trace_result_count(t); i++) {
        const char *key;
        const nnt_tensor *v;
        T_OK(rt, nnt_trace_result(t, i, &key, &v));
        CU_ASSERT(strncmp(key, "layers.1.", 9) == 0);
    }
    T_OK(rt, nnt_trace_new(m, &one));
    T_OK(rt, nnt_trace_save(one, "layers.1.mlp.expert_weights"));
    T_OK(rt, nnt_trace_run(one, IDS, NULL, 1, SEQ));
    const nnt_tensor *a = nnt_trace_get(t, "layers.1.mlp.expert_weights"), *b = nnt_trace_get(one, "layers.1.mlp.expert_weights");
    CU_ASSERT_FATAL(a && b);
    CU_ASSERT(t_rel_err(a, b, NULL) == 0.0);
    nnt_trace_free(one);
    nnt_trace_free(t);

    /* one host over every block: 3 blocks x (8 attention values + 10 of its modules) */
    T_OK(rt, nnt_trace_new(m, &t));
    T_OK(rt, nnt_trace_save(t, "layers.*.self_attn.*"));
    T_OK(rt, nnt_trace_run(t, IDS, NULL, 1, SEQ));
    CU_ASSERT_EQUAL(nnt_trace_result_count(t), 54);
    CU_ASSERT(has_key(t, "layers.2.self_attn.attention_probabilities") && has_key(t, "layers.2.self_attn.k_norm.output"));
    CU_ASSERT(!has_key(t, "layers.2.layer_output"));
    nnt_trace_free(t);

    /* [:, -1] restricts a seq axis: [batch seq ...] values are kept, patterns, queries (heads
     * second), next_token_probs ([batch vocab]) and input_size ([2]) left out */
    T_OK(rt, nnt_trace_new(m, &t));
    T_OK(rt, nnt_trace_save(t, "*[:, -1]"));
    T_OK(rt, nnt_trace_run(t, IDS, NULL, 1, SEQ));
    const nnt_tensor *lo = nnt_trace_get(t, "layers.0.layer_output");
    CU_ASSERT_FATAL(lo != NULL);
    CU_ASSERT(lo->ndim == 2 && lo->shape[0] == 1 && lo->shape[1] == 64);
    const nnt_tensor *ids = nnt_trace_get(t, "input_ids");
    CU_ASSERT_FATAL(ids != NULL);
    CU_ASSERT(ids->ndim == 1 && ((const int32_t *)ids->data)[0] == IDS[SEQ - 1]);
    CU_ASSERT(has_key(t, "layers.2.mlp.expert_outputs") && has_key(t, "logits"));
    CU_ASSERT(!has_key(t, "layers.0.self_attn.attention_scores") && !has_key(t, "layers.0.self_attn.attention_queries"));
    CU_ASSERT(!has_key(t, "next_token_probs") && !has_key(t, "input_size"));
    nnt_trace_free(t);

    /* a slice of the first axis fits every value with a batch axis first */
    T_OK(rt, nnt_trace_new(m, &t));
    T_OK(rt, nnt_trace_save(t, "layers.0.self_attn.*[0]"));
    T_OK(rt, nnt_trace_run(t, IDS, NULL, 1, SEQ));
    CU_ASSERT_EQUAL(nnt_trace_result_count(t), 18);
    const nnt_tensor *p = nnt_trace_get(t, "layers.0.self_attn.attention_probabilities");
    CU_ASSERT_FATAL(p != NULL);
    CU_ASSERT(p->ndim == 3 && p->shape[1] == SEQ && p->shape[2] == SEQ);
    nnt_trace_free(t);
    nnt_model_free(m);
}

/* Bad wildcards are refused naming the part at fault, and leave the trace as it was. */
static void test_refusals(void)
{
    nnt_model *m = t_model(rt, "minimax_m2/fp32");
    nnt_trace *t = NULL;
    T_OK(rt, nnt_trace_new(m, &t));
    T_FAILS(rt, nnt_trace_save(t, "layers.7.*"), NNT_ERR_INDEX, "block 7 is out of range");
    T_FAILS(rt, nnt_trace_save(t, "layers.1.mpl.*"), NNT_ERR_PATH, "did you mean 'mlp'");
    T_FAILS(rt, nnt_trace_save(t, "layers.1.linear_attn.*"), NNT_ERR_NOT_SERVED, "serves no value there");
    T_FAILS(rt, nnt_trace_save(t, "input_size.*"), NNT_ERR_PATH, "not of the form");
    /* no value of a block has a seq axis third: nothing fits */
    T_FAILS(rt, nnt_trace_save(t, "layers.1.mlp.*[:, :, :, :, 0]"), NNT_ERR_NOT_SERVED, "fit the slice");
    T_FAILS(rt, nnt_trace_grad(t, "layers.1.*"), NNT_ERR_PATH, "a wildcard over value names is for saves");
    /* nothing of the refused wildcards was kept: a run saves the one value asked after them */
    T_OK(rt, nnt_trace_save(t, "logits"));
    T_OK(rt, nnt_trace_run(t, IDS, NULL, 1, SEQ));
    CU_ASSERT_EQUAL(nnt_trace_result_count(t), 1);
    nnt_trace_free(t);
    nnt_model_free(m);
}

static int called;
static nnt_status count_call(void *user, const char *path, int layer, nnt_tensor *value, nnt_error *err)
{
    (void)user, (void)path, (void)layer, (void)value, (void)err;
    called++;
    return NNT_OK;
}

/* What the saves hold is added up before the forward: past [trace] save_mb the call is refused
 * naming the bytes (by hand: layer_output [1, 5, 64] F32 is 1280 bytes, logits [1, 5, 256] 5120),
 * and an edit's callback never runs. */
static void test_save_bound(void)
{
    char ini[768];
    /* 6000 bytes: one logits and one block output (6400) do not fit, either alone does */
    CU_ASSERT_FATAL(t_ini_with("wild-bound.ini", "trace", "save_mb", "0.005722", ini, sizeof ini) != NULL);
    nnt_runtime *small = NULL;
    CU_ASSERT_FATAL(nnt_runtime_open(ini, &small) == NNT_OK);
    nnt_model *m = t_model(small, "minimax_m2/fp32");
    nnt_trace *t = NULL;
    T_OK(small, nnt_trace_new(m, &t));
    T_OK(small, nnt_trace_edit(t, "layers.0.layer_input", count_call, NULL));
    T_OK(small, nnt_trace_save(t, "layers.0.layer_output"));
    T_OK(small, nnt_trace_save(t, "logits"));
    called = 0;
    T_FAILS(small, nnt_trace_run(t, IDS, NULL, 1, SEQ), NNT_ERR_OUT_OF_MEMORY, "would hold 6400 bytes");
    CU_ASSERT_PTR_NOT_NULL(strstr(nnt_last_error(small), "[trace] save_mb"));
    CU_ASSERT_PTR_NOT_NULL(strstr(nnt_last_error(small), "the largest is logits (5120 bytes)"));
    CU_ASSERT_EQUAL(called, 0);
    nnt_trace_free(t);
    T_OK(small, nnt_trace_new(m, &t));
    T_OK(small, nnt_trace_save(t, "logits"));
    T_OK(small, nnt_trace_save(t, "layers.0.layer_output[:, -1]")); /* 256 bytes: 5376 in all */
    T_OK(small, nnt_trace_run(t, IDS, NULL, 1, SEQ));
    nnt_trace_free(t);
    /* "*" on this model is past the bound */
    T_OK(small, nnt_trace_new(m, &t));
    T_OK(small, nnt_trace_save(t, "*"));
    T_FAILS(small, nnt_trace_run(t, IDS, NULL, 1, SEQ), NNT_ERR_OUT_OF_MEMORY, "[trace] save_mb (as set)");
    nnt_trace_free(t);
    nnt_model_free(m);
    nnt_runtime_close(small);
}

int register_tests(void)
{
    CU_pSuite s = CU_add_suite("wildcards", setup, teardown);
    if (!s) return -1;
    if (!CU_add_test(s, "'*' saves every value support serves, on every family", test_everything) ||
        !CU_add_test(s, "a block's and a host's values, slices applied where they fit", test_scopes_and_slices) ||
        !CU_add_test(s, "bad wildcards are refused, the trace unchanged", test_refusals) ||
        !CU_add_test(s, "the saves' bytes are bounded before the forward", test_save_bound))
        return -1;
    return 0;
}
