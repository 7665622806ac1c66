/* test_deepseek.c - the DeepSeek-V4 family against transformers' references (fixtures written by
 * tests/fixtures/make_fixtures.py): every stored value at five prompt lengths around the
 * compression boundaries, on transformers' save_pretrained checkpoint and on the release's native
 * FP8/FP4 layout; the lightning indexer's selection; the hyper-connection block formula and the
 * stream-mean identity from the page; the lens on one stream; the SwiGLU clamp; hash routing's
 * independence from the hidden state; ablation; refused inputs; the same weights under
 * transformers' module names; gradients of three metrics against torch autograd. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"

static const int FP32_LENGTHS[] = {3, 4, 5, 13, 40};
static const int NATIVE_LENGTHS[] = {13, 40};

static nnt_model *load(nnt_runtime *rt, const char *dir) { return t_model(rt, dir); }

static void open_ref(t_ref *r, nnt_runtime *rt, const char *dir, int length)
{
    char rel[128];
    snprintf(rel, sizeof rel, "%s/reference_L%d.safetensors", dir, length);
    CU_ASSERT_FATAL(t_ref_open(r, rt, rel) == 0);
}

/* On compressed sparse blocks, the compressed entries a query may attend to are exactly the
 * indexer's selection in the reference: nnt's scores are finite there and -inf elsewhere. */
static void check_selection(nnt_runtime *rt, nnt_model *m, const t_ref *r)
{
    int L = nnt_model_get_info(m)->num_layers, blocks = 0;
    for (int l = 0; l < L; l++) {
        char key[96];
        snprintf(key, sizeof key, "layers.%d.self_attn.indexer_selection", l);
        nnt_tensor sel;
        if (t_ref_get(r, key, &sel) != 0) continue;
        blocks++;
        char sk[96];
        snprintf(sk, sizeof sk, "layers.%d.self_attn.attention_scores", l);
        nnt_trace *t;
        T_OK(rt, nnt_trace_new(m, &t));
        T_OK(rt, nnt_trace_save(t, sk));
        T_OK(rt, nnt_trace_run(t, r->ids, r->mask, r->batch, r->seq));
        const nnt_tensor *sc = nnt_trace_get(t, sk);
        CU_ASSERT_FATAL(sc != NULL);
        int64_t B = r->batch, S = r->seq, Hh = sc->shape[1], K = sc->shape[3], C = K - S, k = sel.ndim == 3 ? sel.shape[2] : 0;
        int wrong = 0;
        for (int64_t b = 0; b < B; b++)
            for (int64_t q = 0; q < S; q++)
                for (int64_t w = 0; w < C; w++) {
                    int chosen = 0;
                    for (int64_t j = 0; j < k; j++) chosen |= (int64_t)nnt_tensor_get_f64(&sel, (b * S + q) * k + j) == w;
                    for (int64_t h = 0; h < Hh; h++) {
                        double v = nnt_tensor_get_f64(sc, ((b * Hh + h) * S + q) * K + S + w);
                        wrong += chosen != (isfinite(v) != 0);
                    }
                }
        if (wrong) fprintf(stderr, "\n  %s: %s: %d entries disagree with the indexer's selection\n", r->path, key, wrong);
        CU_ASSERT_EQUAL(wrong, 0);
        nnt_tensor_free(&sel);
        nnt_trace_free(t);
    }
    CU_ASSERT(blocks > 0);
}

/* Every stored value, at every stored length, then values the references leave out because
 * they equal stored ones: attention_values is the keys' tensor, lm_head_output is logits. */
static void check_fixture(const char *dir, const int *lengths, int n_lengths)
{
    nnt_runtime *rt = t_runtime();
    nnt_model *m = load(rt, dir);
    for (int i = 0; i < n_lengths; i++) {
        t_ref r;
        open_ref(&r, rt, dir, lengths[i]);
        nnt_trace *t = t_run_reference(rt, m, &r);
        int checked = t_check_reference(&r, t);
        CU_ASSERT(checked >= 10);
        nnt_trace_free(t);
        check_selection(rt, m, &r);
        /* the omitted duplicates */
        nnt_trace *d;
        T_OK(rt, nnt_trace_new(m, &d));
        T_OK(rt, nnt_trace_save(d, "layers.1.self_attn.attention_keys"));
        T_OK(rt, nnt_trace_save(d, "layers.1.self_attn.attention_values"));
        T_OK(rt, nnt_trace_save(d, "lm_head_output"));
        T_OK(rt, nnt_trace_save(d, "logits"));
        T_OK(rt, nnt_trace_run(d, r.ids, r.mask, r.batch, r.seq));
        CU_ASSERT(t_rel_err(nnt_trace_get(d, "layers.1.self_attn.attention_keys"),
                            nnt_trace_get(d, "layers.1.self_attn.attention_values"), NULL) == 0.0);
        CU_ASSERT(t_rel_err(nnt_trace_get(d, "lm_head_output"), nnt_trace_get(d, "logits"), NULL) == 0.0);
        nnt_trace_free(d);
    }
    nnt_model_free(m);
    nnt_runtime_close(rt);
}

static void test_fp32(void) { check_fixture("deepseek_v4/fp32", FP32_LENGTHS, 5); }
static void test_native(void) { check_fixture("deepseek_v4/native", NATIVE_LENGTHS, 2); }

/* The values of the page's block formula, in the order the checks index them. */
enum { X_IN, COMB_A, POST_A, ATTN, COMB_F, POST_F, MLP, X_OUT, N_BLOCK_VALUES };
static const char *const BLOCK_VALUES[N_BLOCK_VALUES] = {"layer_input", "attention_comb", "attention_post",
                                                         "self_attn.attention_output", "mlp_comb", "mlp_post",
                                                         "mlp.mlp_output", "layer_output"};

