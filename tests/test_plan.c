/* test_plan.c - pipeline plans (nnt_plan_*): per-block weight bytes against an independent
 * count of the fixtures' safetensors headers (fixtures/plan/expected_weights.tsv, written by
 * make_plan_expected.py with Python's json module), the split against brute force, caches and
 * config-computed weights (the families' cost models, through the build runtime) against hand
 * computations on the released configurations, the out-of-tree Qwen3-MoE family planned from
 * its own descriptor, plans without a cost model (no runtime, no family, a family without
 * `costs`), and the errors. */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "test_util.h"

/* The build runtime: its families' cost models plan the released configurations. */
static nnt_runtime *g_rt;

static int open_runtime(void)
{
    return nnt_runtime_open(t_ini(), &g_rt) == NNT_OK ? 0 : -1;
}

static int close_runtime(void)
{
    nnt_runtime_close(g_rt);
    g_rt = NULL;
    return 0;
}

static nnt_plan *plan_of(const char *rel, int ranks, int64_t context, int64_t batch, int from_config)
{
    char dir[600];
    t_fixture(rel, dir, sizeof dir);
    nnt_plan_opts o = {.ranks = ranks, .device = NNT_PLAN_CPU, .memory_bytes = 256000000000ULL, .context = context,
                       .batch = batch, .from_config = from_config, .runtime = g_rt};
    nnt_plan *p = NULL;
    nnt_error err = {0};
    nnt_status st = nnt_plan_new(dir, &o, &p, &err);
    if (st != NNT_OK) fprintf(stderr, "%s: %s\n", rel, err.msg);
    CU_ASSERT_EQUAL_FATAL(st, NNT_OK);
    return p;
}

/* Every stage non-empty, contiguous, in order, covering every block once. */
static void check_cover(const nnt_plan *p)
{
    nnt_plan_summary s;
    nnt_plan_get_summary(p, &s);
    nnt_plan_stage st;
    int next = 0;
    for (int r = 0; r < s.ranks; r++) {
        CU_ASSERT_FATAL(nnt_plan_get_stage(p, r, &st));
        CU_ASSERT_EQUAL(st.first_block, next);
        CU_ASSERT(st.n_blocks >= 1);
        next = st.first_block + st.n_blocks;
    }
    CU_ASSERT_EQUAL(next, s.n_blocks);
    CU_ASSERT_FALSE(nnt_plan_get_stage(p, s.ranks, &st));
}

static void test_weights_from_headers(void)
{
    char path[600];
    t_fixture("plan/expected_weights.tsv", path, sizeof path);
    FILE *f = fopen(path, "r");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    char line[512], cur[128] = "";
    nnt_plan *p = NULL;
    nnt_plan_summary s = {0};
    int rows = 0, plans = 0;
    while (fgets(line, sizeof line, f)) {
        if (line[0] == '#') continue;
        char fx[128], kind[16];
        int index;
        unsigned long long want;
        CU_ASSERT_EQUAL_FATAL(sscanf(line, "%127s %15s %d %llu", fx, kind, &index, &want), 4);
        if (strcmp(fx, cur) != 0) {
            nnt_plan_free(p);
            p = plan_of(fx, 1, 16, 1, 0);
            nnt_plan_get_summary(p, &s);
            CU_ASSERT_EQUAL(s.exact, 1);
            snprintf(cur, sizeof cur, "%s", fx);
            plans++;
        }
        uint64_t got = 0;
        if (strcmp(kind, "block") == 0) {
            CU_ASSERT_FATAL(nnt_plan_block(p, index, &got, NULL));
        } else if (strcmp(kind, "first") == 0)
            got = s.first_bytes;
        else if (strcmp(kind, "last") == 0)
            got = s.last_bytes;
        else
            got = s.unused_bytes;
        if (got != want) fprintf(stderr, "%s %s %d: nnt %" PRIu64 ", headers %llu\n", fx, kind, index, got, want);
        CU_ASSERT_EQUAL(got, want);
        rows++;
    }
    fclose(f);
    nnt_plan_free(p);
    CU_ASSERT(plans >= 13);
    CU_ASSERT(rows > 60);
}

/* The smallest largest-stage cost over every split of n blocks into r non-empty contiguous
 * stages, by enumeration. */
