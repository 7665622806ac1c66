/* dist.c - the nnt command's runs over several ranks: stage split, the stream handed from rank
 * to rank, tokens shared at every generation step, values gathered to the printing rank, and
 * one failure ending every rank (see dist.h; the transport's ABI is sdk/nnt/nnt_transport.h).
 *
 * Failures: a rank whose own step fails prints its error once, naming itself, and tells the
 * others (notify_failure), which then stop without a message of their own; a wait that ran out
 * of time (the [distributed] timeout) prints and ends the whole job through the transport's
 * abort, since the rank it waited for may not be listening. A rank that dies is the launcher's
 * to report: mpirun ends the job and names it. */
#include "dist.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <nnt/nnt_transport.h>

struct dist {
    nnt_runtime *rt;
    const nnt_transport_descriptor *tp;
    nnt_transport *t;
    int rank, size;
    int first, end, layers; /* this rank's blocks, and the model's */
    const nnt_model *m;
    int notified;           /* this rank has told the others it failed */
    int link_failed;        /* a transport call of the generation's stage link failed */
    int root;               /* the rank that prints and reports */
    int held_fd;            /* the real stderr while this rank's is held back in a file, or -1 */
};

/* ---- stderr held back on the ranks that do not print ---- */

/* The rank the launcher's environment gives this process, or -1. */
static int env_rank(void)
{
    static const char *const VARS[] = {"OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK"};
    for (size_t i = 0; i < sizeof VARS / sizeof VARS[0]; i++) {
        const char *v = getenv(VARS[i]);
        if (v && *v) return atoi(v);
    }
    return -1;
}

/* Points fd 2 at an unnamed file; returns a descriptor of the real stderr, or -1. */
static int hold_stderr(void)
{
    fflush(stderr);
    FILE *tmp = tmpfile();
    int saved = tmp ? dup(2) : -1;
    if (saved >= 0 && dup2(fileno(tmp), 2) < 0) {
        close(saved);
        saved = -1;
    }
    if (tmp) fclose(tmp); /* fd 2 keeps the file open */
    return saved;
}

static void release_stderr(int *held_fd)
{
    if (*held_fd < 0) return;
    fflush(stderr);
    dup2(*held_fd, 2);
    close(*held_fd);
    *held_fd = -1;
}

/* The last "nnt: ..." line written to the held stderr, without "nnt: " and "error: ". */
static void last_held_error(char *out, size_t n)
{
    fflush(stderr);
    out[0] = '\0';
    struct stat sb;
    char buf[4096];
    if (fstat(2, &sb) != 0 || sb.st_size <= 0) return;
    off_t from = sb.st_size > (off_t)sizeof buf - 1 ? sb.st_size - (off_t)(sizeof buf - 1) : 0;
    ssize_t got = pread(2, buf, sizeof buf - 1, from);
    if (got <= 0) return;
    buf[got] = '\0';
    const char *best = NULL;
    for (char *line = buf; line && *line;) {
        char *nl = strchr(line, '\n');
        if (nl) *nl = '\0';
        if (strncmp(line, "nnt: ", 5) == 0) best = line + 5;
        line = nl ? nl + 1 : NULL;
    }
    if (best && strncmp(best, "error: ", 7) == 0) best += 7;
    snprintf(out, n, "%s", best ? best : "stopped with an error (see its own output)");
}

int dist_hold_stderr_early(void) { return env_rank() > 0 ? hold_stderr() : -1; }

void dist_quiet_stdout(void)
{
    fflush(stdout);
    int null = open("/dev/null", O_WRONLY);
    if (null >= 0) {
        dup2(null, 1);
        close(null);
    }
}

void dist_set_root(dist *d, int root)
{
    if (!d) return;
    d->root = root;
    if (d->rank == root) {
        release_stderr(&d->held_fd);
        return;
    }
    if (d->held_fd < 0) d->held_fd = hold_stderr();
    dist_quiet_stdout();
}

int dist_rank(const dist *d) { return d ? d->rank : 0; }
int dist_size(const dist *d) { return d ? d->size : 1; }

/* This rank failed on its own: prints what and msg (seen when this rank prints, held back
 * otherwise) and tells the others, whose printing rank reports it. Returns 1. */
static int local_fail(dist *d, const char *what, const char *msg)
{
    char line[1200];
    snprintf(line, sizeof line, "%s: %s", what, msg);
    fprintf(stderr, "nnt: error: rank %d of %d: %s\n", d->rank, d->size, line);
    if (!d->notified) d->tp->notify_failure(d->t, line);
    d->notified = 1;
    return 1;
}

