#include "model/generator.h"

namespace tllm {

const char* stop_reason_name(StopReason r) {
  switch (r) {
    case StopReason::EndToken: return "end token";
    case StopReason::MaxTokens: return "max tokens";
    case StopReason::ContextFull: return "context full";
    case StopReason::Callback: return "stopped";
  }
  return "?";
}

namespace {
double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}
}  // namespace

Session::Session(Model& model, const SamplerParams& sp, std::function<bool(int32_t)> is_end)
    : model_(model), sampler_(sp), is_end_(std::move(is_end)) {}

void Session::reset() {
  history_.clear();
  pending_ = -1;
}

int32_t Session::pick() {
  if (sampler_.params().is_plain_greedy()) return model_.argmax();
  const int n_vocab = model_.config().n_vocab;
  logits_.resize(size_t(n_vocab));
  model_.download_logits(logits_.data());
  return sampler_.sample(logits_.data(), n_vocab, history_);
}

GenerationResult Session::generate(const std::vector<int32_t>& new_tokens, const GenerateOptions& opt,
                                   const std::function<bool(int32_t)>& on_token) {
  GenerationResult res;
  const int n_ctx = model_.n_ctx();
  if (new_tokens.empty()) throw ModelError("the prompt has no tokens");
  std::vector<int32_t> prompt;
  if (pending_ >= 0) prompt.push_back(pending_);
  prompt.insert(prompt.end(), new_tokens.begin(), new_tokens.end());
  if (n_past() + int64_t(prompt.size()) > n_ctx) {
    throw ModelError("the prompt (" + std::to_string(prompt.size()) + " tokens after " + std::to_string(n_past()) +
                     " in the context) does not fit the context of " + std::to_string(n_ctx) + " tokens");
  }
  const auto t0 = std::chrono::steady_clock::now();
  model_.prefill(prompt.data(), int(prompt.size()), n_past());
  model_.backend().synchronize();
  res.prefill_ms = ms_since(t0);
  res.n_prompt = int(prompt.size());
  history_.insert(history_.end(), prompt.begin(), prompt.end());
  pending_ = -1;

  if (opt.max_tokens <= 0) return res;
  int32_t tok = pick();
  res.ttft_ms = ms_since(t0);
  for (;;) {
    res.tokens.push_back(tok);
    if (on_token && !on_token(tok)) {
      res.stop = StopReason::Callback;
      break;
    }
    if (opt.stop_at_end_token && is_end_ && is_end_(tok)) {
      res.stop = StopReason::EndToken;
      break;
    }
    if (int(res.tokens.size()) >= opt.max_tokens) {
      res.stop = StopReason::MaxTokens;
      break;
    }
    if (n_past() >= n_ctx) {
      res.stop = StopReason::ContextFull;
      return res;
    }
    const auto ts = std::chrono::steady_clock::now();
    model_.decode(tok, n_past());
    history_.push_back(tok);
    tok = pick();
    res.token_ms.push_back(ms_since(ts));
  }
  pending_ = tok;
  return res;
}

}  // namespace tllm
