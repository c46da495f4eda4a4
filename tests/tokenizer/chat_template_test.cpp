// Chat format detection (from template text and from GGUF metadata) and prompt rendering.
#include <gtest/gtest.h>

#include <cstdio>
#include <ctime>
#include <fstream>
#include <functional>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "model/chat_template.h"
#include "model/gguf.h"
#include "model/tokenizer.h"

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
// Llama 2 chat: the system block joins the first user message; bos_token and eos_token as text.
const std::string kLlama2Template =
    "{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}{% set system_message = "
    "messages[0]['content'] %}{% else %}{% set loop_messages = messages %}{% set system_message = false %}"
    "{% endif %}{% for message in loop_messages %}{% if loop.index0 == 0 and system_message != false %}"
    "{% set content = '<<SYS>>\\n' + system_message + '\\n<</SYS>>\\n\\n' + message['content'] %}{% else %}"
    "{% set content = message['content'] %}{% endif %}{% if message['role'] == 'user' %}{{ bos_token + "
    "'[INST] ' + content.strip() + ' [/INST]' }}{% elif message['role'] == 'assistant' %}{{ ' '  + "
    "content.strip() + ' ' + eos_token }}{% endif %}{% endfor %}";
// Mistral Instruct v0.2 and Mixtral as released; v0.1 adds a space after eos_token.
const std::string kMistralTemplate =
    "{{ bos_token }}{% for message in messages %}{% if message['role'] == 'user' %}{{ '[INST] ' + "
    "message['content'] + ' [/INST]' }}{% elif message['role'] == 'assistant' %}{{ message['content'] + "
    "eos_token}}{% endif %}{% endfor %}";
const std::string kMistralV01Template =
    "{{ bos_token }}{% for message in messages %}{% if message['role'] == 'user' %}{{ '[INST] ' + "
    "message['content'] + ' [/INST]' }}{% elif message['role'] == 'assistant' %}{{ message['content'] + "
    "eos_token + ' ' }}{% endif %}{% endfor %}";
// The later revision of the Mistral v0.1/v0.2/Mixtral templates: spaces before [INST] and the
// system message opening the first user message.
const std::string kMistralRevisedTemplate =
    "{%- if messages[0]['role'] == 'system' %}\n    {%- set system_message = messages[0]['content'] %}\n"
    "{%- endif %}\n{{- bos_token }}\n{%- for message in loop_messages %}\n"
    "    {%- if message['role'] == 'user' %}\n        {%- if loop.first and system_message is defined %}\n"
    "            {{- ' [INST] ' + system_message + '\\n\\n' + message['content'] + ' [/INST]' }}\n"
    "        {%- else %}\n            {{- ' [INST] ' + message['content'] + ' [/INST]' }}\n        {%- endif %}\n"
    "    {%- elif message['role'] == 'assistant' %}\n        {{- ' ' + message['content'] + eos_token}}\n"
    "    {%- endif %}\n{%- endfor %}";
// Mistral v0.3 and Nemo write "[/INST]" right after the content and put the system message
// before the last message; v0.3 strips each reply and writes a space before it.
const std::string kMistralV3Template =
    "{%- if messages[0][\"role\"] == \"system\" %}\n    {%- set system_message = messages[0][\"content\"] %}\n"
    "    {%- set loop_messages = messages[1:] %}\n{%- else %}\n    {%- set loop_messages = messages %}\n{%- endif %}\n"
    "{{- bos_token }}\n{%- for message in loop_messages %}\n    {%- if message[\"role\"] == \"user\" %}\n"
    "        {%- if loop.last and system_message is defined %}\n"
    "            {{- \"[INST] \" + system_message + \"\\n\\n\" + message[\"content\"] + \"[/INST]\" }}\n"
    "        {%- else %}\n            {{- \"[INST] \" + message[\"content\"] + \"[/INST]\" }}\n        {%- endif %}\n"
    "    {%- elif message[\"role\"] == \"assistant\" %}\n        {{- \" \" + message[\"content\"]|trim + eos_token}}\n"
    "    {%- endif %}\n{%- endfor %}\n";
const std::string kMistralNemoTemplate =
    "{%- if messages[0][\"role\"] == \"system\" %}\n    {%- set system_message = messages[0][\"content\"] %}\n"
    "    {%- set loop_messages = messages[1:] %}\n{%- else %}\n    {%- set loop_messages = messages %}\n{%- endif %}\n"
    "{{- bos_token }}\n{%- for message in loop_messages %}\n    {%- if message[\"role\"] == \"user\" %}\n"
    "        {%- if loop.last and system_message is defined %}\n"
    "            {{- \"[INST]\" + system_message + \"\\n\\n\" + message[\"content\"] + \"[/INST]\" }}\n"
    "        {%- else %}\n            {{- \"[INST]\" + message[\"content\"] + \"[/INST]\" }}\n        {%- endif %}\n"
    "    {%- elif message[\"role\"] == \"assistant\" %}\n        {{- message[\"content\"] + eos_token}}\n"
    "    {%- endif %}\n{%- endfor %}\n";
// Mistral Small 3 writes the system message as [SYSTEM_PROMPT], which no format renders.
const std::string kMistralSmall3Template =
    "{{- bos_token }}\n\n{%- for message in messages %}\n    {%- if message['role'] == 'user' %}\n"
    "        {{- '[INST]' + message['content'] + '[/INST]' }}\n    {%- elif message['role'] == 'system' %}\n"
    "        {{- '[SYSTEM_PROMPT]' + message['content'] + '[/SYSTEM_PROMPT]' }}\n"
    "    {%- elif message['role'] == 'assistant' %}\n        {{- message['content'] + eos_token }}\n    {%- endif %}\n"
    "{%- endfor %}";
// Zephyr and TinyLlama-1.1B-Chat: a newline after each {{ }} stays in the output.
const std::string kZephyrTemplate =
    "{% for message in messages %}\n{% if message['role'] == 'user' %}\n{{ '<|user|>\\n' + message['content'] + "
    "eos_token }}\n{% elif message['role'] == 'system' %}\n{{ '<|system|>\\n' + message['content'] + eos_token }}\n"
    "{% endif %}\n{% if loop.last and add_generation_prompt %}\n{{ '<|assistant|>' }}\n{% endif %}\n{% endfor %}";
// Phi-3 also writes <|user|>, with <|end|> where Zephyr writes eos_token.
const std::string kPhi3Template =
    "{% for message in messages %}{% if message['role'] == 'user' %}{{'<|user|>' + '\\n' + message['content'] + "
    "'<|end|>' + '\\n' + '<|assistant|>' + '\\n'}}{% endif %}{% endfor %}";
// Llama 3.1 / 3.3: a dated system turn, the date a literal default of date_string.
const std::string kLlama31Template =
    "{{- bos_token }}\n{%- if not date_string is defined %}\n    {%- set date_string = \"26 Jul 2024\" %}\n"
    "{%- endif %}\n{%- if messages[0]['role'] == 'system' %}\n"
    "    {%- set system_message = messages[0]['content']|trim %}\n{%- endif %}\n"
    "{{- \"<|start_header_id|>system<|end_header_id|>\\n\\n\" }}\n"
    "{%- if builtin_tools is defined or tools is not none %}\n    {{- \"Environment: ipython\\n\" }}\n{%- endif %}\n"
    "{{- \"Cutting Knowledge Date: December 2023\\n\" }}\n{{- \"Today Date: \" + date_string + \"\\n\\n\" }}\n"
    "{{- system_message }}\n{{- \"<|eot_id|>\" }}\n";
