/* test_request.c - the request format (docs/requests.md, nnt_request.h): every example of the
 * specification parsed, applied and run on the tiny MiniMax-M2 checkpoint, its saved values held
 * against the same requests made through the C API; a table of malformed documents, each
 * refused with its status and the JSON path of the field at fault; edits restricted to batch
 * rows and positions against separate single-row forwards and the patching sweep's own edit; the
 * written form parsed back to an equal request; batches, metrics, and files. */
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/request/request_internal.h"
#include "test_util.h"

static nnt_runtime *rt;
static nnt_model *m;
static char model_dir[512];
static char req_dir[600];  /* the examples' folder: v.safetensors and prompt.txt */
static void *attach;       /* tests/fixtures/steering/v.safetensors, the examples' attachment */
static size_t attach_len;
static nnt_tensor vec;     /* its vector "v" [64], read with nnt_safetensors_read */

static char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    if (buf) buf[n] = '\0';
    if (len) *len = (size_t)n;
    return buf;
}

static int setup(void)
{
    if (nnt_runtime_open(t_ini(), &rt) != NNT_OK) return -1;
    snprintf(model_dir, sizeof model_dir, "%s/examples/tiny-minimax-m2", NNT_TEST_SOURCE_DIR);
    if (nnt_model_load(rt, model_dir, &m) != NNT_OK) return -1;
    char src[1024], dst[1024];
    snprintf(req_dir, sizeof req_dir, "%s/request-examples", t_tmpdir());
    mkdir(req_dir, 0755);
    snprintf(src, sizeof src, "%s/steering/v.safetensors", NNT_TEST_FIXTURES);
    snprintf(dst, sizeof dst, "%s/v.safetensors", req_dir);
    if (t_copy_file(src, dst) != 0) return -1;
    if (!(attach = slurp(src, &attach_len))) return -1;
    if (nnt_safetensors_read(rt, src, "v", &vec) != NNT_OK) return -1;
    snprintf(src, sizeof src, "%s/prompt_text.txt", model_dir);
    snprintf(dst, sizeof dst, "%s/prompt.txt", req_dir);
    return t_copy_file(src, dst);
}

static int teardown(void)
{
    nnt_tensor_free(&vec);
    free(attach);
    nnt_model_free(m);
    nnt_runtime_close(rt);
    return 0;
}

/* Parses json as "request.json" in the examples' folder, with the attachment when asked. */
static nnt_status parse_n(const char *json, size_t len, int with_attach, nnt_request **r)
{
    nnt_request_source src = {.struct_size = sizeof src, .json = json, .json_len = len, .base_dir = req_dir,
                              .name = "request.json", .tensors = with_attach ? attach : NULL,
                              .tensors_len = with_attach ? attach_len : 0};
    return nnt_request_parse(rt, &src, r);
}
static nnt_status parse(const char *json, nnt_request **r)
{
    return parse_n(json, strlen(json), 1, r);
}

/* The ```json blocks of docs/requests.md, in order (the caller frees each and the array). */
static int doc_examples(char ***out)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/docs/requests.md", NNT_TEST_SOURCE_DIR);
    char *md = slurp(path, NULL);
    CU_ASSERT_FATAL(md != NULL);
    int n = 0;
    char **ex = NULL;
    for (char *p = md; (p = strstr(p, "```json\n")) != NULL;) {
        p += 8;
        char *end = strstr(p, "```");
        CU_ASSERT_FATAL(end != NULL);
        ex = realloc(ex, (size_t)(n + 1) * sizeof *ex);
        ex[n] = strndup(p, (size_t)(end - p));
        n++;
        p = end + 3;
    }
    free(md);
    *out = ex;
    return n;
}

/* Tensors agree within 1e-5 of the largest magnitude (the same forward; edits computed along
 * two paths); want's row `row` (-1: all of it) against all of got. */
static void same_tensor(const nnt_tensor *g, const nnt_tensor *w, int row, const char *what, const char *key)
{
    int64_t n = nnt_tensor_numel(w), off = 0;
    if (row >= 0) {
        n /= w->shape[0];
        off = row * n;
        CU_ASSERT_FATAL(g->ndim == w->ndim && g->shape[0] == 1 && nnt_shape_equal(g->ndim - 1, g->shape + 1, w->ndim - 1, w->shape + 1));
    } else {
        CU_ASSERT_FATAL(nnt_shape_equal(g->ndim, g->shape, w->ndim, w->shape));
    }
    CU_ASSERT_FATAL(g->dtype == w->dtype);
    double worst = 0, scale = 0;
    for (int64_t j = 0; j < n; j++) {
        double x = nnt_tensor_get_f64(w, off + j), y = nnt_tensor_get_f64(g, j);
        worst = fmax(worst, fabs(x - y));
        scale = fmax(scale, fabs(x));
    }
    if (!(worst <= 1e-5 * scale + 1e-12)) fprintf(stderr, "\n  %s, %s: differs by %.3g of %.3g\n", what, key, worst, scale);
    CU_ASSERT(worst <= 1e-5 * scale + 1e-12);
}

/* Two traces' results agree: the same keys in the same order, each tensor as same_tensor says
 * (got's value under row_key, when given, is want's row `row`). */
static void same_results(const nnt_trace *got, const nnt_trace *want, const char *what, const char *row_key, int row)
{
    CU_ASSERT_EQUAL(nnt_trace_result_count(got), nnt_trace_result_count(want));
    if (nnt_trace_result_count(got) != nnt_trace_result_count(want))
        fprintf(stderr, "\n  %s: %d results, expected %d\n", what, nnt_trace_result_count(got), nnt_trace_result_count(want));
    for (int i = 0; i < nnt_trace_result_count(want); i++) {
        const char *key, *gkey = "";
        const nnt_tensor *w, *g = NULL;
        CU_ASSERT_FATAL(nnt_trace_result(want, i, &key, &w) == NNT_OK);
        if (nnt_trace_result(got, i, &gkey, &g) != NNT_OK || strcmp(gkey, key) != 0) {
            fprintf(stderr, "\n  %s: result %d is '%s', expected '%s'\n", what, i, gkey, key);
            CU_FAIL("result keys differ");
            continue;
        }
        CU_ASSERT_FATAL(w && g);
        same_tensor(g, w, row_key && strcmp(key, row_key) == 0 ? row : -1, what, key);
    }
}

/* parse(write(r)) == r with the attachment and inline, and writing is a fixed point. */
static void check_round_trip(const nnt_request *r, const char *what)
{
    for (int inline_ = 0; inline_ < 2; inline_++) {
        char *json = NULL, *again = NULL;
        size_t len = 0, len2 = 0, tlen = 0, tlen2 = 0;
        void *tensors = NULL, *tensors2 = NULL;
        CU_ASSERT_EQUAL_FATAL(nnt_request_write(r, &json, &len, inline_ ? NULL : &tensors, &tlen), NNT_OK);
        CU_ASSERT_EQUAL(strlen(json), len);
        nnt_request_source src = {.struct_size = sizeof src, .json = json, .json_len = len, .name = "written.json",
                                  .tensors = tensors, .tensors_len = tlen};
        nnt_request *back = NULL;
        nnt_status st = nnt_request_parse(rt, &src, &back); /* no base_dir: the written form needs no file */
        if (st != NNT_OK) fprintf(stderr, "\n  %s: %s\n  %s\n", what, nnt_last_error(rt), json);
        CU_ASSERT_EQUAL_FATAL(st, NNT_OK);
        CU_ASSERT(nnt_request_equal(r, back));
        CU_ASSERT_EQUAL_FATAL(nnt_request_write(back, &again, &len2, inline_ ? NULL : &tensors2, &tlen2), NNT_OK);
        CU_ASSERT(len == len2 && strcmp(json, again) == 0);
        CU_ASSERT(tlen == tlen2 && (tlen == 0 || memcmp(tensors, tensors2, tlen) == 0));
        nnt_request_free(back);
        free(json);
        free(again);
        free(tensors);
        free(tensors2);
    }
}

/* ---- the examples' counterparts: the same requests through the C API ---- */

/* A row of a counterpart: ids, or text (a file's when file is set) encoded by the tokenizer. */
typedef struct c_row {
    const int32_t *ids;
    int n;
    const char *text;
    const char *file;
} c_row;

typedef struct counterpart {
    nnt_method method;
    c_row rows[3];
    int n_rows, add_special;
    void (*requests)(nnt_trace *t); /* the C API calls of the example, in its order */
    const char *row_save;           /* a save restricted to row `row_of_save` (compared with that row) */
    int row_of_save;
    nnt_generate_opts gen;          /* generate */
} counterpart;

static const int32_t ROW_A[] = {235, 244, 202, 156, 148, 193, 80}, ROW_B[] = {192, 183, 124, 97};
static const int32_t ROW_C[] = {235, 244, 202, 156, 148, 193, 80, 192}, ROW_D[] = {169, 247, 160, 3, 95, 102};
static const int32_t ROW_E[] = {235, 244, 202, 156, 148}, ROW_F[] = {193, 80, 192, 183, 124}, ROW_G[] = {97, 63, 169, 247, 160};
static const int32_t ROW_H[] = {3, 95, 102, 97, 92, 37, 186}, ROW_I[] = {235, 244, 202, 156}, ROW_J[] = {148, 193};
static const int32_t CLEAN[] = {235, 244, 202, 156, 148}, CORRUPT[] = {235, 244, 17, 156, 148};
static const int32_t STOP0[] = {0};
static const int32_t ROW_K[] = {235, 121, 209, 109}, CLEAN_K[] = {235, 121, 209, 109}, CORRUPT_K[] = {235, 121, 44, 109};
#define ROW(a) {.ids = a, .n = (int)(sizeof a / sizeof *a)}

static void c_saves(nnt_trace *t)
{
    T_OK(rt, nnt_trace_save(t, "logits[:, -1]"));
    T_OK(rt, nnt_trace_save(t, "layers.*.layer_output"));
    T_OK(rt, nnt_trace_save(t, "layers.1.mlp.expert_indices"));
}

static void c_order(nnt_trace *t)
{
    T_OK(rt, nnt_trace_save(t, "layers.0.layer_output"));
    T_OK(rt, nnt_trace_scale(t, "layers.0.layer_output", 0.5f));
    T_OK(rt, nnt_trace_zero(t, "layers.1.self_attn.attention_output"));
    T_OK(rt, nnt_trace_save(t, "layers.0.layer_output"));
    T_OK(rt, nnt_trace_save(t, "logits"));
}

static void c_steer(nnt_trace *t)
{
    const int pos[] = {0, -1};
    T_OK(rt, nnt_trace_steer(t, 0, 1, pos, 2, &vec, 4.0f));
    T_OK(rt, nnt_trace_save(t, "logits[:, -1]"));
    T_OK(rt, nnt_trace_save(t, "layers.1.layer_output"));
}

static void c_routing(nnt_trace *t)
{
    T_OK(rt, nnt_trace_ablate_expert(t, 1, 3));
    T_OK(rt, nnt_trace_masked_fill(t, "layers.2.mlp.expert_weights", "layers.2.mlp.expert_indices", 5, 0.0f));
    T_OK(rt, nnt_trace_skip_layers(t, 0, 0));
    T_OK(rt, nnt_trace_save(t, "layers.1.mlp.expert_weights"));
    T_OK(rt, nnt_trace_save(t, "layers.2.mlp.expert_weights"));
    T_OK(rt, nnt_trace_save(t, "logits"));
}

/* Per-row edits as a caller of the C API writes them: callbacks that touch their rows only
 * (value [batch seq hidden], the three rows unpadded). */
static nnt_status cb_scale_row1(void *user, const char *path, int layer, nnt_tensor *v, nnt_error *err)
{
    int64_t per = nnt_tensor_numel(v) / v->shape[0];
    float *x = (float *)v->data + per; /* row 1 */
    for (int64_t j = 0; j < per; j++) x[j] = (float)((double)x[j] * 0.25);
    return NNT_OK;
}
static nnt_status cb_add_rows02_pos2(void *user, const char *path, int layer, nnt_tensor *v, nnt_error *err)
{
    int64_t T = v->shape[1], H = v->shape[2];
    for (int b = 0; b <= 2; b += 2) {
        float *x = (float *)v->data + ((int64_t)b * T + 2) * H;
        for (int64_t j = 0; j < H; j++) x[j] = (float)((double)x[j] + 2.0 * ((const float *)vec.data)[j]);
    }
    return NNT_OK;
}
static void c_rows(nnt_trace *t)
{
    T_OK(rt, nnt_trace_edit(t, "layers.0.layer_output", cb_scale_row1, NULL));
    T_OK(rt, nnt_trace_edit(t, "layers.1.layer_output", cb_add_rows02_pos2, NULL));
    T_OK(rt, nnt_trace_save(t, "layers.2.layer_output")); /* its row 0 is the request's save of rows [0] */
    T_OK(rt, nnt_trace_save(t, "layers.2.layer_output"));
    T_OK(rt, nnt_trace_save(t, "logits[:, -1]"));
}

static nnt_status cb_negate(void *user, const char *path, int layer, nnt_tensor *v, nnt_error *err)
{
    int *calls = user;
    for (int64_t j = 0; j < nnt_tensor_numel(v); j++) ((float *)v->data)[j] = -((float *)v->data)[j];
    if (calls) (*calls)++;
    return NNT_OK;
}
static void c_inline(nnt_trace *t)
{
    float bias[8] = {0, 0, 5, 0, 0, 0, 0, 0};
    nnt_tensor b = {.dtype = NNT_F32, .ndim = 1, .shape = {8}, .data = bias};
    T_OK(rt, nnt_trace_add(t, "layers.0.mlp.router_logits", &b, 1.0f));
    T_OK(rt, nnt_trace_edit(t, "layers.1.mlp.mlp_output", cb_negate, NULL));
    T_OK(rt, nnt_trace_save(t, "layers.0.mlp.expert_indices"));
    T_OK(rt, nnt_trace_save(t, "layers.1.mlp.mlp_output"));
    T_OK(rt, nnt_trace_save(t, "logits[:, -1]"));
}

static void c_generate(nnt_trace *t)
{
    const int gen[] = {NNT_POS_GENERATED};
    T_OK(rt, nnt_trace_steps(t, 1, -1));
    T_OK(rt, nnt_trace_steer(t, 2, 2, gen, 1, &vec, 3.0f));
    T_OK(rt, nnt_trace_steps(t, 0, -1));
    T_OK(rt, nnt_trace_save(t, "logits[:, -1]"));
}

static void c_lens(nnt_trace *t)
{
    T_OK(rt, nnt_trace_zero(t, "layers.0.self_attn.attention_output"));
}

static void c_grad(nnt_trace *t)
{
    T_OK(rt, nnt_trace_scale(t, "layers.1.self_attn.attention_output", 0.5f));
    T_OK(rt, nnt_trace_grad(t, "layers.*.layer_output"));
    T_OK(rt, nnt_trace_metric(t, "logit-diff:11,29", NULL, 0));
}

