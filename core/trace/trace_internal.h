/* trace_internal.h - what the parts of a trace share (trace.c: requests, cells, results and
 * emission; trace_grad.c: gradient requests and the backward after a forward): the request,
 * cell and result records and the functions one part calls in the other. Internal to libnnt. */
#ifndef NNT_TRACE_INTERNAL_H
#define NNT_TRACE_INTERNAL_H

#include "internal.h"

/* The built-in scalar of a gradient request (nnt_trace_metric): a metric of the logits at chosen
 * positions summed over rows and positions, or the language-model loss. */
typedef enum trace_metric_kind { TM_NONE = 0, TM_LOGIT_DIFF, TM_PROB, TM_LOGPROB, TM_LOSS } trace_metric_kind;
typedef struct trace_metric {
    trace_metric_kind kind;
    int32_t a, b;    /* token ids: logit-diff A,B; prob / logprob T */
    int *positions;  /* sequence positions (negative: from the end); NULL: the last */
    int n_positions;
    char *text;      /* the metric as given, for messages */
} trace_metric;

/* Tape tags of the residual stream at a stage's ends (cell tags are >= 0): the stream entering
 * block first_layer (marked before that block's layer_input edits) and leaving block
 * end_layer - 1 (marked after every other mark of layer_output). */
#define TRACE_TAG_STREAM_IN (-2)
#define TRACE_TAG_STREAM_OUT (-3)

/* The memory modes of a gradient run (docs/gradients.md, "Memory"): decided by the INI's
 * [grad] mode and memory_gb unless a caller forced them (nnt_trace_grad_memory). */
typedef enum trace_grad_mode { TRACE_GRAD_AUTO = 0, TRACE_GRAD_KEEP, TRACE_GRAD_RECOMPUTE } trace_grad_mode;

/* A gradient run's state across its forward calls, and what it measured. */
typedef struct trace_grad_state {
    trace_grad_mode forced;   /* TRACE_GRAD_AUTO: the INI decides */
    double forced_bound;      /* bytes the kept activations may take (> 0: overrides memory_gb) */
    int unrecorded_pass;      /* 1 during recomputation's first pass: a gradient trace runs unrecorded */
    int saves_off;            /* 1 while a block is recomputed: its saves were made by the first pass */
    int keep_results;         /* 1 after the run's first call: later calls add to the results */
    int stream_in_layer;      /* the block whose layer_input gets TRACE_TAG_STREAM_IN, or -1 */
    int stream_out_layer;     /* the block whose layer_output gets TRACE_TAG_STREAM_OUT, or -1 */
    int stream_in_marked, stream_out_marked;
    /* measured by the last gradient run */
    trace_grad_mode used;     /* TRACE_GRAD_KEEP or TRACE_GRAD_RECOMPUTE */
    size_t peak_kept_bytes;   /* the most the tape kept at once (nnt_tape_kept_bytes) */
    size_t streams_bytes;     /* recomputation: the block inputs held on the host */
    uint64_t estimate_keep, estimate_recompute, bound; /* the estimate the choice read, and the bound */
} trace_grad_state;

typedef enum req_kind {
    REQ_SAVE,
    REQ_KEEP, /* internal: holds a value a later masked fill reads */
    REQ_EDIT_FN,
    REQ_SET,
    REQ_ADD,
    REQ_SCALE,
    REQ_ZERO,
    REQ_MASKED_FILL,
    REQ_COPY_FROM, /* value := an earlier value (skip_layers) */
    REQ_STEER,     /* value[..., positions, ..., :] += factor * vector */
    REQ_GRAD,      /* the gradient of the trace's scalar at a value, saved as "grad:PATH" (trace_grad.c) */
    REQ_COTANGENT, /* a cotangent dL/dV handed in for a value (param): a term of the trace's scalar */
    REQ_HOOK       /* a core method run on the value at emission (hook_ops, user: its state; trace_sae.c) */
} req_kind;

/* What a REQ_HOOK request does, called through these pointers only (so that trace.c calls no
 * method's file): apply at emission (v host memory, the value's dtype and shape; path its
 * canonical name), check against the value's info when a run starts (vi; NULL: no check), claim
 * a save of a path of its own ("PATH.sae.feature_acts": *claimed 1, then its status), release
 * its state with the request. `what` names it in messages ("an SAE"). */