// Llama 3.2: date_string from strftime_now, which Hugging Face defines, before the literal.
const std::string kLlama32Template =
    "{{- bos_token }}\n{%- if not date_string is defined %}\n    {%- if strftime_now is defined %}\n"
    "        {%- set date_string = strftime_now(\"%d %b %Y\") %}\n    {%- else %}\n"
    "        {%- set date_string = \"26 Jul 2024\" %}\n    {%- endif %}\n{%- endif %}\n"
    "{{- \"<|start_header_id|>system<|end_header_id|>\\n\\n\" }}\n"
    "{{- \"Cutting Knowledge Date: December 2023\\n\" }}\n{{- \"Today Date: \" + date_string + \"\\n\\n\" }}\n";

// DeepSeek-R1-Distill-*: the last system message after the BOS, "<｜User｜>" turns, replies without
// their reasoning; the later revision opens the reasoning block in the generation prompt.
const std::string kDeepSeekR1Template =
    "{% if not add_generation_prompt is defined %}{% set add_generation_prompt = false %}{% endif %}"
    "{% set ns = namespace(is_first=false, is_tool=false, is_output_first=true, system_prompt='') %}"
    "{%- for message in messages %}{%- if message['role'] == 'system' %}"
    "{% set ns.system_prompt = message['content'] %}{%- endif %}{%- endfor %}{{bos_token}}{{ns.system_prompt}}"
    "{%- for message in messages %}{%- if message['role'] == 'user' %}{%- set ns.is_tool = false -%}"
    "{{'<｜User｜>' + message['content']}}{%- endif %}"
    "{%- if message['role'] == 'assistant' and message['content'] is not none %}"
    "{% set content = message['content'] %}{% if '</think>' in content %}"
    "{% set content = content.split('</think>')[-1] %}{% endif %}"
    "{{'<｜Assistant｜>' + content + '<｜end▁of▁sentence｜>'}}{%- endif %}{%- endfor -%}"
    "{% if add_generation_prompt and not ns.is_tool %}{{'<｜Assistant｜>'}}{% endif %}";
std::string deepseek_r1_think_template() {
  std::string t = kDeepSeekR1Template;
  t.replace(t.rfind("{{'<｜Assistant｜>'}}"), std::string("{{'<｜Assistant｜>'}}").size(),
            "{{'<｜Assistant｜><think>\\n'}}");
  return t;
}

ChatFormat format_of(ChatTemplate kind) {
  ChatFormat f;
  f.kind = kind;
  return f;
}

// A format with the BOS / EOS texts of a SentencePiece Llama vocabulary.
ChatFormat with_tokens(ChatTemplate kind) {
  ChatFormat f = format_of(kind);
  f.bos_text = "<s>";
  f.eos_text = "</s>";
  return f;
}

// Today's date as the Llama 3.2 template's strftime_now("%d %b %Y") writes it.
std::string strftime_today() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  localtime_r(&now, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%d %b %Y", &tm);
  return buf;
}

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
  EXPECT_EQ(parse_chat_template_name("llama2"), ChatTemplate::Llama2);
  EXPECT_EQ(parse_chat_template_name("mistral"), ChatTemplate::Mistral);
  EXPECT_EQ(parse_chat_template_name("zephyr"), ChatTemplate::Zephyr);
  EXPECT_EQ(parse_chat_template_name("deepseek-r1"), ChatTemplate::DeepSeekR1);
  EXPECT_STREQ(chat_template_names(), "chatml|llama3|llama2|mistral|zephyr|deepseek-r1|none");
  for (ChatTemplate t : {ChatTemplate::ChatML, ChatTemplate::Llama3, ChatTemplate::Llama2, ChatTemplate::Mistral,
                         ChatTemplate::Zephyr, ChatTemplate::DeepSeekR1, ChatTemplate::None}) {
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
  EXPECT_NE(msg.find("--chat-template chatml|llama3|llama2|mistral|zephyr|deepseek-r1|none"), std::string::npos) << msg;
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
  const ChatFormat f = format_of(ChatTemplate::ChatML);
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
  const ChatFormat f = format_of(ChatTemplate::Llama3);
  EXPECT_EQ(render_chat(f, {{"system", "S"}, {"user", "  Hi there \n"}}, true),
            "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nS<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nHi there<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n");
  EXPECT_EQ(render_chat(f, {{"user", "Q"}}, false),
            "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nQ<|eot_id|>");
}

TEST(ChatTemplate, RenderNone) {
  const ChatFormat f = format_of(ChatTemplate::None);
  EXPECT_EQ(render_chat(f, {{"system", "a"}, {"user", "b"}}, true), "ab");
}

TEST(ChatTemplate, DetectsLlama2MistralZephyr) {
  EXPECT_EQ(detect_chat_format(kLlama2Template, false, "").kind, ChatTemplate::Llama2);
  const ChatFormat mistral = detect_chat_format(kMistralTemplate, false, "");
  EXPECT_EQ(mistral.kind, ChatTemplate::Mistral);
  EXPECT_EQ(mistral.mistral, MistralStyle::Plain);
  EXPECT_EQ(detect_chat_format(kMistralV01Template, false, "").mistral, MistralStyle::SpaceAfterEos);
  EXPECT_EQ(detect_chat_format(kMistralRevisedTemplate, false, "").mistral, MistralStyle::Spaced);
  EXPECT_EQ(detect_chat_format(kZephyrTemplate, false, "").kind, ChatTemplate::Zephyr);
  // The texts stay for the caller to fill from its tokenizer.
  EXPECT_EQ(detect_chat_format(kLlama2Template, false, "").bos_text, "");
  EXPECT_EQ(detect_chat_format(kMistralV3Template, false, "").mistral, MistralStyle::V3);
  EXPECT_EQ(detect_chat_format(kMistralNemoTemplate, false, "").mistral, MistralStyle::Tekken);
  // The v0.3 text with another placement of the system message is another format.
  std::string first_user = kMistralV3Template;
  first_user.replace(first_user.find("loop.last"), 9, "loop.first");
  for (const std::string* t :
       std::vector<const std::string*>{&kMistralSmall3Template, &first_user, &kPhi3Template}) {
    const std::string msg = error_of([&] { detect_chat_format(*t, false, ""); });
    EXPECT_NE(msg.find("unknown chat template"), std::string::npos) << msg;
  }
  // An override takes the format's details from the template only when it is of that format.
  EXPECT_EQ(detect_chat_format(kMistralV01Template, false, "mistral").mistral, MistralStyle::SpaceAfterEos);
  EXPECT_EQ(detect_chat_format(kZephyrTemplate, false, "mistral").mistral, MistralStyle::Plain);
  EXPECT_EQ(detect_chat_format(kMistralNemoTemplate, false, "mistral").mistral, MistralStyle::Tekken);
  EXPECT_EQ(detect_chat_format(kMistralTemplate, false, "llama2").kind, ChatTemplate::Llama2);
}

