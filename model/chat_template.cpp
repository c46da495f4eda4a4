// Chat format detection and rendering.
#include "model/chat_template.h"

#include <cstdio>
#include <ctime>
#include <optional>

#include <nlohmann/json.hpp>

#include "model/gguf.h"
#include "model/tokenizer.h"

namespace tllm {
namespace {

constexpr const char* kNames = "chatml|llama3|llama2|mistral|zephyr|deepseek-r1|none";
constexpr const char* kQwenDefaultSystem =
    "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.";
constexpr const char* kKnowledgeDate = "Cutting Knowledge Date: ";

bool has(const std::string& text, const char* what) { return text.find(what) != std::string::npos; }

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

// Today's date as strftime("%d %b %Y") writes it in the C locale ("05 Mar 2025").
std::string today_date() {
  static const char* const kMonths[] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                        "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  localtime_r(&now, &tm);
  char buf[32];
  std::snprintf(buf, sizeof buf, "%02d %s %04d", tm.tm_mday, kMonths[tm.tm_mon], tm.tm_year + 1900);
  return buf;
}

// Llama 3.1/3.2/3.3: the knowledge date of the literal "Cutting Knowledge Date: December 2023\n"
// and the date_string the template falls back to when the caller passes none. 3.1 and 3.3 set it
// from a literal (date_string = "26 Jul 2024"); 3.2 calls strftime_now("%d %b %Y") first, which
// Hugging Face defines, so its prompts carry today's date.
void llama31_dates(const std::string& tmpl, ChatFormat& fmt) {
  const size_t k = tmpl.find(kKnowledgeDate);
  if (k == std::string::npos) return;
  const size_t b = k + std::string(kKnowledgeDate).size();
  const size_t e = tmpl.find_first_of("\\\n\"'", b);  // ends at the "\n" escape or the quote
  fmt.knowledge_date = tmpl.substr(b, e == std::string::npos ? std::string::npos : e - b);
  if (has(tmpl, "strftime_now")) {
    fmt.today_date = today_date();
    return;
  }
  for (size_t p = tmpl.find("set date_string"); p != std::string::npos;
       p = tmpl.find("set date_string", p + 1)) {
    size_t q = tmpl.find_first_not_of(" ", p + 15);
    if (q == std::string::npos || tmpl[q] != '=') continue;
    q = tmpl.find_first_not_of(" ", q + 1);
    if (q == std::string::npos || (tmpl[q] != '"' && tmpl[q] != '\'')) continue;
    const size_t end = tmpl.find(tmpl[q], q + 1);
    if (end == std::string::npos) continue;
    fmt.today_date = tmpl.substr(q + 1, end - q - 1);
    return;
  }
  throw ChatTemplateError(
      "the Llama 3 chat template writes 'Cutting Knowledge Date' but sets no default date_string");
}

// The Mistral revision a template with "[INST]" writes; nullopt for one it does not render.
std::optional<MistralStyle> mistral_style(const std::string& tmpl) {
  if (has(tmpl, " [/INST]")) {
    if (has(tmpl, "' [INST]") || has(tmpl, "\" [INST]")) return MistralStyle::Spaced;
    if (has(tmpl, "eos_token + ' '") || has(tmpl, "eos_token + \" \"")) return MistralStyle::SpaceAfterEos;
    return MistralStyle::Plain;
  }
  // v0.3 and Nemo, recognised by the expressions that render a conversation without tools.
  if (!has(tmpl, "loop.last and system_message is defined") || has(tmpl, "[SYSTEM_PROMPT]")) return std::nullopt;
  if (has(tmpl, R"("[INST] " + message["content"] + "[/INST]")") &&
      has(tmpl, R"(" " + message["content"]|trim + eos_token)")) {
    return MistralStyle::V3;
  }
  if (has(tmpl, R"("[INST]" + message["content"] + "[/INST]")") &&
      has(tmpl, R"({{- message["content"] + eos_token)")) {
    return MistralStyle::Tekken;
  }
  return std::nullopt;
}

// Length of the UTF-8 sequence at s[i] when it encodes a character that Python's str.isspace()
// accepts (what strip() and Jinja's trim remove), else 0.
size_t space_at(const std::string& s, size_t i) {
  const auto u = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const size_t n = s.size() - i;
  const unsigned c = u(i);
  if (c == ' ' || (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x1f)) return 1;
  if (c == 0xc2 && n >= 2 && (u(i + 1) == 0x85 || u(i + 1) == 0xa0)) return 2;  // U+0085, U+00A0
  if (n < 3) return 0;
  const unsigned cp = ((c & 0x0fu) << 12) | ((u(i + 1) & 0x3fu) << 6) | (u(i + 2) & 0x3fu);
  if ((c & 0xf0) != 0xe0 || (u(i + 1) & 0xc0) != 0x80 || (u(i + 2) & 0xc0) != 0x80) return 0;
  const bool space = cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200a) || cp == 0x2028 ||
                     cp == 0x2029 || cp == 0x202f || cp == 0x205f || cp == 0x3000;
  return space ? 3 : 0;
}

// Python's str.strip() (and Jinja's trim) on UTF-8 text.
std::string trim(const std::string& s) {
  size_t b = 0;
  for (size_t k; b < s.size() && (k = space_at(s, b)) > 0;) b += k;
  size_t e = s.size();
  while (e > b) {
    // The last character starts at the last byte that is not a continuation byte.
    size_t start = e - 1;
    while (start > b && (static_cast<unsigned char>(s[start]) & 0xc0) == 0x80) --start;
    const size_t k = space_at(s, start);
    if (k == 0 || start + k != e) break;
    e = start;
  }
  return s.substr(b, e - b);
}

// The formats that write the BOS / EOS token as text: Llama 2 and Mistral both, Zephyr the EOS,
// DeepSeek-R1 the BOS (its replies end with the literal '<｜end▁of▁sentence｜>').
bool writes_bos(ChatTemplate kind) {
  return kind == ChatTemplate::Llama2 || kind == ChatTemplate::Mistral || kind == ChatTemplate::DeepSeekR1;
}
bool writes_eos(ChatTemplate kind) {
  return kind == ChatTemplate::Llama2 || kind == ChatTemplate::Mistral || kind == ChatTemplate::Zephyr;
}

// The revision of a DeepSeek-R1 template, recognised by the expressions that render system,
// user and assistant messages: true, with fmt's think_prompt, join_system and
// assistant_after_user set, for the revisions render_chat writes; false for a template with
// "<｜User｜>" that renders them otherwise (DeepSeek-V3's keeps the reasoning in replies).
bool deepseek_r1_revision(const std::string& tmpl, ChatFormat& fmt) {
  if (!has(tmpl, "<｜User｜>") || !has(tmpl, "{% set content = content.split('</think>')[-1] %}")) return false;
  bool join_system = false, think_prompt = false, assistant_after_user = false;
  if (has(tmpl, "{% set ns.system_prompt = message['content'] %}")) {
    join_system = false;
  } else if (has(tmpl, "{% set ns.system_prompt = ns.system_prompt + message['content'] %}") &&
             has(tmpl, "{% set ns.system_prompt = ns.system_prompt + '\\n\\n' + message['content'] %}")) {
    join_system = true;
  } else {
    return false;
  }
  if (has(tmpl, "{{'<｜User｜>' + message['content']}}") &&
      has(tmpl, "{{'<｜Assistant｜>' + content + '<｜end▁of▁sentence｜>'}}")) {
    think_prompt = has(tmpl, "{{'<｜Assistant｜><think>\\n'}}");
  } else if (has(tmpl, "{{'<｜User｜>' + content + '<｜Assistant｜>'}}") &&
             has(tmpl, "{{content + '<｜end▁of▁sentence｜>'}}") &&
             has(tmpl, "add_generation_prompt and not ns.is_last_user")) {
    assistant_after_user = true;
  } else {
    return false;
  }
  fmt.think_prompt = think_prompt;
  fmt.join_system = join_system;
  fmt.assistant_after_user = assistant_after_user;
  return true;
}

void check_token_texts(const ChatFormat& fmt) {
  auto require = [&](bool writes, const std::string& text, const char* token) {
    if (writes && text.empty()) {
      throw ChatTemplateError(std::string("the ") + chat_template_name(fmt.kind) + " chat format writes the " +
                              token + " token as text, and the tokenizer has no " + token + " token");
    }
  };
  require(writes_bos(fmt.kind), fmt.bos_text, "BOS");
  require(writes_eos(fmt.kind), fmt.eos_text, "EOS");
}

// Llama 2 and Mistral: after the optional system message (first), user and assistant messages in
// turn, starting with a user message.
void check_alternation(ChatTemplate kind, const std::vector<ChatMessage>& msgs, size_t first) {
  for (size_t i = first; i < msgs.size(); ++i) {
    const char* want = (i - first) % 2 == 0 ? "user" : "assistant";
    if (msgs[i].role != want) {
      throw ChatTemplateError(std::string("the ") + chat_template_name(kind) +
                              " chat format takes user and assistant messages in turn, starting with a user "
                              "message after an optional system message; message " +
                              std::to_string(i + 1) + " is a '" + msgs[i].role + "' message");
    }
  }
}

}  // namespace

