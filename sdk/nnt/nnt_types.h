/* nnt_types.h - the plain data types every nnt header shares: status codes, element types,
 * tensors, shapes, the standard-value ids, and the error record.
 *
 * This header has no functions of its own beyond small inline helpers; the user API (nnt.h),
 * the family-plugin ABI (nnt_family.h) and the kernel-backend ABI (nnt_backend.h) build on it.
 * Any change to a struct or enum here that moves an existing field or value bumps
 * NNT_ABI_MAJOR; appending is a minor change. */
#ifndef NNT_TYPES_H
#define NNT_TYPES_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ABI version shared by the core, family plugins and kernel backends. A plugin is accepted
 * when its major equals the core's and its minor is not newer than the core's; the core reads
 * an older minor's descriptor, op table and argument structs only up to their struct_size.
 * CHANGELOG.md keeps the history of every version (3.4: the family descriptor's costs and
 * tokenizer hints, tensor_kv_heads moved to the family kit; 3.5: the backward ops; 3.6: scale_rows
 * and its backward; 3.7: the backward of DeepSeek-V4's hyper-connections and compressors; 3.8: the
 * backward of Kimi Delta Attention's recurrent ops; 3.9: the attention block bound in
 * nnt_forward_args; 3.10: the readout positions in nnt_forward_args; 3.11: the backend's attn_fused;
 * 3.12: the core's tensor_fp8 and nnt_load_args.weights; 3.13: NNT_ERR_BUSY; 3.14: native module
 * values, nnt_native_info and the family descriptor's `native`; NNT_ERR_INTERRUPTED; 3.15: nnt_attn_mask.key_count
 * and nnt_backend_ops.features). */
#define NNT_ABI_MAJOR 3
#define NNT_ABI_MINOR 15

/* ---------------------------------------------------------------------------------------- */
/* Status codes. Every call that can fail returns one; nnt_status_str names it.              */

typedef enum nnt_status {
    NNT_OK = 0,
    NNT_ERR_INVALID_ARGUMENT, /* a NULL pointer, a negative size, a malformed option */
    NNT_ERR_OUT_OF_MEMORY,    /* host or device allocation failed */
    NNT_ERR_IO,               /* a file is missing, unreadable or unwritable */
    NNT_ERR_FORMAT,           /* a file's content is malformed (safetensors, JSON, INI) */
    NNT_ERR_CONFIG,           /* a configuration field is missing or has a bad value */
    NNT_ERR_PLUGIN,           /* a shared object is not an nnt plugin or its descriptor is bad */
    NNT_ERR_ABI,              /* a plugin was built against an incompatible ABI */
    NNT_ERR_CONFLICT,         /* two plugins claim the same architecture or name */
    NNT_ERR_NOT_FOUND,        /* a tensor, backend, family or architecture is absent */
    NNT_ERR_SHAPE,            /* a shape or dtype disagrees with what was expected */
    NNT_ERR_UNSUPPORTED,      /* a dtype or feature this build does not handle */
    NNT_ERR_PATH,             /* a value path names nothing */
    NNT_ERR_INDEX,            /* a block index is out of range */
    NNT_ERR_NOT_SERVED,       /* the family does not serve this value here */
    NNT_ERR_READ_ONLY,        /* an edit was requested on a read-only value */
    NNT_ERR_BACKEND,          /* a kernel backend call failed */
    NNT_ERR_CALLBACK,         /* a user edit callback reported failure */
    NNT_ERR_STATE,            /* the object is not in a state that allows the call */
    NNT_ERR_INTERNAL,         /* a bug in nnt; the message says where */
    NNT_ERR_BUSY,             /* the runtime is inside another call: another thread's, or the call whose
                               * edit callback made this one (ABI 3.13) */
    NNT_ERR_INTERRUPTED,      /* the runtime's progress handler asked the call to stop (ABI 3.14) */
    NNT_STATUS_COUNT
} nnt_status;

/* ---------------------------------------------------------------------------------------- */
/* Element types. The names follow safetensors' dtype strings.                               */

