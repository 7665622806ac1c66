/* test_kimi.c - the Kimi-Linear family against transformers' torch kernels (the checkpoint as
 * save_pretrained writes it, and the same weights in the original release's layout and config
 * spelling), the page's identities, the recurrence rebuilt from the served values, left-padding
 * invariance, edits that change the recurrence from the edited token on, and the other tensor
 * spellings the family binds (packed convolutions, forget_gate.*, mlp.*). Tolerances as in
 * test_util.h (T_TOL). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"

static const char *const FP32 = "kimi_linear/fp32";
static const char *const HUB = "kimi_linear/hub";
static const int KDA_BLOCKS[] = {0, 1, 2, 4};

typedef struct fixture {
    nnt_runtime *rt;
    nnt_model *m;
    t_ref r;
} fixture;

/* hub/ holds fp32/'s weights in the release's layout; its reference values are fp32/'s */
static void open_fixture(fixture *f, const char *rel)
{
    f->rt = t_runtime();
    f->m = t_model(f->rt, rel);
    CU_ASSERT_FATAL(t_ref_open(&f->r, f->rt, FP32) == 0);
}

static void close_fixture(fixture *f)
{
    nnt_model_free(f->m);
    nnt_runtime_close(f->rt);
}

static const char *mixer_of(int layer)
{
    return layer == 3 ? "self_attn" : "linear_attn";
}

/* 5 model values; 6 block values per block; 9 per KDA block (states included);
 * the latent block 8; the dense MLP 3; each MoE block 7. */
static void check_all(const char *rel)
{
    fixture f;
    open_fixture(&f, rel);
    nnt_trace *t = t_run_reference(f.rt, f.m, &f.r);
    CU_ASSERT_EQUAL(t_check_reference(&f.r, t), 5 + 5 * 6 + 4 * 9 + 8 + 3 + 4 * 7);
    t_check_block_sum(t, 5, mixer_of);
    nnt_trace_free(t);
    close_fixture(&f);
}

static void test_fp32_values(void) { check_all(FP32); }
static void test_hub_values(void) { check_all(HUB); }

/* routed_output + shared_expert_output == mlp_output; the weights sum to
 * routed_scaling_factor (2.446) at every token. */
static void test_moe_identities(void)
{
    fixture f;
    open_fixture(&f, FP32);
    nnt_trace *t = t_run_reference(f.rt, f.m, &f.r);
    for (int l = 1; l < 5; l++) {
        char k[96];
        snprintf(k, sizeof k, "layers.%d.mlp.routed_output", l);
        const nnt_tensor *r = nnt_trace_get(t, k);
        snprintf(k, sizeof k, "layers.%d.mlp.shared_expert_output", l);
        const nnt_tensor *s = nnt_trace_get(t, k);
        snprintf(k, sizeof k, "layers.%d.mlp.mlp_output", l);
        const nnt_tensor *o = nnt_trace_get(t, k);
        snprintf(k, sizeof k, "layers.%d.mlp.expert_weights", l);
        const nnt_tensor *w = nnt_trace_get(t, k);
        CU_ASSERT_FATAL(r && s && o && w);
        double worst = 0;
        for (int64_t i = 0; i < nnt_tensor_numel(o); i++)
            worst = fmax(worst, fabs(nnt_tensor_get_f64(r, i) + nnt_tensor_get_f64(s, i) - nnt_tensor_get_f64(o, i)));
        CU_ASSERT(worst < 1e-6);
        for (int64_t tok = 0; tok < (int64_t)f.r.batch * f.r.seq; tok++)
            CU_ASSERT_DOUBLE_EQUAL(nnt_tensor_get_f64(w, tok * 2) + nnt_tensor_get_f64(w, tok * 2 + 1), 2.446, 1e-5);
    }
    nnt_trace_free(t);
    close_fixture(&f);
}

/* From the served queries, keys, values, decays and betas, the delta rule (L2 norm, the query
 * scale, decay then delta update then read, in double precision here) reproduces
 * attention_head_outputs; the state after the last token equals state_output and the
 * per-token `state` emissions equal `states`; decays are never positive. */
