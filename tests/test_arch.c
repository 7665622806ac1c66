/* test_arch.c - the family kit's architecture table (fam_arch, families/common/fam_arch.c) on a
 * small table of its own over the MiniMax-M2 fp32 fixture (tests/fixtures/minimax_m2/fp32): what
 * fam_arch_bind binds (spellings, traits, optional tensors, experts, the tensors outside the
 * blocks) compared with the checkpoint's own tensors, the module tree fam_arch_tree builds
 * against a hand-written expected tree, the bytes fam_arch_costs adds up against sums worked out
 * by hand, fam_arch_value_info's reasons, and fam_arch_check's refusal of malformed tables. */
#include <string.h>

#include "core/internal.h"
#include "nnt/nnt_family_kit.h"
#include "test_util.h"

/* Sizes of the fixture's config.json: hidden 64, vocabulary 256, 4 heads and 2 key/value heads
 * of 32, 8 experts of width 48; W a kernel width the table's text detail prints. */
enum { S_H, S_V, S_Q, S_KV, S_E, S_I, S_W, S_2, S_N };
static const int64_t SIZES[S_N] = {[S_H] = 64, [S_V] = 256, [S_Q] = 128, [S_KV] = 64, [S_E] = 8, [S_I] = 48, [S_W] = 4,
                                   [S_2] = 2};
enum { T_A = 1, T_NOATTN = 2, T_TIED = 4 };

typedef struct toy_block {
    nnt_tensor q, k, in_norm, router, bias, extra;
    float *bias_host;
    fam_expert *experts;
} toy_block;

typedef struct toy_model {
    nnt_tensor norm;
} toy_model;

/* What describe reads: the tied trait. Block 0 has trait A, block 1 no attention, block 2 both. */
typedef struct toy_self {
    int tied;
} toy_self;

static void toy_describe(const void *self, int layer, fam_block_facts *out)
{
    const toy_self *s = self;
    static const uint32_t kinds[3] = {T_A, T_NOATTN, T_A | T_NOATTN};
    out->traits = (layer >= 0 ? kinds[layer % 3] : 0) | (s->tied ? T_TIED : 0);
    out->eps = 1e-6;
    out->root_class = "ToyForCausalLM";
    memcpy(out->size, SIZES, sizeof SIZES);
}

static const fam_expert_layout TOY_EXPERTS = {
    .fused_gate_up = "model.layers.%d.mlp.experts.gate_up_proj",
    .fused_down = "model.layers.%d.mlp.experts.down_proj",
    .per_expert = {{.gate = "model.layers.%d.mlp.experts.%d.gate_proj.weight",
                    .up = "model.layers.%d.mlp.experts.%d.up_proj.weight",
                    .down = "model.layers.%d.mlp.experts.%d.down_proj.weight"},
                   {.gate = "model.layers.%d.block_sparse_moe.experts.%d.w1.weight",
                    .up = "model.layers.%d.block_sparse_moe.experts.%d.w3.weight",
                    .down = "model.layers.%d.block_sparse_moe.experts.%d.w2.weight"}},
};

/* a rule of another class first: the kit must match the class */
static const nnt_rename_rule TOY_RENAMES[] = {
    {"gate", "not_this", "OtherRouter"},
    {"block_sparse_moe", "mlp", NULL},
    {"gate", "router", "ToyRouter"},
    {NULL, NULL, NULL},
};

