// The forward pass end to end on small synthetic models (qwen2 and llama layouts), on every backend,
// plus CUDA-against-CPU comparisons on the benchmark model and on SmolLM2 where they are available.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <set>

#include <unistd.h>

#include "logits_util.h"
#include "model/generator.h"
#include "model/model.h"
#include "model/synth.h"
#include "model/tokenizer.h"

namespace tllm {
namespace {

namespace fs = std::filesystem;

bool in_ci() {
  const char* ci = std::getenv("CI");
  return ci && std::string(ci) == "true";
}

// tiny_nemo_test_model's other side: q narrower than n_embd, as Mistral-Nemo's (4096 of 5120), with
// n_embd 320 not a multiple of the 3 heads (1 KV head) of head_dim 64.
SynthConfig narrow_heads_test_model() {
  SynthConfig c = with_heads(tiny_nemo_test_model(), "Synthetic tiny llama with heads narrower than n_embd / n_head", 3,
                             1, 64);
  c.n_embd = 320;
  return c;
}

// tiny_test_model with YaRN rope scaling (factor 4 over an original context of 64 positions).
SynthConfig yarn_test_model() {
  SynthConfig c = tiny_test_model();
  c.name = "Synthetic tiny qwen2 with YaRN";
  c.rope_scaling = "yarn";
  c.rope_factor = 4.0f;
  c.rope_original_context = 64;
  return c;
}

// Synthetic model files are written once per test run into the build tree.
std::string synth_file(const std::string& preset) {
  static std::map<std::string, std::string> made;
  auto it = made.find(preset);
  if (it != made.end()) return it->second;
  const fs::path dir = fs::path(TLLM_BINARY_DIR) / "tests";
  fs::create_directories(dir);
  const fs::path path = dir / ("model-test-" + preset + ".gguf");
  SynthConfig c = preset == "qwen2"          ? tiny_test_model()
                  : preset == "llama"        ? tiny_llama_test_model()
                  : preset == "llama3"       ? tiny_llama3_test_model()
                  : preset == "nemo"         ? tiny_nemo_test_model()
                  : preset == "narrow_heads" ? narrow_heads_test_model()
                  : preset == "wide_heads"   ? tiny_wide_heads_test_model()
                  : preset == "yarn"         ? yarn_test_model()
                                             : qwen25_05b_q4km();
  // Written under a name of this process's own, then renamed into place: the cpu and cuda runs of
  // model_test, which ctest may start at once, both write these files, and neither may read the
  // other's half-written one.
  const fs::path part = path.string() + "." + std::to_string(::getpid()) + ".part";
  write_synth_model(c, part.string(), {});
  fs::rename(part, path);
  return made[preset] = path.string();
}

std::string smollm2_path() { return std::string(TLLM_SOURCE_DIR) + "/models/SmolLM2-135M-Instruct.Q4_1.gguf"; }

// A loaded model on one backend.
struct Loaded {
  std::unique_ptr<GgufFile> file;
  std::unique_ptr<Backend> backend;
  std::unique_ptr<Model> model;
};

Loaded load(const std::string& path, const std::string& backend, int n_ctx = 256, int max_batch = 64,
            bool graphs = true) {
  Loaded l;
  l.file = GgufFile::open(path);
  l.backend = create_backend(backend);
  l.backend->set_step_capture(graphs);
  LoadOptions o;
  o.n_ctx = n_ctx;
  o.max_batch = max_batch;
  l.model = Model::load(*l.file, *l.backend, o);
  return l;
}

std::vector<int32_t> test_prompt(int n, int n_vocab) {
  std::vector<int32_t> t;
  uint32_t s = 12345;
  for (int i = 0; i < n; ++i) {
    s = s * 1664525u + 1013904223u;
    t.push_back(int32_t((s >> 8) % uint32_t(std::min(n_vocab, 256))));
  }
  return t;
}

std::vector<float> last_logits(Model& m) {
  std::vector<float> l(size_t(m.config().n_vocab));
  m.download_logits(l.data());
  return l;
}

class ModelTest : public ::testing::TestWithParam<std::tuple<std::string, std::string>> {
 protected:
  void SetUp() override {
    if (!backend_available(backend())) GTEST_SKIP() << "backend " << backend() << " is not available here";
  }
  std::string arch() const { return std::get<0>(GetParam()); }
  std::string backend() const { return std::get<1>(GetParam()); }
};

TEST_P(ModelTest, LogitsAreFiniteAndVaried) {
  Loaded l = load(synth_file(arch()), backend());
  const auto toks = test_prompt(12, l.model->config().n_vocab);
  l.model->prefill(toks.data(), int(toks.size()), 0);
  const std::vector<float> lg = last_logits(*l.model);
  float lo = lg[0], hi = lg[0];
  for (float v : lg) {
    ASSERT_TRUE(std::isfinite(v));
    lo = std::min(lo, v);
    hi = std::max(hi, v);
  }
  EXPECT_GT(hi - lo, 1e-3f) << "all logits equal: the model computes nothing";
}

// Decoding token n after a prefill of n tokens must give the logits a prefill of n+1 tokens gives.
TEST_P(ModelTest, DecodeContinuesPrefill) {
  Loaded l = load(synth_file(arch()), backend());
  const auto toks = test_prompt(20, l.model->config().n_vocab);
  l.model->prefill(toks.data(), 20, 0);
  const std::vector<float> full = last_logits(*l.model);
  l.model->prefill(toks.data(), 19, 0);
  l.model->decode(toks[19], 19);
  const std::vector<float> stepped = last_logits(*l.model);
  // fp16 activations and a different kernel path (GEMV vs matmul, decode vs prefill attention):
  // differences stay at the level of a few fp16 roundings of O(1) logits.
  EXPECT_LT(max_abs_diff(full, stepped), 2e-2f);
}

// Prefill in chunks of 5 rows equals one prefill of all rows.
TEST_P(ModelTest, ChunkedPrefillMatchesWhole) {
  Loaded whole = load(synth_file(arch()), backend(), 256, 64);
  Loaded chunked = load(synth_file(arch()), backend(), 256, 5);
  const auto toks = test_prompt(23, whole.model->config().n_vocab);
  const std::vector<float> a = all_logits(*whole.model, toks);
  const std::vector<float> b = all_logits(*chunked.model, toks);
  EXPECT_LT(max_abs_diff(a, b), 1e-2f);
}

// A prefill that needs only the last row's logits finishes the last layer for that row alone (GEMV
// path after the QKV projection); its logits are the last row of a prefill that computes them all,
// whole or in chunks (the last chunk of 3 rows, or of 1), and the KV cache it leaves is complete:
// the decode step after it gives the logits of the longer prompt.
TEST_P(ModelTest, LastRowPrefillMatchesAllRows) {
  const std::vector<std::pair<int, int>> cases = {{23, 64}, {23, 5}, {21, 5}, {2, 64}};
  for (const auto& [n, batch] : cases) {
    SCOPED_TRACE("prompt of " + std::to_string(n) + " tokens in chunks of " + std::to_string(batch));
    Loaded l = load(synth_file(arch()), backend(), 256, batch);
    const int V = l.model->config().n_vocab;
    const auto toks = test_prompt(n + 1, V);
    const std::vector<float> every = all_logits(*l.model, std::vector<int32_t>(toks.begin(), toks.end() - 1));
    const std::vector<float> want(every.end() - V, every.end());
    l.model->prefill(toks.data(), n, 0);
    const std::vector<float> got = last_logits(*l.model);
    // The same function through the GEMV kernels instead of the matmul's: fp32 sums in another order.
    EXPECT_LT(max_abs_diff(want, got), 1e-2f);
    EXPECT_EQ(std::max_element(got.begin(), got.end()) - got.begin(), l.model->argmax());

    l.model->decode(toks[size_t(n)], n);
    const std::vector<float> stepped = last_logits(*l.model);
    l.model->prefill(toks.data(), n + 1, 0);
    EXPECT_LT(max_abs_diff(last_logits(*l.model), stepped), 2e-2f);  // as in DecodeContinuesPrefill
  }
}

TEST_P(ModelTest, GreedyIsDeterministicAndDecodeAllocatesNothing) {
  Loaded l = load(synth_file(arch()), backend());
  const auto toks = test_prompt(8, l.model->config().n_vocab);
  Session s(*l.model, SamplerParams{}, {});
  GenerateOptions g;
  g.max_tokens = 24;
  g.stop_at_end_token = false;
  const GenerationResult first = s.generate(toks, g);
  const MemoryInfo before = l.backend->memory_info();
  s.reset();
  const GenerationResult second = s.generate(toks, g);
  const MemoryInfo after = l.backend->memory_info();
  EXPECT_EQ(first.tokens, second.tokens);
  EXPECT_EQ(first.tokens.size(), 24u);
  EXPECT_EQ(before.allocated_bytes, after.allocated_bytes);
  EXPECT_EQ(before.peak_bytes, after.peak_bytes);
}

// Model::footprint, computed from the file's configuration before loading, is what loading
// allocates on the backend, to the byte: the preset's file (its lm_head Q8_0, so in the int8 form)
// and one with F16 matrices (the lm_head as fp16 values), at two cache sizes.
TEST_P(ModelTest, FootprintIsWhatLoadingAllocates) {
  SynthConfig f16 = arch() == "qwen2" ? tiny_test_model() : tiny_llama_test_model();
  f16.mix = SynthMix::Uniform;
  f16.weight_type = GgmlType::F16;
  const std::string f16_path = ::testing::TempDir() + "model_test_footprint_" + arch() + "_" + backend() + ".gguf";
  write_synth_model(f16, f16_path, {});
  for (const std::string& path : {synth_file(arch()), f16_path}) {
    for (const int n_ctx : {256, 40}) {
      SCOPED_TRACE(path + ", n_ctx " + std::to_string(n_ctx));
      auto f = GgufFile::open(path);
      const ModelConfig c = read_model_config(*f);
      EXPECT_EQ(c.lm_head_int8_form, path != f16_path);
      auto be = create_backend(backend());
      LoadOptions o;
      o.n_ctx = n_ctx;
      o.max_batch = 64;
      const ModelFootprint want = Model::footprint(c, o, *be);
      const size_t before = be->memory_info().allocated_bytes;
      auto m = Model::load(*f, *be, o);
      EXPECT_EQ(be->memory_info().allocated_bytes - before, want.total());
      EXPECT_EQ(m->footprint().total(), want.total());
      EXPECT_EQ(m->footprint().weight_bytes, want.weight_bytes);
    }
  }
  std::remove(f16_path.c_str());
}

// Greedy tokens of the plain loop: prefill `prompt` at pos0, then argmax -> decode -> argmax ...
// until `count` tokens.
std::vector<int32_t> plain_greedy(Model& m, const std::vector<int32_t>& prompt, int pos0, size_t count) {
  std::vector<int32_t> out;
  m.prefill(prompt.data(), int(prompt.size()), pos0);
  out.push_back(m.argmax());
  int pos = pos0 + int(prompt.size());
  while (out.size() < count) {
    m.decode(out.back(), pos++);
    out.push_back(m.argmax());
  }
  return out;
}

// The second prompt of a length runs as one recorded unit (a CUDA graph) that reads the prompt's
// ids and positions from memory: prompts of that length with other tokens and at other positions
// give the logits (to the bit) and the greedy continuation of the same prompts run op by op.
TEST_P(ModelTest, RecordedPrefillMatchesDirect) {
  Loaded rec = load(synth_file(arch()), backend());
  Loaded direct = load(synth_file(arch()), backend(), 256, 64, /*graphs=*/false);
  const auto a = test_prompt(30, rec.model->config().n_vocab);
  const std::vector<int32_t> b(a.rbegin(), a.rend());  // the same length, other tokens
  const std::pair<const std::vector<int32_t>*, int> turns[] = {{&a, 0}, {&b, 0}, {&a, 30}, {&b, 60}, {&a, 0}};
  for (const auto& [toks, pos0] : turns) {
    rec.model->prefill(toks->data(), int(toks->size()), pos0);
    direct.model->prefill(toks->data(), int(toks->size()), pos0);
    EXPECT_EQ(rec.model->argmax(), direct.model->argmax()) << "at " << pos0;
    EXPECT_EQ(max_abs_diff(last_logits(*rec.model), last_logits(*direct.model)), 0.0f) << "at " << pos0;
  }
  EXPECT_EQ(plain_greedy(*rec.model, b, 90, 12), plain_greedy(*direct.model, b, 90, 12));
}

// Greedy generation runs steps ahead of the host (GreedyRuns, Model::decode_run); its tokens must be
// those of the plain loop prefill -> argmax -> decode -> argmax ..., including when a callback stops
// it (the steps run ahead of the pending token are rewritten by the next call) and the conversation
// continues with a second prompt.
TEST_P(ModelTest, GreedyRunAheadMatchesStepByStep) {
  Loaded l = load(synth_file(arch()), backend());
  Model& m = *l.model;
  const auto toks = test_prompt(8, m.config().n_vocab);
  const std::vector<int32_t> extra = {5, 6, 7};
  // Plain loop: the first 5 tokens, then [5th token] + extra prefilled where the 5th would go.
  const std::vector<int32_t> want1 = plain_greedy(m, toks, 0, 5);
  std::vector<int32_t> second = {want1.back()};
  second.insert(second.end(), extra.begin(), extra.end());
  const std::vector<int32_t> want2 = plain_greedy(m, second, int(toks.size()) + 4, 10);

  Session s(m, SamplerParams{}, {});
  GenerateOptions g;
  g.max_tokens = 40;
  g.stop_at_end_token = false;
  int calls = 0;
  const GenerationResult r1 = s.generate(toks, g, [&](int32_t) { return ++calls < 5; });  // stops at the 5th
  EXPECT_EQ(r1.stop, StopReason::Callback);
  EXPECT_EQ(r1.tokens, want1);
  EXPECT_EQ(s.pending(), want1.back());
  g.max_tokens = 10;
  const GenerationResult r2 = s.generate(extra, g);
  EXPECT_EQ(r2.tokens, want2);
  EXPECT_EQ(s.n_past(), int(toks.size()) + 4 + 1 + int(extra.size()) + 9);
}

// A conversation encoded again from its start keeps the context's tokens it opens with: the rest
// of the context and the pending token are dropped, and generation goes on from the first token
// that differs, with the tokens of the plain loop that overwrites those rows. A prompt the context
// holds entirely keeps its last token to run.
TEST_P(ModelTest, ReusePrefixKeepsTheCommonTokens) {
  Loaded l = load(synth_file(arch()), backend());
  Model& m = *l.model;
  const auto toks = test_prompt(8, m.config().n_vocab);
  const std::vector<int32_t> first = plain_greedy(m, toks, 0, 5);
  // The conversation again: the prompt, two of the generated tokens, then new ones.
  std::vector<int32_t> again = toks;
  again.insert(again.end(), first.begin(), first.begin() + 2);
  const std::vector<int32_t> extra = {5, 6, 7};
  again.insert(again.end(), extra.begin(), extra.end());
  const std::vector<int32_t> want = plain_greedy(m, extra, int(toks.size()) + 2, 6);

  Session s(m, SamplerParams{}, {});
  GenerateOptions g;
  g.max_tokens = 5;
  g.stop_at_end_token = false;
  EXPECT_EQ(s.generate(toks, g).tokens, first);
  ASSERT_EQ(s.n_past(), int(toks.size()) + 4);
  EXPECT_EQ(s.pending(), first.back());
  const size_t kept = s.reuse_prefix(again);
  EXPECT_EQ(kept, toks.size() + 2);
  EXPECT_EQ(s.n_past(), int(kept));
  EXPECT_EQ(s.pending(), -1);
  g.max_tokens = 6;
  const GenerationResult r = s.generate(std::vector<int32_t>(again.begin() + long(kept), again.end()), g);
  EXPECT_EQ(r.n_prompt, int(extra.size()));
  EXPECT_EQ(r.tokens, want);

  // Everything in the context: the last token runs again. A different first token keeps nothing.
  const std::vector<int32_t> held(s.history().begin(), s.history().begin() + 4);
  EXPECT_EQ(s.reuse_prefix(held), 3u);
  std::vector<int32_t> other = held;
  other[0] = held[0] == 1 ? 2 : 1;
  EXPECT_EQ(s.reuse_prefix(other), 0u);
  EXPECT_EQ(s.n_past(), 0);
  EXPECT_EQ(s.reuse_prefix({}), 0u);
}

// The token times add up to the whole decode: the clock starts before GreedyRuns queues its first
// runs, which on the CPU backend compute while they are queued (and launched one by one on a GPU
// take the host milliseconds while the device runs them). Counted, not timed: with a clock that
// reads the decode steps queued so far, TTFT covers none of them and the token times all of them,
// whatever the runs' lengths (one step at a time on the CPU, runs of up to kDecodeRunMax on CUDA).
TEST_P(ModelTest, TokenTimesCoverEveryDecodeStep) {
  Loaded l = load(synth_file(arch()), backend());
  Model& m = *l.model;
  const auto toks = test_prompt(8, m.config().n_vocab);
  Session s(m, SamplerParams{}, {});
  GenerateOptions g;
  g.max_tokens = 6;
  g.stop_at_end_token = false;
  g.clock_ms = [&m] { return double(m.decode_steps_queued()); };
  const uint64_t before = m.decode_steps_queued();
  const GenerationResult r = s.generate(toks, g);
  ASSERT_EQ(r.token_ms.size(), 5u);
  EXPECT_EQ(r.prefill_ms, 0.0);
  EXPECT_EQ(r.ttft_ms, 0.0) << "decode steps queued before the first token was on the host";
  double sum = 0;
  for (double t : r.token_ms) sum += t;
  EXPECT_EQ(sum, 5.0) << "decode steps queued outside the token times";
  EXPECT_EQ(m.decode_steps_queued() - before, 5u);
}

// Runs of decode steps (Model::decode_run, one captured unit per run length) give the tokens of
// single steps, in order, across runs of different lengths and from run to run; bad run lengths
// and runs past the context are refused.
TEST_P(ModelTest, DecodeRunsMatchSingleSteps) {
  Loaded l = load(synth_file(arch()), backend());
  Model& m = *l.model;
  const auto toks = test_prompt(6, m.config().n_vocab);
  const std::vector<int32_t> want = plain_greedy(m, toks, 0, 2 + 2 * Model::kDecodeRunMax + 3 + 1);

  m.prefill(toks.data(), int(toks.size()), 0);
  std::vector<int32_t> got = {m.argmax()};
  int pos = int(toks.size());
  m.decode(got.back(), pos++);
  got.push_back(m.argmax());
  for (int n : {Model::kDecodeRunMax, 3, Model::kDecodeRunMax, 1}) {
    m.decode_run(pos, n);
    const uint64_t ticket = m.queue_run_tokens(n);
    int32_t t[Model::kDecodeRunMax] = {};
    m.take_run_tokens(ticket, n, t);
    got.insert(got.end(), t, t + n);
    pos += n;
  }
  EXPECT_EQ(got, want);
  EXPECT_EQ(m.argmax(), want.back());
  // The tiny llama model's greedy tokens vary (the qwen2 one repeats one token), so there an
  // out-of-order run shows.
  if (arch() == "llama") {
    EXPECT_GT(std::set<int32_t>(want.begin(), want.end()).size(), 5u);
  }

  EXPECT_THROW(m.decode_run(pos, 0), ModelError);
  EXPECT_THROW(m.decode_run(pos, Model::kDecodeRunMax + 1), ModelError);
  EXPECT_THROW(m.decode_run(m.n_ctx() - 2, 3), ModelError);
  EXPECT_THROW(m.queue_run_tokens(0), ModelError);
}

// The prompt's argmax comes back with the prefill (its download is queued right behind the
// lm_head): it is the first maximum of the last row's logits; a prefill whose argmax nobody reads
// leaves nothing behind (more of them than there are download slots), and a decode step or a run
// after one gives its own tokens.
TEST_P(ModelTest, PromptArgmaxIsTheLastRowsAndNeverLeftBehind) {
  Loaded l = load(synth_file(arch()), backend());
  Model& m = *l.model;
  const int n_vocab = m.config().n_vocab;
  const auto toks = test_prompt(8, n_vocab);
  const int n = int(toks.size());
  const std::vector<int32_t> want = plain_greedy(m, toks, 0, 4);
  std::vector<float> logits(static_cast<size_t>(n_vocab));
  const auto first_max = [&] {
    m.download_logits(logits.data());
    return int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin());
  };

