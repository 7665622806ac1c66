/* pipeline.c - one model run as pipeline stages over a transport plugin (nnt_methods.h): the
 * stage split, the residual stream handed from rank to rank, tokens shared at each generation
 * step, the saved values gathered to one rank, and one rank's failure ending every rank's part.
 *
 * Failures. A rank whose own step fails keeps the message (nnt_last_error) and tells the others
 * at once, so that their waits end: they fail with the transport's message naming this rank
 * (nnt_pipeline_fault: NNT_PIPELINE_FAULT_REMOTE). A wait that ran past the INI's timeout with no
 * such notice (NNT_PIPELINE_FAULT_TRANSPORT) leaves the caller to end the job, since the rank it
 * waited for may never listen again (nnt_pipeline_abort). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "internal.h"

struct nnt_pipeline {
    nnt_runtime *rt;
    const nnt_transport_descriptor *tp;
    nnt_transport *t;
    int rank, size;
    int first, end, layers; /* this rank's blocks [first, end) of a model of `layers` blocks */
    const nnt_model *m;
    int notified;              /* this rank has told the others it failed */
    nnt_pipeline_fault fault;  /* what ended the latest failed call */
};

static nnt_error *perr(nnt_pipeline *p)
{
    return &p->rt->err;
}

/* This rank failed on its own (status st, the runtime's message already set or given by fmt):
 * the message is prefixed with the rank, and the others are told. Returns st. */
static nnt_status local_fail(nnt_pipeline *p, nnt_status st, const char *what)
{
    nnt_err_prefix(perr(p), "%s", what);
    if (!p->notified) p->tp->notify_failure(p->t, nnt_last_error(p->rt)); /* the transport names this rank */
    nnt_err_prefix(perr(p), "rank %d of %d", p->rank, p->size);
    p->notified = 1;
    p->fault = NNT_PIPELINE_FAULT_LOCAL;
    return st ? st : NNT_ERR_INTERNAL;
}

/* A transport call failed with err: another rank's notice explains it (REMOTE), or a wait of
 * this rank ran out of time (TRANSPORT). Returns NNT_ERR_STATE with the transport's message. */
static nnt_status transport_fail(nnt_pipeline *p, const nnt_error *err)
{
    p->fault = p->tp->failed_rank(p->t) >= 0 ? NNT_PIPELINE_FAULT_REMOTE : NNT_PIPELINE_FAULT_TRANSPORT;
    return nnt_err_set(perr(p), NNT_ERR_STATE, "%s", err->msg);
}

nnt_status nnt_pipeline_open(nnt_runtime *rt, nnt_pipeline **out)
{
    if (!rt || !out) return NNT_ERR_INVALID_ARGUMENT;
    *out = NULL;
    const nnt_transport_descriptor *tp = NULL;
    nnt_status st = nnt_runtime_transport(rt, &tp);
    if (st != NNT_OK) {
        nnt_err_prefix(&rt->err, "a run over several ranks");
        return st;
    }
    if (!tp) return NNT_OK; /* one process */
    nnt_pipeline *p = calloc(1, sizeof *p);
    if (!p) return nnt_err_set(&rt->err, NNT_ERR_OUT_OF_MEMORY, "no memory");
    double timeout;
    nnt_runtime_distributed(rt, &timeout, NULL, NULL);
    nnt_error err = {0};
    if ((st = tp->open(timeout, &p->t, &err)) != NNT_OK) {
        free(p);
        return nnt_err_set(&rt->err, st, "the %s transport did not start: %s", tp->header.name, err.msg);
    }
    p->rt = rt;
    p->tp = tp;
    p->rank = tp->rank(p->t);
    p->size = tp->size(p->t);
    *out = p;
    return NNT_OK;
}

int nnt_pipeline_rank(const nnt_pipeline *p) { return p ? p->rank : 0; }
int nnt_pipeline_size(const nnt_pipeline *p) { return p ? p->size : 1; }
nnt_pipeline_fault nnt_pipeline_fault_of(const nnt_pipeline *p) { return p ? p->fault : NNT_PIPELINE_FAULT_NONE; }

