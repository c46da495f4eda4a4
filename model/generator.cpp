#include "model/generator.h"

#include <algorithm>
#include <optional>

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
double steady_ms() {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
}  // namespace

GreedyRuns::GreedyRuns(Model& model, int32_t first, int pos, int steps)
    : model_(model),
      first_(first),
      run_max_(model.backend().supports(Op::StepCapture) ? Model::kDecodeRunMax : 1),
      limit_(steps),
      next_pos_(pos) {
  queue();
  queue();
}

void GreedyRuns::queue() {
  const int n = std::min(run_max_, limit_ - launched_);
  if (n <= 0) return;
  if (launched_ == 0) {
    model_.decode(first_, next_pos_);  // the first step takes its token from the host
    in_flight_.push_back({model_.queue_run_tokens(1), 1});
    launched_ = 1;
    next_pos_ += 1;
    return;
  }
  model_.decode_run(next_pos_, n);
  in_flight_.push_back({model_.queue_run_tokens(n), n});
  launched_ += n;
  next_pos_ += n;
}

void GreedyRuns::take() {
  const Run r = in_flight_.front();
  in_flight_.pop_front();
  int32_t t[Model::kDecodeRunMax];
  model_.take_run_tokens(r.ticket, r.n, t);
  ready_.insert(ready_.end(), t, t + r.n);
}

int32_t GreedyRuns::next() {
  if (ready_.empty()) {
    if (in_flight_.empty()) queue();
    if (in_flight_.empty()) throw ModelError("greedy decoding: no step is queued for the next token");
    queue();  // keeps the device busy while the host waits
    take();
  }
  const int32_t t = ready_.front();
  ready_.pop_front();
  return t;
}

void GreedyRuns::close() {
  while (!in_flight_.empty()) take();
  ready_.clear();
}

Session::Session(Model& model, const SamplerParams& sp, std::function<bool(int32_t)> is_end)
    : model_(model), sampler_(sp), is_end_(std::move(is_end)) {}

void Session::reset() {
  history_.clear();
  pending_ = -1;
}

size_t Session::reuse_prefix(const std::vector<int32_t>& ids) {
  const size_t limit = ids.empty() ? 0 : std::min(history_.size(), ids.size() - 1);
  size_t kept = 0;
  while (kept < limit && history_[kept] == ids[kept]) ++kept;
  history_.resize(kept);
  pending_ = -1;
  return kept;
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
  const std::function<double()> now = opt.clock_ms ? opt.clock_ms : steady_ms;
  const double t0 = now();
  model_.prefill(prompt.data(), int(prompt.size()), n_past());
  model_.backend().synchronize();
  res.prefill_ms = now() - t0;
  res.n_prompt = int(prompt.size());
  history_.insert(history_.end(), prompt.begin(), prompt.end());
  pending_ = -1;

  if (opt.max_tokens <= 0) return res;
  int32_t tok = pick();
  // The decode clock starts where TTFT's stops, before any step is queued: GreedyRuns queues its
  // first runs in its constructor, and launched one by one (no step capture) they take the host
  // milliseconds, while the device already runs them.
  double ts = now();
  res.ttft_ms = ts - t0;
  // Plain greedy decoding runs ahead of the host (GreedyRuns). A step is run only for a token
  // another token can follow (the g-th generated token, g < max_tokens, at a position inside the
  // context).
  std::optional<GreedyRuns> runs;
  if (sampler_.params().is_plain_greedy()) {
    runs.emplace(model_, tok, n_past(), std::min(opt.max_tokens - 1, n_ctx - n_past()));
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
      if (runs) runs->close();
      return res;
    }
    if (runs) {
      history_.push_back(tok);
      tok = runs->next();
    } else {
      model_.decode(tok, n_past());
      history_.push_back(tok);
      tok = pick();
    }
    const double t = now();
    res.token_ms.push_back(t - ts);
    ts = t;
  }
  if (runs) runs->close();
  pending_ = tok;
  return res;
}

}  // namespace tllm