  for (int i = 0; i < 2 * kQueuedDownloads; ++i) m.prefill(toks.data(), 3 + i % 4, 0);
  m.prefill(toks.data(), n, 0);
  EXPECT_EQ(first_max(), want[0]);
  EXPECT_EQ(m.argmax(), want[0]);
  EXPECT_EQ(m.argmax(), want[0]);  // asked again

  m.prefill(toks.data(), n, 0);
  m.decode(want[0], n);
  EXPECT_EQ(m.argmax(), want[1]);

  m.prefill(toks.data(), n, 0);
  m.decode_run(n, 3);
  int32_t t[Model::kDecodeRunMax] = {};
  m.take_run_tokens(m.queue_run_tokens(3), 3, t);
  EXPECT_EQ(std::vector<int32_t>(t, t + 3), std::vector<int32_t>(want.begin() + 1, want.end()));
}

// Greedy generation past several runs, and up to the end of the context, gives the tokens of the
// plain loop.
TEST_P(ModelTest, GreedyRunsMatchStepByStepToTheContextEnd) {
  Loaded l = load(synth_file(arch()), backend(), /*n_ctx=*/40, 8);
  Model& m = *l.model;
  const auto toks = test_prompt(7, m.config().n_vocab);
  const std::vector<int32_t> want = plain_greedy(m, toks, 0, size_t(m.n_ctx()) - toks.size() + 1);  // to the last row
  Session s(m, SamplerParams{}, {});
  GenerateOptions g;
  g.max_tokens = 1000;
  g.stop_at_end_token = false;
  const GenerationResult r = s.generate(toks, g);
  EXPECT_EQ(r.stop, StopReason::ContextFull);
  EXPECT_EQ(r.tokens, want);
  EXPECT_EQ(s.n_past(), m.n_ctx());

  s.reset();
  g.max_tokens = 19;  // 18 steps: with step capture, one step, then runs of up to Model::kDecodeRunMax
  const GenerationResult r2 = s.generate(toks, g);
  EXPECT_EQ(r2.stop, StopReason::MaxTokens);
  EXPECT_EQ(r2.tokens, std::vector<int32_t>(want.begin(), want.begin() + 19));
}

TEST_P(ModelTest, ContextLimitsAreEnforced) {
  Loaded l = load(synth_file(arch()), backend(), /*n_ctx=*/16, 8);
  const auto toks = test_prompt(17, l.model->config().n_vocab);
  EXPECT_THROW(l.model->prefill(toks.data(), 17, 0), ModelError);
  EXPECT_THROW(l.model->decode(0, 16), ModelError);
  EXPECT_THROW(l.model->decode(l.model->config().n_vocab, 0), ModelError);
  Session s(*l.model, SamplerParams{}, {});
  GenerateOptions g;
  g.max_tokens = 100;
  g.stop_at_end_token = false;
  const GenerationResult r = s.generate(std::vector<int32_t>(toks.begin(), toks.begin() + 10), g);
  EXPECT_EQ(r.stop, StopReason::ContextFull);
  EXPECT_EQ(s.n_past(), 16);
}

INSTANTIATE_TEST_SUITE_P(Models, ModelTest,
                         ::testing::Combine(::testing::Values("qwen2", "llama", "llama3", "nemo",
                                                              "narrow_heads"),
                                            ::testing::Values("cpu", "cuda")),
                         [](const auto& info) { return std::get<0>(info.param) + "_" + std::get<1>(info.param); });

TEST(ModelConfigTest, ReadsTheBenchmarkShapes) {
  // The tiny qwen2 preset shares the benchmark model's metadata layout.
  auto f = GgufFile::open(synth_file("qwen2"));
  const ModelConfig c = read_model_config(*f);
  EXPECT_EQ(c.arch, "qwen2");
  EXPECT_EQ(c.rope_mode, RopeMode::Neox);
  EXPECT_TRUE(c.tied_embeddings);
  EXPECT_TRUE(c.qkv_bias);
  EXPECT_EQ(c.n_embd % c.n_head, 0);
  auto g = GgufFile::open(synth_file("llama"));
  const ModelConfig d = read_model_config(*g);
  EXPECT_EQ(d.arch, "llama");
  EXPECT_EQ(d.rope_mode, RopeMode::Normal);
  EXPECT_FALSE(d.tied_embeddings);
  EXPECT_FALSE(d.qkv_bias);
  EXPECT_TRUE(d.rope_freq_factors.empty());
  EXPECT_EQ(d.rope_scaling, "");
}

// Heads as wide as attention.key_length says, whatever n_embd / n_head is: q, the attention output
// and the output projection's k are n_head·head_dim wide, the KV cache head_dim wide.
TEST(ModelConfigTest, ReadsTheHeadWidthFromKeyLength) {
  struct Case {
    std::string preset;
    int n_embd, n_head, n_head_kv, head_dim;
  };
  for (const Case& want : {Case{"nemo", 256, 4, 2, 128}, Case{"narrow_heads", 320, 3, 1, 64}}) {
    SCOPED_TRACE(want.preset);
    auto f = GgufFile::open(synth_file(want.preset));
    const ModelConfig c = read_model_config(*f);
    EXPECT_EQ(c.n_embd, want.n_embd);
    EXPECT_EQ(c.n_head, want.n_head);
    EXPECT_EQ(c.n_head_kv, want.n_head_kv);
    EXPECT_EQ(c.head_dim, want.head_dim);
    EXPECT_NE(c.q_dim(), c.n_embd);
    Loaded l = load(synth_file(want.preset), "cpu", 128, 16);
    const std::vector<Model::GemmShape> g = l.model->decode_gemms();
    ASSERT_EQ(g[0].name, "qkv_proj");
    EXPECT_EQ(g[0].n, (want.n_head + 2 * want.n_head_kv) * want.head_dim);
    EXPECT_EQ(g[0].k, want.n_embd);
    ASSERT_EQ(g[1].name, "attn_out_proj");
    EXPECT_EQ(g[1].n, want.n_embd);
    EXPECT_EQ(g[1].k, want.n_head * want.head_dim);
    // A cache row of K and V in every layer.
    const size_t kv_row = 2 * size_t(want.n_head_kv) * size_t(want.head_dim) * sizeof(half_t);
    EXPECT_EQ(l.model->decode_kv_bytes(100), size_t(c.n_layer) * 100 * kv_row);
    EXPECT_EQ(l.model->footprint().kv_cache_bytes, l.model->decode_kv_bytes(128));
  }
}

// Heads of 256, the widest a model may have: a backend that takes them (both do) runs the model;
// one whose attention took narrower heads would refuse it at load, naming both widths, not at the
// first prompt (the CUDA backend did, up to 128, before its generic prefill attention kernel).
class WideHeadsTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (!backend_available(GetParam())) GTEST_SKIP() << "backend " << GetParam() << " is not available here";
  }
};

