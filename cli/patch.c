/* patch.c - activation patching sweeps for `nnt patch` (patch.h): clean and corrupted forwards
 * once, then batches of corrupted rows, each with one (block, position) of the clean value
 * written in by an edit callback that touches only its own row. */
#include "patch.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static nnt_status set_err(char *err, size_t n, nnt_status st, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static nnt_status set_err(char *err, size_t n, nnt_status st, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, n, fmt, ap);
    va_end(ap);
    return st;
}

/* A token id: decimal digits only, 0..2147483647. */
static int parse_id(const char *s, const char *end, int32_t *out)
{
    if (s == end) return -1;
    long long v = 0;
    for (const char *c = s; c < end; c++) {
        if (*c < '0' || *c > '9') return -1;
        v = v * 10 + (*c - '0');
        if (v > 2147483647LL) return -1;
    }
    *out = (int32_t)v;
    return 0;
}

int patch_metric_parse(const char *text, patch_metric *out, char *err, size_t n)
{
    const char *expected = "expected logit-diff:A,B (logit[A] - logit[B] at the last position) or prob:T "
                           "(token T's probability there), token ids";
    if (strncmp(text, "logit-diff:", 11) == 0) {
        const char *a = text + 11, *comma = strchr(a, ',');
        if (comma && parse_id(a, comma, &out->a) == 0 && parse_id(comma + 1, comma + 1 + strlen(comma + 1), &out->b) == 0) {
            out->kind = PATCH_LOGIT_DIFF;
            return 0;
        }
    } else if (strncmp(text, "prob:", 5) == 0) {
        if (parse_id(text + 5, text + strlen(text), &out->a) == 0) {
            out->kind = PATCH_PROB;
            out->b = 0;
            return 0;
        }
    }
    snprintf(err, n, "--metric %s: %s", text, expected);
    return -1;
}

double patch_metric_eval(const patch_metric *m, const nnt_tensor *logits, int row)
{
    int64_t V = logits->shape[logits->ndim - 1], base = (int64_t)row * V;
    if (m->kind == PATCH_LOGIT_DIFF)
        return nnt_tensor_get_f64(logits, base + m->a) - nnt_tensor_get_f64(logits, base + m->b);
    double mx = -INFINITY, sum = 0;
    for (int64_t v = 0; v < V; v++) {
        double x = nnt_tensor_get_f64(logits, base + v);
        mx = x > mx ? x : mx;
    }
    for (int64_t v = 0; v < V; v++) sum += exp(nnt_tensor_get_f64(logits, base + v) - mx);
    return exp(nnt_tensor_get_f64(logits, base + m->a) - mx) / sum;
}

void patch_result_free(patch_result *r)
{
    free(r->blocks);
    free(r->grid);
    memset(r, 0, sizeof *r);
}

/* path with its '*' replaced by block b. */
static void block_path(const char *path, int b, char *buf, size_t n)
{
    const char *star = strchr(path, '*');
    if (!star) {
        snprintf(buf, n, "%s", path);
        return;
    }
    snprintf(buf, n, "%.*s%d%s", (int)(star - path), path, b, star + 1);
}

/* The block a path without '*' names: the number after "layers." or "layers[" (negative counts
 * from the end). -1 when there is none. */
static int named_block(const char *path, int L)
{
    const char *p = strstr(path, "layers");
    if (!p) return -1;
    p += 6;
    if (*p != '.' && *p != '[') return -1;
    p++;
    errno = 0;
    char *end;
    long b = strtol(p, &end, 10);
    if (end == p || errno || (*end != '.' && *end != ']')) return -1;
    if (b < 0) b += L;
    return b >= 0 && b < L ? (int)b : -1;
}

/* One block's edit in a batch: rows[i] gets the clean value at positions[i]. */
typedef struct patch_edit {
    const nnt_tensor *clean; /* [1, seq, ...] */
    int seq, n;
    int *rows, *pos;
} patch_edit;

static nnt_status patch_edit_fn(void *user, const char *path, int layer, nnt_tensor *v, nnt_error *err)
{
    const patch_edit *e = user;
    int64_t cn = nnt_tensor_numel(e->clean), vn = nnt_tensor_numel(v);
    int64_t inner = cn / e->seq;
    if (v->dtype != e->clean->dtype || v->ndim < 2 || v->shape[1] != e->seq || vn % (v->shape[0] * e->seq) != 0 ||
        vn / (v->shape[0] * e->seq) != inner) {
        err->status = NNT_ERR_SHAPE;
        snprintf(err->msg, sizeof err->msg, "%s: the value in the patched forward does not match the clean run's "
                 "(%lld elements per position, %s; expected %lld, %s)", path, (long long)(v->ndim >= 2 ? vn / (v->shape[0] * v->shape[1]) : vn),
                 nnt_dtype_name(v->dtype), (long long)inner, nnt_dtype_name(e->clean->dtype));
        return NNT_ERR_SHAPE;
    }
    size_t bytes = (size_t)inner * nnt_dtype_size(v->dtype);
    for (int i = 0; i < e->n; i++)
        memcpy((char *)v->data + ((size_t)e->rows[i] * e->seq + e->pos[i]) * bytes,
               (const char *)e->clean->data + (size_t)e->pos[i] * bytes, bytes);
    return NNT_OK;
}

