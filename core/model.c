/* model.c - loading a checkpoint through its family plugin, describing values, running a
 * forward under a trace, and the printout and support listings. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

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
    if (st == NNT_OK) {
        nnt_load_args args = {
            .struct_size = sizeof(nnt_load_args),
            .core = &rt->core,
            .ckpt = ck,
            .be = &be->ops,
            .be_ctx = be->be_ctx,
            .precision = fam->precision,
            .first_layer = first,
            .end_layer = end,
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

nnt_status nnt_model_load(nnt_runtime *rt, const char *dir, nnt_model **out)
{
    return load(rt, dir, 0, 0, out);
}

nnt_status nnt_model_load_stage(nnt_runtime *rt, const char *dir, int first_layer, int end_layer, nnt_model **out)
{
    if (rt && (first_layer < 0 || end_layer <= first_layer)) {
        if (out) *out = NULL;
        return nnt_err_set(&rt->err, NNT_ERR_INVALID_ARGUMENT,
                           "load a stage: blocks [%d, %d) are not a range; expected 0 <= first_layer < end_layer",
                           first_layer, end_layer);
    }
    return load(rt, dir, first_layer, end_layer, out);
}

void nnt_model_free(nnt_model *m)
{
    if (!m) return;
    if (m->impl) m->family->family->unload(m->impl);
    nnt_arena_free(m->arena);
    nnt_checkpoint_close(m->ckpt);
    free(m);
}

nnt_status nnt_model_memory(const nnt_model *m, nnt_memory *out)
{
    if (!m || !out) return NNT_ERR_INVALID_ARGUMENT;
    *out = m->memory;
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

/* Values the core serves itself on every family: the call's inputs and the derived
 * next-token distribution. Returns 1 when handled. */
static int core_slot_info(const nnt_model *m, nnt_value_id slot, const nnt_call_dims *d,
                          nnt_value_info *out)
{
    int64_t b = d ? d->batch : 0, s = d ? d->seq : 0;
    switch (slot) {
    case NNT_VALUE_INPUT_IDS:
    case NNT_VALUE_ATTENTION_MASK:
        out->dtype = NNT_I32;
        out->ndim = 2;
        out->shape[0] = b;
        out->shape[1] = s;
        break;
    case NNT_VALUE_INPUT_SIZE:
        out->dtype = NNT_I64;
        out->ndim = 1;
        out->shape[0] = 2;
        break;
    case NNT_VALUE_NEXT_TOKEN_PROBS:
        out->dtype = NNT_F32;
        out->ndim = 2;
        out->shape[0] = b;
        out->shape[1] = m->info.vocab_size;
        break;
    default: return 0;
    }
    out->served = 1;
    out->writable = 0;
    if (!d) out->ndim = 0;
    return 1;
}

nnt_status nnt_model_slot_info(const nnt_model *m, int layer, nnt_value_id slot,
                               const nnt_call_dims *dims, nnt_value_info *out, nnt_error *err)
{
    memset(out, 0, sizeof *out);
    nnt_module host = nnt_value_module(slot);
    if ((host == NNT_MODULE_MODEL) != (layer < 0))
        return nnt_err_set(err, NNT_ERR_INTERNAL, "slot %s asked with layer %d", nnt_value_name(slot), layer);
    if (!(host == NNT_MODULE_MODEL && core_slot_info(m, slot, dims, out))) {
        nnt_status st = m->family->family->value_info(m->impl, layer, slot, dims, out);
        if (st != NNT_OK)
            return nnt_err_set(err, st, "family %s could not describe %s on block %d", nnt_model_family(m),
                               nnt_value_name(slot), layer);
    }
    if (!out->layout) out->layout = nnt_value_layout(slot);
    if (!out->axes) out->axes = nnt_value_axes(slot);
    if (!out->served && !out->reason[0]) snprintf(out->reason, sizeof out->reason, "not provided by this family");
    return NNT_OK;
}

nnt_status nnt_model_value_info(const nnt_model *m, const char *path, const nnt_call_dims *dims,
                                nnt_value_info *info)
{
    if (!m || !path || !info) return NNT_ERR_INVALID_ARGUMENT;
    nnt_path p;
    nnt_status st = nnt_path_parse(m, path, &p, &m->rt->err);
    if (st != NNT_OK) return st;
    if (p.layer == NNT_LAYER_ALL)
        return nnt_err_set(&m->rt->err, NNT_ERR_PATH, "'%s': name one block, not '*'", path);
    return nnt_model_slot_info(m, p.layer, p.slot, dims, info, &m->rt->err);
}

