/* test_trace.c - value paths and the checks a trace makes before the forward: unknown names
 * (with suggestions), block indices out of range, values the family does not serve (with its
 * reason), edits of read-only values, shapes of written tensors. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"

static nnt_runtime *rt;
static nnt_model *m;
static t_ref ref;

static int setup(void)
{
    if (nnt_runtime_open(t_ini(), &rt) != NNT_OK) return -1;
    char dir[512];
    if (nnt_model_load(rt, t_fixture("minimax_m2/fp32", dir, sizeof dir), &m) != NNT_OK) return -1;
    return t_ref_open(&ref, rt, "minimax_m2/fp32");
}

static int teardown(void)
{
    nnt_model_free(m);
    nnt_runtime_close(rt);
    return 0;
}

static void test_path_forms(void)
{
    nnt_trace *t;
    T_OK(rt, nnt_trace_new(m, &t));
    T_OK(rt, nnt_trace_save(t, "layers[1].mlp.expert_weights"));
    T_OK(rt, nnt_trace_save(t, "model.layers.-1.layer_output"));
    T_OK(rt, nnt_trace_save(t, "layers.*.self_attn.attention_output"));
    T_OK(rt, nnt_trace_save(t, "layers.0.block_sparse_moe.router_logits")); /* the checkpoint's name, by RENAME */
    T_OK(rt, nnt_trace_save(t, "layers.2.input"));
    T_OK(rt, nnt_trace_save(t, "model.logits"));
    T_OK(rt, nnt_trace_save(t, "input_size"));
    T_OK(rt, nnt_trace_run(t, ref.ids, ref.mask, ref.batch, ref.seq));
    CU_ASSERT_EQUAL(nnt_trace_result_count(t), 9);
    CU_ASSERT_PTR_NOT_NULL(nnt_trace_get(t, "layers.1.mlp.expert_weights"));
    CU_ASSERT_PTR_NOT_NULL(nnt_trace_get(t, "layers.2.layer_output"));
    CU_ASSERT_PTR_NOT_NULL(nnt_trace_get(t, "layers[2].output"));
    CU_ASSERT_PTR_NOT_NULL(nnt_trace_get(t, "layers.0.mlp.router_logits"));
    CU_ASSERT_PTR_NOT_NULL(nnt_trace_get(t, "layers.2.layer_input"));
    for (int l = 0; l < 3; l++) {
        char k[80];
        snprintf(k, sizeof k, "layers.%d.self_attn.attention_output", l);
        CU_ASSERT_PTR_NOT_NULL(nnt_trace_get(t, k));
    }
    const nnt_tensor *size = nnt_trace_get(t, "input_size");
    CU_ASSERT_FATAL(size != NULL);
    CU_ASSERT_EQUAL(nnt_tensor_get_f64(size, 0), ref.batch);
    CU_ASSERT_EQUAL(nnt_tensor_get_f64(size, 1), ref.seq);
    /* the saved shapes follow the page's layouts */
    const nnt_tensor *w = nnt_trace_get(t, "layers.1.mlp.expert_weights");
    CU_ASSERT(w->ndim == 3 && w->shape[0] == ref.batch && w->shape[1] == ref.seq && w->shape[2] == 2);
    nnt_trace_free(t);
}

static void test_unknown_paths(void)
{
    nnt_trace *t;
    T_OK(rt, nnt_trace_new(m, &t));
    T_FAILS(rt, nnt_trace_save(t, "layers.1.mlp.expert_weight"), NNT_ERR_PATH, "did you mean 'expert_weights'");
    T_FAILS(rt, nnt_trace_save(t, "layers.1.self_atn.attention_scores"), NNT_ERR_PATH, "did you mean 'self_attn'");
    T_FAILS(rt, nnt_trace_save(t, "logit"), NNT_ERR_PATH, "did you mean 'logits'");
    T_FAILS(rt, nnt_trace_save(t, "layer_output"), NNT_ERR_PATH, "layers.0.layer_output");
    T_FAILS(rt, nnt_trace_save(t, "layers.1.attention_output"), NNT_ERR_PATH, "layers.0.self_attn.attention_output");
    T_FAILS(rt, nnt_trace_save(t, "layers.1.logits"), NNT_ERR_PATH, "is a model value");
    T_FAILS(rt, nnt_trace_save(t, "layers..1.mlp"), NNT_ERR_PATH, "is not of the form");
    T_FAILS(rt, nnt_trace_save(t, "self_attn.attention_scores"), NNT_ERR_PATH, "needs a block");
    nnt_trace_free(t);
}