#define TOY_N 16
static const fam_module TOY_MODULES[TOY_N] = {
    {.depth = 0, .native = "model"},
    {.depth = 1, .native = "lm_head", .cls = "Linear", .detail = FAM_DETAIL_LINEAR,
     .tensors = {{.name = {"lm_head.weight"}, .store = FAM_STORE_PLAIN, .bind = FAM_BIND_NONE, .ndim = 2,
                  .size = {S_V, S_H}, .unless = T_TIED}}},
    {.depth = 1, .native = "embed_tokens", .cls = "Embedding", .detail = FAM_DETAIL_EMBEDDING,
     .tensors = {{.name = {"model.embed_tokens.weight"}, .store = FAM_STORE_PLAIN, .bind = FAM_BIND_NONE, .ndim = 2,
                  .size = {S_V, S_H}, .first_stage = 1}}},
    {.depth = 1, .native = "layers", .cls = "ModuleList"},
    {.depth = 2, .native = "layers", .cls = "ToyLayer", .block = 1},
    {.depth = 3, .native = "self_attn", .cls = "ToyAttention", .module = NNT_MODULE_SELF_ATTN, .unless = T_NOATTN,
     .absent = "toy: no softmax attention on this block"},
    /* 6: a spelling the fixture lacks, then its own */
    {.depth = 4, .native = "q_proj", .cls = "Linear", .detail = FAM_DETAIL_LINEAR,
     .tensors = {{.name = {"model.layers.%d.self_attn.query.weight", "model.layers.%d.self_attn.q_proj.weight"},
                  .store = FAM_STORE_LINEAR, .field = offsetof(toy_block, q), .ndim = 2, .size = {S_Q, S_H}}}},
    {.depth = 4, .native = "k_proj", .cls = "Linear", .detail = FAM_DETAIL_LINEAR, .when = T_A,
     .tensors = {{.name = {"model.layers.%d.self_attn.k_proj.weight"}, .store = FAM_STORE_LINEAR,
                  .field = offsetof(toy_block, k), .ndim = 2, .size = {S_KV, S_H}}}},
    /* 8: a text detail, and a 3-D linear weight the family would bind itself */
    {.depth = 4, .native = "conv", .cls = "Conv1d", .detail = FAM_DETAIL_TEXT, .text = "%lld, %lld, kernel_size=(%lld,)",
     .dims = {S_Q, S_Q, S_W},
     .tensors = {{.name = {"model.layers.%d.self_attn.fused.weight"}, .store = FAM_STORE_LINEAR, .bind = FAM_BIND_NONE,
                  .ndim = 3, .size = {S_W, S_KV, S_H}}}},
    {.depth = 3, .native = "block_sparse_moe", .cls = "ToyMoe", .module = NNT_MODULE_MLP},
    /* 10: float32 router, an optional bias in its second spelling, an optional tensor no checkpoint has */
    {.depth = 4, .native = "gate", .cls = "ToyRouter",
     .tensors = {{.name = {"model.layers.%d.block_sparse_moe.gate.weight"}, .store = FAM_STORE_F32,
                  .field = offsetof(toy_block, router), .ndim = 2, .size = {S_E, S_H}},
                 {.name = {"model.layers.%d.mlp.e_score_correction_bias",
                           "model.layers.%d.block_sparse_moe.e_score_correction_bias"},
                  .store = FAM_STORE_F32, .bind = FAM_BIND_VECTOR, .field = offsetof(toy_block, bias),
                  .host = offsetof(toy_block, bias_host), .ndim = 1, .size = {S_E}, .optional = 1},
                 {.name = {"model.layers.%d.mlp.absent.weight"}, .store = FAM_STORE_PLAIN,
                  .field = offsetof(toy_block, extra), .ndim = 1, .size = {S_E}, .optional = 1}}},
    {.depth = 4, .native = "experts", .cls = "ToyExperts",
     .tensors = {{.store = FAM_STORE_EXPERTS, .bind = FAM_BIND_EXPERTS, .field = offsetof(toy_block, experts), .ndim = 3,
                  .size = {S_E, S_I, S_H}, .experts = &TOY_EXPERTS}}},
    {.depth = 5, .native = "act_fn", .cls = "SiLUActivation"},
    {.depth = 3, .native = "input_layernorm", .cls = "ToyNorm", .detail = FAM_DETAIL_NORM,
     .tensors = {{.name = {"model.layers.%d.input_layernorm.weight"}, .store = FAM_STORE_PLAIN,
                  .field = offsetof(toy_block, in_norm), .ndim = 1, .size = {S_H}}}},
    {.depth = 3, .native = "extra_norm", .cls = "ToyNorm", .detail = FAM_DETAIL_NORM, .eps = 1e-3,
     .tensors = {{.name = {"model.layers.%d.post_attention_layernorm.weight"}, .store = FAM_STORE_PLAIN,
                  .bind = FAM_BIND_NONE, .ndim = 1, .size = {S_H}}}},
    /* outside the blocks, bound into a toy_model by fam_arch_bind(-1) */
    {.depth = 1, .native = "norm", .cls = "ToyNorm", .detail = FAM_DETAIL_NORM,
     .tensors = {{.name = {"model.norm.weight"}, .store = FAM_STORE_PLAIN, .field = offsetof(toy_model, norm), .ndim = 1,
                  .size = {S_H}}}},
};

static fam_arch toy_arch(const fam_module *rows)
{
    return (fam_arch){.modules = rows,
                      .n_modules = TOY_N,
                      .n_sizes = S_N,
                      .renames = TOY_RENAMES,
                      .off_page = {[NNT_MODULE_LINEAR_ATTN] = "toy: no linear attention"},
                      .describe = toy_describe};
}

/* ---- a backend and a core for the kit ---- */

