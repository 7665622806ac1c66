/* bench_tokenize.c - nnt's tokenizer encode throughput on one text file.
 *
 *   bench_tokenize --tokenizer DIR --text FILE [--repeats N] [--warmup N] [--add-special]
 *                  [--ids-out FILE] [--config INI]
 *
 * Loads the tokenizer of model folder DIR as a checkpoint's (nnt_runtime_tokenizer: with the
 * hints of the family plugin its config.json names, in a runtime opened with --config INI or
 * else this libnnt's default configuration), reads FILE whole, and encodes it as one text:
 * --warmup untimed calls (default 1), then --repeats timed calls (default 5), each
 * nnt_tokenizer_encode(tok, text, len, flags, ...) on one thread with the ids freed after the
 * clock stops. Prints one JSON object on stdout:
 *   bytes, tokens, id_sum (sum of the ids), id_hash (FNV-1a 64 over the ids, each taken as a
 *   32-bit unsigned value: h = (h ^ id) * 0x100000001b3 from 0xcbf29ce484222325, in hex),
 *   load_s (nnt_runtime_tokenizer, the runtime's opening left out), first_call_s (the first call, warm-up or not: the word cache starts empty),
 *   runs_s and runs_cpu_s (wall and process CPU seconds of each timed call), best_s,
 *   median_s, best_bytes_per_s, median_bytes_per_s, and same_ids_every_run (every call, the
 *   warm-up included, gave the same count and hash: the word cache must not change the ids).
 * --ids-out writes the ids of the last call as little-endian int32, so bench/tokenizer/run.py
 * can compare them with a reference tokenizer id by id. A one-line summary goes to stderr.
 * Exit status: 0, 1 on a failure (message on stderr), 2 on a usage error. */
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "nnt/nnt.h"
#include "nnt/nnt_tokenizer.h"