/* Runs the 40-token fp32 reference prompts saving every block's formula values. */
static nnt_trace *run_block_values(nnt_runtime *rt, nnt_model *m, t_ref *r)
{
    open_ref(r, rt, "deepseek_v4/fp32", 40);
    nnt_trace *t;
    T_OK(rt, nnt_trace_new(m, &t));
    for (int l = 0; l < nnt_model_get_info(m)->num_layers; l++)
        for (int i = 0; i < N_BLOCK_VALUES; i++) {
            char k[96];
            snprintf(k, sizeof k, "layers.%d.%s", l, BLOCK_VALUES[i]);
            T_OK(rt, nnt_trace_save(t, k));
        }
    T_OK(rt, nnt_trace_run(t, r->ids, r->mask, r->batch, r->seq));
    return t;
}

/* Block l's formula values from a run_block_values trace. */
static void block_values(const nnt_trace *t, int l, const nnt_tensor *v[N_BLOCK_VALUES])
{
    for (int i = 0; i < N_BLOCK_VALUES; i++) {
        char k[96];
        snprintf(k, sizeof k, "layers.%d.%s", l, BLOCK_VALUES[i]);
        v[i] = nnt_trace_get(t, k);
        CU_ASSERT_FATAL(v[i] != NULL);
    }
}

/* The page's block formula, stream by stream: h = comb_a^T x + post_a (x) attention_output and
 * layer_output = comb_f^T h + post_f (x) mlp_output (stream k of comb^T x is sum_j comb[j,k] x_j);
 * every comb column sums to one (Sinkhorn's last step normalises columns); post lies in (0, 2). */
static void test_block_formula(void)
{
    nnt_runtime *rt = t_runtime();
    nnt_model *m = load(rt, "deepseek_v4/fp32");
    t_ref r;
    const nnt_model_info *mi = nnt_model_get_info(m);
    int n = mi->num_streams, H = mi->hidden_size;
    CU_ASSERT_EQUAL_FATAL(n, 4);
    nnt_trace *t = run_block_values(rt, m, &r);
    int64_t M = (int64_t)r.batch * r.seq;
    double *hbuf = malloc(sizeof(double) * (size_t)(n * H));
    double worst = 0, scale = 0, col_err = 0, post_min = 1e9, post_max = -1e9;
    for (int l = 0; l < mi->num_layers; l++) {
        const nnt_tensor *v[N_BLOCK_VALUES];
        block_values(t, l, v);
        for (int64_t tok = 0; tok < M; tok++) {
            for (int pass = 0; pass < 2; pass++) {
                const nnt_tensor *comb = v[pass ? 4 : 1], *post = v[pass ? 5 : 2], *sub = v[pass ? 6 : 3];
                for (int kk = 0; kk < n; kk++) {
                    double csum = 0;
                    for (int j = 0; j < n; j++) csum += nnt_tensor_get_f64(comb, (tok * n + j) * n + kk);
                    col_err = fmax(col_err, fabs(csum - 1.0));
                    double p = nnt_tensor_get_f64(post, tok * n + kk);
                    post_min = fmin(post_min, p);
                    post_max = fmax(post_max, p);
                }
                double out[4 * 1024];
                for (int kk = 0; kk < n; kk++)
                    for (int h = 0; h < H; h++) {
                        double acc = nnt_tensor_get_f64(post, tok * n + kk) * nnt_tensor_get_f64(sub, tok * H + h);
                        for (int j = 0; j < n; j++) {
                            double xj = pass ? hbuf[j * H + h] : nnt_tensor_get_f64(v[0], (tok * n + j) * H + h);
                            acc += nnt_tensor_get_f64(comb, (tok * n + j) * n + kk) * xj;
                        }
                        out[kk * H + h] = acc;
                    }
                for (int i = 0; i < n * H; i++) {
                    if (!pass) {
                        hbuf[i] = out[i];
                        continue;
                    }
                    double want = nnt_tensor_get_f64(v[7], tok * n * H + i);
                    worst = fmax(worst, fabs(out[i] - want));
                    scale = fmax(scale, fabs(want));
                }
            }
        }
    }
    if (worst > 1e-5 * scale) fprintf(stderr, "\n  block formula off by %.3g of %.3g\n", worst, scale);
    CU_ASSERT(worst <= 1e-5 * scale);
    CU_ASSERT(col_err < 1e-4);
    CU_ASSERT(post_min > 0.0 && post_max < 2.0);
    free(hbuf);
    nnt_trace_free(t);
    nnt_model_free(m);
    nnt_runtime_close(rt);
}

/* The page's stream-mean identity: layer_output.mean(streams) == layer_input.mean(streams) +
 * mean(attention_post) * attention_output + mean(mlp_post) * mlp_output, which holds as far as
 * comb's rows sum to one (Sinkhorn normalises columns last; rows keep a residual). Exactly, each
 * stream j of a mix also carries (rowsum_j - 1) / n of its input; with that term the identity
 * holds to float rounding, and where every row sum is within 1e-6 of one it holds at the page's
 * tolerance (rtol = atol = 1e-4) without it. */
