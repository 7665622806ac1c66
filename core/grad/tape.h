/* tape.h - the gradient tape: an op table that sits between a family and its backend during a
 * forward that a gradient was asked of, runs every op on the backend and records what the
 * backward needs; then a reverse pass over the record that turns a cotangent on marked values
 * into the gradients at other marked values. Families write no backward code: the backward of
 * each op is the backend's (the `*_backward` entries of nnt_backend_ops).
 *
 * How gradients find their way: the reverse pass keeps one gradient per byte of activation
 * memory (a shadow of every region the recorded ops touched), not one per tensor. Walking the
 * record backwards, an op reads the gradient of the memory it wrote, clears it (what was there
 * before the op no longer reached anything through that memory), and adds its inputs' share to
 * the gradient of the memory it read. Views, ops that work in place, outputs that alias inputs and
 * an arena that hands the same bytes to several tensors in turn are then all correct by
 * construction; each op only has to keep (copy) the input values its backward reads, since the
 * memory holding them is reused later in the forward. This is reverse-mode differentiation over
 * memory locations, as source-transformation tools do it for overwritten variables (Griewank and
 * Walther, "Evaluating Derivatives", 2008, chapter 4).
 *
 * What the tape cannot see it cannot differentiate: values computed on the host from a
 * download, or written into backend memory by upload, are constants to it (an upload clears the
 * gradient of the memory it wrote). Ops without a backward entry in the backend fail the
 * forward with an error naming the op and the entry. Weights never get a gradient. Internal
 * to libnnt. */
#ifndef NNT_TAPE_H
#define NNT_TAPE_H

#include "../internal.h" /* core/internal.h, also when a test includes this header */

typedef struct nnt_tape nnt_tape;

/* A new, empty tape over backend (be, be_ctx), which must outlive it. The backend must have the
 * backward entries the recorded ops need (checked when each op is recorded).
 * Errors: NNT_ERR_OUT_OF_MEMORY. */
nnt_status nnt_tape_new(const nnt_backend_ops *be, void *be_ctx, nnt_tape **out, nnt_error *err);
/* Frees the record, the kept inputs and the gradient memory; NULL is fine. */
void nnt_tape_free(nnt_tape *tp);
/* Starts (on 1) or stops (on 0) recording. A new tape records. While it does not, its table
 * passes every call straight to the backend, adding one indirect call and nothing else, so one
 * tape can stand between a family and its backend for the model's whole life and record only
 * the forwards a gradient is asked of. Starting frees the previous record (a backward of it is no
 * longer possible). */
void nnt_tape_record(nnt_tape *tp, int on);
/* 1 while tp records (NULL: 0). */
int nnt_tape_recording(const nnt_tape *tp);
/* Stops recording and frees the record and its kept inputs (after the backward of a forward). */
void nnt_tape_clear(nnt_tape *tp);

/* The recording op table and its context: hand these to the code whose ops are to be recorded
 * in place of the backend's. Memory ops pass straight through, and every op while the tape is
 * not recording; an entry the backend lacks is NULL here too. */
const nnt_backend_ops *nnt_tape_ops(const nnt_tape *tp);
/* unfused 1: the table's attn_fused declines every call (the INI's [attention] fused = no), so
 * attention runs as attn_scores, softmax and attn_mix; 0 (the default): it declines only while
 * recording. */
void nnt_tape_set_unfused(nnt_tape *tp, int unfused);
void *nnt_tape_ctx(nnt_tape *tp);

/* Records a mark: tensor t (F32, in the backend's memory) holds the value `tag` stands for at
 * this point of the forward. A later nnt_tape_backward can seed a cotangent there and read the
 * gradient there. Tags are the caller's (e.g. an index into its list of requested values); a
 * tag may be marked several times (each mark is its own point).
 * Errors: NNT_ERR_INVALID_ARGUMENT (t not F32), NNT_ERR_OUT_OF_MEMORY. */
