/* nnt.h - the user API of libnnt: open a runtime from an INI file, load a checkpoint, trace a
 * forward pass by standard value names, read and edit the values, write them to safetensors.
 *
 * Error model: every call that can fail returns an nnt_status; the runtime keeps the message
 * of the latest failure, which nnt_last_error() returns.
 *
 * Threads. A runtime runs one call at a time: its models, traces, sessions and results share
 * its backends' scratch memory and its error record. Use a runtime (and everything made from
 * it) from one thread at a time, or serialise the calls with a lock of your own. libnnt checks
 * it: a call that runs, changes or frees a model, session or trace (nnt_trace_run, nnt_trace_save,
 * nnt_session_forward, nnt_generate, nnt_request_run, nnt_lens, ...) made while another thread
 * is inside a call of the same runtime returns NNT_ERR_BUSY at once, having done nothing (the
 * runtime's error record then belongs to the running call; nnt_status_str says why); a free
 * (nnt_trace_free, nnt_session_free, nnt_model_free, nnt_runtime_close) waits for it instead. An
 * edit callback must not call back into the runtime running it: such a call returns
 * NNT_ERR_BUSY (a free does nothing), and nnt_last_error names both calls. Separate runtimes are
 * independent: a thread each runs them at once, even on the same checkpoint folder (the mapped
 * files are shared read-only). A tokenizer (nnt_tokenizer.h) may be shared by threads: its calls
 * take turns on a lock of its own.
 *
 * Value paths name one standard value: "logits", "layers.1.mlp.expert_weights",
 * "layers[1].self_attn.attention_scores", "model.layers.-1.layer_output" (negative indices
 * count from the end), "layers.*.layer_output" (every block). "layers.N.input" and
 * "layers.N.output" are accepted for layer_input and layer_output, and a family's native
 * module names (e.g. "block_sparse_moe") are accepted where its RENAME rules map them. */
#ifndef NNT_H
#define NNT_H

#include <stdio.h>

#include "nnt_types.h"
#include <nnt/nnt_version.h> /* generated: nnt_version.h.in */
#include "nnt_tokenizer.h"
#include "nnt_request.h"
#include "nnt_methods.h"
#include "nnt_sae.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct nnt_runtime nnt_runtime;
typedef struct nnt_model nnt_model;
typedef struct nnt_trace nnt_trace;

/* ---- versions ----
 * What the running libnnt is, for a program or a binding (the Python package) compiled against
 * headers that may be another version's. CHANGELOG.md gives each version's changes. */
/* The version of the running libnnt, "MAJOR.MINOR.PATCH" (NNT_VERSION_STRING as it was built;
 * a static string). Compare with the NNT_VERSION_* macros a program was compiled with: while
 * MAJOR is 0 another MINOR is another API and ABI. */
const char *nnt_version(void);
/* The plugin ABI the running libnnt speaks, (NNT_ABI_MAJOR << 16) | NNT_ABI_MINOR as it was
 * built: it loads plugins of the same major and a minor not newer (nnt_plugin.h). */
uint32_t nnt_abi_version(void);
/* sizeof the public struct named `name` in the running libnnt, in bytes: every complete struct of
 * the user API (nnt_types.h, nnt.h, nnt_tokenizer.h, nnt_request.h, nnt_methods.h: "nnt_tensor",
 * "nnt_model_info", "nnt_value_info", "nnt_call_dims", "nnt_generate_opts", "nnt_memory",
 * "nnt_plan_opts", ...) and of the plugin ABI (nnt_plugin.h, nnt_family.h, nnt_backend.h,
 * nnt_transport.h: "nnt_family_descriptor", "nnt_cost_args", ...), named by its typedef.
 * 0 for a NULL or unknown name. A binding that mirrors a struct checks its mirror against it. */
size_t nnt_struct_size(const char *name);

/* ---- names ---- */
const char *nnt_status_str(nnt_status status);
const char *nnt_dtype_name(nnt_dtype dtype); /* safetensors spelling, e.g. "BF16" */
size_t nnt_dtype_size(nnt_dtype dtype);      /* bytes per element */
const char *nnt_module_name(nnt_module module); /* "self_attn", ...; "" for the layer module */
const char *nnt_value_name(nnt_value_id id);    /* "attention_scores", ... */
nnt_module nnt_value_module(nnt_value_id id);
const char *nnt_value_layout(nnt_value_id id);  /* nnterp layout name, e.g. "Pattern" */
const char *nnt_value_axes(nnt_value_id id);    /* e.g. "[batch num_heads query key]" */
const char *nnt_value_description(nnt_value_id id);

/* ---- runtime ---- */
/* Opens a runtime: reads the INI file, loads every family and backend plugin it names, checks
 * their descriptors and creates the backends. ini_path NULL means: the NNT_CONFIG environment
 * variable, else the configuration that belongs to the libnnt running the call - the build
 * tree's nnt.ini for the library in a build tree, <prefix>/share/nnt/nnt.ini for one installed
 * in <prefix>/lib (found from the library's own location, so an installation works from any
 * prefix and never reads a build tree's files). *out is set even on failure (like
 * sqlite3_open) so that nnt_last_error can say why; close it either way.
 *
 * Plugins found by scanning a [plugins] dir that cannot be used - not a shared object, not an
 * nnt plugin, another ABI, a malformed descriptor, a name or architecture already served by a
 * plugin loaded before it - are skipped, and so is a family the INI does not name whose
 * backend is missing or fails to start; each is recorded (nnt_runtime_warning) and the open
 * succeeds. What the INI names itself must work: a `file =` plugin, a [family.NAME] or
 * [backend.NAME] section, the backend a family section asks for; its failure fails the open
 * (NNT_ERR_IO, NNT_ERR_PLUGIN, NNT_ERR_ABI, NNT_ERR_CONFLICT, NNT_ERR_NOT_FOUND) with a message
 * naming the file and the reason. A model whose family was skipped fails in nnt_model_load the
 * same way. */
nnt_status nnt_runtime_open(const char *ini_path, nnt_runtime **out);
void nnt_runtime_close(nnt_runtime *rt);
const char *nnt_last_error(const nnt_runtime *rt);
nnt_status nnt_last_status(const nnt_runtime *rt);
/* The INI file the runtime was opened from (owned by the runtime). */
const char *nnt_runtime_config_path(const nnt_runtime *rt);
/* Loaded plugins, for listing: kind is "family" or "backend"; detail is a family's backend
 * ("none" when it has no usable backend: nnt_runtime_warning says why) or a backend's summary.
 * The strings belong to the runtime. Returns 0 past the end. */
int nnt_runtime_plugin(const nnt_runtime *rt, int i, const char **kind, const char **name,
                       const char **file, const char **detail);
/* What nnt_runtime_open skipped, for listing: warning i (from 0) sets *file to the plugin file
 * and *reason to why it was skipped or cannot be used, e.g. "built for nnt plugin ABI 3.0, but
 * this core speaks ABI 2.0 ...". Either pointer may be NULL. The strings belong to the runtime
 * and live until nnt_runtime_close. Returns 1, or 0 past the end (or for a NULL runtime). The
 * list is kept when the open fails, so it can be shown next to nnt_last_error. */
int nnt_runtime_warning(const nnt_runtime *rt, int i, const char **file, const char **reason);

