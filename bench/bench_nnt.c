/* bench_nnt.c - nnt's side of the CPU benchmark (bench/run.py drives it): prefill and decode
 * throughput of one checkpoint, the cost of tracing (no requests, and every value of one block
 * saved) against no trace at all, peak resident memory, the memory the loaded model holds
 * (nnt_model_memory) and what a live session's caches add, the sgemm rate of OpenBLAS and of
 * oneDNN (where built) on this machine, the faster as the ceiling for prefill's matrix products,
 * and the memory read rate as the ceiling for decoding. Also reports the CPU (model name and the
 * vector extensions that pick nnt's kernels), the precision the INI file gave the family and the
 * instruction set it gave the cpu backend.
 * Prints one JSON object on stdout.
 *
 *   bench_nnt --config INI --model DIR [--prefill 128,512] [--decode 16] [--decode-prompt T]
 *             [--trace-block 1] [--tracing 0|1] [--repeats 3] [--threads 2]
 *
 * Decoding follows a prompt of --decode-prompt tokens (default: the first prefill length); its
 * time is that of the --decode steps after the first new token, measured inside one generation
 * (decode_timer.h), so the prompt's prefill is not part of it.
 * --tracing 0 skips the tracing measurements. Times are wall-clock seconds, the best of --repeats
 * runs (after one warm-up run). */
#define _GNU_SOURCE
#include <cblas.h>
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>
#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include "nnt/nnt.h"
#include "cpuinfo.h"
#include "decode_timer.h"
#ifdef NNT_HAVE_DNNL
#include <oneapi/dnnl/dnnl.h>
#include <omp.h>
#endif

#define MAX_LENGTHS 8

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Peak resident set of this process so far, in MiB. */
static double peak_rss_mib(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_maxrss / 1024.0;
}

/* Resident set of this process now, in MiB (after handing freed heap back to the system where
 * the C library can, so that what is counted is what is held). */
static double rss_now_mib(void)
{
#if defined(__GLIBC__)
    malloc_trim(0);
#endif
    long pages_total = 0, pages_resident = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    if (!f) return -1;
    int ok = fscanf(f, "%ld %ld", &pages_total, &pages_resident) == 2;
    fclose(f);
    return ok ? (double)pages_resident * (double)sysconf(_SC_PAGESIZE) / (1024.0 * 1024.0) : -1;
}

/* Writes s as a JSON string (quotes and control characters escaped). */
static void json_string(const char *s)
{
    putchar('"');
    for (; *s; s++) {
        if (*s == '"' || *s == '\\') printf("\\%c", *s);
        else if ((unsigned char)*s < 0x20) printf("\\u%04x", (unsigned char)*s);
        else putchar(*s);
    }
    putchar('"');
}

/* The flags that decide nnt's kernels and the bf16 products, reported as true/false. */
static const char *const CPU_FLAGS[] = {"avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512dq", "avx512_bf16",
                                        "amx_bf16"};
#define N_CPU_FLAGS (sizeof CPU_FLAGS / sizeof CPU_FLAGS[0])

/* The value of `key` in section [section] of an INI file ("" when absent): what the run asked of
 * the cpu backend, since the runtime does not report it back. */
static void ini_value(const char *path, const char *section, const char *key, char *out, size_t out_size)
{
    out[0] = 0;
    FILE *f = path ? fopen(path, "r") : NULL;
    if (!f) return;
    char line[512], current[128] = "";
    while (fgets(line, sizeof line, f)) {
        char *s = line;
        while (isspace((unsigned char)*s)) s++;
        s[strcspn(s, ";#\r\n")] = 0;
        size_t n = strlen(s);
        while (n && isspace((unsigned char)s[n - 1])) s[--n] = 0;
        if (s[0] == '[' && n > 1 && s[n - 1] == ']') {
            snprintf(current, sizeof current, "%.*s", (int)(n - 2), s + 1);
            continue;
        }
        char *eq = strchr(s, '=');
        if (!eq || strcmp(current, section)) continue;
        char *k = s, *v = eq + 1;
        *eq = 0;
        size_t kn = strlen(k);
        while (kn && isspace((unsigned char)k[kn - 1])) k[--kn] = 0;
        while (isspace((unsigned char)*v)) v++;
        if (!strcmp(k, key)) snprintf(out, out_size, "%s", v);
    }
    fclose(f);
}

