// The two tokenizer models of GGUF files, reproducing the reference tokenizers id for id:
//  - byte-level BPE (tokenizer.ggml.model "gpt2": GPT-2, Qwen2/Qwen2.5, SmolLM/SmolLM2, Llama 3,
//    the DeepSeek-R1 distills, and the Tekken tokenizer of Mistral Nemo, Pixtral, Ministral and
//    Mistral Small 3);
//  - SentencePiece BPE (tokenizer.ggml.model "llama": Llama 2, TinyLlama, Mistral v0.1-v0.3), in
//    tokenizer_spm.cpp: each run of text between special tokens gets a leading space (the dummy
//    prefix) and has its spaces written as U+2581; its characters are then merged pairwise, the pair
//    whose union is the vocabulary piece of highest score first (leftmost on ties), and a character
//    the vocabulary lacks becomes its bytes' <0xXX> tokens (the unknown token without them).
//
// Byte-level BPE encoding runs in four stages:
//   1. special tokens: control (type 3) and user-defined (type 4) tokens are cut out of the text by
//      leftmost-longest match when parse_special is set; otherwise they are ordinary text;
//   2. normalisation: NFC for the Qwen2 pre-tokenizer and its alias deepseek-r1-qwen (as their
//      reference tokenizers apply), none for the others;
//   3. pre-tokenization: a hand-written scanner per model family, equivalent to that family's split
//      regex (see split_* in tokenizer.cpp for the regexes);
//   4. BPE: each piece's bytes become byte-level symbols, merged by rank (a hash map of merges and a
//      priority queue over a linked list of symbols).
// Invalid UTF-8 never fails: each invalid byte stands alone (a character of no class) and encodes to
// its byte token, so decode(encode(x)) returns x's bytes exactly (NFC(x) for Qwen2; for SentencePiece
// too, decode dropping the dummy prefix's space at the start).
//
// encode() adds no BOS: callers that want one check add_bos() and prepend bos_id().
// A Tokenizer is immutable after loading; encode/decode are const and safe to call from many threads.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace tllm {

class GgufFile;

// Raised for a missing, malformed or unsupported tokenizer; the message is one line and names the
// file and key (or the argument) at fault.
class TokenizerError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Token types as stored in tokenizer.ggml.token_type (llama.cpp numbering).
enum class TokenType : int32_t {
  Undefined = 0,
  Normal = 1,
  Unknown = 2,
  Control = 3,
  UserDefined = 4,
  Unused = 5,
  Byte = 6,
};

// Ids of the special tokens; -1 where the vocabulary has none. add_bos unset means the default of
// the tokenizer (true for SentencePiece and the llama-bpe, deepseek-r1-qwen and tekken
// pre-tokenizers, false otherwise).
struct SpecialTokenIds {
  int32_t unk = -1;  // SentencePiece: stands for a character with neither a piece nor byte tokens
  int32_t bos = -1;
  int32_t eos = -1;
  int32_t eot = -1;  // end of turn; found by text (<|im_end|>, <|eot_id|>, ...) when left at -1
  int32_t eom = -1;  // end of message (Llama 3.1 tool calls)
  int32_t pad = -1;
  std::optional<bool> add_bos;
};

// A token added on top of a Hugging Face vocab.json (tokenizer.json "added_tokens").
struct AddedToken {
  std::string text;
  int32_t id = -1;
  TokenType type = TokenType::Control;
};

class Tokenizer {
 public:
  ~Tokenizer();
  Tokenizer(const Tokenizer&) = delete;
  Tokenizer& operator=(const Tokenizer&) = delete;

  // Reads tokenizer.ggml.{model,pre,tokens,token_type,merges,*_token_id,add_bos_token} ("gpt2"),
  // or tokenizer.ggml.{model,tokens,scores,token_type,*_token_id,add_bos_token,add_space_prefix}
  // ("llama"). Throws TokenizerError "<path>: <key> ..." for a missing key, another model, an
  // unknown pre-tokenizer (listing the supported ones) or an out-of-range special id.
  static std::unique_ptr<Tokenizer> from_gguf(const GgufFile& f);