static void test_stream_mean(void)
{
    nnt_runtime *rt = t_runtime();
    nnt_model *m = load(rt, "deepseek_v4/fp32");
    t_ref r;
    const nnt_model_info *mi = nnt_model_get_info(m);
    int n = mi->num_streams, H = mi->hidden_size;
    nnt_trace *t = run_block_values(rt, m, &r);
    int64_t M = (int64_t)r.batch * r.seq;
    double exact_err = 0, scale = 0, page_bad = 0, converged = 0;
    double *hmid = malloc(sizeof(double) * (size_t)(n * H));
    for (int l = 0; l < mi->num_layers; l++) {
        const nnt_tensor *v[N_BLOCK_VALUES];
        block_values(t, l, v);
        for (int64_t tok = 0; tok < M; tok++) {
            double pa = 0, pf = 0, row_dev = 0, ra[8], rf[8];
            for (int j = 0; j < n; j++) {
                pa += nnt_tensor_get_f64(v[2], tok * n + j) / n;
                pf += nnt_tensor_get_f64(v[5], tok * n + j) / n;
                ra[j] = rf[j] = 0;
                for (int k = 0; k < n; k++) {
                    ra[j] += nnt_tensor_get_f64(v[1], (tok * n + j) * n + k);
                    rf[j] += nnt_tensor_get_f64(v[4], (tok * n + j) * n + k);
                }
                row_dev = fmax(row_dev, fmax(fabs(ra[j] - 1), fabs(rf[j] - 1)));
            }
            /* the mid-block streams h, for the second mix's residual term */
            for (int k = 0; k < n; k++)
                for (int h = 0; h < H; h++) {
                    double acc = nnt_tensor_get_f64(v[2], tok * n + k) * nnt_tensor_get_f64(v[3], tok * H + h);
                    for (int j = 0; j < n; j++)
                        acc += nnt_tensor_get_f64(v[1], (tok * n + j) * n + k) * nnt_tensor_get_f64(v[0], (tok * n + j) * H + h);
                    hmid[k * H + h] = acc;
                }
            int ok = 1;
            for (int h = 0; h < H; h++) {
                double xin = 0, out = 0, res = 0;
                for (int j = 0; j < n; j++) {
                    double xj = nnt_tensor_get_f64(v[0], (tok * n + j) * H + h);
                    xin += xj / n;
                    out += nnt_tensor_get_f64(v[7], (tok * n + j) * H + h) / n;
                    res += ((ra[j] - 1) * xj + (rf[j] - 1) * hmid[j * H + h]) / n;
                }
                double page = xin + pa * nnt_tensor_get_f64(v[3], tok * H + h) + pf * nnt_tensor_get_f64(v[6], tok * H + h);
                exact_err = fmax(exact_err, fabs(page + res - out));
                scale = fmax(scale, fabs(out));
                ok &= fabs(page - out) <= 1e-4 + 1e-4 * fabs(out);
            }
            if (row_dev <= 1e-6) {
                converged++;
                page_bad += !ok;
            }
        }
    }
    if (exact_err > 1e-5 * scale) fprintf(stderr, "\n  stream mean with the residual term off by %.3g of %.3g\n", exact_err, scale);
    CU_ASSERT(exact_err <= 1e-5 * scale);
    CU_ASSERT(converged > 0);
    CU_ASSERT_EQUAL(page_bad, 0);
    free(hmid);
    nnt_trace_free(t);
    nnt_model_free(m);
    nnt_runtime_close(rt);
}

/* Logits of one forward of ids [1, 6] with one edit set up by `edit` (0: a steer of v, 1: an add
 * of v to layer_output of blocks first..last), into out [vocab]. */
static void steered_logits(nnt_runtime *rt, nnt_model *m, int add, int first, int last, const nnt_tensor *v, float *out,
                           int vocab)
{
    static const int32_t ids[6] = {3, 17, 42, 5, 99, 7};
    nnt_trace *t = NULL;
    T_OK(rt, nnt_trace_new(m, &t));
    T_OK(rt, nnt_trace_save(t, "logits"));
    for (int l = first; l <= last && add; l++) {
        char path[64];
        snprintf(path, sizeof path, "layers.%d.layer_output", l);
        T_OK(rt, nnt_trace_add(t, path, v, 0.75f));
    }
    if (!add) T_OK(rt, nnt_trace_steer(t, first, last, NULL, 0, v, 0.75f));
    T_OK(rt, nnt_trace_run(t, ids, NULL, 1, 6));
    const nnt_tensor *lg = nnt_trace_get(t, "logits");
    CU_ASSERT_FATAL(lg != NULL && nnt_tensor_numel(lg) == 6 * (int64_t)vocab);
    memcpy(out, (const float *)lg->data + 5 * vocab, sizeof(float) * (size_t)vocab);
    nnt_trace_free(t);
}

/* Steering on four hyper-connection streams: a [hidden] vector adds to every stream, a
 * [streams, hidden] one row per stream, each equal (bit for bit) to the add edit of the same
 * rows on layer_output (add broadcasts [hidden] over the streams and takes [streams, hidden] as
 * the value's trailing axes); other shapes are refused naming both accepted ones. */
