/* cpu_kernels_base.c - the weight kernels of cpu_kernels_impl.h for the compiler's baseline
 * target: SSE2 on x86-64, NEON on aarch64 (4 float lanes), plain vector code elsewhere. */
#define VL 4
#define CPU_KERNELS_TABLE cpu_kernels_base
#if defined(__aarch64__) || defined(__ARM_NEON)
#define CPU_KERNELS_NAME "neon"
#elif defined(__x86_64__) || defined(__SSE2__)
#define CPU_KERNELS_NAME "sse2"
#else
#define CPU_KERNELS_NAME "portable"
#endif
#include "cpu_kernels_impl.h"
