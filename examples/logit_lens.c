/* logit_lens.c - the logit lens: reads every block's output through the model's final norm and
 * lm_head (nnt_project_on_vocab) and prints, for the last position, the top token of each block
 * and the probability the lens gives the model's final prediction. The last block's lens is the
 * model's own prediction; the program checks that.
 *
 *   logit_lens MODEL_DIR TOKEN_ID...
 *
 * The configuration comes from $NNT_CONFIG (else the build tree's nnt.ini). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "nnt/nnt.h"

#define MAX_TOKENS 4096

/* Softmax of one row of logits, in place; returns the argmax. */
static int softmax(float *x, int64_t n)
{
    int best = 0;
    for (int64_t i = 1; i < n; i++)
        if (x[i] > x[best]) best = (int)i;
    double sum = 0;
    float mx = x[best];
    for (int64_t i = 0; i < n; i++) sum += (x[i] = expf(x[i] - mx));
    for (int64_t i = 0; i < n; i++) x[i] = (float)(x[i] / sum);
    return best;
}

int main(int argc, char **argv)
{
    if (argc < 3 || argc - 2 > MAX_TOKENS) {
        fprintf(stderr, "usage: %s MODEL_DIR TOKEN_ID...\n", argv[0]);
        return 2;
    }
    int T = argc - 2;
    int32_t ids[MAX_TOKENS];
    for (int i = 0; i < T; i++) ids[i] = (int32_t)atoi(argv[2 + i]);

    nnt_runtime *rt = NULL;
    nnt_model *m = NULL;
    nnt_trace *t = NULL;
    nnt_tensor lens = {0};
    int rc = 1;
    if (nnt_runtime_open(NULL, &rt) != NNT_OK || nnt_model_load(rt, argv[1], &m) != NNT_OK ||
        nnt_trace_new(m, &t) != NNT_OK)
        goto out;
    if (nnt_trace_save(t, "layers.*.layer_output") != NNT_OK || nnt_trace_save(t, "next_token_probs") != NNT_OK ||
        nnt_trace_run(t, ids, NULL, 1, T) != NNT_OK)
        goto out;
    const nnt_model_info *mi = nnt_model_get_info(m);
    const nnt_tensor *probs = nnt_trace_get(t, "next_token_probs");
    int64_t V = mi->vocab_size;
    int final = 0;
    for (int64_t v = 1; v < V; v++)
        if (nnt_tensor_get_f64(probs, v) > nnt_tensor_get_f64(probs, final)) final = (int)v;
    printf("model's prediction after the last token: %d (p = %.4f)\n", final, nnt_tensor_get_f64(probs, final));
    printf("block  top token  p(top)   p(%d)\n", final);
    int last_top = -1;
    for (int l = 0; l < mi->num_layers; l++) {
        char path[64];
        snprintf(path, sizeof path, "layers.%d.layer_output", l);
        nnt_tensor_free(&lens);
        if (nnt_project_on_vocab(m, nnt_trace_get(t, path), &lens) != NNT_OK) goto out;
        float *row = (float *)lens.data + (int64_t)(T - 1) * V; /* the last position */
        int top = softmax(row, V);
        printf("%5d  %9d  %.4f   %.4f\n", l, top, row[top], row[final]);
        last_top = top;
    }
    if (last_top != final) {
        fprintf(stderr, "logit_lens: the last block's lens (%d) is not the model's prediction (%d)\n", last_top, final);
        goto out;
    }
    rc = 0;
out:
    if (rc && rt && nnt_last_status(rt) != NNT_OK) fprintf(stderr, "logit_lens: %s\n", nnt_last_error(rt));
    nnt_tensor_free(&lens);
    nnt_trace_free(t);
    nnt_model_free(m);
    nnt_runtime_close(rt);
    return rc;
}
