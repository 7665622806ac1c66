/* test_checkpoint.c - checkpoint directories: FP8 e4m3 decoding and 128x128 block scales
 * (hand-computed cases, edge blocks included), and every loading error - missing or malformed
 * files, truncated data, missing tensors, shapes and dtypes that disagree with config.json, an
 * architecture no plugin serves, broken shard indexes. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/internal.h"
#include "test_util.h"

static void test_fp8_decode(void)
{
    /* e4m3fn: sign, exponent (bias 7), mantissa / 8 */
    CU_ASSERT_EQUAL(nnt_fp8_e4m3_to_f32(0x38), 1.0f);      /* 0 0111 000 */
    CU_ASSERT_EQUAL(nnt_fp8_e4m3_to_f32(0x40), 2.0f);      /* 0 1000 000 */
    CU_ASSERT_EQUAL(nnt_fp8_e4m3_to_f32(0xC0), -2.0f);     /* 1 1000 000 */
    CU_ASSERT_EQUAL(nnt_fp8_e4m3_to_f32(0x3C), 1.5f);      /* 0 0111 100 */
    CU_ASSERT_EQUAL(nnt_fp8_e4m3_to_f32(0x7E), 448.0f);    /* the largest finite value */
    CU_ASSERT_EQUAL(nnt_fp8_e4m3_to_f32(0x01), 0.001953125f); /* smallest subnormal, 2^-9 */
    CU_ASSERT_EQUAL(nnt_fp8_e4m3_to_f32(0x08), 0.015625f); /* smallest normal, 2^-6 */
    CU_ASSERT(isnan(nnt_fp8_e4m3_to_f32(0x7F)));
    CU_ASSERT(isnan(nnt_fp8_e4m3_to_f32(0xFF)));
    CU_ASSERT_EQUAL(nnt_e8m0_to_f32(127), 1.0f);
    CU_ASSERT_EQUAL(nnt_e8m0_to_f32(120), 1.0f / 128.0f);
    CU_ASSERT(isnan(nnt_e8m0_to_f32(255)));
}

/* Writes `n` tensors as dir/model.safetensors next to a config.json holding `config` and opens
 * the directory as a checkpoint. */
static nnt_checkpoint *write_checkpoint(const char *name, const char *config, int n, const char *const *keys,
                                        const nnt_tensor *const *vals)
{
    char dir[768], path[800];
    snprintf(dir, sizeof dir, "%s/%s", t_tmpdir(), name);
    mkdir(dir, 0755);
    snprintf(path, sizeof path, "%s/config.json", dir);
    if (t_write_file(path, config) != 0) return NULL;
    nnt_error err = {0};
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    if (nnt_st_write(path, n, keys, vals, NULL, &err) != NNT_OK) return NULL;
    nnt_checkpoint *ck = NULL;
    return nnt_checkpoint_open(dir, &ck, &err) == NNT_OK ? ck : NULL;
}

/* A 130 x 200 weight has 2 x 2 blocks of 128; the last row block holds 2 rows and the last
 * column block 72 columns. The loader hands out the stored bytes with the grid attached; every
 * entry decodes to its fp8 value times its block's scale. */
static void test_fp8_block_scales(void)
{
    enum { R = 130, C = 200 };
    uint8_t *w = malloc(R * C);
    float *out = malloc(R * C * sizeof(float));
    CU_ASSERT_FATAL(w && out);
    for (int r = 0; r < R; r++)
        for (int c = 0; c < C; c++) w[r * C + c] = (r + c) % 2 ? 0x40 : 0xB8; /* 2.0 or -1.0 */
    float scales[4] = {0.5f, 3.0f, 0.25f, 8.0f}, one = 1.0f;
    nnt_tensor tw = {.dtype = NNT_F8_E4M3, .ndim = 2, .shape = {R, C}, .data = w};
    nnt_tensor ts = {.dtype = NNT_F32, .ndim = 2, .shape = {2, 2}, .data = scales};
    nnt_tensor t1 = {.dtype = NNT_F32, .ndim = 2, .shape = {1, 1}, .data = &one};
    const char *keys[4] = {"a.weight", "a.weight_scale_inv", "b.weight", "b.weight_scale_inv"};
    const nnt_tensor *vals[4] = {&tw, &ts, &tw, &t1};
    nnt_checkpoint *ck = write_checkpoint("fp8_blocks", "{\"architectures\": [\"Test\"]}", 4, keys, vals);
    CU_ASSERT_PTR_NOT_NULL_FATAL(ck);
    nnt_tensor a;
    nnt_error err = {0};
    int64_t shape[2] = {R, C};
    CU_ASSERT_EQUAL_FATAL(nnt_ck_tensor(ck, "a.weight", 2, shape, &a, &err), NNT_OK);
    CU_ASSERT(a.dtype == NNT_F8_E4M3 && a.scale && a.scale_dtype == NNT_F32);
    CU_ASSERT(a.block_rows == 128 && a.block_cols == 128);
    CU_ASSERT_EQUAL(memcmp(a.data, w, R * C), 0); /* the stored bytes, not a copy */
    CU_ASSERT_EQUAL_FATAL(nnt_weight_decode(&a, 0, R, out, &err), NNT_OK);
    int bad = 0;
    for (int r = 0; r < R; r++)
        for (int c = 0; c < C; c++) {
            float v = (r + c) % 2 ? 2.0f : -1.0f;
            float want = v * scales[(r / 128) * 2 + c / 128];
            bad += out[r * C + c] != want;
        }
    CU_ASSERT_EQUAL(bad, 0);
    CU_ASSERT_EQUAL(out[129 * C + 199], -1.0f * 8.0f); /* the corner block: (129 + 199) is even */
    /* a scale grid computed with floor division (1 x 1) is refused */
    nnt_tensor b;
    CU_ASSERT_EQUAL(nnt_ck_tensor(ck, "b.weight", 2, shape, &b, &err), NNT_ERR_SHAPE);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "needs 2 x 2 blocks"));
    nnt_checkpoint_close(ck);
    free(w);
    free(out);
}

/* Encoding to e4m3fn, by hand from the format's definition (sign, 4 exponent bits of bias 7, 3
 * significand bits; subnormals in steps of 2^-9; 448 the largest finite value): nearest code,
 * ties to the even code, saturation above 448, NaN to 0x7f; and every finite code decodes and
 * encodes back to itself. */
