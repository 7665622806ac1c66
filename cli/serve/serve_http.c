/* serve_http.c - the HTTP side of `nnt serve` (libmicrohttpd, a thread per connection): the
 * routes of docs/server.md, bearer-token checks, the body limit (refused from Content-Length
 * before a byte is read, and again while reading), multipart bodies (the document and its
 * safetensors attachment) through libmicrohttpd's POST processor, and the wait for a model's
 * worker, watching the client's socket so that a client that leaves frees its place in the
 * queue at once. */
#define _GNU_SOURCE /* POLLRDHUP */
#include <arpa/inet.h>
#include <cjson/cJSON.h>
#include <errno.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>

#include "serve.h"

struct serve_http {
    struct MHD_Daemon *d;
    serve_state *s;
};

/* What one HTTP request collects while its body arrives. */
typedef struct conn_state {
    int refused;                   /* an answer was already queued */
    struct MHD_PostProcessor *pp;  /* multipart bodies */
    char *json;                    /* the document (the whole body, or the "request" part) */
    size_t json_len, json_cap;
    char *tensors;                 /* the "tensors" part */
    size_t tensors_len, tensors_cap;
    size_t total;                  /* body bytes seen */
    int bad_part;                  /* a part other than "request" and "tensors" */
    char bad_name[64];
    int late_status;               /* a refusal found while the body arrived (answered at its end) */
    char late_msg[200];
} conn_state;

static enum MHD_Result answer(struct MHD_Connection *c, int status, const char *type, void *body, size_t len,
                              int retry_after)
{
    struct MHD_Response *r = MHD_create_response_from_buffer(len, body, MHD_RESPMEM_MUST_FREE);
    if (!r) {
        free(body);
        return MHD_NO;
    }
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, type);
    if (retry_after > 0) {
        char v[16];
        snprintf(v, sizeof v, "%d", retry_after);
        MHD_add_response_header(r, MHD_HTTP_HEADER_RETRY_AFTER, v);
    }
    if (status == 401) MHD_add_response_header(r, MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer");
    enum MHD_Result ok = MHD_queue_response(c, (unsigned)status, r);
    MHD_destroy_response(r);
    return ok;
}

static enum MHD_Result error(serve_state *s, struct MHD_Connection *c, int status, const char *what, const char *msg)
{
    size_t len = 0;
    char *body = serve_error_json(what, msg, &len);
    if (s) {
        pthread_mutex_lock(&s->mu);
        s->refused++;
        pthread_mutex_unlock(&s->mu);
    }
    if (!body) return MHD_NO;
    return answer(c, status, "application/json", body, len, status == 503 ? 5 : 0);
}

static enum MHD_Result json_answer(struct MHD_Connection *c, cJSON *root)
{
    char *text = root ? cJSON_PrintUnformatted(root) : NULL;
    cJSON_Delete(root);
    if (!text) return MHD_NO;
    return answer(c, 200, "application/json", text, strlen(text), 0);
}

/* The user the Authorization header names; NULL (and *name "") without authentication. Returns
 * 0, or -1 when the header is missing or wrong. */
static int authorise(serve_state *s, struct MHD_Connection *c, char *name)
{
    name[0] = '\0';
    if (!s->auth.file) return 0;
    const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
    if (!h || strncasecmp(h, "Bearer ", 7) != 0) return -1;
    const char *token = h + 7;
    while (*token == ' ') token++;
    pthread_mutex_lock(&s->mu);
    serve_user *u = serve_auth_find(&s->auth, token);
    if (u) snprintf(name, SERVE_NAME_MAX, "%s", u->name);
    pthread_mutex_unlock(&s->mu);
    return u ? 0 : -1;
}

static serve_model *model_named(serve_state *s, const char *name, size_t len)
{
    for (int i = 0; i < s->n_models; i++)
        if (strlen(s->models[i].name) == len && !strncmp(s->models[i].name, name, len)) return &s->models[i];
    return NULL;
}

static cJSON *model_json(const serve_model *md)
{
    const nnt_model_info *in = nnt_model_get_info(md->m);
    cJSON *o = cJSON_CreateObject();
    if (!o) return NULL;
    cJSON_AddStringToObject(o, "name", md->name);
    cJSON_AddStringToObject(o, "family", nnt_model_family(md->m));
    cJSON_AddStringToObject(o, "architecture", in->architecture ? in->architecture : "");
    cJSON_AddNumberToObject(o, "num_layers", in->num_layers);
    cJSON_AddNumberToObject(o, "hidden_size", in->hidden_size);
    cJSON_AddNumberToObject(o, "vocab_size", in->vocab_size);
    cJSON_AddNumberToObject(o, "num_experts", in->num_experts);
    return o;
}

