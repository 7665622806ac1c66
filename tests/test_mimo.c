/* test_mimo.c - the MiMo-V2-Flash family against transformers (fp32 with group-limited
 * routing, a hub-spelled FP8 checkpoint with MTP tensors to ignore, and an FP8 checkpoint whose
 * full blocks hold their key/value scales per head as the release does; MiMo-V2.5's layout with
 * a fused, chunked qkv_proj and MXFP4 experts), the page's identities
 * (block sum, value scale, sink share, router), and its write semantics (edits renormalised
 * against the sink, windows, ablation). Tolerances as in test_util.h (T_TOL). */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/internal.h"
#include "nnt/nnt_family_kit.h"
#include "test_util.h"

static const char *const FP32 = "mimo_v2_flash/fp32";
static const char *const FP8 = "mimo_v2_flash/fp8";
static const char *const FP8_PER_HEAD = "mimo_v2_flash/fp8_per_head";

typedef struct fixture {
    nnt_runtime *rt;
    nnt_model *m;
    t_ref r;
} fixture;

static void open_fixture(fixture *f, const char *rel)
{
    f->rt = t_runtime();
    f->m = t_model(f->rt, rel);
    CU_ASSERT_FATAL(t_ref_open(&f->r, f->rt, rel) == 0);
}

static void close_fixture(fixture *f)
{
    nnt_model_free(f->m);
    nnt_runtime_close(f->rt);
}

/* The layer kinds, read back through the shapes nnt reports: a sliding block's keys have more
 * heads than a full block's. */
static int is_sliding(const nnt_model *m, int layer)
{
    nnt_value_info vi;
    char p[96];
    snprintf(p, sizeof p, "layers.%d.self_attn.attention_keys", layer);
    nnt_call_dims d = {1, 1, 0};
    if (nnt_model_value_info(m, p, &d, &vi) != NNT_OK) return -1;
    return vi.shape[1] != nnt_model_get_info(m)->num_kv_heads;
}

static void check_all_values(const char *rel, int expect_values)
{
    fixture f;
    open_fixture(&f, rel);
    nnt_trace *t = t_run_reference(f.rt, f.m, &f.r);
    CU_ASSERT_EQUAL(t_check_reference(&f.r, t), expect_values);
    t_check_block_sum(t, nnt_model_get_info(f.m)->num_layers, NULL);
    nnt_trace_free(t);
    close_fixture(&f);
}

/* 5 model values; 14 per block (6 block, 8 attention); the dense block's 3 MLP values; 6 per
 * sparse block. */
static void test_fp32_values(void) { check_all_values(FP32, 5 + 5 * 14 + 3 + 4 * 6); }
static void test_fp8_hub_values(void) { check_all_values(FP8, 5 + 4 * 14 + 3 + 3 * 6); }
/* The same block layout as the fp8 fixture; transformers ran on k_proj / v_proj dequantised per
 * key/value head on the full blocks (tests/fixtures/make_fixtures.py, fp8_per_head). */
static void test_fp8_per_head_values(void) { check_all_values(FP8_PER_HEAD, 5 + 4 * 14 + 3 + 3 * 6); }

/* ---- MiMo-V2.5 / V2.6-Flash (MiMoV2ForCausalLM) in the release's layout ----
 * tests/fixtures/mimo_v2/make_fixture.py: fused qkv_proj in num_key_value_heads = 2 chunks
 * [q_r; k_r; v_r], FP8 with 16x16 tiles counted per chunk; MXFP4 experts (U8 codes, U8 E8M0
 * scales); a bf16 router. transformers' MiMo-V2-Flash ran on the unfused, dequantised weights
 * (docs/mimo-v2.5-layout.md). Same block layout as the fp8 fixture. */
static const char *const V25 = "mimo_v2/fp4";

static void test_v25_values(void)
{
    check_all_values(V25, 5 + 4 * 14 + 3 + 3 * 6);
    nnt_runtime *rt = t_runtime();
    nnt_model *m = t_model(rt, V25);
    const nnt_model_info *info = nnt_model_get_info(m);
    CU_ASSERT_STRING_EQUAL(info->architecture, "MiMoV2ForCausalLM");
    CU_ASSERT_STRING_EQUAL(info->model_type, "mimo_v2");
    nnt_model_free(m);
    nnt_runtime_close(rt);
}

/* A copy of the fixture whose config.json has its first `from` replaced by `to`. */
static const char *v25_copy(const char *name, const char *from, const char *to, char *dir, size_t n)
{
    char fx[512], src[768], dst[800], text[8192], out[9000];
    t_checkpoint_dir(name, V25, dir, n);
    snprintf(src, sizeof src, "%s/config.json", t_fixture(V25, fx, sizeof fx));
    FILE *f = fopen(src, "rb");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    size_t len = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[len] = 0;
    char *at = strstr(text, from);
    CU_ASSERT_PTR_NOT_NULL_FATAL(at);
    snprintf(out, sizeof out, "%.*s%s%s", (int)(at - text), text, to, at + strlen(from));
    snprintf(dst, sizeof dst, "%s/config.json", dir);
    CU_ASSERT_EQUAL_FATAL(t_write_file(dst, out), 0);
    snprintf(src, sizeof src, "%s/model.safetensors", fx);
    snprintf(dst, sizeof dst, "%s/model.safetensors", dir);
    CU_ASSERT_EQUAL_FATAL(t_copy_file(src, dst), 0);
    return dir;
}

/* Read as one plain [Q; K; V] block (conversion_metadata.qkv_layout "global_q_k_v", the NVFP4
 * re-export's order), the full blocks' per-chunk scales do not fit: 2 chunks of 88 rows have
 * 2 x ceil(88 / 16) = 12 tile rows where one grid over 176 rows has ceil(176 / 16) = 11, over
 * 64 / 16 = 4 tile columns. */
static void test_v25_plain_order_refused(void)
{
    char dir[768];
    v25_copy("mimo_v25_plain", "{", "{\"conversion_metadata\": {\"qkv_layout\": \"global_q_k_v\"},", dir, sizeof dir);
    nnt_runtime *rt = t_runtime();
    nnt_model *m = NULL;
    T_FAILS(rt, nnt_model_load(rt, dir, &m), NNT_ERR_SHAPE, "needs 11 x 4 blocks");
    CU_ASSERT_PTR_NOT_NULL(strstr(nnt_last_error(rt), "'model.layers.0.self_attn.qkv_proj.weight_scale_inv'"));
    CU_ASSERT_PTR_NULL(m);
    nnt_runtime_close(rt);
}

static void test_v25_unknown_layout_refused(void)
{
    char dir[768];
    v25_copy("mimo_v25_layout", "\"fused_qkv\"", "\"qkv_interleaved\"", dir, sizeof dir);
    nnt_runtime *rt = t_runtime();
    nnt_model *m = NULL;
    T_FAILS(rt, nnt_model_load(rt, dir, &m), NNT_ERR_UNSUPPORTED,
            "attention_projection_layout is 'qkv_interleaved'; expected 'fused_qkv' or 'split'");
    nnt_runtime_close(rt);
}

/* A block whose attention kind has sinks (here the full blocks, by add_full_attention_sink_bias)
 * while the checkpoint holds neither spelling of them: the load is refused, the block, its kind
 * and both spellings named. */
