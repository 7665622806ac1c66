/* fam_moe.c - the mixture of experts and the dense SwiGLU MLP with their standard values:
 * router logits, top-k choice, per-expert products over the tokens routed to each expert,
 * weighted by the routing weights where they are (in backend memory when the backend has
 * scale_rows, so a gradient tape sees them; else through a host copy), per-slot outputs when
 * asked for, the shared expert. */
#include <stdlib.h>
#include <string.h>

#include <nnt/nnt_family_kit.h>

#define TRY(x)                                                                                                         \
    do {                                                                                                               \
        if ((st = (x)) != NNT_OK) goto done;                                                                           \
    } while (0)

nnt_status fam_mlp_forward(const fam_env *env, nnt_run *run, int layer, const fam_expert *w, float limit,
                           const nnt_call_dims *dims, const nnt_tensor *x, nnt_tensor *out, int emit,
                           nnt_error *err)
{
    const nnt_core_api *h = env->core;
    const nnt_backend_ops *be = env->be;
    void *bc = env->be_ctx;
    int64_t M = x->shape[0], I = w->gate.shape[0], B = dims->batch, T = dims->seq;
    nnt_status st;
    size_t mark = h->arena_mark(run);
    nnt_tensor g, u, act, neu;
    TRY(fam_alloc(env, run, NNT_F32, &g, err, NNT_SHAPE(M, I)));
    TRY(fam_alloc(env, run, NNT_F32, &u, err, NNT_SHAPE(M, I)));
    TRY(fam_alloc(env, run, NNT_F32, &act, err, NNT_SHAPE(M, I)));
    TRY(fam_alloc(env, run, NNT_F32, &neu, err, NNT_SHAPE(M, I)));
    TRY(fam_linear(env, run, layer, dims, x, &w->gate, &g, err));
    TRY(fam_linear(env, run, layer, dims, x, &w->up, &u, err));
    TRY(be->swiglu(bc, &g, &u, limit, &act, &neu, err));
    if (emit) {
        nnt_tensor a3 = fam_view(&act, NNT_SHAPE(B, T, I));
        int wanted = h->wants(run, NNT_VALUE_MLP_ACTIVATION, layer);
        TRY(h->emit(run, NNT_VALUE_MLP_ACTIVATION, layer, &a3));
        if (wanted) TRY(be->swiglu(bc, NULL, &u, limit, &act, &neu, err)); /* an edited activation feeds on */
        nnt_tensor n3 = fam_view(&neu, NNT_SHAPE(B, T, I));
        TRY(h->emit(run, NNT_VALUE_MLP_NEURONS, layer, &n3));
    }
    TRY(fam_linear(env, run, layer, dims, &neu, &w->down, out, err));
    if (emit) {
        nnt_tensor o3 = fam_view(out, NNT_SHAPE(B, T, out->shape[1]));
        TRY(h->emit(run, NNT_VALUE_MLP_OUTPUT, layer, &o3));
    }
done:
    h->arena_release(run, mark);
    return st;
}

