/* broken_plugins.c - deliberately malformed plugins, one per build flag, so the tests can show
 * every error the plugin host reports. Each compiles to its own .so in build/tests/plugins. */
#include <stddef.h>

#include "nnt/nnt_backend.h"
#include "nnt/nnt_family.h"

#if defined(__GNUC__)
#pragma GCC diagnostic ignored "-Wunused-function"
#endif

static nnt_status load(const nnt_load_args *a, void **m, nnt_error *e) { return NNT_ERR_INTERNAL; }
static void unload(void *m) {}
static void info(const void *m, nnt_model_info *o) {}
static nnt_status value_info(const void *m, int l, nnt_slot s, const nnt_call_dims *d, nnt_value_info *o)
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
#elif defined(BROKEN_SECOND_CPU) || defined(BROKEN_OLD_BACKEND)
/* BROKEN_SECOND_CPU: a second backend that calls itself "cpu";
 * BROKEN_OLD_BACKEND: a backend "old_backend" built for the next ABI major (a stale build) */
static nnt_status create(const nnt_backend_options *o, void **c, nnt_error *e) { return NNT_ERR_INTERNAL; }
static void destroy(void *c) {}
static nnt_status stub(void) { return NNT_ERR_INTERNAL; }
/* every entry filled (with a stub never called) so that only the one defect is wrong */
static nnt_status (*const stubs[sizeof(nnt_backend_ops) / sizeof(void (*)(void))])(void) = {
    [0 ... sizeof(nnt_backend_ops) / sizeof(void (*)(void)) - 1] = stub};

NNT_PLUGIN_EXPORT const nnt_backend_descriptor nnt_backend_plugin = {
#if defined(BROKEN_SECOND_CPU)
    /* .header = */ NNT_PLUGIN_HEADER(nnt_backend_descriptor, NNT_PLUGIN_BACKEND, "cpu", "0", "imposter"),
#else
    /* .header = */ {NNT_PLUGIN_MAGIC, NNT_ABI_MAJOR + 1, 0, (uint32_t)sizeof(nnt_backend_descriptor),
                     NNT_PLUGIN_BACKEND, "old_backend", "0", "a backend built for another ABI"},
#endif
    /* .host_memory = */ 1,
    /* .create = */ create,
    /* .destroy = */ destroy,
    /* .ops = */ (const nnt_backend_ops *)(const void *)stubs,
};
#else
static const char *const ARCHS[] = {
#if defined(BROKEN_DUP_ARCH)
    "MiniMaxM2ForCausalLM",
#else
    "BrokenForCausalLM",
#endif
    NULL};
static const char *const TYPES[] = {"broken", NULL};
static const nnt_rename_rule RENAMES[] = {{NULL, NULL, NULL}};

NNT_PLUGIN_EXPORT const nnt_family_descriptor nnt_family_plugin = {
    /* .header = */ {
        /* .magic = */ NNT_PLUGIN_MAGIC,
#if defined(BROKEN_ABI_MAJOR)
        /* .abi_major = */ NNT_ABI_MAJOR + 1,
#else
        /* .abi_major = */ NNT_ABI_MAJOR,
#endif
#if defined(BROKEN_ABI_MINOR)
        /* .abi_minor = */ NNT_ABI_MINOR + 1,
#else
        /* .abi_minor = */ NNT_ABI_MINOR,
#endif
#if defined(BROKEN_BAD_SIZE)
        /* .struct_size = */ (uint32_t)sizeof(nnt_family_descriptor) - 8,
#else
        /* .struct_size = */ (uint32_t)sizeof(nnt_family_descriptor),
#endif
        /* .kind = */ NNT_PLUGIN_FAMILY,
#if defined(BROKEN_BAD_NAME)
        /* .name = */ "Bad Name!",
#elif defined(BROKEN_DUP_ARCH)
        /* .name = */ "impostor",
#else
        /* .name = */ "broken",
#endif
        /* .version = */ "0",
        /* .summary = */ "a deliberately broken plugin",
    },
    /* .architectures = */ ARCHS,
    /* .model_types = */ TYPES,
    /* .renames = */ RENAMES,
    /* .load = */ load,
    /* .unload = */ unload,
    /* .info = */ info,
    /* .value_info = */ value_info,
    /* .build_tree = */ build_tree,
#if defined(BROKEN_NO_FORWARD)
    /* .forward = */ NULL,
#else
    /* .forward = */ forward,
#endif
    /* .project = */ project,
    /* .cache_new = */ NULL,
    /* .cache_free = */ NULL,
};
#endif
