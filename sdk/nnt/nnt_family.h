/* nnt_family.h - the family-plugin ABI: what a model family's shared object provides, and the
 * table of core routines (config.json, checkpoint tensors, arena, value emission, module tree)
 * the core hands it.
 *
 * A family plugin exports `const nnt_family_descriptor nnt_family_plugin`. It never links the
 * core: everything it needs from the core reaches it through `const nnt_core_api *`, in the
 * manner of SQLite's loadable-extension routine table. */
#ifndef NNT_FAMILY_H
#define NNT_FAMILY_H

#include <stdarg.h>
#include <stddef.h>

#include "nnt_backend.h"
#include "nnt_plugin.h"
#include "nnt_tokenizer.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct nnt_checkpoint nnt_checkpoint; /* config.json and the safetensors tensors */
typedef struct nnt_run nnt_run;               /* one forward call: arena, trace hooks */
typedef struct nnt_tree nnt_tree;             /* a module tree under construction */

/* A RENAME rule: the module a checkpoint or transformers calls `native` is the standard
 * `standard`; when `module_class` is non-NULL the rule holds only for that class. */
typedef struct nnt_rename_rule {
    const char *native;
    const char *standard;
    const char *module_class;
} nnt_rename_rule;

/* Everything a forward call receives. Host pointers stay valid for the call. */
typedef struct nnt_forward_args {
    uint32_t struct_size; /* sizeof(nnt_forward_args) as the core saw it */
    int batch;
    int seq;
    int past;
    const int32_t *input_ids;      /* [batch, seq] */
    const int32_t *attention_mask; /* [batch, past + seq]: every token so far; 1 real, 0 padding */
    const int32_t *positions;      /* [batch, seq]: a row's real tokens count from 0 */
    const nnt_backend_ops *be;
    void *be_ctx;
    int step;    /* 0 for a prompt; n for the n-th call of a session */
    void *cache; /* the family's generation state (from cache_new), or NULL for a stateless call */

    /* ---- since ABI 3.2: pipeline stages ----
     * A call may run one contiguous stage of the model: the blocks [first_layer, end_layer).
     * The family kit's fam_stage_blocks reads the range (every block when struct_size ends
     * before these fields or end_layer is 0), fam_stage_load and fam_stage_store move the
     * residual stream. The core checks the range and the buffers before the call:
     * 0 <= first_layer < end_layer <= L (L = num_layers), hidden_in set exactly when
     * first_layer > 0, hidden_out set exactly when end_layer < L, each F32 of shape
     * [B, T, S, H] (batch, seq, streams, hidden_size) with S = nnt_model_info.num_streams as
     * the family's `info` reports it (1 for a single residual stream; DeepSeek-V4's hc_mult
     * hyper-connection streams): the layout of layers.i.layer_input / layer_output, with an
     * axis of 1 where a single-stream family's values have none. A whole-model call comes as
     * first_layer 0, end_layer L, both buffers NULL.
     * A stage:
     *   - takes its residual stream from hidden_in when first_layer > 0, in place of the
     *     embedding (token_embeddings is then not emitted: it belongs to the stage holding
     *     block 0; input_ids still reach every stage, for routing by token id);
     *   - runs and emits only its blocks' values, and reads and writes only its blocks' parts
     *     of args->cache (a session runs one stage at every call, so the caches of the other
     *     blocks stay untouched);
     *   - when end_layer < L writes the stream leaving block end_layer - 1 to hidden_out and
     *     computes no readout: final_norm_output, lm_head_output and logits are emitted only by
     *     the stage that ends at block L - 1.
     * hidden_in is read-only; the family never writes it. Both buffers belong to the caller and
     * stay valid for the call; their `device` flag says where the data is: 0 host memory, 1
     * the family's backend memory (the core passes host memory today). The core fails a call
     * in which a family emits a block value outside its stage, or a stage-owned model value on
     * another stage (NNT_ERR_PLUGIN), and runs a stage only on a family built for ABI 3.2 or
     * later. */
    int first_layer;               /* the first block this call runs */
    int end_layer;                 /* one past the last block; 0: every block (a whole-model call) */
    const nnt_tensor *hidden_in;   /* F32 [B, T, S, H] entering block first_layer, or NULL */
    nnt_tensor *hidden_out;        /* F32 [B, T, S, H] leaving block end_layer - 1, or NULL */

    /* ---- since ABI 3.9: attention in memory linear in the prompt ----
     * The most bytes one block of attention scores may take when no pattern of a block is
     * asked for: the family kit's fam_attend then runs scores, softmax and the value mix over
     * blocks of queries of at most this size instead of holding the whole [B, heads, T, S]
     * pattern. 0: the kit's default (FAM_ATTEND_BLOCK_BYTES). The core sets it from the INI's
     * [attention] block_mb. */
    uint64_t attention_block_bytes;

    /* ---- since ABI 3.10: the readout only where it is read ----
     * The sequence positions of this call (0 <= p < seq, ascending, no repeats) at which some
     * request reads lm_head_output or logits: the core gathers them from the trace's saves and
     * their slices, next_token_probs and generation (the last position). NULL or 0 entries:
     * every position (a whole save, an edit or a gradient of the logits). A family that honours
     * it runs lm_head on those rows only and emits lm_head_output and logits as F32
     * [B, n_logits_positions, V], row (b, k) being position logits_positions[k] of row b (the
     * family kit's fam_readout does this); one that ignores it emits [B, T, V] as before, and
     * the core reads the positions it needs from that. Host memory, owned by the core, valid for
     * the call. */
    const int32_t *logits_positions;
    int32_t n_logits_positions;
} nnt_forward_args;

