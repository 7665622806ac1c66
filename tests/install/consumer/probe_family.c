/* probe_family.c - the smallest family plugin that passes the host's descriptor checks: it
 * claims architecture ConsumerProbeForCausalLM and fails every call. Built by the consumer
 * project with nnt_add_plugin to show the recipe works against an installed SDK. */
#include <nnt/nnt_family.h>

static nnt_status load(const nnt_load_args *a, void **m, nnt_error *e) { return NNT_ERR_UNSUPPORTED; }
static void unload(void *m) {}
static void info(const void *m, nnt_model_info *o) {}
static nnt_status value_info(const void *m, int l, nnt_value_id s, const nnt_call_dims *d, nnt_value_info *o)
{
    return NNT_ERR_UNSUPPORTED;
}
static nnt_status build_tree(const void *m, nnt_tree *t, nnt_error *e) { return NNT_ERR_UNSUPPORTED; }
static nnt_status forward(void *m, nnt_run *r, const nnt_forward_args *a, nnt_error *e) { return NNT_ERR_UNSUPPORTED; }
static nnt_status project(void *m, nnt_run *r, const nnt_tensor *x, int s, nnt_tensor *y, nnt_error *e)
{
    return NNT_ERR_UNSUPPORTED;
}

static const char *const ARCHS[] = {"ConsumerProbeForCausalLM", NULL};
static const char *const TYPES[] = {"consumer_probe", NULL};
static const nnt_rename_rule RENAMES[] = {{NULL, NULL, NULL}};

NNT_PLUGIN_EXPORT const nnt_family_descriptor nnt_family_plugin = {
    .header = NNT_PLUGIN_HEADER(nnt_family_descriptor, NNT_PLUGIN_FAMILY, "consumer_probe", "0", "install test probe"),
    .architectures = ARCHS,
    .model_types = TYPES,
    .renames = RENAMES,
    .load = load,
    .unload = unload,
    .info = info,
    .value_info = value_info,
    .build_tree = build_tree,
    .forward = forward,
    .project = project,
    .cache_new = NULL,
    .cache_free = NULL,
};