/* ---------------------------------------------------------------------------------------- */
/* The forward.                                                                              */

/* Emission as families see it: the trace first, then the values derived from logits. */
static nnt_status host_emit(nnt_run *run, nnt_value_id slot, int layer, nnt_tensor *t)
{
    nnt_status st = nnt_run_emit(run, slot, layer, t);
    if (st != NNT_OK || slot != NNT_VALUE_LOGITS || !nnt_run_wants(run, NNT_VALUE_NEXT_TOKEN_PROBS, -1))
        return st;
    /* next_token_probs: softmax of the last position's logits, in float32 */
    int64_t B = t->shape[0], T = t->shape[1], V = t->shape[2];
    nnt_tensor probs;
    int64_t shape[2] = {B, V};
    if (nnt_tensor_alloc(&probs, NNT_F32, 2, shape) != NNT_OK)
        return nnt_err_set(run->err, NNT_ERR_OUT_OF_MEMORY, "no memory");
    float *p = probs.data;
    const nnt_plugin *be = run->model->family->be;
    for (int64_t b = 0; b < B && st == NNT_OK; b++) {
        const float *row = (const float *)t->data + (b * T + T - 1) * V;
        if (t->device)
            st = be->ops.download(be->be_ctx, p + b * V, row, (size_t)V * sizeof(float), run->err);
        else
            memcpy(p + b * V, row, (size_t)V * sizeof(float));
        if (st != NNT_OK) break;
        float mx = -INFINITY;
        for (int64_t v = 0; v < V; v++) mx = p[b * V + v] > mx ? p[b * V + v] : mx;
        double sum = 0.0;
        for (int64_t v = 0; v < V; v++) sum += (p[b * V + v] = expf(p[b * V + v] - mx));
        for (int64_t v = 0; v < V; v++) p[b * V + v] = (float)(p[b * V + v] / sum);
    }
    if (st == NNT_OK) st = nnt_run_emit(run, NNT_VALUE_NEXT_TOKEN_PROBS, -1, &probs);
    nnt_tensor_free(&probs);
    return st;
}

int nnt_stage_holds(int L, int first, int end, nnt_value_id slot, int layer)
{
    if (layer >= 0) return layer >= first && layer < end;
    switch (slot) {
    case NNT_VALUE_TOKEN_EMBEDDINGS:
    case NNT_VALUE_INPUT_IDS:
    case NNT_VALUE_ATTENTION_MASK:
    case NNT_VALUE_INPUT_SIZE: return first == 0;
    default: return end == L; /* the readout: final norm, lm_head, logits and what derives from them */
    }
}

static nnt_status api_emit(nnt_run *run, nnt_value_id slot, int layer, nnt_tensor *t)
{
    /* a pipeline stage's family emits only the values its stage holds */
    if (!nnt_stage_holds(run->model->info.num_layers, run->first_layer, run->end_layer, slot, layer)) {
        char path[160];
        nnt_path_format(slot, layer, path, sizeof path);
        return nnt_err_set(run->err, NNT_ERR_PLUGIN,
                           "family '%s' emitted %s in a pipeline stage of blocks %d..%d, which does not hold it "
                           "(nnt_forward_args' stage fields: first_layer %d, end_layer %d)",
                           nnt_model_family(run->model), path, run->first_layer, run->end_layer - 1, run->first_layer,
                           run->end_layer);
    }
    return host_emit(run, slot, layer, t);
}

static int api_wants(const nnt_run *run, nnt_value_id slot, int layer)
{
    return nnt_run_wants(run, slot, layer);
}

static nnt_status api_alloc(nnt_run *run, nnt_dtype dtype, int ndim, const int64_t *shape,
                            nnt_tensor *out, nnt_error *err)
{
    memset(out, 0, sizeof *out);
    if (ndim < 0 || ndim > NNT_MAX_DIMS || nnt_dtype_size(dtype) == 0)
        return nnt_err_set(err, NNT_ERR_INVALID_ARGUMENT, "bad tensor request (%d dims, dtype %s)", ndim,
                           nnt_dtype_name(dtype));
    out->dtype = dtype;
    out->ndim = ndim;
    for (int i = 0; i < ndim; i++) out->shape[i] = shape[i];
    out->device = run->model->family->be->backend->host_memory ? 0 : 1;
    if (dtype == NNT_F32 && run->model->family->precision == NNT_PRECISION_BF16) out->flags |= NNT_TENSOR_BF16_VALUES;
    return nnt_arena_alloc(run->arena, nnt_tensor_nbytes(out), &out->data, err);
}