/* ---- progress and interruption ---- */
/* What a running call tells the runtime's progress handler. Versioned by struct_size: a handler
 * reads a field only when struct_size covers it. */
typedef enum nnt_progress_kind {
    NNT_PROGRESS_VALUE = 1, /* a forward reached a value site (every block's values: several times a block) */
    NNT_PROGRESS_TOKENS,    /* a generation step picked its tokens */
} nnt_progress_kind;
typedef struct nnt_progress {
    uint32_t struct_size;   /* sizeof(nnt_progress) */
    nnt_progress_kind kind;
    int layer;              /* VALUE: the block of the value, -1 for a value of the whole model */
    int step;               /* TOKENS: the generation step (0: the first new token) */
    int batch;              /* TOKENS: rows */
    const int32_t *tokens;  /* TOKENS: [batch] I32, this step's token of each row, NNT_TOKEN_STOPPED
                             * for a row that stopped before it; valid during the handler only */
} nnt_progress;
/* The handler returns 0 to go on, non-zero to stop the call. */
typedef int (*nnt_progress_fn)(void *user, const nnt_progress *p);
/* Sets (fn NULL: clears) the progress handler of runtime rt, after the idea of SQLite's
 * sqlite3_progress_handler: every call of rt that runs a forward (traces, sessions, generation,
 * requests, lens, patch, attribute, harvest) calls fn(user, p) on its own thread at each value
 * site of the forward and after each generation step. A non-zero return stops the call: it
 * returns NNT_ERR_INTERRUPTED, with a message naming where, and what it made is freed as on any
 * error (a session it ran on may then hold a partial step: start a new one). fn must not call
 * rt (such a call is refused with NNT_ERR_BUSY); it may read shared state of its own (a flag
 * set by another thread, a deadline). The gradient pass of attribute is not interrupted inside
 * its backward pass, only in its forwards. Errors: NNT_ERR_INVALID_ARGUMENT (NULL rt),
 * NNT_ERR_BUSY (a call of rt is running). */
nnt_status nnt_runtime_set_progress(nnt_runtime *rt, nnt_progress_fn fn, void *user);

/* ---- models ---- */
/* Loads the checkpoint directory `dir` (config.json plus model.safetensors or a sharded
 * model.safetensors.index.json), picks the family plugin that serves its architecture, binds
 * and prepares the weights on that family's backend. Errors: NNT_ERR_IO (missing files),
 * NNT_ERR_FORMAT (malformed JSON or safetensors), NNT_ERR_NOT_FOUND (no plugin serves the
 * architecture - the message lists those that are served - or a missing tensor),
 * NNT_ERR_SHAPE (a tensor disagrees with config.json), NNT_ERR_CONFIG. */
nnt_status nnt_model_load(nnt_runtime *rt, const char *dir, nnt_model **out);
/* nnt_model_load for one pipeline stage: only the weights of blocks [first_layer, end_layer) are
 * bound (mapped or uploaded), with the embedding when first_layer is 0 and the final norm and
 * lm_head when end_layer is the model's block count - what one rank of a run over several ranks
 * holds. The model then runs only stages within those blocks (nnt_trace_run_stage,
 * nnt_session_forward_stage; any other call fails with NNT_ERR_INVALID_ARGUMENT naming both
 * ranges) and nnt_project_on_vocab only when it holds the readout. A family built before ABI
 * 3.3 binds every block's weights, and runs as such a stage all the same. Errors: those of
 * nnt_model_load, NNT_ERR_INVALID_ARGUMENT (not 0 <= first_layer < end_layer <= num_layers). */
nnt_status nnt_model_load_stage(nnt_runtime *rt, const char *dir, int first_layer, int end_layer, nnt_model **out);
void nnt_model_free(nnt_model *m);
const nnt_model_info *nnt_model_get_info(const nnt_model *m);
const char *nnt_model_family(const nnt_model *m);
const char *nnt_model_backend(const nnt_model *m);

/* The memory a loaded model holds, in bytes. Weights stay in the checkpoint's encoding: a
 * host backend reads them in place from the memory-mapped files (mapped_bytes, shared with the
 * page cache), a device backend copies them as they are (device_bytes). */
typedef struct nnt_memory {
    uint64_t file_bytes;      /* the checkpoint's safetensors files on disk */
    uint64_t mapped_bytes;    /* stored bytes of the tensors the family bound (weights, scales) */
    uint64_t allocated_bytes; /* host heap the load left allocated (the family's own tables,
                               * re-laid scale grids, a host backend's weight copies); measured
                               * as the allocator's growth over the load where the C library
                               * reports it (glibc), else what the core and backend counted */
    uint64_t device_bytes;    /* backend memory holding the weights (weight_bytes of the backend) */
    int precision;            /* nnt_precision of the family (0: f32, 1: bf16) */
} nnt_memory;
/* Fills *out for model m. Errors: NNT_ERR_INVALID_ARGUMENT (a NULL argument). */
nnt_status nnt_model_memory(const nnt_model *m, nnt_memory *out);

/* What re-encoding at load changed (the INI file's [family.NAME] weights = fp8: linear and
 * expert weights stored in F32, BF16 or F16 held as FP8 e4m3 with a float32 scale per 128 x 128
 * block). All zeros when the model's weights are as stored. Errors compare each re-encoded
 * value, decoded, with the value the checkpoint stores. */
typedef struct nnt_reencoding {
    uint32_t struct_size;   /* the caller sets sizeof(nnt_reencoding) */
    int64_t tensors;        /* weights re-encoded */
    uint64_t values;        /* their values */
    uint64_t stored_bytes;  /* their bytes as the checkpoint stores them */
    uint64_t encoded_bytes; /* their bytes as FP8 codes and block scales */
    double rel_rms;         /* sqrt(sum of (stored - re-encoded)^2 / sum of stored^2), over all */
    double max_abs;         /* the largest |stored - re-encoded| of any value */
    double worst_rel_rms;   /* the largest relative RMS error of one tensor ... */
    char worst[256];        /* ... and that tensor's checkpoint name ("" when none) */
} nnt_reencoding;
/* Fills *out for model m. Errors: NNT_ERR_INVALID_ARGUMENT (a NULL argument, or struct_size
 * other than sizeof(nnt_reencoding)). */
nnt_status nnt_model_reencoding(const nnt_model *m, nnt_reencoding *out);

/* How a checkpoint stores its tensors, for nnt_checkpoint_inspect. */
typedef enum nnt_encoding {
    NNT_ENC_F32 = 0,
    NNT_ENC_BF16,
    NNT_ENC_F16,
    NNT_ENC_FP8,    /* F8_E4M3 weights with block scales */
    NNT_ENC_FP4,    /* e2m1 weights packed two per byte (I8/U8 or F4) with group scales */
    NNT_ENC_SCALES, /* the scale companions of FP8 and FP4 weights */
    NNT_ENC_OTHER,  /* integers (routing tables, ...) and anything else */
    NNT_ENC_COUNT
} nnt_encoding;

/* A checkpoint's contents from its safetensors headers alone (no tensor is read or decoded, so
 * it is quick on a release's folder). Bytes are as stored. */
