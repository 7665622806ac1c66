/* broken_plugins.c - deliberately malformed plugins, one per build flag, so the tests can show
 * every error the plugin host reports. Each compiles to its own .so in build/tests/plugins;
 * the variants that load (an older minor's short descriptor, backends without optional ops,
 * families that need an absent op or break the forward contract) go to build/tests/plugins-ok,
 * out of the directory test_plugins.c scans for broken files. */
#include <stddef.h>

#include "nnt/nnt_backend.h"
#include "nnt/nnt_family.h"

#if defined(__GNUC__)
#pragma GCC diagnostic ignored "-Wunused-function"
#endif

static nnt_status load(const nnt_load_args *a, void **m, nnt_error *e) { return NNT_ERR_INTERNAL; }
static void unload(void *m) {}
static void info(const void *m, nnt_model_info *o) {}
static nnt_status value_info(const void *m, int l, nnt_value_id s, const nnt_call_dims *d, nnt_value_info *o)
{
    return NNT_ERR_INTERNAL;
}
static nnt_status build_tree(const void *m, nnt_tree *t, nnt_error *e) { return NNT_ERR_INTERNAL; }
static nnt_status forward(void *m, nnt_run *r, const nnt_forward_args *a, nnt_error *e) { return NNT_ERR_INTERNAL; }
static nnt_status project(void *m, nnt_run *r, const nnt_tensor *x, int s, nnt_tensor *y, nnt_error *e)
{
    return NNT_ERR_INTERNAL;
}

#if defined(BROKEN_NOT_A_PLUGIN)
/* exports no descriptor at all */
NNT_PLUGIN_EXPORT int nnt_something_else = 42;
#elif defined(BROKEN_SECOND_CPU) || defined(BROKEN_OLD_BACKEND) || defined(BROKEN_NULL_OP) ||                    \
    defined(BROKEN_BAD_OPS_SIZE) || defined(BROKEN_FEW_OPS) || defined(BROKEN_FEW_CPU) || defined(BROKEN_SHORT_TABLE)
/* BROKEN_SECOND_CPU: a second backend that calls itself "cpu";
 * BROKEN_OLD_BACKEND: a backend "old_backend" built for the next ABI major (a stale build);
 * BROKEN_NULL_OP: "null_op", whose table leaves the required op `download` NULL;
 * BROKEN_BAD_OPS_SIZE: "bad_ops_size", whose table's struct_size is smaller than the required ops;
 * BROKEN_FEW_OPS (loads): "few_ops", without the optional recurrent (Kimi) and hyper-connection
 * (DeepSeek) ops and without scale_rows (which no family needs); BROKEN_FEW_CPU (loads): the same table under the name "cpu";
 * BROKEN_SHORT_TABLE (loads): "short_table", every op filled but struct_size ending before
 * conv1d_causal, as an older minor's shorter table would: the ops past it must read as absent. */
