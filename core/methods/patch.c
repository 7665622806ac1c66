/* patch.c - activation patching (nnt_methods.h): the clean and corrupted forwards once each,
 * then batches of corrupted rows, each row getting one (block, position) of the clean value from
 * an edit that writes its own row only, and the metric read at every row's last position. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

void nnt_patch_result_free(nnt_patch_result *r)
{
    if (!r) return;
    free(r->blocks);
    free(r->positions);
    free(r->grid);
    memset(r, 0, sizeof *r);
}

/* ---- the per-row edit ---- */

/* One block's edit in a batch: rows[i] gets the clean value at pos[i]. */
typedef struct patch_edit {
    const nnt_tensor *clean; /* [1, seq, ...] */
    int seq, n;
    int *rows, *pos;
} patch_edit;

static nnt_status patch_edit_fn(void *user, const char *path, int layer, nnt_tensor *v, nnt_error *err)
{
    const patch_edit *e = user;
    int64_t cn = nnt_tensor_numel(e->clean), vn = nnt_tensor_numel(v);
    int64_t inner = cn / e->seq;
    if (v->dtype != e->clean->dtype || v->ndim < 2 || v->shape[1] != e->seq || vn % (v->shape[0] * e->seq) != 0 ||
        vn / (v->shape[0] * e->seq) != inner)
        return nnt_err_set(err, NNT_ERR_SHAPE,
                           "%s: the value in the patched forward does not match the clean run's (%lld elements per "
                           "position, %s; expected %lld, %s)",
                           path, (long long)(v->ndim >= 2 ? vn / (v->shape[0] * v->shape[1]) : vn),
                           nnt_dtype_name(v->dtype), (long long)inner, nnt_dtype_name(e->clean->dtype));
    size_t bytes = (size_t)inner * nnt_dtype_size(v->dtype);
    for (int i = 0; i < e->n; i++)
        memcpy((char *)v->data + ((size_t)e->rows[i] * e->seq + e->pos[i]) * bytes,
               (const char *)e->clean->data + (size_t)e->pos[i] * bytes, bytes);
    return NNT_OK;
}

/* ---- checks ---- */

/* positions [n] (negatives from the end, the words: every position; NULL / 0: every position)
 * as ascending distinct positions 0..seq-1 into out->positions. */
static nnt_status sweep_positions(const int *q, int nq, int seq, nnt_patch_result *out, nnt_error *err)
{
    int every = nq == 0;
    for (int k = 0; k < nq; k++) {
        if (q[k] == NNT_POS_GENERATED)
            return nnt_err_set(err, NNT_ERR_INDEX, "position 'generated' names tokens after the prompt; patch runs "
                                                   "forwards over the prompts only");
        if (q[k] == NNT_POS_PROMPT || q[k] == NNT_POS_ALL) every = 1;
        else if (q[k] >= seq || q[k] < -seq)
            return nnt_err_set(err, NNT_ERR_INDEX,
                               "position %d names no token: the prompts have %d tokens (positions 0..%d, or -%d..-1 "
                               "from the end)",
                               q[k], seq, seq - 1, seq);
    }
    out->positions = malloc(sizeof(int) * (size_t)seq);
    if (!out->positions) return nnt_err_set(err, NNT_ERR_OUT_OF_MEMORY, "no memory");
    for (int p = 0; p < seq; p++) {
        int chosen = every;
        for (int k = 0; k < nq && !chosen; k++) chosen = q[k] >= 0 ? q[k] == p : seq + q[k] == p;
        if (chosen) out->positions[out->n_positions++] = p;
    }
    return NNT_OK;
}

static nnt_status check_spec(nnt_model *m, const nnt_patch_spec *s, nnt_error *err)
{
    if (!s->value || !s->clean || !s->corrupt || s->seq < 1 || s->rows < 1 || s->n_positions < 0 ||
        (s->n_positions > 0 && !s->positions))
        return nnt_err_set(err, NNT_ERR_INVALID_ARGUMENT,
                           "patch: the spec needs a value path, both prompts, seq >= 1 and rows >= 1");
    int64_t V = nnt_model_get_info(m)->vocab_size;
    int32_t ids[2] = {s->metric.a, s->metric.kind == NNT_METRIC_LOGIT_DIFF ? s->metric.b : 0};
    for (int k = 0; k < 2; k++)
        if (ids[k] < 0 || ids[k] >= V)
            return nnt_err_set(err, NNT_ERR_INVALID_ARGUMENT,
                               "metric: token %d is outside the model's vocabulary (vocab_size %lld)",
                               ids[k], (long long)V);
    return NNT_OK;
}

/* ---- the forwards ---- */

/* Runs ids [batch, seq] under t (which saves "logits[:, -1]") and returns the logits. */
static nnt_status run_logits(nnt_model *m, nnt_trace *t, const int32_t *ids, int batch, int seq, const nnt_tensor **logits)
{
    nnt_status st = nnt_trace_run(t, ids, NULL, batch, seq);
    if (st != NNT_OK) {
        nnt_err_prefix(&m->rt->err, "forward");
        return st;
    }
    *logits = nnt_trace_get(t, "logits");
    return *logits ? NNT_OK : nnt_err_set(&m->rt->err, NNT_ERR_STATE, "the forward saved no logits");
}

