/* fam_attend.c - softmax attention from split heads: the backend's fused pass (attn_fused) when no
 * request reads the pattern or only saves do, else the scores, softmax and value mix, whole or in
 * blocks of queries, for fam_attention_forward and the families with attention of their own. The
 * [B, heads, T, S] pattern is held whole only when a request other than a save reads it or it is
 * small; a pattern only saves read is handed to the core in blocks of queries (emit_part), only
 * the blocks holding the queries the saves' slices read when the one pass made the mix. */
#include <stdlib.h>
#include <string.h>

#include <nnt/nnt_family_kit.h>

/* The bound of args (0 or absent: the default). */
static uint64_t block_bound(const nnt_forward_args *args)
{
    size_t end = offsetof(nnt_forward_args, attention_block_bytes) + sizeof args->attention_block_bytes;
    uint64_t b = args && args->struct_size >= end ? args->attention_block_bytes : 0;
    return b ? b : FAM_ATTEND_BLOCK_BYTES;
}

/* The whole pattern: scores, emitted, softmax over them in place, emitted, the mix. */
static nnt_status attend_whole(const fam_env *env, nnt_run *run, int layer, const nnt_tensor *q,
                               const nnt_tensor *keys, const nnt_tensor *values, float scale,
                               const nnt_attn_mask *mask, const float *sinks, nnt_tensor *ho, nnt_error *err)
{
    const nnt_core_api *h = env->core;
    const nnt_backend_ops *be = env->be;
    void *bc = env->be_ctx;
    int64_t B = q->shape[0], Hq = q->shape[1], T = q->shape[2], S = nnt_attn_keys(mask, keys->shape[2]);
    nnt_tensor scores;
    nnt_status st = fam_alloc(env, run, NNT_F32, &scores, err, NNT_SHAPE(B, Hq, T, S));
    if (st == NNT_OK) st = be->attn_scores(bc, q, keys, scale, mask, &scores, err);
    if (st == NNT_OK) st = h->emit(run, NNT_VALUE_ATTN_SCORES, layer, &scores);
    /* the probabilities take the scores' place (saved or edited by now) */
    nnt_tensor probs = scores;
    if (st == NNT_OK) st = be->softmax(bc, &scores, sinks, &probs, err);
    if (st == NNT_OK) st = h->emit(run, NNT_VALUE_ATTN_PROBABILITIES, layer, &probs);
    if (st == NNT_OK) st = be->attn_mix(bc, &probs, values, ho, err);
    return st;
}

/* The mask of queries [t0, t0 + n) of T: the query arrays and allow rows of those queries
 * (borrowed from `m` for one batch row, copied into qpos/qvalid/allow otherwise); the key
 * arrays as they are. A mask without q_pos numbers queries 0.. within the call, so the block's
 * get t0... */
static void block_mask(const nnt_attn_mask *m, int64_t B, int64_t T, int64_t S, int64_t t0, int64_t n,
                       int32_t *qpos, uint8_t *qvalid, uint8_t *allow, nnt_attn_mask *out)
{
    *out = *m;
    if (B == 1 && m->q_pos) {
        out->q_pos = m->q_pos + t0;
        if (m->query_valid) out->query_valid = m->query_valid + t0;
        if (m->allow) out->allow = m->allow + t0 * S;
        return;
    }
    for (int64_t b = 0; b < B; b++) {
        for (int64_t t = 0; t < n; t++) {
            qpos[b * n + t] = m->q_pos ? m->q_pos[b * T + t0 + t] : (int32_t)(t0 + t);
            if (m->query_valid) qvalid[b * n + t] = m->query_valid[b * T + t0 + t];
        }
        if (m->allow) memcpy(allow + b * n * S, m->allow + (b * T + t0) * S, (size_t)(n * S));
    }
    out->q_pos = qpos;
    out->query_valid = m->query_valid ? qvalid : NULL;
    out->allow = m->allow ? allow : NULL;
}

/* Whether the saves of block `layer`'s pattern can take it in parts along the query axis (the
 * core's parts_wanted for each value asked), and the queries [*lo, *hi) they read. */
static int pattern_parts(const nnt_core_api *h, nnt_run *run, int layer, int ws, int wp, int64_t T, int64_t *lo,
                         int64_t *hi)
{
    if (!NNT_STRUCT_HAS(h, nnt_core_api, emit_part) || !h->parts_wanted || !h->emit_part) return 0;
    int64_t a = T, b = 0, l, r;
    const nnt_value_id ids[2] = {NNT_VALUE_ATTN_SCORES, NNT_VALUE_ATTN_PROBABILITIES};
    const int asked[2] = {ws, wp};
    for (int i = 0; i < 2; i++) {
        if (!asked[i]) continue;
        if (!h->parts_wanted(run, ids[i], layer, 2, T, &l, &r)) return 0;
        if (l < r && l < a) a = l;
        if (l < r && r > b) b = r;
    }
    *lo = a < b ? a : 0;
    *hi = a < b ? b : 0;
    return 1;
}

