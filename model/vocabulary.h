// The token table a tokenizer works from: pieces, merge scores or merge rules, token
// kinds, special ids and the encoding flags the file declares.
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

// Which algorithm turns text into pieces (GGUF tokenizer.ggml.model).
enum class TokenizerModel {
  kSentencePiece,     // "llama": score-ordered merges over characters, byte fallback
  kBytePairEncoding,  // "gpt2": byte-level BPE, rank-ordered merges after a pre-tokenizer
};

struct Vocabulary {
  TokenizerModel model = TokenizerModel::kSentencePiece;
  std::vector<std::string> pieces;  // [vocab]; SentencePiece spaces are U+2581 ("▁"),
                                    // byte-level BPE bytes are GPT-2's byte characters
  std::vector<float> scores;        // [vocab]; higher merges first (SentencePiece only)
  std::vector<TokenKind> kinds;     // [vocab]
  // Byte-level BPE only: merge rules "left right", best (rank 0) first, and the
  // pre-tokenizer name (GGUF tokenizer.ggml.pre, e.g. "llama-bpe"; see pre_tokenizer.h).
  std::vector<std::string> merges;
  std::string pre_tokenizer;
  // Special tokens that swallow the ASCII whitespace after them when matched in text
  // (llama.cpp's RSTRIP attribute; set for Phi-3 by VocabularyFromGguf). Sorted.
  std::vector<int32_t> rstrip_ids;
  int32_t bos_id = 1;
  int32_t eos_id = 2;
  int32_t unk_id = 0;            // -1: none
  bool add_bos = true;           // prepend BOS when encoding a prompt
  bool add_eos = false;          // append EOS when encoding a prompt
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
