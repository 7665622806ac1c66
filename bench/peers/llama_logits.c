/* llama_logits.c - the last position's logits of a prompt in llama.cpp, for the peer benchmark's
 * check against transformers: loads a GGUF file, decodes the token ids given (one batch), and
 * writes the last position's logits as raw float32 [n_vocab] to OUT.
 *
 *   llama_logits MODEL.gguf THREADS OUT.f32 ID ID ...
 *
 * Built against the llama.cpp tree of the llama-cpp-python source distribution (llama.h). */
#include <stdio.h>
#include <stdlib.h>

#include "llama.h"

int main(int argc, char **argv)
{
    if (argc < 5) {
        fprintf(stderr, "usage: llama_logits MODEL.gguf THREADS OUT.f32 ID ID ...\n");
        return 2;
    }
    int threads = atoi(argv[2]), n = argc - 4;
    llama_token *ids = malloc((size_t)n * sizeof *ids);
    if (!ids) return 1;
    for (int i = 0; i < n; i++) ids[i] = (llama_token)atoi(argv[4 + i]);
    llama_backend_init();
    struct llama_model *model = llama_model_load_from_file(argv[1], llama_model_default_params());
    if (!model) {
        fprintf(stderr, "llama_logits: cannot load %s\n", argv[1]);
        return 1;
    }
    struct llama_context_params cp = llama_context_default_params();
    cp.n_ctx = cp.n_batch = cp.n_ubatch = (uint32_t)n;
    cp.n_threads = cp.n_threads_batch = threads;
    struct llama_context *ctx = llama_init_from_model(model, cp);
    if (!ctx || llama_decode(ctx, llama_batch_get_one(ids, n)) != 0) {
        fprintf(stderr, "llama_logits: the decode of %d tokens failed\n", n);
        return 1;
    }
    const float *logits = llama_get_logits_ith(ctx, -1);
    int vocab = llama_vocab_n_tokens(llama_model_get_vocab(model));
    FILE *f = fopen(argv[3], "wb");
    if (!f || fwrite(logits, sizeof *logits, (size_t)vocab, f) != (size_t)vocab || fclose(f) != 0) {
        fprintf(stderr, "llama_logits: cannot write %s\n", argv[3]);
        return 1;
    }
    llama_free(ctx);
    llama_model_free(model);
    llama_backend_free();
    free(ids);
    return 0;
}
