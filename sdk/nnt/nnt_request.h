/* nnt_request.h - the request format: everything one run of a method asks of a model - its
 * rows, the values to save (paths, wildcards, slices), the edits of every kind in order, the
 * generation settings and the method's own options - as one JSON document, parsed and checked
 * here into the same trace requests the C API builds. docs/requests.md specifies the document
 * (format version 1) and docs/request.schema.json is its JSON Schema; the nnt command's options,
 * the Python package and the ranks of a run over several processes all reach libnnt through it.
 *
 * Errors name the JSON path of the field at fault and what was expected, e.g.
 *   "request.json: edits[2].factor: expected a finite number with |F| <= 1e6, got \"two\""
 *   "request.json: edits[0].path: path 'layers.9.layer_output': block 9 is out of range; ..."
 *   "request.json: edits[2].positions[0]: position -7 names no token of this forward (before
 *    every row's first token): ..."
 * A document is checked in two steps: nnt_request_parse checks everything that needs no model
 * (types, unknown and repeated fields, ranges, tensor data, sizes and nesting; the files it names
 * are read then); nnt_request_apply and
 * nnt_request_batch check it against a model (paths, blocks, served and writable values, tensor
 * shapes against the value, token ids against the vocabulary), each error still naming the
 * field. Positions that no row has are refused when the run starts, naming the field too.
 *
 * Sparse autoencoders ("saes": SAELens folders attached to values, nnt_sae.h) are loaded by the
 * parse; their features are edited by zero / scale / masked_fill entries on "VALUE.sae.feature_acts"
 * with a "features" list, and their outputs saved as "VALUE.sae.feature_acts", ".reconstruction"
 * and ".error".
 *
 * Tensor data travel as safetensors: a "tensor" field names a file and a key ({"file":
 * "v.safetensors", "key": "steer"}), a key of the safetensors bytes handed in beside the JSON
 * ({"key": "steer"}: nnt_request_source.tensors), or gives the numbers inline ({"dtype": "F32",
 * "shape": [4], "data": [0.5, 0, 0, 1]}). */
#ifndef NNT_REQUEST_H
#define NNT_REQUEST_H

#include <stddef.h>
#include <stdint.h>

#include "nnt_types.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct nnt_runtime nnt_runtime;
typedef struct nnt_model nnt_model;
typedef struct nnt_trace nnt_trace;
typedef struct nnt_request nnt_request;

/* The version of the request format this libnnt reads and writes (the document's
 * "nnt_request" field). */
#define NNT_REQUEST_FORMAT 1

/* The methods a request can ask for (its "method" field). */
typedef enum nnt_method {
    NNT_METHOD_TRACE = 0, /* one forward; the saved values */
    NNT_METHOD_LENS,      /* the logit lens of every block's output at chosen positions */
    NNT_METHOD_PATCH,     /* activation patching: a grid of blocks x positions */
    NNT_METHOD_GENERATE,  /* generation, the requests applied at every step */
    NNT_METHOD_ATTRIBUTE, /* attribution patching: the gradient estimate of patch's grid */
    NNT_METHOD_COUNT
} nnt_method;

/* "trace", "lens", "patch", "generate", "attribute"; "?" for another value. */
const char *nnt_method_name(nnt_method m);

/* Where a document comes from. Versioned by struct_size. */
typedef struct nnt_request_source {
    uint32_t struct_size;    /* sizeof(nnt_request_source) */
    const char *json;        /* the document, UTF-8, json_len bytes (no NUL needed) */
    size_t json_len;
    const void *tensors;     /* safetensors bytes beside the document, or NULL: what {"key": K}
                              * tensor fields name; read during the parse only (copied) */
    size_t tensors_len;
    const char *base_dir;    /* relative "file" fields (tensors, prompt files) resolve here; NULL:
                              * the working directory */
    const char *name;        /* the document's name in messages ("request.json"); NULL: "request" */
    uint32_t flags;          /* NNT_REQUEST_* below; 0: none. Read only when struct_size covers it
                              * (a source of an earlier libnnt, without the field, is accepted) */
} nnt_request_source;

