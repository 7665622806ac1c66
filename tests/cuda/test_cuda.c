/* test_cuda.c - the cuda backend against the cpu backend.
 *
 * Without a usable GPU the suite prints why (the cuda backend's create error, e.g. "no CUDA
 * device: ...") and exits 77, which ctest reports as Skipped (SKIP_RETURN_CODE 77).
 *
 * With a GPU:
 *  - ops: every op of the table on random inputs, the cpu backend's result on host tensors
 *    against the cuda backend's on device copies (both ops tables come from runtimes opened on
 *    build/nnt.ini and build/nnt-cuda.ini), including the awkward cases: GQA, sinks, windows,
 *    padding and per-query selections in the attention mask, the one-pass attn_fused against the
 *    three attention ops; group-limited routing and given
 *    indices; repeated rows in scatters; scale_rows in place and not, repeated indices and one out
 *    of range; the delta rule with K != V over several column tiles,
 *    padding tokens and carried state; in-place convolution state; copy_cols inside one tensor;
 *    BF16 and F16 norm gains as stored;
 *  - weights in every encoding (F32, BF16, F16, FP8 with F32 / BF16 / F16 / E8M0 block scales
 *    and partial edge blocks, FP8 views starting inside a block row, FP4 with E8M0 and F32
 *    group scales): linear at 1, 3, 8 and 40 rows in float32, with bfloat16 products and into a
 *    bfloat16-valued output (x, the weight's values and y rounded; the weight values' rounding
 *    is what tells F32, F16 and FP8/FP4 under F32, BF16 or F16 scales apart from the exact
 *    encodings), on the default context and on one with 4 KiB decode tiles; embedding; the
 *    bytes weight_bytes reports grow by exactly what was uploaded and shrink back on release;
 *  - bfloat16 values: every other op with its outputs flagged NNT_TENSOR_BF16_VALUES, and the
 *    NNT_TENSOR_BF16_ONCE (rms_norm, rope) and NNT_TENSOR_BF16_SHIFTED (softmax) styles, on the
 *    inputs a bfloat16 model hands it; route with its weights flagged (bfloat16 scoring) and
 *    unflagged; the ops that never round (kda_gate, indexer_scores, hyper_connection's post and
 *    comb, the delta rule's states, the convolution's state, gathers) held to float32 equality
 *    with flagged outputs;
 *  - backward ops: every backward entry against the cpu backend's on the same inputs, each
 *    gradient output starting from the same random values (so adding, not overwriting, is
 *    checked): linear_backward on weights in every encoding (F32, BF16, F16, FP8 with F32 / BF16
 *    / F16 / E8M0 scales and partial blocks, an FP8 view starting inside a block row, FP4 with
 *    E8M0 and F32 group scales) at 1, 3, 37 and 70 rows; rms_norm_backward with F32, BF16 and no
 *    gain; accumulate; swap12, copy_cols (also inside one tensor); swiglu with and without a
 *    limit (entries at the bound), with the act output's own gradient, without a gate; rope both
 *    styles; attn_scores under a causal mask with a sliding window and padding, under the full
 *    mask (compressed entries outside the window, a per-query selection) and none, dq and dk
 *    together and alone; softmax with and without sinks; attn_mix; route per score function,
 *    renormalised or not, on the forward's choice and on given indices with repeated experts,
 *    and an index out of range; gather and both scatters with repeated rows, scaled or not,
 *    with and without dscale; sum over slots; scale_rows with repeated indices; the
 *    hyper-connection weights (each output gradient alone and together, 20 and 1 Sinkhorn
 *    iterations), mix, head; compression with and without overlap; Kimi Delta Attention's ops:
 *    the causal convolution with and without a carried state (and dstate_out), SiLU and none,
 *    fewer tokens than the state holds, a BF16 kernel; the forget gate past softplus' threshold;
 *    sigmoid from its output; the delta rule over 37 tokens (more than the cpu's recomputed
 *    stretch of 16), 16 and 1, K != V, a padding hole and a padding prefix, carried state, raw
 *    keys, the states' cotangent replaced by their total gradient, dq alone, no cotangent on o;
 *    the gated RMSNorm with F32 and BF16 gains, each gradient alone and both; shapes refused;
 *    then gradient requests (nnt_trace_grad) on the MiniMax-M2 and Kimi-Linear fp32 fixtures
 *    under two metrics at three and four values;
 *  - fixtures: every model directory under tests/fixtures/<family>/<variant> with a config.json,
 *    loaded once per runtime, runs the prompts of every reference*.safetensors it holds (or, when
 *    it holds none - kimi_linear/hub - its sibling fp32's) with every reference value saved, and
 *    each saved value is compared between the runtimes; then a session (prompt plus three
 *    one-token steps) compares the logits of every step where the family keeps caches;
 *  - fixtures at precision = bf16: each variant holding a transformers-bf16 reference
 *    (reference_bf16*.safetensors, next to its float32 counterpart without "_bf16") is run
 *    again on runtimes whose INI sets precision = bf16 for every family, with the same values
 *    and session steps compared.
 *
 * Tolerances (cpu vs cuda, both float32):
 *  - float values: max |cpu - cuda| <= 1e-4 x the largest |cpu| over the compared entries;
 *  - products with NNT_TENSOR_BF16_PRODUCTS: each entry within one bfloat16 step of the cpu's
 *    (2^-7 of its magnitude) plus the above, every output a bfloat16, and at most 5% of the
 *    entries (plus one) different at all (see same_bf16_on); the same for outputs flagged
 *    NNT_TENSOR_BF16_VALUES;
 *  - other ops into outputs flagged NNT_TENSOR_BF16_VALUES (see same_r16): every cuda output a
 *    bfloat16, each within two bfloat16 steps of the cpu's, at most 5% of the entries (plus one)
 *    different; add, scale and the scatters exactly equal (the same float32 operations);
 *  - embedding rows in any encoding: exact (the same decode, one multiply by the scale, and the
 *    bfloat16 rounding of a flagged output);
 *    -inf/+inf must coincide (masked scores), NaN must coincide;
 *  - values of data movement ops (copy, swap12, gather, scatter, copy_cols, zero_rows, fill):
 *    exact;
 *  - backward ops and gradient requests: the float values' bound above (max |cpu - cuda| <=
 *    1e-4 x the largest |cpu|);
 *  - expert indices: the same set per token (slot order may differ); expert weights and outputs
 *    compared slot by slot after aligning slots by expert index;
 *  - model values: real tokens only (padding positions are excluded, as in the reference checks:
 *    a padding token's routing is not guarded against near-ties);
 *  - model values at precision = bf16 (see compare_traces_bf16): logits, every layer_output and
 *    the session steps' logits at most as far apart, relative RMS, as transformers-bf16 is from
 *    transformers-fp32 on that fixture (the bound the family suites hold nnt-bf16 to); every
 *    value the cpu holds in bfloat16 also bfloat16 on cuda, every value it keeps in float32 not
 *    rounded on cuda; expert choices reported, not held (a near-tie may go either way). */
#include <dirent.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/internal.h"
#include "test_util.h"

#define TOL 1e-4

/* The backend under test. Building with -DNNT_TEST_GPU_BACKEND='"cpu"' and NNT_TEST_CUDA_INI
 * set to build/nnt.ini runs the whole suite as cpu against cpu: a check of the suite itself on
 * a machine without a GPU (every difference is then zero). */
#ifndef NNT_TEST_GPU_BACKEND
#define NNT_TEST_GPU_BACKEND "cuda"
#endif

static nnt_runtime *rt_cpu, *rt_gpu;
static const nnt_backend_ops *cops, *gops;
static void *cctx, *gctx;
static const nnt_backend_descriptor *gdesc; /* the backend under test, to make more contexts */

static const nnt_plugin *find_backend(nnt_runtime *rt, const char *name)
{
    for (int i = 0; i < rt->plugins.n; i++) {
        nnt_plugin *p = rt->plugins.items[i];
        if (p->kind == NNT_PLUGIN_BACKEND && strcmp(p->backend->header.name, name) == 0 && p->be_ctx) return p;
    }
    return NULL;
}

static int setup(void)
{
    if (nnt_runtime_open(t_ini(), &rt_cpu) != NNT_OK) {
        fprintf(stderr, "cpu runtime: %s\n", nnt_last_error(rt_cpu));
        return -1;
    }
    if (nnt_runtime_open(NNT_TEST_CUDA_INI, &rt_gpu) != NNT_OK) {
        fprintf(stderr, "cuda runtime: %s\n", nnt_last_error(rt_gpu));
        return -1;
    }
    const nnt_plugin *c = find_backend(rt_cpu, "cpu"), *g = find_backend(rt_gpu, NNT_TEST_GPU_BACKEND);
    if (!c || !g) return -1;
    cops = c->backend->ops;
    cctx = c->be_ctx;
    gops = g->backend->ops;
    gctx = g->be_ctx;
    gdesc = g->backend;
    return 0;
}

static int teardown(void)
{
    nnt_runtime_close(rt_gpu);
    nnt_runtime_close(rt_cpu);
    rt_gpu = rt_cpu = NULL;
    return 0;
}

/* ---------------------------------------------------------------------------------------- */
/* Host and device tensors.                                                                  */

static unsigned rng = 2024u;
static float urand(void) /* uniform in [-1, 1) */
{
    rng = rng * 1664525u + 1013904223u;
    return (float)((rng >> 8) & 0xffffff) / 8388608.0f - 1.0f;
}

static nnt_tensor host(nnt_dtype dt, int ndim, int64_t a, int64_t b, int64_t c, int64_t d, int64_t e)
{
    int64_t shape[5] = {a, b, c, d, e};
    nnt_tensor t;
    CU_ASSERT_FATAL(nnt_tensor_alloc(&t, dt, ndim, shape) == NNT_OK);
    return t;
}

static nnt_tensor hrand(int ndim, int64_t a, int64_t b, int64_t c, int64_t d, int64_t e, float amp)
{
    nnt_tensor t = host(NNT_F32, ndim, a, b, c, d, e);
    float *p = t.data;
    for (int64_t i = 0; i < nnt_tensor_numel(&t); i++) p[i] = amp * urand();
    return t;
}

static size_t nbytes(const nnt_tensor *t)
{
    return (size_t)nnt_tensor_numel(t) * nnt_dtype_size(t->dtype);
}

/* A device copy of a host tensor, made through context gx's alloc and upload (gx: a context of
 * the backend under test; dev() uses the runtime's). */
static nnt_tensor dev_on(void *gx, const nnt_tensor *h)
{
    nnt_tensor d = *h;
    nnt_error err = {0};
    d.device = 1;
    nnt_status st = gops->alloc(gx, nbytes(h), &d.data, &err);
    if (st == NNT_OK) st = gops->upload(gx, d.data, h->data, nbytes(h), &err);
    if (st != NNT_OK) fprintf(stderr, "\n  device copy: %s\n", err.msg);
    CU_ASSERT_FATAL(st == NNT_OK);
    return d;
}

static nnt_tensor dev(const nnt_tensor *h)
{
    return dev_on(gctx, h);
}

static void dev_free_on(void *gx, nnt_tensor *d)
{
    if (d->data) gops->free(gx, d->data);
    d->data = NULL;
}

static void dev_free(nnt_tensor *d)
{
    dev_free_on(gctx, d);
}

/* The device tensor read back (through context gx) into a new host tensor. */
static nnt_tensor back_on(void *gx, const nnt_tensor *d)
{
    nnt_tensor h = *d;
    h.device = 0;
    h.data = malloc(nbytes(d) ? nbytes(d) : 1);
    nnt_error err = {0};
    nnt_status st = gops->download(gx, h.data, d->data, nbytes(d), &err);
    if (st != NNT_OK) fprintf(stderr, "\n  download: %s\n", err.msg);
    CU_ASSERT_FATAL(st == NNT_OK);
    return h;
}

static nnt_tensor back(const nnt_tensor *d)
{
    return back_on(gctx, d);
}

/* Largest |a - b| relative to the largest |a| where sel (NULL: all) is set; -1 when infinities
 * or NaNs do not coincide or the sizes differ. */
static double rel_diff(const nnt_tensor *a, const nnt_tensor *b, const unsigned char *sel)
{
    int64_t n = nnt_tensor_numel(a);
    if (n != nnt_tensor_numel(b)) return -1;
    double scale = 0, worst = 0;
    for (int64_t i = 0; i < n; i++) {
        if (sel && !sel[i]) continue;
        double x = nnt_tensor_get_f64(a, i);
        if (isfinite(x) && fabs(x) > scale) scale = fabs(x);
    }
    if (scale == 0) scale = 1;
    for (int64_t i = 0; i < n; i++) {
        if (sel && !sel[i]) continue;
        double x = nnt_tensor_get_f64(a, i), y = nnt_tensor_get_f64(b, i);
        if (isnan(x) || isnan(y)) {
            if (!(isnan(x) && isnan(y))) return -1;
            continue;
        }
        if (isinf(x) || isinf(y)) {
            if (x != y) return -1;
            continue;
        }
        worst = fmax(worst, fabs(x - y) / scale);
    }
    return worst;
}

/* Compares the cpu result (host) with the cuda result (device, read through context gx); tol 0
 * asks for equality. */
static void same_on(void *gx, const char *what, const nnt_tensor *cpu, const nnt_tensor *gpu, double tol)
{
    nnt_tensor g = back_on(gx, gpu);
    double e = rel_diff(cpu, &g, NULL);
    if (e < 0 || e > tol) fprintf(stderr, "\n  %s: cpu and cuda differ (relative %.3g, tolerance %.3g)\n", what, e, tol);
    CU_ASSERT(e >= 0 && e <= tol);
    free(g.data);
}

static void same(const char *what, const nnt_tensor *cpu, const nnt_tensor *gpu, double tol)
{
    same_on(gctx, what, cpu, gpu, tol);
}

#define OK_CPU(expr)                                                                                                   \
    do {                                                                                                               \
        nnt_error e_ = {0};                                                                                            \
        nnt_error *err = &e_;                                                                                          \
        nnt_status s_ = (expr);                                                                                        \
        if (s_ != NNT_OK) fprintf(stderr, "\n  %s:%d cpu: %s\n", __FILE__, __LINE__, e_.msg);                          \
        CU_ASSERT_EQUAL_FATAL(s_, NNT_OK);                                                                             \
    } while (0)
#define OK_GPU(expr)                                                                                                   \
    do {                                                                                                               \
        nnt_error e_ = {0};                                                                                            \
        nnt_error *err = &e_;                                                                                          \
        nnt_status s_ = (expr);                                                                                        \
        if (s_ != NNT_OK) fprintf(stderr, "\n  %s:%d cuda: %s\n", __FILE__, __LINE__, e_.msg);                         \
        CU_ASSERT_EQUAL_FATAL(s_, NNT_OK);                                                                             \
    } while (0)

static void hfree(int n, nnt_tensor **ts)
{
    for (int i = 0; i < n; i++) nnt_tensor_free(ts[i]);
}

static void dfree(int n, nnt_tensor **ts)
{
    for (int i = 0; i < n; i++) dev_free(ts[i]);
}

/* ---------------------------------------------------------------------------------------- */
/* Bfloat16 values: flags, inputs and the comparison of flagged outputs.                     */

#define R16 NNT_TENSOR_BF16_VALUES
#define R16_ONCE (NNT_TENSOR_BF16_VALUES | NNT_TENSOR_BF16_ONCE)
#define R16_SHIFTED (NNT_TENSOR_BF16_VALUES | NNT_TENSOR_BF16_SHIFTED)

static float bf16_of(float f)
{
    return nnt_bf16_to_f32(nnt_f32_to_bf16(f));
}

/* A host F32 tensor's values rounded to bfloat16 in place: the activations a bfloat16 model hands
 * an op. (On such operands a product of two values is exact in float32, so the cpu's bfloat16 and
 * float32 product paths - which one runs depends on the CPU and the shape - give the same sums.) */
static void round_host(nnt_tensor *t)
{
    float *p = t->data;
    for (int64_t i = 0; i < nnt_tensor_numel(t); i++) p[i] = bf16_of(p[i]);
}

/* The same flags on a host tensor and on its device copy. */
static void flag2(nnt_tensor *h, nnt_tensor *d, uint32_t flags)
{
    h->flags = d->flags = flags;
}

/* Outputs flagged NNT_TENSOR_BF16_VALUES of ops other than linear. Both backends take the same
 * roundings, in the same order, of float32 intermediates that may differ in their last bits
 * (summation order, the device's expf / sinf / cosf against the cpu's, fused multiply-adds on the
 * device), so an entry can differ only where the two fall on either side of a bfloat16 rounding
 * boundary - rare at these sizes - and then by one step, or two where an intermediate rounding
 * flipped and moved the final one (a step is 2^-8 to 2^-7 of the value). Checked: infinities and
 * NaNs coincide; every finite cuda output is a bfloat16; each entry is within `steps` x 2^-7 of
 * the cpu's magnitude plus TOL of the largest; at most 5% of the entries (plus one) differ at all.
 * A rounding step taken on one side and not the other (or a once / shifted style ignored) moves
 * every entry whose value the missing step carries across a boundary of the next rounding - a
 * sizeable share of them, far above 5% - so the last bound is what catches it. */
static void same_r16(const char *what, const nnt_tensor *cpu, const nnt_tensor *gpu, int steps)
{
    nnt_tensor g = back(gpu);
    int64_t n = nnt_tensor_numel(cpu), differ = 0, bad = 0, unrounded = 0, special = 0;
    const float *a = cpu->data, *b = g.data;
    double scale = 0;
    for (int64_t i = 0; i < n; i++)
        if (isfinite(a[i])) scale = fmax(scale, fabs(a[i]));
    for (int64_t i = 0; i < n; i++) {
        if (!isfinite(a[i]) || !isfinite(b[i])) {
            if (!(isnan(a[i]) && isnan(b[i])) && a[i] != b[i]) special++;
            continue;
        }
        if (a[i] != b[i]) differ++;
        if (!(fabs((double)a[i] - b[i]) <= steps * fabs(a[i]) / 128.0 + TOL * scale)) bad++;
        if (bf16_of(b[i]) != b[i]) unrounded++;
    }
    int ok = special == 0 && bad == 0 && unrounded == 0 && differ <= n / 20 + 1;
    if (!ok)
        fprintf(stderr,
                "\n  %s: %lld of %lld entries differ, %lld beyond %d bfloat16 steps, %lld cuda outputs not bfloat16, "
                "%lld infinities or NaNs apart\n",
                what, (long long)differ, (long long)n, (long long)bad, steps, (long long)unrounded, (long long)special);
    CU_ASSERT(ok);
    free(g.data);
}

/* ---------------------------------------------------------------------------------------- */
/* The ops, one at a time.                                                                   */

static uint16_t to_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1)) >> 16);
}

static void test_linear(void)
{
    nnt_tensor x = hrand(2, 37, 70, 0, 0, 0, 1), w = hrand(2, 45, 70, 0, 0, 0, 0.2f), y = host(NNT_F32, 2, 37, 45, 0, 0, 0);
    nnt_tensor dx = dev(&x), dy = dev(&y), dw;
    OK_CPU(cops->linear(cctx, &x, &w, &y, err));
    int is_cuda = strcmp(NNT_TEST_GPU_BACKEND, "cuda") == 0;
    OK_GPU(gops->prepare_weight(gctx, &w, &dw, err));
    CU_ASSERT_EQUAL(dw.dtype, NNT_F32);
    if (is_cuda) CU_ASSERT_EQUAL(dw.device, 1);
    OK_GPU(gops->linear(gctx, &dx, &dw, &dy, err));
    same("linear F32", &y, &dy, TOL);
    /* a BF16 weight: both backends read it as stored */
    nnt_tensor wb = host(NNT_BF16, 2, 45, 70, 0, 0, 0), dwb;
    for (int64_t i = 0; i < 45 * 70; i++) ((uint16_t *)wb.data)[i] = to_bf16(((float *)w.data)[i]);
    OK_CPU(cops->linear(cctx, &x, &wb, &y, err));
    OK_GPU(gops->prepare_weight(gctx, &wb, &dwb, err));
    CU_ASSERT_EQUAL(dwb.dtype, NNT_BF16); /* never widened */
    OK_GPU(gops->linear(gctx, &dx, &dwb, &dy, err));
    same("linear BF16 weight", &y, &dy, TOL);
    /* and a BF16 weight handed to linear without prepare_weight (a plain device copy) */
    nnt_tensor draw = dev(&wb);
    OK_GPU(gops->linear(gctx, &dx, &draw, &dy, err));
    same("linear BF16 weight, unprepared", &y, &dy, TOL);
    gops->release_weight(gctx, &dw);
    gops->release_weight(gctx, &dwb);
    dev_free(&draw);
    nnt_tensor *d[] = {&dx, &dy};
    dfree(2, d);
    nnt_tensor *h[] = {&x, &w, &y, &wb};
    hfree(4, h);
}

/* ---------------------------------------------------------------------------------------- */
/* Weights in their stored encodings.                                                        */

/* A weight [R, C] with its own host storage: codes and, for FP8 / FP4, a scale grid of blocks
 * br x bc in scale dtype sdt. */
typedef struct enc_weight {
    const char *name;
    nnt_tensor t;
    void *codes, *grid;
} enc_weight;

static unsigned next_bits(void)
{
    rng = rng * 1664525u + 1013904223u;
    return rng >> 8;
}

static enc_weight enc_make(const char *name, nnt_dtype dt, nnt_dtype sdt, int64_t R, int64_t C, int br, int bc)
{
    enc_weight w = {name, {0}, NULL, NULL};
    w.t = (nnt_tensor){.dtype = dt, .ndim = 2, .shape = {R, C}};
    size_t bytes = nnt_dtype_span(dt, R * C);
    w.codes = calloc(bytes ? bytes : 1, 1);
    CU_ASSERT_FATAL(w.codes != NULL);
    uint8_t *b = w.codes;
    for (int64_t i = 0; i < R * C; i++) switch (dt) {
        case NNT_F32: ((float *)b)[i] = 0.2f * urand(); break;
        case NNT_BF16: ((uint16_t *)b)[i] = nnt_f32_to_bf16(0.2f * urand()); break;
        case NNT_F16: ((uint16_t *)b)[i] = nnt_f32_to_f16(0.2f * urand()); break;
        case NNT_F8_E4M3: {
            uint8_t v = (uint8_t)next_bits();
            b[i] = (v & 0x7f) == 0x7f ? 0x7e : v; /* every finite code, subnormals included */
            break;
        }
        default:
            if (i % 2 == 0) b[i / 2] = (uint8_t)next_bits();
            break;
        }
    w.t.data = w.codes;
    if (dt == NNT_F8_E4M3 || dt == NNT_F4_E2M1) {
        int64_t n = ((R + br - 1) / br) * ((C + bc - 1) / bc);
        w.grid = malloc((size_t)n * 4);
        CU_ASSERT_FATAL(w.grid != NULL);
        for (int64_t i = 0; i < n; i++) {
            float sv = 0.01f + 0.02f * (urand() + 1.0f);
            if (sdt == NNT_F32) ((float *)w.grid)[i] = sv;
            if (sdt == NNT_BF16) ((uint16_t *)w.grid)[i] = nnt_f32_to_bf16(sv);
            if (sdt == NNT_F16) ((uint16_t *)w.grid)[i] = nnt_f32_to_f16(sv);
            if (sdt == NNT_F8_E8M0) ((uint8_t *)w.grid)[i] = (uint8_t)(120 + next_bits() % 8); /* 2^-7 .. 1 */
        }
        w.t.scale = w.grid;
        w.t.scale_dtype = sdt;
        w.t.block_rows = br;
        w.t.block_cols = bc;
    }
    return w;
}

static void enc_free(enc_weight *w)
{
    free(w->codes);
    free(w->grid);
}

/* Bytes prepare_weight uploads for a 2-D weight: codes plus the scale grid. */
static size_t enc_bytes(const nnt_tensor *t)
{
    size_t b = nnt_dtype_span(t->dtype, nnt_tensor_numel(t));
    if (t->scale) {
        int64_t sr = (t->shape[0] + t->block_row0 + t->block_rows - 1) / t->block_rows;
        int64_t sc = (t->shape[1] + t->block_cols - 1) / t->block_cols;
        b += nnt_dtype_span(t->scale_dtype, sr * sc);
    }
    return b;
}

/* Bfloat16 products: both backends round x and every weight value that is not a bfloat16 number
 * already to bfloat16, accumulate in float32 and round y, so the two multiply the same numbers.
 * The unrounded sums differ only by float32 summation order (about 1e-6 of the row's magnitude),
 * so an output differs only where the two sums fall on either side of a bfloat16 rounding
 * boundary, and then by one bfloat16 step: at most 2^-7 of the value (8 significant bits). Each
 * entry must be within that step (plus TOL of the largest magnitude), every cuda output must be a
 * bfloat16, and such boundary cases must stay rare: at most 5% of the entries plus one. A
 * systematic difference is far above that: whether or not the decoded F16 / FP8-with-F32-scales
 * weights are rounded to bfloat16 changed 35-45% of these 40-row outputs, a tenth by more than
 * one step, when the previous definition (weights unrounded) was measured against the rounded
 * products in a host emulation - so a cuda path that skipped the weight rounding fails here. */