nnt_status nnt_tape_mark(nnt_tape *tp, int tag, const nnt_tensor *t, nnt_error *err);

/* Records that the forward overwrote t's memory with values that do not depend on anything
 * recorded (e.g. an edit setting a value from the caller's data): its gradient is cleared there. */
nnt_status nnt_tape_constant(nnt_tape *tp, const nnt_tensor *t, nnt_error *err);

/* Records that the forward replaced t (F32, backend memory) in place by a * t + b elementwise,
 * b not depending on anything recorded: the caller's edit of a value (set, add, scale, masked
 * fill, steering), whose Jacobian is the diagonal a. a: host F32, t's element count, copied.
 * The reverse pass multiplies t's gradient by a. Errors: NNT_ERR_INVALID_ARGUMENT (t not F32),
 * NNT_ERR_OUT_OF_MEMORY. */
nnt_status nnt_tape_affine(nnt_tape *tp, const nnt_tensor *t, const float *a, nnt_error *err);

/* 1 when an op recorded so far wrote memory of t: 0 means t's values were computed where the tape
 * cannot see (on the host, then uploaded untracked), so no gradient passes through them. */
int nnt_tape_written(const nnt_tape *tp, const nnt_tensor *t);

/* A cotangent dL/dV on the value marked `tag`: F32 host memory of the mark's element count,
 * added to the gradient when the reverse pass reaches each mark of the tag (every mark of the
 * tag, when there are several: the caller marks a value once when it seeds it). */
typedef struct nnt_tape_seed {
    int tag;
    const float *cotangent;
} nnt_tape_seed;

/* A gradient wanted at the value marked `tag`: on return *grad is a new host F32 tensor of the
 * mark's shape (the caller frees it with nnt_tensor_free) holding dL/dV there, the sum of every
 * seed's contribution. With several marks of the tag, the last mark of the forward answers. */
typedef struct nnt_tape_grad {
    int tag;
    nnt_tensor *grad;
} nnt_tape_grad;

/* Runs the reverse pass over everything recorded, from the seeds to the wanted gradients. The
 * record is kept (a second backward with other seeds gives its own answers).
 * Errors: NNT_ERR_INVALID_ARGUMENT (a tag never marked, seeded or wanted), NNT_ERR_OUT_OF_MEMORY,
 * the backend's status from a backward entry. */
nnt_status nnt_tape_backward(nnt_tape *tp, const nnt_tape_seed *seeds, int n_seeds, nnt_tape_grad *grads,
                             int n_grads, nnt_error *err);

/* Bytes of the inputs the tape keeps for the backward, in the backend's memory (the gradient
 * memory a backward adds, about the activations' size, is freed when it returns). */
size_t nnt_tape_kept_bytes(const nnt_tape *tp);

/* ---- shared between tape.c (recording) and tape_backward.c (the reverse pass) ---- */

typedef enum tape_kind {
    TAPE_MARK = 0,
    TAPE_CONSTANT, /* out[0] overwritten by a constant (fill, upload, embedding, set edits) */
    TAPE_LINEAR,
    TAPE_RMS_NORM,
    TAPE_ADD,
    TAPE_SWAP12,
    TAPE_COPY,
    TAPE_SCALE,
    TAPE_ROPE,
    TAPE_ATTN_SCORES,
    TAPE_SOFTMAX,
    TAPE_ATTN_MIX,
    TAPE_SWIGLU,
    TAPE_ROUTE,
    TAPE_GATHER_ROWS,
    TAPE_SCATTER_ADD_ROWS,
    TAPE_SCATTER_ROWS,
    TAPE_SUM_AXIS1,
    TAPE_COPY_COLS,
    TAPE_AFFINE, /* out[0] := host[0] * out[0] + constant, elementwise (nnt_tape_affine) */
    TAPE_SCALE_ROWS, /* in[0] x, in[1] w (an activation: routing weights), out[0] y (may be x) */
    /* ---- hyper-connections and compressors (DeepSeek-V4; tape_ops_hyper.c, tape_backward_hyper.c) ---- */
    TAPE_HYPER_CONNECTION,
    TAPE_HYPER_MIX,
    TAPE_HYPER_HEAD,
    TAPE_COMPRESS,
    /* ---- recurrent mixers (Kimi Delta Attention; tape_ops_recurrent.c, tape_backward_recurrent.c) ---- */
    TAPE_CONV1D_CAUSAL,
    TAPE_KDA_GATE,
    TAPE_SIGMOID,
    TAPE_DELTA_RULE, /* out[2], the states, answers the marks on it after its reverse step (see mark) */
    TAPE_RMS_NORM_GATED,
    TAPE_ZERO_ROWS
} tape_kind;