/* nnt_request_source.flags: refuse every field that names a file or folder of this machine (a
 * row's "file" and "tokens_file", a tensor's "file", an SAE's "dir"), as a server must for a
 * document that comes from elsewhere: tensor data then travel inline or in the attachment. */
#define NNT_REQUEST_NO_FILES 1u

/* Parses and checks a document (see above). *out receives a request freed with
 * nnt_request_free (NULL on failure); it owns copies of everything it needs (the tensors of files
 * and attachments, and the text of prompt files, are read now). Errors (nnt_last_error(rt) names
 * the document and the field): NNT_ERR_FORMAT (not UTF-8 JSON, not an object, nested deeper than
 * 64 levels, larger than 256 MiB, a list over 65536 entries, a field of the wrong type, an unknown
 * field or one given twice, a tensor whose data do not match its dtype and shape, attachment
 * bytes that are not safetensors), NNT_ERR_INVALID_ARGUMENT (a value out of range; a NULL
 * argument), NNT_ERR_UNSUPPORTED (another format version; a tensor of a dtype other than F32,
 * F16, BF16, F64, I32, I64), NNT_ERR_IO (a file that cannot be read), NNT_ERR_NOT_FOUND (a tensor
 * key absent from its file or the attachment), NNT_ERR_INVALID_ARGUMENT also for a field that
 * names a file under NNT_REQUEST_NO_FILES, NNT_ERR_OUT_OF_MEMORY. */
nnt_status nnt_request_parse(nnt_runtime *rt, const nnt_request_source *src, nnt_request **out);
/* nnt_request_parse of the document in `file` (relative "file" fields resolve against its
 * folder; messages name the file). */
nnt_status nnt_request_read(nnt_runtime *rt, const char *file, nnt_request **out);
void nnt_request_free(nnt_request *r);

nnt_method nnt_request_method(const nnt_request *r);

/* The request as a document again: canonical JSON (every default written out, rows of text
 * kept as text, paths as given) in *json (NUL-terminated, *json_len bytes without it) and, when
 * tensors is not NULL, every tensor the request holds as one safetensors buffer in *tensors
 * (*tensors_len bytes) that the JSON names by key, so that the pair parses back to an equal
 * request anywhere (another process needs none of the files). With tensors NULL, tensors are
 * written inline ({"dtype", "shape", "data"}). Numbers are written so that they read back exact.
 * The buffers are the caller's (free()). Errors (no message: a request has no runtime):
 * NNT_ERR_INVALID_ARGUMENT (NULL r or json; tensors without tensors_len; inline, a tensor holding
 * an infinity or a NaN; a document that would exceed 256 MiB), NNT_ERR_OUT_OF_MEMORY. */
nnt_status nnt_request_write(const nnt_request *r, char **json, size_t *json_len, void **tensors, size_t *tensors_len);

/* The edit callbacks of {"op": "callback", "callback": i} entries: entry i of the array given to
 * nnt_request_apply (a C or Python caller's own code, which a document cannot carry). */
typedef nnt_status (*nnt_request_edit_fn)(void *user, const char *path, int layer, nnt_tensor *value, nnt_error *err);
typedef struct nnt_request_callback {
    nnt_request_edit_fn fn;
    void *user;
} nnt_request_callback;

/* Adds the request's saves and edits to trace t, in the document's order (its "saes" attached
 * first with nnt_trace_sae, then its "edits", then its "saves"), each checked as the C API checks it (nnt_trace_save, nnt_trace_set, ...), with the
 * error prefixed by the document and the field's JSON path ("request.json: edits[0].path: ...").
 * The edits start at every step (nnt_trace_steps(t, 0, -1); a "steps" entry restricts those after
 * it) and the saves apply at every step; t is left at every step. An edit's "rows" and a set's or
 * add's "positions" restrict it as docs/requests.md says, and every request added carries its
 * field, so that the checks of a run's start (shapes, rows, positions, slices) name it too.
 * callbacks [n_callbacks] serve "callback" entries (the function sees [len(rows), ...] for an
 * entry with rows). On failure t holds the requests it held before. Errors: those of the trace
 * requests; NNT_ERR_INDEX (a block or expert the model lacks), NNT_ERR_INVALID_ARGUMENT (a
 * callback index out of range or without a function). */
