/* cpu_attention_fused.c - the cpu backend's attention without the pattern: scores, softmax and
 * value mix in one pass over tiles of keys with an online softmax, so that memory stays a few
 * tiles per thread whatever the prompt's length, and tiles the mask hides whole are skipped.
 *
 * The recurrence is FlashAttention's (Dao et al. 2022, arXiv:2205.14135, section 3.1; Milakov
 * and Gimelshein 2018 for the online normaliser): per query row a running maximum m, a running
 * sum l of exp(s - m) and an unnormalised output O; a new tile with maximum m' > m rescales l and
 * O by exp(m - m'). A sink logit (gpt-oss style, one per head) starts each row as m = sink,
 * l = 1 with O = 0: the extra column of cpu_softmax, which carries no value. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "cpu_internal.h"

#define KEY_TILE 256  /* keys per tile */
#define ROW_TARGET 256 /* query rows (heads of one key head x queries) a work item aims for */

/* What one tile of keys of one batch row holds: the position range of its visible keys. */
typedef struct key_tile {
    int32_t kmin, kmax; /* positions of its valid keys (kmin > kmax when none is valid) */
    int all_valid;       /* every key valid */
    int any_nowin, all_nowin;
} key_tile;

/* The same for a tile of queries. */
typedef struct query_tile {
    int32_t qmin, qmax;
    int all_valid, any_valid;
} query_tile;

/* How a query tile sees a key tile under the mask's rules (nnt_attn_mask): 0 nothing, 1 every
 * entry, 2 some entries (each then checked). */
static int tile_sight(const nnt_attn_mask *m, const query_tile *q, const key_tile *k)
{
    if (!m) return 1;
    if (!q->any_valid || k->kmin > k->kmax) return 0;
    if (m->causal && k->kmin > q->qmax) return 0;
    if (m->window > 0 && !k->any_nowin && (int64_t)q->qmin - k->kmax >= m->window) return 0;
    if (m->allow || !q->all_valid || !k->all_valid) return 2;
    if (m->causal && k->kmax > q->qmin) return 2;
    if (m->window > 0 && !k->all_nowin && (int64_t)q->qmax - k->kmin >= m->window) return 2;
    return 1;
}

static void key_tiles(const nnt_attn_mask *m, int64_t B, int64_t S, int64_t nkt, key_tile *out)
{
    for (int64_t b = 0; b < B; b++)
        for (int64_t kt = 0; kt < nkt; kt++) {
            key_tile *t = &out[b * nkt + kt];
            *t = (key_tile){.kmin = INT32_MAX, .kmax = INT32_MIN, .all_valid = 1, .any_nowin = 0, .all_nowin = 1};
            for (int64_t s = kt * KEY_TILE; s < S && s < (kt + 1) * KEY_TILE; s++) {
                int nowin = m && m->key_no_window && m->key_no_window[s];
                t->any_nowin |= nowin;
                t->all_nowin &= nowin;
                if (m && m->key_valid && !m->key_valid[b * S + s]) {
                    t->all_valid = 0;
                    continue;
                }
                int32_t p = m && m->k_pos ? m->k_pos[b * S + s] : (int32_t)s;
                if (p < t->kmin) t->kmin = p;
                if (p > t->kmax) t->kmax = p;
            }
        }
}

static void query_tiles(const nnt_attn_mask *m, int64_t B, int64_t T, int64_t qt, int64_t nqt, query_tile *out)
{
    for (int64_t b = 0; b < B; b++)
        for (int64_t i = 0; i < nqt; i++) {
            query_tile *t = &out[b * nqt + i];
            *t = (query_tile){.qmin = INT32_MAX, .qmax = INT32_MIN, .all_valid = 1, .any_valid = 0};
            for (int64_t q = i * qt; q < T && q < (i + 1) * qt; q++) {
                if (m && m->query_valid && !m->query_valid[b * T + q]) {
                    t->all_valid = 0;
                    continue;
                }
                t->any_valid = 1;
                int32_t p = m && m->q_pos ? m->q_pos[b * T + q] : (int32_t)q;
                if (p < t->qmin) t->qmin = p;
                if (p > t->qmax) t->qmax = p;
            }
        }
}

/* One work item: the G query heads of key head g of row b, queries [t0, t0 + n), against the
 * first S of the C keys on k's and v's key axis. Buffers: qb
 * [G n, D], sb [G n, KEY_TILE], ob [G n, Dv], mx [G n], sum [G n] (double), vis [n, KEY_TILE]. */