void nnt_pipeline_abort(nnt_pipeline *p, int code)
{
    if (p) p->tp->abort(p->t, code);
}

void nnt_pipeline_close(nnt_pipeline *p, const char *failure)
{
    if (!p) return;
    if (failure && !p->notified && p->tp->failed_rank(p->t) < 0) p->tp->notify_failure(p->t, failure);
    p->tp->close(p->t);
    free(p);
}

/* ---- bytes between ranks ---- */

/* Sends a length-prefixed buffer (n bytes, n may be 0) to peer. */
static nnt_status send_blob(nnt_pipeline *p, int peer, const void *buf, uint64_t n)
{
    nnt_error err = {0};
    if (p->tp->send(p->t, peer, &n, sizeof n, &err) != NNT_OK || (n && p->tp->send(p->t, peer, buf, (size_t)n, &err) != NNT_OK))
        return transport_fail(p, &err);
    return NNT_OK;
}

/* Receives a buffer send_blob sent (at most max bytes) into a new allocation *out (NUL-terminated
 * one byte past *n, so that a JSON text can be read in place). */
static nnt_status recv_blob(nnt_pipeline *p, int peer, uint64_t max, char **out, uint64_t *n)
{
    nnt_error err = {0};
    *out = NULL;
    if (p->tp->recv(p->t, peer, n, sizeof *n, &err) != NNT_OK) return transport_fail(p, &err);
    if (*n > max) {
        nnt_err_set(perr(p), NNT_ERR_FORMAT, "rank %d announced %llu bytes; at most %llu are expected", peer,
                    (unsigned long long)*n, (unsigned long long)max);
        return local_fail(p, NNT_ERR_FORMAT, "receive");
    }
    *out = malloc((size_t)*n + 1);
    if (!*out) {
        nnt_err_set(perr(p), NNT_ERR_OUT_OF_MEMORY, "no memory for %llu bytes from rank %d", (unsigned long long)*n, peer);
        return local_fail(p, NNT_ERR_OUT_OF_MEMORY, "receive");
    }
    (*out)[*n] = '\0';
    if (*n && p->tp->recv(p->t, peer, *out, (size_t)*n, &err) != NNT_OK) {
        free(*out);
        *out = NULL;
        return transport_fail(p, &err);
    }
    return NNT_OK;
}

/* ---- the split ---- */

/* first_block [size + 1] from the INI's cuts, checked against the model's blocks. */
static nnt_status cuts_split(nnt_pipeline *p, const int *cuts, int n_cuts, int layers, int *fb)
{
    if (n_cuts != p->size - 1 || (n_cuts > 0 && cuts[n_cuts - 1] >= layers)) {
        nnt_err_set(perr(p), NNT_ERR_INVALID_ARGUMENT,
                    "%s: [distributed] stages gives %d cut%s (the last %d) but this run has %d ranks and the model %d "
                    "blocks: expected %d ascending cuts, each below %d",
                    nnt_runtime_config_path(p->rt), n_cuts, n_cuts == 1 ? "" : "s", n_cuts > 0 ? cuts[n_cuts - 1] : 0,
                    p->size, layers, p->size - 1, layers);
        return local_fail(p, NNT_ERR_INVALID_ARGUMENT, "stages");
    }
    fb[0] = 0;
    for (int r = 1; r < p->size; r++) fb[r] = cuts[r - 1];
    fb[p->size] = layers;
    return NNT_OK;
}

/* first_block [size + 1] balanced by the blocks' weight bytes, as `nnt plan` splits them. */
static nnt_status planned_split(nnt_pipeline *p, const char *dir, int layers, int *fb)
{
    nnt_plan_opts po = {.ranks = p->size, .device = NNT_PLAN_CPU, .batch = 1, .runtime = p->rt};
    nnt_plan *plan = NULL;
    nnt_status st = nnt_plan_new(dir, &po, &plan, perr(p));
    if (st != NNT_OK) return local_fail(p, st, "stages");
    for (int r = 0; r < p->size; r++) {
        nnt_plan_stage s;
        nnt_plan_get_stage(plan, r, &s);
        fb[r] = s.first_block;
    }
    fb[p->size] = layers;
    nnt_plan_free(plan);
    return NNT_OK;
}