typedef struct nnt_checkpoint_summary {
    uint64_t file_bytes;                 /* the safetensors files on disk */
    int n_files;
    int64_t n_tensors;
    uint64_t bytes[NNT_ENC_COUNT];       /* stored bytes per encoding */
    int64_t tensors[NNT_ENC_COUNT];      /* tensors per encoding */
} nnt_checkpoint_summary;
/* Fills *out for the checkpoint directory `dir` (config.json plus model.safetensors or a
 * sharded index). Errors: those of nnt_model_load's file checks (NNT_ERR_IO, NNT_ERR_FORMAT,
 * NNT_ERR_NOT_FOUND), with nnt_last_error(rt) saying why. */
nnt_status nnt_checkpoint_inspect(nnt_runtime *rt, const char *dir, nnt_checkpoint_summary *out);
/* The name of an encoding ("FP8 e4m3", ...). */
const char *nnt_encoding_name(nnt_encoding e);
/* The tokenizer of folder dir, loaded with the hints of the family serving the checkpoint there
 * (config.json's architectures, as nnt_model_load picks the family; no config.json or no such
 * family: no hints). *out as nnt_tokenizer_load sets it (even on failure: its last error says
 * why); free it with nnt_tokenizer_free. Errors: those of nnt_tokenizer_load_hinted. */
nnt_status nnt_runtime_tokenizer(nnt_runtime *rt, const char *dir, nnt_tokenizer **out);
/* The tokenizer of model m's folder (nnt_runtime_tokenizer, loaded on the first call and kept by
 * the model until nnt_model_free). Errors: NNT_ERR_NOT_FOUND (the folder has no tokenizer) and
 * those of loading, with nnt_last_error saying why. */
nnt_status nnt_model_tokenizer(nnt_model *m, nnt_tokenizer **out);
/* Writes the module tree with native names, standard names and every value's layout, grouping
 * identical consecutive blocks, like nnterp's printout. */
nnt_status nnt_model_print(const nnt_model *m, FILE *out);
/* Note i (from 0) of model m's family about this model (nnt_family_descriptor.note): one line of
 * plain text that nnt_model_print writes after the tree, under "notes:", one "  - " line each.
 * Sets *text (may be NULL) to the note, owned by the model and valid until nnt_model_free, and
 * returns 1; returns 0 (and *text NULL) past the last note, for a family without notes, a NULL
 * m or a negative i. At most 64 notes (NNT_FAMILY_MAX_NOTES of nnt_family.h) are read. */
int nnt_model_note(const nnt_model *m, int i, const char **text);
/* Writes every standard value per module and block: served or not, with the reason when not. As
 * a table, or as tab-separated rows (module, block, value, served, layout, axes, dtype,
 * writable, reason; the module column is headed "host") when tsv is nonzero. */
nnt_status nnt_model_support(const nnt_model *m, FILE *out, int tsv);
/* Describes the value one path names (a single block) for a call of the given dims (NULL: no
 * shapes). A value the family does not serve returns NNT_OK with info->served == 0. */
nnt_status nnt_model_value_info(const nnt_model *m, const char *path, const nnt_call_dims *dims,
                                nnt_value_info *info);

/* ---- traces ---- */
/* An edit callback: changes `value` (host memory, the value's dtype and shape) in place.
 * `path` is the canonical path of the value, `layer` its block (-1 for the model module). */
typedef nnt_status (*nnt_edit_fn)(void *user, const char *path, int layer, nnt_tensor *value,
                                  nnt_error *err);

nnt_status nnt_trace_new(nnt_model *m, nnt_trace **out);
void nnt_trace_free(nnt_trace *t);

/* Requests. Each is checked now: an unknown path (the message suggests the nearest names), a
 * block index out of range, a value the family does not serve there (with its reason), an
 * edit on a read-only value. Requests on one value apply in the order they were made.
 * A path names a standard value ("layers.1.mlp.expert_weights") or, on a family that serves
 * them (nnt_native_info), a module's input or output under the module's path
 * ("layers.1.self_attn.q_proj.output", "lm_head.input"; each name in the checkpoint's or the
 * standard spelling): the standard value it is, or a value of its own, F32 [batch seq
 * features], which `nnt print` and nnt_model_support list. */
/* nnt_trace_save: path may end in a slice, "[item, item, ...]", applied to the value in its own
 * layout (nnt_value_axes): an index i (the axis is dropped; negative counts from the axis end), a
 * range start:stop[:step] (any part may be left out, negatives count from the end, bounds are
 * clipped to the axis as in Python, step >= 1; the axis is kept), or "..." (once: as many whole
 * axes as needed); axes past the items are kept whole. E.g. "layers.*.layer_output[:, -1]" keeps
 * the last position of every row, [batch, hidden_size]; "layers.1.self_attn.
 * attention_probabilities[:, 3]" keeps head 3, [batch, query, key]. Only the slice is copied out
 * as the forward emits the value (a device value passes once through a host buffer), so a run
 * holds no more than the slices; the result keeps the value's key (see "saved values"). Errors:
 * NNT_ERR_PATH for a malformed slice, now; NNT_ERR_INDEX, when a run starts and before its
 * forward, for an index outside its axis, a range that selects nothing or more items than the
 * value has axes, naming the axis. Edits take no slice (NNT_ERR_PATH).
 * Wildcards over value names: "*" (or "model.*") saves every value the model serves (the model's,
 * then each block's, as nnt_model_support marks them served), "layers.N.*" every value of block
 * N ("layers.*.*": of every block), "layers.N.HOST.*" one host module's (self_attn, linear_attn,
 * mlp or a native spelling the family renames to one); each match becomes its own save under its
 * own key. A slice after a wildcard is applied to the matches it fits, the others left out: an
 * item restricting axis 0 needs a "batch" axis there, axis 1 a "seq" axis, a later axis only
 * that the value has it. Errors: NNT_ERR_INDEX / NNT_ERR_PATH for a bad block or host, now;
 * NNT_ERR_NOT_SERVED when nothing matches. Every run adds up what its saves hold (slices applied)
 * before the forward: past the INI's [trace] save_mb (default 8192 MiB), NNT_ERR_OUT_OF_MEMORY
 * naming the total and the largest value. */
nnt_status nnt_trace_save(nnt_trace *t, const char *path);
nnt_status nnt_trace_edit(nnt_trace *t, const char *path, nnt_edit_fn fn, void *user);
/* value := v. v (host, any float dtype for float values) must have the value's shape; checked
 * when the run starts, before the forward. The tensor is copied. */
nnt_status nnt_trace_set(nnt_trace *t, const char *path, const nnt_tensor *v);
/* value += factor * v, v broadcast over the leading axes: its shape must equal the value's
 * trailing axes (a [hidden_size] vector adds to every position; on a Streams value, to every
 * stream). */
nnt_status nnt_trace_add(nnt_trace *t, const char *path, const nnt_tensor *v, float factor);
nnt_status nnt_trace_scale(nnt_trace *t, const char *path, float factor);
nnt_status nnt_trace_zero(nnt_trace *t, const char *path);
/* value[i...] := fill wherever where_path's value equals `equals`; where_path names a value of
 * the same block emitted earlier in the forward whose shape is a prefix of this value's
 * (e.g. expert_weights where expert_indices == e). */
nnt_status nnt_trace_masked_fill(nnt_trace *t, const char *path, const char *where_path,
                                 int64_t equals, float fill);