/* A prepared weight is the host view given (the checkpoint's mapped bytes). */
static nnt_status host_prepare(void *ctx, const nnt_tensor *host, nnt_tensor *out, nnt_error *err)
{
    (void)ctx, (void)err;
    *out = *host;
    return NNT_OK;
}

static void host_release(void *ctx, nnt_tensor *w)
{
    (void)ctx, (void)w;
}

static const nnt_backend_ops HOST_OPS = {.prepare_weight = host_prepare, .release_weight = host_release};

typedef struct kit {
    nnt_checkpoint *ck;
    nnt_core_api api;
    fam_env env;
    nnt_error err;
} kit;

static void kit_open(kit *k)
{
    char dir[512];
    memset(k, 0, sizeof *k);
    CU_ASSERT_EQUAL_FATAL(nnt_checkpoint_open(t_fixture("minimax_m2/fp32", dir, sizeof dir), &k->ck, &k->err), NNT_OK);
    nnt_core_api_init(&k->api);
    k->env = (fam_env){.core = &k->api, .be = &HOST_OPS, .precision = NNT_PRECISION_F32};
}

static void kit_close(kit *k)
{
    fam_env_release(&k->env);
    nnt_checkpoint_close(k->ck);
}

/* The checkpoint's own view of tensor `name` (block-formatted). */
static nnt_tensor stored(kit *k, const char *fmt, int layer, int expert)
{
    char name[256];
    nnt_tensor t = {0};
    snprintf(name, sizeof name, fmt, layer, expert);
    CU_ASSERT_EQUAL(k->api.tensor(k->ck, name, 0, NULL, &t, &k->err), NNT_OK);
    return t;
}

/* ---- tests ---- */

/* The kit's module of each value is the core registry's (nnt_value_module). */
static void test_value_module(void)
{
    for (int id = 0; id < NNT_VALUE_COUNT; id++) CU_ASSERT_EQUAL(fam_value_module((nnt_value_id)id), nnt_value_module((nnt_value_id)id));
    CU_ASSERT_EQUAL(fam_value_module(NNT_VALUE_COUNT), NNT_MODULE_COUNT);
}

/* Block 0 (trait A) gets every tensor, each the checkpoint's own bytes in the shape the sizes give;
 * block 1 (no attention) none of self_attn's; the optional absent tensor stays unbound. */
static void test_bind_blocks(void)
{
    kit k;
    kit_open(&k);
    toy_self self = {0};
    fam_arch a = toy_arch(TOY_MODULES);
    toy_block b[2];
    memset(b, 0, sizeof b);
    for (int l = 0; l < 2; l++) {
        nnt_status st = fam_arch_bind(&k.env, &a, &self, k.ck, l, &b[l], &k.err);
        if (st != NNT_OK) fprintf(stderr, "\n  block %d: %s\n", l, k.err.msg);
        CU_ASSERT_EQUAL_FATAL(st, NNT_OK);
    }
    nnt_tensor q = stored(&k, "model.layers.%d.self_attn.q_proj.weight", 0, 0);
    CU_ASSERT(b[0].q.data == q.data && b[0].q.ndim == 2 && b[0].q.shape[0] == 128 && b[0].q.shape[1] == 64);
    CU_ASSERT(b[0].k.data == stored(&k, "model.layers.%d.self_attn.k_proj.weight", 0, 0).data);
    CU_ASSERT(b[1].q.data == NULL && b[1].k.data == NULL);
    for (int l = 0; l < 2; l++) {
        CU_ASSERT(b[l].router.data == stored(&k, "model.layers.%d.block_sparse_moe.gate.weight", l, 0).data);
        CU_ASSERT(b[l].in_norm.data == stored(&k, "model.layers.%d.input_layernorm.weight", l, 0).data);
        CU_ASSERT(b[l].extra.data == NULL);
        nnt_tensor bias = stored(&k, "model.layers.%d.block_sparse_moe.e_score_correction_bias", l, 0);
        CU_ASSERT_FATAL(b[l].bias_host != NULL && bias.dtype == NNT_F32);
        CU_ASSERT(memcmp(b[l].bias_host, bias.data, 8 * sizeof(float)) == 0);
        CU_ASSERT(b[l].bias.dtype == NNT_F32 && b[l].bias.ndim == 1 && b[l].bias.shape[0] == 8);
        CU_ASSERT_FATAL(b[l].experts != NULL);
        for (int e = 0; e < 8; e++) {
            CU_ASSERT(b[l].experts[e].gate.data == stored(&k, "model.layers.%d.block_sparse_moe.experts.%d.w1.weight", l, e).data);
            CU_ASSERT(b[l].experts[e].up.data == stored(&k, "model.layers.%d.block_sparse_moe.experts.%d.w3.weight", l, e).data);
            CU_ASSERT(b[l].experts[e].down.data == stored(&k, "model.layers.%d.block_sparse_moe.experts.%d.w2.weight", l, e).data);
        }
    }
    /* prepared: block 0's q, k, router, bias, in_norm and 24 expert matrices; block 1's router, bias,
     * in_norm and 24 */
    CU_ASSERT_EQUAL(k.env.prepared->n, (5 + 24) + (3 + 24));
    CU_ASSERT(k.env.prepared->n_buf >= 2); /* the two blocks' expert arrays, at least */
    /* the tensors outside the blocks: the final norm only (the others are FAM_BIND_NONE) */
    toy_model mw = {0};
    CU_ASSERT_EQUAL(fam_arch_bind(&k.env, &a, &self, k.ck, -1, &mw, &k.err), NNT_OK);
    CU_ASSERT(mw.norm.data == stored(&k, "model.norm.weight", 0, 0).data && mw.norm.shape[0] == 64);
    /* a vector bound in the table's shape: the bias's 8 values as [2, 4] */
    fam_module rows[TOY_N];
    memcpy(rows, TOY_MODULES, sizeof rows);
    rows[10].tensors[1].ndim = 2;
    rows[10].tensors[1].size[0] = S_2;
    rows[10].tensors[1].size[1] = S_W;
    fam_arch two = toy_arch(rows);
    toy_block c;
    memset(&c, 0, sizeof c);
    CU_ASSERT_EQUAL_FATAL(fam_arch_bind(&k.env, &two, &self, k.ck, 2, &c, &k.err), NNT_OK);
    CU_ASSERT(c.bias.ndim == 2 && c.bias.shape[0] == 2 && c.bias.shape[1] == 4 && c.bias.data == c.bias_host);
    CU_ASSERT(memcmp(c.bias_host, stored(&k, "model.layers.%d.block_sparse_moe.e_score_correction_bias", 2, 0).data,
                     8 * sizeof(float)) == 0);
    kit_close(&k);
}

