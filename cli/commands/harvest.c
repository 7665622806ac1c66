/* harvest.c - `nnt harvest`: the request's saved values (and reductions) over a corpus, written as
 * shards with a manifest by libnnt's nnt_harvest; progress on a terminal, a summary at the end. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../cli.h"

/* Progress on stderr when it is a terminal: at most twice a second, one line rewritten. */
typedef struct progress {
    double last;
    int shown;
} progress;

static void show(void *user, const nnt_harvest_progress *p)
{
    progress *pr = user;
    if (p->seconds - pr->last < 0.5 && pr->shown) return;
    pr->last = p->seconds;
    pr->shown = 1;
    double frac = p->bytes_total ? (double)p->bytes_read / (double)p->bytes_total : 0;
    double rate = p->seconds > 0 ? (double)p->tokens / p->seconds : 0;
    char eta[32] = "?";
    if (frac > 0 && frac < 1) {
        long s = (long)(p->seconds / frac - p->seconds);
        snprintf(eta, sizeof eta, "%ldm%02lds", s / 60, s % 60);
    } else if (frac >= 1) snprintf(eta, sizeof eta, "0m00s");
    fprintf(stderr, "\rharvest: %lld tokens, %lld rows, %lld shards, %.0f tokens/s, %.1f%% of the data read, ETA %s   ",
            (long long)p->tokens, (long long)p->rows, (long long)p->shards, p->resumed ? 0.0 : rate, 100 * frac, eta);
    fflush(stderr);
}

static nnt_data_format format_of(const char *w)
{
    return !w ? NNT_DATA_AUTO : !strcmp(w, "lines") ? NNT_DATA_LINES : !strcmp(w, "file") ? NNT_DATA_FILE : NNT_DATA_JSONL;
}

int cmd_harvest(cli_run *c)
{
    const cli_opts *o = c->o;
    nnt_request *req = NULL;
    int rc = cli_request(o, c->rt, &req);
    if (rc) return rc;
    if (o->print_request) {
        rc = cli_print_request(c->rt, req);
        nnt_request_free(req);
        return rc;
    }
    int *pos = NULL, n_pos = 0;
    if (o->positions && cli_parse_positions("--positions", o->positions, &pos, &n_pos) != 0) {
        nnt_request_free(req);
        return 2;
    }
    /* --top-features and --top-contexts, split into the spec's two lists */
    int n = o->n_top ? o->n_top : 1, nf = 0, nc = 0;
    const char **fp = calloc((size_t)n, sizeof *fp), **cp = calloc((size_t)n, sizeof *cp);
    int *fk = calloc((size_t)n, sizeof *fk), *ck = calloc((size_t)n, sizeof *ck);
    if (!fp || !cp || !fk || !ck) {
        free(fp), free(cp), free(fk), free(ck), free(pos);
        nnt_request_free(req);
        return cli_arg_error("%s", "out of memory");
    }
    for (int i = 0; i < o->n_top; i++) {
        if (o->top_context[i]) {
            cp[nc] = o->top_paths[i];
            ck[nc++] = o->top_count[i];
        } else {
            fp[nf] = o->top_paths[i];
            fk[nf++] = o->top_count[i];
        }
    }
    progress pr = {0};
    const char *rows = o->rows_layout ? o->rows_layout : "pack", *dt = o->dtype ? o->dtype : "bf16";
    nnt_harvest_spec s = {
        .struct_size = sizeof s,
        .request = req,
        .data = o->data,
        .n_data = o->n_data,
        .format = format_of(o->format),
        .field = o->field,
        .skip_bad = o->skip_bad,
        .context = o->context,
        .rows = !strcmp(rows, "pack") ? NNT_HARVEST_PACK : !strcmp(rows, "split") ? NNT_HARVEST_SPLIT
                                                                                   : NNT_HARVEST_TRUNCATE,
        .batch = o->patch_rows ? o->patch_rows : 8,
        .dtype = !strcmp(dt, "f32") ? NNT_F32 : !strcmp(dt, "f16") ? NNT_F16 : NNT_BF16,
        .shard_bytes = (uint64_t)((o->shard_mb > 0 ? o->shard_mb : 256.0) * 1048576.0),
        .positions = pos,
        .n_positions = n_pos,
        .add_special = !o->no_special,
        .max_tokens = o->max_tokens,
        .reduce = o->reduce,
        .n_reduce = o->n_reduce,
        .routing_stats = o->routing_stats,
        .top_tokens = o->top_tokens,
        .top_features = fp,
        .top_features_k = fk,
        .n_top_features = nf,
        .top_contexts = cp,
        .top_contexts_k = ck,
        .n_top_contexts = nc,
        .out_dir = o->out,
        .progress = isatty(2) ? show : NULL,
        .progress_user = &pr,
    };
    nnt_harvest_progress done;
    nnt_status st = nnt_harvest(c->m, &s, &done);
    if (pr.shown) fputc('\n', stderr);
    free(fp), free(cp), free(fk), free(ck), free(pos);
    nnt_request_free(req);
    if (st != NNT_OK) return cli_fail(o, c->rt, "harvest");
    printf("harvest: %lld rows, %lld tokens, %lld shards in %s%s\n", (long long)done.rows, (long long)done.tokens,
           (long long)done.shards, o->out, done.resumed ? " (continued an earlier run)" : "");
    if (o->n_reduce || o->routing_stats || nc) printf("statistics: %s/stats.safetensors\n", o->out);
    return 0;
}