/* In the order of docs/requests.md's examples. */
static const counterpart COUNTERPARTS[] = {
    {.method = NNT_METHOD_TRACE, .rows = {ROW(ROW_A), ROW(ROW_B)}, .n_rows = 2, .add_special = 1, .requests = c_saves},
    {.method = NNT_METHOD_TRACE, .rows = {ROW(ROW_C)}, .n_rows = 1, .add_special = 1, .requests = c_order},
    {.method = NNT_METHOD_TRACE, .rows = {{.text = "The people of the United States"}}, .n_rows = 1, .add_special = 1,
     .requests = c_steer},
    {.method = NNT_METHOD_TRACE, .rows = {ROW(ROW_D)}, .n_rows = 1, .add_special = 1, .requests = c_routing},
    {.method = NNT_METHOD_TRACE, .rows = {ROW(ROW_E), ROW(ROW_F), ROW(ROW_G)}, .n_rows = 3, .add_special = 1,
     .requests = c_rows, .row_save = "layers.2.layer_output", .row_of_save = 0},
    {.method = NNT_METHOD_TRACE, .rows = {ROW(ROW_H)}, .n_rows = 1, .add_special = 1, .requests = c_inline},
    {.method = NNT_METHOD_GENERATE, .rows = {ROW(ROW_I), ROW(ROW_J)}, .n_rows = 2, .add_special = 1,
     .requests = c_generate, .gen = {.max_new_tokens = 4, .top_p = 1}},
    {.method = NNT_METHOD_GENERATE, .rows = {{.text = "We the people"}, {.file = "prompt.txt"}}, .n_rows = 2,
     .add_special = 0,
     .gen = {.max_new_tokens = 3, .temperature = 0.8f, .top_k = 20, .top_p = 0.9f, .seed = 12345678901234567890ULL,
             .stop_ids = STOP0, .n_stop_ids = 1}},
    {.method = NNT_METHOD_LENS, .rows = {{.text = "The people of the United States"}}, .n_rows = 1, .add_special = 1,
     .requests = c_lens},
    {.method = NNT_METHOD_PATCH, .rows = {ROW(CLEAN), ROW(CORRUPT)}, .n_rows = 2, .add_special = 1},
    {.method = NNT_METHOD_TRACE, .rows = {ROW(ROW_K)}, .n_rows = 1, .add_special = 1, .requests = c_grad},
    {.method = NNT_METHOD_ATTRIBUTE, .rows = {ROW(CLEAN_K), ROW(CORRUPT_K)}, .n_rows = 2, .add_special = 1},
};
#define N_COUNTERPARTS ((int)(sizeof COUNTERPARTS / sizeof *COUNTERPARTS))

/* The counterpart's batch, built here: ids as given, text through nnt_tokenizer_encode, left
 * padding by hand. */
static void c_batch(const counterpart *c, nnt_batch *b)
{
    nnt_tokenizer *tok = NULL;
    CU_ASSERT_FATAL(nnt_tokenizer_load(model_dir, &tok) == NNT_OK);
    int32_t *ids[3] = {0};
    int lens[3] = {0}, seq = 0;
    for (int r = 0; r < c->n_rows; r++) {
        const c_row *row = &c->rows[r];
        if (row->ids) {
            ids[r] = malloc((size_t)row->n * sizeof *ids[r]);
            memcpy(ids[r], row->ids, (size_t)row->n * sizeof *ids[r]);
            lens[r] = row->n;
        } else {
            char path[1200];
            size_t len = row->text ? strlen(row->text) : 0;
            char *text = row->text ? strdup(row->text) : (snprintf(path, sizeof path, "%s/%s", req_dir, row->file), slurp(path, &len));
            int64_t n = 0;
            CU_ASSERT_FATAL(nnt_tokenizer_encode(tok, text, len, c->add_special ? NNT_TOKENIZE_ADD_SPECIAL : 0, &ids[r], &n) == NNT_OK);
            lens[r] = (int)n;
            free(text);
        }
        seq = lens[r] > seq ? lens[r] : seq;
    }
    b->batch = c->n_rows;
    b->seq = seq;
    b->ids = calloc((size_t)(c->n_rows * seq), sizeof *b->ids);
    b->mask = calloc((size_t)(c->n_rows * seq), sizeof *b->mask);
    b->lens = calloc((size_t)c->n_rows, sizeof *b->lens);
    for (int r = 0; r < c->n_rows; r++) {
        for (int s = 0; s < lens[r]; s++) {
            b->ids[r * seq + seq - lens[r] + s] = ids[r][s];
            b->mask[r * seq + seq - lens[r] + s] = 1;
        }
        b->lens[r] = lens[r];
        free(ids[r]);
    }
    nnt_tokenizer_free(tok);
}

/* The batch the request makes equals the counterpart's. */
static void same_batch(const nnt_batch *a, const nnt_batch *b)
{
    CU_ASSERT_FATAL(a->batch == b->batch && a->seq == b->seq);
    size_t n = (size_t)a->batch * (size_t)a->seq;
    CU_ASSERT(memcmp(a->ids, b->ids, n * sizeof *a->ids) == 0);
    CU_ASSERT(memcmp(a->mask, b->mask, n * sizeof *a->mask) == 0);
    CU_ASSERT(memcmp(a->lens, b->lens, (size_t)a->batch * sizeof *a->lens) == 0);
}

/* A trace or lens example: the request's trace and the counterpart's on their batches. A lens
 * saves every block's output, so both traces do here. */
static void run_trace_example(const nnt_request *r, const counterpart *c, const nnt_batch *b, const char *what)
{
    int calls = 0;
    nnt_request_callback cbs[] = {{cb_negate, &calls}};
    nnt_trace *mine, *theirs;
    T_OK(rt, nnt_trace_new(m, &mine));
    T_OK(rt, nnt_trace_new(m, &theirs));
    T_OK(rt, nnt_request_apply(r, mine, cbs, 1));
    c->requests(theirs);
    if (c->method == NNT_METHOD_LENS) {
        T_OK(rt, nnt_trace_save(mine, "layers.*.layer_output"));
        T_OK(rt, nnt_trace_save(theirs, "layers.*.layer_output"));
    }
    nnt_batch rb;
    T_OK(rt, nnt_request_batch(r, m, &rb));
    same_batch(&rb, b);
    T_OK(rt, nnt_trace_run(mine, rb.ids, rb.mask, rb.batch, rb.seq));
    T_OK(rt, nnt_trace_run(theirs, b->ids, b->mask, b->batch, b->seq));
    CU_ASSERT(nnt_trace_result_count(theirs) > 0);
    same_results(mine, theirs, what, c->row_save, c->row_of_save);
    int callbacks = 0; /* the caller's function ran once per callback entry */
    for (int i = 0; i < r->n_edits; i++) callbacks += r->edits[i].op == REQ_OP_CALLBACK;
    CU_ASSERT_EQUAL(calls, callbacks);
    nnt_batch_free(&rb);
    nnt_trace_free(mine);
    nnt_trace_free(theirs);
}

/* A generate example: the tokens and saved values of nnt_generate under the request's trace
 * and options, and under the counterpart's. */
static void run_generate_example(const nnt_request *r, const counterpart *c, const nnt_batch *b, const char *what)
{
    int ignore_eos = -1;
    const nnt_generate_opts *o = nnt_request_generate_opts(r, &ignore_eos);
    CU_ASSERT_FATAL(o != NULL);
    CU_ASSERT(o->max_new_tokens == c->gen.max_new_tokens && o->temperature == c->gen.temperature &&
              o->top_k == c->gen.top_k && o->top_p == c->gen.top_p && o->seed == c->gen.seed &&
              o->n_stop_ids == c->gen.n_stop_ids);
    CU_ASSERT(o->n_stop_ids == 0 || memcmp(o->stop_ids, c->gen.stop_ids, sizeof(int32_t) * (size_t)o->n_stop_ids) == 0);
    CU_ASSERT_EQUAL(ignore_eos, c->gen.stop_ids ? 0 : 1);
    nnt_trace *mine, *theirs;
    T_OK(rt, nnt_trace_new(m, &mine));
    T_OK(rt, nnt_trace_new(m, &theirs));
    T_OK(rt, nnt_request_apply(r, mine, NULL, 0));
    if (c->requests) c->requests(theirs);
    nnt_batch rb;
    T_OK(rt, nnt_request_batch(r, m, &rb));
    same_batch(&rb, b);
    size_t n = (size_t)b->batch * (size_t)o->max_new_tokens;
    int32_t *got = calloc(n, sizeof *got), *want = calloc(n, sizeof *want);
    T_OK(rt, nnt_generate(m, mine, rb.ids, rb.mask, rb.batch, rb.seq, o, got));
    T_OK(rt, nnt_generate(m, theirs, b->ids, b->mask, b->batch, b->seq, &c->gen, want));
    CU_ASSERT(memcmp(got, want, n * sizeof *got) == 0);
    same_results(mine, theirs, what, NULL, -1);
    free(got);
    free(want);
    nnt_batch_free(&rb);
    nnt_trace_free(mine);
    nnt_trace_free(theirs);
}

/* The patch example's settings, as its text gives them. */
static void check_patch_example(const nnt_request *r, const counterpart *c, const nnt_batch *b)
{
    const nnt_request_patch_opts *p = nnt_request_patch(r);
    CU_ASSERT_FATAL(p != NULL);
    CU_ASSERT_STRING_EQUAL(p->value, "layers.*.layer_output");
    CU_ASSERT_STRING_EQUAL(p->metric, "logit-diff:42,17");
    CU_ASSERT(p->n_positions == 2 && p->positions[0] == 0 && p->positions[1] == 3 && p->batch == 8);
    nnt_metric mt;
    CU_ASSERT(nnt_metric_parse(p->metric, &mt, NULL) == NNT_OK && mt.kind == NNT_METRIC_LOGIT_DIFF && mt.a == 42 && mt.b == 17);
    nnt_batch rb;
    T_OK(rt, nnt_request_batch(r, m, &rb));
    same_batch(&rb, b);
    nnt_batch_free(&rb);
    CU_ASSERT_PTR_NULL(nnt_request_generate_opts(r, NULL));
    CU_ASSERT_PTR_NULL(nnt_request_lens_positions(r, NULL, NULL));
}

/* The lens and patch examples run whole (nnt_request_run) against the methods called on the
 * counterpart's batch and requests (nnt_lens, nnt_patch): the same cells. */
static void run_lens_method(const nnt_request *r, const counterpart *c, const nnt_batch *b)
{
    nnt_result *res = NULL;
    T_OK(rt, nnt_request_run(m, r, NULL, &res));
    const nnt_lens_result *got = nnt_result_lens(res);
    CU_ASSERT_FATAL(got != NULL);
    nnt_trace *t;
    T_OK(rt, nnt_trace_new(m, &t));
    c->requests(t);
    const int pos[2] = {0, -1};
    nnt_lens_result want;
    T_OK(rt, nnt_lens(m, t, b, pos, 2, 0, NULL, &want));
    size_t cells = (size_t)want.batch * want.layers * want.width;
    CU_ASSERT(got->batch == want.batch && got->layers == want.layers && got->width == want.width && cells > 0);
    CU_ASSERT(memcmp(got->positions, want.positions, sizeof(int32_t) * (size_t)want.batch * want.width) == 0);
    CU_ASSERT(memcmp(got->top, want.top, sizeof(int32_t) * cells) == 0);
    CU_ASSERT(memcmp(got->top_prob, want.top_prob, sizeof(float) * cells) == 0);
    CU_ASSERT(got->probs == NULL); /* "probs" left false */
    nnt_lens_result_free(&want);
    nnt_trace_free(t);
    nnt_result_free(res);
}

static void run_patch_method(const nnt_request *r, const nnt_batch *b)
{
    nnt_result *res = NULL;
    T_OK(rt, nnt_request_run(m, r, NULL, &res));
    const nnt_patch_result *got = nnt_result_patch(res);
    CU_ASSERT_FATAL(got != NULL);
    const int pos[2] = {0, 3};
    nnt_patch_spec s = {.struct_size = sizeof s, .value = "layers.*.layer_output", .clean = b->ids,
                        .corrupt = b->ids + b->seq, .seq = b->seq, .positions = pos, .n_positions = 2, .rows = 8,
                        .metric = {.kind = NNT_METRIC_LOGIT_DIFF, .a = 42, .b = 17}};
    nnt_patch_result want;
    T_OK(rt, nnt_patch(m, &s, &want));
    CU_ASSERT(got->n_blocks == want.n_blocks && got->n_positions == want.n_positions && want.n_blocks > 0);
    CU_ASSERT(memcmp(got->grid, want.grid, sizeof(double) * (size_t)want.n_blocks * want.n_positions) == 0);
    CU_ASSERT(got->clean_metric == want.clean_metric && got->corrupt_metric == want.corrupt_metric);
    nnt_patch_result_free(&want);
    nnt_result_free(res);
}

/* The attribute example run whole against nnt_attribute on the counterpart's prompts. */
static void run_attribute_method(const nnt_request *r, const nnt_batch *b)
{
    const nnt_request_attribute_opts *ao = nnt_request_attribute(r);
    CU_ASSERT_FATAL(ao != NULL);
    CU_ASSERT(!strcmp(ao->metric, "logprob:7") && ao->ig_steps == 0 &&
              !strcmp(ao->value, "layers.*.self_attn.attention_head_outputs"));
    nnt_result *res = NULL;
    T_OK(rt, nnt_request_run(m, r, NULL, &res));
    const nnt_attribute_result *got = nnt_result_attribute(res);
    CU_ASSERT_FATAL(got != NULL);
    nnt_attribute_spec s = {.struct_size = sizeof s, .value = ao->value, .clean = b->ids, .corrupt = b->ids + b->seq,
                            .seq = b->seq, .metric = {.kind = NNT_METRIC_LOGPROB, .a = 7}};
    nnt_attribute_result want;
    T_OK(rt, nnt_attribute(m, &s, &want));
    size_t cells = (size_t)want.n_blocks * want.n_positions * want.n_units;
    CU_ASSERT(got->n_blocks == want.n_blocks && got->n_positions == want.n_positions && got->n_units == want.n_units &&
              want.n_units > 1 && cells > 0);
    CU_ASSERT(memcmp(got->grid, want.grid, sizeof(double) * cells) == 0);
    CU_ASSERT(got->clean_metric == want.clean_metric && got->corrupt_metric == want.corrupt_metric);
    nnt_attribute_result_free(&want);
    nnt_result_free(res);
}

static void test_examples(void)
{
    char **ex;
    int n = doc_examples(&ex);
    /* every example of the specification has its counterpart here, in order */
    CU_ASSERT_EQUAL_FATAL(n, N_COUNTERPARTS);
    for (int i = 0; i < n; i++) {
        char what[64];
        snprintf(what, sizeof what, "docs/requests.md example %d", i + 1);
        const counterpart *c = &COUNTERPARTS[i];
        nnt_request *r = NULL;
        nnt_status st = parse(ex[i], &r);
        if (st != NNT_OK) fprintf(stderr, "\n  %s: %s\n", what, nnt_last_error(rt));
        CU_ASSERT_EQUAL_FATAL(st, NNT_OK);
        CU_ASSERT_EQUAL_FATAL(nnt_request_method(r), c->method);
        check_round_trip(r, what);
        nnt_batch b = {0};
        c_batch(c, &b);
        if (c->method == NNT_METHOD_TRACE || c->method == NNT_METHOD_LENS) run_trace_example(r, c, &b, what);
        if (c->method == NNT_METHOD_GENERATE) run_generate_example(r, c, &b, what);
        if (c->method == NNT_METHOD_PATCH) {
            check_patch_example(r, c, &b);
            run_patch_method(r, &b);
        }
        if (c->method == NNT_METHOD_LENS) run_lens_method(r, c, &b);
        if (c->method == NNT_METHOD_ATTRIBUTE) run_attribute_method(r, &b);
        if (c->method == NNT_METHOD_LENS) {
            int np = -1, probs = -1;
            const int *pos = nnt_request_lens_positions(r, &np, &probs);
            CU_ASSERT(pos && np == 2 && pos[0] == 0 && pos[1] == -1 && probs == 0);
        }
        nnt_batch_free(&b);
        nnt_request_free(r);
        free(ex[i]);
    }
    free(ex);
}

/* ---- malformed documents ---- */

typedef enum stage { AT_PARSE, AT_APPLY, AT_BATCH, AT_RUN } stage;
typedef struct bad_doc {
    stage at;       /* the step that refuses it */
    const char *json;
    nnt_status status;
    const char *needle; /* in the message: the document, the field's JSON path, what was expected */
} bad_doc;

