/* fuzz_config.c - libFuzzer harness for config.json as the core and the family plugins read it
 * (core/checkpoint/json_config.c, families/<name>/<name>.c through the nnt_cfg_* routines), and for the
 * checks that bind a checkpoint's tensors to it. The input is config.json; the harness's
 * temporary folder holds it next to a link to a fixture's model.safetensors, chosen by the
 * input: the family whose architecture name the text contains (MiniMax-M2 when none), its
 * block-scaled FP8/FP4 fixture when the text holds "quantization_config", else its float one.
 * The model is loaded (the family reads its configuration and binds the weights; nothing runs)
 * and freed. Every refusal must say why. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/internal.h"
#include "fuzz_common.h"

#define FIX NNT_FUZZ_SOURCE_DIR "/tests/fixtures/"
static const struct {
    const char *arch;
    const char *plain, *quantized; /* folders holding model.safetensors */
} FIXTURES[] = {
    {"MiniMaxM2", NNT_FUZZ_SOURCE_DIR "/examples/tiny-minimax-m2", FIX "minimax_m2/fp8"},
    {"MiMoV2Flash", FIX "mimo_v2_flash/fp32", FIX "mimo_v2_flash/fp8"},
    {"KimiLinear", FIX "kimi_linear/fp32", FIX "kimi_linear/fp32"},
    {"DeepseekV4", FIX "deepseek_v4/fp32", FIX "deepseek_v4/native"},
};
#define N_FIXTURES (sizeof FIXTURES / sizeof *FIXTURES)

static nnt_runtime *rt;
static const char *linked; /* the folder model.safetensors links to now */

static void close_runtime(void)
{
    nnt_runtime_close(rt);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    rt = fuzz_runtime_open();
    atexit(close_runtime);
    return 0;
}

static int contains(const uint8_t *data, size_t n, const char *word)
{
    size_t k = strlen(word);
    for (size_t i = 0; i + k <= n; i++)
        if (memcmp(data + i, word, k) == 0) return 1;
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    size_t pick = 0;
    for (size_t i = 0; i < N_FIXTURES; i++)
        if (contains(data, size, FIXTURES[i].arch)) {
            pick = i;
            break;
        }
    const char *dir = contains(data, size, "quantization_config") ? FIXTURES[pick].quantized : FIXTURES[pick].plain;
    if (dir != linked) {
        char target[1024];
        snprintf(target, sizeof target, "%s/model.safetensors", dir);
        fuzz_link("model.safetensors", target);
        linked = dir;
    }
    char path[1024];
    fuzz_write("config.json", data, size, path, sizeof path);
    nnt_model *m = NULL;
    nnt_status st = nnt_model_load(rt, fuzz_dir(), &m);
    fuzz_note(st == NNT_OK ? "loaded" : "refused", st == NNT_OK ? dir : nnt_last_error(rt));
    if (st == NNT_OK)
        nnt_model_free(m);
    else
        FUZZ_CHECK(nnt_last_error(rt)[0], "a refusal without a message");
    return 0;
}
