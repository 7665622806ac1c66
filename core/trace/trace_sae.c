/* trace_sae.c - a sparse autoencoder attached to a value of a trace (nnt_trace_sae): a REQ_HOOK
 * request that, where the value is emitted, encodes it, keeps the saves of its feature
 * activations, reconstruction and error, and - when features are edited - puts the edited
 * reconstruction plus the error in the value's place. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../sae/sae_internal.h"
#include "trace_internal.h"

enum { OUT_FEATS = 0, OUT_RECON, OUT_ERROR, OUT_COUNT };
static const char *const OUT_NAMES[OUT_COUNT] = {"feature_acts", "reconstruction", "error"};

typedef struct sae_edit {
    nnt_sae_edit_op op;
    int *features;
    int n;
    float value;
} sae_edit;

/* The state of one attachment: the SAE (one reference), the value's canonical path, the
 * outputs saved, the feature edits in order. */
typedef struct sae_hook {
    nnt_sae *sae;
    char path[160];
    int keep[OUT_COUNT];
    sae_edit *edits;
    int n_edits;
} sae_hook;

static nnt_status sae_apply(nnt_run *run, void *user, const char *path, int layer, nnt_tensor *v);
static nnt_status sae_check(nnt_trace *t, void *user, const char *path, const nnt_value_info *vi, nnt_error *err);
static nnt_status sae_save(nnt_trace *t, void *user, const char *path, int *claimed, nnt_error *err);
static void sae_hook_release(void *user);

static const trace_hook_ops SAE_OPS = {
    .what = "an SAE",
    .apply = sae_apply,
    .check = sae_check,
    .save = sae_save,
    .release = sae_hook_release,
};

static void sae_hook_release(void *user)
{
    sae_hook *h = user;
    if (!h) return;
    for (int i = 0; i < h->n_edits; i++) free(h->edits[i].features);
    free(h->edits);
    nnt_sae_free(h->sae);
    free(h);
}

/* The canonical path of one block's value `text` (n bytes of it) into buf; NNT_ERR_PATH for a
 * wildcard or a name that is no value. */
static nnt_status canonical(const nnt_trace *t, const char *text, size_t n, char *buf, size_t size, nnt_error *err)
{
    char name[256];
    if (n >= sizeof name) return nnt_err_set(err, NNT_ERR_PATH, "'%.*s': the path is too long", (int)n, text);
    snprintf(name, sizeof name, "%.*s", (int)n, text);
    nnt_path p;
    nnt_status st = nnt_path_parse(t->m, name, &p, err);
    if (st != NNT_OK) return st;
    if (p.layer == NNT_LAYER_ALL)
        return nnt_err_set(err, NNT_ERR_PATH, "'%s': an SAE attaches to one block's value, not a wildcard", name);
    nnt_path_format(t->m, p.slot, p.layer, buf, size);
    return NNT_OK;
}

/* The SAE hook attached to canonical path `path`, or NULL. */
static sae_hook *find_hook(const nnt_trace *t, const char *path)
{
    for (int i = 0; i < t->n_reqs; i++)
        if (t->reqs[i].kind == REQ_HOOK && t->reqs[i].hook_ops == &SAE_OPS &&
            strcmp(((sae_hook *)t->reqs[i].user)->path, path) == 0)
            return t->reqs[i].user;
    return NULL;
}

static nnt_status trace_sae_held(nnt_trace *t, const char *path, nnt_sae *s)
{
    nnt_error *err = &t->m->rt->err;
    nnt_err_clear(err);
    if (!path || !s) return nnt_err_set(err, NNT_ERR_INVALID_ARGUMENT, "nnt_trace_sae: NULL path or SAE");
    char canon[160];
    nnt_status st = canonical(t, path, strlen(path), canon, sizeof canon, err);
    if (st != NNT_OK) return st;
    if (find_hook(t, canon))
        return nnt_err_set(err, NNT_ERR_CONFLICT, "'%s': an SAE is attached to %s already", path, canon);
    sae_hook *h = calloc(1, sizeof *h);
    if (!h) return nnt_err_set(err, NNT_ERR_OUT_OF_MEMORY, "no memory for an SAE's attachment");
    request *r = NULL;
    if ((st = nnt_trace_add_request(t, REQ_HOOK, path, &r)) != NNT_OK) {
        free(h);
        return st;
    }
    snprintf(h->path, sizeof h->path, "%s", canon);
    nnt_sae_retain(s);
    h->sae = s;
    r->hook_ops = &SAE_OPS;
    r->user = h;
    return NNT_OK;
}

nnt_status nnt_trace_sae(nnt_trace *t, const char *path, nnt_sae *s)
{
    if (!t) return NNT_ERR_INVALID_ARGUMENT;
    NNT_GUARDED(nnt_guard_trace_rt(t), "nnt_trace_sae", trace_sae_held(t, path, s));
}