static void expect_bind_fails(kit *k, const fam_module *rows, nnt_status status, const char *needle)
{
    toy_self self = {0};
    toy_block b;
    memset(&b, 0, sizeof b);
    fam_arch a = toy_arch(rows);
    CU_ASSERT_EQUAL(fam_arch_bind(&k->env, &a, &self, k->ck, 0, &b, &k->err), status);
    if (!strstr(k->err.msg, needle)) fprintf(stderr, "\n  expected '%s' in: %s\n", needle, k->err.msg);
    CU_ASSERT_PTR_NOT_NULL(strstr(k->err.msg, needle));
}

/* A required tensor missing under every spelling is named with all of them; with one spelling the
 * core's message names it; a shape other than the sizes' and an overlong name are refused; an
 * optional experts tensor the checkpoint lacks is skipped. */
static void test_bind_errors(void)
{
    kit k;
    kit_open(&k);
    fam_module rows[TOY_N];
    memcpy(rows, TOY_MODULES, sizeof rows);
    rows[6].tensors[0].name[1] = "model.layers.%d.self_attn.q.weight";
    expect_bind_fails(&k, rows, NNT_ERR_NOT_FOUND,
                      "block 0 lacks a tensor of self_attn.q_proj: the checkpoint holds none of "
                      "'model.layers.0.self_attn.query.weight', 'model.layers.0.self_attn.q.weight'");
    memcpy(rows, TOY_MODULES, sizeof rows);
    rows[7].tensors[0].name[0] = "model.layers.%d.self_attn.kk.weight";
    expect_bind_fails(&k, rows, NNT_ERR_NOT_FOUND, "has no tensor 'model.layers.0.self_attn.kk.weight'");
    memcpy(rows, TOY_MODULES, sizeof rows);
    rows[6].tensors[0].size[0] = S_KV;
    expect_bind_fails(&k, rows, NNT_ERR_SHAPE, "has shape [128, 64], but config.json implies [64, 64]");
    memcpy(rows, TOY_MODULES, sizeof rows);
    char longname[300] = {0};
    memset(longname, 'x', sizeof longname - 1);
    rows[13].tensors[0].name[0] = longname;
    expect_bind_fails(&k, rows, NNT_ERR_INTERNAL, "is over 255 bytes");
    /* optional experts under names no checkpoint has: skipped, the pointer left NULL */
    static const fam_expert_layout none = {.per_expert = {{.gate = "x.%d.%d.g", .up = "x.%d.%d.u", .down = "x.%d.%d.d"}}};
    memcpy(rows, TOY_MODULES, sizeof rows);
    rows[11].tensors[0].experts = &none;
    rows[11].tensors[0].optional = 1;
    toy_self self = {0};
    toy_block b;
    memset(&b, 0, sizeof b);
    fam_arch a = toy_arch(rows);
    CU_ASSERT_EQUAL(fam_arch_bind(&k.env, &a, &self, k.ck, 0, &b, &k.err), NNT_OK);
    CU_ASSERT_PTR_NULL(b.experts);
    rows[11].tensors[0].optional = 0; /* required: fam_bind_experts names what it looked for */
    expect_bind_fails(&k, rows, NNT_ERR_NOT_FOUND, "the experts of block 0 are missing: the checkpoint holds neither 'x.0.0.g'");
    kit_close(&k);
}