static void test_recurrence_rebuilt(void)
{
    fixture f;
    open_fixture(&f, FP32);
    nnt_trace *t;
    T_OK(f.rt, nnt_trace_new(f.m, &t));
    const char *vals[] = {"attention_queries", "attention_keys", "attention_values", "decays", "betas",
                          "attention_head_outputs", "state_output", "states", "state"};
    for (size_t i = 0; i < sizeof vals / sizeof *vals; i++) {
        char p[96];
        snprintf(p, sizeof p, "layers.*.linear_attn.%s", vals[i]);
        T_OK(f.rt, nnt_trace_save(t, p));
    }
    T_OK(f.rt, nnt_trace_run(t, f.r.ids, f.r.mask, f.r.batch, f.r.seq));
    for (size_t bi = 0; bi < sizeof KDA_BLOCKS / sizeof *KDA_BLOCKS; bi++) {
        int l = KDA_BLOCKS[bi];
        const nnt_tensor *x[8];
        for (int i = 0; i < 8; i++) {
            char p[96];
            snprintf(p, sizeof p, "layers.%d.linear_attn.%s", l, vals[i]);
            x[i] = nnt_trace_get(t, p);
            CU_ASSERT_FATAL(x[i] != NULL);
        }
        const float *q = x[0]->data, *k = x[1]->data, *v = x[2]->data, *g = x[3]->data, *beta = x[4]->data;
        const float *o = x[5]->data, *last = x[6]->data, *all = x[7]->data;
        int64_t B = x[0]->shape[0], T = x[0]->shape[1], H = x[0]->shape[2], K = x[0]->shape[3], V = x[2]->shape[3];
        double worst_o = 0, worst_s = 0, scale_o = 0;
        for (int64_t i = 0; i < B * T * H * K; i++) CU_ASSERT(g[i] <= 0.0f);
        for (int64_t b = 0; b < B; b++)
            for (int64_t h = 0; h < H; h++) {
                double S[16][16] = {{0}};
                for (int64_t s = 0; s < T; s++) {
                    if (!f.r.mask[b * T + s]) continue; /* padding never reaches the state */
                    int64_t base = (b * T + s) * H + h;
                    double nq = 0, nk = 0, qn[16], kn[16];
                    for (int64_t i = 0; i < K; i++) {
                        nq += (double)q[base * K + i] * q[base * K + i];
                        nk += (double)k[base * K + i] * k[base * K + i];
                    }
                    for (int64_t i = 0; i < K; i++) {
                        qn[i] = q[base * K + i] / sqrt(nq + 1e-6) / sqrt((double)K);
                        kn[i] = k[base * K + i] / sqrt(nk + 1e-6);
                    }
                    for (int64_t i = 0; i < K; i++)
                        for (int64_t j = 0; j < V; j++) S[i][j] *= exp(g[base * K + i]);
                    for (int64_t j = 0; j < V; j++) {
                        double u = 0;
                        for (int64_t i = 0; i < K; i++) u += S[i][j] * kn[i];
                        for (int64_t i = 0; i < K; i++) S[i][j] += kn[i] * beta[base] * (v[base * V + j] - u);
                    }
                    for (int64_t j = 0; j < V; j++) {
                        double acc = 0;
                        for (int64_t i = 0; i < K; i++) acc += S[i][j] * qn[i];
                        worst_o = fmax(worst_o, fabs(acc - o[base * V + j]));
                        scale_o = fmax(scale_o, fabs(acc));
                    }
                }
                for (int64_t i = 0; i < K; i++)
                    for (int64_t j = 0; j < V; j++) {
                        worst_s = fmax(worst_s, fabs(S[i][j] - last[((b * H + h) * K + i) * V + j]));
                        /* states at the last token == state_output */
                        CU_ASSERT(all[(((b * T + T - 1) * H + h) * K + i) * V + j] == last[((b * H + h) * K + i) * V + j]);
                    }
            }
        CU_ASSERT(worst_o <= 1e-5 * scale_o);
        CU_ASSERT(worst_s < 1e-5);
        /* the per-token emissions of `state`: state@s is states[:, s] */
        for (int64_t s = 0; s < T; s += 7) {
            char p[96];
            snprintf(p, sizeof p, s ? "layers.%d.linear_attn.state@%lld" : "layers.%d.linear_attn.state", l, (long long)s);
            const nnt_tensor *one = nnt_trace_get(t, p);
            CU_ASSERT_FATAL(one != NULL);
            CU_ASSERT(one->ndim == 4 && one->shape[0] == B && one->shape[1] == H);
            for (int64_t b = 0; b < B; b++)
                CU_ASSERT(memcmp((const float *)one->data + b * H * K * V, all + ((b * T + s) * H) * K * V,
                                 sizeof(float) * (size_t)(H * K * V)) == 0);
        }
    }
    /* a prompt starts with no state: state_input is None */
    nnt_trace_free(t);
    T_OK(f.rt, nnt_trace_new(f.m, &t));
    T_OK(f.rt, nnt_trace_save(t, "layers.0.linear_attn.state_input"));
    T_OK(f.rt, nnt_trace_run(t, f.r.ids, f.r.mask, f.r.batch, f.r.seq));
    CU_ASSERT_EQUAL(nnt_trace_result_count(t), 1);
    CU_ASSERT_PTR_NULL(nnt_trace_get(t, "layers.0.linear_attn.state_input"));
    nnt_trace_free(t);
    T_OK(f.rt, nnt_trace_new(f.m, &t));
    T_OK(f.rt, nnt_trace_zero(t, "layers.0.linear_attn.state_input"));
    T_FAILS(f.rt, nnt_trace_run(t, f.r.ids, f.r.mask, f.r.batch, f.r.seq), NNT_ERR_STATE, "is None in this call");
    nnt_trace_free(t);
    close_fixture(&f);
}