typedef struct trace_hook_ops {
    const char *what;
    nnt_status (*apply)(nnt_run *run, void *user, const char *path, int layer, nnt_tensor *v);
    nnt_status (*check)(nnt_trace *t, void *user, const char *path, const nnt_value_info *vi, nnt_error *err);
    nnt_status (*save)(nnt_trace *t, void *user, const char *path, int *claimed, nnt_error *err);
    void (*release)(void *user);
} trace_hook_ops;

typedef struct request {
    req_kind kind;
    char *text;
    nnt_path path;
    nnt_edit_fn fn;
    void *user;
    const trace_hook_ops *hook_ops; /* REQ_HOOK */
    nnt_tensor param; /* owned host copy for SET / ADD */
    float factor;
    float fill;
    int64_t equals;
    nnt_value_id where_slot; /* MASKED_FILL: the value whose entries are compared; COPY_FROM: the source */
    int where_layer;     /* COPY_FROM: the source's block */
    int *positions;      /* STEER: sequence positions (negative: from the end), NULL for all;
                          * SET / ADD with by_position: the tokens written (nnt_trace_limit_positions) */
    int n_positions;
    int by_position;     /* SET / ADD: written at `positions` of each row, not as a whole value */
    int *rows;           /* batch rows the request applies to (nnt_trace_limit_rows); NULL: every row */
    int n_rows;
    char *label;         /* the request's field in a request document, for messages; NULL: none */
    int metric;          /* COTANGENT: the metric's own, on the logits (computed after the forward) */
    int label_whole;     /* the label names the path itself (an entry of "saves"): no sub-field follows it */
    int step_from, step_to; /* the session steps it applies at; step_to < 0: no end */
    int n_slice;            /* SAVE: items of its [...] slice (0: the whole value) */
    struct slice_item {
        enum { SL_INDEX, SL_RANGE, SL_ELLIPSIS } kind;
        int64_t start, stop, step; /* INDEX: start; RANGE: start:stop:step */
        int has_start, has_stop;
    } slice[NNT_MAX_DIMS + 1];
} request;

/* One axis of a resolved slice: `count` entries from `start` by `step`; `keep` 0 drops the axis
 * (an index). */
typedef struct axis_sel {
    int64_t start, step, count;
    int keep;
} axis_sel;

typedef struct cell {
    int *ids;
    int n;
    /* what the family's value_info declared for the call (set with the first request) */
    nnt_dtype dtype;
    int ndim;
    int64_t shape[NNT_MAX_DIMS];
    int may_be_none;
    int emitted; /* times the family emitted the value in this call */
    int marked;  /* a gradient mark of the value is on the model's tape (trace_grad.c) */
    int token_axis; /* the axis value_info names "seq" (the call's tokens), or -1 */
} cell;

typedef struct result {
    char *path;
    int occurrence_of_request; /* the request that saved it */
    nnt_value_id slot;
    int layer;
    int step;
    int none;
    int chunk_seen; /* chunked prefill: the current chunk's call has written its part */
    int part_open;  /* filled part by part (nnt_trace_emit_part) in this call */
    int64_t part_end; /* the end of the last part written, along the parts' axis */
    nnt_tensor t;
} result;

/* Chunked prefill (trace_chunks.c): the call being run holds tokens [t0, t0 + n) of a prompt of
 * `total` tokens run as a session, one call per chunk; saves are resolved on the whole prompt and
 * each call writes its part of them. total 0: the call is the whole input (no chunks). */
typedef struct trace_window {
    int64_t t0, n, total;
} trace_window;

typedef struct kept {
    int layer;
    nnt_value_id slot;
    int valid;
    nnt_tensor t;
} kept;

struct nnt_trace {
    nnt_model *m;
    request *reqs;
    int n_reqs, cap_reqs;
    cell *cells; /* (num_layers + 1) * NNT_VALUE_COUNT, built by nnt_trace_prepare */
    int n_cells;
    result *results;
    int n_results, cap_results;
    kept *keeps;
    int n_keeps, cap_keeps;
    nnt_call_dims dims;
    int step;                    /* of the call being run */
    int next_from, next_to;      /* step range given to requests added from now on */
    trace_metric metric;         /* the built-in scalar a gradient request differentiates */
    nnt_tensor metric_logits;    /* host copy of the logits as the forward left them (a metric's input) */
    int32_t *metric_rows;        /* the positions metric_logits' rows are (the readout computed there
                                  * alone, ascending), NULL: every position of the call */
    int n_metric_rows;
    trace_grad_state grad;       /* how a gradient run goes through the blocks (trace_recompute.c) */
    trace_window window;         /* the chunk of a longer prompt being run (chunked prefill) */
    int prefill_calls;           /* forward calls the last nnt_trace_run made: 1, or its chunks */
};


