// Chat formats: recognising a model's tokenizer.chat_template and rendering a conversation into the
// prompt text the model was trained on, as Hugging Face apply_chat_template renders it with the
// model's own template. Only the formats of known model families are rendered (no Jinja
// interpreter): ChatML (Qwen2, Qwen2.5, SmolLM2), Llama 3 (3.0, and 3.1/3.2/3.3 with their dated
// system turn), Llama 2 chat, Mistral Instruct (v0.1, v0.2, Mixtral, v0.3, Nemo), Zephyr
// (TinyLlama chat) and DeepSeek-R1 (R1, R1-0528 and their Qwen and Llama distills).
#pragma once

#include <stdexcept>
#include <string>
#include <vector>

namespace tllm {

class GgufFile;
class Tokenizer;

class ChatTemplateError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

enum class ChatTemplate { ChatML, Llama3, Llama2, Mistral, Zephyr, DeepSeekR1, None };

// The revisions of the Mistral Instruct template, which differ in spaces and in system messages.
enum class MistralStyle {
  Plain,          // v0.2 and Mixtral as released: "[INST] u [/INST]a</s>"; no system message
  SpaceAfterEos,  // v0.1 as released: the same with a space after each "</s>"
  Spaced,         // the later revision: " [INST] u [/INST] a</s>", system text opening the
                  // first user message
  // The templates of Mistral v0.3 (v3 tokenizer) and Mistral Nemo (Tekken tokenizer), which put
  // the system text and "\n\n" before the last message when that is a user message (a
  // conversation that ends with a reply loses it):
  V3,      // "[INST] u[/INST] a</s>", each reply stripped
  Tekken,  // "[INST]u[/INST]a</s>"
};

// A function call in an assistant message: the function's name and its arguments as JSON text,
// written as the template's tojson writes them (chat_json_text).
struct ChatToolCall {
  std::string name;
  std::string arguments;
};

struct ChatMessage {
  std::string role;  // "system", "user", "assistant"; "tool" (a function's result) where fmt.tools
  std::string content;
  std::vector<ChatToolCall> tool_calls = {};  // assistant messages, where fmt.tools
};

// A conversation to render: its messages and the tools offered to the model (each tool's JSON
// text, as chat_json_text writes it).
struct ChatRequest {
  std::vector<ChatMessage> messages;
  std::vector<std::string> tools;
};

struct ChatFormat {
  ChatTemplate kind = ChatTemplate::ChatML;
  // System prompt the template inserts when the conversation does not open with a system message
  // (Qwen2.5: "You are Qwen, created by Alibaba Cloud. ..."; SmolLM2: the SmolLM assistant
  // prompt written into its template); empty when the template has none.
  std::string default_system;
  // The text of the BOS and EOS tokens, which the Llama 2 and Mistral templates (both), the
  // Zephyr template (EOS) and the DeepSeek-R1 template (BOS) write into the prompt as bos_token /
  // eos_token.
  std::string bos_text;
  std::string eos_text;
  MistralStyle mistral = MistralStyle::Plain;
  // Llama 3.1/3.2/3.3: the prompt always opens with a system turn that starts
  // "Cutting Knowledge Date: <knowledge_date>\nToday Date: <today_date>\n\n". Both are empty
  // for Llama 3.0, whose template has no such turn.
  std::string knowledge_date;  // "December 2023"
  std::string today_date;      // "26 Jul 2024"
  // DeepSeek-R1: what each revision of its template writes differently.
  //  - think_prompt: the generation prompt also opens the reasoning block
  //    ("<｜Assistant｜><think>\n"), as the later revisions of the R1 and distill templates write it;
  //  - join_system: all system messages, in order, joined with "\n\n" (the later R1 template and
  //    R1-0528's); otherwise only the last one (the distills' template);
  //  - assistant_after_user: R1-0528's template writes "<｜Assistant｜>" after each user message
  //    and each reply without it ("reply<｜end▁of▁sentence｜>"), and so writes the generation
  //    prompt "<｜Assistant｜>" only where the last message that is not a system message is a
  //    reply (or there is none).
  bool think_prompt = false;
  bool join_system = false;
  bool assistant_after_user = false;
  // ChatML: Qwen2.5's template, which renders tools (in the system turn), assistant messages with
  // tool calls and tool messages (recognised by "<tools></tools>" and "<tool_response>").
  bool tools = false;
};

// "chatml" | "llama3" | "llama2" | "mistral" | "zephyr" | "deepseek-r1" | "none"; throws
// ChatTemplateError for anything else.
ChatTemplate parse_chat_template_name(const std::string& name);
const char* chat_template_name(ChatTemplate t);
// "chatml|llama3|llama2|mistral|zephyr|deepseek-r1|none", for messages.
const char* chat_template_names();

// Recognises template text:
//   ChatML   "<|im_start|>";
//   Llama3   "<|start_header_id|>"; with "Cutting Knowledge Date" the knowledge date and the
//            default date_string are read from the template's literals, or today's date
//            ("%d %b %Y") where the template calls strftime_now, as Hugging Face provides it;
//   Llama2   "[INST]" and "<<SYS>>";
//   Mistral  "[INST]" and " [/INST]" without "<<SYS>>"; or the Mistral v0.3 / Nemo templates:
//            "[INST] " / "[INST]" + content + "[/INST]", the system message before the last
//            message ("loop.last and system_message"), no "[SYSTEM_PROMPT]", and the replies as
//            those templates write them (other variants of the family are not recognised);
//   Zephyr   "<|user|>" without "<|end|>" (Phi-3 writes <|end|> and is not recognised);
//   DeepSeekR1 "<｜User｜>" (full-width bars) in a template that removes the reasoning from each
//            reply ("content.split('</think>')[-1]") and is one of these revisions:
//            - the R1 distills' as first released: the last system message
//              ("set ns.system_prompt = message['content']"), each reply as '<｜Assistant｜>' +
//              content + '<｜end▁of▁sentence｜>', the generation prompt '<｜Assistant｜>';
//            - their later revision: the same with the generation prompt '<｜Assistant｜><think>\n'
//              (think_prompt);
//            - DeepSeek-R1's later revision: that, with the system messages joined
//              ("ns.system_prompt + '\n\n' + message['content']", join_system);
//            - DeepSeek-R1-0528's and its Qwen3-8B distill's: the system messages joined,
//              '<｜User｜>' + content + '<｜Assistant｜>', content + '<｜end▁of▁sentence｜>' and the
//              generation prompt "if add_generation_prompt and not ns.is_last_user"
//              (assistant_after_user).
//            Other templates with "<｜User｜>" (DeepSeek-V3's, which keeps the reasoning) are not
//            recognised.
// With an empty template, ChatML when the vocabulary has <|im_start|>. A non-empty override_name
// chooses the format instead; what the template says of that format (default system prompt,
// dates, Mistral revision) is still taken from it when it is of that format. bos_text and
// eos_text are left empty: the caller fills them from its tokenizer.
// Throws ChatTemplateError ("unknown chat template; pass --chat-template chatml|llama3|...").
ChatFormat detect_chat_format(const std::string& template_text, bool has_im_start,
                              const std::string& override_name);
// Same, for a model file and the tokenizer loaded from it: the template is its
// tokenizer.chat_template, has_im_start whether tok has <|im_start|>, and bos_text / eos_text are
// the texts of tok's BOS and EOS tokens (Tokenizer::token_text), so that the prompt holds exactly
// the tokens the tokenizer knows as BOS and EOS (for SentencePiece, <s> and </s> where the file
// names no ids). A format that writes a token tok lacks is an error. Errors name the file.
ChatFormat detect_chat_format(const GgufFile& f, const Tokenizer& tok, const std::string& override_name);

// The prompt text for msgs, as the model's template renders it:
//   ChatML   "<|im_start|>role\ncontent<|im_end|>\n" per message;
//   Llama3   "<|begin_of_text|>" then "<|start_header_id|>role<|end_header_id|>\n\ncontent<|eot_id|>"
//            per message (content trimmed); with knowledge_date set, the first turn is always the
//            system turn "Cutting Knowledge Date: ...\nToday Date: ...\n\n" + the system message;
//   Llama2   "<s>[INST] <<SYS>>\nsystem\n<</SYS>>\n\nuser [/INST] assistant </s><s>[INST] ..."
//            (each user message, with the system block before the first, and each assistant
//            message stripped); no generation prompt, as the assistant turn follows "[/INST]";
//   Mistral  "<s>[INST] user [/INST]assistant</s>[INST] ..." in the style of fmt.mistral, also
//            without a generation prompt;
//   Zephyr   "<|role|>\ncontent</s>\n" per message;
//   DeepSeekR1 "<｜begin▁of▁sentence｜>" + the last system message (join_system: all of them joined
//            with "\n\n"), then "<｜User｜>content" per user message and
//            "<｜Assistant｜>reply<｜end▁of▁sentence｜>" per reply, where a reply loses everything up to
//            its last "</think>"; the generation prompt is "<｜Assistant｜>", with "<think>\n" after
//            it for think_prompt. With assistant_after_user, "<｜User｜>content<｜Assistant｜>" and
//            "reply<｜end▁of▁sentence｜>", and the generation prompt "<｜Assistant｜>" only where the
//            last message other than a system message is a reply (or there is none);
//   None     the contents concatenated.
// The default system prompt opens the conversation when its first message is not a system
// message. add_generation_prompt appends the header of an assistant turn. Llama2 and Mistral
// take user and assistant messages in turn after an optional system message (the v0.1 and v0.2
// templates as released take none), and Zephyr and DeepSeekR1 take the roles system, user and
// assistant in any order; anything else throws ChatTemplateError, as the templates raise (Llama
// 2's and Zephyr's templates would drop a message of another role without a word; DeepSeek-R1's
// renders tool messages, which this format does not). Throws ChatTemplateError when the format
// writes BOS or EOS text and fmt holds none.
std::string render_chat(const ChatFormat& fmt, const std::vector<ChatMessage>& msgs,
                        bool add_generation_prompt);
// render_chat with tools. Only a ChatML format with fmt.tools renders tools, tool calls and tool
// messages, as Qwen2.5's template does:
//   - with tools, the system turn is the system message (or the default prompt), then
//     "\n\n# Tools\n\n…<tools>", each tool's JSON on a line of its own, and "</tools>" with the
//     template's instructions for <tool_call> replies;
//   - an assistant message with tool calls is "<|im_start|>assistant", "\n" + content where there
//     is content, then "\n<tool_call>\n{\"name\": \"NAME\", \"arguments\": ARGS}\n</tool_call>"
//     per call, then "<|im_end|>\n";
//   - a run of tool messages is one user turn: "<|im_start|>user", then
//     "\n<tool_response>\ncontent\n</tool_response>" per message, then "<|im_end|>\n".
// Any other format (or ChatML without fmt.tools) throws ChatTemplateError for tools, tool calls
// and tool messages, and with fmt.tools a role other than system, user, assistant and tool
// throws too (the template would drop that message without a word).
std::string render_chat_request(const ChatFormat& fmt, const ChatRequest& request, bool add_generation_prompt);

// Whether render_chat_request renders tools, tool calls and tool messages in this format.
bool renders_tools(const ChatFormat& fmt);

// JSON text as Hugging Face's tojson filter writes it for chat templates (Python's json.dumps
// with ensure_ascii=False): ", " and ": " between items, keys in the order given, non-ASCII text
// as it is. Throws ChatTemplateError when `json_text` is not JSON or nests more than 256 levels
// deep (the writer recurses once per level).
std::string chat_json_text(const std::string& json_text);

// Reads a conversation from JSON text: an array of messages, or an object with "messages" and,
// optionally, "tools" (an array), as an OpenAI-style chat request has them. A message is an object
// with "role" (system, user, assistant or tool) and "content" (a string; an assistant message with
// "tool_calls" may have none or null); each tool call is {"function": {"name", "arguments"}} (or
// {"name", "arguments"}), the arguments any JSON value nested at most 256 levels deep. Throws
// ChatTemplateError naming `what` (the file) and the field for anything else.
ChatRequest parse_chat_request(const std::string& json_text, const std::string& what);
// The assistant message a reply stands for, as a conversation holds it. Where the format renders
// tools, a reply made of optional text and then one or more blocks
// "<tool_call>\n{\"name\": …, \"arguments\": …}\n</tool_call>" (whitespace between and after
// them) is that text, its trailing whitespace removed, with those tool calls; any other reply (a
// block whose JSON is not such an object, text after a block) is plain content, as it is.
ChatMessage assistant_reply(const ChatFormat& fmt, const std::string& text);
// A message as OpenAI-style JSON text ({"role", "content", "tool_calls": [{"type": "function",
// "function": {"name", "arguments"}}]}), which parse_chat_request reads back; bytes that are not
// UTF-8 become U+FFFD.
std::string chat_message_json(const ChatMessage& m);

// Reads a JSON array of tool definitions (each kept as chat_json_text writes it); throws
// ChatTemplateError naming `what` otherwise.
std::vector<std::string> parse_chat_tools(const std::string& json_text, const std::string& what);
}  // namespace tllm
