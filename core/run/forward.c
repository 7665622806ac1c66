/* forward.c - one forward call of a model under a trace: the checks of the call and its
 * pipeline stage, the masks and positions handed to the family, the run services the family
 * reaches through the routine table (emission, allocation in the run's arena), and the
 * session bookkeeping after the call. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "grad/tape.h"
#include "trace/trace_internal.h"

/* Emission as families see it: the trace first, then the values derived from logits. */
static nnt_status host_emit(nnt_run *run, nnt_value_id slot, int layer, nnt_tensor *t)
{
    nnt_progress at = {.struct_size = sizeof at, .kind = NNT_PROGRESS_VALUE, .layer = layer};
    if (nnt_progress_report(run->model->rt, &at)) { /* the caller's handler stops the forward here */
        char where[160];
        nnt_path_format(run->model, slot, layer, where, sizeof where);
        return nnt_progress_stopped(run->err, where);
    }
    nnt_status st = nnt_run_emit(run, slot, layer, t);
    if (st == NNT_OK) st = nnt_trace_grad_emit(run, slot, layer, t);
    if (st != NNT_OK || slot != NNT_VALUE_LOGITS || !nnt_run_wants(run, NNT_VALUE_NEXT_TOKEN_PROBS, -1))
        return st;
    /* next_token_probs: softmax of the last position's logits, in float32 (the last row also
     * when the readout ran at chosen positions only: they ascend and hold the last) */
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

nnt_status nnt_run_api_emit(nnt_run *run, nnt_value_id slot, int layer, nnt_tensor *t)
{
    /* a pipeline stage's family emits only the values its stage holds */
    if (!nnt_stage_holds(run->model->info.num_layers, run->first_layer, run->end_layer, slot, layer)) {
        char path[160];
        nnt_path_format(run->model, slot, layer, path, sizeof path);
        return nnt_err_set(run->err, NNT_ERR_PLUGIN,
                           "family '%s' emitted %s in a pipeline stage of blocks %d..%d, which does not hold it "
                           "(nnt_forward_args' stage fields: first_layer %d, end_layer %d)",
                           nnt_model_family(run->model), path, run->first_layer, run->end_layer - 1, run->first_layer,
                           run->end_layer);
    }
    return host_emit(run, slot, layer, t);
}

int nnt_run_api_wants(const nnt_run *run, nnt_value_id slot, int layer)
{
    return nnt_run_wants(run, slot, layer);
}

int nnt_run_api_parts_wanted(const nnt_run *run, nnt_value_id slot, int layer, int axis, int64_t extent, int64_t *lo,
                             int64_t *hi)
{
    if (!lo || !hi || !nnt_stage_holds(run->model->info.num_layers, run->first_layer, run->end_layer, slot, layer))
        return 0;
    return nnt_trace_parts_wanted(run, slot, layer, axis, extent, lo, hi);
}

nnt_status nnt_run_api_emit_part(nnt_run *run, nnt_value_id slot, int layer, const nnt_tensor *part, int axis,
                                 int64_t first, int64_t extent)
{
    if (!nnt_stage_holds(run->model->info.num_layers, run->first_layer, run->end_layer, slot, layer)) {
        char path[160];
        nnt_path_format(run->model, slot, layer, path, sizeof path);
        return nnt_err_set(run->err, NNT_ERR_PLUGIN,
                           "family '%s' emitted a part of %s in a pipeline stage of blocks %d..%d, which does not hold it",
                           nnt_model_family(run->model), path, run->first_layer, run->end_layer - 1);
    }
    return nnt_trace_emit_part(run, slot, layer, part, axis, first, extent);
}

nnt_status nnt_run_alloc(nnt_run *run, nnt_dtype dtype, int ndim, const int64_t *shape,
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

size_t nnt_run_mark(nnt_run *run)
{
    return nnt_arena_mark(run->arena);
}

void nnt_run_release(nnt_run *run, size_t mark)
{
    nnt_arena_release(run->arena, mark);
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

/* The call's stage, session and inputs, checked before anything is allocated. */
static nnt_status check_call(nnt_model *m, nnt_session *ss, const int32_t *ids, const int32_t *mask, int batch, int seq,
                             const nnt_stage_call *stage, nnt_error *err)
{
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
    return NNT_OK;
}

/* The masks and positions a call hands the family: the whole mask so far [batch, past + seq]
 * (the session's history, then this call's), this call's own [batch, seq], and positions
 * [batch, seq] (each row's real tokens count from 0; padding at 0). */
typedef struct call_masks {
    int32_t *all, *call, *pos;
} call_masks;

static void masks_free(call_masks *c)
{
    free(c->all);
    free(c->call);
    free(c->pos);
}

static nnt_status masks_build(const nnt_session *ss, const int32_t *mask, int batch, int seq, call_masks *c,
                              nnt_error *err)
{
    int past = ss ? ss->len : 0;
    int64_t n = (int64_t)batch * seq;
    c->all = malloc((size_t)batch * (size_t)(past + seq) * sizeof *c->all);
    c->call = malloc((size_t)n * sizeof *c->call);
    c->pos = malloc((size_t)n * sizeof *c->pos);
    if (!c->all || !c->call || !c->pos) {
        masks_free(c);
        return nnt_err_set(err, NNT_ERR_OUT_OF_MEMORY, "no memory");
    }
    for (int b = 0; b < batch; b++) {
        int count = ss ? ss->count[b] : 0;
        for (int s = 0; s < past; s++) c->all[(int64_t)b * (past + seq) + s] = ss->mask_hist[(int64_t)b * ss->capacity + s];
        for (int s = 0; s < seq; s++) {
            int64_t i = (int64_t)b * seq + s;
            int real = mask ? mask[i] : 1;
            c->call[i] = real;
            c->all[(int64_t)b * (past + seq) + past + s] = real;
            c->pos[i] = real ? count : 0;
            count += real;
        }
    }
    return NNT_OK;
}

/* The trace's checks and look-up table for the call: a single forward's steering positions
 * must name its tokens; then nnt_trace_prepare. */
static nnt_status trace_prepare(nnt_trace *t, const nnt_session *ss, const nnt_run *run, const int32_t *call_mask,
                                nnt_error *err)
{
    int batch = run->dims.batch, seq = run->dims.seq;
    nnt_status st = NNT_OK;
    if (nnt_trace_wants_grad(t) && (ss || (!nnt_tape_recording(run->model->tape) && !t->grad.unrecorded_pass)))
        return nnt_err_set(err, NNT_ERR_UNSUPPORTED,
                           "this trace asks for gradients, which are taken of one whole forward (nnt_trace_run); "
                           "generation, sessions and pipeline stages take none: drop its grad, metric and cotangent "
                           "requests here");
    if (!ss) {
        int *lens = malloc((size_t)batch * sizeof *lens);
        if (!lens) return nnt_err_set(err, NNT_ERR_OUT_OF_MEMORY, "no memory");
        for (int b = 0; b < batch; b++) {
            lens[b] = 0;
            for (int s = 0; s < seq; s++) lens[b] += call_mask[(int64_t)b * seq + s];
        }
        st = nnt_trace_check_positions(t, lens, batch, 1, err);
        free(lens);
    }
    if (st == NNT_OK)
        st = nnt_trace_prepare(t, &run->dims, run->step, (ss && (run->step > 0 || ss->keep_results)) || t->grad.keep_results,
                               run->first_layer,
                               run->end_layer, err);
    return st;
}

/* The call's inputs as the core holds them: input_ids, attention_mask, input_size. */
static nnt_status emit_inputs(nnt_run *run, const int32_t *ids, int32_t *call_mask)
{
    int batch = run->dims.batch, seq = run->dims.seq;
    nnt_tensor tids = {.dtype = NNT_I32, .ndim = 2, .shape = {batch, seq}, .data = (void *)ids};
    nnt_tensor tmask = {.dtype = NNT_I32, .ndim = 2, .shape = {batch, seq}, .data = call_mask};
    int64_t size[2] = {batch, seq};
    nnt_tensor tsize = {.dtype = NNT_I64, .ndim = 1, .shape = {2}, .data = size};
    nnt_status st = nnt_run_emit(run, NNT_VALUE_INPUT_IDS, -1, &tids);
    if (st == NNT_OK) st = nnt_run_emit(run, NNT_VALUE_ATTENTION_MASK, -1, &tmask);
    if (st == NNT_OK) st = nnt_run_emit(run, NNT_VALUE_INPUT_SIZE, -1, &tsize);
    return st;
}

/* After a call that went well: the session holds its tokens. */
static void session_advance(nnt_session *ss, const int32_t *call_mask, int batch, int seq, const nnt_stage_call *stage)
{
    for (int b = 0; b < batch; b++)
        for (int s = 0; s < seq; s++) {
            ss->mask_hist[(int64_t)b * ss->capacity + ss->len + s] = call_mask[(int64_t)b * seq + s];
            ss->count[b] += call_mask[(int64_t)b * seq + s];
        }
    ss->len += seq;
    ss->step++;
    ss->first_layer = stage->first_layer;
    ss->end_layer = stage->end_layer;
}

/* The family's forward on masks c, then the checks that follow every call. */
static nnt_status run_family(nnt_model *m, nnt_trace *t, nnt_session *ss, const int32_t *ids, int batch, int seq,
                             const nnt_stage_call *stage, call_masks *c, nnt_error *err)
{
    const nnt_plugin *be = m->family->be;
    int past = ss ? ss->len : 0, step = ss ? ss->step : 0;
    /* the residual stream handed in and out, host memory [batch, seq, streams, hidden] */
    int64_t S = m->info.num_streams > 0 ? m->info.num_streams : 1;
    nnt_tensor hidden_in = {.dtype = NNT_F32, .ndim = 4, .shape = {batch, seq, S, m->info.hidden_size},
                            .data = (void *)stage->hidden_in};
    nnt_tensor hidden_out = hidden_in;
    hidden_out.data = stage->hidden_out;
    nnt_forward_args args = {
        .struct_size = sizeof(nnt_forward_args),
        .batch = batch, .seq = seq, .past = past,
        .input_ids = ids, .attention_mask = c->all, .positions = c->pos,
        .be = &be->ops, .be_ctx = be->be_ctx,
        .step = step, .cache = ss ? ss->cache : NULL,
        .first_layer = stage->first_layer, .end_layer = stage->end_layer,
        .hidden_in = stage->hidden_in ? &hidden_in : NULL,
        .hidden_out = stage->hidden_out ? &hidden_out : NULL,
        .attention_block_bytes = m->rt && m->rt->ini ? m->rt->ini->attention_block_bytes : 0,
    };
    nnt_run run = {
        .model = m, .trace = t, .arena = m->arena, .err = err,
        .dims = {.batch = batch, .seq = seq, .past = past},
        .step = step, .args = &args, .current_request = -1,
        .first_layer = stage->first_layer, .end_layer = stage->end_layer,
    };
    nnt_status st = t ? trace_prepare(t, ss, &run, c->call, err) : NNT_OK;
    if (stage->check_only) return st;
    /* lm_head only at the positions the trace reads it (the last when it reads none) */
    int32_t *readout = NULL;
    int n_readout = 0;
    if (st == NNT_OK) st = nnt_trace_readout_positions(t, batch, seq, c->call, &readout, &n_readout, err);
    args.logits_positions = readout;
    args.n_logits_positions = n_readout;
    if (st == NNT_OK && t) st = emit_inputs(&run, ids, c->call);
    /* a gradient trace's every pass (the recorded one, recomputation's unrecorded first pass, a
     * stage's forward) runs attention as the same three ops, so the passes agree bit for bit */
    int unfused = m->rt && m->rt->ini && m->rt->ini->attention_unfused;
    nnt_tape_set_unfused(m->tape, unfused || (t && nnt_trace_wants_grad(t)));
    if (st == NNT_OK) st = m->family->family->forward(m->impl, &run, &args, err);
    nnt_tape_set_unfused(m->tape, unfused);
    free(readout);
    /* the weights read in place must still be the files opened (checked on every call, so at
     * every session and generation step): a change explains any other error */
    nnt_status cs = nnt_ck_check_files(m->ckpt, err);
    if (cs != NNT_OK) st = cs;
    if (st == NNT_OK && t) st = nnt_trace_check_emitted(t, err);
    return st;
}

nnt_status nnt_model_forward(nnt_model *m, nnt_trace *t, nnt_session *ss, const int32_t *ids, const int32_t *mask,
                             int batch, int seq, const nnt_stage_call *stage, nnt_error *err)
{
    if (!ids || batch <= 0 || seq <= 0)
        return nnt_err_set(err, NNT_ERR_INVALID_ARGUMENT, "a forward needs token ids and batch, seq >= 1 (got %d, %d)",
                           batch, seq);
    nnt_stage_call whole = {.first_layer = 0, .end_layer = m->info.num_layers};
    nnt_status st = stage ? stage_check(m, stage, batch, seq, err) : NNT_OK;
    if (!stage) stage = &whole;
    if (st == NNT_OK) st = check_call(m, ss, ids, mask, batch, seq, stage, err);
    call_masks c = {0};
    if (st == NNT_OK) st = masks_build(ss, mask, batch, seq, &c, err);
    if (st != NNT_OK) return st;
    nnt_arena_reset(m->arena);
    st = run_family(m, t, ss, ids, batch, seq, stage, &c, err);
    if (st == NNT_OK && ss && !stage->check_only) session_advance(ss, c.call, batch, seq, stage);
    nnt_arena_reset(m->arena);
    masks_free(&c);
    return st;
}