static void test_steer_streams(void)
{
    nnt_runtime *rt = t_runtime();
    nnt_model *m = load(rt, "deepseek_v4/fp32");
    const nnt_model_info *mi = nnt_model_get_info(m);
    int S = mi->num_streams, H = mi->hidden_size, V = mi->vocab_size;
    CU_ASSERT_FATAL(S == 4);
    nnt_tensor one = {0}, rows = {0}, same = {0}, bad = {0};
    T_OK(rt, nnt_tensor_alloc(&one, NNT_F32, 1, (int64_t[]){H}));
    T_OK(rt, nnt_tensor_alloc(&rows, NNT_F32, 2, (int64_t[]){S, H}));
    T_OK(rt, nnt_tensor_alloc(&same, NNT_F32, 2, (int64_t[]){S, H}));
    T_OK(rt, nnt_tensor_alloc(&bad, NNT_F32, 2, (int64_t[]){S - 1, H}));
    for (int h = 0; h < H; h++) {
        ((float *)one.data)[h] = (float)sin(0.37 * h);
        ((float *)rows.data)[2 * H + h] = (float)cos(0.11 * h); /* stream 2 only */
        for (int k = 0; k < S; k++) ((float *)same.data)[k * H + h] = ((float *)one.data)[h];
    }
    float *a = malloc(sizeof(float) * (size_t)V), *b = malloc(sizeof(float) * (size_t)V), *c = malloc(sizeof(float) * (size_t)V);
    steered_logits(rt, m, 0, 0, 1, &one, a, V);
    steered_logits(rt, m, 1, 0, 1, &one, b, V);
    steered_logits(rt, m, 0, 0, 1, &same, c, V);
    CU_ASSERT(memcmp(a, b, sizeof(float) * (size_t)V) == 0); /* [hidden]: every stream, as add */
    CU_ASSERT(memcmp(a, c, sizeof(float) * (size_t)V) == 0); /* the same row on each stream */
    steered_logits(rt, m, 0, 1, 1, &rows, a, V);
    steered_logits(rt, m, 1, 1, 1, &rows, b, V);
    steered_logits(rt, m, 0, 1, 1, &one, c, V);
    CU_ASSERT(memcmp(a, b, sizeof(float) * (size_t)V) == 0); /* [streams, hidden]: a row per stream */
    CU_ASSERT(memcmp(a, c, sizeof(float) * (size_t)V) != 0);
    nnt_trace *t = NULL;
    T_OK(rt, nnt_trace_new(m, &t));
    char want[256];
    snprintf(want, sizeof want, "steer: the vector is [3, %d]; it must be [hidden_size] = [%d] (every stream) or "
             "[num_streams, hidden_size] = [4, %d] (a row per stream)", H, H, H);
    T_FAILS(rt, nnt_trace_steer(t, 0, 0, NULL, 0, &bad, 1.0f), NNT_ERR_SHAPE, want);
    nnt_trace_free(t);
    free(a), free(b), free(c);
    nnt_tensor_free(&one), nnt_tensor_free(&rows), nnt_tensor_free(&same), nnt_tensor_free(&bad);
    nnt_model_free(m);
    nnt_runtime_close(rt);
}

/* The lens on a rank-3 tensor (one stream, a contribution) is lm_head(norm(x)) with no collapse,
 * computed here from the checkpoint's own norm and head weights. */
static void test_rank3_lens(void)
{
    nnt_runtime *rt = t_runtime();
    nnt_model *m = load(rt, "deepseek_v4/fp32");
    const nnt_model_info *mi = nnt_model_get_info(m);
    int64_t H = mi->hidden_size, V = mi->vocab_size, shape[3] = {1, 3, H};
    char file[512];
    t_fixture("deepseek_v4/fp32/model.safetensors", file, sizeof file);
    nnt_tensor nw, hw, x, lens = {0};
    T_OK(rt, nnt_safetensors_read(rt, file, "model.norm.weight", &nw));
    T_OK(rt, nnt_safetensors_read(rt, file, "head.weight", &hw));
    CU_ASSERT_FATAL(nnt_tensor_alloc(&x, NNT_F32, 3, shape) == NNT_OK);
    for (int64_t i = 0; i < 3 * H; i++) ((float *)x.data)[i] = (float)((i * 29) % 23) / 7.0f - 1.5f;
    T_OK(rt, nnt_project_on_vocab(m, &x, &lens));
    CU_ASSERT_FATAL(nnt_tensor_numel(&lens) == 3 * V);
    double worst = 0, scale = 0;
    for (int64_t t = 0; t < 3; t++) {
        double ms = 0;
        for (int64_t h = 0; h < H; h++) ms += (double)((float *)x.data)[t * H + h] * ((float *)x.data)[t * H + h] / H;
        double inv = 1.0 / sqrt(ms + 1e-6);
        for (int64_t v = 0; v < V; v++) {
            double acc = 0;
            for (int64_t h = 0; h < H; h++)
                acc += ((float *)x.data)[t * H + h] * inv * nnt_tensor_get_f64(&nw, h) * nnt_tensor_get_f64(&hw, v * H + h);
            worst = fmax(worst, fabs(acc - ((float *)lens.data)[t * V + v]));
            scale = fmax(scale, fabs(acc));
        }
    }
    if (worst > 1e-5 * scale) fprintf(stderr, "\n  rank-3 lens off by %.3g of %.3g\n", worst, scale);
    CU_ASSERT(worst <= 1e-5 * scale);
    nnt_tensor_free(&nw);
    nnt_tensor_free(&hw);
    nnt_tensor_free(&x);
    nnt_tensor_free(&lens);
    nnt_model_free(m);
    nnt_runtime_close(rt);
}

/* The SwiGLU clamp is live in the fixture: with swiglu_limit raised out of reach the expert
 * outputs leave the reference, which they match with the checkpoint's limit. */