ChatTemplate parse_chat_template_name(const std::string& name) {
  for (ChatTemplate t : {ChatTemplate::ChatML, ChatTemplate::Llama3, ChatTemplate::Llama2, ChatTemplate::Mistral,
                         ChatTemplate::Zephyr, ChatTemplate::DeepSeekR1, ChatTemplate::None}) {
    if (name == chat_template_name(t)) return t;
  }
  throw ChatTemplateError("unknown chat template name '" + name +
                          "' (expected chatml, llama3, llama2, mistral, zephyr, deepseek-r1 or none)");
}

const char* chat_template_name(ChatTemplate t) {
  switch (t) {
    case ChatTemplate::ChatML: return "chatml";
    case ChatTemplate::Llama3: return "llama3";
    case ChatTemplate::Llama2: return "llama2";
    case ChatTemplate::Mistral: return "mistral";
    case ChatTemplate::Zephyr: return "zephyr";
    case ChatTemplate::DeepSeekR1: return "deepseek-r1";
    case ChatTemplate::None: return "none";
  }
  return "?";
}

const char* chat_template_names() { return kNames; }

ChatFormat detect_chat_format(const std::string& template_text, bool has_im_start,
                              const std::string& override_name) {
  const std::string& t = template_text;
  ChatTemplate found = ChatTemplate::None;
  bool known = true;
  std::optional<MistralStyle> mistral;
  ChatFormat r1;  // the DeepSeek-R1 revision's flags
  if (has(t, "<|im_start|>")) {
    found = ChatTemplate::ChatML;
  } else if (has(t, "<|start_header_id|>")) {
    found = ChatTemplate::Llama3;
  } else if (has(t, "[INST]") && has(t, "<<SYS>>")) {
    found = ChatTemplate::Llama2;
  } else if (has(t, "[INST]") && (mistral = mistral_style(t))) {
    found = ChatTemplate::Mistral;
  } else if (has(t, "<|user|>") && !has(t, "<|end|>")) {
    found = ChatTemplate::Zephyr;
  } else if (deepseek_r1_revision(t, r1)) {
    found = ChatTemplate::DeepSeekR1;
  } else {
    known = false;
  }
  ChatFormat fmt;
  if (!override_name.empty()) {
    fmt.kind = parse_chat_template_name(override_name);
  } else if (known) {
    fmt.kind = found;
  } else if (t.empty() && has_im_start) {
    fmt.kind = ChatTemplate::ChatML;
  } else if (t.empty()) {
    throw ChatTemplateError(std::string("no tokenizer.chat_template and no <|im_start|> token; pass --chat-template ") +
                            kNames);
  } else {
    throw ChatTemplateError(std::string("unknown chat template; pass --chat-template ") + kNames);
  }
  if (known && fmt.kind == found) {
    if (found == ChatTemplate::ChatML) {
      fmt.default_system = chatml_default_system(t);
      fmt.tools = has(t, "<tools></tools>") && has(t, "<tool_response>");
    }
    if (found == ChatTemplate::Llama3) llama31_dates(t, fmt);
    if (found == ChatTemplate::Mistral) fmt.mistral = *mistral;
    if (found == ChatTemplate::DeepSeekR1) {
      fmt.think_prompt = r1.think_prompt;
      fmt.join_system = r1.join_system;
      fmt.assistant_after_user = r1.assistant_after_user;
    }
  }
  return fmt;
}

