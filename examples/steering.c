/* steering.c - activation steering with a contrastive vector: the mean residual stream (block
 * LAYER's layer_output) over one prompt minus its mean over another, added with a factor to that
 * block's output at every position (nnterp's steer). Prints the next-token prediction before and
 * after, and checks that the block's output moved by exactly factor * vector.
 *
 *   steering MODEL_DIR LAYER FACTOR TOKEN_ID... -- TOKEN_ID...
 *
 * The tokens before "--" are the prompt that is steered and the positive side of the contrast;
 * those after it the negative side. $NNT_CONFIG names the configuration (else the build tree's). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nnt/nnt.h"

#define MAX_TOKENS 4096

/* Runs ids [1, T] saving block `layer`'s output and the next-token probabilities, optionally
 * steered. */
static nnt_status run(nnt_model *m, int layer, const int32_t *ids, int T, const nnt_tensor *vec, float factor,
                      nnt_trace **out)
{
    char path[64];
    snprintf(path, sizeof path, "layers.%d.layer_output", layer);
    nnt_status st = nnt_trace_new(m, out);
    if (st == NNT_OK && vec) st = nnt_trace_steer(*out, layer, layer, NULL, 0, vec, factor);
    if (st == NNT_OK) st = nnt_trace_save(*out, path);
    if (st == NNT_OK) st = nnt_trace_save(*out, "next_token_probs");
    if (st == NNT_OK) st = nnt_trace_run(*out, ids, NULL, 1, T);
    return st;
}

/* Mean over positions of a [1, T, ..., hidden] value, averaged over any streams: [hidden]. */
static void mean_over_tokens(const nnt_tensor *x, int64_t H, float *out)
{
    int64_t rows = nnt_tensor_numel(x) / H;
    memset(out, 0, sizeof(float) * (size_t)H);
    for (int64_t r = 0; r < rows; r++)
        for (int64_t h = 0; h < H; h++) out[h] += (float)(nnt_tensor_get_f64(x, r * H + h) / (double)rows);
}

static int argmax(const nnt_tensor *p)
{
    int best = 0;
    for (int64_t v = 1; v < nnt_tensor_numel(p); v++)
        if (nnt_tensor_get_f64(p, v) > nnt_tensor_get_f64(p, best)) best = (int)v;
    return best;
}

int main(int argc, char **argv)
{
    int sep = 0;
    for (int i = 4; i < argc; i++)
        if (strcmp(argv[i], "--") == 0) sep = i;
    if (argc < 7 || !sep || sep == 4 || sep == argc - 1 || argc > MAX_TOKENS) {
        fprintf(stderr, "usage: %s MODEL_DIR LAYER FACTOR TOKEN_ID... -- TOKEN_ID...\n", argv[0]);
        return 2;
    }
    int layer = atoi(argv[2]);
    float factor = (float)atof(argv[3]);
    int32_t pos[MAX_TOKENS], neg[MAX_TOKENS];
    int Tp = 0, Tn = 0;
    for (int i = 4; i < sep; i++) pos[Tp++] = (int32_t)atoi(argv[i]);
    for (int i = sep + 1; i < argc; i++) neg[Tn++] = (int32_t)atoi(argv[i]);

    nnt_runtime *rt = NULL;
    nnt_model *m = NULL;
    nnt_trace *a = NULL, *b = NULL, *steered = NULL;
    nnt_tensor vec = {0};
    int rc = 1;
    if (nnt_runtime_open(NULL, &rt) != NNT_OK || nnt_model_load(rt, argv[1], &m) != NNT_OK) goto out;
    int64_t H = nnt_model_get_info(m)->hidden_size;
    if (run(m, layer, pos, Tp, NULL, 0, &a) != NNT_OK || run(m, layer, neg, Tn, NULL, 0, &b) != NNT_OK) goto out;
    char path[64];
    snprintf(path, sizeof path, "layers.%d.layer_output", layer);
    float *mb = malloc(sizeof(float) * (size_t)H);
    if (!mb || nnt_tensor_alloc(&vec, NNT_F32, 1, &H) != NNT_OK) {
        free(mb);
        goto out;
    }
    mean_over_tokens(nnt_trace_get(a, path), H, (float *)vec.data);
    mean_over_tokens(nnt_trace_get(b, path), H, mb);
    double norm = 0;
    for (int64_t h = 0; h < H; h++) {
        ((float *)vec.data)[h] -= mb[h];
        norm += ((float *)vec.data)[h] * ((float *)vec.data)[h];
    }
    free(mb);
    printf("steering vector at block %d: |v| = %.4f, factor %.2f\n", layer, sqrt(norm), factor);
    if (run(m, layer, pos, Tp, &vec, factor, &steered) != NNT_OK) goto out;

    const nnt_tensor *clean = nnt_trace_get(a, path), *moved = nnt_trace_get(steered, path);
    double worst = 0;
    for (int64_t i = 0; i < nnt_tensor_numel(clean); i++) {
        double want = nnt_tensor_get_f64(clean, i) + factor * ((float *)vec.data)[i % H];
        worst = fmax(worst, fabs(nnt_tensor_get_f64(moved, i) - want));
    }
    const nnt_tensor *p0 = nnt_trace_get(a, "next_token_probs"), *p1 = nnt_trace_get(steered, "next_token_probs");
    int t0 = argmax(p0), t1 = argmax(p1);
    printf("next token: %d (p = %.4f) before, %d (p = %.4f) after; block output off by at most %.2g\n", t0,
           nnt_tensor_get_f64(p0, t0), t1, nnt_tensor_get_f64(p1, t1), worst);
    rc = worst <= 1e-4 * (1 + fabs(factor) * sqrt(norm)) ? 0 : 1;
    if (rc) fprintf(stderr, "steering: the block's output is not the clean output plus factor * vector\n");
out:
    if (rc && nnt_last_status(rt) != NNT_OK) fprintf(stderr, "steering: %s\n", nnt_last_error(rt));
    nnt_tensor_free(&vec);
    nnt_trace_free(a);
    nnt_trace_free(b);
    nnt_trace_free(steered);
    nnt_model_free(m);
    nnt_runtime_close(rt);
    return rc;
}