static void test_v25_sinks_missing(void)
{
    char dir[768];
    v25_copy("mimo_v25_full_sinks", "\"add_full_attention_sink_bias\": false", "\"add_full_attention_sink_bias\": true",
             dir, sizeof dir);
    nnt_runtime *rt = t_runtime();
    nnt_model *m = NULL;
    T_FAILS(rt, nnt_model_load(rt, dir, &m), NNT_ERR_NOT_FOUND,
            "block 0 (full_attention) needs its sinks: neither 'model.layers.0.self_attn.sinks' nor "
            "'model.layers.0.self_attn.attention_sink_bias' is in the checkpoint");
    CU_ASSERT_PTR_NULL(m);
    nnt_runtime_close(rt);
}

/* The printout's notes (nnt_family_descriptor.note): on MiMoV2ForCausalLM, which of nnt's values
 * MAX's selected-layer hidden states are (MAX doc, MiMoV2Config.target_layer_ids: "the layers whose
 * outputs (post-residual, before the final norm) are returned") and what moe_router_dtype does;
 * MiMo-V2-Flash, which MAX does not serve and whose config has no moe_router_dtype, has none. */
static const char *const MAX_NOTE =
    "MAX's selected-layer hidden states (return_hidden_states for target_layer_ids = [i, ...]) are "
    "layers.{i}.layer_output: block i's residual stream after its MLP output is added, before the final norm "
    "(final_norm_output is the normed one); nnt counts blocks from 0";
static const char *const ROUTER_NOTE =
    "config.json moe_router_dtype is 'bfloat16': the router weight is read as stored and router_logits are computed "
    "in float32 whatever it says (as transformers, SGLang and MAX do; vLLM computes them in bfloat16)";

/* The printout of `rel` as text in buf (truncated to n). */
static void print_text(nnt_runtime *rt, nnt_model *m, const char *name, char *buf, size_t n)
{
    char path[768];
    snprintf(path, sizeof path, "%s/%s", t_tmpdir(), name);
    FILE *out = fopen(path, "w+");
    CU_ASSERT_FATAL(out != NULL);
    T_OK(rt, nnt_model_print(m, out));
    rewind(out);
    size_t len = fread(buf, 1, n - 1, out);
    buf[len] = 0;
    fclose(out);
}

static void test_v25_notes(void)
{
    static char text[1 << 17], line[2048];
    nnt_runtime *rt = t_runtime();
    nnt_model *m = t_model(rt, V25);
    const char *note = NULL;
    CU_ASSERT_EQUAL(nnt_model_note(m, 0, &note), 1);
    CU_ASSERT_PTR_NOT_NULL_FATAL(note);
    CU_ASSERT_STRING_EQUAL(note, MAX_NOTE);
    CU_ASSERT_EQUAL(nnt_model_note(m, 1, &note), 1);
    CU_ASSERT_STRING_EQUAL(note, ROUTER_NOTE);
    CU_ASSERT_EQUAL(nnt_model_note(m, 2, &note), 0);
    CU_ASSERT_PTR_NULL(note);
    CU_ASSERT_EQUAL(nnt_model_note(m, -1, &note), 0);
    print_text(rt, m, "mimo_v25_print.txt", text, sizeof text);
    /* after the tree's closing parenthesis: the heading, then one "  - " line a note */
    snprintf(line, sizeof line, "\n)\nnotes:\n  - %s\n  - %s\n", MAX_NOTE, ROUTER_NOTE);
    CU_ASSERT_PTR_NOT_NULL(strstr(text, line));
    nnt_model_free(m);
    /* MiMo-V2-Flash: no note, no heading */
    m = t_model(rt, FP32);
    CU_ASSERT_EQUAL(nnt_model_note(m, 0, &note), 0);
    print_text(rt, m, "mimo_flash_print.txt", text, sizeof text);
    CU_ASSERT_PTR_NULL(strstr(text, "notes:"));
    CU_ASSERT_PTR_NULL(strstr(text, "target_layer_ids"));
    nnt_model_free(m);
    nnt_runtime_close(rt);
}

/* What the note claims, against transformers' own hidden states (output_hidden_states=True, not the
 * recorder hooks reference.safetensors comes from; tests/fixtures/mimo_v2/make_fixture.py writes
 * hidden_states.safetensors): hidden_states[i + 1] is block i's output for i < n - 1, and equals
 * layers.{i}.layer_output; transformers' last entry has the final norm applied, so it equals
 * final_norm_output, and the last block's layer_output equals that entry of a run without the norm
 * (and is far from the normed one). Real tokens, within T_TOL. */
static void test_v25_hidden_states(void)
{
    nnt_runtime *rt = t_runtime();
    nnt_model *m = t_model(rt, V25);
    t_ref r;
    CU_ASSERT_FATAL(t_ref_open(&r, rt, "mimo_v2/fp4/hidden_states.safetensors") == 0);
    int n = nnt_model_get_info(m)->num_layers;
    nnt_trace *t;
    T_OK(rt, nnt_trace_new(m, &t));
    T_OK(rt, nnt_trace_save(t, "layers.*.layer_output"));
    T_OK(rt, nnt_trace_save(t, "final_norm_output"));
    T_OK(rt, nnt_trace_run(t, r.ids, r.mask, r.batch, r.seq));
    char key[96], ref_key[96];
    for (int i = 0; i <= n; i++) {
        /* i < n: block i's layer_output against entry i + 1 (the last against the norm-free run);
         * i == n: final_norm_output against transformers' normed last entry */
        if (i < n) snprintf(key, sizeof key, "layers.%d.layer_output", i);
        else snprintf(key, sizeof key, "final_norm_output");
        if (i < n - 1 || i == n) snprintf(ref_key, sizeof ref_key, "hidden_states.%d", i < n ? i + 1 : n);
        else snprintf(ref_key, sizeof ref_key, "last_block_without_norm");
        nnt_tensor ref;
        CU_ASSERT_FATAL(t_ref_get(&r, ref_key, &ref) == 0);
        const nnt_tensor *got = nnt_trace_get(t, key);
        CU_ASSERT_PTR_NOT_NULL_FATAL(got);
        unsigned char *sel = t_sel_tokens(&r, got);
        double e = t_rel_err(got, &ref, sel);
        if (e < 0 || e > T_TOL) fprintf(stderr, "\n  %s against transformers' %s: relative error %.3g\n", key, ref_key, e);
        CU_ASSERT(e >= 0 && e <= T_TOL);
        if (i == n - 1) {
            /* the normed last entry is not the last block's output */
            nnt_tensor normed;
            snprintf(ref_key, sizeof ref_key, "hidden_states.%d", n);
            CU_ASSERT_FATAL(t_ref_get(&r, ref_key, &normed) == 0);
            CU_ASSERT(t_rel_err(got, &normed, sel) > 1e-2);
            nnt_tensor_free(&normed);
        }
        free(sel);
        nnt_tensor_free(&ref);
    }
    nnt_trace_free(t);
    nnt_model_free(m);
    nnt_runtime_close(rt);
}

/* The weights of one block of the fixture, from its safetensors headers or (from_config) from
 * config.json through the family's cost model. */
