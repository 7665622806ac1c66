/* version.c - the versions of the running libnnt (nnt_version, nnt_abi_version) and the sizes
 * of the public structs it was compiled with (nnt_struct_size), so that a program or binding
 * built against other headers can tell before it passes a struct. See nnt.h. */
#include <string.h>

#include "nnt/nnt.h"
#include "nnt/nnt_backend.h"
#include "nnt/nnt_family.h"
#include "nnt/nnt_transport.h"

const char *nnt_version(void)
{
    return NNT_VERSION_STRING;
}

uint32_t nnt_abi_version(void)
{
    return ((uint32_t)NNT_ABI_MAJOR << 16) | (uint32_t)NNT_ABI_MINOR;
}

typedef struct struct_size {
    const char *name;
    size_t size;
} struct_size;

#define SIZE_OF(T) {#T, sizeof(T)}

/* Every complete struct of the public headers: the user API (nnt_types.h, nnt.h,
 * nnt_tokenizer.h, nnt_request.h, nnt_methods.h, nnt_sae.h) and the plugin ABI (nnt_plugin.h,
 * nnt_family.h, nnt_backend.h, nnt_transport.h). */
static const struct_size SIZES[] = {
    SIZE_OF(nnt_tensor),           SIZE_OF(nnt_shape),
    SIZE_OF(nnt_error),            SIZE_OF(nnt_call_dims),
    SIZE_OF(nnt_value_info),       SIZE_OF(nnt_model_info),
    SIZE_OF(nnt_memory),           SIZE_OF(nnt_reencoding),       SIZE_OF(nnt_checkpoint_summary),
    SIZE_OF(nnt_generate_opts),    SIZE_OF(nnt_stage_link),
    SIZE_OF(nnt_plan_opts),        SIZE_OF(nnt_plan_stage),
    SIZE_OF(nnt_plan_summary),     SIZE_OF(nnt_tokenizer_hints),
    SIZE_OF(nnt_token_batch),      SIZE_OF(nnt_request_source),
    SIZE_OF(nnt_request_callback), SIZE_OF(nnt_batch),
    SIZE_OF(nnt_request_patch_opts), SIZE_OF(nnt_metric),
    SIZE_OF(nnt_lens_result),      SIZE_OF(nnt_patch_spec),
    SIZE_OF(nnt_patch_result),     SIZE_OF(nnt_run_opts),
    SIZE_OF(nnt_attribute_spec),   SIZE_OF(nnt_attribute_result),
    SIZE_OF(nnt_request_attribute_opts), SIZE_OF(nnt_harvest_spec), SIZE_OF(nnt_harvest_progress),
    SIZE_OF(nnt_sae_info),
    SIZE_OF(nnt_plugin_header),
    SIZE_OF(nnt_rename_rule),      SIZE_OF(nnt_forward_args),
    SIZE_OF(nnt_core_api),         SIZE_OF(nnt_load_args),
    SIZE_OF(nnt_cost_args),        SIZE_OF(nnt_family_descriptor),
    SIZE_OF(nnt_attn_mask),        SIZE_OF(nnt_route_params),
    SIZE_OF(nnt_backend_ops),      SIZE_OF(nnt_backend_options),
    SIZE_OF(nnt_backend_descriptor), SIZE_OF(nnt_transport_descriptor),
};

size_t nnt_struct_size(const char *name)
{
    if (!name) return 0;
    for (size_t i = 0; i < sizeof SIZES / sizeof SIZES[0]; i++)
        if (strcmp(SIZES[i].name, name) == 0) return SIZES[i].size;
    return 0;
}
