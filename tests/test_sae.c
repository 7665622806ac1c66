/* test_sae.c - sparse autoencoders (nnt_sae.h) against sae-lens: the feature activations,
 * reconstruction and error of the committed SAELens folders of tests/fixtures/sae (ReLU, JumpReLU,
 * TopK, and the constant-norm and layer-norm inputs) on the tiny MiniMax-M2's block-1 output,
 * directly and attached to a trace; an SAE without edits leaves every value of the forward bit
 * for bit; edited features give the logits of SAELens's spliced forward (error term kept) on
 * transformers' model; and the errors of a bad folder or a misplaced SAE, with their messages.
 * tests/fixtures/make_sae_references.py made the fixtures. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/internal.h"
#include "test_util.h"

#define N_CASES 5
static const char *const CASES[N_CASES] = {"relu", "jumprelu", "topk", "relu_cnr", "topk_ln"};
static const int32_t IDS[2 * 10] = {235, 244, 202, 156, 148, 193, 80, 192, 183, 124,
                                    97,  63,  169, 247, 160, 3,   95, 102, 97,  92};
#define VALUE "layers.1.layer_output"

static nnt_runtime *rt;
static nnt_model *m;

static int setup(void)
{
    char dir[1024];
    if (nnt_runtime_open(t_ini(), &rt) != NNT_OK) return -1;
    snprintf(dir, sizeof dir, "%s/../../examples/tiny-minimax-m2", NNT_TEST_FIXTURES);
    return nnt_model_load(rt, dir, &m) == NNT_OK ? 0 : -1;
}

static int teardown(void)
{
    nnt_model_free(m);
    nnt_runtime_close(rt);
    return 0;
}

static const char *sae_dir(const char *name, char *buf, size_t n)
{
    char rel[256];
    snprintf(rel, sizeof rel, "sae/%s", name);
    return t_fixture(rel, buf, n);
}

/* Tensor `key` of fixtures/sae/FILE (caller frees). */
static void expected(const char *file, const char *key, nnt_tensor *out)
{
    char rel[256], path[1024];
    snprintf(rel, sizeof rel, "sae/%s", file);
    T_OK(rt, nnt_safetensors_read(rt, t_fixture(rel, path, sizeof path), key, out));
}

/* The largest |got - want| over every entry (shapes equal), at most tol. */
static double max_err(const char *what, const nnt_tensor *got, const nnt_tensor *want, double tol)
{
    CU_ASSERT_FATAL(got != NULL);
    CU_ASSERT_FATAL(nnt_shape_equal(got->ndim, got->shape, want->ndim, want->shape));
    double worst = 0, scale = 1;
    for (int64_t i = 0; i < nnt_tensor_numel(want); i++) {
        double a = nnt_tensor_get_f64(got, i), b = nnt_tensor_get_f64(want, i);
        worst = fmax(worst, fabs(a - b));
        scale = fmax(scale, fabs(b));
    }
    printf("\n  %-40s max |nnt - sae-lens| %.3g (scale %.3g)", what, worst, scale);
    CU_ASSERT(worst <= tol);
    return worst;
}

static nnt_sae *load(const char *name)
{
    char dir[1024];
    nnt_sae *s = NULL;
    T_OK(rt, nnt_sae_load(rt, sae_dir(name, dir, sizeof dir), &s));
    return s;
}

