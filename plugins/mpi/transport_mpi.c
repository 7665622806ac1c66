/* transport_mpi.c - the Open MPI transport (nnt_transport.h): point-to-point messages between
 * the ranks of one mpirun job, every wait bounded and watching for other ranks' failure notices.
 *
 * Messages of data use one tag, failure notices another, all on a duplicate of MPI_COMM_WORLD
 * (so nothing else in the process can match them). A message longer than CHUNK bytes travels as
 * several messages of at most CHUNK bytes (MPI counts are int). Waiting polls MPI_Test - the
 * progress engine runs only inside MPI calls - spinning for the first SPIN_NS nanoseconds (a
 * decode step's hand-off is short) and then sleeping between polls, each sleep 1/64 of the time
 * waited so far (at least MIN_SLEEP_NS, at most MAX_SLEEP_NS): a rank waiting for an earlier
 * stage's long prefill wakes rarely and leaves the cores to it (frequent wake-ups preempt its
 * OpenMP threads, which then stall each other), and a message is picked up at most 1/64 later
 * than it arrived.
 *
 * Start-up (MPI_Init and the duplicate communicator) and MPI_Finalize wait for every rank; each
 * runs on a helper thread that the calling thread waits for within the same timeout, so a rank
 * stopped while the job starts or ends does not hold the others for ever. */
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <nnt/nnt_transport.h>
#include <nnt/nnt_version.h> /* the plugin reports nnt's version */

enum { TAG_DATA = 1, TAG_FAIL = 2 };
#define CHUNK ((size_t)1 << 30)
#define SPIN_NS 2000000LL     /* 2 ms of busy polling before sleeping */
#define MIN_SLEEP_NS 20000LL  /* then sleeps of 1/64 of the wait so far, within these bounds */
#define MAX_SLEEP_NS 1000000LL
#define SLEEP_NS 50000L       /* between polls for failure notices to leave */
#define NOTICE_MAX 1024

struct nnt_transport {
    MPI_Comm comm;
    int rank, size;
    double timeout_s;
    int failed_peer;           /* the first rank whose failure notice arrived, or -1 */
    char failed_msg[NOTICE_MAX];
    MPI_Request notices[64];   /* this rank's own notices in flight (notify_failure) */
    char notice[NOTICE_MAX];
    int n_notices;
};

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static nnt_status fail(nnt_error *err, nnt_status st, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static nnt_status fail(nnt_error *err, nnt_status st, const char *fmt, ...)
{
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
        err->status = st;
    }
    return st;
}

static nnt_status mpi_fail(nnt_error *err, int code, const char *what)
{
    char text[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(code, text, &len) != MPI_SUCCESS) snprintf(text, sizeof text, "error %d", code);
    return fail(err, NNT_ERR_BACKEND, "MPI: %s: %s", what, text);
}

/* 1 when a failure notice from another rank has arrived (read into t->failed_*). */
static int notice_arrived(nnt_transport *t)
{
    if (t->failed_peer >= 0) return 1;
    int flag = 0;
    MPI_Status s;
    if (MPI_Iprobe(MPI_ANY_SOURCE, TAG_FAIL, t->comm, &flag, &s) != MPI_SUCCESS || !flag) return 0;
    int n = 0;
    MPI_Get_count(&s, MPI_CHAR, &n);
    if (n < 0 || n >= NOTICE_MAX) n = NOTICE_MAX - 1;
    MPI_Recv(t->failed_msg, n, MPI_CHAR, s.MPI_SOURCE, TAG_FAIL, t->comm, MPI_STATUS_IGNORE);
    t->failed_msg[n] = '\0';
    t->failed_peer = s.MPI_SOURCE;
    return 1;
}

/* Waits for *req within the timeout, watching for failure notices. what: "send to" / "receive
 * from", for the message. On any error the request is cancelled and freed. */
