/* bench_attention.c - one block's attention on a kernel backend, the one pass (attn_fused)
 * against the three ops it replaces (attn_scores, softmax, attn_mix over blocks of queries of at
 * most 64 MiB of scores, as the family kit's fam_attend runs them), on random inputs of a
 * causal prompt after a cached prefix. Not a test: it prints both times, their ratio and the
 * largest difference of the outputs, and asserts nothing about timings.
 *
 *   nnt_bench_attention BACKEND.so [--tokens T] [--past P] [--heads Hq] [--kv-heads Hkv]
 *                       [--head-dim D] [--window W] [--threads N] [--repeats R]
 *
 * Defaults: the MiniMax-M2 release's attention (48 query and 8 key/value heads of 128), 2048
 * tokens after none, 2 threads, best of 3. The backend is loaded from its shared object through
 * the plugin ABI alone (nnt_backend.h), so any backend can be measured. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "nnt/nnt_backend.h"

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int fail(const char *what, const nnt_error *err)
{
    fprintf(stderr, "nnt_bench_attention: %s: %s\n", what, err ? err->msg : "");
    return 1;
}

static nnt_tensor tensor4(const nnt_backend_ops *ops, void *ctx, int64_t a, int64_t b, int64_t c, int64_t d,
                          nnt_error *err, int *ok)
{
    nnt_tensor t = {.dtype = NNT_F32, .ndim = 4, .shape = {a, b, c, d}};
    *ok = *ok && ops->alloc(ctx, (size_t)(a * b * c * d) * sizeof(float), &t.data, err) == NNT_OK;
    return t;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: nnt_bench_attention BACKEND.so [--tokens T] [--past P] [--heads Hq] [--kv-heads Hkv] "
                        "[--head-dim D] [--window W] [--threads N] [--repeats R]\n");
        return 2;
    }
    long T = 2048, P = 0, Hq = 48, Hkv = 8, D = 128, W = 0, repeats = 3;
    const char *threads = "2";
    for (int i = 2; i + 1 < argc; i += 2) {
        long v = strtol(argv[i + 1], NULL, 10);
        if (!strcmp(argv[i], "--tokens")) T = v;
        else if (!strcmp(argv[i], "--past")) P = v;
        else if (!strcmp(argv[i], "--heads")) Hq = v;
        else if (!strcmp(argv[i], "--kv-heads")) Hkv = v;
        else if (!strcmp(argv[i], "--head-dim")) D = v;
        else if (!strcmp(argv[i], "--window")) W = v;
        else if (!strcmp(argv[i], "--threads")) threads = argv[i + 1];
        else if (!strcmp(argv[i], "--repeats")) repeats = v;
        else {
            fprintf(stderr, "nnt_bench_attention: unknown option %s\n", argv[i]);
            return 2;
        }
    }
    if (T < 1 || P < 0 || Hq < 1 || Hkv < 1 || Hq % Hkv || D < 1 || W < 0 || repeats < 1) {
        fprintf(stderr, "nnt_bench_attention: sizes must be positive, heads a multiple of kv-heads\n");
        return 2;
    }
    void *so = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    const nnt_backend_descriptor *desc = so ? dlsym(so, NNT_BACKEND_SYMBOL) : NULL;
    if (!desc) {
        fprintf(stderr, "nnt_bench_attention: %s: %s\n", argv[1], so ? "no " NNT_BACKEND_SYMBOL : dlerror());
        return 1;
    }
    nnt_error err = {0};
    const char *keys[] = {"threads"}, *vals[] = {threads};
    nnt_backend_options opt = {.struct_size = sizeof opt, .keys = keys, .values = vals, .count = 1, .ini_path = "bench"};
    void *ctx;
    if (desc->create(&opt, &ctx, &err) != NNT_OK) return fail("create", &err);
    const nnt_backend_ops *ops = desc->ops;
    if (!NNT_STRUCT_HAS(ops, nnt_backend_ops, attn_fused) || !ops->attn_fused) {
        fprintf(stderr, "nnt_bench_attention: %s has no attn_fused\n", argv[1]);
        return 1;
    }
    int64_t S = P + T, B = 1;
    int ok = 1;
    nnt_tensor q = tensor4(ops, ctx, B, Hq, T, D, &err, &ok), k = tensor4(ops, ctx, B, Hkv, S, D, &err, &ok);
    nnt_tensor v = tensor4(ops, ctx, B, Hkv, S, D, &err, &ok), o1 = tensor4(ops, ctx, B, T, Hq, D, &err, &ok);
    nnt_tensor o2 = tensor4(ops, ctx, B, T, Hq, D, &err, &ok);
    /* the kit's blocks: at most 64 MiB of scores, at least 16 queries */
    int64_t rows = (int64_t)((64u << 20) / (uint64_t)(Hq * S * 4));
    if (rows < 16) rows = 16;
    if (rows > T) rows = T;
    nnt_tensor s = tensor4(ops, ctx, B, Hq, rows, S, &err, &ok), qb = tensor4(ops, ctx, B, Hq, rows, D, &err, &ok);
    nnt_tensor ob = tensor4(ops, ctx, B, rows, Hq, D, &err, &ok);
    if (!ok) return fail("alloc", &err);
    float *host = malloc((size_t)(Hq * S * D) * sizeof *host);
    int32_t *qpos = malloc((size_t)T * sizeof *qpos), *kpos = malloc((size_t)S * sizeof *kpos);
    if (!host || !qpos || !kpos) return fail("host memory", NULL);
    unsigned r = 1;
    for (int64_t i = 0; i < Hq * S * D; i++) host[i] = (float)((r = r * 1664525u + 1013904223u) >> 8) / 8388608.0f - 1.0f;
    ops->upload(ctx, q.data, host, (size_t)(Hq * T * D) * sizeof(float), &err);
    ops->upload(ctx, k.data, host + 7, (size_t)(Hkv * S * D) * sizeof(float), &err);
    ops->upload(ctx, v.data, host + 13, (size_t)(Hkv * S * D) * sizeof(float), &err);
    for (int64_t j = 0; j < S; j++) kpos[j] = (int32_t)j;
    for (int64_t t = 0; t < T; t++) qpos[t] = (int32_t)(P + t);
    nnt_attn_mask mask = {.struct_size = sizeof mask, .q_pos = qpos, .k_pos = kpos, .causal = 1, .window = (int)W};
    float scale = 1.0f / sqrtf((float)D);
    double best_ops = INFINITY, best_fused = INFINITY;
    for (long rep = 0; rep <= repeats; rep++) { /* the first round warms up */
        double t0 = now();
        for (int64_t b0 = 0; b0 < T; b0 += rows) {
            int64_t n = T - b0 < rows ? T - b0 : rows;
            nnt_tensor qv = q, sv = s, ov = ob, qbv = qb;
            qbv.shape[2] = n;
            sv.shape[2] = n;
            ov.shape[1] = n;
            nnt_tensor q2 = {.dtype = NNT_F32, .ndim = 2, .shape = {Hq, T * D}, .data = qv.data};
            nnt_tensor qb2 = {.dtype = NNT_F32, .ndim = 2, .shape = {Hq, n * D}, .data = qbv.data};
            nnt_attn_mask mb = mask;
            mb.q_pos = qpos + b0;
            if (ops->copy_cols(ctx, &q2, b0 * D, &qb2, 0, n * D, &err) != NNT_OK ||
                ops->attn_scores(ctx, &qbv, &k, scale, &mb, &sv, &err) != NNT_OK ||
                ops->softmax(ctx, &sv, NULL, &sv, &err) != NNT_OK || ops->attn_mix(ctx, &sv, &v, &ov, &err) != NNT_OK)
                return fail("the three ops", &err);
            nnt_tensor ob2 = {.dtype = NNT_F32, .ndim = 2, .shape = {1, n * Hq * D}, .data = ov.data};
            nnt_tensor o12 = {.dtype = NNT_F32, .ndim = 2, .shape = {1, T * Hq * D}, .data = o1.data};
            if (ops->copy_cols(ctx, &ob2, 0, &o12, b0 * Hq * D, n * Hq * D, &err) != NNT_OK) return fail("copy", &err);
        }
        double t1 = now();
        int done = 0;
        if (ops->attn_fused(ctx, &q, &k, &v, scale, &mask, NULL, &o2, &done, &err) != NNT_OK) return fail("attn_fused", &err);
        double t2 = now();
        if (!done) {
            fprintf(stderr, "nnt_bench_attention: the backend declined attn_fused for these sizes\n");
            return 1;
        }
        if (rep > 0) {
            best_ops = fmin(best_ops, t1 - t0);
            best_fused = fmin(best_fused, t2 - t1);
        }
    }
    float *a = malloc((size_t)(T * Hq * D) * sizeof *a), *b = malloc((size_t)(T * Hq * D) * sizeof *b);
    if (!a || !b) return fail("host memory", NULL);
    ops->download(ctx, a, o1.data, (size_t)(T * Hq * D) * sizeof(float), &err);
    ops->download(ctx, b, o2.data, (size_t)(T * Hq * D) * sizeof(float), &err);
    double worst = 0, big = 0;
    for (int64_t i = 0; i < T * Hq * D; i++) {
        worst = fmax(worst, fabs((double)a[i] - b[i]));
        big = fmax(big, fabs((double)a[i]));
    }
    printf("attention T=%ld past=%ld heads=%ld/%ld dim=%ld window=%ld threads=%s: three ops in blocks of %lld queries "
           "%.3f s, one pass %.3f s, ratio %.2fx; outputs differ by %.2e relative\n",
           T, P, Hq, Hkv, D, W, threads, (long long)rows, best_ops, best_fused, best_ops / best_fused,
           worst / (big > 0 ? big : 1));
    free(a), free(b), free(host), free(qpos), free(kpos);
    nnt_tensor *ts[] = {&q, &k, &v, &o1, &o2, &s, &qb, &ob};
    for (size_t i = 0; i < sizeof ts / sizeof *ts; i++) ops->free(ctx, ts[i]->data);
    desc->destroy(ctx);
    return 0;
}