TEST(ChatTemplate, DetectsLlama31Dates) {
  const ChatFormat l31 = detect_chat_format(kLlama31Template, false, "");
  EXPECT_EQ(l31.kind, ChatTemplate::Llama3);
  EXPECT_EQ(l31.knowledge_date, "December 2023");
  EXPECT_EQ(l31.today_date, "26 Jul 2024");
  const ChatFormat l30 = detect_chat_format(kLlama3Template, false, "");
  EXPECT_EQ(l30.knowledge_date, "");
  EXPECT_EQ(l30.today_date, "");
  // Llama 3.2 renders today's date (taken before and after, in case the day changes in between).
  const std::string before = strftime_today();
  const ChatFormat l32 = detect_chat_format(kLlama32Template, false, "");
  const std::string after = strftime_today();
  EXPECT_EQ(l32.knowledge_date, "December 2023");
  EXPECT_TRUE(l32.today_date == before || l32.today_date == after) << l32.today_date;
  // Another knowledge date and default date are read, not assumed.
  std::string other = kLlama31Template;
  other.replace(other.find("December 2023"), 13, "March 2025");
  other.replace(other.find("26 Jul 2024"), 11, "01 Jan 2030");
  const ChatFormat o = detect_chat_format(other, false, "");
  EXPECT_EQ(o.knowledge_date, "March 2025");
  EXPECT_EQ(o.today_date, "01 Jan 2030");
  std::string undated = kLlama31Template;
  const size_t set = undated.find("{%- set date_string");
  undated.erase(set, undated.find("%}", set) + 2 - set);
  const std::string msg = error_of([&] { detect_chat_format(undated, false, ""); });
  EXPECT_NE(msg.find("date_string"), std::string::npos) << msg;
}

// The expected strings below are what transformers' apply_chat_template renders with each
// model's own template (bos_token "<s>", eos_token "</s>").
TEST(ChatTemplate, RenderLlama2) {
  const ChatFormat f = with_tokens(ChatTemplate::Llama2);
  EXPECT_EQ(render_chat(f, {{"user", "你好"}}, true), "<s>[INST] 你好 [/INST]");
  EXPECT_EQ(render_chat(f, {{"system", "You are a helpful assistant."}, {"user", "你好"}}, true),
            "<s>[INST] <<SYS>>\nYou are a helpful assistant.\n<</SYS>>\n\n你好 [/INST]");
  EXPECT_EQ(render_chat(f, {{"user", " Hi \n"}, {"assistant", "  Hello! How can I help?  "},
                            {"user", "Tell me a joke."}}, true),
            "<s>[INST] Hi [/INST] Hello! How can I help? </s><s>[INST] Tell me a joke. [/INST]");
  // The system block and the first user message are stripped together: the system text keeps
  // its own spaces.
  EXPECT_EQ(render_chat(f, {{"system", " Be brief. "}, {"user", "Hi"}, {"assistant", "Hello."}, {"user", " Bye "}},
                        false),
            "<s>[INST] <<SYS>>\n Be brief. \n<</SYS>>\n\nHi [/INST] Hello. </s><s>[INST] Bye [/INST]");
  // strip() removes Unicode spaces too (U+3000, U+00A0), as Python's does.
  EXPECT_EQ(render_chat(f, {{"user", "\xE3\x80\x80" "你好\xC2\xA0"}}, true), "<s>[INST] 你好 [/INST]");
}

TEST(ChatTemplate, RenderMistral) {
  ChatFormat f = with_tokens(ChatTemplate::Mistral);
  const std::vector<ChatMessage> turns = {
      {"user", " Hi \n"}, {"assistant", "  Hello! How can I help?  "}, {"user", "Tell me a joke."}};
  EXPECT_EQ(render_chat(f, {{"user", "你好"}}, true), "<s>[INST] 你好 [/INST]");
  EXPECT_EQ(render_chat(f, turns, true),
            "<s>[INST]  Hi \n [/INST]  Hello! How can I help?  </s>[INST] Tell me a joke. [/INST]");
  f.mistral = MistralStyle::SpaceAfterEos;
  EXPECT_EQ(render_chat(f, turns, false),
            "<s>[INST]  Hi \n [/INST]  Hello! How can I help?  </s> [INST] Tell me a joke. [/INST]");
  f.mistral = MistralStyle::Spaced;
  EXPECT_EQ(render_chat(f, {{"user", "你好"}}, true), "<s> [INST] 你好 [/INST]");
  EXPECT_EQ(render_chat(f, {{"system", "You are a helpful assistant."}, {"user", "你好"}}, true),
            "<s> [INST] You are a helpful assistant.\n\n你好 [/INST]");
  EXPECT_EQ(render_chat(f, turns, true),
            "<s> [INST]  Hi \n [/INST]   Hello! How can I help?  </s> [INST] Tell me a joke. [/INST]");
  EXPECT_EQ(render_chat(f, {{"system", " Be brief. "}, {"user", "Hi"}, {"assistant", "Hello."}, {"user", " Bye "}},
                        true),
            "<s> [INST]  Be brief. \n\nHi [/INST] Hello.</s> [INST]  Bye  [/INST]");
}

// Mistral v0.3 and Nemo (expected strings from their official templates): the system message
// goes before the last message, and is lost when the conversation ends with a reply.
TEST(ChatTemplate, RenderMistralV3AndNemo) {
  ChatFormat v3 = with_tokens(ChatTemplate::Mistral);
  v3.mistral = MistralStyle::V3;
  ChatFormat nemo = v3;
  nemo.mistral = MistralStyle::Tekken;
  struct Case {
    std::vector<ChatMessage> msgs;
    std::string v3, nemo;  // the renderings of the two templates
  };
  const std::vector<Case> cases = {
      {{{"user", "你好"}}, "<s>[INST] 你好[/INST]", "<s>[INST]你好[/INST]"},
      {{{"system", "You are a helpful assistant."}, {"user", "你好"}},
       "<s>[INST] You are a helpful assistant.\n\n你好[/INST]",
       "<s>[INST]You are a helpful assistant.\n\n你好[/INST]"},
      {{{"user", " Hi \n"}, {"assistant", "  Hello! How can I help?  "}, {"user", "Tell me a joke."}},
       "<s>[INST]  Hi \n[/INST] Hello! How can I help?</s>[INST] Tell me a joke.[/INST]",
       "<s>[INST] Hi \n[/INST]  Hello! How can I help?  </s>[INST]Tell me a joke.[/INST]"},
      {{{"system", " Be brief. "}, {"user", "Hi"}, {"assistant", "Hello."}, {"user", " Bye "}},
       "<s>[INST] Hi[/INST] Hello.</s>[INST]  Be brief. \n\n Bye [/INST]",
       "<s>[INST]Hi[/INST]Hello.</s>[INST] Be brief. \n\n Bye [/INST]"},
      {{{"system", "S"}, {"user", "Hi"}, {"assistant", " Yo "}}, "<s>[INST] Hi[/INST] Yo</s>",
       "<s>[INST]Hi[/INST] Yo </s>"},
      {{{"system", "S"}}, "<s>", "<s>"},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(render_chat(v3, c.msgs, true), c.v3);
    EXPECT_EQ(render_chat(nemo, c.msgs, true), c.nemo);
  }

  for (const ChatFormat& f : {v3, nemo}) {
    std::string msg = error_of([&] { render_chat(f, {{"user", "A"}, {"user", "B"}}, true); });
    EXPECT_NE(msg.find("message 2 is a 'user' message"), std::string::npos) << msg;
    msg = error_of([&] { render_chat(f, {{"user", "A"}, {"tool", "B"}}, true); });
    EXPECT_NE(msg.find("message 2 is a 'tool' message"), std::string::npos) << msg;
  }
}