/* ---- the ranks agree on the checkpoint and the split ----
 * Each rank reads its own checkpoint folder (its own --model, which an MPMD launch can make
 * differ) and its own INI. Before any load, every rank sends rank 0 what must match - a hash of
 * each of the folder's description files, the number of blocks and the split - and rank 0
 * answers every rank with one verdict: empty, or the first difference, named. A refused run
 * fails on every rank with that message and no notice (each rank already knows). */

/* The folder's files whose bytes must match across ranks: what builds the model and its ids. */
static const char *const AGREED_FILES[] = {"config.json", "model.safetensors.index.json", "tokenizer.json",
                                           "tokenizer_config.json"};
#define N_AGREED (sizeof AGREED_FILES / sizeof AGREED_FILES[0])
#define MAX_AGREED_DIR 4096

typedef struct rank_print {
    uint64_t hash[N_AGREED]; /* 64-bit FNV-1a of each file's bytes (nnt_file_fnv1a64); 0: no such file */
    int32_t layers, size;
} rank_print;

/* The hash of dir/name's bytes into *h (0 when there is no such file). */
static nnt_status file_print(nnt_pipeline *p, const char *dir, const char *name, uint64_t *h)
{
    *h = 0;
    char *path = nnt_path_join(dir, name);
    if (!path) return nnt_err_set(perr(p), NNT_ERR_OUT_OF_MEMORY, "no memory");
    if (!nnt_file_exists(path)) {
        free(path);
        return NNT_OK;
    }
    uint64_t v = 0;
    nnt_status st = nnt_file_fnv1a64(path, &v, perr(p));
    *h = v ? v : 1; /* 0 means "no file" */
    free(path);
    return st;
}

/* Rank 0's verdict on rank r (empty when it agrees): the first difference, named. */
static void verdict(const nnt_pipeline *p, int r, const char *dir0, const rank_print *a, const int *fb0, const char *dir,
                    const rank_print *b, const int *fb, char *out, size_t n)
{
    out[0] = '\0';
    if (a->layers != b->layers || a->size != b->size) {
        snprintf(out, n, "the ranks do not run one model: rank %d's checkpoint %s has %d blocks, rank 0's %s has %d; "
                 "every rank must load the same checkpoint", r, dir, b->layers, dir0, a->layers);
        return;
    }
    for (size_t i = 0; i < N_AGREED; i++)
        if (a->hash[i] != b->hash[i]) {
            if (!a->hash[i] || !b->hash[i])
                snprintf(out, n, "the ranks do not run one model: rank %d's checkpoint %s %s %s, rank 0's %s %s; every "
                         "rank must load the same checkpoint", r, dir, b->hash[i] ? "has" : "has no", AGREED_FILES[i],
                         dir0, a->hash[i] ? "has one" : "has none");
            else
                snprintf(out, n, "the ranks do not run one model: rank %d's %s/%s differs from rank 0's %s/%s; every "
                         "rank must load the same checkpoint", r, dir, AGREED_FILES[i], dir0, AGREED_FILES[i]);
            return;
        }
    for (int k = 0; k <= p->size; k++)
        if (fb0[k] != fb[k]) {
            char x[256] = "", y[256] = "";
            for (int j = 1, ux = 0, uy = 0; j < p->size; j++) {
                ux += snprintf(x + ux, ux < (int)sizeof x ? sizeof x - (size_t)ux : 0, "%s%d", j > 1 ? ", " : "", fb0[j]);
                uy += snprintf(y + uy, uy < (int)sizeof y ? sizeof y - (size_t)uy : 0, "%s%d", j > 1 ? ", " : "", fb[j]);
                if (ux >= (int)sizeof x || uy >= (int)sizeof y) break;
            }
            snprintf(out, n, "the ranks split the %d blocks differently: rank 0 cuts at [%s], rank %d at [%s] (each "
                     "rank's INI [distributed] stages, or its plan); every rank must use the same settings", a->layers,
                     x, r, y);
            return;
        }
}

