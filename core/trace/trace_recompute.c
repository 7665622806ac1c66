/* trace_recompute.c - the memory of a trace's gradient run: the choice between keep-everything and
 * per-block recomputation (the estimate against [grad] memory_gb), and recomputation itself: an
 * unrecorded first pass block by block keeping each block's input stream, then every block's
 * backward from the last to the first (nnt_trace_stage_backward), the gradient of each block's
 * input stream handed to the block before, over the whole model or one pipeline stage's blocks;
 * and the gradient run that picks between them.
 * docs/gradients.md, "Memory". */
#include <stdlib.h>
#include <string.h>

#include "trace_internal.h"
#include "grad/grad_memory.h"
#include "grad/tape.h"

void nnt_trace_grad_memory(nnt_trace *t, int mode, double bound_bytes)
{
    if (!t) return;
    t->grad.forced = mode == TRACE_GRAD_KEEP || mode == TRACE_GRAD_RECOMPUTE ? (trace_grad_mode)mode : TRACE_GRAD_AUTO;
    t->grad.forced_bound = bound_bytes > 0 ? bound_bytes : 0;
}

nnt_status nnt_trace_grad_choose(nnt_trace *t, int batch, int seq, int blocks, trace_grad_mode *mode)
{
    nnt_model *m = t->m;
    const nnt_ini *ini = m->rt->ini;
    nnt_grad_dims d;
    nnt_grad_dims_of(&m->info, &d);
    if (blocks > 0 && blocks < d.layers) d.layers = blocks; /* one pipeline stage's blocks */
    nnt_grad_memory gm;
    nnt_grad_memory_estimate(&d, batch, seq, &gm);
    uint64_t bound = t->grad.forced_bound > 0                  ? (uint64_t)t->grad.forced_bound
                     : ini && ini->grad_memory_gb > 0 ? (uint64_t)(ini->grad_memory_gb * 1e9)
                                                              : nnt_grad_default_bound();
    trace_grad_mode want = t->grad.forced != TRACE_GRAD_AUTO ? t->grad.forced
                           : ini && ini->grad_mode == 1      ? TRACE_GRAD_KEEP
                           : ini && ini->grad_mode == 2      ? TRACE_GRAD_RECOMPUTE
                                                             : TRACE_GRAD_AUTO;
    t->grad.estimate_keep = gm.keep_all;
    t->grad.estimate_recompute = gm.recompute;
    t->grad.bound = bound;
    if (want == TRACE_GRAD_AUTO) want = gm.keep_all <= bound ? TRACE_GRAD_KEEP : TRACE_GRAD_RECOMPUTE;
    /* recomputation over the bound is refused unless the caller forced it (a test's decision) */
    if (t->grad.forced == TRACE_GRAD_AUTO && want == TRACE_GRAD_RECOMPUTE && gm.recompute > bound)
        return nnt_err_set(&m->rt->err, NNT_ERR_OUT_OF_MEMORY,
                           "a backward of %d row(s) x %d tokens needs about %.3f GB even block by block (%d block "
                           "inputs of %.3f GB, and one block's record of %.3f GB), over the %.3f GB bound; raise "
                           "[grad] memory_gb in %s or shorten the prompt",
                           batch, seq, (double)gm.recompute / 1e9, (int)d.layers, (double)gm.stream / 1e9,
                           (double)(gm.block_keep + gm.readout_keep) / 1e9, (double)bound / 1e9,
                           m->rt->config_path ? m->rt->config_path : "the INI");
    *mode = want;
    return NNT_OK;
}

void nnt_trace_grad_report(const nnt_trace *t, int *mode, size_t *peak_kept, size_t *streams, uint64_t *estimate_keep,
                           uint64_t *estimate_recompute, uint64_t *bound)
{
    if (mode) *mode = t ? (int)t->grad.used : 0;
    if (peak_kept) *peak_kept = t ? t->grad.peak_kept_bytes : 0;
    if (streams) *streams = t ? t->grad.streams_bytes : 0;
    if (estimate_keep) *estimate_keep = t ? t->grad.estimate_keep : 0;
    if (estimate_recompute) *estimate_recompute = t ? t->grad.estimate_recompute : 0;
    if (bound) *bound = t ? t->grad.bound : 0;
}