/* The same prompt with 0 and with 3 left pads gives the same values at its real tokens, at
 * batch size 1 and 2 (the second row another prompt). */
static void test_left_padding(void)
{
    fixture f;
    open_fixture(&f, FP32);
    const int n = 19, pads = 3;
    const int32_t *prompt = f.r.ids; /* row 0's first 19 tokens */
    const char *vals[] = {"logits", "layers.1.linear_attn.states", "layers.2.linear_attn.attention_output",
                          "layers.3.self_attn.attention_output", "layers.4.linear_attn.attention_head_outputs",
                          "layers.4.layer_output"};
    nnt_trace *alone;
    T_OK(f.rt, nnt_trace_new(f.m, &alone));
    for (size_t i = 0; i < sizeof vals / sizeof *vals; i++) T_OK(f.rt, nnt_trace_save(alone, vals[i]));
    T_OK(f.rt, nnt_trace_run(alone, prompt, NULL, 1, n));
    for (int batch = 1; batch <= 2; batch++) {
        int32_t ids[2 * 22] = {0}, mask[2 * 22] = {0};
        int T = n + pads;
        for (int s = 0; s < n; s++) {
            ids[pads + s] = prompt[s];
            mask[pads + s] = 1;
        }
        for (int s = 0; s < T; s++) { /* row 1: another, unpadded prompt */
            ids[T + s] = f.r.ids[f.r.seq + 2 + s] ? f.r.ids[f.r.seq + 2 + s] : 7;
            mask[T + s] = 1;
        }
        nnt_trace *padded;
        T_OK(f.rt, nnt_trace_new(f.m, &padded));
        for (size_t i = 0; i < sizeof vals / sizeof *vals; i++) T_OK(f.rt, nnt_trace_save(padded, vals[i]));
        T_OK(f.rt, nnt_trace_run(padded, ids, mask, batch, T));
        for (size_t i = 0; i < sizeof vals / sizeof *vals; i++) {
            const nnt_tensor *a = nnt_trace_get(alone, vals[i]), *b = nnt_trace_get(padded, vals[i]);
            CU_ASSERT_FATAL(a && b);
            int64_t per = nnt_tensor_numel(a) / n; /* entries per token, token-major values */
            double worst = 0, scale = 0;
            for (int s = 0; s < n; s++)
                for (int64_t j = 0; j < per; j++) {
                    double x = nnt_tensor_get_f64(a, s * per + j), y = nnt_tensor_get_f64(b, (pads + s) * per + j);
                    worst = fmax(worst, fabs(x - y));
                    scale = fmax(scale, fabs(x));
                }
            if (worst > 1e-5 * scale) fprintf(stderr, "\n  batch %d, %s: %.3g of %.3g\n", batch, vals[i], worst, scale);
            CU_ASSERT(worst <= 1e-5 * scale);
        }
        nnt_trace_free(padded);
    }
    nnt_trace_free(alone);
    close_fixture(&f);
}

/* An edit to betas, decays or keys at token P changes the recurrence from P on: head outputs
 * before P stay bit-identical, the output at P changes. */
