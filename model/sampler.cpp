#include "model/sampler.h"

#include <algorithm>
#include <cmath>
#include <unordered_set>

namespace tllm {

std::string SamplerParams::validate() const {
  if (!(temperature >= 0.0f) || !std::isfinite(temperature)) return "--temp must be a finite number >= 0";
  if (top_k < 0) return "--top-k must be >= 0";
  if (!(top_p > 0.0f && top_p <= 1.0f)) return "--top-p must be in (0, 1]";
  if (!(min_p >= 0.0f && min_p < 1.0f)) return "--min-p must be in [0, 1)";
  if (!(repeat_penalty > 0.0f) || !std::isfinite(repeat_penalty)) return "--repeat-penalty must be > 0";
  if (repeat_last_n < 0) return "--repeat-last-n must be >= 0";
  return "";
}

namespace {
uint64_t splitmix64(uint64_t& x) {
  uint64_t z = (x += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
}  // namespace

Rng::Rng(uint64_t seed) {
  for (uint64_t& s : s_) s = splitmix64(seed);
}

uint64_t Rng::next() {
  const uint64_t result = rotl(s_[1] * 5, 7) * 9;
  const uint64_t t = s_[1] << 17;
  s_[2] ^= s_[0];
  s_[3] ^= s_[1];
  s_[1] ^= s_[2];
  s_[0] ^= s_[3];
  s_[2] ^= t;
  s_[3] = rotl(s_[3], 45);
  return result;
}

double Rng::uniform() { return double(next() >> 11) * (1.0 / 9007199254740992.0); }

Sampler::Sampler(const SamplerParams& p) : p_(p), rng_(p.seed) {}

int32_t Sampler::sample(float* logits, int n_vocab, const std::vector<int32_t>& history) {
  if (p_.repeat_penalty != 1.0f && p_.repeat_last_n > 0) {
    const size_t from = history.size() > size_t(p_.repeat_last_n) ? history.size() - size_t(p_.repeat_last_n) : 0;
    std::unordered_set<int32_t> seen(history.begin() + long(from), history.end());
    for (int32_t t : seen) {
      if (t < 0 || t >= n_vocab) continue;
      // Shrinks a positive logit and grows a negative one: both make the token less likely.
      logits[t] = logits[t] > 0 ? logits[t] / p_.repeat_penalty : logits[t] * p_.repeat_penalty;
    }
  }
  const int32_t argmax = int32_t(std::max_element(logits, logits + n_vocab) - logits);
  if (p_.temperature <= 0.0f) return argmax;

  // Scaled as (logit - max) / T: at most 0, so a tiny temperature gives -inf (probability 0), never
  // +inf and a NaN softmax; the maximum itself stays at 0 (probability 1 before normalising).
  const float max_logit = logits[argmax];
  cand_.resize(size_t(n_vocab));
  for (int i = 0; i < n_vocab; ++i) cand_[size_t(i)] = {(logits[i] - max_logit) / p_.temperature, i};
  auto by_logit = [](const std::pair<float, int32_t>& a, const std::pair<float, int32_t>& b) {
    return a.first > b.first || (a.first == b.first && a.second < b.second);
  };
  size_t n = cand_.size();
  if (p_.top_k > 0 && size_t(p_.top_k) < n) {
    std::partial_sort(cand_.begin(), cand_.begin() + p_.top_k, cand_.end(), by_logit);
    n = size_t(p_.top_k);
  } else {
    std::sort(cand_.begin(), cand_.end(), by_logit);
  }
  // Softmax over the survivors (sorted, so the first is the maximum, scaled to 0).
  double sum = 0;
  for (size_t i = 0; i < n; ++i) {
    cand_[i].first = std::exp(cand_[i].first);
    sum += cand_[i].first;
  }
  // Logits that are not finite (NaN, +inf) leave no distribution to draw from: greedy.
  if (!(sum >= 1.0) || !std::isfinite(sum)) return argmax;
  for (size_t i = 0; i < n; ++i) cand_[i].first = float(cand_[i].first / sum);
  if (p_.top_p < 1.0f) {
    double cum = 0;
    size_t keep = n;
    for (size_t i = 0; i < n; ++i) {
      cum += cand_[i].first;
      if (cum >= p_.top_p) {
        keep = i + 1;
        break;
      }
    }
    n = keep;
  }
  if (p_.min_p > 0.0f) {
    const float floor = p_.min_p * cand_[0].first;
    size_t keep = 1;
    while (keep < n && cand_[keep].first >= floor) ++keep;
    n = keep;
  }
  double total = 0;
  for (size_t i = 0; i < n; ++i) total += cand_[i].first;
  double r = rng_.uniform() * total;
  for (size_t i = 0; i < n; ++i) {
    r -= cand_[i].first;
    if (r < 0) return cand_[i].second;
  }
  return cand_[n - 1].second;
}

}  // namespace tllm
