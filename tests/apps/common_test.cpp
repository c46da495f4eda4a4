// The facts a benchmark's header (and its --json) records about its device.
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

TEST(DeviceJson, GpuNamesEveryField) {
  DeviceInfo d;
  d.name = "NVIDIA H200";
  d.driver = "580.159.04";
  d.runtime = "CUDA runtime 13.0";
  d.peak_bandwidth_gbs = 4814.4;
  d.multiprocessors = 132;
  const nlohmann::json j = device_json(d, true);
  EXPECT_EQ(j.at("name"), "NVIDIA H200");
  EXPECT_EQ(j.at("driver"), "580.159.04");
  EXPECT_EQ(j.at("runtime"), "CUDA runtime 13.0");
  EXPECT_EQ(j.at("multiprocessors"), 132);
  EXPECT_TRUE(j.at("multiprocessors").is_number_integer());
  EXPECT_DOUBLE_EQ(j.at("peak_bandwidth_gbs").get<double>(), 4814.4);
}

TEST(DeviceJson, CpuGivesNullWhereTheLineSaysDash) {
  DeviceInfo d;
  d.name = "AMD EPYC (2 threads)";
  d.runtime = "OpenBLAS 0.3.21";
  d.multiprocessors = 2;
  const nlohmann::json j = device_json(d, false);
  EXPECT_EQ(j.at("name"), "AMD EPYC (2 threads)");
  EXPECT_TRUE(j.at("driver").is_null());
  EXPECT_EQ(j.at("runtime"), "OpenBLAS 0.3.21");
  EXPECT_TRUE(j.at("multiprocessors").is_null());
  EXPECT_TRUE(j.at("peak_bandwidth_gbs").is_null());
}

}  // namespace
}  // namespace tllm