/* Routines of the core a plugin may call. struct_size lets a plugin check a routine exists. */
typedef struct nnt_core_api {
    uint32_t struct_size;

    /* Fills err (status and printf-style message) and returns the status. */
    nnt_status (*set_error)(nnt_error *err, nnt_status status, const char *fmt, ...)
#if defined(__GNUC__)
        __attribute__((format(printf, 3, 4)))
#endif
        ;

    /* ---- config.json: keys may be dotted ("rope_parameters.rope_theta"). A missing key
     * returns the default unless `required`; a value of the wrong JSON type is an error that
     * names the file and the key. JSON null counts as missing. cfg_int: integers of at most
     * 2^31 - 1 in magnitude; num_hidden_layers and the expert counts (n_routed_experts,
     * num_local_experts, num_experts) are also bounded by the tensors the checkpoint holds (the
     * highest "layers.<i>." / "experts.<e>." in their names, or a fused expert tensor's leading
     * extent), so a family may allocate by them (NNT_ERR_CONFIG naming field and tensor). */
    nnt_status (*cfg_int)(const nnt_checkpoint *ck, const char *key, int64_t dflt, int required,
                          int64_t *out, nnt_error *err);
    nnt_status (*cfg_float)(const nnt_checkpoint *ck, const char *key, double dflt, int required,
                            double *out, nnt_error *err);
    nnt_status (*cfg_bool)(const nnt_checkpoint *ck, const char *key, int dflt, int required,
                           int *out, nnt_error *err);
    /* The string stays owned by the checkpoint. */
    nnt_status (*cfg_string)(const nnt_checkpoint *ck, const char *key, const char *dflt,
                             int required, const char **out, nnt_error *err);
    /* 1 when the key is present and not null. */
    int (*cfg_has)(const nnt_checkpoint *ck, const char *key);
    /* A JSON array of integers (or of strings mapped through `names`, when non-NULL: each
     * string element must equal one of names[0..n_names) and yields its index, and a number
     * must be such an index, 0..n_names - 1). *count receives the array length; more than `max`
     * elements is an error. */
    nnt_status (*cfg_int_list)(const nnt_checkpoint *ck, const char *key, const char *const *names,
                               int n_names, int64_t *out, int max, int *count, nnt_error *err);
    /* Path of config.json, for messages. */
    const char *(*cfg_path)(const nnt_checkpoint *ck);
    /* 1 when the key is present with the value null (some configs give null a meaning). */
    int (*cfg_is_null)(const nnt_checkpoint *ck, const char *key);

    /* ---- checkpoint tensors ---- */
    /* 1 when the checkpoint holds a tensor of that name. */
    int (*has_tensor)(const nnt_checkpoint *ck, const char *name);
    /* A host view of a tensor, as stored in the memory-mapped file: nothing is decoded or
     * copied. An encoded weight comes with its block scales in out->scale (nnt_tensor): F8_E4M3
     * with a companion `<name>_scale_inv`, `<base>.scale` or `<base>.weight_scale` (F32, BF16 or
     * F8_E8M0; blocks from config.json quantization_config.weight_block_size, default 128x128,
     * edge blocks partial), and FP4 e2m1 stored two per byte as I8/U8 [.., in / 2] with a
     * companion of one scale per group of inputs [.., out, in / group] (returned as F4_E2M1
     * [.., in]; recognised when `shape` asks for twice the stored last axis; U8 scales are read
     * as E8M0 bytes). An F8_E4M3 [n * rows, in] asked for as [n, rows, in] is returned as n
     * matrices quantised each on its own when its scales have a multiple of n rows (each matrix
     * then has its own ceil(rows / B) scale rows: MiMo-V2.5's fused qkv_proj). When ndim > 0 the
     * shape must equal shape[0..ndim), otherwise the error names the tensor, the file and both
     * shapes. The data stays owned by the checkpoint. */
    nnt_status (*tensor)(const nnt_checkpoint *ck, const char *name, int ndim,
                         const int64_t *shape, nnt_tensor *out, nnt_error *err);

    /* ---- a forward call ---- */
    /* Hands the value in `t` (backend memory) to the trace at the point the page reads it.
     * With no request on (id, layer) this is one table look-up. Edits requested on the value
     * change `t` in place; the forward must use `t` afterwards. */
    nnt_status (*emit)(nnt_run *run, nnt_value_id id, int layer, nnt_tensor *t);
    /* 1 when a request exists on (id, layer) in this call; lets a family skip building a
     * value (e.g. per-slot expert outputs) nobody asked for. */
    int (*wants)(const nnt_run *run, nnt_value_id id, int layer);
    /* Arena allocation in backend memory, valid until the call ends or a release below. F32
     * tensors of a family running in bfloat16 precision come flagged NNT_TENSOR_BF16_VALUES; a
     * value torch keeps in float32 must have the flag cleared by the family. */
    nnt_status (*alloc)(nnt_run *run, nnt_dtype dtype, int ndim, const int64_t *shape,
                        nnt_tensor *out, nnt_error *err);
    size_t (*arena_mark)(nnt_run *run);
    void (*arena_release)(nnt_run *run, size_t mark);

    /* ---- module tree (for `nnt print`) ---- */
    /* Adds a module under `parent` (-1 for the root) and returns its id, or -1 on failure.
     * native: the attribute name in the checkpoint's module tree; standard: nnterp's name when
     * it differs (or NULL); cls: the class print(model) shows; detail: the text inside the
     * class's parentheses for a leaf (or NULL); module: the nnt_module whose values print inside
     * this module (or -1); layer: the block the module belongs to (-1 outside blocks). */
    int (*tree_node)(nnt_tree *tree, int parent, const char *native, const char *standard,
                     const char *cls, const char *detail, int module, int layer);

    /* ---- since ABI 2.0 ---- */
    /* A slot kept so that the table's layout stays that of ABI 3.x: until ABI 3.4 it read one
     * attention block's key and value projections, FP8 checkpoints quantised per key/value head
     * included. That routine moved into the family kit in ABI 3.4 (fam_weight_kv_heads, built on
     * `tensor`); the core's entry now fails NNT_ERR_UNSUPPORTED with a message saying the plugin
     * calling it must be rebuilt against the 3.4 headers and kit. New plugins never call it. */
    nnt_status (*tensor_kv_heads)(const nnt_checkpoint *ck, const char *k_name, const char *v_name, int64_t heads,
                                  int64_t k_head_dim, int64_t v_head_dim, int64_t in, nnt_tensor *k, nnt_tensor *v,
                                  nnt_error *err);

    /* ---- since ABI 3.11: a value handed over in parts along one axis ----
     * For a value too big to hold whole that only saves read: the family kit's fam_attend makes
     * a long prompt's attention pattern one block of queries at a time. Read these entries only
     * when struct_size covers them (NNT_STRUCT_HAS). */
    /* 1 when every request on (id, layer) in this call is a save that parts can fill (no edit,
     * gradient, kept copy or rows selection; not a chunk of a longer prompt), with [*lo, *hi) set
     * to the entries along `axis` (of `extent`, which must be value_info's size of that axis) the
     * saves' slices read: the whole axis for a save without a slice there, lo == hi when they read
     * none. 0 when the value must be emitted whole with `emit` (or nothing asks for it). */
    int (*parts_wanted)(const nnt_run *run, nnt_value_id id, int layer, int axis, int64_t extent, int64_t *lo,
                        int64_t *hi);
    /* Hands entries [first, first + part->shape[axis]) along `axis` of value (id, layer) to the
     * trace; the whole value has `extent` entries there and every other axis as value_info
     * declares it. One emission's parts come in ascending order without overlap; a part starting
     * before the previous one's end begins a new emission (a later `@k` key). Parts outside
     * parts_wanted's [lo, hi) may be left out: what the saves read must be covered. part (backend
     * memory, or host memory with `device` 0) is read, never written, and the family may release
     * it on return. Only after parts_wanted answered 1 for this call. Errors: NNT_ERR_PLUGIN (a
     * value parts cannot serve, a part out of range or shaped otherwise than declared, naming the
     * value), NNT_ERR_INDEX (a save's slice outside the value), NNT_ERR_OUT_OF_MEMORY. */
    nnt_status (*emit_part)(nnt_run *run, nnt_value_id id, int layer, const nnt_tensor *part, int axis, int64_t first,
                            int64_t extent);

    /* ---- since ABI 3.12: weights re-encoded at load ([family.NAME] weights = fp8) ----
     * As `tensor`, but a weight stored in F32, BF16 or F16 with two or more axes comes back as
     * F8_E4M3 codes with F32 scales, one per 128 x 128 block of its last two axes (partial
     * edge blocks included; leading axes are separate matrices): a block's scale is its largest
     * magnitude over 448 (e4m3fn's largest finite value; 1 for a block of zeros), each code the
     * nearest to value / scale, ties to even - the block scheme of the DeepSeek-V3 report, as
     * FP8 releases store their weights. Codes and grid are one buffer the checkpoint owns; the
     * error against the stored values is added to the checkpoint's record
     * (nnt_model_reencoding). A weight already stored as FP8 or FP4, or of one axis, comes back
     * as `tensor` gives it. Errors: as `tensor`; NNT_ERR_SHAPE (a value that is not finite, naming
     * the tensor, file and element), NNT_ERR_OUT_OF_MEMORY. Read it only when struct_size
     * covers it (NNT_STRUCT_HAS). */
    nnt_status (*tensor_fp8)(const nnt_checkpoint *ck, const char *name, int ndim, const int64_t *shape,
                             nnt_tensor *out, nnt_error *err);
} nnt_core_api;