#define R1 "{\"nnt_request\": 1, "
#define ROWS3 "\"rows\": [{\"tokens\": [1, 2, 3, 4, 5]}, {\"tokens\": [6, 7, 8, 9, 10]}, {\"tokens\": [11, 12, 13, 14, 15]}], "
#define EDIT(x) R1 "\"edits\": [" x "]}"
#define RUN(x) R1 ROWS3 "\"edits\": [" x "]}"
#define INLINE64 "{\"dtype\": \"F32\", \"shape\": [3], \"data\": [1, 2, 3]}"

static const bad_doc BAD[] = {
    /* the document as a whole */
    {AT_PARSE, "[]", NNT_ERR_FORMAT, "request.json: expected a JSON object at the top, got an array"},
    {AT_PARSE, "", NNT_ERR_FORMAT, "request.json: not JSON"},
    {AT_PARSE, "{\"nnt_request\": 1,", NNT_ERR_FORMAT, "request.json: not JSON: the parse stopped near byte"},
    {AT_PARSE, "{\"nnt_request\": 1} x", NNT_ERR_FORMAT, "request.json: byte 19 follows the document's JSON value"},
    {AT_PARSE, "{}", NNT_ERR_FORMAT, "request.json: nnt_request: missing (the format version, 1)"},
    {AT_PARSE, "{\"nnt_request\": 2}", NNT_ERR_UNSUPPORTED, "request.json: nnt_request: format version 2; this libnnt reads version 1"},
    {AT_PARSE, "{\"nnt_request\": \"1\"}", NNT_ERR_FORMAT, "request.json: nnt_request: expected the format version 1, got \"1\""},
    {AT_PARSE, "{\"nnt_request\": 1, \"nnt_request\": 1}", NNT_ERR_FORMAT, "request.json: nnt_request: given twice"},
    {AT_PARSE, R1 "\"frob\": 1}", NNT_ERR_FORMAT, "request.json: frob: unknown field; a request takes nnt_request, method, rows"},
    {AT_PARSE, R1 "\"\": 1}", NNT_ERR_FORMAT, "request.json: \"\": unknown field"},
    {AT_PARSE, R1 "\"method\": \"trac\"}", NNT_ERR_INVALID_ARGUMENT, "request.json: method: expected one of \"trace\""},
    {AT_PARSE, R1 "\"method\": 3}", NNT_ERR_FORMAT, "request.json: method: expected one of"},
    {AT_PARSE, R1 "\"add_special\": \"yes\"}", NNT_ERR_FORMAT, "request.json: add_special: expected true or false, got \"yes\""},
    {AT_PARSE, "{\"nnt_request\": 1, \"s\": \"\x01\"}", NNT_ERR_FORMAT, "request.json: byte 25 is the control byte 0x01"},
    {AT_PARSE, "{\"nnt_request\": 1, \"s\": \"\xff\"}", NNT_ERR_FORMAT, "request.json: byte 25 is not valid UTF-8"},
    {AT_PARSE, "{\"nnt_request\": 1, \"s\": \"a\\u0000b\"}", NNT_ERR_FORMAT, "request.json: byte 26: a string holds the escape \\u0000"},
    /* rows */
    {AT_PARSE, R1 "\"rows\": {}}", NNT_ERR_FORMAT, "request.json: rows: expected an array of rows, got an object"},
    {AT_PARSE, R1 "\"rows\": [{\"tokens\": [1], \"x\": 1}]}", NNT_ERR_FORMAT, "request.json: rows[0].x: unknown field; rows[0] takes tokens, tokens_file, text, file"},
    {AT_PARSE, R1 "\"rows\": [{\"tokens\": [1], \"text\": \"a\"}]}", NNT_ERR_FORMAT, "request.json: rows[0]: a row is {\"tokens\": [ids]}"},
    {AT_PARSE, R1 "\"rows\": [{\"tokens\": [1]}, {\"tokens\": [1, -1]}]}", NNT_ERR_INVALID_ARGUMENT,
     "request.json: rows[1].tokens[1]: expected an integer in 0..2147483647, got -1"},
    {AT_PARSE, R1 "\"rows\": [{\"tokens\": [1.5]}]}", NNT_ERR_FORMAT, "request.json: rows[0].tokens[0]: expected an integer in 0..2147483647, got 1.5"},
    {AT_PARSE, R1 "\"rows\": [{\"tokens\": []}]}", NNT_ERR_INVALID_ARGUMENT, "request.json: rows[0].tokens: expected at least one"},
    {AT_PARSE, R1 "\"rows\": [{\"file\": \"no-such-prompt.txt\"}]}", NNT_ERR_IO, "request.json: rows[0].file: "},
    {AT_PARSE, R1 "\"saves\": [3]}", NNT_ERR_FORMAT, "request.json: saves[0]: expected a value path, got 3"},
    /* edits */
    {AT_PARSE, EDIT("3"), NNT_ERR_FORMAT, "request.json: edits[0]: expected an object, got 3"},
    {AT_PARSE, EDIT("{\"path\": \"logits\"}"), NNT_ERR_FORMAT, "request.json: edits[0].op: missing (expected one of \"save\""},
    {AT_PARSE, EDIT("{\"op\": \"scal\", \"path\": \"logits\"}"), NNT_ERR_INVALID_ARGUMENT, "request.json: edits[0].op: expected one of"},
    {AT_PARSE, EDIT("{\"op\": \"scale\", \"path\": \"logits\", \"fator\": 2}"), NNT_ERR_FORMAT,
     "request.json: edits[0].fator: unknown field; edits[0] takes op, path, factor, rows"},
    {AT_PARSE, EDIT("{\"op\": \"zero\", \"path\": \"logits\"}, {\"op\": \"zero\", \"path\": \"logits\"}, {\"op\": \"scale\", \"path\": \"logits\", \"factor\": \"two\"}"),
     NNT_ERR_FORMAT, "request.json: edits[2].factor: expected a finite number with |F| <= 1e6, got \"two\""},
    {AT_PARSE, EDIT("{\"op\": \"scale\", \"path\": \"logits\", \"factor\": 2e6}"), NNT_ERR_INVALID_ARGUMENT,
     "request.json: edits[0].factor: expected a finite number with |F| <= 1e6, got 2000000"},
    {AT_PARSE, EDIT("{\"op\": \"scale\", \"path\": \"logits\"}"), NNT_ERR_FORMAT, "request.json: edits[0].factor: missing"},
    {AT_PARSE, EDIT("{\"op\": \"scale\", \"path\": \"logits\", \"factor\": 1, \"factor\": 2}"), NNT_ERR_FORMAT,
     "request.json: edits[0].factor: given twice"},
    {AT_PARSE, EDIT("{\"op\": \"ablate_expert\", \"layer\": 1e20, \"expert\": 0}"), NNT_ERR_INVALID_ARGUMENT,
     "request.json: edits[0].layer: expected an integer in 0..2147483647, got 1e+20"},
    {AT_PARSE, EDIT("{\"op\": \"ablate_expert\", \"layer\": 0, \"expert\": 1.5}"), NNT_ERR_FORMAT,
     "request.json: edits[0].expert: expected an integer in 0..2147483647, got 1.5"},
    {AT_PARSE, EDIT("{\"op\": \"ablate_expert\", \"layer\": 0}"), NNT_ERR_FORMAT, "request.json: edits[0].expert: missing"},
    {AT_APPLY, EDIT("{\"op\": \"skip_layers\", \"start\": 2, \"end\": 1}"), NNT_ERR_INDEX,
     "request.json: edits[0]: skip_layers(2, 1): need 0 <= start <= end < 3"},
    {AT_PARSE, EDIT("{\"op\": \"steer\", \"first\": 0, \"tensor\": {\"key\": \"v\"}, \"positions\": [0, -2147483646]}"),
     NNT_ERR_INVALID_ARGUMENT, "request.json: edits[0].positions[1]: expected a position: an integer in -2147483645..2147483647"},
    {AT_PARSE, EDIT("{\"op\": \"steer\", \"first\": 0, \"tensor\": {\"key\": \"v\"}, \"positions\": [\"last\"]}"),
     NNT_ERR_INVALID_ARGUMENT, "request.json: edits[0].positions[0]: expected a position"},
    {AT_PARSE, EDIT("{\"op\": \"steer\", \"first\": 0}"), NNT_ERR_FORMAT, "request.json: edits[0].tensor: missing"},
    {AT_PARSE, EDIT("{\"op\": \"steps\", \"from\": 1}"), NNT_ERR_INVALID_ARGUMENT,
     "request.json: edits[0].op: \"steps\" chooses generation steps; a trace request runs no steps"},
    {AT_PARSE, EDIT("{\"op\": \"skip_layers\", \"start\": 0, \"end\": 0, \"rows\": [0]}"), NNT_ERR_FORMAT,
     "request.json: edits[0].rows: unknown field; edits[0] takes op, start, end"},
    {AT_PARSE, EDIT("{\"op\": \"zero\", \"path\": \"logits\", \"rows\": [1, 1]}"), NNT_ERR_INVALID_ARGUMENT,
     "request.json: edits[0].rows[1]: 1 is given twice"},
    {AT_PARSE, EDIT("{\"op\": \"zero\", \"path\": \"logits\", \"rows\": [-1]}"), NNT_ERR_INVALID_ARGUMENT,
     "request.json: edits[0].rows[0]: expected an integer in 0..2147483647, got -1"},
    {AT_PARSE, EDIT("{\"op\": \"masked_fill\", \"path\": \"layers.0.mlp.expert_weights\", \"where\": \"layers.0.mlp.expert_indices\", \"equals\": 1, \"fill\": null}"),
     NNT_ERR_FORMAT, "request.json: edits[0].fill: expected a finite number with |F| <= 1e6, got null"},
    {AT_PARSE, EDIT("{\"op\": \"callback\", \"path\": \"logits\"}"), NNT_ERR_FORMAT, "request.json: edits[0].callback: missing"},
    /* tensors */
    {AT_PARSE, EDIT("{\"op\": \"set\", \"path\": \"logits\", \"tensor\": {\"file\": \"v.safetensors\", \"dtype\": \"F32\"}}"),
     NNT_ERR_FORMAT, "request.json: edits[0].tensor: a tensor is {\"file\"[, \"key\"]}, {\"key\"} or {\"dtype\", \"shape\", \"data\"}"},
    {AT_PARSE, EDIT("{\"op\": \"set\", \"path\": \"logits\", \"tensor\": {}}"), NNT_ERR_FORMAT, "request.json: edits[0].tensor: expected {\"file\""},
    {AT_PARSE, EDIT("{\"op\": \"set\", \"path\": \"logits\", \"tensor\": {\"dtype\": \"F32\", \"shape\": [4], \"data\": [1, 2, 3]}}"),
     NNT_ERR_FORMAT, "request.json: edits[0].tensor.data: 3 numbers, but shape [4] holds 4"},
    {AT_PARSE, EDIT("{\"op\": \"set\", \"path\": \"logits\", \"tensor\": {\"dtype\": \"F8_E4M3\", \"shape\": [1], \"data\": [1]}}"),
     NNT_ERR_INVALID_ARGUMENT, "request.json: edits[0].tensor.dtype: expected one of \"F32\", \"F16\", \"BF16\", \"F64\", \"I32\", \"I64\", got \"F8_E4M3\""},
    {AT_PARSE, EDIT("{\"op\": \"set\", \"path\": \"logits\", \"tensor\": {\"dtype\": \"F16\", \"shape\": [2], \"data\": [1, 1e5]}}"),
     NNT_ERR_INVALID_ARGUMENT, "request.json: edits[0].tensor.data[1]: expected a finite F16 number (|x| <= 65504), got 100000"},
    {AT_PARSE, EDIT("{\"op\": \"set\", \"path\": \"logits\", \"tensor\": {\"dtype\": \"I32\", \"shape\": [1], \"data\": [1.5]}}"),
     NNT_ERR_FORMAT, "request.json: edits[0].tensor.data[0]: expected an integer in -2147483648..2147483647, got 1.5"},
    {AT_PARSE, EDIT("{\"op\": \"set\", \"path\": \"logits\", \"tensor\": {\"dtype\": \"F32\", \"shape\": [1, 1, 1, 1, 1, 1, 1], \"data\": [1]}}"),
     NNT_ERR_FORMAT, "request.json: edits[0].tensor.shape: 7 axes; a tensor has at most 6"},
    {AT_PARSE, EDIT("{\"op\": \"set\", \"path\": \"logits\", \"tensor\": {\"dtype\": \"F32\", \"shape\": [-1], \"data\": []}}"),
     NNT_ERR_INVALID_ARGUMENT, "request.json: edits[0].tensor.shape[0]: expected an integer in 0..9007199254740992, got -1"},
    {AT_PARSE, EDIT("{\"op\": \"set\", \"path\": \"logits\", \"tensor\": {\"dtype\": \"F32\", \"shape\": [4294967296, 4294967296], \"data\": []}}"),
     NNT_ERR_FORMAT, "request.json: edits[0].tensor.shape: [4294967296, 4294967296] holds more entries than a tensor can"},
    {AT_PARSE, EDIT("{\"op\": \"set\", \"path\": \"logits\", \"tensor\": {\"file\": \"missing.safetensors\"}}"), NNT_ERR_IO,
     "request.json: edits[0].tensor.file: "},
    {AT_PARSE, EDIT("{\"op\": \"set\", \"path\": \"logits\", \"tensor\": {\"file\": \"v.safetensors\", \"key\": \"w\"}}"), NNT_ERR_NOT_FOUND,
     "request.json: edits[0].tensor.key: no tensor 'w' in "},
    {AT_PARSE, EDIT("{\"op\": \"set\", \"path\": \"logits\", \"tensor\": {\"key\": \"w\"}}"), NNT_ERR_NOT_FOUND,
     "request.json: edits[0].tensor.key: no tensor 'w' in the attachment; it holds 'v'"},
    {AT_PARSE, EDIT("{\"op\": \"set\", \"path\": \"logits\", \"tensor\": {\"file\": \"prompt.txt\"}}"), NNT_ERR_FORMAT,
     "request.json: edits[0].tensor.file: "},
    /* the method's sections */
    {AT_PARSE, R1 "\"lens\": {}}", NNT_ERR_FORMAT, "request.json: lens: the section of \"lens\" requests; this one's method is \"trace\""},
    {AT_PARSE, R1 "\"method\": \"generate\"}", NNT_ERR_FORMAT, "request.json: generate: missing (a generate request needs it)"},
    {AT_PARSE, R1 "\"method\": \"generate\", \"generate\": {}}", NNT_ERR_FORMAT, "request.json: generate.max_new_tokens: missing"},
    {AT_PARSE, R1 "\"method\": \"generate\", \"generate\": {\"max_new_tokens\": 0}}", NNT_ERR_INVALID_ARGUMENT,
     "request.json: generate.max_new_tokens: expected an integer in 1..1000000, got 0"},
    {AT_PARSE, R1 "\"method\": \"generate\", \"generate\": {\"max_new_tokens\": 2, \"top_k\": 5}}", NNT_ERR_INVALID_ARGUMENT,
     "request.json: generate.top_k: top_k and top_p filter sampling: give a temperature > 0 too"},
    {AT_PARSE, R1 "\"method\": \"generate\", \"generate\": {\"max_new_tokens\": 2, \"temperature\": 1, \"top_p\": 0}}",
     NNT_ERR_INVALID_ARGUMENT, "request.json: generate.top_p: expected a number in (0, 1]"},
    {AT_PARSE, R1 "\"method\": \"generate\", \"generate\": {\"max_new_tokens\": 2, \"seed\": \"abc\"}}", NNT_ERR_INVALID_ARGUMENT,
     "request.json: generate.seed: expected an integer in 0..18446744073709551615"},
    {AT_PARSE, R1 "\"method\": \"generate\", \"generate\": {\"max_new_tokens\": 2, \"seed\": \"18446744073709551616\"}}",
     NNT_ERR_INVALID_ARGUMENT, "request.json: generate.seed: expected an integer in 0..18446744073709551615"},
    {AT_PARSE, R1 "\"method\": \"generate\", \"generate\": {\"max_new_tokens\": 2, \"seed\": 1e17}}", NNT_ERR_INVALID_ARGUMENT,
     "request.json: generate.seed: expected an integer in 0..9007199254740992 (2^53; a larger seed is written as a decimal string"},
    {AT_PARSE, R1 "\"method\": \"lens\", \"saves\": [\"logits\"]}", NNT_ERR_FORMAT, "request.json: saves: a lens saves every block's output itself"},
    {AT_PARSE, R1 "\"method\": \"lens\", \"lens\": {\"positions\": [0, \"generated\"]}}", NNT_ERR_INVALID_ARGUMENT,
     "request.json: lens.positions[1]: 'generated' names tokens after the prompt"},
    {AT_PARSE, R1 "\"method\": \"patch\", \"rows\": [], \"patch\": {}}", NNT_ERR_FORMAT, "request.json: rows: a patch request takes its prompts from patch.clean"},
    {AT_PARSE, R1 "\"method\": \"patch\", \"patch\": {\"clean\": {\"tokens\": [1]}, \"corrupt\": {\"tokens\": [2]}, \"metric\": \"kl\"}}",
     NNT_ERR_INVALID_ARGUMENT, "request.json: patch.metric: expected logit-diff:A,B"},
    {AT_PARSE, R1 "\"method\": \"patch\", \"patch\": {\"clean\": {\"tokens\": [1]}, \"metric\": \"prob:3\"}}", NNT_ERR_FORMAT,
     "request.json: patch.corrupt: missing"},
    {AT_PARSE, R1 "\"method\": \"patch\", \"patch\": {\"clean\": {\"tokens\": [1]}, \"corrupt\": {\"tokens\": [2]}, \"metric\": \"prob:3\", \"positions\": [0, \"generated\"]}}",
     NNT_ERR_INVALID_ARGUMENT, "request.json: patch.positions[1]: 'generated' names tokens after the prompt"},
    {AT_PARSE, R1 "\"method\": \"patch\", \"patch\": {\"clean\": {\"tokens\": [1]}, \"corrupt\": {\"tokens\": [2]}, \"metric\": \"prob:3\", \"batch\": 5000}}",
     NNT_ERR_INVALID_ARGUMENT, "request.json: patch.batch: expected an integer in 1..4096, got 5000"},
    /* against the model */
    {AT_APPLY, EDIT("{\"op\": \"zero\", \"path\": \"layers.1.mlp.expert_weight\"}"), NNT_ERR_PATH,
     "request.json: edits[0].path: path 'layers.1.mlp.expert_weight': "},
    {AT_APPLY, EDIT("{\"op\": \"zero\", \"path\": \"logits\"}, {\"op\": \"zero\", \"path\": \"layers.9.layer_output\"}"), NNT_ERR_INDEX,
     "request.json: edits[1].path: path 'layers.9.layer_output': block 9 is out of range; the model has 3 blocks"},
    {AT_APPLY, EDIT("{\"op\": \"zero\", \"path\": \"layers.0.layer_output[:, -1]\"}"), NNT_ERR_PATH,
     "request.json: edits[0].path: 'layers.0.layer_output[:, -1]': a [...] slice chooses what a save keeps"},
    {AT_APPLY, EDIT("{\"op\": \"zero\", \"path\": \"next_token_probs\"}"), NNT_ERR_READ_ONLY, "request.json: edits[0].path: 'next_token_probs': "},
    {AT_APPLY, EDIT("{\"op\": \"ablate_expert\", \"layer\": 3, \"expert\": 0}"), NNT_ERR_INDEX,
     "request.json: edits[0].layer: block 3 is out of range; the model has blocks 0..2"},
    {AT_APPLY, EDIT("{\"op\": \"ablate_expert\", \"layer\": 0, \"expert\": 8}"), NNT_ERR_INDEX,
     "request.json: edits[0].expert: expert 8 is out of range; the model has experts 0..7"},
    {AT_APPLY, EDIT("{\"op\": \"skip_layers\", \"start\": 0, \"end\": 3}"), NNT_ERR_INDEX, "request.json: edits[0].end: block 3 is out of range"},
    {AT_APPLY, EDIT("{\"op\": \"steer\", \"first\": 5, \"last\": 5, \"tensor\": {\"key\": \"v\"}}"), NNT_ERR_INDEX,
     "request.json: edits[0].first: block 5 is out of range"},
    {AT_APPLY, EDIT("{\"op\": \"steer\", \"first\": 0, \"tensor\": " INLINE64 "}"), NNT_ERR_SHAPE,
     "request.json: edits[0].tensor: steer: the vector is [3]; it must be [hidden_size] = [64]"},
    {AT_APPLY, EDIT("{\"op\": \"masked_fill\", \"path\": \"layers.0.mlp.expert_weights\", \"where\": \"layers.0.mlp.expert_indice\", \"equals\": 1, \"fill\": 0}"),
     NNT_ERR_PATH, "request.json: edits[0].where: path 'layers.0.mlp.expert_indice'"},
    {AT_APPLY, EDIT("{\"op\": \"masked_fill\", \"path\": \"layers.0.mlp.expert_weights\", \"where\": \"logits\", \"equals\": 1, \"fill\": 0}"),
     NNT_ERR_PATH, "request.json: edits[0].where: masked fill of 'layers.0.mlp.expert_weights' by 'logits'"},
    {AT_APPLY, EDIT("{\"op\": \"callback\", \"path\": \"logits\", \"callback\": 1}"), NNT_ERR_INVALID_ARGUMENT,
     "request.json: edits[0].callback: index 1, but 1 callbacks were given"},
    {AT_APPLY, R1 "\"saves\": [\"logits\", \"logit\"]}", NNT_ERR_PATH, "request.json: saves[1]: path 'logit'"},
    {AT_BATCH, R1 "\"rows\": [{\"tokens\": [1]}, {\"tokens\": [1, 2, 3, 300]}]}", NNT_ERR_INVALID_ARGUMENT,
     "request.json: rows[1].tokens[3]: token id 300 at row 1, position 3 is outside the model's vocabulary (vocab_size 256)"},
    {AT_BATCH, R1 "\"rows\": []}", NNT_ERR_INVALID_ARGUMENT, "request.json: rows: a trace request needs at least one row"},
    {AT_BATCH, R1 "\"rows\": [{\"text\": \"\"}], \"add_special\": false}", NNT_ERR_FORMAT, "request.json: rows[0].text: encodes to no token"},
    /* when the run starts */
    {AT_RUN, RUN("{\"op\": \"set\", \"path\": \"layers.0.layer_output\", \"tensor\": " INLINE64 "}"), NNT_ERR_SHAPE,
     "request.json: edits[0].tensor: set 'layers.0.layer_output': the tensor has shape [3], the value layers.0.layer_output is [3, 5, 64]"},
    {AT_RUN, RUN("{\"op\": \"zero\", \"path\": \"logits\"}, {\"op\": \"zero\", \"path\": \"layers.1.layer_output\", \"rows\": [0, 3]}"), NNT_ERR_INDEX,
     "request.json: edits[1].rows[1]: row 3 is outside the batch of this call (rows 0..2)"},
    {AT_RUN, RUN("{\"op\": \"zero\", \"path\": \"logits\"}, {\"op\": \"zero\", \"path\": \"logits\"}, {\"op\": \"steer\", \"first\": 0, \"tensor\": {\"key\": \"v\"}, \"positions\": [-7]}"),
     NNT_ERR_INDEX, "request.json: edits[2].positions[0]: position -7 names no token of this forward: its longest row has 5 tokens (positions 0..4, or -5..-1 from the row's end); it is before every row's first token"},
    {AT_RUN, RUN("{\"op\": \"add\", \"path\": \"layers.0.layer_output\", \"tensor\": {\"key\": \"v\"}, \"positions\": [1, 5]}"), NNT_ERR_INDEX,
     "request.json: edits[0].positions[1]: position 5 names no token of this forward: its longest row has 5 tokens (positions 0..4, or -5..-1 from the row's end); it is past every row's last token"},
    {AT_RUN, RUN("{\"op\": \"set\", \"path\": \"layers.0.self_attn.attention_probabilities\", \"tensor\": " INLINE64 ", \"positions\": [0]}"),
     NNT_ERR_SHAPE, "request.json: edits[0].positions: 'layers.0.self_attn.attention_probabilities': layers.0.self_attn.attention_probabilities is laid out [batch num_heads query key]"},
    {AT_RUN, RUN("{\"op\": \"set\", \"path\": \"layers.0.layer_output\", \"tensor\": " INLINE64 ", \"positions\": [0]}"), NNT_ERR_SHAPE,
     "request.json: edits[0].tensor: set 'layers.0.layer_output' at given positions: the tensor has shape [3]; it must be [64]"},
    {AT_RUN, RUN("{\"op\": \"add\", \"path\": \"layers.0.layer_output\", \"tensor\": " INLINE64 ", \"rows\": [1]}"), NNT_ERR_SHAPE,
     "request.json: edits[0].tensor: add 'layers.0.layer_output' at given rows: the tensor has shape [3]; it must be [5, 64]"},
    {AT_RUN, R1 ROWS3 "\"saves\": [\"logits\", \"logits[:, 9]\"]}", NNT_ERR_INDEX, "request.json: saves[1]: save 'logits[:, 9]': index 9 is outside axis 1"},
    {AT_RUN, RUN("{\"op\": \"save\", \"path\": \"logits[7]\"}"), NNT_ERR_INDEX, "request.json: edits[0].path: save 'logits[7]': index 7 is outside axis 0"},
    /* gradients and attribution */
    {AT_PARSE, R1 "\"grad\": {\"metric\": \"loss\"}}", NNT_ERR_FORMAT, "request.json: grad.paths: missing"},
    {AT_PARSE, R1 "\"grad\": {\"paths\": [\"logits\"]}}", NNT_ERR_FORMAT, "request.json: grad: needs a scalar to differentiate"},
    {AT_PARSE, R1 "\"grad\": {\"paths\": [\"logits\"], \"positions\": [-1]}}", NNT_ERR_FORMAT,
     "request.json: grad.positions: positions choose where the metric is read"},
    {AT_PARSE, R1 "\"grad\": {\"paths\": [\"logits\"], \"metric\": \"loss\", \"positions\": [\"all\"]}}", NNT_ERR_INVALID_ARGUMENT,
     "request.json: grad.positions[0]: expected a token position"},
    {AT_PARSE, R1 "\"method\": \"lens\", \"grad\": {\"paths\": [\"logits\"], \"metric\": \"loss\"}}", NNT_ERR_FORMAT,
     "request.json: grad: gradients are taken in trace requests"},
    {AT_PARSE, R1 "\"grad\": {\"paths\": [\"logits\"], \"cotangents\": [{\"path\": \"logits\"}]}}", NNT_ERR_FORMAT,
     "request.json: grad.cotangents[0].tensor: missing"},
    {AT_APPLY, R1 "\"grad\": {\"paths\": [\"layers.0.mlp.expert_indices\"], \"metric\": \"loss\"}}", NNT_ERR_UNSUPPORTED,
     "request.json: grad.paths[0]: grad 'layers.0.mlp.expert_indices': no gradient: expert_indices is the router's choice"},
    {AT_APPLY, R1 "\"grad\": {\"paths\": [\"logits\"], \"metric\": \"loss\", \"positions\": [-1]}}", NNT_ERR_INVALID_ARGUMENT,
     "request.json: grad.metric: metric 'loss' takes no positions"},
    {AT_APPLY, R1 "\"saves\": [\"logits\"], \"grad\": {\"paths\": [\"logits\"], \"metric\": \"kl\"}}", NNT_ERR_INVALID_ARGUMENT,
     "request.json: grad.metric: metric 'kl': expected logit-diff:A,B, prob:T, logprob:T"},
    {AT_RUN, R1 ROWS3 "\"grad\": {\"paths\": [\"logits\"], \"metric\": \"prob:7\", \"positions\": [5]}}", NNT_ERR_INVALID_ARGUMENT,
     "metric 'prob:7': no row has position 5"},
    {AT_PARSE, R1 "\"method\": \"attribute\"}", NNT_ERR_FORMAT, "request.json: attribute: missing"},
    {AT_PARSE, R1 "\"method\": \"attribute\", \"attribute\": {\"clean\": {\"tokens\": [1]}, \"corrupt\": {\"tokens\": [2]}, \"metric\": \"prob:1\", \"ig_steps\": 2000}}",
     NNT_ERR_INVALID_ARGUMENT, "request.json: attribute.ig_steps"},
    {AT_PARSE, R1 "\"method\": \"attribute\", \"attribute\": {\"clean\": {\"tokens\": [1]}, \"metric\": \"prob:1\"}}",
     NNT_ERR_FORMAT, "request.json: attribute.corrupt: missing"},
    {AT_PARSE, R1 "\"method\": \"attribute\", \"saves\": [\"logits\"], \"attribute\": {}}", NNT_ERR_FORMAT,
     "request.json: saves: an attribute request takes no saves or edits"},
    /* sparse autoencoders: "saes" and edits of their features */
    {AT_PARSE, EDIT("{\"op\": \"zero\", \"path\": \"layers.1.layer_output.sae.feature_acts\"}"), NNT_ERR_FORMAT,
     "request.json: edits[0].features: missing (the feature indices edited)"},
    {AT_PARSE, EDIT("{\"op\": \"scale\", \"path\": \"layers.1.layer_output.sae.feature_acts\", \"features\": [1]}"),
     NNT_ERR_FORMAT, "request.json: edits[0].factor: missing"},
    {AT_PARSE, EDIT("{\"op\": \"zero\", \"path\": \"layers.1.layer_output.sae.feature_acts\", \"features\": [1, 1]}"),
     NNT_ERR_INVALID_ARGUMENT, "request.json: edits[0].features[1]"},
    {AT_PARSE, EDIT("{\"op\": \"set\", \"path\": \"layers.1.layer_output.sae.feature_acts\", \"tensor\": " INLINE64 "}"),
     NNT_ERR_INVALID_ARGUMENT, "request.json: edits[0].op: an SAE's features take \"zero\", \"scale\" and \"masked_fill\""},
    {AT_PARSE, EDIT("{\"op\": \"masked_fill\", \"path\": \"layers.1.layer_output.sae.feature_acts\", \"features\": [1], "
                    "\"where\": \"logits\", \"fill\": 0}"),
     NNT_ERR_FORMAT, "request.json: edits[0].where: unknown field"},
    {AT_PARSE, EDIT("{\"op\": \"zero\", \"path\": \"logits\", \"features\": [1]}"), NNT_ERR_FORMAT,
     "request.json: edits[0].features: unknown field"},
    {AT_PARSE, EDIT("{\"op\": \"zero\", \"path\": \"layers.1.layer_output.sae.error\"}"), NNT_ERR_INVALID_ARGUMENT,
     "request.json: edits[0].path: an SAE's outputs are saved, and its features edited on"},
    {AT_PARSE, EDIT("{\"op\": \"save\", \"path\": \"layers.1.layer_output.sae.error\", \"rows\": [0]}"),
     NNT_ERR_INVALID_ARGUMENT, "request.json: edits[0].rows: an SAE's outputs are saved whole"},
    {AT_PARSE, R1 "\"saes\": [{\"path\": \"layers.1.layer_output\"}]}", NNT_ERR_FORMAT, "request.json: saes[0].dir: missing"},
    {AT_PARSE, R1 "\"saes\": {}}", NNT_ERR_FORMAT, "request.json: saes: expected a list"},
    {AT_PARSE, R1 "\"saes\": [{\"path\": \"layers.1.layer_output\", \"dir\": \"x\", \"k\": 3}]}", NNT_ERR_FORMAT,
     "request.json: saes[0].k: unknown field"},
    {AT_PARSE, R1 "\"saes\": [{\"path\": \"layers.1.layer_output\", \"dir\": \"no-sae-here\"}]}", NNT_ERR_IO,
     "request.json: saes[0].dir: "},
    {AT_PARSE, R1 "\"method\": \"patch\", \"saes\": [], \"patch\": {}}", NNT_ERR_FORMAT,
     "request.json: saes: a patch request takes no saves or edits"},
    {AT_APPLY, R1 "\"saes\": [{\"path\": \"layers.*.layer_output\", \"dir\": \"" NNT_TEST_FIXTURES "/sae/relu\"}]}",
     NNT_ERR_PATH, "request.json: saes[0].path: 'layers.*.layer_output': an SAE attaches to one block's value"},
    {AT_APPLY, R1 "\"saes\": [{\"path\": \"layers.1.layer_output\", \"dir\": \"" NNT_TEST_FIXTURES "/sae/relu\"}], "
                  "\"edits\": [{\"op\": \"zero\", \"path\": \"layers.1.layer_output.sae.feature_acts\", \"features\": [96]}]}",
     NNT_ERR_INDEX, "request.json: edits[0].features: SAE edit on 'layers.1.layer_output.sae.feature_acts': feature 96"},
    {AT_APPLY, EDIT("{\"op\": \"zero\", \"path\": \"layers.0.layer_output.sae.feature_acts\", \"features\": [1]}"),
     NNT_ERR_NOT_FOUND, "request.json: edits[0].path: SAE edit on 'layers.0.layer_output.sae.feature_acts': no SAE is attached"},
    {AT_APPLY, R1 "\"saves\": [\"layers.1.layer_output.sae.error\"]}", NNT_ERR_PATH,
     "request.json: saves[0]: save 'layers.1.layer_output.sae.error': no SAE is attached to that value"},
    {AT_RUN, R1 ROWS3 "\"saes\": [{\"path\": \"layers.1.self_attn.attention_probabilities\", \"dir\": \"" NNT_TEST_FIXTURES
                      "/sae/relu\"}]}",
     NNT_ERR_SHAPE, "request.json: saes[0].path: SAE on layers.1.self_attn.attention_probabilities: "},
    {AT_APPLY, R1 "\"saes\": [{\"path\": \"next_token_probs\", \"dir\": \"" NNT_TEST_FIXTURES "/sae/relu\"}]}",
     NNT_ERR_READ_ONLY, "request.json: saes[0].path: 'next_token_probs': "},
};
#define N_BAD ((int)(sizeof BAD / sizeof *BAD))