/* Checks the value of one block: served, writable, laid out [batch seq ...]. Returns NNT_OK,
 * NNT_ERR_NOT_FOUND when not served (reason in err), or another error. */
static nnt_status check_block(nnt_runtime *rt, nnt_model *m, const char *p, int seq, char *err, size_t n)
{
    nnt_value_info a, b;
    nnt_call_dims d1 = {.batch = 1, .seq = seq, .past = 0}, d2 = {.batch = 1, .seq = seq + 1, .past = 0};
    if (nnt_model_value_info(m, p, &d1, &a) != NNT_OK) return set_err(err, n, nnt_last_status(rt), "%s", nnt_last_error(rt));
    if (!a.served) return set_err(err, n, NNT_ERR_NOT_FOUND, "%s is not served: %s", p, a.reason);
    if (nnt_model_value_info(m, p, &d2, &b) != NNT_OK) return set_err(err, n, nnt_last_status(rt), "%s", nnt_last_error(rt));
    if (a.ndim < 2 || a.shape[0] != 1 || a.shape[1] != seq || b.ndim < 2 || b.shape[1] != seq + 1)
        return set_err(err, n, NNT_ERR_SHAPE, "%s: patch needs a value with a token axis after the batch axis "
                       "([batch seq ...]); this one is laid out %s", p, a.axes ? a.axes : "otherwise");
    if (!a.writable) return set_err(err, n, NNT_ERR_INVALID_ARGUMENT, "%s is read-only: an edit of it is not seen by the forward", p);
    return NNT_OK;
}

/* Runs ids [batch, seq] under t (which saves "logits[:, -1]") and returns the logits. */
static nnt_status run_logits(nnt_runtime *rt, nnt_trace *t, const int32_t *ids, int batch, int seq,
                             const nnt_tensor **logits, char *err, size_t n)
{
    if (nnt_trace_run(t, ids, NULL, batch, seq) != NNT_OK)
        return set_err(err, n, nnt_last_status(rt), "forward: %s", nnt_last_error(rt));
    *logits = nnt_trace_get(t, "logits");
    if (!*logits) return set_err(err, n, NNT_ERR_STATE, "%s", "the forward saved no logits");
    return NNT_OK;
}