static void attend_item(const cpu_ctx *c, const float *q, const float *k, const float *v, float scale,
                        const nnt_attn_mask *mask, const float *sinks, float *o, int64_t b, int64_t g, int64_t t0,
                        int64_t n, int64_t Hq, int64_t Hkv, int64_t T, int64_t S, int64_t C, int64_t D, int64_t Dv,
                        const query_tile *qtile, const key_tile *ktiles, float *qb, float *sb, float *ob, float *mx,
                        double *sum, uint8_t *vis)
{
    int64_t G = Hq / Hkv, R = G * n, nkt = (S + KEY_TILE - 1) / KEY_TILE;
    for (int64_t hh = 0; hh < G; hh++)
        memcpy(qb + hh * n * D, q + ((b * Hq + g * G + hh) * T + t0) * D, (size_t)(n * D) * sizeof(float));
    memset(ob, 0, (size_t)(R * Dv) * sizeof(float));
    for (int64_t r = 0; r < R; r++) {
        float sk = sinks ? sinks[g * G + r / n] : -INFINITY;
        mx[r] = sk;
        sum[r] = sinks ? 1.0 : 0.0;
    }
    const float *kh = k + (b * Hkv + g) * C * D, *vh = v + (b * Hkv + g) * C * Dv;
    for (int64_t kt = 0; kt < nkt; kt++) {
        int sight = tile_sight(mask, qtile, &ktiles[b * nkt + kt]);
        if (!sight) continue;
        int64_t s0 = kt * KEY_TILE, kn = S - s0 < KEY_TILE ? S - s0 : KEY_TILE;
        cpu_sgemm(c, 0, 1, R, kn, D, scale, qb, D, kh + s0 * D, D, 0.0f, sb, KEY_TILE);
        if (sight == 2) {
            for (int64_t i = 0; i < n; i++)
                for (int64_t j = 0; j < kn; j++) vis[i * KEY_TILE + j] = (uint8_t)cpu_visible(mask, b, t0 + i, s0 + j, T, S);
            for (int64_t r = 0; r < R; r++) {
                const uint8_t *vr = vis + (r % n) * KEY_TILE;
                float *row = sb + r * KEY_TILE;
                for (int64_t j = 0; j < kn; j++)
                    if (!vr[j]) row[j] = -INFINITY;
            }
        }
        for (int64_t r = 0; r < R; r++) {
            float *row = sb + r * KEY_TILE, m = mx[r];
            for (int64_t j = 0; j < kn; j++) m = row[j] > m ? row[j] : m; /* a NaN never wins, as in cpu_softmax */
            if (m == -INFINITY) { /* nothing visible yet: the row adds nothing */
                memset(row, 0, (size_t)kn * sizeof(float));
                continue;
            }
            if (m > mx[r]) {
                float corr = expf(mx[r] - m); /* 0 when the row had no maximum yet */
                sum[r] *= corr;
                float *orow = ob + r * Dv;
                for (int64_t d = 0; d < Dv; d++) orow[d] *= corr;
                mx[r] = m;
            }
            for (int64_t j = 0; j < kn; j++) row[j] -= m; /* -inf stays */
            c->k->exp(row, row, kn);
            double acc = 0.0;
            for (int64_t j = 0; j < kn; j++) acc += row[j];
            sum[r] += acc;
        }
        cpu_sgemm(c, 0, 0, R, Dv, kn, 1.0f, sb, KEY_TILE, vh + s0 * Dv, Dv, 1.0f, ob, Dv);
    }
    for (int64_t r = 0; r < R; r++) {
        int64_t hh = r / n, t = t0 + r % n;
        float *dst = o + ((b * T + t) * Hq + g * G + hh) * Dv;
        const float *orow = ob + r * Dv;
        float inv = sum[r] > 0.0 ? (float)(1.0 / sum[r]) : 0.0f; /* nothing visible and no sink: zeros */
        if (isnan(sum[r])) inv = NAN;
        for (int64_t d = 0; d < Dv; d++) dst[d] = orow[d] * inv;
    }
}

