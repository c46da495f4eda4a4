// Fuzz target: a conversation as JSON text (generate --messages, chat --tools), read with
// parse_chat_request and parse_chat_tools and rendered with render_chat_request in every chat
// format. Properties checked (a violation aborts, which the fuzzer reports):
//   - every failure is a ChatTemplateError whose message starts with the file name given;
//   - chat_json_text writes JSON that reads back as the same value (as nlohmann writes both);
//   - a rendering either succeeds or throws ChatTemplateError; Qwen2.5's (ChatML with tools) opens
//     with the system turn and, with tools, holds each tool's JSON text;
//   - the input taken as a model's reply (assistant_reply, in Qwen2.5's format) becomes a message
//     whose chat_message_json parse_chat_request reads back with the same tool calls.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "model/chat_template.h"

namespace {

using tllm::ChatFormat;
using tllm::ChatTemplate;
using tllm::ChatTemplateError;

[[noreturn]] void fail(const std::string& what) {
  std::fprintf(stderr, "chat_fuzz: %s\n", what.c_str());
  std::abort();
}

// Every format, with the texts its templates write (Qwen2.5 with tools, plain ChatML, ...).
std::vector<ChatFormat> formats() {
  std::vector<ChatFormat> out;
  for (ChatTemplate kind : {ChatTemplate::ChatML, ChatTemplate::ChatML, ChatTemplate::Llama3, ChatTemplate::Llama2,
                            ChatTemplate::Mistral, ChatTemplate::Zephyr, ChatTemplate::DeepSeekR1, ChatTemplate::None}) {
    ChatFormat f;
    f.kind = kind;
    f.bos_text = "<s>";
    f.eos_text = "</s>";
    if (out.empty()) {
      f.tools = true;
      f.default_system = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.";
    }
    out.push_back(f);
  }
  return out;
}

void expect_file_error(const ChatTemplateError& e, const char* name) {
  if (std::string(e.what()).rfind(name, 0) != 0) fail(std::string("error without the file name: ") + e.what());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::vector<ChatFormat> kFormats = formats();
  const std::string text(reinterpret_cast<const char*>(data), size);

  // chat_json_text: valid JSON in, the same value out.
  try {
    const std::string written = tllm::chat_json_text(text);
    if (nlohmann::json::parse(written).dump() != nlohmann::json::parse(text).dump()) {
      fail("chat_json_text changed the value: " + written);
    }
  } catch (const ChatTemplateError&) {
  } catch (const nlohmann::json::exception& e) {
    fail(std::string("chat_json_text wrote text that is not JSON: ") + e.what());
  }

  // The input as a reply: its message as JSON reads back.
  const tllm::ChatMessage reply = tllm::assistant_reply(kFormats[0], text);
  try {
    const tllm::ChatRequest back = tllm::parse_chat_request("[" + tllm::chat_message_json(reply) + "]", "reply");
    if (back.messages.size() != 1 || back.messages[0].tool_calls.size() != reply.tool_calls.size()) {
      fail("a reply's message does not read back");
    }
    for (size_t i = 0; i < reply.tool_calls.size(); ++i) {
      const tllm::ChatToolCall& a = reply.tool_calls[i];
      const tllm::ChatToolCall& b = back.messages[0].tool_calls[i];
      if (a.arguments != b.arguments) fail("tool-call arguments changed: " + a.arguments + " -> " + b.arguments);
    }
  } catch (const ChatTemplateError& e) {
    fail(std::string("a reply's message is not read back: ") + e.what());
  }

  try {
    (void)tllm::parse_chat_tools(text, "tools.json");
  } catch (const ChatTemplateError& e) {
    expect_file_error(e, "tools.json");
  }

  tllm::ChatRequest request;
  try {
    request = tllm::parse_chat_request(text, "conv.json");
  } catch (const ChatTemplateError& e) {
    expect_file_error(e, "conv.json");
    return 0;
  }
  for (const ChatFormat& f : kFormats) {
    for (bool generation_prompt : {true, false}) {
      try {
        const std::string prompt = tllm::render_chat_request(f, request, generation_prompt);
        if (tllm::renders_tools(f)) {
          if (prompt.rfind("<|im_start|>system\n", 0) != 0) fail("no system turn first: " + prompt);
          for (const std::string& tool : request.tools) {
            if (prompt.find("\n" + tool + "\n") == std::string::npos) fail("a tool is missing: " + tool);
          }
        }
      } catch (const ChatTemplateError&) {
      }
    }
  }
  return 0;
}
