/* plain_backend.c - "plain_c", an nnt kernel backend written outside nnt's tree against the
 * installed SDK only: straightforward float32 loops over host memory, no threads, no SIMD.
 *
 * It provides the required ops (memory, weight preparation, accounting) and the dense decoder
 * ops a softmax-attention family with dense or mixture-of-experts blocks calls (NNT_OPS_DECODER
 * in nnt_backend.h: what the family kit's helpers use). It leaves every other optional op NULL:
 * the recurrent ops of Kimi Delta Attention and the hyper-connection and compressed-attention
 * ops of DeepSeek-V4. nnt's capability check then keeps those families off this backend: an INI
 * that maps one onto it fails to open, naming the family, the backend and each missing op.
 *
 * Limits, each an error naming the op when met: weights in F32, BF16 or F16 only (no FP8/FP4
 * block-scaled encodings); float32 precision only (a family set to `precision = bf16` flags its
 * weights NNT_TENSOR_BF16_PRODUCTS, which `linear` refuses). It takes no INI options.
 *
 * Each op follows the contract written above its field in nnt_backend.h; shapes below use the
 * same axis names. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <nnt/nnt_backend.h>

static nnt_status fail(nnt_error *err, nnt_status st, const char *fmt, ...)
{
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
        err->status = st;
    }
    return st;
}

/* Refuses a tensor whose dtype is not F32 (activations). */
#define NEED_F32(op, t)                                                                                   \
    do {                                                                                                  \
        if ((t)->dtype != NNT_F32) return fail(err, NNT_ERR_UNSUPPORTED, "plain_c %s: %s is not F32", op, #t); \
    } while (0)

/* ---- memory ---- */

static nnt_status plain_alloc(void *ctx, size_t bytes, void **ptr, nnt_error *err)
{
    size_t n = (bytes + 63) / 64 * 64;
    *ptr = aligned_alloc(64, n ? n : 64);
    return *ptr ? NNT_OK : fail(err, NNT_ERR_OUT_OF_MEMORY, "plain_c: cannot allocate %zu bytes", bytes);
}

static void plain_free(void *ctx, void *ptr) { free(ptr); }

static nnt_status plain_memcpy(void *ctx, void *dst, const void *src, size_t bytes, nnt_error *err)
{
    memmove(dst, src, bytes);
    return NNT_OK;
}

/* Host memory is this backend's memory: a weight is used where the checkpoint maps it. */
static nnt_status plain_prepare_weight(void *ctx, const nnt_tensor *host, nnt_tensor *out, nnt_error *err)
{
    if (host->scale)
        return fail(err, NNT_ERR_UNSUPPORTED, "plain_c prepare_weight: block-scaled %s weights are not supported",
                    host->dtype == NNT_F4_E2M1 ? "FP4" : "FP8");
    *out = *host;
    return NNT_OK;
}

static void plain_release_weight(void *ctx, nnt_tensor *w) { memset(w, 0, sizeof *w); }

static size_t plain_weight_bytes(void *ctx) { return 0; }

/* ---- element access ---- */

static float bf16_to_f32(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static float f16_to_f32(uint16_t h)
{
    int s = h >> 15, e = (h >> 10) & 31, m = h & 1023;
    float v = e == 0 ? ldexpf((float)m, -24) : e == 31 ? (m ? NAN : INFINITY) : ldexpf((float)(m | 1024), e - 25);
    return s ? -v : v;
}

/* Element i of a weight (F32, BF16 or F16) as float. */
static float wget(const nnt_tensor *w, int64_t i)
{
    switch (w->dtype) {
    case NNT_F32: return ((const float *)w->data)[i];
    case NNT_BF16: return bf16_to_f32(((const uint16_t *)w->data)[i]);
    default: return f16_to_f32(((const uint16_t *)w->data)[i]);
    }
}

static int float_weight(const nnt_tensor *w)
{
    return w->dtype == NNT_F32 || w->dtype == NNT_BF16 || w->dtype == NNT_F16;
}

static int64_t numel(const nnt_tensor *t) { return nnt_tensor_numel(t); }

/* ---- dense algebra ---- */

static nnt_status plain_linear(void *ctx, const nnt_tensor *x, const nnt_tensor *w, nnt_tensor *y, nnt_error *err)
{
    NEED_F32("linear", x);
    NEED_F32("linear", y);
    if (!float_weight(w) || w->scale)
        return fail(err, NNT_ERR_UNSUPPORTED, "plain_c linear: weights must be F32, BF16 or F16 (no block scales)");
    if ((w->flags & NNT_TENSOR_BF16_PRODUCTS) || (y->flags & NNT_TENSOR_BF16_VALUES))
        return fail(err, NNT_ERR_UNSUPPORTED, "plain_c linear: bfloat16 precision is not supported; use precision = f32");
    int64_t N = w->shape[w->ndim - 2], K = w->shape[w->ndim - 1], M = numel(x) / K;
    if (numel(x) != M * K || numel(y) != M * N)
        return fail(err, NNT_ERR_SHAPE, "plain_c linear: x has %lld elements, y %lld, w is [%lld, %lld]",
                    (long long)numel(x), (long long)numel(y), (long long)N, (long long)K);
    const float *xd = x->data;
    float *yd = y->data;
    for (int64_t m = 0; m < M; m++)
        for (int64_t n = 0; n < N; n++) {
            double acc = 0.0;
            for (int64_t k = 0; k < K; k++) acc += (double)xd[m * K + k] * wget(w, n * K + k);
            yd[m * N + n] = (float)acc;
        }
    return NNT_OK;
}

static nnt_status plain_rms_norm(void *ctx, const nnt_tensor *x, const nnt_tensor *w, float eps, nnt_tensor *y,
                                 nnt_error *err)
{
    NEED_F32("rms_norm", x);
    NEED_F32("rms_norm", y);
    int64_t D = x->shape[x->ndim - 1], M = numel(x) / D;
    const float *xd = x->data;
    float *yd = y->data;
    for (int64_t m = 0; m < M; m++) {
        double ss = 0.0;
        for (int64_t d = 0; d < D; d++) ss += (double)xd[m * D + d] * xd[m * D + d];
        float r = 1.0f / sqrtf((float)(ss / (double)D) + eps);
        for (int64_t d = 0; d < D; d++) yd[m * D + d] = (w ? wget(w, d) : 1.0f) * (xd[m * D + d] * r);
    }
    return NNT_OK;
}

static nnt_status plain_embedding(void *ctx, const nnt_tensor *table, const nnt_tensor *ids, nnt_tensor *y,
                                  nnt_error *err)
{
    NEED_F32("embedding", y);
    if (!float_weight(table) || table->scale)
        return fail(err, NNT_ERR_UNSUPPORTED, "plain_c embedding: the table must be F32, BF16 or F16");
    int64_t V = table->shape[0], H = table->shape[table->ndim - 1], M = numel(ids);
    const int32_t *id = ids->data;
    float *yd = y->data;
    for (int64_t m = 0; m < M; m++) {
        if (id[m] < 0 || id[m] >= V)
            return fail(err, NNT_ERR_INDEX, "plain_c embedding: id %d outside [0, %lld)", id[m], (long long)V);
        for (int64_t h = 0; h < H; h++) yd[m * H + h] = wget(table, (int64_t)id[m] * H + h);
    }
    return NNT_OK;
}

static nnt_status plain_add(void *ctx, const nnt_tensor *a, const nnt_tensor *b, nnt_tensor *y, nnt_error *err)
{
    NEED_F32("add", a);
    NEED_F32("add", b);
    NEED_F32("add", y);
    const float *ad = a->data, *bd = b->data;
    float *yd = y->data;
    for (int64_t i = 0, n = numel(y); i < n; i++) yd[i] = ad[i] + bd[i];
    return NNT_OK;
}

static nnt_status plain_swap12(void *ctx, const nnt_tensor *x, nnt_tensor *y, nnt_error *err)
{
    int64_t A = x->shape[0], B = x->shape[1], C = x->shape[2], D = x->shape[3];
    size_t es = nnt_dtype_span(x->dtype, 1);
    const char *xd = x->data;
    char *yd = y->data;
    for (int64_t a = 0; a < A; a++)
        for (int64_t b = 0; b < B; b++)
            for (int64_t c = 0; c < C; c++)
                memcpy(yd + (((a * C + c) * B + b) * D) * es, xd + (((a * B + b) * C + c) * D) * es, (size_t)D * es);
    return NNT_OK;
}

static nnt_status plain_copy(void *ctx, const nnt_tensor *src, nnt_tensor *dst, nnt_error *err)
{
    if (src->dtype != dst->dtype || numel(src) != numel(dst))
        return fail(err, NNT_ERR_SHAPE, "plain_c copy: source and destination differ in dtype or size");
    memmove(dst->data, src->data, nnt_dtype_span(src->dtype, numel(src)));
    return NNT_OK;
}

static nnt_status plain_fill(void *ctx, nnt_tensor *t, float value, nnt_error *err)
{
    NEED_F32("fill", t);
    float *d = t->data;
    for (int64_t i = 0, n = numel(t); i < n; i++) d[i] = value;
    return NNT_OK;
}

static nnt_status plain_scale(void *ctx, const nnt_tensor *x, float factor, nnt_tensor *y, nnt_error *err)
{
    NEED_F32("scale", x);
    NEED_F32("scale", y);
    const float *xd = x->data;
    float *yd = y->data;
    for (int64_t i = 0, n = numel(y); i < n; i++) yd[i] = factor * xd[i];
    return NNT_OK;
}

/* ---- attention ---- */

static nnt_status plain_rope(void *ctx, nnt_tensor *x, const int32_t *pos, const float *inv_freq, int rot_start,
                             int rot_dim, nnt_rope_style style, float mscale, nnt_error *err)
{
    NEED_F32("rope", x);
    int64_t B = x->shape[0], H = x->shape[1], T = x->shape[2], D = x->shape[3], half = rot_dim / 2;
    float *xd = x->data;
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < H; h++)
            for (int64_t t = 0; t < T; t++) {
                float *row = xd + ((b * H + h) * T + t) * D + rot_start;
                for (int64_t i = 0; i < half; i++) {
                    float ang = (float)pos[b * T + t] * inv_freq[i];
                    float c = cosf(ang) * mscale, s = sinf(ang) * mscale;
                    int64_t i1 = style == NNT_ROPE_NEOX ? i : 2 * i, i2 = style == NNT_ROPE_NEOX ? i + half : 2 * i + 1;
                    float x1 = row[i1], x2 = row[i2];
                    row[i1] = x1 * c - x2 * s;
                    row[i2] = x2 * c + x1 * s;
                }
            }
    return NNT_OK;
}

/* nnt_attn_mask's visibility rule for query t and key s of row b. */
static int visible(const nnt_attn_mask *mk, int64_t b, int64_t t, int64_t s, int64_t T, int64_t S)
{
    if (!mk) return 1;
    int64_t qp = mk->q_pos ? mk->q_pos[b * T + t] : t, kp = mk->k_pos ? mk->k_pos[b * S + s] : s;
    if (mk->key_valid && !mk->key_valid[b * S + s]) return 0;
    if (mk->causal && kp > qp) return 0;
    if (mk->window && qp - kp >= mk->window && !(mk->key_no_window && mk->key_no_window[s])) return 0;
    if (mk->query_valid && !mk->query_valid[b * T + t]) return 0;
    if (mk->allow && !mk->allow[(b * T + t) * S + s]) return 0;
    return 1;
}

static nnt_status plain_attn_scores(void *ctx, const nnt_tensor *q, const nnt_tensor *k, float scale,
                                    const nnt_attn_mask *mask, nnt_tensor *s, nnt_error *err)
{
    NEED_F32("attn_scores", q);
    NEED_F32("attn_scores", k);
    NEED_F32("attn_scores", s);
    int64_t B = q->shape[0], Hq = q->shape[1], T = q->shape[2], D = q->shape[3], Hkv = k->shape[1], S = k->shape[2];
    if (Hkv < 1 || Hq % Hkv) return fail(err, NNT_ERR_SHAPE, "plain_c attn_scores: %lld query heads, %lld key heads",
                                         (long long)Hq, (long long)Hkv);
    const float *qd = q->data, *kd = k->data;
    float *sd = s->data;
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < Hq; h++)
            for (int64_t t = 0; t < T; t++)
                for (int64_t j = 0; j < S; j++) {
                    float *out = sd + ((b * Hq + h) * T + t) * S + j;
                    if (!visible(mask, b, t, j, T, S)) {
                        *out = -INFINITY;
                        continue;
                    }
                    const float *qr = qd + ((b * Hq + h) * T + t) * D, *kr = kd + ((b * Hkv + h / (Hq / Hkv)) * S + j) * D;
                    double acc = 0.0;
                    for (int64_t d = 0; d < D; d++) acc += (double)qr[d] * kr[d];
                    *out = (float)acc * scale;
                }
    return NNT_OK;
}

