// What the programs do with input that is valid but easy to get wrong, run as child processes:
// closed standard streams, outputs that cannot be written (a full disk, a folder, a pipe where a
// file is replaced), options that contradict each other, a --ctx above the trained context, an
// unreadable chat input, the model given both ways in --help, BOS and special tokens in prompts,
// random seeds, a missing pre-tokenizer, a Llama 2-style model (SentencePiece vocabulary, Llama 2
// chat template) from synth to generate, also without the BOS / EOS id keys, a model with heads of
// their own width (attention.key_length) from synth to generate, weights of one type (IQ4_XS with
// its fallback) from synth to generate, and a benchmark that generates one token.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>

#include "hardening/hardening_util.h"
#include "model/synth.h"

namespace tllm::test {
namespace {

// Runs `command` through /bin/sh, for the redirections (closed streams, /dev/full) it sets up.
RunResult shell(const std::string& command, const RunLimits& limits = {}) {
  return run({"/bin/sh", "-c", command}, limits);
}

GgufValue bool_value(bool v) {
  GgufValue g;
  g.type = GgufType::BOOL;
  g.i = v ? 1 : 0;
  g.u = g.i;
  return g;
}

// The "[prompt N tokens" figure of --stats.
int stats_prompt_tokens(const RunResult& r) {
  std::smatch m;
  if (!std::regex_search(r.err, m, std::regex("\\[prompt ([0-9]+) tokens"))) {
    ADD_FAILURE() << "no --stats line: " << r.describe();
    return -1;
  }
  return std::stoi(m[1]);
}

TEST(CliBehaviour, ClosedStandardStreamsAreNotTakenByFiles) {
  const std::string t = tiny_llm_path();
  const std::string m = base_model_path();
  ScratchDir dir;
  const std::string out = dir.file("synth.gguf");
  // stdin closed: chat sees the end of its input instead of reading the model file.
  const RunResult chat = shell("exec " + t + " chat -m " + m + " --backend cpu -q <&-");
  expect_success(chat);
  EXPECT_EQ(chat.err, "") << chat.describe();
  // stderr closed: the progress lines must not land in the model being written.
  const RunResult synth = shell("exec " + t + " synth --preset tiny -o " + out + " 2>&-");
  expect_success(synth);
  const RunResult gen = run(generate_command(out));
  expect_success(gen);
  EXPECT_TRUE(expect_inspect_outcome(run(inspect_command(out)), out));
  // stdout closed: output goes nowhere, as to /dev/null, without an error.
  expect_success(shell("exec " + t + " generate -m " + m + " -p hi -n 2 --backend cpu -q >&-"));
}

TEST(CliBehaviour, OutputsThatCannotBeWrittenFailBeforeTheWork) {
  const std::string t = tiny_llm_path();
  const std::string b = tiny_llm_bench_path();
  const std::string m = base_model_path();
  ScratchDir dir;
  const std::string fifo = dir.file("pipe");
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  const std::string folder = dir.file("folder");
  ASSERT_EQ(mkdir(folder.c_str(), 0700), 0);
  const std::vector<RunResult> r = run_all({
      {t, "synth", "-o", fifo, "--preset", "tiny", "-q"},
      {t, "synth", "-o", folder, "--preset", "tiny", "-q"},
      {t, "synth", "-o", folder + "/", "--preset", "tiny", "-q"},
      {t, "synth", "-o", "", "--preset", "tiny", "-q"},
      // The full-size preset takes seconds to write; the check comes first.
      {t, "synth", "-o", dir.file("no/such/dir/x.gguf"), "-q"},
      {t, "logits", "-m", m, "--backend", "cpu", "-q", "--tokens", "1", "-o", folder},
      {b, m, "--backend", "cpu", "-q", "-n", "2", "--iters", "1", "--warmup", "0", "--profile", "--trace-out", folder},
  });
  expect_clean_failure(r[0], "tiny_llm", {fifo, "not a regular file"});
  expect_clean_failure(r[1], "tiny_llm", {folder, "it is a folder"});
  expect_clean_failure(r[2], "tiny_llm", {folder, "it is a folder"});
  expect_clean_failure(r[3], "tiny_llm", {"--output", "empty"});
  expect_clean_failure(r[4], "tiny_llm", {"no/such/dir/x.gguf", "does not exist"});
  EXPECT_LT(r[4].seconds, 2.0) << r[4].describe();
  expect_clean_failure(r[5], "tiny_llm", {folder, "it is a folder"});
  expect_clean_failure(r[6], "tiny_llm_bench", {folder, "--trace-out", "it is a folder"});
  EXPECT_EQ(r[6].out, "") << "the benchmark ran before its --trace-out was checked: " << r[6].describe();
  struct stat st {};
  ASSERT_EQ(stat(fifo.c_str(), &st), 0);
  EXPECT_TRUE(S_ISFIFO(st.st_mode)) << "synth replaced the pipe";
}

TEST(CliBehaviour, AFullStdoutIsAnError) {
  const std::string t = tiny_llm_path();
  const std::string m = base_model_path();
  const std::string gen = t + " generate -m " + m + " -p hi -n 4 --backend cpu -q";
  const std::string bench = tiny_llm_bench_path() + " " + m + " --backend cpu -q -n 2 --iters 1 --warmup 0 --bandwidth-mb 0";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"tiny_llm", gen},
      {"tiny_llm", t + " tokenize -m " + m + " hello"},
      {"tiny_llm", t + " inspect " + m},
      {"tiny_llm", t + " inspect " + m + " --json"},
      {"tiny_llm", "printf 'hello\\n' | " + t + " chat -m " + m + " -n 4 --backend cpu -q"},
      {"tiny_llm_bench", bench},
      {"tiny_llm_bench", bench + " --json"},
      {"tiny_llm_kernel_bench", tiny_llm_kernel_bench_path() + " " + m +
                                    " --backend cpu --reps 1 --warmup 0 --flush-mb 0 --contexts 16 --prefill 2"},
  };
  for (const auto& [program, command] : cases) {
    const RunResult r = shell(command + " >/dev/full");
    expect_clean_failure(r, program, {"writing the output failed: No space left on device"});
  }
}