/* A transport call failed. When another rank's failure ended it, the printing rank reports
 * that rank's message and the others stay silent; otherwise (a wait ran out of time) this rank
 * reports on its real stderr and ends the job, since the peer may never answer. Returns 1. */
static int transport_fail(dist *d, const nnt_error *err)
{
    if (d->tp->failed_rank(d->t) >= 0) {
        if (d->rank == d->root) fprintf(stderr, "nnt: error: %s\n", err->msg);
        return 1;
    }
    release_stderr(&d->held_fd);
    fprintf(stderr, "nnt: error: %s\n", err->msg);
    d->tp->notify_failure(d->t, err->msg);
    d->tp->abort(d->t, 1);
    return 1;
}

int dist_start(nnt_runtime *rt, int held_stderr, dist **out)
{
    *out = NULL;
    const nnt_transport_descriptor *tp;
    if (nnt_runtime_transport(rt, &tp) != NNT_OK) {
        fprintf(stderr, "nnt: error: a run over several ranks: %s\n", nnt_last_error(rt));
        return 1;
    }
    dist *d = tp ? calloc(1, sizeof *d) : NULL;
    if (!d) {
        release_stderr(&held_stderr);
        if (!tp) return 0;
        fprintf(stderr, "nnt: error: out of memory\n");
        return 1;
    }
    d->held_fd = held_stderr;
    double timeout;
    nnt_runtime_distributed(rt, &timeout, NULL, NULL);
    nnt_error err = {0};
    if (tp->open(timeout, &d->t, &err) != NNT_OK) {
        release_stderr(&d->held_fd);
        fprintf(stderr, "nnt: error: the %s transport did not start: %s\n", tp->header.name, err.msg);
        free(d);
        return 1;
    }
    d->rt = rt;
    d->tp = tp;
    d->rank = tp->rank(d->t);
    d->size = tp->size(d->t);
    *out = d;
    return 0;
}

int dist_split(dist *d, nnt_runtime *rt, const char *dir, int *first, int *end)
{
    /* the blocks and their bytes from config.json and the safetensors headers, before any load */
    nnt_plan_opts po = {.ranks = 1, .device = NNT_PLAN_CPU, .batch = 1, .runtime = rt};
    nnt_plan *p = NULL;
    nnt_error err = {0};
    if (nnt_plan_new(dir, &po, &p, &err) != NNT_OK) return local_fail(d, "stages", err.msg);
    nnt_plan_summary sum;
    nnt_plan_get_summary(p, &sum);
    int num_layers = sum.n_blocks;
    nnt_plan_free(p);
    const int *cuts;
    int n_cuts;
    nnt_runtime_distributed(rt, NULL, &cuts, &n_cuts);
    char msg[600];
    if (d->size > num_layers) {
        snprintf(msg, sizeof msg, "%d ranks for a model of %d blocks: every rank needs at least one block", d->size,
                 num_layers);
        return local_fail(d, "stages", msg);
    }
    int *fb = malloc(sizeof *fb * (size_t)(d->size + 1));
    if (!fb) return local_fail(d, "stages", "out of memory");
    if (n_cuts >= 0) { /* the INI's split */
        if (n_cuts != d->size - 1 || cuts[n_cuts - 1 < 0 ? 0 : n_cuts - 1] >= num_layers) {
            snprintf(msg, sizeof msg,
                     "%s: [distributed] stages gives %d cut%s (the last %d) but this run has %d ranks and the model %d "
                     "blocks: expected %d ascending cuts, each below %d",
                     nnt_runtime_config_path(rt), n_cuts, n_cuts == 1 ? "" : "s", n_cuts > 0 ? cuts[n_cuts - 1] : 0,
                     d->size, num_layers, d->size - 1, num_layers);
            free(fb);
            return local_fail(d, "stages", msg);
        }
        fb[0] = 0;
        for (int r = 1; r < d->size; r++) fb[r] = cuts[r - 1];
        fb[d->size] = num_layers;
    } else { /* balanced by the blocks' weight bytes, as `nnt plan` splits them */
        po.ranks = d->size;
        if (nnt_plan_new(dir, &po, &p, &err) != NNT_OK) {
            free(fb);
            return local_fail(d, "stages", err.msg);
        }
        for (int r = 0; r < d->size; r++) {
            nnt_plan_stage s;
            nnt_plan_get_stage(p, r, &s);
            fb[r] = s.first_block;
        }
        fb[d->size] = num_layers;
        nnt_plan_free(p);
    }
    d->first = *first = fb[d->rank];
    d->end = *end = fb[d->rank + 1];
    d->layers = num_layers;
    free(fb);
    return 0;
}