static size_t api_mark(nnt_run *run)
{
    return nnt_arena_mark(run->arena);
}

static void api_release(nnt_run *run, size_t mark)
{
    nnt_arena_release(run->arena, mark);
}

static nnt_status api_set_error(nnt_error *err, nnt_status status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    nnt_err_setv(err, status, fmt, ap);
    va_end(ap);
    return status;
}

void nnt_core_api_init(nnt_core_api *api)
{
    *api = (nnt_core_api){
        .struct_size = sizeof(nnt_core_api),
        .set_error = api_set_error,
        .cfg_int = nnt_cfg_int,
        .cfg_float = nnt_cfg_float,
        .cfg_bool = nnt_cfg_bool,
        .cfg_string = nnt_cfg_string,
        .cfg_has = nnt_cfg_has,
        .cfg_int_list = nnt_cfg_int_list,
        .cfg_path = nnt_cfg_path,
        .cfg_is_null = nnt_cfg_is_null,
        .has_tensor = nnt_ck_has_tensor,
        .tensor = nnt_ck_tensor,
        .emit = api_emit,
        .wants = api_wants,
        .alloc = api_alloc,
        .arena_mark = api_mark,
        .arena_release = api_release,
        .tree_node = nnt_tree_node,
        .tensor_kv_heads = nnt_ck_tensor_kv_heads,
    };
}

/* Checks a pipeline stage's block range and buffers against model m and the call's dims. */
static nnt_status stage_check(const nnt_model *m, const nnt_stage_call *sc, int batch, int seq, nnt_error *err)
{
    int L = m->info.num_layers, S = m->info.num_streams > 0 ? m->info.num_streams : 1, H = m->info.hidden_size;
    int first = sc->first_layer, end = sc->end_layer;
    if (first < 0 || first >= L)
        return nnt_err_set(err, NNT_ERR_INVALID_ARGUMENT,
                           "stage: first_layer is %d; expected 0 <= first_layer < %d (the model's blocks are 0..%d)", first,
                           L, L - 1);
    if (end <= first || end > L)
        return nnt_err_set(err, NNT_ERR_INVALID_ARGUMENT,
                           "stage: end_layer is %d; expected first_layer < end_layer <= %d (first_layer %d; the stage "
                           "runs blocks first_layer..end_layer - 1)",
                           end, L, first);
    if (first > 0 && !sc->hidden_in)
        return nnt_err_set(err, NNT_ERR_INVALID_ARGUMENT,
                           "stage: hidden_in is NULL; a stage starting at block %d (first_layer > 0) starts from the "
                           "residual stream leaving block %d: float32 [batch %d, seq %d, streams %d, hidden %d]",
                           first, first - 1, batch, seq, S, H);
    if (first == 0 && sc->hidden_in)
        return nnt_err_set(err, NNT_ERR_INVALID_ARGUMENT,
                           "stage: hidden_in must be NULL for a stage starting at block 0 (first_layer 0): it embeds "
                           "input_ids");
    if (end < L && !sc->hidden_out)
        return nnt_err_set(err, NNT_ERR_INVALID_ARGUMENT,
                           "stage: hidden_out is NULL; a stage ending before the last block (end_layer %d < %d) writes "
                           "the residual stream leaving block %d: float32 [batch %d, seq %d, streams %d, hidden %d]",
                           end, L, end - 1, batch, seq, S, H);
    if (end == L && sc->hidden_out)
        return nnt_err_set(err, NNT_ERR_INVALID_ARGUMENT,
                           "stage: hidden_out must be NULL for a stage ending at the last block (end_layer %d): it "
                           "computes the readout (final_norm_output, logits) instead",
                           L);
    size_t bytes = (size_t)batch * (size_t)seq * (size_t)S * (size_t)H * sizeof(float);
    if (sc->hidden_in && sc->hidden_out) {
        const char *a = (const char *)sc->hidden_in, *b = (const char *)sc->hidden_out;
        if (a < b + bytes && b < a + bytes)
            return nnt_err_set(err, NNT_ERR_INVALID_ARGUMENT,
                               "stage: hidden_out overlaps hidden_in (each %zu bytes); the stream handed in is never "
                               "overwritten, so give two separate buffers",
                               bytes);
    }
    const nnt_plugin_header *fh = &m->family->family->header;
    if ((first > 0 || end < L) && fh->abi_major == 3 && fh->abi_minor < 2)
        return nnt_err_set(err, NNT_ERR_UNSUPPORTED,
                           "stage: family '%s' was built for plugin ABI %u.%u, which has no pipeline stages (added in "
                           "3.2); it runs only the whole model (first_layer 0, end_layer %d)",
                           fh->name, (unsigned)fh->abi_major, (unsigned)fh->abi_minor, L);
    return NNT_OK;
}