ChatFormat detect_chat_format(const GgufFile& f, const Tokenizer& tok, const std::string& override_name) {
  try {
    const std::string tmpl = f.get_string("tokenizer.chat_template", "");
    ChatFormat fmt = detect_chat_format(tmpl, tok.find_token("<|im_start|>") >= 0, override_name);
    if (tok.bos_id() >= 0) fmt.bos_text = tok.token_text(tok.bos_id());
    if (tok.eos_id() >= 0) fmt.eos_text = tok.token_text(tok.eos_id());
    check_token_texts(fmt);
    return fmt;
  } catch (const ChatTemplateError& e) {
    throw ChatTemplateError(f.path() + ": " + e.what());
  } catch (const GgufError& e) {
    throw ChatTemplateError(e.what());
  }
}

namespace {

// Qwen2.5's template: ChatML with tools, tool calls and tool messages (render_chat's comment).
std::string render_chatml_tools(const ChatFormat& fmt, const ChatRequest& request, bool add_generation_prompt) {
  const std::vector<ChatMessage>& msgs = request.messages;
  // The template reads messages[0] first, which an empty conversation does not have.
  if (msgs.empty()) throw ChatTemplateError("the chatml chat format with tools takes at least one message");
  const bool has_system = msgs[0].role == "system";
  std::string out;
  if (!request.tools.empty()) {
    out += "<|im_start|>system\n" + (has_system ? msgs[0].content : fmt.default_system) +
           "\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
           "You are provided with function signatures within <tools></tools> XML tags:\n<tools>";
    for (const std::string& tool : request.tools) out += "\n" + tool;
    out += "\n</tools>\n\nFor each function call, return a json object with function name and arguments "
           "within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, "
           "\"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n";
  } else {
    out += "<|im_start|>system\n" + (has_system ? msgs[0].content : fmt.default_system) + "<|im_end|>\n";
  }
  for (size_t i = has_system ? 1 : 0; i < msgs.size(); ++i) {
    const ChatMessage& m = msgs[i];
    if (m.role == "user" || m.role == "system" || (m.role == "assistant" && m.tool_calls.empty())) {
      out += "<|im_start|>" + m.role + "\n" + m.content + "<|im_end|>\n";
    } else if (m.role == "assistant") {
      out += "<|im_start|>assistant";
      if (!m.content.empty()) out += "\n" + m.content;
      for (const ChatToolCall& call : m.tool_calls) {
        out += "\n<tool_call>\n{\"name\": \"" + call.name + "\", \"arguments\": " + call.arguments + "}\n</tool_call>";
      }
      out += "<|im_end|>\n";
    } else if (m.role == "tool") {
      if (i == 0 || msgs[i - 1].role != "tool") out += "<|im_start|>user";
      out += "\n<tool_response>\n" + m.content + "\n</tool_response>";
      if (i + 1 == msgs.size() || msgs[i + 1].role != "tool") out += "<|im_end|>\n";
    } else {
      throw ChatTemplateError("message " + std::to_string(i + 1) + " is a '" + m.role +
                              "' message; the chatml chat format takes system, user, assistant and tool messages");
    }
  }
  if (add_generation_prompt) out += "<|im_start|>assistant\n";
  return out;
}

// A format without tools: tools and tool calls are refused, and so are tool messages where the
// format would write any role as it is (the others refuse them with their own messages).
void check_no_tools(const ChatFormat& fmt, const ChatRequest& request) {
  const std::string refusal = std::string("the ") + chat_template_name(fmt.kind) +
                              " chat format renders no tools, tool calls or tool messages (Qwen2.5's chatml "
                              "template does)";
  if (!request.tools.empty()) throw ChatTemplateError(refusal);
  const bool any_role = fmt.kind == ChatTemplate::ChatML || fmt.kind == ChatTemplate::Llama3 ||
                        fmt.kind == ChatTemplate::None;
  for (size_t i = 0; i < request.messages.size(); ++i) {
    const ChatMessage& m = request.messages[i];
    if (!m.tool_calls.empty() || (any_role && m.role == "tool")) {
      throw ChatTemplateError("message " + std::to_string(i + 1) + ": " + refusal);
    }
  }
}

}  // namespace

