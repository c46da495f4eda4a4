// Choosing the next token from logits: greedy, temperature, top-k, top-p, min-p, repetition penalty.
//
// The steps run in this order: repetition penalty over the last `repeat_last_n` tokens, then (if
// temperature > 0) division by the temperature, top-k, softmax, top-p (nucleus), min-p, and a draw
// from what remains. Temperature 0 is greedy (first index of the largest logit). Draws come from
// a seeded generator of the project's own, so the same seed gives the same tokens on any platform.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tllm {

struct SamplerParams {
  float temperature = 0.0f;    // 0: greedy
  int top_k = 0;               // 0: off
  float top_p = 1.0f;          // 1: off
  float min_p = 0.0f;          // 0: off; keep tokens with p >= min_p * p_max
  float repeat_penalty = 1.0f; // 1: off; > 1 discourages tokens seen in the last repeat_last_n
  int repeat_last_n = 64;
  uint64_t seed = 0;
  // Returns an empty string when the parameters are valid, otherwise a one-line reason.
  std::string validate() const;
  // True when the choice is the argmax of the raw logits (a backend can compute it on device).
  bool is_plain_greedy() const { return temperature <= 0.0f && repeat_penalty == 1.0f; }
};

// A small, fast, portable generator (xoshiro256**), seeded through splitmix64.
class Rng {
 public:
  explicit Rng(uint64_t seed);
  uint64_t next();
  double uniform();  // [0, 1)
 private:
  uint64_t s_[4];
};

class Sampler {
 public:
  explicit Sampler(const SamplerParams& p);
  const SamplerParams& params() const { return p_; }
  // Picks a token from logits (n_vocab values, modified in place). `history` is every token of the
  // context so far (prompt and generated), for the repetition penalty.
  int32_t sample(float* logits, int n_vocab, const std::vector<int32_t>& history);
  void reseed(uint64_t seed) { rng_ = Rng(seed); }

 private:
  SamplerParams p_;
  Rng rng_;
  std::vector<std::pair<float, int32_t>> cand_;  // scratch, reused across calls
};

}  // namespace tllm
