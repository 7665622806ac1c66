/* load.c - loading a checkpoint through the family plugin that serves its architecture, and
 * the loaded model's accessors (info, family, backend, memory). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "grad/tape.h"

static const nnt_plugin *find_family(const nnt_runtime *rt, const char *const *archs,
                                     const char *model_type)
{
    for (int a = 0; archs[a]; a++)
        for (int i = 0; i < rt->plugins.n; i++) {
            const nnt_plugin *p = rt->plugins.items[i];
            if (p->kind != NNT_PLUGIN_FAMILY) continue;
            for (const char *const *x = p->family->architectures; x && *x; x++)
                if (strcmp(*x, archs[a]) == 0) return p;
        }
    if (model_type)
        for (int i = 0; i < rt->plugins.n; i++) {
            const nnt_plugin *p = rt->plugins.items[i];
            if (p->kind != NNT_PLUGIN_FAMILY) continue;
            for (const char *const *x = p->family->model_types; x && *x; x++)
                if (strcmp(*x, model_type) == 0) return p;
        }
    return NULL;
}

const nnt_plugin *nnt_runtime_find_family(const nnt_runtime *rt, const nnt_checkpoint *ck)
{
    const char *model_type = NULL;
    nnt_error ignored = {0};
    if (nnt_cfg_string(ck, "model_type", NULL, 0, &model_type, &ignored) != NNT_OK) model_type = NULL;
    return find_family(rt, nnt_cfg_architectures(ck), model_type);
}

static nnt_status no_family(nnt_runtime *rt, const nnt_checkpoint *ck, const char *const *archs,
                            const char *model_type)
{
    char served[600] = "";
    size_t k = 0;
    for (int i = 0; i < rt->plugins.n && k < sizeof served; i++) {
        const nnt_plugin *p = rt->plugins.items[i];
        if (p->kind != NNT_PLUGIN_FAMILY) continue;
        for (const char *const *x = p->family->architectures; x && *x && k < sizeof served; x++)
            k += (size_t)snprintf(served + k, sizeof served - k, "%s%s (%s)", k ? ", " : "", *x,
                                  p->family->header.name);
    }
    /* a plugin skipped while the runtime opened may be the one this checkpoint needs */
    char hint[NNT_ERROR_MSG_MAX / 2];
    nnt_plugins_skip_hint(&rt->plugins, model_type, archs[0], 1, hint, sizeof hint);
    return nnt_err_set(&rt->err, NNT_ERR_NOT_FOUND,
                       "%s: no installed family plugin serves architecture '%s' (model_type '%s'); "
                       "installed plugins serve: %s%s",
                       nnt_cfg_path(ck), archs[0] ? archs[0] : "(none listed)",
                       model_type ? model_type : "(none)", k ? served : "nothing (no family plugins loaded)", hint);
}

