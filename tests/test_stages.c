/* test_stages.c - pipeline stages in one process (nnt_trace_run_stage, nnt_session_forward_stage)
 * on every family fixture: the blocks run as 2 stages (at every cut) and as 3 stages (the split
 * nnt_plan_split makes) with the residual stream(s) handed from stage to stage give every saved
 * value of the whole-model run - each value held by exactly one stage, bit for bit (the test
 * also bounds the difference by 1e-6 relative and reports how many were bitwise equal) - and
 * the stream a stage hands over is the whole run's layer_output of its last block; greedy
 * generation with one session per stage gives nnt_generate's token ids. Then the argument
 * checks, with their exact messages. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "test_util.h"

static const char *const FIXTURES[] = {
    "minimax_m2/fp32",   "minimax_m2/bf16",   "minimax_m2/fp8",         "mimo_v2_flash/fp32", "mimo_v2_flash/bf16",
    "mimo_v2_flash/fp8", "mimo_v2_flash/fp8_per_head", "mimo_v2/fp4",   "kimi_linear/fp32",   "kimi_linear/bf16",
    "kimi_linear/hub",   "deepseek_v4/fp32",  "deepseek_v4/bf16",       "deepseek_v4/native",
};
#define N_FIXTURES (int)(sizeof FIXTURES / sizeof FIXTURES[0])

/* The prompts: 2 rows of 13 tokens, row 1 left-padded by 4, ids spread over the vocabulary; with
 * the 5 generated tokens the rows cross DeepSeek-V4's compression windows (rates 4 and 8 in the
 * fixtures' config.json) both in the prompt and during generation. */
enum { B = 2, T = 13, PAD = 4, NEW = 5 };

static void prompts(int vocab, int32_t *ids, int32_t *mask)
{
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            ids[b * T + t] = (int32_t)((3 + 17 * b + 7 * t + t * t) % vocab);
            mask[b * T + t] = !(b == 1 && t < PAD);
        }
}

/* Requests a save of every value the model serves: each value of the model module by its name,
 * each block value on every block ("layers.*..."). Writes the paths accepted to paths[0..max) and
 * returns their number. */
static int save_everything(nnt_runtime *rt, nnt_trace *t, char paths[][96], int max)
{
    int n = 0;
    for (int v = 0; v < NNT_VALUE_COUNT; v++) {
        nnt_module mod = nnt_value_module((nnt_value_id)v);
        const char *name = nnt_value_name((nnt_value_id)v);
        char p[96];
        if (mod == NNT_MODULE_MODEL)
            snprintf(p, sizeof p, "%s", name);
        else if (mod == NNT_MODULE_LAYER)
            snprintf(p, sizeof p, "layers.*.%s", name);
        else
            snprintf(p, sizeof p, "layers.*.%s.%s", nnt_module_name(mod), name);
        nnt_status st = nnt_trace_save(t, p);
        if (st == NNT_ERR_NOT_SERVED) continue;
        if (st != NNT_OK) fprintf(stderr, "\n  save %s: %s\n", p, nnt_last_error(rt));
        CU_ASSERT_EQUAL_FATAL(st, NNT_OK);
        CU_ASSERT_FATAL(n < max);
        snprintf(paths[n++], 96, "%s", p);
    }
    return n;
}

/* Bytes of a saved value (every saved dtype is whole bytes per element). */
static size_t value_bytes(const nnt_tensor *t)
{
    return (size_t)nnt_tensor_numel(t) * nnt_dtype_size(t->dtype);
}

/* Per fixture: values compared, of which bitwise equal, and the largest relative difference. */
typedef struct tally {
    long values, bitwise;
    double worst;
} tally;

