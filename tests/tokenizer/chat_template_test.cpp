// Chat format detection (from template text and from GGUF metadata) and prompt rendering.
#include <gtest/gtest.h>

#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "model/chat_template.h"
#include "model/gguf.h"

namespace tllm {
namespace {

// Abridged chat templates with the parts detection looks at, in the shapes the model families use.
// Qwen2.5: the default system prompt is a separate literal in an else branch ('\n' as a Jinja escape).
const std::string kQwen25Template =
    "{%- if messages[0]['role'] == 'system' %}\n"
    "    {{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}\n"
    "{%- else %}\n"
    "    {{- '<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\\n' }}\n"
    "{%- endif %}\n"
    "{%- for message in messages %}{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}{%- endfor %}\n"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}\n";
// SmolLM2: a whole literal system turn with real newlines inside the string.
const std::string kSmolLM2System = "You are a helpful AI assistant named SmolLM, trained by Hugging Face";
const std::string kSmolLM2Template =
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\n" + kSmolLM2System + "<|im_end|>\n' }}"
    "{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";
// A ChatML template without a default system prompt.
const std::string kPlainChatML =
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + "
    "'<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";
const std::string kLlama3Template =
    "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = "
    "'<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'+ message['content'] | trim + "
    "'<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}"
    "{{ content }}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{% endif %}";
const std::string kGemmaTemplate =
    "{{ bos_token }}{% for message in messages %}{{ '<start_of_turn>' + message['role'] + '\\n' + "
    "message['content'] | trim + '<end_of_turn>\\n' }}{% endfor %}";

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const ChatTemplateError& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(ChatTemplate, ParseNames) {
  EXPECT_EQ(parse_chat_template_name("chatml"), ChatTemplate::ChatML);
  EXPECT_EQ(parse_chat_template_name("llama3"), ChatTemplate::Llama3);
  EXPECT_EQ(parse_chat_template_name("none"), ChatTemplate::None);
  const std::string msg = error_of([] { parse_chat_template_name("vicuna"); });
  EXPECT_NE(msg.find("'vicuna'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("chatml"), std::string::npos) << msg;
  for (ChatTemplate t : {ChatTemplate::ChatML, ChatTemplate::Llama3, ChatTemplate::None}) {
    EXPECT_EQ(parse_chat_template_name(chat_template_name(t)), t);
  }
}

TEST(ChatTemplate, DetectsQwen25WithDefaultSystem) {
  const ChatFormat f = detect_chat_format(kQwen25Template, true, "");
  EXPECT_EQ(f.kind, ChatTemplate::ChatML);
  EXPECT_EQ(f.default_system, "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.");
}

TEST(ChatTemplate, DetectsSmolLM2WithDefaultSystem) {
  const ChatFormat f = detect_chat_format(kSmolLM2Template, true, "");
  EXPECT_EQ(f.kind, ChatTemplate::ChatML);
  EXPECT_EQ(f.default_system, kSmolLM2System);
}

TEST(ChatTemplate, DetectsPlainChatMLAndLlama3) {
  const ChatFormat chatml = detect_chat_format(kPlainChatML, true, "");
  EXPECT_EQ(chatml.kind, ChatTemplate::ChatML);
  EXPECT_EQ(chatml.default_system, "");
  const ChatFormat llama3 = detect_chat_format(kLlama3Template, false, "");
  EXPECT_EQ(llama3.kind, ChatTemplate::Llama3);
  EXPECT_EQ(llama3.default_system, "");
}

TEST(ChatTemplate, UnknownTemplateIsAnError) {
  const std::string msg = error_of([] { detect_chat_format(kGemmaTemplate, false, ""); });
  EXPECT_NE(msg.find("unknown chat template"), std::string::npos) << msg;
  EXPECT_NE(msg.find("--chat-template chatml|llama3|none"), std::string::npos) << msg;
  // An override wins over an unrecognised template.
  EXPECT_EQ(detect_chat_format(kGemmaTemplate, false, "none").kind, ChatTemplate::None);
}

TEST(ChatTemplate, NoTemplate) {
  EXPECT_EQ(detect_chat_format("", true, "").kind, ChatTemplate::ChatML);
  EXPECT_EQ(detect_chat_format("", true, "").default_system, "");
  const std::string msg = error_of([] { detect_chat_format("", false, ""); });
  EXPECT_NE(msg.find("--chat-template"), std::string::npos) << msg;
  EXPECT_EQ(detect_chat_format("", false, "llama3").kind, ChatTemplate::Llama3);
}

TEST(ChatTemplate, OverrideKeepsDefaultSystemOfSameFormat) {
  EXPECT_EQ(detect_chat_format(kSmolLM2Template, true, "chatml").default_system, kSmolLM2System);
  const ChatFormat f = detect_chat_format(kSmolLM2Template, true, "llama3");
  EXPECT_EQ(f.kind, ChatTemplate::Llama3);
  EXPECT_EQ(f.default_system, "");
}

TEST(ChatTemplate, RenderChatML) {
  ChatFormat f{ChatTemplate::ChatML, ""};
  EXPECT_EQ(render_chat(f, {{"user", "Hi"}}, true),
            "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(render_chat(f, {{"system", "S"}, {"user", "Hi"}, {"assistant", "Yo"}}, false),
            "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
            "<|im_start|>assistant\nYo<|im_end|>\n");
}

TEST(ChatTemplate, RenderInsertsDefaultSystemOnlyWithoutOne) {
  const ChatFormat qwen = detect_chat_format(kQwen25Template, true, "");
  EXPECT_EQ(render_chat(qwen, {{"user", "Hello"}}, true),
            "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant."
            "<|im_end|>\n<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(render_chat(qwen, {{"system", "Be brief."}, {"user", "Hello"}}, true),
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHello<|im_end|>\n"
            "<|im_start|>assistant\n");
  const ChatFormat smol = detect_chat_format(kSmolLM2Template, true, "");
  EXPECT_EQ(render_chat(smol, {{"user", "Hi"}}, false),
            "<|im_start|>system\n" + kSmolLM2System + "<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n");
}

TEST(ChatTemplate, RenderLlama3) {
  ChatFormat f{ChatTemplate::Llama3, ""};
  EXPECT_EQ(render_chat(f, {{"system", "S"}, {"user", "  Hi there \n"}}, true),
            "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nS<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nHi there<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n");
  EXPECT_EQ(render_chat(f, {{"user", "Q"}}, false),
            "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nQ<|eot_id|>");
}

TEST(ChatTemplate, RenderNone) {
  ChatFormat f{ChatTemplate::None, ""};
  EXPECT_EQ(render_chat(f, {{"system", "a"}, {"user", "b"}}, true), "ab");
}

TEST(ChatTemplate, FromGguf) {
  const std::string dir = ::testing::TempDir();
  auto write = [&](const std::string& name, const std::string& tmpl, bool im_start) {
    GgufWriter w;
    w.set_string("general.architecture", "qwen2");
    if (!tmpl.empty()) w.set_string("tokenizer.chat_template", tmpl);
    std::vector<std::string> tokens = {"a", "b"};
    if (im_start) tokens.push_back("<|im_start|>");
    w.set_string_array("tokenizer.ggml.tokens", tokens);
    const std::string path = dir + "chat_template_test_" + name + ".gguf";
    w.write(path, [](size_t, uint8_t*, size_t) {});
    return path;
  };
  const std::string qwen = write("qwen", kQwen25Template, true);
  const ChatFormat f = detect_chat_format(*GgufFile::open(qwen), "");
  EXPECT_EQ(f.kind, ChatTemplate::ChatML);
  EXPECT_EQ(f.default_system, "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.");

  const std::string bare_chatml = write("bare_chatml", "", true);
  EXPECT_EQ(detect_chat_format(*GgufFile::open(bare_chatml), "").kind, ChatTemplate::ChatML);

  const std::string bare = write("bare", "", false);
  const std::string msg = error_of([&] { detect_chat_format(*GgufFile::open(bare), ""); });
  EXPECT_EQ(msg.find(bare), 0u) << msg;
  EXPECT_NE(msg.find("--chat-template chatml|llama3|none"), std::string::npos) << msg;

  const std::string gemma = write("gemma", kGemmaTemplate, false);
  const std::string unknown = error_of([&] { detect_chat_format(*GgufFile::open(gemma), ""); });
  EXPECT_EQ(unknown.find(gemma), 0u) << unknown;
  EXPECT_NE(unknown.find("unknown chat template"), std::string::npos) << unknown;

  for (const std::string& p : {qwen, bare_chatml, bare, gemma}) std::remove(p.c_str());
}

}  // namespace
}  // namespace tllm