static nnt_status plain_softmax(void *ctx, const nnt_tensor *s, const float *sinks, nnt_tensor *p, nnt_error *err)
{
    NEED_F32("softmax", s);
    NEED_F32("softmax", p);
    int64_t H = s->shape[1], T = s->shape[2], S = s->shape[3], rows = numel(s) / S;
    const float *sd = s->data;
    float *pd = p->data;
    for (int64_t r = 0; r < rows; r++) {
        const float *in = sd + r * S;
        float *out = pd + r * S;
        float sink = sinks ? sinks[(r / T) % H] : -INFINITY, mx = sink;
        for (int64_t j = 0; j < S; j++) mx = in[j] > mx ? in[j] : mx;
        if (mx == -INFINITY) {
            for (int64_t j = 0; j < S; j++) out[j] = 0.0f;
            continue;
        }
        double sum = sinks ? exp((double)sink - mx) : 0.0;
        for (int64_t j = 0; j < S; j++) sum += exp((double)in[j] - mx);
        for (int64_t j = 0; j < S; j++) out[j] = (float)(exp((double)in[j] - mx) / sum);
    }
    return NNT_OK;
}

static nnt_status plain_attn_mix(void *ctx, const nnt_tensor *p, const nnt_tensor *v, nnt_tensor *o, nnt_error *err)
{
    NEED_F32("attn_mix", p);
    NEED_F32("attn_mix", v);
    NEED_F32("attn_mix", o);
    int64_t B = p->shape[0], Hq = p->shape[1], T = p->shape[2], S = p->shape[3], Hkv = v->shape[1], Dv = v->shape[3];
    const float *pd = p->data, *vd = v->data;
    float *od = o->data;
    for (int64_t b = 0; b < B; b++)
        for (int64_t t = 0; t < T; t++)
            for (int64_t h = 0; h < Hq; h++) {
                const float *pr = pd + ((b * Hq + h) * T + t) * S, *vh = vd + (b * Hkv + h / (Hq / Hkv)) * S * Dv;
                float *out = od + ((b * T + t) * Hq + h) * Dv;
                for (int64_t d = 0; d < Dv; d++) {
                    double acc = 0.0;
                    for (int64_t j = 0; j < S; j++) acc += (double)pr[j] * vh[j * Dv + d];
                    out[d] = (float)acc;
                }
            }
    return NNT_OK;
}