TEST_P(WideHeadsTest, RunOrAreRefusedAtLoad) {
  const std::string path = synth_file("wide_heads");
  const int widest = create_backend(GetParam())->max_head_dim();
  if (widest >= tiny_wide_heads_test_model().head_dim) {
    Loaded l = load(path, GetParam(), 64, 16);
    const auto toks = test_prompt(12, l.model->config().n_vocab);
    const std::vector<float> logits = all_logits(*l.model, toks);
    for (float v : logits) ASSERT_TRUE(std::isfinite(v));
    return;
  }
  try {
    load(path, GetParam(), 64, 16);
    FAIL() << "a model with heads of 256 loaded on a backend that takes at most " << widest;
  } catch (const BackendError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("heads are 256 wide"), std::string::npos) << what;
    EXPECT_NE(what.find("at most " + std::to_string(widest) + " wide"), std::string::npos) << what;
    EXPECT_EQ(what.find('\n'), std::string::npos) << what;
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, WideHeadsTest, ::testing::Values("cpu", "cuda"),
                         [](const auto& info) { return info.param; });

TEST(ModelConfigTest, ReadsTheRopeFrequencyFactors) {
  auto f = GgufFile::open(synth_file("llama3"));
  const ModelConfig c = read_model_config(*f);
  EXPECT_EQ(c.rope_freq_factors, tiny_llama3_test_model().rope_freqs);
  EXPECT_EQ(c.rope_scaling, "rope_freqs");
  // The preset's ramp: the fastest pair keeps its frequency, the slowest is slowed 8 times.
  ASSERT_EQ(c.rope_freq_factors.size(), size_t(c.head_dim / 2));
  EXPECT_EQ(c.rope_freq_factors.front(), 1.0f);
  EXPECT_EQ(c.rope_freq_factors.back(), 8.0f);
}