static void test_fp8_encode(void)
{
    CU_ASSERT_EQUAL(nnt_f32_to_fp8_e4m3(1.0f), 0x38);
    CU_ASSERT_EQUAL(nnt_f32_to_fp8_e4m3(1.0625f), 0x38);           /* halfway 1 .. 1.125: to 1 (even) */
    CU_ASSERT_EQUAL(nnt_f32_to_fp8_e4m3(1.1875f), 0x3A);           /* halfway 1.125 .. 1.25: to 1.25 */
    CU_ASSERT_EQUAL(nnt_f32_to_fp8_e4m3(1.06f), 0x38);             /* below halfway: 1 */
    CU_ASSERT_EQUAL(nnt_f32_to_fp8_e4m3(1.07f), 0x39);             /* past halfway: 1.125 */
    CU_ASSERT_EQUAL(nnt_f32_to_fp8_e4m3(300.0f), 0x79);            /* steps of 32 above 256: 288 is nearest */
    CU_ASSERT_EQUAL(nnt_f32_to_fp8_e4m3(3.0f / 1024.0f), 0x02);    /* subnormal tie 1.5 * 2^-9: to 2 * 2^-9 */
    CU_ASSERT_EQUAL(nnt_f32_to_fp8_e4m3(1.0f / 1024.0f), 0x00);    /* tie 0.5 * 2^-9: to 0 */
    CU_ASSERT_EQUAL(nnt_f32_to_fp8_e4m3(0.0146484375f), 0x08);     /* 7.5 * 2^-9: to the smallest normal */
    CU_ASSERT_EQUAL(nnt_f32_to_fp8_e4m3(448.0f), 0x7E);
    CU_ASSERT_EQUAL(nnt_f32_to_fp8_e4m3(460.0f), 0x7E);
    CU_ASSERT_EQUAL(nnt_f32_to_fp8_e4m3(1000.0f), 0x7E);           /* saturates */
    CU_ASSERT_EQUAL(nnt_f32_to_fp8_e4m3(INFINITY), 0x7E);
    CU_ASSERT_EQUAL(nnt_f32_to_fp8_e4m3(-2.0f), 0xC0);
    CU_ASSERT_EQUAL(nnt_f32_to_fp8_e4m3(-0.0f), 0x80);
    CU_ASSERT_EQUAL(nnt_f32_to_fp8_e4m3(NAN), 0x7F);
    int bad = 0;
    for (int q = 0; q < 256; q++)
        if ((q & 0x7f) != 0x7f) bad += nnt_f32_to_fp8_e4m3(nnt_fp8_e4m3_to_f32((uint8_t)q)) != q;
    CU_ASSERT_EQUAL(bad, 0);
}

/* A checkpoint folder in scratch whose model.safetensors is a link to tests/fixtures/<rel>. */
static nnt_checkpoint *open_linked(const char *name, const char *rel)
{
    char dir[768], path[800], fx[512];
    snprintf(dir, sizeof dir, "%s/%s", t_tmpdir(), name);
    mkdir(dir, 0755);
    snprintf(path, sizeof path, "%s/config.json", dir);
    if (t_write_file(path, "{\"architectures\": [\"Test\"]}") != 0) return NULL;
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    unlink(path);
    if (symlink(t_fixture(rel, fx, sizeof fx), path) != 0) return NULL;
    nnt_checkpoint *ck = NULL;
    nnt_error err = {0};
    return nnt_checkpoint_open(dir, &ck, &err) == NNT_OK ? ck : NULL;
}

/* weights = fp8: the codes and block scales of a BF16 [2, 140, 136] and an F32 [130, 131] weight
 * are torch's, byte for byte (tests/fixtures/make_reencode_fixtures.py: edge blocks, a zero block,
 * magnitudes near 1e-30, ties), and the checkpoint's record holds their error as torch measured
 * it. */
static void test_fp8_reencode(void)
{
    nnt_checkpoint *ck = open_linked("reencode", "reencode/fp8.safetensors");
    CU_ASSERT_PTR_NOT_NULL_FATAL(ck);
    nnt_runtime *rt = t_runtime();
    char file[512];
    t_fixture("reencode/fp8.safetensors", file, sizeof file);
    static const char *const NAMES[2] = {"w_bf16", "w_f32"};
    static const int64_t SHAPES[2][3] = {{2, 140, 136}, {130, 131}};
    static const int NDIM[2] = {3, 2};
    double e2 = 0.0, r2 = 0.0;
    uint64_t values = 0;
    for (int i = 0; i < 2; i++) {
        char key[64];
        nnt_error err = {0};
        nnt_tensor q, w, codes, scales, rel;
        CU_ASSERT_EQUAL_FATAL(nnt_ck_tensor_fp8(ck, NAMES[i], NDIM[i], SHAPES[i], &q, &err), NNT_OK);
        snprintf(key, sizeof key, "%s.codes", NAMES[i]);
        T_OK(rt, nnt_safetensors_read(rt, file, key, &codes));
        snprintf(key, sizeof key, "%s.scales", NAMES[i]);
        T_OK(rt, nnt_safetensors_read(rt, file, key, &scales));
        snprintf(key, sizeof key, "%s.rel_rms", NAMES[i]);
        T_OK(rt, nnt_safetensors_read(rt, file, key, &rel));
        CU_ASSERT(q.dtype == NNT_F8_E4M3 && q.scale_dtype == NNT_F32 && q.block_rows == 128 && q.block_cols == 128);
        CU_ASSERT(q.ndim == NDIM[i] && q.shape[0] == SHAPES[i][0]);
        int64_t n = nnt_tensor_numel(&codes), ng = nnt_tensor_numel(&scales), diff = 0;
        CU_ASSERT_EQUAL_FATAL(n, nnt_tensor_numel(&q));
        for (int64_t k = 0; k < n; k++) diff += ((const uint8_t *)q.data)[k] != ((const uint8_t *)codes.data)[k];
        CU_ASSERT_EQUAL(diff, 0);
        CU_ASSERT_EQUAL(memcmp(q.scale, scales.data, (size_t)ng * sizeof(float)), 0);
        double want = nnt_tensor_get_f64(&rel, 0);
        /* the error of each value, decoded, against the stored one */
        float *dec = malloc((size_t)n * sizeof *dec);
        CU_ASSERT_FATAL(dec != NULL);
        CU_ASSERT_EQUAL_FATAL(nnt_weight_decode(&q, 0, n / SHAPES[i][NDIM[i] - 1], dec, &err), NNT_OK);
        CU_ASSERT_EQUAL_FATAL(nnt_ck_tensor(ck, NAMES[i], NDIM[i], SHAPES[i], &w, &err), NNT_OK);
        double ei = 0.0, ri = 0.0;
        for (int64_t k = 0; k < n; k++) {
            double v = nnt_tensor_get_f64(&w, k), d = v - dec[k];
            ei += d * d;
            ri += v * v;
        }
        CU_ASSERT(fabs(sqrt(ei / ri) - want) < 1e-6 * want);
        e2 += ei;
        r2 += ri;
        values += (uint64_t)n;
        free(dec);
        nnt_tensor_free(&codes);
        nnt_tensor_free(&scales);
        nnt_tensor_free(&rel);
    }
    nnt_reencoding all = {.struct_size = sizeof all};
    nnt_ck_reencoding(ck, &all);
    CU_ASSERT_EQUAL(all.tensors, 2);
    CU_ASSERT_EQUAL(all.values, values);
    CU_ASSERT_EQUAL(all.stored_bytes, 2 * 140 * 136 * 2 + 130 * 131 * 4);
    CU_ASSERT_EQUAL(all.encoded_bytes, values + (2 * 2 * 2 + 2 * 2) * 4);
    CU_ASSERT(fabs(all.rel_rms - sqrt(e2 / r2)) < 1e-6 * all.rel_rms);
    CU_ASSERT(strcmp(all.worst, "w_bf16") == 0 || strcmp(all.worst, "w_f32") == 0);
    /* a weight of one axis comes back as stored, and is not counted */
    nnt_error err = {0};
    nnt_tensor t;
    int64_t five[1] = {5};
    CU_ASSERT_EQUAL(nnt_ck_tensor_fp8(ck, "bias", 1, five, &t, &err), NNT_OK);
    CU_ASSERT(t.dtype == NNT_F32 && t.scale == NULL);
    nnt_ck_reencoding(ck, &all);
    CU_ASSERT_EQUAL(all.tensors, 2);
    nnt_runtime_close(rt);
    nnt_checkpoint_close(ck);
}