TEST(CliBehaviour, ContradictoryOrUnknownOptionsAreNamed) {
  const std::string t = tiny_llm_path();
  const std::string m = base_model_path();
  ScratchDir dir;
  const std::string ids = dir.file("ids.txt"), text = dir.file("text.txt");
  write_text(ids, "1 2");
  write_text(text, "hi");
  const std::vector<std::string> logits = {t, "logits", "-m", m, "--backend", "cpu", "-q", "-o", dir.file("l.bin")};
  auto with = [](std::vector<std::string> a, const std::vector<std::string>& extra) {
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  };
  const std::vector<std::pair<std::vector<std::string>, std::vector<std::string>>> cases = {
      {with(logits, {"-p", "hi", "--tokens", "1 2"}), {"--tokens", "excludes", "--prompt"}},
      {with(logits, {"-p", "hi", "--tokens-file", ids}), {"--tokens-file", "excludes", "--prompt"}},
      {with(logits, {"--tokens", "1", "--tokens-file", ids}), {"--tokens", "excludes", "--tokens-file"}},
      {{t, "tokenize", "-m", m, "--file", text, "hello"}, {"excludes", "--file"}},
      {{t, "generate", "-m", m, "-p", "hi", "--chat", "--no-special"}, {"--chat", "excludes", "--no-special"}},
      {{t, "--bogus"}, {"'--bogus'"}},
      {{t, "--bogus", "generate", "-m", m, "-p", "hi"}, {"--bogus"}},
      {{t, "generate", "--bogus", "-m", m}, {"not expected: --bogus"}},
  };
  std::vector<std::vector<std::string>> commands;
  for (const auto& c : cases) commands.push_back(c.first);
  const std::vector<RunResult> r = run_all(commands);
  for (size_t i = 0; i < cases.size(); ++i) {
    expect_clean_failure(r[i], "tiny_llm", cases[i].second);
    EXPECT_EQ(r[i].out, "") << r[i].describe();
  }
}