// tiny-llama3 against the same file without rope_freqs.weight: position 0 is not turned, so the
// first row's logits agree to the bit, and the later rows differ.
TEST(ModelRopeScalingTest, ChangesEveryPositionButTheFirst) {
  SynthConfig unscaled = tiny_llama3_test_model();
  unscaled.rope_freqs.clear();
  const fs::path path = fs::path(TLLM_BINARY_DIR) / "tests" / "model-test-llama3-unscaled.gguf";
  write_synth_model(unscaled, path.string(), {});
  Loaded plain = load(path.string(), "cpu");
  Loaded scaled = load(synth_file("llama3"), "cpu");
  const int V = plain.model->config().n_vocab;
  const auto toks = test_prompt(8, V);
  const std::vector<float> a = all_logits(*plain.model, toks), b = all_logits(*scaled.model, toks);
  EXPECT_TRUE(std::equal(a.begin(), a.begin() + V, b.begin())) << "row 0";
  for (size_t r = 1; r < toks.size(); ++r) {
    const std::vector<float> ra(a.begin() + long(r) * V, a.begin() + long(r + 1) * V);
    const std::vector<float> rb(b.begin() + long(r) * V, b.begin() + long(r + 1) * V);
    EXPECT_GT(max_abs_diff(ra, rb), 1e-3f) << "row " << r << " is unchanged by the rope scaling";
  }
}