static uint64_t brute(const uint64_t *b, int n, uint64_t first, uint64_t last, int r, int start)
{
    if (r == 1) {
        uint64_t c = start == 0 ? first : 0;
        for (int i = start; i < n; i++) c += b[i];
        return c + last;
    }
    uint64_t best = UINT64_MAX;
    for (int end = start + 1; end <= n - (r - 1); end++) {
        uint64_t c = start == 0 ? first : 0;
        for (int i = start; i < end; i++) c += b[i];
        uint64_t rest = brute(b, n, first, last, r - 1, end);
        uint64_t m = c > rest ? c : rest;
        if (m < best) best = m;
    }
    return best;
}

static void test_split_optimal(void)
{
    uint64_t seed = 12345;
    int cases = 0;
    for (int n = 1; n <= 9; n++)
        for (int trial = 0; trial < 40; trial++) {
            uint64_t b[9], first, last;
            for (int i = 0; i < n; i++) {
                seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
                b[i] = (seed >> 33) % (trial % 2 ? 1000 : 10); /* small ranges give ties and zeros */
            }
            seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
            first = (seed >> 33) % 500;
            last = (seed >> 40) % 500;
            for (int r = 1; r <= n; r++) {
                int fb[10];
                uint64_t largest = 0;
                CU_ASSERT_EQUAL_FATAL(nnt_plan_split(b, n, first, last, r, fb, &largest), NNT_OK);
                CU_ASSERT_EQUAL(fb[0], 0);
                CU_ASSERT_EQUAL(fb[r], n);
                uint64_t m = 0;
                for (int s = 0; s < r; s++) {
                    CU_ASSERT(fb[s + 1] > fb[s]);
                    uint64_t c = (s == 0 ? first : 0) + (s == r - 1 ? last : 0);
                    for (int i = fb[s]; i < fb[s + 1]; i++) c += b[i];
                    if (c > m) m = c;
                }
                CU_ASSERT_EQUAL(m, largest);
                CU_ASSERT_EQUAL(largest, brute(b, n, first, last, r, 0));
                cases++;
            }
        }
    CU_ASSERT(cases > 1000);
    /* above the dynamic programming's size: 5000 equal blocks over 10 ranks, 500 blocks each at
     * most, the extras included (7 on the first stage, 3 on the last) */
    static uint64_t many[5000];
    static int fbm[11];
    for (int i = 0; i < 5000; i++) many[i] = 10;
    uint64_t big = 0;
    CU_ASSERT_EQUAL_FATAL(nnt_plan_split(many, 5000, 7, 3, 10, fbm, &big), NNT_OK);
    CU_ASSERT_EQUAL(big, 500 * 10 + 7);
    CU_ASSERT_EQUAL(fbm[0], 0);
    CU_ASSERT_EQUAL(fbm[10], 5000);
    for (int r = 0; r < 10; r++) CU_ASSERT(fbm[r + 1] > fbm[r] && fbm[r + 1] - fbm[r] <= 500);
    uint64_t b[3] = {1, 2, 3};
    int fb[5];
    CU_ASSERT_EQUAL(nnt_plan_split(b, 3, 0, 0, 4, fb, NULL), NNT_ERR_INVALID_ARGUMENT);
    CU_ASSERT_EQUAL(nnt_plan_split(b, 3, 0, 0, 0, fb, NULL), NNT_ERR_INVALID_ARGUMENT);
    CU_ASSERT_EQUAL(nnt_plan_split(NULL, 3, 0, 0, 1, fb, NULL), NNT_ERR_INVALID_ARGUMENT);
}

static void test_fixture_splits(void)
{
    static const char *const fx[] = {"minimax_m2/fp8", "mimo_v2_flash/fp8", "kimi_linear/hub", "deepseek_v4/native",
                                     "minimax_m2/bf16"};
    for (size_t i = 0; i < sizeof fx / sizeof *fx; i++)
        for (int r = 1; r <= 3; r++) {
            nnt_plan *p = plan_of(fx[i], r, 64, 1, 0);
            check_cover(p);
            nnt_plan_summary s;
            nnt_plan_get_summary(p, &s);
            uint64_t b[64];
            for (int k = 0; k < s.n_blocks; k++) nnt_plan_block(p, k, &b[k], NULL);
            CU_ASSERT_EQUAL(s.largest_stage, brute(b, s.n_blocks, s.first_bytes, s.last_bytes, r, 0));
            nnt_plan_free(p);
        }
}

