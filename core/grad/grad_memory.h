/* grad_memory.h - what a backward holds, estimated from a model's dimensions before it runs:
 * the inputs the gradient tape keeps in keep-everything mode and in per-block recomputation, the
 * gradient memory of the reverse pass, and the forward's own activations for comparison. Used by
 * a trace's choice of mode (trace_recompute.c) and by `nnt plan --grad`. Internal to libnnt. */
#ifndef NNT_GRAD_MEMORY_H
#define NNT_GRAD_MEMORY_H

#include <stdint.h>

#include <nnt/nnt_types.h>

/* The dimensions the estimate reads (0 where a model has none): blocks, hidden width, residual
 * streams (>= 1), query heads, key/value heads, the queries' and keys' head width, the values' head
 * width, the widest feed-forward intermediate (dense or expert), experts, experts per token,
 * vocabulary. */
typedef struct nnt_grad_dims {
    int64_t layers, hidden, streams, heads, kv_heads, qk_head_dim, head_dim, intermediate, experts, top_k, vocab;
} nnt_grad_dims;

/* Bytes, for one backward of batch x seq tokens (all float32). Every *_keep figure is an upper
 * bound of nnt_tape_kept_bytes: it counts, per token, every input a recorded op keeps, with each
 * width bounded from above (key/value heads by query heads, a block's keys by 2 seq, every block
 * as wide as the widest; docs/gradients.md, "Memory"). */
typedef struct nnt_grad_memory {
    uint64_t block_keep;    /* one block's record */
    uint64_t readout_keep;  /* the final norm (and stream collapse) after the last block */
    uint64_t keep_all;      /* keep-everything: layers x block_keep + readout_keep */
    uint64_t stream;        /* one block's input stream [batch, seq, streams, hidden] */
    uint64_t recompute;     /* recomputation: layers x stream (the block inputs) + the largest record
                             * at once (block_keep + readout_keep, for the last block) */
    uint64_t forward;       /* the forward's activations at once: one block's, or the logits */
    uint64_t forward_blocked; /* the same with attention run in blocks of queries (the kit's fam_attend):
                               * one block's activations but its pattern, plus the stream; the blocks'
                               * scores are bounded apart ([attention] block_mb) */
    uint64_t gradient_keep, gradient_recompute; /* the reverse pass's gradient memory in each mode */
} nnt_grad_memory;

/* The estimate's dimensions from a loaded model's info (qk_head_dim defaults to head_dim). */
void nnt_grad_dims_of(const nnt_model_info *info, nnt_grad_dims *d);

/* Fills *out for dims d and a call of batch rows of seq tokens (batch, seq >= 1). */
void nnt_grad_memory_estimate(const nnt_grad_dims *d, int64_t batch, int64_t seq, nnt_grad_memory *out);

/* The bound a backward's kept bytes get when the INI names none: half of MemAvailable in
 * /proc/meminfo, else half of the physical pages sysconf reports, else 8 GiB. */
uint64_t nnt_grad_default_bound(void);

#endif /* NNT_GRAD_MEMORY_H */