/* weights = fp8 refuses a weight holding a value that is not finite, naming the tensor and element. */
static void test_fp8_reencode_not_finite(void)
{
    float w[3 * 4] = {0};
    w[6] = NAN;
    nnt_tensor tw = {.dtype = NNT_F32, .ndim = 2, .shape = {3, 4}, .data = w};
    const char *keys[1] = {"x.weight"};
    const nnt_tensor *vals[1] = {&tw};
    nnt_checkpoint *ck = write_checkpoint("fp8_nan", "{\"architectures\": [\"Test\"]}", 1, keys, vals);
    CU_ASSERT_PTR_NOT_NULL_FATAL(ck);
    nnt_error err = {0};
    nnt_tensor t;
    int64_t shape[2] = {3, 4};
    CU_ASSERT_EQUAL(nnt_ck_tensor_fp8(ck, "x.weight", 2, shape, &t, &err), NNT_ERR_SHAPE);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "'x.weight'"));
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "[1, 2]"));
    nnt_reencoding r = {.struct_size = sizeof r};
    nnt_ck_reencoding(ck, &r);
    CU_ASSERT_EQUAL(r.tensors, 0);
    nnt_checkpoint_close(ck);
}

/* ---- broken checkpoint directories built from the fp32 fixture ---- */

static const char *new_dir(const char *name)
{
    static char dir[768];
    snprintf(dir, sizeof dir, "%s/%s", t_tmpdir(), name);
    mkdir(dir, 0755);
    return dir;
}

static char *read_text(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    rewind(f);
    char *s = calloc((size_t)n + 1, 1);
    if (s && fread(s, 1, (size_t)n, f) != (size_t)n) s[0] = '\0';
    fclose(f);
    return s;
}

/* Writes DIR/config.json: the fixture's, with `from` replaced by `to` when given. */
static void write_config(const char *dir, const char *from, const char *to)
{
    char src[768], dst[800], fx[512];
    snprintf(src, sizeof src, "%s/config.json", t_fixture("minimax_m2/fp32", fx, sizeof fx));
    snprintf(dst, sizeof dst, "%s/config.json", dir);
    char *text = read_text(src);
    CU_ASSERT_FATAL(text != NULL);
    if (from) {
        char *at = strstr(text, from);
        CU_ASSERT_FATAL(at != NULL);
        size_t n = strlen(text) + strlen(to) + 1;
        char *out = malloc(n);
        snprintf(out, n, "%.*s%s%s", (int)(at - text), text, to, at + strlen(from));
        CU_ASSERT_FATAL(t_write_file(dst, out) == 0);
        free(out);
    } else {
        CU_ASSERT_FATAL(t_write_file(dst, text) == 0);
    }
    free(text);
}

/* Drops the tensor named by user[0] and marks the one named by user[1] as I32. */
static int drop_or_retype(void *user, char *name, size_t n, const nnt_tensor *in, nnt_tensor *out, int *owned)
{
    const char *const *what = user;
    if (what[0] && strcmp(name, what[0]) == 0) return 0;
    if (what[1] && strcmp(name, what[1]) == 0) out->dtype = NNT_I32; /* same bytes, wrong type */
    return 1;
}

/* Writes DIR/<file> with the fixture's tensors, leaving out `drop` and storing `as_int` as I32. */
static void write_weights(const char *dir, const char *file, const char *drop, const char *as_int)
{
    char src[768], dst[800], fx[512];
    snprintf(src, sizeof src, "%s/model.safetensors", t_fixture("minimax_m2/fp32", fx, sizeof fx));
    snprintf(dst, sizeof dst, "%s/%s", dir, file);
    const char *what[2] = {drop, as_int};
    CU_ASSERT_EQUAL(t_rewrite_weights(src, dst, drop_or_retype, (void *)what, 0, NULL, NULL), 0);
}

static void expect_load(const char *dir, nnt_status status, const char *needle)
{
    nnt_runtime *rt = t_runtime();
    nnt_model *m = NULL;
    T_FAILS(rt, nnt_model_load(rt, dir, &m), status, needle);
    CU_ASSERT_PTR_NULL(m);
    nnt_runtime_close(rt);
}

static void test_missing_files(void)
{
    const char *d = new_dir("empty");
    expect_load(d, NNT_ERR_IO, "config.json: cannot open");
    write_config(d, NULL, NULL);
    expect_load(d, NNT_ERR_IO, "holds neither model.safetensors nor model.safetensors.index.json");
    char p[800];
    snprintf(p, sizeof p, "%s/config.json", new_dir("badjson"));
    CU_ASSERT_FATAL(t_write_file(p, "{\"hidden_size\": 64,,}") == 0);
    expect_load(new_dir("badjson"), NNT_ERR_FORMAT, "config.json: malformed JSON");
}

static void test_truncated_weights(void)
{
    const char *d = new_dir("truncated");
    write_config(d, NULL, NULL);
    char src[768], dst[800], fx[512];
    snprintf(src, sizeof src, "%s/model.safetensors", t_fixture("minimax_m2/fp32", fx, sizeof fx));
    snprintf(dst, sizeof dst, "%s/model.safetensors", d);
    char *all = NULL;
    FILE *f = fopen(src, "rb");
    CU_ASSERT_FATAL(f != NULL);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    rewind(f);
    all = malloc((size_t)n);
    CU_ASSERT_FATAL(fread(all, 1, (size_t)n, f) == (size_t)n);
    fclose(f);
    f = fopen(dst, "wb");
    fwrite(all, 1, (size_t)(n - 1000), f); /* the last kilobyte is gone */
    fclose(f);
    free(all);
    expect_load(d, NNT_ERR_FORMAT, "is the file truncated?");
}

static void test_missing_tensor(void)
{
    const char *d = new_dir("missing");
    write_config(d, NULL, NULL);
    write_weights(d, "model.safetensors", "model.layers.1.self_attn.q_norm.weight", NULL);
    expect_load(d, NNT_ERR_NOT_FOUND, "has no tensor 'model.layers.1.self_attn.q_norm.weight'");
    d = new_dir("missing_expert");
    write_config(d, NULL, NULL);
    write_weights(d, "model.safetensors", "model.layers.2.block_sparse_moe.experts.3.w1.weight", NULL);
    expect_load(d, NNT_ERR_NOT_FOUND, "expert 3 of block 2 is missing");
}

static void test_shape_disagrees(void)
{
    const char *d = new_dir("shape");
    write_config(d, "\"intermediate_size\": 48", "\"intermediate_size\": 40");
    write_weights(d, "model.safetensors", NULL, NULL);
    expect_load(d, NNT_ERR_SHAPE, "tensor 'model.layers.0.block_sparse_moe.experts.0.w1.weight' has shape [48, 64], but config.json implies [40, 64]");
    d = new_dir("dtype");
    write_config(d, NULL, NULL);
    write_weights(d, "model.safetensors", NULL, "model.layers.0.self_attn.k_norm.weight");
    expect_load(d, NNT_ERR_SHAPE, "'model.layers.0.self_attn.k_norm.weight' has dtype I32");
    d = new_dir("config_field");
    write_config(d, "\"num_hidden_layers\": 3", "\"num_hidden_layerz\": 3");
    write_weights(d, "model.safetensors", NULL, NULL);
    expect_load(d, NNT_ERR_CONFIG, "required field 'num_hidden_layers' is missing");
    d = new_dir("config_type");
    write_config(d, "\"num_attention_heads\": 4", "\"num_attention_heads\": \"four\"");
    write_weights(d, "model.safetensors", NULL, NULL);
    expect_load(d, NNT_ERR_CONFIG, "field 'num_attention_heads' is \"four\", expected an integer");
}

/* A key given twice in config.json: Python's json keeps the last, cJSON would find the first,
 * so the file is refused, wherever the object sits. */
