// The facts a benchmark's header records about its device.
#include <gtest/gtest.h>

#include "apps/common.h"

namespace tllm {
namespace {

TEST(DeviceSummary, GpuLineNamesEveryField) {
  DeviceInfo d;
  d.name = "NVIDIA H200";
  d.driver = "580.159.04";
  d.runtime = "CUDA runtime 13.0";
  d.peak_bandwidth_gbs = 4814.4;
  d.multiprocessors = 132;
  EXPECT_EQ(device_summary(d, true), "NVIDIA H200 | driver 580.159.04 | CUDA runtime 13.0 | 132 SMs | nominal 4814 GB/s");
}

TEST(DeviceSummary, CpuLineHasNoSmsAndMarksWhatIsUnknown) {
  DeviceInfo d;
  d.name = "AMD EPYC (2 threads)";
  d.runtime = "OpenBLAS 0.3.21";
  d.multiprocessors = 2;
  EXPECT_EQ(device_summary(d, false), "AMD EPYC (2 threads) | driver - | OpenBLAS 0.3.21 | nominal bandwidth -");
}

}  // namespace
}  // namespace tllm