/* ---- the module tree, through a tree_node that records its calls ---- */

typedef struct rec_node {
    int parent, module, layer;
    char native[32], standard[32], cls[32], detail[96];
} rec_node;

typedef struct recorder {
    rec_node n[64];
    int count, fail_at;
} recorder;

static int rec_tree_node(nnt_tree *tree, int parent, const char *native, const char *standard, const char *cls,
                         const char *detail, int module, int layer)
{
    recorder *r = (recorder *)(void *)tree;
    if (r->count == r->fail_at || r->count == 64) return -1;
    rec_node *n = &r->n[r->count];
    *n = (rec_node){.parent = parent, .module = module, .layer = layer};
    snprintf(n->native, sizeof n->native, "%s", native);
    snprintf(n->standard, sizeof n->standard, "%s", standard ? standard : "-");
    snprintf(n->cls, sizeof n->cls, "%s", cls);
    snprintf(n->detail, sizeof n->detail, "%s", detail ? detail : "-");
    return r->count++;
}

/* The tree written out by hand from TOY_MODULES for three blocks: block 0 with its attention
 * (k_proj: trait A), blocks 1 and 2 without (their self_attn rows hidden). */
static const rec_node WANT_HEAD[] = {
    {-1, NNT_MODULE_MODEL, -1, "model", "-", "ToyForCausalLM", "-"},
    {0, -1, -1, "lm_head", "-", "Linear", "in_features=64, out_features=256, bias=False"},
    {0, -1, -1, "embed_tokens", "-", "Embedding", "256, 64"},
    {0, -1, -1, "layers", "-", "ModuleList", "-"},
    {3, NNT_MODULE_LAYER, 0, "layers", "-", "ToyLayer", "-"},
    {4, NNT_MODULE_SELF_ATTN, 0, "self_attn", "-", "ToyAttention", "-"},
    {5, -1, 0, "q_proj", "-", "Linear", "in_features=64, out_features=128, bias=False"},
    {5, -1, 0, "k_proj", "-", "Linear", "in_features=64, out_features=64, bias=False"},
    {5, -1, 0, "conv", "-", "Conv1d", "128, 128, kernel_size=(4,)"},
    {4, NNT_MODULE_MLP, 0, "block_sparse_moe", "mlp", "ToyMoe", "-"},
    {9, -1, 0, "gate", "router", "ToyRouter", "-"},
    {9, -1, 0, "experts", "-", "ToyExperts", "-"},
    {11, -1, 0, "act_fn", "-", "SiLUActivation", "-"},
    {4, -1, 0, "input_layernorm", "-", "ToyNorm", "(64,), eps=1e-06"},
    {4, -1, 0, "extra_norm", "-", "ToyNorm", "(64,), eps=0.001"},
};
/* blocks 1 and 2, as offsets from the block's own node */
static const rec_node WANT_BLOCK[] = {
    {3, NNT_MODULE_LAYER, 0, "layers", "-", "ToyLayer", "-"},
    {0, NNT_MODULE_MLP, 0, "block_sparse_moe", "mlp", "ToyMoe", "-"},
    {1, -1, 0, "gate", "router", "ToyRouter", "-"},
    {1, -1, 0, "experts", "-", "ToyExperts", "-"},
    {3, -1, 0, "act_fn", "-", "SiLUActivation", "-"},
    {0, -1, 0, "input_layernorm", "-", "ToyNorm", "(64,), eps=1e-06"},
    {0, -1, 0, "extra_norm", "-", "ToyNorm", "(64,), eps=0.001"},
};