nnt_status nnt_model_forward(nnt_model *m, nnt_trace *t, nnt_session *ss, const int32_t *ids, const int32_t *mask,
                             int batch, int seq, const nnt_stage_call *stage, nnt_error *err)
{
    if (!ids || batch <= 0 || seq <= 0)
        return nnt_err_set(err, NNT_ERR_INVALID_ARGUMENT, "a forward needs token ids and batch, seq >= 1 (got %d, %d)",
                           batch, seq);
    int L = m->info.num_layers;
    nnt_stage_call whole = {.first_layer = 0, .end_layer = L};
    if (stage) {
        nnt_status st = stage_check(m, stage, batch, seq, err);
        if (st != NNT_OK) return st;
    } else {
        stage = &whole;
    }
    if (stage->first_layer < m->first_loaded || stage->end_layer > m->end_loaded)
        return nnt_err_set(err, NNT_ERR_INVALID_ARGUMENT,
                           "stage: blocks %d..%d were asked for, but this model was loaded with the weights of blocks "
                           "%d..%d only (nnt_model_load_stage)",
                           stage->first_layer, stage->end_layer - 1, m->first_loaded, m->end_loaded - 1);
    if (ss && ss->len > 0 && (stage->first_layer != ss->first_layer || stage->end_layer != ss->end_layer))
        return nnt_err_set(err, NNT_ERR_INVALID_ARGUMENT,
                           "stage: this session ran blocks %d..%d at its first call, and its caches hold only those "
                           "blocks' tokens; this call asks for blocks %d..%d (a session runs one stage at every call)",
                           ss->first_layer, ss->end_layer - 1, stage->first_layer, stage->end_layer - 1);
    int past = ss ? ss->len : 0;
    if (ss && (batch != ss->batch || past + seq > ss->capacity))
        return nnt_err_set(err, NNT_ERR_INVALID_ARGUMENT,
                           "the session holds %d rows and %d of %d tokens; this call brings %d rows of %d tokens",
                           ss->batch, past, ss->capacity, batch, seq);
    int64_t n = (int64_t)batch * seq;
    for (int64_t i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= m->info.vocab_size)
            return nnt_err_set(err, NNT_ERR_INVALID_ARGUMENT,
                               "token id %d at row %lld, position %lld is outside the vocabulary [0, %d)",
                               ids[i], (long long)(i / seq), (long long)(i % seq), m->info.vocab_size);
        if (mask && mask[i] != 0 && mask[i] != 1)
            return nnt_err_set(err, NNT_ERR_INVALID_ARGUMENT,
                               "attention_mask holds %d at row %lld, position %lld; expected 0 or 1", mask[i],
                               (long long)(i / seq), (long long)(i % seq));
        if (mask && past > 0 && !mask[i])
            return nnt_err_set(err, NNT_ERR_INVALID_ARGUMENT,
                               "attention_mask marks row %lld, position %lld of a continued call as padding; only a "
                               "prompt may be (left) padded", (long long)(i / seq), (long long)(i % seq));
    }
    int64_t full = (int64_t)batch * (past + seq);
    int32_t *all_mask = malloc((size_t)full * sizeof *all_mask), *pos = malloc((size_t)n * sizeof *pos);
    int32_t *call_mask = malloc((size_t)n * sizeof *call_mask);
    if (!pos || !all_mask || !call_mask) {
        free(pos);
        free(all_mask);
        free(call_mask);
        return nnt_err_set(err, NNT_ERR_OUT_OF_MEMORY, "no memory");
    }
    /* the whole mask so far, and positions: each row's real tokens count from 0 (padding at 0) */
    for (int b = 0; b < batch; b++) {
        int c = ss ? ss->count[b] : 0;
        for (int s = 0; s < past; s++) all_mask[(int64_t)b * (past + seq) + s] = ss->mask_hist[(int64_t)b * ss->capacity + s];
        for (int s = 0; s < seq; s++) {
            int64_t i = (int64_t)b * seq + s;
            int real = mask ? mask[i] : 1;
            call_mask[i] = real;
            all_mask[(int64_t)b * (past + seq) + past + s] = real;
            pos[i] = real ? c : 0;
            c += real;
        }
    }
    const nnt_plugin *be = m->family->be;
    int step = ss ? ss->step : 0;
    /* the residual stream handed in and out, host memory [batch, seq, streams, hidden] */
    int64_t S = m->info.num_streams > 0 ? m->info.num_streams : 1;
    nnt_tensor hidden_in = {.dtype = NNT_F32, .ndim = 4, .shape = {batch, seq, S, m->info.hidden_size},
                            .data = (void *)stage->hidden_in};
    nnt_tensor hidden_out = hidden_in;
    hidden_out.data = stage->hidden_out;
    nnt_forward_args args = {
        .struct_size = sizeof(nnt_forward_args),
        .batch = batch,
        .seq = seq,
        .past = past,
        .input_ids = ids,
        .attention_mask = all_mask,
        .positions = pos,
        .be = &be->ops,
        .be_ctx = be->be_ctx,
        .step = step,
        .cache = ss ? ss->cache : NULL,
        .first_layer = stage->first_layer,
        .end_layer = stage->end_layer,
        .hidden_in = stage->hidden_in ? &hidden_in : NULL,
        .hidden_out = stage->hidden_out ? &hidden_out : NULL,
    };
    nnt_run run = {
        .model = m,
        .trace = t,
        .arena = m->arena,
        .err = err,
        .dims = {.batch = batch, .seq = seq, .past = past},
        .step = step,
        .args = &args,
        .current_request = -1,
        .first_layer = stage->first_layer,
        .end_layer = stage->end_layer,
    };
    nnt_arena_reset(m->arena);
    nnt_status st = NNT_OK;
    if (t && !ss) { /* a single forward: every steering position must name one of its tokens */
        int *lens = malloc((size_t)batch * sizeof *lens);
        if (!lens) st = nnt_err_set(err, NNT_ERR_OUT_OF_MEMORY, "no memory");
        for (int b = 0; lens && b < batch; b++) {
            lens[b] = 0;
            for (int s = 0; s < seq; s++) lens[b] += call_mask[(int64_t)b * seq + s];
        }
        if (lens) st = nnt_trace_check_positions(t, lens, batch, 1, err);
        free(lens);
    }
    if (st == NNT_OK && t)
        st = nnt_trace_prepare(t, &run.dims, step, ss && (step > 0 || ss->keep_results), stage->first_layer,
                               stage->end_layer, err);
    if (stage->check_only) goto done;
    if (st == NNT_OK && t) {
        /* the call's inputs, as the core holds them */
        nnt_tensor tids = {.dtype = NNT_I32, .ndim = 2, .shape = {batch, seq}, .data = (void *)ids};
        nnt_tensor tmask = {.dtype = NNT_I32, .ndim = 2, .shape = {batch, seq}, .data = call_mask};
        int64_t size[2] = {batch, seq};
        nnt_tensor tsize = {.dtype = NNT_I64, .ndim = 1, .shape = {2}, .data = size};
        st = nnt_run_emit(&run, NNT_VALUE_INPUT_IDS, -1, &tids);
        if (st == NNT_OK) st = nnt_run_emit(&run, NNT_VALUE_ATTENTION_MASK, -1, &tmask);
        if (st == NNT_OK) st = nnt_run_emit(&run, NNT_VALUE_INPUT_SIZE, -1, &tsize);
    }
    if (st == NNT_OK) st = m->family->family->forward(m->impl, &run, &args, err);
    /* the weights read in place must still be the files opened (checked on every call, so at
     * every session and generation step): a change explains any other error */
    nnt_status cs = nnt_ck_check_files(m->ckpt, err);
    if (cs != NNT_OK) st = cs;
    if (st == NNT_OK && t) st = nnt_trace_check_emitted(t, err);
    if (st == NNT_OK && ss) {
        for (int b = 0; b < batch; b++)
            for (int s = 0; s < seq; s++) {
                ss->mask_hist[(int64_t)b * ss->capacity + past + s] = call_mask[(int64_t)b * seq + s];
                ss->count[b] += call_mask[(int64_t)b * seq + s];
            }
        ss->len += seq;
        ss->step++;
        ss->first_layer = stage->first_layer;
        ss->end_layer = stage->end_layer;
    }