typedef enum nnt_dtype {
    NNT_DTYPE_INVALID = 0,
    NNT_F32,
    NNT_F16,
    NNT_BF16,
    NNT_F64,
    NNT_F8_E4M3, /* float8 e4m3fn: bias 7, no infinities, S.1111.111 is NaN, max 448 */
    NNT_F8_E5M2,
    NNT_F8_E8M0, /* scale-only byte: value 2^(b-127), 255 is NaN */
    NNT_I64,
    NNT_I32,
    NNT_I16,
    NNT_I8,
    NNT_U8,
    NNT_BOOL,
    NNT_F4_E2M1, /* float4 e2m1 (OCP MX): two codes per byte along the last axis, the low nibble
                  * the even element; magnitudes 0, 0.5, 1, 1.5, 2, 3, 4, 6, bit 3 the sign */
    NNT_DTYPE_COUNT
} nnt_dtype;

/* ---------------------------------------------------------------------------------------- */
/* Tensors: dense, row-major, contiguous. `data` is host memory unless `device` is nonzero,  */
/* in which case it belongs to the kernel backend that made it.                              */

#define NNT_MAX_DIMS 6

/* Flags of a tensor (nnt_tensor.flags). */
#define NNT_TENSOR_BF16_PRODUCTS 1u /* a weight: products with it round their activation rows
                                     * and the weight's decoded values (unless already bfloat16
                                     * numbers) to bfloat16 before, and their results after
                                     * (float32 accumulation), as torch multiplies with its
                                     * bfloat16 copy of the weight */
#define NNT_TENSOR_BF16_VALUES 2u   /* an activation held as torch holds a bfloat16 tensor: the
                                     * op writing it rounds its results to bfloat16 (nearest
                                     * even, stored as float32) and takes the roundings torch
                                     * takes inside that op (nnt_backend.h says which, per op) */
#define NNT_TENSOR_BF16_ONCE 4u     /* with BF16_VALUES, for rms_norm's gain product and rope: the
                                     * op works in float32 and rounds its result once, as torch
                                     * code does that upcasts and casts back at the end */
#define NNT_TENSOR_BF16_SHIFTED 8u  /* with BF16_VALUES, for softmax: the scores less their row
                                     * maximum (the sink included) are rounded before the
                                     * exponential, as torch code does that subtracts the maximum
                                     * in bfloat16 */

typedef struct nnt_tensor {
    nnt_dtype dtype;
    int ndim;
    int64_t shape[NNT_MAX_DIMS]; /* in elements, also for F4_E2M1 (two per byte) */
    void *data;
    int device; /* 0: host memory; 1: the backend's device memory */
    /* Block scales of an encoded weight (dtype F8_E4M3 or F4_E2M1); NULL for every other
     * tensor. Element [.., r, c] of the last two axes stands for
     *     decode(code[.., r, c]) * scale[.., r / block_rows, c / block_cols],
     * the scale grid [lead.., ceil(rows / block_rows), ceil(cols / block_cols)] being dense and
     * row-major in scale_dtype (F32, BF16, F16 or F8_E8M0) in the same memory as data. Sources:
     * DeepSeek-V3 report (128x128 FP8 blocks, weight_scale_inv multiplies); OCP Microscaling
     * Formats v1.0 (E2M1 elements, E8M0 scales, groups of 32). */
    const void *scale;
    nnt_dtype scale_dtype;
    int32_t block_rows;
    int32_t block_cols;
    int32_t block_row0; /* a view that starts inside a block row (nnt_tensor_rows): the rows of
                         * that block before the view; matrix row r then takes its scale from
                         * grid row (r + block_row0) / block_rows. 0 otherwise */
    uint32_t flags;     /* NNT_TENSOR_* */
} nnt_tensor;