nnt_status fam_moe_forward(const fam_env *env, nnt_run *run, int layer, const fam_moe *moe,
                           const nnt_call_dims *dims, const int32_t *ids, const nnt_tensor *x, nnt_tensor *out,
                           nnt_error *err)
{
    const nnt_core_api *h = env->core;
    const nnt_backend_ops *be = env->be;
    void *bc = env->be_ctx;
    int64_t M = x->shape[0], H = x->shape[1], E = moe->num_experts, K = moe->top_k, I = moe->intermediate;
    int64_t B = dims->batch, T = dims->seq;
    nnt_status st;
    size_t mark = h->arena_mark(run);
    int32_t *idx_h = NULL, *count = NULL, *rows = NULL, *slots = NULL;
    float *w_h = NULL, *scale = NULL;
    nnt_tensor logits, idx, wts, routed, per_slot = {0};

    /* router (in a bfloat16 model transformers keeps some routers' products in float32, and the
     * routing weights of most) */
    TRY(fam_alloc(env, run, NNT_F32, &logits, err, NNT_SHAPE(M, E)));
    nnt_tensor router = moe->router;
    if (moe->router_f32) {
        router.flags &= ~NNT_TENSOR_BF16_PRODUCTS;
        logits.flags &= ~NNT_TENSOR_BF16_VALUES;
    }
    TRY(be->linear(bc, x, &router, &logits, err));
    nnt_tensor l3 = fam_view(&logits, NNT_SHAPE(B, T, E));
    TRY(h->emit(run, NNT_VALUE_ROUTER_LOGITS, layer, &l3));
    TRY(fam_alloc(env, run, NNT_I32, &idx, err, NNT_SHAPE(M, K)));
    TRY(fam_alloc(env, run, NNT_F32, &wts, err, NNT_SHAPE(M, K)));
    if (!moe->route_bf16) wts.flags &= ~NNT_TENSOR_BF16_VALUES;
    nnt_route_params rp = moe->route;
    if (moe->tid2eid) { /* hash routing: the token id picks the experts */
        int32_t *given = malloc((size_t)(M * K) * sizeof *given);
        if (!given) {
            st = h->set_error(err, NNT_ERR_OUT_OF_MEMORY, "no memory for hash routing");
            goto done;
        }
        for (int64_t m = 0; m < M; m++)
            for (int64_t k = 0; k < K; k++) given[m * K + k] = moe->tid2eid[(int64_t)ids[m] * K + k];
        st = be->upload(bc, idx.data, given, (size_t)(M * K) * sizeof *given, err);
        free(given);
        if (st != NNT_OK) goto done;
        rp.indices_given = 1;
    }
    TRY(be->route(bc, &logits, moe->bias.data ? &moe->bias : NULL, &rp, &idx, &wts, err));
    nnt_tensor i3 = fam_view(&idx, NNT_SHAPE(B, T, K)), w3 = fam_view(&wts, NNT_SHAPE(B, T, K));
    TRY(h->emit(run, NNT_VALUE_EXPERT_INDICES, layer, &i3));
    TRY(h->emit(run, NNT_VALUE_EXPERT_WEIGHTS, layer, &w3));

    /* group routing slots by expert (host side: the choice only, which has no gradient). The
     * weights stay in backend memory when the backend scales rows by them (scale_rows, ABI 3.6;
     * a table too short to hold the entry lacks it); otherwise a host copy becomes the scatters'
     * row scales, constants to a gradient tape. */
    int on_backend = NNT_STRUCT_HAS(be, nnt_backend_ops, scale_rows) && be->scale_rows != NULL;
    idx_h = malloc((size_t)(M * K) * sizeof *idx_h);
    count = calloc((size_t)E + 1, sizeof *count);
    rows = malloc((size_t)(M * K) * sizeof *rows);
    slots = malloc((size_t)(M * K) * sizeof *slots);
    if (!on_backend) {
        w_h = malloc((size_t)(M * K) * sizeof *w_h);
        scale = malloc((size_t)(M * K) * sizeof *scale);
    }
    if (!idx_h || !count || !rows || !slots || (!on_backend && (!w_h || !scale))) {
        st = h->set_error(err, NNT_ERR_OUT_OF_MEMORY, "no memory for routing block %d", layer);
        goto done;
    }
    TRY(be->download(bc, idx_h, idx.data, (size_t)(M * K) * sizeof *idx_h, err));
    if (!on_backend) TRY(be->download(bc, w_h, wts.data, (size_t)(M * K) * sizeof *w_h, err));
    for (int64_t i = 0; i < M * K; i++) {
        if (idx_h[i] < 0 || idx_h[i] >= E) {
            st = h->set_error(err, NNT_ERR_INVALID_ARGUMENT,
                              "layers.%d.mlp.expert_indices holds %d at token %lld, slot %lld; experts are 0..%lld",
                              layer, idx_h[i], (long long)(i / K), (long long)(i % K), (long long)(E - 1));
            goto done;
        }
        count[idx_h[i] + 1]++;
    }
    for (int64_t e = 0; e < E; e++) count[e + 1] += count[e]; /* count[e] = start of expert e */
    int64_t max_n = 0;
    {
        int32_t *fill = calloc((size_t)E, sizeof *fill);
        if (!fill) {
            st = h->set_error(err, NNT_ERR_OUT_OF_MEMORY, "no memory");
            goto done;
        }
        for (int64_t i = 0; i < M * K; i++) { /* token order within each expert */
            int32_t e = idx_h[i];
            int64_t at = count[e] + fill[e]++;
            rows[at] = (int32_t)(i / K);
            slots[at] = (int32_t)i;
            if (scale) scale[at] = w_h[i];
        }
        for (int64_t e = 0; e < E; e++) max_n = fill[e] > max_n ? fill[e] : max_n;
        free(fill);
    }

    int want_slots = h->wants(run, NNT_VALUE_EXPERT_OUTPUTS, layer);
    TRY(fam_alloc(env, run, NNT_F32, &routed, err, NNT_SHAPE(M, H)));
    TRY(be->fill(bc, &routed, 0.0f, err));
    if (want_slots) {
        TRY(fam_alloc(env, run, NNT_F32, &per_slot, err, NNT_SHAPE(M * K, H)));
        TRY(be->fill(bc, &per_slot, 0.0f, err));
    }
    /* the experts' values by routing slot (native values, when asked): each stage over every expert
     * into a [M * K, features] tensor by slot, emitted (and edited) before the next stage reads it */
    int xids[4];
    int by_slot = max_n > 0 && fam_natives_experts(env, run, layer, moe, xids);
    if (max_n > 0) {
        nnt_tensor xe, g, u, a, y, sg, su, sa, sy;
        TRY(fam_alloc(env, run, NNT_F32, &xe, err, NNT_SHAPE(max_n, H)));
        TRY(fam_alloc(env, run, NNT_F32, &g, err, NNT_SHAPE(max_n, I)));
        TRY(fam_alloc(env, run, NNT_F32, &u, err, NNT_SHAPE(max_n, I)));
        TRY(fam_alloc(env, run, NNT_F32, &a, err, NNT_SHAPE(max_n, I)));
        TRY(fam_alloc(env, run, NNT_F32, &y, err, NNT_SHAPE(max_n, H)));
        if (by_slot) {
            TRY(fam_alloc(env, run, NNT_F32, &sg, err, NNT_SHAPE(M * K, I)));
            TRY(fam_alloc(env, run, NNT_F32, &su, err, NNT_SHAPE(M * K, I)));
            TRY(fam_alloc(env, run, NNT_F32, &sa, err, NNT_SHAPE(M * K, I)));
            TRY(fam_alloc(env, run, NNT_F32, &sy, err, NNT_SHAPE(M * K, H)));
            nnt_tensor s4;
            for (int stage = 0; stage < 3; stage++) {
                for (int64_t e = 0; e < E; e++) {
                    int n = (int)(count[e + 1] - count[e]);
                    if (n == 0) continue;
                    const int32_t *sl = slots + count[e];
                    nnt_tensor xn = fam_view(&xe, NNT_SHAPE((int64_t)n, H)), gn = fam_view(&g, NNT_SHAPE((int64_t)n, I)),
                               un = fam_view(&u, NNT_SHAPE((int64_t)n, I)), an = fam_view(&a, NNT_SHAPE((int64_t)n, I)),
                               yn = fam_view(&y, NNT_SHAPE((int64_t)n, H));
                    const fam_expert *ex = &moe->experts[e];
                    if (stage == 0) { /* gate and up projections */
                        TRY(be->gather_rows(bc, x, rows + count[e], n, &xn, err));
                        TRY(be->linear(bc, &xn, &ex->gate, &gn, err));
                        TRY(be->linear(bc, &xn, &ex->up, &un, err));
                        TRY(be->scatter_rows(bc, &gn, sl, NULL, n, &sg, err));
                        TRY(be->scatter_rows(bc, &un, sl, NULL, n, &su, err));
                    } else if (stage == 1) { /* the SwiGLU of the (edited) projections */
                        TRY(be->gather_rows(bc, &sg, sl, n, &gn, err));
                        TRY(be->gather_rows(bc, &su, sl, n, &un, err));
                        TRY(be->swiglu(bc, &gn, &un, moe->swiglu_limit, NULL, &an, err));
                        TRY(be->scatter_rows(bc, &an, sl, NULL, n, &sa, err));
                    } else { /* the down projection */
                        TRY(be->gather_rows(bc, &sa, sl, n, &an, err));
                        TRY(be->linear(bc, &an, &ex->down, &yn, err));
                        TRY(be->scatter_rows(bc, &yn, sl, NULL, n, &sy, err));
                    }
                }
                if (stage == 0) {
                    s4 = fam_view(&sg, NNT_SHAPE(B, T, K, I));
                    if (xids[0] >= 0) TRY(h->emit(run, (nnt_value_id)xids[0], layer, &s4));
                    s4 = fam_view(&su, NNT_SHAPE(B, T, K, I));
                    if (xids[1] >= 0) TRY(h->emit(run, (nnt_value_id)xids[1], layer, &s4));
                } else if (stage == 1) {
                    s4 = fam_view(&sa, NNT_SHAPE(B, T, K, I));
                    if (xids[2] >= 0) TRY(h->emit(run, (nnt_value_id)xids[2], layer, &s4));
                } else {
                    s4 = fam_view(&sy, NNT_SHAPE(B, T, K, H));
                    if (xids[3] >= 0) TRY(h->emit(run, (nnt_value_id)xids[3], layer, &s4));
                }
            }
        }
        for (int64_t e = 0; e < E; e++) {
            int n = (int)(count[e + 1] - count[e]);
            if (n == 0) continue;
            nnt_tensor xn = fam_view(&xe, NNT_SHAPE((int64_t)n, H)), gn = fam_view(&g, NNT_SHAPE((int64_t)n, I)),
                       un = fam_view(&u, NNT_SHAPE((int64_t)n, I)), an = fam_view(&a, NNT_SHAPE((int64_t)n, I)),
                       yn = fam_view(&y, NNT_SHAPE((int64_t)n, H));
            const fam_expert *ex = &moe->experts[e];
            if (by_slot) { /* computed above by slot: this expert's rows of the (edited) outputs */
                TRY(be->gather_rows(bc, &sy, slots + count[e], n, &yn, err));
            } else {
                TRY(be->gather_rows(bc, x, rows + count[e], n, &xn, err));
                TRY(be->linear(bc, &xn, &ex->gate, &gn, err));
                TRY(be->linear(bc, &xn, &ex->up, &un, err));
                TRY(be->swiglu(bc, &gn, &un, moe->swiglu_limit, NULL, &an, err));
                TRY(be->linear(bc, &an, &ex->down, &yn, err));
            }
            const float *sc = NULL; /* the rows' weights as host scales, or (NULL) already applied */
            if (on_backend)
                TRY(be->scale_rows(bc, &yn, &wts, slots + count[e], n, &yn, err)); /* wts [M, K] read by slot */
            else
                sc = scale + count[e];
            if (want_slots)
                TRY(be->scatter_rows(bc, &yn, slots + count[e], sc, n, &per_slot, err));
            else
                TRY(be->scatter_add_rows(bc, &yn, rows + count[e], sc, n, &routed, err));
        }
    }
    if (want_slots) {
        nnt_tensor s4 = fam_view(&per_slot, NNT_SHAPE(B, T, K, H));
        TRY(h->emit(run, NNT_VALUE_EXPERT_OUTPUTS, layer, &s4));
        nnt_tensor s3 = fam_view(&per_slot, NNT_SHAPE(M, K, H));
        TRY(be->sum_axis1(bc, &s3, &routed, err));
    }
    nnt_tensor r3 = fam_view(&routed, NNT_SHAPE(B, T, H));
    TRY(h->emit(run, NNT_VALUE_ROUTED_OUTPUT, layer, &r3));
    if (moe->has_shared) {
        nnt_tensor sh;
        TRY(fam_alloc(env, run, NNT_F32, &sh, err, NNT_SHAPE(M, H)));
        TRY(fam_mlp_forward(env, run, layer, &moe->shared, moe->swiglu_limit, dims, x, &sh, 0, err));
        nnt_tensor sh3 = fam_view(&sh, NNT_SHAPE(B, T, H));
        TRY(h->emit(run, NNT_VALUE_SHARED_EXPERT_OUTPUT, layer, &sh3));
        TRY(be->add(bc, &routed, &sh, out, err));
    } else {
        TRY(be->copy(bc, &routed, out, err));
    }
    nnt_tensor o3 = fam_view(out, NNT_SHAPE(B, T, H));
    TRY(h->emit(run, NNT_VALUE_MLP_OUTPUT, layer, &o3));
done:
    free(idx_h);
    free(w_h);
    free(count);
    free(rows);
    free(slots);
    free(scale);
    h->arena_release(run, mark);
    return st;
}