static nnt_status zero_at_token(void *user, const char *path, int layer, nnt_tensor *v, nnt_error *err)
{
    int64_t P = *(int *)user, B = v->shape[0], T = v->shape[1], per = nnt_tensor_numel(v) / (B * T);
    for (int64_t b = 0; b < B; b++) memset((float *)v->data + (b * T + P) * per, 0, sizeof(float) * (size_t)per);
    return NNT_OK;
}

static void test_edits_from_that_point(void)
{
    fixture f;
    open_fixture(&f, FP32);
    int P = 10;
    nnt_trace *clean;
    T_OK(f.rt, nnt_trace_new(f.m, &clean));
    T_OK(f.rt, nnt_trace_save(clean, "layers.1.linear_attn.attention_head_outputs"));
    T_OK(f.rt, nnt_trace_run(clean, f.r.ids, f.r.mask, f.r.batch, f.r.seq));
    const char *targets[] = {"layers.1.linear_attn.betas", "layers.1.linear_attn.decays", "layers.1.linear_attn.attention_keys"};
    for (size_t i = 0; i < 3; i++) {
        nnt_trace *t;
        T_OK(f.rt, nnt_trace_new(f.m, &t));
        T_OK(f.rt, nnt_trace_edit(t, targets[i], zero_at_token, &P));
        T_OK(f.rt, nnt_trace_save(t, "layers.1.linear_attn.attention_head_outputs"));
        T_OK(f.rt, nnt_trace_run(t, f.r.ids, f.r.mask, f.r.batch, f.r.seq));
        const nnt_tensor *a = nnt_trace_get(clean, "layers.1.linear_attn.attention_head_outputs");
        const nnt_tensor *b = nnt_trace_get(t, "layers.1.linear_attn.attention_head_outputs");
        int64_t per = a->shape[2] * a->shape[3];
        for (int s = 0; s <= P; s++) { /* row 0 */
            int same = memcmp((const float *)a->data + s * per, (const float *)b->data + s * per, sizeof(float) * (size_t)per) == 0;
            if (s < P) CU_ASSERT(same);
            if (s == P) CU_ASSERT(!same);
        }
        nnt_trace_free(t);
    }
    nnt_trace_free(clean);
    close_fixture(&f);
}

/* Per block, the mixer the block lacks is reported with the reason; the printout names the KDA
 * mixer linear_attn (its native name self_attn) and groups blocks 1-2. */
static void test_support_and_printout(void)
{
    fixture f;
    open_fixture(&f, FP32);
    nnt_value_info vi;
    T_OK(f.rt, nnt_model_value_info(f.m, "layers.1.self_attn.attention_scores", NULL, &vi));
    CU_ASSERT(!vi.served && strstr(vi.reason, "Kimi Delta Attention"));
    T_OK(f.rt, nnt_model_value_info(f.m, "layers.3.linear_attn.state", NULL, &vi));
    CU_ASSERT(!vi.served && strstr(vi.reason, "latent attention"));
    T_OK(f.rt, nnt_model_value_info(f.m, "layers.0.mlp.router_logits", NULL, &vi));
    CU_ASSERT(!vi.served && strstr(vi.reason, "dense"));
    nnt_call_dims d = {2, 24, 0};
    T_OK(f.rt, nnt_model_value_info(f.m, "layers.3.self_attn.attention_keys", &d, &vi));
    CU_ASSERT(vi.served && vi.shape[1] == 2 && vi.shape[3] == 24); /* keys for every head, qk_head_dim wide */
    T_OK(f.rt, nnt_model_value_info(f.m, "layers.3.self_attn.attention_values", &d, &vi));
    CU_ASSERT(vi.shape[3] == 12);
    nnt_trace *t;
    T_OK(f.rt, nnt_trace_new(f.m, &t));
    T_FAILS(f.rt, nnt_trace_save(t, "layers.0.self_attn.decays"), NNT_ERR_PATH, "layers.0.linear_attn.decays");
    T_FAILS(f.rt, nnt_trace_save(t, "layers.2.self_attn.attention_output"), NNT_ERR_NOT_SERVED, "Kimi Delta Attention");
    nnt_trace_free(t);
    char path[768];
    snprintf(path, sizeof path, "%s/kimi_print.txt", t_tmpdir());
    FILE *out = fopen(path, "w+");
    CU_ASSERT_FATAL(out != NULL);
    T_OK(f.rt, nnt_model_print(f.m, out));
    rewind(out);
    char line[512];
    int saw[4] = {0};
    while (fgets(line, sizeof line, out)) {
        saw[0] |= strstr(line, "(linear_attn/self_attn): KimiLinearDeltaAttention(") != NULL;
        saw[1] |= strstr(line, "(1-2): 2 x KimiLinearDecoderLayer(") != NULL;
        saw[2] |= strstr(line, "(self_attn): KimiLinearAttention(") != NULL;
        saw[3] |= strstr(line, "(states) -> States [batch seq heads key_dim value_dim]") != NULL;
    }
    fclose(out);
    for (int i = 0; i < 4; i++) CU_ASSERT(saw[i]);
    close_fixture(&f);
}

