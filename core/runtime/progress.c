/* progress.c - the runtime's progress handler: a caller's function that running calls report to
 * at each value site and generation step, and that can stop them (NNT_ERR_INTERRUPTED). */
#include "internal.h"

static nnt_status set_progress(nnt_runtime *rt, nnt_progress_fn fn, void *user)
{
    rt->progress = fn;
    rt->progress_user = user;
    return NNT_OK;
}

nnt_status nnt_runtime_set_progress(nnt_runtime *rt, nnt_progress_fn fn, void *user)
{
    if (!rt) return NNT_ERR_INVALID_ARGUMENT;
    NNT_GUARDED(rt, "nnt_runtime_set_progress", set_progress(rt, fn, user));
}

int nnt_progress_report(nnt_runtime *rt, const nnt_progress *p)
{
    if (!rt || !rt->progress) return 0;
    nnt_guard_callback(rt, 1);
    int stop = rt->progress(rt->progress_user, p);
    nnt_guard_callback(rt, 0);
    return stop != 0;
}

nnt_status nnt_progress_stopped(nnt_error *err, const char *where)
{
    return nnt_err_set(err, NNT_ERR_INTERRUPTED, "interrupted at %s: the runtime's progress handler asked to stop",
                       where);
}