static void test_index_range(void)
{
    nnt_trace *t;
    T_OK(rt, nnt_trace_new(m, &t));
    T_FAILS(rt, nnt_trace_save(t, "layers.3.layer_output"), NNT_ERR_INDEX, "block 3 is out of range; the model has 3 blocks");
    T_FAILS(rt, nnt_trace_save(t, "layers[-4].layer_output"), NNT_ERR_INDEX, "block -4 is out of range");
    T_FAILS(rt, nnt_trace_zero(t, "layers.99.mlp.expert_weights"), NNT_ERR_INDEX, "out of range");
    nnt_trace_free(t);
}

static void test_not_served(void)
{
    nnt_trace *t;
    T_OK(rt, nnt_trace_new(m, &t));
    T_FAILS(rt, nnt_trace_save(t, "layers.0.mlp.shared_expert_output"), NNT_ERR_NOT_SERVED, "no shared expert");
    T_FAILS(rt, nnt_trace_save(t, "layers.*.mlp.mlp_activation"), NNT_ERR_NOT_SERVED, "minimax_m2 family");
    T_FAILS(rt, nnt_trace_save(t, "layers.1.linear_attn.state"), NNT_ERR_NOT_SERVED, "softmax attention");
    T_FAILS(rt, nnt_trace_save(t, "layers.1.attention_comb"), NNT_ERR_NOT_SERVED, "single residual stream");
    nnt_value_info vi;
    T_OK(rt, nnt_model_value_info(m, "layers.2.mlp.mlp_neurons", NULL, &vi));
    CU_ASSERT_EQUAL(vi.served, 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(vi.reason, "routed"));
    nnt_trace_free(t);
}

static void test_read_only(void)
{
    nnt_trace *t;
    T_OK(rt, nnt_trace_new(m, &t));
    T_FAILS(rt, nnt_trace_zero(t, "next_token_probs"), NNT_ERR_READ_ONLY, "read-only");
    T_FAILS(rt, nnt_trace_scale(t, "input_ids", 2.0f), NNT_ERR_READ_ONLY, "input_ids is read-only");
    T_FAILS(rt, nnt_trace_zero(t, "attention_mask"), NNT_ERR_READ_ONLY, "read-only");
    /* a failed request leaves the trace as it was */
    CU_ASSERT_EQUAL(nnt_trace_result_count(t), 0);
    T_OK(rt, nnt_trace_run(t, ref.ids, ref.mask, ref.batch, ref.seq));
    CU_ASSERT_EQUAL(nnt_trace_result_count(t), 0);
    nnt_trace_free(t);
}