static void test_config_duplicate_keys(void)
{
    const char *d = new_dir("dup_key");
    write_config(d, "\"num_hidden_layers\": 3", "\"num_hidden_layers\": 3, \"num_hidden_layers\": 2");
    write_weights(d, "model.safetensors", NULL, NULL);
    expect_load(d, NNT_ERR_FORMAT, "config.json: key 'num_hidden_layers' appears twice");
    write_config(d, "\"hidden_size\": 64", "\"hidden_size\": 64, \"quantization_config\": {\"a\": [1, {\"b\": 1, \"b\": 2}]}");
    expect_load(d, NNT_ERR_FORMAT, "config.json: key 'quantization_config.a[1].b' appears twice");
}

static int set_config_int(const char *dir, const char *key, const char *value);

/* MiniMax-M2 without rotary_dim: the rotary share of the head is bounded before the product. */
static void test_rotary_share(void)
{
    const char *d = new_dir("rotary_share");
    write_config(d, "\"rotary_dim\": 16", "\"rotary_dim_unused\": 16");
    CU_ASSERT_FATAL(set_config_int(d, "partial_rotary_factor", "1e300") == 0);
    write_weights(d, "model.safetensors", NULL, NULL);
    expect_load(d, NNT_ERR_CONFIG,
                "config.json: field 'rope_parameters.partial_rotary_factor' is 1e+300, outside its domain: expected a number in [0, 1]");
    CU_ASSERT_FATAL(set_config_int(d, "partial_rotary_factor", "0.5") == 0);
    nnt_runtime *rt = t_runtime();
    nnt_model *m = NULL;
    T_OK(rt, nnt_model_load(rt, d, &m));
    nnt_model_free(m);
    nnt_runtime_close(rt);
}

static void test_unserved_architecture(void)
{
    const char *d = new_dir("llama");
    write_config(d, "\"MiniMaxM2ForCausalLM\"", "\"LlamaForCausalLM\"");
    char p[800];
    snprintf(p, sizeof p, "%s/config.json", d);
    char *text = read_text(p);
    char *mt = strstr(text, "\"minimax_m2\"");
    CU_ASSERT_FATAL(mt != NULL);
    memcpy(mt, "\"llama_xyz\" ", 12);
    CU_ASSERT_FATAL(t_write_file(p, text) == 0);
    free(text);
    write_weights(d, "model.safetensors", NULL, NULL);
    expect_load(d, NNT_ERR_NOT_FOUND,
                "no installed family plugin serves architecture 'LlamaForCausalLM' (model_type 'llama_xyz'); "
                "installed plugins serve: ");
    /* the list names each installed family's architectures */
    expect_load(d, NNT_ERR_NOT_FOUND, "MiniMaxM2ForCausalLM (minimax_m2)");
}

static void test_shard_index(void)
{
    const char *d = new_dir("shards");
    write_config(d, NULL, NULL);
    write_weights(d, "part-1.safetensors", NULL, NULL);
    char p[800];
    snprintf(p, sizeof p, "%s/model.safetensors.index.json", d);
    CU_ASSERT_FATAL(t_write_file(p, "{\"metadata\": {}, \"weight_map\": {\"model.norm.weight\": \"part-2.safetensors\"}}") == 0);
    expect_load(d, NNT_ERR_IO, "part-2.safetensors: cannot open");
    CU_ASSERT_FATAL(t_write_file(p, "{\"weight_map\": {\"model.bogus.weight\": \"part-1.safetensors\"}}") == 0);
    expect_load(d, NNT_ERR_NOT_FOUND, "weight_map puts tensor 'model.bogus.weight' in");
    CU_ASSERT_FATAL(t_write_file(p, "{\"weight_map\": {\"model.norm.weight\": \"../x.safetensors\"}}") == 0);
    expect_load(d, NNT_ERR_FORMAT, "not a file in the directory");
    CU_ASSERT_FATAL(t_write_file(p, "{\"weight_map\": [1]}") == 0);
    expect_load(d, NNT_ERR_FORMAT, "expected an object field 'weight_map'");
    /* a correct index over one shard loads */
    CU_ASSERT_FATAL(t_write_file(p, "{\"weight_map\": {\"model.norm.weight\": \"part-1.safetensors\"}}") == 0);
    nnt_runtime *rt = t_runtime();
    nnt_model *m = NULL;
    T_OK(rt, nnt_model_load(rt, d, &m));
    nnt_model_free(m);
    nnt_runtime_close(rt);
}

static void test_fp8_missing_scale(void)
{
    char d[768], fx[512], src[768], dst[800];
    t_checkpoint_dir("fp8_noscale", "minimax_m2/fp8", d, sizeof d);
    snprintf(src, sizeof src, "%s/model.safetensors", t_fixture("minimax_m2/fp8", fx, sizeof fx));
    snprintf(dst, sizeof dst, "%s/model.safetensors", d);
    const char *what[2] = {"model.layers.1.self_attn.o_proj.weight_scale_inv", NULL};
    CU_ASSERT_EQUAL(t_rewrite_weights(src, dst, drop_or_retype, (void *)what, 0, NULL, NULL), 0);
    expect_load(d, NNT_ERR_NOT_FOUND, "FP8 tensor 'model.layers.1.self_attn.o_proj.weight' has no companion");
}

/* FP4 e2m1 codes, the nibble order (low nibble = even column: byte 0x21 is 0.5 then 1.0), and
 * one E8M0 scale per 32 columns - values worked out by hand. */
static void test_fp4_decode(void)
{
    CU_ASSERT_EQUAL(nnt_fp4_e2m1_to_f32(0x0), 0.0f);
    CU_ASSERT_EQUAL(nnt_fp4_e2m1_to_f32(0x1), 0.5f);
    CU_ASSERT_EQUAL(nnt_fp4_e2m1_to_f32(0x2), 1.0f);
    CU_ASSERT_EQUAL(nnt_fp4_e2m1_to_f32(0x3), 1.5f);
    CU_ASSERT_EQUAL(nnt_fp4_e2m1_to_f32(0x5), 3.0f);
    CU_ASSERT_EQUAL(nnt_fp4_e2m1_to_f32(0x7), 6.0f);
    CU_ASSERT_EQUAL(nnt_fp4_e2m1_to_f32(0x9), -0.5f);
    CU_ASSERT_EQUAL(nnt_fp4_e2m1_to_f32(0xF), -6.0f);
    enum { R = 2, C = 64 };
    uint8_t packed[R * C / 2];
    memset(packed, 0x21, sizeof packed);
    packed[C / 2 - 1] = 0xF9; /* row 0, columns 62 (low, -0.5) and 63 (high, -6) */
    uint8_t e[4] = {127, 128, 126, 130}; /* 1, 2 | 0.5, 8 */
    nnt_tensor w = {.dtype = NNT_F4_E2M1, .ndim = 2, .shape = {R, C}, .data = packed, .scale = e,
                    .scale_dtype = NNT_F8_E8M0, .block_rows = 1, .block_cols = 32};
    float out[R * C];
    nnt_error err = {0};
    CU_ASSERT_EQUAL_FATAL(nnt_weight_decode(&w, 0, R, out, &err), NNT_OK);
    CU_ASSERT_EQUAL(out[0], 0.5f);      /* row 0, even column, scale 1 */
    CU_ASSERT_EQUAL(out[1], 1.0f);      /* odd column */
    CU_ASSERT_EQUAL(out[32], 1.0f);     /* second group: scale 2 */
    CU_ASSERT_EQUAL(out[33], 2.0f);
    CU_ASSERT_EQUAL(out[62], -1.0f);    /* -0.5 x 2 */
    CU_ASSERT_EQUAL(out[63], -12.0f);   /* -6 x 2 */
    CU_ASSERT_EQUAL(out[C + 0], 0.25f); /* row 1: scales 0.5 and 8 */
    CU_ASSERT_EQUAL(out[C + 33], 8.0f);
}