#include <string.h>
static nnt_status create(const nnt_backend_options *o, void **c, nnt_error *e)
{
    *c = (void *)o; /* any non-NULL context; never used */
    return NNT_OK;
}
static void destroy(void *c) {}
static nnt_status stub(void) { return NNT_ERR_INTERNAL; }
static size_t no_bytes(void *c) { return 0; }
#define STUB(T) ((T)(void (*)(void))stub)
/* every entry filled (with a stub that fails) so that only the one defect is wrong */
static const nnt_backend_ops OPS = {
#if defined(BROKEN_BAD_OPS_SIZE)
    .struct_size = 8,
#elif defined(BROKEN_SHORT_TABLE)
    .struct_size = offsetof(nnt_backend_ops, conv1d_causal),
#else
    .struct_size = sizeof(nnt_backend_ops),
#endif
    .alloc = STUB(nnt_status (*)(void *, size_t, void **, nnt_error *)),
    .free = STUB(void (*)(void *, void *)),
    .upload = STUB(nnt_status (*)(void *, void *, const void *, size_t, nnt_error *)),
#if !defined(BROKEN_NULL_OP)
    .download = STUB(nnt_status (*)(void *, void *, const void *, size_t, nnt_error *)),
#endif
    .prepare_weight = STUB(nnt_status (*)(void *, const nnt_tensor *, nnt_tensor *, nnt_error *)),
    .release_weight = STUB(void (*)(void *, nnt_tensor *)),
    .weight_bytes = no_bytes,
#define S(op) .op = STUB(__typeof__(((nnt_backend_ops *)0)->op))
    S(linear), S(rms_norm), S(embedding), S(add), S(swap12), S(copy), S(fill), S(scale), S(rope),
    S(attn_scores), S(softmax), S(attn_mix), S(swiglu), S(route), S(gather_rows), S(scatter_add_rows),
    S(scatter_rows), S(sum_axis1), S(copy_cols),
#if !defined(BROKEN_FEW_OPS) && !defined(BROKEN_FEW_CPU)
    S(conv1d_causal), S(kda_gate), S(sigmoid), S(delta_rule), S(rms_norm_gated), S(zero_rows),
    S(hyper_connection), S(hyper_mix), S(hyper_head), S(compress), S(indexer_scores), S(scale_rows),
#endif
#undef S
};

NNT_PLUGIN_EXPORT const nnt_backend_descriptor nnt_backend_plugin = {
#if defined(BROKEN_SECOND_CPU) || defined(BROKEN_FEW_CPU)
    .header = NNT_PLUGIN_HEADER(nnt_backend_descriptor, NNT_PLUGIN_BACKEND, "cpu", "0", "imposter"),
#elif defined(BROKEN_NULL_OP)
    .header = NNT_PLUGIN_HEADER(nnt_backend_descriptor, NNT_PLUGIN_BACKEND, "null_op", "0", "a required op NULL"),
#elif defined(BROKEN_BAD_OPS_SIZE)
    .header = NNT_PLUGIN_HEADER(nnt_backend_descriptor, NNT_PLUGIN_BACKEND, "bad_ops_size", "0", "a short op table"),
#elif defined(BROKEN_FEW_OPS)
    .header = NNT_PLUGIN_HEADER(nnt_backend_descriptor, NNT_PLUGIN_BACKEND, "few_ops", "0", "no optional ops"),
#elif defined(BROKEN_SHORT_TABLE)
    .header = NNT_PLUGIN_HEADER(nnt_backend_descriptor, NNT_PLUGIN_BACKEND, "short_table", "0", "a shorter table"),
#else
    .header = {NNT_PLUGIN_MAGIC, NNT_ABI_MAJOR + 1, 0, (uint32_t)sizeof(nnt_backend_descriptor),
               NNT_PLUGIN_BACKEND, "old_backend", "0", "a backend built for another ABI"},
#endif
    .host_memory = 1,
    .create = create,
    .destroy = destroy,
    .ops = &OPS,
};
#elif defined(BROKEN_NO_EMIT) || defined(BROKEN_WRONG_SHAPE) || defined(BROKEN_NO_STAGES) || defined(BROKEN_MINOR_31)
/* Families that load and run but break the forward contract on layers.0.layer_output:
 * BROKEN_NO_EMIT ("no_emit") declares it served and never emits it; BROKEN_WRONG_SHAPE
 * ("wrong_shape") emits it [batch, seq, 5] where value_info declares [batch, seq, 4]. One block,
 * hidden size 4, vocabulary 8; nothing is read from the checkpoint.
 * Two blocks that ignore nnt_forward_args' pipeline-stage fields, emitting both blocks'
 * layer_output and the logits at every call: BROKEN_NO_STAGES ("no_stages") built for this ABI
 * (so the core runs stages on it and must catch the emissions outside the stage), and
 * BROKEN_MINOR_31 ("minor_31") declaring ABI 3.1, which predates stages (the core must refuse
 * them and still run the whole model). */