/* Compares every result of the whole run with the one stage trace that holds it. */
static void compare_with_stages(const char *rel, const char *split, const nnt_trace *whole, nnt_trace *const *st,
                                int n_stages, tally *tl)
{
    int n = nnt_trace_result_count(whole), in_stages = 0;
    for (int s = 0; s < n_stages; s++) in_stages += nnt_trace_result_count(st[s]);
    if (in_stages != n) fprintf(stderr, "\n  %s %s: %d values in the stages, %d in the whole run\n", rel, split, in_stages, n);
    CU_ASSERT_EQUAL(in_stages, n);
    for (int i = 0; i < n; i++) {
        const char *key;
        const nnt_tensor *w;
        CU_ASSERT_FATAL(nnt_trace_result(whole, i, &key, &w) == NNT_OK);
        const nnt_tensor *got = NULL;
        int holders = 0, none = 0;
        for (int s = 0; s < n_stages; s++) {
            const nnt_tensor *v;
            int is_none;
            if (nnt_trace_lookup(st[s], key, &v, &is_none) != NNT_OK) continue;
            holders++;
            got = v;
            none = is_none;
        }
        if (holders != 1) fprintf(stderr, "\n  %s %s: %s is held by %d stages\n", rel, split, key, holders);
        CU_ASSERT_EQUAL(holders, 1);
        if (holders != 1) continue;
        if (!w) { /* absent (None) in the whole run: absent in its stage too */
            CU_ASSERT(none);
            continue;
        }
        CU_ASSERT_PTR_NOT_NULL_FATAL(got);
        CU_ASSERT_EQUAL(got->dtype, w->dtype);
        CU_ASSERT_EQUAL(got->ndim, w->ndim);
        CU_ASSERT_EQUAL(nnt_tensor_numel(got), nnt_tensor_numel(w));
        if (got->dtype != w->dtype || nnt_tensor_numel(got) != nnt_tensor_numel(w)) continue;
        tl->values++;
        if (memcmp(got->data, w->data, value_bytes(w)) == 0) {
            tl->bitwise++;
            continue;
        }
        double diff = 0, scale = 0;
        for (int64_t k = 0; k < nnt_tensor_numel(w); k++) {
            double a = nnt_tensor_get_f64(got, k), b = nnt_tensor_get_f64(w, k);
            diff = fmax(diff, fabs(a - b));
            scale = fmax(scale, fabs(b));
        }
        double rel_err = scale > 0 ? diff / scale : diff;
        tl->worst = fmax(tl->worst, rel_err);
        if (!(rel_err <= 1e-6)) fprintf(stderr, "\n  %s %s: %s differs by %g relative\n", rel, split, key, rel_err);
        CU_ASSERT(rel_err <= 1e-6);
    }
}

/* Runs the prompts through the stages cut at cuts[0..n_stages] (cuts[0] = 0, cuts[n] = L), each
 * stage under its own trace with the same requests, and compares with the whole run. Also checks
 * that each stream handed over is the whole run's layer_output of the stage's last block. */
static void run_split(nnt_runtime *rt, nnt_model *const *models, const char *rel, const int32_t *ids, const int32_t *mask,
                      char paths[][96], int n_paths, const nnt_trace *whole, const int *cuts, int n_stages, tally *tl)
{
    const nnt_model_info *info = nnt_model_get_info(models[0]);
    size_t floats = (size_t)B * T * (size_t)info->num_streams * (size_t)info->hidden_size;
    float *in = NULL, *out = NULL;
    nnt_trace *st[4] = {0};
    char split[64] = "stages";
    for (int s = 0; s < n_stages; s++)
        snprintf(split + strlen(split), sizeof split - strlen(split), " %d..%d", cuts[s], cuts[s + 1] - 1);
    for (int s = 0; s < n_stages; s++) {
        int last = s == n_stages - 1;
        out = last ? NULL : malloc(floats * sizeof(float));
        T_OK(rt, nnt_trace_new(models[s], &st[s]));
        for (int p = 0; p < n_paths; p++) T_OK(rt, nnt_trace_save(st[s], paths[p]));
        T_OK(rt, nnt_trace_run_stage(st[s], ids, mask, B, T, cuts[s], cuts[s + 1], in, out));
        if (out) { /* the stream handed over: [batch, seq, streams, hidden], layer_output's bytes */
            char key[64];
            snprintf(key, sizeof key, "layers.%d.layer_output", cuts[s + 1] - 1);
            const nnt_tensor *lo = nnt_trace_get(whole, key);
            CU_ASSERT_PTR_NOT_NULL_FATAL(lo);
            CU_ASSERT_EQUAL(value_bytes(lo), floats * sizeof(float));
            CU_ASSERT(memcmp(lo->data, out, floats * sizeof(float)) == 0);
        }
        free(in);
        in = out;
    }
    compare_with_stages(rel, split, whole, st, n_stages, tl);
    for (int s = 0; s < n_stages; s++) nnt_trace_free(st[s]);
}

/* Greedy generation through stages: one session per stage, the ids of every step given to each,
 * the stream handed on, the token read from the last stage's logits. */
