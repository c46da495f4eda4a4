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
  // Plain greedy decoding runs one step ahead of the host: the step for a token is queued before
  // the host has read that token (the device feeds each step's argmax to the next, decode_next),
  // so the device never waits for the host between steps. The step after the last token is run
  // only when another token can follow; when generation stops at an end token or a callback, that
  // token's step has already run ahead, which leaves the session as if it had not: its cache row
  // is rewritten when the pending token is run by the next call.
  const bool ahead = sampler_.params().is_plain_greedy();
  uint64_t ticket = 0;  // ahead: the queued download of the step after tok, when `queued`
  bool queued = false;
  // Whether the g-th generated token is run through the model (another token follows it) at pos.
  auto runs = [&](size_t g, int pos) { return int(g) < opt.max_tokens && pos < n_ctx; };
  auto ts = std::chrono::steady_clock::now();
  if (ahead && runs(1, n_past())) {
    model_.decode(tok, n_past());
    ticket = model_.queue_argmax();
    queued = true;
  }
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
      if (queued) model_.take_argmax(ticket);
      return res;
    }
    if (ahead && queued) {
      // tok's step is queued: queue the one after it, then wait for tok's successor.
      history_.push_back(tok);
      const bool next = runs(res.tokens.size() + 1, n_past());
      uint64_t next_ticket = 0;
      if (next) {
        model_.decode_next(n_past());
        next_ticket = model_.queue_argmax();
      }
      tok = model_.take_argmax(ticket);
      ticket = next_ticket;
      queued = next;
    } else {
      model_.decode(tok, n_past());
      history_.push_back(tok);
      tok = pick();
    }
    res.token_ms.push_back(ms_since(ts));
    ts = std::chrono::steady_clock::now();
  }
  if (queued) model_.take_argmax(ticket);  // the step ahead ran for nothing; its ticket is closed
  pending_ = tok;
  return res;
}

}  // namespace tllm
