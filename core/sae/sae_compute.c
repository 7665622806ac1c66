/* sae_compute.c - the encoder and decoder of a loaded sparse autoencoder on float32 rows: input
 * normalisation, the pre-activation, the ReLU / JumpReLU / TopK activation, and the decoder with
 * the normalisation undone (the formulas of nnt_sae.h). Sums are taken in double. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "sae_internal.h"

/* The normalisation of one input row x [D]: x' = (x - shift) * mul; the decoder's output is
 * undone as out * out_mul + shift (layer_norm undoes with the std, not the std + eps it divided
 * by, as SAELens does). */
typedef struct row_norm {
    double mul, out_mul, shift;
} row_norm;

static row_norm norm_of(const nnt_sae *s, const float *x)
{
    row_norm r = {1, 1, 0};
    int64_t D = s->info.d_in;
    if (s->info.norm == NNT_SAE_NORM_CONSTANT) {
        double ss = 0;
        for (int64_t i = 0; i < D; i++) ss += (double)x[i] * x[i];
        if (ss > 0) r.mul = sqrt((double)D) / sqrt(ss); /* a zero row is left as it is */
        r.out_mul = 1 / r.mul;
    } else if (s->info.norm == NNT_SAE_NORM_LAYER) {
        double mean = 0, var = 0;
        for (int64_t i = 0; i < D; i++) mean += x[i];
        mean /= (double)D;
        for (int64_t i = 0; i < D; i++) var += (x[i] - mean) * (x[i] - mean);
        var = D > 1 ? var / (double)(D - 1) : 0; /* the unbiased estimate, as torch's std */
        r.mul = 1 / (sqrt(var) + 1e-5);
        r.out_mul = sqrt(var);
        r.shift = mean;
    }
    return r;
}

/* Sifts entry `at` of a min-heap of indices (ordered by val) down. */
static void heap_down(int *h, int n, int at, const double *val)
{
    for (;;) {
        int l = 2 * at + 1, r = l + 1, m = at;
        if (l < n && val[h[l]] < val[h[m]]) m = l;
        if (r < n && val[h[r]] < val[h[m]]) m = r;
        if (m == at) return;
        int t = h[at];
        h[at] = h[m];
        h[m] = t;
        at = m;
    }
}

/* The activation of one row: pre [F] (double) into f [F]. heap: k ints of scratch (topk). */
static void activate(const nnt_sae *s, const double *pre, float *f, int *heap)
{
    int F = s->info.d_sae;
    if (s->info.arch == NNT_SAE_STANDARD) {
        for (int j = 0; j < F; j++) f[j] = pre[j] > 0 ? (float)pre[j] : 0.0f;
        return;
    }
    if (s->info.arch == NNT_SAE_JUMPRELU) {
        for (int j = 0; j < F; j++) {
            float p = (float)pre[j];
            f[j] = p > s->threshold[j] && p > 0 ? p : 0.0f;
        }
        return;
    }
    int k = s->info.k; /* topk: the k largest pre-activations, then relu */
    for (int j = 0; j < k; j++) heap[j] = j;
    for (int j = k / 2 - 1; j >= 0; j--) heap_down(heap, k, j, pre);
    for (int j = k; j < F; j++)
        if (pre[j] > pre[heap[0]]) {
            heap[0] = j;
            heap_down(heap, k, 0, pre);
        }
    memset(f, 0, (size_t)F * sizeof *f);
    for (int j = 0; j < k; j++) f[heap[j]] = pre[heap[j]] > 0 ? (float)pre[heap[j]] : 0.0f;
}