/* Resolves request r's slice on a value of shape [ndim]: one axis_sel per axis. NNT_ERR_INDEX
 * (naming the axis, its name from `axes` when given, e.g. "[batch seq hidden]") when an index
 * falls outside its axis, a range selects nothing or there are more items than axes. */
nnt_status nnt_trace_slice_resolve(const request *r, const char *path, int ndim, const int64_t *shape, const char *axes,
                                   axis_sel *ax, nnt_error *err);

/* Copies the entries `ax` selects (one per axis of src, as nnt_trace_slice_resolve gives them) of
 * host tensor src into a new host tensor *dst of the kept axes (trace_slice.c). Errors:
 * NNT_ERR_OUT_OF_MEMORY (err). */
nnt_status nnt_trace_slice_copy(const nnt_tensor *src, const axis_sel *ax, nnt_tensor *dst, nnt_error *err);

/* ---- trace_patterns.c ---- */
/* The bound on one call's saved bytes when the INI's [trace] save_mb is absent. */
#define TRACE_SAVE_DEFAULT_BYTES ((uint64_t)8192 << 20)
/* The bound on a pattern when the INI's [attention] pattern_mb is absent. */
#define TRACE_PATTERN_DEFAULT_BYTES ((uint64_t)4096 << 20)
/* NNT_OK unless request r reads, at block `layer`, a value laid out over queries and keys (vi:
 * its info for the call) whose bytes exceed [attention] pattern_mb: then NNT_ERR_OUT_OF_MEMORY
 * (err), naming the value, its shape, its bytes, the bound and the INI file. */
nnt_status nnt_trace_pattern_check(const nnt_trace *t, const request *r, int layer, const nnt_value_info *vi,
                                   nnt_error *err);

/* A host copy of src (backend or host memory) into dst, allocated here. Errors:
 * NNT_ERR_OUT_OF_MEMORY, the backend's download error (run->err). */
nnt_status nnt_trace_host_copy(nnt_run *run, const nnt_tensor *src, nnt_tensor *dst);
/* A new, empty result of request req's save of (slot, layer), keyed as nnt_trace_push_result
 * keys it and counted in t->results; *out points at it until the next result is added. Errors:
 * NNT_ERR_OUT_OF_MEMORY. */
nnt_status nnt_trace_open_result(nnt_run *run, int req, nnt_value_id slot, int layer, result **out);

/* ---- trace_parts.c: a value emitted in parts along one axis (nnt_core_api.emit_part) ---- */
/* nnt_core_api.parts_wanted and emit_part for run's trace (see nnt_family.h). */
int nnt_trace_parts_wanted(const nnt_run *run, nnt_value_id slot, int layer, int axis, int64_t extent, int64_t *lo,
                           int64_t *hi);
nnt_status nnt_trace_emit_part(nnt_run *run, nnt_value_id slot, int layer, const nnt_tensor *part, int axis,
                               int64_t first, int64_t extent);

/* ---- trace_window.c: saves of a chunk of a longer prompt ---- */
/* The index of the word "seq" in a value's axes ("[batch seq hidden_size]" -> 1), or -1. */
int nnt_trace_token_axis(const char *axes);
/* The part of `full` (the token axis's selection resolved on the whole prompt, w->total tokens)
 * inside the chunk [w->t0, w->t0 + w->n): *local in the chunk's own positions, *first the index in
 * `full` of its first entry. Returns local->count, 0 when the chunk holds none of it. */