/* The value part of "VALUE.sae.OUTPUT" and the output's index (-1: a name that is none). NULL
 * when text holds no ".sae.". */
static const char *split_output(const char *text, size_t *value_len, int *out)
{
    const char *at = strstr(text, ".sae.");
    if (!at) return NULL;
    *value_len = (size_t)(at - text);
    *out = -1;
    for (int k = 0; k < OUT_COUNT; k++)
        if (strcmp(at + 5, OUT_NAMES[k]) == 0) *out = k;
    return at + 5;
}

static nnt_status trace_sae_edit_held(nnt_trace *t, const char *path, nnt_sae_edit_op op, const int *features,
                                      int n_features, float value)
{
    nnt_error *err = &t->m->rt->err;
    nnt_err_clear(err);
    size_t vlen = 0;
    int out = -1;
    if (!path || !split_output(path, &vlen, &out) || out != OUT_FEATS)
        return nnt_err_set(err, NNT_ERR_PATH,
                           "SAE edit on '%s': features are edited on a path 'VALUE.sae.feature_acts'",
                           path ? path : "(null)");
    if (!features || n_features < 1)
        return nnt_err_set(err, NNT_ERR_INVALID_ARGUMENT, "SAE edit on '%s': at least one feature index is needed",
                           path);
    if (op != NNT_SAE_EDIT_ZERO && op != NNT_SAE_EDIT_SCALE && op != NNT_SAE_EDIT_FILL)
        return nnt_err_set(err, NNT_ERR_INVALID_ARGUMENT, "SAE edit on '%s': unknown op %d", path, (int)op);
    if (!isfinite(value) || fabsf(value) > NNT_FACTOR_MAX)
        return nnt_err_set(err, NNT_ERR_INVALID_ARGUMENT, "SAE edit on '%s': the value %g is not %s", path, value,
                           NNT_FACTOR_TEXT);
    char canon[160];
    nnt_status st = canonical(t, path, vlen, canon, sizeof canon, err);
    if (st != NNT_OK) return st;
    sae_hook *h = find_hook(t, canon);
    if (!h)
        return nnt_err_set(err, NNT_ERR_NOT_FOUND,
                           "SAE edit on '%s': no SAE is attached to %s (nnt_trace_sae, --sae "
                           "PATH=DIR)",
                           path, canon);
    for (int i = 0; i < n_features; i++)
        if (features[i] < 0 || features[i] >= h->sae->info.d_sae)
            return nnt_err_set(err, NNT_ERR_INDEX,
                               "SAE edit on '%s': feature %d is out of range; the SAE of %s has "
                               "features 0..%d (d_sae %d)",
                               path, features[i], h->sae->info.dir, h->sae->info.d_sae - 1, h->sae->info.d_sae);
    sae_edit *g = realloc(h->edits, (size_t)(h->n_edits + 1) * sizeof *g);
    if (!g) return nnt_err_set(err, NNT_ERR_OUT_OF_MEMORY, "no memory");
    h->edits = g;
    sae_edit *e = &h->edits[h->n_edits];
    if (!(e->features = malloc((size_t)n_features * sizeof *e->features)))
        return nnt_err_set(err, NNT_ERR_OUT_OF_MEMORY, "no memory");
    memcpy(e->features, features, (size_t)n_features * sizeof *e->features);
    e->n = n_features;
    e->op = op;
    e->value = op == NNT_SAE_EDIT_ZERO ? 0.0f : value;
    h->n_edits++;
    return NNT_OK;
}

nnt_status nnt_trace_sae_edit(nnt_trace *t, const char *path, nnt_sae_edit_op op, const int *features, int n_features,
                              float value)
{
    if (!t) return NNT_ERR_INVALID_ARGUMENT;
    NNT_GUARDED(nnt_guard_trace_rt(t), "nnt_trace_sae_edit",
                trace_sae_edit_held(t, path, op, features, n_features, value));
}

/* Claims a save of "VALUE.sae.OUTPUT" when VALUE is this hook's. */
static nnt_status sae_save(nnt_trace *t, void *user, const char *path, int *claimed, nnt_error *err)
{
    sae_hook *h = user;
    size_t vlen = 0;
    int out = -1;
    const char *name = split_output(path, &vlen, &out);
    char canon[160];
    nnt_error scratch;
    if (!name || canonical(t, path, vlen, canon, sizeof canon, &scratch) != NNT_OK || strcmp(canon, h->path) != 0)
        return NNT_OK; /* not this hook's */
    *claimed = 1;
    if (out < 0)
        return nnt_err_set(err, NNT_ERR_PATH,
                           "save '%s': an SAE serves %s.sae.feature_acts, .sae.reconstruction and "
                           ".sae.error (a slice is not taken on them)",
                           path, h->path);
    h->keep[out] = 1;
    return NNT_OK;
}