static void check_node(const rec_node *got, const rec_node *want, int i)
{
    int same = got->parent == want->parent && got->module == want->module && got->layer == want->layer &&
               !strcmp(got->native, want->native) && !strcmp(got->standard, want->standard) &&
               !strcmp(got->cls, want->cls) && !strcmp(got->detail, want->detail);
    if (!same)
        fprintf(stderr, "\n  node %d: got (%d %d %d %s %s %s %s), want (%d %d %d %s %s %s %s)\n", i, got->parent, got->module,
                got->layer, got->native, got->standard, got->cls, got->detail, want->parent, want->module, want->layer,
                want->native, want->standard, want->cls, want->detail);
    CU_ASSERT(same);
}

static void test_tree(void)
{
    nnt_core_api api;
    nnt_core_api_init(&api);
    api.tree_node = rec_tree_node;
    recorder r = {.fail_at = -1};
    toy_self self = {0};
    fam_arch a = toy_arch(TOY_MODULES);
    nnt_error err = {0};
    CU_ASSERT_EQUAL_FATAL(fam_arch_tree(&api, &a, &self, 3, (nnt_tree *)(void *)&r, &err), NNT_OK);
    int nh = (int)(sizeof WANT_HEAD / sizeof WANT_HEAD[0]), nb = (int)(sizeof WANT_BLOCK / sizeof WANT_BLOCK[0]);
    CU_ASSERT_EQUAL_FATAL(r.count, nh + 2 * nb + 1);
    for (int i = 0; i < nh; i++) check_node(&r.n[i], &WANT_HEAD[i], i);
    for (int l = 1; l <= 2; l++) {
        int at = nh + (l - 1) * nb;
        for (int i = 0; i < nb; i++) {
            rec_node w = WANT_BLOCK[i];
            w.layer = l;
            if (i > 0) w.parent += at;
            check_node(&r.n[at + i], &w, at + i);
        }
    }
    check_node(&r.n[r.count - 1], &(rec_node){0, -1, -1, "norm", "-", "ToyNorm", "(64,), eps=1e-06"}, r.count - 1);
    /* a failing tree_node is an out-of-memory error */
    recorder f = {.fail_at = 9};
    CU_ASSERT_EQUAL(fam_arch_tree(&api, &a, &self, 3, (nnt_tree *)(void *)&f, &err), NNT_ERR_OUT_OF_MEMORY);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "no memory for the module tree"));
}

/* A class that depends on the block: the router of blocks with trait A (0 and 2) shows alt_cls,
 * and its standard name comes from the rename rule of that class; block 1 keeps cls. */
static void test_tree_alt_class(void)
{
    static const nnt_rename_rule renames[] = {
        {"block_sparse_moe", "mlp", NULL},
        {"gate", "router", "ToyRouter"},
        {"gate", "hash_router", "ToyHashRouter"},
        {NULL, NULL, NULL},
    };
    nnt_core_api api;
    nnt_core_api_init(&api);
    api.tree_node = rec_tree_node;
    fam_module rows[TOY_N];
    memcpy(rows, TOY_MODULES, sizeof rows);
    rows[10].alt_cls = "ToyHashRouter";
    rows[10].alt_when = T_A;
    fam_arch a = toy_arch(rows);
    a.renames = renames;
    recorder r = {.fail_at = -1};
    toy_self self = {0};
    nnt_error err = {0};
    CU_ASSERT_EQUAL_FATAL(fam_arch_tree(&api, &a, &self, 3, (nnt_tree *)(void *)&r, &err), NNT_OK);
    static const char *const want_cls[3] = {"ToyHashRouter", "ToyRouter", "ToyHashRouter"};
    static const char *const want_std[3] = {"hash_router", "router", "hash_router"};
    int seen = 0;
    for (int i = 0; i < r.count; i++) {
        if (strcmp(r.n[i].native, "gate") != 0) continue;
        CU_ASSERT_FATAL(seen < 3);
        CU_ASSERT_EQUAL(r.n[i].layer, seen);
        CU_ASSERT_STRING_EQUAL(r.n[i].cls, want_cls[seen]);
        CU_ASSERT_STRING_EQUAL(r.n[i].standard, want_std[seen]);
        seen++;
    }
    CU_ASSERT_EQUAL(seen, 3);
    /* the other rows are the plain table's: as many nodes */
    recorder plain = {.fail_at = -1};
    fam_arch b = toy_arch(TOY_MODULES);
    CU_ASSERT_EQUAL_FATAL(fam_arch_tree(&api, &b, &self, 3, (nnt_tree *)(void *)&plain, &err), NNT_OK);
    CU_ASSERT_EQUAL(r.count, plain.count);
}

/* ---- costs ---- */