TEST(CliBehaviour, ContextAboveTheTrainedOneIsCappedAloud) {
  // The tiny model is trained for 256 tokens.
  const std::string t = tiny_llm_path();
  const std::string m = base_model_path();
  const std::string prompt(300, 'x');
  const std::vector<RunResult> r = run_all({
      {t, "generate", "-m", m, "-p", "hi", "-n", "2", "--backend", "cpu", "--ctx", "1000"},
      {t, "generate", "-m", m, "-p", "hi", "-n", "2", "--backend", "cpu", "--ctx", "1000", "-q"},
      {t, "generate", "-m", m, "-p", prompt, "--backend", "cpu", "--ctx", "1000", "-q"},
      {t, "generate", "-m", m, "-p", prompt, "--backend", "cpu", "--ctx", "100", "-q"},
      {tiny_llm_bench_path(), m, "--backend", "cpu", "-q", "--ctx", "1000", "-n", "250"},
  });
  expect_success(r[0]);
  EXPECT_NE(r[0].err.find("tiny_llm: note: --ctx 1000 is above the model's trained context of 256 tokens; using 256\n"),
            std::string::npos)
      << r[0].describe();
  expect_success(r[1]);
  EXPECT_EQ(r[1].err, "") << r[1].describe();
  expect_clean_failure(r[2], "tiny_llm", {"the context holds 256", "trained context is 256 tokens, so --ctx cannot go higher"});
  expect_clean_failure(r[3], "tiny_llm", {"the context holds 100", "raise --ctx (up to 256"});
  expect_clean_failure(r[4], "tiny_llm_bench", {"exceed the context of 256", "so --ctx cannot go higher"});
}

TEST(CliBehaviour, ChatReportsUnreadableInputAndAFirstTurnThatCannotFit) {
  const std::string t = tiny_llm_path();
  const std::string m = base_model_path();
  ScratchDir dir;
  const RunResult folder = shell("exec " + t + " chat -m " + m + " --backend cpu -q < " + dir.file(""));
  expect_clean_failure(folder, "tiny_llm", {"reading the input failed"});

  RunLimits hi;
  hi.stdin_text = "hi\n";
  const RunResult small = run({t, "chat", "-m", m, "--ctx", "5", "--backend", "cpu", "-q"}, hi);
  expect_success(small);
  EXPECT_EQ(small.out, "[the message alone does not fit the context]\n") << small.describe();
}

TEST(CliBehaviour, HelpShowsTheModelAsOneOfTwoForms) {
  const std::string t = tiny_llm_path();
  std::vector<std::vector<std::string>> commands;
  for (const char* sub : {"generate", "chat", "logits", "inspect"}) commands.push_back({t, sub, "--help"});
  for (const RunResult& r : run_all(commands)) {
    expect_success(r);
    EXPECT_NE(r.out.find("model: -m FILE or FILE (one of them)"), std::string::npos) << r.describe();
    std::istringstream lines(r.out);
    for (std::string line; std::getline(lines, line);) {
      if (line.find("model") != std::string::npos) {
        EXPECT_EQ(line.find("REQUIRED"), std::string::npos) << line;
      }
    }
  }
}

TEST(CliBehaviour, PromptsGetBosAndSpecialTokens) {
  // A copy of the tiny model that asks for a BOS (id 256, "<|endoftext|>"). Each prompt's token
  // count shows in --stats, or in the rows that logits writes (272 float32 values each).
  const std::string t = tiny_llm_path();
  const std::string m = base_model_path();
  ScratchDir dir;
  const std::string bos = dir.file("bos.gguf");
  ModelEdit edit;
  edit.set_keys["tokenizer.ggml.add_bos_token"] = bool_value(true);
  write_edited(*GgufFile::open(m), bos, edit);
  auto gen = [&](const std::string& model, std::vector<std::string> extra) {
    std::vector<std::string> a = {t, "generate", "-m", model, "-n", "1", "--backend", "cpu", "-q", "--stats"};
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  };
  RunLimits chat_input;
  chat_input.stdin_text = "hi\n";
  const std::vector<std::string> chat = {t, "chat", "-n", "1", "--backend", "cpu", "-q", "--stats", "-m"};
  const std::vector<RunResult> r = run_all({
      gen(m, {"-p", "hi"}), gen(bos, {"-p", "hi"}), gen(bos, {"-p", "<|endoftext|>hi"}),
      gen(m, {"-p", "hi", "--chat"}), gen(bos, {"-p", "hi", "--chat"}),
      gen(m, {"-p", "<|im_end|>"}), gen(m, {"-p", "<|im_end|>", "--no-special"}),
  });
  for (const RunResult& x : r) expect_success(x);
  EXPECT_EQ(stats_prompt_tokens(r[0]), 2);
  EXPECT_EQ(stats_prompt_tokens(r[1]), 3);
  EXPECT_EQ(stats_prompt_tokens(r[2]), 3) << "a prompt that starts with BOS gets no second one";
  EXPECT_EQ(stats_prompt_tokens(r[4]), stats_prompt_tokens(r[3]) + 1);
  EXPECT_EQ(stats_prompt_tokens(r[5]), 1) << "special-token text is one token by default";
  EXPECT_GT(stats_prompt_tokens(r[6]), 1);

  std::vector<RunResult> c;
  for (const std::string& model : {m, bos}) {
    std::vector<std::string> a = chat;
    a.push_back(model);
    c.push_back(run(a, chat_input));
    expect_success(c.back());
  }
  EXPECT_EQ(stats_prompt_tokens(c[1]), stats_prompt_tokens(c[0]) + 1);

  auto logits_rows = [&](const std::string& model, std::vector<std::string> extra) {
    const std::string out = dir.file("l.bin");
    std::vector<std::string> a = {t, "logits", "-m", model, "--backend", "cpu", "-q", "-o", out};
    a.insert(a.end(), extra.begin(), extra.end());
    expect_success(run(a));
    return read_bytes(out).size() / (272 * sizeof(float));
  };
  EXPECT_EQ(logits_rows(m, {"-p", "hi"}), 2u);
  EXPECT_EQ(logits_rows(bos, {"-p", "hi"}), 3u);
  EXPECT_EQ(logits_rows(m, {"-p", "<|im_end|>"}), 1u);
  EXPECT_GT(logits_rows(m, {"-p", "<|im_end|>", "--no-special"}), 1u);
}