static nnt_status wait_req(nnt_transport *t, MPI_Request *req, int peer, const char *what, MPI_Status *status,
                           nnt_error *err)
{
    int64_t start = now_ns(), limit = (int64_t)(t->timeout_s * 1e9);
    for (;;) {
        int done = 0;
        int rc = MPI_Test(req, &done, status);
        if (rc == MPI_ERR_TRUNCATE)
            return fail(err, NNT_ERR_FORMAT, "rank %d: rank %d sent a longer message than expected", t->rank, peer);
        if (rc != MPI_SUCCESS) return mpi_fail(err, rc, what);
        if (done) return NNT_OK;
        nnt_status st = NNT_OK;
        int64_t waited = now_ns() - start;
        if (notice_arrived(t))
            st = fail(err, NNT_ERR_STATE, "rank %d failed: %s", t->failed_peer, t->failed_msg);
        else if (waited > limit)
            st = fail(err, NNT_ERR_STATE,
                      "rank %d: nothing to %s rank %d within %g s ([distributed] timeout): that rank stopped or is "
                      "still busy", t->rank, what, peer, t->timeout_s);
        if (st != NNT_OK) {
            MPI_Cancel(req);
            MPI_Request_free(req);
            return st;
        }
        if (waited > SPIN_NS) {
            int64_t ns = waited / 64;
            ns = ns < MIN_SLEEP_NS ? MIN_SLEEP_NS : ns > MAX_SLEEP_NS ? MAX_SLEEP_NS : ns;
            struct timespec ts = {0, (long)ns};
            nanosleep(&ts, NULL);
        }
    }
}

static int mpi_launched(void)
{
    const char *s = getenv("OMPI_COMM_WORLD_SIZE");
    return s && atoi(s) > 1;
}

/* One MPI call sequence run on a helper thread that the calling thread waits for, at most a
 * timeout: MPI_Init and MPI_Finalize wait for every rank, and a rank stopped at that moment
 * would hold the others for ever. Shared under mu; a caller that gives up leaves this record and
 * the thread to the process's end (the thread may still be inside MPI). */
typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int done;           /* 1 once fn has returned */
    void (*fn)(nnt_transport *t, nnt_status *st, nnt_error *err);
    nnt_transport *t;
    nnt_status st;      /* fn's outcome */
    nnt_error err;
} bounded_call;

static void *bounded_run(void *arg)
{
    bounded_call *c = arg;
    nnt_status st = NNT_OK;
    nnt_error err = {0};
    c->fn(c->t, &st, &err);
    pthread_mutex_lock(&c->mu);
    c->st = st;
    c->err = err;
    c->done = 1;
    pthread_cond_signal(&c->cv);
    pthread_mutex_unlock(&c->mu);
    return NULL;
}

/* Runs fn(t) on a helper thread and waits at most timeout_s. Returns 1 when fn finished (its
 * status in *st, its message in *err), 0 when it did not in time (or no thread could start:
 * *st NNT_ERR_BACKEND then, with a message). */
static int run_bounded(void (*fn)(nnt_transport *, nnt_status *, nnt_error *), nnt_transport *t, double timeout_s,
                       nnt_status *st, nnt_error *err)
{
    bounded_call *c = calloc(1, sizeof *c);
    if (!c) {
        *st = fail(err, NNT_ERR_OUT_OF_MEMORY, "no memory");
        return 1;
    }
    c->fn = fn;
    c->t = t;
    pthread_mutex_init(&c->mu, NULL);
    pthread_cond_init(&c->cv, NULL);
    pthread_t th;
    if (pthread_create(&th, NULL, bounded_run, c) != 0) {
        free(c);
        *st = fail(err, NNT_ERR_BACKEND, "MPI transport: cannot start a thread");
        return 1;
    }
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    double whole = (double)until.tv_sec + until.tv_nsec * 1e-9 + timeout_s;
    until.tv_sec = (time_t)whole;
    until.tv_nsec = (long)((whole - (double)until.tv_sec) * 1e9);
    pthread_mutex_lock(&c->mu);
    int rc = 0;
    while (!c->done && rc != ETIMEDOUT) rc = pthread_cond_timedwait(&c->cv, &c->mu, &until);
    int done = c->done;
    pthread_mutex_unlock(&c->mu);
    if (!done) {
        pthread_detach(th);
        return 0;
    }
    pthread_join(th, NULL);
    *st = c->st;
    if (err && c->st != NNT_OK) *err = c->err;
    pthread_mutex_destroy(&c->mu);
    pthread_cond_destroy(&c->cv);
    free(c);
    return 1;
}