static nnt_status no_op_edit(void *user, const char *path, int layer, nnt_tensor *v, nnt_error *err)
{
    return NNT_OK;
}

/* Takes document d as far as the step that should refuse it; returns that step's status. */
static nnt_status try_doc(const bad_doc *d)
{
    nnt_request *r = NULL;
    nnt_status st = parse(d->json, &r);
    if (st != NNT_OK || d->at == AT_PARSE) {
        nnt_request_free(r);
        return st;
    }
    nnt_trace *t = NULL;
    T_OK(rt, nnt_trace_new(m, &t));
    nnt_request_callback cb[] = {{no_op_edit, NULL}};
    nnt_batch b = {0};
    st = d->at == AT_BATCH ? nnt_request_batch(r, m, &b) : nnt_request_apply(r, t, cb, 1);
    if (st == NNT_OK && d->at == AT_RUN) {
        T_OK(rt, nnt_request_batch(r, m, &b));
        st = nnt_trace_run(t, b.ids, b.mask, b.batch, b.seq);
    }
    if (st != NNT_OK && d->at == AT_APPLY) CU_ASSERT_EQUAL(nnt_trace_request_count(t), 0); /* nothing left behind */
    nnt_batch_free(&b);
    nnt_trace_free(t);
    nnt_request_free(r);
    return st;
}