nnt_status patch_sweep(nnt_runtime *rt, nnt_model *m, const patch_spec *s, patch_result *out, char *err, size_t n)
{
    memset(out, 0, sizeof *out);
    const int L = nnt_model_get_info(m)->num_layers, S = s->seq, P = s->n_positions;
    const char *star = strchr(s->path, '*');
    if (star && strchr(star + 1, '*'))
        return set_err(err, n, NNT_ERR_PATH, "--value %s: one '*' (the block) at most", s->path);
    if (!star && named_block(s->path, L) < 0)
        return set_err(err, n, NNT_ERR_PATH, "--value %s: patch needs a block value, 'layers.N.VALUE' or "
                       "'layers.*.VALUE' (N in 0..%d)", s->path, L - 1);
    if (s->rows < 1 || S < 1 || P < 1) return set_err(err, n, NNT_ERR_INVALID_ARGUMENT, "%s", "nothing to patch");
    out->blocks = malloc(sizeof(int) * (size_t)L);
    if (!out->blocks) return set_err(err, n, NNT_ERR_OUT_OF_MEMORY, "%s", "out of memory");
    char p[256], first_reason[512] = "";
    for (int b = star ? 0 : named_block(s->path, L); b < (star ? L : named_block(s->path, L) + 1); b++) {
        block_path(s->path, b, p, sizeof p);
        nnt_status st = check_block(rt, m, p, S, err, n);
        if (st == NNT_ERR_NOT_FOUND && star) {
            if (!first_reason[0]) snprintf(first_reason, sizeof first_reason, "%s", err);
            continue;
        }
        if (st != NNT_OK) {
            patch_result_free(out);
            return st;
        }
        out->blocks[out->n_blocks++] = b;
    }
    if (!out->n_blocks) {
        set_err(err, n, NNT_ERR_NOT_FOUND, "--value %s: no block serves it (%s)", s->path, first_reason);
        patch_result_free(out);
        return NNT_ERR_NOT_FOUND;
    }
    const int NB = out->n_blocks, cells = NB * P, R = s->rows < cells ? s->rows : cells;
    nnt_trace *clean = NULL, *t = NULL;
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)R * (size_t)S);
    patch_edit *edits = calloc((size_t)NB, sizeof *edits);
    int *slots = malloc(sizeof(int) * 2 * (size_t)R);
    out->grid = malloc(sizeof(double) * (size_t)cells);
    nnt_status st = NNT_OK;
    const nnt_tensor *lg;
    if (!ids || !edits || !slots || !out->grid) {
        st = set_err(err, n, NNT_ERR_OUT_OF_MEMORY, "%s", "out of memory");
        goto done;
    }
    /* the clean forward, saving every block's value, and the corrupted one */
    if (nnt_trace_new(m, &clean) != NNT_OK || nnt_trace_save(clean, "logits[:, -1]") != NNT_OK) {
        st = set_err(err, n, nnt_last_status(rt), "%s", nnt_last_error(rt));
        goto done;
    }
    for (int i = 0; i < NB; i++) {
        block_path(s->path, out->blocks[i], p, sizeof p);
        if (nnt_trace_save(clean, p) != NNT_OK) {
            st = set_err(err, n, nnt_last_status(rt), "%s", nnt_last_error(rt));
            goto done;
        }
    }
    if ((st = run_logits(rt, clean, s->clean, 1, S, &lg, err, n)) != NNT_OK) goto done;
    out->clean_metric = patch_metric_eval(&s->metric, lg, 0);
    for (int i = 0; i < NB; i++) {
        block_path(s->path, out->blocks[i], p, sizeof p);
        const nnt_tensor *v = nnt_trace_get(clean, p);
        if (!v) {
            st = set_err(err, n, NNT_ERR_STATE, "%s is None in the clean run: there is nothing to patch in", p);
            goto done;
        }
        edits[i] = (patch_edit){.clean = v, .seq = S, .rows = slots, .pos = slots + R};
    }
    if (nnt_trace_new(m, &t) != NNT_OK || nnt_trace_save(t, "logits[:, -1]") != NNT_OK) {
        st = set_err(err, n, nnt_last_status(rt), "%s", nnt_last_error(rt));
        goto done;
    }
    if ((st = run_logits(rt, t, s->corrupt, 1, S, &lg, err, n)) != NNT_OK) goto done;
    out->corrupt_metric = patch_metric_eval(&s->metric, lg, 0);
    out->forwards = 2;
    for (int r = 0; r < R; r++) memcpy(ids + (size_t)r * S, s->corrupt, sizeof(int32_t) * (size_t)S);
    /* cells in block-major order, R per forward; a block's rows are consecutive in the batch, so
     * its edit reads a contiguous part of slots */
    for (int c0 = 0; c0 < cells; c0 += R) {
        int nr = cells - c0 < R ? cells - c0 : R;
        nnt_trace_free(t);
        t = NULL;
        if (nnt_trace_new(m, &t) != NNT_OK) {
            st = set_err(err, n, nnt_last_status(rt), "%s", nnt_last_error(rt));
            goto done;
        }
        for (int i = 0; i < NB; i++) edits[i].n = 0;
        for (int r = 0; r < nr; r++) {
            int bi = (c0 + r) / P, pi = (c0 + r) % P;
            patch_edit *e = &edits[bi];
            if (e->n == 0) {
                e->rows = slots + r;
                e->pos = slots + R + r;
            }
            e->rows[e->n] = r;
            e->pos[e->n] = s->positions[pi];
            e->n++;
        }
        for (int i = 0; i < NB; i++) {
            if (!edits[i].n) continue;
            block_path(s->path, out->blocks[i], p, sizeof p);
            if (nnt_trace_edit(t, p, patch_edit_fn, &edits[i]) != NNT_OK) {
                st = set_err(err, n, nnt_last_status(rt), "%s", nnt_last_error(rt));
                goto done;
            }
        }
        if (nnt_trace_save(t, "logits[:, -1]") != NNT_OK) {
            st = set_err(err, n, nnt_last_status(rt), "%s", nnt_last_error(rt));
            goto done;
        }
        if ((st = run_logits(rt, t, ids, nr, S, &lg, err, n)) != NNT_OK) goto done;
        for (int r = 0; r < nr; r++) out->grid[c0 + r] = patch_metric_eval(&s->metric, lg, r);
        out->forwards++;
    }
done:
    nnt_trace_free(t);
    nnt_trace_free(clean);
    free(ids);
    free(edits);
    free(slots);
    if (st != NNT_OK) patch_result_free(out);
    return st;
}
