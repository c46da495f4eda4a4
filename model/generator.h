// A generation session: a model, its KV cache position and the tokens it holds, and a sampler.
//
// Session::generate continues the context: it prefills the new tokens after those already in the
// cache (so a chat's history is never recomputed), then decodes until an end token, max_tokens, or
// a full context. Timing is taken with the backend synchronised at each point, so the figures are
// what a user waits for.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "model/model.h"
#include "model/sampler.h"

namespace tllm {

enum class StopReason { EndToken, MaxTokens, ContextFull, Callback };
const char* stop_reason_name(StopReason r);

struct GenerationResult {
  std::vector<int32_t> tokens;    // generated token ids (an end token included when it stopped there)
  StopReason stop = StopReason::MaxTokens;
  int n_prompt = 0;               // tokens prefilled by this call
  double prefill_ms = 0;          // prefill of the new tokens, logits ready
  double ttft_ms = 0;             // start of the call to the first generated token id on the host
  std::vector<double> token_ms;   // time of each decode step after the first token (decode + sample)
};

struct GenerateOptions {
  int max_tokens = 128;
  bool stop_at_end_token = true;  // benchmarks turn this off to always generate max_tokens
};

class Session {
 public:
  // `is_end` says whether a token ends generation (the tokenizer's end-of-generation set).
  Session(Model& model, const SamplerParams& sp, std::function<bool(int32_t)> is_end);

  // Appends `prompt` to the context and generates. `on_token(id)` is called as each token is
  // chosen; returning false stops generation (StopReason::Callback). Throws ModelError when the
  // prompt alone does not fit the context.
  GenerationResult generate(const std::vector<int32_t>& prompt, const GenerateOptions& opt,
                            const std::function<bool(int32_t)>& on_token = {});

  // The last generated token is chosen but not yet run through the model; the next generate()
  // runs it first, so a conversation continues exactly where it stopped.
  int32_t pending() const { return pending_; }
  // Empties the context (the cache rows are simply overwritten later).
  void reset();
  int n_past() const { return int(history_.size()); }
  const std::vector<int32_t>& history() const { return history_; }
  Model& model() { return model_; }
  Sampler& sampler() { return sampler_; }

 private:
  int32_t pick();

  Model& model_;
  Sampler sampler_;
  std::function<bool(int32_t)> is_end_;
  std::vector<int32_t> history_;   // tokens whose K/V are in the cache, in order
  std::vector<float> logits_;      // (n_vocab) host copy, only for non-greedy sampling
  int32_t pending_ = -1;           // generated, not yet in the cache
};

}  // namespace tllm