TEST(ModelConfigTest, FootprintOfTheBenchmarkModelFitsTheBudget) {
  // The benchmark model's shapes (the synthetic Qwen2.5-0.5B preset, its lm_head Q8_0) with a
  // 4096-token cache on the CUDA backend: weights + KV must fit 0.8 GB.
  if (!backend_available("cuda")) GTEST_SKIP() << "backend cuda is not available here";
  const SynthConfig q = qwen25_05b_q4km();
  ModelConfig c;
  c.arch = q.arch;
  c.n_layer = q.n_layer;
  c.n_embd = q.n_embd;
  c.n_ff = q.n_ff;
  c.n_head = q.n_head;
  c.n_head_kv = q.n_head_kv;
  c.head_dim = q.n_embd / q.n_head;
  c.n_vocab = q.n_vocab;
  c.n_ctx_train = q.n_ctx;
  c.tied_embeddings = q.tied;
  c.qkv_bias = q.qkv_bias;
  c.lm_head_int8_form = true;
  LoadOptions o;
  o.n_ctx = 4096;
  const ModelFootprint fp = Model::footprint(c, o, *create_backend("cuda"));
  EXPECT_LT(fp.weight_bytes + fp.kv_cache_bytes, size_t(800) * 1000 * 1000);
  EXPECT_EQ(fp.kv_cache_bytes, size_t(24) * 2 * 2 * 4096 * 64 * 2);
}