static void test_clamp_active(void)
{
    char dir[512], src[512], dst[600];
    t_checkpoint_dir("dsv4_unclamped", "deepseek_v4/fp32", dir, sizeof dir);
    t_fixture("deepseek_v4/fp32/model.safetensors", src, sizeof src);
    snprintf(dst, sizeof dst, "%s/model.safetensors", dir);
    CU_ASSERT_FATAL(t_copy_file(src, dst) == 0);
    snprintf(dst, sizeof dst, "%s/config.json", dir);
    FILE *f = fopen(dst, "r");
    CU_ASSERT_FATAL(f != NULL);
    static char text[1 << 16];
    size_t n = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[n] = '\0';
    char *lim = strstr(text, "\"swiglu_limit\": 2.0");
    CU_ASSERT_FATAL(lim != NULL);
    memcpy(lim, "\"swiglu_limit\": 9e9", strlen("\"swiglu_limit\": 9e9")); /* same length */
    CU_ASSERT_FATAL(t_write_file(dst, text) == 0);
    nnt_runtime *rt = t_runtime();
    nnt_model *m = NULL;
    T_OK(rt, nnt_model_load(rt, dir, &m));
    t_ref r;
    open_ref(&r, rt, "deepseek_v4/fp32", 40);
    const char *keys[] = {"layers.2.mlp.shared_expert_output", "layers.2.mlp.routed_output"};
    nnt_trace *t;
    T_OK(rt, nnt_trace_new(m, &t));
    for (int i = 0; i < 2; i++) T_OK(rt, nnt_trace_save(t, keys[i]));
    T_OK(rt, nnt_trace_run(t, r.ids, r.mask, r.batch, r.seq));
    for (int i = 0; i < 2; i++) {
        nnt_tensor ref;
        CU_ASSERT_FATAL(t_ref_get(&r, keys[i], &ref) == 0);
        double e = t_rel_err(nnt_trace_get(t, keys[i]), &ref, NULL);
        if (e < 1e-3) fprintf(stderr, "\n  %s without the clamp still matches (%.3g)\n", keys[i], e);
        CU_ASSERT(e > 1e-3);
        nnt_tensor_free(&ref);
    }
    nnt_trace_free(t);
    nnt_model_free(m);
    nnt_runtime_close(rt);
}

/* Hash routing reads the token id only: a perturbed input to a hash block keeps its experts
 * (tid2eid[input_ids]) while their weights move; ablating an expert there and on a scored block
 * zeroes exactly the slots that chose it. */
static void test_hash_routing(void)
{
    nnt_runtime *rt = t_runtime();
    nnt_model *m = load(rt, "deepseek_v4/fp32");
    t_ref r;
    open_ref(&r, rt, "deepseek_v4/fp32", 13);
    int64_t H = nnt_model_get_info(m)->hidden_size;
    nnt_tensor noise;
    CU_ASSERT_FATAL(nnt_tensor_alloc(&noise, NNT_F32, 1, &H) == NNT_OK);
    for (int64_t h = 0; h < H; h++) ((float *)noise.data)[h] = (float)(((h * 37) % 17) - 8) * 0.25f;
    nnt_trace *clean, *moved;
    T_OK(rt, nnt_trace_new(m, &clean));
    T_OK(rt, nnt_trace_save(clean, "layers.1.mlp.expert_indices"));
    T_OK(rt, nnt_trace_save(clean, "layers.1.mlp.expert_weights"));
    T_OK(rt, nnt_trace_run(clean, r.ids, r.mask, r.batch, r.seq));
    T_OK(rt, nnt_trace_new(m, &moved));
    T_OK(rt, nnt_trace_add(moved, "layers.1.layer_input", &noise, 1.0f));
    T_OK(rt, nnt_trace_save(moved, "layers.1.mlp.expert_indices"));
    T_OK(rt, nnt_trace_save(moved, "layers.1.mlp.expert_weights"));
    T_OK(rt, nnt_trace_run(moved, r.ids, r.mask, r.batch, r.seq));
    CU_ASSERT(t_rel_err(nnt_trace_get(clean, "layers.1.mlp.expert_indices"), nnt_trace_get(moved, "layers.1.mlp.expert_indices"),
                        NULL) == 0.0);
    CU_ASSERT(t_rel_err(nnt_trace_get(clean, "layers.1.mlp.expert_weights"), nnt_trace_get(moved, "layers.1.mlp.expert_weights"),
                        NULL) > 1e-3);
    t_check_ablation(rt, m, &r, 0); /* hash */
    t_check_ablation(rt, m, &r, 2); /* scored */
    nnt_tensor_free(&noise);
    nnt_trace_free(clean);
    nnt_trace_free(moved);
    nnt_model_free(m);
    nnt_runtime_close(rt);
}

/* What the family refuses, and the values it does not serve with their reasons. */
static void test_refusals(void)
{
    nnt_runtime *rt = t_runtime();
    nnt_model *m = load(rt, "deepseek_v4/fp32");
    int32_t ids[2 * 6] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, mask[2 * 6] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 1, 1};
    nnt_trace *t;
    T_OK(rt, nnt_trace_new(m, &t));
    T_OK(rt, nnt_trace_save(t, "logits"));
    T_FAILS(rt, nnt_trace_run(t, ids, mask, 2, 6), NNT_ERR_INVALID_ARGUMENT, "needs left padding");
    nnt_call_dims dims = {1, 4, 0};
    nnt_value_info vi;
    const char *paths[][2] = {{"layers.0.self_attn.attention_premix", "low-rank output projection"},
                              {"layers.0.mlp.mlp_activation", "mixture"},
                              {"layers.0.layer_mid", "streams"}};
    for (int i = 0; i < 3; i++) {
        T_OK(rt, nnt_model_value_info(m, paths[i][0], &dims, &vi));
        CU_ASSERT_EQUAL(vi.served, 0);
        CU_ASSERT_PTR_NOT_NULL(vi.reason ? strstr(vi.reason, paths[i][1]) : NULL);
    }
    T_FAILS(rt, nnt_trace_save(t, "layers.0.layer_mid"), NNT_ERR_NOT_SERVED, "streams");
    nnt_trace_free(t);
    nnt_model_free(m);
    nnt_runtime_close(rt);
}

/* ---- transformers' module names ----
 * fp32/ holds save_pretrained's names (the release's, under "model."). The same tensors under the
 * attribute paths of transformers' modeling_deepseek_v4.py (written out here by hand) must load
 * to the same model: every value of the 13-token reference. */
