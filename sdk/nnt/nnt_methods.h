/* nnt_methods.h - the interpretability methods of libnnt, written once for every front end (the
 * nnt command, the Python package, the ranks of a run over several processes, later a server):
 * the logit lens, activation patching with many patched rows per forward, pipeline stages over
 * a transport, and one call that runs a whole request (nnt_request.h) and keeps its results.
 *
 * Shapes use these axis names: B rows of the batch, T positions per row, L blocks
 * (num_hidden_layers), V vocab_size, W the lens' columns per row (the most chosen positions any
 * row has), NB the blocks a patch sweep covers, P its positions. */
#ifndef NNT_METHODS_H
#define NNT_METHODS_H

#include <stddef.h>
#include <stdint.h>

#include "nnt_request.h"
#include "nnt_types.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct nnt_pipeline nnt_pipeline;

/* ---- metrics read off a forward's logits ----
 * The words nnt patch, nnt attribute and the request format use: "logit-diff:A,B" is
 * logit[A] - logit[B], "prob:T" token T's probability (softmax over the vocabulary) and
 * "logprob:T" its logarithm, at one position of one row. */
typedef enum nnt_metric_kind { NNT_METRIC_LOGIT_DIFF = 0, NNT_METRIC_PROB, NNT_METRIC_LOGPROB } nnt_metric_kind;
typedef struct nnt_metric {
    nnt_metric_kind kind;
    int32_t a, b; /* LOGIT_DIFF: tokens A and B; PROB, LOGPROB: token A (b unused) */
} nnt_metric;
/* Parses a metric word. Errors: NNT_ERR_INVALID_ARGUMENT naming the text and what was
 * expected (into err, which may be NULL). */
nnt_status nnt_metric_parse(const char *text, nnt_metric *out, nnt_error *err);
/* The metric of row `row` of logits [B, V] (any float dtype, host memory), in double. Token ids
 * are the caller's to check against V. */
double nnt_metric_eval(const nnt_metric *m, const nnt_tensor *logits, int row);

/* ---- the logit lens (nnterp's project_on_vocab on every block's layer_output) ----
 * Results, owned by the caller (nnt_lens_result_free). Column j of row r is position
 * positions[r * W + j] of that row, or -1 past the row's own columns (whose entries are 0). */
typedef struct nnt_lens_result {
    int batch, layers, width;
    int64_t vocab;
    int32_t *positions; /* [B, W] */
    int32_t *top;       /* [B, L, W]: the most probable token of block l's output */
    float *top_prob;    /* [B, L, W]: its probability */
    float *probs;       /* [B, L, W, V] F32 softmax over the vocabulary, or NULL unless asked */
} nnt_lens_result;
void nnt_lens_result_free(nnt_lens_result *r);

/* Runs trace t (its edits apply; it gets the save of every block's layer_output) on batch b and
 * reads every block's output at the chosen positions through the final norm and lm_head.
 * positions [n]: n 0 reads every real token of each row; otherwise p >= 0 is a row's token p
 * counted from its first real token and p < 0 counts back from its last (a row shorter than p
 * has no column for it; a position no row has is NNT_ERR_INDEX). keep_probs: also keep the whole distribution. p: NULL for
 * one process, else the run's pipeline (every rank calls; the rank holding the readout - the
 * last - fills *out, the others get an empty result with batch 0). Errors: those of the forward
 * and of nnt_project_on_vocab, NNT_ERR_INDEX for a position no row has. */
nnt_status nnt_lens(nnt_model *m, nnt_trace *t, const nnt_batch *b, const int *positions, int n_positions,
                    int keep_probs, nnt_pipeline *p, nnt_lens_result *out);

/* ---- activation patching ----
 * The clean prompt's value of one block at one position is written into the corrupted prompt's
 * forward, for every (block, position) of a grid, and the metric read at the last position.
 * `rows` cells run as the rows of one forward: every row is the corrupted prompt, and each row's
 * edit writes only its own position (a per-row edit), so rows never see each other's patches. */
