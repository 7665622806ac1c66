/* cpu_kernels_avx512.c - the weight kernels of cpu_kernels_impl.h for AVX-512 (F, BW, VL, DQ):
 * 16 float lanes. Built with that instruction set's target flags; run only where the CPU has it. */
#define VL 16
#define CPU_KERNELS_TABLE cpu_kernels_avx512
#define CPU_KERNELS_NAME "avx512"
#include "cpu_kernels_impl.h"
