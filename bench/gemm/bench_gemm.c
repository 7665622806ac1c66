/*
 * bench_gemm - which GEMM library should nnt's cpu backend call for its many-row products?
 *
 * It times y[M, N] = x[M, K] . w[N, K]^T, row-major, where x holds activations and w is a weight
 * matrix the way a Hugging Face checkpoint stores it (one row per output feature), at the widths
 * of the four model families nnt serves, with
 *   - OpenBLAS   cblas_sgemm                       (f32; Debian's 0.3.21 exports no sbgemm)
 *   - BLIS       bli_sgemm, its native typed API   (f32; BLIS 0.9 has no bf16 product)
 *   - oneDNN     dnnl_sgemm and a matmul primitive (f32), dnnl_gemm_bf16bf16f32 and bf16 matmul
 *                primitives (bf16 x and w, f32 y)
 * and prints markdown tables of GFLOP/s (2*M*N*K over the best time) together with the machine,
 * the version of every library and the instruction set each one ran.
 *
 * Run it (Debian 12):
 *   scripts/install-deps.sh --bench
 *   cmake -S . -B build && cmake --build build -j --target bench_gemm
 *   build/bench/gemm/bench_gemm --threads 2 --out gemm.md
 * On a machine shared with other work, two threads that wait on each other lose whole scheduler
 * ticks whenever another process holds a core, and small products then read many times too slow:
 * add --rounds 2 --wait-quiet 1800 (bench/results/2026-11-30-gemm-1e09dd8.md was measured so).
 *
 * Options:
 *   --threads N     threads every library runs with (default 2)
 *   --reps N        timed calls per product after one warm-up call, at least (default 5); more are
 *                   made until --min-time seconds have been spent on the product
 *   --min-time S    (default 0.1)
 *   --rounds N      measure every variant N times, in alternating order, and keep each product's
 *                   best (default 1); on a machine shared with other work the rounds catch
 *                   quieter spells, and the report says how far apart they lie
 *   --wait-quiet S  before each product, wait up to S seconds for half a second in which other
 *                   processes keep under a quarter of the CPUs busy (default 0: no waiting);
 *                   either way the report gives the share they used while each was timed
 *   --rows LIST     the row counts M (default 512,128,32,16,9)
 *   --only LIST     the variants to run, by name (default: all; --list shows them)
 *   --case TEXT     only the products whose label contains TEXT
 *   --hot           reuse one copy of w, which then stays in the last-level cache when it fits
 *                   (the default rotates through enough copies to exceed three times its size,
 *                   since a model's weights are read from memory once per layer)
 *   --raw           also print every measurement (always written to --out)
 *   --out FILE      write the report to FILE as well
 *   --openblas PATH, --blis PATH, --dnnl PATH   the shared libraries to open
 *   --list          print the variants and products and exit
 *
 * How it measures. Every variant runs in a child process of its own that opens only its library
 * with dlopen (so OpenBLAS's and BLIS's identically named BLAS symbols never meet, and one
 * library's idle OpenMP threads never compete with the next one's), sets the thread count through
 * OMP_NUM_THREADS and the library's own call, and hands its numbers back through a pipe. Some
 * variants override a library's CPU detection with the variable that library documents for it
 * (OPENBLAS_CORETYPE, BLIS_ARCH_TYPE), to show what its newer kernels would give on a CPU it does
 * not recognise. Each product is checked against a double-precision reference at sampled
 * entries. For bf16 the timed call includes rounding x from f32 to bf16 (one thread, in this
 * program); converting w (and reordering it into a library's own layout) happens once, before the
 * timing, as a model loader would do it. oneDNN's matmul primitives are created once per shape,
 * outside the timing. The machine's clock and f32 FMA rate are measured with register-only loops,
 * before and after the libraries (the higher is kept), as a ceiling to read the GEMM numbers
 * against.
 */
#define _GNU_SOURCE
#include <ctype.h>
#include <dlfcn.h>
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <oneapi/dnnl/dnnl.h>
#include <oneapi/dnnl/dnnl_version.h>
#include <blis.h>
#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "../cpuinfo.h" /* the processor, as every benchmark reads it */

#ifndef NNT_GEMM_OPENBLAS_SO
#define NNT_GEMM_OPENBLAS_SO "libopenblas.so.0"
#endif
#ifndef NNT_GEMM_BLIS_SO
#define NNT_GEMM_BLIS_SO "libblis.so.4"
#endif
#ifndef NNT_GEMM_DNNL_SO
#define NNT_GEMM_DNNL_SO "libdnnl.so.2"
#endif

/* ---- the products ---- */

typedef struct {
  const char *label; /* whose weight, and which */
  int n, k;          /* w is [n, k] */
} product;

/* The released models' widths (their Hugging Face config.json files): MiniMax-M2 hidden 3072,
 * experts 1536, 48 query heads of 128; MiMo-V2-Flash hidden 4096, experts 2048, 64 query heads
 * of 192; Kimi-Linear hidden 2304, experts 1024; DeepSeek-V4-Flash hidden 4096, experts 2048,
 * query up-projection from rank 1024 to 64 heads of 512. Expert gate and up projections share a
 * shape, and MiMo's experts have DeepSeek-V4's. */
static const product products[] = {
  {"MiniMax-M2 expert gate/up", 1536, 3072},
  {"MiniMax-M2 expert down", 3072, 1536},
  {"MiniMax-M2 q_proj", 6144, 3072},
  {"MiMo-V2-Flash, DeepSeek-V4 expert gate/up", 2048, 4096},
  {"MiMo-V2-Flash, DeepSeek-V4 expert down", 4096, 2048},
  {"MiMo-V2-Flash q_proj", 12288, 4096},
  {"Kimi-Linear expert gate/up", 1024, 2304},
  {"Kimi-Linear expert down", 2304, 1024},
  {"DeepSeek-V4 wq_b", 32768, 1024},
};
#define NPRODUCTS ((int)(sizeof products / sizeof products[0]))

/* 512: a prefill; 128 and 32: what one routed expert receives of a 512-token prefill; 16 and 9:
 * just above the 8 rows nnt's own few-row kernels take. */
static const int default_rows[] = {512, 128, 32, 16, 9};
#define MAX_ROWS 16

/* ---- the variants ---- */

enum lib { LIB_OPENBLAS, LIB_BLIS, LIB_DNNL };
enum method {
  OB_SGEMM,            /* cblas_sgemm */
  BLIS_SGEMM,          /* bli_sgemm */
  DNNL_SGEMM,          /* dnnl_sgemm */
  DNNL_MM_F32_PACKED,  /* matmul primitive, f32, w reordered into the primitive's layout */
  DNNL_GEMM_BF16,      /* dnnl_gemm_bf16bf16f32 */
  DNNL_MM_BF16,        /* matmul primitive, bf16, w as stored */
  DNNL_MM_BF16_PACKED, /* matmul primitive, bf16, w reordered into the primitive's layout */
};

typedef struct {
  const char *name;
  enum lib lib;
  enum method method;
  int bf16;          /* x and w in bf16 */
  int needs_avx512;  /* forces AVX-512 kernels: skipped on a CPU without avx512f */
  const char *env;   /* a detection override: the variable, */
  int blis_arch;     /* for BLIS_ARCH_TYPE the arch_t value, */
  const char *value; /* otherwise its value */
  const char *what;
} variant;

static const variant variants[] = {
  {"openblas", LIB_OPENBLAS, OB_SGEMM, 0, 0, NULL, -1, NULL,
   "cblas_sgemm, kernels for the CPU OpenBLAS detects"},
  {"openblas-skx", LIB_OPENBLAS, OB_SGEMM, 0, 1, "OPENBLAS_CORETYPE", -1, "SkylakeX",
   "cblas_sgemm with OPENBLAS_CORETYPE=SkylakeX (its AVX-512 kernels)"},
  {"blis", LIB_BLIS, BLIS_SGEMM, 0, 0, NULL, -1, NULL,
   "bli_sgemm, the sub-configuration BLIS detects"},
  {"blis-skx", LIB_BLIS, BLIS_SGEMM, 0, 1, "BLIS_ARCH_TYPE", BLIS_ARCH_SKX, NULL,
   "bli_sgemm with BLIS_ARCH_TYPE set to its skx (AVX-512) sub-configuration"},
  {"blis-zen3", LIB_BLIS, BLIS_SGEMM, 0, 0, "BLIS_ARCH_TYPE", BLIS_ARCH_ZEN3, NULL,
   "bli_sgemm with BLIS_ARCH_TYPE set to its zen3 (AVX2) sub-configuration"},
  {"dnnl-sgemm", LIB_DNNL, DNNL_SGEMM, 0, 0, NULL, -1, NULL, "dnnl_sgemm"},
  {"dnnl-mm-f32", LIB_DNNL, DNNL_MM_F32_PACKED, 0, 0, NULL, -1, NULL,
   "matmul primitive, f32, w reordered once into the layout the primitive asks for"},
  {"dnnl-bf16", LIB_DNNL, DNNL_GEMM_BF16, 1, 0, NULL, -1, NULL,
   "dnnl_gemm_bf16bf16f32 (exported by oneDNN 2.x, though not declared in its header)"},
  {"dnnl-mm-bf16", LIB_DNNL, DNNL_MM_BF16, 1, 0, NULL, -1, NULL,
   "matmul primitive, bf16, w as stored (read as its transpose)"},
  {"dnnl-mm-bf16-packed", LIB_DNNL, DNNL_MM_BF16_PACKED, 1, 0, NULL, -1, NULL,
   "matmul primitive, bf16, w reordered once into the layout the primitive asks for"},
};
#define NVARIANTS ((int)(sizeof variants / sizeof variants[0]))