/* Resident set of this process in bytes (/proc/self/statm), 0 when unknown. */
static double rss_bytes(void)
{
    FILE *f = fopen("/proc/self/statm", "r");
    long pages = 0, resident = 0;
    if (!f) return 0;
    int n = fscanf(f, "%ld %ld", &pages, &resident);
    fclose(f);
    return n == 2 ? (double)resident * 4096.0 : 0;
}

static cJSON *stats_json(serve_state *s)
{
    cJSON *o = cJSON_CreateObject(), *models = o ? cJSON_AddArrayToObject(o, "models") : NULL;
    if (!models) {
        cJSON_Delete(o);
        return NULL;
    }
    pthread_mutex_lock(&s->mu);
    double up = serve_now() - s->started;
    uint64_t served = 0, tokens = 0;
    for (int i = 0; i < s->n_models; i++) {
        serve_model *md = &s->models[i];
        cJSON *m = cJSON_CreateObject();
        cJSON_AddStringToObject(m, "name", md->name);
        cJSON_AddNumberToObject(m, "queued", md->queued);
        cJSON_AddNumberToObject(m, "running", md->busy);
        cJSON_AddNumberToObject(m, "served", (double)md->served);
        cJSON_AddNumberToObject(m, "failed", (double)md->failed);
        cJSON_AddNumberToObject(m, "shared", (double)md->shared);
        cJSON_AddNumberToObject(m, "stopped", (double)md->stopped);
        cJSON_AddNumberToObject(m, "tokens", (double)md->tokens);
        cJSON_AddNumberToObject(m, "busy_seconds", md->busy_s);
        cJSON_AddNumberToObject(m, "tokens_per_second_busy", md->busy_s > 0 ? (double)md->tokens / md->busy_s : 0);
        cJSON_AddItemToArray(models, m);
        served += md->served;
        tokens += md->tokens;
    }
    cJSON_AddNumberToObject(o, "uptime_seconds", up);
    cJSON_AddNumberToObject(o, "served", (double)served);
    cJSON_AddNumberToObject(o, "refused", (double)s->refused);
    cJSON_AddNumberToObject(o, "tokens", (double)tokens);
    cJSON_AddNumberToObject(o, "tokens_per_second", up > 0 ? (double)tokens / up : 0);
    cJSON_AddBoolToObject(o, "draining", s->draining);
    pthread_mutex_unlock(&s->mu);
    cJSON_AddNumberToObject(o, "rss_bytes", rss_bytes());
    return o;
}

/* Appends n bytes to a growing buffer, refusing past limit. Returns 0, or -1. */
static int append(char **buf, size_t *len, size_t *cap, const char *data, size_t n, size_t limit)
{
    if (*len + n > limit) return -1;
    if (*len + n + 1 > *cap) {
        size_t want = *cap ? *cap : 4096;
        while (want < *len + n + 1) want *= 2;
        char *grown = realloc(*buf, want);
        if (!grown) return -1;
        *buf = grown;
        *cap = want;
    }
    memcpy(*buf + *len, data, n);
    *len += n;
    (*buf)[*len] = '\0';
    return 0;
}

typedef struct part_ctx {
    conn_state *cs;
    size_t limit;
} part_ctx;

static enum MHD_Result on_part(void *cls, enum MHD_ValueKind kind, const char *key, const char *filename,
                               const char *content_type, const char *transfer_encoding, const char *data, uint64_t off,
                               size_t size)
{
    (void)kind, (void)filename, (void)content_type, (void)transfer_encoding, (void)off;
    conn_state *cs = cls;
    if (!key) return MHD_YES;
    if (!strcmp(key, "request")) return append(&cs->json, &cs->json_len, &cs->json_cap, data, size, SIZE_MAX) ? MHD_NO : MHD_YES;
    if (!strcmp(key, "tensors"))
        return append(&cs->tensors, &cs->tensors_len, &cs->tensors_cap, data, size, SIZE_MAX) ? MHD_NO : MHD_YES;
    cs->bad_part = 1;
    snprintf(cs->bad_name, sizeof cs->bad_name, "%.60s", key);
    return MHD_NO;
}

