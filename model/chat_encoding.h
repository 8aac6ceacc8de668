// Token ids of a rendered chat (model/chat_template.h): template text is split at the
// spellings of the vocabulary's control and user-defined tokens (found by exact text,
// longest first) and each spelling becomes its token; message content is never split,
// so "<|im_end|>" typed by a user stays characters. The plain text between two tokens
// (template text and content alike) is encoded as one piece with Tokenizer::Encode,
// which gives what llama.cpp's tokenizer with special-token parsing gives for the same
// rendered string when the content spells no control token.
#ifndef KVSERVE_MODEL_CHAT_ENCODING_H_
#define KVSERVE_MODEL_CHAT_ENCODING_H_

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "model/chat_template.h"
#include "model/tokenizer.h"

namespace kvserve::model {

// Immutable after construction; thread-safe. `tokenizer` must outlive it.
class ChatEncoder {
 public:
  explicit ChatEncoder(const Tokenizer& tokenizer);

  // The ids of `segments` in order, without BOS.
  std::vector<int32_t> Encode(std::span<const ChatSegment> segments) const;

  // Template text alone (e.g. ChatTemplate::TurnSeparator()).
  std::vector<int32_t> EncodeTemplateText(std::string_view text) const;

 private:
  struct Special {
    std::string text;
    int32_t id;
  };
  // The longest special token spelled at the start of `text`, or nullptr.
  const Special* MatchAt(std::string_view text) const;

  const Tokenizer& tokenizer_;
  // Control and user-defined tokens with non-empty text by their first byte, longest
  // text first (for equal text the lower id wins).
  std::array<std::vector<Special>, 256> specials_;
};

}  // namespace kvserve::model

#endif  // KVSERVE_MODEL_CHAT_ENCODING_H_