TEST(CliBehaviour, SamplingSeedIsRandomUnlessGiven) {
  const std::string t = tiny_llm_path();
  const std::string m = base_model_path();
  const std::vector<std::string> sample = {t, "generate", "-m", m, "-p", "hi", "-n", "2", "--backend", "cpu", "-q",
                                           "--stats", "--temp", "1"};
  std::vector<std::string> seeded = sample;
  seeded.insert(seeded.end(), {"--seed", "42"});
  const std::vector<RunResult> r = run_all({sample, sample, seeded,
                                            {t, "generate", "-m", m, "-p", "hi", "-n", "2", "--backend", "cpu", "-q",
                                             "--top-k", "5", "--min-p", "0.1"}});
  for (const RunResult& x : r) expect_success(x);
  const std::regex seed("; seed ([0-9]+)\\]");
  std::smatch a, b, c;
  ASSERT_TRUE(std::regex_search(r[0].err, a, seed)) << r[0].describe();
  ASSERT_TRUE(std::regex_search(r[1].err, b, seed)) << r[1].describe();
  ASSERT_TRUE(std::regex_search(r[2].err, c, seed)) << r[2].describe();
  EXPECT_NE(a[1].str(), b[1].str()) << "two runs without --seed drew the same seed";
  EXPECT_EQ(c[1].str(), "42");
  EXPECT_EQ(r[3].err, "tiny_llm: warning: --top-k, --min-p: no effect at temperature 0 (greedy decoding); set --temp "
                      "to sample\n")
      << r[3].describe();
}

TEST(CliBehaviour, AMissingPreTokenizerIsNamed) {
  ScratchDir dir;
  const std::string path = dir.file("no-pre.gguf");
  ModelEdit edit;
  edit.drop_keys.insert("tokenizer.ggml.pre");
  write_edited(*GgufFile::open(base_model_path()), path, edit);
  const std::vector<RunResult> r = run_all({{tiny_llm_path(), "tokenize", "-m", path, "hello"}, generate_command(path)});
  for (const RunResult& x : r) {
    expect_success(x);
    EXPECT_EQ(x.err, "tiny_llm: warning: " + path +
                         ": tokenizer.ggml.pre is missing; assuming the gpt-2 pre-tokenizer ('default')\n")
        << x.describe();
  }
}

TEST(CliBehaviour, ModelsWithRopeFrequencyFactorsStillLoad) {
  // rope_freqs.weight (Llama 3.1's rope scaling) is used by the rope, so the unused-tensor check
  // leaves it alone: the synth preset that carries it runs.
  ScratchDir dir;
  const std::string path = dir.file("rope-freqs.gguf");
  write_synth_model(tiny_llama3_test_model(), path);
  expect_success(run(generate_command(path)));
}

