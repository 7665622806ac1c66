/* harvest_internal.h - what the parts of nnt_harvest (nnt_methods.h) share: the corpus reader
 * (documents from text and JSON Lines files), the rows it is cut into (packed or split at the
 * context length), the output folder's manifest, and the reductions (per-feature moments and
 * routing statistics) kept over the corpus. */
#ifndef NNT_HARVEST_INTERNAL_H
#define NNT_HARVEST_INTERNAL_H

#include <stdint.h>

#include "internal.h"
#include "nnt/nnt_methods.h"

/* ---- documents (corpus.c) ---- */
typedef struct hv_corpus hv_corpus;
/* One document: its text (owned by the corpus until the next call) and its number: documents are
 * numbered across the files in order, every line of a lines or JSON Lines file taking one number
 * (a blank or skipped line too, so that document - the file's first number is its line - 1). */
typedef struct hv_doc {
    const char *text;
    size_t len;
    int64_t number;
} hv_doc;
/* Opens the spec's data files (checked to be readable regular files now). Errors: NNT_ERR_IO,
 * NNT_ERR_INVALID_ARGUMENT (no files, an unknown format), NNT_ERR_OUT_OF_MEMORY. */
nnt_status hv_corpus_open(const nnt_harvest_spec *s, hv_corpus **out, nnt_error *err);
void hv_corpus_free(hv_corpus *c);
/* The next document into *d: 1, 0 at the end of the corpus, -1 on an error (err says which file,
 * line and why: invalid JSON, a missing or non-string field, invalid UTF-8, a line over the
 * limit; with skip_bad such a line is counted and passed over instead). */
int hv_corpus_next(hv_corpus *c, hv_doc *d, nnt_error *err);
/* Bytes read so far and in all, over every file; lines passed over as bad. */
void hv_corpus_progress(const hv_corpus *c, uint64_t *done, uint64_t *total, int64_t *skipped);
/* The first document number of each file [n_files] (-1 for a file not reached) and the number past
 * the last document read. */
const int64_t *hv_corpus_firsts(const hv_corpus *c, int64_t *end);

/* ---- rows (rows.c) ---- */
typedef struct hv_rows hv_rows;
typedef struct hv_row {
    int len;            /* tokens, 1..context */
    const int32_t *ids; /* [len] */
    const int64_t *doc; /* [len]: each token's document number */
} hv_row;
nnt_status hv_rows_open(const nnt_harvest_spec *s, hv_corpus *c, nnt_tokenizer *tok, int32_t vocab, hv_rows **out,
                        nnt_error *err);
void hv_rows_free(hv_rows *r);
/* The next row: 1 (*row valid until the next call), 0 at the end, -1 on an error. */
int hv_rows_next(hv_rows *r, hv_row *row, nnt_error *err);
/* Tokens of documents that no row holds (a packed corpus's incomplete last row, the tails a
 * truncation cuts off). */
int64_t hv_rows_dropped(const hv_rows *r);

/* ---- reductions (reduce.c) ---- */
typedef struct hv_reduce hv_reduce;
/* The reductions the spec asks for on model m; *out NULL when it asks for none. Adds to trace t
 * the saves they read (after the request's own, so their keys are the last of each path), except
 * for a path the request saves itself, spelled the same (saved [n_saved]): that one is read from
 * the request's own save and stays a value of the shards. */
nnt_status hv_reduce_open(const nnt_harvest_spec *s, nnt_model *m, nnt_trace *t, const char *const *saved,
                          int n_saved, hv_reduce **out, nnt_error *err);
void hv_reduce_free(hv_reduce *r);
/* 1 when key is a result the reductions added (not a value of the request). */
int hv_reduce_owns(const hv_reduce *r, const nnt_trace *t, const char *key);
/* Adds one forward's rows (the first of them corpus row first_row): keep[b * seq + j] 1 for the
 * tokens counted (real tokens at the kept positions), ids [batch, seq]. */
nnt_status hv_reduce_add(hv_reduce *r, const nnt_trace *t, const int32_t *ids, const uint8_t *keep, int batch, int seq,
                         int64_t first_row, nnt_error *err);
/* The state as one safetensors file (exact: integer counts and float64 sums), read back by
 * hv_reduce_load; the final statistics as another (hv_reduce_write_final). */
nnt_status hv_reduce_save(const hv_reduce *r, nnt_runtime *rt, const char *file);
nnt_status hv_reduce_load(hv_reduce *r, nnt_runtime *rt, const char *file);
nnt_status hv_reduce_write_final(const hv_reduce *r, nnt_runtime *rt, const char *file);

#endif /* NNT_HARVEST_INTERNAL_H */