static const char *const HF_NAMES[][2] = {
    {"attn.attn_sink", "self_attn.sinks"},
    {"attn.norm.weight", "self_attn.kv_norm.weight"},
    {"attn.q_norm.weight", "self_attn.q_a_norm.weight"},
    {"attn.wq_a.weight", "self_attn.q_a_proj.weight"},
    {"attn.wq_b.weight", "self_attn.q_b_proj.weight"},
    {"attn.wkv.weight", "self_attn.kv_proj.weight"},
    {"attn.wo_a.weight", "self_attn.o_a_proj.weight"},
    {"attn.wo_b.weight", "self_attn.o_b_proj.weight"},
    {"attn.compressor.ape", "self_attn.compressor.position_bias"},
    {"attn.compressor.norm.weight", "self_attn.compressor.kv_norm.weight"},
    {"attn.compressor.wkv.weight", "self_attn.compressor.kv_proj.weight"},
    {"attn.compressor.wgate.weight", "self_attn.compressor.gate_proj.weight"},
    {"attn.indexer.compressor.ape", "self_attn.compressor.indexer.position_bias"},
    {"attn.indexer.compressor.norm.weight", "self_attn.compressor.indexer.kv_norm.weight"},
    {"attn.indexer.compressor.wkv.weight", "self_attn.compressor.indexer.kv_proj.weight"},
    {"attn.indexer.compressor.wgate.weight", "self_attn.compressor.indexer.gate_proj.weight"},
    {"attn.indexer.wq_b.weight", "self_attn.compressor.indexer.q_b_proj.weight"},
    {"attn.indexer.weights_proj.weight", "self_attn.compressor.indexer.scorer.weights_proj.weight"},
    {"attn_norm.weight", "input_layernorm.weight"},
    {"ffn_norm.weight", "post_attention_layernorm.weight"},
    {"ffn.gate.weight", "mlp.gate.weight"},
    {"ffn.gate.bias", "mlp.gate.e_score_correction_bias"},
    {"ffn.gate.tid2eid", "mlp.gate.tid2eid"},
    {"ffn.shared_experts.w1.weight", "mlp.shared_experts.gate_proj.weight"},
    {"ffn.shared_experts.w3.weight", "mlp.shared_experts.up_proj.weight"},
    {"ffn.shared_experts.w2.weight", "mlp.shared_experts.down_proj.weight"},
    {"hc_attn_fn", "attn_hc.fn"},
    {"hc_attn_base", "attn_hc.base"},
    {"hc_attn_scale", "attn_hc.scale"},
    {"hc_ffn_fn", "ffn_hc.fn"},
    {"hc_ffn_base", "ffn_hc.base"},
    {"hc_ffn_scale", "ffn_hc.scale"},
};

typedef struct hf_rename {
    int renamed, unmapped;
    const char *drop; /* a transformers name left out, or NULL */
} hf_rename;

/* A block tensor's transformers name from its save_pretrained name; 0 when the map lacks it. */
static int hf_block_name(const char *rest, int L, char *name, size_t n)
{
    static const char *const proj[4] = {NULL, "gate_proj", "down_proj", "up_proj"}; /* w1, w2, w3 */
    int e, w, used = 0;
    if (sscanf(rest, "ffn.experts.%d.w%d.weight%n", &e, &w, &used) == 2 && rest[used] == '\0' && w >= 1 && w <= 3) {
        snprintf(name, n, "model.layers.%d.mlp.experts.%d.%s.weight", L, e, proj[w]);
        return 1;
    }
    for (size_t i = 0; i < sizeof HF_NAMES / sizeof HF_NAMES[0]; i++)
        if (strcmp(rest, HF_NAMES[i][0]) == 0) {
            snprintf(name, n, "model.layers.%d.%s", L, HF_NAMES[i][1]);
            return 1;
        }
    return 0;
}

static int to_hf(void *user, char *name, size_t n, const nnt_tensor *in, nnt_tensor *out, int *owned)
{
    hf_rename *c = user;
    (void)in, (void)out, (void)owned;
    int L, used = 0;
    char from[256];
    snprintf(from, sizeof from, "%s", name);
    if (sscanf(from, "model.layers.%d.%n", &L, &used) == 1 && used > 0) {
        if (!hf_block_name(from + used, L, name, n)) c->unmapped++;
    } else if (strcmp(from, "head.weight") == 0) {
        snprintf(name, n, "lm_head.weight");
    } else {
        return c->drop ? strcmp(name, c->drop) != 0 : 1; /* embed_tokens, norm, hc_head: transformers' already */
    }
    c->renamed++;
    return c->drop ? strcmp(name, c->drop) != 0 : 1;
}

/* A scratch copy of fp32/ under transformers' names, less `drop`. */
static const char *hf_checkpoint(const char *dir_name, const char *drop, char *dir, size_t n)
{
    char src[700], dst[700], fx[512];
    t_checkpoint_dir(dir_name, "deepseek_v4/fp32", dir, n);
    snprintf(src, sizeof src, "%s/model.safetensors", t_fixture("deepseek_v4/fp32", fx, sizeof fx));
    snprintf(dst, sizeof dst, "%s/model.safetensors", dir);
    hf_rename c = {.drop = drop};
    CU_ASSERT_EQUAL_FATAL(t_rewrite_weights(src, dst, to_hf, &c, 0, NULL, NULL), 0);
    CU_ASSERT_EQUAL(c.unmapped, 0);
    CU_ASSERT(c.renamed > 100); /* 5 blocks of some 30 tensors and their 8 experts' 24 */
    return dir;
}