static void same_bf16_on(void *gx, const char *what, const nnt_tensor *cpu, const nnt_tensor *gpu)
{
    nnt_tensor g = back_on(gx, gpu);
    int64_t n = nnt_tensor_numel(cpu), differ = 0, bad = 0, unrounded = 0;
    const float *a = cpu->data, *b = g.data;
    double scale = 0;
    for (int64_t i = 0; i < n; i++) scale = fmax(scale, fabs(a[i]));
    for (int64_t i = 0; i < n; i++) {
        if (a[i] != b[i]) differ++;
        if (!(fabs((double)a[i] - b[i]) <= fabs(a[i]) / 128.0 + TOL * scale)) bad++;
        if (nnt_bf16_to_f32(nnt_f32_to_bf16(b[i])) != b[i]) unrounded++;
    }
    int ok = bad == 0 && unrounded == 0 && differ <= n / 20 + 1;
    if (!ok)
        fprintf(stderr,
                "\n  %s: %lld of %lld entries differ, %lld beyond one bfloat16 step, %lld cuda outputs not bfloat16\n",
                what, (long long)differ, (long long)n, (long long)bad, (long long)unrounded);
    CU_ASSERT(ok);
    free(g.data);
}

/* linear at every row count in both numerics, on the cpu with host weight hw and on the backend
 * under test (context gx) with its prepared weight dw of the same description */
static void linear_cases(void *gx, const char *label, const nnt_tensor *hw, const nnt_tensor *dw)
{
    static const int64_t rows[] = {1, 3, 8, 40};
    int64_t N = hw->shape[0], K = hw->shape[1];
    for (size_t r = 0; r < sizeof rows / sizeof *rows; r++) {
        int64_t M = rows[r];
        nnt_tensor x = hrand(2, M, K, 0, 0, 0, 1), y = host(NNT_F32, 2, M, N, 0, 0, 0);
        nnt_tensor dx = dev_on(gx, &x), dy = dev_on(gx, &y);
        /* bf: 0 float32; 1 the weight asks for bfloat16 products; 2 y holds bfloat16 values */
        for (int bf = 0; bf < 3; bf++) {
            nnt_tensor h = *hw, d = *dw;
            h.flags = d.flags = bf == 1 ? NNT_TENSOR_BF16_PRODUCTS : 0u;
            y.flags = dy.flags = bf == 2 ? NNT_TENSOR_BF16_VALUES : 0u;
            OK_CPU(cops->linear(cctx, &x, &h, &y, err));
            OK_GPU(gops->linear(gx, &dx, &d, &dy, err));
            char what[200];
            snprintf(what, sizeof what, "linear %s, M = %lld%s", label, (long long)M,
                     bf == 1 ? ", bfloat16 products" : bf == 2 ? ", bfloat16 output" : "");
            if (bf)
                same_bf16_on(gx, what, &y, &dy);
            else
                same_on(gx, what, &y, &dy, TOL);
        }
        dev_free_on(gx, &dx);
        dev_free_on(gx, &dy);
        nnt_tensor_free(&x);
        nnt_tensor_free(&y);
    }
}

/* embedding on a table in any encoding: the same decode on both backends, so equal */
static void embedding_case(void *gx, const char *label, const nnt_tensor *ht, const nnt_tensor *dt)
{
    int64_t V = ht->shape[0], H = ht->shape[1];
    nnt_tensor ids = host(NNT_I32, 1, 13, 0, 0, 0, 0), y = host(NNT_F32, 2, 13, H, 0, 0, 0);
    for (int i = 0; i < 13; i++) ((int32_t *)ids.data)[i] = (int32_t)((i * 37 + 5) % V);
    ((int32_t *)ids.data)[12] = (int32_t)(V - 1); /* the last row, in a partial block row */
    nnt_tensor dids = dev_on(gx, &ids), dy = dev_on(gx, &y);
    for (int r16 = 0; r16 < 2; r16++) {
        y.flags = dy.flags = r16 ? NNT_TENSOR_BF16_VALUES : 0u;
        OK_CPU(cops->embedding(cctx, ht, &ids, &y, err));
        OK_GPU(gops->embedding(gx, dt, &dids, &dy, err));
        char what[200];
        snprintf(what, sizeof what, "embedding %s%s", label, r16 ? ", bfloat16 output" : "");
        same_on(gx, what, &y, &dy, 0);
    }
    dev_free_on(gx, &dids);
    dev_free_on(gx, &dy);
    nnt_tensor_free(&ids);
    nnt_tensor_free(&y);
}

/* Every encoding on context gx: prepare (checking the bytes held), linear and embedding on the
 * whole weight and, for the FP8 ones, on a view of rows 16 .. 129 (block_row0 = 16 in 128-row
 * blocks; its last rows in the second block row), then release. Widths of 200 take the cuda
 * backend's element-by-element few-row path (rows not 16-byte multiples), widths of 256 its
 * 16-byte path. */
static void encodings_on(void *gx, const char *ctx_label, int is_cuda)
{
    enc_weight ws[] = {
        enc_make("F32 130x200", NNT_F32, NNT_DTYPE_INVALID, 130, 200, 0, 0),
        enc_make("BF16 130x200", NNT_BF16, NNT_DTYPE_INVALID, 130, 200, 0, 0),
        enc_make("F16 130x200", NNT_F16, NNT_DTYPE_INVALID, 130, 200, 0, 0),
        enc_make("FP8 F32 scales 130x200 (128x128 blocks, partial)", NNT_F8_E4M3, NNT_F32, 130, 200, 128, 128),
        enc_make("FP8 BF16 scales 130x200", NNT_F8_E4M3, NNT_BF16, 130, 200, 128, 128),
        enc_make("FP8 E8M0 scales 130x200", NNT_F8_E4M3, NNT_F8_E8M0, 130, 200, 128, 128),
        enc_make("FP8 F32 scales 130x256", NNT_F8_E4M3, NNT_F32, 130, 256, 128, 128),
        enc_make("FP8 F16 scales 130x256", NNT_F8_E4M3, NNT_F16, 130, 256, 128, 128),
        enc_make("FP8 E8M0 scales 130x256", NNT_F8_E4M3, NNT_F8_E8M0, 130, 256, 128, 128),
        enc_make("FP4 E8M0 groups of 32, 130x256", NNT_F4_E2M1, NNT_F8_E8M0, 130, 256, 1, 32),
        enc_make("FP4 E8M0 groups of 32, 130x200 (partial group)", NNT_F4_E2M1, NNT_F8_E8M0, 130, 200, 1, 32),
        enc_make("FP4 F32 groups of 32, 130x256", NNT_F4_E2M1, NNT_F32, 130, 256, 1, 32),
    };
    const int n = (int)(sizeof ws / sizeof *ws);
    for (int i = 0; i < n; i++) {
        char label[240];
        snprintf(label, sizeof label, "%s%s", ws[i].name, ctx_label);
        size_t before = gops->weight_bytes(gx);
        nnt_tensor dw;
        OK_GPU(gops->prepare_weight(gx, &ws[i].t, &dw, err));
        size_t held = gops->weight_bytes(gx) - before, want = is_cuda ? enc_bytes(&ws[i].t) : 0;
        if (held != want)
            fprintf(stderr, "\n  %s: weight_bytes grew by %zu, expected %zu\n", label, held, want);
        CU_ASSERT_EQUAL(held, want);
        CU_ASSERT_EQUAL(dw.dtype, ws[i].t.dtype);
        CU_ASSERT_EQUAL(dw.block_rows, ws[i].t.block_rows);
        CU_ASSERT_EQUAL(dw.block_cols, ws[i].t.block_cols);
        CU_ASSERT_EQUAL(dw.scale_dtype, ws[i].t.scale_dtype);
        CU_ASSERT((dw.scale != NULL) == (ws[i].t.scale != NULL));
        if (is_cuda) CU_ASSERT_EQUAL(dw.device, 1);
        linear_cases(gx, label, &ws[i].t, &dw);
        embedding_case(gx, label, &ws[i].t, &dw);
        if (ws[i].t.dtype == NNT_F8_E4M3) {
            nnt_tensor hv, dv;
            CU_ASSERT_FATAL(nnt_tensor_rows(&ws[i].t, 0, 16, 114, &hv) && nnt_tensor_rows(&dw, 0, 16, 114, &dv));
            CU_ASSERT_EQUAL(dv.block_row0, 16);
            char vl[300];
            snprintf(vl, sizeof vl, "%s, rows 16..129", label);
            linear_cases(gx, vl, &hv, &dv);
            embedding_case(gx, vl, &hv, &dv);
            size_t with = gops->weight_bytes(gx);
            gops->release_weight(gx, &dv); /* a view: nothing to free */
            CU_ASSERT_EQUAL(gops->weight_bytes(gx), with);
        }
        gops->release_weight(gx, &dw);
        CU_ASSERT_EQUAL(gops->weight_bytes(gx), before);
        enc_free(&ws[i]);
    }
}

static void test_encodings(void)
{
    int is_cuda = strcmp(NNT_TEST_GPU_BACKEND, "cuda") == 0;
    encodings_on(gctx, "", is_cuda);
    if (is_cuda) {
        /* tiny decode tiles: products of more than a few rows go through many tiles, the last
         * one partial (5 float32 or 10 bfloat16 rows of 200 columns, 4 or 8 of 256); sync = 1
         * so that a fault there is reported by the op that caused it */
        const char *keys[2] = {"tile_bytes", "sync"}, *vals[2] = {"4096", "1"};
        nnt_backend_options opt = {.struct_size = sizeof(nnt_backend_options),
                                   .keys = keys,
                                   .values = vals,
                                   .count = 2,
                                   .ini_path = "test_cuda"};
        void *tiny = NULL;
        OK_GPU(gdesc->create(&opt, &tiny, err));
        encodings_on(tiny, ", 4 KiB tiles", 1);
        gdesc->destroy(tiny);
    }
    /* an FP8 weight without scales is refused, by prepare_weight and by linear */
    enc_weight w = enc_make("FP8", NNT_F8_E4M3, NNT_F32, 16, 32, 128, 128);
    nnt_tensor bare = w.t, dw;
    bare.scale = NULL;
    nnt_error e = {0};
    CU_ASSERT_EQUAL(gops->prepare_weight(gctx, &bare, &dw, &e), NNT_ERR_UNSUPPORTED);
    if (is_cuda) {
        OK_GPU(gops->prepare_weight(gctx, &w.t, &dw, err));
        nnt_tensor x = hrand(2, 2, 32, 0, 0, 0, 1), y = host(NNT_F32, 2, 2, 16, 0, 0, 0), dx = dev(&x), dy = dev(&y);
        nnt_tensor noscale = dw;
        noscale.scale = NULL;
        CU_ASSERT_EQUAL(gops->linear(gctx, &dx, &noscale, &dy, &e), NNT_ERR_UNSUPPORTED);
        CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "linear"));
        gops->release_weight(gctx, &dw);
        dev_free(&dx);
        dev_free(&dy);
        nnt_tensor_free(&x);
        nnt_tensor_free(&y);
    }
    enc_free(&w);
}

static void test_norms_and_elementwise(void)
{
    nnt_tensor x = hrand(2, 19, 300, 0, 0, 0, 2), w = hrand(1, 300, 0, 0, 0, 0, 1), y = host(NNT_F32, 2, 19, 300, 0, 0, 0);
    nnt_tensor g = hrand(2, 19, 300, 0, 0, 0, 3), b = hrand(2, 19, 300, 0, 0, 0, 1);
    nnt_tensor dx = dev(&x), dw = dev(&w), dy = dev(&y), dg = dev(&g), db = dev(&b);
    OK_CPU(cops->rms_norm(cctx, &x, &w, 1e-6f, &y, err));
    OK_GPU(gops->rms_norm(gctx, &dx, &dw, 1e-6f, &dy, err));
    same("rms_norm", &y, &dy, TOL);
    /* the gain as stored in BF16 and F16: prepared, never widened */
    for (int k = 0; k < 2; k++) {
        nnt_dtype gdt = k ? NNT_F16 : NNT_BF16;
        nnt_tensor wh = host(gdt, 1, 300, 0, 0, 0, 0), dwh;
        for (int64_t i = 0; i < 300; i++) {
            float v = ((float *)w.data)[i];
            ((uint16_t *)wh.data)[i] = k ? nnt_f32_to_f16(v) : nnt_f32_to_bf16(v);
        }
        OK_GPU(gops->prepare_weight(gctx, &wh, &dwh, err));
        CU_ASSERT_EQUAL(dwh.dtype, gdt);
        OK_CPU(cops->rms_norm(cctx, &x, &wh, 1e-6f, &y, err));
        OK_GPU(gops->rms_norm(gctx, &dx, &dwh, 1e-6f, &dy, err));
        same(k ? "rms_norm, F16 gain" : "rms_norm, BF16 gain", &y, &dy, TOL);
        gops->release_weight(gctx, &dwh);
        nnt_tensor_free(&wh);
    }
    OK_CPU(cops->rms_norm(cctx, &x, NULL, 1e-5f, &y, err));
    OK_GPU(gops->rms_norm(gctx, &dx, NULL, 1e-5f, &dy, err));
    same("rms_norm without gain", &y, &dy, TOL);
    nnt_tensor x2 = x, dx2 = dev(&x); /* in place */
    x2.data = malloc(nbytes(&x));
    memcpy(x2.data, x.data, nbytes(&x));
    OK_CPU(cops->rms_norm(cctx, &x2, &w, 1e-6f, &x2, err));
    OK_GPU(gops->rms_norm(gctx, &dx2, &dw, 1e-6f, &dx2, err));
    same("rms_norm in place", &x2, &dx2, TOL);
    nnt_tensor wn = hrand(1, 30, 0, 0, 0, 0, 1), dwn = dev(&wn);
    nnt_tensor xv = x, gv = g, yv = y, dxv = dx, dgv = dg, dyv = dy; /* gated, rows of 30 */
    xv.shape[0] = gv.shape[0] = yv.shape[0] = dxv.shape[0] = dgv.shape[0] = dyv.shape[0] = 190;
    xv.shape[1] = gv.shape[1] = yv.shape[1] = dxv.shape[1] = dgv.shape[1] = dyv.shape[1] = 30;
    OK_CPU(cops->rms_norm_gated(cctx, &xv, &wn, &gv, 1e-5f, &yv, err));
    OK_GPU(gops->rms_norm_gated(gctx, &dxv, &dwn, &dgv, 1e-5f, &dyv, err));
    same("rms_norm_gated", &y, &dy, TOL);
    OK_CPU(cops->add(cctx, &x, &b, &y, err));
    OK_GPU(gops->add(gctx, &dx, &db, &dy, err));
    same("add", &y, &dy, TOL);
    OK_CPU(cops->scale(cctx, &x, 0.37f, &y, err));
    OK_GPU(gops->scale(gctx, &dx, 0.37f, &dy, err));
    same("scale", &y, &dy, TOL);
    OK_CPU(cops->sigmoid(cctx, &g, &y, err));
    OK_GPU(gops->sigmoid(gctx, &dg, &dy, err));
    same("sigmoid", &y, &dy, TOL);
    OK_CPU(cops->fill(cctx, &y, -2.5f, err));
    OK_GPU(gops->fill(gctx, &dy, -2.5f, err));
    same("fill", &y, &dy, 0);
    OK_CPU(cops->copy(cctx, &g, &y, err));
    OK_GPU(gops->copy(gctx, &dg, &dy, err));
    same("copy", &y, &dy, 0);
    /* SwiGLU: clamped, unclamped, and the gate-NULL form reading an edited activation */
    nnt_tensor act = host(NNT_F32, 2, 19, 300, 0, 0, 0), dact = dev(&act);
    for (int lim = 0; lim < 2; lim++) {
        float L = lim ? 1.5f : 0.0f;
        OK_CPU(cops->swiglu(cctx, &g, &b, L, &act, &y, err));
        OK_GPU(gops->swiglu(gctx, &dg, &db, L, &dact, &dy, err));
        same(lim ? "swiglu clamped: out" : "swiglu: out", &y, &dy, TOL);
        same(lim ? "swiglu clamped: act" : "swiglu: act", &act, &dact, TOL);
    }
    OK_CPU(cops->swiglu(cctx, &g, &b, 0.0f, NULL, &y, err));
    OK_GPU(gops->swiglu(gctx, &dg, &db, 0.0f, NULL, &dy, err));
    same("swiglu without act", &y, &dy, TOL);
    OK_CPU(cops->swiglu(cctx, NULL, &b, 2.0f, &x, &y, err));
    OK_GPU(gops->swiglu(gctx, NULL, &db, 2.0f, &dx, &dy, err));
    same("swiglu from an edited act", &y, &dy, TOL);
    free(x2.data);
    nnt_tensor *d[] = {&dx, &dw, &dy, &dg, &db, &dx2, &dwn, &dact};
    dfree(8, d);
    nnt_tensor *h[] = {&x, &w, &y, &g, &b, &wn, &act};
    hfree(7, h);
}

static void test_embedding_swap_sum(void)
{
    nnt_tensor table = hrand(2, 50, 24, 0, 0, 0, 1), ids = host(NNT_I32, 1, 13, 0, 0, 0, 0), y = host(NNT_F32, 2, 13, 24, 0, 0, 0);
    for (int i = 0; i < 13; i++) ((int32_t *)ids.data)[i] = (i * 7 + 3) % 50;
    nnt_tensor dt, dids = dev(&ids), dy = dev(&y);
    OK_GPU(gops->prepare_weight(gctx, &table, &dt, err));
    OK_CPU(cops->embedding(cctx, &table, &ids, &y, err));
    OK_GPU(gops->embedding(gctx, &dt, &dids, &dy, err));
    same("embedding", &y, &dy, 0);
    ((int32_t *)ids.data)[5] = 50; /* out of range: an error, not a fault */
    nnt_tensor dbad = dev(&ids);
    nnt_error e = {0};
    CU_ASSERT_EQUAL(gops->embedding(gctx, &dt, &dbad, &dy, &e), NNT_ERR_INVALID_ARGUMENT);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "id 50 at 5"));
    nnt_tensor x = hrand(4, 2, 3, 5, 7, 0, 1), xs = host(NNT_F32, 4, 2, 5, 3, 7, 0), dx = dev(&x), dxs = dev(&xs);
    OK_CPU(cops->swap12(cctx, &x, &xs, err));
    OK_GPU(gops->swap12(gctx, &dx, &dxs, err));
    same("swap12", &xs, &dxs, 0);
    nnt_tensor s = hrand(3, 11, 4, 33, 0, 0, 1), sy = host(NNT_F32, 2, 11, 33, 0, 0, 0), ds = dev(&s), dsy = dev(&sy);
    OK_CPU(cops->sum_axis1(cctx, &s, &sy, err));
    OK_GPU(gops->sum_axis1(gctx, &ds, &dsy, err));
    same("sum_axis1", &sy, &dsy, TOL);
    gops->release_weight(gctx, &dt);
    nnt_tensor *d[] = {&dids, &dy, &dbad, &dx, &dxs, &ds, &dsy};
    dfree(7, d);
    nnt_tensor *h[] = {&table, &ids, &y, &x, &xs, &s, &sy};
    hfree(7, h);
}

static void test_rope(void)
{
    const int64_t B = 2, H = 3, T = 9, D = 40;
    int32_t pos[18];
    float inv[12];
    for (int i = 0; i < 18; i++) pos[i] = i % 9 == 0 ? 0 : (i * 5) % 23 - 4; /* includes negatives */
    for (int i = 0; i < 12; i++) inv[i] = 1.0f / powf(10000.0f, (float)(2 * i) / 24.0f);
    for (int style = 0; style < 2; style++) {
        nnt_tensor x = hrand(4, B, H, T, D, 0, 1), dx = dev(&x);
        OK_CPU(cops->rope(cctx, &x, pos, inv, 8, 24, (nnt_rope_style)style, 1.2f, err));
        OK_GPU(gops->rope(gctx, &dx, pos, inv, 8, 24, (nnt_rope_style)style, 1.2f, err));
        same(style ? "rope interleaved" : "rope neox", &x, &dx, TOL);
        dev_free(&dx);
        nnt_tensor_free(&x);
    }
}

/* Scores with GQA and every mask feature, then softmax with and without sinks, then the mix. */
static void test_attention(void)
{
    const int64_t B = 2, Hq = 4, Hkv = 2, T = 11, S = 14, D = 16, Dv = 12;
    nnt_tensor q = hrand(4, B, Hq, T, D, 0, 1), k = hrand(4, B, Hkv, S, D, 0, 1), v = hrand(4, B, Hkv, S, Dv, 0, 1);
    nnt_tensor s = host(NNT_F32, 4, B, Hq, T, S, 0), p = host(NNT_F32, 4, B, Hq, T, S, 0), o = host(NNT_F32, 4, B, T, Hq, Dv, 0);
    nnt_tensor dq = dev(&q), dk = dev(&k), dv = dev(&v), ds = dev(&s), dp = dev(&p), dO = dev(&o);
    int32_t qpos[22], kpos[28];
    uint8_t kval[28], qval[22], nowin[14], allow[2 * 11 * 14];
    for (int b = 0; b < B; b++) {
        for (int t = 0; t < T; t++) {
            int pad = b == 1 && t < 3; /* row 1 left-padded by 3 */
            qval[b * T + t] = !pad;
            qpos[b * T + t] = pad ? 0 : (int32_t)(t - (b == 1 ? 3 : 0));
            kval[b * S + t] = !pad;
            kpos[b * S + t] = qpos[b * T + t];
        }
        for (int j = (int)T; j < S; j++) { /* three compressed entries after the tokens */
            kval[b * S + j] = 1;
            kpos[b * S + j] = (j - (int)T + 1) * 3 - 1;
        }
    }
    for (int j = 0; j < S; j++) nowin[j] = j >= T;
    for (int i = 0; i < 2 * 11 * 14; i++) allow[i] = (i * 7) % 5 != 0;
    nnt_attn_mask full = {.struct_size = sizeof(nnt_attn_mask), .q_pos = qpos, .k_pos = kpos, .key_valid = kval, .query_valid = qval, .key_no_window = nowin, .allow = allow, .causal = 1, .window = 4};
    nnt_attn_mask plain = {.struct_size = sizeof(nnt_attn_mask), .q_pos = qpos, .k_pos = kpos, .key_valid = kval, .query_valid = qval, .key_no_window = NULL, .allow = NULL, .causal = 1, .window = 0};
    const nnt_attn_mask *masks[3] = {&full, &plain, NULL};
    const char *names[3] = {"full mask", "causal and padding", "no mask"};
    float sinks[4] = {0.5f, -1.0f, 2.0f, 0.0f};
    for (int mi = 0; mi < 3; mi++) {
        char what[96];
        OK_CPU(cops->attn_scores(cctx, &q, &k, 0.25f, masks[mi], &s, err));
        OK_GPU(gops->attn_scores(gctx, &dq, &dk, 0.25f, masks[mi], &ds, err));
        snprintf(what, sizeof what, "attn_scores, %s", names[mi]);
        same(what, &s, &ds, TOL);
        for (int withsink = 0; withsink < 2; withsink++) {
            OK_CPU(cops->softmax(cctx, &s, withsink ? sinks : NULL, &p, err));
            OK_GPU(gops->softmax(gctx, &ds, withsink ? sinks : NULL, &dp, err));
            snprintf(what, sizeof what, "softmax%s, %s", withsink ? " with sinks" : "", names[mi]);
            same(what, &p, &dp, TOL);
            OK_CPU(cops->attn_mix(cctx, &p, &v, &o, err));
            OK_GPU(gops->attn_mix(gctx, &dp, &dv, &dO, err));
            snprintf(what, sizeof what, "attn_mix%s, %s", withsink ? " with sinks" : "", names[mi]);
            same(what, &o, &dO, TOL);
        }
    }
    /* softmax in place on the scores */
    OK_CPU(cops->attn_scores(cctx, &q, &k, 0.25f, &full, &s, err));
    OK_GPU(gops->attn_scores(gctx, &dq, &dk, 0.25f, &full, &ds, err));
    OK_CPU(cops->softmax(cctx, &s, sinks, &s, err));
    OK_GPU(gops->softmax(gctx, &ds, sinks, &ds, err));
    same("softmax in place", &s, &ds, TOL);
    nnt_tensor *d[] = {&dq, &dk, &dv, &ds, &dp, &dO};
    dfree(6, d);
    nnt_tensor *h[] = {&q, &k, &v, &s, &p, &o};
    hfree(6, h);
}

/* attn_fused (one pass, online softmax over groups of keys) on the device against the cpu
 * backend's attn_scores, softmax and attn_mix on the same arguments: grouped heads, a cache of
 * 37 keys before 70 queries (groups of 32 keys that straddle the causal edge), padding, a window
 * with exempt keys and a selection, sinks, and keys that are their own values; a
 * bfloat16-flagged output is declined with o untouched. */