// Q/K/V and gate/up are stacked with HostWeights::append_rows at load.
TEST(HostWeightsTest, AppendRowsStacksRowsOfTheSameTypeAndK) {
  HostWeights a;
  a.n = 1;
  a.k = kW8Group;
  a.q.assign(kW8Group, 1);
  a.scales = {float_to_half(0.5f)};
  HostWeights b = a;
  b.n = 2;
  b.q.assign(2 * kW8Group, -3);
  b.scales = {float_to_half(1.0f), float_to_half(2.0f)};
  a.append_rows(b);
  EXPECT_EQ(a.n, 3);
  ASSERT_EQ(a.q.size(), size_t(3 * kW8Group));
  EXPECT_EQ(a.q[0], 1);
  EXPECT_EQ(a.q[kW8Group], -3);
  ASSERT_EQ(a.scales.size(), 3u);
  EXPECT_EQ(half_to_float(a.scales[2]), 2.0f);
  const HostMatrix v = a.view();
  EXPECT_EQ(v.n, 3);
  EXPECT_EQ(v.q, a.q.data());

  HostWeights wide = b;
  wide.k = 2 * kW8Group;
  EXPECT_THROW(a.append_rows(wide), BackendError);
  HostWeights f16;
  f16.type = WeightType::F16;
  f16.k = kW8Group;
  EXPECT_THROW(a.append_rows(f16), BackendError);
}

TEST(HostWeightsTest, WidenToF16GivesTheProductsOfTheInt8Form) {
  HostWeights w;
  w.n = 2;
  w.k = kW8Group;
  w.q.assign(2 * kW8Group, 3);
  w.q[1] = -127;
  w.q[kW8Group] = 100;
  w.scales = {float_to_half(0.25f), float_to_half(0.001f)};
  w.widen_to_f16();
  EXPECT_EQ(w.type, WeightType::F16);
  ASSERT_EQ(w.f16.size(), size_t(2 * kW8Group));
  EXPECT_EQ(half_to_float(w.f16[0]), 0.75f);
  EXPECT_EQ(half_to_float(w.f16[1]), -31.75f);
  // 100 · fp16(0.001) = 0.0999755859375, rounded once to fp16.
  EXPECT_EQ(w.f16[kW8Group], float_to_half(100.0f * half_to_float(float_to_half(0.001f))));
  EXPECT_EQ(w.q.size(), size_t(2 * kW8Group));  // the int8 form stays
  const HostMatrix v = w.view();
  EXPECT_EQ(v.f16, w.f16.data());
  EXPECT_EQ(v.q, w.q.data());

  HostWeights plain;
  plain.type = WeightType::F16;
  plain.n = 1;
  plain.k = kW8Group;
  plain.f16.assign(kW8Group, float_to_half(1.0f));
  EXPECT_THROW(plain.widen_to_f16(), BackendError);
}

TEST(ModelConfigTest, ContextThatDoesNotFitIsRefusedWithTheSizes) {
  ModelFootprint need;
  need.weight_bytes = size_t(600) << 20;
  need.kv_cache_bytes = size_t(50) << 30;
  need.activation_bytes = size_t(10) << 20;
  MemoryInfo gpu;
  gpu.device_total = size_t(24) << 30;
  gpu.device_used = size_t(1) << 30;
  const std::string e = fit_error(need, gpu, "cuda", 1 << 20);
  EXPECT_NE(e.find("needs 51810.0 MiB on cuda"), std::string::npos) << e;
  EXPECT_NE(e.find("KV cache 51200.0 MiB for 1048576 tokens"), std::string::npos) << e;
  EXPECT_NE(e.find("only 23552.0 MiB is free"), std::string::npos) << e;
  need.kv_cache_bytes = size_t(1) << 30;
  EXPECT_EQ(fit_error(need, gpu, "cuda", 4096), "");
  MemoryInfo unknown;  // a device that reports no total is not checked
  need.kv_cache_bytes = size_t(50) << 30;
  EXPECT_EQ(fit_error(need, unknown, "cpu", 1 << 20), "");
}

// ---- CUDA against the CPU oracle, end to end ----------------------------------------------------

void expect_same_top1_and_close(const std::vector<float>& cpu, const std::vector<float>& gpu, int V,
                                const std::string& what) {
  ASSERT_EQ(cpu.size(), gpu.size());
  const size_t rows = cpu.size() / size_t(V);
  float worst_rel = 0;
  for (size_t r = 0; r < rows; ++r) {
    const float* a = cpu.data() + r * size_t(V);
    const float* b = gpu.data() + r * size_t(V);
    const float lo = *std::min_element(a, a + V), hi = *std::max_element(a, a + V);
    float d = 0;
    for (int i = 0; i < V; ++i) d = std::max(d, std::fabs(a[i] - b[i]));
    worst_rel = std::max(worst_rel, d / (hi - lo));
    const long ta = std::max_element(a, a + V) - a, tb = std::max_element(b, b + V) - b;
    // Where the two best logits are closer than the difference bound, either is a correct top-1.
    std::vector<float> sorted(a, a + V);
    std::nth_element(sorted.begin(), sorted.begin() + 1, sorted.end(), std::greater<float>());
    if (sorted[0] - sorted[1] > 2 * d) {
      EXPECT_EQ(ta, tb) << what << ": top-1 differs at position " << r;
    }
  }
  // Both backends compute the same W8A16 function; they differ in accumulation order and in where
  // fp32 sums are rounded to fp16 (kernel-internal vs BLAS), which moves logits by well under 1% of
  // their range over 24 layers.
  EXPECT_LT(worst_rel, 0.01f) << what << ": max |cpu - cuda| relative to the logit range";
}