static void v25_block_bytes(nnt_runtime *rt, int from_config, uint64_t *w)
{
    char dir[512];
    nnt_plan_opts o = {.ranks = 1, .device = NNT_PLAN_CPU, .context = 16, .batch = 1, .from_config = from_config,
                       .runtime = rt};
    nnt_plan *p = NULL;
    nnt_error err = {0};
    nnt_status st = nnt_plan_new(t_fixture(V25, dir, sizeof dir), &o, &p, &err);
    if (st != NNT_OK) fprintf(stderr, "\n  %s\n", err.msg);
    CU_ASSERT_EQUAL_FATAL(st, NNT_OK);
    for (int b = 0; b < 4; b++) CU_ASSERT(nnt_plan_block(p, b, &w[b], NULL));
    nnt_plan_free(p);
}

/* config.json's count of the release layout against the headers' bytes. Block 0 (full attention,
 * dense MLP) stores every tensor as config.json says, so the two agree: its fused qkv_proj [176,
 * 64] is 2 chunks of 88 rows, each in ceil(88 / 16) x 4 float32 tiles (11264 + 2 x 24 x 4 bytes =
 * 11456, not the 11440 of separate [96], [48] and [32]-row grids). On the mixture blocks
 * config.json names neither the MXFP4 experts (quantization_config.store_dtype, no expert_dtype)
 * nor the bf16 router, so it counts 8 experts x 3 FP8 matrices [32, 64] with 2 x 4 tiles (3 x
 * (2048 + 32) bytes) where the file holds 3 x (1024 + 64), and the router [8, 64] in float32
 * (2048) where the file holds bf16 (1024): 8 x (6240 - 3264) + 1024 = 24832 bytes more, block 3's
 * qkv_proj counted per chunk as block 0's. */
static void test_v25_costs_against_headers(void)
{
    nnt_runtime *rt = t_runtime();
    uint64_t h[4], c[4];
    v25_block_bytes(rt, 0, h);
    v25_block_bytes(rt, 1, c);
    CU_ASSERT_EQUAL(c[0], h[0]);
    for (int b = 1; b < 4; b++) {
        if (c[b] != h[b] + 24832) fprintf(stderr, "\n  block %d: headers %llu, config.json %llu\n", b,
                                          (unsigned long long)h[b], (unsigned long long)c[b]);
        CU_ASSERT_EQUAL(c[b], h[b] + 24832);
    }
    nnt_runtime_close(rt);
}

/* moe_router_dtype: another string is refused naming config.json, the key and the accepted
 * values; "float32" loads and is reported; JSON null reads as absent (no router note). */
static void test_v25_router_dtype(void)
{
    char dir[768];
    nnt_runtime *rt = t_runtime();
    nnt_model *m = NULL;
    v25_copy("mimo_v25_router_bad", "\"moe_router_dtype\": \"bfloat16\"", "\"moe_router_dtype\": \"int8\"", dir,
             sizeof dir);
    T_FAILS(rt, nnt_model_load(rt, dir, &m), NNT_ERR_CONFIG,
            "/config.json: moe_router_dtype is 'int8'; expected 'float32', 'bfloat16' or 'float16' (or the key absent)");
    CU_ASSERT_PTR_NULL(m);
    v25_copy("mimo_v25_router_num", "\"moe_router_dtype\": \"bfloat16\"", "\"moe_router_dtype\": 32", dir, sizeof dir);
    T_FAILS(rt, nnt_model_load(rt, dir, &m), NNT_ERR_CONFIG, "moe_router_dtype");
    CU_ASSERT_PTR_NULL(m);
    const char *note = NULL;
    v25_copy("mimo_v25_router_f32", "\"moe_router_dtype\": \"bfloat16\"", "\"moe_router_dtype\": \"float32\"", dir,
             sizeof dir);
    T_OK(rt, nnt_model_load(rt, dir, &m));
    CU_ASSERT_EQUAL(nnt_model_note(m, 1, &note), 1);
    CU_ASSERT_PTR_NOT_NULL(note && strstr(note, "moe_router_dtype is 'float32'"));
    nnt_model_free(m);
    m = NULL;
    v25_copy("mimo_v25_router_null", "\"moe_router_dtype\": \"bfloat16\"", "\"moe_router_dtype\": null", dir, sizeof dir);
    T_OK(rt, nnt_model_load(rt, dir, &m));
    CU_ASSERT_EQUAL(nnt_model_note(m, 0, &note), 1);
    CU_ASSERT_STRING_EQUAL(note, MAX_NOTE);
    CU_ASSERT_EQUAL(nnt_model_note(m, 1, &note), 0);
    nnt_model_free(m);
    nnt_runtime_close(rt);
}

/* ---- per-head key/value scales (fp8_per_head) ----
 * The released MiMo-V2-Flash FP8 checkpoint quantised each full block's k_proj and v_proj per
 * key/value head over the head's fused rows [head_dim key rows; v_head_dim value rows], padded
 * to whole blocks: k_proj's scales hold each head's first ceil(head_dim / B) blocks, v_proj's the
 * rest (sglang-jax pull request 969, dequant_fused_kv). The fixture: B = 16, 24 key and 16 value
 * rows a head, so a head's second block holds key rows 16-23 and value rows 0-7; 2 heads on the
 * full blocks 0 and 3 (k scales [4, 5] where a plain grid has 3 rows, v scales [2, 5]), 4 heads
 * quantised plainly on the sliding blocks 1 and 2. */
enum { PH_B = 16, PH_DK = 24, PH_DV = 16, PH_IN = 72, PH_KB = 2, PH_VB = 1 };

/* FP8 e4m3fn (1 sign, 4 exponent bits with bias 7, 3 mantissa bits; no infinities, S.1111.111
 * is NaN), decoded here rather than with the library's table. */
static float e4m3(uint8_t b)
{
    int e = (b >> 3) & 15, m = b & 7;
    float v = (e == 15 && m == 7) ? NAN : e ? ldexpf(1.0f + m / 8.0f, e - 7) : ldexpf(m / 8.0f, -6);
    return (b & 0x80) ? -v : v;
}

/* Weight row r of block L's k_proj (is_v 0) or v_proj (is_v 1) as the test reads the files: the
 * FP8 codes times the scale of the row's block, with the per-head rule on full blocks
 * (per_head 1) or a plain grid of B-row blocks (per_head 0). */
static void ph_row(const nnt_tensor *codes, const nnt_tensor *ks, const nnt_tensor *vs, int is_v, int per_head,
                   int64_t r, float *out)
{
    int64_t width = is_v ? PH_DV : PH_DK, h = r / width, fused = (is_v ? PH_DK : 0) + r % width, b = fused / PH_B;
    const nnt_tensor *grid = is_v ? vs : ks;
    int64_t srow = r / PH_B;
    if (per_head) {
        grid = b < PH_KB ? ks : vs;
        srow = b < PH_KB ? h * PH_KB + b : h * PH_VB + (b - PH_KB);
    }
    int64_t sc = grid->shape[1];
    for (int64_t c = 0; c < PH_IN; c++)
        out[c] = e4m3(((const uint8_t *)codes->data)[r * PH_IN + c]) * ((const float *)grid->data)[srow * sc + c / PH_B];
}

typedef struct ph_block {
    nnt_tensor k, ks, v, vs; /* stored codes and scales, read with nnt_safetensors_read */
} ph_block;