static uint64_t block_cache(const nnt_plan *p, int b)
{
    uint64_t c = 0;
    CU_ASSERT(nnt_plan_block(p, b, NULL, &c));
    return c;
}

static uint64_t block_weight(const nnt_plan *p, int b)
{
    uint64_t w = 0;
    CU_ASSERT(nnt_plan_block(p, b, &w, NULL));
    return w;
}

/* Caches of a session of T tokens x B rows, by hand from the released config.json files
 * (float32, 4 bytes an element). */
static void test_caches_by_hand(void)
{
    /* MiMo-V2-Flash, T = 4096, B = 2. Block 0 is full attention: 4 kv heads, keys of 192 and
     * values of 128 per head, every token. Block 1 slides: 8 kv heads, 192 + 128, and keeps
     * sliding_window_size (128) + 1 - 1 = 128 tokens whatever T. */
    nnt_plan *p = plan_of("released_configs/mimo_v2_flash", 2, 4096, 2, 0);
    CU_ASSERT_EQUAL(block_cache(p, 0), 2ULL * 4 * (192 + 128) * 4096 * 4);
    CU_ASSERT_EQUAL(block_cache(p, 1), 2ULL * 8 * (192 + 128) * 128 * 4);
    CU_ASSERT_EQUAL(block_cache(p, 5), 2ULL * 4 * (192 + 128) * 4096 * 4); /* hybrid_layer_pattern[5] = 0 */
    nnt_plan_free(p);
    p = plan_of("released_configs/mimo_v2_flash", 2, 100000, 2, 0); /* the window bounds a sliding block */
    CU_ASSERT_EQUAL(block_cache(p, 1), 2ULL * 8 * (192 + 128) * 128 * 4);
    nnt_plan_free(p);

    /* Kimi-Linear, T = 4096, B = 1. Block 0 is a delta-attention block: 32 heads of 128, a
     * recurrent state 32 x 128 x 128 and three convolution states of kernel 4 - 1 = 3 steps of
     * 32 x 128 channels. Block 3 (full_attn_layers counts from 1: 4) is latent attention,
     * cached as 32 heads of keys 128 + 64 and values 128. */
    p = plan_of("released_configs/kimi_linear", 1, 4096, 1, 0);
    CU_ASSERT_EQUAL(block_cache(p, 0), (32ULL * 128 * 128 + 3ULL * 3 * 32 * 128) * 4);
    CU_ASSERT_EQUAL(block_cache(p, 3), 32ULL * (128 + 64 + 128) * 4096 * 4);
    nnt_plan_free(p);

    /* DeepSeek-V4, T = 4096, B = 1: every block keeps window 128 - 1 tokens of one 512-wide
     * key and value; block 2 (rate 4) adds key/value and gate compressor rows of 2 x 512 per
     * token and the indexer's of 2 x 128; block 3 (rate 128) rows of 512. */
    p = plan_of("released_configs/deepseek_v4", 1, 4096, 1, 0);
    uint64_t win = 127ULL * (512 + 512) * 4;
    CU_ASSERT_EQUAL(block_cache(p, 0), win);
    CU_ASSERT_EQUAL(block_cache(p, 2), win + 2ULL * 4096 * 2 * 512 * 4 + 2ULL * 4096 * 2 * 128 * 4);
    CU_ASSERT_EQUAL(block_cache(p, 3), win + 2ULL * 4096 * 512 * 4);
    nnt_plan_free(p);

    /* MiniMax-M2, T = 1000, B = 3: 8 kv heads of 128, keys and values. */
    p = plan_of("released_configs/minimax_m2", 1, 1000, 3, 0);
    CU_ASSERT_EQUAL(block_cache(p, 7), 3ULL * 8 * (128 + 128) * 1000 * 4);
    nnt_plan_free(p);
}

/* One MiniMax-M2 block from the released config.json (FP8 e4m3, float32 scales per 128 x 128,
 * hidden 3072, 48 heads and 8 kv heads of 128, 256 experts of width 1536), by hand. */