static void test_malformed(void)
{
    CU_ASSERT(N_BAD >= 40);
    for (int i = 0; i < N_BAD; i++) {
        const bad_doc *d = &BAD[i];
        nnt_status st = try_doc(d);
        const char *msg = nnt_last_error(rt);
        if (st != d->status || !strstr(msg, d->needle))
            fprintf(stderr, "\n  bad document %d (%s): expected %s with\n    '%s'\n  got %s:\n    '%s'\n", i, d->json,
                    nnt_status_str(d->status), d->needle, nnt_status_str(st), msg);
        CU_ASSERT_EQUAL(st, d->status);
        CU_ASSERT_PTR_NOT_NULL(strstr(msg, d->needle));
    }
}

/* A key of the attachment in a request that came without one; a failed apply leaves the trace
 * as it was; deep nesting, size and count limits. */
static void test_limits(void)
{
    nnt_request *r = NULL;
    const char *keyed = EDIT("{\"op\": \"steer\", \"first\": 0, \"tensor\": {\"key\": \"v\"}}");
    T_FAILS(rt, parse_n(keyed, strlen(keyed), 0, &r), NNT_ERR_NOT_FOUND,
            "request.json: edits[0].tensor.key: 'v' names a tensor of the attachment, but the request came without one");
    /* 10000 '[': refused on the bytes, at the 65th level, before cJSON reads them */
    char *deep = malloc(10001);
    memset(deep, '[', 10000);
    T_FAILS(rt, parse_n(deep, 10000, 1, &r), NNT_ERR_FORMAT, "request.json: byte 64: arrays and objects nested deeper than 64 levels");
    free(deep);
    char nested[512];
    size_t k = (size_t)snprintf(nested, sizeof nested, "%s", R1 "\"saves\": ");
    for (int i = 0; i < 64; i++) nested[k++] = '[';
    nested[k] = '\0';
    T_FAILS(rt, parse_n(nested, k, 1, &r), NNT_ERR_FORMAT, "nested deeper than 64 levels"); /* 1 + 64 levels */
    /* over 256 MiB: refused by its length, the bytes never read (an untouched mapping) */
    size_t big = ((size_t)256 << 20) + 1;
    char *huge = mmap(NULL, big, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    CU_ASSERT_FATAL(huge != MAP_FAILED);
    T_FAILS(rt, parse_n(huge, big, 1, &r), NNT_ERR_FORMAT, "request.json: 268435457 bytes; a request document holds at most 268435456 (256 MiB)");
    munmap(huge, big);
    char path[1024];
    snprintf(path, sizeof path, "%s/huge.json", t_tmpdir());
    FILE *f = fopen(path, "w");
    CU_ASSERT_FATAL(f && ftruncate(fileno(f), (off_t)big) == 0); /* sparse: no disk is used */
    fclose(f);
    T_FAILS(rt, nnt_request_read(rt, path, &r), NNT_ERR_FORMAT, "huge.json: 268435457 bytes, more than the 268435456");
    unlink(path);
    /* 65537 rows, 65537 edits */
    for (int which = 0; which < 2; which++) {
        const char *item = which ? "{\"op\": \"zero\", \"path\": \"logits\"}," : "{\"tokens\": [1]},";
        size_t n = strlen(item), at = 0;
        char *doc = malloc(64 + 65537 * n);
        at += (size_t)sprintf(doc, "%s\"%s\": [", R1, which ? "edits" : "rows");
        for (int i = 0; i < 65537; i++, at += n) memcpy(doc + at, item, n);
        at += (size_t)sprintf(doc + at - 1, "]}") - 1;
        T_FAILS(rt, parse_n(doc, at, 1, &r), NNT_ERR_FORMAT, which ? "request.json: edits: 65537 entries; a request holds at most 65536"
                                                                  : "request.json: rows: 65537 entries; a request holds at most 65536");
        free(doc);
    }
    CU_ASSERT_PTR_NULL(r);
}

/* ---- edits restricted to rows and positions ---- */

static const int32_t R6[3][6] = {{235, 244, 202, 156, 148, 193}, {80, 192, 183, 124, 97, 63}, {169, 247, 160, 3, 95, 102}};

/* "{"tokens": [...]}" of R6[r]. */
static const char *row_json(int r, char *buf, size_t n)
{
    snprintf(buf, n, "{\"tokens\": [%d, %d, %d, %d, %d, %d]}", R6[r][0], R6[r][1], R6[r][2], R6[r][3], R6[r][4], R6[r][5]);
    return buf;
}

/* Runs a document (its rows as a batch) and returns the trace; callbacks as given. */
static nnt_trace *run_doc(const char *json, const nnt_request_callback *cbs, int n_cbs)
{
    nnt_request *r = NULL;
    nnt_status st = parse(json, &r);
    if (st != NNT_OK) fprintf(stderr, "\n  %s\n  %s\n", json, nnt_last_error(rt));
    CU_ASSERT_EQUAL_FATAL(st, NNT_OK);
    nnt_trace *t;
    nnt_batch b;
    T_OK(rt, nnt_trace_new(m, &t));
    T_OK(rt, nnt_request_apply(r, t, cbs, n_cbs));
    T_OK(rt, nnt_request_batch(r, m, &b));
    T_OK(rt, nnt_trace_run(t, b.ids, b.mask, b.batch, b.seq));
    nnt_batch_free(&b);
    nnt_request_free(r);
    return t;
}

/* A tensor of shape [d0, d1, d2] (ndim of them) with entries from a fixed formula. */
static nnt_tensor made_tensor(int ndim, int64_t d0, int64_t d1, int64_t d2, double seed)
{
    nnt_tensor x;
    int64_t shape[3] = {d0, d1, d2};
    CU_ASSERT_FATAL(nnt_tensor_alloc(&x, NNT_F32, ndim, shape) == NNT_OK);
    for (int64_t i = 0; i < nnt_tensor_numel(&x); i++) ((float *)x.data)[i] = (float)sin(seed + 0.37 * (double)i);
    return x;
}

/* rowset.safetensors: x [6, 64] (one row of layer_output), x1 [1, 6, 64] (the same as a whole
 * one-row value), y2 [2, 6, 64] (one per row of two) and y0, y1 [1, 6, 64] (its rows). */
static void write_row_tensors(void)
{
    nnt_tensor t[5] = {made_tensor(2, 6, 64, 0, 1.0), made_tensor(3, 1, 6, 64, 1.0), made_tensor(3, 2, 6, 64, 2.0),
                       made_tensor(3, 1, 6, 64, 2.0), made_tensor(3, 1, 6, 64, 2.0 + 0.37 * 384)};
    const char *keys[5] = {"x", "x1", "y2", "y0", "y1"};
    char path[1024];
    snprintf(path, sizeof path, "%s/rowset.safetensors", req_dir);
    T_OK(rt, nnt_safetensors_write(rt, path, 5, keys, t));
    for (int i = 0; i < 5; i++) nnt_tensor_free(&t[i]);
}

static int callback_rows; /* the leading extent of the last value cb_negate_rows saw */
static nnt_status cb_negate_rows(void *user, const char *path, int layer, nnt_tensor *v, nnt_error *err)
{
    callback_rows = (int)v->shape[0];
    return cb_negate(NULL, path, layer, v, err);
}

/* A batch of three rows where edit (with `restricted`, naming rows) applies gives each row what
 * a forward of that row alone gives: with `alone[r]` (an edit, or "" for none) on row r. */
static void check_rows_case(const char *restricted, const char *const alone[3], const char *what)
{
    nnt_request_callback cbs[] = {{cb_negate_rows, NULL}};
    char doc[8192], rows[3][128];
    snprintf(doc, sizeof doc, R1 "\"rows\": [%s, %s, %s], \"edits\": [%s], \"saves\": [\"layers.2.layer_output\", \"logits\"]}",
             row_json(0, rows[0], 128), row_json(1, rows[1], 128), row_json(2, rows[2], 128), restricted);
    nnt_trace *batched = run_doc(doc, cbs, 1);
    snprintf(doc, sizeof doc, R1 "\"rows\": [%s, %s, %s], \"saves\": [\"layers.2.layer_output\"]}", rows[0], rows[1], rows[2]);
    nnt_trace *plain = run_doc(doc, cbs, 1);
    int edited_rows = 0;
    for (int r = 0; r < 3; r++) {
        snprintf(doc, sizeof doc, R1 "\"rows\": [%s], \"edits\": [%s], \"saves\": [\"layers.2.layer_output\", \"logits\"]}",
                 rows[r], alone[r]);
        nnt_trace *single = run_doc(doc, cbs, 1);
        char w[160];
        snprintf(w, sizeof w, "%s, row %d", what, r);
        same_tensor(nnt_trace_get(single, "layers.2.layer_output"), nnt_trace_get(batched, "layers.2.layer_output"), r, w, "layers.2.layer_output");
        same_tensor(nnt_trace_get(single, "logits"), nnt_trace_get(batched, "logits"), r, w, "logits");
        /* the edit did change the rows it names (so the comparison above can fail) */
        const nnt_tensor *a = nnt_trace_get(batched, "layers.2.layer_output"), *b = nnt_trace_get(plain, "layers.2.layer_output");
        int64_t per = nnt_tensor_numel(a) / 3;
        double diff = 0;
        for (int64_t j = 0; j < per; j++) diff = fmax(diff, fabs(nnt_tensor_get_f64(a, r * per + j) - nnt_tensor_get_f64(b, r * per + j)));
        edited_rows += diff > 1e-3;
        CU_ASSERT_EQUAL(diff > 1e-3, alone[r][0] != '\0');
        nnt_trace_free(single);
    }
    CU_ASSERT(edited_rows > 0);
    nnt_trace_free(plain);
    nnt_trace_free(batched);
}

static void test_rows(void)
{
    write_row_tensors();
    /* the expert row 1 routes its first token to in block 1, for a masked fill that touches it */
    char doc[1024], rowbuf[128], fill[512], fill1[512];
    snprintf(doc, sizeof doc, R1 "\"rows\": [%s], \"saves\": [\"layers.1.mlp.expert_indices\"]}", row_json(1, rowbuf, 128));
    nnt_trace *probe = run_doc(doc, NULL, 0);
    int e = (int)nnt_tensor_get_f64(nnt_trace_get(probe, "layers.1.mlp.expert_indices"), 0);
    nnt_trace_free(probe);
    snprintf(fill1, sizeof fill1, "{\"op\": \"masked_fill\", \"path\": \"layers.1.mlp.expert_weights\", \"where\": "
             "\"layers.1.mlp.expert_indices\", \"equals\": %d, \"fill\": 0}", e);
    snprintf(fill, sizeof fill, "%.*s, \"rows\": [1]}", (int)strlen(fill1) - 1, fill1);
    const struct {
        const char *restricted, *alone;
    } one[] = {
        {"{\"op\": \"scale\", \"path\": \"layers.0.layer_output\", \"factor\": 0.5, \"rows\": [1]}",
         "{\"op\": \"scale\", \"path\": \"layers.0.layer_output\", \"factor\": 0.5}"},
        {"{\"op\": \"zero\", \"path\": \"layers.1.self_attn.attention_output\", \"rows\": [1]}",
         "{\"op\": \"zero\", \"path\": \"layers.1.self_attn.attention_output\"}"},
        {"{\"op\": \"add\", \"path\": \"layers.0.layer_output\", \"tensor\": {\"key\": \"v\"}, \"factor\": 3, \"rows\": [1]}",
         "{\"op\": \"add\", \"path\": \"layers.0.layer_output\", \"tensor\": {\"key\": \"v\"}, \"factor\": 3}"},
        {"{\"op\": \"set\", \"path\": \"layers.1.mlp.mlp_output\", \"tensor\": {\"file\": \"rowset.safetensors\", \"key\": \"x\"}, \"rows\": [1]}",
         "{\"op\": \"set\", \"path\": \"layers.1.mlp.mlp_output\", \"tensor\": {\"file\": \"rowset.safetensors\", \"key\": \"x1\"}}"},
        {"{\"op\": \"steer\", \"first\": 1, \"tensor\": {\"key\": \"v\"}, \"factor\": 2, \"positions\": [0, -1], \"rows\": [1]}",
         "{\"op\": \"steer\", \"first\": 1, \"tensor\": {\"key\": \"v\"}, \"factor\": 2, \"positions\": [0, -1]}"},
        {"{\"op\": \"callback\", \"path\": \"layers.1.mlp.mlp_output\", \"callback\": 0, \"rows\": [1]}",
         "{\"op\": \"callback\", \"path\": \"layers.1.mlp.mlp_output\", \"callback\": 0}"},
        {fill, fill1},
    };
    for (size_t i = 0; i < sizeof one / sizeof *one; i++) {
        const char *alone[3] = {"", one[i].alone, ""};
        char what[64];
        snprintf(what, sizeof what, "rows [1], case %zu", i);
        check_rows_case(one[i].restricted, alone, what);
        if (strstr(one[i].restricted, "callback")) CU_ASSERT_EQUAL(callback_rows, 1); /* the alone run saw its 1 row */
    }
    /* one tensor per row: rows [0, 2] of a set get entries 0 and 1 of y2 */
    const char *alone[3] = {"{\"op\": \"set\", \"path\": \"layers.1.mlp.mlp_output\", \"tensor\": {\"file\": \"rowset.safetensors\", \"key\": \"y0\"}}", "",
                            "{\"op\": \"set\", \"path\": \"layers.1.mlp.mlp_output\", \"tensor\": {\"file\": \"rowset.safetensors\", \"key\": \"y1\"}}"};
    check_rows_case("{\"op\": \"set\", \"path\": \"layers.1.mlp.mlp_output\", \"tensor\": {\"file\": \"rowset.safetensors\", \"key\": \"y2\"}, "
                    "\"rows\": [0, 2]}", alone, "rows [0, 2], one tensor each");
    /* a callback restricted to rows sees them only, [len(rows), ...] */
    char rows[3][128];
    snprintf(doc, sizeof doc, R1 "\"rows\": [%s, %s, %s], \"edits\": [{\"op\": \"callback\", \"path\": \"layers.0.layer_output\", "
             "\"callback\": 0, \"rows\": [2, 0]}]}", row_json(0, rows[0], 128), row_json(1, rows[1], 128), row_json(2, rows[2], 128));
    nnt_request_callback cbs[] = {{cb_negate_rows, NULL}};
    nnt_trace_free(run_doc(doc, cbs, 1));
    CU_ASSERT_EQUAL(callback_rows, 2);
    /* a save of rows keeps them, in the order given */
    snprintf(doc, sizeof doc, R1 "\"rows\": [%s, %s, %s], \"edits\": [{\"op\": \"save\", \"path\": \"layers.1.layer_output[:, -1]\", "
             "\"rows\": [2, 0]}], \"saves\": [\"layers.1.layer_output\"]}", rows[0], rows[1], rows[2]);
    nnt_trace *t = run_doc(doc, NULL, 0);
    const nnt_tensor *part = nnt_trace_get(t, "layers.1.layer_output"), *whole = nnt_trace_get(t, "layers.1.layer_output#1");
    CU_ASSERT_FATAL(part && whole && part->ndim == 2 && part->shape[0] == 2 && part->shape[1] == 64);
    for (int k = 0; k < 2; k++)
        for (int j = 0; j < 64; j++)
            CU_ASSERT_EQUAL(nnt_tensor_get_f64(part, k * 64 + j), nnt_tensor_get_f64(whole, ((k ? 0 : 2) * 6 + 5) * 64 + j));
    nnt_trace_free(t);
}

/* The patching sweep's own edit (cli/patch.c): row `row` of the value gets the clean run's value
 * at token `pos` (the rows unpadded, so a token's position is its index). */
typedef struct patch_cell {
    const nnt_tensor *clean; /* [1, seq, hidden] */
    int row, pos[2], n;
} patch_cell;
static nnt_status cb_patch(void *user, const char *path, int layer, nnt_tensor *v, nnt_error *err)
{
    const patch_cell *c = user;
    int64_t T = v->shape[1], H = v->shape[2];
    for (int k = 0; k < c->n; k++)
        memcpy((float *)v->data + ((int64_t)c->row * T + c->pos[k]) * H, (const float *)c->clean->data + c->pos[k] * H,
               (size_t)H * sizeof(float));
    return NNT_OK;
}

/* Activation patching as one batch of per-row, per-position sets: each row's logits equal the
 * corrupted prompt run alone with the clean value written in by the sweep's callback. */
static void test_patch_rows(void)
{
    char doc[4096], clean[128], corrupt[128];
    row_json(0, clean, sizeof clean);
    row_json(1, corrupt, sizeof corrupt);
    snprintf(doc, sizeof doc, R1 "\"rows\": [%s], \"saves\": [\"layers.1.layer_output\"]}", clean);
    nnt_trace *ct = run_doc(doc, NULL, 0);
    const nnt_tensor *cv = nnt_trace_get(ct, "layers.1.layer_output");
    CU_ASSERT_FATAL(cv && cv->shape[1] == 6 && cv->shape[2] == 64);
    /* the clean value at tokens 1 and 4, alone and as a [2, 64] pair */
    nnt_tensor p1 = {.dtype = NNT_F32, .ndim = 1, .shape = {64}, .data = (float *)cv->data + 64};
    nnt_tensor p4 = {.dtype = NNT_F32, .ndim = 1, .shape = {64}, .data = (float *)cv->data + 4 * 64};
    float pair[128];
    memcpy(pair, p1.data, sizeof pair / 2);
    memcpy(pair + 64, p4.data, sizeof pair / 2);
    nnt_tensor p14 = {.dtype = NNT_F32, .ndim = 2, .shape = {2, 64}, .data = pair};
    const char *keys[] = {"p1", "p4", "p14"};
    nnt_tensor ts[] = {p1, p4, p14};
    char path[1024];
    snprintf(path, sizeof path, "%s/patch.safetensors", req_dir);
    T_OK(rt, nnt_safetensors_write(rt, path, 3, keys, ts));
    /* row 0: token 1; row 1: tokens 1 and 4 (one entry each); row 2: token 4 named from the end */
    snprintf(doc, sizeof doc, R1 "\"rows\": [%s, %s, %s], \"edits\": ["
             "{\"op\": \"set\", \"path\": \"layers.1.layer_output\", \"tensor\": {\"file\": \"patch.safetensors\", \"key\": \"p1\"}, \"rows\": [0], \"positions\": [1]},"
             "{\"op\": \"set\", \"path\": \"layers.1.layer_output\", \"tensor\": {\"file\": \"patch.safetensors\", \"key\": \"p14\"}, \"rows\": [1], \"positions\": [1, 4]},"
             "{\"op\": \"set\", \"path\": \"layers.1.layer_output\", \"tensor\": {\"file\": \"patch.safetensors\", \"key\": \"p4\"}, \"rows\": [2], \"positions\": [-2]}],"
             "\"saves\": [\"logits[:, -1]\"]}", corrupt, corrupt, corrupt);
    nnt_trace *batched = run_doc(doc, NULL, 0);
    const patch_cell cells[3] = {{cv, 0, {1}, 1}, {cv, 0, {1, 4}, 2}, {cv, 0, {4}, 1}};
    nnt_trace *plain;
    T_OK(rt, nnt_trace_new(m, &plain));
    T_OK(rt, nnt_trace_save(plain, "logits[:, -1]"));
    T_OK(rt, nnt_trace_run(plain, R6[1], NULL, 1, 6));
    for (int r = 0; r < 3; r++) {
        nnt_trace *alone;
        T_OK(rt, nnt_trace_new(m, &alone));
        T_OK(rt, nnt_trace_edit(alone, "layers.1.layer_output", cb_patch, (void *)&cells[r]));
        T_OK(rt, nnt_trace_save(alone, "logits[:, -1]"));
        T_OK(rt, nnt_trace_run(alone, R6[1], NULL, 1, 6));
        char what[64];
        snprintf(what, sizeof what, "patched row %d", r);
        same_tensor(nnt_trace_get(alone, "logits"), nnt_trace_get(batched, "logits"), r, what, "logits");
        /* the patch moved the logits (the clean and corrupted prompts differ at those tokens) */
        double diff = 0;
        for (int j = 0; j < 256; j++)
            diff = fmax(diff, fabs(nnt_tensor_get_f64(nnt_trace_get(alone, "logits"), j) - nnt_tensor_get_f64(nnt_trace_get(plain, "logits"), j)));
        CU_ASSERT(diff > 1e-4);
        nnt_trace_free(alone);
    }
    nnt_trace_free(plain);
    nnt_trace_free(batched);
    nnt_trace_free(ct);
}

/* Tensors of every kind and dtype written back (attachment and inline) and parsed to equal
 * requests; inline values exact in their dtype; what the writer refuses. */
static void test_round_trip(void)
{
    const char *doc = R1 "\"rows\": [{\"file\": \"prompt.txt\"}, {\"text\": \"a\\nb \\u00e9\"}, {\"tokens\": [3, 4]}], \"add_special\": false, "
        "\"saves\": [\"layers.*.layer_output[:, -1]\"], \"edits\": ["
        "{\"op\": \"set\", \"path\": \"a\", \"tensor\": {\"dtype\": \"F32\", \"shape\": [2, 2], \"data\": [0.1, -2, 3.5e-8, 1e30]}},"
        "{\"op\": \"set\", \"path\": \"b\", \"tensor\": {\"dtype\": \"F16\", \"shape\": [2], \"data\": [0.1, -65504]}, \"positions\": [\"generated\", -3]},"
        "{\"op\": \"add\", \"path\": \"c\", \"tensor\": {\"dtype\": \"BF16\", \"shape\": [1], \"data\": [0.1]}, \"rows\": [2, 0]},"
        "{\"op\": \"add\", \"path\": \"d\", \"tensor\": {\"dtype\": \"F64\", \"shape\": [], \"data\": [0.1]}, \"factor\": -0.75},"
        "{\"op\": \"set\", \"path\": \"e\", \"tensor\": {\"dtype\": \"I32\", \"shape\": [3], \"data\": [-2147483648, 0, 2147483647]}},"
        "{\"op\": \"set\", \"path\": \"f\", \"tensor\": {\"dtype\": \"I64\", \"shape\": [2], \"data\": [9007199254740992, -9007199254740992]}},"
        "{\"op\": \"set\", \"path\": \"g\", \"tensor\": {\"dtype\": \"F32\", \"shape\": [0, 3], \"data\": []}},"
        "{\"op\": \"steer\", \"first\": 1, \"last\": 2, \"tensor\": {\"file\": \"v.safetensors\"}, \"positions\": [\"prompt\", 0]},"
        "{\"op\": \"add\", \"path\": \"h\", \"tensor\": {\"key\": \"v\"}},"
        "{\"op\": \"masked_fill\", \"path\": \"i\", \"where\": \"j\", \"equals\": -9007199254740992, \"fill\": 1e6},"
        "{\"op\": \"ablate_expert\", \"layer\": 2147483647, \"expert\": 0}, {\"op\": \"skip_layers\", \"start\": 0, \"end\": 2},"
        "{\"op\": \"callback\", \"path\": \"k\", \"callback\": 3, \"rows\": [1]}, {\"op\": \"zero\", \"path\": \"l\"},"
        /* doubles whose last bit a 15-digit printer loses, and a negative zero */
        "{\"op\": \"add\", \"path\": \"m\", \"factor\": 0.30000000000000004, "
        "\"tensor\": {\"dtype\": \"F64\", \"shape\": [3], \"data\": [0.30000000000000004, -0, 9007199254740991.5]}}]}";
    nnt_request *r = NULL;
    T_OK(rt, parse(doc, &r));
    check_round_trip(r, "every tensor kind");
    /* the nearest F16 and BF16 to 0.1 (0x2e66, 0x3dcd), hand-computed */
    CU_ASSERT_EQUAL(nnt_tensor_get_f64(&r->edits[1].tensor.t, 0), 0.0999755859375);
    CU_ASSERT_EQUAL(nnt_tensor_get_f64(&r->edits[2].tensor.t, 0), 0.10009765625);
    CU_ASSERT_EQUAL(nnt_tensor_get_f64(&r->edits[5].tensor.t, 0), 9007199254740992.0);
    CU_ASSERT_EQUAL(r->edits[7].n_positions, 2); /* a steer's own list is kept as given */
    char *json;
    size_t len;
    T_OK(rt, nnt_request_write(r, &json, &len, NULL, NULL));
    CU_ASSERT_PTR_NOT_NULL(strstr(json, "{\"text\":\"The people of the United States shall have a new birth of freedom.\\n\"}"));
    CU_ASSERT_PTR_NOT_NULL(strstr(json, "\"positions\":[\"generated\",-3]"));
    free(json);
    /* a different request is not equal */
    nnt_request *other = NULL;
    T_OK(rt, parse(EDIT("{\"op\": \"scale\", \"path\": \"logits\", \"factor\": 0.5}"), &other));
    nnt_request *other2 = NULL;
    T_OK(rt, parse(EDIT("{\"op\": \"scale\", \"path\": \"logits\", \"factor\": 0.25}"), &other2));
    CU_ASSERT(!nnt_request_equal(other, other2) && !nnt_request_equal(r, other) && nnt_request_equal(other, other));
    nnt_request_free(other);
    nnt_request_free(other2);
    nnt_request_free(r);
    /* a tensor JSON cannot write (NaN) goes in the attachment, not inline */
    float nan_data[2] = {1, NAN};
    nnt_tensor nan_t = {.dtype = NNT_F32, .ndim = 1, .shape = {2}, .data = nan_data};
    char path[1024];
    snprintf(path, sizeof path, "%s/nan.safetensors", req_dir);
    const char *key = "n";
    T_OK(rt, nnt_safetensors_write(rt, path, 1, &key, &nan_t));
    T_OK(rt, parse(EDIT("{\"op\": \"set\", \"path\": \"logits\", \"tensor\": {\"file\": \"nan.safetensors\"}}"), &r));
    CU_ASSERT_EQUAL(nnt_request_write(r, &json, &len, NULL, NULL), NNT_ERR_INVALID_ARGUMENT);
    CU_ASSERT_PTR_NULL(json);
    void *att;
    size_t att_len;
    T_OK(rt, nnt_request_write(r, &json, &len, &att, &att_len));
    nnt_request_source src = {.struct_size = sizeof src, .json = json, .json_len = len, .tensors = att, .tensors_len = att_len};
    nnt_request *back;
    T_OK(rt, nnt_request_parse(rt, &src, &back));
    CU_ASSERT(nnt_request_equal(r, back) && isnan(((float *)back->edits[0].tensor.t.data)[1]));
    nnt_request_free(back);
    nnt_request_free(r);
    free(json);
    free(att);
    /* a seed above 2^53 is written as a string, defaults written out */
    T_OK(rt, parse(R1 "\"method\": \"generate\", \"generate\": {\"max_new_tokens\": 1, \"seed\": \"18446744073709551615\"}}", &r));
    T_OK(rt, nnt_request_write(r, &json, &len, NULL, NULL));
    CU_ASSERT_STRING_EQUAL(json, "{\"nnt_request\":1,\"method\":\"generate\",\"add_special\":true,\"rows\":[],\"saves\":[],"
                                 "\"edits\":[],\"generate\":{\"max_new_tokens\":1,\"temperature\":0,\"top_k\":0,\"top_p\":1,"
                                 "\"seed\":\"18446744073709551615\",\"stop_ids\":[],\"ignore_eos\":false}}");
    free(json);
    nnt_request_free(r);
    CU_ASSERT_EQUAL(nnt_request_write(NULL, &json, &len, NULL, NULL), NNT_ERR_INVALID_ARGUMENT);
}

/* Patch positions: absent, ["all"] and a list holding "prompt" each mean every token, and each
 * round-trips (the writer gives every token back as ["all"]; a fuzzed document found the reader
 * keeping ["all"] as a one-word list that compared unequal to the absent field). */
static void test_patch_positions_round_trip(void)
{
#define PATCH_DOC(POS) R1 "\"method\": \"patch\", \"patch\": {\"clean\": {\"tokens\": [1, 2]}, " \
        "\"corrupt\": {\"tokens\": [1, 3]}, \"metric\": \"logit-diff:4,5\"" POS "}}"
    const char *docs[] = {PATCH_DOC(""), PATCH_DOC(", \"positions\": [\"all\"]"),
                          PATCH_DOC(", \"positions\": [\"prompt\", 1]"), PATCH_DOC(", \"positions\": [0, -1]")};
#undef PATCH_DOC
    nnt_request *r[4] = {0};
    for (int i = 0; i < 4; i++) {
        T_OK(rt, parse(docs[i], &r[i]));
        check_round_trip(r[i], docs[i]);
    }
    const nnt_request_patch_opts *p = nnt_request_patch(r[1]);
    CU_ASSERT(p && p->n_positions == 0);
    CU_ASSERT(nnt_request_equal(r[0], r[1]) && nnt_request_equal(r[0], r[2]) && !nnt_request_equal(r[0], r[3]));
    p = nnt_request_patch(r[3]);
    CU_ASSERT(p && p->n_positions == 2 && p->positions[0] == 0 && p->positions[1] == -1);
    for (int i = 0; i < 4; i++) nnt_request_free(r[i]);
}

/* SAEs: a request with "saes", feature edits and saves of an SAE's outputs round-trips, and runs
 * as the same requests made through the C API (nnt_trace_sae, nnt_trace_sae_edit), bit for bit. */
static void test_sae(void)
{
    const char *doc = R1 "\"rows\": [{\"tokens\": [235, 244, 202, 156, 148]}, {\"tokens\": [193, 80, 192, 183, 124]}], "
        "\"saves\": [\"layers.1.layer_output.sae.feature_acts\", \"layers.1.layer_output.sae.reconstruction\", \"logits\"], "
        "\"saes\": [{\"path\": \"layers.1.layer_output\", \"dir\": \"" NNT_TEST_FIXTURES "/sae/topk\"}], "
        "\"edits\": [{\"op\": \"save\", \"path\": \"layers.1.layer_output.sae.error\"},"
        "{\"op\": \"zero\", \"path\": \"layers.1.layer_output.sae.feature_acts\", \"features\": [4, 2]},"
        "{\"op\": \"scale\", \"path\": \"layers.1.layer_output.sae.feature_acts\", \"features\": [9], \"factor\": -1.5},"
        "{\"op\": \"masked_fill\", \"path\": \"layers.1.layer_output.sae.feature_acts\", \"features\": [95, 0], \"fill\": 0.25}]}";
    nnt_request *r = NULL;
    T_OK(rt, parse(doc, &r));
    check_round_trip(r, "saes and feature edits");
    nnt_batch b = {0};
    T_OK(rt, nnt_request_batch(r, m, &b));
    nnt_trace *got = NULL, *want = NULL;
    T_OK(rt, nnt_trace_new(m, &got));
    T_OK(rt, nnt_request_apply(r, got, NULL, 0));
    T_OK(rt, nnt_trace_run(got, b.ids, b.mask, b.batch, b.seq));
    nnt_sae *s = NULL;
    T_OK(rt, nnt_sae_load(rt, NNT_TEST_FIXTURES "/sae/topk", &s));
    T_OK(rt, nnt_trace_new(m, &want));
    T_OK(rt, nnt_trace_sae(want, "layers.1.layer_output", s));
    nnt_sae_free(s);
    const int zero[2] = {4, 2}, nine = 9, fill[2] = {95, 0};
    T_OK(rt, nnt_trace_save(want, "layers.1.layer_output.sae.error"));
    T_OK(rt, nnt_trace_sae_edit(want, "layers.1.layer_output.sae.feature_acts", NNT_SAE_EDIT_ZERO, zero, 2, 0));
    T_OK(rt, nnt_trace_sae_edit(want, "layers.1.layer_output.sae.feature_acts", NNT_SAE_EDIT_SCALE, &nine, 1, -1.5f));
    T_OK(rt, nnt_trace_sae_edit(want, "layers.1.layer_output.sae.feature_acts", NNT_SAE_EDIT_FILL, fill, 2, 0.25f));
    T_OK(rt, nnt_trace_save(want, "layers.1.layer_output.sae.feature_acts"));
    T_OK(rt, nnt_trace_save(want, "layers.1.layer_output.sae.reconstruction"));
    T_OK(rt, nnt_trace_save(want, "logits"));
    T_OK(rt, nnt_trace_run(want, b.ids, b.mask, b.batch, b.seq));
    CU_ASSERT_EQUAL(nnt_trace_result_count(got), 4);
    CU_ASSERT_EQUAL(nnt_trace_result_count(got), nnt_trace_result_count(want));
    for (int i = 0; i < nnt_trace_result_count(want); i++) {
        const char *key;
        const nnt_tensor *w, *g;
        T_OK(rt, nnt_trace_result(want, i, &key, &w));
        g = nnt_trace_get(got, key);
        CU_ASSERT_FATAL(g && w);
        CU_ASSERT(nnt_tensor_nbytes(g) == nnt_tensor_nbytes(w) && memcmp(g->data, w->data, nnt_tensor_nbytes(w)) == 0);
    }
    nnt_trace_free(got);
    nnt_trace_free(want);
    nnt_batch_free(&b);
    nnt_request_free(r);
}

/* Steer positions: absent and ["all"] are the same request (every token), and both round-trip (the
 * writer names a steer's positions always; fuzz_request found a steer without "positions" parsing
 * back unequal from its written ["all"]). */
static void test_steer_positions_round_trip(void)
{
#define STEER_DOC(POS) EDIT("{\"op\": \"steer\", \"first\": 0, \"last\": 1, \"tensor\": {\"key\": \"v\"}" POS "}")
    const char *docs[] = {STEER_DOC(""), STEER_DOC(", \"positions\": [\"all\"]"), STEER_DOC(", \"positions\": [0, -1]")};
#undef STEER_DOC
    nnt_request *r[3] = {0};
    for (int i = 0; i < 3; i++) {
        T_OK(rt, parse(docs[i], &r[i]));
        check_round_trip(r[i], docs[i]);
    }
    CU_ASSERT(nnt_request_equal(r[0], r[1]) && !nnt_request_equal(r[0], r[2]));
    for (int i = 0; i < 3; i++) nnt_request_free(r[i]);
}

/* Left padding by hand: rows {1, 2, 3}, {4}, {5, 6}. */
static void test_batch_from_rows(void)
{
    const int32_t a[] = {1, 2, 3}, b[] = {4}, c[] = {5, 6};
    const int32_t *rows[] = {a, b, c};
    const int lens[] = {3, 1, 2};
    nnt_batch out;
    nnt_error err = {0};
    CU_ASSERT_EQUAL_FATAL(nnt_batch_from_rows(rows, lens, 3, &out, &err), NNT_OK);
    const int32_t ids[] = {1, 2, 3, 0, 0, 4, 0, 5, 6}, mask[] = {1, 1, 1, 0, 0, 1, 0, 1, 1};
    CU_ASSERT(out.batch == 3 && out.seq == 3);
    CU_ASSERT(memcmp(out.ids, ids, sizeof ids) == 0 && memcmp(out.mask, mask, sizeof mask) == 0);
    CU_ASSERT(out.lens[0] == 3 && out.lens[1] == 1 && out.lens[2] == 2);
    nnt_batch_free(&out);
    const int bad[] = {3, 0, 2};
    CU_ASSERT_EQUAL(nnt_batch_from_rows(rows, bad, 3, &out, &err), NNT_ERR_INVALID_ARGUMENT);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "row 1 has no token"));
    CU_ASSERT_EQUAL(nnt_batch_from_rows(rows, lens, 0, &out, &err), NNT_ERR_INVALID_ARGUMENT);
    CU_ASSERT_PTR_NULL(out.ids);
}