/* fb [size + 1]: this rank's split of the `layers` blocks of dir. */
static nnt_status agree_checkpoint(nnt_pipeline *p, const char *dir, int layers, const int *fb)
{
    rank_print mine = {.layers = layers, .size = p->size};
    nnt_status st = NNT_OK;
    for (size_t i = 0; st == NNT_OK && i < N_AGREED; i++) st = file_print(p, dir, AGREED_FILES[i], &mine.hash[i]);
    if (st != NNT_OK) return local_fail(p, st, "stages");
    size_t fb_bytes = sizeof *fb * (size_t)(p->size + 1);
    nnt_error err = {0};
    char msg[1024] = "";
    if (p->rank != 0) {
        char *answer = NULL;
        uint64_t n = 0;
        if ((st = send_blob(p, 0, dir, strlen(dir))) != NNT_OK) return st;
        if (p->tp->send(p->t, 0, &mine, sizeof mine, &err) != NNT_OK || p->tp->send(p->t, 0, fb, fb_bytes, &err) != NNT_OK)
            return transport_fail(p, &err);
        if ((st = recv_blob(p, 0, sizeof msg - 1, &answer, &n)) != NNT_OK) return st;
        snprintf(msg, sizeof msg, "%s", answer);
        free(answer);
    } else {
        int *theirs = malloc(fb_bytes);
        if (!theirs) {
            nnt_err_set(perr(p), NNT_ERR_OUT_OF_MEMORY, "no memory");
            return local_fail(p, NNT_ERR_OUT_OF_MEMORY, "stages");
        }
        for (int r = 1; st == NNT_OK && r < p->size; r++) {
            char *other = NULL;
            uint64_t n = 0;
            rank_print b;
            if ((st = recv_blob(p, r, MAX_AGREED_DIR, &other, &n)) != NNT_OK) break;
            if (p->tp->recv(p->t, r, &b, sizeof b, &err) != NNT_OK || p->tp->recv(p->t, r, theirs, fb_bytes, &err) != NNT_OK)
                st = transport_fail(p, &err);
            else if (!msg[0])
                verdict(p, r, dir, &mine, fb, other, &b, theirs, msg, sizeof msg);
            free(other);
        }
        free(theirs);
        for (int r = 1; st == NNT_OK && r < p->size; r++) st = send_blob(p, r, msg, strlen(msg));
        if (st != NNT_OK) return st;
    }
    if (!msg[0]) return NNT_OK;
    p->notified = 1; /* every rank has the verdict: no notice to send */
    p->fault = NNT_PIPELINE_FAULT_LOCAL;
    return nnt_err_set(perr(p), NNT_ERR_CONFIG, "%s", msg);
}

nnt_status nnt_pipeline_split(nnt_pipeline *p, const char *dir, int *first, int *end)
{
    if (!p || !dir || !first || !end) return NNT_ERR_INVALID_ARGUMENT;
    /* the block count from config.json and the headers, before any load */
    nnt_plan_opts po = {.ranks = 1, .device = NNT_PLAN_CPU, .batch = 1, .runtime = p->rt};
    nnt_plan *plan = NULL;
    nnt_status st = nnt_plan_new(dir, &po, &plan, perr(p));
    if (st != NNT_OK) return local_fail(p, st, "stages");
    nnt_plan_summary sum;
    nnt_plan_get_summary(plan, &sum);
    int layers = sum.n_blocks;
    nnt_plan_free(plan);
    if (p->size > layers) {
        nnt_err_set(perr(p), NNT_ERR_INVALID_ARGUMENT,
                    "%d ranks for a model of %d blocks: every rank needs at least one block", p->size, layers);
        return local_fail(p, NNT_ERR_INVALID_ARGUMENT, "stages");
    }
    int *fb = malloc(sizeof *fb * (size_t)(p->size + 1));
    if (!fb) {
        nnt_err_set(perr(p), NNT_ERR_OUT_OF_MEMORY, "no memory");
        return local_fail(p, NNT_ERR_OUT_OF_MEMORY, "stages");
    }
    const int *cuts;
    int n_cuts;
    nnt_runtime_distributed(p->rt, NULL, &cuts, &n_cuts);
    st = n_cuts >= 0 ? cuts_split(p, cuts, n_cuts, layers, fb) : planned_split(p, dir, layers, fb);
    if (st == NNT_OK) st = agree_checkpoint(p, dir, layers, fb);
    if (st == NNT_OK) {
        p->first = *first = fb[p->rank];
        p->end = *end = fb[p->rank + 1];
        p->layers = layers;
    }
    free(fb);
    return st;
}