std::string render_chat(const ChatFormat& fmt, const std::vector<ChatMessage>& msgs,
                        bool add_generation_prompt) {
  return render_chat_request(fmt, ChatRequest{msgs, {}}, add_generation_prompt);
}

bool renders_tools(const ChatFormat& fmt) { return fmt.kind == ChatTemplate::ChatML && fmt.tools; }

std::string render_chat_request(const ChatFormat& fmt, const ChatRequest& request, bool add_generation_prompt) {
  check_token_texts(fmt);
  if (renders_tools(fmt)) return render_chatml_tools(fmt, request, add_generation_prompt);
  check_no_tools(fmt, request);
  const std::vector<ChatMessage>& msgs = request.messages;
  const bool add_system = !fmt.default_system.empty() && (msgs.empty() || msgs[0].role != "system");
  const bool has_system = !msgs.empty() && msgs[0].role == "system";
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
        out += "<|start_header_id|>" + role + "<|end_header_id|>\n\n" + content + "<|eot_id|>";
      };
      out += "<|begin_of_text|>";
      size_t first = 0;
      if (!fmt.knowledge_date.empty()) {
        // Llama 3.1: the system turn is always there; the system message, trimmed, ends it.
        turn("system", "Cutting Knowledge Date: " + fmt.knowledge_date + "\nToday Date: " + fmt.today_date +
                           "\n\n" + (has_system ? trim(msgs[0].content) : ""));
        first = has_system ? 1 : 0;
      } else if (add_system) {
        turn("system", trim(fmt.default_system));
      }
      for (size_t i = first; i < msgs.size(); ++i) turn(msgs[i].role, trim(msgs[i].content));
      if (add_generation_prompt) out += "<|start_header_id|>assistant<|end_header_id|>\n\n";
      break;
    }
    case ChatTemplate::Llama2: {
      // Each user message is "<s>[INST] text [/INST]" and each reply " text </s>", both stripped;
      // the system block opens the first user message and is stripped with it.
      const size_t first = has_system ? 1 : 0;
      check_alternation(fmt.kind, msgs, first);
      for (size_t i = first; i < msgs.size(); ++i) {
        std::string content = msgs[i].content;
        if (i == 1 && has_system) content = "<<SYS>>\n" + msgs[0].content + "\n<</SYS>>\n\n" + content;
        if (msgs[i].role == "user") {
          out += fmt.bos_text + "[INST] " + trim(content) + " [/INST]";
        } else {
          out += " " + trim(content) + " " + fmt.eos_text;
        }
      }
      break;
    }
    case ChatTemplate::Mistral: {
      const MistralStyle style = fmt.mistral;
      const bool spaced = style == MistralStyle::Spaced;
      const bool v3 = style == MistralStyle::V3, tekken = style == MistralStyle::Tekken;
      if (has_system && !spaced && !v3 && !tekken) {
        throw ChatTemplateError(
            "the mistral chat format (Mistral Instruct v0.1, v0.2, Mixtral as released) has no system message");
      }
      const size_t first = has_system ? 1 : 0;
      check_alternation(fmt.kind, msgs, first);
      out += fmt.bos_text;
      for (size_t i = first; i < msgs.size(); ++i) {
        const std::string& content = msgs[i].content;
        if (msgs[i].role == "user") {
          // The system text opens the first user message (Spaced) or the last message (v3, Tekken).
          const size_t with_system = v3 || tekken ? msgs.size() - 1 : 1;
          const std::string system = has_system && i == with_system ? msgs[0].content + "\n\n" : "";
          if (v3 || tekken) {
            out += (v3 ? "[INST] " : "[INST]") + system + content + "[/INST]";
          } else {
            out += (spaced ? " [INST] " : "[INST] ") + system + content + " [/INST]";
          }
        } else if (v3) {
          out += " " + trim(content) + fmt.eos_text;
        } else {
          out += (spaced ? " " : "") + content + fmt.eos_text;
          if (style == MistralStyle::SpaceAfterEos) out += " ";
        }
      }
      break;
    }
    case ChatTemplate::Zephyr: {
      for (const ChatMessage& m : msgs) {
        if (m.role != "system" && m.role != "user" && m.role != "assistant") {
          throw ChatTemplateError("the zephyr chat format takes system, user and assistant messages, not '" +
                                  m.role + "'");
        }
        out += "<|" + m.role + "|>\n" + m.content + fmt.eos_text + "\n";
      }
      // The template writes the prompt after the last message only, so not for an empty list.
      if (add_generation_prompt && !msgs.empty()) out += "<|assistant|>\n";
      break;
    }
    case ChatTemplate::DeepSeekR1: {
      std::string system;  // the last system message, wherever it stands, or all of them joined
      bool first_system = true;
      for (const ChatMessage& m : msgs) {
        if (m.role == "system") {
          system = fmt.join_system && !first_system ? system + "\n\n" + m.content : m.content;
          first_system = false;
        } else if (m.role != "user" && m.role != "assistant") {
          throw ChatTemplateError("the deepseek-r1 chat format takes system, user and assistant messages, not '" +
                                  m.role + "'");
        }
      }
      out += fmt.bos_text + system;
      const std::string think_end = "</think>";
      const std::string assistant = "<｜Assistant｜>";
      bool last_user = false;  // assistant_after_user: the last user message has opened the reply
      for (const ChatMessage& m : msgs) {
        if (m.role == "user") {
          out += "<｜User｜>" + m.content + (fmt.assistant_after_user ? assistant : "");
          last_user = true;
        } else if (m.role == "assistant") {
          // The reply without its reasoning: what follows the last "</think>".
          const size_t k = m.content.rfind(think_end);
          const std::string reply = k == std::string::npos ? m.content : m.content.substr(k + think_end.size());
          out += (fmt.assistant_after_user ? "" : assistant) + reply + "<｜end▁of▁sentence｜>";
          last_user = false;
        }
      }
      if (add_generation_prompt && !(fmt.assistant_after_user && last_user)) {
        out += assistant + (fmt.think_prompt ? "<think>\n" : "");
      }
      break;
    }
    case ChatTemplate::None:
      for (const ChatMessage& m : msgs) out += m.content;
      break;
  }
  return out;
}

