/* grad_memory.c - the estimate of what a backward keeps, per block and in all, from a model's
 * dimensions (grad_memory.h), and the default bound on it (half the machine's available memory). */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "grad/grad_memory.h"

static int64_t max64(int64_t a, int64_t b)
{
    return a > b ? a : b;
}

void nnt_grad_dims_of(const nnt_model_info *i, nnt_grad_dims *d)
{
    *d = (nnt_grad_dims){.layers = i->num_layers, .hidden = i->hidden_size, .streams = i->num_streams,
                         .heads = i->num_heads, .kv_heads = i->num_kv_heads, .qk_head_dim = i->qk_head_dim,
                         .head_dim = i->head_dim, .intermediate = i->intermediate_size, .experts = i->num_experts,
                         .top_k = i->top_k, .vocab = i->vocab_size};
    if (!d->qk_head_dim) d->qk_head_dim = d->head_dim;
}

void nnt_grad_memory_estimate(const nnt_grad_dims *d, int64_t batch, int64_t seq, nnt_grad_memory *out)
{
    memset(out, 0, sizeof *out);
    int64_t S = max64(d->streams, 1), H = d->hidden, nh = max64(d->heads, d->kv_heads);
    int64_t qk = max64(d->qk_head_dim, 0), vd = max64(d->head_dim, 0), I = d->intermediate, k = d->top_k;
    int64_t keys = 2 * seq; /* a query's keys: <= seq tokens, and <= seq compressed entries */
    /* floats kept per token of one block, term by term (the ops' kept inputs, tape_ops*.c) */
    int64_t f = 4 * S * H + 4 * H + 4 * S * S + 4 * S  /* norms' and hyper-connections' inputs, stream mixes */
              + 4 * nh * qk + 2 * nh * vd               /* q and k norms, the scores' q and k, the mix's v */
              + 2 * nh * keys                           /* the softmax's probabilities, read again by the mix */
              + d->experts + k                          /* the router's logits and choice */
              + (k + 1) * (2 * I + H + 1)               /* per routed row and a shared expert: swiglu's gate and
                                                         * up, scale_rows' rows and weight */
              + 8 * max64(qk, vd);                      /* compressors: entries and gates, overlapped windows */
    uint64_t tokens = (uint64_t)batch * (uint64_t)seq;
    out->block_keep = tokens * (uint64_t)f * 4u;
    out->readout_keep = tokens * (uint64_t)(2 * S * H + H) * 4u;
    out->keep_all = (uint64_t)d->layers * out->block_keep + out->readout_keep;
    out->stream = tokens * (uint64_t)(S * H) * 4u;
    out->recompute = (uint64_t)d->layers * out->stream + out->block_keep + out->readout_keep;
    uint64_t logits = tokens * (uint64_t)d->vocab * 4u;
    out->forward = (out->block_keep > logits ? out->block_keep : logits) + out->stream;
    out->forward_blocked = tokens * (uint64_t)(f - 2 * nh * keys) * 4u + out->stream;
    /* the gradient memory shadows the activation memory the record touched: the forward's, and
     * for recomputation one block's */
    out->gradient_keep = out->forward;
    out->gradient_recompute = out->forward;
}

uint64_t nnt_grad_default_bound(void)
{
    FILE *f = fopen("/proc/meminfo", "r");
    if (f) {
        char line[256];
        unsigned long long kb = 0;
        while (fgets(line, sizeof line, f))
            if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1) break;
        fclose(f);
        if (kb) return (uint64_t)kb * 1024u / 2u;
    }
    long pages = sysconf(_SC_PHYS_PAGES), size = sysconf(_SC_PAGESIZE);
    if (pages > 0 && size > 0) return (uint64_t)pages * (uint64_t)size / 2u;
    return (uint64_t)8 << 30;
}
