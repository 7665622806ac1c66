/* attribute.c - `nnt attribute`: attribution patching (libnnt's nnt_attribute) of the request's
 * clean and corrupted prompts: the gradient estimate of the metric's change with one block's
 * clean value at one position patched in, as a table of blocks x positions (summed over heads or
 * expert slots, which --out keeps apart); --out writes it, --plot draws it. */
#include <stdlib.h>
#include <string.h>

#include "../cli.h"

/* The grid summed over its units as a patch-shaped grid (positions 0..P-1) in *g. */
static int as_patch_grid(const nnt_attribute_result *a, nnt_patch_result *g)
{
    int NB = a->n_blocks, P = a->n_positions, U = a->n_units;
    *g = (nnt_patch_result){.n_blocks = NB, .n_positions = P, .blocks = a->blocks, .clean_metric = a->clean_metric,
                            .corrupt_metric = a->corrupt_metric, .forwards = a->forwards};
    g->positions = malloc(sizeof *g->positions * (size_t)P);
    g->grid = calloc((size_t)NB * (size_t)P, sizeof *g->grid);
    if (!g->positions || !g->grid) return cli_arg_error("%s", "out of memory");
    for (int p = 0; p < P; p++) g->positions[p] = p;
    for (int64_t k = 0; k < (int64_t)NB * P * U; k++) g->grid[k / U] += a->grid[k];
    return 0;
}

int cmd_attribute(cli_run *c)
{
    nnt_run_opts ro = {.struct_size = sizeof ro};
    nnt_result *res = NULL;
    if (nnt_request_run(c->m, c->req, &ro, &res) != NNT_OK) return cli_fail(c->o, c->rt, NULL);
    const nnt_attribute_result *a = nnt_result_attribute(res);
    const nnt_batch *b = nnt_result_batch(res);
    const nnt_request_attribute_opts *ao = nnt_request_attribute(c->req);
    print_prompt_tokens(c->text_rows, b, c->tok);
    if (ao->ig_steps)
        printf("attribution of %s: metric %s, integrated gradients over %d points between the token embeddings\n",
               ao->value, ao->metric, ao->ig_steps);
    else
        printf("attribution patching (AtP) of %s: metric %s, (clean - corrupted value) . gradient of the corrupted "
               "forward\n", ao->value, ao->metric);
    printf("clean %.6f, corrupted %.6f (%d forwards, %d backwards); each cell estimates the metric's change from "
           "patching it%s\n", a->clean_metric, a->corrupt_metric, a->forwards, a->backwards,
           a->n_units > 1 ? ", summed over the value's heads or expert slots (--out keeps each)" : "");
    nnt_patch_result g = {0};
    int rc = as_patch_grid(a, &g);
    if (!rc) rc = cli_print_grid(&g, b, c->tok);
    if (!rc && c->o->plot) rc = picture_attribute(c->o, b, c->tok, &g, ao->value, ao->metric);
    if (!rc && c->o->out && (rc = cli_write_out(c->o, c->rt, res)) == 0) {
        if (a->n_units > 1)
            printf("wrote attr_metric [%d, %d, %d], attr_blocks, attr_positions, clean_metric and corrupt_metric to %s\n",
                   a->n_blocks, a->n_positions, a->n_units, c->o->out);
        else
            printf("wrote attr_metric [%d, %d], attr_blocks, attr_positions, clean_metric and corrupt_metric to %s\n",
                   a->n_blocks, a->n_positions, c->o->out);
    }
    free(g.positions);
    free(g.grid);
    nnt_result_free(res);
    return rc;
}
