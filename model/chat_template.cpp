// Chat format detection and rendering.
#include "model/chat_template.h"

#include <algorithm>

#include "model/gguf.h"

namespace tllm {
namespace {

constexpr const char* kUnknownTemplate = "unknown chat template; pass --chat-template chatml|llama3|none";
constexpr const char* kQwenDefaultSystem =
    "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.";

// The system prompt a ChatML template writes when the conversation has none.
//  - Qwen2.5 writes it from a separate string literal, recognised by its text;
//  - Qwen2 and SmolLM2 write a whole literal turn '<|im_start|>system\n<prompt><|im_end|>' that is
//    found by its markers; text between them holding template syntax (quotes, braces, '+') is an
//    expression, not a literal prompt.
std::string chatml_default_system(const std::string& tmpl) {
  if (tmpl.find(kQwenDefaultSystem) != std::string::npos) return kQwenDefaultSystem;
  const std::string open = "<|im_start|>system";
  for (size_t pos = tmpl.find(open); pos != std::string::npos; pos = tmpl.find(open, pos + 1)) {
    size_t p = pos + open.size();
    if (tmpl.compare(p, 1, "\n") == 0) {
      p += 1;
    } else if (tmpl.compare(p, 2, "\\n") == 0) {
      p += 2;  // the newline written as a Jinja escape
    } else {
      continue;
    }
    const size_t end = tmpl.find("<|im_end|>", p);
    if (end == std::string::npos) continue;
    std::string text = tmpl.substr(p, end - p);
    if (text.empty() || text.find_first_of("'\"{}+") != std::string::npos) continue;
    for (size_t k = text.find("\\n"); k != std::string::npos; k = text.find("\\n", k + 1)) {
      text.replace(k, 2, "\n");
    }
    return text;
  }
  return "";
}

std::string trim(const std::string& s) {
  const char* ws = " \t\n\r\f\v";
  const size_t b = s.find_first_not_of(ws);
  if (b == std::string::npos) return "";
  const size_t e = s.find_last_not_of(ws);
  return s.substr(b, e - b + 1);
}

}  // namespace

ChatTemplate parse_chat_template_name(const std::string& name) {
  if (name == "chatml") return ChatTemplate::ChatML;
  if (name == "llama3") return ChatTemplate::Llama3;
  if (name == "none") return ChatTemplate::None;
  throw ChatTemplateError("unknown chat template name '" + name + "' (expected chatml, llama3 or none)");
}

const char* chat_template_name(ChatTemplate t) {
  switch (t) {
    case ChatTemplate::ChatML: return "chatml";
    case ChatTemplate::Llama3: return "llama3";
    case ChatTemplate::None: return "none";
  }
  return "?";
}

ChatFormat detect_chat_format(const std::string& template_text, bool has_im_start,
                              const std::string& override_name) {
  const bool chatml_text = template_text.find("<|im_start|>") != std::string::npos;
  const bool llama3_text = template_text.find("<|start_header_id|>") != std::string::npos;
  ChatFormat fmt;
  if (!override_name.empty()) {
    fmt.kind = parse_chat_template_name(override_name);
  } else if (chatml_text) {
    fmt.kind = ChatTemplate::ChatML;
  } else if (llama3_text) {
    fmt.kind = ChatTemplate::Llama3;
  } else if (template_text.empty() && has_im_start) {
    fmt.kind = ChatTemplate::ChatML;
  } else if (template_text.empty()) {
    throw ChatTemplateError(
        "no tokenizer.chat_template and no <|im_start|> token; pass --chat-template chatml|llama3|none");
  } else {
    throw ChatTemplateError(kUnknownTemplate);
  }
  if (fmt.kind == ChatTemplate::ChatML && chatml_text) {
    fmt.default_system = chatml_default_system(template_text);
  }
  return fmt;
}

ChatFormat detect_chat_format(const GgufFile& f, const std::string& override_name) {
  try {
    const std::string tmpl = f.get_string("tokenizer.chat_template", "");
    bool has_im_start = false;
    if (tmpl.empty() && f.find("tokenizer.ggml.tokens")) {
      const std::vector<std::string>& tokens = f.get_string_array("tokenizer.ggml.tokens");
      has_im_start = std::find(tokens.begin(), tokens.end(), "<|im_start|>") != tokens.end();
    }
    return detect_chat_format(tmpl, has_im_start, override_name);
  } catch (const ChatTemplateError& e) {
    throw ChatTemplateError(f.path() + ": " + e.what());
  } catch (const GgufError& e) {
    throw ChatTemplateError(e.what());
  }
}

std::string render_chat(const ChatFormat& fmt, const std::vector<ChatMessage>& msgs,
                        bool add_generation_prompt) {
  const bool add_system = !fmt.default_system.empty() && (msgs.empty() || msgs[0].role != "system");
  std::string out;
  switch (fmt.kind) {
    case ChatTemplate::ChatML: {
      auto turn = [&](const std::string& role, const std::string& content) {
        out += "<|im_start|>" + role + "\n" + content + "<|im_end|>\n";
      };
      if (add_system) turn("system", fmt.default_system);
      for (const ChatMessage& m : msgs) turn(m.role, m.content);
      if (add_generation_prompt) out += "<|im_start|>assistant\n";
      break;
    }
    case ChatTemplate::Llama3: {
      auto turn = [&](const std::string& role, const std::string& content) {
        out += "<|start_header_id|>" + role + "<|end_header_id|>\n\n" + trim(content) + "<|eot_id|>";
      };
      out += "<|begin_of_text|>";
      if (add_system) turn("system", fmt.default_system);
      for (const ChatMessage& m : msgs) turn(m.role, m.content);
      if (add_generation_prompt) out += "<|start_header_id|>assistant<|end_header_id|>\n\n";
      break;
    }
    case ChatTemplate::None:
      for (const ChatMessage& m : msgs) out += m.content;
      break;
  }
  return out;
}

}  // namespace tllm