// ---- conversations as JSON ----------------------------------------------------------------------

namespace {

using Json = nlohmann::ordered_json;  // keys in the order written

void append_json_string(const std::string& text, std::string& out) {
  out += '"';
  for (const char ch : text) {
    const unsigned char c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += ch;
        }
    }
  }
  out += '"';
}

// How deep JSON written for a template may nest (the writer recurses once per level).
constexpr int kMaxJsonDepth = 256;

// Python's json.dumps(j, ensure_ascii=False): numbers as nlohmann writes them (shortest round
// trip, as Python's repr), strings with Python's escapes. Returns false, leaving `out` partly
// written, where j nests deeper than kMaxJsonDepth.
bool append_python_json(const Json& j, std::string& out, int depth = 0) {
  if (depth >= kMaxJsonDepth) return false;
  if (j.is_object()) {
    out += '{';
    bool first = true;
    for (const auto& [key, value] : j.items()) {
      if (!first) out += ", ";
      first = false;
      append_json_string(key, out);
      out += ": ";
      if (!append_python_json(value, out, depth + 1)) return false;
    }
    out += '}';
  } else if (j.is_array()) {
    out += '[';
    for (size_t i = 0; i < j.size(); ++i) {
      if (i > 0) out += ", ";
      if (!append_python_json(j[i], out, depth + 1)) return false;
    }
    out += ']';
  } else if (j.is_string()) {
    append_json_string(j.get<std::string>(), out);
  } else {
    out += j.dump();
  }
  return true;
}