TEST(ChatTemplate, DetectsDeepSeekR1) {
  const ChatFormat first = detect_chat_format(kDeepSeekR1Template, false, "");
  EXPECT_EQ(first.kind, ChatTemplate::DeepSeekR1);
  EXPECT_FALSE(first.think_prompt);
  const ChatFormat later = detect_chat_format(deepseek_r1_think_template(), false, "");
  EXPECT_EQ(later.kind, ChatTemplate::DeepSeekR1);
  EXPECT_TRUE(later.think_prompt);
  EXPECT_TRUE(detect_chat_format(deepseek_r1_think_template(), false, "deepseek-r1").think_prompt);
  EXPECT_FALSE(detect_chat_format(kZephyrTemplate, false, "deepseek-r1").think_prompt);
  // A template that writes the system messages otherwise is not recognised.
  std::string joined = kDeepSeekR1Template;
  const std::string keep_last = "{% set ns.system_prompt = message['content'] %}";
  joined.replace(joined.find(keep_last), keep_last.size(),
                 "{% set ns.system_prompt = ns.system_prompt + '\\n\\n' + message['content'] %}");
  const std::string msg = error_of([&] { detect_chat_format(joined, false, ""); });
  EXPECT_NE(msg.find("unknown chat template"), std::string::npos) << msg;
}

// Expected strings from the official DeepSeek-R1-Distill-Qwen templates (both revisions).
TEST(ChatTemplate, RenderDeepSeekR1) {
  ChatFormat f = format_of(ChatTemplate::DeepSeekR1);
  f.bos_text = "<｜begin▁of▁sentence｜>";
  const std::string bos = f.bos_text;
  const std::vector<ChatMessage> turns = {
      {"user", "1+1?"}, {"assistant", "<think>\nadd\n</think>\n\n2"}, {"user", "2+2?"}};
  // Only the last system message counts, wherever it stands; a reply keeps what follows its last
  // "</think>".
  const std::vector<ChatMessage> scattered = {
      {"user", "A"}, {"system", "S1"}, {"assistant", "x</think>y</think> z "}, {"system", "S2"}};
  EXPECT_EQ(render_chat(f, {{"user", "你好"}}, true), bos + "<｜User｜>你好<｜Assistant｜>");
  EXPECT_EQ(render_chat(f, {{"user", "你好"}}, false), bos + "<｜User｜>你好");
  EXPECT_EQ(render_chat(f, {{"system", "You are a helpful assistant."}, {"user", "你好"}}, true),
            bos + "You are a helpful assistant.<｜User｜>你好<｜Assistant｜>");
  EXPECT_EQ(render_chat(f, turns, true),
            bos + "<｜User｜>1+1?<｜Assistant｜>\n\n2<｜end▁of▁sentence｜><｜User｜>2+2?<｜Assistant｜>");
  EXPECT_EQ(render_chat(f, scattered, false), bos + "S2<｜User｜>A<｜Assistant｜> z <｜end▁of▁sentence｜>");
  EXPECT_EQ(render_chat(f, {{"assistant", "A"}, {"assistant", "B"}}, true),
            bos + "<｜Assistant｜>A<｜end▁of▁sentence｜><｜Assistant｜>B<｜end▁of▁sentence｜><｜Assistant｜>");
  EXPECT_EQ(render_chat(f, {}, true), bos + "<｜Assistant｜>");
  f.think_prompt = true;
  EXPECT_EQ(render_chat(f, turns, true),
            bos + "<｜User｜>1+1?<｜Assistant｜>\n\n2<｜end▁of▁sentence｜><｜User｜>2+2?<｜Assistant｜><think>\n");
  EXPECT_EQ(render_chat(f, {{"user", "你好"}}, false), bos + "<｜User｜>你好");

  std::string msg = error_of([&] { render_chat(f, {{"user", "A"}, {"tool", "B"}}, true); });
  EXPECT_NE(msg.find("the deepseek-r1 chat format takes system, user and assistant messages, not 'tool'"),
            std::string::npos)
      << msg;
  f.bos_text.clear();
  msg = error_of([&] { render_chat(f, {{"user", "A"}}, true); });
  EXPECT_NE(msg.find("the deepseek-r1 chat format writes the BOS token as text"), std::string::npos) << msg;
}

// A chat_template from tests/tokenizer/data (each folder's README.md says where each text comes
// from; the file ends with a newline that the JSON string does not have).
std::string data_template(const std::string& folder, const std::string& name) {
  const std::string path = std::string(TLLM_SOURCE_DIR) + "/tests/tokenizer/data/" + folder + "/" + name + ".jinja";
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in) << path;
  std::ostringstream ss;
  ss << in.rdbuf();
  std::string text = ss.str();
  if (!text.empty() && text.back() == '\n') text.pop_back();
  return text;
}

// The chat_template of a DeepSeek-R1 revision.
std::string r1_template(const std::string& name) { return data_template("deepseek-r1", name); }

TEST(ChatTemplate, DetectsDeepSeekR1Revisions) {
  struct Revision {
    const char* file;
    bool think_prompt, join_system, assistant_after_user;
  };
  for (const Revision& r : {Revision{"r1-distill", false, false, false},  // first release
                            Revision{"r1-distill-think", true, false, false}, Revision{"r1", true, true, false},
                            Revision{"r1-0528", false, true, true}, Revision{"r1-0528-qwen3-8b", false, true, true}}) {
    SCOPED_TRACE(r.file);
    const std::string tmpl = r1_template(r.file);
    for (const char* override_name : {"", "deepseek-r1"}) {
      const ChatFormat f = detect_chat_format(tmpl, false, override_name);
      EXPECT_EQ(f.kind, ChatTemplate::DeepSeekR1);
      EXPECT_EQ(f.think_prompt, r.think_prompt);
      EXPECT_EQ(f.join_system, r.join_system);
      EXPECT_EQ(f.assistant_after_user, r.assistant_after_user);
    }
  }
  // The same templates with a fragment that renders otherwise are not recognised: replies that keep
  // their reasoning (as DeepSeek-V3's template writes them), system messages joined with a space.
  auto without = [](std::string t, const std::string& what, const std::string& with) {
    const size_t k = t.find(what);
    EXPECT_NE(k, std::string::npos) << what;
    return k == std::string::npos ? t : t.replace(k, what.size(), with);
  };
  const std::string keeps_reasoning =
      without(r1_template("r1-0528"), "{% set content = content.split('</think>')[-1] %}", "");
  const std::string space_joined =
      without(r1_template("r1"), "ns.system_prompt + '\\n\\n' +", "ns.system_prompt + ' ' +");
  for (const std::string& t : {keeps_reasoning, space_joined}) {
    const std::string msg = error_of([&] { detect_chat_format(t, false, ""); });
    EXPECT_NE(msg.find("unknown chat template"), std::string::npos) << msg;
  }
}