/* ---- feed-forward and mixture of experts ---- */

static nnt_status plain_swiglu(void *ctx, const nnt_tensor *gate, const nnt_tensor *up, float limit, nnt_tensor *act,
                               nnt_tensor *out, nnt_error *err)
{
    NEED_F32("swiglu", up);
    NEED_F32("swiglu", out);
    if (!gate && !act) return fail(err, NNT_ERR_INVALID_ARGUMENT, "plain_c swiglu: neither gate nor act given");
    const float *ud = up->data;
    float *od = out->data;
    for (int64_t i = 0, n = numel(out); i < n; i++) {
        float a;
        if (gate) {
            float g = ((const float *)gate->data)[i];
            if (limit > 0.0f && g > limit) g = limit;
            a = g / (1.0f + expf(-g));
            if (act) ((float *)act->data)[i] = a;
        } else {
            a = ((const float *)act->data)[i];
        }
        float u = ud[i];
        if (limit > 0.0f) u = u > limit ? limit : u < -limit ? -limit : u;
        od[i] = a * u;
    }
    return NNT_OK;
}

static float score(nnt_score_fn fn, float x)
{
    if (fn == NNT_SCORE_SIGMOID) return 1.0f / (1.0f + expf(-x));
    float sp = x > 20.0f ? x : log1pf(expf(x)); /* NNT_SCORE_SQRT_SOFTPLUS */
    return sqrtf(sp);
}

