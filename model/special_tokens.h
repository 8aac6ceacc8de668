// Splits text on the strings of special tokens before it reaches a TextEncoder, as
// llama.cpp's tokenizer_st_partition does.
#ifndef KVSERVE_MODEL_SPECIAL_TOKENS_H_
#define KVSERVE_MODEL_SPECIAL_TOKENS_H_

#include <cstdint>
#include <string_view>
#include <vector>

#include "model/vocabulary.h"

namespace kvserve::model {

// A piece of the input: plain text (token == -1) or one special token.
struct TextPart {
  std::string_view text;
  int32_t token = -1;
};

// Immutable after construction; thread-safe.
//
// User-defined tokens are always matched (Hugging Face and llama.cpp pre-split
// them from any text). Control and unknown tokens are matched only with
// parse_special: text from users is never read as control tokens unless asked.
// Tokens are tried longest string first (ties: lower id first); each splits every
// remaining text part at all its non-overlapping occurrences, leftmost first. A token
// in vocab.rstrip_ids swallows the ASCII whitespace that follows it in its part.
class SpecialTokenSplitter {
 public:
  explicit SpecialTokenSplitter(const Vocabulary& vocab);

  // Appends the parts of `text` in order; the texts of the parts and the strings of
  // the tokens concatenate to `text` less the whitespace rstrip tokens swallowed. Empty text gives
  // no part. O(n * t) for n bytes and t candidate tokens.
  void Split(std::string_view text, bool parse_special, std::vector<TextPart>& out) const;

 private:
  struct Candidate {
    std::string_view text;  // view into the vocabulary the tokenizer owns
    int32_t id;
    bool user_defined;
    bool rstrip;
  };
  std::vector<Candidate> candidates_;  // longest first
};

}  // namespace kvserve::model

#endif  // KVSERVE_MODEL_SPECIAL_TOKENS_H_