static void test_ablation(void)
{
    fixture f;
    open_fixture(&f, FP32);
    t_check_ablation(f.rt, f.m, &f.r, 3);
    close_fixture(&f);
}

/* ---- precision = bf16 ----
 * bf16/ holds fp32/'s weights as transformers' bfloat16 model holds them (rounded to bfloat16; the
 * router's weight and selection bias and the forget gate's dt_bias, which transformers keeps in
 * float32, unchanged) with two transformers runs on fp32/'s prompts: float32
 * (reference.safetensors) and torch.bfloat16 (reference_bf16.safetensors);
 * tests/fixtures/make_fixtures.py writes both. */
static const char *const BF16 = "kimi_linear/bf16";

/* The default precision on bf16/ matches the float32 run: logits, final_norm_output, 3 values a
 * block, router_logits and expert_indices on the 4 mixture blocks. */
static void test_bf16_weights_values(void)
{
    nnt_runtime *rt = t_runtime();
    nnt_model *m = t_model(rt, BF16);
    t_ref r;
    CU_ASSERT_FATAL(t_ref_open(&r, rt, BF16) == 0);
    nnt_trace *t = t_run_reference(rt, m, &r);
    CU_ASSERT_EQUAL(t_check_reference(&r, t), 2 + 5 * 3 + 4 * 2);
    nnt_trace_free(t);
    nnt_model_free(m);
    nnt_runtime_close(rt);
}

/* weights = fp8 on bf16/: the linear and expert weights re-encoded as FP8 e4m3 with 128 x 128
 * block scales at load; logits and final_norm_output match transformers' float32 run on the same
 * weights re-encoded by torch and decoded (reference_fp8.safetensors, written by
 * tests/fixtures/make_reencode_fixtures.py), and the model's record counts the weights the script
 * re-encodes, with its relative RMS error. */
static void test_fp8_weights_values(void)
{
    char ini[1024];
    CU_ASSERT_FATAL(t_ini_with("kimi-fp8.ini", "family.kimi_linear", "weights", "fp8", ini, sizeof ini) != NULL);
    nnt_runtime *rt = NULL;
    CU_ASSERT_EQUAL_FATAL(nnt_runtime_open(ini, &rt), NNT_OK);
    char dir[512];
    nnt_model *m = NULL;
    T_OK(rt, nnt_model_load(rt, t_fixture(BF16, dir, sizeof dir), &m));
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    t_ref r;
    CU_ASSERT_FATAL(t_ref_open(&r, rt, "kimi_linear/bf16/reference_fp8.safetensors") == 0);
    nnt_trace *t;
    T_OK(rt, nnt_trace_new(m, &t));
    T_OK(rt, nnt_trace_save(t, "logits"));
    T_OK(rt, nnt_trace_save(t, "final_norm_output"));
    T_OK(rt, nnt_trace_run(t, r.ids, r.mask, r.batch, r.seq));
    t_check_value(&r, t, "logits");
    t_check_value(&r, t, "final_norm_output");
    nnt_tensor count, rel;
    CU_ASSERT_FATAL(t_ref_get(&r, "reencoded_tensors", &count) == 0 && t_ref_get(&r, "rel_rms", &rel) == 0);
    nnt_reencoding re = {.struct_size = sizeof re};
    T_OK(rt, nnt_model_reencoding(m, &re));
    CU_ASSERT_EQUAL(re.tensors, (int64_t)nnt_tensor_get_f64(&count, 0));
    CU_ASSERT(fabs(re.rel_rms - nnt_tensor_get_f64(&rel, 0)) < 1e-6 * re.rel_rms);
    /* a byte a value (half a BF16 weight) and one float32 scale each: no weight here spans two blocks */
    CU_ASSERT_EQUAL(re.encoded_bytes * 2, re.stored_bytes + (uint64_t)re.tensors * 8);
    nnt_reencoding wrong = {.struct_size = 8};
    CU_ASSERT_EQUAL(nnt_model_reencoding(m, &wrong), NNT_ERR_INVALID_ARGUMENT);
    nnt_tensor_free(&count);
    nnt_tensor_free(&rel);
    nnt_trace_free(t);
    nnt_model_free(m);
    nnt_runtime_close(rt);
    /* the default keeps the stored weights: nothing re-encoded */
    rt = t_runtime();
    m = t_model(rt, BF16);
    nnt_reencoding none = {.struct_size = sizeof none};
    T_OK(rt, nnt_model_reencoding(m, &none));
    CU_ASSERT_EQUAL(none.tensors, 0);
    nnt_model_free(m);
    nnt_runtime_close(rt);
}