// Expected strings from the templates of DeepSeek-R1 (later revision), R1-0528 and
// R1-0528-Qwen3-8B rendered by jinja2 as Hugging Face renders them.
TEST(ChatTemplate, RenderDeepSeekR1Revisions) {
  const std::string bos = "<｜begin▁of▁sentence｜>";
  const std::vector<ChatMessage> systems = {{"system", "S1"}, {"user", "你好"}, {"system", "S2"}};
  const std::vector<ChatMessage> turns = {{"system", "Be brief."},
                                          {"user", "1+1?"},
                                          {"assistant", "<think>\nadd\n</think>\n\n2"},
                                          {"user", "2+2?"}};
  const std::vector<ChatMessage> reply_last = {{"user", "1+1?"}, {"assistant", "x</think>y</think> z "}};
  const std::vector<ChatMessage> user_then_system = {{"user", "Q"}, {"system", "late"}};

  ChatFormat r1 = detect_chat_format(r1_template("r1"), false, "");
  r1.bos_text = bos;
  EXPECT_EQ(render_chat(r1, systems, true), bos + "S1\n\nS2<｜User｜>你好<｜Assistant｜><think>\n");
  EXPECT_EQ(render_chat(r1, systems, false), bos + "S1\n\nS2<｜User｜>你好");
  EXPECT_EQ(render_chat(r1, turns, true), bos +
                                              "Be brief.<｜User｜>1+1?<｜Assistant｜>\n\n2<｜end▁of▁sentence｜>"
                                              "<｜User｜>2+2?<｜Assistant｜><think>\n");
  EXPECT_EQ(render_chat(r1, reply_last, true),
            bos + "<｜User｜>1+1?<｜Assistant｜> z <｜end▁of▁sentence｜><｜Assistant｜><think>\n");
  EXPECT_EQ(render_chat(r1, {}, true), bos + "<｜Assistant｜><think>\n");
  EXPECT_EQ(render_chat(r1, user_then_system, true), bos + "late<｜User｜>Q<｜Assistant｜><think>\n");

  for (const char* file : {"r1-0528", "r1-0528-qwen3-8b"}) {
    SCOPED_TRACE(file);
    ChatFormat f = detect_chat_format(r1_template(file), false, "");
    f.bos_text = bos;
    // "<｜Assistant｜>" follows each user message, with or without the generation prompt, which is
    // written only where a reply (or nothing) comes last.
    EXPECT_EQ(render_chat(f, systems, true), bos + "S1\n\nS2<｜User｜>你好<｜Assistant｜>");
    EXPECT_EQ(render_chat(f, systems, false), bos + "S1\n\nS2<｜User｜>你好<｜Assistant｜>");
    const std::string two_turns =
        bos + "Be brief.<｜User｜>1+1?<｜Assistant｜>\n\n2<｜end▁of▁sentence｜><｜User｜>2+2?<｜Assistant｜>";
    EXPECT_EQ(render_chat(f, turns, true), two_turns);
    EXPECT_EQ(render_chat(f, turns, false), two_turns);
    EXPECT_EQ(render_chat(f, reply_last, true),
              bos + "<｜User｜>1+1?<｜Assistant｜> z <｜end▁of▁sentence｜><｜Assistant｜>");
    EXPECT_EQ(render_chat(f, reply_last, false), bos + "<｜User｜>1+1?<｜Assistant｜> z <｜end▁of▁sentence｜>");
    EXPECT_EQ(render_chat(f, {}, true), bos + "<｜Assistant｜>");
    EXPECT_EQ(render_chat(f, {}, false), bos);
    EXPECT_EQ(render_chat(f, user_then_system, true), bos + "late<｜User｜>Q<｜Assistant｜>");
    const std::string msg = error_of([&] { render_chat(f, {{"user", "A"}, {"tool", "B"}}, true); });
    EXPECT_NE(msg.find("the deepseek-r1 chat format takes system, user and assistant messages, not 'tool'"),
              std::string::npos)
        << msg;
  }
}

TEST(ChatTemplate, RenderZephyr) {
  ChatFormat f = with_tokens(ChatTemplate::Zephyr);
  f.bos_text = "";  // the template writes no BOS
  EXPECT_EQ(render_chat(f, {{"user", "你好"}}, true), "<|user|>\n你好</s>\n<|assistant|>\n");
  EXPECT_EQ(render_chat(f, {{"user", "你好"}}, false), "<|user|>\n你好</s>\n");
  EXPECT_EQ(render_chat(f, {{"system", "You are a helpful assistant."}, {"user", "你好"}}, true),
            "<|system|>\nYou are a helpful assistant.</s>\n<|user|>\n你好</s>\n<|assistant|>\n");
  EXPECT_EQ(render_chat(f, {{"user", " Hi \n"}, {"assistant", "  Hello! How can I help?  "},
                            {"user", "Tell me a joke."}}, true),
            "<|user|>\n Hi \n</s>\n<|assistant|>\n  Hello! How can I help?  </s>\n<|user|>\nTell me a joke.</s>\n"
            "<|assistant|>\n");
  // The template checks no order of roles.
  EXPECT_EQ(render_chat(f, {{"assistant", "A"}}, true), "<|assistant|>\nA</s>\n<|assistant|>\n");
  EXPECT_EQ(render_chat(f, {}, true), "");
}

TEST(ChatTemplate, RenderLlama31) {
  const ChatFormat f = detect_chat_format(kLlama31Template, false, "");
  const std::string head =
      "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n"
      "Cutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n";
  EXPECT_EQ(render_chat(f, {{"user", "你好"}}, true),
            head + "<|eot_id|><|start_header_id|>user<|end_header_id|>\n\n你好<|eot_id|>"
                   "<|start_header_id|>assistant<|end_header_id|>\n\n");
  EXPECT_EQ(render_chat(f, {{"system", "You are a helpful assistant."}, {"user", "你好"}}, true),
            head + "You are a helpful assistant.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\n你好<|eot_id|>"
                   "<|start_header_id|>assistant<|end_header_id|>\n\n");
  EXPECT_EQ(render_chat(f, {{"system", " Be brief. "}, {"user", "Hi"}, {"assistant", "  Hello. "}, {"user", " Bye "}},
                        false),
            head + "Be brief.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
                   "<|start_header_id|>assistant<|end_header_id|>\n\nHello.<|eot_id|>"
                   "<|start_header_id|>user<|end_header_id|>\n\nBye<|eot_id|>");
}

TEST(ChatTemplate, RenderErrors) {
  const ChatFormat llama2 = with_tokens(ChatTemplate::Llama2);
  std::string msg = error_of([&] { render_chat(llama2, {{"user", "A"}, {"user", "B"}}, true); });
  EXPECT_NE(msg.find("user and assistant messages in turn"), std::string::npos) << msg;
  EXPECT_NE(msg.find("message 2 is a 'user' message"), std::string::npos) << msg;
  msg = error_of([&] { render_chat(llama2, {{"assistant", "A"}}, true); });
  EXPECT_NE(msg.find("message 1 is a 'assistant' message"), std::string::npos) << msg;
  msg = error_of([&] { render_chat(llama2, {{"system", "S"}, {"user", "A"}, {"system", "T"}}, true); });
  EXPECT_NE(msg.find("message 3 is a 'system' message"), std::string::npos) << msg;

  ChatFormat mistral = with_tokens(ChatTemplate::Mistral);
  msg = error_of([&] { render_chat(mistral, {{"system", "S"}, {"user", "你好"}}, true); });
  EXPECT_NE(msg.find("no system message"), std::string::npos) << msg;
  msg = error_of([&] { render_chat(mistral, {{"user", "A"}, {"assistant", "B"}, {"assistant", "C"}}, true); });
  EXPECT_NE(msg.find("message 3 is a 'assistant' message"), std::string::npos) << msg;
  mistral.mistral = MistralStyle::Spaced;
  msg = error_of([&] { render_chat(mistral, {{"system", "S"}, {"assistant", "B"}}, true); });
  EXPECT_NE(msg.find("message 2 is a 'assistant' message"), std::string::npos) << msg;

  const ChatFormat zephyr = with_tokens(ChatTemplate::Zephyr);
  msg = error_of([&] { render_chat(zephyr, {{"tool", "x"}}, true); });
  EXPECT_NE(msg.find("'tool'"), std::string::npos) << msg;

  // Without the token texts the formats that write them cannot render.
  for (ChatTemplate kind : {ChatTemplate::Llama2, ChatTemplate::Mistral, ChatTemplate::Zephyr}) {
    ChatFormat f;
    f.kind = kind;
    msg = error_of([&] { render_chat(f, {{"user", "你好"}}, true); });
    EXPECT_NE(msg.find(std::string("the ") + chat_template_name(kind) + " chat format writes the"), std::string::npos)
        << msg;
  }
}

