/* guard.c - one call at a time per runtime. A runtime's models share its backends' scratch
 * memory, their arenas and its error record, so two calls running at once on one runtime (two
 * threads, or an edit callback calling back into the model it runs on) would corrupt each other.
 * Every public call that runs or changes a model, session or trace enters its runtime's guard:
 * the first call takes it, calls that call one another on the same thread nest, and a call made
 * while another thread holds the guard, or from user code the held call is running (an edit
 * callback), is refused with NNT_ERR_BUSY before it touches anything. A free (which returns
 * nothing) from another thread waits for the running call instead; from a callback it is refused
 * and frees nothing. */
#include <stdio.h>

#include "internal.h"

void nnt_guard_init(nnt_guard *g)
{
    pthread_mutex_init(&g->mu, NULL);
    pthread_cond_init(&g->idle, NULL);
    g->depth = 0;
    g->callbacks = 0;
    g->call = NULL;
}

void nnt_guard_destroy(nnt_guard *g)
{
    pthread_cond_destroy(&g->idle);
    pthread_mutex_destroy(&g->mu);
}

static nnt_status enter(nnt_runtime *rt, const char *call, int wait)
{
    if (!rt) return NNT_OK; /* the call's own argument checks report the missing object */
    nnt_guard *g = &rt->guard;
    pthread_t self = pthread_self();
    pthread_mutex_lock(&g->mu);
    while (wait && g->depth > 0 && !pthread_equal(g->owner, self)) pthread_cond_wait(&g->idle, &g->mu);
    if (g->depth == 0) {
        g->owner = self;
        g->depth = 1;
        g->call = call;
        pthread_mutex_unlock(&g->mu);
        return NNT_OK;
    }
    int mine = pthread_equal(g->owner, self), in_callback = g->callbacks > 0;
    if (mine && !in_callback) { /* one call of libnnt calling another */
        g->depth++;
        pthread_mutex_unlock(&g->mu);
        return NNT_OK;
    }
    const char *running = g->call;
    pthread_mutex_unlock(&g->mu);
    /* Only the holder's own thread may write the runtime's error record: the held call is paused
     * in a callback there. Another thread's refusal leaves the record to the call that runs;
     * NNT_ERR_BUSY's name says why (nnt_status_str). */
    if (mine)
        nnt_err_set(&rt->err, NNT_ERR_BUSY,
                    "busy: %s called from an edit callback of %s on the same runtime; a callback must not run, "
                    "change or free the model, session or trace that called it (copy what it needs, and run after "
                    "the call returns)",
                    call, running ? running : "a call");
    return NNT_ERR_BUSY;
}

nnt_status nnt_guard_enter(nnt_runtime *rt, const char *call)
{
    return enter(rt, call, 0);
}

nnt_status nnt_guard_enter_wait(nnt_runtime *rt, const char *call)
{
    return enter(rt, call, 1);
}

void nnt_guard_leave(nnt_runtime *rt)
{
    if (!rt) return;
    nnt_guard *g = &rt->guard;
    pthread_mutex_lock(&g->mu);
    if (g->depth > 0 && --g->depth == 0) {
        g->call = NULL;
        pthread_cond_broadcast(&g->idle);
    }
    pthread_mutex_unlock(&g->mu);
}

void nnt_guard_callback(nnt_runtime *rt, int entering)
{
    if (!rt) return;
    nnt_guard *g = &rt->guard;
    pthread_mutex_lock(&g->mu);
    g->callbacks += entering ? 1 : -1;
    pthread_mutex_unlock(&g->mu);
}
