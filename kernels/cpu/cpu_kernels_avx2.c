/* cpu_kernels_avx2.c - the weight kernels of cpu_kernels_impl.h for AVX2 with FMA: 8 float lanes.
 * Built with that instruction set's target flags; run only where the CPU has it. */
#define VL 8
#define CPU_KERNELS_TABLE cpu_kernels_avx2
#define CPU_KERNELS_NAME "avx2"
#include "cpu_kernels_impl.h"