static nnt_status plain_route(void *ctx, const nnt_tensor *logits, const nnt_tensor *bias, const nnt_route_params *p,
                              nnt_tensor *idx, nnt_tensor *w, nnt_error *err)
{
    NEED_F32("route", logits);
    int64_t M = logits->shape[0], E = logits->shape[1];
    int K = p->top_k, G = p->n_group > 1 ? p->n_group : 1;
    if (K < 1 || K > E || numel(idx) != M * K || numel(w) != M * K || E % G)
        return fail(err, NNT_ERR_SHAPE, "plain_c route: top_k %d, %lld experts, %d groups, idx of %lld entries", K,
                    (long long)E, G, (long long)numel(idx));
    float *sc = malloc((size_t)E * sizeof *sc), *choice = malloc((size_t)E * sizeof *choice);
    float *gs = malloc((size_t)G * sizeof *gs);
    unsigned char *keep = malloc((size_t)G);
    if (!sc || !choice || !gs || !keep) {
        free(sc), free(choice), free(gs), free(keep);
        return fail(err, NNT_ERR_OUT_OF_MEMORY, "plain_c route: no memory");
    }
    const float *bd = bias ? bias->data : NULL;
    nnt_status st = NNT_OK;
    for (int64_t m = 0; m < M && st == NNT_OK; m++) {
        const float *row = (const float *)logits->data + m * E;
        int32_t *ir = (int32_t *)idx->data + m * K;
        float *wr = (float *)w->data + m * K;
        if (p->score_fn == NNT_SCORE_SOFTMAX) {
            float mx = -INFINITY;
            for (int64_t e = 0; e < E; e++) mx = row[e] > mx ? row[e] : mx;
            double sum = 0.0;
            for (int64_t e = 0; e < E; e++) sum += (sc[e] = expf(row[e] - mx));
            for (int64_t e = 0; e < E; e++) sc[e] = (float)(sc[e] / sum);
        } else {
            for (int64_t e = 0; e < E; e++) sc[e] = score(p->score_fn, row[e]);
        }
        if (!p->indices_given) {
            for (int64_t e = 0; e < E; e++) choice[e] = sc[e] + (bd ? bd[e] : 0.0f);
            if (G > 1) { /* a group scores the sum of its two best choices; the best topk_group stay */
                int64_t per = E / G;
                for (int g = 0; g < G; g++) {
                    float b1 = -INFINITY, b2 = -INFINITY;
                    for (int64_t e = g * per; e < (g + 1) * per; e++) {
                        if (choice[e] > b1) {
                            b2 = b1;
                            b1 = choice[e];
                        } else if (choice[e] > b2) {
                            b2 = choice[e];
                        }
                    }
                    gs[g] = per > 1 ? b1 + b2 : b1;
                    keep[g] = 0;
                }
                int kept = p->topk_group > 0 && p->topk_group < G ? p->topk_group : G;
                for (int r = 0; r < kept; r++) {
                    int best = -1;
                    for (int g = 0; g < G; g++)
                        if (!keep[g] && (best < 0 || gs[g] > gs[best])) best = g;
                    keep[best] = 1;
                }
                for (int64_t e = 0; e < E; e++)
                    if (!keep[e / per]) choice[e] = -INFINITY;
            }
            for (int k = 0; k < K; k++) { /* the k-th best, the lower index first among equals */
                int64_t best = -1;
                for (int64_t e = 0; e < E; e++) {
                    int taken = 0;
                    for (int q = 0; q < k; q++) taken |= ir[q] == e;
                    if (!taken && (best < 0 || choice[e] > choice[best])) best = e;
                }
                ir[k] = (int32_t)best;
            }
        }
        double sum = 0.0;
        for (int k = 0; k < K; k++) {
            if (ir[k] < 0 || ir[k] >= E) {
                st = fail(err, NNT_ERR_INDEX, "plain_c route: expert index %d outside [0, %lld)", ir[k], (long long)E);
                break;
            }
            sum += (wr[k] = sc[ir[k]]);
        }
        for (int k = 0; k < K && st == NNT_OK; k++) {
            if (p->renormalize) wr[k] = (float)(wr[k] / (sum + p->renorm_eps));
            wr[k] *= p->scaling_factor;
        }
    }
    free(sc), free(choice), free(gs), free(keep);
    return st;
}