// A GGUF file holding a chat template (none when empty) and a SentencePiece vocabulary: `tokens`
// and `types` as tokenizer.ggml.tokens / token_type. A negative bos / eos leaves that id out.
std::string write_vocab_file(const std::string& name, const std::string& tmpl, const std::vector<std::string>& tokens,
                             const std::vector<int32_t>& types, int64_t bos, int64_t eos) {
  GgufWriter w;
  w.set_string("general.architecture", "llama");
  if (!tmpl.empty()) w.set_string("tokenizer.chat_template", tmpl);
  w.set_string("tokenizer.ggml.model", "llama");
  w.set_string_array("tokenizer.ggml.tokens", tokens);
  w.set_i32_array("tokenizer.ggml.token_type", types);
  w.set_f32_array("tokenizer.ggml.scores", std::vector<float>(tokens.size(), 0.0f));
  if (bos >= 0) w.set_u32("tokenizer.ggml.bos_token_id", uint32_t(bos));
  if (eos >= 0) w.set_u32("tokenizer.ggml.eos_token_id", uint32_t(eos));
  const std::string path = ::testing::TempDir() + "chat_template_test_" + name + ".gguf";
  w.write(path, [](size_t, uint8_t*, size_t) {});
  return path;
}

// The format detected for the file at `path` with the tokenizer loaded from it.
ChatFormat detect_file(const std::string& path, const std::string& override_name = "") {
  const std::unique_ptr<GgufFile> f = GgufFile::open(path);
  return detect_chat_format(*f, *Tokenizer::from_gguf(*f), override_name);
}

TEST(ChatTemplate, FromGguf) {
  auto write = [&](const std::string& name, const std::string& tmpl, bool im_start) {
    std::vector<std::string> tokens = {"<unk>", "a"};
    std::vector<int32_t> types = {2, 1};
    if (im_start) {
      tokens.push_back("<|im_start|>");
      types.push_back(3);
    }
    return write_vocab_file(name, tmpl, tokens, types, -1, -1);
  };
  const std::string qwen = write("qwen", kQwen25Template, true);
  const ChatFormat f = detect_file(qwen);
  EXPECT_EQ(f.kind, ChatTemplate::ChatML);
  EXPECT_EQ(f.default_system, "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.");

  const std::string bare_chatml = write("bare_chatml", "", true);
  EXPECT_EQ(detect_file(bare_chatml).kind, ChatTemplate::ChatML);

  const std::string bare = write("bare", "", false);
  const std::string msg = error_of([&] { detect_file(bare); });
  EXPECT_EQ(msg.find(bare), 0u) << msg;
  EXPECT_NE(msg.find("--chat-template chatml|llama3|llama2|mistral|zephyr|deepseek-r1|none"), std::string::npos) << msg;

  const std::string gemma = write("gemma", kGemmaTemplate, false);
  const std::string unknown = error_of([&] { detect_file(gemma); });
  EXPECT_EQ(unknown.find(gemma), 0u) << unknown;
  EXPECT_NE(unknown.find("unknown chat template"), std::string::npos) << unknown;

  for (const std::string& p : {qwen, bare_chatml, bare, gemma}) std::remove(p.c_str());
}