static void test_config_weights_by_hand(void)
{
    nnt_plan *p = plan_of("released_configs/minimax_m2", 4, 16, 1, 0);
    nnt_plan_summary s;
    nnt_plan_get_summary(p, &s);
    CU_ASSERT_EQUAL(s.exact, 0);
    CU_ASSERT_EQUAL(s.n_blocks, 62);
    uint64_t q = 6144ULL * 3072 + 48 * 24 * 4;    /* q_proj [6144, 3072], 48 x 24 scales */
    uint64_t o = 3072ULL * 6144 + 24 * 48 * 4;    /* o_proj */
    uint64_t kv = 1024ULL * 3072 + 8 * 24 * 4;    /* k_proj, v_proj [1024, 3072] */
    uint64_t norms = (6144 + 1024) * 2 + 2 * 3072 * 2; /* q_norm, k_norm, two layer norms, bf16 */
    uint64_t router = 256ULL * 3072 * 4 + 256 * 4; /* gate and its bias, float32 */
    uint64_t expert = 3 * (1536ULL * 3072 + 12 * 24 * 4);
    CU_ASSERT_EQUAL(block_weight(p, 0), q + o + 2 * kv + norms + router + 256 * expert);
    CU_ASSERT_EQUAL(s.first_bytes, 200064ULL * 3072 * 2); /* embedding, bf16 */
    CU_ASSERT_EQUAL(s.last_bytes, 200064ULL * 3072 * 2 + 3072 * 2);
    check_cover(p);
    nnt_plan_free(p);
    /* DeepSeek-V4 with FP4 experts: one expert matrix [2048, 4096] is 2048 x 4096 / 2 bytes
     * plus 2048 x 128 E8M0 scales; the plan with FP8/FP4 is smaller than the BF16 one */
    nnt_plan *a = plan_of("released_configs/deepseek_v4", 1, 16, 1, 0);
    nnt_plan *b = plan_of("released_configs/deepseek_v4_fp8_fp4", 1, 16, 1, 0);
    uint64_t bf16 = 3ULL * 2048 * 4096 * 2, fp4 = 3ULL * (2048 * 4096 / 2 + 2048 * 128);
    uint64_t wa = block_weight(a, 5), wb = block_weight(b, 5);
    CU_ASSERT(wa - wb > 256 * (bf16 - fp4)); /* the experts' saving, and the FP8 attention's on top */
    CU_ASSERT(wa - wb < 256 * (bf16 - fp4) + 200000000ULL);
    nnt_plan_free(a);
    nnt_plan_free(b);
}

/* The bytes computed from config.json alone against the headers' on the fixtures, which store
 * their tensors as the releases do (FP8 with 128 x 128 float32 scales and BF16 o_proj on
 * MiMo-V2-Flash, FP8/FP4 with E8M0 scales on DeepSeek-V4, ...): equal where a fixture keeps
 * every small tensor in the checkpoint's dtype, within 1% where it keeps some (norms, routers)
 * in float32. */
static void test_config_against_headers(void)
{
    static const struct { const char *fx; double tol; } cases[] = {
        {"minimax_m2/fp8", 0}, {"mimo_v2_flash/fp8", 0}, {"mimo_v2_flash/bf16", 0}, {"kimi_linear/hub", 0},
        {"kimi_linear/fp32", 0}, {"deepseek_v4/native", 0}, {"deepseek_v4/fp32", 0},
        {"minimax_m2/bf16", 0.01}, {"kimi_linear/bf16", 0.01}, {"deepseek_v4/bf16", 0.01},
        {"mimo_v2_flash/fp8_per_head", 0.01}};
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        nnt_plan *h = plan_of(cases[i].fx, 1, 16, 1, 0), *c = plan_of(cases[i].fx, 1, 16, 1, 1);
        nnt_plan_summary hs, cs;
        nnt_plan_get_summary(h, &hs);
        nnt_plan_get_summary(c, &cs);
        CU_ASSERT_EQUAL(hs.exact, 1);
        CU_ASSERT_EQUAL(cs.exact, 0);
        CU_ASSERT_EQUAL(hs.first_bytes, cs.first_bytes);
        for (int b = 0; b < hs.n_blocks; b++) {
            double x = (double)block_weight(h, b), y = (double)block_weight(c, b);
            int ok = cases[i].tol == 0 ? x == y : (y - x) / x <= cases[i].tol && (x - y) / x <= cases[i].tol;
            if (!ok) fprintf(stderr, "%s block %d: headers %.0f, config.json %.0f\n", cases[i].fx, b, x, y);
            CU_ASSERT(ok);
        }
        nnt_plan_free(h);
        nnt_plan_free(c);
    }
}