static void generate_staged(nnt_runtime *rt, nnt_model *const *models, const int32_t *ids, const int32_t *mask,
                            const int *cuts, int n_stages, int32_t *tokens)
{
    const nnt_model_info *info = nnt_model_get_info(models[0]);
    int V = info->vocab_size;
    size_t per_token = (size_t)info->num_streams * (size_t)info->hidden_size;
    nnt_session *ss[4];
    for (int s = 0; s < n_stages; s++) T_OK(rt, nnt_session_new(models[s], B, T + NEW, &ss[s]));
    nnt_trace *t;
    T_OK(rt, nnt_trace_new(models[n_stages - 1], &t));
    T_OK(rt, nnt_trace_save(t, "logits"));
    float *bufs[2] = {malloc((size_t)B * T * per_token * sizeof(float)), malloc((size_t)B * T * per_token * sizeof(float))};
    int32_t next[B];
    for (int k = 0; k < NEW; k++) {
        const int32_t *step_ids = k ? next : ids;
        const int32_t *step_mask = k ? NULL : mask;
        int seq = k ? 1 : T;
        for (int s = 0; s < n_stages; s++) {
            int last = s == n_stages - 1;
            const float *in = s ? bufs[(s - 1) % 2] : NULL;
            float *out = last ? NULL : bufs[s % 2];
            T_OK(rt, nnt_session_forward_stage(ss[s], last ? t : NULL, step_ids, step_mask, seq, cuts[s], cuts[s + 1], in,
                                               out));
        }
        char key[32];
        snprintf(key, sizeof key, k ? "logits@%d" : "logits", k);
        const nnt_tensor *lg = nnt_trace_get(t, key);
        CU_ASSERT_PTR_NOT_NULL_FATAL(lg);
        for (int b = 0; b < B; b++) {
            const float *row = (const float *)lg->data + ((int64_t)b * seq + seq - 1) * V;
            int best = 0;
            for (int v = 1; v < V; v++)
                if (row[v] > row[best]) best = v;
            next[b] = tokens[b * NEW + k] = best;
        }
    }
    for (int s = 0; s < n_stages; s++) CU_ASSERT_EQUAL(nnt_session_length(ss[s]), T + NEW - 1);
    free(bufs[0]);
    free(bufs[1]);
    nnt_trace_free(t);
    for (int s = 0; s < n_stages; s++) nnt_session_free(ss[s]);
}

/* Stage-loaded models (nnt_model_load_stage) hold their blocks' weights only: the stored bytes
 * each binds are those `nnt plan` counts for its blocks (with the embedding on the first and the
 * readout on the last), and each refuses blocks and a readout it does not hold. */
static void check_stage_loads(nnt_runtime *rt, nnt_model *whole, const char *rel, nnt_model *const *sm, const int *cuts,
                              const int32_t *ids, const int32_t *mask)
{
    char dir[1024];
    t_fixture(rel, dir, sizeof dir);
    nnt_plan *p;
    nnt_plan_opts po = {.ranks = 1, .batch = 1};
    CU_ASSERT_FATAL(nnt_plan_new(dir, &po, &p, NULL) == NNT_OK);
    nnt_plan_summary sum;
    nnt_plan_get_summary(p, &sum);
    nnt_memory all;
    T_OK(rt, nnt_model_memory(whole, &all));
    /* the whole model's own gap to the plan: scale grids a family re-lays (MiMo's per-head k/v
     * scales) are counted as allocated, not bound; 0 for every other fixture */
    uint64_t plan_total = sum.first_bytes + sum.last_bytes, w;
    for (int b = 0; b < sum.n_blocks; b++) {
        nnt_plan_block(p, b, &w, NULL);
        plan_total += w;
    }
    uint64_t slack = plan_total > all.mapped_bytes ? plan_total - all.mapped_bytes : all.mapped_bytes - plan_total;
    uint64_t total = 0;
    for (int s = 0; s < 3; s++) {
        uint64_t want = s == 0 ? sum.first_bytes : 0;
        if (s == 2) want += sum.last_bytes;
        for (int b = cuts[s]; b < cuts[s + 1]; b++) {
            nnt_plan_block(p, b, &w, NULL);
            want += w;
        }
        nnt_memory mem;
        T_OK(rt, nnt_model_memory(sm[s], &mem));
        uint64_t gap = mem.mapped_bytes > want ? mem.mapped_bytes - want : want - mem.mapped_bytes;
        if (gap > slack)
            fprintf(stderr, "\n  %s stage %d..%d: %llu bytes bound, the plan counts %llu\n", rel, cuts[s], cuts[s + 1] - 1,
                    (unsigned long long)mem.mapped_bytes, (unsigned long long)want);
        CU_ASSERT(gap <= slack);
        CU_ASSERT(mem.mapped_bytes < all.mapped_bytes);
        total += mem.mapped_bytes;
    }
    CU_ASSERT(total >= all.mapped_bytes); /* a tied embedding is held by the first and the last stage */
    nnt_plan_free(p);
    /* a whole-model call, another stage's blocks and the readout off the last stage are refused */
    nnt_trace *t;
    T_OK(rt, nnt_trace_new(sm[1], &t));
    CU_ASSERT_EQUAL(nnt_trace_run(t, ids, mask, B, T), NNT_ERR_INVALID_ARGUMENT);
    CU_ASSERT(strstr(nnt_last_error(rt), "loaded with the weights of blocks") != NULL);
    nnt_trace_free(t);
    const nnt_model_info *info = nnt_model_get_info(sm[0]);
    nnt_tensor x = {0}, lg = {0};
    T_OK(rt, nnt_tensor_alloc(&x, NNT_F32, 2, (int64_t[]){1, info->hidden_size}));
    memset(x.data, 0, sizeof(float) * (size_t)info->hidden_size);
    CU_ASSERT_EQUAL(nnt_project_on_vocab(sm[0], &x, &lg), NNT_ERR_UNSUPPORTED);
    CU_ASSERT(strstr(nnt_last_error(rt), "without the final norm and lm_head") != NULL);
    T_OK(rt, nnt_project_on_vocab(sm[2], &x, &lg));
    nnt_tensor_free(&lg);
    nnt_tensor_free(&x);
    nnt_model *bad = NULL;
    CU_ASSERT_EQUAL(nnt_model_load_stage(rt, dir, 1, 1, &bad), NNT_ERR_INVALID_ARGUMENT);
    CU_ASSERT_EQUAL(nnt_model_load_stage(rt, dir, 0, info->num_layers + 1, &bad), NNT_ERR_INVALID_ARGUMENT);
    CU_ASSERT(strstr(nnt_last_error(rt), "the model has") != NULL);
    CU_ASSERT_PTR_NULL(bad);
}