static void ph_read(nnt_runtime *rt, int layer, ph_block *pb)
{
    char dir[512], file[600], k[128];
    snprintf(file, sizeof file, "%s/model.safetensors", t_fixture(FP8_PER_HEAD, dir, sizeof dir));
    nnt_tensor *dst[4] = {&pb->k, &pb->ks, &pb->v, &pb->vs};
    const char *names[4] = {"k_proj.weight", "k_proj.weight_scale_inv", "v_proj.weight", "v_proj.weight_scale_inv"};
    for (int i = 0; i < 4; i++) {
        snprintf(k, sizeof k, "model.layers.%d.self_attn.%s", layer, names[i]);
        T_OK(rt, nnt_safetensors_read(rt, file, k, dst[i]));
    }
    CU_ASSERT_FATAL(pb->k.dtype == NNT_F8_E4M3 && pb->v.dtype == NNT_F8_E4M3 && pb->ks.dtype == NNT_F32 &&
                    pb->vs.dtype == NNT_F32);
}

static void ph_free(ph_block *pb)
{
    nnt_tensor_free(&pb->k);
    nnt_tensor_free(&pb->ks);
    nnt_tensor_free(&pb->v);
    nnt_tensor_free(&pb->vs);
}

/* A backend for the family kit's weight binding here: a prepared weight is the host view given. */
static nnt_status host_prepare(void *ctx, const nnt_tensor *host, nnt_tensor *out, nnt_error *err)
{
    (void)ctx, (void)err;
    *out = *host;
    return NNT_OK;
}

static void host_release(void *ctx, nnt_tensor *w) { (void)ctx, (void)w; }

static const nnt_backend_ops HOST_OPS = {.prepare_weight = host_prepare, .release_weight = host_release};

/* The family kit (fam_weight_kv_heads, on the core's routine table) recognises the layout from
 * the key scales' shape on the full blocks only, and what it hands the kernels decodes to
 * exactly the per-head reading of every k_proj and v_proj row; the plain reading of the same
 * files differs (so the comparison can tell them apart). */
static void test_fp8_per_head_loader(void)
{
    nnt_runtime *rt = t_runtime();
    char dir[512];
    nnt_checkpoint *ck = NULL;
    nnt_error err = {0};
    CU_ASSERT_EQUAL_FATAL(nnt_checkpoint_open(t_fixture(FP8_PER_HEAD, dir, sizeof dir), &ck, &err), NNT_OK);
    nnt_core_api api;
    nnt_core_api_init(&api);
    fam_env env = {.core = &api, .be = &HOST_OPS, .precision = NNT_PRECISION_F32};
    float want[PH_IN], got[PH_IN];
    for (int layer = 0; layer < 4; layer++) {
        int full = layer == 0 || layer == 3, heads = full ? 2 : 4;
        ph_block pb;
        ph_read(rt, layer, &pb);
        CU_ASSERT_EQUAL(pb.ks.shape[0], full ? heads * PH_KB : (heads * PH_DK + PH_B - 1) / PH_B);
        char kn[128], vn[128];
        snprintf(kn, sizeof kn, "model.layers.%d.self_attn.k_proj.weight", layer);
        snprintf(vn, sizeof vn, "model.layers.%d.self_attn.v_proj.weight", layer);
        nnt_tensor k, v;
        nnt_status st = fam_weight_kv_heads(&env, ck, kn, vn, heads, PH_DK, PH_DV, PH_IN, &k, &v, &err);
        if (st != NNT_OK) fprintf(stderr, "\n  block %d: %s\n", layer, err.msg);
        CU_ASSERT_EQUAL_FATAL(st, NNT_OK);
        /* a re-laid grid has row blocks of gcd(16, 24, 16) = 8 rows; a plain one keeps 16 */
        CU_ASSERT_EQUAL(k.block_rows, full ? 8 : PH_B);
        CU_ASSERT_EQUAL(v.block_rows, full ? 8 : PH_B);
        int mismatches = 0, plain_differs = 0;
        for (int is_v = 0; is_v < 2; is_v++) {
            const nnt_tensor *w = is_v ? &v : &k;
            for (int64_t r = 0; r < heads * (is_v ? PH_DV : PH_DK); r++) {
                CU_ASSERT_EQUAL_FATAL(nnt_weight_decode(w, r, 1, got, &err), NNT_OK);
                ph_row(is_v ? &pb.v : &pb.k, &pb.ks, &pb.vs, is_v, full, r, want);
                mismatches += memcmp(got, want, sizeof want) != 0;
                if (full && is_v) { /* v_proj's grid has the plain shape; its meaning differs */
                    ph_row(&pb.v, &pb.ks, &pb.vs, 1, 0, r, want);
                    plain_differs += memcmp(got, want, sizeof want) != 0;
                }
            }
        }
        if (mismatches) fprintf(stderr, "\n  block %d: %d k/v rows differ from the per-head reading\n", layer, mismatches);
        CU_ASSERT_EQUAL(mismatches, 0);
        /* value rows 0-7 of each head take a key scale row: at least those rows differ */
        if (full) CU_ASSERT(plain_differs >= heads * (PH_B - PH_DK % PH_B));
        ph_free(&pb);
    }
    /* the re-laid grids are the kit's: 2 per full block, kept by env until it is released */
    CU_ASSERT(env.prepared != NULL && env.prepared->n_buf == 4 && env.prepared->n == 8);
    fam_env_release(&env);
    /* the core's slot of ABI 3.x says the routine moved and the plugin must be rebuilt */
    nnt_tensor k, v;
    CU_ASSERT_EQUAL(api.tensor_kv_heads(ck, "model.layers.0.self_attn.k_proj.weight",
                                        "model.layers.0.self_attn.v_proj.weight", 2, PH_DK, PH_DV, PH_IN, &k, &v, &err),
                    NNT_ERR_UNSUPPORTED);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "moved into the family kit in ABI 3.4"));
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "must be rebuilt"));
    nnt_checkpoint_close(ck);
    nnt_runtime_close(rt);
}

/* attention_values of the full block 0 == v_proj(attention_norm_output) in heads x
 * attention_value_scale, with v_proj dequantised per head by this test from the file's bytes:
 * nnt and the reference agree with it, within T_TOL. */
