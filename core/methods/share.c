/* share.c - several trace requests run as one forward, or several greedy generations as one
 * (nnt_request_run_shared, nnt_methods.h): the rows of all of them make one batch, each
 * request's edits and saves are limited to its own rows (nnt_request_apply_rows, the per-row
 * edits of docs/requests.md), and after the run each request gets its own results under the keys
 * its own run would give them (nnt_trace_split), a generation its own rows' tokens. What a
 * server does with requests of different users for the same model: one forward of B rows costs
 * far less than B forwards of one. */
#include <stdlib.h>
#include <string.h>

#include "internal.h"

/* The requests' batches, each padded to the same length, one after the other. */
static nnt_status join_batches(nnt_runtime *rt, nnt_batch *each, int n, nnt_batch *all)
{
    int rows = 0, seq = each[0].seq;
    for (int j = 0; j < n; j++) {
        if (each[j].seq != seq)
            return nnt_err_set(&rt->err, NNT_ERR_INVALID_ARGUMENT,
                               "shared forward: request %d's rows are %d tokens long and request 0's %d; requests "
                               "share a forward only at one length", j, each[j].seq, seq);
        rows += each[j].batch;
    }
    all->batch = rows;
    all->seq = seq;
    all->ids = malloc(sizeof *all->ids * (size_t)rows * (size_t)seq);
    all->mask = malloc(sizeof *all->mask * (size_t)rows * (size_t)seq);
    all->lens = malloc(sizeof *all->lens * (size_t)rows);
    if (!all->ids || !all->mask || !all->lens) return nnt_err_set(&rt->err, NNT_ERR_OUT_OF_MEMORY, "no memory");
    for (int j = 0, r = 0; j < n; r += each[j].batch, j++) {
        size_t cells = (size_t)each[j].batch * (size_t)seq;
        memcpy(all->ids + (size_t)r * (size_t)seq, each[j].ids, cells * sizeof *all->ids);
        memcpy(all->mask + (size_t)r * (size_t)seq, each[j].mask, cells * sizeof *all->mask);
        memcpy(all->lens + r, each[j].lens, (size_t)each[j].batch * sizeof *all->lens);
    }
    return NNT_OK;
}

static nnt_status run_shared(nnt_model *m, const nnt_request *const *reqs, int n, nnt_result **out)
{
    nnt_runtime *rt = m->rt;
    nnt_batch *each = calloc((size_t)n, sizeof *each), all = {0};
    nnt_trace *shared = NULL, **mine = calloc((size_t)n, sizeof *mine);
    int *first = calloc((size_t)n + 1, sizeof *first);
    nnt_status st = each && mine && first ? NNT_OK : nnt_err_set(&rt->err, NNT_ERR_OUT_OF_MEMORY, "no memory");
    for (int j = 0; st == NNT_OK && j < n; j++) {
        if (!nnt_request_shareable(reqs[j]))
            st = nnt_err_set(&rt->err, NNT_ERR_INVALID_ARGUMENT,
                             "shared forward: request %d cannot share one (only traces and greedy generations "
                             "without gradients, SAEs, callbacks, steps, skip_layers or ablate_expert)", j);
        else if (!nnt_request_share_compatible(reqs[0], reqs[j]))
            st = nnt_err_set(&rt->err, NNT_ERR_INVALID_ARGUMENT,
                             "shared forward: request %d cannot share one with request 0 (another method, or "
                             "generations of other max_new_tokens, ignore_eos or stop ids)", j);
        else
            st = nnt_request_batch(reqs[j], m, &each[j]);
    }
    const nnt_generate_opts *gen = st == NNT_OK ? nnt_request_generate_opts(reqs[0], NULL) : NULL;
    int32_t *stops = NULL, *tokens = NULL;
    int n_stops = 0;
    if (st == NNT_OK) st = join_batches(rt, each, n, &all);
    if (st == NNT_OK) st = nnt_trace_new(m, &shared);
    for (int j = 0, row0 = 0; st == NNT_OK && j < n; row0 += each[j].batch, j++) {
        first[j] = nnt_trace_request_count(shared);
        st = nnt_request_apply_rows(reqs[j], shared, row0, each[j].batch);
    }
    if (st == NNT_OK) {
        first[n] = nnt_trace_request_count(shared);
        if (!gen) {
            st = nnt_trace_run(shared, all.ids, all.mask, all.batch, all.seq);
        } else if ((st = nnt_generation_stops(m, reqs[0], &stops, &n_stops)) == NNT_OK) {
            nnt_generate_opts g = *gen;
            g.stop_ids = n_stops ? stops : NULL;
            g.n_stop_ids = n_stops;
            tokens = calloc((size_t)all.batch * (size_t)(g.max_new_tokens > 0 ? g.max_new_tokens : 1), sizeof *tokens);
            st = tokens ? nnt_generate(m, shared, all.ids, all.mask, all.batch, all.seq, &g, tokens)
                        : nnt_err_set(&rt->err, NNT_ERR_OUT_OF_MEMORY, "no memory");
        }
    }
    for (int j = 0; st == NNT_OK && j < n; j++) st = nnt_trace_new(m, &mine[j]);
    if (st == NNT_OK) st = nnt_trace_split(shared, first, n, mine, &rt->err);
    for (int j = 0, row0 = 0; st == NNT_OK && j < n; j++) {
        int rows = each[j].batch;
        st = nnt_result_of_trace(rt, &each[j], mine[j], &out[j]);
        if (st == NNT_OK) mine[j] = NULL;
        if (st == NNT_OK && gen)
            st = nnt_result_add_tokens(out[j], tokens + (size_t)row0 * (size_t)gen->max_new_tokens,
                                       gen->max_new_tokens, stops, n_stops);
        row0 += rows;
    }
    if (st != NNT_OK)
        for (int j = 0; j < n; j++) {
            nnt_result_free(out[j]);
            out[j] = NULL;
        }
    for (int j = 0; each && j < n; j++) nnt_batch_free(&each[j]);
    for (int j = 0; mine && j < n; j++) nnt_trace_free(mine[j]);
    nnt_batch_free(&all);
    nnt_trace_free(shared);
    free(stops);
    free(tokens);
    free(each);
    free(mine);
    free(first);
    return st;
}

nnt_status nnt_request_run_shared(nnt_model *m, const nnt_request *const *reqs, int n, nnt_result **out)
{
    if (!m || !reqs || !out || n < 1) return NNT_ERR_INVALID_ARGUMENT;
    for (int j = 0; j < n; j++) out[j] = NULL;
    NNT_GUARDED(m->rt, "nnt_request_run_shared", run_shared(m, reqs, n, out));
}