static void check_fixture(nnt_runtime *rt, const char *rel, tally *tl)
{
    nnt_model *m = t_model(rt, rel);
    const nnt_model_info *info = nnt_model_get_info(m);
    int L = info->num_layers;
    CU_ASSERT_FATAL(L >= 3);
    int32_t ids[B * T], mask[B * T];
    prompts(info->vocab_size, ids, mask);
    static char paths[NNT_VALUE_COUNT][96];
    nnt_trace *whole;
    T_OK(rt, nnt_trace_new(m, &whole));
    int n_paths = save_everything(rt, whole, paths, NNT_VALUE_COUNT);
    T_OK(rt, nnt_trace_run(whole, ids, mask, B, T));
    CU_ASSERT(nnt_trace_result_count(whole) > 10 * L);
    /* 2 stages, cut after every block */
    for (int c = 1; c < L; c++) {
        int cuts[3] = {0, c, L};
        run_split(rt, (nnt_model *[]){m, m}, rel, ids, mask, paths, n_paths, whole, cuts, 2, tl);
    }
    /* 3 stages, balanced by nnt_plan_split over equal block costs */
    uint64_t cost[64];
    for (int i = 0; i < L; i++) cost[i] = 1;
    int cuts3[4];
    T_OK(rt, nnt_plan_split(cost, L, 0, 0, 3, cuts3, NULL));
    CU_ASSERT(cuts3[0] == 0 && cuts3[3] == L && cuts3[1] > 0 && cuts3[2] > cuts3[1] && cuts3[2] < L);
    run_split(rt, (nnt_model *[]){m, m, m}, rel, ids, mask, paths, n_paths, whole, cuts3, 3, tl);
    /* the same 3 stages, each on a model that loaded only its own blocks' weights */
    nnt_model *sm[3];
    char dir[1024];
    t_fixture(rel, dir, sizeof dir);
    for (int s = 0; s < 3; s++) T_OK(rt, nnt_model_load_stage(rt, dir, cuts3[s], cuts3[s + 1], &sm[s]));
    run_split(rt, sm, rel, ids, mask, paths, n_paths, whole, cuts3, 3, tl);
    check_stage_loads(rt, m, rel, sm, cuts3, ids, mask);
    nnt_trace_free(whole);

    /* greedy generation: one process's nnt_generate against sessions per stage */
    nnt_generate_opts opts = {.max_new_tokens = NEW};
    int32_t want[B * NEW], got2[B * NEW], got3[B * NEW];
    T_OK(rt, nnt_generate(m, NULL, ids, mask, B, T, &opts, want));
    int cuts2[3] = {0, L / 2, L};
    generate_staged(rt, (nnt_model *[]){m, m}, ids, mask, cuts2, 2, got2);
    generate_staged(rt, (nnt_model *[]){m, m, m}, ids, mask, cuts3, 3, got3);
    CU_ASSERT(memcmp(want, got2, sizeof want) == 0);
    CU_ASSERT(memcmp(want, got3, sizeof want) == 0);
    /* and on the stage-loaded models, whose sessions keep their own blocks' caches only */
    int32_t got3s[B * NEW];
    generate_staged(rt, sm, ids, mask, cuts3, 3, got3s);
    CU_ASSERT(memcmp(want, got3s, sizeof want) == 0);
    for (int s = 0; s < 3; s++) nnt_model_free(sm[s]);
    if (memcmp(want, got2, sizeof want) || memcmp(want, got3, sizeof want)) {
        fprintf(stderr, "\n  %s tokens: whole", rel);
        for (int i = 0; i < B * NEW; i++) fprintf(stderr, " %d", want[i]);
        fprintf(stderr, "; 2 stages");
        for (int i = 0; i < B * NEW; i++) fprintf(stderr, " %d", got2[i]);
        fprintf(stderr, "; 3 stages");
        for (int i = 0; i < B * NEW; i++) fprintf(stderr, " %d", got3[i]);
        fprintf(stderr, "\n");
    }
    nnt_model_free(m);
}