static double now_s(clockid_t clock)
{
    struct timespec ts;
    clock_gettime(clock, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static uint64_t ids_hash(const int32_t *ids, int64_t n)
{
    uint64_t h = 0xcbf29ce484222325ULL;
    for (int64_t i = 0; i < n; i++) h = (h ^ (uint32_t)ids[i]) * 0x100000001b3ULL;
    return h;
}

static char *read_all(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 1 << 20, n = 0;
    char *buf = malloc(cap);
    while (buf) {
        if (n == cap) {
            char *b = realloc(buf, cap * 2);
            if (!b) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = b;
            cap *= 2;
        }
        size_t got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (got == 0) break;
    }
    if (buf && ferror(f)) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    *len = n;
    return buf;
}

/* Prints s as a JSON string. */
static void json_str(const char *s)
{
    putchar('"');
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') printf("\\%c", c);
        else if (c < 0x20) printf("\\u%04x", c);
        else putchar(c);
    }
    putchar('"');
}

static int usage(void)
{
    fprintf(stderr, "usage: bench_tokenize --tokenizer DIR --text FILE [--repeats N] [--warmup N] "
                    "[--add-special] [--ids-out FILE] [--config INI]\n");
    return 2;
}

int main(int argc, char **argv)
{
    const char *dir = NULL, *text_path = NULL, *ids_out = NULL, *config = NULL;
    int repeats = 5, warmup = 1, flags = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int more = i + 1 < argc;
        if (!strcmp(a, "--tokenizer") && more) dir = argv[++i];
        else if (!strcmp(a, "--text") && more) text_path = argv[++i];
        else if (!strcmp(a, "--ids-out") && more) ids_out = argv[++i];
        else if (!strcmp(a, "--config") && more) config = argv[++i];
        else if (!strcmp(a, "--repeats") && more) repeats = atoi(argv[++i]);
        else if (!strcmp(a, "--warmup") && more) warmup = atoi(argv[++i]);
        else if (!strcmp(a, "--add-special")) flags |= NNT_TOKENIZE_ADD_SPECIAL;
        else return usage();
    }
    if (!dir || !text_path || repeats < 1 || warmup < 0) return usage();

    size_t len = 0;
    char *text = read_all(text_path, &len);
    if (!text) {
        fprintf(stderr, "bench_tokenize: cannot read %s\n", text_path);
        return 1;
    }

    nnt_runtime *rt = NULL;
    if (nnt_runtime_open(config, &rt) != NNT_OK) {
        fprintf(stderr, "bench_tokenize: cannot start nnt: %s\n", nnt_last_error(rt));
        nnt_runtime_close(rt);
        free(text);
        return 1;
    }
    nnt_tokenizer *tok = NULL;
    double t0 = now_s(CLOCK_MONOTONIC);
    nnt_status st = nnt_runtime_tokenizer(rt, dir, &tok);
    double load_s = now_s(CLOCK_MONOTONIC) - t0;
    nnt_runtime_close(rt); /* the tokenizer keeps nothing of the runtime */
    if (st != NNT_OK) {
        fprintf(stderr, "bench_tokenize: %s\n", nnt_tokenizer_last_error(tok));
        nnt_tokenizer_free(tok);
        free(text);
        return 1;
    }

    double *runs = calloc((size_t)repeats, sizeof *runs);
    double *cpu = calloc((size_t)repeats, sizeof *cpu);
    double *sorted = calloc((size_t)repeats, sizeof *sorted);
    if (!runs || !cpu || !sorted) {
        fprintf(stderr, "bench_tokenize: no memory\n");
        return 1;
    }
    int32_t *last = NULL;
    int64_t n_ids = -1, first_n = -1;
    uint64_t first_hash = 0;
    int same = 1;
    double first_s = 0;
    for (int r = 0; r < warmup + repeats; r++) {
        int32_t *ids = NULL;
        int64_t n = 0;
        double c0 = now_s(CLOCK_PROCESS_CPUTIME_ID), w0 = now_s(CLOCK_MONOTONIC);
        st = nnt_tokenizer_encode(tok, text, len, flags, &ids, &n);
        double w1 = now_s(CLOCK_MONOTONIC), c1 = now_s(CLOCK_PROCESS_CPUTIME_ID);
        if (st != NNT_OK) {
            fprintf(stderr, "bench_tokenize: encoding %s: %s\n", text_path, nnt_tokenizer_last_error(tok));
            return 1;
        }
        uint64_t h = ids_hash(ids, n);
        if (first_n < 0) first_n = n, first_hash = h;
        else if (n != first_n || h != first_hash) same = 0;
        if (r == 0) first_s = w1 - w0;
        if (r >= warmup) {
            runs[r - warmup] = w1 - w0;
            cpu[r - warmup] = c1 - c0;
        }
        free(last);
        last = ids;
        n_ids = n;
    }

    uint64_t sum = 0;
    for (int64_t i = 0; i < n_ids; i++) sum += (uint64_t)(uint32_t)last[i];
    uint64_t hash = ids_hash(last, n_ids);
    if (ids_out) {
        FILE *f = fopen(ids_out, "wb");
        /* the ids as little-endian int32: this program runs on little-endian machines only */
        if (!f || fwrite(last, sizeof *last, (size_t)n_ids, f) != (size_t)n_ids || fclose(f) != 0) {
            fprintf(stderr, "bench_tokenize: cannot write %s\n", ids_out);
            return 1;
        }
    }

    memcpy(sorted, runs, (size_t)repeats * sizeof *sorted);
    qsort(sorted, (size_t)repeats, sizeof *sorted, cmp_double);
    double best = sorted[0];
    double median = repeats % 2 ? sorted[repeats / 2] : 0.5 * (sorted[repeats / 2 - 1] + sorted[repeats / 2]);

    printf("{\"tokenizer\": ");
    json_str(dir);
    printf(", \"kind\": ");
    json_str(nnt_tokenizer_kind(tok));
    printf(", \"bytes\": %zu, \"tokens\": %lld, \"id_sum\": %llu, \"id_hash\": \"%016llx\", \"load_s\": %.6f",
           len, (long long)n_ids, (unsigned long long)sum, (unsigned long long)hash, load_s);
    printf(", \"warmup\": %d, \"first_call_s\": %.6f, \"runs_s\": [", warmup, first_s);
    for (int r = 0; r < repeats; r++) printf("%s%.6f", r ? ", " : "", runs[r]);
    printf("], \"runs_cpu_s\": [");
    for (int r = 0; r < repeats; r++) printf("%s%.6f", r ? ", " : "", cpu[r]);
    printf("], \"best_s\": %.6f, \"median_s\": %.6f, \"best_bytes_per_s\": %.1f, \"median_bytes_per_s\": %.1f", best,
           median, (double)len / best, (double)len / median);
    printf(", \"same_ids_every_run\": %s}\n", same ? "true" : "false");
    fprintf(stderr,
            "bench_tokenize: %s: %zu bytes -> %lld tokens, best %.3f s (%.2f MB/s), median %.3f s (%.2f MB/s)%s\n", dir,
            len, (long long)n_ids, best, (double)len / best / 1e6, median, (double)len / median / 1e6,
            same ? "" : "; THE IDS DIFFERED BETWEEN CALLS");

    free(last);
    free(runs);
    free(cpu);
    free(sorted);
    nnt_tokenizer_free(tok);
    free(text);
    return same ? 0 : 1;
}
