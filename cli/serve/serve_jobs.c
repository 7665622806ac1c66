/* serve_jobs.c - each resident model's queue and the worker thread that empties it: the
 * request document parsed with files refused (NNT_REQUEST_NO_FILES: nothing a client sends
 * names a path of this machine), checked against the server's limits, run by nnt_request_run,
 * and its results made into the safetensors body of the answer. One request at a time per
 * model: libnnt runs one call at a time per runtime, and each model has its own. The runtime's
 * progress handler stops a forward whose requests were all abandoned (clients gone, time up)
 * and passes a streamed generation's tokens on as events. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "nnt/nnt_methods.h"
#include "nnt/nnt_request.h"
#include "serve.h"

double serve_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void serve_wait_tick(serve_state *s)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += 100 * 1000000L;
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    pthread_cond_timedwait(&s->cv, &s->mu, &ts);
}

void serve_job_free(serve_job *job)
{
    if (!job) return;
    free(job->json);
    free(job->tensors);
    free(job->body);
    free(job->events);
    free(job);
}

int serve_job_event(serve_job *job, const char *text, size_t len)
{
    if (job->events_len + len + 1 > job->events_cap) {
        size_t want = job->events_cap ? job->events_cap : 1024;
        while (want < job->events_len + len + 1) want *= 2;
        char *grown = realloc(job->events, want);
        if (!grown) return -1;
        job->events = grown;
        job->events_cap = want;
    }
    memcpy(job->events + job->events_len, text, len);
    job->events_len += len;
    job->events[job->events_len] = '\0';
    return 0;
}

void serve_job_leave(serve_model *md, serve_job *job)
{
    serve_state *s = md->srv;
    if (job->done) {
        serve_job_free(job);
        return;
    }
    if (job->running) { /* the worker frees it when its call ends */
        job->abandoned = 1;
        s->refused++;
        pthread_cond_broadcast(&s->cv);
        return;
    }
    serve_job **p = &md->head, *prev = NULL;
    while (*p && *p != job) prev = *p, p = &(*p)->next;
    if (*p) {
        *p = job->next;
        if (md->tail == job) md->tail = prev;
        md->queued--;
    }
    serve_job_release_user(s, job);
    s->refused++;
    serve_job_free(job);
}

/* The runtime's progress handler while md's worker runs a call: stops it when every job it
 * serves was abandoned, and gives a streamed job's generation steps to its client. */
static int on_progress(void *user, const nnt_progress *p)
{
    serve_model *md = user;
    serve_state *s = md->srv;
    pthread_mutex_lock(&s->mu);
    int gone = md->n_current > 0;
    for (int k = 0; k < md->n_current; k++) gone &= md->current[k]->abandoned;
    for (int k = 0; !gone && p->kind == NNT_PROGRESS_TOKENS && k < md->n_current; k++) {
        serve_job *job = md->current[k];
        int row0 = md->current_row0[k], rows = md->current_rows[k];
        if (!job->stream || job->abandoned || row0 + rows > p->batch) continue;
        char text[64]; /* the step's tokens of this job's own rows */
        int n = snprintf(text, sizeof text, "event: tokens\ndata: {\"step\":%d,\"tokens\":[", p->step);
        int ok = serve_job_event(job, text, (size_t)n) == 0;
        for (int b = 0; ok && b < rows; b++) {
            n = snprintf(text, sizeof text, "%s%d", b ? "," : "", (int)p->tokens[row0 + b]);
            ok = serve_job_event(job, text, (size_t)n) == 0;
        }
        if (ok) ok = serve_job_event(job, "]}\n\n", 4) == 0;
        pthread_cond_broadcast(&s->cv);
    }
    if (gone) md->stopped++;
    pthread_mutex_unlock(&s->mu);
    return gone;
}