/* nnt_sae_encode on the committed input gives sae-lens's three tensors. */
static void test_encode(void)
{
    nnt_tensor x = {0};
    expected("expected.safetensors", "input", &x);
    int64_t n = x.shape[0] * x.shape[1], D = x.shape[2];
    for (int c = 0; c < N_CASES; c++) {
        nnt_sae *s = load(CASES[c]);
        const nnt_sae_info *in = nnt_sae_get_info(s);
        CU_ASSERT(in->d_in == 64 && in->d_sae == 96);
        nnt_tensor feats = {0}, recon = {0}, err = {0}, want = {0};
        int64_t fs[3] = {x.shape[0], x.shape[1], in->d_sae};
        T_OK(rt, nnt_tensor_alloc(&feats, NNT_F32, 3, fs));
        T_OK(rt, nnt_tensor_alloc(&recon, NNT_F32, 3, x.shape));
        T_OK(rt, nnt_tensor_alloc(&err, NNT_F32, 3, x.shape));
        CU_ASSERT_EQUAL_FATAL(nnt_sae_encode(s, x.data, n, feats.data, recon.data, NULL), NNT_OK);
        for (int64_t i = 0; i < n * D; i++) ((float *)err.data)[i] = ((float *)x.data)[i] - ((float *)recon.data)[i];
        const char *names[3] = {"feature_acts", "reconstruction", "error"};
        const nnt_tensor *got[3] = {&feats, &recon, &err};
        for (int k = 0; k < 3; k++) {
            char key[64], what[96];
            snprintf(key, sizeof key, "%s/%s", CASES[c], names[k]);
            snprintf(what, sizeof what, "encode %s", key);
            expected("expected.safetensors", key, &want);
            max_err(what, got[k], &want, 1e-5);
            nnt_tensor_free(&want);
        }
        /* decode alone gives the same reconstruction */
        nnt_tensor again = {0};
        T_OK(rt, nnt_tensor_alloc(&again, NNT_F32, 3, x.shape));
        CU_ASSERT_EQUAL(nnt_sae_decode(s, x.data, feats.data, n, again.data, NULL), NNT_OK);
        CU_ASSERT(memcmp(again.data, recon.data, nnt_tensor_nbytes(&recon)) == 0);
        nnt_tensor_free(&again);
        nnt_tensor_free(&feats);
        nnt_tensor_free(&recon);
        nnt_tensor_free(&err);
        nnt_sae_free(s);
    }
    nnt_tensor_free(&x);
}

/* A trace of the two rows saving every value ("*"), with SAE `name` attached to VALUE when given
 * (its three outputs saved, features edited when `edit`). */
static nnt_trace *run(const char *name, int edit)
{
    nnt_trace *t = NULL;
    T_OK(rt, nnt_trace_new(m, &t));
    if (name) {
        nnt_sae *s = load(name);
        T_OK(rt, nnt_trace_sae(t, VALUE, s));
        nnt_sae_free(s); /* the trace holds its own reference */
        T_OK(rt, nnt_trace_save(t, VALUE ".sae.feature_acts"));
        T_OK(rt, nnt_trace_save(t, VALUE ".sae.reconstruction"));
        T_OK(rt, nnt_trace_save(t, VALUE ".sae.error"));
        if (edit) {
            const int zero[2] = {3, 10}, five = 5, seven = 7;
            T_OK(rt, nnt_trace_sae_edit(t, VALUE ".sae.feature_acts", NNT_SAE_EDIT_ZERO, zero, 2, 0));
            T_OK(rt, nnt_trace_sae_edit(t, VALUE ".sae.feature_acts", NNT_SAE_EDIT_SCALE, &five, 1, 3.0f));
            T_OK(rt, nnt_trace_sae_edit(t, VALUE ".sae.feature_acts", NNT_SAE_EDIT_FILL, &seven, 1, 2.5f));
        }
    }
    T_OK(rt, nnt_trace_save(t, "*"));
    T_OK(rt, nnt_trace_run(t, IDS, NULL, 2, 10));
    return t;
}