TEST(CliBehaviour, ALlama2StyleModelRunsFromSynthToChat) {
  const std::string t = tiny_llm_path();
  ScratchDir dir;
  const std::string m = dir.file("llama2.gguf");
  const std::vector<RunResult> made = run_all({
      {t, "synth", "--preset", "tiny-llama2", "-q", "-o", m},
      {t, "synth", "--preset", "tiny-llama2", "-q", "--tokenizer-dir", dir.file(""), "-o", dir.file("x.gguf")},
  });
  expect_success(made[0]);
  expect_clean_failure(made[1], "tiny_llm", {"--tokenizer-dir", "tiny-llama2", "SentencePiece"});
  const std::vector<RunResult> r = run_all({
      {t, "tokenize", "-m", m, "<s>[INST] hi [/INST]"},
      {t, "generate", "-m", m, "--backend", "cpu", "--chat", "-p", "hi", "--max-tokens", "4", "--stats"},
      {t, "inspect", m},
  });
  for (const RunResult& x : r) expect_success(x);
  // BOS, then "▁[" "INST" "]" "▁hi" "▁[" "/" "INST" "]" (see the piece list in synth.cpp).
  EXPECT_EQ(r[0].out, "1 270 269 297 273 270 298 269 297\n") << r[0].describe();
  // The chat prompt "<s>[INST] hi [/INST]" opens with BOS, so the program adds none.
  EXPECT_EQ(stats_prompt_tokens(r[1]), 9);
  const std::string& listing = r[2].out;
  EXPECT_TRUE(std::regex_search(listing, std::regex("\ntokenizer\\.ggml\\.model +\"llama\"\n"))) << listing;
  EXPECT_TRUE(std::regex_search(listing, std::regex("\ntokenizer\\.ggml\\.scores +\\[f32 x 320\\]"))) << listing;
}

TEST(CliBehaviour, ASentencePieceModelWithoutSpecialIdsChats) {
  // Without tokenizer.ggml.bos_token_id / eos_token_id the SentencePiece tokenizer takes <s> and
  // </s>; the chat prompt writes the same texts, so it opens with the BOS token (id 1).
  const std::string t = tiny_llm_path();
  ScratchDir dir;
  const std::string full = dir.file("llama2.gguf");
  const std::string m = dir.file("llama2-no-ids.gguf");
  write_synth_model(tiny_llama2_test_model(), full);
  ModelEdit edit;
  edit.drop_keys = {"tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id"};
  write_edited(*GgufFile::open(full), m, edit);
  RunLimits chat_input;
  chat_input.stdin_text = "hi\n";
  const std::vector<RunResult> r = run_all({
      {t, "tokenize", "-m", m, "<s>[INST] hi [/INST]"},
      {t, "generate", "-m", m, "--backend", "cpu", "--chat", "-p", "hi", "--max-tokens", "4", "--stats"},
  });
  const RunResult chat = run({t, "chat", "-m", m, "--backend", "cpu", "-q", "--max-tokens", "4", "--stats"}, chat_input);
  for (const RunResult& x : {r[0], r[1], chat}) expect_success(x);
  EXPECT_EQ(r[0].out, "1 270 269 297 273 270 298 269 297\n") << r[0].describe();
  EXPECT_EQ(stats_prompt_tokens(r[1]), 9);
  EXPECT_EQ(stats_prompt_tokens(chat), 9);
}

// Each chat turn encodes the whole conversation and runs only what the context does not hold: the
// first turn's prompt is reused by the second, also where the template rewrites earlier replies
// (Llama 2 strips them, so what follows the first reply runs again).
TEST(CliBehaviour, ChatTurnsReuseTheContext) {
  const std::string t = tiny_llm_path();
  ScratchDir dir;
  const std::string llama2 = dir.file("llama2.gguf");
  write_synth_model(tiny_llama2_test_model(), llama2);
  RunLimits turns;
  turns.stdin_text = "hi\nand again\n/reset\nhi\n";
  for (const std::string& m : {base_model_path(), llama2}) {
    const RunResult r = run({t, "chat", "-m", m, "-n", "3", "--backend", "cpu", "-q", "--stats"}, turns);
    expect_success(r);
    std::vector<std::pair<int, int>> prompts;  // (tokens run, tokens reused) per turn
    const std::regex line("\\[prompt ([0-9]+) tokens \\(([0-9]+) reused from the context\\)");
    for (std::sregex_iterator it(r.err.begin(), r.err.end(), line), end; it != end; ++it) {
      prompts.emplace_back(std::stoi((*it)[1]), std::stoi((*it)[2]));
    }
    ASSERT_EQ(prompts.size(), 3u) << r.describe();
    EXPECT_EQ(prompts[0].second, 0) << r.describe();
    EXPECT_GE(prompts[1].second, prompts[0].first) << r.describe();
    EXPECT_GT(prompts[1].first, 0) << r.describe();
    EXPECT_EQ(prompts[2], prompts[0]) << "after /reset the first turn runs again in full: " << r.describe();
  }
}