static void test_every_fixture(void)
{
    nnt_runtime *rt = t_runtime();
    for (int f = 0; f < N_FIXTURES; f++) {
        tally tl = {0};
        check_fixture(rt, FIXTURES[f], &tl);
        printf("\n    %-28s %ld values compared, %ld bitwise equal, largest relative difference %g", FIXTURES[f],
               tl.values, tl.bitwise, tl.worst);
        CU_ASSERT(tl.values > 0);
    }
    nnt_runtime_close(rt);
}

/* The same under [family.NAME] precision = bf16 (activations rounded as torch's bfloat16 run),
 * on a single-stream family and on DeepSeek-V4's streams. */
static void check_bf16(const char *family, const char *rel)
{
    nnt_runtime *rt = t_runtime_with_precision(family, "bf16");
    tally tl = {0};
    check_fixture(rt, rel, &tl);
    printf("\n    %-28s (precision bf16) %ld values compared, %ld bitwise equal, largest relative difference %g", rel,
           tl.values, tl.bitwise, tl.worst);
    CU_ASSERT(tl.values > 0);
    nnt_runtime_close(rt);
}
static void test_bf16_minimax(void) { check_bf16("minimax_m2", "minimax_m2/bf16"); }
static void test_bf16_deepseek(void) { check_bf16("deepseek_v4", "deepseek_v4/bf16"); }

/* ---- argument checks ---- */

/* A stage link whose peers never answer: each call fails as a transport would (the caller's
 * side of the link sets status and message, as cli/dist.c does). */
static nnt_status link_gone(nnt_error *err)
{
    err->status = NNT_ERR_IO;
    snprintf(err->msg, sizeof err->msg, "test link: peer gone");
    return NNT_ERR_IO;
}
static nnt_status no_recv(void *ctx, float *hidden, size_t n, nnt_error *err)
{
    (void)ctx, (void)hidden, (void)n;
    return link_gone(err);
}
static nnt_status no_send(void *ctx, const float *hidden, size_t n, nnt_error *err)
{
    (void)ctx, (void)hidden, (void)n;
    return link_gone(err);
}
static nnt_status no_share(void *ctx, int32_t *tokens, int batch, int is_source, nnt_error *err)
{
    (void)ctx, (void)tokens, (void)batch, (void)is_source;
    return link_gone(err);
}