int serve_socket_gone(int fd)
{
    struct pollfd p = {.fd = fd, .events = POLLIN | POLLRDHUP};
    if (poll(&p, 1, 0) <= 0) return 0;
    if (p.revents & (POLLHUP | POLLERR | POLLRDHUP)) return 1;
    if (p.revents & POLLIN) { /* readable: more bytes (pipelining) or end of stream */
        char b;
        ssize_t n = recv(fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
        return n == 0;
    }
    return 0;
}

/* Whether the client's end of the connection is gone. */
static int client_gone(struct MHD_Connection *c)
{
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    return ci ? serve_socket_gone(ci->connect_fd) : 0;
}

/* Whether the client asked for server-sent events (Accept names text/event-stream). */
static int wants_events(struct MHD_Connection *c)
{
    const char *a = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_ACCEPT);
    return a && strstr(a, "text/event-stream") != NULL;
}

/* Hands the body to md's worker and waits for the answer (a stream: for its first event). */
static enum MHD_Result run_request(serve_state *s, struct MHD_Connection *c, serve_model *md, conn_state *cs,
                                   const char *user)
{
    serve_job *job = calloc(1, sizeof *job);
    if (!job) return error(s, c, 500, nnt_status_str(NNT_ERR_OUT_OF_MEMORY), "no memory for the request");
    job->json = cs->json;
    job->json_len = cs->json_len;
    job->tensors = cs->tensors;
    job->tensors_len = cs->tensors_len;
    cs->json = cs->tensors = NULL;
    snprintf(job->user, sizeof job->user, "%s", user);
    job->stream = wants_events(c);
    char msg[256];
    int refused = serve_job_submit(md, job, msg, sizeof msg);
    if (refused) {
        serve_job_free(job);
        return error(NULL, c, refused, refused == 503 ? "unavailable" : "too many requests", msg);
    }
    double deadline = serve_now() + s->lim.timeout_s;
    pthread_mutex_lock(&s->mu);
    while (!job->done && !(job->stream && job->events_len > 0)) {
        serve_wait_tick(s); /* then: is the client still there, is the time up */
        if (job->done || (job->stream && job->events_len > 0)) break;
        int gone = client_gone(c), late = serve_now() > deadline;
        if (!gone && !late) continue;
        serve_job_leave(md, job); /* queued: taken out; running: stopped unless it shares a forward */
        pthread_mutex_unlock(&s->mu);
        if (gone) return MHD_NO; /* nobody to answer */
        snprintf(msg, sizeof msg, "no result within %.0f s, this server's time limit per request", s->lim.timeout_s);
        return error(NULL, c, 504, "timeout", msg);
    }
    int streaming = job->stream && (!job->done || job->http_status == 200);
    pthread_mutex_unlock(&s->mu);
    if (streaming) return serve_stream_answer(md, c, job, deadline);
    int status = job->http_status;
    void *body = job->body;
    size_t len = job->body_len;
    const char *type = job->content_type ? job->content_type : "application/json";
    job->body = NULL;
    serve_job_free(job);
    return answer(c, status, type, body, len, 0);
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                                  const char *version, const char *upload_data, size_t *upload_data_size, void **con_cls)
{
    (void)version;
    serve_state *s = cls;
    conn_state *cs = *con_cls;
    int post = !strcmp(method, MHD_HTTP_METHOD_POST), get = !strcmp(method, MHD_HTTP_METHOD_GET);
    if (!cs) { /* the headers are in; the body (if any) is not */
        cs = calloc(1, sizeof *cs);
        if (!cs) return MHD_NO;
        *con_cls = cs;
        pthread_mutex_lock(&s->mu);
        s->open_requests++; /* until on_completed: a drain waits for the answer to be sent */
        pthread_mutex_unlock(&s->mu);
        if (post) {
            const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
            if (cl && strtoull(cl, NULL, 10) > s->lim.body_bytes) {
                char msg[160];
                snprintf(msg, sizeof msg, "a body of %s bytes; this server takes at most %zu", cl, s->lim.body_bytes);
                cs->refused = 1;
                return error(s, c, 413, "too large", msg);
            }
            const char *type = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_TYPE);
            if (type && !strncasecmp(type, "multipart/form-data", 19)) {
                cs->pp = MHD_create_post_processor(c, 65536, on_part, cs);
                if (!cs->pp) {
                    cs->refused = 1;
                    return error(s, c, 400, "bad body", "a multipart body without a usable boundary");
                }
            } else if (type && strncasecmp(type, "application/json", 16) != 0) {
                cs->refused = 1;
                return error(s, c, 415, "bad body",
                             "Content-Type: expected application/json (the request document) or multipart/form-data "
                             "(parts \"request\" and \"tensors\")");
            }
        }
        return MHD_YES;
    }
    if (cs->refused) { /* answered already: drop the rest of the body */
        *upload_data_size = 0;
        return MHD_YES;
    }
    if (*upload_data_size) { /* a refusal found here is answered once the body is in (libmicrohttpd
                              * queues no answer during an upload); a body past twice the limit
                              * closes the connection instead */
        cs->total += *upload_data_size;
        int over = cs->total > s->lim.body_bytes;
        if (!cs->late_status && !over && cs->pp) {
            if (MHD_post_process(cs->pp, upload_data, *upload_data_size) != MHD_YES) {
                cs->late_status = 400;
                if (cs->bad_part)
                    snprintf(cs->late_msg, sizeof cs->late_msg,
                             "a part named '%s'; a body has the parts \"request\" and \"tensors\"", cs->bad_name);
                else
                    snprintf(cs->late_msg, sizeof cs->late_msg, "a multipart body that does not parse");
            }
        } else if (!cs->late_status && !over && post) {
            over = append(&cs->json, &cs->json_len, &cs->json_cap, upload_data, *upload_data_size, s->lim.body_bytes);
        }
        *upload_data_size = 0;
        if (over && !cs->late_status) {
            cs->late_status = 413;
            snprintf(cs->late_msg, sizeof cs->late_msg, "a body of more than %zu bytes, the most this server takes",
                     s->lim.body_bytes);
        }
        if (cs->total / 2 > s->lim.body_bytes) return MHD_NO;
        return MHD_YES;
    }
    if (cs->late_status)
        return error(s, c, cs->late_status, cs->late_status == 413 ? "too large" : "bad body", cs->late_msg);

    /* the whole request is in */
    if (!strcmp(url, "/v1/health") && get) {
        pthread_mutex_lock(&s->mu);
        int draining = s->draining;
        pthread_mutex_unlock(&s->mu);
        const char *text = draining ? "{\"status\":\"draining\"}" : "{\"status\":\"ok\"}";
        return answer(c, draining ? 503 : 200, "application/json", strdup(text), strlen(text), 0);
    }
    if (strncmp(url, "/v1/", 4) != 0) return error(s, c, 404, "not found", "no such endpoint (see docs/server.md)");
    char user[SERVE_NAME_MAX];
    if (authorise(s, c, user) != 0)
        return error(s, c, 401, "unauthorised", "expected the header Authorization: Bearer TOKEN with a known token");
    if (!strcmp(url, "/v1/models") || !strcmp(url, "/v1/stats")) {
        if (!get) return error(s, c, 405, "method not allowed", "this endpoint answers GET");
        if (!strcmp(url, "/v1/stats")) return json_answer(c, stats_json(s));
        cJSON *root = cJSON_CreateObject(), *list = root ? cJSON_AddArrayToObject(root, "models") : NULL;
        for (int i = 0; list && i < s->n_models; i++) cJSON_AddItemToArray(list, model_json(&s->models[i]));
        return json_answer(c, root);
    }
    if (strncmp(url, "/v1/models/", 11) != 0) return error(s, c, 404, "not found", "no such endpoint (see docs/server.md)");
    const char *name = url + 11, *slash = strchr(name, '/');
    size_t name_len = slash ? (size_t)(slash - name) : strlen(name);
    serve_model *md = model_named(s, name, name_len);
    if (!md) {
        char msg[200];
        snprintf(msg, sizeof msg, "no model named '%.*s' on this server (GET /v1/models lists them)",
                 (int)(name_len > 100 ? 100 : name_len), name);
        return error(s, c, 404, "not found", msg);
    }
    const char *rest = slash ? slash : "";
    if (!*rest) {
        if (!get) return error(s, c, 405, "method not allowed", "this endpoint answers GET");
        return json_answer(c, model_json(md));
    }
    if (!strcmp(rest, "/print") || !strcmp(rest, "/support")) {
        if (!get) return error(s, c, 405, "method not allowed", "this endpoint answers GET");
        const char *text = rest[1] == 'p' ? md->print_text : md->support_text;
        char *copy = strdup(text ? text : "");
        return answer(c, 200, rest[1] == 'p' ? "text/plain; charset=utf-8" : "text/tab-separated-values; charset=utf-8",
                      copy, copy ? strlen(copy) : 0, 0);
    }
    if (!strcmp(rest, "/request")) {
        if (!post) return error(s, c, 405, "method not allowed", "this endpoint answers POST");
        if (!cs->json)
            return error(s, c, 400, "bad body", cs->pp ? "a multipart body without a \"request\" part"
                                                       : "an empty body; expected the request document");
        return run_request(s, c, md, cs, user);
    }
    return error(s, c, 404, "not found", "no such endpoint (see docs/server.md)");
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode toe)
{
    (void)c, (void)toe;
    serve_state *s = cls;
    conn_state *cs = *con_cls;
    if (!cs) return;
    pthread_mutex_lock(&s->mu);
    s->open_requests--;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    if (cs->pp) MHD_destroy_post_processor(cs->pp);
    free(cs->json);
    free(cs->tensors);
    free(cs);
    *con_cls = NULL;
}