/* ---- gradients (docs/gradients.md) ----
 * A trace may ask for the gradient of one scalar L with respect to served values of its forward,
 * the forward as its edits leave it (set, add, scale, zero, masked fill and steering are
 * differentiated as the elementwise maps they are; callback edits and skip_layers are refused).
 * L is the trace's metric, plus sum(cotangent * V) for each cotangent given on a value V; with
 * both, their sum. nnt_trace_run then runs the forward recorded on the model's gradient tape and a
 * reverse pass through the backend's backward ops, in float32, with respect to activations only:
 * no weight ever gets a gradient. The results are saved beside the trace's saves: under
 * "grad:PATH" (float32, the value's shape, the request's slice applied; "#r" as for saves when
 * r earlier gradient requests cover the value) dL/dV at the value as the forward left it after
 * its edits, and "metric" (float32, no axes) the metric's value. Only whole forwards of
 * nnt_trace_run take gradient requests (generation, sessions and pipeline stages refuse them),
 * and only on a backend with the backward ops (the error names a missing one).
 *
 * nnt_trace_grad: path as nnt_trace_save's (wildcards, a trailing slice). Errors
 * (nnt_last_error): NNT_ERR_PATH, NNT_ERR_NOT_SERVED, NNT_ERR_UNSUPPORTED for a value without a
 * gradient (token ids, the attention mask, the input size, integer values such as
 * expert_indices: a choice has no gradient; next_token_probs, derived on the host), naming it and
 * why. A value the family computes outside its backend's ops fails the run, named. */
nnt_status nnt_trace_grad(nnt_trace *t, const char *path);
/* The trace's metric, read off the logits after the forward and summed over the batch rows and
 * the positions: "logit-diff:A,B" (logits[A] - logits[B]), "prob:T", "logprob:T" (log_softmax's
 * entry T), at positions (as nnt.h's token positions: p >= 0 a row's p-th real token, p < 0 from
 * the end; n_positions 0: the last token, -1), a row without the position adding nothing; or
 * "loss": the mean over the pairs (b, t) with tokens t and t + 1 of row b both real of
 * -log softmax(logits[b, t])[input_ids[b, t + 1]] (transformers' language-model loss with the
 * padding's labels -100), positions not allowed. One metric per trace. Errors:
 * NNT_ERR_INVALID_ARGUMENT naming the text and what was expected, NNT_ERR_CONFLICT (a second
 * metric). Token ids are checked against the vocabulary when the trace runs. */
nnt_status nnt_trace_metric(nnt_trace *t, const char *metric, const int *positions, int n_positions);
/* A cotangent dL/dV on value path (one block, no wildcard): any float dtype, host memory, the
 * value's shape in the call (checked when the trace runs: NNT_ERR_SHAPE), copied. Adds
 * sum(cotangent * V) to L: a cotangent on the logits computed from them however the caller likes
 * (e.g. in numpy) backpropagates that metric. Errors: as nnt_trace_grad's, NNT_ERR_PATH for a
 * wildcard. */
nnt_status nnt_trace_cotangent(nnt_trace *t, const char *path, const nnt_tensor *cotangent);

/* ---- token positions ----
 * A position names one token of a batch row: the row's real tokens are counted from its prompt's
 * first token (0-based) across the prompt and every token a session or a generation adds after
 * it. Left padding never counts, and a position names the same token whether the token is
 * processed in the prompt's call or in a later one-token call. In a list of positions:
 *   p >= 0             the row's token p; it applies in the call that processes that token (in a
 *                      generation, token p of a 10-token prompt is its (p - 9)-th generated token
 *                      for p >= 10, fed back at step p - 9);
 *   p < 0              counts back from the row's current end, which is the row's newest token
 *                      as of the call being run, this call's tokens included: -1 is the row's last
 *                      token of that call (the prompt's last token in the prompt's call, the newly
 *                      fed token in each later one-token call), -2 the one before, ... It applies
 *                      where that token is processed by the call: in a one-token call only -1
 *                      names a token of the call (-2 names a token already in the cache, which
 *                      keeps the values it was computed with);
 *   NNT_POS_PROMPT     every token of the prompt (the first call of a session, or the one call
 *                      of nnt_trace_run);
 *   NNT_POS_GENERATED  every token after the prompt (the tokens each later call of a session
 *                      brings: in a generation, each generated token as it is fed back);
 *   NNT_POS_ALL        every token (as an empty list).
 * So steering position 0 in a generation edits the prompt's first token only, and gives the
 * tokens greedy decoding gives when each step runs one full forward steered at position 0.
 * nnt_trace_run refuses a position that no row has (p >= the longest row, p < -longest) and
 * NNT_POS_GENERATED; nnt_generate refuses positions no step reaches (p >= longest prompt +
 * max_new_tokens - 1, since the last token generated is never fed back). A row shorter than a
 * position is simply not edited there. */
#define NNT_POS_PROMPT (-2147483647 - 1)
#define NNT_POS_GENERATED (-2147483647)
#define NNT_POS_ALL (-2147483646)

/* Parses a position list as the command line writes it: comma-separated integers and the words
 * "prompt", "generated" and "all", e.g. "0,5,-1" or "generated" or "0,generated". Writes at
 * most `max` entries to out (the words as NNT_POS_*) and their number to *n. Errors:
 * NNT_ERR_INVALID_ARGUMENT naming the bad entry (not an integer in -2147483645..2147483647, nor
 * one of the words; an empty entry; more than max entries), with nnt_last_error(rt) saying
 * which; the message does not repeat the list, which the caller names ("--steer-positions
 * 0,x: 'x' is neither an integer ..."). rt may be NULL (then no message is kept). */
nnt_status nnt_positions_parse(nnt_runtime *rt, const char *text, int *out, int max, int *n);
/* nnt_positions_parse with its message in err (may be NULL), for a caller without a runtime
 * (a command line read before one is opened). */
nnt_status nnt_positions_read(const char *text, int *out, int max, int *n, nnt_error *err);

/* Built-in operations, checked like the requests above:
 * ablate_expert: zero expert e's weight wherever block `layer` routes to it;
 * skip_layers: blocks start..end are skipped - block end's output is block start's input;
 * steer: add factor * vector to layer_output of blocks first..last at the given token positions
 *   (see "token positions" above; NULL / 0: every token): a [hidden_size] vector on every stream,
 *   or, on a model of num_streams > 1 residual streams (DeepSeek-V4), a [num_streams,
 *   hidden_size] one a row per stream. Other shapes: NNT_ERR_SHAPE naming both. */
nnt_status nnt_trace_ablate_expert(nnt_trace *t, int layer, int expert);
nnt_status nnt_trace_skip_layers(nnt_trace *t, int start, int end);
nnt_status nnt_trace_steer(nnt_trace *t, int first, int last, const int *positions, int n_positions,
                           const nnt_tensor *vector, float factor);
/* Requests added after this call apply only at session steps from..to (to < 0: every later
 * step). Step 0 is a session's first call (the prompt); step s its s-th continuation. */
nnt_status nnt_trace_steps(nnt_trace *t, int from, int to);

/* Runs the forward on ids [batch, seq] (I32) with attention_mask [batch, seq] (1 real, 0
 * padding; NULL means all real). Positions count each row's real tokens from 0, so left padding
 * does not shift them. Request shapes are checked before the forward starts. Earlier results
 * of this trace are dropped. */
nnt_status nnt_trace_run(nnt_trace *t, const int32_t *ids, const int32_t *mask, int batch,
                         int seq);