static nnt_status plain_gather_rows(void *ctx, const nnt_tensor *src, const int32_t *rows, int n, nnt_tensor *dst,
                                    nnt_error *err)
{
    int64_t H = src->shape[src->ndim - 1], R = numel(src) / H;
    size_t row = nnt_dtype_span(src->dtype, H);
    for (int i = 0; i < n; i++) {
        if (rows[i] < 0 || rows[i] >= R)
            return fail(err, NNT_ERR_INDEX, "plain_c gather_rows: row %d outside [0, %lld)", rows[i], (long long)R);
        memcpy((char *)dst->data + (size_t)i * row, (const char *)src->data + (size_t)rows[i] * row, row);
    }
    return NNT_OK;
}

/* dst[rows[i], :] (+)= scale[i] * src[i, :]: the two scatters. */
static nnt_status scatter(const char *op, const nnt_tensor *src, const int32_t *rows, const float *scale, int n,
                          nnt_tensor *dst, int accumulate, nnt_error *err)
{
    NEED_F32(op, src);
    NEED_F32(op, dst);
    int64_t H = dst->shape[dst->ndim - 1], R = numel(dst) / H;
    const float *sd = src->data;
    float *dd = dst->data;
    for (int i = 0; i < n; i++) {
        if (rows[i] < 0 || rows[i] >= R)
            return fail(err, NNT_ERR_INDEX, "plain_c %s: row %d outside [0, %lld)", op, rows[i], (long long)R);
        float f = scale ? scale[i] : 1.0f;
        for (int64_t h = 0; h < H; h++) {
            float v = f * sd[(int64_t)i * H + h];
            dd[rows[i] * H + h] = accumulate ? dd[rows[i] * H + h] + v : v;
        }
    }
    return NNT_OK;
}