/* "HOST:PORT" or "[V6]:PORT" into a socket address. Returns 0, or -1 with msg. */
static int parse_addr(const char *addr, struct sockaddr_storage *ss, socklen_t *len, char *msg, size_t n)
{
    char host[128];
    const char *colon = strrchr(addr, ':');
    if (!colon || colon == addr || (size_t)(colon - addr) >= sizeof host) {
        snprintf(msg, n, "--listen '%s': expected HOST:PORT (127.0.0.1:8765, [::1]:8765)", addr);
        return -1;
    }
    memcpy(host, addr, (size_t)(colon - addr));
    host[colon - addr] = '\0';
    char *end;
    errno = 0;
    long port = strtol(colon + 1, &end, 10);
    if (!colon[1] || *end || errno || port < 0 || port > 65535) {
        snprintf(msg, n, "--listen '%s': the port is not a number in 0..65535", addr);
        return -1;
    }
    memset(ss, 0, sizeof *ss);
    if (host[0] == '[') {
        size_t hl = strlen(host);
        if (hl < 3 || host[hl - 1] != ']') {
            snprintf(msg, n, "--listen '%s': an IPv6 address goes in brackets, [::1]:8765", addr);
            return -1;
        }
        host[hl - 1] = '\0';
        struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)ss;
        a6->sin6_family = AF_INET6;
        a6->sin6_port = htons((uint16_t)port);
        if (inet_pton(AF_INET6, host + 1, &a6->sin6_addr) != 1) {
            snprintf(msg, n, "--listen '%s': '%s' is not an IPv6 address", addr, host + 1);
            return -1;
        }
        *len = sizeof *a6;
        return 0;
    }
    struct sockaddr_in *a4 = (struct sockaddr_in *)ss;
    a4->sin_family = AF_INET;
    a4->sin_port = htons((uint16_t)port);
    if (inet_pton(AF_INET, host, &a4->sin_addr) != 1) {
        snprintf(msg, n, "--listen '%s': '%s' is not an IPv4 address (names are not looked up)", addr, host);
        return -1;
    }
    *len = sizeof *a4;
    return 0;
}