nnt_status nnt_pipeline_attach(nnt_pipeline *p, nnt_model *m)
{
    if (!p || !m) return NNT_ERR_INVALID_ARGUMENT;
    int L = nnt_model_get_info(m)->num_layers;
    p->m = m;
    if (L == p->layers) return NNT_OK;
    nnt_err_set(perr(p), NNT_ERR_CONFIG, "the stages were planned for %d blocks (config.json), the loaded model has %d",
                p->layers, L);
    return local_fail(p, NNT_ERR_CONFIG, "stages");
}

/* ---- agreement ---- */

nnt_status nnt_pipeline_agree(nnt_pipeline *p, nnt_status mine)
{
    if (!p) return mine;
    if (mine != NNT_OK) {
        if (!p->notified && p->tp->failed_rank(p->t) < 0) p->tp->notify_failure(p->t, nnt_last_error(p->rt));
        p->notified = 1;
        p->fault = NNT_PIPELINE_FAULT_LOCAL;
        return mine;
    }
    nnt_error err = {0};
    int32_t ok = 0;
    if (p->rank == 0) {
        for (int r = 1; r < p->size; r++)
            if (p->tp->recv(p->t, r, &ok, sizeof ok, &err) != NNT_OK) return transport_fail(p, &err);
        for (int r = 1; r < p->size; r++)
            if (p->tp->send(p->t, r, &ok, sizeof ok, &err) != NNT_OK) return transport_fail(p, &err);
    } else if (p->tp->send(p->t, 0, &ok, sizeof ok, &err) != NNT_OK || p->tp->recv(p->t, 0, &ok, sizeof ok, &err) != NNT_OK) {
        return transport_fail(p, &err);
    }
    return NNT_OK;
}

/* The most a shared request may hold (its JSON and its tensors, each). */
#define MAX_SHARED_REQUEST ((uint64_t)4 << 30)

nnt_status nnt_pipeline_share_request(nnt_pipeline *p, nnt_request **r)
{
    if (!p || !r || (p->rank == 0) != (*r != NULL)) return NNT_ERR_INVALID_ARGUMENT;
    nnt_status st = NNT_OK;
    if (p->rank == 0) {
        char *json = NULL;
        void *tensors = NULL;
        size_t jn = 0, tn = 0;
        st = nnt_request_write(*r, &json, &jn, &tensors, &tn);
        if (st != NNT_OK) st = local_fail(p, st, "request");
        for (int peer = 1; st == NNT_OK && peer < p->size; peer++) {
            st = send_blob(p, peer, json, jn);
            if (st == NNT_OK) st = send_blob(p, peer, tensors, tn);
        }
        free(json);
        free(tensors);
        return st;
    }
    char *json = NULL, *tensors = NULL;
    uint64_t jn = 0, tn = 0;
    st = recv_blob(p, 0, MAX_SHARED_REQUEST, &json, &jn);
    if (st == NNT_OK) st = recv_blob(p, 0, MAX_SHARED_REQUEST, &tensors, &tn);
    if (st == NNT_OK) {
        nnt_request_source src = {.struct_size = sizeof src, .json = json, .json_len = (size_t)jn,
                                  .tensors = tn ? tensors : NULL, .tensors_len = (size_t)tn,
                                  .name = "rank 0's request"};
        st = nnt_request_parse(p->rt, &src, r);
        if (st != NNT_OK) st = local_fail(p, st, "request");
    }
    free(json);
    free(tensors);
    return st;
}

/* ---- values gathered to one rank ---- */

typedef struct wire_value {
    int32_t key_len, none, dtype, ndim;
    int64_t shape[NNT_MAX_DIMS];
} wire_value;

static size_t value_bytes(const nnt_tensor *v)
{
    return (size_t)nnt_tensor_numel(v) * nnt_dtype_size(v->dtype);
}