static void test_attention_fused(void)
{
    const int64_t B = 2, Hq = 6, Hkv = 2, T = 70, P = 37, S = P + T, D = 40, Dv = 24;
    nnt_tensor q = hrand(4, B, Hq, T, D, 0, 1), k = hrand(4, B, Hkv, S, D, 0, 1), v = hrand(4, B, Hkv, S, Dv, 0, 1);
    nnt_tensor s = host(NNT_F32, 4, B, Hq, T, S, 0), o = host(NNT_F32, 4, B, T, Hq, Dv, 0);
    nnt_tensor o2 = host(NNT_F32, 4, B, T, Hq, D, 0);
    nnt_tensor dq = dev(&q), dk = dev(&k), dv = dev(&v), dO = dev(&o), dO2 = dev(&o2);
    int32_t *qpos = malloc(sizeof(int32_t) * (size_t)(B * T)), *kpos = malloc(sizeof(int32_t) * (size_t)(B * S));
    uint8_t *kval = malloc((size_t)(B * S)), *qval = malloc((size_t)(B * T)), *nowin = malloc((size_t)S);
    uint8_t *allow = malloc((size_t)(B * T * S));
    CU_ASSERT_FATAL(qpos && kpos && kval && qval && nowin && allow);
    for (int64_t b = 0; b < B; b++) {
        int64_t pad = b == 1 ? 9 : 0; /* row 1: its first 9 keys are padding */
        for (int64_t j = 0; j < S; j++) {
            kval[b * S + j] = j >= pad;
            kpos[b * S + j] = (int32_t)(j >= pad ? j - pad : 0);
        }
        for (int64_t t = 0; t < T; t++) {
            qval[b * T + t] = !(b == 0 && t == 5); /* one padding query */
            qpos[b * T + t] = kpos[b * S + P + t];
        }
    }
    for (int64_t j = 0; j < S; j++) nowin[j] = j % 7 == 0;
    for (int64_t i = 0; i < B * T * S; i++) allow[i] = (i * 11) % 6 != 0;
    nnt_attn_mask full = {.struct_size = sizeof(nnt_attn_mask), .q_pos = qpos, .k_pos = kpos, .key_valid = kval, .query_valid = qval, .key_no_window = nowin, .allow = allow, .causal = 1, .window = 20};
    nnt_attn_mask plain = {.struct_size = sizeof(nnt_attn_mask), .q_pos = qpos, .k_pos = kpos, .key_valid = kval, .query_valid = qval, .causal = 1};
    const nnt_attn_mask *masks[3] = {&full, &plain, NULL};
    const char *names[3] = {"window, exempt keys, selection", "causal and padding", "no mask"};
    float sinks[6] = {0.5f, -1.0f, 2.0f, 0.0f, 1.0f, -0.5f};
    for (int mi = 0; mi < 3; mi++)
        for (int withsink = 0; withsink < 2; withsink++)
            for (int shared = 0; shared < 2; shared++) {
                char what[128];
                const nnt_tensor *vv = shared ? &k : &v, *dvv = shared ? &dk : &dv;
                nnt_tensor *oo = shared ? &o2 : &o, *doo = shared ? &dO2 : &dO;
                const float *sk = withsink ? sinks : NULL;
                OK_CPU(cops->attn_scores(cctx, &q, &k, 0.2f, masks[mi], &s, err));
                OK_CPU(cops->softmax(cctx, &s, sk, &s, err));
                OK_CPU(cops->attn_mix(cctx, &s, vv, oo, err));
                int done = -1;
                OK_GPU(gops->attn_fused(gctx, &dq, &dk, dvv, 0.2f, masks[mi], sk, doo, &done, err));
                CU_ASSERT_EQUAL(done, 1);
                snprintf(what, sizeof what, "attn_fused%s%s, %s", withsink ? " with sinks" : "",
                         shared ? ", keys as values" : "", names[mi]);
                same(what, oo, doo, TOL);
            }
    /* declined: bfloat16-flagged o */
    dO.flags = NNT_TENSOR_BF16_VALUES;
    int done = -1;
    OK_GPU(gops->attn_fused(gctx, &dq, &dk, &dv, 0.2f, &plain, NULL, &dO, &done, err));
    CU_ASSERT_EQUAL(done, 0);
    dO.flags = 0;
    free(qpos), free(kpos), free(kval), free(qval), free(nowin), free(allow);
    nnt_tensor *d[] = {&dq, &dk, &dv, &dO, &dO2};
    dfree(5, d);
    nnt_tensor *h[] = {&q, &k, &v, &s, &o, &o2};
    hfree(6, h);
}

/* expert sets per token equal; weights aligned by expert */
static void same_routing(const char *what, const nnt_tensor *ci, const nnt_tensor *cw, const nnt_tensor *gi_d,
                         const nnt_tensor *gw_d, int64_t M, int K)
{
    nnt_tensor gi = back(gi_d), gw = back(gw_d);
    int mismatch = 0;
    double worst = 0, scale = 0;
    for (int64_t m = 0; m < M; m++)
        for (int a = 0; a < K; a++) {
            int32_t e = ((int32_t *)ci->data)[m * K + a];
            int found = -1;
            for (int b = 0; b < K; b++)
                if (((int32_t *)gi.data)[m * K + b] == e) found = b;
            if (found < 0) {
                mismatch++;
                continue;
            }
            double x = ((float *)cw->data)[m * K + a], y = ((float *)gw.data)[m * K + found];
            scale = fmax(scale, fabs(x));
            worst = fmax(worst, fabs(x - y));
        }
    if (mismatch || worst > TOL * scale)
        fprintf(stderr, "\n  %s: %d slots differ, weights off by %.3g of %.3g\n", what, mismatch, worst, scale);
    CU_ASSERT_EQUAL(mismatch, 0);
    CU_ASSERT(worst <= TOL * scale);
    free(gi.data);
    free(gw.data);
}

static void test_route(void)
{
    const int64_t M = 37, E = 16;
    const int K = 4;
    nnt_tensor lg = hrand(2, M, E, 0, 0, 0, 3), bias = hrand(1, E, 0, 0, 0, 0, 0.5f);
    nnt_tensor idx = host(NNT_I32, 2, M, K, 0, 0, 0), w = host(NNT_F32, 2, M, K, 0, 0, 0);
    nnt_tensor dl = dev(&lg), db = dev(&bias), di = dev(&idx), dw = dev(&w);
    struct {
        const char *name;
        nnt_route_params p;
        int bias;
    } cases[] = {
        {"sigmoid, bias, 4 groups keep 2, renormalised, scaled", {.struct_size = sizeof(nnt_route_params), .score_fn = NNT_SCORE_SIGMOID, .top_k = K, .n_group = 4, .topk_group = 2, .renormalize = 1, .renorm_eps = 1e-20f, .scaling_factor = 2.5f, .indices_given = 0}, 1},
        {"softmax, no bias, no groups", {.struct_size = sizeof(nnt_route_params), .score_fn = NNT_SCORE_SOFTMAX, .top_k = K, .n_group = 1, .topk_group = 1, .renormalize = 0, .renorm_eps = 0.0f, .scaling_factor = 1.0f, .indices_given = 0}, 0},
        {"sqrt softplus, bias, renormalised", {.struct_size = sizeof(nnt_route_params), .score_fn = NNT_SCORE_SQRT_SOFTPLUS, .top_k = K, .n_group = 0, .topk_group = 0, .renormalize = 1, .renorm_eps = 0.0f, .scaling_factor = 1.5f, .indices_given = 0}, 1},
        {"sigmoid, 8 groups of 2 keep 3", {.struct_size = sizeof(nnt_route_params), .score_fn = NNT_SCORE_SIGMOID, .top_k = K, .n_group = 8, .topk_group = 3, .renormalize = 1, .renorm_eps = 1e-20f, .scaling_factor = 1.0f, .indices_given = 0}, 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        OK_CPU(cops->route(cctx, &lg, cases[i].bias ? &bias : NULL, &cases[i].p, &idx, &w, err));
        OK_GPU(gops->route(gctx, &dl, cases[i].bias ? &db : NULL, &cases[i].p, &di, &dw, err));
        same_routing(cases[i].name, &idx, &w, &di, &dw, M, K);
    }
    /* given indices (hash routing): the weights only, and an out-of-range index is an error */
    nnt_route_params given = {.struct_size = sizeof(nnt_route_params), .score_fn = NNT_SCORE_SQRT_SOFTPLUS, .top_k = K, .n_group = 1, .topk_group = 1, .renormalize = 1, .renorm_eps = 1e-20f, .scaling_factor = 1.5f, .indices_given = 1};
    for (int64_t i = 0; i < M * K; i++) ((int32_t *)idx.data)[i] = (int32_t)((i * 5 + i / K) % E);
    nnt_tensor dgi = dev(&idx);
    OK_CPU(cops->route(cctx, &lg, NULL, &given, &idx, &w, err));
    OK_GPU(gops->route(gctx, &dl, NULL, &given, &dgi, &dw, err));
    same("route, given indices: weights", &w, &dw, TOL);
    ((int32_t *)idx.data)[7] = (int32_t)E;
    nnt_tensor dbad = dev(&idx);
    nnt_error e = {0};
    CU_ASSERT_EQUAL(gops->route(gctx, &dl, NULL, &given, &dbad, &dw, &e), NNT_ERR_INVALID_ARGUMENT);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "outside"));
    nnt_tensor *d[] = {&dl, &db, &di, &dw, &dgi, &dbad};
    dfree(6, d);
    nnt_tensor *h[] = {&lg, &bias, &idx, &w};
    hfree(4, h);
}

static void test_rows(void)
{
    const int64_t M = 20, H = 33;
    nnt_tensor src = hrand(2, M, H, 0, 0, 0, 1), dsrc = dev(&src);
    int32_t rows[9] = {3, 0, 19, 7, 7, 12, 3, 5, 3}; /* repeats */
    float scale[9] = {0.5f, 1.0f, -2.0f, 0.25f, 3.0f, 1.5f, -1.0f, 0.75f, 2.0f};
    nnt_tensor g = host(NNT_F32, 2, 9, H, 0, 0, 0), dg = dev(&g);
    OK_CPU(cops->gather_rows(cctx, &src, rows, 9, &g, err));
    OK_GPU(gops->gather_rows(gctx, &dsrc, rows, 9, &dg, err));
    same("gather_rows", &g, &dg, 0);
    for (int dup = 0; dup < 2; dup++) {
        int32_t distinct[6] = {3, 0, 19, 7, 12, 5};
        const int32_t *r = dup ? rows : distinct;
        int n = dup ? 9 : 6;
        for (int withscale = 0; withscale < 2; withscale++) {
            nnt_tensor acc = hrand(2, M, H, 0, 0, 0, 1), dacc = dev(&acc), set = hrand(2, M, H, 0, 0, 0, 1), dset = dev(&set);
            OK_CPU(cops->scatter_add_rows(cctx, &g, r, withscale ? scale : NULL, n, &acc, err));
            OK_GPU(gops->scatter_add_rows(gctx, &dg, r, withscale ? scale : NULL, n, &dacc, err));
            OK_CPU(cops->scatter_rows(cctx, &g, r, withscale ? scale : NULL, n, &set, err));
            OK_GPU(gops->scatter_rows(gctx, &dg, r, withscale ? scale : NULL, n, &dset, err));
            char what[96];
            snprintf(what, sizeof what, "scatter_add_rows%s%s", dup ? ", repeated rows" : "", withscale ? ", scaled" : "");
            same(what, &acc, &dacc, TOL);
            snprintf(what, sizeof what, "scatter_rows%s%s", dup ? ", repeated rows" : "", withscale ? ", scaled" : "");
            same(what, &set, &dset, TOL);
            dev_free(&dacc);
            dev_free(&dset);
            nnt_tensor_free(&acc);
            nnt_tensor_free(&set);
        }
    }
    int32_t bad = 20;
    nnt_error e = {0};
    CU_ASSERT_EQUAL(gops->gather_rows(gctx, &dsrc, &bad, 1, &dg, &e), NNT_ERR_INVALID_ARGUMENT);
    /* scale_rows by device weights [4, 5] read flat, indices repeating; then in place (one
     * float32 product per entry on both: equal) */
    {
        nnt_tensor w = hrand(2, 4, 5, 0, 0, 0, 2), dwt = dev(&w), y = host(NNT_F32, 2, 9, H, 0, 0, 0), dy = dev(&y);
        const int32_t at[9] = {7, 0, 19, 7, 12, 3, 7, 18, 0}, over[9] = {7, 0, 19, 20, 12, 3, 7, 18, 0};
        OK_CPU(cops->scale_rows(cctx, &g, &w, at, 9, &y, err));
        OK_GPU(gops->scale_rows(gctx, &dg, &dwt, at, 9, &dy, err));
        same("scale_rows", &y, &dy, 0);
        OK_CPU(cops->scale_rows(cctx, &y, &w, at, 9, &y, err));
        OK_GPU(gops->scale_rows(gctx, &dy, &dwt, at, 9, &dy, err));
        same("scale_rows in place", &y, &dy, 0);
        CU_ASSERT_EQUAL(gops->scale_rows(gctx, &dg, &dwt, over, 9, &dy, &e), NNT_ERR_INVALID_ARGUMENT);
        CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "idx[3] = 20"));
        dev_free(&dwt);
        dev_free(&dy);
        nnt_tensor_free(&w);
        nnt_tensor_free(&y);
    }
    /* zero_rows and copy_cols */
    uint8_t valid[20];
    for (int i = 0; i < 20; i++) valid[i] = i % 3 != 1;
    nnt_tensor z = src, dz = dev(&src);
    z.data = malloc(nbytes(&src));
    memcpy(z.data, src.data, nbytes(&src));
    OK_CPU(cops->zero_rows(cctx, &z, valid, err));
    OK_GPU(gops->zero_rows(gctx, &dz, valid, err));
    same("zero_rows", &z, &dz, 0);
    nnt_tensor dst = hrand(2, M, 50, 0, 0, 0, 1), ddst = dev(&dst);
    OK_CPU(cops->copy_cols(cctx, &src, 5, &dst, 17, 20, err));
    OK_GPU(gops->copy_cols(gctx, &dsrc, 5, &ddst, 17, 20, err));
    same("copy_cols", &dst, &ddst, 0);
    /* inside one tensor, overlapping: a cache shifting left, and right */
    OK_CPU(cops->copy_cols(cctx, &dst, 10, &dst, 3, 30, err));
    OK_GPU(gops->copy_cols(gctx, &ddst, 10, &ddst, 3, 30, err));
    same("copy_cols within one tensor, left", &dst, &ddst, 0);
    OK_CPU(cops->copy_cols(cctx, &dst, 0, &dst, 9, 33, err));
    OK_GPU(gops->copy_cols(gctx, &ddst, 0, &ddst, 9, 33, err));
    same("copy_cols within one tensor, right", &dst, &ddst, 0);
    free(z.data);
    nnt_tensor *d[] = {&dsrc, &dg, &dz, &ddst};
    dfree(4, d);
    nnt_tensor *h[] = {&src, &g, &dst};
    hfree(3, h);
}

static void test_conv_and_gate(void)
{
    const int64_t B = 2, T = 13, C = 40, W = 4;
    nnt_tensor x = hrand(3, B, T, C, 0, 0, 1), w = hrand(2, C, W, 0, 0, 0, 0.5f), y = host(NNT_F32, 3, B, T, C, 0, 0);
    nnt_tensor si = hrand(3, B, W - 1, C, 0, 0, 1), so = host(NNT_F32, 3, B, W - 1, C, 0, 0);
    nnt_tensor dx = dev(&x), dy = dev(&y), dsi = dev(&si), dso = dev(&so), dw;
    OK_GPU(gops->prepare_weight(gctx, &w, &dw, err));
    for (int act = 0; act < 2; act++) {
        OK_CPU(cops->conv1d_causal(cctx, &x, &w, NULL, act, &y, &so, err));
        OK_GPU(gops->conv1d_causal(gctx, &dx, &dw, NULL, act, &dy, &dso, err));
        same(act ? "conv1d SiLU" : "conv1d", &y, &dy, TOL);
        same("conv1d state_out", &so, &dso, 0);
    }
    OK_CPU(cops->conv1d_causal(cctx, &x, &w, &si, 1, &y, &so, err));
    OK_GPU(gops->conv1d_causal(gctx, &dx, &dw, &dsi, 1, &dy, &dso, err));
    same("conv1d with state_in", &y, &dy, TOL);
    same("conv1d state_out after state_in", &so, &dso, 0);
    /* one token, the state updated in place (decode) */
    nnt_tensor x1 = hrand(3, B, 1, C, 0, 0, 1), y1 = host(NNT_F32, 3, B, 1, C, 0, 0), dx1 = dev(&x1), dy1 = dev(&y1);
    OK_CPU(cops->conv1d_causal(cctx, &x1, &w, &si, 1, &y1, &si, err));
    OK_GPU(gops->conv1d_causal(gctx, &dx1, &dw, &dsi, 1, &dy1, &dsi, err));
    same("conv1d one token", &y1, &dy1, TOL);
    same("conv1d state updated in place", &si, &dsi, 0);
    /* KDA gate */
    nnt_tensor a = hrand(2, 7, 48, 0, 0, 0, 10), dt = hrand(1, 48, 0, 0, 0, 0, 1), al = hrand(1, 3, 0, 0, 0, 0, 1);
    nnt_tensor g = host(NNT_F32, 2, 7, 48, 0, 0, 0), da = dev(&a), ddt = dev(&dt), dal = dev(&al), dg = dev(&g);
    ((float *)a.data)[0] = 25.0f; /* the linear branch of softplus */
    dev_free(&da);
    da = dev(&a);
    OK_CPU(cops->kda_gate(cctx, &a, &dt, &al, &g, err));
    OK_GPU(gops->kda_gate(gctx, &da, &ddt, &dal, &dg, err));
    same("kda_gate", &g, &dg, TOL);
    gops->release_weight(gctx, &dw);
    nnt_tensor *d[] = {&dx, &dy, &dsi, &dso, &dx1, &dy1, &da, &ddt, &dal, &dg};
    dfree(10, d);
    nnt_tensor *h[] = {&x, &w, &y, &si, &so, &x1, &y1, &a, &dt, &al, &g};
    hfree(11, h);
}

/* r16: every output flagged NNT_TENSOR_BF16_VALUES - o is then rounded, the states stay float32 */
static void run_delta(int64_t T, int with_state, int with_pads, int l2norm, int r16)
{
    const int64_t B = 2, H = 3, K = 40, V = 70; /* K != V, three column tiles */
    nnt_tensor q = hrand(4, B, T, H, K, 0, 1), k = hrand(4, B, T, H, K, 0, 1), v = hrand(4, B, T, H, V, 0, 1);
    nnt_tensor g = hrand(4, B, T, H, K, 0, 0.3f), beta = hrand(3, B, T, H, 0, 0, 0.5f);
    for (int64_t i = 0; i < B * T * H * K; i++) ((float *)g.data)[i] = -0.3f - ((float *)g.data)[i];
    for (int64_t i = 0; i < B * T * H; i++) ((float *)beta.data)[i] += 0.5f;
    if (!l2norm) /* raw keys: keep |k|^2 beta below 2 or the recurrence grows without bound */
        for (int64_t i = 0; i < B * T * H * K; i++) ((float *)k.data)[i] *= 0.2f;
    nnt_tensor s0 = hrand(4, B, H, K, V, 0, 1), o = host(NNT_F32, 4, B, T, H, V, 0);
    nnt_tensor s1 = host(NNT_F32, 4, B, H, K, V, 0), all = host(NNT_F32, 5, B, T, H, K, V);
    uint8_t *valid = malloc((size_t)(B * T));
    for (int64_t i = 0; i < B * T; i++) valid[i] = !(with_pads && i >= T && i < T + T / 3);
    nnt_tensor dq = dev(&q), dk = dev(&k), dv = dev(&v), dg = dev(&g), db = dev(&beta), ds0 = dev(&s0), dO = dev(&o);
    nnt_tensor ds1 = dev(&s1), dall = dev(&all);
    if (r16) {
        flag2(&o, &dO, R16);
        flag2(&s1, &ds1, R16);
        flag2(&all, &dall, R16);
        s0.flags = ds0.flags = R16; /* carried in place below: an output then */
    }
    float scale = l2norm ? 1.0f / sqrtf((float)K) : 0.05f;
    OK_CPU(cops->delta_rule(cctx, &q, &k, &v, &g, &beta, with_pads ? valid : NULL, with_state ? &s0 : NULL, l2norm, scale,
                            &o, &s1, &all, err));
    OK_GPU(gops->delta_rule(gctx, &dq, &dk, &dv, &dg, &db, with_pads ? valid : NULL, with_state ? &ds0 : NULL, l2norm,
                            scale, &dO, &ds1, &dall, err));
    char what[128];
    const char *mode = r16 ? ", bfloat16" : "";
    snprintf(what, sizeof what, "delta_rule T=%lld state=%d pads=%d l2norm=%d%s: o", (long long)T, with_state,
             with_pads, l2norm, mode);
    if (r16)
        same_r16(what, &o, &dO, 2);
    else
        same(what, &o, &dO, TOL);
    snprintf(what, sizeof what, "delta_rule T=%lld state=%d pads=%d l2norm=%d%s: state_out", (long long)T, with_state,
             with_pads, l2norm, mode);
    same(what, &s1, &ds1, TOL);
    snprintf(what, sizeof what, "delta_rule T=%lld state=%d pads=%d l2norm=%d%s: states", (long long)T, with_state,
             with_pads, l2norm, mode);
    same(what, &all, &dall, TOL);
    /* without the per-token states, and the state carried in place */
    if (with_state) {
        OK_CPU(cops->delta_rule(cctx, &q, &k, &v, &g, &beta, NULL, &s0, l2norm, scale, &o, &s0, NULL, err));
        OK_GPU(gops->delta_rule(gctx, &dq, &dk, &dv, &dg, &db, NULL, &ds0, l2norm, scale, &dO, &ds0, NULL, err));
        if (r16)
            same_r16("delta_rule, state in place, bfloat16: o", &o, &dO, 2);
        else
            same("delta_rule, state in place: o", &o, &dO, TOL);
        same(r16 ? "delta_rule, state in place, bfloat16: state" : "delta_rule, state in place: state", &s0, &ds0, TOL);
    }
    free(valid);
    nnt_tensor *d[] = {&dq, &dk, &dv, &dg, &db, &ds0, &dO, &ds1, &dall};
    dfree(9, d);
    nnt_tensor *h[] = {&q, &k, &v, &g, &beta, &s0, &o, &s1, &all};
    hfree(9, h);
}

static void test_delta_rule(void)
{
    const int64_t lengths[] = {1, 2, 33, 65};
    for (size_t i = 0; i < sizeof lengths / sizeof *lengths; i++) {
        run_delta(lengths[i], 0, 0, 1, 0);
        run_delta(lengths[i], 1, 1, 1, 0);
    }
    run_delta(17, 1, 0, 0, 0);
}


static void test_hyper(void)
{
    const int64_t M = 9, n = 4, H = 64, outs = (2 + n) * n;
    nnt_tensor x = hrand(3, M, n, H, 0, 0, 1), fn = hrand(2, outs, n * H, 0, 0, 0, 0.05f), base = hrand(1, outs, 0, 0, 0, 0, 0.5f);
    nnt_tensor sc = host(NNT_F32, 1, 3, 0, 0, 0, 0);
    float scv[3] = {0.8f, 1.1f, 0.6f};
    memcpy(sc.data, scv, sizeof scv);
    nnt_tensor post = host(NNT_F32, 2, M, n, 0, 0, 0), comb = host(NNT_F32, 3, M, n, n, 0, 0), coll = host(NNT_F32, 2, M, H, 0, 0, 0);
    nnt_tensor dx = dev(&x), dpost = dev(&post), dcomb = dev(&comb), dcoll = dev(&coll), dfn, dbase, dsc;
    OK_GPU(gops->prepare_weight(gctx, &fn, &dfn, err));
    OK_GPU(gops->prepare_weight(gctx, &base, &dbase, err));
    OK_GPU(gops->prepare_weight(gctx, &sc, &dsc, err));
    OK_CPU(cops->hyper_connection(cctx, &x, &fn, &base, &sc, 1e-6f, 1e-6f, 20, &post, &comb, &coll, err));
    OK_GPU(gops->hyper_connection(gctx, &dx, &dfn, &dbase, &dsc, 1e-6f, 1e-6f, 20, &dpost, &dcomb, &dcoll, err));
    same("hyper_connection: post", &post, &dpost, TOL);
    same("hyper_connection: comb", &comb, &dcomb, TOL);
    same("hyper_connection: collapsed", &coll, &dcoll, TOL);
    nnt_tensor a = hrand(2, M, H, 0, 0, 0, 1), out = host(NNT_F32, 3, M, n, H, 0, 0), da = dev(&a), dout = dev(&out);
    OK_CPU(cops->hyper_mix(cctx, &x, &a, &post, &comb, &out, err));
    OK_GPU(gops->hyper_mix(gctx, &dx, &da, &dpost, &dcomb, &dout, err));
    same("hyper_mix", &out, &dout, TOL);
    nnt_tensor hfn = hrand(2, n, n * H, 0, 0, 0, 0.05f), hbase = hrand(1, n, 0, 0, 0, 0, 0.5f), y = host(NNT_F32, 2, M, H, 0, 0, 0);
    nnt_tensor dhfn, dhbase, dy = dev(&y);
    OK_GPU(gops->prepare_weight(gctx, &hfn, &dhfn, err));
    OK_GPU(gops->prepare_weight(gctx, &hbase, &dhbase, err));
    OK_CPU(cops->hyper_head(cctx, &x, &hfn, &hbase, &sc, 1e-6f, 1e-6f, &y, err));
    OK_GPU(gops->hyper_head(gctx, &dx, &dhfn, &dhbase, &dsc, 1e-6f, 1e-6f, &dy, err));
    same("hyper_head", &y, &dy, TOL);
    nnt_tensor *w[] = {&dfn, &dbase, &dsc, &dhfn, &dhbase};
    for (int i = 0; i < 5; i++) gops->release_weight(gctx, w[i]);
    nnt_tensor *d[] = {&dx, &dpost, &dcomb, &dcoll, &da, &dout, &dy};
    dfree(7, d);
    nnt_tensor *h[] = {&x, &fn, &base, &sc, &post, &comb, &coll, &a, &out, &hfn, &hbase, &y};
    hfree(12, h);
}