static void test_bad_arguments(void)
{
    nnt_runtime *rt = t_runtime();
    nnt_model *m = t_model(rt, "minimax_m2/fp32"); /* 3 blocks, one stream */
    const nnt_model_info *info = nnt_model_get_info(m);
    int L = info->num_layers, H = info->hidden_size;
    CU_ASSERT_EQUAL_FATAL(L, 3);
    CU_ASSERT_EQUAL_FATAL(info->num_streams, 1);
    int32_t ids[B * T], mask[B * T];
    prompts(info->vocab_size, ids, mask);
    size_t floats = (size_t)B * T * (size_t)H;
    float *a = calloc(floats, sizeof(float)), *b = calloc(floats, sizeof(float));
    nnt_trace *t;
    T_OK(rt, nnt_trace_new(m, &t));
    char want[512];

    T_FAILS(rt, nnt_trace_run_stage(t, ids, mask, B, T, -1, 2, NULL, a), NNT_ERR_INVALID_ARGUMENT,
            "stage: first_layer is -1; expected 0 <= first_layer < 3 (the model's blocks are 0..2)");
    T_FAILS(rt, nnt_trace_run_stage(t, ids, mask, B, T, 3, 3, a, NULL), NNT_ERR_INVALID_ARGUMENT,
            "stage: first_layer is 3; expected 0 <= first_layer < 3 (the model's blocks are 0..2)");
    T_FAILS(rt, nnt_trace_run_stage(t, ids, mask, B, T, 1, 1, a, b), NNT_ERR_INVALID_ARGUMENT,
            "stage: end_layer is 1; expected first_layer < end_layer <= 3 (first_layer 1; the stage runs blocks "
            "first_layer..end_layer - 1)");
    T_FAILS(rt, nnt_trace_run_stage(t, ids, mask, B, T, 0, 4, NULL, NULL), NNT_ERR_INVALID_ARGUMENT,
            "stage: end_layer is 4; expected first_layer < end_layer <= 3 (first_layer 0;");
    T_FAILS(rt, nnt_trace_run_stage(t, ids, mask, B, T, 0, 0, NULL, NULL), NNT_ERR_INVALID_ARGUMENT,
            "stage: end_layer is 0; expected first_layer < end_layer <= 3");
    snprintf(want, sizeof want,
             "stage: hidden_in is NULL; a stage starting at block 2 (first_layer > 0) starts from the residual stream "
             "leaving block 1: float32 [batch %d, seq %d, streams 1, hidden %d]",
             B, T, H);
    T_FAILS(rt, nnt_trace_run_stage(t, ids, mask, B, T, 2, 3, NULL, NULL), NNT_ERR_INVALID_ARGUMENT, want);
    T_FAILS(rt, nnt_trace_run_stage(t, ids, mask, B, T, 0, 2, a, b), NNT_ERR_INVALID_ARGUMENT,
            "stage: hidden_in must be NULL for a stage starting at block 0 (first_layer 0): it embeds input_ids");
    snprintf(want, sizeof want,
             "stage: hidden_out is NULL; a stage ending before the last block (end_layer 2 < 3) writes the residual "
             "stream leaving block 1: float32 [batch %d, seq %d, streams 1, hidden %d]",
             B, T, H);
    T_FAILS(rt, nnt_trace_run_stage(t, ids, mask, B, T, 0, 2, NULL, NULL), NNT_ERR_INVALID_ARGUMENT, want);
    T_FAILS(rt, nnt_trace_run_stage(t, ids, mask, B, T, 1, 3, a, b), NNT_ERR_INVALID_ARGUMENT,
            "stage: hidden_out must be NULL for a stage ending at the last block (end_layer 3): it computes the "
            "readout (final_norm_output, logits) instead");
    snprintf(want, sizeof want,
             "stage: hidden_out overlaps hidden_in (each %zu bytes); the stream handed in is never overwritten, so "
             "give two separate buffers",
             floats * sizeof(float));
    float *big = calloc(2 * floats, sizeof(float));
    T_FAILS(rt, nnt_trace_run_stage(t, ids, mask, B, T, 1, 2, big, big + floats / 2), NNT_ERR_INVALID_ARGUMENT, want);
    /* adjacent buffers do not overlap: this one runs */
    T_OK(rt, nnt_trace_run_stage(t, ids, mask, B, T, 1, 2, big, big + floats));
    free(big);
    CU_ASSERT_EQUAL(nnt_trace_run_stage(NULL, ids, mask, B, T, 0, 3, NULL, NULL), NNT_ERR_INVALID_ARGUMENT);
    /* the stage [0, L) with no buffers is the whole run */
    T_OK(rt, nnt_trace_save(t, "logits"));
    T_OK(rt, nnt_trace_run_stage(t, ids, mask, B, T, 0, 3, NULL, NULL));
    CU_ASSERT_PTR_NOT_NULL(nnt_trace_get(t, "logits"));

    /* skip_layers across a stage boundary: the copy's source is computed by another stage */
    nnt_trace *skip;
    T_OK(rt, nnt_trace_new(m, &skip));
    T_OK(rt, nnt_trace_skip_layers(skip, 0, 1));
    T_OK(rt, nnt_trace_run_stage(skip, ids, mask, B, T, 0, 2, NULL, a)); /* within the stage: runs */
    T_FAILS(rt, nnt_trace_run_stage(skip, ids, mask, B, T, 1, 3, a, NULL), NNT_ERR_UNSUPPORTED,
            "'layers.1.layer_output' takes layers.0.layer_input, which another pipeline stage computes (this stage "
            "runs blocks 1..2): skip_layers must lie within one stage");
    nnt_trace_free(skip);

    /* a session keeps its first call's stage */
    nnt_session *s;
    T_OK(rt, nnt_session_new(m, B, T + 2, &s));
    T_OK(rt, nnt_session_forward_stage(s, NULL, ids, mask, T, 0, 2, NULL, a));
    int32_t one[B] = {1, 2};
    T_FAILS(rt, nnt_session_forward_stage(s, NULL, one, NULL, 1, 0, 1, NULL, a), NNT_ERR_INVALID_ARGUMENT,
            "stage: this session ran blocks 0..1 at its first call, and its caches hold only those blocks' tokens; "
            "this call asks for blocks 0..0 (a session runs one stage at every call)");
    T_FAILS(rt, nnt_session_forward(s, NULL, one, NULL, 1), NNT_ERR_INVALID_ARGUMENT,
            "stage: this session ran blocks 0..1 at its first call, and its caches hold only those blocks' tokens; "
            "this call asks for blocks 0..2 (a session runs one stage at every call)");
    CU_ASSERT_EQUAL(nnt_session_length(s), T);
    T_OK(rt, nnt_session_forward_stage(s, NULL, one, NULL, 1, 0, 2, NULL, a));
    CU_ASSERT_EQUAL(nnt_session_length(s), T + 1);
    CU_ASSERT_EQUAL(nnt_session_forward_stage(NULL, NULL, one, NULL, 1, 0, 2, NULL, a), NNT_ERR_INVALID_ARGUMENT);
    nnt_session_free(s);

    /* values imported from another stage's trace: checked, then read back as the trace's own */
    T_FAILS(rt, nnt_trace_import_result(t, "", NULL), NNT_ERR_INVALID_ARGUMENT,
            "import: a key of 1 to 191 characters is needed (got 0)");
    char long_key[200];
    memset(long_key, 'k', 192);
    long_key[192] = '\0';
    T_FAILS(rt, nnt_trace_import_result(t, long_key, NULL), NNT_ERR_INVALID_ARGUMENT,
            "import: a key of 1 to 191 characters is needed (got 192)");
    T_FAILS(rt, nnt_trace_import_result(t, "logits", NULL), NNT_ERR_CONFLICT,
            "import: the trace already holds a value under 'logits'");
    float two[2] = {1.5f, -2.0f};
    nnt_tensor v = {.dtype = NNT_F32, .ndim = 1, .shape = {2}, .data = two, .device = 1};
    T_FAILS(rt, nnt_trace_import_result(t, "layers.2.layer_output", &v), NNT_ERR_INVALID_ARGUMENT,
            "import: 'layers.2.layer_output' must be a host tensor with its data");
    v.device = 0;
    v.data = NULL;
    T_FAILS(rt, nnt_trace_import_result(t, "layers.2.layer_output", &v), NNT_ERR_INVALID_ARGUMENT,
            "import: 'layers.2.layer_output' must be a host tensor with its data");
    v.data = two;
    T_OK(rt, nnt_trace_import_result(t, "layers.2.layer_output", &v));
    two[0] = 9.0f; /* copied at the call */
    const nnt_tensor *back = nnt_trace_get(t, "layers.2.layer_output");
    CU_ASSERT_PTR_NOT_NULL_FATAL(back);
    CU_ASSERT(back->ndim == 1 && back->shape[0] == 2 && ((const float *)back->data)[0] == 1.5f &&
              ((const float *)back->data)[1] == -2.0f);
    T_OK(rt, nnt_trace_import_result(t, "layers.0.attention.state_input", NULL));
    int is_none = 0;
    CU_ASSERT_EQUAL(nnt_trace_lookup(t, "layers.0.attention.state_input", NULL, &is_none), NNT_OK);
    CU_ASSERT_EQUAL(is_none, 1);
    CU_ASSERT_EQUAL(nnt_trace_import_result(NULL, "x", NULL), NNT_ERR_INVALID_ARGUMENT);

    /* a generation stage's link: complete, and blocks inside the model */
    nnt_generate_opts g = {.max_new_tokens = 2};
    int32_t got[B * 2];
    CU_ASSERT_EQUAL(nnt_generate_stage(m, NULL, ids, mask, B, T, &g, NULL, got), NNT_ERR_INVALID_ARGUMENT);
    nnt_stage_link link = {.struct_size = sizeof link, .first_layer = 0, .end_layer = 2, .recv_hidden = no_recv,
                           .send_hidden = no_send};
    T_FAILS(rt, nnt_generate_stage(m, NULL, ids, mask, B, T, &g, &link, got), NNT_ERR_INVALID_ARGUMENT,
            "generate: the stage link needs its struct_size, its three functions and blocks 0 <= first_layer < "
            "end_layer <= 3 (got 0, 2)");
    link.share_tokens = no_share;
    link.end_layer = 4;
    T_FAILS(rt, nnt_generate_stage(m, NULL, ids, mask, B, T, &g, &link, got), NNT_ERR_INVALID_ARGUMENT,
            "blocks 0 <= first_layer < end_layer <= 3 (got 0, 4)");
    link.end_layer = 2;
    link.struct_size = 8;
    T_FAILS(rt, nnt_generate_stage(m, NULL, ids, mask, B, T, &g, &link, got), NNT_ERR_INVALID_ARGUMENT,
            "the stage link needs its struct_size");
    /* the link's own error reaches the caller with its message */
    link.struct_size = sizeof link;
    T_FAILS(rt, nnt_generate_stage(m, NULL, ids, mask, B, T, &g, &link, got), NNT_ERR_IO, "test link: peer gone");

    nnt_trace_free(t);
    free(a);
    free(b);
    nnt_model_free(m);
    nnt_runtime_close(rt);
}

