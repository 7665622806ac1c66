/* patch.c - `nnt patch`: activation patching (libnnt's nnt_patch) of the request's clean and
 * corrupted prompts: the grid of the metric with one block's value at one position patched in,
 * as a table of blocks x positions; --out writes it, --plot draws it. */
#include <stdlib.h>
#include <string.h>

#include "../cli.h"

int cli_print_grid(const nnt_patch_result *res, const nnt_batch *b, const nnt_tokenizer *tok)
{
    int NB = res->n_blocks, P = res->n_positions, n;
    const int32_t *corrupt = batch_row(b, 1, &n);
    char **cells = calloc((size_t)(NB + 2) * (size_t)P + 1, sizeof *cells), **lab = calloc((size_t)NB + 2, sizeof *lab);
    int ok = cells && lab;
    for (int c = 0; ok && c < P; c++) {
        char buf[48];
        snprintf(buf, sizeof buf, "%d", res->positions[c]);
        cells[c] = strdup(buf);
        sbuf tk = {0};
        sb_token(&tk, tok, corrupt[res->positions[c]]);
        cells[P + c] = tk.p;
        for (int r = 0; r < NB; r++) {
            snprintf(buf, sizeof buf, "%.6f", res->grid[(size_t)r * P + c]);
            cells[(size_t)(r + 2) * P + c] = strdup(buf);
        }
    }
    for (int k = 0; ok && k < NB + 2; k++) {
        char buf[16];
        snprintf(buf, sizeof buf, "%d", k < 2 ? 0 : res->blocks[k - 2]);
        ok = (lab[k] = strdup(k == 0 ? "pos" : k == 1 ? "token" : buf)) != NULL;
    }
    for (size_t k = 0; ok && k < (size_t)(NB + 2) * P; k++) ok = cells[k] != NULL;
    if (ok) {
        printf("block \\ position (token of the corrupted prompt):\n");
        print_table(cells, NB + 2, P, (const char *const *)lab);
    }
    free_strings(cells, (size_t)(NB + 2) * P);
    free_strings(lab, (size_t)NB + 2);
    return ok ? 0 : cli_arg_error("%s", "out of memory");
}

int cmd_patch(cli_run *c)
{
    nnt_run_opts ro = {.struct_size = sizeof ro};
    nnt_result *res = NULL;
    if (nnt_request_run(c->m, c->req, &ro, &res) != NNT_OK) return cli_fail(c->o, c->rt, NULL);
    const nnt_patch_result *p = nnt_result_patch(res);
    const nnt_batch *b = nnt_result_batch(res);
    const nnt_request_patch_opts *po = nnt_request_patch(c->req);
    print_prompt_tokens(c->text_rows, b, c->tok);
    printf("activation patching of %s: metric %s with the clean value at one block and one position\n", po->value,
           po->metric);
    printf("clean %.6f, corrupted %.6f (%d forwards, up to %d patched rows each)\n", p->clean_metric, p->corrupt_metric,
           p->forwards, po->batch);
    int rc = cli_print_grid(p, b, c->tok);
    if (!rc && c->o->plot) rc = picture_patch(c->o, b, c->tok, p, po->value, po->metric);
    if (!rc && c->o->out && (rc = cli_write_out(c->o, c->rt, res)) == 0)
        printf("wrote patch_metric [%d, %d], patch_blocks, patch_positions, clean_metric and corrupt_metric to %s\n",
               p->n_blocks, p->n_positions, c->o->out);
    nnt_result_free(res);
    return rc;
}
