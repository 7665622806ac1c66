/* trace_split.c - a trace's results parted among several requesters whose requests shared one
 * forward (core/methods/share.c: requests of different users run as one batch). Each result goes
 * to the requester whose request saved it, under the key a trace of that requester's requests
 * alone would give it: the value's path, "@k" for a later emission, and "#r" counting only that
 * requester's earlier requests of the same value (nnt.h, "saved values"). */
#include <ctype.h>
#include <string.h>

#include "trace/trace_internal.h"

/* Which requester made request req: j with first[j] <= req < first[j + 1], or -1. */
static int owner(const int *first, int n, int req)
{
    for (int j = 0; j < n; j++)
        if (req >= first[j] && req < first[j + 1]) return j;
    return -1;
}

nnt_status nnt_trace_split(const nnt_trace *src, const int *first_request, int n, nnt_trace *const *dst,
                           nnt_error *err)
{
    for (int i = 0; i < src->n_results; i++) {
        const result *r = &src->results[i];
        int req = r->occurrence_of_request, j = owner(first_request, n, req);
        if (j < 0) return nnt_err_set(err, NNT_ERR_INTERNAL, "shared forward: result '%s' of no requester", r->path);
        char key[256];
        snprintf(key, sizeof key, "%s", r->path);
        char *hash = strrchr(key, '#'); /* the copy count of the shared trace: recounted below */
        if (hash && hash[1]) {
            const char *d = hash + 1;
            while (isdigit((unsigned char)*d)) d++;
            if (!*d) *hash = '\0';
        }
        const request *rq = &src->reqs[req];
        int copy = 0;
        for (int k = first_request[j]; k < req; k++)
            copy += src->reqs[k].kind == rq->kind && src->reqs[k].path.slot == r->slot &&
                    (src->reqs[k].path.layer == r->layer || src->reqs[k].path.layer == NNT_LAYER_ALL);
        if (copy) snprintf(key + strlen(key), sizeof key - strlen(key), "#%d", copy);
        nnt_status st = nnt_trace_push_named(dst[j], key, r->none ? NULL : &r->t, err);
        if (st != NNT_OK) return st;
    }
    return NNT_OK;
}