int dist_set_model(dist *d, const nnt_model *m)
{
    int L = nnt_model_get_info(m)->num_layers;
    d->m = m;
    if (L == d->layers) return 0;
    char msg[200];
    snprintf(msg, sizeof msg, "the stages were planned for %d blocks (config.json), the loaded model has %d", d->layers, L);
    return local_fail(d, "stages", msg);
}

int dist_agree(dist *d, int rc)
{
    if (rc) {
        if (!d->notified && d->tp->failed_rank(d->t) < 0) d->tp->notify_failure(d->t, "failed before the run");
        d->notified = 1;
        return 1;
    }
    nnt_error err = {0};
    int32_t ok = 0;
    if (d->rank == 0) {
        for (int r = 1; r < d->size; r++)
            if (d->tp->recv(d->t, r, &ok, sizeof ok, &err) != NNT_OK) return transport_fail(d, &err);
        for (int r = 1; r < d->size; r++)
            if (d->tp->send(d->t, r, &ok, sizeof ok, &err) != NNT_OK) return transport_fail(d, &err);
    } else {
        if (d->tp->send(d->t, 0, &ok, sizeof ok, &err) != NNT_OK || d->tp->recv(d->t, 0, &ok, sizeof ok, &err) != NNT_OK)
            return transport_fail(d, &err);
    }
    return 0;
}

/* ---- values gathered to one rank ---- */

/* A saved value's bytes (saved values are whole elements: float, integer). */
static size_t value_bytes(const nnt_tensor *v)
{
    return (size_t)nnt_tensor_numel(v) * nnt_dtype_size(v->dtype);
}

typedef struct wire_value {
    int32_t key_len, none, dtype, ndim;
    int64_t shape[NNT_MAX_DIMS];
} wire_value;

static int send_values(dist *d, const nnt_trace *t, int root)
{
    nnt_error err = {0};
    int32_t n = nnt_trace_result_count(t);
    if (d->tp->send(d->t, root, &n, sizeof n, &err) != NNT_OK) return transport_fail(d, &err);
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
        if (d->tp->send(d->t, root, &w, sizeof w, &err) != NNT_OK ||
            d->tp->send(d->t, root, key, (size_t)w.key_len, &err) != NNT_OK ||
            (v && d->tp->send(d->t, root, v->data, value_bytes(v), &err) != NNT_OK))
            return transport_fail(d, &err);
    }
    return 0;
}

static int recv_values(dist *d, nnt_trace *t, int from)
{
    nnt_error err = {0};
    int32_t n;
    char msg[400];
    if (d->tp->recv(d->t, from, &n, sizeof n, &err) != NNT_OK) return transport_fail(d, &err);
    for (int i = 0; i < n; i++) {
        wire_value w;
        char key[192];
        if (d->tp->recv(d->t, from, &w, sizeof w, &err) != NNT_OK) return transport_fail(d, &err);
        if (w.key_len < 1 || w.key_len >= (int32_t)sizeof key ||
            (!w.none && (w.ndim < 0 || w.ndim > NNT_MAX_DIMS || nnt_dtype_size((nnt_dtype)w.dtype) == 0))) {
            snprintf(msg, sizeof msg, "value %d from rank %d has a key of %d bytes, dtype %d and %d axes", i, from, w.key_len,
                     w.dtype, w.ndim);
            return local_fail(d, "gather", msg);
        }
        if (d->tp->recv(d->t, from, key, (size_t)w.key_len, &err) != NNT_OK) return transport_fail(d, &err);
        key[w.key_len] = '\0';
        nnt_tensor v = {0};
        if (!w.none && nnt_tensor_alloc(&v, (nnt_dtype)w.dtype, w.ndim, w.shape) != NNT_OK) {
            snprintf(msg, sizeof msg, "cannot hold '%s' from rank %d (%s, %d axes): out of memory or a bad shape", key, from,
                     nnt_dtype_name((nnt_dtype)w.dtype), w.ndim);
            return local_fail(d, "gather", msg);
        }
        int rc = 0;
        if (!w.none && d->tp->recv(d->t, from, v.data, value_bytes(&v), &err) != NNT_OK)
            rc = transport_fail(d, &err);
        if (!rc && nnt_trace_import_result(t, key, w.none ? NULL : &v) != NNT_OK)
            rc = local_fail(d, "gather", nnt_last_error(d->rt));
        nnt_tensor_free(&v);
        if (rc) return rc;
    }
    return 0;
}

/* Every rank's saved values into root's trace, in rank order (the order of the blocks). */
static int gather(dist *d, nnt_trace *t, int root)
{
    if (d->rank != root) return send_values(d, t, root);
    for (int r = 0; r < d->size; r++)
        if (r != root && recv_values(d, t, r)) return 1;
    return 0;
}

