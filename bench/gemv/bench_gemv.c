/*
 * bench_gemv - the cpu backend's few-row products (decoding: one row of activations against a
 * weight in its stored encoding) against the machine's read rate, measured in the same run.
 *
 * A decode step reads every weight once, so its product is bounded by how fast the weight's
 * bytes come from memory. For each encoding (FP8 e4m3 with 128x128 float32 scales as MiniMax-M2
 * and MiMo-V2-Flash store them, FP8 with E8M0 scales and FP4 e2m1 with per-32 E8M0 scales as
 * DeepSeek-V4 stores them, BF16 as Kimi-Linear does), instruction set (`isa = avx512 | avx2`,
 * the cpu backend's INI option) and precision (float32 products, or bfloat16 products as
 * `precision = bf16` makes them), it times y[1, N] = x[1, K] . w[N, K]^T through the backend's
 * `linear` operation, rotating through enough copies of w to exceed three times the last-level
 * cache, and prints the weight bytes read per second and their ratio to the read rate: a plain
 * sum over the same copies with the same threads.
 *
 *   cmake --build build --target bench_gemv
 *   build/bench/gemv/bench_gemv [--threads 2] [--m 1] [--n 3072] [--k 3072] [--reps 20] [--mb 192] [--out FILE]
 *
 * --m sets the rows of x (1 to 64; up to 8 the few-row kernels, above that the decoded panels).
 *
 * --mb sets the least total of the copies (MiB); `--mb 0 --n 512 --k 512` keeps one copy in the
 * core's own cache, so the weight rate is then the kernel's arithmetic ceiling, not memory's.
 *
 * Not a test: it asserts nothing about timings. It prints the CPU model and its flags, since
 * the kernels differ per instruction set. Timing is best of --reps rounds, wall-clock, or the
 * thread's CPU time with --threads 1 (for machines shared with other work).
 */
#define _GNU_SOURCE
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/internal.h"
#include "../cpuinfo.h"

/* Seconds: wall-clock, or with one thread the thread's CPU time (--threads 1), which time spent
 * waiting for a core another process holds does not count - on a busy machine the only
 * reading that stays put (memory shared with other work still slows it). */