typedef struct nnt_patch_spec {
    uint32_t struct_size;       /* sizeof(nnt_patch_spec) */
    const char *value;          /* "layers.*.VALUE" (every block serving it) or "layers.N.VALUE";
                                 * laid out [batch seq ...] and writable */
    const int32_t *clean;       /* [seq] */
    const int32_t *corrupt;     /* [seq] */
    int seq;
    const int *positions;       /* [n_positions] token positions: p >= 0, or p < 0 from the end, or the
                                 * words NNT_POS_PROMPT / NNT_POS_ALL (every position); resolved
                                 * to ascending distinct positions. NULL / 0: every position */
    int n_positions;
    nnt_metric metric;
    int rows;                   /* cells per forward, >= 1 */
} nnt_patch_spec;
typedef struct nnt_patch_result {
    int n_blocks, n_positions;
    int *blocks;           /* [NB] ascending */
    int *positions;        /* [P] */
    double *grid;          /* [NB, P]: the metric with (block, position) patched */
    double clean_metric;   /* unpatched clean prompt */
    double corrupt_metric; /* unpatched corrupted prompt */
    int forwards;          /* forwards run, the two unpatched ones included */
} nnt_patch_result;
void nnt_patch_result_free(nnt_patch_result *r);
/* Runs the sweep. An error's message starts with the spec's field at fault ("value: ...",
 * "positions: ...", "metric: ..."). Errors (nnt_last_error of m's runtime): NNT_ERR_PATH (a value path without a
 * block, or with more than one '*'), NNT_ERR_NOT_FOUND (no block serves it, with the family's
 * reason), NNT_ERR_SHAPE (no token axis after the batch axis), NNT_ERR_INVALID_ARGUMENT (a
 * read-only value, positions out of range or repeated, token ids outside the vocabulary, prompts
 * of different lengths), NNT_ERR_STATE (a clean value that is None), and the forward's. */
nnt_status nnt_patch(nnt_model *m, const nnt_patch_spec *s, nnt_patch_result *out);

/* ---- attribution patching ----
 * The linear estimate of activation patching from gradients (AtP: Nanda 2023, "Attribution
 * patching"; Kramar et al. 2024, "AtP*"): patching the clean value a_clean of one block at one
 * position into the corrupted forward changes the metric by about (a_clean - a_corrupt) . dM/da,
 * the gradient taken in the corrupted forward; so two forwards and one backward estimate the whole
 * grid nnt_patch measures with a forward per cell. With ig_steps N the gradient is instead the mean
 * over N forwards and backwards along the straight path between the prompts' token embeddings,
 * e = e_corrupt + (k / N)(e_clean - e_corrupt) for k = 1..N (integrated gradients, Sundararajan et
 * al. 2017, on the path EAP-IG uses: Hanna et al. 2024). The estimate is of the metric's CHANGE
 * (nnt_patch's grid minus corrupt_metric). Values with an axis of heads or expert slots
 * ([batch seq heads ...], [batch seq top_k hidden]) get a unit axis U: one estimate per head or
 * slot; every other value U 1, the product summed over everything after [batch seq]. */
typedef struct nnt_attribute_spec {
    uint32_t struct_size;    /* sizeof(nnt_attribute_spec) */
    const char *value;       /* "layers.*.VALUE" (every block serving it) or "layers.N.VALUE", laid out
                              * [batch seq ...] and differentiable (float32) */
    const int32_t *clean;    /* [seq] */
    const int32_t *corrupt;  /* [seq] */
    int seq;
    nnt_metric metric;       /* read at the last position */
    int ig_steps;            /* 0: AtP (the gradient of the corrupted forward); 1..1024: integrated gradients */
} nnt_attribute_spec;
typedef struct nnt_attribute_result {
    int n_blocks, n_positions, n_units;
    int *blocks;           /* [NB] ascending */
    double *grid;          /* [NB, P, U]: the estimated change of the metric, P = seq (every position) */
    double clean_metric;   /* unpatched clean prompt */
    double corrupt_metric; /* unpatched corrupted prompt */
    int forwards, backwards;
} nnt_attribute_result;
void nnt_attribute_result_free(nnt_attribute_result *r);
/* Runs the estimate. Errors (nnt_last_error of m's runtime; the message starts with the spec's
 * field, "value: ", "metric: ", "ig_steps: "): those of nnt_patch's checks of the value (it need
 * not be writable), NNT_ERR_UNSUPPORTED for a value without a gradient or a backend without
 * backward ops, NNT_ERR_INVALID_ARGUMENT (ids outside the vocabulary, ig_steps out of range), and
 * the forward's and backward's. */
nnt_status nnt_attribute(nnt_model *m, const nnt_attribute_spec *s, nnt_attribute_result *out);