// The BOS and EOS texts are those of the tokenizer loaded from the file.
TEST(ChatTemplate, FromGgufTokenTexts) {
  // A SentencePiece vocabulary: <unk> 0, <s> 1, </s> 2 (control), a 3, and a control token <eos2>.
  const std::vector<std::string> pieces = {"<unk>", "<s>", "</s>", "a", "<eos2>"};
  const std::vector<int32_t> types = {2, 3, 3, 1, 3};
  auto write = [&](const std::string& name, const std::string& tmpl, int64_t bos, int64_t eos) {
    return write_vocab_file(name, tmpl, pieces, types, bos, eos);
  };
  const std::string llama2 = write("llama2", kLlama2Template, 1, 2);
  const ChatFormat f = detect_file(llama2);
  EXPECT_EQ(f.kind, ChatTemplate::Llama2);
  EXPECT_EQ(f.bos_text, "<s>");
  EXPECT_EQ(f.eos_text, "</s>");
  EXPECT_EQ(render_chat(f, {{"user", "你好"}, {"assistant", "Hi"}}, true), "<s>[INST] 你好 [/INST] Hi </s>");

  // Without the id keys the SentencePiece tokenizer takes <s> and </s>, and so does the format.
  const std::string no_ids = write("no_ids", kLlama2Template, -1, -1);
  const ChatFormat n = detect_file(no_ids);
  EXPECT_EQ(n.bos_text, "<s>");
  EXPECT_EQ(n.eos_text, "</s>");
  EXPECT_EQ(render_chat(n, {{"user", "你好"}, {"assistant", "Hi"}}, true), "<s>[INST] 你好 [/INST] Hi </s>");

  // Another EOS id gives that token's text.
  const std::string other_eos = write("other_eos", kMistralV01Template, 1, 4);
  const ChatFormat m = detect_file(other_eos);
  EXPECT_EQ(m.kind, ChatTemplate::Mistral);
  EXPECT_EQ(m.mistral, MistralStyle::SpaceAfterEos);
  EXPECT_EQ(render_chat(m, {{"user", "你好"}, {"assistant", "Hi"}}, false), "<s>[INST] 你好 [/INST]Hi<eos2> ");

  // Zephyr writes only the EOS text; Llama 3 none.
  const std::string zephyr = write("zephyr", kZephyrTemplate, -1, 2);
  const ChatFormat z = detect_file(zephyr);
  EXPECT_EQ(z.kind, ChatTemplate::Zephyr);
  EXPECT_EQ(render_chat(z, {{"user", "你好"}}, true), "<|user|>\n你好</s>\n<|assistant|>\n");
  const std::string llama31 = write("llama31", kLlama31Template, -1, -1);
  const ChatFormat l = detect_file(llama31);
  EXPECT_EQ(l.kind, ChatTemplate::Llama3);
  EXPECT_EQ(l.today_date, "26 Jul 2024");

  // A vocabulary without <s> and </s> has no BOS or EOS: the formats that write them cannot render,
  // and the error names the file; one that writes neither is fine.
  const std::string bpe = write_vocab_file("no_bos", kLlama2Template, {"<unk>", "a"}, {2, 1}, -1, -1);
  const std::string msg = error_of([&] { detect_file(bpe); });
  EXPECT_EQ(msg.find(bpe + ": "), 0u) << msg;
  EXPECT_NE(msg.find("the llama2 chat format writes the BOS token as text, and the tokenizer has no BOS token"),
            std::string::npos)
      << msg;
  EXPECT_EQ(detect_file(bpe, "chatml").kind, ChatTemplate::ChatML);

  // DeepSeek-R1 writes its tokenizer's BOS text.
  const std::string r1 = write_vocab_file("r1", kDeepSeekR1Template,
                                          {"<unk>", "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "a"},
                                          {2, 3, 3, 1}, 1, 2);
  const ChatFormat d = detect_file(r1);
  EXPECT_EQ(d.kind, ChatTemplate::DeepSeekR1);
  EXPECT_EQ(render_chat(d, {{"user", "你好"}}, true), "<｜begin▁of▁sentence｜><｜User｜>你好<｜Assistant｜>");

  for (const std::string& p : {llama2, no_ids, other_eos, zephyr, llama31, bpe, r1}) std::remove(p.c_str());
}

// ---- tools: Qwen2.5's ChatML template ----------------------------------------------------------

const std::string kQwenSystem = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.";
// The tools block of Qwen2.5's system turn, around the tools' JSON lines.
const std::string kToolsOpen =
    "\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>";
const std::string kToolsClose =
    "\n</tools>\n\nFor each function call, return a json object with function name and arguments within "
    "<tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": "
    "<args-json-object>}\n</tool_call><|im_end|>\n";

ChatFormat qwen25_format() {
  ChatFormat f = detect_chat_format(data_template("qwen2.5", "qwen2.5-instruct"), false, "");
  f.bos_text = "<|endoftext|>";
  f.eos_text = "<|im_end|>";
  return f;
}

TEST(ChatTemplate, DetectsQwen25Tools) {
  const ChatFormat f = qwen25_format();
  EXPECT_EQ(f.kind, ChatTemplate::ChatML);
  EXPECT_TRUE(f.tools);
  EXPECT_EQ(f.default_system, kQwenSystem);
  // Templates without the tool parts render none.
  for (const std::string& t : {kQwen25Template, kSmolLM2Template, kPlainChatML}) {
    EXPECT_FALSE(detect_chat_format(t, false, "").tools) << t;
  }
  // Without tools, Qwen2.5's full template renders as the others.
  EXPECT_EQ(render_chat(f, {{"user", "你好"}}, true),
            "<|im_start|>system\n" + kQwenSystem + "<|im_end|>\n<|im_start|>user\n你好<|im_end|>\n"
            "<|im_start|>assistant\n");
  EXPECT_EQ(render_chat(f, {{"system", "S"}, {"user", "Q"}, {"system", "late"}}, false),
            "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nQ<|im_end|>\n<|im_start|>system\nlate<|im_end|>\n");
}

TEST(ChatTemplate, RenderQwen25Tools) {
  const ChatFormat f = qwen25_format();
  const std::string weather = chat_json_text(
      R"({"type":"function","function":{"name":"get_weather","parameters":{"type":"object",)"
      R"("properties":{"city":{"type":"string","description":"城市"}}}}})");
  EXPECT_EQ(weather,
            R"({"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", )"
            R"("properties": {"city": {"type": "string", "description": "城市"}}}}})");
  ChatRequest r;
  r.tools = {weather, chat_json_text(R"({"name":"now"})")};
  r.messages = {{"user", "Weather in Paris?"}};
  EXPECT_EQ(render_chat_request(f, r, true), "<|im_start|>system\n" + kQwenSystem + kToolsOpen + "\n" + weather +
                                         "\n{\"name\": \"now\"}" + kToolsClose +
                                         "<|im_start|>user\nWeather in Paris?<|im_end|>\n<|im_start|>assistant\n");
  // A system message takes the default prompt's place before the tools.
  r.messages.insert(r.messages.begin(), {"system", "Be brief."});
  EXPECT_EQ(render_chat_request(f, r, false), "<|im_start|>system\nBe brief." + kToolsOpen + "\n" + weather +
                                          "\n{\"name\": \"now\"}" + kToolsClose +
                                          "<|im_start|>user\nWeather in Paris?<|im_end|>\n");
}

TEST(ChatTemplate, RenderQwen25ToolCallsAndToolMessages) {
  const ChatFormat f = qwen25_format();
  ChatMessage calls{"assistant", "", {{"f", R"({"x": 1})"}, {"g", "{}"}}};
  const std::vector<ChatMessage> msgs = {{"system", "S"}, {"user", "Q"}, calls, {"tool", "R1"}, {"tool", "R2"},
                                         {"assistant", "done"}};
  EXPECT_EQ(render_chat(f, msgs, false),
            "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nQ<|im_end|>\n"
            "<|im_start|>assistant\n<tool_call>\n{\"name\": \"f\", \"arguments\": {\"x\": 1}}\n</tool_call>\n"
            "<tool_call>\n{\"name\": \"g\", \"arguments\": {}}\n</tool_call><|im_end|>\n"
            "<|im_start|>user\n<tool_response>\nR1\n</tool_response>\n<tool_response>\nR2\n</tool_response>"
            "<|im_end|>\n<|im_start|>assistant\ndone<|im_end|>\n");
  // Content before the calls; a tool message first and last.
  calls.content = "Let me check.";
  EXPECT_EQ(render_chat(f, {{"tool", "R"}, calls, {"tool", "R3"}}, true),
            "<|im_start|>system\n" + kQwenSystem + "<|im_end|>\n<|im_start|>user\n<tool_response>\nR\n"
            "</tool_response><|im_end|>\n<|im_start|>assistant\nLet me check.\n<tool_call>\n{\"name\": \"f\", "
            "\"arguments\": {\"x\": 1}}\n</tool_call>\n<tool_call>\n{\"name\": \"g\", \"arguments\": {}}\n"
            "</tool_call><|im_end|>\n<|im_start|>user\n<tool_response>\nR3\n</tool_response><|im_end|>\n"
            "<|im_start|>assistant\n");
  std::string msg = error_of([&] { render_chat(f, {{"user", "Q"}, {"function", "x"}}, true); });
  EXPECT_NE(msg.find("message 2 is a 'function' message"), std::string::npos) << msg;
  msg = error_of([&] { render_chat(f, std::vector<ChatMessage>{}, true); });
  EXPECT_NE(msg.find("at least one message"), std::string::npos) << msg;
}

TEST(ChatTemplate, FormatsWithoutToolsRefuseThem) {
  ChatFormat llama3 = detect_chat_format(kLlama3Template, false, "");
  ChatFormat chatml = detect_chat_format(kQwen25Template, false, "");  // the abridged one: no tools
  for (const ChatFormat& f : {llama3, chatml}) {
    SCOPED_TRACE(chat_template_name(f.kind));
    ChatRequest r;
    r.messages = {{"user", "Q"}};
    r.tools = {"{}"};
    std::string msg = error_of([&] { render_chat_request(f, r, true); });
    EXPECT_NE(msg.find("renders no tools, tool calls or tool messages"), std::string::npos) << msg;
    msg = error_of([&] { render_chat(f, {{"user", "Q"}, {"assistant", "", {{"f", "{}"}}}}, true); });
    EXPECT_NE(msg.find("message 2: the "), std::string::npos) << msg;
    msg = error_of([&] { render_chat(f, {{"user", "Q"}, {"tool", "R"}}, true); });
    EXPECT_NE(msg.find("message 2: the "), std::string::npos) << msg;
  }
}

TEST(ChatTemplate, ChatJsonTextIsPythonsJsonDumps) {
  EXPECT_EQ(chat_json_text(R"({"b":[true,false,null,1,-2.5,1e-07,1e+16],"a":{}, "c":[]})"),
            R"({"b": [true, false, null, 1, -2.5, 1e-07, 1e+16], "a": {}, "c": []})");
  // Python's escapes; non-ASCII text as it is (ensure_ascii=False).
  EXPECT_EQ(chat_json_text(R"(["q\"b\\s\/n\nr\rt\tb\bf\fc\u0001d\u007f", "é😀"])"),
            "[\"q\\\"b\\\\s/n\\nr\\rt\\tb\\bf\\fc\\u0001d\x7f\", \"é😀\"]");
  const std::string msg = error_of([] { chat_json_text("{\"a\":"); });
  EXPECT_NE(msg.find("not JSON"), std::string::npos) << msg;
}

