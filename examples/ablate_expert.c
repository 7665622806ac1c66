/* ablate_expert.c - zeroes one expert in one block (its weight wherever the router chose it) and
 * shows how the next-token distribution moves; checks that every weight of that expert was
 * zeroed and that tokens routed elsewhere kept theirs.
 *
 *   ablate_expert MODEL_DIR LAYER EXPERT TOKEN_ID...
 *
 * The configuration comes from $NNT_CONFIG (else the build tree's nnt.ini). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "nnt/nnt.h"

#define MAX_TOKENS 4096

/* Runs the prompt, saving the block's routing and the next-token probabilities; with
 * expert >= 0 that expert is ablated first. */
static nnt_status run(nnt_model *m, int layer, int expert, const int32_t *ids, int T, nnt_trace **out)
{
    char w[64], idx[64];
    snprintf(w, sizeof w, "layers.%d.mlp.expert_weights", layer);
    snprintf(idx, sizeof idx, "layers.%d.mlp.expert_indices", layer);
    nnt_status st = nnt_trace_new(m, out);
    if (st == NNT_OK && expert >= 0) st = nnt_trace_ablate_expert(*out, layer, expert);
    if (st == NNT_OK) st = nnt_trace_save(*out, w);
    if (st == NNT_OK) st = nnt_trace_save(*out, idx);
    if (st == NNT_OK) st = nnt_trace_save(*out, "next_token_probs");
    if (st == NNT_OK) st = nnt_trace_run(*out, ids, NULL, 1, T);
    return st;
}

int main(int argc, char **argv)
{
    if (argc < 5 || argc - 4 > MAX_TOKENS) {
        fprintf(stderr, "usage: %s MODEL_DIR LAYER EXPERT TOKEN_ID...\n", argv[0]);
        return 2;
    }
    int layer = atoi(argv[2]), expert = atoi(argv[3]), T = argc - 4;
    int32_t ids[MAX_TOKENS];
    for (int i = 0; i < T; i++) ids[i] = (int32_t)atoi(argv[4 + i]);

    nnt_runtime *rt = NULL;
    nnt_model *m = NULL;
    nnt_trace *clean = NULL, *ablated = NULL;
    int rc = 1;
    if (nnt_runtime_open(NULL, &rt) != NNT_OK || nnt_model_load(rt, argv[1], &m) != NNT_OK) goto out;
    if (run(m, layer, -1, ids, T, &clean) != NNT_OK || run(m, layer, expert, ids, T, &ablated) != NNT_OK) goto out;

    char w[64], idx[64];
    snprintf(w, sizeof w, "layers.%d.mlp.expert_weights", layer);
    snprintf(idx, sizeof idx, "layers.%d.mlp.expert_indices", layer);
    const nnt_tensor *w0 = nnt_trace_get(clean, w), *w1 = nnt_trace_get(ablated, w), *i1 = nnt_trace_get(ablated, idx);
    int64_t n = nnt_tensor_numel(w1), hits = 0, bad = 0;
    for (int64_t i = 0; i < n; i++) {
        int chosen = (int)nnt_tensor_get_f64(i1, i) == expert;
        hits += chosen;
        double want = chosen ? 0.0 : nnt_tensor_get_f64(w0, i);
        bad += nnt_tensor_get_f64(w1, i) != want;
    }
    printf("block %d, expert %d: chosen in %lld of %lld slots; slots whose weight is wrong after the ablation: %lld\n", layer, expert,
           (long long)hits, (long long)n, (long long)bad);

    const nnt_tensor *p0 = nnt_trace_get(clean, "next_token_probs"), *p1 = nnt_trace_get(ablated, "next_token_probs");
    int64_t V = p0->shape[p0->ndim - 1];
    int best = 0;
    double tv = 0; /* total variation distance between the two next-token distributions */
    for (int64_t v = 0; v < V; v++) {
        if (nnt_tensor_get_f64(p0, v) > nnt_tensor_get_f64(p0, best)) best = (int)v;
        tv += 0.5 * fabs(nnt_tensor_get_f64(p0, v) - nnt_tensor_get_f64(p1, v));
    }
    printf("top next token %d: p = %.4f clean, %.4f ablated; total variation %.4f\n", best,
           nnt_tensor_get_f64(p0, best), nnt_tensor_get_f64(p1, best), tv);
    rc = bad ? 1 : 0;
    if (bad) fprintf(stderr, "ablate_expert: %lld weights were not zeroed or changed where they should not\n", (long long)bad);
out:
    if (rc && rt && nnt_last_status(rt) != NNT_OK) fprintf(stderr, "ablate_expert: %s\n", nnt_last_error(rt));
    nnt_trace_free(clean);
    nnt_trace_free(ablated);
    nnt_model_free(m);
    nnt_runtime_close(rt);
    return rc;
}
