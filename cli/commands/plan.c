/* plan.c - `nnt plan`: how a checkpoint's blocks split over N ranks (pipeline stages) and
 * whether each rank fits its memory, from config.json and the safetensors headers or index. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../cli.h"

static int plan_usage(const char *fmt, const char *arg)
{
    fprintf(stderr, "nnt plan: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\nusage: nnt plan --model DIR --ranks N [--device cpu|cuda] [--memory GB] [--context T] [--batch B] [--config FILE]\n"
                    "       nnt plan --grad --model DIR [--context T] [--batch B] [--memory GB] [--config FILE]\n");
    return 2;
}

/* A whole number in [lo, hi] from the whole of text. */
static int plan_int(const char *text, long long lo, long long hi, long long *out)
{
    char *end = NULL;
    errno = 0;
    long long v = strtoll(text, &end, 10);
    if (errno || end == text || *end || v < lo || v > hi) return 0;
    *out = v;
    return 1;
}

int cmd_plan(int argc, char **argv)
{
    const char *model = NULL, *config = NULL;
    nnt_plan_opts o = {.ranks = 0, .device = NNT_PLAN_CPU, .context = 4096, .batch = 1};
    int grad = 0; /* --grad: what a backward holds, in place of the split */
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--grad")) {
            grad = 1;
            continue;
        }
        if (i + 1 >= argc) return plan_usage("%s needs a value", a);
        const char *v = argv[++i];
        long long n = 0;
        if (!strcmp(a, "--model")) {
            model = v;
        } else if (!strcmp(a, "--config")) { /* the runtime whose families give the cost models */
            config = v;
        } else if (!strcmp(a, "--ranks")) {
            if (!plan_int(v, 1, 1 << 20, &n)) return plan_usage("--ranks '%s': expected a whole number from 1", v);
            o.ranks = (int)n;
        } else if (!strcmp(a, "--device")) {
            if (!strcmp(v, "cpu")) o.device = NNT_PLAN_CPU;
            else if (!strcmp(v, "cuda")) o.device = NNT_PLAN_CUDA;
            else return plan_usage("--device '%s': expected cpu or cuda", v);
        } else if (!strcmp(a, "--memory")) {
            char *end = NULL;
            errno = 0;
            double g = strtod(v, &end);
            if (errno || end == v || *end || !(g > 0) || g > 1e9)
                return plan_usage("--memory '%s': expected gigabytes (1 GB = 1e9 bytes) per rank, above 0", v);
            o.memory_bytes = (uint64_t)(g * 1e9);
        } else if (!strcmp(a, "--context")) {
            if (!plan_int(v, 0, 1 << 30, &n)) return plan_usage("--context '%s': expected tokens per row, 0 to 2^30", v);
            o.context = n;
        } else if (!strcmp(a, "--batch")) {
            if (!plan_int(v, 1, 1 << 30, &n)) return plan_usage("--batch '%s': expected rows, 1 to 2^30", v);
            o.batch = n;
        } else {
            return plan_usage("unknown option '%s'", a);
        }
    }
    if (!model) return plan_usage("%s", "needs --model DIR");
    if (!o.ranks && !grad) return plan_usage("%s", "needs --ranks N");
    if (grad && o.context < 1) return plan_usage("%s", "--grad needs --context T of 1 token or more");
    nnt_error err = {0};
    nnt_plan *p = NULL;
    if (nnt_runtime_open(config, &o.runtime) != NNT_OK) {
        fprintf(stderr, "nnt plan: cannot start: %s\n", nnt_last_error(o.runtime));
        nnt_runtime_close(o.runtime);
        return 1;
    }
    int rc = 0;
    if (grad) {
        if (nnt_plan_grad_print(model, &o, stdout, &err) != NNT_OK) {
            fprintf(stderr, "nnt plan: %s\n", err.msg);
            rc = 1;
        }
    } else if (nnt_plan_new(model, &o, &p, &err) != NNT_OK) {
        fprintf(stderr, "nnt plan: %s\n", err.msg);
        rc = 1;
    } else {
        nnt_plan_print(p, model, stdout);
    }
    nnt_plan_free(p);
    nnt_runtime_close(o.runtime);
    return rc;
}