static void test_fp8_per_head_values_by_hand(void)
{
    fixture f;
    open_fixture(&f, FP8_PER_HEAD);
    nnt_trace *t;
    T_OK(f.rt, nnt_trace_new(f.m, &t));
    T_OK(f.rt, nnt_trace_save(t, "layers.0.attention_norm_output"));
    T_OK(f.rt, nnt_trace_save(t, "layers.0.self_attn.attention_values"));
    T_OK(f.rt, nnt_trace_run(t, f.r.ids, f.r.mask, f.r.batch, f.r.seq));
    const nnt_tensor *x = nnt_trace_get(t, "layers.0.attention_norm_output");
    const nnt_tensor *got = nnt_trace_get(t, "layers.0.self_attn.attention_values");
    nnt_tensor ref;
    CU_ASSERT_FATAL(t_ref_get(&f.r, "layers.0.self_attn.attention_values", &ref) == 0);
    CU_ASSERT_FATAL(got->ndim == 4 && got->shape[1] == 2 && got->shape[3] == PH_DV);
    ph_block pb;
    ph_read(f.rt, 0, &pb);
    int64_t B = f.r.batch, T = f.r.seq, Hkv = 2;
    double scale = 0, worst_nnt = 0, worst_ref = 0;
    float w[PH_IN];
    for (int64_t o = 0; o < Hkv * PH_DV; o++) {
        ph_row(&pb.v, &pb.ks, &pb.vs, 1, 1, o, w);
        for (int64_t b = 0; b < B; b++)
            for (int64_t s = 0; s < T; s++) {
                if (!f.r.mask[b * T + s]) continue;
                double acc = 0;
                for (int64_t i = 0; i < PH_IN; i++) acc += (double)w[i] * ((const float *)x->data)[(b * T + s) * PH_IN + i];
                acc *= 0.707;
                int64_t at = ((b * Hkv + o / PH_DV) * T + s) * PH_DV + o % PH_DV;
                scale = fmax(scale, fabs(acc));
                worst_nnt = fmax(worst_nnt, fabs(acc - nnt_tensor_get_f64(got, at)));
                worst_ref = fmax(worst_ref, fabs(acc - nnt_tensor_get_f64(&ref, at)));
            }
    }
    if (worst_nnt > T_TOL * scale || worst_ref > T_TOL * scale)
        fprintf(stderr, "\n  block 0 values by hand: nnt off by %.3g, reference by %.3g (of %.3g)\n", worst_nnt, worst_ref,
                scale);
    CU_ASSERT(worst_nnt <= T_TOL * scale);
    CU_ASSERT(worst_ref <= T_TOL * scale);
    ph_free(&pb);
    nnt_tensor_free(&ref);
    nnt_trace_free(t);
    close_fixture(&f);
}

/* A copy whose full blocks' k scales are cut to the plain grid's 3 rows loads through the plain
 * path and lands far from the reference on block 0's keys and values, while its queries (q_proj
 * is quantised plainly either way) still match: the reference holds the per-head reading. */
static int cut_k_scales(void *user, char *name, size_t n, const nnt_tensor *in, nnt_tensor *out, int *owned)
{
    int layer;
    char tail[64];
    *out = *in;
    if (sscanf(name, "model.layers.%d.self_attn.%63s", &layer, tail) == 2 && strcmp(tail, "k_proj.weight_scale_inv") == 0 &&
        in->shape[0] == 2 * PH_KB)
        out->shape[0] = (2 * PH_DK + PH_B - 1) / PH_B; /* the first rows of the stored grid */
    return 1;
}

static void test_fp8_per_head_plain_copy_differs(void)
{
    char dir[768], fx[512], src[768], dst[800];
    t_checkpoint_dir("mimo_plain_kv", FP8_PER_HEAD, dir, sizeof dir);
    snprintf(src, sizeof src, "%s/model.safetensors", t_fixture(FP8_PER_HEAD, fx, sizeof fx));
    snprintf(dst, sizeof dst, "%s/model.safetensors", dir);
    CU_ASSERT_EQUAL_FATAL(t_rewrite_weights(src, dst, cut_k_scales, NULL, 0, NULL, NULL), 0);
    nnt_runtime *rt = t_runtime();
    nnt_model *m = NULL;
    T_OK(rt, nnt_model_load(rt, dir, &m));
    t_ref r;
    CU_ASSERT_FATAL(t_ref_open(&r, rt, FP8_PER_HEAD) == 0);
    const char *keys[] = {"layers.0.self_attn.attention_queries", "layers.0.self_attn.attention_keys",
                          "layers.0.self_attn.attention_values", "logits"};
    nnt_trace *t;
    T_OK(rt, nnt_trace_new(m, &t));
    for (int i = 0; i < 4; i++) T_OK(rt, nnt_trace_save(t, keys[i]));
    T_OK(rt, nnt_trace_run(t, r.ids, r.mask, r.batch, r.seq));
    for (int i = 0; i < 4; i++) {
        nnt_tensor ref;
        CU_ASSERT_FATAL(t_ref_get(&r, keys[i], &ref) == 0);
        const nnt_tensor *got = nnt_trace_get(t, keys[i]);
        unsigned char *sel = i < 3 ? t_sel_heads(&r, got) : t_sel_tokens(&r, got);
        double e = t_rel_err(got, &ref, sel);
        int ok = i == 0 ? e >= 0 && e <= T_TOL : e > 1e-3;
        if (!ok) fprintf(stderr, "\n  plain-grid k/v copy: %s relative error %.3g\n", keys[i], e);
        CU_ASSERT(ok);
        free(sel);
        nnt_tensor_free(&ref);
    }
    nnt_trace_free(t);
    nnt_model_free(m);
    nnt_runtime_close(rt);
}

/* Drops block 0's v_proj scales. */
static int drop_v_scales(void *user, char *name, size_t n, const nnt_tensor *in, nnt_tensor *out, int *owned)
{
    (void)user, (void)n, (void)owned;
    *out = *in;
    return strcmp(name, "model.layers.0.self_attn.v_proj.weight_scale_inv") != 0;
}

/* k_proj's scales per key/value head but v_proj without its scales: the load is refused, naming
 * both tensors and what v_proj needs (2 heads x 16 rows; 1 scale row a head over 5 column blocks). */
static void test_fp8_per_head_v_scales_missing(void)
{
    char dir[768], fx[512], src[768], dst[800];
    t_checkpoint_dir("mimo_no_v_scales", FP8_PER_HEAD, dir, sizeof dir);
    snprintf(src, sizeof src, "%s/model.safetensors", t_fixture(FP8_PER_HEAD, fx, sizeof fx));
    snprintf(dst, sizeof dst, "%s/model.safetensors", dir);
    CU_ASSERT_EQUAL_FATAL(t_rewrite_weights(src, dst, drop_v_scales, NULL, 0, NULL, NULL), 0);
    nnt_runtime *rt = t_runtime();
    nnt_model *m = NULL;
    CU_ASSERT_EQUAL(nnt_model_load(rt, dir, &m), NNT_ERR_NOT_FOUND);
    const char *msg = nnt_last_error(rt);
    const char *want = "'model.layers.0.self_attn.k_proj.weight' holds its scales per key/value head, so "
                       "'model.layers.0.self_attn.v_proj.weight' must be F8_E4M3 [32, 72] with [2, 5] scales: ";
    if (!strstr(msg, want) || !strstr(msg, "has no companion")) fprintf(stderr, "\n  %s\n", msg);
    CU_ASSERT_PTR_NOT_NULL(strstr(msg, want));
    CU_ASSERT_PTR_NOT_NULL(strstr(msg, "has no companion"));
    nnt_model_free(m);
    nnt_runtime_close(rt);
}

/* Blocks 0 and 3 are full, 1, 2 and 4 sliding (fp32); the hub's pattern [0,1,1,0] (fp8). Full
 * blocks report the config's key/value heads, sliding blocks twice as many. */