/* A checkpoint holding an FP8 weight with DeepSeek-V4's native E8M0 `.scale` companion and an
 * FP4 weight packed two per byte with group scales: both come out encoded, with their grids. */
static void test_native_quantised_names(void)
{
    char dir[768], path[800];
    snprintf(dir, sizeof dir, "%s/native_q", t_tmpdir());
    mkdir(dir, 0755);
    snprintf(path, sizeof path, "%s/config.json", dir);
    CU_ASSERT_FATAL(t_write_file(path, "{\"architectures\": [\"Test\"], \"model_type\": \"test\"}") == 0);
    uint8_t w8[130 * 3], s8[2] = {128, 125}, w4[2 * 16], s4[2 * 1] = {127, 129}; /* 2, 0.25 | 1, 4 */
    for (int i = 0; i < 130 * 3; i++) w8[i] = i < 128 * 3 ? 0x38 : 0xC0; /* 1.0 then -2.0 */
    memset(w4, 0x3A, sizeof w4);                                       /* low 0xA = -1, high 0x3 = 1.5 */
    nnt_tensor t[4] = {{.dtype = NNT_F8_E4M3, .ndim = 2, .shape = {130, 3}, .data = w8},
                       {.dtype = NNT_F8_E8M0, .ndim = 2, .shape = {2, 1}, .data = s8},
                       {.dtype = NNT_I8, .ndim = 2, .shape = {2, 16}, .data = w4},
                       {.dtype = NNT_F8_E8M0, .ndim = 2, .shape = {2, 1}, .data = s4}};
    const char *keys[4] = {"a.weight", "a.scale", "b.weight", "b.scale"};
    const nnt_tensor *vals[4] = {&t[0], &t[1], &t[2], &t[3]};
    nnt_error err = {0};
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    CU_ASSERT_EQUAL_FATAL(nnt_st_write(path, 4, keys, vals, NULL, &err), NNT_OK);
    nnt_checkpoint *ck;
    CU_ASSERT_EQUAL_FATAL(nnt_checkpoint_open(dir, &ck, &err), NNT_OK);
    nnt_tensor a, b;
    int64_t as[2] = {130, 3}, bs[2] = {2, 32};
    float ad[130 * 3], bd[2 * 32];
    CU_ASSERT_EQUAL_FATAL(nnt_ck_tensor(ck, "a.weight", 2, as, &a, &err), NNT_OK);
    CU_ASSERT(a.dtype == NNT_F8_E4M3 && a.scale_dtype == NNT_F8_E8M0 && a.block_rows == 128 && a.block_cols == 128);
    CU_ASSERT_EQUAL_FATAL(nnt_weight_decode(&a, 0, 130, ad, &err), NNT_OK);
    CU_ASSERT_EQUAL(ad[0], 2.0f);            /* 1.0 x 2^(128-127) */
    CU_ASSERT_EQUAL(ad[129 * 3 + 2], -0.5f); /* -2.0 x 2^(125-127) */
    CU_ASSERT_EQUAL_FATAL(nnt_ck_tensor(ck, "b.weight", 2, bs, &b, &err), NNT_OK);
    CU_ASSERT(b.dtype == NNT_F4_E2M1 && b.shape[1] == 32 && b.block_rows == 1 && b.block_cols == 32);
    CU_ASSERT_EQUAL(memcmp(b.data, w4, sizeof w4), 0); /* the packed bytes as stored */
    CU_ASSERT_EQUAL_FATAL(nnt_weight_decode(&b, 0, 2, bd, &err), NNT_OK);
    CU_ASSERT_EQUAL(bd[0], -1.0f);
    CU_ASSERT_EQUAL(bd[1], 1.5f);
    CU_ASSERT_EQUAL(bd[32 + 0], -4.0f); /* row 1: scale 4 */
    /* asked for the packed width itself, the weight is not taken for FP4 */
    int64_t wrong[2] = {2, 16};
    CU_ASSERT_EQUAL(nnt_ck_tensor(ck, "b.weight", 2, wrong, &b, &err), NNT_ERR_SHAPE);
    nnt_checkpoint_close(ck);
}

/* Writes `dst`: the safetensors file `src` with `pad` more spaces after its header's JSON
 * object, so its data section (and every tensor) moves by pad bytes. Returns 0 on success. */
static int pad_header(const char *src, const char *dst, int pad)
{
    FILE *f = fopen(src, "rb");
    if (!f) return -1;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    rewind(f);
    unsigned char *all = malloc((size_t)n);
    int bad = !all || fread(all, 1, (size_t)n, f) != (size_t)n;
    fclose(f);
    uint64_t h = 0;
    for (int i = 7; !bad && i >= 0; i--) h = (h << 8) | all[i];
    FILE *o = bad ? NULL : fopen(dst, "wb");
    if (!o) {
        free(all);
        return -1;
    }
    uint64_t h2 = h + (uint64_t)pad;
    for (int i = 0; i < 8; i++) fputc((int)((h2 >> (8 * i)) & 0xff), o);
    fwrite(all + 8, 1, (size_t)h, o);
    for (int i = 0; i < pad; i++) fputc(' ', o);
    fwrite(all + 8 + h, 1, (size_t)(n - 8 - (long)h), o);
    bad = fclose(o) != 0;
    free(all);
    return bad ? -1 : 0;
}

/* Copies a fixture's checkpoint (config, index, every weight shard; not its references) into
 * the scratch directory `name`, each shard's header padded by `pad` spaces. Returns 0 on
 * success, the directory in buf. */
static int copy_checkpoint(const char *fixture, const char *name, int pad, char *buf, size_t n)
{
    char fx[512];
    t_fixture(fixture, fx, sizeof fx);
    snprintf(buf, n, "%s/%s", t_tmpdir(), name);
    mkdir(buf, 0755);
    DIR *dir = opendir(fx);
    if (!dir) return -1;
    int bad = 0;
    for (struct dirent *e; !bad && (e = readdir(dir));) {
        if (e->d_name[0] == '.' || strncmp(e->d_name, "reference", 9) == 0) continue;
        char src[1024], dst[1024];
        snprintf(src, sizeof src, "%s/%s", fx, e->d_name);
        snprintf(dst, sizeof dst, "%s/%s", buf, e->d_name);
        size_t l = strlen(e->d_name);
        if (l > 12 && strcmp(e->d_name + l - 12, ".safetensors") == 0) bad = pad_header(src, dst, pad) != 0;
        else bad = t_copy_file(src, dst) != 0;
    }
    closedir(dir);
    return bad ? -1 : 0;
}

/* Runs ids through the model in `dir` saving logits and the last block's output; returns the
 * trace (caller frees model, trace) and the model's memory counts. */
static nnt_trace *run_dir(nnt_runtime *rt, const char *dir, nnt_model **m, nnt_memory *mem)
{
    static const int32_t ids[6] = {1, 5, 9, 13, 2, 7};
    T_OK(rt, nnt_model_load(rt, dir, m));
    T_OK(rt, nnt_model_memory(*m, mem));
    nnt_trace *t = NULL;
    T_OK(rt, nnt_trace_new(*m, &t));
    T_OK(rt, nnt_trace_save(t, "logits"));
    T_OK(rt, nnt_trace_save(t, "layers.0.layer_output"));
    T_OK(rt, nnt_trace_run(t, ids, NULL, 1, 6));
    return t;
}