static nnt_status plain_scatter_add_rows(void *ctx, const nnt_tensor *src, const int32_t *rows, const float *scale,
                                         int n, nnt_tensor *dst, nnt_error *err)
{
    return scatter("scatter_add_rows", src, rows, scale, n, dst, 1, err);
}

static nnt_status plain_scatter_rows(void *ctx, const nnt_tensor *src, const int32_t *rows, const float *scale, int n,
                                     nnt_tensor *dst, nnt_error *err)
{
    return scatter("scatter_rows", src, rows, scale, n, dst, 0, err);
}

static nnt_status plain_sum_axis1(void *ctx, const nnt_tensor *x, nnt_tensor *y, nnt_error *err)
{
    NEED_F32("sum_axis1", x);
    NEED_F32("sum_axis1", y);
    int64_t M = x->shape[0], K = x->shape[1], H = numel(x) / (M * K);
    const float *xd = x->data;
    float *yd = y->data;
    for (int64_t m = 0; m < M; m++)
        for (int64_t h = 0; h < H; h++) {
            float acc = 0.0f;
            for (int64_t k = 0; k < K; k++) acc += xd[(m * K + k) * H + h];
            yd[m * H + h] = acc;
        }
    return NNT_OK;
}

static nnt_status plain_copy_cols(void *ctx, const nnt_tensor *src, int64_t src_col, nnt_tensor *dst, int64_t dst_col,
                                  int64_t ncols, nnt_error *err)
{
    NEED_F32("copy_cols", src);
    NEED_F32("copy_cols", dst);
    int64_t SC = src->shape[src->ndim - 1], DC = dst->shape[dst->ndim - 1], M = numel(src) / SC;
    if (numel(dst) / DC != M || src_col < 0 || dst_col < 0 || src_col + ncols > SC || dst_col + ncols > DC)
        return fail(err, NNT_ERR_SHAPE, "plain_c copy_cols: columns out of range or rows differ");
    for (int64_t m = 0; m < M; m++) /* memmove: src and dst may be one tensor */
        memmove((float *)dst->data + m * DC + dst_col, (const float *)src->data + m * SC + src_col,
                (size_t)ncols * sizeof(float));
    return NNT_OK;
}