// j as the template's tojson writes it; `where` names it in the error.
std::string python_json(const Json& j, const std::string& where) {
  std::string out;
  if (!append_python_json(j, out)) {
    throw ChatTemplateError(where + ": nested more than " + std::to_string(kMaxJsonDepth) + " levels deep");
  }
  return out;
}

Json parse_json(const std::string& text, const std::string& what) {
  try {
    return Json::parse(text);
  } catch (const Json::exception& e) {  // a syntax error, or a number beyond a double (out_of_range)
    throw ChatTemplateError(what + ": not JSON (" + e.what() + ")");
  }
}

std::vector<std::string> tools_of(const Json& j, const std::string& where) {
  if (!j.is_array()) throw ChatTemplateError(where + ": expected an array of tool definitions");
  std::vector<std::string> tools;
  for (size_t i = 0; i < j.size(); ++i) tools.push_back(python_json(j[i], where + "[" + std::to_string(i) + "]"));
  return tools;
}

const Json& field(const Json& object, const char* key, const std::string& where) {
  if (!object.contains(key)) throw ChatTemplateError(where + ": no \"" + key + "\"");
  return object.at(key);
}

std::string string_field(const Json& object, const char* key, const std::string& where) {
  const Json& v = field(object, key, where);
  if (!v.is_string()) throw ChatTemplateError(where + "." + key + ": expected a string");
  return v.get<std::string>();
}