/* Metric words, and their values on hand-computed logits. */
static void test_metric(void)
{
    nnt_metric mt;
    nnt_error err = {0};
    CU_ASSERT(nnt_metric_parse("logit-diff:3,5", &mt, &err) == NNT_OK && mt.kind == NNT_METRIC_LOGIT_DIFF && mt.a == 3 && mt.b == 5);
    CU_ASSERT(nnt_metric_parse("prob:2147483647", &mt, &err) == NNT_OK && mt.kind == NNT_METRIC_PROB && mt.a == 2147483647);
    const char *bad[] = {"logit-diff:3", "logit-diff:a,b", "prob:-1", "prob:2147483648", "prob:7 ", "kl", "", "prob:"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        CU_ASSERT_EQUAL(nnt_metric_parse(bad[i], &mt, &err), NNT_ERR_INVALID_ARGUMENT);
        CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "expected logit-diff:A,B"));
    }
    float x[6] = {1, 2, 3, 0.5f, -1, 2};
    nnt_tensor lg = {.dtype = NNT_F32, .ndim = 2, .shape = {2, 3}, .data = x};
    CU_ASSERT(nnt_metric_parse("logit-diff:2,0", &mt, NULL) == NNT_OK);
    CU_ASSERT_DOUBLE_EQUAL(nnt_metric_eval(&mt, &lg, 1), 1.5, 1e-12);
    CU_ASSERT(nnt_metric_parse("prob:1", &mt, NULL) == NNT_OK);
    CU_ASSERT_DOUBLE_EQUAL(nnt_metric_eval(&mt, &lg, 0), 0.24472847105479764, 1e-12); /* e^2 / (e + e^2 + e^3) */
}