/* ---- what a child reports ---- */

typedef struct {
  int ok;
  char version[96];
  char isa[192];   /* what the library says it runs */
  char note[320];
  int threads;     /* the thread count the library reports */
} lib_report;

typedef struct {
  int p, r;        /* product and row indices */
  int reps;
  double best, median; /* seconds per call */
  double conv;     /* bf16: best seconds of the x conversion alone */
  double err;      /* largest error at the sampled entries, over the sum of |x||w| */
  double others;   /* the share of the CPUs other processes used while it was timed */
  char impl[64];   /* oneDNN primitives: the implementation it chose */
} case_report;

/* ---- options ---- */

static struct {
  int threads, reps, hot, raw, rounds;
  double min_time, wait_quiet;
  int rows[MAX_ROWS], nrows;
  const char *only, *case_filter, *out;
  const char *so[3];
} opt = {2, 5, 0, 0, 1, 0.1, 0, {0}, 0, NULL, NULL, NULL,
         {NNT_GEMM_OPENBLAS_SO, NNT_GEMM_BLIS_SO, NNT_GEMM_DNNL_SO}};

static const char *lib_name[] = {"OpenBLAS", "BLIS", "oneDNN"};

/* ---- small helpers ---- */

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void die(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fputs("bench_gemm: ", stderr);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
  exit(1);
}

static void *xalloc(size_t bytes) {
  void *p = NULL;
  if (posix_memalign(&p, 64, bytes ? bytes : 64) != 0) die("out of memory (%zu bytes)", bytes);
  return p;
}

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint64_t rng_next(void) {
  rng_state ^= rng_state << 13;
  rng_state ^= rng_state >> 7;
  rng_state ^= rng_state << 17;
  return rng_state;
}
static float rng_uniform(void) { /* in [-1, 1) */
  return (float)((double)(rng_next() >> 40) / (double)(1ull << 23) - 1.0);
}

/* f32 to bf16, rounding to nearest even; a NaN stays a (quiet) NaN. Written without branches so
 * the compiler vectorises the loop, and built for AVX2 too where the toolchain can pick the
 * variant at load time (the portable build is twice as slow). */
#if defined(__x86_64__) && defined(__GNUC__) && defined(__linux__)
__attribute__((target_clones("avx2", "default")))
#endif
static void to_bf16(const float *in, uint16_t *out, size_t n) {
  for (size_t i = 0; i < n; i++) {
    uint32_t u;
    memcpy(&u, &in[i], 4);
    uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    uint32_t quiet = (u >> 16) | 0x40u;
    out[i] = (uint16_t)(((u & 0x7fffffffu) > 0x7f800000u) ? quiet : rounded);
  }
}
static float from_bf16(uint16_t b) {
  uint32_t u = (uint32_t)b << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

static int write_all(int fd, const void *buf, size_t n) {
  const char *p = buf;
  while (n > 0) {
    ssize_t w = write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return -1;
    p += w;
    n -= (size_t)w;
  }
  return 0;
}
static int read_all(int fd, void *buf, size_t n) { /* 1: got n bytes, 0: end, -1: error */
  char *p = buf;
  size_t got = 0;
  while (got < n) {
    ssize_t r = read(fd, p + got, n - got);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return -1;
    if (r == 0) return got == 0 ? 0 : -1;
    got += (size_t)r;
  }
  return 1;
}

static size_t l3_bytes(void) {
  long s = sysconf(_SC_LEVEL3_CACHE_SIZE);
  if (s > 0) return (size_t)s;
  FILE *f = fopen("/sys/devices/system/cpu/cpu0/cache/index3/size", "r");
  if (f) {
    unsigned long v = 0;
    char unit = 0;
    if (fscanf(f, "%lu%c", &v, &unit) >= 1) {
      fclose(f);
      return unit == 'M' ? v << 20 : unit == 'K' ? v << 10 : v;
    }
    fclose(f);
  }
  return (size_t)32 << 20;
}

/* ---- the machine ---- */


#if defined(__x86_64__)
/* A chain of dependent additions retires one per cycle: its rate is the clock. The fastest of
 * several short spells, since another process may take the core during any of them. */
static double measure_clock_ghz(void) {
  double best = 0;
  for (int spell = 0; spell < 8; spell++) {
    uint64_t x = 0, iters = 0;
    double t0 = now(), t;
    do {
      for (int i = 0; i < 100000; i++)
        __asm__ volatile("add $1, %0\n\tadd $1, %0\n\tadd $1, %0\n\tadd $1, %0\n\t"
                         "add $1, %0\n\tadd $1, %0\n\tadd $1, %0\n\tadd $1, %0"
                         : "+r"(x));
      iters += 100000;
      t = now() - t0;
    } while (t < 0.03);
    double ghz = 8.0 * (double)iters / t * 1e-9;
    if (ghz > best) best = ghz;
  }
  return best;
}

/* Twelve independent FMA chains keep both FMA pipes busy; values settle at 1.0. The chains
 * start from different values, or the compiler would see twelve copies of one chain and keep
 * only one (which measures the FMA latency, not its throughput). */
#define FMA12(op, m, c)                                                                        \
  a0 = op(a0, m, c); a1 = op(a1, m, c); a2 = op(a2, m, c); a3 = op(a3, m, c);                    \
  a4 = op(a4, m, c); a5 = op(a5, m, c); a6 = op(a6, m, c); a7 = op(a7, m, c);                    \
  a8 = op(a8, m, c); a9 = op(a9, m, c); a10 = op(a10, m, c); a11 = op(a11, m, c)

__attribute__((target("avx512f"))) static double fma_rate_512(double seconds) {
  __m512 m = _mm512_set1_ps(0.5f), c = _mm512_set1_ps(0.5f);
  __m512 a0 = _mm512_set1_ps(0.1f), a1 = _mm512_set1_ps(0.2f), a2 = _mm512_set1_ps(0.3f),
         a3 = _mm512_set1_ps(0.4f), a4 = _mm512_set1_ps(0.5f), a5 = _mm512_set1_ps(0.6f),
         a6 = _mm512_set1_ps(0.7f), a7 = _mm512_set1_ps(0.8f), a8 = _mm512_set1_ps(0.9f),
         a9 = _mm512_set1_ps(1.1f), a10 = _mm512_set1_ps(1.2f), a11 = _mm512_set1_ps(1.3f);
  uint64_t blocks = 0;
  double t0 = now(), t;
  do {
    for (int i = 0; i < 10000; i++) { FMA12(_mm512_fmadd_ps, m, c); }
    blocks++;
    t = now() - t0;
  } while (t < seconds);
  volatile float sink = _mm512_reduce_add_ps(_mm512_add_ps(
      _mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)),
      _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(a4, a5), _mm512_add_ps(a6, a7)),
                    _mm512_add_ps(_mm512_add_ps(a8, a9), _mm512_add_ps(a10, a11)))));
  (void)sink;
  return (double)blocks * 10000.0 * 12 * 16 * 2 / t * 1e-9;
}