static nnt_status send_values(nnt_pipeline *p, const nnt_trace *t, int root)
{
    nnt_error err = {0};
    int32_t n = nnt_trace_result_count(t);
    if (p->tp->send(p->t, root, &n, sizeof n, &err) != NNT_OK) return transport_fail(p, &err);
    for (int i = 0; i < n; i++) {
        const char *key;
        const nnt_tensor *v;
        nnt_trace_result(t, i, &key, &v);
        wire_value w = {.key_len = (int32_t)strlen(key), .none = v == NULL};
        if (v) {
            w.dtype = (int32_t)v->dtype;
            w.ndim = v->ndim;
            memcpy(w.shape, v->shape, sizeof w.shape);
        }
        if (p->tp->send(p->t, root, &w, sizeof w, &err) != NNT_OK ||
            p->tp->send(p->t, root, key, (size_t)w.key_len, &err) != NNT_OK ||
            (v && p->tp->send(p->t, root, v->data, value_bytes(v), &err) != NNT_OK))
            return transport_fail(p, &err);
    }
    return NNT_OK;
}

/* One value from rank `from` into t. */
static nnt_status recv_value(nnt_pipeline *p, nnt_trace *t, int from, int i)
{
    nnt_error err = {0};
    wire_value w;
    char key[192];
    if (p->tp->recv(p->t, from, &w, sizeof w, &err) != NNT_OK) return transport_fail(p, &err);
    if (w.key_len < 1 || w.key_len >= (int32_t)sizeof key ||
        (!w.none && (w.ndim < 0 || w.ndim > NNT_MAX_DIMS || nnt_dtype_size((nnt_dtype)w.dtype) == 0))) {
        nnt_err_set(perr(p), NNT_ERR_FORMAT, "value %d from rank %d has a key of %d bytes, dtype %d and %d axes", i, from,
                    w.key_len, w.dtype, w.ndim);
        return local_fail(p, NNT_ERR_FORMAT, "gather");
    }
    if (p->tp->recv(p->t, from, key, (size_t)w.key_len, &err) != NNT_OK) return transport_fail(p, &err);
    key[w.key_len] = '\0';
    nnt_tensor v = {0};
    if (!w.none && nnt_tensor_alloc(&v, (nnt_dtype)w.dtype, w.ndim, w.shape) != NNT_OK) {
        nnt_err_set(perr(p), NNT_ERR_OUT_OF_MEMORY, "cannot hold '%s' from rank %d (%s, %d axes): out of memory or a bad shape",
                    key, from, nnt_dtype_name((nnt_dtype)w.dtype), w.ndim);
        return local_fail(p, NNT_ERR_OUT_OF_MEMORY, "gather");
    }
    nnt_status st = NNT_OK;
    if (!w.none && p->tp->recv(p->t, from, v.data, value_bytes(&v), &err) != NNT_OK) st = transport_fail(p, &err);
    if (st == NNT_OK && (st = nnt_trace_import_result(t, key, w.none ? NULL : &v)) != NNT_OK) st = local_fail(p, st, "gather");
    nnt_tensor_free(&v);
    return st;
}

static nnt_status recv_values(nnt_pipeline *p, nnt_trace *t, int from)
{
    nnt_error err = {0};
    int32_t n;
    if (p->tp->recv(p->t, from, &n, sizeof n, &err) != NNT_OK) return transport_fail(p, &err);
    nnt_status st = NNT_OK;
    for (int i = 0; i < n && st == NNT_OK; i++) st = recv_value(p, t, from, i);
    return st;
}

/* Every rank's saved values into root's trace, in rank order (the order of the blocks). */
static nnt_status gather(nnt_pipeline *p, nnt_trace *t, int root)
{
    if (p->rank != root) return send_values(p, t, root);
    for (int r = 0; r < p->size; r++)
        if (r != root && recv_values(p, t, r) != NNT_OK) return nnt_last_status(p->rt);
    return NNT_OK;
}

/* ---- one forward ---- */