TEST(ChatTemplate, ParseChatRequest) {
  const ChatRequest r = parse_chat_request(
      R"({"messages":[{"role":"system","content":"S"},{"role":"user","content":"Q"},)"
      R"({"role":"assistant","content":null,"tool_calls":[{"type":"function","function":)"
      R"({"name":"f","arguments":{"city":"Paris"}}},{"name":"g","arguments":"{\"raw\": 1}"}]},)"
      R"({"role":"tool","content":"R"}],"tools":[{"name":"f"}]})",
      "conv.json");
  ASSERT_EQ(r.messages.size(), 4u);
  EXPECT_EQ(r.messages[0].role, "system");
  EXPECT_EQ(r.messages[2].content, "");
  ASSERT_EQ(r.messages[2].tool_calls.size(), 2u);
  EXPECT_EQ(r.messages[2].tool_calls[0].name, "f");
  EXPECT_EQ(r.messages[2].tool_calls[0].arguments, R"({"city": "Paris"})");
  // Arguments given as a string are a JSON string to the template's tojson, as in Python.
  EXPECT_EQ(r.messages[2].tool_calls[1].arguments, R"("{\"raw\": 1}")");
  EXPECT_EQ(r.messages[3].role, "tool");
  EXPECT_EQ(r.tools, std::vector<std::string>{R"({"name": "f"})"});
  EXPECT_EQ(parse_chat_request(R"([{"role":"user","content":"hi"}])", "a.json").messages.size(), 1u);
  EXPECT_EQ(parse_chat_tools(R"([{"name":"f"},{"name":"g"}])", "t.json").size(), 2u);

  const std::pair<const char*, const char*> bad[] = {
      {R"({"messages":)", "conv.json: not JSON"},
      {R"([{"role":"user","content":"x","n":1e400}])", "conv.json: not JSON (" /* number overflow */},
      {R"("hello")", "conv.json: expected an array of messages"},
      {R"({"tools":[]})", "conv.json: no \"messages\""},
      {R"([{"role":"user"}])", "conv.json: messages[0]: no \"content\""},
      {R"([{"role":"bot","content":"x"}])", "conv.json: messages[0].role: 'bot'"},
      {R"([{"role":"user","content":5}])", "conv.json: messages[0].content: expected a string"},
      {R"([{"role":"user","content":"x","tool_calls":[]}])", "messages[0].tool_calls: expected an array, in an"},
      {R"([{"role":"assistant","content":null,"tool_calls":[{"function":{"name":"f"}}]}])",
       "messages[0].tool_calls[0].function: no \"arguments\""},
      {R"([{"role":"assistant","content":"x","tool_calls":[7]}])", "messages[0].tool_calls[0]: expected an object"},
      {R"({"messages":[],"tools":{}})", "conv.json: tools: expected an array of tool definitions"},
      {R"(["x"])", "conv.json: messages[0]: expected an object"},
  };
  for (const auto& [text, want] : bad) {
    const std::string msg = error_of([&] { parse_chat_request(text, "conv.json"); });
    EXPECT_NE(msg.find(want), std::string::npos) << text << "\n" << msg;
  }
  std::string msg = error_of([] { parse_chat_tools(R"({"name":"f"})", "t.json"); });
  EXPECT_NE(msg.find("t.json: expected an array of tool definitions"), std::string::npos) << msg;
  // JSON is written by recursion, one level at a time: 256 levels are written, more are an error.
  auto nested = [](int levels) { return std::string(size_t(levels), '[') + std::string(size_t(levels), ']'); };
  EXPECT_EQ(parse_chat_tools("[" + nested(256) + "]", "t.json")[0].size(), 512u);
  msg = error_of([&] { parse_chat_tools("[" + nested(257) + "]", "t.json"); });
  EXPECT_NE(msg.find("t.json[0]: nested more than 256 levels deep"), std::string::npos) << msg;
  msg = error_of([&] {
    parse_chat_request(R"([{"role":"assistant","tool_calls":[{"name":"f","arguments":)" + nested(100000) + "}]}]",
                       "conv.json");
  });
  EXPECT_NE(msg.find("conv.json: messages[0].tool_calls[0].arguments: nested more than 256 levels deep"),
            std::string::npos)
      << msg;
}

TEST(ChatTemplate, AssistantReplyParsesQwen25ToolCalls) {
  const ChatFormat f = qwen25_format();
  const std::string call = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>";
  ChatMessage m = assistant_reply(f, "Let me check.\n" + call);
  EXPECT_EQ(m.role, "assistant");
  EXPECT_EQ(m.content, "Let me check.");
  ASSERT_EQ(m.tool_calls.size(), 1u);
  EXPECT_EQ(m.tool_calls[0].name, "get_weather");
  EXPECT_EQ(m.tool_calls[0].arguments, R"({"city": "Paris"})");
  // Rendered again, the message is the reply the model wrote after the generation prompt.
  const std::vector<ChatMessage> before = {{"user", "Weather in Paris?"}};
  std::vector<ChatMessage> after = before;
  after.push_back(m);
  EXPECT_EQ(render_chat(f, after, false), render_chat(f, before, true) + "Let me check.\n" + call + "<|im_end|>\n");

  m = assistant_reply(f, call + "\n" + "<tool_call>{\"arguments\": [1, 2], \"name\": \"add\"}</tool_call>\n");
  EXPECT_EQ(m.content, "");
  ASSERT_EQ(m.tool_calls.size(), 2u);
  EXPECT_EQ(m.tool_calls[1].name, "add");
  EXPECT_EQ(m.tool_calls[1].arguments, "[1, 2]");

  // Anything else is the reply as it is.
  for (const std::string& text :
       {std::string("no call"), call + " and then text", std::string("<tool_call>\n{\"name\": \"f\"}\n</tool_call>"),
        std::string("<tool_call>\n{not json}\n</tool_call>"), std::string("<tool_call>\n{\"name\": 1, \"arguments\": {}}"),
        std::string("<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n")}) {
    m = assistant_reply(f, text);
    EXPECT_EQ(m.content, text);
    EXPECT_TRUE(m.tool_calls.empty()) << text;
  }
  // A format without tools keeps the text whatever it holds.
  m = assistant_reply(detect_chat_format(kLlama3Template, false, ""), call);
  EXPECT_EQ(m.content, call);
  EXPECT_TRUE(m.tool_calls.empty());
}

TEST(ChatTemplate, ChatMessageJsonReadsBack) {
  const ChatMessage m{"assistant", "Let me check.", {{"get_weather", R"({"city": "Paris"})"}, {"now", "{}"}}};
  const std::string json = chat_message_json(m);
  EXPECT_EQ(json,
            R"({"role":"assistant","content":"Let me check.","tool_calls":[{"type":"function","function":)"
            R"({"name":"get_weather","arguments":{"city":"Paris"}}},{"type":"function","function":{"name":"now",)"
            R"("arguments":{}}}]})");
  const ChatRequest back = parse_chat_request("[" + json + "]", "reply");
  ASSERT_EQ(back.messages.size(), 1u);
  EXPECT_EQ(back.messages[0].content, m.content);
  ASSERT_EQ(back.messages[0].tool_calls.size(), 2u);
  EXPECT_EQ(back.messages[0].tool_calls[0].name, "get_weather");
  EXPECT_EQ(back.messages[0].tool_calls[0].arguments, m.tool_calls[0].arguments);
  // Bytes that are not UTF-8 (a reply cut inside a character) become U+FFFD.
  EXPECT_EQ(chat_message_json({"assistant", "a\xe4\xbd"}), "{\"role\":\"assistant\",\"content\":\"a\xef\xbf\xbd\"}");
}

}  // namespace
}  // namespace tllm