__attribute__((target("avx2,fma"))) static double fma_rate_256(double seconds) {
  __m256 m = _mm256_set1_ps(0.5f), c = _mm256_set1_ps(0.5f);
  __m256 a0 = _mm256_set1_ps(0.1f), a1 = _mm256_set1_ps(0.2f), a2 = _mm256_set1_ps(0.3f),
         a3 = _mm256_set1_ps(0.4f), a4 = _mm256_set1_ps(0.5f), a5 = _mm256_set1_ps(0.6f),
         a6 = _mm256_set1_ps(0.7f), a7 = _mm256_set1_ps(0.8f), a8 = _mm256_set1_ps(0.9f),
         a9 = _mm256_set1_ps(1.1f), a10 = _mm256_set1_ps(1.2f), a11 = _mm256_set1_ps(1.3f);
  uint64_t blocks = 0;
  double t0 = now(), t;
  do {
    for (int i = 0; i < 10000; i++) { FMA12(_mm256_fmadd_ps, m, c); }
    blocks++;
    t = now() - t0;
  } while (t < seconds);
  __m256 s = _mm256_add_ps(
      _mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)),
      _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(a4, a5), _mm256_add_ps(a6, a7)),
                    _mm256_add_ps(_mm256_add_ps(a8, a9), _mm256_add_ps(a10, a11))));
  float out[8];
  _mm256_storeu_ps(out, s);
  volatile float sink = out[0];
  (void)sink;
  return (double)blocks * 10000.0 * 12 * 8 * 2 / t * 1e-9;
}

/* The FMA rate of `procs` processes running at once (so, with one per core, of that many cores). */
static double fma_rate_together(int width, int procs) {
  int fds[2];
  if (pipe(fds) != 0) return 0;
  fflush(NULL);
  for (int i = 0; i < procs; i++) {
    pid_t pid = fork();
    if (pid == 0) { /* the best of several short spells, as for the clock */
      close(fds[0]);
      double r = 0;
      for (int spell = 0; spell < 20; spell++) {
        double x = width == 512 ? fma_rate_512(0.02) : fma_rate_256(0.02);
        if (x > r) r = x;
      }
      write_all(fds[1], &r, sizeof r);
      _exit(0);
    }
  }
  close(fds[1]);
  double total = 0, r;
  while (read_all(fds[0], &r, sizeof r) == 1) total += r;
  close(fds[0]);
  while (wait(NULL) > 0) {}
  return total;
}
#endif

/* ---- the libraries, opened at run time ---- */

/* OpenBLAS: CBLAS's standard numbering of the layout and transposition arguments. */
enum { CB_ROW_MAJOR = 101, CB_NO_TRANS = 111, CB_TRANS = 112 };
typedef void (*cblas_sgemm_fn)(int, int, int, int, int, int, float, const float *, int,
                               const float *, int, float, float *, int);

typedef struct {
  cblas_sgemm_fn sgemm;
  char *(*get_corename)(void);
  char *(*get_config)(void);
  void (*set_num_threads)(int);
  int (*get_num_threads)(void);
} openblas_api;

typedef struct {
  __typeof__(bli_init) *init;
  __typeof__(bli_sgemm) *sgemm;
  __typeof__(bli_arch_query_id) *arch_query_id;
  __typeof__(bli_arch_string) *arch_string;
  __typeof__(bli_info_get_version_str) *version_str;
  __typeof__(bli_thread_set_num_threads) *set_num_threads;
  __typeof__(bli_thread_get_num_threads) *get_num_threads;
} blis_api;

/* oneDNN 2.x exports this and its own tests declare it; its public header does not. Row-major,
 * like dnnl_sgemm; A and B hold bf16 bit patterns. */
typedef dnnl_status_t (*dnnl_gemm_bf16_fn)(char, char, dnnl_dim_t, dnnl_dim_t, dnnl_dim_t, float,
                                           const uint16_t *, dnnl_dim_t, const uint16_t *,
                                           dnnl_dim_t, float, float *, dnnl_dim_t);

#define DNNL_SYMBOLS(X)                                                                         \
  X(dnnl_version) X(dnnl_get_effective_cpu_isa) X(dnnl_sgemm) X(dnnl_engine_create)              \
  X(dnnl_stream_create) X(dnnl_stream_wait) X(dnnl_memory_desc_init_by_tag)                      \
  X(dnnl_matmul_desc_init) X(dnnl_primitive_desc_create) X(dnnl_primitive_desc_query)            \
  X(dnnl_primitive_desc_query_md) X(dnnl_primitive_desc_destroy) X(dnnl_primitive_create)        \
  X(dnnl_primitive_execute) X(dnnl_primitive_destroy) X(dnnl_memory_create)                      \
  X(dnnl_memory_destroy) X(dnnl_reorder_primitive_desc_create)

typedef struct {
#define DNNL_FIELD(name) __typeof__(name) *name;
  DNNL_SYMBOLS(DNNL_FIELD)
#undef DNNL_FIELD
  dnnl_gemm_bf16_fn gemm_bf16;
  int (*omp_get_max_threads)(void);
  dnnl_engine_t engine;
  dnnl_stream_t stream;
} dnnl_api;

static struct {
  void *handle;
  openblas_api ob;
  blis_api bl;
  dnnl_api dn;
} L;

static const char *dnnl_isa_name(int isa) {
  switch (isa) {
  case 0x1: return "sse41";
  case 0x3: return "avx";
  case 0x7: return "avx2";
  case 0x407: return "avx2_vnni";
  case 0xf: return "avx512_mic";
  case 0x1f: return "avx512_mic_4ops";
  case 0x27: return "avx512_core";
  case 0x67: return "avx512_core_vnni";
  case 0xe7: return "avx512_core_bf16";
  case 0x3e7: return "avx512_core_amx";
  default: return NULL;
  }
}

static void *sym(const char *name, char *missing, size_t cap) {
  void *p = dlsym(L.handle, name);
  if (!p && !missing[0]) snprintf(missing, cap, "%s", name);
  return p;
}

/* Opens the variant's library and fills in what it says about itself. */
static int open_library(const variant *v, lib_report *rep) {
  L.handle = dlopen(opt.so[v->lib], RTLD_NOW | RTLD_LOCAL);
  if (!L.handle) {
    snprintf(rep->note, sizeof rep->note, "dlopen failed: %s", dlerror());
    return -1;
  }
  char missing[128] = "";
  if (v->lib == LIB_OPENBLAS) {
    openblas_api *a = &L.ob;
    a->sgemm = (cblas_sgemm_fn)sym("cblas_sgemm", missing, sizeof missing);
    a->get_corename = (char *(*)(void))sym("openblas_get_corename", missing, sizeof missing);
    a->get_config = (char *(*)(void))sym("openblas_get_config", missing, sizeof missing);
    a->set_num_threads = (void (*)(int))sym("openblas_set_num_threads", missing, sizeof missing);
    a->get_num_threads = (int (*)(void))sym("openblas_get_num_threads", missing, sizeof missing);
    if (missing[0]) goto absent;
    a->set_num_threads(opt.threads);
    rep->threads = a->get_num_threads();
    const char *config = a->get_config();
    /* the configuration string starts with "OpenBLAS <version>" */
    snprintf(rep->version, sizeof rep->version, "%.*s", (int)strcspn(config + 9, " "),
             strncmp(config, "OpenBLAS ", 9) ? "?" : config + 9);
    snprintf(rep->isa, sizeof rep->isa, "core %s", a->get_corename());
    int sb = dlsym(L.handle, "cblas_sbgemm") != NULL || dlsym(L.handle, "sbgemm_") != NULL;
    snprintf(rep->note, sizeof rep->note, "config: %s; %s", config,
             sb ? "exports sbgemm" : "exports no sbgemm (no bf16 product)");
  } else if (v->lib == LIB_BLIS) {
    blis_api *a = &L.bl;
    a->init = (__typeof__(a->init))sym("bli_init", missing, sizeof missing);
    a->sgemm = (__typeof__(a->sgemm))sym("bli_sgemm", missing, sizeof missing);
    a->arch_query_id = (__typeof__(a->arch_query_id))sym("bli_arch_query_id", missing, sizeof missing);
    a->arch_string = (__typeof__(a->arch_string))sym("bli_arch_string", missing, sizeof missing);
    a->version_str = (__typeof__(a->version_str))sym("bli_info_get_version_str", missing, sizeof missing);
    a->set_num_threads =
        (__typeof__(a->set_num_threads))sym("bli_thread_set_num_threads", missing, sizeof missing);
    a->get_num_threads =
        (__typeof__(a->get_num_threads))sym("bli_thread_get_num_threads", missing, sizeof missing);
    if (missing[0]) goto absent;
    /* BLIS checks a BLIS_ARCH_TYPE request against its kernel table, which bli_init fills:
     * querying the architecture before it aborts the process. */
    a->init();
    a->set_num_threads(opt.threads);
    rep->threads = (int)a->get_num_threads();
    snprintf(rep->version, sizeof rep->version, "%s", a->version_str());
    const char *arch = a->arch_string(a->arch_query_id());
    snprintf(rep->isa, sizeof rep->isa, "sub-configuration %s%s", arch,
             !strcmp(arch, "generic") ? " (portable C kernels)" : "");
    snprintf(rep->note, sizeof rep->note, "no bf16 product in this BLIS");
  } else {
    dnnl_api *a = &L.dn;
#define DNNL_LOAD(name) a->name = (__typeof__(a->name))sym(#name, missing, sizeof missing);
    DNNL_SYMBOLS(DNNL_LOAD)
#undef DNNL_LOAD
    a->gemm_bf16 = (dnnl_gemm_bf16_fn)dlsym(L.handle, "dnnl_gemm_bf16bf16f32");
    if (missing[0]) goto absent;
    if (v->method == DNNL_GEMM_BF16 && !a->gemm_bf16) {
      snprintf(missing, sizeof missing, "dnnl_gemm_bf16bf16f32");
      goto absent;
    }
    /* oneDNN runs on the OpenMP runtime it was built with; ask that runtime for its count */
    void *gomp = dlopen("libgomp.so.1", RTLD_NOW | RTLD_NOLOAD);
    if (gomp) a->omp_get_max_threads = (int (*)(void))dlsym(gomp, "omp_get_max_threads");
    rep->threads = a->omp_get_max_threads ? a->omp_get_max_threads() : -1;
    const dnnl_version_t *ver = a->dnnl_version();
    int hashed = ver->hash && ver->hash[0] && strcmp(ver->hash, "N/A") != 0;
    snprintf(rep->version, sizeof rep->version, "%d.%d.%d%s%.12s%s", ver->major, ver->minor,
             ver->patch, hashed ? " (" : "", hashed ? ver->hash : "", hashed ? ")" : "");
    int isa = (int)a->dnnl_get_effective_cpu_isa();
    const char *name = dnnl_isa_name(isa);
    if (name) snprintf(rep->isa, sizeof rep->isa, "effective ISA %s", name);
    else snprintf(rep->isa, sizeof rep->isa, "effective ISA 0x%x", isa);
    if (a->dnnl_engine_create(&a->engine, dnnl_cpu, 0) != dnnl_success ||
        a->dnnl_stream_create(&a->stream, a->engine, dnnl_stream_default_flags) != dnnl_success) {
      snprintf(rep->note, sizeof rep->note, "no oneDNN cpu engine");
      return -1;
    }
    snprintf(rep->note, sizeof rep->note,
             "the effective ISA bounds what its JIT kernels use; only primitives name theirs");
  }
  return 0;
absent:
  snprintf(rep->note, sizeof rep->note, "%s lacks %s", opt.so[v->lib], missing);
  return -1;
}

