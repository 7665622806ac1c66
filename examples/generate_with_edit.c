/* generate_with_edit.c - greedy generation with an intervention at every step, like nnterp's
 * tracer.iter: an edit callback halves block 0's output at each step (the prompt, then every new
 * token), and the block's routing is saved at each step. Prints the clean and the edited
 * continuations and checks that the edit ran once per step on the shapes a cached generation has.
 *
 *   generate_with_edit MODEL_DIR N_NEW TOKEN_ID...
 *
 * The configuration comes from $NNT_CONFIG (else the build tree's nnt.ini). */
#include <stdio.h>
#include <stdlib.h>

#include "nnt/nnt.h"

#define MAX_TOKENS 4096

typedef struct edit_log {
    int calls;
    int64_t seq_of_call[MAX_TOKENS]; /* the value's position axis at each call */
} edit_log;

/* The edit: layer_output [batch, seq, (streams,) hidden] *= 0.5, and a note of the call. */
static nnt_status halve(void *user, const char *path, int layer, nnt_tensor *v, nnt_error *err)
{
    edit_log *log = user;
    if (log->calls < MAX_TOKENS) log->seq_of_call[log->calls] = v->shape[1];
    log->calls++;
    float *x = v->data;
    for (int64_t i = 0; i < nnt_tensor_numel(v); i++) x[i] *= 0.5f;
    return NNT_OK;
}

static void print_row(const char *label, const int32_t *ids, int n)
{
    printf("%-8s", label);
    for (int i = 0; i < n; i++) printf(" %d", ids[i]);
    printf("\n");
}

int main(int argc, char **argv)
{
    if (argc < 4 || argc - 3 > MAX_TOKENS || atoi(argv[2]) < 1 || atoi(argv[2]) > MAX_TOKENS) {
        fprintf(stderr, "usage: %s MODEL_DIR N_NEW TOKEN_ID...\n", argv[0]);
        return 2;
    }
    int N = atoi(argv[2]), T = argc - 3;
    int32_t ids[MAX_TOKENS], clean[MAX_TOKENS], edited[MAX_TOKENS];
    for (int i = 0; i < T; i++) ids[i] = (int32_t)atoi(argv[3 + i]);

    nnt_runtime *rt = NULL;
    nnt_model *m = NULL;
    nnt_trace *t = NULL;
    static edit_log log;
    int rc = 1;
    if (nnt_runtime_open(NULL, &rt) != NNT_OK || nnt_model_load(rt, argv[1], &m) != NNT_OK) goto out;
    nnt_generate_opts greedy = {
        .max_new_tokens = N,
        .temperature = 0.0f, /* greedy */
        .top_k = 0,
        .top_p = 1.0f,
        .seed = 0,
        /* no stop_ids: every token is generated */
    };
    if (nnt_generate(m, NULL, ids, NULL, 1, T, &greedy, clean) != NNT_OK) goto out;
    if (nnt_trace_new(m, &t) != NNT_OK || nnt_trace_edit(t, "layers.0.layer_output", halve, &log) != NNT_OK)
        goto out;
    char routing[64];
    int last = nnt_model_get_info(m)->num_layers - 1;
    snprintf(routing, sizeof routing, "layers.%d.mlp.expert_indices", last);
    if (nnt_trace_save(t, routing) != NNT_OK) goto out;
    if (nnt_generate(m, t, ids, NULL, 1, T, &greedy, edited) != NNT_OK) goto out;
    print_row("clean:", clean, N);
    print_row("edited:", edited, N);
    /* one call per step: the prompt's T positions, then one position per new token */
    int ok = log.calls == N && log.seq_of_call[0] == T;
    for (int s = 1; s < log.calls && s < MAX_TOKENS; s++) ok &= log.seq_of_call[s] == 1;
    printf("the edit ran %d times (%d steps); block %d's routing saved at each step:", log.calls, N, last);
    for (int s = 0; s < N; s++) {
        char key[80];
        snprintf(key, sizeof key, s ? "%s@%d" : "%s", routing, s);
        const nnt_tensor *r = nnt_trace_get(t, key);
        ok &= r != NULL;
        if (r) printf(" %lld", (long long)nnt_tensor_get_f64(r, nnt_tensor_numel(r) - r->shape[r->ndim - 1]));
    }
    printf("\n");
    rc = ok ? 0 : 1;
    if (!ok) fprintf(stderr, "generate_with_edit: the edit or the saves did not run once per step\n");
out:
    if (rc && nnt_last_status(rt) != NNT_OK) fprintf(stderr, "generate_with_edit: %s\n", nnt_last_error(rt));
    nnt_trace_free(t);
    nnt_model_free(m);
    nnt_runtime_close(rt);
    return rc;
}