/* precision = bf16 is at least as close to transformers-bf16 as transformers-bf16 is to
 * transformers-fp32, on logits and every layer_output (test_util.h, t_bf16_report). */
static void test_bf16_precision(void)
{
    t_bf16 c;
    t_bf16_open(&c, "kimi_linear", BF16, "kimi_linear/bf16/reference_bf16.safetensors", BF16, NULL, 0);
    t_bf16_report(&c);
    t_bf16_close(&c);
}

/* ---- the other spellings ---- */

/* fp32/'s tensors moved into the other spellings KL_ARCH and the convolution binding accept: the
 * three convolutions packed into one conv1d.weight [3P, 1, W] ([q | k | v] along its rows), the
 * forget gate's tensors under self_attn.forget_gate (A_log as [heads, 1]), every MLP tensor under
 * mlp and the experts as gate_proj / up_proj / down_proj. P = 32, W = 4. */
enum { RS_P = 32, RS_W = 4, RS_LAYERS = 5 };
typedef struct respell_ctx {
    float conv[RS_LAYERS][3 * RS_P * RS_W];
} respell_ctx;

static int respell(void *user, char *name, size_t n, const nnt_tensor *in, nnt_tensor *out, int *owned)
{
    respell_ctx *c = user;
    static const char *const gate_leaves[] = {"f_a_proj.weight", "f_b_proj.weight", "dt_bias", "A_log"};
    static const char *const expert_leaves[] = {"", "gate_proj", "down_proj", "up_proj"}; /* w1, w2, w3 */
    char rest[200];
    int layer = -1, expert, w;
    (void)owned;
    if (sscanf(name, "model.layers.%d.%199s", &layer, rest) != 2) return 1;
    int in_attn = strncmp(rest, "self_attn.", 10) == 0;
    if (in_attn && rest[10] && strchr("qkv", rest[10]) && strcmp(rest + 11, "_conv1d.weight") == 0) {
        int part = (int)(strchr("qkv", rest[10]) - "qkv");
        memcpy(c->conv[layer] + part * RS_P * RS_W, in->data, sizeof(float) * RS_P * RS_W);
        return 0;
    }
    for (int i = 0; i < 4; i++)
        if (in_attn && strcmp(rest + 10, gate_leaves[i]) == 0) {
            snprintf(name, n, "model.layers.%d.self_attn.forget_gate.%s", layer, gate_leaves[i]);
            if (i == 3) *out = (nnt_tensor){.dtype = in->dtype, .ndim = 2, .shape = {in->shape[2], 1}, .data = in->data};
            return 1;
        }
    if (sscanf(rest, "block_sparse_moe.experts.%d.w%d.weight", &expert, &w) == 2 && w >= 1 && w <= 3)
        snprintf(name, n, "model.layers.%d.mlp.experts.%d.%s.weight", layer, expert, expert_leaves[w]);
    else if (strncmp(rest, "block_sparse_moe.", 17) == 0)
        snprintf(name, n, "model.layers.%d.mlp.%s", layer, rest + 17);
    return 1;
}

