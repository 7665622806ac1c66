/* patch.h - activation patching for `nnt patch`: the clean prompt's value of one block at one
 * token position is put into the corrupted prompt's forward, for every (block, position) of a
 * grid, and a metric is read off the last position's logits. Several cells run as the rows of
 * one batch: every row is the corrupted prompt, and an edit callback writes the clean value's
 * slice into that row's own position only, so rows never see each other's patches. */
#ifndef NNT_CLI_PATCH_H
#define NNT_CLI_PATCH_H

#include <stddef.h>
#include <stdint.h>

#include "nnt/nnt.h"

/* The metric read from the last position's logits of a run. */
typedef struct patch_metric {
    enum { PATCH_LOGIT_DIFF, PATCH_PROB } kind;
    int32_t a, b; /* PATCH_LOGIT_DIFF: logit[a] - logit[b]; PATCH_PROB: softmax(logits)[a] */
} patch_metric;

/* Parses "logit-diff:A,B" or "prob:T" (token ids, integers in 0..2147483647). Returns 0, or -1
 * with a message naming the text and what was expected in err (n bytes). */
int patch_metric_parse(const char *text, patch_metric *out, char *err, size_t n);

/* The metric of row `row` of logits [batch, vocab] (any float dtype), in double precision;
 * ids are checked to be below vocab by the caller. */
double patch_metric_eval(const patch_metric *m, const nnt_tensor *logits, int row);

/* What to patch. clean and corrupt are [seq] token ids of the two prompts (same length). path
 * names the value: with one '*' standing for the block number ("layers.*.layer_output") every
 * block that serves the value is patched, else only the block it names. The value must be laid
 * out [batch seq ...] (a token axis right after the batch axis) and be writable. positions are
 * 0..seq-1, each once. rows: cells per forward (>= 1). */
typedef struct patch_spec {
    const char *path;
    const int32_t *clean, *corrupt;
    int seq;
    const int *positions;
    int n_positions;
    patch_metric metric;
    int rows;
} patch_spec;

/* The sweep's results, owned by the caller (patch_result_free). */
typedef struct patch_result {
    int n_blocks;
    int *blocks;           /* [n_blocks] block numbers, ascending */
    double *grid;          /* [n_blocks, n_positions] metric with (block, position) patched */
    double clean_metric;   /* the clean prompt's metric, unpatched */
    double corrupt_metric; /* the corrupted prompt's metric, unpatched */
    int forwards;          /* forwards run, the two unpatched ones included */
} patch_result;

void patch_result_free(patch_result *r);

/* Runs the clean and corrupted forwards once each (the clean one saving the value of every
 * block), then the patched rows, `rows` cells per forward. Fills *out. Returns NNT_OK, or an
 * error status with a message in err (n bytes): a path without a block or with several '*', a
 * value not served on any block (or on the named one, with the family's reason), a value
 * without a token axis after the batch axis or not writable (naming the path), a clean value
 * that is None, or a library error (nnt_last_error's text). */
nnt_status patch_sweep(nnt_runtime *rt, nnt_model *m, const patch_spec *s, patch_result *out, char *err, size_t n);

#endif /* NNT_CLI_PATCH_H */