/* The clean forward (saving every covered block's value into *clean) and the corrupted one. */
static nnt_status unpatched(nnt_model *m, const nnt_patch_spec *s, nnt_patch_result *out, nnt_trace **clean)
{
    nnt_trace *t = NULL;
    const nnt_tensor *lg;
    char p[256];
    nnt_status st = nnt_trace_new(m, clean);
    if (st == NNT_OK) st = nnt_trace_save(*clean, "logits[:, -1]");
    for (int i = 0; i < out->n_blocks && st == NNT_OK; i++) {
        nnt_sweep_block_path(s->value, out->blocks[i], p, sizeof p);
        st = nnt_trace_save(*clean, p);
    }
    if (st == NNT_OK) st = run_logits(m, *clean, s->clean, 1, s->seq, &lg);
    if (st == NNT_OK) out->clean_metric = nnt_metric_eval(&s->metric, lg, 0);
    if (st == NNT_OK) st = nnt_trace_new(m, &t);
    if (st == NNT_OK) st = nnt_trace_save(t, "logits[:, -1]");
    if (st == NNT_OK) st = run_logits(m, t, s->corrupt, 1, s->seq, &lg);
    if (st == NNT_OK) out->corrupt_metric = nnt_metric_eval(&s->metric, lg, 0);
    nnt_trace_free(t);
    out->forwards = st == NNT_OK ? 2 : 0;
    return st;
}

/* Cells c0 .. c0 + nr - 1 (block-major) as the rows of one forward; edits[i] is block i's edit
 * over its consecutive rows, slots [2 * R] the rows' (row, position) pairs. */
static nnt_status patched_batch(nnt_model *m, const nnt_patch_spec *s, nnt_patch_result *out, patch_edit *edits,
                                int *slots, int R, const int32_t *ids, int c0, int nr)
{
    const int P = out->n_positions;
    for (int i = 0; i < out->n_blocks; i++) edits[i].n = 0;
    for (int r = 0; r < nr; r++) {
        patch_edit *e = &edits[(c0 + r) / P];
        if (e->n == 0) {
            e->rows = slots + r;
            e->pos = slots + R + r;
        }
        e->rows[e->n] = r;
        e->pos[e->n] = out->positions[(c0 + r) % P];
        e->n++;
    }
    nnt_trace *t = NULL;
    char p[256];
    nnt_status st = nnt_trace_new(m, &t);
    for (int i = 0; i < out->n_blocks && st == NNT_OK; i++) {
        if (!edits[i].n) continue;
        nnt_sweep_block_path(s->value, out->blocks[i], p, sizeof p);
        st = nnt_trace_edit(t, p, patch_edit_fn, &edits[i]);
    }
    if (st == NNT_OK) st = nnt_trace_save(t, "logits[:, -1]");
    const nnt_tensor *lg;
    if (st == NNT_OK) st = run_logits(m, t, ids, nr, s->seq, &lg);
    for (int r = 0; st == NNT_OK && r < nr; r++) out->grid[c0 + r] = nnt_metric_eval(&s->metric, lg, r);
    if (st == NNT_OK) out->forwards++;
    nnt_trace_free(t);
    return st;
}

static nnt_status sweep(nnt_model *m, const nnt_patch_spec *s, nnt_patch_result *out)
{
    const int NB = out->n_blocks, cells = NB * out->n_positions, R = s->rows < cells ? s->rows : cells;
    nnt_error *err = &m->rt->err;
    nnt_trace *clean = NULL;
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)R * (size_t)s->seq);
    patch_edit *edits = calloc((size_t)NB, sizeof *edits);
    int *slots = malloc(sizeof(int) * 2 * (size_t)R);
    out->grid = malloc(sizeof(double) * (size_t)cells);
    nnt_status st = ids && edits && slots && out->grid ? unpatched(m, s, out, &clean)
                                                       : nnt_err_set(err, NNT_ERR_OUT_OF_MEMORY, "no memory");
    char p[256];
    for (int i = 0; i < NB && st == NNT_OK; i++) {
        nnt_sweep_block_path(s->value, out->blocks[i], p, sizeof p);
        const nnt_tensor *v = nnt_trace_get(clean, p);
        if (!v) st = nnt_err_set(err, NNT_ERR_STATE, "%s is None in the clean run: there is nothing to patch in", p);
        edits[i] = (patch_edit){.clean = v, .seq = s->seq, .rows = slots, .pos = slots + R};
    }
    for (int r = 0; st == NNT_OK && r < R; r++) memcpy(ids + (size_t)r * s->seq, s->corrupt, sizeof(int32_t) * (size_t)s->seq);
    for (int c0 = 0; c0 < cells && st == NNT_OK; c0 += R)
        st = patched_batch(m, s, out, edits, slots, R, ids, c0, cells - c0 < R ? cells - c0 : R);
    nnt_trace_free(clean);
    free(ids);
    free(edits);
    free(slots);
    return st;
}

static nnt_status patch_held(nnt_model *m, const nnt_patch_spec *s, nnt_patch_result *out)
{
    if (!m || !s || !out) return NNT_ERR_INVALID_ARGUMENT;
    memset(out, 0, sizeof *out);
    nnt_error *err = &m->rt->err;
    nnt_err_clear(err);
    /* a spec's error names its field: "value: ...", "positions: ...", "metric: ..." */
    nnt_status st = check_spec(m, s, err);
    if (st == NNT_OK && (st = sweep_positions(s->positions, s->n_positions, s->seq, out, err)) != NNT_OK)
        nnt_err_prefix(err, "positions");
    if (st == NNT_OK && (st = nnt_sweep_blocks(m, "patch", s->value, s->seq, 1, &out->blocks, &out->n_blocks, err)) != NNT_OK)
        nnt_err_prefix(err, "value");
    if (st == NNT_OK) st = sweep(m, s, out);
    if (st != NNT_OK) nnt_patch_result_free(out);
    return st;
}

nnt_status nnt_patch(nnt_model *m, const nnt_patch_spec *s, nnt_patch_result *out)
{
    NNT_GUARDED((m ? m->rt : NULL), "nnt_patch", patch_held(m, s, out));
}