static void costs_of(const fam_encoding *e, int tied, uint64_t *w, uint64_t *first, uint64_t *last)
{
    nnt_core_api api;
    nnt_core_api_init(&api);
    toy_self self = {.tied = tied};
    fam_arch a = toy_arch(TOY_MODULES);
    nnt_cost_args args = {.struct_size = sizeof args, .core = &api, .n_blocks = 3, .context = 16, .batch = 1,
                          .weight_bytes = w};
    nnt_error err = {0};
    CU_ASSERT_EQUAL(fam_arch_costs(&args, &a, &self, e, &err), NNT_OK);
    *first = args.first_bytes;
    *last = args.last_bytes;
}

/* By hand, bfloat16 (2 bytes an unquantised element): block 0 = q 128*64*2 (16384) + k 64*64*2
 * (8192) + the 3-D conv weight 4*64*64*2 (32768) + router float32 8*64*4 (2048) + bias 8*4 (32) +
 * the optional tensor 8*2 (16) + experts 8*(2*48*64*2 + 64*48*2) (147456) + two norms 2*64*2 (256)
 * = 207152; blocks 1 and 2 lack self_attn's 57344 bytes: 149808. Embedding 256*64*2 = 32768 on
 * the first stage; lm_head 32768 and the norm 128 on the last (the norm alone when tied).
 * FP8 with 128x128 blocks of float32 scales: q 8192 + 1*1*4 (8196), k 4096 + 4 (4100), the conv
 * weight 4 * (4096 + 4) (16400), each expert matrix 3072 + 4 (3076, 8 experts: 73824), the rest
 * as before: 104872 and 149808 - 147456 + 73824 = 76176; with FP4 experts each [48, 64] matrix is
 * 48*64/2 + 48*2 (1632), each [64, 48] 64*48/2 + 64*2 (1664): 8 * 4928 = 39424 for the experts. */
static void test_costs(void)
{
    fam_encoding bf16 = {.block_rows = 128, .block_cols = 128, .scale_bytes = 4, .elem_bytes = 2};
    uint64_t w[3], first, last;
    costs_of(&bf16, 0, w, &first, &last);
    CU_ASSERT_EQUAL(w[0], 207152);
    CU_ASSERT_EQUAL(w[1], 149808);
    CU_ASSERT_EQUAL(w[2], 149808);
    CU_ASSERT_EQUAL(first, 32768);
    CU_ASSERT_EQUAL(last, 32768 + 128);
    costs_of(&bf16, 1, w, &first, &last);
    CU_ASSERT_EQUAL(last, 128);
    CU_ASSERT_EQUAL(w[0], 207152);
    fam_encoding fp8 = bf16;
    fp8.fp8 = 1;
    costs_of(&fp8, 0, w, &first, &last);
    CU_ASSERT_EQUAL(w[0], 104872);
    CU_ASSERT_EQUAL(w[1], 76176);
    fp8.fp4_experts = 1;
    costs_of(&fp8, 0, w, &first, &last);
    CU_ASSERT_EQUAL(w[0], 104872 - 73824 + 39424);
    CU_ASSERT_EQUAL(w[2], 76176 - 73824 + 39424);
}

/* ---- value serving ---- */

static void test_value_info(void)
{
    toy_self self = {0};
    fam_arch a = toy_arch(TOY_MODULES);
    nnt_value_info vi;
    memset(&vi, 0x55, sizeof vi);
    CU_ASSERT_EQUAL(fam_arch_value_info(&a, &self, 1, NNT_VALUE_ATTN_QUERIES, &vi), 1);
    CU_ASSERT(!vi.served && !vi.off_page);
    CU_ASSERT_STRING_EQUAL(vi.reason, "toy: no softmax attention on this block");
    CU_ASSERT_EQUAL(fam_arch_value_info(&a, &self, 0, NNT_VALUE_ATTN_QUERIES, &vi), 0); /* block 0 has it */
    CU_ASSERT_EQUAL(fam_arch_value_info(&a, &self, 1, NNT_VALUE_LIN_STATE, &vi), 1);
    CU_ASSERT(!vi.served && vi.off_page);
    CU_ASSERT_STRING_EQUAL(vi.reason, "toy: no linear attention");
    CU_ASSERT_EQUAL(fam_arch_value_info(&a, &self, 1, NNT_VALUE_MLP_OUTPUT, &vi), 0);
    CU_ASSERT_EQUAL(fam_arch_value_info(&a, &self, -1, NNT_VALUE_LOGITS, &vi), 0);
    CU_ASSERT_EQUAL(fam_arch_value_info(&a, &self, 1, NNT_VALUE_LAYER_INPUT, &vi), 0);
    /* no reason in the table: the family answers */
    fam_module rows[TOY_N];
    memcpy(rows, TOY_MODULES, sizeof rows);
    rows[5].absent = NULL;
    fam_arch b = toy_arch(rows);
    b.off_page[NNT_MODULE_LINEAR_ATTN] = NULL;
    CU_ASSERT_EQUAL(fam_arch_value_info(&b, &self, 1, NNT_VALUE_ATTN_QUERIES, &vi), 0);
    CU_ASSERT_EQUAL(fam_arch_value_info(&b, &self, 1, NNT_VALUE_LIN_STATE, &vi), 0);
}