static int same_value(const nnt_trace *a, const nnt_trace *b, const char *path)
{
    const nnt_tensor *x = nnt_trace_get(a, path), *y = nnt_trace_get(b, path);
    if (!x || !y || x->dtype != y->dtype || !nnt_shape_equal(x->ndim, x->shape, y->ndim, y->shape)) return 0;
    return memcmp(x->data, y->data, (size_t)nnt_tensor_nbytes(x)) == 0;
}

/* The format lets a header's length be any number; a header of 8k+1..8k+7 bytes leaves every
 * F32, BF16 and I64 tensor misaligned in the mapping. Each such checkpoint gives the very values
 * of the original (bit for bit), its misaligned tensors read from aligned copies the model
 * counts as allocated rather than mapped. Under the sanitizer build, UBSan's alignment check
 * would report any typed load from the mapping. */
static void test_misaligned_header(void)
{
    static const struct {
        const char *fixture;
        int pads[7], n;
    } cases[] = {
        {"minimax_m2/fp32", {1, 2, 3, 4, 5, 6, 7}, 7}, /* F32 */
        {"minimax_m2/bf16", {1, 3}, 2},                /* BF16 */
        {"minimax_m2/fp8", {2}, 1},                    /* FP8 with F32 block scales */
        {"mimo_v2_flash/fp8_per_head", {1}, 1},        /* per-head scale grids, re-laid */
        {"deepseek_v4/native", {5}, 1},                /* packed FP4, E8M0 scales */
        {"kimi_linear/fp32", {6}, 1},
    };
    nnt_runtime *rt = t_runtime();
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        char fx[512], orig_dir[768];
        t_fixture(cases[c].fixture, fx, sizeof fx);
        snprintf(orig_dir, sizeof orig_dir, "%s", fx);
        nnt_model *m0 = NULL;
        nnt_memory mem0;
        nnt_trace *t0 = run_dir(rt, orig_dir, &m0, &mem0);
        for (int p = 0; p < cases[c].n; p++) {
            char name[64], d[768];
            snprintf(name, sizeof name, "pad%d_%zu", cases[c].pads[p], c);
            CU_ASSERT_FATAL(copy_checkpoint(cases[c].fixture, name, cases[c].pads[p], d, sizeof d) == 0);
            nnt_model *m = NULL;
            nnt_memory mem;
            nnt_trace *t = run_dir(rt, d, &m, &mem);
            int same = same_value(t, t0, "logits") && same_value(t, t0, "layers.0.layer_output");
            if (!same) fprintf(stderr, "\n  %s with %d pad bytes: values differ\n", cases[c].fixture, cases[c].pads[p]);
            CU_ASSERT(same);
            /* an odd shift misaligns every tensor of 2-byte or wider elements: those were read
             * from copies, so fewer bytes count as mapped */
            if (cases[c].pads[p] % 2) CU_ASSERT(mem.mapped_bytes < mem0.mapped_bytes);
            nnt_trace_free(t);
            nnt_model_free(m);
        }
        nnt_trace_free(t0);
        nnt_model_free(m0);
    }
    nnt_runtime_close(rt);
}

/* Sets the first numeric field named `key` in DIR/config.json (at any depth) to `value`; 0 on
 * success. */
static int set_config_int(const char *dir, const char *key, const char *value)
{
    char p[800], pat[128];
    snprintf(p, sizeof p, "%s/config.json", dir);
    snprintf(pat, sizeof pat, "\"%s\":", key);
    char *text = read_text(p);
    char *at = text ? strstr(text, pat) : NULL;
    if (!at) {
        free(text);
        return -1;
    }
    char *num = at + strlen(pat);
    while (*num == ' ') num++;
    char *end = num;
    while (*end && strchr("0123456789+-.eE", *end)) end++;
    size_t n = strlen(text) + strlen(value) + 1;
    char *out = malloc(n);
    snprintf(out, n, "%.*s%s%s", (int)(num - text), text, value, end);
    int rc = t_write_file(p, out);
    free(out);
    free(text);
    return rc;
}

/* Numbers outside their field's domain (core/checkpoint/config_domains.c) are refused at load,
 * naming the file, the field, the value and the domain, on every family: before, rms_norm_eps = -1
 * loaded and gave all-NaN logits. */
static void test_config_domains(void)
{
    static const struct {
        const char *fixture, *key, *value, *msg;
    } cases[] = {
        {"minimax_m2/fp32", "rms_norm_eps", "-1", "field 'rms_norm_eps' is -1, outside its domain: expected a finite number > 0"},
        {"mimo_v2_flash/fp32", "rms_norm_eps", "0", "field 'rms_norm_eps' is 0, outside its domain: expected a finite number > 0"},
        {"kimi_linear/fp32", "rms_norm_eps", "-1e-5", "field 'rms_norm_eps' is -1e-05, outside its domain"},
        {"deepseek_v4/fp32", "rms_norm_eps", "-1", "field 'rms_norm_eps' is -1, outside its domain"},
        {"minimax_m2/fp32", "rope_theta", "0", "rope_theta' is 0, outside its domain: expected a finite number > 0"},
        {"minimax_m2/fp32", "num_attention_heads", "0", "field 'num_attention_heads' is 0, outside its domain: expected an integer >= 1"},
        {"kimi_linear/fp32", "num_experts_per_token", "-3", "field 'num_experts_per_token' is -3, outside its domain"},
        {"minimax_m2/fp32", "rms_norm_eps", "1e999", "field 'rms_norm_eps'"},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        char name[64], d[768];
        snprintf(name, sizeof name, "domain%zu", c);
        CU_ASSERT_FATAL(copy_checkpoint(cases[c].fixture, name, 0, d, sizeof d) == 0);
        if (set_config_int(d, cases[c].key, cases[c].value) != 0) {
            fprintf(stderr, "\n  %s has no %s\n", cases[c].fixture, cases[c].key);
            CU_FAIL("fixture field missing");
            continue;
        }
        expect_load(d, NNT_ERR_CONFIG, cases[c].msg);
    }
    /* config.json is read whole into a tree of some 40 times its text: past 4 MiB it is refused */
    char d[768], p[800];
    CU_ASSERT_FATAL(copy_checkpoint("minimax_m2/fp32", "config_big", 0, d, sizeof d) == 0);
    snprintf(p, sizeof p, "%s/config.json", d);
    char *text = read_text(p), *brace = text ? strchr(text, '{') : NULL;
    FILE *f = fopen(p, "wb");
    CU_ASSERT_FATAL(brace && f);
    fputs("{\"padding\": [", f);
    for (long i = 0; i < (2L << 20) + 8; i++) fputs(i ? ",0" : "0", f);
    fputs("],", f);
    fputs(brace + 1, f);
    char want[128];
    snprintf(want, sizeof want, "config.json: %ld bytes, more than the 4194304 expected at most", ftell(f));
    fclose(f);
    free(text);
    expect_load(d, NNT_ERR_FORMAT, want);
}

/* A block or expert count in config.json is bounded by the tensors the checkpoint holds before
 * the family allocates by it (1e9 blocks once meant a terabyte asked of malloc and "no memory"):
 * the message names config.json, the field, its value and the tensor it disagrees with. */
