// The token table a tokenizer works from: pieces, merge scores, token kinds, special ids.
#ifndef KVSERVE_MODEL_VOCABULARY_H_
#define KVSERVE_MODEL_VOCABULARY_H_

#include <cstdint>
#include <string>
#include <vector>

namespace kvserve::model {

// SentencePiece token kinds, numbered as GGUF's tokenizer.ggml.token_type.
enum class TokenKind : int32_t {
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,  // <s>, </s>: never produced from plain text
  kUserDefined = 4,
  kUnused = 5,
  kByte = 6,  // <0xNN> byte fallback
};

struct Vocabulary {
  std::vector<std::string> pieces;  // [vocab]; SentencePiece spaces are U+2581 ("▁")
  std::vector<float> scores;        // [vocab]; higher merges first
  std::vector<TokenKind> kinds;     // [vocab]
  int32_t bos_id = 1;
  int32_t eos_id = 2;
  int32_t unk_id = 0;
  bool add_bos = true;           // prepend BOS when encoding a prompt
  bool add_space_prefix = true;  // prepend "▁" to the text (SentencePiece dummy prefix)
  // GGUF metadata strings, as read (for ModelInfo and chat): tokenizer.ggml.model,
  // tokenizer.ggml.pre ("" when absent) and tokenizer.chat_template ("" when absent).
  std::string tokenizer_model = "llama";
  std::string tokenizer_pre;
  std::string chat_template;

  int32_t size() const { return static_cast<int32_t>(pieces.size()); }
};

}  // namespace kvserve::model

#endif  // KVSERVE_MODEL_VOCABULARY_H_