static void test_block_kinds(void)
{
    fixture f;
    open_fixture(&f, FP32);
    const int want[5] = {0, 1, 1, 0, 1};
    for (int l = 0; l < 5; l++) CU_ASSERT_EQUAL(is_sliding(f.m, l), want[l]);
    nnt_value_info vi;
    nnt_call_dims d = {2, 24, 0};
    T_OK(f.rt, nnt_model_value_info(f.m, "layers.1.self_attn.attention_keys", &d, &vi));
    CU_ASSERT(vi.ndim == 4 && vi.shape[1] == 2 * nnt_model_get_info(f.m)->num_kv_heads && vi.shape[3] == 24);
    T_OK(f.rt, nnt_model_value_info(f.m, "layers.1.self_attn.attention_values", &d, &vi));
    CU_ASSERT(vi.shape[3] == 16); /* values are v_head_dim wide */
    close_fixture(&f);
    open_fixture(&f, FP8);
    const int want8[4] = {0, 1, 1, 0};
    for (int l = 0; l < 4; l++) CU_ASSERT_EQUAL(is_sliding(f.m, l), want8[l]);
    close_fixture(&f);
    open_fixture(&f, FP8_PER_HEAD);
    for (int l = 0; l < 4; l++) CU_ASSERT_EQUAL(is_sliding(f.m, l), want8[l]);
    close_fixture(&f);
}

/* attention_values == v_proj(attention_norm_output) in heads x attention_value_scale, with
 * v_proj's weight read from the checkpoint. */
static void test_value_scale(void)
{
    fixture f;
    open_fixture(&f, FP32);
    nnt_trace *t;
    T_OK(f.rt, nnt_trace_new(f.m, &t));
    T_OK(f.rt, nnt_trace_save(t, "layers.*.attention_norm_output"));
    T_OK(f.rt, nnt_trace_save(t, "layers.*.self_attn.attention_values"));
    T_OK(f.rt, nnt_trace_run(t, f.r.ids, f.r.mask, f.r.batch, f.r.seq));
    char dir[512], file[600];
    snprintf(file, sizeof file, "%s/model.safetensors", t_fixture(FP32, dir, sizeof dir));
    int64_t B = f.r.batch, T = f.r.seq, H = nnt_model_get_info(f.m)->hidden_size;
    for (int l = 0; l < 5; l++) {
        char k[96];
        snprintf(k, sizeof k, "model.layers.%d.self_attn.v_proj.weight", l);
        nnt_tensor w;
        T_OK(f.rt, nnt_safetensors_read(f.rt, file, k, &w));
        snprintf(k, sizeof k, "layers.%d.attention_norm_output", l);
        const nnt_tensor *x = nnt_trace_get(t, k);
        snprintf(k, sizeof k, "layers.%d.self_attn.attention_values", l);
        const nnt_tensor *v = nnt_trace_get(t, k);
        int64_t Hkv = v->shape[1], Dv = v->shape[3];
        CU_ASSERT_EQUAL(w.shape[0], Hkv * Dv);
        double worst = 0, scale = 0;
        for (int64_t b = 0; b < B; b++)
            for (int64_t s = 0; s < T; s++)
                for (int64_t o = 0; o < Hkv * Dv; o++) {
                    double acc = 0;
                    for (int64_t i = 0; i < H; i++)
                        acc += ((const float *)w.data)[o * H + i] * ((const float *)x->data)[(b * T + s) * H + i];
                    double got = nnt_tensor_get_f64(v, ((b * Hkv + o / Dv) * T + s) * Dv + o % Dv);
                    scale = fmax(scale, fabs(acc));
                    worst = fmax(worst, fabs(acc * 0.707 - got));
                }
        CU_ASSERT(worst <= 1e-5 * scale);
        nnt_tensor_free(&w);
    }
    nnt_trace_free(t);
    close_fixture(&f);
}

/* Sliding blocks: real rows sum below one, and the softmax of [scores, sink] with the sink
 * column dropped rebuilds the pattern. Full blocks: rows sum to one. */
static void test_sink_share(void)
{
    fixture f;
    open_fixture(&f, FP32);
    nnt_trace *t;
    T_OK(f.rt, nnt_trace_new(f.m, &t));
    T_OK(f.rt, nnt_trace_save(t, "layers.*.self_attn.attention_scores"));
    T_OK(f.rt, nnt_trace_save(t, "layers.*.self_attn.attention_probabilities"));
    T_OK(f.rt, nnt_trace_run(t, f.r.ids, f.r.mask, f.r.batch, f.r.seq));
    for (int l = 0; l < 5; l++) {
        char k[96];
        snprintf(k, sizeof k, "layers.%d.self_attn.attention_scores", l);
        const nnt_tensor *s = nnt_trace_get(t, k);
        snprintf(k, sizeof k, "layers.%d.self_attn.attention_probabilities", l);
        const nnt_tensor *p = nnt_trace_get(t, k);
        nnt_tensor sinks = {0};
        int sliding = is_sliding(f.m, l);
        if (sliding) {
            snprintf(k, sizeof k, "layers.%d.self_attn.sinks", l);
            CU_ASSERT_FATAL(t_ref_get(&f.r, k, &sinks) == 0);
        }
        int64_t B = s->shape[0], Hq = s->shape[1], T = s->shape[2], S = s->shape[3];
        double worst = 0;
        int rows_below = 0, rows = 0;
        for (int64_t b = 0; b < B; b++)
            for (int64_t h = 0; h < Hq; h++)
                for (int64_t q = 0; q < T; q++) {
                    if (!f.r.mask[b * T + q]) continue;
                    const float *sr = (const float *)s->data + ((b * Hq + h) * T + q) * S;
                    const float *pr = (const float *)p->data + ((b * Hq + h) * T + q) * S;
                    double sink = sliding ? nnt_tensor_get_f64(&sinks, h) : -INFINITY, mx = sink, sum = 0, psum = 0;
                    for (int64_t j = 0; j < S; j++) mx = fmax(mx, sr[j]);
                    for (int64_t j = 0; j < S; j++) sum += exp(sr[j] - mx);
                    if (sliding) sum += exp(sink - mx);
                    for (int64_t j = 0; j < S; j++) {
                        worst = fmax(worst, fabs(exp(sr[j] - mx) / sum - pr[j]));
                        psum += pr[j];
                    }
                    rows++;
                    rows_below += psum < 1.0 - 1e-4;
                    if (!sliding) CU_ASSERT_DOUBLE_EQUAL(psum, 1.0, 1e-5);
                }
        CU_ASSERT(worst < 1e-6);
        CU_ASSERT_EQUAL(rows_below, sliding ? rows : 0);
        nnt_tensor_free(&sinks);
    }
    nnt_trace_free(t);
    close_fixture(&f);
}

/* The router: choice by sigmoid + bias within the best topk_group of n_group groups (a group's
 * strength: the sum of its two best biased scores), weights the chosen sigmoids renormalised
 * times routed_scaling_factor (2.5 here). Bias and group sizes from the checkpoint/config. */
