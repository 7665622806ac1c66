/* harvest_shard.h - a harvest's shard being filled (harvest_shard.c) and the forward it is filled
 * from. */
#ifndef NNT_HARVEST_SHARD_H
#define NNT_HARVEST_SHARD_H

#include "harvest_internal.h"

struct cJSON;

/* The keys of every shard beside the values: each kept token's id (I32), row number in the corpus
 * (I64), position in its row (I32) and document number (I64), [tokens] each. */
#define HV_KEY_IDS "harvest.input_ids"
#define HV_KEY_ROWS "harvest.rows"
#define HV_KEY_POSITIONS "harvest.positions"
#define HV_KEY_DOCUMENTS "harvest.documents"

/* One forward: batch rows of seq tokens, the first of them row first_row of the corpus. */
typedef struct hv_batch {
    int batch, seq;
    int64_t first_row;
    const int32_t *ids;   /* [batch, seq] */
    const int64_t *docs;  /* [batch, seq]: each token's document */
    const uint8_t *keep;  /* [batch, seq]: 1 for the tokens kept */
} hv_batch;

typedef struct hv_shard hv_shard;
/* A shard for the values trace t saved in its first forward (batch x seq), except those the
 * reductions red own; in spec's dtype, those spec->top_features names sparsely. Errors:
 * NNT_ERR_INVALID_ARGUMENT naming a save that is not laid out [batch seq ...] whole on those axes,
 * is None or is emitted several times; no value and no reduction; a top_features path the request
 * does not save, or a K out of range. */
nnt_status hv_shard_new(nnt_model *m, const nnt_trace *t, const hv_reduce *red, int batch, int seq,
                        const nnt_harvest_spec *spec, hv_shard **out, nnt_error *err);
void hv_shard_free(hv_shard *s);
/* Appends forward b's kept tokens of every value. Errors: NNT_ERR_SHAPE (a value shaped otherwise
 * than in the first forward), NNT_ERR_OUT_OF_MEMORY. */
nnt_status hv_shard_add(hv_shard *s, const nnt_trace *t, const hv_batch *b, nnt_error *err);
uint64_t hv_shard_bytes(const hv_shard *s);
int64_t hv_shard_tokens(const hv_shard *s);
/* Writes the shard as file (whole or not at all) and empties it. */
nnt_status hv_shard_write(hv_shard *s, nnt_runtime *rt, const char *file);
/* {"KEY": {"dtype": "BF16", "shape": ["tokens", F...]}, ...}; NULL without memory. */
struct cJSON *hv_shard_values_json(const hv_shard *s);

#endif /* NNT_HARVEST_SHARD_H */