/* ---- pipeline stages ----
 * One model can run as contiguous stages of blocks, each call running blocks [first_layer,
 * end_layer) and handing the residual stream to the next: stage 0 embeds the ids, the last
 * stage computes the final norm and the logits, and running every stage in order gives the
 * values and tokens of one whole-model call (nnt_plan_split chooses a balanced split). Each
 * stage is its own call, in this process here; the stages share nothing but the stream.
 *
 * The stream is float32 host memory of shape [batch, seq, streams, hidden_size], streams =
 * nnt_model_info.num_streams (1 for a single residual stream; DeepSeek-V4's hyper-connection
 * streams): the layout of layers.i.layer_output (with a streams axis of 1 where that value has
 * none). hidden_in (read only, never written) is the stream entering block first_layer, the
 * previous stage's hidden_out; hidden_out (written) receives the stream leaving block
 * end_layer - 1. Both belong to the caller, batch * seq * streams * hidden_size floats each,
 * and must not overlap.
 *
 * A stage's trace serves the values its stage holds and leaves the others to the stages that
 * hold them: values of blocks first_layer..end_layer - 1; token_embeddings and the inputs
 * (input_ids, attention_mask, input_size) on the stage starting at block 0; final_norm_output,
 * lm_head_output, logits and next_token_probs on the stage ending at the last block. So the
 * same requests can be made on every stage's trace (a "layers.*" path covers the stage's blocks).
 * Requests are checked as in nnt_trace_run; an edit that copies a value across stages
 * (skip_layers over a stage boundary) is refused with NNT_ERR_UNSUPPORTED.
 *
 * Errors (before anything runs; the message names the argument and what was expected):
 * NNT_ERR_INVALID_ARGUMENT for first_layer outside [0, num_layers), end_layer outside
 * (first_layer, num_layers], hidden_in NULL when first_layer > 0 or set when first_layer is 0,
 * hidden_out NULL when end_layer < num_layers or set when end_layer is num_layers, overlapping
 * buffers; NNT_ERR_UNSUPPORTED for a family plugin built before ABI 3.2 (it runs only the whole
 * model); then those of nnt_trace_run. */

/* Runs blocks [first_layer, end_layer) of the forward on ids [batch, seq] (I32; every stage
 * takes the ids, which DeepSeek-V4's hash-routed blocks read) with attention_mask [batch, seq]
 * (as nnt_trace_run). nnt_trace_run(t, ...) is nnt_trace_run_stage(t, ..., 0, num_layers, NULL,
 * NULL). Earlier results of this trace are dropped. */
nnt_status nnt_trace_run_stage(nnt_trace *t, const int32_t *ids, const int32_t *mask, int batch, int seq,
                               int first_layer, int end_layer, const float *hidden_in, float *hidden_out);

/* Makes every check nnt_trace_run_stage makes before its forward - the stage, the ids and mask,
 * the requests against the call's shapes, steering positions - and returns without running
 * anything: the stages of a distributed run agree that every request holds before any runs.
 * Earlier results of t are dropped. Errors: those of nnt_trace_run_stage's checks. */
nnt_status nnt_trace_check_stage(nnt_trace *t, const int32_t *ids, const int32_t *mask, int batch, int seq,
                                 int first_layer, int end_layer, const float *hidden_in, float *hidden_out);

/* ---- runs over several ranks ----
 * `mpirun -np N nnt trace|lens|generate ...` runs one model as N pipeline stages, one per
 * process (rank), through a transport plugin (nnt_transport.h; nnt's own is Open MPI). */
typedef struct nnt_transport_descriptor nnt_transport_descriptor;
/* The transport of this process's run: *out NULL when no launcher started it as one rank of
 * several (a single-process run; nothing is loaded then), or the checked descriptor of the
 * INI's [distributed] transport plugin (loaded once, unloaded by nnt_runtime_close), not yet
 * opened. Errors: NNT_ERR_CONFIG (no [distributed] transport), NNT_ERR_IO (the file is missing:
 * nnt was built without MPI), NNT_ERR_PLUGIN, NNT_ERR_ABI (not a usable transport plugin). */
nnt_status nnt_runtime_transport(nnt_runtime *rt, const nnt_transport_descriptor **out);
/* The INI's [distributed] settings: *timeout_s the bound of every wait for another rank in
 * seconds (600 when unset); *stage_cuts / *n_stage_cuts the fixed split (the first block of each
 * rank after the first, ascending; owned by rt) or NULL / -1 when the split is left to
 * nnt_plan_split. Any output pointer may be NULL. */
void nnt_runtime_distributed(const nnt_runtime *rt, double *timeout_s, const int **stage_cuts, int *n_stage_cuts);

/* ---- sessions and generation ---- */
/* A session carries a batch's caches from call to call: key/value caches (a sliding block keeps
 * only its window), recurrent and convolution states, compressor state. capacity bounds the
 * tokens per row over the whole session. */
typedef struct nnt_session nnt_session;
nnt_status nnt_session_new(nnt_model *m, int batch, int capacity, nnt_session **out);
void nnt_session_free(nnt_session *s);
int nnt_session_length(const nnt_session *s);
/* Runs the next `seq` tokens of every row (ids [batch, seq]); the first call is the prompt (mask
 * may mark left padding), later calls continue it (mask NULL: all real). Values saved by t
 * accumulate over the session's calls: a value emitted again is saved as "path@k", its k-th
 * emission (so a Kimi `state` is "state@<token index>"; see "saved values" below). */
nnt_status nnt_session_forward(nnt_session *s, nnt_trace *t, const int32_t *ids, const int32_t *mask, int seq);
/* nnt_session_forward for one pipeline stage (see "pipeline stages" above): the session's caches
 * of blocks first_layer..end_layer - 1 take the call's tokens, the others are never touched. A
 * session keeps the stage of its first call: every later call must run the same blocks
 * (NNT_ERR_INVALID_ARGUMENT naming both ranges otherwise; nnt_session_forward is the stage
 * [0, num_layers)). Generating through stages: one session per stage, each step's ids given to
 * every stage, the stream handed from stage to stage, the token picked from the last stage's
 * logits. t may be NULL. Errors: those of the stages and of nnt_session_forward. */
nnt_status nnt_session_forward_stage(nnt_session *s, nnt_trace *t, const int32_t *ids, const int32_t *mask, int seq,
                                     int first_layer, int end_layer, const float *hidden_in, float *hidden_out);

typedef struct nnt_generate_opts {
    int max_new_tokens;
    float temperature; /* <= 0: greedy */
    int top_k;         /* 0: no top-k filter */
    float top_p;       /* >= 1: no nucleus filter */
    uint64_t seed;     /* for sampling; the same seed gives the same tokens */
    /* Stop tokens (e.g. the tokenizer's eos): a row that emits one of these n_stop_ids ids
     * stops there. The array is the caller's and is only read during the call. NULL / 0 (as
     * in a zero-initialised struct): no stop token, every row gets max_new_tokens tokens. */
    const int32_t *stop_ids;
    int n_stop_ids;
} nnt_generate_opts;

/* The value nnt_generate writes in a row's slots after the stop token it emitted. */
#define NNT_TOKEN_STOPPED (-1)

