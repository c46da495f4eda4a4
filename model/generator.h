// A generation session: a model, its KV cache position and the tokens it holds, and a sampler.
//
// Session::generate continues the context: it prefills the new tokens after those already in the
// cache (so a chat's history is never recomputed), then decodes until an end token, max_tokens, or
// a full context. Timing is taken with the backend synchronised at each point, so the figures are
// what a user waits for.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
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
  std::vector<double> token_ms;   // time to each next token after the first (decode + sample); they add up
                                  // to the time from the first token id on the host to the last
};

struct GenerateOptions {
  int max_tokens = 128;
  bool stop_at_end_token = true;  // benchmarks turn this off to always generate max_tokens
  // The clock the figures are read from, in ms; std::chrono::steady_clock when empty. Tests pass
  // one that counts decode steps (Model::decode_steps_queued) to check what each figure covers.
  std::function<double()> clock_ms;
};

// Greedy decode steps run ahead of the host, as Session::generate and the profiler run them: the
// first step takes `first` from the host at `pos`, the following ones take the previous step's
// argmax on the device (Model::decode_run), in runs of up to Model::kDecodeRunMax where the backend
// records steps (single steps elsewhere, so that tokens reach the host one by one). The next run is
// queued before the host waits for one, so the device never waits for the host. At most `steps`
// steps are run.
class GreedyRuns {
 public:
  GreedyRuns(Model& model, int32_t first, int pos, int steps);
  // The token that follows the last one returned (`first` on the first call). Throws ModelError
  // when it would take more than `steps` steps.
  int32_t next();
  // Waits for the runs still queued and drops their tokens (the steps ran ahead of a stop; their
  // cache rows lie past the session's position and are rewritten later).
  void close();

 private:
  struct Run {
    uint64_t ticket;
    int n;
  };
  void queue();
  void take();

  Model& model_;
  int32_t first_;
  int run_max_;
  int limit_;               // steps that may be run
  int launched_ = 0;        // steps queued so far
  int next_pos_;            // position of the next step to queue
  std::deque<Run> in_flight_;  // queued runs, oldest first
  std::deque<int32_t> ready_;  // tokens downloaded and not yet returned, in order
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
  // Prepares the context for a prompt that starts the whole conversation again (`ids`, BOS and
  // all): keeps the longest run of the context's tokens that `ids` opens with, drops the rest
  // (and the pending token) and returns the number kept. The caller passes ids[kept...] to
  // generate(), so only what changed runs through the model. At least the last token of `ids`
  // is left to run, as its logits choose the next token.
  size_t reuse_prefix(const std::vector<int32_t>& ids);
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