nnt_status nnt_trace_recompute_stage(nnt_trace *t, const int32_t *ids, const int32_t *mask, int batch, int seq,
                                     int first, int end, const float *hidden_in, const float *d_hidden_out,
                                     float *d_hidden_in, int saves_made)
{
    nnt_model *m = t->m;
    nnt_error *err = &m->rt->err;
    int n_in = end - first - 1; /* the inputs of blocks first+1 .. end-1 */
    size_t S = m->info.num_streams > 0 ? (size_t)m->info.num_streams : 1;
    size_t n = (size_t)batch * (size_t)seq * S * (size_t)m->info.hidden_size;
    /* in[l - first - 1]: the stream entering block l; dx, dy: the gradients passed block to block */
    float *in = n_in > 0 ? malloc((size_t)n_in * n * sizeof *in) : NULL;
    float *dx = malloc(n * sizeof *dx), *dy = malloc(n * sizeof *dy);
    t->grad.used = TRACE_GRAD_RECOMPUTE;
    t->grad.peak_kept_bytes = 0;
    t->grad.streams_bytes = (size_t)(n_in > 0 ? n_in : 0) * n * sizeof(float);
    nnt_status st = (n_in > 0 && !in) || !dx || !dy
                        ? nnt_err_set(err, NNT_ERR_OUT_OF_MEMORY, "no memory for %d block inputs of %zu bytes", n_in,
                                      n * sizeof(float))
                        : NNT_OK;
#define IN(l) ((l) == first ? hidden_in : in + (size_t)((l) - first - 1) * n)
    /* the first pass: blocks first..end-2 unrecorded, their saves made unless a stage forward made
     * them already, each block's output kept */
    t->grad.unrecorded_pass = 1;
    t->grad.saves_off = saves_made;
    t->grad.keep_results = saves_made;
    for (int l = first; st == NNT_OK && l < end - 1; l++) {
        nnt_stage_call sc = {l, l + 1, IN(l), in + (size_t)(l - first) * n, 0};
        st = nnt_model_forward(m, t, NULL, ids, mask, batch, seq, &sc, err);
        t->grad.keep_results = 1;
    }
    t->grad.unrecorded_pass = 0;
    /* the backward block by block; the last block's recorded pass makes its own saves (unless made) */
    for (int l = end - 1; st == NNT_OK && l >= first; l--) {
        size_t kept = 0;
        const float *d_out = l == end - 1 ? d_hidden_out : dy;
        float *d_in = l == first ? d_hidden_in : dx;
        st = nnt_trace_stage_backward(t, ids, mask, batch, seq, l, l + 1, l ? IN(l) : NULL, d_out, l ? d_in : NULL,
                                      &kept);
        t->grad.keep_results = 1;
        t->grad.saves_off = 1;
        if (kept > t->grad.peak_kept_bytes) t->grad.peak_kept_bytes = kept;
        float *swap = dx;
        dx = dy;
        dy = swap;
    }
#undef IN
    t->grad.unrecorded_pass = 0;
    t->grad.saves_off = 0;
    t->grad.keep_results = 0;
    free(in);
    free(dx);
    free(dy);
    return st;
}

nnt_status nnt_trace_run_grad_recompute(nnt_trace *t, const int32_t *ids, const int32_t *mask, int batch, int seq)
{
    return nnt_trace_recompute_stage(t, ids, mask, batch, seq, 0, t->m->info.num_layers, NULL, NULL, NULL, 0);
}

/* Keep-everything: the whole forward recorded, one reverse pass. */
static nnt_status run_keep(nnt_trace *t, const int32_t *ids, const int32_t *mask, int batch, int seq)
{
    size_t kept = 0;
    nnt_status st = nnt_trace_stage_backward(t, ids, mask, batch, seq, 0, t->m->info.num_layers, NULL, NULL, NULL,
                                             &kept);
    t->grad.used = TRACE_GRAD_KEEP;
    t->grad.peak_kept_bytes = kept;
    t->grad.streams_bytes = 0;
    return st;
}

nnt_status nnt_trace_run_grad(nnt_trace *t, const int32_t *ids, const int32_t *mask, int batch, int seq)
{
    nnt_model *m = nnt_trace_model(t);
    nnt_error *err = &m->rt->err;
    if (!ids || batch <= 0 || seq <= 0)
        return nnt_err_set(err, NNT_ERR_INVALID_ARGUMENT, "a forward needs token ids and batch, seq >= 1 (got %d, %d)",
                           batch, seq);
    nnt_status st = nnt_trace_grad_check(t, batch, seq);
    trace_grad_mode mode = TRACE_GRAD_KEEP;
    if (st == NNT_OK) st = nnt_trace_grad_choose(t, batch, seq, 0, &mode);
    if (st != NNT_OK) return st;
    return mode == TRACE_GRAD_RECOMPUTE ? nnt_trace_run_grad_recompute(t, ids, mask, batch, seq)
                                        : run_keep(t, ids, mask, batch, seq);
}
