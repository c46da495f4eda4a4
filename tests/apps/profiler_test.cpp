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

// The same records: chain times are end minus the latest earlier end, less the wait for the launch;
// with the waits they add up to the span.
TEST(CriticalPath, SplitsTheSpanIntoChainTimesAndLaunchWaits) {
  std::vector<TraceRecord> r = {kernel(0, 10), kernel(35, 36), kernel(8, 20), kernel(25, 30), kernel(33, 50)};
  r[1].name = r[3].name = "b";
  TraceRecord copy = kernel(31, 40);
  copy.kind = TraceRecord::Kind::Memcpy;
  r.push_back(copy);
  const CriticalPath p = critical_path(r);
  // "k": [0,10] 10, [8,20] 10, [33,50] 20 - 3 = 17; "b": [25,30] 10 - 5 = 5, [35,36] inside [33,50]: 0.
  ASSERT_EQ(p.rows.size(), 2u);
  EXPECT_EQ(p.rows[0].kernel, "k");
  EXPECT_EQ(p.rows[0].grid, "1x0x0");
  EXPECT_EQ(p.rows[0].chain_us, (std::vector<double>{10.0, 10.0, 17.0}));
  EXPECT_EQ(p.rows[1].kernel, "b");
  EXPECT_EQ(p.rows[1].chain_us, (std::vector<double>{5.0, 0.0}));
  ASSERT_EQ(p.waits.size(), 2u);  // [25,30] and [33,50]: kernels 2 and 3 in start order
  EXPECT_EQ(p.waits[0].kernel, 2u);
  EXPECT_DOUBLE_EQ(p.waits[0].us, 5.0);
  EXPECT_EQ(p.waits[1].kernel, 3u);
  EXPECT_DOUBLE_EQ(p.waits[1].us, 3.0);
  EXPECT_DOUBLE_EQ(p.span_us, 50.0);
}

TEST(CriticalPath, HostTimedOpsInsideAFusedOneCountNothing) {
  // The CPU backend times a fused op and its parts: [0,20] holds [0,5] and [5,20]; then [20,30].
  std::vector<TraceRecord> r = {kernel(0, 20), kernel(0, 5), kernel(5, 20), kernel(20, 30)};
  for (TraceRecord& x : r) x.grid[0] = 0;
  const CriticalPath p = critical_path(r);
  ASSERT_EQ(p.rows.size(), 1u);
  EXPECT_EQ(p.rows[0].grid, "-");
  EXPECT_EQ(p.rows[0].chain_us, (std::vector<double>{20.0, 0.0, 0.0, 10.0}));
  EXPECT_TRUE(p.waits.empty());
  EXPECT_DOUBLE_EQ(p.span_us, 30.0);
  EXPECT_TRUE(critical_path({}).rows.empty());
}

TEST(StepChainMedians, MedianAtEachPlaceOfTheStep) {
  // Three steps of "a" then "b": chains a 10, 5, 7 and b 10, 15, 3 (b's last overlaps a's).
  std::vector<TraceRecord> r = {kernel(0, 10), kernel(8, 20), kernel(20, 25), kernel(25, 40), kernel(40, 47), kernel(45, 50)};
  r[1].name = r[3].name = r[5].name = "b";
  r[0].name = r[2].name = r[4].name = "a";
  EXPECT_EQ(step_chain_medians(r, 3), (std::vector<double>{7.0, 10.0}));
  // A step whose kernel differs at a place is left out of that place's median.
  r[4].name = "c";
  EXPECT_EQ(step_chain_medians(r, 3), (std::vector<double>{10.0, 10.0}));
  EXPECT_TRUE(step_chain_medians(r, 7).empty());
  EXPECT_TRUE(step_chain_medians({}, 1).empty());
}

// A decode step like the H200's: 98 kernels, busy most of the step, 526 MB at 4,814 GB/s nominal.
StepFigures h200_like() {
  StepFigures f;
  f.host_us = 430;
  f.busy_us = 423;
  f.chain_us = 422;
  f.kernels = 98;
  f.bytes = 526e6;
  f.peak_gbs = 4814;
  return f;
}

TEST(StepBound, ShortBusyKernelsBelowPeakAreALatencyBoundChain) {
  const StepFigures f = h200_like();  // 4.3 us a kernel, 1,243 GB/s while busy
  EXPECT_EQ(step_bound(f), Bound::Latency);
  EXPECT_STREQ(bound_name(step_bound(f)), "latency-bound");
}

TEST(StepBound, EachRuleAtItsThreshold) {
  StepFigures f = h200_like();
  f.host_us = f.busy_us / (1 - kLaunchBoundIdle) + 1;  // idle just over 30%: launch-bound first
  EXPECT_EQ(step_bound(f), Bound::Launch);
  f.host_us = f.busy_us / (1 - kLaunchBoundIdle) - 1;
  EXPECT_EQ(step_bound(f), Bound::Latency);

  f = h200_like();
  f.busy_us = f.bytes / (0.61 * f.peak_gbs * 1e3);  // 61% of nominal while busy
  f.host_us = f.busy_us;
  EXPECT_EQ(step_bound(f), Bound::Bandwidth);
  f.busy_us = f.bytes / (0.59 * f.peak_gbs * 1e3);
  f.host_us = f.busy_us;
  f.chain_us = f.busy_us;
  EXPECT_EQ(step_bound(f), Bound::Latency);  // 98 kernels of 1.9 us

  f = h200_like();
  f.chain_us = f.kernels * (kLatencyBoundChainUs + 0.1);  // long kernels, below peak: the kernels are slow
  EXPECT_EQ(step_bound(f), Bound::Kernel);
  EXPECT_STREQ(bound_name(Bound::Kernel), "neither");
  f.peak_gbs = 0;  // unknown bandwidth: never bandwidth-bound
  f.busy_us = 1;
  f.host_us = 1;
  EXPECT_EQ(step_bound(f), Bound::Kernel);
  f.kernels = 0;  // nothing traced
  EXPECT_EQ(step_bound(f), Bound::Kernel);
}

TEST(CategoryBound, UsesChainTimeNotDurations) {
  // The lm_head alone: 145 MB in 40 us of chain is 3,625 GB/s, 75% of nominal.
  EXPECT_EQ(category_bound(1, 40.0, 145e6, 4814), Bound::Bandwidth);
  // 96 layer GEMVs: 380 MB in 378 us of chain, 3.9 us each.
  EXPECT_EQ(category_bound(96, 378.0, 380e6, 4814), Bound::Latency);
  // The same GEMVs at 6 us each: the kernels are slow.
  EXPECT_EQ(category_bound(96, 576.0, 380e6, 4814), Bound::Kernel);
  EXPECT_EQ(category_bound(0, 0.0, 0.0, 4814), Bound::Kernel);
}

}  // namespace
}  // namespace tllm