done:
    nnt_arena_reset(m->arena);
    free(pos);
    free(all_mask);
    free(call_mask);
    return st;
}

nnt_status nnt_trace_run(nnt_trace *t, const int32_t *ids, const int32_t *mask, int batch, int seq)
{
    if (!t) return NNT_ERR_INVALID_ARGUMENT;
    nnt_model *m = nnt_trace_model(t);
    nnt_err_clear(&m->rt->err);
    return nnt_model_forward(m, t, NULL, ids, mask, batch, seq, NULL, &m->rt->err);
}

nnt_status nnt_trace_run_stage(nnt_trace *t, const int32_t *ids, const int32_t *mask, int batch, int seq,
                               int first_layer, int end_layer, const float *hidden_in, float *hidden_out)
{
    if (!t) return NNT_ERR_INVALID_ARGUMENT;
    nnt_model *m = nnt_trace_model(t);
    nnt_err_clear(&m->rt->err);
    nnt_stage_call sc = {first_layer, end_layer, hidden_in, hidden_out, 0};
    return nnt_model_forward(m, t, NULL, ids, mask, batch, seq, &sc, &m->rt->err);
}

nnt_status nnt_trace_check_stage(nnt_trace *t, const int32_t *ids, const int32_t *mask, int batch, int seq,
                                 int first_layer, int end_layer, const float *hidden_in, float *hidden_out)
{
    if (!t) return NNT_ERR_INVALID_ARGUMENT;
    nnt_model *m = nnt_trace_model(t);
    nnt_err_clear(&m->rt->err);
    nnt_stage_call sc = {first_layer, end_layer, hidden_in, hidden_out, 1};
    return nnt_model_forward(m, t, NULL, ids, mask, batch, seq, &sc, &m->rt->err);
}