/* A job taken from the queue: its parsed request and the size of its batch. */
typedef struct prepared {
    serve_job *job;
    nnt_request *r; /* NULL: answered already (a refusal) */
    int rows, seq, group;
    long tokens;
} prepared;

/* The jobs the worker's next call serves, their rows one after the other (for on_progress). */
static void set_current(serve_model *md, prepared *const *jobs, int n)
{
    pthread_mutex_lock(&md->srv->mu);
    for (int k = 0, row0 = 0; k < n; row0 += jobs[k]->rows, k++) {
        md->current[k] = jobs[k]->job;
        md->current_row0[k] = row0;
        md->current_rows[k] = jobs[k]->rows;
    }
    md->n_current = n;
    pthread_mutex_unlock(&md->srv->mu);
}

/* Whether the job was abandoned (read under the lock). */
static int abandoned(serve_model *md, const serve_job *job)
{
    pthread_mutex_lock(&md->srv->mu);
    int a = job->abandoned;
    pthread_mutex_unlock(&md->srv->mu);
    return a;
}

void serve_job_release_user(serve_state *s, const serve_job *job)
{
    if (!s->auth.file) return;
    for (int i = 0; i < s->auth.n_users; i++)
        if (!strcmp(s->auth.users[i].name, job->user) && s->auth.users[i].active > 0) s->auth.users[i].active--;
}

int serve_job_submit(serve_model *md, serve_job *job, char *msg, size_t n)
{
    serve_state *s = md->srv;
    int status = 0;
    pthread_mutex_lock(&s->mu);
    serve_user *u = NULL;
    for (int i = 0; s->auth.file && i < s->auth.n_users; i++)
        if (!strcmp(s->auth.users[i].name, job->user)) u = &s->auth.users[i];
    if (s->draining) {
        snprintf(msg, n, "the server is shutting down and takes no new requests");
        status = 503;
    } else if (md->queued >= s->lim.queue) {
        snprintf(msg, n, "model '%s' has %d requests waiting, the most it queues; retry later", md->name, md->queued);
        status = 503;
    } else if (u && u->active >= s->lim.per_user) {
        snprintf(msg, n, "user '%s' has %d requests queued or running, the most one user may; wait for one to finish",
                 u->name, u->active);
        status = 429;
    } else {
        if (u) u->active++;
        job->next = NULL;
        if (md->tail)
            md->tail->next = job;
        else
            md->head = job;
        md->tail = job;
        md->queued++;
        pthread_cond_broadcast(&s->cv);
    }
    if (status) s->refused++;
    pthread_mutex_unlock(&s->mu);
    return status;
}

/* The answer: an error. */
static void fail(serve_job *job, int http, const char *status, const char *message)
{
    free(job->body);
    job->body = serve_error_json(status, message, &job->body_len);
    job->http_status = job->body ? http : 500;
    job->content_type = "application/json";
}

/* The server's own limits on a parsed request: tokens of its rows, new tokens of a generation.
 * Returns 0, or -1 with the job answered. */
static int check_limits(serve_model *md, prepared *p)
{
    const serve_limits *lim = &md->srv->lim;
    nnt_batch b = {0};
    nnt_status st = nnt_request_batch(p->r, md->m, &b);
    if (st != NNT_OK) {
        fail(p->job, serve_http_status(st), nnt_status_str(st), nnt_last_error(md->rt));
        return -1;
    }
    p->rows = b.batch;
    p->seq = b.seq;
    p->tokens = (long)b.batch * (long)b.seq;
    nnt_batch_free(&b);
    char msg[256];
    if (p->tokens > lim->tokens) {
        snprintf(msg, sizeof msg, "rows: %ld tokens (rows x length); this server takes at most %ld per request",
                 p->tokens, lim->tokens);
        fail(p->job, 413, nnt_status_str(NNT_ERR_INVALID_ARGUMENT), msg);
        return -1;
    }
    int ignore_eos = 0;
    const nnt_generate_opts *g = nnt_request_generate_opts(p->r, &ignore_eos);
    if (g) p->tokens += (long)p->rows * (long)g->max_new_tokens; /* the statistics count new tokens too */
    if (g && g->max_new_tokens > lim->new_tokens) {
        snprintf(msg, sizeof msg, "generate.max_new_tokens: %d; this server generates at most %d per request",
                 g->max_new_tokens, lim->new_tokens);
        fail(p->job, 413, nnt_status_str(NNT_ERR_INVALID_ARGUMENT), msg);
        return -1;
    }
    return 0;
}

