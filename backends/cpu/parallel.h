// The one parallel loop every CPU op except the matmuls goes through.
//
// parallel_for(n, f) calls f(i) for i in [0, n), in any order and possibly concurrently, and returns
// when all calls are done; parallel_for(n, item_cost, f) runs small loops on the calling thread.
// With Kokkos (TLLM_WITH_KOKKOS) it is Kokkos::parallel_for over the default host execution space;
// without it, an OpenMP loop (the GPU machine has no Kokkos; a build with neither runs the loop
// serially). The ops are written once against this function, so both builds run the same code path.
//
// Kokkos must be initialised before its first parallel_for: ParallelRuntime does that once per
// process (a backend constructs one), and finalizes at exit.
#pragma once

#include <cstdint>

#if TLLM_WITH_KOKKOS
#include <Kokkos_Core.hpp>
#endif

namespace tllm::cpu {

// Makes sure the parallel runtime is up; cheap to construct more than once.
class ParallelRuntime {
 public:
  ParallelRuntime();
  // What runs the loops, for device_info: "Kokkos 3.4.1 (Serial)", "OpenMP (2 threads)", ...
  static const char* description();
};

// Below this much work (item_cost · n, in rough element operations) a loop runs on the calling
// thread: waking a thread team costs more than it saves, and idle OpenMP threads that spin while
// OpenBLAS's threads work take cores from them.
constexpr int64_t kSerialWork = int64_t(1) << 15;

// Calls f(i) for i in [0, n); item_cost estimates the work of one call (see kSerialWork).
template <class F>
void parallel_for(int64_t n, int64_t item_cost, const F& f) {
  if (n <= 0) return;
  if (n == 1 || n * item_cost < kSerialWork) {
    for (int64_t i = 0; i < n; ++i) f(i);
    return;
  }
#if TLLM_WITH_KOKKOS
  Kokkos::parallel_for(
      Kokkos::RangePolicy<Kokkos::DefaultHostExecutionSpace, Kokkos::IndexType<int64_t>>(0, n),
      [&f](const int64_t i) { f(i); });
  Kokkos::DefaultHostExecutionSpace().fence();  // parallel_for may return early; ops are synchronous
#else
#ifdef _OPENMP
#pragma omp parallel for schedule(static)
#endif
  for (int64_t i = 0; i < n; ++i) f(i);
#endif
}

// The same for items of unknown or large cost: parallel whenever n > 1.
template <class F>
void parallel_for(int64_t n, const F& f) {
  parallel_for(n, kSerialWork, f);
}

}  // namespace tllm::cpu