// Heads whose width is not n_embd / n_head (attention.key_length, as in Mistral-Nemo): the
// tiny-nemo preset (n_embd 256, 4 heads of 128) from synth through inspect, generate on the CPU
// and the kernel benchmark at the model's shapes, whose output projection takes n_head·head_dim =
// 512 inputs.
TEST(CliBehaviour, AModelWithHeadsOfTheirOwnWidthRunsFromSynthToGenerate) {
  const std::string t = tiny_llm_path();
  ScratchDir dir;
  const std::string m = dir.file("nemo.gguf");
  expect_success(run({t, "synth", "--preset", "tiny-nemo", "-q", "-o", m}));
  const std::vector<RunResult> r = run_all({
      {t, "inspect", m},
      {t, "generate", "-m", m, "--backend", "cpu", "-p", "hello", "--max-tokens", "6", "--stats"},
      {tiny_llm_kernel_bench_path(), m, "--backend", "cpu", "--warmup", "0", "--reps", "1",
       "--prefill", "16", "--contexts", "32", "--flush-mb", "0", "--csv"},
  });
  for (const RunResult& x : r) expect_success(x);
  const std::string& listing = r[0].out;
  for (const char* line : {"\nllama\\.attention\\.key_length +128\n",
                           "\nblk\\.0\\.attn_output\\.weight +Q4_K +512 x 256 ",
                           "n_embd 256, n_ff 256, 4 heads / 2 KV heads \\(head_dim 128\\)"}) {
    EXPECT_TRUE(std::regex_search(listing, std::regex(line))) << line << "\n" << listing;
  }
  EXPECT_NE(r[1].err.find("generated 6 tokens"), std::string::npos) << r[1].describe();
  for (const char* row : {"\nw8a16_matmul_m1 attn_out_proj,M=1 N=256 K=512,",
                          "\nmatmul_prefill attn_out_proj,M=16 N=256 K=512,",
                          "\nw8a16_matmul_m1_attention_decode,n_kv=32 N=256,"}) {
    EXPECT_NE(r[2].out.find(row), std::string::npos) << row << r[2].describe();
  }
}

// synth --weights: every matrix in the type asked for where its rows are whole blocks of it (the
// tiny preset's ffn_down, rows of n_ff = 256), llama.cpp's fallback elsewhere (IQ4_NL for IQ4_XS on
// rows of n_embd = 64); the file inspects and generates on the CPU. An unknown type is one line.
TEST(CliBehaviour, SynthWeightsOfOneTypeRunFromSynthToGenerate) {
  const std::string t = tiny_llm_path();
  ScratchDir dir;
  const std::string m = dir.file("iq4_xs.gguf");
  expect_success(run({t, "synth", "--preset", "tiny", "--weights", "iq4_xs", "-q", "-o", m}));
  const std::vector<RunResult> r = run_all({
      {t, "inspect", m},
      {t, "generate", "-m", m, "--backend", "cpu", "-p", "hello", "--max-tokens", "4", "--stats"},
      {t, "synth", "--preset", "tiny", "--weights", "q8_1", "-q", "-o", dir.file("x.gguf")},
  });
  expect_success(r[0]);
  expect_success(r[1]);
  const std::string& listing = r[0].out;
  for (const char* line : {"\ngeneral\\.file_type +30\n",
                           "\nblk\\.0\\.ffn_down\\.weight +IQ4_XS +256 x 64 ",
                           "\nblk\\.1\\.ffn_down\\.weight +IQ4_XS +256 x 64 ",
                           "\nblk\\.0\\.attn_q\\.weight +IQ4_NL +64 x 64 ",
                           "\ntoken_embd\\.weight +IQ4_NL +64 x 272 "}) {
    EXPECT_TRUE(std::regex_search(listing, std::regex(line))) << line << "\n" << listing;
  }
  EXPECT_NE(r[1].err.find("generated 4 tokens"), std::string::npos) << r[1].describe();
  expect_clean_failure(r[2], "tiny_llm", {"--weights", "q8_1"});
  EXPECT_FALSE(std::ifstream(dir.file("x.gguf")).good()) << "a file was written for an unknown type";
}