static nnt_status sae_check(nnt_trace *t, void *user, const char *path, const nnt_value_info *vi, nnt_error *err)
{
    (void)t;
    const sae_hook *h = user;
    char shape[96];
    int seq_second = !vi->axes || nnt_trace_token_axis(vi->axes) == 1;
    if (!nnt_dtype_is_float(vi->dtype) || vi->ndim != 3 || !seq_second || vi->shape[2] != h->sae->info.d_in)
        return nnt_err_set(
            err, NNT_ERR_SHAPE,
            "SAE on %s: %s/cfg.json: d_in %d needs a float value laid out [batch seq %d]; %s is %s %s%s%s", path,
            h->sae->info.dir, h->sae->info.d_in, h->sae->info.d_in, path, nnt_dtype_name(vi->dtype),
            nnt_dims_str(vi->ndim, vi->shape, shape, sizeof shape), vi->axes ? " " : "", vi->axes ? vi->axes : "");
    return NNT_OK;
}

/* Keeps out[n * width] as the result "PATH.sae.NAME" (then "@1", "@2", ... for later emissions)
 * of shape v's leading axes and width. */
static nnt_status keep_output(nnt_run *run, const sae_hook *h, int which, const nnt_tensor *v, const float *out,
                              int width)
{
    char key[200];
    nnt_tensor res = {.dtype = NNT_F32, .ndim = v->ndim, .data = (void *)out};
    memcpy(res.shape, v->shape, sizeof res.shape);
    res.shape[v->ndim - 1] = width;
    for (long k = 0;; k++) {
        if (k == 0)
            snprintf(key, sizeof key, "%s.sae.%s", h->path, OUT_NAMES[which]);
        else
            snprintf(key, sizeof key, "%s.sae.%s@%ld", h->path, OUT_NAMES[which], k);
        if (nnt_trace_lookup(run->trace, key, NULL, NULL) == NNT_ERR_NOT_FOUND) break;
    }
    return nnt_trace_push_named(run->trace, key, &res, run->err);
}

/* The feature edits, in order, on feats [n, F]. */
static void edit_features(const sae_hook *h, float *feats, int64_t n)
{
    int64_t F = h->sae->info.d_sae;
    for (int i = 0; i < h->n_edits; i++) {
        const sae_edit *e = &h->edits[i];
        for (int64_t r = 0; r < n; r++)
            for (int k = 0; k < e->n; k++) {
                float *f = &feats[r * F + e->features[k]];
                *f = e->op == NNT_SAE_EDIT_SCALE ? *f * e->value : e->value;
            }
    }
}

static nnt_status sae_apply(nnt_run *run, void *user, const char *path, int layer, nnt_tensor *v)
{
    (void)layer;
    const sae_hook *h = user;
    const nnt_sae *s = h->sae;
    int64_t D = s->info.d_in, F = s->info.d_sae, n = v->ndim > 0 ? nnt_tensor_numel(v) / D : 0;
    int edited = h->n_edits > 0;
    if (!edited && !h->keep[OUT_FEATS] && !h->keep[OUT_RECON] && !h->keep[OUT_ERROR]) return NNT_OK;
    float *x = malloc((size_t)(n * D) * sizeof *x), *feats = malloc((size_t)(n * F) * sizeof *feats);
    float *recon = malloc((size_t)(n * D) * sizeof *recon), *error = malloc((size_t)(n * D) * sizeof *error);
    nnt_status st = x && feats && recon && error
                        ? NNT_OK
                        : nnt_err_set(run->err, NNT_ERR_OUT_OF_MEMORY, "no memory for the SAE on %s", path);
    if (st == NNT_OK) st = nnt_convert(v->data, v->dtype, x, NNT_F32, n * D, run->err);
    if (st == NNT_OK) st = nnt_sae_encode(s, x, n, feats, recon, run->err);
    for (int64_t i = 0; st == NNT_OK && i < n * D; i++) error[i] = x[i] - recon[i];
    if (st == NNT_OK && h->keep[OUT_FEATS]) st = keep_output(run, h, OUT_FEATS, v, feats, (int)F);
    if (st == NNT_OK && h->keep[OUT_RECON]) st = keep_output(run, h, OUT_RECON, v, recon, (int)D);
    if (st == NNT_OK && h->keep[OUT_ERROR]) st = keep_output(run, h, OUT_ERROR, v, error, (int)D);
    if (st == NNT_OK && edited) { /* the spliced value: decode(edited features) + error */
        edit_features(h, feats, n);
        st = nnt_sae_decode(s, x, feats, n, recon, run->err);
        for (int64_t i = 0; st == NNT_OK && i < n * D; i++) recon[i] += error[i];
        if (st == NNT_OK) st = nnt_convert(recon, NNT_F32, v->data, v->dtype, n * D, run->err);
    }
    free(x);
    free(feats);
    free(recon);
    free(error);
    return st;
}