static void test_compress_indexer(void)
{
    const int64_t B = 2, T = 23, D = 8, rate = 4, C = 5;
    int32_t first[2] = {0, 3}, count[2] = {5, 4};
    for (int overlap = 0; overlap < 2; overlap++) {
        int64_t cD = overlap ? 2 * D : D;
        nnt_tensor kv = hrand(3, B, T, cD, 0, 0, 1), gate = hrand(3, B, T, cD, 0, 0, 2), ape = hrand(2, rate, cD, 0, 0, 0, 1);
        nnt_tensor out = host(NNT_F32, 3, B, C, D, 0, 0), dkv = dev(&kv), dgate = dev(&gate), dout = dev(&out), dape;
        OK_GPU(gops->prepare_weight(gctx, &ape, &dape, err));
        OK_CPU(cops->compress(cctx, &kv, &gate, &ape, (int)rate, overlap, first, count, &out, err));
        OK_GPU(gops->compress(gctx, &dkv, &dgate, &dape, (int)rate, overlap, first, count, &dout, err));
        same(overlap ? "compress with overlap" : "compress", &out, &dout, TOL);
        gops->release_weight(gctx, &dape);
        nnt_tensor *d[] = {&dkv, &dgate, &dout};
        dfree(3, d);
        nnt_tensor *h[] = {&kv, &gate, &ape, &out};
        hfree(4, h);
    }
    const int64_t Hh = 4, dI = 16, Ce = 6;
    nnt_tensor q = hrand(4, B, T, Hh, dI, 0, 1), k = hrand(3, B, Ce, dI, 0, 0, 1), w = hrand(3, B, T, Hh, 0, 0, 1);
    nnt_tensor sc = host(NNT_F32, 3, B, T, Ce, 0, 0), dq = dev(&q), dk = dev(&k), dw = dev(&w), dsc = dev(&sc);
    OK_CPU(cops->indexer_scores(cctx, &q, &k, &w, 0.125f, &sc, err));
    OK_GPU(gops->indexer_scores(gctx, &dq, &dk, &dw, 0.125f, &dsc, err));
    same("indexer_scores", &sc, &dsc, TOL);
    nnt_tensor *d[] = {&dq, &dk, &dw, &dsc};
    dfree(4, d);
    nnt_tensor *h[] = {&q, &k, &w, &sc};
    hfree(4, h);
}

/* ---------------------------------------------------------------------------------------- */
/* The ops into outputs flagged NNT_TENSOR_BF16_VALUES (and its styles).                     */

static void test_bf16_elementwise(void)
{
    nnt_tensor x = hrand(2, 19, 300, 0, 0, 0, 2), w = hrand(1, 300, 0, 0, 0, 0, 1), y = host(NNT_F32, 2, 19, 300, 0, 0, 0);
    nnt_tensor g = hrand(2, 19, 300, 0, 0, 0, 3), b = hrand(2, 19, 300, 0, 0, 0, 1);
    round_host(&x);
    round_host(&g);
    round_host(&b);
    nnt_tensor dx = dev(&x), dw = dev(&w), dy = dev(&y), dg = dev(&g), db = dev(&b);
    /* rms_norm: a float32 gain, none, in both styles */
    for (int once = 0; once < 2; once++) {
        char what[96];
        flag2(&y, &dy, once ? R16_ONCE : R16);
        OK_CPU(cops->rms_norm(cctx, &x, &w, 1e-6f, &y, err));
        OK_GPU(gops->rms_norm(gctx, &dx, &dw, 1e-6f, &dy, err));
        snprintf(what, sizeof what, "rms_norm, bfloat16%s", once ? " once" : "");
        same_r16(what, &y, &dy, 2);
        OK_CPU(cops->rms_norm(cctx, &x, NULL, 1e-5f, &y, err));
        OK_GPU(gops->rms_norm(gctx, &dx, NULL, 1e-5f, &dy, err));
        snprintf(what, sizeof what, "rms_norm without gain, bfloat16%s", once ? " once" : "");
        same_r16(what, &y, &dy, 2);
    }
    /* a BF16 gain as a bfloat16 checkpoint stores it, prepared */
    nnt_tensor wb = host(NNT_BF16, 1, 300, 0, 0, 0, 0), dwb;
    for (int64_t i = 0; i < 300; i++) ((uint16_t *)wb.data)[i] = nnt_f32_to_bf16(((float *)w.data)[i]);
    OK_GPU(gops->prepare_weight(gctx, &wb, &dwb, err));
    for (int once = 0; once < 2; once++) {
        flag2(&y, &dy, once ? R16_ONCE : R16);
        OK_CPU(cops->rms_norm(cctx, &x, &wb, 1e-6f, &y, err));
        OK_GPU(gops->rms_norm(gctx, &dx, &dwb, 1e-6f, &dy, err));
        same_r16(once ? "rms_norm, BF16 gain, bfloat16 once" : "rms_norm, BF16 gain, bfloat16", &y, &dy, 2);
    }
    gops->release_weight(gctx, &dwb);
    /* in place */
    nnt_tensor x2 = x, dx2 = dev(&x);
    x2.data = malloc(nbytes(&x));
    memcpy(x2.data, x.data, nbytes(&x));
    flag2(&x2, &dx2, R16);
    OK_CPU(cops->rms_norm(cctx, &x2, &w, 1e-6f, &x2, err));
    OK_GPU(gops->rms_norm(gctx, &dx2, &dw, 1e-6f, &dx2, err));
    same_r16("rms_norm in place, bfloat16", &x2, &dx2, 2);
    /* the gated norm, rows of 30 */
    nnt_tensor wn = hrand(1, 30, 0, 0, 0, 0, 1), dwn = dev(&wn);
    nnt_tensor xv = x, gv = g, yv = y, dxv = dx, dgv = dg, dyv = dy;
    xv.shape[0] = gv.shape[0] = yv.shape[0] = dxv.shape[0] = dgv.shape[0] = dyv.shape[0] = 190;
    xv.shape[1] = gv.shape[1] = yv.shape[1] = dxv.shape[1] = dgv.shape[1] = dyv.shape[1] = 30;
    flag2(&yv, &dyv, R16);
    OK_CPU(cops->rms_norm_gated(cctx, &xv, &wn, &gv, 1e-5f, &yv, err));
    OK_GPU(gops->rms_norm_gated(gctx, &dxv, &dwn, &dgv, 1e-5f, &dyv, err));
    same_r16("rms_norm_gated, bfloat16", &yv, &dyv, 2);
    /* add and scale: one float32 operation, then the rounding - equal */
    flag2(&y, &dy, R16);
    OK_CPU(cops->add(cctx, &x, &b, &y, err));
    OK_GPU(gops->add(gctx, &dx, &db, &dy, err));
    same("add, bfloat16", &y, &dy, 0);
    OK_CPU(cops->scale(cctx, &x, 0.37f, &y, err));
    OK_GPU(gops->scale(gctx, &dx, 0.37f, &dy, err));
    same("scale, bfloat16", &y, &dy, 0);
    OK_CPU(cops->sigmoid(cctx, &g, &y, err));
    OK_GPU(gops->sigmoid(gctx, &dg, &dy, err));
    same_r16("sigmoid, bfloat16", &y, &dy, 2);
    /* SwiGLU: out flagged (act then holds the rounded silu), clamped and not, without act, and
     * the gate-NULL form on an edited activation */
    nnt_tensor act = host(NNT_F32, 2, 19, 300, 0, 0, 0), dact = dev(&act);
    flag2(&act, &dact, R16);
    for (int lim = 0; lim < 2; lim++) {
        float L = lim ? 1.5f : 0.0f;
        OK_CPU(cops->swiglu(cctx, &g, &b, L, &act, &y, err));
        OK_GPU(gops->swiglu(gctx, &dg, &db, L, &dact, &dy, err));
        same_r16(lim ? "swiglu clamped, bfloat16: out" : "swiglu, bfloat16: out", &y, &dy, 2);
        same_r16(lim ? "swiglu clamped, bfloat16: act" : "swiglu, bfloat16: act", &act, &dact, 2);
    }
    OK_CPU(cops->swiglu(cctx, &g, &b, 0.0f, NULL, &y, err));
    OK_GPU(gops->swiglu(gctx, &dg, &db, 0.0f, NULL, &dy, err));
    same_r16("swiglu without act, bfloat16", &y, &dy, 2);
    OK_CPU(cops->swiglu(cctx, NULL, &b, 2.0f, &x, &y, err));
    OK_GPU(gops->swiglu(gctx, NULL, &db, 2.0f, &dx, &dy, err));
    same_r16("swiglu from an edited act, bfloat16", &y, &dy, 2);
    /* the sum over slots: the same float32 sums in the same order, then the rounding - equal */
    nnt_tensor s = hrand(3, 11, 4, 33, 0, 0, 1), sy = host(NNT_F32, 2, 11, 33, 0, 0, 0), ds = dev(&s), dsy = dev(&sy);
    flag2(&sy, &dsy, R16);
    OK_CPU(cops->sum_axis1(cctx, &s, &sy, err));
    OK_GPU(gops->sum_axis1(gctx, &ds, &dsy, err));
    same("sum_axis1, bfloat16", &sy, &dsy, 0);
    free(x2.data);
    nnt_tensor *d[] = {&dx, &dw, &dy, &dg, &db, &dx2, &dwn, &dact, &ds, &dsy};
    dfree(10, d);
    nnt_tensor *h[] = {&x, &w, &y, &g, &b, &wb, &wn, &act, &s, &sy};
    hfree(10, h);
}

static void test_bf16_rope(void)
{
    const int64_t B = 2, H = 3, T = 9, D = 40;
    int32_t pos[18];
    float inv[12];
    for (int i = 0; i < 18; i++) pos[i] = i % 9 == 0 ? 0 : (i * 5) % 23 - 4;
    for (int i = 0; i < 12; i++) inv[i] = 1.0f / powf(10000.0f, (float)(2 * i) / 24.0f);
    for (int style = 0; style < 2; style++)
        for (int once = 0; once < 2; once++) {
            nnt_tensor x = hrand(4, B, H, T, D, 0, 1);
            round_host(&x);
            nnt_tensor dx = dev(&x);
            flag2(&x, &dx, once ? R16_ONCE : R16);
            OK_CPU(cops->rope(cctx, &x, pos, inv, 8, 24, (nnt_rope_style)style, 1.2f, err));
            OK_GPU(gops->rope(gctx, &dx, pos, inv, 8, 24, (nnt_rope_style)style, 1.2f, err));
            char what[96];
            snprintf(what, sizeof what, "rope %s, bfloat16%s", style ? "interleaved" : "neox", once ? " once" : "");
            same_r16(what, &x, &dx, 2);
            dev_free(&dx);
            nnt_tensor_free(&x);
        }
}

/* Scores, softmax (plain and shifted, sinks that are not bfloat16 numbers) and the mix, each op
 * on the cpu's output of the one before, so each is compared on the same inputs. */
static void test_bf16_attention(void)
{
    const int64_t B = 2, Hq = 4, Hkv = 2, T = 11, S = 14, D = 16, Dv = 12;
    nnt_tensor q = hrand(4, B, Hq, T, D, 0, 1), k = hrand(4, B, Hkv, S, D, 0, 1), v = hrand(4, B, Hkv, S, Dv, 0, 1);
    round_host(&q);
    round_host(&k);
    round_host(&v);
    nnt_tensor s = host(NNT_F32, 4, B, Hq, T, S, 0), p = host(NNT_F32, 4, B, Hq, T, S, 0), o = host(NNT_F32, 4, B, T, Hq, Dv, 0);
    nnt_tensor dq = dev(&q), dk = dev(&k), dv = dev(&v), ds = dev(&s), dp = dev(&p), dO = dev(&o);
    int32_t qpos[22], kpos[28];
    uint8_t kval[28], qval[22];
    for (int b = 0; b < B; b++)
        for (int t = 0; t < S; t++) {
            int pad = b == 1 && t < 3;
            if (t < T) {
                qval[b * T + t] = !pad;
                qpos[b * T + t] = pad ? 0 : (int32_t)(t - (b == 1 ? 3 : 0));
            }
            kval[b * S + t] = !pad;
            kpos[b * S + t] = t < T ? qpos[b * T + t] : (int32_t)(t - (b == 1 ? 3 : 0));
        }
    nnt_attn_mask causal = {.struct_size = sizeof(nnt_attn_mask), .q_pos = qpos, .k_pos = kpos, .key_valid = kval, .query_valid = qval, .key_no_window = NULL, .allow = NULL, .causal = 1, .window = 5};
    const nnt_attn_mask *masks[2] = {&causal, NULL};
    const char *names[2] = {"causal window and padding", "no mask"};
    float sinks[4] = {0.3f, -1.1f, 2.05f, 0.01f};
    for (int mi = 0; mi < 2; mi++) {
        char what[128];
        flag2(&s, &ds, R16);
        OK_CPU(cops->attn_scores(cctx, &q, &k, 0.3f, masks[mi], &s, err));
        OK_GPU(gops->attn_scores(gctx, &dq, &dk, 0.3f, masks[mi], &ds, err));
        snprintf(what, sizeof what, "attn_scores, bfloat16, %s", names[mi]);
        same_r16(what, &s, &ds, 2);
        nnt_tensor ds_cpu = dev(&s);
        for (int shifted = 0; shifted < 2; shifted++)
            for (int withsink = 0; withsink < 2; withsink++) {
                flag2(&p, &dp, shifted ? R16_SHIFTED : R16);
                OK_CPU(cops->softmax(cctx, &s, withsink ? sinks : NULL, &p, err));
                OK_GPU(gops->softmax(gctx, &ds_cpu, withsink ? sinks : NULL, &dp, err));
                snprintf(what, sizeof what, "softmax%s, bfloat16%s, %s", withsink ? " with sinks" : "",
                         shifted ? " shifted" : "", names[mi]);
                same_r16(what, &p, &dp, 2);
                nnt_tensor dp_cpu = dev(&p);
                flag2(&o, &dO, R16);
                OK_CPU(cops->attn_mix(cctx, &p, &v, &o, err));
                OK_GPU(gops->attn_mix(gctx, &dp_cpu, &dv, &dO, err));
                snprintf(what, sizeof what, "attn_mix, bfloat16 (after softmax%s%s), %s", withsink ? " with sinks" : "",
                         shifted ? " shifted" : "", names[mi]);
                same_r16(what, &o, &dO, 2);
                dev_free(&dp_cpu);
            }
        /* softmax in place on the scores, shifted, with sinks */
        nnt_tensor s2 = s;
        s2.data = malloc(nbytes(&s));
        memcpy(s2.data, s.data, nbytes(&s));
        flag2(&s2, &ds_cpu, R16_SHIFTED);
        OK_CPU(cops->softmax(cctx, &s2, sinks, &s2, err));
        OK_GPU(gops->softmax(gctx, &ds_cpu, sinks, &ds_cpu, err));
        snprintf(what, sizeof what, "softmax in place, bfloat16 shifted, %s", names[mi]);
        same_r16(what, &s2, &ds_cpu, 2);
        free(s2.data);
        dev_free(&ds_cpu);
    }
    nnt_tensor *d[] = {&dq, &dk, &dv, &ds, &dp, &dO};
    dfree(6, d);
    nnt_tensor *h[] = {&q, &k, &v, &s, &p, &o};
    hfree(6, h);
}

/* Routing in bfloat16: the same expert sets per token; the weights, aligned by expert, each a
 * bfloat16, within two steps of the cpu's and rarely different at all (as same_r16). */
static void same_routing_bf16(const char *what, const nnt_tensor *ci, const nnt_tensor *cw, const nnt_tensor *gi_d,
                              const nnt_tensor *gw_d, int64_t M, int K)
{
    nnt_tensor gi = back(gi_d), gw = back(gw_d);
    int64_t mismatch = 0, differ = 0, bad = 0, unrounded = 0, n = M * K;
    double scale = 0;
    for (int64_t i = 0; i < n; i++) scale = fmax(scale, fabs(((float *)cw->data)[i]));
    for (int64_t m = 0; m < M; m++)
        for (int a = 0; a < K; a++) {
            int32_t e = ((int32_t *)ci->data)[m * K + a];
            int found = -1;
            for (int b = 0; b < K; b++)
                if (((int32_t *)gi.data)[m * K + b] == e) found = b;
            if (found < 0) {
                mismatch++;
                continue;
            }
            float x = ((float *)cw->data)[m * K + a], y = ((float *)gw.data)[m * K + found];
            if (x != y) differ++;
            if (!(fabs((double)x - y) <= fabs(x) / 64.0 + TOL * scale)) bad++;
            if (bf16_of(y) != y) unrounded++;
        }
    int ok = mismatch == 0 && bad == 0 && unrounded == 0 && differ <= n / 20 + 1;
    if (!ok)
        fprintf(stderr, "\n  %s: %lld slots differ, %lld weights differ, %lld beyond two steps, %lld not bfloat16\n", what,
                (long long)mismatch, (long long)differ, (long long)bad, (long long)unrounded);
    CU_ASSERT(ok);
    free(gi.data);
    free(gw.data);
}