/* ---- pipeline stages over a transport (`mpirun -np N ...`) ----
 * One model runs as N contiguous stages, one per process (rank): each rank loads its blocks'
 * weights, runs them and hands the residual stream to the next through the INI's transport
 * plugin. Every call below is made by every rank, in the same order. A failure on one rank is
 * told to the others (their calls then fail with NNT_ERR_STATE naming the rank that failed); a
 * wait past the INI's [distributed] timeout fails with NNT_ERR_IO, after which the caller should
 * end the job with nnt_pipeline_abort (the rank waited for may never answer). */

/* Joins the run this process is a rank of: *out NULL (and NNT_OK) when no launcher started it
 * as one rank of several. Errors: those of nnt_runtime_transport, the transport's start. */
nnt_status nnt_pipeline_open(nnt_runtime *rt, nnt_pipeline **out);
int nnt_pipeline_rank(const nnt_pipeline *p); /* 0 for NULL */
int nnt_pipeline_size(const nnt_pipeline *p); /* 1 for NULL */
/* This rank's blocks [*first, *end) of checkpoint folder dir, before any load: the INI's
 * [distributed] stages, or the split of nnt_plan_split balanced by the blocks' weight bytes
 * (from the safetensors headers, or the family's costs). The ranks then agree: each sends rank 0
 * a 64-bit FNV-1a hash of each of dir's config.json, model.safetensors.index.json,
 * tokenizer.json and tokenizer_config.json (absent files as absent), its block count and its
 * split, and rank 0 answers every rank with the first difference or none. Errors:
 * NNT_ERR_INVALID_ARGUMENT (more ranks than blocks, cuts that do not fit), NNT_ERR_CONFIG on every
 * rank when the ranks differ ("the ranks do not run one model: rank 1's B/config.json differs
 * from rank 0's A/config.json; ...", the block counts, or "the ranks split the N blocks
 * differently: ..."), NNT_ERR_IO (a file unreadable), those of nnt_plan_new and the transport. */
nnt_status nnt_pipeline_split(nnt_pipeline *p, const char *dir, int *first, int *end);
/* The model this rank loaded with nnt_model_load_stage(first, end); NNT_ERR_CONFIG when its block
 * count is not the one the split was made for. */
nnt_status nnt_pipeline_attach(nnt_pipeline *p, nnt_model *m);
/* Every rank says whether its part so far went well and learns whether every rank's did: a
 * rank passing mine != NNT_OK (its message in nnt_last_error) tells the others and gets mine
 * back; the others then fail with NNT_ERR_STATE and the transport's message naming that rank.
 * NNT_OK when every rank's part went well. p NULL: returns mine. */
nnt_status nnt_pipeline_agree(nnt_pipeline *p, nnt_status mine);
/* What ended the latest failed call of this rank: its own error (LOCAL: the others have been
 * told), another rank's failure notice (REMOTE: that rank reports it), or a wait of this rank
 * that ran past the timeout with no notice (TRANSPORT: the caller should end the job with
 * nnt_pipeline_abort). NONE for NULL or before any failure. */
typedef enum nnt_pipeline_fault {
    NNT_PIPELINE_FAULT_NONE = 0,
    NNT_PIPELINE_FAULT_LOCAL,
    NNT_PIPELINE_FAULT_REMOTE,
    NNT_PIPELINE_FAULT_TRANSPORT
} nnt_pipeline_fault;
nnt_pipeline_fault nnt_pipeline_fault_of(const nnt_pipeline *p);
/* Rank 0's request to every rank: rank 0 passes its *r; the others pass *r NULL and receive the
 * request (parsed from rank 0's nnt_request_write, tensors included, so no rank reads rank 0's
 * files), owned by them. */
nnt_status nnt_pipeline_share_request(nnt_pipeline *p, nnt_request **r);
/* t's stage on ids [B, T] (mask as nnt_trace_run): every rank's requests are checked before any
 * stage runs; the stream is taken from the previous rank and handed to the next; every rank's
 * saved values are gathered into the trace of rank `root` (nnt_trace_import_result). */
nnt_status nnt_pipeline_trace(nnt_pipeline *p, nnt_trace *t, const int32_t *ids, const int32_t *mask, int batch,
                              int seq, int root);
/* nnt_generate over the ranks: each runs its stage, the last picks the tokens and every rank
 * gets them (out [B, max_new_tokens] filled alike everywhere); values gathered to root. */
nnt_status nnt_pipeline_generate(nnt_pipeline *p, nnt_model *m, nnt_trace *t, const int32_t *ids, const int32_t *mask,
                                 int batch, int seq, const nnt_generate_opts *o, int32_t *out, int root);
