// Shared pieces of the op conformance suite: the per-backend fixture, a deterministic random
// generator, host-side weight matrices, upload/download shortcuts and the comparisons.
//
// The suite is written once and runs on every backend: each test file derives its fixture from
// OpsTest, instantiates it with TLLM_OPS_INSTANTIATE(Name) and writes TEST_P cases; every case then
// exists once per backend, named Ops/Name.Case/<backend> (the backend name is only ever that last
// part, so a gtest filter `*/cpu` or `*/cuda` selects one backend). A backend this machine cannot
// run is skipped with a message.
//
// Each case computes the op on the backend and with the plain-loop reference (reference.h) from
// the same inputs, and compares under a tolerance stated next to it, with the reason.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"

namespace tllm::test {

// ---- random numbers ------------------------------------------------------------------------------

// SplitMix64: a fixed, platform-independent sequence for a given seed (std distributions differ
// between standard libraries).
class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}
  uint64_t next();
  double uniform();                       // [0, 1)
  float uniform(float lo, float hi);      // [lo, hi)
  int64_t below(int64_t n);               // [0, n)
  int64_t between(int64_t lo, int64_t hi);  // [lo, hi], inclusive

 private:
  uint64_t state_;
};

std::vector<float> random_floats(Rng& rng, size_t n, float lo, float hi);
// Uniform values rounded to fp16, as fp16 bit patterns.
std::vector<half_t> random_halves(Rng& rng, size_t n, float lo, float hi);

std::vector<float> to_float(const std::vector<half_t>& x);
// What storing the values in an fp16 buffer makes of them.
std::vector<float> round_half(const std::vector<double>& x);
std::vector<float> to_float(const std::vector<double>& x);

// ---- weights -------------------------------------------------------------------------------------

// A weight matrix that owns its host storage; view() is what upload_matrix takes.
// W8 with q uniform in [-127, 127] and per-group scales in [scale_lo, scale_hi].
HostWeights random_w8(Rng& rng, int64_t n, int64_t k, float scale_lo = 0.002f, float scale_hi = 0.02f);
// F16 with values uniform in [-amp, amp].
HostWeights random_f16(Rng& rng, int64_t n, int64_t k, float amp = 0.1f);
// An F16 matrix with its int8 form (HostMatrix), as one converted from Q8_0 blocks: random q and
// fp16 scales in [scale_lo, scale_hi], each value fp16(q · scale). k is a multiple of kW8Group.
HostWeights random_f16_int8_form(Rng& rng, int64_t n, int64_t k, float scale_lo = 0.0005f, float scale_hi = 0.002f);
// Small integers in [-qmax, qmax] (W8 with every scale 1, or F16): with integer activations every
// product and partial sum is an integer below 2^24, so any summation order gives the exact result.
HostWeights integer_w8(Rng& rng, int64_t n, int64_t k, int qmax);
HostWeights integer_f16(Rng& rng, int64_t n, int64_t k, int qmax);

// ---- comparisons ---------------------------------------------------------------------------------

// One fp16 ULP relative to the value (2^-10 bounds the spacing over |x| for normal fp16): how far an
// fp16 output may land from the exactly rounded reference when the backend's fp32 result sits a
// hair to the other side of a rounding midpoint.
constexpr double kHalfUlp = 1.0 / 1024;
// The spacing of fp16 subnormals (2^-24): absolute slack for outputs that round into that range.
constexpr double kHalfSubnormal = 1.0 / 16777216;
// Error bound of an fp32 sum of n terms, relative to Σ|terms|: each rounding is at most 2^-24 of a
// partial sum, the roundings are independent and grow like sqrt(n); the factor 8 leaves room for
// any summation order (sequential, blocked, tree) and for products rounded before they are added.
inline double fp32_sum_error(int64_t n) { return 8.0 * std::sqrt(double(n)) / 16777216.0; }

// tol[i] = abs + rel * |want[i]|.
std::vector<double> bound(const std::vector<double>& want, double abs, double rel);

// How far from round_half(exact[i]) an fp16 value may land when it was rounded from an fp32 result
// within rel_err of exact[i] (relative): 0 unless that band straddles a rounding midpoint, else the
// distance to the neighbouring fp16 value.
std::vector<double> half_rounding_slack(const std::vector<double>& exact, double rel_err);

// Passes when |got[i] - want[i]| <= tol[i] for every i; otherwise reports how many values failed,
// the largest absolute and relative errors, and the worst value (largest error / tolerance).
// With the environment variable TLLM_OPS_REPORT=1 passing comparisons print the same figures.
::testing::AssertionResult all_close(const std::vector<float>& got, const std::vector<double>& want,
                                     const std::vector<double>& tol);

// Bit-for-bit equality (floats compare with ==, so -0 equals +0); reports the first mismatch.
template <class T>
::testing::AssertionResult all_equal(const std::vector<T>& got, const std::vector<T>& want) {
  if (got.size() != want.size())
    return ::testing::AssertionFailure() << "size " << got.size() << " != " << want.size();
  size_t bad = 0, first = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (!(got[i] == want[i])) {
      if (bad++ == 0) first = i;
    }
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << bad << " of " << got.size() << " values differ; first at ["
                                       << first << "]: got " << +got[first] << ", want " << +want[first];
}

// ---- the fixture ---------------------------------------------------------------------------------

// Names of every backend the suite knows; each test runs once per name.
inline const std::vector<std::string>& backend_params() {
  static const std::vector<std::string> names = {"cpu", "cuda"};
  return names;
}

class OpsTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override;

  Backend& be() { return *backend_; }

  template <class T>
  Buffer upload(const std::vector<T>& host) {
    Buffer b = backend_->alloc(host.size() * sizeof(T));
    if (!host.empty()) backend_->upload(b.data(), host.data(), host.size() * sizeof(T));
    return b;
  }
  template <class T>
  Buffer alloc(size_t count) {
    return backend_->alloc(count * sizeof(T));
  }
  // Reads `count` values of T from backend memory at `src` (waits for the ops before it).
  template <class T>
  std::vector<T> download(const void* src, size_t count) {
    std::vector<T> host(count);
    if (count) backend_->download(host.data(), src, count * sizeof(T));
    return host;
  }
  template <class T>
  std::vector<T> download(const Buffer& b) {
    return download<T>(b.data(), b.bytes() / sizeof(T));
  }

  std::unique_ptr<Backend> backend_;
};

std::string backend_param_name(const ::testing::TestParamInfo<std::string>& info);

}  // namespace tllm::test

// Instantiates fixture `Fixture` (a class derived from tllm::test::OpsTest) once per backend.
#define TLLM_OPS_INSTANTIATE(Fixture)                                                             \
  INSTANTIATE_TEST_SUITE_P(Ops, Fixture, ::testing::ValuesIn(::tllm::test::backend_params()), \
                           ::tllm::test::backend_param_name)