/* How a family's products run (the INI file's [family.NAME] precision). */
typedef enum nnt_precision {
    NNT_PRECISION_F32 = 0, /* activations and accumulation in float32 */
    NNT_PRECISION_BF16 = 1 /* as torch runs a bfloat16 model: activations rounded to bfloat16
                            * wherever torch stores or rounds them, products accumulated in
                            * float32. Prepared weights carry NNT_TENSOR_BF16_PRODUCTS and every
                            * F32 tensor `alloc` hands out NNT_TENSOR_BF16_VALUES */
} nnt_precision;

/* Which encoding a family's product weights take at load (the INI's [family.NAME] weights). */
typedef enum nnt_weights {
    NNT_WEIGHTS_STORED = 0, /* as the checkpoint stores them (the default: the release's values) */
    NNT_WEIGHTS_FP8 = 1     /* the linear and expert weights a checkpoint stores in F32, BF16 or
                             * F16 re-encoded as FP8 e4m3 with 128 x 128 block scales (tensor_fp8):
                             * half a BF16 weight's bytes for each product, other values than the
                             * release's (nnt_model_reencoding says by how much) */
} nnt_weights;

/* What `load` receives. */
typedef struct nnt_load_args {
    uint32_t struct_size; /* sizeof(nnt_load_args) as the core saw it */
    const nnt_core_api *core;
    const nnt_checkpoint *ckpt;
    const nnt_backend_ops *be;
    void *be_ctx;
    nnt_precision precision;
    /* ---- since ABI 3.3: one pipeline stage's weights ----
     * The blocks [first_layer, end_layer) this process will run (nnt_model_load_stage): a
     * family binds only their weights, the embedding only when first_layer is 0 and the final
     * norm and lm_head (and any other readout) only when end_layer is num_layers, and is then
     * asked to run no other blocks. end_layer 0 (a core before 3.3) means every block. The kit's
     * fam_load_blocks and fam_bind_readout_stage read these fields. */
    int first_layer;
    int end_layer;
    /* ---- since ABI 3.12 ----
     * How the family binds its product weights (the INI's [family.NAME] weights): as stored, or
     * re-encoded as FP8 through core->tensor_fp8. The kit's fam_weight_product reads it. */
    nnt_weights weights;
} nnt_load_args;