/* A written tensor of the wrong shape is refused before the forward runs: nothing is saved. */
static void test_shapes_checked_before_forward(void)
{
    nnt_trace *t;
    T_OK(rt, nnt_trace_new(m, &t));
    nnt_tensor v;
    int64_t shape[3] = {ref.batch, ref.seq, 7};
    CU_ASSERT_FATAL(nnt_tensor_alloc(&v, NNT_F32, 3, shape) == NNT_OK);
    T_OK(rt, nnt_trace_save(t, "token_embeddings"));
    T_OK(rt, nnt_trace_set(t, "layers.1.mlp.router_logits", &v));
    T_FAILS(rt, nnt_trace_run(t, ref.ids, ref.mask, ref.batch, ref.seq), NNT_ERR_SHAPE, "[2, 24, 8]");
    CU_ASSERT_EQUAL(nnt_trace_result_count(t), 0);
    nnt_trace_free(t);
    T_OK(rt, nnt_trace_new(m, &t));
    int64_t h = 5;
    nnt_tensor vec;
    CU_ASSERT_FATAL(nnt_tensor_alloc(&vec, NNT_F32, 1, &h) == NNT_OK);
    T_OK(rt, nnt_trace_add(t, "layers.0.layer_output", &vec, 1.0f));
    T_FAILS(rt, nnt_trace_run(t, ref.ids, ref.mask, ref.batch, ref.seq), NNT_ERR_SHAPE, "not the trailing axes");
    nnt_trace_free(t);
    /* a mask from another module is refused when asked */
    T_OK(rt, nnt_trace_new(m, &t));
    T_FAILS(rt, nnt_trace_masked_fill(t, "layers.1.mlp.expert_weights", "layers.1.self_attn.attention_output", 0, 0.0f),
            NNT_ERR_PATH, "same module");
    T_FAILS(rt, nnt_trace_masked_fill(t, "layers.1.mlp.expert_weights", "layers.2.mlp.expert_indices", 0, 0.0f),
            NNT_ERR_PATH, "same module of the same block");
    nnt_trace_free(t);
    nnt_tensor_free(&v);
    nnt_tensor_free(&vec);
}

static void test_bad_inputs(void)
{
    nnt_trace *t;
    T_OK(rt, nnt_trace_new(m, &t));
    int32_t ids[3] = {1, 256, 3}, mask[3] = {1, 1, 2};
    T_FAILS(rt, nnt_trace_run(t, ids, NULL, 1, 3), NNT_ERR_INVALID_ARGUMENT, "token id 256 at row 0, position 1");
    ids[1] = 2;
    T_FAILS(rt, nnt_trace_run(t, ids, mask, 1, 3), NNT_ERR_INVALID_ARGUMENT, "attention_mask holds 2");
    T_FAILS(rt, nnt_trace_run(t, ids, NULL, 1, 0), NNT_ERR_INVALID_ARGUMENT, "batch, seq >= 1");
    /* an expert index written out of range is refused by the mixture, not used */
    nnt_tensor bad;
    int64_t shape[3] = {1, 3, 2};
    CU_ASSERT_FATAL(nnt_tensor_alloc(&bad, NNT_I32, 3, shape) == NNT_OK);
    ((int32_t *)bad.data)[3] = 9;
    T_OK(rt, nnt_trace_set(t, "layers.0.mlp.expert_indices", &bad));
    T_FAILS(rt, nnt_trace_run(t, ids, NULL, 1, 3), NNT_ERR_INVALID_ARGUMENT, "expert_indices holds 9");
    nnt_tensor_free(&bad);
    nnt_trace_free(t);
}

/* Factors, fill values, temperatures and top_p outside their domains are refused by libnnt itself
 * (the C API, not only the CLI and the request parser), with the request parser's words. */
