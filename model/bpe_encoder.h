// Byte-level BPE (GGUF tokenizer.ggml.model "gpt2"), as llama.cpp's llm_tokenizer_bpe:
//   1. The pre-tokenizer named by vocab.pre_tokenizer splits the text into words.
//   2. Each byte of a word becomes the token of its GPT-2 byte character (bytes
//      0x21-0x7E, 0xA1-0xAC, 0xAE-0xFF stand for themselves, the other 68 for
//      U+0100.. in byte order). With the pre-tokenizer's ignore_merges (Llama 3), a
//      word whose byte characters form a token is that one token.
//   3. Repeatedly merge the adjacent pair with the lowest merge rank (ties: leftmost).
//      A merge "a b" applies when a, b and ab are all tokens; the first occurrence of a
//      repeated rule wins.
//   4. The remaining symbols are the ids; a byte whose character is no token (only in
//      broken vocabularies) is dropped, as llama.cpp does.
// Decoded pieces: normal tokens map their characters back to bytes, user-defined
// tokens are their text verbatim, every other kind "".
//
// Loading is O(vocab + merges) with no allocation per merge: merge rules are keyed
// on the pair of token ids (looked up through string_view keys into the vocabulary).
#ifndef KVSERVE_MODEL_BPE_ENCODER_H_
#define KVSERVE_MODEL_BPE_ENCODER_H_

#include <array>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "model/pre_tokenizer.h"
#include "model/text_encoder.h"
#include "model/vocabulary.h"

namespace kvserve::model {

class BpeEncoder final : public TextEncoder {
 public:
  // `vocab` must outlive the encoder. INVALID_ARGUMENT for an unknown pre-tokenizer
  // (naming it) or when vocab.merges is empty.
  static absl::StatusOr<std::unique_ptr<BpeEncoder>> Create(const Vocabulary& vocab);

  // O(n log n) in the text length; scratch memory O(longest word).
  void Encode(std::string_view text, bool at_boundary, std::vector<int32_t>& out) const override;
  std::string DecodedPiece(int32_t id) const override;

  const PreTokenizer& pre_tokenizer() const { return pre_; }
  // Merge rules that could not apply (a side or the result is no token).
  int64_t skipped_merges() const { return skipped_merges_; }

 private:
  struct Merge {
    int32_t rank;
    int32_t result;  // token id of the concatenation
  };
  BpeEncoder(const Vocabulary& vocab, PreTokenizer pre) : vocab_(vocab), pre_(std::move(pre)) {}
  static uint64_t PairKey(int32_t left, int32_t right) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) |
           static_cast<uint32_t>(right);
  }
  // One symbol per byte of a word, in a doubly linked list. Invariant: live symbols
  // are linked in text order; a merged-away symbol has id kGone.
  struct Symbol {
    int32_t id;  // -1: a byte without a token (never merges)
    int32_t prev;
    int32_t next;
  };
  struct Bigram {
    int32_t rank;
    int32_t left;
    int32_t left_id;  // ids when queued: the entry is stale once either changed
    int32_t right_id;
  };
  // Buffers reused across the words of one Encode call.
  struct Scratch {
    std::string mapped;
    std::vector<Symbol> symbols;
    std::vector<Bigram> heap;
  };
  static constexpr int32_t kGone = -2;

  int32_t FindToken(std::string_view text) const;
  void EncodeWord(std::string_view word, Scratch& scratch, std::vector<int32_t>& out) const;

  const Vocabulary& vocab_;
  PreTokenizer pre_;
  absl::flat_hash_map<absl::string_view, int32_t> token_ids_;  // any kind; the last id wins
  absl::flat_hash_map<uint64_t, Merge> merges_;                // PairKey(left, right)
  std::array<std::string, 256> byte_chars_;            // byte -> UTF-8 of its GPT-2 character
  std::array<int32_t, 256> byte_tokens_{};             // byte -> token of its character, or -1
  absl::flat_hash_map<uint32_t, uint8_t> char_bytes_;  // GPT-2 character -> byte
  int64_t skipped_merges_ = 0;
};

}  // namespace kvserve::model

#endif  // KVSERVE_MODEL_BPE_ENCODER_H_
