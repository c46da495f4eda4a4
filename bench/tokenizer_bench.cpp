// Tokenizer throughput: encoding ~1 MB of mixed English / Chinese text with the Qwen2 vocabulary
// (../shared/data/qwen2-tokenizer), reported in bytes/s. Target: under 0.5 s per MB (> 2 MB/s) on a
// 2-core machine. The text is generated deterministically from word lists: English sentences with
// numbers and contractions, Chinese clauses with full-width punctuation, paragraph breaks.
#include <benchmark/benchmark.h>

#include <cstdint>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "model/tokenizer.h"

namespace {

const char* const kEnglish[] = {
    "the", "of", "and", "to", "in", "is", "that", "for", "it", "was", "with", "be", "on", "not",
    "this", "are", "from", "at", "which", "but", "have", "they", "you", "were", "there", "their",
    "model", "language", "token", "inference", "engine", "memory", "bandwidth", "kernel", "cache",
    "weights", "matrix", "vector", "attention", "layer", "decode", "prefill", "latency", "throughput",
    "benchmark", "accuracy", "quantised", "precision", "context", "sequence", "Hello", "World",
    "Qwen", "GPU", "NVIDIA", "what's", "don't", "we'll", "they're", "I'm", "it's", "you've",
    "small", "fast", "simple", "careful", "measured", "result", "figure", "table", "section",
};
const char* const kChinese[] = {
    "我们", "今天", "天气", "非常", "好", "学习", "工作", "中国", "人工智能", "模型", "数据", "计算",
    "发展", "技术", "问题", "研究", "世界", "经济", "社会", "文化", "历史", "科学", "教育", "城市",
    "北京", "上海", "朋友", "时间", "生活", "公司", "市场", "电脑", "手机", "网络", "语言", "翻译",
    "文字", "汉字", "机器", "深度", "神经", "训练", "推理", "速度", "质量", "提高", "重要", "可以",
    "没有", "什么", "因为", "所以", "但是", "如果", "已经", "还是", "这个", "那个", "一些", "开始",
};
const char* const kChinesePunct[] = {"，", "。", "！", "？", "；", "：", "、"};

struct Lcg {
  uint64_t s;
  uint32_t next(uint32_t n) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<uint32_t>(s >> 33) % n;
  }
};

template <size_t N>
const char* pick(Lcg& r, const char* const (&words)[N]) {
  return words[r.next(N)];
}

std::string mixed_text(size_t bytes) {
  Lcg r{42};
  std::string text;
  while (text.size() < bytes) {
    if (r.next(2) == 0) {
      const uint32_t n = 5 + r.next(16);
      for (uint32_t i = 0; i < n; ++i) {
        if (i) text += ' ';
        if (r.next(12) == 0) {
          text += std::to_string(r.next(100000));
        } else {
          text += pick(r, kEnglish);
        }
      }
      text += ".!?,"[r.next(4)];
    } else {
      const uint32_t n = 4 + r.next(12);
      for (uint32_t i = 0; i < n; ++i) {
        text += pick(r, kChinese);
        if (r.next(7) == 0) text += pick(r, kChinesePunct);
      }
      text += "。";
    }
    const uint32_t gap = r.next(4);
    text += gap < 2 ? " " : (gap == 2 ? "\n" : "\n\n");
  }
  return text;
}

const tllm::Tokenizer* qwen2_tokenizer() {
  static const std::unique_ptr<tllm::Tokenizer> tok = []() -> std::unique_ptr<tllm::Tokenizer> {
    const std::string dir = std::string(TLLM_SHARED_DIR) + "/data/qwen2-tokenizer";
    if (!std::ifstream(dir + "/vocab.json").good()) return nullptr;
    return tllm::Tokenizer::from_hf_folder(dir, "qwen2",
                                           {{"<|endoftext|>", 151643, tllm::TokenType::Control},
                                            {"<|im_start|>", 151644, tllm::TokenType::Control},
                                            {"<|im_end|>", 151645, tllm::TokenType::Control}});
  }();
  return tok.get();
}

void BM_TokenizeMixed1MB(benchmark::State& state) {
  const tllm::Tokenizer* tok = qwen2_tokenizer();
  if (!tok) {
    state.SkipWithError("Qwen2 vocabulary not found (../shared/data/qwen2-tokenizer)");
    return;
  }
  const std::string text = mixed_text(1 << 20);
  size_t n_tokens = 0;
  for (auto _ : state) {
    const std::vector<int32_t> ids = tok->encode(text);
    n_tokens = ids.size();
    benchmark::DoNotOptimize(ids.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * static_cast<int64_t>(text.size()));
  state.counters["tokens"] = static_cast<double>(n_tokens);
  state.counters["bytes/token"] = static_cast<double>(text.size()) / static_cast<double>(n_tokens);
}
BENCHMARK(BM_TokenizeMixed1MB)->Unit(benchmark::kMillisecond);

// Loading the 151k-token Qwen2 vocabulary and its 151k merges from vocab.json + merges.txt.
void BM_LoadQwen2Vocabulary(benchmark::State& state) {
  const std::string dir = std::string(TLLM_SHARED_DIR) + "/data/qwen2-tokenizer";
  if (!std::ifstream(dir + "/vocab.json").good()) {
    state.SkipWithError("Qwen2 vocabulary not found (../shared/data/qwen2-tokenizer)");
    return;
  }
  for (auto _ : state) {
    auto tok = tllm::Tokenizer::from_hf_folder(dir, "qwen2", {{"<|endoftext|>", 151643, tllm::TokenType::Control}});
    benchmark::DoNotOptimize(tok.get());
  }
}
BENCHMARK(BM_LoadQwen2Vocabulary)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
