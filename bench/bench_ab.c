/* bench_ab.c - two builds or settings of nnt compared in one process, interleaved: on a shared
 * virtual machine whose memory read rate moves by 1.5x from minute to minute, two separate runs
 * compare the machine's moods, not the code. Each INI file (its own plugin folders, backend
 * options or precision) opens a runtime with the same checkpoint; every round times A, B, B, A,
 * and the report is the median over rounds of B's rate over A's.
 *
 *   bench_ab --a A.ini --b B.ini --model DIR [--mode decode|prefill] [--tokens N] [--prompt T]
 *            [--rounds R]
 *
 * decode: the N steps after the first new token of a generation after a prompt of T (default 16),
 * timed inside it (decode_timer.h: the prompt's prefill is not part of it; tokens/s);
 * prefill: one forward of N tokens with no trace (tokens/s). Prints one line per round and a
 * JSON summary on the last line. Random token ids from a fixed seed, the same for A and B. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "nnt/nnt.h"
#include "decode_timer.h"

#define MAX_ROUNDS 200

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Seconds for one forward of ids [1, T] in a new session, with no trace; negative on error. */
static double forward_s(nnt_model *m, const int32_t *ids, int T)
{
    nnt_session *s = NULL;
    if (nnt_session_new(m, 1, T, &s) != NNT_OK) return -1;
    double t0 = now();
    nnt_status st = nnt_session_forward(s, NULL, ids, NULL, T);
    double dt = now() - t0;
    nnt_session_free(s);
    return st == NNT_OK ? dt : -1;
}

/* tokens per second of one measurement */
static double rate(nnt_runtime *rt, nnt_model *m, const int32_t *ids, int decode, int T, int N)
{
    if (!decode) {
        double s = forward_s(m, ids, N);
        return s > 0 ? N / s : -1;
    }
    double s = decode_seconds(rt, m, ids, T, N);
    return s > 0 ? N / s : -1;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

int main(int argc, char **argv)
{
    const char *ini[2] = {NULL, NULL}, *model = NULL, *mode = "decode";
    int tokens = 32, prompt = 16, rounds = 10;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--a")) ini[0] = argv[i + 1];
        else if (!strcmp(argv[i], "--b")) ini[1] = argv[i + 1];
        else if (!strcmp(argv[i], "--model")) model = argv[i + 1];
        else if (!strcmp(argv[i], "--mode")) mode = argv[i + 1];
        else if (!strcmp(argv[i], "--tokens")) tokens = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--prompt")) prompt = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--rounds")) rounds = atoi(argv[i + 1]);
        else {
            fprintf(stderr, "bench_ab: unknown option %s\n", argv[i]);
            return 2;
        }
    }
    int decode = !strcmp(mode, "decode");
    if (!ini[0] || !ini[1] || !model || (!decode && strcmp(mode, "prefill")) || tokens < 1 || prompt < 1 ||
        rounds < 1 || rounds > MAX_ROUNDS) {
        fprintf(stderr, "usage: bench_ab --a A.ini --b B.ini --model DIR [--mode decode|prefill] [--tokens N] "
                        "[--prompt T] [--rounds R (1..%d)]\n",
                MAX_ROUNDS);
        return 2;
    }
    nnt_runtime *rt[2] = {NULL, NULL};
    nnt_model *m[2] = {NULL, NULL};
    int rc = 1;
    for (int k = 0; k < 2; k++) {
        if (nnt_runtime_open(ini[k], &rt[k]) != NNT_OK) {
            fprintf(stderr, "bench_ab: %s: %s\n", ini[k], nnt_last_error(rt[k]));
            goto out;
        }
        if (nnt_model_load(rt[k], model, &m[k]) != NNT_OK) {
            fprintf(stderr, "bench_ab: %s: %s\n", model, nnt_last_error(rt[k]));
            goto out;
        }
    }
    int n_ids = decode ? prompt : tokens;
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)n_ids);
    if (!ids) goto out;
    int vocab = (int)nnt_model_get_info(m[0])->vocab_size;
    unsigned s = 12345u;
    for (int i = 0; i < n_ids; i++) {
        s = s * 1103515245u + 12345u;
        ids[i] = (int32_t)((s >> 8) % (unsigned)vocab);
    }
    static double ra[MAX_ROUNDS], rb[MAX_ROUNDS], ratio[MAX_ROUNDS];
    if (rate(rt[0], m[0], ids, decode, prompt, tokens) < 0 || rate(rt[1], m[1], ids, decode, prompt, tokens) < 0) { /* warm-up */
        fprintf(stderr, "bench_ab: a run failed: A: %s; B: %s\n", nnt_last_error(rt[0]), nnt_last_error(rt[1]));
        goto out_ids;
    }
    for (int r = 0; r < rounds; r++) {
        double a1 = rate(rt[0], m[0], ids, decode, prompt, tokens), b1 = rate(rt[1], m[1], ids, decode, prompt, tokens);
        double b2 = rate(rt[1], m[1], ids, decode, prompt, tokens), a2 = rate(rt[0], m[0], ids, decode, prompt, tokens);
        if (a1 < 0 || a2 < 0 || b1 < 0 || b2 < 0) {
            fprintf(stderr, "bench_ab: a run failed: A: %s; B: %s\n", nnt_last_error(rt[0]), nnt_last_error(rt[1]));
            goto out_ids;
        }
        ra[r] = 0.5 * (a1 + a2);
        rb[r] = 0.5 * (b1 + b2);
        ratio[r] = rb[r] / ra[r];
        printf("round %d: A %.2f tok/s, B %.2f tok/s, B/A %.3f\n", r, ra[r], rb[r], ratio[r]);
        fflush(stdout);
    }
    double ma = median(ra, rounds), mb = median(rb, rounds), mr = median(ratio, rounds);
    printf("{\"mode\": \"%s\", \"tokens\": %d, \"rounds\": %d, \"a_tokens_per_s\": %.3f, \"b_tokens_per_s\": %.3f, "
           "\"b_over_a\": %.4f, \"b_over_a_min\": %.4f, \"b_over_a_max\": %.4f}\n",
           mode, tokens, rounds, ma, mb, mr, ratio[0], ratio[rounds - 1]);
    rc = 0;
out_ids:
    free(ids);
out:
    for (int k = 0; k < 2; k++) {
        nnt_model_free(m[k]);
        nnt_runtime_close(rt[k]);
    }
    return rc;
}
