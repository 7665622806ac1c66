/* test_natives.c - native module values ("layers.1.self_attn.q_proj.output") against what
 * transformers' modules receive and return: tests/fixtures/make_native_references.py ran the
 * fixture's prompts with a forward hook on every module (native_reference.safetensors). Every
 * module value in that file is either served by nnt and equal to it within T_TOL on the real
 * tokens (a value of its own, or the standard value the path names), or one of the modules the
 * test lists as not served, refused by name. Edits of a module's output and input equal the same
 * edits made with torch hooks. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "test_util.h"

static nnt_runtime *rt;

static int setup(void)
{
    return nnt_runtime_open(t_ini(), &rt) == NNT_OK ? 0 : -1;
}

static int teardown(void)
{
    nnt_runtime_close(rt);
    return 0;
}

/* The tensor names of a safetensors file (its JSON header's top-level keys but __metadata__),
 * into keys[]; returns how many, -1 when the file cannot be read. */
static int file_keys(const char *path, char (*keys)[160], int cap)
{
    FILE *f = fopen(path, "rb");
    if (!f) return -1;
    uint64_t len = 0;
    char *h = NULL;
    int n = -1;
    if (fread(&len, 8, 1, f) == 1 && len < (1u << 24) && (h = malloc(len + 1)) && fread(h, 1, len, f) == len) {
        h[len] = '\0';
        n = 0;
        int depth = 0;
        for (char *p = h; *p; p++) {
            if (*p == '{') depth++;
            if (*p == '}') depth--;
            if (*p != '"' || depth != 1) continue;
            char *end = strchr(p + 1, '"');
            if (!end) break;
            char *colon = end + 1;
            while (*colon == ' ') colon++;
            if (*colon == ':' && end - p - 1 < 160 && n < cap && strncmp(p + 1, "__metadata__", 12) != 0) {
                memcpy(keys[n], p + 1, (size_t)(end - p - 1));
                keys[n][end - p - 1] = '\0';
                n++;
            }
            p = end;
            if (*colon == ':') { /* skip the value */
                p = colon;
            }
        }
    }
    free(h);
    fclose(f);
    return n;
}

/* 1 when key names a module value nnt does not serve, by design (README, "Native module values"):
 * a rotary table (no module of nnt's tree: its frequencies are computed in the attention), the
 * routed experts' activation (run per expert on the rows routed to it: [routed rows,
 * intermediate] in torch's order of experts, no [batch seq ...] value), a shared expert's
 * activation output (no standard value holds it) and DeepSeek-V4's input of it (gate_proj's output
 * clamped at swiglu_limit), the final norm's input (the last block's layer_output, a value of a
 * block), and DeepSeek-V4's modules whose tensors nnt does not hold: the hyper-connections (their
 * weights are attention_post/comb and mlp_post/comb), the unweighted per-head query norm, the
 * compressors' and the indexer's norms and outputs (one entry per compress_rate tokens), the
 * indexer's scorer and the router's score function. */
static int not_served_by_design(const char *fixture, const char *key)
{
    static const char *const PARTS[] = {"rotary_emb.", ".experts.act_fn.", "shared_experts.act_fn.output", "attn_hc.",
                                        "ffn_hc.", ".q_b_norm.", "compressor.kv_norm.", "indexer.kv_norm.",
                                        "compressor.output", ".scorer.input", ".scorer.output", ".score_fn."};
    for (size_t i = 0; i < sizeof PARTS / sizeof PARTS[0]; i++)
        if (strstr(key, PARTS[i])) return 1;
    if (strstr(fixture, "deepseek_v4") && strstr(key, "shared_experts.act_fn.input")) return 1;
    return strcmp(key, "norm.input") == 0 || strncmp(key, "hc_head.", 8) == 0;
}

/* One fixture: every module value of its native_reference.safetensors served and equal to
 * transformers', or refused by design; n_served and n_refused as counted in the comments of
 * the table below. */