static void test_bad_numbers(void)
{
    nnt_trace *t;
    T_OK(rt, nnt_trace_new(m, &t));
    const float bad[] = {NAN, INFINITY, -INFINITY, 1e30f};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        T_FAILS(rt, nnt_trace_scale(t, "layers.0.layer_output", bad[i]), NNT_ERR_INVALID_ARGUMENT,
                "is not a finite number with |F| <= 1e6");
        nnt_tensor v;
        int64_t shape[1] = {nnt_model_get_info(m)->hidden_size};
        CU_ASSERT_FATAL(nnt_tensor_alloc(&v, NNT_F32, 1, shape) == NNT_OK);
        T_FAILS(rt, nnt_trace_add(t, "layers.0.layer_output", &v, bad[i]), NNT_ERR_INVALID_ARGUMENT,
                "factor");
        T_FAILS(rt, nnt_trace_steer(t, 0, 1, NULL, 0, &v, bad[i]), NNT_ERR_INVALID_ARGUMENT,
                "steer: factor");
        nnt_tensor_free(&v);
        T_FAILS(rt, nnt_trace_masked_fill(t, "layers.0.self_attn.attention_scores", "layers.0.self_attn.attention_scores", 0,
                                          bad[i]),
                NNT_ERR_INVALID_ARGUMENT, "fill");
    }
    CU_ASSERT_EQUAL(nnt_trace_result_count(t), 0);
    T_OK(rt, nnt_trace_scale(t, "layers.0.layer_output", -1e6f)); /* the bound itself is allowed */
    int32_t ids[3] = {1, 2, 3}, out[2];
    nnt_generate_opts o = {.max_new_tokens = 2, .temperature = NAN, .top_p = 1.0f};
    T_FAILS(rt, nnt_generate(m, NULL, ids, NULL, 1, 3, &o, out), NNT_ERR_INVALID_ARGUMENT,
            "temperature nan is not a number in 0..1e6");
    o.temperature = INFINITY;
    T_FAILS(rt, nnt_generate(m, NULL, ids, NULL, 1, 3, &o, out), NNT_ERR_INVALID_ARGUMENT, "temperature inf");
    o.temperature = 1.0f;
    o.top_p = NAN;
    T_FAILS(rt, nnt_generate(m, NULL, ids, NULL, 1, 3, &o, out), NNT_ERR_INVALID_ARGUMENT, "top_p nan");
    o.top_p = -0.5f;
    T_FAILS(rt, nnt_generate(m, NULL, ids, NULL, 1, 3, &o, out), NNT_ERR_INVALID_ARGUMENT, "top_p -0.5");
    nnt_trace_free(t);
}

/* Equal element by element (same count, same values as doubles). */
static int same_values(const nnt_tensor *a, const nnt_tensor *b, double factor)
{
    if (!a || !b || nnt_tensor_numel(a) != nnt_tensor_numel(b)) return 0;
    for (int64_t i = 0; i < nnt_tensor_numel(a); i++)
        if (nnt_tensor_get_f64(a, i) != factor * nnt_tensor_get_f64(b, i)) return 0;
    return 1;
}

/* A value saved by several requests of one call: the first under its path, the r-th later one
 * under path#r, each reachable from nnt_trace_get and nnt_trace_lookup in any spelling, listed
 * by nnt_trace_result and written under the same keys. A save before an edit keeps the value
 * before it, a save after keeps the edited one. */
static void test_saved_twice(void)
{
    nnt_trace *t;
    T_OK(rt, nnt_trace_new(m, &t));
    T_OK(rt, nnt_trace_save(t, "layers.0.layer_output"));
    T_OK(rt, nnt_trace_scale(t, "layers.0.layer_output", 2.0f));
    T_OK(rt, nnt_trace_save(t, "layers[0].output"));
    T_OK(rt, nnt_trace_save(t, "layers.*.layer_output"));
    T_OK(rt, nnt_trace_run(t, ref.ids, ref.mask, ref.batch, ref.seq));
    const nnt_tensor *before = nnt_trace_get(t, "layers.0.layer_output");
    const nnt_tensor *after = nnt_trace_get(t, "layers.0.layer_output#1");
    const nnt_tensor *star = nnt_trace_get(t, "model.layers[0].layer_output#2");
    CU_ASSERT_FATAL(before && after && star && before != after);
    CU_ASSERT(same_values(after, before, 2.0));
    CU_ASSERT(same_values(star, after, 1.0));
    /* block 1 is covered by the "*" request alone: no suffix */
    CU_ASSERT_PTR_NOT_NULL(nnt_trace_get(t, "layers.1.layer_output"));
    CU_ASSERT_PTR_NULL(nnt_trace_get(t, "layers.1.layer_output#1"));
    CU_ASSERT_PTR_NULL(nnt_trace_get(t, "layers.0.layer_output#3"));
    CU_ASSERT(nnt_trace_get(t, "layers.0.layer_output#0") == before);
    const nnt_tensor *v = NULL;
    int none = -1;
    CU_ASSERT_EQUAL(nnt_trace_lookup(t, "layers.0.output#1", &v, &none), NNT_OK);
    CU_ASSERT(v == after && none == 0);
    CU_ASSERT_EQUAL(nnt_trace_lookup(t, "layers.0.layer_output#3", &v, &none), NNT_ERR_NOT_FOUND);
    CU_ASSERT(v == NULL && none == 0);
    /* the keys, in the order saved */
    const char *want[] = {"layers.0.layer_output", "layers.0.layer_output#1", "layers.0.layer_output#2",
                          "layers.1.layer_output", "layers.2.layer_output"};
    CU_ASSERT_EQUAL_FATAL(nnt_trace_result_count(t), 5);
    for (int i = 0; i < 5; i++) {
        const char *key;
        T_OK(rt, nnt_trace_result(t, i, &key, &v));
        if (strcmp(key, want[i]) != 0) fprintf(stderr, "\n  result %d: '%s', expected '%s'\n", i, key, want[i]);
        CU_ASSERT_STRING_EQUAL(key, want[i]);
    }
    /* the file holds the same keys */
    char file[768];
    snprintf(file, sizeof file, "%s/saved_twice.safetensors", t_tmpdir());
    T_OK(rt, nnt_trace_write_safetensors(t, file));
    nnt_tensor back;
    T_OK(rt, nnt_safetensors_read(rt, file, "layers.0.layer_output#1", &back));
    CU_ASSERT(same_values(&back, after, 1.0));
    nnt_tensor_free(&back);
    T_OK(rt, nnt_safetensors_read(rt, file, "layers.0.layer_output", &back));
    CU_ASSERT(same_values(&back, before, 1.0));
    nnt_tensor_free(&back);
    nnt_trace_free(t);
}