/* A shape of ndim axes (at most NNT_MAX_DIMS), passed by value where a function takes a shape
 * it does not keep (the family kit's fam_served, fam_alloc, fam_view). Write one with
 * NNT_SHAPE(d0, d1, ...): each extent is converted to int64_t as the compiler checks the
 * arguments of any function, and more than NNT_MAX_DIMS extents do not compile. */
typedef struct nnt_shape {
    int ndim;
    int64_t dim[NNT_MAX_DIMS];
} nnt_shape;

/* The number of arguments, 1 to NNT_MAX_DIMS (6); a seventh leaves an undefined name behind. */
#define NNT_SHAPE_NARGS_(a1, a2, a3, a4, a5, a6, a7, n, ...) n
#define NNT_SHAPE_NARGS(...) NNT_SHAPE_NARGS_(__VA_ARGS__, nnt_shape_has_too_many_axes, 6, 5, 4, 3, 2, 1, 0)
/* The shape [d0, d1, ...] of 1 to NNT_MAX_DIMS axes, e.g. NNT_SHAPE(B, T, H). */
#define NNT_SHAPE(...) ((nnt_shape){.ndim = NNT_SHAPE_NARGS(__VA_ARGS__), .dim = {__VA_ARGS__}})

static inline int64_t nnt_tensor_numel(const nnt_tensor *t)
{
    int64_t n = 1;
    for (int i = 0; i < t->ndim; i++) n *= t->shape[i];
    return n;
}

/* Bits one element of dt takes (4 for F4_E2M1); 0 for an unknown dtype. */
static inline int nnt_dtype_bits(nnt_dtype dt)
{
    switch (dt) {
    case NNT_F64:
    case NNT_I64: return 64;
    case NNT_F32:
    case NNT_I32: return 32;
    case NNT_F16:
    case NNT_BF16:
    case NNT_I16: return 16;
    case NNT_F8_E4M3:
    case NNT_F8_E5M2:
    case NNT_F8_E8M0:
    case NNT_I8:
    case NNT_U8:
    case NNT_BOOL: return 8;
    case NNT_F4_E2M1: return 4;
    default: return 0;
    }
}

/* Bytes n consecutive elements of dt occupy (n even for F4_E2M1). */
static inline size_t nnt_dtype_span(nnt_dtype dt, int64_t n)
{
    return (size_t)n * (size_t)nnt_dtype_bits(dt) / 8u;
}

/* A view of rows [r0, r0 + nr) of matrix `index` of an [E, R, C] tensor (index 0 of an [R, C]
 * one), its block scales included (a view starting inside a block row records where in
 * block_row0). Returns 0 (and leaves *out alone) for an encoded tensor whose block sizes are not
 * set. */
static inline int nnt_tensor_rows(const nnt_tensor *w, int64_t index, int64_t r0, int64_t nr, nnt_tensor *out)
{
    int64_t R = w->shape[w->ndim - 2], C = w->shape[w->ndim - 1];
    nnt_tensor v = *w;
    v.ndim = 2;
    v.shape[0] = nr;
    v.shape[1] = C;
    v.data = (char *)w->data + nnt_dtype_span(w->dtype, (index * R + r0) * C);
    if (w->scale) {
        if (w->block_rows <= 0 || w->block_cols <= 0) return 0;
        int64_t br = w->block_rows, at = w->block_row0 + r0;
        int64_t sr = (w->block_row0 + R + br - 1) / br, sc = (C + w->block_cols - 1) / w->block_cols;
        v.scale = (const char *)w->scale + nnt_dtype_span(w->scale_dtype, index * sr * sc + (at / br) * sc);
        v.block_row0 = (int32_t)(at % br);
    }
    *out = v;
    return 1;
}

/* ---------------------------------------------------------------------------------------- */
/* Modules: the module a standard value belongs to, as nnterp names it. ("Host" in this SDK */
/* means CPU memory only, as in CUDA.)                                                       */