/* ---------------------------------------------------------------------------------------- */
/* Listings.                                                                                 */

nnt_status nnt_model_print(const nnt_model *m, FILE *out)
{
    if (!m || !out) return NNT_ERR_INVALID_ARGUMENT;
    nnt_tree *tree = nnt_tree_new();
    if (!tree) return nnt_err_set(&m->rt->err, NNT_ERR_OUT_OF_MEMORY, "no memory");
    nnt_status st = m->family->family->build_tree(m->impl, tree, &m->rt->err);
    if (st == NNT_OK) st = nnt_tree_print(tree, m, out, &m->rt->err);
    nnt_tree_free(tree);
    /* the family's notes, after the tree */
    const char *note;
    for (int i = 0; st == NNT_OK && nnt_model_note(m, i, &note); i++) fprintf(out, "%s  - %s\n", i ? "" : "notes:\n", note);
    return st;
}

int nnt_model_note(const nnt_model *m, int i, const char **text)
{
    if (text) *text = NULL;
    if (!m || i < 0 || i >= NNT_FAMILY_MAX_NOTES || !m->family->family->note) return 0;
    /* notes are counted from 0 without gaps: note i exists only when notes 0..i-1 do */
    for (int k = 0; k <= i; k++) {
        const char *s = m->family->family->note(m->impl, k);
        if (!s) return 0;
        if (k == i && text) *text = s;
    }
    return 1;
}

static const char *host_label(nnt_module h, int layer, char *buf, size_t n)
{
    if (h == NNT_MODULE_MODEL)
        snprintf(buf, n, "model");
    else if (h == NNT_MODULE_LAYER)
        snprintf(buf, n, "layers[%d]", layer);
    else
        snprintf(buf, n, "layers[%d].%s", layer, nnt_module_name(h));
    return buf;
}