/* Saves with a [...] slice keep only the slice, under the value's key: each equals the same
 * entries of the whole value saved alongside, taken here with explicit index arithmetic, on a
 * left-padded batch; per generation step too. Bad slices are refused: syntax when requested,
 * indices against the value's shape before the forward, and edits with a slice. */
static void test_slices(void)
{
    nnt_trace *t;
    T_OK(rt, nnt_trace_new(m, &t));
    T_OK(rt, nnt_trace_save(t, "layers.*.layer_output"));
    T_OK(rt, nnt_trace_save(t, "layers.1.self_attn.attention_probabilities"));
    T_OK(rt, nnt_trace_save(t, "layers.*.layer_output[:, -1]"));
    T_OK(rt, nnt_trace_save(t, "layers[1].self_attn.attention_probabilities[:, 3]"));
    T_OK(rt, nnt_trace_save(t, "layers.1.self_attn.attention_probabilities[..., 2:20:5]"));
    T_OK(rt, nnt_trace_save(t, "layers.0.layer_output[1, -3:, 7]"));
    T_OK(rt, nnt_trace_run(t, ref.ids, ref.mask, ref.batch, ref.seq));
    const int B = ref.batch, S = ref.seq;
    const nnt_tensor *full = nnt_trace_get(t, "layers.2.layer_output");
    const nnt_tensor *last = nnt_trace_get(t, "layers.2.layer_output#1");
    CU_ASSERT_FATAL(full && last);
    const int64_t H = full->shape[2];
    CU_ASSERT_FATAL(last->ndim == 2 && last->shape[0] == B && last->shape[1] == H);
    int bad = 0;
    for (int b = 0; b < B; b++)
        for (int64_t h = 0; h < H; h++)
            bad += ((const float *)last->data)[b * H + h] != ((const float *)full->data)[((int64_t)b * S + S - 1) * H + h];
    const nnt_tensor *pf = nnt_trace_get(t, "layers.1.self_attn.attention_probabilities");
    const nnt_tensor *head3 = nnt_trace_get(t, "layers.1.self_attn.attention_probabilities#1");
    const nnt_tensor *keys = nnt_trace_get(t, "layers.1.self_attn.attention_probabilities#2");
    CU_ASSERT_FATAL(pf && head3 && keys && pf->ndim == 4 && pf->shape[1] > 3);
    const int64_t NH = pf->shape[1], Q = pf->shape[2], K = pf->shape[3];
    CU_ASSERT_FATAL(head3->ndim == 3 && head3->shape[0] == B && head3->shape[1] == Q && head3->shape[2] == K);
    CU_ASSERT_FATAL(keys->ndim == 4 && keys->shape[3] == 4); /* keys 2, 7, 12, 17 */
    for (int b = 0; b < B; b++)
        for (int64_t h = 0; h < NH; h++)
            for (int64_t q = 0; q < Q; q++)
                for (int64_t k = 0; k < K; k++) {
                    float x = ((const float *)pf->data)[((b * NH + h) * Q + q) * K + k];
                    if (h == 3) bad += ((const float *)head3->data)[(b * Q + q) * K + k] != x;
                    if (k >= 2 && k < 20 && (k - 2) % 5 == 0)
                        bad += ((const float *)keys->data)[((b * NH + h) * Q + q) * 4 + (k - 2) / 5] != x;
                }
    const nnt_tensor *f0 = nnt_trace_get(t, "layers.0.layer_output"), *pick = nnt_trace_get(t, "layers.0.layer_output#2");
    CU_ASSERT_FATAL(f0 && pick && pick->ndim == 1 && pick->shape[0] == 3);
    for (int i = 0; i < 3; i++) bad += ((const float *)pick->data)[i] != ((const float *)f0->data)[((int64_t)S + S - 3 + i) * H + 7];
    CU_ASSERT_EQUAL(bad, 0);
    nnt_trace_free(t);
    /* refusals */
    T_OK(rt, nnt_trace_new(m, &t));
    T_FAILS(rt, nnt_trace_save(t, "layers.0.layer_output[:, x]"), NNT_ERR_PATH, "slice item 'x' is not an index");
    T_FAILS(rt, nnt_trace_save(t, "layers.0.layer_output[::0]"), NNT_ERR_PATH, "step >= 1");
    T_FAILS(rt, nnt_trace_save(t, "layers.0.layer_output[..., ...]"), NNT_ERR_PATH, "'...' may appear once");
    T_FAILS(rt, nnt_trace_zero(t, "layers.0.layer_output[:, 1]"), NNT_ERR_PATH, "edits take the whole value");
    CU_ASSERT_EQUAL(nnt_trace_result_count(t), 0);
    T_OK(rt, nnt_trace_save(t, "layers.1.self_attn.attention_probabilities[:, 99]"));
    T_FAILS(rt, nnt_trace_run(t, ref.ids, ref.mask, ref.batch, ref.seq), NNT_ERR_INDEX,
            "index 99 is outside axis 1 (num_heads) of size");
    nnt_trace_free(t);
    T_OK(rt, nnt_trace_new(m, &t));
    T_OK(rt, nnt_trace_save(t, "layers.0.layer_output[0, 0, 0, 0]"));
    T_FAILS(rt, nnt_trace_run(t, ref.ids, ref.mask, ref.batch, ref.seq), NNT_ERR_INDEX, "4 slice items for the 3 axes");
    nnt_trace_free(t);
    T_OK(rt, nnt_trace_new(m, &t));
    T_OK(rt, nnt_trace_save(t, "layers.0.layer_output[:, 30:]"));
    T_FAILS(rt, nnt_trace_run(t, ref.ids, ref.mask, ref.batch, ref.seq), NNT_ERR_INDEX, "axis 1 (seq) selects nothing");
    nnt_trace_free(t);
    /* per generation step: the last position of each call, [batch, hidden] */
    T_OK(rt, nnt_trace_new(m, &t));
    T_OK(rt, nnt_trace_save(t, "layers.2.layer_output"));
    T_OK(rt, nnt_trace_save(t, "layers.2.layer_output[:, -1]"));
    int32_t out[2 * 3];
    nnt_generate_opts o = {.max_new_tokens = 3, .temperature = 0.0f, .top_k = 0, .top_p = 1.0f, .seed = 0};
    T_OK(rt, nnt_generate(m, t, ref.ids, ref.mask, B, S, &o, out));
    for (int step = 0; step < 3; step++) {
        char kf[64], ks[64];
        snprintf(kf, sizeof kf, step ? "layers.2.layer_output@%d" : "layers.2.layer_output", step);
        snprintf(ks, sizeof ks, step ? "layers.2.layer_output@%d#1" : "layers.2.layer_output#1", step);
        const nnt_tensor *a = nnt_trace_get(t, kf), *sl = nnt_trace_get(t, ks);
        CU_ASSERT_FATAL(a && sl && sl->ndim == 2 && sl->shape[0] == B);
        int64_t T = a->shape[1];
        for (int b = 0; b < B; b++)
            for (int64_t h = 0; h < H; h++)
                bad += ((const float *)sl->data)[b * H + h] != ((const float *)a->data)[((int64_t)b * T + T - 1) * H + h];
    }
    CU_ASSERT_EQUAL(bad, 0);
    nnt_trace_free(t);
}

