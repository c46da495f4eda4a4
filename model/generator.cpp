#include "model/generator.h"

#include <algorithm>
#include <deque>

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
  // Plain greedy decoding runs ahead of the host: the device feeds each step's argmax to the next
  // (Model::decode_run), so steps are queued in runs of up to run_max before the host has
  // read their tokens, and the host keeps the next run queued while it reads one, so the device
  // never waits for the host. A step is run only for a token another token can follow (the g-th
  // generated token, g < max_tokens, at a position inside the context). When generation stops
  // early (an end token, a callback), the steps that ran ahead leave the session as if they had not:
  // their cache rows lie past n_past() and are rewritten by the next call.
  const bool ahead = sampler_.params().is_plain_greedy();
  // Runs pay off where a backend replays recorded steps; elsewhere a token reaches the host as
  // soon as its step is done (CPU chat streams token by token).
  const int run_max = model_.backend().supports(Op::StepCapture) ? Model::kDecodeRunMax : 1;
  struct Run {
    uint64_t ticket;
    int n;
  };
  std::deque<Run> in_flight;     // ahead: queued runs, oldest first
  std::deque<int32_t> ready;     // ahead: tokens downloaded and not yet taken, in order
  int launched = 0;              // ahead: steps queued so far (step g runs generated token g)
  int next_pos = n_past();       // ahead: position of the next step to queue
  auto queue_run = [&] {
    const int n = std::min({run_max, opt.max_tokens - 1 - launched, n_ctx - next_pos});
    if (n <= 0) return;
    if (launched == 0) {
      model_.decode(tok, next_pos);  // the first step takes tok from the host
      in_flight.push_back({model_.queue_run_tokens(1), 1});
      launched = 1;
      next_pos += 1;
      return;
    }
    model_.decode_run(next_pos, n);
    in_flight.push_back({model_.queue_run_tokens(n), n});
    launched += n;
    next_pos += n;
  };
  auto take_run = [&] {
    const Run r = in_flight.front();
    in_flight.pop_front();
    int32_t t[Model::kDecodeRunMax];
    model_.take_run_tokens(r.ticket, r.n, t);
    ready.insert(ready.end(), t, t + r.n);
  };
  auto ts = std::chrono::steady_clock::now();
  if (ahead) {
    queue_run();
    queue_run();
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
      while (!in_flight.empty()) take_run();
      return res;
    }
    if (ahead) {
      // tok's step is queued (or done): take its successor, queuing another run before waiting.
      history_.push_back(tok);
      if (ready.empty()) {
        if (in_flight.empty()) queue_run();
        if (in_flight.empty()) throw ModelError("generate: no decode step is queued for the next token");
        queue_run();
        take_run();
      }
      tok = ready.front();
      ready.pop_front();
    } else {
      model_.decode(tok, n_past());
      history_.push_back(tok);
      tok = pick();
    }
    res.token_ms.push_back(ms_since(ts));
    ts = std::chrono::steady_clock::now();
  }
  while (!in_flight.empty()) take_run();  // runs ahead of the stop: their tickets are closed
  pending_ = tok;
  return res;
}

}  // namespace tllm
