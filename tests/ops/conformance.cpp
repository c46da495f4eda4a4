// Shared pieces of the op conformance suite (see conformance.h).
#include "ops/conformance.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <sstream>

namespace tllm::test {

uint64_t Rng::next() {
  uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

double Rng::uniform() { return double(next() >> 11) * (1.0 / 9007199254740992.0); }  // 53 bits

float Rng::uniform(float lo, float hi) {
  const float v = float(lo + (double(hi) - lo) * uniform());
  return v < hi ? v : lo;  // the float rounding of a value just below hi can reach hi
}

int64_t Rng::below(int64_t n) { return int64_t(next() % uint64_t(n)); }

int64_t Rng::between(int64_t lo, int64_t hi) { return lo + below(hi - lo + 1); }

std::vector<float> random_floats(Rng& rng, size_t n, float lo, float hi) {
  std::vector<float> v(n);
  for (auto& x : v) x = rng.uniform(lo, hi);
  return v;
}

std::vector<half_t> random_halves(Rng& rng, size_t n, float lo, float hi) {
  std::vector<half_t> v(n);
  for (auto& x : v) x = float_to_half(rng.uniform(lo, hi));
  return v;
}

std::vector<float> to_float(const std::vector<half_t>& x) {
  std::vector<float> out(x.size());
  for (size_t i = 0; i < x.size(); ++i) out[i] = half_to_float(x[i]);
  return out;
}

std::vector<float> round_half(const std::vector<double>& x) {
  std::vector<float> out(x.size());
  for (size_t i = 0; i < x.size(); ++i) out[i] = round_to_half(float(x[i]));
  return out;
}

std::vector<float> to_float(const std::vector<double>& x) { return std::vector<float>(x.begin(), x.end()); }

HostWeights random_w8(Rng& rng, int64_t n, int64_t k, float scale_lo, float scale_hi) {
  HostWeights m;
  m.type = WeightType::W8;
  m.n = n;
  m.k = k;
  m.q.resize(size_t(n * k));
  for (auto& v : m.q) v = int8_t(rng.between(-127, 127));
  m.scales = random_halves(rng, size_t(n * (k / kW8Group)), scale_lo, scale_hi);
  return m;
}

HostWeights random_f16(Rng& rng, int64_t n, int64_t k, float amp) {
  HostWeights m;
  m.type = WeightType::F16;
  m.n = n;
  m.k = k;
  m.f16 = random_halves(rng, size_t(n * k), -amp, amp);
  return m;
}

HostWeights random_f16_int8_form(Rng& rng, int64_t n, int64_t k, float scale_lo, float scale_hi) {
  HostWeights m = random_w8(rng, n, k, scale_lo, scale_hi);
  m.widen_to_f16();
  return m;
}

HostWeights integer_w8(Rng& rng, int64_t n, int64_t k, int qmax) {
  HostWeights m;
  m.type = WeightType::W8;
  m.n = n;
  m.k = k;
  m.q.resize(size_t(n * k));
  for (auto& v : m.q) v = int8_t(rng.between(-qmax, qmax));
  m.scales.assign(size_t(n * (k / kW8Group)), float_to_half(1.0f));
  return m;
}

HostWeights integer_f16(Rng& rng, int64_t n, int64_t k, int qmax) {
  HostWeights m;
  m.type = WeightType::F16;
  m.n = n;
  m.k = k;
  m.f16.resize(size_t(n * k));
  for (auto& v : m.f16) v = float_to_half(float(rng.between(-qmax, qmax)));
  return m;
}

std::vector<double> bound(const std::vector<double>& want, double abs, double rel) {
  std::vector<double> tol(want.size());
  for (size_t i = 0; i < want.size(); ++i) tol[i] = abs + rel * std::fabs(want[i]);
  return tol;
}

std::vector<double> half_rounding_slack(const std::vector<double>& exact, double rel_err) {
  std::vector<double> slack(exact.size());
  for (size_t i = 0; i < exact.size(); ++i) {
    const double r = round_to_half(float(exact[i]));
    const double lo = round_to_half(float(exact[i] * (1 - rel_err)));
    const double hi = round_to_half(float(exact[i] * (1 + rel_err)));
    slack[i] = std::max(std::fabs(lo - r), std::fabs(hi - r));
  }
  return slack;
}

::testing::AssertionResult all_close(const std::vector<float>& got, const std::vector<double>& want,
                                     const std::vector<double>& tol) {
  if (got.size() != want.size() || tol.size() != want.size()) {
    return ::testing::AssertionFailure() << "sizes differ: got " << got.size() << ", want "
                                         << want.size() << ", tolerances " << tol.size();
  }
  if (got.empty()) return ::testing::AssertionSuccess();
  size_t bad = 0, worst = 0;
  double max_abs = 0, max_rel = 0, worst_ratio = -1;
  for (size_t i = 0; i < got.size(); ++i) {
    const double err = std::fabs(double(got[i]) - want[i]);
    const bool ok = err <= tol[i];  // false for NaN
    if (!ok) ++bad;
    if (std::isnan(err)) {
      if (worst_ratio != INFINITY) worst = i;
      worst_ratio = INFINITY;
      continue;
    }
    max_abs = std::max(max_abs, err);
    if (want[i] != 0) max_rel = std::max(max_rel, err / std::fabs(want[i]));
    const double ratio = tol[i] > 0 ? err / tol[i] : (err > 0 ? INFINITY : 0);
    if (ratio > worst_ratio) {
      worst_ratio = ratio;
      worst = i;
    }
  }
  std::ostringstream report;
  report.precision(9);
  report << "max abs err " << max_abs << ", max rel err " << max_rel << "; worst [" << worst
         << "]: got " << got[worst] << ", want " << want[worst] << ", tolerance " << tol[worst];
  if (bad == 0) {
    // TLLM_OPS_REPORT=1 prints the errors of passing comparisons too, to see how much room is left.
    if (const char* r = std::getenv("TLLM_OPS_REPORT"); r && *r == '1')
      std::printf("    %zu values within tolerance; %s\n", got.size(), report.str().c_str());
    return ::testing::AssertionSuccess();
  }
  return ::testing::AssertionFailure() << bad << " of " << got.size() << " values outside tolerance; "
                                       << report.str();
}

void OpsTest::SetUp() {
  if (!backend_available(GetParam())) {
    GTEST_SKIP() << "backend '" << GetParam() << "' is not available on this machine";
  }
  backend_ = create_backend(GetParam());
}

std::string backend_param_name(const ::testing::TestParamInfo<std::string>& info) { return info.param; }

}  // namespace tllm::test