/* A folder with config.json and the index but no shards: weights from config.json, the
 * index's total_size reported; it equals the headers' count of every tensor. */
static void test_index_without_shards(void)
{
    char dir[600], from[600], to[700];
    snprintf(dir, sizeof dir, "%s/plan_index_only", t_tmpdir());
    mkdir(dir, 0755);
    const char *files[] = {"config.json", "model.safetensors.index.json"};
    for (int i = 0; i < 2; i++) {
        char rel[128];
        snprintf(rel, sizeof rel, "minimax_m2/bf16/%s", files[i]);
        snprintf(to, sizeof to, "%s/%s", dir, files[i]);
        CU_ASSERT_EQUAL_FATAL(t_copy_file(t_fixture(rel, from, sizeof from), to), 0);
    }
    nnt_plan_opts o = {.ranks = 2, .context = 8, .batch = 1, .runtime = g_rt};
    nnt_plan *p = NULL;
    nnt_error err = {0};
    CU_ASSERT_EQUAL_FATAL(nnt_plan_new(dir, &o, &p, &err), NNT_OK);
    nnt_plan_summary s;
    nnt_plan_get_summary(p, &s);
    CU_ASSERT_EQUAL(s.exact, 0);
    nnt_plan *h = plan_of("minimax_m2/bf16", 2, 8, 1, 0);
    nnt_plan_summary hs;
    nnt_plan_get_summary(h, &hs);
    uint64_t all = hs.first_bytes + hs.last_bytes + hs.unused_bytes;
    for (int b = 0; b < hs.n_blocks; b++) all += block_weight(h, b);
    CU_ASSERT_EQUAL(s.index_total_bytes, all);
    CU_ASSERT_EQUAL(hs.exact, 1);
    CU_ASSERT(s.memory_bytes > 0); /* the machine's memory */
    char out[700];
    snprintf(out, sizeof out, "%s/plan.txt", t_tmpdir());
    FILE *f = fopen(out, "w");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    CU_ASSERT_EQUAL(nnt_plan_print(p, dir, f), NNT_OK);
    fclose(f);
    char *text = NULL;
    CU_ASSERT_EQUAL_FATAL(nnt_read_file(out, 1 << 20, &text, NULL, NULL), NNT_OK);
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "(the index's shards are not all present)"));
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "the index's total_size: 660.53 kB")); /* metadata.total_size 660528 */
    free(text);
    nnt_plan_free(h);
    nnt_plan_free(p);
}

static void expect_error_with(nnt_runtime *rt, const char *dir, int ranks, int64_t batch, int from_config,
                              nnt_status want, const char *msg)
{
    nnt_plan_opts o = {.ranks = ranks, .context = 8, .batch = batch, .from_config = from_config, .runtime = rt};
    nnt_plan *p = (nnt_plan *)&o; /* must be reset to NULL */
    nnt_error err = {0};
    CU_ASSERT_EQUAL(nnt_plan_new(dir, &o, &p, &err), want);
    CU_ASSERT_PTR_NULL(p);
    if (!strstr(err.msg, msg)) fprintf(stderr, "message '%s' lacks '%s'\n", err.msg, msg);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, msg));
}

static void expect_error(const char *dir, int ranks, int64_t batch, nnt_status want, const char *msg)
{
    expect_error_with(g_rt, dir, ranks, batch, 0, want, msg);
}