/* ---- other processes' load ---- */

/* Busy and total time of all CPUs so far, in clock ticks, from /proc/stat. */
static int cpu_ticks(unsigned long long *busy, unsigned long long *total) {
  FILE *f = fopen("/proc/stat", "r");
  if (!f) return -1;
  unsigned long long v[10] = {0};
  int n = fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2],
                 &v[3], &v[4], &v[5], &v[6], &v[7], &v[8], &v[9]);
  fclose(f);
  if (n < 4) return -1;
  *total = 0;
  for (int i = 0; i < 8; i++) *total += v[i]; /* guest time is already inside user time */
  *busy = *total - v[3] - v[4];               /* less idle and iowait */
  return 0;
}

static double cpu_seconds(int who) {
  struct rusage ru;
  getrusage(who, &ru);
  return (double)ru.ru_utime.tv_sec + 1e-6 * (double)ru.ru_utime.tv_usec +
         (double)ru.ru_stime.tv_sec + 1e-6 * (double)ru.ru_stime.tv_usec;
}

/* Measures the share of the machine's CPUs that processes other than this one (and, in the
 * parent, its children) kept busy between begin and end. */
typedef struct {
  unsigned long long busy;
  double ours, t;
  int ok;
} load_mark;

static load_mark load_begin(void) {
  load_mark m;
  unsigned long long total;
  m.ok = cpu_ticks(&m.busy, &total) == 0;
  m.ours = cpu_seconds(RUSAGE_SELF) + cpu_seconds(RUSAGE_CHILDREN);
  m.t = now();
  return m;
}

static double load_end(load_mark m) {
  unsigned long long busy, total;
  double wall = now() - m.t;
  if (!m.ok || cpu_ticks(&busy, &total) != 0 || wall <= 0) return 0;
  double ours = cpu_seconds(RUSAGE_SELF) + cpu_seconds(RUSAGE_CHILDREN) - m.ours;
  double others = (double)(busy - m.busy) / (double)sysconf(_SC_CLK_TCK) - ours;
  long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
  return others > 0 ? others / (wall * (double)(ncpu > 0 ? ncpu : 1)) : 0;
}

/* Waits up to opt.wait_quiet seconds for half a second in which other processes keep less than
 * a quarter of the CPUs busy. */
static void wait_for_quiet(const char *name, const char *what) {
  if (opt.wait_quiet <= 0) return;
  double start = now(), share = 0;
  do {
    load_mark m = load_begin();
    struct timespec half = {0, 500000000L};
    nanosleep(&half, NULL);
    share = load_end(m);
  } while (share >= 0.25 && now() - start < opt.wait_quiet);
  if (now() - start > 1.0)
    fprintf(stderr, "[%s] waited %.0f s for quieter CPUs before %s (%.0f%% busy at the end)\n",
            name, now() - start, what, 100 * share);
}

/* ---- one product ---- */

typedef struct {
  const variant *v;
  int m, n, k;
  const float *x;       /* [m, k] */
  uint16_t *xb;         /* bf16 x, rewritten on every call */
  float *y;             /* [m, n] */
  int ncopies, next;
  float **w32;          /* copies of w, f32 */
  uint16_t **w16;       /* copies of w, bf16 */
  dnnl_primitive_t prim;
  dnnl_memory_t src_mem, dst_mem, *wmem;
} job;

static void call_once(job *j) {
  const variant *v = j->v;
  int c = j->next;
  j->next = (j->next + 1) % j->ncopies;
  if (v->bf16) to_bf16(j->x, j->xb, (size_t)j->m * j->k);
  switch (v->method) {
  case OB_SGEMM:
    L.ob.sgemm(CB_ROW_MAJOR, CB_NO_TRANS, CB_TRANS, j->m, j->n, j->k, 1.0f, j->x, j->k,
               j->w32[c], j->k, 0.0f, j->y, j->n);
    break;
  case BLIS_SGEMM: {
    float one = 1.0f, zero = 0.0f;
    L.bl.sgemm(BLIS_NO_TRANSPOSE, BLIS_TRANSPOSE, j->m, j->n, j->k, &one, (float *)j->x, j->k, 1,
               j->w32[c], j->k, 1, &zero, j->y, j->n, 1);
    break;
  }
  case DNNL_SGEMM:
    L.dn.dnnl_sgemm('N', 'T', j->m, j->n, j->k, 1.0f, j->x, j->k, j->w32[c], j->k, 0.0f, j->y,
                    j->n);
    break;
  case DNNL_GEMM_BF16:
    L.dn.gemm_bf16('N', 'T', j->m, j->n, j->k, 1.0f, j->xb, j->k, j->w16[c], j->k, 0.0f, j->y,
                   j->n);
    break;
  case DNNL_MM_F32_PACKED:
  case DNNL_MM_BF16:
  case DNNL_MM_BF16_PACKED: {
    dnnl_exec_arg_t args[3] = {{DNNL_ARG_SRC, j->src_mem},
                               {DNNL_ARG_WEIGHTS, j->wmem[c]},
                               {DNNL_ARG_DST, j->dst_mem}};
    L.dn.dnnl_primitive_execute(j->prim, L.dn.stream, 3, args);
    L.dn.dnnl_stream_wait(L.dn.stream);
    break;
  }
  }
}

/* Builds the oneDNN matmul primitive for the job, and its weight memories (reordered into the
 * primitive's layout for the packed variants). Returns NULL or why it could not. */
