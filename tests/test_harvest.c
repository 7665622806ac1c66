/* test_harvest.c - nnt_harvest through the C API on the tiny MiniMax-M2 checkpoint, so that the
 * sanitizer build runs the corpus reader, the rows, the shards, the manifest and the reductions
 * (python/tests/test_harvest.py holds the values against single traces and a killed run against
 * an uninterrupted one): the first packed row's saved value against a trace of its ids, the
 * routing counts against that row's expert_indices counted here, a finished folder left as it
 * is, a folder of another request refused, and the spec's and data's errors with their names. */
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "nnt/nnt_methods.h"
#include "test_util.h"

static nnt_runtime *rt;
static nnt_model *m;
static char corpus[600], out[600];

static int setup(void)
{
    if (nnt_runtime_open(t_ini(), &rt) != NNT_OK) return -1;
    char dir[512];
    snprintf(dir, sizeof dir, "%s/examples/tiny-minimax-m2", NNT_TEST_SOURCE_DIR);
    if (nnt_model_load(rt, dir, &m) != NNT_OK) return -1;
    snprintf(corpus, sizeof corpus, "%s/tests/fixtures/corpus/corpus.jsonl", NNT_TEST_SOURCE_DIR);
    snprintf(out, sizeof out, "%s/harvest", t_tmpdir());
    return 0;
}

static int teardown(void)
{
    nnt_model_free(m);
    nnt_runtime_close(rt);
    return 0;
}

static nnt_request *request(const char *json)
{
    nnt_request *r = NULL;
    nnt_request_source src = {.struct_size = sizeof src, .json = json, .json_len = strlen(json)};
    CU_ASSERT_FATAL(nnt_request_parse(rt, &src, &r) == NNT_OK);
    return r;
}

static nnt_harvest_spec spec(const nnt_request *r, const char *const *data, const char *dir)
{
    return (nnt_harvest_spec){.struct_size = sizeof(nnt_harvest_spec), .request = r, .data = data, .n_data = 1,
                              .context = 12, .rows = NNT_HARVEST_PACK, .batch = 3, .dtype = NNT_F32,
                              .shard_bytes = 4096, .add_special = 1, .max_tokens = 240, .routing_stats = 1,
                              .top_tokens = 4, .out_dir = dir};
}

static void test_rows_and_counts(void)
{
    nnt_request *r = request("{\"nnt_request\": 1, \"saves\": [\"layers.1.layer_output\", "
                             "\"layers.0.mlp.expert_indices\"]}");
    const char *data[] = {corpus};
    const char *reduce[] = {"layers.1.layer_output"};
    nnt_harvest_spec s = spec(r, data, out);
    s.reduce = reduce;
    s.n_reduce = 1;
    nnt_harvest_progress done;
    nnt_status st = nnt_harvest(m, &s, &done);
    CU_ASSERT_EQUAL_FATAL(st, NNT_OK);
    if (st != NNT_OK) fprintf(stderr, "%s\n", nnt_last_error(rt));
    CU_ASSERT_EQUAL(done.rows, 20);
    CU_ASSERT_EQUAL(done.tokens, 240);
    CU_ASSERT(done.shards > 1);
    CU_ASSERT_EQUAL(done.resumed, 0);

    /* row 0: the first shard's first 12 tokens, against a trace of their ids */
    char shard[700], stats[700];
    snprintf(shard, sizeof shard, "%s/shard-00000.safetensors", out);
    snprintf(stats, sizeof stats, "%s/stats.safetensors", out);
    nnt_tensor ids = {0}, val = {0}, idx = {0}, counts = {0}, tokens = {0};
    CU_ASSERT_FATAL(nnt_safetensors_read(rt, shard, "harvest.input_ids", &ids) == NNT_OK);
    CU_ASSERT_FATAL(nnt_safetensors_read(rt, shard, "layers.1.layer_output", &val) == NNT_OK);
    CU_ASSERT_FATAL(nnt_safetensors_read(rt, shard, "layers.0.mlp.expert_indices", &idx) == NNT_OK);
    CU_ASSERT_FATAL(ids.shape[0] >= 12 && val.ndim == 2 && val.shape[1] == 64 && idx.ndim == 2);
    nnt_trace *t = NULL;
    CU_ASSERT_FATAL(nnt_trace_new(m, &t) == NNT_OK);
    CU_ASSERT_FATAL(nnt_trace_save(t, "layers.1.layer_output") == NNT_OK);
    CU_ASSERT_FATAL(nnt_trace_run(t, ids.data, NULL, 1, 12) == NNT_OK);
    const nnt_tensor *ref = nnt_trace_get(t, "layers.1.layer_output");
    double worst = 0;
    for (int i = 0; i < 12 * 64; i++) {
        double d = ((const float *)val.data)[i] - ((const float *)ref->data)[i];
        worst = d > worst ? d : -d > worst ? -d : worst;
    }
    CU_ASSERT(worst < 1e-5);
    nnt_trace_free(t);

    /* the routing statistics cover every token; block 0's counts add up to tokens x top_k */
    CU_ASSERT_FATAL(nnt_safetensors_read(rt, stats, "tokens", &tokens) == NNT_OK);
    CU_ASSERT_EQUAL(((const int64_t *)tokens.data)[0], 240);
    CU_ASSERT_FATAL(nnt_safetensors_read(rt, stats, "layers.0.mlp.expert_counts", &counts) == NNT_OK);
    int64_t sum = 0;
    for (int64_t e = 0; e < counts.shape[0]; e++) sum += ((const int64_t *)counts.data)[e];
    CU_ASSERT_EQUAL(sum, 240 * idx.shape[1]);
    nnt_tensor_free(&ids);
    nnt_tensor_free(&val);
    nnt_tensor_free(&idx);
    nnt_tensor_free(&counts);
    nnt_tensor_free(&tokens);

    /* a finished folder: nothing runs again */
    CU_ASSERT_EQUAL(nnt_harvest(m, &s, &done), NNT_OK);
    CU_ASSERT_EQUAL(done.resumed, 1);
    CU_ASSERT_EQUAL(done.rows, 20);
    /* another request on it: refused, naming the field */
    nnt_request *r2 = request("{\"nnt_request\": 1, \"saves\": [\"layers.0.layer_output\"]}");
    s.request = r2;
    CU_ASSERT_EQUAL(nnt_harvest(m, &s, &done), NNT_ERR_CONFLICT);
    CU_ASSERT_PTR_NOT_NULL(strstr(nnt_last_error(rt), "its request.saves differs"));
    nnt_request_free(r2);
    nnt_request_free(r);
}