/* Generates max_new_tokens tokens per row after the prompt ids [batch, seq] (mask: left padding),
 * under trace t (may be NULL): its requests apply at every step (see nnt_trace_steps) and its
 * saves accumulate ("path@step"). out: [batch, max_new_tokens] I32, owned by the caller: the new
 * ids, row by row.
 * Stop tokens: when row b emits a stop id at step k, out[b][k] holds that id and out[b][k+1..]
 * hold NNT_TOKEN_STOPPED. The row stays in the batch while other rows run (it is fed its stop
 * id again, and its saved values after step k mean nothing), and sampling draws for it as
 * before, so the other rows get exactly the tokens they would get without stop ids. Once every
 * row has stopped the call returns NNT_OK without running further steps: saved values then
 * have fewer "path@step" entries than max_new_tokens.
 * Errors: NNT_ERR_INVALID_ARGUMENT (NULL m, ids, opts or out; max_new_tokens, top_k or
 * n_stop_ids negative; stop_ids NULL with n_stop_ids > 0), those of nnt_session_new and of the
 * forward (e.g. an id outside the vocabulary). */
nnt_status nnt_generate(nnt_model *m, nnt_trace *t, const int32_t *ids, const int32_t *mask, int batch, int seq,
                        const nnt_generate_opts *opts, int32_t *out);

/* How one pipeline stage of a generation reaches the others (another process's stages, through
 * a transport): nnt_generate_stage calls these, in step order, from the calling thread. Each
 * returns NNT_OK or an error with its message in *err. */
typedef struct nnt_stage_link {
    uint32_t struct_size;   /* sizeof(nnt_stage_link) */
    int first_layer;        /* this stage's blocks [first_layer, end_layer) */
    int end_layer;
    void *ctx;              /* handed to the functions */
    /* Fills hidden [batch, seq, streams, hidden_size] (F32, n floats) with the stream the
     * previous stage sent for this step; called when first_layer > 0. */
    nnt_status (*recv_hidden)(void *ctx, float *hidden, size_t n, nnt_error *err);
    /* Hands the stream leaving block end_layer - 1 (n floats, read only) to the next stage;
     * called when end_layer < num_layers. */
    nnt_status (*send_hidden)(void *ctx, const float *hidden, size_t n, nnt_error *err);
    /* The step's tokens, one per row ([batch] I32, before stop handling): the last stage has
     * picked them (is_source 1) and gives them to every other stage; any other stage
     * (is_source 0) receives them into tokens. */
    nnt_status (*share_tokens)(void *ctx, int32_t *tokens, int batch, int is_source, nnt_error *err);
} nnt_stage_link;

/* nnt_generate for one pipeline stage (see "pipeline stages"): runs the link's blocks for the
 * prompt and every step, its caches in a session of its own; the last stage picks each step's
 * tokens from its logits (temperature, top-k, top-p, seed as in nnt_generate) and every stage
 * gets them through share_tokens, so all stages fill out [batch, max_new_tokens] alike, stop
 * tokens included. t's saves are those of the stage. Errors: NNT_ERR_INVALID_ARGUMENT (link
 * NULL, incomplete, or blocks outside the model), NNT_ERR_FORMAT (a shared token outside the
 * vocabulary), the link's, and those of nnt_generate and nnt_session_forward_stage. */
nnt_status nnt_generate_stage(nnt_model *m, nnt_trace *t, const int32_t *ids, const int32_t *mask, int batch, int seq,
                              const nnt_generate_opts *o, const nnt_stage_link *link, int32_t *out);

/* Saved values. Each is kept under one key, the same in nnt_trace_get, nnt_trace_lookup,
 * nnt_trace_result and the files nnt_trace_write_safetensors writes:
 *   PATH[@k][#r]
 * PATH is the value's canonical path ("layers.1.mlp.expert_weights"); @k (k >= 1) numbers the
 * times one save request saved the value, from PATH (k = 0) on, over a stateless run or over all
 * calls of a session: the value of session step k (nnt_session_forward, nnt_generate; with
 * nnt_trace_steps(2, 3) the step-2 value is PATH and the step-3 one PATH@1), or copy k of a value
 * a family emits several times in one call (Kimi's per-token `state`: state@<token index>, counted
 * on across calls); #r (r >= 1) marks the value saved
 * by a request when r earlier save requests of the trace cover the same value - e.g. saving
 * "layers.0.layer_output", editing it, and saving it again gives "layers.0.layer_output" (before
 * the edit) and "layers.0.layer_output#1" (after), and a save of "layers.*.layer_output" after
 * a save of "layers.0.layer_output" gives "layers.0.layer_output#1" for block 0. @0 and #0 are
 * never written (they are the key without the suffix); a lookup accepts any path spelling and
 * the suffixes in either order.
 * An optional value the family emitted as None (Kimi's state_input at the start of a prompt:
 * there is no earlier state) is kept as absent: nnt_trace_get returns NULL for it (as for a key
 * never saved), nnt_trace_lookup and nnt_trace_result tell the two apart, and a file written by
 * nnt_trace_write_safetensors lists such keys in its metadata. */

/* The saved value under key, or NULL when nothing was saved under it or it is absent (None).
 * The tensor stays owned by the trace until the next run (of a stateless trace; a session
 * keeps accumulating) or nnt_trace_free. */
const nnt_tensor *nnt_trace_get(const nnt_trace *t, const char *key);
/* Looks key up: NNT_OK with *value the saved tensor and *is_none 0, or NNT_OK with *value NULL
 * and *is_none 1 when the value was emitted as None (absent); NNT_ERR_NOT_FOUND (*value NULL,
 * *is_none 0) when nothing was saved under key; NNT_ERR_INVALID_ARGUMENT for a NULL t or key.
 * value and is_none may be NULL. Sets no error message (the trace is const). */
nnt_status nnt_trace_lookup(const nnt_trace *t, const char *key, const nnt_tensor **value, int *is_none);
/* Every saved value in the order saved: result i's key and tensor (NULL when absent). */
int nnt_trace_result_count(const nnt_trace *t);
nnt_status nnt_trace_result(const nnt_trace *t, int i, const char **key,
                            const nnt_tensor **value);
/* Appends a value saved elsewhere - by another pipeline stage's trace, in another process - to
 * t's results under key (as nnt_trace_result gave it there): value (host memory, copied; NULL
 * for a value absent as None) then reads back through nnt_trace_get, nnt_trace_result and
 * nnt_trace_write_safetensors like t's own, until t's next run. Errors: NNT_ERR_INVALID_ARGUMENT
 * (key empty or of 192 characters or more, value on a device), NNT_ERR_CONFLICT (t already holds
 * key), NNT_ERR_OUT_OF_MEMORY. */
nnt_status nnt_trace_import_result(nnt_trace *t, const char *key, const nnt_tensor *value);
/* Writes every saved value that is not absent as one tensor of a safetensors file, under its
 * key. The file's __metadata__ holds "producer": "nnt", "family", "format": "pt", and, when any
 * saved value is absent, "none_values": their keys joined by commas (keys hold no comma), e.g.
 * "layers.1.linear_attn.state_input,layers.2.linear_attn.state_input". Errors: those of
 * nnt_safetensors_write. */
nnt_status nnt_trace_write_safetensors(const nnt_trace *t, const char *file);