/* nnt_request_read: messages name the file, relative files resolve against its folder. */
static void test_read(void)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/read.json", req_dir);
    const char *doc = R1 "\"rows\": [{\"file\": \"prompt.txt\"}], \"edits\": [{\"op\": \"steer\", \"first\": 0, \"tensor\": {\"file\": \"v.safetensors\"}}]}";
    CU_ASSERT_FATAL(t_write_file(path, doc) == 0);
    nnt_request *a = NULL, *b = NULL;
    T_OK(rt, nnt_request_read(rt, path, &a));
    T_OK(rt, parse(doc, &b));
    CU_ASSERT(nnt_request_equal(a, b));
    nnt_request_free(a);
    nnt_request_free(b);
    CU_ASSERT_FATAL(t_write_file(path, EDIT("{\"op\": \"zero\"}")) == 0);
    T_FAILS(rt, nnt_request_read(rt, path, &a), NNT_ERR_FORMAT, "read.json: edits[0].path: missing");
    CU_ASSERT_PTR_NULL(a);
    snprintf(path, sizeof path, "%s/absent.json", req_dir);
    T_FAILS(rt, nnt_request_read(rt, path, &a), NNT_ERR_IO, "absent.json: cannot open");
    T_FAILS(rt, nnt_request_read(rt, req_dir, &a), NNT_ERR_IO, "not a regular file");
}

/* A prompt file with bytes outside UTF-8 gives the ids the tokenizer gives those raw bytes (it
 * reads each maximal invalid run as U+FFFD, and so does the request), and a NUL is refused. */
static void test_prompt_bytes(void)
{
    static const char raw[] = "The \xff people \xe2\x82 of\xc0\xaf the.\n";
    char path[1024];
    snprintf(path, sizeof path, "%s/bytes.txt", req_dir);
    FILE *f = fopen(path, "wb");
    CU_ASSERT_FATAL(f && fwrite(raw, 1, sizeof raw - 1, f) == sizeof raw - 1 && fclose(f) == 0);
    nnt_request *r = NULL;
    T_OK(rt, parse(R1 "\"rows\": [{\"file\": \"bytes.txt\"}]}", &r));
    nnt_batch b;
    T_OK(rt, nnt_request_batch(r, m, &b));
    nnt_tokenizer *tok = NULL;
    CU_ASSERT_FATAL(nnt_tokenizer_load(model_dir, &tok) == NNT_OK);
    int32_t *ids = NULL;
    int64_t n = 0;
    CU_ASSERT_FATAL(nnt_tokenizer_encode(tok, raw, sizeof raw - 1, NNT_TOKENIZE_ADD_SPECIAL, &ids, &n) == NNT_OK);
    CU_ASSERT_FATAL(b.batch == 1 && b.lens[0] == n && n > 5);
    CU_ASSERT(memcmp(b.ids, ids, sizeof *ids * (size_t)n) == 0);
    free(ids);
    nnt_tokenizer_free(tok);
    nnt_batch_free(&b);
    nnt_request_free(r);
    f = fopen(path, "wb");
    CU_ASSERT_FATAL(f && fwrite("a\0b", 1, 3, f) == 3 && fclose(f) == 0);
    r = NULL;
    T_FAILS(rt, parse(R1 "\"rows\": [{\"file\": \"bytes.txt\"}]}", &r), NNT_ERR_FORMAT,
            "request.json: rows[0].file: bytes.txt: byte 1 is NUL");
    nnt_request_free(r);
}

/* A tokens file: its ids equal the same ids given inline (the requests are equal, and the written
 * document holds them inline), 70000 ids (more than other lists hold) read back whole, and bad
 * files are refused naming the file, the byte and the id's index. */
static void test_tokens_file(void)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/ids.txt", req_dir);
    CU_ASSERT_FATAL(t_write_file(path, " 3 17\n42\t5\r\n99\n") == 0);
    nnt_request *r = NULL, *inl = NULL;
    T_OK(rt, parse(R1 "\"rows\": [{\"tokens_file\": \"ids.txt\"}]}", &r));
    T_OK(rt, parse(R1 "\"rows\": [{\"tokens\": [3, 17, 42, 5, 99]}]}", &inl));
    CU_ASSERT(nnt_request_equal(r, inl));
    char *json;
    size_t len;
    T_OK(rt, nnt_request_write(r, &json, &len, NULL, NULL));
    CU_ASSERT_PTR_NOT_NULL(strstr(json, "{\"tokens\":[3,17,42,5,99]}"));
    free(json);
    nnt_request_free(r);
    nnt_request_free(inl);
    /* longer than a list of 65536 entries: the ids i % 200, all read, and a written copy parses */
    FILE *f = fopen(path, "w");
    CU_ASSERT_FATAL(f != NULL);
    for (int i = 0; i < 70000; i++) fprintf(f, "%d%s", i % 200, i % 10 == 9 ? "\n" : " ");
    CU_ASSERT_FATAL(fclose(f) == 0);
    r = NULL;
    T_OK(rt, parse(R1 "\"rows\": [{\"tokens_file\": \"ids.txt\"}]}", &r));
    CU_ASSERT_FATAL(r->n_rows == 1 && r->rows[0].n_tokens == 70000);
    int ok = 1;
    for (int i = 0; i < 70000; i++) ok &= r->rows[0].tokens[i] == i % 200;
    CU_ASSERT(ok);
    T_OK(rt, nnt_request_write(r, &json, &len, NULL, NULL));
    nnt_request *back = NULL;
    T_OK(rt, parse_n(json, len, 0, &back));
    CU_ASSERT(nnt_request_equal(r, back));
    free(json);
    nnt_request_free(back);
    nnt_request_free(r);
    static const struct {
        const char *text, *msg;
    } bad[] = {
        {"3 x17\n", "request.json: rows[0].tokens_file: ids.txt: byte 2 (id 1): 'x17' is not a token id"},
        {"3 17,42\n", "request.json: rows[0].tokens_file: ids.txt: byte 2 (id 1): '17,42' is not a token id"},
        {"-1\n", "request.json: rows[0].tokens_file: ids.txt: byte 0 (id 0): '-1' is not a token id"},
        {"5 2147483648\n", "request.json: rows[0].tokens_file: ids.txt: byte 2 (id 1): '2147483648' is not a token id"},
        {" \n\t", "request.json: rows[0].tokens_file: ids.txt: holds no token ids"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        CU_ASSERT_FATAL(t_write_file(path, bad[i].text) == 0);
        r = NULL;
        T_FAILS(rt, parse(R1 "\"rows\": [{\"tokens_file\": \"ids.txt\"}]}", &r), NNT_ERR_FORMAT, bad[i].msg);
        nnt_request_free(r);
    }
    r = NULL;
    T_FAILS(rt, parse(R1 "\"rows\": [{\"tokens_file\": \"no-such-ids.txt\"}]}", &r), NNT_ERR_IO,
            "no-such-ids.txt: cannot open: No such file or directory");
    nnt_request_free(r);
    r = NULL;
    T_FAILS(rt, parse(R1 "\"rows\": [{\"tokens_file\": \"ids.txt\", \"tokens\": [1]}]}", &r), NNT_ERR_FORMAT,
            "request.json: rows[0]: a row is {\"tokens\": [ids]}, {\"tokens_file\": \"ids.txt\"}");
    nnt_request_free(r);
}