int serve_addr_is_loopback(const char *addr, char *msg, size_t n)
{
    struct sockaddr_storage ss;
    socklen_t len;
    if (parse_addr(addr, &ss, &len, msg, n) != 0) return -1;
    if (ss.ss_family == AF_INET) return (ntohl(((struct sockaddr_in *)&ss)->sin_addr.s_addr) >> 24) == 127;
    return IN6_IS_ADDR_LOOPBACK(&((struct sockaddr_in6 *)&ss)->sin6_addr);
}

serve_http *serve_http_start(serve_state *s, const char *addr, int *port, char *msg, size_t n)
{
    struct sockaddr_storage ss;
    socklen_t len;
    if (parse_addr(addr, &ss, &len, msg, n) != 0) return NULL;
    serve_http *h = calloc(1, sizeof *h);
    if (!h) {
        snprintf(msg, n, "no memory");
        return NULL;
    }
    h->s = s;
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION | MHD_USE_ERROR_LOG |
                     (ss.ss_family == AF_INET6 ? MHD_USE_IPv6 : 0);
    h->d = MHD_start_daemon(flags, 0, NULL, NULL, on_request, s, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&ss,
                            MHD_OPTION_CONNECTION_LIMIT, (unsigned)s->lim.connections, MHD_OPTION_CONNECTION_TIMEOUT,
                            s->lim.idle_s, MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)65536,
                            MHD_OPTION_NOTIFY_COMPLETED, on_completed, s, MHD_OPTION_END);
    if (!h->d) {
        snprintf(msg, n, "--listen %s: cannot listen there (in use, or not an address of this machine)", addr);
        free(h);
        return NULL;
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(h->d, MHD_DAEMON_INFO_BIND_PORT);
    *port = di ? di->port : 0;
    return h;
}

void serve_http_stop(serve_http *h)
{
    if (!h) return;
    MHD_stop_daemon(h->d);
    free(h);
}