static clockid_t clock_used = CLOCK_MONOTONIC;
static double now(void)
{
    struct timespec t;
    clock_gettime(clock_used, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static unsigned rng = 7u;
static unsigned next(void)
{
    rng = rng * 1664525u + 1013904223u;
    return rng >> 8;
}

typedef struct enc {
    const char *name;
    nnt_dtype dt, sdt;
    int br, bc;
} enc;

/* copies of an encoded [N, K] weight, each with its own storage */
typedef struct weights {
    int copies;
    nnt_tensor *t;
    void **codes, **grids;
    size_t bytes; /* codes and scales of one copy */
} weights;

static int make(const enc *e, int64_t N, int64_t K, size_t min_total, weights *w)
{
    size_t codes = nnt_dtype_span(e->dt, N * K);
    int64_t sr = e->br ? (N + e->br - 1) / e->br : 0, sc = e->bc ? (K + e->bc - 1) / e->bc : 0;
    size_t grid = (size_t)(sr * sc) * (e->sdt == NNT_F32 ? 4 : 1);
    w->bytes = codes + grid;
    w->copies = min_total > w->bytes ? (int)((min_total + w->bytes - 1) / w->bytes) : 1;
    w->t = calloc((size_t)w->copies, sizeof *w->t);
    w->codes = calloc((size_t)w->copies, sizeof *w->codes);
    w->grids = calloc((size_t)w->copies, sizeof *w->grids);
    if (!w->t || !w->codes || !w->grids) return -1;
    for (int c = 0; c < w->copies; c++) {
        uint8_t *b = w->codes[c] = malloc(codes);
        if (!b) return -1;
        for (size_t i = 0; i < codes; i++) {
            uint8_t v = (uint8_t)next();
            if (e->dt == NNT_F8_E4M3 && (v & 0x7f) == 0x7f) v = 0x7e; /* no NaN code */
            if (e->dt == NNT_BF16 && (i & 1)) v = (uint8_t)(0x3c + (v & 0x3)); /* |w| about 0.01 .. 1 */
            b[i] = v;
        }
        w->t[c] = (nnt_tensor){.dtype = e->dt, .ndim = 2, .shape = {N, K}, .data = b};
        if (grid) {
            uint8_t *g = w->grids[c] = malloc(grid);
            if (!g) return -1;
            for (int64_t i = 0; i < sr * sc; i++) {
                if (e->sdt == NNT_F32)
                    ((float *)g)[i] = 1e-3f * (1.0f + (float)(next() % 1000) / 1000.0f);
                else
                    g[i] = (uint8_t)(117 + next() % 4); /* 2^-10 .. 2^-7 */
            }
            w->t[c].scale = g;
            w->t[c].scale_dtype = e->sdt;
            w->t[c].block_rows = e->br;
            w->t[c].block_cols = e->bc;
        }
    }
    return 0;
}

static void drop(weights *w)
{
    for (int c = 0; c < w->copies; c++) {
        if (w->codes) free(w->codes[c]);
        if (w->grids) free(w->grids[c]);
    }
    free(w->t);
    free(w->codes);
    free(w->grids);
}

/* bytes per second of a sum over every copy's codes, `threads` threads, best of reps */
static double read_rate(const weights *w, int threads, int reps)
{
    size_t n = nnt_dtype_span(w->t[0].dtype, w->t[0].shape[0] * w->t[0].shape[1]) / 8;
    double best = 1e30, total = 0;
    volatile uint64_t sink = 0;
    for (int r = 0; r < reps; r++) {
        double t0 = now();
        for (int c = 0; c < w->copies; c++) {
            const uint64_t *p = w->codes[c];
            uint64_t s = 0;
#pragma omp parallel for num_threads(threads) reduction(^ : s) schedule(static)
            for (size_t i = 0; i < n; i++) s ^= p[i];
            sink ^= s;
        }
        double t = now() - t0;
        if (t < best) best = t;
    }
    total = (double)n * 8.0 * w->copies;
    (void)sink;
    return total / best;
}

int main(int argc, char **argv)
{
    int threads = 2, reps = 20;
    int64_t N = 3072, K = 3072, M = 1;
    const char *out = NULL;
    long mb = 192;
    for (int i = 1; i < argc; i++) {
        if (i + 1 < argc && strcmp(argv[i], "--threads") == 0) threads = atoi(argv[++i]);
        else if (i + 1 < argc && strcmp(argv[i], "--reps") == 0) reps = atoi(argv[++i]);
        else if (i + 1 < argc && strcmp(argv[i], "--n") == 0) N = atoll(argv[++i]);
        else if (i + 1 < argc && strcmp(argv[i], "--k") == 0) K = atoll(argv[++i]);
        else if (i + 1 < argc && strcmp(argv[i], "--m") == 0) M = atoll(argv[++i]);
        else if (i + 1 < argc && strcmp(argv[i], "--out") == 0) out = argv[++i];
        else if (i + 1 < argc && strcmp(argv[i], "--mb") == 0) mb = atol(argv[++i]);
        else {
            fprintf(stderr, "usage: bench_gemv [--threads T] [--reps R] [--m M] [--n N] [--k K] [--mb MIB] [--out FILE]\n");
            return 2;
        }
    }
    if (threads < 1 || reps < 1 || mb < 0 || N < 128 || K < 128 || N % 128 || K % 128 || M < 1 || M > 64) {
        fprintf(stderr, "bench_gemv: threads and reps >= 1, --mb >= 0, N and K multiples of 128, M 1..64\n");
        return 2;
    }
    if (threads == 1) clock_used = CLOCK_THREAD_CPUTIME_ID;
    nnt_runtime *rt;
    if (nnt_runtime_open(NNT_BENCH_INI, &rt) != NNT_OK) {
        fprintf(stderr, "bench_gemv: cannot open %s\n", NNT_BENCH_INI);
        return 1;
    }
    const nnt_backend_descriptor *cpu = NULL;
    for (int i = 0; i < rt->plugins.n; i++) {
        nnt_plugin *p = rt->plugins.items[i];
        if (p->kind == NNT_PLUGIN_BACKEND && strcmp(p->backend->header.name, "cpu") == 0) cpu = p->backend;
    }
    if (!cpu) {
        fprintf(stderr, "bench_gemv: no cpu backend in %s\n", NNT_BENCH_INI);
        return 1;
    }
    FILE *o = out ? fopen(out, "w") : NULL;
    bench_cpu proc;
    bench_cpu_read(&proc);
    char model[320];
    bench_cpu_title(&proc, model, sizeof model);
    const char *want[] = {"avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512_bf16"};
    char have[256] = "";
    for (size_t i = 0; i < sizeof want / sizeof *want; i++) {
        size_t l = strlen(have);
        snprintf(have + l, sizeof have - l, "%s%s %s", l ? ", " : "", want[i], bench_cpu_has(&proc, want[i]) ? "yes" : "no");
    }
    char head[1024];
    snprintf(head, sizeof head,
             "# few-row products against the read rate\n\n- CPU: %s\n- flags: %s\n- product: y[%lld, %lld] = x[%lld, %lld] "
             ". w^T, %d thread(s), best of %d rounds over copies of w (>= %ld MiB), %s\n\n"
             "| encoding | isa | products | weight GB/s | read rate GB/s | ratio |\n|---|---|---|---|---|---|\n",
             model, have, (long long)M, (long long)N, (long long)M, (long long)K, threads, reps, mb,
             threads == 1 ? "the thread's CPU time" : "wall-clock time");
    fputs(head, stdout);
    if (o) fputs(head, o);
    const enc encs[] = {
        {"FP8 e4m3, 128x128 F32 scales", NNT_F8_E4M3, NNT_F32, 128, 128},
        {"FP8 e4m3, 128x128 E8M0 scales", NNT_F8_E4M3, NNT_F8_E8M0, 128, 128},
        {"FP4 e2m1, E8M0 per 32", NNT_F4_E2M1, NNT_F8_E8M0, 1, 32},
        {"BF16", NNT_BF16, NNT_DTYPE_INVALID, 0, 0},
    };
    const char *isas[] = {"avx512", "avx2"};
    float *x = malloc((size_t)(M * K) * sizeof *x), *y = malloc((size_t)(M * N) * sizeof *y);
    if (!x || !y) return 1;
    for (int64_t i = 0; i < M * K; i++) x[i] = (float)(next() % 2000) / 1000.0f - 1.0f;
    for (size_t e = 0; e < sizeof encs / sizeof *encs; e++) {
        weights w = {0};
        if (make(&encs[e], N, K, (size_t)mb << 20, &w) != 0) {
            fprintf(stderr, "bench_gemv: out of memory\n");
            return 1;
        }
        for (size_t ii = 0; ii < 2; ii++) {
            char tn[16];
            snprintf(tn, sizeof tn, "%d", threads);
            const char *keys[2] = {"isa", "threads"}, *vals[2] = {isas[ii], tn};
            nnt_backend_options opt = {sizeof(nnt_backend_options), keys, vals, 2, "bench_gemv"};
            void *ctx = NULL;
            nnt_error err = {0};
            if (cpu->create(&opt, &ctx, &err) != NNT_OK) {
                printf("| %s | %s | - | not on this CPU: %s | | |\n", encs[e].name, isas[ii], err.msg);
                continue;
            }
            for (int bf16 = 0; bf16 < 2; bf16++) {
                nnt_tensor xt = {.dtype = NNT_F32, .ndim = 2, .shape = {M, K}, .data = x};
                nnt_tensor yt = {.dtype = NNT_F32, .ndim = 2, .shape = {M, N}, .data = y};
                double best = 1e30;
                for (int r = 0; r < reps + 1; r++) { /* the first round warms up */
                    double t0 = now();
                    for (int c = 0; c < w.copies; c++) {
                        nnt_tensor wt = w.t[c];
                        if (bf16) wt.flags |= NNT_TENSOR_BF16_PRODUCTS;
                        if (cpu->ops->linear(ctx, &xt, &wt, &yt, &err) != NNT_OK) {
                            fprintf(stderr, "bench_gemv: %s\n", err.msg);
                            return 1;
                        }
                    }
                    double t = now() - t0;
                    if (r && t < best) best = t;
                }
                double gbs = (double)w.bytes * w.copies / best / 1e9, rr = read_rate(&w, threads, reps) / 1e9;
                char line[512];
                snprintf(line, sizeof line, "| %s | %s | %s | %.1f | %.1f | %.2f |\n", encs[e].name, isas[ii],
                         bf16 ? "bf16" : "f32", gbs, rr, gbs / rr);
                fputs(line, stdout);
                if (o) fputs(line, o);
                fflush(stdout);
            }
            cpu->destroy(ctx);
        }
        drop(&w);
    }
    if (o) fclose(o);
    free(x);
    free(y);
    nnt_runtime_close(rt);
    return 0;
}