static void test_errors(void)
{
    nnt_request *r = request("{\"nnt_request\": 1, \"saves\": [\"layers.0.layer_output\"]}");
    char bad[700], dir[700];
    snprintf(bad, sizeof bad, "%s/bad.jsonl", t_tmpdir());
    CU_ASSERT_FATAL(t_write_file(bad, "{\"text\": \"fine\"}\n{\"text\": \"open\n") == 0);
    const char *data[] = {bad};
    snprintf(dir, sizeof dir, "%s/harvest-bad", t_tmpdir());
    nnt_harvest_spec s = spec(r, data, dir);
    s.routing_stats = 0;
    CU_ASSERT_EQUAL(nnt_harvest(m, &s, NULL), NNT_ERR_INVALID_ARGUMENT);
    CU_ASSERT_PTR_NOT_NULL(strstr(nnt_last_error(rt), "bad.jsonl:2: not a JSON object"));
    s.skip_bad = 1;
    s.rows = NNT_HARVEST_SPLIT;
    CU_ASSERT_EQUAL(nnt_harvest(m, &s, NULL), NNT_OK);

    static const struct {
        const char *field;
        int value;
        const char *message;
    } CASES[] = {
        {"context", 0, "context: 0 is not in 1..1048576"},
        {"batch", 5000, "batch: 5000 is not in 1..4096"},
        {"dtype", NNT_I32, "dtype: I32; a harvest writes F32, BF16 or F16"},
        {"rows", 9, "rows: 9 is not a row layout"},
    };
    for (size_t i = 0; i < sizeof CASES / sizeof *CASES; i++) {
        nnt_harvest_spec e = spec(r, data, dir);
        if (!strcmp(CASES[i].field, "context")) e.context = CASES[i].value;
        if (!strcmp(CASES[i].field, "batch")) e.batch = CASES[i].value;
        if (!strcmp(CASES[i].field, "dtype")) e.dtype = (nnt_dtype)CASES[i].value;
        if (!strcmp(CASES[i].field, "rows")) e.rows = (nnt_harvest_rows)CASES[i].value;
        CU_ASSERT_EQUAL(nnt_harvest(m, &e, NULL), NNT_ERR_INVALID_ARGUMENT);
        CU_ASSERT_PTR_NOT_NULL(strstr(nnt_last_error(rt), CASES[i].message));
    }
    /* rows in the request, and a method other than trace */
    nnt_request *rows = request("{\"nnt_request\": 1, \"rows\": [{\"tokens\": [1, 2]}], \"saves\": [\"layers.0.layer_output\"]}");
    nnt_harvest_spec e = spec(rows, data, dir);
    CU_ASSERT_EQUAL(nnt_harvest(m, &e, NULL), NNT_ERR_INVALID_ARGUMENT);
    CU_ASSERT_PTR_NOT_NULL(strstr(nnt_last_error(rt), "request: rows:"));
    nnt_request_free(rows);
    /* a routing statistics request and a reduction of a value without a [batch seq] layout */
    const char *reduce[] = {"layers.0.self_attn.attention_probabilities"};
    char dir2[700];
    snprintf(dir2, sizeof dir2, "%s/harvest-reduce", t_tmpdir());
    e = spec(r, data, dir2);
    e.reduce = reduce;
    e.n_reduce = 1;
    CU_ASSERT_EQUAL(nnt_harvest(m, &e, NULL), NNT_ERR_INVALID_ARGUMENT);
    CU_ASSERT_PTR_NOT_NULL(strstr(nnt_last_error(rt), "reduce[0]"));
    nnt_request_free(r);
}

int register_tests(void)
{
    CU_pSuite s = CU_add_suite("harvest", setup, teardown);
    if (!s) return -1;
    if (!CU_add_test(s, "packed rows against a trace, routing counts, a finished folder, another request", test_rows_and_counts) ||
        !CU_add_test(s, "bad lines and bad settings", test_errors))
        return -1;
    return 0;
}
