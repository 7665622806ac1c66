/* decode_timer.h - the seconds a generation spends decoding, apart from its prompt: the time
 * between the progress reports of its first and its last step (nnt_runtime_set_progress), so a
 * long prompt's prefill, and that prefill's run-to-run spread, stay out of the rate. Shared by
 * the benchmark programs; header-only. */
#ifndef NNT_BENCH_DECODE_TIMER_H
#define NNT_BENCH_DECODE_TIMER_H

#include <stdlib.h>
#include <time.h>

#include "nnt/nnt.h"

typedef struct decode_clock {
    int last;          /* the step whose report ends the timing */
    double first_s;    /* CLOCK_MONOTONIC seconds at step 0's report */
    double last_s;     /* ... at step `last`'s report */
} decode_clock;

static double decode_clock_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int decode_clock_report(void *user, const nnt_progress *p)
{
    decode_clock *c = user;
    if (p->kind != NNT_PROGRESS_TOKENS) return 0;
    if (p->step == 0) c->first_s = decode_clock_now();
    if (p->step == c->last) c->last_s = decode_clock_now();
    return 0;
}

/* Greedy generation of 1 + n tokens (n >= 1) after the prompt ids [1, T] on model m of runtime
 * rt; returns the seconds from the first new token's pick to the last one's (the n decoding
 * steps: each one forward of one token and its pick), or -1 on an error (nnt_last_error(rt)
 * says which). rt's progress handler is set for the call and cleared after it. */
static double decode_seconds(nnt_runtime *rt, nnt_model *m, const int32_t *ids, int T, int n)
{
    decode_clock c = {.last = n, .first_s = -1, .last_s = -1};
    int32_t *out = malloc(sizeof(int32_t) * (size_t)(n + 1));
    nnt_generate_opts o = {.max_new_tokens = n + 1, .temperature = 0.0f, .top_k = 0, .top_p = 1.0f, .seed = 0};
    nnt_status st = out ? nnt_runtime_set_progress(rt, decode_clock_report, &c) : NNT_ERR_OUT_OF_MEMORY;
    if (st == NNT_OK) st = nnt_generate(m, NULL, ids, NULL, 1, T, &o, out);
    nnt_runtime_set_progress(rt, NULL, NULL);
    free(out);
    return st == NNT_OK && c.first_s >= 0 && c.last_s >= c.first_s ? c.last_s - c.first_s : -1;
}

#endif