/* Ends the whole job through the transport (after a timeout); returns only if it cannot. */
void nnt_pipeline_abort(nnt_pipeline *p, int code);
/* Leaves the run and frees p (NULL allowed). failure: NULL when this rank's part ended well,
 * else the one-line reason it failed, told to the other ranks now unless they were told already
 * (by a failed call of this rank) or another rank's failure ended the run. */
void nnt_pipeline_close(nnt_pipeline *p, const char *failure);

/* ---- harvesting values over a corpus ----
 * A corpus of documents becomes rows of at most `context` tokens (encoded with the model folder's
 * tokenizer, special tokens as nnt_tokenizer_encode adds them to each document), forwards of
 * `batch` rows of one length, and the request's saved values at the kept positions of every row,
 * written to out_dir as shards (safetensors, each a little over shard_bytes) listed by a manifest
 * (manifest.json). Values are laid out token by token: a saved value [batch seq F...] becomes
 * [N, F...] in a shard, N its kept tokens in row order, beside input_ids [N] (I32), rows [N]
 * (I64, the row's number in the corpus), positions [N] (I32, the token's position in its row)
 * and documents [N] (I64, the document each token came from). Float values are written in
 * `dtype` (F32, BF16 or F16, rounded to nearest even), integer values as they are.
 *
 * Rows (`rows`): NNT_HARVEST_PACK concatenates the documents' tokens and cuts rows of exactly
 * `context` (the incomplete last row is dropped); NNT_HARVEST_SPLIT cuts each document on its own
 * into rows of `context` and a shorter last one; NNT_HARVEST_TRUNCATE keeps each document's first
 * `context` tokens. A forward takes up to `batch` consecutive rows of one length.
 *
 * Resumable: a shard is written under a temporary name and renamed whole, then the manifest (the
 * same way), so a run killed at any moment and started again with the same spec continues after
 * the manifest's last shard, and its shards, manifest and statistics equal those of a run never
 * interrupted (the forwards are the same: shards end where forwards end). A folder whose manifest
 * names another model (config.json's bytes), tokenizer, request or setting is refused, naming the
 * difference; so is a manifest that does not parse, and a folder that holds other files but no
 * manifest. Memory: one shard and one forward, whatever the corpus's size.
 *
 * Reductions, written as out_dir/stats.safetensors when the corpus is done (and kept exact
 * across a resume: integer counts, float64 sums, in corpus order): for each path of `reduce` (a
 * value laid out [batch seq F...] whose key the request's saves need not name), over every kept
 * token: PATH.count (I64 [1]), PATH.mean and PATH.var (F64 [F...], the population variance);
 * with routing_stats, for each block serving expert_indices (E experts, K chosen per token):
 * layers.L.mlp.expert_counts [E] (I64: tokens that chose the expert), expert_weight_sums [E]
 * (F64: the sum of its expert_weights over them; the mean weight is the ratio),
 * expert_cooccurrence [E, E] (I64: tokens whose top-K held both; the diagonal is expert_counts),
 * expert_top_tokens and expert_top_token_counts [E, top_tokens] (I32, I64: the token ids routed to
 * the expert most often, ties to the smaller id, -1 / 0 past the ids it saw), and tokens (I64 [1]).
 * With top_contexts, for each of those values (F features on its last axis, K = its
 * top_contexts_k): PATH.top_context_values [F, K] (F32: each feature's K largest values over the
 * kept tokens, in decreasing order, the earlier token first among equal values), and the row
 * (PATH.top_context_rows, I64) and position (PATH.top_context_positions, I32) of each; -1 and a
 * value of 0 past the tokens a feature has. Batch size does not change them. */
typedef enum nnt_harvest_rows { NNT_HARVEST_PACK = 0, NNT_HARVEST_SPLIT, NNT_HARVEST_TRUNCATE } nnt_harvest_rows;
/* How a data file is read: LINES one document per line (the newline not part of it; a blank
 * line is no document), FILE the whole file one document, JSONL one JSON object per line, the
 * document its string member `field`. AUTO: JSONL for names ending .jsonl or .ndjson, else LINES. */