/* Parses the job's document (files refused) and checks it against the limits. */
static void prepare(serve_model *md, prepared *p)
{
    serve_job *job = p->job;
    nnt_request_source src = {.struct_size = sizeof src, .json = job->json, .json_len = job->json_len,
                              .tensors = job->tensors, .tensors_len = job->tensors_len, .name = "request",
                              .flags = NNT_REQUEST_NO_FILES};
    nnt_status st = nnt_request_parse(md->rt, &src, &p->r);
    if (st != NNT_OK) {
        fail(job, serve_http_status(st), nnt_status_str(st), nnt_last_error(md->rt));
        return;
    }
    if (check_limits(md, p) != 0) {
        nnt_request_free(p->r);
        p->r = NULL;
    }
}

/* The answer of a run: its results as safetensors, or the error. */
static void answer_run(serve_model *md, serve_job *job, nnt_status st, const nnt_result *res)
{
    void *bytes = NULL;
    size_t len = 0;
    if (st == NNT_OK) st = nnt_result_safetensors(res, &bytes, &len);
    if (st != NNT_OK) {
        fail(job, serve_http_status(st), nnt_status_str(st), nnt_last_error(md->rt));
    } else if (len > md->srv->lim.result_bytes) {
        char msg[200];
        snprintf(msg, sizeof msg, "the results take %zu bytes; this server returns at most %zu (save less, or "
                 "slices of the values)", len, md->srv->lim.result_bytes);
        free(bytes);
        fail(job, 413, nnt_status_str(NNT_ERR_INVALID_ARGUMENT), msg);
    } else {
        free(job->body);
        job->body = bytes;
        job->body_len = len;
        job->http_status = 200;
        job->content_type = "application/octet-stream";
    }
}

static void run_alone(serve_model *md, prepared *p)
{
    if (abandoned(md, p->job)) { /* nobody waits for it: not run */
        fail(p->job, 499, "abandoned", "the client left or its time ran out before the request ran");
        return;
    }
    nnt_result *res = NULL;
    set_current(md, &p, 1);
    nnt_status st = nnt_request_run(md->m, p->r, NULL, &res);
    set_current(md, NULL, 0);
    answer_run(md, p->job, st, res);
    nnt_result_free(res);
}

/* Runs the n jobs of one group as one forward; when that fails, each alone (so that an error is
 * its own request's). Returns 1 when they shared a forward. */
static int run_group(serve_model *md, prepared **g, int n)
{
    if (n == 1) {
        run_alone(md, g[0]);
        return 0;
    }
    const nnt_request *reqs[SERVE_MAX_SHARE];
    nnt_result *res[SERVE_MAX_SHARE];
    for (int k = 0; k < n; k++) reqs[k] = g[k]->r;
    set_current(md, g, n);
    nnt_status st = nnt_request_run_shared(md->m, reqs, n, res);
    set_current(md, NULL, 0);
    if (st != NNT_OK) { /* (when it was stopped, each alone is skipped: all were abandoned) */
        for (int k = 0; k < n; k++) run_alone(md, g[k]);
        return 0;
    }
    for (int k = 0; k < n; k++) {
        answer_run(md, g[k]->job, NNT_OK, res[k]);
        nnt_result_free(res[k]);
    }
    return 1;
}

