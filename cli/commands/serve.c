/* serve.c - `nnt serve`: keeps one or more models loaded and answers their requests over HTTP
 * (docs/server.md). This file reads the options, loads each model on a runtime of its own,
 * starts the workers and the listener (cli/serve/), and then waits for signals: SIGHUP re-reads
 * the tokens file, SIGTERM or SIGINT stops taking requests, lets those in flight finish within
 * --drain seconds, and exits. Like `nnt plan`, it parses its own options. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../cli.h"

#ifndef NNT_HAVE_MICROHTTPD
int cmd_serve(int argc, char **argv)
{
    (void)argc, (void)argv;
    fprintf(stderr, "nnt serve: this nnt was built without libmicrohttpd (Debian: libmicrohttpd-dev, which "
                    "scripts/install-deps.sh installs); install it and build again\n");
    return 1;
}
#else
#include "../serve/serve.h"

#define SERVE_USAGE                                                                                                    \
    "usage: nnt serve --model [NAME=]DIR [--model ...] [--listen HOST:PORT] [--tokens FILE] [--config FILE]\n"        \
    "                 [--queue N] [--user-requests N] [--timeout S] [--max-body-mb MB] [--max-result-mb MB]\n"          \
    "                 [--max-tokens N] [--max-new-tokens N] [--connections N] [--idle-timeout S] [--drain S]\n"          \
    "                 [--share N]\n"                                                                                  \
    "each option, the endpoints, streamed answers and the threat model: docs/server.md\n"

static int serve_usage(const char *fmt, const char *arg)
{
    fprintf(stderr, "nnt serve: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\n" SERVE_USAGE);
    return 2;
}

/* A number in [lo, hi] from the whole of text. */
static int serve_num(const char *text, double lo, double hi, double *out)
{
    char *end = NULL;
    errno = 0;
    double v = strtod(text, &end);
    if (errno || end == text || *end || !(v >= lo && v <= hi)) return 0;
    *out = v;
    return 1;
}

typedef struct serve_args {
    const char *names[SERVE_MAX_MODELS], *dirs[SERVE_MAX_MODELS];
    int n_models;
    const char *listen, *tokens, *config;
} serve_args;

static int parse_args(int argc, char **argv, serve_args *a, serve_limits *lim)
{
    static const struct {
        const char *flag;
        double lo, hi;
    } numbers[] = {
        {"--queue", 1, 1e6},          {"--user-requests", 1, 1e6},  {"--timeout", 0.1, 1e7},
        {"--max-body-mb", 0.001, 1e6}, {"--max-result-mb", 0.001, 1e6}, {"--max-tokens", 1, 1e9},
        {"--max-new-tokens", 1, 1e7},  {"--connections", 1, 65536},  {"--idle-timeout", 1, 86400},
        {"--drain", 0, 86400},         {"--share", 1, SERVE_MAX_SHARE},
    };
    for (int i = 1; i < argc; i++) {
        const char *f = argv[i];
        if (!strcmp(f, "--help") || !strcmp(f, "-h")) {
            fputs(SERVE_USAGE, stdout);
            exit(0);
        }
        if (i + 1 >= argc) return serve_usage("%s needs a value", f);
        const char *v = argv[++i];
        if (!strcmp(f, "--model")) {
            if (a->n_models == SERVE_MAX_MODELS) return serve_usage("--model %s: at most 16 models", v);
            const char *eq = strchr(v, '=');
            a->names[a->n_models] = eq ? v : NULL;
            a->dirs[a->n_models++] = eq ? eq + 1 : v;
            if (eq && (eq == v || eq - v >= SERVE_NAME_MAX || !eq[1]))
                return serve_usage("--model '%s': expected NAME=DIR with a name of 1 to 63 characters, or DIR", v);
            continue;
        }
        if (!strcmp(f, "--listen")) { a->listen = v; continue; }
        if (!strcmp(f, "--tokens")) { a->tokens = v; continue; }
        if (!strcmp(f, "--config")) { a->config = v; continue; }
        size_t k = 0;
        while (k < sizeof numbers / sizeof *numbers && strcmp(numbers[k].flag, f)) k++;
        if (k == sizeof numbers / sizeof *numbers) return serve_usage("unknown option '%s'", f);
        double x;
        if (!serve_num(v, numbers[k].lo, numbers[k].hi, &x)) {
            char msg[200];
            snprintf(msg, sizeof msg, "%s '%%s': expected a number in %g..%g", f, numbers[k].lo, numbers[k].hi);
            return serve_usage(msg, v);
        }
        switch (k) {
        case 0: lim->queue = (int)x; break;
        case 1: lim->per_user = (int)x; break;
        case 2: lim->timeout_s = x; break;
        case 3: lim->body_bytes = (size_t)(x * 1048576.0); break;
        case 4: lim->result_bytes = (size_t)(x * 1048576.0); break;
        case 5: lim->tokens = (long)x; break;
        case 6: lim->new_tokens = (int)x; break;
        case 7: lim->connections = (int)x; break;
        case 8: lim->idle_s = (unsigned)x; break;
        case 9: lim->drain_s = x; break;
        default: lim->share = (int)x; break;
        }
    }
    if (!a->n_models) return serve_usage("%s", "needs --model DIR (once per model)");
    return 0;
}