nnt_status cpu_attn_fused(void *ctx, const nnt_tensor *q, const nnt_tensor *k, const nnt_tensor *v, float scale,
                          const nnt_attn_mask *mask, const float *sinks, nnt_tensor *o, int *done, nnt_error *err)
{
    cpu_ctx *c = ctx;
    nnt_status st;
    if (!done) return cpu_error(err, NNT_ERR_INVALID_ARGUMENT, "cpu attn_fused: done is NULL");
    *done = 0;
    if ((st = cpu_check("attn_fused", "q", q, NNT_F32, 4, err)) != NNT_OK) return st;
    if ((st = cpu_check("attn_fused", "k", k, NNT_F32, 4, err)) != NNT_OK) return st;
    if ((st = cpu_check("attn_fused", "v", v, NNT_F32, 4, err)) != NNT_OK) return st;
    if ((st = cpu_check("attn_fused", "o", o, NNT_F32, 4, err)) != NNT_OK) return st;
    int64_t B = q->shape[0], Hq = q->shape[1], T = q->shape[2], D = q->shape[3];
    int64_t Hkv = k->shape[1], C = k->shape[2], S = nnt_attn_keys(mask, C), Dv = v->shape[3];
    if (k->shape[0] != B || k->shape[3] != D || Hkv == 0 || Hq % Hkv || S > C || v->shape[0] != B ||
        v->shape[1] != Hkv || v->shape[2] != C || o->shape[0] != B || o->shape[1] != T || o->shape[2] != Hq || o->shape[3] != Dv)
        return cpu_error(err, NNT_ERR_SHAPE, "cpu attn_fused: q, k, v and o shapes disagree");
    /* bfloat16 roundings are those of the three separate ops (the probabilities rounded after
     * their normalisation), which one pass cannot give: those calls take the materialised ops */
    if (cpu_bf16(o)) return NNT_OK;
    int64_t G = Hq / Hkv, qt = ROW_TARGET / G;
    if (qt < 1) qt = 1;
    if (qt > T) qt = T;
    int64_t nqt = T ? (T + qt - 1) / qt : 0, nkt = (S + KEY_TILE - 1) / KEY_TILE, items = B * Hkv * nqt;
    /* too few items to keep every thread busy (a decoding step): the separate ops split each
     * product over the team instead */
    if (items < c->threads) return NNT_OK;
    int64_t R = G * qt;
    size_t per = (size_t)(R * D + R * KEY_TILE + R * Dv + R) * sizeof(float) + (size_t)R * sizeof(double) +
                 (size_t)(qt * KEY_TILE);
    per = (per + 63) & ~(size_t)63;
    char *buf;
    if ((st = cpu_buffer(c, CPU_BUF_FUSED, per * (size_t)c->threads, (void **)&buf, err)) != NNT_OK) return st;
    key_tile *kts = malloc((size_t)(B * nkt) * sizeof *kts + 1);
    query_tile *qts = malloc((size_t)(B * nqt) * sizeof *qts + 1);
    if (!kts || !qts) {
        free(kts);
        free(qts);
        return cpu_error(err, NNT_ERR_OUT_OF_MEMORY, "cpu attn_fused: no memory for the tiles' mask summary");
    }
    key_tiles(mask, B, S, nkt, kts);
    query_tiles(mask, B, T, qt, nqt, qts);
    const float *qd = q->data, *kd = k->data, *vd = v->data;
    float *od = o->data;
#pragma omp parallel for num_threads(c->threads) schedule(dynamic, 1)
    for (int64_t it = 0; it < items; it++) {
        int tid = 0;
#ifdef _OPENMP
        tid = omp_get_thread_num();
#endif
        /* later query tiles see more keys: they go first */
        int64_t i = nqt - 1 - it % nqt, bg = it / nqt, b = bg / Hkv, g = bg % Hkv;
        int64_t t0 = i * qt, n = T - t0 < qt ? T - t0 : qt;
        char *p = buf + per * (size_t)tid;
        double *sum = (double *)p; /* first, so that it is aligned */
        float *qb = (float *)(sum + R), *sb = qb + R * D, *ob = sb + R * KEY_TILE, *mx = ob + R * Dv;
        uint8_t *vis = (uint8_t *)(mx + R);
        attend_item(c, qd, kd, vd, scale, mask, sinks, od, b, g, t0, n, Hq, Hkv, T, S, C, D, Dv, &qts[b * nqt + i], kts,
                    qb, sb, ob, mx, sum, vis);
    }
    free(kts);
    free(qts);
    *done = 1;
    return NNT_OK;
}