/* The kernels the cpu backend takes for isa = auto on this CPU (its own rule: AVX-512 F, BW, VL
 * and DQ, else AVX2 with FMA, else the baseline). */
static const char *auto_isa(void)
{
#if defined(__x86_64__)
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
        __builtin_cpu_supports("avx512dq"))
        return "avx512";
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return "avx2";
    return "sse2";
#else
    return "base";
#endif
}

/* Deterministic pseudo-random token ids in [1, vocab). */
static void make_tokens(int32_t *ids, int n, int vocab, unsigned seed)
{
    for (int i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        ids[i] = 1 + (int32_t)((seed >> 8) % (unsigned)(vocab - 1));
    }
}

typedef enum { NO_TRACE, EMPTY_TRACE, BLOCK_TRACE } trace_mode;

/* Saves every value block `layer` serves (a block's hosts: the layer, its mixers and its MLP). */
static int save_block(nnt_model *m, nnt_trace *t, int layer, int T, int *n_saved)
{
    *n_saved = 0;
    nnt_call_dims dims = {1, T, 0};
    for (int s = 0; s < NNT_VALUE_COUNT; s++) {
        nnt_module h = nnt_value_module((nnt_value_id)s);
        if (h == NNT_MODULE_MODEL) continue;
        char path[128];
        if (h == NNT_MODULE_LAYER)
            snprintf(path, sizeof path, "layers.%d.%s", layer, nnt_value_name((nnt_value_id)s));
        else
            snprintf(path, sizeof path, "layers.%d.%s.%s", layer, nnt_module_name(h), nnt_value_name((nnt_value_id)s));
        nnt_value_info vi;
        if (nnt_model_value_info(m, path, &dims, &vi) != NNT_OK || !vi.served) continue;
        if (nnt_trace_save(t, path) != NNT_OK) return -1;
        (*n_saved)++;
    }
    return 0;
}

/* One prefill of ids [1, T]; returns seconds or a negative number on error. */
static double prefill_once(nnt_model *m, const int32_t *ids, int T, trace_mode mode, int layer, int *n_saved)
{
    nnt_session *s = NULL;
    nnt_trace *t = NULL;
    double dt = -1;
    if (nnt_session_new(m, 1, T, &s) != NNT_OK) goto out;
    if (mode != NO_TRACE && nnt_trace_new(m, &t) != NNT_OK) goto out;
    if (mode == BLOCK_TRACE && save_block(m, t, layer, T, n_saved) != 0) goto out;
    double t0 = now();
    if (nnt_session_forward(s, t, ids, NULL, T) != NNT_OK) goto out;
    dt = now() - t0;
out:
    nnt_trace_free(t);
    nnt_session_free(s);
    return dt;
}

static double best_prefill(nnt_model *m, const int32_t *ids, int T, trace_mode mode, int layer, int repeats,
                           int *n_saved)
{
    double best = 1e30;
    for (int r = 0; r < repeats; r++) {
        double dt = prefill_once(m, ids, T, mode, layer, n_saved);
        if (dt < 0) return -1;
        best = dt < best ? dt : best;
    }
    return best;
}

/* sgemm C[M,N] = A[M,K] B[K,N]^T at a prefill-like shape in OpenBLAS (library 0) or oneDNN
 * (library 1, where the build has it); GFLOP/s, best of 3 after a warm-up run; -1 when the
 * library is absent or fails. Both are measured because OpenBLAS runs its generic kernels on a CPU
 * its build does not know (an SSE3 kernel on a recent Xeon: see openblas_core in the output),
 * where the cpu backend's many-row products run on oneDNN. */