/* ---- malformed tables ---- */

static void expect_check_fails(fam_module *rows, const char *needle)
{
    nnt_core_api api;
    nnt_core_api_init(&api);
    fam_arch a = toy_arch(rows);
    nnt_error err = {0};
    CU_ASSERT_EQUAL(fam_arch_check(&api, &a, &err), NNT_ERR_INTERNAL);
    if (!strstr(err.msg, needle)) fprintf(stderr, "\n  expected '%s' in: %s\n", needle, err.msg);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, needle));
    memcpy(rows, TOY_MODULES, sizeof TOY_MODULES); /* ready for the next case */
}

static void test_check(void)
{
    nnt_core_api api;
    nnt_core_api_init(&api);
    fam_arch good = toy_arch(TOY_MODULES);
    nnt_error err = {0};
    CU_ASSERT_EQUAL(fam_arch_check(&api, &good, &err), NNT_OK);
    fam_module r[TOY_N];
    memcpy(r, TOY_MODULES, sizeof r);
    r[5].depth = 5;
    expect_check_fails(r, "row 5 ('self_attn'): depth 5 after depth 2");
    r[4].block = 0;
    expect_check_fails(r, "0 block rows; expected exactly one");
    r[9].block = 1;
    expect_check_fails(r, "row 9 ('block_sparse_moe'): the block row takes no traits or module");
    r[6].tensors[0].size[0] = S_N;
    expect_check_fails(r, "row 6 ('q_proj'): tensor 0's axis 0 is size 8; the table has 8 sizes");
    r[13].tensors[0].store = FAM_STORE_LINEAR;
    expect_check_fails(r, "row 13 ('input_layernorm'): tensor 0 is a linear weight of 1 axis");
    memset(&r[1].tensors[0], 0, sizeof r[1].tensors[0]);
    expect_check_fails(r, "row 1 ('lm_head'): its detail reads its first tensor");
    memset(&r[10].tensors[1], 0, sizeof r[10].tensors[1]);
    expect_check_fails(r, "row 10 ('gate'): tensor 2 follows an unused entry");
    r[3].cls = NULL;
    expect_check_fails(r, "row 3 ('layers'): a module needs its name and class");
    r[9].module = NNT_MODULE_LAYER;
    expect_check_fails(r, "row 9 ('block_sparse_moe'): module 1 hosts no values");
    r[11].tensors[0].ndim = 2;
    expect_check_fails(r, "row 11 ('experts'): tensor 0: routed experts need their spellings and the shape [E, I, H]");
    r[8].dims[2] = 40;
    expect_check_fails(r, "row 8 ('conv'): detail size 40 is outside the sizes");
    r[6].tensors[0].bind = FAM_BIND_EXPERTS;
    expect_check_fails(r, "row 6 ('q_proj'): tensor 0 is bound as experts but not stored as experts");
    r[10].alt_cls = "ToyHashRouter";
    expect_check_fails(r, "row 10 ('gate'): an alternative class and the traits that select it go together");
    r[10].alt_when = T_A;
    expect_check_fails(r, "row 10 ('gate'): an alternative class and the traits that select it go together");
}

int register_tests(void)
{
    CU_pSuite s = CU_add_suite("arch", NULL, NULL);
    if (!s) return -1;
    if (!CU_add_test(s, "each value's module, as the core's registry says", test_value_module) ||
        !CU_add_test(s, "binding by spellings and traits: the checkpoint's own tensors", test_bind_blocks) ||
        !CU_add_test(s, "binding errors name the block, the module and every spelling", test_bind_errors) ||
        !CU_add_test(s, "the module tree, against one written by hand", test_tree) ||
        !CU_add_test(s, "a class that depends on the block's traits", test_tree_alt_class) ||
        !CU_add_test(s, "costs: bf16, FP8 and FP4 experts, by hand", test_costs) ||
        !CU_add_test(s, "values of a module a block lacks, and of one no block has", test_value_info) ||
        !CU_add_test(s, "malformed tables are refused, naming the row", test_check))
        return -1;
    return 0;
}