/* hidden_in is only read: the buffer handed in is the same after the call. */
static void test_input_untouched(void)
{
    nnt_runtime *rt = t_runtime();
    nnt_model *m = t_model(rt, "deepseek_v4/fp32");
    const nnt_model_info *info = nnt_model_get_info(m);
    CU_ASSERT_EQUAL_FATAL(info->num_streams, 4); /* hc_mult in the fixture's config.json */
    int32_t ids[B * T], mask[B * T];
    prompts(info->vocab_size, ids, mask);
    size_t floats = (size_t)B * T * 4 * (size_t)info->hidden_size;
    float *h = malloc(floats * sizeof(float)), *copy = malloc(floats * sizeof(float));
    nnt_trace *t;
    T_OK(rt, nnt_trace_new(m, &t));
    T_OK(rt, nnt_trace_run_stage(t, ids, mask, B, T, 0, 2, NULL, h));
    memcpy(copy, h, floats * sizeof(float));
    T_OK(rt, nnt_trace_run_stage(t, ids, mask, B, T, 2, info->num_layers, h, NULL));
    CU_ASSERT(memcmp(copy, h, floats * sizeof(float)) == 0);
    free(h);
    free(copy);
    nnt_trace_free(t);
    nnt_model_free(m);
    nnt_runtime_close(rt);
}

