// Unicode character classes for the BPE pre-tokenizers, from ICU (Debian libicu-dev),
// so no category range is typed by hand here.
#ifndef KVSERVE_MODEL_UNICODE_CLASS_H_
#define KVSERVE_MODEL_UNICODE_CLASS_H_

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

namespace kvserve::model {

// General category group (the first letter of the Unicode general category), as the
// pre-tokenizer regexes' \p{L}, \p{N}, \p{P}, \p{M}, \p{S} see it.
enum class CharGroup : uint8_t {
  kLetter,       // L*
  kNumber,       // N*
  kPunctuation,  // P*
  kMark,         // M*
  kSymbol,       // S*
  kSeparator,    // Z*
  kOther,        // C* (controls, format, unassigned, private use)
};

// One character of a text: a well-formed UTF-8 sequence, or one byte of an ill-formed
// one (classified as U+FFFD, which is what llama.cpp substitutes for it).
struct TextChar {
  uint32_t offset;  // byte offset in the text
  uint8_t len;      // bytes, 1..4
  CharGroup group;
  bool whitespace;  // Unicode White_Space property (regex \s)
  // The code point a regex literal or range compares against: the character itself,
  // U+FFFD for an ill-formed byte, and 0x0B for non-ASCII whitespace (llama.cpp
  // replaces those before running std::wregex, so `[　-。]` never matches U+3000).
  uint32_t cp;
};

// Splits `text` into characters and classifies each. Pure and thread-safe; O(n).
// Precondition: text.size() < 2^32.
std::vector<TextChar> ClassifyText(std::string_view text);

// Simple lowercase mapping of one code point (ICU u_tolower).
uint32_t ToLower(uint32_t cp);

}  // namespace kvserve::model

#endif  // KVSERVE_MODEL_UNICODE_CLASS_H_