/* NNT_REQUEST_NO_FILES: every field naming a file or folder refused, naming the field; the same
 * documents parse without the flag (those whose files exist), and a source of the size before
 * the flags field (an older caller) parses as before. */
static void test_no_files(void)
{
    static const struct {
        const char *json, *field;
    } named[] = {
        {R1 "\"rows\": [{\"file\": \"prompt.txt\"}]}", "request.json: rows[0].file: this request may not name files"},
        {R1 "\"rows\": [{\"tokens\": [1]}, {\"tokens_file\": \"ids.txt\"}]}",
         "request.json: rows[1].tokens_file: this request may not name files"},
        {R1 "\"rows\": [{\"tokens\": [1, 2]}], \"edits\": [{\"op\": \"add\", \"path\": \"layers.0.layer_output\", "
            "\"tensor\": {\"file\": \"v.safetensors\", \"key\": \"v\"}}]}",
         "request.json: edits[0].tensor.file: this request may not name files"},
        {R1 "\"rows\": [{\"tokens\": [1, 2]}], \"saes\": [{\"path\": \"layers.0.layer_output\", \"dir\": \".\"}]}",
         "request.json: saes[0].dir: this request may not name files"},
    };
    char path[1024];
    snprintf(path, sizeof path, "%s/ids.txt", req_dir);
    CU_ASSERT_FATAL(t_write_file(path, "3 17 42\n") == 0);
    for (size_t i = 0; i < sizeof named / sizeof *named; i++) {
        nnt_request_source src = {.struct_size = sizeof src, .json = named[i].json, .json_len = strlen(named[i].json),
                                  .base_dir = req_dir, .name = "request.json", .flags = NNT_REQUEST_NO_FILES};
        nnt_request *r = NULL;
        T_FAILS(rt, nnt_request_parse(rt, &src, &r), NNT_ERR_INVALID_ARGUMENT, named[i].field);
        CU_ASSERT(r == NULL);
        if (i < 3) { /* the files exist: without the flag they are read */
            src.flags = 0;
            T_OK(rt, nnt_request_parse(rt, &src, &r));
            nnt_request_free(r);
            r = NULL;
            src.struct_size = offsetof(nnt_request_source, flags); /* an older caller's source */
            src.flags = NNT_REQUEST_NO_FILES;                      /* beyond its size: not read */
            T_OK(rt, nnt_request_parse(rt, &src, &r));
            nnt_request_free(r);
        }
    }
    /* tokens, text and the attachment are what such a request uses */
    const char *ok = R1 "\"rows\": [{\"text\": \"hi\"}, {\"tokens\": [1]}], \"edits\": [{\"op\": \"add\", "
                        "\"path\": \"layers.0.layer_output\", \"tensor\": {\"key\": \"v\"}}]}";
    nnt_request_source src = {.struct_size = sizeof src, .json = ok, .json_len = strlen(ok), .name = "request.json",
                              .tensors = attach, .tensors_len = attach_len, .flags = NNT_REQUEST_NO_FILES};
    nnt_request *r = NULL;
    T_OK(rt, nnt_request_parse(rt, &src, &r));
    nnt_request_free(r);
}

/* nnt_request_run_shared: three requests with edits of every reach (a whole-value scale, an add
 * at one row and position, a zero) and saves (a repeated path, a slice, a wildcard, a save entry
 * with rows) in one forward; each request's results equal its own run (keys in order, values
 * within float32 rounding), which they cannot if one request's edit reaches another's rows. Then
 * what cannot share is refused. */
static void test_shared(void)
{
    char rows[4][128];
    for (int r = 0; r < 3; r++) row_json(r, rows[r], sizeof rows[r]);
    snprintf(rows[3], sizeof rows[3], "{\"tokens\": [11, 12, 13, 14, 15, 16]}");
    char docs[3][2048];
    snprintf(docs[0], sizeof docs[0], R1 "\"rows\": [%s], \"edits\": [{\"op\": \"scale\", \"path\": "
             "\"layers.0.layer_output\", \"factor\": 0.5}], \"saves\": [\"layers.2.layer_output\", \"logits[:, -1]\", "
             "\"layers.2.layer_output\"]}", rows[0]);
    snprintf(docs[1], sizeof docs[1], R1 "\"rows\": [%s, %s], \"edits\": [{\"op\": \"add\", \"path\": "
             "\"layers.1.layer_output\", \"tensor\": {\"key\": \"v\"}, \"factor\": 2, \"positions\": [2], \"rows\": [1]}, "
             "{\"op\": \"save\", \"path\": \"layers.2.layer_output\", \"rows\": [0]}], \"saves\": "
             "[\"layers.*.mlp.expert_indices\", \"layers.2.layer_output\"]}", rows[1], rows[2]);
    snprintf(docs[2], sizeof docs[2], R1 "\"rows\": [%s], \"edits\": [{\"op\": \"zero\", \"path\": "
             "\"layers.1.self_attn.attention_output\"}], \"saves\": [\"layers.2.layer_output\", \"logits\"]}", rows[3]);
    nnt_request *reqs[3] = {NULL, NULL, NULL};
    for (int j = 0; j < 3; j++) T_OK(rt, parse(docs[j], &reqs[j]));
    for (int j = 0; j < 3; j++) CU_ASSERT(nnt_request_shareable(reqs[j]));
    nnt_result *out[3] = {NULL, NULL, NULL};
    T_OK(rt, nnt_request_run_shared(m, (const nnt_request *const *)reqs, 3, out));
    for (int j = 0; j < 3; j++) {
        nnt_trace *alone = run_doc(docs[j], NULL, 0);
        char what[64];
        snprintf(what, sizeof what, "shared forward, request %d", j);
        CU_ASSERT_FATAL(out[j] != NULL);
        same_results(nnt_result_trace(out[j]), alone, what, NULL, -1);
        CU_ASSERT_EQUAL(nnt_result_batch(out[j])->batch, j == 1 ? 2 : 1);
        /* the keys of a request's own run: its second save of a value is "#1", whatever the others saved */
        const nnt_trace *got = nnt_result_trace(out[j]);
        CU_ASSERT((nnt_trace_get(got, "layers.2.layer_output#1") != NULL) == (j < 2));
        CU_ASSERT(nnt_trace_get(got, "layers.2.layer_output#2") == NULL);
        nnt_trace_free(alone);
        nnt_result_free(out[j]);
    }
    for (int j = 0; j < 3; j++) nnt_request_free(reqs[j]);

    /* a row of another request, what acts on every row, other lengths: refused, nothing returned */
    static const struct {
        const char *second, *msg;
        nnt_status st;
    } bad[] = {
        {"\"edits\": [{\"op\": \"zero\", \"path\": \"layers.0.layer_output\", \"rows\": [1]}]}",
         "edits[0].rows[0]: row 1 is not in this request's batch of 1 rows", NNT_ERR_INDEX},
        {"\"edits\": [{\"op\": \"skip_layers\", \"start\": 0, \"end\": 1}]}", "request 1 cannot share one",
         NNT_ERR_INVALID_ARGUMENT},
        {"\"saves\": [\"logits\"], \"grad\": {\"paths\": [\"layers.0.layer_output\"], \"metric\": \"prob:3\"}}",
         "request 1 cannot share one", NNT_ERR_INVALID_ARGUMENT},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad + 1; i++) {
        char two[1024];
        if (i < sizeof bad / sizeof *bad)
            snprintf(two, sizeof two, R1 "\"rows\": [%s], %s", rows[1], bad[i].second);
        else /* five tokens against six */
            snprintf(two, sizeof two, R1 "\"rows\": [{\"tokens\": [1, 2, 3, 4, 5]}], \"saves\": [\"logits\"]}");
        nnt_request *pair[2] = {NULL, NULL};
        T_OK(rt, parse(docs[0], &pair[0]));
        T_OK(rt, parse(two, &pair[1]));
        nnt_result *res[2] = {(nnt_result *)1, (nnt_result *)1};
        if (i < sizeof bad / sizeof *bad)
            T_FAILS(rt, nnt_request_run_shared(m, (const nnt_request *const *)pair, 2, res), bad[i].st, bad[i].msg);
        else
            T_FAILS(rt, nnt_request_run_shared(m, (const nnt_request *const *)pair, 2, res), NNT_ERR_INVALID_ARGUMENT,
                    "share a forward only at one length");
        CU_ASSERT(res[0] == NULL && res[1] == NULL);
        nnt_request_free(pair[0]);
        nnt_request_free(pair[1]);
    }
}

/* Greedy generations sharing one run: each request's tokens equal its own run's, its values
 * (every step's) too within float32 rounding; what cannot share is refused. */
static void test_shared_generation(void)
{
    static const char *const docs[3] = {
        R1 "\"method\": \"generate\", \"rows\": [{\"tokens\": [3, 9, 27, 81]}], \"generate\": {\"max_new_tokens\": 4, "
           "\"ignore_eos\": true}, \"edits\": [{\"op\": \"scale\", \"path\": \"layers.0.layer_output\", \"factor\": 0.5}], "
           "\"saves\": [\"logits[:, -1]\"]}",
        R1 "\"method\": \"generate\", \"rows\": [{\"tokens\": [5, 6, 7, 8]}, {\"tokens\": [40, 41, 42, 43]}], \"generate\": "
           "{\"max_new_tokens\": 4, \"ignore_eos\": true}, \"edits\": [{\"op\": \"zero\", \"path\": "
           "\"layers.1.self_attn.attention_output\", \"rows\": [1]}], \"saves\": [\"layers.1.mlp.expert_indices\"]}",
        R1 "\"method\": \"generate\", \"rows\": [{\"tokens\": [100, 2, 30, 4]}], \"generate\": {\"max_new_tokens\": 4, "
           "\"ignore_eos\": true}}",
    };
    nnt_request *reqs[3] = {NULL, NULL, NULL};
    for (int j = 0; j < 3; j++) T_OK(rt, parse(docs[j], &reqs[j]));
    for (int j = 0; j < 3; j++) CU_ASSERT(nnt_request_shareable(reqs[j]) && nnt_request_share_compatible(reqs[0], reqs[j]));
    nnt_result *out[3] = {NULL, NULL, NULL};
    T_OK(rt, nnt_request_run_shared(m, (const nnt_request *const *)reqs, 3, out));
    for (int j = 0; j < 3; j++) {
        nnt_result *alone = NULL;
        T_OK(rt, nnt_request_run(m, reqs[j], NULL, &alone));
        CU_ASSERT_FATAL(out[j] != NULL && alone != NULL);
        int n1 = 0, n2 = 0;
        const int32_t *got = nnt_result_tokens(out[j], &n1, NULL, NULL), *want = nnt_result_tokens(alone, &n2, NULL, NULL);
        int rows = nnt_result_batch(alone)->batch;
        CU_ASSERT(got && want && n1 == 4 && n2 == 4 && nnt_result_batch(out[j])->batch == rows);
        if (got && want) CU_ASSERT(memcmp(got, want, sizeof *got * (size_t)rows * 4) == 0);
        char what[64];
        snprintf(what, sizeof what, "shared generation, request %d", j);
        same_results(nnt_result_trace(out[j]), nnt_result_trace(alone), what, NULL, -1);
        CU_ASSERT_EQUAL(nnt_result_method(out[j]), NNT_METHOD_GENERATE);
        nnt_result_free(alone);
        nnt_result_free(out[j]);
    }
    for (int j = 0; j < 3; j++) nnt_request_free(reqs[j]);

    static const struct {
        const char *doc, *msg;
        int shareable;
    } bad[] = {
        {R1 "\"method\": \"generate\", \"rows\": [{\"tokens\": [1, 2, 3, 4]}], \"generate\": {\"max_new_tokens\": 5, "
            "\"ignore_eos\": true}}", "cannot share one with request 0", 1},
        {R1 "\"method\": \"generate\", \"rows\": [{\"tokens\": [1, 2, 3, 4]}], \"generate\": {\"max_new_tokens\": 4, "
            "\"ignore_eos\": true, \"temperature\": 0.7}}", "request 1 cannot share one", 0},
        {R1 "\"method\": \"generate\", \"rows\": [{\"tokens\": [1, 2, 3, 4]}], \"generate\": {\"max_new_tokens\": 4}, "
            "\"saves\": [\"logits\"]}", "request 1 cannot share one", 0},
        {R1 "\"rows\": [{\"tokens\": [1, 2, 3, 4]}], \"saves\": [\"logits\"]}", "cannot share one with request 0", 1},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        nnt_request *pair[2] = {NULL, NULL};
        T_OK(rt, parse(docs[0], &pair[0]));
        T_OK(rt, parse(bad[i].doc, &pair[1]));
        CU_ASSERT_EQUAL(nnt_request_shareable(pair[1]), bad[i].shareable);
        CU_ASSERT(!nnt_request_share_compatible(pair[0], pair[1]));
        nnt_result *res[2] = {(nnt_result *)1, (nnt_result *)1};
        T_FAILS(rt, nnt_request_run_shared(m, (const nnt_request *const *)pair, 2, res), NNT_ERR_INVALID_ARGUMENT,
                bad[i].msg);
        CU_ASSERT(res[0] == NULL && res[1] == NULL);
        nnt_request_free(pair[0]);
        nnt_request_free(pair[1]);
    }
}

int register_tests(void)
{
    CU_pSuite s = CU_add_suite("request", setup, teardown);
    if (!s) return -1;
    if (!CU_add_test(s, "docs/requests.md examples == the C API", test_examples) ||
        !CU_add_test(s, "malformed documents name their field", test_malformed) ||
        !CU_add_test(s, "limits: nesting, size, counts, the attachment", test_limits) ||
        !CU_add_test(s, "greedy generations sharing one run == each alone", test_shared_generation) ||
        !CU_add_test(s, "per-row edits in one batch == single-row forwards", test_rows) ||
        !CU_add_test(s, "a set at (row, position) == the patching sweep's edit", test_patch_rows) ||
        !CU_add_test(s, "write then parse: equal requests, every tensor kind", test_round_trip) ||
        !CU_add_test(s, "patch positions: absent, all and prompt are every token, round trip", test_patch_positions_round_trip) ||
        !CU_add_test(s, "steer positions: absent and all are every token, round trip", test_steer_positions_round_trip) ||
        !CU_add_test(s, "saes and SAE feature edits: round trip, and the C API's forward", test_sae) ||
        !CU_add_test(s, "nnt_batch_from_rows pads on the left", test_batch_from_rows) ||
        !CU_add_test(s, "metrics: words and values", test_metric) ||
        !CU_add_test(s, "nnt_request_read", test_read) ||
        !CU_add_test(s, "prompt files: bytes outside UTF-8 as the tokenizer reads them", test_prompt_bytes) ||
        !CU_add_test(s, "tokens files: ids as inline ones, any count up to 2^22, bad bytes named", test_tokens_file) ||
        !CU_add_test(s, "NNT_REQUEST_NO_FILES: fields naming files refused, older sources read", test_no_files) ||
        !CU_add_test(s, "requests sharing a forward == each run alone; what cannot share refused", test_shared))
        return -1;
    return 0;
}