#include <stdio.h>
#include <stdlib.h>
#if defined(BROKEN_NO_EMIT)
#define NAME "no_emit"
#define ARCH "NoEmitForCausalLM"
#elif defined(BROKEN_WRONG_SHAPE)
#define NAME "wrong_shape"
#define ARCH "WrongShapeForCausalLM"
#elif defined(BROKEN_NO_STAGES)
#define NAME "no_stages"
#define ARCH "NoStagesForCausalLM"
#define FAKE_LAYERS 2
#else
#define NAME "minor_31"
#define ARCH "Minor31ForCausalLM"
#define FAKE_LAYERS 2
#endif
#ifndef FAKE_LAYERS
#define FAKE_LAYERS 1
#endif
typedef struct fake {
    const nnt_core_api *core;
} fake;
static nnt_status fake_load(const nnt_load_args *a, void **m, nnt_error *e)
{
    fake *f = calloc(1, sizeof *f);
    if (!f) return NNT_ERR_OUT_OF_MEMORY;
    f->core = a->core;
    *m = f;
    return NNT_OK;
}
static void fake_unload(void *m) { free(m); }
static void fake_info(const void *m, nnt_model_info *o)
{
    *o = (nnt_model_info){.architecture = ARCH, .model_type = NAME, .root_class = "FakeForCausalLM", .num_layers = FAKE_LAYERS,
                          .hidden_size = 4, .vocab_size = 8, .num_heads = 1, .num_kv_heads = 1, .head_dim = 4,
                          .qk_head_dim = 4, .intermediate_size = 4, .num_streams = 1};
}
static nnt_status fake_value_info(const void *m, int l, nnt_value_id s, const nnt_call_dims *d, nnt_value_info *o)
{
    int64_t last = s == NNT_VALUE_LOGITS ? 8 : s == NNT_VALUE_LAYER_OUTPUT ? 4 : 0;
    if (!last || (s == NNT_VALUE_LOGITS) != (l < 0)) {
        o->served = 0;
        snprintf(o->reason, sizeof o->reason, "a test family serves layer_output and logits only");
        return NNT_OK;
    }
    o->served = 1;
    o->dtype = NNT_F32;
    o->ndim = d ? 3 : 0;
    if (d) {
        o->shape[0] = d->batch;
        o->shape[1] = d->seq;
        o->shape[2] = last;
    }
    return NNT_OK;
}
static nnt_status fake_tree(const void *m, nnt_tree *t, nnt_error *e) { return NNT_OK; }
static nnt_status fake_forward(void *m, nnt_run *run, const nnt_forward_args *a, nnt_error *e)
{
    const nnt_core_api *h = ((fake *)m)->core;
    nnt_tensor out, logits;
    int64_t shape[3] = {a->batch, a->seq, 4}, lshape[3] = {a->batch, a->seq, 8};
#if defined(BROKEN_WRONG_SHAPE)
    shape[2] = 5;
#endif
    nnt_status st = h->alloc(run, NNT_F32, 3, shape, &out, e);
    if (st == NNT_OK) st = a->be->fill(a->be_ctx, &out, 1.0f, e);
#if !defined(BROKEN_NO_EMIT)
    for (int l = 0; l < FAKE_LAYERS && st == NNT_OK; l++) st = h->emit(run, NNT_VALUE_LAYER_OUTPUT, l, &out);
#endif
    if (st == NNT_OK) st = h->alloc(run, NNT_F32, 3, lshape, &logits, e);
    if (st == NNT_OK) st = a->be->fill(a->be_ctx, &logits, 0.0f, e);
    if (st == NNT_OK) st = h->emit(run, NNT_VALUE_LOGITS, -1, &logits);
    return st;
}
static const char *const ARCHS[] = {ARCH, NULL};
static const char *const TYPES[] = {NAME, NULL};
static const nnt_rename_rule RENAMES[] = {{NULL, NULL, NULL}};
NNT_PLUGIN_EXPORT const nnt_family_descriptor nnt_family_plugin = {
#if defined(BROKEN_MINOR_31)
    .header = {.magic = NNT_PLUGIN_MAGIC, .abi_major = 3, .abi_minor = 1,
               .struct_size = (uint32_t)offsetof(nnt_family_descriptor, note), /* a 3.1 descriptor ends there */
               .kind = NNT_PLUGIN_FAMILY, .name = NAME, .version = "0", .summary = "built for ABI 3.1"},
#else
    .header = NNT_PLUGIN_HEADER(nnt_family_descriptor, NNT_PLUGIN_FAMILY, NAME, "0", "breaks the forward contract"),
#endif
    .architectures = ARCHS,
    .model_types = TYPES,
    .renames = RENAMES,
    .load = fake_load,
    .unload = fake_unload,
    .info = fake_info,
    .value_info = fake_value_info,
    .build_tree = fake_tree,
    .forward = fake_forward,
    .project = project,
    .ops_needed = NNT_OPS_REQUIRED | NNT_OP_BIT(NNT_OP_FILL),
};
#else
static const char *const ARCHS[] = {
#if defined(BROKEN_DUP_ARCH)
    "MiniMaxM2ForCausalLM",
#elif defined(BROKEN_OLD_MINOR)
    "OldMinorForCausalLM",
#elif defined(BROKEN_NEEDS_OP)
    "NeedsOpForCausalLM",
#else
    "BrokenForCausalLM",
#endif
    NULL};
