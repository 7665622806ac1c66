/* lens.c - `nnt lens`: the logit lens (libnnt's nnt_lens) of the request's rows - for every block
 * and chosen position, the top token of the block's output read through the final norm and
 * lm_head, with its probability - as a table per row; --out writes the whole distribution. */
#include <stdlib.h>
#include <string.h>

#include "../cli.h"

/* Row r's table: a column per chosen position, lines "block" (positions), "input" (the row's
 * tokens) and one per block. Returns 0 or 1 (out of memory). */
static int print_row(const nnt_lens_result *l, const nnt_batch *b, const nnt_tokenizer *tok, int r)
{
    int L = l->layers, W = l->width, N = 0, n;
    const int32_t *ids = batch_row(b, r, &n);
    while (N < W && l->positions[(size_t)r * W + N] >= 0) N++;
    printf("row %d (%d token%s, %d shown):\n", r, n, n == 1 ? "" : "s", N);
    char **cells = calloc((size_t)(L + 2) * (size_t)(N ? N : 1), sizeof *cells), **lab = calloc((size_t)L + 2, sizeof *lab);
    int ok = cells && lab;
    for (int j = 0; ok && j < N; j++) {
        char buf[48];
        int pos = l->positions[(size_t)r * W + j];
        snprintf(buf, sizeof buf, "%d", pos);
        cells[j] = strdup(buf);
        sbuf tk = {0};
        sb_token(&tk, tok, ids[pos]);
        cells[N + j] = tk.p;
        for (int layer = 0; layer < L; layer++) {
            size_t c = ((size_t)r * L + layer) * W + j;
            sbuf cell = {0};
            sb_token(&cell, tok, l->top[c]);
            snprintf(buf, sizeof buf, " (%.4f)", l->top_prob[c]);
            sb_str(&cell, buf);
            cells[(size_t)(layer + 2) * N + j] = cell.p;
        }
    }
    for (int k = 0; ok && k < L + 2; k++) {
        char buf[16];
        snprintf(buf, sizeof buf, "%d", k - 2);
        ok = (lab[k] = strdup(k == 0 ? "block" : k == 1 ? "input" : buf)) != NULL;
    }
    for (size_t k = 0; ok && k < (size_t)(L + 2) * N; k++) ok = cells[k] != NULL;
    if (ok) print_table(cells, L + 2, N, (const char *const *)lab);
    free_strings(cells, (size_t)(L + 2) * N);
    free_strings(lab, (size_t)L + 2);
    if (!ok) fprintf(stderr, "nnt: lens: out of memory\n");
    return ok ? 0 : 1;
}

int cmd_lens(cli_run *c)
{
    nnt_run_opts ro = {.struct_size = sizeof ro, .pipeline = c->p};
    nnt_result *res = NULL;
    int root = nnt_pipeline_size(c->p) - 1; /* the last rank holds the readout */
    if (nnt_request_run(c->m, c->req, &ro, &res) != NNT_OK)
        return c->p ? ranks_fail(c->p, c->o, c->rt, root, c->held_fd) : cli_fail(c->o, c->rt, NULL);
    int rc = 0;
    const nnt_lens_result *l = nnt_result_lens(res);
    if (l) {
        const nnt_batch *b = nnt_result_batch(res);
        printf("logit lens: top token (probability) of each block's output, by position\n");
        for (int r = 0; r < l->batch && !rc; r++) rc = print_row(l, b, c->tok, r);
        if (!rc && c->o->plot) rc = picture_lens(c->o, b, c->tok, l);
        if (!rc && c->o->out && (rc = cli_write_out(c->o, c->rt, res)) == 0)
            printf("wrote lens_probs [%d, %d, %d, %lld] and lens_positions [%d, %d] to %s\n", l->batch, l->layers,
                   l->width, (long long)l->vocab, l->batch, l->width, c->o->out);
    }
    nnt_result_free(res);
    return rc;
}