static void test_router_identity(void)
{
    fixture f;
    open_fixture(&f, FP32);
    nnt_trace *t = t_run_reference(f.rt, f.m, &f.r);
    char dir[512], file[600];
    snprintf(file, sizeof file, "%s/model.safetensors", t_fixture(FP32, dir, sizeof dir));
    const nnt_model_info *info = nnt_model_get_info(f.m);
    int E = info->num_experts, K = info->top_k, G = 2, per = E / G, group_mattered = 0;
    for (int l = 1; l < 5; l++) {
        char k[128];
        snprintf(k, sizeof k, "model.layers.%d.mlp.gate.e_score_correction_bias", l);
        nnt_tensor bias;
        T_OK(f.rt, nnt_safetensors_read(f.rt, file, k, &bias));
        snprintf(k, sizeof k, "layers.%d.mlp.router_logits", l);
        const nnt_tensor *lg = nnt_trace_get(t, k);
        snprintf(k, sizeof k, "layers.%d.mlp.expert_indices", l);
        const nnt_tensor *ix = nnt_trace_get(t, k);
        snprintf(k, sizeof k, "layers.%d.mlp.expert_weights", l);
        const nnt_tensor *w = nnt_trace_get(t, k);
        for (int64_t tok = 0; tok < (int64_t)f.r.batch * f.r.seq; tok++) {
            double sig[64], c[64], gs[8];
            for (int e = 0; e < E; e++) {
                sig[e] = 1.0 / (1.0 + exp(-nnt_tensor_get_f64(lg, tok * E + e)));
                c[e] = sig[e] + nnt_tensor_get_f64(&bias, e);
            }
            for (int g = 0; g < G; g++) {
                double b1 = -INFINITY, b2 = -INFINITY;
                for (int e = g * per; e < (g + 1) * per; e++) {
                    if (c[e] > b1) {
                        b2 = b1;
                        b1 = c[e];
                    } else if (c[e] > b2)
                        b2 = c[e];
                }
                gs[g] = b1 + b2;
            }
            int best_group = gs[1] > gs[0] ? 1 : 0;
            /* the plain top-k over all experts, to see whether the group rule changed it */
            int plain[64] = {0};
            for (int s = 0; s < K; s++) {
                int best = -1;
                for (int e = 0; e < E; e++)
                    if (!plain[e] && (best < 0 || c[e] > c[best])) best = e;
                plain[best] = 1;
            }
            double sum = 0;
            for (int s = 0; s < K; s++) sum += sig[(int)nnt_tensor_get_f64(ix, tok * K + s)];
            int differs = 0;
            for (int s = 0; s < K; s++) {
                int e = (int)nnt_tensor_get_f64(ix, tok * K + s);
                CU_ASSERT_EQUAL(e / per, best_group);
                differs |= !plain[e];
                CU_ASSERT_DOUBLE_EQUAL(nnt_tensor_get_f64(w, tok * K + s), sig[e] / sum * 2.5, 1e-5);
            }
            group_mattered += differs;
        }
        nnt_tensor_free(&bias);
    }
    CU_ASSERT(group_mattered > 0);
    nnt_trace_free(t);
    close_fixture(&f);
}

/* An edit of attention_scores on a sliding block is renormalised against the sink: scores of
 * zero at every visible key give each visible key exp(0) / (n_visible + exp(sink - 0)). */
static nnt_status zero_finite(void *user, const char *path, int layer, nnt_tensor *v, nnt_error *err)
{
    float *d = v->data;
    for (int64_t i = 0; i < nnt_tensor_numel(v); i++)
        if (isfinite(d[i])) d[i] = 0.0f; /* masked entries stay -inf */
    return NNT_OK;
}

static void test_scores_edit_against_sink(void)
{
    fixture f;
    open_fixture(&f, FP32);
    nnt_trace *t;
    T_OK(f.rt, nnt_trace_new(f.m, &t));
    T_OK(f.rt, nnt_trace_edit(t, "layers.1.self_attn.attention_scores", zero_finite, NULL));
    T_OK(f.rt, nnt_trace_save(t, "layers.1.self_attn.attention_scores"));
    T_OK(f.rt, nnt_trace_save(t, "layers.1.self_attn.attention_probabilities"));
    T_OK(f.rt, nnt_trace_run(t, f.r.ids, f.r.mask, f.r.batch, f.r.seq));
    nnt_tensor sinks;
    CU_ASSERT_FATAL(t_ref_get(&f.r, "layers.1.self_attn.sinks", &sinks) == 0);
    const nnt_tensor *s = nnt_trace_get(t, "layers.1.self_attn.attention_scores");
    const nnt_tensor *p = nnt_trace_get(t, "layers.1.self_attn.attention_probabilities");
    int64_t B = p->shape[0], Hq = p->shape[1], T = p->shape[2], S = p->shape[3];
    double worst = 0;
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < Hq; h++)
            for (int64_t q = 0; q < T; q++) {
                if (!f.r.mask[b * T + q]) continue;
                int visible = 0;
                for (int64_t j = 0; j < S; j++) visible += isfinite(((const float *)s->data)[((b * Hq + h) * T + q) * S + j]);
                double sink = nnt_tensor_get_f64(&sinks, h), mx = fmax(0.0, sink);
                double want = exp(-mx) / (visible * exp(-mx) + exp(sink - mx));
                for (int64_t j = 0; j < S; j++) {
                    int vis = isfinite(((const float *)s->data)[((b * Hq + h) * T + q) * S + j]);
                    double got = ((const float *)p->data)[((b * Hq + h) * T + q) * S + j];
                    worst = fmax(worst, fabs(got - (vis ? want : 0.0)));
                }
            }
    CU_ASSERT(worst < 1e-6);
    nnt_tensor_free(&sinks);
    nnt_trace_free(t);
    close_fixture(&f);
}

/* A token past the window is unaffected by an edit to a key outside its window: zeroing the
 * key (every head) at position P of sliding block 1 changes that block's head outputs at the
 * queries P .. P + window - 1 of the row, and at no query from P + window on. */
static nnt_status zero_key_at(void *user, const char *path, int layer, nnt_tensor *v, nnt_error *err)
{
    int pos = *(int *)user;
    int64_t B = v->shape[0], H = v->shape[1], T = v->shape[2], D = v->shape[3];
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < H; h++) memset((float *)v->data + ((b * H + h) * T + pos) * D, 0, (size_t)D * sizeof(float));
    return NNT_OK;
}

static void test_window_isolation(void)
{
    fixture f;
    open_fixture(&f, FP32);
    const int window = 7, P = 3;
    int pos = P;
    nnt_trace *clean, *t;
    T_OK(f.rt, nnt_trace_new(f.m, &clean));
    T_OK(f.rt, nnt_trace_save(clean, "layers.1.self_attn.attention_head_outputs"));
    T_OK(f.rt, nnt_trace_run(clean, f.r.ids, f.r.mask, f.r.batch, f.r.seq));
    T_OK(f.rt, nnt_trace_new(f.m, &t));
    T_OK(f.rt, nnt_trace_edit(t, "layers.1.self_attn.attention_keys", zero_key_at, &pos));
    T_OK(f.rt, nnt_trace_save(t, "layers.1.self_attn.attention_head_outputs"));
    T_OK(f.rt, nnt_trace_run(t, f.r.ids, f.r.mask, f.r.batch, f.r.seq));
    const nnt_tensor *a = nnt_trace_get(clean, "layers.1.self_attn.attention_head_outputs");
    const nnt_tensor *b = nnt_trace_get(t, "layers.1.self_attn.attention_head_outputs");
    int64_t T = a->shape[1], per = a->shape[2] * a->shape[3];
    for (int64_t q = 0; q < T; q++) { /* row 0 is unpadded: positions equal indices */
        int changed = 0;
        for (int64_t i = 0; i < per; i++) changed |= nnt_tensor_get_f64(a, q * per + i) != nnt_tensor_get_f64(b, q * per + i);
        CU_ASSERT_EQUAL(changed, q >= P && q < P + window);
    }
    nnt_trace_free(clean);
    nnt_trace_free(t);
    close_fixture(&f);
}

static void test_ablation(void)
{
    fixture f;
    open_fixture(&f, FP32);
    for (int l = 1; l < 5; l++) t_check_ablation(f.rt, f.m, &f.r, l);
    close_fixture(&f);
}