static void test_bf16_route(void)
{
    const int64_t M = 37, E = 16;
    const int K = 4;
    nnt_tensor lg = hrand(2, M, E, 0, 0, 0, 3), bias = hrand(1, E, 0, 0, 0, 0, 0.5f);
    nnt_tensor idx = host(NNT_I32, 2, M, K, 0, 0, 0), w = host(NNT_F32, 2, M, K, 0, 0, 0);
    nnt_tensor dl = dev(&lg), db = dev(&bias), di = dev(&idx), dw = dev(&w);
    flag2(&w, &dw, R16); /* the weights flagged: scores and weights in bfloat16 */
    struct {
        const char *name;
        nnt_route_params p;
        int bias;
    } cases[] = {
        {"bfloat16 sigmoid, bias, 4 groups keep 2, renormalised, scaled", {.struct_size = sizeof(nnt_route_params), .score_fn = NNT_SCORE_SIGMOID, .top_k = K, .n_group = 4, .topk_group = 2, .renormalize = 1, .renorm_eps = 1e-20f, .scaling_factor = 2.5f, .indices_given = 0}, 1},
        {"bfloat16 softmax, no bias, no groups", {.struct_size = sizeof(nnt_route_params), .score_fn = NNT_SCORE_SOFTMAX, .top_k = K, .n_group = 1, .topk_group = 1, .renormalize = 0, .renorm_eps = 0.0f, .scaling_factor = 1.0f, .indices_given = 0}, 0},
        {"bfloat16 softmax, renormalised, scaled", {.struct_size = sizeof(nnt_route_params), .score_fn = NNT_SCORE_SOFTMAX, .top_k = K, .n_group = 1, .topk_group = 1, .renormalize = 1, .renorm_eps = 0.0f, .scaling_factor = 1.7f, .indices_given = 0}, 0},
        {"bfloat16 sqrt softplus, bias, renormalised", {.struct_size = sizeof(nnt_route_params), .score_fn = NNT_SCORE_SQRT_SOFTPLUS, .top_k = K, .n_group = 0, .topk_group = 0, .renormalize = 1, .renorm_eps = 0.0f, .scaling_factor = 1.5f, .indices_given = 0}, 1},
        {"bfloat16 sigmoid, not renormalised, scaled", {.struct_size = sizeof(nnt_route_params), .score_fn = NNT_SCORE_SIGMOID, .top_k = K, .n_group = 0, .topk_group = 0, .renormalize = 0, .renorm_eps = 0.0f, .scaling_factor = 2.5f, .indices_given = 0}, 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        OK_CPU(cops->route(cctx, &lg, cases[i].bias ? &bias : NULL, &cases[i].p, &idx, &w, err));
        OK_GPU(gops->route(gctx, &dl, cases[i].bias ? &db : NULL, &cases[i].p, &di, &dw, err));
        same_routing_bf16(cases[i].name, &idx, &w, &di, &dw, M, K);
    }
    /* given indices (hash routing) */
    nnt_route_params given = {.struct_size = sizeof(nnt_route_params), .score_fn = NNT_SCORE_SQRT_SOFTPLUS, .top_k = K, .n_group = 1, .topk_group = 1, .renormalize = 1, .renorm_eps = 1e-20f, .scaling_factor = 1.5f, .indices_given = 1};
    for (int64_t i = 0; i < M * K; i++) ((int32_t *)idx.data)[i] = (int32_t)((i * 5 + i / K) % E);
    nnt_tensor dgi = dev(&idx);
    OK_CPU(cops->route(cctx, &lg, NULL, &given, &idx, &w, err));
    OK_GPU(gops->route(gctx, &dl, NULL, &given, &dgi, &dw, err));
    same_r16("route, bfloat16, given indices: weights", &w, &dw, 2);
    nnt_tensor *d[] = {&dl, &db, &di, &dw, &dgi};
    dfree(5, d);
    nnt_tensor *h[] = {&lg, &bias, &idx, &w};
    hfree(4, h);
}

/* Scatters into a flagged destination: R(dst + R(scale src)) or R(scale src), float32
 * operations in the same order on both - equal; scale_rows into a flagged output R(x w), equal;
 * a gather only moves values, rounding none. */
static void test_bf16_rows(void)
{
    const int64_t M = 20, H = 33;
    nnt_tensor src = hrand(2, M, H, 0, 0, 0, 1), dsrc = dev(&src);
    int32_t rows[9] = {3, 0, 19, 7, 7, 12, 3, 5, 3};
    float scale[9] = {0.5f, 1.1f, -2.0f, 0.25f, 3.3f, 1.5f, -1.0f, 0.7f, 2.0f};
    nnt_tensor g = host(NNT_F32, 2, 9, H, 0, 0, 0), dg = dev(&g);
    flag2(&g, &dg, R16);
    OK_CPU(cops->gather_rows(cctx, &src, rows, 9, &g, err));
    OK_GPU(gops->gather_rows(gctx, &dsrc, rows, 9, &dg, err));
    same("gather_rows into a bfloat16-flagged tensor (no rounding)", &g, &dg, 0);
    for (int dup = 0; dup < 2; dup++) {
        int32_t distinct[6] = {3, 0, 19, 7, 12, 5};
        const int32_t *r = dup ? rows : distinct;
        int n = dup ? 9 : 6;
        for (int withscale = 0; withscale < 2; withscale++) {
            nnt_tensor acc = hrand(2, M, H, 0, 0, 0, 1), set = hrand(2, M, H, 0, 0, 0, 1);
            round_host(&acc);
            nnt_tensor dacc = dev(&acc), dset = dev(&set);
            flag2(&acc, &dacc, R16);
            flag2(&set, &dset, R16);
            OK_CPU(cops->scatter_add_rows(cctx, &g, r, withscale ? scale : NULL, n, &acc, err));
            OK_GPU(gops->scatter_add_rows(gctx, &dg, r, withscale ? scale : NULL, n, &dacc, err));
            OK_CPU(cops->scatter_rows(cctx, &g, r, withscale ? scale : NULL, n, &set, err));
            OK_GPU(gops->scatter_rows(gctx, &dg, r, withscale ? scale : NULL, n, &dset, err));
            char what[96];
            snprintf(what, sizeof what, "scatter_add_rows, bfloat16%s%s", dup ? ", repeated rows" : "",
                     withscale ? ", scaled" : "");
            same(what, &acc, &dacc, 0);
            snprintf(what, sizeof what, "scatter_rows, bfloat16%s%s", dup ? ", repeated rows" : "",
                     withscale ? ", scaled" : "");
            same(what, &set, &dset, 0);
            dev_free(&dacc);
            dev_free(&dset);
            nnt_tensor_free(&acc);
            nnt_tensor_free(&set);
        }
    }
    {
        const int32_t at[9] = {7, 0, 19, 7, 12, 3, 7, 18, 0};
        nnt_tensor w = hrand(2, 4, 5, 0, 0, 0, 2), dwt = dev(&w), y = host(NNT_F32, 2, 9, H, 0, 0, 0), dy = dev(&y);
        flag2(&y, &dy, R16);
        OK_CPU(cops->scale_rows(cctx, &g, &w, at, 9, &y, err));
        OK_GPU(gops->scale_rows(gctx, &dg, &dwt, at, 9, &dy, err));
        same("scale_rows into a bfloat16-flagged tensor", &y, &dy, 0);
        dev_free(&dwt);
        dev_free(&dy);
        nnt_tensor_free(&w);
        nnt_tensor_free(&y);
    }
    nnt_tensor *d[] = {&dsrc, &dg};
    dfree(2, d);
    nnt_tensor *h[] = {&src, &g};
    hfree(2, h);
}

/* The convolution rounds its sum and its activation; its state is a copy of inputs and the forget
 * gate stays float32, flags or not (float32 inputs here, so a rounding there would show). */
static void test_bf16_conv_and_gate(void)
{
    const int64_t B = 2, T = 13, C = 40, W = 4;
    nnt_tensor x = hrand(3, B, T, C, 0, 0, 1), w = hrand(2, C, W, 0, 0, 0, 0.5f), y = host(NNT_F32, 3, B, T, C, 0, 0);
    nnt_tensor si = hrand(3, B, W - 1, C, 0, 0, 1), so = host(NNT_F32, 3, B, W - 1, C, 0, 0);
    nnt_tensor wb = host(NNT_BF16, 2, C, W, 0, 0, 0);
    for (int64_t i = 0; i < C * W; i++) ((uint16_t *)wb.data)[i] = nnt_f32_to_bf16(((float *)w.data)[i]);
    nnt_tensor dx = dev(&x), dy = dev(&y), dsi = dev(&si), dso = dev(&so), dw;
    OK_GPU(gops->prepare_weight(gctx, &wb, &dw, err));
    flag2(&y, &dy, R16);
    flag2(&so, &dso, R16);
    for (int act = 0; act < 2; act++)
        for (int state = 0; state < 2; state++) {
            OK_CPU(cops->conv1d_causal(cctx, &x, &wb, state ? &si : NULL, act, &y, &so, err));
            OK_GPU(gops->conv1d_causal(gctx, &dx, &dw, state ? &dsi : NULL, act, &dy, &dso, err));
            char what[96];
            snprintf(what, sizeof what, "conv1d%s%s, bfloat16", act ? " SiLU" : "", state ? " with state_in" : "");
            same_r16(what, &y, &dy, 2);
            snprintf(what, sizeof what, "conv1d%s%s, bfloat16: state_out (no rounding)", act ? " SiLU" : "",
                     state ? " with state_in" : "");
            same(what, &so, &dso, 0);
        }
    nnt_tensor a = hrand(2, 7, 48, 0, 0, 0, 10), dt = hrand(1, 48, 0, 0, 0, 0, 1), al = hrand(1, 3, 0, 0, 0, 0, 1);
    nnt_tensor gg = host(NNT_F32, 2, 7, 48, 0, 0, 0), da = dev(&a), ddt = dev(&dt), dal = dev(&al), dgg = dev(&gg);
    flag2(&gg, &dgg, R16);
    OK_CPU(cops->kda_gate(cctx, &a, &dt, &al, &gg, err));
    OK_GPU(gops->kda_gate(gctx, &da, &ddt, &dal, &dgg, err));
    same("kda_gate into a bfloat16-flagged tensor (float32)", &gg, &dgg, TOL);
    gops->release_weight(gctx, &dw);
    nnt_tensor *d[] = {&dx, &dy, &dsi, &dso, &da, &ddt, &dal, &dgg};
    dfree(8, d);
    nnt_tensor *h[] = {&x, &w, &y, &si, &so, &wb, &a, &dt, &al, &gg};
    hfree(10, h);
}

/* Hyper-connections: the collapsed streams rounded, post and comb float32; the mix on the cpu's
 * post and comb (not bfloat16 numbers: the mix rounds them); the head; compression; the indexer's
 * scores float32 whatever their flags. */
static void test_bf16_hyper(void)
{
    const int64_t M = 9, n = 4, H = 64, outs = (2 + n) * n;
    nnt_tensor x = hrand(3, M, n, H, 0, 0, 1), fn = hrand(2, outs, n * H, 0, 0, 0, 0.05f), base = hrand(1, outs, 0, 0, 0, 0, 0.5f);
    round_host(&x);
    nnt_tensor sc = host(NNT_F32, 1, 3, 0, 0, 0, 0);
    float scv[3] = {0.8f, 1.1f, 0.6f};
    memcpy(sc.data, scv, sizeof scv);
    nnt_tensor post = host(NNT_F32, 2, M, n, 0, 0, 0), comb = host(NNT_F32, 3, M, n, n, 0, 0), coll = host(NNT_F32, 2, M, H, 0, 0, 0);
    nnt_tensor dx = dev(&x), dpost = dev(&post), dcomb = dev(&comb), dcoll = dev(&coll), dfn, dbase, dsc;
    flag2(&post, &dpost, R16);
    flag2(&comb, &dcomb, R16);
    flag2(&coll, &dcoll, R16);
    OK_GPU(gops->prepare_weight(gctx, &fn, &dfn, err));
    OK_GPU(gops->prepare_weight(gctx, &base, &dbase, err));
    OK_GPU(gops->prepare_weight(gctx, &sc, &dsc, err));
    OK_CPU(cops->hyper_connection(cctx, &x, &fn, &base, &sc, 1e-6f, 1e-6f, 20, &post, &comb, &coll, err));
    OK_GPU(gops->hyper_connection(gctx, &dx, &dfn, &dbase, &dsc, 1e-6f, 1e-6f, 20, &dpost, &dcomb, &dcoll, err));
    same("hyper_connection, bfloat16: post (float32)", &post, &dpost, TOL);
    same("hyper_connection, bfloat16: comb (float32)", &comb, &dcomb, TOL);
    same_r16("hyper_connection, bfloat16: collapsed", &coll, &dcoll, 2);
    nnt_tensor a = hrand(2, M, H, 0, 0, 0, 1), out = host(NNT_F32, 3, M, n, H, 0, 0);
    round_host(&a);
    nnt_tensor da = dev(&a), dout = dev(&out), dpost_cpu = dev(&post), dcomb_cpu = dev(&comb);
    flag2(&out, &dout, R16);
    OK_CPU(cops->hyper_mix(cctx, &x, &a, &post, &comb, &out, err));
    OK_GPU(gops->hyper_mix(gctx, &dx, &da, &dpost_cpu, &dcomb_cpu, &dout, err));
    same_r16("hyper_mix, bfloat16", &out, &dout, 2);
    nnt_tensor hfn = hrand(2, n, n * H, 0, 0, 0, 0.05f), hbase = hrand(1, n, 0, 0, 0, 0, 0.5f), y = host(NNT_F32, 2, M, H, 0, 0, 0);
    nnt_tensor dhfn, dhbase, dy = dev(&y);
    flag2(&y, &dy, R16);
    OK_GPU(gops->prepare_weight(gctx, &hfn, &dhfn, err));
    OK_GPU(gops->prepare_weight(gctx, &hbase, &dhbase, err));
    OK_CPU(cops->hyper_head(cctx, &x, &hfn, &hbase, &sc, 1e-6f, 1e-6f, &y, err));
    OK_GPU(gops->hyper_head(gctx, &dx, &dhfn, &dhbase, &dsc, 1e-6f, 1e-6f, &dy, err));
    same_r16("hyper_head, bfloat16", &y, &dy, 2);
    nnt_tensor *w[] = {&dfn, &dbase, &dsc, &dhfn, &dhbase};
    for (int i = 0; i < 5; i++) gops->release_weight(gctx, w[i]);
    nnt_tensor *d[] = {&dx, &dpost, &dcomb, &dcoll, &da, &dout, &dpost_cpu, &dcomb_cpu, &dy};
    dfree(9, d);
    nnt_tensor *h[] = {&x, &fn, &base, &sc, &post, &comb, &coll, &a, &out, &hfn, &hbase, &y};
    hfree(12, h);

    const int64_t B = 2, T = 23, Dc = 8, rate = 4, C = 5;
    int32_t first[2] = {0, 3}, count[2] = {5, 4};
    for (int overlap = 0; overlap < 2; overlap++) {
        int64_t cD = overlap ? 2 * Dc : Dc;
        nnt_tensor kv = hrand(3, B, T, cD, 0, 0, 1), gate = hrand(3, B, T, cD, 0, 0, 2), ape = hrand(2, rate, cD, 0, 0, 0, 1);
        round_host(&kv);
        round_host(&gate);
        nnt_tensor co = host(NNT_F32, 3, B, C, Dc, 0, 0), dkv = dev(&kv), dgate = dev(&gate), dco = dev(&co), dape;
        flag2(&co, &dco, R16);
        OK_GPU(gops->prepare_weight(gctx, &ape, &dape, err));
        OK_CPU(cops->compress(cctx, &kv, &gate, &ape, (int)rate, overlap, first, count, &co, err));
        OK_GPU(gops->compress(gctx, &dkv, &dgate, &dape, (int)rate, overlap, first, count, &dco, err));
        same_r16(overlap ? "compress with overlap, bfloat16" : "compress, bfloat16", &co, &dco, 2);
        gops->release_weight(gctx, &dape);
        nnt_tensor *d2[] = {&dkv, &dgate, &dco};
        dfree(3, d2);
        nnt_tensor *h2[] = {&kv, &gate, &ape, &co};
        hfree(4, h2);
    }
    const int64_t Hh = 4, dI = 16, Ce = 6;
    nnt_tensor q = hrand(4, B, T, Hh, dI, 0, 1), k = hrand(3, B, Ce, dI, 0, 0, 1), iw = hrand(3, B, T, Hh, 0, 0, 1);
    round_host(&q);
    round_host(&k);
    nnt_tensor isc = host(NNT_F32, 3, B, T, Ce, 0, 0), dq = dev(&q), dk = dev(&k), diw = dev(&iw), disc = dev(&isc);
    flag2(&isc, &disc, R16);
    OK_CPU(cops->indexer_scores(cctx, &q, &k, &iw, 0.125f, &isc, err));
    OK_GPU(gops->indexer_scores(gctx, &dq, &dk, &diw, 0.125f, &disc, err));
    same("indexer_scores into a bfloat16-flagged tensor (float32)", &isc, &disc, TOL);
    nnt_tensor *d3[] = {&dq, &dk, &diw, &disc};
    dfree(4, d3);
    nnt_tensor *h3[] = {&q, &k, &iw, &isc};
    hfree(4, h3);
}

static void test_bf16_delta_rule(void)
{
    run_delta(1, 1, 0, 1, 1);
    run_delta(33, 1, 1, 1, 1);
    run_delta(17, 1, 0, 0, 1);
}

/* ---------------------------------------------------------------------------------------- */
/* Whole models: every fixture on both runtimes.                                             */

typedef struct fixture {
    char model[512]; /* the directory holding config.json */
    char refs[8][600];
    int n_refs;
} fixture;

static int is_ref_name(const char *n)
{
    size_t l = strlen(n);
    return strncmp(n, "reference", 9) == 0 && l > 12 && strcmp(n + l - 12, ".safetensors") == 0;
}

static int has_file(const char *dir, const char *name)
{
    char p[1024];
    struct stat sb;
    snprintf(p, sizeof p, "%s/%s", dir, name);
    return stat(p, &sb) == 0 && S_ISREG(sb.st_mode);
}

static int cmp_names(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The sorted entries of dir (caller frees each and the array). */
static int list_dir(const char *dir, char ***out)
{
    DIR *d = opendir(dir);
    int n = 0, cap = 0;
    char **v = NULL;
    if (!d) return 0;
    for (struct dirent *e; (e = readdir(d));) {
        if (e->d_name[0] == '.') continue;
        if (n == cap) {
            cap = cap ? 2 * cap : 16;
            v = realloc(v, (size_t)cap * sizeof *v);
        }
        v[n++] = strdup(e->d_name);
    }
    closedir(d);
    if (n) qsort(v, (size_t)n, sizeof *v, cmp_names);
    *out = v;
    return n;
}

static int refs_in(const char *dir, fixture *f)
{
    char **names;
    int n = list_dir(dir, &names), found = 0;
    for (int i = 0; i < n; i++) {
        if (is_ref_name(names[i]) && f->n_refs < 8) {
            snprintf(f->refs[f->n_refs++], sizeof f->refs[0], "%s/%s", dir, names[i]);
            found++;
        }
        free(names[i]);
    }
    if (n) free(names);
    return found;
}

/* tests/fixtures/<family>/<variant>/ with a config.json; references from the variant, else from
 * its sibling fp32 (or the first sibling that has any). */
static int discover(fixture *out, int max)
{
    char **fams;
    int nf = list_dir(NNT_TEST_FIXTURES, &fams), count = 0;
    for (int i = 0; i < nf; i++) {
        char fdir[512];
        snprintf(fdir, sizeof fdir, "%s/%s", NNT_TEST_FIXTURES, fams[i]);
        char **vars;
        int nv = list_dir(fdir, &vars);
        for (int j = 0; j < nv && count < max; j++) {
            fixture *f = &out[count];
            memset(f, 0, sizeof *f);
            int len = snprintf(f->model, sizeof f->model, "%s/%s", fdir, vars[j]);
            if (len < 0 || len >= (int)sizeof f->model || !has_file(f->model, "config.json")) continue;
            if (!refs_in(f->model, f)) {
                char sib[1024];
                snprintf(sib, sizeof sib, "%s/fp32", fdir);
                if (!refs_in(sib, f))
                    for (int k = 0; k < nv && !f->n_refs; k++) {
                        snprintf(sib, sizeof sib, "%s/%s", fdir, vars[k]);
                        refs_in(sib, f);
                    }
            }
            if (f->n_refs) count++;
            else fprintf(stderr, "\n  %s: no reference*.safetensors here or in a sibling; skipped\n", f->model);
        }
        for (int j = 0; j < nv; j++) free(vars[j]);
        if (nv) free(vars);
        free(fams[i]);
    }
    if (nf) free(fams);
    return count;
}

static int ends_with(const char *s, const char *tail)
{
    size_t a = strlen(s), b = strlen(tail);
    return a >= b && strcmp(s + a - b, tail) == 0;
}

/* Entries of a value to compare: real tokens of token-major [B, T, ...] values; real query rows
 * of heads-first [B, H, T, ...] values, and among their key columns (scores, probabilities) the
 * real ones of the first T; real key rows of [B, H, S, D] keys/values with S = T + C entries
 * (the C compressed entries pool real tokens only); everything of any other value. */
static unsigned char *select_real(const t_ref *r, const nnt_tensor *v)
{
    int64_t n = nnt_tensor_numel(v), B = r->batch, T = r->seq;
    unsigned char *sel = malloc((size_t)(n ? n : 1));
    for (int64_t i = 0; i < n; i++) sel[i] = 1;
    if (v->ndim < 2 || v->shape[0] != B || n == 0) return sel;
    if (v->shape[1] == T) {
        int64_t inner = n / (B * T);
        for (int64_t i = 0; i < n; i++) sel[i] = r->mask[i / inner] != 0;
    } else if (v->ndim >= 3 && v->shape[2] == T) {
        int64_t H = v->shape[1], inner = n / (B * H * T), S = v->ndim == 4 ? v->shape[3] : 0;
        for (int64_t i = 0; i < n; i++) {
            int64_t t = (i / inner) % T, b = i / (inner * T * H);
            sel[i] = r->mask[b * T + t] != 0;
            if (S >= T && inner == S) {
                int64_t s = i % S;
                if (s < T && !r->mask[b * T + s]) sel[i] = 0;
            }
        }
    } else if (v->ndim == 4 && v->shape[2] > T) {
        int64_t H = v->shape[1], S = v->shape[2], D = v->shape[3];
        for (int64_t i = 0; i < n; i++) {
            int64_t s = (i / D) % S, b = i / (D * S * H);
            if (s < T) sel[i] = r->mask[b * T + s] != 0;
        }
    }
    return sel;
}

/* Expert indices as sets per real token; weights/outputs slot by slot after aligning by expert. */
static double compare_slots(const t_ref *r, const nnt_trace *tc, const nnt_trace *tg, const char *key, int *mismatch)
{
    char ki[256];
    snprintf(ki, sizeof ki, "%.*s.expert_indices", (int)(strrchr(key, '.') - key), key);
    const nnt_tensor *ci = nnt_trace_get(tc, ki), *gi = nnt_trace_get(tg, ki);
    const nnt_tensor *cv = nnt_trace_get(tc, key), *gv = nnt_trace_get(tg, key);
    *mismatch = 0;
    if (!ci || !gi || !cv || !gv || ci->ndim < 3) return rel_diff(cv, gv, NULL);
    int64_t K = ci->shape[2], M = (int64_t)r->batch * r->seq, inner = nnt_tensor_numel(cv) / (M * K);
    int is_idx = ends_with(key, ".expert_indices");
    double worst = 0, scale = 0;
    for (int64_t tok = 0; tok < M; tok++) {
        if (!r->mask[tok]) continue;
        for (int64_t a = 0; a < K; a++) {
            int64_t e = (int64_t)nnt_tensor_get_f64(ci, tok * K + a), found = -1;
            for (int64_t b = 0; b < K; b++)
                if ((int64_t)nnt_tensor_get_f64(gi, tok * K + b) == e) found = b;
            if (found < 0) {
                (*mismatch)++;
                continue;
            }
            if (is_idx) continue;
            for (int64_t j = 0; j < inner; j++) {
                double x = nnt_tensor_get_f64(cv, (tok * K + a) * inner + j), y = nnt_tensor_get_f64(gv, (tok * K + found) * inner + j);
                scale = fmax(scale, fabs(x));
                worst = fmax(worst, fabs(x - y));
            }
        }
    }
    return scale > 0 ? worst / scale : worst;
}

/* Compares every value trace tc saved with the same path in tg; returns how many. */
static int compare_traces(const char *label, const t_ref *r, const nnt_trace *tc, const nnt_trace *tg)
{
    int n = nnt_trace_result_count(tc), bad = 0;
    double worst = 0;
    const char *worst_key = "-";
    for (int i = 0; i < n; i++) {
        const char *path;
        const nnt_tensor *cv;
        if (nnt_trace_result(tc, i, &path, &cv) != NNT_OK || !cv) continue;
        const nnt_tensor *gv = nnt_trace_get(tg, path);
        if (!gv) {
            fprintf(stderr, "\n  %s: %s saved on cpu, missing on cuda\n", label, path);
            bad++;
            continue;
        }
        double e;
        int mismatch = 0;
        if (ends_with(path, ".expert_indices") || ends_with(path, ".expert_weights") || ends_with(path, ".expert_outputs")) {
            e = compare_slots(r, tc, tg, path, &mismatch);
        } else {
            unsigned char *sel = select_real(r, cv);
            e = rel_diff(cv, gv, sel);
            free(sel);
        }
        if (e < 0 || e > TOL || mismatch) {
            fprintf(stderr, "\n  %s: %s: relative difference %.3g%s (%d routing slots differ)\n", label, path, e,
                    e < 0 ? " (shape, infinity or NaN mismatch)" : "", mismatch);
            bad++;
        }
        if (e > worst) {
            worst = e;
            worst_key = path;
        }
    }
    printf("\n  %s: %d values, worst relative difference %.3g (%s)", label, n, worst, worst_key);
    CU_ASSERT_EQUAL(bad, 0);
    return n;
}

static int open_ref(t_ref *r, nnt_runtime *rt, const char *path)
{
    memset(r, 0, sizeof *r);
    r->rt = rt;
    snprintf(r->path, sizeof r->path, "%s", path);
    nnt_tensor ids, mask;
    if (nnt_safetensors_read(rt, path, "input_ids", &ids) != NNT_OK) return -1;
    if (nnt_safetensors_read(rt, path, "attention_mask", &mask) != NNT_OK) {
        nnt_tensor_free(&ids);
        return -1;
    }
    r->batch = (int)ids.shape[0];
    r->seq = (int)ids.shape[1];
    int ok = nnt_tensor_numel(&ids) <= 4096;
    for (int64_t i = 0; i < nnt_tensor_numel(&ids) && i < 4096; i++) {
        r->ids[i] = (int32_t)nnt_tensor_get_f64(&ids, i);
        r->mask[i] = (int32_t)nnt_tensor_get_f64(&mask, i);
    }
    nnt_tensor_free(&ids);
    nnt_tensor_free(&mask);
    return ok ? 0 : -1;
}

/* rms over the entries sel (NULL: all) selects of a - b (b NULL: of a). */
static double rms_sel(const nnt_tensor *a, const nnt_tensor *b, const unsigned char *sel)
{
    double sum = 0;
    int64_t count = 0;
    for (int64_t i = 0; i < nnt_tensor_numel(a); i++) {
        if (sel && !sel[i]) continue;
        double d = nnt_tensor_get_f64(a, i) - (b ? nnt_tensor_get_f64(b, i) : 0.0);
        sum += d * d;
        count++;
    }
    return count ? sqrt(sum / (double)count) : 0.0;
}

/* At precision = bf16: whether cuda rounds where the cpu does. A value the cpu holds in bfloat16
 * on every selected entry (at least 16 of them; a float32 value passes for one with odds of 2^-16
 * per entry) must be bfloat16 on cuda too - else an op skipped its rounding; a value whose entries
 * are mostly not bfloat16 numbers on the cpu (kept float32) must stay so on cuda - else an op
 * rounded what the cpu does not. 1 when consistent. */
static int bf16_kind_agrees(const char *label, const char *path, const nnt_tensor *cv, const nnt_tensor *gv,
                            const unsigned char *sel)
{
    if (cv->dtype != NNT_F32 || gv->dtype != NNT_F32) return 1;
    int64_t fc = 0, pc = 0, fg = 0, pg = 0;
    for (int64_t i = 0; i < nnt_tensor_numel(cv); i++) {
        if (sel && !sel[i]) continue;
        float a = ((const float *)cv->data)[i], b = ((const float *)gv->data)[i];
        if (isfinite(a)) {
            fc++;
            pc += bf16_of(a) != a;
        }
        if (isfinite(b)) {
            fg++;
            pg += bf16_of(b) != b;
        }
    }
    if (fc >= 16 && pc == 0 && pg > 0) {
        fprintf(stderr, "\n  %s: %s: the cpu holds every entry in bfloat16, cuda leaves %lld of %lld unrounded\n", label,
                path, (long long)pg, (long long)fg);
        return 0;
    }
    if (fc >= 16 && 2 * pc >= fc && 4 * pg < fg) {
        fprintf(stderr, "\n  %s: %s: the cpu keeps %lld of %lld entries float32, cuda only %lld of %lld\n", label, path,
                (long long)pc, (long long)fc, (long long)pg, (long long)fg);
        return 0;
    }
    return 1;
}

/* The prompt, then three one-token steps, in a session on each runtime (rtc, rtg): logits of
 * every step. bound < 0: compared as float32 values (compare_traces); else at precision = bf16,
 * each step's logits within relative RMS `bound` of the cpu's (rms(cuda - cpu) / rms(cpu)) and
 * bfloat16 where the cpu's are. */
static void compare_session(const char *label, nnt_runtime *rtc, nnt_runtime *rtg, nnt_model *mc, nnt_model *mg,
                            const t_ref *r, double bound)
{
    nnt_session *sc = NULL, *sg = NULL;
    nnt_status st = nnt_session_new(mc, r->batch, r->seq + 8, &sc);
    if (st != NNT_OK) {
        printf("\n  %s: no session (%s); steps not compared", label, nnt_last_error(rtc));
        return;
    }
    T_OK(rtg, nnt_session_new(mg, r->batch, r->seq + 8, &sg));
    nnt_trace *tc, *tg;
    T_OK(rtc, nnt_trace_new(mc, &tc));
    T_OK(rtg, nnt_trace_new(mg, &tg));
    T_OK(rtc, nnt_trace_save(tc, "logits"));
    T_OK(rtg, nnt_trace_save(tg, "logits"));
    T_OK(rtc, nnt_session_forward(sc, tc, r->ids, r->mask, r->seq));
    T_OK(rtg, nnt_session_forward(sg, tg, r->ids, r->mask, r->seq));
    int32_t next[64];
    for (int step = 1; step <= 3; step++) {
        for (int b = 0; b < r->batch && b < 64; b++) next[b] = (r->ids[b * r->seq + r->seq - 1] + 7 * step) % 32 + 1;
        T_OK(rtc, nnt_session_forward(sc, tc, next, NULL, 1));
        T_OK(rtg, nnt_session_forward(sg, tg, next, NULL, 1));
    }
    /* the prompt's logits on real tokens, the steps' ([B, 1, V]) whole */
    char what[700];
    snprintf(what, sizeof what, "%s, session steps", label);
    if (bound < 0) {
        compare_traces(what, r, tc, tg);
    } else {
        int n = nnt_trace_result_count(tc), bad = 0;
        double worst = 0;
        for (int i = 0; i < n; i++) {
            const char *path;
            const nnt_tensor *cv, *gv;
            if (nnt_trace_result(tc, i, &path, &cv) != NNT_OK || !cv) continue;
            gv = nnt_trace_get(tg, path);
            if (!gv || nnt_tensor_numel(gv) != nnt_tensor_numel(cv)) {
                fprintf(stderr, "\n  %s: %s missing or of another size on cuda\n", what, path);
                bad++;
                continue;
            }
            unsigned char *sel = select_real(r, cv);
            double rel = rms_sel(cv, gv, sel) / rms_sel(cv, NULL, sel);
            if (!(rel <= bound)) {
                fprintf(stderr, "\n  %s: %s: relative RMS %.4g above the bound %.4g\n", what, path, rel, bound);
                bad++;
            }
            bad += !bf16_kind_agrees(what, path, cv, gv, sel);
            worst = rel > worst ? rel : worst;
            free(sel);
        }
        printf("\n  %s: %d logits, worst relative RMS %.4g (bound %.4g)", what, n, worst, bound);
        CU_ASSERT_EQUAL(bad, 0);
    }
    nnt_trace_free(tc);
    nnt_trace_free(tg);
    nnt_session_free(sc);
    nnt_session_free(sg);
}

static void test_fixtures(void)
{
    static fixture fx[64];
    int n = discover(fx, 64), values = 0;
    CU_ASSERT(n > 0);
    for (int i = 0; i < n; i++) {
        nnt_model *mc = NULL, *mg = NULL;
        T_OK(rt_cpu, nnt_model_load(rt_cpu, fx[i].model, &mc));
        T_OK(rt_gpu, nnt_model_load(rt_gpu, fx[i].model, &mg));
        CU_ASSERT_STRING_EQUAL(nnt_model_backend(mg), NNT_TEST_GPU_BACKEND);
        for (int j = 0; j < fx[i].n_refs; j++) {
            t_ref r;
            if (open_ref(&r, rt_cpu, fx[i].refs[j]) != 0) {
                fprintf(stderr, "\n  %s: cannot read its prompts\n", fx[i].refs[j]);
                CU_FAIL("reference prompts");
                continue;
            }
            nnt_trace *tc = t_run_reference(rt_cpu, mc, &r);
            r.rt = rt_gpu;
            nnt_trace *tg = t_run_reference(rt_gpu, mg, &r);
            char label[1200];
            const char *rel = fx[i].model + strlen(NNT_TEST_FIXTURES) + 1;
            snprintf(label, sizeof label, "%s (%s)", rel, strrchr(fx[i].refs[j], '/') + 1);
            values += compare_traces(label, &r, tc, tg);
            nnt_trace_free(tc);
            nnt_trace_free(tg);
            if (j == 0) compare_session(rel, rt_cpu, rt_gpu, mc, mg, &r, -1.0);
        }
        nnt_model_free(mc);
        nnt_model_free(mg);
    }
    printf("\n  %d fixtures, %d values compared\n", n, values);
}

/* ---- fixtures at precision = bf16 ---- */

/* A copy of the INI `src` as <scratch>/<name> with precision = bf16 in every [family.*] section
 * (a precision line there dropped) and relative [plugins] paths made absolute (they resolve
 * against the INI file's own directory). Returns the path in buf, or NULL when it cannot be
 * written. */
static const char *ini_bf16(const char *src, const char *name, char *buf, size_t n)
{
    char base[512];
    snprintf(base, sizeof base, "%s", src);
    char *slash = strrchr(base, '/');
    if (slash)
        *slash = '\0';
    else
        snprintf(base, sizeof base, ".");
    snprintf(buf, n, "%s/%s", t_tmpdir(), name);
    FILE *in = fopen(src, "r"), *out = in ? fopen(buf, "w") : NULL;
    if (!out) {
        if (in) fclose(in);
        return NULL;
    }
    char line[1024], section[256] = "";
    while (fgets(line, sizeof line, in)) {
        const char *t = line;
        while (*t == ' ' || *t == '\t') t++;
        if (*t == '[') {
            const char *end = strchr(t, ']');
            snprintf(section, sizeof section, "%.*s", end ? (int)(end - t - 1) : 0, t + 1);
            fputs(line, out);
            if (strncmp(section, "family.", 7) == 0) fputs("precision = bf16\n", out);
            continue;
        }
        const char *eq = *t != ';' && *t != '#' ? strchr(t, '=') : NULL;
        if (eq) {
            int kl = (int)(eq - t);
            while (kl > 0 && (t[kl - 1] == ' ' || t[kl - 1] == '\t')) kl--;
            char key[256], val[768];
            snprintf(key, sizeof key, "%.*s", kl, t);
            const char *v = eq + 1;
            while (*v == ' ' || *v == '\t') v++;
            snprintf(val, sizeof val, "%s", v);
            val[strcspn(val, ";\r\n")] = '\0';
            for (size_t e = strlen(val); e > 0 && (val[e - 1] == ' ' || val[e - 1] == '\t'); e--) val[e - 1] = '\0';
            if (strncmp(section, "family.", 7) == 0 && strcmp(key, "precision") == 0) continue;
            if (strcmp(section, "plugins") == 0 && (strcmp(key, "dir") == 0 || strcmp(key, "file") == 0) &&
                val[0] != '/') {
                fprintf(out, "%s = %s/%s\n", key, base, val);
                continue;
            }
        }
        fputs(line, out);
    }
    fclose(in);
    return fclose(out) == 0 ? buf : NULL;
}

typedef struct bf16_fixture {
    char model[512]; /* the directory holding config.json */
    char hf16[1024]; /* transformers run in torch.bfloat16: reference_bf16*.safetensors */
    char hf32[1024]; /* the same prompts in float32: the name without "_bf16" */
} bf16_fixture;

/* Variants tests/fixtures/<family>/<variant> with a config.json and a transformers-bf16
 * reference next to its float32 counterpart; one entry per such pair. */
static int discover_bf16(bf16_fixture *out, int max)
{
    char **fams;
    int nf = list_dir(NNT_TEST_FIXTURES, &fams), count = 0;
    for (int i = 0; i < nf; i++) {
        char fdir[512];
        snprintf(fdir, sizeof fdir, "%s/%s", NNT_TEST_FIXTURES, fams[i]);
        char **vars;
        int nv = list_dir(fdir, &vars);
        for (int j = 0; j < nv; j++) {
            char model[512];
            int len = snprintf(model, sizeof model, "%s/%s", fdir, vars[j]);
            char **names;
            int nn = len > 0 && len < (int)sizeof model && has_file(model, "config.json") ? list_dir(model, &names) : 0;
            for (int k = 0; k < nn; k++) {
                const char *nm = names[k];
                if (count < max && strncmp(nm, "reference_bf16", 14) == 0 && ends_with(nm, ".safetensors")) {
                    char f32[300];
                    snprintf(f32, sizeof f32, "reference%s", nm + 14);
                    if (has_file(model, f32)) {
                        bf16_fixture *f = &out[count++];
                        snprintf(f->model, sizeof f->model, "%s", model);
                        snprintf(f->hf16, sizeof f->hf16, "%s/%s", model, nm);
                        snprintf(f->hf32, sizeof f->hf32, "%s/%s", model, f32);
                    } else {
                        fprintf(stderr, "\n  %s/%s: no %s beside it; not compared at precision = bf16\n", model, nm, f32);
                    }
                }
                free(names[k]);
            }
            if (nn) free(names);
        }
        for (int j = 0; j < nv; j++) free(vars[j]);
        if (nv) free(vars);
        free(fams[i]);
    }
    if (nf) free(fams);
    return count;
}

/* Every value trace tc saved at precision = bf16 against tg's. Logits and every layer_output
 * are held to relative RMS over real tokens, rms(cuda - cpu) / rms(hf32), at most rms(hf16 -
 * hf32) / rms(hf32): the two backends' bfloat16 runs no further apart than bfloat16 is from
 * float32 on this fixture (the bound the family suites hold nnt-bf16 to against transformers).
 * They differ at all only where float32 sums taken in another order round to another bfloat16,
 * and such differences travel down the blocks; an op that skipped its roundings or took them
 * where the cpu does not shows in bf16_kind_agrees, held on every float value. Expert choices are
 * reported (a near-tie may go either way, then its block's values move by more). *logits_bound
 * receives the logits' bound. Returns the number of values. */
static int compare_traces_bf16(const char *label, const t_ref *hf16, const t_ref *hf32, const nnt_trace *tc,
                               const nnt_trace *tg, double *logits_bound)
{
    int n = nnt_trace_result_count(tc), bad = 0;
    double worst_ctx = 0;
    const char *worst_key = "-";
    printf("\n  %s at precision = bf16: relative RMS (over rms of transformers-fp32), cuda-cpu against hf16-hf32", label);
    for (int i = 0; i < n; i++) {
        const char *path;
        const nnt_tensor *cv;
        if (nnt_trace_result(tc, i, &path, &cv) != NNT_OK || !cv) continue;
        const nnt_tensor *gv = nnt_trace_get(tg, path);
        if (!gv || nnt_tensor_numel(gv) != nnt_tensor_numel(cv)) {
            fprintf(stderr, "\n  %s: %s saved on cpu, missing or of another size on cuda\n", label, path);
            bad++;
            continue;
        }
        if (ends_with(path, ".expert_indices")) {
            int64_t differ = t_index_sets_differ(hf16, cv, gv);
            if (differ) printf("\n    %-40s expert sets differ at %lld real tokens", path, (long long)differ);
            continue;
        }
        unsigned char *sel = select_real(hf16, cv);
        bad += !bf16_kind_agrees(label, path, cv, gv, sel);
        if (strcmp(path, "logits") == 0 || ends_with(path, ".layer_output")) {
            nnt_tensor y16, y32;
            int have16 = t_ref_get(hf16, path, &y16) == 0, have32 = have16 && t_ref_get(hf32, path, &y32) == 0;
            if (!have32 || nnt_tensor_numel(&y16) != nnt_tensor_numel(cv) || nnt_tensor_numel(&y32) != nnt_tensor_numel(cv)) {
                fprintf(stderr, "\n  %s: %s missing from %s or %s, or of another size\n", label, path, hf16->path,
                        hf32->path);
                bad++;
            } else {
                double denom = rms_sel(&y32, NULL, sel);
                double ours = rms_sel(cv, gv, sel) / denom, theirs = rms_sel(&y16, &y32, sel) / denom;
                int ok = ours <= theirs;
                printf("\n    %-40s %12.4g %12.4g%s", path, ours, theirs, ok ? "" : "  <- above the bound");
                if (!ok) {
                    fprintf(stderr, "\n  %s: %s: cuda and cpu %.4g apart at precision = bf16, bound %.4g\n", label,
                            path, ours, theirs);
                    bad++;
                }
                if (strcmp(path, "logits") == 0) *logits_bound = theirs;
            }
            if (have16) nnt_tensor_free(&y16);
            if (have32) nnt_tensor_free(&y32);
        } else if (!ends_with(path, ".expert_weights") && !ends_with(path, ".expert_outputs")) {
            /* context: the other values' distance, relative to their own RMS */
            double rc = rms_sel(cv, NULL, sel), rel = rc > 0 ? rms_sel(cv, gv, sel) / rc : 0;
            if (rel > worst_ctx) {
                worst_ctx = rel;
                worst_key = path;
            }
        }
        free(sel);
    }
    printf("\n    other values: worst relative RMS %.4g (%s)", worst_ctx, worst_key);
    CU_ASSERT_EQUAL(bad, 0);
    return n;
}

static void test_fixtures_bf16(void)
{
    static bf16_fixture fx[32];
    int n = discover_bf16(fx, 32), values = 0;
    CU_ASSERT(n > 0);
    if (n == 0) return;
    char ci[1024], gi[1024];
    CU_ASSERT_PTR_NOT_NULL_FATAL(ini_bf16(t_ini(), "test_cuda-cpu-bf16.ini", ci, sizeof ci));
    CU_ASSERT_PTR_NOT_NULL_FATAL(ini_bf16(NNT_TEST_CUDA_INI, "test_cuda-cuda-bf16.ini", gi, sizeof gi));
    nnt_runtime *rc = NULL, *rg = NULL;
    if (nnt_runtime_open(ci, &rc) != NNT_OK || nnt_runtime_open(gi, &rg) != NNT_OK) {
        fprintf(stderr, "\n  precision = bf16 runtimes (%s, %s): %s\n", ci, gi, nnt_last_error(rg ? rg : rc));
        CU_FAIL("precision = bf16 runtimes");
        nnt_runtime_close(rg);
        nnt_runtime_close(rc);
        return;
    }
    for (int i = 0; i < n; i++) {
        nnt_model *mc = NULL, *mg = NULL;
        T_OK(rc, nnt_model_load(rc, fx[i].model, &mc));
        T_OK(rg, nnt_model_load(rg, fx[i].model, &mg));
        CU_ASSERT_STRING_EQUAL(nnt_model_backend(mg), NNT_TEST_GPU_BACKEND);
        nnt_memory mem;
        T_OK(rc, nnt_model_memory(mc, &mem));
        CU_ASSERT_EQUAL(mem.precision, 1);
        T_OK(rg, nnt_model_memory(mg, &mem));
        CU_ASSERT_EQUAL(mem.precision, 1);
        t_ref r16, r32;
        if (open_ref(&r16, rc, fx[i].hf16) != 0 || open_ref(&r32, rc, fx[i].hf32) != 0 || !t_same_inputs(&r16, &r32)) {
            fprintf(stderr, "\n  %s, %s: cannot read their prompts, or they differ\n", fx[i].hf16, fx[i].hf32);
            CU_FAIL("bf16 reference prompts");
            nnt_model_free(mc);
            nnt_model_free(mg);
            continue;
        }
        nnt_trace *tc = t_run_reference(rc, mc, &r16);
        r16.rt = rg;
        nnt_trace *tg = t_run_reference(rg, mg, &r16);
        r16.rt = rc;
        const char *rel = fx[i].model + strlen(NNT_TEST_FIXTURES) + 1;
        char label[1200];
        snprintf(label, sizeof label, "%s (%s)", rel, strrchr(fx[i].hf16, '/') + 1);
        double bound = -1.0;
        values += compare_traces_bf16(label, &r16, &r32, tc, tg, &bound);
        nnt_trace_free(tc);
        nnt_trace_free(tg);
        if (bound > 0) {
            char sl[1300];
            snprintf(sl, sizeof sl, "%s at precision = bf16", rel);
            compare_session(sl, rc, rg, mc, mg, &r16, bound);
        }
        nnt_model_free(mc);
        nnt_model_free(mg);
    }
    nnt_runtime_close(rg);
    nnt_runtime_close(rc);
    printf("\n  %d fixtures at precision = bf16, %d values compared\n", n, values);
}

/* ---------------------------------------------------------------------------------------- */
/* The backward ops (nnt_backend.h, "backward"), cuda against cpu on the same inputs. Every    */
/* gradient output starts from the same random values on both sides, so that adding into it   */
/* (rather than overwriting) is checked too; shapes are odd on purpose. Float32 throughout:    */
/* max |cpu - cuda| <= TOL x the largest |cpu|.                                               */

/* A random gradient buffer on the host and its device copy. */
#define GRAD2(h, d, ...)                                                                                               \
    nnt_tensor h = hrand(__VA_ARGS__, 0.5f);                                                                           \
    nnt_tensor d = dev(&h)

/* linear_backward on one weight (host hw, prepared dw) at several row counts */
static void linear_bwd_cases(const char *label, const nnt_tensor *hw, const nnt_tensor *dw)
{
    static const int64_t rows[] = {1, 3, 37, 70};
    int64_t N = hw->shape[0], K = hw->shape[1];
    for (size_t r = 0; r < sizeof rows / sizeof *rows; r++) {
        int64_t M = rows[r];
        nnt_tensor gy = hrand(2, M, N, 0, 0, 0, 1), dgy = dev(&gy);
        GRAD2(gx, dgx, 2, M, K, 0, 0, 0);
        OK_CPU(cops->linear_backward(cctx, &gy, hw, &gx, err));
        OK_GPU(gops->linear_backward(gctx, &dgy, dw, &dgx, err));
        char what[240];
        snprintf(what, sizeof what, "linear_backward %s, M = %lld", label, (long long)M);
        same(what, &gx, &dgx, TOL);
        dev_free(&dgy);
        dev_free(&dgx);
        nnt_tensor_free(&gy);
        nnt_tensor_free(&gx);
    }
}

static void test_bwd_linear(void)
{
    enc_weight ws[] = {
        enc_make("F32 130x200", NNT_F32, NNT_DTYPE_INVALID, 130, 200, 0, 0),
        enc_make("BF16 130x200", NNT_BF16, NNT_DTYPE_INVALID, 130, 200, 0, 0),
        enc_make("F16 130x200", NNT_F16, NNT_DTYPE_INVALID, 130, 200, 0, 0),
        enc_make("F16 45x70 (one split)", NNT_F16, NNT_DTYPE_INVALID, 45, 70, 0, 0),
        enc_make("FP8 F32 scales 130x200 (128x128 blocks, partial)", NNT_F8_E4M3, NNT_F32, 130, 200, 128, 128),
        enc_make("FP8 BF16 scales 130x200", NNT_F8_E4M3, NNT_BF16, 130, 200, 128, 128),
        enc_make("FP8 F16 scales 130x256", NNT_F8_E4M3, NNT_F16, 130, 256, 128, 128),
        enc_make("FP8 E8M0 scales 130x256", NNT_F8_E4M3, NNT_F8_E8M0, 130, 256, 128, 128),
        enc_make("FP4 E8M0 groups of 32, 130x256", NNT_F4_E2M1, NNT_F8_E8M0, 130, 256, 1, 32),
        enc_make("FP4 E8M0 groups of 32, 130x200 (partial group)", NNT_F4_E2M1, NNT_F8_E8M0, 130, 200, 1, 32),
        enc_make("FP4 F32 groups of 32, 130x256", NNT_F4_E2M1, NNT_F32, 130, 256, 1, 32),
    };
    const int n = (int)(sizeof ws / sizeof *ws);
    for (int i = 0; i < n; i++) {
        nnt_tensor dw;
        OK_GPU(gops->prepare_weight(gctx, &ws[i].t, &dw, err));
        CU_ASSERT_EQUAL(dw.dtype, ws[i].t.dtype); /* read as stored */
        linear_bwd_cases(ws[i].name, &ws[i].t, &dw);
        if (ws[i].t.dtype == NNT_F8_E4M3) { /* a view of rows 16 .. 129, starting inside a block row */
            nnt_tensor hv, dv;
            CU_ASSERT_FATAL(nnt_tensor_rows(&ws[i].t, 0, 16, 114, &hv) && nnt_tensor_rows(&dw, 0, 16, 114, &dv));
            char vl[240];
            snprintf(vl, sizeof vl, "%s, rows 16..129", ws[i].name);
            linear_bwd_cases(vl, &hv, &dv);
        }
        gops->release_weight(gctx, &dw);
        enc_free(&ws[i]);
    }
    /* shapes that do not chain are refused */
    nnt_tensor w = hrand(2, 9, 7, 0, 0, 0, 1), gy = hrand(2, 3, 8, 0, 0, 0, 1), gx = host(NNT_F32, 2, 3, 7, 0, 0, 0);
    nnt_tensor dw = dev(&w), dgy = dev(&gy), dgx = dev(&gx);
    nnt_error e = {0};
    CU_ASSERT_EQUAL(gops->linear_backward(gctx, &dgy, &dw, &dgx, &e), NNT_ERR_SHAPE);
    nnt_tensor *d[] = {&dw, &dgy, &dgx};
    dfree(3, d);
    nnt_tensor *h[] = {&w, &gy, &gx};
    hfree(3, h);
}

static void test_bwd_elementwise(void)
{
    /* rms_norm_backward: F32 gain, BF16 gain as stored, no gain */
    const int64_t M = 13, D = 70;
    nnt_tensor x = hrand(2, M, D, 0, 0, 0, 2), gy = hrand(2, M, D, 0, 0, 0, 1), w = hrand(1, D, 0, 0, 0, 0, 1);
    nnt_tensor wb = host(NNT_BF16, 1, D, 0, 0, 0, 0);
    for (int64_t i = 0; i < D; i++) ((uint16_t *)wb.data)[i] = to_bf16(((float *)w.data)[i]);
    nnt_tensor dx = dev(&x), dgy = dev(&gy), dw = dev(&w), dwb = dev(&wb);
    const nnt_tensor *gains_h[3] = {&w, &wb, NULL}, *gains_d[3] = {&dw, &dwb, NULL};
    const char *gname[3] = {"rms_norm_backward, F32 gain", "rms_norm_backward, BF16 gain", "rms_norm_backward, no gain"};
    for (int k = 0; k < 3; k++) {
        GRAD2(gx, dgx, 2, M, D, 0, 0, 0);
        OK_CPU(cops->rms_norm_backward(cctx, &x, gains_h[k], 1e-5f, &gy, &gx, err));
        OK_GPU(gops->rms_norm_backward(gctx, &dx, gains_d[k], 1e-5f, &dgy, &dgx, err));
        same(gname[k], &gx, &dgx, TOL);
        dev_free(&dgx);
        nnt_tensor_free(&gx);
    }
    /* accumulate */
    {
        GRAD2(acc, dacc, 2, M, D, 0, 0, 0);
        OK_CPU(cops->accumulate(cctx, &x, -0.75f, &acc, err));
        OK_GPU(gops->accumulate(gctx, &dx, -0.75f, &dacc, err));
        same("accumulate", &acc, &dacc, TOL);
        dev_free(&dacc);
        nnt_tensor_free(&acc);
    }
    /* swap12_backward: dy [2, 5, 3, 7] -> dx [2, 3, 5, 7] */
    {
        nnt_tensor s = hrand(4, 2, 5, 3, 7, 0, 1), ds = dev(&s);
        GRAD2(sx, dsx, 4, 2, 3, 5, 7, 0);
        OK_CPU(cops->swap12_backward(cctx, &s, &sx, err));
        OK_GPU(gops->swap12_backward(gctx, &ds, &dsx, err));
        same("swap12_backward", &sx, &dsx, TOL);
        nnt_tensor *d[] = {&ds, &dsx};
        dfree(2, d);
        nnt_tensor *h[] = {&s, &sx};
        hfree(2, h);
    }
    /* swiglu_backward: with a gate (no limit; a limit with entries exactly at it), with the act
     * output's own gradient, and without a gate (an edited activation) */
    {
        const int64_t I = 45;
        nnt_tensor g = hrand(2, M, I, 0, 0, 0, 3), u = hrand(2, M, I, 0, 0, 0, 3), a = hrand(2, M, I, 0, 0, 0, 1);
        nnt_tensor go = hrand(2, M, I, 0, 0, 0, 1), ga = hrand(2, M, I, 0, 0, 0, 1);
        ((float *)g.data)[3] = 1.5f;
        ((float *)u.data)[4] = -1.5f;
        ((float *)u.data)[5] = 1.5f;
        nnt_tensor dg = dev(&g), du = dev(&u), da = dev(&a), dgo = dev(&go), dga = dev(&ga);
        for (int mode = 0; mode < 4; mode++) {
            float L = mode == 1 || mode == 3 ? 1.5f : 0.0f;
            int gated = mode < 3, with_ga = mode == 2;
            GRAD2(gg, dgg, 2, M, I, 0, 0, 0);
            GRAD2(gu, dgu, 2, M, I, 0, 0, 0);
            GRAD2(gact, dgact, 2, M, I, 0, 0, 0);
            if (gated) {
                OK_CPU(cops->swiglu_backward(cctx, &g, &u, L, NULL, &go, &gg, &gu, with_ga ? &ga : NULL, err));
                OK_GPU(gops->swiglu_backward(gctx, &dg, &du, L, NULL, &dgo, &dgg, &dgu, with_ga ? &dga : NULL, err));
            } else {
                OK_CPU(cops->swiglu_backward(cctx, NULL, &u, L, &a, &go, NULL, &gu, &gact, err));
                OK_GPU(gops->swiglu_backward(gctx, NULL, &du, L, &da, &dgo, NULL, &dgu, &dgact, err));
            }
            static const char *names[4] = {"no limit", "limit 1.5", "with the act output's gradient",
                                           "no gate, limit 1.5"};
            char what[96];
            snprintf(what, sizeof what, "swiglu_backward %s: dgate", names[mode]);
            same(what, &gg, &dgg, TOL);
            snprintf(what, sizeof what, "swiglu_backward %s: dup", names[mode]);
            same(what, &gu, &dgu, TOL);
            snprintf(what, sizeof what, "swiglu_backward %s: dact", names[mode]);
            same(what, &gact, &dgact, TOL);
            nnt_tensor *d[] = {&dgg, &dgu, &dgact};
            dfree(3, d);
            nnt_tensor *h[] = {&gg, &gu, &gact};
            hfree(3, h);
        }
        nnt_tensor *d[] = {&dg, &du, &da, &dgo, &dga};
        dfree(5, d);
        nnt_tensor *h[] = {&g, &u, &a, &go, &ga};
        hfree(5, h);
    }
    /* copy_cols_backward between two tensors, and inside one with ranges apart */
    {
        nnt_tensor gd = hrand(2, M, 50, 0, 0, 0, 1), dgd = dev(&gd);
        GRAD2(gs, dgs, 2, M, 33, 0, 0, 0);
        OK_CPU(cops->copy_cols_backward(cctx, &gd, 17, &gs, 5, 20, err));
        OK_GPU(gops->copy_cols_backward(gctx, &dgd, 17, &dgs, 5, 20, err));
        same("copy_cols_backward", &gs, &dgs, TOL);
        OK_CPU(cops->copy_cols_backward(cctx, &gd, 30, &gd, 2, 19, err));
        OK_GPU(gops->copy_cols_backward(gctx, &dgd, 30, &dgd, 2, 19, err));
        same("copy_cols_backward within one tensor", &gd, &dgd, TOL);
        nnt_error e = {0};
        CU_ASSERT_EQUAL(gops->copy_cols_backward(gctx, &dgd, 10, &dgd, 3, 30, &e), NNT_ERR_INVALID_ARGUMENT);
        nnt_tensor *d[] = {&dgd, &dgs};
        dfree(2, d);
        nnt_tensor *h[] = {&gd, &gs};
        hfree(2, h);
    }
    nnt_tensor *d[] = {&dx, &dgy, &dw, &dwb};
    dfree(4, d);
    nnt_tensor *h[] = {&x, &gy, &w, &wb};
    hfree(4, h);
}

static void test_bwd_attention(void)
{
    /* rope_backward, both styles, in place */
    {
        const int64_t B = 2, H = 3, T = 9, D = 40;
        int32_t pos[18];
        float inv[12];
        for (int i = 0; i < 18; i++) pos[i] = i % 9 == 0 ? 0 : (i * 5) % 23 - 4;
        for (int i = 0; i < 12; i++) inv[i] = 1.0f / powf(10000.0f, (float)(2 * i) / 24.0f);
        for (int style = 0; style < 2; style++) {
            nnt_tensor g = hrand(4, B, H, T, D, 0, 1), dg = dev(&g);
            OK_CPU(cops->rope_backward(cctx, &g, pos, inv, 8, 24, (nnt_rope_style)style, 1.2f, err));
            OK_GPU(gops->rope_backward(gctx, &dg, pos, inv, 8, 24, (nnt_rope_style)style, 1.2f, err));
            same(style ? "rope_backward interleaved" : "rope_backward neox", &g, &dg, TOL);
            dev_free(&dg);
            nnt_tensor_free(&g);
        }
    }
    /* scores, softmax and mix with GQA under a causal mask with a sliding window and padding,
     * under the full mask of test_attention (compressed entries outside the window, a
     * per-query selection), and with none; softmax with and without sinks */
    const int64_t B = 2, Hq = 4, Hkv = 2, T = 11, S = 14, D = 16, Dv = 12;
    nnt_tensor q = hrand(4, B, Hq, T, D, 0, 1), k = hrand(4, B, Hkv, S, D, 0, 1), v = hrand(4, B, Hkv, S, Dv, 0, 1);
    nnt_tensor s = host(NNT_F32, 4, B, Hq, T, S, 0), p = host(NNT_F32, 4, B, Hq, T, S, 0);
    nnt_tensor gout = hrand(4, B, T, Hq, Dv, 0, 1), gp = hrand(4, B, Hq, T, S, 0, 1);
    nnt_tensor dq = dev(&q), dk = dev(&k), dv = dev(&v), dgout = dev(&gout), dgp = dev(&gp);
    int32_t qpos[22], kpos[28];
    uint8_t kval[28], qval[22], nowin[14], allow[2 * 11 * 14];
    for (int b = 0; b < B; b++) {
        for (int t = 0; t < T; t++) {
            int pad = b == 1 && t < 3;
            qval[b * T + t] = !pad;
            qpos[b * T + t] = pad ? 0 : (int32_t)(t - (b == 1 ? 3 : 0));
            kval[b * S + t] = !pad;
            kpos[b * S + t] = qpos[b * T + t];
        }
        for (int j = (int)T; j < S; j++) {
            kval[b * S + j] = 1;
            kpos[b * S + j] = (j - (int)T + 1) * 3 - 1;
        }
    }
    for (int j = 0; j < S; j++) nowin[j] = j >= T;
    for (int i = 0; i < 2 * 11 * 14; i++) allow[i] = (i * 7) % 5 != 0;
    nnt_attn_mask window = {.struct_size = sizeof(nnt_attn_mask), .q_pos = qpos, .k_pos = kpos, .key_valid = kval, .query_valid = qval, .key_no_window = NULL, .allow = NULL, .causal = 1, .window = 4};
    nnt_attn_mask full = {.struct_size = sizeof(nnt_attn_mask), .q_pos = qpos, .k_pos = kpos, .key_valid = kval, .query_valid = qval, .key_no_window = nowin, .allow = allow, .causal = 1, .window = 4};
    const nnt_attn_mask *masks[3] = {&window, &full, NULL};
    const char *names[3] = {"causal, window 4, padding", "full mask", "no mask"};
    float sinks[4] = {0.5f, -1.0f, 2.0f, 0.0f};
    for (int mi = 0; mi < 3; mi++) {
        char what[128];
        /* attn_scores_backward with both gradients, then each alone */
        for (int want = 0; want < 3; want++) {
            GRAD2(gq, dgq, 4, B, Hq, T, D, 0);
            GRAD2(gk, dgk, 4, B, Hkv, S, D, 0);
            OK_CPU(cops->attn_scores_backward(cctx, &q, &k, 0.25f, masks[mi], &gp, want != 2 ? &gq : NULL,
                                              want != 1 ? &gk : NULL, err));
            OK_GPU(gops->attn_scores_backward(gctx, &dq, &dk, 0.25f, masks[mi], &dgp, want != 2 ? &dgq : NULL,
                                              want != 1 ? &dgk : NULL, err));
            snprintf(what, sizeof what, "attn_scores_backward, %s%s: dq", names[mi], want ? ", one gradient" : "");
            same(what, &gq, &dgq, TOL);
            snprintf(what, sizeof what, "attn_scores_backward, %s%s: dk", names[mi], want ? ", one gradient" : "");
            same(what, &gk, &dgk, TOL);
            nnt_tensor *d[] = {&dgq, &dgk};
            dfree(2, d);
            nnt_tensor *h[] = {&gq, &gk};
            hfree(2, h);
        }
        for (int withsink = 0; withsink < 2; withsink++) {
            /* the forward on the cpu gives p; both backends then take the same p */
            OK_CPU(cops->attn_scores(cctx, &q, &k, 0.25f, masks[mi], &s, err));
            OK_CPU(cops->softmax(cctx, &s, withsink ? sinks : NULL, &p, err));
            nnt_tensor dp = dev(&p);
            GRAD2(gs, dgs, 4, B, Hq, T, S, 0);
            OK_CPU(cops->softmax_backward(cctx, &p, withsink ? sinks : NULL, &gp, &gs, err));
            OK_GPU(gops->softmax_backward(gctx, &dp, withsink ? sinks : NULL, &dgp, &dgs, err));
            snprintf(what, sizeof what, "softmax_backward%s, %s", withsink ? " with sinks" : "", names[mi]);
            same(what, &gs, &dgs, TOL);
            GRAD2(gpp, dgpp, 4, B, Hq, T, S, 0);
            GRAD2(gv, dgv, 4, B, Hkv, S, Dv, 0);
            OK_CPU(cops->attn_mix_backward(cctx, &p, &v, &gout, &gpp, &gv, err));
            OK_GPU(gops->attn_mix_backward(gctx, &dp, &dv, &dgout, &dgpp, &dgv, err));
            snprintf(what, sizeof what, "attn_mix_backward%s, %s: dp", withsink ? " with sinks" : "", names[mi]);
            same(what, &gpp, &dgpp, TOL);
            snprintf(what, sizeof what, "attn_mix_backward%s, %s: dv", withsink ? " with sinks" : "", names[mi]);
            same(what, &gv, &dgv, TOL);
            OK_CPU(cops->attn_mix_backward(cctx, &p, &v, &gout, NULL, &gv, err));
            OK_GPU(gops->attn_mix_backward(gctx, &dp, &dv, &dgout, NULL, &dgv, err));
            same("attn_mix_backward, dv alone", &gv, &dgv, TOL);
            nnt_tensor *d[] = {&dp, &dgs, &dgpp, &dgv};
            dfree(4, d);
            nnt_tensor *h[] = {&gs, &gpp, &gv};
            hfree(3, h);
        }
    }
    nnt_tensor *d[] = {&dq, &dk, &dv, &dgout, &dgp};
    dfree(5, d);
    nnt_tensor *h[] = {&q, &k, &v, &s, &p, &gout, &gp};
    hfree(7, h);
}

static void test_bwd_route(void)
{
    const int64_t M = 37, E = 16;
    const int K = 4;
    nnt_tensor lg = hrand(2, M, E, 0, 0, 0, 3), bias = hrand(1, E, 0, 0, 0, 0, 0.5f), gw = hrand(2, M, K, 0, 0, 0, 1);
    nnt_tensor idx = host(NNT_I32, 2, M, K, 0, 0, 0), w = host(NNT_F32, 2, M, K, 0, 0, 0);
    nnt_tensor dl = dev(&lg), dgw = dev(&gw);
    struct {
        const char *name;
        nnt_route_params p;
    } cases[] = {
        {"sigmoid, 4 groups keep 2, renormalised, scaled", {.struct_size = sizeof(nnt_route_params), .score_fn = NNT_SCORE_SIGMOID, .top_k = K, .n_group = 4, .topk_group = 2, .renormalize = 1, .renorm_eps = 1e-20f, .scaling_factor = 2.5f, .indices_given = 0}},
        {"sigmoid, not renormalised", {.struct_size = sizeof(nnt_route_params), .score_fn = NNT_SCORE_SIGMOID, .top_k = K, .n_group = 1, .topk_group = 1, .renormalize = 0, .renorm_eps = 0.0f, .scaling_factor = 1.0f, .indices_given = 0}},
        {"softmax, not renormalised", {.struct_size = sizeof(nnt_route_params), .score_fn = NNT_SCORE_SOFTMAX, .top_k = K, .n_group = 1, .topk_group = 1, .renormalize = 0, .renorm_eps = 0.0f, .scaling_factor = 1.0f, .indices_given = 0}},
        {"softmax, renormalised, scaled", {.struct_size = sizeof(nnt_route_params), .score_fn = NNT_SCORE_SOFTMAX, .top_k = K, .n_group = 1, .topk_group = 1, .renormalize = 1, .renorm_eps = 0.0f, .scaling_factor = 1.7f, .indices_given = 0}},
        {"sqrt softplus, renormalised", {.struct_size = sizeof(nnt_route_params), .score_fn = NNT_SCORE_SQRT_SOFTPLUS, .top_k = K, .n_group = 0, .topk_group = 0, .renormalize = 1, .renorm_eps = 0.0f, .scaling_factor = 1.5f, .indices_given = 0}},
        {"sqrt softplus, not renormalised", {.struct_size = sizeof(nnt_route_params), .score_fn = NNT_SCORE_SQRT_SOFTPLUS, .top_k = K, .n_group = 0, .topk_group = 0, .renormalize = 0, .renorm_eps = 0.0f, .scaling_factor = 1.0f, .indices_given = 0}},
    };
    ((float *)lg.data)[5] = 25.0f; /* softplus' linear branch */
    dev_free(&dl);
    dl = dev(&lg);
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        for (int given = 0; given < 2; given++) {
            /* the forward's choice on the cpu; given: hash-style indices with repeated experts */
            if (given)
                for (int64_t j = 0; j < M * K; j++) ((int32_t *)idx.data)[j] = (int32_t)((j * 5 + j / 3) % E);
            else
                OK_CPU(cops->route(cctx, &lg, &bias, &cases[i].p, &idx, &w, err));
            nnt_tensor di = dev(&idx);
            GRAD2(gl, dgl, 2, M, E, 0, 0, 0);
            OK_CPU(cops->route_backward(cctx, &lg, &bias, &cases[i].p, &idx, &gw, &gl, err));
            OK_GPU(gops->route_backward(gctx, &dl, NULL, &cases[i].p, &di, &dgw, &dgl, err));
            char what[160];
            snprintf(what, sizeof what, "route_backward %s%s", cases[i].name, given ? ", given indices with repeats" : "");
            same(what, &gl, &dgl, TOL);
            dev_free(&di);
            dev_free(&dgl);
            nnt_tensor_free(&gl);
        }
    }
    /* an index out of range is refused, naming it */
    ((int32_t *)idx.data)[9] = (int32_t)E;
    nnt_tensor dbad = dev(&idx), gl = host(NNT_F32, 2, M, E, 0, 0, 0), dgl = dev(&gl);
    nnt_error e = {0};
    CU_ASSERT_EQUAL(gops->route_backward(gctx, &dl, NULL, &cases[0].p, &dbad, &dgw, &dgl, &e), NNT_ERR_INVALID_ARGUMENT);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "outside"));
    nnt_tensor *d[] = {&dl, &dgw, &dbad, &dgl};
    dfree(4, d);
    nnt_tensor *h[] = {&lg, &bias, &gw, &idx, &w, &gl};
    hfree(6, h);
}