  // A SentencePiece BPE vocabulary: pieces in SentencePiece form ("▁the", "<0x0A>"), their scores
  // (higher merges first) and types (empty: all Normal). The special ids default to llama.cpp's
  // for this model (unk 0, bos 1, eos 2) where left at -1 and the vocabulary is large enough.
  static std::unique_ptr<Tokenizer> from_spm_vocab(std::vector<std::string> pieces,
                                                   std::vector<float> scores,
                                                   std::vector<int32_t> token_types,
                                                   const SpecialTokenIds& special = {},
                                                   bool add_space_prefix = true);

  // Builds from vocabulary arrays. token_types may be empty (all Normal); merges are "left right"
  // strings in rank order; pre is a pre-tokenizer name (see supported_pre_tokenizers()).
  static std::unique_ptr<Tokenizer> from_vocab(std::vector<std::string> tokens,
                                               std::vector<int32_t> token_types,
                                               std::vector<std::string> merges,
                                               const std::string& pre,
                                               const SpecialTokenIds& special = {});

  // Builds from a Hugging Face folder holding vocab.json and merges.txt, plus `added` tokens (for
  // Qwen2: <|endoftext|> 151643, <|im_start|> 151644, <|im_end|> 151645 as Control).
  static std::unique_ptr<Tokenizer> from_hf_folder(const std::string& dir, const std::string& pre,
                                                   const std::vector<AddedToken>& added,
                                                   const SpecialTokenIds& special = {});

  // The byte-level pre-tokenizer names tiny-llm reads ("qwen2", "smollm", "gpt-2", ...), and the
  // same joined by ", " for error messages and --help.
  static std::vector<std::string> pre_tokenizer_names();
  static std::string supported_pre_tokenizers();

  std::vector<int32_t> encode(const std::string& text, bool parse_special = true) const;
  // The pieces stages 2-3 cut plain text into (no special tokens), as raw bytes; BPE then encodes
  // each piece on its own. For inspecting and testing the pre-tokenizer. SentencePiece has no
  // pre-tokenizer: its one piece is the text with the dummy prefix.
  std::vector<std::string> pre_tokenize(const std::string& text) const;
  // The bytes the ids stand for (byte-level mapping undone, U+2581 as a space, <0xXX> as its byte;
  // special and unknown tokens as their text, unused ones as nothing, as llama.cpp writes them).
  // SentencePiece: a first token that opens with the dummy prefix's space loses it. Throws
  // TokenizerError for an id outside [0, n_vocab).
  std::string decode(const std::vector<int32_t>& ids) const;
  // The bytes one token stands for, as in decode() but with every space kept (for streaming).
  std::string token_bytes(int32_t id) const;
  // The token as written in the vocabulary (byte-level form, e.g. "ĠHello"; SentencePiece "▁Hello").
  const std::string& token_text(int32_t id) const;
  TokenType token_type(int32_t id) const;
  // Token of a single byte, -1 when the vocabulary has none for it (byte-level BPE drops such bytes;
  // SentencePiece writes the unknown token for the character).
  int32_t byte_token(uint8_t byte) const { return byte_token_[byte]; }

  int32_t n_vocab() const { return static_cast<int32_t>(tokens_.size()); }
  int32_t bos_id() const { return bos_; }
  int32_t eos_id() const { return eos_; }
  int32_t eot_id() const { return eot_; }
  int32_t unk_id() const { return unk_; }
  bool add_bos() const { return add_bos_; }
  bool is_sentencepiece() const { return spm_; }
  // "gpt2" or "llama", as tokenizer.ggml.model names the two.
  const char* model_name() const { return spm_ ? "llama" : "gpt2"; }
  // eos, eot, eom and the control tokens that end a turn in the supported chat formats.
  bool is_end_of_generation(int32_t id) const;
  // Id of the token whose vocabulary text is exactly `text` (see token_text), -1 if absent.
  int32_t find_token(const std::string& text) const;
  // The pre-tokenizer's name; "" for SentencePiece, which has none.
  const std::string& pre_tokenizer() const { return pre_name_; }