/* The support listing covers every value of the page with a reason where not served. */
static void test_support_listing(void)
{
    char path[768];
    snprintf(path, sizeof path, "%s/support.tsv", t_tmpdir());
    FILE *f = fopen(path, "w+");
    CU_ASSERT_FATAL(f != NULL);
    T_OK(rt, nnt_model_support(m, f, 1));
    rewind(f);
    char line[1024];
    int rows = 0, unserved_without_reason = 0, shared = 0;
    while (fgets(line, sizeof line, f)) {
        rows++;
        /* columns: host block value served layout axes dtype writable reason */
        char *col[9] = {0};
        int n = 0;
        for (char *p = line; n < 9; n++) {
            col[n] = p;
            char *tab = strchr(p, '\t');
            if (!tab) break;
            *tab = '\0';
            p = tab + 1;
        }
        CU_ASSERT_EQUAL(n, 8);
        if (n == 8 && strcmp(col[3], "no") == 0 && strlen(col[8]) < 10) unserved_without_reason++;
        if (n == 8 && strcmp(col[0], "layers[1].mlp") == 0 && strcmp(col[2], "shared_expert_output") == 0 &&
            strcmp(col[3], "no") == 0)
            shared++;
    }
    fclose(f);
    /* header + 8 model values + 3 blocks x (10 + 8 + 11 + 9) block values + 3 blocks x 16 native
     * values (the inputs and outputs of q_proj, k_proj, v_proj, q_norm, k_norm, the inputs of
     * input_layernorm and post_attention_layernorm, the experts' 4 values by routing slot) */
    CU_ASSERT_EQUAL(rows, 1 + 8 + 3 * 38 + 3 * 16);
    CU_ASSERT_EQUAL(unserved_without_reason, 0);
    CU_ASSERT_EQUAL(shared, 1);
}

int register_tests(void)
{
    CU_pSuite s = CU_add_suite("trace", setup, teardown);
    if (!s) return -1;
    if (!CU_add_test(s, "path spellings, wildcards, negative indices, RENAME", test_path_forms) ||
        !CU_add_test(s, "unknown paths suggest the nearest names", test_unknown_paths) ||
        !CU_add_test(s, "block index out of range", test_index_range) ||
        !CU_add_test(s, "values not served, with the family's reason", test_not_served) ||
        !CU_add_test(s, "edits of read-only values", test_read_only) ||
        !CU_add_test(s, "written shapes are checked before the forward", test_shapes_checked_before_forward) ||
        !CU_add_test(s, "bad token ids and masks", test_bad_inputs) ||
        !CU_add_test(s, "factors, fills, temperatures and top_p out of their domains", test_bad_numbers) ||
        !CU_add_test(s, "support lists every value with a reason", test_support_listing) ||
        !CU_add_test(s, "a value saved twice in one call: path and path#r", test_saved_twice) ||
        !CU_add_test(s, "slices at save time equal the slice of the whole value", test_slices))
        return -1;
    return 0;
}
