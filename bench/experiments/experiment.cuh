// Pieces the standalone experiments share: a CUDA error check and the device query for main(), the
// timing of repeated launches, and the 64-bit tagged values through which their kernels hand data
// from one step to the next (a value and the number of the step that wrote it, in one word, so that
// a reader spinning on the word sees both at once).
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

// Fills prop with device 0's properties; false, after printing "<name>: no CUDA device visible",
// when there is none.
inline bool device_properties(const char* name, cudaDeviceProp& prop) {
  if (cudaGetDeviceProperties(&prop, 0) == cudaSuccess) return true;
  std::fprintf(stderr, "%s: no CUDA device visible\n", name);
  return false;
}

// Mean microseconds of one call of `launch` (which queues work on s and returns its cudaError_t)
// over `reps` calls, after 3 untimed ones; -1 when a call or the timing fails (printed to stderr).
template <class Launch>
double time_launches(cudaStream_t s, int reps, Launch&& launch) {
  cudaEvent_t e0 = nullptr, e1 = nullptr;
  cudaError_t err = cudaEventCreate(&e0);
  if (err == cudaSuccess) err = cudaEventCreate(&e1);
  for (int i = 0; i < 3 && err == cudaSuccess; ++i) err = launch();
  if (err == cudaSuccess) err = cudaEventRecord(e0, s);
  for (int i = 0; i < reps && err == cudaSuccess; ++i) err = launch();
  if (err == cudaSuccess) err = cudaEventRecord(e1, s);
  if (err == cudaSuccess) err = cudaStreamSynchronize(s);
  float ms = 0;
  if (err == cudaSuccess) err = cudaEventElapsedTime(&ms, e0, e1);
  if (e0) cudaEventDestroy(e0);
  if (e1) cudaEventDestroy(e1);
  if (err != cudaSuccess) {
    std::fprintf(stderr, "timed launches failed: %s\n", cudaGetErrorString(err));
    return -1;
  }
  return double(ms) * 1e3 / reps;
}

__device__ __forceinline__ uint64_t load_relaxed(const uint64_t* p) {
  uint64_t v;
  asm volatile("ld.relaxed.gpu.global.b64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}

__device__ __forceinline__ void store_tagged(uint64_t* p, uint32_t tag, float v) {
  const uint64_t word = uint64_t(tag) << 32 | __float_as_uint(v);
  asm volatile("st.relaxed.gpu.global.b64 [%0], %1;" ::"l"(p), "l"(word) : "memory");
}

// Four consecutive tagged values at p (32-byte aligned), read in two 16-byte loads (one trip to
// memory) into v; true when all four carry `tag`.
__device__ __forceinline__ bool load_tagged4(const uint64_t* p, uint32_t tag, float4& v) {
  uint64_t w[4];
  asm volatile("ld.relaxed.gpu.global.v2.b64 {%0, %1}, [%2];" : "=l"(w[0]), "=l"(w[1]) : "l"(p) : "memory");
  asm volatile("ld.relaxed.gpu.global.v2.b64 {%0, %1}, [%2];" : "=l"(w[2]), "=l"(w[3]) : "l"(p + 2) : "memory");
  v = make_float4(__uint_as_float(uint32_t(w[0])), __uint_as_float(uint32_t(w[1])), __uint_as_float(uint32_t(w[2])),
                  __uint_as_float(uint32_t(w[3])));
  return uint32_t(w[0] >> 32) == tag && uint32_t(w[1] >> 32) == tag && uint32_t(w[2] >> 32) == tag &&
         uint32_t(w[3] >> 32) == tag;
}

// The value at p once its word carries `tag` (spinning until then).
__device__ __forceinline__ float wait_tagged(const uint64_t* p, uint32_t tag) {
  uint64_t u;
  do u = load_relaxed(p);
  while (uint32_t(u >> 32) != tag);
  return __uint_as_float(uint32_t(u));
}
