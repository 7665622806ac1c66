/* core_api.c - the routine table (nnt_core_api) the core hands every family plugin. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

static nnt_status api_set_error(nnt_error *err, nnt_status status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    nnt_err_setv(err, status, fmt, ap);
    va_end(ap);
    return status;
}

/* cfg_int as families get it: a block or expert count a family allocates by is also bounded by
 * the checkpoint's tensors (nnt_ck_bound_count). */
static nnt_status api_cfg_int(const nnt_checkpoint *ck, const char *key, int64_t dflt, int required, int64_t *out,
                              nnt_error *err)
{
    nnt_status st = nnt_cfg_int(ck, key, dflt, required, out, err);
    if (st == NNT_OK && nnt_cfg_has(ck, key)) st = nnt_ck_bound_count(ck, key, *out, err);
    return st;
}

/* The slot tensor_kv_heads keeps for the layout of ABI 3.x: the routine moved into the family
 * kit (fam_weight_kv_heads) in ABI 3.4, so a plugin that still calls it is told to rebuild. */
static nnt_status api_tensor_kv_heads_moved(const nnt_checkpoint *ck, const char *k_name, const char *v_name,
                                            int64_t heads, int64_t k_head_dim, int64_t v_head_dim, int64_t in,
                                            nnt_tensor *k, nnt_tensor *v, nnt_error *err)
{
    (void)heads, (void)k_head_dim, (void)v_head_dim, (void)in, (void)k, (void)v;
    return nnt_err_set(err, NNT_ERR_UNSUPPORTED,
                       "%s: '%s' and '%s': the core's tensor_kv_heads routine moved into the family kit in ABI 3.4 "
                       "(fam_weight_kv_heads); this plugin calls the old routine and must be rebuilt against the "
                       "ABI 3.4 headers and family kit",
                       ck ? nnt_cfg_path(ck) : "tensor_kv_heads", k_name ? k_name : "?", v_name ? v_name : "?");
}

void nnt_core_api_init(nnt_core_api *api)
{
    *api = (nnt_core_api){
        .struct_size = sizeof(nnt_core_api),
        .set_error = api_set_error,
        .cfg_int = api_cfg_int,
        .cfg_float = nnt_cfg_float,
        .cfg_bool = nnt_cfg_bool,
        .cfg_string = nnt_cfg_string,
        .cfg_has = nnt_cfg_has,
        .cfg_int_list = nnt_cfg_int_list,
        .cfg_path = nnt_cfg_path,
        .cfg_is_null = nnt_cfg_is_null,
        .has_tensor = nnt_ck_has_tensor,
        .tensor = nnt_ck_tensor,
        .emit = nnt_run_api_emit,
        .wants = nnt_run_api_wants,
        .alloc = nnt_run_alloc,
        .arena_mark = nnt_run_mark,
        .arena_release = nnt_run_release,
        .tree_node = nnt_tree_node,
        .tensor_kv_heads = api_tensor_kv_heads_moved,
        .parts_wanted = nnt_run_api_parts_wanted,
        .emit_part = nnt_run_api_emit_part,
        .tensor_fp8 = nnt_ck_tensor_fp8,
    };
}