typedef enum nnt_module {
    NNT_MODULE_MODEL = 0,   /* model */
    NNT_MODULE_LAYER,       /* model.layers[i] */
    NNT_MODULE_SELF_ATTN,   /* model.layers[i].self_attn (softmax attention, latent or not) */
    NNT_MODULE_LINEAR_ATTN, /* model.layers[i].linear_attn (a recurrent mixer, e.g. KDA) */
    NNT_MODULE_MLP,         /* model.layers[i].mlp (dense MLP or mixture of experts) */
    NNT_MODULE_COUNT
} nnt_module;

/* ---------------------------------------------------------------------------------------- */
/* Standard values: one id per (module, value name) pair, named as nnterp names them.        */
/* docs/plugin-guide.md lists them with their layouts.                                       */
/* The registry in the core (nnt_value_name, nnt_value_layout, ...) describes each.            */

typedef enum nnt_value_id {
    /* model */
    NNT_VALUE_LOGITS = 0,
    NNT_VALUE_TOKEN_EMBEDDINGS,
    NNT_VALUE_FINAL_NORM_OUTPUT,
    NNT_VALUE_LM_HEAD_OUTPUT,
    NNT_VALUE_NEXT_TOKEN_PROBS,
    NNT_VALUE_INPUT_IDS,
    NNT_VALUE_ATTENTION_MASK,
    NNT_VALUE_INPUT_SIZE,
    /* model.layers[i] */
    NNT_VALUE_LAYER_INPUT,
    NNT_VALUE_ATTENTION_NORM_OUTPUT,
    NNT_VALUE_LAYER_MID,
    NNT_VALUE_MLP_NORM_OUTPUT,
    NNT_VALUE_MLP_INPUT,
    NNT_VALUE_LAYER_OUTPUT,
    NNT_VALUE_ATTENTION_POST,
    NNT_VALUE_ATTENTION_COMB,
    NNT_VALUE_MLP_POST,
    NNT_VALUE_MLP_COMB,
    /* model.layers[i].self_attn */
    NNT_VALUE_ATTN_QUERIES,
    NNT_VALUE_ATTN_KEYS,
    NNT_VALUE_ATTN_VALUES,
    NNT_VALUE_ATTN_SCORES,
    NNT_VALUE_ATTN_PREMIX,
    NNT_VALUE_ATTN_OUTPUT,
    NNT_VALUE_ATTN_PROBABILITIES,
    NNT_VALUE_ATTN_HEAD_OUTPUTS,
    /* model.layers[i].linear_attn */
    NNT_VALUE_LIN_OUTPUT,
    NNT_VALUE_LIN_STATE,
    NNT_VALUE_LIN_STATES,
    NNT_VALUE_LIN_QUERIES,
    NNT_VALUE_LIN_KEYS,
    NNT_VALUE_LIN_VALUES,
    NNT_VALUE_LIN_DECAYS,
    NNT_VALUE_LIN_BETAS,
    NNT_VALUE_LIN_STATE_INPUT,
    NNT_VALUE_LIN_HEAD_OUTPUTS,
    NNT_VALUE_LIN_STATE_OUTPUT,
    /* model.layers[i].mlp */
    NNT_VALUE_MLP_ACTIVATION,
    NNT_VALUE_MLP_NEURONS,
    NNT_VALUE_MLP_OUTPUT,
    NNT_VALUE_ROUTER_LOGITS,
    NNT_VALUE_EXPERT_WEIGHTS,
    NNT_VALUE_EXPERT_INDICES,
    NNT_VALUE_EXPERT_OUTPUTS,
    NNT_VALUE_ROUTED_OUTPUT,
    NNT_VALUE_SHARED_EXPERT_OUTPUT,
    NNT_VALUE_COUNT
} nnt_value_id;

/* ---------------------------------------------------------------------------------------- */
/* Errors: a status and a message. Library code fills one and returns the status; it never   */
/* prints or exits.                                                                          */

#define NNT_ERROR_MSG_MAX 1024

typedef struct nnt_error {
    nnt_status status;
    char msg[NNT_ERROR_MSG_MAX];
} nnt_error;