 private:
  enum class Pre { Gpt2, SmolLM, Qwen2, Llama3, Tekken };  // numbered as kPreNames in tokenizer.cpp
  struct MergeTable;  // open-addressing map (left id, right id) -> (rank, merged id)
  struct Workspace;   // per-call buffers of encode()

  Tokenizer();
  void build(std::vector<std::string> tokens, std::vector<int32_t> token_types,
             const std::vector<std::string>& merges, const std::string& pre,
             const SpecialTokenIds& special);
  // The parts of loading both models share: types, the text index, special-token matching and ids.
  void build_common(std::vector<std::string> tokens, std::vector<int32_t> token_types,
                    const SpecialTokenIds& special);
  void build_spm(std::vector<std::string> pieces, std::vector<float> scores,
                 std::vector<int32_t> token_types, const SpecialTokenIds& special,
                 bool add_space_prefix);
  void check_id(int32_t id) const;
  // Normalises text and fills ws.ends; returns the text the piece ends index (ws.offs into it).
  std::string_view split_text(std::string_view text, Workspace& ws) const;
  void encode_text(std::string_view text, Workspace& ws, std::vector<int32_t>& out) const;
  void bpe_piece(std::string_view piece, Workspace& ws, std::vector<int32_t>& out) const;
  // SentencePiece: the text with the dummy prefix and U+2581 for spaces.
  std::string spm_escape(std::string_view text) const;
  void spm_encode_text(std::string_view text, std::vector<int32_t>& out) const;
  // The ids of a symbol left after merging: its piece unless Unused, else the two symbols it was
  // merged from (`splits`), else its bytes' tokens (the unknown token where those are missing).
  using SpmSplits = std::unordered_map<std::string_view, std::pair<std::string_view, std::string_view>>;
  void spm_resegment(std::string_view symbol, const SpmSplits& splits, std::vector<int32_t>& out) const;

  std::vector<std::string> tokens_;  // (n_vocab) vocabulary text, byte-level form
  std::vector<TokenType> types_;     // (n_vocab)
  std::string bytes_blob_;           // raw bytes of every token, concatenated
  std::vector<uint32_t> bytes_off_;  // (n_vocab + 1) offsets into bytes_blob_
  std::unordered_map<std::string, int32_t> text_to_id_;
  std::unique_ptr<MergeTable> merges_;  // byte-level BPE only
  // SentencePiece only: (n_vocab) piece scores, and the pieces merging may produce, by text (those
  // of type Normal, UserDefined and Unused; an Unused piece is split again before output).
  std::vector<float> scores_;
  std::unordered_map<std::string_view, int32_t> spm_mergeable_;  // keys view tokens_
  bool spm_ = false;
  bool add_space_prefix_ = false;
  std::array<int32_t, 256> byte_token_{};
  // Special tokens that may be cut out of text, by first byte, longest first.
  std::array<std::vector<int32_t>, 256> special_by_first_byte_;
  bool has_special_ = false;

  std::string pre_name_;
  Pre pre_ = Pre::Gpt2;
  bool ignore_merges_ = false;  // Llama 3, Tekken: a piece that is itself a token is emitted whole
  int32_t unk_ = -1, bos_ = -1, eos_ = -1, eot_ = -1, eom_ = -1, pad_ = -1;
  bool add_bos_ = false;
  std::vector<int32_t> end_of_generation_;
};

// Turns a stream of generated ids into printable text: push() returns only complete UTF-8
// characters and holds back the leading bytes of a character whose remaining bytes have not been
// generated yet (a Chinese character split over two tokens is returned once, whole). Bytes that can
// never complete a character are returned as they are.
class StreamDecoder {
 public:
  explicit StreamDecoder(const Tokenizer& tok) : tok_(tok) {}
  std::string push(int32_t id);
  // Everything still held back (an incomplete character at the end of generation).
  std::string flush();

 private:
  const Tokenizer& tok_;
  std::string pending_;
};

}  // namespace tllm