/* ---- one forward ---- */

static size_t stream_floats(const nnt_model *m, int batch, int seq)
{
    const nnt_model_info *mi = nnt_model_get_info(m);
    return (size_t)batch * (size_t)seq * (size_t)(mi->num_streams > 0 ? mi->num_streams : 1) * (size_t)mi->hidden_size;
}

int dist_trace_run(dist *d, nnt_trace *t, const int32_t *ids, const int32_t *mask, int batch, int seq, int root)
{
    size_t n = stream_floats(d->m, batch, seq);
    float *in = d->first > 0 ? malloc(n * sizeof *in) : NULL, *out = d->end < d->layers ? malloc(n * sizeof *out) : NULL;
    nnt_error err = {0};
    int rc = 0;
    if ((d->first > 0 && !in) || (d->end < d->layers && !out))
        rc = local_fail(d, "forward", "no memory for the residual stream");
    /* every rank's requests hold before any stage runs */
    else if (nnt_trace_check_stage(t, ids, mask, batch, seq, d->first, d->end, in, out) != NNT_OK)
        rc = local_fail(d, "forward", nnt_last_error(d->rt));
    rc = dist_agree(d, rc);
    if (!rc && in && d->tp->recv(d->t, d->rank - 1, in, n * sizeof *in, &err) != NNT_OK) rc = transport_fail(d, &err);
    if (!rc && nnt_trace_run_stage(t, ids, mask, batch, seq, d->first, d->end, in, out) != NNT_OK)
        rc = local_fail(d, "forward", nnt_last_error(d->rt));
    if (!rc && out && d->tp->send(d->t, d->rank + 1, out, n * sizeof *out, &err) != NNT_OK) rc = transport_fail(d, &err);
    if (!rc) rc = gather(d, t, root);
    free(in);
    free(out);
    return rc;
}

/* ---- generation ---- */

static nnt_status link_recv(void *ctx, float *hidden, size_t n, nnt_error *err)
{
    dist *d = ctx;
    nnt_status st = d->tp->recv(d->t, d->rank - 1, hidden, n * sizeof *hidden, err);
    d->link_failed |= st != NNT_OK;
    return st;
}

static nnt_status link_send(void *ctx, const float *hidden, size_t n, nnt_error *err)
{
    dist *d = ctx;
    nnt_status st = d->tp->send(d->t, d->rank + 1, hidden, n * sizeof *hidden, err);
    d->link_failed |= st != NNT_OK;
    return st;
}

static nnt_status link_tokens(void *ctx, int32_t *tokens, int batch, int is_source, nnt_error *err)
{
    dist *d = ctx;
    size_t bytes = (size_t)batch * sizeof *tokens;
    nnt_status st = NNT_OK;
    if (!is_source) st = d->tp->recv(d->t, d->size - 1, tokens, bytes, err);
    for (int r = 0; is_source && st == NNT_OK && r < d->size - 1; r++) st = d->tp->send(d->t, r, tokens, bytes, err);
    d->link_failed |= st != NNT_OK;
    return st;
}

int dist_generate(dist *d, nnt_model *m, nnt_trace *t, const int32_t *ids, const int32_t *mask, int batch, int seq,
                  const nnt_generate_opts *g, int32_t *out, int root)
{
    if (dist_agree(d, 0)) return 1;
    nnt_stage_link link = {
        .struct_size = sizeof link,
        .first_layer = d->first,
        .end_layer = d->end,
        .ctx = d,
        .recv_hidden = link_recv,
        .send_hidden = link_send,
        .share_tokens = link_tokens,
    };
    if (nnt_generate_stage(m, t, ids, mask, batch, seq, g, &link, out) != NNT_OK) {
        if (d->tp->failed_rank(d->t) >= 0) return 1;
        /* the transport's own failures (a timeout) end the job; the others are this rank's */
        if (d->link_failed) {
            nnt_error e = {.status = NNT_ERR_STATE};
            snprintf(e.msg, sizeof e.msg, "%s", nnt_last_error(d->rt));
            return transport_fail(d, &e);
        }
        return local_fail(d, "generate", nnt_last_error(d->rt));
    }
    return gather(d, t, root);
}

void dist_finish(dist *d, int rc)
{
    if (!d) return;
    if (rc && !d->notified && d->tp->failed_rank(d->t) < 0) {
        char msg[1000];
        if (d->held_fd >= 0)
            last_held_error(msg, sizeof msg);
        else
            snprintf(msg, sizeof msg, "stopped with an error");
        d->tp->notify_failure(d->t, msg);
    }
    release_stderr(&d->held_fd);
    d->tp->close(d->t);
    free(d);
}