/* ---- the plugin ---- */

static nnt_status plain_create(const nnt_backend_options *opt, void **ctx, nnt_error *err)
{
    if (opt && opt->count > 0)
        return fail(err, NNT_ERR_CONFIG, "%s: [backend.plain_c] takes no options (got '%s')", opt->ini_path,
                    opt->keys[0]);
    static int token;
    *ctx = &token; /* the backend keeps no state */
    return NNT_OK;
}

static void plain_destroy(void *ctx) {}

static const nnt_backend_ops plain_ops = {
    .struct_size = sizeof(nnt_backend_ops),
    .alloc = plain_alloc,
    .free = plain_free,
    .upload = plain_memcpy,
    .download = plain_memcpy,
    .prepare_weight = plain_prepare_weight,
    .release_weight = plain_release_weight,
    .weight_bytes = plain_weight_bytes,
    .linear = plain_linear,
    .rms_norm = plain_rms_norm,
    .embedding = plain_embedding,
    .add = plain_add,
    .swap12 = plain_swap12,
    .copy = plain_copy,
    .fill = plain_fill,
    .scale = plain_scale,
    .rope = plain_rope,
    .attn_scores = plain_attn_scores,
    .softmax = plain_softmax,
    .attn_mix = plain_attn_mix,
    .swiglu = plain_swiglu,
    .route = plain_route,
    .gather_rows = plain_gather_rows,
    .scatter_add_rows = plain_scatter_add_rows,
    .scatter_rows = plain_scatter_rows,
    .sum_axis1 = plain_sum_axis1,
    .copy_cols = plain_copy_cols,
    /* the recurrent and hyper-connection ops are left out: NULL */
};

NNT_PLUGIN_EXPORT const nnt_backend_descriptor nnt_backend_plugin = {
    .header = NNT_PLUGIN_HEADER(nnt_backend_descriptor, NNT_PLUGIN_BACKEND, "plain_c", "0.1.0",
                                "plain C float32 loops, the decoder ops only (an out-of-tree example backend)"),
    .host_memory = 1,
    .create = plain_create,
    .destroy = plain_destroy,
    .ops = &plain_ops,
};