static void test_bwd_rows(void)
{
    const int64_t M = 20, H = 33;
    int32_t rows[9] = {3, 0, 19, 7, 7, 12, 3, 5, 3}; /* repeats */
    float scale[9] = {0.5f, 1.0f, -2.0f, 0.25f, 3.0f, 1.5f, -1.0f, 0.75f, 2.0f};
    /* gather_rows_backward: repeated rows add up */
    {
        nnt_tensor gd = hrand(2, 9, H, 0, 0, 0, 1), dgd = dev(&gd);
        GRAD2(gs, dgs, 2, M, H, 0, 0, 0);
        OK_CPU(cops->gather_rows_backward(cctx, &gd, rows, 9, &gs, err));
        OK_GPU(gops->gather_rows_backward(gctx, &dgd, rows, 9, &dgs, err));
        same("gather_rows_backward, repeated rows", &gs, &dgs, TOL);
        int32_t bad = 20;
        nnt_error e = {0};
        CU_ASSERT_EQUAL(gops->gather_rows_backward(gctx, &dgd, &bad, 1, &dgs, &e), NNT_ERR_INVALID_ARGUMENT);
        nnt_tensor *d[] = {&dgd, &dgs};
        dfree(2, d);
        nnt_tensor *h[] = {&gd, &gs};
        hfree(2, h);
    }
    /* scatter_add_rows_backward and scatter_rows_backward, repeated rows, with and without
     * scales, with the scales' gradient and without */
    nnt_tensor src = hrand(2, 9, H, 0, 0, 0, 1), gdst = hrand(2, M, H, 0, 0, 0, 1), dsrc = dev(&src), dgdst = dev(&gdst);
    for (int last = 0; last < 2; last++)
        for (int withscale = 0; withscale < 2; withscale++)
            for (int wantscale = 0; wantscale < 2; wantscale++) {
                GRAD2(gsrc, dgsrc, 2, 9, H, 0, 0, 0);
                GRAD2(gsc, dgsc, 1, 9, 0, 0, 0, 0);
                const float *sc = withscale ? scale : NULL;
                if (last) {
                    OK_CPU(cops->scatter_rows_backward(cctx, &src, rows, sc, 9, &gdst, &gsrc, wantscale ? &gsc : NULL, err));
                    OK_GPU(gops->scatter_rows_backward(gctx, &dsrc, rows, sc, 9, &dgdst, &dgsrc, wantscale ? &dgsc : NULL,
                                                       err));
                } else {
                    OK_CPU(cops->scatter_add_rows_backward(cctx, &src, rows, sc, 9, &gdst, &gsrc, wantscale ? &gsc : NULL,
                                                           err));
                    OK_GPU(gops->scatter_add_rows_backward(gctx, &dsrc, rows, sc, 9, &dgdst, &dgsrc,
                                                           wantscale ? &dgsc : NULL, err));
                }
                char what[160];
                snprintf(what, sizeof what, "%s, repeated rows%s%s: dsrc", last ? "scatter_rows_backward" : "scatter_add_rows_backward",
                         withscale ? ", scaled" : "", wantscale ? ", dscale" : "");
                same(what, &gsrc, &dgsrc, TOL);
                snprintf(what, sizeof what, "%s, repeated rows%s%s: dscale", last ? "scatter_rows_backward" : "scatter_add_rows_backward",
                         withscale ? ", scaled" : "", wantscale ? ", dscale" : "");
                same(what, &gsc, &dgsc, TOL);
                nnt_tensor *d[] = {&dgsrc, &dgsc};
                dfree(2, d);
                nnt_tensor *h[] = {&gsrc, &gsc};
                hfree(2, h);
            }
    /* sum_axis1_backward: dy [7, 33] -> dx [7, 3, 33] */
    {
        nnt_tensor g = hrand(2, 7, H, 0, 0, 0, 1), dg = dev(&g);
        GRAD2(gx, dgx, 3, 7, 3, H, 0, 0);
        OK_CPU(cops->sum_axis1_backward(cctx, &g, &gx, err));
        OK_GPU(gops->sum_axis1_backward(gctx, &dg, &dgx, err));
        same("sum_axis1_backward", &gx, &dgx, TOL);
        nnt_tensor *d[] = {&dg, &dgx};
        dfree(2, d);
        nnt_tensor *h[] = {&g, &gx};
        hfree(2, h);
    }
    /* scale_rows_backward: weights [4, 5] read flat, indices repeating */
    {
        const int32_t at[9] = {7, 0, 19, 7, 12, 3, 7, 18, 0};
        nnt_tensor w = hrand(2, 4, 5, 0, 0, 0, 2), dwt = dev(&w), gy = hrand(2, 9, H, 0, 0, 0, 1), dgy = dev(&gy);
        for (int want = 0; want < 3; want++) {
            GRAD2(gx, dgx, 2, 9, H, 0, 0, 0);
            GRAD2(gw, dgw, 2, 4, 5, 0, 0, 0);
            OK_CPU(cops->scale_rows_backward(cctx, &src, &w, at, 9, &gy, want != 2 ? &gx : NULL, want != 1 ? &gw : NULL, err));
            OK_GPU(gops->scale_rows_backward(gctx, &dsrc, &dwt, at, 9, &dgy, want != 2 ? &dgx : NULL,
                                             want != 1 ? &dgw : NULL, err));
            same(want ? "scale_rows_backward, one gradient: dx" : "scale_rows_backward, repeated indices: dx", &gx, &dgx, TOL);
            same(want ? "scale_rows_backward, one gradient: dw" : "scale_rows_backward, repeated indices: dw", &gw, &dgw, TOL);
            nnt_tensor *d[] = {&dgx, &dgw};
            dfree(2, d);
            nnt_tensor *h[] = {&gx, &gw};
            hfree(2, h);
        }
        const int32_t over[9] = {7, 0, 19, 20, 12, 3, 7, 18, 0};
        nnt_tensor gx = host(NNT_F32, 2, 9, H, 0, 0, 0), dgx = dev(&gx);
        nnt_error e = {0};
        CU_ASSERT_EQUAL(gops->scale_rows_backward(gctx, &dsrc, &dwt, over, 9, &dgy, &dgx, NULL, &e), NNT_ERR_INVALID_ARGUMENT);
        CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "idx[3] = 20"));
        nnt_tensor *d[] = {&dwt, &dgy, &dgx};
        dfree(3, d);
        nnt_tensor *h[] = {&w, &gy, &gx};
        hfree(3, h);
    }
    nnt_tensor *d[] = {&dsrc, &dgdst};
    dfree(2, d);
    nnt_tensor *h[] = {&src, &gdst};
    hfree(2, h);
}