/* Start-up: MPI_Init (thread level SERIALIZED: the helper thread initialises, the opening thread
 * makes every later call) and this transport's duplicate of MPI_COMM_WORLD. */
static void start_mpi(nnt_transport *t, nnt_status *st, nnt_error *err)
{
    int inited = 0, provided = 0;
    MPI_Initialized(&inited);
    int rc = inited ? MPI_SUCCESS : MPI_Init_thread(NULL, NULL, MPI_THREAD_SERIALIZED, &provided);
    if (rc != MPI_SUCCESS) {
        *st = fail(err, NNT_ERR_BACKEND, "MPI_Init_thread failed (code %d)", rc);
        return;
    }
    if (!inited && provided < MPI_THREAD_SERIALIZED) {
        *st = fail(err, NNT_ERR_BACKEND, "this MPI library offers thread level %d; nnt needs MPI_THREAD_SERIALIZED (%d)",
                   provided, MPI_THREAD_SERIALIZED);
        return;
    }
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    if ((rc = MPI_Comm_dup(MPI_COMM_WORLD, &t->comm)) != MPI_SUCCESS) {
        *st = mpi_fail(err, rc, "MPI_Comm_dup");
        return;
    }
    MPI_Comm_set_errhandler(t->comm, MPI_ERRORS_RETURN);
    MPI_Comm_rank(t->comm, &t->rank);
    MPI_Comm_size(t->comm, &t->size);
}

static nnt_status mpi_open(double timeout_s, nnt_transport **out, nnt_error *err)
{
    if (!out || !(timeout_s > 0)) return fail(err, NNT_ERR_INVALID_ARGUMENT, "MPI transport: needs a timeout > 0 s");
    *out = NULL;
    nnt_transport *t = calloc(1, sizeof *t);
    if (!t) return fail(err, NNT_ERR_OUT_OF_MEMORY, "no memory");
    t->timeout_s = timeout_s;
    t->failed_peer = -1;
    nnt_status st = NNT_OK;
    if (!run_bounded(start_mpi, t, timeout_s, &st, err)) {
        const char *rank = getenv("OMPI_COMM_WORLD_RANK"); /* t stays with the thread still in MPI_Init */
        return fail(err, NNT_ERR_STATE,
                    "rank %s: the ranks did not all start within %g s ([distributed] timeout): another rank stopped "
                    "while the job was starting", rank ? rank : "?", timeout_s);
    }
    if (st != NNT_OK) {
        free(t);
        return st;
    }
    *out = t;
    return NNT_OK;
}

static int mpi_rank(const nnt_transport *t) { return t ? t->rank : 0; }
static int mpi_size(const nnt_transport *t) { return t ? t->size : 1; }

static nnt_status check_peer(const nnt_transport *t, int peer, nnt_error *err)
{
    if (!t) return fail(err, NNT_ERR_INVALID_ARGUMENT, "MPI transport: not open");
    if (peer < 0 || peer >= t->size || peer == t->rank)
        return fail(err, NNT_ERR_INVALID_ARGUMENT, "MPI transport: rank %d cannot message rank %d (ranks 0..%d)", t->rank,
                    peer, t->size - 1);
    return NNT_OK;
}

static nnt_status mpi_send(nnt_transport *t, int peer, const void *buf, size_t bytes, nnt_error *err)
{
    nnt_status st = check_peer(t, peer, err);
    for (size_t off = 0; st == NNT_OK && (off < bytes || (bytes == 0 && off == 0)); off += CHUNK) {
        size_t n = bytes - off < CHUNK ? bytes - off : CHUNK;
        MPI_Request req;
        int rc = MPI_Isend((const char *)buf + off, (int)n, MPI_BYTE, peer, TAG_DATA, t->comm, &req);
        st = rc != MPI_SUCCESS ? mpi_fail(err, rc, "MPI_Isend") : wait_req(t, &req, peer, "send to", MPI_STATUS_IGNORE, err);
        if (bytes == 0) break;
    }
    return st;
}