static void test_errors(void)
{
    char dir[600], tmp[600];
    expect_error(t_fixture("kimi_linear/hub", dir, sizeof dir), 6, 1, NNT_ERR_INVALID_ARGUMENT,
                 "6 ranks for 5 blocks");
    expect_error(dir, 0, 1, NNT_ERR_INVALID_ARGUMENT, "ranks is 0; expected 1 or more");
    expect_error(dir, 1, 0, NNT_ERR_INVALID_ARGUMENT, "batch is 0");
    snprintf(tmp, sizeof tmp, "%s/plan_empty", t_tmpdir());
    mkdir(tmp, 0755);
    expect_error(tmp, 1, 1, NNT_ERR_IO, "plan_empty/config.json: cannot open");
    snprintf(tmp, sizeof tmp, "%s/plan_bad", t_tmpdir());
    mkdir(tmp, 0755);
    char cfg[700];
    snprintf(cfg, sizeof cfg, "%s/config.json", tmp);
    CU_ASSERT_EQUAL_FATAL(t_write_file(cfg, "{\"architectures\": [\"MiniMaxM2ForCausalLM\"], \"num_hidden_layers\": 2}"), 0);
    expect_error(tmp, 1, 1, NNT_ERR_CONFIG, "hidden_size"); /* the MiniMax-M2 family's cost model */
    /* without a runtime the same folder has neither shards nor a cost model */
    expect_error_with(NULL, tmp, 1, 1, 0, NNT_ERR_UNSUPPORTED, "plan_bad: no safetensors files");
    expect_error_with(NULL, tmp, 1, 1, 0, NNT_ERR_UNSUPPORTED, "no runtime was given");
    /* the weights asked from config.json need a cost model even where the headers are */
    expect_error_with(NULL, t_fixture("minimax_m2/bf16", dir, sizeof dir), 1, 1, 1, NNT_ERR_UNSUPPORTED,
                      "the weights were asked from config.json (from_config), but no runtime was given");
    nnt_plan *p = NULL;
    CU_ASSERT_EQUAL(nnt_plan_new(NULL, NULL, &p, NULL), NNT_ERR_INVALID_ARGUMENT);
}

/* A runtime of the build's families and kernels plus the test plugin `name` (build/tests/
 * plugins-ok/NAME.so) by a file = line, written as <scratch>/<ini>. */
static nnt_runtime *runtime_with(const char *name, const char *ini)
{
    char path[700], text[2048];
    snprintf(path, sizeof path, "%s/%s", t_tmpdir(), ini);
    snprintf(text, sizeof text, "[plugins]\ndir = %s/families\ndir = %s/kernels\nfile = %s-ok/%s.so\n", NNT_TEST_BUILD_DIR,
             NNT_TEST_BUILD_DIR, NNT_TEST_PLUGIN_DIR, name);
    CU_ASSERT_EQUAL_FATAL(t_write_file(path, text), 0);
    nnt_runtime *rt = NULL;
    nnt_status st = nnt_runtime_open(path, &rt);
    if (st != NNT_OK) fprintf(stderr, "%s: %s\n", path, nnt_last_error(rt));
    CU_ASSERT_EQUAL_FATAL(st, NNT_OK);
    return rt;
}

static nnt_plan *plan_with(nnt_runtime *rt, const char *dir, int ranks, int64_t context, int64_t batch, int from_config)
{
    nnt_plan_opts o = {.ranks = ranks, .memory_bytes = 256000000000ULL, .context = context, .batch = batch,
                       .from_config = from_config, .runtime = rt};
    nnt_plan *p = NULL;
    nnt_error err = {0};
    nnt_status st = nnt_plan_new(dir, &o, &p, &err);
    if (st != NNT_OK) fprintf(stderr, "%s: %s\n", dir, err.msg);
    CU_ASSERT_EQUAL_FATAL(st, NNT_OK);
    return p;
}

/* What nnt_plan_print writes, in a buffer the caller frees. */
static char *printed(const nnt_plan *p, const char *dir)
{
    char out[700];
    snprintf(out, sizeof out, "%s/plan_printed.txt", t_tmpdir());
    FILE *f = fopen(out, "w");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    CU_ASSERT_EQUAL(nnt_plan_print(p, dir, f), NNT_OK);
    fclose(f);
    char *text = NULL;
    CU_ASSERT_EQUAL_FATAL(nnt_read_file(out, 1 << 20, &text, NULL, NULL), NNT_OK);
    return text;
}

/* Qwen3-MoE (examples/third_party_family/qwen3_moe.c, loaded by file =) plans its folder from
 * its own descriptor's cost model. By hand from tests/fixtures/qwen3_moe/config.json (dtype
 * float32: 4 bytes an element; hidden 48, 4 query heads and 2 key/value heads of head_dim 16,
 * 8 experts of moe_intermediate_size 16, vocab 128, 2 blocks, untied):
 *   q_proj [64, 48] 3072, k_proj and v_proj [32, 48] 1536 each, o_proj [48, 64] 3072,
 *   q_norm and k_norm [16] each 32, two layer norms [48] 96, router [8, 48] 384,
 *   experts 8 x 3 x 16 x 48 = 18432: 28160 elements, 112640 bytes a block;
 *   embedding [128, 48] 24576 bytes; final norm 192 and lm_head 24576: 24768 bytes;
 *   caches of T = 10 tokens x B = 3 rows: 3 x 2 heads x (16 + 16) x 10 x 4 = 7680 bytes a block.
 * The fixture's headers (every tensor F32) give the same weights. */