static const char *dnnl_matmul_setup(job *j, const float *w, const uint16_t *wb, char *impl,
                                     size_t impl_cap) {
  dnnl_api *a = &L.dn;
  int packed = j->v->method != DNNL_MM_BF16;
  dnnl_data_type_t in = j->v->bf16 ? dnnl_bf16 : dnnl_f32;
  dnnl_memory_desc_t src_md, wei_md, wei_plain_md, dst_md;
  dnnl_dims_t sd = {j->m, j->k}, wd = {j->k, j->n}, dd = {j->m, j->n};
  a->dnnl_memory_desc_init_by_tag(&src_md, 2, sd, in, dnnl_ab);
  /* w is [n, k] row-major: as the primitive's [k, n] weights that is the "ba" layout */
  a->dnnl_memory_desc_init_by_tag(&wei_plain_md, 2, wd, in, dnnl_ba);
  a->dnnl_memory_desc_init_by_tag(&wei_md, 2, wd, in, packed ? dnnl_format_tag_any : dnnl_ba);
  a->dnnl_memory_desc_init_by_tag(&dst_md, 2, dd, dnnl_f32, dnnl_ab);
  dnnl_matmul_desc_t md;
  if (a->dnnl_matmul_desc_init(&md, &src_md, &wei_md, NULL, &dst_md) != dnnl_success)
    return "matmul_desc_init failed";
  dnnl_primitive_desc_t pd;
  if (a->dnnl_primitive_desc_create(&pd, &md, NULL, a->engine, NULL) != dnnl_success)
    return "no matmul implementation for these types";
  const char *name = NULL;
  a->dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &name);
  snprintf(impl, impl_cap, "%s", name ? name : "?");
  const dnnl_memory_desc_t *chosen = a->dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0);
  if (a->dnnl_primitive_create(&j->prim, pd) != dnnl_success) {
    a->dnnl_primitive_desc_destroy(pd);
    return "primitive_create failed";
  }
  void *xdata = j->v->bf16 ? (void *)j->xb : (void *)j->x;
  a->dnnl_memory_create(&j->src_mem, &src_md, a->engine, xdata);
  a->dnnl_memory_create(&j->dst_mem, &dst_md, a->engine, j->y);
  j->wmem = calloc((size_t)j->ncopies, sizeof *j->wmem);
  const char *fail = NULL;
  if (!packed) {
    for (int c = 0; c < j->ncopies; c++)
      a->dnnl_memory_create(&j->wmem[c], &wei_plain_md, a->engine, j->w16[c]);
  } else {
    dnnl_memory_t plain;
    a->dnnl_memory_create(&plain, &wei_plain_md, a->engine,
                          j->v->bf16 ? (void *)wb : (void *)w);
    dnnl_primitive_desc_t rpd;
    dnnl_primitive_t reorder;
    if (a->dnnl_reorder_primitive_desc_create(&rpd, &wei_plain_md, a->engine, chosen, a->engine,
                                              NULL) != dnnl_success ||
        a->dnnl_primitive_create(&reorder, rpd) != dnnl_success) {
      fail = "no reorder into the primitive's weight layout";
    } else {
      for (int c = 0; c < j->ncopies; c++) {
        a->dnnl_memory_create(&j->wmem[c], chosen, a->engine, DNNL_MEMORY_ALLOCATE);
        dnnl_exec_arg_t args[2] = {{DNNL_ARG_FROM, plain}, {DNNL_ARG_TO, j->wmem[c]}};
        a->dnnl_primitive_execute(reorder, a->stream, 2, args);
      }
      a->dnnl_stream_wait(a->stream);
      a->dnnl_primitive_destroy(reorder);
      a->dnnl_primitive_desc_destroy(rpd);
    }
    a->dnnl_memory_destroy(plain);
  }
  a->dnnl_primitive_desc_destroy(pd);
  return fail;
}