static void check_fixture(const char *fixture, int want_served, int want_refused, const char *edit_out,
                          const char *edit_in)
{
    static char keys[512][160];
    t_ref ref;
    char dir[512], file[600];
    snprintf(file, sizeof file, "%s/native_reference.safetensors", fixture);
    CU_ASSERT_FATAL(t_ref_open(&ref, rt, file) == 0);
    int n = file_keys(ref.path, keys, 512);
    CU_ASSERT_FATAL(n > 80);
    nnt_model *m = NULL;
    T_OK(rt, nnt_model_load(rt, t_fixture(fixture, dir, sizeof dir), &m));
    nnt_trace *t = NULL;
    T_OK(rt, nnt_trace_new(m, &t));
    static int saved[512];
    int n_saved = 0, n_refused = 0;
    for (int i = 0; i < n; i++) {
        saved[i] = 0;
        if (strchr(keys[i], ':') || strcmp(keys[i], "input_ids") == 0 || strcmp(keys[i], "attention_mask") == 0) continue;
        nnt_status st = nnt_trace_save(t, keys[i]);
        if (st == NNT_OK) {
            saved[i] = 1;
            n_saved++;
            if (not_served_by_design(fixture, keys[i])) fprintf(stderr, "\n  %s is served, but the test lists it as not\n", keys[i]);
            CU_ASSERT(!not_served_by_design(fixture, keys[i]));
            continue;
        }
        n_refused++;
        if (!not_served_by_design(fixture, keys[i])) fprintf(stderr, "\n  %s refused: %s\n", keys[i], nnt_last_error(rt));
        CU_ASSERT(not_served_by_design(fixture, keys[i]));
        CU_ASSERT(st == NNT_ERR_PATH || st == NNT_ERR_NOT_SERVED);
    }
    if (n_saved != want_served || n_refused != want_refused)
        fprintf(stderr, "\n  %s: %d module values served, %d refused\n", fixture, n_saved, n_refused);
    CU_ASSERT_EQUAL(n_saved, want_served);
    CU_ASSERT_EQUAL(n_refused, want_refused);
    T_OK(rt, nnt_trace_run(t, ref.ids, ref.mask, ref.batch, ref.seq));
    int compared = 0;
    for (int i = 0; i < n; i++) {
        if (!saved[i]) continue;
        const nnt_tensor *v = nnt_trace_get(t, keys[i]);
        nnt_tensor r;
        CU_ASSERT_FATAL(v != NULL && t_ref_get(&ref, keys[i], &r) == 0);
        /* torch flattens tokens before the router and the experts, and o_proj reads the heads
         * side by side: the same entries in the same order as nnt's value */
        CU_ASSERT_EQUAL(nnt_tensor_numel(&r), nnt_tensor_numel(v));
        if (nnt_tensor_numel(&r) == nnt_tensor_numel(v)) {
            r.ndim = v->ndim;
            memcpy(r.shape, v->shape, sizeof r.shape);
            unsigned char *sel = t_sel_tokens(&ref, v);
            double e = t_rel_err(v, &r, sel);
            if (!(e >= 0 && e <= T_TOL)) fprintf(stderr, "\n  %s: %.3g from transformers\n", keys[i], e);
            CU_ASSERT(e >= 0 && e <= T_TOL);
            free(sel);
            compared++;
        }
        nnt_tensor_free(&r);
    }
    CU_ASSERT_EQUAL(compared, n_saved);
    nnt_trace_free(t);

    /* edits: block 1's v_proj output times 0.5, block 0's k_proj input times 0, as torch hooks */
    (void)0;
    const char *const EDITS[][3] = {{edit_out, "0.5", "edited_output:logits"}, {edit_in, "0", "edited_input:logits"}};
    for (int k = 0; k < 2; k++) {
        T_OK(rt, nnt_trace_new(m, &t));
        T_OK(rt, nnt_trace_scale(t, EDITS[k][0], (float)atof(EDITS[k][1])));
        T_OK(rt, nnt_trace_save(t, "logits"));
        T_OK(rt, nnt_trace_run(t, ref.ids, ref.mask, ref.batch, ref.seq));
        nnt_tensor want, plain;
        CU_ASSERT_FATAL(t_ref_get(&ref, EDITS[k][2], &want) == 0);
        CU_ASSERT_FATAL(t_ref_get(&ref, "lm_head.output", &plain) == 0);
        const nnt_tensor *got = nnt_trace_get(t, "logits");
        CU_ASSERT_FATAL(got != NULL);
        unsigned char *sel = t_sel_tokens(&ref, got);
        double e = t_rel_err(got, &want, sel), moved = t_rel_err(&plain, &want, sel);
        if (!(e <= T_TOL)) fprintf(stderr, "\n  %s x %s: logits %.3g from transformers'\n", EDITS[k][0], EDITS[k][1], e);
        CU_ASSERT(e >= 0 && e <= T_TOL);
        CU_ASSERT(moved > 1e-3); /* the edit changed the logits */
        free(sel);
        nnt_tensor_free(&want);
        nnt_tensor_free(&plain);
        nnt_trace_free(t);
    }
    nnt_model_free(m);
}

