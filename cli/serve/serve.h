/* serve.h - what the files of `nnt serve` share (docs/server.md): the server's settings and
 * counters, each resident model with its queue of requests and the worker thread that runs
 * them, the bearer tokens, and the HTTP side (libmicrohttpd). Every request is run by libnnt's
 * nnt_request_run on the model's own runtime, from that model's worker thread only; the HTTP
 * threads never call libnnt. */
#ifndef NNT_SERVE_H
#define NNT_SERVE_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "nnt/nnt.h"

#define SERVE_MAX_MODELS 16
#define SERVE_NAME_MAX 64   /* a model's or a user's name, NUL included */
#define SERVE_HASH_BYTES 32 /* SHA-256 */
#define SERVE_MAX_SHARE 64  /* requests one forward may serve (--share) */

/* The limits a request meets (options of `nnt serve`; docs/server.md, "Limits"). */
typedef struct serve_limits {
    size_t body_bytes;        /* --max-body-mb: a request body */
    size_t result_bytes;      /* --max-result-mb: a response's safetensors */
    int queue;                /* --queue: requests waiting per model */
    int per_user;             /* --user-requests: one user's requests queued or running at once */
    double timeout_s;         /* --timeout: how long a request may wait for its result */
    long tokens;              /* --max-tokens: rows x tokens of one request */
    int new_tokens;           /* --max-new-tokens: a generation's max_new_tokens */
    int connections;          /* --connections: open HTTP connections */
    unsigned idle_s;          /* --idle-timeout: a connection silent this long is closed */
    double drain_s;           /* --drain: SIGTERM waits this long for requests in flight */
    int share;                /* --share: requests taken from a queue at once, to share forwards */
} serve_limits;

/* One user of the tokens file: the name and the SHA-256 of the token (the token itself is not kept). */
typedef struct serve_user {
    char name[SERVE_NAME_MAX];
    uint8_t hash[SERVE_HASH_BYTES];
    int active; /* requests queued or running (counted across reloads by name) */
} serve_user;

/* The tokens file, read at start and again on SIGHUP (serve_auth.c). */
typedef struct serve_auth {
    const char *file; /* NULL: no authentication (loopback only) */
    serve_user *users;
    int n_users;
} serve_auth;

typedef struct serve_state serve_state;

/* A request on its way through a model's queue. The HTTP thread that made it waits for done; a
 * job its client left (abandoned) is freed by whichever side sees the other gone last. */
typedef struct serve_job {
    char *json;            /* the request document (owned) */
    size_t json_len;
    void *tensors;         /* the safetensors attachment, or NULL (owned) */
    size_t tensors_len;
    char user[SERVE_NAME_MAX];
    int running, done;
    int abandoned;         /* its client left or its time ran out: nobody takes the answer, and a
                            * forward serving only abandoned jobs is stopped */
    int stream;            /* the client asked for server-sent events (Accept: text/event-stream) */
    char *events;          /* stream: the events so far (each generation step's tokens, then the
                            * result or the error), owned, guarded by srv->mu */
    size_t events_len, events_cap;
    char *final;           /* stream: the last event, made by the worker outside the lock (owned) */
    size_t final_len;
    int http_status;       /* the answer: 200 with a safetensors body, else a JSON error */
    char *body;            /* owned */
    size_t body_len;
    const char *content_type;
    struct serve_job *next;
} serve_job;

typedef struct serve_model {
    char name[SERVE_NAME_MAX];
    const char *dir;
    nnt_runtime *rt;
    nnt_model *m;
    char *print_text, *support_text; /* nnt print / nnt support --tsv, made at load */
    serve_state *srv;
    serve_job *head, *tail; /* waiting, oldest first; guarded by srv->mu */
    int queued, busy; /* busy: requests taken by the worker and not yet answered */
    pthread_t worker;
    int worker_started;
    /* counters, guarded by srv->mu */
    uint64_t served, failed, tokens;
    uint64_t shared;       /* requests answered from a forward shared with others */
    uint64_t stopped;      /* forwards stopped because every request they served was abandoned */
    serve_job *current[SERVE_MAX_SHARE]; /* the jobs of the call running now (the worker's) */
    int current_row0[SERVE_MAX_SHARE], current_rows[SERVE_MAX_SHARE]; /* each one's rows of the batch */
    int n_current;
    double busy_s;
} serve_model;

