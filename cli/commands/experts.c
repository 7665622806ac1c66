/* experts.c - `nnt experts --stats FILE`: the routing statistics a harvest wrote (nnt_harvest's
 * stats.safetensors) as a table per block - tokens, experts used, the most and least chosen
 * experts with their share of the block's tokens and mean routing weight - and with --plot the
 * share of every expert by block as a heatmap. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../cli.h"
#include "../plot.h"

#define MAX_HEADER ((size_t)64 << 20)

/* The blocks whose expert_counts the file holds, ascending, and its tensor keys' header. */
static int stats_blocks(const char *file, int **blocks, int *n)
{
    *blocks = NULL;
    *n = 0;
    FILE *f = fopen(file, "rb");
    unsigned char len8[8];
    if (!f || fread(len8, 1, 8, f) != 8) {
        if (f) fclose(f);
        return cli_arg_error("--stats %s: cannot read it (expected the stats.safetensors of nnt harvest)", file);
    }
    uint64_t len = 0;
    for (int i = 7; i >= 0; i--) len = len << 8 | len8[i];
    char *head = len <= MAX_HEADER ? malloc((size_t)len) : NULL;
    int ok = head && fread(head, 1, (size_t)len, f) == len;
    fclose(f);
    cJSON *doc = ok ? cJSON_ParseWithLength(head, (size_t)len) : NULL;
    free(head);
    if (!doc) return cli_arg_error("--stats %s: not a safetensors file", file);
    int cap = cJSON_GetArraySize(doc), L;
    *blocks = malloc((size_t)(cap ? cap : 1) * sizeof **blocks);
    const cJSON *it;
    cJSON_ArrayForEach(it, doc) {
        char tail[64];
        if (*blocks && sscanf(it->string, "layers.%d.mlp.expert_count%63s", &L, tail) == 2 && !strcmp(tail, "s"))
            (*blocks)[(*n)++] = L;
    }
    cJSON_Delete(doc);
    for (int i = 1; i < *n; i++) /* insertion sort: a few hundred blocks at most */
        for (int j = i; j > 0 && (*blocks)[j - 1] > (*blocks)[j]; j--) {
            int t = (*blocks)[j];
            (*blocks)[j] = (*blocks)[j - 1];
            (*blocks)[j - 1] = t;
        }
    if (!*n) return cli_arg_error("--stats %s: holds no routing statistics (layers.N.mlp.expert_counts: harvest "
                                  "with --routing-stats)", file);
    return 0;
}

static int read_stat(cli_run *c, const char *file, int block, const char *name, nnt_dtype dt, int64_t E,
                     nnt_tensor *t)
{
    char key[96];
    snprintf(key, sizeof key, "layers.%d.mlp.%s", block, name);
    if (nnt_safetensors_read(c->rt, file, key, t) != NNT_OK) return cli_fail(c->o, c->rt, "--stats");
    if (t->dtype != dt || t->ndim != 1 || (E >= 0 && t->shape[0] != E))
        return cli_arg_error("--stats %s: %s is not %s [%lld]", file, key, nnt_dtype_name(dt), (long long)E);
    return 0;
}

/* Block b's line; share[E] receives each expert's share of the block's tokens. */
static int print_block(cli_run *c, const char *file, int b, int64_t tokens, double *share, int64_t *E_out)
{
    nnt_tensor counts = {0}, sums = {0};
    int rc = read_stat(c, file, b, "expert_counts", NNT_I64, -1, &counts);
    int64_t E = rc ? 0 : counts.shape[0];
    if (!rc && E > 4096) rc = cli_arg_error("--stats %s: block %d has %lld experts (at most 4096)", file, b, (long long)E);
    if (!rc) rc = read_stat(c, file, b, "expert_weight_sums", NNT_F64, E, &sums);
    if (!rc) {
        const int64_t *n = counts.data;
        const double *w = sums.data;
        int64_t used = 0, hi = 0, lo = 0;
        for (int64_t e = 0; e < E; e++) {
            used += n[e] > 0;
            hi = n[e] > n[hi] ? e : hi;
            lo = n[e] < n[lo] ? e : lo;
            share[e] = tokens ? (double)n[e] / (double)tokens : 0;
        }
        printf("%5d  %6lld/%-6lld  %4lld %6.2f%% %6.4f   %4lld %6.2f%% %6.4f\n", b, (long long)used, (long long)E,
               (long long)hi, 100 * share[hi], n[hi] ? w[hi] / (double)n[hi] : 0.0, (long long)lo, 100 * share[lo],
               n[lo] ? w[lo] / (double)n[lo] : 0.0);
        *E_out = E;
    }
    nnt_tensor_free(&counts);
    nnt_tensor_free(&sums);
    return rc;
}