/* What nnt_model_print writes for m, in *text (malloc'ed); 0 on success. */
static int print_text(nnt_runtime *rt, nnt_model *m, const char *file, char **text)
{
    char path[768];
    snprintf(path, sizeof path, "%s/%s", t_tmpdir(), file);
    FILE *f = fopen(path, "w+");
    if (!f) return -1;
    T_OK(rt, nnt_model_print(m, f));
    long len = ftell(f);
    rewind(f);
    *text = calloc((size_t)len + 1, 1);
    size_t got = *text ? fread(*text, 1, (size_t)len, f) : 0;
    fclose(f);
    return got == (size_t)len ? 0 : -1;
}

/* The respelled checkpoint binds (packed convolutions, forget_gate.*, mlp.*), gives every
 * reference value of transformers' run of fp32/ and prints the same module tree. */
static void test_other_spellings(void)
{
    char dir[768], fx[512], src[768], dst[800];
    t_checkpoint_dir("kimi_respelled", FP32, dir, sizeof dir);
    snprintf(src, sizeof src, "%s/model.safetensors", t_fixture(FP32, fx, sizeof fx));
    snprintf(dst, sizeof dst, "%s/model.safetensors", dir);
    respell_ctx *c = calloc(1, sizeof *c);
    CU_ASSERT_FATAL(c != NULL);
    /* the first pass gathers the convolutions, the second writes them packed beside the rest */
    CU_ASSERT_EQUAL_FATAL(t_rewrite_weights(src, dst, respell, c, 0, NULL, NULL), 0);
    char names[4][64];
    const char *keys[4];
    nnt_tensor packed[4];
    for (int i = 0; i < 4; i++) {
        int l = KDA_BLOCKS[i];
        snprintf(names[i], sizeof names[i], "model.layers.%d.self_attn.conv1d.weight", l);
        keys[i] = names[i];
        packed[i] = (nnt_tensor){.dtype = NNT_F32, .ndim = 3, .shape = {3 * RS_P, 1, RS_W}, .data = c->conv[l]};
    }
    CU_ASSERT_EQUAL_FATAL(t_rewrite_weights(src, dst, respell, c, 4, keys, packed), 0);

    fixture f;
    open_fixture(&f, FP32);
    nnt_model *m = NULL;
    T_OK(f.rt, nnt_model_load(f.rt, dir, &m));
    nnt_trace *t = t_run_reference(f.rt, m, &f.r);
    CU_ASSERT_EQUAL(t_check_reference(&f.r, t), 5 + 5 * 6 + 4 * 9 + 8 + 3 + 4 * 7);
    nnt_trace_free(t);
    char *want = NULL, *got = NULL;
    CU_ASSERT_EQUAL(print_text(f.rt, f.m, "kimi_print_fp32.txt", &want), 0);
    CU_ASSERT_EQUAL(print_text(f.rt, m, "kimi_print_respelled.txt", &got), 0);
    CU_ASSERT(want && got && strlen(want) > 1000 && strcmp(want, got) == 0);
    free(want);
    free(got);
    nnt_model_free(m);
    close_fixture(&f);
    free(c);
}

int register_tests(void)
{
    CU_pSuite s = CU_add_suite("kimi_linear", NULL, NULL);
    if (!s) return -1;
    if (!CU_add_test(s, "fp32 fixture matches transformers on every value", test_fp32_values) ||
        !CU_add_test(s, "the release's layout and config spelling give the same values", test_hub_values) ||
        !CU_add_test(s, "packed convolutions, forget_gate.* and mlp.* spellings give the same values and tree",
                     test_other_spellings) ||
        !CU_add_test(s, "routed + shared == mlp_output; weights sum to the scaling factor", test_moe_identities) ||
        !CU_add_test(s, "the recurrence rebuilt from served values; state and states", test_recurrence_rebuilt) ||
        !CU_add_test(s, "left padding never reaches the convolution or the state", test_left_padding) ||
        !CU_add_test(s, "edits change the recurrence from the edited token on", test_edits_from_that_point) ||
        !CU_add_test(s, "support per block and the printout", test_support_and_printout) ||
        !CU_add_test(s, "expert ablation changes exactly the routed tokens", test_ablation) ||
        !CU_add_test(s, "bf16 weights: the default precision matches transformers' float32 run",
                     test_bf16_weights_values) ||
        !CU_add_test(s, "precision = bf16 is as close to transformers-bf16 as transformers-bf16 is to fp32",
                     test_bf16_precision) ||
        !CU_add_test(s, "weights = fp8 matches transformers on the same weights re-encoded by torch",
                     test_fp8_weights_values))
        return -1;
    return 0;
}