static nnt_status mpi_recv(nnt_transport *t, int peer, void *buf, size_t bytes, nnt_error *err)
{
    nnt_status st = check_peer(t, peer, err);
    for (size_t off = 0; st == NNT_OK && (off < bytes || (bytes == 0 && off == 0)); off += CHUNK) {
        size_t n = bytes - off < CHUNK ? bytes - off : CHUNK;
        MPI_Request req;
        MPI_Status s;
        int rc = MPI_Irecv((char *)buf + off, (int)n, MPI_BYTE, peer, TAG_DATA, t->comm, &req);
        if (rc != MPI_SUCCESS) return mpi_fail(err, rc, "MPI_Irecv");
        st = wait_req(t, &req, peer, "receive from", &s, err);
        int got = 0;
        if (st == NNT_OK && MPI_Get_count(&s, MPI_BYTE, &got) == MPI_SUCCESS && (size_t)got != n)
            st = fail(err, NNT_ERR_FORMAT, "rank %d: rank %d sent %d bytes where %zu were expected", t->rank, peer, got, n);
        if (bytes == 0) break;
    }
    return st;
}

static void mpi_notify_failure(nnt_transport *t, const char *msg)
{
    if (!t) return;
    snprintf(t->notice, sizeof t->notice, "%s", msg ? msg : "(no message)");
    int len = (int)strlen(t->notice);
    for (int r = 0; r < t->size; r++) {
        if (r == t->rank || t->n_notices >= (int)(sizeof t->notices / sizeof t->notices[0])) continue;
        if (MPI_Isend(t->notice, len, MPI_CHAR, r, TAG_FAIL, t->comm, &t->notices[t->n_notices]) == MPI_SUCCESS)
            t->n_notices++;
    }
    /* short notices go out eagerly; give them a bounded moment to leave before anything ends */
    int64_t start = now_ns();
    int all = 0;
    while (!all && now_ns() - start < 1000000000LL) {
        MPI_Testall(t->n_notices, t->notices, &all, MPI_STATUSES_IGNORE);
        if (!all) {
            struct timespec ts = {0, SLEEP_NS};
            nanosleep(&ts, NULL);
        }
    }
    for (int i = 0; !all && i < t->n_notices; i++)
        if (t->notices[i] != MPI_REQUEST_NULL) MPI_Request_free(&t->notices[i]);
    t->n_notices = 0;
}

static int mpi_failed_rank(const nnt_transport *t) { return t ? t->failed_peer : -1; }

static void mpi_abort(nnt_transport *t, int code)
{
    MPI_Abort(t ? t->comm : MPI_COMM_WORLD, code);
    exit(code); /* MPI_Abort does not return; if it did, end this rank at least */
}

static void finish_mpi(nnt_transport *t, nnt_status *st, nnt_error *err)
{
    (void)st;
    (void)err;
    MPI_Comm_free(&t->comm);
    int fin = 0;
    MPI_Finalized(&fin);
    if (!fin) MPI_Finalize();
}

/* MPI_Finalize waits for every rank: bounded as start-up is. A rank that does not arrive within
 * the timeout leaves this one to end without finalising, which mpirun reports as it ends the job
 * (t stays with the thread then). */
static void mpi_close(nnt_transport *t)
{
    if (!t) return;
    nnt_status st = NNT_OK;
    nnt_error err = {0};
    if (run_bounded(finish_mpi, t, t->timeout_s, &st, &err)) free(t);
}

NNT_PLUGIN_EXPORT const nnt_transport_descriptor nnt_transport_plugin = {
    .header = NNT_PLUGIN_HEADER(nnt_transport_descriptor, NNT_PLUGIN_TRANSPORT, "mpi", NNT_VERSION_STRING,
                                "Open MPI point-to-point messages between the ranks of an mpirun job"),
    .launched = mpi_launched,
    .open = mpi_open,
    .rank = mpi_rank,
    .size = mpi_size,
    .send = mpi_send,
    .recv = mpi_recv,
    .notify_failure = mpi_notify_failure,
    .failed_rank = mpi_failed_rank,
    .abort = mpi_abort,
    .close = mpi_close,
};