static void test_transformers_names(void)
{
    char dir[600];
    nnt_runtime *rt = t_runtime();
    nnt_model *m = NULL;
    T_OK(rt, nnt_model_load(rt, hf_checkpoint("dv4_hf_names", NULL, dir, sizeof dir), &m));
    CU_ASSERT_FATAL(m != NULL);
    t_ref r;
    open_ref(&r, rt, "deepseek_v4/fp32", 13);
    nnt_trace *t = t_run_reference(rt, m, &r);
    CU_ASSERT(t_check_reference(&r, t) >= 10);
    nnt_trace_free(t);
    check_selection(rt, m, &r);
    nnt_model_free(m);
    /* a tensor missing under every spelling: the message names the block, the module and each */
    m = NULL;
    T_FAILS(rt, nnt_model_load(rt, hf_checkpoint("dv4_hf_no_kv_norm", "model.layers.1.self_attn.kv_norm.weight", dir,
                                                 sizeof dir),
                               &m),
            NNT_ERR_NOT_FOUND,
            "block 1 lacks a tensor of self_attn.kv_norm: the checkpoint holds none of 'layers.1.attn.kv_norm.weight', "
            "'model.layers.1.attn.kv_norm.weight', 'model.layers.1.attn.norm.weight', "
            "'model.layers.1.self_attn.kv_norm.weight'");
    CU_ASSERT_PTR_NULL(m);
    nnt_runtime_close(rt);
}

/* ---- precision = bf16 ----
 * bf16/ holds fp32/'s weights as transformers' bfloat16 model holds them (rounded to bfloat16; what
 * transformers keeps in float32 unchanged: the hyper-connection parameters, every norm's gain, the
 * sinks, the compressors' position biases and the selection bias) with two transformers runs of
 * fp32/'s 40-token prompts: float32 (reference_L40.safetensors) and torch.bfloat16
 * (reference_bf16_L40.safetensors); tests/fixtures/make_fixtures.py writes both. */
static const char *const BF16 = "deepseek_v4/bf16";

/* The default precision on bf16/ matches the float32 run: logits, final_norm_output, 3 values a
 * block, router_logits and expert_indices on every block, and the indexer's selections. */
static void test_bf16_weights_values(void)
{
    nnt_runtime *rt = t_runtime();
    nnt_model *m = load(rt, BF16);
    t_ref r;
    open_ref(&r, rt, BF16, 40);
    nnt_trace *t = t_run_reference(rt, m, &r);
    CU_ASSERT_EQUAL(t_check_reference(&r, t), 2 + 5 * 3 + 5 * 2);
    nnt_trace_free(t);
    check_selection(rt, m, &r);
    nnt_model_free(m);
    nnt_runtime_close(rt);
}

/* Real tokens whose indexer selection (the compressed entries with finite scores in a trace's
 * attention_scores) differs from the one stored as `key` in reference r. */
static int64_t selection_differs(const t_ref *r, const nnt_trace *t, const char *key)
{
    char sk[96];
    snprintf(sk, sizeof sk, "%.*s.attention_scores", (int)(strlen(key) - strlen(".indexer_selection")), key);
    nnt_tensor sel;
    CU_ASSERT_FATAL(t_ref_get(r, key, &sel) == 0);
    const nnt_tensor *sc = nnt_trace_get(t, sk);
    CU_ASSERT_FATAL(sc != NULL);
    int64_t B = r->batch, S = r->seq, H = sc->shape[1], K = sc->shape[3], C = K - S, k = sel.shape[2], differ = 0;
    for (int64_t b = 0; b < B; b++)
        for (int64_t q = 0; q < S; q++) {
            int wrong = 0;
            for (int64_t w = 0; w < C; w++) {
                int chosen = 0;
                for (int64_t j = 0; j < k; j++) chosen |= (int64_t)nnt_tensor_get_f64(&sel, (b * S + q) * k + j) == w;
                wrong |= chosen != (isfinite(nnt_tensor_get_f64(sc, (b * H * S + q) * K + S + w)) != 0); /* head 0 */
            }
            differ += wrong;
        }
    nnt_tensor_free(&sel);
    return differ;
}

/* precision = bf16 is at least as close to transformers-bf16 as transformers-bf16 is to
 * transformers-fp32, on logits and every layer_output (test_util.h, t_bf16_report); the indexer's
 * selections on the compressed sparse blocks are printed for context. */
static void test_bf16_precision(void)
{
    static const char *const scores[] = {"layers.1.self_attn.attention_scores", "layers.3.self_attn.attention_scores"};
    t_bf16 c;
    t_bf16_open(&c, "deepseek_v4", BF16, "deepseek_v4/bf16/reference_bf16_L40.safetensors",
                "deepseek_v4/bf16/reference_L40.safetensors", scores, 2);
    t_bf16_report(&c);
    for (int l = 0; l < nnt_model_get_info(c.m16)->num_layers; l++) {
        char key[96];
        snprintf(key, sizeof key, "layers.%d.self_attn.indexer_selection", l);
        nnt_tensor probe;
        if (t_ref_get(&c.hf16, key, &probe) != 0) continue;
        nnt_tensor_free(&probe);
        fprintf(stderr, "  %-40s selections differ from transformers-bf16 at %lld real tokens (nnt32 vs hf32: %lld)\n",
                key, (long long)selection_differs(&c.hf16, c.t16, key), (long long)selection_differs(&c.hf32, c.t32, key));
    }
    t_bf16_close(&c);
}

/* ---- gradients through the whole model ---- */

static const char *const GRAD_BLOCK_VALUES[] = {
    "layer_output", "attention_post", "attention_comb", "mlp_post", "mlp_comb", "self_attn.attention_queries",
    "self_attn.attention_keys", "self_attn.attention_scores", "self_attn.attention_head_outputs",
    "self_attn.attention_output", "mlp.mlp_output", "mlp.router_logits", "mlp.expert_weights"};
enum { N_GRAD_BLOCK_VALUES = sizeof GRAD_BLOCK_VALUES / sizeof *GRAD_BLOCK_VALUES };

