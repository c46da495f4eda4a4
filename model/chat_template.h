// Chat formats: recognising a model's tokenizer.chat_template and rendering a conversation into the
// prompt text the model was trained on. Only the formats of the supported model families are known
// (no Jinja interpreter): ChatML (Qwen2, Qwen2.5, SmolLM2) and Llama 3.
#pragma once

#include <stdexcept>
#include <string>
#include <vector>

namespace tllm {

class GgufFile;

class ChatTemplateError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

enum class ChatTemplate { ChatML, Llama3, None };

struct ChatMessage {
  std::string role;  // "system", "user", "assistant"
  std::string content;
};

struct ChatFormat {
  ChatTemplate kind = ChatTemplate::ChatML;
  // System prompt the template inserts when the conversation does not open with a system message
  // (Qwen2.5: "You are Qwen, created by Alibaba Cloud. ..."; SmolLM2: the SmolLM assistant
  // prompt written into its template); empty when the template has none.
  std::string default_system;
};

// "chatml" | "llama3" | "none"; throws ChatTemplateError for anything else.
ChatTemplate parse_chat_template_name(const std::string& name);
const char* chat_template_name(ChatTemplate t);

// Recognises template text: ChatML when it holds "<|im_start|>", Llama3 when it holds
// "<|start_header_id|>". With an empty template, ChatML when the vocabulary has <|im_start|>.
// A non-empty override_name ("chatml", "llama3", "none") chooses the format instead; the default
// system prompt is still taken from the template when the template is of that format.
// Throws ChatTemplateError ("unknown chat template; pass --chat-template chatml|llama3|none").
ChatFormat detect_chat_format(const std::string& template_text, bool has_im_start,
                              const std::string& override_name);
// Same, reading tokenizer.chat_template and the token list from a GGUF file; errors name the file.
ChatFormat detect_chat_format(const GgufFile& f, const std::string& override_name);

// The prompt text for msgs. ChatML: "<|im_start|>role\ncontent<|im_end|>\n" per message; Llama3:
// "<|begin_of_text|>" then "<|start_header_id|>role<|end_header_id|>\n\ncontent<|eot_id|>" per
// message (content trimmed, as the Llama 3 template does); None: the contents concatenated. The
// default system prompt opens the conversation when its first message is not a system message.
// add_generation_prompt appends the header of an assistant turn.
std::string render_chat(const ChatFormat& fmt, const std::vector<ChatMessage>& msgs,
                        bool add_generation_prompt);

}  // namespace tllm