int64_t nnt_trace_window_select(const trace_window *w, const axis_sel *full, axis_sel *local, int64_t *first);
/* Writes the part w ([w->t0, w->t0 + w->n) of w->total along axis token_axis) of save rq into
 * *dst: src is the part on the host (rows of nnt_trace_limit_rows already taken; for a chunk of
 * a prompt, run->trace->window and the "seq" axis); rq's slice is resolved on the whole extent.
 * *dst with no data yet (the first part) is allocated at the whole save's shape, zeroed, then
 * filled in; later parts fill theirs. A readout computed at the call's logits_positions only
 * (nnt_trace_readout_narrowed) is picked from. Errors: NNT_ERR_INDEX (a slice outside the
 * extent), NNT_ERR_SHAPE (a value that changed shape between parts), NNT_ERR_OUT_OF_MEMORY,
 * NNT_ERR_INTERNAL (run->err). */
nnt_status nnt_trace_window_save(nnt_run *run, const request *rq, const char *path, nnt_value_id slot, int token_axis,
                                 const trace_window *w, const nnt_tensor *src, nnt_tensor *dst);

/* The positions of a call of batch x seq tokens (mask int32 [batch, seq], 1 for a real token;
 * NULL: all real) at which trace t (NULL: none) reads the readout: those its saves of
 * lm_head_output and logits slice, those a metric of chosen positions reads (logit-diff, prob,
 * logprob: each row's p-th real token, or p from its end), the last for next_token_probs, the last
 * when nothing reads it. *out (allocated, ascending, *n entries) is NULL when every position is
 * read: a whole save, an edit, the loss, a gradient or cotangent of the readout itself. Errors:
 * NNT_ERR_OUT_OF_MEMORY (err). */
nnt_status nnt_trace_readout_positions(nnt_trace *t, int batch, int seq, const int32_t *mask, int32_t **out, int *n,
                                       nnt_error *err);
/* The readout at chosen positions (trace_readout_rows.c). 1 when value, emitted as `slot`, is the
 * readout (lm_head_output or logits) computed at the call's nnt_forward_args.logits_positions
 * only: F32 [B, K, V] with K the positions' count, below the call's seq. */
int nnt_trace_readout_narrowed(const nnt_run *run, nnt_value_id slot, const nnt_tensor *value);
/* The positions `sel` picks (axis 1 of [B, T, V], resolved on the call's T) out of such a
 * narrowed host value src [B, K, V], into a new host tensor *dst [B, sel->count, V]. Errors:
 * NNT_ERR_INTERNAL (a position the call did not compute), NNT_ERR_OUT_OF_MEMORY. */
nnt_status nnt_trace_readout_pick(const nnt_run *run, const nnt_tensor *src, const axis_sel *sel, nnt_tensor *dst);


/* A new request of `kind` on value path `text` (checked: parsed, served, writable for an edit;
 * a slice only on a save or gradient), appended to t's list; *out points into the list until
 * the next request is added. Errors: NNT_ERR_PATH, NNT_ERR_NOT_SERVED, NNT_ERR_READ_ONLY,
 * NNT_ERR_OUT_OF_MEMORY (the runtime's error). */
nnt_status nnt_trace_add_request(nnt_trace *t, req_kind kind, const char *text, request **out);
/* A save a REQ_HOOK request claims (a path of its own, such as an SAE's "PATH.sae.feature_acts"):
 * *claimed 1 and its status, else *claimed 0; the latest hook asks first. A path holding ".sae."
 * that no hook claims is claimed too, as NNT_ERR_PATH saying no SAE is attached. */
nnt_status nnt_trace_hook_save(nnt_trace *t, const char *path, int *claimed);
/* A save (REQ_SAVE) or gradient (REQ_GRAD) request of path, which may end in a [...] slice. */
nnt_status nnt_trace_save_kind(nnt_trace *t, req_kind kind, const char *path);
/* Bytes of a saved value of dtype and shape [ndim], or of the entries slice ax keeps (NULL:
 * the whole value). */
uint64_t nnt_trace_save_bytes(nnt_dtype dtype, int ndim, const int64_t *shape, const axis_sel *ax);
/* NNT_OK when total (the bytes of a call's n_saves saved values, largest the path of the biggest
 * with its bytes) is within [trace] save_mb; else NNT_ERR_OUT_OF_MEMORY naming the total, the
 * bound and the key that raises it (trace_save_bound.c). */
nnt_status nnt_trace_save_bound(const nnt_trace *t, uint64_t total, const char *largest, uint64_t largest_bytes,
                                int n_saves, nnt_error *err);