nnt_status nnt_request_apply(const nnt_request *r, nnt_trace *t, const nnt_request_callback *callbacks, int n_callbacks);

/* A batch of rows, left-padded: ids and mask [batch, seq] I32 (padding: id 0, mask 0) and each
 * row's length. Owned by the caller: nnt_batch_free. */
typedef struct nnt_batch {
    int batch, seq;
    int32_t *ids;  /* [batch, seq] */
    int32_t *mask; /* [batch, seq]: 1 real, 0 padding */
    int *lens;     /* [batch]: real tokens per row */
} nnt_batch;
void nnt_batch_free(nnt_batch *b);
/* rows [n] of lens[i] ids each (lens[i] >= 1) as one left-padded batch. Errors:
 * NNT_ERR_INVALID_ARGUMENT (n < 1, an empty row), NNT_ERR_OUT_OF_MEMORY. */
nnt_status nnt_batch_from_rows(const int32_t *const *rows, const int *lens, int n, nnt_batch *out, nnt_error *err);

/* The request's rows ("rows"; for a patch request, its clean and corrupt prompts, in that order)
 * as a batch for model m: text (and the text of prompt files, read by the parse) encoded with the
 * tokenizer of m's folder (nnt_model_tokenizer; special tokens as "add_special" says), every id
 * checked against m's vocabulary. *out is the caller's (nnt_batch_free). Errors name the row's
 * field ("request.json: rows[1].tokens[3]: ..."): NNT_ERR_NOT_FOUND (text without a tokenizer in
 * the folder), NNT_ERR_FORMAT (a row that encodes to no token), NNT_ERR_INVALID_ARGUMENT (an id
 * outside the vocabulary; a request without rows), those of loading the tokenizer. */
nnt_status nnt_request_batch(const nnt_request *r, nnt_model *m, nnt_batch *out);

/* The method's settings, as the document gave them with the defaults filled in. Each returns
 * NULL for a request of another method. Owned by the request. */
typedef struct nnt_generate_opts nnt_generate_opts;
/* generate: max_new_tokens, sampling, stop ids ("stop_ids", plus the tokenizer's eos unless
 * "ignore_eos": the eos is added by nnt_request_run, which knows the model). */
const nnt_generate_opts *nnt_request_generate_opts(const nnt_request *r, int *ignore_eos);
/* lens: the positions ("positions"; *n 0: every position, the list holding "all" or "prompt";
 * integers otherwise, negative ones counting from a row's last token) and whether the whole
 * distribution is kept ("probs", default false; the nnt command sets it for --out). */
const int *nnt_request_lens_positions(const nnt_request *r, int *n, int *keep_probs);
/* patch: its settings ("patch": {"value", "metric", "positions", "batch"}); the clean and corrupt
 * prompts are the batch's rows 0 and 1 (nnt_request_batch). metric is checked by the parse
 * (nnt_metric_parse, nnt_methods.h). */
typedef struct nnt_request_patch_opts {
    const char *value;    /* default "layers.*.layer_output" */
    const char *metric;   /* "logit-diff:A,B" or "prob:T" (required) */
    const int *positions; /* [n_positions] >= 0; NULL / 0: every position */
    int n_positions;
    int batch;            /* patched rows per forward, 1..4096 (default 16) */
} nnt_request_patch_opts;
const nnt_request_patch_opts *nnt_request_patch(const nnt_request *r);

/* An attribute request's settings (its "attribute" section: "clean", "corrupt", "metric",
 * "value", "ig_steps"), or NULL for another method; the prompts are the batch's rows 0 and 1 as
 * for patch. */
typedef struct nnt_request_attribute_opts {
    const char *value;  /* default "layers.*.layer_output" */
    const char *metric; /* "logit-diff:A,B", "prob:T" or "logprob:T" (required) */
    int ig_steps;       /* 0 (default): AtP; 1..1024: integrated gradients over that many points */
} nnt_request_attribute_opts;
const nnt_request_attribute_opts *nnt_request_attribute(const nnt_request *r);

#ifdef __cplusplus
}
#endif
#endif /* NNT_REQUEST_H */