static double sgemm_gflops(int library, int M, int N, int K, int threads)
{
#ifndef NNT_HAVE_DNNL
    if (library == 1) return -1;
#endif
    float *a = malloc(sizeof(float) * (size_t)M * K), *b = malloc(sizeof(float) * (size_t)N * K),
          *c = malloc(sizeof(float) * (size_t)M * N);
    if (!a || !b || !c) {
        free(a);
        free(b);
        free(c);
        return -1;
    }
    for (size_t i = 0; i < (size_t)M * K; i++) a[i] = (float)((i * 7) % 13) * 0.01f;
    for (size_t i = 0; i < (size_t)N * K; i++) b[i] = (float)((i * 5) % 11) * 0.01f;
    double best = 1e30;
    for (int r = 0; r < 4; r++) {
        double t0 = now();
        if (library == 0) {
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, N, K, 1.0f, a, K, b, K, 0.0f, c, N);
        } else {
#ifdef NNT_HAVE_DNNL
            omp_set_num_threads(threads); /* oneDNN's team */
            if (dnnl_sgemm('N', 'T', M, N, K, 1.0f, a, K, b, K, 0.0f, c, N) != dnnl_success) {
                best = -1;
                break;
            }
#endif
        }
        double dt = now() - t0;
        if (r > 0) best = dt < best ? dt : best; /* the first run warms up */
    }
    free(a);
    free(b);
    free(c);
    (void)threads;
    return best > 0 ? 2.0 * M * N * K / best / 1e9 : -1;
}

/* Sum of n floats (n a multiple of 16), vectorised for the widest unit the CPU has. */
__attribute__((target_clones("avx512f", "avx2", "default"))) static double sum_block(const float *a, size_t n)
{
    float lanes[16] = {0};
    for (size_t i = 0; i < n; i += 16)
        for (int j = 0; j < 16; j++) lanes[j] += a[i + j];
    double total = 0;
    for (int j = 0; j < 16; j++) total += lanes[j];
    return total;
}

/* The machine's memory read rate: summing a 1 GiB array with `threads` threads, GB/s, best of 3 -
 * the ceiling for decoding, which streams the weights once per token. */
static double read_gbs(int threads)
{
    size_t n = (size_t)1 << 28;
    float *a = malloc(n * sizeof(float));
    if (!a) return -1;
    for (size_t i = 0; i < n; i++) a[i] = 1.0f;
    double best = 1e30, sink = 0;
    for (int r = 0; r < 3; r++) {
        double t0 = now(), total = 0;
#pragma omp parallel for num_threads(threads) reduction(+ : total) schedule(static)
        for (size_t blk = 0; blk < n / 65536; blk++) total += sum_block(a + blk * 65536, 65536);
        double dt = now() - t0;
        sink += total;
        best = dt < best ? dt : best;
    }
    free(a);
    return sink > 0 ? (double)(n * sizeof(float)) / best / 1e9 : -1;
}

static int parse_lengths(const char *s, int *out)
{
    int n = 0;
    char buf[256];
    snprintf(buf, sizeof buf, "%s", s);
    for (char *tok = strtok(buf, ","); tok && n < MAX_LENGTHS; tok = strtok(NULL, ",")) out[n++] = atoi(tok);
    return n;
}