/* The saves of wildcard w (nnt_path_wildcard of text, without its slice), slice ("[...]" or NULL)
 * applied to each match it fits (trace_wildcards.c): one save request per served value, all or
 * none added. Errors: those of nnt_trace_save_kind; NNT_ERR_NOT_SERVED when nothing matches. */
nnt_status nnt_trace_save_wildcard(nnt_trace *t, const char *text, const nnt_path_wild *w, const char *slice);
/* The cell of (layer, slot) in the table nnt_trace_prepare built, or NULL. */
cell *nnt_trace_cell(nnt_trace *t, int layer, nnt_value_id slot);
/* Applies edit request r to v (host memory), as at emission. */
nnt_status nnt_trace_apply_edit(nnt_run *run, const request *r, int layer, nnt_tensor *v);
/* Appends a result for request `req` (a save or a gradient) of (slot, layer) from value (host or
 * backend memory; NULL: None), the request's rows and slice applied; the key as nnt.h describes,
 * "grad:" in front for a gradient. */
nnt_status nnt_trace_push_result(nnt_run *run, int req, nnt_value_id slot, int layer, const nnt_tensor *value);
/* Appends a result under key (owned copy of host tensor value). */
nnt_status nnt_trace_push_named(nnt_trace *t, const char *key, const nnt_tensor *value, nnt_error *err);

/* ---- trace_chunks.c ---- */
/* nnt_trace_run's prefill in chunks: when one forward of batch x seq tokens would exceed the
 * INI's [prefill] bound (memory_mb, or chunk_tokens given outright) and every request of t is a
 * save that chunks can serve (a value with a "seq" axis of the call's tokens, or
 * next_token_probs), runs the prompt as a session, chunk after chunk, each save filled in part by
 * part (*ran = 1). Otherwise nothing runs (*ran = 0) and the caller runs one forward. Errors: the
 * forward's and the session's (the runtime's error). */
nnt_status nnt_trace_run_chunked(nnt_trace *t, const int32_t *ids, const int32_t *mask, int batch, int seq, int *ran);

/* ---- trace_grad.c ---- */
/* The gradient side of an emission of (slot, layer), after nnt_run_emit applied its edits: records
 * the edits' elementwise Jacobian on the model's tape, marks the value where a gradient request, a
 * cotangent or the metric needs it, and keeps the logits a metric reads. Does nothing unless the
 * model's tape records and the trace has requests on the value (value NULL: nothing). */
nnt_status nnt_trace_grad_emit(nnt_run *run, nnt_value_id slot, int layer, nnt_tensor *value);
/* Before a gradient run of batch x seq tokens (trace_backward.c): a scalar exists (a metric or a
 * cotangent), a gradient is asked, every cotangent has its value's shape for this call. Errors:
 * NNT_ERR_INVALID_ARGUMENT, NNT_ERR_SHAPE (naming the cotangent and both shapes). */
nnt_status nnt_trace_grad_check(nnt_trace *t, int batch, int seq);
/* nnt_trace_run when the trace asks for a gradient (trace_recompute.c): the checks, the choice of
 * mode, then keep-everything (one recorded forward, one reverse pass) or recomputation. */
nnt_status nnt_trace_run_grad(nnt_trace *t, const int32_t *ids, const int32_t *mask, int batch, int seq);
/* One pipeline stage's backward, the step recomputation repeats block by block and pipeline
 * ranks will repeat stage by stage (trace_backward.c).
 *
 * Reruns blocks [first, end) of t's model (0 <= first < end <= num_layers) on ids / mask
 * (int32 [batch, seq]; mask NULL: every token real) with the model's tape recording and t's
 * edits applied as in any forward, then runs the reverse pass and frees the record.
 *   hidden_in:    float32 host [batch, seq, streams, hidden] entering block `first` (streams =
 *                 nnt_model_info.num_streams, at least 1), or NULL exactly when first is 0 (the
 *                 stage embeds input_ids). Read only.
 *   d_hidden_out: float32 host, same shape: dL/d(the stream leaving block end - 1), the cotangent
 *                 the next stage handed back, or NULL exactly when end is num_layers (the stage
 *                 holds the readout, and the trace's metric is evaluated and seeded here).
 *   d_hidden_in:  float32 host, same shape, written with dL/d hidden_in (the sum of every seed's
 *                 contribution through this stage and d_hidden_out), or NULL (first 0: no stream
 *                 enters; otherwise the gradient is not wanted).
 * The trace's cotangents on values the stage holds are seeded; each gradient request on a value
 * the stage holds is answered as a "grad:PATH" result (float32, the value's shape, its slice
 * applied); the stage holding the logits adds "metric" (float32, no axes). Saves are made unless
 * t->grad.saves_off. *kept (may be NULL): the bytes the tape kept for this stage.
 * Errors: the forward's (NNT_ERR_INVALID_ARGUMENT for a bad range or buffers), NNT_ERR_UNSUPPORTED
 * (a family that does not emit layer_input / layer_output at the stage's ends, an op without a
 * backward entry), NNT_ERR_OUT_OF_MEMORY; the runtime's error says which. */