static void test_bwd_hyper(void)
{
    const int64_t M = 9, n = 4, H = 67, outs = (2 + n) * n;
    nnt_tensor x = hrand(3, M, n, H, 0, 0, 1), fn = hrand(2, outs, n * H, 0, 0, 0, 0.05f), base = hrand(1, outs, 0, 0, 0, 0, 0.5f);
    nnt_tensor sc = host(NNT_F32, 1, 3, 0, 0, 0, 0);
    float scv[3] = {0.8f, 1.1f, 0.6f};
    memcpy(sc.data, scv, sizeof scv);
    nnt_tensor gpost = hrand(2, M, n, 0, 0, 0, 1), gcomb = hrand(3, M, n, n, 0, 0, 1), gcoll = hrand(2, M, H, 0, 0, 0, 1);
    nnt_tensor dx = dev(&x), dgpost = dev(&gpost), dgcomb = dev(&gcomb), dgcoll = dev(&gcoll), dfn, dbase, dsc;
    OK_GPU(gops->prepare_weight(gctx, &fn, &dfn, err));
    OK_GPU(gops->prepare_weight(gctx, &base, &dbase, err));
    OK_GPU(gops->prepare_weight(gctx, &sc, &dsc, err));
    /* all three output gradients, then each alone; 20 Sinkhorn iterations and 1 */
    for (int which = 0; which < 5; which++) {
        int iters = which == 4 ? 1 : 20;
        int wp = which == 0 || which == 1 || which == 4, wc = which == 0 || which == 2 || which == 4, wl = which == 0 || which == 3;
        GRAD2(gx, dgx, 3, M, n, H, 0, 0);
        OK_CPU(cops->hyper_connection_backward(cctx, &x, &fn, &base, &sc, 1e-6f, 1e-6f, iters, wp ? &gpost : NULL,
                                               wc ? &gcomb : NULL, wl ? &gcoll : NULL, &gx, err));
        OK_GPU(gops->hyper_connection_backward(gctx, &dx, &dfn, &dbase, &dsc, 1e-6f, 1e-6f, iters, wp ? &dgpost : NULL,
                                               wc ? &dgcomb : NULL, wl ? &dgcoll : NULL, &dgx, err));
        static const char *names[5] = {"every output", "post alone", "comb alone", "collapsed alone",
                                       "post and comb, one Sinkhorn iteration"};
        char what[128];
        snprintf(what, sizeof what, "hyper_connection_backward, %s", names[which]);
        same(what, &gx, &dgx, TOL);
        dev_free(&dgx);
        nnt_tensor_free(&gx);
    }
    /* hyper_mix_backward, every gradient and then dx alone */
    nnt_tensor a = hrand(2, M, H, 0, 0, 0, 1), post = hrand(2, M, n, 0, 0, 0, 1), comb = hrand(3, M, n, n, 0, 0, 1);
    nnt_tensor gout = hrand(3, M, n, H, 0, 0, 1), da = dev(&a), dpost = dev(&post), dcomb = dev(&comb), dgout = dev(&gout);
    for (int all = 1; all >= 0; all--) {
        GRAD2(gx, dgx, 3, M, n, H, 0, 0);
        GRAD2(ga, dga, 2, M, H, 0, 0, 0);
        GRAD2(gp, dgp, 2, M, n, 0, 0, 0);
        GRAD2(gc, dgc, 3, M, n, n, 0, 0);
        OK_CPU(cops->hyper_mix_backward(cctx, &x, &a, &post, &comb, &gout, &gx, all ? &ga : NULL, all ? &gp : NULL,
                                        all ? &gc : NULL, err));
        OK_GPU(gops->hyper_mix_backward(gctx, &dx, &da, &dpost, &dcomb, &dgout, &dgx, all ? &dga : NULL,
                                        all ? &dgp : NULL, all ? &dgc : NULL, err));
        same(all ? "hyper_mix_backward: dx" : "hyper_mix_backward, dx alone", &gx, &dgx, TOL);
        same("hyper_mix_backward: da", &ga, &dga, TOL);
        same("hyper_mix_backward: dpost", &gp, &dgp, TOL);
        same("hyper_mix_backward: dcomb", &gc, &dgc, TOL);
        nnt_tensor *d[] = {&dgx, &dga, &dgp, &dgc};
        dfree(4, d);
        nnt_tensor *h[] = {&gx, &ga, &gp, &gc};
        hfree(4, h);
    }
    /* hyper_head_backward */
    {
        nnt_tensor hfn = hrand(2, n, n * H, 0, 0, 0, 0.05f), hbase = hrand(1, n, 0, 0, 0, 0, 0.5f), dhfn, dhbase;
        OK_GPU(gops->prepare_weight(gctx, &hfn, &dhfn, err));
        OK_GPU(gops->prepare_weight(gctx, &hbase, &dhbase, err));
        GRAD2(gx, dgx, 3, M, n, H, 0, 0);
        OK_CPU(cops->hyper_head_backward(cctx, &x, &hfn, &hbase, &sc, 1e-6f, 1e-6f, &gcoll, &gx, err));
        OK_GPU(gops->hyper_head_backward(gctx, &dx, &dhfn, &dhbase, &dsc, 1e-6f, 1e-6f, &dgcoll, &dgx, err));
        same("hyper_head_backward", &gx, &dgx, TOL);
        gops->release_weight(gctx, &dhfn);
        gops->release_weight(gctx, &dhbase);
        dev_free(&dgx);
        nnt_tensor *h[] = {&hfn, &hbase, &gx};
        hfree(3, h);
    }
    /* compress_backward with and without overlap; a row with fewer entries and a late start */
    {
        const int64_t Bc = 2, T = 23, D = 8, rate = 4, C = 5;
        int32_t first[2] = {0, 3}, count[2] = {5, 4};
        for (int overlap = 0; overlap < 2; overlap++) {
            int64_t cD = overlap ? 2 * D : D;
            nnt_tensor kv = hrand(3, Bc, T, cD, 0, 0, 1), gate = hrand(3, Bc, T, cD, 0, 0, 2), ape = hrand(2, rate, cD, 0, 0, 0, 1);
            nnt_tensor go = hrand(3, Bc, C, D, 0, 0, 1), dkv = dev(&kv), dgate = dev(&gate), dgo = dev(&go), dape;
            OK_GPU(gops->prepare_weight(gctx, &ape, &dape, err));
            GRAD2(gk, dgk, 3, Bc, T, cD, 0, 0);
            GRAD2(gg, dgg, 3, Bc, T, cD, 0, 0);
            OK_CPU(cops->compress_backward(cctx, &kv, &gate, &ape, (int)rate, overlap, first, count, &go, &gk, &gg, err));
            OK_GPU(gops->compress_backward(gctx, &dkv, &dgate, &dape, (int)rate, overlap, first, count, &dgo, &dgk, &dgg,
                                           err));
            same(overlap ? "compress_backward with overlap: dkv" : "compress_backward: dkv", &gk, &dgk, TOL);
            same(overlap ? "compress_backward with overlap: dgate" : "compress_backward: dgate", &gg, &dgg, TOL);
            gops->release_weight(gctx, &dape);
            nnt_tensor *d[] = {&dkv, &dgate, &dgo, &dgk, &dgg};
            dfree(5, d);
            nnt_tensor *h[] = {&kv, &gate, &ape, &go, &gk, &gg};
            hfree(6, h);
        }
    }
    nnt_tensor *w[] = {&dfn, &dbase, &dsc};
    for (int i = 0; i < 3; i++) gops->release_weight(gctx, w[i]);
    nnt_tensor *d[] = {&dx, &dgpost, &dgcomb, &dgcoll, &da, &dpost, &dcomb, &dgout};
    dfree(8, d);
    nnt_tensor *h[] = {&x, &fn, &base, &sc, &gpost, &gcomb, &gcoll, &a, &post, &comb, &gout};
    hfree(11, h);
}