// generate --messages renders a conversation with a tool call and a tool message through the model's
// chat template (the synthetic model's is Qwen2.5's). Its byte-level vocabulary has one token per
// byte and per special token, so the prompt's length says the rendering is the expected one.
TEST(CliBehaviour, GenerateContinuesAConversationWithAToolCall) {
  const std::string t = tiny_llm_path();
  ScratchDir dir;
  const std::string conv = dir.file("conv.json");
  const std::string json =
      R"([{"role": "system", "content": "S"}, {"role": "user", "content": "Q?"}, {"role": "assistant", )"
      R"("content": null, "tool_calls": [{"function": {"name": "f", "arguments": {"x": 1}}}]}, )"
      R"({"role": "tool", "content": "R"}])";
  write_text(conv, json);
  const std::string rendered =
      "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nQ?<|im_end|>\n<|im_start|>assistant\n<tool_call>\n"
      "{\"name\": \"f\", \"arguments\": {\"x\": 1}}\n</tool_call><|im_end|>\n<|im_start|>user\n<tool_response>\n"
      "R\n</tool_response><|im_end|>\n<|im_start|>assistant\n";
  size_t tokens = rendered.size();
  for (const std::string special : {"<|im_start|>", "<|im_end|>"}) {
    for (size_t p = rendered.find(special); p != std::string::npos; p = rendered.find(special, p + 1)) {
      tokens -= special.size() - 1;
    }
  }
  const RunResult r = run({t, "generate", "-m", base_model_path(), "--messages", conv, "--backend", "cpu", "-q",
                           "-n", "2", "--stats"});
  expect_success(r);
  EXPECT_NE(r.err.find("[prompt " + std::to_string(tokens) + " tokens"), std::string::npos) << r.describe();

  // --json: one object with the reply, the assistant message it stands for and the figures.
  const RunResult j = run({t, "generate", "-m", base_model_path(), "--messages", conv, "--backend", "cpu", "-q",
                           "-n", "2", "--temp", "0", "--json"});
  expect_success(j);
  const nlohmann::json out = nlohmann::json::parse(j.out);
  EXPECT_EQ(out.at("prompt_tokens").get<size_t>(), tokens) << j.out;
  EXPECT_LE(out.at("generated_tokens").get<int>(), 2) << j.out;
  EXPECT_EQ(out.at("message").at("role"), "assistant") << j.out;
  EXPECT_EQ(out.at("message").at("content"), out.at("text")) << j.out;  // random weights call no tool
  for (const char* key : {"stop", "prefill_ms", "ttft_ms", "decode_tok_s", "seed"}) {
    EXPECT_TRUE(out.contains(key)) << key << "\n" << j.out;
  }
}

TEST(CliBehaviour, BenchWithOneTokenLeavesDecodeUnmeasured) {
  // -n 1 takes its only token from prefill: no decode step, so no TPOT, decode rate or GB/s.
  const std::vector<std::string> base = {tiny_llm_bench_path(), base_model_path(), "--backend", "cpu", "-q", "-n", "1",
                                         "--iters", "2", "--warmup", "0", "--bandwidth-mb", "0"};
  std::vector<std::string> json = base;
  json.push_back("--json");
  const std::vector<RunResult> r = run_all({base, json});
  for (const RunResult& x : r) expect_success(x);
  EXPECT_TRUE(std::regex_search(r[0].out, std::regex("\nTPOT \\(ms\\) +- +- +-\n"))) << r[0].describe();
  EXPECT_TRUE(std::regex_search(r[0].out, std::regex("\ndecode \\(tok/s\\) +- +- +-\n"))) << r[0].describe();
  EXPECT_NE(r[0].out.find("-> - GB/s"), std::string::npos) << r[0].describe();
  const nlohmann::json j = nlohmann::json::parse(r[1].out);
  for (const char* k : {"tpot_ms", "decode_tok_s", "decode_gb_s"}) EXPECT_TRUE(j.at(k).is_null()) << k;
  EXPECT_GT(j.at("ttft_ms").at("median").get<double>(), 0.0);
}

}  // namespace
}  // namespace tllm::test