int main(int argc, char **argv)
{
    const char *config = NULL, *model = NULL;
    int lengths[MAX_LENGTHS] = {128, 512}, n_lengths = 2, decode = 16, layer = 1, repeats = 3, threads = 2;
    int decode_prompt = 0, tracing = 1;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--config")) config = argv[i + 1];
        else if (!strcmp(argv[i], "--model")) model = argv[i + 1];
        else if (!strcmp(argv[i], "--prefill")) n_lengths = parse_lengths(argv[i + 1], lengths);
        else if (!strcmp(argv[i], "--decode")) decode = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--decode-prompt")) decode_prompt = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--tracing")) tracing = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--trace-block")) layer = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--repeats")) repeats = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--threads")) threads = atoi(argv[i + 1]);
        else {
            fprintf(stderr, "bench_nnt: unknown option %s\n", argv[i]);
            return 2;
        }
    }
    if (!model || n_lengths < 1 || repeats < 1 || decode < 1 || decode_prompt < 0) {
        fprintf(stderr, "usage: bench_nnt --config INI --model DIR [--prefill 128,512] [--decode 16] "
                        "[--decode-prompt T] [--trace-block L] [--tracing 0|1] [--repeats R] [--threads N]\n");
        return 2;
    }
    if (!decode_prompt) decode_prompt = lengths[0];
    openblas_set_num_threads(threads);
    nnt_runtime *rt = NULL;
    nnt_model *m = NULL;
    int rc = 1;
    double t0 = now();
    if (nnt_runtime_open(config, &rt) != NNT_OK || nnt_model_load(rt, model, &m) != NNT_OK) goto out;
    double load_s = now() - t0;
    double rss_load = rss_now_mib();
    const nnt_model_info *mi = nnt_model_get_info(m);
    int max_T = decode_prompt;
    for (int i = 0; i < n_lengths; i++) max_T = lengths[i] > max_T ? lengths[i] : max_T;
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)max_T);
    if (!ids) goto out;
    make_tokens(ids, max_T, mi->vocab_size, 12345u);

    printf("{\n  \"tool\": \"nnt\",\n  \"family\": \"%s\",\n  \"backend\": \"%s\",\n  \"threads\": %d,\n", nnt_model_family(m),
           nnt_model_backend(m), threads);
    printf("  \"load_s\": %.3f,\n", load_s);
    char cpu_model[320], isa[64], precision[64], section[160];
    bench_cpu cpu;
    bench_cpu_read(&cpu);
    bench_cpu_title(&cpu, cpu_model, sizeof cpu_model);
    printf("  \"cpu\": {\"model\": ");
    json_string(cpu_model);
    printf(", \"family\": %d, \"model_number\": %d, \"flags\": {", cpu.family, cpu.model);
    for (size_t i = 0; i < N_CPU_FLAGS; i++)
        printf("%s\"%s\": %s", i ? ", " : "", CPU_FLAGS[i], bench_cpu_has(&cpu, CPU_FLAGS[i]) ? "true" : "false");
    printf("}},\n");
    ini_value(config, "backend.cpu", "isa", isa, sizeof isa);
    snprintf(section, sizeof section, "family.%s", nnt_model_family(m));
    ini_value(config, section, "precision", precision, sizeof precision);
    const char *isa_asked = isa[0] ? isa : "auto";
    printf("  \"isa\": ");
    json_string(isa_asked);
    printf(", \"isa_kernels\": ");
    json_string(strcmp(isa_asked, "auto") ? isa_asked : auto_isa());
    printf(",\n  \"precision_ini\": ");
    json_string(precision[0] ? precision : "f32 (default)");
    printf(",\n");
    nnt_memory mem;
    if (nnt_model_memory(m, &mem) != NNT_OK) goto out_ids;
    printf("  \"precision\": \"%s\",\n", mem.precision == 1 ? "bf16" : "f32");
    printf("  \"memory\": {\"file_bytes\": %llu, \"mapped_bytes\": %llu, \"allocated_bytes\": %llu, "
           "\"device_bytes\": %llu},\n",
           (unsigned long long)mem.file_bytes, (unsigned long long)mem.mapped_bytes,
           (unsigned long long)mem.allocated_bytes, (unsigned long long)mem.device_bytes);
    printf("  \"rss_after_load_mib\": %.1f,\n", rss_load);
    fflush(stdout);
    int n_saved = 0;
    if (prefill_once(m, ids, lengths[0], NO_TRACE, layer, &n_saved) < 0) goto out_ids; /* warm-up */
    printf("  \"prefill\": {");
    for (int i = 0; i < n_lengths; i++) {
        double dt = best_prefill(m, ids, lengths[i], EMPTY_TRACE, layer, repeats, &n_saved);
        if (dt < 0) goto out_ids;
        printf("%s\"%d\": {\"seconds\": %.4f, \"tokens_per_s\": %.2f}", i ? ", " : "", lengths[i], dt, lengths[i] / dt);
        fflush(stdout);
    }
    printf("},\n");
    /* decode: the decode steps of one generation after a prompt of decode_prompt, timed apart
     * from its prefill (decode_timer.h); the fastest of the repeats */
    double best_decode = 1e30;
    for (int r = 0; r < repeats; r++) {
        double d = decode_seconds(rt, m, ids, decode_prompt, decode);
        if (d < 0) goto out_ids;
        best_decode = d < best_decode ? d : best_decode;
    }
    printf("  \"decode\": {\"prompt\": %d, \"tokens\": %d, \"seconds\": %.4f, \"tokens_per_s\": %.3f},\n",
           decode_prompt, decode, best_decode, decode / best_decode);
    /* peak memory of the plain runs, before the traces below hold saved copies */
    printf("  \"peak_rss_mib\": %.1f,\n", peak_rss_mib());
    fflush(stdout);
    /* what a session's caches hold: resident memory with a session of the longest prompt plus the
     * decoded tokens alive after its prompt, over resident memory just before it was made (freed
     * heap handed back both times, so activations that the forward released do not count) */
    {
        int cap = max_T + decode;
        double before = rss_now_mib();
        nnt_session *s = NULL;
        if (nnt_session_new(m, 1, cap, &s) != NNT_OK || nnt_session_forward(s, NULL, ids, NULL, max_T) != NNT_OK) {
            nnt_session_free(s);
            goto out_ids;
        }
        double live = rss_now_mib();
        nnt_session_free(s);
        printf("  \"session_cache\": {\"capacity\": %d, \"tokens\": %d, \"rss_before_mib\": %.1f, "
               "\"rss_live_mib\": %.1f, \"cache_mib\": %.1f},\n",
               cap, max_T, before, live, live - before);
    }
    /* tracing overhead at the first length: the forward without a trace, with an empty trace, and
     * with every value of one block saved; interleaved so drift hits all three alike */
    double best[3] = {1e30, 1e30, 1e30};
    for (int r = 0; tracing && r < repeats + 2; r++)
        for (int mode = 0; mode < 3; mode++) {
            double dt = prefill_once(m, ids, lengths[0], (trace_mode)mode, layer, &n_saved);
            if (dt < 0) goto out_ids;
            best[mode] = dt < best[mode] ? dt : best[mode];
        }
    if (tracing)
        printf("  \"tracing\": {\"tokens\": %d, \"no_trace_s\": %.4f, \"empty_trace_s\": %.4f, \"block_saved_s\": %.4f, "
               "\"block\": %d, \"values_saved\": %d},\n",
               lengths[0], best[0], best[1], best[2], layer, n_saved);
    printf("  \"read_gbs\": %.2f,\n", read_gbs(threads));
    {
        /* the faster library is the ceiling for prefill's products (the backend uses oneDNN's
         * matmul where it is built in) */
        int H = mi->hidden_size;
        double ob = sgemm_gflops(0, 512, H, H, threads), dn = sgemm_gflops(1, 512, H, H, threads);
        printf("  \"sgemm_gflops\": %.2f,\n  \"sgemm_library\": \"%s\",\n", dn > ob ? dn : ob,
               dn > ob ? "oneDNN" : "OpenBLAS");
        printf("  \"sgemm_openblas_gflops\": %.2f,\n  \"openblas_core\": \"%s\",\n", ob, openblas_get_corename());
        printf("  \"sgemm_onednn_gflops\": %.2f,\n", dn);
        printf("  \"sgemm_shape\": [512, %d, %d]\n}\n", H, H);
    }
    rc = 0;
out_ids:
    free(ids);
out:
    if (rc) fprintf(stderr, "bench_nnt: %s\n", nnt_last_error(rt));
    nnt_model_free(m);
    nnt_runtime_close(rt);
    return rc;
}
