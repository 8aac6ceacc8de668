// SentencePiece BPE (GGUF tokenizer.ggml.model "llama"), following llama.cpp's
// llm_tokenizer_spm and llama2.c's encode():
//   1. When vocab.add_space_prefix and the text is at a boundary (prompt start or
//      after a special token), prepend " ".
//   2. Replace every ' ' (0x20) with "▁" (U+2581).
//   3. Split into UTF-8 characters. A character is a complete, well-formed UTF-8
//      sequence; any other byte is a one-byte symbol of its own (llama2.c does the
//      same in effect; llama.cpp groups by the lead byte only, which gives the same
//      tokens for valid UTF-8).
//   4. Repeatedly merge the adjacent pair whose concatenation is a mergeable piece
//      with the highest score; ties go to the leftmost pair.
//   5. Each final symbol becomes its piece id, or, when the symbol is not a piece,
//      one byte-fallback token <0xNN> per byte.
// Mergeable pieces are those of kind kNormal and kUserDefined. When two mergeable
// pieces have the same text, the lower id wins.
// Decoded pieces: byte tokens give their byte, normal pieces their text with "▁"
// turned into ' ', user-defined pieces their text verbatim, every other kind "".
#ifndef KVSERVE_MODEL_SPM_ENCODER_H_
#define KVSERVE_MODEL_SPM_ENCODER_H_

#include <array>
#include <memory>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "model/text_encoder.h"
#include "model/vocabulary.h"

namespace kvserve::model {

class SpmEncoder final : public TextEncoder {
 public:
  // `vocab` must outlive the encoder. INVALID_ARGUMENT when a kByte piece is not
  // "<0xNN>" or repeats a byte, when a score is NaN, or when one of the 256
  // byte-fallback tokens is missing (the message names it).
  static absl::StatusOr<std::unique_ptr<SpmEncoder>> Create(const Vocabulary& vocab);

  // O(n log n) time in the text length n and about 100 bytes of scratch memory per
  // input byte.
  void Encode(std::string_view text, bool at_boundary, std::vector<int32_t>& out) const override;
  std::string DecodedPiece(int32_t id) const override;

 private:
  explicit SpmEncoder(const Vocabulary& vocab) : vocab_(vocab) {}

  const Vocabulary& vocab_;
  // Mergeable piece text -> id (kNormal and kUserDefined only).
  absl::flat_hash_map<std::string, int32_t> piece_ids_;
  std::array<int32_t, 256> byte_ids_{};  // byte value -> id of its <0xNN> token
};

}  // namespace kvserve::model

#endif  // KVSERVE_MODEL_SPM_ENCODER_H_