typedef enum nnt_data_format { NNT_DATA_AUTO = 0, NNT_DATA_LINES, NNT_DATA_FILE, NNT_DATA_JSONL } nnt_data_format;
typedef struct nnt_harvest_progress {
    int64_t tokens, rows, shards;     /* done so far (a resumed run counts what it found done) */
    uint64_t bytes_read, bytes_total; /* of the data files */
    double seconds;                   /* since this call began */
    int resumed;                      /* 1: the run continued an earlier one */
} nnt_harvest_progress;
typedef struct nnt_harvest_spec {
    uint32_t struct_size;        /* sizeof(nnt_harvest_spec) */
    const nnt_request *request;  /* a "trace" request without rows: its saves and edits apply to every forward */
    const char *const *data;     /* [n_data] files, read in order */
    int n_data;
    nnt_data_format format;
    const char *field;           /* JSONL: the member holding the text (NULL: "text") */
    int skip_bad;                /* 1: a bad line (invalid JSON, no such string member, invalid UTF-8) is
                                  * counted and passed over; 0: it ends the run naming the file and line */
    int context;                 /* T: tokens per row, 1..1048576 */
    nnt_harvest_rows rows;
    int batch;                   /* rows per forward, 1..4096 */
    nnt_dtype dtype;             /* NNT_F32, NNT_BF16 or NNT_F16 */
    uint64_t shard_bytes;        /* a shard ends after the forward that takes it past this; >= 1 */
    const int *positions;        /* [n_positions] token positions of each row kept (negative: from
                                  * the row's end; NNT_POS_ALL: every one); NULL / 0: every position */
    int n_positions;
    int add_special;             /* 1: each document gets the tokenizer's special tokens (a bos) */
    int64_t max_tokens;          /* > 0: no row after the one whose tokens reach this many; 0: the whole corpus */
    const char *const *reduce;   /* [n_reduce] value paths reduced to their moments */
    int n_reduce;
    int routing_stats;           /* 1: the routing statistics of every block with experts */
    int top_tokens;              /* routing: ids kept per expert (0: 32) */
    const char *const *top_features; /* [n_top_features] saved values ([batch seq F]) written sparsely:
                                  * each kept token's top_features_k[i] largest entries, as KEY.top_indices
                                  * [N, K] (I32) and KEY.top_values [N, K] (dtype), instead of KEY */
    const int *top_features_k;   /* [n_top_features], 1..F */
    int n_top_features;
    const char *const *top_contexts; /* [n_top_contexts] values ([batch seq F], need not be saved) whose
                                  * every feature keeps its top_contexts_k[i] largest kept tokens over the
                                  * corpus (statistics below) */
    const int *top_contexts_k;   /* [n_top_contexts], 1..4096 */
    int n_top_contexts;
    const char *out_dir;         /* made when absent */
    void (*progress)(void *user, const nnt_harvest_progress *p); /* after every forward; may be NULL */
    void *progress_user;
} nnt_harvest_spec;
/* Runs the harvest (above); *done (may be NULL) receives the final counts. Errors (nnt_last_error
 * of m's runtime, naming the field, file, line or value path): NNT_ERR_INVALID_ARGUMENT (a field
 * out of range; a request of another method or with rows; a saved value not laid out [batch seq
 * ...] whole on those two axes; a bad data line without skip_bad), NNT_ERR_CONFLICT (out_dir made
 * by another model, tokenizer, request or settings), NNT_ERR_FORMAT (a manifest or statistics
 * file that does not parse), NNT_ERR_NOT_FOUND (no tokenizer in the model's folder), NNT_ERR_IO,
 * NNT_ERR_OUT_OF_MEMORY, and those of the forward. */
nnt_status nnt_harvest(nnt_model *m, const nnt_harvest_spec *s, nnt_harvest_progress *done);

/* ---- a whole request ---- */
typedef struct nnt_result nnt_result;
/* How a front end runs a request. Versioned by struct_size; zero fields mean: none. */
typedef struct nnt_run_opts {
    uint32_t struct_size;                      /* sizeof(nnt_run_opts) */
    const nnt_request_callback *callbacks;     /* [n_callbacks]: what "callback" edits call */
    int n_callbacks;
    const char *const *extra_saves;            /* [n_extra_saves] paths saved after the request's
                                                * own (a front end's own readings, e.g. the nnt
                                                * command's next_token_probs for its top tokens) */
    int n_extra_saves;
    nnt_pipeline *pipeline;                    /* NULL: this process runs the whole model */
} nnt_run_opts;
/* Runs request r on model m (under o->pipeline, m is this rank's stage): its rows as a batch
 * (nnt_request_batch), a trace with its edits and saves (nnt_request_apply), the extra saves,
 * then the method. o may be NULL. *out receives the results (nnt_result_free), also on ranks
 * that do not hold them (nnt_result_holds 0); on an error *out is NULL. Errors: those of the
 * steps, each message starting with the request field at fault where there is one
 * ("lens.positions: ...", "patch.metric: ..."); NNT_ERR_UNSUPPORTED for a patch request under a
 * pipeline. */