/* ---- operations ---- */
/* The logit lens, nnterp's project_on_vocab: x (host, any float dtype) [..., hidden_size] goes
 * through the model's final norm and lm_head; on a model with several residual streams a
 * Streams tensor [batch, seq, streams, hidden_size] (or one position's [streams, hidden_size])
 * is first collapsed as the model collapses its last block's streams, so the lens on the last
 * block's layer_output equals logits. *out receives a new host F32 tensor [..., vocab_size]
 * the caller frees with nnt_tensor_free. Errors: NNT_ERR_SHAPE when the last axis is not
 * hidden_size. */
nnt_status nnt_project_on_vocab(nnt_model *m, const nnt_tensor *x, nnt_tensor *out);

/* ---- mapped checkpoints ----
 * A model reads its weights in place from memory-mapped safetensors files. Every load and
 * forward (so every session and generation step) ends by comparing each file's size and
 * modification time (st_size, st_mtim) with those at open, and fails with NNT_ERR_IO naming the
 * file when they differ. A file truncated while mapped makes reads past its new end raise
 * SIGBUS, which ends the process unless the program calls this function first: it installs a
 * process-wide SIGBUS handler that, for a fault inside a mapped checkpoint, replaces the rest of
 * that mapping with zero pages (so the read completes) and marks the file; the load or forward
 * then fails with NNT_ERR_IO naming the file and the byte. A SIGBUS elsewhere goes to the
 * handler installed before, or ends the process as before. The library never installs the
 * handler by itself. Call it once, before threads start (it is idempotent). Not detected: an
 * in-place rewrite that keeps the size and the modification time (the file system's time
 * resolution, or a time set back); a change after the check. Returns NNT_ERR_IO when sigaction
 * fails. */
nnt_status nnt_protect_mapped_files(void);

/* ---- pipeline plans ----
 * How a checkpoint's blocks split into contiguous pipeline stages, one per rank, and what each
 * rank holds. A plan reads only config.json and the safetensors headers (or, without the shards,
 * config.json and model.safetensors.index.json), so it works on a release's folder without its
 * weights. Bytes are bytes (1 GB = 1e9 bytes).
 *
 * Where the bytes come from. The core reads num_hidden_layers (the block count) itself and knows
 * no family: given a runtime (nnt_plan_opts.runtime), the plan asks the family plugin serving
 * config.json (as nnt_model_load picks it) for its cost model, the descriptor's `costs` entry
 * (nnt_family.h, ABI 3.4), which computes every block's weight and cache bytes and the readout's
 * from config.json alone; the safetensors headers, when present, then replace its weights (an
 * exact plan). Without a runtime, without a family serving the architecture, or with a family
 * whose descriptor has no `costs` (an older minor's), the weights come from the headers alone
 * and the caches are not known (nnt_plan_summary's caches_known 0, costs_from "headers";
 * nnt_plan_print says why); a folder with neither shards nor a cost model cannot be planned.
 *
 * Weights: with every safetensors file present, each block's bytes are exact - the sum of the
 * stored sizes (numel x dtype size, FP4 packed two per byte, scale companions included) of the
 * tensors whose name holds "layers.<block>." - and the embedding goes to the first stage; every
 * other tensor outside the blocks (final norm, lm_head, DeepSeek-V4's hc_head_*) to the last.
 * Tensors of multi-token-prediction modules (a name segment starting "mtp") and of blocks at or
 * past num_hidden_layers are not loaded by nnt and are counted apart (unused_bytes). Without the
 * shards the family's cost model computes the bytes from config.json's dimensions, in the
 * encoding quantization_config gives (the family kit's fam_cost_* helpers, nnt_family_kit.h): FP8 e4m3 one byte per weight with a float32 (ue8m0: one byte)
 * scale per 128x128 block (weight_block_size), FP4 e2m1 routed experts (expert_dtype "fp4")
 * half a byte per weight with one E8M0 scale per 32, BF16 two bytes otherwise (norms, routers,
 * embedding and lm_head as the releases store them); then index_total_bytes is the index's
 * metadata.total_size when there is one.
 *
 * Caches (from the family's cost model; nnt's own families as follows): the bytes nnt's session
 * of capacity `context` tokens per row and `batch` rows allocates (float32): a full attention block T x key/value heads x (key + value head dims); a
 * sliding block only window - 1 tokens whatever T; Kimi-Linear's delta-attention blocks their
 * recurrent state [heads, head_dim, head_dim] and three convolution states [kernel - 1,
 * heads x head_dim]; DeepSeek-V4's blocks their window's keys and values (window - 1 tokens of
 * one head) and, on compressed blocks, the raw compressor rows (key/value and gate, T rows of
 * head_dim, twice that on overlapping rate-4 blocks) and the lightning indexer's (index_head_dim).
 *
 * The split minimises the largest stage's weight bytes (embedding counted on stage 0, final
 * norm and lm_head on the last stage); every stage holds at least one block. */
typedef enum nnt_plan_device { NNT_PLAN_CPU = 0, NNT_PLAN_CUDA = 1 } nnt_plan_device;

typedef struct nnt_plan_opts {
    int ranks;             /* stages, >= 1 and at most the block count */
    nnt_plan_device device;
    uint64_t memory_bytes; /* per rank; 0: 141e9 for cuda (an H200), the machine's physical memory for cpu */
    int64_t context;       /* tokens per row the caches hold (T), >= 0 */
    int64_t batch;         /* rows (B), >= 1 */
    int from_config;       /* nonzero: compute the weights from config.json even when headers are present
                            * (needs a runtime whose family has a cost model) */
    /* ---- since 0.2.0 ---- */
    nnt_runtime *runtime;  /* the runtime whose family plugins give the cost models (borrowed for
                            * the call only: the plan keeps nothing of it); NULL: no cost model, the
                            * weights from the safetensors headers alone and the caches unknown */
} nnt_plan_opts;

typedef struct nnt_plan_stage {
    int first_block, n_blocks; /* the blocks first_block .. first_block + n_blocks - 1 */
    uint64_t weight_bytes;     /* the blocks' weights, plus the embedding (stage 0) and the final
                                * norm and lm_head (last stage) */
    uint64_t cache_bytes;      /* the blocks' caches for the plan's context and batch */
    int fits;                  /* weight_bytes + cache_bytes <= the plan's memory per rank */
} nnt_plan_stage;

typedef struct nnt_plan_summary {
    const char *architecture;  /* config.json's architectures[0] (owned by the plan) */
    int n_blocks, ranks;
    int exact;                 /* 1: weights from the safetensors headers; 0: computed from config.json */
    int n_files;               /* safetensors files read (exact plans) */
    uint64_t first_bytes;      /* the embedding, on stage 0 */
    uint64_t last_bytes;       /* final norm, lm_head and other tensors outside the blocks, on the last stage */
    uint64_t unused_bytes;     /* tensors nnt does not load (multi-token prediction), exact plans only */
    uint64_t index_total_bytes;/* model.safetensors.index.json's metadata.total_size; 0 when absent */
    uint64_t memory_bytes;     /* per rank, after the defaults */
    uint64_t largest_stage;    /* the largest stage's weight_bytes: what the split minimised */
    int all_fit;               /* every stage's weights and caches fit (the weights alone when the
                                * caches are not known) */
    /* ---- since 0.2.0 ---- */
    int caches_known;          /* 1: the caches come from the family's cost model; 0: not known
                                * (cache_bytes read 0) */
    const char *costs_from;    /* "family": the family plugin's cost model gave the caches (and the
                                * weights when not exact); "headers": no cost model, the weights
                                * from the safetensors headers alone (static string) */
    const char *family;        /* the family plugin serving config.json, or NULL (owned by the plan) */
} nnt_plan_summary;