// Decode steps at positions pos0 .. pos0 + steps - 1 on the oracle and on CUDA, each fed the
// oracle's greedy token (the first from the step or prompt before), each step's logits compared.
void expect_decode_steps_match_cpu(Model& cpu, Model& gpu, int pos0, int steps,
                                   const std::string& what) {
  const int V = cpu.config().n_vocab;
  int32_t t = cpu.argmax();
  for (int pos = pos0; pos < pos0 + steps; ++pos) {
    for (Model* m : {&cpu, &gpu}) m->decode(t, pos);
    const std::vector<float> a = last_logits(cpu);
    expect_same_top1_and_close(a, last_logits(gpu), V,
                               what + " decode at position " + std::to_string(pos));
    t = int32_t(std::max_element(a.begin(), a.end()) - a.begin());
  }
}

TEST(CudaEndToEnd, SyntheticQwen25LogitsMatchCpu_cuda) {
  if (!backend_available("cuda")) GTEST_SKIP() << "no CUDA device";
  const std::string path = synth_file("qwen25");
  Loaded cpu = load(path, "cpu", 256, 64);
  Loaded gpu = load(path, "cuda", 256, 64);
  const auto toks = test_prompt(64, cpu.model->config().n_vocab);
  expect_same_top1_and_close(all_logits(*cpu.model, toks), all_logits(*gpu.model, toks), cpu.model->config().n_vocab,
                             "synthetic Qwen2.5-0.5B");
  // The prompt's last row alone (the last layer on the GEMV path), as generation runs it.
  for (Loaded* l : {&cpu, &gpu}) l->model->prefill(toks.data(), 30, 0);
  expect_same_top1_and_close(last_logits(*cpu.model), last_logits(*gpu.model), cpu.model->config().n_vocab,
                             "synthetic Qwen2.5-0.5B, last row of 30");
}

// A Llama 3 model's rope scaling (rope_freqs.weight) on CUDA as on the CPU oracle: a prompt's
// logits, then decode steps fed the oracle's tokens.
TEST(CudaEndToEnd, TinyLlama3RopeScalingMatchesCpu_cuda) {
  if (!backend_available("cuda")) GTEST_SKIP() << "no CUDA device";
  const std::string path = synth_file("llama3");
  Loaded cpu = load(path, "cpu", 256, 64);
  Loaded gpu = load(path, "cuda", 256, 64);
  const int V = cpu.model->config().n_vocab;
  const auto toks = test_prompt(40, V);
  expect_same_top1_and_close(all_logits(*cpu.model, toks), all_logits(*gpu.model, toks), V, "tiny llama 3 prompt");
  expect_decode_steps_match_cpu(*cpu.model, *gpu.model, int(toks.size()), 16, "tiny llama 3");
}

// YaRN (per-pair frequency divisors, q and k scaled) on CUDA as on the CPU oracle.
TEST(CudaEndToEnd, TinyYarnRopeScalingMatchesCpu_cuda) {
  if (!backend_available("cuda")) GTEST_SKIP() << "no CUDA device";
  const std::string path = synth_file("yarn");
  Loaded cpu = load(path, "cpu", 256, 64);
  Loaded gpu = load(path, "cuda", 256, 64);
  ASSERT_EQ(cpu.model->config().rope_scaling, "yarn");
  const int V = cpu.model->config().n_vocab;
  const auto toks = test_prompt(40, V);
  expect_same_top1_and_close(all_logits(*cpu.model, toks), all_logits(*gpu.model, toks), V, "tiny yarn prompt");
  expect_decode_steps_match_cpu(*cpu.model, *gpu.model, int(toks.size()), 16, "tiny yarn");
}

// Heads whose width is not n_embd / n_head (attention.key_length) on CUDA as on the CPU oracle:
// tiny-nemo (head_dim 128, q twice as wide as n_embd), narrow_heads (head_dim 64, 3/1 heads, q
// narrower than n_embd) and wide_heads (2/1 heads of 256, which the CUDA backend's generic
// attention kernels take, prefill and decode, with the output projection apart). A 40-token
// prompt's logits (prefill attention and matmuls with k = n_head·head_dim), then, from just
// before each end of a context class (Model::kShortDecodeRows, doubling up to n_ctx = 1,100),
// decode steps fed the oracle's tokens: the CUDA steps run attention with the output projection
// (n_embd outputs of n_head·head_dim inputs) fused in, its rows split over more blocks as the
// class grows, and apart where the rows outgrow it (tiny-nemo past 512 rows). Then greedy
// generation with and without step capture (CUDA graphs) gives the same tokens.
TEST(CudaEndToEnd, HeadsOfTheirOwnWidthMatchCpu_cuda) {
  if (!backend_available("cuda")) GTEST_SKIP() << "no CUDA device";
  const int n_ctx = 4 * Model::kShortDecodeRows + 76;
  for (const char* preset : {"nemo", "narrow_heads", "wide_heads"}) {
    SCOPED_TRACE(preset);
    const std::string path = synth_file(preset);
    Loaded cpu = load(path, "cpu", n_ctx, 64);
    Loaded gpu = load(path, "cuda", n_ctx, 64);
    const int V = cpu.model->config().n_vocab;
    const auto prompt = test_prompt(40, V);
    expect_same_top1_and_close(all_logits(*cpu.model, prompt), all_logits(*gpu.model, prompt), V,
                               "prompt");
    for (const int rows : {1, 2, 4}) {
      const int boundary = rows * Model::kShortDecodeRows;
      const int n = boundary - 12;
      const auto toks = test_prompt(n, V);
      for (Loaded* l : {&cpu, &gpu}) l->model->prefill(toks.data(), n, 0);
      expect_decode_steps_match_cpu(*cpu.model, *gpu.model, n, 24, preset);
    }
    Loaded plain = load(path, "cuda", n_ctx, 64, /*graphs=*/false);
    GenerateOptions g;
    g.max_tokens = 40;
    g.stop_at_end_token = false;
    auto run = [&](Model& m) { return Session(m, SamplerParams{}, {}).generate(prompt, g).tokens; };
    EXPECT_EQ(run(*gpu.model), run(*plain.model)) << "cuda with graphs vs without";
  }
}