/* One block's rows as text, for grouping identical blocks. */
static nnt_status block_rows(const nnt_model *m, int layer, char **text, nnt_error *err)
{
    size_t cap = 8192, len = 0;
    char *s = malloc(cap);
    if (!s) return nnt_err_set(err, NNT_ERR_OUT_OF_MEMORY, "no memory");
    for (int h = NNT_MODULE_LAYER; h < NNT_MODULE_COUNT; h++) {
        for (int sl = 0; sl < NNT_VALUE_COUNT; sl++) {
            if ((int)nnt_value_module((nnt_value_id)sl) != h) continue;
            nnt_value_info vi;
            nnt_status st = nnt_model_slot_info(m, layer, (nnt_value_id)sl, NULL, &vi, err);
            if (st != NNT_OK) {
                free(s);
                return st;
            }
            char line[800];
            const char *hn = h == NNT_MODULE_LAYER ? "(block)" : nnt_module_name((nnt_module)h);
            if (vi.served)
                snprintf(line, sizeof line, "  %-12s %-24s yes  %-14s %-38s %s %s\n", hn, nnt_value_name((nnt_value_id)sl),
                         vi.layout, vi.axes, nnt_dtype_name(vi.dtype), vi.writable ? "rw" : "ro");
            else
                snprintf(line, sizeof line, "  %-12s %-24s no   %s\n", hn, nnt_value_name((nnt_value_id)sl), vi.reason);
            size_t l = strlen(line);
            if (len + l + 1 > cap) {
                cap = 2 * (len + l + 1);
                char *g = realloc(s, cap);
                if (!g) {
                    free(s);
                    return nnt_err_set(err, NNT_ERR_OUT_OF_MEMORY, "no memory");
                }
                s = g;
            }
            memcpy(s + len, line, l + 1);
            len += l;
        }
    }
    *text = s;
    return NNT_OK;
}

nnt_status nnt_model_support(const nnt_model *m, FILE *out, int tsv)
{
    if (!m || !out) return NNT_ERR_INVALID_ARGUMENT;
    nnt_error *err = &m->rt->err;
    int L = m->info.num_layers;
    if (tsv) {
        fprintf(out, "host\tblock\tvalue\tserved\tlayout\taxes\tdtype\twritable\treason\n");
        for (int layer = -1; layer < L; layer++)
            for (int h = layer < 0 ? NNT_MODULE_MODEL : NNT_MODULE_LAYER; h < (layer < 0 ? NNT_MODULE_LAYER : NNT_MODULE_COUNT); h++)
                for (int sl = 0; sl < NNT_VALUE_COUNT; sl++) {
                    if ((int)nnt_value_module((nnt_value_id)sl) != h) continue;
                    nnt_value_info vi;
                    nnt_status st = nnt_model_slot_info(m, layer, (nnt_value_id)sl, NULL, &vi, err);
                    if (st != NNT_OK) return st;
                    char hb[64];
                    fprintf(out, "%s\t%s%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", host_label((nnt_module)h, layer, hb, sizeof hb),
                            "", layer, nnt_value_name((nnt_value_id)sl), vi.served ? "yes" : "no",
                            vi.served ? vi.layout : "-", vi.served ? vi.axes : "-",
                            vi.served ? nnt_dtype_name(vi.dtype) : "-", vi.served ? (vi.writable ? "yes" : "no") : "-",
                            vi.served ? "" : vi.reason);
                }
        return NNT_OK;
    }
    fprintf(out, "%s (%s), family %s, backend %s, %d blocks\n\nmodel\n", m->info.root_class,
            m->info.architecture, nnt_model_family(m), nnt_model_backend(m), L);
    for (int sl = 0; sl < NNT_VALUE_COUNT; sl++) {
        if (nnt_value_module((nnt_value_id)sl) != NNT_MODULE_MODEL) continue;
        nnt_value_info vi;
        nnt_status st = nnt_model_slot_info(m, -1, (nnt_value_id)sl, NULL, &vi, err);
        if (st != NNT_OK) return st;
        if (vi.served)
            fprintf(out, "  %-12s %-24s yes  %-14s %-38s %s %s\n", "model", nnt_value_name((nnt_value_id)sl), vi.layout,
                    vi.axes, nnt_dtype_name(vi.dtype), vi.writable ? "rw" : "ro");
        else
            fprintf(out, "  %-12s %-24s no   %s\n", "model", nnt_value_name((nnt_value_id)sl), vi.reason);
    }
    char **texts = calloc((size_t)L + 1, sizeof *texts);
    if (!texts) return nnt_err_set(err, NNT_ERR_OUT_OF_MEMORY, "no memory");
    nnt_status st = NNT_OK;
    for (int l = 0; l < L && st == NNT_OK; l++) st = block_rows(m, l, &texts[l], err);
    for (int l = 0; l < L && st == NNT_OK;) {
        int j = l;
        while (j + 1 < L && strcmp(texts[j + 1], texts[l]) == 0) j++;
        if (j == l)
            fprintf(out, "\nlayers[%d]\n%s", l, texts[l]);
        else
            fprintf(out, "\nlayers[%d..%d] (%d identical blocks)\n%s", l, j, j - l + 1, texts[l]);
        l = j + 1;
    }
    for (int l = 0; l < L; l++) free(texts[l]);
    free(texts);
    return st;
}