nnt_status fam_attend(const fam_env *env, nnt_run *run, int layer, const nnt_forward_args *args,
                      const nnt_tensor *q, const nnt_tensor *keys, const nnt_tensor *values, float scale,
                      const nnt_attn_mask *mask, const float *sinks, nnt_tensor *ho, nnt_error *err)
{
    const nnt_core_api *h = env->core;
    const nnt_backend_ops *be = env->be;
    void *bc = env->be_ctx;
    int64_t B = q->shape[0], Hq = q->shape[1], T = q->shape[2], D = q->shape[3];
    int64_t S = nnt_attn_keys(mask, keys->shape[2]), Dv = values->shape[3];
    uint64_t row_bytes = (uint64_t)(B * Hq * S) * sizeof(float), bound = block_bound(args);
    int64_t rows = (int64_t)(bound / (row_bytes ? row_bytes : 1));
    if (rows < 16) rows = 16;
    int ws = h->wants(run, NNT_VALUE_ATTN_SCORES, layer), wp = h->wants(run, NNT_VALUE_ATTN_PROBABILITIES, layer);
    int pattern = ws || wp;
    /* a pattern only saves read comes in parts, one block of queries at a time, for the queries
     * they read */
    int64_t lo = 0, hi = T;
    int parts = pattern && be->copy_cols && pattern_parts(h, run, layer, ws, wp, T, &lo, &hi);
    int mixed = 0; /* ho holds the result */
    if ((!pattern || parts) && NNT_STRUCT_HAS(be, nnt_backend_ops, attn_fused) && be->attn_fused) {
        /* the backend's one pass, if it takes the call */
        nnt_status st = be->attn_fused(bc, q, keys, values, scale, mask, sinks, ho, &mixed, err);
        if (st != NNT_OK) return st;
    }
    if (mixed && (!parts || lo >= hi)) return NNT_OK;
    if (!parts && (rows >= T || !be->copy_cols || pattern))
        return attend_whole(env, run, layer, q, keys, values, scale, mask, sinks, ho, err);
    /* blocks over every query (the mix is still to be made) or over those the saves read */
    int64_t t_begin = mixed ? lo : 0, t_end = mixed ? hi : T, span = t_end - t_begin;
    /* blocks of equal size, so that none is much shorter than the bound allows */
    if (rows > span) rows = span;
    int64_t blocks = (span + rows - 1) / rows;
    rows = (span + blocks - 1) / blocks;
    int32_t *qpos = NULL;
    uint8_t *qvalid = NULL, *allow = NULL;
    if (B > 1 || !mask->q_pos) {
        qpos = malloc((size_t)(B * rows) * sizeof *qpos);
        qvalid = malloc((size_t)(B * rows));
        allow = mask->allow ? malloc((size_t)(B * rows * S)) : NULL;
        if (!qpos || !qvalid || (mask->allow && !allow)) {
            free(qpos);
            free(qvalid);
            free(allow);
            return h->set_error(err, NNT_ERR_OUT_OF_MEMORY, "no memory for the mask of a block of queries");
        }
    }
    /* q and ho seen as one row per (batch, head) and per batch row, a token's part a run of
     * columns: a block of queries is a block of columns of each */
    nnt_tensor q2 = fam_view(q, NNT_SHAPE(B * Hq, T * D)), ho2 = fam_view(ho, NNT_SHAPE(B, T * Hq * Dv));
    nnt_status st = NNT_OK;
    for (int64_t t0 = t_begin; t0 < t_end && st == NNT_OK; t0 += rows) {
        int64_t n = t_end - t0 < rows ? t_end - t0 : rows;
        int read = parts && t0 < hi && t0 + n > lo; /* the block holds queries a save reads */
        size_t mark = h->arena_mark(run);
        nnt_tensor qb, scores, ob;
        nnt_attn_mask mb;
        block_mask(mask, B, T, S, t0, n, qpos, qvalid, allow, &mb);
        st = fam_alloc(env, run, NNT_F32, &qb, err, NNT_SHAPE(B, Hq, n, D));
        if (st == NNT_OK) {
            nnt_tensor qb2 = fam_view(&qb, NNT_SHAPE(B * Hq, n * D));
            st = be->copy_cols(bc, &q2, t0 * D, &qb2, 0, n * D, err);
        }
        if (st == NNT_OK) st = fam_alloc(env, run, NNT_F32, &scores, err, NNT_SHAPE(B, Hq, n, S));
        if (st == NNT_OK) st = be->attn_scores(bc, &qb, keys, scale, &mb, &scores, err);
        if (st == NNT_OK && read && ws) st = h->emit_part(run, NNT_VALUE_ATTN_SCORES, layer, &scores, 2, t0, T);
        nnt_tensor probs = scores;
        if (st == NNT_OK) st = be->softmax(bc, &scores, sinks, &probs, err);
        if (st == NNT_OK && read && wp) st = h->emit_part(run, NNT_VALUE_ATTN_PROBABILITIES, layer, &probs, 2, t0, T);
        if (!mixed) {
            if (st == NNT_OK) st = fam_alloc(env, run, NNT_F32, &ob, err, NNT_SHAPE(B, n, Hq, Dv));
            if (st == NNT_OK) st = be->attn_mix(bc, &probs, values, &ob, err);
            if (st == NNT_OK) {
                nnt_tensor ob2 = fam_view(&ob, NNT_SHAPE(B, n * Hq * Dv));
                st = be->copy_cols(bc, &ob2, 0, &ho2, t0 * Hq * Dv, n * Hq * Dv, err);
            }
        }
        h->arena_release(run, mark);
    }
    free(qpos);
    free(qvalid);
    free(allow);
    return st;
}