/* A model's printout into a new string (f writes it to a FILE). */
static char *captured(const nnt_model *m, int support)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f) return NULL;
    nnt_status st = support ? nnt_model_support(m, f, 1) : nnt_model_print(m, f);
    fclose(f);
    if (st != NNT_OK) {
        free(text);
        return NULL;
    }
    return text;
}

/* The model's name: NAME of NAME=DIR, else the folder's last component. */
static void model_name(const serve_args *a, int i, char *out)
{
    if (a->names[i]) {
        snprintf(out, SERVE_NAME_MAX, "%.*s", (int)(strchr(a->names[i], '=') - a->names[i]), a->names[i]);
        return;
    }
    const char *d = a->dirs[i];
    size_t len = strlen(d);
    while (len > 1 && d[len - 1] == '/') len--;
    size_t start = len;
    while (start && d[start - 1] != '/') start--;
    snprintf(out, SERVE_NAME_MAX, "%.*s", (int)(len - start > SERVE_NAME_MAX - 1 ? SERVE_NAME_MAX - 1 : len - start),
             d + start);
}

static int load_models(serve_state *s, const serve_args *a)
{
    for (int i = 0; i < a->n_models; i++) {
        serve_model *md = &s->models[i];
        model_name(a, i, md->name);
        md->dir = a->dirs[i];
        md->srv = s;
        s->n_models = i + 1;
        if (nnt_runtime_open(a->config, &md->rt) != NNT_OK) {
            fprintf(stderr, "nnt serve: cannot start: %s\n", md->rt ? nnt_last_error(md->rt) : "no memory");
            return 1;
        }
        if (nnt_model_load(md->rt, md->dir, &md->m) != NNT_OK) {
            fprintf(stderr, "nnt serve: cannot load model '%s' from %s: %s\n", md->name, md->dir, nnt_last_error(md->rt));
            return 1;
        }
        md->print_text = captured(md->m, 0);
        md->support_text = captured(md->m, 1);
        fprintf(stderr, "nnt serve: model '%s' (%s) loaded from %s\n", md->name, nnt_model_family(md->m), md->dir);
    }
    return 0;
}

static void free_models(serve_state *s)
{
    for (int i = 0; i < s->n_models; i++) {
        serve_model *md = &s->models[i];
        for (serve_job *j = md->head, *next; j; j = next) {
            next = j->next;
            serve_job_free(j);
        }
        free(md->print_text);
        free(md->support_text);
        nnt_model_free(md->m);
        nnt_runtime_close(md->rt);
    }
}

/* Waits (up to drain_s) until no model has a request queued or running and every answer begun
 * has been sent. */
static void drain(serve_state *s)
{
    double until = serve_now() + s->lim.drain_s;
    pthread_mutex_lock(&s->mu);
    s->draining = 1;
    for (;;) {
        int left = 0;
        for (int i = 0; i < s->n_models; i++) left += s->models[i].queued + s->models[i].busy;
        int jobs = left;
        left += s->open_requests;
        if (!left || serve_now() >= until) {
            left = jobs;
            if (left) fprintf(stderr, "nnt serve: %d requests still in flight after --drain %g s\n", left, s->lim.drain_s);
            break;
        }
        pthread_mutex_unlock(&s->mu);
        struct timespec ts = {0, 50 * 1000000L};
        nanosleep(&ts, NULL);
        pthread_mutex_lock(&s->mu);
    }
    pthread_mutex_unlock(&s->mu);
}