nnt_status nnt_request_run(nnt_model *m, const nnt_request *r, const nnt_run_opts *o, nnt_result **out);
void nnt_result_free(nnt_result *res);
nnt_method nnt_result_method(const nnt_result *res);
/* 1 when this process holds the results (always without a pipeline; under one, the rank that
 * prints: rank 0, or the last rank for a lens). */
int nnt_result_holds(const nnt_result *res);
/* The batch the request's rows made (patch: the clean and corrupted prompts). */
const nnt_batch *nnt_result_batch(const nnt_result *res);
/* trace and generate: the trace, with every saved value (nnt_trace_get, nnt_trace_result). */
const nnt_trace *nnt_result_trace(const nnt_result *res);
/* generate: the new tokens [B, max_new_tokens] (NNT_TOKEN_STOPPED after a row's stop token),
 * and the stop ids used (the tokenizer's eos unless ignore_eos, then the request's). */
const int32_t *nnt_result_tokens(const nnt_result *res, int *max_new_tokens, const int32_t **stop_ids, int *n_stop);
const nnt_lens_result *nnt_result_lens(const nnt_result *res);
const nnt_patch_result *nnt_result_patch(const nnt_result *res);
const nnt_attribute_result *nnt_result_attribute(const nnt_result *res);
/* Writes what the method produced as one safetensors file (the nnt command's --out): trace and
 * generate every saved value under its key (nnt_trace_write_safetensors), generate also
 * generated_tokens [B, max_new_tokens] (I32, NNT_TOKEN_STOPPED after a row's stop); lens lens_probs
 * [B, L, W, V] and lens_positions [B, W]; patch patch_metric [NB, P] (F64), patch_blocks,
 * patch_positions, clean_metric and corrupt_metric; attribute attr_metric [NB, P] or [NB, P, U]
 * (F64), attr_blocks, attr_positions, clean_metric and corrupt_metric. Errors: NNT_ERR_STATE (nothing held here;
 * a lens run without keep_probs), those of nnt_safetensors_write. */
nnt_status nnt_result_write_safetensors(const nnt_result *res, const char *file);
/* The same safetensors bytes in one new buffer *bytes (*len bytes; the caller frees it with
 * free()), for a front end that sends them elsewhere (nnt serve's responses). Errors: those of
 * nnt_result_write_safetensors, NNT_ERR_INVALID_ARGUMENT (NULL bytes or len). */
nnt_status nnt_result_safetensors(const nnt_result *res, void **bytes, size_t *len);

/* ---- requests sharing one forward (a server's co-batching) ---- */
/* 1 when request r can share a forward with others: a trace or a greedy generation (temperature
 * 0; one whose rows can stop - the eos without ignore_eos, or stop ids - only when it saves
 * nothing) without gradients, SAEs, callbacks and without steps, skip_layers or ablate_expert
 * entries (which act on every row of a batch). */
int nnt_request_shareable(const nnt_request *r);
/* 1 when requests a and b can share one forward: both shareable, of one method, and two
 * generations with the same max_new_tokens, ignore_eos and stop ids. (Their rows must also be
 * equally long: nnt_request_run_shared checks that against the model's tokenizer.) */
int nnt_request_share_compatible(const nnt_request *a, const nnt_request *b);
/* Runs n shareable requests as one forward (generations: one generation of all their rows): their
 * rows, in order, make one batch (every request padded to the same length: the requests'
 * longest rows must be equally long), and each request's edits and saves are limited to its own
 * rows (as an entry's "rows" limits it, docs/requests.md; an entry's own rows count from the
 * request's first). out[j] (n entries) receives request j's results as nnt_request_run would
 * give them, under the same keys (a generation's tokens: its own rows'); values equal those of
 * request j run alone up to the float32 rounding that a different batch size gives the products
 * (bitwise where the kernels do not depend on it; a greedy token where two logits tie within
 * that rounding can differ). Any failure fails all: every out[j] NULL; run the requests one by
 * one then to learn whose it was. Errors: NNT_ERR_INVALID_ARGUMENT (n < 1, a request that
 * cannot share, two that cannot share with each other, rows of different lengths), those of
 * nnt_request_run. */
nnt_status nnt_request_run_shared(nnt_model *m, const nnt_request *const *reqs, int n, nnt_result **out);

#ifdef __cplusplus
}
#endif
#endif /* NNT_METHODS_H */