ChatMessage message_of(const Json& m, const std::string& where) {
  if (!m.is_object()) throw ChatTemplateError(where + ": expected an object with \"role\" and \"content\"");
  ChatMessage msg;
  msg.role = string_field(m, "role", where);
  if (msg.role != "system" && msg.role != "user" && msg.role != "assistant" && msg.role != "tool") {
    throw ChatTemplateError(where + ".role: '" + msg.role + "' (expected system, user, assistant or tool)");
  }
  if (m.contains("tool_calls")) {
    const Json& calls = m.at("tool_calls");
    if (msg.role != "assistant" || !calls.is_array()) {
      throw ChatTemplateError(where + ".tool_calls: expected an array, in an assistant message");
    }
    for (size_t i = 0; i < calls.size(); ++i) {
      const std::string at = where + ".tool_calls[" + std::to_string(i) + "]";
      if (!calls[i].is_object()) throw ChatTemplateError(at + ": expected an object");
      const bool nested = calls[i].contains("function");
      const Json& f = nested ? calls[i].at("function") : calls[i];
      const std::string fwhere = nested ? at + ".function" : at;
      if (!f.is_object()) throw ChatTemplateError(fwhere + ": expected an object");
      msg.tool_calls.push_back(
          {string_field(f, "name", fwhere), python_json(field(f, "arguments", fwhere), fwhere + ".arguments")});
    }
  }
  const bool may_lack_content = !msg.tool_calls.empty();
  if (may_lack_content && (!m.contains("content") || m.at("content").is_null())) return msg;
  msg.content = string_field(m, "content", where);
  return msg;
}

}  // namespace

std::string chat_json_text(const std::string& json_text) { return python_json(parse_json(json_text, "JSON"), "JSON"); }

ChatRequest parse_chat_request(const std::string& json_text, const std::string& what) {
  const Json j = parse_json(json_text, what);
  const Json* messages = &j;
  ChatRequest request;
  if (j.is_object()) {
    messages = &field(j, "messages", what);
    if (j.contains("tools")) request.tools = tools_of(j.at("tools"), what + ": tools");
  }
  if (!messages->is_array()) {
    throw ChatTemplateError(what + ": expected an array of messages, or an object with \"messages\"");
  }
  for (size_t i = 0; i < messages->size(); ++i) {
    request.messages.push_back(message_of((*messages)[i], what + ": messages[" + std::to_string(i) + "]"));
  }
  return request;
}

ChatMessage assistant_reply(const ChatFormat& fmt, const std::string& text) {
  ChatMessage plain{"assistant", text};
  static const std::string kOpen = "<tool_call>", kClose = "</tool_call>";
  const size_t first = text.find(kOpen);
  if (!renders_tools(fmt) || first == std::string::npos) return plain;
  ChatMessage reply{"assistant", text.substr(0, first)};
  const auto space = [](char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; };
  while (!reply.content.empty() && space(reply.content.back())) reply.content.pop_back();
  size_t pos = first;
  while (pos < text.size()) {
    if (text.compare(pos, kOpen.size(), kOpen) != 0) return plain;  // text after a block
    const size_t close = text.find(kClose, pos);
    if (close == std::string::npos) return plain;
    const std::string inner = text.substr(pos + kOpen.size(), close - pos - kOpen.size());
    Json call;
    try {
      call = Json::parse(inner);
    } catch (const Json::exception&) {
      return plain;
    }
    if (!call.is_object() || !call.contains("name") || !call.at("name").is_string() || !call.contains("arguments")) {
      return plain;
    }
    std::string arguments;
    if (!append_python_json(call.at("arguments"), arguments)) return plain;
    reply.tool_calls.push_back({call.at("name").get<std::string>(), arguments});
    pos = close + kClose.size();
    while (pos < text.size() && space(text[pos])) ++pos;
  }
  return reply;
}

std::string chat_message_json(const ChatMessage& m) {
  Json j;
  j["role"] = m.role;
  j["content"] = m.content;
  if (!m.tool_calls.empty()) {
    Json calls = Json::array();
    for (const ChatToolCall& c : m.tool_calls) {
      Json arguments;
      try {
        arguments = Json::parse(c.arguments);
      } catch (const Json::exception&) {
        arguments = c.arguments;  // not JSON text: kept as a string
      }
      calls.push_back({{"type", "function"}, {"function", {{"name", c.name}, {"arguments", arguments}}}});
    }
    j["tool_calls"] = calls;
  }
  return j.dump(-1, ' ', false, Json::error_handler_t::replace);
}

std::vector<std::string> parse_chat_tools(const std::string& json_text, const std::string& what) {
  return tools_of(parse_json(json_text, what), what);
}

}  // namespace tllm