static void test_config_counts_bounded(void)
{
    static const struct {
        const char *fixture, *key, *msg;
    } cases[] = {
        {"minimax_m2/fp32", "num_hidden_layers",
         "config.json: num_hidden_layers is 1000000000, but the checkpoint's tensors name blocks 0..2 only (the last: "
         "'model.layers.2.block_sparse_moe.e_score_correction_bias')"},
        {"minimax_m2/fp32", "num_local_experts",
         "config.json: num_local_experts is 1000000000, but the checkpoint's tensors name experts 0..7 only (the last: "
         "'model.layers.0.block_sparse_moe.experts.7.w1.weight')"},
        {"minimax_m2/bf16", "num_hidden_layers", /* sharded: the index's tensors count */
         "config.json: num_hidden_layers is 1000000000, but the checkpoint's tensors name blocks 0..2 only"},
        {"mimo_v2_flash/fp32", "num_hidden_layers",
         "config.json: num_hidden_layers is 1000000000, but the checkpoint's tensors name blocks 0..4 only (the last: "
         "'model.layers.4.input_layernorm.weight')"},
        {"mimo_v2_flash/fp32", "n_routed_experts",
         "config.json: n_routed_experts is 1000000000, but the checkpoint's tensors name experts 0..7 only (the last: "
         "'model.layers.1.mlp.experts.7.down_proj.weight')"},
        {"kimi_linear/fp32", "num_hidden_layers",
         "config.json: num_hidden_layers is 1000000000, but the checkpoint's tensors name blocks 0..4 only (the last: "
         "'model.layers.4.block_sparse_moe.experts.0.w1.weight')"},
        {"kimi_linear/fp32", "num_experts",
         "config.json: num_experts is 1000000000, but the checkpoint's tensors name experts 0..7 only (the last: "
         "'model.layers.1.block_sparse_moe.experts.7.w1.weight')"},
        {"deepseek_v4/fp32", "num_hidden_layers",
         "config.json: num_hidden_layers is 1000000000, but the checkpoint's tensors name blocks 0..4 only (the last: "
         "'model.layers.4.attn.attn_sink')"},
        {"deepseek_v4/fp32", "n_routed_experts",
         "config.json: n_routed_experts is 1000000000, but the checkpoint's tensors name experts 0..7 only (the last: "
         "'model.layers.0.ffn.experts.7.w1.weight')"},
        {"deepseek_v4/native", "n_routed_experts",
         "config.json: n_routed_experts is 1000000000, but the checkpoint's tensors name experts 0..7 only (the last: "
         "'layers.0.ffn.experts.7.w1.scale')"},
        /* an iteration count with no tensor to bound it has a fixed range (1e9 was a hang) */
        {"deepseek_v4/fp32", "hc_sinkhorn_iters", "config.json: hc_sinkhorn_iters must be 0..1000"},
        /* one past what the tensors hold is refused too (every fixture loads with its own count) */
        {"minimax_m2/fp32", "num_hidden_layers",
         "config.json: num_hidden_layers is 4, but the checkpoint's tensors name blocks 0..2 only"},
        /* a rotary share past 1 is refused before it is multiplied into an integer (1e300 would
         * overflow the conversion), and a rotary width before tables are sized by it */
        {"deepseek_v4/fp32", "partial_rotary_factor",
         "partial_rotary_factor' is 1e+300, outside its domain: expected a number in [0, 1]"},
        {"mimo_v2_flash/fp32", "partial_rotary_factor",
         "partial_rotary_factor' is 1e+300, outside its domain: expected a number in [0, 1]"},
        {"deepseek_v4/native", "qk_rope_head_dim",
         "config.json: 2147483646 rotary dimensions do not fit head_dim 32 and index_head_dim 16"},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        char name[64], d[768];
        snprintf(name, sizeof name, "count%zu", c);
        CU_ASSERT_FATAL(copy_checkpoint(cases[c].fixture, name, 0, d, sizeof d) == 0);
        const char *v = strstr(cases[c].msg, " is 4,")      ? "4"
                        : strstr(cases[c].msg, "1e+300")    ? "1e300"
                        : strstr(cases[c].msg, "2147483646") ? "2147483646"
                                                             : "1000000000";
        CU_ASSERT_FATAL(set_config_int(d, cases[c].key, v) == 0);
        expect_load(d, NNT_ERR_CONFIG, cases[c].msg);
    }
    /* a fused expert tensor [experts, ...] bounds the expert count by its leading extent */
    nnt_checkpoint *ck = NULL;
    nnt_error err = {0};
    char d[768], p[800];
    snprintf(d, sizeof d, "%s/fused_count", t_tmpdir());
    mkdir(d, 0755);
    snprintf(p, sizeof p, "%s/config.json", d);
    CU_ASSERT_FATAL(t_write_file(p, "{\"num_local_experts\": 5, \"num_hidden_layers\": 1}") == 0);
    float zeros[6 * 2 * 2] = {0};
    nnt_tensor fused = {.dtype = NNT_F32, .ndim = 3, .shape = {6, 2, 2}, .data = zeros};
    const nnt_tensor *ts[1] = {&fused};
    const char *keys[1] = {"model.layers.0.mlp.experts.gate_up_proj"};
    snprintf(p, sizeof p, "%s/model.safetensors", d);
    CU_ASSERT_EQUAL_FATAL(nnt_st_write(p, 1, keys, ts, NULL, &err), NNT_OK);
    CU_ASSERT_EQUAL_FATAL(nnt_checkpoint_open(d, &ck, &err), NNT_OK);
    int64_t v = 0;
    CU_ASSERT_EQUAL(nnt_cfg_int(ck, "num_local_experts", 0, 1, &v, &err), NNT_OK);
    CU_ASSERT_EQUAL(v, 5);
    CU_ASSERT_EQUAL(nnt_cfg_int(ck, "num_hidden_layers", 0, 1, &v, &err), NNT_OK);
    CU_ASSERT_EQUAL(nnt_ck_bound_count(ck, "num_local_experts", 7, &err), NNT_ERR_CONFIG);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "config.json: num_local_experts is 7, but the checkpoint's fused expert tensor "
                                           "'model.layers.0.mlp.experts.gate_up_proj' holds 6 experts"));
    CU_ASSERT_EQUAL(nnt_ck_bound_count(ck, "num_hidden_layers", 2, &err), NNT_ERR_CONFIG);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "num_hidden_layers is 2, but the checkpoint's tensors name blocks 0..0 only"));
    nnt_checkpoint_close(ck);
}

/* A list read by names (DeepSeek-V4's layer_types) takes a number only as a name's index: 4, where
 * there are 3 names, indexed the family's 3-entry rate table (fuzz_config, UBSan; the reproducer
 * is tests/fuzz/crashes/config/deepseek-layer-types-number-4.json). */
static void test_config_named_list_index(void)
{
    char d[768], p[800];
    CU_ASSERT_FATAL(copy_checkpoint("deepseek_v4/fp32", "layer_types_4", 0, d, sizeof d) == 0);
    snprintf(p, sizeof p, "%s/config.json", d);
    char *text = read_text(p);
    CU_ASSERT_PTR_NOT_NULL_FATAL(text);
    char *at = strstr(text, "\"layer_types\": [");
    CU_ASSERT_PTR_NOT_NULL_FATAL(at);
    at += strlen("\"layer_types\": [");
    const char *first = "\"sliding_attention\"";
    char *entry = strstr(at, first);
    CU_ASSERT_PTR_NOT_NULL_FATAL(entry);
    memmove(entry + 1, entry + strlen(first), strlen(entry + strlen(first)) + 1);
    entry[0] = '4';
    CU_ASSERT_FATAL(t_write_file(p, text) == 0);
    free(text);
    expect_load(d, NNT_ERR_CONFIG,
                "config.json: field 'layer_types'[0] is 4; a number there is the index of one of its 3 names, 0..2");
}

