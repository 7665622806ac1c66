/* serve_stream.c - a request answered as server-sent events (the client sent Accept:
 * text/event-stream): each generation step's tokens as an event "tokens" {"step", "tokens"
 * (one id per row, -1 for a row that stopped)} while the worker runs it, then "result" (the
 * safetensors body, base64) or "error" (the JSON error). The events are sent through
 * libmicrohttpd's content reader from the connection's own thread, which waits for the worker's
 * next event, watching the client's socket and the request's time limit. */
#include <gnutls/gnutls.h>
#include <microhttpd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "serve.h"

/* prefix + text + "\n\n" as a new string in *out. Returns its length, or 0 without memory. */
static size_t event_text(const char *prefix, const char *text, size_t len, char **out)
{
    size_t p = strlen(prefix), n = p + len + 2;
    *out = malloc(n + 1);
    if (!*out) return 0;
    memcpy(*out, prefix, p);
    memcpy(*out + p, text, len);
    memcpy(*out + p + len, "\n\n", 3);
    return n;
}

void serve_stream_final(serve_job *job)
{
    if (!job->stream || job->final) return;
    if (job->http_status == 200) {
        gnutls_datum_t in = {(unsigned char *)job->body, (unsigned)job->body_len}, b64 = {0};
        if (job->body_len <= 0xffffffffu && gnutls_base64_encode2(&in, &b64) == 0) {
            job->final_len = event_text("event: result\ndata: ", (const char *)b64.data, b64.size, &job->final);
            gnutls_free(b64.data);
        }
        if (job->final) {
            free(job->body); /* sent as the event */
            job->body = NULL;
            job->body_len = 0;
            return;
        }
        free(job->body);
        job->body = serve_error_json("out of memory", "no memory for the result's events", &job->body_len);
        job->http_status = 500;
        job->content_type = "application/json";
    }
    if (job->body) job->final_len = event_text("event: error\ndata: ", job->body, job->body_len, &job->final);
}

/* The stream of one connection. */
typedef struct stream {
    serve_model *md;
    serve_job *job;  /* NULL once left (then tail is what remains to send) */
    int fd;          /* the client's socket */
    double deadline;
    size_t sent;     /* bytes of job->events sent */
    char *tail;      /* the closing event the stream made itself (time up) */
    size_t tail_len, tail_sent;
} stream;

static ssize_t copy_out(const char *from, size_t len, size_t *sent, char *buf, size_t max)
{
    size_t n = len - *sent < max ? len - *sent : max;
    memcpy(buf, from + *sent, n);
    *sent += n;
    return (ssize_t)n;
}

static ssize_t read_events(void *cls, uint64_t pos, char *buf, size_t max)
{
    (void)pos;
    stream *st = cls;
    serve_state *s = st->md->srv;
    pthread_mutex_lock(&s->mu);
    for (;;) {
        serve_job *job = st->job;
        if (!job) {
            pthread_mutex_unlock(&s->mu);
            if (st->tail_sent < st->tail_len) return copy_out(st->tail, st->tail_len, &st->tail_sent, buf, max);
            return MHD_CONTENT_READER_END_OF_STREAM;
        }
        if (st->sent < job->events_len) {
            ssize_t n = copy_out(job->events, job->events_len, &st->sent, buf, max);
            pthread_mutex_unlock(&s->mu);
            return n;
        }
        if (job->done) {
            pthread_mutex_unlock(&s->mu);
            return MHD_CONTENT_READER_END_OF_STREAM;
        }
        if (serve_socket_gone(st->fd)) {
            serve_job_leave(st->md, job);
            st->job = NULL;
            pthread_mutex_unlock(&s->mu);
            return MHD_CONTENT_READER_END_OF_STREAM; /* nobody reads the rest */
        }
        if (serve_now() > st->deadline) {
            char msg[160];
            snprintf(msg, sizeof msg, "no result within %.0f s, this server's time limit per request", s->lim.timeout_s);
            size_t len = 0;
            char *body = serve_error_json("timeout", msg, &len);
            if (body) st->tail_len = event_text("event: error\ndata: ", body, len, &st->tail);
            free(body);
            serve_job_leave(st->md, job);
            st->job = NULL;
            continue;
        }
        serve_wait_tick(s); /* then again: is the client still there, is the time up */
    }
}

static void free_stream(void *cls)
{
    stream *st = cls;
    pthread_mutex_lock(&st->md->srv->mu);
    if (st->job) serve_job_leave(st->md, st->job);
    pthread_mutex_unlock(&st->md->srv->mu);
    free(st->tail);
    free(st);
}

int serve_stream_answer(serve_model *md, struct MHD_Connection *c, serve_job *job, double deadline)
{
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    stream *st = calloc(1, sizeof *st);
    struct MHD_Response *r = st && ci ? MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384, read_events, st,
                                                                         free_stream)
                                      : NULL;
    if (!r) {
        free(st);
        pthread_mutex_lock(&md->srv->mu);
        serve_job_leave(md, job);
        pthread_mutex_unlock(&md->srv->mu);
        return MHD_NO;
    }
    *st = (stream){.md = md, .job = job, .fd = ci->connect_fd, .deadline = deadline};
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream");
    MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
    enum MHD_Result ok = MHD_queue_response(c, MHD_HTTP_OK, r);
    MHD_destroy_response(r); /* the stream (and the job) go with the response's last reference */
    return ok;
}