/* What a family's `costs` entry receives and fills (since ABI 3.4): the planner's byte model of
 * the family, computed from config.json alone, so that a plan of a release's folder needs neither
 * its weights nor a core that knows the family. Bytes are bytes. The core zeroes the outputs
 * before the call. */
typedef struct nnt_cost_args {
    uint32_t struct_size;       /* sizeof(nnt_cost_args) as the core saw it */
    const nnt_core_api *core;
    const nnt_checkpoint *ckpt; /* config.json only: has_tensor answers 0 and tensor fails */
    int n_blocks;               /* num_hidden_layers as the core read it (>= 1) */
    int64_t context;            /* T: tokens per row a session's caches hold (>= 0) */
    int64_t batch;              /* B: rows (>= 1) */
    /* filled by the family: */
    uint64_t *weight_bytes;     /* [n_blocks]: block b's weights as the checkpoint stores them, in
                                 * the encoding config.json's quantization_config gives (scale
                                 * companions included) */
    uint64_t *cache_bytes;      /* [n_blocks]: what a session of B rows and capacity T allocates
                                 * for block b (key/value caches, recurrent and convolution
                                 * states, compressor rows) */
    uint64_t first_bytes;       /* weights outside the blocks held by the stage of block 0 (the
                                 * embedding) */
    uint64_t last_bytes;        /* weights outside the blocks held by the last stage (final norm,
                                 * lm_head and any other readout) */
} nnt_cost_args;

