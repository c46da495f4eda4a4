// The built-in profiler's arithmetic on trace records (apps/profiler.h).
#include <gtest/gtest.h>

#include <vector>

#include "apps/profiler.h"

namespace tllm {
namespace {

TraceRecord kernel(uint64_t start_us, uint64_t end_us) {
  TraceRecord r;
  r.name = "k";
  r.start_ns = start_us * 1000;
  r.end_ns = end_us * 1000;
  r.grid[0] = 1;
  return r;
}

TEST(LaunchWaits, CountsOnlyStartsAfterEveryEarlierEnd) {
  // Listed out of order. [0,10]; [8,20] overlaps it (launched in time); [25,30] waited 5 us; a copy at [31,40]
  // is not a kernel; [33,50] waited 3 us; [35,36], listed second, starts inside [33,50].
  std::vector<TraceRecord> r = {kernel(0, 10), kernel(35, 36), kernel(8, 20), kernel(25, 30), kernel(33, 50)};
  TraceRecord copy = kernel(31, 40);
  copy.kind = TraceRecord::Kind::Memcpy;
  r.push_back(copy);
  // Sorted: [0,10] [8,20] [25,30] (waits 5) [33,50] (waits 3) [35,36] (overlaps [33,50]).
  const LaunchWaits all = launch_waits(r, 100);
  EXPECT_DOUBLE_EQ(all.total_us, 8.0);
  EXPECT_DOUBLE_EQ(all.head_us, 8.0);
  EXPECT_DOUBLE_EQ(all.largest_us, 5.0);
  // Only the waits of the first three kernels count as the head.
  const LaunchWaits head3 = launch_waits(r, 3);
  EXPECT_DOUBLE_EQ(head3.head_us, 5.0);
  EXPECT_DOUBLE_EQ(head3.total_us, 8.0);
}

TEST(LaunchWaits, EmptyAndSingleKernelHaveNone) {
  EXPECT_DOUBLE_EQ(launch_waits({}, 4).total_us, 0.0);
  EXPECT_DOUBLE_EQ(launch_waits({kernel(5, 9)}, 4).total_us, 0.0);
}

}  // namespace
}  // namespace tllm