/* Loads dir with the weights of blocks [first, end) (end 0: every block). */
static nnt_status load(nnt_runtime *rt, const char *dir, int first, int end, nnt_model **out)
{
    if (!rt || !dir || !out) return NNT_ERR_INVALID_ARGUMENT;
    *out = NULL;
    nnt_err_clear(&rt->err);
    nnt_checkpoint *ck = NULL;
    nnt_status st = nnt_checkpoint_open(dir, &ck, &rt->err);
    if (st != NNT_OK) return st;
    const char *model_type = NULL;
    st = nnt_cfg_string(ck, "model_type", NULL, 0, &model_type, &rt->err);
    if (st != NNT_OK) {
        nnt_checkpoint_close(ck);
        return st;
    }
    const char *const *archs = nnt_cfg_architectures(ck);
    const nnt_plugin *fam = find_family(rt, archs, model_type);
    if (!fam) {
        st = no_family(rt, ck, archs, model_type);
        nnt_checkpoint_close(ck);
        return st;
    }
    if (!fam->be) { /* found in a plugin directory, but its backend is missing or failed */
        st = nnt_err_set(&rt->err, NNT_ERR_NOT_FOUND, "%s: family '%s' (%s) cannot load models: %s", nnt_cfg_path(ck),
                         fam->family->header.name, fam->file, fam->no_backend ? fam->no_backend : "it has no backend");
        nnt_checkpoint_close(ck);
        return st;
    }
    nnt_model *m = calloc(1, sizeof *m);
    if (!m) {
        nnt_checkpoint_close(ck);
        return nnt_err_set(&rt->err, NNT_ERR_OUT_OF_MEMORY, "no memory");
    }
    m->rt = rt;
    m->family = (nnt_plugin *)fam;
    m->ckpt = ck;
    const nnt_plugin *be = fam->be;
    st = nnt_arena_new(&be->ops, be->be_ctx, &m->arena, &rt->err);
    /* the family reaches its backend through the model's gradient tape, which passes every call
     * straight through except in a forward that a gradient was asked of (docs/gradients.md) */
    if (st == NNT_OK) st = nnt_tape_new(&be->ops, be->be_ctx, &m->tape, &rt->err);
    if (st == NNT_OK) {
        nnt_tape_record(m->tape, 0);
        nnt_tape_set_unfused(m->tape, rt->ini && rt->ini->attention_unfused);
        nnt_load_args args = {
            .struct_size = sizeof(nnt_load_args),
            .core = &rt->core,
            .ckpt = ck,
            .be = nnt_tape_ops(m->tape),
            .be_ctx = nnt_tape_ctx(m->tape),
            .precision = fam->precision,
            .first_layer = first,
            .end_layer = end,
            .weights = fam->weights,
        };
        uint64_t heap0 = nnt_heap_in_use();
        size_t dev0 = be->ops.weight_bytes(be->be_ctx);
        st = fam->family->load(&args, &m->impl, &rt->err);
        /* a file that changed or faulted while the family read it explains any other error */
        nnt_status cs = nnt_ck_check_files(ck, &rt->err);
        if (cs != NNT_OK) st = cs;
        uint64_t heap1 = nnt_heap_in_use();
        size_t dev1 = be->ops.weight_bytes(be->be_ctx), dev = dev1 > dev0 ? dev1 - dev0 : 0;
        nnt_ck_memory(ck, &m->memory.file_bytes, &m->memory.mapped_bytes, &m->memory.allocated_bytes);
        if (heap0 && heap1) /* everything the load left on the heap, a host backend's copies included */
            m->memory.allocated_bytes = heap1 > heap0 ? heap1 - heap0 : 0;
        else if (be->backend->host_memory)
            m->memory.allocated_bytes += dev;
        if (!be->backend->host_memory) m->memory.device_bytes = dev;
        m->memory.precision = fam->precision;
    }
    if (st != NNT_OK) {
        nnt_model_free(m);
        return st;
    }
    fam->family->info(m->impl, &m->info);
    if ((st = nnt_model_read_natives(m, &rt->err)) != NNT_OK) {
        nnt_model_free(m);
        return st;
    }
    int L = m->info.num_layers;
    m->first_loaded = end > 0 ? first : 0;
    m->end_loaded = end > 0 ? end : L;
    if (m->end_loaded > L) {
        st = nnt_err_set(&rt->err, NNT_ERR_INVALID_ARGUMENT,
                         "%s: a stage of blocks %d..%d was asked for, but the model has %d blocks (0..%d)", dir, first,
                         end - 1, L, L - 1);
        nnt_model_free(m);
        return st;
    }
    *out = m;
    return NNT_OK;
}

static nnt_status model_load_held(nnt_runtime *rt, const char *dir, nnt_model **out)
{
    return load(rt, dir, 0, 0, out);
}

nnt_status nnt_model_load(nnt_runtime *rt, const char *dir, nnt_model **out)
{
    NNT_GUARDED(rt, "nnt_model_load", model_load_held(rt, dir, out));
}

static nnt_status model_load_stage_held(nnt_runtime *rt, const char *dir, int first_layer, int end_layer,
                                        nnt_model **out)
{
    if (rt && (first_layer < 0 || end_layer <= first_layer)) {
        if (out) *out = NULL;
        return nnt_err_set(&rt->err, NNT_ERR_INVALID_ARGUMENT,
                           "load a stage: blocks [%d, %d) are not a range; expected 0 <= first_layer < end_layer",
                           first_layer, end_layer);
    }
    return load(rt, dir, first_layer, end_layer, out);
}

nnt_status nnt_model_load_stage(nnt_runtime *rt, const char *dir, int first_layer, int end_layer, nnt_model **out)
{
    NNT_GUARDED(rt, "nnt_model_load_stage", model_load_stage_held(rt, dir, first_layer, end_layer, out));
}

static void model_free_held(nnt_model *m)
{
    if (!m) return;
    if (m->impl) m->family->family->unload(m->impl);
    nnt_tape_free(m->tape); /* after the unload, which releases weights through it */
    nnt_tokenizer_free(m->tokenizer);
    nnt_arena_free(m->arena);
    nnt_checkpoint_close(m->ckpt);
    free(m);
}

void nnt_model_free(nnt_model *m)
{
    NNT_GUARDED_VOID((m ? m->rt : NULL), "nnt_model_free", model_free_held(m));
}

nnt_status nnt_model_memory(const nnt_model *m, nnt_memory *out)
{
    if (!m || !out) return NNT_ERR_INVALID_ARGUMENT;
    *out = m->memory;
    return NNT_OK;
}

nnt_status nnt_model_reencoding(const nnt_model *m, nnt_reencoding *out)
{
    if (!m || !out || out->struct_size != sizeof(nnt_reencoding)) return NNT_ERR_INVALID_ARGUMENT;
    nnt_ck_reencoding(m->ckpt, out);
    return NNT_OK;
}

const nnt_model_info *nnt_model_get_info(const nnt_model *m)
{
    return m ? &m->info : NULL;
}

const char *nnt_model_family(const nnt_model *m)
{
    return m ? m->family->family->header.name : "?";
}

const char *nnt_model_backend(const nnt_model *m)
{
    return m ? m->family->be->backend->header.name : "?";
}