/* A shard truncated between the load and the forward: its lost pages raise SIGBUS, which the
 * opt-in guard turns into zero pages and an error naming the file; the model stays usable for
 * freeing. */
static void test_truncated_while_mapped(void)
{
    CU_ASSERT_EQUAL_FATAL(nnt_protect_mapped_files(), NNT_OK);
    char d[768], shard[800];
    CU_ASSERT_FATAL(copy_checkpoint("minimax_m2/fp32", "shrinks", 0, d, sizeof d) == 0);
    snprintf(shard, sizeof shard, "%s/model.safetensors", d);
    nnt_runtime *rt = t_runtime();
    nnt_model *m = NULL;
    T_OK(rt, nnt_model_load(rt, d, &m));
    nnt_trace *t = NULL;
    T_OK(rt, nnt_trace_new(m, &t));
    T_OK(rt, nnt_trace_save(t, "logits"));
    CU_ASSERT_FATAL(truncate(shard, 4096) == 0);
    static const int32_t ids[4] = {3, 1, 4, 1};
    T_FAILS(rt, nnt_trace_run(t, ids, NULL, 1, 4), NNT_ERR_IO, "/shrinks/model.safetensors: reading the mapped file failed at byte ");
    T_FAILS(rt, nnt_trace_run(t, ids, NULL, 1, 4), NNT_ERR_IO,
            "(SIGBUS): it was truncated, or could not be read, while in use; results that depend on it are not valid");
    nnt_trace_free(t);
    nnt_model_free(m);
    nnt_runtime_close(rt);
}

/* A shard modified between the load and the end of a run - its time touched, bytes appended,
 * or rewritten in place - fails the run (and a session's next step) naming the file. */
static void test_modified_while_mapped(void)
{
    char d[768], shard[832];
    CU_ASSERT_FATAL(copy_checkpoint("minimax_m2/bf16", "modified", 0, d, sizeof d) == 0); /* three shards */
    snprintf(shard, sizeof shard, "%s/model-00002-of-00003.safetensors", d);
    static const int32_t ids[4] = {3, 1, 4, 1};
    nnt_runtime *rt = t_runtime();
    for (int how = 0; how < 3; how++) {
        nnt_model *m = NULL;
        T_OK(rt, nnt_model_load(rt, d, &m));
        nnt_session *ss = NULL;
        T_OK(rt, nnt_session_new(m, 1, 16, &ss));
        T_OK(rt, nnt_session_forward(ss, NULL, ids, NULL, 4));
        struct stat sb;
        CU_ASSERT_FATAL(stat(shard, &sb) == 0);
        if (how == 0) { /* touch: a time one second later */
            struct timespec ts[2] = {sb.st_atim, sb.st_mtim};
            ts[1].tv_sec += 1;
            CU_ASSERT_FATAL(utimensat(AT_FDCWD, shard, ts, 0) == 0);
        } else if (how == 1) { /* bytes appended */
            FILE *f = fopen(shard, "ab");
            CU_ASSERT_FATAL(f != NULL);
            fputs("12345678", f);
            fclose(f);
        } else { /* the same bytes written over themselves, as a copy in place would */
            FILE *f = fopen(shard, "r+b");
            CU_ASSERT_FATAL(f != NULL);
            unsigned char head[64];
            CU_ASSERT_FATAL(fread(head, 1, sizeof head, f) == sizeof head);
            rewind(f);
            fwrite(head, 1, sizeof head, f);
            fclose(f);
            /* a file system whose time resolution hides the write makes this case undetectable */
            struct stat after;
            CU_ASSERT_FATAL(stat(shard, &after) == 0);
            if (after.st_mtim.tv_sec == sb.st_mtim.tv_sec && after.st_mtim.tv_nsec == sb.st_mtim.tv_nsec) {
                struct timespec ts[2] = {sb.st_atim, sb.st_mtim};
                ts[1].tv_nsec = (ts[1].tv_nsec + 1) % 1000000000;
                CU_ASSERT_FATAL(utimensat(AT_FDCWD, shard, ts, 0) == 0);
            }
        }
        const char *want = how == 1 ? "/modified/model-00002-of-00003.safetensors: changed on disk while in use (size "
                                    : "/modified/model-00002-of-00003.safetensors: changed on disk while in use (modified "
                                      "after it was opened)";
        T_FAILS(rt, nnt_session_forward(ss, NULL, ids, NULL, 1), NNT_ERR_IO, want);
        nnt_trace *t = NULL;
        T_OK(rt, nnt_trace_new(m, &t));
        T_FAILS(rt, nnt_trace_run(t, ids, NULL, 1, 4), NNT_ERR_IO, want);
        nnt_trace_free(t);
        nnt_session_free(ss);
        nnt_model_free(m);
        /* a fresh load takes the file as it now is */
        if (how == 1) {
            CU_ASSERT_FATAL(truncate(shard, sb.st_size) == 0);
        }
    }
    nnt_model *m = NULL;
    T_OK(rt, nnt_model_load(rt, d, &m));
    nnt_trace *t = NULL;
    T_OK(rt, nnt_trace_new(m, &t));
    T_OK(rt, nnt_trace_run(t, ids, NULL, 1, 4));
    nnt_trace_free(t);
    nnt_model_free(m);
    nnt_runtime_close(rt);
}

int register_tests(void)
{
    CU_pSuite s = CU_add_suite("checkpoint", NULL, NULL);
    if (!s) return -1;
    if (!CU_add_test(s, "fp8 e4m3 and e8m0 decoding", test_fp8_decode) ||
        !CU_add_test(s, "fp8 128x128 block scales with partial edge blocks", test_fp8_block_scales) ||
        !CU_add_test(s, "fp8 e4m3 encoding: nearest, ties to even, saturation", test_fp8_encode) ||
        !CU_add_test(s, "weights = fp8: codes and block scales as torch makes them", test_fp8_reencode) ||
        !CU_add_test(s, "weights = fp8 refuses a value that is not finite", test_fp8_reencode_not_finite) ||
        !CU_add_test(s, "fp4 e2m1 codes, nibble order and group scales", test_fp4_decode) ||
        !CU_add_test(s, "DeepSeek-V4 native .scale (E8M0) and packed FP4 weights", test_native_quantised_names) ||
        !CU_add_test(s, "missing config.json or weights; malformed config", test_missing_files) ||
        !CU_add_test(s, "a truncated weight file", test_truncated_weights) ||
        !CU_add_test(s, "a missing tensor", test_missing_tensor) ||
        !CU_add_test(s, "shapes, dtypes and fields that disagree with config.json", test_shape_disagrees) ||
        !CU_add_test(s, "an architecture no plugin serves", test_unserved_architecture) ||
        !CU_add_test(s, "a key given twice in config.json", test_config_duplicate_keys) ||
        !CU_add_test(s, "a rotary share outside [0, 1]", test_rotary_share) ||
        !CU_add_test(s, "broken and correct shard indexes", test_shard_index) ||
        !CU_add_test(s, "fp8 weights without their scales", test_fp8_missing_scale) ||
        !CU_add_test(s, "a header length that leaves tensors misaligned", test_misaligned_header) ||
        !CU_add_test(s, "block and expert counts bounded by the tensors", test_config_counts_bounded) ||
        !CU_add_test(s, "numbers outside their field's domain", test_config_domains) ||
        !CU_add_test(s, "a named list's numbers are name indices", test_config_named_list_index) ||
        !CU_add_test(s, "a shard truncated while mapped", test_truncated_while_mapped) ||
        !CU_add_test(s, "a shard modified while mapped", test_modified_while_mapped))
        return -1;
    return 0;
}
