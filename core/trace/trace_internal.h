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
    REQ_COTANGENT  /* a cotangent dL/dV handed in for a value (param): a term of the trace's scalar */
} req_kind;

typedef struct request {
    req_kind kind;
    char *text;
    nnt_path path;
    nnt_edit_fn fn;
    void *user;
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
} cell;

typedef struct result {
    char *path;
    int occurrence_of_request; /* the request that saved it */
    nnt_value_id slot;
    int layer;
    int step;
    int none;
    nnt_tensor t;
} result;

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
};


/* A new request of `kind` on value path `text` (checked: parsed, served, writable for an edit;
 * a slice only on a save or gradient), appended to t's list; *out points into the list until
 * the next request is added. Errors: NNT_ERR_PATH, NNT_ERR_NOT_SERVED, NNT_ERR_READ_ONLY,
 * NNT_ERR_OUT_OF_MEMORY (the runtime's error). */
nnt_status nnt_trace_add_request(nnt_trace *t, req_kind kind, const char *text, request **out);
/* A save (REQ_SAVE) or gradient (REQ_GRAD) request of path, which may end in a [...] slice. */
nnt_status nnt_trace_save_kind(nnt_trace *t, req_kind kind, const char *path);
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

/* ---- trace_grad.c ---- */
/* 1 when the trace asks for a gradient (a gradient request, a metric or a cotangent). */
int nnt_trace_wants_grad(const nnt_trace *t);
/* The gradient side of an emission of (slot, layer), after nnt_run_emit applied its edits: records
 * the edits' elementwise Jacobian on the model's tape, marks the value where a gradient request, a
 * cotangent or the metric needs it, and keeps the logits a metric reads. Does nothing unless the
 * model's tape records and the trace has requests on the value (value NULL: nothing). */
nnt_status nnt_trace_grad_emit(nnt_run *run, nnt_value_id slot, int layer, nnt_tensor *value);
/* nnt_trace_run when the trace asks for a gradient (trace_backward.c): the forward recorded on the
 * model's tape, the scalar's seeds, the backward, the "grad:" and "metric" results. */
nnt_status nnt_trace_run_grad(nnt_trace *t, const int32_t *ids, const int32_t *mask, int batch, int seq);
/* Frees what the trace's metric owns (its text, positions, logits) and clears it (trace.c). */
void nnt_trace_metric_clear(nnt_trace *t);

#endif /* NNT_TRACE_INTERNAL_H */