static size_t stream_floats(const nnt_model *m, int batch, int seq)
{
    const nnt_model_info *mi = nnt_model_get_info(m);
    return (size_t)batch * (size_t)seq * (size_t)(mi->num_streams > 0 ? mi->num_streams : 1) * (size_t)mi->hidden_size;
}

/* A gradient trace over the stages: the stream forward rank to rank (each stage unrecorded, its
 * saves made), then the backward from the last rank to the first, each rank rerunning its stage on
 * the tape and handing the gradient of its input stream to the rank before, the way the stream
 * came (docs/gradients.md, "Pipeline stages"). in / out: this rank's stream buffers (NULL at the
 * model's ends); the gradients' buffers are this function's. */
static nnt_status trace_grad(nnt_pipeline *p, nnt_trace *t, const int32_t *ids, const int32_t *mask, int batch, int seq,
                             float *in, float *out, size_t n)
{
    nnt_error err = {0};
    nnt_status st = NNT_OK;
    float *d_out = out ? malloc(n * sizeof *d_out) : NULL, *d_in = in ? malloc(n * sizeof *d_in) : NULL;
    if ((out && !d_out) || (in && !d_in)) {
        nnt_err_set(perr(p), NNT_ERR_OUT_OF_MEMORY, "no memory for the residual stream's gradient");
        st = local_fail(p, NNT_ERR_OUT_OF_MEMORY, "backward");
    }
    if (st == NNT_OK && in && p->tp->recv(p->t, p->rank - 1, in, n * sizeof *in, &err) != NNT_OK)
        st = transport_fail(p, &err);
    if (st == NNT_OK &&
        (st = nnt_trace_grad_stage_forward(t, ids, mask, batch, seq, p->first, p->end, in, out, 0)) != NNT_OK)
        st = local_fail(p, st, "forward");
    if (st == NNT_OK && out && p->tp->send(p->t, p->rank + 1, out, n * sizeof *out, &err) != NNT_OK)
        st = transport_fail(p, &err);
    /* the backward: the last rank starts it; the others wait for the gradient of their stream */
    if (st == NNT_OK && out && p->tp->recv(p->t, p->rank + 1, d_out, n * sizeof *d_out, &err) != NNT_OK)
        st = transport_fail(p, &err);
    if (st == NNT_OK &&
        (st = nnt_trace_grad_stage_backward(t, ids, mask, batch, seq, p->first, p->end, in, d_out, d_in)) != NNT_OK)
        st = local_fail(p, st, "backward");
    if (st == NNT_OK && in && p->tp->send(p->t, p->rank - 1, d_in, n * sizeof *d_in, &err) != NNT_OK)
        st = transport_fail(p, &err);
    free(d_out);
    free(d_in);
    return st;
}

static nnt_status pipeline_trace_held(nnt_pipeline *p, nnt_trace *t, const int32_t *ids, const int32_t *mask, int batch,
                                      int seq, int root)
{
    if (!p || !t || !p->m || root < 0 || root >= p->size) return NNT_ERR_INVALID_ARGUMENT;
    int grad = nnt_trace_wants_grad(t);
    size_t n = stream_floats(p->m, batch, seq);
    float *in = p->first > 0 ? malloc(n * sizeof *in) : NULL, *out = p->end < p->layers ? malloc(n * sizeof *out) : NULL;
    nnt_error err = {0};
    nnt_status st = NNT_OK;
    if ((p->first > 0 && !in) || (p->end < p->layers && !out)) {
        nnt_err_set(perr(p), NNT_ERR_OUT_OF_MEMORY, "no memory for the residual stream");
        st = local_fail(p, NNT_ERR_OUT_OF_MEMORY, "forward");
    } else if ((st = grad ? nnt_trace_grad_stage_forward(t, ids, mask, batch, seq, p->first, p->end, in, out, 1)
                          : nnt_trace_check_stage(t, ids, mask, batch, seq, p->first, p->end, in, out)) != NNT_OK) {
        st = local_fail(p, st, "forward"); /* every rank's requests hold before any stage runs */
    }
    st = nnt_pipeline_agree(p, st);
    if (grad) {
        if (st == NNT_OK) st = trace_grad(p, t, ids, mask, batch, seq, in, out, n);
    } else {
        if (st == NNT_OK && in && p->tp->recv(p->t, p->rank - 1, in, n * sizeof *in, &err) != NNT_OK)
            st = transport_fail(p, &err);
        if (st == NNT_OK && (st = nnt_trace_run_stage(t, ids, mask, batch, seq, p->first, p->end, in, out)) != NNT_OK)
            st = local_fail(p, st, "forward");
        if (st == NNT_OK && out && p->tp->send(p->t, p->rank + 1, out, n * sizeof *out, &err) != NNT_OK)
            st = transport_fail(p, &err);
    }
    if (st == NNT_OK) st = gather(p, t, root);
    free(in);
    free(out);
    return st;
}