/* Runs the taken jobs: those that can share a forward in groups of one length (in queue order,
 * each group of requests that can share with its first - traces, or greedy generations of one
 * kind - within the server's tokens per request), the others one by one. */
static void run_taken(serve_model *md, prepared *p, int n, uint64_t *shared)
{
    for (int k = 0; k < n; k++) {
        p[k].group = -1;
        prepare(md, &p[k]);
    }
    for (int k = 0; k < n; k++) {
        if (!p[k].r || p[k].group >= 0) continue;
        prepared *g[SERVE_MAX_SHARE];
        int m = 0;
        long tokens = 0;
        g[m++] = &p[k];
        p[k].group = k;
        tokens = p[k].tokens;
        if (nnt_request_shareable(p[k].r))
            for (int i = k + 1; i < n; i++)
                if (p[i].r && p[i].group < 0 && p[i].seq == p[k].seq && nnt_request_share_compatible(p[k].r, p[i].r) &&
                    tokens + p[i].tokens <= md->srv->lim.tokens) {
                    g[m++] = &p[i];
                    p[i].group = k;
                    tokens += p[i].tokens;
                }
        if (run_group(md, g, m)) *shared += (uint64_t)m;
    }
}

static void *worker(void *arg)
{
    serve_model *md = arg;
    serve_state *s = md->srv;
    prepared taken[SERVE_MAX_SHARE];
    if (nnt_runtime_set_progress(md->rt, on_progress, md) != NNT_OK)
        fprintf(stderr, "nnt serve: model '%s': no progress handler (%s); abandoned requests run to their end\n",
                md->name, nnt_last_error(md->rt));
    pthread_mutex_lock(&s->mu);
    for (;;) {
        while (!md->head && !s->stopping) pthread_cond_wait(&s->cv, &s->mu);
        if (!md->head) break; /* stopping, and nothing left */
        int n = 0;
        while (md->head && n < s->lim.share) { /* what waits now, up to the most that share a forward */
            serve_job *job = md->head;
            md->head = job->next;
            if (!md->head) md->tail = NULL;
            md->queued--;
            job->running = 1;
            taken[n++] = (prepared){.job = job};
        }
        md->busy = n;
        pthread_mutex_unlock(&s->mu);

        double t0 = serve_now();
        uint64_t shared = 0;
        run_taken(md, taken, n, &shared);
        for (int k = 0; k < n; k++) serve_stream_final(taken[k].job);

        pthread_mutex_lock(&s->mu);
        md->busy = 0;
        md->busy_s += serve_now() - t0;
        md->shared += shared;
        for (int k = 0; k < n; k++) {
            serve_job *job = taken[k].job;
            nnt_request_free(taken[k].r);
            if (job->http_status == 200) {
                md->served++;
                md->tokens += (uint64_t)taken[k].tokens;
            } else {
                md->failed++;
            }
            serve_job_release_user(s, job);
            if (job->final) { /* a stream's last event */
                if (serve_job_event(job, job->final, job->final_len) != 0) job->http_status = 500;
                free(job->final);
                job->final = NULL;
            }
            job->done = 1;
            if (job->abandoned) serve_job_free(job); /* its client left: nobody waits for the answer */
        }
        pthread_cond_broadcast(&s->cv);
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

int serve_workers_start(serve_state *s)
{
    for (int i = 0; i < s->n_models; i++) {
        serve_model *md = &s->models[i];
        if (pthread_create(&md->worker, NULL, worker, md) != 0) {
            fprintf(stderr, "nnt serve: cannot start the worker thread of model '%s'\n", md->name);
            return -1;
        }
        md->worker_started = 1;
    }
    return 0;
}

void serve_workers_stop(serve_state *s)
{
    pthread_mutex_lock(&s->mu);
    s->stopping = 1;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    for (int i = 0; i < s->n_models; i++)
        if (s->models[i].worker_started) pthread_join(s->models[i].worker, NULL);
}