static void test_qwen3_moe_costs(void)
{
    char dir[600];
    t_fixture("qwen3_moe", dir, sizeof dir);
    nnt_runtime *rt = runtime_with("qwen3_moe", "plan_qwen3.ini");
    for (int from_config = 1; from_config >= 0; from_config--) {
        nnt_plan *p = plan_with(rt, dir, 2, 10, 3, from_config);
        nnt_plan_summary s;
        nnt_plan_get_summary(p, &s);
        CU_ASSERT_EQUAL(s.exact, !from_config);
        CU_ASSERT_EQUAL(s.caches_known, 1);
        CU_ASSERT_STRING_EQUAL(s.costs_from, "family");
        CU_ASSERT_PTR_NOT_NULL_FATAL(s.family);
        CU_ASSERT_STRING_EQUAL(s.family, "qwen3_moe");
        CU_ASSERT_EQUAL(s.n_blocks, 2);
        for (int b = 0; b < 2; b++) {
            CU_ASSERT_EQUAL(block_weight(p, b), 112640);
            CU_ASSERT_EQUAL(block_cache(p, b), 7680);
        }
        CU_ASSERT_EQUAL(s.first_bytes, 24576);
        CU_ASSERT_EQUAL(s.last_bytes, 24768);
        check_cover(p);
        nnt_plan_stage st;
        CU_ASSERT_FATAL(nnt_plan_get_stage(p, 1, &st));
        CU_ASSERT_EQUAL(st.first_block, 1);
        CU_ASSERT_EQUAL(st.weight_bytes, 112640 + 24768);
        CU_ASSERT_EQUAL(st.cache_bytes, 7680);
        char *text = printed(p, dir);
        CU_ASSERT_PTR_NOT_NULL(strstr(text, "caches: 10 tokens x 3 rows, float32: 15.36 kB in all (the qwen3_moe family's cost model)"));
        free(text);
        nnt_plan_free(p);
    }
    nnt_runtime_close(rt);
}

/* Without a cost model the weights come from the headers and the caches are not known: no
 * runtime; a runtime where no family serves the architecture (the build runtime and Qwen3-MoE);
 * a family whose descriptor ends before `costs` (old_minor, an older minor's), on a folder whose
 * model.safetensors is the MiniMax-M2 fp32 fixture's (its bytes from expected_weights.tsv).
 * Without the shards as well, the plan is an error naming the folder and what is missing. */
static void headers_only(const nnt_plan *p, const char *dir, const char *why)
{
    nnt_plan_summary s;
    nnt_plan_get_summary(p, &s);
    CU_ASSERT_EQUAL(s.exact, 1);
    CU_ASSERT_EQUAL(s.caches_known, 0);
    CU_ASSERT_STRING_EQUAL(s.costs_from, "headers");
    for (int b = 0; b < s.n_blocks; b++) CU_ASSERT_EQUAL(block_cache(p, b), 0);
    char *text = printed(p, dir);
    char want[300];
    snprintf(want, sizeof want, "caches: not known - %s", why);
    if (!strstr(text, want)) fprintf(stderr, "printout lacks '%s':\n%s", want, text);
    CU_ASSERT_PTR_NOT_NULL(strstr(text, want));
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "not known      "));            /* the caches column */
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "every rank's weights fit (the caches are not known)"));
    free(text);
}

/* Bytes of (fixture, kind, index) in fixtures/plan/expected_weights.tsv. */
static uint64_t expected_bytes(const char *fx, const char *kind, int index)
{
    char path[600], line[512];
    t_fixture("plan/expected_weights.tsv", path, sizeof path);
    FILE *f = fopen(path, "r");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    unsigned long long got = 0;
    int found = 0;
    while (!found && fgets(line, sizeof line, f)) {
        char a[128], k[16];
        int i;
        if (sscanf(line, "%127s %15s %d %llu", a, k, &i, &got) == 4 && !strcmp(a, fx) && !strcmp(k, kind) && i == index)
            found = 1;
    }
    fclose(f);
    CU_ASSERT_FATAL(found);
    return got;
}