/* One recorded op. in[] and out[] describe the tensors as the op saw them (their memory is the
 * forward's, reused later); keep[] are copies of the inputs the backward reads, owned by the
 * tape (backend memory); host[] copies of host arrays (positions, masks, rows, scales). */
typedef struct tape_entry {
    tape_kind kind;
    int tag;                  /* TAPE_MARK */
    nnt_tensor in[6], out[3]; /* unused slots have data NULL (delta_rule reads six inputs) */
    nnt_tensor keep[6];
    void *host[7];
    float f;                  /* eps, scale, limit, factor, mscale */
    int64_t i[3];             /* rot_start, rot_dim, style; n rows (gathers, scatters, scale_rows); src_col,
                                 dst_col, ncols; a mark's i[0]: 0, or 1 + the index of the delta_rule entry
                                 whose states it marks (it answers after that entry's reverse step, when
                                 the states' gradient is their total gradient) */
    nnt_attn_mask mask;       /* TAPE_ATTN_SCORES: pointers into host[] */
    nnt_route_params route;   /* TAPE_ROUTE */
} tape_entry;

struct nnt_tape {
    const nnt_backend_ops *be; /* the backend the tape records over */
    void *be_ctx;
    nnt_backend_ops ops;       /* the recording table (ctx: the tape) */
    int recording;             /* 0: the table passes calls straight through */
    int unfused;               /* 1: attn_fused always declines ([attention] fused = no) */
    tape_entry *e;
    int n, cap;
    size_t kept_bytes;
    /* the gradient memory of a backward: one region per stretch of touched memory */
    struct tape_region *regions;
    int n_regions;
};

/* The new entry of kind k at the end of the record (zeroed), or NULL without memory. */
tape_entry *nnt_tape_push(nnt_tape *tp, tape_kind k, nnt_error *err);
/* Frees what entry e owns. */
void nnt_tape_entry_clear(const nnt_tape *tp, tape_entry *e);
/* Fills tp->ops: the recording wrappers (tape_ops.c). */
void nnt_tape_ops_init(nnt_tape *tp);
/* The refusal of an op whose backward entry `entry` the backend lacks (NNT_ERR_UNSUPPORTED). */
nnt_status nnt_tape_no_backward(nnt_error *err, const char *op, const char *entry);
/* The MoE and feed-forward wrappers (tape_ops_moe.c). */
void nnt_tape_ops_init_moe(nnt_backend_ops *o, const nnt_backend_ops *be);
/* The wrappers of Kimi Delta Attention's recurrent ops (tape_ops_recurrent.c). */
void nnt_tape_ops_init_recurrent(nnt_backend_ops *o, const nnt_backend_ops *be);
/* The wrappers of DeepSeek-V4's hyper-connection, compressor and indexer ops (tape_ops_hyper.c). */
void nnt_tape_ops_init_hyper(nnt_backend_ops *o, const nnt_backend_ops *be);
/* Slots of a tape_entry's arrays, for loops over them. */
#define TAPE_SLOTS(a) ((int)(sizeof(a) / sizeof((a)[0])))
/* ---- the gradient memory (tape_shadow.c), for the reverse pass ---- */
/* The gradient of t: t's shape at t's place in the gradient memory (F32, no rounding flags);
 * data NULL when t lies in no region (nothing recorded touched it). */