struct serve_state {
    serve_limits lim;
    serve_auth auth;
    serve_model models[SERVE_MAX_MODELS];
    int n_models;
    pthread_mutex_t mu;   /* the queues, counters, users' counts and draining */
    pthread_cond_t cv;    /* a job queued, a job done, or draining */
    int draining, stopping;
    uint64_t refused;     /* answered 4xx/5xx before reaching a model */
    int open_requests;    /* HTTP requests begun and not yet answered in full */
    double started;       /* monotonic seconds */
};

/* Monotonic seconds. */
double serve_now(void);
/* Waits on s->cv (s->mu held) until it is signalled or 0.1 s pass: the beat at which a waiting
 * HTTP thread looks at its client and its time limit. */
void serve_wait_tick(serve_state *s);

/* ---- bearer tokens (serve_auth.c) ---- */
/* Reads a->file into a new table: lines "NAME TOKEN" (blank lines and lines starting with '#'
 * skipped); names unique, tokens of 16 to 512 printable characters. On success the old table is
 * replaced (users' active counts carried over by name). Returns 0, or -1 with msg (size n) naming
 * the file and line. Call with srv->mu held when the server runs. */
int serve_auth_load(serve_auth *a, char *msg, size_t n);
/* The user whose token `presented` is (compared by hash in constant time per entry), or NULL. */
serve_user *serve_auth_find(serve_auth *a, const char *presented);
void serve_auth_free(serve_auth *a);

/* ---- queues and workers (serve_jobs.c) ---- */
/* Starts each model's worker thread. Returns 0 or -1 (printed). */
int serve_workers_start(serve_state *s);
/* Wakes every worker to stop once its queue is empty and joins them. */
void serve_workers_stop(serve_state *s);
/* Queues job on model md. Returns 0, or the HTTP status that refuses it (503: queue full or
 * draining; 429: the user's limit), with msg filled. srv->mu must not be held. */
int serve_job_submit(serve_model *md, serve_job *job, char *msg, size_t n);
void serve_job_free(serve_job *job);
/* The job's user has one request fewer queued or running (srv->mu held). */
void serve_job_release_user(serve_state *s, const serve_job *job);
/* The side that waited for job (the HTTP thread) lets it go, srv->mu held: a finished job is
 * freed, a queued one taken out of md's queue and freed, a running one marked abandoned (its
 * forward is stopped when no other request shares it, and the worker frees it). */
void serve_job_leave(serve_model *md, serve_job *job);
/* Appends text to the job's events (srv->mu held). Returns 0, or -1 without memory. */
int serve_job_event(serve_job *job, const char *text, size_t len);

/* ---- HTTP (serve_http.c) ---- */
typedef struct serve_http serve_http;
/* Listens on addr ("HOST:PORT", "[V6]:PORT"; port 0 picks a free one) and answers requests until
 * serve_http_stop. *port receives the port listened on. Returns NULL with msg filled. */
serve_http *serve_http_start(serve_state *s, const char *addr, int *port, char *msg, size_t n);
void serve_http_stop(serve_http *h);
/* 1 when addr (as --listen takes it) is a loopback address (127.0.0.0/8, ::1), 0 when another;
 * -1 with msg filled when it is not an address as --listen takes one. */
int serve_addr_is_loopback(const char *addr, char *msg, size_t n);

/* Whether the client's end of socket fd is gone (closed or reset), without blocking. */
int serve_socket_gone(int fd);

/* ---- server-sent events (serve_stream.c) ---- */
/* Makes a streamed job's last event (job->final; the worker calls it before taking the lock):
 * "result" with the safetensors body in base64, or "error" with the JSON error body. */
void serve_stream_final(serve_job *job);
struct MHD_Connection;
/* Answers connection c with job's events as they come (text/event-stream, chunked), from the
 * HTTP thread that submitted job once it has an event or is done; the stream owns job from then
 * on and leaves it (serve_job_leave) when the client goes, its time (deadline, monotonic s) runs
 * out - then it ends with an "error" event - or the answer is sent. srv->mu must not be held.
 * Returns libmicrohttpd's MHD_YES or MHD_NO. */
int serve_stream_answer(serve_model *md, struct MHD_Connection *c, serve_job *job, double deadline);

/* ---- answers (serve_answer.c) ---- */
/* A JSON error body {"error": {"status": STATUS, "message": MSG}} as a new string. */
char *serve_error_json(const char *status, const char *message, size_t *len);
/* The HTTP status of a libnnt status: 400 for what the request got wrong, 413 for memory it
 * asks and cannot have, 500 otherwise. */
int serve_http_status(nnt_status st);

#endif /* NNT_SERVE_H */