/* Families that ignore the stage fields (two blocks, hidden size 4, both blocks' layer_output and
 * the logits emitted at every call): one built for ABI 3.2 is caught emitting outside its stage;
 * one built for 3.1 is never asked for a stage, and still runs the whole model. */
static void test_family_ignoring_stages(void)
{
    char ini[4096], path[768], ckpt[768];
    snprintf(ini, sizeof ini, "[plugins]\ndir = %s/families\ndir = %s/kernels\nfile = %s-ok/no_stages.so\nfile = %s-ok/minor_31.so\n",
             NNT_TEST_BUILD_DIR, NNT_TEST_BUILD_DIR, NNT_TEST_PLUGIN_DIR, NNT_TEST_PLUGIN_DIR);
    snprintf(path, sizeof path, "%s/stages_fake.ini", t_tmpdir());
    CU_ASSERT_FATAL(t_write_file(path, ini) == 0);
    nnt_runtime *rt = NULL;
    T_OK(rt, nnt_runtime_open(path, &rt));
    int32_t ids[3] = {1, 2, 3};
    float h[3 * 4] = {0};

    nnt_model *m;
    T_OK(rt, nnt_model_load(rt, t_fake_checkpoint("no_stages", "NoStagesForCausalLM", ckpt, sizeof ckpt), &m));
    nnt_trace *t;
    T_OK(rt, nnt_trace_new(m, &t));
    T_FAILS(rt, nnt_trace_run_stage(t, ids, NULL, 1, 3, 1, 2, h, NULL), NNT_ERR_PLUGIN,
            "family 'no_stages' emitted layers.0.layer_output in a pipeline stage of blocks 1..1, which does not hold it "
            "(nnt_forward_args' stage fields: first_layer 1, end_layer 2)");
    T_FAILS(rt, nnt_trace_run_stage(t, ids, NULL, 1, 3, 0, 1, NULL, h), NNT_ERR_PLUGIN,
            "family 'no_stages' emitted layers.1.layer_output in a pipeline stage of blocks 0..0, which does not hold it");
    T_OK(rt, nnt_trace_run_stage(t, ids, NULL, 1, 3, 0, 2, NULL, NULL));
    nnt_trace_free(t);
    nnt_model_free(m);

    T_OK(rt, nnt_model_load(rt, t_fake_checkpoint("minor_31", "Minor31ForCausalLM", ckpt, sizeof ckpt), &m));
    T_OK(rt, nnt_trace_new(m, &t));
    T_FAILS(rt, nnt_trace_run_stage(t, ids, NULL, 1, 3, 1, 2, h, NULL), NNT_ERR_UNSUPPORTED,
            "stage: family 'minor_31' was built for plugin ABI 3.1, which has no pipeline stages (added in 3.2); it runs "
            "only the whole model (first_layer 0, end_layer 2)");
    T_OK(rt, nnt_trace_save(t, "layers.1.layer_output"));
    T_OK(rt, nnt_trace_run_stage(t, ids, NULL, 1, 3, 0, 2, NULL, NULL));
    T_OK(rt, nnt_trace_run(t, ids, NULL, 1, 3));
    CU_ASSERT_PTR_NOT_NULL(nnt_trace_get(t, "layers.1.layer_output"));
    nnt_trace_free(t);
    nnt_model_free(m);
    nnt_runtime_close(rt);
}

int register_tests(void)
{
    CU_pSuite s = CU_add_suite("stages", NULL, NULL);
    if (!s) return -1;
    if (!CU_add_test(s, "every fixture: 2 and 3 stages == one run (values, hand-over, greedy tokens)",
                     test_every_fixture) ||
        !CU_add_test(s, "MiniMax-M2 in bfloat16 precision: stages == one run", test_bf16_minimax) ||
        !CU_add_test(s, "DeepSeek-V4 in bfloat16 precision: stages == one run", test_bf16_deepseek) ||
        !CU_add_test(s, "bad stage arguments, with their messages", test_bad_arguments) ||
        !CU_add_test(s, "hidden_in is never written", test_input_untouched) ||
        !CU_add_test(s, "families that ignore stages: caught (3.2) or never asked (3.1)", test_family_ignoring_stages))
        return -1;
    return 0;
}
