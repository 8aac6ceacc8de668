// Pre-tokenizers of byte-level BPE vocabularies: split text into words before merging,
// as named by GGUF's tokenizer.ggml.pre and applied by llama.cpp (src/llama-vocab.cpp
// llm_tokenizer_bpe, src/unicode.cpp unicode_regex_split).
//
// A pre-tokenizer is a list of regex steps. Each step splits every current word
// further: the step's matches (leftmost, non-overlapping, ECMAScript semantics) and
// the text between them become words. Supported names and their steps:
//   llama-bpe, llama3, llama-v3  (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|
//                                \p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
//   qwen2, deepseek-r1-qwen      the same with \p{N} (one digit) for \p{N}{1,3}
//   gpt-2, mpt                   GPT-2's 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+|
//                                ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//   starcoder, refact            \p{N}, then GPT-2's
//   falcon                       [\p{P}$+<=>^~|]+, then GPT-2's, then [0-9][0-9][0-9]
//   default (also a gpt2 vocabulary without tokenizer.ggml.pre, as in llama.cpp)
//                                [\p{P}$+<=>^~|]+, GPT-2's, \p{N}+, [0-9][0-9][0-9]
//   deepseek-coder               [\r\n], \s?\p{L}+, \s?\p{P}+, [一-龥ࠀ-一가-퟿]+, \p{N}
//   deepseek-llm                 [\r\n], \s?[<Latin/Greek/Cyrillic/... letters>]+,
//                                \s?[!-/:-~！-／：-～‘-‟　-。]+, \s+$,
//                                [一-龥ࠀ-一가-퟿]+, \p{N}+
// Categories (\p{..}, \s = White_Space) come from ICU (unicode_class.h). Explicit
// ranges are part of the model's own regex (from its tokenizer.json), not categories.
// As in llama.cpp, non-ASCII whitespace compares as U+000B against explicit ranges,
// and an ill-formed UTF-8 byte is classified as U+FFFD but kept as its own byte (so
// byte-level BPE still encodes it losslessly; llama.cpp would encode U+FFFD instead).
#ifndef KVSERVE_MODEL_PRE_TOKENIZER_H_
#define KVSERVE_MODEL_PRE_TOKENIZER_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "model/unicode_class.h"

namespace kvserve::model {

// A regex character class over TextChar: categories, \s, explicit code point ranges.
struct CharClass {
  uint8_t groups = 0;       // bit (1 << CharGroup) for each \p{..} in the class
  bool whitespace = false;  // \s
  std::vector<std::pair<uint32_t, uint32_t>> ranges;  // inclusive, compared with TextChar::cp
  bool negated = false;

  bool Matches(const TextChar& c) const;
};

// One step; see the header comment. `kind` picks the matcher.
struct PreTokenizeStep {
  enum class Kind {
    kGpt2,                // GPT-2's regex
    kLlama3,              // Llama 3's regex with \p{N}{1,max_digits}
    kClass,               // [\s?] class, repeated once, one-or-more, or exactly three times
    kTrailingWhitespace,  // \s+$ (end of the current word)
  };
  enum class Repeat { kOnce, kOneOrMore, kThree };
  Kind kind;
  int max_digits = 3;
  bool optional_whitespace_prefix = false;
  CharClass cls;
  Repeat repeat = Repeat::kOneOrMore;
};

// Immutable; thread-safe.
class PreTokenizer {
 public:
  // INVALID_ARGUMENT naming `name` when it is not one of the names above.
  static absl::StatusOr<PreTokenizer> Create(std::string_view name);

  // Appends to `words` the words of `text` (views into it, non-empty, tiling it in
  // order). O(n) per step for text of n bytes.
  void Split(std::string_view text, std::vector<std::string_view>& words) const;

  // Llama 3 looks a whole word up in the vocabulary before merging (llama.cpp's
  // ignore_merges): a word that is a token stays one token.
  bool ignore_merges() const { return ignore_merges_; }
  const std::string& name() const { return name_; }

 private:
  PreTokenizer(std::string name, std::vector<PreTokenizeStep> steps, bool ignore_merges)
      : name_(std::move(name)), steps_(std::move(steps)), ignore_merges_(ignore_merges) {}

  std::string name_;
  std::vector<PreTokenizeStep> steps_;
  bool ignore_merges_;
};

}  // namespace kvserve::model

#endif  // KVSERVE_MODEL_PRE_TOKENIZER_H_