/* the edits make_native_references.py makes (the file's metadata names them) */
#define V_PROJ_OUT "layers.1.self_attn.v_proj.output"
#define K_PROJ_IN "model.layers[0].self_attn.k_proj.input"

static void test_against_transformers(void)
{
    /* MiniMax-M2, 3 blocks: per block 30 module values served (q/k/v/o_proj, q/k_norm, the two
     * layernorms, self_attn, mlp, gate and experts: inputs and outputs; the block's own input and
     * output; the experts' gate_proj, up_proj and down_proj outputs and down_proj's input by
     * routing slot, 4), and lm_head's 2, norm's output, embed_tokens' output; refused: per block
     * the experts' act_fn (2), and rotary_emb's 2, norm's input. Every sparse block below adds the
     * experts' 4 values by slot likewise */
    check_fixture("minimax_m2/fp32", 3 * 30 + 4, 3 * 2 + 3, V_PROJ_OUT, K_PROJ_IN);
    /* MiMo-V2-Flash, 5 blocks: block 0 dense, all 26 of its module values (q/k/v/o_proj, the two
     * layernorms, self_attn, mlp, gate/up/down_proj and act_fn: inputs and outputs; the block's
     * input and output), blocks 1-4 sparse, 26 each (as MiniMax-M2's without q/k_norm); refused:
     * the experts' act_fn per sparse block, rotary_emb's 2, norm's input */
    check_fixture("mimo_v2_flash/fp32", 26 + 4 * 26 + 4, 4 * 2 + 3, V_PROJ_OUT, K_PROJ_IN);
    /* Kimi-Linear, 5 blocks: block 0 delta attention with a dense MLP, all 40; blocks 1, 2 and 4
     * delta attention with experts and a shared expert, 49 of 52, block 3 latent attention with
     * experts, 37 of 40 (not: the experts' act_fn, the shared expert's act_fn output); the model's
     * 4 (no rotary: the release has no position encoding); refused besides: norm's input */
    check_fixture("kimi_linear/fp32", 40 + 3 * 49 + 37 + 4, 3 * 3 + 3 + 1, V_PROJ_OUT, K_PROJ_IN);
    /* DeepSeek-V4 (prompts of reference_L13), 5 blocks: block 0 sliding, 40 of 56; blocks 1 and 3
     * compressed with the indexer, 54 of 81; blocks 2 and 4 compressed, 45 of 66 (refused: the
     * hyper-connections attn_hc and ffn_hc with their input norms, 8 a block, q_b_norm's 2, the
     * experts' and the shared expert's act_fn, 4, the router's score_fn, 2; a compressor's output,
     * norm and rotary, 5, and the indexer's norm, rotary and scorer, 6); the model's 4 and 7
     * refused (hc_head and its input norm, 4, rotary_emb's 2, norm's input). Its attention has
     * no v_proj and k_proj: the edits are on block 1's shared expert gate_proj output and block
     * 0's kv_proj input */
    check_fixture("deepseek_v4/fp32", 40 + 2 * 54 + 2 * 45 + 4, 16 + 2 * 27 + 2 * 21 + 7,
                  "layers.1.mlp.shared_experts.gate_proj.output", "layers.0.self_attn.kv_proj.input");
}

/* An edit of a module's input reaches that product alone: zeroing q_proj's input leaves k_proj's
 * and the attention's input as they were. Paths in any spelling name the same value. */