typedef struct nnt_family_descriptor {
    nnt_plugin_header header;
    /* config.json `architectures` entries and `model_type` values served; NULL-terminated. */
    const char *const *architectures;
    const char *const *model_types;
    /* RENAME rules, ended by an entry whose `native` is NULL. */
    const nnt_rename_rule *renames;

    /* Parses config.json, binds and prepares the weights. */
    nnt_status (*load)(const nnt_load_args *args, void **model, nnt_error *err);
    void (*unload)(void *model);
    void (*info)(const void *model, nnt_model_info *out);
    /* Describes value `id` on block `layer`: -1 for values of the model module, 0..num_layers-1
     * otherwise.
     * dims may be NULL (no shapes wanted). */
    nnt_status (*value_info)(const void *model, int layer, nnt_value_id id,
                             const nnt_call_dims *dims, nnt_value_info *out);
    nnt_status (*build_tree)(const void *model, nnt_tree *tree, nnt_error *err);
    /* Runs the forward for args, emitting every served value through core->emit, each with the
     * dtype and shape value_info declares for the call's dims (a NULL tensor only where it
     * declares may_be_none). The core holds the family to it for every requested value: one
     * that is not emitted, or emitted with another dtype or shape, fails the call with an
     * NNT_ERR_PLUGIN error naming the family, the value and both shapes. */
    nnt_status (*forward)(void *model, nnt_run *run, const nnt_forward_args *args,
                          nnt_error *err);
    /* The family's own readout (the logit lens): x [M, H] (backend memory, F32) through the
     * final norm and lm_head, or, with `streams`, x [M, num_streams, H] collapsed the way the
     * model collapses its last block's streams first; logits [M, vocab_size]. */
    nnt_status (*project)(void *model, nnt_run *run, const nnt_tensor *x, int streams, nnt_tensor *logits,
                          nnt_error *err);
    /* Generation state for `batch` rows and up to `capacity` tokens (key/value caches, recurrent
     * and convolution states, compressor buffers), in backend memory; forward continues it when
     * args->cache is set, appending the call's tokens. */
    nnt_status (*cache_new)(void *model, int batch, int capacity, void **cache, nnt_error *err);
    void (*cache_free)(void *model, void *cache);

    /* The backend ops this family calls, as a set of NNT_OP_BIT(op) bits (nnt_backend.h; e.g.
     * NNT_OPS_DECODER | NNT_OPS_RECURRENT). The family may call exactly these; the core refuses
     * to map it onto a backend that lacks one (at runtime open when the INI maps it, else at
     * model load), naming the family, the backend and each missing op. 0 (left out of the
     * initialiser), or a descriptor whose struct_size ends before this field, is taken to
     * need every op of ABI 3.0. */
    uint64_t ops_needed;

    /* ---- since ABI 3.2 ---- */
    /* Note i (from 0) of the loaded model, for the end of its printout (`nnt print`,
     * nnt_model_note): one line of plain text, no newline, saying something about this model's
     * values a reader of the printout should know (e.g. which standard value another runtime's
     * output corresponds to, or how a config.json setting is applied). Returns NULL past the
     * last note. The string is owned by the model (or static) and lives until unload. NULL (or
     * left out of the initialiser, or a descriptor whose struct_size ends before this field): the
     * family has no notes. The core reads at most NNT_FAMILY_MAX_NOTES notes. */
    const char *(*note)(const void *model, int i);

    /* ---- since ABI 3.4 ---- */
    /* The planner's byte model (nnt_cost_args). Called without a loaded model, on a checkpoint
     * of config.json alone, by nnt_plan_new when a runtime is given (`nnt plan`, the split of a
     * run over several ranks). NULL (or a descriptor that ends before this field): the planner
     * reads the weights from the safetensors headers only and reports the caches as unknown. */
    nnt_status (*costs)(nnt_cost_args *args, nnt_error *err);
    /* What the checkpoint's tokenizer files leave to the release's own code (a split pattern, the
     * reserved special tokens, the encode's cuts): applied when a tokenizer is loaded for a
     * checkpoint this family serves (nnt_runtime_tokenizer). NULL: nothing. Static, or owned by
     * the plugin for as long as it is loaded. */
    const nnt_tokenizer_hints *tokenizer;

    /* ---- since ABI 3.14 ---- */
    /* Entry i (from 0) of the loaded model's native list: the input or output of one module of
     * its tree (nnt_native_info), with a standard value it is (alias) or as a value of its own,
     * id NNT_VALUE_NATIVE + i, which value_info describes per block and forward emits through
     * core->emit like a standard value (the family kit does both from its module table).
     * NNT_ERR_NOT_FOUND past the last entry (at most NNT_NATIVE_MAX are read). NULL (or a
     * descriptor that ends before this field): the family serves no native values. */
    nnt_status (*native)(const void *model, int i, nnt_native_info *out);
} nnt_family_descriptor;

/* The most notes the core reads from a family (nnt_family_descriptor.note). */
#define NNT_FAMILY_MAX_NOTES 64

/* The smallest family descriptor the core accepts: everything up to `project` (the functions
 * every family must provide). Later fields a shorter descriptor leaves out read as absent:
 * cache_new and cache_free NULL (no sessions), ops_needed every op, note NULL (no notes). */
#define NNT_FAMILY_DESCRIPTOR_MIN_SIZE (offsetof(nnt_family_descriptor, project) + sizeof(void (*)(void)))

#ifdef __cplusplus
}
#endif
#endif /* NNT_FAMILY_H */