static int draw(cli_run *c, const int *blocks, int nb, int64_t E, const double *share)
{
    char **rows = calloc((size_t)nb, sizeof *rows), **cols = calloc((size_t)E, sizeof *cols);
    int ok = rows && cols;
    double vmax = 0;
    for (int i = 0; ok && i < nb; i++) {
        char buf[32];
        snprintf(buf, sizeof buf, "block %d", blocks[i]);
        ok = (rows[i] = strdup(buf)) != NULL;
    }
    for (int64_t e = 0; ok && e < E; e++) {
        char buf[32];
        snprintf(buf, sizeof buf, "%lld", (long long)e);
        ok = (cols[e] = strdup(buf)) != NULL;
    }
    for (int64_t i = 0; i < nb * E; i++) vmax = share[i] > vmax ? share[i] : vmax;
    plot_grid g = {.title = "expert usage: share of each block's tokens routed to the expert", .panels = 1,
                   .panel_cols = 1, .rows = nb, .cols = (int)E, .values = share,
                   .row_labels = (const char *const *)rows, .col_labels = (const char *const *)cols,
                   .row_axis = "block", .col_axis = "expert", .vmin = 0, .vmax = vmax, .cell_w = PLOT_CELL,
                   .cell_h = PLOT_CELL};
    int rc = 1;
    char err[1200];
    if (!ok) fprintf(stderr, "nnt: experts: out of memory\n");
    else if (plot_write(c->o->plot, &g, err, sizeof err) != 0) fprintf(stderr, "nnt: error: %s\n", err);
    else {
        printf("wrote the picture to %s\n", c->o->plot);
        rc = 0;
    }
    if (rows) free_strings(rows, (size_t)nb);
    if (cols) free_strings(cols, (size_t)E);
    return rc;
}

int cmd_experts(cli_run *c)
{
    const char *file = c->o->stats;
    if (!file) return cli_usage_error("%s", "experts needs --stats FILE: the stats.safetensors of nnt harvest --routing-stats");
    int *blocks = NULL, nb = 0, rc = stats_blocks(file, &blocks, &nb);
    nnt_tensor tok = {0};
    if (!rc && nnt_safetensors_read(c->rt, file, "tokens", &tok) != NNT_OK) rc = cli_fail(c->o, c->rt, "--stats");
    if (!rc && (tok.dtype != NNT_I64 || tok.ndim != 1 || tok.shape[0] != 1))
        rc = cli_arg_error("--stats %s: tokens is not I64 [1]", file);
    int64_t tokens = rc ? 0 : *(const int64_t *)tok.data, E = 0;
    nnt_tensor_free(&tok);
    double *share = NULL;
    if (!rc) {
        printf("routing over %lld tokens: per block, experts chosen at least once, then the most and the least "
               "chosen expert with its share of the tokens and its mean weight\n", (long long)tokens);
        printf("block  used/experts  most  share  weight   least share  weight\n");
    }
    for (int i = 0; !rc && i < nb; i++) {
        int64_t e = 0;
        double row[4096];
        rc = print_block(c, file, blocks[i], tokens, row, &e);
        if (rc) break;
        if (!share) {
            E = e;
            share = malloc((size_t)(nb * E > 0 ? nb * E : 1) * sizeof *share);
            if (!share) rc = cli_arg_error("%s", "out of memory");
        }
        if (!rc && e != E) rc = cli_arg_error("--stats %s: blocks with different numbers of experts", file);
        if (!rc) memcpy(share + (size_t)i * (size_t)E, row, (size_t)E * sizeof *row);
    }
    if (!rc && c->o->plot) rc = draw(c, blocks, nb, E, share);
    free(share);
    free(blocks);
    return rc;
}
