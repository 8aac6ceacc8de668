// The part of a tokenizer that differs between vocabulary kinds: turning plain text
// (no special tokens in it) into ids, and the bytes each token stands for.
// model/tokenizer.h owns one and does everything the kinds share (special tokens,
// BOS/EOS, decoding, UTF-8 repair).
#ifndef KVSERVE_MODEL_TEXT_ENCODER_H_
#define KVSERVE_MODEL_TEXT_ENCODER_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace kvserve::model {

// Implementations are immutable after creation and thread-safe.
class TextEncoder {
 public:
  virtual ~TextEncoder() = default;

  // Appends the ids of `text` to `out`. Never fails: every byte is representable.
  // `at_boundary` is true when `text` starts the prompt or follows a special token
  // (where SentencePiece puts its dummy-prefix space).
  virtual void Encode(std::string_view text, bool at_boundary, std::vector<int32_t>& out) const = 0;

  // The bytes token `id` stands for in decoded text ("" for control, unknown and
  // unused tokens). Precondition: 0 <= id < vocabulary size.
  virtual std::string DecodedPiece(int32_t id) const = 0;
};

}  // namespace kvserve::model

#endif  // KVSERVE_MODEL_TEXT_ENCODER_H_