int cmd_serve(int argc, char **argv)
{
    serve_args a = {.listen = "127.0.0.1:8765"};
    serve_state s = {
        .lim = {.body_bytes = (size_t)64 << 20, .result_bytes = (size_t)1 << 30, .queue = 64, .per_user = 4,
                .timeout_s = 600, .tokens = 65536, .new_tokens = 4096, .connections = 256, .idle_s = 30, .drain_s = 60,
                .share = 16},
    };
    int rc = parse_args(argc, argv, &a, &s.lim);
    if (rc) return rc;
    char msg[512];
    int loopback = serve_addr_is_loopback(a.listen, msg, sizeof msg);
    if (loopback < 0) return serve_usage("%s", msg);
    if (!a.tokens && !loopback)
        return serve_usage("--listen %s is not a loopback address: a server reachable from elsewhere needs --tokens FILE",
                           a.listen);
    for (int i = 0; i < a.n_models; i++) { /* the names first: nothing is loaded for a command line that fails */
        char name[SERVE_NAME_MAX], other[SERVE_NAME_MAX];
        model_name(&a, i, name);
        for (int j = 0; j < i; j++) {
            model_name(&a, j, other);
            if (!strcmp(name, other))
                return serve_usage("two models are named '%s'; name them with --model NAME=DIR", name);
        }
    }
    s.auth.file = a.tokens;
    if (a.tokens && serve_auth_load(&s.auth, msg, sizeof msg) != 0) {
        fprintf(stderr, "nnt serve: %s\n", msg);
        return 1;
    }
    /* every thread started from here on inherits this mask: the signals are taken by sigwait below */
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGTERM);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGHUP);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    signal(SIGPIPE, SIG_IGN); /* a client gone mid-answer is an error on that socket, not the end */
    pthread_mutex_init(&s.mu, NULL);
    pthread_cond_init(&s.cv, NULL);
    s.started = serve_now();
    serve_http *h = NULL;
    rc = load_models(&s, &a);
    if (rc == 0 && serve_workers_start(&s) != 0) rc = 1;
    int port = 0;
    if (rc == 0 && !(h = serve_http_start(&s, a.listen, &port, msg, sizeof msg))) {
        fprintf(stderr, "nnt serve: %s\n", msg);
        rc = 1;
    }
    if (rc == 0) {
        char host[128];
        snprintf(host, sizeof host, "%.*s", (int)(strrchr(a.listen, ':') - a.listen), a.listen);
        printf("nnt serve: listening on http://%s:%d (%d model%s%s)\n", host, port, s.n_models, s.n_models > 1 ? "s" : "",
               a.tokens ? ", bearer tokens" : ", no authentication: loopback only");
        fflush(stdout);
        for (;;) {
            int sig = 0;
            if (sigwait(&sigs, &sig) != 0) continue;
            if (sig == SIGHUP) {
                if (!a.tokens) continue;
                pthread_mutex_lock(&s.mu);
                int bad = serve_auth_load(&s.auth, msg, sizeof msg);
                pthread_mutex_unlock(&s.mu);
                fprintf(stderr, bad ? "nnt serve: SIGHUP: %s; the previous tokens stay\n" : "nnt serve: SIGHUP: tokens re-read%s\n",
                        bad ? msg : "");
                continue;
            }
            fprintf(stderr, "nnt serve: %s: taking no new requests, draining\n", sig == SIGTERM ? "SIGTERM" : "SIGINT");
            break;
        }
        drain(&s);
    }
    serve_http_stop(h);
    serve_workers_stop(&s);
    free_models(&s);
    serve_auth_free(&s.auth);
    pthread_cond_destroy(&s.cv);
    pthread_mutex_destroy(&s.mu);
    return rc;
}
#endif /* NNT_HAVE_MICROHTTPD */
