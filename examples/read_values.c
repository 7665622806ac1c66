/* read_values.c - reads standard values out of one forward pass: the residual stream entering a
 * block, the router's logits and the weight of each chosen expert, and the attention pattern.
 *
 *   read_values MODEL_DIR TOKEN_ID...
 *
 * The configuration comes from $NNT_CONFIG (else the build tree's nnt.ini). */
#include <stdio.h>
#include <stdlib.h>

#include "nnt/nnt.h"

#define MAX_TOKENS 4096

static void show(const char *path, const nnt_tensor *v)
{
    printf("%-36s", path);
    if (!v) {
        printf(" None\n");
        return;
    }
    printf(" %s [", nnt_dtype_name(v->dtype));
    for (int d = 0; d < v->ndim; d++) printf("%s%lld", d ? ", " : "", (long long)v->shape[d]);
    printf("]\n");
}

int main(int argc, char **argv)
{
    if (argc < 3 || argc - 2 > MAX_TOKENS) {
        fprintf(stderr, "usage: %s MODEL_DIR TOKEN_ID... (at most %d ids)\n", argv[0], MAX_TOKENS);
        return 2;
    }
    int T = argc - 2;
    int32_t ids[MAX_TOKENS];
    for (int i = 0; i < T; i++) ids[i] = (int32_t)atoi(argv[2 + i]);

    nnt_runtime *rt = NULL;
    nnt_model *m = NULL;
    nnt_trace *t = NULL;
    int rc = 1;
    if (nnt_runtime_open(NULL, &rt) != NNT_OK || nnt_model_load(rt, argv[1], &m) != NNT_OK ||
        nnt_trace_new(m, &t) != NNT_OK)
        goto out;
    const nnt_model_info *mi = nnt_model_get_info(m);
    int layer = mi->num_layers - 1; /* the last block */
    char in[64], rl[64], ew[64], ei[64];
    snprintf(in, sizeof in, "layers.%d.layer_input", layer);
    snprintf(rl, sizeof rl, "layers.%d.mlp.router_logits", layer);
    snprintf(ew, sizeof ew, "layers.%d.mlp.expert_weights", layer);
    snprintf(ei, sizeof ei, "layers.%d.mlp.expert_indices", layer);
    const char *paths[] = {in, rl, ew, ei, "logits"};
    for (size_t i = 0; i < sizeof paths / sizeof *paths; i++)
        if (nnt_trace_save(t, paths[i]) != NNT_OK) goto out;
    /* the attention pattern is served by blocks with softmax attention only; ask the model which */
    char pattern[64] = "";
    for (int l = 0; l < mi->num_layers && !pattern[0]; l++) {
        char p[64];
        nnt_value_info vi;
        nnt_call_dims dims = {1, T, 0};
        snprintf(p, sizeof p, "layers.%d.self_attn.attention_probabilities", l);
        if (nnt_model_value_info(m, p, &dims, &vi) == NNT_OK && vi.served) snprintf(pattern, sizeof pattern, "%s", p);
    }
    if (pattern[0] && nnt_trace_save(t, pattern) != NNT_OK) goto out;
    if (nnt_trace_run(t, ids, NULL, 1, T) != NNT_OK) goto out;

    for (size_t i = 0; i < sizeof paths / sizeof *paths; i++) show(paths[i], nnt_trace_get(t, paths[i]));
    if (pattern[0]) show(pattern, nnt_trace_get(t, pattern));

    /* the experts the last token went to, and their weights */
    const nnt_tensor *w = nnt_trace_get(t, ew), *idx = nnt_trace_get(t, ei);
    if (!w || !idx) {
        fprintf(stderr, "block %d has no routed experts\n", layer);
        goto out;
    }
    int64_t k = w->shape[w->ndim - 1], base = (int64_t)(T - 1) * k;
    double sum = 0;
    printf("last token, block %d:", layer);
    for (int64_t j = 0; j < k; j++) {
        printf("  expert %d (weight %.4f)", (int)nnt_tensor_get_f64(idx, base + j), nnt_tensor_get_f64(w, base + j));
        sum += nnt_tensor_get_f64(w, base + j);
    }
    printf("  sum %.4f\n", sum);
    rc = 0;
out:
    if (rc && nnt_last_status(rt) != NNT_OK) fprintf(stderr, "read_values: %s\n", nnt_last_error(rt));
    nnt_trace_free(t);
    nnt_model_free(m);
    nnt_runtime_close(rt);
    return rc;
}