static void dnnl_matmul_teardown(job *j) {
  if (!j->prim) return;
  L.dn.dnnl_primitive_destroy(j->prim);
  L.dn.dnnl_memory_destroy(j->src_mem);
  L.dn.dnnl_memory_destroy(j->dst_mem);
  for (int c = 0; c < j->ncopies; c++)
    if (j->wmem[c]) L.dn.dnnl_memory_destroy(j->wmem[c]);
  free(j->wmem);
  j->prim = NULL;
  j->wmem = NULL;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

#define MAX_REPS 1000

/* Largest error of y at sampled entries against a double-precision product of the inputs the
 * library saw (the bf16-rounded ones for bf16), relative to sum_k |x||w| of the entry. */
static double check(const job *j, const float *w, const uint16_t *wb) {
  double worst = 0;
  for (int s = 0; s < 48; s++) {
    int i = (int)(rng_next() % (uint64_t)j->m), o = (int)(rng_next() % (uint64_t)j->n);
    double ref = 0, mag = 0;
    for (int t = 0; t < j->k; t++) {
      double a, b;
      if (j->v->bf16) {
        a = from_bf16(j->xb[(size_t)i * j->k + t]);
        b = from_bf16(wb[(size_t)o * j->k + t]);
      } else {
        a = j->x[(size_t)i * j->k + t];
        b = w[(size_t)o * j->k + t];
      }
      ref += a * b;
      mag += fabs(a * b);
    }
    double e = fabs((double)j->y[(size_t)i * j->n + o] - ref) / (mag > 0 ? mag : 1);
    if (!(e <= worst)) worst = e; /* a NaN sticks */
  }
  return worst;
}

/* The child: measures every product and row count with one variant, reporting to fd. */
static int run_variant(const variant *v, int fd) {
  lib_report rep;
  memset(&rep, 0, sizeof rep);
  if (v->env) {
    char value[32];
    if (v->blis_arch >= 0) snprintf(value, sizeof value, "%d", v->blis_arch);
    else snprintf(value, sizeof value, "%s", v->value);
    setenv(v->env, value, 1);
  }
  char nt[16];
  snprintf(nt, sizeof nt, "%d", opt.threads);
  setenv("OMP_NUM_THREADS", nt, 1);      /* read when the library brings in the OpenMP runtime */
  setenv("OPENBLAS_NUM_THREADS", nt, 1);
  setenv("BLIS_NUM_THREADS", nt, 1);
  rep.ok = open_library(v, &rep) == 0;
#if DNNL_VERSION_MAJOR != 2
  if (rep.ok && (v->method == DNNL_MM_F32_PACKED || v->method == DNNL_MM_BF16 ||
                 v->method == DNNL_MM_BF16_PACKED)) {
    rep.ok = 0;
    snprintf(rep.note, sizeof rep.note, "the matmul set-up here is written for oneDNN 2.x");
  }
#endif
  if (v->env) {
    size_t len = strlen(rep.isa);
    snprintf(rep.isa + len, sizeof rep.isa - len, " (forced: %s=%s)", v->env, getenv(v->env));
  }
  if (write_all(fd, &rep, sizeof rep) != 0 || !rep.ok) return rep.ok ? 1 : 0;

  size_t cold = opt.hot ? 0 : 3 * l3_bytes();
  for (int p = 0; p < NPRODUCTS; p++) {
    const product *pr = &products[p];
    if (opt.case_filter && !strcasestr(pr->label, opt.case_filter)) continue;
    wait_for_quiet(v->name, pr->label);
    int n = pr->n, k = pr->k, maxm = 0;
    for (int r = 0; r < opt.nrows; r++)
      if (opt.rows[r] > maxm) maxm = opt.rows[r];
    size_t wcount = (size_t)n * k, elt = v->bf16 ? 2 : 4;
    int ncopies = (int)((cold + wcount * elt - 1) / (wcount * elt));
    if (ncopies < 1) ncopies = 1;
    if (ncopies > 64) ncopies = 64;
    int packed = v->method == DNNL_MM_F32_PACKED || v->method == DNNL_MM_BF16_PACKED;

    /* the same inputs for every variant: the generator restarts per product */
    rng_state = 0x9e3779b97f4a7c15ull ^ (uint64_t)(p + 1) * 0x100000001b3ull;
    float *w = xalloc(wcount * sizeof(float));
    for (size_t i = 0; i < wcount; i++) w[i] = rng_uniform();
    float *x = xalloc((size_t)maxm * k * sizeof(float));
    for (size_t i = 0; i < (size_t)maxm * k; i++) x[i] = rng_uniform();
    uint16_t *wb = NULL;
    if (v->bf16) {
      wb = xalloc(wcount * sizeof(uint16_t));
      to_bf16(w, wb, wcount);
    }
    job j;
    memset(&j, 0, sizeof j);
    j.v = v;
    j.n = n;
    j.k = k;
    j.x = x;
    j.xb = xalloc((size_t)maxm * k * sizeof(uint16_t));
    j.y = xalloc((size_t)maxm * n * sizeof(float));
    j.ncopies = ncopies;
    if (!packed) { /* the packed variants keep their copies inside oneDNN */
      if (v->bf16) {
        j.w16 = calloc((size_t)ncopies, sizeof *j.w16);
        for (int c = 0; c < ncopies; c++) {
          j.w16[c] = c == 0 ? wb : xalloc(wcount * 2);
          if (c) memcpy(j.w16[c], wb, wcount * 2);
        }
      } else {
        j.w32 = calloc((size_t)ncopies, sizeof *j.w32);
        for (int c = 0; c < ncopies; c++) {
          j.w32[c] = c == 0 ? w : xalloc(wcount * 4);
          if (c) memcpy(j.w32[c], w, wcount * 4);
        }
      }
    }

    for (int r = 0; r < opt.nrows; r++) {
      case_report cr;
      memset(&cr, 0, sizeof cr);
      cr.p = p;
      cr.r = r;
      j.m = opt.rows[r];
      j.next = 0;
      if (v->method == DNNL_MM_F32_PACKED || v->method == DNNL_MM_BF16 ||
          v->method == DNNL_MM_BF16_PACKED) {
        const char *why = dnnl_matmul_setup(&j, w, wb, cr.impl, sizeof cr.impl);
        if (why) {
          fprintf(stderr, "[%s] %s M=%d: %s\n", v->name, pr->label, j.m, why);
          snprintf(cr.impl, sizeof cr.impl, "%s", why);
          cr.best = cr.median = -1;
          dnnl_matmul_teardown(&j);
          if (write_all(fd, &cr, sizeof cr) != 0) return 1;
          continue;
        }
      }
      static double times[MAX_REPS];
      memset(j.y, 0, (size_t)j.m * n * sizeof(float));
      call_once(&j); /* warm-up: first-touch of y, the library's buffers and JIT kernels */
      int reps = 0;
      load_mark load = load_begin();
      double start = now();
      while (reps < MAX_REPS && (reps < opt.reps || now() - start < opt.min_time)) {
        double t0 = now();
        call_once(&j);
        times[reps++] = now() - t0;
      }
      cr.others = load_end(load);
      qsort(times, (size_t)reps, sizeof times[0], cmp_double);
      cr.reps = reps;
      cr.best = times[0];
      cr.median = times[reps / 2];
      cr.err = check(&j, w, wb);
      if (v->bf16) { /* the x conversion's own share */
        double best = 1e30;
        for (int i = 0; i < 5; i++) {
          double t0 = now();
          to_bf16(j.x, j.xb, (size_t)j.m * k);
          double t = now() - t0;
          if (t < best) best = t;
        }
        cr.conv = best;
      }
      dnnl_matmul_teardown(&j);
      fprintf(stderr, "[%s] %-42s M=%-4d %8.1f GFLOP/s (best of %d; others used %.0f%%)\n",
              v->name, pr->label, j.m, 2.0 * j.m * n * k / cr.best * 1e-9, reps, 100 * cr.others);
      if (write_all(fd, &cr, sizeof cr) != 0) return 1;
    }

    if (j.w32) {
      for (int c = 1; c < ncopies; c++) free(j.w32[c]);
      free(j.w32);
    }
    if (j.w16) {
      for (int c = 1; c < ncopies; c++) free(j.w16[c]);
      free(j.w16);
    }
    free(w);
    free(wb);
    free(x);
    free(j.xb);
    free(j.y);
  }
  return 0;
}

/* ---- the parent ---- */

#define MAX_ROUNDS 16

typedef struct {
  int ran;            /* selected and started */
  char failed[400];   /* why it has no numbers, if so */
  lib_report lib;
  case_report res[NPRODUCTS][MAX_ROWS];   /* the best over the rounds */
  int have[NPRODUCTS][MAX_ROWS];
  double round_best[NPRODUCTS][MAX_ROWS][MAX_ROUNDS]; /* each round's best seconds */
  double others[MAX_ROUNDS]; /* the share of the CPUs other processes used while it ran */
  double seconds;     /* wall time, all rounds */
} variant_result;

static variant_result results[NVARIANTS];

static int selected(const variant *v) {
  if (!opt.only) return 1;
  size_t len = strlen(v->name);
  for (const char *s = opt.only; *s;) {
    size_t tok = strcspn(s, ",");
    if (tok == len && !strncmp(s, v->name, len)) return 1;
    s += tok;
    if (*s == ',') s++;
  }
  return 0;
}

static void run_in_child(int vi, int round, const bench_cpu *cpu) {
  const variant *v = &variants[vi];
  variant_result *vr = &results[vi];
  vr->ran = 1;
  if (v->needs_avx512 && !bench_cpu_has(cpu, "avx512f")) {
    snprintf(vr->failed, sizeof vr->failed, "skipped: the CPU has no avx512f");
    return;
  }
  if (vr->failed[0]) return; /* failed in an earlier round */
  int fds[2];
  if (pipe(fds) != 0) die("pipe: %s", strerror(errno));
  fflush(NULL);
  load_mark load = load_begin();
  double t0 = now();
  pid_t pid = fork();
  if (pid < 0) die("fork: %s", strerror(errno));
  if (pid == 0) {
    close(fds[0]);
    dup2(STDERR_FILENO, STDOUT_FILENO); /* whatever a library prints stays out of the report */
    int rc = run_variant(v, fds[1]);
    fflush(NULL);
    _exit(rc);
  }
  close(fds[1]);
  int got = read_all(fds[0], &vr->lib, sizeof vr->lib);
  case_report cr;
  while (got == 1 && read_all(fds[0], &cr, sizeof cr) == 1) {
    if (cr.p < 0 || cr.p >= NPRODUCTS || cr.r < 0 || cr.r >= opt.nrows) continue;
    if (cr.best <= 0) {
      if (!vr->have[cr.p][cr.r]) vr->res[cr.p][cr.r] = cr; /* keeps the reason */
      continue;
    }
    vr->round_best[cr.p][cr.r][round] = cr.best;
    if (!vr->have[cr.p][cr.r] || cr.best < vr->res[cr.p][cr.r].best) {
      int reps = vr->res[cr.p][cr.r].reps;
      vr->res[cr.p][cr.r] = cr;
      vr->res[cr.p][cr.r].reps += reps;
    } else {
      vr->res[cr.p][cr.r].reps += cr.reps;
      if (cr.err > vr->res[cr.p][cr.r].err) vr->res[cr.p][cr.r].err = cr.err;
    }
    vr->have[cr.p][cr.r] = 1;
  }
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  double wall = now() - t0;
  vr->seconds += wall;
  vr->others[round] = load_end(load);
  if (got != 1) snprintf(vr->failed, sizeof vr->failed, "the child reported nothing");
  else if (!vr->lib.ok) {
    char note[sizeof vr->lib.note];
    memcpy(note, vr->lib.note, sizeof note);
    note[sizeof note - 1] = 0;
    snprintf(vr->failed, sizeof vr->failed, "%s", note);
  }
  if (WIFSIGNALED(status)) {
    char died[96];
    snprintf(died, sizeof died, "the child died of signal %d (%s)", WTERMSIG(status),
             strsignal(WTERMSIG(status)));
    size_t len = strlen(vr->failed);
    snprintf(vr->failed + len, sizeof vr->failed - len, "%s%s", len ? "; " : "", died);
  }
  fprintf(stderr, "[%s] round %d done in %.1f s; other processes used %.0f%% of the CPUs\n",
          v->name, round + 1, wall, 100 * vr->others[round]);
}

static double gflops(int p, int r, double s) {
  return 2.0 * opt.rows[r] * products[p].n * products[p].k / s * 1e-9;
}

static int usable(int vi) {
  return results[vi].ran && !results[vi].failed[0] && results[vi].lib.ok;
}

static double rate(int vi, int p, int r) {
  return usable(vi) && results[vi].have[p][r] ? gflops(p, r, results[vi].res[p][r].best) : 0;
}

/* An error above this, relative to sum |x||w|, means a wrong product, not rounding. */
#define ERR_LIMIT 1e-4

/* A measurement during which other processes used more than this share of the CPUs is marked. */
#define BUSY_MARK 0.25

static void cell(FILE *o, int vi, int p, int r) {
  double g = rate(vi, p, r);
  const case_report *c = &results[vi].res[p][r];
  if (g <= 0) fputs(" - |", o);
  else fprintf(o, " %.1f%s%s |", g, c->others > BUSY_MARK ? "*" : "",
               c->err > ERR_LIMIT ? " (wrong!)" : "");
}

static int product_selected(int p) {
  return !opt.case_filter || strcasestr(products[p].label, opt.case_filter);
}

/* The fastest variant of a kind (f32 or bf16) at one product and row count. */
static int fastest(int bf16, int p, int r) {
  int best = -1;
  for (int vi = 0; vi < NVARIANTS; vi++) {
    if (variants[vi].bf16 != bf16 || rate(vi, p, r) <= 0) continue;
    if (results[vi].res[p][r].err > ERR_LIMIT) continue;
    if (best < 0 || rate(vi, p, r) > rate(best, p, r)) best = vi;
  }
  return best;
}

typedef struct {
  double ghz;            /* clock */
  double f512[2], f256[2]; /* FMA GFLOP/s of one process and of opt.threads processes at once */
} machine_rates;

static void report(FILE *o, int argc, char **argv, const bench_cpu *cpu, const machine_rates *mr) {
  fprintf(o, "# GEMM libraries on the families' product shapes\n\n");
  fprintf(o, "- command:");
  for (int i = 0; i < argc; i++) fprintf(o, " %s", argv[i]);
  fprintf(o, "\n- cpu: %s (family %d, model %d), %d logical CPUs, %.0f MHz reported\n",
          cpu->name, cpu->family, cpu->model, cpu->cpus, cpu->mhz);
  static const char *flags[] = {"avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512_vnni",
                                "avx512_bf16", "avx512_fp16", "amx_tile", "amx_bf16"};
  fprintf(o, "- flags:");
  for (size_t i = 0; i < sizeof flags / sizeof flags[0]; i++)
    fprintf(o, " %s%s", bench_cpu_has(cpu, flags[i]) ? "" : "no ", flags[i]);
  fprintf(o, "\n");
  if (mr->ghz > 0) {
    fprintf(o, "- clock, measured with dependent additions: %.2f GHz\n", mr->ghz);
    fprintf(o, "- f32 FMA rate, measured with register-only loops: 512-bit vectors %.0f GFLOP/s on one "
               "core, %.0f on %d at once; 256-bit %.0f and %.0f (FLOP per cycle per core: %.1f, "
               "%.1f, %.1f, %.1f)\n",
            mr->f512[0], mr->f512[1], opt.threads, mr->f256[0], mr->f256[1],
            mr->f512[0] / mr->ghz, mr->f512[1] / mr->ghz / opt.threads, mr->f256[0] / mr->ghz,
            mr->f256[1] / mr->ghz / opt.threads);
  }
  fprintf(o, "- threads: %d for every library; each product timed %d+ times after one warm-up, "
             "for at least %.2f s, in each of %d round(s), best time reported; weights %s\n",
          opt.threads, opt.reps, opt.min_time, opt.rounds,
          opt.hot ? "hot (one copy, reused)"
                  : "cold (rotating through copies that together exceed 3x the last-level cache)");
  fprintf(o, "- product: y[M, N] = x[M, K] . w[N, K]^T, row-major; GFLOP/s = 2*M*N*K / best "
             "seconds\n\n");

  fprintf(o, "## Libraries\n\n| variant | library | version | what it ran | threads | seconds | "
             "others' CPU use | notes |\n|---|---|---|---|---|---|---|---|\n");
  for (int vi = 0; vi < NVARIANTS; vi++) {
    variant_result *vr = &results[vi];
    if (!vr->ran) continue;
    char impls[256] = "";
    for (int p = 0; p < NPRODUCTS; p++)
      for (int r = 0; r < opt.nrows; r++) {
        const char *im = vr->res[p][r].impl;
        if (!vr->have[p][r] || !im[0] || strstr(impls, im)) continue;
        size_t len = strlen(impls);
        snprintf(impls + len, sizeof impls - len, "%s%s", len ? ", " : "", im);
      }
    char others[128] = "";
    for (int round = 0; round < opt.rounds && !vr->failed[0]; round++) {
      size_t len = strlen(others);
      snprintf(others + len, sizeof others - len, "%s%.0f%%", round ? ", " : "",
               100 * vr->others[round]);
    }
    const char *note = vr->failed[0] ? vr->failed : vr->lib.ok ? vr->lib.note : "";
    fprintf(o, "| %s | %s | %s | %s%s%s | %d | %.0f | %s | %s%s%s |\n", variants[vi].name,
            lib_name[variants[vi].lib], vr->lib.version[0] ? vr->lib.version : "-",
            vr->lib.isa[0] ? vr->lib.isa : "-", impls[0] ? "; primitive: " : "", impls,
            vr->lib.threads, vr->seconds, others[0] ? others : "-", variants[vi].what,
            note[0] ? "; " : "", note);
  }

  for (int kind = 0; kind < 2; kind++) {
    fprintf(o, "\n## %s: GFLOP/s\n\n", kind ? "bf16 x and w, f32 y (x conversion timed)" : "f32");
    fprintf(o, "| product | N x K | M |");
    for (int vi = 0; vi < NVARIANTS; vi++)
      if (results[vi].ran && variants[vi].bf16 == kind) fprintf(o, " %s |", variants[vi].name);
    fprintf(o, kind ? " fastest bf16 | over fastest f32 |\n" : " fastest | over openblas |\n");
    fprintf(o, "|---|---|---|");
    for (int vi = 0; vi < NVARIANTS; vi++)
      if (results[vi].ran && variants[vi].bf16 == kind) fprintf(o, "---|");
    fprintf(o, "---|---|\n");
    for (int p = 0; p < NPRODUCTS; p++) {
      if (!product_selected(p)) continue;
      for (int r = 0; r < opt.nrows; r++) {
        fprintf(o, "| %s | %dx%d | %d |", products[p].label, products[p].n, products[p].k,
                opt.rows[r]);
        for (int vi = 0; vi < NVARIANTS; vi++)
          if (results[vi].ran && variants[vi].bf16 == kind) cell(o, vi, p, r);
        int best = fastest(kind, p, r);
        int base = kind ? fastest(0, p, r) : 0; /* variants[0] is plain OpenBLAS */
        if (best < 0) fprintf(o, " - | - |\n");
        else if (rate(base, p, r) > 0)
          fprintf(o, " %s | %.2fx |\n", variants[best].name, rate(best, p, r) / rate(base, p, r));
        else fprintf(o, " %s | - |\n", variants[best].name);
      }
    }
  }

  int marked = 0;
  for (int vi = 0; vi < NVARIANTS; vi++)
    for (int p = 0; p < NPRODUCTS; p++)
      for (int r = 0; r < opt.nrows; r++)
        marked += rate(vi, p, r) > 0 && results[vi].res[p][r].others > BUSY_MARK;
  if (marked)
    fprintf(o, "\n\\* %d measurement(s) had other processes using more than %.0f%% of the CPUs "
               "while they ran: read them as lower bounds.\n", marked, 100 * BUSY_MARK);

  fprintf(o, "\n## Geometric mean over the products, GFLOP/s\n\n| M |");
  for (int vi = 0; vi < NVARIANTS; vi++)
    if (results[vi].ran) fprintf(o, " %s |", variants[vi].name);
  fprintf(o, "\n|---|");
  for (int vi = 0; vi < NVARIANTS; vi++)
    if (results[vi].ran) fprintf(o, "---|");
  fprintf(o, "\n");
  for (int r = 0; r < opt.nrows; r++) {
    fprintf(o, "| %d |", opt.rows[r]);
    for (int vi = 0; vi < NVARIANTS; vi++) {
      if (!results[vi].ran) continue;
      double logsum = 0;
      int n = 0, all = 1;
      for (int p = 0; p < NPRODUCTS; p++) {
        if (!product_selected(p)) continue;
        double g = rate(vi, p, r);
        if (g > 0) logsum += log(g), n++;
        else all = 0;
      }
      if (n && all) fprintf(o, " %.1f |", exp(logsum / n));
      else fprintf(o, " - |");
    }
    fprintf(o, "\n");
  }

  /* how much of the bf16 time the x conversion took, and the largest errors */
  double conv_share = 0;
  fprintf(o, "\n## Checks\n\n");
  for (int vi = 0; vi < NVARIANTS; vi++) {
    if (!usable(vi)) continue;
    double worst = 0;
    for (int p = 0; p < NPRODUCTS; p++)
      for (int r = 0; r < opt.nrows; r++) {
        if (!results[vi].have[p][r]) continue;
        const case_report *c = &results[vi].res[p][r];
        if (!(c->err <= worst)) worst = c->err;
        if (variants[vi].bf16 && c->conv / c->best > conv_share) conv_share = c->conv / c->best;
      }
    fprintf(o, "- %s: largest error at sampled entries %.1e of sum |x||w|%s", variants[vi].name,
            worst, worst > ERR_LIMIT ? " - WRONG RESULTS" : "");
    if (opt.rounds > 1) { /* how far apart the rounds' best times lie */
      double spreads[NPRODUCTS * MAX_ROWS];
      int n = 0;
      for (int p = 0; p < NPRODUCTS; p++)
        for (int r = 0; r < opt.nrows; r++) {
          double lo = 0, hi = 0;
          for (int round = 0; round < opt.rounds; round++) {
            double t = results[vi].round_best[p][r][round];
            if (t <= 0) continue;
            if (lo == 0 || t < lo) lo = t;
            if (t > hi) hi = t;
          }
          if (lo > 0) spreads[n++] = hi / lo - 1;
        }
      qsort(spreads, (size_t)n, sizeof spreads[0], cmp_double);
      if (n) fprintf(o, "; the rounds' best times differ by %.0f%% (median product), %.0f%% at most",
                     100 * spreads[n / 2], 100 * spreads[n - 1]);
    }
    fprintf(o, "\n");
  }
  if (conv_share > 0)
    fprintf(o, "- bf16: converting x (one thread) took at most %.1f%% of a timed bf16 call\n",
            100 * conv_share);

  if (opt.raw || o != stdout) {
    fprintf(o, "\n## Raw measurements\n\nbest and median: of the round with the best time; reps: "
               "all rounds together\n\n| variant | product | M | N | K | reps | best s | median s "
               "| best GFLOP/s | median GFLOP/s | each round's best GFLOP/s | others' CPU use | "
               "x to bf16 s | error | implementation |\n"
               "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    for (int vi = 0; vi < NVARIANTS; vi++)
      for (int p = 0; p < NPRODUCTS; p++)
        for (int r = 0; r < opt.nrows; r++) {
          if (!usable(vi) || !results[vi].have[p][r]) continue;
          const case_report *c = &results[vi].res[p][r];
          char rounds[160] = "";
          for (int round = 0; round < opt.rounds; round++) {
            double t = results[vi].round_best[p][r][round];
            size_t len = strlen(rounds);
            if (t > 0) snprintf(rounds + len, sizeof rounds - len, "%s%.1f", round ? ", " : "",
                                gflops(p, r, t));
            else snprintf(rounds + len, sizeof rounds - len, "%s-", round ? ", " : "");
          }
          char conv[32] = "-";
          if (variants[vi].bf16) snprintf(conv, sizeof conv, "%.6f", c->conv);
          fprintf(o, "| %s | %s | %d | %d | %d | %d | %.6f | %.6f | %.1f | %.1f | %s | %.0f%% | %s "
                     "| %.1e | %s |\n",
                  variants[vi].name, products[p].label, opt.rows[r], products[p].n,
                  products[p].k, c->reps, c->best, c->median, gflops(p, r, c->best),
                  gflops(p, r, c->median), rounds, 100 * c->others, conv, c->err,
                  c->impl[0] ? c->impl : "-");
        }
  }
}

/* The clock and the FMA rates, keeping the higher of this and any earlier measurement. */
static void measure_machine(const bench_cpu *cpu, machine_rates *mr) {
#if defined(__x86_64__)
  wait_for_quiet("bench_gemm", "the clock and FMA rate");
  double ghz = measure_clock_ghz();
  if (ghz > mr->ghz) mr->ghz = ghz;
  for (int i = 0; i < 2; i++) {
    int procs = i ? opt.threads : 1;
    double r512 = bench_cpu_has(cpu, "avx512f") ? fma_rate_together(512, procs) : 0;
    double r256 = bench_cpu_has(cpu, "avx2") && bench_cpu_has(cpu, "fma") ? fma_rate_together(256, procs) : 0;
    if (r512 > mr->f512[i]) mr->f512[i] = r512;
    if (r256 > mr->f256[i]) mr->f256[i] = r256;
  }
#else
  (void)cpu;
#endif
  fprintf(stderr, "bench_gemm: clock %.2f GHz, FMA rate %.0f (512-bit) / %.0f (256-bit) GFLOP/s "
                  "on %d processes\n", mr->ghz, mr->f512[1], mr->f256[1], opt.threads);
}

static void usage(FILE *f) {
  fprintf(f, "usage: bench_gemm [--threads N] [--reps N] [--min-time S] [--rounds N] [--wait-quiet S] [--rows 512,128,...] "
             "[--only NAME,...] [--case TEXT] [--hot] [--raw] [--out FILE] [--openblas PATH] "
             "[--blis PATH] [--dnnl PATH] [--list]\n");
}

static int parse_rows(const char *s) {
  opt.nrows = 0;
  while (*s) {
    char *end;
    long v = strtol(s, &end, 10);
    if (end == s || v < 1 || v > 1 << 20 || opt.nrows == MAX_ROWS) return -1;
    opt.rows[opt.nrows++] = (int)v;
    s = end;
    if (*s == ',') s++;
    else if (*s) return -1;
  }
  return opt.nrows ? 0 : -1;
}

int main(int argc, char **argv) {
  for (size_t r = 0; r < sizeof default_rows / sizeof default_rows[0]; r++)
    opt.rows[opt.nrows++] = default_rows[r];
  int list = 0;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    const char *val = i + 1 < argc ? argv[i + 1] : NULL;
#define NEEDS_VALUE()                                                                           \
  do {                                                                                           \
    if (!val) die("%s needs a value", a);                                                        \
    i++;                                                                                         \
  } while (0)
    if (!strcmp(a, "--threads")) {
      NEEDS_VALUE();
      opt.threads = atoi(val);
      if (opt.threads < 1 || opt.threads > 1024) die("--threads wants a positive count");
    } else if (!strcmp(a, "--reps")) {
      NEEDS_VALUE();
      opt.reps = atoi(val);
      if (opt.reps < 1 || opt.reps > MAX_REPS) die("--reps wants 1 to %d", MAX_REPS);
    } else if (!strcmp(a, "--rounds")) {
      NEEDS_VALUE();
      opt.rounds = atoi(val);
      if (opt.rounds < 1 || opt.rounds > MAX_ROUNDS) die("--rounds wants 1 to %d", MAX_ROUNDS);
    } else if (!strcmp(a, "--wait-quiet")) {
      NEEDS_VALUE();
      opt.wait_quiet = atof(val);
    } else if (!strcmp(a, "--min-time")) {
      NEEDS_VALUE();
      opt.min_time = atof(val);
    } else if (!strcmp(a, "--rows")) {
      NEEDS_VALUE();
      if (parse_rows(val) != 0) die("--rows wants positive counts separated by commas");
    } else if (!strcmp(a, "--only")) {
      NEEDS_VALUE();
      opt.only = val;
    } else if (!strcmp(a, "--case")) {
      NEEDS_VALUE();
      opt.case_filter = val;
    } else if (!strcmp(a, "--out")) {
      NEEDS_VALUE();
      opt.out = val;
    } else if (!strcmp(a, "--openblas")) {
      NEEDS_VALUE();
      opt.so[LIB_OPENBLAS] = val;
    } else if (!strcmp(a, "--blis")) {
      NEEDS_VALUE();
      opt.so[LIB_BLIS] = val;
    } else if (!strcmp(a, "--dnnl")) {
      NEEDS_VALUE();
      opt.so[LIB_DNNL] = val;
    } else if (!strcmp(a, "--hot")) opt.hot = 1;
    else if (!strcmp(a, "--raw")) opt.raw = 1;
    else if (!strcmp(a, "--list")) list = 1;
    else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
      usage(stdout);
      return 0;
    } else {
      usage(stderr);
      die("unknown option '%s'", a);
    }
  }
  if (list) {
    printf("variants:\n");
    for (int vi = 0; vi < NVARIANTS; vi++)
      printf("  %-20s %s: %s\n", variants[vi].name, lib_name[variants[vi].lib], variants[vi].what);
    printf("products (w is N x K):\n");
    for (int p = 0; p < NPRODUCTS; p++)
      printf("  %-44s %d x %d\n", products[p].label, products[p].n, products[p].k);
    printf("libraries: %s, %s, %s\n", opt.so[0], opt.so[1], opt.so[2]);
    return 0;
  }
  if (opt.only) {
    int any = 0;
    for (int vi = 0; vi < NVARIANTS; vi++) any |= selected(&variants[vi]);
    if (!any) die("--only names no variant (see --list)");
  }
  FILE *out = NULL;
  if (opt.out && !(out = fopen(opt.out, "w"))) die("cannot write %s: %s", opt.out, strerror(errno));

  bench_cpu cpu;
  bench_cpu_read(&cpu);
  machine_rates mr;
  memset(&mr, 0, sizeof mr);
  measure_machine(&cpu, &mr);

  /* the rounds alternate the variants' order, so a busy spell on a shared machine does not
   * always land on the same ones */
  for (int round = 0; round < opt.rounds; round++)
    for (int i = 0; i < NVARIANTS; i++) {
      int vi = round % 2 ? NVARIANTS - 1 - i : i;
      if (selected(&variants[vi])) run_in_child(vi, round, &cpu);
    }

  measure_machine(&cpu, &mr); /* again: the faster of the two is the less disturbed */
  report(stdout, argc, argv, &cpu, &mr);
  if (out) {
    report(out, argc, argv, &cpu, &mr);
    if (fclose(out) != 0) die("writing %s failed", opt.out);
  }
  return 0;
}