/* Attached to the forward, the SAE serves sae-lens's tensors and leaves every value bitwise. */
static void test_trace(void)
{
    nnt_trace *plain = run(NULL, 0);
    for (int c = 0; c < N_CASES; c++) {
        nnt_trace *t = run(CASES[c], 0);
        const char *names[3] = {"feature_acts", "reconstruction", "error"};
        for (int k = 0; k < 3; k++) {
            char key[96], want_key[64], what[128];
            snprintf(key, sizeof key, VALUE ".sae.%s", names[k]);
            snprintf(want_key, sizeof want_key, "%s/%s", CASES[c], names[k]);
            snprintf(what, sizeof what, "trace %s", want_key);
            nnt_tensor want = {0};
            expected("expected.safetensors", want_key, &want);
            const nnt_tensor *got = nnt_trace_get(t, key);
            CU_ASSERT_FATAL(got && got->dtype == NNT_F32);
            max_err(what, got, &want, 1e-5);
            nnt_tensor_free(&want);
        }
        int same = nnt_trace_result_count(plain) > 10;
        for (int i = 0; i < nnt_trace_result_count(plain); i++) {
            const char *key;
            const nnt_tensor *a, *b;
            T_OK(rt, nnt_trace_result(plain, i, &key, &a));
            b = nnt_trace_get(t, key);
            if (!a) continue; /* a value absent as None in both */
            int eq = b && a->dtype == b->dtype && nnt_shape_equal(a->ndim, a->shape, b->ndim, b->shape) &&
                     memcmp(a->data, b->data, nnt_tensor_nbytes(a)) == 0;
            if (!eq) fprintf(stderr, "\n  %s without edits: %s differs from the plain forward\n", CASES[c], key);
            same = same && eq;
        }
        CU_ASSERT(same);
        nnt_trace_free(t);
    }
    nnt_trace_free(plain);
}

/* Edited features: the forward downstream of the splice equals SAELens's spliced forward on
 * transformers' model, and differs from the plain forward. */
static void test_spliced(void)
{
    nnt_trace *plain = run(NULL, 0), *t = run("relu", 1);
    const char *keys[2] = {"logits", "layers.2.layer_output"};
    for (int k = 0; k < 2; k++) {
        nnt_tensor want = {0};
        expected("spliced.safetensors", keys[k], &want);
        char what[96];
        snprintf(what, sizeof what, "spliced %s", keys[k]);
        max_err(what, nnt_trace_get(t, keys[k]), &want, 1e-4);
        const nnt_tensor *p = nnt_trace_get(plain, keys[k]);
        double moved = 0;
        for (int64_t i = 0; i < nnt_tensor_numel(&want); i++)
            moved = fmax(moved, fabs(nnt_tensor_get_f64(p, i) - nnt_tensor_get_f64(&want, i)));
        printf("\n  %-40s the edit moves it by %.3g", keys[k], moved);
        CU_ASSERT(moved > 1e-2);
        nnt_tensor_free(&want);
    }
    /* the features saved are the unedited ones, the error the clean error */
    nnt_tensor want = {0};
    expected("expected.safetensors", "relu/feature_acts", &want);
    max_err("spliced relu/feature_acts (unedited)", nnt_trace_get(t, VALUE ".sae.feature_acts"), &want, 1e-5);
    nnt_tensor_free(&want);
    nnt_trace_free(t);
    nnt_trace_free(plain);
}

/* A folder tmp/sae-NAME with cfg.json `cfg` and, when weights_from names a fixture SAE, its
 * weights. */
static const char *bad_dir(const char *name, const char *cfg, const char *weights_from, char *dir, size_t n)
{
    char path[1200], src[1024];
    snprintf(dir, n, "%s/sae-%s", t_tmpdir(), name);
    mkdir(dir, 0755);
    snprintf(path, sizeof path, "%s/cfg.json", dir);
    CU_ASSERT_FATAL(t_write_file(path, cfg) == 0);
    snprintf(path, sizeof path, "%s/sae_weights.safetensors", dir);
    remove(path);
    if (weights_from) {
        char rel[256];
        snprintf(rel, sizeof rel, "sae/%s/sae_weights.safetensors", weights_from);
        CU_ASSERT_FATAL(t_copy_file(t_fixture(rel, src, sizeof src), path) == 0);
    }
    return dir;
}

static void load_fails(const char *dir, nnt_status want, const char *a, const char *b)
{
    nnt_sae *s = (nnt_sae *)1;
    nnt_status st = nnt_sae_load(rt, dir, &s);
    const char *msg = nnt_last_error(rt);
    if (st != want || !strstr(msg, a) || !strstr(msg, b))
        fprintf(stderr, "\n  load %s: %s (%s), expected %s with '%s' and '%s'\n", dir, nnt_status_str(st), msg,
                nnt_status_str(want), a, b);
    CU_ASSERT_EQUAL(st, want);
    CU_ASSERT(s == NULL);
    CU_ASSERT(strstr(msg, a) != NULL && strstr(msg, b) != NULL);
}