/* The gradient of each metric at the streams, the hyper-connection weights, attention and the
 * mixtures of every block, the embeddings and the final norm, against torch autograd on the fp32
 * fixture (grad_reference_L13.safetensors, the 13-token prompts of reference_L13): through
 * hyper_connection (Sinkhorn), hyper_mix, hyper_head, the compressors and hash routing. */
static void test_gradients(void)
{
    nnt_runtime *rt = t_runtime();
    nnt_model *m = load(rt, "deepseek_v4/fp32");
    t_ref r;
    open_ref(&r, rt, "deepseek_v4/fp32", 13);
    char gpath[512];
    t_fixture("deepseek_v4/fp32/grad_reference_L13.safetensors", gpath, sizeof gpath);
    static const char *const METRICS[] = {"logit-diff:11,29", "logprob:7", "loss"};
    int L = nnt_model_get_info(m)->num_layers, checked = 0;
    double worst = 0.0;
    for (int mi = 0; mi < 3; mi++) {
        nnt_trace *t;
        T_OK(rt, nnt_trace_new(m, &t));
        T_OK(rt, nnt_trace_metric(t, METRICS[mi], NULL, 0));
        char k[160];
        for (int l = 0; l < L; l++)
            for (int i = 0; i < N_GRAD_BLOCK_VALUES; i++) {
                snprintf(k, sizeof k, "layers.%d.%s", l, GRAD_BLOCK_VALUES[i]);
                T_OK(rt, nnt_trace_grad(t, k));
            }
        T_OK(rt, nnt_trace_grad(t, "layers.0.layer_input"));
        T_OK(rt, nnt_trace_grad(t, "token_embeddings"));
        T_OK(rt, nnt_trace_grad(t, "final_norm_output"));
        T_OK(rt, nnt_trace_run(t, r.ids, r.mask, r.batch, r.seq));
        for (int j = -3; j < L * N_GRAD_BLOCK_VALUES; j++) {
            char name[128];
            if (j == -3) snprintf(name, sizeof name, "layers.0.layer_input");
            else if (j == -2) snprintf(name, sizeof name, "token_embeddings");
            else if (j == -1) snprintf(name, sizeof name, "final_norm_output");
            else snprintf(name, sizeof name, "layers.%d.%s", j / N_GRAD_BLOCK_VALUES, GRAD_BLOCK_VALUES[j % N_GRAD_BLOCK_VALUES]);
            snprintf(k, sizeof k, "grad:%s", name);
            const nnt_tensor *got = nnt_trace_get(t, k);
            char rk[200];
            snprintf(rk, sizeof rk, "%s/grad:%s", METRICS[mi], name);
            nnt_tensor want;
            CU_ASSERT_FATAL(got != NULL);
            CU_ASSERT_FATAL(nnt_safetensors_read(rt, gpath, rk, &want) == NNT_OK);
            double e = t_rel_err(got, &want, NULL);
            if (!(e >= 0.0 && e <= 1e-4)) fprintf(stderr, "\n  %s: relative error %.3g\n", rk, e);
            CU_ASSERT(e >= 0.0 && e <= 1e-4);
            worst = e > worst ? e : worst;
            checked++;
            nnt_tensor_free(&want);
        }
        nnt_tensor want;
        snprintf(k, sizeof k, "%s/metric", METRICS[mi]);
        CU_ASSERT_FATAL(nnt_safetensors_read(rt, gpath, k, &want) == NNT_OK);
        const nnt_tensor *got = nnt_trace_get(t, "metric");
        CU_ASSERT_FATAL(got != NULL);
        CU_ASSERT_DOUBLE_EQUAL(nnt_tensor_get_f64(got, 0), nnt_tensor_get_f64(&want, 0), 1e-4);
        nnt_tensor_free(&want);
        nnt_trace_free(t);
    }
    CU_ASSERT_EQUAL(checked, 3 * (L * N_GRAD_BLOCK_VALUES + 3));
    if (getenv("NNT_TEST_VERBOSE")) fprintf(stderr, "\n  gradients: %d values, worst relative error %.3g\n", checked, worst);
    nnt_model_free(m);
    nnt_runtime_close(rt);
}

int register_tests(void)
{
    CU_pSuite s = CU_add_suite("deepseek", NULL, NULL);
    if (!s) return -1;
    if (!CU_add_test(s, "fp32 (save_pretrained names): every value at 3, 4, 5, 13, 40 tokens", test_fp32) ||
        !CU_add_test(s, "native FP8/FP4: values at 13 and 40 tokens", test_native) ||
        !CU_add_test(s, "hyper-connection block formula, comb columns, post range", test_block_formula) ||
        !CU_add_test(s, "the page's stream-mean identity", test_stream_mean) ||
        !CU_add_test(s, "steering: [hidden] on every stream, [streams, hidden] a row per stream", test_steer_streams) ||
        !CU_add_test(s, "lens of a rank-3 tensor: norm and lm_head alone", test_rank3_lens) ||
        !CU_add_test(s, "the SwiGLU clamp is active in the fixture", test_clamp_active) ||
        !CU_add_test(s, "hash routing ignores the hidden state; ablation", test_hash_routing) ||
        !CU_add_test(s, "refused inputs and unserved values", test_refusals) ||
        !CU_add_test(s, "transformers' module names load the same model; a missing tensor names its spellings",
                     test_transformers_names) ||
        !CU_add_test(s, "bf16 weights: the default precision matches transformers' float32 run",
                     test_bf16_weights_values) ||
        !CU_add_test(s, "precision = bf16 is as close to transformers-bf16 as transformers-bf16 is to fp32",
                     test_bf16_precision) ||
        !CU_add_test(s, "gradients of logit-diff, logprob and loss at every block's values match torch autograd",
                     test_gradients))
        return -1;
    return 0;
}