static void test_input_edit_is_local(void)
{
    nnt_model *m = t_model(rt, "minimax_m2/fp32");
    nnt_trace *t = NULL;
    static const int32_t IDS[] = {5, 9, 44, 7};
    T_OK(rt, nnt_trace_new(m, &t));
    T_OK(rt, nnt_trace_zero(t, "layers.1.self_attn.q_proj.input"));
    T_OK(rt, nnt_trace_save(t, "layers.1.self_attn.q_proj.output"));
    T_OK(rt, nnt_trace_save(t, "layers.1.self_attn.k_proj.input"));
    T_OK(rt, nnt_trace_save(t, "layers.1.attention_norm_output"));
    T_OK(rt, nnt_trace_save(t, "layers.1.block_sparse_moe.gate.output"));
    T_OK(rt, nnt_trace_run(t, IDS, NULL, 1, 4));
    const nnt_tensor *q = nnt_trace_get(t, "layers.1.self_attn.q_proj.output");
    const nnt_tensor *kin = nnt_trace_get(t, "layers.1.self_attn.k_proj.input");
    const nnt_tensor *xn = nnt_trace_get(t, "layers.1.self_attn.input"); /* = attention_norm_output */
    CU_ASSERT_FATAL(q && kin && xn);
    double qmax = 0;
    for (int64_t i = 0; i < nnt_tensor_numel(q); i++) qmax = fmax(qmax, fabs(((const float *)q->data)[i]));
    CU_ASSERT(qmax == 0.0);
    CU_ASSERT(t_rel_err(kin, xn, NULL) == 0.0);
    CU_ASSERT(nnt_trace_get(t, "layers.1.mlp.router.output") == nnt_trace_get(t, "layers.1.mlp.router_logits"));
    T_FAILS(rt, nnt_trace_save(t, "layers.1.self_attn.q_prj.output"), NNT_ERR_PATH, "did you mean 'self_attn.q_proj'");
    /* the router's input is mlp_input, which the experts read too: no edit through it;
     * self_attn's input is attention_norm_output, which only self_attn reads: an edit of it */
    T_FAILS(rt, nnt_trace_scale(t, "layers.0.mlp.gate.input", 2.0f), NNT_ERR_READ_ONLY,
            "mlp.router's input is layers.0.mlp_input, which other modules read too");
    T_OK(rt, nnt_trace_scale(t, "layers.0.self_attn.input", 2.0f));
    T_FAILS(rt, nnt_trace_save(t, "layers.7.self_attn.q_proj.output"), NNT_ERR_INDEX, "block 7 is out of range");
    nnt_trace_free(t);
    /* the experts' values by routing slot: expert_outputs is down_proj's output times the slot's
     * weight, and zeroing down_proj's output zeroes the routed output */
    T_OK(rt, nnt_trace_new(m, &t));
    T_OK(rt, nnt_trace_save(t, "layers.1.mlp.experts.down_proj.output"));
    T_OK(rt, nnt_trace_save(t, "layers.1.mlp.expert_outputs"));
    T_OK(rt, nnt_trace_save(t, "layers.1.mlp.expert_weights"));
    T_OK(rt, nnt_trace_run(t, IDS, NULL, 1, 4));
    const nnt_tensor *y = nnt_trace_get(t, "layers.1.mlp.experts.down_proj.output");
    const nnt_tensor *yo = nnt_trace_get(t, "layers.1.mlp.expert_outputs");
    const nnt_tensor *wk = nnt_trace_get(t, "layers.1.mlp.expert_weights");
    CU_ASSERT_FATAL(y && yo && wk && y->ndim == 4 && nnt_tensor_numel(y) == nnt_tensor_numel(yo));
    int64_t Hd = y->shape[3];
    double off = 0, rmax = 0;
    for (int64_t i = 0; i < nnt_tensor_numel(y); i++)
        off = fmax(off, fabs(((const float *)yo->data)[i] - ((const float *)wk->data)[i / Hd] * ((const float *)y->data)[i]));
    CU_ASSERT(off < 1e-6);
    nnt_trace_free(t);
    T_OK(rt, nnt_trace_new(m, &t));
    T_OK(rt, nnt_trace_zero(t, "layers.1.mlp.experts.down_proj.output"));
    T_OK(rt, nnt_trace_save(t, "layers.1.mlp.routed_output"));
    T_OK(rt, nnt_trace_run(t, IDS, NULL, 1, 4));
    const nnt_tensor *ro = nnt_trace_get(t, "layers.1.mlp.routed_output");
    CU_ASSERT_FATAL(ro != NULL);
    for (int64_t i = 0; i < nnt_tensor_numel(ro); i++) rmax = fmax(rmax, fabs(((const float *)ro->data)[i]));
    CU_ASSERT(rmax == 0.0);
    nnt_trace_free(t);
    /* one expert taken out by its slots: down_proj.output zeroed where expert_indices == e equals
     * expert_weights zeroed there (--ablate-expert), on the routed output */
    int32_t expert = -1;
    const nnt_tensor *slots_of = NULL, *by_weight = NULL, *by_output = NULL;
    nnt_trace *tw = NULL, *to = NULL, *ti = NULL;
    T_OK(rt, nnt_trace_new(m, &ti));
    T_OK(rt, nnt_trace_save(ti, "layers.1.mlp.expert_indices"));
    T_OK(rt, nnt_trace_run(ti, IDS, NULL, 1, 4));
    CU_ASSERT_FATAL((slots_of = nnt_trace_get(ti, "layers.1.mlp.expert_indices")) != NULL);
    expert = ((const int32_t *)slots_of->data)[0];
    T_OK(rt, nnt_trace_new(m, &tw));
    T_OK(rt, nnt_trace_masked_fill(tw, "layers.1.mlp.expert_weights", "layers.1.mlp.expert_indices", expert, 0.0f));
    T_OK(rt, nnt_trace_save(tw, "layers.1.mlp.routed_output"));
    T_OK(rt, nnt_trace_run(tw, IDS, NULL, 1, 4));
    T_OK(rt, nnt_trace_new(m, &to));
    T_OK(rt, nnt_trace_masked_fill(to, "layers.1.mlp.experts.down_proj.output", "layers.1.mlp.expert_indices", expert,
                                   0.0f));
    T_OK(rt, nnt_trace_save(to, "layers.1.mlp.routed_output"));
    T_OK(rt, nnt_trace_run(to, IDS, NULL, 1, 4));
    by_weight = nnt_trace_get(tw, "layers.1.mlp.routed_output");
    by_output = nnt_trace_get(to, "layers.1.mlp.routed_output");
    CU_ASSERT_FATAL(by_weight && by_output);
    CU_ASSERT(t_rel_err(by_output, by_weight, NULL) < 1e-6);
    nnt_trace_free(ti);
    nnt_trace_free(tw);
    nnt_trace_free(to);
    /* the norm's input is a value of its own: scaling it by 3 leaves the norm's output (RMSNorm is
     * scale-free but for eps) and the residual stream (layer_mid - attention_output) unchanged */
    T_OK(rt, nnt_trace_new(m, &t));
    T_OK(rt, nnt_trace_save(t, "layers.1.layer_input"));
    T_OK(rt, nnt_trace_scale(t, "layers.1.input_layernorm.input", 3.0f));
    T_OK(rt, nnt_trace_save(t, "layers.1.input_layernorm.input"));
    T_OK(rt, nnt_trace_run(t, IDS, NULL, 1, 4));
    const nnt_tensor *x0 = nnt_trace_get(t, "layers.1.layer_input"), *x3 = nnt_trace_get(t, "layers.1.input_layernorm.input");
    CU_ASSERT_FATAL(x0 && x3);
    double worst = 0;
    for (int64_t i = 0; i < nnt_tensor_numel(x0); i++)
        worst = fmax(worst, fabs(((const float *)x3->data)[i] - 3.0 * ((const float *)x0->data)[i]));
    CU_ASSERT(worst < 1e-5);
    nnt_trace_free(t);
    nnt_model_free(m);
}

int register_tests(void)
{
    CU_pSuite s = CU_add_suite("natives", setup, teardown);
    if (!s) return -1;
    if (!CU_add_test(s, "every module's input and output against transformers' hooks", test_against_transformers) ||
        !CU_add_test(s, "an input edit reaches its module alone; spellings", test_input_edit_is_local))
        return -1;
    return 0;
}