// Decode across the ends of context classes (Model::kShortDecodeRows, doubling up to n_ctx): the
// CUDA steps run attention with the output projection fused in, its rows split over more blocks as
// the class grows (one split up to 256 rows, 2 up to 512, 4 up to 1,024), and apart past 1,024
// rows (the last class here, up to n_ctx = 1,100). At each boundary, each
// single step against the CPU oracle's logits, fed the oracle's tokens; then the same positions
// and on in runs of Model::kDecodeRunMax (recorded per class, at least two, one of them starting
// inside one class and ending past it) against CUDA's single steps.
TEST(CudaEndToEnd, SyntheticQwen25DecodeAcrossContextClassesMatchesCpu_cuda) {
  if (!backend_available("cuda")) GTEST_SKIP() << "no CUDA device";
  const std::string path = synth_file("qwen25");
  const int n_ctx = 4 * Model::kShortDecodeRows + 76;
  Loaded cpu = load(path, "cpu", n_ctx, 64);
  Loaded gpu = load(path, "cuda", n_ctx, 64);
  const int V = cpu.model->config().n_vocab;
  for (const int boundary : {Model::kShortDecodeRows, 4 * Model::kShortDecodeRows}) {
    const int n = boundary - 12;
    const auto toks = test_prompt(n, V);
    for (Loaded* l : {&cpu, &gpu}) l->model->prefill(toks.data(), n, 0);
    expect_decode_steps_match_cpu(*cpu.model, *gpu.model, n, 24, "synthetic Qwen2.5-0.5B");

    Model& m = *gpu.model;
    static_assert(12 % Model::kDecodeRunMax != 0, "a run must cross the class boundary, 12 rows in");
    const int runs = std::max(2, (24 + Model::kDecodeRunMax - 1) / Model::kDecodeRunMax);
    const std::vector<int32_t> want = plain_greedy(m, toks, 0, 1 + runs * Model::kDecodeRunMax);
    m.prefill(toks.data(), n, 0);
    std::vector<int32_t> got = {m.argmax()};
    for (int pos = n; pos < n + runs * Model::kDecodeRunMax; pos += Model::kDecodeRunMax) {
      m.decode_run(pos, Model::kDecodeRunMax);
      int32_t r[Model::kDecodeRunMax] = {};
      m.take_run_tokens(m.queue_run_tokens(Model::kDecodeRunMax), Model::kDecodeRunMax, r);
      got.insert(got.end(), r, r + Model::kDecodeRunMax);
    }
    EXPECT_EQ(got, want) << "runs across " << boundary << " rows";
  }
}

// A short prompt's recording holds the address of the split-k workspace of its matmuls, which a
// longer short prompt grows (reallocates): the recording must not run on the freed buffer. The
// replay after the growth gives the logits, to the bit, of the same prompt run without recording.
TEST(CudaEndToEnd, RecordedPromptAfterTheWorkspaceGrewMatchesDirect_cuda) {
  if (!backend_available("cuda")) GTEST_SKIP() << "no CUDA device";
  const std::string path = synth_file("qwen25");
  Loaded rec = load(path, "cuda", 256, 64);
  Loaded direct = load(path, "cuda", 256, 64, /*graphs=*/false);
  const int V = rec.model->config().n_vocab;
  const auto a = test_prompt(6, V), b = test_prompt(60, V);
  for (int i = 0; i < 2; ++i) rec.model->prefill(a.data(), int(a.size()), 0);  // the second is recorded
  rec.model->prefill(b.data(), int(b.size()), 0);                              // grows the workspace
  rec.model->prefill(a.data(), int(a.size()), 0);
  direct.model->prefill(a.data(), int(a.size()), 0);
  EXPECT_EQ(last_logits(*rec.model), last_logits(*direct.model));
  EXPECT_EQ(rec.model->argmax(), direct.model->argmax());
}

// A prompt of more than 64 rows runs the tiled matmul, which splits k for its few output tiles: the
// same 200-token prompt, run again, gives the same logits to the bit, whatever order the splits
// finish in.
TEST(CudaEndToEnd, LongPromptIsRunToRunIdentical_cuda) {
  if (!backend_available("cuda")) GTEST_SKIP() << "no CUDA device";
  Loaded m = load(synth_file("qwen25"), "cuda", 256, 256);
  const auto toks = test_prompt(200, m.model->config().n_vocab);
  m.model->prefill(toks.data(), int(toks.size()), 0);
  const std::vector<float> first = last_logits(*m.model);
  for (int run = 2; run <= 4; ++run) {
    m.model->prefill(toks.data(), int(toks.size()), 0);
    EXPECT_EQ(last_logits(*m.model), first) << "run " << run;
  }
}

TEST(CudaEndToEnd, SmolLM2LogitsAndGreedyTokensMatchCpu_cuda) {
  if (!backend_available("cuda")) GTEST_SKIP() << "no CUDA device";
  if (!fs::exists(smollm2_path())) {
    if (in_ci()) FAIL() << smollm2_path() << " is missing";
    GTEST_SKIP() << smollm2_path() << " is missing (scripts/fetch-model.sh)";
  }
  Loaded cpu = load(smollm2_path(), "cpu", 512, 64);
  Loaded gpu = load(smollm2_path(), "cuda", 512, 64, /*graphs=*/true);
  Loaded gpu_plain = load(smollm2_path(), "cuda", 512, 64, /*graphs=*/false);
  const auto toks = test_prompt(64, cpu.model->config().n_vocab);
  expect_same_top1_and_close(all_logits(*cpu.model, toks), all_logits(*gpu.model, toks), cpu.model->config().n_vocab,
                             "SmolLM2");

  auto tok = Tokenizer::from_gguf(*cpu.file);
  const std::vector<int32_t> prompt = tok->encode(
      "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
      "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n",
      true);
  GenerateOptions g;
  g.max_tokens = 64;
  g.stop_at_end_token = false;
  auto run = [&](Model& m) { return Session(m, SamplerParams{}, {}).generate(prompt, g).tokens; };
  const auto a = run(*cpu.model), b = run(*gpu.model), c = run(*gpu_plain.model);
  EXPECT_EQ(a, b) << "cpu vs cuda with graphs";
  EXPECT_EQ(b, c) << "cuda with graphs vs without";
}

}  // namespace
}  // namespace tllm