static const char *const TYPES[] = {"broken", NULL};
static const nnt_rename_rule RENAMES[] = {{NULL, NULL, NULL}};

NNT_PLUGIN_EXPORT const nnt_family_descriptor nnt_family_plugin = {
    .header = {
        .magic = NNT_PLUGIN_MAGIC,
#if defined(BROKEN_ABI_MAJOR)
        .abi_major = NNT_ABI_MAJOR + 1,
#else
        .abi_major = NNT_ABI_MAJOR,
#endif
#if defined(BROKEN_ABI_MINOR)
        .abi_minor = NNT_ABI_MINOR + 1,
#else
        .abi_minor = NNT_ABI_MINOR,
#endif
#if defined(BROKEN_BAD_SIZE)
        .struct_size = (uint32_t)NNT_FAMILY_DESCRIPTOR_MIN_SIZE - 8,
#elif defined(BROKEN_OLD_MINOR)
        .struct_size = (uint32_t)NNT_FAMILY_DESCRIPTOR_MIN_SIZE, /* ends at `project` */
#else
        .struct_size = (uint32_t)sizeof(nnt_family_descriptor),
#endif
        .kind = NNT_PLUGIN_FAMILY,
#if defined(BROKEN_BAD_NAME)
        .name = "Bad Name!",
#elif defined(BROKEN_DUP_ARCH)
        .name = "impostor",
#elif defined(BROKEN_OLD_MINOR)
        .name = "old_minor",
#elif defined(BROKEN_NEEDS_OP)
        .name = "needs_op",
#else
        .name = "broken",
#endif
        .version = "0",
        .summary = "a deliberately broken plugin",
    },
    .architectures = ARCHS,
    .model_types = TYPES,
    .renames = RENAMES,
    .load = load,
    .unload = unload,
    .info = info,
    .value_info = value_info,
    .build_tree = build_tree,
#if defined(BROKEN_NO_FORWARD)
    .forward = NULL,
#else
    .forward = forward,
#endif
    .project = project,
#if !defined(BROKEN_OLD_MINOR)
    .cache_new = NULL,
    .cache_free = NULL,
#if defined(BROKEN_NEEDS_OP)
    .ops_needed = NNT_OPS_DECODER | NNT_OP_BIT(NNT_OP_DELTA_RULE),
#endif
#endif
};
#endif