/* The dense block serves its neurons and reports every mixture value missing, with a reason;
 * the printout groups blocks 1-2 and shows where the kinds differ. */
static void test_dense_block_and_printout(void)
{
    fixture f;
    open_fixture(&f, FP32);
    const char *mixture[] = {"router_logits", "expert_weights", "expert_indices", "expert_outputs", "routed_output",
                             "shared_expert_output"};
    for (size_t i = 0; i < sizeof mixture / sizeof *mixture; i++) {
        char p[96];
        nnt_value_info vi;
        snprintf(p, sizeof p, "layers.0.mlp.%s", mixture[i]);
        T_OK(f.rt, nnt_model_value_info(f.m, p, NULL, &vi));
        CU_ASSERT_EQUAL(vi.served, 0);
        CU_ASSERT_PTR_NOT_NULL(strstr(vi.reason, "dense"));
    }
    nnt_value_info vi;
    T_OK(f.rt, nnt_model_value_info(f.m, "layers.0.mlp.mlp_neurons", NULL, &vi));
    CU_ASSERT_EQUAL(vi.served, 1);
    T_OK(f.rt, nnt_model_value_info(f.m, "layers.2.mlp.mlp_neurons", NULL, &vi));
    CU_ASSERT_EQUAL(vi.served, 0);
    char path[768];
    snprintf(path, sizeof path, "%s/mimo_print.txt", t_tmpdir());
    FILE *out = fopen(path, "w+");
    CU_ASSERT_FATAL(out != NULL);
    T_OK(f.rt, nnt_model_print(f.m, out));
    rewind(out);
    char line[512];
    int saw[5] = {0};
    while (fgets(line, sizeof line, out)) {
        saw[0] |= strstr(line, "    (0): MiMoV2FlashDecoderLayer(") != NULL;
        saw[1] |= strstr(line, "    (1-2): 2 x MiMoV2FlashDecoderLayer(") != NULL;
        saw[2] |= strstr(line, "    (3): MiMoV2FlashDecoderLayer(") != NULL;
        saw[3] |= strstr(line, "    (4): MiMoV2FlashDecoderLayer(") != NULL;
        saw[4] |= strstr(line, "(mlp): MiMoV2FlashMLP(") != NULL;
    }
    fclose(out);
    for (int i = 0; i < 5; i++) CU_ASSERT(saw[i]);
    close_fixture(&f);
}

/* ---- precision = bf16 ----
 * bf16/ holds fp32/'s weights as transformers' bfloat16 model holds them (rounded to bfloat16; the
 * router's weight and selection bias, which transformers keeps in float32, unchanged) with two
 * transformers runs on fp32/'s prompts: float32 (reference.safetensors) and torch.bfloat16
 * (reference_bf16.safetensors); tests/fixtures/make_fixtures.py writes both. */
static const char *const BF16 = "mimo_v2_flash/bf16";

/* The default precision on bf16/ matches the float32 run: logits, final_norm_output, 3 values a
 * block, router_logits and expert_indices on the 4 mixture blocks. */
static void test_bf16_weights_values(void)
{
    fixture f;
    open_fixture(&f, BF16);
    nnt_trace *t = t_run_reference(f.rt, f.m, &f.r);
    CU_ASSERT_EQUAL(t_check_reference(&f.r, t), 2 + 5 * 3 + 4 * 2);
    nnt_trace_free(t);
    close_fixture(&f);
}

/* precision = bf16 is at least as close to transformers-bf16 as transformers-bf16 is to
 * transformers-fp32, on logits and every layer_output (test_util.h, t_bf16_report). */
static void test_bf16_precision(void)
{
    t_bf16 c;
    t_bf16_open(&c, "mimo_v2_flash", BF16, "mimo_v2_flash/bf16/reference_bf16.safetensors", BF16, NULL, 0);
    t_bf16_report(&c);
    t_bf16_close(&c);
}

int register_tests(void)
{
    CU_pSuite s = CU_add_suite("mimo_v2_flash", NULL, NULL);
    if (!s) return -1;
    if (!CU_add_test(s, "fp32 fixture matches transformers on every value", test_fp32_values) ||
        !CU_add_test(s, "hub-spelled FP8 fixture matches transformers", test_fp8_hub_values) ||
        !CU_add_test(s, "per-head FP8 key/value scales match transformers on the per-head dequantised weights",
                     test_fp8_per_head_values) ||
        !CU_add_test(s, "per-head key/value scales: recognised on full blocks only, decoded per head",
                     test_fp8_per_head_loader) ||
        !CU_add_test(s, "per-head key/value scales: block 0 values from the file's bytes by hand",
                     test_fp8_per_head_values_by_hand) ||
        !CU_add_test(s, "per-head key/value scales: a plain-grid copy lands far from the reference",
                     test_fp8_per_head_plain_copy_differs) ||
        !CU_add_test(s, "per-head key/value scales: v_proj without its scales is refused, both named",
                     test_fp8_per_head_v_scales_missing) ||
        !CU_add_test(s, "MiMo-V2.5 release layout (fused chunked qkv_proj, MXFP4 experts) matches transformers",
                     test_v25_values) ||
        !CU_add_test(s, "MiMo-V2.5: the chunked qkv_proj read as one plain block is refused", test_v25_plain_order_refused) ||
        !CU_add_test(s, "MiMo-V2.5: an unknown attention_projection_layout is refused", test_v25_unknown_layout_refused) ||
        !CU_add_test(s, "MiMo-V2.5: sinks the config asks for but the checkpoint lacks are named", test_v25_sinks_missing) ||
        !CU_add_test(s, "MiMo-V2.5: the printout's notes (MAX's hidden states, moe_router_dtype)", test_v25_notes) ||
        !CU_add_test(s, "MiMo-V2.5: layer_output is transformers' output_hidden_states, before the final norm",
                     test_v25_hidden_states) ||
        !CU_add_test(s, "MiMo-V2.5: moe_router_dtype is checked and reported", test_v25_router_dtype) ||
        !CU_add_test(s, "MiMo-V2.5: config.json's byte count against the headers (qkv_proj per chunk)",
                     test_v25_costs_against_headers) ||
        !CU_add_test(s, "block kinds and per-block key/value heads", test_block_kinds) ||
        !CU_add_test(s, "attention_values are v_proj times attention_value_scale", test_value_scale) ||
        !CU_add_test(s, "sink share: sliding rows below one, rebuilt with the sink column", test_sink_share) ||
        !CU_add_test(s, "router identity with groups and scaling", test_router_identity) ||
        !CU_add_test(s, "edited scores are renormalised against the sink", test_scores_edit_against_sink) ||
        !CU_add_test(s, "a key outside the window cannot reach a query", test_window_isolation) ||
        !CU_add_test(s, "expert ablation changes exactly the routed tokens", test_ablation) ||
        !CU_add_test(s, "the dense block and the grouped printout", test_dense_block_and_printout) ||
        !CU_add_test(s, "bf16 weights: the default precision matches transformers' float32 run",
                     test_bf16_weights_values) ||
        !CU_add_test(s, "precision = bf16 is as close to transformers-bf16 as transformers-bf16 is to fp32",
                     test_bf16_precision))
        return -1;
    return 0;
}
