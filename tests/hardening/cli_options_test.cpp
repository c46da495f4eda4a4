// Command-line validation of tiny_llm, tiny_llm_bench and tiny_llm_kernel_bench, run as child
// processes: --help for every program and subcommand; zero, negative, absurd and malformed numbers;
// unknown backends and choices; missing or unusable files; a prompt longer than the context (an
// error) and --max-tokens past the context (generation stops at the full context, with a note on
// stderr, as --help documents).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <sstream>

#include "hardening/hardening_util.h"

namespace tllm::test {
namespace {

struct BadCommand {
  std::vector<std::string> argv;
  std::vector<std::string> needles;  // expected in the one-line message
};

void expect_all_fail(const std::string& program, const std::vector<BadCommand>& cases) {
  std::vector<std::vector<std::string>> commands;
  for (const BadCommand& c : cases) commands.push_back(c.argv);
  const std::vector<RunResult> r = run_all(commands);
  for (size_t i = 0; i < cases.size(); ++i) {
    expect_clean_failure(r[i], program, cases[i].needles);
    EXPECT_EQ(r[i].out, "") << r[i].describe();
  }
}

TEST(CliOptions, HelpForEveryProgramAndSubcommand) {
  const std::string t = tiny_llm_path();
  std::vector<std::vector<std::string>> commands = {
      {t, "--help"}, {t, "-h"}, {tiny_llm_bench_path(), "--help"}, {tiny_llm_kernel_bench_path(), "--help"}};
  const std::vector<std::string> subcommands = {"generate", "chat", "inspect", "tokenize", "logits", "synth"};
  for (const std::string& s : subcommands) {
    commands.push_back({t, s, "--help"});
    commands.push_back({t, s, "-h"});
  }
  const std::vector<RunResult> r = run_all(commands);
  for (const RunResult& x : r) {
    expect_success(x);
    EXPECT_NE(x.out.find("Usage:"), std::string::npos) << x.describe();
    EXPECT_EQ(x.err, "") << x.describe();
  }
  // The top-level help lists every subcommand.
  for (const std::string& s : subcommands) EXPECT_NE(r[0].out.find(s), std::string::npos) << s;
  // --max-tokens documents what happens at a full context.
  EXPECT_NE(r[4].out.find("when the context is full"), std::string::npos) << r[4].describe();
}

TEST(CliOptions, TinyLlmRejectsBadValues) {
  const std::string t = tiny_llm_path();
  const std::string m = base_model_path();
  ScratchDir dir;
  auto gen = [&](std::vector<std::string> extra, const std::string& prompt = "hi") {
    std::vector<std::string> a = {t, "generate", "-m", m, "-p", prompt, "--backend", "cpu", "-q"};
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  };
  // Conversations for --messages: a valid one, and files that are not one.
  const std::string conv = dir.file("conv.json"), tools = dir.file("tools.json");
  const std::string not_json = dir.file("not.json"), bad_role = dir.file("role.json"), empty = dir.file("empty.json");
  write_text(conv, R"([{"role": "user", "content": "hi"}])");
  write_text(tools, R"([{"name": "now"}])");
  write_text(not_json, "{\"messages\": [");
  write_text(bad_role, R"([{"role": "bot", "content": "hi"}])");
  write_text(empty, R"({"messages": []})");
  const std::string deep = dir.file("deep.json");  // tool-call arguments nested 100,000 levels deep
  write_text(deep, R"([{"role": "assistant", "tool_calls": [{"name": "f", "arguments": )" + std::string(100000, '[') +
                       std::string(100000, ']') + "}]}]");
  auto messages = [&](const std::string& file, std::vector<std::string> extra = {}) {
    std::vector<std::string> a = {t, "generate", "-m", m, "--messages", file, "--backend", "cpu", "-q"};
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  };
  auto logits = [&](std::vector<std::string> extra) {
    std::vector<std::string> a = {t, "logits", "-m", m, "--backend", "cpu", "-q", "-o", dir.file("l.bin")};
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  };
  expect_all_fail("tiny_llm", {
      {{t}, {"A subcommand is required"}},
      {{t, "bogus"}, {"see --help"}},
      {{t, "generate", "-p", "hi"}, {"--model is required"}},
      {{t, "generate", "-m", m}, {"give a prompt (-p TEXT) or --messages FILE"}},
      {gen({"--bogus"}), {"--bogus"}},
      {gen({"-n", "0"}), {"--max-tokens", "0"}},
      {gen({"-n", "-5"}), {"--max-tokens", "-5"}},
      {gen({"-n", "99999999999"}), {"--max-tokens", "99999999999"}},
      {gen({"-n", "abc"}), {"--max-tokens", "abc"}},
      {gen({"-n", "1.5"}), {"--max-tokens", "1.5"}},
      {gen({"--ctx", "0"}), {"--ctx", "0"}},
      {gen({"--ctx", "-1"}), {"--ctx", "-1"}},
      {gen({"--ctx", "99999999999"}), {"--ctx"}},
      {gen({"--backend", "tpu"}), {"--backend", "tpu"}},
      {gen({"--backend", ""}), {"--backend"}},
      {gen({"--temp", "-1"}), {"--temp"}},
      {gen({"--temp", "nan"}), {"--temp"}},
      {gen({"--temp", "1e400"}), {"--temp"}},
      {gen({"--top-k", "-1"}), {"--top-k"}},
      {gen({"--top-k", "99999999999"}), {"--top-k"}},
      {gen({"--top-p", "0"}), {"--top-p"}},
      {gen({"--top-p", "1.5"}), {"--top-p"}},
      {gen({"--top-p", "abc"}), {"--top-p"}},
      {gen({"--min-p", "1"}), {"--min-p"}},
      {gen({"--min-p", "-0.5"}), {"--min-p"}},
      {gen({"--repeat-penalty", "0"}), {"--repeat-penalty"}},
      {gen({"--repeat-penalty", "inf"}), {"--repeat-penalty"}},
      {gen({"--repeat-last-n", "-1"}), {"--repeat-last-n"}},
      {gen({"--seed", "-1"}), {"--seed", "'-1'"}},
      {gen({"--seed", "18446744073709551616"}), {"--seed"}},
      {gen({"--seed", "x"}), {"--seed"}},
      {gen({"--chat-template", "bogus"}), {"--chat-template", "bogus"}},
      {{t, "generate", "-m", dir.file("absent.gguf"), "-p", "hi"}, {dir.file("absent.gguf"), "cannot open"}},
      {{t, "generate", "-m", "/", "-p", "hi"}, {"/: not a regular file"}},
      // The byte-level tiny model gives one token per byte: 9 tokens do not fit a context of 8.
      {gen({"--ctx", "8"}, "123456789"), {"the prompt has 9 tokens but the context holds 8"}},
      {gen({}, ""), {"the prompt is empty"}},
      {gen({"--tools", tools}), {"--tools needs --chat or --messages"}},
      {gen({"--messages", conv}), {"--prompt excludes --messages"}},
      {gen({"--tools", dir.file("absent.json"), "--chat"}), {"--tools", "absent.json"}},
      {messages(not_json), {not_json, "not JSON"}},
      {messages(bad_role), {bad_role, "messages[0].role: 'bot' (expected system, user, assistant or tool)"}},
      {messages(empty), {empty, "the conversation has no messages"}},
      {messages(deep), {deep, "nested more than 256 levels deep"}},
      {messages(conv, {"--system", "S"}), {"--system does not go with --messages"}},
      {messages(conv, {"--tools", not_json}), {not_json, "not JSON"}},
      {messages(conv, {"--chat"}), {"--chat excludes --messages"}},
      {messages(conv, {"--no-special"}), {"--messages excludes --no-special"}},
      {{t, "chat", "-m", m, "-q", "--chat-template", "llama3", "--tools", tools},
       {"--tools: the llama3 chat format of this model renders no tools"}},
      {{t, "chat", "-m", m, "--tools", not_json}, {not_json, "not JSON"}},
      {{t, "chat", "-m", m, "-n", "0"}, {"--max-tokens"}},
      {{t, "chat", "-m", m, "--ctx", "0"}, {"--ctx"}},
      {{t, "chat", "-m", m, "--backend", "tpu"}, {"--backend"}},
      {{t, "generate", "-m", m, m, "-p", "hi"}, {"not expected", m}},
      {{t, "inspect"}, {"--model is required"}},
      {{t, "inspect", dir.file("absent.gguf")}, {dir.file("absent.gguf"), "cannot open"}},
      {{t, "tokenize", "-m", m}, {"give a TEXT or --file"}},
      {{t, "tokenize", "-m", m, "--file", dir.file("absent.txt")}, {"--file", "absent.txt"}},
      {{t, "tokenize", "-m", dir.file("absent.gguf"), "hi"}, {dir.file("absent.gguf")}},
      {logits({}), {"no tokens given"}},
      {logits({"--tokens", "1 2 -3"}), {"'-3' is not a token id"}},
      {logits({"--tokens", "1 abc"}), {"'abc' is not a token id"}},
      {logits({"--tokens", "1 99999999999"}), {"'99999999999' is not a token id"}},
      {logits({"--tokens", "1 272"}), {"token id 272 is outside the vocabulary of 272"}},
      {logits({"--tokens", "1 2 3", "--ctx", "2"}), {"3 tokens do not fit the context of 2"}},
      {{t, "logits", "-m", m, "--backend", "cpu", "-q", "--tokens", "1", "-o", dir.file("no/such/dir/l.bin")},
       {"cannot open for writing"}},
      {{t, "synth", "-o", dir.file("x.gguf"), "--preset", "huge"}, {"--preset", "huge"}},
      {{t, "synth", "-o", dir.file("x.gguf"), "--preset", "tiny", "--seed", "-1"}, {"--seed"}},
      {{t, "synth", "-o", dir.file("x.gguf"), "--preset", "tiny", "--weights", "Q4_K_M"}, {"--weights", "Q4_K_M"}},
      {{t, "synth", "-o", dir.file("no/such/dir/x.gguf"), "--preset", "tiny", "-q"}, {"no/such/dir/x.gguf"}},
      {{t, "synth", "-o", dir.file("x.gguf"), "--preset", "tiny", "--rope-scaling", "ntk"}, {"--rope-scaling", "ntk"}},
      {gen({"--rope-scaling", "ntk"}, "hi"), {"--rope-scaling", "ntk"}},
      {{t, "synth", "-o", dir.file("x.gguf"), "--preset", "tiny", "--tokenizer-pre", "bogus"}, {"--tokenizer-pre"}},
      {{t, "synth", "-o", dir.file("x.gguf"), "--preset", "tiny-llama2", "--tokenizer-pre", "qwen2"},
       {"--tokenizer-pre: the tiny-llama2 preset writes a SentencePiece vocabulary"}},
      {gen({"--rope-scale", "0"}, "hi"), {"--rope-scale"}},
      {gen({"--yarn-orig-ctx", "-5"}, "hi"), {"--yarn-orig-ctx"}},
      // CLI11's range check lets NaN through; the model's check names it.
      {logits({"--tokens", "1", "--rope-scale", "nan"}), {"the rope scale asked for = nan is out of range"}},
      {{t, "synth", "-o", dir.file("x.gguf"), "--preset", "tiny", "--rope-scaling", "yarn"},
       {"--rope-scaling yarn needs a --rope-scale above 0"}},
      {{t, "synth", "-o", dir.file("x.gguf"), "--preset", "tiny", "--rope-scale", "4"}, {"--rope-scale", "requires"}},
      {{t, "synth", "-o", dir.file("x.gguf"), "--preset", "tiny", "--rope-scaling", "yarn", "--rope-scale", "-4"},
       {"--rope-scale"}},
      {{t, "synth", "-o", dir.file("x.gguf"), "--preset", "tiny", "--rope-scaling", "linear", "--rope-scale", "2",
        "--yarn-orig-ctx", "64"},
       {"--yarn-orig-ctx is for --rope-scaling yarn"}},
  });
}

TEST(CliOptions, MaxTokensPastTheContextStopsAtTheFullContext) {
  // "hi" is 2 tokens; a context of 8 leaves room for the rest, and generation stops there.
  const RunResult r = run({tiny_llm_path(), "generate", "-m", base_model_path(), "-p", "hi", "-n", "1000", "--ctx",
                           "8", "--backend", "cpu", "-q"});
  expect_success(r);
  EXPECT_EQ(r.err, "tiny_llm: the context of 8 tokens is full; generation stopped\n") << r.describe();
  EXPECT_LE(r.out.size(), 8u) << r.describe();
}

TEST(CliOptions, ModelIsAnOptionOrTheFirstPositional) {
  // generate, chat and logits take the model as -m FILE or as a bare FILE, like inspect and the
  // benchmarks; the two forms give the same output (greedy decoding, one file).
  const std::string t = tiny_llm_path();
  const std::string m = base_model_path();
  ScratchDir dir;
  RunLimits chat_input;
  chat_input.stdin_text = "hello\n/exit\n";
  const std::vector<std::string> common = {"--backend", "cpu", "-q", "-n", "6"};
  for (const std::string sub : {"generate", "chat", "logits"}) {
    std::vector<std::string> extra = common;
    if (sub == "generate") extra.insert(extra.end(), {"-p", "hello"});
    if (sub == "logits") extra = {"--backend", "cpu", "-q", "--tokens", "1 2 3"};
    std::vector<std::string> with_option = {t, sub, "-m", m};
    std::vector<std::string> positional = {t, sub, m};
    with_option.insert(with_option.end(), extra.begin(), extra.end());
    positional.insert(positional.end(), extra.begin(), extra.end());
    if (sub == "logits") {
      with_option.insert(with_option.end(), {"-o", dir.file("a.bin")});
      positional.insert(positional.end(), {"-o", dir.file("b.bin")});
    }
    const RunLimits limits = sub == "chat" ? chat_input : RunLimits{};
    const RunResult a = run(with_option, limits);
    const RunResult b = run(positional, limits);
    expect_success(a);
    expect_success(b);
    if (sub == "logits") {
      const std::vector<uint8_t> x = read_bytes(dir.file("a.bin")), y = read_bytes(dir.file("b.bin"));
      EXPECT_EQ(x.size(), 3u * 272 * sizeof(float));
      EXPECT_EQ(x, y);
    } else {
      EXPECT_FALSE(a.out.empty()) << a.describe();
      EXPECT_EQ(a.out, b.out) << sub;
    }
  }
}

TEST(CliOptions, ChatSkipsAMessageLongerThanTheContext) {
  RunLimits limits;
  limits.stdin_text = std::string(100, 'x') + "\nhi\n/exit\n";
  const RunResult r = run({tiny_llm_path(), "chat", "-m", base_model_path(), "--ctx", "64", "-n", "4", "--backend",
                           "cpu", "-q", "--chat-template", "none"},
                          limits);
  expect_success(r);
  EXPECT_NE(r.out.find("[the message alone does not fit the context]"), std::string::npos) << r.describe();
  EXPECT_EQ(r.err, "") << r.describe();
}

// "/tool TEXT" sends a tool's result where the chat format renders tool messages (the base model's
// template is Qwen2.5's), and is refused, the chat going on, where it does not.
TEST(CliOptions, ChatSendsToolResults) {
  RunLimits limits;
  limits.stdin_text = "hi\n/tool {\"t\": 21}\n/exit\n";
  auto chat = [&](std::vector<std::string> extra) {
    std::vector<std::string> a = {tiny_llm_path(), "chat", "-m", base_model_path(), "-n", "2", "--temp", "0",
                                  "--backend", "cpu", "-q", "--stats"};
    a.insert(a.end(), extra.begin(), extra.end());
    return run(a, limits);
  };
  const RunResult qwen = chat({});
  expect_success(qwen);
  size_t turns = 0;
  for (size_t p = qwen.err.find("[prompt "); p != std::string::npos; p = qwen.err.find("[prompt ", p + 1)) ++turns;
  EXPECT_EQ(turns, 2u) << qwen.describe();
  EXPECT_EQ(qwen.out.find("renders no tool messages"), std::string::npos) << qwen.describe();
  const RunResult llama3 = chat({"--chat-template", "llama3"});
  expect_success(llama3);
  EXPECT_NE(llama3.out.find("[this model's chat format renders no tool messages]"), std::string::npos)
      << llama3.describe();
}

TEST(CliOptions, ChatTemplateDeepSeekR1CanBeChosen) {
  // The base model's tokenizer has BOS <|endoftext|> and no merges: the prompt
  // "<|endoftext|><｜User｜>hi<｜Assistant｜>" is the BOS and then one token per byte (12 + 2 + 17).
  const RunResult r = run({tiny_llm_path(), "generate", "-m", base_model_path(), "--backend", "cpu", "-q", "--chat",
                           "--chat-template", "deepseek-r1", "-p", "hi", "-n", "2", "--stats"});
  expect_success(r);
  EXPECT_NE(r.err.find("[prompt 32 tokens"), std::string::npos) << r.describe();
}

TEST(CliOptions, BenchmarksRejectBadValues) {
  const std::string b = tiny_llm_bench_path();
  const std::string k = tiny_llm_kernel_bench_path();
  const std::string m = base_model_path();
  ScratchDir dir;
  auto bench = [&](std::vector<std::string> extra) {
    std::vector<std::string> a = {b, m, "--backend", "cpu", "-q"};
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  };
  expect_all_fail("tiny_llm_bench", {
      {bench({"-n", "0"}), {"--max-tokens"}},
      {bench({"-n", "-1"}), {"--max-tokens"}},
      {bench({"--iters", "0"}), {"--iters"}},
      {bench({"--warmup", "-1"}), {"--warmup"}},
      {bench({"--ctx", "0"}), {"--ctx"}},
      {bench({"--context", "-1"}), {"--context"}},
      {bench({"--context", "99999999999"}), {"--context"}},
      {bench({"--backend", "tpu"}), {"--backend", "tpu"}},
      {bench({"extra"}), {"extra"}},
      {{b, dir.file("absent.gguf"), "--backend", "cpu", "-q"}, {dir.file("absent.gguf"), "cannot open"}},
      // The prompt plus --max-tokens must fit: a benchmark always generates exactly -n tokens.
      {bench({"--ctx", "16", "-n", "100"}), {"exceed the context of 16 tokens"}},
      {bench({"--ctx", "32", "--context", "64", "-n", "1"}), {"exceed the context of 32 tokens"}},
      {bench({"--raw", "-p", ""}), {"the prompt has no tokens"}},
      {bench({"--soak-tokens", "0"}), {"--soak-tokens"}},
      {bench({"--soak-tokens", "-1"}), {"--soak-tokens"}},
      {bench({"--soak-tokens", "10", "--ctx", "8"}), {"the prompt does not fit the context"}},
      {bench({"--profile", "--json"}), {"--profile"}},
  });
  expect_all_fail("tiny_llm_kernel_bench", {
      {{k, "--reps", "0"}, {"--reps"}},
      {{k, "--warmup", "-1"}, {"--warmup"}},
      {{k, "--prefill", "1"}, {"--prefill"}},
      {{k, "--contexts", "0"}, {"--contexts"}},
      {{k, "--contexts", "16", "-5"}, {"--contexts"}},
      {{k, "--flush-mb", "-1"}, {"--flush-mb"}},
      {{k, "--backend", "tpu"}, {"--backend", "tpu"}},
      {{k, dir.file("absent.gguf")}, {dir.file("absent.gguf"), "cannot open"}},
      {{k, "--json", "--csv"}, {"--csv excludes --json"}},
  });
}

TEST(CliOptions, KernelBenchRunsAtSmallShapes) {
  // Contexts and prefill rows below the position the rope/append cases write must still work.
  const RunResult r = run({tiny_llm_kernel_bench_path(), base_model_path(), "--backend", "cpu", "--reps", "1",
                           "--warmup", "0", "--flush-mb", "0", "--contexts", "16", "--prefill", "2", "--csv"});
  expect_success(r);
  EXPECT_NE(r.out.find("kv_append,"), std::string::npos) << r.describe();
}

TEST(CliOptions, KernelBenchOutputsAgreeAndSayWhatTheyMeasured) {
  // The table, the CSV and the JSON list the same cases; the JSON names the commit, the device and
  // the settings. On the CPU backend the time is the op trace's, ops have no grid or block, and the
  // CPU states no nominal bandwidth, so no fraction of it is printed.
  const std::vector<std::string> base = {tiny_llm_kernel_bench_path(), base_model_path(), "--backend", "cpu",
                                         "--reps", "2", "--warmup", "0", "--flush-mb", "0", "--contexts", "16",
                                         "--prefill", "4"};
  std::vector<std::string> csv = base, json = base;
  csv.push_back("--csv");
  json.push_back("--json");
  const std::vector<RunResult> r = run_all({base, csv, json});
  for (const RunResult& x : r) expect_success(x);

  const nlohmann::json j = nlohmann::json::parse(r[2].out);
  EXPECT_EQ(j.at("backend"), "cpu");
  EXPECT_FALSE(j.at("commit").get<std::string>().empty());
  EXPECT_FALSE(j.at("device").at("name").get<std::string>().empty());
  EXPECT_EQ(j.at("reps"), 2);
  EXPECT_EQ(j.at("timing"), "op time (the CPU backend's trace)");
  EXPECT_TRUE(j.at("device").at("peak_bandwidth_gbs").is_null());
  std::vector<std::string> csv_names;
  std::istringstream lines(r[1].out);
  std::string line;
  std::getline(lines, line);
  EXPECT_EQ(line, "name,shape,grid,block,us,bytes,gb_s,fraction_of_peak");
  while (std::getline(lines, line)) {
    csv_names.push_back(line.substr(0, line.find(',')));
    EXPECT_EQ(line.back(), ',') << line;  // no fraction of an unknown peak
  }
  ASSERT_EQ(j.at("results").size(), csv_names.size());
  ASSERT_GT(csv_names.size(), 10u);
  for (size_t i = 0; i < csv_names.size(); ++i) {
    const nlohmann::json& c = j.at("results")[i];
    EXPECT_EQ(c.at("name"), csv_names[i]);
    EXPECT_GT(c.at("us").get<double>(), 0.0);
    EXPECT_EQ(c.at("grid"), "-");
    EXPECT_TRUE(c.at("fraction_of_peak").is_null());
    EXPECT_NE(r[0].out.find(csv_names[i]), std::string::npos) << csv_names[i];
  }
  EXPECT_NE(r[0].out.find("time: op time (the CPU backend's trace)"), std::string::npos) << r[0].describe();
  EXPECT_EQ(r[0].out.find("0x0x0"), std::string::npos) << r[0].describe();
  EXPECT_EQ(r[0].out.find("0.0%"), std::string::npos) << r[0].describe();
}

TEST(CliOptions, BenchJsonSaysNullForWhatWasNotMeasured) {
  // On the CPU backend with --bandwidth-mb 0: no nominal or measured bandwidth and no kernels, so
  // those fields and the fractions of them are null, not 0; what was measured is a number.
  const std::vector<std::string> common = {tiny_llm_bench_path(), base_model_path(), "--backend", "cpu",
                                           "--max-tokens", "3", "--warmup", "0", "--iters", "1", "-q", "--json"};
  std::vector<std::string> unmeasured = common, measured = common;
  unmeasured.insert(unmeasured.end(), {"--bandwidth-mb", "0"});
  measured.insert(measured.end(), {"--bandwidth-mb", "16"});
  const std::vector<RunResult> r = run_all({unmeasured, measured});
  for (const RunResult& x : r) expect_success(x);
  const nlohmann::json a = nlohmann::json::parse(r[0].out), b = nlohmann::json::parse(r[1].out);
  for (const char* k : {"peak_bandwidth_gbs", "measured_read_gbs", "measured_read_mib", "driver", "multiprocessors"})
    EXPECT_TRUE(a.at("device").at(k).is_null()) << k;
  for (const char* k : {"kernels_per_decode_step", "decode_bandwidth_fraction", "decode_measured_bandwidth_fraction"})
    EXPECT_TRUE(a.at(k).is_null()) << k;
  EXPECT_GT(a.at("decode_gb_s").get<double>(), 0.0);
  EXPECT_GT(a.at("decode_tok_s").at("median").get<double>(), 0.0);
  EXPECT_GT(b.at("device").at("measured_read_gbs").get<double>(), 0.0);
  EXPECT_EQ(b.at("device").at("measured_read_mib"), 16);
  EXPECT_GT(b.at("decode_measured_bandwidth_fraction").get<double>(), 0.0);
}

TEST(CliOptions, InspectJsonKeepsTheMetadataTypes) {
  // Numbers, booleans and strings keep their types; arrays give element type, length and first items;
  // the model's configuration is there as the table's last line gives it.
  const RunResult r = run({tiny_llm_path(), "inspect", base_model_path(), "--json"});
  expect_success(r);
  const nlohmann::json j = nlohmann::json::parse(r.out);
  const nlohmann::json& m = j.at("metadata");
  EXPECT_EQ(m.at("general.architecture"), "qwen2");
  EXPECT_TRUE(m.at("qwen2.block_count").is_number_unsigned());
  EXPECT_EQ(m.at("qwen2.block_count"), 2);
  EXPECT_DOUBLE_EQ(m.at("qwen2.rope.freq_base").get<double>(), 1e6);
  EXPECT_EQ(m.at("tokenizer.ggml.add_bos_token"), false);
  const nlohmann::json& tokens = m.at("tokenizer.ggml.tokens");
  EXPECT_EQ(tokens.at("element_type"), "string");
  EXPECT_EQ(tokens.at("length"), 272);
  EXPECT_EQ(tokens.at("first")[0], "!");
  EXPECT_EQ(m.at("tokenizer.ggml.token_type").at("element_type"), "i32");
  // Strings are whole, where the table cuts them at 80 characters.
  EXPECT_GT(m.at("tokenizer.chat_template").get<std::string>().size(), 80u);
  EXPECT_EQ(m.at("tokenizer.chat_template").get<std::string>().rfind("{%- if tools %}", 0), 0u);
  const nlohmann::json& c = j.at("model");
  EXPECT_EQ(c.at("arch"), "qwen2");
  EXPECT_EQ(c.at("n_layer"), 2);
  EXPECT_EQ(c.at("n_vocab"), 272);
  EXPECT_EQ(c.at("n_head_kv"), 2);
  EXPECT_EQ(j.at("tensors").size(), 26u);
  EXPECT_EQ(j.at("tensors")[0].at("name"), "token_embd.weight");

  // A string that is not UTF-8 (GGUF does not enforce it) comes out with U+FFFD for its bad bytes.
  ScratchDir dir;
  ModelEdit edit;
  edit.set_keys["general.name"] = string_value("bad \xff\xfe name");
  write_edited(*GgufFile::open(base_model_path()), dir.file("latin.gguf"), edit);
  const RunResult bad = run({tiny_llm_path(), "inspect", dir.file("latin.gguf"), "--json"});
  expect_success(bad);
  EXPECT_EQ(nlohmann::json::parse(bad.out).at("metadata").at("general.name"), "bad \xef\xbf\xbd\xef\xbf\xbd name");
}

}  // namespace
}  // namespace tllm::test
