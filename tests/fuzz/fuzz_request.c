/* fuzz_request.c - libFuzzer harness for the request format (core/request/, docs/requests.md):
 * nnt_request_parse on arbitrary bytes, and for a document it accepts, the written form parsed
 * back (with the attachment, and inline) to an equal request, then nnt_request_apply and
 * nnt_request_batch on the example MiniMax-M2 model and, for a small batch, the run itself
 * (nnt_trace_run; a generation of at most two tokens).
 *
 * The input is the document, optionally followed by "\n#nnt-fuzz-part#\n" and the bytes of the
 * attachment (nnt_request_source.tensors). The document's folder is the harness's own, which
 * holds v.safetensors (the steering fixture: one [64] F32 tensor "v"), prompt.txt and sae (a
 * SAELens folder: a TopK SAE of d_in 64), so documents can name files that exist. Every refusal
 * must carry a message naming the document. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/request/request_internal.h"
#include "fuzz_common.h"

#define MAX_TOKENS 256 /* batch x seq the harness runs; larger batches are applied and built only */

static nnt_runtime *rt;
static nnt_model *model;

static void unload(void)
{
    nnt_model_free(model);
    nnt_runtime_close(rt);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    rt = fuzz_runtime_open();
    atexit(unload);
    if (nnt_model_load(rt, NNT_FUZZ_SOURCE_DIR "/examples/tiny-minimax-m2", &model) != NNT_OK) {
        fprintf(stderr, "nnt fuzz: model: %s\n", nnt_last_error(rt));
        abort();
    }
    fuzz_link("v.safetensors", NNT_FUZZ_SOURCE_DIR "/tests/fixtures/steering/v.safetensors");
    fuzz_link("prompt.txt", NNT_FUZZ_SOURCE_DIR "/examples/tiny-minimax-m2/prompt_text.txt");
    fuzz_link("sae", NNT_FUZZ_SOURCE_DIR "/tests/fixtures/sae/topk"); /* an SAELens folder for "saes" */
    return 0;
}

/* A failure must say why, naming the document. */
static void refused(nnt_status st, const char *what)
{
    const char *msg = nnt_last_error(rt);
    fuzz_note(what, msg);
    FUZZ_CHECK(msg[0], "%s failed (%s) without a message", what, nnt_status_str(st));
}

static nnt_status edit_noop(void *user, const char *path, int layer, nnt_tensor *v, nnt_error *err)
{
    (void)user, (void)path, (void)layer, (void)err;
    if (v->dtype == NNT_F32 && nnt_tensor_numel(v) > 0) ((float *)v->data)[0] += 1.0f;
    return NNT_OK;
}

/* write(r) parses back to a request equal to r (tensors: with the attachment, else inline). */
static void round_trip(const nnt_request *r, int attach)
{
    char *json = NULL;
    size_t len = 0, tlen = 0;
    void *tensors = NULL;
    nnt_status st = nnt_request_write(r, &json, &len, attach ? &tensors : NULL, &tlen);
    /* inline, a non-finite tensor entry cannot be written; nothing else may fail */
    FUZZ_CHECK(st == NNT_OK || (!attach && st == NNT_ERR_INVALID_ARGUMENT), "write: %s", nnt_status_str(st));
    if (st != NNT_OK) return;
    nnt_request_source src = {.struct_size = sizeof src, .json = json, .json_len = len, .tensors = tensors,
                              .tensors_len = tlen, .name = "written.json"};
    nnt_request *back = NULL;
    st = nnt_request_parse(rt, &src, &back);
    FUZZ_CHECK(st == NNT_OK, "the written form does not parse: %s\n%s", nnt_last_error(rt), json);
    FUZZ_CHECK(nnt_request_equal(r, back), "the written form parses to another request:\n%s", json);
    nnt_request_free(back);
    free(json);
    free(tensors);
}

/* Applies r to a trace, makes its batch and, when small, runs it. */
static void apply_and_run(const nnt_request *r)
{
    nnt_trace *t = NULL;
    if (nnt_trace_new(model, &t) != NNT_OK) abort();
    nnt_request_callback cbs[] = {{edit_noop, NULL}};
    nnt_status st = nnt_request_apply(r, t, cbs, 1);
    if (st != NNT_OK) {
        refused(st, "apply");
        FUZZ_CHECK(nnt_trace_request_count(t) == 0, "a failed apply left %d requests", nnt_trace_request_count(t));
    }
    nnt_batch b = {0};
    nnt_status bs = st == NNT_OK ? nnt_request_batch(r, model, &b) : st;
    if (st == NNT_OK && bs != NNT_OK) refused(bs, "batch");
    nnt_method method = nnt_request_method(r);
    if (bs == NNT_OK && (int64_t)b.batch * b.seq <= MAX_TOKENS && method != NNT_METHOD_PATCH) {
        if (method == NNT_METHOD_GENERATE) {
            nnt_generate_opts o = *nnt_request_generate_opts(r, NULL);
            o.max_new_tokens = o.max_new_tokens < 2 ? o.max_new_tokens : 2;
            int32_t *out = malloc(sizeof(int32_t) * (size_t)b.batch * 2);
            if (!out) abort();
            st = nnt_generate(model, t, b.ids, b.mask, b.batch, b.seq, &o, out);
            free(out);
        } else {
            st = nnt_trace_run(t, b.ids, b.mask, b.batch, b.seq);
        }
        if (st != NNT_OK) refused(st, "run");
        else fuzz_note("ran", "ok");
    }
    nnt_batch_free(&b);
    nnt_trace_free(t);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const uint8_t *doc, *att;
    size_t doc_n, att_n;
    int has_att = fuzz_split(data, size, "\n#nnt-fuzz-part#\n", &doc, &doc_n, &att, &att_n);
    nnt_request_source src = {.struct_size = sizeof src, .json = (const char *)doc, .json_len = doc_n,
                              .tensors = has_att ? att : NULL, .tensors_len = att_n, .base_dir = fuzz_dir(),
                              .name = "fuzz.json"};
    nnt_request *r = NULL;
    nnt_status st = nnt_request_parse(rt, &src, &r);
    if (st != NNT_OK) {
        refused(st, "parse");
        FUZZ_CHECK(strncmp(nnt_last_error(rt), "fuzz.json: ", 11) == 0, "the message does not name the document: %s",
                   nnt_last_error(rt));
        FUZZ_CHECK(r == NULL, "a failed parse returned a request");
        return 0;
    }
    round_trip(r, 1);
    round_trip(r, 0);
    apply_and_run(r);
    nnt_request_free(r);
    return 0;
}
