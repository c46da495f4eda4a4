// The renderer's half of scripts/check_chat_templates.py, which compares render_chat with jinja2
// on real chat templates. The script writes the templates and conversations to the JSON file named
// by TLLM_CHAT_CASES and reads back, from the file named by TLLM_CHAT_RENDERS, what this test made
// of each: the format detected from the template and the prompt, or the error. Without those
// variables (a plain ctest run) the test is skipped.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "model/chat_template.h"

namespace tllm {
namespace {

TEST(ChatTemplateJinja, RenderCasesFromScript) {
  const char* cases_path = std::getenv("TLLM_CHAT_CASES");
  const char* renders_path = std::getenv("TLLM_CHAT_RENDERS");
  if (cases_path == nullptr || renders_path == nullptr) {
    GTEST_SKIP() << "run by scripts/check_chat_templates.py (TLLM_CHAT_CASES, TLLM_CHAT_RENDERS)";
  }
  std::ifstream in(cases_path, std::ios::binary);
  ASSERT_TRUE(in) << cases_path;
  // Keys in the order written: tool-call arguments and tools are rendered in that order.
  const nlohmann::ordered_json cases = nlohmann::ordered_json::parse(in);
  // Each template: {"text", "bos", "eos"}; each case: {"template": index, "messages": [{"role",
  // "content", "tool_calls"?}], "tools"?: [...], "add_generation_prompt"}.
  std::vector<ChatFormat> formats;
  nlohmann::json out_formats = nlohmann::json::array();
  for (const nlohmann::ordered_json& t : cases.at("templates")) {
    ChatFormat f;
    try {
      f = detect_chat_format(t.at("text").get<std::string>(), false, "");
      out_formats.push_back({{"kind", chat_template_name(f.kind)},
                             {"think_prompt", f.think_prompt},
                             {"join_system", f.join_system},
                             {"assistant_after_user", f.assistant_after_user},
                             {"tools", f.tools}});
    } catch (const ChatTemplateError& e) {
      f.kind = ChatTemplate::None;
      out_formats.push_back({{"error", e.what()}});
    }
    f.bos_text = t.at("bos").get<std::string>();
    f.eos_text = t.at("eos").get<std::string>();
    formats.push_back(f);
  }
  nlohmann::json renders = nlohmann::json::array();
  for (const nlohmann::ordered_json& c : cases.at("cases")) {
    ChatRequest request = parse_chat_request(c.at("messages").dump(), "case");
    if (c.contains("tools")) request.tools = parse_chat_tools(c.at("tools").dump(), "case");
    try {
      renders.push_back({{"text", render_chat_request(formats.at(c.at("template").get<size_t>()), request,
                                                      c.at("add_generation_prompt").get<bool>())}});
    } catch (const ChatTemplateError& e) {
      renders.push_back({{"error", e.what()}});
    }
  }
  std::ofstream out(renders_path, std::ios::binary);
  ASSERT_TRUE(out) << renders_path;
  out << nlohmann::json{{"formats", out_formats}, {"renders", renders}}.dump();
}

}  // namespace
}  // namespace tllm