typedef struct nnt_plan nnt_plan;

/* Plans checkpoint folder `dir` over opts->ranks stages, with the cost model of the family
 * plugin of opts->runtime that serves the folder (see above). *out receives a plan freed with
 * nnt_plan_free. Errors (err->msg names the file, field or value; err may be NULL):
 * NNT_ERR_INVALID_ARGUMENT (NULL dir, opts or out; ranks < 1 or more ranks than blocks; batch
 * < 1; context < 0), NNT_ERR_IO (no config.json, a shard the index names is unreadable),
 * NNT_ERR_FORMAT (malformed JSON or safetensors header), NNT_ERR_CONFIG (a field missing or
 * out of range), NNT_ERR_UNSUPPORTED (the folder has no shards and there is no cost model - no
 * runtime, no family serving the architecture, or a family without `costs` - naming the folder
 * and what is missing; or from_config without a cost model), and the family's cost model's own
 * errors. A plan whose ranks do not fit is still returned (nnt_plan_summary's all_fit is 0). */
nnt_status nnt_plan_new(const char *dir, const nnt_plan_opts *opts, nnt_plan **out, nnt_error *err);
void nnt_plan_free(nnt_plan *p);
/* The plan's totals; the strings live as long as the plan. */
void nnt_plan_get_summary(const nnt_plan *p, nnt_plan_summary *out);
/* Block b's weight and cache bytes (either pointer may be NULL). Returns 0 past the end. */
int nnt_plan_block(const nnt_plan *p, int b, uint64_t *weight_bytes, uint64_t *cache_bytes);
/* Stage r (0 .. ranks - 1). Returns 0 past the end. */
int nnt_plan_get_stage(const nnt_plan *p, int r, nnt_plan_stage *out);
/* Writes the plan as the `nnt plan` command prints it: the weights' source, the caches (or
 * "caches: not known - <why>" without a cost model), then one row per rank. */
nnt_status nnt_plan_print(const nnt_plan *p, const char *dir, FILE *out);
/* `nnt plan --grad`: prints to out what a backward of opts->batch rows x opts->context tokens
 * (both >= 1) of the checkpoint in dir holds, from its config.json's dimensions alone (no weights
 * read; docs/gradients.md, "Memory"): the activations the gradient tape keeps in keep-everything
 * mode and in per-block recomputation (the block inputs, float32 [batch, context, streams,
 * hidden] each, plus one block's record), the gradient memory of the reverse pass, the bound
 * (opts->memory_bytes when nonzero, else the runtime's [grad] memory_gb, else half of
 * MemAvailable) and the mode a trace would choose under it, and each mode's peak against the
 * forward's activations. Bytes as GB (1e9) and exact counts; every figure an upper bound.
 * opts->runtime may be NULL (no INI). Errors: NNT_ERR_INVALID_ARGUMENT, NNT_ERR_IO and
 * NNT_ERR_CONFIG for config.json (unreadable, no num_hidden_layers or hidden_size). */
nnt_status nnt_plan_grad_print(const char *dir, const nnt_plan_opts *opts, FILE *out, nnt_error *err);

/* The split alone, for any per-block costs: block_bytes [n_blocks] (each >= 0), first_extra
 * added to the stage holding block 0, last_extra to the stage holding block n_blocks - 1.
 * Writes first_block [ranks + 1] (stage r holds first_block[r] .. first_block[r + 1] - 1;
 * first_block[0] = 0, first_block[ranks] = n_blocks; every stage non-empty) and, when largest
 * is not NULL, the largest stage's cost, which no other contiguous split into ranks non-empty
 * stages makes smaller (found by bisection with a greedy packing, 64 x n_blocks steps). Among
 * the splits reaching it, the stages are then made as even as possible - the least sum of
 * squared stage costs, by dynamic programming - when ranks x n_blocks^2 is at most 2e8; above
 * that, the packing's stages are cut where stages are missing. Errors: NNT_ERR_INVALID_ARGUMENT
 * (NULL arrays, n_blocks < 1, ranks < 1 or ranks > n_blocks), NNT_ERR_OUT_OF_MEMORY. */
nnt_status nnt_plan_split(const uint64_t *block_bytes, int n_blocks, uint64_t first_extra, uint64_t last_extra,
                          int ranks, int *first_block, uint64_t *largest);

/* ---- tensors ---- */
/* Reads one tensor from a safetensors file (key NULL: the file must hold exactly one) into a
 * new host tensor owned by the caller (free with nnt_tensor_free). */
nnt_status nnt_safetensors_read(nnt_runtime *rt, const char *file, const char *key,
                                 nnt_tensor *out);
/* Writes n host tensors as one safetensors file, tensors[i] under keys[i] (unique). The file
 * appears whole or not at all, as nnt_write_file puts files in place. Errors:
 * NNT_ERR_IO naming the file, NNT_ERR_INVALID_ARGUMENT for duplicate keys or device tensors. */
nnt_status nnt_safetensors_write(nnt_runtime *rt, const char *file, int n, const char *const *keys,
                                 const nnt_tensor *tensors);
/* ---- files ---- */
/* Reads the whole of file `path` (at most max_bytes bytes) into a new NUL-terminated buffer
 * *text (the caller frees it with free()); *len (may be NULL) gets the byte count, NUL not
 * counted. The file is opened as libnnt opens every input: without blocking and checked to be a
 * regular file before a byte is read, so a FIFO, directory or device is refused at once rather
 * than waited on. Errors (err->msg names the file): NNT_ERR_IO ("PATH: cannot open: REASON",
 * "PATH: not a regular file (a FIFO)", a short read), NNT_ERR_FORMAT (larger than max_bytes),
 * NNT_ERR_OUT_OF_MEMORY. */
nnt_status nnt_read_file(const char *path, size_t max_bytes, char **text, size_t *len, nnt_error *err);
/* Writes len bytes of data as file `path` (through a symbolic link, to the file it names), whole
 * or not at all: the bytes go to an unnamed file in the target's folder, synced, then linked
 * under the name (replacing an existing regular file in one step), so a writer interrupted or
 * killed at any moment leaves no partial file and no temporary behind. Where the folder's file
 * system has no unnamed files, a named temporary beside the target, removed on any failure the
 * process survives. The file's mode is 0666 less the umask. data is only read. Errors (err->msg
 * names the file): NNT_ERR_IO (the folder cannot be written, the disk is full, the target
 * exists and is not a regular file), NNT_ERR_INVALID_ARGUMENT (path NULL or empty, data NULL
 * with len > 0), NNT_ERR_OUT_OF_MEMORY. */
nnt_status nnt_write_file(const char *path, const void *data, size_t len, nnt_error *err);

/* Allocates a host tensor (zeroed). */
nnt_status nnt_tensor_alloc(nnt_tensor *t, nnt_dtype dtype, int ndim, const int64_t *shape);
void nnt_tensor_free(nnt_tensor *t);
/* Element i of a host tensor of any numeric dtype, as double. */
double nnt_tensor_get_f64(const nnt_tensor *t, int64_t i);

#ifdef __cplusplus
}
#endif
#endif /* NNT_H */
