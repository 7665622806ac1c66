/* fuzz_path.c - libFuzzer harness for value paths (core/values/path.c and the request and result
 * look-ups of core/trace/trace.c): "[model.][layers.N.|layers[N].][host.]value", "layers.*." and the
 * "@k" suffix of repeated results, as --save, --zero, ... take them.
 *
 * At start-up three models are loaded on the build tree's plugins: the example MiniMax-M2,
 * Kimi-Linear (linear_attn values, a state emitted once per token: results named path@k) and
 * DeepSeek-V4 (hyper-connection values), and on each a trace is run once that saves a few
 * values, so that result look-ups meet real names. The input's first byte picks the model, the
 * rest is the path. A path that parses must come back the same from its canonical spelling;
 * every refusal must say why. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/internal.h"
#include "fuzz_common.h"

#define N_MODELS 3
static const char *const MODEL_DIRS[N_MODELS] = {
    NNT_FUZZ_SOURCE_DIR "/examples/tiny-minimax-m2",
    NNT_FUZZ_SOURCE_DIR "/tests/fixtures/kimi_linear/fp32",
    NNT_FUZZ_SOURCE_DIR "/tests/fixtures/deepseek_v4/fp32",
};
/* what the start-up trace saves on every model (a path a family does not serve is skipped) */
static const char *const SAVED[] = {"logits", "layers.*.layer_output", "layers.*.mlp.expert_weights",
                                    "layers.0.linear_attn.state", "layers.1.attention_post",
                                    "layers.-1.self_attn.attention_probabilities"};

typedef struct loaded {
    nnt_runtime *rt;
    nnt_model *m[N_MODELS];
    nnt_trace *ran[N_MODELS]; /* a trace with results */
} loaded;
static loaded L;

static void unload(void)
{
    for (int i = 0; i < N_MODELS; i++) {
        nnt_trace_free(L.ran[i]);
        nnt_model_free(L.m[i]);
    }
    nnt_runtime_close(L.rt);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    L.rt = fuzz_runtime_open();
    atexit(unload);
    const int32_t ids[4] = {1, 7, 42, 3}, mask[4] = {1, 1, 1, 1};
    for (int i = 0; i < N_MODELS; i++) {
        if (nnt_model_load(L.rt, MODEL_DIRS[i], &L.m[i]) != NNT_OK || nnt_trace_new(L.m[i], &L.ran[i]) != NNT_OK) {
            fprintf(stderr, "nnt fuzz: %s: %s\n", MODEL_DIRS[i], nnt_last_error(L.rt));
            abort();
        }
        for (size_t k = 0; k < sizeof SAVED / sizeof *SAVED; k++) nnt_trace_save(L.ran[i], SAVED[k]);
        if (nnt_trace_run(L.ran[i], ids, mask, 1, 4) != NNT_OK) {
            fprintf(stderr, "nnt fuzz: %s: run: %s\n", MODEL_DIRS[i], nnt_last_error(L.rt));
            abort();
        }
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1) return 0;
    nnt_model *m = L.m[data[0] % N_MODELS];
    nnt_trace *ran = L.ran[data[0] % N_MODELS];
    char *text = fuzz_cstr(data + 1, size - 1);

    nnt_error err = {0};
    nnt_path p;
    /* with and without a model: the grammar alone, then the model's names and blocks */
    if (nnt_path_parse(NULL, text, &p, &err) != NNT_OK) FUZZ_CHECK(err.msg[0], "a refusal without a message");
    err.msg[0] = '\0';
    nnt_status parsed = nnt_path_parse(m, text, &p, &err);
    fuzz_note(parsed == NNT_OK ? "parsed" : "refused", parsed == NNT_OK ? text : err.msg);
    if (parsed == NNT_OK) {
        char canon[256];
        nnt_path_format(m, p.slot, p.layer, canon, sizeof canon);
        nnt_path q;
        nnt_status st = nnt_path_parse(m, canon, &q, &err);
        FUZZ_CHECK(st == NNT_OK && q.slot == p.slot && q.layer == p.layer, "'%s' parses but its canonical '%s' %s",
                   text, canon, st == NNT_OK ? "names another value" : err.msg);
    } else {
        FUZZ_CHECK(err.msg[0], "a refusal without a message");
    }

    /* as requests, the way --save / --zero / --scale / masked fills take them */
    nnt_trace *t = NULL;
    if (nnt_trace_new(m, &t) != NNT_OK) abort();
    nnt_runtime *rt = L.rt;
    if (nnt_trace_save(t, text) == NNT_OK) fuzz_note("saved", text);
    else FUZZ_CHECK(nnt_last_error(rt)[0], "a refused save without a message");
    if (nnt_trace_zero(t, text) != NNT_OK) FUZZ_CHECK(nnt_last_error(rt)[0], "a refused zero without a message");
    if (nnt_trace_scale(t, text, 0.5f) != NNT_OK) FUZZ_CHECK(nnt_last_error(rt)[0], "a refused scale without a message");
    nnt_trace_masked_fill(t, text, "layers.1.mlp.expert_indices", 4, 0.0f);
    nnt_trace_get(t, text);
    nnt_trace_free(t);

    /* as result names, "@k" included */
    const nnt_tensor *v = nnt_trace_get(ran, text);
    if (v) fuzz_note("result", text);
    if (v) FUZZ_CHECK(nnt_tensor_numel(v) >= 0 && v->ndim <= NNT_MAX_DIMS, "a result with a bad shape");
    free(text);
    return 0;
}