/* Decodes one row: f [F] into out [D], the normalisation nr undone. acc: D doubles of scratch. */
static void decode_row(const nnt_sae *s, const float *f, row_norm nr, float *out, double *acc)
{
    int64_t D = s->info.d_in, F = s->info.d_sae;
    for (int64_t i = 0; i < D; i++) acc[i] = 0;
    for (int64_t j = 0; j < F; j++) {
        if (f[j] == 0) continue;
        double a = s->dec_norm ? (double)f[j] / s->dec_norm[j] : (double)f[j];
        const float *w = s->w_dec + j * D;
        for (int64_t i = 0; i < D; i++) acc[i] += a * w[i];
    }
    for (int64_t i = 0; i < D; i++) out[i] = (float)((acc[i] + s->b_dec[i]) * nr.out_mul + nr.shift);
}

static nnt_status args_ok(const nnt_sae *s, const void *a, const void *b, int64_t n, nnt_error *err)
{
    if (!s || !a || !b || n < 0)
        return err ? nnt_err_set(err, NNT_ERR_INVALID_ARGUMENT, "SAE: NULL arguments or a negative row count")
                   : NNT_ERR_INVALID_ARGUMENT;
    return NNT_OK;
}

nnt_status nnt_sae_encode(const nnt_sae *s, const float *x, int64_t n, float *feats, float *recon, nnt_error *err)
{
    nnt_status st = args_ok(s, x, feats, n, err);
    if (st != NNT_OK) return st;
    int64_t D = s->info.d_in, F = s->info.d_sae;
    double *pre = malloc((size_t)F * sizeof *pre), *acc = malloc((size_t)D * sizeof *acc);
    double *in = malloc((size_t)D * sizeof *in);
    int *heap = malloc((size_t)(s->info.k > 0 ? s->info.k : 1) * sizeof *heap);
    if (!pre || !acc || !in || !heap) {
        st = err ? nnt_err_set(err, NNT_ERR_OUT_OF_MEMORY, "no memory for an SAE's rows") : NNT_ERR_OUT_OF_MEMORY;
        n = 0;
    }
    for (int64_t r = 0; r < n; r++) {
        const float *xr = x + r * D;
        row_norm nr = norm_of(s, xr);
        for (int64_t i = 0; i < D; i++) {
            float xn = (float)((xr[i] - nr.shift) * nr.mul);
            in[i] = (double)(s->info.apply_b_dec_to_input ? xn - s->b_dec[i] : xn);
        }
        for (int64_t j = 0; j < F; j++) pre[j] = s->b_enc[j];
        for (int64_t i = 0; i < D; i++) {
            const float *w = s->w_enc + i * F;
            for (int64_t j = 0; j < F; j++) pre[j] += in[i] * w[j];
        }
        if (s->dec_norm)
            for (int64_t j = 0; j < F; j++) pre[j] *= s->dec_norm[j];
        activate(s, pre, feats + r * F, heap);
        if (recon) decode_row(s, feats + r * F, nr, recon + r * D, acc);
    }
    free(pre);
    free(acc);
    free(in);
    free(heap);
    return st;
}

nnt_status nnt_sae_decode(const nnt_sae *s, const float *x, const float *feats, int64_t n, float *recon, nnt_error *err)
{
    nnt_status st = args_ok(s, feats, recon, n, err);
    if (st != NNT_OK) return st;
    if (!x && (s->info.norm == NNT_SAE_NORM_CONSTANT || s->info.norm == NNT_SAE_NORM_LAYER))
        return err ? nnt_err_set(err, NNT_ERR_INVALID_ARGUMENT,
                                 "SAE decode: this SAE's normalisation needs the input x")
                   : NNT_ERR_INVALID_ARGUMENT;
    int64_t D = s->info.d_in, F = s->info.d_sae;
    double *acc = malloc((size_t)D * sizeof *acc);
    if (!acc)
        return err ? nnt_err_set(err, NNT_ERR_OUT_OF_MEMORY, "no memory for an SAE's rows") : NNT_ERR_OUT_OF_MEMORY;
    for (int64_t r = 0; r < n; r++) {
        row_norm nr = x ? norm_of(s, x + r * D) : (row_norm){1, 1, 0};
        decode_row(s, feats + r * F, nr, recon + r * D, acc);
    }
    free(acc);
    return NNT_OK;
}