static void test_without_cost_model(void)
{
    char dir[600], q3[600];
    t_fixture("minimax_m2/bf16", dir, sizeof dir);
    nnt_plan *p = plan_with(NULL, dir, 2, 16, 1, 0);
    headers_only(p, dir, "no runtime was given, so no family plugin's cost model");
    for (int b = 0; b < 3; b++) CU_ASSERT_EQUAL(block_weight(p, b), expected_bytes("minimax_m2/bf16", "block", b));
    nnt_plan_free(p);
    t_fixture("qwen3_moe", q3, sizeof q3);
    p = plan_with(g_rt, q3, 1, 16, 1, 0);
    headers_only(p, q3, "no loaded family plugin serves Qwen3MoeForCausalLM");
    CU_ASSERT_EQUAL(block_weight(p, 0), 112640); /* as by hand above */
    nnt_plan_free(p);

    char ck[700], path[800], fx[600];
    snprintf(ck, sizeof ck, "%s/plan_old_minor", t_tmpdir());
    mkdir(ck, 0755);
    snprintf(path, sizeof path, "%s/config.json", ck);
    CU_ASSERT_EQUAL_FATAL(t_write_file(path, "{\"architectures\": [\"OldMinorForCausalLM\"], \"model_type\": \"old_minor\", "
                                             "\"num_hidden_layers\": 3}\n"), 0);
    snprintf(path, sizeof path, "%s/model.safetensors", ck);
    unlink(path);
    CU_ASSERT_EQUAL_FATAL(symlink(t_fixture("minimax_m2/fp32/model.safetensors", fx, sizeof fx), path), 0);
    nnt_runtime *rt = runtime_with("old_minor", "plan_old_minor.ini");
    p = plan_with(rt, ck, 3, 16, 1, 0);
    headers_only(p, ck, "the family plugin 'old_minor' has no cost model");
    nnt_plan_summary s;
    nnt_plan_get_summary(p, &s);
    CU_ASSERT_PTR_NOT_NULL_FATAL(s.family);
    CU_ASSERT_STRING_EQUAL(s.family, "old_minor");
    for (int b = 0; b < 3; b++) CU_ASSERT_EQUAL(block_weight(p, b), expected_bytes("minimax_m2/fp32", "block", b));
    CU_ASSERT_EQUAL(s.first_bytes, expected_bytes("minimax_m2/fp32", "first", 0));
    CU_ASSERT_EQUAL(s.last_bytes, expected_bytes("minimax_m2/fp32", "last", 0));
    nnt_plan_free(p);
    expect_error_with(rt, ck, 1, 1, 1, NNT_ERR_UNSUPPORTED, "but the family plugin 'old_minor' has no cost model");
    unlink(path); /* config.json alone: nothing gives the weights */
    expect_error_with(rt, ck, 1, 1, 0, NNT_ERR_UNSUPPORTED, "plan_old_minor: no safetensors files");
    expect_error_with(rt, ck, 1, 1, 0, NNT_ERR_UNSUPPORTED,
                      "no cost model to compute them from config.json: the family plugin 'old_minor' has no cost model");
    nnt_runtime_close(rt);
}

int register_tests(void)
{
    CU_pSuite s = CU_add_suite("plan", open_runtime, close_runtime);
    if (!s) return -1;
    if (!CU_add_test(s, "per-block weight bytes equal the headers' tensors (independent count)", test_weights_from_headers) ||
        !CU_add_test(s, "the split minimises the largest stage (brute force)", test_split_optimal) ||
        !CU_add_test(s, "fixture splits: contiguous, covering, optimal", test_fixture_splits) ||
        !CU_add_test(s, "caches for T tokens by hand (MiMo, Kimi, DeepSeek-V4, MiniMax)", test_caches_by_hand) ||
        !CU_add_test(s, "weights computed from config.json by hand", test_config_weights_by_hand) ||
        !CU_add_test(s, "weights computed from config.json against the fixtures' headers", test_config_against_headers) ||
        !CU_add_test(s, "config.json and index without shards", test_index_without_shards) ||
        !CU_add_test(s, "Qwen3-MoE from its own descriptor's cost model, by hand", test_qwen3_moe_costs) ||
        !CU_add_test(s, "without a cost model: headers only, caches not known", test_without_cost_model) ||
        !CU_add_test(s, "errors", test_errors))
        return -1;
    return 0;
}
