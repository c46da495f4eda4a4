// The facts a benchmark's header (and its --json) records about its device.
#include <gtest/gtest.h>

#include "apps/common.h"

namespace tllm {
namespace {

DeviceInfo h200() {
  DeviceInfo d;
  d.name = "NVIDIA H200";
  d.driver = "580.159.04";
  d.runtime = "CUDA runtime 13.0";
  d.peak_bandwidth_gbs = 4814.4;
  d.multiprocessors = 132;
  return d;
}

// The CPU backend states no driver and no nominal bandwidth; its multiprocessors are threads.
DeviceInfo two_thread_cpu() {
  DeviceInfo d;
  d.name = "AMD EPYC (2 threads)";
  d.runtime = "OpenBLAS 0.3.21";
  d.multiprocessors = 2;
  return d;
}

TEST(DeviceSummary, GpuLineNamesEveryField) {
  const DeviceInfo d = h200();
  EXPECT_EQ(device_summary(d, true), "NVIDIA H200 | driver 580.159.04 | CUDA runtime 13.0 | 132 SMs | nominal 4814 GB/s");
}

TEST(DeviceSummary, CpuLineHasNoSmsAndMarksWhatIsUnknown) {
  const DeviceInfo d = two_thread_cpu();
  EXPECT_EQ(device_summary(d, false), "AMD EPYC (2 threads) | driver - | OpenBLAS 0.3.21 | nominal bandwidth -");
}

TEST(DeviceJson, GpuNamesEveryField) {
  const DeviceInfo d = h200();
  const nlohmann::json j = device_json(d, true);
  EXPECT_EQ(j.at("name"), "NVIDIA H200");
  EXPECT_EQ(j.at("driver"), "580.159.04");
  EXPECT_EQ(j.at("runtime"), "CUDA runtime 13.0");
  EXPECT_EQ(j.at("multiprocessors"), 132);
  EXPECT_TRUE(j.at("multiprocessors").is_number_integer());
  EXPECT_DOUBLE_EQ(j.at("peak_bandwidth_gbs").get<double>(), 4814.4);
}

TEST(DeviceJson, CpuGivesNullWhereTheLineSaysDash) {
  const DeviceInfo d = two_thread_cpu();
  const nlohmann::json j = device_json(d, false);
  EXPECT_EQ(j.at("name"), "AMD EPYC (2 threads)");
  EXPECT_TRUE(j.at("driver").is_null());
  EXPECT_EQ(j.at("runtime"), "OpenBLAS 0.3.21");
  EXPECT_TRUE(j.at("multiprocessors").is_null());
  EXPECT_TRUE(j.at("peak_bandwidth_gbs").is_null());
}

TEST(JsonText, BytesThatAreNotUtf8BecomeReplacementCharacters) {
  const nlohmann::json j = {{"model", "/tmp/x\xff.gguf"}, {"n", 2}};
  const std::string text = json_text(j);
  EXPECT_EQ(nlohmann::json::parse(text).at("model"), "/tmp/x\xef\xbf\xbd.gguf");
  EXPECT_NE(text.find("\n  \"n\": 2"), std::string::npos) << text;  // indented by two
}

}  // namespace
}  // namespace tllm
