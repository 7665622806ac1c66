/* cpu_blas.c - the cpu backend's one door to sgemm (OpenBLAS; oneDNN for a product on one thread), so
 * that every product runs on the backend's own OpenMP team.
 *
 * nnt links the OpenMP build of OpenBLAS, whose sgemm joins the caller's OpenMP threads. A host
 * process may have loaded another build first under the same soname (libopenblas.so.0): Python
 * with numpy loads Debian's pthreads build, and the dynamic loader then hands that one to the
 * backend too. Its own thread pool and the backend's OpenMP team then take turns on the same
 * cores, each spinning while the other works (measured on a 2-core machine: a gradient trace
 * 45 s from Python against 33 s from the CLI). So at start the backend asks OpenBLAS which build
 * it is (openblas_get_parallel: 0 sequential, 1 pthreads, 2 OpenMP); on any but OpenMP it sets
 * OpenBLAS to one thread and splits each large product itself, by rows of the output (by
 * columns when it has more columns than rows), one single-threaded sgemm per thread of its team.
 * The INI's `[backend.cpu] blas_split = yes|no` overrides the choice (tests take both paths).
 *
 * Where the build has oneDNN (and `[backend.cpu] gemm` is not `openblas`) every product goes to
 * oneDNN's sgemm instead: OpenBLAS picks its kernels by the CPU's model number, and on
 * a virtual CPU it does not know (the KVM "Intel Xeon Processor" of the benchmark machine, with
 * AVX-512) it falls back to its SSE3 kernels (sgemm_kernel_PRESCOTT in a profile), while oneDNN
 * picks by the instruction set CPUID reports. Measured with bench/bench_attention.c on that
 * machine (2 threads, 48 heads of 128, 2048 tokens): the one-pass attention, whose tile
 * products run one per thread, took 1.75 s on OpenBLAS and 0.56 s on oneDNN. */
#include <cblas.h>
#ifdef NNT_HAVE_DNNL
#include <oneapi/dnnl/dnnl.h>
#endif
#ifdef _OPENMP
#include <omp.h>
#endif

#include "cpu_internal.h"

extern int openblas_get_parallel(void);
extern void openblas_set_num_threads(int num_threads);

#define SPLIT_MIN_MACS ((double)(1 << 18)) /* smaller products are not worth a team */

void cpu_blas_setup(cpu_ctx *c, int split)
{
    c->blas_split = split >= 0 ? split : openblas_get_parallel() != 2;
    openblas_set_num_threads(c->blas_split ? 1 : c->threads);
}

void cpu_sgemm(const cpu_ctx *c, int trans_a, int trans_b, int64_t M, int64_t N, int64_t K, float alpha,
               const float *a, int64_t lda, const float *b, int64_t ldb, float beta, float *y, int64_t ldy)
{
    enum CBLAS_TRANSPOSE ta = trans_a ? CblasTrans : CblasNoTrans, tb = trans_b ? CblasTrans : CblasNoTrans;
    int team = c->threads;
#ifdef _OPENMP
    if (omp_in_parallel()) team = 1; /* called by one thread of a team: that thread alone */
#else
    team = 1;
#endif
#if defined(NNT_HAVE_DNNL) && defined(_OPENMP)
    /* oneDNN's kernels for this machine's instruction set: inside a parallel region on the calling
     * thread (oneDNN runs a nested call there), outside on a team of c->threads */
    if (c->dnnl_engine) {
        if (team > 1) omp_set_num_threads(team);
        if (dnnl_sgemm(trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', M, N, K, alpha, a, lda, b, ldb, beta, y, ldy) ==
            dnnl_success)
            return;
    }
#endif
    if (!c->blas_split || team <= 1 || (double)M * (double)N * (double)K < SPLIT_MIN_MACS) {
        cblas_sgemm(CblasRowMajor, ta, tb, (int)M, (int)N, (int)K, alpha, a, (int)lda, b, (int)ldb, beta, y, (int)ldy);
        return;
    }
    int by_rows = M >= N;
    int64_t n = by_rows ? M : N, step = (n + team - 1) / team;
    step = (step + 7) / 8 * 8;
#pragma omp parallel for num_threads(team) schedule(static)
    for (int64_t i0 = 0; i0 < n; i0 += step) {
        int64_t len = n - i0 < step ? n - i0 : step;
        if (by_rows) /* rows [i0, i0 + len) of y, of op(a) */
            cblas_sgemm(CblasRowMajor, ta, tb, (int)len, (int)N, (int)K, alpha, trans_a ? a + i0 : a + i0 * lda,
                        (int)lda, b, (int)ldb, beta, y + i0 * ldy, (int)ldy);
        else /* columns [i0, i0 + len) of y, of op(b) */
            cblas_sgemm(CblasRowMajor, ta, tb, (int)M, (int)len, (int)K, alpha, a, (int)lda,
                        trans_b ? b + i0 * ldb : b + i0, (int)ldb, beta, y + i0, (int)ldy);
    }
}
