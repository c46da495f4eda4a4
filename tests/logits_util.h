// Logits helpers shared by the model and hardening suites.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "model/model.h"

namespace tllm {

// The logits of every position of a prefill of `toks` from position 0: (toks.size(), n_vocab).
inline std::vector<float> all_logits(Model& m, const std::vector<int32_t>& toks) {
  const int V = m.config().n_vocab;
  std::vector<float> out(toks.size() * size_t(V));
  m.prefill(toks.data(), int(toks.size()), 0, [&](int row, const float* l, int n) {
    std::copy(l, l + n, out.begin() + long(row) * V);
  });
  return out;
}

// The largest |a[i] - b[i]| (a and b of one size).
inline float max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  float d = 0;
  for (size_t i = 0; i < a.size(); ++i) d = std::max(d, std::fabs(a[i] - b[i]));
  return d;
}

}  // namespace tllm