/* conv1d_causal_backward on one configuration: T tokens (fewer than the W - 1 carried entries
 * sends dstate_out's gradient into dstate_in), SiLU or none, with or without state_in and
 * dstate_out, the kernel F32 or BF16 as stored. Without state_in, dstate_in must stay as it was. */
static void bwd_conv_case(int64_t T, int act, int with_state, int with_dso, int bf16_kernel)
{
    const int64_t B = 2, C = 37, W = 4, Ws = W - 1;
    nnt_tensor x = hrand(3, B, T, C, 0, 0, 1), wf = hrand(2, C, W, 0, 0, 0, 0.5f), si = hrand(3, B, Ws, C, 0, 0, 1);
    nnt_tensor gy = hrand(3, B, T, C, 0, 0, 1), gso = hrand(3, B, Ws, C, 0, 0, 1), w;
    if (bf16_kernel) {
        w = host(NNT_BF16, 2, C, W, 0, 0, 0);
        for (int64_t i = 0; i < C * W; i++) ((uint16_t *)w.data)[i] = to_bf16(((float *)wf.data)[i]);
    } else {
        w = wf;
        wf.data = NULL;
    }
    nnt_tensor dx = dev(&x), dsi = dev(&si), dgy = dev(&gy), dgso = dev(&gso), dw;
    OK_GPU(gops->prepare_weight(gctx, &w, &dw, err));
    GRAD2(gx, dgx, 3, B, T, C, 0, 0);
    GRAD2(gs, dgs, 3, B, Ws, C, 0, 0);
    OK_CPU(cops->conv1d_causal_backward(cctx, &x, &w, with_state ? &si : NULL, act, &gy, with_dso ? &gso : NULL, &gx,
                                        &gs, err));
    OK_GPU(gops->conv1d_causal_backward(gctx, &dx, &dw, with_state ? &dsi : NULL, act, &dgy, with_dso ? &dgso : NULL,
                                        &dgx, &dgs, err));
    char what[160];
    snprintf(what, sizeof what, "conv1d_causal_backward T=%lld act=%d state=%d dstate_out=%d %s kernel: dx",
             (long long)T, act, with_state, with_dso, bf16_kernel ? "BF16" : "F32");
    same(what, &gx, &dgx, TOL);
    snprintf(what, sizeof what, "conv1d_causal_backward T=%lld act=%d state=%d dstate_out=%d %s kernel: dstate_in",
             (long long)T, act, with_state, with_dso, bf16_kernel ? "BF16" : "F32");
    same(what, &gs, &dgs, with_state ? TOL : 0);
    gops->release_weight(gctx, &dw);
    nnt_tensor *d[] = {&dx, &dsi, &dgy, &dgso, &dgx, &dgs};
    dfree(6, d);
    if (wf.data) nnt_tensor_free(&wf);
    nnt_tensor *h[] = {&x, &w, &si, &gy, &gso, &gx, &gs};
    hfree(7, h);
}

/* delta_rule_backward on one configuration: B 2, H 3, K 40, V 70 (K != V). With pads, row 0
 * has a hole at token T / 2 and row 1 starts with up to three padding tokens. wanted: 0 every
 * cotangent (o, state_out, every state) and every gradient; 1 o's cotangent alone and dq alone;
 * 2 no cotangent on o (state_out's and the states' only), every gradient. dstates is replaced
 * by the total gradients: compared after the call. */
static void bwd_delta_case(int64_t T, int with_state, int with_pads, int l2norm, int wanted)
{
    const int64_t B = 2, H = 3, K = 40, V = 70;
    nnt_tensor q = hrand(4, B, T, H, K, 0, 1), k = hrand(4, B, T, H, K, 0, 1), v = hrand(4, B, T, H, V, 0, 1);
    nnt_tensor g = hrand(4, B, T, H, K, 0, 0.3f), beta = hrand(3, B, T, H, 0, 0, 0.5f), s0 = hrand(4, B, H, K, V, 0, 1);
    for (int64_t i = 0; i < B * T * H * K; i++) ((float *)g.data)[i] = -0.3f - ((float *)g.data)[i];
    for (int64_t i = 0; i < B * T * H; i++) ((float *)beta.data)[i] += 0.5f;
    if (!l2norm) /* raw keys: kept small so that the recurrence stays bounded */
        for (int64_t i = 0; i < B * T * H * K; i++) ((float *)k.data)[i] *= 0.2f;
    nnt_tensor go = hrand(4, B, T, H, V, 0, 1), gso = hrand(4, B, H, K, V, 0, 1), gst = hrand(5, B, T, H, K, V, 0.5f);
    uint8_t *valid = malloc((size_t)(B * T));
    for (int64_t t = 0; t < T; t++) {
        valid[t] = !(with_pads && T >= 3 && t == T / 2);
        valid[T + t] = !(with_pads && t < 3 && t < T - 1);
    }
    const uint8_t *tv = with_pads ? valid : NULL;
    nnt_tensor dq = dev(&q), dk = dev(&k), dv = dev(&v), dg = dev(&g), db = dev(&beta), ds0 = dev(&s0);
    nnt_tensor dgo = dev(&go), dgso = dev(&gso), dgst = dev(&gst);
    GRAD2(gq, dgq, 4, B, T, H, K, 0);
    GRAD2(gk, dgk, 4, B, T, H, K, 0);
    GRAD2(gv, dgv, 4, B, T, H, V, 0);
    GRAD2(gg, dgg, 4, B, T, H, K, 0);
    GRAD2(gb, dgb, 3, B, T, H, 0, 0);
    GRAD2(gs, dgs, 4, B, H, K, V, 0);
    float scale = l2norm ? 1.0f / sqrtf((float)K) : 0.05f;
    int all = wanted != 1, with_o = wanted != 2;
    OK_CPU(cops->delta_rule_backward(cctx, &q, &k, &v, &g, &beta, tv, with_state ? &s0 : NULL, l2norm, scale,
                                     with_o ? &go : NULL, all ? &gso : NULL, all ? &gst : NULL, &gq, all ? &gk : NULL,
                                     all ? &gv : NULL, all ? &gg : NULL, all ? &gb : NULL, all ? &gs : NULL, err));
    OK_GPU(gops->delta_rule_backward(gctx, &dq, &dk, &dv, &dg, &db, tv, with_state ? &ds0 : NULL, l2norm, scale,
                                     with_o ? &dgo : NULL, all ? &dgso : NULL, all ? &dgst : NULL, &dgq,
                                     all ? &dgk : NULL, all ? &dgv : NULL, all ? &dgg : NULL, all ? &dgb : NULL,
                                     all ? &dgs : NULL, err));
    static const char *modes[3] = {"every gradient", "dq alone from o", "no cotangent on o"};
    const nnt_tensor *ch[7] = {&gq, &gk, &gv, &gg, &gb, &gs, &gst};
    const nnt_tensor *cg[7] = {&dgq, &dgk, &dgv, &dgg, &dgb, &dgs, &dgst};
    static const char *names[7] = {"dq", "dk", "dv", "dg", "dbeta", "dstate_in", "dstates (total)"};
    for (int i = 0; i < 7; i++) {
        char what[200];
        snprintf(what, sizeof what, "delta_rule_backward T=%lld state=%d pads=%d l2norm=%d, %s: %s", (long long)T,
                 with_state, with_pads, l2norm, modes[wanted], names[i]);
        same(what, ch[i], cg[i], i == 5 && !with_state ? 0 : TOL); /* no state_in: dstate_in untouched */
    }
    free(valid);
    nnt_tensor *d[] = {&dq, &dk, &dv, &dg, &db, &ds0, &dgo, &dgso, &dgst, &dgq, &dgk, &dgv, &dgg, &dgb, &dgs};
    dfree(15, d);
    nnt_tensor *h[] = {&q, &k, &v, &g, &beta, &s0, &go, &gso, &gst, &gq, &gk, &gv, &gg, &gb, &gs};
    hfree(15, h);
}

static void test_bwd_recurrent(void)
{
    /* the causal convolution */
    for (int act = 0; act < 2; act++) {
        bwd_conv_case(13, act, 1, 1, 0);
        bwd_conv_case(13, act, 0, 0, 0);
        bwd_conv_case(2, act, 1, 1, 0); /* fewer tokens than the carried state */
    }
    bwd_conv_case(1, 1, 1, 1, 0);
    bwd_conv_case(13, 1, 1, 0, 1);
    {
        nnt_tensor x = hrand(3, 2, 5, 7, 0, 0, 1), w = hrand(2, 7, 4, 0, 0, 0, 1), gy = hrand(3, 2, 5, 7, 0, 0, 1);
        nnt_tensor dx = dev(&x), dw = dev(&w), dgy = dev(&gy), bad = dev(&w);
        nnt_error e = {0};
        CU_ASSERT_EQUAL(gops->conv1d_causal_backward(gctx, &dx, &dw, NULL, 1, &dgy, NULL, &bad, NULL, &e),
                        NNT_ERR_SHAPE);
        nnt_tensor *d[] = {&dx, &dw, &dgy, &bad};
        dfree(4, d);
        nnt_tensor *h[] = {&x, &w, &gy};
        hfree(3, h);
    }
    /* the forget gate, both sides of softplus' threshold */
    {
        const int64_t M = 7, H = 3, K = 16, P = H * K;
        nnt_tensor a = hrand(2, M, P, 0, 0, 0, 10), dt = hrand(1, P, 0, 0, 0, 0, 1), al = hrand(1, H, 0, 0, 0, 0, 1);
        nnt_tensor gg = hrand(2, M, P, 0, 0, 0, 1);
        ((float *)a.data)[0] = 25.0f;
        ((float *)a.data)[P + 5] = 30.0f;
        nnt_tensor da = dev(&a), ddt = dev(&dt), dal = dev(&al), dgg = dev(&gg);
        GRAD2(ga, dga, 2, M, P, 0, 0, 0);
        OK_CPU(cops->kda_gate_backward(cctx, &a, &dt, &al, &gg, &ga, err));
        OK_GPU(gops->kda_gate_backward(gctx, &da, &ddt, &dal, &dgg, &dga, err));
        same("kda_gate_backward", &ga, &dga, TOL);
        nnt_error e = {0};
        CU_ASSERT_EQUAL(gops->kda_gate_backward(gctx, &da, &ddt, &dal, &dgg, NULL, &e), NNT_OK);
        CU_ASSERT_EQUAL(gops->kda_gate_backward(gctx, &da, &ddt, &dal, &ddt, &dga, &e), NNT_ERR_SHAPE);
        nnt_tensor *d[] = {&da, &ddt, &dal, &dgg, &dga};
        dfree(5, d);
        nnt_tensor *h[] = {&a, &dt, &al, &gg, &ga};
        hfree(5, h);
    }
    /* sigmoid from its output */
    {
        nnt_tensor x = hrand(2, 5, 77, 0, 0, 0, 4), y = host(NNT_F32, 2, 5, 77, 0, 0, 0);
        nnt_tensor gy = hrand(2, 5, 77, 0, 0, 0, 1);
        OK_CPU(cops->sigmoid(cctx, &x, &y, err));
        nnt_tensor dy = dev(&y), dgy = dev(&gy);
        GRAD2(gx, dgx, 2, 5, 77, 0, 0, 0);
        OK_CPU(cops->sigmoid_backward(cctx, &y, &gy, &gx, err));
        OK_GPU(gops->sigmoid_backward(gctx, &dy, &dgy, &dgx, err));
        same("sigmoid_backward", &gx, &dgx, TOL);
        nnt_tensor g1 = hrand(2, 5, 76, 0, 0, 0, 1), dg1 = dev(&g1);
        nnt_error e = {0};
        CU_ASSERT_EQUAL(gops->sigmoid_backward(gctx, &dy, &dg1, &dgx, &e), NNT_ERR_SHAPE);
        nnt_tensor *d[] = {&dy, &dgy, &dgx, &dg1};
        dfree(4, d);
        nnt_tensor *h[] = {&x, &y, &gy, &gx, &g1};
        hfree(5, h);
    }
    /* the delta rule: 37 tokens (three of the cpu's 16-token recomputed stretches), one token,
     * exactly one stretch; pads, carried state, raw keys; partial wants */
    bwd_delta_case(37, 1, 1, 1, 0);
    bwd_delta_case(37, 0, 0, 1, 0);
    bwd_delta_case(37, 1, 1, 0, 0);
    bwd_delta_case(1, 1, 0, 1, 0);
    bwd_delta_case(16, 1, 1, 1, 0);
    bwd_delta_case(33, 1, 1, 1, 1);
    bwd_delta_case(37, 1, 1, 1, 2);
    {
        nnt_tensor q = hrand(4, 1, 3, 2, 8, 0, 1), v = hrand(4, 1, 3, 2, 5, 0, 1), beta = hrand(3, 1, 3, 2, 0, 0, 1);
        nnt_tensor dq = dev(&q), dv = dev(&v), db = dev(&beta);
        nnt_error e = {0};
        CU_ASSERT_EQUAL(gops->delta_rule_backward(gctx, &dq, &dq, &dv, &dq, &db, NULL, NULL, 1, 1.0f, &dv, NULL, NULL,
                                                  &dv, NULL, NULL, NULL, NULL, NULL, &e),
                        NNT_ERR_SHAPE);
        nnt_tensor *d[] = {&dq, &dv, &db};
        dfree(3, d);
        nnt_tensor *h[] = {&q, &v, &beta};
        hfree(3, h);
    }
    /* the gated RMSNorm: F32 and BF16 gains; both gradients, dx alone, dgate alone */
    {
        const int64_t M = 11, D = 70;
        nnt_tensor x = hrand(2, M, D, 0, 0, 0, 2), gate = hrand(2, M, D, 0, 0, 0, 3), gy = hrand(2, M, D, 0, 0, 0, 1);
        nnt_tensor w = hrand(1, D, 0, 0, 0, 0, 1), wb = host(NNT_BF16, 1, D, 0, 0, 0, 0);
        for (int64_t i = 0; i < D; i++) ((uint16_t *)wb.data)[i] = to_bf16(((float *)w.data)[i]);
        nnt_tensor dx = dev(&x), dgate = dev(&gate), dgy = dev(&gy), dw = dev(&w), dwb = dev(&wb);
        const nnt_tensor *wh[2] = {&w, &wb}, *wd[2] = {&dw, &dwb};
        for (int k = 0; k < 2; k++)
            for (int mode = 0; mode < 3; mode++) {
                GRAD2(gx, dgx, 2, M, D, 0, 0, 0);
                GRAD2(gg, dgg, 2, M, D, 0, 0, 0);
                int wx = mode != 2, wg = mode != 1;
                OK_CPU(cops->rms_norm_gated_backward(cctx, &x, wh[k], &gate, 1e-5f, &gy, wx ? &gx : NULL,
                                                     wg ? &gg : NULL, err));
                OK_GPU(gops->rms_norm_gated_backward(gctx, &dx, wd[k], &dgate, 1e-5f, &dgy, wx ? &dgx : NULL,
                                                     wg ? &dgg : NULL, err));
                static const char *modes[3] = {"both", "dx alone", "dgate alone"};
                char what[128];
                snprintf(what, sizeof what, "rms_norm_gated_backward, %s gain, %s: dx", k ? "BF16" : "F32",
                         modes[mode]);
                same(what, &gx, &dgx, TOL);
                snprintf(what, sizeof what, "rms_norm_gated_backward, %s gain, %s: dgate", k ? "BF16" : "F32",
                         modes[mode]);
                same(what, &gg, &dgg, TOL);
                nnt_tensor *d[] = {&dgx, &dgg};
                dfree(2, d);
                nnt_tensor *h[] = {&gx, &gg};
                hfree(2, h);
            }
        nnt_error e = {0};
        CU_ASSERT_EQUAL(gops->rms_norm_gated_backward(gctx, &dx, &dw, &dw, 1e-5f, &dgy, &dx, NULL, &e), NNT_ERR_SHAPE);
        nnt_tensor *d[] = {&dx, &dgate, &dgy, &dw, &dwb};
        dfree(5, d);
        nnt_tensor *h[] = {&x, &gate, &gy, &w, &wb};
        hfree(5, h);
    }
}

/* Gradient requests end to end (nnt_trace_grad) on the MiniMax-M2 and Kimi-Linear fp32
 * fixtures: the cuda runtime's gradients equal the cpu runtime's within 1e-4 of the largest
 * (every position: both backends treat padding alike). Kimi-Linear's 24 tokens take the delta
 * rule's backward over two of its recomputed stretches; its states' gradient is the total one. */
static nnt_tensor grad_on(nnt_runtime *rt, nnt_model *m, const t_ref *r, const char *metric, const char *path)
{
    nnt_trace *t;
    T_OK(rt, nnt_trace_new(m, &t));
    T_OK(rt, nnt_trace_grad(t, path));
    T_OK(rt, nnt_trace_metric(t, metric, NULL, 0));
    T_OK(rt, nnt_trace_run(t, r->ids, r->mask, r->batch, r->seq));
    char key[160];
    snprintf(key, sizeof key, "grad:%s", path);
    const nnt_tensor *g = nnt_trace_get(t, key);
    CU_ASSERT_FATAL(g != NULL);
    nnt_tensor out;
    CU_ASSERT_FATAL(nnt_tensor_alloc(&out, g->dtype, g->ndim, g->shape) == NNT_OK);
    memcpy(out.data, g->data, nnt_tensor_nbytes(g));
    nnt_trace_free(t);
    return out;
}

static void trace_grad_on(const char *fixture, const char *const *paths, int n_paths)
{
    nnt_model *mc = t_model(rt_cpu, fixture), *mg = t_model(rt_gpu, fixture);
    t_ref r;
    CU_ASSERT_FATAL(t_ref_open(&r, rt_cpu, fixture) == 0);
    const char *metrics[2] = {"logit-diff:11,29", "loss"};
    for (int k = 0; k < 2; k++)
        for (int p = 0; p < n_paths; p++) {
            nnt_tensor a = grad_on(rt_cpu, mc, &r, metrics[k], paths[p]), b = grad_on(rt_gpu, mg, &r, metrics[k], paths[p]);
            double e = t_rel_err(&b, &a, NULL);
            if (e < 0 || e > TOL)
                fprintf(stderr, "\n  trace_grad %s %s under %s: cpu and cuda differ (relative %.3g)\n", fixture,
                        paths[p], metrics[k], e);
            CU_ASSERT(e >= 0 && e <= TOL);
            nnt_tensor_free(&a);
            nnt_tensor_free(&b);
        }
    nnt_model_free(mc);
    nnt_model_free(mg);
}

static void test_bwd_trace_grad(void)
{
    static const char *const minimax[3] = {"layers.0.layer_output", "layers.0.attention_norm_output",
                                           "layers.0.mlp.router_logits"};
    static const char *const kimi[4] = {"layers.0.attention_norm_output", "layers.0.linear_attn.states",
                                        "layers.1.linear_attn.attention_keys", "layers.2.linear_attn.decays"};
    trace_grad_on("minimax_m2/fp32", minimax, 3);
    trace_grad_on("kimi_linear/fp32", kimi, 4);
}

/* ---------------------------------------------------------------------------------------- */

/* No GPU (or no driver): say why and leave with 77 before any suite is registered. */
static void skip_without_gpu(void)
{
    nnt_runtime *rt = NULL;
    nnt_status st = nnt_runtime_open(NNT_TEST_CUDA_INI, &rt);
    if (st == NNT_OK) {
        nnt_runtime_close(rt);
        return;
    }
    const char *msg = nnt_last_error(rt);
    if (st == NNT_ERR_BACKEND && strstr(msg, "no CUDA device")) {
        printf("cuda: skipped: %s\n", msg);
        fflush(stdout);
        nnt_runtime_close(rt);
        CU_cleanup_registry();
        exit(77);
    }
    fprintf(stderr, "cuda: the cuda runtime does not open: %s\n", msg);
    nnt_runtime_close(rt);
}

int register_tests(void)
{
    skip_without_gpu();
    CU_pSuite s = CU_add_suite("cuda", setup, teardown);
    if (!s) return -1;
    if (!CU_add_test(s, "linear (F32, BF16 prepared and unprepared)", test_linear) ||
        !CU_add_test(s, "weights in every encoding: linear in both numerics, embedding, views, bytes held", test_encodings) ||
        !CU_add_test(s, "RMSNorm, gated RMSNorm, add, scale, sigmoid, fill, copy, SwiGLU", test_norms_and_elementwise) ||
        !CU_add_test(s, "embedding (and a bad id), swap12, sum_axis1", test_embedding_swap_sum) ||
        !CU_add_test(s, "rotary, NEOX and interleaved", test_rope) ||
        !CU_add_test(s, "attention: GQA scores under every mask, softmax with sinks, mix", test_attention) ||
        !CU_add_test(s, "attn_fused (one pass) against the three ops under every mask, sinks, keys as values",
                     test_attention_fused) ||
        !CU_add_test(s, "router: scores, groups, bias, given indices", test_route) ||
        !CU_add_test(s, "gather, scatter with repeated rows, scale_rows, zero_rows, copy_cols", test_rows) ||
        !CU_add_test(s, "causal convolution with state, KDA gate", test_conv_and_gate) ||
        !CU_add_test(s, "delta rule, K != V, padding, carried state", test_delta_rule) ||
        !CU_add_test(s, "hyper-connections: weights, mix, head", test_hyper) ||
        !CU_add_test(s, "compression and indexer scores", test_compress_indexer) ||
        !CU_add_test(s, "bfloat16 values: norms, add, scale, sigmoid, SwiGLU, sum over slots", test_bf16_elementwise) ||
        !CU_add_test(s, "bfloat16 values: rotary, per-step and once", test_bf16_rope) ||
        !CU_add_test(s, "bfloat16 values: scores, softmax plain and shifted with sinks, mix", test_bf16_attention) ||
        !CU_add_test(s, "bfloat16 values: router scoring and weights", test_bf16_route) ||
        !CU_add_test(s, "bfloat16 values: scatters, scale_rows and gather", test_bf16_rows) ||
        !CU_add_test(s, "bfloat16 values: convolution (state unrounded), KDA gate in float32", test_bf16_conv_and_gate) ||
        !CU_add_test(s, "bfloat16 values: delta rule output (states float32)", test_bf16_delta_rule) ||
        !CU_add_test(s, "bfloat16 values: hyper-connections, compression, indexer in float32", test_bf16_hyper) ||
        !CU_add_test(s, "backward: linear on weights in every encoding", test_bwd_linear) ||
        !CU_add_test(s, "backward: RMSNorm, accumulate, swap12, SwiGLU, copy_cols", test_bwd_elementwise) ||
        !CU_add_test(s, "backward: rotary, scores under causal / window / selection masks, softmax with sinks, mix",
                     test_bwd_attention) ||
        !CU_add_test(s, "backward: router per score function, given indices with repeats", test_bwd_route) ||
        !CU_add_test(s, "backward: gather, scatters with repeated rows, sum over slots, scale_rows", test_bwd_rows) ||
        !CU_add_test(s, "backward: hyper-connections, mix, head, compression", test_bwd_hyper) ||
        !CU_add_test(s, "backward: convolution with state, KDA gate, sigmoid, delta rule over 37 tokens, gated RMSNorm",
                     test_bwd_recurrent) ||
        !CU_add_test(s, "backward: gradient requests on MiniMax-M2 and Kimi-Linear fp32, cuda as cpu",
                     test_bwd_trace_grad) ||
        !CU_add_test(s, "every fixture: cpu and cuda agree on every value", test_fixtures) ||
        !CU_add_test(s, "bf16 fixtures at precision = bf16: cpu and cuda as close as bf16 is to fp32",
                     test_fixtures_bf16))
        return -1;
    return 0;
}