nnt_status nnt_pipeline_trace(nnt_pipeline *p, nnt_trace *t, const int32_t *ids, const int32_t *mask, int batch,
                              int seq, int root)
{
    NNT_GUARDED(nnt_guard_trace_rt(t), "nnt_pipeline_trace", pipeline_trace_held(p, t, ids, mask, batch, seq, root));
}

/* ---- generation ---- */

typedef struct link_ctx {
    nnt_pipeline *p;
    int failed; /* a transport call of the link failed */
} link_ctx;

static nnt_status link_recv(void *ctx, float *hidden, size_t n, nnt_error *err)
{
    link_ctx *c = ctx;
    nnt_status st = c->p->tp->recv(c->p->t, c->p->rank - 1, hidden, n * sizeof *hidden, err);
    c->failed |= st != NNT_OK;
    return st;
}

static nnt_status link_send(void *ctx, const float *hidden, size_t n, nnt_error *err)
{
    link_ctx *c = ctx;
    nnt_status st = c->p->tp->send(c->p->t, c->p->rank + 1, hidden, n * sizeof *hidden, err);
    c->failed |= st != NNT_OK;
    return st;
}

static nnt_status link_tokens(void *ctx, int32_t *tokens, int batch, int is_source, nnt_error *err)
{
    link_ctx *c = ctx;
    nnt_pipeline *p = c->p;
    size_t bytes = (size_t)batch * sizeof *tokens;
    nnt_status st = NNT_OK;
    if (!is_source) st = p->tp->recv(p->t, p->size - 1, tokens, bytes, err);
    for (int r = 0; is_source && st == NNT_OK && r < p->size - 1; r++) st = p->tp->send(p->t, r, tokens, bytes, err);
    c->failed |= st != NNT_OK;
    return st;
}

static nnt_status pipeline_generate_held(nnt_pipeline *p, nnt_model *m, nnt_trace *t, const int32_t *ids,
                                         const int32_t *mask, int batch, int seq, const nnt_generate_opts *o,
                                         int32_t *out, int root)
{
    if (!p || !m || !o || !out || root < 0 || root >= p->size) return NNT_ERR_INVALID_ARGUMENT;
    nnt_status st = nnt_pipeline_agree(p, NNT_OK);
    if (st != NNT_OK) return st;
    link_ctx c = {.p = p};
    nnt_stage_link link = {
        .struct_size = sizeof link,
        .first_layer = p->first,
        .end_layer = p->end,
        .ctx = &c,
        .recv_hidden = link_recv,
        .send_hidden = link_send,
        .share_tokens = link_tokens,
    };
    st = nnt_generate_stage(m, t, ids, mask, batch, seq, o, &link, out);
    if (st != NNT_OK) {
        if (c.failed) { /* the transport's own failure: another rank's notice, or a timeout */
            nnt_error e = p->rt->err;
            return transport_fail(p, &e);
        }
        return local_fail(p, st, "generate");
    }
    return t ? gather(p, t, root) : NNT_OK;
}

nnt_status nnt_pipeline_generate(nnt_pipeline *p, nnt_model *m, nnt_trace *t, const int32_t *ids, const int32_t *mask,
                                 int batch, int seq, const nnt_generate_opts *o, int32_t *out, int root)
{
    NNT_GUARDED((m ? m->rt : NULL), "nnt_pipeline_generate",
                pipeline_generate_held(p, m, t, ids, mask, batch, seq, o, out, root));
}