nnt_status nnt_trace_stage_backward(nnt_trace *t, const int32_t *ids, const int32_t *mask, int batch, int seq,
                                    int first, int end, const float *hidden_in, const float *d_hidden_out,
                                    float *d_hidden_in, size_t *kept);
/* The memory mode of a gradient run of batch x seq tokens over `blocks` blocks (0: all; a
 * pipeline stage's count otherwise) (trace_recompute.c): the forced one,
 * else the INI's [grad] mode, else (auto) keep-everything when its estimate fits [grad] memory_gb
 * (default: half of MemAvailable) and recomputation otherwise; recorded in t->grad. Errors:
 * NNT_ERR_OUT_OF_MEMORY (refused before running) when even recomputation's estimate exceeds the
 * bound, naming the prompt length, the bytes and the INI key. */
nnt_status nnt_trace_grad_choose(nnt_trace *t, int batch, int seq, int blocks, trace_grad_mode *mode);
/* Forces the memory mode of t's later gradient runs (mode: TRACE_GRAD_KEEP, TRACE_GRAD_RECOMPUTE,
 * or TRACE_GRAD_AUTO to let the INI decide) and, when bound_bytes > 0, the bound the automatic
 * choice compares with (in place of [grad] memory_gb). For tests and the methods that need one
 * mode; a forced mode is never refused. */
void nnt_trace_grad_memory(nnt_trace *t, int mode, double bound_bytes);
/* What t's last gradient run did: its mode (TRACE_GRAD_KEEP or TRACE_GRAD_RECOMPUTE; 0 before any
 * run), the most bytes the tape kept at once, the bytes of the block inputs recomputation held on
 * the host, and the estimates and bound the choice compared (bytes). Any pointer may be NULL. */
void nnt_trace_grad_report(const nnt_trace *t, int *mode, size_t *peak_kept, size_t *streams, uint64_t *estimate_keep,
                           uint64_t *estimate_recompute, uint64_t *bound);
/* A gradient run block by block (trace_recompute.c): a first unrecorded pass keeping each block's
 * input stream on the host, then nnt_trace_stage_backward from the last block to the first. */
nnt_status nnt_trace_run_grad_recompute(nnt_trace *t, const int32_t *ids, const int32_t *mask, int batch, int seq);
/* Recomputation over one stage's blocks [first, end) (the whole model: 0, num_layers, NULL, NULL,
 * NULL, 0): the same first pass over blocks first..end-2 from hidden_in, then each block's
 * backward from end-1 down to first, d_hidden_out seeding block end-1 and the gradient of the
 * stream entering `first` written to d_hidden_in (buffers as nnt_trace_stage_backward's).
 * saves_made: the stage's saves were made by an earlier unrecorded pass (a pipeline stage's
 * forward), so none is made again and the results are kept. Errors: nnt_trace_stage_backward's,
 * NNT_ERR_OUT_OF_MEMORY for the block inputs (end - first - 1 streams held on the host). */
nnt_status nnt_trace_recompute_stage(nnt_trace *t, const int32_t *ids, const int32_t *mask, int batch, int seq,
                                     int first, int end, const float *hidden_in, const float *d_hidden_out,
                                     float *d_hidden_in, int saves_made);
/* Frees what the trace's metric owns (its text, positions, logits) and clears it (trace.c). */
void nnt_trace_metric_clear(nnt_trace *t);

#endif /* NNT_TRACE_INTERNAL_H */