nnt_tensor nnt_tape_adj(const nnt_tape *tp, const nnt_tensor *t);
/* Clears gradient g (data NULL: nothing to do). */
nnt_status nnt_tape_zero(const nnt_tape *tp, const nnt_tensor *g, nnt_error *err);
/* The gradient of output `out` of entry e as its backward reads it, in *dy: the gradient memory
 * itself (*cleared 0: the caller clears it after the backward), or, when out overlaps one of e's
 * inputs, a copy in *tmp (backend memory the caller frees) with the original already cleared
 * (*cleared 1). */
nnt_status nnt_tape_output_gradient(nnt_tape *tp, const tape_entry *e, const nnt_tensor *out, nnt_tensor *dy,
                                    void **tmp, int *cleared, nnt_error *err);
/* The gradient of one output of an entry as a reverse step reads it (nnt_tape_take), and what
 * the step owes afterwards (nnt_tape_done). */
typedef struct nnt_tape_out_grad {
    nnt_tensor dy;          /* data NULL: no gradient reached the output */
    void *tmp;              /* a copy's backend memory, or NULL */
    int cleared;            /* the output's own gradient was cleared already */
    const nnt_tensor *out;  /* the output (NULL: none taken) */
} nnt_tape_out_grad;
/* Takes the gradient of output `out` of entry e into *g (nnt_tape_output_gradient). */
nnt_status nnt_tape_take(nnt_tape *tp, const tape_entry *e, const nnt_tensor *out, nnt_tape_out_grad *g,
                         nnt_error *err);
/* Clears the output's gradient (unless taking it did) and frees its copy; passes st on. */
nnt_status nnt_tape_done(nnt_tape *tp, nnt_tape_out_grad *g, nnt_status st, nnt_error *err);
/* The gradient of input t in *buf, or NULL when t is absent or nothing recorded touched it (no
 * gradient wanted there). */
nnt_tensor *nnt_tape_grad_of(const nnt_tape *tp, const nnt_tensor *t, nnt_tensor *buf);
/* g's gradient, or NULL when none reached the output. */
const nnt_tensor *nnt_tape_dy_or_null(const nnt_tape_out_grad *g);
/* The reverse step of entry e, neither a mark nor a constant (tape_backward_ops.c). */
nnt_status nnt_tape_backward_entry(nnt_tape *tp, const tape_entry *e, nnt_error *err);
/* The reverse step of a hyper-connection or compressor entry (tape_backward_hyper.c). */
nnt_status nnt_tape_backward_hyper(nnt_tape *tp, const tape_entry *e, nnt_error *err);
/* The reverse step of a recurrent-mixer entry (tape_backward_recurrent.c). A delta_rule entry
 * with states leaves their total gradient in the states' gradient memory: the caller answers the
 * marks on them, then clears it. */
nnt_status nnt_tape_backward_recurrent(nnt_tape *tp, const tape_entry *e, nnt_error *err);
/* Makes the zeroed gradient memory of the record (tape_shadow.c). */
nnt_status nnt_tape_make_regions(nnt_tape *tp, nnt_error *err);
/* Frees the gradient memory of the last backward (tape_shadow.c). */
void nnt_tape_regions_free(nnt_tape *tp);
/* Keeps a copy of t (backend memory, owned by the tape) in *kept. */
nnt_status nnt_tape_keep(nnt_tape *tp, const nnt_tensor *t, nnt_tensor *kept, nnt_error *err);
/* Keeps a host copy of n bytes at p (NULL when p is NULL or n is 0) in *kept. */
nnt_status nnt_tape_keep_host(const void *p, size_t n, void **kept, nnt_error *err);

#endif /* NNT_TAPE_H */
