// Sampling: each control is checked by the distribution it produces, not just by running.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <vector>

#include "model/sampler.h"

namespace tllm {
namespace {

constexpr int kDraws = 20000;

// Frequencies of each token over kDraws draws from the same logits.
std::vector<double> frequencies(const SamplerParams& p, const std::vector<float>& logits,
                                const std::vector<int32_t>& history = {}) {
  Sampler s(p);
  std::vector<double> f(logits.size(), 0.0);
  std::vector<float> work;
  for (int i = 0; i < kDraws; ++i) {
    work = logits;
    f[size_t(s.sample(work.data(), int(work.size()), history))] += 1.0 / kDraws;
  }
  return f;
}

std::vector<double> softmax(const std::vector<float>& l, double temp) {
  std::vector<double> p(l.size());
  double mx = l[0], sum = 0;
  for (float v : l) mx = std::max(mx, double(v));
  for (size_t i = 0; i < l.size(); ++i) sum += p[i] = std::exp((l[i] - mx) / temp);
  for (double& v : p) v /= sum;
  return p;
}

// Five standard errors of a binomial frequency: a correct sampler fails this about once in 10^6.
double tolerance(double p) { return 5.0 * std::sqrt(std::max(p * (1 - p), 1e-4) / kDraws); }

const std::vector<float> kLogits = {2.0f, 1.0f, 0.5f, 0.0f, -1.0f, -3.0f};

TEST(Sampler, GreedyTakesFirstMaximum) {
  SamplerParams p;
  Sampler s(p);
  std::vector<float> l = {0.1f, 3.0f, 3.0f, -2.0f};
  EXPECT_EQ(s.sample(l.data(), 4, {}), 1);
}

TEST(Sampler, TemperatureMatchesSoftmax) {
  for (float temp : {0.5f, 1.0f, 2.0f}) {
    SamplerParams p;
    p.temperature = temp;
    p.seed = 7;
    const std::vector<double> f = frequencies(p, kLogits);
    const std::vector<double> want = softmax(kLogits, temp);
    for (size_t i = 0; i < want.size(); ++i) {
      EXPECT_NEAR(f[i], want[i], tolerance(want[i])) << "token " << i << " at temperature " << temp;
    }
  }
}

TEST(Sampler, TinyTemperatureIsGreedy) {
  // logit / T overflows float at these temperatures; the sampler must still pick the maximum, for
  // every seed, with and without the other controls.
  const std::vector<float> logits = {10.0f, 30.0f, 20.0f, -5.0f};
  for (float temp : {1e-38f, 1e-45f, 1e-30f}) {
    for (int top_k : {0, 2}) {
      SamplerParams p;
      p.temperature = temp;
      p.top_k = top_k;
      p.top_p = 0.9f;
      p.min_p = 0.05f;
      for (uint64_t seed = 0; seed < 50; ++seed) {
        p.seed = seed;
        Sampler s(p);
        std::vector<float> work = logits;
        EXPECT_EQ(s.sample(work.data(), int(work.size()), {}), 1) << "temperature " << temp << ", seed " << seed;
      }
    }
  }
}

TEST(Sampler, TopKKeepsOnlyKAndRenormalises) {
  SamplerParams p;
  p.temperature = 1.0f;
  p.top_k = 2;
  const std::vector<double> f = frequencies(p, kLogits);
  const std::vector<double> want = softmax({kLogits[0], kLogits[1]}, 1.0);
  EXPECT_NEAR(f[0], want[0], tolerance(want[0]));
  EXPECT_NEAR(f[1], want[1], tolerance(want[1]));
  for (size_t i = 2; i < f.size(); ++i) EXPECT_EQ(f[i], 0.0) << "token " << i;
}

TEST(Sampler, TopPKeepsTheSmallestNucleus) {
  // Probabilities at temperature 1: 0.563, 0.207, 0.126, 0.076, 0.028, 0.004. With top_p 0.8 the
  // nucleus is the first three (0.563 + 0.207 < 0.8 <= + 0.126).
  SamplerParams p;
  p.temperature = 1.0f;
  p.top_p = 0.8f;
  const std::vector<double> f = frequencies(p, kLogits);
  const std::vector<double> want = softmax({kLogits[0], kLogits[1], kLogits[2]}, 1.0);
  for (size_t i = 0; i < 3; ++i) EXPECT_NEAR(f[i], want[i], tolerance(want[i])) << "token " << i;
  for (size_t i = 3; i < f.size(); ++i) EXPECT_EQ(f[i], 0.0) << "token " << i;
}

TEST(Sampler, MinPDropsUnlikelyTokens) {
  // p_max = 0.563; min_p 0.2 keeps tokens with p >= 0.113: the first three.
  SamplerParams p;
  p.temperature = 1.0f;
  p.min_p = 0.2f;
  const std::vector<double> f = frequencies(p, kLogits);
  const std::vector<double> want = softmax({kLogits[0], kLogits[1], kLogits[2]}, 1.0);
  for (size_t i = 0; i < 3; ++i) EXPECT_NEAR(f[i], want[i], tolerance(want[i])) << "token " << i;
  for (size_t i = 3; i < f.size(); ++i) EXPECT_EQ(f[i], 0.0) << "token " << i;
}

TEST(Sampler, RepetitionPenaltyLowersSeenTokens) {
  SamplerParams p;
  p.temperature = 1.0f;
  p.repeat_penalty = 2.0f;
  const std::vector<double> f = frequencies(p, kLogits, /*history=*/{0});
  // Token 0's logit 2.0 becomes 1.0: tokens 0 and 1 are now equally likely.
  std::vector<float> penalised = kLogits;
  penalised[0] = 1.0f;
  const std::vector<double> want = softmax(penalised, 1.0);
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(f[i], want[i], tolerance(want[i])) << "token " << i;

  // Greedy with a penalty: a negative logit grows more negative.
  SamplerParams g;
  g.repeat_penalty = 4.0f;
  Sampler s(g);
  std::vector<float> l = {1.0f, 0.9f};
  EXPECT_EQ(s.sample(l.data(), 2, {0}), 1);
  EXPECT_FALSE(g.is_plain_greedy());
}

TEST(Sampler, SameSeedSameTokensDifferentSeedDifferent) {
  SamplerParams p;
  p.temperature = 1.0f;
  p.seed = 42;
  auto run = [&](uint64_t seed) {
    p.seed = seed;
    Sampler s(p);
    std::vector<int32_t> out;
    for (int i = 0; i < 64; ++i) {
      std::vector<float> l = kLogits;
      out.push_back(s.sample(l.data(), int(l.size()), {}));
    }
    return out;
  };
  EXPECT_EQ(run(42), run(42));
  EXPECT_NE(run(42), run(43));
}

TEST(Sampler, ValidateRejectsNonsense) {
  SamplerParams p;
  EXPECT_EQ(p.validate(), "");
  p.temperature = -1;
  EXPECT_NE(p.validate(), "");
  p = {};
  p.top_p = 0;
  EXPECT_NE(p.validate(), "");
  p = {};
  p.min_p = 1.5f;
  EXPECT_NE(p.validate(), "");
  p = {};
  p.top_k = -3;
  EXPECT_NE(p.validate(), "");
  p = {};
  p.repeat_penalty = NAN;
  EXPECT_NE(p.validate(), "");
}

TEST(Rng, UniformIsUniform) {
  Rng r(1);
  std::vector<int> bins(10, 0);
  const int n = 100000;
  for (int i = 0; i < n; ++i) {
    const double u = r.uniform();
    ASSERT_GE(u, 0.0);
    ASSERT_LT(u, 1.0);
    ++bins[size_t(u * 10)];
  }
  for (int b : bins) EXPECT_NEAR(b, n / 10, 5 * std::sqrt(n * 0.1 * 0.9));
}

}  // namespace
}  // namespace tllm