/* ---------------------------------------------------------------------------------------- */
/* Operations.                                                                               */

nnt_status nnt_project_on_vocab(nnt_model *m, const nnt_tensor *x, nnt_tensor *out)
{
    if (!m || !x || !out || !x->data || x->device) return NNT_ERR_INVALID_ARGUMENT;
    nnt_error *err = &m->rt->err;
    nnt_err_clear(err);
    memset(out, 0, sizeof *out);
    const nnt_model_info *info = &m->info;
    int64_t H = info->hidden_size, V = info->vocab_size;
    if (m->end_loaded < info->num_layers)
        return nnt_err_set(err, NNT_ERR_UNSUPPORTED,
                           "project_on_vocab: this model was loaded with blocks %d..%d only, without the final norm and "
                           "lm_head (the stage ending at block %d holds them)",
                           m->first_loaded, m->end_loaded - 1, info->num_layers - 1);
    if (x->ndim < 1 || x->shape[x->ndim - 1] != H) {
        char got[96];
        return nnt_err_set(err, NNT_ERR_SHAPE, "project_on_vocab: x has shape %s; its last axis must be hidden_size %lld",
                           nnt_shape_str(x, got, sizeof got), (long long)H);
    }
    int streams = info->num_streams > 1 && (x->ndim == 2 || x->ndim == 4) && x->shape[x->ndim - 2] == info->num_streams;
    int64_t per = streams ? (int64_t)info->num_streams * H : H;
    int64_t rows = nnt_tensor_numel(x) / per;
    const nnt_plugin *be = m->family->be;
    nnt_run run = {.model = m,
                   .trace = NULL,
                   .arena = m->arena,
                   .err = err,
                   .dims = {.batch = 1, .seq = (int)rows, .past = 0},
                   .step = 0,
                   .args = NULL,
                   .current_request = -1,
                   .first_layer = 0,
                   .end_layer = info->num_layers};
    nnt_arena_reset(m->arena);
    nnt_tensor dx = {0}, dy = {0};
    int64_t xs[3] = {rows, streams ? info->num_streams : H, H};
    int64_t ys[2] = {rows, V};
    float *host = malloc((size_t)nnt_tensor_numel(x) * sizeof(float));
    nnt_status st = host ? nnt_convert(x->data, x->dtype, host, NNT_F32, nnt_tensor_numel(x), err)
                         : nnt_err_set(err, NNT_ERR_OUT_OF_MEMORY, "no memory");
    if (st == NNT_OK) st = api_alloc(&run, NNT_F32, streams ? 3 : 2, xs, &dx, err);
    if (st == NNT_OK) st = api_alloc(&run, NNT_F32, 2, ys, &dy, err);
    if (st == NNT_OK) st = be->ops.upload(be->be_ctx, dx.data, host, nnt_tensor_nbytes(&dx), err);
    if (st == NNT_OK) st = m->family->family->project(m->impl, &run, &dx, streams, &dy, err);
    if (st == NNT_OK) {
        int64_t shape[NNT_MAX_DIMS];
        int nd = x->ndim - (streams ? 1 : 0);
        for (int i = 0; i < nd - 1; i++) shape[i] = x->shape[i];
        shape[nd - 1] = V;
        if (nnt_tensor_alloc(out, NNT_F32, nd, shape) != NNT_OK)
            st = nnt_err_set(err, NNT_ERR_OUT_OF_MEMORY, "no memory");
        else
            st = be->ops.download(be->be_ctx, out->data, dy.data, nnt_tensor_nbytes(out), err);
        if (st != NNT_OK) nnt_tensor_free(out);
    }
    free(host);
    nnt_arena_reset(m->arena);
    return st;
}