static void test_errors(void)
{
    char dir[1024];
    /* cfg.json: a missing key, an unknown architecture, a bad k, an unsupported normalisation */
    load_fails(bad_dir("no-d-in", "{\"architecture\": \"standard\", \"d_sae\": 96}", "relu", dir, sizeof dir),
               NNT_ERR_CONFIG, "cfg.json: d_in", "missing");
    load_fails(bad_dir("gated", "{\"architecture\": \"gated\", \"d_in\": 64, \"d_sae\": 96}", "relu", dir, sizeof dir),
               NNT_ERR_UNSUPPORTED, "cfg.json: architecture", "\"gated\"");
    load_fails(bad_dir("no-arch", "{\"d_in\": 64, \"d_sae\": 96}", "relu", dir, sizeof dir), NNT_ERR_CONFIG,
               "cfg.json: architecture", "missing");
    load_fails(bad_dir("big-k", "{\"architecture\": \"topk\", \"d_in\": 64, \"d_sae\": 96, \"k\": 97}", "topk", dir,
                       sizeof dir),
               NNT_ERR_CONFIG, "cfg.json: k", "97");
    load_fails(bad_dir("whiten",
                       "{\"architecture\": \"standard\", \"d_in\": 64, \"d_sae\": 96, "
                       "\"normalize_activations\": \"covariance_whitening\"}",
                       "relu", dir, sizeof dir),
               NNT_ERR_UNSUPPORTED, "cfg.json: normalize_activations", "covariance_whitening");
    load_fails(bad_dir("not-json", "{\"architecture\": ", "relu", dir, sizeof dir), NNT_ERR_FORMAT, "cfg.json",
               "not a JSON object");
    /* the weights: a missing file, a missing tensor, a shape cfg.json does not give */
    load_fails(
        bad_dir("no-weights", "{\"architecture\": \"standard\", \"d_in\": 64, \"d_sae\": 96}", NULL, dir, sizeof dir),
        NNT_ERR_IO, "sae_weights.safetensors", "cannot open");
    load_fails(bad_dir("no-threshold", "{\"architecture\": \"jumprelu\", \"d_in\": 64, \"d_sae\": 96}", "relu", dir,
                       sizeof dir),
               NNT_ERR_NOT_FOUND, "sae_weights.safetensors", "'threshold' is missing");
    load_fails(
        bad_dir("d-sae", "{\"architecture\": \"standard\", \"d_in\": 64, \"d_sae\": 50}", "relu", dir, sizeof dir),
        NNT_ERR_SHAPE, "'W_enc' has shape [64, 96]", "[64, 50]");
    snprintf(dir, sizeof dir, "%s/sae-nowhere", t_tmpdir());
    load_fails(dir, NNT_ERR_IO, "sae-nowhere/cfg.json", "cannot open");

    /* d_in against the value: an SAE of d_in 32 on a [batch seq 64] value, refused before the forward */
    nnt_tensor w = {0};
    int64_t shapes[4][2] = {{32, 96}, {96, 32}, {96, 0}, {32, 0}};
    const char *names[4] = {"W_enc", "W_dec", "b_enc", "b_dec"};
    nnt_tensor ts[4];
    for (int i = 0; i < 4; i++) {
        memset(&ts[i], 0, sizeof ts[i]);
        T_OK(rt, nnt_tensor_alloc(&ts[i], NNT_F32, shapes[i][1] ? 2 : 1, shapes[i]));
    }
    bad_dir("d-in-32", "{\"architecture\": \"standard\", \"d_in\": 32, \"d_sae\": 96}", NULL, dir, sizeof dir);
    char wpath[1200];
    snprintf(wpath, sizeof wpath, "%s/sae_weights.safetensors", dir);
    T_OK(rt, nnt_safetensors_write(rt, wpath, 4, names, ts));
    for (int i = 0; i < 4; i++) nnt_tensor_free(&ts[i]);
    (void)w;
    nnt_sae *s = NULL;
    T_OK(rt, nnt_sae_load(rt, dir, &s));
    nnt_trace *t = NULL;
    T_OK(rt, nnt_trace_new(m, &t));
    T_OK(rt, nnt_trace_sae(t, VALUE, s));
    nnt_status st = nnt_trace_run(t, IDS, NULL, 2, 10);
    CU_ASSERT_EQUAL(st, NNT_ERR_SHAPE);
    CU_ASSERT(strstr(nnt_last_error(rt), "d-in-32/cfg.json: d_in 32") != NULL);
    CU_ASSERT(strstr(nnt_last_error(rt), "[2, 10, 64]") != NULL);
    printf("\n  d_in mismatch: %s", nnt_last_error(rt));
    nnt_trace_free(t);

    /* misplaced attachments and edits */
    nnt_sae *relu = load("relu");
    T_OK(rt, nnt_trace_new(m, &t));
    CU_ASSERT_EQUAL(nnt_trace_sae(t, "layers.*.layer_output", relu), NNT_ERR_PATH);
    CU_ASSERT(strstr(nnt_last_error(rt), "not a wildcard") != NULL);
    CU_ASSERT_EQUAL(nnt_trace_save(t, VALUE ".sae.feature_acts"), NNT_ERR_PATH);
    CU_ASSERT(strstr(nnt_last_error(rt), "no SAE is attached") != NULL);
    int f = 3;
    CU_ASSERT_EQUAL(nnt_trace_sae_edit(t, VALUE ".sae.feature_acts", NNT_SAE_EDIT_ZERO, &f, 1, 0), NNT_ERR_NOT_FOUND);
    T_OK(rt, nnt_trace_sae(t, VALUE, relu));
    CU_ASSERT_EQUAL(nnt_trace_sae(t, "layers[1].layer_output", relu), NNT_ERR_CONFLICT);
    f = 96;
    CU_ASSERT_EQUAL(nnt_trace_sae_edit(t, VALUE ".sae.feature_acts", NNT_SAE_EDIT_ZERO, &f, 1, 0), NNT_ERR_INDEX);
    CU_ASSERT(strstr(nnt_last_error(rt), "feature 96 is out of range") != NULL);
    CU_ASSERT_EQUAL(nnt_trace_sae_edit(t, VALUE ".sae.error", NNT_SAE_EDIT_ZERO, &f, 1, 0), NNT_ERR_PATH);
    CU_ASSERT_EQUAL(nnt_trace_save(t, VALUE ".sae.features"), NNT_ERR_PATH);
    CU_ASSERT_EQUAL(nnt_trace_save(t, VALUE ".sae.error[:, -1]"), NNT_ERR_PATH);
    /* a gradient through an SAE is refused, naming it */
    T_OK(rt, nnt_trace_grad(t, "layers.0.layer_output"));
    T_OK(rt, nnt_trace_metric(t, "logit-diff:1,2", NULL, 0));
    CU_ASSERT_EQUAL(nnt_trace_run(t, IDS, NULL, 2, 10), NNT_ERR_UNSUPPORTED);
    CU_ASSERT(strstr(nnt_last_error(rt), "an SAE") != NULL);
    nnt_trace_free(t);
    nnt_sae_free(relu);
    nnt_sae_free(s);
}

int register_tests(void)
{
    CU_pSuite s = CU_add_suite("sae", setup, teardown);
    if (!s) return -1;
    if (!CU_add_test(s, "encode and decode against sae-lens, every architecture", test_encode) ||
        !CU_add_test(s, "attached to a trace: sae-lens's outputs, the forward bitwise unchanged", test_trace) ||
        !CU_add_test(s, "edited features: SAELens's spliced forward on transformers", test_spliced) ||
        !CU_add_test(s, "errors: cfg.json, weights, d_in, misplaced requests", test_errors))
        return -1;
    return 0;
}