/* ---------------------------------------------------------------------------------------- */
/* Native module values (since ABI 3.14): the input and the output of a module of the family's */
/* own tree, under its path ("layers.1.self_attn.q_proj.output"), as nnsight reads a module.    */

/* Their ids follow the standard values': entry i of a family's native list
 * (nnt_family_descriptor.native) is the value NNT_VALUE_NATIVE + i, i < NNT_NATIVE_MAX. */
#define NNT_VALUE_NATIVE ((nnt_value_id)NNT_VALUE_COUNT)
#define NNT_NATIVE_MAX 192
/* Every value id a trace may hold: the standard ones, then the native ones. */
#define NNT_SLOT_COUNT (NNT_VALUE_COUNT + NNT_NATIVE_MAX)

/* One entry of a family's native list: one module's input or output. Strings are static or
 * owned by the loaded model. */
typedef struct nnt_native_info {
    uint32_t struct_size; /* sizeof(nnt_native_info) as the family saw it */
    const char *module;   /* the module's path under its host in the checkpoint's spelling: under a
                           * block ("self_attn.q_proj", "block_sparse_moe.gate") or under the model
                           * ("norm", "lm_head") */
    const char *standard; /* the same path with the family's RENAME rules applied ("mlp.router"):
                           * the spelling of the value's key; equal to module where nothing renames */
    int io;               /* 0: the module's input (what its forward receives); 1: its output */
    int block;            /* 1: a module of every block that has it ("layers.N." in front); 0: the model's */
    int alias;            /* the value that is this very tensor, so the path names it: a standard value
                           * (nnt_value_id), or NNT_VALUE_NATIVE + j for entry j of the list, a value
                           * of its own of another module (this module reads that module's output);
                           * -1: none, the family emits the value as NNT_VALUE_NATIVE + i */
    int read_only;        /* with an alias: 1 when an edit through this path is refused, because
                           * the standard value has other readers (an input the residual stream
                           * also reads) and the edit would reach them too */
    const char *axes;     /* for a value of its own: its axes, e.g. "[batch seq in_features]" */
} nnt_native_info;

/* The dimensions of one forward call, which fix the shapes of the values. */
typedef struct nnt_call_dims {
    int batch; /* rows of the batch */
    int seq;   /* tokens of this call per row */
    int past;  /* tokens already in the cache before this call (0 for a prompt) */
} nnt_call_dims;

/* What a family says about one standard value on one block (layer -1 for the model module). */
#define NNT_REASON_MAX 320
typedef struct nnt_value_info {
    int served;                  /* 1: the family emits it here */
    char reason[NNT_REASON_MAX]; /* when not served: why, in words */
    nnt_dtype dtype;             /* when served */
    int ndim;                    /* when served and the call dims were given */
    int64_t shape[NNT_MAX_DIMS];
    int writable;      /* 1: edits are honoured (later values see them) */
    int may_be_none;   /* 1: some calls emit no tensor (e.g. a state at a prompt's start) */
    int off_page;      /* 1: the value has no place in this family's architecture at all (e.g.
                        * hyper-connection weights on a single-stream model); `nnt print` omits
                        * it, `nnt support` still shows it with the reason */
    const char *layout; /* NULL: the registry's layout name for the value */
    const char *axes;   /* NULL: the registry's axes for the value */
} nnt_value_info;

/* Root-level sizes, as nnterp reports them on `model`. 0 where a size does not apply. */
typedef struct nnt_model_info {
    const char *architecture; /* config.json architectures[0] */
    const char *model_type;   /* config.json model_type */
    const char *root_class;   /* the class print(model) shows at the root */
    int num_layers;
    int hidden_size;
    int vocab_size;
    int num_heads;
    int num_kv_heads;
    int head_dim;    /* the values' head width */
    int qk_head_dim; /* the queries' and keys' head width */
    int intermediate_size;
    int num_experts;
    int top_k;
    int num_streams; /* residual streams (1 unless hyper-connections) */
} nnt_model_info;

#ifdef __cplusplus
}
#endif
#endif /* NNT_TYPES_H */
