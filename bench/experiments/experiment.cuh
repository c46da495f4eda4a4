// Pieces the standalone experiments share: a CUDA error check for main(), and the 64-bit tagged
// values through which their kernels hand data from one step to the next (a value and the number
// of the step that wrote it, in one word, so that a reader spinning on the word sees both at once).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>

// In main(): prints "<statement> failed: <error> (<file>:<line>)" and returns 1 when a CUDA call fails.
#define CHECK(x)                                                                                          \
  do {                                                                                                    \
    const cudaError_t check_err_ = (x);                                                                   \
    if (check_err_ != cudaSuccess) {                                                                      \
      std::fprintf(stderr, "%s failed: %s (%s:%d)\n", #x, cudaGetErrorString(check_err_), __FILE__, __LINE__); \
      return 1;                                                                                           \
    }                                                                                                     \
  } while (0)

__device__ __forceinline__ uint64_t load_relaxed(const uint64_t* p) {
  uint64_t v;
  asm volatile("ld.relaxed.gpu.global.b64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}

__device__ __forceinline__ void store_tagged(uint64_t* p, uint32_t tag, float v) {
  const uint64_t word = uint64_t(tag) << 32 | __float_as_uint(v);
  asm volatile("st.relaxed.gpu.global.b64 [%0], %1;" ::"l"(p), "l"(word) : "memory");
}

// The value at p once its word carries `tag` (spinning until then).
__device__ __forceinline__ float wait_tagged(const uint64_t* p, uint32_t tag) {
  uint64_t u;
  do u = load_relaxed(p);
  while (uint32_t(u >> 32) != tag);
  return __uint_as_float(uint32_t(u));
}
